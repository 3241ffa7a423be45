//! `aiostore bench seqscan` and `aiostore bench copy`: a cold
//! `SELECT count(*)` over a table much larger than `shared_buffers`, per
//! I/O method and `io_combine_limit`, against fio's sequential 128 KiB
//! direct read of the table's first segment in the same run; and loading
//! the same table from CSV, WAL-logged (into a table created before) and
//! skipping the WAL (created in the loading transaction), optionally
//! against PostgreSQL's COPY of the same CSV in the same run.
//!
//! The table is the reference thread's `bar(a int, b text, c text, d int)`
//! filled with `i, md5(i::text), 'abcdefghijklmnopqrstuvwxyz', i`, built
//! with the SQL generator in its own data directory (`seqscan/` in the
//! benchmark directory, reused when that is kept with `--keep`; the demo
//! builds a small one in its own directory). Each case opens the database
//! anew with direct I/O, so the pool starts empty and the page cache is not
//! involved: every run is cold.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use super::fio::{self, Pattern};
use crate::config::IoMethod;
use crate::database::{Database, Session};
use crate::storage::BLOCK_SIZE;

/// The benchmark table's name.
pub const TABLE: &str = "bar";
/// Bytes a `bar` row takes in a page (tuple, alignment, line pointer),
/// used to choose the row count for a size.
const ROW_BYTES: u64 = 100;
/// Rows per INSERT … SELECT statement while building: small enough that
/// progress moves every second or so on a slow machine.
const BUILD_ROWS_PER_STATEMENT: u64 = 250_000;

/// Rows of the `bar` table for a size in MiB.
pub fn rows_for_mib(size_mib: u64) -> u64 {
    (size_mib << 20) / ROW_BYTES
}

/// What to run.
#[derive(Debug, Clone)]
pub struct SeqscanOptions {
    pub dir: PathBuf,
    pub methods: Vec<IoMethod>,
    pub size_mib: u64,
    pub shared_buffers: u32,
    pub fio: bool,
    /// More `name=value` settings for every case: the demo's max_sessions
    /// and the user's start-up settings (io_workers, max_sessions, …).
    pub extra_settings: Vec<String>,
}

/// One measured case.
#[derive(Debug, Clone, Serialize)]
pub struct SeqscanCase {
    pub bench: &'static str,
    pub case: &'static str,
    pub method: &'static str,
    pub io_combine_limit: usize,
    pub io_direct: &'static str,
    pub shared_buffers_mib: u64,
    pub seconds: f64,
    pub mib_s: f64,
    pub rows: u64,
    pub reads: u64,
    pub ios: u64,
    /// mib_s / fio's (seqscan), or None.
    pub ratio: Option<f64>,
}

/// Settings of a case; `None` keeps the default I/O method (building the
/// table and looking at it).
pub fn settings(method: Option<IoMethod>, combine: usize, opts: &SeqscanOptions) -> Vec<String> {
    let mut settings = vec![
        "io_direct=data".into(),
        format!("io_combine_limit={combine}"),
        format!("shared_buffers={}", opts.shared_buffers),
    ];
    settings.extend(method.map(|m| format!("io_method={}", m.name())));
    settings.extend(opts.extra_settings.iter().cloned());
    settings
}

fn count(s: &mut Session) -> Result<u64, String> {
    super::one_count(s, &format!("SELECT count(*) FROM {TABLE}"))
}

/// Creates the data directory and the table unless they hold `rows` rows,
/// calling `progress(done, rows)` after each statement that adds rows.
pub fn ensure_table(
    opts: &SeqscanOptions,
    rows: u64,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(), String> {
    if !opts.dir.join("AIOSTORE_VERSION").exists() {
        Database::init(&opts.dir).map_err(|e| e.to_string())?;
    }
    let db = Database::open(&opts.dir, &settings(None, 16, opts)).map_err(|e| e.to_string())?;
    let mut s = db.session().map_err(|e| e.to_string())?;
    if db.catalog().table(TABLE).is_ok() && count(&mut s)? == rows {
        return Ok(());
    }
    crate::sql::execute(
        &mut s,
        &format!(
            "DROP TABLE IF EXISTS {TABLE}; CREATE TABLE {TABLE} (a integer, b text, c text, d integer)"
        ),
    )
    .map_err(|e| e.to_string())?;
    let mut done = 0;
    while done < rows {
        let n = BUILD_ROWS_PER_STATEMENT.min(rows - done);
        crate::sql::execute(
            &mut s,
            &format!(
                "INSERT INTO {TABLE} SELECT i, md5(i::text), 'abcdefghijklmnopqrstuvwxyz', i FROM generate_series({}, {}) i",
                done + 1,
                done + n
            ),
        )
        .map_err(|e| e.to_string())?;
        done += n;
        progress(done, rows);
    }
    // As the PostgreSQL comparison does (VACUUM FREEZE): pages become
    // all-visible, so the scan skips per-tuple visibility checks.
    crate::sql::execute(&mut s, &format!("VACUUM {TABLE}; CHECKPOINT"))
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// The benchmarks' build progress: a line on standard error per statement.
pub(crate) fn progress_lines() -> impl FnMut(u64, u64) {
    let started = Instant::now();
    move |done, rows| {
        let _ = writeln!(
            std::io::stderr(),
            "  built {done} of {rows} rows ({:.0} s)",
            started.elapsed().as_secs_f64()
        );
    }
}

fn emit(out: &mut dyn Write, json: bool, c: &SeqscanCase) -> Result<(), String> {
    super::emit_case(out, json, c, |c| {
        format!(
            "{:<8} {:<9} {:>7} {:>8.3} {:>9.1} {:>10} {:>9} {:>8} {:>6}",
            c.case,
            c.method,
            c.io_combine_limit,
            c.seconds,
            c.mib_s,
            c.rows,
            c.reads,
            c.ios,
            c.ratio.map_or("-".into(), |r| format!("{r:.2}"))
        )
    })
}

fn table_file(dir: &Path, rel: u32) -> PathBuf {
    dir.join("base").join(rel.to_string())
}

/// Opens the database anew with `method` and `io_combine_limit` =
/// `combine` and the options' settings (direct I/O, so neither the new pool
/// nor the page cache holds the table: what runs on it is cold), and checks
/// that the method is the one asked for.
pub fn open_cold(
    opts: &SeqscanOptions,
    method: IoMethod,
    combine: usize,
) -> Result<Arc<Database>, String> {
    super::open_checked(&opts.dir, &settings(Some(method), combine, opts), method)
}

/// Builds the table unless it is there ([`ensure_table`], `progress` as
/// there) and returns its rows, relation number and size in blocks.
pub fn prepare_table(
    opts: &SeqscanOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(u64, u32, u32), String> {
    let rows = rows_for_mib(opts.size_mib);
    ensure_table(opts, rows, progress)?;
    let db = Database::open(&opts.dir, &settings(None, 16, opts)).map_err(|e| e.to_string())?;
    let (rel, nblocks) = table_blocks(&db, TABLE)?;
    Ok((rows, rel, nblocks))
}

/// One cold `SELECT count(*)` case on a table of `nblocks` blocks: opens
/// the database with [`open_cold`], checks the count and returns the
/// figures.
pub fn count_case(
    opts: &SeqscanOptions,
    method: IoMethod,
    combine: usize,
    rows: u64,
    nblocks: u32,
) -> Result<SeqscanCase, String> {
    let pool_mib = super::pool_mib(opts.shared_buffers);
    let db = open_cold(opts, method, combine)?;
    let mut s = db.session().map_err(|e| e.to_string())?;
    let (reads_before, ios_before) = super::read_counters(&db, method);
    let started = Instant::now();
    let n = count(&mut s)?;
    let seconds = started.elapsed().as_secs_f64();
    let (reads_after, ios_after) = super::read_counters(&db, method);
    if n != rows {
        return Err(format!("count(*) returned {n}, expected {rows}"));
    }
    Ok(SeqscanCase {
        bench: "seqscan",
        case: "count",
        method: method.name(),
        io_combine_limit: combine,
        io_direct: "data",
        shared_buffers_mib: pool_mib,
        seconds,
        mib_s: blocks_mib(nblocks) / seconds,
        rows: n,
        reads: reads_after - reads_before,
        ios: ios_after - ios_before,
        ratio: None,
    })
}

/// Runs the seqscan benchmark.
pub fn run_seqscan(
    opts: &SeqscanOptions,
    json: bool,
    out: &mut dyn Write,
) -> Result<Vec<SeqscanCase>, String> {
    let pool_mib = super::pool_mib(opts.shared_buffers);
    if opts.size_mib < 8 * pool_mib {
        return Err(format!(
            "--size-mib {} is less than 8 × shared_buffers ({pool_mib} MiB); the scan would be cached",
            opts.size_mib
        ));
    }
    let _ = writeln!(
        std::io::stderr(),
        "preparing table {TABLE} ({} rows, ~{} MiB) in {} ...",
        rows_for_mib(opts.size_mib),
        opts.size_mib,
        opts.dir.display()
    );
    let (rows, rel, nblocks) = prepare_table(opts, &mut progress_lines())?;
    let table_mib = blocks_mib(nblocks);
    let use_fio = opts.fio && fio::available();
    if !json {
        writeln!(
            out,
            "aiostore bench seqscan: SELECT count(*) FROM {TABLE}, {rows} rows, {table_mib:.0} MiB; shared_buffers={pool_mib} MiB io_direct=data cache=cold (O_DIRECT, database reopened per case) fio={}",
            if use_fio { "yes" } else { "no" }
        )
        .map_err(|e| e.to_string())?;
        writeln!(
            out,
            "case     method    combine  seconds     MiB/s       rows     reads      ios  ratio"
        )
        .map_err(|e| e.to_string())?;
    }
    let mut cases = Vec::new();
    for &method in &opts.methods {
        let fio_mib_s = if use_fio {
            let file = table_file(&opts.dir, rel);
            let len = std::fs::metadata(&file).map_err(|e| e.to_string())?.len();
            let r = fio::run(
                &file,
                len,
                Pattern::Sequential,
                16 * BLOCK_SIZE,
                16,
                true,
                2.0,
            )?;
            let c = SeqscanCase {
                bench: "seqscan",
                case: "fio",
                method: method.name(),
                io_combine_limit: 16,
                io_direct: "data",
                shared_buffers_mib: pool_mib,
                seconds: 2.0,
                mib_s: r.bytes_per_second / (1 << 20) as f64,
                rows: 0,
                reads: 0,
                ios: 0,
                ratio: Some(1.0),
            };
            emit(out, json, &c)?;
            let mib_s = c.mib_s;
            cases.push(c);
            Some(mib_s)
        } else {
            None
        };
        for combine in [1usize, 16] {
            let mut c = count_case(opts, method, combine, rows, nblocks)?;
            c.ratio = fio_mib_s.map(|f| c.mib_s / f);
            emit(out, json, &c)?;
            cases.push(c);
        }
    }
    Ok(cases)
}

/// One measured load or unload.
#[derive(Debug, Clone, Serialize)]
pub struct CopyCase {
    pub bench: &'static str,
    /// "copy-from" (load the CSV into a new table) or "copy-to" (write
    /// the table out as CSV).
    pub case: &'static str,
    /// copy-from: "wal" (the table was created by an earlier transaction:
    /// every page is logged, and the commit flushes the log) or "nowal"
    /// (`BEGIN; CREATE TABLE; COPY; COMMIT`: the load skips the WAL and
    /// the commit syncs the table; `seconds` covers all four). copy-to: "-".
    pub wal: &'static str,
    pub method: &'static str,
    pub io_direct: &'static str,
    pub shared_buffers_mib: u64,
    /// copy-from: whether the CSV file was read from disk (page cache
    /// dropped first; root only) or may have been cached. copy-to: the
    /// table is always read cold (O_DIRECT, a new pool).
    pub cache: &'static str,
    pub seconds: f64,
    /// CSV MiB per second.
    pub mib_s: f64,
    pub rows: u64,
    pub rows_s: f64,
    pub csv_mib: f64,
    /// Table MiB written (copy-from) or read (copy-to).
    pub table_mib: f64,
    /// Writing back what the load left dirty (CHECKPOINT), not in `seconds`.
    pub checkpoint_seconds: f64,
    /// WAL MiB the load (or unload) inserted.
    pub wal_mib: f64,
}

fn emit_copy(out: &mut dyn Write, json: bool, c: &CopyCase) -> Result<(), String> {
    super::emit_case(out, json, c, |c| {
        format!(
            "{:<9} {:<5} {:<9} {:>8.3} {:>8.1} {:>10} {:>10.0} {:>9.0} {:>9.0} {:>7.0} {:>10.3}",
            c.case,
            c.wal,
            c.method,
            c.seconds,
            c.mib_s,
            c.rows,
            c.rows_s,
            c.csv_mib,
            c.table_mib,
            c.wal_mib,
            c.checkpoint_seconds
        )
    })
}

/// MiB in `nblocks` blocks, for the figures.
pub fn blocks_mib(nblocks: u32) -> f64 {
    nblocks as f64 * BLOCK_SIZE as f64 / (1 << 20) as f64
}

/// A table's relation number and size in blocks.
pub fn table_blocks(db: &Database, table: &str) -> Result<(u32, u32), String> {
    let rel = db
        .catalog()
        .table(table)
        .map_err(|e| e.to_string())?
        .heap
        .rel;
    let nblocks = db
        .pool()
        .relation(rel)
        .nblocks(crate::storage::Fork::Main)
        .map_err(|e| e.to_string())?;
    Ok((rel, nblocks))
}

/// Runs `sql` (a COPY, or a transaction block with one), checks that its
/// COPY copied `rows` rows, and returns them with the seconds it all took.
pub(crate) fn timed_copy(s: &mut Session, sql: &str, rows: u64) -> Result<(u64, f64), String> {
    let started = Instant::now();
    let results = crate::sql::execute(s, sql).map_err(|e| format!("{sql}: {e}"))?;
    let seconds = started.elapsed().as_secs_f64();
    let n = results
        .iter()
        .find_map(|r| r.tag.strip_prefix("COPY "))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    if n != rows {
        return Err(format!("{sql}: copied {n} rows, expected {rows}"));
    }
    Ok((n, seconds))
}

/// Drops the page cache if we may; says whether the next read is cold.
pub(crate) fn try_cold() -> &'static str {
    match super::drop_page_cache() {
        Ok(()) => "cold",
        Err(_) => "warm",
    }
}

/// The load table's definition (the seqscan table's columns).
const LOAD_TABLE_SQL: &str = "CREATE TABLE bar_load (a integer, b text, c text, d integer)";

/// WAL MiB inserted so far.
fn wal_mib(db: &Database) -> f64 {
    db.wal()
        .stats()
        .bytes
        .load(std::sync::atomic::Ordering::Relaxed) as f64
        / (1 << 20) as f64
}

/// How `aiostore bench copy` runs, beyond the table's options.
#[derive(Debug, Clone)]
pub struct CopyBenchOptions {
    /// `benches/pg_copy.sh`, to run PostgreSQL's loads of the same CSV
    /// after aiostore's and print the ratios.
    pub pg_script: Option<PathBuf>,
    /// Loads per method and WAL mode (and PostgreSQL's per mode).
    pub runs: u32,
    /// `io_direct` of the loads: "data" (the table is written with
    /// O_DIRECT, as every other case of the benchmark reads it) or "off"
    /// (written through the page cache, as PostgreSQL writes it).
    pub io_direct: &'static str,
}

/// `aiostore bench copy`: writes the seqscan table out as CSV (COPY TO,
/// kept next to the table as `bar-<rows>.csv`), then loads that file per
/// method (COPY FROM, bulk-write ring) `runs` times each way: WAL-logged
/// into a table created by an earlier transaction, and skipping the WAL
/// with the table created in the loading transaction. With a PostgreSQL
/// script, PostgreSQL then loads the same CSV both ways and the ratios of
/// the medians are printed.
pub fn run_copy(
    opts: &SeqscanOptions,
    copy: &CopyBenchOptions,
    json: bool,
    out: &mut dyn Write,
) -> Result<Vec<CopyCase>, String> {
    let pool_mib = super::pool_mib(opts.shared_buffers);
    let rows = rows_for_mib(opts.size_mib);
    let _ = writeln!(
        std::io::stderr(),
        "preparing table {TABLE} ({rows} rows, ~{} MiB) in {} ...",
        opts.size_mib,
        opts.dir.display()
    );
    ensure_table(opts, rows, &mut progress_lines())?;
    let csv = opts.dir.join(format!("{TABLE}-{rows}.csv"));
    let csv_text = csv
        .to_str()
        .ok_or_else(|| format!("{} is not UTF-8", csv.display()))?
        .replace('\'', "''");
    let io_direct = copy.io_direct;
    if !json {
        let load = super::load_average();
        writeln!(
            out,
            "aiostore bench copy: {TABLE}, {rows} rows, CSV {}; shared_buffers={pool_mib} MiB; COPY TO reads the table with O_DIRECT; loads with io_direct={io_direct} (data: the table is written bypassing the page cache; off: through it, as PostgreSQL writes), the CSV read through the page cache, dropped before each load when root; wal: the table created by an earlier transaction, nowal: BEGIN; CREATE TABLE; COPY; COMMIT (all timed); {} runs; load average {load}",
            csv.display(),
            copy.runs
        )
        .map_err(|e| e.to_string())?;
        writeln!(
            out,
            "case      wal   method     seconds    MiB/s       rows     rows/s   CSV MiB table MiB WAL MiB checkpoint"
        )
        .map_err(|e| e.to_string())?;
    }
    let mut cases = Vec::new();
    let case =
        |name, wal, method: IoMethod, cache, (n, seconds): (u64, f64), csv_mib, table_mib| {
            CopyCase {
                bench: "copy",
                case: name,
                wal,
                method: method.name(),
                io_direct,
                shared_buffers_mib: pool_mib,
                cache,
                seconds,
                mib_s: csv_mib / seconds,
                rows: n,
                rows_s: n as f64 / seconds,
                csv_mib,
                table_mib,
                checkpoint_seconds: 0.0,
                wal_mib: 0.0,
            }
        };
    let mut csv_mib = 0.0;
    for (i, &method) in opts.methods.iter().enumerate() {
        if i == 0 {
            // COPY TO, once (the table is read cold, with O_DIRECT from a
            // new pool): it also writes the CSV file the loads read.
            let db = open_cold(opts, method, 16)?;
            let mut s = db.session().map_err(|e| e.to_string())?;
            let copied = timed_copy(
                &mut s,
                &format!("COPY {TABLE} TO '{csv_text}' (FORMAT csv)"),
                rows,
            )?;
            csv_mib =
                std::fs::metadata(&csv).map_err(|e| e.to_string())?.len() as f64 / (1 << 20) as f64;
            let c = CopyCase {
                io_direct: "data",
                ..case(
                    "copy-to",
                    "-",
                    method,
                    "cold",
                    copied,
                    csv_mib,
                    blocks_mib(table_blocks(&db, TABLE)?.1),
                )
            };
            emit_copy(out, json, &c)?;
            cases.push(c);
        }
        let mut settings = settings(Some(method), 16, opts);
        for setting in &mut settings {
            if setting.starts_with("io_direct=") {
                *setting = format!("io_direct={io_direct}");
            }
        }
        let db = super::open_checked(&opts.dir, &settings, method)?;
        let mut s = db.session().map_err(|e| e.to_string())?;
        for _ in 0..copy.runs {
            for wal in ["wal", "nowal"] {
                crate::sql::execute(&mut s, "DROP TABLE IF EXISTS bar_load; CHECKPOINT")
                    .map_err(|e| e.to_string())?;
                let load = format!("COPY bar_load FROM '{csv_text}' (FORMAT csv)");
                let sql = if wal == "wal" {
                    crate::sql::execute(&mut s, LOAD_TABLE_SQL).map_err(|e| e.to_string())?;
                    load
                } else {
                    format!("BEGIN; {LOAD_TABLE_SQL}; {load}; COMMIT")
                };
                let cache = try_cold();
                let wal_before = wal_mib(&db);
                let loaded = timed_copy(&mut s, &sql, rows)?;
                let wal_after = wal_mib(&db);
                let started = Instant::now();
                crate::sql::execute(&mut s, "CHECKPOINT").map_err(|e| e.to_string())?;
                let c = CopyCase {
                    checkpoint_seconds: started.elapsed().as_secs_f64(),
                    wal_mib: wal_after - wal_before,
                    ..case(
                        "copy-from",
                        wal,
                        method,
                        cache,
                        loaded,
                        csv_mib,
                        blocks_mib(table_blocks(&db, "bar_load")?.1),
                    )
                };
                emit_copy(out, json, &c)?;
                cases.push(c);
            }
        }
        crate::sql::execute(&mut s, "DROP TABLE bar_load").map_err(|e| e.to_string())?;
    }
    if let Some(script) = &copy.pg_script {
        // The aiostore databases are closed: PostgreSQL gets the machine.
        let pg = run_pg_copy(script, &csv, copy.runs, json, out)?;
        print_pg_ratios(&cases, &pg, json, out)?;
    }
    Ok(cases)
}

/// One PostgreSQL load `benches/pg_copy.sh` reported: its mode ("wal" or
/// "nowal") and seconds.
#[derive(Debug, Clone, Serialize)]
pub struct PgCopyRun {
    pub bench: &'static str,
    pub case: &'static str,
    pub wal: String,
    pub run: u32,
    pub seconds: f64,
    pub rows: u64,
}

/// Runs `script` (`benches/pg_copy.sh CSV`) and reads its result lines
/// (`postgresql 15 copy-from mode=wal rows=… run=1 ms=…`), passing them
/// on.
fn run_pg_copy(
    script: &Path,
    csv: &Path,
    runs: u32,
    json: bool,
    out: &mut dyn Write,
) -> Result<Vec<PgCopyRun>, String> {
    let _ = writeln!(
        std::io::stderr(),
        "running {} {} ...",
        script.display(),
        csv.display()
    );
    let csv = csv
        .to_str()
        .ok_or_else(|| format!("{} is not UTF-8", csv.display()))?;
    let lines = super::run_pg_script(
        script,
        &[csv.to_string()],
        &[("RUNS", &runs.to_string())],
        "loads",
    )?;
    let mut runs = Vec::new();
    for line in lines {
        let run = line.parse(script, |l| {
            Some(PgCopyRun {
                bench: "copy",
                case: "postgresql",
                wal: l.field("mode")?.to_string(),
                run: l.field("run")?.parse().ok()?,
                seconds: l.field("ms")?.parse::<f64>().ok()? / 1000.0,
                rows: l.field("rows")?.parse().ok()?,
            })
        })?;
        if json {
            super::emit_case(out, true, &run, |_| String::new())?;
        } else {
            writeln!(out, "{}", line.text()).map_err(|e| e.to_string())?;
        }
        runs.push(run);
    }
    Ok(runs)
}

/// The median seconds of PostgreSQL's loads per mode against the median
/// of aiostore's per method and mode: the ratio is PostgreSQL's time over
/// aiostore's (above 1, aiostore loads faster).
fn print_pg_ratios(
    cases: &[CopyCase],
    pg: &[PgCopyRun],
    json: bool,
    out: &mut dyn Write,
) -> Result<(), String> {
    let mut keys: Vec<(&str, &str)> = Vec::new();
    for c in cases.iter().filter(|c| c.case == "copy-from") {
        if !keys.contains(&(c.wal, c.method)) {
            keys.push((c.wal, c.method));
        }
    }
    for (wal, method) in keys {
        let ours: Vec<f64> = cases
            .iter()
            .filter(|c| c.case == "copy-from" && c.wal == wal && c.method == method)
            .map(|c| c.seconds)
            .collect();
        let theirs: Vec<f64> = pg
            .iter()
            .filter(|r| r.wal == wal)
            .map(|r| r.seconds)
            .collect();
        let (Some(ours_median), Some(theirs_median)) =
            (super::median(&ours), super::median(&theirs))
        else {
            continue;
        };
        let ratio = theirs_median / ours_median;
        let line = if json {
            serde_json::json!({
                "bench": "copy",
                "case": "ratio",
                "wal": wal,
                "method": method,
                "aiostore_median_seconds": ours_median,
                "aiostore_runs": ours.len(),
                "postgresql_median_seconds": theirs_median,
                "postgresql_runs": theirs.len(),
                "ratio": ratio,
            })
            .to_string()
        } else {
            format!(
                "ratio copy-from {wal:<5} {method:<9} aiostore median {ours_median:>8.3} s of {}, postgresql median {theirs_median:>8.3} s of {}: {ratio:.2}x",
                ours.len(),
                theirs.len()
            )
        };
        writeln!(out, "{line}").map_err(|e| e.to_string())?;
    }
    Ok(())
}
