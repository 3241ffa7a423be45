//! The asynchronous write path of the buffer pool: writes through AIO with
//! a shared completion callback, on every I/O method, direct and buffered.
//! Completions are held at an injection point, so that "while the write is
//! in flight" is a state the test creates, not one it hopes for.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aiostore::buffer::{BufferError, BufferSession, BufferTag, WriteSlots};
use aiostore::config::IoMethod;
use aiostore::inject::{Injection, BEFORE_COMPLETE_SHARED};
use aiostore::page::{add_item, init_page, item};
use aiostore::storage::{Fork, BLOCK_SIZE};
use common::*;

fn tag(block: u32) -> BufferTag {
    BufferTag {
        rel: REL,
        fork: Fork::Main,
        block,
    }
}

fn open(method: IoMethod, direct: bool) -> Db {
    if direct {
        db(method, 16, 32)
    } else {
        db_buffered(method, 16, 32)
    }
}

/// Puts `text` on block `block` (read, changed, left dirty).
fn change(s: &mut BufferSession, block: u32, text: &str) -> u32 {
    let id = s.read_buffer(REL, Fork::Main, block).unwrap();
    s.modify_page(id, |page| {
        init_page(page, 0);
        add_item(page, text.as_bytes()).unwrap();
    });
    s.release(id);
    id
}

fn text_of(s: &mut BufferSession, block: u32) -> String {
    let id = s.read_buffer(REL, Fork::Main, block).unwrap();
    let text = s.with_page(id, |page| {
        String::from_utf8(item(page, 0).unwrap().to_vec()).unwrap()
    });
    s.release(id);
    text
}

fn row(db: &Db, id: u32) -> aiostore::buffer::BufferRow {
    db.pool
        .contents()
        .into_iter()
        .find(|r| r.buffer == id)
        .expect("the buffer holds a page")
}

/// What is on disk for `block`: read again after the pool let go of it.
fn on_disk(db: &Db, s: &mut BufferSession, block: u32) -> String {
    let outcome = s.evict_relation(REL).unwrap();
    assert_eq!(outcome.skipped, 0, "nothing of the relation stays pinned");
    let _ = db;
    text_of(s, block)
}

/// Writes `ids` (blocks `first..`) through AIO from a thread of its own,
/// with a session of its own; returns the write's outcome when joined.
fn write_in_thread(
    db: &Db,
    first: u32,
    ids: Vec<u32>,
) -> std::thread::JoinHandle<Result<(), BufferError>> {
    let mut s = session(db);
    std::thread::spawn(move || {
        let mut slots = WriteSlots::new(1, 16);
        let run: Vec<u32> = ids
            .iter()
            .zip(first..)
            .map(|(&id, block)| {
                s.claim_for_write(id, Some(tag(block)), |_| true)
                    .expect("a dirty buffer with no I/O is claimed");
                id
            })
            .collect();
        slots.start(&mut s, &run, tag(first), false)?;
        slots.finish_all(&mut s)
    })
}

/// A buffer being written stays readable and changeable; a change made
/// while its write is in flight keeps it dirty (the write took the older
/// copy); a session that needs it written waits for the write in flight
/// (woken by the completion, whoever runs it) and then writes the change.
fn a_buffer_being_written_stays_readable_and_a_change_meanwhile_keeps_it_dirty(
    method: IoMethod,
    direct: bool,
) {
    let db = open(method, direct);
    let mut s = session(&db);
    let id = change(&mut s, 2, "first");
    let inj = db.aio.injections();
    inj.attach(BEFORE_COMPLETE_SHARED, Injection::park().times(1));
    let writer = write_in_thread(&db, 2, vec![id]);
    assert!(inj.wait_until_parked(BEFORE_COMPLETE_SHARED));
    let r = row(&db, id);
    assert!(r.valid && r.dirty && r.io_in_progress, "{r:?}");
    // Readable and changeable while the write is in flight.
    assert_eq!(text_of(&mut s, 2), "first");
    change(&mut s, 2, "second");
    inj.release(BEFORE_COMPLETE_SHARED);
    writer.join().unwrap().unwrap();
    let r = row(&db, id);
    assert!(
        r.dirty && !r.io_in_progress,
        "changed during the write: {r:?}"
    );

    // A waiter: its flush blocks until the write in flight ends.
    inj.attach(BEFORE_COMPLETE_SHARED, Injection::park().times(1));
    let writer = write_in_thread(&db, 2, vec![id]);
    assert!(inj.wait_until_parked(BEFORE_COMPLETE_SHARED));
    let ended = Arc::new(AtomicBool::new(false));
    let waiter = {
        let mut w = session(&db);
        let ended = Arc::clone(&ended);
        std::thread::spawn(move || {
            let id = w.read_buffer(REL, Fork::Main, 2).unwrap();
            w.flush_buffer(id).unwrap();
            w.release(id);
            ended.load(Ordering::SeqCst)
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !waiter.is_finished(),
        "the flush waits for the write in flight"
    );
    ended.store(true, Ordering::SeqCst);
    inj.release(BEFORE_COMPLETE_SHARED);
    writer.join().unwrap().unwrap();
    assert!(
        waiter.join().unwrap(),
        "the flush returned before the write ended"
    );
    let r = row(&db, id);
    assert!(!r.dirty && !r.io_in_progress, "{r:?}");
    assert_eq!(on_disk(&db, &mut s, 2), "second");
}

/// A write that fails (EIO, or ENOSPC with the full-disk hint) is reported
/// with its file, leaves its buffers dirty and not busy, and the next
/// write of them succeeds.
fn a_failed_write_leaves_its_buffers_dirty_and_names_the_file(method: IoMethod, direct: bool) {
    for (errno, words) in [(libc::EIO, "Input/output error"), (libc::ENOSPC, "free")] {
        let db = open(method, direct);
        let mut s = session(&db);
        let ids: Vec<u32> = (4..7)
            .map(|b| change(&mut s, b, &format!("b{b}")))
            .collect();
        db.aio.injections().attach(
            BEFORE_COMPLETE_SHARED,
            Injection::rewrite_result(-i64::from(errno)).times(1),
        );
        let err = write_in_thread(&db, 4, ids.clone())
            .join()
            .unwrap()
            .unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, BufferError::Write { .. }), "{err:?}");
        assert!(
            text.contains(&format!("{REL}")) && text.contains(words),
            "{text}"
        );
        for &id in &ids {
            let r = row(&db, id);
            assert!(r.dirty && !r.io_in_progress && r.pins == 0, "{r:?}");
        }
        s.flush_all().unwrap();
        for b in 4..7 {
            assert_eq!(on_disk(&db, &mut s, b), format!("b{b}"));
        }
    }
}

/// A write the kernel shortens ends its written blocks in the completion
/// callback; its issuer writes the rest from the same copy.
fn a_shortened_write_is_completed_by_its_issuer(method: IoMethod, direct: bool) {
    let db = open(method, direct);
    let mut s = session(&db);
    let ids: Vec<u32> = (8..12)
        .map(|b| change(&mut s, b, &format!("b{b}")))
        .collect();
    db.aio.injections().attach(
        BEFORE_COMPLETE_SHARED,
        Injection::rewrite_result(BLOCK_SIZE as i64).times(1),
    );
    write_in_thread(&db, 8, ids.clone())
        .join()
        .unwrap()
        .unwrap();
    for &id in &ids {
        let r = row(&db, id);
        assert!(!r.dirty && !r.io_in_progress && r.pins == 0, "{r:?}");
    }
    for b in 8..12 {
        assert_eq!(on_disk(&db, &mut s, b), format!("b{b}"));
    }
}

/// Dropping a relation's buffers waits for a write of one of them in
/// flight (it would land after a cut), then evicts it.
fn evicting_a_relation_waits_for_its_writes_in_flight(method: IoMethod, direct: bool) {
    let db = open(method, direct);
    let mut s = session(&db);
    let id = change(&mut s, 3, "written");
    let inj = db.aio.injections();
    inj.attach(BEFORE_COMPLETE_SHARED, Injection::park().times(1));
    let writer = write_in_thread(&db, 3, vec![id]);
    assert!(inj.wait_until_parked(BEFORE_COMPLETE_SHARED));
    let ended = Arc::new(AtomicBool::new(false));
    let evicter = {
        let mut e = session(&db);
        let ended = Arc::clone(&ended);
        std::thread::spawn(move || {
            let outcome = e.discard_relation(REL).unwrap();
            (outcome, ended.load(Ordering::SeqCst))
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    assert!(!evicter.is_finished(), "eviction waits for the write");
    ended.store(true, Ordering::SeqCst);
    inj.release(BEFORE_COMPLETE_SHARED);
    writer.join().unwrap().unwrap();
    let (outcome, after) = evicter.join().unwrap();
    assert!(after, "eviction returned before the write ended");
    assert_eq!(outcome.skipped, 0, "{outcome:?}");
    assert_eq!(text_of(&mut s, 3), "written");
}

direct_and_buffered!(
    a_buffer_being_written_stays_readable_and_a_change_meanwhile_keeps_it_dirty,
    a_failed_write_leaves_its_buffers_dirty_and_names_the_file,
    a_shortened_write_is_completed_by_its_issuer,
    evicting_a_relation_waits_for_its_writes_in_flight,
    syncs_are_one_per_written_segment,
    a_session_without_a_ring_writes_ahead_of_the_clock,
);

/// A session dirtying more pages than the pool holds, without a ring and
/// with no background writer: once the sweep has handed it a dirty victim
/// it starts writes of the buffers just ahead of the clock hand, so that
/// most victims are clean when taken, not written and waited for one at a
/// time. Every page reads back as written.
fn a_session_without_a_ring_writes_ahead_of_the_clock(method: IoMethod, direct: bool) {
    const BLOCKS: u32 = 256;
    let db = if direct {
        db(method, BLOCKS, 32)
    } else {
        db_buffered(method, BLOCKS, 32)
    };
    let mut s = session(&db);
    for b in 0..BLOCKS {
        change(&mut s, b, &format!("page {b}"));
    }
    let stats = s.write_stats();
    assert!(
        stats.clock_ahead.blocks > stats.sync.blocks,
        "most victims must have been written ahead: {stats:?}"
    );
    assert_eq!(stats.ring_ahead, Default::default(), "{stats:?}");
    s.finish_writes_ahead().unwrap();
    for b in (0..BLOCKS).step_by(7) {
        assert_eq!(on_disk(&db, &mut s, b), format!("page {b}"));
    }
}

/// A checkpoint's sync phase: one fdatasync per segment written since the
/// last, however often it was written, several in flight at once through
/// AIO; nothing is left to sync afterwards.
fn syncs_are_one_per_written_segment(method: IoMethod, direct: bool) {
    let db = db_with_files(method, 16, 32, 4, direct);
    let mut s = session(&db);
    // Blocks 0..12 in three segments of 4, each written twice.
    for round in 0..2 {
        for b in 0..12 {
            let id = s.read_buffer(REL, Fork::Main, b).unwrap();
            s.modify_page(id, |page| {
                init_page(page, 0);
                add_item(page, format!("{round}").as_bytes()).unwrap();
            });
            s.flush_buffer(id).unwrap();
            s.release(id);
        }
    }
    let fsyncs = |db: &Db| {
        db.aio
            .stats()
            .row(method, aiostore::stats::IoOp::Fsync)
            .map_or(0, |r| r.ios)
    };
    let before = fsyncs(&db);
    assert_eq!(s.sync_written_files(8).unwrap(), 3);
    assert_eq!(fsyncs(&db) - before, 3);
    assert_eq!(s.sync_written_files(8).unwrap(), 0);
}
