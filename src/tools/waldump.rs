//! `aiostore waldump`: the write-ahead log's records, one line each in
//! PostgreSQL's pg_waldump format, or counted per kind (`--stats`).
//!
//! It only reads: the segment files through [`WalReader`] (the reader
//! replay uses, so it stops where replay would, and says why) and, for
//! the default start, the control file. It takes no lock and opens no
//! [`crate::database::Database`], so it runs beside a database that is
//! running; the last records may then still be in flight, and reading
//! ends before them.
//!
//! Each resource manager describes its own records where their data
//! layout is defined (`heap::describe`, `heap::vm::describe`); the log's
//! own records (checkpoints, padding, transaction ends, relation files)
//! are described here.
//!
//! A start that is not where a record begins (`--start` anywhere, or a
//! segment file, whose first bytes may continue the previous segment's
//! last record) is moved forward to the first position holding a valid
//! record whose `prev` lies just behind it, as pg_waldump searches,
//! within [`RECORD_SPACING_MAX`].
//!
//! ```text
//! $ aiostore waldump --start 0/1000000
//! rmgr: XLOG        len (rec/tot):     40/    40, tx:          0, lsn: 0/01000000, prev 0/00000000, desc: CHECKPOINT_SHUTDOWN redo 0/01000000; time 2026-11-23 04:00:30 UTC
//! rmgr: XLOG        len (rec/tot):   8152/  8152, tx:          0, lsn: 0/01000028, prev 0/01000000, desc: PADDING to 0/01002000
//! rmgr: Storage     len (rec/tot):     29/    29, tx:          0, lsn: 0/01002000, prev 0/01000028, desc: CREATE rel 16384 fork main
//! …
//! end of WAL at 0/0100C000: no record (zeros or an invalid length)
//! ```

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::database::recovery::read_checkpoint;
use crate::heap::{self, vm};
use crate::wal::control::ControlData;
use crate::wal::reader::{EndOfLog, WalReader};
use crate::wal::record::{
    self, next_record_start, DataReader, Invalid, Record, BLOCK_REF_SIZE, MAX_RECORD_SIZE,
    RECORD_HEADER_SIZE, XACT_ABORT, XACT_COMMIT, XLOG_CHECKPOINT_ONLINE, XLOG_CHECKPOINT_SHUTDOWN,
    XLOG_PADDING,
};
use crate::wal::{
    list_segments, parse_segment_name, segment_path, Lsn, Rmgr, WalError, FIRST_LSN, INVALID_LSN,
    WAL_BLOCK_SIZE, WAL_DIR, WAL_SEGMENT_SIZE,
};

/// How far after any position the next record starts at the most: past
/// the longest record, then past the end of a block a header does not fit
/// in. Bounds the search for the first record, and is the farthest a
/// record's `prev` may lie behind it.
pub const RECORD_SPACING_MAX: u64 = MAX_RECORD_SIZE as u64 + WAL_BLOCK_SIZE;

/// Ways `waldump` fails before or while reading.
#[derive(Debug, Error)]
pub enum WaldumpError {
    #[error("\"{0}\" does not exist; give a data directory (--data-dir or AIOSTORE_DATA), its wal/ directory or a segment file in it")]
    Missing(PathBuf),
    #[error("\"{0}\" holds no WAL directory (wal/); give a data directory made by `aiostore init`, its wal/ directory or a segment file in it")]
    NoWalDir(PathBuf),
    #[error("\"{0}\" is not a WAL segment file; segment files are named with 24 hex digits (000000010000000000000001) and lie in a directory named wal")]
    NotASegment(PathBuf),
    #[error("could not find the redo point to start from in \"{dir}\" ({reason}); give --start X/Y (the first record of a new data directory is at {first})", first = pg_lsn(FIRST_LSN))]
    NoRedoPoint { dir: PathBuf, reason: String },
    #[error("--start {} is after --end {}; give a start before the end", pg_lsn(*.start), pg_lsn(*.end))]
    EmptyRange { start: Lsn, end: Lsn },
    #[error("--start {} is not in segment file \"{path}\", which holds {} to {}; leave --start out or give an LSN in that range", pg_lsn(*.start), pg_lsn(*.from), pg_lsn(*.to))]
    StartOutsideSegment {
        start: Lsn,
        path: PathBuf,
        from: Lsn,
        to: Lsn,
    },
    #[error("WAL segment file \"{path}\", which would hold {}, does not exist ({segments}); give a --start in a segment that is there", pg_lsn(*.lsn))]
    SegmentAbsent {
        lsn: Lsn,
        path: PathBuf,
        /// Which segments there are, for the message.
        segments: String,
    },
    #[error("no valid WAL record starts at {} or within {} KiB after it (what is there is damaged, or stale records of a recycled segment); leave --start out to start at the last checkpoint's redo point", pg_lsn(*.start), RECORD_SPACING_MAX >> 10)]
    NoRecord { start: Lsn },
    #[error(transparent)]
    Wal(#[from] WalError),
    #[error("could not write the output: {0}")]
    Output(#[from] std::io::Error),
}

/// What to read and how to show it.
#[derive(Debug, Clone, Default)]
pub struct WaldumpOptions {
    /// The data directory, its `wal/` directory or a segment file in it.
    pub path: PathBuf,
    /// Where to start; by default the last checkpoint's redo point (or a
    /// segment file's start).
    pub start: Option<Lsn>,
    /// Records starting at or after this are not read (a segment file
    /// ends at its end by default).
    pub end: Option<Lsn>,
    /// Read at most this many records.
    pub limit: Option<u64>,
    /// Print counts and sizes per resource manager and record kind
    /// instead of the records.
    pub stats: bool,
}

/// Why reading stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// The log ends: nothing valid at `at` (as replay would end there).
    EndOfLog(EndOfLog),
    /// The next record starts at or after `--end` (or the segment file's
    /// end).
    End { next: Lsn, end: Lsn },
    /// `--limit` records were read.
    Limit { next: Lsn, limit: u64 },
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::EndOfLog(e) => write!(f, "end of WAL at {}: {}", pg_lsn(e.at), e.why),
            Stop::End { next, end } => write!(
                f,
                "reached the end of the range at {} (the next record starts at {})",
                pg_lsn(*end),
                pg_lsn(*next)
            ),
            Stop::Limit { next, limit } => write!(
                f,
                "stopped after --limit {limit} records (the next starts at {})",
                pg_lsn(*next)
            ),
        }
    }
}

/// What was read.
#[derive(Debug, Clone)]
pub struct WaldumpReport {
    /// Where the first record read starts.
    pub first: Lsn,
    pub records: u64,
    pub stop: Stop,
}

/// Where the log to read is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct WalLocation {
    /// The directory holding `wal/` (what [`WalReader`] reads from).
    data_dir: PathBuf,
    /// A segment file's number, when one was given.
    segment: Option<u64>,
}

/// Finds the log from a data directory, a `wal/` directory or a segment
/// file in one.
fn locate(path: &Path) -> Result<WalLocation, WaldumpError> {
    if !path.exists() {
        return Err(WaldumpError::Missing(path.to_path_buf()));
    }
    let in_wal_dir = |p: &Path| p.file_name().is_some_and(|n| n == WAL_DIR);
    if path.is_dir() {
        if path.join(WAL_DIR).is_dir() {
            return Ok(WalLocation {
                data_dir: path.to_path_buf(),
                segment: None,
            });
        }
        if in_wal_dir(path) {
            if let Some(parent) = path.parent() {
                return Ok(WalLocation {
                    data_dir: parent.to_path_buf(),
                    segment: None,
                });
            }
        }
        return Err(WaldumpError::NoWalDir(path.to_path_buf()));
    }
    let segno = path
        .file_name()
        .and_then(|n| parse_segment_name(&n.to_string_lossy()));
    match (segno, path.parent()) {
        (Some(segno), Some(wal_dir)) if in_wal_dir(wal_dir) => Ok(WalLocation {
            data_dir: wal_dir.parent().unwrap_or(Path::new(".")).to_path_buf(),
            segment: Some(segno),
        }),
        _ => Err(WaldumpError::NotASegment(path.to_path_buf())),
    }
}

/// The last checkpoint's redo point, from the control file.
fn redo_point(data_dir: &Path) -> Result<Lsn, WaldumpError> {
    let no_redo = |reason: String| WaldumpError::NoRedoPoint {
        dir: data_dir.to_path_buf(),
        reason,
    };
    let control = ControlData::read(data_dir).map_err(|e| no_redo(e.to_string()))?;
    read_checkpoint(data_dir, control.checkpoint).map_err(|e| no_redo(e.to_string()))
}

/// Refuses a start in a segment that is not there, naming those that are
/// (the reader would take it for the end of the log, or a lost segment).
fn check_segment_present(data_dir: &Path, lsn: Lsn) -> Result<(), WaldumpError> {
    let path = segment_path(data_dir, lsn / WAL_SEGMENT_SIZE);
    if path.exists() {
        return Ok(());
    }
    let segments = match list_segments(data_dir)?.as_slice() {
        [] => "the WAL directory holds no segment".to_string(),
        [first, .., last] => format!(
            "the WAL directory holds {} to {}",
            pg_lsn(first * WAL_SEGMENT_SIZE),
            pg_lsn((last + 1) * WAL_SEGMENT_SIZE)
        ),
        [only] => format!(
            "the WAL directory holds {} to {}",
            pg_lsn(only * WAL_SEGMENT_SIZE),
            pg_lsn((only + 1) * WAL_SEGMENT_SIZE)
        ),
    };
    Err(WaldumpError::SegmentAbsent {
        lsn,
        path,
        segments,
    })
}

/// Whether `rec`, found by searching, can be where it was found: its
/// `prev` lies just behind it (or it is the log's first record). A stale
/// record of a recycled segment, valid in itself, points a segment or
/// more back.
fn plausibly_placed(rec: &Record) -> bool {
    if rec.prev == INVALID_LSN {
        return rec.lsn == FIRST_LSN;
    }
    rec.prev < rec.lsn && rec.lsn - rec.prev <= RECORD_SPACING_MAX
}

/// The first valid record at or after `from` and before `end`, searching
/// at most [`RECORD_SPACING_MAX`] bytes on.
fn find_first_record(
    reader: &mut WalReader,
    from: Lsn,
    end: Option<Lsn>,
) -> Result<Option<Lsn>, WaldumpError> {
    let mut lsn = next_record_start(from);
    // Bounded: each step moves at least 8 bytes forward.
    while lsn - from <= RECORD_SPACING_MAX && end.is_none_or(|end| lsn < end) {
        if let Ok(rec) = reader.read_at(lsn)? {
            if plausibly_placed(&rec) {
                return Ok(Some(lsn));
            }
        }
        lsn = next_record_start(lsn + 8);
    }
    Ok(None)
}

/// Reads the log as `opts` says and prints each record, or the
/// statistics, then why reading stopped. Records printed before a damaged
/// one stay printed; the error follows them.
pub fn run(opts: &WaldumpOptions, out: &mut dyn Write) -> Result<WaldumpReport, WaldumpError> {
    let loc = locate(&opts.path)?;
    let segment_range = loc
        .segment
        .map(|s| (s * WAL_SEGMENT_SIZE, (s + 1) * WAL_SEGMENT_SIZE));
    let start = match (opts.start, segment_range) {
        (Some(start), Some((from, to))) if !(from..to).contains(&start) => {
            return Err(WaldumpError::StartOutsideSegment {
                start,
                path: opts.path.clone(),
                from,
                to,
            })
        }
        (Some(start), _) => start,
        (None, Some((from, _))) => from,
        (None, None) => redo_point(&loc.data_dir)?,
    };
    let end = opts.end.or(segment_range.map(|(_, to)| to));
    if let Some(end) = end {
        if start >= end {
            return Err(WaldumpError::EmptyRange { start, end });
        }
    }
    check_segment_present(&loc.data_dir, start)?;
    let mut reader = WalReader::new(&loc.data_dir, start, None);
    let first = match find_first_record(&mut reader, start, end)? {
        Some(first) => first,
        // Nothing written where the search began: the log ends there
        // (a start at the insert position of a running database), which
        // the reading below reports as it reports any end.
        None if matches!(
            reader.read_at(next_record_start(start))?,
            Err(Invalid::NoRecord)
        ) =>
        {
            next_record_start(start)
        }
        None => return Err(WaldumpError::NoRecord { start }),
    };
    if first != next_record_start(start) && !opts.stats {
        writeln!(
            out,
            "first record is after {}, at {}, skipping over {} bytes",
            pg_lsn(start),
            pg_lsn(first),
            first - start
        )?;
    }
    let mut reader = WalReader::new(&loc.data_dir, first, None);
    let mut stats = Stats::default();
    let mut records = 0u64;
    // Bounded by the log: each record moves the reader forward, and it
    // stops at the first position without a valid record.
    let stop = loop {
        let next = reader.position();
        if let Some(end) = end.filter(|&end| next >= end) {
            break Stop::End { next, end };
        }
        if let Some(limit) = opts.limit.filter(|&limit| records >= limit) {
            break Stop::Limit { next, limit };
        }
        let rec = match reader.next_record()? {
            Ok(rec) => rec,
            Err(end_of_log) => break Stop::EndOfLog(end_of_log),
        };
        records += 1;
        if opts.stats {
            stats.add(&rec);
        } else {
            writeln!(out, "{}", format_record(&rec))?;
        }
    };
    if opts.stats {
        stats.print(out)?;
    }
    writeln!(out, "{stop}")?;
    Ok(WaldumpReport {
        first,
        records,
        stop,
    })
}

/// Parses an LSN argument, `X/Y` in hex as waldump prints them.
pub fn parse_lsn_arg(text: &str) -> Result<Lsn, String> {
    record::parse_lsn(text.trim()).ok_or_else(|| {
        format!(
            "\"{text}\" is not an LSN; write it as X/Y in hex, as waldump prints them (0/01000028)"
        )
    })
}

/// An LSN as pg_waldump prints it: the low half in 8 digits.
pub fn pg_lsn(lsn: Lsn) -> String {
    format!("{:X}/{:08X}", lsn >> 32, lsn as u32)
}

/// Bytes of `rec` that are page images: what is left of its length
/// after the header, the block references and the data.
fn image_bytes(rec: &Record) -> u64 {
    let total = rec.end - rec.lsn;
    let fixed = (RECORD_HEADER_SIZE + BLOCK_REF_SIZE * rec.blocks.len() + rec.data.len()) as u64;
    debug_assert!(total >= fixed, "a decoded record holds its parts");
    total.saturating_sub(fixed)
}

/// One record as pg_waldump prints it.
pub fn format_record(rec: &Record) -> String {
    let total = rec.end - rec.lsn;
    let mut line = format!(
        "rmgr: {:<11} len (rec/tot): {:>6}/{:>6}, tx: {:>10}, lsn: {}, prev {}, desc: {}",
        rec.rmgr.name(),
        total - image_bytes(rec),
        total,
        rec.xid,
        pg_lsn(rec.lsn),
        pg_lsn(rec.prev),
        describe(rec)
    );
    for (i, b) in rec.blocks.iter().enumerate() {
        line.push_str(&format!(", blkref #{i}: {}", b.tag));
        if b.image.is_some() {
            line.push_str(" FPW");
        }
    }
    line
}

/// The name of a record's kind within its resource manager.
pub fn kind_name(rmgr: Rmgr, info: u8) -> &'static str {
    match (rmgr, info) {
        (Rmgr::Xlog, XLOG_CHECKPOINT_SHUTDOWN) => "CHECKPOINT_SHUTDOWN",
        (Rmgr::Xlog, XLOG_CHECKPOINT_ONLINE) => "CHECKPOINT_ONLINE",
        (Rmgr::Xlog, XLOG_PADDING) => "PADDING",
        (Rmgr::Xact, XACT_COMMIT) => "COMMIT",
        (Rmgr::Xact, XACT_ABORT) => "ABORT",
        (Rmgr::Smgr, record::SMGR_CREATE) => "CREATE",
        (Rmgr::Smgr, record::SMGR_TRUNCATE) => "TRUNCATE",
        (Rmgr::Smgr, record::SMGR_DROP) => "DROP",
        (Rmgr::Heap, info) => heap::record_kind_name(info),
        (Rmgr::Vm, info) => vm::record_kind_name(info),
        (Rmgr::Btree, info) => crate::btree::change::record_kind_name(info),
        _ => "UNKNOWN",
    }
}

/// What a record's data says, after its kind.
pub fn describe(rec: &Record) -> String {
    let kind = kind_name(rec.rmgr, rec.info);
    let malformed = || format!("{kind} (malformed: {} bytes of data)", rec.data.len());
    let mut r = DataReader::new(&rec.data);
    match (rec.rmgr, rec.info) {
        (Rmgr::Heap, info) => heap::describe(info, &rec.data),
        (Rmgr::Vm, info) => vm::describe(info, &rec.data),
        (Rmgr::Btree, info) => crate::btree::change::describe(info, &rec.data),
        (Rmgr::Xlog, XLOG_CHECKPOINT_SHUTDOWN | XLOG_CHECKPOINT_ONLINE) => {
            match (r.u64(), r.u64()) {
                (Some(redo), Some(time)) => {
                    format!("{kind} redo {}; time {}", pg_lsn(redo), utc_time(time))
                }
                _ => malformed(),
            }
        }
        (Rmgr::Xlog, XLOG_PADDING) => format!("{kind} to {}", pg_lsn(rec.end)),
        (Rmgr::Xact, XACT_COMMIT | XACT_ABORT) => match r.u64() {
            Some(time) => format!("{kind} {}", utc_time(time)),
            None => malformed(),
        },
        (Rmgr::Smgr, info) => {
            let (Some(rel), Some(fork)) = (r.u32(), r.u8()) else {
                return malformed();
            };
            let fork = crate::storage::Fork::ALL
                .get(fork as usize)
                .map_or("unknown", |f| f.name());
            match info {
                record::SMGR_TRUNCATE => match r.u32() {
                    Some(nblocks) => format!("{kind} rel {rel} fork {fork} nblocks {nblocks}"),
                    None => malformed(),
                },
                _ => format!("{kind} rel {rel} fork {fork}"),
            }
        }
        _ => format!(
            "{kind} (info {}, {} bytes of data)",
            rec.info,
            rec.data.len()
        ),
    }
}

/// Seconds since the epoch as a UTC date and time (`2025-01-01 12:00:00
/// UTC`); a time past the year 9999 (a damaged record) as the number.
fn utc_time(secs: u64) -> String {
    /// 9999-12-31 23:59:59 UTC.
    const SECS_MAX: u64 = 253_402_300_799;
    if secs > SECS_MAX {
        return format!("{secs} s after the epoch");
    }
    // Howard Hinnant's days-to-civil: eras of 400 years from 0000-03-01.
    let days = (secs / 86_400) as i64 + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    let s = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// Counts and sizes of one kind of record.
#[derive(Debug, Clone, Copy, Default)]
struct KindStats {
    count: u64,
    /// Bytes without page images (pg_waldump's "record size").
    record_bytes: u64,
    image_bytes: u64,
}

impl KindStats {
    fn add(&mut self, other: &KindStats) {
        self.count += other.count;
        self.record_bytes += other.record_bytes;
        self.image_bytes += other.image_bytes;
    }
}

/// `--stats`: per resource manager and record kind.
#[derive(Debug, Default)]
struct Stats {
    /// By (resource manager, info): ordered as the resource managers are
    /// numbered.
    kinds: BTreeMap<(u8, u8), KindStats>,
}

impl Stats {
    fn add(&mut self, rec: &Record) {
        let images = image_bytes(rec);
        let k = self.kinds.entry((rec.rmgr as u8, rec.info)).or_default();
        k.count += 1;
        k.record_bytes += rec.end - rec.lsn - images;
        k.image_bytes += images;
    }

    /// Prints a table like `pg_waldump --stats=record`, with a row per
    /// resource manager above its kinds' rows.
    fn print(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut total = KindStats::default();
        for k in self.kinds.values() {
            total.add(k);
        }
        let pct = |part: u64, whole: u64| {
            if whole == 0 {
                0.0
            } else {
                100.0 * part as f64 / whole as f64
            }
        };
        let row = |out: &mut dyn Write, name: &str, k: &KindStats| {
            let combined = k.record_bytes + k.image_bytes;
            writeln!(
                out,
                "{name:<32} {:>10} ({:>6.2}) {:>14} ({:>6.2}) {:>14} ({:>6.2}) {:>14} ({:>6.2})",
                k.count,
                pct(k.count, total.count),
                k.record_bytes,
                pct(k.record_bytes, total.record_bytes),
                k.image_bytes,
                pct(k.image_bytes, total.image_bytes),
                combined,
                pct(combined, total.record_bytes + total.image_bytes),
            )
        };
        writeln!(
            out,
            "{:<32} {:>10} {:>8} {:>14} {:>8} {:>14} {:>8} {:>14} {:>8}",
            "Type", "N", "(%)", "Record size", "(%)", "FPI size", "(%)", "Combined size", "(%)"
        )?;
        writeln!(
            out,
            "{:<32} {:>10} {:>8} {:>14} {:>8} {:>14} {:>8} {:>14} {:>8}",
            "----", "-", "---", "-----------", "---", "--------", "---", "-------------", "---"
        )?;
        let mut by_rmgr = self.kinds.iter().peekable();
        while let Some((&(rmgr_id, _), _)) = by_rmgr.peek() {
            let rmgr = Rmgr::from_u8(rmgr_id).map_or("UNKNOWN", Rmgr::name);
            let mut kinds = Vec::new();
            let mut sum = KindStats::default();
            while let Some((&(_, info), k)) = by_rmgr.next_if(|(&(r, _), _)| r == rmgr_id) {
                sum.add(k);
                let kind = Rmgr::from_u8(rmgr_id).map_or("UNKNOWN", |r| kind_name(r, info));
                kinds.push((format!("  {rmgr}/{kind}"), *k));
            }
            row(out, rmgr, &sum)?;
            for (name, k) in &kinds {
                row(out, name, k)?;
            }
        }
        writeln!(
            out,
            "{:<32} {:>10} {:>8} {:>14} {:>8} {:>14} {:>8} {:>14} {:>8}",
            "", "--------", "", "--------", "", "--------", "", "--------", ""
        )?;
        let combined = total.record_bytes + total.image_bytes;
        writeln!(
            out,
            "{:<32} {:>10} {:>8} {:>14} [{:>5.2}%] {:>14} [{:>5.2}%] {:>14} {:>8}",
            "Total",
            total.count,
            "",
            total.record_bytes,
            pct(total.record_bytes, combined),
            total.image_bytes,
            pct(total.image_bytes, combined),
            combined,
            "[100%]"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_time_matches_known_dates() {
        assert_eq!(utc_time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_time(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc_time(1_735_732_800), "2025-01-01 12:00:00 UTC");
        assert_eq!(utc_time(253_402_300_799), "9999-12-31 23:59:59 UTC");
        assert!(utc_time(u64::MAX).contains("after the epoch"));
    }

    #[test]
    fn lsns_print_as_pg_waldump_prints_them_and_parse_back() {
        assert_eq!(pg_lsn(0x100_0028), "0/01000028");
        assert_eq!(pg_lsn(0x1_0000_0000), "1/00000000");
        assert_eq!(parse_lsn_arg("0/01000028"), Ok(0x100_0028));
        assert_eq!(parse_lsn_arg(" 0/1000028 "), Ok(0x100_0028));
        let err = parse_lsn_arg("16777256").unwrap_err();
        assert!(err.contains("X/Y"), "{err}");
    }

    #[test]
    fn a_path_is_a_data_directory_its_wal_directory_or_a_segment_in_it() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let wal = data.join(WAL_DIR);
        std::fs::create_dir_all(&wal).unwrap();
        let seg = wal.join("000000010000000000000001");
        std::fs::write(&seg, b"").unwrap();
        let whole = WalLocation {
            data_dir: data.clone(),
            segment: None,
        };
        assert_eq!(locate(&data).unwrap(), whole);
        assert_eq!(locate(&wal).unwrap(), whole);
        assert_eq!(locate(&seg).unwrap().segment, Some(1));
        assert!(matches!(
            locate(&tmp.path().join("nope")),
            Err(WaldumpError::Missing(_))
        ));
        assert!(matches!(locate(tmp.path()), Err(WaldumpError::NoWalDir(_))));
        let stray = tmp.path().join("notes.txt");
        std::fs::write(&stray, b"").unwrap();
        assert!(matches!(locate(&stray), Err(WaldumpError::NotASegment(_))));
    }
}
