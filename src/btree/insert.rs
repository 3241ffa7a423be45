//! Descent, insertion and splits (see the module comment in `mod.rs` for
//! the locking rules).

use crate::buffer::{BufferId, BufferSession, LockMode, PageGuard};
use crate::heap::tuple::Tid;
use crate::page::{free_space, line_pointer_count, LINE_POINTER_SIZE, MAX_ALIGN, PAGE_HEADER_SIZE};
use crate::storage::BLOCK_SIZE;
use crate::types::Value;

use super::change::{apply_logged, log_rewrite, BtreeChange, BTREE_NEW_ROOT, BTREE_SPLIT};
use super::page::{
    beyond_high_key, child_index, decode_tuple, init_btree_page, leaf_tuple, lower_bound,
    minus_infinity, page_tuple, pivot_of, pointer, Meta, Special, Target, FLAG_LEAF, FLAG_ROOT,
    MAX_TUPLE_SIZE, META_BLOCK, NO_PAGE, SPECIAL_SIZE,
};
use super::{
    key_text, Btree, BtreeError, IndexDesc, Liveness, UniqueCheck, LEVELS_MAX, MOVE_RIGHT_MAX,
    UNIQUE_RETRIES_MAX,
};

/// Bytes of a page that tuples and their line pointers may use.
pub(super) const USABLE_BYTES: usize = BLOCK_SIZE - PAGE_HEADER_SIZE - SPECIAL_SIZE;
/// How full a split leaves the left half when the new tuple goes to the
/// end of the rightmost page (keys inserted in ascending order), so that
/// such an index ends up as full as a built one rather than half full
/// (PostgreSQL's leaf fillfactor 90 and internal 70).
const RIGHTMOST_SPLIT_LEAF_PERCENT: usize = 90;
const RIGHTMOST_SPLIT_INTERNAL_PERCENT: usize = 70;

/// A page found by a descent: its block, buffer and lock.
pub(super) struct Locked {
    pub block: u32,
    pub id: BufferId,
    pub guard: PageGuard,
}

impl Locked {
    pub fn release(self, s: &mut BufferSession) {
        drop(self.guard);
        s.release(self.id);
    }
}

/// Bytes a tuple takes on a page, its line pointer included.
pub(super) fn space_of(tuple: &[u8]) -> usize {
    space_of_len(tuple.len())
}

/// Bytes a tuple of `len` bytes takes on a page, its line pointer
/// included.
pub(super) fn space_of_len(len: usize) -> usize {
    len.next_multiple_of(MAX_ALIGN) + LINE_POINTER_SIZE
}

/// The target a pivot stands for (its key and heap TID).
fn target_of(idx: &IndexDesc, pivot: &[u8]) -> Result<Target, BtreeError> {
    let t = decode_tuple(&idx.spec, pivot)?;
    let tid = t
        .heap_tid
        .ok_or_else(|| BtreeError::damaged("a downlink without a key"))?;
    Ok(Target::exact(t.values, tid))
}

/// How a descent to `level` locks a page at `page_level`: the page it
/// looks for in the caller's mode, those above it shared.
fn descent_mode(page_level: u32, level: u32, mode: LockMode) -> LockMode {
    if page_level == level {
        mode
    } else {
        LockMode::Shared
    }
}

impl Btree {
    /// Creates the metapage and an empty root leaf of a new index file.
    pub fn create_empty(&self, s: &mut BufferSession, idx: &IndexDesc) -> Result<(), BtreeError> {
        let mut meta = self.new_page(s, idx.rel)?;
        let mut root = self.new_page(s, idx.rel)?;
        assert_eq!((meta.0, root.0), (0, 1), "an empty index's first blocks");
        Meta { root: 1, level: 0 }.write(meta.2.page_mut());
        init_btree_page(
            root.2.page_mut(),
            Special {
                prev: NO_PAGE,
                next: NO_PAGE,
                level: 0,
                flags: FLAG_LEAF | FLAG_ROOT,
            },
        );
        let result = log_rewrite(
            &self.wal,
            idx.rel,
            super::change::BTREE_BUILD,
            &mut [(0, meta.2.page_mut()), (1, root.2.page_mut())],
        );
        for (_, id, guard) in [meta, root] {
            drop(guard);
            s.release(id);
        }
        result.map(|_| ())?;
        Ok(())
    }

    /// Moves right from `at` while `target` lies at or past the page's
    /// high key. With `couple`, the next page is locked before the
    /// current one is let go (a unique insertion must never leave a gap
    /// another inserter of its key could pass through).
    fn move_right(
        &self,
        s: &mut BufferSession,
        idx: &IndexDesc,
        target: &Target,
        mut at: Locked,
        mode: LockMode,
        couple: bool,
    ) -> Result<Locked, BtreeError> {
        let mut scratch = Vec::new();
        for _ in 0..MOVE_RIGHT_MAX {
            let beyond = beyond_high_key(&idx.spec, at.guard.page(), target, &mut scratch)
                .map_err(|e| e.named(idx, at.block));
            match beyond {
                Ok(false) => return Ok(at),
                Ok(true) => {}
                Err(e) => {
                    at.release(s);
                    return Err(e);
                }
            }
            let next = Special::read(at.guard.page()).next;
            if couple {
                let locked = self.lock_at(s, idx.rel, next, mode);
                at.release(s);
                at = locked?;
            } else {
                at.release(s);
                at = self.lock_at(s, idx.rel, next, mode)?;
            }
        }
        let block = at.block;
        at.release(s);
        Err(BtreeError::damaged(&format!("moved right {MOVE_RIGHT_MAX} pages")).named(idx, block))
    }

    /// Descends from the root to the page of `level` where `target`
    /// belongs, returning it locked in `mode` (internal pages on the way
    /// are locked shared, one at a time) and the blocks passed on the way
    /// down, the root first.
    pub(super) fn find(
        &self,
        s: &mut BufferSession,
        idx: &IndexDesc,
        target: &Target,
        level: u32,
        mode: LockMode,
    ) -> Result<(Locked, Vec<u32>), BtreeError> {
        let (mut at, root) = self.lock_root(s, idx, level, mode)?;
        let mut block_level = root.level;
        let mut stack = Vec::new();
        let mut scratch = Vec::new();
        for _ in 0..=LEVELS_MAX {
            let page_mode = descent_mode(block_level, level, mode);
            let moved = self.move_right(s, idx, target, at, page_mode, false)?;
            let sp = Special::read(moved.guard.page());
            if sp.level != block_level {
                let b = moved.block;
                moved.release(s);
                return Err(BtreeError::damaged(&format!(
                    "level {} where {block_level} was expected",
                    sp.level
                ))
                .named(idx, b));
            }
            if block_level == level {
                return Ok((moved, stack));
            }
            let child = child_index(&idx.spec, moved.guard.page(), target, &mut scratch)
                .and_then(|i| page_tuple(moved.guard.page(), i).map(pointer));
            let here = moved.block;
            moved.release(s);
            let child = child.map_err(|e| e.named(idx, here))?;
            stack.push(here);
            block_level -= 1;
            at = self.lock_at(
                s,
                idx.rel,
                child.block,
                descent_mode(block_level, level, mode),
            )?;
        }
        let block = at.block;
        at.release(s);
        Err(BtreeError::damaged("more levels than a tree may have").named(idx, block))
    }

    /// The root, locked as [`Btree::find`] locks a page of its level, and
    /// its level: the hinted root ([`super::RootHint`]) while it is still
    /// the root, else the one the metapage names. A root that split lost
    /// its mark (as both halves do), and the metapage names the root above
    /// it. A hint below `level` is not used: a downlink for a root that
    /// just split goes in the new root.
    fn lock_root(
        &self,
        s: &mut BufferSession,
        idx: &IndexDesc,
        level: u32,
        mode: LockMode,
    ) -> Result<(Locked, Meta), BtreeError> {
        if let Some(hint) = idx.root.get().filter(|h| h.level >= level) {
            let at = self.lock_at(s, idx.rel, hint.root, descent_mode(hint.level, level, mode))?;
            let sp = Special::read(at.guard.page());
            if sp.flags & FLAG_ROOT != 0 && sp.level == hint.level {
                return Ok((at, hint));
            }
            at.release(s);
        }
        let meta = self.root_from_meta(s, idx)?;
        if meta.level < level {
            return Err(BtreeError::damaged("a level above the root was looked for").named(idx, 0));
        }
        let at = self.lock_at(s, idx.rel, meta.root, descent_mode(meta.level, level, mode))?;
        Ok((at, meta))
    }

    /// Inserts the entry (`values`, `tid`) for a heap row. For a unique
    /// index `check` answers whether rows with an equal key live (see
    /// the module comment).
    pub fn insert(
        &self,
        s: &mut BufferSession,
        idx: &IndexDesc,
        values: &[Value],
        tid: Tid,
        check: Option<&mut dyn UniqueCheck>,
    ) -> Result<(), BtreeError> {
        let tuple = leaf_tuple(&idx.spec, values, tid)?;
        if tuple.len() > MAX_TUPLE_SIZE {
            return Err(BtreeError::TupleTooLarge {
                index: idx.name.clone(),
                size: tuple.len(),
                max: MAX_TUPLE_SIZE,
            });
        }
        let exact = Target::exact(values.to_vec(), tid);
        let unique = idx.unique && !values.iter().any(Value::is_null);
        let Some(check) = check.filter(|_| unique) else {
            let (leaf, stack) = self.find(s, idx, &exact, 0, LockMode::Exclusive)?;
            return self.insert_at(s, idx, leaf, stack, &tuple, &exact);
        };
        let first = Target::before(values.to_vec());
        for _ in 0..UNIQUE_RETRIES_MAX {
            let (mut leaf, stack) = self.find(s, idx, &first, 0, LockMode::Exclusive)?;
            match self.find_equal_live(s, idx, &mut leaf, &first, check) {
                Ok(None) => {
                    let leaf = self.move_right(s, idx, &exact, leaf, LockMode::Exclusive, true)?;
                    return self.insert_at(s, idx, leaf, stack, &tuple, &exact);
                }
                Ok(Some(xid)) => {
                    leaf.release(s);
                    check.wait_for(xid)?;
                }
                Err(e) => {
                    leaf.release(s);
                    return Err(e);
                }
            }
        }
        Err(BtreeError::UniqueRetries {
            index: idx.name.clone(),
            tries: UNIQUE_RETRIES_MAX,
        })
    }

    /// Looks at every tuple whose key equals `first`'s (where they start:
    /// [`Target::before`] the key) from `leaf` (locked exclusively) on,
    /// moving right under shared locks. A live row is a unique violation;
    /// a row whose transaction runs is returned to wait for. Entries of
    /// `leaf` whose rows are dead to every snapshot are removed on the
    /// way (PostgreSQL marks them LP_DEAD here and deletes them before a
    /// split): an UPDATE of one row leaves an entry per version, and each
    /// later update's check would otherwise read every one of them.
    fn find_equal_live(
        &self,
        s: &mut BufferSession,
        idx: &IndexDesc,
        leaf: &mut Locked,
        first: &Target,
        check: &mut dyn UniqueCheck,
    ) -> Result<Option<crate::txn::Xid>, BtreeError> {
        let values = &first.values;
        let mut block = leaf.block;
        let mut right: Option<Locked> = None;
        // Line pointers of `leaf` whose rows are dead to everyone.
        let mut removable: Vec<u16> = Vec::new();
        for _ in 0..MOVE_RIGHT_MAX {
            let on_leaf = right.is_none();
            let page = match &right {
                Some(r) => r.guard.page(),
                None => leaf.guard.page(),
            };
            let next = Special::read(page).next;
            // Copied under the page's lock, asked about after (a liveness
            // check reads the heap); the page is let go on every path.
            let verdict = equal_on_page(idx, page, first)
                .map_err(|e| e.named(idx, block))
                .and_then(|(equal, more)| {
                    for (at, tid) in equal {
                        match check.liveness(s, tid)? {
                            Liveness::Dead { removable: true } if on_leaf => removable.push(at),
                            Liveness::Dead { .. } => {}
                            Liveness::Live => {
                                return Err(BtreeError::UniqueViolation {
                                    index: idx.name.clone(),
                                    columns: idx.column_names.join(", "),
                                    values: key_text(values),
                                })
                            }
                            Liveness::InProgress(xid) => return Ok(Some(Some(xid))),
                        }
                    }
                    Ok((!more || next == NO_PAGE).then_some(None))
                });
            if let Some(r) = right.take() {
                r.release(s);
            }
            match verdict? {
                Some(None) => {
                    self.remove_on_locked(s, idx, leaf, removable)?;
                    return Ok(None);
                }
                Some(waiting) => return Ok(waiting),
                None => {}
            }
            block = next;
            right = Some(self.lock_at(s, idx.rel, next, LockMode::Shared)?);
        }
        if let Some(r) = right.take() {
            r.release(s);
        }
        Err(BtreeError::damaged("equal keys over too many pages").named(idx, block))
    }

    /// Inserts `tuple` at its place on `at` (locked exclusively, the page
    /// `target` belongs on), splitting it if it is full. Lets `at` go.
    fn insert_at(
        &self,
        s: &mut BufferSession,
        idx: &IndexDesc,
        mut at: Locked,
        stack: Vec<u32>,
        tuple: &[u8],
        target: &Target,
    ) -> Result<(), BtreeError> {
        let mut scratch = Vec::new();
        let page = at.guard.page();
        let first = Special::read(page).first_data();
        let pos = match lower_bound(&idx.spec, page, first, target, &mut scratch) {
            Ok(pos) => pos,
            Err(e) => {
                let block = at.block;
                at.release(s);
                return Err(e.named(idx, block));
            }
        };
        if free_space(page) >= space_of(tuple) {
            let change = BtreeChange::Insert {
                index: pos as u16,
                tuple,
            };
            let logged = apply_logged(&self.wal, at.guard.page_mut(), idx.rel, at.block, &change);
            at.release(s);
            logged?;
            return Ok(());
        }
        let split = self.split(s, idx, &mut at, pos, tuple);
        let result = split.and_then(|(downlink, level)| {
            s.pool().aio().injections().hit(
                crate::inject::BTREE_SPLIT_BEFORE_DOWNLINK,
                crate::inject::HitContext {
                    offset: at.block as u64,
                },
            );
            self.insert_downlink(s, idx, at.block, level, stack, downlink)
        });
        // The left half is held until its new sibling has a downlink.
        at.release(s);
        result
    }

    /// Splits `at` (locked exclusively) while inserting `tuple` at line
    /// pointer `pos`: a new right sibling takes the upper part. Returns the
    /// new page's downlink for the parent and the level split. `at` stays
    /// locked.
    fn split(
        &self,
        s: &mut BufferSession,
        idx: &IndexDesc,
        at: &mut Locked,
        pos: usize,
        tuple: &[u8],
    ) -> Result<(Vec<u8>, u32), BtreeError> {
        let page = at.guard.page();
        let sp = Special::read(page);
        let first = sp.first_data();
        let count = line_pointer_count(page);
        let mut items = Vec::with_capacity(count + 1 - first);
        for i in first..count {
            items.push(
                page_tuple(page, i)
                    .map_err(|e| e.named(idx, at.block))?
                    .to_vec(),
            );
        }
        items.insert(pos - first, tuple.to_vec());
        let old_high = (!sp.is_rightmost())
            .then(|| page_tuple(page, 0).map(<[u8]>::to_vec))
            .transpose()
            .map_err(|e| e.named(idx, at.block))?;
        let k = split_point(&items, old_high.as_deref(), &sp, pos - first);
        let (right_block, right_id, mut right_guard) = self.new_page(s, idx.rel)?;
        let mut sibling = None;
        if !sp.is_rightmost() {
            match self.lock_block(s, idx.rel, sp.next, LockMode::Exclusive) {
                Ok(locked) => sibling = Some(locked),
                Err(e) => {
                    drop(right_guard);
                    s.release(right_id);
                    return Err(e);
                }
            }
        }
        let flags = sp.flags & !FLAG_ROOT;
        let mut left = Box::new([0u8; BLOCK_SIZE]);
        init_btree_page(
            &mut left,
            Special {
                prev: sp.prev,
                next: right_block,
                level: sp.level,
                flags,
            },
        );
        let mut filled = crate::page::insert_item_at(&mut left, 0, &pivot_of(&items[k], 0));
        for t in &items[..k] {
            let end = line_pointer_count(&left);
            filled &= crate::page::insert_item_at(&mut left, end, t);
        }
        let right = right_guard.page_mut();
        init_btree_page(
            right,
            Special {
                prev: at.block,
                next: sp.next,
                level: sp.level,
                flags,
            },
        );
        if let Some(high) = &old_high {
            filled &= crate::page::insert_item_at(right, 0, high);
        }
        for (j, t) in items[k..].iter().enumerate() {
            // An internal page's first data tuple is minus infinity: its
            // key goes up to the parent as the new page's downlink.
            let t = if j == 0 && !sp.is_leaf() {
                minus_infinity(pointer(t).block)
            } else {
                t.clone()
            };
            let end = line_pointer_count(right);
            filled &= crate::page::insert_item_at(right, end, &t);
        }
        assert!(
            filled,
            "a split of block {} of {} overfilled a half",
            at.block, idx.name
        );
        let lsn = crate::page::page_lsn(at.guard.page());
        crate::page::set_page_lsn(&mut left, lsn);
        let left_page = at.guard.page_mut();
        left_page.copy_from_slice(&left[..]);
        let mut pages: Vec<(u32, &mut crate::page::PageBytes)> =
            vec![(at.block, left_page), (right_block, right_guard.page_mut())];
        let mut sibling_parts = sibling;
        if let Some((_, guard)) = sibling_parts.as_mut() {
            let sib = guard.page_mut();
            let mut ssp = Special::read(sib);
            ssp.prev = right_block;
            ssp.write(sib);
            pages.push((sp.next, sib));
        }
        let logged = log_rewrite(&self.wal, idx.rel, BTREE_SPLIT, &mut pages);
        drop(pages);
        if let Some((id, guard)) = sibling_parts {
            drop(guard);
            s.release(id);
        }
        drop(right_guard);
        s.release(right_id);
        logged?;
        Ok((pivot_of(&items[k], right_block), sp.level))
    }

    /// Inserts the downlink of a page just split off `child` (still
    /// locked by the caller) into the parent: the page passed on the way
    /// down (moving right if it split since), the one a descent finds if
    /// the child was the root then and is not now, or a new root.
    fn insert_downlink(
        &self,
        s: &mut BufferSession,
        idx: &IndexDesc,
        child: u32,
        child_level: u32,
        mut stack: Vec<u32>,
        downlink: Vec<u8>,
    ) -> Result<(), BtreeError> {
        let target = target_of(idx, &downlink).map_err(|e| e.named(idx, child))?;
        let parent = match stack.pop() {
            Some(block) => {
                let at = self.lock_at(s, idx.rel, block, LockMode::Exclusive)?;
                self.move_right(s, idx, &target, at, LockMode::Exclusive, false)?
            }
            None => {
                let (meta_id, mut meta_guard) =
                    self.lock_block(s, idx.rel, META_BLOCK, LockMode::Exclusive)?;
                let meta = Meta::read(meta_guard.page());
                match meta {
                    Some(meta) if meta.root == child => {
                        let made =
                            self.new_root(s, idx, &mut meta_guard, meta, child, Some(&downlink));
                        drop(meta_guard);
                        s.release(meta_id);
                        return made;
                    }
                    Some(meta) if meta.level > child_level => {
                        drop(meta_guard);
                        s.release(meta_id);
                        self.find(s, idx, &target, child_level + 1, LockMode::Exclusive)?
                            .0
                    }
                    Some(meta) if meta.level == child_level => {
                        // The root split before and its new root never
                        // came (a crash, or a full disk, between the two):
                        // the root has siblings but no parent. Give it one
                        // now, over the root alone (its siblings are
                        // reachable through its right-link, as any page
                        // whose downlink is missing), then insert this
                        // downlink into it as into any parent.
                        let made = self.new_root(s, idx, &mut meta_guard, meta, meta.root, None);
                        drop(meta_guard);
                        s.release(meta_id);
                        made?;
                        self.find(s, idx, &target, child_level + 1, LockMode::Exclusive)?
                            .0
                    }
                    _ => {
                        drop(meta_guard);
                        s.release(meta_id);
                        return Err(BtreeError::damaged(
                            "the metapage's root is below a page that split",
                        )
                        .named(idx, child));
                    }
                }
            }
        };
        self.insert_at(s, idx, parent, stack, &downlink, &target)
    }

    /// Makes a new root over the old one (`child`) and the page split off
    /// it (its `downlink`, if given), and points the metapage (locked
    /// exclusively) at it.
    fn new_root(
        &self,
        s: &mut BufferSession,
        idx: &IndexDesc,
        meta_guard: &mut PageGuard,
        meta: Meta,
        child: u32,
        downlink: Option<&[u8]>,
    ) -> Result<(), BtreeError> {
        let (root, root_id, mut root_guard) = self.new_page(s, idx.rel)?;
        let page = root_guard.page_mut();
        init_btree_page(
            page,
            Special {
                prev: NO_PAGE,
                next: NO_PAGE,
                level: meta.level + 1,
                flags: FLAG_ROOT,
            },
        );
        let filled = crate::page::insert_item_at(page, 0, &minus_infinity(child))
            && downlink.is_none_or(|d| crate::page::insert_item_at(page, 1, d));
        assert!(filled, "a new root of {} overfilled", idx.name);
        let lsn = crate::page::page_lsn(meta_guard.page());
        let meta_page = meta_guard.page_mut();
        Meta {
            root,
            level: meta.level + 1,
        }
        .write(meta_page);
        crate::page::set_page_lsn(meta_page, lsn);
        let logged = log_rewrite(
            &self.wal,
            idx.rel,
            BTREE_NEW_ROOT,
            &mut [(root, root_guard.page_mut()), (META_BLOCK, meta_page)],
        );
        drop(root_guard);
        s.release(root_id);
        logged?;
        Ok(())
    }
}

/// The tuples of `page` whose key equals `first`'s (a
/// [`Target::before`] the key), each as its line pointer and heap TID,
/// and whether equal keys may go on to the right sibling (the page ends
/// with one and its high key is not above them).
fn equal_on_page(
    idx: &IndexDesc,
    page: &crate::page::PageBytes,
    first: &Target,
) -> Result<(Vec<(u16, Tid)>, bool), BtreeError> {
    debug_assert!(!first.after_equal && first.tid.is_none(), "{first:?}");
    let (spec, values) = (&idx.spec, &first.values);
    let mut scratch = Vec::new();
    let sp = Special::read(page);
    let from = lower_bound(spec, page, sp.first_data(), first, &mut scratch)?;
    let mut equal = Vec::new();
    for i in from..line_pointer_count(page) {
        let t = page_tuple(page, i)?;
        super::page::tuple_values(spec, t, &mut scratch)?;
        if spec.cmp_values(values, &scratch) != std::cmp::Ordering::Equal {
            return Ok((equal, false));
        }
        equal.push((i as u16, pointer(t)));
    }
    if sp.is_rightmost() {
        return Ok((equal, false));
    }
    // A high key above the key: nothing equal lies right of here (pages
    // vacuum emptied are not walked).
    super::page::tuple_values(spec, page_tuple(page, 0)?, &mut scratch)?;
    let more = spec.cmp_values(values, &scratch) != std::cmp::Ordering::Less;
    Ok((equal, more))
}

/// Where a full page's `items` (data tuples, the new one at `new_at`)
/// split: the first that goes right. Both halves must fit with their high
/// keys; among the points where they do, the one nearest to the goal:
/// half the bytes, or, when the new tuple is the last of the rightmost
/// page, a full left half.
fn split_point(items: &[Vec<u8>], old_high: Option<&[u8]>, sp: &Special, new_at: usize) -> usize {
    let n = items.len();
    assert!(n >= 2, "a split of {n} tuples");
    let total: usize = items.iter().map(|t| space_of(t)).sum();
    let goal = if sp.is_rightmost() && new_at == n - 1 {
        let percent = if sp.is_leaf() {
            RIGHTMOST_SPLIT_LEAF_PERCENT
        } else {
            RIGHTMOST_SPLIT_INTERNAL_PERCENT
        };
        USABLE_BYTES * percent / 100
    } else {
        total / 2
    };
    let old_high = old_high.map_or(0, space_of);
    let mut best = None;
    let mut left = 0;
    for k in 1..n {
        left += space_of(&items[k - 1]);
        // The left half's high key is a pivot of the first right tuple.
        let left_bytes = left + space_of(&items[k]) + 8;
        let right_bytes = total - left + old_high;
        if left_bytes > USABLE_BYTES || right_bytes > USABLE_BYTES {
            continue;
        }
        let distance = left_bytes.abs_diff(goal);
        if best.is_none_or(|(_, d)| distance < d) {
            best = Some((k, distance));
        }
    }
    best.expect("a tuple of at most a third of a page always leaves a split point")
        .0
}
