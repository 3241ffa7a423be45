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
//!   simulated slow storage (`debug_io_latency_us`), per method.
//!
//! The table is `shared_buffers` × [`TABLE_TIMES_POOL`] so that the scans
//! cannot be served from the pool. Each row's ratio is to its own baseline,
//! named in the row (a method's 8 KiB reads, its eic 0, the fastest
//! prewarm), the same comparison its experiment's verdict makes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::config::IoMethod;
use crate::storage::{Fork, BLOCK_SIZE};
use crate::stream::StreamLimits;
use crate::tools::StreamReport;

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
    /// The user's start-up settings (`name=value`, e.g. io_workers), after
    /// the demo's own so that they win.
    pub extra_settings: Vec<String>,
    /// Show a progress bar for the load (on a terminal).
    pub progress_bar: bool,
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
            extra_settings: Vec::new(),
            progress_bar: true,
        }
    }

    /// A tiny demo for tests: a 1 MiB pool and an 8 MiB table.
    pub fn quick(dir: PathBuf) -> DemoOptions {
        DemoOptions {
            shared_buffers: (1 << 20) / BLOCK_SIZE as u32,
            repeated_last_start: 500,
            random_blocks: 50,
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
    pub experiment: &'static str,
    pub variant: String,
    /// The fastest of `RUNS_PER_CASE` runs.
    pub seconds: f64,
    /// Blocks read from disk, where the case checks that it was cold.
    pub reads: Option<u64>,
    /// The variant `ratio` compares with.
    pub baseline: String,
    /// seconds divided by the baseline's.
    pub ratio: f64,
}

/// What the demo measured.
#[derive(Debug, Clone, Default)]
pub struct DemoReport {
    pub rows: Vec<DemoRow>,
    pub verdicts: Vec<String>,
    /// The table's size in blocks, which every cold scan and prewarm read.
    pub table_blocks: u32,
}

/// Builds the demo table (with a progress bar on a terminal); returns its
/// rows, relation and size in blocks.
fn load(
    opts: &DemoOptions,
    seq: &SeqscanOptions,
    err: &mut dyn Write,
) -> Result<(u64, u32, u32), String> {
    let rows = seqscan::rows_for_mib(seq.size_mib);
    let bar =
        (opts.progress_bar && std::io::IsTerminal::is_terminal(&std::io::stderr())).then(|| {
            let bar = indicatif::ProgressBar::with_draw_target(
                Some(rows),
                indicatif::ProgressDrawTarget::stderr(),
            );
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "loading {bar:30} {human_pos}/{human_len} rows ({elapsed})",
            ) {
                bar.set_style(style);
            }
            bar
        });
    let _ = writeln!(
        err,
        "loading table {} ({rows} rows, {} MiB = {TABLE_TIMES_POOL} × shared_buffers) ...",
        seqscan::TABLE,
        seq.size_mib
    );
    let prepared = seqscan::prepare_table(seq, &mut |done, _| {
        if let Some(bar) = &bar {
            bar.set_position(done);
        }
    })?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(prepared)
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
    experiment: &'static str,
    baseline: &(String, f64),
    cases: Vec<(String, f64, Option<u64>)>,
) {
    for (variant, seconds, reads) in cases {
        report.rows.push(DemoRow {
            experiment,
            variant,
            seconds,
            reads,
            baseline: baseline.0.clone(),
            ratio: seconds / baseline.1,
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
    let started = Instant::now();
    let (rows, rel, nblocks) = load(opts, &seq, err)?;
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

    // Repeated blocks in one stream, with the last usable method (io_uring
    // where the kernel allows it, else worker): one method is enough to
    // show the reads the stream saves.
    let method = *methods.last().ok_or("no I/O method is available")?;
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
    Ok(report)
}

/// Writes the demo's table and verdicts.
pub fn print_report(out: &mut dyn Write, report: &DemoReport) -> std::io::Result<()> {
    let width = report
        .rows
        .iter()
        .map(|r| r.variant.len())
        .max()
        .unwrap_or(0)
        .max("variant".len());
    writeln!(
        out,
        "{:<16} {:<width$} {:>10} {:>8} {:>8}  baseline",
        "experiment", "variant", "time", "reads", "ratio"
    )?;
    writeln!(
        out,
        "(time: the fastest of {RUNS_PER_CASE} runs; ratio: time / the baseline's, the comparison the verdict makes; below 1 is faster)"
    )?;
    for r in &report.rows {
        writeln!(
            out,
            "{:<16} {:<width$} {:>7.0} ms {:>8} {:>7.2}×  {}",
            r.experiment,
            r.variant,
            r.seconds * 1e3,
            r.reads.map_or("-".to_string(), |n| n.to_string()),
            r.ratio,
            r.baseline
        )?;
    }
    let checked = report.rows.iter().filter(|r| r.reads.is_some()).count();
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

/// Draws each row's speed relative to its baseline (as in the table) as a
/// horizontal bar (longer is faster) into an SVG file.
pub fn write_chart(path: &Path, report: &DemoReport) -> Result<(), String> {
    use plotters::prelude::*;
    let height = (report.rows.len() as u32 + 3) * CHART_ROW_PX;
    let root = SVGBackend::new(path, (CHART_WIDTH_PX, height)).into_drawing_area();
    let fail =
        |e: &dyn std::fmt::Display| format!("could not draw the chart {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let text = ("sans-serif", 14).into_font();
    root.draw(&Text::new(
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
        last_experiment = r.experiment;
        let y = ((i as u32 + 1) * CHART_ROW_PX + 10) as i32;
        let speed = 1.0 / r.ratio;
        let x0 = CHART_LABEL_PX;
        let x1 = x0 + ((speed / max_speed) * bar_room as f64).max(1.0) as i32;
        let color = palette[experiment_index % palette.len()];
        root.draw(&Text::new(
            format!("{}: {}", r.experiment, r.variant),
            (CHART_MARGIN_PX, y + 4),
            text.clone(),
        ))
        .map_err(|e| fail(&e))?;
        root.draw(&Rectangle::new(
            [(x0, y), (x1, y + CHART_ROW_PX as i32 - 8)],
            color.mix(0.7).filled(),
        ))
        .map_err(|e| fail(&e))?;
        root.draw(&Text::new(
            format!("{speed:.2}× ({:.0} ms)", r.seconds * 1e3),
            (x1 + 6, y + 4),
            text.clone(),
        ))
        .map_err(|e| fail(&e))?;
    }
    root.present().map_err(|e| fail(&e))
}
