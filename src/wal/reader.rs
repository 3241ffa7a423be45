//! Reading the log back: records in order from a start position, across
//! segment files, until the first position that holds no valid record.
//!
//! That position is the end of the log. A crash can leave the last writes
//! torn (some of their blocks on disk, some not), so an invalid record is
//! normally just the end. It is damage instead when valid records continue
//! after it for longer than any set of writes in flight could have torn
//! ([`TORN_TAIL_SPAN`]): those records were written before the bad one's
//! writes finished, so they were acknowledged, and start-up stops.
//!
//! [`ReadAhead`] decodes records ahead of the one its caller is at, in a
//! bounded queue: replay looks at the blocks upcoming records touch, to
//! read them before it gets there (see `database::recovery`).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use super::record::{
    self, claimed_length, next_record_start, Invalid, Lsn, Record, RECORD_HEADER_SIZE,
};
use super::{segment_path, WalError, WAL_SEGMENT_SIZE};

/// Most bytes of valid records that may follow an invalid one at the end
/// of the log: the writes a crash can tear are at most the ones in flight
/// (see `Wal::flush`), each at most a segment's remainder.
pub const TORN_TAIL_SPAN: u64 = 2 * WAL_SEGMENT_SIZE;

/// How reading stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndOfLog {
    /// Where the first invalid record would have started.
    pub at: Lsn,
    pub why: Invalid,
}

/// Reads records in order.
pub struct WalReader {
    dir: PathBuf,
    /// The segment in memory.
    segment: Option<(u64, Vec<u8>)>,
    /// Where the next record starts.
    next: Lsn,
    /// Where the last record started (its successor's `prev`).
    prev: Option<Lsn>,
}

impl WalReader {
    /// A reader starting at `start`; `prev`, if known, is checked against
    /// the first record's.
    pub fn new(dir: &Path, start: Lsn, prev: Option<Lsn>) -> WalReader {
        WalReader {
            dir: dir.to_path_buf(),
            segment: None,
            next: next_record_start(start),
            prev,
        }
    }

    /// Where the next record would start.
    pub fn position(&self) -> Lsn {
        self.next
    }

    /// The file holding `lsn`.
    pub fn file_of(&self, lsn: Lsn) -> PathBuf {
        segment_path(&self.dir, lsn / WAL_SEGMENT_SIZE)
    }

    /// Reads `len` bytes at `lsn`, across segments. None if a segment is
    /// missing or too short (nothing was written there).
    fn bytes_at(&mut self, lsn: Lsn, len: usize) -> Result<Option<Vec<u8>>, WalError> {
        let mut out = Vec::with_capacity(len);
        let mut pos = lsn;
        while out.len() < len {
            let segno = pos / WAL_SEGMENT_SIZE;
            if self.segment.as_ref().map(|s| s.0) != Some(segno) {
                let path = segment_path(&self.dir, segno);
                match std::fs::read(&path) {
                    Ok(bytes) => self.segment = Some((segno, bytes)),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        // The end of the log, unless later segments exist:
                        // then one in the middle was lost.
                        if super::list_segments(&self.dir)?.iter().any(|&s| s > segno) {
                            return Err(WalError::MissingSegment { lsn: pos, path });
                        }
                        return Ok(None);
                    }
                    Err(source) => {
                        return Err(WalError::Io {
                            op: "read",
                            path,
                            source,
                        })
                    }
                }
            }
            let seg = &self.segment.as_ref().expect("loaded above").1;
            let at = (pos % WAL_SEGMENT_SIZE) as usize;
            let n = (len - out.len()).min(WAL_SEGMENT_SIZE as usize - at);
            let Some(part) = seg.get(at..at + n) else {
                return Ok(None);
            };
            out.extend_from_slice(part);
            pos += n as u64;
        }
        Ok(Some(out))
    }

    /// The record at `lsn`, checked against `prev`.
    fn record_at(
        &mut self,
        lsn: Lsn,
        prev: Option<Lsn>,
    ) -> Result<Result<Record, Invalid>, WalError> {
        let Some(header) = self.bytes_at(lsn, RECORD_HEADER_SIZE)? else {
            return Ok(Err(Invalid::NoRecord));
        };
        let Some(len) = claimed_length(&header) else {
            return Ok(Err(Invalid::NoRecord));
        };
        let Some(bytes) = self.bytes_at(lsn, len)? else {
            return Ok(Err(Invalid::NoRecord));
        };
        Ok(record::decode(&bytes, lsn, prev))
    }

    /// The next record, or where and why the log ends.
    pub fn next_record(&mut self) -> Result<Result<Record, EndOfLog>, WalError> {
        let lsn = self.next;
        match self.record_at(lsn, self.prev)? {
            Ok(rec) => {
                self.prev = Some(rec.lsn);
                self.next = next_record_start(rec.end);
                Ok(Ok(rec))
            }
            Err(why) => {
                self.check_not_damage(lsn, &why)?;
                Ok(Err(EndOfLog { at: lsn, why }))
            }
        }
    }

    /// Reads the record at `lsn` on its own (a checkpoint record the
    /// control file points to), without checking `prev`.
    pub fn read_at(&mut self, lsn: Lsn) -> Result<Result<Record, Invalid>, WalError> {
        self.record_at(lsn, None)
    }

    /// Fails if valid records continue well past an invalid one at `lsn`
    /// (see the module comment).
    fn check_not_damage(&mut self, lsn: Lsn, why: &Invalid) -> Result<(), WalError> {
        if *why != Invalid::BadCrc {
            return Ok(());
        }
        let Some(header) = self.bytes_at(lsn, RECORD_HEADER_SIZE)? else {
            return Ok(());
        };
        let Some(len) = claimed_length(&header) else {
            return Ok(());
        };
        let mut prev = lsn;
        let mut next = next_record_start(lsn + len as u64);
        // Bounded by the span: each step moves forward.
        while next - lsn <= TORN_TAIL_SPAN {
            match self.record_at(next, Some(prev))? {
                Ok(rec) => {
                    prev = rec.lsn;
                    next = next_record_start(rec.end);
                }
                Err(_) => return Ok(()),
            }
        }
        Err(WalError::Damaged {
            lsn,
            path: self.file_of(lsn),
            what: format!(
                "{why}, and valid records follow it for more than {} MiB",
                TORN_TAIL_SPAN >> 20
            ),
        })
    }

    /// The bytes of `lsn`'s WAL block before `lsn` (what a writer
    /// continuing at `lsn` rewrites with the block).
    pub fn block_head(&mut self, lsn: Lsn) -> Result<Vec<u8>, WalError> {
        let start = lsn - lsn % super::WAL_BLOCK_SIZE;
        Ok(self
            .bytes_at(start, (lsn - start) as usize)?
            .unwrap_or_else(|| vec![0; (lsn - start) as usize]))
    }
}

/// Most records [`ReadAhead`] holds decoded ahead of its caller.
pub const READ_AHEAD_RECORDS_MAX: usize = 4096;
/// Most bytes of log (as the records take it up) [`ReadAhead`] holds
/// decoded ahead of its caller, PostgreSQL's default
/// `wal_decode_buffer_size`. At least one record is always held, however
/// large (up to `MAX_RECORD_SIZE`).
pub const READ_AHEAD_BYTES_MAX: u64 = 512 * 1024;

/// Records decoded ahead of the one the caller is at, each with a note
/// the caller made of it when it was decoded (replay: which of its blocks
/// it asked a read stream for). Records come out in log order; the end of
/// the log, or an error reading it, comes out where it was met, after
/// every record before it, as [`WalReader::next_record`] would give it.
pub struct ReadAhead<A> {
    reader: WalReader,
    queue: VecDeque<(Record, A)>,
    /// Log bytes of the records queued.
    queued_bytes: u64,
    records_max: usize,
    bytes_max: u64,
    /// Where decoding stopped, once it has.
    stop: Option<Result<EndOfLog, WalError>>,
}

impl<A> ReadAhead<A> {
    /// Decodes from `reader` at most `records_max` records (at least 1)
    /// and, beyond the first, at most `bytes_max` bytes of log ahead.
    pub fn new(reader: WalReader, records_max: usize, bytes_max: u64) -> ReadAhead<A> {
        assert!(records_max >= 1, "a read-ahead holds at least one record");
        ReadAhead {
            reader,
            queue: VecDeque::with_capacity(records_max.min(READ_AHEAD_RECORDS_MAX)),
            queued_bytes: 0,
            records_max,
            bytes_max,
            stop: None,
        }
    }

    /// The next record and its note, after decoding ahead as far as the
    /// bounds allow (each newly decoded record goes to `note`, in log
    /// order); or where and why the log ends.
    pub fn next(
        &mut self,
        mut note: impl FnMut(&Record) -> A,
    ) -> Result<Result<(Record, A), EndOfLog>, WalError> {
        while self.stop.is_none()
            && self.queue.len() < self.records_max
            && (self.queue.is_empty() || self.queued_bytes < self.bytes_max)
        {
            match self.reader.next_record() {
                Ok(Ok(rec)) => {
                    let noted = note(&rec);
                    self.queued_bytes += rec.end - rec.lsn;
                    self.queue.push_back((rec, noted));
                }
                Ok(Err(end)) => self.stop = Some(Ok(end)),
                Err(e) => self.stop = Some(Err(e)),
            }
        }
        debug_assert!(self.queue.len() <= self.records_max);
        if let Some((rec, noted)) = self.queue.pop_front() {
            self.queued_bytes -= rec.end - rec.lsn;
            return Ok(Ok((rec, noted)));
        }
        debug_assert_eq!(self.queued_bytes, 0);
        match self.stop.take() {
            Some(Ok(end)) => {
                self.stop = Some(Ok(end.clone()));
                Ok(Err(end))
            }
            Some(Err(e)) => Err(e),
            None => unreachable!("decoding stops only at the end or an error"),
        }
    }

    /// The reader (for what it says of files and of the log's last block).
    pub fn reader_mut(&mut self) -> &mut WalReader {
        &mut self.reader
    }
}
