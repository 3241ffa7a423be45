//! Crash tests (`aiostore crashtest`): a child process runs a workload on
//! a fresh data directory and is killed with SIGKILL at a random moment;
//! the directory is then reopened and checked against what the child had
//! acknowledged. This is what proves the WAL: without it, a kill loses
//! commits and leaves transactions half on disk, and these tests fail.
//!
//! # An iteration
//!
//! ```text
//! parent                                    child (crashtest-child)
//! ------                                    -----
//! init, create the tables, close
//! spawn ──────────────────────────────────▶ open the directory
//!   reader thread ◀── stdout pipe ───────── "ready"; then per transaction
//!                                            "begin <session> <seq> <op>",
//!                                            the statement, "ack …"
//! sleep a random time in --kill-after-ms
//! SIGKILL, wait ─────────────────────────▶ ✝
//! reopen the directory (recovery), check
//! ```
//!
//! # What may be found, and why the check is sound
//!
//! Each session runs one transaction at a time and reports it twice:
//! `begin` before the statement starts, flushed into the pipe, and `ack`
//! after the statement (and so the commit) returned. The pipe keeps what
//! was written into it when the child dies, so the parent knows, per
//! session, a prefix of acknowledged transactions and at most one more
//! that began (see `protocol`). A correct engine shows every acknowledged
//! transaction, nothing that never began, and the one in doubt wholly or
//! not at all. In doubt are both a transaction killed before its commit
//! and one whose commit returned just before the kill, before its `ack`
//! reached the pipe: the check must accept both outcomes, and does,
//! because a session's allowed states are exactly the state after its
//! acknowledged prefix and the state after that prefix and its
//! transaction in doubt (`check`). A line the kill cut in half is not
//! counted (only lines ending in a newline are), which only moves its
//! transaction into doubt.
//!
//! Then the engine's own invariants, which hold for any workload: the
//! visibility map against the heap, every page's header and checksum, and
//! the catalog against the files under `base/` (`check` lists them).
//!
//! # Example
//!
//! ```text
//! $ aiostore -c io_method=worker crashtest --workload update --iterations 3 --seed 21
//! crashtest: workload update, 3 iterations, seed 21, kill 300..1500 ms after the child is ready; settings shared_buffers=1MB max_sessions=16 io_method=worker
//! iteration 1/3 seed 21: update killed after 1005 ms; 29 acknowledged, 1 in doubt (0 committed, 1 absent); 0 visibility map bits, 5 files, 3012 pages: ok
//! iteration 2/3 seed 22727402837: update killed after 741 ms; 23 acknowledged, 1 in doubt: FAILED: update: 34595 rows instead of 20000; ids more than once: 2521, 2522, 2523, 2524, 2525 … (14595 in all); a torn update: 17480 rows with v = 22, 17115 rows with v = 23; expected all equal to 23 (updates acknowledged) or 24 (one more in doubt)
//! …
//! iterations=3 killed=3 passed=1 failed=2
//! first failure: iteration 2 (seed 22727402837): update: 34595 rows instead of 20000; …
//! ```
//!
//! Two modes check the harness itself against an engine that keeps
//! everything, so that every iteration must pass with or without a WAL.
//! `--clean-stop` closes the child's standard input instead of killing
//! it: the child finishes its transactions and closes the database.
//! `--flush-before-commit` kills as usual, but the child writes every
//! buffer back before each commit, which keeps exactly what committed:
//! the transactions in doubt are then found committed or absent as the
//! kill fell, and both must be accepted. docs/crashtest.md has the rest.

pub mod check;
pub mod child;
pub mod protocol;
pub mod workload;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::bench::XorShift;
use crate::config::{Settings, Source};
use crate::database::Database;

pub use check::Findings;
pub use protocol::History;
pub use workload::{Component, Workload};

/// Largest `--kill-after-ms`: a child stops by itself after
/// [`child::CHILD_RUN_MAX`], which must come well after the kill.
pub const KILL_AFTER_MS_MAX: u64 = 60_000;
/// Most iterations one run does.
pub const ITERATIONS_MAX: u32 = 100_000;
/// How long the child may take to open the directory and say `ready`.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a child told to stop (`--clean-stop`) may take to finish.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the parent looks whether the child ended by itself.
const CHILD_POLL: Duration = Duration::from_millis(5);
/// Characters of the child's standard error quoted in a failure.
const STDERR_QUOTED_MAX: usize = 2000;
/// Settings the harness uses unless the user set them (`-c`, the
/// environment): a pool small enough that pages are written back while
/// transactions run, which is what a crash can tear, and few enough
/// sessions for that pool.
const HARNESS_DEFAULTS: [(&str, &str); 2] = [("shared_buffers", "1MB"), ("max_sessions", "16")];
/// File the child's standard error goes to, in the iteration directory.
const CHILD_STDERR_FILE: &str = "child-stderr.log";

/// `--kill-after-ms MIN..MAX`: when, after the child says `ready`, it is
/// killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KillWindow {
    pub min_ms: u64,
    pub max_ms: u64,
}

impl KillWindow {
    /// Parses `MIN..MAX` or a single number of milliseconds.
    pub fn parse(text: &str) -> Result<KillWindow, String> {
        let number = |t: &str| {
            t.trim().parse::<u64>().map_err(|_| {
                format!("\"{text}\" is not a kill window; write MIN..MAX in milliseconds, e.g. 300..1500")
            })
        };
        let (min_ms, max_ms) = match text.split_once("..") {
            Some((a, b)) => (number(a)?, number(b)?),
            None => {
                let ms = number(text)?;
                (ms, ms)
            }
        };
        if min_ms > max_ms {
            return Err(format!(
                "the kill window {min_ms}..{max_ms} runs backwards; write {max_ms}..{min_ms}"
            ));
        }
        if max_ms > KILL_AFTER_MS_MAX {
            return Err(format!(
                "the kill window ends at {max_ms} ms, after the most a child runs for a kill ({KILL_AFTER_MS_MAX} ms); choose a shorter one"
            ));
        }
        Ok(KillWindow { min_ms, max_ms })
    }
}

impl std::fmt::Display for KillWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}..{}", self.min_ms, self.max_ms)
    }
}

/// What `aiostore crashtest` was asked to do.
pub struct Options {
    pub workload: Workload,
    pub iterations: u32,
    /// The first iteration's seed; each next one is drawn from it.
    pub seed: u64,
    pub kill_after: KillWindow,
    /// Where the iterations' directories go.
    pub dir: PathBuf,
    /// Keep every iteration's directory (failing ones are always kept).
    pub keep: bool,
    /// Stop the child cleanly instead of killing it.
    pub clean_stop: bool,
    /// The child writes every dirty buffer back before each commit
    /// (`BEGIN; …; CHECKPOINT; COMMIT`): without a WAL that keeps what
    /// committed and nothing else, so the kills must pass, in-doubt
    /// transactions and all. A check of the harness itself, for the
    /// workloads whose every change is a transaction
    /// ([`Workload::is_transactional`]).
    pub flush_before_commit: bool,
    /// The user's `-c` settings.
    pub settings: Vec<String>,
    /// The program to run as the child (this one).
    pub exe: PathBuf,
}

/// The first failure of a run.
#[derive(Debug, Clone)]
pub struct Failure {
    pub iteration: u32,
    pub seed: u64,
    pub message: String,
    /// The iteration's directory, kept.
    pub dir: PathBuf,
}

/// What a run found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub iterations: u32,
    /// Iterations whose child died of the SIGKILL.
    pub killed: u32,
    pub passed: u32,
    pub failed: u32,
    pub first_failure: Option<Failure>,
}

/// The settings children and checks run with: the harness's own (a small
/// pool, few sessions) for those the user left at their defaults, then
/// the user's `-c`.
pub fn effective_settings(user: &[String]) -> Result<Vec<String>, String> {
    let chosen = Settings::load(None, user).map_err(|e| e.to_string())?;
    let mut settings = Vec::new();
    for (name, value) in HARNESS_DEFAULTS {
        let defaulted = chosen
            .rows()
            .iter()
            .any(|(def, _, source)| def.name == name && matches!(source, Source::Default));
        if defaulted {
            settings.push(format!("{name}={value}"));
        }
    }
    settings.extend(user.iter().cloned());
    Settings::load(None, &settings).map_err(|e| e.to_string())?;
    Ok(settings)
}

/// Runs the iterations, printing a line for each and the counts at the
/// end.
pub fn run(opts: &Options, out: &mut dyn Write) -> Result<Report, String> {
    if opts.iterations == 0 || opts.iterations > ITERATIONS_MAX {
        return Err(format!(
            "--iterations {} is out of range; use 1 to {ITERATIONS_MAX}",
            opts.iterations
        ));
    }
    if opts.flush_before_commit && !opts.workload.is_transactional() {
        let names: Vec<&str> = Workload::ALL
            .iter()
            .filter(|w| w.is_transactional())
            .map(|w| w.name())
            .collect();
        return Err(format!(
            "--flush-before-commit keeps the {} workload's changes only with a WAL (DDL and VACUUM are not transactions); use it with {}",
            opts.workload.name(),
            names.join(", ")
        ));
    }
    let settings = effective_settings(&opts.settings)?;
    let io = |e: std::io::Error| format!("could not write the report: {e}");
    writeln!(
        out,
        "crashtest: workload {}, {} iterations, seed {}, {} {} ms after the child is ready{}; settings {}",
        opts.workload.name(),
        opts.iterations,
        opts.seed,
        if opts.clean_stop { "clean stop" } else { "kill" },
        opts.kill_after,
        if opts.flush_before_commit {
            ", every buffer written back before each commit"
        } else {
            ""
        },
        settings.join(" ")
    )
    .map_err(io)?;
    let method = Settings::load(None, &settings).map_err(|e| e.to_string())?;
    if method.io_method() == crate::config::IoMethod::IoUring {
        if let Some(reason) = crate::aio::probe_io_uring() {
            writeln!(
                out,
                "note: io_uring is refused here ({reason}); the databases fall back to worker"
            )
            .map_err(io)?;
        }
    }
    let created_dir = !opts.dir.exists();
    std::fs::create_dir_all(&opts.dir).map_err(|e| {
        format!(
            "could not create the crash-test directory \"{}\": {e}",
            opts.dir.display()
        )
    })?;
    let mut report = Report::default();
    let mut seed = opts.seed.max(1);
    for number in 1..=opts.iterations {
        let dir = opts.dir.join(format!(
            "{}-{}-{number}",
            opts.workload.name(),
            std::process::id()
        ));
        let result = iteration(opts, &settings, seed, &dir);
        report.iterations += 1;
        report.killed += u32::from(result.killed);
        let head = format!(
            "iteration {number}/{} seed {seed}: {}",
            opts.iterations, result.summary
        );
        match result.outcome {
            Ok(()) => {
                report.passed += 1;
                writeln!(out, "{head}: ok").map_err(io)?;
                if !opts.keep {
                    if let Err(e) = std::fs::remove_dir_all(&dir) {
                        writeln!(out, "warning: could not remove \"{}\": {e}", dir.display())
                            .map_err(io)?;
                    }
                }
            }
            Err(message) => {
                report.failed += 1;
                writeln!(out, "{head}: FAILED: {message}").map_err(io)?;
                report.first_failure.get_or_insert(Failure {
                    iteration: number,
                    seed,
                    message,
                    dir: dir.clone(),
                });
            }
        }
        out.flush().map_err(io)?;
        seed = XorShift::new(seed).next_u64();
    }
    if created_dir {
        // Only if empty: kept iterations stay, with the directory.
        let _ = std::fs::remove_dir(&opts.dir);
    }
    writeln!(
        out,
        "iterations={} killed={} passed={} failed={}",
        report.iterations, report.killed, report.passed, report.failed
    )
    .map_err(io)?;
    if let Some(f) = &report.first_failure {
        writeln!(
            out,
            "first failure: iteration {} (seed {}): {}\nits data directory is kept in \"{}\"; reproduce the workload's choices with --seed {} --iterations 1",
            f.iteration,
            f.seed,
            f.message,
            f.dir.display(),
            f.seed
        )
        .map_err(io)?;
    }
    Ok(report)
}

/// One iteration's result.
struct IterationResult {
    killed: bool,
    /// What happened, for the iteration's line.
    summary: String,
    outcome: Result<(), String>,
}

fn iteration(opts: &Options, settings: &[String], seed: u64, dir: &Path) -> IterationResult {
    let mut rng = XorShift::new(seed);
    let components = opts.workload.components(&mut rng);
    let window = opts.kill_after.max_ms - opts.kill_after.min_ms;
    let delay = Duration::from_millis(opts.kill_after.min_ms + rng.below(window + 1));
    let child_seed = rng.next_u64();
    let mut result = IterationResult {
        killed: false,
        summary: components
            .iter()
            .map(|c| c.name())
            .collect::<Vec<_>>()
            .join("+"),
        outcome: Ok(()),
    };
    let data_dir = dir.join("data");
    let run = prepare(dir, &data_dir, settings, &components).and_then(|()| {
        run_child(
            opts,
            settings,
            &components,
            child_seed,
            dir,
            &data_dir,
            delay,
        )
    });
    let (history, ran) = match run {
        Ok(done) => done,
        Err(message) => {
            result.outcome = Err(message);
            return result;
        }
    };
    result.killed = ran.killed;
    let tally_line = |findings: &Findings| {
        format!(
            "; {} acknowledged, {} in doubt ({} committed, {} absent); {} visibility map bits, {} files, {} pages{}",
            history.acked_count(),
            history.in_doubt_count(),
            findings.in_doubt.applied,
            findings.in_doubt.absent,
            findings.vm_bits,
            findings.files,
            findings.pages,
            if findings.partial_tails > 0 {
                format!(", {} files end in a partial block", findings.partial_tails)
            } else {
                String::new()
            }
        )
    };
    result.summary.push_str(&format!(
        " {} after {} ms",
        if ran.killed { "killed" } else { "stopped" },
        ran.ms
    ));
    match check::check_database(&data_dir, settings, &components, &history) {
        Ok(findings) => result.summary.push_str(&tally_line(&findings)),
        Err(message) => {
            result.summary.push_str(&format!(
                "; {} acknowledged, {} in doubt",
                history.acked_count(),
                history.in_doubt_count()
            ));
            result.outcome = Err(message);
        }
    }
    result
}

/// A fresh data directory with the components' tables, closed.
fn prepare(
    dir: &Path,
    data_dir: &Path,
    settings: &[String],
    components: &[Component],
) -> Result<(), String> {
    std::fs::create_dir(dir).map_err(|e| {
        format!(
            "could not create the iteration directory \"{}\": {e}",
            dir.display()
        )
    })?;
    Database::init(data_dir).map_err(|e| format!("init: {e}"))?;
    let db = Database::open(data_dir, settings).map_err(|e| format!("set-up: {e}"))?;
    let mut s = db.session().map_err(|e| format!("set-up: {e}"))?;
    for sql in components.iter().filter_map(|c| c.setup_sql()) {
        crate::sql::execute(&mut s, &sql).map_err(|e| format!("set-up: {sql}: {e}"))?;
    }
    drop(s);
    db.checkpoint(false)
        .map(drop)
        .map_err(|e| format!("set-up: {e}"))?;
    Ok(())
}

/// How the child ended.
struct ChildEnd {
    /// It died of the SIGKILL (not `--clean-stop`).
    killed: bool,
    /// From `ready` to the kill or stop.
    ms: u128,
}

/// Runs the child until the kill (or stop) and returns what it said.
fn run_child(
    opts: &Options,
    settings: &[String],
    components: &[Component],
    seed: u64,
    dir: &Path,
    data_dir: &Path,
    delay: Duration,
) -> Result<(History, ChildEnd), String> {
    let stderr_path = dir.join(CHILD_STDERR_FILE);
    let stderr = std::fs::File::create(&stderr_path)
        .map_err(|e| format!("could not create {}: {e}", stderr_path.display()))?;
    let names: Vec<&str> = components.iter().map(|c| c.name()).collect();
    let mut command = Command::new(&opts.exe);
    command.arg("--data-dir").arg(data_dir);
    for setting in settings {
        command.arg("-c").arg(setting);
    }
    command
        .arg("crashtest-child")
        .arg("--components")
        .arg(names.join(","))
        .arg("--seed")
        .arg(seed.to_string())
        .arg("--files")
        .arg(dir)
        .args(opts.flush_before_commit.then_some("--flush-before-commit"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr);
    let mut child = command
        .spawn()
        .map_err(|e| format!("could not start {}: {e}", opts.exe.display()))?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let (lines_tx, lines) = mpsc::channel::<String>();
    // Only whole lines count: a line the kill cut short is dropped, which
    // leaves its transaction in doubt (see the module comment).
    let reader = std::thread::spawn(move || {
        let mut stdout = BufReader::new(stdout);
        let mut line = Vec::new();
        loop {
            line.clear();
            match stdout.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) if line.last() != Some(&b'\n') => break,
                Ok(_) => {
                    let text = String::from_utf8_lossy(&line).trim_end().to_string();
                    if lines_tx.send(text).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let mut history = History::default();
    let ended = drive_child(opts, &mut child, &lines, &mut history, delay);
    // The child is gone whatever happened: its end of the pipe is closed
    // and the reader stops at the end of what it wrote.
    if ended.is_err() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = reader.join();
    let mut protocol = Ok(());
    for line in lines.try_iter() {
        if let Err(e) = history.record(&line) {
            protocol = protocol.and(Err(e));
        }
    }
    let quoted = || quote_stderr(&stderr_path);
    let end = ended.map_err(|e| format!("{e}{}", quoted()))?;
    protocol?;
    Ok((history, end))
}

/// Waits for `ready`, lets the child run for `delay`, then kills it (or
/// stops it, with `--clean-stop`) and waits for it.
fn drive_child(
    opts: &Options,
    child: &mut Child,
    lines: &mpsc::Receiver<String>,
    history: &mut History,
    delay: Duration,
) -> Result<ChildEnd, String> {
    match lines.recv_timeout(READY_TIMEOUT) {
        Ok(line) => history.record(&line)?,
        Err(RecvTimeoutError::Timeout) => {
            return Err(format!(
                "the child did not say ready within {} s",
                READY_TIMEOUT.as_secs()
            ))
        }
        Err(RecvTimeoutError::Disconnected) => {
            let status = child.wait().map_err(|e| e.to_string())?;
            return Err(format!("the child ended before it was ready ({status})"));
        }
    }
    if !history.ready {
        return Err("the child's first line was not ready".into());
    }
    let started = Instant::now();
    while started.elapsed() < delay {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Err(format!(
                "the child ended by itself after {} ms ({status}), before the {} at {} ms",
                started.elapsed().as_millis(),
                if opts.clean_stop { "stop" } else { "kill" },
                delay.as_millis()
            ));
        }
        std::thread::sleep(CHILD_POLL.min(delay.saturating_sub(started.elapsed())));
    }
    let ms = started.elapsed().as_millis();
    if opts.clean_stop {
        // End of input: the child finishes its transactions and closes.
        drop(child.stdin.take());
        let status = wait_bounded(child, STOP_TIMEOUT)?;
        if !status.success() {
            return Err(format!("the child failed when told to stop ({status})"));
        }
        return Ok(ChildEnd { killed: false, ms });
    }
    child
        .kill()
        .map_err(|e| format!("could not kill the child: {e}"))?;
    let status = child.wait().map_err(|e| e.to_string())?;
    if status.signal() != Some(libc::SIGKILL) {
        return Err(format!(
            "the child ended by itself just before the kill ({status})"
        ));
    }
    Ok(ChildEnd { killed: true, ms })
}

/// Waits for the child at most `timeout`.
fn wait_bounded(child: &mut Child, timeout: Duration) -> Result<ExitStatus, String> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Ok(status);
        }
        if started.elapsed() >= timeout {
            return Err(format!(
                "the child did not stop within {} s",
                timeout.as_secs()
            ));
        }
        std::thread::sleep(CHILD_POLL);
    }
}

/// The end of the child's standard error, for a failure message.
fn quote_stderr(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let text = text.trim();
    if text.is_empty() {
        return String::new();
    }
    let start = text
        .char_indices()
        .rev()
        .nth(STDERR_QUOTED_MAX)
        .map_or(0, |(i, _)| i);
    format!("; the child's standard error ends: {}", &text[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_windows_are_parsed_and_bad_ones_refused_with_the_fix() {
        assert_eq!(
            KillWindow::parse("300..1500"),
            Ok(KillWindow {
                min_ms: 300,
                max_ms: 1500
            })
        );
        assert_eq!(
            KillWindow::parse("40"),
            Ok(KillWindow {
                min_ms: 40,
                max_ms: 40
            })
        );
        let e = KillWindow::parse("900..100").unwrap_err();
        assert_eq!(e, "the kill window 900..100 runs backwards; write 100..900");
        assert!(KillWindow::parse("1..x").unwrap_err().contains("MIN..MAX"));
        assert!(KillWindow::parse("1..600000")
            .unwrap_err()
            .contains("choose a shorter one"));
    }

    #[test]
    fn harness_defaults_give_way_to_the_users_settings() {
        assert_eq!(
            effective_settings(&["io_method=sync".into()]).unwrap(),
            ["shared_buffers=1MB", "max_sessions=16", "io_method=sync"]
        );
        assert_eq!(
            effective_settings(&["shared_buffers=4MB".into()]).unwrap(),
            ["max_sessions=16", "shared_buffers=4MB"]
        );
        assert!(effective_settings(&["nosuch=1".into()]).is_err());
    }
}
