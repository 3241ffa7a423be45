//! `aiostore bench index-build`: `CREATE INDEX` on the integer column `a`
//! and on the text column `b` of the reference table, several runs each,
//! against PostgreSQL's `CREATE INDEX` of the same statements on the same
//! data in the same run (`benches/pg_index_build.sh`).
//!
//! The table is the seqscan benchmark's `bar(a int, b text, c text, d int)`
//! filled with `i, md5(i::text), 'abcdefghijklmnopqrstuvwxyz', i`
//! ([`super::seqscan::ensure_table`]), in a data directory of its own
//! (`index-build/` in the benchmark directory, reused when kept with
//! `--keep`), since its row count is not the seqscan table's.
//!
//! What has to match for the ratio to mean something, and is stated in
//! the output:
//! - the sort memory: `maintenance_work_mem` on both (PostgreSQL's default,
//!   64MB, unless `--maintenance-work-mem`);
//! - one process building: PostgreSQL with
//!   `max_parallel_maintenance_workers = 0`, since we build with one
//!   session;
//! - the text order: our text comparison is byte order (Rust's `str`
//!   ordering, the "C" collation), so PostgreSQL's column is
//!   `COLLATE "C"`; under a linguistic collation it would sort otherwise
//!   and more slowly;
//! - the WAL: both log every index page built as a full image
//!   (PostgreSQL at `wal_level = replica`, its default), and both commit;
//! - the cache: warm runs read the table once before, through the page
//!   cache (our `io_direct = off`, as PostgreSQL 15 reads); cold runs drop
//!   the page cache before each `CREATE INDEX` (root only) and reopen the
//!   database (PostgreSQL: restart), so the table comes from the disk.
//!
//! Between runs the index is dropped and a checkpoint writes back what the
//! run left dirty, on both sides. The two systems' runs alternate (ours,
//! then PostgreSQL's of the same case, then ours again), so that a change
//! in the machine's load falls on both.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use super::seqscan::{self, SeqscanOptions, TABLE};
use crate::config::IoMethod;
use crate::database::{Database, Session};

/// The columns indexed, each with its index's name: the integer column and
/// the text (md5) column.
pub const COLUMNS: [(&str, &str); 2] = [("a", "bar_a_idx"), ("b", "bar_b_idx")];

/// Whether a run's table came from memory or from the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Cache {
    /// Read once before (a `count(*)`), through the page cache.
    Warm,
    /// The page cache dropped and the database reopened before the run.
    Cold,
}

impl Cache {
    pub fn name(self) -> &'static str {
        match self {
            Cache::Warm => "warm",
            Cache::Cold => "cold",
        }
    }

    pub fn parse(text: &str) -> Option<Cache> {
        match text {
            "warm" => Some(Cache::Warm),
            "cold" => Some(Cache::Cold),
            _ => None,
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct IndexBuildOptions {
    /// The data directory of the table (made if missing).
    pub dir: PathBuf,
    pub rows: u64,
    /// `CREATE INDEX` runs per column and cache state, on each system.
    pub runs: u32,
    /// As both systems parse it ("64MB").
    pub maintenance_work_mem: String,
    pub caches: Vec<Cache>,
    pub method: IoMethod,
    pub shared_buffers: u32,
    /// `benches/pg_index_build.sh`, run after our builds on the same data.
    pub pg_script: Option<PathBuf>,
    /// The user's start-up settings every database of the run takes over
    /// (io_workers, max_sessions, …).
    pub extra_settings: Vec<String>,
}

/// One timed `CREATE INDEX`.
#[derive(Debug, Clone, Serialize)]
pub struct IndexBuildRun {
    pub bench: &'static str,
    /// "aiostore" or "postgresql".
    pub system: &'static str,
    pub column: String,
    pub cache: Cache,
    pub run: u32,
    pub ms: f64,
    pub rows: u64,
}

impl IndexBuildOptions {
    /// The table's options as the seqscan benchmark builds it.
    fn table(&self) -> SeqscanOptions {
        SeqscanOptions {
            dir: self.dir.clone(),
            methods: vec![self.method],
            size_mib: 0,
            shared_buffers: self.shared_buffers,
            fio: false,
            extra_settings: self.extra_settings.clone(),
        }
    }

    /// Settings of the timed database: buffered I/O (PostgreSQL 15 has no
    /// other), the run's sort memory and method.
    fn settings(&self) -> Vec<String> {
        let mut settings = vec![
            "io_direct=off".to_string(),
            format!("io_method={}", self.method.name()),
            format!("shared_buffers={}", self.shared_buffers),
            format!("maintenance_work_mem={}", self.maintenance_work_mem),
        ];
        settings.extend(self.extra_settings.iter().cloned());
        settings
    }
}

fn execute(s: &mut Session, sql: &str) -> Result<(), String> {
    super::execute(s, sql).map(drop)
}

/// Opens the table's database with the run's settings and checks the
/// method.
fn open(opts: &IndexBuildOptions) -> Result<Arc<Database>, String> {
    super::open_checked(&opts.dir, &opts.settings(), opts.method)
}

fn emit(out: &mut dyn Write, json: bool, r: &IndexBuildRun) -> Result<(), String> {
    super::emit_case(out, json, r, |r| {
        format!(
            "{:<10} {:<6} {:<5} {:>3} {:>10.1}",
            r.system,
            r.column,
            r.cache.name(),
            r.run,
            r.ms
        )
    })
}

/// Runs the benchmark: builds the table unless it is there, times our
/// builds, then PostgreSQL's (if a script is given), then prints the
/// medians and the ratios ours / PostgreSQL's.
pub fn run(
    opts: &IndexBuildOptions,
    json: bool,
    out: &mut dyn Write,
) -> Result<Vec<IndexBuildRun>, String> {
    if opts.rows == 0 || opts.runs == 0 || opts.caches.is_empty() {
        return Err("bench index-build needs --rows and --runs of at least 1 and a --cache".into());
    }
    if opts.caches.contains(&Cache::Cold) {
        super::drop_page_cache().map_err(|e| {
            format!("--cache cold drops the page cache, which needs root (/proc/sys/vm/drop_caches: {e}); run as root or with --cache warm")
        })?;
    }
    let _ = writeln!(
        std::io::stderr(),
        "preparing table {TABLE} ({} rows) in {} ...",
        opts.rows,
        opts.dir.display()
    );
    seqscan::ensure_table(&opts.table(), opts.rows, &mut seqscan::progress_lines())?;
    let nblocks = {
        let db = open(opts)?;
        seqscan::table_blocks(&db, TABLE)?.1
    };
    let pool_mib = super::pool_mib(opts.shared_buffers);
    if !json {
        writeln!(
            out,
            "aiostore bench index-build: CREATE INDEX ON {TABLE} (a) (integer) and ON {TABLE} (b) (text, md5 hex), {} rows, {:.0} MiB; maintenance_work_mem={} shared_buffers={pool_mib} MiB io_method={} io_direct=off; {} runs per column and cache, DROP INDEX and CHECKPOINT between runs; load average {}",
            opts.rows,
            seqscan::blocks_mib(nblocks),
            opts.maintenance_work_mem,
            opts.method.name(),
            opts.runs,
            super::load_average()
        )
        .map_err(|e| e.to_string())?;
        writeln!(
            out,
            "runs alternate: each of ours is followed by PostgreSQL's of the same case; cache: warm = the table read once before through the page cache (count(*)), cold = page cache dropped and database reopened (PostgreSQL: restarted) before each run; text order: bytes on both (our text comparison is byte order; PostgreSQL's column is COLLATE \"C\"); PostgreSQL: max_parallel_maintenance_workers=0 (we build with one session), wal_level=replica (both log each index page as a full image), same maintenance_work_mem"
        )
        .map_err(|e| e.to_string())?;
        writeln!(out, "system     column cache run         ms").map_err(|e| e.to_string())?;
    }
    let mut runs = Vec::new();
    for &cache in &opts.caches {
        for (column, index) in COLUMNS {
            let mut db = open(opts)?;
            let mut s = db.session().map_err(|e| e.to_string())?;
            execute(&mut s, &format!("DROP INDEX IF EXISTS {index}; CHECKPOINT"))?;
            if cache == Cache::Warm {
                execute(&mut s, &format!("SELECT count(*) FROM {TABLE}"))?;
            }
            for run in 1..=opts.runs {
                if cache == Cache::Cold {
                    drop(s);
                    drop(db);
                    super::drop_page_cache().map_err(|e| e.to_string())?;
                    db = open(opts)?;
                    s = db.session().map_err(|e| e.to_string())?;
                }
                let sql = format!("CREATE INDEX {index} ON {TABLE} ({column})");
                let started = Instant::now();
                execute(&mut s, &sql)?;
                let ms = started.elapsed().as_secs_f64() * 1e3;
                let r = IndexBuildRun {
                    bench: "index-build",
                    system: "aiostore",
                    column: column.to_string(),
                    cache,
                    run,
                    ms,
                    rows: opts.rows,
                };
                emit(out, json, &r)?;
                runs.push(r);
                execute(&mut s, &format!("DROP INDEX {index}; CHECKPOINT"))?;
                if let Some(script) = &opts.pg_script {
                    // Our database is idle (its checkpoint done) while
                    // PostgreSQL runs the same case.
                    runs.extend(run_pg(script, opts, column, cache, run, json, out)?);
                }
            }
        }
    }
    if !json {
        writeln!(out, "load average at the end {}", super::load_average())
            .map_err(|e| e.to_string())?;
    }
    print_medians(&runs, json, out)?;
    Ok(runs)
}

/// Runs `script` (`benches/pg_index_build.sh ROWS`) for run `run` of one
/// column and cache state and reads its result line (`postgresql 15
/// create-index column=a cache=warm rows=… run=1 ms=…`), passing it on.
fn run_pg(
    script: &Path,
    opts: &IndexBuildOptions,
    column: &str,
    cache: Cache,
    run: u32,
    json: bool,
    out: &mut dyn Write,
) -> Result<Vec<IndexBuildRun>, String> {
    let first_run = run.to_string();
    let lines = super::run_pg_script(
        script,
        &[opts.rows.to_string()],
        &[
            ("RUNS", "1"),
            ("FIRST_RUN", &first_run),
            ("COLUMNS", column),
            ("MAINTENANCE_WORK_MEM", &opts.maintenance_work_mem),
            ("CACHES", cache.name()),
        ],
        "builds",
    )?;
    let mut runs = Vec::new();
    for line in lines {
        let run = line.parse(script, |l| {
            Some(IndexBuildRun {
                bench: "index-build",
                system: "postgresql",
                column: l.field("column")?.to_string(),
                cache: Cache::parse(l.field("cache")?)?,
                run: l.field("run")?.parse().ok()?,
                ms: l.field("ms")?.parse().ok()?,
                rows: l.field("rows")?.parse().ok()?,
            })
        })?;
        if run.rows != opts.rows {
            return Err(format!(
                "{}: PostgreSQL's table has {} rows, ours {}",
                script.display(),
                run.rows,
                opts.rows
            ));
        }
        emit(out, json, &run)?;
        runs.push(run);
    }
    Ok(runs)
}

/// The median of each system's runs per column and cache, and the ratio
/// ours / PostgreSQL's (below 1, we build faster).
fn print_medians(runs: &[IndexBuildRun], json: bool, out: &mut dyn Write) -> Result<(), String> {
    let cases = super::compare_medians(
        runs,
        |r| (r.column.as_str(), r.cache),
        |r| r.system,
        |r| r.ms,
    );
    for ((column, cache), c) in cases {
        let line = if json {
            c.json(
                "index-build",
                serde_json::json!({"column": column, "cache": cache}),
            )
        } else {
            let fmt = |m: Option<f64>| m.map_or("-".into(), |m| format!("{m:.1} ms"));
            format!(
                "median {column} {:<5} aiostore {} of {}, postgresql {} of {}: aiostore/postgresql {}",
                cache.name(),
                fmt(c.ours_ms),
                c.ours_runs,
                fmt(c.theirs_ms),
                c.theirs_runs,
                c.ratio.map_or("-".into(), |r| format!("{r:.2}"))
            )
        };
        writeln!(out, "{line}").map_err(|e| e.to_string())?;
    }
    Ok(())
}
