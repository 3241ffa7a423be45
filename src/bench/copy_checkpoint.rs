//! `aiostore bench copy-checkpoint`: the reference thread's parallel COPY
//! experiment (`reference/aio-dio-thread-2021.txt`: "60s of parallel COPY
//! BINARY of a 89MB into separate tables (s_b = 96GB)", reporting tps with
//! the latency's standard deviation and the checkpoint's write time and
//! MiB/s, buffered against direct I/O), scaled to this machine, per I/O
//! method and `io_direct` off/data; then a VACUUM that dirties every page
//! of a table, cold, buffered against direct; fio's sequential 128 KiB
//! direct write on the same file system as the checkpoint's yardstick;
//! and with `--pg-script benches/pg_copy_checkpoint.sh`, PostgreSQL 15's
//! same load after ours.
//!
//! # The load
//!
//! The CSV is written once (`copyckpt-<mib>mib.csv` in `copy-checkpoint/`
//! of the benchmark directory, reused when that is kept with `--keep`):
//! the lines `COPY bar TO … (FORMAT csv)` writes for `bench copy`'s table
//! `bar (a integer, b text, c text, d integer)`, `i, md5(i::text),
//! 'abcdefghijklmnopqrstuvwxyz', i`, until it holds `--csv-mib`. CSV, not
//! the reference's COPY BINARY: aiostore's COPY reads CSV and text.
//!
//! Each configuration (a method, buffered or direct) runs in a data
//! directory of its own, made for it and removed after it, with a large
//! `shared_buffers`, and `checkpoint_timeout` and `max_wal_size` at values
//! no load reaches, so that no checkpoint starts during the load (checked:
//! the redo point must not move). Each session is a thread with its own
//! [`Session`] on the one database, loading its own table (created and
//! checkpointed before the clock starts); each COPY of the whole CSV is a
//! transaction, its rows counted and checked. A session starts COPYs until
//! `--seconds` have passed, and the one in flight then finishes: tps is the
//! COPYs over the time until the last one finished, as pgbench `-T` counts
//! them on PostgreSQL's side. Its spread: each session's rate (min, median,
//! max) and the COPYs' latency, mean and standard deviation (the
//! reference's "tps/stddev").
//!
//! # The checkpoint
//!
//! Then `CHECKPOINT`, timed around the statement (every dirty buffer
//! written, the files written since the last checkpoint synced, the WAL
//! flushed, the control file written): its MiB are the blocks the pool
//! wrote (the pool's write counter), its MiB/s those over the statement's
//! time, and its write I/Os those the AIO layer counted less the WAL's
//! own. Beside them, the checkpointer's own report of its write phase
//! (the sorted buffers written, every write finished; not the sync, the
//! checkpoint record, the control file or the removal of old WAL): its
//! time and MiB/s, the reference's "checkpoint write time" and the figure
//! the target compares with fio's. fio runs at the end of each
//! configuration (after its VACUUM, which it would otherwise slow), twice: over and over a written file, and
//! once into a file just allocated with fallocate, which is what the
//! checkpoint writes into (COPY extends its tables with fallocate); the
//! target takes the second. COPY loads through a bulk-write ring per session (16 MiB, as
//! PostgreSQL's), which writes the pages it filled as it reuses its
//! buffers: the output gives the share of the loaded tables the checkpoint
//! wrote itself.
//!
//! # VACUUM
//!
//! In the same data directory, once the load's tables are dropped: a table
//! of `--vacuum-mib` from the same CSV, every other row deleted (`a % 2 =
//! 0`, so every page holds dead rows), checkpointed so that every page is
//! clean on disk, the database closed, the page cache dropped (root; the
//! output says whether) and the database opened again, so that the VACUUM
//! reads every page cold and dirties every one. Timed around the
//! statement; the CHECKPOINT after it (what it left dirty) apart.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::seqscan::{blocks_mib, table_blocks, timed_copy, try_cold};
use super::{execute, Bound};
use crate::config::IoMethod;
use crate::database::{Database, Session};
use crate::stats::IoOp;
use crate::storage::BLOCK_SIZE;

/// The load tables' name: the session's number follows
/// (`benches/pg_copy_checkpoint.sh` uses the same names).
const TABLE_PREFIX: &str = "copyckpt_";
/// The VACUUM's table.
const VACUUM_TABLE: &str = "copyckpt_vacuum";
/// The columns of `bench copy`'s table, whose lines the CSV holds.
const COLUMNS: &str = "(a integer, b text, c text, d integer)";
/// The constant third column of every line.
const PAD: &str = "abcdefghijklmnopqrstuvwxyz";
/// Sessions the database allows beyond the load's: the set-up's session
/// and the checkpointer's.
const EXTRA_SESSIONS: usize = 4;
/// Settings that keep checkpoints out of the load: the longest
/// checkpoint_timeout (a day) and a max_wal_size no run writes half of.
const NO_CHECKPOINT_SETTINGS: [&str; 2] = ["checkpoint_timeout=86400", "max_wal_size=1024GB"];
/// fio's write: 128 KiB blocks, 16 in flight (the depth `bench seqscan`'s
/// fio reads use), for `--fio-seconds` over a file of this size.
const FIO_BLOCK_BYTES: usize = 128 * 1024;
const FIO_DEPTH: usize = 16;
const FIO_FILE_BYTES: u64 = 1 << 30;
/// The file fio writes once into allocated extents: about as much as a
/// full run's checkpoint writes (2.1 GiB), so that it runs as long.
const FIO_ALLOCATED_BYTES: u64 = 2 << 30;
/// What the disk estimate assumes, named so that it can be checked: all
/// sessions together load at most this much CSV per second (`bench copy`
/// loads 70 to 130 MiB/s from one session on the 2-core development
/// machine, and the sessions share its cores) ...
const LOAD_CSV_MIB_S_MAX: f64 = 200.0;
/// ... into this many table bytes per CSV byte (`bench copy`: 2071 MiB of
/// table from 1576 MiB of CSV) ...
const TABLE_BYTES_PER_CSV_BYTE: f64 = 1.35;
/// ... each logged once more in the WAL (2079 MiB of WAL for the 2071),
/// kept until the checkpoint after the load.
const WAL_BYTES_PER_TABLE_BYTE: f64 = 1.0;
/// The VACUUM's table takes its own size in WAL three times over: its
/// loading, the DELETE and the VACUUM each log every page (after a
/// checkpoint, a page's first change logs its image).
const VACUUM_BYTES_PER_TABLE_BYTE: f64 = 4.0;
/// Room left free on top of the estimate, and what a session must find
/// free before each COPY beyond the COPYs in flight.
const DISK_RESERVE_BYTES: u64 = 1 << 30;
/// The largest share of the available memory `shared_buffers` may take
/// (the pool is mapped lazily; a pool the kernel cannot fill stops the
/// process when it fills).
const POOL_SHARE_OF_MEMORY_MAX: f64 = 0.75;

/// Bounds of the options, so that no size or duration overflows: a day
/// of load, a TiB of CSV or VACUUM table, 256 sessions (threads).
const SECONDS_MAX: f64 = 86_400.0;
const SIZE_MIB_MAX: u64 = 1 << 20;
const SESSIONS_MAX: usize = 256;

const MIB: f64 = (1u64 << 20) as f64;

/// Buffered or direct I/O on the data files (`io_direct`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DataIo {
    /// `io_direct=off`: through the page cache, as PostgreSQL 15 writes.
    Buffered,
    /// `io_direct=data`: O_DIRECT.
    Direct,
}

impl DataIo {
    pub const ALL: [DataIo; 2] = [DataIo::Buffered, DataIo::Direct];

    /// The `io_direct` value (also what `--io-direct` takes).
    pub fn setting(self) -> &'static str {
        match self {
            DataIo::Buffered => "off",
            DataIo::Direct => "data",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DataIo::Buffered => "buffered",
            DataIo::Direct => "direct",
        }
    }

    /// `off` or `data` (or `buffered`, `direct`).
    pub fn parse(text: &str) -> Option<DataIo> {
        DataIo::ALL
            .into_iter()
            .find(|d| d.setting() == text || d.name() == text)
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct CopyCheckpointOptions {
    /// Where the CSV, the fio file and each configuration's data
    /// directory go (`copy-checkpoint/` in the benchmark directory).
    pub dir: PathBuf,
    pub methods: Vec<IoMethod>,
    pub data_io: Vec<DataIo>,
    pub sessions: usize,
    /// The load's length; the COPYs in flight at its end finish.
    pub seconds: f64,
    pub csv_mib: u64,
    pub shared_buffers_mib: u64,
    /// The VACUUM's table; 0 skips the VACUUM.
    pub vacuum_mib: u64,
    /// Run fio's sequential direct write, for the checkpoint's target.
    pub fio: bool,
    pub fio_seconds: f64,
    /// `benches/pg_copy_checkpoint.sh`, run after ours (root).
    pub pg_script: Option<PathBuf>,
    /// The user's start-up settings (io_workers, max_sessions, …), after
    /// ours so they win.
    pub extra_settings: Vec<String>,
}

/// The CSV every COPY loads.
#[derive(Debug, Clone)]
pub struct CsvFile {
    pub path: PathBuf,
    pub bytes: u64,
    pub rows: u64,
}

impl CsvFile {
    pub fn mib(&self) -> f64 {
        self.bytes as f64 / MIB
    }

    /// The path quoted for a COPY statement.
    fn sql_literal(&self) -> Result<String, String> {
        let text = self
            .path
            .to_str()
            .ok_or_else(|| format!("{} is not UTF-8", self.path.display()))?;
        Ok(format!("'{}'", text.replace('\'', "''")))
    }
}

/// One configuration's figures.
#[derive(Debug, Clone, Serialize)]
pub struct CopyCheckpointCase {
    pub bench: &'static str,
    pub case: &'static str,
    pub method: &'static str,
    pub io_direct: &'static str,
    pub sessions: usize,
    pub shared_buffers_mib: u64,
    /// From the start of the load until its last COPY finished.
    pub seconds: f64,
    pub copies: u64,
    pub tps: f64,
    /// Each session's COPYs over `seconds`: the spread across sessions.
    pub session_tps_min: f64,
    pub session_tps_median: f64,
    pub session_tps_max: f64,
    /// A COPY's time, mean and (population) standard deviation.
    pub latency_avg_ms: f64,
    pub latency_stddev_ms: f64,
    /// The load tables' size after the load, and the WAL it inserted.
    pub loaded_mib: f64,
    pub wal_mib: f64,
    /// Whether a checkpoint ran during the load (the redo point moved):
    /// then the CHECKPOINT after it found less to write.
    pub checkpoint_during_load: bool,
    pub checkpoint_seconds: f64,
    pub checkpoint_mib: f64,
    pub checkpoint_mib_s: f64,
    /// The checkpointer's write phase alone (its report of the CHECKPOINT:
    /// the buffers written, sorted and combined, all writes finished), and
    /// the MiB it wrote over that time: the reference's "checkpoint write
    /// time" and the target's figure.
    pub checkpoint_write_seconds: f64,
    pub checkpoint_write_mib_s: f64,
    /// fio's writes at the end of the configuration, a minute after its
    /// CHECKPOINT (this virtual disk's write speed swings by 1.5× within
    /// minutes; run after the VACUUM so as not to slow it):
    /// over and over a written file, and once into a file just allocated
    /// with fallocate. The second is what the checkpoint does: COPY
    /// extends its tables with fallocate, and the blocks it leaves to the
    /// checkpoint have never been written, so each write also has the
    /// file system convert its extent (ext4 here: fio alone writes such a
    /// file at 0.6× the speed it rewrites one).
    pub fio_after_checkpoint: Option<FioWrite>,
    pub fio_allocated_after_checkpoint: Option<FioWrite>,
    pub checkpoint_write_ios: u64,
    /// The share of `loaded_mib` the CHECKPOINT wrote.
    pub checkpoint_share: f64,
    pub vacuum: Option<VacuumFigures>,
}

/// The VACUUM of one configuration.
#[derive(Debug, Clone, Serialize)]
pub struct VacuumFigures {
    pub table_mib: f64,
    pub table_blocks: u32,
    /// What is left after the VACUUM cut off the empty pages at the end
    /// (bulk extension adds some ahead of the load).
    pub table_blocks_after: u32,
    /// Blocks the VACUUM and the CHECKPOINT after it wrote: at least
    /// `table_blocks_after`, if the VACUUM dirtied every page.
    pub blocks_written: u64,
    pub rows: u64,
    pub rows_deleted: u64,
    /// "cold" where the page cache was dropped before (root), else "warm"
    /// (a buffered VACUUM may then read from it).
    pub cache: &'static str,
    pub seconds: f64,
    /// Table MiB per second.
    pub mib_s: f64,
    pub read_mib: f64,
    /// Blocks the VACUUM wrote itself (its ring's victims).
    pub written_mib: f64,
    /// The CHECKPOINT after it: what it left dirty.
    pub checkpoint_seconds: f64,
    pub checkpoint_mib: f64,
    /// Dead rows the VACUUM reported removing.
    pub dead_rows_removed: Option<u64>,
}

/// fio's sequential direct write on the file system of the databases.
#[derive(Debug, Clone, Serialize)]
pub struct FioWrite {
    pub bench: &'static str,
    pub case: &'static str,
    /// "overwrite": a file written over and over for `seconds`; "into
    /// allocated extents": one pass over a file just made with fallocate.
    pub writes: &'static str,
    pub block_kib: usize,
    pub depth: usize,
    pub seconds: f64,
    pub mib_s: f64,
}

/// PostgreSQL's run, from `benches/pg_copy_checkpoint.sh`'s line.
#[derive(Debug, Clone, Serialize)]
pub struct PgRun {
    pub bench: &'static str,
    pub case: &'static str,
    pub sessions: usize,
    pub seconds: f64,
    pub shared_buffers_mib: u64,
    pub copies: u64,
    pub tps: f64,
    pub session_tps_min: f64,
    pub session_tps_median: f64,
    pub session_tps_max: f64,
    pub latency_avg_ms: f64,
    pub latency_stddev_ms: f64,
    pub loaded_mib: f64,
    pub checkpoints_during_load: u64,
    /// The CHECKPOINT statement's time, and the checkpointer's write and
    /// sync times of it (pg_stat_bgwriter).
    pub checkpoint_seconds: f64,
    pub checkpoint_write_seconds: f64,
    pub checkpoint_sync_seconds: f64,
    pub checkpoint_mib: f64,
    /// Over the statement's time, as ours; and over the write time alone,
    /// as the reference gives it.
    pub checkpoint_mib_s: f64,
    pub checkpoint_write_mib_s: f64,
}

/// One target of the issue and how this run did.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub bench: &'static str,
    pub case: &'static str,
    pub target: &'static str,
    /// "at most" or "at least" `limit`, each ratio.
    pub bound: &'static str,
    pub limit: f64,
    /// None when a figure it needs was not measured (`why`).
    pub met: Option<bool>,
    pub figures: Vec<(String, f64)>,
    pub why: Option<String>,
}

/// Everything one run measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CopyCheckpointReport {
    pub fio: Option<FioWrite>,
    pub cases: Vec<CopyCheckpointCase>,
    pub postgresql: Option<PgRun>,
    pub verdicts: Vec<Verdict>,
}

/// Checks the options before anything is written.
fn check_options(opts: &CopyCheckpointOptions) -> Result<(), String> {
    let seconds_ok = |s: f64| s > 0.0 && s <= SECONDS_MAX;
    if !(1..=SESSIONS_MAX).contains(&opts.sessions) || !seconds_ok(opts.seconds) {
        return Err(format!(
            "bench copy-checkpoint needs --sessions from 1 to {SESSIONS_MAX} and --seconds above 0 and at most {SECONDS_MAX}"
        ));
    }
    if !(1..=SIZE_MIB_MAX).contains(&opts.csv_mib)
        || opts.vacuum_mib > SIZE_MIB_MAX
        || !(1..=SIZE_MIB_MAX).contains(&opts.shared_buffers_mib)
    {
        return Err(format!(
            "bench copy-checkpoint needs --csv-mib and --shared-buffers-mib from 1 to {SIZE_MIB_MAX}, and --vacuum-mib at most {SIZE_MIB_MAX} (0 skips the VACUUM)"
        ));
    }
    if opts.methods.is_empty() || opts.data_io.is_empty() {
        return Err("bench copy-checkpoint needs at least one of --methods and --io-direct".into());
    }
    if opts.fio && !seconds_ok(opts.fio_seconds) {
        return Err(format!(
            "--fio-seconds must be above 0 and at most {SECONDS_MAX}"
        ));
    }
    let pool_bytes = opts.shared_buffers_mib << 20;
    if let Some(available) = super::memory_available_bytes() {
        let most = (available as f64 * POOL_SHARE_OF_MEMORY_MAX) as u64;
        if pool_bytes > most {
            return Err(format!(
                "--shared-buffers-mib {} is more than {:.0}% of the memory available ({} MiB); lower it to at most {} (the pool fills as the load runs, and a pool the kernel cannot fill stops the process)",
                opts.shared_buffers_mib,
                POOL_SHARE_OF_MEMORY_MAX * 100.0,
                available >> 20,
                most >> 20
            ));
        }
    }
    if opts.pg_script.is_some() && !super::is_root() {
        return Err("bench copy-checkpoint --pg-script runs PostgreSQL as the postgres user, which needs root; run as root or leave --pg-script out".into());
    }
    Ok(())
}

/// What one configuration writes at most, by the constants above, in
/// bytes: the load's tables and WAL (`LOAD_CSV_MIB_S_MAX` for `seconds`,
/// plus the COPYs in flight at its end), and the VACUUM's table and its
/// WAL.
#[derive(Debug, Clone, Copy)]
pub struct DiskEstimate {
    pub load: u64,
    pub vacuum: u64,
}

impl DiskEstimate {
    pub fn of(opts: &CopyCheckpointOptions) -> DiskEstimate {
        let csv_bytes = (opts.csv_mib << 20) as f64;
        let loaded_csv = LOAD_CSV_MIB_S_MAX * MIB * opts.seconds + opts.sessions as f64 * csv_bytes;
        let load = loaded_csv * TABLE_BYTES_PER_CSV_BYTE * (1.0 + WAL_BYTES_PER_TABLE_BYTE);
        // The VACUUM's table ends on whole CSV copies: up to one more.
        let vacuum = if opts.vacuum_mib == 0 {
            0.0
        } else {
            ((opts.vacuum_mib << 20) as f64 + csv_bytes * TABLE_BYTES_PER_CSV_BYTE)
                * VACUUM_BYTES_PER_TABLE_BYTE
        };
        DiskEstimate {
            load: load as u64,
            vacuum: vacuum as u64,
        }
    }
}

/// Refuses a run whose files would not fit on `dir`'s file system: the
/// estimate, the CSV if it is to be written, fio's file and
/// [`DISK_RESERVE_BYTES`].
fn check_disk(opts: &CopyCheckpointOptions, csv_present: bool) -> Result<(), String> {
    let free = super::disk_free_bytes(&opts.dir)?;
    let estimate = DiskEstimate::of(opts);
    let csv = if csv_present { 0 } else { opts.csv_mib << 20 };
    // fio's files are made one at a time, each removed after.
    let fio = if opts.fio {
        FIO_FILE_BYTES.max(FIO_ALLOCATED_BYTES)
    } else {
        0
    };
    let needed = estimate.load + estimate.vacuum + csv + fio + DISK_RESERVE_BYTES;
    let gib = |bytes: u64| bytes as f64 / (MIB * 1024.0);
    if free < needed {
        return Err(format!(
            "bench copy-checkpoint needs about {:.1} GiB free in {} and its file system has {:.1} GiB: {} sessions loading for {} s at up to {LOAD_CSV_MIB_S_MAX:.0} MiB/s of CSV make tables and WAL of up to {:.1} GiB, the VACUUM's {} MiB table and its WAL take {:.1} GiB; lower --seconds, --sessions, --csv-mib or --vacuum-mib, or choose a --dir on a larger file system",
            gib(needed),
            opts.dir.display(),
            gib(free),
            opts.sessions,
            opts.seconds,
            gib(estimate.load),
            opts.vacuum_mib,
            gib(estimate.vacuum),
        ));
    }
    Ok(())
}

/// Stops a load before the file system fills: each session asks before
/// each COPY.
struct DiskGuard<'a> {
    dir: &'a Path,
    /// Free bytes a session must find: every session's next COPY (table
    /// and WAL) and [`DISK_RESERVE_BYTES`].
    needed: u64,
}

impl DiskGuard<'_> {
    fn check(&self) -> Result<(), String> {
        let free = super::disk_free_bytes(self.dir)?;
        if free >= self.needed {
            return Ok(());
        }
        Err(format!(
            "stopped the load: {} MiB free on the file system of {}, and the sessions' next COPYs need about {} MiB; free space there, or lower --seconds, --sessions or --csv-mib",
            free >> 20,
            self.dir.display(),
            self.needed >> 20
        ))
    }
}

/// Writes the CSV unless an earlier run left it: `bench copy`'s lines
/// until `csv_mib` MiB. Written under another name and renamed, so that a
/// run stopped half-way leaves no CSV to reuse.
pub fn ensure_csv(dir: &Path, csv_mib: u64) -> Result<CsvFile, String> {
    let path = dir.join(format!("copyckpt-{csv_mib}mib.csv"));
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    if path.exists() {
        let data = std::fs::read(&path).map_err(io)?;
        let rows = memchr::memchr_iter(b'\n', &data).count() as u64;
        return Ok(CsvFile {
            path,
            bytes: data.len() as u64,
            rows,
        });
    }
    let partial = path.with_extension("csv.partial");
    let file = std::fs::File::create(&partial).map_err(io)?;
    let mut w = std::io::BufWriter::new(file);
    let target = csv_mib << 20;
    let (mut bytes, mut rows) = (0u64, 0u64);
    while bytes < target {
        rows += 1;
        let line = format!("{rows},{:x},{PAD},{rows}\n", md5::compute(rows.to_string()));
        w.write_all(line.as_bytes()).map_err(io)?;
        bytes += line.len() as u64;
    }
    w.flush().map_err(io)?;
    drop(w);
    std::fs::rename(&partial, &path).map_err(io)?;
    Ok(CsvFile { path, bytes, rows })
}

/// The settings of a configuration's database.
fn settings(opts: &CopyCheckpointOptions, method: IoMethod, data_io: DataIo) -> Vec<String> {
    let mut settings = vec![
        format!("io_method={}", method.name()),
        format!("io_direct={}", data_io.setting()),
        format!("shared_buffers={}MB", opts.shared_buffers_mib),
        format!("max_sessions={}", opts.sessions + EXTRA_SESSIONS),
    ];
    settings.extend(NO_CHECKPOINT_SETTINGS.iter().map(|s| s.to_string()));
    settings.extend(opts.extra_settings.iter().cloned());
    settings
}

/// The counters a case's figures are differences of.
#[derive(Debug, Clone, Copy)]
struct Counters {
    blocks_written: u64,
    blocks_read: u64,
    /// Write I/Os the AIO layer completed on the method, the WAL's too.
    write_ios: u64,
    wal_writes: u64,
    wal_bytes: u64,
}

impl Counters {
    fn of(db: &Database, method: IoMethod) -> Counters {
        let pool = db.pool().stats();
        let wal = db.wal().stats();
        Counters {
            blocks_written: pool.writes.load(Ordering::Relaxed),
            blocks_read: pool.reads.load(Ordering::Relaxed),
            write_ios: db
                .aio()
                .stats()
                .row(method, IoOp::Write)
                .map_or(0, |r| r.ios),
            wal_writes: wal.writes.load(Ordering::Relaxed),
            wal_bytes: wal.bytes.load(Ordering::Relaxed),
        }
    }

    fn written_mib(&self, before: &Counters) -> f64 {
        blocks_to_mib(self.blocks_written - before.blocks_written)
    }

    /// The data files' write I/Os since `before`.
    fn data_write_ios(&self, before: &Counters) -> u64 {
        (self.write_ios - before.write_ios).saturating_sub(self.wal_writes - before.wal_writes)
    }
}

fn blocks_to_mib(blocks: u64) -> f64 {
    blocks as f64 * BLOCK_SIZE as f64 / MIB
}

/// What the sessions' load measured: each session's COPY times.
struct Load {
    seconds: f64,
    latencies_s: Vec<Vec<f64>>,
}

/// Runs the sessions: each COPYs `csv` into its own table until
/// `opts.seconds` have passed. The first error stops every session after
/// the COPY it is in.
fn run_load(
    db: &Arc<Database>,
    opts: &CopyCheckpointOptions,
    csv: &CsvFile,
) -> Result<Load, String> {
    let literal = csv.sql_literal()?;
    let guard = DiskGuard {
        dir: &opts.dir,
        needed: (opts.sessions as f64
            * csv.bytes as f64
            * TABLE_BYTES_PER_CSV_BYTE
            * (1.0 + WAL_BYTES_PER_TABLE_BYTE)) as u64
            + DISK_RESERVE_BYTES,
    };
    let duration = Duration::from_secs_f64(opts.seconds);
    let stop = AtomicBool::new(false);
    let start = Barrier::new(opts.sessions + 1);
    let (seconds, results) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..opts.sessions)
            .map(|i| {
                let sql = format!("COPY {TABLE_PREFIX}{i} FROM {literal} (FORMAT csv)");
                let (stop, start, guard) = (&stop, &start, &guard);
                scope.spawn(move || -> Result<Vec<f64>, String> {
                    let session = db.session().map_err(|e| e.to_string());
                    // Every session waits at the barrier, also one whose
                    // session failed, so that the others start.
                    start.wait();
                    let mut s = session?;
                    let deadline = Instant::now() + duration;
                    let mut latencies = Vec::new();
                    while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
                        let copied = guard
                            .check()
                            .and_then(|()| timed_copy(&mut s, &sql, csv.rows));
                        match copied {
                            Ok((_, seconds)) => latencies.push(seconds),
                            Err(e) => {
                                stop.store(true, Ordering::Relaxed);
                                return Err(e);
                            }
                        }
                    }
                    Ok(latencies)
                })
            })
            .collect();
        start.wait();
        let started = Instant::now();
        let results: Vec<Result<Vec<f64>, String>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a COPY session panicked".to_string()))
            })
            .collect();
        (started.elapsed().as_secs_f64(), results)
    });
    let latencies_s = results.into_iter().collect::<Result<Vec<_>, String>>()?;
    Ok(Load {
        seconds,
        latencies_s,
    })
}

/// Times `sql` (a CHECKPOINT, a VACUUM) in `s`; returns its results and
/// seconds.
fn timed(s: &mut Session, sql: &str) -> Result<(Vec<crate::sql::StatementResult>, f64), String> {
    let started = Instant::now();
    let results = execute(s, sql)?;
    Ok((results, started.elapsed().as_secs_f64()))
}

/// The rows a DELETE's tag ("DELETE n") counts.
fn tag_count(results: &[crate::sql::StatementResult], verb: &str) -> Option<u64> {
    results
        .iter()
        .find_map(|r| r.tag.strip_prefix(verb)?.trim().parse().ok())
}

/// The dead rows a VACUUM's notice says it removed ("…, n dead rows
/// removed, …").
fn dead_rows_removed(results: &[crate::sql::StatementResult]) -> Option<u64> {
    let notice = results.iter().flat_map(|r| &r.notices).next()?;
    let before = notice.split(" dead rows removed").next()?;
    before.rsplit(' ').next()?.parse().ok()
}

/// One configuration: its data directory made, the load, the CHECKPOINT,
/// the VACUUM, the directory removed.
fn run_configuration(
    opts: &CopyCheckpointOptions,
    method: IoMethod,
    data_io: DataIo,
    csv: &CsvFile,
    use_fio: bool,
) -> Result<CopyCheckpointCase, String> {
    let dir = opts
        .dir
        .join(format!("db-{}-{}", method.name(), data_io.name()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    Database::init(&dir).map_err(|e| e.to_string())?;
    let result = measure_configuration(opts, method, data_io, csv, &dir, use_fio);
    // The directory goes whatever happened: it may hold gigabytes.
    let removed = std::fs::remove_dir_all(&dir);
    let case = result?;
    removed.map_err(|e| format!("could not remove {}: {e}", dir.display()))?;
    Ok(case)
}

fn measure_configuration(
    opts: &CopyCheckpointOptions,
    method: IoMethod,
    data_io: DataIo,
    csv: &CsvFile,
    dir: &Path,
    use_fio: bool,
) -> Result<CopyCheckpointCase, String> {
    let settings = settings(opts, method, data_io);
    let db = super::open_checked(dir, &settings, method)?;
    let mut s = db.session().map_err(|e| e.to_string())?;
    let tables: Vec<String> = (0..opts.sessions)
        .map(|i| format!("{TABLE_PREFIX}{i}"))
        .collect();
    for table in &tables {
        execute(&mut s, &format!("CREATE TABLE {table} {COLUMNS}"))?;
    }
    execute(&mut s, "CHECKPOINT")?;
    let redo_before = db.wal().redo();
    let before_load = Counters::of(&db, method);
    let load = run_load(&db, opts, csv)?;
    let after_load = Counters::of(&db, method);
    let checkpoint_during_load = db.wal().redo() != redo_before;
    let mut loaded_mib = 0.0;
    for table in &tables {
        loaded_mib += blocks_mib(table_blocks(&db, table)?.1);
    }
    let (_, checkpoint_seconds) = timed(&mut s, "CHECKPOINT")?;
    let after_checkpoint = Counters::of(&db, method);
    let checkpoint_mib = after_checkpoint.written_mib(&after_load);
    let report = db
        .checkpointer_stats()
        .last
        .filter(|r| r.cause == crate::database::CheckpointCause::Requested)
        .ok_or("the CHECKPOINT left no report of a requested checkpoint")?;
    let checkpoint_write_seconds = report.write_time.as_secs_f64();
    let checkpoint_write_mib = blocks_to_mib(report.buffers);
    let per_session: Vec<f64> = load
        .latencies_s
        .iter()
        .map(|l| l.len() as f64 / load.seconds)
        .collect();
    let all: Vec<f64> = load.latencies_s.iter().flatten().copied().collect();
    let copies = all.len() as u64;
    let mean_s = all.iter().sum::<f64>() / all.len().max(1) as f64;
    let variance = all.iter().map(|l| (l - mean_s).powi(2)).sum::<f64>() / all.len().max(1) as f64;
    let min = per_session.iter().copied().fold(f64::INFINITY, f64::min);
    let max = per_session.iter().copied().fold(0.0, f64::max);

    // Room for the VACUUM's table.
    let drop_all: Vec<String> = tables.iter().map(|t| format!("DROP TABLE {t}")).collect();
    execute(&mut s, &format!("{}; CHECKPOINT", drop_all.join("; ")))?;
    drop(s);
    let vacuum = if opts.vacuum_mib > 0 {
        Some(vacuum_case(opts, db, dir, &settings, method, csv)?)
    } else {
        None
    };
    // After the VACUUM, and in every configuration: fio's writes leave the
    // disk busy for a while, and whatever runs next should find it so
    // whether it is buffered or direct.
    let (fio_after_checkpoint, fio_allocated_after_checkpoint) = if use_fio {
        (Some(run_fio(opts, false)?), Some(run_fio(opts, true)?))
    } else {
        (None, None)
    };
    Ok(CopyCheckpointCase {
        bench: "copy-checkpoint",
        case: "aiostore",
        method: method.name(),
        io_direct: data_io.setting(),
        sessions: opts.sessions,
        shared_buffers_mib: opts.shared_buffers_mib,
        seconds: load.seconds,
        copies,
        tps: copies as f64 / load.seconds,
        session_tps_min: min,
        session_tps_median: super::median(&per_session).unwrap_or(0.0),
        session_tps_max: max,
        latency_avg_ms: mean_s * 1e3,
        latency_stddev_ms: variance.sqrt() * 1e3,
        loaded_mib,
        wal_mib: (after_load.wal_bytes - before_load.wal_bytes) as f64 / MIB,
        checkpoint_during_load,
        checkpoint_seconds,
        checkpoint_mib,
        checkpoint_mib_s: checkpoint_mib / checkpoint_seconds,
        checkpoint_write_seconds,
        checkpoint_write_mib_s: checkpoint_write_mib / checkpoint_write_seconds,
        fio_after_checkpoint,
        fio_allocated_after_checkpoint,
        checkpoint_write_ios: after_checkpoint.data_write_ios(&after_load),
        checkpoint_share: if loaded_mib > 0.0 {
            checkpoint_mib / loaded_mib
        } else {
            0.0
        },
        vacuum,
    })
}

/// Builds the VACUUM's table in `db` (taken, to be closed), deletes every
/// other row, checkpoints, reopens the database cold and times the VACUUM.
fn vacuum_case(
    opts: &CopyCheckpointOptions,
    db: Arc<Database>,
    dir: &Path,
    settings: &[String],
    method: IoMethod,
    csv: &CsvFile,
) -> Result<VacuumFigures, String> {
    let mut s = db.session().map_err(|e| e.to_string())?;
    execute(&mut s, &format!("CREATE TABLE {VACUUM_TABLE} {COLUMNS}"))?;
    let copy = format!(
        "COPY {VACUUM_TABLE} FROM {} (FORMAT csv)",
        csv.sql_literal()?
    );
    // The table grows by more than the CSV's size with each copy, so
    // this many reach the size asked for.
    let copies_max = opts.vacuum_mib.div_ceil((csv.bytes >> 20).max(1)).max(1);
    let mut rows = 0;
    for _ in 0..copies_max {
        timed_copy(&mut s, &copy, csv.rows)?;
        rows += csv.rows;
        if blocks_mib(table_blocks(&db, VACUUM_TABLE)?.1) >= opts.vacuum_mib as f64 {
            break;
        }
    }
    let delete = format!("DELETE FROM {VACUUM_TABLE} WHERE a % 2 = 0");
    let rows_deleted = tag_count(&execute(&mut s, &delete)?, "DELETE")
        .ok_or_else(|| format!("{delete}: no row count in its tag"))?;
    execute(&mut s, "CHECKPOINT")?;
    let blocks = table_blocks(&db, VACUUM_TABLE)?.1;
    let table_mib = blocks_mib(blocks);
    drop(s);
    // Closed, so that the reopened database's pool is empty.
    drop(db);
    let cache = try_cold();
    let db = super::open_checked(dir, settings, method)?;
    let mut s = db.session().map_err(|e| e.to_string())?;
    let before = Counters::of(&db, method);
    let (results, seconds) = timed(&mut s, &format!("VACUUM {VACUUM_TABLE}"))?;
    let after_vacuum = Counters::of(&db, method);
    let blocks_after = table_blocks(&db, VACUUM_TABLE)?.1;
    let (_, checkpoint_seconds) = timed(&mut s, "CHECKPOINT")?;
    let after_checkpoint = Counters::of(&db, method);
    Ok(VacuumFigures {
        table_mib,
        table_blocks: blocks,
        table_blocks_after: blocks_after,
        blocks_written: after_checkpoint.blocks_written - before.blocks_written,
        rows,
        rows_deleted,
        cache,
        seconds,
        mib_s: table_mib / seconds,
        read_mib: blocks_to_mib(after_vacuum.blocks_read - before.blocks_read),
        written_mib: after_vacuum.written_mib(&before),
        checkpoint_seconds,
        checkpoint_mib: after_checkpoint.written_mib(&after_vacuum),
        dead_rows_removed: dead_rows_removed(&results),
    })
}

/// fio's sequential 128 KiB direct writes in a file of `dir` (removed
/// after): over and over a written 1 GiB file for `--fio-seconds`, or
/// with `into_allocated` one pass over a 2 GiB file just allocated with
/// fallocate.
fn run_fio(opts: &CopyCheckpointOptions, into_allocated: bool) -> Result<FioWrite, String> {
    let file = opts.dir.join("fio-write.dat");
    let (result, writes, bytes) = if into_allocated {
        let result = super::fio::run_sequential_write_into_allocated(
            &file,
            FIO_ALLOCATED_BYTES,
            FIO_BLOCK_BYTES,
            FIO_DEPTH,
        );
        (result, "into allocated extents", Some(FIO_ALLOCATED_BYTES))
    } else {
        let result = super::fio::run_sequential_write(
            &file,
            FIO_FILE_BYTES,
            FIO_BLOCK_BYTES,
            FIO_DEPTH,
            true,
            opts.fio_seconds,
        );
        (result, "overwrite", None)
    };
    let _ = std::fs::remove_file(&file);
    let r = result?;
    Ok(FioWrite {
        bench: "copy-checkpoint",
        case: "fio",
        writes,
        block_kib: FIO_BLOCK_BYTES / 1024,
        depth: FIO_DEPTH,
        // One pass ends when the file is written.
        seconds: bytes.map_or(opts.fio_seconds, |b| b as f64 / r.bytes_per_second),
        mib_s: r.bytes_per_second / MIB,
    })
}

/// Runs `script` (`benches/pg_copy_checkpoint.sh CSV`) with the run's
/// sessions, seconds and shared_buffers, and reads its line.
fn run_pg(
    script: &Path,
    opts: &CopyCheckpointOptions,
    csv: &CsvFile,
) -> Result<(PgRun, String), String> {
    let csv_path =
        std::fs::canonicalize(&csv.path).map_err(|e| format!("{}: {e}", csv.path.display()))?;
    let csv_text = csv_path
        .to_str()
        .ok_or_else(|| format!("{} is not UTF-8", csv_path.display()))?;
    let _ = writeln!(
        std::io::stderr(),
        "running {} {csv_text} ...",
        script.display()
    );
    // pgbench -T takes whole seconds.
    let (sessions, seconds, pool) = (
        opts.sessions.to_string(),
        (opts.seconds.ceil() as u64).to_string(),
        opts.shared_buffers_mib.to_string(),
    );
    let lines = super::run_pg_script(
        script,
        &[csv_text.to_string()],
        &[
            ("SESSIONS", &sessions),
            ("LOAD_SECONDS", &seconds),
            ("SHARED_BUFFERS_MIB", &pool),
        ],
        "run",
    )?;
    let line = lines
        .first()
        .ok_or_else(|| format!("{}: no result line", script.display()))?;
    let run = line.parse(script, parse_pg_line)?;
    if run.sessions != opts.sessions {
        return Err(format!(
            "{}: ran {} sessions, asked for {}: {}",
            script.display(),
            run.sessions,
            opts.sessions,
            line.text()
        ));
    }
    Ok((run, line.text().to_string()))
}

/// `postgresql 15 copy-checkpoint sessions=… seconds=… …`.
fn parse_pg_line(l: &super::PgLine) -> Option<PgRun> {
    let f = |name: &str| -> Option<f64> { l.field(name)?.parse().ok() };
    let ms = |name: &str| f(name).map(|v| v / 1e3);
    Some(PgRun {
        bench: "copy-checkpoint",
        case: "postgresql",
        sessions: l.field("sessions")?.parse().ok()?,
        seconds: f("seconds")?,
        shared_buffers_mib: l.field("shared_buffers_mib")?.parse().ok()?,
        copies: l.field("copies")?.parse().ok()?,
        tps: f("tps")?,
        session_tps_min: f("session_tps_min")?,
        session_tps_median: f("session_tps_median")?,
        session_tps_max: f("session_tps_max")?,
        latency_avg_ms: f("latency_avg_ms")?,
        latency_stddev_ms: f("latency_stddev_ms")?,
        loaded_mib: f("loaded_mib")?,
        checkpoints_during_load: l.field("checkpoints_during_load")?.parse().ok()?,
        checkpoint_seconds: ms("checkpoint_ms")?,
        checkpoint_write_seconds: ms("checkpoint_write_ms")?,
        checkpoint_sync_seconds: ms("checkpoint_sync_ms")?,
        checkpoint_mib: f("checkpoint_mib")?,
        checkpoint_mib_s: f("checkpoint_mib_s")?,
        checkpoint_write_mib_s: f("checkpoint_write_mib_s")?,
    })
}

/// The ratios a target judges, each with its label ("io_uring"), or why
/// there are none.
type Ratios = Result<Vec<(String, f64)>, String>;

/// The targets, each a ratio of figures of this run.
struct Target {
    text: &'static str,
    bound: Bound,
    /// The ratios it judges, by label; or why there are none.
    ratios: fn(&CopyCheckpointReport) -> Ratios,
}

fn case_of(r: &CopyCheckpointReport, method: IoMethod, io: DataIo) -> Option<&CopyCheckpointCase> {
    r.cases
        .iter()
        .find(|c| c.method == method.name() && c.io_direct == io.setting())
}

/// Per method that ran both ways, `f(direct) / f(buffered)`.
fn direct_over_buffered(
    r: &CopyCheckpointReport,
    f: impl Fn(&CopyCheckpointCase) -> Option<f64>,
) -> Ratios {
    // The sync method waits for each I/O in the session that makes it:
    // direct I/O without asynchrony is the case the reference's series
    // exists to avoid. Its figures are in the table, not judged.
    let ratios: Vec<(String, f64)> = IoMethod::ALL
        .into_iter()
        .filter(|&m| m != IoMethod::Sync)
        .filter_map(|m| {
            let direct = f(case_of(r, m, DataIo::Direct)?)?;
            let buffered = f(case_of(r, m, DataIo::Buffered)?)?;
            Some((m.name().to_string(), direct / buffered))
        })
        .collect();
    if ratios.is_empty() {
        return Err("no asynchronous method (worker, io_uring) ran both buffered and direct (--io-direct off,data)".into());
    }
    Ok(ratios)
}

const TARGETS: [Target; 4] = [
    Target {
        text: "direct I/O with io_uring writes the checkpoint at ≥ 0.8× fio's sequential 128 KiB direct write (the checkpoint's write-phase MiB/s / fio's in the same configuration, into allocated extents as the checkpoint's writes are)",
        bound: Bound::AtLeast(0.8),
        ratios: |r| {
            let case = case_of(r, IoMethod::IoUring, DataIo::Direct)
                .ok_or("io_uring with io_direct=data did not run")?;
            let after = case
                .fio_allocated_after_checkpoint
                .as_ref()
                .ok_or("fio did not run (--no-fio, or not installed)")?;
            Ok(vec![(
                "io_uring direct".into(),
                case.checkpoint_write_mib_s / after.mib_s,
            )])
        },
    },
    Target {
        text: "direct I/O's COPY tps ≥ buffered tps, per asynchronous method (direct tps / buffered tps; the reference: 4.7 against 3.8)",
        bound: Bound::AtLeast(1.0),
        ratios: |r| direct_over_buffered(r, |c| Some(c.tps)),
    },
    Target {
        text: "VACUUM of a table with every page dirtied at least as fast with direct I/O as buffered, per asynchronous method (buffered s / direct s)",
        bound: Bound::AtLeast(1.0),
        ratios: |r| {
            direct_over_buffered(r, |c| c.vacuum.as_ref().map(|v| 1.0 / v.seconds))
                .map_err(|e| format!("{e}, or the VACUUM did not run (--vacuum-mib 0)"))
        },
    },
    Target {
        text: "aiostore's direct io_uring COPY tps ≥ 1.2× PostgreSQL 15's (ours / PostgreSQL's)",
        bound: Bound::AtLeast(1.2),
        ratios: |r| {
            let pg = r
                .postgresql
                .as_ref()
                .ok_or("PostgreSQL did not run (--pg-script benches/pg_copy_checkpoint.sh)")?;
            let case = case_of(r, IoMethod::IoUring, DataIo::Direct)
                .ok_or("io_uring with io_direct=data did not run")?;
            Ok(vec![("io_uring direct".into(), case.tps / pg.tps)])
        },
    },
];

/// Judges every target over what `report` measured.
pub fn verdicts(report: &CopyCheckpointReport) -> Vec<Verdict> {
    TARGETS
        .iter()
        .map(|t| {
            let (bound, limit) = t.bound.parts();
            let (met, mut figures, why) = match (t.ratios)(report) {
                Ok(figures) => (
                    Some(figures.iter().all(|f| t.bound.meets(f.1))),
                    figures,
                    None,
                ),
                Err(why) => (None, Vec::new(), Some(why)),
            };
            figures.sort_by(|a, b| t.bound.badness(b.1).total_cmp(&t.bound.badness(a.1)));
            Verdict {
                bench: "copy-checkpoint",
                case: "verdict",
                target: t.text,
                bound,
                limit,
                met,
                figures,
                why,
            }
        })
        .collect()
}

const HEADER: &str = "method    io_direct copies      tps sess_min sess_med sess_max  lat_ms   sd_ms loaded_MiB  WAL_MiB  ckpt_s ckpt_MiB ckpt_MiB/s ckpt_wr_s ckpt_wr_MiB/s fio_MiB/s fio_alloc_MiB/s ckpt_ios ckpt_% | vac_MiB   vac_s vac_MiB/s vac_rd_MiB vac_wr_MiB vac_ckpt_s";

fn fio_figure(fio: &Option<FioWrite>) -> String {
    fio.as_ref()
        .map_or_else(|| "-".to_string(), |f| format!("{:.0}", f.mib_s))
}

fn row(c: &CopyCheckpointCase) -> String {
    let vacuum = c.vacuum.as_ref().map_or_else(
        || "      -       -         -          -          -          -".to_string(),
        |v| {
            format!(
                "{:>7.0} {:>7.2} {:>9.1} {:>10.0} {:>10.0} {:>10.2}",
                v.table_mib, v.seconds, v.mib_s, v.read_mib, v.written_mib, v.checkpoint_seconds
            )
        },
    );
    format!(
        "{:<9} {:<9} {:>6} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>7.0} {:>7.0} {:>10.0} {:>8.0} {:>7.2} {:>8.0} {:>10.1} {:>9.3} {:>13.1} {:>9} {:>15} {:>8} {:>5.1}% | {vacuum}",
        c.method,
        c.io_direct,
        c.copies,
        c.tps,
        c.session_tps_min,
        c.session_tps_median,
        c.session_tps_max,
        c.latency_avg_ms,
        c.latency_stddev_ms,
        c.loaded_mib,
        c.wal_mib,
        c.checkpoint_seconds,
        c.checkpoint_mib,
        c.checkpoint_mib_s,
        c.checkpoint_write_seconds,
        c.checkpoint_write_mib_s,
        fio_figure(&c.fio_after_checkpoint),
        fio_figure(&c.fio_allocated_after_checkpoint),
        c.checkpoint_write_ios,
        c.checkpoint_share * 100.0,
    )
}

/// Notes on what a case measured that its figures alone do not say.
fn case_notes(c: &CopyCheckpointCase) -> Vec<String> {
    let name = format!("{} io_direct={}", c.method, c.io_direct);
    let mut notes = Vec::new();
    if c.checkpoint_during_load {
        notes.push(format!(
            "{name}: a checkpoint ran during the load (the redo point moved), so the CHECKPOINT after it found less to write"
        ));
    }
    if let Some(v) = &c.vacuum {
        if v.dead_rows_removed.is_some_and(|n| n != v.rows_deleted) {
            notes.push(format!(
                "{name}: the VACUUM removed {} dead rows of the {} deleted",
                v.dead_rows_removed.unwrap_or(0),
                v.rows_deleted
            ));
        }
        if v.blocks_written < u64::from(v.table_blocks_after) {
            notes.push(format!(
                "{name}: the VACUUM and the CHECKPOINT after it wrote {} blocks of the table's {}: not every page was dirtied",
                v.blocks_written, v.table_blocks_after
            ));
        }
    }
    notes
}

fn print_verdicts(out: &mut dyn Write, verdicts: &[Verdict]) -> std::io::Result<()> {
    writeln!(out, "targets (each a ratio of figures of this run):")?;
    for v in verdicts {
        let figures = v
            .figures
            .iter()
            .map(|(label, ratio)| format!("{label}: {ratio:.2}"))
            .collect::<Vec<_>>()
            .join(", ");
        let text = match v.met {
            None => format!(
                "not measured ({})",
                v.why.as_deref().unwrap_or("no figures")
            ),
            Some(true) => format!("met ({figures})"),
            Some(false) => format!("NOT met ({figures}; {} {})", v.bound, v.limit),
        };
        writeln!(out, "- {}: {text}", v.target)?;
    }
    Ok(())
}

/// Runs the benchmark: the CSV, fio, every configuration, PostgreSQL's
/// run, and the verdicts. With `json`, one object per case and verdict.
pub fn run(
    opts: &CopyCheckpointOptions,
    json: bool,
    out: &mut dyn Write,
) -> Result<CopyCheckpointReport, String> {
    let text = |e: std::io::Error| e.to_string();
    check_options(opts)?;
    std::fs::create_dir_all(&opts.dir).map_err(|e| format!("{}: {e}", opts.dir.display()))?;
    let csv_name = opts.dir.join(format!("copyckpt-{}mib.csv", opts.csv_mib));
    check_disk(opts, csv_name.exists())?;
    let _ = writeln!(
        std::io::stderr(),
        "preparing the CSV ({} MiB) in {} ...",
        opts.csv_mib,
        opts.dir.display()
    );
    let csv = ensure_csv(&opts.dir, opts.csv_mib)?;
    let mut report = CopyCheckpointReport::default();
    let use_fio = opts.fio && super::fio::available();
    if opts.fio && !use_fio {
        let _ = writeln!(
            std::io::stderr(),
            "note: fio is not installed (apt-get install fio): the checkpoint's target is not measured"
        );
    }
    if !json {
        writeln!(
            out,
            "aiostore bench copy-checkpoint: {} sessions, each COPYing {} ({:.1} MiB, {} rows of {COLUMNS}) into its own table for {} s, then CHECKPOINT; shared_buffers={} MiB, checkpoint_timeout=86400 s, max_wal_size=1024 GB (no checkpoint during the load), the CSV read through the page cache; VACUUM of a {} MiB table with every other row deleted, checkpointed, the database reopened{}; load average {}",
            opts.sessions,
            csv.path.display(),
            csv.mib(),
            csv.rows,
            opts.seconds,
            opts.shared_buffers_mib,
            opts.vacuum_mib,
            if super::is_root() {
                " and the page cache dropped (cold)"
            } else {
                " (not root: the page cache not dropped, so a buffered VACUUM may read from it)"
            },
            super::load_average()
        )
        .map_err(text)?;
    }
    if use_fio {
        let fio = run_fio(opts, false)?;
        if json {
            super::emit_case(out, true, &fio, |_| String::new())?;
        } else {
            writeln!(
                out,
                "fio: sequential write, {} KiB blocks, depth {}, O_DIRECT, io_uring, {} MiB file in {}, {} s: {:.1} MiB/s",
                fio.block_kib,
                fio.depth,
                FIO_FILE_BYTES >> 20,
                opts.dir.display(),
                fio.seconds,
                fio.mib_s
            )
            .map_err(text)?;
        }
        report.fio = Some(fio);
    }
    if !json {
        writeln!(
            out,
            "tps: COPYs per second, all sessions; sess_*: per session; lat/sd: a COPY's time; ckpt: the CHECKPOINT after the load (statement s, MiB the pool wrote, MiB/s over the statement; wr: its write phase, s and MiB/s; fio's writes at the configuration's end: over a written file, and once into a just-allocated one; data write I/Os, % of the loaded tables); vac: VACUUM (table MiB, s, MiB/s of table, MiB it read and wrote itself, the CHECKPOINT after it)\n{HEADER}"
        )
        .map_err(text)?;
    }
    let mut notes = Vec::new();
    for &method in &opts.methods {
        for &data_io in &opts.data_io {
            let _ = writeln!(
                std::io::stderr(),
                "running {} io_direct={} ...",
                method.name(),
                data_io.setting()
            );
            let case = run_configuration(opts, method, data_io, &csv, use_fio)?;
            super::emit_case(out, json, &case, row)?;
            notes.extend(case_notes(&case));
            report.cases.push(case);
        }
    }
    if let Some(script) = &opts.pg_script {
        // Our databases are closed and removed: PostgreSQL has the machine.
        let (pg, line) = run_pg(script, opts, &csv)?;
        if json {
            super::emit_case(out, true, &pg, |_| String::new())?;
        } else {
            writeln!(out, "{line}").map_err(text)?;
        }
        if pg.checkpoints_during_load > 0 {
            notes.push(format!(
                "PostgreSQL: {} checkpoints ran during the load",
                pg.checkpoints_during_load
            ));
        }
        report.postgresql = Some(pg);
    }
    report.verdicts = verdicts(&report);
    if json {
        for v in &report.verdicts {
            super::emit_case(out, true, v, |_| String::new())?;
        }
    } else {
        for note in &notes {
            writeln!(out, "note: {note}").map_err(text)?;
        }
        writeln!(out, "load average at the end {}", super::load_average()).map_err(text)?;
        print_verdicts(out, &report.verdicts).map_err(text)?;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(method: IoMethod, io: DataIo, tps: f64, vacuum_s: f64) -> CopyCheckpointCase {
        CopyCheckpointCase {
            bench: "copy-checkpoint",
            case: "aiostore",
            method: method.name(),
            io_direct: io.setting(),
            sessions: 2,
            shared_buffers_mib: 64,
            seconds: 10.0,
            copies: 10,
            tps,
            session_tps_min: 0.0,
            session_tps_median: 0.0,
            session_tps_max: 0.0,
            latency_avg_ms: 0.0,
            latency_stddev_ms: 0.0,
            loaded_mib: 100.0,
            wal_mib: 100.0,
            checkpoint_during_load: false,
            checkpoint_seconds: 1.0,
            checkpoint_mib: 50.0,
            checkpoint_mib_s: 50.0,
            checkpoint_write_seconds: 0.5,
            checkpoint_write_mib_s: 100.0,
            fio_after_checkpoint: None,
            fio_allocated_after_checkpoint: None,
            checkpoint_write_ios: 50,
            checkpoint_share: 0.5,
            vacuum: Some(VacuumFigures {
                table_mib: 100.0,
                table_blocks: 12800,
                table_blocks_after: 12800,
                blocks_written: 12800,
                rows: 1,
                rows_deleted: 1,
                cache: "cold",
                seconds: vacuum_s,
                mib_s: 100.0 / vacuum_s,
                read_mib: 100.0,
                written_mib: 100.0,
                checkpoint_seconds: 0.1,
                checkpoint_mib: 0.0,
                dead_rows_removed: Some(1),
            }),
        }
    }

    #[test]
    fn verdicts_compare_direct_with_buffered_per_method_and_say_what_is_missing() {
        let report = CopyCheckpointReport {
            fio: None,
            cases: vec![
                case(IoMethod::Worker, DataIo::Buffered, 4.0, 2.0),
                case(IoMethod::Worker, DataIo::Direct, 3.0, 1.0),
                case(IoMethod::IoUring, DataIo::Buffered, 4.0, 2.0),
                case(IoMethod::IoUring, DataIo::Direct, 5.0, 4.0),
            ],
            postgresql: None,
            verdicts: Vec::new(),
        };
        let v = verdicts(&report);
        let fio = &v[0];
        assert_eq!(fio.met, None);
        assert!(fio.why.as_deref().unwrap_or("").contains("fio"), "{fio:?}");
        let tps = &v[1];
        assert_eq!(tps.met, Some(false));
        // The worst first: worker's 3 / 4.
        assert_eq!(tps.figures[0], ("worker".to_string(), 0.75));
        assert_eq!(tps.figures[1], ("io_uring".to_string(), 1.25));
        let vacuum = &v[2];
        assert_eq!(vacuum.met, Some(false));
        assert_eq!(vacuum.figures[0], ("io_uring".to_string(), 0.5));
        assert_eq!(vacuum.figures[1], ("worker".to_string(), 2.0));
        assert_eq!(v[3].met, None);
    }

    #[test]
    fn the_csv_holds_bench_copys_lines_and_is_reused() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let csv = ensure_csv(dir.path(), 1).expect("written");
        assert!(
            csv.bytes >= 1 << 20 && csv.bytes < (1 << 20) + 100,
            "{csv:?}"
        );
        let text = std::fs::read_to_string(&csv.path).expect("read");
        let first = text.lines().next().expect("a line");
        assert_eq!(
            first,
            "1,c4ca4238a0b923820dcc509a6f75849b,abcdefghijklmnopqrstuvwxyz,1"
        );
        assert_eq!(text.lines().count() as u64, csv.rows);
        let again = ensure_csv(dir.path(), 1).expect("reused");
        assert_eq!((again.bytes, again.rows), (csv.bytes, csv.rows));
    }

    #[test]
    fn postgresqls_line_is_read_field_by_field() {
        let line = crate::bench::PgLine(
            "postgresql 15 copy-checkpoint sessions=2 seconds=10 shared_buffers_mib=64 csv_bytes=1 rows=1 copies=7 tps=0.68 latency_avg_ms=2900.1 latency_stddev_ms=120.5 session_tps_min=0.3 session_tps_median=0.34 session_tps_max=0.38 loaded_mib=180.2 checkpoints_during_load=0 checkpoint_ms=812.0 checkpoint_buffers=4096 checkpoint_write_ms=500 checkpoint_sync_ms=300 checkpoint_mib=32.0 checkpoint_mib_s=39.4 checkpoint_write_mib_s=64.0"
                .to_string(),
        );
        let r = parse_pg_line(&line).expect("parsed");
        assert_eq!((r.sessions, r.copies), (2, 7));
        assert_eq!(r.tps, 0.68);
        assert!((r.checkpoint_seconds - 0.812).abs() < 1e-9);
        assert!((r.checkpoint_sync_seconds - 0.3).abs() < 1e-9);
        let short = crate::bench::PgLine("postgresql 15 copy-checkpoint sessions=2".to_string());
        assert!(parse_pg_line(&short).is_none());
    }
}
