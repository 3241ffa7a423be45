//! Recovery from the WAL, in one process: a database closed as `kill -9`
//! would close it (`Database::simulate_crash`) reopens with every
//! committed change and nothing else; a page torn by the crash is
//! repaired from its image; a damaged log tail ends replay at the last
//! valid record; damage in the middle of the log, or a lost segment, stops
//! start-up with a message naming the LSN and the file. Every I/O method,
//! with and without direct I/O. (`tests/crash.rs` kills real processes.)

mod common;

use std::path::Path;
use std::sync::Arc;

use aiostore::config::IoMethod;
use aiostore::database::{Database, Session};
use aiostore::page::{verify_page, PageVerdict};
use aiostore::sql;
use aiostore::storage::{Fork, BLOCK_SIZE};
use aiostore::wal::{list_segments, segment_path, WAL_SEGMENT_SIZE};
use common::{crash, ints, new_small_pool_db, run, small_pool_settings, temp_dir};

/// Committed work survives a crash whether or not its pages were written;
/// uncommitted work does not show; a second crash during the first
/// recovery's aftermath changes nothing (replay is idempotent).
fn commits_survive_and_nothing_else_shows(method: IoMethod) {
    for direct in [false, true] {
        let (_dir, path, db) = new_small_pool_db(method, direct);
        {
            let mut s = db.session().unwrap();
            run(&mut s, "CREATE TABLE t (id int, v int)");
            run(
                &mut s,
                "INSERT INTO t SELECT g, 0 FROM generate_series(1, 5000) g",
            );
            run(&mut s, "CHECKPOINT");
            run(&mut s, "UPDATE t SET v = v + 1");
            run(&mut s, "DELETE FROM t WHERE id % 10 = 0");
            // Written but never committed.
            run(&mut s, "BEGIN");
            run(
                &mut s,
                "INSERT INTO t SELECT g, 99 FROM generate_series(100001, 100100) g",
            );
            run(&mut s, "UPDATE t SET v = 7 WHERE id < 100");
            // Push some of it to disk, as eviction would.
            s.buf.flush_all().unwrap();
            // The session dies with the process: no abort is logged.
            db.simulate_crash();
            drop(s);
        }
        crash(db);
        for round in 0..2 {
            let db = Database::open(&path, &small_pool_settings(method, direct)).unwrap();
            assert!(db.recovery().is_some(), "round {round}: nothing replayed");
            let mut s = db.session().unwrap();
            assert_eq!(
                ints(&mut s, "SELECT count(*), min(v), max(v), max(id) FROM t"),
                vec![4500, 1, 1, 4999],
                "round {round}, direct {direct}"
            );
            drop(s);
            crash(db);
        }
    }
}

/// A page torn by the crash (its first 4 KiB new, the rest old) is
/// repaired by replay from the image logged at its first change after the
/// checkpoint.
fn a_torn_page_is_repaired_from_its_image(method: IoMethod) {
    let (_dir, path, db) = new_small_pool_db(method, false);
    let rel = {
        let mut s = db.session().unwrap();
        run(&mut s, "CREATE TABLE t (id int, pad text)");
        run(
            &mut s,
            "INSERT INTO t SELECT g, repeat('x', 100) FROM generate_series(1, 2000) g",
        );
        run(&mut s, "CHECKPOINT");
        db.catalog().table("t").unwrap().heap.rel
    };
    let file = path.join("base").join(rel.to_string());
    let old = std::fs::read(&file).unwrap();
    {
        let mut s = db.session().unwrap();
        run(&mut s, "UPDATE t SET pad = repeat('y', 100) WHERE id <= 30");
        s.buf.flush_all().unwrap();
    }
    let new = std::fs::read(&file).unwrap();
    assert_ne!(
        old[..BLOCK_SIZE],
        new[..BLOCK_SIZE],
        "block 0 was rewritten"
    );
    let mut torn = new[..BLOCK_SIZE].to_vec();
    torn[4096..].copy_from_slice(&old[4096..BLOCK_SIZE]);
    std::os::unix::fs::FileExt::write_all_at(
        &std::fs::File::options().write(true).open(&file).unwrap(),
        &torn,
        0,
    )
    .unwrap();
    let page: [u8; BLOCK_SIZE] = torn.try_into().unwrap();
    assert!(
        matches!(verify_page(&page, 0), PageVerdict::ChecksumMismatch { .. }),
        "the torn page fails its checksum"
    );
    crash(db);
    let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
    let report = db.recovery().unwrap();
    assert!(report.images_restored > 0, "{report:?}");
    let mut s = db.session().unwrap();
    assert_eq!(ints(&mut s, "SELECT count(*) FROM t"), vec![2000]);
    assert_eq!(
        ints(
            &mut s,
            "SELECT count(*) FROM t WHERE pad = repeat('y', 100)"
        ),
        vec![30]
    );
    drop(s);
    drop(db);
    let repaired = std::fs::read(&file).unwrap();
    for (block, page) in repaired.chunks(BLOCK_SIZE).enumerate() {
        let page: &[u8; BLOCK_SIZE] = page.try_into().unwrap();
        assert!(verify_page(page, block as u32).is_ok(), "block {block}");
    }
}

/// Flips a byte at `offset` of the log.
fn flip(path: &Path, lsn: u64) {
    let seg = segment_path(path, lsn / WAL_SEGMENT_SIZE);
    let f = std::fs::File::options()
        .read(true)
        .write(true)
        .open(&seg)
        .unwrap();
    let at = lsn % WAL_SEGMENT_SIZE;
    let mut b = [0u8; 1];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut b, at).unwrap();
    b[0] ^= 0x40;
    std::os::unix::fs::FileExt::write_all_at(&f, &b, at).unwrap();
}

/// One-row transactions, then a byte of the log's tail flipped at
/// several offsets: replay ends before the damage, and the table holds
/// exactly the transactions that committed before it (a prefix).
fn a_damaged_log_tail_ends_replay_at_the_last_valid_record(method: IoMethod) {
    let mut seed = 0x9E37_79B9u64;
    for attempt in 0..4 {
        let (_dir, path, db) = new_small_pool_db(method, false);
        let mut ends = Vec::new();
        let start = {
            let mut s = db.session().unwrap();
            run(&mut s, "CREATE TABLE t (id int)");
            run(&mut s, "CHECKPOINT");
            let start = db.wal().insert_position();
            for id in 1..=300 {
                run(&mut s, &format!("INSERT INTO t VALUES ({id})"));
                ends.push(db.wal().flushed());
            }
            start
        };
        let end = db.wal().flushed();
        crash(db);
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let at = start + seed % (end - start);
        flip(&path, at);
        let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
        let mut s = db.session().unwrap();
        let got = ints(&mut s, "SELECT count(*), max(id) FROM t");
        assert_eq!(got[0], got[1], "attempt {attempt}: not a prefix: {got:?}");
        // Every commit flushed more than a block before the damage is in.
        let sure = ends.iter().filter(|&&e| e + 8192 < at).count() as i64;
        assert!(
            got[0] >= sure,
            "attempt {attempt}: {got:?}, expected at least {sure}"
        );
        assert!(
            got[0] < 300,
            "attempt {attempt}: damage at {at:#x} lost nothing"
        );
        drop(s);
    }
}

/// Damage followed by much valid log is not a torn tail: start-up stops
/// and names the record's LSN and file. A lost segment in the middle too.
fn damage_in_the_middle_or_a_lost_segment_stops_start_up(method: IoMethod) {
    let (_dir, path, db) = new_small_pool_db(method, false);
    let start = {
        let mut s = db.session().unwrap();
        run(&mut s, "CREATE TABLE t (id int, pad text)");
        run(&mut s, "CHECKPOINT");
        let start = db.wal().insert_position();
        // About 40 MiB of log: more than a torn tail can hold.
        for _ in 0..4 {
            run(
                &mut s,
                "INSERT INTO t SELECT g, repeat('z', 400) FROM generate_series(1, 20000) g",
            );
        }
        start
    };
    crash(db);
    let segments = list_segments(&path).unwrap();
    assert!(segments.len() >= 3, "{segments:?}");
    // A byte inside the first record after the checkpoint's.
    let mut damaged = path.with_extension("damaged");
    copy_dir(&path, &damaged);
    flip(&damaged, start + 100);
    let err = Database::open(&damaged, &small_pool_settings(method, false))
        .err()
        .expect("opened over damage")
        .to_string();
    assert!(err.contains("invalid WAL record at 0/"), "{err}");
    assert!(
        err.contains(&aiostore::wal::segment_name(start / WAL_SEGMENT_SIZE)),
        "{err}"
    );
    std::fs::remove_dir_all(&damaged).unwrap();
    damaged = path.with_extension("lost");
    copy_dir(&path, &damaged);
    let middle = segments[segments.len() / 2];
    std::fs::remove_file(segment_path(&damaged, middle)).unwrap();
    let err = Database::open(&damaged, &small_pool_settings(method, false))
        .err()
        .expect("opened without a segment")
        .to_string();
    assert!(
        err.contains("is missing") && err.contains(&aiostore::wal::segment_name(middle)),
        "{err}"
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// CREATE and DROP TABLE that returned survive a crash with their files;
/// a table file without a catalog entry is removed by recovery.
fn ddl_survives_a_crash_and_orphan_files_go(method: IoMethod) {
    let (_dir, path, db) = new_small_pool_db(method, false);
    let dropped_rel = {
        let mut s = db.session().unwrap();
        run(&mut s, "CREATE TABLE kept (id int)");
        run(
            &mut s,
            "INSERT INTO kept SELECT g FROM generate_series(1, 100) g",
        );
        run(&mut s, "CREATE TABLE gone (id int)");
        run(&mut s, "INSERT INTO gone VALUES (1)");
        let rel = db.catalog().table("gone").unwrap().heap.rel;
        run(&mut s, "DROP TABLE gone");
        rel
    };
    crash(db);
    // As if a CREATE TABLE had made its file and crashed before its rows.
    let orphan = path.join("base").join("20000");
    std::fs::write(&orphan, b"").unwrap();
    let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
    let mut s = db.session().unwrap();
    assert_eq!(ints(&mut s, "SELECT count(*) FROM kept"), vec![100]);
    assert!(sql::execute(&mut s, "SELECT * FROM gone").is_err());
    assert!(!path.join("base").join(dropped_rel.to_string()).exists());
    assert!(!orphan.exists(), "the orphan file was left");
}

/// With synchronous_commit off, a crash may lose the last commits but
/// keeps a prefix of them, and nothing is damaged; the background writer
/// makes them durable within a few wal_writer_delay.
fn asynchronous_commits_lose_at_most_a_suffix(method: IoMethod) {
    for wait_for_writer in [false, true] {
        let (_dir, path, db) = new_small_pool_db(method, false);
        {
            let mut s = db.session().unwrap();
            run(&mut s, "CREATE TABLE t (id int)");
            run(&mut s, "SET synchronous_commit = off");
            for id in 1..=500 {
                run(&mut s, &format!("INSERT INTO t VALUES ({id})"));
            }
        }
        if wait_for_writer {
            // wal_writer_delay is 200 ms by default.
            std::thread::sleep(std::time::Duration::from_millis(800));
        }
        crash(db);
        let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
        let mut s = db.session().unwrap();
        let got = ints(&mut s, "SELECT count(*), max(id) FROM t");
        assert_eq!(got[0], got[1], "not a prefix: {got:?}");
        if wait_for_writer {
            assert_eq!(got[0], 500, "the background writer did not flush");
        }
    }
}

/// checkpoint_timeout starts checkpoints by itself: the redo point moves
/// and a crash replays only what came after it.
fn checkpoints_start_on_their_own(method: IoMethod) {
    let dir = temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    let mut with_timeout = small_pool_settings(method, false);
    with_timeout.push("checkpoint_timeout=1".into());
    let db = Database::open(&path, &with_timeout).unwrap();
    let before = db.wal().redo();
    {
        let mut s = db.session().unwrap();
        run(&mut s, "CREATE TABLE t (id int)");
        run(
            &mut s,
            "INSERT INTO t SELECT g FROM generate_series(1, 1000) g",
        );
    }
    let started = std::time::Instant::now();
    while db.wal().redo() == before && started.elapsed().as_secs() < 10 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(db.wal().redo() > before, "no checkpoint within 10 s");
    crash(db);
    let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
    assert!(db.recovery().unwrap().records < 10, "{:?}", db.recovery());
    let mut s = db.session().unwrap();
    assert_eq!(ints(&mut s, "SELECT count(*) FROM t"), vec![1000]);
}

/// A WAL write that fails (a full disk) or a sync that fails stops the
/// database: that commit fails, so does every later change, and no data
/// page is written; the next start recovers every commit that returned.
fn a_failed_wal_write_or_sync_stops_the_database(method: IoMethod) {
    use aiostore::inject::{Injection, WAL_BEFORE_SYNC, WAL_BEFORE_WRITE};
    for (point, errno, text) in [
        (WAL_BEFORE_WRITE, libc::ENOSPC, "No space left on device"),
        (WAL_BEFORE_SYNC, libc::EIO, "Input/output error"),
    ] {
        let (_dir, path, db) = new_small_pool_db(method, false);
        {
            let mut s = db.session().unwrap();
            run(&mut s, "CREATE TABLE t (id int)");
            run(
                &mut s,
                "INSERT INTO t SELECT g FROM generate_series(1, 100) g",
            );
            db.aio()
                .injections()
                .attach(point, Injection::rewrite_result(-(errno as i64)).times(1));
            let err = sql::execute(&mut s, "INSERT INTO t VALUES (1000)")
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("stopped") && err.contains(text),
                "{point}: {err}"
            );
            let again = sql::execute(&mut s, "INSERT INTO t VALUES (1001)")
                .unwrap_err()
                .to_string();
            assert!(again.contains("stopped"), "{point}: {again}");
            assert!(sql::execute(&mut s, "CHECKPOINT").is_err());
        }
        drop(db);
        let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
        assert!(db.recovery().is_some());
        let mut s = db.session().unwrap();
        // A failed write never reached the file; after a failed sync the
        // record may be on disk after all (the kernel wrote it), so that
        // commit's outcome is unknown, as with PostgreSQL. The statement
        // refused afterwards never counts.
        let got = ints(&mut s, "SELECT count(*), max(id) FROM t");
        let possible: &[Vec<i64>] = if point == WAL_BEFORE_WRITE {
            &[vec![100, 100]]
        } else {
            &[vec![100, 100], vec![101, 1000]]
        };
        assert!(possible.contains(&got), "{point}: {got:?}");
        run(&mut s, "INSERT INTO t VALUES (2000)");
    }
}

/// A change that cleared a page's all-visible flag, whose heap page was
/// written before the crash while the map's own clear record was not made
/// durable (the heap page's write flushed the log only to the heap
/// record): replay skips the heap record (the page's LSN covers it) and
/// still clears the map bit the record implies, as PostgreSQL's heap redo
/// does. Otherwise the bit would claim a page whose flag is clear.
fn a_map_bit_is_cleared_when_its_heap_page_was_written_first(method: IoMethod) {
    let dir = temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    // No background flush: the map's clear record must stay in memory.
    // And WAL writes that pad their blocks (several in flight): a flush
    // then writes only whole blocks, so the map's record, which crosses
    // out of the heap record's block, stays behind. (Written one at a
    // time, a flush writes every record finished, as PostgreSQL's does,
    // and the map's would ride along.)
    let mut with = small_pool_settings(method, false);
    with.extend([
        "wal_writer_delay=10000".into(),
        "wal_sync_method=open_datasync".into(),
        "wal_io_concurrency=4".into(),
    ]);
    let db = Database::open(&path, &with).unwrap();
    let (rel, expected, logged_to);
    {
        let mut s = db.session().unwrap();
        run(&mut s, "CREATE TABLE t (id int, v int)");
        run(
            &mut s,
            "INSERT INTO t SELECT g, 0 FROM generate_series(1, 3000) g",
        );
        run(&mut s, "VACUUM t");
        run(&mut s, "CHECKPOINT");
        rel = db.catalog().table("t").unwrap().heap.rel;
        let nblocks = db.pool().relation(rel).nblocks(Fork::Main).unwrap();
        let bits = aiostore::heap::vm::all_visible_bits(&mut s.buf, rel, nblocks).unwrap();
        assert!(bits.iter().all(|&b| b), "vacuum set every bit: {bits:?}");
        run(&mut s, "BEGIN");
        // A row of a block other than 0: the map record ends with the
        // block's number, so its last bytes are not zeros (a record whose
        // unwritten end is all zeros reads back whole from the zero-filled
        // segment).
        run(&mut s, "DELETE FROM t WHERE id = 1000");
        logged_to = db.wal().insert_position();
        expected = aiostore::heap::vm::all_visible_bits(&mut s.buf, rel, nblocks).unwrap();
        assert_eq!(expected.iter().filter(|&&b| !b).count(), 1, "{expected:?}");
        assert!(expected[0], "{expected:?}");
        // The heap page goes to disk, its WAL first; the map page and the
        // end of the map's record (past the flushed blocks) do not.
        s.buf.flush_fork(rel, Fork::Main).unwrap();
        assert!(
            db.wal().flushed() < logged_to,
            "the map's clear record was flushed with the heap page's"
        );
        db.simulate_crash();
    }
    crash(db);
    let db = Database::open(&path, &with).unwrap();
    let report = db.recovery().expect("replayed").clone();
    assert!(
        report.end < logged_to,
        "the map's clear record was replayed: {report:?}"
    );
    let mut s = db.session().unwrap();
    let nblocks = db.pool().relation(rel).nblocks(Fork::Main).unwrap();
    let bits = aiostore::heap::vm::all_visible_bits(&mut s.buf, rel, nblocks).unwrap();
    assert_eq!(
        bits, expected,
        "a block lost its all-visible flag, yet its map bit survived replay"
    );
    // The delete never committed.
    assert_eq!(
        ints(&mut s, "SELECT count(*), min(id) FROM t"),
        vec![3000, 1]
    );
}

/// A data file whose sync fails at a checkpoint stops the database (the
/// kernel may have dropped the pages it could not write, and a retried
/// fsync would report success: PostgreSQL's fsync panic); the message
/// names the file; on the next start replay restores what the failed
/// sync may have lost.
fn a_failed_data_file_sync_stops_the_database(method: IoMethod) {
    use aiostore::inject::{Injection, BUFFER_BEFORE_FILE_SYNC};
    let (_dir, path, db) = new_small_pool_db(method, false);
    {
        let mut s = db.session().unwrap();
        run(&mut s, "CREATE TABLE t (id int)");
        run(
            &mut s,
            "INSERT INTO t SELECT g FROM generate_series(1, 100) g",
        );
        let rel = db.catalog().table("t").unwrap().heap.rel;
        db.aio().injections().attach(
            BUFFER_BEFORE_FILE_SYNC,
            Injection::rewrite_result(-(libc::EIO as i64))
                .at_offset(u64::from(rel))
                .times(1),
        );
        let err = sql::execute(&mut s, "CHECKPOINT").unwrap_err().to_string();
        assert!(
            err.contains("Input/output error") && err.contains(&format!("{rel}")),
            "{err}"
        );
        let after = sql::execute(&mut s, "INSERT INTO t VALUES (1000)")
            .unwrap_err()
            .to_string();
        assert!(
            after.contains("stopped") && after.contains("could not be synced"),
            "{after}"
        );
    }
    drop(db);
    let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
    assert!(
        db.recovery().is_some(),
        "the stopped database was not replayed"
    );
    let mut s = db.session().unwrap();
    assert_eq!(
        ints(&mut s, "SELECT count(*), max(id) FROM t"),
        vec![100, 100]
    );
    run(&mut s, "INSERT INTO t VALUES (2000)");
}

/// A checkpoint that moves the redo point while a change's record is
/// built without its page's image (the page was last logged after the old
/// redo point) makes the insertion build it again with the image: the
/// first change after a checkpoint must carry it, or a page torn after the
/// checkpoint could not be repaired. Forced: the insertion is parked
/// between building and reserving while the checkpoint starts.
fn a_checkpoint_between_building_and_reserving_a_record_adds_the_image(method: IoMethod) {
    use aiostore::inject::{Injection, WAL_INSERT_BEFORE_RESERVE};
    use std::sync::atomic::Ordering;
    let (_dir, path, db) = new_small_pool_db(method, false);
    {
        let mut s = db.session().unwrap();
        run(&mut s, "CREATE TABLE t (id int)");
        run(&mut s, "INSERT INTO t VALUES (1)");
    }
    let redo_before = db.wal().redo();
    let images_before = db.wal().stats().full_page_images.load(Ordering::SeqCst);
    let points = db.aio().injections();
    points.attach(WAL_INSERT_BEFORE_RESERVE, Injection::park().times(1));
    let insert = {
        let db = Arc::clone(&db);
        std::thread::spawn(move || {
            let mut s = db.session().unwrap();
            run(&mut s, "INSERT INTO t VALUES (2)");
        })
    };
    assert!(points.wait_until_parked(WAL_INSERT_BEFORE_RESERVE));
    // The page was logged after the old redo point: built without image.
    assert_eq!(
        db.wal().stats().full_page_images.load(Ordering::SeqCst),
        images_before
    );
    let checkpoint = {
        let db = Arc::clone(&db);
        std::thread::spawn(move || db.checkpoint(false).map(drop).map_err(|e| e.to_string()))
    };
    // The checkpoint takes its redo point at once, then waits for the
    // page the parked insertion holds.
    let started = std::time::Instant::now();
    while db.wal().redo() == redo_before {
        assert!(
            started.elapsed().as_secs() < 10,
            "the checkpoint never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    points.release(WAL_INSERT_BEFORE_RESERVE);
    insert.join().unwrap();
    checkpoint.join().unwrap().unwrap();
    assert_eq!(
        db.wal().stats().full_page_images.load(Ordering::SeqCst),
        images_before + 1,
        "the insert's record was not built again with its page's image"
    );
    crash(db);
    let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
    let mut s = db.session().unwrap();
    assert_eq!(ints(&mut s, "SELECT count(*), max(id) FROM t"), vec![2, 2]);
}

/// Vacuum sets a page's all-visible flag, an update clears it before
/// vacuum sets the map bit, vacuum sets and logs the bit, and the crash
/// comes before vacuum's second look at the flag clears the bit again (its
/// record lost). Replay must not leave the bit set on a page without its
/// flag (the crash tests found such bits). The crash image is a copy of
/// the directory taken with the log flushed up to the bit's record.
fn a_map_bit_set_after_its_page_lost_its_flag_is_not_replayed(method: IoMethod) {
    use aiostore::inject::{Injection, VACUUM_BEFORE_MAP_BITS, VACUUM_BEFORE_MAP_RECHECK};
    let (dir, path, db) = new_small_pool_db(method, false);
    {
        let mut s = db.session().unwrap();
        run(&mut s, "CREATE TABLE t (id int, v int)");
        run(
            &mut s,
            "INSERT INTO t SELECT g, 0 FROM generate_series(1, 3000) g",
        );
    }
    let points = db.aio().injections();
    points.attach(VACUUM_BEFORE_MAP_BITS, Injection::park().times(1));
    points.attach(VACUUM_BEFORE_MAP_RECHECK, Injection::park().times(1));
    let vacuum = {
        let db = Arc::clone(&db);
        std::thread::spawn(move || {
            let mut s = db.session().unwrap();
            run(&mut s, "VACUUM t");
        })
    };
    assert!(points.wait_until_parked(VACUUM_BEFORE_MAP_BITS));
    {
        let mut s = db.session().unwrap();
        run(&mut s, "UPDATE t SET v = 1 WHERE id = 1");
    }
    points.release(VACUUM_BEFORE_MAP_BITS);
    assert!(points.wait_until_parked(VACUUM_BEFORE_MAP_RECHECK));
    db.wal().flush_all().unwrap();
    let image = dir.path().join("crash-image");
    copy_dir(&path, &image);
    points.release(VACUUM_BEFORE_MAP_RECHECK);
    vacuum.join().unwrap();
    drop(db);
    let db = Database::open(&image, &small_pool_settings(method, false)).unwrap();
    assert!(db.recovery().is_some());
    let rel = db.catalog().table("t").unwrap().heap.rel;
    let mut s = db.session().unwrap();
    let nblocks = db.pool().relation(rel).nblocks(Fork::Main).unwrap();
    let bits = aiostore::heap::vm::all_visible_bits(&mut s.buf, rel, nblocks).unwrap();
    assert!(
        !bits[0],
        "block 0 lost its flag to the update, yet its map bit came back"
    );
    assert!(
        bits[1..].iter().any(|&b| b),
        "vacuum's other bits were replayed: {bits:?}"
    );
    assert_eq!(
        ints(&mut s, "SELECT count(*), sum(v) FROM t"),
        vec![3000, 1]
    );
}

/// Every row of `table`, in id order, as text to compare.
fn table_rows(s: &mut Session, table: &str) -> String {
    let rows = run(s, &format!("SELECT * FROM {table} ORDER BY id"))
        .pop()
        .unwrap()
        .rows;
    format!("{} rows: {rows:?}", rows.len())
}

/// Every file under `dir`, with its bytes.
fn files_under(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().to_string();
            (name, std::fs::read(e.path()).unwrap())
        })
        .collect()
}

/// Replay reads the pages upcoming records touch ahead of them
/// (recovery_prefetch), and its results are the same with it off: a
/// workload over several tables, one of them dropped and one created in
/// the replayed stretch, one truncated by VACUUM and then filled again,
/// with pages written midway (newer on disk than some records), a pool
/// smaller than the data (pages are read again during replay), and an
/// uncommitted transaction at the crash. The same crash image is opened
/// with prefetching off and on: the data files after recovery are the
/// same bytes, and the tables hold what was committed. Buffered files;
/// direct I/O with a pool of 64 buffers (a pin limit of 8); and direct
/// I/O without page images (full_page_writes off: every record's page is
/// read, so nearly all of them are read ahead), where VACUUM does not
/// truncate: replay cannot apply a change logged without an image to a
/// page that a later truncation, made before the crash, took off the
/// file, prefetching or not.
fn replay_gives_the_same_pages_with_and_without_prefetching(method: IoMethod) {
    const TABLES: [&str; 4] = ["a", "b", "c", "e"];
    // The last two cases leave each session 8 pins (shared_buffers /
    // max_sessions, as the crash tests run): replay's stream must leave
    // replay the pins it takes besides.
    for (direct, full_page_writes, shared_buffers, max_sessions) in [
        (false, true, 512, 8),
        (true, false, 512, 8),
        (true, true, 64, 8),
        (false, true, 128, 16),
    ] {
        let dir = temp_dir();
        let path = dir.path().join("data");
        Database::init(&path).unwrap();
        let mut with = small_pool_settings(method, direct);
        with.push(format!("shared_buffers={shared_buffers}"));
        with.push(format!("max_sessions={max_sessions}"));
        with.push(format!(
            "full_page_writes={}",
            if full_page_writes { "on" } else { "off" }
        ));
        let db = Database::open(&path, &with).unwrap();
        let committed = {
            let mut s = db.session().unwrap();
            for (table, rows) in [("a", 20000), ("b", 8000), ("c", 10000), ("d", 3000)] {
                run(
                    &mut s,
                    &format!("CREATE TABLE {table} (id int, v int, pad text)"),
                );
                run(
                    &mut s,
                    &format!(
                        "INSERT INTO {table} SELECT g, g % 100, repeat('{table}', 80) FROM generate_series(1, {rows}) g"
                    ),
                );
            }
            run(&mut s, "CHECKPOINT");
            // The replayed stretch.
            run(&mut s, "UPDATE a SET v = v + 1 WHERE id % 7 = 1");
            run(&mut s, "UPDATE b SET v = v + 2 WHERE id % 5 = 0");
            run(&mut s, "UPDATE d SET v = 9 WHERE id < 500");
            run(&mut s, "CREATE TABLE e (id int, v int, pad text)");
            run(
                &mut s,
                "INSERT INTO e SELECT g, g, repeat('e', 80) FROM generate_series(1, 5000) g",
            );
            s.buf.flush_all().unwrap();
            run(&mut s, "UPDATE a SET v = v + 3 WHERE id % 11 = 2");
            run(&mut s, "DROP TABLE d");
            run(&mut s, "DELETE FROM c WHERE id > 4000");
            if full_page_writes {
                let c = db.catalog().table("c").unwrap().heap.rel;
                let before = db.pool().relation(c).nblocks(Fork::Main).unwrap();
                run(&mut s, "VACUUM c");
                let after = db.pool().relation(c).nblocks(Fork::Main).unwrap();
                assert!(
                    after < before,
                    "VACUUM did not truncate c: {before} -> {after}"
                );
            }
            run(
                &mut s,
                "INSERT INTO c SELECT g, 1, repeat('c', 80) FROM generate_series(20001, 22000) g",
            );
            run(&mut s, "UPDATE a SET v = v + 10 WHERE id % 3 = 0");
            run(&mut s, "UPDATE e SET v = -v WHERE id % 4 = 0");
            run(&mut s, "UPDATE c SET v = v + 5 WHERE id % 2 = 0");
            run(&mut s, "UPDATE b SET v = v + 7 WHERE id % 3 = 1");
            let committed: Vec<String> = TABLES.iter().map(|t| table_rows(&mut s, t)).collect();
            run(&mut s, "BEGIN");
            run(&mut s, "UPDATE a SET v = 0 WHERE id % 2 = 0");
            run(
                &mut s,
                "INSERT INTO e SELECT g, 0, 'x' FROM generate_series(9001, 9500) g",
            );
            db.simulate_crash();
            drop(s);
            committed
        };
        crash(db);
        let mut base_files = Vec::new();
        for prefetch in [false, true] {
            let image = dir.path().join(format!("prefetch-{prefetch}"));
            copy_dir(&path, &image);
            let mut opened = with.clone();
            opened.push(format!(
                "recovery_prefetch={}",
                if prefetch { "on" } else { "off" }
            ));
            let db = Database::open(&image, &opened).unwrap();
            let report = db.recovery().unwrap().clone();
            assert!(report.pages_read > 0, "replay read no page: {report:?}");
            match &report.prefetch {
                Some(p) => {
                    assert!(prefetch);
                    assert!(p.blocks_noted > 0, "nothing was read ahead: {report:?}");
                    assert!(p.stream.ios > 0, "the stream read nothing: {report:?}");
                    if !full_page_writes {
                        assert_eq!(p.skipped_image, 0, "{report:?}");
                    }
                }
                None => assert!(!prefetch, "{report:?}"),
            }
            drop(db);
            // Recovery's checkpoint wrote every page replay changed.
            base_files.push(files_under(&image.join("base")));
            let db = Database::open(&image, &opened).unwrap();
            let mut s = db.session().unwrap();
            let got: Vec<String> = TABLES.iter().map(|t| table_rows(&mut s, t)).collect();
            for ((table, got), want) in TABLES.iter().zip(&got).zip(&committed) {
                assert!(
                    got == want,
                    "table {table}, prefetch {prefetch}, direct {direct}: {} / {}",
                    &got[..80.min(got.len())],
                    &want[..80.min(want.len())]
                );
            }
            assert!(
                sql::execute(&mut s, "SELECT * FROM d").is_err(),
                "d is back"
            );
        }
        let (off, on) = (&base_files[0], &base_files[1]);
        assert_eq!(
            off.keys().collect::<Vec<_>>(),
            on.keys().collect::<Vec<_>>(),
            "the same files"
        );
        for (name, bytes) in off {
            assert!(
                on[name] == *bytes,
                "file {name} differs after replay with and without prefetching (direct {direct})"
            );
        }
    }
}

for_each_method!(
    replay_gives_the_same_pages_with_and_without_prefetching,
    a_map_bit_set_after_its_page_lost_its_flag_is_not_replayed,
    a_checkpoint_between_building_and_reserving_a_record_adds_the_image,
    a_failed_wal_write_or_sync_stops_the_database,
    a_failed_data_file_sync_stops_the_database,
    a_map_bit_is_cleared_when_its_heap_page_was_written_first,
    commits_survive_and_nothing_else_shows,
    a_torn_page_is_repaired_from_its_image,
    a_damaged_log_tail_ends_replay_at_the_last_valid_record,
    damage_in_the_middle_or_a_lost_segment_stops_start_up,
    ddl_survives_a_crash_and_orphan_files_go,
    asynchronous_commits_lose_at_most_a_suffix,
    checkpoints_start_on_their_own,
);
