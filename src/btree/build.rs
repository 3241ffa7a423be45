//! Building an index bottom-up from its keys (CREATE INDEX): the keys are
//! sorted (spilling beyond the memory limit, `maintenance_work_mem`),
//! then leaves are filled left to right to the fill factor, each page
//! written once, and each level above is built from the first keys of
//! the one below, until a level fits one page: the root.
//!
//! Pages are added at the end of the file in order, so a page's right
//! sibling is the next block; a page is finished (its high key is the
//! next page's first key) when the next one starts. Each finished page is
//! logged as its image (as PostgreSQL logs a built index) and left in the
//! pool through a bulk-write ring, which writes it as the ring comes
//! round.

use std::cmp::Ordering;
use std::path::Path;

use crate::buffer::{BufferSession, LockMode, Strategy, StrategyKind};
use crate::heap::tuple::Tid;
use crate::page::{free_space, insert_item_at, line_pointer_count, PageBytes};
use crate::sort::RecordSorter;
use crate::storage::{Fork, BLOCK_SIZE};
use crate::types::Value;

use super::change::{log_rewrite, BTREE_BUILD};
use super::insert::{space_of, space_of_len, USABLE_BYTES};
use super::page::{
    abbrev_key, cmp_leaf_tuples, init_btree_page, leaf_tuple_into, minus_infinity, pivot_len,
    pivot_of, pointer, tuple_values, KeySpec, Meta, Special, FLAG_LEAF, FLAG_ROOT, MAX_TUPLE_SIZE,
    META_BLOCK, NO_PAGE,
};
use super::{key_text, Btree, BtreeError, IndexDesc, Liveness, UniqueCheck};

/// Percent of a leaf a build fills (PostgreSQL's default fillfactor 90:
/// room for some inserts before pages split).
pub const LEAF_FILL_PERCENT: usize = 90;
/// Percent of an internal page a build fills (PostgreSQL's 70).
pub const INTERNAL_FILL_PERCENT: usize = 70;
/// Buffers of the build's bulk-write ring.
const BUILD_RING_BUFFERS: usize = 32;
/// Most waits for one transaction's end per duplicate key of a unique
/// build before it reports the key as duplicated.
const BUILD_WAITS_MAX: u32 = 10;

/// Where a build sorts: memory (`maintenance_work_mem`), then temporary
/// files in a directory.
#[derive(Debug, Clone, Copy)]
pub struct SortSpace<'a> {
    pub mem_bytes: usize,
    pub temp_dir: &'a Path,
}

/// What a build did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BuildStats {
    pub tuples: u64,
    pub leaf_pages: u32,
    pub pages: u32,
    pub levels: u32,
    /// The sort spilled to temporary files.
    pub sort_external: bool,
}

/// A level being filled: the page in progress.
struct LevelWriter {
    level: u32,
    page: Box<PageBytes>,
    /// Its block, and its first data tuple (the parent's downlink key).
    block: u32,
    first: Option<Vec<u8>>,
    fill_bytes: usize,
    /// Pages of the level finished.
    pages: u32,
}

impl LevelWriter {
    fn new(level: u32, block: u32, prev: u32) -> LevelWriter {
        let mut page = Box::new([0u8; BLOCK_SIZE]);
        init_btree_page(&mut page, special(level, prev, NO_PAGE));
        let percent = if level == 0 {
            LEAF_FILL_PERCENT
        } else {
            INTERNAL_FILL_PERCENT
        };
        LevelWriter {
            level,
            page,
            block,
            first: None,
            fill_bytes: USABLE_BYTES * (100 - percent) / 100,
            pages: 0,
        }
    }
}

fn special(level: u32, prev: u32, next: u32) -> Special {
    Special {
        prev,
        next,
        level,
        flags: if level == 0 { FLAG_LEAF } else { 0 },
    }
}

/// The keys of an index being built, sorted as they come within the
/// build's memory (spilling to temporary files beyond it): a caller
/// pushes every entry, from wherever it reads them, then hands them to
/// [`Btree::build`]. Each entry is kept as the leaf tuple the build will
/// write, in the sort's arena ([`RecordSorter`]), compared encoded
/// ([`cmp_leaf_tuples`]) with its first column abbreviated
/// ([`abbrev_key`]); no other copy of the keys is kept, so a build of any
/// table needs no more memory than `maintenance_work_mem`.
pub struct BuildKeys {
    sorter: RecordSorter,
    spec: KeySpec,
    /// The index's name, for the error of a key too large for it.
    index: String,
    /// The entry being encoded, reused for each.
    tuple: Vec<u8>,
    pushed: u64,
}

impl BuildKeys {
    /// Keys of `idx`, sorted in `sort` space.
    pub fn new(idx: &IndexDesc, sort: SortSpace<'_>) -> BuildKeys {
        let spec = idx.spec.clone();
        let sorter = RecordSorter::new(
            Box::new(move |a: &[u8], b: &[u8]| cmp_leaf_tuples(&spec, a, b)),
            sort.mem_bytes,
            sort.temp_dir,
        );
        BuildKeys {
            sorter,
            spec: idx.spec.clone(),
            index: idx.name.clone(),
            tuple: Vec::with_capacity(64),
            pushed: 0,
        }
    }

    /// Adds the entry (`values`, `tid`) for a heap row; a key too large
    /// for a page fails here, before the sort spends anything on it.
    pub fn push(&mut self, values: &[Value], tid: Tid) -> Result<(), BtreeError> {
        leaf_tuple_into(&self.spec, values, tid, &mut self.tuple)?;
        if self.tuple.len() > MAX_TUPLE_SIZE {
            return Err(BtreeError::TupleTooLarge {
                index: self.index.clone(),
                size: self.tuple.len(),
                max: MAX_TUPLE_SIZE,
            });
        }
        self.sorter
            .push(abbrev_key(&self.spec, &self.tuple), &self.tuple)?;
        self.pushed += 1;
        Ok(())
    }

    /// How many entries were pushed.
    pub fn pushed(&self) -> u64 {
        self.pushed
    }
}

impl Btree {
    /// Builds index `idx` (an empty file) from `keys`. A unique index asks
    /// `check` about rows with equal keys: two live ones fail the build.
    pub fn build(
        &self,
        s: &mut BufferSession,
        idx: &IndexDesc,
        keys: BuildKeys,
        mut check: Option<&mut dyn UniqueCheck>,
    ) -> Result<BuildStats, BtreeError> {
        let spec = &idx.spec;
        let pushed = keys.pushed;
        debug_assert_eq!(spec, &keys.spec, "keys sorted for another index");
        let mut sorted = keys.sorter.finish()?;
        let mut stats = BuildStats {
            sort_external: sorted.stats().external,
            ..Default::default()
        };
        let mut ring = Strategy::new(
            StrategyKind::BulkWrite,
            s.pool().nbuffers(),
            BUILD_RING_BUFFERS,
        );
        // Block 0 is the metapage, written last; leaves start at 1.
        let meta_id = s.extend(idx.rel, Fork::Main, 1, None)?.remove(0);
        let mut next_block = 1u32;
        let mut levels: Vec<LevelWriter> = vec![LevelWriter::new(0, next_block, NO_PAGE)];
        next_block += 1;
        let mut unique = UniqueGroups::default();
        let mut values = Vec::with_capacity(spec.columns());
        let result = (|| {
            while let Some(tuple) = sorted.next_record()? {
                let tid = pointer(tuple);
                if let Some(check) = check.as_deref_mut().filter(|_| idx.unique) {
                    tuple_values(spec, tuple, &mut values)?;
                    unique.add(s, idx, &values, tid, check)?;
                }
                debug_assert!(
                    tuple.len() <= MAX_TUPLE_SIZE,
                    "BuildKeys::push let through a key of {} bytes",
                    tuple.len()
                );
                self.add_to_level(s, idx, &mut levels, 0, tuple, &mut next_block, &mut ring)?;
                stats.tuples += 1;
            }
            // Finish each level from the bottom; the last one alone on
            // its level is the root.
            let mut level = 0;
            loop {
                let alone = levels[level].pages == 0;
                if alone {
                    let root = levels[level].block;
                    let w = &mut levels[level];
                    let mut sp = Special::read(&w.page);
                    sp.flags |= FLAG_ROOT;
                    sp.write(&mut w.page);
                    self.write_page(s, idx, root, &w.page, &mut ring)?;
                    stats.levels = level as u32 + 1;
                    return Ok(Meta {
                        root,
                        level: level as u32,
                    });
                }
                // The last page of the level: rightmost, no high key.
                let (block, first) = {
                    let w = &mut levels[level];
                    (w.block, w.first.take())
                };
                self.write_page(s, idx, block, &levels[level].page, &mut ring)?;
                levels[level].pages += 1;
                let downlink = first.expect("a finished page has a first tuple");
                self.add_downlink(
                    s,
                    idx,
                    &mut levels,
                    level,
                    &downlink,
                    block,
                    &mut next_block,
                    &mut ring,
                )?;
                level += 1;
            }
        })();
        let meta = match result {
            Ok(meta) => meta,
            Err(e) => {
                s.release(meta_id);
                return Err(e);
            }
        };
        assert_eq!(
            stats.tuples, pushed,
            "the sort of {} gave back another number of keys than it took",
            idx.name
        );
        stats.leaf_pages = levels[0].pages.max(1);
        stats.pages = next_block;
        let mut guard = s.lock_page(meta_id, LockMode::Exclusive);
        meta.write(guard.page_mut());
        let logged = log_rewrite(
            &self.wal,
            idx.rel,
            BTREE_BUILD,
            &mut [(META_BLOCK, guard.page_mut())],
        );
        drop(guard);
        s.release(meta_id);
        logged?;
        Ok(stats)
    }

    /// Adds `tuple` to the page being filled at `level`, finishing that
    /// page first if it is full: its high key is `tuple`'s pivot, and its
    /// downlink goes up a level.
    #[allow(clippy::too_many_arguments)]
    fn add_to_level(
        &self,
        s: &mut BufferSession,
        idx: &IndexDesc,
        levels: &mut Vec<LevelWriter>,
        level: usize,
        tuple: &[u8],
        next_block: &mut u32,
        ring: &mut Strategy,
    ) -> Result<(), BtreeError> {
        let w = &mut levels[level];
        let full = w.first.is_some()
            && free_space(&w.page)
                < space_of(tuple) + space_of_len(pivot_len(tuple)) + w.fill_bytes;
        if full {
            // Finish the page: its high key (first, before the data) is
            // the pivot of the first tuple going right. When that does not
            // fit (a large key after small ones), the page's last tuples
            // go right with it until it does (PostgreSQL's build moves
            // the last tuple to the next page too). A page keeps at
            // least one data tuple: a pivot is at most a third of a page.
            let mut carried: Vec<Vec<u8>> = Vec::new();
            let high = loop {
                let high = pivot_of(carried.first().map_or(tuple, Vec::as_slice), 0);
                if free_space(&w.page) >= space_of(&high) {
                    break high;
                }
                let last = line_pointer_count(&w.page) - 1;
                assert!(
                    last >= 1,
                    "a build page of {} cannot take a high key",
                    idx.name
                );
                let t = crate::page::item(&w.page, last)
                    .expect("a build page holds its tuples")
                    .to_vec();
                crate::page::delete_items(&mut w.page, |i| i == last);
                carried.insert(0, t);
            };
            let block = w.block;
            let right = *next_block;
            *next_block += 1;
            let mut sp = Special::read(&w.page);
            sp.next = right;
            sp.write(&mut w.page);
            let fits = insert_item_at(&mut w.page, 0, &high);
            assert!(
                fits,
                "no room for a high key on block {block} of {}",
                idx.name
            );
            self.write_page(s, idx, block, &w.page, ring)?;
            w.pages += 1;
            let first = w.first.take().expect("a full page has a first tuple");
            *w = LevelWriter {
                pages: w.pages,
                ..LevelWriter::new(w.level, right, block)
            };
            self.add_downlink(s, idx, levels, level, &first, block, next_block, ring)?;
            for t in carried {
                self.add_to_level(s, idx, levels, level, &t, next_block, ring)?;
            }
            return self.add_to_level(s, idx, levels, level, tuple, next_block, ring);
        }
        let w = &mut levels[level];
        // An internal page's first data tuple is minus infinity (its key
        // is the downlink's, one level up).
        let minus;
        let stored = if w.first.is_none() && w.level > 0 {
            minus = minus_infinity(pointer(tuple).block);
            &minus
        } else {
            tuple
        };
        let at = line_pointer_count(&w.page);
        let fits = insert_item_at(&mut w.page, at, stored);
        assert!(fits, "a build overfilled block {} of {}", w.block, idx.name);
        if w.first.is_none() {
            w.first = Some(tuple.to_vec());
        }
        Ok(())
    }

    /// Adds the downlink to page `child` (whose first tuple is `first`)
    /// to the level above `level`, starting that level if need be.
    #[allow(clippy::too_many_arguments)]
    fn add_downlink(
        &self,
        s: &mut BufferSession,
        idx: &IndexDesc,
        levels: &mut Vec<LevelWriter>,
        level: usize,
        first: &[u8],
        child: u32,
        next_block: &mut u32,
        ring: &mut Strategy,
    ) -> Result<(), BtreeError> {
        if levels.len() == level + 1 {
            levels.push(LevelWriter::new(level as u32 + 1, *next_block, NO_PAGE));
            *next_block += 1;
        }
        let downlink = pivot_of(first, child);
        self.add_to_level(s, idx, levels, level + 1, &downlink, next_block, ring)
    }

    /// Writes a finished page to block `block` through the pool (added at
    /// the end of the file: blocks are written in order) and logs it.
    fn write_page(
        &self,
        s: &mut BufferSession,
        idx: &IndexDesc,
        block: u32,
        page: &PageBytes,
        ring: &mut Strategy,
    ) -> Result<(), BtreeError> {
        let relation = s.pool().relation(idx.rel);
        let nblocks = relation.nblocks(Fork::Main)?;
        if block >= nblocks {
            // Blocks are numbered ahead (a page's right sibling is known
            // before it is written): add the ones up to this.
            for id in s.extend(idx.rel, Fork::Main, block + 1 - nblocks, Some(ring))? {
                s.release(id);
            }
        }
        let id = s.read_buffer_in(idx.rel, Fork::Main, block, Some(ring))?;
        let mut guard = s.lock_page(id, LockMode::Exclusive);
        guard.page_mut().copy_from_slice(page);
        let logged = log_rewrite(
            &self.wal,
            idx.rel,
            BTREE_BUILD,
            &mut [(block, guard.page_mut())],
        );
        drop(guard);
        s.release(id);
        logged?;
        Ok(())
    }
}

/// A unique build's run of equal keys: its first row (not asked about
/// until a second equal key comes: most keys are alone), and how many of
/// its rows live.
#[derive(Default)]
struct UniqueGroups {
    key: Option<Vec<Value>>,
    first: Option<Tid>,
    live: u32,
}

impl UniqueGroups {
    fn add(
        &mut self,
        s: &mut BufferSession,
        idx: &IndexDesc,
        values: &[Value],
        tid: Tid,
        check: &mut dyn UniqueCheck,
    ) -> Result<(), BtreeError> {
        if values.iter().any(Value::is_null) {
            self.key = None;
            return Ok(());
        }
        let same = self
            .key
            .as_deref()
            .is_some_and(|k| idx.spec.cmp_values(k, values) == Ordering::Equal);
        if !same {
            self.key = Some(values.to_vec());
            self.first = Some(tid);
            self.live = 0;
            return Ok(());
        }
        for tid in self.first.take().into_iter().chain([tid]) {
            if lives(s, tid, check)? {
                self.live += 1;
            }
        }
        if self.live > 1 {
            return Err(BtreeError::DuplicateInBuild {
                index: idx.name.clone(),
                columns: idx.column_names.join(", "),
                values: key_text(values),
            });
        }
        Ok(())
    }
}

/// Whether a row counts for a unique build: live, or its transaction
/// still running after a few waits (PostgreSQL waits for it).
fn lives(s: &mut BufferSession, tid: Tid, check: &mut dyn UniqueCheck) -> Result<bool, BtreeError> {
    for _ in 0..BUILD_WAITS_MAX {
        match check.liveness(s, tid)? {
            Liveness::Dead { .. } => return Ok(false),
            Liveness::Live => return Ok(true),
            Liveness::InProgress(xid) => check.wait_for(xid)?,
        }
    }
    Ok(true)
}
