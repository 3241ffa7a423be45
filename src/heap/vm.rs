//! Visibility map: one bit per heap page, set when every tuple on the page
//! is visible to every transaction (by vacuum), cleared by any change to
//! the page. Kept in the relation's `_vm` fork, read and written through the
//! buffer pool like any other page.
//!
//! The heap page's own `PD_ALL_VISIBLE` flag is the authority (changed under
//! the page's content lock); the map is a summary that lets vacuum (and
//! later index-only scans) skip pages without reading them. A change clears
//! the page flag first and the bit right after; vacuum sets the flag and
//! then the bit. So a set bit always has its flag set, or a change is about
//! to clear both.

use super::{read_map_page, HeapError};
use crate::buffer::{BufferError, BufferSession};
use crate::page::{init_page, is_new, page_lsn, set_page_lsn, PageBytes, PAGE_HEADER_SIZE};
use crate::storage::{Fork, BLOCK_SIZE};
use crate::wal::{BlockTag, Lsn, PageRef, Rmgr, Wal};

/// Heap pages covered by one map page.
pub const HEAP_BLOCKS_PER_VM_PAGE: u32 = ((BLOCK_SIZE - PAGE_HEADER_SIZE) * 8) as u32;

fn locate(heap_block: u32) -> (u32, usize, u8) {
    let vm_block = heap_block / HEAP_BLOCKS_PER_VM_PAGE;
    let bit = (heap_block % HEAP_BLOCKS_PER_VM_PAGE) as usize;
    (vm_block, PAGE_HEADER_SIZE + bit / 8, 1 << (bit % 8))
}

/// Sets the bits of `heap_blocks` (vacuum found them all-visible, or a
/// frozen load filled them, and set their pages' flags first), changing
/// and logging each map page once (`wal` None: a relation that skips the
/// WAL, whose map pages are changed unlogged). Extends the map as needed;
/// the caller holds the relation's extension lock for that.
pub fn set_all_visible(
    s: &mut BufferSession,
    wal: Option<&Wal>,
    rel: u32,
    heap_blocks: &[u32],
) -> Result<(), HeapError> {
    let Some(last_vm_block) = heap_blocks.iter().map(|&b| locate(b).0).max() else {
        return Ok(());
    };
    let nblocks = s.pool().relation(rel).nblocks(Fork::VisibilityMap)?;
    if last_vm_block >= nblocks {
        // New map pages are formatted unlogged: the first record that sets
        // a bit on one carries its image (its LSN is 0).
        for id in s.extend(rel, Fork::VisibilityMap, last_vm_block + 1 - nblocks, None)? {
            s.modify_page(id, |page| init_page(page, 0));
            s.release(id);
        }
    }
    change(s, wal, rel, heap_blocks, true)
}

/// Sets (or clears) the bits of `heap_blocks` on the map pages that exist,
/// changing and logging each map page once, and only where a bit differs.
fn change(
    s: &mut BufferSession,
    wal: Option<&Wal>,
    rel: u32,
    heap_blocks: &[u32],
    set: bool,
) -> Result<(), HeapError> {
    let nblocks = s.pool().relation(rel).nblocks(Fork::VisibilityMap)?;
    let mut sorted: Vec<u32> = heap_blocks
        .iter()
        .copied()
        .filter(|&b| locate(b).0 < nblocks)
        .collect();
    sorted.sort_unstable();
    for group in sorted.chunk_by(|a, b| locate(*a).0 == locate(*b).0) {
        let vm_block = locate(group[0]).0;
        let id = read_map_page(s, rel, Fork::VisibilityMap, vm_block)?;
        let differ: Vec<u32> = s.with_page(id, |page| {
            group
                .iter()
                .copied()
                .filter(|&b| {
                    let (_, byte, mask) = locate(b);
                    (page[byte] & mask != 0) != set
                })
                .collect()
        });
        let info = if set { VM_SET } else { VM_CLEAR };
        let result = if differ.is_empty() {
            Ok(())
        } else {
            log_change(s, wal, id, rel, vm_block, info, &differ)
        };
        s.release(id);
        result?;
    }
    Ok(())
}

/// `info` of a map record: set the bits of the heap blocks in its data.
pub const VM_SET: u8 = 0;
/// `info` of a map record: clear the bits of the heap blocks in its data.
pub const VM_CLEAR: u8 = 1;

/// A name for a map record kind (`aiostore waldump`).
pub fn record_kind_name(info: u8) -> &'static str {
    match info {
        VM_SET => "SET",
        VM_CLEAR => "CLEAR",
        _ => "UNKNOWN",
    }
}

/// Describes a map record for `aiostore waldump`: its kind and how many
/// heap blocks it sets or clears, with the first and last of them.
pub fn describe(info: u8, data: &[u8]) -> String {
    let kind = record_kind_name(info);
    let blocks = match decode_blocks(data) {
        Ok(blocks) if info == VM_SET || info == VM_CLEAR => blocks,
        Ok(_) => return format!("{kind} (info {info}, {} bytes)", data.len()),
        Err(what) => return format!("{kind} ({what}: {} bytes)", data.len()),
    };
    match blocks.as_slice() {
        [] => format!("{kind} heap blocks: 0"),
        [only] => format!("{kind} heap blocks: 1 ({only})"),
        [first, .., last] => format!("{kind} heap blocks: {} ({first}..{last})", blocks.len()),
    }
}

/// A map record's data: the heap blocks whose bits it sets or clears.
fn decode_blocks(data: &[u8]) -> Result<Vec<u32>, &'static str> {
    if !data.len().is_multiple_of(4) {
        return Err("visibility map record data is not whole block numbers");
    }
    Ok(data
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect())
}

fn change_bits(page: &mut PageBytes, heap_blocks: &[u32], set: bool) {
    for &b in heap_blocks {
        let (_, byte, mask) = locate(b);
        if set {
            page[byte] |= mask;
        } else {
            page[byte] &= !mask;
        }
    }
}

/// Whether the map has a page for heap block `heap_block` yet.
pub fn covers(s: &BufferSession, rel: u32, heap_block: u32) -> Result<bool, HeapError> {
    Ok(locate(heap_block).0 < s.pool().relation(rel).nblocks(Fork::VisibilityMap)?)
}

/// Clears the bits of `heap_blocks` (their pages' flags were cleared, or
/// the blocks are gone), logging each map page's change, so that a map
/// page is always changed by logged records only and a torn one is
/// repaired by replay from its image. (Replay also clears the bit when it
/// replays the heap change, which says it cleared the flag.) `wal` is as
/// for [`set_all_visible`].
pub fn clear(
    s: &mut BufferSession,
    wal: Option<&Wal>,
    rel: u32,
    heap_blocks: &[u32],
) -> Result<(), HeapError> {
    change(s, wal, rel, heap_blocks, false)
}

/// Changes the bits of `heap_blocks` on map page `vm_block` (pinned as
/// `id`) and logs it: [`VM_SET`] or [`VM_CLEAR`]; without a `wal` (a
/// relation that skips the WAL) the page keeps `pd_lsn` 0.
fn log_change(
    s: &mut BufferSession,
    wal: Option<&Wal>,
    id: crate::buffer::BufferId,
    rel: u32,
    vm_block: u32,
    info: u8,
    heap_blocks: &[u32],
) -> Result<(), HeapError> {
    s.modify_page(id, |page: &mut PageBytes| {
        let old_lsn = page_lsn(page);
        change_bits(page, heap_blocks, info == VM_SET);
        let Some(wal) = wal else {
            debug_assert_eq!(
                old_lsn, 0,
                "a map page of a relation that skips the WAL was logged"
            );
            return Ok(());
        };
        let mut data = Vec::with_capacity(heap_blocks.len() * 4);
        for b in heap_blocks {
            data.extend_from_slice(&b.to_le_bytes());
        }
        let lsn = wal.insert(
            Rmgr::Vm,
            info,
            0,
            &[PageRef {
                force_image: false,
                tag: BlockTag {
                    rel,
                    fork: Fork::VisibilityMap,
                    block: vm_block,
                },
                page,
                old_lsn,
            }],
            &data,
        )?;
        set_page_lsn(page, lsn);
        Ok(())
    })
}

/// Clears the bits of `heap_blocks` during replay (a truncation's blocks),
/// stamping the map pages with `lsn`; nothing is logged in replay.
pub fn clear_replayed(
    s: &mut BufferSession,
    rel: u32,
    heap_blocks: &[u32],
    lsn: Lsn,
) -> Result<(), BufferError> {
    let nblocks = s.pool().relation(rel).nblocks(Fork::VisibilityMap)?;
    let mut by_page: Vec<(u32, usize, u8)> = heap_blocks
        .iter()
        .map(|&b| locate(b))
        .filter(|&(vm_block, _, _)| vm_block < nblocks)
        .collect();
    by_page.sort_unstable();
    for group in by_page.chunk_by(|a, b| a.0 == b.0) {
        let id = read_map_page(s, rel, Fork::VisibilityMap, group[0].0)?;
        s.modify_page(id, |page: &mut PageBytes| {
            if !is_new(page) && page_lsn(page) < lsn {
                for &(_, byte, mask) in group {
                    page[byte] &= !mask;
                }
                set_page_lsn(page, lsn);
            }
        });
        s.release(id);
    }
    Ok(())
}

/// The heap blocks a map record's data names.
pub fn record_blocks(data: &[u8]) -> Result<Vec<u32>, &'static str> {
    decode_blocks(data)
}

/// Clears the bits of `heap_blocks` on a map page (replay: bits whose heap
/// page lacks its flag).
pub fn clear_bits(page: &mut PageBytes, heap_blocks: &[u32]) {
    if !heap_blocks.is_empty() && !is_new(page) {
        change_bits(page, heap_blocks, false);
    }
}

/// Replays a map record (`info`, `data`) on its page.
pub fn redo(page: &mut PageBytes, info: u8, data: &[u8]) -> Result<(), &'static str> {
    if info != VM_SET && info != VM_CLEAR {
        return Err("unknown visibility map record kind");
    }
    let blocks = decode_blocks(data)?;
    if is_new(page) {
        init_page(page, 0);
    }
    change_bits(page, &blocks, info == VM_SET);
    Ok(())
}

/// The bits of heap blocks `0..nblocks`, read once (one map page covers
/// 512 MiB of heap).
pub fn all_visible_bits(
    s: &mut BufferSession,
    rel: u32,
    nblocks: u32,
) -> Result<Vec<bool>, BufferError> {
    let mut bits = vec![false; nblocks as usize];
    let vm_nblocks = s.pool().relation(rel).nblocks(Fork::VisibilityMap)?;
    for vm_block in 0..vm_nblocks {
        let first = vm_block * HEAP_BLOCKS_PER_VM_PAGE;
        if first >= nblocks {
            break;
        }
        let id = read_map_page(s, rel, Fork::VisibilityMap, vm_block)?;
        s.with_page(id, |page| {
            for heap_block in first..nblocks.min(first + HEAP_BLOCKS_PER_VM_PAGE) {
                let (_, byte, mask) = locate(heap_block);
                bits[heap_block as usize] = page[byte] & mask != 0;
            }
        });
        s.release(id);
    }
    Ok(bits)
}

/// Looks up heap pages' bits one at a time, keeping the last map page
/// pinned (an index-only scan asks about each entry's page, mostly on the
/// same map page): PostgreSQL's `VM_ALL_VISIBLE` with its `vmbuffer`.
///
/// A set bit read after an index entry was read means the entry's tuple
/// is visible to every snapshot: a change clears the bit before the
/// change's index entries are inserted, and vacuum sets it only for
/// tuples older than every snapshot.
#[derive(Default)]
pub struct VisibilityLookup {
    /// The pinned map page: (relation, map block, buffer).
    pinned: Option<(u32, u32, crate::buffer::BufferId)>,
}

impl VisibilityLookup {
    /// Whether heap block `heap_block` of `rel` is all-visible; a block
    /// the map does not reach is not.
    pub fn all_visible(
        &mut self,
        s: &mut BufferSession,
        rel: u32,
        heap_block: u32,
    ) -> Result<bool, BufferError> {
        let (vm_block, byte, mask) = locate(heap_block);
        let id = match self.pinned {
            Some((r, b, id)) if r == rel && b == vm_block => id,
            _ => {
                self.release(s);
                if vm_block >= s.pool().relation(rel).nblocks(Fork::VisibilityMap)? {
                    return Ok(false);
                }
                let id = read_map_page(s, rel, Fork::VisibilityMap, vm_block)?;
                self.pinned = Some((rel, vm_block, id));
                id
            }
        };
        Ok(s.with_page(id, |page| page[byte] & mask != 0))
    }

    /// Lets go of the pinned map page.
    pub fn release(&mut self, s: &mut BufferSession) {
        if let Some((_, _, id)) = self.pinned.take() {
            s.release(id);
        }
    }
}
