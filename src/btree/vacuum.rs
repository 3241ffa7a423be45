//! Removing the index tuples of dead rows. VACUUM's index pass: one pass
//! over the index in block order through a read stream, deleting from
//! each leaf the tuples whose heap TID the caller names dead, one logged
//! change per page. High keys and internal pages stay: a key range keeps
//! its page even when no tuple is left in it (pages are not deleted).
//!
//! Between vacuums, the entries a scan or a unique check found pointing
//! at rows dead to every snapshot are removed from their leaf as it goes
//! ([`Btree::remove_entries`], PostgreSQL's `kill_prior_tuple` and its
//! deletion of LP_DEAD items, in one step since we keep no hint bits): a
//! row updated many times otherwise leaves an entry per version, each
//! read by every later lookup of its key. Removing an entry needs the
//! cleanup lock VACUUM takes, for the same reason (below), but only
//! when it is free: the removal is an optimisation, and a leaf pinned by
//! another session keeps its entries for the next look or for VACUUM.

use crate::buffer::{BufferId, BufferSession, LockMode, Strategy, StrategyKind};
use crate::heap::tuple::Tid;
use crate::page::{is_new, line_pointer_count, PageBytes};
use crate::storage::Fork;
use crate::stream::{Next, ReadStream, StreamFlags, StreamLimits};

use super::change::{apply_logged, BtreeChange};
use super::insert::Locked;
use super::page::{page_tuple, pointer, Special, FLAG_LEAF};
use super::{Btree, BtreeError, IndexDesc};

/// How often a leaf's cleanup lock is tried again while a scan holds the
/// leaf pinned.
const CLEANUP_POLL: std::time::Duration = std::time::Duration::from_micros(200);
/// How long VACUUM waits for a leaf's other pins to go (an index-only
/// scan holds one only while it looks its batch up in the visibility
/// map) before it gives up with an error.
pub const CLEANUP_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Most passes [`Btree::bulk_delete`] makes over pages added while it
/// ran (each needs splits during the one before).
const BULK_DELETE_PASSES_MAX: u32 = 1000;

/// What an index pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BulkDeleteStats {
    pub pages: u32,
    pub tuples_removed: u64,
    pub tuples_left: u64,
}

impl Btree {
    /// Deletes the tuples of page `block` (pinned as `id`) that `dead`
    /// names. Looked at under a shared lock first: most pages (every
    /// internal one, and leaves without dead tuples) are left without ever
    /// blocking a scan's descent, as PostgreSQL's btvacuumpage takes its
    /// cleanup lock only on leaves. Decided again under the exclusive lock,
    /// since an insert may have moved tuples in between.
    fn vacuum_page(
        &self,
        s: &mut BufferSession,
        idx: &IndexDesc,
        id: BufferId,
        block: u32,
        dead: &dyn Fn(Tid) -> bool,
        stats: &mut BulkDeleteStats,
    ) -> Result<(), BtreeError> {
        let (gone, left) = s.with_page(id, |page| dead_on(page, dead))?;
        if gone.is_empty() {
            stats.tuples_left += left;
            return Ok(());
        }
        // A cleanup lock, as PostgreSQL's btvacuumpage takes: exclusive,
        // and no other session's pin. An index-only scan pins the leaf
        // while it looks its batch's entries up in the visibility map;
        // removing an entry then would let its tuple's line pointer be
        // freed and its page be marked all-visible under the scan.
        let started = std::time::Instant::now();
        let mut guard = loop {
            let guard = s.lock_page(id, LockMode::Exclusive);
            if s.pool().pins(id) == 1 {
                break guard;
            }
            drop(guard);
            if started.elapsed() > CLEANUP_WAIT {
                return Err(BtreeError::CleanupWait {
                    index: idx.name.clone(),
                    block,
                    waited: CLEANUP_WAIT,
                });
            }
            std::thread::sleep(CLEANUP_POLL);
        };
        let (gone, left) = dead_on(guard.page(), dead)?;
        stats.tuples_left += left;
        stats.tuples_removed += gone.len() as u64;
        if !gone.is_empty() {
            let change = BtreeChange::Delete { indexes: gone };
            apply_logged(&self.wal, guard.page_mut(), idx.rel, block, &change)?;
        }
        Ok(())
    }
}

impl Btree {
    /// Removes from leaf `block` the entries pointing at `tids`, rows the
    /// caller found dead to every snapshot, if the leaf's cleanup lock is
    /// free and `tids_still_theirs` (asked under the leaf's lock, so that
    /// no entry can be added meanwhile) says no TID can have gone to
    /// another row since the caller copied the entries. Entries a split
    /// moved right since are left. Returns how many went.
    pub fn remove_entries(
        &self,
        s: &mut BufferSession,
        idx: &IndexDesc,
        block: u32,
        tids: &[Tid],
        tids_still_theirs: impl FnOnce() -> bool,
    ) -> Result<usize, BtreeError> {
        debug_assert!(!tids.is_empty());
        let mut sorted = tids.to_vec();
        sorted.sort_unstable();
        let mut leaf = self.lock_at(s, idx.rel, block, LockMode::Exclusive)?;
        let found = {
            let page = leaf.guard.page();
            let sp = Special::read(page);
            if sp.is_leaf() {
                (sp.first_data()..line_pointer_count(page))
                    .map(|i| page_tuple(page, i).map(|t| (i as u16, pointer(t))))
                    .filter(|t| {
                        t.as_ref()
                            .map_or(true, |(_, tid)| sorted.binary_search(tid).is_ok())
                    })
                    .map(|t| t.map(|(i, _)| i))
                    .collect::<Result<Vec<u16>, BtreeError>>()
            } else {
                Err(BtreeError::damaged("a scan's leaf is not a leaf"))
            }
        };
        let removed = match found {
            Ok(_) if !tids_still_theirs() => Ok(0),
            Ok(found) => self.remove_on_locked(s, idx, &mut leaf, found),
            Err(e) => Err(e.named(idx, block)),
        };
        leaf.release(s);
        removed
    }

    /// Deletes line pointers `at` (ascending) of `leaf`, locked
    /// exclusively, if no other session pins it (VACUUM's cleanup lock,
    /// taken only if free); `leaf` stays locked. Returns how many went.
    pub(super) fn remove_on_locked(
        &self,
        s: &BufferSession,
        idx: &IndexDesc,
        leaf: &mut Locked,
        at: Vec<u16>,
    ) -> Result<usize, BtreeError> {
        if at.is_empty() || s.pool().pins(leaf.id) != 1 {
            return Ok(0);
        }
        debug_assert!(Special::read(leaf.guard.page()).is_leaf());
        debug_assert!(at.windows(2).all(|w| w[0] < w[1]), "unsorted removal");
        let n = at.len();
        let change = BtreeChange::Delete { indexes: at };
        apply_logged(
            &self.wal,
            leaf.guard.page_mut(),
            idx.rel,
            leaf.block,
            &change,
        )?;
        Ok(n)
    }
}

/// The data tuples of a leaf that `dead` names.
fn dead_on(page: &PageBytes, dead: &dyn Fn(Tid) -> bool) -> Result<(Vec<u16>, u64), BtreeError> {
    if is_new(page) {
        return Ok((Vec::new(), 0));
    }
    let sp = Special::read(page);
    if sp.flags & FLAG_LEAF == 0 {
        return Ok((Vec::new(), 0));
    }
    let mut gone = Vec::new();
    let mut left = 0;
    for i in sp.first_data()..line_pointer_count(page) {
        if dead(pointer(page_tuple(page, i)?)) {
            gone.push(i as u16);
        } else {
            left += 1;
        }
    }
    Ok((gone, left))
}

impl Btree {
    /// Deletes every leaf tuple whose heap TID `dead` names.
    pub fn bulk_delete(
        &self,
        s: &mut BufferSession,
        idx: &IndexDesc,
        dead: &dyn Fn(Tid) -> bool,
        limits: StreamLimits,
    ) -> Result<BulkDeleteStats, BtreeError> {
        let mut stats = BulkDeleteStats::default();
        // Block 0 is the metapage.
        let mut from = 1u32;
        for _ in 0..BULK_DELETE_PASSES_MAX {
            // Pages split off while a pass ran went to the end of the
            // file, past what it read, possibly with tuples moved from a
            // page it had not reached yet: read those too, until the file
            // stops growing (PostgreSQL's btvacuumscan does the same).
            let nblocks = s.pool().relation(idx.rel).nblocks(Fork::Main)?;
            if from >= nblocks {
                return Ok(stats);
            }
            self.bulk_delete_blocks(s, idx, dead, limits, from..nblocks, &mut stats)?;
            from = nblocks;
        }
        Err(BtreeError::damaged(&format!(
            "the index kept growing through {BULK_DELETE_PASSES_MAX} passes of vacuum"
        ))
        .named(idx, from))
    }

    /// One pass of [`Btree::bulk_delete`] over `blocks`.
    fn bulk_delete_blocks(
        &self,
        s: &mut BufferSession,
        idx: &IndexDesc,
        dead: &dyn Fn(Tid) -> bool,
        limits: StreamLimits,
        blocks: std::ops::Range<u32>,
        stats: &mut BulkDeleteStats,
    ) -> Result<(), BtreeError> {
        let look_ahead = limits.look_ahead_blocks(true, s.settings.io_combine_limit);
        let strategy = Strategy::new(StrategyKind::Vacuum, s.pool().nbuffers(), look_ahead);
        let mut next = blocks.start;
        let end = blocks.end;
        let mut stream = ReadStream::begin(
            s,
            idx.rel,
            Fork::Main,
            StreamFlags {
                sequential: true,
                maintenance: true,
                ..Default::default()
            },
            limits,
            Some(strategy),
            move |data: &mut u32| {
                if next < end {
                    *data = next;
                    next += 1;
                    Next::Block(*data)
                } else {
                    Next::End
                }
            },
        );
        let result = loop {
            let (id, block) = match stream.next_buffer(s) {
                Ok(Some(next)) => next,
                Ok(None) => break Ok(()),
                Err(e) => break Err(e.into()),
            };
            stats.pages += 1;
            let changed = self.vacuum_page(s, idx, id, block, dead, stats);
            s.release(id);
            if let Err(e) = changed {
                break Err(e.named(idx, block));
            }
        };
        stream.end(s);
        result
    }
}
