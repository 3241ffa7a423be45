//! Concurrent WAL writes: several writes in flight may complete in any
//! order, yet a commit returns only once every write before its record
//! has completed; a short write is continued; every `wal_sync_method`
//! keeps what committed across a crash. Every I/O method (the sync method
//! runs each write as it starts, so one is in flight at a time there).
//! `tests/crash.rs` kills processes committing from several sessions
//! with each I/O method and direct WAL, where writes overlap.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use aiostore::config::IoMethod;
use aiostore::database::{Database, Session};
use aiostore::heap::Value;
use aiostore::inject::{Injection, BEFORE_COMPLETE_SHARED};
use aiostore::sql;
use aiostore::stats::IoOp;
use aiostore::wal::{WAL_BLOCK_SIZE, WAL_SEGMENT_SIZE};
use common::{crash, temp_dir};

/// Longest a test polls for a state the engine reaches in microseconds.
const POLL_LIMIT: Duration = Duration::from_secs(20);

fn settings(method: IoMethod, extra: &[&str]) -> Vec<String> {
    let mut s = vec![
        format!("io_method={}", method.name()),
        "shared_buffers=512".into(),
        "max_sessions=8".into(),
        // No background flush racing the test's commits.
        "wal_writer_delay=10000".into(),
    ];
    s.extend(extra.iter().map(|x| x.to_string()));
    s
}

fn run(s: &mut Session, text: &str) -> Vec<sql::StatementResult> {
    sql::execute(s, text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn count(s: &mut Session, table: &str) -> i64 {
    match &run(s, &format!("SELECT count(*) FROM {table}"))
        .pop()
        .unwrap()
        .rows[0][0]
    {
        Value::BigInt(n) => *n,
        v => panic!("count(*) gave {v:?}"),
    }
}

fn completed_writes(db: &Database, method: IoMethod) -> u64 {
    db.aio()
        .stats()
        .row(method, IoOp::Write)
        .map_or(0, |r| r.ios)
}

/// The first commit's write is held before it completes; a second commit
/// meanwhile starts its own write behind it (it does not wait for the
/// first to finish, as with one write in flight), which completes, and
/// still the second commit does not return, nor does the flush position
/// pass the held write, until that write completes.
fn a_later_write_completing_first_releases_no_commit(method: IoMethod) {
    let dir = temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    let db = Database::open(
        &path,
        &settings(method, &["io_direct=wal", "wal_io_concurrency=4"]),
    )
    .unwrap();
    let mut a = db.session().unwrap();
    run(&mut a, "CREATE TABLE t (id int)");
    run(
        &mut a,
        "INSERT INTO t SELECT g FROM generate_series(1, 1000) g",
    );
    let wal = Arc::clone(db.wal());
    // The next commit's write starts at the block holding the insert
    // position (the last flush padded its block).
    let first = wal.insert_position() / WAL_BLOCK_SIZE * WAL_BLOCK_SIZE;
    assert_eq!(
        wal.flushed(),
        first,
        "the last commit flushed to its block's end"
    );
    let points = db.aio().injections();
    points.attach(
        BEFORE_COMPLETE_SHARED,
        Injection::park()
            .at_offset(first % WAL_SEGMENT_SIZE)
            .times(1),
    );
    let writes_before = completed_writes(&db, method);
    let first_commit = std::thread::spawn(move || {
        run(&mut a, "INSERT INTO t VALUES (-1)");
    });
    assert!(points.wait_until_parked(BEFORE_COMPLETE_SHARED));
    let mut b = db.session().unwrap();
    let second_commit = std::thread::spawn(move || {
        run(&mut b, "INSERT INTO t VALUES (-2)");
    });
    // The second commit's write completes while the first is held.
    let started = Instant::now();
    while completed_writes(&db, method) < writes_before + 1 {
        assert!(
            started.elapsed() < POLL_LIMIT,
            "the second commit's write never completed: it waited for the first instead of starting"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        wal.stats()
            .writes_in_flight_peak
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 2
    );
    assert!(!first_commit.is_finished());
    assert!(
        !second_commit.is_finished(),
        "a commit returned while WAL before it was not yet written"
    );
    assert!(
        wal.flushed() <= first,
        "the flush position passed a write in flight"
    );
    points.release(BEFORE_COMPLETE_SHARED);
    first_commit.join().unwrap();
    second_commit.join().unwrap();
    assert!(wal.flushed() >= first + 2 * WAL_BLOCK_SIZE);
    drop(wal);
    crash(db);
    let db = Database::open(&path, &settings(method, &["io_direct=wal"])).unwrap();
    let mut s = db.session().unwrap();
    assert_eq!(count(&mut s, "t"), 1002);
}

/// A WAL write that completes short (one block of several) is continued
/// where it stopped; the commit returns and survives a crash.
fn a_short_wal_write_is_continued(method: IoMethod) {
    for direct in [false, true] {
        let dir = temp_dir();
        let path = dir.path().join("data");
        Database::init(&path).unwrap();
        let extra: &[&str] = if direct { &["io_direct=wal"] } else { &[] };
        let db = Database::open(&path, &settings(method, extra)).unwrap();
        let mut s = db.session().unwrap();
        run(&mut s, "CREATE TABLE t (id int, pad text)");
        run(&mut s, "BEGIN");
        run(
            &mut s,
            "INSERT INTO t SELECT g, repeat('x', 100) FROM generate_series(1, 2000) g",
        );
        let wal = Arc::clone(db.wal());
        let first = wal.flushed();
        assert_eq!(first % WAL_BLOCK_SIZE, 0);
        assert!(wal.insert_position() > first + 4 * WAL_BLOCK_SIZE);
        db.aio().injections().attach(
            BEFORE_COMPLETE_SHARED,
            Injection::rewrite_result(WAL_BLOCK_SIZE as i64)
                .at_offset(first % WAL_SEGMENT_SIZE)
                .times(1),
        );
        run(&mut s, "COMMIT");
        let partial = db
            .aio()
            .stats()
            .row(method, IoOp::Write)
            .map_or(0, |r| r.partial);
        assert!(partial >= 1, "direct {direct}: no short write was injected");
        drop(s);
        drop(wal);
        crash(db);
        let db = Database::open(&path, &settings(method, extra)).unwrap();
        let mut s = db.session().unwrap();
        assert_eq!(count(&mut s, "t"), 2000, "direct {direct}");
    }
}

/// Every sync method, buffered and direct, with several sessions
/// committing at once: after a crash every commit that returned is there.
fn every_wal_sync_method_keeps_what_committed(method: IoMethod) {
    const SESSIONS: usize = 4;
    const COMMITS: usize = 40;
    for sync_method in ["fdatasync", "fsync", "open_datasync", "open_sync"] {
        for direct in [false, true] {
            let dir = temp_dir();
            let path = dir.path().join("data");
            Database::init(&path).unwrap();
            let mut extra = vec![format!("wal_sync_method={sync_method}")];
            if direct {
                extra.push("io_direct=wal".into());
            }
            let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            let db = Database::open(&path, &settings(method, &extra)).unwrap();
            run(&mut db.session().unwrap(), "CREATE TABLE t (s int, n int)");
            let threads: Vec<_> = (0..SESSIONS)
                .map(|id| {
                    let db = Arc::clone(&db);
                    std::thread::spawn(move || {
                        let mut s = db.session().unwrap();
                        for n in 0..COMMITS {
                            run(&mut s, &format!("INSERT INTO t VALUES ({id}, {n})"));
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            let syncs = db
                .wal()
                .stats()
                .syncs
                .load(std::sync::atomic::Ordering::Relaxed);
            let write_through = sync_method.starts_with("open_");
            assert_eq!(
                syncs == 0,
                write_through,
                "{sync_method}: {syncs} syncs of written WAL"
            );
            crash(db);
            let db = Database::open(&path, &settings(method, &extra)).unwrap();
            let mut s = db.session().unwrap();
            assert_eq!(
                count(&mut s, "t"),
                (SESSIONS * COMMITS) as i64,
                "{sync_method}, direct {direct}"
            );
        }
    }
}

for_each_method!(
    a_short_wal_write_is_continued,
    every_wal_sync_method_keeps_what_committed;
    // Holding a write's completion needs a thread that completes only it:
    // an io_uring completion is processed by a waiter, which, parked,
    // would hold back the ring's later completions with it, and the sync
    // method runs each write as it starts.
    worker only: a_later_write_completing_first_releases_no_commit,
);
