//! B-tree indexes (DESIGN.md §8): Lehman and Yao's tree with right-links
//! and high keys, as PostgreSQL's nbtree keeps it.
//!
//! # Shape
//!
//! Block 0 is the metapage: it names the root and its level. Every level
//! is a list of pages linked both ways; each page but the rightmost of its
//! level carries a *high key*, an upper bound of its keys. A leaf tuple
//! holds a key and the heap TID of its row; an internal tuple holds a key
//! and a child: everything in the child is at or above the key and below
//! the next tuple's. The heap TID is the key's last column, so every key
//! is unique and has exactly one place (see `page.rs` for the layout).
//!
//! # Concurrency
//!
//! A search holds one page's content lock at a time: it reads a page,
//! chooses a child, lets the page go and locks the child. A split between
//! the two moves part of the child to a new right sibling, which the
//! search finds by comparing with the child's high key and moving right
//! (Lehman–Yao): so a search never misses a key and never holds two locks.
//!
//! An insertion locks its leaf exclusively (moving right as a search
//! does). When the tuple does not fit the leaf splits: a new page is
//! added, the upper part of the leaf moves there, the leaf's high key
//! becomes the new page's first key and the right sibling's left-link is
//! set, all under the three pages' locks (taken left to right) and logged
//! as one record. Then, still holding the left half, the insertion locks
//! the parent it passed on the way down (moving right if that split too)
//! and inserts the new page's downlink, splitting the parent in turn if it
//! is full; a root that splits gets a new root above it. Locks are only
//! ever taken left to right on a level and from a child up to its parent
//! while searches hold one at a time, so no two sessions wait for each
//! other in a cycle.
//!
//! A crash between a split and its downlink leaves a page reachable only
//! by its left sibling's right-link. Searches find it all the same; a
//! later split of the left page inserts its own downlink by key, which
//! does not need the missing one. (PostgreSQL flags such a split as
//! incomplete and finishes it; `verify` counts such pages instead.)
//!
//! # Scans and batches
//!
//! A scan delivers *batches*: the matching tuples of one leaf page, copied
//! under its lock, with their heap TIDs (and keys, for index-only scans),
//! and the page's siblings as they were. The next batch comes from the
//! right sibling recorded then (a page split since moved only tuples the
//! batch already holds), or for a backward scan from the left one, moving
//! right from it until the page that links to where the scan was. This is
//! the shape a read stream fed from a queue of batches needs (the next
//! issue's heap prefetching).
//!
//! A range that moves across more than a couple of leaves reads the ones
//! ahead through a read stream of its own, fed with their downlinks from
//! the level-1 pages (`readahead.rs`). The link chain stays the truth: a
//! leaf is taken from the stream only if it is the page the chain names
//! next, else read-ahead stops for the range.
//!
//! # Uniqueness
//!
//! An insertion into a unique index first locks the leaf where its key
//! starts and looks at every tuple with an equal key (moving right under
//! shared locks while they go on) asking the caller whether its row lives
//! ([`UniqueCheck`]). A live one fails the insertion; one whose inserting
//! or deleting transaction is still running makes it let go of every lock,
//! wait for that transaction and start again, so that of two sessions
//! inserting one key, one wins and the other fails or succeeds as
//! PostgreSQL decides. Keys with a NULL never conflict.
//!
//! # Files
//!
//! - `page.rs`: layout, tuples, key order, searches within a page;
//! - `change.rs`: the page-change path and WAL records;
//! - `insert.rs`: descent, insertion, splits;
//! - `scan.rs`: range and equality scans in batches, both directions;
//! - `readahead.rs`: reading a scan's leaves ahead from their parents'
//!   downlinks;
//! - `build.rs`: building bottom-up from sorted keys;
//! - `vacuum.rs`: removing the tuples of dead rows;
//! - `verify.rs`: [`Btree::verify`], the structure's invariants.

mod build;
pub mod change;
mod insert;
pub mod page;
mod readahead;
mod scan;
mod vacuum;
mod verify;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use thiserror::Error;

use crate::buffer::{BufferError, BufferId, BufferSession, BufferTag, LockMode, PageGuard};
use crate::heap::tuple::{Tid, TupleError};
use crate::heap::HeapError;
use crate::storage::Fork;
use crate::txn::Xid;
use crate::types::Value;
use crate::wal::{Wal, WalError};

pub use build::{BuildKeys, BuildStats, SortSpace};
pub use page::{KeySpec, Target};
pub use readahead::{
    LEAF_READ_AHEAD_AFTER_PAGES, LEAF_READ_AHEAD_PINS_MAX, LEAF_STREAM_PINS_RESERVED,
};
pub use scan::{Batch, BatchItem, Bound, BtreeScan, Direction, KeyRange, ScanKeys};
pub use vacuum::BulkDeleteStats;
pub use verify::VerifyReport;

/// Most pages a search moves right over on one level before it reports
/// the index as damaged: each move follows a split that happened since
/// the search read the parent, so even a busy index needs few.
pub const MOVE_RIGHT_MAX: u32 = 100_000;
/// Most times an insertion starts again after waiting for a transaction
/// that held an equal key of a unique index (each wait ends a
/// transaction, so a loop means sessions keep inserting that key).
pub const UNIQUE_RETRIES_MAX: u32 = 1000;
/// Most levels a tree may have (a tree of 2 KiB keys has 8 at 10¹⁵ rows).
pub const LEVELS_MAX: u32 = 32;

#[derive(Debug, Error)]
pub enum BtreeError {
    #[error(transparent)]
    Buffer(#[from] BufferError),
    #[error(transparent)]
    Wal(#[from] WalError),
    #[error(transparent)]
    Storage(#[from] crate::storage::StorageError),
    #[error(transparent)]
    Heap(#[from] Box<HeapError>),
    #[error(transparent)]
    Sort(#[from] crate::sort::SortError),
    #[error(transparent)]
    Tuple(#[from] TupleError),
    #[error("duplicate key value violates unique constraint \"{index}\"\nDETAIL:  Key ({columns})=({values}) already exists.")]
    UniqueViolation {
        index: String,
        columns: String,
        values: String,
    },
    #[error("could not create unique index \"{index}\"\nDETAIL:  Key ({columns})=({values}) is duplicated.")]
    DuplicateInBuild {
        index: String,
        columns: String,
        values: String,
    },
    #[error("VACUUM waited {waited:?} for scans to let go of page {block} of index \"{index}\"; run VACUUM again once long queries on the table have ended")]
    CleanupWait {
        index: String,
        block: u32,
        waited: std::time::Duration,
    },
    #[error("index row size {size} exceeds btree maximum {max} for index \"{index}\"\nHINT:  Values larger than 1/3 of a buffer page cannot be indexed.")]
    TupleTooLarge {
        index: String,
        size: usize,
        max: usize,
    },
    #[error("index \"{index}\" is damaged: {what} (block {block}); run verify_index('{index}') and rebuild it with REINDEX (DROP INDEX and CREATE INDEX)")]
    Damaged {
        index: String,
        block: u32,
        what: String,
    },
    #[error("gave up inserting into unique index \"{index}\" after {tries} waits for transactions inserting the same key; retry the statement")]
    UniqueRetries { index: String, tries: u32 },
}

impl BtreeError {
    /// PostgreSQL's SQLSTATE for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            BtreeError::Buffer(e) => e.sqlstate(),
            BtreeError::Wal(e) => e.sqlstate(),
            BtreeError::Storage(e) => e.sqlstate(),
            BtreeError::Heap(e) => e.sqlstate(),
            BtreeError::Sort(e) => e.sqlstate(),
            BtreeError::Tuple(e) => e.sqlstate(),
            BtreeError::UniqueViolation { .. } | BtreeError::DuplicateInBuild { .. } => "23505",
            // Waits that reached their bound, as PostgreSQL's lock_timeout
            // reports one.
            BtreeError::CleanupWait { .. } | BtreeError::UniqueRetries { .. } => "55P03",
            BtreeError::TupleTooLarge { .. } => "54000",
            BtreeError::Damaged { .. } => "XX002", // index_corrupted
        }
    }
}

impl BtreeError {
    /// A damage found below the level that knows the index's name; the
    /// caller names it ([`BtreeError::named`]).
    pub(crate) fn damaged(what: &str) -> BtreeError {
        BtreeError::Damaged {
            index: String::new(),
            block: 0,
            what: what.to_string(),
        }
    }

    /// Fills in the index and block of a damage error.
    pub(crate) fn named(self, idx: &IndexDesc, at: u32) -> BtreeError {
        match self {
            BtreeError::Damaged { index, block, what } if index.is_empty() => BtreeError::Damaged {
                index: idx.name.clone(),
                block: if block == 0 { at } else { block },
                what,
            },
            other => other,
        }
    }
}

impl From<HeapError> for BtreeError {
    fn from(e: HeapError) -> BtreeError {
        BtreeError::Heap(Box::new(e))
    }
}

/// What a B-tree operation needs to know about its index.
#[derive(Debug, Clone)]
pub struct IndexDesc {
    pub name: String,
    pub rel: u32,
    pub spec: KeySpec,
    pub unique: bool,
    /// The key columns' names, for a unique violation's message.
    pub column_names: Vec<String>,
    /// Where descents start, shared by every user of the index.
    pub root: RootHint,
}

/// The root's block and level as a descent last read them from the
/// metapage, kept so that a search reads the metapage only when the root
/// changed (PostgreSQL keeps it in the relcache, `rd_amcache`): one
/// buffer of the five a pgbench lookup touched. A stale hint is found
/// cheaply and safely, because pages are never deleted and a split keeps
/// a page's left half in place: the hinted block stays a page of this
/// index, and it is the root while it carries the root's mark, which a
/// split clears (see [`Btree::find`]). One hint belongs to one relation
/// file: an index in a new file (TRUNCATE's) starts with none.
#[derive(Debug, Clone, Default)]
pub struct RootHint(Arc<std::sync::atomic::AtomicU64>);

impl RootHint {
    /// The hinted root, if any: (block, level).
    fn get(&self) -> Option<page::Meta> {
        let v = self.0.load(std::sync::atomic::Ordering::Relaxed);
        (v != 0).then(|| page::Meta {
            root: v as u32,
            level: (v >> 32) as u32 - 1,
        })
    }

    fn set(&self, meta: page::Meta) {
        debug_assert!(meta.root != page::META_BLOCK && meta.level <= LEVELS_MAX);
        let v = (u64::from(meta.level) + 1) << 32 | u64::from(meta.root);
        self.0.store(v, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Whether the row a tuple points at stands in the way of an equal key
/// in a unique index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// Deleted by a committed transaction, inserted by an aborted one:
    /// no conflict. `removable`: dead to every snapshot there is or will
    /// be, so the entry may go (see [`Btree::remove_entries`]).
    Dead { removable: bool },
    /// Visible, or inserted or deleted by the inserting transaction
    /// itself as it stands: a conflict.
    Live,
    /// Inserted or deleted by a transaction still running: wait for it.
    InProgress(Xid),
}

/// The caller's answers for a unique check: whether a heap row lives, and
/// waiting for a transaction (the B-tree knows neither heap visibility
/// nor locks).
pub trait UniqueCheck {
    /// Reads the row at `tid` (through the caller's session, which the
    /// B-tree lends while it holds the index page).
    fn liveness(&mut self, s: &mut BufferSession, tid: Tid) -> Result<Liveness, BtreeError>;
    fn wait_for(&mut self, xid: Xid) -> Result<(), BtreeError>;
}

/// The B-tree access method of one database.
pub struct Btree {
    wal: Arc<Wal>,
    /// Per index: held while a page is added, so that two splits never
    /// add the same block.
    extension: Mutex<HashMap<u32, Arc<Mutex<()>>>>,
}

impl Btree {
    pub fn new(wal: Arc<Wal>) -> Btree {
        Btree {
            wal,
            extension: Mutex::new(HashMap::new()),
        }
    }

    pub fn wal(&self) -> &Arc<Wal> {
        &self.wal
    }

    fn extension_lock(&self, rel: u32) -> Arc<Mutex<()>> {
        Arc::clone(self.extension.lock().entry(rel).or_default())
    }

    /// Forgets an index that was dropped.
    pub fn forget(&self, rel: u32) {
        self.extension.lock().remove(&rel);
    }

    /// Adds a page at the end of the index, pinned and exclusively locked.
    fn new_page(
        &self,
        s: &mut BufferSession,
        rel: u32,
    ) -> Result<(u32, BufferId, PageGuard), BtreeError> {
        let lock = self.extension_lock(rel);
        let _extending = lock.lock();
        let id = s.extend(rel, Fork::Main, 1, None)?.remove(0);
        let block = s
            .pool()
            .tag(id)
            .expect("an extended buffer has a tag")
            .block;
        let guard = s.lock_page(id, LockMode::Exclusive);
        Ok((block, id, guard))
    }

    /// Reads `block` of the index, pinned and locked in `mode`.
    fn lock_block(
        &self,
        s: &mut BufferSession,
        rel: u32,
        block: u32,
        mode: LockMode,
    ) -> Result<(BufferId, PageGuard), BtreeError> {
        let id = s.read_buffer(rel, Fork::Main, block)?;
        let guard = s.lock_page(id, mode);
        Ok((id, guard))
    }

    /// [`Btree::lock_block`], as a [`insert::Locked`].
    fn lock_at(
        &self,
        s: &mut BufferSession,
        rel: u32,
        block: u32,
        mode: LockMode,
    ) -> Result<insert::Locked, BtreeError> {
        let (id, guard) = self.lock_block(s, rel, block, mode)?;
        Ok(insert::Locked { block, id, guard })
    }

    /// Locks `block` of the index, which the caller already pinned as
    /// `id` (a buffer a read stream read), as [`Btree::lock_at`] locks a
    /// block it reads.
    fn lock_pinned(
        &self,
        s: &BufferSession,
        rel: u32,
        block: u32,
        id: BufferId,
        mode: LockMode,
    ) -> insert::Locked {
        // A pinned buffer keeps its tag: a buffer holding another page
        // would hand the scan a page the link chain did not name.
        assert_eq!(
            s.pool().tag(id),
            Some(BufferTag {
                rel,
                fork: Fork::Main,
                block
            }),
            "a buffer read ahead holds another page than block {block} of relation {rel}"
        );
        let guard = s.lock_page(id, mode);
        insert::Locked { block, id, guard }
    }

    /// The root as the metapage names it now, which becomes the hint.
    fn root_from_meta(
        &self,
        s: &mut BufferSession,
        idx: &IndexDesc,
    ) -> Result<page::Meta, BtreeError> {
        let meta = self.meta(s, idx)?;
        if meta.root == page::META_BLOCK || meta.level > LEVELS_MAX {
            return Err(BtreeError::damaged(&format!(
                "the metapage names root {} at level {}",
                meta.root, meta.level
            ))
            .named(idx, page::META_BLOCK));
        }
        idx.root.set(meta);
        Ok(meta)
    }

    /// The metapage's fields.
    fn meta(&self, s: &mut BufferSession, idx: &IndexDesc) -> Result<page::Meta, BtreeError> {
        let (id, guard) = self.lock_block(s, idx.rel, page::META_BLOCK, LockMode::Shared)?;
        let meta = page::Meta::read(guard.page());
        drop(guard);
        s.release(id);
        meta.ok_or_else(|| BtreeError::damaged("the metapage has no B-tree mark").named(idx, 0))
    }
}

/// Formats a key for a message as PostgreSQL does: `(a, b)=(1, x)`.
pub fn key_text(values: &[Value]) -> String {
    values
        .iter()
        .map(|v| match v {
            Value::Null => "null".to_string(),
            v => crate::types::output_text(v),
        })
        .collect::<Vec<_>>()
        .join(", ")
}
