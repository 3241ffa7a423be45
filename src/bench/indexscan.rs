//! `aiostore bench indexscan`: the reference thread's first index
//! prefetching experiments (issue 12), scaled to this machine, cold, with
//! the heap read by a bitmap heap scan, a plain index scan without and with
//! prefetching (`enable_indexscan_prefetch`), and a sequential scan, and
//! optionally PostgreSQL 15's same queries on the same data in the same run
//! (`benches/pg_indexscan.sh`).
//!
//! # The data
//!
//! One table per data set and matching count `m`, as the reference builds
//! them: `btree_<dataset>_<m> (a integer, b text) WITH (fillfactor = 20)`,
//! `rows` rows (`i` = 1 ..= rows, in insertion order) with `b =
//! md5(i::text)` (about 23 rows a page) and `a` from one of
//!
//! - random: `a = (d × h(i)) / P`, `d = rows / m` distinct values, each
//!   matching about `m` rows at random places in the table. The reference
//!   draws `(d * random())::int`; `random()` cannot be made to give the
//!   same draws on both systems, so `h(i)` is a hash of `i` into `[0, P)`
//!   computed with integer arithmetic both evaluate alike ([`hash_sql`]),
//!   and the result is floored rather than rounded (values `0 .. d`, each
//!   with the same expected count). Its rows' positions are as irregular
//!   as random ones: the gaps between a value's rows have a coefficient of
//!   variation near 1, as for random positions (tested below);
//! - sequential: `a = 1 + (i - 1) / m`: a value's `m` rows are neighbours;
//! - cyclic: `a = 1 + i % (rows / m)`: a value's rows lie `rows / m` rows
//!   apart, evenly over the table.
//!
//! Then an index on `a`, `VACUUM` (PostgreSQL: `VACUUM FREEZE`) and
//! `ANALYZE`. The value queried, `v`, is picked once per table: of the 64
//! values from the middle of the range up, the one whose count is nearest
//! `m` (for the random set the counts vary; for the others every value has
//! `m` rows), so that "matches" means what it says. The tables are built in
//! `indexscan/` in the benchmark directory, each when its cases come, and
//! kept for the next run with `--keep`; without it each table is dropped
//! when its cases are done, so a run needs room for one table (about
//! 1.7 GiB at 5 M rows) rather than all eighteen.
//!
//! # The queries
//!
//! - point: `SELECT count(b), sum(a) FROM t WHERE a = v`;
//! - order: `SELECT count(b), sum(a) FROM (SELECT a, b FROM t WHERE a >= v
//!   ORDER BY a LIMIT m) AS s`, the reference's `ORDER BY … LIMIT` with
//!   `LIMIT` the matching count.
//!
//! `b` is not in the index, so every row is read from the heap, and only
//! one row crosses to the client, so both systems' times are the scan's
//! (the reference returns the rows themselves). `sum(a)` makes the answers
//! of an `ORDER BY … LIMIT` comparable across scans, which may break ties
//! at the limit differently: the `a` values of the first `m` rows are the
//! same whichever rows with the last value they take. Every scan of a case
//! must give the same answer, on both systems, or the benchmark stops.
//!
//! # A run
//!
//! Cold, each: the page cache dropped (root), our database reopened with
//! `io_direct=data`, the run's I/O method, `debug_io_latency_us` and a pool
//! at most an eighth of the table (empty); PostgreSQL restarted. The scan
//! is forced with the `enable_*` settings ([`Scan::settings`]), a plain
//! `EXPLAIN` checks that the plan has the scan's node (and reads the
//! catalogs before the clock), and then the timed statement is `EXPLAIN
//! (ANALYZE, BUFFERS, IO)` of the query, which hands back the query's rows
//! ([`crate::sql::StatementIo::explained_rows`]) and the scan node's heap
//! and I/O figures ([`ScanFigures`]). Ours is timed around that statement
//! in this process, PostgreSQL's plain query by psql's `\timing`. The two
//! systems' runs alternate case by case. PostgreSQL runs at the local
//! disk's latency only: `debug_io_latency_us` is ours.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use super::bitmapscan::ScanMethod;
use super::{execute, Bound, BuildProgress};
use crate::config::IoMethod;
use crate::database::{Database, Session};
use crate::types::Value;

/// The reference's fillfactor: about 23 rows of `(integer, md5 text)` a
/// page, so that matching rows spread over many pages.
pub const FILLFACTOR: u32 = 20;
/// Rows of `(integer, md5 text)` a block holds at [`FILLFACTOR`]
/// (measured: 100 000 rows in 4 348 blocks).
pub const ROWS_PER_BLOCK: u64 = 23;

/// Rows that fill about `blocks` blocks.
pub fn rows_for_blocks(blocks: u64) -> u64 {
    blocks * ROWS_PER_BLOCK
}

/// The table is at least this many times the pool, so that no scan is
/// served from it.
pub const TABLE_TIMES_POOL: u64 = 8;
/// The least pool the benchmark runs with (its sessions must each pin a
/// read stream's look-ahead), in buffers; a table must be at least
/// [`TABLE_TIMES_POOL`] times it.
pub const POOL_BUFFERS_MIN: u32 = 64;
/// Sessions each database of the run allows: one is open at a time, and
/// few sessions leave each a large share of the pool to pin.
const MAX_SESSIONS: u32 = 4;
/// Rows per INSERT … SELECT while building: progress every few seconds.
const BUILD_ROWS_PER_STATEMENT: u64 = 250_000;
/// Values searched (from the middle of the range up) for the one whose
/// count is nearest the matching count.
const VALUE_SEARCH_WINDOW: u64 = 64;
/// The hash's prime modulus (2³¹ − 1): squares of its residues fit a
/// bigint.
const HASH_MODULUS: u64 = 2_147_483_647;
/// The hash's first multiplier (MINSTD's) and the mixing one (the
/// original Lehmer generator's).
const HASH_MULTIPLIER: u64 = 48_271;
const HASH_MIX: u64 = 16_807;
/// A run longer than this (seconds) is not repeated: its one run stands as
/// the median, so that slow cases without prefetching at added latency
/// stay affordable.
const REPEAT_SECONDS_MAX: f64 = 20.0;
/// A case whose scans all take less than this (ms) in their first run
/// runs [`FAST_CASE_RUNS_FACTOR`] times `--runs` (ours; PostgreSQL's
/// `--runs`): at a millisecond the machine's noise is larger than the 5%
/// the no-regression target allows, and more runs cost little.
const FAST_CASE_MS: f64 = 20.0;
const FAST_CASE_RUNS_FACTOR: u32 = 3;
/// A case without prefetching at added latency is skipped when the blocks
/// the prefetching run of the same case read, one latency each, would take
/// longer than this (seconds).
const NO_PREFETCH_SECONDS_MAX: f64 = 300.0;
/// Our table recording each built table's size and queried value; written
/// last, so a row means the build finished.
const META_TABLE: &str = "indexscan_tables";

/// How the table's `a` values are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dataset {
    Random,
    Sequential,
    Cyclic,
}

impl Dataset {
    pub const ALL: [Dataset; 3] = [Dataset::Random, Dataset::Sequential, Dataset::Cyclic];

    pub fn name(self) -> &'static str {
        match self {
            Dataset::Random => "random",
            Dataset::Sequential => "sequential",
            Dataset::Cyclic => "cyclic",
        }
    }

    pub fn parse(text: &str) -> Option<Dataset> {
        Dataset::ALL.into_iter().find(|d| d.name() == text)
    }

    /// The smallest value of `a`.
    fn first_value(self) -> u64 {
        match self {
            Dataset::Random => 0,
            Dataset::Sequential | Dataset::Cyclic => 1,
        }
    }
}

/// `h(i)` of the random data set, as SQL over `i`: `x = i × 48271 mod P`,
/// then `(x² mod P × 16807 + x) mod P`. The square makes it nonlinear in
/// `i` (an affine step alone spaces a value's rows evenly, as the cyclic
/// set does); every product fits a bigint.
pub fn hash_sql() -> String {
    let x = format!("(i::bigint * {HASH_MULTIPLIER} % {HASH_MODULUS})");
    format!("((({x} * {x}) % {HASH_MODULUS} * {HASH_MIX} + {x}) % {HASH_MODULUS})")
}

/// The statement adding rows `first ..= last` of `dataset`'s table for
/// `matching` rows a value; `benches/pg_indexscan.sh` holds a copy.
pub fn insert_sql(
    table: &str,
    dataset: Dataset,
    rows: u64,
    matching: u64,
    first: u64,
    last: u64,
) -> String {
    let distinct = rows / matching;
    let a = match dataset {
        Dataset::Random => format!("({distinct} * {} / {HASH_MODULUS})::int", hash_sql()),
        Dataset::Sequential => format!("1 + (i - 1) / {matching}"),
        Dataset::Cyclic => format!("1 + i % {distinct}"),
    };
    format!(
        "INSERT INTO {table} SELECT {a}, md5(i::text) FROM generate_series({first}, {last}) AS g(i)"
    )
}

/// Which query a case runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Query {
    /// `WHERE a = v`.
    Point,
    /// `WHERE a >= v ORDER BY a LIMIT m`.
    Order,
}

impl Query {
    pub const ALL: [Query; 2] = [Query::Point, Query::Order];

    pub fn name(self) -> &'static str {
        match self {
            Query::Point => "point",
            Query::Order => "order",
        }
    }

    pub fn parse(text: &str) -> Option<Query> {
        Query::ALL.into_iter().find(|q| q.name() == text)
    }

    /// The query on `table` (the same text on PostgreSQL).
    pub fn sql(self, table: &str, v: u64, matching: u64) -> String {
        match self {
            Query::Point => format!("SELECT count(b), sum(a) FROM {table} WHERE a = {v}"),
            Query::Order => format!(
                "SELECT count(b), sum(a) FROM (SELECT a, b FROM {table} WHERE a >= {v} ORDER BY a LIMIT {matching}) AS s"
            ),
        }
    }

    /// The query's shape, for the output.
    pub fn label(self) -> &'static str {
        match self {
            Query::Point => "WHERE a = v",
            Query::Order => "WHERE a >= v ORDER BY a LIMIT m",
        }
    }
}

/// How a case reads the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    Bitmap,
    /// Index scan, `enable_indexscan_prefetch = off`.
    IndexNoPrefetch,
    /// Index scan, `enable_indexscan_prefetch = on`.
    IndexPrefetch,
    /// Sequential scan: for the largest matching count and no added
    /// latency only, where the reference runs it (its time hardly depends
    /// on the count).
    Seq,
}

impl Scan {
    /// Each case's scans in this order: the prefetching run comes before
    /// the one without, whose cost at added latency it predicts.
    pub const ALL: [Scan; 4] = [
        Scan::Bitmap,
        Scan::IndexPrefetch,
        Scan::IndexNoPrefetch,
        Scan::Seq,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scan::Bitmap => "bitmap",
            Scan::IndexNoPrefetch => "index-noprefetch",
            Scan::IndexPrefetch => "index-prefetch",
            Scan::Seq => "seq",
        }
    }

    pub fn parse(text: &str) -> Option<Scan> {
        Scan::ALL.into_iter().find(|s| s.name() == text)
    }

    /// The plan's access method.
    pub fn method(self) -> ScanMethod {
        match self {
            Scan::Bitmap => ScanMethod::Bitmap,
            Scan::IndexNoPrefetch | Scan::IndexPrefetch => ScanMethod::Index,
            Scan::Seq => ScanMethod::Seq,
        }
    }

    /// Whether the index scan prefetches; None for the other scans.
    pub fn prefetch(self) -> Option<bool> {
        match self {
            Scan::IndexNoPrefetch => Some(false),
            Scan::IndexPrefetch => Some(true),
            Scan::Bitmap | Scan::Seq => None,
        }
    }

    /// The session settings that force the scan.
    pub fn settings(self) -> String {
        let mut settings = self.method().settings().to_string();
        if let Some(on) = self.prefetch() {
            let value = if on { "on" } else { "off" };
            settings.push_str(&format!("; SET enable_indexscan_prefetch = {value}"));
        }
        settings
    }

    /// PostgreSQL's counterpart: it has no index prefetching, so its index
    /// scan runs once per case, beside ours without prefetching.
    fn postgresql(self) -> Option<ScanMethod> {
        match self {
            Scan::IndexPrefetch => None,
            other => Some(other.method()),
        }
    }
}

/// One built table.
#[derive(Debug, Clone)]
pub struct TableInfo {
    pub name: String,
    pub dataset: Dataset,
    pub rows: u64,
    /// Rows each value matches (about, for the random set).
    pub matching: u64,
    /// The value queried, the rows `a = v` matches and the rows `a >= v`
    /// does (what a `LIMIT` above can take).
    pub v: u64,
    pub v_rows: u64,
    pub rows_from_v: u64,
    pub blocks: u32,
}

impl TableInfo {
    /// The table's name for a data set and matching count.
    pub fn name_for(dataset: Dataset, matching: u64) -> String {
        format!("btree_{}_{matching}", dataset.name())
    }

    /// The count every scan of `query` must return.
    fn expected_count(&self, query: Query) -> u64 {
        match query {
            Query::Point => self.v_rows,
            Query::Order => self.matching.min(self.rows_from_v),
        }
    }
}

/// The database the tables live in, and how each run opens it.
#[derive(Debug, Clone)]
pub struct IndexscanDb {
    pub dir: PathBuf,
    pub method: IoMethod,
    /// Pool size in buffers.
    pub shared_buffers: u32,
    /// The user's start-up settings (io_workers, …), after ours so they win.
    pub extra_settings: Vec<String>,
}

impl IndexscanDb {
    /// Settings of a run with `latency_us` of added I/O latency: direct
    /// I/O, so that a reopened database reads from the disk.
    fn settings(&self, latency_us: u64) -> Vec<String> {
        let mut settings = vec![
            "io_direct=data".to_string(),
            format!("io_method={}", self.method.name()),
            format!("shared_buffers={}", self.shared_buffers),
            format!("max_sessions={MAX_SESSIONS}"),
            format!("debug_io_latency_us={latency_us}"),
        ];
        settings.extend(self.extra_settings.iter().cloned());
        settings
    }

    /// Opens the database anew (an empty pool) and checks the method.
    pub fn open(&self, latency_us: u64) -> Result<Arc<Database>, String> {
        super::open_checked(&self.dir, &self.settings(latency_us), self.method)
    }
}

/// Builds `dataset`'s table for `matching` rows a value unless an earlier
/// run left it with `rows` rows, and returns what the cases need.
/// `progress` shows the build.
pub fn ensure_table(
    db: &IndexscanDb,
    dataset: Dataset,
    rows: u64,
    matching: u64,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<TableInfo, String> {
    if !db.dir.join("AIOSTORE_VERSION").exists() {
        Database::init(&db.dir).map_err(|e| e.to_string())?;
    }
    let name = TableInfo::name_for(dataset, matching);
    let database = Database::open(&db.dir, &db.settings(0)).map_err(|e| e.to_string())?;
    let mut s = database.session().map_err(|e| e.to_string())?;
    execute(
        &mut s,
        &format!("CREATE TABLE IF NOT EXISTS {META_TABLE} (name text, rows bigint, v bigint, v_rows bigint, rows_from_v bigint)"),
    )?;
    let built = execute(
        &mut s,
        &format!("SELECT v, v_rows, rows_from_v FROM {META_TABLE} WHERE name = '{name}' AND rows = {rows}"),
    )?;
    let built = match built
        .last()
        .and_then(|r| r.rows.first())
        .map(|r| r.as_slice())
    {
        Some([Value::BigInt(v), Value::BigInt(v_rows), Value::BigInt(from_v)]) => {
            Some((*v as u64, *v_rows as u64, *from_v as u64))
        }
        _ => None,
    };
    let (v, v_rows, rows_from_v) = match built {
        Some(found) if database.catalog().index(&format!("{name}_a_idx")).is_ok() => found,
        _ => build(&mut s, &name, dataset, rows, matching, progress)?,
    };
    let blocks = super::seqscan::table_blocks(&database, &name)?.1;
    Ok(TableInfo {
        name,
        dataset,
        rows,
        matching,
        v,
        v_rows,
        rows_from_v,
        blocks,
    })
}

/// Builds the table, picks the queried value and records them: the
/// value, its rows and the rows from it up.
fn build(
    s: &mut Session,
    name: &str,
    dataset: Dataset,
    rows: u64,
    matching: u64,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(u64, u64, u64), String> {
    execute(
        s,
        &format!(
            "DELETE FROM {META_TABLE} WHERE name = '{name}'; DROP TABLE IF EXISTS {name}; CREATE TABLE {name} (a integer, b text) WITH (fillfactor = {FILLFACTOR})"
        ),
    )?;
    let mut done = 0;
    while done < rows {
        let n = BUILD_ROWS_PER_STATEMENT.min(rows - done);
        execute(
            s,
            &insert_sql(name, dataset, rows, matching, done + 1, done + n),
        )?;
        done += n;
        progress(done, rows);
    }
    execute(
        s,
        &format!("CREATE INDEX {name}_a_idx ON {name} (a); VACUUM {name}; ANALYZE {name}"),
    )?;
    let low = dataset.first_value() + rows / matching / 2;
    let counts = execute(
        s,
        &format!(
            "SELECT a, count(*) FROM {name} WHERE a >= {low} AND a < {} GROUP BY a",
            low + VALUE_SEARCH_WINDOW
        ),
    )?;
    let mut candidates: Vec<(u64, u64)> = counts
        .last()
        .map(|r| r.rows.as_slice())
        .unwrap_or_default()
        .iter()
        .filter_map(|row| match row.as_slice() {
            [Value::Integer(a), Value::BigInt(n)] => Some((*a as u64, *n as u64)),
            _ => None,
        })
        .collect();
    candidates.sort_by_key(|&(a, n)| (n.abs_diff(matching), a));
    let &(v, v_rows) = candidates.first().ok_or_else(|| {
        format!("{name}: no value of a from {low} up; the table is too small for {matching} matching rows")
    })?;
    let from_v = super::one_count(s, &format!("SELECT count(*) FROM {name} WHERE a >= {v}"))?;
    execute(
        s,
        &format!(
            "INSERT INTO {META_TABLE} VALUES ('{name}', {rows}, {v}, {v_rows}, {from_v}); CHECKPOINT"
        ),
    )?;
    Ok((v, v_rows, from_v))
}

/// Drops a table whose cases are done (and its record), so that a run
/// without `--keep` needs room for one table at a time.
fn drop_table(db: &IndexscanDb, table: &TableInfo) -> Result<(), String> {
    let database = Database::open(&db.dir, &db.settings(0)).map_err(|e| e.to_string())?;
    let mut s = database.session().map_err(|e| e.to_string())?;
    execute(
        &mut s,
        &format!(
            "DELETE FROM {META_TABLE} WHERE name = '{0}'; DROP TABLE {0}; CHECKPOINT",
            table.name
        ),
    )
    .map(drop)
}

/// What the scan node of an `EXPLAIN (ANALYZE, BUFFERS, IO)` shows. Lines
/// a build does not print yet count as zero (the index scan's heap hits
/// and reads, `Prefetch` and `I/O` lines come with issue 12).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ScanFigures {
    /// Heap blocks found in the pool and read from disk.
    pub heap_hits: u64,
    pub heap_reads: u64,
    /// The scan's read I/Os (the heap's stream; an index scan's `I/O`
    /// line).
    pub ios: u64,
    /// Read streams an index scan started to prefetch the heap.
    pub prefetch_streams: u64,
}

impl ScanFigures {
    /// The figures of the first node whose line contains `node`: the
    /// detail lines under it, up to its first child or the end of the
    /// plan. For a bitmap heap scan or a sequential scan, the heap's are
    /// its `Buffers`; for an index scan, its `Heap` line's (its `Buffers`
    /// count the index as well).
    pub fn parse(plan: &[String], node: &str) -> Option<ScanFigures> {
        let start = plan.iter().position(|l| l.contains(node))?;
        let depth = |l: &str| l.len() - l.trim_start().len();
        let node_depth = depth(&plan[start]);
        let details = plan[start + 1..]
            .iter()
            .take_while(|l| depth(l) > node_depth && !l.trim_start().starts_with("->"));
        let field = |line: &str, name: &str| -> u64 {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
                .unwrap_or(0)
        };
        let index = node.starts_with("Index");
        let mut f = ScanFigures::default();
        for line in details {
            let line = line.trim_start();
            if let Some(rest) = line.strip_prefix("Buffers: shared") {
                if !index {
                    (f.heap_hits, f.heap_reads) = (field(rest, "hit"), field(rest, "read"));
                }
            } else if let Some(rest) = line.strip_prefix("Heap:") {
                (f.heap_hits, f.heap_reads) = (field(rest, "hit"), field(rest, "read"));
            } else if let Some(rest) = line.strip_prefix("Prefetch:") {
                f.prefetch_streams = field(rest, "streams");
            } else if let Some(rest) = line.strip_prefix("I/O:") {
                f.ios = field(rest, "ios");
            }
        }
        Some(f)
    }
}

/// What one cold run of ours measured.
#[derive(Debug, Clone)]
pub struct CaseRun {
    pub ms: f64,
    /// `count|sum`, as psql prints the row unaligned.
    pub result: String,
    pub figures: ScanFigures,
    /// Every block the pool read (index, heap, catalogs) and the read I/Os.
    pub blocks_read: u64,
    pub read_ios: u64,
}

/// `count|sum` of the queries' one row; NULL (an empty sum) prints empty.
fn result_text(rows: &[Vec<Value>]) -> String {
    let value = |v: &Value| match v {
        Value::Integer(n) => n.to_string(),
        Value::BigInt(n) => n.to_string(),
        Value::Null => String::new(),
        other => format!("{other:?}"),
    };
    rows.iter()
        .map(|row| row.iter().map(value).collect::<Vec<_>>().join("|"))
        .collect::<Vec<_>>()
        .join(";")
}

/// One cold run of ours: reopens the database at `latency_us`, forces
/// `scan`, checks the plan, times `EXPLAIN (ANALYZE, BUFFERS, IO)` of the
/// query and checks the answer's count.
pub fn run_case(
    db: &IndexscanDb,
    table: &TableInfo,
    query: Query,
    scan: Scan,
    latency_us: u64,
) -> Result<CaseRun, String> {
    // Our reads bypass the page cache (O_DIRECT); dropping it as well
    // keeps the file system's metadata cold, as on PostgreSQL's side.
    let _ = super::drop_page_cache();
    let database = db.open(latency_us)?;
    let mut s = database.session().map_err(|e| e.to_string())?;
    execute(&mut s, &scan.settings())?;
    let sql = query.sql(&table.name, table.v, table.matching);
    let node = scan.method().node();
    super::check_plan(&mut s, &sql, node, &format!("{} scan", scan.name()))?;
    let (reads_before, ios_before) = super::read_counters(&database, db.method);
    let started = Instant::now();
    let (rows, plan) = super::explain_analyze(&mut s, &sql)?;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    let (reads_after, ios_after) = super::read_counters(&database, db.method);
    let figures = ScanFigures::parse(&plan, node)
        .ok_or_else(|| format!("{sql}: no {node} node in:\n{}", plan.join("\n")))?;
    if scan == Scan::IndexNoPrefetch && figures.prefetch_streams > 0 {
        return Err(format!(
            "{sql}: enable_indexscan_prefetch=off, yet the scan started {} prefetch streams:\n{}",
            figures.prefetch_streams,
            plan.join("\n")
        ));
    }
    let result = result_text(&rows);
    let count = table.expected_count(query);
    if !result.starts_with(&format!("{count}|")) {
        return Err(format!(
            "{sql} with the {} scan returned {result:?}; {count} rows were expected",
            scan.name()
        ));
    }
    Ok(CaseRun {
        ms,
        result,
        figures,
        blocks_read: reads_after - reads_before,
        read_ios: ios_after - ios_before,
    })
}

/// What to run.
#[derive(Debug, Clone)]
pub struct IndexscanOptions {
    pub db: IndexscanDb,
    pub rows: u64,
    /// Cold runs per case (a case slower than [`REPEAT_SECONDS_MAX`] runs
    /// once).
    pub runs: u32,
    pub datasets: Vec<Dataset>,
    pub matching: Vec<u64>,
    pub queries: Vec<Query>,
    pub scans: Vec<Scan>,
    /// Added I/O latencies (`debug_io_latency_us`) to run each case at.
    pub latencies_us: Vec<u64>,
    /// `benches/pg_indexscan.sh`, run after each of our runs at latency 0.
    pub pg_script: Option<PathBuf>,
    /// Keep the tables for the next run (`--keep`); else each is dropped
    /// when its cases are done, here and on PostgreSQL.
    pub keep_tables: bool,
}

/// One timed cold run (in JSON, as a [`Cell`]'s figures).
#[derive(Debug, Clone, Serialize)]
pub struct IndexscanRun {
    /// "aiostore" or "postgresql".
    pub system: &'static str,
    pub dataset: Dataset,
    pub query: Query,
    pub matches: u64,
    pub latency_us: u64,
    /// "bitmap", "index" or "seq".
    pub scan: &'static str,
    pub prefetch: Option<bool>,
    #[serde(skip)]
    pub run: u32,
    pub ms: f64,
    /// `count|sum`.
    pub result: String,
    /// Ours only (None for PostgreSQL's, timed from psql).
    pub heap_reads: Option<u64>,
    pub heap_hits: Option<u64>,
    /// Read I/Os the query started, index and heap (each block read
    /// without a stream is an I/O of its own).
    pub ios: Option<u64>,
    /// Of those, the I/Os of the scan's heap stream (the bitmap heap
    /// scan's, the sequential scan's, the index scan's prefetching one).
    pub heap_stream_ios: Option<u64>,
    pub prefetch_streams: Option<u64>,
    /// Blocks the query read, index and heap.
    pub blocks_read: Option<u64>,
    #[serde(skip)]
    scan_kind: Option<Scan>,
}

impl IndexscanRun {
    /// The scan this run stands for in the table: ours, or PostgreSQL's
    /// index scan as the one without prefetching.
    fn scan(&self) -> Scan {
        self.scan_kind.unwrap_or(Scan::IndexNoPrefetch)
    }
}

fn emit_run(out: &mut dyn Write, r: &IndexscanRun) -> Result<(), String> {
    let opt = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
    let scan = match (r.system, r.prefetch) {
        ("postgresql", _) => format!("PG {}", r.scan),
        (_, Some(true)) => "index+prefetch".into(),
        (_, Some(false)) => "index".into(),
        _ => r.scan.to_string(),
    };
    writeln!(
        out,
        "{:<10} {:>7} {:<5} {:>6} {:<14} {:>3} {:>10.1} {:>8} {:>7} {:>7} {:>7} {}",
        r.dataset.name(),
        r.matches,
        r.query.name(),
        r.latency_us,
        scan,
        r.run,
        r.ms,
        opt(r.heap_reads),
        opt(r.heap_hits),
        opt(r.ios),
        opt(r.prefetch_streams),
        r.result
    )
    .map_err(|e| e.to_string())
}

/// A case: a table, a query and a latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CaseKey {
    dataset: Dataset,
    matches: u64,
    query: Query,
    latency_us: u64,
}

impl CaseKey {
    fn of(r: &IndexscanRun) -> CaseKey {
        CaseKey {
            dataset: r.dataset,
            matches: r.matches,
            query: r.query,
            latency_us: r.latency_us,
        }
    }

    fn label(&self) -> String {
        format!(
            "{} {} m={} at {} µs",
            self.dataset.name(),
            self.query.name(),
            self.matches,
            self.latency_us
        )
    }
}

/// One cell of the table: a case's scan on one system, the median of its
/// runs' milliseconds with the other figures of the run nearest it.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub bench: &'static str,
    pub case: &'static str,
    pub runs: usize,
    /// The run nearest the median, its `ms` the median.
    #[serde(flatten)]
    pub figures: IndexscanRun,
}

impl Cell {
    fn key(&self) -> (CaseKey, Scan) {
        (CaseKey::of(&self.figures), self.figures.scan())
    }
}

/// The cells of `runs`, in the order of their first run.
fn cells(runs: &[IndexscanRun]) -> Vec<Cell> {
    let mut keys: Vec<(CaseKey, Scan, &'static str)> = Vec::new();
    for r in runs {
        let key = (CaseKey::of(r), r.scan(), r.system);
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys.into_iter()
        .filter_map(|(case, scan, system)| {
            let mine: Vec<&IndexscanRun> = runs
                .iter()
                .filter(|r| CaseKey::of(r) == case && r.scan() == scan && r.system == system)
                .collect();
            let ms = super::median(&mine.iter().map(|r| r.ms).collect::<Vec<_>>())?;
            let nearest = mine
                .iter()
                .min_by(|a, b| (a.ms - ms).abs().total_cmp(&(b.ms - ms).abs()))?;
            Some(Cell {
                bench: "indexscan",
                case: "cell",
                runs: mine.len(),
                figures: IndexscanRun {
                    ms,
                    ..(*nearest).clone()
                },
            })
        })
        .collect()
}

/// The median milliseconds of a case's scan on a system, if it ran.
fn cell_ms(cells: &[Cell], case: CaseKey, scan: Scan, system: &str) -> Option<f64> {
    cells
        .iter()
        .find(|c| c.key() == (case, scan) && c.figures.system == system)
        .map(|c| c.figures.ms)
}

/// One of the targets, judged over the cases it names.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub bench: &'static str,
    pub case: &'static str,
    pub target: &'static str,
    /// The bound each case's ratio must meet: "at most" or "at least"
    /// `limit`.
    pub bound: &'static str,
    pub limit: f64,
    #[serde(skip)]
    judged_by: Bound,
    /// None when none of its cases ran.
    pub met: Option<bool>,
    /// Each case's ratio, worst first.
    pub figures: Vec<(String, f64)>,
}

/// A target: which cases it judges and how.
struct Target {
    text: &'static str,
    applies: fn(&CaseKey) -> bool,
    /// The ratio of a case (None where a scan it needs did not run).
    ratio: fn(&[Cell], CaseKey) -> Option<f64>,
    /// Whether a ratio meets the target; also which ratio is worst.
    bound: Bound,
}

const OURS: &str = "aiostore";
const THEIRS: &str = "postgresql";

/// Index scan with prefetch over bitmap scan.
fn prefetch_over_bitmap(cells: &[Cell], case: CaseKey) -> Option<f64> {
    Some(
        cell_ms(cells, case, Scan::IndexPrefetch, OURS)?
            / cell_ms(cells, case, Scan::Bitmap, OURS)?,
    )
}

/// How many times faster prefetching made the index scan.
fn prefetch_speedup(cells: &[Cell], case: CaseKey) -> Option<f64> {
    Some(
        cell_ms(cells, case, Scan::IndexNoPrefetch, OURS)?
            / cell_ms(cells, case, Scan::IndexPrefetch, OURS)?,
    )
}

/// Index scan with prefetch over without (above 1: slower).
fn prefetch_slowdown(cells: &[Cell], case: CaseKey) -> Option<f64> {
    prefetch_speedup(cells, case).map(|s| 1.0 / s)
}

/// How many times faster our prefetching index scan is than PostgreSQL's
/// index scan.
fn speedup_over_postgresql(cells: &[Cell], case: CaseKey) -> Option<f64> {
    Some(
        cell_ms(cells, case, Scan::IndexNoPrefetch, THEIRS)?
            / cell_ms(cells, case, Scan::IndexPrefetch, OURS)?,
    )
}

/// The targets, each a ratio measured in the same run.
const TARGETS: [Target; 6] = [
    Target {
        text: "index scan with prefetch within 1.1× of the bitmap scan from 1 000 matches up (WHERE a = v; prefetch ms / bitmap ms)",
        applies: |c| c.query == Query::Point && c.matches >= 1_000,
        ratio: prefetch_over_bitmap,
        bound: Bound::AtMost(1.1),
    },
    Target {
        text: "at least 2.5× faster than without prefetch at 10 000 and 100 000 matches on the local disk (WHERE a = v)",
        applies: |c| {
            c.query == Query::Point && matches!(c.matches, 10_000 | 100_000) && c.latency_us == 0
        },
        ratio: prefetch_speedup,
        bound: Bound::AtLeast(2.5),
    },
    Target {
        text: "at least 8× faster than without prefetch at 10 000 and 100 000 matches with debug_io_latency_us=500 (WHERE a = v)",
        applies: |c| {
            c.query == Query::Point
                && matches!(c.matches, 10_000 | 100_000)
                && c.latency_us == 500
        },
        ratio: prefetch_speedup,
        bound: Bound::AtLeast(8.0),
    },
    Target {
        text: "never more than 5% slower than without prefetch for 1 and 10 matches, on sequential and cyclic data, and for LIMIT 10 (prefetch ms / no-prefetch ms)",
        applies: |c| {
            matches!(c.matches, 1 | 10) || matches!(c.dataset, Dataset::Sequential | Dataset::Cyclic)
        },
        ratio: prefetch_slowdown,
        bound: Bound::AtMost(1.05),
    },
    Target {
        text: "ORDER BY … LIMIT 10 000 at least 5× faster with prefetch at debug_io_latency_us=500",
        applies: |c| c.query == Query::Order && c.matches == 10_000 && c.latency_us == 500,
        ratio: prefetch_speedup,
        bound: Bound::AtLeast(5.0),
    },
    Target {
        text: "prefetching index scan at least 3× faster than PostgreSQL 15's index scan at 10 000 and 100 000 matches, cold (PG ms / ours ms)",
        applies: |c| matches!(c.matches, 10_000 | 100_000) && c.latency_us == 0,
        ratio: speedup_over_postgresql,
        bound: Bound::AtLeast(3.0),
    },
];

/// Judges every target over the cases of `cells`.
pub fn verdicts(cells: &[Cell]) -> Vec<Verdict> {
    let mut cases: Vec<CaseKey> = Vec::new();
    for c in cells {
        let case = c.key().0;
        if !cases.contains(&case) {
            cases.push(case);
        }
    }
    TARGETS
        .iter()
        .map(|t| {
            let mut figures: Vec<(String, f64)> = cases
                .iter()
                .filter(|c| (t.applies)(c))
                .filter_map(|&c| Some((c.label(), (t.ratio)(cells, c)?)))
                .collect();
            figures.sort_by(|a, b| t.bound.badness(b.1).total_cmp(&t.bound.badness(a.1)));
            let met = (!figures.is_empty()).then(|| figures.iter().all(|f| t.bound.meets(f.1)));
            let (bound, limit) = t.bound.parts();
            Verdict {
                bench: "indexscan",
                case: "verdict",
                target: t.text,
                bound,
                limit,
                judged_by: t.bound,
                met,
                figures,
            }
        })
        .collect()
}

/// Runs the cases: each scan of a case, ours then PostgreSQL's where it
/// runs, cold, run after run; checks that every answer is the case's
/// first; keeps the runs, and notes where it ran a scan less often or not
/// at all.
struct CaseRunner<'a> {
    opts: &'a IndexscanOptions,
    /// The options' database with the pool sized for the current table.
    db: IndexscanDb,
    out: &'a mut dyn Write,
    json: bool,
    runs: Vec<IndexscanRun>,
    notes: Vec<String>,
}

impl CaseRunner<'_> {
    /// Runs every scan of `query` at `latency_us` on `table`.
    fn run_scans(
        &mut self,
        table: &TableInfo,
        query: Query,
        latency_us: u64,
    ) -> Result<(), String> {
        let largest = self.opts.matching.iter().copied().max().unwrap_or(0);
        let scans: Vec<Scan> = Scan::ALL
            .into_iter()
            .filter(|s| self.opts.scans.contains(s))
            .filter(|&s| s != Scan::Seq || (table.matching == largest && latency_us == 0))
            .collect();
        let case = CaseKey {
            dataset: table.dataset,
            matches: table.matching,
            query,
            latency_us,
        };
        let mut once: Vec<Scan> = Vec::new();
        let mut answer: Option<(String, String)> = None;
        let mut runs = self.opts.runs;
        let mut run = 1;
        while run <= runs {
            let mut slowest_ms = 0.0f64;
            for &scan in &scans {
                if once.contains(&scan) {
                    continue;
                }
                if let Some(note) = self.skip_without_prefetch(case, scan, run) {
                    self.note(note);
                    once.push(scan);
                    continue;
                }
                let r = run_case(&self.db, table, query, scan, latency_us)?;
                let seconds = r.ms / 1e3;
                slowest_ms = slowest_ms.max(r.ms);
                let record = IndexscanRun {
                    system: OURS,
                    dataset: table.dataset,
                    query,
                    matches: table.matching,
                    latency_us,
                    scan: scan.method().name(),
                    prefetch: scan.prefetch(),
                    run,
                    ms: r.ms,
                    result: r.result,
                    heap_reads: Some(r.figures.heap_reads),
                    heap_hits: Some(r.figures.heap_hits),
                    ios: Some(r.read_ios),
                    heap_stream_ios: Some(r.figures.ios),
                    prefetch_streams: Some(r.figures.prefetch_streams),
                    blocks_read: Some(r.blocks_read),
                    scan_kind: Some(scan),
                };
                self.record(record, &mut answer, table, query)?;
                if let (Some(script), Some(method), 0, true) = (
                    &self.opts.pg_script,
                    scan.postgresql(),
                    latency_us,
                    run <= self.opts.runs,
                ) {
                    let r = run_pg(script, self.opts, table, query, method, run)?;
                    self.record(r, &mut answer, table, query)?;
                }
                if seconds > REPEAT_SECONDS_MAX && run < runs {
                    self.note(format!(
                        "{}: {} took {seconds:.0} s, more than {REPEAT_SECONDS_MAX:.0} s: run once",
                        case.label(),
                        scan.name()
                    ));
                    once.push(scan);
                }
            }
            if run == 1 && slowest_ms < FAST_CASE_MS {
                runs *= FAST_CASE_RUNS_FACTOR;
            }
            run += 1;
        }
        Ok(())
    }

    /// Why `scan` is skipped in `case`, if it is: a scan without
    /// prefetching at added latency whose blocks (as many as the
    /// prefetching scan read) would take longer than
    /// [`NO_PREFETCH_SECONDS_MAX`] one latency at a time.
    fn skip_without_prefetch(&self, case: CaseKey, scan: Scan, run: u32) -> Option<String> {
        if scan != Scan::IndexNoPrefetch || case.latency_us == 0 || run > 1 {
            return None;
        }
        let blocks = self
            .runs
            .iter()
            .find(|r| CaseKey::of(r) == case && r.scan_kind == Some(Scan::IndexPrefetch))?
            .blocks_read?;
        let seconds = blocks as f64 * case.latency_us as f64 / 1e6;
        (seconds > NO_PREFETCH_SECONDS_MAX).then(|| {
            format!(
                "{}: index scan without prefetch skipped: {blocks} blocks at {} µs each would take about {seconds:.0} s (more than {NO_PREFETCH_SECONDS_MAX:.0} s)",
                case.label(),
                case.latency_us
            )
        })
    }

    /// Checks the run's answer against the case's first, prints it and
    /// keeps it.
    fn record(
        &mut self,
        r: IndexscanRun,
        answer: &mut Option<(String, String)>,
        table: &TableInfo,
        query: Query,
    ) -> Result<(), String> {
        let who = format!("{} {} scan", r.system, r.scan);
        match answer {
            None => *answer = Some((r.result.clone(), who)),
            Some((first, first_who)) if *first != r.result => {
                return Err(format!(
                    "{} on {}: the {who} returned {:?}, the {first_who} {first:?}; the scans must agree",
                    query.sql(&table.name, table.v, table.matching),
                    table.name,
                    r.result
                ));
            }
            Some(_) => {}
        }
        if !self.json {
            emit_run(self.out, &r)?;
        }
        self.runs.push(r);
        Ok(())
    }

    fn note(&mut self, note: String) {
        let _ = writeln!(std::io::stderr(), "note: {note}");
        self.notes.push(note);
    }
}

/// Runs `script` (`benches/pg_indexscan.sh ROWS DATASET MATCHES`) for run
/// `run` of one case and reads its result line (`postgresql 15 indexscan
/// dataset=… matches=… query=… scan=… rows=… v=… run=… result=… ms=…`).
fn run_pg(
    script: &Path,
    opts: &IndexscanOptions,
    table: &TableInfo,
    query: Query,
    method: ScanMethod,
    run: u32,
) -> Result<IndexscanRun, String> {
    let (run_text, v) = (run.to_string(), table.v.to_string());
    let only_table = if opts.keep_tables { "0" } else { "1" };
    let lines = super::run_pg_script(
        script,
        &[
            opts.rows.to_string(),
            table.dataset.name().to_string(),
            table.matching.to_string(),
        ],
        &[
            ("RUNS", "1"),
            ("FIRST_RUN", &run_text),
            ("QUERIES", query.name()),
            ("SCANS", method.name()),
            ("V", &v),
            ("ONLY_TABLE", only_table),
        ],
        "runs",
    )?;
    let line = lines
        .first()
        .ok_or_else(|| format!("{}: no result line", script.display()))?;
    let (r, rows, v) = line.parse(script, |l| {
        let r = IndexscanRun {
            system: THEIRS,
            dataset: Dataset::parse(l.field("dataset")?)?,
            query: Query::parse(l.field("query")?)?,
            matches: l.field("matches")?.parse().ok()?,
            latency_us: 0,
            scan: ScanMethod::parse(l.field("scan")?)?.name(),
            prefetch: None,
            run: l.field("run")?.parse().ok()?,
            ms: l.field("ms")?.parse().ok()?,
            result: l.field("result")?.to_string(),
            heap_reads: None,
            heap_hits: None,
            ios: None,
            heap_stream_ios: None,
            prefetch_streams: None,
            blocks_read: None,
            scan_kind: match method {
                ScanMethod::Index => None,
                ScanMethod::Bitmap => Some(Scan::Bitmap),
                ScanMethod::Seq => Some(Scan::Seq),
            },
        };
        let rows: u64 = l.field("rows")?.parse().ok()?;
        let v: u64 = l.field("v")?.parse().ok()?;
        Some((r, rows, v))
    })?;
    if rows != opts.rows
        || v != table.v
        || r.dataset != table.dataset
        || r.matches != table.matching
    {
        return Err(format!(
            "{}: ran {}; asked for {} rows, {} m={}, v={}",
            script.display(),
            line.text(),
            opts.rows,
            table.dataset.name(),
            table.matching,
            table.v
        ));
    }
    Ok(r)
}

/// Checks the options before any table is built.
fn check_options(opts: &IndexscanOptions) -> Result<(), String> {
    if opts.runs == 0
        || opts.datasets.is_empty()
        || opts.matching.is_empty()
        || opts.queries.is_empty()
        || opts.scans.is_empty()
        || opts.latencies_us.is_empty()
    {
        return Err("bench indexscan needs --runs of at least 1 and at least one of each of --datasets, --matching, --queries, --scans and --latency-us".into());
    }
    if let Some(m) = opts
        .matching
        .iter()
        .find(|&&m| m == 0 || m.saturating_mul(2) > opts.rows)
    {
        return Err(format!(
            "--matching {m}: each count must be from 1 to half of --rows ({}), so that the table has at least two values",
            opts.rows / 2
        ));
    }
    if opts.pg_script.is_some() && super::drop_page_cache().is_err() {
        return Err("bench indexscan --pg-script runs PostgreSQL cold and drops the page cache, which needs root (/proc/sys/vm/drop_caches); run as root".into());
    }
    Ok(())
}

/// The pool for a table of `blocks`: the user's `shared_buffers`, or an
/// eighth of the table if that is less; refused when the table is smaller
/// than [`TABLE_TIMES_POOL`] × [`POOL_BUFFERS_MIN`].
fn pool_for(shared_buffers: u32, blocks: u32, rows: u64) -> Result<u32, String> {
    let least = TABLE_TIMES_POOL * POOL_BUFFERS_MIN as u64;
    if (blocks as u64) < least {
        return Err(format!(
            "--rows {rows} makes a table of {blocks} blocks; the benchmark needs at least {least} ({TABLE_TIMES_POOL} × a pool of {POOL_BUFFERS_MIN} buffers): raise --rows to at least {}",
            rows * least / blocks.max(1) as u64 + 1
        ));
    }
    Ok(shared_buffers.min((blocks as u64 / TABLE_TIMES_POOL) as u32))
}

/// Runs the benchmark: for each data set and matching count, builds the
/// table unless it is there, runs every query, latency and scan (ours,
/// then PostgreSQL's where it runs), then prints the table of medians and
/// ratios and the verdicts. With `json`, one object per cell and per
/// verdict.
pub fn run(opts: &IndexscanOptions, json: bool, out: &mut dyn Write) -> Result<Vec<Cell>, String> {
    check_options(opts)?;
    let cold = match super::drop_page_cache() {
        Ok(()) => "page cache dropped (root) and",
        Err(_) => "page cache not dropped (not root; our reads bypass it with O_DIRECT), and",
    };
    let mut runner = CaseRunner {
        opts,
        db: opts.db.clone(),
        out,
        json,
        runs: Vec::new(),
        notes: Vec::new(),
    };
    for (i, &dataset) in opts.datasets.iter().enumerate() {
        for (j, &matching) in opts.matching.iter().enumerate() {
            let name = TableInfo::name_for(dataset, matching);
            let _ = writeln!(
                std::io::stderr(),
                "preparing table {name} ({} rows) in {} ...",
                opts.rows,
                opts.db.dir.display()
            );
            let mut progress = BuildProgress::new(&format!("building {name}"), opts.rows, true);
            let table = ensure_table(&opts.db, dataset, opts.rows, matching, &mut |done, all| {
                progress.set(done, all)
            })?;
            progress.finish();
            runner.db.shared_buffers = pool_for(opts.db.shared_buffers, table.blocks, opts.rows)?;
            if !json {
                if i == 0 && j == 0 {
                    print_header(runner.out, opts, &runner.db, &table, cold)?;
                }
                writeln!(
                    runner.out,
                    "{name}: {} blocks ({:.0} MiB, {:.1}× shared_buffers), v = {} matching {} rows",
                    table.blocks,
                    super::seqscan::blocks_mib(table.blocks),
                    table.blocks as f64 / runner.db.shared_buffers as f64,
                    table.v,
                    table.v_rows
                )
                .map_err(|e| e.to_string())?;
            }
            for &query in &opts.queries {
                for &latency_us in &opts.latencies_us {
                    runner.run_scans(&table, query, latency_us)?;
                }
            }
            if !opts.keep_tables {
                drop_table(&opts.db, &table)?;
            }
        }
    }
    let cells = cells(&runner.runs);
    let verdicts = verdicts(&cells);
    let out = runner.out;
    if json {
        for c in &cells {
            super::emit_case(out, true, c, |_| String::new())?;
        }
        for v in &verdicts {
            super::emit_case(out, true, v, |_| String::new())?;
        }
    } else {
        writeln!(out, "load average at the end {}", super::load_average())
            .map_err(|e| e.to_string())?;
        print_table(out, &cells, opts)?;
        for note in &runner.notes {
            writeln!(out, "note: {note}").map_err(|e| e.to_string())?;
        }
        print_verdicts(out, &verdicts)?;
    }
    if !runner
        .runs
        .iter()
        .any(|r| r.prefetch_streams.unwrap_or(0) > 0)
        && opts.scans.contains(&Scan::IndexPrefetch)
    {
        let _ = writeln!(
            std::io::stderr(),
            "note: no index scan started a prefetch stream (EXPLAIN printed no Prefetch line): this build's index scans may not prefetch yet (issue 12)"
        );
    }
    Ok(cells)
}

fn print_header(
    out: &mut dyn Write,
    opts: &IndexscanOptions,
    db: &IndexscanDb,
    table: &TableInfo,
    cold: &str,
) -> Result<(), String> {
    let eic = db.open(0)?.settings().effective_io_concurrency();
    let pg_eic =
        std::env::var("EFFECTIVE_IO_CONCURRENCY").unwrap_or_else(|_| "1 (its default)".to_string());
    let pool = db.shared_buffers;
    let text = format!(
        "aiostore bench indexscan: tables (a integer, b text) WITH (fillfactor = {FILLFACTOR}), {} rows, {} blocks ({:.0} MiB) each, index on a; shared_buffers={:.1} MiB ({pool} buffers: the smaller of the setting and 1/{TABLE_TIMES_POOL} of the table) io_method={} io_direct=data effective_io_concurrency={eic} (PostgreSQL 15: shared_buffers=128MB, effective_io_concurrency={pg_eic}); latencies {:?} µs (debug_io_latency_us; PostgreSQL at 0 only); {} cold runs per case ({FAST_CASE_RUNS_FACTOR} times as many of ours where every scan takes under {FAST_CASE_MS:.0} ms; a run over {REPEAT_SECONDS_MAX:.0} s is not repeated); seq scan at the largest count and 0 µs only; load average {}\n\
         every run cold: {cold} our database reopened with O_DIRECT and an empty pool (PostgreSQL restarted after the page cache is dropped); a plain EXPLAIN checks each plan's node before the timed EXPLAIN (ANALYZE, BUFFERS, IO) of the query (PostgreSQL: the plain query, psql \\timing); every scan of a case must return the same count|sum\n\
         dataset    matches query latency scan           run         ms heapread heaphit     ios streams count|sum",
        opts.rows,
        table.blocks,
        super::seqscan::blocks_mib(table.blocks),
        super::seqscan::blocks_mib(pool),
        db.method.name(),
        opts.latencies_us,
        opts.runs,
        super::load_average()
    );
    writeln!(out, "{text}").map_err(|e| e.to_string())
}

/// The table of medians: per data set, query and latency, a row per
/// matching count with each scan's milliseconds and the ratios the targets
/// name.
fn print_table(out: &mut dyn Write, cells: &[Cell], opts: &IndexscanOptions) -> Result<(), String> {
    let io = |e: std::io::Error| e.to_string();
    let fmt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    let ratio = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    writeln!(
        out,
        "medians in ms; pre/bmp = prefetch / bitmap (target ≤ 1.1 from 1 000 up), speedup = without / with prefetch (≥ 2.5 local, ≥ 8 at 500 µs; ≥ 0.95 where no gain is due), PG/pre = PostgreSQL 15's index scan / ours with prefetch (≥ 3 at 10 000 up)"
    )
    .map_err(io)?;
    for &dataset in &opts.datasets {
        for &query in &opts.queries {
            for &latency_us in &opts.latencies_us {
                writeln!(
                    out,
                    "\n{} data, {}, debug_io_latency_us={latency_us}\n{:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7}",
                    dataset.name(),
                    query.label(),
                    "matches",
                    "bitmap",
                    "index",
                    "+prefetch",
                    "seq",
                    "PG bmp",
                    "PG index",
                    "pre/bmp",
                    "speedup",
                    "PG/pre"
                )
                .map_err(io)?;
                for &matches in &opts.matching {
                    let case = CaseKey {
                        dataset,
                        matches,
                        query,
                        latency_us,
                    };
                    let ms = |scan, system| cell_ms(cells, case, scan, system);
                    writeln!(
                        out,
                        "{matches:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7}",
                        fmt(ms(Scan::Bitmap, OURS)),
                        fmt(ms(Scan::IndexNoPrefetch, OURS)),
                        fmt(ms(Scan::IndexPrefetch, OURS)),
                        fmt(ms(Scan::Seq, OURS)),
                        fmt(ms(Scan::Bitmap, THEIRS)),
                        fmt(ms(Scan::IndexNoPrefetch, THEIRS)),
                        ratio(prefetch_over_bitmap(cells, case)),
                        ratio(prefetch_speedup(cells, case)),
                        ratio(speedup_over_postgresql(cells, case)),
                    )
                    .map_err(io)?;
                }
            }
        }
    }
    Ok(())
}

/// Failing cases a verdict line names at most (JSON has them all).
const VERDICT_CASES_SHOWN: usize = 8;

fn print_verdicts(out: &mut dyn Write, verdicts: &[Verdict]) -> Result<(), String> {
    writeln!(out, "\ntargets (each a ratio of two scans in this run):")
        .map_err(|e| e.to_string())?;
    let case = |(label, ratio): &(String, f64)| format!("{label}: {ratio:.2}");
    for v in verdicts {
        let text = match v.met {
            None => "not measured (none of its cases ran)".to_string(),
            Some(true) => format!(
                "met in all {} cases (closest: {})",
                v.figures.len(),
                v.figures.first().map(case).unwrap_or_default()
            ),
            Some(false) => {
                let failing: Vec<&(String, f64)> = v
                    .figures
                    .iter()
                    .filter(|f| !v.judged_by.meets(f.1))
                    .collect();
                let shown = failing
                    .iter()
                    .take(VERDICT_CASES_SHOWN)
                    .map(|f| case(f))
                    .collect::<Vec<_>>()
                    .join(", ");
                let more = failing.len().saturating_sub(VERDICT_CASES_SHOWN);
                let more = if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                };
                format!(
                    "NOT met in {} of {} cases ({shown}{more})",
                    failing.len(),
                    v.figures.len()
                )
            }
        };
        writeln!(out, "- {}: {text}", v.target).map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `h(i)` as [`hash_sql`] computes it.
    fn hash(i: u64) -> u64 {
        let x = i * HASH_MULTIPLIER % HASH_MODULUS;
        (x * x % HASH_MODULUS * HASH_MIX + x) % HASH_MODULUS
    }

    #[test]
    fn random_rows_of_a_value_lie_as_irregularly_as_random_ones() {
        // Random positions have exponential gaps: a coefficient of
        // variation (deviation / mean) near 1. The cyclic set's are 0.
        let rows = 1_000_000u64;
        for matching in [100u64, 10_000] {
            let distinct = rows / matching;
            let mut counts = vec![0u64; distinct as usize];
            let mut positions = Vec::new();
            for i in 1..=rows {
                let a = distinct * hash(i) / HASH_MODULUS;
                counts[a as usize] += 1;
                if a == distinct / 2 {
                    positions.push(i as f64);
                }
            }
            let gaps: Vec<f64> = positions.windows(2).map(|w| w[1] - w[0]).collect();
            let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
            let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
            let cv = var.sqrt() / mean;
            assert!((0.85..1.15).contains(&cv), "m={matching}: gap cv {cv}");
            // Each value matches about m rows, the counts spread as a
            // binomial's (variance m): (d values give the sample variance
            // a relative error of about sqrt(2 / d), 14% at d = 100).
            let var_counts = counts
                .iter()
                .map(|&n| (n as f64 - matching as f64).powi(2))
                .sum::<f64>()
                / distinct as f64;
            let spread = var_counts / matching as f64;
            assert!(
                (0.7..1.3).contains(&spread),
                "m={matching}: variance {var_counts}"
            );
        }
    }

    #[test]
    fn hash_products_fit_a_bigint() {
        let x = HASH_MODULUS - 1;
        assert!((x as u128 * x as u128) < i64::MAX as u128);
        assert!(((x * x % HASH_MODULUS) as u128 * HASH_MIX as u128 + x as u128) < i64::MAX as u128);
        // The random set's a: distinct (up to the rows) × h.
        assert!((5_000_000u128 * x as u128) < i64::MAX as u128);
    }

    #[test]
    fn figures_come_from_the_scan_node_and_missing_lines_count_zero() {
        let plan: Vec<String> = [
            "Aggregate (actual rows=1 loops=1)",
            "  ->  Bitmap Heap Scan on t (actual rows=1002 loops=1)",
            "        Recheck Cond: (a = 50)",
            "        Heap Blocks: exact=909",
            "        Buffers: shared hit=2 read=909",
            "        I/O: ios=734 blocks/io=1.2 in-flight=1.3 waits=2 wait time=0.147 ms",
            "        ->  Bitmap Index Scan on t_a_idx (actual rows=1002 loops=1)",
            "              Buffers: shared read=7",
            "Planning Time: 0.219 ms",
        ]
        .map(String::from)
        .to_vec();
        let f = ScanFigures::parse(&plan, "Bitmap Heap Scan").expect("a node");
        assert_eq!(
            f,
            ScanFigures {
                heap_hits: 2,
                heap_reads: 909,
                ios: 734,
                prefetch_streams: 0
            }
        );
        // An index scan's Buffers count the index too: only its Heap line
        // counts, and a build without issue 12's lines reports zeros.
        let old: Vec<String> = [
            "  ->  Index Scan using t_a_idx on t (actual rows=1002 loops=1)",
            "        Buffers: shared hit=916",
            "        Heap: fetches=1002 visible=1002 pages=909 leaf pages=4",
        ]
        .map(String::from)
        .to_vec();
        let f = ScanFigures::parse(&old, "Index Scan using").expect("a node");
        assert_eq!(f, ScanFigures::default());
        let new: Vec<String> = [
            "  ->  Index Scan using t_a_idx on t (actual rows=1002 loops=1)",
            "        Buffers: shared hit=10 read=913",
            "        Heap: fetches=1002 visible=1002 pages=909 hit=3 read=906 leaf pages=4",
            "        Prefetch: streams=1 distance=16",
            "        I/O: ios=880 blocks/io=1.0 in-flight=12.1 waits=40 wait time=3.2 ms",
            "Planning Time: 0.1 ms",
        ]
        .map(String::from)
        .to_vec();
        let f = ScanFigures::parse(&new, "Index Scan using").expect("a node");
        assert_eq!(
            f,
            ScanFigures {
                heap_hits: 3,
                heap_reads: 906,
                ios: 880,
                prefetch_streams: 1
            }
        );
        assert!(ScanFigures::parse(&new, "Seq Scan").is_none());
    }

    #[test]
    fn verdicts_judge_only_their_cases_and_name_the_worst_first() {
        let cell = |dataset, matches, query, latency_us, scan: Scan, system, ms| Cell {
            bench: "indexscan",
            case: "cell",
            runs: 1,
            figures: IndexscanRun {
                system,
                dataset,
                query,
                matches,
                latency_us,
                scan: scan.method().name(),
                prefetch: scan.prefetch(),
                run: 1,
                ms,
                result: String::new(),
                heap_reads: None,
                heap_hits: None,
                ios: None,
                heap_stream_ios: None,
                prefetch_streams: None,
                blocks_read: None,
                scan_kind: (system == OURS || scan != Scan::IndexNoPrefetch).then_some(scan),
            },
        };
        let (r, p) = (Dataset::Random, Query::Point);
        let cells = vec![
            cell(r, 10_000, p, 0, Scan::IndexNoPrefetch, OURS, 300.0),
            cell(r, 10_000, p, 0, Scan::IndexPrefetch, OURS, 100.0),
            cell(r, 100_000, p, 0, Scan::IndexNoPrefetch, OURS, 2000.0),
            cell(r, 100_000, p, 0, Scan::IndexPrefetch, OURS, 1000.0),
            cell(r, 1, p, 0, Scan::IndexNoPrefetch, OURS, 1.0),
            cell(r, 1, p, 0, Scan::IndexPrefetch, OURS, 1.02),
        ];
        let v = verdicts(&cells);
        let local = v
            .iter()
            .find(|v| v.target.contains("2.5×"))
            .expect("target");
        assert_eq!(local.met, Some(false));
        assert_eq!(local.figures.len(), 2);
        assert!(
            local.figures[0].0.contains("m=100000"),
            "{:?}",
            local.figures
        );
        let small = v
            .iter()
            .find(|v| v.target.contains("5% slower"))
            .expect("target");
        assert_eq!(small.met, Some(true));
        assert_eq!(small.figures.len(), 1);
        let slow = v.iter().find(|v| v.target.contains("8×")).expect("target");
        assert_eq!(slow.met, None, "no case at 500 µs ran");
    }
}
