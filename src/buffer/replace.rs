//! Replacement: which buffer a session takes for a new page. The clock
//! sweep over usage counts, and *strategy rings*, which let one large
//! operation (a bulk read, a bulk write, vacuum) reuse a small ring of
//! buffers instead of evicting the whole pool (DESIGN.md §5).

use std::sync::atomic::Ordering;

use super::{refcount, usage, BufferError, BufferId, BufferPool, MAX_USAGE_COUNT, USAGE_ONE};
use crate::storage::BLOCK_SIZE;

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
