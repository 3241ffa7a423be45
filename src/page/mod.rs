//! Pages: PostgreSQL's page header, line pointers and checksum.
//!
//! The layout is PostgreSQL's (`bufpage.h`), so that pages can be checked
//! with PostgreSQL's tools and PostgreSQL's files with ours:
//!
//! ```text
//! 0   pd_lsn            u64 (two u32 halves: xlogid, xrecoff)
//! 8   pd_checksum       u16
//! 10  pd_flags          u16
//! 12  pd_lower          u16   end of the line pointer array
//! 14  pd_upper          u16   start of tuple space
//! 16  pd_special        u16   start of the special space
//! 18  pd_pagesize_version u16 page size | layout version (4)
//! 20  pd_prune_xid      u32
//! 24  line pointers, 4 bytes each: offset 15 bits, flags 2, length 15
//! ```
//!
//! A new page is all zeros; it is valid and carries no checksum. This module
//! knows nothing about files or buffers: it works on `&[u8; BLOCK_SIZE]`.

mod checksum;

pub use checksum::{page_checksum, CHECKSUM_OFFSET};

use crate::storage::BLOCK_SIZE;

/// Size of the page header in bytes.
pub const PAGE_HEADER_SIZE: usize = 24;
/// Size of one line pointer in bytes.
pub const LINE_POINTER_SIZE: usize = 4;
/// PostgreSQL's page layout version since 8.3.
pub const PAGE_LAYOUT_VERSION: u16 = 4;
/// Flag bits a valid page may have set (PD_HAS_FREE_LINES, PD_PAGE_FULL,
/// PD_ALL_VISIBLE).
pub const PD_VALID_FLAG_BITS: u16 = 0x0007;
/// Alignment of tuples and the special space (PostgreSQL's MAXALIGN).
pub const MAX_ALIGN: usize = 8;

/// A page-sized byte array.
pub type PageBytes = [u8; BLOCK_SIZE];

/// The page header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PageHeader {
    pub lsn: u64,
    pub checksum: u16,
    pub flags: u16,
    pub lower: u16,
    pub upper: u16,
    pub special: u16,
    pub pagesize_version: u16,
    pub prune_xid: u32,
}

fn u16_at(page: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([page[at], page[at + 1]])
}

fn u32_at(page: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([page[at], page[at + 1], page[at + 2], page[at + 3]])
}

fn put_u16(page: &mut [u8], at: usize, v: u16) {
    page[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

fn put_u32(page: &mut [u8], at: usize, v: u32) {
    page[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

impl PageHeader {
    pub fn read(page: &PageBytes) -> PageHeader {
        let xlogid = u32_at(page, 0) as u64;
        let xrecoff = u32_at(page, 4) as u64;
        PageHeader {
            lsn: (xlogid << 32) | xrecoff,
            checksum: u16_at(page, 8),
            flags: u16_at(page, 10),
            lower: u16_at(page, 12),
            upper: u16_at(page, 14),
            special: u16_at(page, 16),
            pagesize_version: u16_at(page, 18),
            prune_xid: u32_at(page, 20),
        }
    }

    pub fn write(&self, page: &mut PageBytes) {
        put_u32(page, 0, (self.lsn >> 32) as u32);
        put_u32(page, 4, self.lsn as u32);
        put_u16(page, 8, self.checksum);
        put_u16(page, 10, self.flags);
        put_u16(page, 12, self.lower);
        put_u16(page, 14, self.upper);
        put_u16(page, 16, self.special);
        put_u16(page, 18, self.pagesize_version);
        put_u32(page, 20, self.prune_xid);
    }

    /// The checks PostgreSQL's `PageIsVerified` makes of a non-new header.
    pub fn is_sane(&self) -> bool {
        self.flags & !PD_VALID_FLAG_BITS == 0
            && self.lower as usize >= PAGE_HEADER_SIZE
            && self.lower <= self.upper
            && self.upper <= self.special
            && self.special as usize <= BLOCK_SIZE
            && (self.special as usize).is_multiple_of(MAX_ALIGN)
    }
}

/// Formats `page` as an empty page with `special_size` bytes of special
/// space (rounded up to MAX_ALIGN).
pub fn init_page(page: &mut PageBytes, special_size: usize) {
    let special = BLOCK_SIZE - special_size.next_multiple_of(MAX_ALIGN);
    page.fill(0);
    PageHeader {
        lower: PAGE_HEADER_SIZE as u16,
        upper: special as u16,
        special: special as u16,
        pagesize_version: BLOCK_SIZE as u16 | PAGE_LAYOUT_VERSION,
        ..Default::default()
    }
    .write(page);
}

/// True if `page` was never formatted (PostgreSQL's `PageIsNew`): a block
/// added to a file and not yet given a header, all zeros when valid.
pub fn is_new(page: &PageBytes) -> bool {
    PageHeader::read(page).upper == 0
}

/// Free bytes of a page just formatted without special space: what a new
/// block offers inserts.
pub const EMPTY_PAGE_FREE_BYTES: usize = BLOCK_SIZE - PAGE_HEADER_SIZE;

/// What a line pointer says of its item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineFlags {
    Unused = 0,
    Normal = 1,
    Redirect = 2,
    Dead = 3,
}

/// A decoded line pointer (PostgreSQL's ItemIdData).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinePointer {
    pub offset: u16,
    pub flags: LineFlags,
    pub length: u16,
}

impl LinePointer {
    pub fn decode(raw: u32) -> LinePointer {
        let flags = match (raw >> 15) & 3 {
            0 => LineFlags::Unused,
            1 => LineFlags::Normal,
            2 => LineFlags::Redirect,
            _ => LineFlags::Dead,
        };
        LinePointer {
            offset: (raw & 0x7FFF) as u16,
            flags,
            length: (raw >> 17) as u16,
        }
    }

    pub fn encode(self) -> u32 {
        debug_assert!(self.offset < 0x8000 && self.length < 0x8000);
        (self.offset as u32 & 0x7FFF) | ((self.flags as u32) << 15) | ((self.length as u32) << 17)
    }
}

/// Number of line pointers on the page.
pub fn line_pointer_count(page: &PageBytes) -> usize {
    let lower = u16_at(page, 12) as usize;
    lower.saturating_sub(PAGE_HEADER_SIZE) / LINE_POINTER_SIZE
}

/// Line pointer `index` (0-based; PostgreSQL's offset numbers are 1-based).
pub fn line_pointer(page: &PageBytes, index: usize) -> Option<LinePointer> {
    (index < line_pointer_count(page))
        .then(|| LinePointer::decode(u32_at(page, PAGE_HEADER_SIZE + index * LINE_POINTER_SIZE)))
}

/// Free bytes between the line pointer array and the tuple space.
pub fn free_space(page: &PageBytes) -> usize {
    let h = PageHeader::read(page);
    (h.upper as usize).saturating_sub(h.lower as usize)
}

/// Line pointer array holds unused entries that `add_item` may reuse.
pub const PD_HAS_FREE_LINES: u16 = 0x0001;
/// Every tuple on the page is visible to every transaction.
pub const PD_ALL_VISIBLE: u16 = 0x0004;

/// Adds `item` to the page, returning its line pointer index, or `None` if
/// it does not fit. An unused line pointer is reused if there is one, so
/// that vacuumed pages do not grow their line pointer array.
pub fn add_item(page: &mut PageBytes, item: &[u8]) -> Option<usize> {
    let mut h = PageHeader::read(page);
    debug_assert!(h.is_sane(), "adding to a page with a bad header: {h:?}");
    let aligned = item.len().next_multiple_of(MAX_ALIGN);
    let reuse = if h.flags & PD_HAS_FREE_LINES != 0 {
        (0..line_pointer_count(page))
            .find(|&i| line_pointer(page, i).is_some_and(|lp| lp.flags == LineFlags::Unused))
    } else {
        None
    };
    let pointer_bytes = if reuse.is_some() {
        0
    } else {
        LINE_POINTER_SIZE
    };
    if item.is_empty() || item.len() >= 0x8000 || free_space(page) < aligned + pointer_bytes {
        return None;
    }
    let index = reuse.unwrap_or_else(|| line_pointer_count(page));
    let upper = h.upper as usize - aligned;
    page[upper..upper + item.len()].copy_from_slice(item);
    let lp = LinePointer {
        offset: upper as u16,
        flags: LineFlags::Normal,
        length: item.len() as u16,
    };
    put_u32(
        page,
        PAGE_HEADER_SIZE + index * LINE_POINTER_SIZE,
        lp.encode(),
    );
    if reuse.is_none() {
        h.lower += LINE_POINTER_SIZE as u16;
    }
    h.upper = upper as u16;
    h.write(page);
    Some(index)
}

/// Inserts `item` with line pointer `index`, shifting the line pointers
/// from `index` on up by one (PostgreSQL's `PageAddItem` with an offset,
/// as an index page keeps its items in key order). Returns false if it
/// does not fit. `index` may be the count (an append).
pub fn insert_item_at(page: &mut PageBytes, index: usize, item: &[u8]) -> bool {
    let mut h = PageHeader::read(page);
    debug_assert!(
        h.is_sane(),
        "inserting into a page with a bad header: {h:?}"
    );
    let count = line_pointer_count(page);
    assert!(index <= count, "item {index} inserted among {count}");
    let aligned = item.len().next_multiple_of(MAX_ALIGN);
    if item.is_empty() || item.len() >= 0x8000 || free_space(page) < aligned + LINE_POINTER_SIZE {
        return false;
    }
    let upper = h.upper as usize - aligned;
    page[upper..upper + item.len()].copy_from_slice(item);
    let at = PAGE_HEADER_SIZE + index * LINE_POINTER_SIZE;
    let end = PAGE_HEADER_SIZE + count * LINE_POINTER_SIZE;
    page.copy_within(at..end, at + LINE_POINTER_SIZE);
    let lp = LinePointer {
        offset: upper as u16,
        flags: LineFlags::Normal,
        length: item.len() as u16,
    };
    put_u32(page, at, lp.encode());
    h.lower += LINE_POINTER_SIZE as u16;
    h.upper = upper as u16;
    h.write(page);
    true
}

/// Deletes the items whose line pointer `delete` says so, closing the
/// gaps in the line pointer array (the others move down, keeping their
/// order) and packing the remaining items at the end of the page
/// (PostgreSQL's `PageIndexMultiDelete`). Returns how many went.
pub fn delete_items(page: &mut PageBytes, mut delete: impl FnMut(usize) -> bool) -> usize {
    let mut h = PageHeader::read(page);
    let count = line_pointer_count(page);
    let mut kept: Vec<KeptItem> = Vec::with_capacity(count);
    for i in 0..count {
        if !delete(i) {
            // Moved down to the next free line pointer. Index pages hold
            // only normal line pointers (nothing marks them otherwise).
            let kept_item = KeptItem::of(page, i, kept.len())
                .unwrap_or_else(|| panic!("line pointer {i} of an ordered page holds no item"));
            kept.push(kept_item);
        }
    }
    let removed = count - kept.len();
    if removed == 0 {
        return 0;
    }
    let upper = pack_items(page, h.special as usize, &kept);
    let lower = PAGE_HEADER_SIZE + kept.len() * LINE_POINTER_SIZE;
    page[lower..upper].fill(0);
    h.lower = lower as u16;
    h.upper = upper as u16;
    h.write(page);
    removed
}

/// The special space at the end of the page (an index's page links).
pub fn special(page: &PageBytes) -> &[u8] {
    &page[u16_at(page, 16) as usize..]
}

/// The special space, for changing.
pub fn special_mut(page: &mut PageBytes) -> &mut [u8] {
    let at = u16_at(page, 16) as usize;
    &mut page[at..]
}

/// The bytes of item `index` for changing in place (same length).
pub fn item_mut(page: &mut PageBytes, index: usize) -> Option<&mut [u8]> {
    let lp = line_pointer(page, index)?;
    let (start, end) = (lp.offset as usize, lp.offset as usize + lp.length as usize);
    (lp.flags == LineFlags::Normal && start >= PAGE_HEADER_SIZE && end <= BLOCK_SIZE)
        .then(|| &mut page[start..end])
}

/// What pruning makes of one used line pointer (PostgreSQL's
/// `heap_page_prune` records): it stays as it is, or its item's storage
/// goes and it becomes dead (an index entry may still point at it),
/// unused (free for reuse), or a redirect to another line pointer of the
/// page (the first live tuple of a HOT chain whose root is gone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineFate {
    Keep,
    Dead,
    Unused,
    Redirect(u16),
}

/// Gives each used line pointer (normal, dead or redirect) the fate
/// `fate` chooses for it, packs the items kept together at the end of the
/// page, making the space of those that went one free block (PostgreSQL's
/// `PageRepairFragmentation`), and drops unused line pointers at the
/// array's end. Indexes of the line pointers that stay do not change.
/// Returns how many line pointers changed.
pub fn prune_items(
    page: &mut PageBytes,
    mut fate: impl FnMut(usize, LineFlags) -> LineFate,
) -> usize {
    let mut h = PageHeader::read(page);
    let count = line_pointer_count(page);
    let mut kept: Vec<KeptItem> = Vec::with_capacity(count);
    let mut changed = 0;
    for i in 0..count {
        let Some(lp) = line_pointer(page, i) else {
            continue;
        };
        if lp.flags == LineFlags::Unused {
            continue;
        }
        let new = match fate(i, lp.flags) {
            LineFate::Keep => {
                kept.extend(KeptItem::of(page, i, i));
                continue;
            }
            LineFate::Dead => LinePointer {
                offset: 0,
                flags: LineFlags::Dead,
                length: 0,
            },
            LineFate::Unused => LinePointer {
                offset: 0,
                flags: LineFlags::Unused,
                length: 0,
            },
            LineFate::Redirect(to) => {
                debug_assert!(
                    usize::from(to) < count && usize::from(to) != i,
                    "line pointer {i} redirected to {to} of {count}"
                );
                LinePointer {
                    offset: to,
                    flags: LineFlags::Redirect,
                    length: 0,
                }
            }
        };
        if new != lp {
            changed += 1;
        }
        put_u32(page, PAGE_HEADER_SIZE + i * LINE_POINTER_SIZE, new.encode());
    }
    let upper = pack_items(page, h.special as usize, &kept);
    // Unused pointers at the end of the array are dropped altogether.
    let mut lines = count;
    while lines > 0 && line_pointer(page, lines - 1).is_some_and(|lp| lp.flags == LineFlags::Unused)
    {
        lines -= 1;
    }
    let free_lines =
        (0..lines).any(|i| line_pointer(page, i).is_some_and(|lp| lp.flags == LineFlags::Unused));
    page[PAGE_HEADER_SIZE + lines * LINE_POINTER_SIZE..upper].fill(0);
    h.lower = (PAGE_HEADER_SIZE + lines * LINE_POINTER_SIZE) as u16;
    h.upper = upper as u16;
    h.flags = if free_lines {
        h.flags | PD_HAS_FREE_LINES
    } else {
        h.flags & !PD_HAS_FREE_LINES
    };
    h.write(page);
    debug_assert!(h.is_sane(), "pruning left a bad header: {h:?}");
    changed
}

/// The line pointer that line pointer `index` redirects to, if it is a
/// redirect ([`LineFate::Redirect`]).
pub fn redirect_target(page: &PageBytes, index: usize) -> Option<usize> {
    line_pointer(page, index)
        .filter(|lp| lp.flags == LineFlags::Redirect)
        .map(|lp| usize::from(lp.offset))
}

/// Whether line pointer `index` is dead ([`LineFate::Dead`]).
pub fn is_dead_item(page: &PageBytes, index: usize) -> bool {
    line_pointer(page, index).is_some_and(|lp| lp.flags == LineFlags::Dead)
}

/// An item [`pack_items`] keeps: its (new) line pointer index and where
/// its bytes are on the page before the packing.
struct KeptItem {
    index: usize,
    offset: usize,
    length: usize,
}

impl KeptItem {
    /// Item `i` of `page`, to be pointed at by line pointer `index`, if
    /// it is a normal item within the page ([`item`]).
    fn of(page: &PageBytes, i: usize, index: usize) -> Option<KeptItem> {
        let bytes = item(page, i)?;
        let lp = line_pointer(page, i)?;
        debug_assert_eq!(bytes.len(), lp.length as usize);
        Some(KeptItem {
            index,
            offset: lp.offset as usize,
            length: lp.length as usize,
        })
    }
}

/// Packs `items` at the end of the page below `special`, in their order,
/// each pointed at by its line pointer; returns the new `pd_upper`. The
/// bytes come from one copy of the page taken first (PostgreSQL moves
/// them in place in offset order): a copy per item, as this was, put
/// about half of TPC-B's pruning in the allocator (`perf`, 8 clients).
fn pack_items(page: &mut PageBytes, special: usize, items: &[KeptItem]) -> usize {
    let before: PageBytes = *page;
    let mut upper = special;
    for kept in items {
        let bytes = &before[kept.offset..kept.offset + kept.length];
        upper -= bytes.len().next_multiple_of(MAX_ALIGN);
        assert!(
            upper >= PAGE_HEADER_SIZE,
            "packed items run into the page header"
        );
        page[upper..upper + bytes.len()].copy_from_slice(bytes);
        let lp = LinePointer {
            offset: upper as u16,
            flags: LineFlags::Normal,
            length: bytes.len() as u16,
        };
        put_u32(
            page,
            PAGE_HEADER_SIZE + kept.index * LINE_POINTER_SIZE,
            lp.encode(),
        );
    }
    upper
}

/// The page's `pd_lsn`: where the WAL record of its last change ends (the
/// WAL must be durable up to here before the page is written).
pub fn page_lsn(page: &PageBytes) -> u64 {
    (u32_at(page, 0) as u64) << 32 | u32_at(page, 4) as u64
}

pub fn set_page_lsn(page: &mut PageBytes, lsn: u64) {
    put_u32(page, 0, (lsn >> 32) as u32);
    put_u32(page, 4, lsn as u32);
}

/// The page's flag bits (`PD_*`).
pub fn page_flags(page: &PageBytes) -> u16 {
    u16_at(page, 10)
}

pub fn set_page_flags(page: &mut PageBytes, flags: u16) {
    debug_assert_eq!(flags & !PD_VALID_FLAG_BITS, 0);
    put_u16(page, 10, flags);
}

/// The bytes of item `index`, if it is a normal item within the page.
pub fn item(page: &PageBytes, index: usize) -> Option<&[u8]> {
    let lp = line_pointer(page, index)?;
    let (start, end) = (lp.offset as usize, lp.offset as usize + lp.length as usize);
    (lp.flags == LineFlags::Normal && start >= PAGE_HEADER_SIZE && end <= BLOCK_SIZE)
        .then(|| &page[start..end])
}

/// Stores the checksum for block `blkno` in the page, as the last step
/// before writing it.
pub fn set_checksum(page: &mut PageBytes, blkno: u32) {
    let sum = page_checksum(page, blkno);
    put_u16(page, CHECKSUM_OFFSET, sum);
}

/// The outcome of verifying a page read from disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageVerdict {
    /// A sane header and a matching checksum.
    Valid,
    /// All zeros: a new page, valid without a checksum.
    New,
    /// The header is sane but the checksum does not match.
    ChecksumMismatch { stored: u16, computed: u16 },
    /// The header is not sane (or the page looks new but is not all zeros).
    BadHeader,
}

impl PageVerdict {
    pub fn is_ok(self) -> bool {
        matches!(self, PageVerdict::Valid | PageVerdict::New)
    }
}

/// Verifies a page as PostgreSQL's `PageIsVerified` does with data checksums
/// on: a page whose `pd_upper` is 0 must be all zeros; any other page must
/// have a sane header and a matching checksum.
pub fn verify_page(page: &PageBytes, blkno: u32) -> PageVerdict {
    if is_new(page) {
        return if page.iter().all(|&b| b == 0) {
            PageVerdict::New
        } else {
            PageVerdict::BadHeader
        };
    }
    let header = PageHeader::read(page);
    if !header.is_sane() {
        return PageVerdict::BadHeader;
    }
    let computed = page_checksum(page, blkno);
    if computed != header.checksum {
        return PageVerdict::ChecksumMismatch {
            stored: header.checksum,
            computed,
        };
    }
    PageVerdict::Valid
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PG15_HEAP: &[u8] = include_bytes!("../../tests/fixtures/pg15_heap_3blocks.bin");

    fn pg_page(blkno: usize) -> PageBytes {
        PG15_HEAP[blkno * BLOCK_SIZE..(blkno + 1) * BLOCK_SIZE]
            .try_into()
            .unwrap()
    }

    #[test]
    fn postgresql_pages_verify_and_their_header_reads_back() {
        for blkno in 0..3 {
            let page = pg_page(blkno);
            assert_eq!(verify_page(&page, blkno as u32), PageVerdict::Valid);
            let h = PageHeader::read(&page);
            assert_eq!(
                (h.lower, h.upper, h.special, h.pagesize_version),
                (504, 512, 8192, 0x2004)
            );
            let mut copy = [0u8; BLOCK_SIZE];
            copy.copy_from_slice(&page);
            h.write(&mut copy);
            assert_eq!(copy, page);
        }
    }

    #[test]
    fn a_page_verified_at_the_wrong_block_number_fails() {
        let page = pg_page(1);
        assert!(matches!(
            verify_page(&page, 2),
            PageVerdict::ChecksumMismatch { .. }
        ));
    }

    #[test]
    fn all_zero_page_is_new_and_valid() {
        assert_eq!(verify_page(&[0u8; BLOCK_SIZE], 5), PageVerdict::New);
    }

    #[test]
    fn stray_bytes_on_a_page_with_zero_upper_are_a_bad_header() {
        let mut page = [0u8; BLOCK_SIZE];
        page[100] = 1;
        assert_eq!(verify_page(&page, 0), PageVerdict::BadHeader);
    }

    #[test]
    fn a_flipped_bit_is_a_checksum_mismatch() {
        let mut page = pg_page(0);
        page[6000] ^= 0x10;
        assert!(matches!(
            verify_page(&page, 0),
            PageVerdict::ChecksumMismatch { .. }
        ));
    }

    #[test]
    fn line_pointers_round_trip() {
        let lp = LinePointer {
            offset: 8000,
            flags: LineFlags::Dead,
            length: 191,
        };
        assert_eq!(LinePointer::decode(lp.encode()), lp);
    }

    /// A page holding an item of each size that fits (item `n` filled with
    /// byte n + 1), and each one's line pointer and bytes.
    fn page_of_items(sizes: &[usize]) -> (PageBytes, Vec<(usize, Vec<u8>)>) {
        let mut page = [0u8; BLOCK_SIZE];
        init_page(&mut page, 0);
        let mut added = Vec::new();
        for (n, &size) in sizes.iter().enumerate() {
            let bytes = vec![n as u8 + 1; size];
            if let Some(i) = add_item(&mut page, &bytes) {
                added.push((i, bytes));
            }
        }
        (page, added)
    }

    proptest! {
        #[test]
        fn added_items_read_back_and_the_page_stays_verifiable(
            items in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..400), 1..60),
            blkno in any::<u32>(),
        ) {
            let mut page = [0u8; BLOCK_SIZE];
            init_page(&mut page, 16);
            let mut stored = Vec::new();
            for it in &items {
                match add_item(&mut page, it) {
                    Some(index) => stored.push((index, it.clone())),
                    None => prop_assert!(free_space(&page) < it.len().next_multiple_of(MAX_ALIGN) + LINE_POINTER_SIZE),
                }
                prop_assert!(PageHeader::read(&page).is_sane());
            }
            for (index, it) in &stored {
                prop_assert_eq!(item(&page, *index).unwrap(), &it[..]);
            }
            set_checksum(&mut page, blkno);
            prop_assert_eq!(verify_page(&page, blkno), PageVerdict::Valid);
        }

        #[test]
        fn removing_items_keeps_the_others_and_frees_their_space(
            sizes in proptest::collection::vec(1usize..300, 1..40),
            mask: u64,
        ) {
            let (mut page, added) = page_of_items(&sizes);
            let removed = prune_items(&mut page, |i, _| {
                if mask & (1 << (i % 64)) != 0 { LineFate::Unused } else { LineFate::Keep }
            });
            let mut expected_free = BLOCK_SIZE - PAGE_HEADER_SIZE;
            let mut gone = 0;
            for (i, bytes) in &added {
                if mask & (1 << (i % 64)) != 0 {
                    prop_assert_eq!(item(&page, *i), None);
                    gone += 1;
                } else {
                    prop_assert_eq!(item(&page, *i), Some(&bytes[..]));
                    expected_free -= bytes.len().next_multiple_of(MAX_ALIGN);
                }
            }
            prop_assert_eq!(removed, gone);
            expected_free -= line_pointer_count(&page) * LINE_POINTER_SIZE;
            prop_assert_eq!(free_space(&page), expected_free);
            prop_assert!(PageHeader::read(&page).is_sane());
            // Freed line pointers are reused before the array grows.
            let lines = line_pointer_count(&page);
            if page_flags(&page) & PD_HAS_FREE_LINES != 0 {
                add_item(&mut page, b"again").unwrap();
                prop_assert_eq!(line_pointer_count(&page), lines);
            }
        }

        #[test]
        fn dead_items_free_their_storage_keep_their_line_pointers_until_removed(
            sizes in proptest::collection::vec(1usize..300, 1..40),
            mask: u64,
        ) {
            let (mut page, added) = page_of_items(&sizes);
            let lines = line_pointer_count(&page);
            let is_marked = |i: usize| mask & (1 << (i % 64)) != 0;
            let marked = prune_items(&mut page, |i, _| {
                if is_marked(i) { LineFate::Dead } else { LineFate::Keep }
            });
            prop_assert_eq!(marked, added.iter().filter(|(i, _)| is_marked(*i)).count());
            // Dead line pointers are not reused, and hold no bytes.
            prop_assert_eq!(line_pointer_count(&page), lines);
            let kept: usize = added
                .iter()
                .filter(|(i, _)| !is_marked(*i))
                .map(|(_, b)| b.len().next_multiple_of(MAX_ALIGN))
                .sum();
            prop_assert_eq!(
                free_space(&page),
                BLOCK_SIZE - PAGE_HEADER_SIZE - lines * LINE_POINTER_SIZE - kept
            );
            for (i, bytes) in &added {
                prop_assert_eq!(is_dead_item(&page, *i), is_marked(*i));
                if !is_marked(*i) {
                    prop_assert_eq!(item(&page, *i), Some(&bytes[..]));
                }
            }
            if marked > 0 {
                add_item(&mut page, b"new").unwrap();
                prop_assert_eq!(line_pointer_count(&page), lines + 1);
            }
            // Removing them makes their line pointers free again.
            let removed = prune_items(&mut page, |i, flags| {
                if i < lines && flags == LineFlags::Dead { LineFate::Unused } else { LineFate::Keep }
            });
            prop_assert_eq!(removed, marked);
            prop_assert!(added.iter().all(|(i, _)| !is_dead_item(&page, *i)));
            prop_assert!(PageHeader::read(&page).is_sane());
        }

        #[test]
        fn redirects_keep_their_target_and_survive_later_pruning(
            sizes in proptest::collection::vec(1usize..300, 2..40),
            mask: u64,
        ) {
            // Each marked item but the last redirects to the last item
            // (a HOT chain's root whose storage went), as pruning does.
            let (mut page, added) = page_of_items(&sizes);
            let target = added.last().unwrap().0;
            let is_marked = |i: usize| i != target && mask & (1 << (i % 64)) != 0;
            let redirected = prune_items(&mut page, |i, _| {
                if is_marked(i) { LineFate::Redirect(target as u16) } else { LineFate::Keep }
            });
            prop_assert_eq!(redirected, added.iter().filter(|(i, _)| is_marked(*i)).count());
            for (i, bytes) in &added {
                if is_marked(*i) {
                    prop_assert_eq!(redirect_target(&page, *i), Some(target));
                    prop_assert_eq!(item(&page, *i), None);
                    prop_assert!(!is_dead_item(&page, *i));
                } else {
                    prop_assert_eq!(redirect_target(&page, *i), None);
                    prop_assert_eq!(item(&page, *i), Some(&bytes[..]));
                }
            }
            // A redirect is never reused for a new item, and a later
            // pruning that keeps it keeps its target.
            let lines = line_pointer_count(&page);
            if redirected > 0 && page_flags(&page) & PD_HAS_FREE_LINES == 0 {
                add_item(&mut page, b"new").unwrap();
                prop_assert_eq!(line_pointer_count(&page), lines + 1);
            }
            prune_items(&mut page, |_, _| LineFate::Keep);
            for (i, _) in &added {
                prop_assert_eq!(redirect_target(&page, *i), is_marked(*i).then_some(target));
            }
            prop_assert!(PageHeader::read(&page).is_sane());
        }

        #[test]
        fn the_verifier_never_panics_on_arbitrary_bytes(
            bytes in proptest::collection::vec(any::<u8>(), BLOCK_SIZE..=BLOCK_SIZE),
            blkno in any::<u32>(),
        ) {
            let page: PageBytes = bytes.try_into().unwrap();
            let verdict = verify_page(&page, blkno);
            if verdict.is_ok() {
                prop_assert!(PageHeader::read(&page).is_sane() || page.iter().all(|&b| b == 0));
            }
        }
    }
}

#[cfg(test)]
mod ordered_item_tests {
    use super::*;

    fn items(page: &PageBytes) -> Vec<Vec<u8>> {
        (0..line_pointer_count(page))
            .map(|i| item(page, i).expect("normal").to_vec())
            .collect()
    }

    #[test]
    fn insert_at_keeps_order_and_delete_closes_gaps() {
        let mut page = [0u8; BLOCK_SIZE];
        init_page(&mut page, 16);
        assert!(insert_item_at(&mut page, 0, b"b"));
        assert!(insert_item_at(&mut page, 0, b"a"));
        assert!(insert_item_at(&mut page, 2, b"d"));
        assert!(insert_item_at(&mut page, 2, b"c"));
        assert_eq!(
            items(&page),
            vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]
        );
        let free = free_space(&page);
        assert_eq!(delete_items(&mut page, |i| i == 1 || i == 3), 2);
        assert_eq!(items(&page), vec![b"a".to_vec(), b"c".to_vec()]);
        assert_eq!(
            free_space(&page),
            free + 2 * (MAX_ALIGN + LINE_POINTER_SIZE)
        );
        assert!(PageHeader::read(&page).is_sane());
        assert_eq!(special(&page).len(), 16);
    }

    #[test]
    fn insert_at_refuses_what_does_not_fit() {
        let mut page = [0u8; BLOCK_SIZE];
        init_page(&mut page, 0);
        let big = vec![7u8; 4000];
        assert!(insert_item_at(&mut page, 0, &big));
        assert!(insert_item_at(&mut page, 1, &big));
        assert!(!insert_item_at(&mut page, 1, &big));
        assert_eq!(line_pointer_count(&page), 2);
    }
}
