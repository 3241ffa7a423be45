//! Utilities that sit on top of the AIO and page layers, for the CLI.
//! [`waldump`] reads the write-ahead log without opening a database.

pub mod waldump;

use std::path::Path;
use std::sync::Arc;

use crate::aio::{Aio, AioError, BlockReader};
use crate::page::{verify_page, PageBytes, PageVerdict};
use crate::storage::{SegmentFile, StorageError, BLOCK_SIZE};

/// One page that failed verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageFailure {
    pub block: u32,
    pub verdict: PageVerdict,
}

impl std::fmt::Display for PageFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.verdict {
            PageVerdict::ChecksumMismatch { stored, computed } => write!(
                f,
                "block {}: checksum mismatch: stored 0x{stored:04X}, computed 0x{computed:04X}",
                self.block
            ),
            PageVerdict::BadHeader => write!(f, "block {}: invalid page header", self.block),
            PageVerdict::Valid | PageVerdict::New => write!(f, "block {}: ok", self.block),
        }
    }
}

/// What `verify-file` found.
#[derive(Debug, Default)]
pub struct VerifyReport {
    pub pages: u64,
    /// All-zero pages (new, valid without a checksum).
    pub new_pages: u64,
    pub failures: Vec<PageFailure>,
}

impl VerifyReport {
    /// True if no page carries a checksum while every header is sane: every
    /// page that is not new fails only its checksum, with 0 stored. That is
    /// a PostgreSQL cluster initialised without data checksums (pd_checksum
    /// is then never set), not damage: PostgreSQL itself would read these
    /// pages without complaint.
    pub fn without_checksums(&self) -> bool {
        let checked = self.pages - self.new_pages;
        checked > 0
            && self.failures.len() as u64 == checked
            && self
                .failures
                .iter()
                .all(|f| matches!(f.verdict, PageVerdict::ChecksumMismatch { stored: 0, .. }))
    }
}

/// Reads a raw relation segment file (ours or PostgreSQL's) through the AIO
/// subsystem and verifies every page's header and checksum. `first_block`
/// is the block number of the file's first page: 131072 × segment number
/// for segment files after the first, since the checksum includes it.
///
/// Reads are `blocks_per_io` blocks each, `depth` of them in flight.
pub fn verify_file(
    aio: &Arc<Aio>,
    path: &Path,
    first_block: u32,
    direct: bool,
    depth: usize,
    blocks_per_io: usize,
) -> Result<VerifyReport, AioError> {
    let file = SegmentFile::open_path(path, direct, false, first_block)?;
    let size = file.size_bytes()?;
    if size % BLOCK_SIZE as u64 != 0 {
        return Err(StorageError::Blocks {
            op: "verify",
            file: file.ident().to_string(),
            first: file.block_at(size),
            last: file.block_at(size),
            detail: format!(
                "file size {size} is not a multiple of the {BLOCK_SIZE}-byte block size; is this a relation segment file?"
            ),
        }
        .into());
    }
    verify_blocks(aio, &file, size / BLOCK_SIZE as u64, depth, blocks_per_io)
}

/// Verifies the first `nblocks` pages of an open segment file, as
/// [`verify_file`] does for all of them. For callers that have decided
/// themselves which blocks count: the crash test leaves out a partial
/// block at the end of a file, which a write cut short by a kill can
/// leave and which the engine ignores (a relation's size is its whole
/// blocks).
pub fn verify_blocks(
    aio: &Arc<Aio>,
    file: &Arc<SegmentFile>,
    nblocks: u64,
    depth: usize,
    blocks_per_io: usize,
) -> Result<VerifyReport, AioError> {
    let mut session = aio.session()?;
    let mut reader = BlockReader::new(Arc::clone(aio), Arc::clone(file), depth, blocks_per_io);
    let mut report = VerifyReport::default();
    let mut next_block = 0u64;
    let result = (|| {
        while next_block < nblocks || reader.in_flight() > 0 {
            while reader.has_room() && next_block < nblocks {
                let blocks = (blocks_per_io as u64).min(nblocks - next_block);
                reader.start(
                    &mut session,
                    next_block * BLOCK_SIZE as u64,
                    blocks as usize,
                )?;
                next_block += blocks;
            }
            let read = reader
                .next_completed(&mut session)
                .expect("a read is in flight")?;
            for (i, page) in read.data.chunks_exact(BLOCK_SIZE).enumerate() {
                let page: &PageBytes = page.try_into().expect("chunks are one block");
                let block = file.block_at(read.offset) + i as u32;
                let verdict = verify_page(page, block);
                report.pages += 1;
                if verdict == PageVerdict::New {
                    report.new_pages += 1;
                }
                if !verdict.is_ok() {
                    report.failures.push(PageFailure { block, verdict });
                }
            }
        }
        Ok(())
    })();
    reader.drain(&mut session);
    result.map(|()| report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aio::AioConfig;
    use crate::config::IoMethod;

    const PG15_HEAP: &[u8] = include_bytes!("../../tests/fixtures/pg15_heap_3blocks.bin");

    #[test]
    fn block_lists_are_checked_against_the_relation_before_they_are_expanded() {
        let list = parse_block_list("0,2, 2,1-3").unwrap();
        assert_eq!(list.expand("t", 4).unwrap(), [0, 2, 2, 1, 2, 3]);
        // Four billion blocks: refused by the relation's size, at once.
        let huge = parse_block_list("0-4294967295").unwrap();
        let e = huge.expand("t", 5).unwrap_err();
        assert_eq!(
            e.to_string(),
            "block range 0-4294967295 is beyond the end of relation \"t\", which has 5 blocks; \
             name blocks below 5"
        );
        assert!(matches!(
            huge.expand("t", u32::MAX).unwrap_err(),
            BlockListError::BeyondEnd { .. }
        ));
        let e = parse_block_list("7").unwrap().expand("t", 0).unwrap_err();
        assert!(e.to_string().starts_with("block 7 is beyond"), "{e}");
        // Within the relation but too many.
        let many = parse_block_list("0-9999999,0-1").unwrap();
        assert!(matches!(
            many.expand("t", u32::MAX),
            Err(BlockListError::TooLong {
                blocks: 10_000_002,
                ..
            })
        ));
        assert!(matches!(
            parse_block_list("3-1"),
            Err(BlockListError::Backwards { first: 3, last: 1 })
        ));
        assert!(matches!(
            parse_block_list("1,x"),
            Err(BlockListError::NotANumber { .. })
        ));
        assert!(matches!(
            parse_block_list(" , "),
            Err(BlockListError::Empty)
        ));
    }

    #[test]
    fn a_postgresql_file_verifies_and_a_damaged_copy_is_reported_per_block() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("16384");
        std::fs::write(&good, PG15_HEAP).unwrap();
        let aio = Aio::start(&AioConfig {
            method: IoMethod::Worker,
            ..AioConfig::default()
        })
        .unwrap();
        let report = verify_file(&aio, &good, 0, false, 2, 2).unwrap();
        assert_eq!((report.pages, report.failures.len()), (3, 0));

        let mut damaged = PG15_HEAP.to_vec();
        damaged[BLOCK_SIZE + 5000] ^= 1;
        // pd_lower beyond pd_upper
        damaged[2 * BLOCK_SIZE + 12..2 * BLOCK_SIZE + 14].copy_from_slice(&[0xFF, 0xFF]);
        let bad = dir.path().join("16384.bad");
        std::fs::write(&bad, &damaged).unwrap();
        let report = verify_file(&aio, &bad, 0, true, 4, 1).unwrap();
        assert_eq!(report.pages, 3);
        let lines: Vec<String> = report.failures.iter().map(|f| f.to_string()).collect();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].starts_with("block 1: checksum mismatch"),
            "{}",
            lines[0]
        );
        assert_eq!(lines[1], "block 2: invalid page header");

        // The same pages taken as blocks 3.. of a relation fail: the
        // checksum covers the block number.
        let report = verify_file(&aio, &good, 3, false, 2, 2).unwrap();
        assert_eq!(report.failures.len(), 3);
    }

    #[test]
    fn a_file_that_is_not_whole_blocks_is_refused_with_a_reason() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("odd");
        std::fs::write(&path, vec![0u8; BLOCK_SIZE + 100]).unwrap();
        let aio = Aio::start(&AioConfig {
            method: IoMethod::Sync,
            ..AioConfig::default()
        })
        .unwrap();
        let err = verify_file(&aio, &path, 0, false, 1, 1).unwrap_err();
        assert!(
            err.to_string()
                .contains("not a multiple of the 8192-byte block size"),
            "{err}"
        );
    }
}

/// What a stream-driven utility did.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct StreamReport {
    pub blocks: u64,
    pub hits: u64,
    /// Blocks read by this stream's own I/Os.
    pub reads: u64,
    pub ios: u64,
    /// I/Os started by others that the stream joined.
    pub foreign_ios: u64,
    pub waits: u64,
    pub seconds: f64,
}

impl StreamReport {
    fn from_stats(stats: &crate::stream::StreamStats, seconds: f64) -> StreamReport {
        StreamReport {
            blocks: stats.buffers,
            hits: stats.hits,
            reads: stats.io_blocks,
            ios: stats.ios,
            foreign_ios: stats.foreign_ios,
            waits: stats.waits,
            seconds,
        }
    }
}

/// Reads every block of a relation fork into the pool through a read
/// stream (PostgreSQL's `pg_prewarm(…, 'buffer')`).
pub fn prewarm(
    session: &mut crate::buffer::BufferSession,
    rel: u32,
    fork: crate::storage::Fork,
    limits: crate::stream::StreamLimits,
) -> Result<StreamReport, crate::buffer::BufferError> {
    let nblocks = session.pool().relation(rel).nblocks(fork)?;
    let blocks: Vec<u32> = (0..nblocks).collect();
    stream_blocks(
        session,
        rel,
        fork,
        &blocks,
        crate::stream::StreamFlags {
            sequential: true,
            ..Default::default()
        },
        limits,
    )
}

/// Most blocks a block list may name, ranges expanded (40 MB of block
/// numbers), whatever the relation's size.
pub const MAX_BLOCK_LIST_BLOCKS: u64 = 10_000_000;

/// Why a block list (`0,2,2,4`, `10-20`) was refused.
#[derive(Debug, thiserror::Error)]
pub enum BlockListError {
    #[error("\"{part}\" in the block list is not a block number; write e.g. 0,2,2,4 or 10-20")]
    NotANumber { part: String },
    #[error("block range {first}-{last} runs backwards; write {last}-{first}")]
    Backwards { first: u32, last: u32 },
    #[error("the block list is empty; write e.g. 0,2,2,4 or 10-20")]
    Empty,
    #[error("block {part} is beyond the end of relation \"{relation}\", which has {nblocks} blocks; name blocks below {nblocks}")]
    BeyondEnd {
        relation: String,
        part: String,
        nblocks: u32,
    },
    #[error("the block list names {blocks} blocks, more than {limit}; read fewer at a time")]
    TooLong { blocks: u64, limit: u64 },
}

/// A parsed block list: inclusive ranges in the order given, not yet
/// expanded (a range may name four billion blocks; it is checked against
/// the relation before it becomes a list of them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockList {
    ranges: Vec<(u32, u32)>,
}

/// Parses `0,2,2,4` and `10-20` (inclusive), checking only the syntax;
/// [`BlockList::expand`] checks the blocks against a relation.
pub fn parse_block_list(text: &str) -> Result<BlockList, BlockListError> {
    let number = |t: &str| {
        t.trim()
            .parse::<u32>()
            .map_err(|_| BlockListError::NotANumber {
                part: t.trim().to_string(),
            })
    };
    let mut ranges = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => {
                let block = number(part)?;
                (block, block)
            }
        };
        if last < first {
            return Err(BlockListError::Backwards { first, last });
        }
        ranges.push((first, last));
    }
    if ranges.is_empty() {
        return Err(BlockListError::Empty);
    }
    Ok(BlockList { ranges })
}

impl BlockList {
    /// The blocks, ranges expanded, once every block is known to be in
    /// `relation` (of `nblocks` blocks) and the list within
    /// [`MAX_BLOCK_LIST_BLOCKS`]: nothing is allocated for a list that
    /// would be refused.
    pub fn expand(&self, relation: &str, nblocks: u32) -> Result<Vec<u32>, BlockListError> {
        let mut total = 0u64;
        for &(first, last) in &self.ranges {
            if last >= nblocks {
                return Err(BlockListError::BeyondEnd {
                    relation: relation.to_string(),
                    part: if first == last {
                        first.to_string()
                    } else {
                        format!("range {first}-{last}")
                    },
                    nblocks,
                });
            }
            total += u64::from(last - first) + 1;
        }
        if total > MAX_BLOCK_LIST_BLOCKS {
            return Err(BlockListError::TooLong {
                blocks: total,
                limit: MAX_BLOCK_LIST_BLOCKS,
            });
        }
        let mut blocks = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
        for &(first, last) in &self.ranges {
            blocks.extend(first..=last);
        }
        Ok(blocks)
    }
}

/// Reads `blocks`, in that order, through one read stream, releasing each
/// buffer as it arrives (the reference thread's `read_stream_for_blocks`).
pub fn read_stream_for_blocks(
    session: &mut crate::buffer::BufferSession,
    rel: u32,
    fork: crate::storage::Fork,
    blocks: &[u32],
    limits: crate::stream::StreamLimits,
) -> Result<StreamReport, crate::buffer::BufferError> {
    stream_blocks(session, rel, fork, blocks, Default::default(), limits)
}

fn stream_blocks(
    session: &mut crate::buffer::BufferSession,
    rel: u32,
    fork: crate::storage::Fork,
    blocks: &[u32],
    flags: crate::stream::StreamFlags,
    limits: crate::stream::StreamLimits,
) -> Result<StreamReport, crate::buffer::BufferError> {
    use crate::stream::{Next, ReadStream};
    let started = std::time::Instant::now();
    let mut next = blocks.iter().copied();
    let mut stream = ReadStream::begin(session, rel, fork, flags, limits, None, |_: &mut ()| {
        next.next().map_or(Next::End, Next::Block)
    });
    let mut failure = None;
    loop {
        match stream.next_buffer(session) {
            Ok(Some((id, ()))) => session.release(id),
            Ok(None) => break,
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let stats = stream.end(session);
    match failure {
        Some(e) => Err(e),
        None => Ok(StreamReport::from_stats(
            &stats,
            started.elapsed().as_secs_f64(),
        )),
    }
}
