//! TID bitmaps (DESIGN.md §8): the heap tuples some index conditions
//! matched, gathered page by page so that a bitmap heap scan reads each
//! heap page once, in block order, whatever order the index gave them in.
//!
//! # Exact and lossy pages
//!
//! A page is *exact* while the bitmap remembers which of its line pointers
//! matched (a bit per line pointer, up to the highest one set), and
//! *lossy* once it only remembers that the page had some: the scan then
//! reads every tuple of the page and rechecks the conditions on each.
//! Lossy pages are kept by *chunk*, a bit per page for
//! [`PAGES_PER_CHUNK`] consecutive blocks, which is what makes them cheap:
//! a chunk costs about what one exact page does and stands for 256.
//!
//! The bitmap counts the memory its entries take and keeps it within the
//! budget it was given (the executor passes `work_mem`). When an addition
//! takes it over, whole chunks of exact pages become lossy, from the
//! lowest block on, until it is at half the budget (PostgreSQL's
//! `tbm_lossify`: halving leaves room for many more additions before the
//! next round). If even a bitmap of nothing but lossy chunks is over the
//! budget, the budget is raised to twice what it holds: exceeding
//! `work_mem` is better than failing the query, and PostgreSQL decides
//! the same.
//!
//! A block is never both exact and lossy: marking a page lossy removes its
//! exact entry, and a TID added to a lossy page is already covered.
//!
//! # Union and intersection
//!
//! As PostgreSQL's `tbm_union` and `tbm_intersect` (BitmapOr and
//! BitmapAnd):
//!
//! | this page | other page | union | intersection |
//! |---|---|---|---|
//! | exact | exact | offsets ORed | offsets ANDed, dropped if none |
//! | exact | lossy | lossy | this page's offsets kept |
//! | exact | absent | kept | dropped |
//! | lossy | exact or lossy | lossy | lossy |
//! | lossy | absent | lossy | dropped |
//! | absent | exact | other's offsets | — |
//! | absent | lossy | lossy | — |
//!
//! Where a result is wider than the true answer (a lossy page, or an exact
//! page kept because the other side's page was lossy), the heap scan's
//! recheck of the conditions removes what does not match.
//!
//! # Example
//!
//! ```
//! use aiostore::heap::Tid;
//! use aiostore::tidbitmap::{PageTids, TidBitmap};
//!
//! let mut a = TidBitmap::new(64 * 1024);
//! a.add(Tid { block: 7, index: 3 }).unwrap();
//! a.add(Tid { block: 2, index: 1 }).unwrap();
//! let mut b = TidBitmap::new(64 * 1024);
//! b.add(Tid { block: 7, index: 3 }).unwrap();
//! a.intersect(&b);
//! let pages: Vec<_> = a.into_pages().collect();
//! assert_eq!(pages.len(), 1);
//! assert_eq!(pages[0].block, 7);
//! assert_eq!(pages[0].tids, PageTids::Exact(vec![3]));
//! ```

use std::collections::btree_map::{self, BTreeMap};

use thiserror::Error;

use crate::heap::Tid;
use crate::page::{LINE_POINTER_SIZE, PAGE_HEADER_SIZE};
use crate::storage::BLOCK_SIZE;

/// Most line pointers a heap page can have (every one a 4-byte pointer
/// to nothing): the bound on a TID's index in a page.
pub const MAX_OFFSETS_PER_PAGE: usize = (BLOCK_SIZE - PAGE_HEADER_SIZE) / LINE_POINTER_SIZE;

/// Pages one lossy chunk covers (PostgreSQL's `PAGES_PER_CHUNK`,
/// `BLCKSZ / 32`).
pub const PAGES_PER_CHUNK: u32 = 256;

const CHUNK_WORDS: usize = PAGES_PER_CHUNK as usize / 64;

/// Bytes an exact page's entry costs besides its bit words: its block
/// number, its vector's header and the map's share of a node.
pub const EXACT_ENTRY_BYTES: usize = 64;

/// Bytes a lossy chunk's entry costs: its bits, its key and the map's
/// share of a node.
pub const CHUNK_ENTRY_BYTES: usize = CHUNK_WORDS * 8 + 32;

/// What a bitmap refuses.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum TidBitmapError {
    /// An index gave a TID no heap page can have: the index is damaged.
    #[error("TID ({block},{index}) is beyond the {MAX_OFFSETS_PER_PAGE} line pointers a heap page can have; the index that gave it is damaged: REINDEX it (verify_index names what is wrong)")]
    OffsetOutOfRange { block: u32, index: u16 },
}

impl TidBitmapError {
    /// PostgreSQL's SQLSTATE for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            TidBitmapError::OffsetOutOfRange { .. } => "XX002", // index_corrupted
        }
    }
}

/// The matching tuples of one heap page, as iteration gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageTids {
    /// These line pointers, ascending, each once.
    Exact(Vec<u16>),
    /// Some tuples of the page: read every one and recheck.
    Lossy,
}

/// One page of a bitmap, in block order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BitmapPage {
    pub block: u32,
    pub tids: PageTids,
}

/// A set of heap TIDs, exact per page until its memory budget forces
/// pages to lossy (see the module comment).
#[derive(Debug, Clone)]
pub struct TidBitmap {
    /// Exact pages: a bit per line pointer, up to the highest one set
    /// (never an all-zero entry).
    exact: BTreeMap<u32, Vec<u64>>,
    /// Lossy pages: by chunk (block / PAGES_PER_CHUNK), a bit per page.
    lossy: BTreeMap<u32, [u64; CHUNK_WORDS]>,
    /// What the entries take, as the module comment counts it.
    mem_bytes: usize,
    budget_bytes: usize,
    /// Rounds of making pages lossy, for tests and EXPLAIN.
    pub lossify_rounds: u64,
}

fn chunk_of(block: u32) -> (u32, usize, u64) {
    let chunk = block / PAGES_PER_CHUNK;
    let bit = (block % PAGES_PER_CHUNK) as usize;
    (chunk, bit / 64, 1u64 << (bit % 64))
}

impl TidBitmap {
    /// An empty bitmap that keeps its memory within `budget_bytes` (at
    /// least one exact page's worth is always allowed).
    pub fn new(budget_bytes: usize) -> TidBitmap {
        TidBitmap {
            exact: BTreeMap::new(),
            lossy: BTreeMap::new(),
            mem_bytes: 0,
            budget_bytes: budget_bytes.max(EXACT_ENTRY_BYTES + CHUNK_ENTRY_BYTES),
            lossify_rounds: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.lossy.is_empty()
    }

    /// Bytes the entries take, as counted against the budget.
    pub fn mem_bytes(&self) -> usize {
        self.mem_bytes
    }

    /// Pages with exact offsets.
    pub fn exact_pages(&self) -> usize {
        self.exact.len()
    }

    /// Pages that are lossy.
    pub fn lossy_pages(&self) -> usize {
        self.lossy
            .values()
            .map(|bits| bits.iter().map(|w| w.count_ones() as usize).sum::<usize>())
            .sum()
    }

    /// Whether `block` is lossy here.
    pub fn is_lossy(&self, block: u32) -> bool {
        let (chunk, word, bit) = chunk_of(block);
        self.lossy
            .get(&chunk)
            .is_some_and(|bits| bits[word] & bit != 0)
    }

    /// Whether `block` has any entry here.
    fn has_page(&self, block: u32) -> bool {
        self.exact.contains_key(&block) || self.is_lossy(block)
    }

    /// Adds `tid`; pages may go lossy to stay within the budget.
    pub fn add(&mut self, tid: Tid) -> Result<(), TidBitmapError> {
        let index = usize::from(tid.index);
        if index >= MAX_OFFSETS_PER_PAGE {
            return Err(TidBitmapError::OffsetOutOfRange {
                block: tid.block,
                index: tid.index,
            });
        }
        if self.is_lossy(tid.block) {
            return Ok(());
        }
        let words = index / 64 + 1;
        let entry = match self.exact.entry(tid.block) {
            btree_map::Entry::Occupied(e) => e.into_mut(),
            btree_map::Entry::Vacant(e) => {
                self.mem_bytes += EXACT_ENTRY_BYTES;
                e.insert(Vec::new())
            }
        };
        if entry.len() < words {
            self.mem_bytes += (words - entry.len()) * 8;
            entry.resize(words, 0);
        }
        entry[index / 64] |= 1u64 << (index % 64);
        self.keep_within_budget();
        Ok(())
    }

    /// Adds every tuple of `tids`.
    pub fn add_all(&mut self, tids: impl IntoIterator<Item = Tid>) -> Result<(), TidBitmapError> {
        for tid in tids {
            self.add(tid)?;
        }
        Ok(())
    }

    /// Makes page `block` lossy (whether or not it had an entry).
    pub fn mark_lossy(&mut self, block: u32) {
        if let Some(words) = self.exact.remove(&block) {
            self.mem_bytes -= EXACT_ENTRY_BYTES + words.len() * 8;
        }
        let (chunk, word, bit) = chunk_of(block);
        let bits = match self.lossy.entry(chunk) {
            btree_map::Entry::Occupied(e) => e.into_mut(),
            btree_map::Entry::Vacant(e) => {
                self.mem_bytes += CHUNK_ENTRY_BYTES;
                e.insert([0; CHUNK_WORDS])
            }
        };
        bits[word] |= bit;
        debug_assert!(!self.exact.contains_key(&block) && self.is_lossy(block));
    }

    /// Makes pages lossy, a chunk at a time, if the entries exceed the
    /// budget (see the module comment).
    fn keep_within_budget(&mut self) {
        if self.mem_bytes <= self.budget_bytes {
            return;
        }
        self.lossify_rounds += 1;
        let target = self.budget_bytes / 2;
        while self.mem_bytes > target {
            let Some(&first) = self.exact.keys().next() else {
                break;
            };
            let chunk_start = first - first % PAGES_PER_CHUNK;
            let chunk_end = chunk_start.saturating_add(PAGES_PER_CHUNK);
            let blocks: Vec<u32> = self
                .exact
                .range(chunk_start..chunk_end)
                .map(|(&b, _)| b)
                .collect();
            debug_assert!(!blocks.is_empty());
            for block in blocks {
                self.mark_lossy(block);
            }
        }
        if self.mem_bytes > self.budget_bytes {
            // Nothing exact is left to give up: grow rather than fail.
            debug_assert!(self.exact.is_empty());
            self.budget_bytes = self.mem_bytes.saturating_mul(2);
        }
        debug_assert!(self.mem_bytes <= self.budget_bytes);
    }

    /// Adds every TID and lossy page of `other` (BitmapOr).
    pub fn union(&mut self, other: &TidBitmap) {
        for (&chunk, bits) in &other.lossy {
            for block in chunk_blocks(chunk, bits) {
                self.mark_lossy(block);
            }
        }
        for (&block, words) in &other.exact {
            if self.is_lossy(block) {
                continue;
            }
            let entry = match self.exact.entry(block) {
                btree_map::Entry::Occupied(e) => e.into_mut(),
                btree_map::Entry::Vacant(e) => {
                    self.mem_bytes += EXACT_ENTRY_BYTES;
                    e.insert(Vec::new())
                }
            };
            if entry.len() < words.len() {
                self.mem_bytes += (words.len() - entry.len()) * 8;
                entry.resize(words.len(), 0);
            }
            for (mine, theirs) in entry.iter_mut().zip(words) {
                *mine |= theirs;
            }
            self.keep_within_budget();
        }
        self.keep_within_budget();
    }

    /// Keeps only what `other` has too (BitmapAnd): see the module
    /// comment's table for lossy pages.
    pub fn intersect(&mut self, other: &TidBitmap) {
        let mut emptied = Vec::new();
        for (&block, words) in self.exact.iter_mut() {
            if other.is_lossy(block) {
                continue;
            }
            match other.exact.get(&block) {
                Some(theirs) => {
                    for (i, mine) in words.iter_mut().enumerate() {
                        *mine &= theirs.get(i).copied().unwrap_or(0);
                    }
                    if words.iter().all(|&w| w == 0) {
                        emptied.push(block);
                    }
                }
                None => emptied.push(block),
            }
        }
        for block in emptied {
            let words = self.exact.remove(&block).expect("listed above");
            self.mem_bytes -= EXACT_ENTRY_BYTES + words.len() * 8;
        }
        let mut chunks_emptied = Vec::new();
        for (&chunk, bits) in self.lossy.iter_mut() {
            for block in chunk_blocks(chunk, bits) {
                if !other.has_page(block) {
                    let (_, word, bit) = chunk_of(block);
                    bits[word] &= !bit;
                }
            }
            if bits.iter().all(|&w| w == 0) {
                chunks_emptied.push(chunk);
            }
        }
        for chunk in chunks_emptied {
            self.lossy.remove(&chunk);
            self.mem_bytes -= CHUNK_ENTRY_BYTES;
        }
    }

    /// The pages in block order, each exact with its offsets or lossy.
    pub fn into_pages(self) -> BitmapPages {
        let mut exact = self.exact.into_iter();
        let mut lossy = LossyBlocks {
            chunks: self.lossy.into_iter(),
            current: None,
        };
        BitmapPages {
            next_exact: exact.next(),
            next_lossy: lossy.next(),
            exact,
            lossy,
            last_block: None,
        }
    }
}

/// The blocks whose bits are set in lossy chunk `chunk`, ascending.
fn chunk_blocks(chunk: u32, bits: &[u64; CHUNK_WORDS]) -> Vec<u32> {
    let mut blocks = Vec::new();
    for (w, &word) in bits.iter().enumerate() {
        let mut rest = word;
        while rest != 0 {
            let bit = rest.trailing_zeros();
            rest &= rest - 1;
            blocks.push(chunk * PAGES_PER_CHUNK + w as u32 * 64 + bit);
        }
    }
    blocks
}

/// The lossy blocks of a bitmap, ascending.
struct LossyBlocks {
    chunks: btree_map::IntoIter<u32, [u64; CHUNK_WORDS]>,
    /// The chunk being walked and its bits not yet given.
    current: Option<(u32, [u64; CHUNK_WORDS])>,
}

impl Iterator for LossyBlocks {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        // Each round either gives a block or moves to the next chunk,
        // which the map has finitely many of.
        loop {
            if let Some((chunk, bits)) = &mut self.current {
                if let Some(w) = bits.iter().position(|&word| word != 0) {
                    let bit = bits[w].trailing_zeros();
                    bits[w] &= bits[w] - 1;
                    return Some(*chunk * PAGES_PER_CHUNK + w as u32 * 64 + bit);
                }
            }
            self.current = Some(self.chunks.next()?);
        }
    }
}

/// A bitmap's pages in block order (strictly ascending, each block once).
pub struct BitmapPages {
    exact: btree_map::IntoIter<u32, Vec<u64>>,
    lossy: LossyBlocks,
    next_exact: Option<(u32, Vec<u64>)>,
    next_lossy: Option<u32>,
    last_block: Option<u32>,
}

impl Iterator for BitmapPages {
    type Item = BitmapPage;

    fn next(&mut self) -> Option<BitmapPage> {
        let take_exact = match (&self.next_exact, self.next_lossy) {
            (None, None) => return None,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((exact, _)), Some(lossy)) => {
                assert_ne!(*exact, lossy, "block {lossy} is both exact and lossy");
                *exact < lossy
            }
        };
        let page = if take_exact {
            let (block, words) = self.next_exact.take().expect("chosen above");
            self.next_exact = self.exact.next();
            let mut offsets = Vec::new();
            for (w, &word) in words.iter().enumerate() {
                let mut rest = word;
                while rest != 0 {
                    let bit = rest.trailing_zeros() as usize;
                    rest &= rest - 1;
                    let index = w * 64 + bit;
                    debug_assert!(index < MAX_OFFSETS_PER_PAGE);
                    offsets.push(index as u16);
                }
            }
            debug_assert!(!offsets.is_empty(), "an exact page with no offsets");
            BitmapPage {
                block,
                tids: PageTids::Exact(offsets),
            }
        } else {
            let block = self.next_lossy.take().expect("chosen above");
            self.next_lossy = self.lossy.next();
            BitmapPage {
                block,
                tids: PageTids::Lossy,
            }
        };
        assert!(
            self.last_block.is_none_or(|last| last < page.block),
            "bitmap pages out of block order: {} after {:?}",
            page.block,
            self.last_block
        );
        self.last_block = Some(page.block);
        Some(page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    const LARGE_BUDGET: usize = 1 << 30;

    fn tid(block: u32, index: u16) -> Tid {
        Tid { block, index }
    }

    fn bitmap_of(tids: &BTreeSet<(u32, u16)>, budget: usize) -> TidBitmap {
        let mut b = TidBitmap::new(budget);
        b.add_all(tids.iter().map(|&(block, index)| tid(block, index)))
            .unwrap();
        b
    }

    /// Checks `pages` against the exact answer `model`: every TID of the
    /// model is covered, exact pages hold only TIDs of `allowed`, and a
    /// lossy page is on a block of `allowed_blocks`. Returns the lossy
    /// pages' count.
    fn check_covers(
        pages: &[BitmapPage],
        model: &BTreeSet<(u32, u16)>,
        allowed: &BTreeSet<(u32, u16)>,
        allowed_blocks: &BTreeSet<u32>,
    ) -> usize {
        let mut lossy = 0;
        for w in pages.windows(2) {
            assert!(w[0].block < w[1].block);
        }
        for &(block, index) in model {
            let page = pages
                .iter()
                .find(|p| p.block == block)
                .unwrap_or_else(|| panic!("({block},{index}) lost"));
            if let PageTids::Exact(offsets) = &page.tids {
                assert!(offsets.contains(&index), "({block},{index}) lost");
            }
        }
        for page in pages {
            match &page.tids {
                PageTids::Exact(offsets) => {
                    assert!(offsets.windows(2).all(|w| w[0] < w[1]));
                    for &o in offsets {
                        assert!(
                            allowed.contains(&(page.block, o)),
                            "({},{o}) invented",
                            page.block
                        );
                    }
                }
                PageTids::Lossy => {
                    lossy += 1;
                    assert!(allowed_blocks.contains(&page.block));
                }
            }
        }
        lossy
    }

    fn exact_answer(pages: &[BitmapPage]) -> BTreeSet<(u32, u16)> {
        let mut got = BTreeSet::new();
        for page in pages {
            match &page.tids {
                PageTids::Exact(offsets) => got.extend(offsets.iter().map(|&o| (page.block, o))),
                PageTids::Lossy => panic!("block {} lossy with a large budget", page.block),
            }
        }
        got
    }

    #[test]
    fn pages_come_in_block_order_with_their_offsets_ascending() {
        let mut b = TidBitmap::new(LARGE_BUDGET);
        for (block, index) in [(9, 4), (2, 70), (9, 1), (2, 3), (300, 0), (2, 70)] {
            b.add(tid(block, index)).unwrap();
        }
        let pages: Vec<BitmapPage> = b.into_pages().collect();
        assert_eq!(
            pages,
            [
                BitmapPage {
                    block: 2,
                    tids: PageTids::Exact(vec![3, 70])
                },
                BitmapPage {
                    block: 9,
                    tids: PageTids::Exact(vec![1, 4])
                },
                BitmapPage {
                    block: 300,
                    tids: PageTids::Exact(vec![0])
                },
            ]
        );
    }

    #[test]
    fn a_tid_beyond_a_pages_line_pointers_is_refused() {
        let mut b = TidBitmap::new(LARGE_BUDGET);
        let index = MAX_OFFSETS_PER_PAGE as u16;
        assert_eq!(
            b.add(tid(5, index)),
            Err(TidBitmapError::OffsetOutOfRange { block: 5, index })
        );
        assert!(b.is_empty());
    }

    #[test]
    fn over_budget_whole_chunks_go_lossy_and_memory_falls_to_half() {
        let budget = 64 * 1024;
        let mut b = TidBitmap::new(budget);
        let mut added = BTreeSet::new();
        for block in 0..4000u32 {
            for index in [1u16, 40, 90] {
                b.add(tid(block, index)).unwrap();
                added.insert((block, index));
            }
            assert!(b.mem_bytes() <= budget);
        }
        assert!(b.lossify_rounds > 0);
        assert!(b.lossy_pages() > 0);
        let blocks: BTreeSet<u32> = added.iter().map(|&(b, _)| b).collect();
        let pages: Vec<BitmapPage> = b.into_pages().collect();
        assert_eq!(pages.len(), 4000, "every page once, exact or lossy");
        check_covers(&pages, &added, &added, &blocks);
        // The lossy ones are the lowest chunks, whole.
        let first_exact = pages
            .iter()
            .position(|p| matches!(p.tids, PageTids::Exact(_)))
            .unwrap();
        assert_eq!(first_exact as u32 % PAGES_PER_CHUNK, 0);
    }

    #[test]
    fn a_bitmap_of_only_lossy_chunks_over_budget_grows_instead_of_failing() {
        let mut b = TidBitmap::new(0);
        for block in (0..100_000u32).step_by(PAGES_PER_CHUNK as usize) {
            b.add(tid(block, 1)).unwrap();
        }
        assert_eq!(b.exact_pages() + b.lossy_pages(), 391);
        assert!(b.into_pages().count() == 391);
    }

    #[test]
    fn intersecting_an_exact_page_with_a_lossy_one_keeps_the_exact_offsets() {
        let mut a = TidBitmap::new(LARGE_BUDGET);
        a.add_all([tid(1, 5), tid(1, 7), tid(2, 3), tid(3, 1)])
            .unwrap();
        let mut b = TidBitmap::new(LARGE_BUDGET);
        b.mark_lossy(1);
        b.add(tid(2, 4)).unwrap();
        b.mark_lossy(9);
        let mut lossy_a = TidBitmap::new(LARGE_BUDGET);
        lossy_a.mark_lossy(9);
        lossy_a.mark_lossy(10);
        a.union(&lossy_a);
        a.intersect(&b);
        let pages: Vec<BitmapPage> = a.into_pages().collect();
        assert_eq!(
            pages,
            [
                BitmapPage {
                    block: 1,
                    tids: PageTids::Exact(vec![5, 7])
                },
                BitmapPage {
                    block: 9,
                    tids: PageTids::Lossy
                },
            ]
        );
    }

    #[test]
    fn a_union_with_a_lossy_page_makes_the_exact_page_lossy() {
        let mut a = TidBitmap::new(LARGE_BUDGET);
        a.add_all([tid(4, 1), tid(5, 2)]).unwrap();
        let mut b = TidBitmap::new(LARGE_BUDGET);
        b.mark_lossy(4);
        b.add(tid(6, 0)).unwrap();
        a.union(&b);
        // Adding to a lossy page changes nothing.
        a.add(tid(4, 9)).unwrap();
        let pages: Vec<BitmapPage> = a.into_pages().collect();
        assert_eq!(
            pages
                .iter()
                .map(|p| (p.block, p.tids.clone()))
                .collect::<Vec<_>>(),
            [
                (4, PageTids::Lossy),
                (5, PageTids::Exact(vec![2])),
                (6, PageTids::Exact(vec![0]))
            ]
        );
    }

    fn tids_strategy() -> impl proptest::strategy::Strategy<Value = BTreeSet<(u32, u16)>> {
        use proptest::prelude::*;
        // Few blocks over several chunks, so that pages collide between
        // the two sides; offsets over a page's whole range.
        proptest::collection::btree_set(
            (
                0u32..2000,
                prop_oneof![0u16..64, 0u16..(MAX_OFFSETS_PER_PAGE as u16)],
            ),
            0..1500,
        )
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        #[test]
        fn bitmaps_agree_with_a_set_model(
            a in tids_strategy(),
            b in tids_strategy(),
            tiny in proptest::prelude::any::<bool>(),
        ) {
            // A tiny budget forces lossy pages; a large one keeps every
            // page exact, and then the answer must be the model's exactly.
            let budget = if tiny { 4096 } else { LARGE_BUDGET };
            let blocks = |s: &BTreeSet<(u32, u16)>| -> BTreeSet<u32> { s.iter().map(|&(b, _)| b).collect() };
            let both_blocks: BTreeSet<u32> = blocks(&a).intersection(&blocks(&b)).copied().collect();
            let either: BTreeSet<(u32, u16)> = a.union(&b).copied().collect();
            let both: BTreeSet<(u32, u16)> = a.intersection(&b).copied().collect();

            let pages: Vec<BitmapPage> = bitmap_of(&a, budget).into_pages().collect();
            let lossy = check_covers(&pages, &a, &a, &blocks(&a));
            if !tiny {
                proptest::prop_assert_eq!(lossy, 0);
                proptest::prop_assert_eq!(exact_answer(&pages), a.clone());
            }

            let mut union = bitmap_of(&a, budget);
            union.union(&bitmap_of(&b, budget));
            let pages: Vec<BitmapPage> = union.into_pages().collect();
            check_covers(&pages, &either, &either, &blocks(&either));
            if !tiny {
                proptest::prop_assert_eq!(exact_answer(&pages), either);
            }

            let mut inter = bitmap_of(&a, budget);
            inter.intersect(&bitmap_of(&b, budget));
            let pages: Vec<BitmapPage> = inter.into_pages().collect();
            // Exact pages kept against a lossy page hold a's offsets.
            check_covers(&pages, &both, &a, &both_blocks);
            if !tiny {
                proptest::prop_assert_eq!(exact_answer(&pages), both);
            }
        }
    }
}
