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

use aiostore::aio::{Aio, AioConfig};
use aiostore::config::IoMethod;
use aiostore::database::{Database, Session};
use aiostore::inject::{Injection, BEFORE_COMPLETE_SHARED, WAL_BEFORE_WRITE};
use aiostore::stats::IoOp;
use aiostore::types::Value;
use aiostore::wal::{
    segment_path, Lsn, Rmgr, SyncMethod, Wal, WalConfig, WalError, FIRST_LSN, WAL_BLOCK_SIZE,
    WAL_SEGMENT_SIZE,
};
use common::{crash, run, small_pool_settings, temp_dir};

/// Longest a test polls for a state the engine reaches in microseconds.
const POLL_LIMIT: Duration = Duration::from_secs(20);

fn settings(method: IoMethod, extra: &[&str]) -> Vec<String> {
    let mut s = small_pool_settings(method, false);
    // No background flush racing the test's commits.
    s.push("wal_writer_delay=10000".into());
    s.extend(extra.iter().map(|x| x.to_string()));
    s
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
    // The write is counted before it is marked complete: give the second
    // commit time to collect it and, were the flush position to pass the
    // held write, return.
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_millis(200) {
        assert!(
            !second_commit.is_finished(),
            "a commit returned while WAL before it was not yet written"
        );
        assert!(
            wal.flushed() <= first,
            "the flush position passed a write in flight"
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
        // The commit's write starts at the block the last flush ended in
        // (written again where that flush wrote it in part).
        let first = wal.flushed() / WAL_BLOCK_SIZE * WAL_BLOCK_SIZE;
        assert!(wal.insert_position() > first + 4 * WAL_BLOCK_SIZE);
        // Less than one write's worth: the commit's flush is one write,
        // and the rest of it a second.
        assert!(wal.insert_position() < first + (512 << 10));
        let writes = || {
            wal.stats()
                .writes
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        let writes_before = writes();
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
        assert_eq!(
            writes() - writes_before,
            2,
            "direct {direct}: the short write was not continued by a second"
        );
        drop(s);
        drop(wal);
        crash(db);
        let db = Database::open(&path, &settings(method, extra)).unwrap();
        let mut s = db.session().unwrap();
        assert_eq!(count(&mut s, "t"), 2000, "direct {direct}");
    }
}

/// The open flags (`/proc/self/fdinfo`) of this process's descriptor of
/// the segment holding `lsn` in the data directory `dir`.
fn segment_open_flags(dir: &std::path::Path, lsn: Lsn) -> u32 {
    let segment = segment_path(dir, lsn / WAL_SEGMENT_SIZE);
    for entry in std::fs::read_dir("/proc/self/fd").unwrap() {
        let entry = entry.unwrap();
        if std::fs::read_link(entry.path()).ok().as_deref() != Some(segment.as_path()) {
            continue;
        }
        let info = std::fs::read_to_string(format!(
            "/proc/self/fdinfo/{}",
            entry.file_name().to_string_lossy()
        ))
        .unwrap();
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .expect("fdinfo has flags");
        return u32::from_str_radix(flags.trim(), 8).unwrap();
    }
    panic!("no descriptor of {} is open", segment.display());
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
            // The segment is open as the method says (a crash simulated in
            // the process keeps the page cache, so durability itself
            // cannot be seen here: the flags are what make it).
            let flags = segment_open_flags(&path, db.wal().insert_position());
            let (o_dsync, o_sync_only, o_direct) = (0o10000, 0o4000000, 0o40000);
            assert_eq!(
                (
                    flags & o_dsync != 0,
                    flags & o_sync_only != 0,
                    flags & o_direct != 0
                ),
                (write_through, sync_method == "open_sync", direct),
                "{sync_method}, direct {direct}: segment open with flags {flags:o}"
            );
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

// The log by itself, with one method: faults and orderings forced with
// injection points at the worker's completion.

fn start_aio(method: IoMethod) -> Arc<Aio> {
    Aio::start(&AioConfig {
        method,
        io_workers: 3,
        max_sessions: 4,
        io_max_concurrency: 16,
        io_max_combine_limit: 16,
        debug_io_latency_us: 0,
    })
    .unwrap()
}

fn open_wal(dir: &std::path::Path, aio: &Arc<Aio>, buffers: usize, sync: SyncMethod) -> Arc<Wal> {
    Wal::create(dir).unwrap();
    Wal::open(
        dir,
        aio,
        WalConfig {
            direct: false,
            sync_method: sync,
            io_concurrency: 4,
            buffers,
            full_page_writes: false,
        },
        0,
        FIRST_LSN,
        &[],
        FIRST_LSN,
    )
    .unwrap()
}

fn insert(wal: &Wal) -> Result<Lsn, WalError> {
    // An XLOG padding record: replay ignores it. Distinct bytes per record,
    // so that stale ring bytes never pass for a record's.
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let data: Vec<u8> = (0..4000u64)
        .map(|i| (n.wrapping_mul(131) ^ i) as u8)
        .collect();
    wal.insert(Rmgr::Xlog, 2, 0, &[], &data)
}

fn writes(aio: &Aio) -> u64 {
    aio.stats()
        .row(IoMethod::Worker, IoOp::Write)
        .map_or(0, |r| r.ios)
}

/// W1 = [first, first+1 MiB) and W2 = [first+1 MiB, ..) are in flight.
/// W1 completes short (1 block); its continuation fails (EIO) and the log
/// stops. An inserter that was already waiting for ring room (blocked on
/// the writer lock) then collects W2: `written` and `flushed` move over
/// the bytes of W1 that were never written.
#[test]
fn a_failed_write_keeps_the_flush_position_before_it() {
    let dir = temp_dir();
    let path = dir.path();
    let aio = start_aio(IoMethod::Worker);
    let wal = open_wal(path, &aio, 2 << 20, SyncMethod::OpenDatasync);
    let first = wal.flushed();
    assert_eq!(first % WAL_BLOCK_SIZE, 0);
    let mut end = 0;
    while wal.insert_position() < first + (3 << 19) {
        end = insert(&wal).unwrap();
    }
    let points = aio.injections();
    points.attach(
        BEFORE_COMPLETE_SHARED,
        Injection::rewrite_result(WAL_BLOCK_SIZE as i64)
            .at_offset(first % WAL_SEGMENT_SIZE)
            .times(1),
    );
    let failed_at = first + WAL_BLOCK_SIZE;
    points.attach(
        WAL_BEFORE_WRITE,
        Injection {
            park: true,
            rewrite_result: Some(-5),
            only_offset: Some(failed_at),
            times: Some(1),
        },
    );
    let y = {
        let wal = Arc::clone(&wal);
        std::thread::spawn(move || wal.flush(end))
    };
    assert!(points.wait_until_parked(WAL_BEFORE_WRITE));
    let started = Instant::now();
    while writes(&aio) < 2 {
        assert!(started.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(1));
    }
    let x = {
        let wal = Arc::clone(&wal);
        std::thread::spawn(move || {
            let mut n = 0;
            loop {
                match insert(&wal) {
                    Ok(_) => n += 1,
                    Err(e) => return (n, e.to_string()),
                }
            }
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    assert!(!x.is_finished(), "the inserter waits for ring room");
    points.release(WAL_BEFORE_WRITE);
    let flush_result = y.join().unwrap();
    assert!(flush_result.is_err(), "the flush saw the failed write");
    let (n, e) = x.join().unwrap();
    eprintln!("inserter: {n} records then {e}");
    assert!(wal.is_stopped());
    let flushed = wal.flushed();
    eprintln!(
        "first {first:#x} failed continuation at {failed_at:#x} flushed {flushed:#x} (end {end:#x})"
    );
    assert!(
        flushed <= failed_at,
        "flushed() = {flushed:#x} although the write of {failed_at:#x}.. failed and was never redone"
    );
}

/// A checkpoint moves the redo point at its start; a WAL write that then
/// opens the next segment must not recycle a segment before that point:
/// the last *completed* checkpoint may still need it, and a crash before
/// the new checkpoint writes the control file leaves recovery with that
/// one.
#[test]
fn a_checkpoint_in_progress_recycles_no_segment_recovery_needs() {
    let dir = temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    let settings: Vec<String> = [
        "io_method=worker",
        "shared_buffers=16384",
        "max_sessions=8",
        "wal_writer_delay=10000",
        "wal_buffers=4096",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let db = Database::open(&path, &settings).unwrap();
    let mut s = db.session().unwrap();
    run(&mut s, "CREATE TABLE t (id int, pad text)");
    let wal = Arc::clone(db.wal());
    let seg1 = wal.flushed() / WAL_SEGMENT_SIZE;
    run(&mut s, "BEGIN");
    while wal.insert_position() < (seg1 + 1) * WAL_SEGMENT_SIZE + (256 << 10) {
        run(
            &mut s,
            "INSERT INTO t SELECT g, repeat('x', 200) FROM generate_series(1, 5000) g",
        );
    }
    assert!(
        !segment_path(&path, seg1 + 1).exists(),
        "nothing written into the next segment yet"
    );
    // A checkpoint starts and flushes the WAL (as its page writes and its
    // flush_all do); it crashes before the control file is written.
    wal.begin_checkpoint();
    wal.flush_all().unwrap();
    let seg1_exists = segment_path(&path, seg1).exists();
    drop(s);
    drop(wal);
    crash(db);
    let reopened = Database::open(&path, &settings);
    assert!(
        seg1_exists && reopened.is_ok(),
        "segment {seg1} exists: {seg1_exists}; reopen: {:?}",
        reopened.err().map(|e| e.to_string())
    );
}

/// A segment that cannot be opened (here a directory where the next
/// segment goes) fails the write an inserter needing ring room started.
/// Its reservation cannot be given back: had the log gone on, later
/// records would link to the half-copied one and be flushed, and replay
/// would end at the torn record, before WAL a flush returned for. The log
/// stops instead.
#[test]
fn an_insertion_that_cannot_finish_stops_the_log() {
    use aiostore::wal::reader::WalReader;
    let dir = temp_dir();
    let path = dir.path();
    let aio = start_aio(IoMethod::Worker);
    let wal = open_wal(path, &aio, 256 << 10, SyncMethod::Fdatasync);
    let seg2 = FIRST_LSN / WAL_SEGMENT_SIZE + 1;
    while wal.insert_position() < seg2 * WAL_SEGMENT_SIZE - (64 << 10) {
        insert(&wal).unwrap();
    }
    std::fs::create_dir(segment_path(path, seg2)).unwrap();
    let mut failed = None;
    for _ in 0..1000 {
        let before = wal.insert_position();
        let r = insert(&wal);
        if r.is_err() {
            eprintln!("insert at {before:#x} failed");
        }
        if let Err(e) = r {
            failed = Some(e);
            break;
        }
    }
    let failed = failed.expect("an insert needing room meets the segment error");
    eprintln!("insert failed: {failed}");
    assert!(
        wal.is_stopped(),
        "an insertion left half-copied did not stop the log: {failed}"
    );
    std::fs::remove_dir(segment_path(path, seg2)).unwrap();
    let mut last = 0;
    for _ in 0..10 {
        match insert(&wal) {
            Ok(end) => last = end,
            Err(e) => {
                eprintln!("log refused further inserts: {e}");
                return;
            }
        }
    }
    wal.flush(last).expect("a later commit's flush");
    eprintln!("flush to {last:#x} returned Ok");
    let mut r = WalReader::new(path, FIRST_LSN, None);
    let outcome = loop {
        match r.next_record() {
            Ok(Ok(rec)) if rec.end >= last => break format!("reached {:#x}", rec.end),
            Ok(Ok(_)) => {}
            Ok(Err(end)) => break format!("log ends at {:#x}: {:?}", end.at, end.why),
            Err(e) => break format!("reader error: {e}"),
        }
    };
    assert!(
        outcome.starts_with("reached"),
        "flushed (Ok) to {last:#x}, but replay: {outcome}"
    );
}

/// While the first write is held, a later commit collects (finding the
/// writes behind it done): nothing moves, and a commit whose record those
/// writes hold does not return.
#[test]
fn collecting_the_writes_behind_a_held_one_moves_nothing() {
    let dir = temp_dir();
    let path = dir.path();
    let aio = start_aio(IoMethod::Worker);
    let wal = open_wal(path, &aio, 4 << 20, SyncMethod::OpenDatasync);
    let first = wal.flushed();
    let mut end_a = 0;
    while wal.insert_position() < first + (3 << 19) {
        end_a = insert(&wal).unwrap();
    }
    let points = aio.injections();
    points.attach(
        BEFORE_COMPLETE_SHARED,
        Injection::park()
            .at_offset(first % WAL_SEGMENT_SIZE)
            .times(1),
    );
    let a = {
        let wal = Arc::clone(&wal);
        std::thread::spawn(move || wal.flush(end_a))
    };
    assert!(points.wait_until_parked(BEFORE_COMPLETE_SHARED));
    let started = Instant::now();
    while writes(&aio) < 1 {
        assert!(started.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(1));
    }
    // A later commit collects (finding the second write done).
    let c = {
        let wal = Arc::clone(&wal);
        std::thread::spawn(move || {
            let end = insert(&wal).unwrap();
            wal.flush(end)
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    // And a commit whose record the second write holds.
    let d = {
        let wal = Arc::clone(&wal);
        std::thread::spawn(move || wal.flush(end_a))
    };
    std::thread::sleep(Duration::from_millis(200));
    let flushed = wal.flushed();
    let d_returned = d.is_finished();
    points.release(BEFORE_COMPLETE_SHARED);
    a.join().unwrap().unwrap();
    c.join().unwrap().unwrap();
    d.join().unwrap().unwrap();
    assert!(
        flushed <= first && !d_returned,
        "while the write at {first:#x} was held: flushed {flushed:#x}, a flush to {end_a:#x} returned: {d_returned}"
    );
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

/// Two flushes ending in one block, with a sync method that syncs after
/// writing: the second write writes the block again from its start (no
/// padding record between), keeping the bytes the first made durable, so
/// that a crash tearing the rewrite at any sector leaves the first record
/// readable.
#[test]
fn a_block_written_in_part_is_written_again_with_its_durable_bytes_unchanged() {
    let dir = temp_dir();
    let path = dir.path();
    let aio = start_aio(IoMethod::Worker);
    let wal = open_wal(path, &aio, 2 << 20, SyncMethod::Fdatasync);
    let record = |n: u8| vec![n; 300];
    let first = wal.insert(Rmgr::Xlog, 2, 0, &[], &record(1)).unwrap();
    wal.flush(first).unwrap();
    let unpadded = FIRST_LSN + WAL_BLOCK_SIZE;
    assert!(
        (first..unpadded).contains(&wal.flushed()),
        "written as far as it is filled, not padded: {}",
        wal.flushed()
    );
    let segment = segment_path(path, FIRST_LSN / WAL_SEGMENT_SIZE);
    let block_at = FIRST_LSN % WAL_SEGMENT_SIZE;
    let block = |segment: &std::path::Path| {
        let bytes = std::fs::read(segment).unwrap();
        bytes[block_at as usize..(block_at + WAL_BLOCK_SIZE) as usize].to_vec()
    };
    let once = block(&segment);
    let second = wal.insert(Rmgr::Xlog, 2, 0, &[], &record(2)).unwrap();
    assert!(second < unpadded, "both in the first block");
    wal.flush(second).unwrap();
    assert!((second..unpadded).contains(&wal.flushed()));
    let twice = block(&segment);
    let durable = (first - FIRST_LSN) as usize;
    assert_eq!(
        once[..durable],
        twice[..durable],
        "the rewrite changed durable bytes"
    );
    assert_ne!(once, twice);
    let stats = wal.stats();
    assert_eq!(
        stats
            .padding_bytes
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    assert_eq!(stats.writes.load(std::sync::atomic::Ordering::Relaxed), 2);
    drop(wal);
    // Each way a crash could tear the rewrite, sector by sector: the
    // first record is there; the second is there only if all of it is.
    const SECTOR: usize = 512;
    let read_back = |on_disk: &[u8]| {
        let mut file = std::fs::read(&segment).unwrap();
        file[block_at as usize..(block_at + WAL_BLOCK_SIZE) as usize].copy_from_slice(on_disk);
        std::fs::write(&segment, &file).unwrap();
        let mut reader = aiostore::wal::reader::WalReader::new(path, FIRST_LSN, None);
        let mut ends = Vec::new();
        while let Ok(rec) = reader.next_record().unwrap() {
            ends.push(rec.end);
        }
        ends
    };
    for torn_at in (0..=WAL_BLOCK_SIZE as usize).step_by(SECTOR) {
        for new_first in [true, false] {
            let mut on_disk = if new_first {
                once.clone()
            } else {
                twice.clone()
            };
            let other = if new_first { &twice } else { &once };
            let range = if new_first {
                0..torn_at
            } else {
                torn_at..on_disk.len()
            };
            on_disk[range.clone()].copy_from_slice(&other[range]);
            let ends = read_back(&on_disk);
            assert_eq!(
                ends.first(),
                Some(&first),
                "torn at {torn_at}, new first {new_first}"
            );
            let whole_second =
                on_disk[..(second - FIRST_LSN) as usize] == twice[..(second - FIRST_LSN) as usize];
            assert_eq!(
                ends.get(1) == Some(&second),
                whole_second,
                "torn at {torn_at}"
            );
        }
    }
}
