//! Where flushes wait for the log to become durable up to their targets.
//!
//! One flush at a time *drives*: it waits for the oldest write in flight
//! (or runs the sync), collects it and so moves the flush position. Every
//! other flush starts the writes it can without waiting, then sleeps here
//! under its own target and is woken only when the flush position covers
//! that target, or when the driver leaves (the lowest waiter then drives).
//!
//! The log used to wake every waiting flush whenever anyone let go of the
//! writer or collected a write: with 32 committing sessions on two CPUs,
//! `perf` counted 43 % of the samples in futex waits and wakes, most of
//! them sessions waking to find their commit not yet covered. A wake-up
//! here goes to a thread whose commit is released (or to one new driver).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::Thread;
use std::time::Duration;

use parking_lot::Mutex;

use super::Lsn;

/// A waiting flush's place in the queue: its target, then its arrival.
type Ticket = (Lsn, u64);

#[derive(Default)]
pub(super) struct FlushQueue {
    waiters: Mutex<BTreeMap<Ticket, Thread>>,
    next_arrival: AtomicU64,
    /// Whether a flush is driving (see the module comment).
    driving: AtomicBool,
}

impl FlushQueue {
    /// Makes the caller the driver if there is none; returns whether it did.
    pub(super) fn try_drive(&self) -> bool {
        self.driving
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// A flush leaves the queue's business (covered, or failed), having
    /// driven or not. If nobody drives now, the waiter with the lowest
    /// target is woken: it drives, or (covered meanwhile, as the one a
    /// leaving driver picks may be) leaves and passes the wake-up on, so
    /// that waiters never all sleep with nobody driving.
    pub(super) fn leave(&self, driving: bool) {
        if driving {
            let was = self.driving.swap(false, Ordering::SeqCst);
            debug_assert!(was, "a flush stopped driving without driving");
        }
        if self.driving.load(Ordering::SeqCst) {
            return;
        }
        let next = self.waiters.lock().values().next().cloned();
        if let Some(thread) = next {
            thread.unpark();
        }
    }

    /// Sleeps until the flush position covers `target` (as told by
    /// [`FlushQueue::wake_covered`]), nobody drives any more, or `limit` passes
    /// (a bound on a lost wake-up, as every wait in the log has). The
    /// caller looks again at what it waits for on return: a wake-up may
    /// also be a stale one meant for an earlier wait of this thread.
    pub(super) fn wait(&self, target: Lsn, flushed: &AtomicU64, limit: Duration) {
        let ticket = (target, self.next_arrival.fetch_add(1, Ordering::Relaxed));
        self.waiters.lock().insert(ticket, std::thread::current());
        // Looked at after registering: a flush position published or a
        // driver gone after these loads finds this waiter in the queue
        // (both sides use sequentially consistent order).
        if flushed.load(Ordering::SeqCst) < target && self.driving.load(Ordering::SeqCst) {
            std::thread::park_timeout(limit);
        }
        self.waiters.lock().remove(&ticket);
    }

    /// Wakes every waiter whose target `flushed` covers and takes it off
    /// the queue, after the flush position moved to `flushed`.
    pub(super) fn wake_covered(&self, flushed: Lsn) {
        let covered = {
            let mut waiters = self.waiters.lock();
            if waiters.first_key_value().is_none_or(|(t, _)| t.0 > flushed) {
                return;
            }
            let uncovered = waiters.split_off(&(flushed + 1, 0));
            std::mem::replace(&mut *waiters, uncovered)
        };
        debug_assert!(covered.keys().all(|t| t.0 <= flushed));
        for thread in covered.into_values() {
            thread.unpark();
        }
    }

    /// Wakes every waiter (the log stopped: each returns its error).
    pub(super) fn wake_all(&self) {
        let all = std::mem::take(&mut *self.waiters.lock());
        for thread in all.into_values() {
            thread.unpark();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::thread::JoinHandle;
    use std::time::Instant;

    /// A test's bound on a wait that should end at once.
    const LONG: Duration = Duration::from_secs(10);

    /// A flush waiting as the log's do: until `flushed` covers `target`
    /// (it then leaves) or, with `drive`, until it may drive (it then
    /// returns true and the test makes it leave).
    fn waiter(
        q: &Arc<FlushQueue>,
        flushed: &Arc<AtomicU64>,
        target: Lsn,
        drive: bool,
    ) -> JoinHandle<bool> {
        let (q, flushed) = (Arc::clone(q), Arc::clone(flushed));
        std::thread::spawn(move || {
            let started = Instant::now();
            loop {
                if flushed.load(Ordering::SeqCst) >= target {
                    q.leave(false);
                    return false;
                }
                if drive && q.try_drive() {
                    return true;
                }
                assert!(started.elapsed() < LONG, "a waiter was never woken");
                q.wait(target, &flushed, LONG);
            }
        })
    }

    fn wait_until_queued(q: &FlushQueue, n: usize) {
        let started = Instant::now();
        while q.waiters.lock().len() < n {
            assert!(started.elapsed() < LONG, "waiters never queued");
            std::thread::yield_now();
        }
    }

    /// Gives a thread that should stay asleep a moment to wake wrongly.
    fn still_asleep<T>(t: &JoinHandle<T>) -> bool {
        std::thread::sleep(Duration::from_millis(50));
        !t.is_finished()
    }

    #[test]
    fn only_covered_waiters_wake() {
        let q = Arc::new(FlushQueue::default());
        let flushed = Arc::new(AtomicU64::new(0));
        assert!(q.try_drive());
        let low = waiter(&q, &flushed, 100, false);
        let high = waiter(&q, &flushed, 200, false);
        wait_until_queued(&q, 2);
        flushed.store(150, Ordering::SeqCst);
        q.wake_covered(150);
        assert!(!low.join().unwrap());
        assert!(still_asleep(&high));
        flushed.store(200, Ordering::SeqCst);
        q.wake_covered(200);
        assert!(!high.join().unwrap());
        assert!(q.waiters.lock().is_empty());
    }

    #[test]
    fn a_leaving_driver_hands_the_driving_to_the_lowest_waiter() {
        let q = Arc::new(FlushQueue::default());
        let flushed = Arc::new(AtomicU64::new(0));
        assert!(q.try_drive());
        assert!(!q.try_drive(), "one driver at a time");
        let high = waiter(&q, &flushed, 300, true);
        wait_until_queued(&q, 1);
        let low = waiter(&q, &flushed, 100, true);
        wait_until_queued(&q, 2);
        q.leave(true);
        assert!(low.join().unwrap(), "the lowest waiter drives");
        assert!(!q.try_drive());
        assert!(still_asleep(&high), "only one waiter is handed the driving");
        q.leave(true);
        assert!(high.join().unwrap());
        q.leave(true);
    }

    #[test]
    fn a_covered_waiter_passes_the_driving_on() {
        let q = Arc::new(FlushQueue::default());
        let flushed = Arc::new(AtomicU64::new(0));
        assert!(q.try_drive());
        let low = waiter(&q, &flushed, 100, true);
        wait_until_queued(&q, 1);
        let high = waiter(&q, &flushed, 300, true);
        wait_until_queued(&q, 2);
        // Covered after the driver chose whom to wake, not yet told.
        flushed.store(150, Ordering::SeqCst);
        q.leave(true);
        assert!(!low.join().unwrap(), "covered: it leaves without driving");
        assert!(high.join().unwrap(), "and the next waiter drives");
        q.leave(true);
    }

    #[test]
    fn a_stopped_log_wakes_every_waiter() {
        let q = Arc::new(FlushQueue::default());
        let flushed = Arc::new(AtomicU64::new(0));
        assert!(q.try_drive());
        let stopped = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (1..=3)
            .map(|target| {
                let (q, flushed, stopped) =
                    (Arc::clone(&q), Arc::clone(&flushed), Arc::clone(&stopped));
                std::thread::spawn(move || {
                    let started = Instant::now();
                    while !stopped.load(Ordering::SeqCst) {
                        assert!(started.elapsed() < LONG, "a waiter was never woken");
                        q.wait(target, &flushed, LONG);
                    }
                })
            })
            .collect();
        wait_until_queued(&q, 3);
        stopped.store(true, Ordering::SeqCst);
        q.wake_all();
        for t in threads {
            t.join().unwrap();
        }
    }

    #[test]
    fn no_sleep_without_a_driver_or_when_covered() {
        let q = FlushQueue::default();
        let flushed = AtomicU64::new(0);
        let started = Instant::now();
        q.wait(10, &flushed, LONG);
        assert!(q.try_drive());
        flushed.store(10, Ordering::SeqCst);
        q.wait(10, &flushed, LONG);
        assert!(started.elapsed() < LONG);
        assert!(q.waiters.lock().is_empty());
    }
}
