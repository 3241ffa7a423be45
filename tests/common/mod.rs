//! Shared set-up for the integration tests: an AIO instance for a method and
//! a data file whose every block says which block it is.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use aiostore::aio::{Aio, AioConfig};
use aiostore::config::IoMethod;
use aiostore::storage::{AlignedBuf, SegmentFile, BLOCK_SIZE};

/// Runs each named test function once per I/O method, as
/// `sync::name`, `worker::name` and `io_uring::name`.
#[macro_export]
macro_rules! for_each_method {
    ($($name:ident),* $(,)?) => {
        mod sync {
            $( #[test] fn $name() { super::$name(aiostore::config::IoMethod::Sync) } )*
        }
        mod worker {
            $( #[test] fn $name() { super::$name(aiostore::config::IoMethod::Worker) } )*
        }
        mod io_uring {
            $( #[test] fn $name() { super::$name(aiostore::config::IoMethod::IoUring) } )*
        }
    };
}

pub fn config(method: IoMethod) -> AioConfig {
    AioConfig {
        method,
        io_workers: 3,
        max_sessions: 16,
        io_max_concurrency: 32,
        io_max_combine_limit: 16,
        debug_io_latency_us: 0,
    }
}

/// Starts AIO with `config`, insisting that the method asked for is the
/// one in effect: a silent fallback would test the wrong method.
pub fn start(config: &AioConfig) -> Arc<Aio> {
    let aio = Aio::start(config).expect("start AIO");
    assert_eq!(aio.method(), config.method, "io_method fell back");
    aio
}

/// Byte `i` of block `blkno`: distinct per block and per position, so a
/// block read from the wrong place or only partly read is caught.
pub fn pattern_byte(blkno: u32, i: usize) -> u8 {
    (blkno as usize * 31 + i / 64 * 7 + 1) as u8
}

pub fn check_block(blkno: u32, data: &[u8]) {
    assert_eq!(data.len(), BLOCK_SIZE);
    for (i, &b) in data.iter().enumerate() {
        if b != pattern_byte(blkno, i) {
            panic!(
                "block {blkno} byte {i}: found {b}, expected {}",
                pattern_byte(blkno, i)
            );
        }
    }
}

/// A temporary directory on the build's file system (not a possible tmpfs
/// /tmp), so that direct I/O behaves as it will for users.
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir")
}

pub struct DataFile {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
    pub file: Arc<SegmentFile>,
    pub nblocks: u32,
}

/// A file of `nblocks` pattern blocks, opened with or without O_DIRECT.
pub fn data_file(nblocks: u32, direct: bool) -> DataFile {
    let dir = temp_dir();
    let path = dir.path().join("data");
    let mut buf = AlignedBuf::new(nblocks as usize * BLOCK_SIZE);
    for blkno in 0..nblocks {
        let block = &mut buf[blkno as usize * BLOCK_SIZE..(blkno as usize + 1) * BLOCK_SIZE];
        for (i, b) in block.iter_mut().enumerate() {
            *b = pattern_byte(blkno, i);
        }
    }
    std::fs::write(&path, &buf[..]).expect("write data file");
    let file = SegmentFile::open_path(&path, direct, true, 0).expect("open data file");
    DataFile {
        dir,
        path,
        file,
        nblocks,
    }
}

/// A tiny xorshift generator, so tests are reproducible without a crate.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
