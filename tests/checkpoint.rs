//! Checkpoints through the write path: sorted, combined and several in
//! flight; spread over checkpoint_completion_target when automatic, made
//! to hurry by CHECKPOINT; and the background writer. Every method,
//! direct and buffered.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use aiostore::config::IoMethod;
use aiostore::database::{CheckpointCause, Database};
use aiostore::types::Value;
use common::*;

/// A database with `settings` besides the method's and direct I/O's.
fn open(method: IoMethod, direct: bool, settings: &[&str]) -> (tempfile::TempDir, Arc<Database>) {
    let dir = temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    let mut all = vec![
        format!("io_method={}", method.name()),
        "max_sessions=8".into(),
    ];
    if direct {
        all.push("io_direct=data+wal".into());
    }
    all.extend(settings.iter().map(|s| s.to_string()));
    (dir, Database::open(&path, &all).unwrap())
}

/// A table `t` of `pages` × about 30 rows of 250 bytes, loaded in one
/// INSERT: every page dirty in the pool.
fn load(db: &Arc<Database>, rows: u32) {
    let mut s = db.session().unwrap();
    run(&mut s, "CREATE TABLE t (a int, b text)");
    run(
        &mut s,
        &format!(
            "INSERT INTO t SELECT i, repeat('x', 250) FROM generate_series(1, {rows}) AS g(i)"
        ),
    );
}

fn int(v: &Value) -> i64 {
    match v {
        Value::BigInt(n) => *n,
        Value::Integer(n) => i64::from(*n),
        other => panic!("not an integer: {other:?}"),
    }
}

/// stat_checkpointer's one row, by column name.
fn checkpointer(db: &Arc<Database>) -> impl Fn(&str) -> Value {
    let mut s = db.session().unwrap();
    let columns = [
        "num_timed",
        "num_requested",
        "buffers_written",
        "last_cause",
        "last_buffers",
        "last_writes",
        "last_files",
    ];
    let row = rows(
        &mut s,
        &format!("SELECT {} FROM stat_checkpointer", columns.join(", ")),
    )
    .pop()
    .unwrap();
    move |name| row[columns.iter().position(|c| *c == name).unwrap()].clone()
}

fn dirty_buffers(db: &Arc<Database>) -> i64 {
    let mut s = db.session().unwrap();
    int(&rows(&mut s, "SELECT count(*) FROM buffers WHERE dirty")[0][0])
}

/// CHECKPOINT writes every dirty buffer, neighbours combined into writes
/// of up to io_combine_limit blocks, and syncs each written file once;
/// stat_checkpointer shows it.
fn a_checkpoint_writes_its_buffers_sorted_and_combined(method: IoMethod, direct: bool) {
    let (_dir, db) = open(
        method,
        direct,
        &["shared_buffers=2048", "bgwriter_lru_maxpages=0"],
    );
    load(&db, 8000);
    let dirty = dirty_buffers(&db);
    assert!(dirty > 100, "{dirty} dirty buffers");
    db.checkpoint(false).unwrap();
    let c = checkpointer(&db);
    assert_eq!(c("last_cause"), Value::Text("requested".into()));
    let (buffers, writes) = (int(&c("last_buffers")), int(&c("last_writes")));
    assert!(buffers >= dirty, "{buffers} written of {dirty}");
    assert!(
        writes * 8 <= buffers,
        "{writes} writes for {buffers} buffers: neighbours not combined"
    );
    assert!(int(&c("last_files")) >= 1);
    assert_eq!(dirty_buffers(&db), 0);
    let path = db.dir().to_path_buf();
    drop(db);
    let db = Database::open(&path, &[format!("io_method={}", method.name())]).unwrap();
    let mut s = db.session().unwrap();
    assert_eq!(int(&rows(&mut s, "SELECT count(*) FROM t")[0][0]), 8000);
}

/// A timed checkpoint spreads its writes over checkpoint_completion_target
/// of checkpoint_timeout (here 0.3 × 3 s); a CHECKPOINT issued while a
/// spread one runs makes it hurry, and both finish.
fn a_spread_checkpoint_keeps_to_its_schedule_and_checkpoint_hurries_it(
    method: IoMethod,
    direct: bool,
) {
    let (_dir, db) = open(
        method,
        direct,
        &[
            "shared_buffers=2048",
            "bgwriter_lru_maxpages=0",
            "checkpoint_timeout=3",
            "checkpoint_completion_target=0.3",
        ],
    );
    load(&db, 8000);
    let started = Instant::now();
    db.run_checkpoint(CheckpointCause::Timed).unwrap();
    let took = started.elapsed();
    assert!(
        (Duration::from_millis(700)..Duration::from_secs(10)).contains(&took),
        "a checkpoint to be spread over 0.9 s took {took:?}"
    );
    assert_eq!(checkpointer(&db)("last_cause"), Value::Text("timed".into()));
    drop(db);

    // Spread over 0.9 × 600 s, unless hurried.
    let (_dir, db) = open(
        method,
        direct,
        &[
            "shared_buffers=2048",
            "bgwriter_lru_maxpages=0",
            "checkpoint_timeout=600",
        ],
    );
    load(&db, 8000);
    let spread = {
        let db = Arc::clone(&db);
        std::thread::spawn(move || db.run_checkpoint(CheckpointCause::Timed).map(drop))
    };
    std::thread::sleep(Duration::from_millis(300));
    assert!(!spread.is_finished(), "the timed checkpoint is spread");
    let started = Instant::now();
    db.checkpoint(false).unwrap();
    spread.join().unwrap().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "CHECKPOINT waited {:?} for a spread checkpoint",
        started.elapsed()
    );
    let c = checkpointer(&db);
    assert_eq!((int(&c("num_timed")), int(&c("num_requested"))), (1, 1));
    assert_eq!(dirty_buffers(&db), 0);
}

/// The background writer writes dirty buffers ahead of the clock sweep
/// while sessions take buffers; what it wrote reads back after a restart.
fn the_background_writer_cleans_ahead_of_the_sweep(method: IoMethod, direct: bool) {
    let (_dir, db) = open(
        method,
        direct,
        &[
            "shared_buffers=256",
            "bgwriter_delay=10",
            "bgwriter_lru_maxpages=1000",
        ],
    );
    let mut s = db.session().unwrap();
    run(&mut s, "CREATE TABLE t (a int, b text)");
    // Row by row, a table four times the pool: the sweep takes dirty
    // buffers as it goes.
    for chunk in 0..40 {
        run(
            &mut s,
            &format!(
                "INSERT INTO t SELECT i, repeat('y', 250) FROM generate_series({}, {}) AS g(i)",
                chunk * 800 + 1,
                chunk * 800 + 800
            ),
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let row = rows(
        &mut s,
        "SELECT rounds, buffers_clean, buffers_alloc FROM stat_bgwriter",
    )
    .pop()
    .unwrap();
    let (rounds, clean, allocs) = (int(&row[0]), int(&row[1]), int(&row[2]));
    assert!(rounds > 0 && allocs > 256, "{row:?}");
    assert!(clean > 0, "the background writer wrote nothing: {row:?}");
    drop(s);
    let path = db.dir().to_path_buf();
    crash(db);
    let db = Database::open(&path, &[format!("io_method={}", method.name())]).unwrap();
    let mut s = db.session().unwrap();
    assert_eq!(int(&rows(&mut s, "SELECT count(*) FROM t")[0][0]), 32000);
}

direct_and_buffered!(
    a_checkpoint_writes_its_buffers_sorted_and_combined,
    a_spread_checkpoint_keeps_to_its_schedule_and_checkpoint_hurries_it,
    the_background_writer_cleans_ahead_of_the_sweep,
);
