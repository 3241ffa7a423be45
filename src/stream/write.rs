//! Write streams: a caller hands over dirty buffers in the order it wants
//! them written (the checkpointer's: sorted by file and block), and the
//! stream claims each, gathers neighbouring blocks into one vectored write
//! of up to `io_combine_limit` blocks, and keeps up to `max_ios` writes in
//! flight. A slot is refilled as soon as its write completes (each call
//! first finishes the writes that have completed); the caller waits only
//! when every slot is busy.
//!
//! A buffer that is being written (or read) by someone else when offered
//! is set aside and, once that I/O has ended, written at the end if it is
//! still dirty: a checkpoint must not finish with a page it listed unwritten
//! or its write still in flight.

use crate::buffer::{BufferError, BufferId, BufferSession, BufferTag, WriteSlots};

/// What a write stream did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteStreamStats {
    /// Buffers offered.
    pub offered: u64,
    /// Blocks written, and the writes (I/Os) that wrote them.
    pub blocks: u64,
    pub writes: u64,
    /// Times the stream waited for a write to make room.
    pub waits: u64,
    /// Offered buffers that were clean by then, or held another page.
    pub skipped: u64,
    /// Offered buffers busy with another I/O, written (or found clean)
    /// after it.
    pub busy: u64,
}

/// A stream of buffer writes (see the module comment). [`WriteStream::finish`]
/// must be called before it is dropped.
pub struct WriteStream {
    slots: WriteSlots,
    /// The run being gathered: claimed buffers of consecutive blocks.
    pending: Vec<BufferId>,
    pending_tag: Option<BufferTag>,
    /// Buffers offered while busy with another I/O.
    busy: Vec<(BufferId, BufferTag)>,
    offered: u64,
    skipped: u64,
    busy_seen: u64,
}

impl WriteStream {
    /// Up to `max_ios` writes (at least 1) of up to `combine_limit` blocks
    /// each in flight; their bounce buffers are allocated here.
    pub fn new(max_ios: usize, combine_limit: usize) -> WriteStream {
        let slots = WriteSlots::new(max_ios, combine_limit);
        WriteStream {
            pending: Vec::with_capacity(slots.blocks_per_write()),
            slots,
            pending_tag: None,
            busy: Vec::new(),
            offered: 0,
            skipped: 0,
            busy_seen: 0,
        }
    }

    /// Offers buffer `id`, listed as holding `tag`: written if it still
    /// holds it and is dirty.
    pub fn write(
        &mut self,
        s: &mut BufferSession,
        id: BufferId,
        tag: BufferTag,
    ) -> Result<(), BufferError> {
        self.offered += 1;
        self.slots.finish_done(s)?;
        if s.claim_for_write(id, Some(tag), |_| true).is_none() {
            if s.pool().is_io_in_progress(id) {
                self.busy.push((id, tag));
                self.busy_seen += 1;
            } else {
                self.skipped += 1;
            }
            return Ok(());
        }
        if let Some(first) = self.pending_tag {
            let per_segment = s.pool().blocks_per_segment();
            let continues = first.rel == tag.rel
                && first.fork == tag.fork
                && tag.block == first.block + self.pending.len() as u32
                && !tag.block.is_multiple_of(per_segment)
                && self.pending.len() < self.slots.blocks_per_write();
            if !continues {
                if let Err(e) = self.start_pending(s) {
                    // Not written: let it go, still dirty.
                    s.unclaim(&[id]);
                    return Err(e);
                }
            }
        }
        if self.pending.is_empty() {
            self.pending_tag = Some(tag);
        }
        self.pending.push(id);
        Ok(())
    }

    /// Starts the gathered run.
    fn start_pending(&mut self, s: &mut BufferSession) -> Result<(), BufferError> {
        let Some(tag) = self.pending_tag.take() else {
            return Ok(());
        };
        let started = self.slots.start(s, &self.pending, tag, false).map(drop);
        self.pending.clear();
        started
    }

    /// Writes what is gathered, waits for every write, then writes the
    /// buffers that were busy when offered if they are still dirty. Every
    /// write is waited for even after one failed; the first error is
    /// returned (its buffers stay dirty).
    pub fn finish(&mut self, s: &mut BufferSession) -> Result<(), BufferError> {
        let mut result = self.start_pending(s);
        let mut keep_first = |r: Result<(), BufferError>| {
            if result.is_ok() {
                result = r;
            }
        };
        keep_first(self.slots.finish_all(s));
        for (id, tag) in std::mem::take(&mut self.busy) {
            keep_first(s.wait_buffer_io(id));
            if s.claim_for_write(id, Some(tag), |_| true).is_some() {
                keep_first(self.slots.start(s, &[id], tag, false).map(drop));
            }
        }
        keep_first(self.slots.finish_all(s));
        result
    }

    pub fn stats(&self) -> WriteStreamStats {
        let slots = self.slots.stats;
        WriteStreamStats {
            offered: self.offered,
            blocks: slots.blocks,
            writes: slots.writes,
            waits: slots.waits,
            skipped: self.skipped,
            busy: self.busy_seen,
        }
    }
}
