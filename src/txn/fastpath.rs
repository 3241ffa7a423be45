//! Fast-path table locks (PostgreSQL's fast-path relation locks): the
//! weak modes every statement takes (`AccessShare`, `RowShare`,
//! `RowExclusive`) are recorded in the session's own slot instead of the
//! shared lock table, under the slot's own mutex instead of the
//! transaction manager's one lock.
//!
//! Weak modes never conflict with each other, so a weak lock needs to be
//! seen only by a request for a mode that conflicts with one (`Share`,
//! `ShareRowExclusive`, `Exclusive`, `AccessExclusive`: CREATE INDEX, DROP,
//! TRUNCATE), which is rare. Such a *strong* request first counts itself
//! in the table's partition of [`FastPaths::strong`], then, under the
//! manager's lock, moves every fast-path lock on the table from every
//! session's slot into the shared table ([`TxnManager::lock_table`]),
//! where it waits for them as for any other holder. A weak request takes
//! the fast path only while its partition counts no strong request, and
//! looks at the count with its slot locked: either it recorded its lock
//! before the strong request locked the slot to move it (and the lock is
//! moved), or it reads the count after the strong request raised it (and
//! goes to the shared table). The count falls as the strong lock is
//! released or its request fails.
//!
//! Before this, a pgbench select took the manager's lock four times
//! (snapshot, table lock, its release, the snapshot's release), and every
//! TPC-B statement twice more; at 32 sessions on 2 cores those were most
//! of the spins and yields on that lock.
//!
//! Lock order: the manager's lock, then a slot's (`slot.rs`). The weak
//! path takes a slot's lock alone.

use std::sync::atomic::{AtomicU32, Ordering};

use super::locks::{LockMode, LockOwner, LockRow, WaitTarget};
use super::{Inner, SessionSlot, TxnManager};

/// Fast-path locks a session holds at most at once (PostgreSQL's
/// `FP_LOCK_SLOTS_PER_BACKEND`): a statement over more tables takes the
/// rest in the shared table.
pub const FAST_PATH_SLOTS: usize = 16;

/// Partitions of the strong-request counts, by table oid: two tables in
/// one partition only send each other's weak requests to the shared
/// table while a strong one is held.
const STRONG_PARTITIONS: usize = 64;

/// The manager's side of the fast path: the strong-request counts (the
/// locks are in the sessions' slots, `slot.rs`).
#[derive(Debug)]
pub(super) struct FastPaths {
    strong: [AtomicU32; STRONG_PARTITIONS],
}

impl Default for FastPaths {
    fn default() -> FastPaths {
        FastPaths {
            strong: std::array::from_fn(|_| AtomicU32::new(0)),
        }
    }
}

fn partition(oid: u32) -> usize {
    oid as usize % STRONG_PARTITIONS
}

impl LockMode {
    /// A mode the fast path may record: one that conflicts with no weak
    /// mode, and so with no other fast-path lock.
    pub const fn fast_path_eligible(self) -> bool {
        matches!(
            self,
            LockMode::AccessShare | LockMode::RowShare | LockMode::RowExclusive
        )
    }

    /// A mode that conflicts with some fast-path-eligible one: its request
    /// must see the fast-path locks on its table.
    pub const fn strong(self) -> bool {
        self.conflicts_with(LockMode::AccessShare)
            || self.conflicts_with(LockMode::RowShare)
            || self.conflicts_with(LockMode::RowExclusive)
    }
}

impl TxnManager {
    /// Locks table `oid` in `mode` for `owner`, in `slot` if the mode is
    /// weak, no strong request is counted on the table's partition and the
    /// slot has room; else as [`Self::lock_table`]. Release with
    /// [`Self::release_locks_in`] and the same slot.
    pub fn lock_table_in(
        &self,
        slot: &SessionSlot,
        owner: LockOwner,
        oid: u32,
        mode: LockMode,
        limits: &super::WaitLimits,
    ) -> Result<bool, super::WaitError> {
        if mode.fast_path_eligible() {
            let mut locks = slot.fast_path.lock();
            if locks.len() < FAST_PATH_SLOTS
                && self.fast_paths.strong[partition(oid)].load(Ordering::SeqCst) == 0
            {
                self.injections.hit(
                    crate::inject::TXN_FAST_PATH_BEFORE_RECORD,
                    crate::inject::HitContext { offset: oid.into() },
                );
                debug_assert!(
                    !locks.contains(&(owner, oid, mode)),
                    "owner {owner} asked again for {mode:?} on {oid}"
                );
                locks.push((owner, oid, mode));
                return Ok(false);
            }
        }
        self.lock_table(owner, oid, mode, limits)
    }

    /// Releases `held`, each `(oid, mode)` granted to `owner` by
    /// [`Self::lock_table_in`] with `slot`: those still in the slot from
    /// it, those a strong request moved (and those never in it) from the
    /// shared table.
    pub fn release_locks_in(&self, slot: &SessionSlot, owner: LockOwner, held: &[(u32, LockMode)]) {
        let mut shared = Vec::new();
        {
            let mut locks = slot.fast_path.lock();
            for &(oid, mode) in held {
                match locks.iter().position(|&l| l == (owner, oid, mode)) {
                    Some(at) => {
                        locks.swap_remove(at);
                    }
                    None => shared.push((oid, mode)),
                }
            }
        }
        self.release_locks(owner, &shared);
    }

    /// Counts a strong request for `mode` on `oid` (nothing for another
    /// mode). Before the manager's lock is taken, as PostgreSQL raises
    /// its count before it takes the partition's lock.
    pub(super) fn count_strong(&self, oid: u32, mode: LockMode) {
        if mode.strong() {
            self.fast_paths.strong[partition(oid)].fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Undoes [`Self::count_strong`]: the strong lock was released, or its
    /// request failed.
    pub(super) fn uncount_strong(&self, oid: u32, mode: LockMode) {
        if mode.strong() {
            let before = self.fast_paths.strong[partition(oid)].fetch_sub(1, Ordering::SeqCst);
            assert!(
                before > 0,
                "strong requests on partition of {oid} below zero"
            );
        }
    }

    /// Moves every fast-path lock on `oid` into the shared table, as the
    /// holders' grants: called by a strong request for `oid` after
    /// [`Self::count_strong`], under the manager's lock.
    pub(super) fn transfer_fast_path(&self, inner: &mut Inner, oid: u32) {
        debug_assert!(self.fast_paths.strong[partition(oid)].load(Ordering::SeqCst) > 0);
        for slot in self.slots.read().iter() {
            let mut locks = slot.fast_path.lock();
            locks.retain(|&(owner, o, mode)| {
                if o != oid {
                    return true;
                }
                inner.tables.entry(oid).or_default().grant(owner, mode);
                false
            });
        }
    }

    /// The fast-path locks of every session, as rows of the `locks` view.
    pub(super) fn fast_path_rows(
        &self,
        xid_of: impl Fn(LockOwner) -> Option<super::Xid>,
    ) -> Vec<LockRow> {
        let mut rows = Vec::new();
        for slot in self.slots.read().iter() {
            rows.extend(
                slot.fast_path
                    .lock()
                    .iter()
                    .map(|&(owner, oid, mode)| LockRow {
                        owner,
                        xid: xid_of(owner),
                        target: WaitTarget::Table { oid, mode },
                        granted: true,
                        fast_path: true,
                    }),
            );
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::inject::{Injection, TXN_FAST_PATH_BEFORE_RECORD};
    use crate::txn::WaitLimits;

    use crate::txn::tests::manager;

    fn held(txn: &TxnManager, owner: LockOwner) -> Vec<(LockMode, bool, bool)> {
        txn.lock_rows()
            .into_iter()
            .filter(|r| r.owner == owner)
            .filter_map(|r| match r.target {
                WaitTarget::Table { mode, .. } => Some((mode, r.granted, r.fast_path)),
                WaitTarget::Transaction(_) => None,
            })
            .collect()
    }

    #[test]
    fn weak_locks_take_the_fast_path_and_strong_ones_move_them() {
        let (_dir, txn) = manager();
        let (slot_r, slot_d) = (txn.session_slot(), txn.session_slot());
        let (reader, dropper) = (txn.new_owner(), txn.new_owner());
        let limits = WaitLimits::DEFAULT;
        txn.lock_table_in(&slot_r, reader, 7, LockMode::AccessShare, &limits)
            .unwrap();
        txn.lock_table_in(&slot_r, reader, 8, LockMode::RowExclusive, &limits)
            .unwrap();
        assert_eq!(slot_r.fast_path_len(), 2);
        let mut locks = held(&txn, reader);
        locks.sort();
        assert_eq!(
            locks,
            [
                (LockMode::AccessShare, true, true),
                (LockMode::RowExclusive, true, true)
            ]
        );
        // A strong request that cannot be granted moves the reader's lock
        // on its table (only that one) and leaves no count behind.
        assert!(!txn.try_lock_table(dropper, 7, LockMode::AccessExclusive));
        assert_eq!(slot_r.fast_path_len(), 1);
        assert!(held(&txn, reader).contains(&(LockMode::AccessShare, true, false)));
        // A weak request while a strong lock is held goes to the shared
        // table (and waits there).
        txn.release_locks_in(
            &slot_r,
            reader,
            &[(7, LockMode::AccessShare), (8, LockMode::RowExclusive)],
        );
        assert!(slot_r.fast_path_len() == 0 && txn.lock_rows().is_empty());
        txn.lock_table_in(&slot_d, dropper, 7, LockMode::AccessExclusive, &limits)
            .unwrap();
        let limits_short = WaitLimits {
            lock_timeout: Some(Duration::from_millis(50)),
            ..WaitLimits::DEFAULT
        };
        let late = txn.new_owner();
        assert!(txn
            .lock_table_in(&slot_r, late, 7, LockMode::AccessShare, &limits_short)
            .is_err());
        assert!(slot_r.fast_path_len() == 0);
        // Another table of another partition still takes the fast path.
        txn.lock_table_in(&slot_r, late, 8, LockMode::AccessShare, &limits)
            .unwrap();
        assert_eq!(slot_r.fast_path_len(), 1);
        txn.release_locks_in(&slot_d, dropper, &[(7, LockMode::AccessExclusive)]);
        txn.lock_table_in(&slot_r, late, 7, LockMode::AccessShare, &limits)
            .unwrap();
        assert_eq!(
            slot_r.fast_path_len(),
            2,
            "the fast path opens again once the strong lock is released"
        );
        txn.release_locks_in(
            &slot_r,
            late,
            &[(8, LockMode::AccessShare), (7, LockMode::AccessShare)],
        );
        assert!(txn.lock_rows().is_empty());
    }

    #[test]
    fn a_full_slot_sends_further_locks_to_the_shared_table() {
        let (_dir, txn) = manager();
        let slot = txn.session_slot();
        let owner = txn.new_owner();
        let tables: Vec<(u32, LockMode)> = (0..FAST_PATH_SLOTS as u32 + 3)
            .map(|oid| (100 + oid, LockMode::AccessShare))
            .collect();
        for &(oid, mode) in &tables {
            txn.lock_table_in(&slot, owner, oid, mode, &WaitLimits::DEFAULT)
                .unwrap();
        }
        assert_eq!(slot.fast_path_len(), FAST_PATH_SLOTS);
        assert_eq!(txn.lock_rows().iter().filter(|r| !r.fast_path).count(), 3);
        txn.release_locks_in(&slot, owner, &tables);
        assert!(slot.fast_path_len() == 0 && txn.lock_rows().is_empty());
    }

    /// The race the count closes: a weak request read no strong count and
    /// is parked before it records its lock (its slot locked); a strong
    /// request arrives, counts itself, and must still find the weak lock
    /// once it is recorded, and wait for it.
    #[test]
    fn a_strong_request_waits_for_a_weak_lock_recorded_as_it_came() {
        let (_dir, txn) = manager();
        let slot_r = txn.session_slot();
        let (reader, dropper) = (txn.new_owner(), txn.new_owner());
        txn.injections()
            .attach(TXN_FAST_PATH_BEFORE_RECORD, Injection::park().times(1));
        std::thread::scope(|s| {
            let weak = s.spawn(|| {
                txn.lock_table_in(
                    &slot_r,
                    reader,
                    7,
                    LockMode::AccessShare,
                    &WaitLimits::DEFAULT,
                )
            });
            assert!(txn
                .injections()
                .wait_until_parked(TXN_FAST_PATH_BEFORE_RECORD));
            let strong = s.spawn(|| {
                txn.lock_table(dropper, 7, LockMode::AccessExclusive, &WaitLimits::DEFAULT)
            });
            // The strong request has counted itself; it cannot move the
            // lock before the slot is unlocked.
            while txn.fast_paths.strong[partition(7)].load(Ordering::SeqCst) == 0 {
                std::thread::yield_now();
            }
            txn.injections().release(TXN_FAST_PATH_BEFORE_RECORD);
            assert!(
                !weak.join().unwrap().unwrap(),
                "granted at once, in the slot"
            );
            // It waits for the reader, whose lock it moved.
            let mut rounds = 0;
            while !held(&txn, dropper).contains(&(LockMode::AccessExclusive, false, false)) {
                rounds += 1;
                assert!(rounds < 10_000, "the strong request never waited");
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(slot_r.fast_path_len() == 0);
            assert_eq!(
                held(&txn, reader),
                vec![(LockMode::AccessShare, true, false)]
            );
            assert!(!strong.is_finished());
            txn.release_locks_in(&slot_r, reader, &[(7, LockMode::AccessShare)]);
            assert!(strong.join().unwrap().unwrap(), "granted after a wait");
        });
        txn.release_locks(dropper, &[(7, LockMode::AccessExclusive)]);
        assert!(txn.lock_rows().is_empty());
        assert_eq!(
            txn.fast_paths.strong[partition(7)].load(Ordering::SeqCst),
            0
        );
    }
}
