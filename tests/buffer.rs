//! Buffer pool scenarios of DESIGN.md §11 for every I/O method: starting
//! I/O on a buffer, read combining, joining I/O already in progress,
//! verification failures and their settings, foreign completion, dropping
//! a relation with reads in flight, and dirty eviction.

mod common;

use std::collections::VecDeque;
use std::sync::Arc;

use aiostore::buffer::{
    BufferError, BufferIoOutcome, BufferTag, ReadOpKind, SessionSettings, StartIo,
};
use aiostore::config::IoMethod;
use aiostore::inject::{Injection, BEFORE_COMPLETE_SHARED};
use aiostore::page::{add_item, init_page, item};
use aiostore::stats::IoOp;
use aiostore::storage::Fork;
use common::*;

fn read_ios(db: &Db, method: IoMethod) -> u64 {
    db.aio.stats().row(method, IoOp::Read).map_or(0, |r| r.ios)
}

// ---- starting I/O on a buffer ------------------------------------------------

fn a_second_start_fails_a_waiting_start_blocks_and_may_take_over_a_failed_io(method: IoMethod) {
    let db = db(method, 4, 32);
    let mut a = session(&db);
    let mut b = session(&db);
    let tag = BufferTag {
        rel: REL,
        fork: Fork::Main,
        block: 2,
    };
    let (id, found) = a.get_buffer(tag, None).unwrap();
    assert!(!found);
    assert_eq!(a.start_buffer_io(id, true).unwrap(), StartIo::Started);
    let (id_b, found) = b.get_buffer(tag, None).unwrap();
    assert!(found);
    assert_eq!(id_b, id);
    assert_eq!(
        b.start_buffer_io(id, true).unwrap(),
        StartIo::InProgress(None)
    );
    let pool = Arc::clone(&db.pool);
    let waiter = std::thread::spawn(move || {
        let mut b = b;
        let outcome = b.start_buffer_io(id, false).unwrap();
        b.release(id);
        outcome
    });
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(
        !waiter.is_finished(),
        "a waiting start blocks while the first I/O runs"
    );
    // The first I/O fails: the waiter may start it.
    a.end_buffer_io(id, BufferIoOutcome::Failed);
    assert_eq!(waiter.join().unwrap(), StartIo::Started);
    let _ = pool;
    a.release(id);
}

// ---- read combining -----------------------------------------------------------

fn two_misses_are_one_two_block_io(method: IoMethod) {
    let db = db(method, 8, 32);
    let mut s = session(&db);
    let mut fwd = VecDeque::new();
    let mut op = s
        .start_read_buffers(REL, Fork::Main, 2, 2, &mut fwd, None, Default::default())
        .unwrap();
    assert!(matches!(op.kind, ReadOpKind::Io { .. }));
    assert_eq!(op.nblocks(), 2);
    s.wait_read_buffers(&mut op).unwrap();
    assert_eq!(read_ios(&db, method), 1);
    check(&s, op.buffers[0], 2);
    check(&s, op.buffers[1], 3);
    for id in op.buffers.drain(..) {
        s.release(id);
    }
}

fn hits_are_never_combined_and_a_hit_in_the_middle_splits_the_read(method: IoMethod) {
    let db = db(method, 8, 32);
    let mut s = session(&db);
    let hit = s.read_buffer(REL, Fork::Main, 3).unwrap();
    s.release(hit);
    let ios_before = read_ios(&db, method);
    let mut fwd = VecDeque::new();
    // Blocks 2..=5: [2 io][3 hit][4-5 io]
    let mut op = s
        .start_read_buffers(REL, Fork::Main, 2, 4, &mut fwd, None, Default::default())
        .unwrap();
    assert_eq!(op.nblocks(), 1, "the read stops before the hit");
    assert_eq!(fwd.len(), 1, "the hit's buffer is forwarded, pinned");
    s.wait_read_buffers(&mut op).unwrap();
    check(&s, op.buffers[0], 2);
    let mut op3 = s
        .start_read_buffers(REL, Fork::Main, 3, 3, &mut fwd, None, Default::default())
        .unwrap();
    assert!(matches!(op3.kind, ReadOpKind::Hit));
    assert_eq!(op3.nblocks(), 1);
    s.wait_read_buffers(&mut op3).unwrap();
    check(&s, op3.buffers[0], 3);
    let mut op45 = s
        .start_read_buffers(REL, Fork::Main, 4, 2, &mut fwd, None, Default::default())
        .unwrap();
    assert_eq!(op45.nblocks(), 2);
    s.wait_read_buffers(&mut op45).unwrap();
    check(&s, op45.buffers[0], 4);
    check(&s, op45.buffers[1], 5);
    assert_eq!(read_ios(&db, method) - ios_before, 2);
    for id in [op.buffers, op3.buffers, op45.buffers].concat() {
        s.release(id);
    }
}

fn io_combine_limit_three_splits_five_blocks_into_three_and_two(method: IoMethod) {
    let db = db(method, 8, 32);
    let mut s = session(&db);
    s.settings.io_combine_limit = 3;
    let mut fwd = VecDeque::new();
    let mut first = s
        .start_read_buffers(REL, Fork::Main, 0, 5, &mut fwd, None, Default::default())
        .unwrap();
    assert_eq!(first.nblocks(), 3);
    let mut second = s
        .start_read_buffers(REL, Fork::Main, 3, 2, &mut fwd, None, Default::default())
        .unwrap();
    assert_eq!(second.nblocks(), 2);
    s.wait_read_buffers(&mut first).unwrap();
    s.wait_read_buffers(&mut second).unwrap();
    for (i, &id) in first.buffers.iter().chain(&second.buffers).enumerate() {
        check(&s, id, i as u32);
    }
    assert_eq!(read_ios(&db, method), 2);
    for id in [first.buffers, second.buffers].concat() {
        s.release(id);
    }
}

// ---- I/O already in progress --------------------------------------------------

fn io_in_progress_on_the_first_middle_or_last_block_is_joined_as_foreign_io(method: IoMethod) {
    if method == IoMethod::Sync {
        return; // A sync read is never in progress once started.
    }
    for (held, first) in [(2u32, 2u32), (3, 2), (4, 2)] {
        let db = db(method, 8, 64);
        let mut attempt = 0;
        let (a, go) = loop {
            attempt += 1;
            assert!(attempt <= 100, "the read never reached an I/O worker");
            db.aio
                .injections()
                .attach(BEFORE_COMPLETE_SHARED, Injection::park().times(1));
            if let Some(held_read) = held_read(&db, method, held) {
                break held_read;
            }
            let mut s = session(&db);
            s.evict_relation(REL).unwrap();
        };
        let mut b = session(&db);
        let mut fwd = VecDeque::new();
        let mut ops = Vec::new();
        let mut block = first;
        while block <= 4 {
            let op = b
                .start_read_buffers(
                    REL,
                    Fork::Main,
                    block,
                    (5 - block) as usize,
                    &mut fwd,
                    None,
                    Default::default(),
                )
                .unwrap();
            if op.first_block == held {
                assert!(
                    matches!(op.kind, ReadOpKind::Foreign { .. }),
                    "block {held}: {:?}",
                    op.kind
                );
            } else {
                assert!(
                    matches!(op.kind, ReadOpKind::Io { .. }),
                    "block {block}: {:?}",
                    op.kind
                );
                assert!(op.first_block + op.nblocks() as u32 <= held || op.first_block > held);
            }
            block += op.nblocks() as u32;
            ops.push(op);
        }
        if method == IoMethod::Worker {
            db.aio.injections().release(BEFORE_COMPLETE_SHARED);
        } else {
            // io_uring: whoever reaps A's read parks at the point.
            let aio = Arc::clone(&db.aio);
            std::thread::spawn(move || {
                if aio.injections().wait_until_parked(BEFORE_COMPLETE_SHARED) {
                    aio.injections().release(BEFORE_COMPLETE_SHARED);
                }
            });
        }
        go.send(()).unwrap();
        for op in &mut ops {
            b.wait_read_buffers(op).unwrap();
        }
        let mut blk = first;
        for op in ops {
            for id in op.buffers {
                check(&b, id, blk);
                b.release(id);
                blk += 1;
            }
        }
        a.join().unwrap().unwrap();
    }
}

fn a_buffer_in_progress_without_a_wait_reference_is_waited_for(method: IoMethod) {
    let db = db(method, 4, 32);
    let mut a = session(&db);
    let tag = BufferTag {
        rel: REL,
        fork: Fork::Main,
        block: 1,
    };
    let (id, _) = a.get_buffer(tag, None).unwrap();
    assert_eq!(a.start_buffer_io(id, true).unwrap(), StartIo::Started);
    let pool = Arc::clone(&db.pool);
    let b = std::thread::spawn(move || {
        let mut b = pool.session(SessionSettings::default()).unwrap();
        let id = b.read_buffer(REL, Fork::Main, 1).unwrap();
        let ok = b.with_page(id, |page| item(page, 0) == Some(&payload(1)[..]));
        b.release(id);
        ok
    });
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(
        !b.is_finished(),
        "B waits for A's I/O, which has no wait reference"
    );
    // A gives up its I/O without reading; B then reads the block itself.
    a.end_buffer_io(id, BufferIoOutcome::Abandoned);
    assert!(b.join().unwrap());
    a.release(id);
}

// ---- verification --------------------------------------------------------------

fn corrupt_pages_are_reported_for_the_right_block_and_relation(method: IoMethod) {
    let db = db(method, 8, 32);
    let mut bad_checksum = page_for(2);
    bad_checksum[4000] ^= 1;
    write_raw(&db, 2, &bad_checksum);
    let mut bad_header = page_for(5);
    bad_header[12..14].copy_from_slice(&[0xFF, 0xFF]);
    write_raw(&db, 5, &bad_header);
    let mut s = session(&db);
    let err = s.read_buffer(REL, Fork::Main, 2).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("invalid page in block 2 of relation {REL}")
    );
    let mut fwd = VecDeque::new();
    let mut op = s
        .start_read_buffers(REL, Fork::Main, 1, 6, &mut fwd, None, Default::default())
        .unwrap();
    assert_eq!(op.nblocks(), 6);
    let err = s.wait_read_buffers(&mut op).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("2 invalid pages among blocks 1..6 of relation {REL}; the first is block 2")
    );
    assert!(
        db.pool
            .stats()
            .checksum_failures
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 2
    );
    assert_eq!(s.pinned_count(), 0, "a failed wait releases its pins");
}

fn zero_damaged_pages_and_ignore_checksum_failure_are_the_issuers(method: IoMethod) {
    let db = db(method, 8, 32);
    let mut bad = page_for(3);
    bad[5000] ^= 0x40;
    write_raw(&db, 3, &bad);
    let mut ignoring = db
        .pool
        .session(SessionSettings {
            ignore_checksum_failure: true,
            ..Default::default()
        })
        .unwrap();
    let id = ignoring.read_buffer(REL, Fork::Main, 3).unwrap();
    ignoring.with_page(id, |page| assert_eq!(page[5000], bad[5000]));
    ignoring.release(id);
    drop(ignoring);
    let mut s = session(&db);
    assert_eq!(s.evict_relation(REL).unwrap().evicted, 1);
    let mut zeroing = db
        .pool
        .session(SessionSettings {
            zero_damaged_pages: true,
            ..Default::default()
        })
        .unwrap();
    let id = zeroing.read_buffer(REL, Fork::Main, 3).unwrap();
    zeroing.with_page(id, |page| assert!(page.iter().all(|&b| b == 0)));
    zeroing.release(id);
}

// ---- foreign completion ---------------------------------------------------------

fn an_unwaited_read_is_completed_by_a_reader_of_the_same_block(method: IoMethod) {
    for corrupt in [false, true] {
        let db = db(method, 8, 32);
        if corrupt {
            let mut bad = page_for(6);
            bad[100] ^= 1;
            write_raw(&db, 6, &bad);
        }
        let mut a = session(&db);
        let mut fwd = VecDeque::new();
        let op = a
            .start_read_buffers(REL, Fork::Main, 6, 1, &mut fwd, None, Default::default())
            .unwrap();
        // A never waits. B reads the same block.
        let mut b = session(&db);
        let result = b.read_buffer(REL, Fork::Main, 6);
        match (corrupt, result) {
            (false, Ok(id)) => {
                check(&b, id, 6);
                b.release(id);
            }
            (true, Err(e)) => assert_eq!(
                e.to_string(),
                format!("invalid page in block 6 of relation {REL}")
            ),
            (corrupt, other) => panic!("corrupt={corrupt}: {:?}", other.map(|_| ())),
        }
        for id in op.buffers {
            a.release(id);
        }
    }
}

// ---- dropping and evicting ------------------------------------------------------

fn dropping_a_relation_with_reads_in_flight_lets_them_finish(method: IoMethod) {
    let db = db(method, 8, 32);
    let mut s = session(&db);
    let mut fwd = VecDeque::new();
    s.aio().enter_batch().unwrap();
    let mut op = s
        .start_read_buffers(REL, Fork::Main, 0, 4, &mut fwd, None, Default::default())
        .unwrap();
    db.smgr.relation(REL).unlink().unwrap();
    db.pool.relation(REL).close();
    s.aio().exit_batch();
    s.wait_read_buffers(&mut op).unwrap();
    for (i, id) in op.buffers.drain(..).enumerate() {
        check(&s, id, i as u32);
        s.release(id);
    }
}

fn a_dirty_victim_is_written_back_before_its_buffer_is_reused(method: IoMethod) {
    let db = db(method, 64, 16);
    let mut s = session(&db);
    let id = s.read_buffer(REL, Fork::Main, 0).unwrap();
    s.modify_page(id, |page| {
        init_page(page, 0);
        add_item(page, b"changed in the pool").unwrap();
    });
    s.release(id);
    // Read enough other blocks to evict block 0.
    for blkno in 1..64 {
        let id = s.read_buffer(REL, Fork::Main, blkno).unwrap();
        check(&s, id, blkno);
        s.release(id);
    }
    assert!(
        db.pool.contents().iter().all(|row| row.tag.block != 0),
        "block 0 was evicted"
    );
    let id = s.read_buffer(REL, Fork::Main, 0).unwrap();
    s.with_page(id, |page| {
        assert_eq!(item(page, 0).unwrap(), b"changed in the pool")
    });
    s.release(id);
    assert!(db.aio.stats().row(method, IoOp::Write).unwrap().ios >= 1);
}

fn a_session_cannot_pin_more_than_its_share_of_the_pool(method: IoMethod) {
    let db = db(method, 32, 16);
    let mut s = session(&db);
    let limit = db.pool.pin_limit();
    let mut pinned = Vec::new();
    for blkno in 0..limit as u32 {
        pinned.push(s.read_buffer(REL, Fork::Main, blkno).unwrap());
    }
    let err = s.read_buffer(REL, Fork::Main, limit as u32).unwrap_err();
    assert!(matches!(err, BufferError::PinLimit { .. }), "{err}");
    for id in pinned {
        s.release(id);
    }
}

fn concurrent_sessions_read_overlapping_blocks_of_a_relation_larger_than_the_pool(
    method: IoMethod,
) {
    let db = db(method, 256, 32);
    let threads: Vec<_> = (0..4u64)
        .map(|seed| {
            let pool = Arc::clone(&db.pool);
            std::thread::spawn(move || {
                let mut s = pool.session(SessionSettings::default()).unwrap();
                let mut rng = XorShift::new(0xDEADBEEF ^ ((seed + 1) * 7919));
                for _ in 0..1500 {
                    let blkno = rng.below(256) as u32;
                    let n = 1 + rng.below(4) as usize;
                    let mut fwd = VecDeque::new();
                    let mut op = s
                        .start_read_buffers(
                            REL,
                            Fork::Main,
                            blkno,
                            n.min(256 - blkno as usize),
                            &mut fwd,
                            None,
                            Default::default(),
                        )
                        .unwrap();
                    s.wait_read_buffers(&mut op).unwrap();
                    for (i, id) in op.buffers.drain(..).enumerate() {
                        check(&s, id, blkno + i as u32);
                        s.release(id);
                    }
                    for id in fwd {
                        s.release(id);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

for_each_method!(
    a_second_start_fails_a_waiting_start_blocks_and_may_take_over_a_failed_io,
    two_misses_are_one_two_block_io,
    hits_are_never_combined_and_a_hit_in_the_middle_splits_the_read,
    io_combine_limit_three_splits_five_blocks_into_three_and_two,
    io_in_progress_on_the_first_middle_or_last_block_is_joined_as_foreign_io,
    a_buffer_in_progress_without_a_wait_reference_is_waited_for,
    corrupt_pages_are_reported_for_the_right_block_and_relation,
    zero_damaged_pages_and_ignore_checksum_failure_are_the_issuers,
    an_unwaited_read_is_completed_by_a_reader_of_the_same_block,
    dropping_a_relation_with_reads_in_flight_lets_them_finish,
    a_dirty_victim_is_written_back_before_its_buffer_is_reused,
    a_session_cannot_pin_more_than_its_share_of_the_pool,
    concurrent_sessions_read_overlapping_blocks_of_a_relation_larger_than_the_pool,
);
