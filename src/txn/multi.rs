//! Row lock strengths and multi-lockers (PostgreSQL's MultiXacts, kept in
//! memory).
//!
//! A row lock is the locker's id in the tuple's xmax with infomask bits
//! saying "locked only, in mode M" (`heap::tuple`). One id fits there;
//! when a second transaction takes a lock that does not conflict with the
//! first's (two `FOR SHARE`), the xmax becomes a *multi*: an id standing
//! for the list of lockers and their modes, which lives here. As in
//! PostgreSQL a multi is never changed once made: another locker joining
//! makes a new multi of the lockers still running and itself, and writes
//! that to the tuple.
//!
//! Row locks need not survive a crash (the lockers are not running after a
//! restart), so the lists are kept in memory only. A multi's id comes from
//! the transaction id counter ([`TxnManager::create_multi`]), which is
//! reserved durably and never reused: after a restart no list is known,
//! and a multi id met in a tuple names no member, that is no lock. A new
//! multi can never take the id of one written before the restart. Nothing
//! runs under a multi's id: the commit log says "aborted" of it, so a
//! caller that forgot to look at the infomask would read "no deletion",
//! never "deleted".
//!
//! A list whose members have all ended means the same as no list (no
//! lock), so lists are swept out once none of their members runs: when
//! the table has grown to [`MULTI_SWEEP_FIRST`] lists, and then whenever
//! it has doubled since the last sweep (an amortised bound: the table
//! holds at most twice the lists some running transaction is in, plus
//! the first threshold).
//!
//! Only lockers are members. PostgreSQL's multis may also hold one
//! updater beside `FOR KEY SHARE` lockers (an UPDATE that changes no key
//! column does not wait for those), and must then be kept on disk, as
//! the updater's fate decides the row's visibility after a crash. Here
//! such an update writes its own id as a plain xmax, durable as any
//! deleter's, and the lockers it went on beside are kept by the heap in
//! memory (`heap/lock.rs`): multis stay lock-only, and in memory.

use std::collections::HashMap;

use super::{Inner, TxnError, TxnManager, Xid};

/// PostgreSQL's four row lock strengths (`LockTupleMode`), weakest first:
/// a stronger one conflicts with everything a weaker one conflicts with,
/// so holding a mode covers every weaker request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RowLockMode {
    /// `FOR KEY SHARE`: the row's key stays.
    KeyShare,
    /// `FOR SHARE`: the row stays as it is.
    Share,
    /// `FOR NO KEY UPDATE`: no one else changes or share-locks it.
    NoKeyUpdate,
    /// `FOR UPDATE`, and every UPDATE and DELETE.
    Update,
}

impl RowLockMode {
    pub const ALL: [RowLockMode; 4] = [
        RowLockMode::KeyShare,
        RowLockMode::Share,
        RowLockMode::NoKeyUpdate,
        RowLockMode::Update,
    ];

    /// Whether two different transactions may not hold `self` and
    /// `other` on one row at once (symmetric): PostgreSQL's conflict
    /// table of tuple lock modes (`tupleLockExtraInfo`, whose table lock
    /// modes AccessShare, RowShare, Exclusive and AccessExclusive
    /// conflict as these do).
    pub const fn conflicts_with(self, other: RowLockMode) -> bool {
        use RowLockMode::*;
        match (self, other) {
            (Update, _) | (_, Update) => true,
            (NoKeyUpdate, KeyShare) | (KeyShare, NoKeyUpdate) => false,
            (NoKeyUpdate, _) | (_, NoKeyUpdate) => true,
            // Share and key share beside each other.
            _ => false,
        }
    }

    /// The clause that asks for it, as PostgreSQL's messages name it.
    pub const fn clause(self) -> &'static str {
        match self {
            RowLockMode::KeyShare => "FOR KEY SHARE",
            RowLockMode::Share => "FOR SHARE",
            RowLockMode::NoKeyUpdate => "FOR NO KEY UPDATE",
            RowLockMode::Update => "FOR UPDATE",
        }
    }

    /// The mode stored in two bits of a tuple's infomask.
    pub const fn bits(self) -> u16 {
        self as u16
    }

    /// The mode of two infomask bits ([`Self::bits`]).
    pub const fn from_bits(bits: u16) -> RowLockMode {
        match bits & 3 {
            0 => RowLockMode::KeyShare,
            1 => RowLockMode::Share,
            2 => RowLockMode::NoKeyUpdate,
            _ => RowLockMode::Update,
        }
    }
}

/// Lists the table holds before the first sweep of ended ones.
pub const MULTI_SWEEP_FIRST: usize = 1024;

/// Most members a multi may have (a bound on what one row's lockers can
/// make the table hold: one per running transaction at most, and
/// `max_sessions` bounds those).
pub const MULTI_MEMBERS_MAX: usize = 4096;

/// The lockers of each multi, and when the table is next swept.
#[derive(Debug)]
pub(super) struct Multis {
    members: HashMap<Xid, Vec<(Xid, RowLockMode)>>,
    /// Sweep when the table holds this many lists.
    sweep_at: usize,
}

impl Default for Multis {
    fn default() -> Self {
        Multis {
            members: HashMap::new(),
            sweep_at: MULTI_SWEEP_FIRST,
        }
    }
}

impl TxnManager {
    /// Makes a multi of `members` (at least two, each transaction once,
    /// each running when the caller looked: one that ended since is kept
    /// and means no lock, as in any multi) and returns its id, which
    /// stands for them in a tuple's xmax. The id is taken from the transaction id counter (see
    /// the module comment), so this may write the id reservation as
    /// [`TxnManager::assign_xid`] does.
    pub fn create_multi(&self, members: &[(Xid, RowLockMode)]) -> Result<Xid, TxnError> {
        assert!(
            (2..=MULTI_MEMBERS_MAX).contains(&members.len()),
            "a multi of {} members",
            members.len()
        );
        let mut list = members.to_vec();
        list.sort_unstable();
        debug_assert!(
            list.windows(2).all(|w| w[0].0 != w[1].0),
            "a transaction twice in a multi: {list:?}"
        );
        let mut inner = self.inner.lock();
        debug_assert!(
            list.iter().all(|&(x, _)| x < inner.next_xid),
            "a multi of ids never assigned: {list:?}"
        );
        let id = self.next_id(&mut inner)?;
        self.publish(&inner);
        let multis = &mut inner.multis;
        if multis.members.len() >= multis.sweep_at {
            sweep(&mut inner);
        }
        let previous = inner.multis.members.insert(id, list);
        debug_assert!(previous.is_none(), "multi {id} made twice");
        Ok(id)
    }

    /// The members of multi `multi` still running, with their modes; none
    /// for a multi whose members all ended, or one made before the last
    /// restart.
    pub fn running_multi_members(&self, multi: Xid) -> Vec<(Xid, RowLockMode)> {
        let inner = self.inner.lock();
        inner
            .multis
            .members
            .get(&multi)
            .map(|list| {
                list.iter()
                    .copied()
                    .filter(|(x, _)| inner.running.contains(x))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// How many multis the table holds (tests of its sweep).
    pub fn multi_count(&self) -> usize {
        self.inner.lock().multis.members.len()
    }
}

/// Drops the lists none of whose members runs (they mean no lock, as an
/// unknown id does) and sets the next sweep for when the table has
/// doubled.
fn sweep(inner: &mut Inner) {
    let running = &inner.running;
    inner
        .multis
        .members
        .retain(|_, list| list.iter().any(|(x, _)| running.contains(x)));
    let left = inner.multis.members.len();
    inner.multis.sweep_at = (2 * left).max(MULTI_SWEEP_FIRST);
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::txn::tests::manager;

    #[test]
    fn conflict_table_is_postgresqls_and_symmetric() {
        use RowLockMode::*;
        let conflicts = |a: RowLockMode, b: RowLockMode| a.conflicts_with(b);
        for a in RowLockMode::ALL {
            for b in RowLockMode::ALL {
                assert_eq!(conflicts(a, b), conflicts(b, a), "{a:?} {b:?}");
                // A stronger mode conflicts with all a weaker one does.
                for stronger in RowLockMode::ALL.into_iter().filter(|&s| s > a) {
                    assert!(!conflicts(a, b) || conflicts(stronger, b));
                }
            }
            assert!(conflicts(a, Update));
            assert_eq!(RowLockMode::from_bits(a.bits()), a);
        }
        assert!(!conflicts(KeyShare, KeyShare));
        assert!(!conflicts(KeyShare, Share));
        assert!(!conflicts(KeyShare, NoKeyUpdate));
        assert!(!conflicts(Share, Share));
        assert!(conflicts(Share, NoKeyUpdate));
        assert!(conflicts(NoKeyUpdate, NoKeyUpdate));
    }

    #[test]
    fn a_multi_names_its_running_members_only() {
        let (_dir, txn) = manager();
        let a = txn.assign_xid(txn.new_owner()).unwrap();
        let b = txn.assign_xid(txn.new_owner()).unwrap();
        let m = txn
            .create_multi(&[(b, RowLockMode::Share), (a, RowLockMode::KeyShare)])
            .unwrap();
        assert!(m > b, "a multi's id comes after the ids before it");
        assert_eq!(
            txn.running_multi_members(m),
            [(a, RowLockMode::KeyShare), (b, RowLockMode::Share)]
        );
        txn.finish(a, true).unwrap();
        assert_eq!(txn.running_multi_members(m), [(b, RowLockMode::Share)]);
        // Nothing runs under the multi's own id.
        assert_eq!(txn.status(m), super::super::XidStatus::Aborted);
        assert!(txn.assign_xid(txn.new_owner()).unwrap() > m);
        assert!(txn.running_multi_members(m + 100).is_empty());
    }

    #[test]
    fn a_restart_knows_no_multi_and_never_reuses_an_id() {
        let dir = tempfile::tempdir().unwrap();
        TxnManager::create(dir.path()).unwrap();
        let m = {
            let txn = TxnManager::open(dir.path()).unwrap();
            let a = txn.assign_xid(txn.new_owner()).unwrap();
            let b = txn.assign_xid(txn.new_owner()).unwrap();
            txn.create_multi(&[(a, RowLockMode::Share), (b, RowLockMode::Share)])
                .unwrap()
        };
        let txn = TxnManager::open(dir.path()).unwrap();
        assert!(txn.running_multi_members(m).is_empty());
        let a = txn.assign_xid(txn.new_owner()).unwrap();
        let b = txn.assign_xid(txn.new_owner()).unwrap();
        assert!(a > m);
        let again = txn
            .create_multi(&[(a, RowLockMode::Share), (b, RowLockMode::Share)])
            .unwrap();
        assert!(again > m, "a new multi never takes an old one's id");
    }

    #[test]
    fn ended_multis_are_swept_as_the_table_doubles() {
        let (_dir, txn) = manager();
        let keeper = txn.assign_xid(txn.new_owner()).unwrap();
        let kept = {
            let other = txn.assign_xid(txn.new_owner()).unwrap();
            let multi = txn
                .create_multi(&[(keeper, RowLockMode::Share), (other, RowLockMode::Share)])
                .unwrap();
            txn.finish(other, true).unwrap();
            multi
        };
        for _ in 0..3 * MULTI_SWEEP_FIRST {
            let a = txn.assign_xid(txn.new_owner()).unwrap();
            let b = txn.assign_xid(txn.new_owner()).unwrap();
            txn.create_multi(&[(a, RowLockMode::KeyShare), (b, RowLockMode::Share)])
                .unwrap();
            txn.finish(a, true).unwrap();
            txn.finish(b, false).unwrap();
            assert!(txn.multi_count() <= MULTI_SWEEP_FIRST + 1);
        }
        // The multi whose member still runs survived every sweep.
        assert_eq!(
            txn.running_multi_members(kept),
            [(keeper, RowLockMode::Share)]
        );
    }
}
