//! `io_method=worker`: a pool of I/O worker threads fed by one bounded
//! queue of handle indexes.
//!
//! Submission never waits for the queue: it takes the lock only if it is
//! free, and whatever does not fit (or everything, if the lock is contended)
//! is executed synchronously by the issuer, so a burst can never stall on
//! the workers. The lowest-numbered idle worker is woken, so that a lightly
//! loaded pool keeps using the same warm threads; a worker that finds more
//! work queued behind its own wakes one more. Workers execute the I/O *and*
//! run its shared completion callbacks, so checksum verification runs in
//! parallel across them and completion never depends on the issuer.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{JoinHandle, Thread};

use parking_lot::Mutex;

use crate::aio::{AioError, AioShared};

/// Entries in the submission queue.
pub const WORKER_QUEUE_SIZE: usize = 64;

struct QueueInner {
    items: VecDeque<u32>,
    /// Bit i set: worker i is idle (parked or about to park).
    idle_workers: u64,
}

pub(crate) struct WorkerQueue {
    inner: Mutex<QueueInner>,
    threads: OnceLock<Vec<Thread>>,
    shutdown: AtomicBool,
}

impl WorkerQueue {
    pub fn new() -> WorkerQueue {
        WorkerQueue {
            inner: Mutex::new(QueueInner {
                items: VecDeque::with_capacity(WORKER_QUEUE_SIZE),
                idle_workers: 0,
            }),
            threads: OnceLock::new(),
            shutdown: AtomicBool::new(false),
        }
    }

    /// Queues a prefix of `handles` without waiting for the lock; returns
    /// how many were queued. The caller executes the rest itself.
    pub fn try_submit(&self, handles: &[u32]) -> usize {
        let Some(mut q) = self.inner.try_lock() else {
            return 0;
        };
        let room = WORKER_QUEUE_SIZE - q.items.len();
        let queued = room.min(handles.len());
        q.items.extend(&handles[..queued]);
        let wake = if queued > 0 {
            take_lowest_idle(&mut q)
        } else {
            None
        };
        drop(q);
        if let Some(worker) = wake {
            self.unpark(worker);
        }
        queued
    }

    fn unpark(&self, worker: usize) {
        if let Some(threads) = self.threads.get() {
            threads[worker].unpark();
        }
    }

    /// Takes the next handle for worker `id`, parking while there is none.
    /// Returns `None` at shutdown once the queue is empty.
    fn next(&self, id: usize) -> Option<u32> {
        loop {
            let mut q = self.inner.lock();
            if let Some(index) = q.items.pop_front() {
                q.idle_workers &= !(1 << id);
                let also_wake = if q.items.is_empty() {
                    None
                } else {
                    take_lowest_idle(&mut q)
                };
                drop(q);
                if let Some(worker) = also_wake {
                    self.unpark(worker);
                }
                return Some(index);
            }
            if self.shutdown.load(Ordering::SeqCst) {
                return None;
            }
            q.idle_workers |= 1 << id;
            drop(q);
            // A wake-up that raced ahead of this park leaves a token, so
            // park returns at once; spurious wake-ups just loop.
            std::thread::park();
        }
    }

    pub fn shut_down(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        if let Some(threads) = self.threads.get() {
            for t in threads {
                t.unpark();
            }
        }
    }
}

fn take_lowest_idle(q: &mut QueueInner) -> Option<usize> {
    if q.idle_workers == 0 {
        return None;
    }
    let worker = q.idle_workers.trailing_zeros() as usize;
    q.idle_workers &= !(1 << worker);
    Some(worker)
}

/// Most I/O workers (one bit each in the idle mask).
pub const MAX_IO_WORKERS: usize = 64;

pub(crate) fn start_workers(
    shared: &Arc<AioShared>,
    count: usize,
) -> Result<Vec<JoinHandle<()>>, AioError> {
    let count = count.min(MAX_IO_WORKERS);
    let mut handles = Vec::with_capacity(count);
    for id in 0..count {
        let shared = Arc::clone(shared);
        let handle = std::thread::Builder::new()
            .name(format!("aio-worker-{id}"))
            .spawn(move || worker_main(&shared, id))
            .map_err(|e| AioError::Setup(format!("could not start I/O worker {id}: {e}")))?;
        handles.push(handle);
    }
    let threads = handles.iter().map(|h| h.thread().clone()).collect();
    let queue = shared
        .worker_queue
        .as_ref()
        .expect("worker method has a queue");
    if queue.threads.set(threads).is_err() {
        unreachable!("workers started twice");
    }
    // Work queued before the thread list was published found no one to
    // wake; wake everyone once.
    for t in queue.threads.get().into_iter().flatten() {
        t.unpark();
    }
    Ok(handles)
}

fn worker_main(shared: &AioShared, id: usize) {
    let queue = shared
        .worker_queue
        .as_ref()
        .expect("worker method has a queue");
    while let Some(index) = queue.next(id) {
        shared.execute(index, false);
    }
}
