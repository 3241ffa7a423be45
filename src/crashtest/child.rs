//! The child process of a crash test (`aiostore crashtest-child`): opens
//! the data directory, runs the components' sessions, one thread each,
//! and reports every transaction on standard output (see `protocol`)
//! until it is killed.
//!
//! The order of the lines is what makes the parent's check sound: `begin`
//! is written (and flushed into the pipe, where it survives the kill)
//! before the statement starts, so nothing the parent never heard of can
//! have reached the database; `ack` is written only after the statement,
//! and with it the commit, returned. A kill between the commit and the
//! `ack` leaves a committed transaction in doubt, which the check accepts
//! either way.
//!
//! The child also stops by itself, cleanly (sessions finish their
//! transaction, the database closes), when its standard input ends — the
//! parent's `--clean-stop`, or the parent gone — when a session fails, or
//! after [`CHILD_RUN_MAX`].

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::protocol::{ack_line, begin_line, Op, SessionName, READY_LINE};
use super::workload::*;
use crate::bench::XorShift;
use crate::database::{Database, Session};

/// Longest a child runs before it stops by itself (the parent kills it
/// long before: `--kill-after-ms` is at most [`super::KILL_AFTER_MS_MAX`]).
pub const CHILD_RUN_MAX: Duration = Duration::from_secs(120);
/// How often waiting threads look at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(2);
/// The checkpointer runs CHECKPOINT once this many transactions of the
/// other sessions have committed since its last one …
const CHECKPOINT_EVERY_COMMITS: u64 = 2;
/// … and this long has passed.
const CHECKPOINT_GAP_MIN: Duration = Duration::from_millis(20);
/// Pause between two VACUUMs of the vacuum component.
const VACUUM_PAUSE: Duration = Duration::from_millis(10);

/// What the child is told to do.
pub struct ChildOptions {
    pub data_dir: PathBuf,
    /// `-c` settings, as the parent opened the directory with.
    pub settings: Vec<String>,
    pub components: Vec<Component>,
    pub seed: u64,
    /// Where to write scratch files (COPY's CSV files).
    pub files: PathBuf,
    /// Write every dirty buffer back before each commit (see
    /// [`super::Options::flush_before_commit`]).
    pub flush_before_commit: bool,
}

/// Parses `--components` (`insert,checkpoint`).
pub fn parse_components(text: &str) -> Result<Vec<Component>, String> {
    text.split(',')
        .map(|name| {
            Component::from_name(name.trim())
                .ok_or_else(|| format!("unknown crash-test component \"{name}\""))
        })
        .collect()
}

/// Shared by the child's sessions.
struct Cx {
    out: Mutex<Box<dyn Write + Send>>,
    stop: Arc<AtomicBool>,
    deadline: Instant,
    /// Transactions of data components acknowledged so far (the
    /// checkpointer counts them).
    commits: AtomicU64,
    files: PathBuf,
    flush_before_commit: bool,
}

impl Cx {
    /// Writes one protocol line and pushes it into the pipe at once.
    fn say(&self, line: &str) -> Result<(), String> {
        let mut out = self.out.lock();
        writeln!(out, "{line}")
            .and_then(|()| out.flush())
            .map_err(|e| format!("could not write to the harness (standard output): {e}"))
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || Instant::now() >= self.deadline
    }

    /// Runs one transaction: `begin`, the statement, `ack`. `expect_tag`
    /// is the command tag a correct engine returns, checked while the
    /// child runs.
    fn transaction(
        &self,
        s: &mut Session,
        name: SessionName,
        seq: &mut usize,
        op: Op,
        sql: &str,
        expect_tag: Option<&str>,
    ) -> Result<(), String> {
        // Every transaction but DDL and VACUUM (which cannot run in a
        // block) gets its changes onto disk before its commit, so that
        // without a WAL a kill keeps exactly what committed.
        let flushed;
        let (sql, statement) = match op {
            // A load is a transaction block already, and syncs its table
            // at commit.
            Op::Create { .. } | Op::Drop { .. } | Op::Load { .. } | Op::Vacuum | Op::Checkpoint => {
                (sql, 0)
            }
            _ if self.flush_before_commit => {
                flushed = format!("BEGIN; {sql}; CHECKPOINT; COMMIT");
                (flushed.as_str(), 1)
            }
            // Several statements, one transaction.
            Op::LockUpdate { .. } => {
                flushed = format!("BEGIN; {sql}; COMMIT");
                (flushed.as_str(), 1)
            }
            _ => (sql, 0),
        };
        *seq += 1;
        self.say(&begin_line(name, *seq, op))?;
        let results =
            crate::sql::execute(s, sql).map_err(|e| format!("{name} {op}: {sql}: {e}"))?;
        if let Some(tag) = expect_tag {
            let got = results.get(statement).map_or("", |r| r.tag.as_str());
            if got != tag {
                return Err(format!(
                    "{name} {op}: {sql}: returned \"{got}\", expected \"{tag}\""
                ));
            }
        }
        self.say(&ack_line(name, *seq))?;
        if !matches!(op, Op::Vacuum | Op::Checkpoint) {
            self.commits.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// Runs the child until it is killed or told to stop (see the module
/// comment); `out` is where the protocol lines go.
pub fn run(opts: &ChildOptions, out: Box<dyn Write + Send>) -> Result<(), String> {
    let db = Database::open(&opts.data_dir, &opts.settings).map_err(|e| e.to_string())?;
    let cx = Cx {
        out: Mutex::new(out),
        stop: Arc::new(AtomicBool::new(false)),
        deadline: Instant::now() + CHILD_RUN_MAX,
        commits: AtomicU64::new(0),
        files: opts.files.clone(),
        flush_before_commit: opts.flush_before_commit,
    };
    // Standard input ends when the parent closes it or is gone: either
    // way the child stops cleanly. The thread stays blocked in read until
    // then; it is not joined, since the process ends with main.
    let stop = Arc::clone(&cx.stop);
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::stdin().lock().read_to_end(&mut sink);
        stop.store(true, Ordering::Relaxed);
    });
    cx.say(READY_LINE)?;
    let mut failures = Vec::new();
    std::thread::scope(|scope| {
        let mut threads = Vec::new();
        for &component in &opts.components {
            for index in 0..component.sessions() {
                let (cx, db) = (&cx, &db);
                let name = SessionName { component, index };
                let seed = session_seed(opts.seed, name);
                threads.push(scope.spawn(move || {
                    let result = db
                        .session()
                        .map_err(|e| format!("{name}: {e}"))
                        .and_then(|mut s| run_session(cx, &mut s, name, seed));
                    if result.is_err() {
                        cx.stop.store(true, Ordering::Relaxed);
                    }
                    result
                }));
            }
        }
        for thread in threads {
            match thread.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failures.push(e),
                Err(_) => failures.push("a session's thread panicked".to_string()),
            }
        }
    });
    if !failures.is_empty() {
        return Err(failures.join("; "));
    }
    // Sessions that ran out of work (the delete component's ids) end
    // early; the child waits for the kill or the stop like the others.
    while !cx.stopping() {
        std::thread::sleep(STOP_POLL);
    }
    db.checkpoint(false).map(drop).map_err(|e| e.to_string())?;
    Ok(())
}

/// A seed per session, from the child's.
fn session_seed(seed: u64, name: SessionName) -> u64 {
    let which = ((name.component as u64) << 32) | u64::from(name.index);
    (seed ^ which.wrapping_mul(0x9E37_79B9_7F4A_7C15)).max(1)
}

fn run_session(cx: &Cx, s: &mut Session, name: SessionName, seed: u64) -> Result<(), String> {
    let mut rng = XorShift::new(seed);
    let mut seq = 0usize;
    let index = i64::from(name.index);
    match name.component {
        Component::Insert => {
            while !cx.stopping() {
                let key = seq as i64 + 1;
                let sql = format!(
                    "INSERT INTO {INSERT_TABLE} VALUES ({index}, {key}, repeat('i', {NOTE_BYTES}))"
                );
                let op = Op::Insert { key };
                cx.transaction(s, name, &mut seq, op, &sql, Some("INSERT 0 1"))?;
            }
        }
        Component::Update => {
            let sql = format!("UPDATE {UPDATE_TABLE} SET v = v + 1");
            let tag = format!("UPDATE {UPDATE_ROWS}");
            while !cx.stopping() {
                let op = Op::Update {
                    generation: seq as i64 + 1,
                };
                cx.transaction(s, name, &mut seq, op, &sql, Some(&tag))?;
            }
        }
        Component::Copy => {
            let tag = format!("COPY {COPY_BATCH_ROWS}");
            while !cx.stopping() {
                let batch = seq as i64 + 1;
                let path = write_copy_batch(&cx.files, batch)?;
                let sql = format!(
                    "COPY {COPY_TABLE} FROM '{}' (FORMAT csv)",
                    path.display().to_string().replace('\'', "''")
                );
                cx.transaction(s, name, &mut seq, Op::Copy { batch }, &sql, Some(&tag))?;
                std::fs::remove_file(&path)
                    .map_err(|e| format!("could not remove {}: {e}", path.display()))?;
            }
        }
        Component::Delete => {
            let mut ids: Vec<i64> = (1..=DELETE_ROWS)
                .filter(|id| id % i64::from(DELETE_SESSIONS) == index)
                .collect();
            shuffle(&mut ids, &mut rng);
            for id in ids {
                if cx.stopping() {
                    break;
                }
                let sql = format!("DELETE FROM {DELETE_TABLE} WHERE id = {id}");
                cx.transaction(s, name, &mut seq, Op::Delete { id }, &sql, Some("DELETE 1"))?;
            }
        }
        Component::Vacuum if name.index == 0 => {
            let mut next_id = VACUUM_ROWS + 1;
            while !cx.stopping() {
                let first = 1 + rng.below(next_id as u64 - 1) as i64;
                let (op, sql) = match rng.below(4) {
                    0 | 1 => {
                        let last = first + rng.below(VACUUM_RANGE_ROWS_MAX as u64) as i64;
                        (
                            Op::UpdateRange { first, last },
                            format!("UPDATE {VACUUM_TABLE} SET v = v + 1 WHERE id >= {first} AND id <= {last}"),
                        )
                    }
                    2 => {
                        let last = first + rng.below(VACUUM_RANGE_ROWS_MAX as u64 / 4) as i64;
                        (
                            Op::DeleteRange { first, last },
                            format!(
                                "DELETE FROM {VACUUM_TABLE} WHERE id >= {first} AND id <= {last}"
                            ),
                        )
                    }
                    _ => {
                        let (first, last) = (
                            next_id,
                            next_id + rng.below(VACUUM_RANGE_ROWS_MAX as u64) as i64,
                        );
                        next_id = last + 1;
                        (
                            Op::InsertRange { first, last },
                            format!("INSERT INTO {VACUUM_TABLE} SELECT i, 0, repeat('v', {NOTE_BYTES}) FROM generate_series({first}, {last}) i"),
                        )
                    }
                };
                cx.transaction(s, name, &mut seq, op, &sql, None)?;
            }
        }
        Component::Vacuum => {
            let sql = format!("VACUUM {VACUUM_TABLE}");
            while !cx.stopping() {
                cx.transaction(s, name, &mut seq, Op::Vacuum, &sql, None)?;
                pause(cx, VACUUM_PAUSE);
            }
        }
        Component::Ddl => {
            let mut live = VecDeque::new();
            let mut table = 0i64;
            while !cx.stopping() {
                table += 1;
                let t = ddl_table(table);
                let create = format!("CREATE TABLE {t} (k integer NOT NULL, i integer NOT NULL)");
                if table % 2 == 0 {
                    let path = write_ddl_load(&cx.files, table)?;
                    // Every other load frozen: its pages all-visible, map
                    // bits set, before the commit makes any of it durable.
                    let freeze = if table % 4 == 0 { ", FREEZE" } else { "" };
                    let sql = format!(
                        "BEGIN; {create}; COPY {t} FROM '{}' (FORMAT csv{freeze}); COMMIT",
                        path.display().to_string().replace('\'', "''")
                    );
                    cx.transaction(s, name, &mut seq, Op::Load { table }, &sql, None)?;
                    std::fs::remove_file(&path)
                        .map_err(|e| format!("could not remove {}: {e}", path.display()))?;
                    live.push_back(table);
                    continue;
                }
                cx.transaction(s, name, &mut seq, Op::Create { table }, &create, None)?;
                if cx.stopping() {
                    break;
                }
                let sql = format!(
                    "INSERT INTO {t} SELECT {table}, i FROM generate_series(1, {DDL_ROWS}) i"
                );
                let tag = format!("INSERT 0 {DDL_ROWS}");
                cx.transaction(s, name, &mut seq, Op::Fill { table }, &sql, Some(&tag))?;
                live.push_back(table);
                while live.len() > DDL_LIVE_TABLES && !cx.stopping() {
                    let old = live.pop_front().expect("more than DDL_LIVE_TABLES");
                    let sql = format!("DROP TABLE {}", ddl_table(old));
                    cx.transaction(s, name, &mut seq, Op::Drop { table: old }, &sql, None)?;
                }
            }
        }
        Component::Lock => {
            // Session `index` changes only its own rows, and locks others'
            // only `FOR KEY SHARE`, which neither their own locks (`FOR
            // SHARE`, `FOR NO KEY UPDATE`) nor their no-key updates
            // conflict with: a key-share lock meeting another session's
            // update in progress waits for it, and that session waits for
            // nothing more before its commit, so there is no deadlock.
            let own = format!("id % {LOCK_SESSIONS} = {index}");
            while !cx.stopping() {
                let first = 1 + rng.below(LOCK_ROWS as u64) as i64;
                let last = first + rng.below(LOCK_RANGE_ROWS_MAX as u64) as i64;
                let shared = last.min(LOCK_ROWS) - first + 1;
                let sql = format!(
                    "SELECT id FROM {LOCK_TABLE} WHERE id BETWEEN {first} AND {last} FOR KEY SHARE;
                     SELECT id FROM {LOCK_TABLE} WHERE {own} AND id BETWEEN {first} AND {last} FOR SHARE;
                     SELECT id FROM {LOCK_TABLE} WHERE {own} FOR NO KEY UPDATE;
                     UPDATE {LOCK_TABLE} SET v = v + 1 WHERE {own}"
                );
                let op = Op::LockUpdate {
                    generation: seq as i64 + 1,
                };
                let tag = format!("SELECT {shared}");
                cx.transaction(s, name, &mut seq, op, &sql, Some(&tag))?;
            }
        }
        Component::Checkpointer => {
            let mut last_commits = cx.commits.load(Ordering::Relaxed);
            let mut last_at = Instant::now();
            while !cx.stopping() {
                let commits = cx.commits.load(Ordering::Relaxed);
                if commits < last_commits + CHECKPOINT_EVERY_COMMITS
                    || last_at.elapsed() < CHECKPOINT_GAP_MIN
                {
                    std::thread::sleep(STOP_POLL);
                    continue;
                }
                cx.transaction(s, name, &mut seq, Op::Checkpoint, "CHECKPOINT", None)?;
                (last_commits, last_at) = (commits, Instant::now());
            }
        }
    }
    Ok(())
}

/// Sleeps `how_long`, or less if the child is stopping.
fn pause(cx: &Cx, how_long: Duration) {
    let until = Instant::now() + how_long;
    while !cx.stopping() && Instant::now() < until {
        std::thread::sleep(STOP_POLL);
    }
}

fn shuffle(items: &mut [i64], rng: &mut XorShift) {
    for i in (1..items.len()).rev() {
        items.swap(i, rng.below(i as u64 + 1) as usize);
    }
}

/// The CSV file a ddl load of table `table` reads: rows (table, i) for i
/// in 1..=[`DDL_ROWS`], as the fill of the other tables inserts.
fn write_ddl_load(dir: &Path, table: i64) -> Result<PathBuf, String> {
    let path = dir.join(format!("ddl-load-{table}.csv"));
    let write = || -> std::io::Result<()> {
        let mut file = std::io::BufWriter::new(std::fs::File::create(&path)?);
        for i in 1..=DDL_ROWS {
            writeln!(file, "{table},{i}")?;
        }
        file.flush()
    };
    write().map_err(|e| format!("could not write {}: {e}", path.display()))?;
    Ok(path)
}

/// The CSV file of COPY batch `batch`: rows (batch, n, note) for n in
/// 1..=[`COPY_BATCH_ROWS`].
fn write_copy_batch(dir: &Path, batch: i64) -> Result<PathBuf, String> {
    let path = dir.join(format!("copy-{batch}.csv"));
    let write = || -> std::io::Result<()> {
        let mut file = std::io::BufWriter::new(std::fs::File::create(&path)?);
        for n in 1..=COPY_BATCH_ROWS {
            writeln!(file, "{batch},{n},row {n} of batch {batch}")?;
        }
        file.flush()
    };
    write().map_err(|e| format!("could not write {}: {e}", path.display()))?;
    Ok(path)
}
