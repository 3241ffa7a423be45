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

use crate::buffer::{BufferError, BufferSession};
use crate::page::{init_page, PageBytes, PAGE_HEADER_SIZE};
use crate::storage::{Fork, BLOCK_SIZE};

/// Heap pages covered by one map page.
pub const HEAP_BLOCKS_PER_VM_PAGE: u32 = ((BLOCK_SIZE - PAGE_HEADER_SIZE) * 8) as u32;

fn locate(heap_block: u32) -> (u32, usize, u8) {
    let vm_block = heap_block / HEAP_BLOCKS_PER_VM_PAGE;
    let bit = (heap_block % HEAP_BLOCKS_PER_VM_PAGE) as usize;
    (vm_block, PAGE_HEADER_SIZE + bit / 8, 1 << (bit % 8))
}

/// Sets or clears the bits of `heap_blocks`, changing each map page once.
/// Setting extends the map as needed; the caller holds the relation's
/// extension lock for that.
pub fn set_all_visible(
    s: &mut BufferSession,
    rel: u32,
    heap_blocks: &[u32],
    visible: bool,
) -> Result<(), BufferError> {
    let Some(last_vm_block) = heap_blocks.iter().map(|&b| locate(b).0).max() else {
        return Ok(());
    };
    let nblocks = s.pool().relation(rel).nblocks(Fork::VisibilityMap)?;
    if last_vm_block >= nblocks && visible {
        for id in s.extend(rel, Fork::VisibilityMap, last_vm_block + 1 - nblocks, None)? {
            s.modify_page(id, |page| init_page(page, 0));
            s.release(id);
        }
    }
    let mut by_page: Vec<(u32, usize, u8)> = heap_blocks
        .iter()
        .map(|&b| locate(b))
        // A map page that does not exist records nothing to clear.
        .filter(|&(vm_block, _, _)| visible || vm_block < nblocks)
        .collect();
    by_page.sort_unstable();
    for group in by_page.chunk_by(|a, b| a.0 == b.0) {
        let id = s.read_buffer(rel, Fork::VisibilityMap, group[0].0)?;
        let differs = s.with_page(id, |page| {
            group
                .iter()
                .any(|&(_, byte, mask)| (page[byte] & mask != 0) != visible)
        });
        if differs {
            s.modify_page(id, |page: &mut PageBytes| {
                for &(_, byte, mask) in group {
                    if visible {
                        page[byte] |= mask;
                    } else {
                        page[byte] &= !mask;
                    }
                }
            });
        }
        s.release(id);
    }
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
        let id = s.read_buffer(rel, Fork::VisibilityMap, vm_block)?;
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
