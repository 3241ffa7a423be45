//! The running set published for snapshots taken without the manager's
//! lock (PostgreSQL takes ProcArrayLock shared for a snapshot; this takes
//! nothing in the common case).
//!
//! Every change of the running set or of the next id happens under the
//! manager's lock, which then writes the set here behind a sequence
//! counter: odd while it writes, even when done. A snapshot copies the
//! set, checks the counter did not move meanwhile, registers its xmin in
//! its session's slot and checks the counter once more. The second check
//! is what makes the registration safe without the lock: the horizon is
//! computed by the writer after it made the counter odd, so either the
//! computation comes after the registration and sees it, or the counter
//! moved before the second check and the snapshot goes round again (a
//! snapshot of a set that changed since is no longer the oldest one could
//! take). All of it is sequentially consistent, as the argument needs.
//!
//! A read-only load then writes no shared line to take a snapshot; the
//! lock is still taken after [`SNAPSHOT_TRIES`] rounds that met changes,
//! and while more transactions run than the published set holds.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};

use super::{Inner, Xid};

/// Running transactions the published set holds; with more, snapshots
/// take the manager's lock.
pub(super) const PUBLISHED_RUNNING_MAX: usize = 1024;

/// Rounds a snapshot tries without the manager's lock before it takes
/// it: each round that fails met a change of the running set.
pub(super) const SNAPSHOT_TRIES: usize = 4;

/// `count` when the running set is larger than the published one.
const OVERFLOWED: u32 = u32::MAX;

/// See the module comment.
#[derive(Debug)]
pub(super) struct PublishedRunning {
    sequence: AtomicU64,
    next_xid: AtomicU32,
    count: AtomicU32,
    xids: Box<[AtomicU32]>,
}

/// A copy of the published set, at `sequence`.
pub(super) struct RunningCopy {
    pub sequence: u64,
    pub xmin: Xid,
    pub xmax: Xid,
    /// Sorted, without the taker's own id.
    pub in_progress: Vec<Xid>,
}

impl Default for PublishedRunning {
    fn default() -> PublishedRunning {
        PublishedRunning {
            sequence: AtomicU64::new(0),
            next_xid: AtomicU32::new(0),
            // Nothing published yet: snapshots take the lock.
            count: AtomicU32::new(OVERFLOWED),
            xids: (0..PUBLISHED_RUNNING_MAX)
                .map(|_| AtomicU32::new(0))
                .collect(),
        }
    }
}

impl PublishedRunning {
    /// Starts writing `inner`'s set (the counter goes odd); under the
    /// manager's lock, before the horizon is computed. [`Self::end`]
    /// finishes it.
    pub fn begin(&self, inner: &Inner) {
        let before = self.sequence.fetch_add(1, SeqCst);
        debug_assert!(before.is_multiple_of(2), "two writers of the running set");
        self.next_xid.store(inner.next_xid, SeqCst);
        if inner.running.len() > self.xids.len() {
            self.count.store(OVERFLOWED, SeqCst);
            return;
        }
        for (slot, &xid) in self.xids.iter().zip(&inner.running) {
            slot.store(xid, SeqCst);
        }
        self.count.store(inner.running.len() as u32, SeqCst);
    }

    /// Ends the write [`Self::begin`] started (the counter goes even).
    pub fn end(&self) {
        let before = self.sequence.fetch_add(1, SeqCst);
        debug_assert!(
            !before.is_multiple_of(2),
            "a write of the running set ended twice"
        );
    }

    pub fn sequence(&self) -> u64 {
        self.sequence.load(SeqCst)
    }

    /// Copies the set for a snapshot of transaction `own`, or `None` when
    /// it is being written, changed during the copy or overflowed.
    pub fn copy(&self, own: Option<Xid>) -> Option<RunningCopy> {
        let sequence = self.sequence.load(SeqCst);
        if !sequence.is_multiple_of(2) {
            return None;
        }
        let xmax = self.next_xid.load(SeqCst);
        let count = self.count.load(SeqCst);
        if count == OVERFLOWED {
            return None;
        }
        let mut in_progress = Vec::with_capacity(count as usize);
        let mut xmin = xmax;
        for slot in &self.xids[..count as usize] {
            let xid = slot.load(SeqCst);
            xmin = xmin.min(xid);
            if Some(xid) != own {
                in_progress.push(xid);
            }
        }
        if self.sequence.load(SeqCst) != sequence {
            return None;
        }
        debug_assert!(in_progress.windows(2).all(|w| w[0] < w[1]));
        debug_assert!(in_progress.last().is_none_or(|&x| x < xmax));
        Some(RunningCopy {
            sequence,
            xmin,
            xmax,
            in_progress,
        })
    }
}
