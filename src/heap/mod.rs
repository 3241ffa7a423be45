//! Heap tables (DESIGN.md §8): slotted pages of MVCC tuples, read by
//! sequential scans through read streams, cleaned by vacuum, summarised by
//! the visibility map.
//!
//! Every change to a heap page is a [`PageChange`] applied and logged by
//! [`apply_logged`], under the page's exclusive content lock: the one path
//! by which heap pages change, and where their WAL records are made (the
//! page's `pd_lsn` becomes the record's end). Replay runs the same
//! [`apply`] again ([`redo`]). Each change that can hide a tuple from
//! someone clears the page's all-visible flag (and the caller then the map
//! bit, which replay clears too: the record says so); a row lock and
//! vacuum's forgetting of a void xmax leave it; vacuum's `SetAllVisible`
//! sets it, and so does a frozen load's multi-insert. A bulk load
//! ([`Heap::insert_batch`], COPY) puts a page's worth of tuples on a page
//! at once and logs them as one record
//! ([`apply_logged_multi`], PostgreSQL's heap_multi_insert).
//!
//! A frozen load (COPY FREEZE, [`InsertState::frozen_load`]) writes its
//! tuples with xmin [`FROZEN_XID`] and leaves each page it starts on an
//! empty page all-visible, map bit included, as PostgreSQL's
//! `HEAP_INSERT_FROZEN` does: VACUUM then has nothing to do on them. Its
//! relation is new in the loading transaction (created or truncated by
//! it), so nobody else can read the rows before the commit, and an abort
//! removes the files with them; a page that already held tuples of the
//! transaction's other statements is not made all-visible (theirs are not
//! frozen), and one a frozen load made all-visible stays so as more
//! frozen tuples join it.
//!
//! A table created by a transaction still running skips the WAL
//! (PostgreSQL's `wal_level = minimal`): nobody else can see it, so its
//! pages need no log until the commit, which writes and syncs them
//! instead, before its commit record ([`Heap::end_wal_skip`]); an abort
//! removes the files. Its pages keep `pd_lsn` 0, so the first logged
//! change to each after the commit logs the whole page, and buffers
//! written meanwhile (eviction, a checkpoint) need no WAL flushed.
//!
//! Inserts go to the relation's current insert block while it has room
//! (leaving `100 - fillfactor` percent free for updates), then to pages that
//! vacuum found with room, then to a new block added under the relation's
//! extension lock. Deleting or updating a tuple sets its `xmax`; a tuple
//! whose `xmax` belongs to a transaction still running is waited for; one
//! that committed is reported with its newer version (`try_delete`), which
//! a read-committed statement follows and re-checks (PostgreSQL's
//! EvalPlanQual) and a repeatable-read one turns into a conflict
//! (`ConcurrentUpdate`: retry the transaction).
//!
//! Row locks (`SELECT … FOR UPDATE` and its weaker strengths) are a
//! lock-only xmax: see [`lock`]. Whatever reads an xmax as a deletion
//! asks [`TupleHeader::deleter`], which passes over a lock; whatever
//! wants the row reads it through `Heap::examine`, which knows both.

pub mod fsm;
pub mod lock;
pub mod tuple;
pub mod vm;

mod bitmap;
mod hot;
pub use bitmap::{BitmapScanStats, HeapBitmapScan};
pub use lock::{LockOutcome, LockWait};

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use thiserror::Error;

use crate::buffer::{BufferError, BufferId, BufferSession, IntMap, Strategy, StrategyKind};
use crate::page::{
    add_item, free_space, init_page, is_dead_item, is_new, item, item_mut, line_pointer,
    line_pointer_count, page_flags, page_lsn, prune_items, set_page_flags, set_page_lsn, LineFate,
    LineFlags, PageBytes, EMPTY_PAGE_FREE_BYTES, LINE_POINTER_SIZE, MAX_ALIGN, PD_ALL_VISIBLE,
};
use crate::storage::{Fork, BLOCK_SIZE};
use crate::stream::{Next, ReadStream, StreamFlags, StreamLimits, StreamStats};
use crate::txn::{
    CommandId, RowLockMode, Snapshot, TxnError, TxnManager, WaitError, WaitLimits, Xid, XidStatus,
    FROZEN_XID, INVALID_XID,
};
use crate::types::ColumnType;
use crate::wal::record::{DataReader, SMGR_TRUNCATE};
use crate::wal::{BlockTag, Lsn, PageRef, Rmgr, Wal, WalError};
pub use tuple::{Tid, TupleError, TupleHeader};

/// Who changes a row: the transaction and its command, and how it waits
/// for another transaction holding the row.
#[derive(Debug, Clone)]
pub struct Writer {
    pub xid: Xid,
    pub cid: CommandId,
    pub waits: WaitLimits,
}

/// Existing blocks an insert tries before adding one.
const MAX_INSERT_CANDIDATES: usize = 8;
/// Blocks an insert adds before it gives up because other sessions kept
/// filling each one first (a bound; in practice the first one serves).
const INSERT_EXTENSIONS_MAX: u32 = 16;
/// Most blocks a bulk load adds at once (512 KiB).
const MAX_EXTEND_BY: u32 = 64;
/// Most tuples one multi-insert record carries (a page holds fewer).
pub const MULTI_INSERT_TUPLES_MAX: usize = u16::MAX as usize;

#[derive(Debug, Error)]
pub enum HeapError {
    #[error(transparent)]
    Storage(#[from] crate::storage::StorageError),
    #[error(transparent)]
    Buffer(#[from] BufferError),
    #[error(transparent)]
    Tuple(#[from] TupleError),
    #[error(transparent)]
    Txn(#[from] TxnError),
    #[error(transparent)]
    Wal(#[from] WalError),
    #[error("could not change a row of table \"{table}\": a concurrent transaction changed or deleted it since this statement's snapshot; retry the transaction")]
    ConcurrentUpdate { table: String },
    /// A wait for the transaction holding a row ended in a deadlock or
    /// lock_timeout.
    #[error("{source} (waiting for a row of table \"{table}\")")]
    Wait { table: String, source: WaitError },
    /// `NOWAIT` met a row another transaction holds (PostgreSQL's words).
    #[error("could not obtain lock on row in relation \"{table}\"")]
    RowLockNotAvailable { table: String },
    /// Other transactions held a row one after another for longer than a
    /// writer or locker waits (`lock::ROW_HOLDER_WAITS_MAX`).
    #[error("could not lock a row of table \"{table}\": {waits} transactions held it one after another while this one waited; retry the statement")]
    RowKeptBusy { table: String, waits: usize },
    #[error("could not find room for a row in table \"{table}\": other sessions filled each of the {attempts} pages this insert added first; retry the statement")]
    NoRoom { table: String, attempts: u32 },
    #[error("row {block}/{index} of table \"{table}\" is damaged: {what}")]
    Damaged {
        table: String,
        block: u32,
        index: u16,
        what: &'static str,
    },
}

impl HeapError {
    /// PostgreSQL's SQLSTATE for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            HeapError::Storage(e) => e.sqlstate(),
            HeapError::Buffer(e) => e.sqlstate(),
            HeapError::Tuple(e) => e.sqlstate(),
            HeapError::Txn(e) => e.sqlstate(),
            HeapError::Wal(e) => e.sqlstate(),
            // PostgreSQL's "could not serialize access due to concurrent
            // update".
            HeapError::ConcurrentUpdate { .. } => "40001",
            HeapError::Wait { source, .. } => source.sqlstate(),
            // lock_not_available, as PostgreSQL's NOWAIT.
            HeapError::RowLockNotAvailable { .. } | HeapError::RowKeptBusy { .. } => "55P03",
            // Room others kept taking: no PostgreSQL counterpart (its
            // insert waits for the extension lock instead).
            HeapError::NoRoom { .. } => "53000",
            HeapError::Damaged { .. } => "XX001",
        }
    }
}

/// What a heap operation needs to know about its table.
#[derive(Debug, Clone)]
pub struct HeapTable {
    pub name: String,
    pub rel: u32,
    pub types: Vec<ColumnType>,
    /// Percent of each page filled by inserts (10–100).
    pub fillfactor: u8,
}

/// A change to a heap page (see the module comment).
#[derive(Debug, Clone, PartialEq)]
pub enum PageChange<'a> {
    /// Formats a new page.
    Init,
    /// Adds a tuple; its ctid is set to where it lands.
    Insert { tuple: &'a [u8] },
    /// Marks tuple `index` deleted (or updated to `newer`) by `xmax`;
    /// `hot` if `newer` is a heap-only tuple on the same page (a HOT
    /// update).
    SetXmax {
        index: u16,
        xmax: Xid,
        cmax: CommandId,
        newer: Option<Tid>,
        hot: bool,
    },
    /// Forgets an `xmax` that means nothing any more (its deleter
    /// aborted, its lockers ended), so that later checks need not look it
    /// up.
    ClearXmax { index: u16 },
    /// Locks tuple `index`: `xmax` becomes a locker's id or a multi's,
    /// with the infomask's lock bits `bits` (`TupleHeader::lock_bits`).
    /// Changes no one's view of the tuple, so it leaves the page's
    /// all-visible flag (see `lock.rs`).
    Lock { index: u16, xmax: Xid, bits: u16 },
    /// Pruning (PostgreSQL's `heap_page_prune`, by an update that needs
    /// the room or by vacuum) and vacuum's freeing of line pointers, each
    /// list sorted: `redirected` roots of HOT chains point at the chain's
    /// first version still needed (`(root, to)`), `dead` line pointers
    /// keep their place with no storage until the index entries pointing
    /// at them are gone, and `unused` ones are free for reuse (heap-only
    /// tuples, which no index entry points at, and dead line pointers
    /// whose entries vacuum removed).
    Prune {
        redirected: &'a [(u16, u16)],
        dead: &'a [u16],
        unused: &'a [u16],
    },
    /// Every tuple is visible to everyone (vacuum).
    SetAllVisible,
}

/// What [`apply`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// The line pointer an `Insert` used.
    pub index: Option<u16>,
    /// The page was all-visible before: the map bit must be cleared.
    pub cleared_all_visible: bool,
    /// The page is all-visible after the change, as a frozen load's
    /// inserts leave it: the map bit must be set.
    pub set_all_visible: bool,
    /// Where the change's WAL record ends (0 until logged).
    pub lsn: Lsn,
}

/// `info` of each heap record kind.
const HEAP_INIT: u8 = 0;
const HEAP_INSERT: u8 = 1;
const HEAP_SET_XMAX: u8 = 2;
const HEAP_CLEAR_XMAX: u8 = 3;
/// Line pointers freed, the only list: what [`PageChange::Prune`] was
/// before HOT chains (read in WAL written then, never written now).
const HEAP_PRUNE_UNUSED: u8 = 4;
const HEAP_SET_ALL_VISIBLE: u8 = 5;
/// Several inserts on one page ([`apply_logged_multi`]).
const HEAP_MULTI_INSERT: u8 = 6;
/// Line pointers made dead, the only list (as `HEAP_PRUNE_UNUSED`).
const HEAP_PRUNE_DEAD: u8 = 7;
/// [`PageChange::Prune`]: redirected, dead and unused line pointers.
const HEAP_PRUNE: u8 = 8;
/// `SetXmax`'s byte saying what follows: no newer version, a newer one,
/// or a newer heap-only one on the page (HOT).
const SET_XMAX_NO_NEWER: u8 = 0;
const SET_XMAX_NEWER: u8 = 1;
const SET_XMAX_NEWER_HOT: u8 = 2;
/// [`PageChange::Lock`]: a row lock.
const HEAP_LOCK: u8 = 9;
/// First data byte of a heap record: the change cleared the page's
/// all-visible flag, so replay clears the map bit too.
const CLEARED_ALL_VISIBLE: u8 = 1;
/// First data byte of a multi-insert record: its tuples are frozen and
/// left the page all-visible (a frozen load's), so replay sets the flag
/// after them.
const SET_ALL_VISIBLE: u8 = 2;

impl PageChange<'_> {
    fn info(&self) -> u8 {
        match self {
            PageChange::Init => HEAP_INIT,
            PageChange::Insert { .. } => HEAP_INSERT,
            PageChange::SetXmax { .. } => HEAP_SET_XMAX,
            PageChange::ClearXmax { .. } => HEAP_CLEAR_XMAX,
            PageChange::Prune { .. } => HEAP_PRUNE,
            PageChange::SetAllVisible => HEAP_SET_ALL_VISIBLE,
            PageChange::Lock { .. } => HEAP_LOCK,
        }
    }

    /// Whether applying it clears the page's all-visible flag: every
    /// change but the one that sets it and those that hide nothing from
    /// anyone: a lock, and forgetting an xmax that meant nothing (vacuum
    /// forgets ended locks on pages it leaves all-visible).
    fn clears_all_visible(&self) -> bool {
        !matches!(
            self,
            PageChange::SetAllVisible | PageChange::Lock { .. } | PageChange::ClearXmax { .. }
        )
    }

    /// The record's data: the flag byte, then what replay needs to make
    /// the same change (an insert names the line pointer it used, which
    /// replay checks).
    fn encode(&self, applied: &Applied) -> Vec<u8> {
        let mut d = vec![if applied.cleared_all_visible {
            CLEARED_ALL_VISIBLE
        } else {
            0
        }];
        match self {
            PageChange::Init | PageChange::SetAllVisible => {}
            PageChange::Insert { tuple } => {
                d.extend_from_slice(&applied.index.unwrap_or(u16::MAX).to_le_bytes());
                d.extend_from_slice(tuple);
            }
            PageChange::SetXmax {
                index,
                xmax,
                cmax,
                newer,
                hot,
            } => {
                d.extend_from_slice(&index.to_le_bytes());
                d.extend_from_slice(&xmax.to_le_bytes());
                d.extend_from_slice(&cmax.to_le_bytes());
                if let Some(t) = newer {
                    d.push(if *hot {
                        SET_XMAX_NEWER_HOT
                    } else {
                        SET_XMAX_NEWER
                    });
                    d.extend_from_slice(&t.block.to_le_bytes());
                    d.extend_from_slice(&t.index.to_le_bytes());
                } else {
                    d.push(SET_XMAX_NO_NEWER);
                }
            }
            PageChange::ClearXmax { index } => d.extend_from_slice(&index.to_le_bytes()),
            PageChange::Lock { index, xmax, bits } => {
                d.extend_from_slice(&index.to_le_bytes());
                d.extend_from_slice(&xmax.to_le_bytes());
                d.extend_from_slice(&bits.to_le_bytes());
            }
            PageChange::Prune {
                redirected,
                dead,
                unused,
            } => {
                d.extend_from_slice(&(redirected.len() as u32).to_le_bytes());
                for (from, to) in *redirected {
                    d.extend_from_slice(&from.to_le_bytes());
                    d.extend_from_slice(&to.to_le_bytes());
                }
                for list in [dead, unused] {
                    d.extend_from_slice(&(list.len() as u32).to_le_bytes());
                    for i in *list {
                        d.extend_from_slice(&i.to_le_bytes());
                    }
                }
            }
        }
        d
    }
}

/// Applies `change` to heap page `block` of relation `rel` and logs it,
/// stamping the page with the record's end. The caller holds the page's
/// exclusive content lock (`modify_page`). `xid` is the transaction the
/// change is for (0 for vacuum's). `wal` is None for a relation that
/// skips the WAL (created by the running transaction, see the module
/// comment): the change is made and the page's `pd_lsn` left as it is.
pub fn apply_logged(
    wal: Option<&Wal>,
    page: &mut PageBytes,
    rel: u32,
    block: u32,
    xid: Xid,
    change: &PageChange,
) -> Result<Applied, WalError> {
    let old_lsn = page_lsn(page);
    let mut applied = apply(page, block, change);
    let Some(wal) = wal else {
        debug_assert_eq!(
            old_lsn, 0,
            "a page of a relation that skips the WAL was logged"
        );
        return Ok(applied);
    };
    let data = change.encode(&applied);
    applied.lsn = log_page_change(wal, page, rel, block, xid, change.info(), old_lsn, &data)?;
    Ok(applied)
}

/// Logs a change just made to heap page `block` of `rel` (whose LSN was
/// `old_lsn` before it) as one record of `info` and stamps the page with
/// the record's end, which it returns.
#[allow(clippy::too_many_arguments)]
fn log_page_change(
    wal: &Wal,
    page: &mut PageBytes,
    rel: u32,
    block: u32,
    xid: Xid,
    info: u8,
    old_lsn: Lsn,
    data: &[u8],
) -> Result<Lsn, WalError> {
    let lsn = wal.insert(
        Rmgr::Heap,
        info,
        xid,
        &[PageRef {
            force_image: false,
            tag: BlockTag {
                rel,
                fork: Fork::Main,
                block,
            },
            page,
            old_lsn,
        }],
        data,
    )?;
    set_page_lsn(page, lsn);
    Ok(lsn)
}

/// Inserts `tuples` into heap page `block` of relation `rel`, one
/// [`PageChange::Insert`] each, and logs them as one record
/// (`MULTI_INSERT`: PostgreSQL's heap_multi_insert), stamping the page
/// with its end: a bulk load logs a page's worth of tuples in one record
/// instead of one record (with its header and block reference) per
/// tuple. The caller holds the exclusive content lock and has checked
/// that every tuple fits. `indexes` receives the line pointer of each.
/// `wal` is as for [`apply_logged`]. The returned `index` is the first
/// tuple's.
///
/// With `frozen` the tuples are a frozen load's (xmin [`FROZEN_XID`],
/// for transaction `xid`, into a relation only it can see): a page they
/// start on empty, or one an earlier frozen load left all-visible, is
/// all-visible after them (`set_all_visible`), as PostgreSQL's
/// heap_multi_insert with `HEAP_INSERT_FROZEN`; one holding other
/// tuples is not.
#[allow(clippy::too_many_arguments)]
pub fn apply_logged_multi(
    wal: Option<&Wal>,
    page: &mut PageBytes,
    rel: u32,
    block: u32,
    xid: Xid,
    tuples: &[&[u8]],
    frozen: bool,
    indexes: &mut Vec<u16>,
) -> Result<Applied, WalError> {
    assert!(
        !tuples.is_empty() && tuples.len() <= MULTI_INSERT_TUPLES_MAX,
        "a multi-insert of {} tuples",
        tuples.len()
    );
    let xmin = if frozen { FROZEN_XID } else { xid };
    debug_assert!(
        tuples.iter().all(|t| TupleHeader::read(t).xmin == xmin),
        "one transaction's tuples, all frozen or none"
    );
    let old_lsn = page_lsn(page);
    let mut applied = apply_multi_insert(page, block, tuples.iter().copied(), frozen, indexes);
    let Some(wal) = wal else {
        debug_assert_eq!(
            old_lsn, 0,
            "a page of a relation that skips the WAL was logged"
        );
        return Ok(applied);
    };
    let data = encode_multi_insert(&applied, tuples, indexes);
    applied.lsn = log_page_change(
        wal,
        page,
        rel,
        block,
        xid,
        HEAP_MULTI_INSERT,
        old_lsn,
        &data,
    )?;
    Ok(applied)
}

/// The inserts of a multi-insert, made and replayed alike: each tuple
/// added (its line pointer pushed to `indexes`), and with `frozen` the
/// page's all-visible flag kept or set if the page was all-visible or
/// empty before (see [`apply_logged_multi`]).
fn apply_multi_insert<'t>(
    page: &mut PageBytes,
    block: u32,
    tuples: impl Iterator<Item = &'t [u8]>,
    frozen: bool,
    indexes: &mut Vec<u16>,
) -> Applied {
    let all_visible_after =
        frozen && (line_pointer_count(page) == 0 || page_flags(page) & PD_ALL_VISIBLE != 0);
    indexes.clear();
    let mut cleared_all_visible = false;
    for tuple in tuples {
        let one = apply(page, block, &PageChange::Insert { tuple });
        // Only the first insert can find the flag set.
        cleared_all_visible |= one.cleared_all_visible;
        indexes.push(one.index.expect("insert reports its index"));
    }
    if all_visible_after {
        // Under the same lock as the inserts: nobody sees the page
        // without its flag in between.
        apply(page, block, &PageChange::SetAllVisible);
    }
    Applied {
        index: indexes.first().copied(),
        cleared_all_visible: cleared_all_visible && !all_visible_after,
        set_all_visible: all_visible_after,
        lsn: 0,
    }
}

/// A multi-insert record's data: the flag byte, the number of tuples,
/// then each tuple's line pointer, length and bytes.
fn encode_multi_insert(applied: &Applied, tuples: &[&[u8]], indexes: &[u16]) -> Vec<u8> {
    debug_assert_eq!(tuples.len(), indexes.len());
    let bytes: usize = tuples.iter().map(|t| t.len() + 4).sum();
    let mut d = Vec::with_capacity(3 + bytes);
    let mut flags = 0;
    if applied.cleared_all_visible {
        flags |= CLEARED_ALL_VISIBLE;
    }
    if applied.set_all_visible {
        flags |= SET_ALL_VISIBLE;
    }
    d.push(flags);
    d.extend_from_slice(&(tuples.len() as u16).to_le_bytes());
    for (tuple, index) in tuples.iter().zip(indexes) {
        d.extend_from_slice(&index.to_le_bytes());
        d.extend_from_slice(&(tuple.len() as u16).to_le_bytes());
        d.extend_from_slice(tuple);
    }
    d
}

/// A multi-insert record's data, decoded: its flag byte and each tuple
/// with the line pointer it used.
struct LoggedMultiInsert<'a> {
    flags: u8,
    tuples: Vec<(u16, &'a [u8])>,
}

/// Decodes a multi-insert record's data. Every read is checked.
fn decode_multi_insert(data: &[u8]) -> Result<LoggedMultiInsert<'_>, &'static str> {
    const MALFORMED: &str = "malformed heap multi-insert record";
    let mut r = DataReader::new(data);
    let flags = r.u8().ok_or(MALFORMED)?;
    let count = r.u16().ok_or(MALFORMED)? as usize;
    if count == 0 {
        return Err(MALFORMED);
    }
    let mut tuples = Vec::with_capacity(count);
    for _ in 0..count {
        let index = r.u16().ok_or(MALFORMED)?;
        let len = r.u16().ok_or(MALFORMED)? as usize;
        let tuple = r.take(len).filter(|t| !t.is_empty()).ok_or(MALFORMED)?;
        tuples.push((index, tuple));
    }
    if !r.rest().is_empty() {
        return Err(MALFORMED);
    }
    Ok(LoggedMultiInsert { flags, tuples })
}

/// Replays a multi-insert record on page `block`: the same inserts, each
/// checked to land where it did, and the page's flag as it was logged.
fn redo_multi_insert(page: &mut PageBytes, block: u32, data: &[u8]) -> Result<(), &'static str> {
    let LoggedMultiInsert { flags, tuples } = decode_multi_insert(data)?;
    if is_new(page) {
        return Err("a heap insert into a page never formatted");
    }
    let need: usize = tuples
        .iter()
        .map(|(_, t)| t.len().next_multiple_of(MAX_ALIGN) + LINE_POINTER_SIZE)
        .sum();
    if free_space(page) < need {
        return Err("a heap multi-insert that does not fit its page");
    }
    // A frozen load's record says it left the page all-visible; one whose
    // frozen tuples joined other tuples' page says nothing, and replays
    // as any multi-insert (its inserts find no flag to clear).
    let frozen = flags & SET_ALL_VISIBLE != 0;
    let mut indexes = Vec::with_capacity(tuples.len());
    let applied = apply_multi_insert(
        page,
        block,
        tuples.iter().map(|&(_, t)| t),
        frozen,
        &mut indexes,
    );
    if tuples
        .iter()
        .zip(&indexes)
        .any(|(&(logged, _), &landed)| logged != landed)
    {
        return Err("a heap insert landed on another line pointer than logged");
    }
    if applied.cleared_all_visible != (flags & CLEARED_ALL_VISIBLE != 0) {
        return Err(
            "a heap change found the page's all-visible flag otherwise than when it was logged",
        );
    }
    if applied.set_all_visible != frozen {
        return Err("a frozen heap multi-insert found its page otherwise than when it was logged");
    }
    Ok(())
}

/// A heap record's data, decoded: what [`PageChange::encode`] wrote.
struct LoggedChange<'a> {
    /// The first data byte ([`CLEARED_ALL_VISIBLE`]).
    flags: u8,
    change: PageChange<'a>,
    /// The line pointer an insert used (replay checks it lands there).
    insert_index: Option<u16>,
}

/// The line pointer lists of a decoded prune record, which its change
/// borrows.
#[derive(Default)]
struct PruneLists {
    redirected: Vec<(u16, u16)>,
    dead: Vec<u16>,
    unused: Vec<u16>,
}

/// Decodes a heap record's data. A `Prune`'s lists are decoded into
/// `lists`, which the change borrows. Every read is checked: a malformed
/// record is an error, never a panic.
fn decode_change<'a>(
    info: u8,
    data: &'a [u8],
    lists: &'a mut PruneLists,
) -> Result<LoggedChange<'a>, &'static str> {
    const MALFORMED: &str = "malformed heap record";
    let mut r = DataReader::new(data);
    let flags = r.u8().ok_or(MALFORMED)?;
    let mut insert_index = None;
    let change = match info {
        HEAP_INIT => PageChange::Init,
        HEAP_INSERT => {
            insert_index = Some(r.u16().ok_or(MALFORMED)?);
            PageChange::Insert { tuple: r.rest() }
        }
        HEAP_SET_XMAX => {
            let index = r.u16().ok_or(MALFORMED)?;
            let xmax = r.u32().ok_or(MALFORMED)?;
            let cmax = r.u32().ok_or(MALFORMED)?;
            let what = r.u8().ok_or(MALFORMED)?;
            let newer = match what {
                SET_XMAX_NO_NEWER => None,
                SET_XMAX_NEWER | SET_XMAX_NEWER_HOT => Some(Tid {
                    block: r.u32().ok_or(MALFORMED)?,
                    index: r.u16().ok_or(MALFORMED)?,
                }),
                _ => return Err(MALFORMED),
            };
            PageChange::SetXmax {
                index,
                xmax,
                cmax,
                newer,
                hot: what == SET_XMAX_NEWER_HOT,
            }
        }
        HEAP_CLEAR_XMAX => PageChange::ClearXmax {
            index: r.u16().ok_or(MALFORMED)?,
        },
        HEAP_LOCK => {
            let index = r.u16().ok_or(MALFORMED)?;
            let xmax = r.u32().ok_or(MALFORMED)?;
            let bits = r.u16().ok_or(MALFORMED)?;
            let multi = bits & tuple::XMAX_IS_MULTI != 0;
            if xmax == INVALID_XID
                || bits & tuple::XMAX_LOCK_ONLY == 0
                || bits & !tuple::XMAX_LOCK_BITS != 0
                || (multi && bits & tuple::XMAX_LOCK_MODE != 0)
            {
                return Err(MALFORMED);
            }
            PageChange::Lock { index, xmax, bits }
        }
        HEAP_PRUNE | HEAP_PRUNE_UNUSED | HEAP_PRUNE_DEAD => {
            // Counts are checked against what is left before anything is
            // allocated: a damaged count must not ask for gigabytes.
            let offsets = |r: &mut DataReader, width: usize| {
                let n = r.u32().ok_or(MALFORMED)? as usize;
                if n.checked_mul(width)
                    .is_none_or(|bytes| bytes > r.remaining())
                {
                    return Err(MALFORMED);
                }
                Ok(n)
            };
            if info == HEAP_PRUNE {
                let n = offsets(&mut r, 4)?;
                lists.redirected = (0..n)
                    .map(|_| Ok((r.u16().ok_or(MALFORMED)?, r.u16().ok_or(MALFORMED)?)))
                    .collect::<Result<_, &str>>()?;
            }
            let list = |r: &mut DataReader| -> Result<Vec<u16>, &'static str> {
                let n = offsets(r, 2)?;
                (0..n).map(|_| r.u16().ok_or(MALFORMED)).collect()
            };
            match info {
                HEAP_PRUNE => {
                    lists.dead = list(&mut r)?;
                    lists.unused = list(&mut r)?;
                }
                HEAP_PRUNE_DEAD => lists.dead = list(&mut r)?,
                _ => lists.unused = list(&mut r)?,
            }
            let lists: &'a PruneLists = lists;
            PageChange::Prune {
                redirected: &lists.redirected,
                dead: &lists.dead,
                unused: &lists.unused,
            }
        }
        HEAP_SET_ALL_VISIBLE => PageChange::SetAllVisible,
        _ => return Err("unknown heap record kind"),
    };
    Ok(LoggedChange {
        flags,
        change,
        insert_index,
    })
}

/// Replays a heap record (`info`, `data`) on page `block`: the same
/// [`apply`] as the change it logged. Whether it cleared the page's
/// all-visible flag is the record's to say
/// ([`record_cleared_all_visible`]), and replay must agree. A record that
/// does not fit the page (replay has gone wrong) is an error naming what,
/// never a panic.
pub fn redo(page: &mut PageBytes, block: u32, info: u8, data: &[u8]) -> Result<(), &'static str> {
    if info == HEAP_MULTI_INSERT {
        return redo_multi_insert(page, block, data);
    }
    let mut lists = PruneLists::default();
    let logged = decode_change(info, data, &mut lists)?;
    let needs_item = |page: &PageBytes, index: u16| {
        item(page, index as usize)
            .map(|_| ())
            .ok_or("the tuple a heap record changes is not on the page")
    };
    match logged.change {
        PageChange::Init => {}
        PageChange::Insert { .. } if is_new(page) => {
            return Err("a heap insert into a page never formatted")
        }
        _ if is_new(page) => return Err("a heap change to a page never formatted"),
        PageChange::Insert { tuple } => {
            let need = tuple.len().next_multiple_of(MAX_ALIGN) + LINE_POINTER_SIZE;
            if tuple.is_empty() || free_space(page) < need {
                return Err("a heap insert that does not fit its page");
            }
        }
        PageChange::SetXmax { index, .. }
        | PageChange::ClearXmax { index }
        | PageChange::Lock { index, .. } => {
            needs_item(page, index)?;
        }
        PageChange::Prune {
            redirected,
            dead,
            unused,
        } => prune_fits(page, redirected, dead, unused)?,
        PageChange::SetAllVisible => {}
    }
    let applied = apply(page, block, &logged.change);
    if logged.insert_index.is_some() && applied.index != logged.insert_index {
        return Err("a heap insert landed on another line pointer than logged");
    }
    if applied.cleared_all_visible != (logged.flags & CLEARED_ALL_VISIBLE != 0) {
        return Err(
            "a heap change found the page's all-visible flag otherwise than when it was logged",
        );
    }
    Ok(())
}

/// True if the heap record with `data` cleared its page's all-visible
/// flag (so replay clears the map bit too, image or not).
pub fn record_cleared_all_visible(data: &[u8]) -> bool {
    data.first().is_some_and(|f| f & CLEARED_ALL_VISIBLE != 0)
}

/// A name for a heap record kind (`aiostore waldump`).
pub fn record_kind_name(info: u8) -> &'static str {
    match info {
        HEAP_INIT => "INIT_PAGE",
        HEAP_INSERT => "INSERT",
        HEAP_SET_XMAX => "SET_XMAX",
        HEAP_CLEAR_XMAX => "CLEAR_XMAX",
        HEAP_PRUNE => "PRUNE",
        HEAP_PRUNE_UNUSED => "PRUNE_UNUSED",
        HEAP_SET_ALL_VISIBLE => "SET_ALL_VISIBLE",
        HEAP_MULTI_INSERT => "MULTI_INSERT",
        HEAP_PRUNE_DEAD => "PRUNE_DEAD",
        HEAP_LOCK => "LOCK",
        _ => "UNKNOWN",
    }
}

/// Most line pointers of a prune record that [`describe`] lists.
const DESCRIBE_PRUNE_OFFSETS_MAX: usize = 16;

/// Describes a heap record for `aiostore waldump`: its kind and what its
/// data says, as pg_waldump's heap descriptions do (`INSERT off: 3`).
/// A record whose data does not decode is described as such, not refused.
pub fn describe(info: u8, data: &[u8]) -> String {
    let kind = record_kind_name(info);
    if info == HEAP_MULTI_INSERT {
        return match decode_multi_insert(data) {
            Ok(LoggedMultiInsert { flags, tuples }) => {
                let bytes: usize = tuples.iter().map(|(_, t)| t.len()).sum();
                let (first, last) = (tuples[0].0, tuples[tuples.len() - 1].0);
                let cleared = if flags & CLEARED_ALL_VISIBLE != 0 {
                    ", all-visible cleared"
                } else {
                    ""
                };
                let set = if flags & SET_ALL_VISIBLE != 0 {
                    ", frozen, all-visible set"
                } else {
                    ""
                };
                format!(
                    "{kind} ntuples: {}, off: {first}..{last}, len: {bytes}{cleared}{set}",
                    tuples.len()
                )
            }
            Err(what) => format!("{kind} ({what}: {} bytes)", data.len()),
        };
    }
    let mut lists = PruneLists::default();
    let logged = match decode_change(info, data, &mut lists) {
        Ok(logged) => logged,
        Err(what) => return format!("{kind} ({what}: info {info}, {} bytes)", data.len()),
    };
    let mut text = match logged.change {
        PageChange::Init | PageChange::SetAllVisible => kind.to_string(),
        PageChange::Insert { tuple } => format!(
            "{kind} off: {}, len: {}",
            logged.insert_index.unwrap_or(u16::MAX),
            tuple.len()
        ),
        PageChange::SetXmax {
            index,
            xmax,
            cmax,
            newer,
            hot,
        } => {
            let newer = newer.map_or(String::new(), |t| {
                let hot = if hot { ", hot" } else { "" };
                format!(", newer: ({},{}){hot}", t.block, t.index)
            });
            format!("{kind} off: {index}, xmax: {xmax}, cmax: {cmax}{newer}")
        }
        PageChange::ClearXmax { index } => format!("{kind} off: {index}"),
        PageChange::Lock { index, xmax, bits } => match tuple::Locker::of(xmax, bits) {
            tuple::Locker::One(_, mode) => {
                format!("{kind} off: {index}, xmax: {xmax}, {}", mode.clause())
            }
            _ => format!("{kind} off: {index}, multi: {xmax}"),
        },
        PageChange::Prune {
            redirected,
            dead,
            unused,
        } => {
            fn shown<T>(list: &[T], show: impl Fn(&T) -> String) -> String {
                let mut text: Vec<String> = list
                    .iter()
                    .take(DESCRIBE_PRUNE_OFFSETS_MAX)
                    .map(show)
                    .collect();
                if list.len() > DESCRIBE_PRUNE_OFFSETS_MAX {
                    text.push("…".into());
                }
                format!("{} [{}]", list.len(), text.join(", "))
            }
            let mut parts = Vec::new();
            if !redirected.is_empty() {
                let redirects = shown(redirected, |(from, to)| format!("{from}->{to}"));
                parts.push(format!("redirected: {redirects}"));
            }
            if !dead.is_empty() {
                parts.push(format!("dead: {}", shown(dead, u16::to_string)));
            }
            if !unused.is_empty() {
                parts.push(format!("unused: {}", shown(unused, u16::to_string)));
            }
            format!("{kind} {}", parts.join(", "))
        }
    };
    if logged.flags & CLEARED_ALL_VISIBLE != 0 {
        text.push_str(", all-visible cleared");
    }
    text
}

/// Whether a prune's lists fit `page`: each sorted without repeats and
/// apart from the others; a redirect from a used line pointer to a tuple;
/// a dead line pointer from a tuple, a redirect or a dead one; an unused
/// one from a tuple, a redirect or a dead one. Replay checks a record so
/// before it applies it, as pruning checks its own plan.
fn prune_fits(
    page: &PageBytes,
    redirected: &[(u16, u16)],
    dead: &[u16],
    unused: &[u16],
) -> Result<(), &'static str> {
    fn ascending_within(list: impl Iterator<Item = u16>, count: usize) -> bool {
        let mut last = None;
        list.into_iter().all(|i| {
            let ok = last.is_none_or(|l| l < i) && usize::from(i) < count;
            last = Some(i);
            ok
        })
    }
    let count = line_pointer_count(page);
    if !ascending_within(redirected.iter().map(|&(from, _)| from), count)
        || !ascending_within(dead.iter().copied(), count)
        || !ascending_within(unused.iter().copied(), count)
    {
        return Err("a prune record's line pointers are unsorted or past the page's");
    }
    let flags = |i: u16| line_pointer(page, usize::from(i)).map(|lp| lp.flags);
    let in_use = |i: u16| matches!(flags(i), Some(f) if f != LineFlags::Unused);
    let twice = redirected
        .iter()
        .any(|&(from, _)| dead.binary_search(&from).is_ok() || unused.binary_search(&from).is_ok())
        || dead.iter().any(|i| unused.binary_search(i).is_ok());
    if twice {
        return Err("a prune record names a line pointer twice");
    }
    let stays = |i: &u16| dead.binary_search(i).is_err() && unused.binary_search(i).is_err();
    if !redirected.iter().all(|&(from, to)| {
        in_use(from) && from != to && stays(&to) && item(page, usize::from(to)).is_some()
    }) {
        return Err("a prune record redirects to a line pointer holding no tuple");
    }
    if !dead.iter().chain(unused).all(|&i| in_use(i)) {
        return Err("a prune record frees a line pointer already unused");
    }
    Ok(())
}

/// Applies `change` to heap page `block`. The one place heap pages change;
/// the caller holds the exclusive content lock (`modify_page`).
pub fn apply(page: &mut PageBytes, block: u32, change: &PageChange) -> Applied {
    let flags = page_flags(page);
    let mut applied = Applied {
        index: None,
        cleared_all_visible: false,
        set_all_visible: false,
        lsn: 0,
    };
    if change.clears_all_visible() && flags & PD_ALL_VISIBLE != 0 {
        set_page_flags(page, flags & !PD_ALL_VISIBLE);
        applied.cleared_all_visible = true;
    }
    match change {
        PageChange::Init => init_page(page, 0),
        PageChange::Insert { tuple } => {
            let index = add_item(page, tuple).expect("caller checked the room");
            let t = item_mut(page, index).expect("just added");
            TupleHeader::write_ctid(
                t,
                Tid {
                    block,
                    index: index as u16,
                },
            );
            applied.index = Some(index as u16);
        }
        PageChange::SetXmax {
            index,
            xmax,
            cmax,
            newer,
            hot,
        } => {
            debug_assert!(
                !hot || newer.is_some_and(|t| t.block == block && t.index != *index),
                "a HOT update's newer version is another tuple of the page"
            );
            let t = item_mut(page, *index as usize).expect("caller checked the tuple");
            let mut h = TupleHeader::read(t);
            h.xmax = *xmax;
            h.cmax = *cmax;
            // A deletion replaces whatever locks the row had.
            h.infomask &= !(tuple::UPDATED | tuple::HOT_UPDATED | tuple::XMAX_LOCK_BITS);
            if let Some(tid) = newer {
                h.ctid = *tid;
                h.infomask |= tuple::UPDATED;
                if *hot {
                    h.infomask |= tuple::HOT_UPDATED;
                }
            }
            h.write(t);
        }
        PageChange::ClearXmax { index } => {
            let t = item_mut(page, *index as usize).expect("caller checked the tuple");
            let mut h = TupleHeader::read(t);
            h.xmax = INVALID_XID;
            h.cmax = 0;
            // A HOT update that aborted no longer links to its version,
            // which pruning then frees as no chain's.
            h.infomask &= !(tuple::UPDATED | tuple::HOT_UPDATED | tuple::XMAX_LOCK_BITS);
            h.ctid = Tid {
                block,
                index: *index,
            };
            h.write(t);
        }
        PageChange::Lock { index, xmax, bits } => {
            let t = item_mut(page, *index as usize).expect("caller checked the tuple");
            let mut h = TupleHeader::read(t);
            h.xmax = *xmax;
            h.cmax = 0;
            // A lock leaves no link to a newer version (one an aborted
            // update made is nothing: a HOT one's version is then freed
            // by pruning as no chain's, as after ClearXmax). A heap-only
            // tuple stays one.
            h.infomask =
                h.infomask & !(tuple::UPDATED | tuple::HOT_UPDATED | tuple::XMAX_LOCK_BITS) | bits;
            h.ctid = Tid {
                block,
                index: *index,
            };
            h.write(t);
            debug_assert!(h.deleter().is_none() && h.locker() != tuple::Locker::None);
        }
        PageChange::Prune {
            redirected,
            dead,
            unused,
        } => {
            debug_assert_eq!(prune_fits(page, redirected, dead, unused), Ok(()));
            prune_items(page, |i, _| {
                let i = i as u16;
                if let Ok(at) = redirected.binary_search_by_key(&i, |&(from, _)| from) {
                    LineFate::Redirect(redirected[at].1)
                } else if dead.binary_search(&i).is_ok() {
                    LineFate::Dead
                } else if unused.binary_search(&i).is_ok() {
                    LineFate::Unused
                } else {
                    LineFate::Keep
                }
            });
        }
        PageChange::SetAllVisible => set_page_flags(page, flags | PD_ALL_VISIBLE),
    }
    applied
}

/// Reads page `block` of map fork `fork` (free space or visibility) of
/// `rel`. A page that fails verification is zeroed (with the usual
/// warning) whatever `zero_damaged_pages` says, as PostgreSQL reads its
/// free-space map: both maps may always say less (an empty free-space
/// page offers no room, a zeroed visibility page says no page is
/// all-visible and vacuum sets the bits again), and one page torn by a
/// crash must not stop the table.
pub(crate) fn read_map_page(
    s: &mut BufferSession,
    rel: u32,
    fork: Fork,
    block: u32,
) -> Result<BufferId, BufferError> {
    debug_assert_ne!(fork, Fork::Main, "only map pages are zeroed on damage");
    let zero = std::mem::replace(&mut s.settings.zero_damaged_pages, true);
    let read = s.read_buffer(rel, fork, block);
    s.settings.zero_damaged_pages = zero;
    read
}

/// Visibility of tuples to one snapshot (PostgreSQL's
/// `HeapTupleSatisfiesMVCC`, without hint bits: the commit log is in
/// memory). Remembers the last transaction found committed, as
/// PostgreSQL's `TransactionIdDidCommit` cache does: the tuples of a page
/// mostly share their inserting transaction, and a committed one stays
/// committed, so a scan takes the commit log's lock about once per
/// transaction instead of once or twice per tuple.
pub struct Visibility<'a> {
    txn: &'a TxnManager,
    snap: &'a Snapshot,
    last_committed: Xid,
}

impl<'a> Visibility<'a> {
    pub fn new(txn: &'a TxnManager, snap: &'a Snapshot) -> Self {
        Visibility {
            txn,
            snap,
            last_committed: INVALID_XID,
        }
    }

    fn did_commit(&mut self, xid: Xid) -> bool {
        if xid == self.last_committed {
            return true;
        }
        let committed = self.txn.did_commit(xid);
        if committed {
            self.last_committed = xid;
        }
        committed
    }

    /// True if the tuple with header `h` is visible to the snapshot.
    pub fn is_visible(&mut self, h: &TupleHeader) -> bool {
        let snap = self.snap;
        let inserted = if Some(h.xmin) == snap.own {
            h.cmin < snap.command
        } else {
            !snap.is_running(h.xmin) && self.did_commit(h.xmin)
        };
        if !inserted {
            return false;
        }
        // A lock-only xmax deletes nothing.
        let Some(deleter) = h.deleter() else {
            return true;
        };
        if Some(deleter) == snap.own {
            // Deleted by a later command of ours: still visible to this one.
            return h.cmax >= snap.command;
        }
        snap.is_running(deleter) || !self.did_commit(deleter)
    }
}

/// Per-relation state shared by sessions.
#[derive(Default)]
struct RelState {
    /// Held while adding blocks to any fork of the relation.
    extension: Mutex<()>,
    /// Block inserts try first; `u32::MAX` for none.
    insert_block: AtomicU32,
    /// This process's summary of the free-space map.
    fsm: fsm::FsmSummary,
    /// The transaction that created the relation while it runs: its page
    /// changes skip the WAL ([`INVALID_XID`]: they are logged).
    wal_skipped_by: AtomicU32,
    /// A page change skipped the WAL: the relation's files are synced
    /// before its creator commits.
    skipped_changes: AtomicBool,
    /// Changes that cleared a page's `PD_ALL_VISIBLE`, counted before each
    /// looks at the page's map bit: a vacuum that sees the count unchanged
    /// from before its scan to after setting its bits knows that no flag
    /// it set went before its bit was set, without reading a page again.
    all_visible_cleared: AtomicU64,
    /// Times line pointers of dead tuples were freed for reuse, counted
    /// before they are: an index scan that found a tuple dead to everyone
    /// removes its entry only if the count has not moved since it copied
    /// the entry, so the TID cannot have gone to a new row meanwhile.
    line_pointers_freed: AtomicU64,
    /// The key-share lockers no-key updates of the relation's rows went
    /// on beside (`lock.rs`). Taken under a page's content lock, never
    /// the other way round.
    kept_locks: Mutex<lock::KeptLocks>,
}

/// See [`Heap::line_pointer_frees`].
pub struct LinePointerFrees(Arc<RelState>);

impl LinePointerFrees {
    pub fn count(&self) -> u64 {
        self.0.line_pointers_freed.load(Ordering::SeqCst)
    }
}

/// The heap access method of one database.
pub struct Heap {
    txn: Arc<TxnManager>,
    wal: Arc<Wal>,
    /// Read by every index batch and every write, by every session at
    /// once; written once per relation.
    rels: RwLock<IntMap<u32, Arc<RelState>>>,
}

/// Per-statement insert state: keeps the target block pinned across rows
/// (PostgreSQL's `BulkInsertState`), and for bulk loads a ring of buffers.
#[derive(Default)]
pub struct InsertState {
    current: Option<(BufferId, u32)>,
    strategy: Option<Strategy>,
    /// Blocks the last extension added (bulk loads extend by more each
    /// time).
    extended_by: u32,
    /// Blocks the last extension added that this load has not used yet,
    /// which it takes next without asking the free-space map (PostgreSQL
    /// 16's `next_free`/`last_free`): a bulk load fills one new page after
    /// another, and a map search at each was a tenth of its time. They are
    /// in the map too, for others (one may fill a page first: it is then
    /// found full and passed over).
    spare: std::ops::Range<u32>,
    /// A frozen load's transaction ([`InsertState::frozen_load`]);
    /// [`INVALID_XID`] for any other insert.
    frozen_by: Xid,
    /// Blocks the frozen load left all-visible whose map bits are not set
    /// yet: set together when the insert call ends, with one look at the
    /// map's size for all (a look per page was 3% of a load's time, in
    /// `stat` calls). Until then a page has its flag without its bit, as
    /// between vacuum's two steps.
    bits_to_set: Vec<u32>,
}

impl InsertState {
    /// For a bulk load: new pages cycle through a bulk-write ring instead
    /// of pushing the rest of the pool out.
    pub fn bulk(nbuffers: u32) -> InsertState {
        InsertState {
            current: None,
            strategy: Some(Strategy::new(StrategyKind::BulkWrite, nbuffers, 0)),
            extended_by: 0,
            spare: 0..0,
            frozen_by: INVALID_XID,
            bits_to_set: Vec::new(),
        }
    }

    /// For a frozen load (COPY FREEZE) by transaction `xid`, a bulk load
    /// whose tuples carry xmin [`FROZEN_XID`]: the pages it fills are
    /// made all-visible as it fills them (see the module comment). The
    /// relation must be one `xid` created or truncated, which nobody else
    /// can read before `xid` commits and whose files go if it aborts.
    pub fn frozen_load(nbuffers: u32, xid: Xid) -> InsertState {
        assert!(
            xid != INVALID_XID && xid != FROZEN_XID,
            "a frozen load by {xid}"
        );
        InsertState {
            frozen_by: xid,
            ..InsertState::bulk(nbuffers)
        }
    }

    /// Releases the pinned target block.
    pub fn finish(&mut self, s: &mut BufferSession) {
        if let Some((id, _)) = self.current.take() {
            s.release(id);
        }
    }
}

/// What vacuum did to one table.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct VacuumReport {
    pub pages: u32,
    /// Pages skipped because the map said all-visible.
    pub pages_skipped: u32,
    pub tuples_removed: u64,
    pub tuples_kept: u64,
    pub pages_set_all_visible: u32,
    /// Pages at the end of the table that hold no tuple (VACUUM tries to
    /// cut them off).
    pub empty_pages_at_end: u32,
    /// Pages cut off the end.
    pub pages_truncated: u32,
    /// Dead tuples found but left in place, when vacuum was asked to
    /// defer their removal (a table with indexes: their entries go first,
    /// then [`Heap::remove_dead`] frees the line pointers).
    #[serde(skip)]
    pub dead: Vec<Tid>,
}

/// What a scan callback wants next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanControl {
    Continue,
    Stop,
}

/// Figures of one scan, for EXPLAIN.
#[derive(Debug, Clone, Copy, Default)]
pub struct ScanStats {
    pub stream: StreamStats,
}

/// Figures of the heap side of an index scan, for EXPLAIN.
#[derive(Debug, Clone, Copy, Default)]
pub struct FetchStats {
    /// Tuples looked up by TID.
    pub fetches: u64,
    /// Of those, the ones visible to the snapshot.
    pub visible: u64,
    /// Heap pages pinned (a run of TIDs on one page pins it once).
    pub pages: u64,
}

impl FetchStats {
    pub fn add(&mut self, other: &FetchStats) {
        self.fetches += other.fetches;
        self.visible += other.visible;
        self.pages += other.pages;
    }
}

/// Tuples of one table looked up by TID, as an index scan does: the page
/// of the last TID stays pinned, so that TIDs one after another on a page
/// pin it once (PostgreSQL keeps the heap page of the previous tuple
/// pinned the same way).
pub struct HeapFetch {
    rel: u32,
    /// The page pinned, and its block.
    pinned: Option<(u32, BufferId)>,
    /// The table's size when last looked at: a TID beyond it (a page
    /// truncated away by vacuum after the index gave the TID) is no tuple.
    nblocks: u32,
    /// [`Visibility`]'s last committed transaction, kept from one fetch
    /// to the next as a scan keeps it from one tuple to the next.
    last_committed: Xid,
    /// The oldest snapshot's horizon, taken when a tuple the snapshot
    /// does not see is first met, until [`HeapFetch::release`]: an older
    /// one only finds fewer tuples dead to everyone.
    oldest: Option<Xid>,
    pub stats: FetchStats,
}

impl HeapFetch {
    pub fn new(table: &HeapTable) -> HeapFetch {
        HeapFetch {
            rel: table.rel,
            pinned: None,
            nblocks: 0,
            last_committed: INVALID_XID,
            oldest: None,
            stats: FetchStats::default(),
        }
    }

    /// Calls `f(k, index, tuple)` for each line pointer `items[k]` of page
    /// `block` (an index entry's TID: the root of a HOT chain) whose chain
    /// holds a version `snap` sees, at line pointer `index`, all under one
    /// shared content lock (`f` must not touch the pool): one lock and one
    /// visibility set-up for all of them (an index scan on data in key
    /// order finds tens of its rows on each page). A snapshot sees at most
    /// one version of a chain. Calls `dead(k)` for each whose every
    /// version is dead to every snapshot there is or will be, so that the
    /// caller may remove the index entry that led to it. Returns how many
    /// were visible; none if the table has no such page (any more).
    ///
    /// An index scan drops its leaf page before it fetches (its batch is
    /// a copy), so vacuum may meanwhile remove the entry, free the line
    /// pointer and let a new tuple take it. That tuple was inserted after
    /// the vacuum, which ran after the scan's snapshot was taken (vacuum
    /// removes only what every snapshot sees as dead), so the snapshot
    /// never sees it: checking visibility is enough, as PostgreSQL
    /// reasons for MVCC scans that do not hold the leaf page's pin. Nor is
    /// such a tuple dead to everyone while this scan's snapshot stands.
    #[allow(clippy::too_many_arguments)]
    pub fn fetch_on_page(
        &mut self,
        heap: &Heap,
        s: &mut BufferSession,
        block: u32,
        items: impl ExactSizeIterator<Item = u16>,
        snap: &Snapshot,
        mut f: impl FnMut(usize, u16, &[u8]),
        mut dead: impl FnMut(usize),
    ) -> Result<usize, HeapError> {
        self.stats.fetches += items.len() as u64;
        let Some(id) = self.pin(s, block)? else {
            return Ok(0);
        };
        let mut visibility = Visibility {
            last_committed: self.last_committed,
            ..Visibility::new(&heap.txn, snap)
        };
        let oldest = &mut self.oldest;
        let visible = s.with_page(id, |page| {
            let all_visible = page_flags(page) & PD_ALL_VISIBLE != 0;
            let mut visible = 0;
            for (k, root) in items.enumerate() {
                let mut all_dead = true;
                let end = hot::walk_chain(page, block, root as usize, |index, h, t| {
                    if all_visible || visibility.is_visible(h) {
                        f(k, index, t);
                        visible += 1;
                        return ControlFlow::Break(());
                    }
                    if all_dead {
                        let oldest = *oldest.get_or_insert_with(|| heap.txn.oldest_xmin());
                        all_dead = dead_to_everyone(&heap.txn, oldest, h);
                    }
                    ControlFlow::Continue(())
                });
                match end {
                    hot::ChainEnd::Dead => dead(k),
                    hot::ChainEnd::Ended if all_dead => dead(k),
                    _ => {}
                }
            }
            visible
        });
        self.last_committed = visibility.last_committed;
        self.stats.visible += visible as u64;
        Ok(visible)
    }

    /// The buffer of page `block`, pinned (kept from the last fetch if it
    /// was the same page); None if the table has no such page.
    fn pin(&mut self, s: &mut BufferSession, block: u32) -> Result<Option<BufferId>, HeapError> {
        if let Some((pinned, id)) = self.pinned {
            if pinned == block {
                return Ok(Some(id));
            }
        }
        self.unpin(s);
        if block >= self.nblocks {
            self.nblocks = s.pool().relation(self.rel).nblocks(Fork::Main)?;
            if block >= self.nblocks {
                return Ok(None);
            }
        }
        let id = s.read_buffer(self.rel, Fork::Main, block)?;
        self.stats.pages += 1;
        self.pinned = Some((block, id));
        Ok(Some(id))
    }

    /// Takes `id`, a pinned buffer of block `block` (read ahead by the
    /// caller's read stream), as the page later fetches of TIDs on it
    /// use, giving back the page pinned before.
    pub fn adopt(&mut self, s: &mut BufferSession, block: u32, id: BufferId) {
        debug_assert_eq!(
            s.pool().tag(id).map(|t| (t.rel, t.block)),
            Some((self.rel, block)),
            "a buffer adopted for another page"
        );
        self.unpin(s);
        self.stats.pages += 1;
        self.pinned = Some((block, id));
    }

    /// Gives back the pinned page (between batches, and at the end), and
    /// forgets the horizon: the next tuple dead to everyone is judged by
    /// a newer one (a kept plan's scan lives across statements).
    pub fn release(&mut self, s: &mut BufferSession) {
        self.oldest = None;
        self.unpin(s);
    }

    /// Gives back the pinned page.
    fn unpin(&mut self, s: &mut BufferSession) {
        if let Some((_, id)) = self.pinned.take() {
            s.release(id);
        }
    }
}

/// Pins a scan's read stream leaves to whoever pulls it, who may change
/// the rows between pulls: an UPDATE holds its insertion target page,
/// the page of the row it deletes, and a visibility-map page of each.
pub const SCAN_PINS_RESERVED: usize = 4;

/// The blocks a sequential scan asks its read stream for, in order.
type ScanBlocks = Box<dyn FnMut(&mut u32) -> Next + Send>;

/// A sequential scan of a heap table, pulled a page at a time: the
/// executor's scan node asks for the next page's visible tuples when it
/// needs them, and a scan that is not pulled any more (a LIMIT reached)
/// reads no further than its stream's look-ahead. The table's size is
/// taken when the scan begins: rows added after it are not the
/// statement's to see anyway.
pub struct HeapScan {
    rel: u32,
    stream: ReadStream<u32, ScanBlocks>,
    /// A page the caller stopped in the middle of: still pinned, with the
    /// line pointer to go on from.
    paused: Option<(BufferId, u32, usize)>,
}

impl HeapScan {
    /// Begins a scan of `table` through a sequential read stream with a
    /// bulk-read ring.
    pub fn begin(
        s: &mut BufferSession,
        table: &HeapTable,
        limits: StreamLimits,
    ) -> Result<HeapScan, HeapError> {
        let nblocks = s.pool().relation(table.rel).nblocks(Fork::Main)?;
        let mut next = 0u32;
        let blocks: ScanBlocks = Box::new(move |data: &mut u32| {
            if next < nblocks {
                *data = next;
                next += 1;
                Next::Block(*data)
            } else {
                Next::End
            }
        });
        Ok(Self::over(s, table, limits, true, blocks))
    }

    /// Begins a scan of the pages `blocks` of `table` only (ascending, as
    /// ANALYZE's sample of blocks): read ahead through the same kind of
    /// stream, combining neighbours, but not flagged sequential, since it
    /// skips.
    pub fn begin_blocks(
        s: &mut BufferSession,
        table: &HeapTable,
        limits: StreamLimits,
        blocks: Vec<u32>,
    ) -> HeapScan {
        assert!(
            blocks.windows(2).all(|w| w[0] < w[1]),
            "a scan of some blocks takes them in ascending order"
        );
        let mut blocks = blocks.into_iter();
        let blocks: ScanBlocks = Box::new(move |data: &mut u32| match blocks.next() {
            Some(block) => {
                *data = block;
                Next::Block(block)
            }
            None => Next::End,
        });
        Self::over(s, table, limits, false, blocks)
    }

    fn over(
        s: &mut BufferSession,
        table: &HeapTable,
        limits: StreamLimits,
        sequential: bool,
        blocks: ScanBlocks,
    ) -> HeapScan {
        let look_ahead = limits.look_ahead_blocks(false, s.settings.io_combine_limit);
        let strategy = Strategy::new(StrategyKind::BulkRead, s.pool().nbuffers(), look_ahead);
        let stream = ReadStream::begin(
            s,
            table.rel,
            Fork::Main,
            StreamFlags {
                sequential,
                pins_reserved: SCAN_PINS_RESERVED,
                ..Default::default()
            },
            limits,
            Some(strategy),
            blocks,
        );
        HeapScan {
            rel: table.rel,
            stream,
            paused: None,
        }
    }

    /// Calls `f` with each tuple of the next page visible to `snap` (or of
    /// the page it paused in, from where it paused), under the page's
    /// shared content lock: `f` must copy what it needs and not touch the
    /// pool. When `f` answers [`ScanControl::Stop`] the scan pauses after
    /// that tuple, keeping the page pinned (not locked), and the next call
    /// goes on from there: a LIMIT above the scan takes no more rows than
    /// it returns. Returns false once the table is done.
    pub fn next_page(
        &mut self,
        heap: &Heap,
        s: &mut BufferSession,
        snap: &Snapshot,
        f: impl FnMut(Tid, &[u8]) -> ScanControl,
    ) -> Result<bool, HeapError> {
        let mut visibility = Visibility::new(&heap.txn, snap);
        self.next_page_where(s, |h| visibility.is_visible(h), f)
    }

    /// Calls `f(block, page)` with the next page whole, under its shared
    /// lock; false once the table is done. (Not for a scan that paused in
    /// a page.)
    fn next_whole_page(
        &mut self,
        s: &mut BufferSession,
        f: impl FnOnce(u32, &PageBytes),
    ) -> Result<bool, HeapError> {
        debug_assert!(self.paused.is_none(), "a whole page after a paused one");
        let Some((id, block)) = self.stream.next_buffer(s)? else {
            return Ok(false);
        };
        debug_assert_eq!(
            s.pool().tag(id).map(|t| (t.rel, t.block)),
            Some((self.rel, block)),
            "a scan's stream read another page"
        );
        s.with_page(id, |page| f(block, page));
        s.release(id);
        Ok(true)
    }

    /// [`HeapScan::next_page`] with the tuples `keep` says.
    fn next_page_where(
        &mut self,
        s: &mut BufferSession,
        mut keep: impl FnMut(&TupleHeader) -> bool,
        mut f: impl FnMut(Tid, &[u8]) -> ScanControl,
    ) -> Result<bool, HeapError> {
        let (id, block, from) = match self.paused.take() {
            Some(paused) => paused,
            None => match self.stream.next_buffer(s)? {
                Some((id, block)) => (id, block, 0),
                None => return Ok(false),
            },
        };
        debug_assert_eq!(
            s.pool().tag(id).map(|t| t.rel),
            Some(self.rel),
            "a scan's stream read another relation"
        );
        let stopped_after = s.with_page(id, |page| {
            visit_page_tuples(
                page,
                block,
                from..line_pointer_count(page),
                &mut keep,
                &mut f,
            )
        });
        match stopped_after {
            Some(index) => self.paused = Some((id, block, index + 1)),
            None => s.release(id),
        }
        Ok(true)
    }

    /// Ends the scan (whatever its stream read ahead is given back) and
    /// returns its figures.
    pub fn end(mut self, s: &mut BufferSession) -> ScanStats {
        if let Some((id, _, _)) = self.paused.take() {
            s.release(id);
        }
        ScanStats {
            stream: self.stream.end(s),
        }
    }
}

/// Calls `f` with each tuple of heap page `page` (block `block`) at the
/// line pointers `indexes` (ascending) that the page's all-visible flag
/// or `keep` lets through, and stops after the tuple `f` answers
/// [`ScanControl::Stop`] for, returning its line pointer. The one loop by
/// which scans read a page's tuples (sequential and bitmap heap scans), so
/// that they agree on which tuples a snapshot sees. A line pointer beyond
/// the page's is no tuple. Runs under the page's shared content lock.
pub(crate) fn visit_page_tuples(
    page: &PageBytes,
    block: u32,
    indexes: impl Iterator<Item = usize>,
    mut keep: impl FnMut(&TupleHeader) -> bool,
    mut f: impl FnMut(Tid, &[u8]) -> ScanControl,
) -> Option<usize> {
    let all_visible = page_flags(page) & PD_ALL_VISIBLE != 0;
    let mut last = None;
    for index in indexes {
        debug_assert!(last.is_none_or(|l| l < index), "line pointers out of order");
        last = Some(index);
        let Some(t) = item(page, index) else { continue };
        if !all_visible && !keep(&TupleHeader::read(t)) {
            continue;
        }
        let tid = Tid {
            block,
            index: u16::try_from(index).expect("a page's line pointer fits 16 bits"),
        };
        if f(tid, t) == ScanControl::Stop {
            return Some(index);
        }
    }
    None
}

/// As [`visit_page_tuples`], for the TIDs an index gave, `roots`: calls
/// `f` with the version of each one's HOT chain that `keep` says (the
/// first: a snapshot sees at most one version of a row), at the version's
/// own TID. Returns the root it stopped after.
pub(crate) fn visit_page_chains(
    page: &PageBytes,
    block: u32,
    roots: impl Iterator<Item = usize>,
    mut keep: impl FnMut(&TupleHeader) -> bool,
    mut f: impl FnMut(Tid, &[u8]) -> ScanControl,
) -> Option<usize> {
    let all_visible = page_flags(page) & PD_ALL_VISIBLE != 0;
    let mut last = None;
    for root in roots {
        debug_assert!(last.is_none_or(|l| l < root), "line pointers out of order");
        last = Some(root);
        let mut stop = false;
        hot::walk_chain(page, block, root, |index, h, t| {
            if !all_visible && !keep(h) {
                return ControlFlow::Continue(());
            }
            stop = f(Tid { block, index }, t) == ScanControl::Stop;
            ControlFlow::Break(())
        });
        if stop {
            return Some(root);
        }
    }
    None
}

/// Dead to every snapshot there is or will be: inserted by an aborted
/// transaction, or deleted by one that committed before the oldest
/// snapshot's horizon `oldest` (what vacuum removes). A locked row is not
/// deleted, whoever locked it.
fn dead_to_everyone(txn: &TxnManager, oldest: Xid, h: &TupleHeader) -> bool {
    txn.status(h.xmin) == XidStatus::Aborted
        || h.deleter()
            .is_some_and(|deleter| deleter < oldest && txn.did_commit(deleter))
}

/// What vacuum changes on one page.
#[derive(Default)]
struct PagePlan {
    /// The pruning of its HOT chains and other dead tuples; for a table
    /// without indexes, dead line pointers freed too.
    prune: hot::PrunePlan,
    /// Dead line pointers whose index entries go first, their line
    /// pointers later (see [`VacuumReport::dead`]): those this pruning
    /// leaves and those an earlier one left.
    deferred: Vec<u16>,
    clear_xmax: Vec<u16>,
    set_all_visible: bool,
    /// Tuples that stay.
    kept: u64,
    /// Row versions whose storage or line pointer goes: the tuples pruned
    /// now, and the dead line pointers of those pruned before.
    removed: u64,
}

impl PagePlan {
    fn changes_page(&self) -> bool {
        !self.prune.is_empty() || !self.clear_xmax.is_empty() || self.set_all_visible
    }
}

/// What an index entry's line pointer holds ([`Heap::chain_at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineAt {
    /// The root of a HOT chain, whose versions were visited.
    Versions,
    /// A chain dead to everyone was pruned from here.
    Dead,
    /// Nothing: unused, past the page's end, or a heap-only tuple (the
    /// line pointer was reused since the entry was made).
    Nothing,
}

/// What `try_delete` found under the page lock.
enum RowState {
    /// Decided: `Deleted` means the row was free and is now marked.
    Done(DeleteOutcome),
    /// Held by a running transaction: wait for it and look again.
    Wait(Xid),
}

/// What [`Heap::try_delete`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// The row is now deleted (or updated) by this transaction.
    Deleted,
    /// This transaction had deleted it already (an earlier command).
    AlreadyOurs,
    /// Transaction `by` deleted it, or updated it to `newer`, and
    /// committed; nothing was changed.
    Changed { by: Xid, newer: Option<Tid> },
}

impl Heap {
    pub fn new(txn: Arc<TxnManager>, wal: Arc<Wal>) -> Heap {
        Heap {
            txn,
            wal,
            rels: RwLock::new(IntMap::default()),
        }
    }

    pub fn wal(&self) -> &Arc<Wal> {
        &self.wal
    }

    fn rel_state(&self, rel: u32) -> Arc<RelState> {
        if let Some(rs) = self.rels.read().get(&rel) {
            return Arc::clone(rs);
        }
        Arc::clone(self.rels.write().entry(rel).or_insert_with(|| {
            Arc::new(RelState {
                insert_block: AtomicU32::new(u32::MAX),
                ..Default::default()
            })
        }))
    }

    /// Forgets a dropped relation's state.
    pub fn forget(&self, rel: u32) {
        self.rels.write().remove(&rel);
    }

    /// Page changes to `rel`, just created by transaction `xid`, skip the
    /// WAL until [`Heap::end_wal_skip`] (or the relation is forgotten,
    /// after the transaction aborted and its files went).
    pub fn skip_wal(&self, rel: u32, xid: Xid) {
        let rs = self.rel_state(rel);
        let was = rs.wal_skipped_by.swap(xid, Ordering::SeqCst);
        assert_eq!(
            was, INVALID_XID,
            "relation {rel} skips the WAL for one transaction"
        );
        debug_assert!(!rs.skipped_changes.load(Ordering::SeqCst));
    }

    /// Ends the WAL skip of `rel` as its creator `xid` commits, before the
    /// commit is logged: if any page change skipped the WAL, every dirty
    /// page of the relation (every fork) is written and its files synced,
    /// so that no commit record is ever durable without the pages it makes
    /// visible. Later changes are logged. Returns whether files were
    /// synced (then the caller syncs their directory, which holds the
    /// files' new names).
    pub fn end_wal_skip(
        &self,
        s: &mut BufferSession,
        rel: u32,
        xid: Xid,
    ) -> Result<bool, HeapError> {
        let rs = self.rel_state(rel);
        assert_eq!(
            rs.wal_skipped_by.load(Ordering::SeqCst),
            xid,
            "relation {rel} ends a WAL skip it did not start"
        );
        let synced = rs.skipped_changes.load(Ordering::SeqCst);
        if synced {
            s.flush_relation(rel)?;
            let relation = s.pool().relation(rel);
            for fork in Fork::ALL {
                if fork == Fork::Main || relation.exists(fork) {
                    relation.fsync(fork)?;
                }
            }
        }
        // Nobody else sees the relation yet, so no change can come between
        // the sync and the moment changes are logged again.
        rs.skipped_changes.store(false, Ordering::SeqCst);
        rs.wal_skipped_by.store(INVALID_XID, Ordering::SeqCst);
        Ok(synced)
    }

    /// Where a change by `xid` to a page of the relation of `rs` is
    /// logged: None while the relation skips the WAL, which only its
    /// creator's changes may do (anyone else's would be lost by a crash).
    fn page_wal(&self, rs: &RelState, xid: Xid) -> Option<&Wal> {
        match rs.wal_skipped_by.load(Ordering::SeqCst) {
            INVALID_XID => Some(&self.wal),
            creator => {
                assert_eq!(
                    creator, xid,
                    "a change by another transaction than the creator of a relation that skips the WAL"
                );
                rs.skipped_changes.store(true, Ordering::SeqCst);
                None
            }
        }
    }

    /// Where a change to the visibility map of the relation of `rs` is
    /// logged: None while the relation skips the WAL, as its heap pages
    /// do (the commit syncs the map fork with the rest; a map page changed
    /// both ways could lose an unlogged change to a logged change's image
    /// in replay).
    fn map_wal(&self, rs: &RelState) -> Option<&Wal> {
        if rs.wal_skipped_by.load(Ordering::SeqCst) == INVALID_XID {
            return Some(&self.wal);
        }
        rs.skipped_changes.store(true, Ordering::SeqCst);
        None
    }

    /// Brings the map bit of heap page `block` in line with what an insert
    /// did to the page's flag: cleared at once if it found the page
    /// all-visible; if a frozen load left it all-visible, to be set by
    /// [`Heap::set_loaded_bits`] before the insert call returns.
    fn insert_map_bit(
        &self,
        s: &mut BufferSession,
        state: &mut InsertState,
        rel: u32,
        block: u32,
        applied: Applied,
    ) -> Result<(), HeapError> {
        if !applied.set_all_visible {
            return self.clear_vm_bit(s, rel, block, applied);
        }
        debug_assert!(!applied.cleared_all_visible, "a flag both set and cleared");
        debug_assert!(
            state.frozen_by != INVALID_XID,
            "only a frozen load sets flags"
        );
        if state.bits_to_set.last() != Some(&block) {
            state.bits_to_set.push(block);
        }
        Ok(())
    }

    /// Sets the map bits of the pages a frozen load left all-visible
    /// (their flags set under their locks first, as vacuum sets the flag
    /// before the bit; the extension lock taken as vacuum takes it, for a
    /// map page the bits may need added).
    fn set_loaded_bits(
        &self,
        s: &mut BufferSession,
        rel: u32,
        state: &mut InsertState,
    ) -> Result<(), HeapError> {
        if state.bits_to_set.is_empty() {
            return Ok(());
        }
        let rs = self.rel_state(rel);
        let _extending = rs.extension.lock();
        vm::set_all_visible(s, self.map_wal(&rs), rel, &state.bits_to_set)?;
        state.bits_to_set.clear();
        Ok(())
    }

    /// Clears the map bit after a change found the page all-visible.
    fn clear_vm_bit(
        &self,
        s: &mut BufferSession,
        rel: u32,
        block: u32,
        applied: Applied,
    ) -> Result<(), HeapError> {
        if applied.cleared_all_visible {
            let rs = self.rel_state(rel);
            rs.all_visible_cleared.fetch_add(1, Ordering::SeqCst);
            if !vm::covers(s, rel, block)? {
                // No map page to look at under its lock: a vacuum adds
                // map pages and sets bits under the extension lock, so
                // taking it orders this change (counted above) before
                // the vacuum's second reading of the count, or shows the
                // page it added.
                let _ordered = rs.extension.lock();
                if !vm::covers(s, rel, block)? {
                    return Ok(());
                }
            }
            vm::clear(s, self.map_wal(&rs), rel, &[block])?;
        }
        Ok(())
    }

    /// Inserts an encoded tuple, returning where it went.
    pub fn insert(
        &self,
        s: &mut BufferSession,
        table: &HeapTable,
        tuple: &[u8],
        state: &mut InsertState,
    ) -> Result<Tid, HeapError> {
        for _ in 0..INSERT_EXTENSIONS_MAX {
            if let Some((tid, placed)) = self.insert_once(s, table, &[tuple], state, None)? {
                debug_assert_eq!(placed, 1);
                self.set_loaded_bits(s, table.rel, state)?;
                return Ok(tid);
            }
        }
        Err(HeapError::NoRoom {
            table: table.name.clone(),
            attempts: INSERT_EXTENSIONS_MAX,
        })
    }

    /// Inserts `tuple`, a new version of the row at `old`, on `old`'s
    /// page if it fits there, as PostgreSQL's heap_update does (what a
    /// fillfactor below 100 leaves free is for this), pruning the page of
    /// tuples dead to everyone first if it does not: a row updated again
    /// and again then keeps to its page instead of spreading its versions
    /// over the table until the next vacuum. Elsewhere as [`Heap::insert`]
    /// if it still does not fit.
    ///
    /// With `hot_allowed` (the update changed no indexed column) a version
    /// put on `old`'s page is a heap-only tuple (see `hot.rs`): the second
    /// value returned says so, and the caller then gives it no index
    /// entries and marks `old` HOT-updated. `tuple`'s heap-only flag is
    /// set to match.
    pub fn insert_version(
        &self,
        s: &mut BufferSession,
        table: &HeapTable,
        tuple: &mut [u8],
        state: &mut InsertState,
        old: Tid,
        hot_allowed: bool,
    ) -> Result<(Tid, bool), HeapError> {
        let rs = self.rel_state(table.rel);
        let xid = TupleHeader::read(tuple).xmin;
        let (wal, rel, block) = (self.page_wal(&rs, xid), table.rel, old.block);
        let need = tuple.len().next_multiple_of(MAX_ALIGN) + LINE_POINTER_SIZE;
        let held = matches!(state.current, Some((_, b)) if b == block);
        let id = match state.current {
            Some((id, _)) if held => id,
            _ => s.read_buffer(table.rel, Fork::Main, block)?,
        };
        let txn = &self.txn;
        let placed = s.modify_page(id, |page| {
            let mut pruned = None;
            if free_space(page) < need {
                let oldest = txn.oldest_xmin();
                let plan = hot::plan_prune(txn, oldest, page, block, hot::DeadRoots::Dead);
                if plan.is_empty() {
                    return Ok((pruned, None));
                }
                pruned = Some(apply_logged(wal, page, rel, block, 0, &plan.change())?);
                if free_space(page) < need {
                    return Ok((pruned, None));
                }
            }
            TupleHeader::set_heap_only(tuple, hot_allowed);
            let change = PageChange::Insert { tuple };
            let inserted = apply_logged(wal, page, rel, block, xid, &change)?;
            Ok::<_, WalError>((pruned, Some(inserted)))
        });
        if !held {
            s.release(id);
        }
        let (pruned, inserted) = placed?;
        if let Some(pruned) = pruned {
            self.clear_vm_bit(s, rel, block, pruned)?;
        }
        match inserted {
            Some(applied) => {
                self.clear_vm_bit(s, rel, block, applied)?;
                let index = applied.index.expect("insert reports its index");
                Ok((Tid { block, index }, hot_allowed))
            }
            None => {
                // Another page: the indexes must find it.
                TupleHeader::set_heap_only(tuple, false);
                Ok((self.insert(s, table, tuple, state)?, false))
            }
        }
    }

    /// Inserts encoded tuples of one transaction as a bulk load does
    /// (COPY; PostgreSQL's heap_multi_insert): as many as fit go onto a
    /// page together, under one lock and with one WAL record per page,
    /// instead of one lock and one record per tuple. `tids` receives
    /// where each went, in order (for index entries).
    pub fn insert_batch(
        &self,
        s: &mut BufferSession,
        table: &HeapTable,
        tuples: &[&[u8]],
        state: &mut InsertState,
        tids: &mut Vec<Tid>,
    ) -> Result<(), HeapError> {
        let mut done = 0;
        let mut tries_without_room = 0;
        while done < tuples.len() {
            match self.insert_once(s, table, &tuples[done..], state, Some(tids))? {
                Some((_, placed)) => {
                    debug_assert!(placed >= 1 && done + placed <= tuples.len());
                    done += placed;
                    tries_without_room = 0;
                }
                None => {
                    tries_without_room += 1;
                    if tries_without_room >= INSERT_EXTENSIONS_MAX {
                        return Err(HeapError::NoRoom {
                            table: table.name.clone(),
                            attempts: INSERT_EXTENSIONS_MAX,
                        });
                    }
                }
            }
        }
        self.set_loaded_bits(s, table.rel, state)
    }

    /// One try at inserting `tuples` (at least one): puts the first, and
    /// as many of those after it as fit on the same page, on one page.
    /// Returns where the first went and how many were placed, or None if
    /// the block it added was filled by other sessions before it could
    /// use it. `placed_tids`, if given, receives where each placed tuple
    /// went (a single-row insert asks for none: it allocates nothing).
    fn insert_once(
        &self,
        s: &mut BufferSession,
        table: &HeapTable,
        tuples: &[&[u8]],
        state: &mut InsertState,
        mut placed_tids: Option<&mut Vec<Tid>>,
    ) -> Result<Option<(Tid, usize)>, HeapError> {
        let rs = self.rel_state(table.rel);
        let need_of = |tuple: &[u8]| tuple.len().next_multiple_of(MAX_ALIGN) + LINE_POINTER_SIZE;
        let need = need_of(tuples[0]);
        // Inserts leave this much of a page free (updates may use it).
        let reserve = BLOCK_SIZE * (100 - table.fillfactor as usize) / 100;
        // How many of the tuples, from the first, fit on the page (each
        // counted with a new line pointer, so that one reused is spare).
        let fitting = |page: &PageBytes| {
            let mut used = line_pointer_count(page) > 0;
            let mut room = free_space(page);
            let mut n = 0;
            for tuple in tuples.iter().take(MULTI_INSERT_TUPLES_MAX) {
                let need = need_of(tuple);
                if room < need || (used && room - need < reserve) {
                    break;
                }
                room -= need;
                used = true;
                n += 1;
            }
            n
        };
        // Puts the tuples that fit on page `block` (formatting a page not
        // yet formatted); returns what was applied, how many, and the room
        // left.
        // A frozen load's tuples carry FROZEN_XID; its changes are its
        // transaction's.
        let frozen = state.frozen_by != INVALID_XID;
        let xid = if frozen {
            state.frozen_by
        } else {
            TupleHeader::read(tuples[0]).xmin
        };
        let (wal, rel) = (self.page_wal(&rs, xid), table.rel);
        let mut indexes = Vec::new();
        let mut place = |page: &mut PageBytes, block: u32| {
            if is_new(page) {
                apply_logged(wal, page, rel, block, xid, &PageChange::Init)?;
            }
            let applied = match fitting(page) {
                0 => None,
                // A frozen tuple goes through the multi-insert, which
                // keeps or sets the page's flag.
                1 if !frozen => {
                    let applied = apply_logged(
                        wal,
                        page,
                        rel,
                        block,
                        xid,
                        &PageChange::Insert { tuple: tuples[0] },
                    )?;
                    if let Some(tids) = placed_tids.as_deref_mut() {
                        let index = applied.index.expect("insert reports its index");
                        tids.push(Tid { block, index });
                    }
                    Some((applied, 1))
                }
                n => {
                    let applied = apply_logged_multi(
                        wal,
                        page,
                        rel,
                        block,
                        xid,
                        &tuples[..n],
                        frozen,
                        &mut indexes,
                    )?;
                    debug_assert_eq!(indexes.len(), n, "a line pointer for each tuple");
                    if let Some(tids) = placed_tids.as_deref_mut() {
                        tids.extend(indexes.iter().map(|&index| Tid { block, index }));
                    }
                    Some((applied, n))
                }
            };
            Ok::<_, WalError>((applied, free_space(page)))
        };
        // The block we hold, then the shared hint, then the free-space
        // map, then (when the map knows of nothing, as for a table only
        // ever filled by other processes) the last block, as PostgreSQL's
        // RelationGetBufferForTuple; a few full candidates in a row and
        // we extend instead.
        let mut tried: Vec<u32> = Vec::new();
        let mut tried_last = false;
        for _ in 0..MAX_INSERT_CANDIDATES {
            let target = match state.current {
                Some((id, block)) => Some((id, block)),
                None => {
                    let candidate = match rs.insert_block.load(Ordering::Relaxed) {
                        _ if !state.spare.is_empty() => state.spare.next(),
                        u32::MAX => Self::free_block(
                            s,
                            table,
                            &rs,
                            need + reserve,
                            &tried,
                            &mut tried_last,
                        )?,
                        hinted => Some(hinted),
                    };
                    match candidate {
                        Some(block) => {
                            let id = s.read_buffer_in(
                                table.rel,
                                Fork::Main,
                                block,
                                state.strategy.as_mut(),
                            )?;
                            state.current = Some((id, block));
                            Some((id, block))
                        }
                        None => None,
                    }
                }
            };
            let Some((id, block)) = target else {
                break;
            };
            let (applied, room) = s.modify_page(id, |page| place(page, block))?;
            if let Some((applied, placed)) = applied {
                self.insert_map_bit(s, state, table.rel, block, applied)?;
                return Ok(Some((
                    Tid {
                        block,
                        index: applied.index.expect("insert reports its index"),
                    },
                    placed,
                )));
            }
            // Full: move on, stop others trying it, and tell the map what
            // room is really left.
            state.finish(s);
            tried.push(block);
            let _ = rs.insert_block.compare_exchange(
                block,
                u32::MAX,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            fsm::record(s, table.rel, &[(block, room)], &rs.fsm, &rs.extension)?;
        }
        // New blocks, added under the extension lock. A bulk load extends
        // by more blocks each time (up to MAX_EXTEND_BY, as PostgreSQL's
        // bulk insert does): one write of zeros instead of one per page.
        // The blocks it does not fill at once go to the free-space map,
        // where the next candidate search (this load's, or anyone's, in
        // this process or a later one) finds them.
        // Never more than the session may still pin (the new blocks come
        // back pinned), as PostgreSQL's LimitAdditionalPins.
        let count = if state.strategy.is_some() {
            let may_pin = s.pool().pin_limit().saturating_sub(s.pinned_count()) as u32;
            (state.extended_by * 2)
                .clamp(1, MAX_EXTEND_BY)
                .min(may_pin.max(1))
        } else {
            1
        };
        state.extended_by = count;
        let ids = {
            let _extending = rs.extension.lock();
            s.extend(table.rel, Fork::Main, count, state.strategy.as_mut())?
        };
        let id = ids[0];
        let block = s.pool().tag(id).expect("pinned buffer has a tag").block;
        for &spare in &ids[1..] {
            s.release(spare);
        }
        let spares: Vec<(u32, usize)> = (block + 1..block + count)
            .map(|b| (b, EMPTY_PAGE_FREE_BYTES))
            .collect();
        fsm::record(s, table.rel, &spares, &rs.fsm, &rs.extension)?;
        if state.strategy.is_some() {
            state.spare = block + 1..block + count;
        }
        s.pool().aio().injections().hit(
            crate::inject::HEAP_INSERT_AFTER_EXTEND,
            crate::inject::HitContext {
                offset: u64::from(block),
            },
        );
        // The new block is visible to others from the moment the file
        // grew (as the table's last block, or in the free-space map):
        // another session may have formatted and filled it already, so it
        // is formatted only if still new, and may no longer have room.
        let (applied, room) = match s.modify_page(id, |page| place(page, block)) {
            Ok(placed) => placed,
            Err(e) => {
                s.release(id);
                return Err(e.into());
            }
        };
        state.current = Some((id, block));
        rs.insert_block.store(block, Ordering::Relaxed);
        let Some((applied, placed)) = applied else {
            state.finish(s);
            fsm::record(s, table.rel, &[(block, room)], &rs.fsm, &rs.extension)?;
            return Ok(None);
        };
        self.insert_map_bit(s, state, table.rel, block, applied)?;
        Ok(Some((
            Tid {
                block,
                index: applied.index.expect("insert reports its index"),
            },
            placed,
        )))
    }

    /// A block that may have `need` bytes free: the lowest the free-space
    /// map offers (other than those `tried`), else once the table's last
    /// block.
    fn free_block(
        s: &mut BufferSession,
        table: &HeapTable,
        rs: &RelState,
        need: usize,
        tried: &[u32],
        tried_last: &mut bool,
    ) -> Result<Option<u32>, HeapError> {
        let found = fsm::find(s, table.rel, need, tried, &rs.fsm)?;
        if found.is_none() && *tried_last {
            return Ok(None);
        }
        let nblocks = s.pool().relation(table.rel).nblocks(Fork::Main)?;
        if let Some(block) = found {
            if block < nblocks {
                return Ok(Some(block));
            }
            // An entry past the end (the process stopped between cutting
            // the table and clearing the map): forget it.
            fsm::record(s, table.rel, &[(block, 0)], &rs.fsm, &rs.extension)?;
        }
        if std::mem::replace(tried_last, true) || nblocks == 0 || tried.contains(&(nblocks - 1)) {
            return Ok(None);
        }
        Ok(Some(nblocks - 1))
    }

    /// Marks the tuple at `tid` deleted by `by`, or updated to
    /// `newer`. Returns false if this transaction had already deleted it;
    /// a row another transaction changed and committed is an error
    /// (`ConcurrentUpdate`). See [`Heap::try_delete`] to follow it instead.
    pub fn delete(
        &self,
        s: &mut BufferSession,
        table: &HeapTable,
        tid: Tid,
        by: &Writer,
        newer: Option<Tid>,
    ) -> Result<bool, HeapError> {
        match self.try_delete(s, table, tid, by, newer, false, RowLockMode::Update)? {
            DeleteOutcome::Deleted => Ok(true),
            DeleteOutcome::AlreadyOurs => Ok(false),
            DeleteOutcome::Changed { .. } => Err(HeapError::ConcurrentUpdate {
                table: table.name.clone(),
            }),
        }
    }

    /// The tuple at `tid` if it is the version transaction `xmin` wrote.
    /// None if the line pointer is empty or holds a
    /// tuple of another transaction (vacuum removed the version and the
    /// pointer was reused), as PostgreSQL checks a chain's xmin.
    pub fn fetch_version(
        &self,
        s: &mut BufferSession,
        table: &HeapTable,
        tid: Tid,
        xmin: Xid,
    ) -> Result<Option<Vec<u8>>, HeapError> {
        let nblocks = s.pool().relation(table.rel).nblocks(Fork::Main)?;
        if tid.block >= nblocks {
            return Ok(None);
        }
        let id = s.read_buffer(table.rel, Fork::Main, tid.block)?;
        let found = s.with_page(id, |page| {
            item(page, tid.index as usize)
                .filter(|t| TupleHeader::read(t).xmin == xmin)
                .map(<[u8]>::to_vec)
        });
        s.release(id);
        Ok(found)
    }

    /// As [`Heap::delete`], but a row another transaction changed and
    /// committed since the statement's snapshot is reported with where its
    /// newer version is, so that a read-committed statement can follow the
    /// update chain (PostgreSQL's EvalPlanQual) instead of failing.
    /// `hot`: `newer` is a heap-only version on the same page
    /// ([`Heap::insert_version`]), and `tid` becomes HOT-updated.
    ///
    /// The row is taken in `mode`: [`RowLockMode::Update`] for a deletion
    /// and an update of a key column, [`RowLockMode::NoKeyUpdate`] for
    /// another update (`newer` given). A running transaction that changes
    /// the row, or locks it in a mode that conflicts, is waited for; the
    /// transaction's own locks are no obstacle. `FOR KEY SHARE` lockers a
    /// no-key update does not wait for keep their locks, on the new
    /// version and beside the update on the old (`lock.rs`).
    // The change's three parts (its newer version, HOT or not, the mode
    // it takes the row in) are each decided by a different layer above.
    #[allow(clippy::too_many_arguments)]
    pub fn try_delete(
        &self,
        s: &mut BufferSession,
        table: &HeapTable,
        tid: Tid,
        by: &Writer,
        newer: Option<Tid>,
        hot: bool,
        mode: RowLockMode,
    ) -> Result<DeleteOutcome, HeapError> {
        debug_assert!(
            !hot || newer.is_some_and(|n| n.block == tid.block),
            "a HOT update's version is on its row's page"
        );
        debug_assert!(
            mode == RowLockMode::Update || (mode == RowLockMode::NoKeyUpdate && newer.is_some()),
            "a row changed in {mode:?}"
        );
        let Writer { xid, cid, waits } = by;
        let (xid, cid) = (*xid, *cid);
        let rs = self.rel_state(table.rel);
        let wal = self.page_wal(&rs, xid);
        for _ in 0..lock::ROW_HOLDER_WAITS_MAX {
            let id = s.read_buffer(table.rel, Fork::Main, tid.block)?;
            // The lockers the change goes on beside (key-share ones of a
            // no-key update), as the new version's xmax will name them.
            let mut kept = None;
            let outcome = s.modify_page(id, |page| {
                let Some(t) = item(page, tid.index as usize) else {
                    return Err(Ok("no tuple at this line pointer"));
                };
                let h = TupleHeader::read(t);
                let state = match self.examine(&rs, &h, tid, xid, mode) {
                    lock::Examined::Free { others, .. } => {
                        debug_assert!(
                            others.iter().all(|&(_, m)| !m.conflicts_with(mode)),
                            "a conflicting lock beside a change in {mode:?}: {others:?}"
                        );
                        if !others.is_empty() {
                            kept = Some(self.lock_xmax(&others).map_err(Err)?);
                        }
                        RowState::Done(DeleteOutcome::Deleted)
                    }
                    lock::Examined::SelfChanged => RowState::Done(DeleteOutcome::AlreadyOurs),
                    lock::Examined::Changed { by, newer } => {
                        RowState::Done(DeleteOutcome::Changed { by, newer })
                    }
                    lock::Examined::Busy(holder) => RowState::Wait(holder),
                };
                let applied = if matches!(state, RowState::Done(DeleteOutcome::Deleted)) {
                    Some(
                        apply_logged(
                            wal,
                            page,
                            table.rel,
                            tid.block,
                            xid,
                            &PageChange::SetXmax {
                                index: tid.index,
                                xmax: xid,
                                cmax: cid,
                                newer,
                                hot,
                            },
                        )
                        .map_err(|e| Err(HeapError::from(e)))?,
                    )
                } else {
                    None
                };
                Ok((state, applied))
            });
            s.release(id);
            let (state, applied) = outcome.map_err(|e: Result<_, HeapError>| match e {
                Ok(what) => HeapError::Damaged {
                    table: table.name.clone(),
                    block: tid.block,
                    index: tid.index,
                    what,
                },
                Err(e) => e,
            })?;
            if let Some(applied) = applied {
                self.clear_vm_bit(s, table.rel, tid.block, applied)?;
            }
            if let (Some(kept), Some(newer)) = (kept, newer) {
                self.carry_locks(s, table, tid, newer, xid, kept)?;
            }
            match state {
                RowState::Done(outcome) => return Ok(outcome),
                // The loop goes round once per holder: each one ended
                // (committed or aborted) before the row is looked at again.
                RowState::Wait(holder) => self
                    .txn
                    .wait_for_transaction(xid, holder, waits)
                    .map_err(|source| HeapError::Wait {
                        table: table.name.clone(),
                        source,
                    })?,
            }
        }
        Err(HeapError::RowKeptBusy {
            table: table.name.clone(),
            waits: lock::ROW_HOLDER_WAITS_MAX,
        })
    }

    /// Calls `f` with each tuple visible to `snap`, in block order, reading
    /// the table through a sequential read stream with a bulk-read ring
    /// ([`HeapScan`]). `f` runs under the page's shared content lock: it
    /// must copy what it needs and not touch the pool. `after_page` runs
    /// after each page's lock and pin are given up: the place for work that
    /// may block (COPY TO writing to a pipe), which under the lock would
    /// stall every writer of the page.
    pub fn scan(
        &self,
        s: &mut BufferSession,
        table: &HeapTable,
        snap: &Snapshot,
        limits: StreamLimits,
        mut f: impl FnMut(Tid, &[u8]) -> ScanControl,
        mut after_page: impl FnMut() -> ScanControl,
    ) -> Result<ScanStats, HeapError> {
        let mut scan = HeapScan::begin(s, table, limits)?;
        let result = loop {
            let mut stop = false;
            match scan.next_page(self, s, snap, |tid, t| {
                stop = f(tid, t) == ScanControl::Stop;
                if stop {
                    ScanControl::Stop
                } else {
                    ScanControl::Continue
                }
            }) {
                Ok(true) => {}
                Ok(false) => break Ok(()),
                Err(e) => break Err(e),
            }
            if stop || after_page() == ScanControl::Stop {
                break Ok(());
            }
        };
        let stats = scan.end(s);
        result.map(|()| stats)
    }

    /// Calls `f(root, tuple)` with what an index build indexes: of each
    /// row, the newest version some transaction may still see (every
    /// tuple but those inserted by aborted transactions and those deleted
    /// by one that committed before the oldest snapshot, what vacuum
    /// removes; rows of transactions still running are in, in case they
    /// commit), under the TID of its HOT chain's root (see `hot.rs`). An
    /// older version of a chain that some snapshot may still see is left
    /// out, as PostgreSQL's build leaves it: the index has one entry per
    /// chain. Returns whether any was left out (a *broken* chain, if the
    /// new index's columns differ between the two): then snapshots older
    /// than the build must not use the index. `f` runs under the page's
    /// shared lock.
    pub fn scan_for_index_build(
        &self,
        s: &mut BufferSession,
        table: &HeapTable,
        limits: StreamLimits,
        mut f: impl FnMut(Tid, &[u8]),
    ) -> Result<bool, HeapError> {
        let txn = &self.txn;
        let oldest = txn.oldest_xmin();
        let mut older_versions_left_out = false;
        let mut scan = HeapScan::begin(s, table, limits)?;
        let result = loop {
            match scan.next_whole_page(s, |block, page| {
                let all_visible = page_flags(page) & PD_ALL_VISIBLE != 0;
                let roots = hot::roots_of(page, block);
                debug_assert_eq!(roots.len(), line_pointer_count(page));
                for (index, &root_of) in roots.iter().enumerate() {
                    let Some(t) = item(page, index) else { continue };
                    let h = TupleHeader::read(t);
                    if !all_visible {
                        match hot::version_state(txn, oldest, &h) {
                            hot::VersionState::Dead => continue,
                            hot::VersionState::RecentlyDead if h.is_hot_updated() => {
                                older_versions_left_out = true;
                                continue;
                            }
                            _ => {}
                        }
                    }
                    let root = if h.is_heap_only() {
                        match root_of {
                            Some(root) => root,
                            None => {
                                // No chain's: its update aborted, or lost
                                // to a concurrent one and was deleted by
                                // its own command; nobody sees it.
                                debug_assert_ne!(
                                    hot::version_state(txn, oldest, &h),
                                    hot::VersionState::Live,
                                    "heap-only tuple {block}/{index} of {} is live and no chain's",
                                    table.name
                                );
                                continue;
                            }
                        }
                    } else {
                        index as u16
                    };
                    f(Tid { block, index: root }, t);
                }
            }) {
                Ok(true) => {}
                Ok(false) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        scan.end(s);
        result.map(|()| older_versions_left_out)
    }

    /// Removes tuples no transaction can see any more, and marks pages
    /// whose every tuple everyone sees as all-visible. Reads the table
    /// through a read stream whose callback skips pages the map says are
    /// all-visible. `progress` hears (blocks done, blocks in all) after
    /// each page, skipped ones included.
    ///
    /// With `defer_removal` (a table with indexes) dead tuples stay where
    /// they are and are listed in the report: an index entry may point at
    /// one, and its line pointer must not be reused for another row until
    /// the entry is gone. A page holding one is not set all-visible.
    pub fn vacuum(
        &self,
        s: &mut BufferSession,
        table: &HeapTable,
        limits: StreamLimits,
        defer_removal: bool,
        progress: &mut dyn FnMut(u32, u32),
    ) -> Result<VacuumReport, HeapError> {
        let rs = self.rel_state(table.rel);
        // Before any flag is set (see `set_map_bits`).
        let cleared_before = rs.all_visible_cleared.load(Ordering::SeqCst);
        let oldest = self.txn.fresh_oldest_xmin();
        let nblocks = s.pool().relation(table.rel).nblocks(Fork::Main)?;
        let mut skip = vm::all_visible_bits(s, table.rel, nblocks)?;
        // The last page is always read, as PostgreSQL's vacuum does: an
        // empty page left all-visible at the end (by a VACUUM that could not
        // cut it off) would otherwise never be looked at again, and the
        // table never shrink.
        if let Some(last) = skip.last_mut() {
            *last = false;
        }
        let mut report = VacuumReport {
            pages: nblocks,
            pages_skipped: skip.iter().filter(|&&b| b).count() as u32,
            ..Default::default()
        };
        let look_ahead = limits.look_ahead_blocks(true, s.settings.io_combine_limit);
        let strategy = Strategy::new(StrategyKind::Vacuum, s.pool().nbuffers(), look_ahead);
        let mut next = 0u32;
        let mut stream = ReadStream::begin(
            s,
            table.rel,
            Fork::Main,
            StreamFlags {
                maintenance: true,
                ..Default::default()
            },
            limits,
            Some(strategy),
            |data: &mut u32| {
                while (next as usize) < skip.len() && skip[next as usize] {
                    next += 1;
                }
                if next < nblocks {
                    *data = next;
                    next += 1;
                    Next::Block(*data)
                } else {
                    Next::End
                }
            },
        );
        let txn = &self.txn;
        // What vacuum would change on a page. Decided under the shared lock
        // to leave clean pages alone, and decided again under the exclusive
        // lock before changing anything: between the two, another session
        // may have inserted a tuple or set an xmax.
        let plan_page = |page: &PageBytes, block: u32| {
            // Dead to everyone: inserted by an aborted transaction, or
            // deleted by one that committed before the oldest snapshot.
            // With index entries to remove first, a dead chain's storage
            // goes now and its root's line pointer once they are gone.
            let dead_roots = if defer_removal {
                hot::DeadRoots::Dead
            } else {
                hot::DeadRoots::Unused
            };
            let mut plan = PagePlan {
                prune: hot::plan_prune(txn, oldest, page, block, dead_roots),
                ..PagePlan::default()
            };
            plan.removed = plan.prune.tuples_removed;
            let mut all_visible = true;
            for index in 0..line_pointer_count(page) {
                // A line pointer an earlier pruning left dead: its index
                // entries go first if there are any.
                if is_dead_item(page, index) {
                    plan.removed += 1;
                    if defer_removal {
                        plan.deferred.push(index as u16);
                    } else {
                        plan.prune.unused.push(index as u16);
                    }
                    continue;
                }
                let Some(t) = item(page, index) else { continue };
                if plan.prune.removes(index as u16) {
                    continue;
                }
                let h = TupleHeader::read(t);
                // A deleter that aborted, or lockers that all ended.
                let tid = Tid {
                    block,
                    index: index as u16,
                };
                let xmax_void = lock::xmax_without_effect(txn, &rs.kept_locks, tid, &h);
                if xmax_void {
                    plan.clear_xmax.push(index as u16);
                }
                plan.kept += 1;
                // A row locked by a running transaction is visible to
                // everyone all the same.
                all_visible &= h.xmin < oldest
                    && txn.did_commit(h.xmin)
                    && (h.deleter().is_none() || xmax_void);
            }
            plan.prune.unused.sort_unstable();
            plan.deferred.extend_from_slice(&plan.prune.dead);
            plan.deferred.sort_unstable();
            all_visible &= plan.deferred.is_empty();
            plan.set_all_visible = all_visible && page_flags(page) & PD_ALL_VISIBLE == 0;
            plan
        };
        let mut free_space_by_block = Vec::new();
        // No visited page from here to the end holds a tuple: what VACUUM
        // may try to cut off (nothing if the last page holds one).
        let mut empty_from = 0u32;
        let mut set_visible = Vec::new();
        let mut result = Ok(());
        loop {
            let (id, block) = match stream.next_buffer(s) {
                Ok(Some(next)) => next,
                Ok(None) => break,
                Err(e) => {
                    result = Err(e.into());
                    break;
                }
            };
            // A page a bulk load added but never filled is still all
            // zeros: it is left so (any change would make it neither new
            // nor valid) and offered to inserts, as PostgreSQL's vacuum
            // leaves new pages to their inserters.
            let (mut plan, mut room) = s.with_page(id, |page| {
                if is_new(page) {
                    (PagePlan::default(), EMPTY_PAGE_FREE_BYTES)
                } else {
                    (plan_page(page, block), free_space(page))
                }
            });
            if plan.changes_page() {
                s.pool().aio().injections().hit(
                    crate::inject::VACUUM_BEFORE_PAGE_CHANGE,
                    crate::inject::HitContext {
                        offset: block as u64,
                    },
                );
                let wal = self.page_wal(&rs, 0);
                let changed = s.modify_page(id, |page| {
                    let plan = plan_page(page, block);
                    let log = |page: &mut PageBytes, change: &PageChange| {
                        apply_logged(wal, page, table.rel, block, 0, change)
                    };
                    for &index in &plan.clear_xmax {
                        log(page, &PageChange::ClearXmax { index })?;
                    }
                    if !plan.prune.is_empty() {
                        // Freeing an index entry's line pointer: see
                        // `RelState::line_pointers_freed`. (Only a table
                        // without indexes frees roots here.)
                        if !defer_removal {
                            rs.line_pointers_freed.fetch_add(1, Ordering::SeqCst);
                        }
                        log(page, &plan.prune.change())?;
                    }
                    if plan.set_all_visible {
                        log(page, &PageChange::SetAllVisible)?;
                    }
                    Ok::<_, WalError>((plan, free_space(page)))
                });
                match changed {
                    Ok(done) => (plan, room) = done,
                    Err(e) => {
                        s.release(id);
                        result = Err(e.into());
                        break;
                    }
                }
            }
            if plan.set_all_visible {
                set_visible.push(block);
            }
            s.release(id);
            report.tuples_removed += plan.removed;
            report.tuples_kept += plan.kept;
            report
                .dead
                .extend(plan.deferred.iter().map(|&index| Tid { block, index }));
            free_space_by_block.push((block, room));
            if plan.kept > 0 {
                empty_from = block + 1;
            }
            progress(block + 1, nblocks);
        }
        progress(nblocks, nblocks);
        stream.end(s);
        report.pages_set_all_visible = set_visible.len() as u32;
        if result.is_ok() {
            result = self.set_map_bits(s, table, &rs, &set_visible, cleared_before);
        }
        if result.is_ok() {
            result = fsm::record(s, table.rel, &free_space_by_block, &rs.fsm, &rs.extension)
                .map_err(Into::into);
        }
        // Skipped pages before the empty end may be empty too (all-visible
        // with no tuple): `truncate_empty_tail` reads them to find out.
        report.empty_pages_at_end = nblocks - empty_from.min(nblocks);
        result.map(|()| report)
    }

    /// Sets the map bits of pages vacuum flagged all-visible, after the
    /// read stream has given back its pins. An update between a page's
    /// flag and its bit may have cleared the flag and found no bit to
    /// clear; so each page's flag is looked at again after the bit is
    /// set, and the bit cleared if the flag went (the update looks at the
    /// bit after clearing the flag, so one of the two always clears it).
    ///
    /// That second look is needed only if some change cleared a flag
    /// since `cleared_before` (read before the scan set any): a change
    /// counts itself before it looks at the bit, so one that found no bit
    /// counted before the bit was set, and so before the count is read
    /// again here. Without that, every page would be read again after
    /// the vacuum ring let it go: from the disk, with direct I/O.
    fn set_map_bits(
        &self,
        s: &mut BufferSession,
        table: &HeapTable,
        rs: &RelState,
        blocks: &[u32],
        cleared_before: u64,
    ) -> Result<(), HeapError> {
        let points = Arc::clone(s.pool().aio());
        let pages = crate::inject::HitContext {
            offset: blocks.len() as u64,
        };
        points
            .injections()
            .hit(crate::inject::VACUUM_BEFORE_MAP_BITS, pages);
        {
            let _extending = rs.extension.lock();
            vm::set_all_visible(s, self.map_wal(rs), table.rel, blocks)?;
        }
        points
            .injections()
            .hit(crate::inject::VACUUM_BEFORE_MAP_RECHECK, pages);
        if rs.all_visible_cleared.load(Ordering::SeqCst) == cleared_before {
            return Ok(());
        }
        let mut flag_gone = Vec::new();
        for &block in blocks {
            let id = s.read_buffer(table.rel, Fork::Main, block)?;
            if s.with_page(id, |page| page_flags(page) & PD_ALL_VISIBLE == 0) {
                flag_gone.push(block);
            }
            s.release(id);
        }
        vm::clear(s, self.map_wal(rs), table.rel, &flag_gone)
    }

    /// What the line pointer at `tid`, an index entry's, holds, for a
    /// unique index's check of a row with an equal key: `visit` hears the
    /// header of each version of the HOT chain rooted there, oldest
    /// first, until it breaks. It runs under the page's shared lock and
    /// must not touch the pool.
    pub fn chain_at(
        &self,
        s: &mut BufferSession,
        table: &HeapTable,
        tid: Tid,
        mut visit: impl FnMut(&TupleHeader) -> ControlFlow<()>,
    ) -> Result<LineAt, HeapError> {
        let id = s.read_buffer(table.rel, Fork::Main, tid.block)?;
        let line = s.with_page(id, |page| {
            match hot::walk_chain(page, tid.block, tid.index as usize, |_, h, _| visit(h)) {
                hot::ChainEnd::Stopped | hot::ChainEnd::Ended => LineAt::Versions,
                hot::ChainEnd::Dead => LineAt::Dead,
                hot::ChainEnd::NoChain => LineAt::Nothing,
            }
        });
        s.release(id);
        Ok(line)
    }

    /// How many times line pointers of `rel` were freed for reuse (see
    /// `RelState::line_pointers_freed`), as a handle its caller keeps (an
    /// index scan reads it at each batch): a lookup takes the relations'
    /// lock and a reference, both writes to lines every session's lookups
    /// share, where the kept count is one read.
    pub fn line_pointer_frees(&self, rel: u32) -> LinePointerFrees {
        LinePointerFrees(self.rel_state(rel))
    }

    /// Frees the line pointers of dead tuples a deferring vacuum listed
    /// ([`VacuumReport::dead`]), once no index entry points at them any
    /// more. A tuple dead to everyone stays so, so they are removed
    /// without another look at their visibility. Returns how many went.
    pub fn remove_dead(
        &self,
        s: &mut BufferSession,
        table: &HeapTable,
        dead: &[Tid],
    ) -> Result<u64, HeapError> {
        debug_assert!(dead.windows(2).all(|w| w[0] < w[1]), "dead tuples unsorted");
        let rs = self.rel_state(table.rel);
        rs.line_pointers_freed.fetch_add(1, Ordering::SeqCst);
        let wal = self.page_wal(&rs, 0);
        let mut removed = 0;
        let mut room_by_block = Vec::new();
        for group in dead.chunk_by(|a, b| a.block == b.block) {
            let block = group[0].block;
            let remove: Vec<u16> = group.iter().map(|t| t.index).collect();
            let id = s.read_buffer(table.rel, Fork::Main, block)?;
            let changed = s.modify_page(id, |page| {
                for &index in &remove {
                    assert!(
                        is_dead_item(page, index as usize),
                        "dead line pointer {block}/{index} of {} went before its index entries",
                        table.name
                    );
                }
                let free = PageChange::Prune {
                    redirected: &[],
                    dead: &[],
                    unused: &remove,
                };
                apply_logged(wal, page, table.rel, block, 0, &free).map(|_| free_space(page))
            });
            s.release(id);
            room_by_block.push((block, changed?));
            removed += remove.len() as u64;
        }
        fsm::record(s, table.rel, &room_by_block, &rs.fsm, &rs.extension)?;
        Ok(removed)
    }

    /// Cuts pages holding no tuple off the end of the table, as VACUUM
    /// does, returning how many went. The caller holds the table so that
    /// no statement uses it (a scan would find its blocks gone). Pages are
    /// checked again here, from the end backwards through a read stream,
    /// since inserts may have come between vacuum's look and the lock.
    /// Nothing is cut if any of those pages' buffers is pinned.
    pub fn truncate_empty_tail(
        &self,
        s: &mut BufferSession,
        table: &HeapTable,
        at_most: u32,
        limits: StreamLimits,
    ) -> Result<u32, HeapError> {
        let rs = self.rel_state(table.rel);
        let _extending = rs.extension.lock();
        let relation = s.pool().relation(table.rel);
        let nblocks = relation.nblocks(Fork::Main)?;
        let lowest = nblocks.saturating_sub(at_most);
        let mut next = nblocks;
        let mut stream = ReadStream::begin(
            s,
            table.rel,
            Fork::Main,
            StreamFlags::default(),
            limits,
            None,
            |data: &mut u32| {
                if next > lowest {
                    next -= 1;
                    *data = next;
                    Next::Block(next)
                } else {
                    Next::End
                }
            },
        );
        let mut new_nblocks = nblocks;
        let mut result: Result<(), HeapError> = Ok(());
        loop {
            match stream.next_buffer(s) {
                Ok(Some((id, block))) => {
                    let empty =
                        s.with_page(id, |page| is_new(page) || line_pointer_count(page) == 0);
                    s.release(id);
                    if !empty {
                        break;
                    }
                    debug_assert_eq!(block + 1, new_nblocks, "read backwards, one by one");
                    new_nblocks = block;
                }
                Ok(None) => break,
                Err(e) => {
                    result = Err(e.into());
                    break;
                }
            }
        }
        stream.end(s);
        result?;
        if new_nblocks == nblocks {
            return Ok(0);
        }
        let evicted = s.evict_blocks_from(table.rel, Fork::Main, new_nblocks)?;
        if evicted.skipped > 0 {
            // Pinned for a moment by someone who does not hold the table
            // (a checkpoint, a victim search); every page is on disk as it
            // is in memory, so nothing is lost and the next VACUUM tries
            // again.
            return Ok(0);
        }
        // The maps forget the blocks, on disk, before the blocks go: a map
        // bit left set for a cut block would be believed for the new block
        // of that number when the table grows again.
        // Logged and durable before anything is cut: replay then cuts it
        // too, and a crash cannot leave the file cut with the log not
        // saying so (blocks logged as changed after would come back).
        let mut data = table.rel.to_le_bytes().to_vec();
        data.push(Fork::Main as u8);
        data.extend_from_slice(&new_nblocks.to_le_bytes());
        let lsn = self.wal.insert(Rmgr::Smgr, SMGR_TRUNCATE, 0, &[], &data)?;
        self.wal.flush(lsn)?;
        let gone: Vec<u32> = (new_nblocks..nblocks).collect();
        vm::clear(s, self.map_wal(&rs), table.rel, &gone)?;
        fsm::truncate(s, table.rel, new_nblocks, &rs.fsm)?;
        s.flush_fork(table.rel, Fork::VisibilityMap)?;
        s.flush_fork(table.rel, Fork::FreeSpace)?;
        relation.truncate(Fork::Main, new_nblocks)?;
        let hinted = rs.insert_block.load(Ordering::Relaxed);
        if hinted != u32::MAX && hinted >= new_nblocks {
            let _ = rs.insert_block.compare_exchange(
                hinted,
                u32::MAX,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        Ok(nblocks - new_nblocks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logged(change: &PageChange, index: Option<u16>, cleared: bool) -> Vec<u8> {
        change.encode(&Applied {
            index,
            cleared_all_visible: cleared,
            set_all_visible: false,
            lsn: 0,
        })
    }

    #[test]
    fn describe_reads_back_what_each_change_logged() {
        let insert = PageChange::Insert { tuple: b"row" };
        assert_eq!(
            describe(insert.info(), &logged(&insert, Some(3), false)),
            "INSERT off: 3, len: 3"
        );
        let set_xmax = PageChange::SetXmax {
            index: 2,
            xmax: 735,
            cmax: 1,
            newer: Some(Tid { block: 4, index: 9 }),
            hot: false,
        };
        assert_eq!(
            describe(set_xmax.info(), &logged(&set_xmax, None, true)),
            "SET_XMAX off: 2, xmax: 735, cmax: 1, newer: (4,9), all-visible cleared"
        );
        let hot = PageChange::SetXmax {
            index: 2,
            xmax: 735,
            cmax: 1,
            newer: Some(Tid { block: 4, index: 3 }),
            hot: true,
        };
        assert_eq!(
            describe(hot.info(), &logged(&hot, None, false)),
            "SET_XMAX off: 2, xmax: 735, cmax: 1, newer: (4,3), hot"
        );
        let unused: Vec<u16> = (0..20).collect();
        let prune = PageChange::Prune {
            redirected: &[(21, 23)],
            dead: &[22],
            unused: &unused,
        };
        let text = describe(prune.info(), &logged(&prune, None, false));
        assert!(
            text.starts_with("PRUNE redirected: 1 [21->23], dead: 1 [22], unused: 20 [0, 1, 2,"),
            "{text}"
        );
        assert!(text.ends_with("15, …]"), "{text}");
        // Records written before HOT chains read as what they meant.
        let mut old = vec![0u8];
        old.extend_from_slice(&2u32.to_le_bytes());
        old.extend_from_slice(&[3, 0, 5, 0]);
        assert_eq!(describe(HEAP_PRUNE_DEAD, &old), "PRUNE_DEAD dead: 2 [3, 5]");
        assert_eq!(
            describe(HEAP_PRUNE_UNUSED, &old),
            "PRUNE_UNUSED unused: 2 [3, 5]"
        );
        assert_eq!(
            describe(HEAP_SET_ALL_VISIBLE, &[0]),
            "SET_ALL_VISIBLE".to_string()
        );
        let lock = PageChange::Lock {
            index: 4,
            xmax: 900,
            bits: TupleHeader::lock_bits(Some(RowLockMode::NoKeyUpdate)),
        };
        assert_eq!(
            describe(lock.info(), &logged(&lock, None, false)),
            "LOCK off: 4, xmax: 900, FOR NO KEY UPDATE"
        );
        let multi = PageChange::Lock {
            index: 4,
            xmax: 901,
            bits: TupleHeader::lock_bits(None),
        };
        assert_eq!(
            describe(multi.info(), &logged(&multi, None, false)),
            "LOCK off: 4, multi: 901"
        );
    }

    #[test]
    fn a_lock_record_with_bits_no_lock_has_is_malformed() {
        for bits in [
            0,
            tuple::UPDATED | tuple::XMAX_LOCK_ONLY,
            TupleHeader::lock_bits(None) | tuple::XMAX_LOCK_MODE,
        ] {
            let lock = PageChange::Lock {
                index: 4,
                xmax: 900,
                bits,
            };
            let text = describe(lock.info(), &logged(&lock, None, false));
            assert!(text.contains("malformed"), "{bits:#x}: {text}");
        }
    }

    #[test]
    fn a_lock_hides_nothing_leaves_all_visible_and_ends_an_aborted_update() {
        let mut page = [0u8; BLOCK_SIZE];
        apply(&mut page, 0, &PageChange::Init);
        let t = tuple(40);
        let old = apply(&mut page, 0, &PageChange::Insert { tuple: &t })
            .index
            .unwrap();
        let newer = apply(&mut page, 0, &PageChange::Insert { tuple: &t })
            .index
            .unwrap();
        // An update (HOT) whose transaction then aborted.
        apply(
            &mut page,
            0,
            &PageChange::SetXmax {
                index: old,
                xmax: 8,
                cmax: 0,
                newer: Some(Tid {
                    block: 0,
                    index: newer,
                }),
                hot: true,
            },
        );
        apply(&mut page, 0, &PageChange::SetAllVisible);
        let bits = TupleHeader::lock_bits(Some(RowLockMode::Share));
        let before = page;
        let lock = PageChange::Lock {
            index: old,
            xmax: 9,
            bits,
        };
        let applied = apply(&mut page, 0, &lock);
        assert!(!applied.cleared_all_visible);
        let mut replayed = before;
        assert_eq!(
            redo(&mut replayed, 0, HEAP_LOCK, &logged(&lock, None, false)),
            Ok(())
        );
        assert_eq!(replayed[..], page[..], "replay makes the same page");
        assert_ne!(page_flags(&page) & PD_ALL_VISIBLE, 0);
        let h = TupleHeader::read(item(&page, old as usize).unwrap());
        assert_eq!(h.deleter(), None);
        assert_eq!(h.locker(), tuple::Locker::One(9, RowLockMode::Share));
        assert!(!h.is_hot_updated() && h.infomask & tuple::UPDATED == 0);
        assert_eq!(
            h.ctid,
            Tid {
                block: 0,
                index: old
            }
        );
        // A deletion over the lock takes its place.
        apply(
            &mut page,
            0,
            &PageChange::SetXmax {
                index: old,
                xmax: 10,
                cmax: 0,
                newer: None,
                hot: false,
            },
        );
        let h = TupleHeader::read(item(&page, old as usize).unwrap());
        assert_eq!((h.deleter(), h.locker()), (Some(10), tuple::Locker::None));
        assert_eq!(h.infomask & tuple::XMAX_LOCK_BITS, 0);
    }

    #[test]
    fn describe_names_a_malformed_record_instead_of_failing() {
        let text = describe(HEAP_SET_XMAX, &[0, 1]);
        assert!(
            text.starts_with("SET_XMAX (malformed heap record"),
            "{text}"
        );
        let text = describe(42, &[0]);
        assert!(text.contains("unknown heap record kind"), "{text}");
        let text = describe(HEAP_INSERT, &[]);
        assert!(text.contains("malformed"), "{text}");
        // A count far past the record's bytes is refused, not allocated.
        let mut huge = vec![0u8];
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        let text = describe(HEAP_PRUNE, &huge);
        assert!(text.contains("malformed"), "{text}");
    }

    /// A tuple of `len` bytes written by transaction 7.
    fn tuple(len: usize) -> Vec<u8> {
        tuple_with_xmin(7, len)
    }

    /// A tuple of `len` bytes with xmin `xmin`.
    fn tuple_with_xmin(xmin: Xid, len: usize) -> Vec<u8> {
        let mut t = vec![0u8; len];
        TupleHeader {
            xmin,
            ..TupleHeader::read(&t)
        }
        .write(&mut t);
        t
    }

    #[test]
    fn a_frozen_multi_insert_leaves_only_its_own_pages_all_visible() {
        let rows: Vec<Vec<u8>> = (0..4)
            .map(|i| tuple_with_xmin(FROZEN_XID, tuple::TUPLE_HEADER_SIZE + i))
            .collect();
        let frozen: Vec<&[u8]> = rows.iter().map(Vec::as_slice).collect();
        let all_visible = |page: &PageBytes| page_flags(page) & PD_ALL_VISIBLE != 0;
        let mut indexes = Vec::new();
        // Onto an empty page: all-visible after, and replayed so.
        let mut page = [0u8; BLOCK_SIZE];
        apply(&mut page, 0, &PageChange::Init);
        let before = page;
        let first =
            apply_logged_multi(None, &mut page, 9, 0, 7, &frozen, true, &mut indexes).unwrap();
        assert!(first.set_all_visible && !first.cleared_all_visible);
        assert!(all_visible(&page));
        let data = encode_multi_insert(&first, &frozen, &indexes);
        assert!(
            describe(HEAP_MULTI_INSERT, &data).ends_with(", frozen, all-visible set"),
            "{}",
            describe(HEAP_MULTI_INSERT, &data)
        );
        let mut replayed = before;
        assert_eq!(redo(&mut replayed, 0, HEAP_MULTI_INSERT, &data), Ok(()));
        assert_eq!(replayed[..], page[..], "replay makes the same page");
        // More frozen tuples keep it all-visible; a plain insert clears it.
        let before_more = page;
        let more =
            apply_logged_multi(None, &mut page, 9, 0, 7, &frozen, true, &mut indexes).unwrap();
        assert!(more.set_all_visible && !more.cleared_all_visible && all_visible(&page));
        // Replayed onto the page without its flag: replay has diverged.
        let more_data = encode_multi_insert(&more, &frozen, &indexes);
        let mut unflagged = before_more;
        set_page_flags(&mut unflagged, page_flags(&before_more) & !PD_ALL_VISIBLE);
        assert_eq!(
            redo(&mut unflagged, 0, HEAP_MULTI_INSERT, &more_data),
            Err("a frozen heap multi-insert found its page otherwise than when it was logged")
        );
        let plain_row = tuple(tuple::TUPLE_HEADER_SIZE + 2);
        let plain: Vec<&[u8]> = vec![&plain_row, &plain_row];
        let cleared =
            apply_logged_multi(None, &mut page, 9, 0, 7, &plain, false, &mut indexes).unwrap();
        assert!(cleared.cleared_all_visible && !cleared.set_all_visible && !all_visible(&page));
        // Onto a page holding another statement's tuple: not all-visible,
        // and the record says nothing that replay would set.
        let mut shared = before;
        apply(&mut shared, 0, &PageChange::Insert { tuple: &plain_row });
        let joined =
            apply_logged_multi(None, &mut shared, 9, 0, 7, &frozen, true, &mut indexes).unwrap();
        assert!(!joined.set_all_visible && !joined.cleared_all_visible);
        assert!(!all_visible(&shared));
    }

    #[test]
    fn a_multi_insert_replays_each_tuple_where_it_landed() {
        let mut page = [0u8; BLOCK_SIZE];
        apply(&mut page, 3, &PageChange::Init);
        let first = tuple(tuple::TUPLE_HEADER_SIZE + 10);
        apply(&mut page, 3, &PageChange::Insert { tuple: &first });
        let replayed = page;
        let rows: Vec<Vec<u8>> = (0..5)
            .map(|i| tuple(tuple::TUPLE_HEADER_SIZE + i))
            .collect();
        let tuples: Vec<&[u8]> = rows.iter().map(Vec::as_slice).collect();
        let mut indexes = Vec::new();
        let applied =
            apply_logged_multi(None, &mut page, 3, 3, 7, &tuples, false, &mut indexes).unwrap();
        assert_eq!(indexes, [1, 2, 3, 4, 5]);
        assert_eq!(applied.index, Some(1));
        assert!(!applied.set_all_visible && !applied.cleared_all_visible);
        let data = encode_multi_insert(&applied, &tuples, &indexes);
        assert_eq!(
            describe(HEAP_MULTI_INSERT, &data),
            format!(
                "MULTI_INSERT ntuples: 5, off: 1..5, len: {}",
                5 * tuple::TUPLE_HEADER_SIZE + 10
            )
        );
        let mut again = replayed;
        assert_eq!(redo(&mut again, 3, HEAP_MULTI_INSERT, &data), Ok(()));
        assert_eq!(again[..], page[..], "replay makes the same page");
        // Replayed where the page differs (a tuple fewer before it), each
        // insert lands elsewhere: an error, not a different page.
        let mut other = [0u8; BLOCK_SIZE];
        apply(&mut other, 3, &PageChange::Init);
        assert_eq!(
            redo(&mut other, 3, HEAP_MULTI_INSERT, &data),
            Err("a heap insert landed on another line pointer than logged")
        );
        for bad in [&data[..3], &data[..data.len() - 1], &[0, 0, 0][..]] {
            let mut p = replayed;
            assert!(redo(&mut p, 3, HEAP_MULTI_INSERT, bad).is_err(), "{bad:?}");
            assert!(describe(HEAP_MULTI_INSERT, bad).contains("malformed"));
        }
    }

    #[test]
    fn redo_refuses_a_change_to_a_page_never_formatted() {
        let mut page = [0u8; BLOCK_SIZE];
        let clear = PageChange::ClearXmax { index: 0 };
        assert_eq!(
            redo(&mut page, 0, clear.info(), &logged(&clear, None, false)),
            Err("a heap change to a page never formatted")
        );
        let tuple = [0u8; tuple::TUPLE_HEADER_SIZE + 4];
        let insert = PageChange::Insert { tuple: &tuple };
        assert_eq!(
            redo(
                &mut page,
                0,
                insert.info(),
                &logged(&insert, Some(0), false)
            ),
            Err("a heap insert into a page never formatted")
        );
        assert_eq!(redo(&mut page, 0, HEAP_INIT, &[0]), Ok(()));
        assert_eq!(
            redo(
                &mut page,
                0,
                insert.info(),
                &logged(&insert, Some(0), false)
            ),
            Ok(())
        );
        // The record says the change cleared the all-visible flag; the
        // page at replay does not have it: replay has diverged.
        let mut visible = page;
        assert_eq!(
            redo(
                &mut visible,
                0,
                insert.info(),
                &logged(&insert, Some(1), true)
            ),
            Err(
                "a heap change found the page's all-visible flag otherwise than when it was logged"
            )
        );
        assert_eq!(
            redo(
                &mut page,
                0,
                insert.info(),
                &logged(&insert, Some(5), false)
            ),
            Err("a heap insert landed on another line pointer than logged")
        );
    }
}
