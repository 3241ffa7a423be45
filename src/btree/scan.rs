//! Scans: ranges of keys, in either direction, delivered in batches of
//! one leaf page's matches (see the module comment in `mod.rs`), the
//! leaves read ahead once a range moves across several
//! (`readahead.rs`).

use std::cmp::Ordering;

use crate::buffer::{BufferSession, LockMode};
use crate::heap::tuple::Tid;
use crate::page::{line_pointer_count, PageBytes};
use crate::stream::StreamLimits;
use crate::types::Value;

use super::insert::Locked;
use super::page::{
    beyond_high_key, lower_bound, page_tuple, pointer, tuple_values, KeySpec, Special, Target,
    NO_PAGE,
};
use super::readahead::LeafReadAhead;
use super::{Btree, BtreeError, IndexDesc, MOVE_RIGHT_MAX};

/// Which way a scan goes through the index's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Forward,
    Backward,
}

/// One end of a range: a key prefix, and whether keys equal to it are in.
#[derive(Debug, Clone, PartialEq)]
pub struct Bound {
    pub values: Vec<Value>,
    pub inclusive: bool,
}

/// Keys whose first columns lie between two bounds (either may be open).
/// `a = 5` is [5, 5]; `a = 5 AND b > 3` is ((5, 3), [5]].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct KeyRange {
    pub lower: Option<Bound>,
    pub upper: Option<Bound>,
}

/// What a scan looks for: ranges in the index's order, not overlapping
/// (an `IN` list is one equality range per value, sorted, each value
/// once). No range matches nothing ([`ScanKeys::none`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ScanKeys {
    pub ranges: Vec<KeyRange>,
}

impl ScanKeys {
    /// Every key.
    pub fn all() -> ScanKeys {
        ScanKeys {
            ranges: vec![KeyRange::default()],
        }
    }

    /// No key (a condition that can never hold, such as `a = NULL`).
    pub fn none() -> ScanKeys {
        ScanKeys { ranges: Vec::new() }
    }
}

/// One matching index tuple.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchItem {
    pub tid: Tid,
    /// The key, if the scan asked for keys (an index-only scan).
    pub key: Vec<Value>,
}

/// The matches of one leaf page, in the scan's order.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub block: u32,
    pub items: Vec<BatchItem>,
    /// The leaf, still pinned (not locked), for a scan that keeps leaf
    /// pins ([`BtreeScan::keeping_leaf_pins`]): while the pin is held VACUUM cannot remove the batch's
    /// entries (it waits for a cleanup lock), so their heap tuples' line
    /// pointers are not freed and what the visibility map says of their
    /// pages holds for them. The caller releases it.
    pub pinned: Option<crate::buffer::BufferId>,
}

/// Where a scan goes on from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resume {
    /// Descend from the root to the current range's start.
    Descend,
    /// The next page of a forward scan.
    Right(u32),
    /// The previous page of a backward scan (`left`), which must link
    /// to `from` (or to a page split off it since).
    Left {
        left: u32,
        from: u32,
    },
    Done,
}

/// The far end of a range in a scan's order: what says a key is past it.
pub(super) struct RangeEnd<'a> {
    pub spec: &'a KeySpec,
    pub range: &'a KeyRange,
    pub direction: Direction,
}

impl<'a> RangeEnd<'a> {
    /// The far end of range `range` (in scan order) of `keys`.
    fn of(spec: &'a KeySpec, keys: &'a ScanKeys, range: usize, direction: Direction) -> Self {
        RangeEnd {
            spec,
            range: current_range(keys, range, direction),
            direction,
        }
    }

    /// True if `values` (a key, or a prefix of one) lie past the range's
    /// far end. Monotone in key order: if a key is past it, so is every
    /// key after it in the scan's direction.
    pub fn past(&self, values: &[Value]) -> bool {
        let r = self.range;
        let spec = self.spec;
        match self.direction {
            Direction::Forward => {
                r.upper
                    .as_ref()
                    .is_some_and(|b| match spec.cmp_values(values, &b.values) {
                        Ordering::Greater => true,
                        Ordering::Equal => !b.inclusive,
                        Ordering::Less => false,
                    })
            }
            Direction::Backward => {
                r.lower
                    .as_ref()
                    .is_some_and(|b| match spec.cmp_values(values, &b.values) {
                        Ordering::Less => true,
                        Ordering::Equal => !b.inclusive,
                        Ordering::Greater => false,
                    })
            }
        }
    }
}

/// A scan of one index.
pub struct BtreeScan {
    idx: IndexDesc,
    keys: ScanKeys,
    direction: Direction,
    want_keys: bool,
    /// Each batch keeps its leaf pinned ([`Batch::pinned`]).
    keep_pins: bool,
    /// The range being scanned: its position in scan order.
    range: usize,
    resume: Resume,
    /// Leaf pages read, and descents from the root.
    pub leaf_pages: u64,
    pub descents: u64,
    /// Pages a backward step moved right over because the page on its
    /// left had split since (see [`BtreeScan::step_left`]).
    pub left_steps_repaired: u64,
    /// Leaf pages taken from the read-ahead stream (of `leaf_pages`).
    pub leaf_pages_read_ahead: u64,
    /// None: each leaf is read when the scan gets there.
    read_ahead: Option<LeafReadAhead>,
}

impl BtreeScan {
    /// The index scanned.
    pub fn index(&self) -> &IndexDesc {
        &self.idx
    }

    pub fn new(idx: IndexDesc, keys: ScanKeys, direction: Direction, want_keys: bool) -> BtreeScan {
        let resume = if keys.ranges.is_empty() {
            Resume::Done
        } else {
            Resume::Descend
        };
        BtreeScan {
            idx,
            keys,
            direction,
            want_keys,
            keep_pins: false,
            range: 0,
            resume,
            leaf_pages: 0,
            descents: 0,
            left_steps_repaired: 0,
            leaf_pages_read_ahead: 0,
            read_ahead: None,
        }
    }

    /// Makes the scan read leaf pages ahead through a read stream sized
    /// by `limits` once a range has moved across a few (see
    /// `readahead.rs`); with an `effective_io_concurrency` of 0 it reads
    /// none ahead. The caller then ends the scan with
    /// [`BtreeScan::release`] if it stops before the scan's end.
    pub fn reading_leaves_ahead(mut self, limits: StreamLimits) -> BtreeScan {
        if limits.effective_io_concurrency > 0 {
            self.read_ahead = Some(LeafReadAhead::new(limits));
        }
        self
    }

    /// Times read-ahead stopped for the rest of a range because the link
    /// chain named another leaf than its stream held next (a split).
    pub fn leaf_read_ahead_abandoned(&self) -> u64 {
        self.read_ahead.as_ref().map_or(0, |a| a.abandoned)
    }

    /// Lets go of the leaves read ahead. The scan does so itself at its
    /// end and when it fails; a caller that stops earlier (a LIMIT, a
    /// rescan) calls this. The scan may still go on afterwards, and read
    /// ahead again.
    pub fn release(&mut self, s: &mut BufferSession) {
        if let Some(ahead) = &mut self.read_ahead {
            ahead.release(s);
        }
    }

    /// Makes each batch keep its leaf pinned for the caller to release
    /// (an index-only scan, which must look its entries up in the
    /// visibility map while VACUUM cannot remove them).
    pub fn keeping_leaf_pins(mut self) -> BtreeScan {
        self.keep_pins = true;
        self
    }

    pub fn direction(&self) -> Direction {
        self.direction
    }

    /// Starts again, with new keys (the inner side of a nested loop).
    /// Leaves read ahead for the last run are let go by
    /// [`BtreeScan::release`] or, at the latest, by the first descent.
    pub fn rescan(&mut self, keys: ScanKeys) {
        self.resume = if keys.ranges.is_empty() {
            Resume::Done
        } else {
            Resume::Descend
        };
        self.keys = keys;
        self.range = 0;
    }

    /// The current range, in scan order.
    fn current(&self) -> &KeyRange {
        current_range(&self.keys, self.range, self.direction)
    }

    /// Where the current range starts in scan order, as a target.
    fn start_target(&self) -> Target {
        let r = self.current();
        match self.direction {
            Direction::Forward => match &r.lower {
                None => Target::before(Vec::new()),
                Some(b) if b.inclusive => Target::before(b.values.clone()),
                Some(b) => Target::after(b.values.clone()),
            },
            Direction::Backward => match &r.upper {
                None => Target::after(Vec::new()),
                Some(b) if b.inclusive => Target::after(b.values.clone()),
                Some(b) => Target::before(b.values.clone()),
            },
        }
    }

    /// The current range's far end.
    fn range_end(&self) -> RangeEnd<'_> {
        RangeEnd::of(&self.idx.spec, &self.keys, self.range, self.direction)
    }

    /// True if `values` lie past the current range's far end.
    fn past_end(&self, values: &[Value]) -> bool {
        self.range_end().past(values)
    }

    /// The next batch of matches, or None when the scan is done.
    pub fn next_batch(
        &mut self,
        bt: &Btree,
        s: &mut BufferSession,
    ) -> Result<Option<Batch>, BtreeError> {
        let batch = self.next_batch_inner(bt, s);
        // At the scan's end, and when it failed (its caller will not go
        // on), nothing read ahead stays pinned: only a batch's own leaf,
        // for a scan keeping leaf pins.
        if batch.is_err() || self.resume == Resume::Done {
            self.release(s);
        }
        batch
    }

    /// [`BtreeScan::next_batch`]. Pages without a match are passed over:
    /// the loop ends because each turn moves to another page in the
    /// scan's direction (links never loop: `verify` checks it) or descends
    /// for a later range.
    fn next_batch_inner(
        &mut self,
        bt: &Btree,
        s: &mut BufferSession,
    ) -> Result<Option<Batch>, BtreeError> {
        loop {
            if let Resume::Right(block) | Resume::Left { left: block, .. } = self.resume {
                s.pool().aio().injections().hit(
                    crate::inject::BTREE_SCAN_BETWEEN_PAGES,
                    crate::inject::HitContext {
                        offset: block as u64,
                    },
                );
            }
            let (page, mut from) = match self.resume {
                Resume::Done => return Ok(None),
                Resume::Descend => {
                    self.descents += 1;
                    let target = self.start_target();
                    if let Some(ahead) = &mut self.read_ahead {
                        // Before any page is locked: letting go of what
                        // the last range read ahead may wait for reads.
                        ahead.new_range(s, 0);
                    }
                    let (leaf, stack) = bt.find(s, &self.idx, &target, 0, LockMode::Shared)?;
                    if let Some(ahead) = &mut self.read_ahead {
                        // The last page passed on the way down is the
                        // leaf's parent, whose downlinks it feeds from.
                        ahead.descended_through(stack.last().copied());
                    }
                    let at = self.position(&leaf, &target);
                    (leaf, Some(at))
                }
                Resume::Right(block) => (self.lock_leaf(bt, s, block)?, None),
                Resume::Left { left, from } => (self.step_left(bt, s, left, from)?, None),
            };
            if !Special::read(page.guard.page()).is_leaf() {
                let block = page.block;
                page.release(s);
                return Err(BtreeError::damaged(
                    "a leaf's sibling link leads to a page that is not a leaf",
                )
                .named(&self.idx, block));
            }
            self.leaf_pages += 1;
            if let Some(ahead) = &mut self.read_ahead {
                ahead.leaf_read();
            }
            let range = self.range;
            let mut batch = Batch {
                block: page.block,
                items: Vec::new(),
                pinned: None,
            };
            let visited = self.visit(&page, &mut from, &mut batch);
            if self.keep_pins && visited.is_ok() && !batch.items.is_empty() {
                drop(page.guard);
                batch.pinned = Some(page.id);
            } else {
                page.release(s);
            }
            visited?;
            if self.range != range && self.resume != Resume::Done {
                if let Some(ahead) = &mut self.read_ahead {
                    // The next range starts on this page (or descends, which
                    // counts again): the leaves read ahead were the last
                    // range's.
                    ahead.new_range(s, 1);
                }
            }
            if !batch.items.is_empty() {
                return Ok(Some(batch));
            }
        }
    }

    /// Locks leaf `block`, which the link chain names next: the buffer
    /// read ahead, if read-ahead has it, else read now.
    fn lock_leaf(
        &mut self,
        bt: &Btree,
        s: &mut BufferSession,
        block: u32,
    ) -> Result<Locked, BtreeError> {
        if let Some(ahead) = &mut self.read_ahead {
            let end = RangeEnd::of(&self.idx.spec, &self.keys, self.range, self.direction);
            if let Some(id) = ahead.next_leaf(bt, s, &self.idx, &end, block)? {
                self.leaf_pages_read_ahead += 1;
                return Ok(bt.lock_pinned(s, self.idx.rel, block, id, LockMode::Shared));
            }
        }
        bt.lock_at(s, self.idx.rel, block, LockMode::Shared)
    }

    /// Where on `leaf` the range that `target` starts begins: the first
    /// tuple at or after it going forward; going backward, the line
    /// pointer past the last tuple before it.
    fn position(&self, leaf: &Locked, target: &Target) -> Result<usize, BtreeError> {
        let page = leaf.guard.page();
        let first = Special::read(page).first_data();
        lower_bound(&self.idx.spec, page, first, target, &mut Vec::new())
            .map_err(|e| e.named(&self.idx, leaf.block))
    }

    /// Collects the matches of `page` into `batch`, from `from` (None:
    /// the page's start in scan order), going on to the next ranges while
    /// they start on this page, and sets where the scan resumes.
    fn visit(
        &mut self,
        page: &Locked,
        from: &mut Option<Result<usize, BtreeError>>,
        batch: &mut Batch,
    ) -> Result<(), BtreeError> {
        let p = page.guard.page();
        let sp = Special::read(p);
        let first = sp.first_data();
        let count = line_pointer_count(p);
        let named = |e: BtreeError| e.named(&self.idx, page.block);
        let mut at = match from.take() {
            Some(at) => at?,
            None => match self.direction {
                Direction::Forward => first,
                Direction::Backward => count,
            },
        };
        let mut values = Vec::new();
        loop {
            // Through the current range on this page.
            let mut range_done = false;
            match self.direction {
                Direction::Forward => {
                    while at < count {
                        let t = page_tuple(p, at).map_err(named)?;
                        tuple_values(&self.idx.spec, t, &mut values).map_err(named)?;
                        if self.past_end(&values) {
                            range_done = true;
                            break;
                        }
                        self.push(batch, pointer(t), &values);
                        at += 1;
                    }
                }
                Direction::Backward => {
                    while at > first {
                        let t = page_tuple(p, at - 1).map_err(named)?;
                        tuple_values(&self.idx.spec, t, &mut values).map_err(named)?;
                        if self.past_end(&values) {
                            range_done = true;
                            break;
                        }
                        self.push(batch, pointer(t), &values);
                        at -= 1;
                    }
                }
            }
            if !range_done && !self.high_key_past_end(p, &sp, &mut values).map_err(named)? {
                // The page ended before the range did.
                let next = match self.direction {
                    Direction::Forward => sp.next,
                    Direction::Backward => sp.prev,
                };
                self.resume = match (next, self.direction) {
                    (NO_PAGE, _) => Resume::Done,
                    (block, Direction::Forward) => Resume::Right(block),
                    (left, Direction::Backward) => Resume::Left {
                        left,
                        from: page.block,
                    },
                };
                return Ok(());
            }
            self.range += 1;
            if self.range == self.keys.ranges.len() {
                self.resume = Resume::Done;
                return Ok(());
            }
            // The next range: on this page if it starts here, else from
            // the root (a page to the right or left is not revisited).
            let target = self.start_target();
            let mut scratch = Vec::new();
            match self.direction {
                Direction::Forward => {
                    if beyond_high_key(&self.idx.spec, p, &target, &mut scratch).map_err(named)? {
                        self.resume = Resume::Descend;
                        return Ok(());
                    }
                    at =
                        lower_bound(&self.idx.spec, p, at, &target, &mut scratch).map_err(named)?;
                }
                Direction::Backward => {
                    let end = lower_bound(&self.idx.spec, p, first, &target, &mut scratch)
                        .map_err(named)?;
                    if end <= first {
                        self.resume = Resume::Descend;
                        return Ok(());
                    }
                    at = end.min(at);
                }
            }
        }
    }

    /// True if a forward scan's range ends before `p`'s right sibling:
    /// the high key, a lower bound of every key to the right, lies past
    /// its end. A range ending with the page's last tuple then does not
    /// read the next leaf to find that out (PostgreSQL's forward scans
    /// check the high key so too); going backward a page has no such
    /// bound.
    fn high_key_past_end(
        &self,
        p: &PageBytes,
        sp: &Special,
        scratch: &mut Vec<Value>,
    ) -> Result<bool, BtreeError> {
        if self.direction == Direction::Backward || sp.is_rightmost() {
            return Ok(false);
        }
        tuple_values(&self.idx.spec, page_tuple(p, 0)?, scratch)?;
        Ok(self.past_end(scratch))
    }

    fn push(&self, batch: &mut Batch, tid: Tid, values: &[Value]) {
        batch.items.push(BatchItem {
            tid,
            key: if self.want_keys {
                values.to_vec()
            } else {
                Vec::new()
            },
        });
    }

    /// Locks the page left of `from` for a backward scan: `left` as it
    /// was when `from` was read, or, if `left` split since, the page split
    /// off it that now links to `from`.
    fn step_left(
        &mut self,
        bt: &Btree,
        s: &mut BufferSession,
        left: u32,
        from: u32,
    ) -> Result<Locked, BtreeError> {
        // Read ahead only if it is `left` itself, the page locked first.
        let mut at = self.lock_leaf(bt, s, left)?;
        for _ in 0..MOVE_RIGHT_MAX {
            let next = Special::read(at.guard.page()).next;
            if next == from {
                return Ok(at);
            }
            let block = at.block;
            at.release(s);
            self.left_steps_repaired += 1;
            if next == NO_PAGE {
                return Err(BtreeError::damaged(&format!(
                    "no page left of block {from} links to it"
                ))
                .named(&self.idx, block));
            }
            at = bt.lock_at(s, self.idx.rel, next, LockMode::Shared)?;
        }
        let block = at.block;
        at.release(s);
        Err(
            BtreeError::damaged("moved right too often looking for a left sibling")
                .named(&self.idx, block),
        )
    }
}

/// Range `range` of `keys` in scan order.
fn current_range(keys: &ScanKeys, range: usize, direction: Direction) -> &KeyRange {
    match direction {
        Direction::Forward => &keys.ranges[range],
        Direction::Backward => &keys.ranges[keys.ranges.len() - 1 - range],
    }
}
