//! Write streams: a caller hands over dirty buffers in the order it wants
//! them written (the checkpointer's: sorted by file and block), and the
//! stream gathers neighbouring blocks into one vectored write of up to
//! `io_combine_limit` blocks, and keeps up to `max_ios` writes in flight. A
//! slot is refilled as soon as its write completes (each call first
//! finishes the writes that have completed); the caller waits only when
//! every slot is busy.
//!
//! A gathered run is only a list: its buffers are claimed for the write
//! (IO_IN_PROGRESS) when the run is started, and the write is started
//! before the call returns. Claimed while gathered, they stayed busy with
//! no wait reference for as long as the caller took to offer a buffer that
//! ends the run, and a spread checkpoint sleeps between offers: a DROP
//! TABLE waiting for such a buffer discarded the relation's other buffers,
//! so every later offer was skipped and the run never started; the DROP
//! gave up after 60 s, leaving the files behind. Between calls the stream
//! holds no claim, only writes in flight, which anyone can wait for.
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
    /// The run being gathered: buffers listed as holding consecutive
    /// blocks from `pending_tag` on, not claimed (see the module comment).
    pending: Vec<BufferId>,
    pending_tag: Option<BufferTag>,
    /// The part of the run claimed so far while it is started.
    claimed: Vec<BufferId>,
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
            claimed: Vec::with_capacity(slots.blocks_per_write()),
            slots,
            pending_tag: None,
            busy: Vec::new(),
            offered: 0,
            skipped: 0,
            busy_seen: 0,
        }
    }

    /// Offers buffer `id`, listed as holding `tag`: written if it still
    /// holds it and is dirty when its run is started (at the latest by
    /// [`WriteStream::finish`]). Returns holding no claim.
    pub fn write(
        &mut self,
        s: &mut BufferSession,
        id: BufferId,
        tag: BufferTag,
    ) -> Result<(), BufferError> {
        self.offered += 1;
        self.slots.finish_done(s)?;
        if let Some(first) = self.pending_tag {
            // A full run was started as it filled (below).
            debug_assert!(self.pending.len() < self.slots.blocks_per_write());
            let per_segment = s.pool().blocks_per_segment();
            let continues = first.rel == tag.rel
                && first.fork == tag.fork
                && tag.block == first.block + self.pending.len() as u32
                && !tag.block.is_multiple_of(per_segment);
            if !continues {
                self.start_pending(s)?;
            }
        }
        if self.pending.is_empty() {
            self.pending_tag = Some(tag);
        }
        self.pending.push(id);
        if self.pending.len() == self.slots.blocks_per_write() {
            self.start_pending(s)?;
        }
        debug_assert!(self.claimed.is_empty() && s.claims_held() == 0);
        Ok(())
    }

    /// Claims the gathered run's buffers and writes them: those that no
    /// longer qualify (clean, holding another page, or busy with another
    /// I/O, set aside for `finish`) split it, and each part claimed is
    /// started before the next buffer is claimed, so that on an error
    /// nothing is left claimed.
    fn start_pending(&mut self, s: &mut BufferSession) -> Result<(), BufferError> {
        let Some(first) = self.pending_tag.take() else {
            return Ok(());
        };
        // Taken out while claimed from (and put back, its capacity kept).
        let mut listed = std::mem::take(&mut self.pending);
        let mut result = Ok(());
        let mut run_tag = first;
        for (&id, k) in listed.iter().zip(0u32..) {
            let tag = BufferTag {
                block: first.block + k,
                ..first
            };
            // A slot free before a part is claimed, so that no wait for
            // one happens with buffers claimed.
            if self.claimed.is_empty() && !self.slots.has_room() {
                result = self.slots.finish_oldest(s);
                if result.is_err() {
                    break;
                }
            }
            if s.claim_for_write(id, Some(tag), |_| true).is_some() {
                if self.claimed.is_empty() {
                    run_tag = tag;
                }
                self.claimed.push(id);
                continue;
            }
            if s.pool().is_io_in_progress(id) {
                self.busy.push((id, tag));
                self.busy_seen += 1;
            } else {
                self.skipped += 1;
            }
            result = self.start_claimed(s, run_tag);
            if result.is_err() {
                break;
            }
        }
        if result.is_ok() {
            result = self.start_claimed(s, run_tag);
        }
        listed.clear();
        self.pending = listed;
        debug_assert!(self.claimed.is_empty() && self.pending.is_empty());
        result
    }

    /// Starts the write of the buffers claimed so far (blocks from `tag`).
    fn start_claimed(&mut self, s: &mut BufferSession, tag: BufferTag) -> Result<(), BufferError> {
        if self.claimed.is_empty() {
            return Ok(());
        }
        // On an error, start lets the run go (failed, still dirty).
        let started = self.slots.start(s, &self.claimed, tag, false).map(drop);
        self.claimed.clear();
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
        debug_assert_eq!(s.claims_held(), 0, "a write stream left a claim");
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
