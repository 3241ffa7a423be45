//! `aiostore demo`: the newcomer's first command. Builds a small database
//! in a directory of its own, runs the experiments the engine can show
//! today, each through the code the full benchmark uses, and prints one
//! table, one verdict per experiment and a chart.
//!
//! The experiments, each case on a database opened anew with direct I/O so
//! that neither the pool nor the page cache holds the table (every run is
//! cold, and the scans and prewarms check it: they must read every block of
//! the table from disk), each case run `RUNS_PER_CASE` times keeping the
//! fastest:
//!
//! - combining: `SELECT count(*)` per I/O method with `io_combine_limit` 1
//!   (8 KiB reads) and 16 (128 KiB reads), as `bench seqscan` does
//!   ([`super::seqscan::count_case`]);
//! - prewarm: the table read into the pool through a read stream per
//!   method, as `aiostore prewarm` does ([`crate::tools::prewarm`]);
//! - repeated blocks: a stream asking for each block four times in a
//!   sliding window against the same blocks once each, as
//!   `bench repeated-blocks` does ([`super::streams::repeated_block_lists`]);
//! - look-ahead: random blocks with `effective_io_concurrency` 0 and 16 on
//!   simulated slow storage (`debug_io_latency_us`), per method;
//! - index scans: `WHERE a = v` matching 1, 100 and 10 000 rows spread at
//!   random over a table, read by a bitmap scan, an index scan without and
//!   with prefetching and a sequential scan, and `ORDER BY a LIMIT 10000`
//!   the same four ways, as `bench indexscan` runs them
//!   ([`super::indexscan::run_case`], its random data set).
//!
//! Each table is `shared_buffers` × [`TABLE_TIMES_POOL`] or more, so that
//! the scans cannot be served from the pool. Each row's ratio is to its own
//! baseline, named in the row (a method's 8 KiB reads, its eic 0, the
//! fastest prewarm, the index scan without prefetching), the same
//! comparison its experiment's verdict makes. The chart draws those
//! ratios, and the index experiments' times on a log scale.
//!
//! The database stays for the next run with `--keep`: a later run finds the
//! tables there and skips the build.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::config::IoMethod;
use crate::storage::{Fork, BLOCK_SIZE};
use crate::stream::StreamLimits;
use crate::tools::StreamReport;

use super::indexscan::{self, Dataset, IndexscanDb, Query, Scan, TableInfo};
use super::seqscan::{self, SeqscanOptions};
use super::streams;

/// The table is this many times `shared_buffers`, as `bench seqscan`
/// requires, so that every scan reads from storage.
pub const TABLE_TIMES_POOL: u64 = 8;
/// Look-ahead of the look-ahead experiment's second variant (the default
/// `effective_io_concurrency`).
const LOOK_AHEAD_IOS: usize = 16;
/// Runs of each case, the fastest kept: two take the noise of a shared
/// machine out of the verdicts and keep the standard demo near 20 s.
const RUNS_PER_CASE: usize = 2;
/// Gains below this (10%) are called "within noise" in the verdicts.
const NOISE_RATIO: f64 = 1.1;
/// Sessions the demo's database allows: it opens one at a time, and a
/// small number leaves each session a large share of the pool to pin.
const DEMO_MAX_SESSIONS: usize = 4;
/// The index experiments' scans, in the table's order.
const INDEX_SCANS: [Scan; 4] = [
    Scan::Bitmap,
    Scan::IndexNoPrefetch,
    Scan::IndexPrefetch,
    Scan::Seq,
];

/// What the demo runs; [`DemoOptions::standard`] and [`DemoOptions::quick`]
/// are the two sizes.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    pub dir: PathBuf,
    /// Pool size in blocks.
    pub shared_buffers: u32,
    /// Last start block of the repeated-blocks stream.
    pub repeated_last_start: u32,
    /// Random blocks read in the look-ahead experiment.
    pub random_blocks: u32,
    /// Simulated storage latency of the look-ahead experiment.
    pub latency_us: u64,
    /// Rows `a = v` matches in the index experiments; the largest count is
    /// also the `ORDER BY … LIMIT`'s.
    pub index_matching: Vec<u64>,
    /// The user's start-up settings (`name=value`, e.g. io_workers), after
    /// the demo's own so that they win.
    pub extra_settings: Vec<String>,
}

impl DemoOptions {
    /// The demo as the README runs it: a 16 MiB pool and a 128 MiB table,
    /// about 20 s in all on a 2-core machine (measured: 19 s).
    pub fn standard(dir: PathBuf) -> DemoOptions {
        DemoOptions {
            dir,
            shared_buffers: (16 << 20) / BLOCK_SIZE as u32,
            repeated_last_start: 10_000,
            random_blocks: 1000,
            latency_us: 1000,
            // The reference's 1, 100 and 10 000.
            index_matching: vec![1, 100, 10_000],
            extra_settings: Vec::new(),
        }
    }

    /// A tiny demo for tests: a 1 MiB pool and an 8 MiB table (index
    /// tables of 26 496 rows, where 1 000 matching rows are many).
    pub fn quick(dir: PathBuf) -> DemoOptions {
        DemoOptions {
            shared_buffers: (1 << 20) / BLOCK_SIZE as u32,
            repeated_last_start: 500,
            random_blocks: 50,
            index_matching: vec![1, 100, 1_000],
            ..DemoOptions::standard(dir)
        }
    }

    /// The pool's size in MiB.
    pub fn pool_mib(&self) -> u64 {
        super::pool_mib(self.shared_buffers)
    }

    /// The table's size in MiB ([`TABLE_TIMES_POOL`] × the pool).
    pub fn table_mib(&self) -> u64 {
        TABLE_TIMES_POOL * self.pool_mib()
    }

    /// Rows of each index experiment's table: enough for
    /// [`TABLE_TIMES_POOL`] + 1 times the pool's blocks, so that the table
    /// is at least [`TABLE_TIMES_POOL`] times the pool however its pages
    /// fill.
    pub fn index_rows(&self) -> u64 {
        let blocks = (TABLE_TIMES_POOL + 1) * self.shared_buffers as u64;
        indexscan::rows_for_blocks(blocks)
    }

    /// How the index experiments open the database.
    fn index_db(&self, method: IoMethod) -> IndexscanDb {
        IndexscanDb {
            dir: self.dir.clone(),
            method,
            shared_buffers: self.shared_buffers,
            extra_settings: self.extra_settings.clone(),
        }
    }

    fn seqscan(&self, methods: &[IoMethod]) -> SeqscanOptions {
        SeqscanOptions {
            dir: self.dir.clone(),
            methods: methods.to_vec(),
            size_mib: self.table_mib(),
            shared_buffers: self.shared_buffers,
            fio: false,
            extra_settings: std::iter::once(format!("max_sessions={DEMO_MAX_SESSIONS}"))
                .chain(self.extra_settings.iter().cloned())
                .collect(),
        }
    }
}

/// One line of the demo's table.
#[derive(Debug, Clone)]
pub struct DemoRow {
    pub experiment: String,
    pub variant: String,
    /// The fastest of `RUNS_PER_CASE` runs.
    pub seconds: f64,
    /// Blocks read from disk, where the case checks that it was cold.
    pub reads: Option<u64>,
    /// The variant `ratio` compares with.
    pub baseline: String,
    /// seconds divided by the baseline's.
    pub ratio: f64,
    /// `reads` was checked to be the whole table (count(*), prewarm).
    pub whole_table: bool,
}

/// One index experiment's scan, for the chart.
#[derive(Debug, Clone)]
pub struct IndexTiming {
    /// "10000 rows", "ORDER BY … LIMIT 10000".
    pub group: String,
    pub scan: Scan,
    pub ms: f64,
}

/// What the demo measured.
#[derive(Debug, Clone, Default)]
pub struct DemoReport {
    /// What the experiments ran on, a line each.
    pub settings: Vec<String>,
    pub rows: Vec<DemoRow>,
    pub verdicts: Vec<String>,
    /// The table's size in blocks, which every cold scan and prewarm read.
    pub table_blocks: u32,
    pub index: Vec<IndexTiming>,
}

/// The demo's tables.
struct Loaded {
    /// The sequential scans' table: rows, relation and size in blocks.
    rows: u64,
    rel: u32,
    nblocks: u32,
    /// The index experiments' tables, by matching count.
    index_tables: Vec<TableInfo>,
}

/// Builds the demo's tables unless an earlier `--keep` run left them (a
/// progress bar each, on a terminal).
fn load(
    opts: &DemoOptions,
    seq: &SeqscanOptions,
    method: IoMethod,
    err: &mut dyn Write,
) -> Result<Loaded, String> {
    let seq_rows = seqscan::rows_for_mib(seq.size_mib);
    let _ = writeln!(
        err,
        "loading table {} ({seq_rows} rows, {} MiB = {TABLE_TIMES_POOL} × shared_buffers) ...",
        seqscan::TABLE,
        seq.size_mib
    );
    let mut bar = super::BuildProgress::new("loading", seq_rows, false);
    let (rows, rel, nblocks) = seqscan::prepare_table(seq, &mut |done, all| bar.set(done, all))?;
    bar.finish();
    let index_rows = opts.index_rows();
    let db = opts.index_db(method);
    let mut tables = Vec::new();
    for &matching in &opts.index_matching {
        let name = TableInfo::name_for(Dataset::Random, matching);
        let _ = writeln!(
            err,
            "loading table {name} ({index_rows} rows, each value matching about {matching}) ..."
        );
        let mut bar = super::BuildProgress::new("loading", index_rows, false);
        let table = indexscan::ensure_table(
            &db,
            Dataset::Random,
            index_rows,
            matching,
            &mut |done, all| bar.set(done, all),
        )?;
        bar.finish();
        if (table.blocks as u64) < TABLE_TIMES_POOL * opts.shared_buffers as u64 {
            return Err(format!(
                "the demo's table {name} has {} blocks, less than {TABLE_TIMES_POOL} × shared_buffers ({}): its scans could be served from the pool",
                table.blocks, opts.shared_buffers
            ));
        }
        tables.push(table);
    }
    Ok(Loaded {
        rows,
        rel,
        nblocks,
        index_tables: tables,
    })
}

/// Runs `f` on a session of a database opened cold with `method`
/// ([`seqscan::open_cold`]) and the table's relation.
fn with_cold_session(
    seq: &SeqscanOptions,
    method: IoMethod,
    rel: u32,
    f: impl FnOnce(&mut crate::buffer::BufferSession, u32) -> Result<StreamReport, String>,
) -> Result<StreamReport, String> {
    let db = seqscan::open_cold(seq, method, 16)?;
    let mut s = db.session().map_err(|e| e.to_string())?;
    f(&mut s.buf, rel)
}

/// The fastest of `RUNS_PER_CASE` runs of `case`, which returns its
/// seconds and blocks read.
fn best_of(mut case: impl FnMut() -> Result<(f64, u64), String>) -> Result<(f64, u64), String> {
    let mut best = case()?;
    for _ in 1..RUNS_PER_CASE {
        let run = case()?;
        if run.0 < best.0 {
            best = run;
        }
    }
    Ok(best)
}

/// Fails unless a case that should be cold read all `nblocks` blocks of
/// the table from disk: a shorter count means the pool or a cache served
/// some, and the "every run is cold" claim would be false.
fn check_cold(what: &str, reads: u64, nblocks: u32) -> Result<u64, String> {
    if reads != nblocks as u64 {
        return Err(format!(
            "{what} was not cold: it read {reads} blocks from disk, the table has {nblocks}; the demo's figures would not mean what they say"
        ));
    }
    Ok(reads)
}

/// Adds rows, each compared with `baseline` (variant, seconds).
fn push_rows(
    report: &mut DemoReport,
    experiment: &str,
    baseline: &(String, f64),
    cases: Vec<(String, f64, Option<u64>)>,
) {
    // The count(*) and prewarm rows read the whole table: checked there.
    let whole_table = matches!(experiment, "combining" | "prewarm");
    for (variant, seconds, reads) in cases {
        report.rows.push(DemoRow {
            experiment: experiment.to_string(),
            variant,
            seconds,
            reads,
            baseline: baseline.0.clone(),
            ratio: seconds / baseline.1,
            whole_table: whole_table && reads.is_some(),
        });
    }
}

/// "look-ahead: io_uring 12.3× faster with … (worker 11.4×, sync 1.0×
/// within noise; …)": each method against itself, the best first.
fn speedup_verdict(
    experiment: &str,
    gains: &[(IoMethod, f64)],
    change: &str,
    note: &str,
) -> Option<String> {
    let mut sorted = gains.to_vec();
    sorted.sort_by(|a, b| b.1.total_cmp(&a.1));
    let gain = |g: f64| {
        if g < NOISE_RATIO && g > 1.0 / NOISE_RATIO {
            format!("{g:.1}× (within noise)")
        } else {
            format!("{g:.1}×")
        }
    };
    let (best, best_gain) = *sorted.first()?;
    let others = sorted
        .iter()
        .skip(1)
        .map(|&(m, g)| format!("{m} {}", gain(g)))
        .collect::<Vec<_>>()
        .join(", ");
    Some(format!(
        "{experiment}: {best} {} faster with {change} ({others}; {note})",
        gain(best_gain)
    ))
}

/// Runs every experiment and returns the measurements; progress goes to
/// `err`.
pub fn run(opts: &DemoOptions, err: &mut dyn Write) -> Result<DemoReport, String> {
    let methods = super::usable_methods(
        vec![IoMethod::Sync, IoMethod::Worker, IoMethod::IoUring],
        err,
    )?;
    let seq = opts.seqscan(&methods);
    // The experiments that show one method use the last usable one
    // (io_uring where the kernel allows it, else worker).
    let method = *methods.last().ok_or("no I/O method is available")?;
    let started = Instant::now();
    let Loaded {
        rows,
        rel,
        nblocks,
        index_tables,
    } = load(opts, &seq, method, err)?;
    let _ = writeln!(
        err,
        "loaded in {:.1} s; running the experiments (every run cold, the fastest of {RUNS_PER_CASE}) ...",
        started.elapsed().as_secs_f64()
    );
    let table_mib = seqscan::blocks_mib(nblocks);
    let mut report = DemoReport {
        table_blocks: nblocks,
        ..Default::default()
    };

    // Combining: cold count(*) per method, 8 KiB reads against 128 KiB.
    let mut gains = Vec::new();
    for &method in &methods {
        let case = |combine: usize| {
            best_of(|| {
                let c = seqscan::count_case(&seq, method, combine, rows, nblocks)?;
                let what = format!("count(*) with {method}, io_combine_limit {combine}");
                Ok((c.seconds, check_cold(&what, c.reads, nblocks)?))
            })
        };
        let (single, single_reads) = case(1)?;
        let (combined, combined_reads) = case(16)?;
        let baseline = (format!("{method}, 8 KiB reads"), single);
        push_rows(
            &mut report,
            "combining",
            &baseline,
            vec![
                (baseline.0.clone(), single, Some(single_reads)),
                (
                    format!("{method}, 128 KiB reads"),
                    combined,
                    Some(combined_reads),
                ),
            ],
        );
        gains.push((method, single / combined));
    }
    report.verdicts.extend(speedup_verdict(
        "combining",
        &gains,
        "128 KiB reads than 8 KiB reads",
        "io_combine_limit 16 vs 1",
    ));

    // Prewarm per method, through a read stream, against the fastest.
    let mut cases = Vec::new();
    for &method in &methods {
        let (seconds, reads) = best_of(|| {
            let r = with_cold_session(&seq, method, rel, |buf, rel| {
                let limits = StreamLimits::default();
                crate::tools::prewarm(buf, rel, Fork::Main, limits).map_err(|e| e.to_string())
            })?;
            let what = format!("prewarm with {method}");
            Ok((r.seconds, check_cold(&what, r.reads, nblocks)?))
        })?;
        cases.push((method.to_string(), seconds, Some(reads)));
    }
    let fastest = cases
        .iter()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(m, s, _)| (m.clone(), *s))
        .ok_or("no I/O method is available")?;
    let slower = cases
        .iter()
        .filter(|(m, _, _)| *m != fastest.0)
        .map(|(m, s, _)| {
            let ratio = s / fastest.1;
            let noise = if ratio < NOISE_RATIO {
                ", within noise"
            } else {
                ""
            };
            format!("{m} {ratio:.2}× its time{noise}")
        })
        .collect::<Vec<_>>()
        .join(", ");
    report.verdicts.push(format!(
        "prewarm: {} fastest, {:.0} MiB/s reading {table_mib:.0} MiB through a read stream ({slower})",
        fastest.0,
        table_mib / fastest.1
    ));
    push_rows(&mut report, "prewarm", &fastest, cases);

    // Repeated blocks in one stream, with one method: enough to show the
    // reads the stream saves.
    let (repeated, distinct) = streams::repeated_block_lists(opts.repeated_last_start);
    let stream = |blocks: &[u32]| {
        best_of(|| {
            let r = with_cold_session(&seq, method, rel, |buf, rel| {
                crate::tools::read_stream_for_blocks(
                    buf,
                    rel,
                    Fork::Main,
                    blocks,
                    Default::default(),
                )
                .map_err(|e| e.to_string())
            })?;
            Ok((r.seconds, r.reads))
        })
    };
    let (d_seconds, d_reads) = stream(&distinct)?;
    let (r_seconds, r_reads) = stream(&repeated)?;
    let baseline = (format!("{method}, {} distinct", distinct.len()), d_seconds);
    push_rows(
        &mut report,
        "repeated blocks",
        &baseline,
        vec![
            (baseline.0.clone(), d_seconds, None),
            (
                format!("{method}, {} requests", repeated.len()),
                r_seconds,
                None,
            ),
        ],
    );
    report.verdicts.push(format!(
        "repeated blocks: asking for each block {} times took {:.2}× the time of asking once; {r_reads} reads for {} requests (distinct: {d_reads} reads)",
        streams::REPEATS,
        r_seconds / d_seconds,
        repeated.len(),
    ));

    // Look-ahead on slow storage: random blocks, eic 0 against 16.
    let blocks = streams::random_distinct_blocks(opts.random_blocks.min(nblocks), nblocks);
    let slow = SeqscanOptions {
        extra_settings: seq
            .extra_settings
            .iter()
            .cloned()
            .chain([format!("debug_io_latency_us={}", opts.latency_us)])
            .collect(),
        ..seq.clone()
    };
    let mut gains = Vec::new();
    for &method in &methods {
        let mut seconds = [0.0; 2];
        for (i, eic) in [0, LOOK_AHEAD_IOS].into_iter().enumerate() {
            let limits = StreamLimits {
                effective_io_concurrency: eic,
                maintenance_io_concurrency: eic,
            };
            seconds[i] = best_of(|| {
                let r = with_cold_session(&slow, method, rel, |buf, rel| {
                    crate::tools::read_stream_for_blocks(buf, rel, Fork::Main, &blocks, limits)
                        .map_err(|e| e.to_string())
                })?;
                Ok((r.seconds, r.reads))
            })?
            .0;
        }
        let baseline = (format!("{method}, eic 0"), seconds[0]);
        push_rows(
            &mut report,
            "look-ahead",
            &baseline,
            vec![
                (baseline.0.clone(), seconds[0], None),
                (format!("{method}, eic {LOOK_AHEAD_IOS}"), seconds[1], None),
            ],
        );
        gains.push((method, seconds[0] / seconds[1]));
    }
    report.verdicts.extend(speedup_verdict(
        "look-ahead",
        &gains,
        &format!(
            "effective_io_concurrency {LOOK_AHEAD_IOS} than 0 over {} random blocks at {} ms per I/O",
            blocks.len(),
            opts.latency_us as f64 / 1000.0
        ),
        "sync cannot overlap direct I/O",
    ));

    index_experiments(opts, method, &index_tables, &mut report)?;
    Ok(report)
}

/// The index experiments: each matching count's `WHERE a = v` and the
/// largest count's `ORDER BY a LIMIT m`, read the four ways, each against
/// the index scan without prefetching; all four must give the same answer.
fn index_experiments(
    opts: &DemoOptions,
    method: IoMethod,
    tables: &[TableInfo],
    report: &mut DemoReport,
) -> Result<(), String> {
    let db = opts.index_db(method);
    let first = tables.first().ok_or("no index experiment tables")?;
    report.settings.push(format!(
        "index experiments: random data as bench indexscan builds it, tables (a integer, b text) WITH (fillfactor = {}) of {} rows, {} blocks ({:.0} MiB, {:.1}× shared_buffers) each, index on a; v matching {} rows; {method}, effective_io_concurrency={}, no added latency",
        indexscan::FILLFACTOR,
        first.rows,
        first.blocks,
        seqscan::blocks_mib(first.blocks),
        first.blocks as f64 / opts.shared_buffers as f64,
        tables
            .iter()
            .map(|t| t.v_rows.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        db.open(0)?.settings().effective_io_concurrency(),
    ));
    let largest = tables.last().ok_or("no index experiment tables")?;
    let cases = tables
        .iter()
        .map(|t| (t, Query::Point))
        .chain([(largest, Query::Order)]);
    let mut gains = Vec::new();
    let mut streams = 0;
    for (table, query) in cases {
        let rows = match table.v_rows {
            1 => "1 row".to_string(),
            n => format!("{n} rows"),
        };
        let (experiment, group) = match query {
            Query::Point => (format!("index {rows}"), rows),
            Query::Order => (
                format!("ORDER BY LIMIT {}", table.matching),
                format!("ORDER BY a LIMIT {}", table.matching),
            ),
        };
        let mut timings = Vec::new();
        let mut answer: Option<String> = None;
        for scan in INDEX_SCANS {
            let mut best: Option<indexscan::CaseRun> = None;
            for _ in 0..RUNS_PER_CASE {
                let r = indexscan::run_case(&db, table, query, scan, 0)?;
                if best.as_ref().is_none_or(|b| r.ms < b.ms) {
                    best = Some(r);
                }
            }
            let r = best.ok_or("no run")?;
            match &answer {
                Some(first) if *first != r.result => {
                    return Err(format!(
                        "{experiment}: the {} scan returned {}, the bitmap scan {first}; the scans must agree",
                        scan.name(),
                        r.result
                    ));
                }
                _ => answer = Some(r.result.clone()),
            }
            streams += r.figures.prefetch_streams;
            report.index.push(IndexTiming {
                group: group.clone(),
                scan,
                ms: r.ms,
            });
            timings.push((scan, r.ms, r.blocks_read));
        }
        let ms_of = |scan| {
            timings
                .iter()
                .find(|t| t.0 == scan)
                .map_or(f64::NAN, |t| t.1)
        };
        let baseline = (
            index_variant(Scan::IndexNoPrefetch).to_string(),
            ms_of(Scan::IndexNoPrefetch) / 1e3,
        );
        push_rows(
            report,
            &experiment,
            &baseline,
            timings
                .iter()
                .map(|&(scan, ms, reads)| (index_variant(scan).to_string(), ms / 1e3, Some(reads)))
                .collect(),
        );
        gains.push(IndexGain {
            rows: match query {
                Query::Point => table.v_rows,
                Query::Order => table.matching,
            },
            query,
            no_prefetch_ms: ms_of(Scan::IndexNoPrefetch),
            prefetch_ms: ms_of(Scan::IndexPrefetch),
            bitmap_ms: ms_of(Scan::Bitmap),
            seq_ms: ms_of(Scan::Seq),
        });
    }
    report.verdicts.extend(index_verdicts(&gains, streams));
    Ok(())
}

/// A scan's variant name in the table.
fn index_variant(scan: Scan) -> &'static str {
    match scan {
        Scan::Bitmap => "bitmap scan",
        Scan::IndexNoPrefetch => "index scan, no prefetch",
        Scan::IndexPrefetch => "index scan, prefetch",
        Scan::Seq => "seq scan",
    }
}

/// One index experiment's fastest times, for its verdict.
struct IndexGain {
    /// Rows matched, or the limit.
    rows: u64,
    query: Query,
    no_prefetch_ms: f64,
    prefetch_ms: f64,
    bitmap_ms: f64,
    seq_ms: f64,
}

impl IndexGain {
    /// "6.0× faster (684 against 114 ms)", "1.7× slower (…)", with
    /// "within noise" where the two are within [`NOISE_RATIO`].
    fn prefetch_effect(&self) -> String {
        let speedup = self.no_prefetch_ms / self.prefetch_ms;
        let (factor, word) = if speedup >= 1.0 {
            (speedup, "faster")
        } else {
            (1.0 / speedup, "slower")
        };
        let noise = if factor < NOISE_RATIO {
            ", within noise"
        } else {
            ""
        };
        format!(
            "{factor:.1}× {word} ({:.0} against {:.0} ms{noise})",
            self.prefetch_ms, self.no_prefetch_ms
        )
    }
}

/// The index experiments' verdicts; `streams` counts the prefetch streams
/// the prefetching scans started.
fn index_verdicts(gains: &[IndexGain], streams: u64) -> Vec<String> {
    if streams == 0 {
        return vec![
            "index scans: no index scan started a prefetch stream (EXPLAIN printed no Prefetch line): this build's index scans do not read ahead".into(),
        ];
    }
    let points: Vec<&IndexGain> = gains.iter().filter(|g| g.query == Query::Point).collect();
    let mut verdicts = Vec::new();
    if let Some(most) = points.last() {
        let others = points
            .iter()
            .rev()
            .skip(1)
            .map(|g| format!("at {}: {}", g.rows, g.prefetch_effect()))
            .collect::<Vec<_>>()
            .join("; ");
        verdicts.push(format!(
            "index scans: with prefetching the cold index scan was {} at {} matching rows, where the bitmap scan took {:.2}× its time and the sequential scan {:.2}× ({others})",
            most.prefetch_effect(),
            most.rows,
            most.bitmap_ms / most.prefetch_ms,
            most.seq_ms / most.prefetch_ms
        ));
    }
    if let Some(order) = gains.iter().find(|g| g.query == Query::Order) {
        verdicts.push(format!(
            "ORDER BY … LIMIT {}: the index scan was {} with prefetching; the bitmap scan, which reads every row from v up and sorts them, took {:.1}× its time, the sequential scan {:.1}×",
            order.rows,
            order.prefetch_effect(),
            order.bitmap_ms / order.prefetch_ms,
            order.seq_ms / order.prefetch_ms
        ));
    }
    verdicts
}

/// Writes the demo's settings, table and verdicts.
pub fn print_report(out: &mut dyn Write, report: &DemoReport) -> std::io::Result<()> {
    for line in &report.settings {
        writeln!(out, "{line}")?;
    }
    let width = report
        .rows
        .iter()
        .map(|r| r.variant.len())
        .max()
        .unwrap_or(0)
        .max("variant".len());
    let experiment_width = report
        .rows
        .iter()
        .map(|r| r.experiment.len())
        .max()
        .unwrap_or(0)
        .max(16);
    writeln!(
        out,
        "{:<experiment_width$} {:<width$} {:>10} {:>8} {:>8}  baseline",
        "experiment", "variant", "time", "reads", "ratio"
    )?;
    writeln!(
        out,
        "(time: the fastest of {RUNS_PER_CASE} runs; reads: blocks read from disk; ratio: time / the baseline's, the comparison the verdict makes; below 1 is faster)"
    )?;
    for r in &report.rows {
        writeln!(
            out,
            "{:<experiment_width$} {:<width$} {:>7.0} ms {:>8} {:>7.2}×  {}",
            r.experiment,
            r.variant,
            r.seconds * 1e3,
            r.reads.map_or("-".to_string(), |n| n.to_string()),
            r.ratio,
            r.baseline
        )?;
    }
    let checked = report.rows.iter().filter(|r| r.whole_table).count();
    writeln!(
        out,
        "cold: {n} of {n} blocks read from disk in each of the {checked} count(*) and prewarm rows",
        n = report.table_blocks
    )?;
    writeln!(out)?;
    for v in &report.verdicts {
        writeln!(out, "{v}")?;
    }
    Ok(())
}

/// Chart geometry, in pixels.
const CHART_WIDTH_PX: u32 = 900;
const CHART_ROW_PX: u32 = 26;
const CHART_LABEL_PX: i32 = 330;
const CHART_MARGIN_PX: i32 = 20;
/// Room right of the longest bar for its "12.27× (100 ms)" label.
const CHART_VALUE_LABEL_PX: i32 = 130;
/// The index experiments' panel.
const CHART_INDEX_PX: u32 = 420;
/// Width of a group of bars (one experiment) in the index panel, in
/// groups: the rest is the gap between groups.
const CHART_GROUP_FILL: f64 = 0.8;

/// Draws each row's speed relative to its baseline (as in the table) as a
/// horizontal bar (longer is faster), and below it the index experiments'
/// times on a log scale, a group of bars per experiment, into an SVG file.
pub fn write_chart(path: &Path, report: &DemoReport) -> Result<(), String> {
    use plotters::prelude::*;
    let speeds_px = (report.rows.len() as u32 + 3) * CHART_ROW_PX;
    let index_px = if report.index.is_empty() {
        0
    } else {
        CHART_INDEX_PX
    };
    let root = SVGBackend::new(path, (CHART_WIDTH_PX, speeds_px + index_px)).into_drawing_area();
    let fail =
        |e: &dyn std::fmt::Display| format!("could not draw the chart {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let (speeds, index) = root.split_vertically(speeds_px);
    let text = ("sans-serif", 14).into_font();
    speeds
        .draw(&Text::new(
            "aiostore demo: speed relative to each row's baseline, as in the table (longer is faster)",
            (CHART_MARGIN_PX, 8),
            text.clone(),
        ))
        .map_err(|e| fail(&e))?;
    let max_speed = report
        .rows
        .iter()
        .map(|r| 1.0 / r.ratio)
        .fold(1.0f64, f64::max);
    let bar_room =
        CHART_WIDTH_PX as i32 - CHART_LABEL_PX - 2 * CHART_MARGIN_PX - CHART_VALUE_LABEL_PX;
    let palette = [&BLUE, &RED, &GREEN, &MAGENTA];
    let mut experiment_index = 0;
    let mut last_experiment = "";
    for (i, r) in report.rows.iter().enumerate() {
        if r.experiment != last_experiment && !last_experiment.is_empty() {
            experiment_index += 1;
        }
        last_experiment = &r.experiment;
        let y = ((i as u32 + 1) * CHART_ROW_PX + 10) as i32;
        let speed = 1.0 / r.ratio;
        let x0 = CHART_LABEL_PX;
        let x1 = x0 + ((speed / max_speed) * bar_room as f64).max(1.0) as i32;
        let color = palette[experiment_index % palette.len()];
        speeds
            .draw(&Text::new(
                format!("{}: {}", r.experiment, r.variant),
                (CHART_MARGIN_PX, y + 4),
                text.clone(),
            ))
            .map_err(|e| fail(&e))?;
        speeds
            .draw(&Rectangle::new(
                [(x0, y), (x1, y + CHART_ROW_PX as i32 - 8)],
                color.mix(0.7).filled(),
            ))
            .map_err(|e| fail(&e))?;
        speeds
            .draw(&Text::new(
                format!("{speed:.2}× ({:.0} ms)", r.seconds * 1e3),
                (x1 + 6, y + 4),
                text.clone(),
            ))
            .map_err(|e| fail(&e))?;
    }
    if !report.index.is_empty() {
        draw_index_panel(&index, report).map_err(|e| fail(&e))?;
    }
    root.present().map_err(|e| fail(&e))
}

/// The index experiments' panel: for each experiment (1, 100, 10 000
/// rows, ORDER BY … LIMIT) a bar per scan, its cold time in ms on a log
/// scale, labelled with the time.
fn draw_index_panel<DB: plotters::prelude::DrawingBackend>(
    area: &plotters::prelude::DrawingArea<DB, plotters::coord::Shift>,
    report: &DemoReport,
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    use plotters::prelude::*;
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    let mut groups: Vec<&str> = Vec::new();
    for t in &report.index {
        if !groups.contains(&t.group.as_str()) {
            groups.push(&t.group);
        }
    }
    let (low, high) = report.index.iter().fold((f64::MAX, 0.0f64), |(lo, hi), t| {
        (lo.min(t.ms), hi.max(t.ms))
    });
    // A decade of room below the fastest bar and above the slowest (for
    // the labels and the legend).
    let (y_low, y_high) = (low.max(0.01) / 4.0, high * 20.0);
    let mut chart = ChartBuilder::on(area)
        .caption(
            "cold index experiments: time of each scan (ms, log scale; shorter is faster)",
            ("sans-serif", 16),
        )
        .margin(CHART_MARGIN_PX as u32)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(
            -0.5f64..groups.len() as f64 - 0.5,
            (y_low..y_high).log_scale(),
        )?;
    let names = groups.clone();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let g = x.round();
            if (x - g).abs() < 1e-6 && g >= 0.0 {
                names
                    .get(g as usize)
                    .map_or(String::new(), |n| n.to_string())
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| format!("{y}"))
        .y_desc("ms")
        .draw()?;
    // Not the speed panel's colours, which stand for experiments.
    let colors = [
        RGBColor(31, 119, 180),
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
        RGBColor(127, 127, 127),
    ];
    let label_font = ("sans-serif", 12)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Bottom));
    for (i, scan) in INDEX_SCANS.into_iter().enumerate() {
        let width = CHART_GROUP_FILL / INDEX_SCANS.len() as f64;
        let bars: Vec<(f64, f64)> = report
            .index
            .iter()
            .filter(|t| t.scan == scan)
            .filter_map(|t| {
                let g = groups.iter().position(|n| *n == t.group)? as f64;
                Some((g - CHART_GROUP_FILL / 2.0 + i as f64 * width, t.ms))
            })
            .collect();
        let color = colors[i % colors.len()];
        chart
            .draw_series(bars.iter().map(|&(x, ms)| {
                Rectangle::new([(x, y_low), (x + width * 0.9, ms)], color.mix(0.7).filled())
            }))?
            .label(index_variant(scan))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        chart.draw_series(bars.iter().map(|&(x, ms)| {
            let label = if ms < 10.0 {
                format!("{ms:.1}")
            } else {
                format!("{ms:.0}")
            };
            Text::new(label, (x + width * 0.45, ms * 1.1), label_font.clone())
        }))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
