//! `aiostore bench recovery`: how long crash recovery takes to replay a
//! given amount of WAL of random updates to a table 4 × `shared_buffers`,
//! with `recovery_prefetch` off and on, per I/O method and added latency.
//!
//! Set-up, once per run (or reused from a `--keep` directory): a table of
//! `(id, v, pad)` rows is built and checkpointed, so that replay starts at
//! a redo point before any update; then transactions of random single-row
//! updates run until the WAL written since the checkpoint reaches the size
//! asked for (`checkpoint_timeout` and `max_wal_size` are set so that no
//! checkpoint moves the redo point meanwhile; it is checked). The rows are
//! updated through the heap, not SQL: without an index, `UPDATE … WHERE id
//! = n` would scan the whole table for each row, and a statement updating
//! many rows logs them in the table's block order, which replay would read
//! sequentially. The log is flushed and the database closed as a crash
//! closes it. Building runs on buffered files, for speed.
//!
//! Each case opens a copy of the crashed directory (its files synced, so
//! that no writeback of the copy runs during replay) with `io_direct =
//! data`: the pool starts empty and every page replay needs comes from
//! the device, so every case is cold. The WAL itself is read through the
//! page cache, where the copy left it. The time is replay's own (from the
//! recovery report), not the checkpoint that follows it. Cases with
//! prefetching off and on run next to each other in time, and the ratio
//! is off / on.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use super::XorShift;
use crate::config::IoMethod;
use crate::database::{Database, Session};
use crate::heap::tuple::encode;
use crate::heap::{DeleteOutcome, InsertState, Tid};
use crate::types::Value;

/// The benchmark table.
const TABLE: &str = "bench_recovery";
/// Characters of each row's `pad` column: rows of about 140 bytes in a
/// page, 58 to a page.
const PAD_CHARS: usize = 100;
/// Rows per INSERT … SELECT while building.
const BUILD_ROWS_PER_STATEMENT: u64 = 100_000;
/// Most building statements: a table that does not reach its size by then
/// is an error (the size is refused rather than built forever).
const BUILD_STATEMENTS_MAX: u64 = 100_000;
/// Row updates per transaction while producing WAL.
const UPDATES_PER_TRANSACTION: usize = 100;
/// Marks a crashed directory as complete (set-up finished).
const READY_FILE: &str = "BENCH_RECOVERY_READY";

/// What to run.
#[derive(Debug, Clone)]
pub struct RecoveryOptions {
    /// Where the crashed directory and the copies go.
    pub dir: PathBuf,
    pub methods: Vec<IoMethod>,
    pub shared_buffers_mib: u64,
    pub table_mib: u64,
    /// WAL of updates to produce after the checkpoint.
    pub wal_mib: u64,
    pub latencies_us: Vec<u64>,
    /// More `name=value` settings for every case (the user's io_workers,
    /// max_sessions, maintenance_io_concurrency, …).
    pub extra_settings: Vec<String>,
}

/// The crashed directory the cases replay.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct CrashImage {
    pub table_mib: f64,
    pub rows: u64,
    pub updates: u64,
    /// Redo point, and where the updates' WAL starts and ends.
    pub redo: u64,
    pub updates_start: u64,
    pub updates_end: u64,
}

/// One measured case.
#[derive(Debug, Clone, Serialize)]
pub struct RecoveryCase {
    pub bench: &'static str,
    pub method: &'static str,
    pub latency_us: u64,
    pub prefetch: bool,
    pub shared_buffers_mib: u64,
    pub wal_bytes: u64,
    pub records: u64,
    /// Full-page images replay restored instead of reading the page.
    pub images_restored: u64,
    pub seconds: f64,
    pub wal_mb_s: f64,
    pub pages_read: u64,
    pub pages_written: u64,
    /// Of those, written ahead of the clock sweep by replay's write-behind.
    pub written_behind: u64,
    /// Blocks the prefetching stream read ahead, its reads and how often
    /// replay still waited for one.
    pub prefetched: u64,
    pub stream_ios: u64,
    pub stream_waits: u64,
    pub avg_in_flight: f64,
    /// Seconds off / seconds on, on the case with prefetching on.
    pub ratio: Option<f64>,
}

/// Runs every case; returns them.
pub fn run(
    opts: &RecoveryOptions,
    json: bool,
    out: &mut dyn Write,
) -> Result<Vec<RecoveryCase>, String> {
    let text = |e: &dyn std::fmt::Display| e.to_string();
    if opts.table_mib == 0 || opts.wal_mib == 0 || opts.shared_buffers_mib == 0 {
        return Err(
            "bench recovery needs --shared-buffers-mib, --table-mib and --wal-mib above 0".into(),
        );
    }
    let image_dir = opts.dir.join(format!(
        "crashed-sb{}-t{}-w{}",
        opts.shared_buffers_mib, opts.table_mib, opts.wal_mib
    ));
    let load_before = super::load_average();
    let image = prepare(opts, &image_dir, out)?;
    writeln!(
        out,
        "bench recovery: shared_buffers={} MiB, table {:.0} MiB ({} rows), {} random row updates in transactions of {}, {:.1} MiB of WAL from the redo point; io_direct=data (cold: every page replay reads comes from the device), WAL read through the page cache; load average {load_before}",
        opts.shared_buffers_mib,
        image.table_mib,
        image.rows,
        image.updates,
        UPDATES_PER_TRANSACTION,
        (image.updates_end - image.redo) as f64 / (1 << 20) as f64,
    )
    .map_err(|e| text(&e))?;
    if !json {
        writeln!(
            out,
            "{:>8} {:>10} {:>8} {:>8} {:>9} {:>7} {:>8} {:>10} {:>15} {:>10} {:>10} {:>6} {:>9} {:>7}",
            "method",
            "latency_us",
            "prefetch",
            "seconds",
            "records",
            "images",
            "WAL_MB/s",
            "pages_read",
            "written(behind)",
            "prefetched",
            "stream_ios",
            "waits",
            "in_flight",
            "speedup"
        )
        .map_err(|e| text(&e))?;
    }
    let mut cases = Vec::new();
    for &method in &opts.methods {
        for &latency_us in &opts.latencies_us {
            let off = run_case(opts, &image_dir, &image, method, latency_us, false)?;
            let mut on = run_case(opts, &image_dir, &image, method, latency_us, true)?;
            on.ratio = Some(off.seconds / on.seconds.max(1e-9));
            for case in [off, on] {
                super::emit_case(out, json, &case, |c| {
                    format!(
                        "{:>8} {:>10} {:>8} {:>8.2} {:>9} {:>7} {:>8.1} {:>10} {:>15} {:>10} {:>10} {:>6} {:>9.1} {:>7}",
                        c.method,
                        c.latency_us,
                        if c.prefetch { "on" } else { "off" },
                        c.seconds,
                        c.records,
                        c.images_restored,
                        c.wal_mb_s,
                        c.pages_read,
                        format!("{}({})", c.pages_written, c.written_behind),
                        c.prefetched,
                        c.stream_ios,
                        c.stream_waits,
                        c.avg_in_flight,
                        c.ratio.map_or("-".into(), |r| format!("{r:.2}x")),
                    )
                })?;
                cases.push(case);
            }
        }
    }
    if !json {
        writeln!(out, "load average after: {}", super::load_average()).map_err(|e| text(&e))?;
    }
    Ok(cases)
}

/// Settings every database of the benchmark opens with.
fn common_settings(opts: &RecoveryOptions) -> Vec<String> {
    let mut settings = vec![
        format!("shared_buffers={}MB", opts.shared_buffers_mib),
        // No checkpoint may move the redo point past the updates.
        "checkpoint_timeout=86400".into(),
        format!("max_wal_size={}MB", (opts.wal_mib * 4).max(1024)),
    ];
    settings.extend(opts.extra_settings.iter().cloned());
    settings
}

/// Builds the crashed directory unless a complete one is there already.
fn prepare(opts: &RecoveryOptions, dir: &Path, out: &mut dyn Write) -> Result<CrashImage, String> {
    let ready = dir.join(READY_FILE);
    if let Ok(text) = std::fs::read_to_string(&ready) {
        if let Ok(image) = serde_json::from_str::<CrashImage>(&text) {
            return Ok(image);
        }
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    Database::init(dir).map_err(|e| e.to_string())?;
    let mut settings = common_settings(opts);
    settings.push("synchronous_commit=off".into());
    let db = Database::open(dir, &settings).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut s = db.session().map_err(|e| e.to_string())?;
    let (rows, table_mib) = build_table(&db, &mut s, opts.table_mib)?;
    let mut tids = row_tids(&db, &mut s, rows)?;
    super::execute(&mut s, "CHECKPOINT")?;
    let redo = db.wal().redo();
    let updates_start = db.wal().insert_position();
    let target = updates_start + (opts.wal_mib << 20);
    let mut rng = XorShift::new(0x5EED_2EC0);
    let mut updates = 0u64;
    let mut last_note = Instant::now();
    // Bounded: each transaction writes WAL, so the position passes the
    // target after at most (target - start) / (bytes per transaction).
    while db.wal().insert_position() < target {
        update_random_rows(&mut s, &mut tids, &mut rng, UPDATES_PER_TRANSACTION)?;
        updates += UPDATES_PER_TRANSACTION as u64;
        if last_note.elapsed().as_secs() >= 10 {
            eprintln!(
                "bench recovery: {} of {} MiB of WAL written",
                (db.wal().insert_position() - updates_start) >> 20,
                opts.wal_mib
            );
            last_note = Instant::now();
        }
    }
    if db.wal().redo() != redo {
        return Err(format!(
            "a checkpoint moved the redo point during the updates (from {:#x} to {:#x}); replay would not cover them",
            redo,
            db.wal().redo()
        ));
    }
    let updates_end = db.wal().insert_position();
    db.wal().flush_all().map_err(|e| e.to_string())?;
    drop(s);
    db.simulate_crash();
    drop(db);
    let image = CrashImage {
        table_mib,
        rows,
        updates,
        redo,
        updates_start,
        updates_end,
    };
    std::fs::write(
        &ready,
        serde_json::to_string(&image).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("{}: {e}", ready.display()))?;
    writeln!(
        out,
        "bench recovery: crashed directory built in {:.1} s",
        started.elapsed().as_secs_f64()
    )
    .map_err(|e| e.to_string())?;
    Ok(image)
}

/// Creates the table and fills it to `table_mib`; returns its rows and
/// its size in MiB.
fn build_table(db: &Database, s: &mut Session, table_mib: u64) -> Result<(u64, f64), String> {
    super::execute(
        s,
        &format!("CREATE TABLE {TABLE} (id integer NOT NULL, v integer NOT NULL, pad text)"),
    )?;
    let rel = db
        .catalog()
        .table(TABLE)
        .map_err(|e| e.to_string())?
        .heap
        .rel;
    let target_blocks = (table_mib << 20) / crate::storage::BLOCK_SIZE as u64;
    let mut rows = 0u64;
    for _ in 0..BUILD_STATEMENTS_MAX {
        let nblocks = db
            .pool()
            .relation(rel)
            .nblocks(crate::storage::Fork::Main)
            .map_err(|e| e.to_string())? as u64;
        if nblocks >= target_blocks {
            let mib = (nblocks * crate::storage::BLOCK_SIZE as u64) as f64 / (1 << 20) as f64;
            return Ok((rows, mib));
        }
        // The last statement adds about what is missing.
        let per_block = if nblocks == 0 {
            58
        } else {
            rows.div_ceil(nblocks)
        };
        let n = ((target_blocks - nblocks) * per_block).clamp(1, BUILD_ROWS_PER_STATEMENT);
        super::execute(
            s,
            &format!(
                "INSERT INTO {TABLE} SELECT g, 0, repeat('x', {PAD_CHARS}) FROM generate_series({}, {}) g",
                rows + 1,
                rows + n
            ),
        )?;
        rows += n;
    }
    Err(format!(
        "the table did not reach {table_mib} MiB in {BUILD_STATEMENTS_MAX} statements"
    ))
}

/// Where each row is, by id (1-based; index 0 unused).
fn row_tids(db: &Database, s: &mut Session, rows: u64) -> Result<Vec<Tid>, String> {
    let table = db.catalog().table(TABLE).map_err(|e| e.to_string())?;
    let snap = s.start_statement().map_err(|e| e.to_string())?;
    let mut tids = vec![Tid { block: 0, index: 0 }; rows as usize + 1];
    let mut found = 0u64;
    let mut row = Vec::new();
    let mut failure = None;
    let limits = s.stream_limits();
    db.heap()
        .scan(
            &mut s.buf,
            &table.heap,
            snap.get(),
            limits,
            |tid, bytes| {
                match crate::heap::tuple::decode(
                    &table.heap.types,
                    bytes,
                    &[true, false, false],
                    &mut row,
                ) {
                    Ok(()) => match row.first() {
                        Some(Value::Integer(id)) if (1..=rows as i64).contains(&(*id as i64)) => {
                            tids[*id as usize] = tid;
                            found += 1;
                        }
                        other => failure = Some(format!("unexpected row id {other:?}")),
                    },
                    Err(e) => failure = Some(e.to_string()),
                }
                crate::heap::ScanControl::Continue
            },
            || crate::heap::ScanControl::Continue,
        )
        .map_err(|e| e.to_string())?;
    drop(snap);
    s.end_statement(true).map_err(|e| e.to_string())?;
    if let Some(e) = failure {
        return Err(e);
    }
    if found != rows {
        return Err(format!("found {found} of {rows} rows"));
    }
    Ok(tids)
}

/// One transaction updating `n` random rows (a new `v`), each through the
/// heap as UPDATE does: the new version inserted, the old one marked
/// updated to it.
fn update_random_rows(
    s: &mut Session,
    tids: &mut [Tid],
    rng: &mut XorShift,
    n: usize,
) -> Result<(), String> {
    let db = s.db().clone();
    let table = db.catalog().table(TABLE).map_err(|e| e.to_string())?;
    let mut snap = s.start_statement().map_err(|e| e.to_string())?;
    let (xid, cid) = s.xid(&mut snap).map_err(|e| e.to_string())?;
    let pad = Value::Text("y".repeat(PAD_CHARS));
    let mut state = InsertState::default();
    let mut result = Ok(());
    for _ in 0..n {
        let id = 1 + rng.below(tids.len() as u64 - 1) as usize;
        let values = [
            Value::Integer(id as i32),
            Value::Integer(rng.below(1 << 30) as i32),
            pad.clone(),
        ];
        let updated = (|| {
            let tuple = encode(&table.heap.types, &values, xid, cid).map_err(|e| e.to_string())?;
            let new = db
                .heap()
                .insert(&mut s.buf, &table.heap, &tuple, &mut state)
                .map_err(|e| e.to_string())?;
            match db
                .heap()
                .try_delete(
                    &mut s.buf,
                    &table.heap,
                    tids[id],
                    &crate::heap::Writer {
                        xid,
                        cid,
                        waits: crate::txn::WaitLimits::DEFAULT,
                    },
                    Some(new),
                    false,
                    // The key column stays.
                    crate::txn::RowLockMode::NoKeyUpdate,
                )
                .map_err(|e| e.to_string())?
            {
                DeleteOutcome::Deleted => Ok(new),
                other => Err(format!("row {id} could not be updated: {other:?}")),
            }
        })();
        match updated {
            Ok(new) => tids[id] = new,
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    state.finish(&mut s.buf);
    drop(snap);
    s.end_statement(result.is_ok()).map_err(|e| e.to_string())?;
    result
}

/// Copies `from` to `to` (a data directory: files and directories), each
/// file synced, so that nothing of the copy is written back while a case
/// runs.
fn copy_synced(from: &Path, to: &Path) -> Result<(), String> {
    let fail = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    std::fs::create_dir_all(to).map_err(|e| fail(to, e))?;
    for entry in std::fs::read_dir(from).map_err(|e| fail(from, e))? {
        let entry = entry.map_err(|e| fail(from, e))?;
        let target = to.join(entry.file_name());
        let kind = entry.file_type().map_err(|e| fail(&entry.path(), e))?;
        if kind.is_dir() {
            copy_synced(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target).map_err(|e| fail(&target, e))?;
            std::fs::File::open(&target)
                .and_then(|f| f.sync_all())
                .map_err(|e| fail(&target, e))?;
        }
    }
    Ok(())
}

fn run_case(
    opts: &RecoveryOptions,
    image_dir: &Path,
    image: &CrashImage,
    method: IoMethod,
    latency_us: u64,
    prefetch: bool,
) -> Result<RecoveryCase, String> {
    let path = opts.dir.join("case");
    if path.exists() {
        std::fs::remove_dir_all(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    copy_synced(image_dir, &path)?;
    std::fs::remove_file(path.join(READY_FILE)).map_err(|e| e.to_string())?;
    let mut settings = common_settings(opts);
    settings.extend([
        format!("io_method={}", method.name()),
        "io_direct=data".into(),
        format!("debug_io_latency_us={latency_us}"),
        format!("recovery_prefetch={}", if prefetch { "on" } else { "off" }),
    ]);
    let db = super::open_checked(&path, &settings, method)?;
    let report = db
        .recovery()
        .cloned()
        .ok_or("the copy of the crashed directory opened without replay")?;
    drop(db);
    let _ = std::fs::remove_dir_all(&path);
    if report.from > image.updates_start || report.end < image.updates_end {
        return Err(format!(
            "replay covered {:#x}..{:#x}, not the updates at {:#x}..{:#x}",
            report.from, report.end, image.updates_start, image.updates_end
        ));
    }
    let seconds = report.elapsed.as_secs_f64();
    let wal_bytes = report.end - report.from;
    let stream = report.prefetch.map(|p| (p.blocks_noted, p.stream));
    Ok(RecoveryCase {
        bench: "recovery",
        method: method.name(),
        latency_us,
        prefetch,
        shared_buffers_mib: opts.shared_buffers_mib,
        wal_bytes,
        records: report.records,
        images_restored: report.images_restored,
        seconds,
        wal_mb_s: wal_bytes as f64 / 1e6 / seconds.max(1e-9),
        pages_read: report.pages_read,
        pages_written: report.pages_written,
        written_behind: report.written_behind,
        prefetched: stream.map_or(0, |s| s.0),
        stream_ios: stream.map_or(0, |s| s.1.ios),
        stream_waits: stream.map_or(0, |s| s.1.waits),
        avg_in_flight: stream.map_or(0.0, |s| s.1.avg_in_flight()),
        ratio: None,
    })
}
