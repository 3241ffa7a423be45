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
//! holds every pinned buffer not yet handed out; the buffers of reads not
//! yet waited for are at its back, in the same order as `ios`, so the head
//! buffer, if not ready, always belongs to the oldest read.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::buffer::{BufferError, BufferId, BufferSession, ReadOp, Strategy};
use crate::storage::Fork;

/// What the block callback says next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Read this block next.
    Block(u32),
    /// No block for now: the next one depends on buffers not consumed yet.
    /// Call [`ReadStream::resume`] when it can go on.
    Pause,
    /// No more blocks.
    End,
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
}

/// Sizing of a stream, from the session's settings.
#[derive(Debug, Clone, Copy)]
pub struct StreamLimits {
    pub effective_io_concurrency: usize,
    pub maintenance_io_concurrency: usize,
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
    /// Sum of I/Os in flight, sampled at each start (for the average).
    pub in_flight_sum: u64,
    /// Sum of pinned look-ahead buffers, sampled at each start.
    pub look_ahead_sum: u64,
    /// Times the consumer really waited, and for how long in all.
    pub waits: u64,
    pub wait_time: Duration,
}

impl StreamStats {
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
    data: D,
    ready: bool,
}

struct Pending<D> {
    first_block: u32,
    data: VecDeque<D>,
}

/// A read stream over one relation fork. `D` is the per-buffer data the
/// callback fills in for each block and gets back with its buffer.
pub struct ReadStream<D, F>
where
    F: FnMut(&mut D) -> Next,
{
    rel: u32,
    fork: Fork,
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
    ios: VecDeque<ReadOp>,
    pending: Option<Pending<D>>,
    /// A block the callback gave that could not be taken yet.
    unget: Option<(u32, D)>,
    forwarded: VecDeque<BufferId>,
    ended: bool,
    paused: bool,
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
        let concurrency = if flags.maintenance {
            limits.maintenance_io_concurrency
        } else {
            limits.effective_io_concurrency
        };
        let max_ios = concurrency.max(1);
        let io_combine_limit = session.settings.io_combine_limit.max(1);
        // Leave one pin for the buffer the consumer holds while we look
        // ahead, and one ring slot likewise, so that a ring's oldest buffer
        // is free again by the time the ring comes round to it.
        let pin_room = session
            .pool()
            .pin_limit()
            .saturating_sub(session.pinned_count() + 1)
            .max(1);
        let mut max_pinned = ((max_ios + 1) * io_combine_limit).min(pin_room);
        if let Some(ring) = &strategy {
            max_pinned = max_pinned.min(ring.size().saturating_sub(1)).max(1);
        }
        let start = if flags.full {
            max_pinned.min(io_combine_limit)
        } else {
            1
        };
        ReadStream {
            rel,
            fork,
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
            pending: None,
            unget: None,
            forwarded: VecDeque::new(),
            ended: false,
            paused: false,
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

    fn pinned(&self) -> usize {
        self.queue.len() + self.forwarded.len()
    }

    fn pending_len(&self) -> usize {
        self.pending.as_ref().map_or(0, |p| p.data.len())
    }

    /// Lets a paused callback go on.
    pub fn resume(&mut self) {
        self.paused = false;
    }

    /// The next pinned, valid buffer and its data; `None` at the end (or
    /// while paused with nothing left). The caller releases the buffer.
    pub fn next_buffer(
        &mut self,
        session: &mut BufferSession,
    ) -> Result<Option<(BufferId, D)>, BufferError> {
        loop {
            if let Some(front) = self.queue.front() {
                if front.ready {
                    let q = self.queue.pop_front().expect("front exists");
                    self.stats.buffers += 1;
                    self.look_ahead(session)?;
                    return Ok(Some((q.buffer, q.data)));
                }
                self.wait_head(session)?;
                continue;
            }
            self.look_ahead(session)?;
            if self.queue.is_empty() {
                return Ok(None);
            }
        }
    }

    /// Waits for the oldest read, whose buffers are at the head of the queue.
    fn wait_head(&mut self, session: &mut BufferSession) -> Result<(), BufferError> {
        let mut op = self
            .ios
            .pop_front()
            .expect("an unready buffer belongs to a read");
        let started = Instant::now();
        let outcome = match session.wait_read_buffers(&mut op) {
            Ok(outcome) => outcome,
            Err(e) => {
                // Its pins are gone; drop its entries so the stream stays
                // consistent, then report.
                for _ in 0..op.nblocks() {
                    self.queue.pop_front();
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
        for q in self
            .queue
            .iter_mut()
            .filter(|q| !q.ready)
            .take(op.nblocks())
        {
            q.ready = true;
        }
        Ok(())
    }

    fn next_from_callback(&mut self) -> Option<(u32, D)> {
        if let Some(ungot) = self.unget.take() {
            return Some(ungot);
        }
        if self.ended || self.paused {
            return None;
        }
        let mut data = D::default();
        match (self.callback)(&mut data) {
            Next::Block(block) => Some((block, data)),
            Next::Pause => {
                self.paused = true;
                None
            }
            Next::End => {
                self.ended = true;
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
            let Some((block, data)) = self.next_from_callback() else {
                break;
            };
            match &mut self.pending {
                Some(p) if p.first_block as u64 + p.data.len() as u64 == block as u64 => {
                    p.data.push_back(data);
                }
                Some(_) => {
                    self.unget = Some((block, data));
                    self.start_pending(session)?;
                }
                None => {
                    self.pending = Some(Pending {
                        first_block: block,
                        data: VecDeque::from([data]),
                    });
                }
            }
        }
        let pending = self.pending_len();
        let issue = pending > 0
            && self.ios.len() < self.max_ios
            && (self.ended
                || self.paused
                || pending >= self.combine_distance
                || self.pinned() == 0
                || self.unget.is_some());
        if issue {
            self.start_pending(session)?;
        }
        Ok(())
    }

    /// Starts reads for the pending blocks until they are all queued or
    /// `max_ios` reads are in flight.
    fn start_pending(&mut self, session: &mut BufferSession) -> Result<(), BufferError> {
        while let Some(p) = &mut self.pending {
            if p.data.is_empty() {
                self.pending = None;
                break;
            }
            if self.ios.len() >= self.max_ios {
                break;
            }
            let first_block = p.first_block;
            // Other pins of the session (the consumer may hold several)
            // count against the same limit as ours.
            let room = session
                .pool()
                .pin_limit()
                .saturating_sub(session.pinned_count());
            if room == 0 && self.forwarded.is_empty() {
                if self.queue.is_empty() {
                    return Err(BufferError::PinLimit {
                        limit: session.pool().pin_limit(),
                    });
                }
                break;
            }
            let n = p.data.len().min(room.max(self.forwarded.len()).max(1));
            let op = session.start_read_buffers(
                self.rel,
                self.fork,
                first_block,
                n,
                &mut self.forwarded,
                self.strategy.as_mut(),
            )?;
            let covered = op.nblocks();
            let p = self.pending.as_mut().expect("pending exists");
            p.first_block += covered as u32;
            let ready = !op.needs_wait();
            for &buffer in &op.buffers {
                let data = p.data.pop_front().expect("a block per buffer");
                self.queue.push_back(Queued {
                    buffer,
                    data,
                    ready,
                });
            }
            if ready {
                self.stats.hits += covered as u64;
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
                    crate::buffer::ReadOpKind::Foreign { .. } => self.stats.foreign_ios += 1,
                    _ => {
                        self.stats.ios += 1;
                        self.stats.io_blocks += covered as u64;
                    }
                }
                self.stats.in_flight_sum += self.ios.len() as u64 + 1;
                self.stats.look_ahead_sum += self.queue.len() as u64;
                self.ios.push_back(op);
            }
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
    }

    /// Ends the stream, releasing its pins (waiting for reads in flight,
    /// whose buffers it must not leave behind).
    pub fn end(mut self, session: &mut BufferSession) -> StreamStats {
        self.release_all(session);
        self.stats
    }

    fn release_all(&mut self, session: &mut BufferSession) {
        for mut op in self.ios.drain(..) {
            // An error here was already logged by whoever completed the
            // read; the stream is being abandoned, so it has no consumer.
            if session.wait_read_buffers(&mut op).is_err() {
                for _ in 0..op.nblocks() {
                    if let Some(pos) = self.queue.iter().position(|q| !q.ready) {
                        self.queue.remove(pos);
                    }
                }
                continue;
            }
            for q in self
                .queue
                .iter_mut()
                .filter(|q| !q.ready)
                .take(op.nblocks())
            {
                q.ready = true;
            }
        }
        for q in self.queue.drain(..) {
            session.release(q.buffer);
        }
        for id in self.forwarded.drain(..) {
            session.release(id);
        }
        self.pending = None;
        self.unget = None;
    }
}
