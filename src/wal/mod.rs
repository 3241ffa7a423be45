//! The write-ahead log (DESIGN.md §7): records of every page change, made
//! durable before the page may be written, and replayed after a crash.
//!
//! # Inserting
//!
//! Sessions insert records concurrently, as PostgreSQL's insertion locks
//! allow: a short mutex only reserves the record's place (and links it to
//! the previous record), then the record is copied into the in-memory ring
//! (`wal_buffers`) outside any shared lock. Each inserter publishes in its
//! insertion slot the position it is copying at, so that a writer knows
//! how far the ring holds finished records ([`Wal::insertions_done`]).
//!
//! # Writing and flushing
//!
//! WAL is written in whole [`WAL_BLOCK_SIZE`] blocks through AIO (which
//! also makes it writable with `O_DIRECT`). With one write in flight at a
//! time (writes that are synced afterwards, see [`Wal::open`], or
//! `wal_io_concurrency = 1`), a flush that ends inside a block writes the
//! block as far as it is filled and the next write writes it again, as
//! PostgreSQL does: the bytes already made durable are the same in both,
//! so a torn rewrite loses none of them.
//!
//! With several writes in flight (`wal_io_concurrency`, with segments
//! opened write-through), a flush that ends inside a block first pads the
//! block with a padding record instead, so that every write ends on a
//! block boundary and no later write rewrites a block an earlier one wrote
//! (the AIO thread's "padding of partial records"). Their blocks never
//! overlap, so a flush that
//! finds a write in flight starts its own for the blocks after it instead
//! of waiting for it (PostgreSQL has one WAL write in flight at a time).
//! Writes may complete in any order; they are collected in LSN order, and
//! the written position moves only over a contiguous prefix of completed
//! writes. With segments opened `O_DSYNC`/`O_SYNC` a completed write is
//! durable and the flush position moves with it; otherwise a sync
//! (`fdatasync` or `fsync`) after the writes moves it, and writes go on
//! being started while it runs. A commit waits until the flush position
//! covers its commit record; one flush releases every commit it covers
//! (group commit). One flush at a time waits for writes and collects
//! them; the others sleep until the flush position covers their own
//! target and are woken only then (`flush_queue.rs`).
//!
//! # Segments
//!
//! The log lives in 16 MiB segment files under `wal/`, named as
//! PostgreSQL names them (timeline 1). A new segment is a recycled old one
//! (renamed; its stale records fail the `prev` check) or is written full of
//! zeros when it is created, so that writes into it change no file size.

pub mod control;
mod flush_queue;
pub mod reader;
pub mod record;

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use thiserror::Error;

use crate::aio::{Aio, AioError, AioSession, IoReturnCell, IoVec, WaitRef};
use crate::inject::HitContext;
use crate::storage::{AlignedBuf, SegmentFile, StorageError};
use flush_queue::FlushQueue;
pub use record::{
    format_lsn, BlockRef, BlockTag, Lsn, PageRef, Record, Rmgr, INVALID_LSN, WAL_BLOCK_SIZE,
};
use record::{next_record_start, RECORD_HEADER_SIZE};

/// Bytes per segment file.
pub const WAL_SEGMENT_SIZE: u64 = 16 << 20;
/// Directory of the segment files inside the data directory.
pub const WAL_DIR: &str = "wal";
/// Where a new data directory's log starts (segment 1, as PostgreSQL's
/// first LSN is in its first segment after 0/0).
pub const FIRST_LSN: Lsn = WAL_SEGMENT_SIZE;
/// Insertion slots (PostgreSQL's NUM_XLOGINSERT_LOCKS).
const INSERT_SLOTS: usize = 8;
/// A slot not inserting.
const SLOT_IDLE: u64 = u64::MAX;
/// A slot reserving its place (position not known yet: a writer waits).
const SLOT_RESERVING: u64 = 0;
/// How long one wait for insertions to progress lasts before looking
/// again (inserters wake waiters; this bounds a lost wake-up).
const PROGRESS_POLL: Duration = Duration::from_millis(1);
/// How long a flush waits for insertions below its target to finish before
/// it reports the WAL stuck (they finish in microseconds; a bound, not a
/// tuning knob).
const INSERTION_WAIT_MAX: Duration = Duration::from_secs(60);
/// Longest one sleep of a flush waiting for the driver to cover it
/// (woken when it is: this bounds a lost wake-up).
const FLUSH_WAIT_POLL: Duration = Duration::from_millis(10);
/// Zeros written at a time into a new segment.
const ZERO_CHUNK: usize = 1 << 20;
/// Longest one wait for a WAL write lasts before the waiter looks again
/// (at a stop, and at how long it has waited in all: a device that stops
/// answering fails the flush after [`INSERTION_WAIT_MAX`]).
const WRITE_WAIT_POLL: Duration = Duration::from_millis(100);
/// Largest single WAL write: a long stretch of log (a bulk load filling
/// the ring) goes out as several writes in flight rather than one.
const WAL_WRITE_MAX_BYTES: u64 = 1 << 20;
/// Most times a short write is continued before it counts as failed (a
/// write that makes progress each time ends well before).
const SHORT_WRITE_RETRIES_MAX: u32 = 64;

#[derive(Debug, Error)]
pub enum WalError {
    /// A WAL segment's or the control file's I/O (the path says which).
    #[error("could not {op} file \"{path}\": {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("could not write WAL at {} to \"{path}\": {source}", format_lsn(*.lsn))]
    Write {
        lsn: Lsn,
        path: PathBuf,
        source: Box<AioError>,
    },
    #[error("the WAL cannot be written any more ({reason}); the database has stopped accepting changes: restart it, and recovery will replay what was made durable")]
    Stopped { reason: String },
    #[error("WAL below {} was not made durable within {seconds} s; the database has stopped accepting changes: restart it", format_lsn(*.target))]
    Stuck { target: Lsn, seconds: u64 },
    #[error("invalid WAL record at {} in file \"{path}\": {what}; the data directory cannot be opened safely", format_lsn(*.lsn))]
    Damaged {
        lsn: Lsn,
        path: PathBuf,
        what: String,
    },
    #[error("WAL segment \"{path}\" (needed for {}) is missing; the data directory cannot be opened safely", format_lsn(*.lsn))]
    MissingSegment { lsn: Lsn, path: PathBuf },
    #[error(
        "control file \"{path}\" is damaged ({what}); the data directory cannot be opened safely"
    )]
    ControlDamaged { path: PathBuf, what: String },
}

impl WalError {
    /// PostgreSQL's SQLSTATE for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            WalError::Io { source, .. } => crate::storage::io_sqlstate(source),
            WalError::Storage(e) => e.sqlstate(),
            WalError::Write { source, .. } => source.sqlstate(),
            // The log has stopped and the database takes no more changes
            // until restarted: where PostgreSQL would have panicked, and
            // every other session been ended for the crash.
            WalError::Stopped { .. } | WalError::Stuck { .. } => "57P02",
            WalError::Damaged { .. } | WalError::ControlDamaged { .. } => "XX001",
            WalError::MissingSegment { .. } => "58P01",
        }
    }
}

/// How WAL writes are made durable (`wal_sync_method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMethod {
    /// Written, then `fdatasync`ed.
    Fdatasync,
    /// Written, then `fsync`ed.
    Fsync,
    /// Segments opened `O_DSYNC`: a completed write is durable.
    OpenDatasync,
    /// Segments opened `O_SYNC`: a completed write is durable.
    OpenSync,
}

impl SyncMethod {
    /// The setting's value; `auto` is `open_datasync` for direct WAL (a
    /// sync after an `O_DIRECT` write would only repeat the device cache
    /// flush) and `fdatasync` otherwise (PostgreSQL's default on Linux).
    pub fn from_setting(name: &str, direct: bool) -> Option<SyncMethod> {
        Some(match name {
            "auto" if direct => SyncMethod::OpenDatasync,
            "auto" | "fdatasync" => SyncMethod::Fdatasync,
            "fsync" => SyncMethod::Fsync,
            "open_datasync" => SyncMethod::OpenDatasync,
            "open_sync" => SyncMethod::OpenSync,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            SyncMethod::Fdatasync => "fdatasync",
            SyncMethod::Fsync => "fsync",
            SyncMethod::OpenDatasync => "open_datasync",
            SyncMethod::OpenSync => "open_sync",
        }
    }

    /// A completed write is durable (the segment is opened write-through).
    pub fn durable_on_write(self) -> bool {
        matches!(self, SyncMethod::OpenDatasync | SyncMethod::OpenSync)
    }

    /// The `open` flag that makes writes durable, or 0.
    fn open_flag(self) -> i32 {
        match self {
            SyncMethod::Fdatasync | SyncMethod::Fsync => 0,
            SyncMethod::OpenDatasync => libc::O_DSYNC,
            SyncMethod::OpenSync => libc::O_SYNC,
        }
    }
}

/// Start-up parameters of the log.
#[derive(Debug, Clone)]
pub struct WalConfig {
    /// Segments opened `O_DIRECT` (io_direct includes wal).
    pub direct: bool,
    pub sync_method: SyncMethod,
    /// Most writes in flight at once (`wal_io_concurrency`).
    pub io_concurrency: usize,
    /// Bytes of the in-memory ring (`wal_buffers`).
    pub buffers: usize,
    /// Log a page's image at its first change after a checkpoint.
    pub full_page_writes: bool,
}

/// Cumulative counters, for `stat_wal`.
#[derive(Debug, Default)]
pub struct WalStats {
    pub records: AtomicU64,
    pub full_page_images: AtomicU64,
    pub bytes: AtomicU64,
    pub writes: AtomicU64,
    pub syncs: AtomicU64,
    pub write_us: AtomicU64,
    pub sync_us: AtomicU64,
    /// Padding bytes added so that a flush ends on a block boundary.
    pub padding_bytes: AtomicU64,
    /// Flushes that found their target already covered by another's.
    pub flushes_shared: AtomicU64,
    /// Writes started and not yet collected, now.
    pub writes_in_flight: AtomicU64,
    /// The most writes that were in flight at once.
    pub writes_in_flight_peak: AtomicU64,
}

struct InsertSlot {
    /// Serialises the sessions hashed to this slot.
    lock: Mutex<()>,
    /// Where its insertion is copying ([`SLOT_IDLE`], [`SLOT_RESERVING`]).
    at: AtomicU64,
}

struct Reserve {
    /// Where the next record starts.
    pos: Lsn,
    /// Where the last record started.
    prev: Lsn,
}

/// A write of log blocks started and not yet collected.
struct WalWrite {
    start: Lsn,
    end: Lsn,
    file: Arc<SegmentFile>,
    wref: WaitRef,
    ret: IoReturnCell,
    started: Instant,
    /// Times this write was continued after a short write.
    retries: u32,
}

/// Where a flush is ([`Wal::flush_step`]).
struct FlushStep {
    target: Lsn,
    /// How far its writes go at least: `target`, or the end of its block,
    /// padded, where blocks are never written twice ([`Wal::rewrites_blocks`]).
    write_end: Lsn,
    /// Whether this flush drives ([`FlushQueue`]).
    driving: bool,
    /// Whether this flush did some of the work (else another's covered it).
    worked: bool,
}

/// State of the writes, behind the writer lock (held only to start and
/// collect writes, never across one).
struct Writer {
    aio: AioSession,
    /// Open segment files by segment number.
    segments: HashMap<u64, Arc<SegmentFile>>,
    /// Ring bytes below this have a write started (a block boundary,
    /// unless the log rewrites partly written blocks).
    started_upto: Lsn,
    /// Writes started and not collected, in LSN order, each beginning
    /// where the one before it ends.
    in_flight: VecDeque<WalWrite>,
    /// Segments written and not yet synced (sync methods that sync after
    /// writing), in order.
    unsynced: Vec<(u64, Arc<SegmentFile>)>,
}

/// The write-ahead log of one data directory.
pub struct Wal {
    dir: PathBuf,
    /// For injection points (the writer has its own session).
    aio: Arc<Aio>,
    config: WalConfig,
    ring: AlignedBuf,
    ring_len: u64,
    /// Most writes in flight: `config.io_concurrency` within what one AIO
    /// session can have in flight, for write-through sync methods; 1
    /// otherwise.
    io_concurrency: usize,
    reserve: Mutex<Reserve>,
    /// `reserve.pos`, readable without the mutex.
    reserved_upto: AtomicU64,
    /// The last checkpoint's redo point: pages last logged at or before it
    /// get an image at their next change.
    redo: AtomicU64,
    /// The redo point of the last checkpoint the control file records:
    /// segments before it may be recycled. Behind `redo` while a
    /// checkpoint runs, and for good if it fails (its control file never
    /// written, recovery still starts at the previous one, whose segments
    /// must stay).
    recyclable_below: AtomicU64,
    slots: Box<[InsertSlot]>,
    next_slot: AtomicUsize,
    progress_lock: Mutex<()>,
    progress: Condvar,
    /// Threads waiting on `progress`.
    progress_waiters: AtomicUsize,
    writer: Mutex<Writer>,
    /// Where flushes wait for the flush position to cover them, and which
    /// of them drives (waits for writes, runs the syncs: one at a time, in
    /// order, so that the flush position each sync publishes is covered by
    /// the syncs before it).
    flush_queue: FlushQueue,
    /// Ring bytes below this were written (the ring may reuse them): the
    /// end of the contiguous prefix of collected writes.
    written: AtomicU64,
    /// WAL below this is durable.
    flushed: AtomicU64,
    /// Why the log stopped, once it has.
    stopped: std::sync::OnceLock<String>,
    /// Replaying: flushes are no-ops (what is replayed is on disk).
    recovering: AtomicBool,
    stats: WalStats,
}

thread_local! {
    static MY_SLOT: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
    static USAGE: std::cell::Cell<WalUsage> = const { std::cell::Cell::new(WalUsage::ZERO) };
}

/// What this thread's work cost the log (EXPLAIN's WAL and I/O figures,
/// as PostgreSQL's WalUsage): take [`wal_usage`] before and after and
/// subtract.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalUsage {
    pub records: u64,
    pub full_page_images: u64,
    /// Record bytes (padding to the next record's start included).
    pub bytes: u64,
    /// Flushes that had to wait for WAL to become durable (a commit, or a
    /// dirty page written ahead of its WAL).
    pub flush_waits: u64,
    pub flush_wait_us: u64,
}

impl WalUsage {
    const ZERO: WalUsage = WalUsage {
        records: 0,
        full_page_images: 0,
        bytes: 0,
        flush_waits: 0,
        flush_wait_us: 0,
    };

    /// What was used since `before` (taken earlier on this thread).
    pub fn since(&self, before: &WalUsage) -> WalUsage {
        WalUsage {
            records: self.records - before.records,
            full_page_images: self.full_page_images - before.full_page_images,
            bytes: self.bytes - before.bytes,
            flush_waits: self.flush_waits - before.flush_waits,
            flush_wait_us: self.flush_wait_us - before.flush_wait_us,
        }
    }
}

/// This thread's WAL usage so far.
pub fn wal_usage() -> WalUsage {
    USAGE.with(|u| u.get())
}

fn add_usage(f: impl FnOnce(&mut WalUsage)) {
    USAGE.with(|u| {
        let mut x = u.get();
        f(&mut x);
        u.set(x);
    });
}

/// The file name of segment `segno` (PostgreSQL's, timeline 1).
pub fn segment_name(segno: u64) -> String {
    let per_id = 0x1_0000_0000 / WAL_SEGMENT_SIZE;
    format!("{:08X}{:08X}{:08X}", 1, segno / per_id, segno % per_id)
}

/// The segment number a file name stands for, if it is one.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    if name.len() != 24 || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let per_id = 0x1_0000_0000 / WAL_SEGMENT_SIZE;
    let hi = u64::from_str_radix(&name[8..16], 16).ok()?;
    let lo = u64::from_str_radix(&name[16..24], 16).ok()?;
    (lo < per_id).then_some(hi * per_id + lo)
}

pub fn segment_path(dir: &Path, segno: u64) -> PathBuf {
    dir.join(WAL_DIR).join(segment_name(segno))
}

impl Wal {
    /// Creates the log of a new data directory: the directory and its
    /// first segment.
    pub fn create(dir: &Path) -> Result<(), WalError> {
        let wal_dir = dir.join(WAL_DIR);
        std::fs::create_dir_all(&wal_dir).map_err(|source| WalError::Io {
            op: "create",
            path: wal_dir.clone(),
            source,
        })?;
        create_zeroed_segment(&segment_path(dir, FIRST_LSN / WAL_SEGMENT_SIZE))?;
        sync_dir(&wal_dir)
    }

    /// Opens the log for inserting at `end` (where the last valid record
    /// ended; `last` is where it started), with `tail` the bytes of `end`'s
    /// block before `end` (they are rewritten with the block). `redo` is
    /// the last checkpoint's redo point.
    pub fn open(
        dir: &Path,
        aio: &Arc<Aio>,
        config: WalConfig,
        last: Lsn,
        end: Lsn,
        tail: &[u8],
        redo: Lsn,
    ) -> Result<Arc<Wal>, WalError> {
        let ring_len = (config.buffers as u64)
            .next_multiple_of(WAL_BLOCK_SIZE)
            .max(4 * WAL_BLOCK_SIZE);
        let mut ring = AlignedBuf::new(ring_len as usize);
        let block_start = end - end % WAL_BLOCK_SIZE;
        assert_eq!(tail.len() as u64, end - block_start);
        let at = (block_start % ring_len) as usize;
        ring[at..at + tail.len()].copy_from_slice(tail);
        let pos = next_record_start(end);
        let slots = (0..INSERT_SLOTS)
            .map(|_| InsertSlot {
                lock: Mutex::new(()),
                at: AtomicU64::new(SLOT_IDLE),
            })
            .collect();
        // Writes that sync afterwards go one at a time: they complete
        // into the page cache at once, so several in flight overlap
        // nothing, and an fdatasync racing new writes to its segment
        // lasts longer (measured with `bench commit`, 32 sessions: 0.85×
        // the commits/s, 0.63× with 500 µs of added latency).
        let io_concurrency = if config.sync_method.durable_on_write() {
            config
                .io_concurrency
                .clamp(1, aio.config().io_max_concurrency.max(1))
        } else {
            1
        };
        let wal = Wal {
            dir: dir.to_path_buf(),
            aio: Arc::clone(aio),
            config,
            ring,
            ring_len,
            io_concurrency,
            reserve: Mutex::new(Reserve { pos, prev: last }),
            reserved_upto: AtomicU64::new(pos),
            redo: AtomicU64::new(redo),
            recyclable_below: AtomicU64::new(redo),
            slots,
            next_slot: AtomicUsize::new(0),
            progress_lock: Mutex::new(()),
            progress: Condvar::new(),
            progress_waiters: AtomicUsize::new(0),
            flush_queue: FlushQueue::default(),
            writer: Mutex::new(Writer {
                aio: aio.session().map_err(|e| WalError::Stopped {
                    reason: e.to_string(),
                })?,
                segments: HashMap::new(),
                started_upto: block_start,
                in_flight: VecDeque::new(),
                unsynced: Vec::new(),
            }),
            written: AtomicU64::new(end),
            flushed: AtomicU64::new(end),
            stopped: std::sync::OnceLock::new(),
            recovering: AtomicBool::new(false),
            stats: WalStats::default(),
        };
        // Bytes between `end` and the next record start (a header would
        // not fit) are zeros in the ring, as an inserter leaves them.
        let skip = (pos - end) as usize;
        if skip > 0 {
            wal.ring_write(end, &vec![0u8; skip]);
        }
        Ok(Arc::new(wal))
    }

    /// Whether a flush writes the block its target ends in as far as it
    /// is filled, and the next write writes that block again (PostgreSQL's
    /// way): with one write in flight at a time, as the sync methods that
    /// sync afterwards have. Then no flush pads: padding each commit's
    /// block had made 62 % of TPC-B's log bytes padding, and the log's
    /// segments filled (made, zeroed, and checkpointed for) that much
    /// faster. With several writes in flight the blocks are padded
    /// instead, so that no two writes ever overlap.
    fn rewrites_blocks(&self) -> bool {
        self.io_concurrency == 1
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn stats(&self) -> &WalStats {
        &self.stats
    }

    pub fn config(&self) -> &WalConfig {
        &self.config
    }

    /// Where the next record will start.
    pub fn insert_position(&self) -> Lsn {
        self.reserved_upto.load(Ordering::SeqCst)
    }

    /// WAL below this is durable.
    pub fn flushed(&self) -> Lsn {
        self.flushed.load(Ordering::SeqCst)
    }

    /// The redo point of the last checkpoint.
    pub fn redo(&self) -> Lsn {
        self.redo.load(Ordering::SeqCst)
    }

    /// Marks replay as running (flushes do nothing) or finished.
    pub fn set_recovering(&self, on: bool) {
        self.recovering.store(on, Ordering::SeqCst);
    }

    fn check_stopped(&self) -> Result<(), WalError> {
        match self.stopped.get() {
            Some(reason) => Err(WalError::Stopped {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Stops the log for good (a failed write or sync: PostgreSQL panics,
    /// since the kernel may have dropped the dirty pages it could not
    /// write, and retrying the sync would report success). The first
    /// reason is the one kept.
    /// Stops the log for `reason` and gives the error its caller returns.
    fn stop_with(&self, reason: String) -> WalError {
        self.stop(reason.clone());
        WalError::Stopped { reason }
    }

    /// Stops the log for a failed write of the WAL from `lsn` to `file`.
    fn write_failed(&self, lsn: Lsn, file: &SegmentFile, source: AioError) -> WalError {
        let e = WalError::Write {
            lsn,
            path: file.path().to_path_buf(),
            source: Box::new(source),
        };
        self.stop_with(e.to_string())
    }

    pub fn stop(&self, reason: String) {
        if self.stopped.set(reason.clone()).is_ok() {
            log::error!("WAL stopped: {reason}");
        }
        {
            let _g = self.progress_lock.lock();
            self.progress.notify_all();
        }
        self.flush_queue.wake_all();
    }

    pub fn is_stopped(&self) -> bool {
        self.stopped.get().is_some()
    }

    /// Inserts a record changing `pages` (each given after its change) and
    /// returns where it ends: what each page's `pd_lsn` becomes, and how
    /// far a commit must flush. An image of a page is logged when it was
    /// last logged at or before the checkpoint's redo point.
    pub fn insert(
        &self,
        rmgr: Rmgr,
        info: u8,
        xid: u32,
        pages: &[PageRef],
        data: &[u8],
    ) -> Result<Lsn, WalError> {
        self.insert_record(rmgr, info, xid, pages, data)
            .map(|(_, end)| end)
    }

    /// [`Wal::insert`], returning where the record starts as well as where
    /// it ends (a checkpoint record is found by its start).
    pub fn insert_record(
        &self,
        rmgr: Rmgr,
        info: u8,
        xid: u32,
        pages: &[PageRef],
        data: &[u8],
    ) -> Result<(Lsn, Lsn), WalError> {
        self.check_stopped()?;
        debug_assert!(
            !self.recovering.load(Ordering::SeqCst),
            "nothing is logged during replay"
        );
        // A checkpoint that moves the redo point between building the
        // record and reserving its place may make a page need its image:
        // the record is built again, the second time with every image,
        // which no redo point can refuse (so this runs at most twice).
        let mut every_image = false;
        loop {
            let redo = self.redo();
            let fpw = self.config.full_page_writes;
            let with_images: Vec<(PageRef, bool)> = pages
                .iter()
                .map(|p| {
                    (
                        *p,
                        p.force_image || (fpw && (every_image || p.old_lsn <= redo)),
                    )
                })
                .collect();
            let mut bytes = record::build(rmgr, info, xid, &with_images, data);
            let body_crc = crc32c::crc32c(&bytes[RECORD_HEADER_SIZE..]);
            self.aio.injections().hit(
                crate::inject::WAL_INSERT_BEFORE_RESERVE,
                HitContext { offset: redo },
            );
            let slot = self.my_slot();
            let _slot_guard = slot.lock.lock();
            slot.at.store(SLOT_RESERVING, Ordering::SeqCst);
            let reserved = {
                let mut r = self.reserve.lock();
                let now = self.redo();
                let image_missing = fpw
                    && now != redo
                    && with_images
                        .iter()
                        .any(|(p, image)| !image && p.old_lsn <= now);
                if image_missing {
                    None
                } else {
                    let start = r.pos;
                    let prev = std::mem::replace(&mut r.prev, start);
                    r.pos = next_record_start(start + bytes.len() as u64);
                    self.reserved_upto.store(r.pos, Ordering::SeqCst);
                    Some((start, prev, r.pos))
                }
            };
            let Some((start, prev, next)) = reserved else {
                debug_assert!(!every_image, "a record with every image was refused");
                slot.at.store(SLOT_IDLE, Ordering::SeqCst);
                every_image = true;
                continue;
            };
            slot.at.store(start, Ordering::SeqCst);
            finish_header(&mut bytes, prev, body_crc);
            let result = self.copy_in(slot, start, &bytes, next);
            slot.at.store(SLOT_IDLE, Ordering::SeqCst);
            self.wake_progress();
            result?;
            self.stats.records.fetch_add(1, Ordering::Relaxed);
            let images = with_images.iter().filter(|p| p.1).count() as u64;
            self.stats
                .full_page_images
                .fetch_add(images, Ordering::Relaxed);
            self.stats.bytes.fetch_add(next - start, Ordering::Relaxed);
            add_usage(|u| {
                u.records += 1;
                u.full_page_images += images;
                u.bytes += next - start;
            });
            return Ok((start, start + bytes.len() as u64));
        }
    }

    fn my_slot(&self) -> &InsertSlot {
        let index = MY_SLOT.with(|s| match s.get() {
            Some(i) => i,
            None => {
                let i = self.next_slot.fetch_add(1, Ordering::Relaxed) % INSERT_SLOTS;
                s.set(Some(i));
                i
            }
        });
        &self.slots[index % INSERT_SLOTS]
    }

    /// Wakes threads waiting for insertions to finish, if there are any
    /// (every insertion ends here: waking nobody must cost nothing).
    fn wake_progress(&self) {
        if self.progress_waiters.load(Ordering::SeqCst) > 0 {
            let _g = self.progress_lock.lock();
            self.progress.notify_all();
        }
    }

    /// Copies a record into the ring at `start` and zeros what follows it
    /// up to `next` (the next record's start), writing older WAL out first
    /// where the ring has no room.
    fn copy_in(
        &self,
        slot: &InsertSlot,
        start: Lsn,
        bytes: &[u8],
        next: Lsn,
    ) -> Result<(), WalError> {
        // What follows a record to the next one's start: alignment, or a
        // block's end too short for a header (never a whole header).
        const ZEROS: [u8; 2 * RECORD_HEADER_SIZE] = [0; 2 * RECORD_HEADER_SIZE];
        let gap = (next - start) as usize - bytes.len();
        let mut pos = start;
        for part in [bytes, &ZEROS[..gap]] {
            let mut rest = part;
            while !rest.is_empty() {
                let room_end = self.written.load(Ordering::SeqCst) / WAL_BLOCK_SIZE
                    * WAL_BLOCK_SIZE
                    + self.ring_len;
                if pos >= room_end {
                    // Publish how far we got: the writer may write what is
                    // below it.
                    slot.at.store(pos, Ordering::SeqCst);
                    self.wake_progress();
                    if let Err(e) = self.write_some(pos + 1 - self.ring_len) {
                        // The reservation cannot be given back: left
                        // half-copied, it would be written with the records
                        // linked after it, and replay would end there.
                        self.stop(format!("a WAL insertion could not finish: {e}"));
                        return Err(e);
                    }
                    continue;
                }
                let contiguous = self.ring_len - pos % self.ring_len;
                let n = (rest.len() as u64).min(room_end - pos).min(contiguous) as usize;
                self.ring_write(pos, &rest[..n]);
                pos += n as u64;
                rest = &rest[n..];
            }
        }
        Ok(())
    }

    /// Copies `bytes` into the ring at `pos` (not wrapping).
    fn ring_write(&self, pos: Lsn, bytes: &[u8]) {
        let at = (pos % self.ring_len) as usize;
        assert!(at + bytes.len() <= self.ring.len());
        // SAFETY: the range belongs to this inserter's reservation (or to
        // start-up, before any other thread sees the log), and the writer
        // reads it only once the insertion is published as finished.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                (self.ring.as_ptr() as *mut u8).add(at),
                bytes.len(),
            );
        }
    }

    /// The position below which every insertion has finished copying.
    pub fn insertions_done(&self) -> Lsn {
        // Read the reservation first: an insertion that reserves after
        // this read starts at or above it, and one that reserved before
        // shows in its slot (as reserving, or where it is copying).
        let mut done = self.reserved_upto.load(Ordering::SeqCst);
        for slot in self.slots.iter() {
            let at = slot.at.load(Ordering::SeqCst);
            if at != SLOT_IDLE {
                done = done.min(at);
            }
        }
        done
    }

    /// Waits until insertions below `target` have finished; returns how
    /// far they have.
    fn wait_insertions(&self, target: Lsn) -> Result<Lsn, WalError> {
        let started = Instant::now();
        loop {
            self.check_stopped()?;
            let done = self.insertions_done();
            if done >= target {
                return Ok(done);
            }
            if started.elapsed() > INSERTION_WAIT_MAX {
                let reason = format!("insertions below {} did not finish", format_lsn(target));
                self.stop(reason);
                return Err(WalError::Stuck {
                    target,
                    seconds: INSERTION_WAIT_MAX.as_secs(),
                });
            }
            self.progress_waiters.fetch_add(1, Ordering::SeqCst);
            let mut g = self.progress_lock.lock();
            if self.insertions_done() < target {
                self.progress.wait_for(&mut g, PROGRESS_POLL);
            }
            drop(g);
            self.progress_waiters.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Writes finished WAL until the ring bytes below `needed` are
    /// written, for an inserter that needs their room. Writes whole blocks
    /// only (no padding: the inserter is in the middle of a record).
    fn write_some(&self, needed: Lsn) -> Result<(), WalError> {
        let started = Instant::now();
        while self.written.load(Ordering::SeqCst) < needed {
            self.check_stopped()?;
            self.check_wait_time(started, needed)?;
            let wait_on = {
                let mut writer = self.writer.lock();
                self.collect_writes(&mut writer)?;
                if self.written.load(Ordering::SeqCst) >= needed {
                    break;
                }
                let done = self.insertions_done() / WAL_BLOCK_SIZE * WAL_BLOCK_SIZE;
                if done > writer.started_upto {
                    self.start_writes(&mut writer, done)?;
                }
                writer.in_flight.front().map(|w| w.wref)
            };
            match wait_on {
                Some(wref) => {
                    self.aio.wait_at_most(wref, WRITE_WAIT_POLL);
                }
                // Nothing to write until insertions below us finish.
                None => self.wait_progress(),
            }
        }
        Ok(())
    }

    /// Waits (a bounded moment) for an insertion or a write to progress.
    fn wait_progress(&self) {
        self.progress_waiters.fetch_add(1, Ordering::SeqCst);
        let mut g = self.progress_lock.lock();
        self.progress.wait_for(&mut g, PROGRESS_POLL);
        drop(g);
        self.progress_waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// Fails a wait for WAL below `target` to become durable (or written)
    /// that has lasted [`INSERTION_WAIT_MAX`] since `started`: a write or
    /// an insertion that never ends. The log goes on (the write may yet
    /// complete); an inserter that cannot finish its record stops it.
    fn check_wait_time(&self, started: Instant, target: Lsn) -> Result<(), WalError> {
        if started.elapsed() <= INSERTION_WAIT_MAX {
            return Ok(());
        }
        Err(WalError::Stuck {
            target,
            seconds: INSERTION_WAIT_MAX.as_secs(),
        })
    }

    /// Makes the WAL below `target` durable. A flush already covering it
    /// returns at once; otherwise this one starts writes of everything
    /// finished up to the end of `target`'s block (padding the block), even
    /// while earlier writes are in flight, so that the commits waiting
    /// behind it find themselves covered.
    pub fn flush(&self, target: Lsn) -> Result<(), WalError> {
        if self.recovering.load(Ordering::SeqCst) {
            return Ok(());
        }
        // Even a target already durable is refused once stopped: a page
        // changed by a record that could not be logged must not be written.
        self.check_stopped()?;
        if self.flushed() >= target {
            return Ok(());
        }
        let started = Instant::now();
        let result = self.flush_waiting(target);
        add_usage(|u| {
            u.flush_waits += 1;
            u.flush_wait_us += started.elapsed().as_micros() as u64;
        });
        result
    }

    /// [`Wal::flush`] of a target not yet durable.
    fn flush_waiting(&self, target: Lsn) -> Result<(), WalError> {
        let write_end = if self.rewrites_blocks() {
            target
        } else {
            let block_end = target.next_multiple_of(WAL_BLOCK_SIZE);
            self.pad_to(block_end)?;
            block_end
        };
        self.wait_insertions(write_end)?;
        let started = Instant::now();
        let mut step = FlushStep {
            target,
            write_end,
            driving: false,
            worked: false,
        };
        let result = loop {
            match self.flush_step(&mut step) {
                Ok(true) => break Ok(()),
                Ok(false) => {}
                Err(e) => break Err(e),
            }
            if let Err(e) = self.check_wait_time(started, target) {
                break Err(e);
            }
        };
        self.flush_queue.leave(step.driving);
        if result.is_ok() && !step.worked {
            self.stats.flushes_shared.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// One step of a flush; returns whether its target is durable.
    ///
    /// Every flush first starts, without waiting, the writes of what is
    /// finished (if the writer is free): a commit arriving while writes
    /// are in flight gets its own write in flight at once instead of
    /// waiting for theirs. Then one flush, the driver, waits for the
    /// oldest write and collects it (or syncs what is written), which
    /// moves the flush position and wakes the flushes it covers; the
    /// others sleep in the [`FlushQueue`] until then.
    fn flush_step(&self, step: &mut FlushStep) -> Result<bool, WalError> {
        self.check_stopped()?;
        if self.flushed() >= step.target {
            return Ok(true);
        }
        if let Some(mut writer) = self.writer.try_lock() {
            self.collect_writes(&mut writer)?;
            step.worked |= self.start_finished_writes(&mut writer, step.write_end)?;
        }
        if self.flushed() >= step.target {
            return Ok(true);
        }
        if !step.driving {
            step.driving = self.flush_queue.try_drive();
            if !step.driving {
                self.flush_queue
                    .wait(step.target, &self.flushed, FLUSH_WAIT_POLL);
                return Ok(false);
            }
        }
        let sync_after_write = !self.config.sync_method.durable_on_write();
        if sync_after_write && self.written.load(Ordering::SeqCst) >= step.target {
            self.sync_written(step.target)?;
            step.worked = true;
            return Ok(false);
        }
        let wait_on = {
            let mut writer = self.writer.lock();
            self.collect_writes(&mut writer)?;
            if self.written.load(Ordering::SeqCst) >= step.target {
                return Ok(false);
            }
            step.worked |= self.start_finished_writes(&mut writer, step.write_end)?;
            let front = writer.in_flight.front();
            debug_assert!(
                front.is_some(),
                "WAL below the target is neither written nor in flight"
            );
            front.map(|w| w.wref)
        };
        if let Some(wref) = wait_on {
            self.aio.wait_at_most(wref, WRITE_WAIT_POLL);
        }
        Ok(false)
    }

    /// Starts writes of everything finished, at least to `write_end` (a
    /// flush's target, or its padded block's end; insertions below it have
    /// finished): a commit whose record is finished but not yet flushed
    /// rides along. Where blocks are not rewritten, only whole blocks
    /// finished go. Returns whether it started any.
    fn start_finished_writes(&self, writer: &mut Writer, write_end: Lsn) -> Result<bool, WalError> {
        if writer.started_upto >= write_end {
            return Ok(false);
        }
        let done = self.insertions_done();
        let done = if self.rewrites_blocks() {
            done
        } else {
            done / WAL_BLOCK_SIZE * WAL_BLOCK_SIZE
        };
        self.start_writes(writer, done.max(write_end))
    }

    /// Syncs the segments written since the last sync, for the driving
    /// flush, whose `target` is written but not durable.
    fn sync_written(&self, target: Lsn) -> Result<(), WalError> {
        // Everything written by now is covered by the syncs below: they
        // start after these writes completed.
        let (upto, files) = {
            let mut writer = self.writer.lock();
            let upto = self.written.load(Ordering::SeqCst);
            (upto, std::mem::take(&mut writer.unsynced))
        };
        debug_assert!(upto >= target);
        let started = Instant::now();
        let result = files
            .iter()
            .try_for_each(|(segno, file)| self.sync_segment(*segno, file));
        self.stats
            .sync_us
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        if result.is_ok() {
            self.publish_flushed(upto);
        }
        result
    }

    /// Moves the flush position to `upto` and wakes the flushes it covers.
    fn publish_flushed(&self, upto: Lsn) {
        if self.flushed.fetch_max(upto, Ordering::SeqCst) < upto {
            self.flush_queue.wake_covered(upto);
        }
    }

    /// Syncs one written segment (fdatasync or fsync); a failure stops the
    /// log (the kernel may have dropped the pages it could not write).
    fn sync_segment(&self, segno: u64, file: &SegmentFile) -> Result<(), WalError> {
        let injected = self
            .aio
            .injections()
            .injected_errno(crate::inject::WAL_BEFORE_SYNC, segno);
        let synced = match injected {
            Some(errno) => Err(crate::storage::errno_error(errno).to_string()),
            None if self.config.sync_method == SyncMethod::Fsync => {
                file.fsync_all().map_err(|e| e.to_string())
            }
            None => file.fdatasync().map_err(|e| e.to_string()),
        };
        if let Err(e) = synced {
            return Err(self.stop_with(format!("{} failed: {e}", self.config.sync_method.name())));
        }
        self.stats.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Starts writes of the ring from where the last one ended up to
    /// `upto` (below which every insertion has finished; a block boundary
    /// unless blocks are rewritten), each at most [`WAL_WRITE_MAX_BYTES`]
    /// and within one segment, while fewer than `wal_io_concurrency` are
    /// in flight. A write starts at the block the last one ended in and
    /// writes whole blocks. Returns whether it started any. A write that
    /// cannot be started stops the log.
    fn start_writes(&self, writer: &mut Writer, upto: Lsn) -> Result<bool, WalError> {
        debug_assert!(self.rewrites_blocks() || upto.is_multiple_of(WAL_BLOCK_SIZE));
        debug_assert!(self.rewrites_blocks() || writer.started_upto.is_multiple_of(WAL_BLOCK_SIZE));
        let mut any = false;
        while writer.started_upto < upto && writer.in_flight.len() < self.io_concurrency {
            // Where blocks are rewritten, the write before this one (of
            // this block's first part) has been collected: one at a time.
            let pos = writer.started_upto - writer.started_upto % WAL_BLOCK_SIZE;
            debug_assert!(pos == writer.started_upto || writer.in_flight.is_empty());
            let segno = pos / WAL_SEGMENT_SIZE;
            let seg_end = (segno + 1) * WAL_SEGMENT_SIZE;
            let ring_at = pos % self.ring_len;
            let n = (upto - pos)
                .min(seg_end - pos)
                .min(self.ring_len - ring_at)
                .min(WAL_WRITE_MAX_BYTES);
            // A segment that cannot be made (a full disk) stops the log as
            // a failed write does: the records stay in the ring, and one
            // written later would make a commit reported failed durable.
            let file = match self.segment(writer, segno) {
                Ok(file) => file,
                Err(e) => return Err(self.stop_with(e.to_string())),
            };
            let write = self.start_write(writer, file, pos, pos + n, 0)?;
            debug_assert!(pos + n > writer.started_upto);
            writer.in_flight.push_back(write);
            writer.started_upto = pos + n;
            any = true;
        }
        let in_flight = writer.in_flight.len() as u64;
        self.stats
            .writes_in_flight
            .store(in_flight, Ordering::Relaxed);
        self.stats
            .writes_in_flight_peak
            .fetch_max(in_flight, Ordering::Relaxed);
        Ok(any)
    }

    /// Starts one write of the ring's bytes `start..end` to `file`, in
    /// whole blocks: `start` is a block's, and the last block goes whole
    /// even where `end` is inside it (what lies past `end` is the ring's
    /// old bytes, or a record still being copied: replay ends before them,
    /// and the next write writes the block again).
    fn start_write(
        &self,
        writer: &mut Writer,
        file: Arc<SegmentFile>,
        start: Lsn,
        end: Lsn,
        retries: u32,
    ) -> Result<WalWrite, WalError> {
        debug_assert!(start < end && start / WAL_SEGMENT_SIZE == (end - 1) / WAL_SEGMENT_SIZE);
        debug_assert_eq!(start % WAL_BLOCK_SIZE, 0);
        let len = end.next_multiple_of(WAL_BLOCK_SIZE) - start;
        debug_assert!(start % self.ring_len + len <= self.ring_len);
        let fail = |source: AioError| self.write_failed(start, &file, source);
        let injected = self
            .aio
            .injections()
            .injected_errno(crate::inject::WAL_BEFORE_WRITE, start);
        if let Some(errno) = injected {
            return Err(fail(AioError::Io {
                message: crate::storage::errno_error(errno).to_string(),
                errno: Some(errno),
            }));
        }
        let token = writer.aio.acquire().map_err(fail)?;
        let ret = IoReturnCell::default();
        let wref = writer.aio.wait_ref(&token);
        if let Err(e) = writer.aio.set_return(&token, &ret) {
            let _ = writer.aio.release(token);
            return Err(fail(e));
        }
        // A buffered write that a sync makes durable only copies into the
        // page cache: quicker done here than handed to a worker (an
        // io_uring punt, a worker's queue) and waited for, as the flush
        // waits for it at once. Such writes go one at a time anyway.
        if !file.is_direct() && !self.config.sync_method.durable_on_write() {
            if let Err(e) = writer.aio.set_synchronous(&token) {
                let _ = writer.aio.release(token);
                return Err(fail(e));
            }
        }
        // SAFETY: the ring's bytes start..end are below `upto`, whose
        // insertions have all finished; inserters do not touch them again
        // until `written` passes them, which only collecting this write
        // does. Past `end`, in its block, an inserter may be copying while
        // the kernel reads: those bytes are only bytes to us (never read
        // back from the ring), replay stops before them, and the block is
        // written again. The ring lives as long as the log, whose drop
        // waits for writes in flight.
        let iov = [IoVec::new(
            unsafe { self.ring.as_ptr().add((start % self.ring_len) as usize) as *mut u8 },
            len as usize,
        )];
        unsafe {
            writer
                .aio
                .start_writev(token, &file, start % WAL_SEGMENT_SIZE, &iov)
        }
        .map_err(fail)?;
        self.stats.writes.fetch_add(1, Ordering::Relaxed);
        Ok(WalWrite {
            start,
            end,
            file,
            wref,
            ret,
            started: Instant::now(),
            retries,
        })
    }

    /// Collects the writes at the front of the queue that have completed,
    /// in LSN order: moves `written` over them (and `flushed`, where a
    /// completed write is durable). A short write is continued where it
    /// stopped; a failed one stops the log.
    fn collect_writes(&self, writer: &mut Writer) -> Result<(), WalError> {
        let result = self.collect_writes_inner(writer);
        // On every way out, a failed write's too: the gauge follows the
        // queue (a failure used to leave it at the count before).
        self.stats
            .writes_in_flight
            .store(writer.in_flight.len() as u64, Ordering::Relaxed);
        result
    }

    fn collect_writes_inner(&self, writer: &mut Writer) -> Result<(), WalError> {
        // A write that failed was popped under this lock and stopped the
        // log: the writes behind it must not move `written`/`flushed` over
        // its bytes.
        self.check_stopped()?;
        let mut moved = false;
        while let Some(front) = writer.in_flight.front() {
            if !self.aio.is_done(front.wref) {
                break;
            }
            let wref = front.wref;
            let write = writer.in_flight.pop_front().expect("front exists");
            let stopped = |source: AioError| self.write_failed(write.start, &write.file, source);
            // Done: this only collects it (runs its local callbacks and
            // fills its return cell).
            writer.aio.wait(wref).map_err(stopped)?;
            let ret = write
                .ret
                .take()
                .expect("a collected write of our own session has its result");
            let blocks = crate::aio::blocks_transferred(&writer.aio, &ret).map_err(stopped)?;
            let done_upto = write.start + (blocks * WAL_BLOCK_SIZE as usize) as u64;
            self.stats.write_us.fetch_add(
                write.started.elapsed().as_micros() as u64,
                Ordering::Relaxed,
            );
            if done_upto < write.end {
                // A short write: continue it, still first in line (from
                // its first unwritten block: the bytes of a block written
                // in part are written again, which nobody else does).
                if write.retries >= SHORT_WRITE_RETRIES_MAX {
                    return Err(stopped(AioError::Io {
                        message: format!(
                            "short write: {} of {} bytes after {} retries",
                            done_upto - write.start,
                            write.end - write.start,
                            write.retries
                        ),
                        errno: None,
                    }));
                }
                let rest = self.start_write(
                    writer,
                    Arc::clone(&write.file),
                    done_upto,
                    write.end,
                    write.retries + 1,
                )?;
                writer.in_flight.push_front(rest);
                continue;
            }
            debug_assert_eq!(done_upto, write.end.next_multiple_of(WAL_BLOCK_SIZE));
            let segno = write.start / WAL_SEGMENT_SIZE;
            if self.config.sync_method.durable_on_write() {
                self.publish_flushed(write.end);
            } else if writer.unsynced.last().map(|(s, _)| *s) != Some(segno) {
                writer.unsynced.push((segno, Arc::clone(&write.file)));
            }
            let before = self.written.fetch_max(write.end, Ordering::SeqCst);
            debug_assert!(
                before / WAL_BLOCK_SIZE * WAL_BLOCK_SIZE <= write.start,
                "WAL writes collected out of order"
            );
            moved = true;
        }
        if moved {
            self.wake_progress();
        }
        Ok(())
    }

    /// Makes everything inserted so far durable.
    pub fn flush_all(&self) -> Result<(), WalError> {
        self.flush(self.insert_position())
    }

    /// Fills the rest of the block ending at `block_end` with a padding
    /// record, unless records already reach that far.
    fn pad_to(&self, block_end: Lsn) -> Result<(), WalError> {
        debug_assert_eq!(block_end % WAL_BLOCK_SIZE, 0);
        let slot = self.my_slot();
        let _slot_guard = slot.lock.lock();
        slot.at.store(SLOT_RESERVING, Ordering::SeqCst);
        let reserved = {
            let mut r = self.reserve.lock();
            if r.pos >= block_end {
                None
            } else {
                let start = r.pos;
                debug_assert!(block_end - start >= RECORD_HEADER_SIZE as u64);
                let prev = std::mem::replace(&mut r.prev, start);
                r.pos = block_end;
                self.reserved_upto.store(block_end, Ordering::SeqCst);
                Some((start, prev))
            }
        };
        let Some((start, prev)) = reserved else {
            slot.at.store(SLOT_IDLE, Ordering::SeqCst);
            return Ok(());
        };
        slot.at.store(start, Ordering::SeqCst);
        let len = (block_end - start) as usize;
        let mut bytes = record::build(
            Rmgr::Xlog,
            record::XLOG_PADDING,
            0,
            &[],
            &vec![0u8; len - RECORD_HEADER_SIZE],
        );
        let body_crc = crc32c::crc32c(&bytes[RECORD_HEADER_SIZE..]);
        finish_header(&mut bytes, prev, body_crc);
        let result = self.copy_in(slot, start, &bytes, block_end);
        slot.at.store(SLOT_IDLE, Ordering::SeqCst);
        self.wake_progress();
        self.stats
            .padding_bytes
            .fetch_add(len as u64, Ordering::Relaxed);
        result
    }

    /// Segment `segno`, opened (created, by recycling an old one when
    /// there is one, else full of zeros) on first use.
    fn segment(&self, writer: &mut Writer, segno: u64) -> Result<Arc<SegmentFile>, WalError> {
        if let Some(f) = writer.segments.get(&segno) {
            return Ok(Arc::clone(f));
        }
        let path = segment_path(&self.dir, segno);
        if !path.exists() {
            self.install_segment(segno)?;
        }
        let file = open_segment(&path, self.config.direct, self.config.sync_method)?;
        // Keep only a few open: segments are written in order.
        writer.segments.retain(|&s, _| s + 2 > segno);
        writer.segments.insert(segno, Arc::clone(&file));
        Ok(file)
    }

    /// Creates segment `segno`: an old segment renamed, or a new one.
    fn install_segment(&self, segno: u64) -> Result<(), WalError> {
        let path = segment_path(&self.dir, segno);
        let wal_dir = self.dir.join(WAL_DIR);
        // Not `redo`: a checkpoint in progress has moved it, but recovery
        // starts at the control file's until that checkpoint completes.
        let redo_seg = self.recyclable_below.load(Ordering::SeqCst) / WAL_SEGMENT_SIZE;
        let old = list_segments(&self.dir)?
            .into_iter()
            .find(|&s| s < redo_seg && s < segno);
        match old {
            Some(s) => {
                let from = segment_path(&self.dir, s);
                std::fs::rename(&from, &path).map_err(|source| WalError::Io {
                    op: "rename",
                    path: from,
                    source,
                })?;
            }
            None => create_zeroed_segment(&path)?,
        }
        sync_dir(&wal_dir)
    }

    /// Called by a checkpoint that has written everything before `redo`
    /// and recorded it in the control file: segments wholly before it are
    /// no longer needed, and may be recycled from now on. Keeps up to
    /// `keep` of them for recycling and removes the rest.
    pub fn remove_old_segments(&self, redo: Lsn, keep: usize) -> Result<(), WalError> {
        debug_assert!(
            redo <= self.redo(),
            "a checkpoint completes at its own redo point"
        );
        self.recyclable_below.fetch_max(redo, Ordering::SeqCst);
        let redo_seg = redo / WAL_SEGMENT_SIZE;
        let old: Vec<u64> = list_segments(&self.dir)?
            .into_iter()
            .filter(|&s| s < redo_seg)
            .collect();
        let excess = old.len().saturating_sub(keep);
        for &s in &old[..excess] {
            let path = segment_path(&self.dir, s);
            std::fs::remove_file(&path).map_err(|source| WalError::Io {
                op: "remove",
                path,
                source,
            })?;
        }
        Ok(())
    }

    /// Starts a checkpoint: the redo point is where the next record will
    /// go; every page changed from here on logs its image first.
    pub fn begin_checkpoint(&self) -> Lsn {
        let r = self.reserve.lock();
        self.redo.store(r.pos, Ordering::SeqCst);
        r.pos
    }
}

impl Drop for Wal {
    /// Waits for writes still in flight (a flush that failed part-way
    /// leaves them): the kernel may be reading the ring they point into.
    fn drop(&mut self) {
        self.writer.get_mut().aio.wait_all();
    }
}

/// Fills in `prev` and the CRC of a record whose body CRC is `body_crc`
/// (see `record::record_crc`): the header's part is computed here, once
/// the record's place is known.
fn finish_header(bytes: &mut [u8], prev: Lsn, body_crc: u32) {
    bytes[8..16].copy_from_slice(&prev.to_le_bytes());
    let crc = crc32c::crc32c_append(body_crc, &bytes[8..RECORD_HEADER_SIZE]);
    let crc = crc32c::crc32c_append(crc, &bytes[0..4]);
    debug_assert_eq!(crc, record::record_crc(bytes));
    bytes[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// Opens a segment for writing (and reading): `O_DIRECT` when the WAL is
/// direct, and write-through when the sync method makes a completed write
/// durable.
fn open_segment(
    path: &Path,
    direct: bool,
    sync_method: SyncMethod,
) -> Result<Arc<SegmentFile>, WalError> {
    Ok(SegmentFile::open_wal(
        path,
        direct,
        sync_method.open_flag(),
    )?)
}

fn create_zeroed_segment(path: &Path) -> Result<(), WalError> {
    let io = |op, source| WalError::Io {
        op,
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("tmp");
    let file = std::fs::File::create(&tmp).map_err(|e| io("create", e))?;
    let zeros = vec![0u8; ZERO_CHUNK];
    let mut at = 0u64;
    while at < WAL_SEGMENT_SIZE {
        std::os::unix::fs::FileExt::write_all_at(&file, &zeros, at).map_err(|e| io("write", e))?;
        at += ZERO_CHUNK as u64;
    }
    file.sync_all().map_err(|e| io("sync", e))?;
    std::fs::rename(&tmp, path).map_err(|e| io("rename", e))
}

/// Segment numbers present in the WAL directory, ascending.
pub fn list_segments(dir: &Path) -> Result<Vec<u64>, WalError> {
    let wal_dir = dir.join(WAL_DIR);
    let entries = std::fs::read_dir(&wal_dir).map_err(|source| WalError::Io {
        op: "read",
        path: wal_dir.clone(),
        source,
    })?;
    let mut segs: Vec<u64> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| parse_segment_name(&e.file_name().to_string_lossy()))
        .collect();
    segs.sort_unstable();
    Ok(segs)
}

pub fn sync_dir(path: &Path) -> Result<(), WalError> {
    std::fs::File::open(path)
        .and_then(|d| d.sync_all())
        .map_err(|source| WalError::Io {
            op: "sync",
            path: path.to_path_buf(),
            source,
        })
}
