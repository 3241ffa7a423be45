//! A full disk under the data files: a data-file write or extension that
//! fails with ENOSPC fails its statement (or CHECKPOINT, or the COMMIT of a
//! load that skipped the WAL) with a message naming the file and saying
//! how to fix it; the database keeps running (the buffers stay dirty and
//! are written once there is room), and after a restart nothing committed
//! is lost (the WAL, on another file system here, has it).
//!
//! Two ways: a real full file system, a small tmpfs mounted over the data
//! directory's `base/` (needs root: the test says it is skipped
//! otherwise), where extension runs out of room (eviction and checkpoint
//! writes never do there, since extension allocates every block it adds);
//! and the `buffer-before-write` injection point, which fails the write of
//! a run of dirty pages with ENOSPC, for eviction, a checkpoint and the
//! sync of a table that skipped the WAL.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use aiostore::config::IoMethod;
use aiostore::crashtest::check::{check_storage, Findings};
use aiostore::database::{Database, Session};
use aiostore::heap::Value;
use aiostore::inject::{Injection, BUFFER_BEFORE_WRITE};
use aiostore::sql;
use common::temp_dir;

/// Size of the tmpfs under `base/`: room for the catalog and a small
/// table, not for a load.
const SMALL_BASE: &str = "size=2m";
/// What it is grown to, to recover.
const LARGE_BASE: &str = "size=256m";
/// Rows of the loads that fill it (about 6 MiB of table).
const LOAD_ROWS: i64 = 60_000;

fn settings(method: IoMethod) -> Vec<String> {
    vec![
        format!("io_method={}", method.name()),
        "shared_buffers=512".into(),
        "max_sessions=8".into(),
    ]
}

fn run(s: &mut Session, text: &str) -> Vec<sql::StatementResult> {
    sql::execute(s, text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn err(s: &mut Session, text: &str) -> String {
    match sql::execute(s, text) {
        Ok(_) => panic!("{text}: succeeded"),
        Err(e) => e.to_string(),
    }
}

fn ints(s: &mut Session, text: &str) -> Vec<i64> {
    run(s, text).pop().unwrap().rows[0]
        .iter()
        .map(|v| match v {
            Value::BigInt(x) => *x,
            Value::Integer(x) => i64::from(*x),
            v => panic!("{text}: not an integer: {v:?}"),
        })
        .collect()
}

fn crash(db: Arc<Database>) {
    db.simulate_crash();
    assert_eq!(
        Arc::strong_count(&db),
        1,
        "a session still holds the database"
    );
    drop(db);
}

fn csv(dir: &Path, rows: i64) -> String {
    let path = dir.join(format!("load-{rows}.csv"));
    let text: String = (1..=rows)
        .map(|i| format!("{i},{}\n", "x".repeat(60)))
        .collect();
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

/// Every committed table's map and pages are sound, and files match.
fn storage_is_sound(db: &Arc<Database>) {
    let mut s = db.session().unwrap();
    let tables = db.catalog().tables();
    check_storage(db, &mut s, &tables, &mut Findings::default()).unwrap();
}

/// The message of a data write that failed for lack of room: the error,
/// the file and the fix.
fn says_disk_full(e: &str, rel: u32) {
    assert!(e.contains("No space left on device"), "{e}");
    assert!(e.contains(&format!("base/{rel}")), "names the file: {e}");
    assert!(e.contains("free space on it"), "says the fix: {e}");
}

/// A tmpfs mounted over a directory, unmounted when dropped.
struct Mount(PathBuf);

impl Mount {
    /// Mounts a tmpfs of `options` over `at`, or None (and a note) if this
    /// process may not mount.
    fn tmpfs(at: &Path, options: &str) -> Option<Mount> {
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(at)
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!(
                "skipped: could not mount a tmpfs (root is needed): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return None;
        }
        Some(Mount(at.to_path_buf()))
    }

    fn remount(&self, options: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
            .arg(&self.0)
            .status()
            .unwrap();
        assert!(status.success(), "remount {}", self.0.display());
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A new data directory whose `base/` is a small tmpfs.
fn database_on_small_base() -> Option<(tempfile::TempDir, PathBuf, Mount)> {
    let dir = temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    let base = path.join("base");
    let saved = path.join("base.init");
    std::fs::rename(&base, &saved).unwrap();
    std::fs::create_dir(&base).unwrap();
    let mount = Mount::tmpfs(&base, SMALL_BASE)?;
    for e in std::fs::read_dir(&saved).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), base.join(e.file_name())).unwrap();
    }
    std::fs::remove_dir_all(&saved).unwrap();
    Some((dir, path, mount))
}

/// A load into a full file system fails naming the file, whether its
/// table was created before (logged) or in its transaction (its rollback
/// removes the files again); the database keeps running; a crash, room
/// made, and a restart keep every commit.
fn a_load_onto_a_full_disk_fails_naming_the_file(method: IoMethod) {
    let Some((dir, path, mount)) = database_on_small_base() else {
        return;
    };
    let input = csv(dir.path(), LOAD_ROWS);
    let db = Database::open(&path, &settings(method)).unwrap();
    let mut s = db.session().unwrap();
    run(&mut s, "CREATE TABLE kept (id integer NOT NULL, pad text)");
    run(
        &mut s,
        "INSERT INTO kept SELECT g, 'kept' FROM generate_series(1, 1000) g",
    );
    let rel = db.catalog().table("kept").unwrap().heap.rel;
    let e = err(&mut s, &format!("COPY kept FROM '{input}' (FORMAT csv)"));
    says_disk_full(&e, rel);
    // Still running: reads, and a commit that needs no new page.
    assert_eq!(ints(&mut s, "SELECT count(*) FROM kept"), vec![1000]);
    run(&mut s, "DELETE FROM kept WHERE id = 1000");
    // A load into a table of its own transaction: the same failure, and
    // the rollback removes the table and its files.
    run(&mut s, "BEGIN");
    run(
        &mut s,
        "CREATE TABLE loaded (id integer NOT NULL, pad text)",
    );
    let loaded = db
        .catalog()
        .table_for("loaded", s.current_xid())
        .unwrap()
        .heap
        .rel;
    let e = err(&mut s, &format!("COPY loaded FROM '{input}' (FORMAT csv)"));
    says_disk_full(&e, loaded);
    run(&mut s, "ROLLBACK");
    assert!(!path.join("base").join(loaded.to_string()).exists());
    assert!(db.catalog().table("loaded").is_err());
    drop(s);
    crash(db);
    mount.remount(LARGE_BASE);
    let db = Database::open(&path, &settings(method)).unwrap();
    let mut s = db.session().unwrap();
    assert_eq!(
        ints(&mut s, "SELECT count(*), max(id) FROM kept"),
        vec![999, 999]
    );
    // With room, the same load goes through.
    run(&mut s, &format!("COPY kept FROM '{input}' (FORMAT csv)"));
    assert_eq!(
        ints(&mut s, "SELECT count(*) FROM kept"),
        vec![999 + LOAD_ROWS]
    );
    drop(s);
    storage_is_sound(&db);
    drop(db);
    drop(mount);
}

/// Writes of data pages failing with ENOSPC (injected): eviction during a
/// load fails the load; CHECKPOINT fails and the database keeps running
/// (the pages stay dirty); the COMMIT of a load that skipped the WAL
/// fails and rolls back; once writes succeed again a checkpoint goes
/// through; and a crash while they fail loses no commit.
fn data_writes_failing_with_enospc_fail_the_statement(method: IoMethod) {
    let dir = temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    let input = csv(dir.path(), LOAD_ROWS);
    let db = Database::open(&path, &settings(method)).unwrap();
    let points = Arc::clone(db.aio());
    let full = || Injection::rewrite_result(-i64::from(libc::ENOSPC));
    let mut s = db.session().unwrap();
    run(&mut s, "CREATE TABLE t (id integer NOT NULL, pad text)");
    run(
        &mut s,
        "INSERT INTO t SELECT g, 'before' FROM generate_series(1, 1000) g",
    );
    run(&mut s, "CHECKPOINT");
    let rel = db.catalog().table("t").unwrap().heap.rel;

    // Eviction: the load's ring comes round and its pages cannot be written.
    points.injections().attach(BUFFER_BEFORE_WRITE, full());
    let e = err(&mut s, &format!("COPY t FROM '{input}' (FORMAT csv)"));
    says_disk_full(&e, rel);
    assert_eq!(ints(&mut s, "SELECT count(*) FROM t"), vec![1000]);
    run(
        &mut s,
        "INSERT INTO t VALUES (1001, 'committed while full')",
    );

    // A checkpoint: fails, and the database goes on.
    let e = err(&mut s, "CHECKPOINT");
    assert!(
        e.contains("No space left on device") && e.contains("free space on it"),
        "{e}"
    );
    assert_eq!(ints(&mut s, "SELECT count(*) FROM t"), vec![1001]);

    // A load that skipped the WAL: its COMMIT writes its pages, fails, and
    // rolls back, leaving no table and no file.
    points.injections().detach(BUFFER_BEFORE_WRITE);
    run(&mut s, "BEGIN");
    run(
        &mut s,
        "CREATE TABLE loaded (id integer NOT NULL, pad text)",
    );
    let loaded = db
        .catalog()
        .table_for("loaded", s.current_xid())
        .unwrap()
        .heap
        .rel;
    run(&mut s, &format!("COPY loaded FROM '{input}' (FORMAT csv)"));
    points.injections().attach(BUFFER_BEFORE_WRITE, full());
    let e = err(&mut s, "COMMIT");
    assert!(e.contains("could not commit: the table \"loaded\""), "{e}");
    assert!(e.contains("rolled back"), "{e}");
    says_disk_full(&e, loaded);
    assert!(db.catalog().table("loaded").is_err());
    assert!(!path.join("base").join(loaded.to_string()).exists());
    assert!(!s.in_transaction_block());

    // Room again: the checkpoint writes what waited.
    points.injections().detach(BUFFER_BEFORE_WRITE);
    run(&mut s, "CHECKPOINT");
    run(&mut s, "INSERT INTO t VALUES (1002, 'after')");

    // Full again, and the process dies before any write succeeds: the
    // WAL has every commit.
    points.injections().attach(BUFFER_BEFORE_WRITE, full());
    run(
        &mut s,
        "UPDATE t SET pad = 'updated while full' WHERE id <= 500",
    );
    assert!(sql::execute(&mut s, "CHECKPOINT").is_err());
    drop(s);
    crash(db);
    let db = Database::open(&path, &settings(method)).unwrap();
    let mut s = db.session().unwrap();
    assert_eq!(
        ints(&mut s, "SELECT count(*), max(id) FROM t"),
        vec![1002, 1002]
    );
    assert_eq!(
        ints(
            &mut s,
            "SELECT count(*) FROM t WHERE pad = 'updated while full'"
        ),
        vec![500]
    );
    drop(s);
    storage_is_sound(&db);
}

for_each_method!(
    a_load_onto_a_full_disk_fails_naming_the_file,
    data_writes_failing_with_enospc_fail_the_statement,
);
