//! The shared buffer pool: frames, descriptors, the mapping table, pins,
//! replacement, strategy rings, and reads and writes through AIO.
//!
//! # Descriptors
//!
//! Each frame has a descriptor with one atomic state word: the shared pin
//! count, a usage count for the clock sweep, and flags (VALID, DIRTY,
//! TAG_VALID, IO_IN_PROGRESS, IO_ERROR, JUST_DIRTIED). Pins change the word
//! with compare-and-swap and take no lock. The tag (relation, fork, block)
//! and the wait reference of the I/O in progress live behind a small
//! per-descriptor mutex, which is also what I/O start and end take, so that
//! "is an I/O in progress, and which" is answered consistently. A condition
//! variable next to it wakes threads waiting for an I/O with no wait
//! reference yet.
//!
//! # Finding a buffer
//!
//! The mapping table (tag → buffer) is split into partitions, each a
//! read-write lock. A lookup pins the buffer while still holding the
//! partition's read lock; a buffer changes identity only under the write
//! locks of its old and new partitions and only if its one pin is the
//! evicting session's. So a pinned buffer never changes identity.
//!
//! # Reads
//!
//! See `read.rs`: `start_read_buffers` / `wait_read_buffers` as
//! DESIGN.md §5 describes them, with I/O already in progress joined as a
//! *foreign* I/O instead of waited for synchronously.
//!
//! # Files
//!
//! - `mod.rs`: descriptors and their state word, the mapping table, pins,
//!   sessions, content locks, extension, and dropping a relation's buffers;
//! - `replace.rs`: the clock sweep and strategy rings (which buffer a new
//!   page takes);
//! - `read.rs`: reads, started and waited for;
//! - `write.rs`: writes: the steps every write takes, synchronous
//!   write-back (`flush_*`) and write-behind.

mod read;
mod replace;
mod write;

pub use read::{ReadFlags, ReadOp, ReadOpKind, WaitOutcome};
pub use replace::{
    SessionWriteStats, Strategy, StrategyKind, BULK_READ_RING_BYTES, BULK_WRITE_RING_BYTES,
    VACUUM_RING_BYTES,
};
pub use write::{
    CleanLimits, CleanOutcome, WriteBehind, WriteSlots, WriteStats, WRITE_BEHIND_WRITES_MAX,
    WRITE_COMBINE_BLOCKS,
};

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use lock_api::RawRwLock as _;
use parking_lot::{Condvar, Mutex, RawRwLock, RwLock};
use thiserror::Error;

use crate::aio::{Aio, AioError, AioSession, CallbackId, WaitRef};
use crate::local_arc::LocalArc;
use crate::page::PageBytes;
use crate::storage::{AlignedBuf, Fork, Smgr, SmgrRelation, StorageError, BLOCK_SIZE};

/// A buffer's index in the pool.
pub type BufferId = u32;

/// The hasher of the pool's maps (buffer tags to buffers, a session's
/// pins, relation numbers to their files), whose keys are a few small
/// integers. SipHash's defence against
/// chosen keys is not worth its cost here (2–3 % of a pgbench lookup's
/// CPU): PostgreSQL's buffer table hashes with a fixed function too, and
/// a client chooses blocks only through the rows it asks for. FxHash's
/// step per word, then SplitMix64's finalizer, so that both the low bits
/// (the bucket) and the high ones (hashbrown's tag) vary with every key
/// bit.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IntHasher(u64);

impl IntHasher {
    fn mix(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl std::hash::Hasher for IntHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
    }
    fn write_u8(&mut self, n: u8) {
        self.mix(n.into());
    }
    fn write_u16(&mut self, n: u16) {
        self.mix(n.into());
    }
    fn write_u32(&mut self, n: u32) {
        self.mix(n.into());
    }
    fn write_u64(&mut self, n: u64) {
        self.mix(n);
    }
    fn write_usize(&mut self, n: usize) {
        self.mix(n as u64);
    }
    fn write_isize(&mut self, n: isize) {
        self.mix(n as u64);
    }
    fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// A map keyed by small integers (buffer tags, ids, relation numbers),
/// hashed with [`IntHasher`].
pub(crate) type IntMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<IntHasher>>;

/// Which page a buffer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BufferTag {
    pub rel: u32,
    pub fork: Fork,
    pub block: u32,
}

impl std::fmt::Display for BufferTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.fork {
            Fork::Main => write!(f, "block {} of relation {}", self.block, self.rel),
            fork => write!(
                f,
                "block {} of relation {} fork {}",
                self.block,
                self.rel,
                fork.name()
            ),
        }
    }
}

/// Errors of the buffer layer.
#[derive(Debug, Error)]
pub enum BufferError {
    #[error("no unpinned buffers available (shared_buffers = {nbuffers}); raise shared_buffers or pin fewer buffers")]
    NoUnpinnedBuffers { nbuffers: u32 },
    #[error("session pin limit of {limit} buffers reached (shared_buffers / max_sessions); release buffers before pinning more")]
    PinLimit { limit: usize },
    #[error("could not allocate shared_buffers = {mib} MB ({nbuffers} buffers of 8 kB): {reason}; lower shared_buffers (this machine has {machine_mib} MB of memory)")]
    PoolAllocation {
        mib: u64,
        nbuffers: u32,
        machine_mib: u64,
        reason: String,
    },
    #[error("{0}")]
    Io(String),
    /// A buffer for a block past the end of its relation holds data: an
    /// extension will not zero it.
    #[error("unexpected data beyond the end of the file in {tag}: a buffer outlived the truncation of its block; restart to clear the buffer pool")]
    DataBeyondEnd { tag: BufferTag },
    #[error("could not write {tag}: the WAL up to its changes (to {lsn}) could not be made durable: {}", failure.reason)]
    WalFlush {
        tag: BufferTag,
        lsn: String,
        failure: WalFlushFailure,
    },
    #[error(transparent)]
    Aio(#[from] AioError),
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// Data pages could not be written: the buffers stay dirty, to be
    /// written again later (the statement that needed the write fails).
    #[error("{source} (file \"{}\"){}", path.display(), crate::storage::full_disk_hint(source.errno()))]
    Write { path: PathBuf, source: AioError },
    /// A read failed: with an errno from the kernel, or without one when
    /// it returned fewer blocks than asked or blocks that do not verify.
    #[error(transparent)]
    Read(AioError),
    #[error("could not sync segment {segno} of {}: {source}", path.display())]
    Sync {
        segno: u32,
        path: PathBuf,
        source: AioError,
    },
}

impl BufferError {
    /// PostgreSQL's SQLSTATE for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            // Limits a setting sets, which the message says to raise
            // (PostgreSQL's code for "all replication slots are in use;
            // increase max_replication_slots").
            BufferError::NoUnpinnedBuffers { .. } | BufferError::PinLimit { .. } => "53400",
            BufferError::PoolAllocation { .. } => "53200",
            // An I/O that did not complete in its bound, or that others
            // kept from us.
            BufferError::Io(_) => "58030",
            // PostgreSQL's "unexpected data beyond EOF": data corrupted.
            BufferError::DataBeyondEnd { .. } => "XX001",
            BufferError::WalFlush { failure, .. } => failure.sqlstate,
            BufferError::Aio(e) | BufferError::Write { source: e, .. } => e.sqlstate(),
            BufferError::Storage(e) => e.sqlstate(),
            BufferError::Sync { source, .. } => source.sqlstate(),
            // A short read or a page that does not verify is data
            // corrupted in PostgreSQL ("read only n of m bytes", "invalid
            // page in block").
            BufferError::Read(e) => match e.errno() {
                Some(errno) => crate::storage::errno_sqlstate(errno),
                None => "XX001",
            },
        }
    }
}

/// Why the WAL could not be made durable for a page write, as the layer
/// that owns the WAL reports it (this layer does not know its errors).
#[derive(Debug, Clone)]
pub struct WalFlushFailure {
    pub reason: String,
    /// The WAL error's SQLSTATE.
    pub sqlstate: &'static str,
}

// ---- the state word ---------------------------------------------------

const REFCOUNT_BITS: u32 = 18;
const REFCOUNT_MASK: u64 = (1 << REFCOUNT_BITS) - 1;
const USAGE_SHIFT: u32 = REFCOUNT_BITS;
const USAGE_MASK: u64 = 0xF << USAGE_SHIFT;
const USAGE_ONE: u64 = 1 << USAGE_SHIFT;
/// Highest usage count: a buffer survives this many sweeps unused.
pub const MAX_USAGE_COUNT: u64 = 5;

pub(crate) const BM_DIRTY: u64 = 1 << 32;
pub(crate) const BM_VALID: u64 = 1 << 33;
pub(crate) const BM_TAG_VALID: u64 = 1 << 34;
pub(crate) const BM_IO_IN_PROGRESS: u64 = 1 << 35;
pub(crate) const BM_IO_ERROR: u64 = 1 << 36;
pub(crate) const BM_JUST_DIRTIED: u64 = 1 << 37;

fn refcount(state: u64) -> u64 {
    state & REFCOUNT_MASK
}

fn usage(state: u64) -> u64 {
    (state & USAGE_MASK) >> USAGE_SHIFT
}

/// The tag and in-progress I/O of a descriptor, behind its header lock.
#[derive(Debug, Default)]
pub(crate) struct Header {
    pub tag: Option<BufferTag>,
    pub wait_ref: Option<WaitRef>,
}

pub(crate) struct BufferDesc {
    pub state: AtomicU64,
    pub header: Mutex<Header>,
    /// Signalled when IO_IN_PROGRESS is cleared.
    pub io_done: Condvar,
    pub content: RawRwLock,
}

/// Partitions of the mapping table.
pub const MAPPING_PARTITIONS: usize = 128;

/// Start-up parameters of the pool.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    pub nbuffers: u32,
    pub max_sessions: usize,
}

/// Counters of the pool, cumulative.
#[derive(Debug, Default)]
pub struct PoolStats {
    pub hits: AtomicU64,
    pub reads: AtomicU64,
    pub evictions: AtomicU64,
    pub writes: AtomicU64,
    /// Buffers taken for a new page (PostgreSQL's buffers_alloc): what the
    /// background writer paces itself by.
    pub allocs: AtomicU64,
    pub checksum_failures: AtomicU64,
    /// Blocks the kernel was advised to read ahead (sync method, buffered).
    pub advised: AtomicU64,
}

/// Makes the WAL durable up to an LSN before a page carrying it is written
/// (registered at start-up by the layer that owns the WAL, so that this
/// layer does not know it).
pub type WalFlushHook = Arc<dyn Fn(u64) -> Result<(), WalFlushFailure> + Send + Sync>;

/// The shared buffer pool.
pub struct BufferPool {
    aio: Arc<Aio>,
    smgr: Arc<Smgr>,
    nbuffers: u32,
    frames: AlignedBuf,
    descs: Box<[BufferDesc]>,
    mapping: Box<[RwLock<IntMap<BufferTag, BufferId>>]>,
    clock: AtomicU64,
    /// Read on every I/O, by every session at once; written once per
    /// relation.
    relations: RwLock<IntMap<u32, Arc<SmgrRelation>>>,
    read_callback: CallbackId,
    write_callback: CallbackId,
    pin_limit: usize,
    stats: PoolStats,
    wal_flush: std::sync::OnceLock<WalFlushHook>,
    /// Segment files written since the last checkpoint synced them
    /// (rel, fork, segment number).
    pending_syncs: Mutex<std::collections::BTreeSet<(u32, Fork, u32)>>,
}

// SAFETY: frames are only accessed through pins and content locks (or by
// I/O that owns IO_IN_PROGRESS); every other field is Sync.
unsafe impl Sync for BufferPool {}
// SAFETY: as above; the frame memory moves with the pool.
unsafe impl Send for BufferPool {}

impl BufferPool {
    /// Allocates `nbuffers` frames in one aligned allocation and registers
    /// the read completion callbacks with `aio`. The frames are mapped
    /// lazily (see [`AlignedBuf::try_new`]): nothing here writes them, so
    /// start-up costs the same for 16 MB and 4 GB; a size the machine
    /// cannot give is an error naming shared_buffers, not an abort.
    pub fn new(
        aio: Arc<Aio>,
        smgr: Arc<Smgr>,
        config: &PoolConfig,
    ) -> Result<Arc<BufferPool>, BufferError> {
        let nbuffers = config.nbuffers.max(16);
        // First, so that a size too large fails before anything else is
        // built for it.
        let frames = AlignedBuf::try_new(nbuffers as usize * BLOCK_SIZE).map_err(|e| {
            // SAFETY: sysconf has no preconditions.
            let (pages, page_bytes) = unsafe {
                (
                    libc::sysconf(libc::_SC_PHYS_PAGES),
                    libc::sysconf(libc::_SC_PAGESIZE),
                )
            };
            BufferError::PoolAllocation {
                mib: (nbuffers as u64 * BLOCK_SIZE as u64) >> 20,
                nbuffers,
                machine_mib: (pages.max(0) as u64 * page_bytes.max(0) as u64) >> 20,
                reason: e.to_string(),
            }
        })?;
        let descs = (0..nbuffers)
            .map(|_| BufferDesc {
                state: AtomicU64::new(0),
                header: Mutex::new(Header::default()),
                io_done: Condvar::new(),
                content: RawRwLock::INIT,
            })
            .collect();
        let mapping = (0..MAPPING_PARTITIONS)
            .map(|_| RwLock::new(IntMap::default()))
            .collect();
        Ok(Arc::new_cyclic(|weak| {
            let callbacks = Arc::new(read::BufferReadCallbacks {
                pool: weak.clone(),
                id: std::sync::OnceLock::new(),
            });
            let read_callback = aio.register_callbacks(Arc::clone(&callbacks) as _);
            let _ = callbacks.id.set(read_callback);
            let write_callback = aio
                .register_callbacks(Arc::new(write::BufferWriteCallbacks { pool: weak.clone() }));
            BufferPool {
                smgr,
                nbuffers,
                frames,
                descs,
                mapping,
                clock: AtomicU64::new(0),
                relations: RwLock::new(IntMap::default()),
                read_callback,
                write_callback,
                pin_limit: (nbuffers as usize / config.max_sessions.max(1)).max(1),
                stats: PoolStats::default(),
                wal_flush: std::sync::OnceLock::new(),
                pending_syncs: Mutex::new(std::collections::BTreeSet::new()),
                aio,
            }
        }))
    }

    pub fn nbuffers(&self) -> u32 {
        self.nbuffers
    }

    /// Registers the WAL flush hook (once, at start-up). Without one,
    /// pages are written with no WAL rule (tools, benchmarks).
    pub fn register_wal_flush(&self, hook: WalFlushHook) {
        if self.wal_flush.set(hook).is_err() {
            panic!("the WAL flush hook is registered once");
        }
    }

    /// Forgets pending syncs of a relation whose files are gone.
    pub fn forget_written_files(&self, rel: u32) {
        self.pending_syncs.lock().retain(|&(r, _, _)| r != rel);
    }

    /// Blocks per segment file of the relations this pool reads.
    pub fn blocks_per_segment(&self) -> u32 {
        self.smgr.blocks_per_segment()
    }

    /// True if data files are read and written with direct I/O.
    pub fn is_direct(&self) -> bool {
        self.smgr.is_direct()
    }

    /// True if an I/O (a read or a write) of the buffer is in progress.
    pub fn is_io_in_progress(&self, id: BufferId) -> bool {
        self.state(id) & BM_IO_IN_PROGRESS != 0
    }

    /// The buffers dirty now, with their pages (a checkpoint's list).
    pub fn dirty_buffers(&self) -> Vec<(BufferTag, BufferId)> {
        (0..self.nbuffers)
            .filter(|&id| self.state(id) & BM_DIRTY != 0)
            .filter_map(|id| self.tag(id).map(|t| (t, id)))
            .collect()
    }

    /// True if the buffer holds a valid page.
    pub fn is_valid(&self, id: BufferId) -> bool {
        self.state(id) & BM_VALID != 0
    }

    pub fn aio(&self) -> &Arc<Aio> {
        &self.aio
    }

    pub fn stats(&self) -> &PoolStats {
        &self.stats
    }

    /// Most buffers one session may pin at once.
    pub fn pin_limit(&self) -> usize {
        self.pin_limit
    }

    /// A session of the pool: its own AIO slot and pins.
    pub fn session(
        self: &Arc<Self>,
        settings: SessionSettings,
    ) -> Result<BufferSession, BufferError> {
        Ok(BufferSession {
            pool: LocalArc::new(self),
            aio: self.aio.session()?,
            pins: IntMap::default(),
            settings,
            sync_writes: None,
            ring_writes: None,
            write_behind: None,
            counts: ReadCounts::default(),
            claims: Vec::with_capacity(CLAIMS_MAX),
            relations: IntMap::default(),
            spare_returns: Vec::with_capacity(read::SPARE_RETURNS_MAX),
        })
    }

    /// The storage handle of relation `rel`, opened once and shared, and
    /// never let go of (`BufferSession::relations` relies on it).
    pub fn relation(&self, rel: u32) -> Arc<SmgrRelation> {
        if let Some(r) = self.relations.read().get(&rel) {
            return Arc::clone(r);
        }
        Arc::clone(
            self.relations
                .write()
                .entry(rel)
                .or_insert_with(|| Arc::new(self.smgr.relation(rel))),
        )
    }

    pub(crate) fn desc(&self, id: BufferId) -> &BufferDesc {
        &self.descs[id as usize]
    }

    /// The frame of buffer `id`.
    pub(crate) fn frame_ptr(&self, id: BufferId) -> *mut u8 {
        // SAFETY: id < nbuffers, so the offset stays inside the allocation.
        unsafe { (self.frames.as_ptr() as *mut u8).add(id as usize * BLOCK_SIZE) }
    }

    fn partition(tag: &BufferTag) -> usize {
        let h = (tag.rel as u64)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add((tag.block as u64) << 2 | tag.fork as u64)
            .wrapping_mul(0xBF58_476D_1CE4_E5B9);
        (h >> 32) as usize % MAPPING_PARTITIONS
    }

    /// The tag of a buffer (None if it holds nothing).
    pub fn tag(&self, id: BufferId) -> Option<BufferTag> {
        self.desc(id).header.lock().tag
    }

    pub(crate) fn state(&self, id: BufferId) -> u64 {
        self.desc(id).state.load(Ordering::SeqCst)
    }

    /// How many pins buffer `id` has now, every session's (a cleanup
    /// lock waits for its holder's to be the only one).
    pub fn pins(&self, id: BufferId) -> u64 {
        refcount(self.state(id))
    }

    /// How many buffers hold a block of `rel`, and how many of those are
    /// pinned by anyone, now (a look at every descriptor: for DDL).
    pub fn relation_buffers(&self, rel: u32) -> (u32, u32) {
        let (mut held, mut pinned) = (0, 0);
        for id in 0..self.nbuffers {
            if self.tag(id).is_some_and(|t| t.rel == rel) {
                held += 1;
                if refcount(self.state(id)) > 0 {
                    pinned += 1;
                }
            }
        }
        (held, pinned)
    }

    /// Adds a shared pin, counting a use for the clock sweep.
    fn pin_shared(&self, id: BufferId, in_ring: bool) {
        let d = self.desc(id);
        let mut st = d.state.load(Ordering::SeqCst);
        loop {
            let mut next = st + 1;
            // A ring's use counts once (as PostgreSQL's PinBuffer with a
            // strategy): more, and the ring could not reuse the buffer.
            let limit = if in_ring { 1 } else { MAX_USAGE_COUNT };
            if usage(st) < limit {
                next += USAGE_ONE;
            }
            match d
                .state
                .compare_exchange_weak(st, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return,
                Err(now) => st = now,
            }
        }
    }

    /// Drops a shared pin.
    pub(crate) fn unpin_shared(&self, id: BufferId) {
        let prev = self.desc(id).state.fetch_sub(1, Ordering::SeqCst);
        assert!(
            refcount(prev) > 0,
            "buffer {id} unpinned more often than pinned"
        );
    }

    /// The pin the I/O itself holds (taken when staged, dropped when its
    /// shared completion runs), so that a buffer with I/O in flight is
    /// never reused even if its issuer gives up.
    pub(crate) fn pin_for_io(&self, id: BufferId) {
        self.desc(id).state.fetch_add(1, Ordering::SeqCst);
    }

    /// Ends a claimed I/O that was never started: sets `set`, clears
    /// `clear` and IO_IN_PROGRESS, and wakes the waiters.
    fn terminate_claimed_io(&self, id: BufferId, set: u64, clear: u64) {
        let d = self.desc(id);
        let mut header = d.header.lock();
        debug_assert!(
            d.state.load(Ordering::SeqCst) & BM_IO_IN_PROGRESS != 0 && header.wait_ref.is_none(),
            "buffer {id} ended as claimed while it is not, or while its I/O runs"
        );
        header.wait_ref = None;
        d.state.fetch_or(set, Ordering::SeqCst);
        d.state
            .fetch_and(!(clear | BM_IO_IN_PROGRESS), Ordering::SeqCst);
        drop(header);
        d.io_done.notify_all();
    }

    /// One row per buffer that holds a page, for `buffers` listings.
    pub fn contents(&self) -> Vec<BufferRow> {
        (0..self.nbuffers)
            .filter_map(|id| {
                let tag = self.tag(id)?;
                let st = self.state(id);
                Some(BufferRow {
                    buffer: id,
                    tag,
                    valid: st & BM_VALID != 0,
                    dirty: st & BM_DIRTY != 0,
                    io_in_progress: st & BM_IO_IN_PROGRESS != 0,
                    pins: refcount(st) as u32,
                    usage: usage(st) as u32,
                })
            })
            .collect()
    }
}

/// One buffer in a listing of the pool's contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferRow {
    pub buffer: BufferId,
    pub tag: BufferTag,
    pub valid: bool,
    pub dirty: bool,
    pub io_in_progress: bool,
    pub pins: u32,
    pub usage: u32,
}

/// Settings a session reads when it starts an I/O (completion may run in
/// another thread, which cannot read them).
#[derive(Debug, Clone, Copy)]
pub struct SessionSettings {
    pub zero_damaged_pages: bool,
    pub ignore_checksum_failure: bool,
    pub io_combine_limit: usize,
}

impl Default for SessionSettings {
    fn default() -> Self {
        SessionSettings {
            zero_damaged_pages: false,
            ignore_checksum_failure: false,
            io_combine_limit: 16,
        }
    }
}

/// What [`BufferSession::start_buffer_io`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartIo {
    /// We own the buffer's I/O now (IO_IN_PROGRESS is ours).
    Started,
    /// The page is already valid: nothing to do.
    AlreadyValid,
    /// Someone else's I/O is in progress (only with `nowait`); its wait
    /// reference, if already published.
    InProgress(Option<WaitRef>),
}

/// How an I/O started with `start_buffer_io` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferIoOutcome {
    Valid,
    Failed,
    Abandoned,
}

/// How a page's content lock is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    Shared,
    Exclusive,
}

/// A page's content lock, held until the guard is dropped (see
/// [`BufferSession::lock_page`]). Reading the page needs either mode;
/// changing it needs the exclusive one, and marks the buffer dirty.
pub struct PageGuard {
    pool: LocalArc<BufferPool>,
    id: BufferId,
    mode: LockMode,
}

impl PageGuard {
    pub fn buffer(&self) -> BufferId {
        self.id
    }

    pub fn mode(&self) -> LockMode {
        self.mode
    }

    /// The page, for reading.
    pub fn page(&self) -> &PageBytes {
        // SAFETY: the content lock is held (either mode keeps writers
        // out) and the buffer pinned, so the frame keeps its identity.
        unsafe { &*(self.pool.frame_ptr(self.id) as *const PageBytes) }
    }

    /// The page, for changing: the buffer is marked dirty now, which is
    /// as good as after the change since nobody copies it for a write
    /// before the exclusive lock goes.
    pub fn page_mut(&mut self) -> &mut PageBytes {
        assert_eq!(
            self.mode,
            LockMode::Exclusive,
            "buffer {} changed under a shared lock",
            self.id
        );
        self.pool
            .desc(self.id)
            .state
            .fetch_or(BM_DIRTY | BM_JUST_DIRTIED, Ordering::SeqCst);
        // SAFETY: exclusive content lock held and the buffer pinned.
        unsafe { &mut *(self.pool.frame_ptr(self.id) as *mut PageBytes) }
    }
}

impl Drop for PageGuard {
    fn drop(&mut self) {
        let d = self.pool.desc(self.id);
        // SAFETY: taken in `lock_page` in this mode and not given up since.
        unsafe {
            match self.mode {
                LockMode::Shared => d.content.unlock_shared(),
                LockMode::Exclusive => d.content.unlock_exclusive(),
            }
        }
    }
}

/// One session's use of the pool: its AIO session and its pins.
pub struct BufferSession {
    /// The session's own handle: the pool's count is not written by the
    /// session's page locks and reads (`local_arc.rs`).
    pool: LocalArc<BufferPool>,
    pub(crate) aio: AioSession,
    /// Buffers this session pins, with how many times.
    pins: IntMap<BufferId, u32>,
    pub settings: SessionSettings,
    /// The bounce buffer of synchronous writes (`flush_buffers`), made at
    /// the first.
    sync_writes: Option<WriteSlots>,
    /// Writes a strategy ring started of the buffers it reuses next (see
    /// `replace.rs`), made at the first; finished before the session ends.
    ring_writes: Option<WriteSlots>,
    /// Writes this session started ahead of the clock sweep, made when
    /// the sweep first gave it a dirty victim (see `replace.rs`);
    /// finished before the session ends.
    write_behind: Option<WriteBehind>,
    /// Blocks this session asked for, found or read; a plan node that
    /// reads without a stream (an index scan) shows the difference over
    /// its own calls as EXPLAIN's Buffers.
    pub counts: ReadCounts,
    /// Buffers whose I/O this session has claimed (IO_IN_PROGRESS) and
    /// neither handed to an I/O nor ended yet; see [`Claim`].
    claims: Vec<Claim>,
    /// The pool's storage handles this session's reads used, kept as
    /// PostgreSQL's backends keep their smgr entries: a lookup in the
    /// pool takes its lock and a reference, writes to lines every
    /// session's reads share (`local_arc.rs`). The pool never lets go of
    /// a handle, so a kept one is always the pool's.
    relations: IntMap<u32, Arc<SmgrRelation>>,
    /// Result cells of this session's finished reads, used again: a read
    /// made one per I/O, an allocation every page missed paid.
    spare_returns: Vec<crate::aio::IoReturnCell>,
}

/// A buffer's I/O claimed by a session and not yet started: nobody can
/// wait for it (it has no wait reference) and nobody but its claimer can
/// end it. So a claim lasts only from the claim to the start of its I/O
/// (or its end) within one call, and every session keeps a list of its
/// own: checked empty where a call that claims returns, and let go of when
/// the session ends (a panic between a claim and its I/O must not leave
/// the page busy for ever). A write stream's claims lasting across a
/// spread checkpoint's sleeps are how a DROP TABLE came to wait 60 s and
/// fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Claim {
    id: BufferId,
    /// A write's claim, which holds a pin of its own
    /// ([`BufferSession::claim_for_write`]); a read's holds none.
    write: bool,
}

/// Most claims a session holds at once: one I/O's buffers (at most
/// `io_max_combine_limit`, itself at most 128, or a write slot's 128).
const CLAIMS_MAX: usize = 128;

/// Blocks a session's reads found in the pool and blocks they read (or
/// waited for another session's read of), cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadCounts {
    pub hits: u64,
    pub reads: u64,
}

impl ReadCounts {
    /// What was counted since `earlier`.
    pub fn since(self, earlier: ReadCounts) -> ReadCounts {
        ReadCounts {
            hits: self.hits - earlier.hits,
            reads: self.reads - earlier.reads,
        }
    }

    pub fn add(&mut self, other: ReadCounts) {
        self.hits += other.hits;
        self.reads += other.reads;
    }
}

impl BufferSession {
    pub fn pool(&self) -> &LocalArc<BufferPool> {
        &self.pool
    }

    /// [`BufferPool::relation`], through the session's own copy.
    pub fn relation(&mut self, rel: u32) -> &Arc<SmgrRelation> {
        let pool = &self.pool;
        self.relations
            .entry(rel)
            .or_insert_with(|| pool.relation(rel))
    }

    pub fn aio(&mut self) -> &mut AioSession {
        &mut self.aio
    }

    /// Number of distinct buffers this session pins.
    pub fn pinned_count(&self) -> usize {
        self.pins.len()
    }

    /// Buffers whose I/O this session has claimed and not yet started or
    /// ended: 0 between calls (see [`Claim`]).
    pub fn claims_held(&self) -> usize {
        self.claims.len()
    }

    /// Records a claim just taken.
    fn note_claim(&mut self, id: BufferId, write: bool) {
        debug_assert!(
            self.claims.iter().all(|c| c.id != id),
            "buffer {id} claimed twice by one session"
        );
        debug_assert!(
            self.claims.len() < CLAIMS_MAX,
            "more claims than one I/O takes"
        );
        self.claims.push(Claim { id, write });
    }

    /// Forgets the claims of `ids`: their I/O has been started (the I/O
    /// ends them now) or they were ended.
    pub(crate) fn note_claims_gone(&mut self, ids: &[BufferId]) {
        for &id in ids {
            let at = self.claims.iter().position(|c| c.id == id);
            debug_assert!(at.is_some(), "buffer {id} was not claimed by this session");
            if let Some(at) = at {
                self.claims.swap_remove(at);
            }
        }
    }

    /// Pins `id` for this session (one shared pin however often we pin).
    pub(crate) fn pin(&mut self, id: BufferId) -> Result<(), BufferError> {
        self.pin_for(id, false)
    }

    /// Pins `id`, for use through a strategy ring if `in_ring`.
    fn pin_for(&mut self, id: BufferId, in_ring: bool) -> Result<(), BufferError> {
        if let Some(count) = self.pins.get_mut(&id) {
            *count += 1;
            return Ok(());
        }
        if self.pins.len() >= self.pool.pin_limit {
            return Err(BufferError::PinLimit {
                limit: self.pool.pin_limit,
            });
        }
        self.pool.pin_shared(id, in_ring);
        self.pins.insert(id, 1);
        Ok(())
    }

    /// Records a shared pin already taken (a clock sweep victim).
    fn adopt_pin(&mut self, id: BufferId) {
        let previous = self.pins.insert(id, 1);
        debug_assert!(previous.is_none(), "victim {id} was already pinned by us");
    }

    /// Drops one of this session's pins on `id`.
    pub fn release(&mut self, id: BufferId) {
        let count = self
            .pins
            .get_mut(&id)
            .unwrap_or_else(|| panic!("buffer {id} released but not pinned by this session"));
        *count -= 1;
        if *count == 0 {
            self.pins.remove(&id);
            self.pool.unpin_shared(id);
        }
    }

    /// Finds or allocates the buffer for `tag` and pins it. Returns the
    /// buffer and whether it was found in the pool (it may still be invalid
    /// if its read has not finished, or failed).
    pub fn get_buffer(
        &mut self,
        tag: BufferTag,
        mut strategy: Option<&mut Strategy>,
    ) -> Result<(BufferId, bool), BufferError> {
        let pool = self.pool.clone();
        let part = BufferPool::partition(&tag);
        {
            let map = pool.mapping[part].read();
            if let Some(&id) = map.get(&tag) {
                self.pin_for(id, strategy.is_some())?;
                return Ok((id, true));
            }
        }
        if self.pins.len() >= pool.pin_limit {
            return Err(BufferError::PinLimit {
                limit: pool.pin_limit,
            });
        }
        match strategy.as_deref() {
            Some(ring) => self.ring_write_ahead(ring)?,
            None => self.clock_write_ahead()?,
        }
        // Bounded: each retry follows another session changing the victim
        // under us, which needs it to pin a buffer we just found unpinned.
        for _ in 0..pool.nbuffers.max(64) {
            let victim = pool.victim(strategy.as_deref_mut())?;
            self.adopt_pin(victim);
            pool.aio.injections().hit(
                crate::inject::BUFFER_AFTER_VICTIM,
                crate::inject::HitContext {
                    offset: tag.block as u64,
                },
            );
            if pool.state(victim) & BM_DIRTY != 0 {
                if strategy.is_none() && self.write_behind.is_none() {
                    // From now on, write ahead of the sweep (see
                    // `clock_write_ahead`).
                    self.write_behind = Some(WriteBehind::new(WRITE_BEHIND_WRITES_MAX));
                }
                // The ring's next victims, written with this one if they
                // continue its blocks.
                let after = strategy
                    .as_deref()
                    .map_or_else(Vec::new, |s| s.upcoming(WRITE_COMBINE_BLOCKS - 1));
                if let Err(e) = self.flush_buffers(victim, &after) {
                    self.release(victim);
                    return Err(e);
                }
            }
            let old = pool.tag(victim);
            let old_part = old.as_ref().map(BufferPool::partition);
            // Lock the new and old partitions, in index order.
            let (lo, hi) = match old_part {
                Some(o) if o != part => (part.min(o), Some(part.max(o))),
                _ => (part, None),
            };
            let mut guard_lo = pool.mapping[lo].write();
            let mut guard_hi = hi.map(|p| pool.mapping[p].write());
            let existing = if part == lo {
                guard_lo.get(&tag).copied()
            } else {
                guard_hi.as_ref().and_then(|g| g.get(&tag).copied())
            };
            if let Some(existing) = existing {
                // Someone loaded the page meanwhile: use theirs. The victim
                // goes first: at the pin limit its pin would leave no room
                // for theirs. Their pin is taken under the mapping lock, so
                // the page cannot be evicted in between.
                self.release(victim);
                let pinned = self.pin(existing);
                drop((guard_lo, guard_hi));
                pinned?;
                return Ok((existing, true));
            }
            let d = pool.desc(victim);
            let mut header = d.header.lock();
            let st = d.state.load(Ordering::SeqCst);
            if refcount(st) != 1 || st & (BM_DIRTY | BM_IO_IN_PROGRESS) != 0 || header.tag != old {
                // Pinned, dirtied or reassigned by someone else since.
                drop(header);
                drop((guard_lo, guard_hi));
                self.release(victim);
                continue;
            }
            if let (Some(old_tag), Some(o)) = (old, old_part) {
                let map = if o == lo {
                    &mut *guard_lo
                } else {
                    guard_hi.as_deref_mut().expect("locked")
                };
                map.remove(&old_tag);
                pool.stats.evictions.fetch_add(1, Ordering::Relaxed);
            }
            header.tag = Some(tag);
            header.wait_ref = None;
            // Only our pin stays; the page is not valid until read.
            d.state.fetch_and(REFCOUNT_MASK, Ordering::SeqCst);
            d.state.fetch_or(BM_TAG_VALID | USAGE_ONE, Ordering::SeqCst);
            drop(header);
            let map = if part == lo {
                &mut *guard_lo
            } else {
                guard_hi.as_deref_mut().expect("locked")
            };
            map.insert(tag, victim);
            pool.stats.allocs.fetch_add(1, Ordering::Relaxed);
            return Ok((victim, false));
        }
        Err(BufferError::NoUnpinnedBuffers {
            nbuffers: pool.nbuffers,
        })
    }

    /// Tries to take the buffer's I/O (IO_IN_PROGRESS). With `nowait`,
    /// another I/O in progress is returned with its wait reference; without,
    /// we wait for it (submitting our staged I/O first) and look again, so a
    /// failed I/O can be started by us.
    pub fn start_buffer_io(&mut self, id: BufferId, nowait: bool) -> Result<StartIo, BufferError> {
        let pool = self.pool.clone();
        let d = pool.desc(id);
        loop {
            let mut header = d.header.lock();
            let st = d.state.load(Ordering::SeqCst);
            if st & BM_VALID != 0 {
                return Ok(StartIo::AlreadyValid);
            }
            if st & BM_IO_IN_PROGRESS == 0 {
                d.state.fetch_or(BM_IO_IN_PROGRESS, Ordering::SeqCst);
                d.state.fetch_and(!BM_IO_ERROR, Ordering::SeqCst);
                drop(header);
                self.note_claim(id, false);
                return Ok(StartIo::Started);
            }
            let wait_ref = header.wait_ref;
            if nowait {
                return Ok(StartIo::InProgress(wait_ref));
            }
            match wait_ref {
                Some(wref) => {
                    drop(header);
                    self.aio.wait(wref)?;
                    // The completion callback clears IO_IN_PROGRESS.
                }
                None => {
                    // The owner has not published a wait reference yet (it
                    // is between claiming the buffer and staging its I/O).
                    // Submit ours first: it may be waiting for them.
                    drop(header);
                    self.aio.submit_staged();
                    header = d.header.lock();
                    if d.state.load(Ordering::SeqCst) & BM_IO_IN_PROGRESS != 0
                        && header.wait_ref.is_none()
                    {
                        d.io_done
                            .wait_for(&mut header, std::time::Duration::from_millis(10));
                    }
                }
            }
        }
    }

    /// Ends an I/O we claimed and did not start (a page zeroed in place,
    /// or an I/O given up before it was issued), without the AIO callbacks.
    pub(crate) fn terminate_buffer_io(&mut self, id: BufferId, set: u64, clear: u64) {
        self.note_claims_gone(&[id]);
        self.pool.terminate_claimed_io(id, set, clear);
    }

    /// Ends an I/O we started with [`BufferSession::start_buffer_io`] and
    /// performed ourselves: the page is now valid, the I/O failed (waiters
    /// may retry it), or we gave it up before doing anything.
    pub fn end_buffer_io(&mut self, id: BufferId, outcome: BufferIoOutcome) {
        match outcome {
            BufferIoOutcome::Valid => self.terminate_buffer_io(id, BM_VALID, 0),
            BufferIoOutcome::Failed => self.terminate_buffer_io(id, BM_IO_ERROR, 0),
            BufferIoOutcome::Abandoned => self.terminate_buffer_io(id, 0, 0),
        }
    }

    /// Calls `f` with the page under a shared content lock.
    pub fn with_page<R>(&self, id: BufferId, f: impl FnOnce(&PageBytes) -> R) -> R {
        assert!(
            self.pins.contains_key(&id),
            "buffer {id} is not pinned by this session"
        );
        let d = self.pool.desc(id);
        d.content.lock_shared();
        // SAFETY: pinned (so it keeps its identity), and the shared content
        // lock keeps writers out while f runs.
        let page = unsafe { &*(self.pool.frame_ptr(id) as *const PageBytes) };
        let result = f(page);
        // SAFETY: locked just above.
        unsafe { d.content.unlock_shared() };
        result
    }

    /// Calls `f` with the page under an exclusive content lock and marks the
    /// buffer dirty.
    pub fn modify_page<R>(&mut self, id: BufferId, f: impl FnOnce(&mut PageBytes) -> R) -> R {
        assert!(
            self.pins.contains_key(&id),
            "buffer {id} is not pinned by this session"
        );
        let d = self.pool.desc(id);
        d.content.lock_exclusive();
        // SAFETY: pinned, and the exclusive content lock excludes readers
        // and the writer's copy (which takes the lock shared).
        let page = unsafe { &mut *(self.pool.frame_ptr(id) as *mut PageBytes) };
        let result = f(page);
        d.state
            .fetch_or(BM_DIRTY | BM_JUST_DIRTIED, Ordering::SeqCst);
        // SAFETY: locked just above.
        unsafe { d.content.unlock_exclusive() };
        result
    }

    /// Takes the page's content lock and returns a guard that holds it
    /// until dropped: for code that must hold one page's lock while it
    /// takes another's (a B-tree split holds the left half while it
    /// locks the right half, the right sibling and the parent), which the
    /// closures of [`BufferSession::with_page`] and
    /// [`BufferSession::modify_page`] cannot nest. The buffer must stay
    /// pinned by this session until the guard is dropped (a pin keeps its
    /// identity; releasing it first is a bug the guard cannot see).
    pub fn lock_page(&self, id: BufferId, mode: LockMode) -> PageGuard {
        assert!(
            self.pins.contains_key(&id),
            "buffer {id} is not pinned by this session"
        );
        let d = self.pool.desc(id);
        match mode {
            LockMode::Shared => d.content.lock_shared(),
            LockMode::Exclusive => d.content.lock_exclusive(),
        }
        PageGuard {
            pool: self.pool.clone(),
            id,
            mode,
        }
    }

    /// Adds `count` new zeroed blocks to the end of the fork, returning them
    /// pinned, valid and dirty-free (they are written as zeros first, as
    /// PostgreSQL's zero-extend does). With a strategy, their buffers come
    /// from its ring. The caller serialises extension of a relation.
    ///
    /// The new blocks' buffers are in the pool, their I/O claimed, before
    /// the file grows (as PostgreSQL's ExtendBufferedRelShared): from the
    /// moment it grows another session may take a new block as the
    /// relation's last, and it must find our buffer and wait for it. Were
    /// the buffer looked up only after the growth, that session could read
    /// the block, fill it, and have it written back and evicted before our
    /// look-up missed; we would then zero a fresh buffer over its rows.
    pub fn extend(
        &mut self,
        rel: u32,
        fork: Fork,
        count: u32,
        mut strategy: Option<&mut Strategy>,
    ) -> Result<Vec<BufferId>, BufferError> {
        debug_assert!(
            count as usize <= CLAIMS_MAX,
            "an extension of {count} blocks claims more buffers than a session may"
        );
        // The storage layer creates a map fork's first file on extension
        // and refuses to start a main fork again (see `nblocks`).
        let relation = self.pool.relation(rel);
        let first = relation.nblocks(fork)?;
        let mut buffers = Vec::with_capacity(count as usize);
        let mut claimed = Vec::with_capacity(count as usize);
        let mut claim_all = || -> Result<(), BufferError> {
            for block in first..first + count {
                let tag = BufferTag { rel, fork, block };
                let (id, _) = self.get_buffer(tag, strategy.as_deref_mut())?;
                buffers.push(id);
                match self.start_buffer_io(id, false)? {
                    StartIo::Started => claimed.push(id),
                    // A buffer of a block past the end, valid: left by a
                    // truncation that found it pinned. Only an empty page
                    // may be taken over (PostgreSQL's "unexpected data
                    // beyond EOF").
                    StartIo::AlreadyValid => {
                        if self.with_page(id, |p| p.iter().any(|&b| b != 0)) {
                            return Err(BufferError::DataBeyondEnd { tag });
                        }
                    }
                    StartIo::InProgress(_) => unreachable!("start_buffer_io waits without nowait"),
                }
            }
            Ok(())
        };
        let grown = claim_all().and_then(|()| Ok(relation.extend_zeroed(fork, first, count)?));
        if let Err(e) = grown {
            // Nothing was added: the claimed buffers stay invalid, for the
            // next extension (or a read past the end) to claim again.
            for &id in &claimed {
                self.terminate_buffer_io(id, 0, 0);
            }
            for &id in &buffers {
                self.release(id);
            }
            return Err(e);
        }
        self.pool.aio.injections().hit(
            crate::inject::BUFFER_EXTEND_AFTER_GROW,
            crate::inject::HitContext {
                offset: u64::from(first),
            },
        );
        for &id in &claimed {
            // SAFETY: we own the buffer's I/O, so nobody reads the frame.
            unsafe { std::ptr::write_bytes(self.pool.frame_ptr(id), 0, BLOCK_SIZE) };
            self.terminate_buffer_io(id, BM_VALID, 0);
        }
        Ok(buffers)
    }

    /// Block `block` of the fork for WAL replay: pinned and valid, the
    /// file extended with zeros first if it is shorter (a record may
    /// touch a block a crash kept from reaching the file). With `zero`,
    /// the page is not read (replay restores a whole image over it, and
    /// the block on disk may be torn).
    pub fn redo_buffer(
        &mut self,
        rel: u32,
        fork: Fork,
        block: u32,
        zero: bool,
    ) -> Result<BufferId, BufferError> {
        let relation = self.pool.relation(rel);
        let nblocks = relation.nblocks(fork)?;
        if block >= nblocks {
            relation.extend_zeroed(fork, nblocks, block + 1 - nblocks)?;
        }
        if !zero {
            return self.read_buffer(rel, fork, block);
        }
        let (id, _) = self.get_buffer(BufferTag { rel, fork, block }, None)?;
        match self.start_buffer_io(id, false) {
            Ok(StartIo::Started) => {
                // SAFETY: we own the buffer's I/O, so nobody reads the frame.
                unsafe { std::ptr::write_bytes(self.pool.frame_ptr(id), 0, BLOCK_SIZE) };
                self.terminate_buffer_io(id, BM_VALID, 0);
            }
            Ok(_) => {}
            Err(e) => {
                self.release(id);
                return Err(e);
            }
        }
        Ok(id)
    }

    /// Drops every buffer of `rel` from the pool, writing dirty ones back
    /// first. Buffers pinned by anyone are left and counted.
    pub fn evict_relation(&mut self, rel: u32) -> Result<EvictOutcome, BufferError> {
        self.drop_relation_buffers(rel, true)
    }

    /// Drops every buffer of `rel` without writing dirty ones, for a
    /// relation whose files are about to be removed.
    pub fn discard_relation(&mut self, rel: u32) -> Result<EvictOutcome, BufferError> {
        self.drop_relation_buffers(rel, false)
    }

    /// Drops the buffers of `fork` of `rel` from `first_block` on, for
    /// blocks about to be cut off the file (a dirty one written after the
    /// cut would extend the file again). Dirty ones are written first:
    /// buffers pinned by anyone are left and counted as skipped, and then
    /// the caller does not cut, so every page must still be on disk as it
    /// is in memory (dropped unwritten, a pruned page would fall back to
    /// its older self and deleted rows would come back).
    pub fn evict_blocks_from(
        &mut self,
        rel: u32,
        fork: Fork,
        first_block: u32,
    ) -> Result<EvictOutcome, BufferError> {
        self.drop_buffers(
            |t| t.rel == rel && t.fork == fork && t.block >= first_block,
            true,
        )
    }

    fn drop_relation_buffers(
        &mut self,
        rel: u32,
        write_dirty: bool,
    ) -> Result<EvictOutcome, BufferError> {
        self.drop_buffers(|t| t.rel == rel, write_dirty)
    }

    fn drop_buffers(
        &mut self,
        wanted: impl Fn(&BufferTag) -> bool,
        write_dirty: bool,
    ) -> Result<EvictOutcome, BufferError> {
        let mut outcome = EvictOutcome::default();
        let pool = self.pool.clone();
        // Our own writes ahead of a ring or the clock first: one
        // shortened by the kernel waits for us to write its rest.
        self.finish_writes_ahead()?;
        for id in 0..pool.nbuffers {
            match pool.tag(id) {
                Some(tag) if wanted(&tag) => {}
                _ => continue,
            }
            self.pin(id)?;
            // A write in flight (anyone's: a ring's, the background
            // writer's) would land after a cut or a removal; wait for it.
            if let Err(e) = self.wait_buffer_io(id) {
                self.release(id);
                return Err(e);
            }
            if pool.state(id) & BM_DIRTY != 0 && write_dirty {
                if let Err(e) = self.flush_buffer(id) {
                    self.release(id);
                    return Err(e);
                }
            }
            let d = pool.desc(id);
            let tag = pool.tag(id);
            let mut evicted = false;
            if let Some(tag) = tag.filter(|t| wanted(t)) {
                let mut map = pool.mapping[BufferPool::partition(&tag)].write();
                let mut header = d.header.lock();
                let st = d.state.load(Ordering::SeqCst);
                let dirty = if write_dirty { BM_DIRTY } else { 0 };
                if refcount(st) == 1
                    && st & (dirty | BM_IO_IN_PROGRESS) == 0
                    && header.tag == Some(tag)
                {
                    map.remove(&tag);
                    header.tag = None;
                    d.state.fetch_and(REFCOUNT_MASK, Ordering::SeqCst);
                    evicted = true;
                }
            }
            self.release(id);
            if evicted {
                outcome.evicted += 1;
            } else {
                outcome.skipped += 1;
            }
        }
        Ok(outcome)
    }
}

impl Drop for BufferSession {
    fn drop(&mut self) {
        if let Err(e) = self.finish_writes_ahead() {
            log::warn!("a write a session started ahead of need failed: {e}");
        }
        // Nobody else could ever end these (see `Claim`): a read's waiters
        // read the page themselves, a write's page stays dirty.
        if !self.claims.is_empty() {
            log::error!(
                "session ended holding {} buffer I/Os claimed and not started; ending them",
                self.claims.len()
            );
        }
        for claim in std::mem::take(&mut self.claims) {
            self.pool.terminate_claimed_io(claim.id, 0, 0);
            if claim.write {
                self.pool.unpin_shared(claim.id);
            }
        }
        // Pins a session forgot would keep buffers from ever being reused.
        if !self.pins.is_empty() {
            log::warn!(
                "session ended holding {} buffer pins; releasing them",
                self.pins.len()
            );
        }
        for (id, _) in self.pins.drain() {
            self.pool.unpin_shared(id);
        }
    }
}

/// Data file syncs a checkpoint keeps in flight at once (PostgreSQL syncs
/// one file at a time; a device with a deep queue does several as fast as
/// one).
pub const SYNCS_IN_FLIGHT_MAX: usize = 8;

impl BufferSession {
    /// Makes every segment file written since the last call durable (a
    /// checkpoint's sync phase): one fdatasync per segment however often it
    /// was written (sessions never sync data files; their writes only note
    /// the segment), up to `in_flight` (1..=[`SYNCS_IN_FLIGHT_MAX`]) at once
    /// through AIO. Returns the number synced. A file that fails to sync is
    /// returned as an error and the caller must not believe anything
    /// written to it since the last sync is on disk (the kernel may have
    /// dropped it); the segments not known to be synced are noted again.
    pub fn sync_written_files(&mut self, in_flight: usize) -> Result<usize, BufferError> {
        let pool = self.pool.clone();
        let pending: Vec<(u32, Fork, u32)> = std::mem::take(&mut *pool.pending_syncs.lock())
            .into_iter()
            .collect();
        let in_flight = in_flight.clamp(1, SYNCS_IN_FLIGHT_MAX);
        let mut queue: std::collections::VecDeque<(usize, WaitRef, crate::aio::IoReturnCell)> =
            std::collections::VecDeque::with_capacity(in_flight);
        let mut synced = 0;
        let mut result = Ok(());
        let mut next = 0;
        // Each pass starts one sync or finishes one, so it ends after twice
        // as many passes as there are segments.
        while result.is_ok() && (next < pending.len() || !queue.is_empty()) {
            if next < pending.len() && queue.len() < in_flight {
                let (rel, fork, segno) = pending[next];
                match self.start_segment_sync(rel, fork, segno) {
                    Ok(Some((wref, ret))) => queue.push_back((next, wref, ret)),
                    Ok(None) => {}
                    Err(e) => result = Err(e),
                }
                next += 1;
                continue;
            }
            let (i, wref, ret) = queue.pop_front().expect("a sync in flight");
            result = self.finish_segment_sync(wref, &ret, pending[i]);
            if result.is_ok() {
                synced += 1;
            }
        }
        if result.is_err() {
            // Waited for even after a failure: the handles must come back.
            for (_, wref, _) in queue.drain(..) {
                let _ = self.aio.wait(wref);
            }
            pool.pending_syncs.lock().extend(pending);
        }
        result.map(|()| synced)
    }

    /// Starts the sync of segment `segno` of `fork` of `rel`; None if the
    /// relation was dropped since it was written.
    fn start_segment_sync(
        &mut self,
        rel: u32,
        fork: Fork,
        segno: u32,
    ) -> Result<Option<(WaitRef, crate::aio::IoReturnCell)>, BufferError> {
        let relation = self.pool.relation(rel);
        if let Some(errno) = self
            .pool
            .aio
            .injections()
            .injected_errno(crate::inject::BUFFER_BEFORE_FILE_SYNC, u64::from(rel))
        {
            return Err(StorageError::Io {
                op: "fsync",
                path: relation.path(fork),
                source: crate::storage::errno_error(errno),
            }
            .into());
        }
        let file = match relation.open_segment(fork, segno) {
            Ok(file) => file,
            // A DROP TABLE removed the files after the write (perhaps after
            // the list was taken, so `forget_written_files` did not reach
            // it): nothing is left to sync. It unlinks the main fork first,
            // so a relation whose main fork is there was not dropped, and
            // a missing file of it is an error.
            Err(e) if e.is_not_found() && !relation.exists(Fork::Main) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let token = self.aio.acquire()?;
        let ret = crate::aio::IoReturnCell::default();
        let wref = self.aio.wait_ref(&token);
        if let Err(e) = self.aio.set_return(&token, &ret) {
            let _ = self.aio.release(token);
            return Err(e.into());
        }
        self.aio.start_fsync(token, &file)?;
        Ok(Some((wref, ret)))
    }

    fn finish_segment_sync(
        &mut self,
        wref: WaitRef,
        ret: &crate::aio::IoReturnCell,
        (rel, fork, segno): (u32, Fork, u32),
    ) -> Result<(), BufferError> {
        self.aio.wait(wref)?;
        let ret = ret.take().expect("our own sync is collected by wait");
        self.pool
            .aio
            .check(&ret)
            .map(drop)
            .map_err(|source| BufferError::Sync {
                segno,
                path: self.pool.relation(rel).path(fork),
                source,
            })
    }
}

/// What [`BufferSession::evict_relation`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct EvictOutcome {
    pub evicted: u32,
    /// Pinned (by another session) or busy with I/O, so left in the pool.
    pub skipped: u32,
}
