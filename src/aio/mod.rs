//! Asynchronous I/O: handles, wait references, staging and batches, three
//! execution methods, completion callbacks and compact results.
//!
//! This is the design of PostgreSQL's AIO subsystem (src/backend/storage/
//! aio/README.md), for threads in one process instead of processes.
//!
//! # Who may do what
//!
//! Handles are preallocated at start-up: `io_max_concurrency` per session
//! slot, each with room for `io_max_combine_limit` iovecs and as many words
//! of handle data. A handle belongs to one slot for ever. Only the slot's
//! session acquires it, defines it and runs its local callbacks; *any*
//! thread may execute it, complete it (run its shared callbacks) and wait
//! for it. That is what lets a session read a block whose I/O another
//! session started, without either waiting on the other's progress.
//!
//! ```text
//! Idle → HandedOut → Defined → Staged → Submitted → CompletedIo
//!      → CompletedShared → CompletedLocal → Idle (generation + 1)
//! ```
//!
//! `IoState::can_move_to` is the one place that lists the transitions; every
//! change goes through `Handle::set_state`, which asserts it.
//!
//! # Waiting
//!
//! A [`WaitRef`] is (handle index, generation). Because the generation is
//! incremented before a handle goes back to Idle, a wait reference whose
//! generation has moved on means "done" and costs nothing to check. A
//! submitted io_uring I/O is waited for by reaping the owner's ring under its
//! completion lock, running the shared callbacks of whatever completes; a
//! worker or synchronous I/O is waited for on the handle's condition
//! variable, since its executor completes it.
//!
//! # Staging and the deadlock rule
//!
//! Starting an I/O defines and stages it. Outside batch mode it is submitted
//! at once; inside it waits for the batch to end, for 32 to be staged, or
//! for any wait. Never block on something another session may hold while
//! you have staged, unsubmitted I/O: it may be the very I/O they wait for.
//! [`AioSession::wait`] therefore submits first.
//!
//! # Example
//!
//! ```no_run
//! # use aiostore::aio::*; use aiostore::storage::*; use std::sync::Arc;
//! # fn demo(aio: &Arc<Aio>, file: &Arc<SegmentFile>) -> Result<(), AioError> {
//! let mut session = aio.session()?;
//! let mut buf = AlignedBuf::new(2 * BLOCK_SIZE);
//! let handle = session.acquire()?;
//! let wref = session.wait_ref(&handle);
//! let ret = IoReturnCell::default();
//! session.set_return(&handle, &ret)?;
//! // SAFETY: buf outlives the I/O: we wait for it below.
//! unsafe { session.start_readv(handle, file, 0, &[IoVec::new(buf.as_mut_ptr(), buf.len())])? };
//! session.wait(wref)?;
//! let outcome = ret.take().expect("collected");
//! aio.check(&outcome)?;
//! # Ok(()) }
//! ```

mod blocks;
mod callbacks;
mod handle;
mod method;
mod result;
mod session;

pub use blocks::{blocks_transferred, read_blocks, write_blocks, BlockReader};
pub use callbacks::{
    errno_text, CallbackId, IoCallbacks, IoView, CB_BLOCK_READV, CB_BLOCK_WRITEV, MAX_CALLBACK_IDS,
};
pub use handle::{IoState, IoVec, WaitRef, MAX_CALLBACKS_PER_HANDLE};
pub use result::{AioError, AioWarning, IoResult, IoReturn, IoStatus};
pub use session::{AioSession, HandleToken, IoReturnCell, MAX_STAGED};

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::config::{IoMethod, Settings};
use crate::inject::{HitContext, InjectionPoints, BEFORE_COMPLETE_SHARED, WORKER_AFTER_REOPEN};
use crate::stats::{CompletedIo, InflightIo, IoOp, IoStats};
use callbacks::CallbackTable;
use handle::Handle;
use method::uring::UringRing;
use method::worker::WorkerQueue;

/// Largest number of iovecs in one I/O (the top of io_max_combine_limit).
pub const MAX_IOVECS: usize = 128;

/// Most memory the preallocated handles may take: settings that would need
/// more are refused at start-up rather than ending in an allocation abort.
pub const MAX_HANDLE_MEMORY_BYTES: usize = 1 << 30;

/// Start-up parameters of the AIO subsystem.
#[derive(Debug, Clone)]
pub struct AioConfig {
    pub method: IoMethod,
    pub io_workers: usize,
    pub max_sessions: usize,
    /// Handles per session slot.
    pub io_max_concurrency: usize,
    pub io_max_combine_limit: usize,
    pub debug_io_latency_us: u64,
}

impl AioConfig {
    pub fn from_settings(settings: &Settings) -> AioConfig {
        AioConfig {
            method: settings.io_method(),
            io_workers: settings.io_workers(),
            max_sessions: settings.max_sessions(),
            io_max_concurrency: settings.io_max_concurrency(),
            io_max_combine_limit: settings.io_max_combine_limit(),
            debug_io_latency_us: settings.debug_io_latency_us(),
        }
    }
}

impl Default for AioConfig {
    fn default() -> Self {
        AioConfig::from_settings(&Settings::default())
    }
}

/// Per-slot state shared between threads.
pub(crate) struct Slot {
    in_use: AtomicBool,
    /// Handles still in flight when the slot's last session ended; the next
    /// session of the slot collects them.
    orphans: Mutex<Vec<u32>>,
}

/// The parts of the subsystem that I/O workers share with sessions.
pub(crate) struct AioShared {
    config: AioConfig,
    method: IoMethod,
    handles: Box<[Handle]>,
    slots: Box<[Slot]>,
    callbacks: CallbackTable,
    stats: IoStats,
    injections: InjectionPoints,
    worker_queue: Option<WorkerQueue>,
    rings: Box<[UringRing]>,
    /// Why io_uring was asked for and worker is in use instead.
    fallback_reason: Option<String>,
}

/// Test hook: when this environment variable holds an errno (e.g. `1` for
/// EPERM), setting up io_uring fails as if the kernel had returned it, so
/// that tests can check the fallback on a machine where io_uring works.
/// Read only at start-up; the settings loader skips it.
pub const IO_URING_SETUP_ERRNO_ENV: &str = "AIOSTORE_TEST_IO_URING_SETUP_ERRNO";

/// Creates `slots` rings of `entries` entries, unless the test hook
/// [`IO_URING_SETUP_ERRNO_ENV`] makes the set-up fail with its errno: the
/// one place both [`Aio::start`] and [`probe_io_uring`] set io_uring up, so
/// that the probe says what a start would do.
fn create_rings_or_forced_failure(
    slots: usize,
    entries: usize,
) -> Result<Vec<UringRing>, method::uring::SetupFailure> {
    let forced = std::env::var(IO_URING_SETUP_ERRNO_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<i32>().ok());
    match forced {
        Some(errno) => Err(method::uring::classify_setup_error(
            &std::io::Error::from_raw_os_error(errno),
        )),
        None => method::uring::create_rings(slots, entries),
    }
}

/// Why io_uring cannot be used here, if it cannot: creates one ring of one
/// entry (no handles, no workers, no log line) and drops it. Callers that
/// choose among methods (the benchmarks, the demo, `aiostore settings`) ask
/// this once instead of starting a whole [`Aio`] per method. A failure that
/// would stop [`Aio::start`] (rather than make it fall back) is returned as
/// a reason too: for a chooser, io_uring is unusable either way.
pub fn probe_io_uring() -> Option<String> {
    match create_rings_or_forced_failure(1, 1) {
        Ok(_rings) => None,
        Err(method::uring::SetupFailure::FallBack(reason)) => Some(reason),
        Err(method::uring::SetupFailure::Fatal(message)) => {
            Some(format!("could not create an io_uring instance: {message}"))
        }
    }
}

/// The AIO subsystem of one database: handles, slots, methods and workers.
pub struct Aio {
    shared: Arc<AioShared>,
    workers: Vec<JoinHandle<()>>,
}

impl Aio {
    /// Preallocates every handle and, per method, starts the I/O workers or
    /// creates one io_uring per session slot. When io_uring cannot be set up
    /// for a reason the administrator cannot fix by raising a limit, says
    /// so once and falls back to `worker`.
    pub fn start(config: &AioConfig) -> Result<Arc<Aio>, AioError> {
        let per_slot = config.io_max_concurrency.max(1);
        let iovecs = config.io_max_combine_limit.clamp(1, MAX_IOVECS);
        let mut method = config.method;
        let mut rings = Vec::new();
        let handle_count = config.max_sessions * per_slot;
        let handle_bytes = handle_count * (iovecs * (std::mem::size_of::<IoVec>() + 8) + 512);
        if handle_bytes > MAX_HANDLE_MEMORY_BYTES {
            return Err(AioError::Setup(format!(
                "max_sessions ({}) × io_max_concurrency ({per_slot}) = {handle_count} I/O handles would preallocate {} MiB; lower max_sessions or io_max_concurrency",
                config.max_sessions,
                handle_bytes >> 20
            )));
        }
        let mut fallback_reason = None;
        if method == IoMethod::IoUring {
            match create_rings_or_forced_failure(config.max_sessions, per_slot) {
                Ok(r) => rings = r,
                Err(failure) => match failure {
                    method::uring::SetupFailure::FallBack(reason) => {
                        log::warn!(
                            "io_uring is not available: {reason}; using io_method=worker instead (set io_method=worker to choose it explicitly)"
                        );
                        method = IoMethod::Worker;
                        fallback_reason = Some(reason);
                    }
                    method::uring::SetupFailure::Fatal(message) => {
                        return Err(AioError::Setup(format!(
                            "could not create {} io_uring instances of {} entries: {message}",
                            config.max_sessions, per_slot
                        )))
                    }
                },
            }
        }
        let handles = (0..config.max_sessions * per_slot)
            .map(|i| Handle::new(i as u32, (i / per_slot) as u32, iovecs))
            .collect();
        let slots = (0..config.max_sessions)
            .map(|_| Slot {
                in_use: AtomicBool::new(false),
                orphans: Mutex::new(Vec::new()),
            })
            .collect();
        let shared = Arc::new(AioShared {
            config: AioConfig {
                io_max_concurrency: per_slot,
                io_max_combine_limit: iovecs,
                ..config.clone()
            },
            method,
            handles,
            slots,
            callbacks: CallbackTable::new(),
            stats: IoStats::default(),
            injections: InjectionPoints::default(),
            worker_queue: (method == IoMethod::Worker).then(WorkerQueue::new),
            rings: rings.into_boxed_slice(),
            fallback_reason,
        });
        let workers = if method == IoMethod::Worker {
            method::worker::start_workers(&shared, config.io_workers.max(1))?
        } else {
            Vec::new()
        };
        Ok(Arc::new(Aio { shared, workers }))
    }

    /// The method in effect (after any fallback).
    pub fn method(&self) -> IoMethod {
        self.shared.method
    }

    /// Why io_uring was asked for but `worker` is in use, if it was.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.shared.fallback_reason.as_deref()
    }

    pub fn config(&self) -> &AioConfig {
        &self.shared.config
    }

    /// Claims a free session slot.
    pub fn session(self: &Arc<Self>) -> Result<AioSession, AioError> {
        AioSession::new(Arc::clone(self))
    }

    /// Registers a kind of completion callbacks; call at start-up.
    pub fn register_callbacks(&self, callbacks: Arc<dyn IoCallbacks>) -> CallbackId {
        self.shared.callbacks.register(callbacks)
    }

    /// Waits, from any thread, until the I/O `wref` refers to has completed
    /// (its shared callbacks have run). A thread that has staged I/O of its
    /// own must submit it first; [`AioSession::wait`] does.
    pub fn wait(&self, wref: WaitRef) {
        self.shared.wait_for(wref);
    }

    /// [`Aio::wait`], giving up after `limit`; returns whether the I/O has
    /// completed (a device that stops answering must not hang a caller
    /// that can report it).
    pub fn wait_at_most(&self, wref: WaitRef, limit: Duration) -> bool {
        self.shared.wait_until(wref, Some(Instant::now() + limit))
    }

    /// True if the I/O has completed, without waiting. An io_uring
    /// completion still in its ring's queue counts: it is reaped here
    /// (shared memory, no system call) unless another thread is reaping,
    /// so that a caller looking does not depend on a waiter being
    /// scheduled to notice it (a WAL flush collecting writes another
    /// session started).
    pub fn is_done(&self, wref: WaitRef) -> bool {
        let h = &self.shared.handles[wref.index as usize];
        match h.state_of(wref.generation) {
            None => true,
            Some(state) if state.is_complete() => true,
            Some(IoState::Submitted) if self.shared.method == IoMethod::IoUring => {
                self.shared.rings[h.slot as usize].reap_unless_reaping(&self.shared);
                h.state_of(wref.generation).is_none_or(IoState::is_complete)
            }
            Some(_) => false,
        }
    }

    /// The state of the use `wref` refers to (`None` once recycled).
    pub fn state(&self, wref: WaitRef) -> Option<IoState> {
        self.shared.handles[wref.index as usize].state_of(wref.generation)
    }

    /// Turns a collected result into `Ok(None)`, a warning, or an error
    /// whose message the callback that set the result wrote.
    pub fn check(&self, ret: &IoReturn) -> Result<Option<String>, AioError> {
        self.shared.check(ret)
    }

    pub fn stats(&self) -> &IoStats {
        &self.shared.stats
    }

    pub fn injections(&self) -> &InjectionPoints {
        &self.shared.injections
    }

    /// One row per handle that is not idle, copied without stopping the I/O
    /// path: each handle is copied under a `try_lock` and dropped from the
    /// view if its generation moved on meanwhile.
    pub fn inflight(&self) -> Vec<InflightIo> {
        let mut rows = Vec::new();
        for h in self.shared.handles.iter() {
            let generation = h.generation();
            let state = h.state();
            if state == IoState::Idle {
                continue;
            }
            let Some(inner) = h.inner.try_lock_for(Duration::from_micros(100)) else {
                continue;
            };
            let row = InflightIo {
                session: h.slot,
                handle: h.index,
                generation,
                state: state.name(),
                op: inner.op.map_or("none", IoOp::name),
                offset: inner.offset,
                length: inner.len_bytes() as u64,
                target: inner
                    .file
                    .as_ref()
                    .map_or_else(String::new, |f| f.describe(inner.offset, inner.len_bytes())),
                result: inner.raw,
                flags: match &inner.file {
                    _ if inner.by_issuer => "sync".to_string(),
                    Some(f) if f.is_direct() => "direct".to_string(),
                    Some(_) => "buffered".to_string(),
                    None => String::new(),
                },
            };
            drop(inner);
            if h.generation() == generation {
                rows.push(row);
            }
        }
        rows
    }
}

impl Drop for Aio {
    fn drop(&mut self) {
        // No session is left (each holds an Arc), but orphaned I/O may still
        // be in flight: finish it before its memory or ring goes away.
        for h in self.shared.handles.iter() {
            if matches!(h.state(), IoState::Submitted | IoState::CompletedIo) {
                self.shared.wait_for(h.wait_ref());
            }
        }
        if let Some(queue) = &self.shared.worker_queue {
            queue.shut_down();
        }
        for worker in self.workers.drain(..) {
            if worker.join().is_err() {
                log::error!("an I/O worker panicked");
            }
        }
    }
}

impl AioShared {
    fn slot_handles(&self, slot: u32) -> std::ops::Range<u32> {
        let per = self.config.io_max_concurrency as u32;
        slot * per..(slot + 1) * per
    }

    /// Executes a submitted I/O in this thread and completes it.
    fn execute(&self, index: u32, by_issuer: bool) {
        let h = &self.handles[index as usize];
        debug_assert_eq!(h.state(), IoState::Submitted);
        let mut iov = [IoVec::new(std::ptr::null_mut(), 0); MAX_IOVECS];
        let (file, offset, op, n) = {
            let mut inner = h.inner.lock();
            inner.by_issuer = by_issuer;
            let n = inner.iov.len();
            iov[..n].copy_from_slice(&inner.iov);
            let file = Arc::clone(inner.file.as_ref().expect("submitted I/O has a file"));
            (
                file,
                inner.offset,
                inner.op.expect("submitted I/O has an op"),
                n,
            )
        };
        let injected = if self.method == IoMethod::Worker && !by_issuer {
            self.injections
                .hit(WORKER_AFTER_REOPEN, HitContext { offset })
                .filter(|&raw| raw < 0)
        } else {
            None
        };
        let raw = match injected {
            Some(raw) => raw,
            None => {
                if self.config.debug_io_latency_us > 0 {
                    std::thread::sleep(Duration::from_micros(self.config.debug_io_latency_us));
                }
                // SAFETY: IoVec is repr(transparent) over libc::iovec, and
                // the first n entries were initialised above.
                let raw_iov: &[libc::iovec] =
                    unsafe { std::slice::from_raw_parts(iov.as_ptr().cast(), n) };
                // SAFETY: the issuer promised, when it started the I/O, that
                // the memory stays valid and untouched until completion.
                unsafe {
                    match op {
                        IoOp::Read => file.preadv(offset, raw_iov),
                        IoOp::Write => file.pwritev(offset, raw_iov),
                        IoOp::Fsync => file.fdatasync_raw(),
                    }
                }
            }
        };
        // Our reference must be gone before waiters wake: the last I/O on a
        // closed file is what closes it.
        drop(file);
        self.complete(index, raw);
    }

    /// Records the raw result, runs the shared callbacks (innermost first)
    /// and wakes waiters. Runs in whichever thread completes the I/O.
    fn complete(&self, index: u32, raw: i64) {
        let h = &self.handles[index as usize];
        let raw = if self.injections_active() {
            let offset = h.inner.lock().offset;
            self.injections
                .hit(BEFORE_COMPLETE_SHARED, HitContext { offset })
                .unwrap_or(raw)
        } else {
            raw
        };
        let mut inner = h.inner.lock();
        inner.raw = Some(raw);
        h.set_state(IoState::CompletedIo);
        let op = inner.op.expect("completed I/O has an op");
        let file = Arc::clone(inner.file.as_ref().expect("completed I/O has a file"));
        let view = IoView {
            wait_ref: WaitRef {
                index,
                generation: h.generation(),
            },
            op,
            file: &file,
            offset: inner.offset,
            iov: &inner.iov,
            data: &inner.data,
            raw: Some(raw),
        };
        let mut result = IoResult::from_raw(raw);
        for &(id, data) in inner.callbacks[..inner.callback_count].iter().rev() {
            if let Some(cb) = self.callbacks.get(id) {
                result = cb.complete_shared(&view, result, data);
            }
        }
        inner.result = result;
        let latency = inner.submitted_at.map_or(Duration::ZERO, |t| t.elapsed());
        self.stats.record(CompletedIo {
            method: self.method,
            op,
            raw,
            partial: result.status == IoStatus::Partial,
            by_issuer: inner.by_issuer,
            latency,
        });
        if result.status == IoStatus::Error {
            // The completing thread may not be the issuer and cannot raise
            // the error; log it now so that it is seen even if the issuer
            // never looks.
            let ret = IoReturn {
                result,
                op,
                file: Arc::clone(&file),
                offset: inner.offset,
                len: inner.len_bytes(),
                raw,
            };
            log::warn!("{}", self.message(&ret));
        }
        drop(inner);
        drop(file);
        h.set_state(IoState::CompletedShared);
    }

    fn injections_active(&self) -> bool {
        self.injections.any_attached()
    }

    fn message(&self, ret: &IoReturn) -> String {
        if ret.op == IoOp::Fsync {
            return match ret.result.status {
                IoStatus::Error => format!(
                    "could not fsync {}: {}",
                    ret.file.ident(),
                    errno_text(ret.result.error_data as i32)
                ),
                _ => format!("fsync {}", ret.file.ident()),
            };
        }
        match self.callbacks.get(ret.result.id) {
            Some(cb) if ret.result.id != 0 => cb.report(ret),
            _ => {
                let verb = ret.op.name();
                if ret.result.status == IoStatus::Error {
                    format!(
                        "could not {verb} {}: {}",
                        ret.target(),
                        errno_text(ret.result.error_data as i32)
                    )
                } else {
                    format!("{verb} {}: {} bytes", ret.target(), ret.result.result)
                }
            }
        }
    }

    fn check(&self, ret: &IoReturn) -> Result<Option<String>, AioError> {
        match ret.result.status {
            IoStatus::Ok => Ok(None),
            IoStatus::Warning => Ok(Some(self.message(ret))),
            IoStatus::Partial | IoStatus::Error | IoStatus::Unknown => Err(AioError::Io {
                message: self.message(ret),
                errno: (ret.result.status == IoStatus::Error
                    && ret.result.error_data != 0
                    && ret.raw < 0)
                    .then_some(ret.result.error_data as i32),
            }),
        }
    }

    /// [`AioShared::wait_for`], giving up at `deadline` (if any); returns
    /// whether the I/O has completed.
    fn wait_until(&self, wref: WaitRef, deadline: Option<Instant>) -> bool {
        let h = &self.handles[wref.index as usize];
        loop {
            let state = match h.state_of(wref.generation) {
                None => return true,
                Some(state) if state.is_complete() => return true,
                Some(state) => state,
            };
            let left = match deadline {
                None => None,
                Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return false,
                },
            };
            if state == IoState::Submitted && self.method == IoMethod::IoUring {
                self.rings[h.slot as usize].wait_until(self, h, wref.generation, deadline);
            } else {
                match left {
                    None => h.wait_while(wref.generation, state),
                    Some(left) => h.wait_while_for(wref.generation, state, left),
                }
            }
        }
    }

    /// Waits until `wref`'s I/O has completed. Never submits: the caller
    /// must not hold staged I/O (see the deadlock rule above).
    fn wait_for(&self, wref: WaitRef) {
        let completed = self.wait_until(wref, None);
        debug_assert!(completed, "a wait without a deadline ends completed");
    }

    /// Hands staged I/Os to the method. Returns when each has been queued,
    /// pushed to the ring, or (sync method, full worker queue) executed.
    fn submit(&self, slot: u32, staged: &[u32]) {
        let now = Instant::now();
        let mut synchronous = 0;
        for &index in staged {
            let h = &self.handles[index as usize];
            let mut inner = h.inner.lock();
            inner.submitted_at = Some(now);
            synchronous += usize::from(inner.synchronous);
            drop(inner);
            h.set_state(IoState::Submitted);
        }
        if synchronous > 0 {
            // Those the issuer runs itself run now, in order; the rest go
            // to the method (a mix is rare: such an I/O is started alone).
            let mut rest = Vec::new();
            for &index in staged {
                if self.handles[index as usize].inner.lock().synchronous {
                    self.execute(index, true);
                } else {
                    rest.push(index);
                }
            }
            if !rest.is_empty() {
                self.submit_to_method(slot, &rest);
            }
            return;
        }
        self.submit_to_method(slot, staged);
    }

    /// [`Shared::submit`]'s handing of submitted I/Os to the method.
    fn submit_to_method(&self, slot: u32, staged: &[u32]) {
        match self.method {
            IoMethod::Sync => {
                for &index in staged {
                    self.execute(index, true);
                }
            }
            IoMethod::Worker => {
                let queue = self
                    .worker_queue
                    .as_ref()
                    .expect("worker method has a queue");
                let queued = queue.try_submit(staged);
                for &index in &staged[queued..] {
                    self.execute(index, true);
                }
            }
            IoMethod::IoUring => self.rings[slot as usize].submit(self, staged),
        }
    }
}
