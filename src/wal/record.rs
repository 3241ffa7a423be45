//! The WAL record format.
//!
//! The log is one stream of bytes addressed by LSN (a byte position; 0 is
//! "no LSN"). Records are 8-byte aligned. A record never starts in the last
//! [`RECORD_HEADER_SIZE`] − 1 bytes of a [`WAL_BLOCK_SIZE`] block: the
//! inserter and the reader both skip to the next block there, so that a
//! write ending on a block boundary can always be padded with a record.
//!
//! ```text
//! 0   tot_len   u32   header + body, without alignment padding
//! 4   crc       u32   CRC-32C of the body (24..tot_len), then of bytes
//!                     8..24, then of bytes 0..4
//! 8   prev      u64   LSN of the previous record (stale bytes of a
//!                     recycled segment or an earlier life fail this check)
//! 16  xid       u32   transaction, 0 for none
//! 20  rmgr      u8    which resource manager replays it
//! 21  info      u8    record kind within the resource manager
//! 22  nblocks   u8    block references that follow
//! 23  flags     u8    0
//! 24  block references, each 16 bytes:
//!       rel u32, block u32, fork u8, flags u8 (HAS_IMAGE), hole_offset u16,
//!       hole_length u16, 2 bytes 0
//!     then for each reference with an image its page without the hole
//!     then the record's data (to tot_len)
//! ```
//!
//! A full-page image of a heap page leaves out the page's hole (between
//! `pd_lower` and `pd_upper`), as PostgreSQL's does for standard pages; a
//! map page's image is whole (its bits are where a heap page's hole is).

use crate::page::{PageBytes, PageHeader, PAGE_HEADER_SIZE};
use crate::storage::{Fork, BLOCK_SIZE};

/// A position in the log.
pub type Lsn = u64;

/// No LSN: a page never logged, a record with no predecessor.
pub const INVALID_LSN: Lsn = 0;

/// The unit of WAL writes: writes start and end on these boundaries.
pub const WAL_BLOCK_SIZE: u64 = 8192;
pub const RECORD_HEADER_SIZE: usize = 24;
pub const BLOCK_REF_SIZE: usize = 16;
/// Largest record accepted (a page image and a tuple fit many times over).
pub const MAX_RECORD_SIZE: usize = 1 << 20;
/// Most block references in one record.
pub const MAX_BLOCK_REFS: usize = 4;

const HAS_IMAGE: u8 = 1;

/// Which part of the engine replays a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Rmgr {
    /// The log itself: checkpoints, padding.
    Xlog = 0,
    /// Transaction ends.
    Xact = 1,
    /// Relation files: create, truncate, drop.
    Smgr = 2,
    /// Heap page changes.
    Heap = 3,
    /// Visibility map bits.
    Vm = 4,
    /// B-tree index page changes.
    Btree = 5,
}

impl Rmgr {
    pub fn from_u8(v: u8) -> Option<Rmgr> {
        Some(match v {
            0 => Rmgr::Xlog,
            1 => Rmgr::Xact,
            2 => Rmgr::Smgr,
            3 => Rmgr::Heap,
            4 => Rmgr::Vm,
            5 => Rmgr::Btree,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Rmgr::Xlog => "XLOG",
            Rmgr::Xact => "Transaction",
            Rmgr::Smgr => "Storage",
            Rmgr::Heap => "Heap",
            Rmgr::Vm => "VisibilityMap",
            Rmgr::Btree => "Btree",
        }
    }
}

/// `info` values of [`Rmgr::Xlog`].
pub const XLOG_CHECKPOINT_SHUTDOWN: u8 = 0;
pub const XLOG_CHECKPOINT_ONLINE: u8 = 1;
pub const XLOG_PADDING: u8 = 2;
/// `info` values of [`Rmgr::Xact`].
pub const XACT_COMMIT: u8 = 0;
pub const XACT_ABORT: u8 = 1;
/// `info` values of [`Rmgr::Smgr`] (data: rel u32, fork u8, and for
/// truncation the new length u32).
pub const SMGR_CREATE: u8 = 0;
pub const SMGR_TRUNCATE: u8 = 1;
pub const SMGR_DROP: u8 = 2;

/// A page a record changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockTag {
    pub rel: u32,
    pub fork: Fork,
    pub block: u32,
}

impl std::fmt::Display for BlockTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rel {} fork {} blk {}",
            self.rel,
            self.fork.name(),
            self.block
        )
    }
}

/// A block reference of a decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockRef {
    pub tag: BlockTag,
    /// The whole page as it was after the change, hole filled with zeros.
    pub image: Option<Box<PageBytes>>,
}

/// A decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Where it starts.
    pub lsn: Lsn,
    /// Where it ends (what a page it changed carries as `pd_lsn`).
    pub end: Lsn,
    pub prev: Lsn,
    pub xid: u32,
    pub rmgr: Rmgr,
    pub info: u8,
    pub blocks: Vec<BlockRef>,
    pub data: Vec<u8>,
}

/// What a record to be inserted says of one page it changed.
#[derive(Debug, Clone, Copy)]
pub struct PageRef<'a> {
    pub tag: BlockTag,
    /// The page after the change: its image is logged if this is its
    /// first change since the last checkpoint's redo point.
    pub page: &'a PageBytes,
    /// `pd_lsn` before the change.
    pub old_lsn: Lsn,
    /// Log the page's image whatever `full_page_writes` and the redo point
    /// say: for a change that replay makes by restoring the page (a
    /// B-tree split rewrites both halves), not by repeating it.
    pub force_image: bool,
}

/// Bytes from `pos` to the end of its WAL block.
pub fn block_remainder(pos: Lsn) -> u64 {
    WAL_BLOCK_SIZE - pos % WAL_BLOCK_SIZE
}

/// Where the next record starts, given where the previous one ended
/// (8-byte aligned, and never where a header would not fit in the block).
pub fn next_record_start(end: Lsn) -> Lsn {
    let aligned = end.next_multiple_of(8);
    if block_remainder(aligned) < RECORD_HEADER_SIZE as u64 {
        aligned.next_multiple_of(WAL_BLOCK_SIZE)
    } else {
        aligned
    }
}

/// The page's hole (offset, length): unused bytes between the line pointer
/// array and the tuples, left out of images. None for a page whose header
/// does not describe one.
fn page_hole(page: &PageBytes) -> (u16, u16) {
    let h = PageHeader::read(page);
    if h.is_sane() && h.lower as usize >= PAGE_HEADER_SIZE && h.upper > h.lower {
        (h.lower, h.upper - h.lower)
    } else {
        (0, 0)
    }
}

/// Serialises a record (without its LSN-dependent `prev` and CRC, which
/// [`finish`] fills in once the record's place is known).
pub fn build(rmgr: Rmgr, info: u8, xid: u32, pages: &[(PageRef, bool)], data: &[u8]) -> Vec<u8> {
    assert!(pages.len() <= MAX_BLOCK_REFS, "too many block references");
    let mut out = Vec::with_capacity(
        RECORD_HEADER_SIZE
            + pages.len() * BLOCK_REF_SIZE
            + pages.iter().filter(|p| p.1).count() * BLOCK_SIZE
            + data.len(),
    );
    out.resize(RECORD_HEADER_SIZE, 0);
    out[16..20].copy_from_slice(&xid.to_le_bytes());
    out[20] = rmgr as u8;
    out[21] = info;
    out[22] = pages.len() as u8;
    let holes: Vec<(u16, u16)> = pages
        .iter()
        // Only heap pages (main forks) keep free space between pd_lower
        // and pd_upper; a map page's bits live exactly there.
        .map(|(p, image)| {
            if *image && p.tag.fork == Fork::Main {
                page_hole(p.page)
            } else {
                (0, 0)
            }
        })
        .collect();
    for ((p, image), &(hole_offset, hole_length)) in pages.iter().zip(&holes) {
        out.extend_from_slice(&p.tag.rel.to_le_bytes());
        out.extend_from_slice(&p.tag.block.to_le_bytes());
        out.push(p.tag.fork as u8);
        out.push(if *image { HAS_IMAGE } else { 0 });
        out.extend_from_slice(&hole_offset.to_le_bytes());
        out.extend_from_slice(&hole_length.to_le_bytes());
        out.extend_from_slice(&[0, 0]);
    }
    for ((p, image), &(hole_offset, hole_length)) in pages.iter().zip(&holes) {
        if *image {
            let (start, end) = (
                hole_offset as usize,
                hole_offset as usize + hole_length as usize,
            );
            out.extend_from_slice(&p.page[..start]);
            out.extend_from_slice(&p.page[end..]);
        }
    }
    out.extend_from_slice(data);
    assert!(
        out.len() <= MAX_RECORD_SIZE,
        "WAL record of {} bytes is larger than {MAX_RECORD_SIZE}",
        out.len()
    );
    let len = out.len() as u32;
    out[0..4].copy_from_slice(&len.to_le_bytes());
    out
}

/// Fills in `prev` and the CRC of a record built by [`build`].
pub fn finish(record: &mut [u8], prev: Lsn) {
    record[8..16].copy_from_slice(&prev.to_le_bytes());
    let crc = record_crc(record);
    record[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// The record's CRC: of the body first, then of the header without the
/// CRC itself, so that an inserter can compute the body's part before it
/// knows the record's place (and so `prev`), as PostgreSQL's does.
pub fn record_crc(record: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&record[RECORD_HEADER_SIZE..]);
    let crc = crc32c::crc32c_append(crc, &record[8..RECORD_HEADER_SIZE]);
    crc32c::crc32c_append(crc, &record[0..4])
}

/// The total length a header claims, if it is at all plausible.
pub fn claimed_length(header: &[u8]) -> Option<usize> {
    let len = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes")) as usize;
    (RECORD_HEADER_SIZE..=MAX_RECORD_SIZE)
        .contains(&len)
        .then_some(len)
}

/// Why bytes at a position are not a valid record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalid {
    /// Zeros or an impossible length: nothing was written here.
    NoRecord,
    /// A record of another position (a recycled segment, an earlier life).
    WrongPrev { found: Lsn, expected: Lsn },
    /// A torn or damaged record.
    BadCrc,
    /// The CRC matched but the contents do not parse.
    Malformed(&'static str),
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Invalid::NoRecord => write!(f, "no record (zeros or an invalid length)"),
            Invalid::WrongPrev { found, expected } => write!(
                f,
                "record's previous-record pointer is {} where {} was expected",
                format_lsn(*found),
                format_lsn(*expected)
            ),
            Invalid::BadCrc => write!(f, "incorrect CRC (a torn or damaged record)"),
            Invalid::Malformed(what) => write!(f, "malformed record: {what}"),
        }
    }
}

/// Decodes the record in `bytes` (exactly its `tot_len` bytes) found at
/// `lsn`. `expected_prev` is the previous record's LSN, if known.
pub fn decode(bytes: &[u8], lsn: Lsn, expected_prev: Option<Lsn>) -> Result<Record, Invalid> {
    if bytes.len() < RECORD_HEADER_SIZE || claimed_length(bytes) != Some(bytes.len()) {
        return Err(Invalid::NoRecord);
    }
    let stored = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
    let prev = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    if let Some(expected) = expected_prev {
        if prev != expected {
            return Err(Invalid::WrongPrev {
                found: prev,
                expected,
            });
        }
    }
    if record_crc(bytes) != stored {
        return Err(Invalid::BadCrc);
    }
    let xid = u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes"));
    let rmgr = Rmgr::from_u8(bytes[20]).ok_or(Invalid::Malformed("unknown resource manager"))?;
    let info = bytes[21];
    let nblocks = bytes[22] as usize;
    if nblocks > MAX_BLOCK_REFS {
        return Err(Invalid::Malformed("too many block references"));
    }
    let mut at = RECORD_HEADER_SIZE;
    let mut refs = Vec::with_capacity(nblocks);
    for _ in 0..nblocks {
        let r = bytes
            .get(at..at + BLOCK_REF_SIZE)
            .ok_or(Invalid::Malformed("block reference past the end"))?;
        let rel = u32::from_le_bytes(r[0..4].try_into().expect("4 bytes"));
        let block = u32::from_le_bytes(r[4..8].try_into().expect("4 bytes"));
        let fork = Fork::ALL
            .get(r[8] as usize)
            .copied()
            .ok_or(Invalid::Malformed("unknown fork"))?;
        let flags = r[9];
        let hole_offset = u16::from_le_bytes([r[10], r[11]]) as usize;
        let hole_length = u16::from_le_bytes([r[12], r[13]]) as usize;
        if hole_offset + hole_length > BLOCK_SIZE {
            return Err(Invalid::Malformed("page hole beyond the page"));
        }
        refs.push((
            BlockTag { rel, fork, block },
            flags,
            hole_offset,
            hole_length,
        ));
        at += BLOCK_REF_SIZE;
    }
    let mut blocks = Vec::with_capacity(nblocks);
    for (tag, flags, hole_offset, hole_length) in refs {
        let image = if flags & HAS_IMAGE != 0 {
            let stored = BLOCK_SIZE - hole_length;
            let src = bytes
                .get(at..at + stored)
                .ok_or(Invalid::Malformed("page image past the end"))?;
            let mut page: Box<PageBytes> = Box::new([0u8; BLOCK_SIZE]);
            page[..hole_offset].copy_from_slice(&src[..hole_offset]);
            page[hole_offset + hole_length..].copy_from_slice(&src[hole_offset..]);
            at += stored;
            Some(page)
        } else {
            None
        };
        blocks.push(BlockRef { tag, image });
    }
    Ok(Record {
        lsn,
        end: lsn + bytes.len() as u64,
        prev,
        xid,
        rmgr,
        info,
        blocks,
        data: bytes[at..].to_vec(),
    })
}

/// An LSN as PostgreSQL prints one: high and low 32 bits in hex.
pub fn format_lsn(lsn: Lsn) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn as u32)
}

/// Parses `X/Y` (as [`format_lsn`] prints).
pub fn parse_lsn(text: &str) -> Option<Lsn> {
    let (hi, lo) = text.split_once('/')?;
    let hi = u32::from_str_radix(hi, 16).ok()?;
    let lo = u32::from_str_radix(lo, 16).ok()?;
    Some((hi as u64) << 32 | lo as u64)
}

/// A little-endian reader of record data, for the resource managers'
/// decoders: every read is checked, so a malformed record is an error,
/// not a panic.
pub struct DataReader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> DataReader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        DataReader { bytes, at: 0 }
    }

    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.bytes.get(self.at..self.at + n)?;
        self.at += n;
        Some(s)
    }

    pub fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    pub fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_le_bytes([b[0], b[1]]))
    }

    pub fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }

    pub fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.bytes[self.at.min(self.bytes.len())..];
        self.at = self.bytes.len();
        s
    }

    pub fn is_empty(&self) -> bool {
        self.at >= self.bytes.len()
    }

    /// Bytes not read yet (a decoder checks a count against it before it
    /// allocates for that many).
    pub fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::{add_item, init_page};
    use proptest::prelude::*;

    fn sample_page() -> PageBytes {
        let mut page = [0u8; BLOCK_SIZE];
        init_page(&mut page, 0);
        add_item(&mut page, b"hello, world").unwrap();
        page
    }

    #[test]
    fn a_record_with_an_image_round_trips_and_leaves_the_hole_out() {
        let page = sample_page();
        let tag = BlockTag {
            rel: 16384,
            fork: Fork::Main,
            block: 7,
        };
        let r = PageRef {
            force_image: false,
            tag,
            page: &page,
            old_lsn: 0,
        };
        let mut bytes = build(Rmgr::Heap, 3, 42, &[(r, true)], b"data");
        assert!(bytes.len() < 200, "the hole is left out: {}", bytes.len());
        finish(&mut bytes, 1234);
        let rec = decode(&bytes, 5000, Some(1234)).unwrap();
        assert_eq!(rec.xid, 42);
        assert_eq!((rec.rmgr, rec.info), (Rmgr::Heap, 3));
        assert_eq!(rec.blocks[0].tag, tag);
        assert_eq!(&**rec.blocks[0].image.as_ref().unwrap(), &page);
        assert_eq!(rec.data, b"data");
        assert_eq!(rec.end, 5000 + bytes.len() as u64);
    }

    /// A visibility-map page's bits are where a heap page's hole is: its
    /// image must be whole, or replay restores a page without its bits.
    #[test]
    fn a_map_page_image_keeps_the_bits() {
        let mut page = [0u8; BLOCK_SIZE];
        init_page(&mut page, 0);
        page[100] = 0x5A;
        page[8000] = 0xFF;
        let r = PageRef {
            force_image: false,
            tag: BlockTag {
                rel: 16384,
                fork: Fork::VisibilityMap,
                block: 0,
            },
            page: &page,
            old_lsn: 0,
        };
        let mut bytes = build(Rmgr::Vm, 0, 0, &[(r, true)], &[]);
        finish(&mut bytes, 0);
        let rec = decode(&bytes, 0, Some(0)).unwrap();
        assert_eq!(&**rec.blocks[0].image.as_ref().unwrap(), &page);
    }

    #[test]
    fn a_flipped_bit_or_a_wrong_prev_is_refused() {
        let mut bytes = build(Rmgr::Xact, XACT_COMMIT, 9, &[], &[]);
        finish(&mut bytes, 77);
        assert!(decode(&bytes, 100, Some(77)).is_ok());
        assert!(matches!(
            decode(&bytes, 100, Some(78)),
            Err(Invalid::WrongPrev { .. })
        ));
        let mut torn = bytes.clone();
        torn[17] ^= 1;
        assert_eq!(decode(&torn, 100, Some(77)), Err(Invalid::BadCrc));
        assert_eq!(decode(&[0u8; 24], 100, Some(77)), Err(Invalid::NoRecord));
    }

    #[test]
    fn records_never_start_where_a_header_would_not_fit() {
        assert_eq!(next_record_start(8192 - 24), 8192 - 24);
        assert_eq!(next_record_start(8192 - 23), 8192);
        assert_eq!(next_record_start(8192 - 16), 8192);
        assert_eq!(next_record_start(8193), 8200);
        assert_eq!(parse_lsn(&format_lsn(0x1_0000_2000)), Some(0x1_0000_2000));
        assert_eq!(format_lsn(0x1_0000_2000), "1/2000");
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode(&bytes, 0, None);
        }
    }
}
