//! Injection points: named places in the engine where a test can park a
//! thread until released, or rewrite the raw result of an I/O (a short read,
//! a negative errno).
//!
//! Concurrency tests use them to force an interleaving instead of hoping for
//! it: "park the worker just before it runs the shared completion callbacks,
//! now let another session try to read the same block". They are compiled
//! in always (integration tests need them) and cost one relaxed atomic load
//! per point while nothing is attached. Points belong to one `Aio` instance,
//! so tests running in parallel in one process do not see each other's.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Reached in whichever thread completes an I/O, after the raw result is
/// known and before the shared completion callbacks run. A rewrite here
/// replaces the raw result (bytes transferred, or a negative errno).
pub const BEFORE_COMPLETE_SHARED: &str = "aio-process-completion-before-shared";

/// Reached in an I/O worker after it has obtained the file for an I/O and
/// before the system call. A negative rewrite fails the I/O with that errno
/// without executing it, as if the worker could not reopen the file.
pub const WORKER_AFTER_REOPEN: &str = "aio-worker-after-reopen";

/// Reached in vacuum between deciding what to change on a heap page (under
/// its shared lock) and changing it (under the exclusive lock); the
/// context's offset is the block number.
pub const VACUUM_BEFORE_PAGE_CHANGE: &str = "heap-vacuum-before-page-change";

/// Reached in `get_buffer` after a victim buffer has been chosen and pinned
/// for a page not in the pool, before the mapping is locked to install it;
/// the context's offset is the block number.
pub const BUFFER_AFTER_VICTIM: &str = "buffer-get-after-victim";

/// Reached in `BufferSession::extend` after the file has grown and before
/// the new blocks' buffers (in the pool, their I/O claimed) are zeroed and
/// made valid; the context's offset is the first new block. A session that
/// takes a new block as the relation's last meanwhile finds the claimed
/// buffer and waits for it.
pub const BUFFER_EXTEND_AFTER_GROW: &str = "buffer-extend-after-grow";

/// Reached in `TxnManager::status` when the commit log has no bits for
/// the transaction yet, before it asks the running set; the context's
/// offset is the transaction id. A test parks a status check here while
/// the transaction commits: answering "aborted" from the log read before
/// the running set turned a commit into an abort.
pub const TXN_STATUS_BETWEEN_LOOKUPS: &str = "txn-status-between-lookups";

/// Reached in a weak table lock's fast path with the session's slot
/// locked, after it found no strong request counted on the table and
/// before it records the lock in the slot; the context's offset is the
/// table's oid. A strong request that comes meanwhile counts itself and
/// then waits for the slot, to move the lock once it is recorded.
pub const TXN_FAST_PATH_BEFORE_RECORD: &str = "txn-fast-path-before-record";

/// Reached by a snapshot taken without the transaction manager's lock
/// after it copied the published running set and before it registers
/// its xmin (`txn/running.rs`); the context's offset is the copy's
/// sequence. A transaction that ends meanwhile publishes a horizon that
/// did not see the registration, and the snapshot must go round again.
pub const TXN_SNAPSHOT_BEFORE_REGISTER: &str = "txn-snapshot-before-register";

/// Reached in a heap insert after it added a block to the table (the file
/// has grown, the buffer is pinned) and before it formats the block and
/// puts its row there; the context's offset is the block number. Another
/// session may find the block meanwhile, as the table's last.
pub const HEAP_INSERT_AFTER_EXTEND: &str = "heap-insert-after-extend";

/// Reached in vacuum after it set the all-visible flags of its pages and
/// before it sets their visibility-map bits; the context's offset is the
/// number of pages. An update meanwhile clears a flag whose bit is not
/// set yet.
pub const VACUUM_BEFORE_MAP_BITS: &str = "heap-vacuum-before-map-bits";

/// Reached in vacuum after it set (and logged) the visibility-map bits and
/// before it looks at the pages' flags again to clear bits whose flag an
/// update cleared meanwhile; the context's offset is the number of pages.
pub const VACUUM_BEFORE_MAP_RECHECK: &str = "heap-vacuum-before-map-recheck";

/// Reached in a WAL insertion after the record is built (its page images
/// decided from the redo point) and before its place is reserved; the
/// context's offset is the redo point it was built against. A checkpoint
/// that starts meanwhile makes the insertion build it again.
pub const WAL_INSERT_BEFORE_RESERVE: &str = "wal-insert-before-reserve";

/// Reached in the WAL writer before each write of log blocks; the
/// context's offset is the LSN written at. A negative rewrite fails the
/// write with that errno without executing it (a full disk: ENOSPC).
pub const WAL_BEFORE_WRITE: &str = "wal-before-write";

/// Reached in the buffer pool before it writes a run of dirty data pages
/// (eviction, a checkpoint, a commit's sync of a table that skipped the
/// WAL), after the WAL rule was kept; the context's offset is the run's
/// first block. A negative rewrite fails the write with that errno without
/// executing it (a full disk: ENOSPC).
pub const BUFFER_BEFORE_WRITE: &str = "buffer-before-write";

/// Reached in the WAL writer before it syncs a segment (fdatasync); the
/// context's offset is the segment number. A negative rewrite fails the
/// sync with that errno.
pub const WAL_BEFORE_SYNC: &str = "wal-before-sync";

/// Reached in a checkpoint before it syncs a data file written since the
/// last one; the context's offset is the relation number. A negative
/// rewrite fails the sync with that errno.
pub const BUFFER_BEFORE_FILE_SYNC: &str = "buffer-before-file-sync";

/// Reached in a B-tree insertion after a page split was made and logged
/// and before the new page's downlink goes into the parent (the left half
/// is still locked); the context's offset is the left half's block.
pub const BTREE_SPLIT_BEFORE_DOWNLINK: &str = "btree-split-before-downlink";

/// Reached in a B-tree scan between two leaf pages, after it let the one
/// it read go and before it locks the sibling it recorded; the context's
/// offset is that sibling's block. A split meanwhile is what Lehman and
/// Yao's links are for.
pub const BTREE_SCAN_BETWEEN_PAGES: &str = "btree-scan-between-pages";

/// Reached in a B-tree scan that reads leaf pages ahead, after it took
/// the leaf its link chain names next from its read stream and before it
/// locks it (the stream holds leaves after it pinned or being read, as
/// their parent's downlinks named them); the context's offset is the
/// leaf's block. A split of these leaves meanwhile puts pages the
/// downlinks did not name into the chain.
pub const BTREE_SCAN_READING_AHEAD: &str = "btree-scan-reading-ahead";

/// Reached in an index scan after it copied a leaf page's matching TIDs
/// and let the page go, before it fetches the first of their heap tuples
/// (a batch it returns next; one loaded ahead of that reaches
/// [`INDEX_SCAN_LOADED_AHEAD`] instead);
/// the context's offset is the leaf's block. Vacuum may meanwhile remove
/// those entries and free their line pointers for new tuples.
pub const INDEX_SCAN_BEFORE_HEAP_FETCH: &str = "index-scan-before-heap-fetch";

/// Reached in an index scan that prefetches, after it loaded a leaf
/// page's batch ahead of the batch it is returning and fed the batch's
/// heap pages to its read stream; the context's offset is the leaf's
/// block. Vacuum may meanwhile remove the entries of this batch and of
/// those before it, and free their line pointers for new tuples, while
/// the stream holds their pages pinned or reads them.
pub const INDEX_SCAN_LOADED_AHEAD: &str = "index-scan-loaded-ahead";

/// Reached in an index-only scan that has read a leaf page's matching
/// entries and still holds the leaf pinned, before it looks their heap
/// pages up in the visibility map; the context's offset is the leaf's
/// block. VACUUM must wait to remove those entries until the pin goes.
pub const INDEX_ONLY_SCAN_LEAF_PINNED: &str = "index-only-scan-leaf-pinned";

/// What happens when a thread reaches an attached point.
#[derive(Debug, Clone, Default)]
pub struct Injection {
    /// Park the thread until [`InjectionPoints::release`] or detach.
    pub park: bool,
    /// Replace the raw result (bytes, or negative errno) after any park.
    pub rewrite_result: Option<i64>,
    /// Only act on I/Os at this file offset.
    pub only_offset: Option<u64>,
    /// Only act this many times, then detach by itself.
    pub times: Option<u32>,
}

impl Injection {
    pub fn park() -> Self {
        Injection {
            park: true,
            ..Default::default()
        }
    }

    pub fn rewrite_result(raw: i64) -> Self {
        Injection {
            rewrite_result: Some(raw),
            ..Default::default()
        }
    }

    pub fn at_offset(mut self, offset: u64) -> Self {
        self.only_offset = Some(offset);
        self
    }

    pub fn times(mut self, n: u32) -> Self {
        self.times = Some(n);
        self
    }
}

/// Facts about the I/O at the point, used for filtering.
#[derive(Debug, Clone, Copy)]
pub struct HitContext {
    pub offset: u64,
}

#[derive(Debug)]
struct Attached {
    injection: Injection,
    /// Threads parked here now.
    parked: usize,
    /// Incremented by every release; parked threads leave when it moves.
    releases: u64,
}

/// The injection points of one `Aio` instance.
#[derive(Debug, Default)]
pub struct InjectionPoints {
    attached_count: AtomicUsize,
    points: Mutex<HashMap<&'static str, Attached>>,
    changed: Condvar,
}

/// Longest a test helper waits for a thread to park, so that a broken test
/// fails instead of hanging.
const PARK_WAIT_LIMIT: Duration = Duration::from_secs(30);

impl InjectionPoints {
    /// Attaches (or replaces) the injection at `name`. Replacing keeps the
    /// count of threads parked there and of releases, which those threads
    /// are waiting on.
    pub fn attach(&self, name: &'static str, injection: Injection) {
        let mut points = self.points.lock();
        match points.get_mut(name) {
            Some(point) => point.injection = injection,
            None => {
                points.insert(
                    name,
                    Attached {
                        injection,
                        parked: 0,
                        releases: 0,
                    },
                );
                self.attached_count.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// Detaches `name`, releasing any thread parked there.
    pub fn detach(&self, name: &'static str) {
        let mut points = self.points.lock();
        if points.remove(name).is_some() {
            self.attached_count.fetch_sub(1, Ordering::SeqCst);
        }
        self.changed.notify_all();
    }

    /// Releases every thread parked at `name` now; the point stays attached.
    pub fn release(&self, name: &'static str) {
        let mut points = self.points.lock();
        if let Some(point) = points.get_mut(name) {
            point.releases += 1;
        }
        self.changed.notify_all();
    }

    /// Waits until at least one thread is parked at `name`. Returns false
    /// after 30 s, so that a broken test fails rather than hangs.
    pub fn wait_until_parked(&self, name: &'static str) -> bool {
        let deadline = Instant::now() + PARK_WAIT_LIMIT;
        let mut points = self.points.lock();
        loop {
            if points.get(name).is_some_and(|p| p.parked > 0) {
                return true;
            }
            if self.changed.wait_until(&mut points, deadline).timed_out() {
                return false;
            }
        }
    }

    /// True if any point is attached (one relaxed load).
    #[inline]
    pub(crate) fn any_attached(&self) -> bool {
        self.attached_count.load(Ordering::Relaxed) != 0
    }

    /// Called at the point `name`. Returns the rewritten raw result, if any.
    #[inline]
    pub(crate) fn hit(&self, name: &'static str, ctx: HitContext) -> Option<i64> {
        if !self.any_attached() {
            return None;
        }
        self.hit_slow(name, ctx)
    }

    /// Called at a point that fails an operation at `offset`: the errno an
    /// attached injection rewrites the result to (a negative raw result),
    /// if any. How tests fail a write or a sync as a full disk would.
    #[inline]
    pub(crate) fn injected_errno(&self, name: &'static str, offset: u64) -> Option<i32> {
        self.hit(name, HitContext { offset })
            .filter(|&r| r < 0)
            .map(|r| -r as i32)
    }

    #[cold]
    fn hit_slow(&self, name: &'static str, ctx: HitContext) -> Option<i64> {
        let mut points = self.points.lock();
        let point = points.get_mut(name)?;
        let exhausted = point.injection.times == Some(0);
        if exhausted || point.injection.only_offset.is_some_and(|o| o != ctx.offset) {
            return None;
        }
        let injection = point.injection.clone();
        if let Some(times) = point.injection.times.as_mut() {
            *times -= 1;
        }
        if injection.park {
            point.parked += 1;
            let releases = point.releases;
            self.changed.notify_all();
            while points.get(name).is_some_and(|p| p.releases == releases) {
                self.changed.wait(&mut points);
            }
            if let Some(point) = points.get_mut(name) {
                point.parked -= 1;
            }
        }
        // An exhausted point stays attached while a thread is parked on it,
        // so that release() still finds it; it goes once nobody is.
        if points
            .get(name)
            .is_some_and(|p| p.injection.times == Some(0) && p.parked == 0)
        {
            points.remove(name);
            self.attached_count.fetch_sub(1, Ordering::SeqCst);
        }
        injection.rewrite_result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn nothing_happens_at_a_point_with_nothing_attached() {
        let points = InjectionPoints::default();
        assert_eq!(
            points.hit(BEFORE_COMPLETE_SHARED, HitContext { offset: 0 }),
            None
        );
    }

    #[test]
    fn a_rewrite_applies_only_at_its_offset_and_only_so_many_times() {
        let points = InjectionPoints::default();
        points.attach(
            BEFORE_COMPLETE_SHARED,
            Injection::rewrite_result(-5).at_offset(8192).times(1),
        );
        assert_eq!(
            points.hit(BEFORE_COMPLETE_SHARED, HitContext { offset: 0 }),
            None
        );
        assert_eq!(
            points.hit(BEFORE_COMPLETE_SHARED, HitContext { offset: 8192 }),
            Some(-5)
        );
        assert_eq!(
            points.hit(BEFORE_COMPLETE_SHARED, HitContext { offset: 8192 }),
            None
        );
    }

    #[test]
    fn a_parked_thread_waits_for_release() {
        let points = Arc::new(InjectionPoints::default());
        points.attach(BEFORE_COMPLETE_SHARED, Injection::park().times(1));
        let p = Arc::clone(&points);
        let t = std::thread::spawn(move || p.hit(BEFORE_COMPLETE_SHARED, HitContext { offset: 0 }));
        assert!(points.wait_until_parked(BEFORE_COMPLETE_SHARED));
        assert!(!t.is_finished());
        points.release(BEFORE_COMPLETE_SHARED);
        assert_eq!(t.join().unwrap(), None);
        assert_eq!(points.attached_count.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn attaching_again_while_a_thread_is_parked_keeps_it_releasable() {
        let points = Arc::new(InjectionPoints::default());
        points.attach("p", Injection::park());
        let t = {
            let points = Arc::clone(&points);
            std::thread::spawn(move || points.hit("p", HitContext { offset: 0 }))
        };
        assert!(points.wait_until_parked("p"));
        points.attach("p", Injection::rewrite_result(7));
        assert!(points.wait_until_parked("p"), "still counted as parked");
        points.release("p");
        assert_eq!(
            t.join().unwrap(),
            None,
            "the parked thread had the old injection"
        );
        points.detach("p");
    }
}
