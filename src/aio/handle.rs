//! I/O handles: their states, the one function that says which transitions
//! are allowed, wait references, and the wake-up primitive.
//!
//! A handle's scalar state and generation are atomics, so that any thread
//! can find out where an I/O is without a lock. Everything else (the
//! operation, file, iovecs, handle data, callbacks, results) lives behind a
//! per-handle mutex: the owner holds it while defining the I/O, an executor
//! while copying the request out (never across the system call), and a
//! completer while running callbacks. Those are short, so the in-flight view
//! can copy a handle with `try_lock` without stopping the I/O path.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use super::result::{IoResult, IoReturn};
use crate::stats::IoOp;
use crate::storage::SegmentFile;

/// Most callbacks one handle can carry.
pub const MAX_CALLBACKS_PER_HANDLE: usize = 4;

/// The life of an I/O handle (DESIGN.md §3.1).
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoState {
    Idle = 0,
    HandedOut = 1,
    Defined = 2,
    Staged = 3,
    Submitted = 4,
    CompletedIo = 5,
    CompletedShared = 6,
    CompletedLocal = 7,
}

impl IoState {
    fn from_u8(v: u8) -> IoState {
        match v {
            0 => IoState::Idle,
            1 => IoState::HandedOut,
            2 => IoState::Defined,
            3 => IoState::Staged,
            4 => IoState::Submitted,
            5 => IoState::CompletedIo,
            6 => IoState::CompletedShared,
            _ => IoState::CompletedLocal,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            IoState::Idle => "idle",
            IoState::HandedOut => "handed_out",
            IoState::Defined => "defined",
            IoState::Staged => "staged",
            IoState::Submitted => "submitted",
            IoState::CompletedIo => "completed_io",
            IoState::CompletedShared => "completed_shared",
            IoState::CompletedLocal => "completed_local",
        }
    }

    /// The allowed transitions, all in one place. `HandedOut → Idle` is a
    /// handle given back unused.
    pub fn can_move_to(self, next: IoState) -> bool {
        use IoState::*;
        matches!(
            (self, next),
            (Idle, HandedOut)
                | (HandedOut, Defined)
                | (HandedOut, Idle)
                | (Defined, Staged)
                | (Staged, Submitted)
                | (Submitted, CompletedIo)
                | (CompletedIo, CompletedShared)
                | (CompletedShared, CompletedLocal)
                | (CompletedLocal, Idle)
        )
    }

    /// True once the shared completion callbacks have run: waiters may go.
    pub fn is_complete(self) -> bool {
        matches!(self, IoState::CompletedShared | IoState::CompletedLocal)
    }
}

/// A reference to one use of a handle: it stays meaningful after the handle
/// is recycled, because the generation moves on. It may be copied anywhere
/// (a buffer descriptor, another session's read operation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WaitRef {
    pub(crate) index: u32,
    pub(crate) generation: u64,
}

impl WaitRef {
    pub fn handle_index(&self) -> u32 {
        self.index
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }
}

/// An iovec that may cross threads: the memory it points to is promised to
/// the I/O by whoever defined it (see `AioSession::start_readv`).
#[derive(Debug, Clone, Copy)]
#[repr(transparent)]
pub struct IoVec(pub libc::iovec);

// SAFETY: an IoVec is only a description of memory; the unsafe start_*
// functions make the caller promise that the memory stays valid and
// otherwise untouched until the I/O completes, whichever thread runs it.
unsafe impl Send for IoVec {}

impl IoVec {
    pub fn new(ptr: *mut u8, len: usize) -> IoVec {
        IoVec(libc::iovec {
            iov_base: ptr as *mut libc::c_void,
            iov_len: len,
        })
    }

    pub fn len(&self) -> usize {
        self.0.iov_len
    }

    pub fn is_empty(&self) -> bool {
        self.0.iov_len == 0
    }

    pub fn ptr(&self) -> *mut u8 {
        self.0.iov_base as *mut u8
    }
}

/// Everything about an I/O except its state and generation.
pub(crate) struct HandleInner {
    pub op: Option<IoOp>,
    pub file: Option<Arc<SegmentFile>>,
    pub offset: u64,
    pub iov: Vec<IoVec>,
    pub data: Vec<u64>,
    pub callbacks: [(u8, u8); MAX_CALLBACKS_PER_HANDLE],
    pub callback_count: usize,
    /// Bytes transferred or negative errno, once the I/O has run.
    pub raw: Option<i64>,
    pub result: IoResult,
    pub return_to: Option<Arc<Mutex<Option<IoReturn>>>>,
    /// Executed by the issuing thread rather than asynchronously.
    pub by_issuer: bool,
    /// Its issuer asked to execute it itself, whatever the method
    /// (PostgreSQL's `PGAIO_HF_SYNCHRONOUS`): see
    /// `AioSession::set_synchronous`.
    pub synchronous: bool,
    pub submitted_at: Option<Instant>,
    /// Kept here, at a stable address, for io_uring's linked latency timer.
    pub latency_timespec: io_uring::types::Timespec,
}

impl HandleInner {
    fn new(max_iovecs: usize) -> HandleInner {
        HandleInner {
            op: None,
            file: None,
            offset: 0,
            iov: Vec::with_capacity(max_iovecs),
            data: Vec::with_capacity(max_iovecs),
            callbacks: [(0, 0); MAX_CALLBACKS_PER_HANDLE],
            callback_count: 0,
            raw: None,
            result: IoResult::default(),
            return_to: None,
            by_issuer: false,
            synchronous: false,
            submitted_at: None,
            latency_timespec: io_uring::types::Timespec::new(),
        }
    }

    pub fn len_bytes(&self) -> usize {
        self.iov.iter().map(IoVec::len).sum()
    }

    /// Forgets the finished I/O, keeping the allocations.
    pub fn clear(&mut self) {
        self.op = None;
        self.file = None;
        self.offset = 0;
        self.iov.clear();
        self.data.clear();
        self.callback_count = 0;
        self.raw = None;
        self.result = IoResult::default();
        self.return_to = None;
        self.by_issuer = false;
        self.synchronous = false;
        self.submitted_at = None;
    }
}

/// One preallocated I/O handle.
pub(crate) struct Handle {
    pub index: u32,
    pub slot: u32,
    state: AtomicU8,
    generation: AtomicU64,
    pub inner: Mutex<HandleInner>,
    wake_lock: Mutex<()>,
    wake: Condvar,
    waiters: AtomicU32,
}

impl Handle {
    pub fn new(index: u32, slot: u32, max_iovecs: usize) -> Handle {
        Handle {
            index,
            slot,
            state: AtomicU8::new(IoState::Idle as u8),
            generation: AtomicU64::new(1),
            inner: Mutex::new(HandleInner::new(max_iovecs)),
            wake_lock: Mutex::new(()),
            wake: Condvar::new(),
            waiters: AtomicU32::new(0),
        }
    }

    pub fn state(&self) -> IoState {
        IoState::from_u8(self.state.load(Ordering::SeqCst))
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    pub fn wait_ref(&self) -> WaitRef {
        WaitRef {
            index: self.index,
            generation: self.generation(),
        }
    }

    /// The state of the use `generation` refers to, or `None` if the handle
    /// has been recycled since (that I/O is done). The generation is read on
    /// both sides of the state, so the state cannot belong to a later use.
    pub fn state_of(&self, generation: u64) -> Option<IoState> {
        if self.generation() != generation {
            return None;
        }
        let state = self.state();
        (self.generation() == generation).then_some(state)
    }

    /// Moves to `next`, asserting the transition is allowed, and wakes
    /// anyone sleeping on this handle. SeqCst pairs with the waiter count
    /// in `wait_while`: either the waker sees the waiter, or the waiter sees
    /// the new state.
    ///
    /// # Panics
    /// On a transition the state machine does not allow, or one that races
    /// with another: both are bugs in this layer, and going on could let
    /// the kernel write into memory that has been handed back.
    pub fn set_state(&self, next: IoState) {
        let prev = self.state();
        assert!(
            prev.can_move_to(next),
            "I/O handle {} cannot move from {} to {}",
            self.index,
            prev.name(),
            next.name()
        );
        if let Err(now) =
            self.state
                .compare_exchange(prev as u8, next as u8, Ordering::SeqCst, Ordering::SeqCst)
        {
            panic!(
                "I/O handle {} moved from {} to {} while changing to {}",
                self.index,
                prev.name(),
                IoState::from_u8(now).name(),
                next.name()
            );
        }
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _guard = self.wake_lock.lock();
            self.wake.notify_all();
        }
    }

    /// Ends a use: the generation moves on *before* the handle is published
    /// as idle, so that a waiter holding the old wait reference can never
    /// mistake the next use's state for its own.
    pub fn recycle(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.set_state(IoState::Idle);
    }

    /// Like [`Handle::wait_while`], giving up after `limit`.
    pub fn wait_while_for(&self, generation: u64, state: IoState, limit: std::time::Duration) {
        let mut guard = self.wake_lock.lock();
        self.waiters.fetch_add(1, Ordering::SeqCst);
        if self.state_of(generation) == Some(state) {
            self.wake.wait_for(&mut guard, limit);
        }
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// Sleeps while use `generation` is in state `state`.
    pub fn wait_while(&self, generation: u64, state: IoState) {
        let mut guard = self.wake_lock.lock();
        self.waiters.fetch_add(1, Ordering::SeqCst);
        while self.state_of(generation) == Some(state) {
            self.wake.wait(&mut guard);
        }
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_designed_transitions_are_allowed() {
        use IoState::*;
        let path = [
            Idle,
            HandedOut,
            Defined,
            Staged,
            Submitted,
            CompletedIo,
            CompletedShared,
            CompletedLocal,
            Idle,
        ];
        for pair in path.windows(2) {
            assert!(
                pair[0].can_move_to(pair[1]),
                "{:?} -> {:?}",
                pair[0],
                pair[1]
            );
        }
        assert!(HandedOut.can_move_to(Idle));
        assert!(!Submitted.can_move_to(Idle));
        assert!(!Staged.can_move_to(CompletedShared));
        assert!(!CompletedShared.can_move_to(Idle));
    }

    #[test]
    fn a_recycled_handle_reports_the_old_use_as_done() {
        let h = Handle::new(0, 0, 1);
        let wref = h.wait_ref();
        h.set_state(IoState::HandedOut);
        assert_eq!(h.state_of(wref.generation), Some(IoState::HandedOut));
        h.recycle();
        assert_eq!(h.state(), IoState::Idle);
        assert_eq!(h.state_of(wref.generation), None);
    }
}
