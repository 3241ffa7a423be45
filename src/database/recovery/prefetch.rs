//! Recovery prefetching (PostgreSQL's `recovery_prefetch`): the data pages
//! that upcoming WAL records touch are read through a read stream while
//! the records before them are replayed.
//!
//! Replay decodes records ahead of the one it applies (`ReadAhead`, at
//! most `READ_AHEAD_RECORDS_MAX` records and `READ_AHEAD_BYTES_MAX` bytes
//! of log). As each record is decoded, [`Prefetcher::note`] decides for
//! each block it references whether to read the page ahead, and if so
//! hands its tag to the stream's callback queue. When the record is
//! applied, each block it noted comes out of the stream ([`Prefetcher::
//! buffer`]) pinned and valid, in the order noted, which is the order
//! replay asks for them: records apply strictly in log order, and a record
//! applies its blocks in order.
//!
//! # One stream for every relation
//!
//! Records touch blocks of many relations and forks, interleaved. A read
//! stream per (relation, fork) would size itself from the pins free when
//! it began, and several of them together would run the session into its
//! pin limit (and a stream only looks ahead when its own consumer asks it
//! for a buffer). So replay uses one stream begun with
//! `ReadStream::begin_tagged`, whose callback names whole tags: one pin
//! budget, one I/O budget and one pair of distances over every relation,
//! with consecutive blocks of one fork still combined into one read. Its
//! distances grow only when replay really waited for a read, so a log
//! whose pages are all cached pays next to nothing for it. It sizes itself
//! with `maintenance_io_concurrency`, as PostgreSQL's prefetcher does.
//!
//! # Blocks that are not read ahead
//!
//! - A block whose reference carries a page image: replay replaces the
//!   page without reading it (and the page on disk may be torn).
//! - A block for which a record decoded earlier and not yet applied
//!   carries an image: the image replaces the page first, and the page on
//!   disk may be torn; reading it ahead would fail where replay does not.
//! - Any block of a relation that a storage record decoded earlier and not
//!   yet applied creates, truncates or drops (PostgreSQL's filter): the
//!   file may not exist yet, or lose the block. Its buffers must not be
//!   pinned by the stream when that record applies either (dropping a
//!   relation's buffers leaves pinned ones behind), which this also
//!   ensures: blocks noted before the storage record are applied, and so
//!   taken out of the stream, before it.
//! - A block past the end of its file (or of a fork that does not exist):
//!   replay extends the file with zeros when it gets there (a crash kept
//!   the page from reaching the file). Sizes are cached per fork and asked
//!   again when a block lies past the cached size, since replay extends
//!   files; truncation and removal happen only through storage records,
//!   whose relation's cached sizes are forgotten when they apply.
//!
//! Such blocks are read by replay itself when it gets to them, as without
//! prefetching. Pages that replay reads to check map bits (a map record's
//! heap pages, a heap record's map page) are not read ahead either: they
//! were, nearly always, just touched and are cached.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::buffer::{BufferError, BufferId, BufferPool, BufferSession, BufferTag};
use crate::storage::Fork;
use crate::stream::{Next, ReadStream, StreamFlags, StreamLimits, StreamStats};
use crate::wal::record::{BlockTag, DataReader, Record, MAX_BLOCK_REFS};
use crate::wal::{Lsn, Rmgr};

/// Which of a record's block references were handed to the stream (bit
/// `i` for reference `i`).
pub(super) type Noted = u8;

const _: () = assert!(MAX_BLOCK_REFS <= Noted::BITS as usize);

/// Blocks handed to the stream's callback and not yet taken by it.
pub(super) type Wanted = RefCell<VecDeque<BufferTag>>;

/// What prefetching did, for the recovery report.
#[derive(Debug, Clone, Copy, Default)]
pub struct PrefetchStats {
    /// Block references handed to the stream.
    pub blocks_noted: u64,
    /// References not read ahead: with an image, behind an image not
    /// yet applied, of a relation a storage record is about to change,
    /// past the end of their file.
    pub skipped_image: u64,
    pub skipped_image_pending: u64,
    pub skipped_storage_change: u64,
    pub skipped_past_end: u64,
    /// The stream's figures (reads, blocks per read, waits).
    pub stream: StreamStats,
}

/// Decides which blocks to read ahead and hands them out again in order.
/// `F` is the stream's callback (it takes tags from `wanted`).
pub(super) struct Prefetcher<'w, F: FnMut(&mut ()) -> Next> {
    pool: Arc<BufferPool>,
    /// `None` with `recovery_prefetch` off: nothing is noted.
    stream: Option<ReadStream<(), F>>,
    wanted: &'w Wanted,
    /// Blocks whose image a record decoded and not yet applied carries,
    /// with the last such record's LSN.
    images: HashMap<BufferTag, Lsn>,
    /// Relations a storage record decoded and not yet applied changes,
    /// with the last such record's LSN.
    storage_changes: HashMap<u32, Lsn>,
    /// Blocks in each fork as last looked up (0 for a missing fork).
    nblocks: HashMap<(u32, Fork), u32>,
    /// Blocks of each relation noted and not yet handed out again.
    outstanding: HashMap<u32, u32>,
    stats: PrefetchStats,
}

/// Pins replay may hold besides the stream's own: the page it applies a
/// record to and one more it pins meanwhile.
const REPLAY_PINS_BESIDE_STREAM: usize = 2;
/// Fewest pins worth a prefetching stream: two blocks ahead.
const PREFETCH_PINS_MIN: usize = 2;

/// Pins the prefetching stream may take in session `s`.
fn pin_room(s: &BufferSession) -> usize {
    s.pool()
        .pin_limit()
        .saturating_sub(s.pinned_count() + REPLAY_PINS_BESIDE_STREAM)
}

/// Begins prefetching for replay in session `s` (nothing is read ahead
/// unless `enabled`). `wanted` must outlive it: the stream's callback
/// takes the blocks to read from there.
pub(super) fn begin<'w>(
    s: &BufferSession,
    wanted: &'w Wanted,
    enabled: bool,
    limits: StreamLimits,
) -> Prefetcher<'w, impl FnMut(&mut ()) -> Next + 'w> {
    let callback = move |_: &mut ()| match wanted.borrow_mut().pop_front() {
        Some(tag) => Next::Tagged(tag),
        // Resumed when more records have been decoded.
        None => Next::Pause,
    };
    // Replay holds a page from the stream while it may pin one more (a
    // map page, a heap page it looks at), and the stream leaves room for
    // one: its pins are capped to leave the second too, or a small pool's
    // session limit (shared_buffers / max_sessions) is reached in the
    // middle of replay and the directory cannot be opened. The cap is on
    // pins, not on reads in flight: capping maintenance_io_concurrency
    // (to the pins over io_combine_limit) left one read in flight, and
    // replay's blocks are single-block reads that fit many to the pins.
    let room = pin_room(s);
    let stream = (enabled && room >= PREFETCH_PINS_MIN).then(|| {
        let mut stream = ReadStream::begin_tagged(
            s,
            StreamFlags {
                maintenance: true,
                ..Default::default()
            },
            limits,
            None,
            callback,
        );
        stream.limit_pins(room);
        debug_assert!(stream.max_pinned() <= room);
        stream
    });
    Prefetcher {
        pool: Arc::clone(s.pool()),
        stream,
        wanted,
        images: HashMap::new(),
        storage_changes: HashMap::new(),
        nblocks: HashMap::new(),
        outstanding: HashMap::new(),
        stats: PrefetchStats::default(),
    }
}

/// The relation a storage record changes.
pub(super) fn storage_record_rel(rec: &Record) -> Option<u32> {
    (rec.rmgr == Rmgr::Smgr)
        .then(|| DataReader::new(&rec.data).u32())
        .flatten()
}

fn buffer_tag(tag: BlockTag) -> BufferTag {
    BufferTag {
        rel: tag.rel,
        fork: tag.fork,
        block: tag.block,
    }
}

impl<F: FnMut(&mut ()) -> Next> Prefetcher<'_, F> {
    /// Looks at a record just decoded, ahead of those not yet applied:
    /// hands the blocks to read ahead to the stream, and says which.
    pub(super) fn note(&mut self, rec: &Record) -> Noted {
        if self.stream.is_none() {
            return 0;
        }
        if let Some(rel) = storage_record_rel(rec) {
            self.storage_changes.insert(rel, rec.lsn);
            return 0;
        }
        if !matches!(rec.rmgr, Rmgr::Heap | Rmgr::Vm | Rmgr::Btree) {
            return 0;
        }
        let mut noted: Noted = 0;
        for (i, b) in rec.blocks.iter().enumerate() {
            let tag = buffer_tag(b.tag);
            if b.image.is_some() {
                self.images.insert(tag, rec.lsn);
                self.stats.skipped_image += 1;
            } else if self.storage_changes.contains_key(&tag.rel) {
                self.stats.skipped_storage_change += 1;
            } else if self.images.contains_key(&tag) {
                self.stats.skipped_image_pending += 1;
            } else if !self.in_file(tag) {
                self.stats.skipped_past_end += 1;
            } else {
                self.wanted.borrow_mut().push_back(tag);
                *self.outstanding.entry(tag.rel).or_default() += 1;
                self.stats.blocks_noted += 1;
                noted |= 1 << i;
            }
        }
        if noted != 0 {
            if let Some(stream) = &mut self.stream {
                stream.resume();
            }
        }
        noted
    }

    /// Whether block `tag` is in its file now.
    fn in_file(&mut self, tag: BufferTag) -> bool {
        let key = (tag.rel, tag.fork);
        if self.nblocks.get(&key).is_some_and(|&n| tag.block < n) {
            return true;
        }
        // Unknown, or the file may have grown since: replay extends files.
        // A fork that is missing (a map fork not created yet has no
        // blocks) or cannot be sized is left to replay, which reports it.
        let n = self.pool.relation(tag.rel).nblocks(tag.fork).unwrap_or(0);
        self.nblocks.insert(key, n);
        tag.block < n
    }

    /// The buffer of block `tag`, which `note` handed to the stream: the
    /// next one the stream gives out. Pinned and valid; the caller
    /// releases it.
    pub(super) fn buffer(
        &mut self,
        s: &mut BufferSession,
        tag: BlockTag,
    ) -> Result<BufferId, BufferError> {
        let tag = buffer_tag(tag);
        let stream = self
            .stream
            .as_mut()
            .expect("a block was noted, so there is a stream");
        let outstanding = self
            .outstanding
            .get_mut(&tag.rel)
            .expect("a block noted is outstanding");
        assert!(*outstanding > 0);
        *outstanding -= 1;
        let (id, ()) = stream.next_buffer(s)?.ok_or_else(|| {
            BufferError::Io(format!(
                "recovery prefetching lost {tag}: its read stream ended early"
            ))
        })?;
        // Applying a record to another page than its own would corrupt
        // it: the stream hands out blocks in the order they were noted,
        // which is the order replay takes them in.
        assert_eq!(
            self.pool.tag(id),
            Some(tag),
            "recovery prefetching handed out another block than replay asked for"
        );
        Ok(id)
    }

    /// Before a storage record on `rel` applies: the stream holds no
    /// buffer of `rel` (see the module comment).
    pub(super) fn before_storage_change(&self, rel: u32) {
        assert_eq!(
            self.outstanding.get(&rel).copied().unwrap_or(0),
            0,
            "the recovery read stream holds blocks of relation {rel} while a storage record changes it"
        );
    }

    /// After `rec` has been applied: what it was waited for no longer
    /// holds reads back.
    pub(super) fn applied(&mut self, rec: &Record) {
        if self.stream.is_none() {
            return;
        }
        if let Some(rel) = storage_record_rel(rec) {
            if self.storage_changes.get(&rel) == Some(&rec.lsn) {
                self.storage_changes.remove(&rel);
            }
            self.nblocks.retain(|&(r, _), _| r != rel);
            return;
        }
        for b in rec.blocks.iter().filter(|b| b.image.is_some()) {
            let tag = buffer_tag(b.tag);
            if self.images.get(&tag) == Some(&rec.lsn) {
                self.images.remove(&tag);
            }
        }
    }

    /// Ends the stream (releasing what it still pins, after a failed
    /// replay) and says what prefetching did.
    pub(super) fn end(self, s: &mut BufferSession) -> PrefetchStats {
        let mut stats = self.stats;
        if let Some(stream) = self.stream {
            stats.stream = stream.end(s);
        }
        self.wanted.borrow_mut().clear();
        stats
    }
}
