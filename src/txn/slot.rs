//! A session's own place in the transaction manager (PostgreSQL's
//! PGPROC): what the manager must know of a session, kept where the
//! session changes it without the manager's lock, and where the manager
//! reads it when it must.
//!
//! - The session's fast-path table locks (`fastpath.rs`), read by a
//!   strong lock request.
//! - The xmins of the session's registered snapshots, read by the
//!   horizon's computation, which runs under the manager's lock. A
//!   snapshot registers its xmin in the slot either from a copy of the
//!   published running set that it checks again afterwards (`running.rs`)
//!   or under the manager's lock, so every horizon computed after it sees
//!   it. Its release changes only the slot, and takes the manager's lock
//!   only when the snapshot may be what holds the horizon back
//!   ([`SnapshotGuard`]'s drop).
//! - A block of lock owner ids, so that a transaction does not take its
//!   owner from the manager's counter.
//!
//! Before this, every statement of every session went through the same
//! few cache lines: the manager's lock twice (snapshot, release), its
//! owner counter, and the manager's reference count twice (the guard held
//! the manager). `perf` at 8 pgbench select-only clients on 2 cores put
//! 6 % of the server's time on those lines alone.
//!
//! Lock order: the manager's lock, the registry of slots, a slot's lock.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::locks::{LockMode, LockOwner};
use super::running::SNAPSHOT_TRIES;
use super::{CommandId, Horizons, Snapshot, TxnManager, Xid};

/// A slot's xmin while it registers no snapshot.
const NO_SNAPSHOT: Xid = Xid::MAX;

/// Lock owner ids a slot takes from the manager's counter at a time.
const OWNERS_PER_BLOCK: u64 = 4096;

/// One session's slot (see the module comment).
#[derive(Debug)]
pub struct SessionSlot {
    /// Fast-path locks: (owner, table oid, mode).
    pub(super) fast_path: Mutex<Vec<(LockOwner, u32, LockMode)>>,
    /// The xmins of the registered snapshots, one per snapshot.
    snapshots: Mutex<Vec<Xid>>,
    /// The lowest of `snapshots`, or [`NO_SNAPSHOT`]: what the horizon's
    /// computation reads, without the slot's lock.
    xmin: AtomicU32,
    /// The next owner id of the slot's block, and the block's end. Only
    /// the slot's session takes ids, so these are never contended.
    next_owner: AtomicU64,
    owners_end: AtomicU64,
    /// What a snapshot's release looks at to see whether it may hold the
    /// horizon back: read without the manager (whose reference count is
    /// the line this module keeps sessions off).
    horizons: Arc<Horizons>,
    /// For the rare release that must publish the horizons, and for a new
    /// block of owner ids.
    txn: Weak<TxnManager>,
}

impl SessionSlot {
    /// How many fast-path locks the slot holds now (for tests and
    /// assertions).
    pub fn fast_path_len(&self) -> usize {
        self.fast_path.lock().len()
    }

    /// The lowest xmin the slot's snapshots register, if any.
    pub fn registered_xmin(&self) -> Option<Xid> {
        Some(self.xmin.load(Ordering::SeqCst)).filter(|&x| x != NO_SNAPSHOT)
    }

    /// A new lock owner, for a transaction of this slot's session that
    /// starts: from the slot's block, taking a new block when it is used
    /// up. Owners stay unique across sessions, as blocks do.
    pub fn new_owner(&self) -> LockOwner {
        let next = self.next_owner.load(Ordering::Relaxed);
        if next < self.owners_end.load(Ordering::Relaxed) {
            self.next_owner.store(next + 1, Ordering::Relaxed);
            return next;
        }
        let txn = self
            .txn
            .upgrade()
            .expect("a session's slot outlived its transaction manager");
        let first = txn
            .next_owner
            .fetch_add(OWNERS_PER_BLOCK, Ordering::Relaxed);
        self.owners_end
            .store(first + OWNERS_PER_BLOCK, Ordering::Relaxed);
        self.next_owner.store(first + 1, Ordering::Relaxed);
        first
    }

    /// Registers a snapshot's `xmin`, by [`TxnManager::snapshot_in`]: the
    /// xmin of a running set at least as new as that of every snapshot the
    /// slot registered before, so at least their xmins.
    fn register(&self, xmin: Xid) {
        let mut snapshots = self.snapshots.lock();
        debug_assert!(
            snapshots.iter().all(|&x| x <= xmin),
            "a snapshot registered below an earlier one: {xmin} after {snapshots:?}"
        );
        snapshots.push(xmin);
        if snapshots.len() == 1 {
            self.xmin.store(xmin, Ordering::SeqCst);
        }
        debug_assert_eq!(
            self.xmin.load(Ordering::SeqCst),
            snapshots.iter().copied().min().unwrap_or(NO_SNAPSHOT)
        );
    }

    /// Unregisters one snapshot of `xmin`.
    fn unregister(&self, xmin: Xid) {
        let mut snapshots = self.snapshots.lock();
        let at = snapshots
            .iter()
            .position(|&x| x == xmin)
            .unwrap_or_else(|| panic!("snapshot of xmin {xmin} released but not registered"));
        snapshots.swap_remove(at);
        let lowest = snapshots.iter().copied().min().unwrap_or(NO_SNAPSHOT);
        debug_assert!(lowest >= self.xmin.load(Ordering::SeqCst));
        self.xmin.store(lowest, Ordering::SeqCst);
    }
}

impl TxnManager {
    /// A slot for a new session, registered so that strong lock requests
    /// and the horizon find what it holds. The session keeps it for its
    /// lifetime; a slot no one holds any more is dropped from the
    /// registry at the next registration.
    pub fn session_slot(self: &Arc<Self>) -> Arc<SessionSlot> {
        let slot = Arc::new(SessionSlot {
            fast_path: Mutex::default(),
            snapshots: Mutex::default(),
            xmin: AtomicU32::new(NO_SNAPSHOT),
            next_owner: AtomicU64::new(0),
            owners_end: AtomicU64::new(0),
            horizons: Arc::clone(&self.horizons),
            txn: Arc::downgrade(self),
        });
        let mut slots = self.slots.write();
        // Held by the registry alone: its session and snapshots are gone,
        // so it holds no lock and registers no xmin.
        slots.retain(|s| Arc::strong_count(s) > 1);
        slots.push(Arc::clone(&slot));
        slot
    }

    /// The lowest xmin any slot registers, if any: under the manager's
    /// lock, for the horizon.
    pub(super) fn lowest_registered_xmin(&self) -> Option<Xid> {
        self.slots
            .read()
            .iter()
            .map(|s| s.xmin.load(Ordering::SeqCst))
            .min()
            .filter(|&x| x != NO_SNAPSHOT)
    }

    /// Takes a snapshot for transaction `own` (if it has an id) at command
    /// `command`, registered in `slot` until the guard is dropped.
    pub fn snapshot_in(
        &self,
        slot: &Arc<SessionSlot>,
        own: Option<Xid>,
        command: CommandId,
    ) -> SnapshotGuard {
        debug_assert!(
            std::ptr::eq(slot.txn.as_ptr(), self),
            "a slot of another transaction manager"
        );
        // Without the lock first (`running.rs`).
        for _ in 0..SNAPSHOT_TRIES {
            let Some(copy) = self.running_published.copy(own) else {
                continue;
            };
            self.injections.hit(
                crate::inject::TXN_SNAPSHOT_BEFORE_REGISTER,
                crate::inject::HitContext {
                    offset: copy.sequence,
                },
            );
            slot.register(copy.xmin);
            if self.running_published.sequence() == copy.sequence {
                // Every horizon computed from here on sees the xmin, and
                // every one published before was at or below it.
                debug_assert!(self.oldest_xmin() <= copy.xmin);
                return SnapshotGuard {
                    slot: Arc::clone(slot),
                    snapshot: Snapshot {
                        xmin: copy.xmin,
                        xmax: copy.xmax,
                        in_progress: copy.in_progress,
                        own,
                        command,
                    },
                };
            }
            slot.unregister(copy.xmin);
        }
        let inner = self.inner.lock();
        let xmax = inner.next_xid;
        let in_progress: Vec<Xid> = inner
            .running
            .iter()
            .copied()
            .filter(|&x| Some(x) != own)
            .collect();
        let xmin = inner.xmin_now();
        slot.register(xmin);
        // Nothing to publish: the snapshot registers the xmin_now of the
        // moment, which the oldest xmin is already at or below.
        debug_assert_eq!(self.xmin_now(), xmin, "xmin_now published late");
        debug_assert!(self.oldest_xmin() <= xmin);
        drop(inner);
        SnapshotGuard {
            slot: Arc::clone(slot),
            snapshot: Snapshot {
                xmin,
                xmax,
                in_progress,
                own,
                command,
            },
        }
    }

    /// [`Self::snapshot_in`] for a taker that is no session (vacuum's
    /// sample, tests): in a slot of its own.
    pub fn snapshot(self: &Arc<Self>, own: Option<Xid>, command: CommandId) -> SnapshotGuard {
        self.snapshot_in(&self.session_slot(), own, command)
    }
}

/// A registered snapshot; vacuum keeps what it can see until it is dropped.
pub struct SnapshotGuard {
    slot: Arc<SessionSlot>,
    snapshot: Snapshot,
}

impl SnapshotGuard {
    pub fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    /// Makes `xid` (assigned after the snapshot was taken) the snapshot's
    /// own transaction.
    pub fn set_own(&mut self, xid: Xid) {
        self.snapshot.own = Some(xid);
    }

    /// Lets the snapshot see its own transaction's later commands.
    pub fn set_command(&mut self, command: CommandId) {
        self.snapshot.command = command;
    }
}

impl Drop for SnapshotGuard {
    fn drop(&mut self) {
        let xmin = self.snapshot.xmin;
        self.slot.unregister(xmin);
        // The oldest xmin is the lowest of xmin_now and the registered
        // xmins. A snapshot at or above xmin_now, or above the oldest,
        // leaves that lowest where it was: only one at the oldest and
        // below xmin_now may move it. In a read-only load every snapshot
        // is at xmin_now, and its release touches no shared line. A
        // release that reads the two a moment late may leave the oldest
        // lower than it could be until the next change publishes them,
        // which is safe: it is only ever used as a lower bound.
        let horizons = &self.slot.horizons;
        if xmin == horizons.oldest_xmin.load(Ordering::SeqCst)
            && xmin < horizons.xmin_now.load(Ordering::SeqCst)
        {
            if let Some(txn) = self.slot.txn.upgrade() {
                let inner = txn.inner.lock();
                txn.publish_horizons(&inner);
            }
        }
    }
}

impl std::fmt::Debug for SnapshotGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.snapshot.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::Duration;

    use super::*;
    use crate::txn::tests::manager;

    #[test]
    fn a_slots_snapshots_hold_the_horizon_until_the_last_goes() {
        let (_dir, txn) = manager();
        let slot = txn.session_slot();
        let a = txn.assign_xid(txn.new_owner()).unwrap();
        let b = txn.assign_xid(txn.new_owner()).unwrap();
        let first = txn.snapshot_in(&slot, None, 0);
        assert_eq!(first.snapshot().xmin, a);
        txn.finish(a, true).unwrap();
        let second = txn.snapshot_in(&slot, None, 0);
        assert_eq!(second.snapshot().xmin, b);
        assert_eq!(slot.registered_xmin(), Some(a));
        assert_eq!(txn.oldest_xmin(), a, "the first snapshot holds it");
        drop(first);
        assert_eq!(slot.registered_xmin(), Some(b));
        assert_eq!(txn.oldest_xmin(), b, "the first's release moved it");
        txn.finish(b, true).unwrap();
        assert_eq!(txn.oldest_xmin(), b, "the second holds it");
        drop(second);
        assert_eq!(slot.registered_xmin(), None);
        assert_eq!(txn.oldest_xmin(), txn.next_xid());
    }

    #[test]
    fn a_release_at_xmin_now_does_not_wait_for_the_managers_lock() {
        let (_dir, txn) = manager();
        let slot = txn.session_slot();
        let guard = txn.snapshot_in(&slot, None, 0);
        assert_eq!(guard.snapshot().xmin, txn.xmin_now());
        let (done, released) = std::sync::mpsc::channel();
        let _held = txn.inner.lock();
        std::thread::spawn(move || {
            drop(guard);
            done.send(()).unwrap();
        });
        released
            .recv_timeout(Duration::from_secs(10))
            .expect("the release waited for the manager's lock");
        assert_eq!(slot.registered_xmin(), None);
    }

    #[test]
    fn a_release_that_may_hold_the_horizon_back_publishes_it() {
        let (_dir, txn) = manager();
        let (holder, other) = (txn.session_slot(), txn.session_slot());
        let a = txn.assign_xid(txn.new_owner()).unwrap();
        let old = txn.snapshot_in(&holder, None, 0);
        let same = txn.snapshot_in(&other, None, 0);
        txn.finish(a, true).unwrap();
        assert_eq!(txn.oldest_xmin(), a);
        drop(old);
        assert_eq!(txn.oldest_xmin(), a, "another slot still holds it");
        drop(same);
        assert_eq!(txn.oldest_xmin(), txn.xmin_now());
    }

    #[test]
    fn a_snapshot_is_taken_while_the_managers_lock_is_held() {
        let (_dir, txn) = manager();
        let slot = txn.session_slot();
        let a = txn.assign_xid(txn.new_owner()).unwrap();
        let (done, taken) = std::sync::mpsc::channel();
        let held = txn.inner.lock();
        let (txn2, slot2) = (Arc::clone(&txn), Arc::clone(&slot));
        std::thread::spawn(move || {
            let guard = txn2.snapshot_in(&slot2, None, 0);
            done.send(guard.snapshot().clone()).unwrap();
        });
        let snap = taken
            .recv_timeout(Duration::from_secs(10))
            .expect("the snapshot waited for the manager's lock");
        drop(held);
        assert_eq!((snap.xmin, snap.in_progress), (a, vec![a]));
    }

    /// The race the second look at the sequence closes: a snapshot copied
    /// the running set with `a` in it and is parked before it registers
    /// its xmin; `a` ends, and the horizon published then, not seeing the
    /// registration, passes `a`. The snapshot must not keep seeing `a` as
    /// running (its changes could be pruned under it): it takes the set
    /// again.
    #[test]
    fn a_snapshot_whose_set_changed_before_it_registered_goes_round_again() {
        let (_dir, txn) = manager();
        let slot = txn.session_slot();
        let a = txn.assign_xid(txn.new_owner()).unwrap();
        txn.injections().attach(
            crate::inject::TXN_SNAPSHOT_BEFORE_REGISTER,
            crate::inject::Injection::park().times(1),
        );
        std::thread::scope(|s| {
            let taker = s.spawn(|| txn.snapshot_in(&slot, None, 0));
            assert!(txn
                .injections()
                .wait_until_parked(crate::inject::TXN_SNAPSHOT_BEFORE_REGISTER));
            txn.finish(a, true).unwrap();
            assert!(txn.oldest_xmin() > a, "the horizon passed a");
            txn.injections()
                .release(crate::inject::TXN_SNAPSHOT_BEFORE_REGISTER);
            let guard = taker.join().unwrap();
            let snap = guard.snapshot();
            assert!(!snap.is_running(a), "a snapshot older than the horizon");
            assert!(txn.oldest_xmin() <= snap.xmin);
            assert_eq!(slot.registered_xmin(), Some(snap.xmin));
        });
    }

    /// Snapshots without the lock beside transactions that start and end
    /// on other threads: each sees every transaction that ended before it
    /// was taken as ended, and while it is held the horizon stays at or
    /// below its xmin. (The interleaving that matters is forced above;
    /// this one checks the two promises over many others.)
    #[test]
    fn snapshots_without_the_lock_agree_with_ends_and_the_horizon() {
        use std::sync::atomic::AtomicBool;
        let (_dir, txn) = manager();
        let stop = AtomicBool::new(false);
        let last_ended = AtomicU32::new(0);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    while !stop.load(Ordering::SeqCst) {
                        let x = txn.assign_xid(txn.new_owner()).unwrap();
                        txn.finish(x, true).unwrap();
                        last_ended.fetch_max(x, Ordering::SeqCst);
                    }
                });
            }
            let slot = txn.session_slot();
            for _ in 0..20_000 {
                let ended = last_ended.load(Ordering::SeqCst);
                let guard = txn.snapshot_in(&slot, None, 0);
                let snap = guard.snapshot();
                assert!(
                    ended == 0 || !snap.is_running(ended),
                    "{ended} ended before {snap:?}"
                );
                assert!(txn.oldest_xmin() <= snap.xmin);
            }
            stop.store(true, Ordering::SeqCst);
        });
    }

    #[test]
    fn owner_ids_of_different_slots_never_meet() {
        let (_dir, txn) = manager();
        let slots = [txn.session_slot(), txn.session_slot()];
        let mut seen = HashSet::new();
        // Past the end of a block in both slots, interleaved.
        for _ in 0..OWNERS_PER_BLOCK + 10 {
            for slot in &slots {
                assert!(seen.insert(slot.new_owner()), "an owner id twice");
            }
        }
        assert!(seen.insert(txn.new_owner()));
        assert!(!seen.contains(&0), "owner 0 is no transaction's");
    }

    #[test]
    fn a_slot_no_one_holds_leaves_the_registry() {
        let (_dir, txn) = manager();
        let kept = txn.session_slot();
        drop(txn.snapshot(None, 0));
        drop(txn.session_slot());
        let _next = txn.session_slot();
        let slots = txn.slots.read();
        assert_eq!(slots.len(), 2, "the kept slot and the last one");
        assert!(slots.iter().any(|s| Arc::ptr_eq(s, &kept)));
    }
}
