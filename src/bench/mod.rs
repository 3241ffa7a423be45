//! Benchmark programs behind `aiostore bench …`.
//!
//! Each prints the settings it ran with, whether the cache was cold, a table
//! of figures and, with `--json`, one JSON object per case. Variants are
//! compared as ratios measured in the same run, case by case and next to
//! each other in time, because the machines we run on are shared and noisy.

pub mod bitmapscan;
pub mod checksum;
pub mod commit;
pub mod copy_checkpoint;
pub mod demo;
pub mod fio;
pub mod index_build;
pub mod indexscan;
pub mod rawio;
pub mod recovery;
pub mod seqscan;
pub mod streams;

use std::io::Write;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::IoMethod;
use crate::database::{Database, Session};
use crate::storage::BLOCK_SIZE;
use crate::types::Value;

/// The machine's load averages over 1, 5 and 15 minutes, as
/// `/proc/loadavg` gives them: the figures' context on a shared machine.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// The median of some measurements (of an even count, the mean of the
/// middle two); None for none.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut values = values.to_vec();
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// CPU time (user + system) used by this process so far, all threads.
pub fn process_cpu_time() -> Duration {
    // SAFETY: getrusage only writes the struct we pass.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// A small xorshift generator: benchmarks need cheap, reproducible random
/// offsets, not statistical quality.
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> XorShift {
        XorShift(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// A benchmark's method that may run on an AIO method (`--methods`).
pub trait OnIoMethod: Copy + PartialEq {
    /// The AIO method it runs on, if any (rawio's pread runs on none).
    fn io_method(&self) -> Option<IoMethod>;
}

impl OnIoMethod for IoMethod {
    fn io_method(&self) -> Option<IoMethod> {
        Some(*self)
    }
}

/// `methods` without io_uring where the kernel refuses it: the one place
/// a benchmark or the demo chooses its methods. Asks the kernel once
/// ([`crate::aio::probe_io_uring`]), writes one note with the reason to
/// `notes` (standard error, so that it never mixes with a table or JSON),
/// and fails when nothing is left to run, before any table is built.
pub fn usable_methods<M: OnIoMethod>(
    methods: Vec<M>,
    notes: &mut dyn std::io::Write,
) -> Result<Vec<M>, String> {
    let wants_io_uring = |m: &M| m.io_method() == Some(IoMethod::IoUring);
    if !methods.iter().any(wants_io_uring) {
        return Ok(methods);
    }
    let Some(reason) = crate::aio::probe_io_uring() else {
        return Ok(methods);
    };
    let usable: Vec<M> = methods.into_iter().filter(|m| !wants_io_uring(m)).collect();
    if usable.is_empty() {
        return Err(format!(
            "no I/O method left to run: io_uring is not usable here ({reason}); choose sync or worker with --methods"
        ));
    }
    let _ = writeln!(notes, "note: io_uring skipped: {reason}");
    Ok(usable)
}

/// Checks that `aio` runs `wanted`: the methods were chosen with
/// [`usable_methods`], so a fall-back here means the kernel refused more
/// rings than the probe's one, and measuring the worker method under
/// io_uring's name would be wrong.
pub(crate) fn check_method(aio: &crate::aio::Aio, wanted: IoMethod) -> Result<(), String> {
    if aio.method() == wanted {
        return Ok(());
    }
    Err(format!(
        "{wanted} could not be set up for this case (fell back to {}: {}); lower max_sessions or io_max_concurrency, or leave {wanted} out of --methods",
        aio.method(),
        aio.fallback_reason().unwrap_or("no reason given")
    ))
}

/// Opens the database in `dir` with `settings` and checks that it runs
/// `method` ([`check_method`]): how every benchmark opens the database it
/// times.
pub(crate) fn open_checked(
    dir: &Path,
    settings: &[String],
    method: IoMethod,
) -> Result<Arc<Database>, String> {
    let db = Database::open(dir, settings).map_err(|e| e.to_string())?;
    check_method(db.aio(), method)?;
    Ok(db)
}

/// MiB in a pool of `shared_buffers` buffers, for the printed settings.
pub fn pool_mib(shared_buffers: u32) -> u64 {
    (shared_buffers as u64 * BLOCK_SIZE as u64) >> 20
}

/// Runs `sql` in `s`; an error names the statement.
pub(crate) fn execute(
    s: &mut Session,
    sql: &str,
) -> Result<Vec<crate::sql::StatementResult>, String> {
    crate::sql::execute(s, sql).map_err(|e| format!("{sql}: {e}"))
}

/// The count `sql` returns: the first column of its last statement's
/// first row, an integer.
pub(crate) fn one_count(s: &mut Session, sql: &str) -> Result<u64, String> {
    let results = execute(s, sql)?;
    match results
        .last()
        .and_then(|r| r.rows.first())
        .and_then(|row| row.first())
    {
        Some(Value::BigInt(n)) => Ok(*n as u64),
        Some(Value::Integer(n)) => Ok(*n as u64),
        other => Err(format!("{sql}: returned {other:?}, not a count")),
    }
}

/// The text lines of an EXPLAIN's result (its last statement's).
pub(crate) fn plan_lines(results: &[crate::sql::StatementResult]) -> Vec<String> {
    results
        .iter()
        .flat_map(|r| r.rows.iter())
        .filter_map(|row| match row.first() {
            Some(Value::Text(line)) => Some(line.to_string()),
            _ => None,
        })
        .collect()
}

/// Plans `sql` with a plain EXPLAIN (planning only: the catalogs and the
/// statistics are read before a timed run) and checks that the plan has
/// `node`; `what` names the scan asked for in the error.
pub(crate) fn check_plan(s: &mut Session, sql: &str, node: &str, what: &str) -> Result<(), String> {
    let plan = plan_lines(&execute(s, &format!("EXPLAIN {sql}"))?);
    if plan.iter().any(|l| l.contains(node)) {
        return Ok(());
    }
    Err(format!(
        "{what} asked for, but our plan is:\n{}",
        plan.join("\n")
    ))
}

/// Runs `EXPLAIN (ANALYZE, BUFFERS, IO) sql` and returns the rows the
/// query returned in that run and the plan's lines with its figures.
pub(crate) fn explain_analyze(
    s: &mut Session,
    sql: &str,
) -> Result<(Vec<Vec<Value>>, Vec<String>), String> {
    let text = format!("EXPLAIN (ANALYZE, BUFFERS, IO) {sql}");
    let mut rows = Vec::new();
    let mut io = crate::sql::StatementIo {
        explained_rows: Some(&mut rows),
        ..Default::default()
    };
    let mut results = Vec::new();
    crate::sql::execute_each(s, &text, &mut io, |r| results.push(r))
        .map_err(|e| format!("{text}: {e}"))?;
    Ok((rows, plan_lines(&results)))
}

/// Blocks the pool has read from disk and read I/Os `method` has
/// completed, since the database opened: a case's figures are the
/// difference across it.
pub(crate) fn read_counters(db: &Database, method: IoMethod) -> (u64, u64) {
    let reads = db.pool().stats().reads.load(Ordering::Relaxed);
    let ios = db
        .aio()
        .stats()
        .row(method, crate::stats::IoOp::Read)
        .map_or(0, |r| r.ios);
    (reads, ios)
}

/// A table build's progress, `done` of `total` rows: a bar on a terminal,
/// else a line on standard error per step if `lines`, else nothing.
pub(crate) struct BuildProgress {
    bar: Option<indicatif::ProgressBar>,
    lines: bool,
    started: Instant,
}

impl BuildProgress {
    /// A progress display for building `what` (`total` rows).
    pub fn new(what: &str, total: u64, lines: bool) -> BuildProgress {
        let bar = std::io::IsTerminal::is_terminal(&std::io::stderr()).then(|| {
            let bar = indicatif::ProgressBar::with_draw_target(
                Some(total),
                indicatif::ProgressDrawTarget::stderr(),
            );
            let template =
                format!("{what} {{bar:30}} {{human_pos}}/{{human_len}} rows ({{elapsed}})");
            if let Ok(style) = indicatif::ProgressStyle::with_template(&template) {
                bar.set_style(style);
            }
            bar
        });
        BuildProgress {
            bar,
            lines,
            started: Instant::now(),
        }
    }

    /// `done` of `total` rows are in.
    pub fn set(&mut self, done: u64, total: u64) {
        match &self.bar {
            Some(bar) => bar.set_position(done),
            None if self.lines => {
                let _ = writeln!(
                    std::io::stderr(),
                    "  built {done} of {total} rows ({:.0} s)",
                    self.started.elapsed().as_secs_f64()
                );
            }
            None => {}
        }
    }

    /// Clears the bar.
    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Bytes an unprivileged user may still write on the file system that
/// holds `path`.
pub fn disk_free_bytes(path: &Path) -> Result<u64, String> {
    let st = rustix::fs::statvfs(path).map_err(|e| {
        format!(
            "could not ask the file system of {} for its free space: {e}",
            path.display()
        )
    })?;
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Memory the kernel says it can give without swapping (`MemAvailable`
/// of /proc/meminfo), in bytes; None where it does not say.
pub fn memory_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Whether this process runs as root (it may drop the page cache and run
/// PostgreSQL's scripts, which switch to the postgres user).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Drops the kernel page cache (root only), for cold buffered runs.
pub fn drop_page_cache() -> std::io::Result<()> {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3\n")
}

/// How a target bounds a ratio measured in the same run.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Bound {
    AtMost(f64),
    AtLeast(f64),
}

impl Bound {
    pub fn meets(self, ratio: f64) -> bool {
        match self {
            Bound::AtMost(b) => ratio <= b,
            Bound::AtLeast(b) => ratio >= b,
        }
    }

    /// Orders ratios worst first.
    pub fn badness(self, ratio: f64) -> f64 {
        match self {
            Bound::AtMost(_) => ratio,
            Bound::AtLeast(_) => -ratio,
        }
    }

    /// "at most" or "at least", and the limit.
    pub fn parts(self) -> (&'static str, f64) {
        match self {
            Bound::AtMost(b) => ("at most", b),
            Bound::AtLeast(b) => ("at least", b),
        }
    }
}

/// One result line of a `benches/pg_*.sh` script: `postgresql 15 <case>
/// name=value …`.
pub(crate) struct PgLine(String);

impl PgLine {
    /// The value of `name=`, if the line has it.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.0
            .split_whitespace()
            .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
    }

    pub fn text(&self) -> &str {
        &self.0
    }

    /// `parse(self)`, or an error that shows the line and names `script`.
    pub fn parse<R>(
        &self,
        script: &Path,
        parse: impl FnOnce(&PgLine) -> Option<R>,
    ) -> Result<R, String> {
        parse(self).ok_or_else(|| format!("{}: unexpected line {:?}", script.display(), self.0))
    }
}

/// Runs `script` (a `benches/pg_*.sh`: PostgreSQL on the same data) with
/// `args` and the environment `envs` and returns its result lines, those
/// starting `postgresql `: the one way the benchmarks run PostgreSQL's
/// side. Fails when the script fails, or reports no `what` (runs, loads …).
pub(crate) fn run_pg_script(
    script: &Path,
    args: &[String],
    envs: &[(&str, &str)],
    what: &str,
) -> Result<Vec<PgLine>, String> {
    let output = std::process::Command::new("sh")
        .arg(script)
        .args(args)
        .envs(envs.iter().copied())
        .output()
        .map_err(|e| format!("could not run {}: {e}", script.display()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "{} failed ({}): {}{}",
            script.display(),
            output.status,
            text,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let lines: Vec<PgLine> = text
        .lines()
        .filter(|l| l.starts_with("postgresql "))
        .map(|l| PgLine(l.to_string()))
        .collect();
    if lines.is_empty() {
        return Err(format!("{} reported no {what}: {text}", script.display()));
    }
    Ok(lines)
}

/// Ours against PostgreSQL's runs of one case: each side's median
/// milliseconds and run count, and the ratio of the medians ours /
/// PostgreSQL's (below 1, we are faster; None without both sides).
pub(crate) struct Comparison {
    pub ours_ms: Option<f64>,
    pub ours_runs: usize,
    pub theirs_ms: Option<f64>,
    pub theirs_runs: usize,
    pub ratio: Option<f64>,
}

impl Comparison {
    /// The case's JSON object: `bench`, `"case": "median"`, the case's
    /// own `fields` (an object), then the figures.
    pub fn json(&self, bench: &str, fields: serde_json::Value) -> String {
        let mut object = serde_json::json!({"bench": bench, "case": "median"});
        if let (Some(object), serde_json::Value::Object(fields)) = (object.as_object_mut(), fields)
        {
            object.extend(fields);
            object.extend([
                ("aiostore_median_ms".to_string(), self.ours_ms.into()),
                ("aiostore_runs".to_string(), self.ours_runs.into()),
                ("postgresql_median_ms".to_string(), self.theirs_ms.into()),
                ("postgresql_runs".to_string(), self.theirs_runs.into()),
                (
                    "ratio_aiostore_over_postgresql".to_string(),
                    self.ratio.into(),
                ),
            ]);
        }
        object.to_string()
    }
}

/// Each case's [`Comparison`], the cases (`key`) in the order of their
/// first run: the runs whose `system` is "aiostore" against those whose
/// is "postgresql", by their `ms`.
pub(crate) fn compare_medians<'a, T, K: PartialEq + Copy>(
    runs: &'a [T],
    key: impl Fn(&'a T) -> K,
    system: impl Fn(&T) -> &str,
    ms: impl Fn(&T) -> f64,
) -> Vec<(K, Comparison)> {
    let mut keys: Vec<K> = Vec::new();
    for r in runs {
        if !keys.contains(&key(r)) {
            keys.push(key(r));
        }
    }
    keys.into_iter()
        .map(|k| {
            let of = |name: &str| -> Vec<f64> {
                runs.iter()
                    .filter(|r| system(r) == name && key(r) == k)
                    .map(&ms)
                    .collect()
            };
            let (ours, theirs) = (of("aiostore"), of("postgresql"));
            let (ours_ms, theirs_ms) = (median(&ours), median(&theirs));
            let comparison = Comparison {
                ours_ms,
                ours_runs: ours.len(),
                theirs_ms,
                theirs_runs: theirs.len(),
                ratio: ours_ms.zip(theirs_ms).map(|(o, t)| o / t),
            };
            (k, comparison)
        })
        .collect()
}

/// Writes one benchmark case: as a JSON object with `--json`, else as the
/// table row `row` formats.
pub(crate) fn emit_case<C: serde::Serialize>(
    out: &mut dyn std::io::Write,
    json: bool,
    case: &C,
    row: impl FnOnce(&C) -> String,
) -> Result<(), String> {
    let line = if json {
        serde_json::to_string(case).map_err(|e| e.to_string())?
    } else {
        row(case)
    };
    writeln!(out, "{line}").map_err(|e| e.to_string())
}
