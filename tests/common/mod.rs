//! Shared set-up for the integration tests: an AIO instance for a method and
//! a data file whose every block says which block it is.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use aiostore::aio::{Aio, AioConfig};
use aiostore::buffer::{BufferId, BufferPool, BufferSession, PoolConfig, ReadOp, SessionSettings};
use aiostore::config::IoMethod;
use aiostore::inject::{Injection, BEFORE_COMPLETE_SHARED};
use aiostore::page::{add_item, init_page, item, set_checksum, PageBytes};
use aiostore::storage::{AlignedBuf, Fork, SegmentFile, Smgr, BLOCK_SIZE};
use std::collections::VecDeque;

/// Runs each named test function once per I/O method, as
/// `sync::name`, `worker::name` and `io_uring::name`. Scenarios that
/// cannot exist under some method are listed after `; not sync:` (an I/O
/// that stays in flight: sync I/O never does) or `; worker only:` (I/O
/// workers' own behaviour), so that no method gets a test that passes
/// without checking anything.
#[macro_export]
macro_rules! for_each_method {
    (
        $($name:ident),* $(,)?
        $(; not sync: $($async_name:ident),* $(,)?)?
        $(; worker only: $($worker_name:ident),* $(,)?)?
    ) => {
        mod sync {
            $( #[test] fn $name() { super::$name(aiostore::config::IoMethod::Sync) } )*
        }
        mod worker {
            $( #[test] fn $name() { super::$name(aiostore::config::IoMethod::Worker) } )*
            $($( #[test] fn $async_name() { super::$async_name(aiostore::config::IoMethod::Worker) } )*)?
            $($( #[test] fn $worker_name() { super::$worker_name(aiostore::config::IoMethod::Worker) } )*)?
        }
        mod io_uring {
            $( #[test] fn $name() { super::$name(aiostore::config::IoMethod::IoUring) } )*
            $($( #[test] fn $async_name() { super::$async_name(aiostore::config::IoMethod::IoUring) } )*)?
        }
    };
}

/// Like [`for_each_method!`], each test twice more over: `direct::<method>`
/// and `buffered::<method>`, calling `name(method, direct)`.
#[macro_export]
macro_rules! direct_and_buffered {
    ($($name:ident),* $(,)?) => {
        mod direct {
            $crate::for_each_method!($($name),*);
            $(fn $name(method: aiostore::config::IoMethod) { super::$name(method, true) })*
        }
        mod buffered {
            $crate::for_each_method!($($name),*);
            $(fn $name(method: aiostore::config::IoMethod) { super::$name(method, false) })*
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

/// Settings of the WAL tests' databases: a 4 MiB pool (eviction writes
/// pages before their commit) and 8 sessions, with `direct` data and WAL
/// bypassing the page cache.
pub fn small_pool_settings(method: IoMethod, direct: bool) -> Vec<String> {
    let mut s = vec![
        format!("io_method={}", method.name()),
        "shared_buffers=512".into(),
        "max_sessions=8".into(),
    ];
    if direct {
        s.push("io_direct=data+wal".into());
    }
    s
}

/// A new database (in `data` of a temporary directory) open with
/// [`small_pool_settings`].
pub fn new_small_pool_db(
    method: IoMethod,
    direct: bool,
) -> (
    tempfile::TempDir,
    PathBuf,
    Arc<aiostore::database::Database>,
) {
    let dir = temp_dir();
    let path = dir.path().join("data");
    aiostore::database::Database::init(&path).unwrap();
    let db =
        aiostore::database::Database::open(&path, &small_pool_settings(method, direct)).unwrap();
    (dir, path, db)
}

/// Closes `db` as `kill -9` would (`Database::simulate_crash`: nothing
/// more is written); it must be the last reference.
pub fn crash(db: Arc<aiostore::database::Database>) {
    db.simulate_crash();
    assert_eq!(
        Arc::strong_count(&db),
        1,
        "a session still holds the database"
    );
    drop(db);
}

/// Runs `text`, failing the test with the error if it fails.
pub fn run(s: &mut aiostore::database::Session, text: &str) -> Vec<aiostore::sql::StatementResult> {
    aiostore::sql::execute(s, text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// The lines of `EXPLAIN …` as text: the first column of the rows of the
/// last statement of `text`.
pub fn plan_lines(s: &mut aiostore::database::Session, text: &str) -> Vec<String> {
    use aiostore::types::Value;
    run(s, text)
        .pop()
        .expect("a statement")
        .rows
        .into_iter()
        .map(|r| match &r[0] {
            Value::Text(line) => line.clone(),
            other => panic!("{text}: not a plan line: {other:?}"),
        })
        .collect()
}

/// The error `text` fails with (failing the test if it succeeds).
pub fn err(s: &mut aiostore::database::Session, text: &str) -> String {
    match aiostore::sql::execute(s, text) {
        Ok(_) => panic!("{text}: succeeded"),
        Err(e) => e.to_string(),
    }
}

/// A small deterministic generator (xorshift), so that a failure repeats
/// from its seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A key below `range` as SQL text, or NULL about one time in
    /// `null_one_in`.
    pub fn key(&mut self, range: u64, null_one_in: u64) -> String {
        if self.below(null_one_in) == 0 {
            "NULL".into()
        } else {
            self.below(range).to_string()
        }
    }
}

/// The rows of the last statement of `sql`, in the order returned.
pub fn rows(s: &mut aiostore::database::Session, sql: &str) -> Vec<Vec<aiostore::types::Value>> {
    run(s, sql).pop().unwrap().rows
}

/// Only sequential scans.
pub fn force_seq(s: &mut aiostore::database::Session) {
    run(s, "SET enable_seqscan = on; SET enable_bitmapscan = off; SET enable_indexscan = off; SET enable_indexonlyscan = off");
}

/// Only bitmap scans where one is possible.
pub fn force_bitmap(s: &mut aiostore::database::Session) {
    run(s, "SET enable_seqscan = off; SET enable_indexscan = off; SET enable_indexonlyscan = off; SET enable_bitmapscan = on");
}

/// Only plain index scans where one is possible (index-only scans too
/// where `only`).
pub fn force_index(s: &mut aiostore::database::Session, only: bool) {
    run(
        s,
        "SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_indexscan = on",
    );
    run(
        s,
        &format!(
            "SET enable_indexonlyscan = {}",
            if only { "on" } else { "off" }
        ),
    );
}

/// The rows of the last statement of `sql`, sorted (plans may return
/// them in different orders).
pub fn sorted_rows(
    s: &mut aiostore::database::Session,
    sql: &str,
) -> Vec<Vec<aiostore::types::Value>> {
    let mut rows = run(s, sql).pop().unwrap().rows;
    // Each row formatted once, not once per comparison.
    rows.sort_by_cached_key(|r| format!("{r:?}"));
    rows
}

/// EXPLAIN's lines for `sql` (which may begin with EXPLAIN's options in
/// parentheses), without the planner's estimates (`COSTS OFF`, as
/// PostgreSQL's own tests compare plans), so that they compare as text.
pub fn explain_lines(s: &mut aiostore::database::Session, sql: &str) -> Vec<String> {
    use aiostore::types::Value;
    let explain = match sql.trim_start().strip_prefix('(') {
        Some(options) => format!("EXPLAIN (COSTS OFF, {options}"),
        None => format!("EXPLAIN (COSTS OFF) {sql}"),
    };
    run(s, &explain)
        .pop()
        .unwrap()
        .rows
        .into_iter()
        .map(|r| match &r[0] {
            Value::Text(t) => t.clone(),
            other => panic!("a plan line, not {other:?}"),
        })
        .collect()
}

/// The first row of the last statement of `text`, as integers; NULL (the
/// max() of no rows) reads as 0.
pub fn ints(s: &mut aiostore::database::Session, text: &str) -> Vec<i64> {
    use aiostore::types::Value;
    run(s, text).pop().unwrap().rows[0]
        .iter()
        .map(|v| match v {
            Value::BigInt(x) => *x,
            Value::Integer(x) => i64::from(*x),
            Value::Null => 0,
            v => panic!("{text}: not an integer: {v:?}"),
        })
        .collect()
}

/// Checks the committed tables' storage as the crash test does (map
/// agrees with heap, every page verifies, files and catalog match),
/// failing the test on the first fault.
pub fn storage_is_sound(
    db: &Arc<aiostore::database::Database>,
) -> aiostore::crashtest::check::Findings {
    let mut s = db.session().unwrap();
    let mut findings = aiostore::crashtest::check::Findings::default();
    let tables = db.catalog().tables();
    aiostore::crashtest::check::check_storage(db, &mut s, &tables, &mut findings)
        .unwrap_or_else(|e| panic!("storage: {e}"));
    findings
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

#[allow(unused_imports)] // not every test file uses it
pub use aiostore::bench::XorShift;

// ---- a relation of checksummed pages behind a buffer pool ----

pub const REL: u32 = 16384;

pub struct Db {
    pub _dir: tempfile::TempDir,
    pub aio: Arc<Aio>,
    pub smgr: Arc<Smgr>,
    pub pool: Arc<BufferPool>,
}

/// The tuple stored in block `blkno`: says which block it is.
pub fn payload(blkno: u32) -> Vec<u8> {
    format!("block {blkno:08}").into_bytes().repeat(8)
}

pub fn page_for(blkno: u32) -> PageBytes {
    let mut page = [0u8; BLOCK_SIZE];
    init_page(&mut page, 0);
    add_item(&mut page, &payload(blkno)).unwrap();
    set_checksum(&mut page, blkno);
    page
}

pub fn db(method: IoMethod, nblocks: u32, nbuffers: u32) -> Db {
    db_with_segments(
        method,
        nblocks,
        nbuffers,
        aiostore::storage::DEFAULT_BLOCKS_PER_SEGMENT,
    )
}

/// Like [`db`] with segment files of `blocks_per_segment` blocks.
pub fn db_with_segments(
    method: IoMethod,
    nblocks: u32,
    nbuffers: u32,
    blocks_per_segment: u32,
) -> Db {
    db_with_files(method, nblocks, nbuffers, blocks_per_segment, true)
}

/// Like [`db`] with buffered (not direct) I/O.
pub fn db_buffered(method: IoMethod, nblocks: u32, nbuffers: u32) -> Db {
    db_with_files(
        method,
        nblocks,
        nbuffers,
        aiostore::storage::DEFAULT_BLOCKS_PER_SEGMENT,
        false,
    )
}

pub fn db_with_files(
    method: IoMethod,
    nblocks: u32,
    nbuffers: u32,
    blocks_per_segment: u32,
    direct: bool,
) -> Db {
    let dir = temp_dir();
    let aio = start(&AioConfig {
        max_sessions: 8,
        ..config(method)
    });
    let smgr = Arc::new(Smgr::with_segment_size(dir.path(), direct, blocks_per_segment).unwrap());
    let rel = smgr.relation(REL);
    rel.create(Fork::Main).unwrap();
    let mut pages = AlignedBuf::new(nblocks as usize * BLOCK_SIZE);
    for blkno in 0..nblocks {
        let at = blkno as usize * BLOCK_SIZE;
        pages[at..at + BLOCK_SIZE].copy_from_slice(&page_for(blkno));
    }
    rel.extend(Fork::Main, 0, &pages).unwrap();
    let pool = BufferPool::new(
        Arc::clone(&aio),
        Arc::clone(&smgr),
        &PoolConfig {
            nbuffers,
            max_sessions: 4,
        },
    )
    .expect("the pool is allocated");
    Db {
        _dir: dir,
        aio,
        smgr,
        pool,
    }
}

pub fn session(db: &Db) -> BufferSession {
    db.pool.session(SessionSettings::default()).unwrap()
}

pub fn check(s: &BufferSession, id: u32, blkno: u32) {
    s.with_page(id, |page| {
        assert_eq!(item(page, 0).unwrap(), &payload(blkno)[..], "block {blkno}")
    });
}

/// Runs `work` in `sessions` threads at once, each with a buffer session of
/// its own and its index (to seed its random choices); returns when all
/// have finished, and fails if any did.
pub fn in_concurrent_sessions(
    db: &Db,
    sessions: u64,
    work: impl Fn(&mut BufferSession, u64) + Sync,
) {
    std::thread::scope(|scope| {
        for index in 0..sessions {
            let work = &work;
            scope.spawn(move || work(&mut session(db), index));
        }
    });
}

/// Overwrites block `blkno` on disk (behind the pool's back).
pub fn write_raw(db: &Db, blkno: u32, page: &PageBytes) {
    let mut buf = AlignedBuf::new(BLOCK_SIZE);
    buf.copy_from_slice(page);
    db.smgr
        .relation(REL)
        .extend(Fork::Main, blkno, &buf)
        .unwrap();
}

/// Starts a read of up to `max_blocks` blocks of [`REL`] from
/// `first_block`, with no strategy and default flags.
pub fn start_read_buffers(
    s: &mut BufferSession,
    first_block: u32,
    max_blocks: usize,
    forwarded: &mut VecDeque<BufferId>,
) -> ReadOp {
    s.start_read_buffers(
        REL,
        Fork::Main,
        first_block,
        max_blocks,
        forwarded,
        None,
        Default::default(),
    )
    .unwrap()
}

/// Releases the pins of a read's buffers.
pub fn release_op(s: &mut BufferSession, op: &mut ReadOp) {
    for id in op.buffers.drain(..) {
        s.release(id);
    }
}

pub type HeldRead = (
    std::thread::JoinHandle<Result<(), String>>,
    std::sync::mpsc::Sender<()>,
);

/// Session A starts a read of `block` and keeps it in progress: under
/// worker it is parked at the completion point (attached by the caller),
/// under io_uring nobody has reaped it. A waits for its read when told.
/// `None` if the worker queue was busy and A executed the read itself
/// (then parked in its own thread): the caller tries again.
pub fn held_read(db: &Db, method: IoMethod, block: u32) -> Option<HeldRead> {
    assert_ne!(method, IoMethod::Sync, "a sync read is never in flight");
    let pool = Arc::clone(&db.pool);
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let a = std::thread::spawn(move || {
        let mut a = pool.session(SessionSettings::default()).unwrap();
        let mut fwd = VecDeque::new();
        let mut op = start_read_buffers(&mut a, block, 1, &mut fwd);
        started_tx.send(()).unwrap();
        go_rx.recv().unwrap();
        let r = a
            .wait_read_buffers(&mut op)
            .map(|_| ())
            .map_err(|e| e.to_string());
        release_op(&mut a, &mut op);
        r
    });
    if method == IoMethod::Worker {
        assert!(db
            .aio
            .injections()
            .wait_until_parked(BEFORE_COMPLETE_SHARED));
        if db.aio.inflight().iter().any(|row| row.flags == "sync") {
            db.aio.injections().release(BEFORE_COMPLETE_SHARED);
            started_rx.recv().unwrap();
            go_tx.send(()).unwrap();
            // This read is not the scenario's (an injected error may fail
            // it, as it should): only A's thread must end cleanly.
            let _ = a.join().expect("session A's thread");
            return None;
        }
    }
    started_rx.recv().unwrap();
    assert!(
        db.pool
            .contents()
            .iter()
            .any(|row| row.tag.block == block && row.io_in_progress),
        "A's read of block {block} is in progress"
    );
    Some((a, go_tx))
}

/// How often [`hold_read`] tries before giving up: each try fails only if
/// the worker queue's lock was contended at that moment.
pub const HOLD_READ_ATTEMPTS: usize = 100;

/// [`held_read`] until it holds a read: attaches `injection` at the
/// completion point before each try, and evicts the relation after a try
/// whose read A executed itself.
pub fn hold_read(db: &Db, method: IoMethod, block: u32, injection: Injection) -> HeldRead {
    for _ in 0..HOLD_READ_ATTEMPTS {
        db.aio
            .injections()
            .attach(BEFORE_COMPLETE_SHARED, injection.clone());
        if let Some(held) = held_read(db, method, block) {
            return held;
        }
        session(db).evict_relation(REL).unwrap();
    }
    panic!("the read of block {block} never reached an I/O worker in {HOLD_READ_ATTEMPTS} tries");
}

/// Releases the thread parked at the completion point as soon as there is
/// one (under io_uring, whoever reaps the held read parks there).
pub fn release_when_parked(aio: &Arc<Aio>) -> std::thread::JoinHandle<()> {
    let aio = Arc::clone(aio);
    std::thread::spawn(move || {
        assert!(aio.injections().wait_until_parked(BEFORE_COMPLETE_SHARED));
        aio.injections().release(BEFORE_COMPLETE_SHARED);
    })
}

/// The longest a test waits for a transaction to show in the wait graph.
pub const SEEN_WAITING_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// Waits until some transaction waits for another's (the transaction
/// manager's wait graph), so that a test can order what comes next
/// after the wait began; `who` names the waiter expected, for the panic.
pub fn wait_until_someone_waits(db: &aiostore::database::Database, who: &str) {
    let started = std::time::Instant::now();
    while db.txn().waits().is_empty() {
        assert!(
            started.elapsed() < SEEN_WAITING_WITHIN,
            "{who} never waited"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The files of user relations (tables and indexes) in the data
/// directory at `path`, by relation number.
pub fn relation_files(path: &std::path::Path) -> std::collections::BTreeSet<u32> {
    aiostore::database::recovery::table_files(&path.join("base"), 16384)
        .unwrap()
        .into_iter()
        .collect()
}
