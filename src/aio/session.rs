//! A session's view of the AIO subsystem: its slot, its idle, staged and
//! in-flight handles, and batch mode.
//!
//! Everything here is owned by one thread; only the handles themselves are
//! shared. Lists are preallocated at the slot's size, so acquiring and
//! submitting allocate nothing.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;

use super::callbacks::{CallbackId, IoView, CB_BLOCK_READV, CB_BLOCK_WRITEV};
use super::handle::{IoState, IoVec, WaitRef, MAX_CALLBACKS_PER_HANDLE};
use super::result::{AioError, AioWarning, IoReturn};
use super::{Aio, AioShared};
use crate::config::IoMethod;
use crate::stats::IoOp;
use crate::storage::{is_io_aligned, SegmentFile, StorageError, BLOCK_SIZE};

/// Most I/Os staged before a batch is submitted by itself: one system call
/// submits them all, and neighbours still have a chance to be combined.
pub const MAX_STAGED: usize = 32;

/// Where the owner collects an I/O's result. The handle may be recycled
/// long before the issuer looks (to make room for other I/O), so the result
/// is copied here when the owner collects the handle.
#[derive(Debug, Default, Clone)]
pub struct IoReturnCell(Arc<Mutex<Option<IoReturn>>>);

impl IoReturnCell {
    /// The result, once the owner has collected the I/O.
    pub fn take(&self) -> Option<IoReturn> {
        self.0.lock().take()
    }

    /// Whether the cell can be given to another I/O: nobody else holds it
    /// (no handle will write to it, no caller will read it) and it is
    /// empty.
    pub fn is_free(&self) -> bool {
        Arc::strong_count(&self.0) == 1 && self.0.lock().is_none()
    }
}

/// A handle acquired and not yet started. Give it to a `start_*` function
/// or back with [`AioSession::release`]; dropping it leaks the handle until
/// the session notices (and warns) at the end of the operation.
#[must_use = "start the I/O or release the handle"]
#[derive(Debug)]
pub struct HandleToken {
    slot: u32,
    index: u32,
    generation: u64,
}

/// One session's AIO state.
pub struct AioSession {
    aio: Arc<Aio>,
    slot: u32,
    idle: Vec<u32>,
    handed_out: Option<u32>,
    staged: Vec<u32>,
    in_flight: VecDeque<u32>,
    batch_mode: bool,
}

impl AioSession {
    pub(super) fn new(aio: Arc<Aio>) -> Result<AioSession, AioError> {
        let shared = &aio.shared;
        // Prefer a free slot whose last session left I/O behind, so that
        // its handles (and the files they hold open) are collected soon.
        let claim = |slot: &super::Slot| {
            slot.in_use
                .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        };
        let slot = shared
            .slots
            .iter()
            .position(|s| !s.orphans.lock().is_empty() && claim(s))
            .or_else(|| shared.slots.iter().position(claim))
            .ok_or(AioError::NoFreeSession {
                max_sessions: shared.config.max_sessions,
            })? as u32;
        let per_slot = shared.config.io_max_concurrency;
        let mut in_flight = VecDeque::with_capacity(per_slot);
        in_flight.extend(shared.slots[slot as usize].orphans.lock().drain(..));
        let idle = shared
            .slot_handles(slot)
            .filter(|i| shared.handles[*i as usize].state() == IoState::Idle)
            .collect();
        Ok(AioSession {
            aio,
            slot,
            idle,
            handed_out: None,
            staged: Vec::with_capacity(MAX_STAGED),
            in_flight,
            batch_mode: false,
        })
    }

    fn shared(&self) -> &AioShared {
        &self.aio.shared
    }

    pub fn aio(&self) -> &Arc<Aio> {
        &self.aio
    }

    /// This session's slot number.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// Acquires a handle, waiting if all are busy: first collect completed
    /// ones, then submit staged I/O, then wait for the oldest in flight.
    /// Holding a handed-out handle already is an error, which is what makes
    /// this wait always able to make progress.
    pub fn acquire(&mut self) -> Result<HandleToken, AioError> {
        if self.handed_out.is_some() {
            return Err(AioError::HandleAlreadyHandedOut);
        }
        loop {
            if let Some(token) = self.take_idle() {
                return Ok(token);
            }
            self.collect_completed();
            if !self.idle.is_empty() {
                continue;
            }
            if !self.staged.is_empty() {
                self.submit_staged();
                continue;
            }
            let oldest = *self
                .in_flight
                .front()
                .expect("a slot with no idle, staged or handed-out handle has I/O in flight");
            let wref = self.shared().handles[oldest as usize].wait_ref();
            self.shared().wait_for(wref);
        }
    }

    /// Acquires a handle if one is free or completed, without waiting.
    pub fn acquire_nb(&mut self) -> Result<Option<HandleToken>, AioError> {
        if self.handed_out.is_some() {
            return Err(AioError::HandleAlreadyHandedOut);
        }
        if self.idle.is_empty() {
            self.collect_completed();
        }
        Ok(self.take_idle())
    }

    fn take_idle(&mut self) -> Option<HandleToken> {
        let index = self.idle.pop()?;
        let h = &self.aio.shared.handles[index as usize];
        h.set_state(IoState::HandedOut);
        let generation = h.generation();
        self.handed_out = Some(index);
        Some(HandleToken {
            slot: self.slot,
            index,
            generation,
        })
    }

    /// Refuses a token that is not this session's handed-out handle (from
    /// another session, or already started or released).
    fn check_token(&self, token: &HandleToken) -> Result<(), AioError> {
        let current = token.slot == self.slot
            && self.handed_out == Some(token.index)
            && self.shared().handles[token.index as usize].generation() == token.generation;
        if current {
            Ok(())
        } else {
            Err(AioError::StaleHandle {
                handle: token.index,
            })
        }
    }

    /// Gives back a handle that will not be used.
    pub fn release(&mut self, token: HandleToken) -> Result<(), AioError> {
        self.check_token(&token)?;
        self.release_index(token.index);
        Ok(())
    }

    /// Forgets whatever was set on a handed-out handle and makes it idle.
    fn release_index(&mut self, index: u32) {
        self.handed_out = None;
        let h = &self.aio.shared.handles[index as usize];
        h.inner.lock().clear();
        h.recycle();
        self.idle.push(index);
    }

    /// The wait reference of the I/O this handle will perform.
    pub fn wait_ref(&self, token: &HandleToken) -> WaitRef {
        WaitRef {
            index: token.index,
            generation: token.generation,
        }
    }

    /// Attaches words of handle data (for example buffer ids) for the
    /// callbacks.
    pub fn set_data(&self, token: &HandleToken, data: &[u64]) -> Result<(), AioError> {
        self.check_token(token)?;
        let limit = self.shared().config.io_max_combine_limit;
        if data.len() > limit {
            return Err(AioError::TooManyIovecs {
                iovecs: data.len(),
                limit,
            });
        }
        let mut inner = self.shared().handles[token.index as usize].inner.lock();
        inner.data.clear();
        inner.data.extend_from_slice(data);
        Ok(())
    }

    /// Adds a callback (with one byte of private data). Callbacks added here
    /// run outside the built-in block callback that `start_*` adds last.
    pub fn add_callback(
        &self,
        token: &HandleToken,
        id: CallbackId,
        data: u8,
    ) -> Result<(), AioError> {
        self.check_token(token)?;
        if self.shared().callbacks.get(id).is_none() {
            return Err(AioError::UnknownCallback { id });
        }
        let mut inner = self.shared().handles[token.index as usize].inner.lock();
        let n = inner.callback_count;
        // One place stays free for the block callback.
        if n + 1 >= MAX_CALLBACKS_PER_HANDLE {
            return Err(AioError::TooManyCallbacks {
                max: MAX_CALLBACKS_PER_HANDLE - 1,
            });
        }
        inner.callbacks[n] = (id, data);
        inner.callback_count = n + 1;
        Ok(())
    }

    /// Asks for the I/O's result to be copied to `cell` when collected.
    pub fn set_return(&self, token: &HandleToken, cell: &IoReturnCell) -> Result<(), AioError> {
        self.check_token(token)?;
        self.shared().handles[token.index as usize]
            .inner
            .lock()
            .return_to = Some(Arc::clone(&cell.0));
        Ok(())
    }

    /// Starts a vectored read of `file` at `offset` into `iov`.
    ///
    /// # Safety
    /// The memory described by `iov` must stay valid, and must be neither
    /// read nor written by anyone else, until the I/O has completed: until
    /// [`Aio::is_done`] is true for its wait reference. The I/O may be
    /// executed by another thread.
    pub unsafe fn start_readv(
        &mut self,
        token: HandleToken,
        file: &Arc<SegmentFile>,
        offset: u64,
        iov: &[IoVec],
    ) -> Result<(), AioError> {
        self.start(token, IoOp::Read, file, offset, iov)
    }

    /// Starts a vectored write of `iov` to `file` at `offset`.
    ///
    /// # Safety
    /// The memory described by `iov` must stay valid and unmodified until
    /// the I/O has completed.
    pub unsafe fn start_writev(
        &mut self,
        token: HandleToken,
        file: &Arc<SegmentFile>,
        offset: u64,
        iov: &[IoVec],
    ) -> Result<(), AioError> {
        self.start(token, IoOp::Write, file, offset, iov)
    }

    /// Asks that the I/O of `token`, once started, be executed by this
    /// thread at submission rather than by the method (an io_uring punt
    /// to the kernel's workers, or a worker's queue): for an I/O that
    /// costs less than the hand-off and whose issuer waits for it at
    /// once, as a buffered WAL write into the page cache before the
    /// fdatasync that makes it durable (PostgreSQL's
    /// `PGAIO_HF_SYNCHRONOUS`). The I/O completes as any other.
    pub fn set_synchronous(&self, token: &HandleToken) -> Result<(), AioError> {
        self.check_token(token)?;
        self.aio.shared.handles[token.index as usize]
            .inner
            .lock()
            .synchronous = true;
        Ok(())
    }

    /// Starts flushing `file`'s data to stable storage (fdatasync).
    pub fn start_fsync(
        &mut self,
        token: HandleToken,
        file: &Arc<SegmentFile>,
    ) -> Result<(), AioError> {
        self.start(token, IoOp::Fsync, file, 0, &[])
    }

    fn start(
        &mut self,
        token: HandleToken,
        op: IoOp,
        file: &Arc<SegmentFile>,
        offset: u64,
        iov: &[IoVec],
    ) -> Result<(), AioError> {
        self.check_token(&token)?;
        let limit = self.shared().config.io_max_combine_limit;
        let check = (|| {
            if op == IoOp::Fsync {
                return Ok(());
            }
            let len: usize = iov.iter().map(IoVec::len).sum();
            if len == 0 || !len.is_multiple_of(BLOCK_SIZE) {
                return Err(AioError::NotWholeBlocks { len });
            }
            if iov.is_empty() || iov.len() > limit {
                return Err(AioError::TooManyIovecs {
                    iovecs: iov.len(),
                    limit,
                });
            }
            if file.is_direct() {
                for v in iov {
                    if !is_io_aligned(v.ptr() as usize) || !is_io_aligned(v.len()) {
                        return Err(StorageError::Misaligned {
                            what: format!("iovec {:p}+{} for {}", v.ptr(), v.len(), file.ident()),
                        }
                        .into());
                    }
                }
                file.check_alignment(offset, 0, 0)?;
            }
            Ok(())
        })();
        if let Err(e) = check {
            self.release_index(token.index);
            return Err(e);
        }
        let index = token.index;
        let h = &self.aio.shared.handles[index as usize];
        let synchronous = {
            let mut inner = h.inner.lock();
            inner.op = Some(op);
            inner.file = Some(Arc::clone(file));
            inner.offset = offset;
            inner.iov.clear();
            inner.iov.extend_from_slice(iov);
            let block_callback = match op {
                IoOp::Read => Some(CB_BLOCK_READV),
                IoOp::Write => Some(CB_BLOCK_WRITEV),
                IoOp::Fsync => None,
            };
            if let Some(id) = block_callback {
                let n = inner.callback_count;
                inner.callbacks[n] = (id, 0);
                inner.callback_count = n + 1;
            }
            let latency_us = self.aio.shared.config.debug_io_latency_us;
            inner.latency_timespec = io_uring::types::Timespec::new()
                .sec(latency_us / 1_000_000)
                .nsec((latency_us % 1_000_000) as u32 * 1000);
            h.set_state(IoState::Defined);
            let view = IoView {
                wait_ref: WaitRef {
                    index,
                    generation: h.generation(),
                },
                op,
                file,
                offset,
                iov: &inner.iov,
                data: &inner.data,
                raw: None,
            };
            for &(id, data) in &inner.callbacks[..inner.callback_count] {
                if let Some(cb) = self.aio.shared.callbacks.get(id) {
                    cb.stage(&view, data);
                }
            }
            inner.synchronous
        };
        h.set_state(IoState::Staged);
        self.handed_out = None;
        if synchronous {
            // Runs now, alone: a batch's staged I/O stays staged.
            self.aio.shared.submit(self.slot, &[index]);
            self.in_flight.push_back(index);
            return Ok(());
        }
        self.staged.push(index);
        // The sync method executes at staging, batch or not (DESIGN.md
        // §3.5): there is nothing to gain by holding the I/O back.
        if !self.batch_mode
            || self.staged.len() >= MAX_STAGED
            || self.aio.shared.method == IoMethod::Sync
        {
            self.submit_staged();
        }
        Ok(())
    }

    /// Enters batch mode: I/Os started from now on are staged and
    /// submitted together.
    pub fn enter_batch(&mut self) -> Result<(), AioError> {
        if self.batch_mode {
            return Err(AioError::BatchAlreadyStarted);
        }
        self.batch_mode = true;
        Ok(())
    }

    /// Leaves batch mode, submitting what is staged.
    pub fn exit_batch(&mut self) {
        self.batch_mode = false;
        self.submit_staged();
    }

    pub fn in_batch(&self) -> bool {
        self.batch_mode
    }

    /// Number of staged, unsubmitted I/Os.
    pub fn staged_count(&self) -> usize {
        self.staged.len()
    }

    /// Number of this session's I/Os submitted and not yet collected.
    pub fn in_flight_count(&self) -> usize {
        self.in_flight.len()
    }

    /// Submits every staged I/O.
    pub fn submit_staged(&mut self) {
        if self.staged.is_empty() {
            return;
        }
        self.aio.shared.submit(self.slot, &self.staged);
        self.in_flight.extend(self.staged.drain(..));
    }

    /// Waits for the I/O `wref` refers to, whoever owns it, after submitting
    /// our own staged I/O (the deadlock rule). If it is ours, collects it:
    /// its local callbacks run and its result goes to its return cell.
    ///
    /// Waiting for our own handle before starting it is an error: nothing
    /// but this thread could ever start it.
    pub fn wait(&mut self, wref: WaitRef) -> Result<(), AioError> {
        let own = self.shared().handles[wref.index as usize].slot == self.slot;
        if own && self.handed_out == Some(wref.index) {
            let h = &self.shared().handles[wref.index as usize];
            if h.state_of(wref.generation) == Some(IoState::HandedOut) {
                return Err(AioError::WaitOnUnstartedIo { handle: wref.index });
            }
        }
        self.submit_staged();
        self.shared().wait_for(wref);
        let h = &self.shared().handles[wref.index as usize];
        if own && h.state_of(wref.generation) == Some(IoState::CompletedShared) {
            self.collect(wref.index);
        }
        Ok(())
    }

    /// Collects every I/O of this session that has completed.
    pub fn collect_completed(&mut self) {
        let mut i = 0;
        while i < self.in_flight.len() {
            let index = self.in_flight[i];
            if self.shared().handles[index as usize].state() == IoState::CompletedShared {
                self.collect(index);
            } else {
                i += 1;
            }
        }
    }

    /// Waits for and collects all of this session's I/O.
    pub fn wait_all(&mut self) {
        self.submit_staged();
        while let Some(&index) = self.in_flight.front() {
            let wref = self.shared().handles[index as usize].wait_ref();
            self.shared().wait_for(wref);
            self.collect(index);
        }
    }

    /// Runs the local callbacks, copies the result out and recycles the
    /// handle.
    fn collect(&mut self, index: u32) {
        let shared = &self.aio.shared;
        let h = &shared.handles[index as usize];
        debug_assert_eq!(h.state(), IoState::CompletedShared);
        {
            let mut inner = h.inner.lock();
            let file = Arc::clone(inner.file.as_ref().expect("completed I/O has a file"));
            let op = inner.op.expect("completed I/O has an op");
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
                raw: inner.raw,
            };
            let mut result = inner.result;
            for &(id, data) in inner.callbacks[..inner.callback_count].iter().rev() {
                if let Some(cb) = shared.callbacks.get(id) {
                    result = cb.complete_local(&view, result, data);
                }
            }
            h.set_state(IoState::CompletedLocal);
            if let Some(cell) = inner.return_to.take() {
                *cell.lock() = Some(IoReturn {
                    result,
                    op,
                    file,
                    offset: inner.offset,
                    len: inner.len_bytes(),
                    raw: inner.raw.unwrap_or(0),
                });
            }
            inner.clear();
        }
        h.recycle();
        if let Some(pos) = self.in_flight.iter().position(|&i| i == index) {
            self.in_flight.remove(pos);
        }
        self.idle.push(index);
    }

    /// The end-of-operation check (PostgreSQL does it at transaction end):
    /// a handle acquired and never started is released, an open batch is
    /// submitted and closed, and each is returned as a warning and logged.
    pub fn check_resources(&mut self) -> Vec<AioWarning> {
        let mut warnings = Vec::new();
        if let Some(index) = self.handed_out {
            warnings.push(AioWarning::LeakedHandle { handle: index });
            self.release_index(index);
        }
        if self.batch_mode {
            warnings.push(AioWarning::BatchLeftOpen {
                staged: self.staged.len(),
            });
            self.exit_batch();
        }
        for w in &warnings {
            log::warn!("{w}");
        }
        warnings
    }
}

impl Drop for AioSession {
    /// Ends the session without waiting for its I/O: whatever is still in
    /// flight can be completed by any thread, and the slot's next session
    /// collects it.
    fn drop(&mut self) {
        self.check_resources();
        self.submit_staged();
        self.collect_completed();
        let slot = &self.aio.shared.slots[self.slot as usize];
        slot.orphans.lock().extend(self.in_flight.drain(..));
        slot.in_use.store(false, Ordering::SeqCst);
    }
}
