//! Files: relation forks stored as 1 GiB segment files (PostgreSQL's smgr/md).
//!
//! A relation is identified by a number; each of its forks (main, visibility
//! map) is a sequence of segment files `<n>`, `<n>.1`, `<n>.2`, … of at most
//! `blocks_per_segment` blocks. A block lives in exactly one segment, so an
//! I/O is always confined to one segment file: [`SmgrRelation::locate`] says
//! how many blocks remain in the segment so that callers stop combining there.
//!
//! With `io_direct` including `data`, files are opened `O_DIRECT` and every
//! buffer, offset and length must be 4096-byte aligned; a file system that
//! refuses O_DIRECT gets an error naming the setting to turn off.
//!
//! Open segment files are shared as `Arc<SegmentFile>`: an I/O holds its own
//! reference, so closing or dropping a relation while its I/O is staged or in
//! flight never lets the descriptor be closed (and its number reused) under
//! the I/O. The descriptor is closed when the last I/O on it is recycled.
//!
//! This layer does blocking system calls only. Asynchronous execution is the
//! job of the `aio` layer above, which calls [`SegmentFile::preadv`] and
//! [`SegmentFile::pwritev`] from whichever thread executes an I/O.

mod aligned;

pub use aligned::{is_io_aligned, AlignedBuf, IO_ALIGN_BYTES};

use std::fmt;
use std::fs::OpenOptions;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use thiserror::Error;

/// Size of a block in bytes.
pub const BLOCK_SIZE: usize = 8192;

/// Blocks in a full segment file: 1 GiB, as in PostgreSQL.
pub const DEFAULT_BLOCKS_PER_SEGMENT: u32 = (1 << 30) / BLOCK_SIZE as u32;

/// A block number within a relation fork (across segments).
pub type BlockNumber = u32;

/// Errors of the file layer. Each names the file and, where there is one,
/// the fix.
#[derive(Debug, Error)]
pub enum StorageError {
    #[error("could not open file \"{path}\": {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the file system holding \"{path}\" refuses direct I/O (O_DIRECT): {reason}; set io_direct=off to use buffered I/O"
    )]
    DirectIoUnsupported { path: PathBuf, reason: String },
    #[error("could not {op} file \"{path}\": {source}{}", full_disk_hint(source.raw_os_error()))]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("could not {op} blocks {first}..{last} of {file}: {detail}")]
    Blocks {
        op: &'static str,
        file: String,
        first: BlockNumber,
        last: BlockNumber,
        detail: String,
    },
    #[error("{what} is not aligned to {IO_ALIGN_BYTES} bytes, as direct I/O requires")]
    Misaligned { what: String },
}

/// The fix for an error with `errno`, if it says the file system is full
/// (ENOSPC, or EDQUOT: over a quota): said after the message, since a
/// full disk is the one I/O failure the user can repair, and the WAL
/// keeps what was committed meanwhile.
pub fn full_disk_hint(errno: Option<i32>) -> &'static str {
    if errno.is_some_and(is_disk_full) {
        "; its file system is full: free space on it and retry (nothing committed is lost)"
    } else {
        ""
    }
}

/// Whether `errno` says the file system is full (ENOSPC, or EDQUOT: over
/// a quota); the hint and the SQLSTATE agree on it.
fn is_disk_full(errno: i32) -> bool {
    matches!(errno, libc::ENOSPC | libc::EDQUOT)
}

/// PostgreSQL's SQLSTATE for a file operation that failed with `errno`,
/// as its `errcode_for_file_access` chooses it (an errno it does not
/// name is an internal error there too). EDQUOT counts as a full disk,
/// as [`full_disk_hint`] tells the user, and ENOMEM as out of memory.
pub fn errno_sqlstate(errno: i32) -> &'static str {
    match errno {
        libc::EPERM | libc::EACCES | libc::EROFS => "42501", // insufficient_privilege
        libc::ENOENT => "58P01",                             // undefined_file
        libc::EEXIST => "58P02",                             // duplicate_file
        libc::ENOTDIR | libc::EISDIR | libc::ENOTEMPTY => "42809", // wrong_object_type
        e if is_disk_full(e) => "53100",                     // disk_full
        libc::ENOMEM => "53200",                             // out_of_memory
        libc::ENFILE | libc::EMFILE => "53000",              // insufficient_resources
        libc::EIO => "58030",                                // io_error
        _ => "XX000",                                        // internal_error
    }
}

/// PostgreSQL's SQLSTATE for the failed file operation `e`: by its errno
/// ([`errno_sqlstate`]), or, for an error std made without one, by what
/// PostgreSQL says of the same outcome: a read that ended early is data
/// corrupted ("read only n of m bytes"), a write that wrote nothing a
/// full disk ("wrote only n of m bytes"), anything else an I/O error.
pub fn io_sqlstate(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(errno) => errno_sqlstate(errno),
        None => match e.kind() {
            std::io::ErrorKind::UnexpectedEof => "XX001",
            std::io::ErrorKind::WriteZero => "53100",
            _ => "58030",
        },
    }
}

impl StorageError {
    /// PostgreSQL's SQLSTATE for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            StorageError::Open { source, .. } | StorageError::Io { source, .. } => {
                io_sqlstate(source)
            }
            // A file system without a feature we were told to use.
            StorageError::DirectIoUnsupported { .. } => "0A000",
            // A read that ended early or a file whose size is not whole
            // blocks (PostgreSQL: "read only n of m bytes", data
            // corrupted); an extension of part of a block is a caller's
            // bug, rarer than either.
            StorageError::Blocks { .. } => "XX001",
            // Our own check of a buffer we were handed: a caller's bug.
            StorageError::Misaligned { .. } => "XX000",
        }
    }

    /// True if the error is a file that does not exist.
    pub fn is_not_found(&self) -> bool {
        match self {
            StorageError::Open { source, .. } | StorageError::Io { source, .. } => {
                source.kind() == std::io::ErrorKind::NotFound
            }
            _ => false,
        }
    }
}

/// A fork of a relation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fork {
    Main = 0,
    VisibilityMap = 1,
    FreeSpace = 2,
}

impl Fork {
    pub const COUNT: usize = 3;
    /// Every fork, main first.
    pub const ALL: [Fork; Fork::COUNT] = [Fork::Main, Fork::VisibilityMap, Fork::FreeSpace];

    fn suffix(self) -> &'static str {
        match self {
            Fork::Main => "",
            Fork::VisibilityMap => "_vm",
            Fork::FreeSpace => "_fsm",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Fork::Main => "main",
            Fork::VisibilityMap => "vm",
            Fork::FreeSpace => "fsm",
        }
    }
}

/// What a segment file holds, for messages and the in-flight I/O view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileIdent {
    /// A segment of one of our relations.
    Relation { rel: u32, fork: Fork },
    /// A file opened by path (for example a PostgreSQL segment being
    /// verified, or a benchmark file).
    Path(PathBuf),
}

impl fmt::Display for FileIdent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileIdent::Relation {
                rel,
                fork: Fork::Main,
            } => write!(f, "relation {rel}"),
            FileIdent::Relation { rel, fork } => write!(f, "relation {rel} fork {}", fork.name()),
            FileIdent::Path(path) => write!(f, "file \"{}\"", path.display()),
        }
    }
}

/// One open segment file.
#[derive(Debug)]
pub struct SegmentFile {
    fd: OwnedFd,
    path: PathBuf,
    ident: FileIdent,
    /// Block number (within the fork) of the file's first block.
    first_block: BlockNumber,
    direct: bool,
}

impl SegmentFile {
    /// Opens an existing file by path, for tools that read files that are
    /// not part of a data directory. `first_block` is the block number of
    /// the file's first block (used in messages and checksums).
    pub fn open_path(
        path: &Path,
        direct: bool,
        writable: bool,
        first_block: BlockNumber,
    ) -> Result<Arc<SegmentFile>, StorageError> {
        Self::open(
            path,
            FileIdent::Path(path.to_path_buf()),
            first_block,
            direct,
            writable,
            false,
        )
        .map(Arc::new)
    }

    /// Creates (or opens) a file by path with read and write access.
    pub fn create_path(path: &Path, direct: bool) -> Result<Arc<SegmentFile>, StorageError> {
        Self::open(
            path,
            FileIdent::Path(path.to_path_buf()),
            0,
            direct,
            true,
            true,
        )
        .map(Arc::new)
    }

    /// Opens (creating if needed) a WAL segment for writing, with
    /// `O_DIRECT` if `direct` and with `write_through` (`O_DSYNC`,
    /// `O_SYNC`, or 0) so that a completed write is durable and needs no
    /// sync.
    pub fn open_wal(
        path: &Path,
        direct: bool,
        write_through: i32,
    ) -> Result<Arc<SegmentFile>, StorageError> {
        debug_assert!([0, libc::O_DSYNC, libc::O_SYNC].contains(&write_through));
        Self::open_with(
            path,
            FileIdent::Path(path.to_path_buf()),
            0,
            direct,
            true,
            true,
            write_through,
        )
        .map(Arc::new)
    }

    fn open(
        path: &Path,
        ident: FileIdent,
        first_block: BlockNumber,
        direct: bool,
        writable: bool,
        create: bool,
    ) -> Result<SegmentFile, StorageError> {
        Self::open_with(path, ident, first_block, direct, writable, create, 0)
    }

    fn open_with(
        path: &Path,
        ident: FileIdent,
        first_block: BlockNumber,
        direct: bool,
        writable: bool,
        create: bool,
        extra_flags: i32,
    ) -> Result<SegmentFile, StorageError> {
        let mut options = OpenOptions::new();
        options.read(true).write(writable).create(create);
        if direct {
            options.custom_flags(libc::O_DIRECT | extra_flags);
        } else if extra_flags != 0 {
            options.custom_flags(extra_flags);
        }
        let file = options.open(path).map_err(|source| {
            if direct && source.raw_os_error() == Some(libc::EINVAL) {
                StorageError::DirectIoUnsupported {
                    path: path.to_path_buf(),
                    reason: "open with O_DIRECT failed with EINVAL".into(),
                }
            } else {
                StorageError::Open {
                    path: path.to_path_buf(),
                    source,
                }
            }
        })?;
        let fd: OwnedFd = file.into();
        if direct {
            check_direct_io_alignment(&fd, path)?;
        }
        Ok(SegmentFile {
            fd,
            path: path.to_path_buf(),
            ident,
            first_block,
            direct,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn ident(&self) -> &FileIdent {
        &self.ident
    }

    pub fn is_direct(&self) -> bool {
        self.direct
    }

    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Block number (within the fork) of the block at byte `offset`.
    pub fn block_at(&self, offset: u64) -> BlockNumber {
        self.first_block + (offset / BLOCK_SIZE as u64) as BlockNumber
    }

    /// "blocks 3..4 of relation 16384", for messages about an I/O of `len`
    /// bytes at `offset`.
    pub fn describe(&self, offset: u64, len: usize) -> String {
        let first = self.block_at(offset);
        let blocks = len.div_ceil(BLOCK_SIZE).max(1) as BlockNumber;
        if blocks == 1 {
            format!("block {first} of {}", self.ident)
        } else {
            format!("blocks {first}..{} of {}", first + blocks - 1, self.ident)
        }
    }

    /// Size of the file in bytes.
    pub fn size_bytes(&self) -> Result<u64, StorageError> {
        rustix::fs::fstat(&self.fd)
            .map(|st| st.st_size as u64)
            .map_err(|e| self.io_error("stat", e.into()))
    }

    /// Vectored read at `offset`. Returns bytes read, or the negative errno:
    /// the raw result that the AIO layer records. A short read is not
    /// retried here.
    ///
    /// # Safety
    /// Every iovec must describe writable memory that stays valid and is not
    /// otherwise accessed until this call returns.
    pub unsafe fn preadv(&self, offset: u64, iov: &[libc::iovec]) -> i64 {
        // SAFETY: the caller guarantees the iovecs; fd is open for the
        // lifetime of self.
        let n = unsafe {
            libc::preadv(
                self.fd.as_raw_fd(),
                iov.as_ptr(),
                iov.len() as i32,
                offset as libc::off_t,
            )
        };
        raw_result(n)
    }

    /// Vectored write at `offset`; returns bytes written or the negative
    /// errno.
    ///
    /// # Safety
    /// Every iovec must describe readable memory that stays valid until this
    /// call returns.
    pub unsafe fn pwritev(&self, offset: u64, iov: &[libc::iovec]) -> i64 {
        // SAFETY: as for preadv.
        let n = unsafe {
            libc::pwritev(
                self.fd.as_raw_fd(),
                iov.as_ptr(),
                iov.len() as i32,
                offset as libc::off_t,
            )
        };
        raw_result(n)
    }

    /// fdatasync as a raw result: 0, or the negative errno.
    pub fn fdatasync_raw(&self) -> i64 {
        match rustix::fs::fdatasync(&self.fd) {
            Ok(()) => 0,
            Err(e) => -(e.raw_os_error() as i64),
        }
    }

    /// Flushes the file's data to stable storage.
    pub fn fdatasync(&self) -> Result<(), StorageError> {
        match self.fdatasync_raw() {
            0 => Ok(()),
            raw => Err(self.io_error("fsync", errno_error(-raw as i32))),
        }
    }

    /// Flushes the file's data and all of its metadata to stable storage
    /// (fsync, where [`SegmentFile::fdatasync`] leaves out metadata a read
    /// does not need).
    pub fn fsync_all(&self) -> Result<(), StorageError> {
        rustix::fs::fsync(&self.fd)
            .map_err(|e| self.io_error("fsync", errno_error(e.raw_os_error())))
    }

    /// Tells the kernel that `len` bytes at `offset` will be read soon
    /// (`posix_fadvise(WILLNEED)`), so that it starts reading them into the
    /// page cache. Pointless, and skipped, for direct I/O, which bypasses
    /// that cache.
    pub fn advise_willneed(&self, offset: u64, len: usize) -> Result<(), StorageError> {
        if self.direct {
            return Ok(());
        }
        // SAFETY: plain system call on a descriptor we own.
        let rc = unsafe {
            libc::posix_fadvise(
                self.fd.as_raw_fd(),
                offset as libc::off_t,
                len as libc::off_t,
                libc::POSIX_FADV_WILLNEED,
            )
        };
        match rc {
            0 => Ok(()),
            errno => Err(self.io_error("advise", errno_error(errno))),
        }
    }

    /// Sets the file's length in bytes.
    pub fn set_len(&self, len: u64) -> Result<(), StorageError> {
        rustix::fs::ftruncate(&self.fd, len).map_err(|e| self.io_error("truncate", e.into()))
    }

    /// Reserves `len` bytes at `offset` (reading as zeros), growing the
    /// file, without writing them (`fallocate`).
    pub fn allocate(&self, offset: u64, len: u64) -> Result<(), StorageError> {
        rustix::fs::fallocate(&self.fd, rustix::fs::FallocateFlags::empty(), offset, len)
            .map_err(|e| self.io_error("allocate", e.into()))
    }

    /// Writes all of `data` at `offset` synchronously, retrying short writes.
    pub fn write_all_at(&self, offset: u64, data: &[u8]) -> Result<(), StorageError> {
        self.check_alignment(offset, data.as_ptr() as usize, data.len())?;
        let mut done = 0usize;
        while done < data.len() {
            let iov = [libc::iovec {
                iov_base: data[done..].as_ptr() as *mut libc::c_void,
                iov_len: data.len() - done,
            }];
            // SAFETY: the iovec describes the live slice `data`.
            let n = unsafe { self.pwritev(offset + done as u64, &iov) };
            match n {
                n if n > 0 => done += n as usize,
                0 => {
                    return Err(self.io_error(
                        "write",
                        std::io::Error::new(std::io::ErrorKind::WriteZero, "wrote 0 bytes"),
                    ))
                }
                n => return Err(self.io_error("write", errno_error(-n as i32))),
            }
        }
        Ok(())
    }

    /// Reads exactly `buf.len()` bytes at `offset` synchronously, retrying
    /// short reads; reading past the end of the file is an error.
    pub fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        self.check_alignment(offset, buf.as_ptr() as usize, buf.len())?;
        let mut done = 0usize;
        while done < buf.len() {
            let iov = [libc::iovec {
                iov_base: buf[done..].as_mut_ptr() as *mut libc::c_void,
                iov_len: buf.len() - done,
            }];
            // SAFETY: the iovec describes the live, exclusively borrowed buf.
            let n = unsafe { self.preadv(offset + done as u64, &iov) };
            match n {
                n if n > 0 => done += n as usize,
                0 => {
                    return Err(StorageError::Blocks {
                        op: "read",
                        file: self.ident.to_string(),
                        first: self.block_at(offset),
                        last: self.block_at(offset + buf.len() as u64 - 1),
                        detail: format!("read only {done} of {} bytes", buf.len()),
                    })
                }
                n => return Err(self.io_error("read", errno_error(-n as i32))),
            }
        }
        Ok(())
    }

    /// With O_DIRECT, refuses misaligned memory, offsets or lengths before
    /// the kernel does (with a less helpful EINVAL).
    pub fn check_alignment(
        &self,
        offset: u64,
        addr: usize,
        len: usize,
    ) -> Result<(), StorageError> {
        if !self.direct {
            return Ok(());
        }
        for (what, value) in [
            ("offset", offset as usize),
            ("buffer address", addr),
            ("length", len),
        ] {
            if !is_io_aligned(value) {
                return Err(StorageError::Misaligned {
                    what: format!("{what} {value:#x} for {}", self.ident),
                });
            }
        }
        Ok(())
    }

    fn io_error(&self, op: &'static str, source: std::io::Error) -> StorageError {
        StorageError::Io {
            op,
            path: self.path.clone(),
            source,
        }
    }
}

fn raw_result(n: isize) -> i64 {
    if n < 0 {
        -(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO) as i64)
    } else {
        n as i64
    }
}

/// An `io::Error` for an errno value.
pub fn errno_error(errno: i32) -> std::io::Error {
    std::io::Error::from_raw_os_error(errno)
}

/// Checks that the file system accepts our 4096-byte alignment for direct
/// I/O. statx reports the requirement on Linux 6.1 and later; where it
/// reports nothing we rely on the open having succeeded.
fn check_direct_io_alignment(fd: &OwnedFd, path: &Path) -> Result<(), StorageError> {
    use rustix::fs::{statx, AtFlags, StatxFlags};
    let Ok(stx) = statx(fd.as_fd(), "", AtFlags::EMPTY_PATH, StatxFlags::DIOALIGN) else {
        return Ok(());
    };
    if stx.stx_mask & StatxFlags::DIOALIGN.bits() == 0 {
        return Ok(());
    }
    let (mem, off) = (
        stx.stx_dio_mem_align as usize,
        stx.stx_dio_offset_align as usize,
    );
    if mem == 0 || off == 0 {
        return Err(StorageError::DirectIoUnsupported {
            path: path.to_path_buf(),
            reason: "statx reports no direct I/O support".into(),
        });
    }
    if mem > IO_ALIGN_BYTES || off > IO_ALIGN_BYTES {
        return Err(StorageError::DirectIoUnsupported {
            path: path.to_path_buf(),
            reason: format!(
                "it needs memory aligned to {mem} and offsets to {off} bytes, more than our {IO_ALIGN_BYTES}"
            ),
        });
    }
    Ok(())
}

/// The file layer of one data directory.
#[derive(Debug)]
pub struct Smgr {
    dir: PathBuf,
    direct: bool,
    blocks_per_segment: u32,
}

impl Smgr {
    /// Files live in `dir` (created if missing). `direct` opens them with
    /// O_DIRECT.
    pub fn new(dir: &Path, direct: bool) -> Result<Smgr, StorageError> {
        Self::with_segment_size(dir, direct, DEFAULT_BLOCKS_PER_SEGMENT)
    }

    /// Like [`Smgr::new`] with a smaller segment size, so that tests can
    /// cross segment boundaries without writing gigabytes.
    pub fn with_segment_size(
        dir: &Path,
        direct: bool,
        blocks_per_segment: u32,
    ) -> Result<Smgr, StorageError> {
        assert!(blocks_per_segment > 0, "segments hold at least one block");
        std::fs::create_dir_all(dir).map_err(|source| StorageError::Io {
            op: "create directory",
            path: dir.to_path_buf(),
            source,
        })?;
        Ok(Smgr {
            dir: dir.to_path_buf(),
            direct,
            blocks_per_segment,
        })
    }

    pub fn blocks_per_segment(&self) -> u32 {
        self.blocks_per_segment
    }

    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// A handle on relation `rel`; opens nothing yet.
    pub fn relation(self: &Arc<Self>, rel: u32) -> SmgrRelation {
        SmgrRelation {
            smgr: Arc::clone(self),
            rel,
            segments: Default::default(),
        }
    }

    fn segment_path(&self, rel: u32, fork: Fork, segno: u32) -> PathBuf {
        let base = format!("{rel}{}", fork.suffix());
        if segno == 0 {
            self.dir.join(base)
        } else {
            self.dir.join(format!("{base}.{segno}"))
        }
    }
}

/// One relation's files.
#[derive(Debug)]
pub struct SmgrRelation {
    smgr: Arc<Smgr>,
    rel: u32,
    /// Open segments per fork, in segment order.
    segments: [Mutex<Vec<Arc<SegmentFile>>>; Fork::COUNT],
}

/// Where a block lives: its segment file, the byte offset in it, and how
/// many blocks (this one included) remain in that segment.
#[derive(Debug, Clone)]
pub struct BlockLocation {
    pub file: Arc<SegmentFile>,
    pub offset: u64,
    pub blocks_left_in_segment: u32,
}

impl SmgrRelation {
    pub fn rel(&self) -> u32 {
        self.rel
    }

    /// Creates the fork's first segment (empty) if it does not exist.
    pub fn create(&self, fork: Fork) -> Result<(), StorageError> {
        self.segment(fork, 0, true).map(|_| ())
    }

    pub fn exists(&self, fork: Fork) -> bool {
        self.smgr.segment_path(self.rel, fork, 0).exists()
    }

    /// Segment `segno` of `fork`, which must exist (a file to sync).
    pub fn open_segment(&self, fork: Fork, segno: u32) -> Result<Arc<SegmentFile>, StorageError> {
        self.segment(fork, segno, false)
    }

    /// Opens (and with `create`, creates) segment `segno` of `fork`.
    /// Segments before it must exist.
    fn segment(
        &self,
        fork: Fork,
        segno: u32,
        create: bool,
    ) -> Result<Arc<SegmentFile>, StorageError> {
        let mut open = self.segments[fork as usize].lock();
        while open.len() <= segno as usize {
            let next = open.len() as u32;
            let path = self.smgr.segment_path(self.rel, fork, next);
            let file = SegmentFile::open(
                &path,
                FileIdent::Relation {
                    rel: self.rel,
                    fork,
                },
                next * self.smgr.blocks_per_segment,
                self.smgr.direct,
                true,
                create,
            )?;
            open.push(Arc::new(file));
        }
        Ok(Arc::clone(&open[segno as usize]))
    }

    /// Locates `block` of `fork`; the segment must exist.
    pub fn locate(&self, fork: Fork, block: BlockNumber) -> Result<BlockLocation, StorageError> {
        self.locate_inner(fork, block, false)
    }

    fn locate_inner(
        &self,
        fork: Fork,
        block: BlockNumber,
        create: bool,
    ) -> Result<BlockLocation, StorageError> {
        let per = self.smgr.blocks_per_segment;
        let segno = block / per;
        let within = block % per;
        Ok(BlockLocation {
            file: self.segment(fork, segno, create)?,
            offset: within as u64 * BLOCK_SIZE as u64,
            blocks_left_in_segment: per - within,
        })
    }

    /// Advises the kernel that `nblocks` blocks from `block` (within one
    /// segment) will be read soon; see [`SegmentFile::advise_willneed`].
    pub fn prefetch(
        &self,
        fork: Fork,
        block: BlockNumber,
        nblocks: u32,
    ) -> Result<(), StorageError> {
        let location = self.locate(fork, block)?;
        let nblocks = nblocks.min(location.blocks_left_in_segment);
        location
            .file
            .advise_willneed(location.offset, nblocks as usize * BLOCK_SIZE)
    }

    /// Number of blocks in the fork. A visibility-map or free-space fork
    /// that does not exist has none (they are created on first use); a
    /// main fork always exists from the relation's creation on, so a
    /// missing one is an error naming the file, not an empty table.
    pub fn nblocks(&self, fork: Fork) -> Result<BlockNumber, StorageError> {
        if fork != Fork::Main && !self.exists(fork) {
            return Ok(0);
        }
        let per = self.smgr.blocks_per_segment;
        let mut segno = 0u32;
        loop {
            let file = self.segment(fork, segno, false)?;
            let blocks = (file.size_bytes()? / BLOCK_SIZE as u64) as u32;
            if blocks < per || !self.smgr.segment_path(self.rel, fork, segno + 1).exists() {
                return Ok(segno * per + blocks);
            }
            segno += 1;
        }
    }

    /// Writes `pages` (whole blocks) starting at `first_block`, creating
    /// segments as needed; used to extend a fork.
    pub fn extend(
        &self,
        fork: Fork,
        first_block: BlockNumber,
        pages: &[u8],
    ) -> Result<(), StorageError> {
        if !pages.len().is_multiple_of(BLOCK_SIZE) {
            return Err(StorageError::Blocks {
                op: "extend",
                file: FileIdent::Relation {
                    rel: self.rel,
                    fork,
                }
                .to_string(),
                first: first_block,
                last: first_block,
                detail: format!("{} bytes is not a whole number of blocks", pages.len()),
            });
        }
        let count = (pages.len() / BLOCK_SIZE) as u32;
        self.for_each_new_run(fork, first_block, count, |loc, done, n| {
            let at = done as usize * BLOCK_SIZE;
            loc.file
                .write_all_at(loc.offset, &pages[at..at + n as usize * BLOCK_SIZE])
        })
    }

    /// Calls `f` for each run of the `count` blocks from `first_block` that
    /// lies in one segment (created if needed), with the run's location,
    /// the blocks before it and its length.
    fn for_each_new_run(
        &self,
        fork: Fork,
        first_block: BlockNumber,
        count: u32,
        mut f: impl FnMut(&BlockLocation, u32, u32) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        if fork == Fork::Main {
            // Extending creates later segments, never the first: a main
            // fork whose file was lost must not quietly start again empty.
            self.segment(fork, 0, false)?;
        }
        let mut done = 0;
        while done < count {
            let loc = self.locate_inner(fork, first_block + done, true)?;
            let n = (count - done).min(loc.blocks_left_in_segment);
            f(&loc, done, n)?;
            done += n;
        }
        Ok(())
    }

    /// Adds `count` zeroed blocks at `first_block`, creating segments as
    /// needed. More than a few blocks are allocated with `fallocate` rather
    /// than written (as PostgreSQL 16 does past 8 blocks): a bulk load
    /// would otherwise write every page twice, zeros first. Where the file
    /// system cannot, zeros are written.
    pub fn extend_zeroed(
        &self,
        fork: Fork,
        first_block: BlockNumber,
        count: u32,
    ) -> Result<(), StorageError> {
        const ALLOCATE_PAST_BLOCKS: u32 = 8;
        self.for_each_new_run(fork, first_block, count, |loc, _, n| {
            let len = n as usize * BLOCK_SIZE;
            let allocated = n > ALLOCATE_PAST_BLOCKS
                && match loc.file.allocate(loc.offset, len as u64) {
                    Ok(()) => true,
                    Err(StorageError::Io { source, .. })
                        if source.raw_os_error() == Some(libc::EOPNOTSUPP) =>
                    {
                        false
                    }
                    Err(e) => return Err(e),
                };
            if !allocated {
                loc.file.write_all_at(loc.offset, &AlignedBuf::new(len))?;
            }
            Ok(())
        })
    }

    /// Shortens the fork to `nblocks` blocks, removing whole segments past
    /// the end.
    pub fn truncate(&self, fork: Fork, nblocks: BlockNumber) -> Result<(), StorageError> {
        let per = self.smgr.blocks_per_segment;
        let old = self.nblocks(fork)?;
        let last_kept = nblocks.saturating_sub(1) / per;
        let last_old = old.saturating_sub(1) / per;
        let mut open = self.segments[fork as usize].lock();
        for segno in (last_kept + 1..=last_old).rev() {
            let path = self.smgr.segment_path(self.rel, fork, segno);
            std::fs::remove_file(&path).map_err(|source| StorageError::Io {
                op: "remove",
                path,
                source,
            })?;
        }
        open.truncate(last_kept as usize + 1);
        drop(open);
        let keep_in_last = nblocks - last_kept * per;
        let file = self.segment(fork, last_kept, false)?;
        file.set_len(keep_in_last as u64 * BLOCK_SIZE as u64)
    }

    /// The path of the fork's first segment file, for messages.
    pub fn path(&self, fork: Fork) -> PathBuf {
        self.smgr.segment_path(self.rel, fork, 0)
    }

    /// Makes every segment of the fork durable.
    pub fn fsync(&self, fork: Fork) -> Result<(), StorageError> {
        let nblocks = self.nblocks(fork)?;
        let segments = nblocks.div_ceil(self.smgr.blocks_per_segment).max(1);
        for segno in 0..segments {
            self.segment(fork, segno, false)?.fdatasync()?;
        }
        Ok(())
    }

    /// Forgets open segment files. I/O already staged or in flight keeps
    /// its own reference, so it completes normally.
    pub fn close(&self) {
        for fork in &self.segments {
            fork.lock().clear();
        }
    }

    /// Removes every segment of every fork. In-flight I/O on them still
    /// completes (the files stay open until their last I/O is recycled).
    pub fn unlink(&self) -> Result<(), StorageError> {
        self.close();
        for fork in Fork::ALL {
            let mut segno = 0;
            loop {
                let path = self.smgr.segment_path(self.rel, fork, segno);
                match std::fs::remove_file(&path) {
                    Ok(()) => segno += 1,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(source) => {
                        return Err(StorageError::Io {
                            op: "remove",
                            path,
                            source,
                        })
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(fill: u8) -> Vec<u8> {
        vec![fill; BLOCK_SIZE]
    }

    #[test]
    fn extend_crosses_segments_and_nblocks_counts_them() {
        let dir = tempfile::tempdir().unwrap();
        let smgr = Arc::new(Smgr::with_segment_size(dir.path(), false, 4).unwrap());
        let rel = smgr.relation(16384);
        rel.create(Fork::Main).unwrap();
        let mut data = Vec::new();
        for i in 0..10u8 {
            data.extend(page(i));
        }
        rel.extend(Fork::Main, 0, &data).unwrap();
        assert_eq!(rel.nblocks(Fork::Main).unwrap(), 10);
        assert!(dir.path().join("16384.2").exists());
        let loc = rel.locate(Fork::Main, 5).unwrap();
        assert_eq!(loc.offset, BLOCK_SIZE as u64);
        assert_eq!(loc.blocks_left_in_segment, 3);
        let mut buf = vec![0u8; BLOCK_SIZE];
        loc.file.read_exact_at(loc.offset, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 5));
        assert_eq!(
            loc.file.describe(loc.offset, 2 * BLOCK_SIZE),
            "blocks 5..6 of relation 16384"
        );
    }

    #[test]
    fn extend_zeroed_adds_zeroed_blocks_across_segments_allocated_or_written() {
        let dir = tempfile::tempdir().unwrap();
        let smgr = Arc::new(Smgr::with_segment_size(dir.path(), false, 16).unwrap());
        let rel = smgr.relation(7);
        rel.create(Fork::Main).unwrap();
        rel.extend(Fork::Main, 0, &page(3)).unwrap();
        // 15 + 16 blocks allocated, then 8 written as zeros.
        rel.extend_zeroed(Fork::Main, 1, 39).unwrap();
        assert_eq!(rel.nblocks(Fork::Main).unwrap(), 40);
        for block in [0, 1, 15, 16, 31, 32, 39] {
            let loc = rel.locate(Fork::Main, block).unwrap();
            let mut buf = vec![1u8; BLOCK_SIZE];
            loc.file.read_exact_at(loc.offset, &mut buf).unwrap();
            let expected = if block == 0 { 3 } else { 0 };
            assert!(buf.iter().all(|&b| b == expected), "block {block}");
        }
    }

    #[test]
    fn truncate_removes_whole_segments() {
        let dir = tempfile::tempdir().unwrap();
        let smgr = Arc::new(Smgr::with_segment_size(dir.path(), false, 4).unwrap());
        let rel = smgr.relation(1);
        rel.create(Fork::Main).unwrap();
        rel.extend(Fork::Main, 0, &vec![1u8; 10 * BLOCK_SIZE])
            .unwrap();
        rel.truncate(Fork::Main, 5).unwrap();
        assert_eq!(rel.nblocks(Fork::Main).unwrap(), 5);
        assert!(!dir.path().join("1.2").exists());
        rel.unlink().unwrap();
        let err = rel.nblocks(Fork::Main).unwrap_err().to_string();
        assert!(err.starts_with("could not open file"), "{err}");
        assert!(!rel.exists(Fork::Main));
        let err = rel.extend(Fork::Main, 0, &page(1)).unwrap_err().to_string();
        assert!(err.starts_with("could not open file"), "{err}");
        assert!(!rel.exists(Fork::Main), "extending does not recreate it");
    }

    #[test]
    fn reading_past_the_end_names_the_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let smgr = Arc::new(Smgr::new(dir.path(), false).unwrap());
        let rel = smgr.relation(7);
        rel.create(Fork::Main).unwrap();
        rel.extend(Fork::Main, 0, &page(1)).unwrap();
        let loc = rel.locate(Fork::Main, 1).unwrap();
        let mut buf = vec![0u8; BLOCK_SIZE];
        let err = loc.file.read_exact_at(loc.offset, &mut buf).unwrap_err();
        assert_eq!(
            err.to_string(),
            "could not read blocks 1..1 of relation 7: read only 0 of 8192 bytes"
        );
    }

    #[test]
    fn a_file_system_that_refuses_o_direct_is_named_with_the_setting_to_change() {
        // procfs refuses O_DIRECT with EINVAL, like some FUSE and network
        // file systems.
        let err =
            SegmentFile::open_path(Path::new("/proc/self/status"), true, false, 0).unwrap_err();
        assert!(
            matches!(err, StorageError::DirectIoUnsupported { .. }),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains("/proc/self/status") && text.contains("set io_direct=off"),
            "{text}"
        );
    }

    #[test]
    fn direct_io_refuses_misaligned_buffers() {
        let dir = tempfile::tempdir().unwrap();
        let smgr = Arc::new(Smgr::new(dir.path(), true).unwrap());
        let rel = smgr.relation(8);
        rel.create(Fork::Main).unwrap();
        let buf = AlignedBuf::new(2 * BLOCK_SIZE);
        let err = rel.extend(Fork::Main, 0, &buf[1..BLOCK_SIZE + 1]);
        assert!(
            matches!(err, Err(StorageError::Misaligned { .. })),
            "{err:?}"
        );
        rel.extend(Fork::Main, 0, &buf[..BLOCK_SIZE]).unwrap();
        assert_eq!(rel.nblocks(Fork::Main).unwrap(), 1);
    }

    /// Which of the file's first `nblocks` blocks are in the page cache.
    fn resident_blocks(file: &SegmentFile, nblocks: usize) -> Vec<bool> {
        let len = nblocks * BLOCK_SIZE;
        let page = 4096;
        // SAFETY: a private read-only mapping of a file we keep open, only
        // handed to mincore and unmapped before returning.
        unsafe {
            let map = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.raw_fd(),
                0,
            );
            assert_ne!(map, libc::MAP_FAILED);
            let mut vec = vec![0u8; len / page];
            assert_eq!(libc::mincore(map, len, vec.as_mut_ptr()), 0);
            libc::munmap(map, len);
            vec.chunks(BLOCK_SIZE / page)
                .map(|c| c.iter().all(|&b| b & 1 == 1))
                .collect()
        }
    }

    #[test]
    fn prefetch_brings_blocks_into_the_page_cache() {
        // In the source tree, not /tmp: tmpfs keeps every page resident.
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let smgr = Arc::new(Smgr::new(dir.path(), false).unwrap());
        let rel = smgr.relation(9);
        rel.create(Fork::Main).unwrap();
        rel.extend(Fork::Main, 0, &vec![3u8; 64 * BLOCK_SIZE])
            .unwrap();
        let file = rel.locate(Fork::Main, 0).unwrap().file;
        file.fdatasync().unwrap();
        // DONTNEED skips pages the kernel is still busy with (writeback,
        // its own read-ahead), so repeat it until they are gone.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            // SAFETY: plain system call on an open descriptor.
            let rc = unsafe { libc::posix_fadvise(file.raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            assert_eq!(rc, 0);
            if resident_blocks(&file, 64)[8..24].iter().all(|r| !r) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "blocks still cached after DONTNEED"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        rel.prefetch(Fork::Main, 8, 16).unwrap();
        // The kernel reads the advised range in the background.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let resident = resident_blocks(&file, 64);
            if resident[8..24].iter().all(|&r| r) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "advised blocks not cached: {resident:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}
