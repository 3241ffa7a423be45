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
use aiostore::database::Database;
use aiostore::inject::{Injection, BUFFER_BEFORE_WRITE};
use aiostore::sql;
use common::{crash, err, ints, run, small_pool_settings, storage_is_sound, temp_dir};

/// Size of the tmpfs under `base/`: room for the catalog and a small
/// table, not for a load.
const SMALL_BASE: &str = "size=2m";
/// What it is grown to, to recover.
const LARGE_BASE: &str = "size=256m";
/// Rows of the loads that fill it (about 6 MiB of table).
const LOAD_ROWS: i64 = 60_000;

fn csv(dir: &Path, rows: i64) -> String {
    let path = dir.join(format!("load-{rows}.csv"));
    let text: String = (1..=rows)
        .map(|i| format!("{i},{}\n", "x".repeat(60)))
        .collect();
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
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
    let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
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
    let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
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
    let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
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
    let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
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

/// Bytes free on the file system holding `path`.
fn free_bytes(path: &Path) -> u64 {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: plain system call filling a zeroed struct we own, with a
    // NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    st.f_bavail as u64 * st.f_frsize as u64
}

/// A full disk under the WAL (no room for the next segment, which is made
/// full of zeros before it is written) stops the database, as a failed
/// WAL write does, naming the file: a commit reported failed must not
/// become durable later. After room is made, a restart keeps every
/// acknowledged commit and nothing else.
fn a_full_disk_under_the_wal_stops_the_database(method: IoMethod) {
    const ROUNDS_MAX: i64 = 20;
    let dir = temp_dir();
    let path = dir.path().join("data");
    std::fs::create_dir(&path).unwrap();
    let Some(mount) = Mount::tmpfs(&path, "size=48m") else {
        return;
    };
    Database::init(&path).unwrap();
    let input = csv(dir.path(), LOAD_ROWS);
    let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
    let mut s = db.session().unwrap();
    run(&mut s, "CREATE TABLE t (id integer NOT NULL, pad text)");
    run(&mut s, &format!("COPY t FROM '{input}' (FORMAT csv)"));
    run(&mut s, "CREATE TABLE acked (n integer)");
    run(&mut s, "CHECKPOINT");
    // Room for the data (all of it allocated already) and a few files,
    // not for a second WAL segment.
    let room = free_bytes(&path);
    let keep = 8 << 20;
    assert!(room > keep, "{room}");
    let filler = std::fs::File::create(path.join("filler")).unwrap();
    filler.set_len(room - keep).unwrap();
    // SAFETY: plain system call on a file we own.
    assert_eq!(
        unsafe {
            libc::fallocate(
                std::os::fd::AsRawFd::as_raw_fd(&filler),
                0,
                0,
                (room - keep) as i64,
            )
        },
        0
    );
    // Each round logs an image of every page of t (the checkpoint moved
    // the redo point) and a record per row, rolls that back, and commits
    // one row, which flushes it all.
    let mut acknowledged = 0;
    let mut failure = None;
    for n in 1..=ROUNDS_MAX {
        let round =
            format!("CHECKPOINT; BEGIN; DELETE FROM t; ROLLBACK; INSERT INTO acked VALUES ({n})");
        match sql::execute(&mut s, &round) {
            Ok(_) => acknowledged = n,
            Err(e) => {
                failure = Some(e.to_string());
                break;
            }
        }
    }
    let e = failure.expect("the WAL never needed a second segment");
    assert!(e.contains("No space left on device"), "{e}");
    assert!(e.contains("stopped"), "the database stops: {e}");
    assert!(
        e.contains(&format!("{}", path.join("wal").display())),
        "names the WAL file: {e}"
    );
    // The round may have failed inside its block.
    let _ = sql::execute(&mut s, "ROLLBACK");
    let again = err(&mut s, "INSERT INTO acked VALUES (1000)");
    assert!(again.contains("stopped"), "{again}");
    drop(s);
    drop(db);
    drop(filler);
    std::fs::remove_file(path.join("filler")).unwrap();
    mount.remount(LARGE_BASE);
    let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
    assert!(db.recovery().is_some());
    let mut s = db.session().unwrap();
    assert_eq!(
        ints(&mut s, "SELECT count(*), max(n) FROM acked"),
        vec![acknowledged, acknowledged]
    );
    assert_eq!(ints(&mut s, "SELECT count(*) FROM t"), vec![LOAD_ROWS]);
    drop(s);
    storage_is_sound(&db);
    drop(db);
    drop(mount);
}

/// A checkpoint that fails (a full disk) after it moved the redo point
/// never wrote its control file: recovery starts at the previous
/// checkpoint, so the segments from there on must not be recycled by the
/// WAL growing meanwhile (they were: recycling went by the failed
/// checkpoint's redo point, and the next start found a segment missing).
fn a_failed_checkpoint_keeps_the_segments_recovery_needs(method: IoMethod) {
    let dir = temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
    let mut s = db.session().unwrap();
    run(&mut s, "CREATE TABLE t (id integer NOT NULL, pad text)");
    let fill = "INSERT INTO t SELECT g, repeat('w', 1000) FROM generate_series(1, 16000) g";
    // Old segments to recycle, then a checkpoint that completes.
    for _ in 0..3 {
        run(&mut s, fill);
    }
    run(&mut s, "CHECKPOINT");
    let durable_redo = db.wal().redo();
    run(&mut s, "INSERT INTO t VALUES (0, 'after the checkpoint')");
    // Segments on: the next checkpoint's redo point is in a later one.
    for _ in 0..2 {
        run(&mut s, fill);
    }
    // The next checkpoint fails writing its pages.
    db.aio().injections().attach(
        BUFFER_BEFORE_WRITE,
        Injection::rewrite_result(-i64::from(libc::ENOSPC)),
    );
    run(&mut s, "UPDATE t SET pad = 'x' WHERE id = 0");
    assert!(sql::execute(&mut s, "CHECKPOINT").is_err());
    let segment = aiostore::wal::WAL_SEGMENT_SIZE;
    assert!(db.wal().redo() / segment > durable_redo / segment + 1);
    db.aio().injections().detach(BUFFER_BEFORE_WRITE);
    // More than the old segments' worth of WAL: the segment holding the
    // durable redo point would be recycled next.
    for _ in 0..6 {
        run(&mut s, fill);
    }
    let rows = ints(&mut s, "SELECT count(*) FROM t")[0];
    drop(s);
    crash(db);
    let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
    assert_eq!(db.recovery().unwrap().from, durable_redo);
    let mut s = db.session().unwrap();
    assert_eq!(ints(&mut s, "SELECT count(*) FROM t"), vec![rows]);
    assert_eq!(
        ints(&mut s, "SELECT count(*) FROM t WHERE pad = 'x'"),
        vec![1]
    );
}

/// A sort or hash aggregation spilling into a full file system fails its
/// statement naming the directory and the fix; the space it took is given
/// back at once (the files have no names), and the session goes on.
fn spills_onto_a_full_disk_fail_the_statement_and_give_the_space_back(method: IoMethod) {
    let dir = temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    let tmp = path.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let Some(_mount) = Mount::tmpfs(&tmp, "size=512k") else {
        return;
    };
    let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE t (id int, note text);
         INSERT INTO t SELECT g, repeat('x', 50) || g FROM generate_series(1, 40000) g;
         SET work_mem = '64kB'",
    );
    let free = free_bytes(&tmp);
    for query in [
        // No LIMIT: a top-N sort would hold one row and never spill.
        "SELECT id FROM t ORDER BY note DESC",
        "SELECT note, count(*) FROM t GROUP BY note HAVING count(*) > 1",
    ] {
        let e = err(&mut s, query);
        assert!(e.contains("No space left on device"), "{query}: {e}");
        assert!(
            e.contains(&format!("a temporary file in \"{}\"", tmp.display()))
                && e.contains("raise work_mem"),
            "{query}: {e}"
        );
        assert_eq!(free_bytes(&tmp), free, "the spill files' space is back");
    }
    run(&mut s, "SET work_mem = '64MB'");
    assert_eq!(
        ints(&mut s, "SELECT id FROM t ORDER BY note DESC LIMIT 1"),
        [9999]
    );
}

for_each_method!(
    spills_onto_a_full_disk_fail_the_statement_and_give_the_space_back,
    a_load_onto_a_full_disk_fails_naming_the_file,
    data_writes_failing_with_enospc_fail_the_statement,
    a_full_disk_under_the_wal_stops_the_database,
    a_failed_checkpoint_keeps_the_segments_recovery_needs,
);
