//! Crash tests: `aiostore crashtest` kills a child running each workload
//! with SIGKILL, several times, per I/O method and with direct I/O, and
//! checks what the reopened data directory kept (docs/crashtest.md).
//!
//! The kill tests need the WAL: without it a kill loses commits still in
//! the buffer pool and leaves transactions half written, and they fail.
//! The others check the harness itself and pass without it: a child
//! stopped cleanly passes every check, so does a child killed while it
//! writes every buffer back before each commit (which keeps exactly what
//! committed), the check finds damage put there on purpose, and bad
//! arguments are refused with the fix.
//!
//! Seeds come from the clock, so each run kills at other moments; a
//! failure prints the iteration's seed, which `aiostore crashtest --seed S
//! --iterations 1` takes to repeat its choices.

mod common;

use std::process::Command;

use aiostore::config::IoMethod;
use aiostore::crashtest::check::check_database;
use aiostore::crashtest::{Component, History};
use aiostore::database::Database;

/// Iterations per kill test: enough to land in different phases of the
/// workload, few enough for the whole file to take about two minutes on
/// two cores.
const ITERATIONS: &str = "4";
/// When the child dies, after it is ready: from the first transactions
/// to a table several times the pool.
const KILL_AFTER_MS: &str = "100..1000";
/// Iterations and stop window of the clean-stop tests.
const CLEAN_STOP_ITERATIONS: &str = "2";
const CLEAN_STOP_AFTER_MS: &str = "100..400";
/// Iterations per workload of the written-back-before-commit test.
const FLUSHED_ITERATIONS: &str = "2";

/// Runs `aiostore [-c io_method=…] [extra -c …] crashtest args` in a
/// directory of its own; returns success and the output.
fn crashtest(method: IoMethod, settings: &[&str], args: &[&str]) -> (bool, String) {
    let dir = common::temp_dir();
    let mut command = Command::new(env!("CARGO_BIN_EXE_aiostore"));
    command
        .arg("-c")
        .arg(format!("io_method={}", method.name()));
    for setting in settings {
        command.arg("-c").arg(setting);
    }
    let out = command
        .arg("crashtest")
        .args(args)
        .arg("--dir")
        .arg(dir.path().join("crash"))
        .env_remove("AIOSTORE_DATA")
        .output()
        .expect("runs");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// Kills the child running `workload` [`ITERATIONS`] times; every
/// iteration must pass.
fn survives_kills(method: IoMethod, workload: &str, settings: &[&str]) {
    survives_kills_after(method, workload, settings, KILL_AFTER_MS)
}

/// [`survives_kills`] with kills `kill_after_ms` (`min..max`) after start.
fn survives_kills_after(method: IoMethod, workload: &str, settings: &[&str], kill_after_ms: &str) {
    let (ok, text) = crashtest(
        method,
        settings,
        &[
            "--workload",
            workload,
            "--iterations",
            ITERATIONS,
            "--kill-after-ms",
            kill_after_ms,
        ],
    );
    // The directory the report says it kept goes with the test's
    // temporary directory: run the command it prints to look at one.
    assert!(ok, "{text}");
    assert!(
        text.contains(&format!("killed={ITERATIONS} ")),
        "every child died of the kill: {text}"
    );
}

fn insert(method: IoMethod) {
    survives_kills(method, "insert", &[]);
}

fn update(method: IoMethod) {
    survives_kills(method, "update", &[]);
}

fn copy(method: IoMethod) {
    survives_kills(method, "copy", &[]);
}

fn delete(method: IoMethod) {
    survives_kills(method, "delete", &[]);
}

fn vacuum(method: IoMethod) {
    survives_kills(method, "vacuum", &[]);
}

fn checkpoint(method: IoMethod) {
    survives_kills(method, "checkpoint", &[]);
}

fn ddl(method: IoMethod) {
    survives_kills(method, "ddl", &[]);
}

/// Row locks of every strength, several lockers of a row at once, and
/// no-key updates beside key-share locks: after the kill every row is
/// there once, as the acknowledged transactions left it, and none stays
/// locked.
fn lock(method: IoMethod) {
    survives_kills(method, "lock", &[]);
}

fn mixed(method: IoMethod) {
    survives_kills(method, "mixed", &[]);
}

/// Direct data and WAL: WAL segments opened `O_DIRECT | O_DSYNC`, with
/// several WAL writes in flight when the kill comes.
fn update_with_direct_io(method: IoMethod) {
    survives_kills(method, "update", &["io_direct=data+wal"]);
}

fn mixed_with_direct_io(method: IoMethod) {
    survives_kills(method, "mixed", &["io_direct=data+wal"]);
}

/// Every writer of data pages busy when the kill comes: a small pool (the
/// sweep and the rings take dirty buffers, written ahead), the background
/// writer every 10 ms, and spread timed checkpoints every second, which a
/// kill (after the first has started) interrupts half-written.
fn mixed_with_background_writes(method: IoMethod) {
    survives_kills_after(
        method,
        "mixed",
        &[
            "io_direct=data+wal",
            "shared_buffers=256",
            "bgwriter_delay=10",
            "bgwriter_lru_maxpages=1000",
            "checkpoint_timeout=1",
            "checkpoint_completion_target=0.9",
        ],
        "1100..2500",
    );
}

/// Stops the child cleanly instead of killing it: the engine then keeps
/// everything, WAL or not, so any failure is the harness's.
fn passes_after_a_clean_stop(method: IoMethod, workload: &str) {
    let (ok, text) = crashtest(
        method,
        &[],
        &[
            "--workload",
            workload,
            "--iterations",
            CLEAN_STOP_ITERATIONS,
            "--kill-after-ms",
            CLEAN_STOP_AFTER_MS,
            "--clean-stop",
        ],
    );
    assert!(ok, "{workload}: {text}");
    assert!(text.contains("killed=0 "), "{workload}: {text}");
}

fn clean_stop_passes_every_check(method: IoMethod) {
    for workload in [
        "insert",
        "update",
        "copy",
        "delete",
        "checkpoint",
        "ddl",
        "lock",
    ] {
        passes_after_a_clean_stop(method, workload);
    }
}

/// Apart from the others: VACUUM sets the map bits after all its pages'
/// flags, and an UPDATE of a page in between clears the flag and finds
/// no bit yet to clear, which leaves a bit set on a page that is not
/// all-visible. That fails this check with or without a crash.
fn clean_stop_vacuum_keeps_the_visibility_map_true(method: IoMethod) {
    passes_after_a_clean_stop(method, "vacuum");
}

/// Kills a child that writes every buffer back before each commit:
/// without a WAL that keeps what committed and nothing else, so every
/// kill must pass, and the transactions in doubt are found committed or
/// absent as the kill fell. A check of the harness's judgement of them.
fn kills_pass_when_every_commit_is_written_back_first(method: IoMethod) {
    for workload in ["insert", "update", "copy", "delete", "checkpoint", "lock"] {
        let (ok, text) = crashtest(
            method,
            &[],
            &[
                "--workload",
                workload,
                "--iterations",
                FLUSHED_ITERATIONS,
                "--kill-after-ms",
                KILL_AFTER_MS,
                "--flush-before-commit",
            ],
        );
        assert!(ok, "{workload}: {text}");
        assert!(
            text.contains(&format!("killed={FLUSHED_ITERATIONS} ")),
            "{workload}: {text}"
        );
    }
}

for_each_method!(
    insert,
    update,
    copy,
    delete,
    vacuum,
    checkpoint,
    ddl,
    lock,
    mixed,
    update_with_direct_io,
    mixed_with_direct_io,
    mixed_with_background_writes,
    clean_stop_passes_every_check,
    clean_stop_vacuum_keeps_the_visibility_map_true,
    kills_pass_when_every_commit_is_written_back_first,
);

#[test]
fn bad_arguments_are_refused_naming_the_choices() {
    let (ok, text) = crashtest(IoMethod::Sync, &[], &["--workload", "updates"]);
    assert!(
        !ok && text.contains(
            "unknown workload \"updates\"; choose one of insert, update, copy, delete, vacuum, checkpoint, ddl, lock, mixed"
        ),
        "{text}"
    );
    let (ok, text) = crashtest(
        IoMethod::Sync,
        &[],
        &["--workload", "update", "--kill-after-ms", "900..100"],
    );
    assert!(
        !ok && text.contains("runs backwards; write 100..900"),
        "{text}"
    );
    let (ok, text) = crashtest(
        IoMethod::Sync,
        &[],
        &["--workload", "update", "--iterations", "0"],
    );
    assert!(!ok && text.contains("use 1 to"), "{text}");
    let (ok, text) = crashtest(
        IoMethod::Sync,
        &[],
        &["--workload", "ddl", "--flush-before-commit"],
    );
    assert!(
        !ok && text.contains("use it with insert, update, copy, delete, checkpoint"),
        "{text}"
    );
    let (ok, text) = crashtest(IoMethod::Sync, &["nosuch=1"], &["--workload", "update"]);
    assert!(
        !ok && text.contains("unrecognized setting \"nosuch\""),
        "{text}"
    );
}

const CHECK_SETTINGS: [&str; 3] = ["io_method=sync", "shared_buffers=1MB", "max_sessions=16"];

fn check_settings() -> Vec<String> {
    CHECK_SETTINGS.iter().map(|s| s.to_string()).collect()
}

/// A data directory with the update component's table, closed, and the
/// table's relation number.
fn update_table() -> (tempfile::TempDir, std::path::PathBuf, u32) {
    let tmp = common::temp_dir();
    let dir = tmp.path().join("data");
    Database::init(&dir).unwrap();
    let db = Database::open(&dir, &check_settings()).unwrap();
    let mut s = db.session().unwrap();
    let sql = Component::Update.setup_sql().unwrap();
    aiostore::sql::execute(&mut s, &sql).unwrap();
    let rel = db
        .catalog()
        .table(aiostore::crashtest::workload::UPDATE_TABLE)
        .unwrap()
        .heap
        .rel;
    drop(s);
    drop(db);
    (tmp, dir, rel)
}

fn history(lines: &[&str]) -> History {
    let mut h = History::default();
    for line in lines {
        h.record(line).unwrap();
    }
    h
}

#[test]
fn the_check_finds_lost_commits_damaged_pages_and_files_without_a_table() {
    let (_tmp, dir, rel) = update_table();
    let check = |h: &History| check_database(&dir, &check_settings(), &[Component::Update], h);
    let nothing = history(&["ready"]);
    check(&nothing).unwrap();
    // An update acknowledged but not there.
    let acked = history(&["ready", "begin update.0 1 update 1", "ack update.0 1"]);
    let e = check(&acked).unwrap_err();
    assert!(e.contains("every row has v = 0; expected 1"), "{e}");
    // In doubt, it may be absent.
    let doubt = history(&["ready", "begin update.0 1 update 1"]);
    check(&doubt).unwrap();

    // A file no table owns.
    let orphan = dir.join("base").join("99999");
    std::fs::write(&orphan, vec![0u8; 8192]).unwrap();
    let e = check(&nothing).unwrap_err();
    assert!(
        e.contains("relation 99999 belongs to no table in the catalog but has files (base/99999)"),
        "{e}"
    );
    std::fs::remove_file(&orphan).unwrap();

    // A page whose checksum no longer matches.
    let file = dir.join("base").join(rel.to_string());
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[8192 + 5000] ^= 1;
    std::fs::write(&file, &bytes).unwrap();
    let e = check(&nothing).unwrap_err();
    assert!(
        e.contains(&format!("base/{rel} block 1: checksum mismatch")),
        "{e}"
    );
}

#[test]
fn the_check_finds_a_table_without_its_file() {
    let (_tmp, dir, rel) = update_table();
    std::fs::remove_file(dir.join("base").join(rel.to_string())).unwrap();
    let e = check_database(
        &dir,
        &check_settings(),
        &[Component::Update],
        &history(&["ready"]),
    )
    .unwrap_err();
    assert!(
        e.contains(&format!(
            "crash_update (relation {rel}) has no file base/{rel}"
        )),
        "{e}"
    );
}
