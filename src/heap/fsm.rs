//! Free-space map: how much room each heap page has, kept on disk in the
//! relation's `_fsm` fork so that a new process finds the room earlier
//! ones (and vacuum) left, instead of extending the table.
//!
//! One byte per heap page holds its free space in steps of
//! [`CATEGORY_BYTES`], as PostgreSQL's categories do. The map is
//! approximate, as PostgreSQL's is: it is written without the heap page's
//! lock and may be stale either way. An insert that finds less room than
//! the map promised records what it found and asks again; room the map
//! does not know of is found by vacuum, which records every page it visits.
//!
//! Map pages are ordinary pages (header, checksum) read and written
//! through the buffer pool. A flat array rather than PostgreSQL's tree: one
//! map page covers 8168 heap pages (64 MiB), and each process keeps the
//! largest category of every map page in memory (built on its first
//! search), so a search reads only map pages that can answer it.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use parking_lot::Mutex;

use super::read_map_page;
use crate::buffer::{BufferError, BufferSession};
use crate::page::{init_page, is_new, PAGE_HEADER_SIZE};
use crate::storage::{Fork, BLOCK_SIZE};

/// Heap pages covered by one map page.
pub const HEAP_BLOCKS_PER_FSM_PAGE: u32 = (BLOCK_SIZE - PAGE_HEADER_SIZE) as u32;
/// Free bytes per step of a page's category.
pub const CATEGORY_BYTES: usize = 32;

/// The category recorded for a page with `free` bytes (rounded down, so
/// a page never promises more than it has).
pub fn category_of(free: usize) -> u8 {
    (free / CATEGORY_BYTES).min(u8::MAX as usize) as u8
}

/// The least category whose every page has `need` bytes.
fn category_needed(need: usize) -> u8 {
    need.div_ceil(CATEGORY_BYTES).min(u8::MAX as usize) as u8
}

fn locate(heap_block: u32) -> (u32, usize) {
    (
        heap_block / HEAP_BLOCKS_PER_FSM_PAGE,
        PAGE_HEADER_SIZE + (heap_block % HEAP_BLOCKS_PER_FSM_PAGE) as usize,
    )
}

/// A process's summary of one relation's map: the largest category on
/// each map page, or `None` before the first search read them. It may
/// be too high (a search then reads the page and corrects it), never too
/// low: a raise noted while a search was reading a page wins over the
/// search's correction (`raises` counts them).
#[derive(Default)]
pub struct FsmSummary {
    max_by_page: Mutex<Option<Vec<u8>>>,
    raises: AtomicU64,
    /// Map pages known to exist: the map only grows while the process
    /// runs, but for a cut ([`FsmSummary::reset`]), so `record` asks the
    /// file (two system calls) only for a page past them.
    known_blocks: AtomicU32,
}

impl FsmSummary {
    fn note(&self, fsm_block: u32, category: u8) {
        let mut summary = self.max_by_page.lock();
        self.raises.fetch_add(1, Ordering::SeqCst);
        if let Some(max) = summary.as_mut() {
            let i = fsm_block as usize;
            if max.len() <= i {
                max.resize(i + 1, 0);
            }
            max[i] = max[i].max(category);
        }
    }

    /// Sets what a search read of map page `fsm_block` (its best
    /// category), unless a raise was noted since `raises_before`.
    fn correct(&self, fsm_block: u32, best: u8, raises_before: u64) {
        let mut summary = self.max_by_page.lock();
        if self.raises.load(Ordering::SeqCst) != raises_before {
            return;
        }
        if let Some(m) = summary.as_mut().and_then(|s| s.get_mut(fsm_block as usize)) {
            *m = best;
        }
    }

    /// Forgets what it knows (after the map was cut short).
    pub fn reset(&self) {
        *self.max_by_page.lock() = None;
        self.known_blocks.store(0, Ordering::SeqCst);
    }
}

/// Records the free space of heap pages (`(block, free bytes)`), changing
/// each map page once and extending the map as needed under `extension`
/// (the relation's extension lock).
pub fn record(
    s: &mut BufferSession,
    rel: u32,
    pages: &[(u32, usize)],
    summary: &FsmSummary,
    extension: &Mutex<()>,
) -> Result<(), BufferError> {
    let Some(last_fsm_block) = pages.iter().map(|&(b, _)| locate(b).0).max() else {
        return Ok(());
    };
    if last_fsm_block >= summary.known_blocks.load(Ordering::SeqCst) {
        let relation = s.pool().relation(rel);
        if last_fsm_block >= relation.nblocks(Fork::FreeSpace)? {
            let _extending = extension.lock();
            // Another session may have extended it while we waited.
            let nblocks = relation.nblocks(Fork::FreeSpace)?;
            if last_fsm_block >= nblocks {
                for id in s.extend(rel, Fork::FreeSpace, last_fsm_block + 1 - nblocks, None)? {
                    s.modify_page(id, |page| init_page(page, 0));
                    s.release(id);
                }
            }
        }
        summary
            .known_blocks
            .fetch_max(last_fsm_block + 1, Ordering::SeqCst);
    }
    let mut by_page: Vec<(u32, usize, u8)> = pages
        .iter()
        .map(|&(block, free)| {
            let (fsm_block, byte) = locate(block);
            (fsm_block, byte, category_of(free))
        })
        .collect();
    by_page.sort_unstable_by_key(|&(fsm_block, byte, _)| (fsm_block, byte));
    for group in by_page.chunk_by(|a, b| a.0 == b.0) {
        let fsm_block = group[0].0;
        let id = read_map_page(s, rel, Fork::FreeSpace, fsm_block)?;
        let differs = s.with_page(id, |page| group.iter().any(|&(_, byte, c)| page[byte] != c));
        if differs {
            s.modify_page(id, |page| {
                // Zeroed after damage: a page again before it holds entries.
                if is_new(page) {
                    init_page(page, 0);
                }
                for &(_, byte, c) in group {
                    page[byte] = c;
                }
            });
        }
        s.release(id);
        summary.note(fsm_block, group.iter().map(|g| g.2).max().unwrap_or(0));
    }
    Ok(())
}

/// A heap page the map says has `need` bytes free, the lowest such (so
/// that tables fill from the front and vacuum can cut empty pages off the
/// end), skipping `except`. Once the summary is built, a search that no
/// map page can answer costs no I/O and no system call: a bulk load asks
/// at every page it fills.
pub fn find(
    s: &mut BufferSession,
    rel: u32,
    need: usize,
    except: &[u32],
    summary: &FsmSummary,
) -> Result<Option<u32>, BufferError> {
    let wanted = category_needed(need);
    let known = summary.max_by_page.lock().clone();
    let max_by_page = match known {
        Some(max) => max,
        None => {
            // Every change of the map in this process goes through
            // `record`, which keeps the summary (and its length) current,
            // and no other process has the directory open.
            let raises_before = summary.raises.load(Ordering::SeqCst);
            let fsm_nblocks = s.pool().relation(rel).nblocks(Fork::FreeSpace)?;
            let mut max = vec![0u8; fsm_nblocks as usize];
            for fsm_block in 0..fsm_nblocks {
                let id = read_map_page(s, rel, Fork::FreeSpace, fsm_block)?;
                max[fsm_block as usize] = s.with_page(id, |page| {
                    page[PAGE_HEADER_SIZE..].iter().copied().max().unwrap_or(0)
                });
                s.release(id);
            }
            let mut known = summary.max_by_page.lock();
            if summary.raises.load(Ordering::SeqCst) != raises_before {
                // A page was raised while being read (and its raise was not
                // kept, there being no summary yet): claim room everywhere
                // rather than miss it; searches correct the claims.
                max.fill(u8::MAX);
            }
            *known = Some(max.clone());
            max
        }
    };
    for (fsm_block, &best) in max_by_page.iter().enumerate() {
        if best < wanted {
            continue;
        }
        let fsm_block = fsm_block as u32;
        let first_heap = fsm_block * HEAP_BLOCKS_PER_FSM_PAGE;
        let raises_before = summary.raises.load(Ordering::SeqCst);
        let id = read_map_page(s, rel, Fork::FreeSpace, fsm_block)?;
        let (found, max) = s.with_page(id, |page| {
            let entries = &page[PAGE_HEADER_SIZE..];
            let found = entries
                .iter()
                .enumerate()
                .find(|&(i, &c)| c >= wanted && !except.contains(&(first_heap + i as u32)))
                .map(|(i, _)| first_heap + i as u32);
            (found, entries.iter().copied().max().unwrap_or(0))
        });
        s.release(id);
        // Correct the summary downward too: `record` only raises it.
        summary.correct(fsm_block, max, raises_before);
        if found.is_some() {
            return Ok(found);
        }
    }
    Ok(None)
}

/// Forgets the free space of heap pages from `heap_nblocks` on (they were
/// cut off the table).
pub fn truncate(
    s: &mut BufferSession,
    rel: u32,
    heap_nblocks: u32,
    summary: &FsmSummary,
) -> Result<(), BufferError> {
    let fsm_nblocks = s.pool().relation(rel).nblocks(Fork::FreeSpace)?;
    let (first_fsm_block, first_byte) = locate(heap_nblocks);
    for fsm_block in first_fsm_block..fsm_nblocks {
        let from = if fsm_block == first_fsm_block {
            first_byte
        } else {
            PAGE_HEADER_SIZE
        };
        let id = read_map_page(s, rel, Fork::FreeSpace, fsm_block)?;
        if s.with_page(id, |page| page[from..].iter().any(|&c| c != 0)) {
            s.modify_page(id, |page| page[from..].fill(0));
        }
        s.release(id);
    }
    summary.reset();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_never_promise_more_than_a_page_has() {
        for free in [0, 31, 32, 33, 100, 8000, BLOCK_SIZE] {
            let c = category_of(free);
            assert!(c as usize * CATEGORY_BYTES <= free, "{free}");
            // Whatever a page of category c has, a need of up to c
            // steps is met.
            assert!(category_needed(c as usize * CATEGORY_BYTES) <= c);
        }
        assert_eq!(category_needed(1), 1);
        assert_eq!(category_needed(32), 1);
        assert_eq!(category_needed(33), 2);
        assert_eq!(locate(HEAP_BLOCKS_PER_FSM_PAGE), (1, PAGE_HEADER_SIZE));
    }
}
