//! Writing dirty buffers through AIO.
//!
//! # One write
//!
//! A write *claims* its buffers (IO_IN_PROGRESS, and a pin of the write's
//! own without a usage count, taken under the header lock that eviction
//! checks under), copies their pages under a shared content lock into a
//! preallocated bounce buffer (a change can then go on while the copy is
//! written: the buffer stays readable and writable), checksums the copy,
//! makes the WAL durable up to the newest page LSN in it (the WAL rule),
//! and starts one vectored write of a run of neighbouring blocks.
//!
//! Its end is the shared completion callback's ([`BufferWriteCallbacks`]),
//! run by whichever thread completes the I/O, as for reads: the written
//! buffers are clean unless changed since they were copied
//! (`JUST_DIRTIED`), a failed write leaves them dirty with IO_ERROR (the
//! next checkpoint writes them again), waiters wake and the write's pins go.
//! The stage callback publishes the write's wait reference on every
//! buffer, so that anyone who needs one of them (eviction, a checkpoint, a
//! DROP) waits for the write itself instead of polling.
//!
//! The issuer keeps the bounce buffer until it sees the write complete
//! ([`WriteSlots`]). A write shortened by the kernel ends its written
//! blocks in the callback; the rest stay claimed, and the issuer writes
//! them synchronously from the same copy.
//!
//! # Who writes
//!
//! - [`WriteSlots`]: a few writes in flight at once, each from its own
//!   bounce buffer, finished oldest first. Everything below builds on it.
//! - The write stream (`stream::WriteStream`, the checkpointer's) combines
//!   a sorted list into runs.
//! - *Write-ahead of the clock* ([`WriteBehind`]): PostgreSQL's background
//!   writer's LRU scan, done by the background writer thread and by a
//!   session that allocates fast (WAL replay): starts writes of the dirty
//!   buffers just ahead of the clock hand, so that the sweep finds them
//!   clean.
//! - A strategy ring starts writes of the dirty buffers it will reuse next
//!   (see `replace.rs`), so that a bulk load or vacuum keeps writes in
//!   flight instead of stalling on one at a time.
//! - Synchronous write-back (`flush_*`): one buffer or a run, waited for.
//!
//! A write in flight holds pins; dropping or cutting a relation's buffers
//! waits for it (`drop_buffers`), so that no write lands after a cut.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use lock_api::RawRwLock as _;

use super::{
    refcount, usage, BufferError, BufferId, BufferPool, BufferSession, BufferTag, BM_DIRTY,
    BM_IO_ERROR, BM_IO_IN_PROGRESS, BM_JUST_DIRTIED, BM_VALID,
};
use crate::aio::{
    AioError, IoCallbacks, IoResult, IoReturn, IoReturnCell, IoStatus, IoVec, IoView, WaitRef,
};
use crate::page::PageBytes;
use crate::storage::{AlignedBuf, SegmentFile, BLOCK_SIZE};

/// Most blocks one write writes (128 KiB, io_combine_limit's default),
/// when the buffers to write continue each other's blocks.
pub const WRITE_COMBINE_BLOCKS: usize = 16;

/// Most writes write-behind keeps in flight. Handles come from the
/// session's share (`io_max_concurrency`) next to its reads; a write is
/// started only with a handle free at once.
pub const WRITE_BEHIND_WRITES_MAX: usize = 8;
/// Descriptors one write-behind call looks at: a bound on the work added
/// to each call.
const WRITE_BEHIND_SCAN_PER_CALL: u64 = 32;
/// How far ahead of the clock hand write-behind goes, as a fraction of
/// the pool (1/8, and at least as many buffers as it writes at once):
/// buffers further on may still be used before the hand comes round.
const WRITE_BEHIND_AHEAD_DIVISOR: u64 = 8;
/// How long waiting for one buffer's I/O may poll (10 ms apart) while the
/// I/O has no wait reference to wait on: only between its claim and its
/// staging, or while its issuer rewrites the rest of a shortened write.
const IO_WAIT_POLLS_MAX: u32 = 6_000;
const IO_WAIT_POLL: std::time::Duration = std::time::Duration::from_millis(10);

/// Copies the pages of `run` (blocks `first_block..` of one fork, each
/// claimed for the write) into `bounce`, checksummed for their blocks.
/// Returns the newest page LSN among them.
fn copy_for_write(pool: &BufferPool, run: &[BufferId], first_block: u32, bounce: &mut [u8]) -> u64 {
    assert!(bounce.len() >= run.len() * BLOCK_SIZE);
    let mut newest = 0;
    for (k, &b) in run.iter().enumerate() {
        let d = pool.desc(b);
        let st = d.state.load(Ordering::SeqCst);
        assert!(
            st & BM_IO_IN_PROGRESS != 0 && refcount(st) > 0 && st & BM_VALID != 0,
            "buffer {b} copied for a write it is not claimed for (state {st:#x})"
        );
        let at = &mut bounce[k * BLOCK_SIZE..(k + 1) * BLOCK_SIZE];
        d.content.lock_shared();
        // SAFETY: pinned and share-locked: the page cannot change.
        unsafe {
            std::ptr::copy_nonoverlapping(pool.frame_ptr(b), at.as_mut_ptr(), BLOCK_SIZE);
            d.content.unlock_shared();
        }
        let page: &mut PageBytes = at.try_into().expect("one block");
        if crate::page::PageHeader::read(page).upper != 0 {
            crate::page::set_checksum(page, first_block + k as u32);
        }
        newest = newest.max(crate::page::page_lsn(page));
    }
    newest
}

/// The WAL rule: the log up to `newest` is durable before a page that
/// carries it is written (`tag` names the first page, for the error).
fn wal_before_write(pool: &BufferPool, tag: BufferTag, newest: u64) -> Result<(), BufferError> {
    match pool.wal_flush.get() {
        Some(hook) => hook(newest).map_err(|failure| BufferError::WalFlush {
            tag,
            lsn: format!("{:X}/{:X}", newest >> 32, newest as u32),
            failure,
        }),
        None => Ok(()),
    }
}

impl BufferPool {
    /// Ends the write of `run` (blocks `tag.block..`), done by the write
    /// callback or by the issuer: clean unless changed since the copy, or
    /// failed (still dirty, IO_ERROR). Drops the write's pins, except the
    /// first buffer's if `keep_first_pin` (a caller's pin it wrote under).
    fn end_write(&self, tag: BufferTag, run: &[BufferId], ok: bool, keep_first_pin: bool) {
        if ok && !run.is_empty() {
            self.stats
                .writes
                .fetch_add(run.len() as u64, Ordering::Relaxed);
            // The checkpoint syncs every segment written since the last
            // one (sessions never sync data files themselves).
            let segno = tag.block / self.blocks_per_segment();
            self.pending_syncs.lock().insert((tag.rel, tag.fork, segno));
        }
        for (k, &b) in run.iter().enumerate() {
            let d = self.desc(b);
            let mut header = d.header.lock();
            debug_assert_eq!(
                header.tag.map(|t| (t.rel, t.fork, t.block)),
                Some((tag.rel, tag.fork, tag.block + k as u32)),
                "a buffer changed identity while its write was in flight"
            );
            header.wait_ref = None;
            let st = d.state.load(Ordering::SeqCst);
            debug_assert!(
                st & BM_IO_IN_PROGRESS != 0,
                "write of buffer {b} ended twice"
            );
            if ok {
                if st & BM_JUST_DIRTIED == 0 {
                    d.state.fetch_and(!BM_DIRTY, Ordering::SeqCst);
                }
            } else {
                d.state.fetch_or(BM_IO_ERROR, Ordering::SeqCst);
            }
            d.state.fetch_and(!BM_IO_IN_PROGRESS, Ordering::SeqCst);
            drop(header);
            d.io_done.notify_all();
            if k > 0 || !keep_first_pin {
                self.unpin_shared(b);
            }
        }
    }
}

/// The buffer pool's write callbacks (see the module comment).
pub(super) struct BufferWriteCallbacks {
    pub pool: Weak<BufferPool>,
}

impl IoCallbacks for BufferWriteCallbacks {
    fn name(&self) -> &'static str {
        "buffer_writev"
    }

    /// Publishes the write's wait reference on its buffers (they are
    /// claimed and pinned already).
    fn stage(&self, io: &IoView<'_>, _cb_data: u8) {
        let Some(pool) = self.pool.upgrade() else {
            return;
        };
        for &id in io.data {
            let d = pool.desc(id as BufferId);
            d.header.lock().wait_ref = Some(io.wait_ref);
            d.io_done.notify_all();
        }
    }

    /// Ends the written buffers' I/O (all, on failure too); a shortened
    /// write leaves the rest to its issuer.
    fn complete_shared(&self, io: &IoView<'_>, prior: IoResult, _cb_data: u8) -> IoResult {
        let Some(pool) = self.pool.upgrade() else {
            return prior;
        };
        let run: Vec<BufferId> = io.data.iter().map(|&id| id as BufferId).collect();
        let Some(tag) = run.first().and_then(|&first| pool.tag(first)) else {
            return prior;
        };
        match prior.status {
            IoStatus::Ok | IoStatus::Warning => pool.end_write(tag, &run, true, false),
            IoStatus::Partial => {
                let written = (prior.result as usize).min(run.len());
                pool.end_write(tag, &run[..written], true, false);
                // The rest keep their claim, without a wait reference:
                // the issuer writes them (`WriteSlots::finish_oldest`).
                for &id in &run[written..] {
                    pool.desc(id).header.lock().wait_ref = None;
                }
            }
            IoStatus::Error | IoStatus::Unknown => pool.end_write(tag, &run, false, false),
        }
        prior
    }

    fn report(&self, ret: &IoReturn) -> String {
        format!("write {}", ret.target())
    }
}

/// One write of [`WriteSlots`]: its bounce buffer, preallocated, and what
/// it writes.
struct WriteSlot {
    bounce: AlignedBuf,
    ret: IoReturnCell,
    wref: Option<WaitRef>,
    /// The buffers written (blocks `tag.block..`), where they go.
    run: Vec<BufferId>,
    tag: Option<BufferTag>,
    file: Option<Arc<SegmentFile>>,
    offset: u64,
}

/// What a writer's writes did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Writes started (I/Os).
    pub writes: u64,
    /// Blocks they wrote.
    pub blocks: u64,
    /// Times a writer waited for one of its writes to make room or to
    /// reuse its buffer.
    pub waits: u64,
}

/// A few writes in flight at once, each from its own preallocated bounce
/// buffer of up to `blocks` blocks, finished oldest first. Every write
/// must be finished ([`WriteSlots::finish_all`]) before it is dropped.
pub struct WriteSlots {
    slots: Vec<WriteSlot>,
    free: Vec<usize>,
    /// Slots with a write in flight, oldest first.
    in_flight: VecDeque<usize>,
    blocks: usize,
    pub stats: WriteStats,
}

impl WriteSlots {
    /// Up to `writes` writes (at least 1) of up to `blocks` blocks each
    /// (1..=[`WRITE_COMBINE_BLOCKS`] × 8) in flight.
    pub fn new(writes: usize, blocks: usize) -> WriteSlots {
        let writes = writes.max(1);
        let blocks = blocks.clamp(1, 8 * WRITE_COMBINE_BLOCKS);
        WriteSlots {
            slots: (0..writes)
                .map(|_| WriteSlot {
                    bounce: AlignedBuf::new(blocks * BLOCK_SIZE),
                    ret: IoReturnCell::default(),
                    wref: None,
                    run: Vec::with_capacity(blocks),
                    tag: None,
                    file: None,
                    offset: 0,
                })
                .collect(),
            free: (0..writes).rev().collect(),
            in_flight: VecDeque::with_capacity(writes),
            blocks,
            stats: WriteStats::default(),
        }
    }

    /// Most blocks one write takes.
    pub fn blocks_per_write(&self) -> usize {
        self.blocks
    }

    /// Writes in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Whether a write could start now without waiting for one.
    pub fn has_room(&self) -> bool {
        !self.free.is_empty()
    }

    /// Whether buffer `id` is in one of the writes in flight.
    pub fn is_writing(&self, id: BufferId) -> bool {
        self.in_flight
            .iter()
            .any(|&slot| self.slots[slot].run.contains(&id))
    }

    /// Starts writing `run`: buffers claimed with
    /// [`BufferSession::claim_for_write`], holding blocks `tag.block..` of
    /// one fork within one segment, at most [`WriteSlots::blocks_per_write`].
    /// Waits for the oldest write if every slot is busy. With `nowait`, a
    /// write that would have to wait for an I/O handle is not started: its
    /// buffers are let go, still dirty, and false is returned. On error the
    /// buffers are let go as failed (still dirty, IO_ERROR).
    pub fn start(
        &mut self,
        s: &mut BufferSession,
        run: &[BufferId],
        tag: BufferTag,
        nowait: bool,
    ) -> Result<bool, BufferError> {
        assert!(!run.is_empty() && run.len() <= self.blocks);
        let pool = s.pool.clone();
        if self.free.is_empty() {
            if let Err(e) = self.finish_oldest(s) {
                s.end_unstarted_write(tag, run);
                return Err(e);
            }
        }
        let location = match pool.relation(tag.rel).locate(tag.fork, tag.block) {
            Ok(location) => location,
            Err(e) => {
                s.end_unstarted_write(tag, run);
                return Err(e.into());
            }
        };
        assert!(
            run.len() <= location.blocks_left_in_segment as usize,
            "a write of {} blocks from {tag} crosses a segment's end",
            run.len()
        );
        let token = if nowait {
            match s.aio.acquire_nb() {
                Ok(Some(token)) => token,
                Ok(None) => {
                    s.unclaim(run);
                    return Ok(false);
                }
                Err(e) => {
                    s.unclaim(run);
                    return Err(e.into());
                }
            }
        } else {
            match s.aio.acquire() {
                Ok(token) => token,
                Err(e) => {
                    s.unclaim(run);
                    return Err(e.into());
                }
            }
        };
        let slot = self.free.pop().expect("room was made above");
        let w = &mut self.slots[slot];
        let len = run.len() * BLOCK_SIZE;
        let newest = copy_for_write(&pool, run, tag.block, &mut w.bounce[..len]);
        let ready =
            wal_before_write(&pool, tag, newest).and_then(|()| {
                match injected_write_failure(&pool, tag, &location.file, location.offset, len) {
                    Some(failure) => Err(write_failed(&location.file, failure)),
                    None => Ok(()),
                }
            });
        let data: Vec<u64> = run.iter().map(|&id| u64::from(id)).collect();
        w.ret = IoReturnCell::default();
        let started = ready.and_then(|()| {
            (|| {
                s.aio.set_data(&token, &data)?;
                s.aio.add_callback(&token, pool.write_callback, 0)?;
                s.aio.set_return(&token, &w.ret)
            })()
            .map_err(BufferError::from)
        });
        if let Err(e) = started {
            // The write's error is the one to report; a handle that will
            // not go back is the session's to warn of at its end.
            let _ = s.aio.release(token);
            self.free.push(slot);
            s.end_unstarted_write(tag, run);
            return Err(e);
        }
        let wref = s.aio.wait_ref(&token);
        let iov = [IoVec::new(w.bounce.as_mut_ptr(), len)];
        // SAFETY: the slot's bounce buffer is not touched again until the
        // write is finished (`finish_oldest` waits for it), and `self`
        // cannot be dropped with writes in flight.
        let started = unsafe {
            s.aio
                .start_writev(token, &location.file, location.offset, &iov)
        };
        if let Err(e) = started {
            // start_writev gives the handle back on failure; nothing ran.
            self.free.push(slot);
            s.end_unstarted_write(tag, run);
            return Err(write_failed(&location.file, e));
        }
        // Staged: the write's completion ends the claims now.
        s.note_claims_gone(run);
        w.run.clear();
        w.run.extend_from_slice(run);
        w.tag = Some(tag);
        w.file = Some(location.file);
        w.offset = location.offset;
        w.wref = Some(wref);
        self.in_flight.push_back(slot);
        self.stats.writes += 1;
        self.stats.blocks += run.len() as u64;
        Ok(true)
    }

    /// Waits for the oldest write and finishes it: a shortened write's
    /// remaining blocks are written synchronously from the same copy.
    /// Returns its error, if it failed (its buffers stay dirty).
    pub fn finish_oldest(&mut self, s: &mut BufferSession) -> Result<(), BufferError> {
        let slot = self
            .in_flight
            .pop_front()
            .expect("finish_oldest with no write in flight");
        self.free.push(slot);
        let w = &mut self.slots[slot];
        let wref = w.wref.take().expect("a slot in flight has a write");
        let tag = w.tag.take().expect("a slot in flight has a tag");
        let file = w.file.take().expect("a slot in flight has a file");
        if !s.aio.aio().is_done(wref) {
            self.stats.waits += 1;
        }
        s.aio.wait(wref).map_err(|e| write_failed(&file, e))?;
        let ret = w.ret.take().expect("our own write is collected by wait");
        let written = match ret.result.status {
            IoStatus::Ok | IoStatus::Warning => return Ok(()),
            IoStatus::Partial => (ret.result.result as usize).min(w.run.len()),
            IoStatus::Error | IoStatus::Unknown => {
                let source = match s.aio.aio().check(&ret) {
                    Err(e) => e,
                    Ok(_) => AioError::Io {
                        message: format!("could not write {}", ret.target()),
                        errno: None,
                    },
                };
                return Err(write_failed(&file, source));
            }
        };
        // The callback ended the written blocks; the rest are still ours.
        let rest_tag = BufferTag {
            block: tag.block + written as u32,
            ..tag
        };
        let rest = &w.run[written..];
        let offset = w.offset + (written * BLOCK_SIZE) as u64;
        let result = crate::aio::write_blocks(
            &mut s.aio,
            &file,
            offset,
            &w.bounce[written * BLOCK_SIZE..w.run.len() * BLOCK_SIZE],
        )
        .map_err(|e| write_failed(&file, e));
        s.pool.end_write(rest_tag, rest, result.is_ok(), false);
        result
    }

    /// Finishes the writes that have completed, oldest first, stopping at
    /// the first still in flight.
    pub fn finish_done(&mut self, s: &mut BufferSession) -> Result<(), BufferError> {
        while let Some(&slot) = self.in_flight.front() {
            let wref = self.slots[slot].wref.expect("a slot in flight has a write");
            if !s.aio.aio().is_done(wref) {
                break;
            }
            self.finish_oldest(s)?;
        }
        Ok(())
    }

    /// Waits for and finishes every write in flight, all of them even
    /// after one failed (their buffers must not stay busy); returns the
    /// first error.
    pub fn finish_all(&mut self, s: &mut BufferSession) -> Result<(), BufferError> {
        let mut result = Ok(());
        while !self.in_flight.is_empty() {
            let finished = self.finish_oldest(s);
            if result.is_ok() {
                result = finished;
            }
        }
        debug_assert_eq!(self.free.len(), self.slots.len());
        result
    }
}

impl Drop for WriteSlots {
    fn drop(&mut self) {
        // A write still in flight would write from freed memory.
        assert!(
            self.in_flight.is_empty() || std::thread::panicking(),
            "write slots dropped with {} writes in flight",
            self.in_flight.len()
        );
    }
}

impl BufferSession {
    /// Claims buffer `id` for a write if it still holds `want` (any page
    /// with None), valid and dirty, with no I/O in progress, and
    /// `qualifies` accepts its state word: IO_IN_PROGRESS, and a pin of the
    /// write's own without a usage count, taken under the header lock that
    /// eviction checks under. Returns its tag, or None if it does not
    /// qualify (nothing is claimed then).
    pub fn claim_for_write(
        &mut self,
        id: BufferId,
        want: Option<BufferTag>,
        qualifies: impl Fn(u64) -> bool,
    ) -> Option<BufferTag> {
        let d = self.pool.desc(id);
        let header = d.header.lock();
        let tag = header.tag?;
        let st = d.state.load(Ordering::SeqCst);
        if want.is_some_and(|w| w != tag)
            || st & (BM_DIRTY | BM_VALID) != (BM_DIRTY | BM_VALID)
            || st & BM_IO_IN_PROGRESS != 0
            || !qualifies(st)
        {
            return None;
        }
        self.pool.pin_for_io(id);
        d.state.fetch_or(BM_IO_IN_PROGRESS, Ordering::SeqCst);
        d.state
            .fetch_and(!(BM_JUST_DIRTIED | BM_IO_ERROR), Ordering::SeqCst);
        drop(header);
        self.note_claim(id, true);
        Some(tag)
    }

    /// Ends the claims of `run` (blocks `tag.block..`) as a failed write
    /// that was never started: still dirty, IO_ERROR.
    fn end_unstarted_write(&mut self, tag: BufferTag, run: &[BufferId]) {
        self.note_claims_gone(run);
        self.pool.end_write(tag, run, false, false);
    }

    /// Lets go of buffers claimed with [`BufferSession::claim_for_write`]
    /// without writing them (still dirty).
    pub fn unclaim(&mut self, run: &[BufferId]) {
        for &id in run {
            self.terminate_buffer_io(id, 0, 0);
            self.pool.unpin_shared(id);
        }
    }

    /// Claims, after `first` (claimed, holding `tag`), the buffers of
    /// `candidates` that hold the following blocks, in order, while they
    /// qualify, up to `max` blocks in all and the end of `tag`'s segment.
    /// Returns the run.
    pub fn claim_run(
        &mut self,
        first: BufferId,
        tag: BufferTag,
        candidates: &[BufferId],
        max: usize,
        qualifies: impl Fn(u64) -> bool,
    ) -> Vec<BufferId> {
        let per_segment = self.pool.blocks_per_segment();
        let room = (per_segment - tag.block % per_segment) as usize;
        let max = max
            .min(room)
            .min(self.pool.aio.config().io_max_combine_limit);
        let mut run = vec![first];
        for (&next, k) in candidates.iter().zip(1u32..) {
            if run.len() >= max {
                break;
            }
            let want = BufferTag {
                block: tag.block + k,
                ..tag
            };
            if self.claim_for_write(next, Some(want), &qualifies).is_none() {
                break;
            }
            run.push(next);
        }
        run
    }

    /// Waits until no I/O is in progress on buffer `id`, joining it through
    /// its wait reference when it has one.
    pub fn wait_buffer_io(&mut self, id: BufferId) -> Result<(), BufferError> {
        let pool = self.pool.clone();
        let d = pool.desc(id);
        let mut polls = 0;
        loop {
            let mut header = d.header.lock();
            if d.state.load(Ordering::SeqCst) & BM_IO_IN_PROGRESS == 0 {
                return Ok(());
            }
            if let Some(wref) = header.wait_ref {
                drop(header);
                self.aio.wait(wref)?;
                continue;
            }
            // Claimed but not staged yet (perhaps by us: submit ours), or
            // the rest of a shortened write its issuer is writing. Not
            // claimed by us and not started: that would wait for ever.
            debug_assert!(
                self.claims.iter().all(|c| c.id != id),
                "waiting for buffer {id}'s I/O, claimed by this session and not started"
            );
            drop(header);
            self.aio.submit_staged();
            header = d.header.lock();
            if d.state.load(Ordering::SeqCst) & BM_IO_IN_PROGRESS != 0 && header.wait_ref.is_none()
            {
                polls += 1;
                if polls > IO_WAIT_POLLS_MAX {
                    return Err(BufferError::Io(format!(
                        "the I/O in progress on buffer {id} ({}) did not finish within {} s",
                        header
                            .tag
                            .map_or_else(|| "no page".into(), |t| t.to_string()),
                        IO_WAIT_POLL.as_secs_f64() * f64::from(IO_WAIT_POLLS_MAX)
                    )));
                }
                d.io_done.wait_for(&mut header, IO_WAIT_POLL);
            }
        }
    }
}

/// The failure the `buffer-before-write` injection point makes of a write
/// of `len` bytes at `offset` of `file`, starting with block `tag`, if
/// any: how tests fail a write as a full disk would, on every write path.
fn injected_write_failure(
    pool: &BufferPool,
    tag: BufferTag,
    file: &SegmentFile,
    offset: u64,
    len: usize,
) -> Option<AioError> {
    let errno = pool
        .aio
        .injections()
        .injected_errno(crate::inject::BUFFER_BEFORE_WRITE, u64::from(tag.block))?;
    Some(AioError::Io {
        message: format!(
            "could not write {}: {}",
            file.describe(offset, len),
            crate::aio::errno_text(errno)
        ),
        errno: Some(errno),
    })
}

/// A failed data-file write as callers see it: naming the file, and with
/// the full-disk hint where the errno says so.
fn write_failed(file: &SegmentFile, source: AioError) -> BufferError {
    BufferError::Write {
        path: file.path().to_path_buf(),
        source,
    }
}

/// Whether a buffer in state `st` is one the clock sweep takes as it
/// reaches it (and, dirty, must write first).
pub(super) fn is_next_victim(st: u64) -> bool {
    refcount(st) == 0 && usage(st) == 0
}

// ---- write-ahead of the clock ------------------------------------------

/// How far one pass of [`BufferSession::clean_ahead_of_clock`] goes.
#[derive(Debug, Clone, Copy)]
pub struct CleanLimits {
    /// Descriptors looked at.
    pub scan: u64,
    /// How far past the clock hand it may look.
    pub ahead: u64,
    /// Writes started.
    pub writes: u64,
    /// Stop once this many reusable buffers (clean or being made clean)
    /// lie ahead of the hand.
    pub reusable: u64,
}

/// What one pass of [`BufferSession::clean_ahead_of_clock`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanOutcome {
    pub scanned: u64,
    /// Buffers the sweep can take as it reaches them: clean ones, and the
    /// dirty ones whose writes this pass started.
    pub reusable: u64,
    /// Writes started.
    pub written: u64,
    /// Stopped at `CleanLimits::writes` with more to write
    /// (PostgreSQL's maxwritten_clean).
    pub hit_write_limit: bool,
}

/// Writes ahead of the clock sweep (PostgreSQL's background writer's LRU
/// scan), for one session or for the background writer. Every write must
/// be finished ([`BufferSession::finish_write_behind`]) before it is
/// dropped.
pub struct WriteBehind {
    slots: WriteSlots,
    /// Clock position up to which descriptors have been looked at.
    scanned_to: u64,
}

impl WriteBehind {
    /// Up to `writes` single-block writes in flight (at least 1), their
    /// bounce buffers allocated here.
    pub fn new(writes: usize) -> WriteBehind {
        WriteBehind {
            slots: WriteSlots::new(writes, 1),
            scanned_to: 0,
        }
    }

    /// Writes in flight.
    pub fn in_flight(&self) -> usize {
        self.slots.in_flight()
    }

    /// Makes the next pass start at the clock hand, not where the last
    /// stopped (the background writer's rounds each look afresh).
    pub fn restart_at_clock(&mut self) {
        self.scanned_to = 0;
    }

    pub fn stats(&self) -> WriteStats {
        self.slots.stats
    }
}

impl BufferSession {
    /// Finishes the writes of `wb` that have completed, then looks at the
    /// descriptors just ahead of the clock hand and starts writes of the
    /// dirty ones the sweep takes next: a bounded step for a session that
    /// allocates fast (WAL replay). Waits only for a write of its own, and
    /// only when every slot is busy and a buffer is waiting to be written.
    pub fn write_behind(&mut self, wb: &mut WriteBehind) -> Result<(), BufferError> {
        let nbuffers = u64::from(self.pool.nbuffers);
        let ahead = (nbuffers / WRITE_BEHIND_AHEAD_DIVISOR)
            .max(WRITE_BEHIND_WRITES_MAX as u64)
            .min(nbuffers);
        self.clean_ahead_of_clock(
            wb,
            CleanLimits {
                scan: WRITE_BEHIND_SCAN_PER_CALL,
                ahead,
                writes: u64::MAX,
                reusable: u64::MAX,
            },
        )
        .map(|_| ())
    }

    /// One pass ahead of the clock hand within `limits`: counts the
    /// buffers the sweep can take as it reaches them and starts writes of
    /// the dirty ones (see [`CleanLimits`]). Continues where the last pass
    /// of `wb` stopped if the hand has not passed it.
    pub fn clean_ahead_of_clock(
        &mut self,
        wb: &mut WriteBehind,
        limits: CleanLimits,
    ) -> Result<CleanOutcome, BufferError> {
        wb.slots.finish_done(self)?;
        let pool = self.pool.clone();
        let nbuffers = u64::from(pool.nbuffers);
        let clock = pool.clock.load(Ordering::Relaxed);
        let start = wb.scanned_to.max(clock);
        let end = (clock + limits.ahead.min(nbuffers)).min(start + limits.scan);
        let mut outcome = CleanOutcome::default();
        let mut pos = start;
        while pos < end && outcome.reusable < limits.reusable {
            let id = (pos % nbuffers) as BufferId;
            let st = pool.state(id);
            if !is_next_victim(st) {
                pos += 1;
                continue;
            }
            if st & BM_DIRTY == 0 {
                outcome.reusable += 1;
                pos += 1;
                continue;
            }
            if outcome.written >= limits.writes {
                outcome.hit_write_limit = true;
                break;
            }
            if let Some(tag) = self.claim_for_write(id, None, is_next_victim) {
                if !wb.slots.start(self, &[id], tag, true)? {
                    // No I/O handle free now: look here again next time.
                    break;
                }
                outcome.written += 1;
                outcome.reusable += 1;
            }
            pos += 1;
        }
        outcome.scanned = pos - start;
        wb.scanned_to = pos;
        Ok(outcome)
    }

    /// Waits for and finishes every write of `wb` in flight.
    pub fn finish_write_behind(&mut self, wb: &mut WriteBehind) -> Result<(), BufferError> {
        wb.slots.finish_all(self)
    }
}

// ---- synchronous write-back ---------------------------------------------

/// Synchronous write-back: one buffer, a run of a ring's victims, a
/// relation, or the whole pool.
impl BufferSession {
    /// Writes a dirty buffer back and waits for it. A change made while it
    /// was being written keeps it dirty.
    pub fn flush_buffer(&mut self, id: BufferId) -> Result<(), BufferError> {
        self.flush_buffers(id, &[])
    }

    /// Like [`BufferSession::flush_buffer`], writing in the same I/O the
    /// buffers of `after` that hold the blocks following `id`'s, as long
    /// as they are dirty and nobody uses them: a ring's next victims, so
    /// that a bulk load writes runs of pages instead of one at a time. The
    /// run stops at the first that does not qualify, at a segment's end,
    /// and at [`WRITE_COMBINE_BLOCKS`]. `id` is pinned by the caller.
    pub fn flush_buffers(&mut self, id: BufferId, after: &[BufferId]) -> Result<(), BufferError> {
        // Wait for a write (or read) of it in progress, then take it; a
        // bounded number of rounds, as each follows another writer's
        // claim of it.
        let mut tag = None;
        for _ in 0..FLUSH_CLAIM_ROUNDS_MAX {
            if self.pool.state(id) & BM_DIRTY == 0 {
                return Ok(());
            }
            self.wait_buffer_io(id)?;
            tag = self.claim_for_write(id, None, |_| true);
            if tag.is_some() {
                break;
            }
        }
        let Some(tag) = tag else {
            return Err(BufferError::Io(format!(
                "could not write buffer {id}: other writes kept taking it ({FLUSH_CLAIM_ROUNDS_MAX} times)"
            )));
        };
        let run = self.claim_run(id, tag, after, WRITE_COMBINE_BLOCKS, |st| refcount(st) == 0);
        let mut slots = self
            .sync_writes
            .take()
            .unwrap_or_else(|| WriteSlots::new(1, WRITE_COMBINE_BLOCKS));
        let result = slots
            .start(self, &run, tag, false)
            .and_then(|_| slots.finish_all(self));
        self.sync_writes = Some(slots);
        result
    }

    /// Writes back every dirty buffer of the pool, one at a time (tools
    /// and `init`; the checkpointer writes through a write stream).
    pub fn flush_all(&mut self) -> Result<(), BufferError> {
        self.flush_matching(|_| true)
    }

    /// Writes back the dirty buffers of `fork` of `rel`.
    pub fn flush_fork(&mut self, rel: u32, fork: crate::storage::Fork) -> Result<(), BufferError> {
        self.flush_matching(|t| t.rel == rel && t.fork == fork)
    }

    /// Writes back the dirty buffers of every fork of `rel`, in block
    /// order, combining neighbours into one write as eviction from a ring
    /// does: what a table that skipped the WAL does before its creator
    /// commits (its files are synced next).
    pub fn flush_relation(&mut self, rel: u32) -> Result<(), BufferError> {
        // Our own writes ahead first: the rest of one the kernel shortened
        // stays claimed until we write it, and waiting for it would wait
        // for ourselves.
        self.finish_writes_ahead()?;
        let pool = self.pool.clone();
        let mut dirty: Vec<(BufferTag, BufferId)> = pool
            .dirty_buffers()
            .into_iter()
            .filter(|(t, _)| t.rel == rel)
            .collect();
        dirty.sort_unstable_by_key(|(t, _)| (t.fork as u8, t.block));
        for (i, &(tag, id)) in dirty.iter().enumerate() {
            // Written already as a follower of an earlier one in the run,
            // or written by someone else meanwhile: flush_buffers returns
            // at once for a clean buffer.
            self.pin(id)?;
            let result = if pool.tag(id) == Some(tag) {
                let followers: Vec<BufferId> = dirty[i + 1..]
                    .iter()
                    .zip(1u32..)
                    .take(WRITE_COMBINE_BLOCKS - 1)
                    .take_while(|((t, _), k)| t.fork == tag.fork && t.block == tag.block + k)
                    .map(|(&(_, next), _)| next)
                    .collect();
                self.flush_buffers(id, &followers)
            } else {
                Ok(())
            };
            self.release(id);
            result?;
        }
        debug_assert!(
            (0..pool.nbuffers).all(|id| pool.state(id) & BM_DIRTY == 0
                || pool.tag(id).is_none_or(|t| t.rel != rel)
                || refcount(pool.state(id)) > 0),
            "a dirty unpinned buffer of relation {rel} is left after flushing it"
        );
        Ok(())
    }

    fn flush_matching(&mut self, wanted: impl Fn(&BufferTag) -> bool) -> Result<(), BufferError> {
        // As in `flush_relation`.
        self.finish_writes_ahead()?;
        for id in 0..self.pool.nbuffers {
            if self.pool.state(id) & BM_DIRTY != 0 && self.pool.tag(id).is_some_and(|t| wanted(&t))
            {
                self.pin(id)?;
                // The frame may have changed hands before the pin.
                let result = if self.pool.tag(id).is_some_and(|t| wanted(&t)) {
                    self.flush_buffer(id)
                } else {
                    Ok(())
                };
                self.release(id);
                result?;
            }
        }
        Ok(())
    }
}

/// Rounds [`BufferSession::flush_buffers`] waits for other writers' claims
/// of its buffer before giving up.
const FLUSH_CLAIM_ROUNDS_MAX: u32 = 1_000;
