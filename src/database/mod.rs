//! A data directory and the database open on it: the lock that keeps a
//! second process out, the format version, the shared parts (AIO, buffer
//! pool, transactions, heap, catalog) and sessions with their transactions.
//!
//! ```text
//! <dir>/AIOSTORE_VERSION   format of the directory ("aiostore data directory format 2")
//! <dir>/aiostore.toml      settings (see docs/settings.md)
//! <dir>/aiostore.pid       the pid of the process that has the directory open
//! <dir>/base/              relation files (catalog: 1–4; tables from 16384)
//! <dir>/aiostore.auth_secret  the server's secret for mock SCRAM salts (server::auth)
//! <dir>/xact, xid_reserved commit log and transaction id reservation
//! <dir>/wal/               WAL segment files (see the `wal` module)
//! <dir>/aiostore.control   the last checkpoint and whether the database
//!                          was shut down cleanly
//! ```
//!
//! Opening a directory replays the WAL from the last checkpoint's redo
//! point (see `recovery`) and, if there was anything to replay (a crash),
//! writes a checkpoint; closing writes a shutdown checkpoint. A commit
//! logs its end and, with `synchronous_commit`, waits until the log is
//! durable up to it before the transaction counts as committed.
//!
//! One process opens a data directory at a time; sessions are threads in
//! it. The lock is an exclusive `flock` on the data directory itself, which
//! the kernel releases when the process dies however it dies, so a lock
//! left by a dead process is simply taken over, and which no file deletion
//! can defeat; the pid file only serves to name the holder in the error a
//! second process gets.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use thiserror::Error;

use crate::aio::{Aio, AioConfig, AioError};
use crate::buffer::{BufferError, BufferPool, BufferSession, PoolConfig, SessionSettings};
use crate::catalog::{Catalog, CatalogError};
use crate::config::{ConfigError, Settings};
use crate::heap::{Heap, HeapError};
use crate::local_arc::LocalArc;
use crate::storage::{Smgr, StorageError};
use crate::stream::StreamLimits;
use crate::txn::{CommandId, SnapshotGuard, TxnError, TxnManager, Xid};
use crate::wal::control::{ControlData, DbState};
use crate::wal::record::{XACT_ABORT, XACT_COMMIT, XLOG_CHECKPOINT_SHUTDOWN};
use crate::wal::{Lsn, Rmgr, SyncMethod, Wal, WalConfig, WalError, FIRST_LSN};

pub mod checkpoint;
pub mod recovery;

use checkpoint::Checkpointer;
pub use checkpoint::{CheckpointCause, CheckpointReport, CheckpointerStats};

/// WAL segments a checkpoint keeps for recycling at least (64 MiB); more
/// when checkpoints are further apart (see `Database::recycle_estimate`).
const RECYCLED_SEGMENTS: usize = 4;
/// How fast the estimate of the WAL between checkpoints follows a
/// shorter distance (PostgreSQL's 0.90 weight on the old estimate): it
/// jumps up at once and decays over a few checkpoints, so that one
/// CHECKPOINT soon after another does not throw away the segments the
/// next busy stretch needs.
const RECYCLE_ESTIMATE_KEEP: f64 = 0.9;
/// How long a checkpoint waits for commits in progress when it starts
/// (they hold the gate for the time of one WAL flush).
const COMMIT_GATE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// What `AIOSTORE_VERSION` holds for directories this build reads.
pub const FORMAT: &str = "aiostore data directory format 3";
const VERSION_FILE: &str = "AIOSTORE_VERSION";
const LOCK_FILE: &str = "aiostore.pid";
/// Where relation files live, inside the data directory.
pub const BASE_DIR: &str = "base";
/// Where sorts and hash aggregation spill beyond `work_mem`, inside the
/// data directory (PostgreSQL's `pgsql_tmp`): on the data's file system,
/// whose free space the user watches. Its files have no names (see
/// `sort::spill`), so a crash leaves nothing to clean up.
pub const TEMP_DIR: &str = "tmp";
/// Entries `init` accepts in an existing directory: a prepared config file
/// and the scratch files of `aiostore bench`.
const INIT_ALLOWED_ENTRIES: &[&str] = &[crate::config::CONFIG_FILE_NAME, "bench"];

#[derive(Debug, Error)]
pub enum DbError {
    #[error("no data directory at \"{0}\"; create one with `aiostore init` (or choose another with --data-dir or AIOSTORE_DATA)")]
    Missing(PathBuf),
    #[error("\"{0}\" is not empty; `aiostore init` creates a data directory only in an empty or new directory")]
    NotEmpty(PathBuf),
    #[error("\"{dir}\" was written by an incompatible version of aiostore ({found}); this build reads \"{FORMAT}\"")]
    Incompatible { dir: PathBuf, found: String },
    #[error("data directory \"{dir}\" is in use by process {pid}; stop it first (only one process may open a data directory)")]
    InUse { dir: PathBuf, pid: String },
    #[error("could not {op} \"{path}\": {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Aio(#[from] AioError),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error(transparent)]
    Buffer(#[from] BufferError),
    #[error(transparent)]
    Txn(#[from] TxnError),
    #[error(transparent)]
    Heap(#[from] HeapError),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(transparent)]
    Wal(#[from] WalError),
    #[error("checkpoint could not start: commits in progress did not finish within {0} s")]
    CheckpointStuck(u64),
}

impl DbError {
    /// PostgreSQL's SQLSTATE for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            DbError::Missing(_) => "58P01", // undefined_file
            // PostgreSQL's "database files are incompatible with server";
            // a directory init will not write into is in the same state.
            DbError::NotEmpty(_) | DbError::Incompatible { .. } => "55000",
            DbError::InUse { .. } => "F0001", // lock_file_exists
            DbError::Io { source, .. } => crate::storage::io_sqlstate(source),
            DbError::Config(e) => e.sqlstate(),
            DbError::Aio(e) => e.sqlstate(),
            DbError::Storage(e) => e.sqlstate(),
            DbError::Buffer(e) => e.sqlstate(),
            DbError::Txn(e) => e.sqlstate(),
            DbError::Heap(e) => e.sqlstate(),
            DbError::Catalog(e) => e.sqlstate(),
            DbError::Wal(e) => e.sqlstate(),
            // A wait that reached its bound, as PostgreSQL's lock_timeout
            // reports one.
            DbError::CheckpointStuck(_) => "55P03",
        }
    }
}

pub(crate) fn io_err(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> DbError {
    let path = path.to_path_buf();
    move |source| DbError::Io { op, path, source }
}

/// Times to try the data directory's lock while its holder is letting
/// go (see [`DirLock::take`]), [`DIR_LOCK_RETRY_DELAY`] apart: half a
/// second in all.
const DIR_LOCK_ATTEMPTS_MAX: u32 = 20;
const DIR_LOCK_RETRY_DELAY: std::time::Duration = std::time::Duration::from_millis(25);

/// The exclusive lock on a data directory, held while it is open: an
/// `flock` on the directory itself, which cannot be removed from under a
/// running process as a lock file can (deleting `aiostore.pid` let a second
/// process in). The pid file is information only: it names the holder in
/// the error a second process gets.
struct DirLock {
    _dir: File,
    pid_file: File,
}

impl DirLock {
    fn take(dir: &Path) -> Result<DirLock, DbError> {
        let dir_file = File::open(dir).map_err(io_err("open", dir))?;
        let path = dir.join(LOCK_FILE);
        let mut attempts = 0;
        let (locked, previous) = loop {
            // SAFETY: plain system call on a descriptor we own.
            let rc = unsafe { libc::flock(dir_file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            let locked = if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            };
            let previous = std::fs::read_to_string(&path)
                .map(|p| p.trim().to_string())
                .unwrap_or_default();
            // Held, but its holder emptied the pid file or is no longer
            // running: it is letting go. The lock lives as long as any
            // copy of the descriptor, and a process forking at that moment
            // (any thread starting a program) holds a copy until its child
            // execs: wait a little rather than report a holder that has
            // gone.
            let releasing = matches!(&locked, Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK))
                && !process_running(&previous);
            attempts += 1;
            if !releasing || attempts == DIR_LOCK_ATTEMPTS_MAX {
                break (locked, previous);
            }
            std::thread::sleep(DIR_LOCK_RETRY_DELAY);
        };
        match locked {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => {
                return Err(DbError::InUse {
                    dir: dir.to_path_buf(),
                    pid: if previous.is_empty() {
                        "unknown".into()
                    } else {
                        previous
                    },
                });
            }
            Err(source) => {
                return Err(DbError::Io {
                    op: "lock",
                    path: dir.to_path_buf(),
                    source,
                })
            }
        }
        if !previous.is_empty() {
            log::info!(
                "took over the lock of \"{}\" left by process {previous}, which is no longer running",
                dir.display()
            );
        }
        let mut pid_file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(io_err("open", &path))?;
        writeln!(pid_file, "{}", std::process::id()).map_err(io_err("write", &path))?;
        Ok(DirLock {
            _dir: dir_file,
            pid_file,
        })
    }
}

/// Whether `pid` (a pid file's text) names a running process.
fn process_running(pid: &str) -> bool {
    let Ok(pid) = pid.parse::<libc::pid_t>() else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists.
    pid > 0
        && (unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Empty the pid file so that the next opener does not report a
        // takeover; the lock itself goes with the directory's descriptor.
        let _ = self.pid_file.set_len(0);
    }
}

/// A database open on a data directory.
pub struct Database {
    dir: PathBuf,
    settings: Settings,
    aio: Arc<Aio>,
    pool: Arc<BufferPool>,
    txn: Arc<TxnManager>,
    heap: Heap,
    btree: crate::btree::Btree,
    catalog: Catalog,
    /// What ANALYZE learnt of each table, for the planner.
    statistics: crate::catalog::statistics::Statistics,
    wal: Arc<Wal>,
    /// Writes checkpoints; holds the commit gate (see `checkpoint`).
    checkpointer: Arc<Checkpointer>,
    /// Close as a killed process would (see [`Database::simulate_crash`]).
    crash_on_close: std::sync::atomic::AtomicBool,
    /// The background threads: the WAL writer (flushes for asynchronous
    /// commits), the checkpointer (timed and size-triggered checkpoints)
    /// and the background writer.
    background: Arc<Background>,
    /// What start-up replayed, if the database had not been shut down
    /// cleanly.
    recovery: Option<recovery::RecoveryReport>,
    _lock: DirLock,
}

impl Database {
    /// Creates a data directory at `dir` (new, or empty but for a config
    /// file and benchmark scratch files) with its catalog.
    pub fn init(dir: &Path) -> Result<(), DbError> {
        if dir.exists() {
            let entries = std::fs::read_dir(dir).map_err(io_err("read", dir))?;
            for entry in entries {
                let entry = entry.map_err(io_err("read", dir))?;
                let name = entry.file_name();
                if !INIT_ALLOWED_ENTRIES.iter().any(|a| name == *a) {
                    return Err(DbError::NotEmpty(dir.to_path_buf()));
                }
            }
        }
        std::fs::create_dir_all(dir.join(BASE_DIR)).map_err(io_err("create", dir))?;
        let lock = DirLock::take(dir)?;
        let settings = Settings::load(Some(dir), &[])?;
        let (aio, pool) = Self::start_io(dir, &settings)?;
        let mut s = pool.session(SessionSettings::default())?;
        Catalog::bootstrap(&mut s)?;
        TxnManager::create(dir)?;
        s.flush_all()?;
        drop(s);
        // The log starts with a shutdown checkpoint that the control file
        // points to: opening replays nothing.
        Wal::create(dir)?;
        let wal = Wal::open(
            dir,
            &aio,
            wal_config(&settings),
            0,
            FIRST_LSN,
            &[],
            FIRST_LSN,
        )?;
        let (checkpoint, end) = wal.insert_record(
            Rmgr::Xlog,
            XLOG_CHECKPOINT_SHUTDOWN,
            0,
            &[],
            &checkpoint_data(FIRST_LSN),
        )?;
        wal.flush(end)?;
        ControlData {
            state: DbState::ShutDown,
            checkpoint,
            redo: FIRST_LSN,
            time: now_secs(),
        }
        .write(dir)?;
        crate::wal::sync_dir(&dir.join(BASE_DIR))?;
        drop(wal);
        drop((pool, aio));
        let config = dir.join(crate::config::CONFIG_FILE_NAME);
        if !config.exists() {
            std::fs::write(
                &config,
                "# aiostore settings; `aiostore settings` lists every name with its default.\n\
                 # shared_buffers = \"128MB\"\n# io_method = \"io_uring\"\n",
            )
            .map_err(io_err("write", &config))?;
        }
        // Written last: a directory without it was not fully created.
        let version = dir.join(VERSION_FILE);
        std::fs::write(&version, format!("{FORMAT}\n")).map_err(io_err("write", &version))?;
        drop(lock);
        Ok(())
    }

    fn start_io(dir: &Path, settings: &Settings) -> Result<(Arc<Aio>, Arc<BufferPool>), DbError> {
        let aio = Aio::start(&AioConfig::from_settings(settings))?;
        let smgr = Arc::new(Smgr::new(&dir.join(BASE_DIR), settings.io_direct().data)?);
        let pool = BufferPool::new(
            Arc::clone(&aio),
            smgr,
            &PoolConfig {
                nbuffers: settings.shared_buffers() as u32,
                max_sessions: settings.max_sessions(),
            },
        )?;
        Ok((aio, pool))
    }

    /// Opens the data directory at `dir`; `command_line` holds `-c`
    /// settings.
    pub fn open(dir: &Path, command_line: &[String]) -> Result<Arc<Database>, DbError> {
        let version = dir.join(VERSION_FILE);
        if !dir.exists() || !version.exists() {
            return Err(DbError::Missing(dir.to_path_buf()));
        }
        let found = std::fs::read_to_string(&version).map_err(io_err("read", &version))?;
        if found.trim() != FORMAT {
            return Err(DbError::Incompatible {
                dir: dir.to_path_buf(),
                found: found.trim().chars().take(80).collect(),
            });
        }
        let lock = DirLock::take(dir)?;
        let mut settings = Settings::load(Some(dir), command_line)?;
        let (aio, pool) = Self::start_io(dir, &settings)?;
        if let Some(reason) = aio.fallback_reason() {
            settings.record_fallback("io_method", aio.method().name(), fallback_note(reason))?;
        }
        let txn = TxnManager::open(dir)?;
        let control = ControlData::read(dir)?;
        let redo = recovery::read_checkpoint(dir, control.checkpoint)?;
        // With the command line's zero_damaged_pages and
        // ignore_checksum_failure, so that a damaged catalog page can be
        // got past the way a table's can.
        let mut s = pool.session(buffer_settings(&settings))?;
        // Replay runs before the WAL is open for inserting: nothing is
        // logged, and pages are written without the WAL rule (what they
        // carry is on disk already).
        let (report, tail) = recovery::replay(
            dir,
            &mut s,
            &txn,
            redo,
            control.checkpoint,
            recovery::ReplayOptions {
                prefetch: settings.recovery_prefetch(),
                limits: stream_limits(&settings),
            },
        )?;
        let crashed = control.state != DbState::ShutDown;
        if crashed {
            // Only a crash leaves anything past the end that could pass
            // for a record (a torn write's later blocks); a clean
            // shutdown's log ends in zeros or recycled records.
            recovery::cut_log_tail(dir, report.end)?;
        }
        let wal = Wal::open(
            dir,
            &aio,
            wal_config(&settings),
            report.last,
            report.end,
            &tail,
            redo,
        )?;
        {
            let wal = Arc::clone(&wal);
            pool.register_wal_flush(Arc::new(move |lsn| {
                wal.flush(lsn).map_err(|e| crate::buffer::WalFlushFailure {
                    reason: e.to_string(),
                    sqlstate: e.sqlstate(),
                })
            }));
        }
        let heap = Heap::new(Arc::clone(&txn), Arc::clone(&wal));
        let catalog = Catalog::load(&mut s, &heap)?;
        // A directory without roles (new, or made before roles existed)
        // gets its owner's role, named after the user owning it
        // (catalog/roles.rs).
        {
            use std::os::unix::fs::MetadataExt;
            let owner = std::fs::metadata(dir).map_err(io_err("read", dir))?.uid();
            let owner = crate::catalog::role_name_for_uid(owner);
            if catalog.ensure_owner_role(&mut s, &heap, &owner)? {
                log::info!("added role \"{owner}\" (superuser, no password) for the data directory's owner");
            }
        }
        if crashed && !s.settings.zero_damaged_pages {
            // A file created for a table whose catalog rows never became
            // durable (CREATE TABLE did not return): nobody can reach it.
            let known = catalog.relation_names();
            let base = dir.join(BASE_DIR);
            for rel in recovery::table_files(&base, crate::catalog::FIRST_USER_REL)? {
                if !known.contains_key(&rel) {
                    log::warn!("recovery: removing files of relation {rel}, which no table owns");
                    s.discard_relation(rel)?;
                    pool.relation(rel).unlink()?;
                }
            }
        }
        drop(s);
        let statistics =
            crate::catalog::statistics::Statistics::load(dir, &catalog.column_types_by_oid());
        let checkpointer = Arc::new(Checkpointer::new(
            dir.to_path_buf(),
            settings.clone(),
            Arc::clone(&pool),
            Arc::clone(&wal),
            Arc::clone(&txn),
        ));
        let db = Arc::new(Database {
            dir: dir.to_path_buf(),
            settings,
            aio,
            pool,
            txn,
            heap,
            btree: crate::btree::Btree::new(Arc::clone(&wal)),
            catalog,
            statistics,
            wal,
            checkpointer,
            crash_on_close: std::sync::atomic::AtomicBool::new(false),
            background: Arc::new(Background::default()),
            recovery: crashed.then_some(report),
            _lock: lock,
        });
        if let Some(r) = &db.recovery {
            let prefetched = r.prefetch.as_ref().map_or(String::new(), |p| {
                format!(
                    "; read ahead {} blocks in {} reads, waited {} times; not read ahead: {} with an image, {} behind an image, {} of a relation being changed, {} past the end of their file",
                    p.blocks_noted,
                    p.stream.ios,
                    p.stream.waits,
                    p.skipped_image,
                    p.skipped_image_pending,
                    p.skipped_storage_change,
                    p.skipped_past_end
                )
            });
            log::info!(
                "recovery: replayed {} records from {} to {} in {:.3} s ({} page changes, {} images{prefetched}); the log ends there: {}",
                r.records,
                crate::wal::format_lsn(r.from),
                crate::wal::format_lsn(r.end),
                r.elapsed.as_secs_f64(),
                r.pages_changed,
                r.images_restored,
                r.end_reason
            );
            db.checkpointer.run(CheckpointCause::EndOfRecovery)?;
        } else {
            // From now on a crash must be recovered from.
            ControlData {
                state: DbState::InProduction,
                ..control
            }
            .write(dir)?;
        }
        Background::start(&db);
        Ok(db)
    }

    /// What start-up replayed, if the database had not been shut down
    /// cleanly.
    pub fn recovery(&self) -> Option<&recovery::RecoveryReport> {
        self.recovery.as_ref()
    }

    pub fn wal(&self) -> &Arc<Wal> {
        &self.wal
    }

    /// Makes closing behave as `kill -9` would: no shutdown checkpoint,
    /// dirty buffers lost, what was written left as it is. For tests of
    /// recovery in one process (the next open replays the WAL).
    pub fn simulate_crash(&self) {
        self.crash_on_close
            .store(true, std::sync::atomic::Ordering::SeqCst);
        // A killed process has no background threads either.
        self.checkpointer.hurry_for_close();
        self.background.stop();
    }

    /// Writes a checkpoint at full speed (see `checkpoint`): `CHECKPOINT`,
    /// or with `shutdown` the one that marks the database cleanly shut
    /// down (nothing may change after it). A spread checkpoint in progress
    /// is made to hurry and finishes first.
    pub fn checkpoint(&self, shutdown: bool) -> Result<Lsn, DbError> {
        self.checkpointer.run(if shutdown {
            CheckpointCause::Shutdown
        } else {
            CheckpointCause::Requested
        })
    }

    /// Writes a checkpoint for `cause`: spread over
    /// `checkpoint_completion_target` for the automatic causes (what the
    /// checkpointer thread runs), at full speed for the others.
    pub fn run_checkpoint(&self, cause: CheckpointCause) -> Result<Lsn, DbError> {
        self.checkpointer.run(cause)
    }

    /// What the checkpoints since opening did (`stat_checkpointer`).
    pub fn checkpointer_stats(&self) -> CheckpointerStats {
        self.checkpointer.stats()
    }

    /// What the background writer did since opening (`stat_bgwriter`).
    pub fn bgwriter_stats(&self) -> BgwriterStats {
        *self.background.bgwriter.lock()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where statements spill temporary files ([`TEMP_DIR`]).
    pub fn temp_dir(&self) -> PathBuf {
        self.dir.join(TEMP_DIR)
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn aio(&self) -> &Arc<Aio> {
        &self.aio
    }

    pub fn pool(&self) -> &Arc<BufferPool> {
        &self.pool
    }

    pub fn txn(&self) -> &Arc<TxnManager> {
        &self.txn
    }

    pub fn heap(&self) -> &Heap {
        &self.heap
    }

    pub fn btree(&self) -> &crate::btree::Btree {
        &self.btree
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    pub fn statistics(&self) -> &crate::catalog::statistics::Statistics {
        &self.statistics
    }

    /// Starts a session (a thread's connection to the database).
    pub fn session(self: &Arc<Self>) -> Result<Session, DbError> {
        let settings = self.settings.clone();
        let buf = self.pool.session(buffer_settings(&settings))?;
        Ok(Session {
            db: LocalArc::new(self),
            buf,
            settings,
            xact: None,
            implicit: None,
            interrupt: crate::txn::Interrupt::NONE,
            suspended_serial: 0,
            slot: self.txn.session_slot(),
        })
    }
}

/// What the background writer did (PostgreSQL's pg_stat_bgwriter).
#[derive(Debug, Clone, Copy, Default)]
pub struct BgwriterStats {
    /// Rounds run, buffers written, and rounds that stopped at
    /// `bgwriter_lru_maxpages` with more to write (maxwritten_clean).
    pub rounds: u64,
    pub buffers_clean: u64,
    pub maxwritten_clean: u64,
}

/// How fast the background writer's estimate of the buffers sessions take
/// per round follows a drop (PostgreSQL's smoothing_samples = 16); it
/// follows a rise at once.
const BGWRITER_SMOOTHING_SAMPLES: f64 = 16.0;
/// Writes the background writer keeps in flight within a round.
const BGWRITER_WRITES_IN_FLIGHT: usize = 8;

/// The background threads' controls.
#[derive(Default)]
struct Background {
    stop: parking_lot::Mutex<bool>,
    wake: parking_lot::Condvar,
    threads: parking_lot::Mutex<Vec<std::thread::JoinHandle<()>>>,
    bgwriter: parking_lot::Mutex<BgwriterStats>,
}

impl Background {
    fn start(db: &Arc<Database>) {
        let mut threads = Vec::new();
        {
            let wal = Arc::downgrade(&db.wal);
            let ctl = Arc::clone(&db.background);
            let delay = db.settings.wal_writer_delay();
            threads.push(Self::spawn("aiostore-walwriter", move || {
                Background::run_walwriter(&ctl, &wal, delay)
            }));
        }
        {
            let ckpt = Arc::clone(&db.checkpointer);
            let ctl = Arc::clone(&db.background);
            let settings = (
                db.settings.wal_writer_delay(),
                db.settings.checkpoint_timeout(),
                db.settings.max_wal_size_bytes(),
            );
            threads.push(Self::spawn("aiostore-checkpointer", move || {
                Background::run_checkpointer(&ctl, &ckpt, settings)
            }));
        }
        if db.settings.bgwriter_lru_maxpages() > 0 {
            let pool = Arc::clone(&db.pool);
            let ctl = Arc::clone(&db.background);
            let settings = (
                db.settings.bgwriter_delay(),
                db.settings.bgwriter_lru_maxpages(),
                db.settings.bgwriter_lru_multiplier(),
            );
            threads.push(Self::spawn("aiostore-bgwriter", move || {
                if let Err(e) = Background::run_bgwriter(&ctl, &pool, settings) {
                    log::error!("the background writer stopped: {e}");
                }
            }));
        }
        *db.background.threads.lock() = threads;
    }

    fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> std::thread::JoinHandle<()> {
        std::thread::Builder::new()
            .name(name.into())
            .spawn(f)
            .unwrap_or_else(|e| panic!("could not start the {name} thread: {e}"))
    }

    /// Sleeps `delay` or until stopped; returns whether to go on.
    fn pause(&self, delay: std::time::Duration) -> bool {
        let mut stop = self.stop.lock();
        if !*stop {
            self.wake.wait_for(&mut stop, delay);
        }
        !*stop
    }

    /// Every `wal_writer_delay`: flushes WAL inserted but not flushed (what
    /// asynchronous commits left), so that a crash loses at most about
    /// that much.
    fn run_walwriter(ctl: &Background, wal: &std::sync::Weak<Wal>, delay: std::time::Duration) {
        while ctl.pause(delay) {
            let Some(wal) = wal.upgrade() else { return };
            if wal.is_stopped() {
                return;
            }
            if wal.insert_position() > wal.flushed() {
                if let Err(e) = wal.flush_all() {
                    log::error!("background WAL flush failed: {e}");
                }
            }
        }
    }

    /// Starts a spread checkpoint when `checkpoint_timeout` has passed or
    /// half of `max_wal_size` has been written since the last one (looked
    /// at every `wal_writer_delay`).
    fn run_checkpointer(
        ctl: &Background,
        ckpt: &Checkpointer,
        (delay, timeout, max_wal): (std::time::Duration, std::time::Duration, u64),
    ) {
        let mut last_checkpoint = std::time::Instant::now();
        while ctl.pause(delay) {
            let wal = ckpt.wal();
            if wal.is_stopped() {
                return;
            }
            let cause = if last_checkpoint.elapsed() >= timeout {
                CheckpointCause::Timed
            } else if wal.insert_position().saturating_sub(wal.redo()) >= max_wal / 2 {
                CheckpointCause::WalSize
            } else {
                continue;
            };
            if let Err(e) = ckpt.run(cause) {
                log::error!("background checkpoint failed: {e}");
            }
            last_checkpoint = std::time::Instant::now();
        }
    }

    /// Every `bgwriter_delay`: writes the dirty buffers just ahead of the
    /// clock sweep that the sessions are expected to take before the next
    /// round (`bgwriter_lru_multiplier` × the buffers they took per round
    /// lately), at most `bgwriter_lru_maxpages`, so that sessions find
    /// clean victims instead of writing them (PostgreSQL's BgBufferSync).
    /// Its writes are finished within the round.
    fn run_bgwriter(
        ctl: &Background,
        pool: &Arc<BufferPool>,
        (delay, maxpages, multiplier): (std::time::Duration, u64, f64),
    ) -> Result<(), DbError> {
        let mut s = pool.session(SessionSettings::default())?;
        // Its writes pin their buffers: at most a session's share.
        let mut wb =
            crate::buffer::WriteBehind::new(BGWRITER_WRITES_IN_FLIGHT.min(pool.pin_limit()));
        let nbuffers = u64::from(pool.nbuffers());
        let allocs = || {
            pool.stats()
                .allocs
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        let mut last_allocs = allocs();
        let mut smoothed = 0.0f64;
        while ctl.pause(delay) {
            let now = allocs();
            let recent = (now - last_allocs) as f64;
            last_allocs = now;
            smoothed = if recent > smoothed {
                recent
            } else {
                smoothed + (recent - smoothed) / BGWRITER_SMOOTHING_SAMPLES
            };
            let wanted = (smoothed * multiplier).ceil() as u64;
            if wanted == 0 {
                continue;
            }
            wb.restart_at_clock();
            let cleaned = s.clean_ahead_of_clock(
                &mut wb,
                crate::buffer::CleanLimits {
                    scan: nbuffers,
                    ahead: nbuffers,
                    writes: maxpages,
                    reusable: wanted,
                },
            );
            let finished = s.finish_write_behind(&mut wb);
            let mut stats = ctl.bgwriter.lock();
            stats.rounds += 1;
            match (cleaned, finished) {
                (Ok(outcome), Ok(())) => {
                    stats.buffers_clean += outcome.written;
                    stats.maxwritten_clean += u64::from(outcome.hit_write_limit);
                }
                // Its buffers stay dirty, for a session or the next
                // checkpoint to write (and report).
                (Err(e), _) | (_, Err(e)) => {
                    log::warn!("the background writer could not write: {e}")
                }
            }
        }
        Ok(())
    }

    /// Stops the threads and waits for them.
    fn stop(&self) {
        *self.stop.lock() = true;
        self.wake.notify_all();
        let threads = std::mem::take(&mut *self.threads.lock());
        for h in threads {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        // A spread checkpoint in progress finishes at full speed.
        self.checkpointer.hurry_for_close();
        self.background.stop();
        if self
            .crash_on_close
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            return;
        }
        if self.wal.is_stopped() {
            log::error!(
                "\"{}\" closes without a shutdown checkpoint: the WAL stopped; the next start recovers",
                self.dir.display()
            );
            return;
        }
        if let Err(e) = self.checkpoint(true) {
            log::error!(
                "could not write the shutdown checkpoint of \"{}\": {e}; the next start recovers",
                self.dir.display()
            );
        }
    }
}

fn wal_config(settings: &Settings) -> WalConfig {
    let direct = settings.io_direct().wal;
    WalConfig {
        direct,
        sync_method: SyncMethod::from_setting(settings.wal_sync_method(), direct)
            .expect("the setting's values are the sync methods and auto"),
        io_concurrency: settings.wal_io_concurrency(),
        buffers: settings.wal_buffers() * crate::storage::BLOCK_SIZE,
        full_page_writes: settings.full_page_writes(),
    }
}

/// A checkpoint record's data: its redo point and the time.
fn checkpoint_data(redo: Lsn) -> Vec<u8> {
    let mut d = redo.to_le_bytes().to_vec();
    d.extend_from_slice(&now_secs().to_le_bytes());
    d
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// How a fallback from io_uring is shown next to io_method.
pub fn fallback_note(reason: &str) -> String {
    format!("fell back to worker: {reason}")
}

/// Stream sizing from `settings`.
fn stream_limits(settings: &Settings) -> StreamLimits {
    StreamLimits {
        effective_io_concurrency: settings.effective_io_concurrency(),
        maintenance_io_concurrency: settings.maintenance_io_concurrency(),
    }
}

fn buffer_settings(settings: &Settings) -> SessionSettings {
    SessionSettings {
        zero_damaged_pages: settings.zero_damaged_pages(),
        ignore_checksum_failure: settings.ignore_checksum_failure(),
        io_combine_limit: settings.io_combine_limit(),
    }
}

/// Isolation of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// A new snapshot per statement.
    ReadCommitted,
    /// One snapshot for the whole transaction.
    RepeatableRead,
}

/// Where a session stands between statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionStatus {
    /// In no transaction block.
    Idle,
    /// In a transaction block (BEGIN).
    InBlock,
    /// In a transaction block a failed statement has doomed: only
    /// ROLLBACK ends it.
    Failed,
}

/// What groups statements outside a transaction block into one
/// transaction, as PostgreSQL's wire protocol does (see
/// [`Session::begin_implicit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Implicit {
    /// A simple Query message's several statements (PostgreSQL's implicit
    /// transaction block): they commit together when the last one is
    /// done, and an error in any rolls back those before it.
    Statements,
    /// The extended protocol's statements up to the next Sync.
    Pipeline,
}

/// A transaction in progress in a session.
struct Xact {
    /// Assigned at the first write.
    xid: Option<Xid>,
    /// Command (statement) counter within the transaction.
    command: CommandId,
    isolation: Isolation,
    /// The transaction's snapshot under repeatable read.
    snapshot: Option<SnapshotGuard>,
    /// Opened by BEGIN (else it is the statement's own, or an implicit
    /// transaction's).
    explicit: bool,
    /// Opened for statements that [`Session::begin_implicit`] groups:
    /// a statement that succeeds leaves it open (a failed one rolls it
    /// back), and [`Session::end_implicit`] commits it. Never together
    /// with `explicit`: BEGIN turns an implicit transaction into a block.
    implicit: bool,
    /// A statement failed: only ROLLBACK (or COMMIT, which rolls back) is
    /// accepted.
    failed: bool,
    /// Tables it created: pending in the catalog, their pages not logged,
    /// until it ends (synced and published at commit, removed at abort).
    created: Vec<Arc<crate::catalog::TableDef>>,
    /// When it began (BEGIN, or its one statement's start): what SQL's
    /// `now()` and `CURRENT_TIMESTAMP` report throughout it.
    started: std::time::SystemTime,
    /// Whose its table locks are (and its xid's, once it has one).
    owner: crate::txn::LockOwner,
    /// The table locks it holds, each (table oid, mode) once, released
    /// together as it ends.
    locks: Vec<(u32, crate::txn::LockMode)>,
    /// Tables it truncated: new files until it ends (the new heap file
    /// synced at commit, as a created table's), then the old ones go at
    /// commit or the new ones at abort.
    truncated: Vec<crate::catalog::Truncation>,
    /// Tables it dropped: gone from the catalog, their files removed once
    /// it commits (or the tables back if it aborts).
    dropped: Vec<crate::catalog::Dropped>,
    /// Statements stopped partway (portals at their row limit), closed
    /// as it ends.
    suspended: Vec<(SuspendedId, Box<dyn SuspendedRun>)>,
}

/// A statement stopped partway and kept by its transaction, to go on in a
/// later call of the same transaction: a portal that returned its row
/// limit, holding its plan tree (pins, read streams) and its snapshot. It
/// is a layer above, reached through this trait as the AIO callbacks are.
/// The transaction closes what is left of them as it ends, before it lets
/// go of its locks, so none outlives the locks and snapshot it ran under
/// (PostgreSQL drops a transaction's portals at its commit, too).
pub trait SuspendedRun: std::any::Any + Send {
    /// Gives back what the run holds; it is not resumed after.
    fn close(&mut self, s: &mut Session);

    /// Whether it reads table `oid` (which must then stay as it is).
    fn reads_table(&self, oid: u32) -> bool;
}

/// Names a [`SuspendedRun`] within its session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SuspendedId(u64);

impl Xact {
    fn new(owner: crate::txn::LockOwner, isolation: Isolation, explicit: bool) -> Xact {
        Xact {
            owner,
            locks: Vec::new(),
            truncated: Vec::new(),
            dropped: Vec::new(),
            xid: None,
            command: 0,
            isolation,
            snapshot: None,
            explicit,
            implicit: false,
            failed: false,
            created: Vec::new(),
            started: std::time::SystemTime::now(),
            suspended: Vec::new(),
        }
    }
}

/// Errors of transaction control.
#[derive(Debug, Error)]
pub enum XactError {
    #[error("current transaction is aborted, commands ignored until end of transaction block (ROLLBACK)")]
    Aborted,
    #[error("there is already a transaction in progress")]
    AlreadyInProgress,
    #[error("there is no transaction in progress")]
    NotInProgress,
    #[error("{0} cannot run inside a transaction block")]
    NotInBlock(&'static str),
    #[error("SET TRANSACTION ISOLATION LEVEL must be called before any query")]
    IsolationAfterQuery,
    #[error(transparent)]
    Txn(#[from] TxnError),
    #[error(transparent)]
    Wal(#[from] WalError),
    #[error("could not commit: the table \"{table}\" it created could not be made durable ({source}); the transaction was rolled back")]
    SyncCreated { table: String, source: Box<DbError> },
    #[error("the transaction ended, but the files of tables it created could not all be removed ({0}); start-up after a crash removes them")]
    RemoveCreated(Box<DbError>),
}

impl XactError {
    /// PostgreSQL's SQLSTATE for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            XactError::Aborted => "25P02",             // in_failed_sql_transaction
            XactError::AlreadyInProgress => "25001",   // active_sql_transaction
            XactError::NotInProgress => "25P01",       // no_active_sql_transaction
            XactError::NotInBlock(_) => "25001",       // active_sql_transaction
            XactError::IsolationAfterQuery => "25001", // active_sql_transaction
            XactError::Txn(e) => e.sqlstate(),
            XactError::Wal(e) => e.sqlstate(),
            // The file operation that failed says what went wrong.
            XactError::SyncCreated { source, .. } => source.sqlstate(),
            XactError::RemoveCreated(source) => source.sqlstate(),
        }
    }
}

/// One thread's connection: its buffer session, settings and transaction.
pub struct Session {
    /// The session's own handle: its clones do not write the database's
    /// count (`local_arc.rs`).
    db: LocalArc<Database>,
    pub buf: BufferSession,
    pub settings: Settings,
    xact: Option<Xact>,
    /// Set between [`Session::begin_implicit`] and
    /// [`Session::end_implicit`]: a transaction a statement opens outside
    /// a block is implicit (stays open after it).
    implicit: Option<Implicit>,
    /// What stops the running statement from outside: a cancel flag, if
    /// someone can cancel (a server's connection), and the
    /// statement_timeout deadline, set as each statement starts.
    interrupt: crate::txn::Interrupt,
    /// The last [`SuspendedId`] given out.
    suspended_serial: u64,
    /// This session's place in the transaction manager: its weak table
    /// locks, its snapshots' xmins, its lock owner ids (`txn/slot.rs`).
    slot: Arc<crate::txn::SessionSlot>,
}

impl Session {
    pub fn db(&self) -> &LocalArc<Database> {
        &self.db
    }

    /// The database and the buffer session at once, borrowed apart: what
    /// a caller that needs both should use instead of cloning the
    /// database's `Arc`, whose count is the one line every session's
    /// clone writes (`local_arc.rs`).
    pub fn db_and_buf(&mut self) -> (&LocalArc<Database>, &mut BufferSession) {
        (&self.db, &mut self.buf)
    }

    /// Stream sizing from this session's settings.
    pub fn stream_limits(&self) -> StreamLimits {
        stream_limits(&self.settings)
    }

    /// Applies changed settings to the buffer session.
    pub fn settings_changed(&mut self) {
        self.buf.settings = buffer_settings(&self.settings);
    }

    /// How this session's transaction waits for another's
    /// (`deadlock_timeout`, `lock_timeout`).
    pub fn wait_limits(&self) -> crate::txn::WaitLimits {
        crate::txn::WaitLimits {
            deadlock_timeout: self.settings.deadlock_timeout(),
            lock_timeout: self.settings.lock_timeout(),
            interrupt: self.interrupt.clone(),
        }
    }

    /// Makes `flag` the one that cancels this session's running
    /// statement: another thread (a server's cancel request) sets it, and
    /// whoever starts statements clears it.
    pub fn set_cancel_flag(&mut self, flag: Arc<std::sync::atomic::AtomicBool>) {
        self.interrupt.cancel = Some(flag);
    }

    /// What stops the running statement, for work that cannot ask the
    /// session while it runs (an index build's heap scan).
    pub fn interrupt(&self) -> crate::txn::Interrupt {
        self.interrupt.clone()
    }

    /// Whether the running statement is to stop (canceled, or past its
    /// statement_timeout): the executor asks between batches.
    pub fn check_interrupts(&self) -> Result<(), crate::txn::Interrupted> {
        self.interrupt.check()
    }

    /// Where the session stands between statements, as the wire
    /// protocol's ReadyForQuery reports it.
    pub fn transaction_status(&self) -> TransactionStatus {
        match &self.xact {
            Some(x) if x.explicit && x.failed => TransactionStatus::Failed,
            Some(x) if x.explicit => TransactionStatus::InBlock,
            _ => TransactionStatus::Idle,
        }
    }

    /// Whether a transaction is open: a block, or an implicit one that a
    /// statement opened.
    pub fn in_transaction(&self) -> bool {
        self.xact.is_some()
    }

    pub fn in_transaction_block(&self) -> bool {
        self.xact.as_ref().is_some_and(|x| x.explicit)
    }

    /// The isolation of the transaction block in progress; outside a
    /// block, read committed (what each statement's own transaction runs
    /// at, and what `SHOW transaction_isolation` reports there).
    pub fn isolation(&self) -> Isolation {
        match &self.xact {
            Some(x) if x.explicit => x.isolation,
            _ => Isolation::ReadCommitted,
        }
    }

    /// BEGIN. In an implicit transaction it makes that transaction the
    /// block, with the statements already run in it (PostgreSQL's
    /// implicit block becoming a real one): those commit or roll back
    /// with the block. A different isolation can be asked for only
    /// before any of them read (PostgreSQL's "SET TRANSACTION ISOLATION
    /// LEVEL must be called before any query").
    pub fn begin(&mut self, isolation: Isolation) -> Result<(), XactError> {
        if self.in_transaction_block() {
            return Err(XactError::AlreadyInProgress);
        }
        if let Some(x) = self.xact.as_mut() {
            debug_assert!(
                x.implicit,
                "between statements only an implicit transaction is open"
            );
            if x.isolation != isolation && x.command > 0 {
                return Err(XactError::IsolationAfterQuery);
            }
            x.isolation = isolation;
            x.implicit = false;
            x.explicit = true;
            return Ok(());
        }
        self.xact = Some(Xact::new(self.slot.new_owner(), isolation, true));
        Ok(())
    }

    /// Groups the statements that follow, outside a transaction block, into
    /// one transaction until [`Self::end_implicit`], as PostgreSQL does
    /// with a simple query's several statements and with the extended
    /// protocol's statements up to a Sync: each leaves the transaction
    /// open for the next; a failure rolls it back (the ones before it
    /// too); COMMIT or ROLLBACK end it early (with PostgreSQL's warning,
    /// see [`Self::in_implicit_transaction`]) and the next statement
    /// opens another; BEGIN makes it a block. Inside a block it changes
    /// nothing.
    pub fn begin_implicit(&mut self, kind: Implicit) {
        debug_assert!(
            self.xact.as_ref().is_none_or(|x| x.explicit),
            "statements of their own end their transaction"
        );
        self.implicit = Some(kind);
    }

    /// Ends what [`Self::begin_implicit`] began: commits the implicit
    /// transaction open, if any (a block stays open). Afterwards each
    /// statement outside a block commits on its own again.
    pub fn end_implicit(&mut self) -> Result<(), XactError> {
        self.implicit = None;
        self.commit_implicit()
    }

    /// What groups statements now, if anything.
    pub fn implicit(&self) -> Option<Implicit> {
        self.implicit
    }

    /// Whether an implicit transaction is open (statements ran in it, no
    /// BEGIN): a COMMIT or ROLLBACK now ends it, with PostgreSQL's
    /// warning that there is no transaction (block) in progress.
    pub fn in_implicit_transaction(&self) -> bool {
        self.xact.as_ref().is_some_and(|x| x.implicit)
    }

    /// Rolls back the implicit transaction open, if any, leaving the
    /// grouping on: an error outside a statement (a Bind's bad value)
    /// ends it as a statement's error would.
    pub fn rollback_implicit(&mut self) -> Result<(), XactError> {
        if !self.in_implicit_transaction() {
            return Ok(());
        }
        let x = self.xact.take().expect("looked at above");
        self.end_xact(x, false)?;
        Ok(())
    }

    /// Commits the implicit transaction open, if any, leaving the
    /// grouping on: for a statement that must run in a transaction of
    /// its own (see `sql::commands::runs_outside_blocks`), the ones
    /// before it commit first.
    pub fn commit_implicit(&mut self) -> Result<(), XactError> {
        if !self.in_implicit_transaction() {
            return Ok(());
        }
        let x = self.xact.take().expect("looked at above");
        debug_assert!(
            !x.failed,
            "a failure rolls an implicit transaction back at once"
        );
        self.end_xact(x, true)?;
        Ok(())
    }

    /// COMMIT (a failed transaction rolls back instead). Returns whether
    /// it committed.
    pub fn commit(&mut self) -> Result<bool, XactError> {
        let Some(x) = self.xact.take() else {
            return Err(XactError::NotInProgress);
        };
        let commit = !x.failed;
        self.end_xact(x, commit)
    }

    /// Ends transaction `x`: logs its end and records it, if it has an id.
    /// Returns whether it committed. A commit first makes the tables it
    /// created durable (their pages skipped the WAL), then waits for the
    /// log to be durable up to its record (with synchronous_commit) before
    /// anyone can see it committed, then publishes those tables; an abort
    /// removes them. If the log fails, the transaction counts as aborted
    /// here and the error says the database stopped; replay decides at
    /// the next start.
    fn end_xact(&mut self, mut x: Xact, commit: bool) -> Result<bool, XactError> {
        for (_, mut run) in std::mem::take(&mut x.suspended) {
            run.close(self);
        }
        let locks = std::mem::take(&mut x.locks);
        let owner = x.owner;
        let ended = self.end_xact_holding_locks(x, commit);
        // Last, as PostgreSQL releases them: whoever waited for a table
        // finds the transaction's changes (and its catalog's) settled.
        self.db.txn.release_locks_in(&self.slot, owner, &locks);
        debug_assert!(
            self.slot.fast_path_len() == 0,
            "a fast-path lock outlived its transaction"
        );
        ended
    }

    fn end_xact_holding_locks(&mut self, x: Xact, commit: bool) -> Result<bool, XactError> {
        let Some(xid) = x.xid else {
            assert!(
                x.created.is_empty() && x.truncated.is_empty() && x.dropped.is_empty(),
                "a transaction created, truncated or dropped tables without an id"
            );
            return Ok(commit);
        };
        let db = self.db.clone();
        // Before the commit record, and outside the gate (a large load's
        // sync must not hold back a checkpoint's start).
        let synced = if commit {
            let new_files: Vec<(&str, u32)> = x
                .created
                .iter()
                .map(|d| d.as_ref())
                .chain(x.truncated.iter().map(|t| t.new.as_ref()))
                .map(|d| (d.name(), d.heap.rel))
                .collect();
            self.sync_created(xid, &new_files)
        } else {
            Ok(())
        };
        let commit = commit && synced.is_ok();
        let logged = {
            let _gate = db.checkpointer.commit_gate.read();
            let info = if commit { XACT_COMMIT } else { XACT_ABORT };
            let logged = db
                .wal
                .insert(Rmgr::Xact, info, xid, &[], &now_secs().to_le_bytes())
                .and_then(|end| {
                    if commit && self.settings.synchronous_commit() {
                        db.wal.flush(end)
                    } else {
                        Ok(())
                    }
                });
            let committed = commit && logged.is_ok();
            db.txn.finish(xid, committed)?;
            logged
        };
        if commit && logged.is_ok() {
            db.catalog.commit_created(xid, &x.created);
            // Committed already: a file left behind is only space, which
            // start-up after a crash takes back (each failure is logged).
            let _ = db
                .catalog
                .commit_truncated(&mut self.buf, &db.heap, &x.truncated);
            let _ = db
                .catalog
                .commit_dropped(&mut self.buf, &db.heap, &x.dropped);
            let gone = x.truncated.iter().flat_map(|t| &t.old_indexes);
            for index in gone.chain(x.dropped.iter().flat_map(|d| &d.indexes)) {
                db.btree.forget(index.rel);
            }
            return Ok(true);
        }
        for index in x.truncated.iter().flat_map(|t| &t.new_indexes) {
            db.btree.forget(index.rel);
        }
        let untruncated = db
            .catalog
            .abort_truncated(&mut self.buf, &db.heap, &x.truncated);
        let removed = if x.created.is_empty() {
            untruncated
        } else {
            let removed = db
                .catalog
                .abort_created(&mut self.buf, &db.heap, xid, &x.created);
            untruncated.and(removed)
        };
        synced?;
        logged?;
        removed.map_err(|e| XactError::RemoveCreated(Box::new(e.into())))?;
        Ok(false)
    }

    /// Makes the table files transaction `xid` made (tables it created,
    /// and the new files of tables it truncated; each `(table, rel)`)
    /// durable before its commit is logged: the pages of each that skipped the WAL are
    /// written and its files synced, then the directory holding them
    /// (their names must survive a crash too: replaying the creation of
    /// a lost file would bring it back empty).
    fn sync_created(&mut self, xid: Xid, new_files: &[(&str, u32)]) -> Result<(), XactError> {
        let db = self.db.clone();
        let mut any_synced = false;
        for &(table, rel) in new_files {
            any_synced |= db.heap.end_wal_skip(&mut self.buf, rel, xid).map_err(|e| {
                XactError::SyncCreated {
                    table: table.to_string(),
                    source: Box::new(e.into()),
                }
            })?;
        }
        if any_synced {
            let base = db.dir.join(BASE_DIR);
            crate::wal::sync_dir(&base).map_err(|e| XactError::SyncCreated {
                table: new_files
                    .first()
                    .map_or(String::new(), |(t, _)| t.to_string()),
                source: Box::new(e.into()),
            })?;
        }
        Ok(())
    }

    /// Whether the running transaction created or truncated table `oid`:
    /// its file is new in the transaction, and no one else can have seen
    /// a row of it (COPY FREEZE's condition).
    pub fn new_files_in_transaction(&self, oid: u32) -> bool {
        self.xact.as_ref().is_some_and(|x| {
            x.created.iter().any(|d| d.oid == oid) || x.truncated.iter().any(|t| t.new.oid == oid)
        })
    }

    /// Records a table the transaction dropped (its files go when it
    /// commits).
    pub fn dropped_table(&mut self, dropped: crate::catalog::Dropped) {
        let x = self
            .xact
            .as_mut()
            .expect("a table is dropped in a transaction");
        assert!(x.xid.is_some(), "a drop has the transaction's id");
        x.dropped.push(dropped);
    }

    /// Records a table the transaction truncated (new files until it
    /// ends).
    pub fn truncated_table(&mut self, truncation: crate::catalog::Truncation) {
        let x = self
            .xact
            .as_mut()
            .expect("a table is truncated in a transaction");
        assert!(x.xid.is_some(), "a truncation has the transaction's id");
        x.truncated.push(truncation);
    }

    /// Records a table the transaction created (pending until it ends).
    pub fn created_table(&mut self, def: Arc<crate::catalog::TableDef>) {
        let x = self
            .xact
            .as_mut()
            .expect("a table is created in a transaction");
        assert_eq!(def.creator(), x.xid, "the table is this transaction's");
        x.created.push(def);
    }

    /// The running transaction's id, if it has one: the statements of a
    /// transaction that created a table (which took an id) see it.
    pub fn current_xid(&self) -> Option<Xid> {
        self.xact.as_ref().and_then(|x| x.xid)
    }

    /// When the open transaction began (PostgreSQL's transaction start
    /// time), if one is open: a block's BEGIN, or the running statement's
    /// own transaction.
    pub fn transaction_start(&self) -> Option<std::time::SystemTime> {
        self.xact.as_ref().map(|x| x.started)
    }

    /// A lower bound for the xmin of the snapshot the next statement reads
    /// with: the transaction's own under repeatable read once taken, else
    /// that of a snapshot taken now (one taken later has no lower one).
    /// The planner leaves out indexes such a snapshot may not use
    /// (`IndexDef::usable_by`).
    pub fn snapshot_xmin_bound(&self) -> Xid {
        match self.xact.as_ref().and_then(|x| x.snapshot.as_ref()) {
            Some(guard) => guard.snapshot().xmin,
            None => self.db.txn.xmin_now(),
        }
    }

    /// ROLLBACK.
    pub fn rollback(&mut self) -> Result<(), XactError> {
        let Some(x) = self.xact.take() else {
            return Err(XactError::NotInProgress);
        };
        self.end_xact(x, false)?;
        Ok(())
    }

    /// Starts a statement: opens its transaction if none is open and
    /// returns the snapshot it reads with.
    pub fn start_statement(&mut self) -> Result<StatementSnapshot, XactError> {
        self.interrupt.deadline = self
            .settings
            .statement_timeout()
            .map(|t| std::time::Instant::now() + t);
        if self.xact.is_none() {
            let mut x = Xact::new(self.slot.new_owner(), Isolation::ReadCommitted, false);
            x.implicit = self.implicit.is_some();
            self.xact = Some(x);
        }
        // Borrowed, not cloned: a clone of the manager's (or the
        // database's) Arc is a write to the one line every session's
        // statements share (`txn/slot.rs`).
        let (txn, slot) = (&self.db.txn, &self.slot);
        let x = self.xact.as_mut().expect("opened above");
        if x.failed {
            return Err(XactError::Aborted);
        }
        x.command += 1;
        let command = x.command;
        let snapshot = match x.isolation {
            Isolation::ReadCommitted => {
                StatementSnapshot::Own(txn.snapshot_in(slot, x.xid, command))
            }
            Isolation::RepeatableRead => {
                let guard = x
                    .snapshot
                    .get_or_insert_with(|| txn.snapshot_in(slot, x.xid, command));
                guard.set_command(command);
                StatementSnapshot::Transaction(guard.snapshot().clone())
            }
        };
        Ok(snapshot)
    }

    /// Keeps `run`, a statement stopped partway, with the transaction
    /// until [`Session::resume`] takes it back or the transaction ends.
    pub fn suspend(&mut self, run: Box<dyn SuspendedRun>) -> SuspendedId {
        self.suspended_serial += 1;
        let id = SuspendedId(self.suspended_serial);
        let x = self
            .xact
            .as_mut()
            .expect("a statement is suspended inside its transaction");
        assert!(
            x.implicit || x.explicit,
            "a statement's own transaction ends with it: nothing can go on later"
        );
        x.suspended.push((id, run));
        id
    }

    /// Takes back the suspended statement `id`, to go on with it: `None`
    /// if its transaction ended (which closed it) or it was taken. Sets
    /// the statement_timeout deadline for this part of its run, as each
    /// Execute of a portal has its own in PostgreSQL.
    pub fn resume(&mut self, id: SuspendedId) -> Option<Box<dyn SuspendedRun>> {
        let x = self.xact.as_mut()?;
        let at = x.suspended.iter().position(|&(i, _)| i == id)?;
        self.interrupt.deadline = self
            .settings
            .statement_timeout()
            .map(|t| std::time::Instant::now() + t);
        Some(x.suspended.swap_remove(at).1)
    }

    /// Closes the suspended statement `id`, if its transaction still
    /// holds it (a portal closed by its client).
    pub fn close_suspended(&mut self, id: SuspendedId) {
        let taken = self.xact.as_mut().and_then(|x| {
            let at = x.suspended.iter().position(|&(i, _)| i == id)?;
            Some(x.suspended.swap_remove(at).1)
        });
        if let Some(mut run) = taken {
            run.close(self);
        }
    }

    /// Whether a statement the transaction holds stopped partway reads
    /// table `oid`.
    pub fn suspended_reads(&self, oid: u32) -> bool {
        self.xact
            .as_ref()
            .is_some_and(|x| x.suspended.iter().any(|(_, run)| run.reads_table(oid)))
    }

    /// Whether the transaction holds a statement stopped partway (whose
    /// reads go on after the statements that follow it).
    pub fn holds_suspended(&self) -> bool {
        self.xact.as_ref().is_some_and(|x| !x.suspended.is_empty())
    }

    /// Takes the statement's snapshot again under read committed (a
    /// statement that had to plan again after waiting for a table's lock
    /// reads what committed meanwhile, as PostgreSQL's snapshot is taken
    /// after its locks); repeatable read keeps the transaction's.
    pub fn retake_snapshot(&mut self, snapshot: &mut StatementSnapshot) {
        let x = self.xact.as_ref().expect("a statement is running");
        if let StatementSnapshot::Own(_) = snapshot {
            *snapshot =
                StatementSnapshot::Own(self.db.txn.snapshot_in(&self.slot, x.xid, x.command));
        }
    }

    /// The transaction id, assigned now if the transaction has none (its
    /// first write). The statement's snapshot treats it as its own.
    pub fn xid(&mut self, snapshot: &mut StatementSnapshot) -> Result<(Xid, CommandId), XactError> {
        let ids = self.write_ids()?;
        snapshot.set_own(ids.0);
        Ok(ids)
    }

    /// The transaction id and the statement's command, the id assigned
    /// now if the transaction has none: for a statement that writes the
    /// catalog without a snapshot (DROP TABLE).
    pub fn write_ids(&mut self) -> Result<(Xid, CommandId), XactError> {
        let x = self.xact.as_mut().ok_or(XactError::NotInProgress)?;
        let xid = match x.xid {
            Some(xid) => xid,
            None => {
                let xid = self.db.txn.assign_xid(x.owner)?;
                x.xid = Some(xid);
                if let Some(guard) = &mut x.snapshot {
                    guard.set_own(xid);
                }
                xid
            }
        };
        Ok((xid, x.command))
    }

    /// Ends a statement: commits or rolls back its own transaction, or
    /// marks a transaction block failed; in an implicit transaction, a
    /// success leaves it open and a failure rolls it back.
    pub fn end_statement(&mut self, ok: bool) -> Result<(), XactError> {
        let Some(x) = self.xact.as_mut() else {
            return Ok(());
        };
        if x.implicit && ok {
            return Ok(());
        }
        if x.explicit {
            if !ok && !x.failed {
                // As in PostgreSQL, the error ends the transaction now:
                // the rows and keys it holds are free for others at once
                // (a deadlock's other side goes on), and the block stays,
                // failed, until ROLLBACK.
                let mut failed = Xact::new(self.slot.new_owner(), x.isolation, true);
                failed.failed = true;
                failed.started = x.started;
                let x = self.xact.replace(failed).expect("looked at above");
                self.end_xact(x, false)?;
            }
            return Ok(());
        }
        if ok {
            self.commit()?;
        } else {
            self.rollback()?;
        }
        Ok(())
    }

    /// Locks table `oid` in `mode` until the transaction ends, unless it
    /// holds that lock already (or an AccessExclusive one, which covers
    /// every other): waiting as [`crate::txn::TxnManager::lock_table`]
    /// does, with this session's wait limits. Returns whether it waited.
    pub fn lock_table(
        &mut self,
        oid: u32,
        mode: crate::txn::LockMode,
    ) -> Result<bool, crate::txn::WaitError> {
        let x = self
            .xact
            .as_ref()
            .expect("tables are locked inside a transaction");
        if x.locks
            .iter()
            .any(|&(o, m)| o == oid && (m == mode || m == crate::txn::LockMode::AccessExclusive))
        {
            // A statement's second look (execute after plan_locked) costs
            // no lock of the shared manager.
            return Ok(false);
        }
        let limits = self.wait_limits();
        let x = self.xact.as_mut().expect("looked at above");
        let waited = self
            .db
            .txn
            .lock_table_in(&self.slot, x.owner, oid, mode, &limits)?;
        x.locks.push((oid, mode));
        Ok(waited)
    }

    /// [`Self::lock_table`] only if no one is in the way; false if
    /// someone is.
    pub fn try_lock_table(&mut self, oid: u32, mode: crate::txn::LockMode) -> bool {
        let x = self
            .xact
            .as_mut()
            .expect("tables are locked inside a transaction");
        if x.locks.contains(&(oid, mode)) {
            return true;
        }
        let locked = self.db.txn.try_lock_table(x.owner, oid, mode);
        if locked {
            x.locks.push((oid, mode));
        }
        locked
    }

    /// Releases every lock the transaction holds on table `oid` before it
    /// ends: only for work that runs outside transaction blocks and is
    /// done with the table (VACUUM, table by table).
    pub fn unlock_table(&mut self, oid: u32) {
        assert!(!self.in_transaction_block(), "a block keeps its locks");
        let Some(x) = self.xact.as_mut() else {
            return;
        };
        let held: Vec<_> = x.locks.iter().copied().filter(|&(o, _)| o == oid).collect();
        x.locks.retain(|&(o, _)| o != oid);
        self.db.txn.release_locks_in(&self.slot, x.owner, &held);
    }

    /// Refuses statements that must run outside a transaction block. In
    /// an implicit transaction such a statement is the first (the ones
    /// before it were committed first, see
    /// [`Self::commit_implicit`]): its transaction becomes its own, to
    /// commit when it ends, and the next statement opens another
    /// implicit one.
    pub fn require_no_block(&mut self, what: &'static str) -> Result<(), XactError> {
        if self.in_transaction_block() {
            return Err(XactError::NotInBlock(what));
        }
        if let Some(x) = self.xact.as_mut().filter(|x| x.implicit) {
            // Opened by this statement's own start: `sql::commands::
            // run_with` committed the implicit one before it.
            x.implicit = false;
        }
        Ok(())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let crashed = self
            .db
            .crash_on_close
            .load(std::sync::atomic::Ordering::SeqCst);
        if let Some(x) = self.xact.take().filter(|_| !crashed) {
            let xid = x.xid;
            if let Err(e) = self.end_xact(x, false) {
                log::error!("could not roll back transaction {xid:?} of an ending session: {e}");
            }
        }
    }
}

/// The snapshot a statement reads with.
pub enum StatementSnapshot {
    /// Taken for this statement (read committed).
    Own(SnapshotGuard),
    /// A copy of the transaction's (repeatable read); the transaction's
    /// guard keeps it registered.
    Transaction(crate::txn::Snapshot),
}

impl StatementSnapshot {
    pub fn get(&self) -> &crate::txn::Snapshot {
        match self {
            StatementSnapshot::Own(g) => g.snapshot(),
            StatementSnapshot::Transaction(s) => s,
        }
    }

    fn set_own(&mut self, xid: Xid) {
        match self {
            StatementSnapshot::Own(g) => g.set_own(xid),
            StatementSnapshot::Transaction(s) => s.own = Some(xid),
        }
    }
}

/// A session on a new data directory (sync method, 64 buffers), for unit
/// tests; the directory lives as long as the returned guard.
#[cfg(test)]
pub(crate) fn test_session() -> (Session, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("data");
    Database::init(&path).expect("a new data directory");
    let settings = [
        "io_method=sync".to_string(),
        "shared_buffers=64".into(),
        "max_sessions=8".into(),
    ];
    let db = Database::open(&path, &settings).expect("the new data directory opens");
    (db.session().expect("a session"), dir)
}
