//! Read stream scenarios of DESIGN.md §11 for every I/O method: repeated
//! blocks, a block stuck in another session's I/O (and that I/O failing),
//! combining and segment boundaries, distance control, pause/resume, reset,
//! and several sessions streaming over overlapping blocks.

mod common;

use std::sync::Arc;

use aiostore::buffer::{SessionSettings, Strategy, StrategyKind};
use aiostore::config::IoMethod;
use aiostore::inject::{Injection, BEFORE_COMPLETE_SHARED};
use aiostore::storage::Fork;
use aiostore::stream::{Next, ReadStream, StreamFlags, StreamLimits};
use common::*;

/// Streams over `blocks` in session `s`, checking each page's contents,
/// and returns the block numbers in the order the buffers came out.
fn stream_in(
    s: &mut aiostore::buffer::BufferSession,
    blocks: &[u32],
    flags: StreamFlags,
) -> (Vec<u32>, aiostore::stream::StreamStats) {
    let mut it = blocks.iter().copied();
    let mut stream = ReadStream::begin(
        s,
        REL,
        Fork::Main,
        flags,
        StreamLimits::default(),
        None,
        |data: &mut u32| match it.next() {
            Some(b) => {
                *data = b;
                Next::Block(b)
            }
            None => Next::End,
        },
    );
    let mut out = Vec::new();
    while let Some((id, block)) = stream.next_buffer(s).unwrap() {
        check(s, id, block);
        s.release(id);
        out.push(block);
    }
    (out, stream.end(s))
}

/// [`stream_in`] in a new session, checking that nothing stays pinned.
fn stream_blocks(
    db: &Db,
    blocks: &[u32],
    flags: StreamFlags,
) -> (Vec<u32>, aiostore::stream::StreamStats) {
    let mut s = session(db);
    let result = stream_in(&mut s, blocks, flags);
    assert_eq!(s.pinned_count(), 0);
    result
}

fn repeated_blocks_come_out_in_order(method: IoMethod) {
    let db = db(method, 16, 64);
    for blocks in [
        vec![0, 2, 2, 4, 4],
        (0..=6).chain((0..=5).rev()).collect::<Vec<u32>>(),
    ] {
        let mut s = session(&db);
        s.evict_relation(REL).unwrap();
        drop(s);
        let (out, _) = stream_blocks(&db, &blocks, StreamFlags::default());
        assert_eq!(out, blocks);
    }
}

fn revisited_blocks_do_not_break_up_the_reads_of_new_ones(method: IoMethod) {
    let db = db(method, 80, 256);
    // i, i+1, i+2, i+3 for every i: the reference thread's pattern.
    let blocks: Vec<u32> = (1..=64).flat_map(|i| i..i + 4).collect();
    let (out, stats) = stream_blocks(&db, &blocks, StreamFlags::default());
    assert_eq!(out, blocks);
    assert_eq!(stats.io_blocks, 67, "each distinct block is read once");
    assert!(
        stats.blocks_per_io() > 4.0,
        "new blocks are still combined: {stats:?}"
    );
    assert_eq!(stats.hits, 256 - 67);
}

fn a_sequential_stream_combines_reads_up_to_the_limit_and_never_across_a_segment(method: IoMethod) {
    let db = db_with_segments(method, 64, 256, 12);
    let blocks: Vec<u32> = (0..64).collect();
    let (out, stats) = stream_blocks(
        &db,
        &blocks,
        StreamFlags {
            sequential: true,
            ..Default::default()
        },
    );
    assert_eq!(out, blocks);
    assert_eq!(stats.io_blocks, 64);
    assert!(
        stats.blocks_per_io() > 2.0,
        "reads were combined: {stats:?}"
    );
    // Every read lies inside one 12-block segment.
    let row = db
        .aio
        .stats()
        .row(method, aiostore::stats::IoOp::Read)
        .unwrap();
    assert!(row.ios > 64 / 12, "{} reads for 6 segments", row.ios);
    let mut s = session(&db);
    s.evict_relation(REL).unwrap();
    let mut fwd = std::collections::VecDeque::new();
    let op = s
        .start_read_buffers(REL, Fork::Main, 10, 16, &mut fwd, None, Default::default())
        .unwrap();
    assert_eq!(op.nblocks(), 2, "blocks 10 and 11 end the first segment");
    let mut op = op;
    s.wait_read_buffers(&mut op).unwrap();
    for id in op.buffers {
        s.release(id);
    }
}

/// A stream over `blocks` with default settings and no per-buffer data.
fn block_list_stream(
    s: &aiostore::buffer::BufferSession,
    blocks: Vec<u32>,
) -> ReadStream<(), impl FnMut(&mut ()) -> Next> {
    let mut it = blocks.into_iter();
    ReadStream::begin(
        s,
        REL,
        Fork::Main,
        StreamFlags::default(),
        StreamLimits::default(),
        None,
        move |_: &mut ()| it.next().map_or(Next::End, Next::Block),
    )
}

fn distances_grow_only_when_the_consumer_waits(method: IoMethod) {
    let db = db(method, 256, 1024);
    let blocks: Vec<u32> = (0..256).collect();
    let mut s = session(&db);
    let mut stream = block_list_stream(&s, blocks.clone());
    let mut max_seen = (1, 1);
    while let Some((id, ())) = stream.next_buffer(&mut s).unwrap() {
        s.release(id);
        let d = stream.distances();
        max_seen = (max_seen.0.max(d.0), max_seen.1.max(d.1));
    }
    let cold = stream.end(&mut s);
    assert!(cold.waits > 0);
    assert!(
        max_seen.0 > 16 && max_seen.1 == 16,
        "cold read reached full distance: {max_seen:?}"
    );
    // Now everything is cached: no waits, no growth.
    let mut stream = block_list_stream(&s, blocks);
    while let Some((id, ())) = stream.next_buffer(&mut s).unwrap() {
        s.release(id);
        assert_eq!(stream.distances(), (1, 1));
    }
    let warm = stream.end(&mut s);
    assert_eq!((warm.waits, warm.ios, warm.hits), (0, 0, 256));
}

fn a_stream_meeting_a_block_stuck_in_another_sessions_io_returns_every_block(method: IoMethod) {
    if method == IoMethod::Sync {
        return; // A sync read cannot be held in progress.
    }
    for fail in [false, true] {
        let db = db(method, 16, 64);
        let (a, go) = loop {
            let held_block_offset = 5 * aiostore::storage::BLOCK_SIZE as u64;
            let injection = if fail {
                Injection {
                    park: true,
                    rewrite_result: Some(-(libc::EIO as i64)),
                    ..Default::default()
                }
            } else {
                Injection::park()
            }
            .at_offset(held_block_offset)
            .times(1);
            db.aio
                .injections()
                .attach(BEFORE_COMPLETE_SHARED, injection);
            if let Some(held) = held_read(&db, method, 5) {
                break held;
            }
            session(&db).evict_relation(REL).unwrap();
        };
        let releaser = {
            let aio = Arc::clone(&db.aio);
            std::thread::spawn(move || {
                // Let the stream get ahead first, then let A's read finish.
                std::thread::sleep(std::time::Duration::from_millis(20));
                if aio.injections().wait_until_parked(BEFORE_COMPLETE_SHARED) {
                    aio.injections().release(BEFORE_COMPLETE_SHARED);
                }
            })
        };
        let blocks: Vec<u32> = (0..16).collect();
        let (out, stats) = stream_blocks(&db, &blocks, StreamFlags::default());
        assert_eq!(out, blocks);
        assert!(stats.foreign_ios >= 1 || !fail, "{stats:?}");
        go.send(()).unwrap();
        let a_result = a.join().unwrap();
        if fail {
            let err = a_result.unwrap_err();
            assert!(
                err.contains("Input/output error"),
                "A gets its error: {err}"
            );
        } else {
            a_result.unwrap();
        }
        releaser.join().unwrap();
    }
}

fn a_paused_stream_resumes_where_it_stopped(method: IoMethod) {
    let db = db(method, 16, 64);
    let mut s = session(&db);
    let mut next = 0u32;
    let mut pause_at = Some(3u32);
    let mut stream = ReadStream::begin(
        &s,
        REL,
        Fork::Main,
        StreamFlags::default(),
        StreamLimits::default(),
        None,
        |_: &mut ()| {
            if pause_at == Some(next) {
                pause_at = None;
                return Next::Pause;
            }
            if next == 8 {
                return Next::End;
            }
            next += 1;
            Next::Block(next - 1)
        },
    );
    let mut out = Vec::new();
    while let Some((id, ())) = stream.next_buffer(&mut s).unwrap() {
        out.push(s.pool().tag(id).unwrap().block);
        s.release(id);
    }
    assert_eq!(out, vec![0, 1, 2]);
    stream.resume();
    while let Some((id, ())) = stream.next_buffer(&mut s).unwrap() {
        out.push(s.pool().tag(id).unwrap().block);
        s.release(id);
    }
    assert_eq!(out, (0..8).collect::<Vec<_>>());
    stream.end(&mut s);
}

fn a_reset_stream_starts_over_and_releases_what_it_held(method: IoMethod) {
    let db = db(method, 32, 128);
    let mut s = session(&db);
    let mut next = 0u32;
    let mut stream = ReadStream::begin(
        &s,
        REL,
        Fork::Main,
        StreamFlags {
            full: true,
            ..Default::default()
        },
        StreamLimits::default(),
        None,
        |_: &mut ()| {
            if next == 32 {
                return Next::End;
            }
            next += 1;
            Next::Block(next - 1)
        },
    );
    let (id, ()) = stream.next_buffer(&mut s).unwrap().unwrap();
    s.release(id);
    assert!(s.pinned_count() > 0, "a full-distance stream reads ahead");
    stream.reset(&mut s);
    assert_eq!(s.pinned_count(), 0);
    assert_eq!(stream.distances(), (16, 16));
    stream.end(&mut s);
}

fn a_bulk_read_stream_stays_inside_its_ring(method: IoMethod) {
    let db = db(method, 200, 512);
    let mut s = session(&db);
    let ring = Strategy::new(StrategyKind::BulkRead, db.pool.nbuffers());
    let ring_size = ring.size();
    let mut next = 0u32;
    let mut stream = ReadStream::begin(
        &s,
        REL,
        Fork::Main,
        StreamFlags {
            sequential: true,
            ..Default::default()
        },
        StreamLimits::default(),
        Some(ring),
        |_: &mut ()| {
            if next == 200 {
                return Next::End;
            }
            next += 1;
            Next::Block(next - 1)
        },
    );
    while let Some((id, ())) = stream.next_buffer(&mut s).unwrap() {
        s.release(id);
    }
    stream.end(&mut s);
    let used = db.pool.contents().len();
    assert!(
        used <= ring_size,
        "{used} buffers used by a ring of {ring_size}"
    );
}

fn sessions_streaming_overlapping_blocks_of_a_relation_larger_than_the_pool(method: IoMethod) {
    // Buffered too: there the sync method's reads are advised and deferred.
    for db in [db(method, 512, 128), db_buffered(method, 512, 128)] {
        streams_over_overlapping_blocks(&db);
    }
}

fn streams_over_overlapping_blocks(db: &Db) {
    let threads: Vec<_> = (0..4u64)
        .map(|seed| {
            let pool = Arc::clone(&db.pool);
            std::thread::spawn(move || {
                let mut s = pool.session(SessionSettings::default()).unwrap();
                let mut rng = XorShift::new(0x1234_5678 ^ ((seed + 1) * 104_729));
                for _ in 0..6 {
                    let start = rng.below(384) as u32;
                    let blocks: Vec<u32> = (start..start + 128)
                        .map(|b| {
                            if rng.below(5) == 0 {
                                rng.below(512) as u32
                            } else {
                                b
                            }
                        })
                        .collect();
                    let (seen, _) = stream_in(&mut s, &blocks, StreamFlags::default());
                    assert_eq!(seen, blocks);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

const BLOCK: usize = aiostore::storage::BLOCK_SIZE;

/// Random blocks with a jump back and a sequential stretch.
const SCATTERED: [u32; 14] = [40, 3, 17, 29, 8, 50, 51, 52, 53, 12, 33, 2, 60, 61];

fn advice_is_given_only_where_reads_cannot_overlap(method: IoMethod) {
    let sync = method == IoMethod::Sync;
    for direct in [false, true] {
        let db = if direct {
            db(method, 64, 64)
        } else {
            db_buffered(method, 64, 64)
        };
        let (out, stats) = stream_blocks(&db, &SCATTERED, StreamFlags::default());
        assert_eq!(out, SCATTERED);
        let advised = stats.advised_blocks;
        if sync && !direct {
            // All but the first read, which the consumer needs at once.
            assert!(advised >= 10, "sync on buffered files advises: {stats:?}");
        } else {
            assert_eq!(advised, 0, "direct={direct}: {stats:?}");
        }
        assert_eq!(
            db.pool
                .stats()
                .advised
                .load(std::sync::atomic::Ordering::Relaxed),
            advised
        );
        // Each block read once, advised or not.
        assert_eq!(stats.io_blocks, SCATTERED.len() as u64);
        let mut s = session(&db);
        s.evict_relation(REL).unwrap();
        drop(s);
        let sequential = StreamFlags {
            sequential: true,
            ..Default::default()
        };
        let (out, stats) = stream_blocks(&db, &SCATTERED, sequential);
        assert_eq!(out, SCATTERED);
        assert_eq!(
            stats.advised_blocks, 0,
            "the sequential flag means no advice"
        );
    }
}

fn a_deferred_read_skips_blocks_another_session_read_meanwhile(method: IoMethod) {
    use std::sync::atomic::Ordering::Relaxed;
    let db = db_buffered(method, 16, 32);
    let mut a = session(&db);
    let mut fwd = std::collections::VecDeque::new();
    let advice = aiostore::buffer::ReadFlags { advice: true };
    let mut op = a
        .start_read_buffers(REL, Fork::Main, 4, 5, &mut fwd, None, advice)
        .unwrap();
    assert_eq!(op.nblocks(), 5);
    let deferred = matches!(op.kind, aiostore::buffer::ReadOpKind::Deferred);
    assert_eq!(deferred, method == IoMethod::Sync, "{:?}", op.kind);
    let reads_before = db.pool.stats().reads.load(Relaxed);
    // Another session reads block 6, the middle of A's deferred read.
    let mut b = session(&db);
    let id = b.read_buffer(REL, Fork::Main, 6).unwrap();
    check(&b, id, 6);
    b.release(id);
    a.wait_read_buffers(&mut op).unwrap();
    for (i, &id) in op.buffers.iter().enumerate() {
        check(&a, id, 4 + i as u32);
    }
    for id in op.buffers.drain(..) {
        a.release(id);
    }
    let reads = db.pool.stats().reads.load(Relaxed) - reads_before;
    if deferred {
        // B's block, then A's 4 and 5, 7 and 8: nothing read twice.
        assert_eq!(reads, 5);
        assert_eq!(
            db.aio
                .stats()
                .row(method, aiostore::stats::IoOp::Read)
                .unwrap()
                .ios,
            3
        );
    } else {
        // A's read was in flight; B joined it.
        assert_eq!(reads, 0);
    }
}

fn a_shortened_advised_read_is_finished_by_another_read(method: IoMethod) {
    let db = db_buffered(method, 16, 32);
    let mut s = session(&db);
    let mut fwd = std::collections::VecDeque::new();
    let advice = aiostore::buffer::ReadFlags { advice: true };
    db.aio.injections().attach(
        BEFORE_COMPLETE_SHARED,
        Injection::rewrite_result(BLOCK as i64).times(1),
    );
    let mut op = s
        .start_read_buffers(REL, Fork::Main, 0, 4, &mut fwd, None, advice)
        .unwrap();
    s.wait_read_buffers(&mut op).unwrap();
    for (i, &id) in op.buffers.iter().enumerate() {
        check(&s, id, i as u32);
    }
    for id in op.buffers.drain(..) {
        s.release(id);
    }
    // One block arrived; the other three were read after it.
    let row = db
        .aio
        .stats()
        .row(method, aiostore::stats::IoOp::Read)
        .unwrap();
    assert!(row.ios >= 2, "{row:?}");
    assert_eq!(row.partial, 1, "{row:?}");
}

for_each_method!(
    advice_is_given_only_where_reads_cannot_overlap,
    a_shortened_advised_read_is_finished_by_another_read,
    a_deferred_read_skips_blocks_another_session_read_meanwhile,
    repeated_blocks_come_out_in_order,
    revisited_blocks_do_not_break_up_the_reads_of_new_ones,
    a_sequential_stream_combines_reads_up_to_the_limit_and_never_across_a_segment,
    distances_grow_only_when_the_consumer_waits,
    a_stream_meeting_a_block_stuck_in_another_sessions_io_returns_every_block,
    a_paused_stream_resumes_where_it_stopped,
    a_reset_stream_starts_over_and_releases_what_it_held,
    a_bulk_read_stream_stays_inside_its_ring,
    sessions_streaming_overlapping_blocks_of_a_relation_larger_than_the_pool,
);
