//! Transactions: transaction ids, the commit log and MVCC snapshots
//! (DESIGN.md §8).
//!
//! A transaction gets an id (`Xid`) only when it first writes, as in
//! PostgreSQL; read-only transactions never take one. The commit log keeps
//! two bits per id (committed, aborted); an id with neither bit that is not
//! running belongs to a transaction that was running when the process
//! stopped, and counts as aborted.
//!
//! A snapshot says which transactions' effects a statement sees: every id
//! below `xmin` that committed, none at or above `xmax`, and between the two
//! those committed ids not listed as running when the snapshot was taken.
//! Vacuum may only remove a deleted tuple once no snapshot can still see it,
//! so every snapshot in use registers its `xmin` (see [`SnapshotGuard`]).
//!
//! Ids are never reused: the highest id that may have been handed out is
//! stored (and synced) in steps of [`XIDS_PER_RESERVATION`] before any id
//! beyond the last step is given out, and a restart continues above it.
//!
//! The commit log is durable through the WAL: a transaction's end is a
//! WAL record (logged by the session before [`TxnManager::finish`]), the
//! log's pages are written by each checkpoint ([`TxnManager::write_log`]),
//! and recovery replays the ends logged after it ([`TxnManager::redo_finish`]).

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex, RwLock};
use thiserror::Error;

use crate::inject::{HitContext, InjectionPoints, TXN_STATUS_BETWEEN_LOOKUPS};

mod fastpath;
mod locks;
mod multi;
mod running;
mod slot;

pub use fastpath::FAST_PATH_SLOTS;
pub use locks::{DeadlockMember, LockMode, LockOwner, LockRow, WaitTarget};
pub use multi::{RowLockMode, MULTI_MEMBERS_MAX, MULTI_SWEEP_FIRST};
pub use slot::{SessionSlot, SnapshotGuard};

/// A transaction id.
pub type Xid = u32;

/// No transaction (an `xmax` that was never set).
pub const INVALID_XID: Xid = 0;
/// Written by data directory creation: committed for everyone.
pub const BOOTSTRAP_XID: Xid = 1;
/// A tuple whose inserting transaction no snapshot needs to check.
pub const FROZEN_XID: Xid = 2;
pub const FIRST_NORMAL_XID: Xid = 3;

/// A command id: which statement of its transaction made a change, so that
/// a statement does not see its own changes (and later ones do).
pub type CommandId = u32;

/// Ids reserved (and the reservation synced) at a time.
pub const XIDS_PER_RESERVATION: u32 = 1024;

/// Commit log bytes per write: one page of 32 768 transactions.
const CLOG_PAGE_BYTES: usize = 8192;
const XIDS_PER_CLOG_BYTE: usize = 4;

const CLOG_FILE: &str = "xact";
const XID_FILE: &str = "xid_reserved";

const STATUS_COMMITTED: u8 = 1;
const STATUS_ABORTED: u8 = 2;

#[derive(Debug, Error)]
pub enum TxnError {
    #[error("could not {op} file \"{path}\": {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("\"{path}\" is damaged ({what}); the data directory cannot be opened safely")]
    Damaged { path: PathBuf, what: String },
    #[error("could not access status of transaction {xid}: commit log \"{path}\" is damaged ({what}); the data directory cannot be opened safely")]
    StatusMissing {
        xid: u64,
        path: PathBuf,
        what: String,
    },
    #[error(
        "transaction ids are used up (4 billion); this data directory cannot take more writes"
    )]
    Wraparound,
}

impl TxnError {
    /// PostgreSQL's SQLSTATE for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            TxnError::Io { source, .. } => crate::storage::io_sqlstate(source),
            TxnError::Damaged { .. } | TxnError::StatusMissing { .. } => "XX001",
            // PostgreSQL's refusal of new transaction ids near wraparound.
            TxnError::Wraparound => "54000",
        }
    }
}

/// What the commit log says of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XidStatus {
    Committed,
    Aborted,
    /// Running now.
    InProgress,
}

/// Which transactions a statement sees (see the module comment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub xmin: Xid,
    pub xmax: Xid,
    /// Running when the snapshot was taken, sorted; never contains `own`.
    pub in_progress: Vec<Xid>,
    /// The taking transaction's own id, if it has one.
    pub own: Option<Xid>,
    /// Changes of `own` made by commands before this one are visible.
    pub command: CommandId,
}

impl Snapshot {
    /// True if `xid`'s work is invisible because it had not finished when
    /// the snapshot was taken.
    pub fn is_running(&self, xid: Xid) -> bool {
        xid >= self.xmax || (xid >= self.xmin && self.in_progress.binary_search(&xid).is_ok())
    }
}

struct Inner {
    next_xid: Xid,
    /// Ids below this may have been handed out before (synced).
    reserved_until: Xid,
    running: BTreeSet<Xid>,
    /// Who waits for whom: each waiting transaction (a transaction waits
    /// for one thing at a time) and those in its way. The deadlock check
    /// follows these edges (see `locks.rs`).
    waits: HashMap<LockOwner, locks::Waiting>,
    /// The lock owner of each running transaction with an id.
    xid_owners: HashMap<Xid, LockOwner>,
    /// Table locks by table oid (only tables someone locks).
    tables: HashMap<u32, locks::TableLock>,
    /// The lockers of each multi a tuple's xmax may name (`multi.rs`).
    multis: multi::Multis,
}

impl Inner {
    /// The lowest xmin a snapshot taken now could have.
    fn xmin_now(&self) -> Xid {
        self.running
            .first()
            .copied()
            .unwrap_or(self.next_xid)
            .min(self.next_xid)
    }
}

/// See [`TxnManager::horizons`].
#[derive(Debug, Default)]
struct Horizons {
    xmin_now: AtomicU32,
    oldest_xmin: AtomicU32,
}

impl TxnManager {
    /// The oldest id a running transaction or registered snapshot may
    /// still see as not finished, computed under the manager's lock
    /// (`inner`): the lowest of xmin_now (`now`, from `inner`) and every
    /// slot's registered xmin.
    fn oldest_given(&self, now: Xid) -> Xid {
        now.min(self.lowest_registered_xmin().unwrap_or(Xid::MAX))
    }

    /// Publishes the running set (`running.rs`) and the horizons; called
    /// with the manager's lock held (`inner`) after every change to its
    /// ids or running set. The horizon is computed while the set is being
    /// written, as lock-free snapshots rely on.
    fn publish(&self, inner: &Inner) {
        self.running_published.begin(inner);
        self.publish_horizons(inner);
        self.running_published.end();
    }

    /// Publishes the horizons; called with the manager's lock held
    /// (`inner`), by [`Self::publish`], and by a snapshot's release that
    /// may move the oldest xmin (`slot.rs`).
    fn publish_horizons(&self, inner: &Inner) {
        let now = inner.xmin_now();
        let oldest = self.oldest_given(now);
        let horizons = &self.horizons;
        // Forward only: a new snapshot's xmin is at least the oldest, and
        // ids are given out upwards and end. A registered xmin below the
        // oldest published is a lock-free snapshot's that copied the
        // running set before that publish: its second look at the
        // sequence fails and it withdraws the xmin (`running.rs`), so it
        // holds nothing back and must not move the oldest back (the
        // stress test in `slot.rs` met it). The snapshot that keeps its
        // xmin checks it is not below the oldest (`snapshot_in`).
        horizons.oldest_xmin.fetch_max(oldest, Ordering::SeqCst);
        let before = horizons.xmin_now.swap(now, Ordering::SeqCst);
        debug_assert!(before <= now, "xmin_now went back from {before} to {now}");
    }
}

/// Transaction ids, their status and snapshots for one data directory.
pub struct TxnManager {
    dir: PathBuf,
    clog_file: File,
    xid_file: File,
    /// Two status bits per transaction id.
    clog: RwLock<Vec<u8>>,
    /// Pages of the log changed since `write_log` last wrote them.
    dirty_pages: Mutex<BTreeSet<usize>>,
    /// One `write_log` at a time, so that page copies reach the file in
    /// the order they were taken.
    clog_file_order: Mutex<()>,
    inner: Mutex<Inner>,
    /// What [`TxnManager::xmin_now`] and [`TxnManager::oldest_xmin`]
    /// answer, published under `inner`'s lock by every change to what
    /// they are computed from, so that they are read without it: pruning
    /// asks for the horizon with a page locked, and a lock taken there
    /// held every other session's change of that page behind the busiest
    /// lock of the engine (`perf`, TPC-B at 8 clients: the page locks'
    /// spins were mostly behind it). Both only move forward, and each is
    /// used as a lower bound, so a value read a moment late is safe.
    /// Shared with the sessions' slots, whose snapshot releases read it.
    horizons: Arc<Horizons>,
    /// Notified when a transaction ends, for waiters that are no
    /// transaction ([`TxnManager::wait_for`]); transactions waiting in the
    /// wait-for graph sleep on their own (`locks::Waiting::wake`).
    finished: Condvar,
    /// Lock owner ids are handed out in blocks from here (`slot.rs`).
    next_owner: std::sync::atomic::AtomicU64,
    /// The strong table lock requests' counts (`fastpath.rs`).
    fast_paths: fastpath::FastPaths,
    /// Every session's slot (`slot.rs`).
    slots: RwLock<Vec<Arc<SessionSlot>>>,
    /// The running set, for snapshots taken without `inner`'s lock.
    running_published: running::PublishedRunning,
    injections: InjectionPoints,
}

impl TxnManager {
    /// Creates the transaction files of a new data directory: no id
    /// reserved yet, and the commit log's first page.
    pub fn create(dir: &Path) -> Result<(), TxnError> {
        let write = |name: &str, data: &[u8]| {
            let path = dir.join(name);
            std::fs::write(&path, data).map_err(|source| TxnError::Io {
                op: "write",
                path,
                source,
            })
        };
        write(CLOG_FILE, &vec![0u8; clog_bytes_for(FIRST_NORMAL_XID)])?;
        write(XID_FILE, &FIRST_NORMAL_XID.to_le_bytes())
    }

    /// Opens the transaction files in `dir`, refusing files that are
    /// missing or disagree: a commit log that does not cover every id that
    /// may have been handed out would make committed rows vanish, and a
    /// lost reservation would hand out ids again.
    pub fn open(dir: &Path) -> Result<Arc<TxnManager>, TxnError> {
        let io = |op, path: &Path| {
            let path = path.to_path_buf();
            move |source| TxnError::Io { op, path, source }
        };
        let clog_path = dir.join(CLOG_FILE);
        let xid_path = dir.join(XID_FILE);
        let open = |path: &Path| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(path)
                .map_err(io("open", path))
        };
        let clog_file = open(&clog_path)?;
        let xid_file = open(&xid_path)?;
        let mut clog = Vec::new();
        std::io::Read::read_to_end(&mut &clog_file, &mut clog).map_err(io("read", &clog_path))?;
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut &xid_file, &mut raw).map_err(io("read", &xid_path))?;
        let reserved_until = match raw.len() {
            4 => u32::from_le_bytes(raw[..4].try_into().expect("4 bytes")),
            n => {
                return Err(TxnError::Damaged {
                    path: xid_path,
                    what: format!("{n} bytes instead of 4"),
                })
            }
        };
        if reserved_until < FIRST_NORMAL_XID {
            return Err(TxnError::Damaged {
                path: xid_path,
                what: format!("reserved id {reserved_until}"),
            });
        }
        // An extension the process did not finish (a full disk, a crash
        // in the write) leaves part of a page of zeros past the end: no id
        // beyond the reservation can be in it, so it is cut off.
        let whole_pages = clog.len() / CLOG_PAGE_BYTES * CLOG_PAGE_BYTES;
        if whole_pages != clog.len() && whole_pages >= clog_bytes_for(reserved_until) {
            log::warn!(
                "commit log \"{}\" ends with {} bytes of an unfinished extension; cutting them off",
                clog_path.display(),
                clog.len() - whole_pages
            );
            clog_file
                .set_len(whole_pages as u64)
                .map_err(io("truncate", &clog_path))?;
            clog.truncate(whole_pages);
        }
        check_clog(&clog, &clog_path, reserved_until)?;
        let inner = Inner {
            // Ids up to the reservation may have been used before a
            // crash: start above them.
            next_xid: reserved_until,
            reserved_until,
            running: BTreeSet::new(),
            waits: HashMap::new(),
            xid_owners: HashMap::new(),
            tables: HashMap::new(),
            multis: multi::Multis::default(),
        };
        let txn = Arc::new(TxnManager {
            dir: dir.to_path_buf(),
            clog_file,
            xid_file,
            clog: RwLock::new(clog),
            dirty_pages: Mutex::new(BTreeSet::new()),
            clog_file_order: Mutex::new(()),
            inner: Mutex::new(inner),
            horizons: Arc::default(),
            finished: Condvar::new(),
            next_owner: std::sync::atomic::AtomicU64::new(1),
            fast_paths: fastpath::FastPaths::default(),
            slots: RwLock::default(),
            running_published: running::PublishedRunning::default(),
            injections: InjectionPoints::default(),
        });
        txn.publish(&txn.inner.lock());
        Ok(txn)
    }

    /// Gives out a new transaction id, now running, for the transaction
    /// whose locks `owner` holds.
    pub fn assign_xid(&self, owner: LockOwner) -> Result<Xid, TxnError> {
        let mut inner = self.inner.lock();
        let xid = self.next_id(&mut inner)?;
        inner.running.insert(xid);
        inner.xid_owners.insert(xid, owner);
        self.publish(&inner);
        Ok(xid)
    }

    /// Takes the next id of the counter (for a transaction, or a multi),
    /// recording a new reservation first when it reaches the last one.
    /// The caller publishes the horizons once the id is where it goes: a
    /// transaction's, published before it is running, would move
    /// `xmin_now` past it and back.
    fn next_id(&self, inner: &mut Inner) -> Result<Xid, TxnError> {
        let xid = inner.next_xid;
        if xid == Xid::MAX {
            return Err(TxnError::Wraparound);
        }
        if xid >= inner.reserved_until {
            let until = xid.saturating_add(XIDS_PER_RESERVATION);
            // The commit log covers every id of the reservation before the
            // reservation is recorded (both synced, in this order), so a
            // log shorter than the reservation can only be damage.
            self.extend_clog(until)?;
            let path = self.dir.join(XID_FILE);
            self.xid_file
                .write_all_at(&until.to_le_bytes(), 0)
                .and_then(|()| self.xid_file.sync_data())
                .map_err(|source| TxnError::Io {
                    op: "write",
                    path,
                    source,
                })?;
            inner.reserved_until = until;
        }
        inner.next_xid = xid + 1;
        Ok(xid)
    }

    /// Records the end of `xid` and wakes whoever waits for it. The end
    /// must be logged first (the WAL is what makes it durable); the log
    /// page reaches its file at the next checkpoint.
    pub fn finish(&self, xid: Xid, committed: bool) -> Result<(), TxnError> {
        debug_assert!(xid >= FIRST_NORMAL_XID);
        self.set_status(xid, committed, false);
        let mut inner = self.inner.lock();
        inner.running.remove(&xid);
        inner.xid_owners.remove(&xid);
        self.publish(&inner);
        locks::wake_waiters_where(&inner.waits, |t| *t == WaitTarget::Transaction(xid));
        self.finished.notify_all();
        Ok(())
    }

    /// Replays a logged transaction end (recovery: nothing is running).
    /// Idempotent: the checkpoint may have written the bits already.
    pub fn redo_finish(&self, xid: Xid, committed: bool) {
        if xid >= FIRST_NORMAL_XID {
            self.set_status(xid, committed, true);
        }
    }

    fn set_status(&self, xid: Xid, committed: bool, replay: bool) {
        let byte = xid as usize / XIDS_PER_CLOG_BYTE;
        let shift = (xid as usize % XIDS_PER_CLOG_BYTE) * 2;
        let bits = if committed {
            STATUS_COMMITTED
        } else {
            STATUS_ABORTED
        };
        let mut clog = self.clog.write();
        assert!(
            byte < clog.len(),
            "xid {xid} finished beyond the commit log ({} bytes)",
            clog.len()
        );
        let old = (clog[byte] >> shift) & 3;
        debug_assert!(
            old == 0 || (replay && old == bits),
            "xid {xid} finished twice ({old} then {bits})"
        );
        clog[byte] = clog[byte] & !(3 << shift) | bits << shift;
        self.dirty_pages.lock().insert(byte / CLOG_PAGE_BYTES);
    }

    /// Writes the log pages changed since the last call and syncs the file
    /// (a checkpoint, after flushing the WAL past every end they record).
    pub fn write_log(&self) -> Result<(), TxnError> {
        let _in_order = self.clog_file_order.lock();
        let pages = std::mem::take(&mut *self.dirty_pages.lock());
        let path = self.dir.join(CLOG_FILE);
        let io = |source| TxnError::Io {
            op: "write",
            path: path.clone(),
            source,
        };
        for &page in &pages {
            let copy = {
                let clog = self.clog.read();
                clog[page * CLOG_PAGE_BYTES..(page + 1) * CLOG_PAGE_BYTES].to_vec()
            };
            if let Err(e) = self
                .clog_file
                .write_all_at(&copy, (page * CLOG_PAGE_BYTES) as u64)
            {
                // Written again next time.
                self.dirty_pages.lock().extend(pages.iter().copied());
                return Err(io(e));
            }
        }
        self.clog_file.sync_data().map_err(io)
    }

    /// Makes the commit log (file and memory) cover every id below
    /// `until`, with zero (not finished) pages, synced. Called with `inner`
    /// held (one extension at a time); the file is written without the
    /// log's lock, since nobody reads or writes past its end, so status
    /// checks do not wait for the sync.
    fn extend_clog(&self, until: Xid) -> Result<(), TxnError> {
        let len = clog_bytes_for(until);
        let old = self.clog.read().len();
        if old >= len {
            return Ok(());
        }
        let path = self.dir.join(CLOG_FILE);
        let written = self
            .clog_file
            .write_all_at(&vec![0u8; len - old], old as u64)
            .and_then(|()| self.clog_file.sync_data());
        if let Err(source) = written {
            // Leave no part page behind (open would have to cut it off).
            let _ = self.clog_file.set_len(old as u64);
            return Err(TxnError::Io {
                op: "write",
                path,
                source,
            });
        }
        self.clog.write().resize(len, 0);
        Ok(())
    }

    /// The commit log's two bits for `xid` (0 while running, or if it
    /// never finished).
    fn clog_bits(&self, xid: Xid) -> u8 {
        bits_at(&self.clog.read(), xid as usize)
    }

    /// The status of `xid` now (not as of a snapshot).
    ///
    /// Unless the log already has the transaction's bits, the running set
    /// is asked first and the commit log second, as PostgreSQL asks
    /// `TransactionIdIsInProgress` before `TransactionIdDidCommit`. `finish`
    /// writes the log and only then leaves the running set, so a
    /// transaction found not running has its bits in the log already.
    /// Answered from a log read before the running set, a check could read
    /// the log just before a commit wrote it and the running set just after
    /// the commit left it, and call a committed transaction aborted:
    /// an UPDATE then took a row that had already been replaced, and the
    /// table ended up with both versions.
    pub fn status(&self, xid: Xid) -> XidStatus {
        if xid < FIRST_NORMAL_XID {
            return if xid == INVALID_XID {
                XidStatus::Aborted
            } else {
                XidStatus::Committed
            };
        }
        // Bits in the log are final: a finished transaction needs no look
        // at the running set (vacuum asks once or twice per tuple).
        match self.clog_bits(xid) {
            STATUS_COMMITTED => return XidStatus::Committed,
            STATUS_ABORTED => return XidStatus::Aborted,
            _ => {}
        }
        self.injections.hit(
            TXN_STATUS_BETWEEN_LOOKUPS,
            HitContext {
                offset: u64::from(xid),
            },
        );
        if self.inner.lock().running.contains(&xid) {
            return XidStatus::InProgress;
        }
        match self.clog_bits(xid) {
            STATUS_COMMITTED => XidStatus::Committed,
            // Aborted, or running when the process stopped.
            _ => XidStatus::Aborted,
        }
    }

    /// Injection points of the transaction manager (for tests).
    pub fn injections(&self) -> &InjectionPoints {
        &self.injections
    }

    /// True if `xid` committed (cheap: no lock beyond the log's).
    pub fn did_commit(&self, xid: Xid) -> bool {
        if xid < FIRST_NORMAL_XID {
            return xid != INVALID_XID;
        }
        self.clog_bits(xid) == STATUS_COMMITTED
    }

    /// The id the next transaction to write will get: every id handed
    /// out so far is below it.
    pub fn next_xid(&self) -> Xid {
        self.inner.lock().next_xid
    }

    /// The xmin a snapshot taken now would have: no snapshot taken later
    /// has a lower one (a transaction running then started before).
    pub fn xmin_now(&self) -> Xid {
        self.horizons.xmin_now.load(Ordering::SeqCst)
    }

    /// The oldest transaction any running transaction or registered
    /// snapshot may still need to see as not finished: changes of
    /// transactions that committed below it are seen by everyone.
    pub fn oldest_xmin(&self) -> Xid {
        self.horizons.oldest_xmin.load(Ordering::SeqCst)
    }

    /// [`Self::oldest_xmin`] brought up to date first: for vacuum, which
    /// runs seldom and should remove all it can (a snapshot's release may
    /// leave the published value behind for a moment, `slot.rs`).
    pub fn fresh_oldest_xmin(&self) -> Xid {
        let inner = self.inner.lock();
        self.publish_horizons(&inner);
        self.oldest_xmin()
    }

    /// Waits until transaction `holder` is no longer running, for
    /// transaction `waiter` (a row it wants to change, a key it wants to
    /// insert, is `holder`'s until `holder` ends).
    ///
    /// After `limits.deadlock_timeout` of waiting, it checks once whether
    /// `holder` waits, directly or through others, for `waiter`: then no
    /// one would ever go on, and the waiter gives up with
    /// [`WaitError::Deadlock`] (PostgreSQL's deadlock check, which also
    /// runs once per wait after deadlock_timeout). A cycle closed after a
    /// waiter's check is found by the check of whoever closed it, which
    /// comes later. With `limits.lock_timeout`, it gives up after that
    /// long ([`WaitError::LockTimeout`]); without, it waits as long as the
    /// holder runs, as PostgreSQL does.
    pub fn wait_for_transaction(
        &self,
        waiter: Xid,
        holder: Xid,
        limits: &WaitLimits,
    ) -> Result<(), WaitError> {
        assert_ne!(waiter, holder, "a transaction waits for itself");
        let mut inner = self.inner.lock();
        let Some(&owner) = inner.xid_owners.get(&waiter) else {
            panic!("transaction {waiter} waits but is not running");
        };
        self.wait_in_graph(
            &mut inner,
            owner,
            WaitTarget::Transaction(holder),
            limits,
            |inner| {
                if !inner.running.contains(&holder) {
                    return Vec::new();
                }
                // Running and owned change together, under this lock.
                vec![inner.xid_owners[&holder]]
            },
        )
    }

    /// Wakes every waiting transaction to look at its interrupt again:
    /// after a cancel flag was set. Taken under the lock the waiters
    /// check their flags under, so that none checks before the flag was
    /// set and sleeps after this.
    pub fn wake_waiters(&self) {
        let inner = self.inner.lock();
        locks::wake_waiters_where(&inner.waits, |_| true);
        self.finished.notify_all();
    }

    /// Each waiting transaction and those it waits for.
    pub fn waits(&self) -> Vec<(LockOwner, Vec<LockOwner>)> {
        let mut waits: Vec<_> = self
            .inner
            .lock()
            .waits
            .iter()
            .map(|(&w, waiting)| (w, waiting.blockers.clone()))
            .collect();
        waits.sort_unstable();
        waits
    }

    /// Waits until `xid` is no longer running, at most `timeout`; returns
    /// false on timeout. For waiters that are no transaction (an index
    /// build), which no one can wait for in turn.
    pub fn wait_for(&self, xid: Xid, timeout: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let mut inner = self.inner.lock();
        while inner.running.contains(&xid) {
            if self.finished.wait_until(&mut inner, deadline).timed_out() {
                return !inner.running.contains(&xid);
            }
        }
        true
    }
}

/// How long a waiting transaction waits before it checks for a deadlock
/// (`deadlock_timeout`) and before it gives up (`lock_timeout`), and what
/// may stop its statement meanwhile.
#[derive(Debug, Clone)]
pub struct WaitLimits {
    pub deadlock_timeout: std::time::Duration,
    /// `None`: as long as the holder runs.
    pub lock_timeout: Option<std::time::Duration>,
    pub interrupt: Interrupt,
}

impl WaitLimits {
    /// PostgreSQL's defaults: check after 1 s, no timeout; nothing
    /// interrupts.
    pub const DEFAULT: WaitLimits = WaitLimits {
        deadlock_timeout: std::time::Duration::from_secs(1),
        lock_timeout: None,
        interrupt: Interrupt::NONE,
    };
}

/// What stops a running statement from outside it: a cancel request
/// (a flag another thread sets) and its `statement_timeout` deadline.
/// The executor looks at it between batches, and a wait for another
/// transaction while it waits.
#[derive(Debug, Clone, Default)]
pub struct Interrupt {
    pub cancel: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    pub deadline: Option<std::time::Instant>,
}

impl Interrupt {
    /// Nothing interrupts.
    pub const NONE: Interrupt = Interrupt {
        cancel: None,
        deadline: None,
    };

    /// Whether the statement is to stop, and why.
    pub fn check(&self) -> Result<(), Interrupted> {
        if self
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(std::sync::atomic::Ordering::SeqCst))
        {
            return Err(Interrupted::Canceled);
        }
        if self
            .deadline
            .is_some_and(|d| std::time::Instant::now() >= d)
        {
            return Err(Interrupted::StatementTimeout);
        }
        Ok(())
    }
}

/// Why a statement was stopped from outside (PostgreSQL's words; both are
/// SQLSTATE 57014).
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum Interrupted {
    #[error("canceling statement due to user request")]
    Canceled,
    #[error("canceling statement due to statement timeout")]
    StatementTimeout,
}

impl Interrupted {
    pub fn sqlstate(&self) -> &'static str {
        "57014"
    }
}

/// The longest a waiter sleeps before it looks again (a transaction's end
/// wakes it at once; this bounds a missed wake-up).
const WAIT_RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// Why a wait for another transaction ended without it ending.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum WaitError {
    /// The transactions in `cycle` each wait for the next, the last for
    /// the first (the one that gave up).
    #[error("deadlock detected: {}; {} gave up (retry it)", locks::describe_cycle(.cycle), .cycle[0].who())]
    Deadlock { cycle: Vec<DeadlockMember> },
    #[error(
        "canceling statement due to lock timeout: {who} waited {ms} ms for {target} (lock_timeout)"
    )]
    LockTimeout {
        who: String,
        target: WaitTarget,
        ms: u64,
    },
    #[error(transparent)]
    Interrupted(#[from] Interrupted),
}

impl WaitError {
    /// PostgreSQL's SQLSTATE for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            WaitError::Deadlock { .. } => "40P01",
            WaitError::LockTimeout { .. } => "55P03",
            WaitError::Interrupted(i) => i.sqlstate(),
        }
    }
}

/// The two status bits of `xid` in commit log `clog` (0 past its end).
fn bits_at(clog: &[u8], xid: usize) -> u8 {
    clog.get(xid / XIDS_PER_CLOG_BYTE)
        .map_or(0, |b| (b >> ((xid % XIDS_PER_CLOG_BYTE) * 2)) & 3)
}

/// Bytes of commit log (whole pages) that cover every id below `until`.
fn clog_bytes_for(until: Xid) -> usize {
    let last_byte = (until as usize).saturating_sub(1) / XIDS_PER_CLOG_BYTE;
    (last_byte / CLOG_PAGE_BYTES + 1) * CLOG_PAGE_BYTES
}

/// Checks that the commit log read from `path` covers every id below
/// `reserved_until` and records nothing at or above it.
fn check_clog(clog: &[u8], path: &Path, reserved_until: Xid) -> Result<(), TxnError> {
    let needed = clog_bytes_for(reserved_until);
    if clog.len() < needed || !clog.len().is_multiple_of(CLOG_PAGE_BYTES) {
        let first_missing = (clog.len() / CLOG_PAGE_BYTES * CLOG_PAGE_BYTES * XIDS_PER_CLOG_BYTE)
            .max(FIRST_NORMAL_XID as usize);
        return Err(TxnError::StatusMissing {
            xid: first_missing as u64,
            path: path.to_path_buf(),
            what: format!(
                "the file is {} bytes; ids up to {} need {needed}",
                clog.len(),
                reserved_until - 1
            ),
        });
    }
    if let Some(last) = clog.iter().rposition(|&b| b != 0) {
        let first_of_byte = last * XIDS_PER_CLOG_BYTE;
        let xid = (first_of_byte..first_of_byte + XIDS_PER_CLOG_BYTE)
            .rev()
            .find(|&x| bits_at(clog, x) != 0)
            .expect("a non-zero byte has a status") as u64;
        if xid >= u64::from(reserved_until) {
            return Err(TxnError::Damaged {
                path: path.to_path_buf(),
                what: format!(
                    "transaction {xid} is recorded as finished, but ids from {reserved_until} on were never handed out (the reservation file \"{XID_FILE}\" was replaced)"
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A transaction manager over a new directory (kept while the guard
    /// lives).
    pub(crate) fn manager() -> (tempfile::TempDir, Arc<TxnManager>) {
        let dir = tempfile::tempdir().unwrap();
        TxnManager::create(dir.path()).unwrap();
        let txn = TxnManager::open(dir.path()).unwrap();
        (dir, txn)
    }

    #[test]
    fn snapshots_see_only_what_committed_before_them() {
        let dir = tempfile::tempdir().unwrap();
        TxnManager::create(dir.path()).unwrap();
        let txn = TxnManager::open(dir.path()).unwrap();
        let a = txn.assign_xid(txn.new_owner()).unwrap();
        let b = txn.assign_xid(txn.new_owner()).unwrap();
        txn.finish(a, true).unwrap();
        let snap = txn.snapshot(None, 0);
        assert!(!snap.snapshot().is_running(a));
        assert!(snap.snapshot().is_running(b));
        let c = txn.assign_xid(txn.new_owner()).unwrap();
        assert!(snap.snapshot().is_running(c), "started after the snapshot");
        assert_eq!(txn.oldest_xmin(), b);
        txn.finish(b, false).unwrap();
        assert_eq!(txn.status(b), XidStatus::Aborted);
        assert_eq!(txn.status(c), XidStatus::InProgress);
        // The registered snapshot still holds the horizon back.
        assert_eq!(txn.oldest_xmin(), b);
        drop(snap);
        assert_eq!(txn.oldest_xmin(), c);
    }

    #[test]
    fn the_published_horizons_follow_every_change_and_only_move_forward() {
        let dir = tempfile::tempdir().unwrap();
        TxnManager::create(dir.path()).unwrap();
        let txn = TxnManager::open(dir.path()).unwrap();
        let locked = |txn: &TxnManager| {
            let inner = txn.inner.lock();
            (inner.xmin_now(), txn.oldest_given(inner.xmin_now()))
        };
        let published = |txn: &TxnManager| (txn.xmin_now(), txn.oldest_xmin());
        let mut last = published(&txn);
        assert_eq!(last, locked(&txn), "published at open");
        let mut check = |txn: &TxnManager, step: &str| {
            let now = published(txn);
            assert_eq!(now, locked(txn), "after {step}");
            assert!(now.0 >= last.0 && now.1 >= last.1, "back after {step}");
            last = now;
        };
        // With nothing running: the id given out must not show as passed.
        let a = txn.assign_xid(txn.new_owner()).unwrap();
        check(&txn, "the first id");
        assert_eq!(txn.xmin_now(), a);
        let snap = txn.snapshot(Some(a), 0);
        check(&txn, "a snapshot");
        let b = txn.assign_xid(txn.new_owner()).unwrap();
        let multi = txn
            .create_multi(&[(a, RowLockMode::KeyShare), (b, RowLockMode::KeyShare)])
            .unwrap();
        check(&txn, "a multi");
        assert!(multi > b);
        txn.finish(a, true).unwrap();
        check(&txn, "an end");
        assert_eq!(txn.xmin_now(), b);
        assert_eq!(txn.oldest_xmin(), a, "the snapshot holds it");
        drop(snap);
        check(&txn, "the snapshot's release");
        assert_eq!(txn.oldest_xmin(), b);
        txn.finish(b, false).unwrap();
        check(&txn, "the last end");
        assert_eq!(txn.oldest_xmin(), txn.next_xid());
    }

    #[test]
    fn a_restart_never_reuses_ids_and_keeps_commits() {
        let dir = tempfile::tempdir().unwrap();
        TxnManager::create(dir.path()).unwrap();
        let (committed, running) = {
            let txn = TxnManager::open(dir.path()).unwrap();
            let a = txn.assign_xid(txn.new_owner()).unwrap();
            txn.finish(a, true).unwrap();
            let running = txn.assign_xid(txn.new_owner()).unwrap();
            txn.write_log().unwrap();
            (a, running)
        };
        let txn = TxnManager::open(dir.path()).unwrap();
        assert_eq!(txn.status(committed), XidStatus::Committed);
        // Running when the process stopped: aborted.
        assert_eq!(txn.status(running), XidStatus::Aborted);
        assert!(txn.assign_xid(txn.new_owner()).unwrap() > running);
    }

    /// Ends reach the file when the log is written (each checkpoint), and
    /// a second write keeps the first's.
    #[test]
    fn ends_reach_the_file_when_the_log_is_written() {
        let dir = tempfile::tempdir().unwrap();
        TxnManager::create(dir.path()).unwrap();
        let txn = TxnManager::open(dir.path()).unwrap();
        let a = txn.assign_xid(txn.new_owner()).unwrap();
        let b = txn.assign_xid(txn.new_owner()).unwrap();
        txn.finish(a, true).unwrap();
        txn.write_log().unwrap();
        txn.finish(b, true).unwrap();
        txn.write_log().unwrap();
        drop(txn);
        let txn = TxnManager::open(dir.path()).unwrap();
        assert_eq!(txn.status(a), XidStatus::Committed);
        assert_eq!(txn.status(b), XidStatus::Committed);
    }

    #[test]
    fn a_damaged_reservation_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        TxnManager::create(dir.path()).unwrap();
        std::fs::write(dir.path().join(XID_FILE), b"xyz").unwrap();
        let err = TxnManager::open(dir.path()).err().unwrap();
        assert!(err.to_string().contains("damaged"), "{err}");
    }

    /// Opens `dir` after one committed transaction, with `damage` done to
    /// the files in between, and returns the error text.
    fn open_after(damage: impl FnOnce(&Path)) -> String {
        let dir = tempfile::tempdir().unwrap();
        TxnManager::create(dir.path()).unwrap();
        {
            let txn = TxnManager::open(dir.path()).unwrap();
            let a = txn.assign_xid(txn.new_owner()).unwrap();
            txn.finish(a, true).unwrap();
            txn.write_log().unwrap();
        }
        damage(dir.path());
        match TxnManager::open(dir.path()) {
            Ok(_) => panic!("opened after the damage"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_missing_commit_log_or_reservation_is_refused_not_recreated() {
        for name in [CLOG_FILE, XID_FILE] {
            let err = open_after(|d| std::fs::remove_file(d.join(name)).unwrap());
            assert!(
                err.starts_with("could not open file") && err.contains(name),
                "{err}"
            );
            assert!(err.contains("No such file"), "{err}");
        }
    }

    #[test]
    fn a_truncated_commit_log_is_refused_naming_a_transaction() {
        for len in [0, 100, CLOG_PAGE_BYTES as u64 - 1] {
            let err = open_after(|d| {
                let f = File::options().write(true).open(d.join(CLOG_FILE)).unwrap();
                f.set_len(len).unwrap();
            });
            assert!(
                err.starts_with("could not access status of transaction 3: commit log"),
                "{len}: {err}"
            );
        }
    }

    #[test]
    fn an_unfinished_extension_of_the_commit_log_is_cut_off_at_open() {
        let dir = tempfile::tempdir().unwrap();
        TxnManager::create(dir.path()).unwrap();
        let committed = {
            let txn = TxnManager::open(dir.path()).unwrap();
            let a = txn.assign_xid(txn.new_owner()).unwrap();
            txn.finish(a, true).unwrap();
            txn.write_log().unwrap();
            a
        };
        let path = dir.path().join(CLOG_FILE);
        let f = File::options().write(true).open(&path).unwrap();
        f.set_len(CLOG_PAGE_BYTES as u64 + 4096).unwrap();
        drop(f);
        let txn = TxnManager::open(dir.path()).unwrap();
        assert_eq!(txn.status(committed), XidStatus::Committed);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            CLOG_PAGE_BYTES as u64
        );
    }

    #[test]
    fn a_reservation_below_a_finished_transaction_is_refused() {
        let err = open_after(|d| {
            std::fs::write(d.join(XID_FILE), FIRST_NORMAL_XID.to_le_bytes()).unwrap()
        });
        assert!(
            err.contains("transaction 3 is recorded as finished"),
            "{err}"
        );
    }

    #[test]
    fn the_commit_log_covers_each_reservation_before_it_is_recorded() {
        let dir = tempfile::tempdir().unwrap();
        TxnManager::create(dir.path()).unwrap();
        let txn = TxnManager::open(dir.path()).unwrap();
        // Cross into a second commit log page.
        let per_page = (CLOG_PAGE_BYTES * XIDS_PER_CLOG_BYTE) as u32;
        txn.inner.lock().next_xid = per_page - 1;
        txn.inner.lock().reserved_until = per_page - 1;
        let a = txn.assign_xid(txn.new_owner()).unwrap();
        let b = txn.assign_xid(txn.new_owner()).unwrap();
        assert_eq!(b, per_page);
        let len = std::fs::metadata(dir.path().join(CLOG_FILE)).unwrap().len();
        assert_eq!(len, 2 * CLOG_PAGE_BYTES as u64);
        txn.finish(a, true).unwrap();
        txn.finish(b, false).unwrap();
        txn.write_log().unwrap();
        drop(txn);
        let txn = TxnManager::open(dir.path()).unwrap();
        assert_eq!(txn.status(a), XidStatus::Committed);
        assert_eq!(txn.status(b), XidStatus::Aborted);
    }
}
