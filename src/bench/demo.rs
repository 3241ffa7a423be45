//! `aiostore demo`: the newcomer's first command. Builds a small database
//! in a directory of its own, runs the experiments the engine can show
//! today, each through the code the full benchmark uses, and prints one
//! table, one verdict per experiment and a chart.
//!
//! The experiments, each case on a database opened anew with direct I/O so
//! that neither the pool nor the page cache holds the table (every run is
//! cold):
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
//! cannot be served from the pool.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::config::IoMethod;
use crate::database::Database;
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
    /// about a minute of experiments on a 2-core machine.
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

    fn pool_mib(&self) -> u64 {
        (self.shared_buffers as u64 * BLOCK_SIZE as u64) >> 20
    }

    fn table_mib(&self) -> u64 {
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
    pub seconds: f64,
    /// seconds divided by the experiment's baseline (its first row).
    pub ratio: f64,
}

/// What the demo measured.
#[derive(Debug, Clone, Default)]
pub struct DemoReport {
    pub rows: Vec<DemoRow>,
    pub verdicts: Vec<String>,
}

/// Builds the demo table (with a progress bar on a terminal).
fn load(opts: &DemoOptions, seq: &SeqscanOptions, err: &mut dyn Write) -> Result<f64, String> {
    let rows = seqscan::rows_for_mib(seq.size_mib);
    let started = Instant::now();
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
    seqscan::ensure_table(seq, rows, &mut |done, _| {
        if let Some(bar) = &bar {
            bar.set_position(done);
        }
    })?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Opens the demo database with `method` and `extra` settings (direct
/// I/O: a new pool and no page cache, so the run is cold), and runs `f` on
/// a session and the table's relation.
fn with_cold_session(
    seq: &SeqscanOptions,
    method: IoMethod,
    extra: &[String],
    f: impl FnOnce(&mut crate::buffer::BufferSession, u32) -> Result<StreamReport, String>,
) -> Result<StreamReport, String> {
    let mut settings = seqscan::settings(Some(method), 16, seq);
    settings.extend_from_slice(extra);
    let db = Database::open(&seq.dir, &settings).map_err(|e| e.to_string())?;
    super::check_method(db.aio(), method)?;
    let (rel, _) = seqscan::table_size(&db, seqscan::TABLE)?;
    let mut s = db.session().map_err(|e| e.to_string())?;
    f(&mut s.buf, rel)
}

/// Adds an experiment's rows, their ratios to its first row.
fn push_experiment(report: &mut DemoReport, experiment: &'static str, cases: Vec<(String, f64)>) {
    let Some(&(_, baseline)) = cases.first() else {
        return;
    };
    for (variant, seconds) in cases {
        report.rows.push(DemoRow {
            experiment,
            variant,
            seconds,
            ratio: seconds / baseline,
        });
    }
}

/// "io_uring 3.1×, worker 2.0×": speed-ups, best first.
fn speedups(gains: &[(IoMethod, f64)]) -> Vec<(IoMethod, f64)> {
    let mut sorted = gains.to_vec();
    sorted.sort_by(|a, b| b.1.total_cmp(&a.1));
    sorted
}

fn others(sorted: &[(IoMethod, f64)]) -> String {
    sorted
        .iter()
        .skip(1)
        .map(|(m, g)| format!("{m} {g:.1}×"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs every experiment and returns the measurements; progress goes to
/// `err`.
pub fn run(opts: &DemoOptions, err: &mut dyn Write) -> Result<DemoReport, String> {
    let methods = super::usable_methods(
        vec![IoMethod::Sync, IoMethod::Worker, IoMethod::IoUring],
        err,
    )?;
    let seq = opts.seqscan(&methods);
    let load_seconds = load(opts, &seq, err)?;
    let _ = writeln!(
        err,
        "loaded in {load_seconds:.1} s; running the experiments (every run cold) ..."
    );
    let rows = seqscan::rows_for_mib(seq.size_mib);
    let table_mib = {
        let db = Database::open(&seq.dir, &seqscan::settings(None, 16, &seq))
            .map_err(|e| e.to_string())?;
        seqscan::table_size(&db, seqscan::TABLE)?.1
    };
    let mut report = DemoReport::default();

    // Combining: cold count(*) per method, 8 KiB reads against 128 KiB.
    let mut cases = Vec::new();
    let mut gains = Vec::new();
    for &method in &methods {
        let single = seqscan::count_case(&seq, method, 1, rows, table_mib)?;
        let combined = seqscan::count_case(&seq, method, 16, rows, table_mib)?;
        cases.push((format!("{method}, 8 KiB reads"), single.seconds));
        cases.push((format!("{method}, 128 KiB reads"), combined.seconds));
        gains.push((method, single.seconds / combined.seconds));
    }
    push_experiment(&mut report, "seqscan", cases);
    let sorted = speedups(&gains);
    if let Some(&(best, gain)) = sorted.first() {
        report.verdicts.push(format!(
            "combining: {best} {gain:.1}× faster with 128 KiB reads than 8 KiB reads (io_combine_limit 16 vs 1; {})",
            others(&sorted)
        ));
    }

    // Prewarm per method, through a read stream.
    let mut cases = Vec::new();
    for &method in &methods {
        let r = with_cold_session(&seq, method, &[], |buf, rel| {
            let limits = StreamLimits::default();
            crate::tools::prewarm(buf, rel, Fork::Main, limits).map_err(|e| e.to_string())
        })?;
        cases.push((method, r.seconds));
    }
    push_experiment(
        &mut report,
        "prewarm",
        cases.iter().map(|(m, s)| (m.to_string(), *s)).collect(),
    );
    let fastest = cases.iter().copied().min_by(|a, b| a.1.total_cmp(&b.1));
    if let Some((best, best_seconds)) = fastest {
        let slower = cases
            .iter()
            .filter(|(m, _)| *m != best)
            .map(|(m, s)| format!("{m} {:.2}× its time", s / best_seconds))
            .collect::<Vec<_>>()
            .join(", ");
        report.verdicts.push(format!(
            "prewarm: {best} fastest, {:.0} MiB/s reading {table_mib:.0} MiB through a read stream ({slower})",
            table_mib / best_seconds
        ));
    }

    // Repeated blocks in one stream, with the best method.
    let method = *methods.last().ok_or("no I/O method is available")?;
    let (repeated, distinct) = streams::repeated_block_lists(opts.repeated_last_start);
    let stream = |blocks: &[u32]| {
        with_cold_session(&seq, method, &[], |buf, rel| {
            crate::tools::read_stream_for_blocks(buf, rel, Fork::Main, blocks, Default::default())
                .map_err(|e| e.to_string())
        })
    };
    let d = stream(&distinct)?;
    let r = stream(&repeated)?;
    push_experiment(
        &mut report,
        "repeated blocks",
        vec![
            (format!("{method}, {} distinct", distinct.len()), d.seconds),
            (format!("{method}, {} requests", repeated.len()), r.seconds),
        ],
    );
    report.verdicts.push(format!(
        "repeated blocks: asking for each block {} times took {:.2}× the time of asking once; {} reads for {} requests (distinct: {} reads)",
        streams::REPEATS,
        r.seconds / d.seconds,
        r.reads,
        repeated.len(),
        d.reads
    ));

    // Look-ahead on slow storage: random blocks, eic 0 against 16.
    let nblocks = (table_mib * (1 << 20) as f64 / BLOCK_SIZE as f64) as u32;
    let blocks = streams::random_distinct_blocks(opts.random_blocks.min(nblocks), nblocks);
    let latency = format!("debug_io_latency_us={}", opts.latency_us);
    let mut cases = Vec::new();
    let mut gains = Vec::new();
    for &method in &methods {
        let mut seconds = [0.0; 2];
        for (i, eic) in [0, LOOK_AHEAD_IOS].into_iter().enumerate() {
            let limits = StreamLimits {
                effective_io_concurrency: eic,
                maintenance_io_concurrency: eic,
            };
            seconds[i] =
                with_cold_session(&seq, method, std::slice::from_ref(&latency), |buf, rel| {
                    crate::tools::read_stream_for_blocks(buf, rel, Fork::Main, &blocks, limits)
                        .map_err(|e| e.to_string())
                })?
                .seconds;
            cases.push((format!("{method}, eic {eic}"), seconds[i]));
        }
        gains.push((method, seconds[0] / seconds[1]));
    }
    push_experiment(&mut report, "look-ahead", cases);
    let sorted = speedups(&gains);
    if let Some(&(best, gain)) = sorted.first() {
        report.verdicts.push(format!(
            "look-ahead: {best} {gain:.1}× faster with effective_io_concurrency {LOOK_AHEAD_IOS} than 0 over {} random blocks at {} ms per I/O ({}; sync cannot overlap direct I/O)",
            blocks.len(),
            opts.latency_us as f64 / 1000.0,
            others(&sorted)
        ));
    }
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
        "{:<16} {:<width$} {:>10} {:>8}",
        "experiment", "variant", "time", "ratio"
    )?;
    writeln!(
        out,
        "(ratio: time / the experiment's first variant; below 1 is faster)"
    )?;
    for r in &report.rows {
        writeln!(
            out,
            "{:<16} {:<width$} {:>7.0} ms {:>7.2}×",
            r.experiment,
            r.variant,
            r.seconds * 1e3,
            r.ratio
        )?;
    }
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

/// Draws each row's speed relative to its experiment's baseline as a
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
        "aiostore demo: speed relative to each experiment's first variant (longer is faster)",
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
