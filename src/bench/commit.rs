//! `aiostore bench commit`: sessions doing single-row INSERT transactions
//! (synchronous_commit on) for a fixed time, at several session counts,
//! with buffered and direct WAL, with and without added I/O latency. What
//! it shows is group commit: one WAL flush releasing every commit it
//! covers, so commits/s grow with sessions while flushes/s do not.
//!
//! Each case runs in a new data directory under the benchmark directory.
//! Sessions are threads of this process (a PostgreSQL client goes through
//! a socket: `benches/pg_commit.sh` runs pgbench beside this).

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::IoMethod;
use crate::database::Database;

pub struct CommitOptions {
    pub dir: PathBuf,
    pub method: IoMethod,
    pub sessions: Vec<usize>,
    pub seconds: f64,
    /// Added latency per I/O in µs for the cases that add it.
    pub latencies_us: Vec<u64>,
    /// Also run with `io_direct = wal` (O_DIRECT | O_DSYNC segments).
    pub direct: Vec<bool>,
    /// `wal_io_concurrency` values: 1 is one WAL write in flight.
    pub concurrency: Vec<usize>,
    /// Times through every case, interleaved (see [`run`]).
    pub rounds: usize,
    pub extra_settings: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CommitCase {
    pub bench: &'static str,
    /// Which time through the cases (from 1).
    pub round: usize,
    pub method: &'static str,
    pub sessions: usize,
    pub wal_direct: bool,
    pub wal_io_concurrency: usize,
    pub latency_us: u64,
    pub seconds: f64,
    pub commits: u64,
    pub commits_per_s: f64,
    pub wal_writes_per_s: f64,
    pub wal_syncs_per_s: f64,
    /// Commits whose flush found another's had covered them.
    pub flushes_shared: u64,
    pub wal_mib: f64,
    /// Mean time from starting a WAL write to collecting it: the device's
    /// latency plus how long the write waited, done, to be noticed.
    pub wal_write_us: f64,
}

pub fn run(
    opts: &CommitOptions,
    json: bool,
    out: &mut dyn Write,
) -> Result<Vec<CommitCase>, String> {
    let max_sessions = opts.sessions.iter().copied().max().unwrap_or(1) + 8;
    writeln!(
        out,
        "bench commit: io_method={} sessions={:?} {} s per case, {} round(s) through the cases, single-row INSERT transactions, synchronous_commit=on; load average {}",
        opts.method.name(),
        opts.sessions,
        opts.seconds,
        opts.rounds,
        super::load_average()
    )
    .map_err(|e| e.to_string())?;
    if !json {
        writeln!(
            out,
            "{:>8} {:>10} {:>8} {:>10} {:>10} {:>12} {:>12} {:>12} {:>8} {:>12}",
            "sessions",
            "wal",
            "wal_conc",
            "latency_us",
            "commits/s",
            "wal_writes/s",
            "wal_syncs/s",
            "shared_flush",
            "wal_MiB",
            "wal_write_us"
        )
        .map_err(|e| e.to_string())?;
    }
    // Writes synced afterwards go one at a time whatever the setting (see
    // `Wal::open`): their cases would all be one.
    let concurrencies_of = opts
        .direct
        .iter()
        .map(|&direct| {
            Ok(if writes_are_durable(opts, direct)? {
                opts.concurrency.clone()
            } else {
                vec![1]
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let mut cases = Vec::new();
    // Round after round through every case: the disk's speed swings
    // within seconds on a shared machine (an O_DSYNC write took 0.15 ms
    // and 3.7 ms a minute apart), so cases compared are run close
    // together, many times, and their medians compared.
    for round in 1..=opts.rounds {
        for &latency_us in &opts.latencies_us {
            for (&direct, concurrencies) in opts.direct.iter().zip(&concurrencies_of) {
                for (&concurrency, &sessions) in concurrencies
                    .iter()
                    .flat_map(|c| opts.sessions.iter().map(move |s| (c, s)))
                {
                    let mut case = run_case(
                        opts,
                        sessions,
                        direct,
                        concurrency,
                        latency_us,
                        max_sessions,
                    )?;
                    case.round = round;
                    print_case(&case, json, out)?;
                    cases.push(case);
                }
            }
        }
    }
    if !json {
        summarize(opts, &cases, out).map_err(|e| e.to_string())?;
    }
    Ok(cases)
}

/// One case's line (or JSON object).
fn print_case(case: &CommitCase, json: bool, out: &mut dyn Write) -> Result<(), String> {
    if json {
        writeln!(
            out,
            "{}",
            serde_json::to_string(case).map_err(|e| e.to_string())?
        )
    } else {
        writeln!(
            out,
            "{:>8} {:>10} {:>8} {:>10} {:>10.0} {:>12.0} {:>12.0} {:>12} {:>8.1} {:>12.0}",
            case.sessions,
            if case.wal_direct {
                "direct"
            } else {
                "buffered"
            },
            case.wal_io_concurrency,
            case.latency_us,
            case.commits_per_s,
            case.wal_writes_per_s,
            case.wal_syncs_per_s,
            case.flushes_shared,
            case.wal_mib,
            case.wal_write_us
        )
    }
    .map_err(|e| e.to_string())
}

/// Whether a completed WAL write is durable with these settings (the
/// sync method, as `wal_sync_method` resolves for direct or buffered WAL):
/// only then do several writes go in flight.
fn writes_are_durable(opts: &CommitOptions, direct: bool) -> Result<bool, String> {
    let settings =
        crate::config::Settings::load(None, &opts.extra_settings).map_err(|e| e.to_string())?;
    let method = crate::wal::SyncMethod::from_setting(settings.wal_sync_method(), direct)
        .ok_or("wal_sync_method has no such value")?;
    Ok(method.durable_on_write())
}

/// The ratios the issue sets targets for, of the medians over the rounds:
/// group commit (most sessions against fewest) and concurrent WAL writes
/// (most against fewest writes in flight, at the most sessions).
fn summarize(
    opts: &CommitOptions,
    cases: &[CommitCase],
    out: &mut dyn Write,
) -> std::io::Result<()> {
    // The median over the rounds.
    let rate = |sessions: usize, direct: bool, concurrency: usize, latency_us: u64| {
        let rates: Vec<f64> = cases
            .iter()
            .filter(|c| {
                c.sessions == sessions
                    && c.wal_direct == direct
                    && c.wal_io_concurrency == concurrency
                    && c.latency_us == latency_us
            })
            .map(|c| c.commits_per_s.max(1e-9))
            .collect();
        super::median(&rates)
    };
    let (Some(&lo), Some(&hi)) = (opts.sessions.iter().min(), opts.sessions.iter().max()) else {
        return Ok(());
    };
    for &latency_us in &opts.latencies_us {
        for &direct in &opts.direct {
            let wal = if direct { "direct" } else { "buffered" };
            // The concurrencies this WAL ran at (buffered: 1 only).
            let ran = || {
                cases
                    .iter()
                    .filter(|c| c.wal_direct == direct)
                    .map(|c| c.wal_io_concurrency)
            };
            let (Some(c_lo), Some(c_hi)) = (ran().min(), ran().max()) else {
                continue;
            };
            if lo != hi {
                if let (Some(a), Some(b)) = (
                    rate(lo, direct, c_hi, latency_us),
                    rate(hi, direct, c_hi, latency_us),
                ) {
                    writeln!(
                        out,
                        "group commit, {wal} WAL, latency {latency_us} µs, wal_io_concurrency={c_hi}: {hi} sessions = {:.1}× the commits/s of {lo} (medians of {} rounds)",
                        b / a,
                        opts.rounds
                    )?;
                }
            }
            if c_lo != c_hi {
                if let (Some(a), Some(b)) = (
                    rate(hi, direct, c_lo, latency_us),
                    rate(hi, direct, c_hi, latency_us),
                ) {
                    writeln!(
                        out,
                        "concurrent WAL writes, {wal} WAL, latency {latency_us} µs, {hi} sessions: wal_io_concurrency={c_hi} = {:.2}× the commits/s of {c_lo} (medians of {} rounds)",
                        b / a,
                        opts.rounds
                    )?;
                }
            }
        }
    }
    Ok(())
}

fn run_case(
    opts: &CommitOptions,
    sessions: usize,
    direct: bool,
    concurrency: usize,
    latency_us: u64,
    max_sessions: usize,
) -> Result<CommitCase, String> {
    let path = opts.dir.join(format!(
        "commit-{sessions}-{}-{concurrency}-{latency_us}",
        if direct { "direct" } else { "buffered" }
    ));
    if path.exists() {
        std::fs::remove_dir_all(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Database::init(&path).map_err(|e| e.to_string())?;
    let mut settings = vec![
        format!("io_method={}", opts.method.name()),
        format!("max_sessions={max_sessions}"),
        format!("debug_io_latency_us={latency_us}"),
        format!("wal_io_concurrency={concurrency}"),
    ];
    if direct {
        settings.push("io_direct=wal".into());
    }
    settings.extend(opts.extra_settings.iter().cloned());
    let db = Database::open(&path, &settings).map_err(|e| e.to_string())?;
    {
        let mut s = db.session().map_err(|e| e.to_string())?;
        crate::sql::execute(&mut s, "CREATE TABLE bench_commit (session int, n int)")
            .map_err(|e| e.to_string())?;
    }
    let stats = db.wal().stats();
    let before = (
        stats.writes.load(Ordering::Relaxed),
        stats.syncs.load(Ordering::Relaxed),
        stats.flushes_shared.load(Ordering::Relaxed),
        stats.bytes.load(Ordering::Relaxed) + stats.padding_bytes.load(Ordering::Relaxed),
        stats.write_us.load(Ordering::Relaxed),
    );
    let commits = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(sessions + 1));
    let failure = Arc::new(parking_lot::Mutex::new(None::<String>));
    let threads: Vec<_> = (0..sessions)
        .map(|id| {
            let (db, commits, stop, start, failure) = (
                Arc::clone(&db),
                Arc::clone(&commits),
                Arc::clone(&stop),
                Arc::clone(&start),
                Arc::clone(&failure),
            );
            std::thread::spawn(move || {
                let session = db.session();
                start.wait();
                let mut s = match session {
                    Ok(s) => s,
                    Err(e) => {
                        *failure.lock() = Some(e.to_string());
                        return;
                    }
                };
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let text = format!("INSERT INTO bench_commit VALUES ({id}, {n})");
                    if let Err(e) = crate::sql::execute(&mut s, &text) {
                        *failure.lock() = Some(e.to_string());
                        return;
                    }
                    n += 1;
                    commits.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    start.wait();
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(opts.seconds));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join()
            .map_err(|_| "a benchmark session panicked".to_string())?;
    }
    let seconds = started.elapsed().as_secs_f64();
    if let Some(e) = failure.lock().take() {
        return Err(format!("a session failed: {e}"));
    }
    let after = (
        stats.writes.load(Ordering::Relaxed),
        stats.syncs.load(Ordering::Relaxed),
        stats.flushes_shared.load(Ordering::Relaxed),
        stats.bytes.load(Ordering::Relaxed) + stats.padding_bytes.load(Ordering::Relaxed),
        stats.write_us.load(Ordering::Relaxed),
    );
    let commits = commits.load(Ordering::Relaxed);
    drop(db);
    let _ = std::fs::remove_dir_all(&path);
    Ok(CommitCase {
        bench: "commit",
        round: 1,
        method: opts.method.name(),
        sessions,
        wal_direct: direct,
        wal_io_concurrency: concurrency,
        latency_us,
        seconds,
        commits,
        commits_per_s: commits as f64 / seconds,
        wal_writes_per_s: (after.0 - before.0) as f64 / seconds,
        wal_syncs_per_s: (after.1 - before.1) as f64 / seconds,
        flushes_shared: after.2 - before.2,
        wal_mib: (after.3 - before.3) as f64 / (1 << 20) as f64,
        wal_write_us: (after.4 - before.4) as f64 / (after.0 - before.0).max(1) as f64,
    })
}
