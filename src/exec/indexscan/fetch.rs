//! The heap side of an index scan: the B-tree's batches (one leaf page's
//! matches each) in a ring, each batch's heap pages read once, and, once
//! a scan has shown it reads many pages, those pages read ahead through a
//! read stream (DESIGN.md §8; issue 12).
//!
//! # Positions
//!
//! The ring's front batch is the one being returned: the *scan position*
//! is its next item. Batches behind it were loaded ahead, and their heap
//! pages handed to the read stream's *feed*, a queue of blocks the
//! stream's callback takes from: how far the callback has taken is the
//! *prefetch position*. When the callback finds the feed empty it pauses
//! the stream; before the reader next pulls a buffer, more batches are
//! loaded (leaf pages read) and their pages fed, so the prefetch position
//! runs ahead of the scan position across leaf pages, as far as the
//! stream's distance asks and at most [`RING_BATCHES`] batches.
//!
//! # Each heap page once per batch
//!
//! A batch lists its distinct heap pages in the order its items first
//! need them. When an item needs a page not yet visited, the page is
//! pinned (from the stream, or read) and locked once, and the batch's
//! items on it are fetched together, their rows kept until their turn:
//! so items still come out in index order, and a page is pinned and
//! locked once per batch however its items interleave with others
//! (PostgreSQL pins it again at every change of page, and locks it for
//! every tuple). A batch's first page equal to the previous batch's last
//! is not requested again either: it is still pinned.
//!
//! # A LIMIT above the scan
//!
//! A parent that will take at most `n` rows says so ([`IndexFetch::
//! set_row_bound`], from `PlanNode::bound_rows`). The scan then fetches
//! and feeds the stream only for items that can be among them: the next
//! `n − returned` items from the scan position (an item whose tuple the
//! snapshot does not see moves that end on by one). So `ORDER BY a LIMIT
//! 10` reads the pages of 10 rows, not of the leaf's 400 items, nor of
//! the batches the stream's distance would otherwise load ahead. An item
//! past that end whose turn comes all the same (rows were invisible) is
//! fetched then, its page pinned again if need be.
//!
//! # No cost where it cannot help
//!
//! A run reads its first [`PREFETCH_AFTER_PAGES`] pages without a stream:
//! a point lookup, or the inner side of a nested loop finding one row per
//! outer row, never sets one up, nor uses the one an earlier run set up
//! (a rescan resets the stream and keeps it). The stream's distances start at 1 and
//! grow only when the reader really waits, so cached pages and correlated
//! data (consecutive items on one page) cost no look-ahead.
//!
//! # Why holding batches is safe
//!
//! A batch is a copy: its leaf is not pinned (except while an index-only
//! scan looks its items up in the visibility map, see `load`), so VACUUM
//! may remove an entry and free its tuple's line pointer before the
//! entry's turn, and a new tuple may take it. That tuple was inserted
//! after the vacuum, which ran after this scan's snapshot was taken, so
//! the snapshot does not see it (see `HeapFetch::fetch_on_page`): fetching checks
//! visibility, however long the batch was held. A page truncated away by
//! vacuum is no page: the fetch finds the table shorter and the item
//! gone, and such a page is never fed to the stream.

use std::collections::{HashMap, VecDeque};

use super::super::plan::ExecCx;
use super::super::ExecError;
use crate::btree::{BatchItem, BtreeScan, ScanKeys};
use crate::buffer::ReadCounts;
use crate::heap::tuple::{Tid, TupleError};
use crate::heap::vm::VisibilityLookup;
use crate::heap::{FetchStats, HeapFetch, HeapTable, LinePointerFrees, SCAN_PINS_RESERVED};
use crate::storage::Fork;
use crate::stream::{BlockFeed, FedBlocks, ReadStream, StreamFlags, StreamStats};
use crate::types::Value;

/// Batches the ring holds: the one being returned and those loaded ahead
/// of it (the ring of 64).
pub const RING_BATCHES: usize = 64;
/// Heap pages a run reads on its own before it starts a read stream:
/// single-row and few-row lookups pay nothing for prefetching. Counted in
/// pages, not batches: a `LIMIT 100` inside one leaf still prefetches.
pub const PREFETCH_AFTER_PAGES: u64 = 2;
/// Batches loaded in a row without a page to feed (all their items on
/// pages already fed, or all-visible in an index-only scan), after which
/// loading waits for the reader to catch up rather than read leaves on.
pub const BATCHES_WITHOUT_PAGE_MAX: usize = 4;
/// Pins the scan takes beside the stream's and its consumer's: the leaf
/// being loaded, the visibility-map page, and the B-tree scan's own
/// stream reading leaves ahead, which may be set up after this one and
/// must find its pins free (else the two together could pass the
/// session's pin limit).
const FETCH_PINS: usize = 2 + crate::btree::LEAF_READ_AHEAD_PINS_MAX;
/// `page_of` for an item an index-only scan answers from its key.
const FROM_INDEX: u32 = u32::MAX;

/// What the scan returns for one index entry, in index order.
pub enum Fetched {
    /// An index-only scan's entry on an all-visible page: its key.
    Key(Tid, Vec<Value>),
    /// The row at the entry's TID that the snapshot sees (its wanted
    /// columns decoded).
    Row(Tid, Vec<Value>),
    /// No tuple at the entry's TID that the snapshot sees.
    Invisible,
}

/// Copies a visible tuple's wanted columns into the row (under the
/// page's content lock: it must not touch the pool).
pub type DecodeTuple<'a> = dyn FnMut(&[u8], &mut Vec<Value>) -> Result<(), TupleError> + 'a;

/// A heap page some items of a batch are on.
struct Page {
    block: u32,
    /// Handed to the stream (else read when visited: before the stream
    /// started, past the table's end, or the previous batch's last page).
    fed: bool,
    /// The previous batch's last page: still pinned, not requested again.
    carried: bool,
}

/// An item's row, fetched when its turn comes or ahead of it.
enum Slot {
    /// Fetched in its turn (an index-only scan's item answered from the
    /// index, or an item past a LIMIT's end when its page was visited).
    InTurn,
    /// Fetched when its page was visited: the row the snapshot saw, if
    /// any, with where it is (a newer version of the entry's HOT chain,
    /// or the entry's own TID).
    Ahead(Option<(Tid, Vec<Value>)>),
}

/// One leaf page's matches, with their heap pages.
struct LoadedBatch {
    /// The leaf the items were copied from.
    leaf: u32,
    items: Vec<BatchItem>,
    /// Each item's page in `pages`, or [`FROM_INDEX`].
    page_of: Vec<u32>,
    /// Distinct pages, in the order items first need them.
    pages: Vec<Page>,
    /// Item numbers grouped by page (each group in index order); page
    /// `p`'s are `grouped[group_start[p]..group_start[p + 1]]`.
    grouped: Vec<u32>,
    group_start: Vec<u32>,
    /// Each item's row: fetched in turn, or ahead and kept until then.
    rows: Vec<Slot>,
    next_item: usize,
    pages_visited: usize,
    /// Pages decided for the feed (fed, or carried or past the table's
    /// end), a prefix of `pages`.
    feed_next: usize,
    /// The run's count of items in batches before this one.
    first_item: u64,
    /// Items whose rows were found dead to every snapshot: their entries
    /// are removed from the leaf once the batch is done.
    dead: Vec<Tid>,
    /// The table's count of line pointers freed when the batch was
    /// copied: if it moved by the time the entries would be removed,
    /// vacuum may have given a TID to a new row (whose entry it would
    /// be), so none is.
    freed_before: u64,
}

impl LoadedBatch {
    fn done(&self) -> bool {
        self.next_item == self.items.len()
    }
}

/// Figures over every run of one scan, for EXPLAIN.
#[derive(Debug, Clone, Copy, Default)]
pub struct PrefetchStats {
    /// TIDs fetched from the table, pages pinned for them (a page once per
    /// batch), and whether the snapshot saw them.
    pub heap: FetchStats,
    /// Buffer hits and reads of those pages (the index's are not in).
    pub heap_buffers: ReadCounts,
    /// Read streams started (once per scan node at most: rescans reset it).
    pub streams: u64,
    /// The furthest the stream looked ahead, in buffers.
    pub max_distance: usize,
    /// Index entries removed because their rows were dead to everyone.
    pub entries_removed: u64,
    pub stream: StreamStats,
}

/// The heap side of one index scan (see the module comment).
pub struct IndexFetch {
    table_rel: u32,
    /// The table's count of freed line pointers, looked up at the first
    /// batch (see `LoadedBatch::freed_before`).
    frees: Option<LinePointerFrees>,
    scan: BtreeScan,
    /// Answers items from the index where the visibility map vouches for
    /// their page.
    index_only: bool,
    prefetch: bool,
    heap: HeapFetch,
    vm: VisibilityLookup,
    ring: VecDeque<LoadedBatch>,
    index_done: bool,
    /// The block of the last page in need order over every batch loaded.
    last_page: Option<u32>,
    /// The table's size when last looked at: pages past it are not fed.
    nblocks: u32,
    /// Pages this run read without the stream.
    pages_read: u64,
    /// This run reads through the stream: its pages are fed. Each run
    /// starts without, so that a lookup of a page or two never uses the
    /// stream, even where an earlier run of the node set one up.
    streaming: bool,
    /// Rows a parent will take from this run at most (a LIMIT), if said.
    row_bound: Option<u64>,
    /// This run's rows returned (items the snapshot sees), items whose
    /// turn has come and gone, and items loaded.
    rows_returned: u64,
    items_taken: u64,
    items_loaded: u64,
    /// Columns of the table (the capacity of a decoded row).
    columns: usize,
    /// The stream's blocks, in the order the reader will want them
    /// (`done` once the index has no more batches).
    feed: std::sync::Arc<parking_lot::Mutex<BlockFeed>>,
    stream: Option<ReadStream<u32, FedBlocks>>,
    /// Scratch: a batch's distinct pages while it is loaded.
    page_numbers: HashMap<u32, u32>,
    stats: PrefetchStats,
}

impl IndexFetch {
    /// Begins reading the table `table` through `scan`; `prefetch` lets
    /// it start a read stream.
    pub fn new(table: &HeapTable, scan: BtreeScan, index_only: bool, prefetch: bool) -> Self {
        IndexFetch {
            table_rel: table.rel,
            frees: None,
            scan,
            index_only,
            prefetch,
            heap: HeapFetch::new(table),
            vm: VisibilityLookup::default(),
            ring: VecDeque::new(),
            index_done: false,
            last_page: None,
            nblocks: 0,
            pages_read: 0,
            streaming: false,
            row_bound: None,
            rows_returned: 0,
            items_taken: 0,
            items_loaded: 0,
            columns: table.types.len(),
            feed: std::sync::Arc::new(parking_lot::Mutex::new(BlockFeed::default())),
            stream: None,
            page_numbers: HashMap::new(),
            stats: PrefetchStats::default(),
        }
    }

    /// Limits this run's fetching and reading ahead to the items that can
    /// be among the parent's next `bound` rows (None: every item may be).
    /// Set before the run's first [`IndexFetch::next`].
    pub fn set_row_bound(&mut self, bound: Option<u64>) {
        debug_assert_eq!(self.items_taken, 0, "a bound set in the middle of a run");
        self.row_bound = bound;
    }

    /// The caller dropped the row it was last given (a recheck failed):
    /// it does not count against the bound.
    pub fn row_dropped(&mut self) {
        debug_assert!(self.rows_returned > 0);
        self.rows_returned -= 1;
    }

    /// The run's count of items past which nothing is fetched or fed yet
    /// (see "A LIMIT above the scan"); None without a bound. Never before
    /// the next item's end, and it never moves back: a row returned moves
    /// both counts on by one, an invisible item only `items_taken`.
    fn items_allowed_end(&self) -> Option<u64> {
        self.row_bound
            .map(|bound| self.items_taken + bound.saturating_sub(self.rows_returned).max(1))
    }

    /// The B-tree scan, for its figures (leaf pages read, read ahead,
    /// descents).
    pub fn index_scan(&self) -> &BtreeScan {
        &self.scan
    }

    /// Figures so far (the stream's up to its last reset or end).
    pub fn stats(&self) -> PrefetchStats {
        let mut stats = self.stats;
        stats.heap.add(&self.heap.stats);
        if let Some(stream) = &self.stream {
            stats.stream.add(stream.stats());
        }
        stats
    }

    /// The next entry's answer, in index order; None when the index has
    /// no more. `decode` copies a visible tuple's wanted columns (it runs
    /// under the page's content lock and must not touch the pool).
    pub fn next(
        &mut self,
        cx: &mut ExecCx,
        decode: &mut DecodeTuple,
    ) -> Result<Option<Fetched>, ExecError> {
        loop {
            if self.ring.front().is_some_and(LoadedBatch::done) {
                let done = self.ring.pop_front().expect("a front batch");
                self.remove_dead_entries(cx, &done)?;
            }
            if self.ring.is_empty() {
                if self.index_done {
                    return Ok(None);
                }
                self.load(cx)?;
                continue;
            }
            let batch = self.ring.front_mut().expect("not empty");
            let i = batch.next_item;
            batch.next_item += 1;
            let page = batch.page_of[i];
            if page == FROM_INDEX {
                let item = &mut batch.items[i];
                let key = Fetched::Key(item.tid, std::mem::take(&mut item.key));
                self.items_taken += 1;
                self.rows_returned += 1;
                return Ok(Some(key));
            }
            if page as usize >= batch.pages_visited {
                // Pages are listed in the order items first need them.
                assert_eq!(
                    page as usize, batch.pages_visited,
                    "a page visited out of turn"
                );
                self.visit(cx, page as usize, i, decode)?;
            }
            let batch = self.ring.front_mut().expect("not empty");
            let tid = batch.items[i].tid;
            let row = match std::mem::replace(&mut batch.rows[i], Slot::InTurn) {
                Slot::Ahead(row) => row,
                // Past the LIMIT's end when its page was visited.
                Slot::InTurn => self.fetch_row(cx, tid, decode)?,
            };
            self.items_taken += 1;
            return Ok(Some(match row {
                Some((tid, row)) => {
                    self.rows_returned += 1;
                    Fetched::Row(tid, row)
                }
                None => Fetched::Invisible,
            }));
        }
    }

    /// Pins page `p` of the front batch, which item `first` needs first,
    /// and fetches the batch's items on it under one lock (those within a
    /// LIMIT's reach), keeping their rows until their turn.
    fn visit(
        &mut self,
        cx: &mut ExecCx,
        p: usize,
        first: usize,
        decode: &mut DecodeTuple,
    ) -> Result<(), ExecError> {
        let page = &self.ring[0].pages[p];
        if !page.fed && !page.carried && !self.streaming {
            if self.prefetch
                && self.pages_read >= PREFETCH_AFTER_PAGES
                && cx.session.settings.effective_io_concurrency() > 0
            {
                self.start_stream(cx, p);
            } else {
                self.pages_read += 1;
            }
        }
        if self.streaming {
            self.top_up(cx)?;
            // Feeding runs at least to the item being returned.
            assert!(
                self.ring[0].feed_next > p,
                "a page visited before it was fed"
            );
        }
        let allowed_end = self.items_allowed_end();
        let (db, buf) = cx.session.db_and_buf();
        let before = buf.counts;
        let batch = &mut self.ring[0];
        let block = batch.pages[p].block;
        if batch.pages[p].fed {
            let stream = self.stream.as_mut().expect("a fed page has a stream");
            let (id, streamed) = stream
                .next_buffer(buf)?
                .expect("a page fed to the stream comes out of it");
            assert_eq!(streamed, block, "the stream returned pages out of turn");
            self.stats.max_distance = self.stats.max_distance.max(stream.distances().0);
            self.heap.adopt(buf, block, id);
        }
        let (start, end) = (
            batch.group_start[p] as usize,
            batch.group_start[p + 1] as usize,
        );
        debug_assert_eq!(batch.grouped[start] as usize, first);
        // The page's items within the LIMIT's reach (a group is in index
        // order): `first` is, being the one whose turn it is.
        let reach = match allowed_end {
            None => end,
            Some(allowed_end) => {
                let within =
                    |g: &usize| batch.first_item + u64::from(batch.grouped[*g]) < allowed_end;
                (start..end)
                    .take_while(within)
                    .last()
                    .expect("the item in turn is")
                    + 1
            }
        };
        let group = &batch.grouped[start..reach];
        for &j in group {
            debug_assert_eq!(batch.items[j as usize].tid.block, block);
            batch.rows[j as usize] = Slot::Ahead(None);
        }
        let mut decoded = Ok(());
        let (items, rows, dead, columns) =
            (&batch.items, &mut batch.rows, &mut batch.dead, self.columns);
        self.heap.fetch_on_page(
            db.heap(),
            buf,
            block,
            group.iter().map(|&j| items[j as usize].tid.index),
            cx.snapshot,
            |k, index, tuple| {
                let mut row = Vec::with_capacity(columns);
                match decode(tuple, &mut row) {
                    Ok(()) => {
                        let at = Tid { block, index };
                        rows[group[k] as usize] = Slot::Ahead(Some((at, row)));
                    }
                    Err(e) if decoded.is_ok() => decoded = Err(e),
                    Err(_) => {}
                }
            },
            |k| dead.push(items[group[k] as usize].tid),
        )?;
        decoded?;
        batch.pages_visited += 1;
        self.stats.heap_buffers.add(buf.counts.since(before));
        Ok(())
    }

    /// Fetches the row of the entry at `tid` in its turn, and where it is:
    /// an item past a LIMIT's reach when its page was visited, whose page
    /// is pinned again if another has been since.
    fn fetch_row(
        &mut self,
        cx: &mut ExecCx,
        tid: Tid,
        decode: &mut DecodeTuple,
    ) -> Result<Option<(Tid, Vec<Value>)>, ExecError> {
        let (db, buf) = cx.session.db_and_buf();
        let before = buf.counts;
        let mut row = None;
        let mut decoded = Ok(());
        let mut dead = false;
        self.heap.fetch_on_page(
            db.heap(),
            buf,
            tid.block,
            std::iter::once(tid.index),
            cx.snapshot,
            |_, index, tuple| {
                let mut values = Vec::with_capacity(self.columns);
                decoded = decode(tuple, &mut values);
                row = Some((
                    Tid {
                        block: tid.block,
                        index,
                    },
                    values,
                ));
            },
            |_| dead = true,
        )?;
        if dead {
            self.ring[0].dead.push(tid);
        }
        self.stats.heap_buffers.add(buf.counts.since(before));
        decoded?;
        Ok(row)
    }

    /// Removes from `batch`'s leaf the entries of rows found dead to every
    /// snapshot (see `btree/vacuum.rs`), with no heap page locked.
    fn remove_dead_entries(
        &mut self,
        cx: &mut ExecCx,
        batch: &LoadedBatch,
    ) -> Result<(), ExecError> {
        if batch.dead.is_empty() {
            return Ok(());
        }
        let (db, buf) = cx.session.db_and_buf();
        let frees = self.frees.as_ref().expect("looked up as the batch loaded");
        let removed =
            db.btree()
                .remove_entries(buf, self.scan.index(), batch.leaf, &batch.dead, || {
                    frees.count() == batch.freed_before
                })?;
        self.stats.entries_removed += removed as u64;
        Ok(())
    }

    /// Starts the read stream, to be fed the pages from page `p` of the
    /// front batch on, in the order they will be wanted (the pages before
    /// it were visited).
    fn start_stream(&mut self, cx: &mut ExecCx, p: usize) {
        debug_assert!(!self.streaming);
        self.streaming = true;
        if self.stream.is_none() {
            self.begin_stream(cx);
        }
        debug_assert!(self.ring.iter().all(|b| b.feed_next == 0));
        self.ring[0].feed_next = p;
    }

    /// Hands the stream the loaded batches' pages not yet decided, in
    /// order, as far as a LIMIT's reach; returns how many it fed.
    fn feed_more(&mut self) -> usize {
        debug_assert!(self.streaming);
        let allowed_end = self.items_allowed_end();
        let mut feed = self.feed.lock();
        let mut fed = 0;
        'batches: for batch in &mut self.ring {
            while batch.feed_next < batch.pages.len() {
                let p = batch.feed_next;
                let first_need = batch.grouped[batch.group_start[p] as usize];
                if allowed_end.is_some_and(|end| batch.first_item + u64::from(first_need) >= end) {
                    break 'batches;
                }
                fed += usize::from(feed_page(&mut feed, &mut batch.pages[p], self.nblocks));
                batch.feed_next += 1;
            }
        }
        if fed > 0 {
            feed.starved = false;
            self.stream.as_mut().expect("streaming").resume();
        }
        fed
    }

    /// Sets the read stream up (once per scan node: later runs reset and
    /// reuse it, sized as it was sized then).
    fn begin_stream(&mut self, cx: &mut ExecCx) {
        let blocks = BlockFeed::callback(&self.feed);
        // No strategy ring: an index scan reads the pages it needs, as a
        // bitmap heap scan does. Not sequential: the stream advises the
        // kernel of its jumps.
        let stream = ReadStream::begin(
            &cx.session.buf,
            self.table_rel,
            Fork::Main,
            StreamFlags {
                pins_reserved: SCAN_PINS_RESERVED + FETCH_PINS,
                ..Default::default()
            },
            cx.session.stream_limits(),
            None,
            blocks,
        );
        self.stream = Some(stream);
        self.stats.streams += 1;
    }

    /// Once the stream has run out of blocks to look ahead at, loads
    /// batches until the feed holds as many blocks as the stream's
    /// distance (one batch of neighbouring pages is a single read, and
    /// the stream should have its distance's worth to combine and keep in
    /// flight), while the ring has room and loading keeps finding pages
    /// to feed.
    /// Under a LIMIT, no batch is loaded past its reach.
    fn top_up(&mut self, cx: &mut ExecCx) -> Result<(), ExecError> {
        let starved = self.feed.lock().starved;
        self.feed_more();
        if !starved {
            return Ok(());
        }
        let wanted = self
            .stream
            .as_ref()
            .expect("streaming")
            .distances()
            .0
            .max(1);
        let mut without_page = 0;
        while self.ring.len() < RING_BATCHES
            && !self.index_done
            && self.feed.lock().blocks.len() < wanted
            && self
                .items_allowed_end()
                .is_none_or(|end| self.items_loaded < end)
        {
            if self.load(cx)? == 0 {
                without_page += 1;
                if without_page >= BATCHES_WITHOUT_PAGE_MAX {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Reads the next leaf's batch into the ring; returns how many pages
    /// it fed the stream.
    fn load(&mut self, cx: &mut ExecCx) -> Result<usize, ExecError> {
        let (db, buf) = cx.session.db_and_buf();
        // Before the entries are copied (see `LoadedBatch::freed_before`).
        let rel = self.table_rel;
        let frees = self
            .frees
            .get_or_insert_with(|| db.heap().line_pointer_frees(rel));
        let freed_before = frees.count();
        let Some(batch) = self.scan.next_batch(db.btree(), buf)? else {
            self.index_done = true;
            self.feed.lock().done = true;
            return Ok(0);
        };
        if batch.pinned.is_some() {
            cx.session.buf.pool().aio().injections().hit(
                crate::inject::INDEX_ONLY_SCAN_LEAF_PINNED,
                crate::inject::HitContext {
                    offset: u64::from(batch.block),
                },
            );
        }
        let leaf = batch.block;
        let looked_up = self.place_items(cx, &batch.items);
        // Whatever the map said, the leaf goes now.
        if let Some(pinned) = batch.pinned {
            cx.session.buf.release(pinned);
        }
        let (page_of, pages) = looked_up?;
        let mut loaded = group(
            leaf,
            freed_before,
            batch.items,
            page_of,
            pages,
            self.items_loaded,
        );
        self.items_loaded += loaded.items.len() as u64;
        // A page past the table's end as last seen may be new: look again
        // once, and never feed one still past it (vacuum truncated it
        // after the index gave its TIDs; the fetch finds no tuple there).
        if loaded.pages.iter().any(|p| p.block >= self.nblocks) {
            self.nblocks = cx
                .session
                .buf
                .pool()
                .relation(self.table_rel)
                .nblocks(Fork::Main)?;
        }
        if let Some(first) = loaded.pages.first_mut() {
            first.carried = Some(first.block) == self.last_page;
        }
        if let Some(last) = loaded.pages.last() {
            self.last_page = Some(last.block);
        }
        self.ring.push_back(loaded);
        let fed = if self.streaming { self.feed_more() } else { 0 };
        let point = if self.streaming && self.ring.len() > 1 {
            crate::inject::INDEX_SCAN_LOADED_AHEAD
        } else {
            crate::inject::INDEX_SCAN_BEFORE_HEAP_FETCH
        };
        cx.session.buf.pool().aio().injections().hit(
            point,
            crate::inject::HitContext {
                offset: u64::from(leaf),
            },
        );
        Ok(fed)
    }

    /// Each item's page (numbered in order of first need) and the pages'
    /// blocks; an index-only scan's items on all-visible pages need none.
    /// Looked up in the visibility map once per item while the leaf is
    /// still pinned: VACUUM cannot remove the entries meanwhile, so a
    /// dead tuple one of them points at still holds its page's bit clear,
    /// and a set bit vouches for the entry's tuple to every snapshot there
    /// is, this scan's included, however long the batch is then held
    /// (PostgreSQL's index-only scans keep the leaf pinned for the same
    /// reason). The answer is the reader's and the prefetcher's both.
    fn place_items(
        &mut self,
        cx: &mut ExecCx,
        items: &[BatchItem],
    ) -> Result<(Vec<u32>, Vec<u32>), ExecError> {
        self.page_numbers.clear();
        let mut page_of = Vec::with_capacity(items.len());
        let mut pages = Vec::new();
        // The last item's block and page number.
        let mut previous: Option<(u32, u32)> = None;
        for item in items {
            let block = item.tid.block;
            if self.index_only
                && self
                    .vm
                    .all_visible(&mut cx.session.buf, self.table_rel, block)?
            {
                page_of.push(FROM_INDEX);
                continue;
            }
            // Items in a row on one page (data in key order) skip the map.
            if let Some((previous, p)) = previous {
                if previous == block {
                    page_of.push(p);
                    continue;
                }
            }
            let next = pages.len() as u32;
            let p = *self.page_numbers.entry(block).or_insert(next);
            previous = Some((block, p));
            if p == next {
                pages.push(block);
            }
            page_of.push(p);
        }
        Ok((page_of, pages))
    }

    /// Ends the run, keeping the stream (reset) for the next.
    pub fn rescan(&mut self, cx: &mut ExecCx, keys: ScanKeys) {
        self.release(cx);
        self.scan.rescan(keys);
        self.index_done = false;
        self.last_page = None;
        self.pages_read = 0;
        self.streaming = false;
        self.rows_returned = 0;
        self.items_taken = 0;
        self.items_loaded = 0;
        *self.feed.lock() = BlockFeed::default();
        if let Some(stream) = &mut self.stream {
            stream.reset(&mut cx.session.buf);
        }
    }

    /// Lets go of every pin the run holds (the stream's too).
    pub fn release(&mut self, cx: &mut ExecCx) {
        self.scan.release(&mut cx.session.buf);
        self.heap.release(&mut cx.session.buf);
        self.vm.release(&mut cx.session.buf);
        self.ring.clear();
        if let Some(stream) = &mut self.stream {
            stream.reset(&mut cx.session.buf);
        }
    }

    /// Whether the batch being returned is done (a caller that takes a
    /// leaf's rows at a time stops here).
    pub fn at_batch_end(&self) -> bool {
        self.ring.front().is_none_or(LoadedBatch::done)
    }
}

/// Hands `page` to the stream's feed unless it is carried over or past
/// the table's end; true if it was.
fn feed_page(feed: &mut BlockFeed, page: &mut Page, nblocks: u32) -> bool {
    debug_assert!(!page.fed);
    if page.carried || page.block >= nblocks {
        return false;
    }
    page.fed = true;
    feed.blocks.push_back(page.block);
    true
}

/// A batch with its items grouped by page (a counting sort by page
/// number, which keeps index order within each page).
fn group(
    leaf: u32,
    freed_before: u64,
    items: Vec<BatchItem>,
    page_of: Vec<u32>,
    pages: Vec<u32>,
    first_item: u64,
) -> LoadedBatch {
    debug_assert_eq!(items.len(), page_of.len());
    let mut group_start = vec![0u32; pages.len() + 1];
    for &p in page_of.iter().filter(|&&p| p != FROM_INDEX) {
        group_start[p as usize + 1] += 1;
    }
    for p in 0..pages.len() {
        group_start[p + 1] += group_start[p];
    }
    let mut at = group_start.clone();
    let mut grouped = vec![0u32; group_start[pages.len()] as usize];
    for (i, &p) in page_of.iter().enumerate() {
        if p != FROM_INDEX {
            grouped[at[p as usize] as usize] = i as u32;
            at[p as usize] += 1;
        }
    }
    let rows = (0..items.len()).map(|_| Slot::InTurn).collect();
    LoadedBatch {
        leaf,
        items,
        page_of,
        pages: pages
            .into_iter()
            .map(|block| Page {
                block,
                fed: false,
                carried: false,
            })
            .collect(),
        grouped,
        group_start,
        rows,
        next_item: 0,
        pages_visited: 0,
        feed_next: 0,
        first_item,
        dead: Vec::new(),
        freed_before,
    }
}
