//! Replacement: which buffer a session takes for a new page. The clock
//! sweep over usage counts, and *strategy rings*, which let one large
//! operation (a bulk read, a bulk write, vacuum) reuse a small ring of
//! buffers instead of evicting the whole pool (DESIGN.md §5).

use std::sync::atomic::Ordering;

use super::{
    refcount, usage, BufferError, BufferId, BufferPool, BufferSession, WriteSlots, WriteStats,
    BM_DIRTY, BM_IO_IN_PROGRESS, MAX_USAGE_COUNT, USAGE_ONE, WRITE_COMBINE_BLOCKS,
};
use crate::storage::BLOCK_SIZE;

/// Writes a strategy ring keeps in flight ahead of reusing its buffers
/// (of up to [`WRITE_COMBINE_BLOCKS`] blocks each): 512 KiB, a sixteenth
/// of a bulk-write ring. A smaller ring looks at most half of itself
/// ahead.
pub const RING_WRITES_MAX: usize = 4;
/// A dirty buffer this close to the ring's next one is written even if
/// it is not yet half a write's worth with its neighbours.
const RING_WRITE_URGENT: usize = 2;

/// Ring sizes of the access strategies (PostgreSQL's).
pub const BULK_READ_RING_BYTES: usize = 256 * 1024;
pub const BULK_WRITE_RING_BYTES: usize = 16 * 1024 * 1024;
pub const VACUUM_RING_BYTES: usize = 256 * 1024;

/// Which kind of bulk work a strategy ring serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrategyKind {
    BulkRead,
    BulkWrite,
    Vacuum,
}

/// A ring of buffers reused by one large operation, so that it does not
/// evict the whole pool.
#[derive(Debug)]
pub struct Strategy {
    pub kind: StrategyKind,
    ring: Vec<Option<BufferId>>,
    current: usize,
}

impl Strategy {
    /// A ring of the kind's size, or of `look_ahead + 1` buffers if that
    /// is more, at most an eighth of the pool. `look_ahead` is what a read
    /// stream using the ring pins ahead of its consumer (0 for writes): a
    /// 256 KiB ring holds two 128 KiB reads, so a stream in it could keep
    /// only one read in flight. PostgreSQL 18 grows its bulk-read ring with
    /// io_combine_limit and effective_io_concurrency for the same reason.
    pub fn new(kind: StrategyKind, nbuffers: u32, look_ahead: usize) -> Strategy {
        let bytes = match kind {
            StrategyKind::BulkRead => BULK_READ_RING_BYTES,
            StrategyKind::BulkWrite => BULK_WRITE_RING_BYTES,
            StrategyKind::Vacuum => VACUUM_RING_BYTES,
        };
        let size = (bytes / BLOCK_SIZE)
            .max(look_ahead + 1)
            .min(nbuffers as usize / 8)
            .max(1);
        Strategy {
            kind,
            ring: vec![None; size],
            current: 0,
        }
    }

    /// Buffers in the ring.
    pub fn size(&self) -> usize {
        self.ring.len()
    }

    /// Whether reusing the ring's buffers means writing them (the kinds
    /// that dirty what they read or make).
    fn writes(&self) -> bool {
        matches!(self.kind, StrategyKind::BulkWrite | StrategyKind::Vacuum)
    }

    /// The buffers the ring will offer next, at most `n` (fewer where a
    /// slot is still empty).
    pub(super) fn upcoming(&self, n: usize) -> Vec<BufferId> {
        (1..=n.min(self.ring.len() - 1))
            .map_while(|k| self.ring[(self.current + k) % self.ring.len()])
            .collect()
    }
}

impl BufferPool {
    /// Finds a victim with the clock sweep and pins it (shared count 0 → 1).
    pub(super) fn clock_sweep(&self) -> Result<BufferId, BufferError> {
        // Every buffer's usage count falls to zero within MAX_USAGE_COUNT + 1
        // passes unless it is pinned; then the pool is full of pins.
        let limit = self.nbuffers as u64 * (MAX_USAGE_COUNT + 2);
        for _ in 0..limit {
            let id =
                (self.clock.fetch_add(1, Ordering::Relaxed) % self.nbuffers as u64) as BufferId;
            let d = self.desc(id);
            let st = d.state.load(Ordering::SeqCst);
            if refcount(st) != 0 {
                continue;
            }
            let next = if usage(st) > 0 {
                st - USAGE_ONE
            } else {
                st + 1
            };
            if d.state
                .compare_exchange(st, next, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
                && usage(st) == 0
            {
                return Ok(id);
            }
        }
        Err(BufferError::NoUnpinnedBuffers {
            nbuffers: self.nbuffers,
        })
    }

    /// A victim from the strategy ring if its buffer is reusable (unpinned,
    /// used at most once since), else from the clock sweep, recorded in the
    /// ring.
    pub(super) fn victim(&self, strategy: Option<&mut Strategy>) -> Result<BufferId, BufferError> {
        let Some(strategy) = strategy else {
            return self.clock_sweep();
        };
        strategy.current = (strategy.current + 1) % strategy.ring.len();
        if let Some(id) = strategy.ring[strategy.current] {
            let d = self.desc(id);
            let st = d.state.load(Ordering::SeqCst);
            if refcount(st) == 0
                && usage(st) <= 1
                && d.state
                    .compare_exchange(st, st + 1, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
            {
                return Ok(id);
            }
        }
        let id = self.clock_sweep()?;
        strategy.ring[strategy.current] = Some(id);
        Ok(id)
    }
}

/// A session's writes by kind (see [`BufferSession::write_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionWriteStats {
    pub sync: WriteStats,
    pub ring_ahead: WriteStats,
    pub clock_ahead: WriteStats,
}

/// Asynchronous replacement for strategy rings: a bulk load or vacuum
/// dirties every buffer of its ring, and without this would stall on a
/// synchronous write each time the ring comes round. Before each buffer it
/// takes, the ring starts writes of the dirty buffers it takes next
/// (combined where they hold neighbouring blocks, as a bulk load's do), so
/// that they are clean when it gets there.
impl BufferSession {
    pub(super) fn ring_write_ahead(&mut self, ring: &Strategy) -> Result<(), BufferError> {
        if !ring.writes() {
            return Ok(());
        }
        let mut slots = self
            .ring_writes
            .take()
            .unwrap_or_else(|| WriteSlots::new(RING_WRITES_MAX, WRITE_COMBINE_BLOCKS));
        let result = self.ring_write_ahead_with(&mut slots, ring);
        self.ring_writes = Some(slots);
        result
    }

    fn ring_write_ahead_with(
        &mut self,
        slots: &mut WriteSlots,
        ring: &Strategy,
    ) -> Result<(), BufferError> {
        slots.finish_done(self)?;
        // At most the ring's older half: the buffers just taken may still
        // be changed (a page a load fills row by row), and written now
        // they would be written again.
        let window =
            ring.upcoming((RING_WRITES_MAX * slots.blocks_per_write() + 1).min(ring.size() / 2));
        let Some(&next) = window.first() else {
            return Ok(());
        };
        // The buffer the ring offers next must not be busy with our own
        // write when we get to it: the ring would pass it over.
        while slots.is_writing(next) {
            slots.stats.waits += 1;
            slots.finish_oldest(self)?;
        }
        let pool = self.pool.clone();
        let reusable = |st: u64| refcount(st) == 0 && usage(st) <= 1;
        // The next one itself is written when taken (with its followers,
        // `flush_buffers`), if it is still dirty.
        let writable = |id: BufferId| {
            let st = pool.state(id);
            st & BM_DIRTY != 0 && st & BM_IO_IN_PROGRESS == 0 && reusable(st)
        };
        let mut i = 1;
        while i < window.len() && slots.has_room() {
            // Buffers enter the window one by one: wait for half a write's
            // worth before writing, unless the ring is about to reach them.
            let ready = window[i..].iter().take_while(|&&id| writable(id)).count();
            if ready == 0 {
                i += 1;
                continue;
            }
            if ready < slots.blocks_per_write() / 2 && i > RING_WRITE_URGENT {
                i += ready;
                continue;
            }
            let id = window[i];
            let Some(tag) = self.claim_for_write(id, None, reusable) else {
                i += 1;
                continue;
            };
            let run = self.claim_run(
                id,
                tag,
                &window[i + 1..],
                slots.blocks_per_write(),
                reusable,
            );
            i += run.len();
            if !slots.start(self, &run, tag, true)? {
                break;
            }
        }
        Ok(())
    }

    /// Waits for the writes the session started ahead of its rings and of
    /// the clock sweep (done anyway before the session ends or drops a
    /// relation's buffers, and by the next ring when it gets to them).
    pub fn finish_writes_ahead(&mut self) -> Result<(), BufferError> {
        let ring = match self.ring_writes.take() {
            Some(mut slots) => {
                let result = slots.finish_all(self);
                self.ring_writes = Some(slots);
                result
            }
            None => Ok(()),
        };
        let clock = match self.write_behind.take() {
            Some(mut wb) => {
                let result = self.finish_write_behind(&mut wb);
                self.write_behind = Some(wb);
                result
            }
            None => Ok(()),
        };
        ring.and(clock)
    }

    /// What this session's own writes have done: synchronous ones
    /// (a dirty victim written and waited for, a flush), and those it
    /// started ahead of its rings and of the clock sweep.
    pub fn write_stats(&self) -> SessionWriteStats {
        SessionWriteStats {
            sync: self
                .sync_writes
                .as_ref()
                .map(|w| w.stats)
                .unwrap_or_default(),
            ring_ahead: self
                .ring_writes
                .as_ref()
                .map(|w| w.stats)
                .unwrap_or_default(),
            clock_ahead: self
                .write_behind
                .as_ref()
                .map(|w| w.stats())
                .unwrap_or_default(),
        }
    }

    /// Asynchronous replacement without a ring: once the clock sweep has
    /// handed this session a dirty victim (the background writer is not
    /// keeping up), each allocation first starts writes of the dirty
    /// buffers just ahead of the clock hand, a bounded step (see
    /// [`BufferSession::write_behind`]), so that the sweep finds them clean
    /// when it gets there instead of the session writing one and waiting.
    pub(super) fn clock_write_ahead(&mut self) -> Result<(), BufferError> {
        let Some(mut wb) = self.write_behind.take() else {
            return Ok(());
        };
        let result = self.write_behind(&mut wb);
        self.write_behind = Some(wb);
        result
    }
}
