//! Table locks and the wait-for graph they share with row waits.
//!
//! A transaction locks each table it uses, in one of PostgreSQL's eight
//! modes, and holds the lock until it ends: a SELECT takes
//! `AccessShare`, INSERT/UPDATE/DELETE `RowExclusive`, VACUUM
//! `ShareUpdateExclusive`, CREATE INDEX `Share`, DROP TABLE and TRUNCATE
//! `AccessExclusive`. Two modes held by different transactions on one
//! table must not conflict ([`LockMode::conflicts_with`]); a transaction
//! never conflicts with itself.
//!
//! Locks are owned by a [`LockOwner`], a number each transaction gets as
//! it starts (PostgreSQL's virtual transaction id): a transaction that
//! only reads has no `Xid` but still holds locks. A transaction that
//! writes has both; [`TxnManager::assign_xid`] records whose xid is
//! whose, so that a wait for a row (for its writer's xid to end) and a
//! wait for a table (for its holders' owners) are edges of one graph, and
//! a deadlock through both kinds is found.
//!
//! Granting is first come, first served: a request waits for the granted
//! locks it conflicts with and for the conflicting requests queued before
//! it, so a stream of readers cannot starve a DROP. A transaction that
//! already holds a lock on the table skips the queue (it could otherwise
//! wait for a waiter that waits for it), as in PostgreSQL.
//!
//! Waiting follows [`TxnManager::wait_for_transaction`]'s rules: the
//! deadlock check once after `deadlock_timeout`, `lock_timeout`, and the
//! statement's interrupt. Releasing is all at once, at the transaction's
//! end ([`TxnManager::release_locks`]), which wakes every waiter to look
//! again.
//!
//! ```
//! # use aiostore::txn::{LockMode, TxnManager, WaitLimits};
//! # let dir = tempfile::tempdir().unwrap();
//! # TxnManager::create(dir.path()).unwrap();
//! let txn = TxnManager::open(dir.path()).unwrap();
//! let (reader, dropper) = (txn.new_owner(), txn.new_owner());
//! txn.lock_table(reader, 16384, LockMode::AccessShare, &WaitLimits::DEFAULT).unwrap();
//! // A DROP would wait for the reader; a conditional request says no.
//! assert!(!txn.try_lock_table(dropper, 16384, LockMode::AccessExclusive));
//! txn.release_locks(reader, &[(16384, LockMode::AccessShare)]);
//! assert!(txn.try_lock_table(dropper, 16384, LockMode::AccessExclusive));
//! ```

use std::collections::HashMap;

use super::{Inner, TxnManager, WaitError, WaitLimits, Xid};

/// Who holds and waits for locks: one number per transaction, given out
/// by [`TxnManager::new_owner`] and never reused.
pub type LockOwner = u64;

/// PostgreSQL's table lock modes, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LockMode {
    /// SELECT.
    AccessShare,
    /// SELECT … FOR UPDATE / FOR SHARE.
    RowShare,
    /// INSERT, UPDATE, DELETE, COPY FROM.
    RowExclusive,
    /// VACUUM, ANALYZE: one at a time per table, beside readers and writers.
    ShareUpdateExclusive,
    /// CREATE INDEX: readers, no writers.
    Share,
    ShareRowExclusive,
    Exclusive,
    /// DROP TABLE, TRUNCATE, DROP INDEX: no one else.
    AccessExclusive,
}

impl LockMode {
    pub const ALL: [LockMode; 8] = [
        LockMode::AccessShare,
        LockMode::RowShare,
        LockMode::RowExclusive,
        LockMode::ShareUpdateExclusive,
        LockMode::Share,
        LockMode::ShareRowExclusive,
        LockMode::Exclusive,
        LockMode::AccessExclusive,
    ];

    /// The modes this one conflicts with, one bit per mode in [`Self::ALL`]
    /// order: PostgreSQL's table of conflicting lock modes.
    const fn conflicts(self) -> u8 {
        const AS: u8 = 1;
        const RS: u8 = 1 << 1;
        const RE: u8 = 1 << 2;
        const SUE: u8 = 1 << 3;
        const S: u8 = 1 << 4;
        const SRE: u8 = 1 << 5;
        const E: u8 = 1 << 6;
        const AE: u8 = 1 << 7;
        match self {
            LockMode::AccessShare => AE,
            LockMode::RowShare => E | AE,
            LockMode::RowExclusive => S | SRE | E | AE,
            LockMode::ShareUpdateExclusive => SUE | S | SRE | E | AE,
            LockMode::Share => RE | SUE | SRE | E | AE,
            LockMode::ShareRowExclusive => RE | SUE | S | SRE | E | AE,
            LockMode::Exclusive => RS | RE | SUE | S | SRE | E | AE,
            LockMode::AccessExclusive => AS | RS | RE | SUE | S | SRE | E | AE,
        }
    }

    /// Whether two different transactions may not hold `self` and
    /// `other` on one table at once (symmetric).
    pub const fn conflicts_with(self, other: LockMode) -> bool {
        self.conflicts() & (1 << other as u8) != 0
    }

    /// PostgreSQL's name, as pg_locks shows it.
    pub const fn name(self) -> &'static str {
        match self {
            LockMode::AccessShare => "AccessShareLock",
            LockMode::RowShare => "RowShareLock",
            LockMode::RowExclusive => "RowExclusiveLock",
            LockMode::ShareUpdateExclusive => "ShareUpdateExclusiveLock",
            LockMode::Share => "ShareLock",
            LockMode::ShareRowExclusive => "ShareRowExclusiveLock",
            LockMode::Exclusive => "ExclusiveLock",
            LockMode::AccessExclusive => "AccessExclusiveLock",
        }
    }
}

/// The locks of one table: granted, and requested in arrival order.
#[derive(Debug, Default)]
pub(super) struct TableLock {
    granted: Vec<(LockOwner, LockMode)>,
    queue: Vec<(LockOwner, LockMode)>,
}

impl TableLock {
    /// Who `owner`'s request for `mode` waits for now: the other holders
    /// of conflicting modes and, unless `owner` already holds a lock
    /// here, the other conflicting requests queued before its own (all of
    /// the queue if it is not queued yet). Empty: it may be granted.
    fn blockers(&self, owner: LockOwner, mode: LockMode) -> Vec<LockOwner> {
        let mut blockers: Vec<LockOwner> = self
            .granted
            .iter()
            .filter(|&&(o, m)| o != owner && m.conflicts_with(mode))
            .map(|&(o, _)| o)
            .collect();
        if !self.granted.iter().any(|&(o, _)| o == owner) {
            blockers.extend(
                self.queue
                    .iter()
                    .take_while(|&&(o, _)| o != owner)
                    .filter(|&&(_, m)| m.conflicts_with(mode))
                    .map(|&(o, _)| o),
            );
        }
        blockers.sort_unstable();
        blockers.dedup();
        blockers
    }

    pub(super) fn grant(&mut self, owner: LockOwner, mode: LockMode) {
        self.queue.retain(|&r| r != (owner, mode));
        debug_assert!(
            !self.granted.contains(&(owner, mode)),
            "owner {owner} granted {mode:?} twice"
        );
        self.granted.push((owner, mode));
    }
}

/// What a waiting transaction waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitTarget {
    /// A transaction to end (a row or unique key it holds).
    Transaction(Xid),
    /// A lock on a table (by oid).
    Table { oid: u32, mode: LockMode },
}

impl std::fmt::Display for WaitTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitTarget::Transaction(xid) => write!(f, "transaction {xid}"),
            WaitTarget::Table { oid, mode } => write!(f, "{} on relation {oid}", mode.name()),
        }
    }
}

/// A transaction waiting: for what, and who stands in its way.
#[derive(Debug, Clone)]
pub(super) struct Waiting {
    pub(super) target: WaitTarget,
    pub(super) blockers: Vec<LockOwner>,
    /// The waiter sleeps on its own condition variable (under the
    /// manager's one mutex), so that the end of a transaction wakes only
    /// those waiting for it and not every waiting session, which then all
    /// queued for the mutex again (32 TPC-B clients waking on each of
    /// some 5 000 commits a second).
    pub(super) wake: std::sync::Arc<parking_lot::Condvar>,
}

/// True if `target` is a lock on table `oid`, in any mode.
fn on_table(target: &WaitTarget, oid: u32) -> bool {
    matches!(*target, WaitTarget::Table { oid: o, .. } if o == oid)
}

/// Wakes the waiters `which` picks out of `waits`. Called under the
/// manager's mutex, which the waiters sleep on.
pub(super) fn wake_waiters_where(
    waits: &HashMap<LockOwner, Waiting>,
    mut which: impl FnMut(&WaitTarget) -> bool,
) {
    for waiting in waits.values() {
        if which(&waiting.target) {
            waiting.wake.notify_one();
        }
    }
}

/// One transaction of a deadlock: who it is and what it waited for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadlockMember {
    pub owner: LockOwner,
    pub xid: Option<Xid>,
    pub target: WaitTarget,
}

impl DeadlockMember {
    /// "transaction 7", or for one that has written nothing (no xid)
    /// "read-only transaction v3".
    pub fn who(&self) -> String {
        who(self.owner, self.xid)
    }
}

fn who(owner: LockOwner, xid: Option<Xid>) -> String {
    match xid {
        Some(xid) => format!("transaction {xid}"),
        None => format!("read-only transaction v{owner}"),
    }
}

/// One row of the `locks` view: a lock granted or waited for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockRow {
    pub owner: LockOwner,
    /// The owner's transaction id, if it has one.
    pub xid: Option<Xid>,
    pub target: WaitTarget,
    pub granted: bool,
    /// Held in its session's fast-path slot, not the shared table
    /// (`txn/fastpath.rs`).
    pub fast_path: bool,
}

impl TxnManager {
    /// A new lock owner, for a transaction that starts outside any
    /// session (tests); a session's come from its slot
    /// ([`super::SessionSlot::new_owner`]).
    pub fn new_owner(&self) -> LockOwner {
        self.next_owner
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// Locks table `oid` in `mode` for `owner` until
    /// [`Self::release_locks`], waiting while others hold or queued first
    /// a conflicting mode (see the module comment). Asking again for a
    /// mode it holds is the caller's to avoid. Returns whether it waited
    /// (others may have changed the table meanwhile).
    pub fn lock_table(
        &self,
        owner: LockOwner,
        oid: u32,
        mode: LockMode,
        limits: &WaitLimits,
    ) -> Result<bool, WaitError> {
        self.count_strong(oid, mode);
        let mut inner = self.inner.lock();
        if mode.strong() {
            self.transfer_fast_path(&mut inner, oid);
        }
        let table = inner.tables.entry(oid).or_default();
        if table.blockers(owner, mode).is_empty() {
            table.grant(owner, mode);
            return Ok(false);
        }
        table.queue.push((owner, mode));
        let target = WaitTarget::Table { oid, mode };
        let waited = self.wait_in_graph(&mut inner, owner, target, limits, |inner| {
            let table = inner.tables.get_mut(&oid).expect("queued on it");
            let blockers = table.blockers(owner, mode);
            if blockers.is_empty() {
                table.grant(owner, mode);
            }
            blockers
        });
        if waited.is_err() {
            let table = inner.tables.get_mut(&oid).expect("queued on it");
            table.queue.retain(|&r| r != (owner, mode));
            let empty = table.granted.is_empty() && table.queue.is_empty();
            if empty {
                inner.tables.remove(&oid);
            }
            // Who queued behind it may go now.
            wake_waiters_where(&inner.waits, |t| on_table(t, oid));
            drop(inner);
            self.uncount_strong(oid, mode);
        }
        waited.map(|()| true)
    }

    /// Locks table `oid` in `mode` for `owner` if that needs no wait
    /// (VACUUM's truncation, which gives up rather than stall others).
    pub fn try_lock_table(&self, owner: LockOwner, oid: u32, mode: LockMode) -> bool {
        self.count_strong(oid, mode);
        let mut inner = self.inner.lock();
        if mode.strong() {
            self.transfer_fast_path(&mut inner, oid);
        }
        let table = inner.tables.entry(oid).or_default();
        let free = table.blockers(owner, mode).is_empty();
        if free {
            table.grant(owner, mode);
        } else if table.granted.is_empty() && table.queue.is_empty() {
            inner.tables.remove(&oid);
        }
        drop(inner);
        if !free {
            self.uncount_strong(oid, mode);
        }
        free
    }

    /// Releases the locks `owner` holds (each `(oid, mode)` it was
    /// granted), waking whoever waits.
    pub fn release_locks(&self, owner: LockOwner, held: &[(u32, LockMode)]) {
        if held.is_empty() {
            return;
        }
        let mut inner = self.inner.lock();
        for &(oid, mode) in held {
            let table = inner.tables.get_mut(&oid).expect("a held lock's table");
            let before = table.granted.len();
            table.granted.retain(|&g| g != (owner, mode));
            assert_eq!(
                table.granted.len() + 1,
                before,
                "owner {owner} released {mode:?} on {oid} it did not hold"
            );
            if table.granted.is_empty() && table.queue.is_empty() {
                inner.tables.remove(&oid);
            }
        }
        wake_waiters_where(&inner.waits, |t| {
            held.iter().any(|&(oid, _)| on_table(t, oid))
        });
        drop(inner);
        for &(oid, mode) in held {
            self.uncount_strong(oid, mode);
        }
    }

    /// Every table lock granted or waited for, every transaction id held
    /// and waited for, for the `locks` view: ordered by owner.
    pub fn lock_rows(&self) -> Vec<LockRow> {
        let inner = self.inner.lock();
        let xid_of = owner_xids(&inner);
        let mut rows = Vec::new();
        for (&oid, table) in &inner.tables {
            for (list, granted) in [(&table.granted, true), (&table.queue, false)] {
                rows.extend(list.iter().map(|&(owner, mode)| LockRow {
                    owner,
                    xid: xid_of.get(&owner).copied(),
                    target: WaitTarget::Table { oid, mode },
                    granted,
                    fast_path: false,
                }));
            }
        }
        // Each transaction with an id holds it (PostgreSQL's
        // ExclusiveLock on its own transactionid), which row waits wait for.
        rows.extend(inner.xid_owners.iter().map(|(&xid, &owner)| LockRow {
            owner,
            xid: Some(xid),
            target: WaitTarget::Transaction(xid),
            granted: true,
            fast_path: false,
        }));
        for (&owner, waiting) in &inner.waits {
            if let WaitTarget::Transaction(_) = waiting.target {
                rows.push(LockRow {
                    owner,
                    xid: xid_of.get(&owner).copied(),
                    target: waiting.target,
                    granted: false,
                    fast_path: false,
                });
            }
        }
        // Read after the shared table, under its lock: a strong request
        // moves fast-path locks under it, so none is listed twice or lost.
        rows.extend(self.fast_path_rows(|owner| xid_of.get(&owner).copied()));
        rows.sort_by_key(|r| (r.owner, !r.granted, r.xid));
        rows
    }

    /// Waits, as `owner` waiting for `target`, until `blockers` (run under
    /// the lock at each wake-up) returns no one: recording whom it waits
    /// for in the graph meanwhile, checking once for a deadlock after
    /// `deadlock_timeout`, giving up after `lock_timeout` or on an
    /// interrupt.
    pub(super) fn wait_in_graph(
        &self,
        inner: &mut parking_lot::MutexGuard<'_, Inner>,
        owner: LockOwner,
        target: WaitTarget,
        limits: &WaitLimits,
        mut blockers: impl FnMut(&mut Inner) -> Vec<LockOwner>,
    ) -> Result<(), WaitError> {
        let started = std::time::Instant::now();
        let deadlock_at = started + limits.deadlock_timeout;
        let timeout_at = limits.lock_timeout.map(|t| started + t);
        let mut checked = false;
        let wake_me = std::sync::Arc::new(parking_lot::Condvar::new());
        let result = loop {
            let now_blocking = blockers(inner);
            if now_blocking.is_empty() {
                break Ok(());
            }
            inner.waits.insert(
                owner,
                Waiting {
                    target,
                    blockers: now_blocking,
                    wake: std::sync::Arc::clone(&wake_me),
                },
            );
            let now = std::time::Instant::now();
            if !checked && now >= deadlock_at {
                checked = true;
                if let Some(cycle) = wait_cycle(inner, owner) {
                    break Err(WaitError::Deadlock { cycle });
                }
            }
            if let Err(i) = limits.interrupt.check() {
                break Err(i.into());
            }
            if timeout_at.is_some_and(|t| now >= t) {
                break Err(WaitError::LockTimeout {
                    who: who(owner, owner_xids(inner).get(&owner).copied()),
                    target,
                    ms: started.elapsed().as_millis() as u64,
                });
            }
            // Woken when the transaction waited for ends, or a lock on the
            // table waited for is released or given up, or a cancel
            // request comes (`wake_waiters`); else at the next check or
            // the timeout, and at least every WAIT_RECHECK.
            let mut wake = now + super::WAIT_RECHECK;
            if let Some(d) = limits.interrupt.deadline {
                wake = wake.min(d);
            }
            if !checked {
                wake = wake.min(deadlock_at);
            }
            if let Some(t) = timeout_at {
                wake = wake.min(t);
            }
            wake_me.wait_until(inner, wake);
        };
        inner.waits.remove(&owner);
        result
    }
}

/// Whose xid is whose, reversed: each owner's transaction id.
fn owner_xids(inner: &Inner) -> HashMap<LockOwner, Xid> {
    inner.xid_owners.iter().map(|(&x, &o)| (o, x)).collect()
}

/// The cycle of waits through `waiter`, if its wait closes one: `waiter`,
/// one it waits for, one that one waits for, … back to `waiter`. A
/// depth-first search over the waiting owners: each is visited once, so
/// it ends after at most one step per edge.
fn wait_cycle(inner: &Inner, waiter: LockOwner) -> Option<Vec<DeadlockMember>> {
    let mut path: Vec<(LockOwner, usize)> = vec![(waiter, 0)];
    let mut visited = std::collections::HashSet::from([waiter]);
    while let Some(&mut (at, ref mut next)) = path.last_mut() {
        let blockers = inner.waits.get(&at).map_or(&[][..], |w| &w.blockers[..]);
        let Some(&b) = blockers.get(*next) else {
            path.pop();
            continue;
        };
        *next += 1;
        if b == waiter {
            let xids = owner_xids(inner);
            return Some(
                path.iter()
                    .map(|&(owner, _)| DeadlockMember {
                        owner,
                        xid: xids.get(&owner).copied(),
                        target: inner.waits[&owner].target,
                    })
                    .collect(),
            );
        }
        if visited.insert(b) {
            path.push((b, 0));
        }
    }
    None
}

/// "transaction 7 waits for transaction 6; transaction 6 waits for
/// AccessExclusiveLock on relation 16385 held by transaction 7".
pub(super) fn describe_cycle(cycle: &[DeadlockMember]) -> String {
    let mut parts = Vec::with_capacity(cycle.len());
    for (i, m) in cycle.iter().enumerate() {
        let next = &cycle[(i + 1) % cycle.len()];
        parts.push(match m.target {
            WaitTarget::Transaction(_) => format!("{} waits for {}", m.who(), m.target),
            WaitTarget::Table { .. } => {
                format!("{} waits for {} held by {}", m.who(), m.target, next.who())
            }
        });
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    use crate::txn::tests::manager;

    #[test]
    fn conflict_table_is_postgresqls_and_symmetric() {
        use LockMode::*;
        for a in LockMode::ALL {
            for b in LockMode::ALL {
                assert_eq!(a.conflicts_with(b), b.conflicts_with(a), "{a:?} {b:?}");
            }
            assert!(a.conflicts_with(AccessExclusive));
        }
        assert!(!AccessShare.conflicts_with(RowExclusive));
        assert!(!RowExclusive.conflicts_with(RowExclusive));
        assert!(RowExclusive.conflicts_with(Share));
        assert!(!Share.conflicts_with(Share));
        assert!(ShareUpdateExclusive.conflicts_with(ShareUpdateExclusive));
        assert!(!ShareUpdateExclusive.conflicts_with(RowExclusive));
        assert!(RowShare.conflicts_with(Exclusive));
        assert!(!RowShare.conflicts_with(Share));
    }

    #[test]
    fn a_queued_exclusive_request_holds_back_later_readers_but_not_holders() {
        let (_dir, txn) = manager();
        let (reader, dropper, late) = (txn.new_owner(), txn.new_owner(), txn.new_owner());
        txn.lock_table(reader, 7, LockMode::AccessShare, &WaitLimits::DEFAULT)
            .unwrap();
        let t = Arc::clone(&txn);
        let drop_thread = std::thread::spawn(move || {
            t.lock_table(dropper, 7, LockMode::AccessExclusive, &WaitLimits::DEFAULT)
        });
        let started = std::time::Instant::now();
        while !txn.lock_rows().iter().any(|r| !r.granted) {
            assert!(started.elapsed() < Duration::from_secs(10));
            std::thread::sleep(Duration::from_millis(2));
        }
        // A new reader queues behind the DROP; the holder reads on.
        assert!(!txn.try_lock_table(late, 7, LockMode::AccessShare));
        assert!(txn.try_lock_table(reader, 7, LockMode::RowExclusive));
        txn.release_locks(
            reader,
            &[(7, LockMode::AccessShare), (7, LockMode::RowExclusive)],
        );
        drop_thread.join().unwrap().unwrap();
        assert!(!txn.try_lock_table(late, 7, LockMode::AccessShare));
        txn.release_locks(dropper, &[(7, LockMode::AccessExclusive)]);
        assert!(txn.try_lock_table(late, 7, LockMode::AccessShare));
        txn.release_locks(late, &[(7, LockMode::AccessShare)]);
        assert!(txn.lock_rows().is_empty());
    }

    #[test]
    fn lock_upgrades_in_two_transactions_deadlock_and_name_both() {
        let (_dir, txn) = manager();
        let (a, b) = (txn.new_owner(), txn.new_owner());
        let quick = WaitLimits {
            deadlock_timeout: Duration::from_millis(20),
            ..WaitLimits::DEFAULT
        };
        let slow = WaitLimits {
            deadlock_timeout: Duration::from_secs(60),
            lock_timeout: Some(Duration::from_secs(20)),
            ..WaitLimits::DEFAULT
        };
        txn.lock_table(a, 9, LockMode::AccessShare, &quick).unwrap();
        txn.lock_table(b, 9, LockMode::AccessShare, &quick).unwrap();
        let t = Arc::clone(&txn);
        let a_thread =
            std::thread::spawn(move || t.lock_table(a, 9, LockMode::AccessExclusive, &slow));
        let started = std::time::Instant::now();
        while !txn.lock_rows().iter().any(|r| !r.granted) {
            assert!(started.elapsed() < Duration::from_secs(10));
            std::thread::sleep(Duration::from_millis(2));
        }
        let e = txn
            .lock_table(b, 9, LockMode::AccessExclusive, &quick)
            .unwrap_err();
        let WaitError::Deadlock { cycle } = &e else {
            panic!("{e}")
        };
        assert_eq!(cycle.iter().map(|m| m.owner).collect::<Vec<_>>(), [b, a]);
        assert!(
            e.to_string().contains("AccessExclusiveLock on relation 9"),
            "{e}"
        );
        txn.release_locks(b, &[(9, LockMode::AccessShare)]);
        a_thread.join().unwrap().unwrap();
        txn.release_locks(
            a,
            &[(9, LockMode::AccessShare), (9, LockMode::AccessExclusive)],
        );
        assert!(txn.lock_rows().is_empty());
    }

    #[test]
    fn a_lock_timeout_leaves_the_queue_as_it_was() {
        let (_dir, txn) = manager();
        let (a, b, c) = (txn.new_owner(), txn.new_owner(), txn.new_owner());
        txn.lock_table(a, 3, LockMode::Share, &WaitLimits::DEFAULT)
            .unwrap();
        let limits = WaitLimits {
            lock_timeout: Some(Duration::from_millis(30)),
            ..WaitLimits::DEFAULT
        };
        let e = txn
            .lock_table(b, 3, LockMode::RowExclusive, &limits)
            .unwrap_err();
        assert!(matches!(e, WaitError::LockTimeout { .. }), "{e}");
        // B's request left: a reader is not queued behind it.
        assert!(txn.try_lock_table(c, 3, LockMode::AccessShare));
        txn.release_locks(a, &[(3, LockMode::Share)]);
        txn.release_locks(c, &[(3, LockMode::AccessShare)]);
        assert!(txn.lock_rows().is_empty());
    }
}
