//! Start/wait reads of buffers (DESIGN.md §5), and the completion callbacks
//! that verify pages in whichever thread completes the read.
//!
//! `start_read_buffers` pins up to n consecutive blocks. A hit on the first
//! block is returned alone, with nothing to wait for. A hit further on ends
//! the operation there; the buffers pinned past its end are *forwarded* to
//! the caller's next call instead of being unpinned and looked up again.
//! Misses become one vectored read, claimed buffer by buffer without
//! waiting. A first block whose read is already in progress (another
//! session's, or our own from earlier in a stream) is not waited for here:
//! its wait reference is copied into the operation as a one-block *foreign*
//! I/O and waited for in `wait_read_buffers`, which reads the block itself
//! if that I/O failed. Waiting synchronously instead is what made the
//! reference thread's repeated-blocks stream take 676 ms instead of 91 ms.
//!
//! With the sync method a read runs the moment it is started, so there is
//! nothing to overlap. A caller that knows the blocks are wanted ahead of
//! time (a read stream on buffered files) asks for *advice* instead: the
//! misses are only pinned, the kernel is told to read them into its page
//! cache (`posix_fadvise(WILLNEED)`), and the read itself happens in
//! `wait_read_buffers`, by which time the kernel has usually done it.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{OnceLock, Weak};

use smallvec::{smallvec, SmallVec};

use super::{
    BufferError, BufferId, BufferPool, BufferSession, BufferTag, StartIo, Strategy, BM_IO_ERROR,
    BM_IO_IN_PROGRESS, BM_VALID,
};
use crate::aio::{IoCallbacks, IoResult, IoReturn, IoReturnCell, IoStatus, IoVec, IoView, WaitRef};
use crate::page::{verify_page, PageBytes, PageVerdict};
use crate::storage::{Fork, BLOCK_SIZE};

/// Callback data bits: how the issuing session wants bad pages handled.
const ZERO_DAMAGED_PAGES: u8 = 1;
const IGNORE_CHECKSUM_FAILURE: u8 = 2;

/// What a read operation is waiting for.
#[derive(Debug)]
pub enum ReadOpKind {
    /// The first block was valid: nothing to wait for.
    Hit,
    /// Our own vectored read of every buffer of the operation.
    Io { wref: WaitRef, ret: IoReturnCell },
    /// A one-block read someone else (or an earlier operation of ours)
    /// started.
    Foreign { wref: WaitRef },
    /// Pinned misses the kernel was advised to read ahead; the read is
    /// started when the operation is waited for.
    Deferred,
}

/// How [`BufferSession::start_read_buffers`] should go about a read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadFlags {
    /// With the sync method on buffered files: advise the kernel and defer
    /// the read to `wait_read_buffers` instead of reading at once. Ignored
    /// where a read can really be in flight (other methods, direct I/O).
    pub advice: bool,
}

/// Buffers of one operation kept inline: a single-block read (every
/// B-tree descent's, every heap fetch's) allocates nothing.
const INLINE_BUFFERS: usize = 4;

/// A read started by [`BufferSession::start_read_buffers`].
#[derive(Debug)]
pub struct ReadOp {
    pub rel: u32,
    pub fork: Fork,
    pub first_block: u32,
    /// Pinned buffers for `first_block..`, valid once waited for.
    pub buffers: SmallVec<[BufferId; INLINE_BUFFERS]>,
    pub kind: ReadOpKind,
}

impl ReadOp {
    fn single(rel: u32, fork: Fork, block: u32, buffer: BufferId, kind: ReadOpKind) -> ReadOp {
        ReadOp {
            rel,
            fork,
            first_block: block,
            buffers: smallvec![buffer],
            kind,
        }
    }

    /// Number of blocks this operation covers.
    pub fn nblocks(&self) -> usize {
        self.buffers.len()
    }

    /// True if `wait_read_buffers` has something to wait for.
    pub fn needs_wait(&self) -> bool {
        !matches!(self.kind, ReadOpKind::Hit)
    }
}

/// What [`BufferSession::wait_read_buffers`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WaitOutcome {
    /// The I/O was not finished when we came to wait for it.
    pub waited: bool,
    /// The I/O was executed synchronously by its issuer (the sync method),
    /// which a read stream counts as a wait.
    pub synchronous: bool,
}

/// A read's iovecs and callback data kept on the stack: as many as the
/// default `io_combine_limit` makes.
const INLINE_IOVECS: usize = 16;

/// Most result cells a session keeps for its next reads (one per read in
/// flight is all a stream needs at a time; more only wait).
pub(super) const SPARE_RETURNS_MAX: usize = 16;

/// Most attempts at starting a read whose first block is busy with an I/O
/// whose wait reference is not published yet; each attempt waits for that
/// I/O to move on, so running out means something is stuck.
const MAX_START_ATTEMPTS: usize = 10_000;

impl BufferSession {
    /// Starts reading up to `max_blocks` blocks from `first_block` (fewer at
    /// a segment boundary or past `io_combine_limit`). `forwarded` holds
    /// buffers already pinned for `first_block`, `first_block + 1`, …; on
    /// return it holds those pinned beyond the operation's end.
    // The arguments are PostgreSQL's StartReadBuffers with its operation
    // struct spelled out; bundling them would only move the list.
    #[allow(clippy::too_many_arguments)]
    pub fn start_read_buffers(
        &mut self,
        rel: u32,
        fork: Fork,
        first_block: u32,
        max_blocks: usize,
        forwarded: &mut VecDeque<BufferId>,
        mut strategy: Option<&mut Strategy>,
        flags: ReadFlags,
    ) -> Result<ReadOp, BufferError> {
        // Reads never cross a segment boundary; only arithmetic here, the
        // segment file is looked up when (and if) a read is issued.
        let per_segment = self.pool().blocks_per_segment();
        let left_in_segment = (per_segment - first_block % per_segment) as usize;
        let limit = max_blocks
            .min(self.settings.io_combine_limit)
            .min(left_in_segment)
            .max(1);
        let pool = self.pool().clone();
        let mut buffers = SmallVec::with_capacity(limit);
        for i in 0..limit {
            let block = first_block + i as u32;
            let id = match forwarded.pop_front() {
                Some(id) => id,
                None => {
                    match self.get_buffer(BufferTag { rel, fork, block }, strategy.as_deref_mut()) {
                        Ok((id, _)) => id,
                        Err(e) if i > 0 => {
                            // Read what we have; the caller will ask again.
                            log::debug!("read of {rel}/{block} stops early: {e}");
                            break;
                        }
                        Err(e) => return Err(e),
                    }
                }
            };
            if pool.state(id) & BM_VALID != 0 {
                if i == 0 {
                    pool.stats.hits.fetch_add(1, Ordering::Relaxed);
                    self.counts.hits += 1;
                    return Ok(ReadOp::single(rel, fork, first_block, id, ReadOpKind::Hit));
                }
                forwarded.push_front(id);
                break;
            }
            buffers.push(id);
        }
        if flags.advice && self.can_defer_reads() {
            let relation = pool.relation(rel);
            if let Err(e) = relation.prefetch(fork, first_block, buffers.len() as u32) {
                // Advice is only a hint: read without it.
                log::debug!("no read-ahead advice for {rel}/{first_block}: {e}");
            }
            pool.stats
                .advised
                .fetch_add(buffers.len() as u64, Ordering::Relaxed);
            self.counts.reads += buffers.len() as u64;
            return Ok(ReadOp {
                rel,
                fork,
                first_block,
                buffers,
                kind: ReadOpKind::Deferred,
            });
        }
        let mut attempts = 0;
        loop {
            attempts += 1;
            let token = match self.aio.acquire_nb()? {
                Some(token) => token,
                None => {
                    self.aio.submit_staged();
                    self.aio.acquire()?
                }
            };
            let head = buffers[0];
            match self.start_buffer_io(head, true)? {
                StartIo::Started => {}
                StartIo::AlreadyValid => {
                    self.aio.release(token)?;
                    pool.stats.hits.fetch_add(1, Ordering::Relaxed);
                    self.counts.hits += 1;
                    forward_tail(forwarded, &buffers[1..]);
                    return Ok(ReadOp::single(
                        rel,
                        fork,
                        first_block,
                        head,
                        ReadOpKind::Hit,
                    ));
                }
                StartIo::InProgress(Some(wref)) => {
                    self.aio.release(token)?;
                    self.counts.reads += 1;
                    forward_tail(forwarded, &buffers[1..]);
                    let kind = ReadOpKind::Foreign { wref };
                    return Ok(ReadOp::single(rel, fork, first_block, head, kind));
                }
                StartIo::InProgress(None) => {
                    // Claimed, but its wait reference is not published yet:
                    // the one case where we wait synchronously (after
                    // submitting our own staged I/O, inside).
                    self.aio.release(token)?;
                    if attempts >= MAX_START_ATTEMPTS {
                        return Err(BufferError::Io(format!(
                            "block {first_block} of relation {rel} stayed busy with an I/O that never started"
                        )));
                    }
                    self.start_buffer_io(head, false).map(|outcome| {
                        if outcome == StartIo::Started {
                            // We own it now; give it back and start properly.
                            self.terminate_buffer_io(head, 0, 0);
                        }
                    })?;
                    continue;
                }
            }
            // The head is ours: claim as many following buffers as we can
            // without waiting.
            let mut claimed = 1;
            while claimed < buffers.len() {
                match self.start_buffer_io(buffers[claimed], true)? {
                    StartIo::Started => claimed += 1,
                    _ => break,
                }
            }
            forward_tail(forwarded, &buffers[claimed..]);
            buffers.truncate(claimed);
            let ret = self.return_cell();
            let wref = self.aio.wait_ref(&token);
            if let Err(e) = self.issue_read(token, rel, fork, first_block, &buffers, &ret) {
                // No operation to hand back: its pins go here.
                for &id in &buffers {
                    self.release(id);
                }
                return Err(e);
            }
            self.counts.reads += buffers.len() as u64;
            return Ok(ReadOp {
                rel,
                fork,
                first_block,
                buffers,
                kind: ReadOpKind::Io { wref, ret },
            });
        }
    }

    /// A result cell for a read: a spare one nobody holds any more, or new.
    fn return_cell(&mut self) -> IoReturnCell {
        while let Some(cell) = self.spare_returns.pop() {
            if cell.is_free() {
                return cell;
            }
            // Still held by an operation not yet dropped: left to it.
        }
        IoReturnCell::default()
    }

    /// Keeps the cell of a collected read for a later one, if there is
    /// room (it is used again only once nobody else holds it).
    fn keep_return_cell(&mut self, cell: &IoReturnCell) {
        if self.spare_returns.len() < SPARE_RETURNS_MAX {
            self.spare_returns.push(cell.clone());
        }
    }

    /// True where a deferred read with advice beats reading at once: the
    /// sync method (nothing else can overlap) on buffered files (direct I/O
    /// bypasses the page cache the advice fills).
    pub fn can_defer_reads(&self) -> bool {
        self.aio.aio().method() == crate::config::IoMethod::Sync && !self.pool().is_direct()
    }

    /// Defines and starts one vectored read into the frames of `buffers`
    /// (whose I/O we own), frames adjacent in memory sharing an iovec. If it
    /// cannot be started, the buffers' I/O is given up again.
    fn issue_read(
        &mut self,
        token: crate::aio::HandleToken,
        rel: u32,
        fork: Fork,
        first_block: u32,
        buffers: &[BufferId],
        ret: &IoReturnCell,
    ) -> Result<(), BufferError> {
        if let Err(e) = self.define_and_start_read(token, rel, fork, first_block, buffers, ret) {
            for &id in buffers {
                self.terminate_buffer_io(id, 0, 0);
            }
            return Err(e);
        }
        // Staged: the read's completion ends the claims now.
        self.note_claims_gone(buffers);
        self.pool()
            .stats
            .reads
            .fetch_add(buffers.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn define_and_start_read(
        &mut self,
        token: crate::aio::HandleToken,
        rel: u32,
        fork: Fork,
        first_block: u32,
        buffers: &[BufferId],
        ret: &IoReturnCell,
    ) -> Result<(), BufferError> {
        let location = match self.relation(rel).locate(fork, first_block) {
            Ok(location) => location,
            Err(e) => {
                self.aio.release(token)?;
                return Err(e.into());
            }
        };
        let pool = &self.pool;
        // On the stack up to a full combined read of the default limit.
        let mut iov: SmallVec<[IoVec; INLINE_IOVECS]> = SmallVec::new();
        for &id in buffers {
            let frame = pool.frame_ptr(id);
            match iov.last_mut() {
                // SAFETY: only comparing addresses.
                Some(last) if unsafe { last.ptr().add(last.len()) } == frame => {
                    *last = IoVec::new(last.ptr(), last.len() + BLOCK_SIZE);
                }
                _ => iov.push(IoVec::new(frame, BLOCK_SIZE)),
            }
        }
        let data: SmallVec<[u64; INLINE_IOVECS]> = buffers.iter().map(|&id| id as u64).collect();
        let flags = (if self.settings.zero_damaged_pages {
            ZERO_DAMAGED_PAGES
        } else {
            0
        }) | (if self.settings.ignore_checksum_failure {
            IGNORE_CHECKSUM_FAILURE
        } else {
            0
        });
        let started = (|| {
            self.aio.set_data(&token, &data)?;
            self.aio.add_callback(&token, pool.read_callback, flags)?;
            self.aio.set_return(&token, ret)?;
            Ok::<_, crate::aio::AioError>(())
        })();
        if let Err(e) = started {
            self.aio.release(token)?;
            return Err(e.into());
        }
        // SAFETY: the frames belong to buffers whose IO_IN_PROGRESS we own
        // and which the I/O pins (stage callback) until its completion
        // callback runs: nobody else reads, writes or reuses them meanwhile.
        unsafe {
            self.aio
                .start_readv(token, &location.file, location.offset, &iov)?
        };
        Ok(())
    }

    /// Waits for a read started by `start_read_buffers`, finishes a partial
    /// read, and reads a block itself if the foreign I/O it joined failed.
    /// On error the operation's pins are released.
    pub fn wait_read_buffers(&mut self, op: &mut ReadOp) -> Result<WaitOutcome, BufferError> {
        let result = self.wait_read_buffers_inner(op);
        if result.is_err() {
            for id in op.buffers.drain(..) {
                self.release(id);
            }
        }
        result
    }

    fn wait_read_buffers_inner(&mut self, op: &mut ReadOp) -> Result<WaitOutcome, BufferError> {
        // No clone of the `Arc`: its count is a line every session's
        // reads would write (`local_arc.rs`).
        let synchronous = self.aio.aio().method() == crate::config::IoMethod::Sync;
        let waited = match &op.kind {
            ReadOpKind::Hit => return Ok(WaitOutcome::default()),
            ReadOpKind::Io { wref, ret } => {
                let waited = !self.aio.aio().is_done(*wref);
                self.aio.wait(*wref)?;
                let cell = ret;
                let ret = cell.take().expect("our own read is collected by wait");
                self.keep_return_cell(cell);
                let done = self.blocks_read(&ret)?;
                // A shortened read left the rest neither valid nor busy.
                self.read_missing(op.rel, op.fork, op.first_block, &op.buffers, done)?;
                waited
            }
            ReadOpKind::Foreign { wref } => {
                let waited = !self.aio.aio().is_done(*wref);
                self.aio.wait(*wref)?;
                // If that read failed, its error is not ours to raise: the
                // block is still missing, and we read it ourselves.
                self.read_missing(op.rel, op.fork, op.first_block, &op.buffers, 0)?;
                waited
            }
            ReadOpKind::Deferred => {
                self.read_missing(op.rel, op.fork, op.first_block, &op.buffers, 0)?;
                false
            }
        };
        Ok(WaitOutcome {
            waited,
            synchronous: synchronous || matches!(op.kind, ReadOpKind::Deferred),
        })
    }

    /// How many blocks a finished read of ours brought in (all of them, or
    /// the whole blocks of a shortened read), or its error.
    fn blocks_read(&self, ret: &IoReturn) -> Result<usize, BufferError> {
        let aio = self.aio.aio();
        match ret.result.status {
            IoStatus::Ok => Ok(ret.len / BLOCK_SIZE),
            IoStatus::Warning => {
                if let Ok(Some(warning)) = aio.check(ret) {
                    log::warn!("{warning}");
                }
                Ok(ret.len / BLOCK_SIZE)
            }
            // The block callback makes a read that brought less than one
            // block an error, so a partial read made progress.
            IoStatus::Partial if ret.result.result > 0 => Ok(ret.result.result as usize),
            _ => Err(match aio.check(ret) {
                Err(e) => BufferError::Read(e),
                Ok(_) => BufferError::Io(format!("could not read {}", ret.target())),
            }),
        }
    }

    /// Reads those of the pinned `buffers` (blocks `first_block..`) from
    /// index `from` on that are not valid yet, in as few vectored reads as
    /// the missing runs allow, continuing shortened reads until complete.
    /// A block whose read someone else has in progress is waited for, and
    /// read again by us if that read failed.
    fn read_missing(
        &mut self,
        rel: u32,
        fork: Fork,
        first_block: u32,
        buffers: &[BufferId],
        from: usize,
    ) -> Result<(), BufferError> {
        let mut i = from;
        // Each pass finds a block valid, or reads at least one block, or
        // fails, so the loop ends after at most `buffers.len()` passes.
        while i < buffers.len() {
            if self.start_buffer_io(buffers[i], false)? == StartIo::AlreadyValid {
                i += 1;
                continue;
            }
            let mut end = i + 1;
            while end < buffers.len()
                && self.start_buffer_io(buffers[end], true)? == StartIo::Started
            {
                end += 1;
            }
            let run = &buffers[i..end];
            let token = match self.aio.acquire() {
                Ok(token) => token,
                Err(e) => {
                    for &id in run {
                        self.terminate_buffer_io(id, 0, 0);
                    }
                    return Err(e.into());
                }
            };
            let wref = self.aio.wait_ref(&token);
            let cell = self.return_cell();
            self.issue_read(token, rel, fork, first_block + i as u32, run, &cell)?;
            self.aio.wait(wref)?;
            let ret = cell.take().expect("our own read is collected by wait");
            self.keep_return_cell(&cell);
            i += self.blocks_read(&ret)?;
        }
        Ok(())
    }

    /// Reads one block through the pool: pinned and valid on return.
    pub fn read_buffer(
        &mut self,
        rel: u32,
        fork: Fork,
        block: u32,
    ) -> Result<BufferId, BufferError> {
        self.read_buffer_in(rel, fork, block, None)
    }

    /// [`BufferSession::read_buffer`] through a strategy's ring (a bulk
    /// load revisiting its own pages).
    pub fn read_buffer_in(
        &mut self,
        rel: u32,
        fork: Fork,
        block: u32,
        strategy: Option<&mut Strategy>,
    ) -> Result<BufferId, BufferError> {
        let mut forwarded = VecDeque::new();
        let mut op = self.start_read_buffers(
            rel,
            fork,
            block,
            1,
            &mut forwarded,
            strategy,
            ReadFlags::default(),
        )?;
        debug_assert!(forwarded.is_empty());
        self.wait_read_buffers(&mut op)?;
        Ok(op.buffers[0])
    }
}

/// Puts `tail` (pinned buffers for the blocks after an operation) at the
/// front of `forwarded`, in block order.
fn forward_tail(forwarded: &mut VecDeque<BufferId>, tail: &[BufferId]) {
    for &id in tail.iter().rev() {
        forwarded.push_front(id);
    }
}

/// Packs verification counts into a result's 32-bit error payload.
fn encode(errors: u32, first_bad: u32, zeroed: u32, ignored: u32) -> u32 {
    errors.min(255) | first_bad.min(255) << 8 | zeroed.min(255) << 16 | ignored.min(255) << 24
}

fn decode(data: u32) -> (u32, u32, u32, u32) {
    (
        data & 255,
        (data >> 8) & 255,
        (data >> 16) & 255,
        data >> 24,
    )
}

/// The buffer pool's read callbacks.
pub(super) struct BufferReadCallbacks {
    pub pool: Weak<BufferPool>,
    /// Our id in the AIO callback table, for the results we set.
    pub id: OnceLock<u8>,
}

impl IoCallbacks for BufferReadCallbacks {
    fn name(&self) -> &'static str {
        "buffer_readv"
    }

    /// Takes the I/O's own pin on each buffer and publishes the wait
    /// reference, so that other sessions join this read instead of waiting
    /// blindly.
    fn stage(&self, io: &IoView<'_>, _cb_data: u8) {
        let Some(pool) = self.pool.upgrade() else {
            return;
        };
        for &id in io.data {
            let id = id as BufferId;
            pool.pin_for_io(id);
            let d = pool.desc(id);
            d.header.lock().wait_ref = Some(io.wait_ref);
            d.io_done.notify_all();
        }
    }

    /// Verifies each page read, marks buffers valid or failed, ends their
    /// I/O and drops the I/O's pins. Runs wherever the read completes.
    fn complete_shared(&self, io: &IoView<'_>, prior: IoResult, cb_data: u8) -> IoResult {
        let Some(pool) = self.pool.upgrade() else {
            return prior;
        };
        let blocks_read = match prior.status {
            IoStatus::Ok | IoStatus::Partial => prior.result as usize,
            _ => 0,
        };
        let failed = prior.status == IoStatus::Error;
        let (mut errors, mut first_bad, mut zeroed, mut ignored) = (0, 0, 0, 0);
        for (i, &id) in io.data.iter().enumerate() {
            let id = id as BufferId;
            let d = pool.desc(id);
            let mut set = 0;
            if i < blocks_read {
                let block = d.header.lock().tag.map_or(0, |t| t.block);
                // SAFETY: we own the buffer's IO_IN_PROGRESS and the read
                // into it has finished; no one else touches the frame.
                let page = unsafe { &mut *(pool.frame_ptr(id) as *mut PageBytes) };
                let verdict = verify_page(page, block);
                if matches!(verdict, PageVerdict::ChecksumMismatch { .. }) {
                    pool.stats.checksum_failures.fetch_add(1, Ordering::Relaxed);
                }
                if verdict.is_ok() {
                    set = BM_VALID;
                } else {
                    if errors + zeroed + ignored == 0 {
                        first_bad = i as u32;
                    }
                    let checksum_only = matches!(verdict, PageVerdict::ChecksumMismatch { .. });
                    if cb_data & ZERO_DAMAGED_PAGES != 0 {
                        page.fill(0);
                        zeroed += 1;
                        set = BM_VALID;
                    } else if cb_data & IGNORE_CHECKSUM_FAILURE != 0 && checksum_only {
                        ignored += 1;
                        set = BM_VALID;
                    } else {
                        errors += 1;
                        set = BM_IO_ERROR;
                    }
                }
            } else if failed {
                set = BM_IO_ERROR;
            }
            let mut header = d.header.lock();
            header.wait_ref = None;
            d.state.fetch_or(set, Ordering::SeqCst);
            d.state.fetch_and(!BM_IO_IN_PROGRESS, Ordering::SeqCst);
            drop(header);
            d.io_done.notify_all();
            pool.unpin_shared(id);
        }
        if failed {
            return prior;
        }
        if errors > 0 || zeroed > 0 || ignored > 0 {
            return IoResult {
                status: if errors > 0 {
                    IoStatus::Error
                } else {
                    IoStatus::Warning
                },
                id: *self.id.get().expect("registered before any I/O"),
                error_data: encode(errors, first_bad, zeroed, ignored),
                result: blocks_read as u32,
            };
        }
        prior
    }

    fn report(&self, ret: &IoReturn) -> String {
        let (errors, first_bad, zeroed, ignored) = decode(ret.result.error_data);
        let first = ret.file.block_at(ret.offset);
        let bad = first + first_bad;
        let rel = ret.file.ident();
        let last = first + (ret.len / BLOCK_SIZE).max(1) as u32 - 1;
        let mut parts = Vec::new();
        if errors == 1 && zeroed + ignored == 0 {
            parts.push(format!("invalid page in block {bad} of {rel}"));
        } else if errors > 0 {
            parts.push(format!(
                "{errors} invalid pages among blocks {first}..{last} of {rel}; the first is block {bad}"
            ));
        }
        if zeroed > 0 {
            parts.push(format!(
                "{zeroed} invalid page(s) among blocks {first}..{last} of {rel} zeroed (zero_damaged_pages); the first is block {bad}"
            ));
        }
        if ignored > 0 {
            parts.push(format!(
                "ignoring checksum failure in {ignored} page(s) among blocks {first}..{last} of {rel} (ignore_checksum_failure); the first is block {bad}"
            ));
        }
        parts.join("; ")
    }
}
