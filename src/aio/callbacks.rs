//! Completion callbacks, identified by small ids.
//!
//! A handle carries up to four (callback id, one byte of private data)
//! pairs rather than closures: a handle may be completed by any thread,
//! long after the code that started it has moved on, and an id plus a byte
//! is all that needs to be shared. Layers above register their callbacks at
//! start-up and get an id; the AIO layer knows nothing of what they do.
//!
//! Order: `stage` runs in registration order when the I/O is staged;
//! `complete_shared` and `complete_local` run in reverse order, so that the
//! innermost layer (registered last: the block callback that turns bytes
//! into blocks) runs first and the buffer pool sees blocks, as in PostgreSQL.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use super::handle::{IoVec, WaitRef};
use super::result::{IoResult, IoReturn, IoStatus};
use crate::stats::IoOp;
use crate::storage::{SegmentFile, BLOCK_SIZE};

/// A registered callback's id (0 means "no callback": the raw result).
pub type CallbackId = u8;

/// Most callback kinds one `Aio` can register.
pub const MAX_CALLBACK_IDS: usize = 32;

/// The built-in callback that every block read registers last.
pub const CB_BLOCK_READV: CallbackId = 1;
/// The built-in callback that every block write registers last.
pub const CB_BLOCK_WRITEV: CallbackId = 2;

/// What a callback sees of an I/O.
pub struct IoView<'a> {
    pub wait_ref: WaitRef,
    pub op: IoOp,
    pub file: &'a SegmentFile,
    pub offset: u64,
    pub iov: &'a [IoVec],
    /// Handle data set by the issuer (for example buffer ids).
    pub data: &'a [u64],
    /// The raw result, once the I/O has run.
    pub raw: Option<i64>,
}

impl IoView<'_> {
    pub fn len_bytes(&self) -> usize {
        self.iov.iter().map(IoVec::len).sum()
    }
}

/// The callbacks of one kind of I/O user.
pub trait IoCallbacks: Send + Sync {
    fn name(&self) -> &'static str;

    /// In the issuing thread, when the I/O is staged (for a buffer read:
    /// take the I/O's pin and publish the wait reference).
    fn stage(&self, _io: &IoView<'_>, _cb_data: u8) {}

    /// In whichever thread completes the I/O. Must neither block nor panic:
    /// it may run in an I/O worker or in another session waiting for the
    /// I/O.
    fn complete_shared(&self, _io: &IoView<'_>, prior: IoResult, _cb_data: u8) -> IoResult {
        prior
    }

    /// In the owning session, when it collects the I/O.
    fn complete_local(&self, _io: &IoView<'_>, prior: IoResult, _cb_data: u8) -> IoResult {
        prior
    }

    /// Turns a result this callback set into a message for the issuer.
    fn report(&self, ret: &IoReturn) -> String;
}

/// The table of registered callbacks; lookups take no lock.
pub(crate) struct CallbackTable {
    entries: [OnceLock<Arc<dyn IoCallbacks>>; MAX_CALLBACK_IDS],
    next: AtomicU8,
}

impl CallbackTable {
    pub fn new() -> CallbackTable {
        let table = CallbackTable {
            entries: std::array::from_fn(|_| OnceLock::new()),
            next: AtomicU8::new(1),
        };
        let read = table.register(Arc::new(BlockIo { write: false }));
        let write = table.register(Arc::new(BlockIo { write: true }));
        debug_assert_eq!((read, write), (CB_BLOCK_READV, CB_BLOCK_WRITEV));
        table
    }

    /// Registers `callbacks` and returns their id.
    ///
    /// # Panics
    /// When more than [`MAX_CALLBACK_IDS`] kinds are registered: kinds are
    /// registered once at start-up, so that is a programming error.
    pub fn register(&self, callbacks: Arc<dyn IoCallbacks>) -> CallbackId {
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        assert!(
            (id as usize) < MAX_CALLBACK_IDS,
            "more than {MAX_CALLBACK_IDS} I/O callback kinds registered"
        );
        if self.entries[id as usize].set(callbacks).is_err() {
            unreachable!("callback id {id} handed out twice");
        }
        id
    }

    pub fn get(&self, id: CallbackId) -> Option<&Arc<dyn IoCallbacks>> {
        self.entries.get(id as usize)?.get()
    }
}

/// Text of an errno without Rust's "(os error N)" suffix, as PostgreSQL
/// prints it.
pub fn errno_text(errno: i32) -> String {
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    match text.find(" (os error") {
        Some(end) => text[..end].to_string(),
        None => text,
    }
}

/// Turns bytes into blocks: a transfer that ends inside a block counts only
/// the whole blocks before it; none at all is an error ("read only 0 of
/// 8192 bytes"), fewer than asked is a partial result that the caller
/// re-issues.
struct BlockIo {
    write: bool,
}

impl BlockIo {
    fn id(&self) -> CallbackId {
        if self.write {
            CB_BLOCK_WRITEV
        } else {
            CB_BLOCK_READV
        }
    }
}

impl IoCallbacks for BlockIo {
    fn name(&self) -> &'static str {
        if self.write {
            "block_writev"
        } else {
            "block_readv"
        }
    }

    fn complete_shared(&self, io: &IoView<'_>, prior: IoResult, _cb_data: u8) -> IoResult {
        let id = self.id();
        if prior.status == IoStatus::Error {
            return IoResult { id, ..prior };
        }
        let bytes = prior.result as usize;
        let requested = io.len_bytes();
        let blocks = (bytes / BLOCK_SIZE) as u32;
        if blocks == 0 {
            // error_data 0 means "short", not an errno; result keeps bytes.
            return IoResult {
                status: IoStatus::Error,
                id,
                error_data: 0,
                result: bytes as u32,
            };
        }
        let status = if bytes < requested {
            IoStatus::Partial
        } else {
            IoStatus::Ok
        };
        IoResult {
            status,
            id,
            error_data: 0,
            result: blocks,
        }
    }

    fn report(&self, ret: &IoReturn) -> String {
        let (verb, past) = if self.write {
            ("write", "wrote")
        } else {
            ("read", "read")
        };
        let target = ret.target();
        let r = ret.result;
        match r.status {
            IoStatus::Error if r.error_data != 0 => {
                format!(
                    "could not {verb} {target}: {}",
                    errno_text(r.error_data as i32)
                )
            }
            IoStatus::Error => format!(
                "could not {verb} {target}: {past} only {} of {BLOCK_SIZE} bytes",
                r.result
            ),
            IoStatus::Partial => format!(
                "could not {verb} all of {target}: {past} only {} of {} blocks",
                r.result,
                ret.len / BLOCK_SIZE
            ),
            IoStatus::Ok | IoStatus::Warning | IoStatus::Unknown => {
                format!("{verb} {target}: {} blocks", r.result)
            }
        }
    }
}
