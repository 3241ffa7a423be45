//! Read streams: pinned buffers for blocks a callback chooses, with enough
//! I/O in flight to hide latency and consecutive blocks combined into I/Os
//! of up to `io_combine_limit` blocks (DESIGN.md §6).
//!
//! # Distances
//!
//! Two look-ahead distances, both starting at 1 (with `full`, at
//! min(max_pinned, io_combine_limit)):
//!
//! - after waiting for the I/O at the head of the stream: if the consumer
//!   really waited (or the read was synchronous), the *readahead* distance
//!   doubles (up to `max_pinned`); in any case a decay hold-off is set to
//!   `max_pinned` and the *combine* distance doubles (up to
//!   `io_combine_limit` and `max_pinned`);
//! - on a hit with no I/O in progress, the hold-off counts down, and once
//!   it is zero both distances shrink by one (never below 1).
//!
//! So distances grow only when the consumer had to wait: a fully cached
//! relation is read with distance 1 and pays almost nothing over a plain
//! buffer lookup, while a cold one quickly reaches full depth.
//!
//! # Queue
//!
//! Buffers leave in the order the callback chose their blocks. The queue
//! holds every pinned buffer not yet handed out, each tagged with the read
//! it waits for (if any). A block that is already in the queue is not read
//! or looked up again: its buffer is pinned once more and queued again,
//! tied to the same read. So a stream that revisits blocks (i, i+1, i+2,
//! i+3 for every i) still combines its new blocks into full-size reads
//! instead of breaking them into one-block reads around the repeats.
//!
//! # Many relations
//!
//! A stream begun with [`ReadStream::begin`] reads one relation fork, and
//! its callback names blocks by number ([`Next::Block`]). One begun with
//! [`ReadStream::begin_tagged`] reads blocks of any relation fork, named
//! by their whole tag ([`Next::Tagged`]): WAL replay's prefetching, whose
//! records touch many relations in an order only the log knows. Both are
//! the same machine: queue entries and reads carry whole tags, a run of
//! blocks to combine is consecutive blocks of one relation fork, and a new
//! relation fork starts a new run as a jump within one fork does. So one
//! stream keeps one pin budget, one I/O budget and one pair of distances
//! over every relation it reads; several streams in one session would each
//! size themselves from the pins free when they began, and together run
//! the session into its pin limit.

mod write;
pub use write::{WriteStream, WriteStreamStats};

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::buffer::{
    BufferError, BufferId, BufferSession, BufferTag, ReadFlags, ReadOp, ReadOpKind, Strategy,
};
use crate::storage::Fork;
use parking_lot::Mutex;

/// What the block callback says next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Read this block of the stream's relation fork next.
    Block(u32),
    /// Read this block of any relation fork next (a stream begun with
    /// [`ReadStream::begin_tagged`], or any other).
    Tagged(BufferTag),
    /// No block for now: the next one depends on buffers not consumed yet.
    /// Call [`ReadStream::resume`] when it can go on.
    Pause,
    /// No more blocks.
    End,
}

/// Blocks a consumer hands its stream as it learns which it will want (an
/// index scan's heap pages, batch by batch; a B-tree scan's leaves, from
/// their parents' downlinks): the stream's callback
/// ([`BlockFeed::callback`]) takes them in order, pauses the stream when
/// none is queued yet (the consumer queues more and calls
/// [`ReadStream::resume`]), and ends it once the queue is empty and
/// `done`.
#[derive(Debug, Default)]
pub struct BlockFeed {
    pub blocks: VecDeque<u32>,
    /// No block will be queued after those queued: an empty feed is the
    /// stream's end.
    pub done: bool,
    /// The callback found the feed empty and paused the stream.
    pub starved: bool,
}

/// A stream callback that takes its blocks from a [`BlockFeed`].
pub type FedBlocks = Box<dyn FnMut(&mut u32) -> Next + Send>;

impl BlockFeed {
    /// The callback of a stream fed from `feed`.
    pub fn callback(feed: &Arc<Mutex<BlockFeed>>) -> FedBlocks {
        let feed = Arc::clone(feed);
        Box::new(move |data: &mut u32| {
            let mut feed = feed.lock();
            match feed.blocks.pop_front() {
                Some(block) => {
                    *data = block;
                    Next::Block(block)
                }
                None if feed.done => Next::End,
                None => {
                    feed.starved = true;
                    Next::Pause
                }
            }
        })
    }
}

/// Stream options (DESIGN.md §6).
#[derive(Debug, Clone, Copy, Default)]
pub struct StreamFlags {
    /// Blocks come in order (no advice needed).
    pub sequential: bool,
    /// Start at full distance rather than 1.
    pub full: bool,
    /// Use `maintenance_io_concurrency` instead of `effective_io_concurrency`.
    pub maintenance: bool,
    /// Look ahead inside an AIO batch, submitting the reads together.
    pub use_batching: bool,
    /// Pins the consumer may take between pulls, which the stream leaves
    /// free (an UPDATE changing the rows of the scan it pulls from pins
    /// the pages it writes while the scan's look-ahead is pinned).
    pub pins_reserved: usize,
}

/// Sizing of a stream, from the session's settings.
#[derive(Debug, Clone, Copy)]
pub struct StreamLimits {
    pub effective_io_concurrency: usize,
    pub maintenance_io_concurrency: usize,
}

impl StreamLimits {
    /// Most buffers a stream with these limits pins ahead of its consumer:
    /// `(max_ios + 1) × io_combine_limit`, `max_ios` being the concurrency
    /// (`maintenance` picks which) or 1 when it is 0. A strategy ring for a
    /// stream should hold this many and one more (see `Strategy::new`).
    pub fn look_ahead_blocks(&self, maintenance: bool, io_combine_limit: usize) -> usize {
        let concurrency = if maintenance {
            self.maintenance_io_concurrency
        } else {
            self.effective_io_concurrency
        };
        (concurrency.max(1) + 1) * io_combine_limit.max(1)
    }
}

impl Default for StreamLimits {
    fn default() -> Self {
        StreamLimits {
            effective_io_concurrency: 16,
            maintenance_io_concurrency: 16,
        }
    }
}

/// Figures of one stream, for EXPLAIN and the utilities.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StreamStats {
    /// Buffers handed out.
    pub buffers: u64,
    /// Hits (buffers valid when the stream asked).
    pub hits: u64,
    /// Reads started (own I/Os) and blocks they covered.
    pub ios: u64,
    pub io_blocks: u64,
    /// I/Os joined that someone else had started.
    pub foreign_ios: u64,
    /// Blocks the kernel was advised to read ahead (sync method, buffered
    /// files), whose reads were deferred until they were needed.
    pub advised_blocks: u64,
    /// Sum of I/Os in flight, sampled at each start (for the average).
    pub in_flight_sum: u64,
    /// Sum of pinned look-ahead buffers, sampled at each start.
    pub look_ahead_sum: u64,
    /// Times the consumer really waited, and for how long in all.
    pub waits: u64,
    pub wait_time: Duration,
}

impl StreamStats {
    /// Adds `other`'s figures (another run of the same scan: a rescan).
    pub fn add(&mut self, other: &StreamStats) {
        self.buffers += other.buffers;
        self.hits += other.hits;
        self.ios += other.ios;
        self.io_blocks += other.io_blocks;
        self.foreign_ios += other.foreign_ios;
        self.advised_blocks += other.advised_blocks;
        self.in_flight_sum += other.in_flight_sum;
        self.look_ahead_sum += other.look_ahead_sum;
        self.waits += other.waits;
        self.wait_time += other.wait_time;
    }

    pub fn blocks_per_io(&self) -> f64 {
        self.io_blocks as f64 / self.ios.max(1) as f64
    }

    pub fn avg_in_flight(&self) -> f64 {
        self.in_flight_sum as f64 / (self.ios + self.foreign_ios).max(1) as f64
    }

    pub fn avg_look_ahead(&self) -> f64 {
        self.look_ahead_sum as f64 / (self.ios + self.foreign_ios).max(1) as f64
    }
}

struct Queued<D> {
    buffer: BufferId,
    tag: BufferTag,
    data: D,
    /// The read this buffer waits for; `None` once valid.
    read: Option<u64>,
    /// An extra pin on a buffer queued before (a repeated block).
    repeat: bool,
}

/// A block the callback returned that is not queued yet.
enum Want {
    /// Part of the pending run of consecutive blocks.
    New(BufferTag),
    /// A block already queued or in the run: queue its buffer again.
    Repeat(BufferTag),
}

/// Blocks chosen but not yet read: a run of consecutive new blocks of one
/// relation fork to read with as few I/Os as possible, and, in callback
/// order, every block wanted (new ones and repeats).
struct Pending<D> {
    /// The run's first block; the run's blocks follow it in its fork.
    first: BufferTag,
    run_blocks: usize,
    wants: VecDeque<(Want, D)>,
}

impl<D> Pending<D> {
    fn in_run(&self, tag: BufferTag) -> bool {
        in_range(tag, self.first, self.run_blocks)
    }

    /// Whether `tag` is the block right after the run.
    fn continues(&self, tag: BufferTag) -> bool {
        same_fork(tag, self.first)
            && self.first.block as u64 + self.run_blocks as u64 == tag.block as u64
    }
}

fn same_fork(a: BufferTag, b: BufferTag) -> bool {
    a.rel == b.rel && a.fork == b.fork
}

/// Whether `tag` is one of the `n` blocks from `first` in its fork.
fn in_range(tag: BufferTag, first: BufferTag, n: usize) -> bool {
    same_fork(tag, first) && tag.block >= first.block && ((tag.block - first.block) as usize) < n
}

/// The tag of a read's first block.
fn op_tag(op: &ReadOp) -> BufferTag {
    BufferTag {
        rel: op.rel,
        fork: op.fork,
        block: op.first_block,
    }
}

/// A read stream over one relation fork, or over blocks of many (see
/// "Many relations" above). `D` is the per-buffer data the callback fills
/// in for each block and gets back with its buffer.
pub struct ReadStream<D, F>
where
    F: FnMut(&mut D) -> Next,
{
    /// The relation fork [`Next::Block`] numbers blocks of; `None` for a
    /// stream begun with [`ReadStream::begin_tagged`].
    relation: Option<(u32, Fork)>,
    flags: StreamFlags,
    strategy: Option<Strategy>,
    callback: F,
    max_ios: usize,
    max_pinned: usize,
    io_combine_limit: usize,
    readahead_distance: usize,
    combine_distance: usize,
    holdoff: usize,
    queue: VecDeque<Queued<D>>,
    /// Reads not yet waited for, with their sequence numbers.
    ios: VecDeque<(u64, ReadOp)>,
    next_read_seq: u64,
    pending: Option<Pending<D>>,
    /// A block the callback gave that could not be taken yet.
    unget: Option<(BufferTag, D)>,
    forwarded: VecDeque<BufferId>,
    /// How many queue entries each block has, so that the callback's next
    /// block is checked against the queue without scanning it.
    queued_blocks: HashMap<BufferTag, u32>,
    ended: bool,
    paused: bool,
    /// Whether reads are advised and deferred (see `ReadFlags::advice`).
    advice_enabled: bool,
    /// The block after the last read started, to tell sequential reads
    /// from jumps.
    seq_next_block: Option<BufferTag>,
    /// First block of the sequential region being advised; advice stops
    /// once the consumer has reached it, leaving the rest of the region to
    /// the kernel's own read-ahead.
    advise_until: Option<BufferTag>,
    stats: StreamStats,
}

impl<D: Default, F: FnMut(&mut D) -> Next> ReadStream<D, F> {
    /// Begins a stream. Sizing: `max_ios` is the I/O concurrency (1 if it
    /// is 0, reading synchronously); `max_pinned = (max_ios + 1) ×
    /// io_combine_limit`, capped by the session's pin limit (less what it
    /// already pins) and by the strategy ring.
    pub fn begin(
        session: &BufferSession,
        rel: u32,
        fork: Fork,
        flags: StreamFlags,
        limits: StreamLimits,
        strategy: Option<Strategy>,
        callback: F,
    ) -> Self {
        Self::begin_inner(
            session,
            Some((rel, fork)),
            flags,
            limits,
            strategy,
            callback,
        )
    }

    /// Begins a stream over blocks of any relation fork: its callback
    /// names each by its tag ([`Next::Tagged`]; [`Next::Block`] has no
    /// relation to mean here and is refused with a panic). Sized as
    /// [`ReadStream::begin`] sizes a stream.
    pub fn begin_tagged(
        session: &BufferSession,
        flags: StreamFlags,
        limits: StreamLimits,
        strategy: Option<Strategy>,
        callback: F,
    ) -> Self {
        Self::begin_inner(session, None, flags, limits, strategy, callback)
    }

    fn begin_inner(
        session: &BufferSession,
        relation: Option<(u32, Fork)>,
        flags: StreamFlags,
        limits: StreamLimits,
        strategy: Option<Strategy>,
        callback: F,
    ) -> Self {
        let concurrency = if flags.maintenance {
            limits.maintenance_io_concurrency
        } else {
            limits.effective_io_concurrency
        };
        let max_ios = concurrency.max(1);
        let io_combine_limit = session.settings.io_combine_limit.max(1);
        let look_ahead = limits.look_ahead_blocks(flags.maintenance, io_combine_limit);
        // Leave one pin for the buffer the consumer holds while we look
        // ahead, and one ring slot likewise, so that a ring's oldest buffer
        // is free again by the time the ring comes round to it.
        let pin_room = session
            .pool()
            .pin_limit()
            .saturating_sub(session.pinned_count() + 1 + flags.pins_reserved)
            .max(1);
        let mut max_pinned = look_ahead.min(pin_room);
        if let Some(ring) = &strategy {
            max_pinned = max_pinned.min(ring.size().saturating_sub(1)).max(1);
        }
        let start = if flags.full {
            max_pinned.min(io_combine_limit)
        } else {
            1
        };
        ReadStream {
            relation,
            flags,
            strategy,
            callback,
            max_ios,
            max_pinned,
            io_combine_limit,
            readahead_distance: start,
            combine_distance: start,
            holdoff: 0,
            queue: VecDeque::new(),
            ios: VecDeque::new(),
            next_read_seq: 0,
            pending: None,
            unget: None,
            forwarded: VecDeque::new(),
            queued_blocks: HashMap::new(),
            ended: false,
            paused: false,
            advice_enabled: !flags.sequential && concurrency > 0 && session.can_defer_reads(),
            seq_next_block: None,
            advise_until: None,
            stats: StreamStats::default(),
        }
    }

    pub fn stats(&self) -> &StreamStats {
        &self.stats
    }

    /// Current (readahead, combine) distances, for tests and EXPLAIN.
    pub fn distances(&self) -> (usize, usize) {
        (self.readahead_distance, self.combine_distance)
    }

    pub fn max_pinned(&self) -> usize {
        self.max_pinned
    }

    /// Lowers the most buffers the stream pins to `max_pinned` (at least
    /// 1), for a consumer that pins more pages of its own between buffers
    /// than the one `begin` leaves it (WAL replay). The I/O concurrency
    /// stays: reads of single blocks can all be in flight at once within
    /// the pins, and a read never pins more than there is room for. Call
    /// it before the first buffer.
    pub fn limit_pins(&mut self, max_pinned: usize) {
        debug_assert!(self.queue.is_empty() && self.pending.is_none() && self.forwarded.is_empty());
        self.max_pinned = self.max_pinned.min(max_pinned.max(1));
        self.readahead_distance = self.readahead_distance.min(self.max_pinned);
        self.combine_distance = self.combine_distance.min(self.max_pinned);
    }

    /// Distinct buffers the stream pins: one per block queued (repeats
    /// share a buffer), whichever of its entries holds the pin now (a
    /// repeat whose first entry was handed out still holds one), and the
    /// forwarded ones.
    fn pinned(&self) -> usize {
        self.queued_blocks.len() + self.forwarded.len()
    }

    /// Blocks of the pending run (what the next read would cover).
    fn pending_len(&self) -> usize {
        self.pending.as_ref().map_or(0, |p| p.run_blocks)
    }

    /// Lets a paused callback go on.
    pub fn resume(&mut self) {
        self.paused = false;
    }

    /// The tag the callback's answer names, if it names a block.
    fn tag_of(&self, next: Next) -> Option<BufferTag> {
        match next {
            Next::Block(block) => {
                let (rel, fork) = self
                    .relation
                    .expect("Next::Block from the callback of a stream begun with begin_tagged");
                Some(BufferTag { rel, fork, block })
            }
            Next::Tagged(tag) => Some(tag),
            Next::Pause | Next::End => None,
        }
    }

    /// The next pinned, valid buffer and its data; `None` at the end (or
    /// while paused with nothing left). The caller releases the buffer.
    pub fn next_buffer(
        &mut self,
        session: &mut BufferSession,
    ) -> Result<Option<(BufferId, D)>, BufferError> {
        if let Some(fast) = self.next_buffer_fast(session)? {
            return Ok(fast);
        }
        loop {
            if let Some(front) = self.queue.front() {
                match front.read {
                    None => {
                        let q = self.pop_queued();
                        self.stats.buffers += 1;
                        self.look_ahead(session)?;
                        return Ok(Some((q.buffer, q.data)));
                    }
                    Some(seq) => self.wait_read(session, seq)?,
                }
                continue;
            }
            self.look_ahead(session)?;
            if self.queue.is_empty() {
                // The look-ahead issues whatever is pending when nothing
                // is queued, so an empty queue is the end (or a pause).
                debug_assert!(self.pending.is_none() && self.unget.is_none());
                return Ok(None);
            }
        }
    }

    /// The all-hits fast path: at distance 1 with nothing queued, pending or
    /// in flight, look the next block up directly and, if it is valid,
    /// return it with no more work than a plain buffer lookup. `None` means
    /// "take the general path" (with a miss already pinned and forwarded).
    #[allow(clippy::type_complexity)]
    fn next_buffer_fast(
        &mut self,
        session: &mut BufferSession,
    ) -> Result<Option<Option<(BufferId, D)>>, BufferError> {
        let idle = self.readahead_distance == 1
            && self.queue.is_empty()
            && self.ios.is_empty()
            && self.pending.is_none()
            && self.unget.is_none()
            && self.forwarded.is_empty();
        if !idle || self.ended || self.paused {
            return Ok(None);
        }
        // Neither ended, paused nor holding an ungot block: this asks the
        // callback.
        let Some((tag, data)) = self.next_from_callback() else {
            return Ok(Some(None));
        };
        let (id, _) = session.get_buffer(tag, self.strategy.as_mut())?;
        if session.pool().is_valid(id) {
            self.stats.buffers += 1;
            self.stats.hits += 1;
            self.holdoff = self.holdoff.saturating_sub(1);
            return Ok(Some(Some((id, data))));
        }
        // A miss: its pin goes to the general path as a forwarded buffer.
        self.forwarded.push_back(id);
        self.pending = Some(Pending {
            first: tag,
            run_blocks: 1,
            wants: VecDeque::from([(Want::New(tag), data)]),
        });
        Ok(None)
    }

    fn push_queued(&mut self, q: Queued<D>) {
        *self.queued_blocks.entry(q.tag).or_default() += 1;
        self.queue.push_back(q);
    }

    fn pop_queued(&mut self) -> Queued<D> {
        let q = self.queue.pop_front().expect("the queue is not empty");
        match self.queued_blocks.get_mut(&q.tag) {
            Some(n) if *n > 1 => *n -= 1,
            _ => {
                self.queued_blocks.remove(&q.tag);
            }
        }
        q
    }

    /// Waits for read `seq` (the one the head of the queue needs) and marks
    /// its buffers ready.
    fn wait_read(&mut self, session: &mut BufferSession, seq: u64) -> Result<(), BufferError> {
        let pos = self
            .ios
            .iter()
            .position(|(s, _)| *s == seq)
            .expect("a queued buffer's read is in flight");
        let (_, mut op) = self.ios.remove(pos).expect("position is valid");
        if self.advise_until == Some(op_tag(&op)) {
            self.advise_until = None;
        }
        let started = Instant::now();
        let outcome = session.wait_read_buffers(&mut op);
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(e) => {
                // The read's own pins are gone; drop every entry that
                // waited for it, releasing the extra pins of repeats.
                let mut kept = VecDeque::with_capacity(self.queue.len());
                for q in self.queue.drain(..) {
                    if q.read != Some(seq) {
                        kept.push_back(q);
                    } else if q.repeat {
                        session.release(q.buffer);
                    }
                }
                self.queue = kept;
                self.queued_blocks.clear();
                for q in &self.queue {
                    *self.queued_blocks.entry(q.tag).or_default() += 1;
                }
                return Err(e);
            }
        };
        if outcome.waited || outcome.synchronous {
            self.stats.waits += 1;
            self.stats.wait_time += started.elapsed();
            self.readahead_distance = (self.readahead_distance * 2).min(self.max_pinned);
        }
        self.holdoff = self.max_pinned;
        self.combine_distance = (self.combine_distance * 2)
            .min(self.io_combine_limit)
            .min(self.max_pinned);
        for q in self.queue.iter_mut().filter(|q| q.read == Some(seq)) {
            q.read = None;
        }
        Ok(())
    }

    fn next_from_callback(&mut self) -> Option<(BufferTag, D)> {
        if let Some(ungot) = self.unget.take() {
            return Some(ungot);
        }
        if self.ended || self.paused {
            return None;
        }
        let mut data = D::default();
        let next = (self.callback)(&mut data);
        match self.tag_of(next) {
            Some(tag) => Some((tag, data)),
            None => {
                if next == Next::Pause {
                    self.paused = true;
                } else {
                    self.ended = true;
                }
                None
            }
        }
    }

    fn look_ahead(&mut self, session: &mut BufferSession) -> Result<(), BufferError> {
        let batching = self.flags.use_batching && !session.aio().in_batch();
        if batching {
            session.aio().enter_batch()?;
        }
        let result = self.look_ahead_inner(session);
        if batching {
            session.aio().exit_batch();
        }
        result
    }

    fn look_ahead_inner(&mut self, session: &mut BufferSession) -> Result<(), BufferError> {
        loop {
            if self.ios.len() >= self.max_ios {
                break;
            }
            let pinned = self.pinned();
            let pending = self.pending_len();
            let allowed = (pending < self.combine_distance && pinned == 0)
                || pinned + pending < self.readahead_distance;
            if !allowed {
                break;
            }
            if pending >= self.io_combine_limit {
                self.start_pending(session)?;
                continue;
            }
            let Some((tag, data)) = self.next_from_callback() else {
                break;
            };
            let queued = self.queued_blocks.contains_key(&tag);
            match &mut self.pending {
                Some(p) if queued || p.in_run(tag) => p.wants.push_back((Want::Repeat(tag), data)),
                Some(p) if p.continues(tag) => {
                    p.run_blocks += 1;
                    p.wants.push_back((Want::New(tag), data));
                }
                Some(_) => {
                    // A new run (a jump, or another relation fork): read
                    // the pending one first.
                    self.unget = Some((tag, data));
                    self.start_pending(session)?;
                    if self.pending.is_some() {
                        break; // max_ios reached; go on after a wait.
                    }
                }
                None if queued => {
                    self.pending = Some(Pending {
                        first: tag,
                        run_blocks: 0,
                        wants: VecDeque::from([(Want::Repeat(tag), data)]),
                    });
                    self.start_pending(session)?;
                }
                None => {
                    self.pending = Some(Pending {
                        first: tag,
                        run_blocks: 1,
                        wants: VecDeque::from([(Want::New(tag), data)]),
                    });
                }
            }
        }
        let pending = self.pending_len();
        // With nothing queued the pending read must go now, or the
        // consumer would find nothing to wait for and take the stream for
        // ended: a block the all-hits fast path missed is pending with its
        // buffer forwarded (pinned), which must not hold it back (at
        // readahead distance 1 and a larger combine distance nothing else
        // would issue it).
        let issue = self.pending.is_some()
            && self.ios.len() < self.max_ios
            && (self.ended
                || self.paused
                || pending >= self.combine_distance
                || self.queue.is_empty()
                || self.unget.is_some());
        if issue {
            self.start_pending(session)?;
        }
        Ok(())
    }

    /// Queues the pending wants in order, starting reads for the run, until
    /// all are queued or `max_ios` reads are in flight.
    fn start_pending(&mut self, session: &mut BufferSession) -> Result<(), BufferError> {
        loop {
            self.queue_ready_wants(session, None)?;
            let Some(p) = &self.pending else { break };
            if p.wants.is_empty() {
                self.pending = None;
                break;
            }
            if self.ios.len() >= self.max_ios {
                break;
            }
            let (first, run) = match p.wants.front() {
                // The front is a new block: read the run from it, up to a
                // repeat that can no longer be queued (the consumer took its
                // buffer). Wants are queued in order, so the new blocks after
                // such a repeat would wait behind it, and their pins from
                // this read would be taken by nobody.
                Some((Want::New(b), _)) => {
                    let mut run = 0u32;
                    for (want, _) in &p.wants {
                        match *want {
                            Want::New(_) => run += 1,
                            Want::Repeat(r)
                                if in_range(r, *b, run as usize)
                                    || self.queued_blocks.contains_key(&r) => {}
                            Want::Repeat(_) => break,
                        }
                    }
                    (*b, run)
                }
                // A repeat whose buffer left the queue (the consumer took
                // it) before it could be queued again: read it alone.
                Some((Want::Repeat(b), _)) => (*b, 1),
                None => unreachable!("checked non-empty"),
            };
            // Buffers forwarded by the last read are pinned for the blocks
            // right after it; a read that starts elsewhere (a lone repeat,
            // or another relation fork) must not take them for its own.
            if let Some(&head) = self.forwarded.front() {
                if session.pool().tag(head) != Some(first) {
                    for id in self.forwarded.drain(..) {
                        session.release(id);
                    }
                }
            }
            // Other pins of the session (the consumer may hold several)
            // count against the same limit as ours. And the stream keeps
            // to its own `max_pinned`, which leaves the consumer its pin:
            // the distances bound the blocks it looks ahead at, but a
            // repeat read alone (its block left the queue before it could
            // be queued again) adds a buffer they do not count.
            let room = session
                .pool()
                .pin_limit()
                .saturating_sub(session.pinned_count())
                .min(self.max_pinned.saturating_sub(self.pinned()));
            if room == 0 && self.forwarded.is_empty() {
                if self.queue.is_empty() {
                    return Err(BufferError::PinLimit {
                        limit: session.pool().pin_limit(),
                    });
                }
                break;
            }
            let n = (run as usize).min(room.max(self.forwarded.len()).max(1));
            let flags = ReadFlags {
                advice: self.advice_enabled && self.wants_advice(first),
            };
            let op = session.start_read_buffers(
                first.rel,
                first.fork,
                first.block,
                n,
                &mut self.forwarded,
                self.strategy.as_mut(),
                flags,
            )?;
            debug_assert_eq!(op_tag(&op), first);
            self.seq_next_block = Some(BufferTag {
                block: first.block + op.nblocks() as u32,
                ..first
            });
            if matches!(op.kind, ReadOpKind::Deferred) {
                self.stats.advised_blocks += op.nblocks() as u64;
            }
            self.queue_ready_wants(session, Some(op))?;
        }
        Ok(())
    }

    /// Whether a read from `first` should be advised, as PostgreSQL
    /// decides it: a jump starts a region and is advised unless the
    /// consumer is about to read it anyway (nothing pinned); reads that
    /// continue the region are advised until the consumer catches up with
    /// its start, after which the kernel's sequential read-ahead does better.
    fn wants_advice(&mut self, first: BufferTag) -> bool {
        if self.seq_next_block == Some(first) {
            self.advise_until.is_some()
        } else {
            self.advise_until = Some(first);
            self.pinned() > 0
        }
    }

    /// The part of [`ReadStream::queue_ready_wants`] that moves wants from
    /// `p` (taken out of `self.pending` meanwhile) to the queue.
    fn queue_wants(
        &mut self,
        p: &mut Pending<D>,
        session: &mut BufferSession,
        op: Option<&ReadOp>,
        read: Option<u64>,
    ) -> Result<(), BufferError> {
        // Each covered block's first want takes the read's pin on it; bit i
        // says block i of the read has been queued (reads are at most
        // MAX_IOVECS = 128 blocks).
        let mut taken: u128 = 0;
        while let Some((want, _)) = p.wants.front() {
            match *want {
                Want::New(b) | Want::Repeat(b)
                    if op.is_some_and(|op| in_range(b, op_tag(op), op.nblocks())) =>
                {
                    let (_, data) = p.wants.pop_front().expect("front exists");
                    let op = op.expect("covered implies a read");
                    let index = (b.block - op.first_block) as usize;
                    let buffer = op.buffers[index];
                    if taken & (1 << index) != 0 {
                        session.pin(buffer)?;
                        self.stats.hits += 1;
                    }
                    taken |= 1 << index;
                    // A block's buffer is the same while it stays pinned.
                    let repeat = self.queued_blocks.contains_key(&b);
                    self.push_queued(Queued {
                        buffer,
                        tag: b,
                        data,
                        read,
                        repeat,
                    });
                }
                Want::Repeat(b) => {
                    let Some(q) = self.queue.iter().rev().find(|q| q.tag == b) else {
                        break;
                    };
                    let (buffer, q_read) = (q.buffer, q.read);
                    let (_, data) = p.wants.pop_front().expect("front exists");
                    session.pin(buffer)?;
                    self.stats.hits += 1;
                    self.push_queued(Queued {
                        buffer,
                        tag: b,
                        data,
                        read: q_read,
                        repeat: true,
                    });
                }
                Want::New(_) => break,
            }
        }
        Ok(())
    }

    /// Queues wants from the front of the pending list while they can be:
    /// new blocks covered by `op` (a read just started for the front of the
    /// run), and repeats of blocks already queued.
    fn queue_ready_wants(
        &mut self,
        session: &mut BufferSession,
        op: Option<ReadOp>,
    ) -> Result<(), BufferError> {
        let Some(mut p) = self.pending.take() else {
            debug_assert!(op.is_none());
            return Ok(());
        };
        let ready = op.as_ref().is_none_or(|op| !op.needs_wait());
        let seq = self.next_read_seq;
        let read = (!ready).then_some(seq);
        if let Some(op) = &op {
            self.next_read_seq += 1;
            // The run now starts after what the read covers.
            let covered_first = op_tag(op);
            if p.in_run(covered_first) {
                let after = covered_first.block + op.nblocks() as u32;
                let skipped = after - p.first.block;
                p.run_blocks -= skipped as usize;
                p.first.block = after;
            }
        }
        let queued = self.queue_wants(&mut p, session, op.as_ref(), read);
        self.pending = Some(p);
        queued?;
        let Some(op) = op else { return Ok(()) };
        let covered = op.nblocks() as u64;
        if ready {
            self.stats.hits += covered;
            if self.ios.is_empty() {
                // A hit with no I/O in progress: decay.
                if self.holdoff > 0 {
                    self.holdoff -= 1;
                } else {
                    self.readahead_distance = (self.readahead_distance - 1).max(1);
                    self.combine_distance = (self.combine_distance - 1).max(1);
                }
            }
        } else {
            match op.kind {
                ReadOpKind::Foreign { .. } => self.stats.foreign_ios += 1,
                _ => {
                    self.stats.ios += 1;
                    self.stats.io_blocks += covered;
                }
            }
            self.stats.in_flight_sum += self.ios.len() as u64 + 1;
            self.stats.look_ahead_sum += self.queue.len() as u64;
            self.ios.push_back((seq, op));
        }
        Ok(())
    }

    /// Releases everything pinned and starts over: the callback is asked for
    /// blocks again, distances return to their start.
    pub fn reset(&mut self, session: &mut BufferSession) {
        self.release_all(session);
        let start = if self.flags.full {
            self.max_pinned.min(self.io_combine_limit)
        } else {
            1
        };
        self.readahead_distance = start;
        self.combine_distance = start;
        self.holdoff = 0;
        self.ended = false;
        self.paused = false;
        self.seq_next_block = None;
        self.advise_until = None;
    }

    /// Ends the stream, releasing its pins (waiting for reads in flight,
    /// whose buffers it must not leave behind).
    pub fn end(mut self, session: &mut BufferSession) -> StreamStats {
        self.release_all(session);
        self.stats
    }

    fn release_all(&mut self, session: &mut BufferSession) {
        while let Some((seq, op)) = self.ios.front() {
            let seq = *seq;
            if matches!(op.kind, ReadOpKind::Deferred) {
                // Not started: its buffers are only pinned, by the queue.
                self.ios.pop_front();
                continue;
            }
            // An error here was already logged by whoever completed the
            // read, and wait_read dropped its entries; the stream is being
            // abandoned, so there is no consumer to tell.
            let _ = self.wait_read(session, seq);
        }
        for q in self.queue.drain(..) {
            session.release(q.buffer);
        }
        self.queued_blocks.clear();
        for id in self.forwarded.drain(..) {
            session.release(id);
        }
        self.pending = None;
        self.unget = None;
    }
}
