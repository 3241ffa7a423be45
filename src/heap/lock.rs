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

use super::{
    apply_logged, item, tuple, Heap, HeapError, HeapTable, PageChange, Tid, TupleHeader, Writer,
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
pub fn xmax_without_effect(txn: &TxnManager, h: &TupleHeader) -> bool {
    match (h.deleter(), h.locker()) {
        (Some(deleter), _) => txn.status(deleter) == XidStatus::Aborted,
        (None, Locker::None) => false,
        (None, Locker::One(locker, _)) => txn.status(locker) != XidStatus::InProgress,
        (None, Locker::Multi(multi)) => txn.running_multi_members(multi).is_empty(),
    }
}

impl Heap {
    /// What transaction `xid` wanting the row `h` (at `tid`) in `want`
    /// finds (see the module comment): the one reading of an xmax as who
    /// holds the row, for writers ([`Heap::try_delete`]) and lockers
    /// ([`Heap::lock_tuple`]) alike. Called under the page's lock.
    pub(super) fn examine(
        &self,
        h: &TupleHeader,
        tid: Tid,
        xid: Xid,
        want: RowLockMode,
    ) -> Examined {
        let free = Examined::Free {
            others: Vec::new(),
            held: None,
        };
        if h.xmax == INVALID_XID {
            return free;
        }
        if let Some(deleter) = h.deleter() {
            if deleter == xid {
                return Examined::SelfChanged;
            }
            return match self.txn.status(deleter) {
                XidStatus::Aborted => free,
                XidStatus::Committed => Examined::Changed {
                    by: deleter,
                    newer: (h.infomask & tuple::UPDATED != 0 && h.ctid != tid).then_some(h.ctid),
                },
                XidStatus::InProgress => Examined::Busy(deleter),
            };
        }
        let lockers = match h.locker() {
            Locker::None => unreachable!("an xmax that neither deletes nor locks"),
            Locker::One(locker, mode) => {
                if locker == xid || self.txn.status(locker) == XidStatus::InProgress {
                    vec![(locker, mode)]
                } else {
                    Vec::new()
                }
            }
            Locker::Multi(multi) => self.txn.running_multi_members(multi),
        };
        let mut held = None;
        let mut others = Vec::with_capacity(lockers.len());
        for (locker, mode) in lockers {
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
                let (others, held) = match self.examine(&h, tid, xid, mode) {
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
                let mode = held.map_or(mode, |held| held.max(mode));
                let (xmax, bits) = if others.is_empty() {
                    (xid, TupleHeader::lock_bits(Some(mode)))
                } else {
                    let mut members = others;
                    members.push((xid, mode));
                    let multi = self
                        .txn
                        .create_multi(&members)
                        .map_err(|e| Err(HeapError::from(e)))?;
                    (multi, TupleHeader::lock_bits(None))
                };
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
