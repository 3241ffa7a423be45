//! `aiostore bench bitmapscan`: the reference thread's OLTP query
//! `SELECT … FROM btree_test WHERE a = $v`, cold, with 1, 10, …, 100 000
//! matching rows, forced to a bitmap heap scan, a plain index scan and
//! (for the largest count only) a sequential scan, against PostgreSQL's
//! same query on the same data in the same run
//! (`benches/pg_bitmapscan.sh`).
//!
//! The table is `btree_test(a int, b int, pad text)` with `rows` rows
//! (`i`, 0-based, in insertion order): `b = i`, `pad` 96 bytes
//! (`repeat(md5(i::text), 3)`), so a page holds about 55 rows, and `a`
//! chosen by `j = i × mult mod rows`, a permutation of the rows: the
//! first row of `j` has `a = 1`, the next 10 `a = 10`, the next 100
//! `a = 100`, … up to 100 000 rows with `a = 100000`; every other row has
//! a unique `a = 1000000 + j`. So `a = k` matches exactly `k` rows, and
//! since `mult` is the inverse of a step near `rows × 0.618` (a Weyl
//! sequence), those rows lie `step` rows apart modulo `rows`: spread
//! evenly over the whole table, on different pages. Index `btree_test_a_idx`
//! on `a`, then `ANALYZE`. The same statements build PostgreSQL's table.
//!
//! The query is `SELECT count(b) FROM btree_test WHERE a = k`: `b` is not
//! in the index, so every matching row is read from the heap (no
//! index-only scan), and no rows cross to a client, so both systems'
//! times are the scan's. Each case is timed on the client side: ours
//! around [`crate::sql::execute`] in this process, PostgreSQL's by psql's
//! `\timing` over a Unix socket (parse, plan and execute on both).
//!
//! Cold, each case: the page cache dropped (root), our database reopened
//! with `io_direct=data` and the run's I/O method (the pool empty),
//! PostgreSQL restarted (its shared buffers empty). Then, before the
//! timed query, on both: the plan is checked with a plain `EXPLAIN` of
//! the same query (planning only, so the catalogs and the statistics are
//! read before the clock starts), which must name the method's node. The
//! heap and the index come from the disk in the timed query, with one
//! difference: PostgreSQL's planner reads the index's metapage (for the
//! tree's height) and keeps it, so its timed query reads one index block
//! fewer than ours, which reads the metapage when the scan starts.
//!
//! The two systems' runs alternate case by case (ours, then
//! PostgreSQL's), so a change in the machine's load falls on both.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use super::{execute, one_count};
use crate::config::IoMethod;
use crate::database::Database;

/// The benchmark table's name, as the reference thread names it.
pub const TABLE: &str = "btree_test";
/// Its index on `a`.
pub const INDEX: &str = "btree_test_a_idx";
/// The matching-row counts: `a = k` matches `k` rows.
pub const MATCHING_ROWS: [u64; 6] = [1, 10, 100, 1_000, 10_000, 100_000];
/// The filler rows' values start here, above every `k`.
const FILLER_BASE: u64 = 1_000_000;
/// Rows per INSERT … SELECT while building: progress every few seconds.
const BUILD_ROWS_PER_STATEMENT: u64 = 250_000;

/// The least table: twice the matching rows, so that filler rows
/// (unique values) are at least half of it.
pub fn rows_min() -> u64 {
    2 * MATCHING_ROWS.iter().sum::<u64>()
}

/// How a case reads the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ScanMethod {
    /// Bitmap Index Scan + Bitmap Heap Scan (enable_indexscan=off,
    /// enable_seqscan=off).
    Bitmap,
    /// Plain Index Scan (enable_bitmapscan=off, enable_seqscan=off).
    Index,
    /// Seq Scan (enable_indexscan=off, enable_bitmapscan=off).
    Seq,
}

impl ScanMethod {
    pub fn name(self) -> &'static str {
        match self {
            ScanMethod::Bitmap => "bitmap",
            ScanMethod::Index => "index",
            ScanMethod::Seq => "seq",
        }
    }

    pub fn parse(text: &str) -> Option<ScanMethod> {
        match text {
            "bitmap" => Some(ScanMethod::Bitmap),
            "index" => Some(ScanMethod::Index),
            "seq" => Some(ScanMethod::Seq),
            _ => None,
        }
    }

    /// The session settings that force the method; the same names and
    /// values on PostgreSQL (`benches/pg_bitmapscan.sh` holds a copy).
    pub fn settings(self) -> &'static str {
        match self {
            ScanMethod::Bitmap => "SET enable_indexscan = off; SET enable_seqscan = off",
            ScanMethod::Index => "SET enable_bitmapscan = off; SET enable_seqscan = off",
            ScanMethod::Seq => "SET enable_indexscan = off; SET enable_bitmapscan = off",
        }
    }

    /// The plan node EXPLAIN must show for the method (both systems
    /// print PostgreSQL's node names).
    pub fn node(self) -> &'static str {
        match self {
            ScanMethod::Bitmap => "Bitmap Heap Scan",
            ScanMethod::Index => "Index Scan using",
            ScanMethod::Seq => "Seq Scan",
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct BitmapscanOptions {
    /// The data directory of the table (made if missing).
    pub dir: PathBuf,
    pub rows: u64,
    /// Cold runs per matching count and method, on each system.
    pub runs: u32,
    pub methods: Vec<ScanMethod>,
    /// The matching counts to run (a subset of [`MATCHING_ROWS`]).
    pub matching: Vec<u64>,
    pub method: IoMethod,
    pub shared_buffers: u32,
    /// `benches/pg_bitmapscan.sh`, run after each of our cases.
    pub pg_script: Option<PathBuf>,
    /// The user's start-up settings every database of the run takes over
    /// (io_workers, max_sessions, …).
    pub extra_settings: Vec<String>,
}

/// One timed cold query.
#[derive(Debug, Clone, Serialize)]
pub struct BitmapscanRun {
    pub bench: &'static str,
    /// "aiostore" or "postgresql".
    pub system: &'static str,
    /// Rows `a = k` matches.
    pub matching: u64,
    pub method: ScanMethod,
    pub run: u32,
    pub ms: f64,
    /// Blocks read from the disk and I/Os that read them (ours; None for
    /// PostgreSQL's runs, which are timed from psql).
    pub blocks_read: Option<u64>,
    pub ios: Option<u64>,
    pub rows: u64,
}

impl BitmapscanOptions {
    /// Settings of every database of the run: direct I/O (so that a
    /// reopened database reads from the disk), the run's method and pool.
    fn settings(&self) -> Vec<String> {
        let mut settings = vec![
            "io_direct=data".to_string(),
            format!("io_method={}", self.method.name()),
            format!("shared_buffers={}", self.shared_buffers),
        ];
        settings.extend(self.extra_settings.iter().cloned());
        settings
    }
}

/// Greatest common divisor.
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The inverse of `x` modulo `m` (`x` and `m` coprime).
fn inverse_mod(x: u64, m: u64) -> u64 {
    let (mut r0, mut r1) = (m as i128, x as i128);
    let (mut t0, mut t1) = (0i128, 1i128);
    while r1 != 0 {
        let q = r0 / r1;
        (r0, r1) = (r1, r0 - q * r1);
        (t0, t1) = (t1, t0 - q * t1);
    }
    debug_assert_eq!(r0, 1, "{x} and {m} are not coprime");
    t0.rem_euclid(m as i128) as u64
}

/// The multiplier of the permutation `j = i × mult mod rows`: the
/// inverse of the step between rows with consecutive `j`, the first
/// step from `rows × 0.618` (the golden ratio's fraction, so that the
/// steps spread over the table as evenly as they can) coprime to `rows`.
pub fn multiplier(rows: u64) -> u64 {
    assert!(rows >= 2);
    let mut step = (rows as f64 * 0.618_033_988_75) as u64;
    while gcd(step, rows) != 1 {
        step += 1;
    }
    let mult = inverse_mod(step, rows);
    debug_assert_eq!((step as u128 * mult as u128) % rows as u128, 1);
    mult
}

/// The `a` of row `j` of the permutation, as SQL over `j`: the
/// matching groups, then the unique fillers, each term a range's
/// condition cast to 0 or 1 (our SQL has no CASE).
fn a_expression() -> String {
    let mut terms = Vec::new();
    let mut start = 0;
    for k in MATCHING_ROWS {
        terms.push(format!("{k} * ((j >= {start} AND j < {})::int)", start + k));
        start += k;
    }
    terms.push(format!("({FILLER_BASE} + j) * ((j >= {start})::int)"));
    terms.join(" + ")
}

/// The statement adding rows `first ..= last` (0-based), the same on
/// PostgreSQL (`benches/pg_bitmapscan.sh` holds a copy).
pub fn insert_sql(rows: u64, mult: u64, first: u64, last: u64) -> String {
    format!(
        "INSERT INTO {TABLE} SELECT {}, i, repeat(md5(i::text), 3) FROM (SELECT i, ((i::bigint * {mult}) % {rows})::int AS j FROM generate_series({first}, {last}) AS g(i)) AS s",
        a_expression()
    )
}

/// Creates the data directory and the table unless they hold `rows` rows
/// and the index, calling `progress(done, rows)` after each statement
/// that adds rows.
pub fn ensure_table(
    opts: &BitmapscanOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(), String> {
    if !opts.dir.join("AIOSTORE_VERSION").exists() {
        Database::init(&opts.dir).map_err(|e| e.to_string())?;
    }
    let db = Database::open(&opts.dir, &opts.settings()).map_err(|e| e.to_string())?;
    let mut s = db.session().map_err(|e| e.to_string())?;
    let rows = opts.rows;
    if db.catalog().table(TABLE).is_ok()
        && one_count(&mut s, &format!("SELECT count(*) FROM {TABLE}"))? == rows
        && db.catalog().index(INDEX).is_ok()
    {
        return Ok(());
    }
    execute(
        &mut s,
        &format!(
            "DROP TABLE IF EXISTS {TABLE}; CREATE TABLE {TABLE} (a integer, b integer, pad text)"
        ),
    )?;
    let mult = multiplier(rows);
    let mut done = 0;
    while done < rows {
        let n = BUILD_ROWS_PER_STATEMENT.min(rows - done);
        execute(&mut s, &insert_sql(rows, mult, done, done + n - 1))?;
        done += n;
        progress(done, rows);
    }
    // As the PostgreSQL side does (VACUUM FREEZE): pages all-visible.
    execute(
        &mut s,
        &format!(
            "CREATE INDEX {INDEX} ON {TABLE} (a); VACUUM {TABLE}; ANALYZE {TABLE}; CHECKPOINT"
        ),
    )?;
    Ok(())
}

/// Opens the table's database with the run's settings and checks the
/// method.
fn open(opts: &BitmapscanOptions) -> Result<Arc<Database>, String> {
    super::open_checked(&opts.dir, &opts.settings(), opts.method)
}

/// The timed query of `a = k`.
pub fn query(matching: u64) -> String {
    format!("SELECT count(b) FROM {TABLE} WHERE a = {matching}")
}

/// One cold case of ours: drops the page cache, reopens the database,
/// forces the method, checks the plan (planning only) and times the query.
fn run_ours(
    opts: &BitmapscanOptions,
    matching: u64,
    method: ScanMethod,
    run: u32,
) -> Result<BitmapscanRun, String> {
    super::drop_page_cache().map_err(|e| e.to_string())?;
    let db = open(opts)?;
    let mut s = db.session().map_err(|e| e.to_string())?;
    execute(&mut s, method.settings())?;
    let sql = query(matching);
    super::check_plan(
        &mut s,
        &sql,
        method.node(),
        &format!("{} scan", method.name()),
    )?;
    let (reads_before, ios_before) = super::read_counters(&db, opts.method);
    let started = Instant::now();
    let n = one_count(&mut s, &sql)?;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    let (reads_after, ios_after) = super::read_counters(&db, opts.method);
    if n != matching {
        return Err(format!("{sql}: counted {n} rows, expected {matching}"));
    }
    Ok(BitmapscanRun {
        bench: "bitmapscan",
        system: "aiostore",
        matching,
        method,
        run,
        ms,
        blocks_read: Some(reads_after - reads_before),
        ios: Some(ios_after - ios_before),
        rows: opts.rows,
    })
}

fn emit(out: &mut dyn Write, json: bool, r: &BitmapscanRun) -> Result<(), String> {
    let opt = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
    super::emit_case(out, json, r, |r| {
        format!(
            "{:<10} {:>8} {:<6} {:>3} {:>10.1} {:>8} {:>8}",
            r.system,
            r.matching,
            r.method.name(),
            r.run,
            r.ms,
            opt(r.blocks_read),
            opt(r.ios)
        )
    })
}

/// Runs the benchmark: builds the table unless it is there, then for
/// each matching count and method times our cold query, then
/// PostgreSQL's (if a script is given), and prints the medians and the
/// ratios ours / PostgreSQL's.
pub fn run(
    opts: &BitmapscanOptions,
    json: bool,
    out: &mut dyn Write,
) -> Result<Vec<BitmapscanRun>, String> {
    if opts.runs == 0 || opts.methods.is_empty() || opts.matching.is_empty() {
        return Err(
            "bench bitmapscan needs --runs of at least 1, a --scan and a --matching".into(),
        );
    }
    if opts.rows < rows_min() {
        return Err(format!(
            "bench bitmapscan needs --rows of at least {} (twice the {} matching rows)",
            rows_min(),
            rows_min() / 2
        ));
    }
    if let Some(k) = opts.matching.iter().find(|k| !MATCHING_ROWS.contains(k)) {
        return Err(format!(
            "--matching {k}: the table has values matching {MATCHING_ROWS:?} rows only"
        ));
    }
    super::drop_page_cache().map_err(|e| {
        format!("bench bitmapscan runs cold and drops the page cache, which needs root (/proc/sys/vm/drop_caches: {e}); run as root")
    })?;
    let _ = writeln!(
        std::io::stderr(),
        "preparing table {TABLE} ({} rows) in {} ...",
        opts.rows,
        opts.dir.display()
    );
    ensure_table(opts, &mut super::seqscan::progress_lines())?;
    let (nblocks, eic) = {
        let db = open(opts)?;
        (
            super::seqscan::table_blocks(&db, TABLE)?.1,
            db.settings().effective_io_concurrency(),
        )
    };
    // benches/pg_bitmapscan.sh passes it on to PostgreSQL if set.
    let pg_eic =
        std::env::var("EFFECTIVE_IO_CONCURRENCY").unwrap_or_else(|_| "1 (its default)".to_string());
    let pool_mib = super::pool_mib(opts.shared_buffers);
    let largest = opts.matching.iter().copied().max().unwrap_or(0);
    if !json {
        writeln!(
            out,
            "aiostore bench bitmapscan: SELECT count(b) FROM {TABLE} WHERE a = k, k rows matching, spread over the table; {} rows, {} blocks ({:.0} MiB), index on a, ANALYZEd; shared_buffers={pool_mib} MiB io_method={} io_direct=data effective_io_concurrency={eic} (PostgreSQL 15: {pg_eic}); {} cold runs per case; seq scan for k={largest} only; load average {}",
            opts.rows,
            nblocks,
            super::seqscan::blocks_mib(nblocks),
            opts.method.name(),
            opts.runs,
            super::load_average()
        )
        .map_err(|e| e.to_string())?;
        writeln!(
            out,
            "every run cold: page cache dropped, our database reopened with O_DIRECT (PostgreSQL: restarted), then a plain EXPLAIN of the query (planning only: catalogs, statistics; PostgreSQL's also reads and keeps the index metapage, ours reads it in the timed query) checks the plan's node on both; timed on the client: ours around the statement in this process, PostgreSQL's by psql \\timing; runs alternate, each of ours followed by PostgreSQL's of the same case"
        )
        .map_err(|e| e.to_string())?;
        writeln!(
            out,
            "system            k method run         ms    reads      ios"
        )
        .map_err(|e| e.to_string())?;
    }
    let mut runs = Vec::new();
    for &matching in &opts.matching {
        for &method in &opts.methods {
            if method == ScanMethod::Seq && matching != largest {
                continue;
            }
            for run in 1..=opts.runs {
                let r = run_ours(opts, matching, method, run)?;
                emit(out, json, &r)?;
                runs.push(r);
                if let Some(script) = &opts.pg_script {
                    runs.extend(run_pg(script, opts, matching, method, run, json, out)?);
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

/// Runs `script` (`benches/pg_bitmapscan.sh ROWS MULT`) for run `run` of
/// one case and reads its result line (`postgresql 15 bitmapscan k=…
/// method=bitmap rows=… run=1 count=… ms=…`), passing it on.
fn run_pg(
    script: &Path,
    opts: &BitmapscanOptions,
    matching: u64,
    method: ScanMethod,
    run: u32,
    json: bool,
    out: &mut dyn Write,
) -> Result<Vec<BitmapscanRun>, String> {
    let (first_run, matching) = (run.to_string(), matching.to_string());
    let lines = super::run_pg_script(
        script,
        &[opts.rows.to_string(), multiplier(opts.rows).to_string()],
        &[
            ("RUNS", "1"),
            ("FIRST_RUN", &first_run),
            ("MATCHING", &matching),
            ("SCANS", method.name()),
        ],
        "runs",
    )?;
    let mut runs = Vec::new();
    for line in lines {
        let (r, count) = line.parse(script, |l| {
            let count: u64 = l.field("count")?.parse().ok()?;
            let r = BitmapscanRun {
                bench: "bitmapscan",
                system: "postgresql",
                matching: l.field("k")?.parse().ok()?,
                method: ScanMethod::parse(l.field("method")?)?,
                run: l.field("run")?.parse().ok()?,
                ms: l.field("ms")?.parse().ok()?,
                blocks_read: None,
                ios: None,
                rows: l.field("rows")?.parse().ok()?,
            };
            Some((r, count))
        })?;
        if r.rows != opts.rows || count != r.matching {
            return Err(format!(
                "{}: PostgreSQL's table has {} rows and counted {count} for k={}; ours has {} rows",
                script.display(),
                r.rows,
                r.matching,
                opts.rows
            ));
        }
        emit(out, json, &r)?;
        runs.push(r);
    }
    Ok(runs)
}

/// The median of each system's runs per matching count and method, and
/// the ratio ours / PostgreSQL's (below 1, we are faster).
fn print_medians(runs: &[BitmapscanRun], json: bool, out: &mut dyn Write) -> Result<(), String> {
    if !json {
        writeln!(
            out,
            "medians: rows matched, method, ours ms, PostgreSQL 15 ms, ours/PG (below 1: we are faster)"
        )
        .map_err(|e| e.to_string())?;
        writeln!(
            out,
            "{:>8} {:<6} {:>10} {:>10} {:>8}",
            "rows", "method", "ours ms", "PG ms", "ours/PG"
        )
        .map_err(|e| e.to_string())?;
    }
    let cases = super::compare_medians(runs, |r| (r.matching, r.method), |r| r.system, |r| r.ms);
    for ((matching, method), c) in cases {
        let line = if json {
            c.json(
                "bitmapscan",
                serde_json::json!({"matching": matching, "method": method}),
            )
        } else {
            let fmt = |m: Option<f64>| m.map_or("-".into(), |m| format!("{m:.1}"));
            format!(
                "{matching:>8} {:<6} {:>10} {:>10} {:>8}",
                method.name(),
                fmt(c.ours_ms),
                fmt(c.theirs_ms),
                c.ratio.map_or("-".into(), |r| format!("{r:.2}"))
            )
        };
        writeln!(out, "{line}").map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiplier_permutes_rows_and_spreads_each_group() {
        // The least table and the default one. The spread is not as good for
        // every row count (at 1 000 000 rows two of a = 10000's rows are
        // neighbours), since the step is only near the golden ratio.
        for rows in [rows_min(), 5_000_000] {
            let mult = multiplier(rows);
            // i -> j = i × mult mod rows is a permutation: row_of[j] = i.
            let mut row_of = vec![u64::MAX; rows as usize];
            for i in 0..rows {
                let j = (i as u128 * mult as u128 % rows as u128) as usize;
                assert_eq!(row_of[j], u64::MAX, "rows={rows}: j={j} twice");
                row_of[j] = i;
            }
            // Each group of k rows (a = k: j in start..start + k) is
            // spread over the table: no two of its rows are closer than a
            // fifth of the even spacing rows / k.
            let mut start = 0;
            for k in MATCHING_ROWS {
                let mut group: Vec<u64> = (start..start + k).map(|j| row_of[j as usize]).collect();
                group.sort_unstable();
                let wrap = group[0] + rows - group[group.len() - 1];
                let gap_min = group.windows(2).map(|w| w[1] - w[0]).fold(wrap, u64::min);
                assert!(
                    gap_min * k * 5 >= rows,
                    "rows={rows}: a={k}'s rows as close as {gap_min} rows (even spacing {})",
                    rows / k
                );
                start += k;
            }
        }
    }
}
