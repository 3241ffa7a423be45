//! `io_method=io_uring`: one ring per session slot, created at start-up.
//!
//! Only the slot's session submits to its ring (under `submit_lock`, which
//! it alone takes, kept so that the shared submission queue access is
//! provably exclusive). Completions may be reaped by *any* thread under the
//! ring's `completion_lock`: a session waiting for another session's I/O
//! takes that lock and reaps the owner's ring, running the shared callbacks
//! of whatever completed, until its own I/O is done. So no I/O waits for its
//! issuer to come back, and an I/O whose session ended still completes.
//!
//! With `debug_io_latency_us`, each I/O is preceded by a linked timeout whose
//! expiry counts as success (`IORING_TIMEOUT_ETIME_SUCCESS`), so the kernel
//! starts the I/O only after the delay and no thread sleeps for it.

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};

use io_uring::{opcode, squeue, types, IoUring};
use parking_lot::Mutex;

use crate::aio::handle::{Handle, IoState};
use crate::aio::AioShared;
use crate::stats::IoOp;
use crate::storage::BLOCK_SIZE;

/// user_data of the linked latency timers, whose completions are ignored.
const TIMER_USER_DATA: u64 = u64::MAX;

/// Buffered I/O is punted to the kernel's async workers (IOSQE_ASYNC) past
/// this many I/Os in flight, or for I/Os of this many blocks or more:
/// otherwise the kernel copies from the page cache inline at submission and
/// the submitter does all the work itself, which the worker method beats.
const ASYNC_MIN_IN_FLIGHT: u32 = 4;
const ASYNC_MIN_BLOCKS: usize = 4;

/// Completions reaped per pass, copied out before their callbacks run so
/// that the completion queue is freed early.
const REAP_BATCH: usize = 64;

pub(crate) struct UringRing {
    ring: IoUring,
    submit_lock: Mutex<()>,
    completion_lock: Mutex<()>,
    in_flight: AtomicU32,
}

/// Why io_uring could not be set up.
pub(crate) enum SetupFailure {
    /// Not available here: fall back to the worker method, saying why.
    FallBack(String),
    /// A limit the administrator should raise: report, never hide.
    Fatal(String),
}

pub(crate) fn classify_setup_error(e: &io::Error) -> SetupFailure {
    match e.raw_os_error() {
        Some(libc::ENOSYS) => SetupFailure::FallBack("the kernel has no io_uring (ENOSYS)".into()),
        Some(libc::EPERM) => SetupFailure::FallBack(
            "io_uring is not permitted (EPERM): disabled by sysctl kernel.io_uring_disabled or blocked by a seccomp profile".into(),
        ),
        Some(libc::EINVAL) => {
            SetupFailure::FallBack("the kernel refused the ring parameters (EINVAL)".into())
        }
        Some(libc::ENOMEM) => SetupFailure::Fatal(
            "out of locked memory (ENOMEM); raise the locked-memory limit (ulimit -l) or lower max_sessions or io_max_concurrency".into(),
        ),
        Some(libc::EMFILE) | Some(libc::ENFILE) => SetupFailure::Fatal(
            "too many open files (EMFILE); raise the open-file limit (ulimit -n) or lower max_sessions".into(),
        ),
        _ => SetupFailure::Fatal(e.to_string()),
    }
}

/// One ring per slot, each with room for every handle of the slot plus its
/// latency timer, after checking that the kernel has every operation we use.
pub(crate) fn create_rings(
    slots: usize,
    handles_per_slot: usize,
) -> Result<Vec<UringRing>, SetupFailure> {
    let entries = (2 * handles_per_slot).next_power_of_two() as u32;
    let rings = (0..slots)
        .map(|_| {
            Ok(UringRing {
                ring: IoUring::builder().build(entries)?,
                submit_lock: Mutex::new(()),
                completion_lock: Mutex::new(()),
                in_flight: AtomicU32::new(0),
            })
        })
        .collect::<io::Result<Vec<_>>>()
        .map_err(|e| classify_setup_error(&e))?;
    if let Some(first) = rings.first() {
        match missing_opcode(&first.ring) {
            Ok(None) => {}
            Ok(Some(name)) => {
                return Err(SetupFailure::FallBack(format!(
                    "the kernel's io_uring lacks the {name} operation (Linux 5.6 or later has all we use)"
                )))
            }
            Err(e) => return Err(classify_setup_error(&e)),
        }
    }
    Ok(rings)
}

impl UringRing {
    /// Pushes the staged I/Os (already marked Submitted) and enters the
    /// kernel once for all of them.
    pub fn submit(&self, shared: &AioShared, staged: &[u32]) {
        let _submitting = self.submit_lock.lock();
        let latency = shared.config.debug_io_latency_us > 0;
        for &index in staged {
            let entries = {
                let inner = shared.handles[index as usize].inner.lock();
                let file = inner.file.as_ref().expect("submitted I/O has a file");
                let fd = types::Fd(file.raw_fd());
                let op = inner.op.expect("submitted I/O has an op");
                let iov = &inner.iov;
                let entry = match (op, iov.len()) {
                    (IoOp::Read, 1) => opcode::Read::new(fd, iov[0].ptr(), iov[0].len() as u32)
                        .offset(inner.offset)
                        .build(),
                    (IoOp::Read, n) => opcode::Readv::new(fd, iov.as_ptr().cast(), n as u32)
                        .offset(inner.offset)
                        .build(),
                    (IoOp::Write, 1) => opcode::Write::new(fd, iov[0].ptr(), iov[0].len() as u32)
                        .offset(inner.offset)
                        .build(),
                    (IoOp::Write, n) => opcode::Writev::new(fd, iov.as_ptr().cast(), n as u32)
                        .offset(inner.offset)
                        .build(),
                    (IoOp::Fsync, _) => opcode::Fsync::new(fd)
                        .flags(types::FsyncFlags::DATASYNC)
                        .build(),
                };
                let in_flight = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
                let punt = !file.is_direct()
                    && (in_flight > ASYNC_MIN_IN_FLIGHT
                        || inner.len_bytes() >= ASYNC_MIN_BLOCKS * BLOCK_SIZE);
                let mut entry = entry.user_data(index as u64);
                if punt {
                    entry = entry.flags(squeue::Flags::ASYNC);
                }
                let timer = latency.then(|| {
                    opcode::Timeout::new(&inner.latency_timespec)
                        .count(0)
                        .flags(types::TimeoutFlags::ETIME_SUCCESS)
                        .build()
                        .flags(squeue::Flags::IO_LINK)
                        .user_data(TIMER_USER_DATA)
                });
                (timer, entry)
            };
            let (timer, entry) = entries;
            match timer {
                Some(timer) => self.push_chain(shared, &[timer, entry]),
                None => self.push_chain(shared, &[entry]),
            }
        }
        self.enter_submit(shared);
    }

    /// Pushes linked entries and publishes them together, so that a thread
    /// entering the kernel meanwhile cannot submit half a chain.
    fn push_chain(&self, shared: &AioShared, chain: &[squeue::Entry]) {
        loop {
            // SAFETY: submit_lock is held, so this is the only user of the
            // submission queue. The entries' iovecs, buffers and timespec
            // live in the handle (or in memory the issuer promised) until
            // the completion is reaped.
            let pushed = unsafe {
                let mut sq = self.ring.submission_shared();
                let pushed =
                    sq.capacity() - sq.len() >= chain.len() && sq.push_multiple(chain).is_ok();
                sq.sync();
                pushed
            };
            if pushed {
                return;
            }
            // Full: hand what is queued to the kernel and try again.
            self.enter_submit(shared);
        }
    }

    fn enter_submit(&self, shared: &AioShared) {
        loop {
            match self.ring.submitter().submit() {
                Ok(_) => return,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EBUSY)) => {
                    // The completion queue is full: make room.
                    let _reaping = self.completion_lock.lock();
                    self.reap_locked(shared);
                }
                Err(e) => fatal_ring_error("submitting to", &e),
            }
        }
    }

    /// Reaps what the ring has completed, unless another thread is
    /// reaping (it completes the same I/Os): never waits.
    pub fn reap_unless_reaping(&self, shared: &AioShared) {
        if let Some(_reaping) = self.completion_lock.try_lock() {
            self.reap_locked(shared);
        }
    }

    /// Runs the shared completion of everything the ring has completed.
    /// The caller holds `completion_lock`.
    fn reap_locked(&self, shared: &AioShared) {
        let mut done = [(0u64, 0i32); REAP_BATCH];
        loop {
            let mut n = 0;
            {
                // SAFETY: completion_lock is held, so this is the only user
                // of the completion queue.
                let mut cq = unsafe { self.ring.completion_shared() };
                cq.sync();
                for cqe in &mut cq {
                    done[n] = (cqe.user_data(), cqe.result());
                    n += 1;
                    if n == REAP_BATCH {
                        break;
                    }
                }
            }
            for &(user_data, result) in &done[..n] {
                if user_data == TIMER_USER_DATA {
                    continue;
                }
                self.in_flight.fetch_sub(1, Ordering::Relaxed);
                shared.complete(user_data as u32, result as i64);
            }
            if n < REAP_BATCH {
                return;
            }
        }
    }

    /// Waits for a submitted I/O of this ring by reaping it, whichever
    /// thread we are. While another thread holds the completion lock, it is
    /// the reaper: sleep on the handle, which it wakes when it completes our
    /// I/O, and look again now and then in case it left (its own I/O done)
    /// before ours arrived. Gives up at `deadline`, if any; returns whether
    /// the I/O left the submitted state.
    pub fn wait_until(
        &self,
        shared: &AioShared,
        handle: &Handle,
        generation: u64,
        deadline: Option<std::time::Instant>,
    ) -> bool {
        loop {
            if handle.state_of(generation) != Some(IoState::Submitted) {
                return true;
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(std::time::Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return false,
                },
                None => None,
            };
            let Some(_reaping) = self.completion_lock.try_lock() else {
                let poll = left.map_or(REAPER_HANDOFF_POLL, |l| l.min(REAPER_HANDOFF_POLL));
                handle.wait_while_for(generation, IoState::Submitted, poll);
                continue;
            };
            self.reap_locked(shared);
            if handle.state_of(generation) != Some(IoState::Submitted) {
                return true;
            }
            let entered = match left {
                None => self.ring.submitter().submit_and_wait(1),
                Some(left) => {
                    let ts = io_uring::types::Timespec::from(left);
                    let args = io_uring::types::SubmitArgs::new().timespec(&ts);
                    self.ring.submitter().submit_with_args(1, &args)
                }
            };
            match entered {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR)
                            | Some(libc::EAGAIN)
                            | Some(libc::EBUSY)
                            | Some(libc::ETIME)
                    ) => {}
                Err(e) => fatal_ring_error("waiting for completions of", &e),
            }
            self.reap_locked(shared);
        }
    }
}

/// How often a thread waiting behind another reaper checks whether it has
/// to take over.
const REAPER_HANDOFF_POLL: std::time::Duration = std::time::Duration::from_millis(1);

/// An io_uring that fails in a way we cannot handle may hold I/O the kernel
/// is still writing into memory. Unwinding could free that memory, so stop
/// the process with the reason instead.
fn fatal_ring_error(what: &str, e: &io::Error) -> ! {
    log::error!(
        "{what} an io_uring failed: {e}; aborting, since I/O in flight may still write to memory"
    );
    eprintln!("aiostore: {what} an io_uring failed: {e}; aborting, since I/O in flight may still write to memory");
    std::process::abort()
}

/// The operations we use, each checked with the kernel's probe at start-up
/// so that an old kernel falls back to the worker method instead of
/// failing every I/O with EINVAL.
const REQUIRED_OPCODES: [(u8, &str); 6] = [
    (opcode::Read::CODE, "READ"),
    (opcode::Readv::CODE, "READV"),
    (opcode::Write::CODE, "WRITE"),
    (opcode::Writev::CODE, "WRITEV"),
    (opcode::Timeout::CODE, "TIMEOUT"),
    (opcode::Fsync::CODE, "FSYNC"),
];

/// The first required operation the kernel lacks, if any.
fn missing_opcode(ring: &IoUring) -> io::Result<Option<&'static str>> {
    let mut probe = io_uring::Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    Ok(REQUIRED_OPCODES
        .iter()
        .find(|(code, _)| !probe.is_supported(*code))
        .map(|(_, name)| *name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(errno: i32) -> SetupFailure {
        classify_setup_error(&io::Error::from_raw_os_error(errno))
    }

    #[test]
    fn unavailable_io_uring_falls_back_with_the_reason() {
        for errno in [libc::ENOSYS, libc::EPERM, libc::EINVAL] {
            assert!(
                matches!(classify(errno), SetupFailure::FallBack(_)),
                "errno {errno}"
            );
        }
        let SetupFailure::FallBack(reason) = classify(libc::EPERM) else {
            unreachable!()
        };
        assert!(reason.contains("kernel.io_uring_disabled") && reason.contains("seccomp"));
    }

    #[test]
    fn resource_limits_are_reported_with_the_limit_to_raise_never_hidden() {
        let SetupFailure::Fatal(memory) = classify(libc::ENOMEM) else {
            panic!("ENOMEM must not fall back")
        };
        assert!(memory.contains("ulimit -l"), "{memory}");
        let SetupFailure::Fatal(files) = classify(libc::EMFILE) else {
            panic!("EMFILE must not fall back")
        };
        assert!(files.contains("ulimit -n"), "{files}");
    }
}
