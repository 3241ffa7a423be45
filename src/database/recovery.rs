//! Crash recovery: replaying the WAL from the last checkpoint's redo point
//! through the buffer pool, then cutting the log's torn tail.
//!
//! Each record is replayed by the part of the engine that made it (heap
//! and visibility-map changes by `heap::redo` and `vm::redo_*`, transaction
//! ends by the transaction manager, file creation, truncation and removal
//! here). A page whose `pd_lsn` is already at or past a record's end has
//! the change (it was written after it), so replay skips it: replay is
//! idempotent. A page image in a record replaces the page without reading
//! it, which is what repairs a page torn by the crash.
//!
//! With `recovery_prefetch` on, the pages upcoming records touch are read
//! ahead through a read stream while earlier records are replayed (see
//! `prefetch`); records still apply one at a time, in log order. Either
//! way replay writes the dirty buffers the clock sweep will take next
//! ahead of it, several at a time (`buffer::WriteBehind`): nothing else
//! writes during replay, and each eviction would otherwise wait for its
//! write (a table larger than the pool makes nearly every read evict a
//! dirty page).

mod prefetch;

pub use prefetch::PrefetchStats;

use std::cell::RefCell;
use std::collections::{BTreeSet, VecDeque};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::buffer::{BufferSession, WriteBehind, WRITE_BEHIND_WRITES_MAX};
use crate::heap::{self, vm};
use crate::page::{page_lsn, set_page_lsn, PageBytes};
use crate::storage::Fork;
use crate::stream::{Next, StreamLimits};
use crate::txn::TxnManager;
use crate::wal::reader::{
    EndOfLog, ReadAhead, WalReader, READ_AHEAD_BYTES_MAX, READ_AHEAD_RECORDS_MAX,
};
use crate::wal::record::{
    self, DataReader, Record, XACT_ABORT, XACT_COMMIT, XLOG_CHECKPOINT_ONLINE,
    XLOG_CHECKPOINT_SHUTDOWN,
};
use crate::wal::{format_lsn, segment_path, Lsn, Rmgr, WalError, WAL_SEGMENT_SIZE};

use super::DbError;

/// What replay did.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    pub from: Lsn,
    /// Where the log ends (the next record goes here).
    pub end: Lsn,
    /// Where the last valid record starts.
    pub last: Lsn,
    pub records: u64,
    /// Page changes applied (not skipped as already on the page).
    pub pages_changed: u64,
    pub images_restored: u64,
    /// Data pages read from files during replay (prefetched or not).
    pub pages_read: u64,
    /// Data pages written during replay (dirty buffers evicted, or
    /// written ahead of eviction).
    pub pages_written: u64,
    /// Of those, written ahead of the clock sweep (write-behind).
    pub written_behind: u64,
    /// What prefetching did; `None` with `recovery_prefetch` off.
    pub prefetch: Option<PrefetchStats>,
    pub elapsed: Duration,
    /// Why the log ends where it does.
    pub end_reason: String,
}

/// How replay goes about it.
#[derive(Debug, Clone, Copy)]
pub struct ReplayOptions {
    /// Read the pages of upcoming records ahead (`recovery_prefetch`).
    pub prefetch: bool,
    /// Sizing of the prefetching read stream.
    pub limits: StreamLimits,
}

/// The checkpoint a control file points to: its redo point.
pub fn read_checkpoint(dir: &Path, lsn: Lsn) -> Result<Lsn, DbError> {
    let mut reader = WalReader::new(dir, lsn, None);
    let damaged = |what: String| WalError::Damaged {
        lsn,
        path: reader_file(dir, lsn),
        what,
    };
    let rec = match reader.read_at(lsn)? {
        Ok(rec) => rec,
        Err(why) => {
            if !segment_path(dir, lsn / WAL_SEGMENT_SIZE).exists() {
                return Err(WalError::MissingSegment {
                    lsn,
                    path: reader_file(dir, lsn),
                }
                .into());
            }
            return Err(damaged(format!("the last checkpoint record is invalid: {why}")).into());
        }
    };
    if rec.rmgr != Rmgr::Xlog
        || !matches!(rec.info, XLOG_CHECKPOINT_SHUTDOWN | XLOG_CHECKPOINT_ONLINE)
    {
        return Err(
            damaged("the control file points to a record that is not a checkpoint".into()).into(),
        );
    }
    let redo = DataReader::new(&rec.data)
        .u64()
        .ok_or_else(|| damaged("checkpoint record without a redo point".into()))?;
    if redo > lsn {
        return Err(damaged(format!(
            "checkpoint's redo point {} is after it",
            format_lsn(redo)
        ))
        .into());
    }
    Ok(redo)
}

fn reader_file(dir: &Path, lsn: Lsn) -> std::path::PathBuf {
    segment_path(dir, lsn / WAL_SEGMENT_SIZE)
}

/// Replays every record from `redo` to the end of the log. `checkpoint`
/// is the control file's checkpoint record, which replay must reach.
/// Returns what it did and the bytes of the last WAL block before the
/// end (the writer rewrites them with the block).
pub fn replay(
    dir: &Path,
    s: &mut BufferSession,
    txn: &TxnManager,
    redo: Lsn,
    checkpoint: Lsn,
    options: ReplayOptions,
) -> Result<(RecoveryReport, Vec<u8>), DbError> {
    let started = Instant::now();
    let stats = s.pool().stats();
    let (reads_before, writes_before) = (
        stats.reads.load(Ordering::Relaxed),
        stats.writes.load(Ordering::Relaxed),
    );
    // Without prefetching nothing needs decoding ahead: one record at a
    // time, as the reader gives them.
    let mut ahead = if options.prefetch {
        ReadAhead::new(
            WalReader::new(dir, redo, None),
            READ_AHEAD_RECORDS_MAX,
            READ_AHEAD_BYTES_MAX,
        )
    } else {
        ReadAhead::new(WalReader::new(dir, redo, None), 1, 0)
    };
    let wanted = RefCell::new(VecDeque::new());
    let mut prefetcher = prefetch::begin(s, &wanted, options.prefetch, options.limits);
    let mut report = RecoveryReport {
        from: redo,
        ..Default::default()
    };
    let mut write_behind = WriteBehind::new(WRITE_BEHIND_WRITES_MAX);
    let replayed = replay_records(
        s,
        txn,
        &mut ahead,
        &mut prefetcher,
        &mut write_behind,
        &mut report,
    );
    // Ended on failure too: the stream gives back its pins, the writes in
    // flight finish.
    let prefetched = prefetcher.end(s);
    let written = s.finish_write_behind(&mut write_behind);
    let (end, missing) = replayed?;
    written?;
    report.written_behind = write_behind.stats().writes;
    if options.prefetch {
        report.prefetch = Some(prefetched);
    }
    let stats = s.pool().stats();
    report.pages_read = stats.reads.load(Ordering::Relaxed) - reads_before;
    report.pages_written = stats.writes.load(Ordering::Relaxed) - writes_before;
    let reader = ahead.reader_mut();
    if end <= checkpoint {
        return Err(WalError::Damaged {
            lsn: end,
            path: reader.file_of(end),
            what: format!(
                "the log ends ({}) before the last checkpoint record at {}",
                report.end_reason,
                format_lsn(checkpoint)
            ),
        }
        .into());
    }
    for rel in &missing {
        log::warn!(
            "recovery: the WAL changes relation {rel}, whose files are missing and which it never drops"
        );
    }
    report.end = end;
    report.elapsed = started.elapsed();
    // From the segment the reader holds already.
    let tail = reader.block_head(end)?;
    Ok((report, tail))
}

/// Replays the records `ahead` gives, in order, to the end of the log.
/// Returns where the log ends, and the relations records changed whose
/// files were missing and which no record dropped.
fn replay_records<F: FnMut(&mut ()) -> Next>(
    s: &mut BufferSession,
    txn: &TxnManager,
    ahead: &mut ReadAhead<prefetch::Noted>,
    prefetcher: &mut prefetch::Prefetcher<'_, F>,
    write_behind: &mut WriteBehind,
    report: &mut RecoveryReport,
) -> Result<(Lsn, BTreeSet<u32>), DbError> {
    // Relations whose files are gone: a later record must drop them.
    let mut missing: BTreeSet<u32> = BTreeSet::new();
    loop {
        match ahead.next(|rec| prefetcher.note(rec))? {
            Ok((rec, noted)) => {
                report.last = rec.lsn;
                report.records += 1;
                if rec.rmgr == Rmgr::Smgr {
                    // A write in flight of a block about to be cut off or
                    // removed would bring it back (see `WriteBehind`).
                    s.finish_write_behind(write_behind)?;
                } else {
                    s.write_behind(write_behind)?;
                }
                replay_record(s, txn, &rec, noted, prefetcher, &mut missing, report).map_err(
                    |what| WalError::Damaged {
                        lsn: rec.lsn,
                        path: ahead.reader_mut().file_of(rec.lsn),
                        what: format!("replay failed: {what}"),
                    },
                )?;
                prefetcher.applied(&rec);
            }
            Err(EndOfLog { at, why }) => {
                report.end_reason = why.to_string();
                return Ok((at, missing));
            }
        }
    }
}

/// Replays one record; the blocks `noted` come from `prefetcher`'s
/// stream. An error names what did not fit.
fn replay_record<F: FnMut(&mut ()) -> Next>(
    s: &mut BufferSession,
    txn: &TxnManager,
    rec: &Record,
    noted: prefetch::Noted,
    prefetcher: &mut prefetch::Prefetcher<'_, F>,
    missing: &mut BTreeSet<u32>,
    report: &mut RecoveryReport,
) -> Result<(), String> {
    debug_assert!(
        noted == 0 || matches!(rec.rmgr, Rmgr::Heap | Rmgr::Vm | Rmgr::Btree),
        "only page changes are read ahead"
    );
    match rec.rmgr {
        Rmgr::Xlog => Ok(()),
        Rmgr::Xact => {
            match rec.info {
                XACT_COMMIT => txn.redo_finish(rec.xid, true),
                XACT_ABORT => txn.redo_finish(rec.xid, false),
                _ => return Err("unknown transaction record".into()),
            }
            Ok(())
        }
        Rmgr::Smgr => {
            if let Some(rel) = prefetch::storage_record_rel(rec) {
                prefetcher.before_storage_change(rel);
            }
            replay_smgr(s, rec, missing)
        }
        Rmgr::Heap | Rmgr::Vm | Rmgr::Btree => {
            for (i, b) in rec.blocks.iter().enumerate() {
                let prefetched = noted & (1 << i) != 0;
                let relation = s.pool().relation(b.tag.rel);
                if !relation.exists(Fork::Main) {
                    if prefetched {
                        // Taken out of the stream all the same: the
                        // stream hands out blocks in order.
                        let id = prefetcher
                            .buffer(s, b.tag)
                            .map_err(|e| format!("{}: {e}", b.tag))?;
                        s.release(id);
                    }
                    missing.insert(b.tag.rel);
                    continue;
                }
                // A map record's bits stand only where the heap page has
                // its flag now: vacuum sets a bit, then looks at the flag
                // again and clears the bit if an update cleared the flag
                // meanwhile, and a crash may keep the first record and
                // lose the second. (PostgreSQL sets the flag and the bit
                // in one record.)
                let lacking = if rec.rmgr == Rmgr::Vm && rec.info == vm::VM_SET {
                    heap_pages_not_all_visible(s, b.tag.rel, &vm::record_blocks(&rec.data)?)
                } else {
                    Vec::new()
                };
                // Taken after the look at the heap pages above: replay
                // pins one page at a time besides the stream's pins, for
                // which the stream left room (see `ReadStream::begin`).
                let id = if prefetched {
                    prefetcher.buffer(s, b.tag)
                } else {
                    s.redo_buffer(b.tag.rel, b.tag.fork, b.tag.block, b.image.is_some())
                }
                .map_err(|e| format!("{}: {e}", b.tag))?;
                let outcome = s.modify_page(id, |page: &mut PageBytes| {
                    let changed = if let Some(image) = &b.image {
                        page.copy_from_slice(&image[..]);
                        set_page_lsn(page, rec.end);
                        true
                    } else if page_lsn(page) >= rec.end {
                        false
                    } else {
                        match rec.rmgr {
                            Rmgr::Heap => heap::redo(page, b.tag.block, rec.info, &rec.data)?,
                            Rmgr::Btree => crate::btree::change::redo(page, rec.info, &rec.data)?,
                            _ => vm::redo(page, rec.info, &rec.data)?,
                        }
                        set_page_lsn(page, rec.end);
                        true
                    };
                    vm::clear_bits(page, &lacking);
                    Ok(changed)
                });
                s.release(id);
                if outcome.map_err(|what: &str| format!("{}: {what}", b.tag))? {
                    report.pages_changed += 1;
                    if b.image.is_some() {
                        report.images_restored += 1;
                    }
                }
                // The map bit goes with the heap page's flag, whether or
                // not the heap page already had the change (it may have
                // been written after it while the map page was not, as
                // PostgreSQL's heap redo clears the bit either way).
                if rec.rmgr == Rmgr::Heap && heap::record_cleared_all_visible(&rec.data) {
                    vm::clear_replayed(s, b.tag.rel, &[b.tag.block], rec.end)
                        .map_err(|e| format!("{}: {e}", b.tag))?;
                }
            }
            Ok(())
        }
    }
}

/// The heap blocks among `blocks` of `rel` whose page lacks its
/// all-visible flag now, or cannot say (past the end, or unreadable: a
/// page torn by the crash, which a later image repairs). Not setting a
/// map bit is always safe.
fn heap_pages_not_all_visible(s: &mut BufferSession, rel: u32, blocks: &[u32]) -> Vec<u32> {
    let nblocks = s.pool().relation(rel).nblocks(Fork::Main).unwrap_or(0);
    blocks
        .iter()
        .copied()
        .filter(|&block| {
            if block >= nblocks {
                return true;
            }
            match s.read_buffer(rel, Fork::Main, block) {
                Ok(id) => {
                    let visible = s.with_page(id, |page| {
                        crate::page::page_flags(page) & crate::page::PD_ALL_VISIBLE != 0
                    });
                    s.release(id);
                    !visible
                }
                Err(e) => {
                    log::warn!(
                        "recovery: block {block} of relation {rel} could not be read to check a visibility map bit ({e}); the bit is left clear"
                    );
                    true
                }
            }
        })
        .collect()
}

fn replay_smgr(
    s: &mut BufferSession,
    rec: &Record,
    missing: &mut BTreeSet<u32>,
) -> Result<(), String> {
    let mut r = DataReader::new(&rec.data);
    let (rel, fork) = match (r.u32(), r.u8()) {
        (Some(rel), Some(fork)) => (
            rel,
            *Fork::ALL
                .get(fork as usize)
                .ok_or("storage record with an unknown fork")?,
        ),
        _ => return Err("malformed storage record".into()),
    };
    let relation = s.pool().relation(rel);
    let fail = |e: &dyn std::fmt::Display| format!("relation {rel}: {e}");
    match rec.info {
        record::SMGR_CREATE => {
            missing.remove(&rel);
            if !relation.exists(fork) {
                relation.create(fork).map_err(|e| fail(&e))?;
            }
        }
        record::SMGR_TRUNCATE => {
            let nblocks = r.u32().ok_or("truncation record without a length")?;
            if relation.exists(fork) {
                s.evict_blocks_from(rel, fork, nblocks)
                    .map_err(|e| fail(&e))?;
                if relation.nblocks(fork).map_err(|e| fail(&e))? > nblocks {
                    relation.truncate(fork, nblocks).map_err(|e| fail(&e))?;
                }
                if fork == Fork::Main && relation.exists(Fork::VisibilityMap) {
                    let vm_pages = relation
                        .nblocks(Fork::VisibilityMap)
                        .map_err(|e| fail(&e))?;
                    let covered = vm_pages.saturating_mul(vm::HEAP_BLOCKS_PER_VM_PAGE);
                    let gone: Vec<u32> = (nblocks..covered.max(nblocks)).collect();
                    vm::clear_replayed(s, rel, &gone, rec.end).map_err(|e| fail(&e))?;
                }
            }
        }
        record::SMGR_DROP => {
            missing.remove(&rel);
            s.discard_relation(rel).map_err(|e| fail(&e))?;
            relation.unlink().map_err(|e| fail(&e))?;
            s.pool().forget_written_files(rel);
        }
        _ => return Err("unknown storage record".into()),
    }
    Ok(())
}

/// Makes the log end at `end` for good: the rest of its segment is
/// zeroed and later segments (an earlier life's, or a torn write's) are
/// removed, so that a later recovery cannot read stale records past it.
pub fn cut_log_tail(dir: &Path, end: Lsn) -> Result<(), WalError> {
    let segno = end / WAL_SEGMENT_SIZE;
    let path = segment_path(dir, segno);
    let io = |op, path: &Path| {
        let path = path.to_path_buf();
        move |source| WalError::Io { op, path, source }
    };
    if path.exists() {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(io("open", &path))?;
        let from = end % WAL_SEGMENT_SIZE;
        let zeros = vec![0u8; (WAL_SEGMENT_SIZE - from) as usize];
        std::os::unix::fs::FileExt::write_all_at(&f, &zeros, from).map_err(io("write", &path))?;
        f.sync_all().map_err(io("sync", &path))?;
    }
    for later in crate::wal::list_segments(dir)?
        .into_iter()
        .filter(|&s| s > segno)
    {
        let p = segment_path(dir, later);
        std::fs::remove_file(&p).map_err(io("remove", &p))?;
    }
    crate::wal::sync_dir(&dir.join(crate::wal::WAL_DIR))
}

/// Relation numbers of table files under `base` (numbers at or above
/// `first_user`), from their file names (`16384`, `16384_vm`, `16384.1`).
pub fn table_files(base: &Path, first_user: u32) -> Result<BTreeSet<u32>, DbError> {
    let entries = std::fs::read_dir(base).map_err(super::io_err("read", base))?;
    let mut rels = BTreeSet::new();
    for entry in entries {
        let entry = entry.map_err(super::io_err("read", base))?;
        let name = entry.file_name().to_string_lossy().to_string();
        let digits: String = name.chars().take_while(|c| c.is_ascii_digit()).collect();
        if let Ok(rel) = digits.parse::<u32>() {
            if rel >= first_user {
                rels.insert(rel);
            }
        }
    }
    Ok(rels)
}
