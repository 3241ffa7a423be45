//! Read stream scenarios of DESIGN.md §11 for every I/O method: repeated
//! blocks, a block stuck in another session's I/O (and that I/O failing),
//! combining and segment boundaries, distance control, pause/resume, reset,
//! and several sessions streaming over overlapping blocks. Then write
//! streams (the checkpointer's): what they hold between offers.

mod common;

use std::cell::Cell;

use aiostore::buffer::{BufferSession, ReadFlags, ReadOpKind, Strategy, StrategyKind};
use aiostore::config::IoMethod;
use aiostore::inject::{Injection, BEFORE_COMPLETE_SHARED};
use aiostore::stats::IoOp;
use aiostore::storage::Fork;
use aiostore::stream::{Next, ReadStream, StreamFlags, StreamLimits, WriteStream};
use common::*;

/// Streams over `blocks` in session `s`, checking each page's contents,
/// and returns the block numbers in the order the buffers came out.
fn stream_in(
    s: &mut BufferSession,
    blocks: &[u32],
    flags: StreamFlags,
) -> (Vec<u32>, aiostore::stream::StreamStats) {
    stream_in_with(s, blocks, flags, StreamLimits::default())
}

/// [`stream_in`] with the given I/O concurrency.
fn stream_in_with(
    s: &mut BufferSession,
    blocks: &[u32],
    flags: StreamFlags,
    limits: StreamLimits,
) -> (Vec<u32>, aiostore::stream::StreamStats) {
    let mut it = blocks.iter().copied();
    let mut stream = ReadStream::begin(
        s,
        REL,
        Fork::Main,
        flags,
        limits,
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

fn a_repeat_consumed_before_its_run_is_read_leaves_no_pin_behind(method: IoMethod) {
    // With one I/O at a time, the run 10, 11 is read only after the
    // consumer has taken block 7, whose repeat sits between 10 and 11 in
    // callback order: the read of 10..11 must not keep a pin on 11 that
    // nobody queued.
    let db = db(method, 64, 64);
    for eic in [1, 2, 16] {
        for blocks in [
            vec![7, 10, 7, 11],
            vec![3, 20, 3, 21, 22, 3, 23],
            vec![0, 5, 0, 6, 0, 7, 1, 8],
        ] {
            let mut s = session(&db);
            s.evict_relation(REL).unwrap();
            let limits = StreamLimits {
                effective_io_concurrency: eic,
                maintenance_io_concurrency: eic,
            };
            let (out, _) = stream_in_with(&mut s, &blocks, StreamFlags::default(), limits);
            assert_eq!(out, blocks, "eic {eic}");
            assert_eq!(s.pinned_count(), 0, "eic {eic}, blocks {blocks:?}");
        }
    }
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
    let row = db.aio.stats().row(method, IoOp::Read).unwrap();
    assert!(row.ios > 64 / 12, "{} reads for 6 segments", row.ios);
    let mut s = session(&db);
    s.evict_relation(REL).unwrap();
    let mut fwd = std::collections::VecDeque::new();
    let mut op = start_read_buffers(&mut s, 10, 16, &mut fwd);
    assert_eq!(op.nblocks(), 2, "blocks 10 and 11 end the first segment");
    s.wait_read_buffers(&mut op).unwrap();
    release_op(&mut s, &mut op);
}

/// A stream over blocks `0..n` in order, with no per-buffer data.
/// `handed_out` counts the blocks the callback has given the stream.
fn sequence_stream<'a>(
    s: &BufferSession,
    n: u32,
    flags: StreamFlags,
    ring: Option<Strategy>,
    handed_out: &'a Cell<u32>,
) -> ReadStream<(), impl FnMut(&mut ()) -> Next + 'a> {
    ReadStream::begin(
        s,
        REL,
        Fork::Main,
        flags,
        StreamLimits::default(),
        ring,
        move |_: &mut ()| {
            let next = handed_out.get();
            if next == n {
                return Next::End;
            }
            handed_out.set(next + 1);
            Next::Block(next)
        },
    )
}

/// Takes up to `most` buffers from `stream` (until it ends or pauses),
/// checking and releasing each, and returns their block numbers.
fn take(
    stream: &mut ReadStream<(), impl FnMut(&mut ()) -> Next>,
    s: &mut BufferSession,
    most: usize,
) -> Vec<u32> {
    let mut out = Vec::new();
    while out.len() < most {
        let Some((id, ())) = stream.next_buffer(s).unwrap() else {
            break;
        };
        let block = s.pool().tag(id).unwrap().block;
        check(s, id, block);
        s.release(id);
        out.push(block);
    }
    out
}

fn distances_grow_only_when_the_consumer_waits(method: IoMethod) {
    let db = db(method, 256, 1024);
    let mut s = session(&db);
    let handed_out = Cell::new(0);
    let mut stream = sequence_stream(&s, 256, StreamFlags::default(), None, &handed_out);
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
    let handed_out = Cell::new(0);
    let mut stream = sequence_stream(&s, 256, StreamFlags::default(), None, &handed_out);
    while let Some((id, ())) = stream.next_buffer(&mut s).unwrap() {
        s.release(id);
        assert_eq!(stream.distances(), (1, 1));
    }
    let warm = stream.end(&mut s);
    assert_eq!((warm.waits, warm.ios, warm.hits), (0, 0, 256));
}

/// A's read of block 5 is held in progress while a stream in B reaches
/// it; only once the stream has joined it is A's read let go (under
/// io_uring it parks when the stream reaps it). If A's read fails, the
/// stream reads the block itself, and A alone gets the error.
fn a_stream_meeting_a_block_stuck_in_another_sessions_io_returns_every_block(method: IoMethod) {
    const HELD: u32 = 5;
    for fail in [false, true] {
        let db = db(method, 16, 64);
        let mut injection = Injection::park()
            .at_offset(u64::from(HELD) * BLOCK as u64)
            .times(1);
        if fail {
            injection.rewrite_result = Some(-(libc::EIO as i64));
        }
        let (a, go) = hold_read(&db, method, HELD, injection);
        let mut s = session(&db);
        let handed_out = Cell::new(0);
        let mut stream = sequence_stream(&s, 16, StreamFlags::default(), None, &handed_out);
        // The blocks before the held one; the stream has looked ahead to
        // it by the time it hands out the one before.
        let mut out = take(&mut stream, &mut s, HELD as usize);
        assert_eq!(out, (0..HELD).collect::<Vec<_>>());
        assert_eq!(
            stream.stats().foreign_ios,
            1,
            "the stream found A's read of block {HELD} in progress: {:?}",
            stream.stats()
        );
        let releaser = release_when_parked(&db.aio);
        out.extend(take(&mut stream, &mut s, usize::MAX));
        let stats = stream.end(&mut s);
        assert_eq!(out, (0..16).collect::<Vec<_>>());
        assert_eq!(stats.foreign_ios, 1, "{stats:?}");
        assert_eq!(s.pinned_count(), 0);
        releaser.join().unwrap();
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
    let mut out = take(&mut stream, &mut s, usize::MAX);
    assert_eq!(out, vec![0, 1, 2]);
    stream.resume();
    out.extend(take(&mut stream, &mut s, usize::MAX));
    assert_eq!(out, (0..8).collect::<Vec<_>>());
    stream.end(&mut s);
    assert_eq!(s.pinned_count(), 0);
}

/// A stream begun with `begin_tagged` reads blocks of several relations
/// in the order its callback names them: consecutive blocks of one
/// relation are combined into one read (another relation's block starts a
/// new one, as a jump does), and a repeated block, of either relation, is
/// not read again.
fn a_tagged_stream_reads_blocks_of_several_relations_in_order(method: IoMethod) {
    use aiostore::buffer::BufferTag;
    use aiostore::page::{add_item, init_page, set_checksum};
    use aiostore::storage::{AlignedBuf, BLOCK_SIZE};
    const OTHER: u32 = REL + 1;
    // OTHER's block b holds what REL's block b + OTHER_PAYLOAD would.
    const OTHER_PAYLOAD: u32 = 1000;
    let db = db(method, 16, 128);
    let other = db.smgr.relation(OTHER);
    other.create(Fork::Main).unwrap();
    let mut pages = AlignedBuf::new(8 * BLOCK_SIZE);
    for b in 0..8u32 {
        let page = &mut pages[b as usize * BLOCK_SIZE..(b as usize + 1) * BLOCK_SIZE];
        let page: &mut [u8; BLOCK_SIZE] = page.try_into().unwrap();
        init_page(page, 0);
        add_item(page, &payload(b + OTHER_PAYLOAD)).unwrap();
        set_checksum(page, b);
    }
    other.extend(Fork::Main, 0, &pages).unwrap();
    let tag = |rel, block| BufferTag {
        rel,
        fork: Fork::Main,
        block,
    };
    let (a, b) = (|n| tag(REL, n), |n| tag(OTHER, n));
    let order = [
        a(0),
        b(0),
        a(1),
        a(2),
        a(3),
        b(1),
        b(2),
        b(1),
        a(3),
        a(4),
        a(5),
        b(3),
    ];
    let distinct = 10;
    let mut s = session(&db);
    let mut it = order.iter().copied();
    let mut stream = ReadStream::begin_tagged(
        &s,
        StreamFlags {
            full: true,
            ..Default::default()
        },
        StreamLimits::default(),
        None,
        |data: &mut Option<BufferTag>| match it.next() {
            Some(t) => {
                *data = Some(t);
                Next::Tagged(t)
            }
            None => Next::End,
        },
    );
    let mut out = Vec::new();
    while let Some((id, t)) = stream.next_buffer(&mut s).unwrap() {
        let t = t.unwrap();
        assert_eq!(db.pool.tag(id), Some(t));
        let shown = if t.rel == REL {
            t.block
        } else {
            t.block + OTHER_PAYLOAD
        };
        check(&s, id, shown);
        s.release(id);
        out.push(t);
    }
    let stats = stream.end(&mut s);
    assert_eq!(out, order);
    assert_eq!(s.pinned_count(), 0);
    assert_eq!(stats.io_blocks, distinct, "each block read once: {stats:?}");
    assert!(stats.ios < distinct, "nothing was combined: {stats:?}");
}

/// A stream leaves room for one pin of its consumer's (`begin` sizes it
/// so), also when a repeated block's first buffer has been handed out and
/// its repeat still waits in the queue holding the pin: that pin is the
/// stream's and counts against its look-ahead. (WAL replay pins a map page
/// between buffers of its stream.)
fn a_consumer_may_pin_one_buffer_besides_the_streams_with_repeats_queued(method: IoMethod) {
    // 64 buffers over 4 sessions: a pin limit of 16.
    let db = db(method, 64, 64);
    assert_eq!(db.pool.pin_limit(), 16);
    let mut s = session(&db);
    // Each block twice in a row: after the first is handed out, its
    // repeat stays queued.
    let blocks: Vec<u32> = (0..40).flat_map(|b| [b, b]).collect();
    let mut it = blocks.iter().copied();
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
        |data: &mut u32| match it.next() {
            Some(b) => {
                *data = b;
                Next::Block(b)
            }
            None => Next::End,
        },
    );
    let mut out = Vec::new();
    while let Some((id, block)) = stream.next_buffer(&mut s).unwrap() {
        check(&s, id, block);
        s.release(id);
        out.push(block);
        let extra = s
            .read_buffer(REL, Fork::Main, 63)
            .unwrap_or_else(|e| panic!("after block {block}: {e}"));
        s.release(extra);
    }
    stream.end(&mut s);
    assert_eq!(out, blocks);
    assert_eq!(s.pinned_count(), 0);
}

/// A stream fed in bursts (its callback pauses when it has nothing, and
/// is resumed when more comes, as WAL replay feeds one), over a mix of
/// cached and uncached blocks, with the consumer sometimes slow enough
/// that reads finish before it waits for them: every block comes out, in
/// order. (Reads that finish early grow only the combine distance; a
/// block missed by the all-hits fast path at readahead distance 1 was
/// then left pending, never read, and the stream said it had ended.)
fn a_stream_fed_in_bursts_returns_every_block(method: IoMethod) {
    const BLOCKS: u32 = 256;
    const WANTS: usize = 1000;
    // Blocks 0..HOT cached and asked for most often; the pool's 64
    // buffers give a pin limit of 16, so that hits soon bring the
    // distances back down.
    const HOT: u32 = 32;
    let db = db(method, BLOCKS, 64);
    let mut s = session(&db);
    let mut rng = XorShift::new(0x5EED);
    for b in 0..HOT {
        let id = s.read_buffer(REL, Fork::Main, b).unwrap();
        s.release(id);
    }
    let fed = std::cell::RefCell::new(std::collections::VecDeque::new());
    let mut stream = ReadStream::begin(
        &s,
        REL,
        Fork::Main,
        StreamFlags::default(),
        StreamLimits::default(),
        None,
        |data: &mut u32| match fed.borrow_mut().pop_front() {
            Some(b) => {
                *data = b;
                Next::Block(b)
            }
            None => Next::Pause,
        },
    );
    let mut wanted = std::collections::VecDeque::new();
    let mut handed = 0;
    while handed < WANTS {
        if wanted.is_empty() || rng.below(4) == 0 {
            for _ in 0..1 + rng.below(4) {
                // Runs of consecutive blocks, jumps and repeats.
                let b = match rng.below(8) {
                    0 => rng.below(BLOCKS as u64) as u32,
                    1 => wanted.back().map_or(0, |&b: &u32| (b + 1) % BLOCKS),
                    _ => rng.below(HOT as u64) as u32,
                };
                wanted.push_back(b);
                fed.borrow_mut().push_back(b);
            }
            stream.resume();
        }
        std::thread::sleep(std::time::Duration::from_micros(300));
        let want = wanted.pop_front().unwrap();
        let (id, block) = stream
            .next_buffer(&mut s)
            .unwrap()
            .unwrap_or_else(|| panic!("the stream ended with block {want} fed, after {handed}"));
        assert_eq!(block, want);
        check(&s, id, block);
        s.release(id);
        handed += 1;
    }
    stream.end(&mut s);
    assert_eq!(s.pinned_count(), 0);
}

/// A stream that keeps coming back to one block (WAL replay's page that
/// every insert goes to) pins no more buffers than its `max_pinned`, so
/// that its consumer can pin one page of its own between buffers: a
/// repeat whose block left the queue before it could be queued again is
/// read alone, and that read counts against the stream's pins like any.
fn a_stream_revisiting_a_hot_block_keeps_to_its_pins(method: IoMethod) {
    const HOT: u32 = 0;
    // 64 buffers over 4 sessions: a pin limit of 16.
    let db = db(method, 200, 64);
    let mut s = session(&db);
    let mut rng = XorShift::new(0x4077);
    let fed = std::cell::RefCell::new(std::collections::VecDeque::new());
    let mut stream = ReadStream::begin(
        &s,
        REL,
        Fork::Main,
        StreamFlags::default(),
        StreamLimits::default(),
        None,
        |data: &mut u32| match fed.borrow_mut().pop_front() {
            Some(b) => {
                *data = b;
                Next::Block(b)
            }
            None => Next::Pause,
        },
    );
    let mut wanted = std::collections::VecDeque::new();
    let mut next_cold = 1;
    for handed in 0..2000 {
        if wanted.len() < 40 {
            for _ in 0..1 + rng.below(40) {
                let b = if rng.below(2) == 0 {
                    HOT
                } else {
                    next_cold = next_cold % 190 + 1;
                    next_cold
                };
                wanted.push_back(b);
                fed.borrow_mut().push_back(b);
            }
            stream.resume();
        }
        let want = wanted.pop_front().unwrap();
        let (id, block) = stream.next_buffer(&mut s).unwrap().unwrap();
        assert_eq!(block, want);
        s.release(id);
        assert!(
            s.pinned_count() < db.pool.pin_limit(),
            "after {handed} buffers the stream pins {} of {}",
            s.pinned_count(),
            db.pool.pin_limit()
        );
        let extra = s
            .read_buffer(REL, Fork::Main, 199)
            .unwrap_or_else(|e| panic!("after {handed} buffers: {e}"));
        s.release(extra);
    }
    stream.end(&mut s);
    assert_eq!(s.pinned_count(), 0);
}

/// A stream whose pins are limited below what `begin` gave it never holds
/// more, and still keeps several single-block reads in flight within them.
fn a_stream_limited_in_pins_keeps_to_them_with_reads_in_flight(method: IoMethod) {
    const LIMIT: usize = 6;
    let db = db(method, 200, 512);
    let mut s = session(&db);
    let mut rng = XorShift::new(0x1F);
    let blocks: Vec<u32> = (0..300).map(|_| rng.below(200) as u32).collect();
    let mut it = blocks.iter().copied();
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
        |data: &mut u32| match it.next() {
            Some(b) => {
                *data = b;
                Next::Block(b)
            }
            None => Next::End,
        },
    );
    stream.limit_pins(LIMIT);
    assert_eq!(stream.max_pinned(), LIMIT);
    let mut out = Vec::new();
    while let Some((id, block)) = stream.next_buffer(&mut s).unwrap() {
        // The one handed out is the consumer's.
        assert!(s.pinned_count() <= LIMIT + 1, "{} pins", s.pinned_count());
        check(&s, id, block);
        s.release(id);
        out.push(block);
    }
    let stats = stream.end(&mut s);
    assert_eq!(out, blocks);
    if method != IoMethod::Sync {
        assert!(
            stats.avg_in_flight() > 1.5,
            "reads were not overlapped: {stats:?}"
        );
    }
}

fn a_reset_stream_starts_over_and_releases_what_it_held(method: IoMethod) {
    let db = db(method, 32, 128);
    let mut s = session(&db);
    let handed_out = Cell::new(0);
    let full = StreamFlags {
        full: true,
        ..Default::default()
    };
    let mut stream = sequence_stream(&s, 32, full, None, &handed_out);
    assert_eq!(take(&mut stream, &mut s, 1), [0]);
    assert!(s.pinned_count() > 0, "a full-distance stream reads ahead");
    let resume_at = handed_out.get();
    assert!(resume_at > 1, "the callback was asked ahead: {resume_at}");
    stream.reset(&mut s);
    assert_eq!(s.pinned_count(), 0);
    assert_eq!(stream.distances(), (16, 16));
    // What it had read ahead is forgotten: it asks the callback again.
    let rest = take(&mut stream, &mut s, usize::MAX);
    assert_eq!(rest, (resume_at..32).collect::<Vec<_>>());
    stream.end(&mut s);
    assert_eq!(s.pinned_count(), 0);
}

fn a_bulk_read_stream_stays_inside_its_ring(method: IoMethod) {
    let db = db(method, 200, 512);
    let mut s = session(&db);
    let ring = Strategy::new(StrategyKind::BulkRead, db.pool.nbuffers(), 0);
    let ring_size = ring.size();
    let handed_out = Cell::new(0);
    let sequential = StreamFlags {
        sequential: true,
        ..Default::default()
    };
    let mut stream = sequence_stream(&s, 200, sequential, Some(ring), &handed_out);
    let out = take(&mut stream, &mut s, usize::MAX);
    stream.end(&mut s);
    assert_eq!(out, (0..200).collect::<Vec<_>>());
    let used = db.pool.contents().len();
    assert!(
        used <= ring_size,
        "{used} buffers used by a ring of {ring_size}"
    );
}

fn a_ring_sized_for_the_look_ahead_keeps_several_reads_in_flight(method: IoMethod) {
    let db = db(method, 600, 4096);
    let sequential = StreamFlags {
        sequential: true,
        ..Default::default()
    };
    let in_flight = |look_ahead: usize| {
        let mut s = session(&db);
        s.evict_relation(REL).unwrap();
        let ring = Strategy::new(StrategyKind::BulkRead, db.pool.nbuffers(), look_ahead);
        let ring_size = ring.size();
        let handed_out = Cell::new(0);
        let mut stream = sequence_stream(&s, 600, sequential, Some(ring), &handed_out);
        let out = take(&mut stream, &mut s, usize::MAX);
        let stats = stream.end(&mut s);
        assert_eq!(out, (0..600).collect::<Vec<_>>());
        (ring_size, stats.avg_in_flight())
    };
    // PostgreSQL's 256 KiB ring holds two 16-block reads: one in flight.
    let (small, small_in_flight) = in_flight(0);
    assert_eq!(small, 32);
    let look_ahead = StreamLimits::default().look_ahead_blocks(false, 16);
    let (large, large_in_flight) = in_flight(look_ahead);
    assert_eq!(large, look_ahead + 1);
    assert!(
        large_in_flight > 2.0 * small_in_flight,
        "in flight: {large_in_flight} with a ring of {large}, {small_in_flight} with {small}"
    );
}

fn sessions_streaming_overlapping_blocks_of_a_relation_larger_than_the_pool(method: IoMethod) {
    // Buffered too: there the sync method's reads are advised and deferred.
    for db in [db(method, 512, 128), db_buffered(method, 512, 128)] {
        streams_over_overlapping_blocks(&db);
    }
}

fn streams_over_overlapping_blocks(db: &Db) {
    in_concurrent_sessions(db, 4, |s, seed| {
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
            let (seen, _) = stream_in(s, &blocks, StreamFlags::default());
            assert_eq!(seen, blocks);
        }
    });
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

/// Under sync on buffered files the advised read is deferred and skips the
/// block B read meanwhile; under the other methods it is in flight and B
/// joins it. Either way no block is read twice.
fn a_block_another_session_reads_during_an_advised_read_is_not_read_twice(method: IoMethod) {
    use std::sync::atomic::Ordering::Relaxed;
    let db = db_buffered(method, 16, 32);
    let mut a = session(&db);
    let mut fwd = std::collections::VecDeque::new();
    let advice = ReadFlags { advice: true };
    let mut op = a
        .start_read_buffers(REL, Fork::Main, 4, 5, &mut fwd, None, advice)
        .unwrap();
    assert_eq!(op.nblocks(), 5);
    let deferred = matches!(op.kind, ReadOpKind::Deferred);
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
    release_op(&mut a, &mut op);
    let reads = db.pool.stats().reads.load(Relaxed) - reads_before;
    if deferred {
        // B's block, then A's 4 and 5, 7 and 8: nothing read twice.
        assert_eq!(reads, 5);
        assert_eq!(db.aio.stats().row(method, IoOp::Read).unwrap().ios, 3);
    } else {
        // A's read was in flight; B joined it.
        assert_eq!(reads, 0);
    }
}

fn a_shortened_advised_read_is_finished_by_another_read(method: IoMethod) {
    let db = db_buffered(method, 16, 32);
    let mut s = session(&db);
    let mut fwd = std::collections::VecDeque::new();
    let advice = ReadFlags { advice: true };
    db.aio.injections().attach(
        BEFORE_COMPLETE_SHARED,
        Injection::rewrite_result(BLOCK as i64).times(1),
    );
    let mut op = s
        .start_read_buffers(REL, Fork::Main, 0, 4, &mut fwd, None, advice)
        .unwrap();
    let deferred = matches!(op.kind, ReadOpKind::Deferred);
    assert_eq!(deferred, method == IoMethod::Sync, "{:?}", op.kind);
    s.wait_read_buffers(&mut op).unwrap();
    for (i, &id) in op.buffers.iter().enumerate() {
        check(&s, id, i as u32);
    }
    release_op(&mut s, &mut op);
    // One block arrived; the other three were read after it, in one read.
    let row = db.aio.stats().row(method, IoOp::Read).unwrap();
    assert_eq!(row.ios, 2, "{row:?}");
    assert_eq!(row.partial, 1, "{row:?}");
}

// ---- write streams -----------------------------------------------------------

/// Dirties blocks `blocks` of the test relation in session `s`; returns
/// their buffers (unpinned).
fn dirty_blocks(s: &mut BufferSession, blocks: std::ops::Range<u32>) -> Vec<u32> {
    blocks
        .map(|block| {
            let id = s.read_buffer(REL, Fork::Main, block).unwrap();
            s.modify_page(id, |page| page[100] ^= 1);
            s.release(id);
            id
        })
        .collect()
}

fn block_tag(block: u32) -> aiostore::buffer::BufferTag {
    aiostore::buffer::BufferTag {
        rel: REL,
        fork: Fork::Main,
        block,
    }
}

/// A spread checkpoint sleeps between the buffers it offers its write
/// stream. The run the stream gathers meanwhile must not be claimed for
/// its write (busy, with no I/O to wait for): a DROP TABLE waited for such
/// a buffer after discarding the relation's others, which made the stream
/// skip every later offer and so never start the run; the DROP gave up
/// after 60 s with the relation's files left behind. Here the relation is
/// dropped between two offers: at once, and the run is then skipped.
fn a_write_stream_holds_no_claim_between_offers_so_a_drop_does_not_wait_for_it(method: IoMethod) {
    let db = db(method, 8, 64);
    let mut checkpointer = session(&db);
    let mut s = session(&db);
    let ids = dirty_blocks(&mut s, 0..2);
    let mut stream = WriteStream::new(4, 16);
    stream
        .write(&mut checkpointer, ids[0], block_tag(0))
        .unwrap();
    assert!(
        !db.pool.is_io_in_progress(ids[0]),
        "a buffer offered to a write stream is busy between offers"
    );
    let dropped = std::time::Instant::now();
    let outcome = s.discard_relation(REL).unwrap();
    assert!(
        dropped.elapsed() < std::time::Duration::from_secs(5),
        "the drop waited for the write stream"
    );
    assert_eq!(outcome.skipped, 0, "every buffer of the relation dropped");
    stream
        .write(&mut checkpointer, ids[1], block_tag(1))
        .unwrap();
    stream.finish(&mut checkpointer).unwrap();
    let stats = stream.stats();
    assert_eq!(
        (stats.offered, stats.blocks, stats.skipped),
        (2, 0, 2),
        "the dropped pages are skipped, not written"
    );
    assert!(db.pool.contents().iter().all(|r| r.tag.rel != REL));
}

/// The run is claimed when it is started: a buffer of it cleaned since it
/// was offered (by a session's own write) splits it, and the rest is still
/// written, in as few writes as the split allows.
fn a_write_stream_run_is_split_by_a_buffer_cleaned_after_it_was_offered(method: IoMethod) {
    let db = db(method, 8, 64);
    let mut checkpointer = session(&db);
    let mut s = session(&db);
    let ids = dirty_blocks(&mut s, 0..5);
    let mut stream = WriteStream::new(4, 16);
    for (&id, block) in ids.iter().zip(0..) {
        stream
            .write(&mut checkpointer, id, block_tag(block))
            .unwrap();
        assert!(!db.pool.is_io_in_progress(id));
    }
    let id = s.read_buffer(REL, Fork::Main, 2).unwrap();
    assert_eq!(id, ids[2]);
    s.flush_buffer(id).unwrap();
    s.release(id);
    stream.finish(&mut checkpointer).unwrap();
    let stats = stream.stats();
    assert_eq!(
        (stats.offered, stats.blocks, stats.writes, stats.skipped),
        (5, 4, 2, 1),
        "blocks 0-1 and 3-4 written, block 2 skipped"
    );
    assert!(db
        .pool
        .contents()
        .iter()
        .all(|r| r.tag.rel != REL || !r.dirty && !r.io_in_progress));
}

for_each_method!(
    a_ring_sized_for_the_look_ahead_keeps_several_reads_in_flight,
    a_repeat_consumed_before_its_run_is_read_leaves_no_pin_behind,
    advice_is_given_only_where_reads_cannot_overlap,
    a_shortened_advised_read_is_finished_by_another_read,
    a_block_another_session_reads_during_an_advised_read_is_not_read_twice,
    repeated_blocks_come_out_in_order,
    revisited_blocks_do_not_break_up_the_reads_of_new_ones,
    a_sequential_stream_combines_reads_up_to_the_limit_and_never_across_a_segment,
    distances_grow_only_when_the_consumer_waits,
    a_paused_stream_resumes_where_it_stopped,
    a_tagged_stream_reads_blocks_of_several_relations_in_order,
    a_consumer_may_pin_one_buffer_besides_the_streams_with_repeats_queued,
    a_stream_fed_in_bursts_returns_every_block,
    a_stream_revisiting_a_hot_block_keeps_to_its_pins,
    a_stream_limited_in_pins_keeps_to_them_with_reads_in_flight,
    a_reset_stream_starts_over_and_releases_what_it_held,
    a_bulk_read_stream_stays_inside_its_ring,
    sessions_streaming_overlapping_blocks_of_a_relation_larger_than_the_pool,
    a_write_stream_holds_no_claim_between_offers_so_a_drop_does_not_wait_for_it,
    a_write_stream_run_is_split_by_a_buffer_cleaned_after_it_was_offered;
    not sync:
    // A sync read cannot be held in progress.
    a_stream_meeting_a_block_stuck_in_another_sessions_io_returns_every_block,
);
