//! Writing dirty buffers: the steps every write takes (copy under the
//! content lock, checksum, the WAL rule, ending the buffers' I/O), shared
//! by the synchronous write-back (`flush_buffers` and the `flush_*` of a
//! relation or the pool, at the end of this file) and by *write-behind*.
//!
//! # Write-behind
//!
//! A session that allocates buffers fast (WAL replay reading pages ahead)
//! finds the clock sweep's victims dirty, and without a background writer
//! each eviction waits for a synchronous write: with prefetching, replay
//! spent nearly all its time there. [`WriteBehind`] is PostgreSQL's
//! background writer's LRU scan done by the allocating session itself,
//! through AIO: each call looks at the descriptors just ahead of the clock
//! hand and starts asynchronous writes of those the sweep would take next
//! (unpinned, usage count 0, dirty), up to [`WRITE_BEHIND_WRITES_MAX`] in
//! flight, each from its own preallocated bounce buffer; later calls
//! finish the writes that have completed. When the hand gets there the
//! buffers are clean and are taken without a write.
//!
//! A buffer being written holds a pin without a usage count (the sweep
//! skips it; it does not look used) and its I/O flag, as a ring buffer
//! written with its predecessor does; a change made meanwhile keeps it
//! dirty (`JUST_DIRTIED`). Eviction of a relation's buffers (DROP,
//! truncation) leaves pinned buffers alone, so a caller that is about to
//! drop or cut files finishes every write first
//! ([`BufferSession::finish_write_behind`]): a write completing after a
//! cut would extend the file again.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use lock_api::RawRwLock as _;

use super::{
    refcount, usage, BufferError, BufferId, BufferPool, BufferSession, BufferTag, BM_DIRTY,
    BM_IO_ERROR, BM_IO_IN_PROGRESS, BM_JUST_DIRTIED, BM_VALID,
};
use crate::aio::{AioError, IoReturnCell, IoVec, WaitRef};
use crate::page::PageBytes;
use crate::storage::{AlignedBuf, Fork, SegmentFile, BLOCK_SIZE};

/// Most blocks one write-back writes (128 KiB, io_combine_limit's
/// default), when a ring's victims continue each other's blocks.
pub const WRITE_COMBINE_BLOCKS: usize = 16;

/// Most writes write-behind keeps in flight. Handles come from the
/// session's share (`io_max_concurrency`) next to its reads; a write is
/// started only with a handle free at once.
pub const WRITE_BEHIND_WRITES_MAX: usize = 8;
/// Descriptors one call looks at: a bound on the work added to each call.
const WRITE_BEHIND_SCAN_PER_CALL: u64 = 32;
/// How far ahead of the clock hand write-behind goes, as a fraction of
/// the pool (1/8, and at least as many buffers as it writes at once):
/// buffers further on may still be used before the hand comes round.
const WRITE_BEHIND_AHEAD_DIVISOR: u64 = 8;

/// Copies the pages of `run` (blocks `first_block..` of one fork, each
/// pinned with its I/O flag ours) into `bounce`, checksummed for their
/// blocks. Returns the newest page LSN among them.
pub(super) fn copy_for_write(
    pool: &BufferPool,
    run: &[BufferId],
    first_block: u32,
    bounce: &mut [u8],
) -> u64 {
    assert!(bounce.len() >= run.len() * BLOCK_SIZE);
    let mut newest = 0;
    for (k, &b) in run.iter().enumerate() {
        let d = pool.desc(b);
        debug_assert!(d.state.load(Ordering::SeqCst) & BM_IO_IN_PROGRESS != 0);
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
pub(super) fn wal_before_write(
    pool: &BufferPool,
    tag: BufferTag,
    newest: u64,
) -> Result<(), BufferError> {
    match pool.wal_flush.get() {
        Some(hook) => hook(newest).map_err(|reason| BufferError::WalFlush {
            tag,
            lsn: format!("{:X}/{:X}", newest >> 32, newest as u32),
            reason,
        }),
        None => Ok(()),
    }
}

impl BufferSession {
    /// Ends the write of `run` (whose first block is `tag`): clean unless
    /// changed while it was written, or failed. Drops the write's own pins
    /// without a usage count (all of the run's but the first's, or all
    /// with `pins_of_write_from` = 0).
    pub(super) fn end_write(
        &self,
        tag: BufferTag,
        run: &[BufferId],
        ok: bool,
        pins_of_write_from: usize,
    ) {
        let pool = &self.pool;
        if ok {
            pool.stats
                .writes
                .fetch_add(run.len() as u64, Ordering::Relaxed);
            let segno = tag.block / pool.blocks_per_segment();
            pool.pending_syncs.lock().insert((tag.rel, tag.fork, segno));
        }
        for (k, &b) in run.iter().enumerate() {
            if ok {
                let just_dirtied = pool.desc(b).state.load(Ordering::SeqCst) & BM_JUST_DIRTIED != 0;
                let clear = if just_dirtied { 0 } else { BM_DIRTY };
                self.terminate_buffer_io(b, 0, clear);
            } else {
                self.terminate_buffer_io(b, BM_IO_ERROR, 0);
            }
            if k >= pins_of_write_from {
                pool.unpin_shared(b);
            }
        }
    }

    /// Finishes the writes of `wb` that have completed, then starts writes
    /// of the dirty buffers the clock sweep reaches next (see the module
    /// comment). Waits only for a write of its own, and only when every
    /// slot is busy and a buffer is waiting to be written.
    pub fn write_behind(&mut self, wb: &mut WriteBehind) -> Result<(), BufferError> {
        let aio = Arc::clone(self.aio.aio());
        while let Some(&slot) = wb.in_flight.front() {
            let wref = wb.slots[slot].wref.expect("a slot in flight has a write");
            if !aio.is_done(wref) {
                break;
            }
            wb.in_flight.pop_front();
            self.finish_write_slot(wb, slot)?;
        }
        let pool = Arc::clone(&self.pool);
        let nbuffers = pool.nbuffers as u64;
        let clock = pool.clock.load(Ordering::Relaxed);
        let start = wb.scanned_to.max(clock);
        let ahead = (nbuffers / WRITE_BEHIND_AHEAD_DIVISOR)
            .max(WRITE_BEHIND_WRITES_MAX as u64)
            .min(nbuffers);
        let end = (clock + ahead).min(start + WRITE_BEHIND_SCAN_PER_CALL);
        let mut pos = start;
        while pos < end {
            let id = (pos % nbuffers) as BufferId;
            if is_next_victim_dirty(pool.state(id)) {
                if wb.free.is_empty() {
                    let slot = wb
                        .in_flight
                        .pop_front()
                        .expect("no slot free: all in flight");
                    self.finish_write_slot(wb, slot)?;
                }
                if !self.start_write_slot(wb, id)? {
                    // No I/O handle free now: look here again next time.
                    break;
                }
            }
            pos += 1;
        }
        wb.scanned_to = pos;
        Ok(())
    }

    /// Waits for and finishes every write of `wb` in flight.
    pub fn finish_write_behind(&mut self, wb: &mut WriteBehind) -> Result<(), BufferError> {
        let mut result = Ok(());
        while let Some(slot) = wb.in_flight.pop_front() {
            // Every write is finished, even after one failed: their
            // buffers must not stay pinned and busy.
            let finished = self.finish_write_slot(wb, slot);
            if result.is_ok() {
                result = finished;
            }
        }
        debug_assert_eq!(wb.free.len(), wb.slots.len());
        result
    }

    /// Claims buffer `id` for a write if it is still the sweep's next dirty
    /// victim, and starts writing it from a free slot. Returns false if no
    /// I/O handle was free (nothing is claimed then).
    fn start_write_slot(
        &mut self,
        wb: &mut WriteBehind,
        id: BufferId,
    ) -> Result<bool, BufferError> {
        let pool = Arc::clone(&self.pool);
        let d = pool.desc(id);
        let tag = {
            let header = d.header.lock();
            let st = d.state.load(Ordering::SeqCst);
            let Some(tag) = header.tag.filter(|_| is_next_victim_dirty(st)) else {
                return Ok(true);
            };
            // A pin without a usage count, and the I/O, under the header
            // lock eviction checks under (as `flush_buffers` takes a ring
            // buffer written with its predecessor).
            pool.pin_for_io(id);
            d.state.fetch_or(BM_IO_IN_PROGRESS, Ordering::SeqCst);
            d.state.fetch_and(!BM_JUST_DIRTIED, Ordering::SeqCst);
            tag
        };
        let give_up = |s: &Self, ok: bool| s.end_write(tag, &[id], ok, 0);
        let location = match pool.relation(tag.rel).locate(tag.fork, tag.block) {
            Ok(location) => location,
            Err(e) => {
                give_up(self, false);
                return Err(e.into());
            }
        };
        let token = match self.aio.acquire_nb() {
            Ok(Some(token)) => token,
            Ok(None) => {
                // Still dirty: nothing was written.
                self.terminate_buffer_io(id, 0, 0);
                pool.unpin_shared(id);
                return Ok(false);
            }
            Err(e) => {
                self.terminate_buffer_io(id, 0, 0);
                pool.unpin_shared(id);
                return Err(e.into());
            }
        };
        let slot = wb.free.pop().expect("the caller made a slot free");
        let s = &mut wb.slots[slot];
        let newest = copy_for_write(&pool, &[id], tag.block, &mut s.bounce[..]);
        let ready =
            wal_before_write(&pool, tag, newest).and_then(|()| {
                match injected_write_failure(
                    &pool,
                    tag,
                    &location.file,
                    location.offset,
                    BLOCK_SIZE,
                ) {
                    Some(failure) => Err(write_failed(&location.file, failure)),
                    None => Ok(()),
                }
            });
        if let Err(e) = ready {
            self.aio.release(token)?;
            wb.free.push(slot);
            give_up(self, false);
            return Err(e);
        }
        s.ret = IoReturnCell::default();
        let wref = self.aio.wait_ref(&token);
        let started = self.aio.set_return(&token, &s.ret).and_then(|()| {
            let iov = [IoVec::new(s.bounce.as_mut_ptr(), BLOCK_SIZE)];
            // SAFETY: the slot's bounce buffer is not touched again until
            // the write is finished (`finish_write_slot` waits for it), and
            // lives in `wb`, which the caller keeps until every write is
            // finished.
            unsafe {
                self.aio
                    .start_writev(token, &location.file, location.offset, &iov)
            }
        });
        if let Err(e) = started {
            wb.free.push(slot);
            give_up(self, false);
            return Err(write_failed(&location.file, e));
        }
        s.buffer = Some((id, tag, location.file, location.offset));
        s.wref = Some(wref);
        wb.in_flight.push_back(slot);
        wb.stats.writes += 1;
        Ok(true)
    }

    /// Waits for the write of `slot` (taken out of the in-flight queue),
    /// completes a shortened one synchronously, and ends it.
    fn finish_write_slot(&mut self, wb: &mut WriteBehind, slot: usize) -> Result<(), BufferError> {
        let s = &mut wb.slots[slot];
        let wref = s.wref.take().expect("a slot in flight has a write");
        let (id, tag, file, offset) = s.buffer.take().expect("a slot in flight has a buffer");
        wb.free.push(slot);
        let written = self
            .aio
            .wait(wref)
            .and_then(|()| {
                let ret = s.ret.take().expect("our own write is collected by wait");
                match crate::aio::blocks_transferred(&self.aio, &ret)? {
                    1 => Ok(()),
                    // A write shorter than the block: write it again, whole.
                    _ => crate::aio::write_blocks(&mut self.aio, &file, offset, &s.bounce[..]),
                }
            })
            .map_err(|source| write_failed(&file, source));
        self.end_write(tag, &[id], written.is_ok(), 0);
        written
    }
}

/// The failure the `buffer-before-write` injection point makes of a write
/// of `len` bytes at `offset` of `file`, starting with block `tag`, if
/// any: how tests fail a write as a full disk would, on every write path.
pub(super) fn injected_write_failure(
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
pub(super) fn write_failed(file: &SegmentFile, source: AioError) -> BufferError {
    BufferError::Write {
        path: file.path().to_path_buf(),
        source,
    }
}

/// Whether a buffer in state `st` is one the clock sweep takes as it
/// reaches it and must write first.
fn is_next_victim_dirty(st: u64) -> bool {
    refcount(st) == 0
        && usage(st) == 0
        && st & (BM_DIRTY | BM_VALID) == (BM_DIRTY | BM_VALID)
        && st & BM_IO_IN_PROGRESS == 0
}

/// One write of [`WriteBehind`]: its bounce buffer, preallocated.
struct WriteSlot {
    bounce: AlignedBuf,
    ret: IoReturnCell,
    wref: Option<WaitRef>,
    /// The buffer being written, its block and where it goes.
    buffer: Option<(BufferId, BufferTag, Arc<SegmentFile>, u64)>,
}

/// What write-behind did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteBehindStats {
    /// Writes started.
    pub writes: u64,
}

/// Writes ahead of the clock sweep (see the module comment), for one
/// session. Every write must be finished
/// ([`BufferSession::finish_write_behind`]) before it is dropped.
pub struct WriteBehind {
    slots: Vec<WriteSlot>,
    free: Vec<usize>,
    /// Slots with a write in flight, oldest first.
    in_flight: VecDeque<usize>,
    /// Clock position up to which descriptors have been looked at.
    scanned_to: u64,
    pub stats: WriteBehindStats,
}

impl WriteBehind {
    /// Up to `writes` (at most [`WRITE_BEHIND_WRITES_MAX`], at least 1)
    /// writes in flight, their bounce buffers allocated here.
    pub fn new(writes: usize) -> WriteBehind {
        let writes = writes.clamp(1, WRITE_BEHIND_WRITES_MAX);
        WriteBehind {
            slots: (0..writes)
                .map(|_| WriteSlot {
                    bounce: AlignedBuf::new(BLOCK_SIZE),
                    ret: IoReturnCell::default(),
                    wref: None,
                    buffer: None,
                })
                .collect(),
            free: (0..writes).rev().collect(),
            in_flight: VecDeque::with_capacity(writes),
            scanned_to: 0,
            stats: WriteBehindStats::default(),
        }
    }

    /// Writes in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }
}

impl Drop for WriteBehind {
    fn drop(&mut self) {
        // A write still in flight would write from freed memory.
        assert!(
            self.in_flight.is_empty() || std::thread::panicking(),
            "write-behind dropped with {} writes in flight",
            self.in_flight.len()
        );
    }
}

/// Synchronous write-back: one buffer, a run of a ring's victims, a
/// relation, or the whole pool.
impl BufferSession {
    /// Writes a dirty buffer back: copied under a shared content lock into
    /// a bounce buffer, checksummed for its block, written through AIO. A
    /// change made while it was being written keeps it dirty.
    pub fn flush_buffer(&mut self, id: BufferId) -> Result<(), BufferError> {
        self.flush_buffers(id, &[])
    }

    /// Like [`BufferSession::flush_buffer`], writing in the same I/O the
    /// buffers of `after` that hold the blocks following `id`'s, as long
    /// as they are dirty and nobody uses them: a ring's next victims, so
    /// that a bulk load writes runs of pages instead of one at a time. The
    /// run stops at the first that does not qualify, at a segment's end,
    /// and at [`WRITE_COMBINE_BLOCKS`].
    pub fn flush_buffers(&mut self, id: BufferId, after: &[BufferId]) -> Result<(), BufferError> {
        let pool = Arc::clone(&self.pool);
        let d = pool.desc(id);
        // Take the buffer's I/O for the write.
        let tag = loop {
            let mut header = d.header.lock();
            let st = d.state.load(Ordering::SeqCst);
            if st & BM_DIRTY == 0 {
                return Ok(());
            }
            if st & BM_IO_IN_PROGRESS == 0 {
                d.state.fetch_or(BM_IO_IN_PROGRESS, Ordering::SeqCst);
                d.state.fetch_and(!BM_JUST_DIRTIED, Ordering::SeqCst);
                break header.tag.expect("a dirty buffer has a tag");
            }
            d.io_done
                .wait_for(&mut header, std::time::Duration::from_millis(10));
        };
        let rel = pool.relation(tag.rel);
        let loc = match rel.locate(tag.fork, tag.block) {
            Ok(loc) => loc,
            Err(e) => {
                self.terminate_buffer_io(id, BM_IO_ERROR, 0);
                return Err(e.into());
            }
        };
        let room = (loc.blocks_left_in_segment as usize).min(WRITE_COMBINE_BLOCKS);
        let mut run = vec![id];
        for (k, &next) in after.iter().enumerate().take(room.saturating_sub(1)) {
            let want = BufferTag {
                block: tag.block + 1 + k as u32,
                ..tag
            };
            let d = pool.desc(next);
            let header = d.header.lock();
            let st = d.state.load(Ordering::SeqCst);
            if header.tag != Some(want)
                || refcount(st) != 0
                || st & BM_DIRTY == 0
                || st & BM_IO_IN_PROGRESS != 0
            {
                break;
            }
            // A pin without a usage count (the ring may still reuse it),
            // and the I/O, under the header lock eviction checks under.
            pool.pin_for_io(next);
            d.state.fetch_or(BM_IO_IN_PROGRESS, Ordering::SeqCst);
            d.state.fetch_and(!BM_JUST_DIRTIED, Ordering::SeqCst);
            drop(header);
            run.push(next);
        }
        if self.bounce.len() < run.len() * BLOCK_SIZE {
            self.bounce = AlignedBuf::new(WRITE_COMBINE_BLOCKS * BLOCK_SIZE);
        }
        let newest = copy_for_write(&pool, &run, tag.block, &mut self.bounce[..]);
        // The WAL rule: the log up to the newest change in the run is
        // durable before any of its pages is written.
        let wal_ok = wal_before_write(&pool, tag, newest);
        let len = run.len() * BLOCK_SIZE;
        let result = wal_ok.and_then(|()| {
            match injected_write_failure(&pool, tag, &loc.file, loc.offset, len) {
                Some(failure) => Err(failure),
                None => crate::aio::write_blocks(
                    &mut self.aio,
                    &loc.file,
                    loc.offset,
                    &self.bounce[..len],
                ),
            }
            .map_err(|source| write_failed(&loc.file, source))
        });
        // The first buffer's pin is the caller's; the others' are the
        // write's own.
        self.end_write(tag, &run, result.is_ok(), 1);
        result
    }

    /// Writes back every dirty buffer of the pool (a simple checkpoint,
    /// until the checkpointer exists).
    pub fn flush_all(&mut self) -> Result<(), BufferError> {
        self.flush_matching(|_| true)
    }

    /// Writes back the dirty buffers of `fork` of `rel`.
    pub fn flush_fork(&mut self, rel: u32, fork: Fork) -> Result<(), BufferError> {
        self.flush_matching(|t| t.rel == rel && t.fork == fork)
    }

    /// Writes back the dirty buffers of every fork of `rel`, in block
    /// order, combining neighbours into one write as eviction from a ring
    /// does: what a table that skipped the WAL does before its creator
    /// commits (its files are synced next).
    pub fn flush_relation(&mut self, rel: u32) -> Result<(), BufferError> {
        let pool = Arc::clone(&self.pool);
        let mut dirty: Vec<(BufferTag, BufferId)> = (0..pool.nbuffers)
            .filter(|&id| pool.state(id) & BM_DIRTY != 0)
            .filter_map(|id| pool.tag(id).filter(|t| t.rel == rel).map(|t| (t, id)))
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
