//! HOT chains: PostgreSQL's heap-only tuples (`src/backend/access/heap/
//! README.HOT`), the versions of a row that an update put on the same
//! page without giving any index an entry for them.
//!
//! # Why
//!
//! Without them every UPDATE inserts an entry into every index of its
//! table, whatever it changed, and every version keeps its entries until
//! VACUUM: a row updated a thousand times between vacuums has a thousand
//! entries, each a heap fetch for every later lookup of its key and a
//! place the B-tree must make room for. An update that changes no indexed
//! column and finds room on its row's page instead makes a *heap-only*
//! tuple (`HEAP_ONLY`) and marks the old version `HOT_UPDATED`: the
//! indexes keep pointing at the first version, the chain's *root*, and a
//! fetch through them walks the chain to the version its snapshot sees.
//!
//! # The chain
//!
//! A root is a tuple that is not heap-only (an index entry points at it),
//! or, once pruning removed that tuple, a *redirect* line pointer naming
//! the chain's first version still needed. From there each `HOT_UPDATED`
//! tuple's ctid names the next version, on the same page. A link counts
//! only if the next tuple's xmin is the older one's xmax: a line pointer
//! freed by pruning may since hold another tuple, whose xmin says so (as
//! PostgreSQL checks `HeapTupleHeaderGetXmin` against the prior xmax).
//! Every walk ([`walk_chain`]) is bounded by the page's line pointers.
//!
//! # Pruning
//!
//! [`plan_prune`] is PostgreSQL's `heap_prune_chain`: the versions at the
//! start of a chain that are dead to every snapshot (or recently dead but
//! followed by one that is: it is older, hence dead too) lose their
//! storage. The root's line pointer then redirects to the first version
//! left, or, if none is, becomes dead, to be freed once vacuum has removed
//! the index entries pointing at it. Heap-only versions that go become
//! unused at once: no index entry points at them. A heap-only tuple no
//! chain reaches (its update aborted, or lost to a concurrent one and was
//! deleted by its own command) goes once it is dead to everyone.
//!
//! # What else must know
//!
//! Index scans, bitmap heap scans and unique checks walk chains from the
//! TIDs the index gives (`HeapFetch::fetch_on_page`, `Heap::chain_at`);
//! sequential scans need nothing, as every version is a tuple of its
//! page. Index builds index each chain once, under its root's TID, from
//! its newest version some snapshot may see (`Heap::scan_for_index_build`);
//! where an older version some snapshot may still see has other values
//! in the new index's columns, the index cannot answer for that snapshot,
//! and the build says so (PostgreSQL's `indcheckxmin`).

use std::ops::ControlFlow;

use super::tuple::TupleHeader;
use super::{dead_to_everyone, PageChange};
use crate::page::{
    is_dead_item, item, line_pointer, line_pointer_count, redirect_target, LineFlags, PageBytes,
};
use crate::txn::{TxnManager, Xid, XidStatus, INVALID_XID};

/// How a walk of a HOT chain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChainEnd {
    /// The visitor stopped at a version.
    Stopped,
    /// Every version of the chain was visited.
    Ended,
    /// The root's line pointer is dead: the whole chain was dead to
    /// everyone and pruned (its index entries may go).
    Dead,
    /// No chain starts there: the line pointer is unused, past the
    /// array, or holds a heap-only tuple (it was freed and reused since
    /// the index entry that led here was made).
    NoChain,
}

/// Walks the HOT chain whose root is line pointer `root` of heap page
/// `block` (see the module comment), calling `visit(index, header,
/// tuple)` on each version, oldest first, until it breaks.
pub(crate) fn walk_chain(
    page: &PageBytes,
    block: u32,
    root: usize,
    mut visit: impl FnMut(u16, &TupleHeader, &[u8]) -> ControlFlow<()>,
) -> ChainEnd {
    let count = line_pointer_count(page);
    let mut at = root;
    let mut prior_xmax = INVALID_XID;
    if let Some(to) = redirect_target(page, root) {
        at = to;
        // A redirect always names a heap-only tuple (pruning makes it so);
        // its xmin is checked against nothing, as in PostgreSQL.
        debug_assert!(
            item(page, at).is_some_and(|t| TupleHeader::read(t).is_heap_only()),
            "line pointer {root} of block {block} redirects to {at}, no heap-only tuple"
        );
    } else if is_dead_item(page, root) {
        return ChainEnd::Dead;
    }
    for step in 0..count {
        let Some(t) = item(page, at) else {
            // Unused since: a version pruned after the older one linked
            // it (only a version dead to everyone goes).
            return if step == 0 {
                ChainEnd::NoChain
            } else {
                ChainEnd::Ended
            };
        };
        let h = TupleHeader::read(t);
        let first_of_entry = step == 0 && at == root;
        if first_of_entry && h.is_heap_only() {
            return ChainEnd::NoChain;
        }
        if prior_xmax != INVALID_XID && h.xmin != prior_xmax {
            return ChainEnd::Ended;
        }
        debug_assert!(
            first_of_entry || h.is_heap_only(),
            "version {at} of a HOT chain in block {block} is not heap-only"
        );
        if visit(at as u16, &h, t).is_break() {
            return ChainEnd::Stopped;
        }
        if !h.is_hot_updated() {
            return ChainEnd::Ended;
        }
        debug_assert_eq!(
            h.ctid.block, block,
            "a HOT update's version on another page"
        );
        if h.ctid.block != block || h.ctid.index as usize == at {
            return ChainEnd::Ended;
        }
        // A HOT update's xmax is its updater's, never a lock: a lock
        // clears HOT_UPDATED (`heap::apply`).
        debug_assert!(h.deleter().is_some(), "a HOT link from a lock-only xmax");
        prior_xmax = h.xmax;
        at = h.ctid.index as usize;
    }
    // More versions than line pointers: the links make a cycle, which no
    // update makes.
    debug_assert!(false, "a HOT chain in block {block} from {root} loops");
    ChainEnd::Ended
}

/// What pruning does with the root line pointer of a chain that is dead
/// to everyone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeadRoots {
    /// Made dead: index entries may point at it (freed by vacuum after
    /// their removal).
    Dead,
    /// Made unused at once: the table has no index (vacuum of such a
    /// table).
    Unused,
}

/// What pruning one page would do (see the module comment).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct PrunePlan {
    pub redirected: Vec<(u16, u16)>,
    pub dead: Vec<u16>,
    pub unused: Vec<u16>,
    /// Tuples whose storage goes.
    pub tuples_removed: u64,
}

impl PrunePlan {
    pub(crate) fn is_empty(&self) -> bool {
        self.redirected.is_empty() && self.dead.is_empty() && self.unused.is_empty()
    }

    /// The page change that carries the plan out.
    pub(crate) fn change(&self) -> PageChange<'_> {
        PageChange::Prune {
            redirected: &self.redirected,
            dead: &self.dead,
            unused: &self.unused,
        }
    }

    /// Whether tuple `index` loses its storage.
    pub(crate) fn removes(&self, index: u16) -> bool {
        self.dead.binary_search(&index).is_ok()
            || self.unused.binary_search(&index).is_ok()
            || self
                .redirected
                .binary_search_by_key(&index, |&(from, _)| from)
                .is_ok()
    }
}

/// A version as pruning sees it (PostgreSQL's `HeapTupleSatisfiesVacuum`,
/// reduced to what a chain's pruning asks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VersionState {
    /// Dead to every snapshot there is or will be.
    Dead,
    /// Deleted by a committed transaction some snapshot may not see as
    /// committed yet.
    RecentlyDead,
    /// Anything else: live, or its inserter or deleter still running.
    Live,
}

pub(crate) fn version_state(txn: &TxnManager, oldest: Xid, h: &TupleHeader) -> VersionState {
    if dead_to_everyone(txn, oldest, h) {
        VersionState::Dead
    } else if h.deleter().is_some_and(|deleter| txn.did_commit(deleter)) {
        // (A lock-only xmax deletes nothing, whoever held it.)
        VersionState::RecentlyDead
    } else {
        VersionState::Live
    }
}

/// Plans the pruning of heap page `block` below horizon `oldest` (see the
/// module comment); the caller applies [`PrunePlan::change`] under the
/// page's exclusive lock, having planned under it (or planned under the
/// shared lock and planned again under the exclusive one). Dead line
/// pointers already there are left to the caller (vacuum frees them).
pub(crate) fn plan_prune(
    txn: &TxnManager,
    oldest: Xid,
    page: &PageBytes,
    block: u32,
    dead_roots: DeadRoots,
) -> PrunePlan {
    let count = line_pointer_count(page);
    let mut plan = PrunePlan::default();
    // Versions some chain reached: the rest of the heap-only tuples are no
    // chain's.
    let mut in_chain = vec![false; count];
    let mut chain: Vec<u16> = Vec::new();
    for root in 0..count {
        let redirect = match line_pointer(page, root).map(|lp| lp.flags) {
            Some(LineFlags::Redirect) => true,
            Some(LineFlags::Normal)
                if !item(page, root).is_some_and(|t| TupleHeader::read(t).is_heap_only()) =>
            {
                false
            }
            _ => continue,
        };
        chain.clear();
        walk_chain(page, block, root, |at, h, _| {
            // A version whose inserter aborted ends the chain: the older
            // one's update aborted, so it stays, and what follows is
            // dead to everyone and left to the no-chain pass below.
            if !chain.is_empty() && txn.status(h.xmin) == XidStatus::Aborted {
                return ControlFlow::Break(());
            }
            chain.push(at);
            in_chain[at as usize] = true;
            ControlFlow::Continue(())
        });
        // The versions that go: up to the last dead one before the first
        // live one (a recently dead one before a dead one is older than
        // it, so dead too).
        let mut dead_prefix = 0;
        for (i, &at) in chain.iter().enumerate() {
            let t = item(page, at as usize).expect("a chain's version is a tuple");
            match version_state(txn, oldest, &TupleHeader::read(t)) {
                VersionState::Dead => dead_prefix = i + 1,
                VersionState::RecentlyDead => {}
                VersionState::Live => break,
            }
        }
        let root = root as u16;
        // The heap-only versions among those going.
        let heap_only_gone = chain[..dead_prefix].iter().filter(|&&at| at != root);
        plan.unused.extend(heap_only_gone);
        plan.tuples_removed += dead_prefix as u64;
        if dead_prefix == chain.len() && (dead_prefix > 0 || redirect) {
            // Every version went (or a redirect names none any more).
            match dead_roots {
                DeadRoots::Dead => plan.dead.push(root),
                DeadRoots::Unused => plan.unused.push(root),
            }
        } else if dead_prefix > 0 {
            plan.redirected.push((root, chain[dead_prefix]));
        }
    }
    for (at, reached) in in_chain.iter().enumerate() {
        if *reached {
            continue;
        }
        let Some(t) = item(page, at) else { continue };
        let h = TupleHeader::read(t);
        if h.is_heap_only() && dead_to_everyone(txn, oldest, &h) {
            plan.unused.push(at as u16);
            plan.tuples_removed += 1;
        }
    }
    plan.unused.sort_unstable();
    plan.dead.sort_unstable();
    debug_assert!(plan.redirected.is_sorted_by_key(|&(from, _)| from));
    plan
}

/// The root of each version on heap page `block` that a HOT chain
/// reaches (PostgreSQL's `heap_get_root_tuples`), by line pointer: an
/// index build gives every version its root's TID.
pub(crate) fn roots_of(page: &PageBytes, block: u32) -> Vec<Option<u16>> {
    let count = line_pointer_count(page);
    let mut roots = vec![None; count];
    for root in 0..count {
        let is_root = match line_pointer(page, root).map(|lp| lp.flags) {
            Some(LineFlags::Redirect) => true,
            Some(LineFlags::Normal) => {
                !item(page, root).is_some_and(|t| TupleHeader::read(t).is_heap_only())
            }
            _ => false,
        };
        if is_root {
            walk_chain(page, block, root, |at, _, _| {
                roots[at as usize] = Some(root as u16);
                ControlFlow::Continue(())
            });
        }
    }
    roots
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::heap::tuple::{Tid, HEAP_ONLY, HOT_UPDATED, TUPLE_HEADER_SIZE, UPDATED};
    use crate::heap::{apply, PageChange};
    use crate::page::{free_space, is_dead_item, LineFlags};
    use crate::storage::BLOCK_SIZE;

    const BLOCK: u32 = 5;

    fn manager() -> (tempfile::TempDir, Arc<TxnManager>) {
        let dir = tempfile::tempdir().unwrap();
        TxnManager::create(dir.path()).unwrap();
        let txn = TxnManager::open(dir.path()).unwrap();
        (dir, txn)
    }

    /// A finished transaction's id.
    fn finished(txn: &TxnManager, committed: bool) -> Xid {
        let xid = txn.assign_xid(txn.new_owner()).unwrap();
        txn.finish(xid, committed).unwrap();
        xid
    }

    fn page() -> PageBytes {
        let mut page = [0u8; BLOCK_SIZE];
        apply(&mut page, BLOCK, &PageChange::Init);
        page
    }

    /// Adds a version inserted by `xmin` (heap-only if `heap_only`),
    /// returning its line pointer.
    fn add(page: &mut PageBytes, xmin: Xid, heap_only: bool) -> u16 {
        let mut t = vec![0u8; TUPLE_HEADER_SIZE + 16];
        TupleHeader {
            xmin,
            xmax: INVALID_XID,
            cmin: 0,
            cmax: 0,
            ctid: Tid { block: 0, index: 0 },
            infomask: if heap_only { HEAP_ONLY } else { 0 },
            natts: 0,
        }
        .write(&mut t);
        apply(page, BLOCK, &PageChange::Insert { tuple: &t })
            .index
            .unwrap()
    }

    /// Marks `index` updated (or deleted) by `xmax`, to `newer` if given,
    /// HOT if `hot`.
    fn set_xmax(page: &mut PageBytes, index: u16, xmax: Xid, newer: Option<u16>, hot: bool) {
        let newer = newer.map(|index| Tid {
            block: BLOCK,
            index,
        });
        let change = PageChange::SetXmax {
            index,
            xmax,
            cmax: 0,
            newer,
            hot,
        };
        apply(page, BLOCK, &change);
    }

    fn walked(page: &PageBytes, root: u16) -> (Vec<u16>, ChainEnd) {
        let mut seen = Vec::new();
        let end = walk_chain(page, BLOCK, root as usize, |at, _, _| {
            seen.push(at);
            ControlFlow::Continue(())
        });
        (seen, end)
    }

    fn prune(txn: &TxnManager, page: &mut PageBytes, dead_roots: DeadRoots) -> PrunePlan {
        let plan = plan_prune(txn, txn.oldest_xmin(), page, BLOCK, dead_roots);
        apply(page, BLOCK, &plan.change());
        plan
    }

    #[test]
    fn a_chain_is_walked_from_its_root_through_hot_links_only() {
        let (_dir, txn) = manager();
        let [a, b, c] = [0; 3].map(|_| finished(&txn, true));
        let mut page = page();
        let root = add(&mut page, a, false);
        let h1 = add(&mut page, b, true);
        let h2 = add(&mut page, c, true);
        set_xmax(&mut page, root, b, Some(h1), true);
        set_xmax(&mut page, h1, c, Some(h2), true);
        assert_eq!(walked(&page, root), (vec![root, h1, h2], ChainEnd::Ended));
        // An entry never points at a heap-only tuple: one that finds one
        // there is older than the line pointer's reuse.
        assert_eq!(walked(&page, h1), (vec![], ChainEnd::NoChain));
        assert_eq!(walked(&page, 40), (vec![], ChainEnd::NoChain));
        // A link whose target's xmin is not the xmax is no link.
        set_xmax(&mut page, h1, a, Some(h2), true);
        assert_eq!(walked(&page, root), (vec![root, h1], ChainEnd::Ended));
        // Nor is a non-HOT update's.
        set_xmax(&mut page, root, b, Some(h1), false);
        assert_eq!(walked(&page, root), (vec![root], ChainEnd::Ended));
        let h = TupleHeader::read(crate::page::item(&page, root as usize).unwrap());
        assert_eq!(h.infomask & (UPDATED | HOT_UPDATED), UPDATED);
    }

    #[test]
    fn pruning_redirects_the_root_to_the_oldest_version_still_needed() {
        let (_dir, txn) = manager();
        let [a, b, c] = [0; 3].map(|_| finished(&txn, true));
        let mut page = page();
        let root = add(&mut page, a, false);
        let h1 = add(&mut page, b, true);
        let h2 = add(&mut page, c, true);
        set_xmax(&mut page, root, b, Some(h1), true);
        set_xmax(&mut page, h1, c, Some(h2), true);
        let free = free_space(&page);
        // A snapshot older than b's commit keeps every version.
        let old = txn.snapshot(None, 0);
        let kept = plan_prune(
            &txn,
            old.snapshot().xmin.min(a),
            &page,
            BLOCK,
            DeadRoots::Dead,
        );
        assert!(kept.is_empty(), "{kept:?}");
        drop(old);
        let plan = prune(&txn, &mut page, DeadRoots::Dead);
        assert_eq!(plan.redirected, [(root, h2)]);
        assert_eq!(plan.unused, [h1]);
        assert!(plan.dead.is_empty());
        assert_eq!(plan.tuples_removed, 2);
        assert!(free_space(&page) > free);
        assert_eq!(walked(&page, root), (vec![h2], ChainEnd::Ended));
        // Pruning again finds nothing to do.
        assert!(plan_prune(&txn, txn.oldest_xmin(), &page, BLOCK, DeadRoots::Dead).is_empty());
        // The row deleted: the redirect dies with its last version.
        let d = finished(&txn, true);
        set_xmax(&mut page, h2, d, None, false);
        let plan = prune(&txn, &mut page, DeadRoots::Dead);
        assert_eq!(
            (plan.dead.as_slice(), plan.unused.as_slice()),
            ([root].as_slice(), [h2].as_slice())
        );
        assert!(is_dead_item(&page, root as usize));
        assert_eq!(walked(&page, root), (vec![], ChainEnd::Dead));
        // A table without indexes frees the root at once.
        let mut page2 = self::page();
        let r = add(&mut page2, a, false);
        set_xmax(&mut page2, r, b, None, false);
        let plan = prune(&txn, &mut page2, DeadRoots::Unused);
        assert_eq!(plan.unused, [r]);
        assert_eq!(
            crate::page::line_pointer(&page2, r as usize).map(|lp| lp.flags),
            None,
            "an unused line pointer at the end goes"
        );
    }

    #[test]
    fn an_aborted_hot_update_leaves_the_row_and_frees_its_version() {
        let (_dir, txn) = manager();
        let a = finished(&txn, true);
        let aborted = finished(&txn, false);
        let mut page = page();
        let root = add(&mut page, a, false);
        let h = add(&mut page, aborted, true);
        set_xmax(&mut page, root, aborted, Some(h), true);
        // A version no chain reaches (its update lost to another and was
        // deleted by its own transaction, which committed).
        let lost = finished(&txn, true);
        let orphan = add(&mut page, lost, true);
        set_xmax(&mut page, orphan, lost, None, false);
        // A heap-only version being inserted, not linked yet: kept.
        let running = txn.assign_xid(txn.new_owner()).unwrap();
        let in_flight = add(&mut page, running, true);
        let plan = prune(&txn, &mut page, DeadRoots::Dead);
        assert_eq!(plan.unused, [h, orphan]);
        assert!(plan.redirected.is_empty() && plan.dead.is_empty());
        assert_eq!(walked(&page, root), (vec![root], ChainEnd::Ended));
        assert!(crate::page::item(&page, in_flight as usize).is_some());
        // The freed line pointer taken by another version: the old link
        // does not reach it, its xmin being another.
        let other = add(&mut page, running, true);
        assert_eq!(other, h);
        assert_eq!(walked(&page, root), (vec![root], ChainEnd::Ended));
        txn.finish(running, true).unwrap();
    }

    #[test]
    fn roots_name_each_reached_version_s_root() {
        let (_dir, txn) = manager();
        let [a, b, c] = [0; 3].map(|_| finished(&txn, true));
        let mut page = page();
        let plain = add(&mut page, a, false);
        let root = add(&mut page, a, false);
        let h1 = add(&mut page, b, true);
        let h2 = add(&mut page, c, true);
        set_xmax(&mut page, root, b, Some(h1), true);
        set_xmax(&mut page, h1, c, Some(h2), true);
        prune(&txn, &mut page, DeadRoots::Dead);
        assert_eq!(
            crate::page::line_pointer(&page, root as usize).map(|lp| lp.flags),
            Some(LineFlags::Redirect)
        );
        let roots = roots_of(&page, BLOCK);
        assert_eq!(roots[plain as usize], Some(plain));
        assert_eq!(roots[root as usize], None, "a redirect is no version");
        assert_eq!(roots[h1 as usize], None, "pruned");
        assert_eq!(roots[h2 as usize], Some(root));
    }
}
