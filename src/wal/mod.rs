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
//! also makes it writable with `O_DIRECT`). A flush that ends inside a
//! block first pads the block with a padding record, so that every write
//! ends on a block boundary and no later write rewrites a block an earlier
//! one wrote (the AIO thread's "padding of partial records"). A commit
//! waits until the flush position covers its commit record; one flush
//! releases every commit it covers (group commit).
//!
//! # Segments
//!
//! The log lives in 16 MiB segment files under `wal/`, named as
//! PostgreSQL names them (timeline 1). A new segment is a recycled old one
//! (renamed; its stale records fail the `prev` check) or is written full of
//! zeros when it is created, so that writes into it change no file size.

pub mod control;
pub mod reader;
pub mod record;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use thiserror::Error;

use crate::aio::{Aio, AioError, AioSession};
use crate::inject::HitContext;
use crate::storage::{AlignedBuf, SegmentFile, StorageError};
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
/// Zeros written at a time into a new segment.
const ZERO_CHUNK: usize = 1 << 20;

#[derive(Debug, Error)]
pub enum WalError {
    #[error("could not {op} WAL file \"{path}\": {source}")]
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
    #[error("WAL insertions below {} did not finish within {seconds} s; the database has stopped accepting changes: restart it", format_lsn(*.target))]
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

/// Start-up parameters of the log.
#[derive(Debug, Clone)]
pub struct WalConfig {
    /// Segments opened `O_DIRECT | O_DSYNC` (io_direct includes wal).
    pub direct: bool,
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

/// State of the writer, behind the write lock.
struct Writer {
    aio: AioSession,
    /// Open segment files by segment number.
    segments: HashMap<u64, Arc<SegmentFile>>,
}

/// The write-ahead log of one data directory.
pub struct Wal {
    dir: PathBuf,
    /// For injection points (the writer has its own session).
    aio: Arc<Aio>,
    config: WalConfig,
    ring: AlignedBuf,
    ring_len: u64,
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
    /// Where flushes that found the writer busy wait for it to finish.
    flush_wait_lock: Mutex<()>,
    flush_done: Condvar,
    /// Ring bytes below this were written (the ring may reuse them).
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
        let wal = Wal {
            dir: dir.to_path_buf(),
            aio: Arc::clone(aio),
            config,
            ring,
            ring_len,
            reserve: Mutex::new(Reserve { pos, prev: last }),
            reserved_upto: AtomicU64::new(pos),
            redo: AtomicU64::new(redo),
            recyclable_below: AtomicU64::new(redo),
            slots,
            next_slot: AtomicUsize::new(0),
            progress_lock: Mutex::new(()),
            progress: Condvar::new(),
            progress_waiters: AtomicUsize::new(0),
            flush_wait_lock: Mutex::new(()),
            flush_done: Condvar::new(),
            writer: Mutex::new(Writer {
                aio: aio.session().map_err(|e| WalError::Stopped {
                    reason: e.to_string(),
                })?,
                segments: HashMap::new(),
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
    pub fn stop(&self, reason: String) {
        if self.stopped.set(reason.clone()).is_ok() {
            log::error!("WAL stopped: {reason}");
        }
        let _g = self.progress_lock.lock();
        self.progress.notify_all();
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
                .map(|p| (*p, fpw && (every_image || p.old_lsn <= redo)))
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
                    self.write_some(pos + 1 - self.ring_len)?;
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
            let done = self.insertions_done() / WAL_BLOCK_SIZE * WAL_BLOCK_SIZE;
            let mut writer = self.writer.lock();
            let written = self.written.load(Ordering::SeqCst);
            if written >= needed {
                break;
            }
            if done > written {
                self.write_locked(&mut writer, done, false)?;
                continue;
            }
            drop(writer);
            if started.elapsed() > INSERTION_WAIT_MAX {
                let reason = "the WAL ring never freed room".to_string();
                self.stop(reason);
                return Err(WalError::Stuck {
                    target: needed,
                    seconds: INSERTION_WAIT_MAX.as_secs(),
                });
            }
            self.progress_waiters.fetch_add(1, Ordering::SeqCst);
            let mut g = self.progress_lock.lock();
            self.progress.wait_for(&mut g, PROGRESS_POLL);
            drop(g);
            self.progress_waiters.fetch_sub(1, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Makes the WAL below `target` durable. A flush already covering it
    /// returns at once; otherwise this one writes everything finished up
    /// to the end of `target`'s block (padding the block), so that the
    /// commits waiting behind it find themselves covered.
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
        let block_end = target.next_multiple_of(WAL_BLOCK_SIZE);
        self.pad_to(block_end)?;
        self.wait_insertions(block_end)?;
        let started = Instant::now();
        // Acquire the writer or wait for its flush (PostgreSQL's
        // LWLockAcquireOrWait): every waiter wakes when a flush ends, and
        // those it covered return without taking the lock in turn (a
        // convoy of lock hand-offs, one waiter at a time, cost more than
        // the flushes themselves with 32 sessions).
        loop {
            self.check_stopped()?;
            if self.flushed() >= target {
                self.stats.flushes_shared.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            if let Some(mut writer) = self.writer.try_lock() {
                if self.flushed() >= target {
                    self.stats.flushes_shared.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                // Everything finished by now, in whole blocks: a commit
                // whose record is finished but not yet flushed rides along.
                let upto =
                    (self.insertions_done() / WAL_BLOCK_SIZE * WAL_BLOCK_SIZE).max(block_end);
                let result = self.write_locked(&mut writer, upto, true);
                drop(writer);
                self.wake_flush_waiters();
                return result;
            }
            if started.elapsed() > INSERTION_WAIT_MAX {
                return Err(WalError::Stuck {
                    target,
                    seconds: INSERTION_WAIT_MAX.as_secs(),
                });
            }
            let mut g = self.flush_wait_lock.lock();
            if self.flushed() < target && self.writer.is_locked() {
                self.flush_done.wait_for(&mut g, PROGRESS_POLL);
            }
        }
    }

    fn wake_flush_waiters(&self) {
        let _g = self.flush_wait_lock.lock();
        self.flush_done.notify_all();
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

    /// Writes the ring from the last written block up to `upto` (a block
    /// boundary, every insertion below it finished) and, if `sync`, makes
    /// it durable. With the write lock.
    fn write_locked(&self, writer: &mut Writer, upto: Lsn, sync: bool) -> Result<(), WalError> {
        debug_assert_eq!(upto % WAL_BLOCK_SIZE, 0);
        let written = self.written.load(Ordering::SeqCst);
        let mut pos = written / WAL_BLOCK_SIZE * WAL_BLOCK_SIZE;
        let mut touched: Vec<u64> = Vec::new();
        let started = Instant::now();
        while pos < upto {
            let segno = pos / WAL_SEGMENT_SIZE;
            let seg_end = (segno + 1) * WAL_SEGMENT_SIZE;
            let ring_at = pos % self.ring_len;
            let n = (upto - pos).min(seg_end - pos).min(self.ring_len - ring_at);
            // A segment that cannot be made (a full disk) stops the log as
            // a failed write does: the records stay in the ring, and one
            // written later would make a commit reported failed durable.
            let file = match self.segment(writer, segno) {
                Ok(file) => file,
                Err(e) => {
                    let reason = e.to_string();
                    self.stop(reason.clone());
                    return Err(WalError::Stopped { reason });
                }
            };
            // SAFETY: the range is below `upto`, whose insertions have all
            // finished; inserters do not touch it again until `written`
            // passes it.
            let bytes = unsafe {
                std::slice::from_raw_parts(self.ring.as_ptr().add(ring_at as usize), n as usize)
            };
            let injected = writer
                .aio
                .aio()
                .injections()
                .hit(crate::inject::WAL_BEFORE_WRITE, HitContext { offset: pos })
                .filter(|&r| r < 0);
            let result = match injected {
                Some(errno) => Err(AioError::Io {
                    message: crate::storage::errno_error(-errno as i32).to_string(),
                    errno: Some(-errno as i32),
                }),
                None => {
                    crate::aio::write_blocks(&mut writer.aio, &file, pos % WAL_SEGMENT_SIZE, bytes)
                }
            };
            if let Err(source) = result {
                let e = WalError::Write {
                    lsn: pos,
                    path: file.path().to_path_buf(),
                    source: Box::new(source),
                };
                let reason = e.to_string();
                self.stop(reason.clone());
                return Err(WalError::Stopped { reason });
            }
            self.stats.writes.fetch_add(1, Ordering::Relaxed);
            if touched.last() != Some(&segno) {
                touched.push(segno);
            }
            pos += n;
        }
        self.stats
            .write_us
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        self.written.store(upto.max(written), Ordering::SeqCst);
        self.wake_progress();
        if sync {
            let started = Instant::now();
            if !self.config.direct {
                for segno in &touched {
                    let file = self.segment(writer, *segno)?;
                    let injected = writer
                        .aio
                        .aio()
                        .injections()
                        .hit(
                            crate::inject::WAL_BEFORE_SYNC,
                            HitContext { offset: *segno },
                        )
                        .filter(|&r| r < 0);
                    let synced = match injected {
                        Some(errno) => Err(crate::storage::errno_error(-errno as i32).to_string()),
                        None => file.fdatasync().map_err(|e| e.to_string()),
                    };
                    if let Err(e) = synced {
                        let reason = format!("fdatasync failed: {e}");
                        self.stop(reason.clone());
                        return Err(WalError::Stopped { reason });
                    }
                    self.stats.syncs.fetch_add(1, Ordering::Relaxed);
                }
            }
            self.stats
                .sync_us
                .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
            self.flushed.fetch_max(upto, Ordering::SeqCst);
        } else if self.config.direct {
            // O_DSYNC: written is durable.
            self.flushed.fetch_max(upto, Ordering::SeqCst);
        }
        Ok(())
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
        let file = open_segment(&path, self.config.direct)?;
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

/// Opens a segment for writing (and reading): `O_DIRECT | O_DSYNC` when
/// the WAL is direct, so that a completed write is durable.
pub fn open_segment(path: &Path, direct: bool) -> Result<Arc<SegmentFile>, WalError> {
    Ok(SegmentFile::open_wal(path, direct)?)
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
