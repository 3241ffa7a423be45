//! Row locks on the tuple (PostgreSQL's `heap_lock_tuple`): `SELECT … FOR
//! UPDATE` and its weaker modes write the locker's id into the tuple's
//! xmax with infomask bits saying "locked only, in mode M"
//! (`tuple::XMAX_LOCK_ONLY`), so that no table in memory grows per row.
//! Several lockers in modes that do not conflict (two `FOR SHARE`) share
//! the xmax through a multi (`txn/multi.rs`).
//!
//! A lock-only xmax is no deletion: visibility, pruning, vacuum's dead
//! tuples and unique checks read [`TupleHeader::deleter`], which ignores
//! it. Writers and lockers meet it here, in [`Heap::examine`], the one
//! place an xmax is read as "who holds the row": a transaction that wants
//! the row in some mode (an UPDATE or DELETE wants
//! [`RowLockMode::Update`]) finds it free, held by a running transaction
//! whose mode conflicts (it waits for that one, through the wait-for graph
//! as any row wait, and looks again), changed by a committed transaction
//! (the caller follows the update chain or fails, see `exec::dml`), or
//! changed by itself. Its own locks never stand in its way.
//!
//! A lock is a page change like any other ([`PageChange::Lock`]), logged
//! so that replay of later changes to the page finds it as it was; it
//! does not clear the page's all-visible flag (no one's view of the row
//! changes). After a crash no locker runs, so a lock found on a page is
//! no lock: its xid counts as aborted, and a multi names no member.
//! Vacuum clears a lock-only xmax whose lockers have all ended
//! ([`xmax_without_effect`]).
//!
//! # An UPDATE beside `FOR KEY SHARE` lockers
//!
//! An UPDATE that changes no key column (no column of a unique index)
//! takes the row in [`RowLockMode::NoKeyUpdate`], which `FOR KEY SHARE`
//! does not conflict with: it goes on while key-share lockers hold the
//! row, as PostgreSQL's. Their locks must then survive on both versions:
//! on the new one, which a later DELETE meets once the update committed,
//! and on the old one, which is the row again if the update aborts.
//! PostgreSQL keeps them on the old version in a multi that also holds
//! the updater, and so must keep its multis on disk (`pg_multixact`): the
//! updater's fate decides visibility after a crash. Here the old version's
//! xmax stays the updater's plain id, durable and read by visibility as
//! any deleter's, and the lockers beside it are kept in memory instead
//! ([`KeptLocks`], per relation, by tuple): consulted only once that
//! updater has aborted, and meaningless after a restart, when no locker
//! runs. The new version gets them as its own lock-only xmax
//! (`Heap::try_delete`, a logged [`PageChange::Lock`]), as PostgreSQL's
//! heap_update gives it.
//!
//! A locker meeting a row whose updater still runs waits for it, in any
//! mode: PostgreSQL lets `FOR KEY SHARE` pass a running no-key update
//! (locking the versions after it as well); waiting instead is a stronger
//! conflict, never a weaker one, and a read-committed locker then takes
//! the newest version as PostgreSQL's would.

use std::collections::HashMap;

use super::{
    apply_logged, item, tuple, Heap, HeapError, HeapTable, PageChange, RelState, Tid, TupleHeader,
    Writer,
};
use crate::buffer::BufferSession;
use crate::storage::Fork;
use crate::txn::{RowLockMode, TxnManager, Xid, XidStatus, INVALID_XID};
use tuple::Locker;

/// Times a writer or locker waits for a holder of one row and looks again
/// before it gives up ([`HeapError::RowKeptBusy`]). Each round ends with
/// the holder's end, so only a row other transactions keep locking one
/// after another (share lockers, which need not wait for each other,
/// passing a waiting writer) comes near it.
pub const ROW_HOLDER_WAITS_MAX: usize = 10_000;

/// What a locker does about a row another transaction holds in a
/// conflicting mode (PostgreSQL's `LockWaitPolicy`), in PostgreSQL's order:
/// of two clauses on one table the later in this order wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LockWait {
    /// Waits for the holder to end.
    Block,
    /// `SKIP LOCKED`: leaves the row out.
    SkipLocked,
    /// `NOWAIT`: fails at once.
    NoWait,
}

/// What [`Heap::lock_tuple`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockOutcome {
    /// The row is locked by this transaction, in the mode asked for or a
    /// stronger one (now, or already).
    Locked,
    /// Another transaction holds it in a conflicting mode and the locker
    /// skips such rows: nothing was changed.
    Skipped,
    /// Transaction `by` deleted it, or updated it to `newer`, and
    /// committed: nothing was changed.
    Changed { by: Xid, newer: Option<Tid> },
    /// This transaction deleted or updated it itself: there is no row
    /// to lock.
    SelfChanged,
}

/// What a transaction wanting a row in some mode finds in its xmax
/// ([`Heap::examine`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Examined {
    /// It may take the row: nobody holds it, or only running lockers in
    /// modes that do not conflict (`others`, never the transaction
    /// itself); `held` is the mode the transaction itself holds, if any.
    Free {
        others: Vec<(Xid, RowLockMode)>,
        held: Option<RowLockMode>,
    },
    /// Running transaction `holder` deleted or updated it, or locks it in
    /// a conflicting mode: wait for it and look again.
    Busy(Xid),
    /// Deleted by `by`, or updated to `newer`, which committed.
    Changed { by: Xid, newer: Option<Tid> },
    /// Deleted or updated by the transaction itself.
    SelfChanged,
}

/// Whether tuple `h`'s xmax is set but means nothing any more: a deleter
/// that aborted, or lockers that have all ended (what vacuum clears, and
/// what a freeze must clear too rather than keep: ids are never reused,
/// but an old xmax costs every later reader a look-up).
/// A deleter that aborted counts only once the lockers its update kept
/// beside it (`kept`, see the module comment) have ended too.
pub(super) fn xmax_without_effect(
    txn: &TxnManager,
    kept: &parking_lot::Mutex<KeptLocks>,
    tid: Tid,
    h: &TupleHeader,
) -> bool {
    match (h.deleter(), h.locker()) {
        (Some(deleter), _) => {
            txn.status(deleter) == XidStatus::Aborted
                && kept
                    .lock()
                    .get(tid, deleter)
                    .is_none_or(|lockers| running_lockers(txn, lockers).is_empty())
        }
        (None, Locker::None) => false,
        (None, lockers) => running_lockers(txn, lockers).is_empty(),
    }
}

/// The running transactions a lock-only xmax names, with their modes.
fn running_lockers(txn: &TxnManager, lockers: Locker) -> Vec<(Xid, RowLockMode)> {
    match lockers {
        Locker::None => Vec::new(),
        Locker::One(locker, mode) => {
            if txn.status(locker) == XidStatus::InProgress {
                vec![(locker, mode)]
            } else {
                Vec::new()
            }
        }
        Locker::Multi(multi) => txn.running_multi_members(multi),
    }
}

/// Tuples a relation's kept-lock table holds before its first sweep.
pub const KEPT_LOCKS_SWEEP_FIRST: usize = 256;

/// The lockers no-key UPDATEs did not wait for, by the version each
/// replaced (see the module comment): one relation's table of them, in
/// memory only. An entry counts for a tuple only while the tuple's xmax is
/// still that update's ([`KeptLock::updater`]; ids are never reused), so
/// a line pointer used again, or a tuple locked or changed since, is not
/// misread. Entries whose updater committed, or whose lockers all ended,
/// mean nothing and are swept as the multis are (`txn/multi.rs`): when the
/// table reaches [`KEPT_LOCKS_SWEEP_FIRST`], then whenever it has doubled
/// since, so that it holds at most twice the entries that still mean
/// something, plus that first threshold.
#[derive(Debug)]
pub(super) struct KeptLocks {
    by_tuple: HashMap<Tid, KeptLock>,
    sweep_at: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct KeptLock {
    /// The update whose xmax the lockers stand beside.
    updater: Xid,
    /// The lockers, as the lock-only xmax the new version got names them.
    lockers: Locker,
}

impl Default for KeptLocks {
    fn default() -> Self {
        KeptLocks {
            by_tuple: HashMap::new(),
            sweep_at: KEPT_LOCKS_SWEEP_FIRST,
        }
    }
}

impl KeptLocks {
    /// The lockers kept beside `updater`'s xmax on the tuple at `tid`.
    fn get(&self, tid: Tid, updater: Xid) -> Option<Locker> {
        self.by_tuple
            .get(&tid)
            .filter(|k| k.updater == updater)
            .map(|k| k.lockers)
    }

    /// Keeps `lockers` beside `updater`'s xmax on the tuple at `tid`
    /// (replacing what an update of it that aborted kept), sweeping first
    /// when the table is due.
    fn keep(&mut self, txn: &TxnManager, tid: Tid, updater: Xid, lockers: Locker) {
        debug_assert!(lockers != Locker::None, "nothing to keep");
        if self.by_tuple.len() >= self.sweep_at {
            self.by_tuple.retain(|_, k| {
                txn.status(k.updater) != XidStatus::Committed
                    && !running_lockers(txn, k.lockers).is_empty()
            });
            self.sweep_at = (2 * self.by_tuple.len()).max(KEPT_LOCKS_SWEEP_FIRST);
        }
        self.by_tuple.insert(tid, KeptLock { updater, lockers });
    }

    /// How many tuples the table holds (tests of its sweep).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_tuple.len()
    }
}

impl Heap {
    /// What transaction `xid` wanting the row `h` (at `tid`, in the
    /// relation of `rs`) in `want` finds (see the module comment): the one
    /// reading of an xmax as who holds the row, for writers
    /// ([`Heap::try_delete`]) and lockers ([`Heap::lock_tuple`]) alike.
    /// Called under the page's lock.
    pub(super) fn examine(
        &self,
        rs: &RelState,
        h: &TupleHeader,
        tid: Tid,
        xid: Xid,
        want: RowLockMode,
    ) -> Examined {
        let lockers = match h.deleter() {
            None => h.locker(),
            Some(deleter) if deleter == xid => return Examined::SelfChanged,
            Some(deleter) => match self.txn.status(deleter) {
                // The row is as before the update, with the locks the
                // update kept beside it (a no-key update's), if any.
                XidStatus::Aborted => rs
                    .kept_locks
                    .lock()
                    .get(tid, deleter)
                    .unwrap_or(Locker::None),
                XidStatus::Committed => {
                    return Examined::Changed {
                        by: deleter,
                        newer: (h.infomask & tuple::UPDATED != 0 && h.ctid != tid)
                            .then_some(h.ctid),
                    }
                }
                XidStatus::InProgress => return Examined::Busy(deleter),
            },
        };
        let mut held = None;
        let mut others = Vec::new();
        for (locker, mode) in running_lockers(&self.txn, lockers) {
            if locker == xid {
                held = Some(mode);
            } else if mode.conflicts_with(want) {
                return Examined::Busy(locker);
            } else {
                others.push((locker, mode));
            }
        }
        Examined::Free { others, held }
    }

    /// The lock-only xmax (and its infomask bits) that names `lockers`
    /// (running transactions, each once): the one locker's id, or a new
    /// multi of them all.
    pub(super) fn lock_xmax(
        &self,
        lockers: &[(Xid, RowLockMode)],
    ) -> Result<(Xid, u16), HeapError> {
        Ok(match *lockers {
            [] => unreachable!("a lock of nobody"),
            [(locker, mode)] => (locker, TupleHeader::lock_bits(Some(mode))),
            _ => (
                self.txn.create_multi(lockers)?,
                TupleHeader::lock_bits(None),
            ),
        })
    }

    /// Puts the locks of `lockers` (a no-key update's kept locks, as
    /// [`Heap::lock_xmax`] wrote them) on the version `xid` just wrote at
    /// `tid`, and keeps them beside `xid`'s xmax on the version it
    /// replaced, `old` (see the module comment). Called after `old` is
    /// marked: until `xid` ends nobody else looks at the new version, so
    /// the order of the two is nobody's concern.
    pub(super) fn carry_locks(
        &self,
        s: &mut BufferSession,
        table: &HeapTable,
        old: Tid,
        tid: Tid,
        xid: Xid,
        (xmax, bits): (Xid, u16),
    ) -> Result<(), HeapError> {
        let rs = self.rel_state(table.rel);
        let lockers = Locker::of(xmax, bits);
        rs.kept_locks.lock().keep(&self.txn, old, xid, lockers);
        let wal = self.page_wal(&rs, xid);
        let id = s.read_buffer(table.rel, Fork::Main, tid.block)?;
        let done = s.modify_page(id, |page| {
            let Some(t) = item(page, tid.index as usize) else {
                return Err(Ok("no tuple at this line pointer"));
            };
            let h = TupleHeader::read(t);
            if h.xmin != xid || h.xmax != INVALID_XID {
                return Err(Ok(
                    "the new version of an update is not as its updater wrote it",
                ));
            }
            let change = PageChange::Lock {
                index: tid.index,
                xmax,
                bits,
            };
            let applied = apply_logged(wal, page, table.rel, tid.block, xid, &change)
                .map_err(|e| Err(HeapError::from(e)))?;
            debug_assert!(!applied.cleared_all_visible, "a lock cleared all-visible");
            Ok(())
        });
        s.release(id);
        done.map_err(|e: Result<&str, HeapError>| match e {
            Ok(what) => HeapError::Damaged {
                table: table.name.clone(),
                block: tid.block,
                index: tid.index,
                what,
            },
            Err(e) => e,
        })
    }

    /// Locks the row at `tid` (a version the caller's snapshot sees) for
    /// `by`'s transaction in `mode`, until it ends: PostgreSQL's
    /// `heap_lock_tuple`. A transaction holding the row in a conflicting
    /// mode (or changing it) is waited for as `wait` says, through the
    /// wait-for graph with `by.waits` (deadlock detection, lock_timeout,
    /// statement_timeout, cancel); a row another transaction changed and
    /// committed is reported with its newer version, which a
    /// read-committed statement follows (`exec::dml::follow_update_chain`).
    /// A lock held already in `mode` or a stronger one changes nothing; a
    /// weaker one is strengthened.
    pub fn lock_tuple(
        &self,
        s: &mut BufferSession,
        table: &HeapTable,
        tid: Tid,
        by: &Writer,
        mode: RowLockMode,
        wait: LockWait,
    ) -> Result<LockOutcome, HeapError> {
        let xid = by.xid;
        let rs = self.rel_state(table.rel);
        let wal = self.page_wal(&rs, xid);
        for _ in 0..ROW_HOLDER_WAITS_MAX {
            let id = s.read_buffer(table.rel, Fork::Main, tid.block)?;
            let looked = s.modify_page(id, |page| {
                let Some(t) = item(page, tid.index as usize) else {
                    return Err(Ok("no tuple at this line pointer"));
                };
                let h = TupleHeader::read(t);
                let (others, held) = match self.examine(&rs, &h, tid, xid, mode) {
                    Examined::Free { others, held } => (others, held),
                    Examined::Busy(holder) => return Ok(Err(holder)),
                    Examined::Changed { by, newer } => {
                        return Ok(Ok(LockOutcome::Changed { by, newer }))
                    }
                    Examined::SelfChanged => return Ok(Ok(LockOutcome::SelfChanged)),
                };
                if held.is_some_and(|held| held >= mode) {
                    return Ok(Ok(LockOutcome::Locked));
                }
                let mut lockers = others;
                lockers.push((xid, held.map_or(mode, |held| held.max(mode))));
                let (xmax, bits) = self.lock_xmax(&lockers).map_err(Err)?;
                let change = PageChange::Lock {
                    index: tid.index,
                    xmax,
                    bits,
                };
                let applied = apply_logged(wal, page, table.rel, tid.block, xid, &change)
                    .map_err(|e| Err(HeapError::from(e)))?;
                debug_assert!(
                    !applied.cleared_all_visible,
                    "a lock cleared the page's all-visible flag"
                );
                Ok(Ok(LockOutcome::Locked))
            });
            s.release(id);
            let looked = looked.map_err(|e: Result<_, HeapError>| match e {
                Ok(what) => HeapError::Damaged {
                    table: table.name.clone(),
                    block: tid.block,
                    index: tid.index,
                    what,
                },
                Err(e) => e,
            })?;
            let holder = match looked {
                Ok(outcome) => return Ok(outcome),
                Err(holder) => holder,
            };
            match wait {
                LockWait::SkipLocked => return Ok(LockOutcome::Skipped),
                LockWait::NoWait => {
                    return Err(HeapError::RowLockNotAvailable {
                        table: table.name.clone(),
                    })
                }
                // Each round waits for one holder to end.
                LockWait::Block => self
                    .txn
                    .wait_for_transaction(xid, holder, &by.waits)
                    .map_err(|source| HeapError::Wait {
                        table: table.name.clone(),
                        source,
                    })?,
            }
        }
        Err(HeapError::RowKeptBusy {
            table: table.name.clone(),
            waits: ROW_HOLDER_WAITS_MAX,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_locks_count_while_their_update_is_the_xmax_and_are_swept_once_void() {
        let dir = tempfile::tempdir().unwrap();
        TxnManager::create(dir.path()).unwrap();
        let txn = TxnManager::open(dir.path()).unwrap();
        let mut kept = KeptLocks::default();
        let tid = |index| Tid { block: 3, index };
        let locker = txn.assign_xid(txn.new_owner()).unwrap();
        let updater = txn.assign_xid(txn.new_owner()).unwrap();
        let lockers = Locker::One(locker, RowLockMode::KeyShare);
        kept.keep(&txn, tid(1), updater, lockers);
        assert_eq!(kept.get(tid(1), updater), Some(lockers));
        // Another xmax on that tuple, or another tuple, has none.
        assert_eq!(kept.get(tid(1), locker), None);
        assert_eq!(kept.get(tid(2), updater), None);
        txn.finish(updater, false).unwrap();
        // Void entries: updaters that committed, lockers that ended.
        for index in 0..3 * KEPT_LOCKS_SWEEP_FIRST as u16 {
            let ended = txn.assign_xid(txn.new_owner()).unwrap();
            let by = txn.assign_xid(txn.new_owner()).unwrap();
            kept.keep(
                &txn,
                tid(100 + index),
                by,
                Locker::One(ended, RowLockMode::KeyShare),
            );
            txn.finish(ended, index % 2 == 0).unwrap();
            txn.finish(by, index % 3 == 0).unwrap();
            assert!(kept.len() <= KEPT_LOCKS_SWEEP_FIRST + 1, "{}", kept.len());
        }
        // The entry whose updater aborted and whose locker runs stays.
        assert_eq!(kept.get(tid(1), updater), Some(lockers));
    }
}
