//! Block reads and writes for callers without a buffer pool (tools,
//! benchmarks, tests): whole blocks through the AIO layer, with partial
//! transfers re-issued until complete.
//!
//! The AIO layer itself never retries: a partial result says how many whole
//! blocks arrived, and the caller decides. Here the caller is us, so the
//! remainder is re-issued; each retry moves forward by at least one block,
//! which bounds the loop by the number of blocks.

use std::collections::VecDeque;
use std::sync::Arc;

use super::handle::{IoState, IoVec, WaitRef};
use super::result::{AioError, IoReturn, IoStatus};
use super::session::{AioSession, IoReturnCell};
use super::Aio;
use crate::stats::IoOp;
use crate::storage::{AlignedBuf, SegmentFile, BLOCK_SIZE, IO_ALIGN_BYTES};

/// Reads `buf.len() / BLOCK_SIZE` blocks at `offset` of `file` into `buf`,
/// re-issuing partial reads until every block has arrived.
pub fn read_blocks(
    session: &mut AioSession,
    file: &Arc<SegmentFile>,
    offset: u64,
    buf: &mut [u8],
) -> Result<(), AioError> {
    transfer_blocks(
        session,
        IoOp::Read,
        file,
        offset,
        buf.as_mut_ptr(),
        buf.len(),
    )
}

/// Writes `buf` (whole blocks) at `offset` of `file`, re-issuing partial
/// writes until everything is written.
pub fn write_blocks(
    session: &mut AioSession,
    file: &Arc<SegmentFile>,
    offset: u64,
    buf: &[u8],
) -> Result<(), AioError> {
    transfer_blocks(
        session,
        IoOp::Write,
        file,
        offset,
        buf.as_ptr() as *mut u8,
        buf.len(),
    )
}

fn transfer_blocks(
    session: &mut AioSession,
    op: IoOp,
    file: &Arc<SegmentFile>,
    offset: u64,
    ptr: *mut u8,
    len: usize,
) -> Result<(), AioError> {
    if !len.is_multiple_of(BLOCK_SIZE) {
        return Err(AioError::NotWholeBlocks { len });
    }
    let mut done = 0usize;
    while done < len {
        let ret = IoReturnCell::default();
        let token = session.acquire()?;
        let wref = session.wait_ref(&token);
        session.set_return(&token, &ret)?;
        // SAFETY: ptr..ptr+len is borrowed by our caller for the whole call,
        // and we wait for the I/O before returning or retrying.
        let iov = [IoVec::new(unsafe { ptr.add(done) }, len - done)];
        unsafe {
            if op == IoOp::Write {
                session.start_writev(token, file, offset + done as u64, &iov)?
            } else {
                session.start_readv(token, file, offset + done as u64, &iov)?
            }
        }
        session.wait(wref)?;
        let ret = ret.take().expect("our own I/O is collected by wait");
        done += blocks_transferred(session, &ret)? * BLOCK_SIZE;
    }
    Ok(())
}

/// Blocks transferred by a collected block I/O; an error otherwise.
pub fn blocks_transferred(session: &AioSession, ret: &IoReturn) -> Result<usize, AioError> {
    match ret.result.status {
        IoStatus::Partial => Ok(ret.result.result as usize),
        _ => {
            session.aio().check(ret)?;
            Ok(ret.result.result as usize)
        }
    }
}

struct ReadSlot {
    buf: AlignedBuf,
    ret: IoReturnCell,
    wref: Option<WaitRef>,
    offset: u64,
    len: usize,
}

/// A completed read handed out by [`BlockReader::next_completed`].
pub struct CompletedRead<'a> {
    pub offset: u64,
    pub data: &'a [u8],
}

/// Keeps up to `depth` block reads of one file in flight and hands them
/// back in the order they were started, each complete (partial reads are
/// re-issued before the read is handed back).
pub struct BlockReader {
    aio: Arc<Aio>,
    /// The session that started the reads in flight: only it collects them.
    slot: Option<u32>,
    file: Arc<SegmentFile>,
    slots: Vec<ReadSlot>,
    free: Vec<usize>,
    started: VecDeque<usize>,
}

impl BlockReader {
    /// `depth` reads of at most `max_blocks` blocks each.
    pub fn new(
        aio: Arc<Aio>,
        file: Arc<SegmentFile>,
        depth: usize,
        max_blocks: usize,
    ) -> BlockReader {
        let slots = (0..depth.max(1))
            .map(|_| ReadSlot {
                buf: AlignedBuf::new(max_blocks.max(1) * BLOCK_SIZE),
                ret: IoReturnCell::default(),
                wref: None,
                offset: 0,
                len: 0,
            })
            .collect::<Vec<_>>();
        BlockReader {
            aio,
            slot: None,
            file,
            free: (0..slots.len()).rev().collect(),
            slots,
            started: VecDeque::new(),
        }
    }

    /// Reads started and not yet handed back.
    pub fn in_flight(&self) -> usize {
        self.started.len()
    }

    /// True if another read can be started without waiting.
    pub fn has_room(&self) -> bool {
        !self.free.is_empty()
    }

    /// Starts a read of `blocks` blocks at `offset`. Call only with room.
    pub fn start(
        &mut self,
        session: &mut AioSession,
        offset: u64,
        blocks: usize,
    ) -> Result<(), AioError> {
        let index = self
            .free
            .pop()
            .expect("BlockReader::start called without room");
        let slot = &mut self.slots[index];
        let len = blocks * BLOCK_SIZE;
        assert!(
            len <= slot.buf.len(),
            "read of {blocks} blocks exceeds the reader's buffers"
        );
        let token = match session.acquire() {
            Ok(t) => t,
            Err(e) => {
                self.free.push(index);
                return Err(e);
            }
        };
        slot.wref = Some(session.wait_ref(&token));
        slot.offset = offset;
        slot.len = len;
        if let Err(e) = session.set_return(&token, &slot.ret) {
            self.free.push(index);
            return Err(e);
        }
        let iov = [IoVec::new(slot.buf.as_mut_ptr(), len)];
        // SAFETY: the slot's buffer is neither touched nor freed until the
        // read is handed back by next_completed (which waits for it), and
        // Drop waits for reads still in flight.
        if let Err(e) = unsafe { session.start_readv(token, &self.file, offset, &iov) } {
            self.free.push(index);
            return Err(e);
        }
        self.started.push_back(index);
        self.slot = Some(session.slot());
        Ok(())
    }

    fn check_session(&self, session: &AioSession) -> Result<(), AioError> {
        match self.slot {
            Some(slot) if slot != session.slot() && !self.started.is_empty() => Err(
                AioError::ReaderMisuse("reads in flight belong to another session".into()),
            ),
            _ => Ok(()),
        }
    }

    /// Waits for the oldest read, completes it if it was partial, and hands
    /// it back. `None` if nothing is in flight.
    pub fn next_completed(
        &mut self,
        session: &mut AioSession,
    ) -> Option<Result<CompletedRead<'_>, AioError>> {
        if let Err(e) = self.check_session(session) {
            return Some(Err(e));
        }
        let index = self.started.pop_front()?;
        self.free.push(index);
        let slot = &mut self.slots[index];
        let wref = slot.wref.take().expect("started read has a wait reference");
        if let Err(e) = session.wait(wref) {
            return Some(Err(e));
        }
        let ret = slot.ret.take().expect("our own I/O is collected by wait");
        let outcome = blocks_transferred(session, &ret).and_then(|blocks| {
            let done = blocks * BLOCK_SIZE;
            if done < slot.len {
                read_blocks(
                    session,
                    &self.file,
                    slot.offset + done as u64,
                    &mut slot.buf[done..slot.len],
                )?;
            }
            Ok(())
        });
        Some(outcome.map(|()| CompletedRead {
            offset: slot.offset,
            data: &slot.buf[..slot.len],
        }))
    }

    /// Waits for every read still in flight, discarding them.
    pub fn drain(&mut self, session: &mut AioSession) {
        while let Some(index) = self.started.pop_front() {
            if let Some(wref) = self.slots[index].wref.take() {
                // Any session may wait; ours also collects.
                if session.wait(wref).is_err() {
                    self.aio.wait(wref);
                }
                self.slots[index].ret.take();
            }
            self.free.push(index);
        }
    }
}

impl Drop for BlockReader {
    /// Reads still in flight own their buffers until they complete: wait for
    /// them, or, for one still staged in a batch that only its session can
    /// submit, leak the buffer rather than free memory the kernel may write.
    fn drop(&mut self) {
        while let Some(index) = self.started.pop_front() {
            let slot = &mut self.slots[index];
            let Some(wref) = slot.wref.take() else {
                continue;
            };
            if self.aio.state(wref) == Some(IoState::Staged) {
                log::warn!("BlockReader dropped with a staged read; leaking its buffer");
                std::mem::forget(std::mem::replace(
                    &mut slot.buf,
                    AlignedBuf::new(IO_ALIGN_BYTES),
                ));
            } else {
                self.aio.wait(wref);
            }
        }
    }
}
