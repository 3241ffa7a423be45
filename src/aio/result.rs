//! Compact I/O results, what the issuer gets back, and the layer's errors.
//!
//! Completion may run in a thread that cannot raise an error for the issuer
//! (an I/O worker, another session reaping a ring), and many I/Os may fail
//! at once. So a result is a small value: a status, the callback that set
//! it, a 32-bit error payload whose meaning that callback defines (an errno,
//! counts, a first bad block), and a 32-bit value (bytes or blocks). The
//! issuer turns it into an error or warning later, through the callback's
//! `report`.

use std::sync::Arc;

use thiserror::Error;

use crate::stats::IoOp;
use crate::storage::{SegmentFile, StorageError};

/// Outcome class of an I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoStatus {
    /// Not completed yet.
    #[default]
    Unknown,
    Ok,
    /// Fewer bytes than asked; the whole blocks transferred are good and the
    /// caller re-issues the rest.
    Partial,
    /// Completed, with something the issuer should warn about.
    Warning,
    Error,
}

/// A compact result (DESIGN.md §3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IoResult {
    pub status: IoStatus,
    /// The callback that set the status (0: none, the raw result).
    pub id: u8,
    /// Meaning defined by `id`: an errno, counts, a first bad block.
    pub error_data: u32,
    /// Bytes or blocks transferred, as `id` defines.
    pub result: u32,
}

impl IoResult {
    /// The result of a raw system call value, before any callback: bytes,
    /// or an error carrying the errno.
    pub fn from_raw(raw: i64) -> IoResult {
        if raw < 0 {
            IoResult {
                status: IoStatus::Error,
                id: 0,
                error_data: (-raw) as u32,
                result: 0,
            }
        } else {
            IoResult {
                status: IoStatus::Ok,
                id: 0,
                error_data: 0,
                result: raw as u32,
            }
        }
    }

    pub fn is_ok(&self) -> bool {
        matches!(self.status, IoStatus::Ok | IoStatus::Warning)
    }
}

/// What the issuer gets back when it collects an I/O.
#[derive(Debug, Clone)]
pub struct IoReturn {
    pub result: IoResult,
    pub op: IoOp,
    pub file: Arc<SegmentFile>,
    pub offset: u64,
    pub len: usize,
    /// The raw system call result (bytes or negative errno).
    pub raw: i64,
}

impl IoReturn {
    /// "blocks 3..4 of relation 16384".
    pub fn target(&self) -> String {
        self.file.describe(self.offset, self.len)
    }
}

/// Errors of the AIO layer. Messages name the object and the fix.
#[derive(Debug, Error)]
pub enum AioError {
    #[error(
        "session already holds a handed-out I/O handle that is not yet defined; start or release it before acquiring another"
    )]
    HandleAlreadyHandedOut,
    #[error("I/O handle {handle} is not this session's handed-out handle (already started or released, or another session's)")]
    StaleHandle { handle: u32 },
    #[error("waiting for I/O handle {handle}, which this session acquired but never started")]
    WaitOnUnstartedIo { handle: u32 },
    #[error("an I/O of {len} bytes is not a whole number of 8192-byte blocks")]
    NotWholeBlocks { len: usize },
    #[error("{0}")]
    ReaderMisuse(String),
    #[error("all {max_sessions} session slots are in use; raise max_sessions")]
    NoFreeSession { max_sessions: usize },
    #[error("session is already in batch mode; batches do not nest")]
    BatchAlreadyStarted,
    #[error("an I/O of {iovecs} iovecs exceeds io_max_combine_limit={limit}; raise io_max_combine_limit")]
    TooManyIovecs { iovecs: usize, limit: usize },
    #[error("an I/O may carry at most {max} callbacks")]
    TooManyCallbacks { max: usize },
    #[error("I/O callback id {id} is not registered")]
    UnknownCallback { id: u8 },
    #[error("{message}")]
    Io { message: String, errno: Option<i32> },
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("{0}")]
    Setup(String),
}

impl AioError {
    /// PostgreSQL's SQLSTATE for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            // Misuse of the API by its caller.
            AioError::HandleAlreadyHandedOut
            | AioError::StaleHandle { .. }
            | AioError::WaitOnUnstartedIo { .. }
            | AioError::NotWholeBlocks { .. }
            | AioError::ReaderMisuse(_)
            | AioError::BatchAlreadyStarted
            | AioError::TooManyIovecs { .. }
            | AioError::TooManyCallbacks { .. }
            | AioError::UnknownCallback { .. } => "XX000",
            // Every session slot taken: PostgreSQL's "too many clients".
            AioError::NoFreeSession { .. } => "53300",
            AioError::Io {
                errno: Some(errno), ..
            } => crate::storage::errno_sqlstate(*errno),
            // Failed without an errno (a short transfer, or a callback's
            // verdict): only the layer that issued it knows more.
            AioError::Io { errno: None, .. } => "58030",
            AioError::Storage(e) => e.sqlstate(),
            // Start-up could not get its handles' memory, io_uring
            // instances or worker threads.
            AioError::Setup(_) => "53000",
        }
    }

    /// The errno behind an I/O error, if any.
    pub fn errno(&self) -> Option<i32> {
        match self {
            AioError::Io { errno, .. } => *errno,
            AioError::Storage(StorageError::Io { source, .. })
            | AioError::Storage(StorageError::Open { source, .. }) => source.raw_os_error(),
            _ => None,
        }
    }
}

/// A problem found when a session checks its resources at the end of an
/// operation. Each is also logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AioWarning {
    /// A handle was acquired and never defined or released.
    LeakedHandle { handle: u32 },
    /// Batch mode was entered and not left.
    BatchLeftOpen { staged: usize },
}

impl std::fmt::Display for AioWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AioWarning::LeakedHandle { handle } => {
                write!(
                    f,
                    "leaked AIO handle {handle}: acquired but never started or released"
                )
            }
            AioWarning::BatchLeftOpen { staged } => write!(
                f,
                "open AIO batch at end of operation ({staged} staged I/Os); submitted them"
            ),
        }
    }
}
