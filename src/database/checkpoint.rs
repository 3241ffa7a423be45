//! Checkpoints: every buffer dirty when one starts is written, sorted by
//! file and block through a write stream (neighbours combine into large
//! writes, several in flight), the segments written since the last one are
//! synced (several at once, through AIO), then the commit log, the
//! checkpoint record and the control file. Replay after a crash starts at
//! its redo point.
//!
//! An automatic checkpoint (timed, or at half of `max_wal_size`) spreads
//! its writes over `checkpoint_completion_target` of the time or WAL until
//! the next one is due, as PostgreSQL's does: after each buffer it sleeps
//! while it is ahead of that schedule, so that a checkpoint does not take
//! the device from the sessions. `CHECKPOINT`, shutdown and the end of
//! recovery write at full speed, and a `CHECKPOINT` (or closing) while a
//! spread one runs makes that one hurry.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{
    checkpoint_data, now_secs, DbError, COMMIT_GATE_WAIT, RECYCLED_SEGMENTS, RECYCLE_ESTIMATE_KEEP,
};
use crate::buffer::{BufferPool, SessionSettings, SYNCS_IN_FLIGHT_MAX};
use crate::config::Settings;
use crate::stream::WriteStream;
use crate::txn::TxnManager;
use crate::wal::control::{ControlData, DbState};
use crate::wal::record::{XLOG_CHECKPOINT_ONLINE, XLOG_CHECKPOINT_SHUTDOWN};
use crate::wal::{Lsn, Rmgr, Wal};

/// How long a spread checkpoint sleeps at a time while ahead of its
/// schedule (PostgreSQL's 100 ms), in steps of [`HURRY_POLL`] so that a
/// request to hurry is noticed.
const SCHEDULE_SLEEP: Duration = Duration::from_millis(100);
const HURRY_POLL: Duration = Duration::from_millis(10);

/// Why a checkpoint runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointCause {
    /// `checkpoint_timeout` passed (spread).
    Timed,
    /// Half of `max_wal_size` was written since the last one (spread).
    WalSize,
    /// `CHECKPOINT` (at full speed).
    Requested,
    /// The database closes (at full speed; marks it shut down cleanly).
    Shutdown,
    /// Recovery ended (at full speed).
    EndOfRecovery,
}

impl CheckpointCause {
    pub fn name(self) -> &'static str {
        match self {
            CheckpointCause::Timed => "timed",
            CheckpointCause::WalSize => "wal",
            CheckpointCause::Requested => "requested",
            CheckpointCause::Shutdown => "shutdown",
            CheckpointCause::EndOfRecovery => "end-of-recovery",
        }
    }

    fn spread(self) -> bool {
        matches!(self, CheckpointCause::Timed | CheckpointCause::WalSize)
    }
}

/// One checkpoint, as `stat_checkpointer` shows the last.
#[derive(Debug, Clone, Copy)]
pub struct CheckpointReport {
    pub cause: CheckpointCause,
    /// Buffers written, and the writes (I/Os) that wrote them.
    pub buffers: u64,
    pub writes: u64,
    pub write_time: Duration,
    /// Segment files synced.
    pub files: u64,
    pub sync_time: Duration,
    /// When it ended (seconds since the epoch).
    pub ended_at: u64,
}

/// Checkpoints since the database opened (PostgreSQL's
/// pg_stat_checkpointer).
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckpointerStats {
    /// Automatic checkpoints started by `checkpoint_timeout`, and all
    /// others (WAL size, CHECKPOINT, shutdown, end of recovery).
    pub timed: u64,
    pub requested: u64,
    pub buffers_written: u64,
    pub write_time: Duration,
    pub sync_time: Duration,
    pub files_synced: u64,
    pub last: Option<CheckpointReport>,
}

/// What writes checkpoints; shared by the database and its checkpointer
/// thread (which holds this, not the database, so that closing the
/// database is never held up by a spread checkpoint: it makes it hurry).
pub(crate) struct Checkpointer {
    dir: PathBuf,
    settings: Settings,
    pool: Arc<BufferPool>,
    wal: Arc<Wal>,
    txn: Arc<TxnManager>,
    /// Held shared by a commit from logging its end until the commit log
    /// has it, exclusively (for a moment) by a checkpoint after it chose
    /// its redo point: a commit logged before the redo point is then in
    /// the commit log the checkpoint writes (PostgreSQL's delayChkpt).
    pub commit_gate: parking_lot::RwLock<()>,
    /// One checkpoint at a time; held, the estimate of the WAL bytes one
    /// checkpoint cycle writes (PostgreSQL's CheckPointDistanceEstimate),
    /// which sets how many old segments are kept for recycling: a new
    /// segment is written full of zeros first, which a load that needs
    /// many segments would otherwise pay for in every cycle.
    lock: parking_lot::Mutex<f64>,
    /// Checkpoints waiting for the lock: a spread checkpoint hurries while
    /// any are.
    waiting: AtomicUsize,
    /// The database closes: a spread checkpoint hurries.
    closing: AtomicBool,
    stats: parking_lot::Mutex<CheckpointerStats>,
}

impl Checkpointer {
    pub fn new(
        dir: PathBuf,
        settings: Settings,
        pool: Arc<BufferPool>,
        wal: Arc<Wal>,
        txn: Arc<TxnManager>,
    ) -> Checkpointer {
        Checkpointer {
            dir,
            settings,
            pool,
            wal,
            txn,
            commit_gate: parking_lot::RwLock::new(()),
            lock: parking_lot::Mutex::new(0.0),
            waiting: AtomicUsize::new(0),
            closing: AtomicBool::new(false),
            stats: parking_lot::Mutex::new(CheckpointerStats::default()),
        }
    }

    pub fn wal(&self) -> &Arc<Wal> {
        &self.wal
    }

    pub fn stats(&self) -> CheckpointerStats {
        *self.stats.lock()
    }

    /// Makes a spread checkpoint in progress (and any later) hurry: the
    /// database closes.
    pub fn hurry_for_close(&self) {
        self.closing.store(true, Ordering::SeqCst);
    }

    fn hurrying(&self) -> bool {
        self.waiting.load(Ordering::SeqCst) > 0 || self.closing.load(Ordering::SeqCst)
    }

    /// Writes a checkpoint (see the module comment) and returns its
    /// record's position.
    pub fn run(&self, cause: CheckpointCause) -> Result<Lsn, DbError> {
        let mut estimate = if cause.spread() {
            self.lock.lock()
        } else {
            self.waiting.fetch_add(1, Ordering::SeqCst);
            let guard = self.lock.lock();
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            guard
        };
        let started = Instant::now();
        let previous_redo = self.wal.redo();
        let redo = self.wal.begin_checkpoint();
        // Commits that logged their end before the redo point have put it
        // in the commit log once they leave the gate.
        match self.commit_gate.try_write_for(COMMIT_GATE_WAIT) {
            Some(gate) => drop(gate),
            None => return Err(DbError::CheckpointStuck(COMMIT_GATE_WAIT.as_secs())),
        }
        let mut s = self.pool.session(SessionSettings::default())?;
        // The write phase alone: not the commit gate, not the session.
        let write_started = Instant::now();
        let (buffers, writes) = self.write_buffers(&mut s, cause, started, redo)?;
        let write_time = write_started.elapsed();
        let sync_started = Instant::now();
        let files = match s.sync_written_files(SYNCS_IN_FLIGHT_MAX) {
            Ok(files) => files as u64,
            Err(e) => {
                // The kernel may have dropped the pages it could not write:
                // only replay can restore them (PostgreSQL's fsync panic).
                self.wal
                    .stop(format!("a data file could not be synced: {e}"));
                return Err(e.into());
            }
        };
        drop(s);
        let sync_time = sync_started.elapsed();
        self.wal.flush_all()?;
        self.txn.write_log()?;
        let shutdown = cause == CheckpointCause::Shutdown;
        let info = if shutdown {
            XLOG_CHECKPOINT_SHUTDOWN
        } else {
            XLOG_CHECKPOINT_ONLINE
        };
        let (checkpoint, end) =
            self.wal
                .insert_record(Rmgr::Xlog, info, 0, &[], &checkpoint_data(redo))?;
        self.wal.flush(end)?;
        ControlData {
            state: if shutdown {
                DbState::ShutDown
            } else {
                DbState::InProduction
            },
            checkpoint,
            redo,
            time: now_secs(),
        }
        .write(&self.dir)?;
        let keep = self.recycle_estimate(&mut estimate, redo.saturating_sub(previous_redo));
        self.wal.remove_old_segments(redo, keep)?;
        let report = CheckpointReport {
            cause,
            buffers,
            writes,
            write_time,
            files,
            sync_time,
            ended_at: now_secs(),
        };
        let mut stats = self.stats.lock();
        if cause == CheckpointCause::Timed {
            stats.timed += 1;
        } else {
            stats.requested += 1;
        }
        stats.buffers_written += buffers;
        stats.write_time += write_time;
        stats.sync_time += sync_time;
        stats.files_synced += files;
        stats.last = Some(report);
        drop(stats);
        log::info!(
            "checkpoint ({}): wrote {buffers} buffers in {writes} writes ({:.1} MB) in {:.3} s, synced {files} files in {:.3} s",
            cause.name(),
            (buffers * crate::storage::BLOCK_SIZE as u64) as f64 / 1e6,
            write_time.as_secs_f64(),
            sync_time.as_secs_f64(),
        );
        Ok(checkpoint)
    }

    /// Writes every buffer dirty now, sorted by file and block, through a
    /// write stream; spread if `cause` is. Returns the buffers written and
    /// the writes they took.
    fn write_buffers(
        &self,
        s: &mut crate::buffer::BufferSession,
        cause: CheckpointCause,
        started: Instant,
        redo: Lsn,
    ) -> Result<(u64, u64), DbError> {
        let mut dirty = self.pool.dirty_buffers();
        dirty.sort_unstable_by_key(|(t, _)| (t.rel, t.fork as u8, t.block));
        // Buffers being written are pinned: in flight at most one
        // session's share of the pool, or a small pool would have none
        // left for the sessions' own pages.
        let share = self.pool.pin_limit().max(1);
        let combine = self.settings.io_combine_limit().clamp(1, share);
        let max_ios = self
            .settings
            .maintenance_io_concurrency()
            .clamp(1, (share / combine).max(1));
        let mut stream = WriteStream::new(max_ios, combine);
        let total = dirty.len();
        let mut offered = Ok(());
        for (i, &(tag, id)) in dirty.iter().enumerate() {
            offered = stream.write(s, id, tag);
            if offered.is_err() {
                break;
            }
            if cause.spread() {
                self.keep_to_schedule((i + 1) as f64 / total as f64, started, redo);
            }
        }
        // Finished after a failure too: no write may stay in flight.
        let finished = stream.finish(s);
        offered?;
        finished?;
        let stats = stream.stats();
        Ok((stats.blocks, stats.writes))
    }

    /// Sleeps while a spread checkpoint that has done `progress` (0..=1)
    /// of its writes is ahead of its schedule: done by
    /// `checkpoint_completion_target` of the time until the next timed
    /// checkpoint or of the WAL until the next size-triggered one
    /// (PostgreSQL's IsCheckpointOnSchedule). Returns at once when asked
    /// to hurry.
    fn keep_to_schedule(&self, progress: f64, started: Instant, redo: Lsn) {
        let target = self.settings.checkpoint_completion_target();
        let timeout = self.settings.checkpoint_timeout().as_secs_f64();
        let wal_between = (self.settings.max_wal_size_bytes() / 2).max(1) as f64;
        let mut slept = Duration::ZERO;
        while slept < SCHEDULE_SLEEP && !self.hurrying() {
            let by_time = started.elapsed().as_secs_f64() / timeout;
            let by_wal = self.wal.insert_position().saturating_sub(redo) as f64 / wal_between;
            if progress * target < by_time.max(by_wal) {
                return;
            }
            std::thread::sleep(HURRY_POLL);
            slept += HURRY_POLL;
        }
    }

    /// Updates the estimate of the WAL a checkpoint cycle writes with the
    /// last cycle's `distance` (bytes) and returns how many old segments to
    /// keep for recycling: enough for the next cycle, at least
    /// [`RECYCLED_SEGMENTS`], at most `max_wal_size`.
    fn recycle_estimate(&self, estimate: &mut f64, distance: u64) -> usize {
        let distance = distance as f64;
        *estimate = if distance > *estimate {
            distance
        } else {
            RECYCLE_ESTIMATE_KEEP * *estimate + (1.0 - RECYCLE_ESTIMATE_KEEP) * distance
        };
        let segment = crate::wal::WAL_SEGMENT_SIZE as f64;
        let most = (self.settings.max_wal_size_bytes() / crate::wal::WAL_SEGMENT_SIZE) as usize;
        let wanted = (*estimate / segment).ceil() as usize + 1;
        wanted.clamp(RECYCLED_SEGMENTS, most.max(RECYCLED_SEGMENTS))
    }
}
