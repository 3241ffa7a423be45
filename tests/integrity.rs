//! Data integrity under concurrency: an UPDATE racing a commit never keeps
//! both versions of a row, and sessions moving money between accounts keep
//! the total and the number of accounts, across a reopen. Every I/O method.

mod common;

use std::sync::{Arc, Barrier};

use aiostore::config::IoMethod;
use aiostore::database::{Database, Session};
use aiostore::exec::ExecError;
use aiostore::heap::HeapError;
use aiostore::inject::{
    Injection, BUFFER_EXTEND_AFTER_GROW, HEAP_INSERT_AFTER_EXTEND, TXN_STATUS_BETWEEN_LOOKUPS,
};
use aiostore::sql::{self, SqlError};
use aiostore::storage::Fork;
use aiostore::types::Value;
use common::temp_dir;

const ACCOUNTS: i64 = 100;
const BALANCE_START: i64 = 1000;
const SESSIONS: usize = 8;
const TRANSFERS_PER_SESSION: usize = 1000;

fn settings(method: IoMethod) -> Vec<String> {
    vec![
        format!("io_method={}", method.name()),
        "shared_buffers=256".into(),
        "max_sessions=16".into(),
    ]
}

/// A new data directory, open.
fn new_db(method: IoMethod) -> (tempfile::TempDir, std::path::PathBuf, Arc<Database>) {
    let dir = temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    let db = Database::open(&path, &settings(method)).unwrap();
    (dir, path, db)
}

fn run(s: &mut Session, text: &str) -> Vec<sql::StatementResult> {
    sql::execute(s, text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn scalar(s: &mut Session, text: &str) -> i64 {
    match &run(s, text).pop().unwrap().rows[0][0] {
        Value::BigInt(x) => *x,
        Value::Integer(x) => i64::from(*x),
        v => panic!("{text}: not an integer: {v:?}"),
    }
}

fn is_conflict(e: &SqlError) -> bool {
    matches!(
        e,
        SqlError::Exec(ExecError::Heap(
            HeapError::ConcurrentUpdate { .. } | HeapError::Wait { .. }
        ))
    )
}

/// Session 2 runs `statement` while session 1 holds row 1 (balance 100)
/// changed by `first` in an open transaction; session 2 is parked between
/// its two status lookups of session 1's transaction while session 1
/// commits. Returns session 2's outcome and session 1 (to look at the
/// table).
fn race_a_commit(
    method: IoMethod,
    first: &str,
    second: &'static str,
) -> (
    Result<Vec<sql::StatementResult>, SqlError>,
    Session,
    tempfile::TempDir,
) {
    let (dir, _, db) = new_db(method);
    let mut s1 = db.session().unwrap();
    run(
        &mut s1,
        "CREATE TABLE acc (id integer, balance integer); INSERT INTO acc VALUES (1, 100), (2, 200)",
    );
    run(&mut s1, &format!("BEGIN; {first}"));
    let points = db.txn().injections();
    points.attach(TXN_STATUS_BETWEEN_LOOKUPS, Injection::park().times(1));
    let second = {
        let db = Arc::clone(&db);
        std::thread::spawn(move || {
            let mut s2 = db.session().unwrap();
            sql::execute(&mut s2, second)
        })
    };
    assert!(points.wait_until_parked(TXN_STATUS_BETWEEN_LOOKUPS));
    run(&mut s1, "COMMIT");
    points.release(TXN_STATUS_BETWEEN_LOOKUPS);
    (second.join().unwrap(), s1, dir)
}

/// Session 1 updates a row and commits while session 2's UPDATE of the
/// same row is parked between its two status lookups of session 1's
/// transaction. Asked in the wrong order (commit log, then running set),
/// the check called the committed transaction aborted and session 2
/// updated the old version too: two live versions of one row. Under read
/// committed session 2 now updates the newer version (PostgreSQL's
/// EvalPlanQual); under repeatable read it fails.
fn an_update_racing_a_commit_follows_the_row_instead_of_duplicating_it(method: IoMethod) {
    let (outcome, mut s1, _dir) = race_a_commit(
        method,
        "UPDATE acc SET balance = balance + 1 WHERE id = 1",
        "UPDATE acc SET balance = balance + 10 WHERE id = 1",
    );
    assert_eq!(outcome.unwrap()[0].tag, "UPDATE 1");
    assert_eq!(scalar(&mut s1, "SELECT count(*) FROM acc WHERE id = 1"), 1);
    assert_eq!(scalar(&mut s1, "SELECT balance FROM acc WHERE id = 1"), 111);

    let (outcome, mut s1, _dir) = race_a_commit(
        method,
        "UPDATE acc SET balance = balance + 1 WHERE id = 1",
        "BEGIN ISOLATION LEVEL REPEATABLE READ; UPDATE acc SET balance = balance + 10 WHERE id = 1",
    );
    match outcome {
        Err(e) if is_conflict(&e) => {}
        other => panic!("expected a concurrent-update error, got {other:?}"),
    }
    assert_eq!(scalar(&mut s1, "SELECT count(*) FROM acc WHERE id = 1"), 1);
    assert_eq!(scalar(&mut s1, "SELECT balance FROM acc WHERE id = 1"), 101);
}

/// A read-committed UPDATE or DELETE that meets a row changed under it
/// acts on the row as it is now: not at all if it no longer matches the
/// WHERE clause or is gone.
fn a_read_committed_change_rechecks_the_newer_version(method: IoMethod) {
    // (session 1's change, session 2's statement, its tag, a check and
    // its value afterwards)
    for (first, second, tag, check, expected) in [
        (
            "UPDATE acc SET id = 3 WHERE id = 1",
            "UPDATE acc SET balance = 0 WHERE id = 1",
            "UPDATE 0",
            "SELECT sum(balance) FROM acc",
            300,
        ),
        (
            "UPDATE acc SET balance = balance + 5 WHERE id = 1",
            "DELETE FROM acc WHERE balance < 200",
            "DELETE 1",
            "SELECT count(*) FROM acc",
            1,
        ),
        (
            "DELETE FROM acc WHERE id = 1",
            "UPDATE acc SET balance = balance + 1 WHERE id = 1",
            "UPDATE 0",
            "SELECT count(*) FROM acc",
            1,
        ),
    ] {
        let (outcome, mut s1, _dir) = race_a_commit(method, first, second);
        assert_eq!(outcome.unwrap()[0].tag, tag, "{first} / {second}");
        assert_eq!(scalar(&mut s1, check), expected, "{first} / {second}");
    }
}

/// Session 1 adds a block for its row and is parked before it formats
/// the block; session 2 finds the block (as the table's last) and puts its
/// own row there. Session 1 must keep session 2's row: it formatted the
/// block unconditionally and wiped it, and rows vanished (the bank test
/// lost whole accounts this way).
fn a_block_another_session_filled_after_an_extension_is_not_formatted_again(method: IoMethod) {
    let (_dir, _, db) = new_db(method);
    let mut s1 = db.session().unwrap();
    run(
        &mut s1,
        "CREATE TABLE t (id integer, note text); \
         INSERT INTO t SELECT i, repeat('x', 2500) FROM generate_series(1, 3) i",
    );
    let points = db.aio().injections();
    points.attach(HEAP_INSERT_AFTER_EXTEND, Injection::park().times(1));
    let first = {
        let db = Arc::clone(&db);
        std::thread::spawn(move || {
            let mut s = db.session().unwrap();
            run(&mut s, "INSERT INTO t VALUES (4, repeat('x', 2500))");
        })
    };
    assert!(points.wait_until_parked(HEAP_INSERT_AFTER_EXTEND));
    run(&mut s1, "INSERT INTO t VALUES (5, repeat('y', 2500))");
    points.release(HEAP_INSERT_AFTER_EXTEND);
    first.join().unwrap();
    assert_eq!(scalar(&mut s1, "SELECT count(*) FROM t"), 5);
    assert_eq!(scalar(&mut s1, "SELECT sum(id) FROM t"), 15);
}

/// How long the test below lets a second insert run while the first is
/// parked mid-extension. With the bug it finishes at once (it filled the
/// new block and let it go); fixed, it waits for the parked extension and
/// the grace runs out.
const SECOND_INSERT_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Session 1 extends the table and is parked after the file has grown,
/// before its new buffer is valid. Session 2 takes the new block as the
/// table's last and puts its row there; the block is then written back
/// and evicted. Session 1 must keep that row: it looked its buffer up only
/// after the file grew, missed the evicted one, zeroed a fresh buffer over
/// the row, and whole pages of rows vanished (the crash test's lock
/// workload lost 58 rows this way). Now its buffer is in the pool first,
/// and session 2 waits for it.
fn a_new_block_filled_and_evicted_before_its_extension_ends_keeps_its_rows(method: IoMethod) {
    let (_dir, _, db) = new_db(method);
    let mut s1 = db.session().unwrap();
    // The free-space map and visibility map exist already, so the first
    // extension to reach the point is the heap's block 1.
    run(
        &mut s1,
        "CREATE TABLE t (id integer, note text); \
         INSERT INTO t SELECT i, repeat('x', 2500) FROM generate_series(1, 3) i; \
         VACUUM t",
    );
    let points = db.aio().injections();
    points.attach(
        BUFFER_EXTEND_AFTER_GROW,
        Injection::park().at_offset(1).times(1),
    );
    let spawn_insert = |id: i64| {
        let db = Arc::clone(&db);
        std::thread::spawn(move || {
            let mut s = db.session().unwrap();
            run(
                &mut s,
                &format!("INSERT INTO t VALUES ({id}, repeat('y', 2500))"),
            );
        })
    };
    let first = spawn_insert(4);
    assert!(points.wait_until_parked(BUFFER_EXTEND_AFTER_GROW));
    let second = spawn_insert(5);
    let deadline = std::time::Instant::now() + SECOND_INSERT_GRACE;
    while !second.is_finished() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    if second.is_finished() {
        // Its block written back and dropped from the pool (fixed, the
        // second insert is still waiting, and the claimed buffer could not
        // be dropped).
        run(&mut s1, "SELECT evict_relation('t')");
    }
    points.release(BUFFER_EXTEND_AFTER_GROW);
    first.join().unwrap();
    second.join().unwrap();
    run(&mut s1, "SELECT evict_relation('t')");
    assert_eq!(scalar(&mut s1, "SELECT count(*) FROM t"), 5);
    assert_eq!(scalar(&mut s1, "SELECT sum(id) FROM t"), 15);
}

/// One transfer of `amount` from `from` to `to` in a transaction, the
/// lower id updated first so that two transfers never wait for each other
/// in a cycle. Under read committed a row changed meanwhile is followed to
/// its newer version, so no transfer fails.
fn transfer(s: &mut Session, from: i64, to: i64, amount: i64) {
    let (first, first_delta, second, second_delta) = if from < to {
        (from, -amount, to, amount)
    } else {
        (to, amount, from, -amount)
    };
    run(s, "BEGIN");
    for (id, delta) in [(first, first_delta), (second, second_delta)] {
        let text = format!("UPDATE acc SET balance = balance + ({delta}) WHERE id = {id}");
        assert_eq!(run(s, &text)[0].tag, "UPDATE 1", "{text}");
    }
    run(s, "COMMIT");
}

/// A small, seeded generator: each session draws its own transfers.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn check_invariants(s: &mut Session, when: &str) {
    assert_eq!(
        scalar(s, "SELECT count(*) FROM acc"),
        ACCOUNTS,
        "{when}: accounts"
    );
    let twice = run(s, "SELECT id FROM acc GROUP BY id HAVING count(*) > 1")
        .pop()
        .unwrap()
        .rows;
    assert!(twice.is_empty(), "{when}: accounts found twice: {twice:?}");
    assert_eq!(
        scalar(s, "SELECT sum(balance) FROM acc"),
        ACCOUNTS * BALANCE_START,
        "{when}: total"
    );
}

/// `SESSIONS` sessions make random transfers between `ACCOUNTS` accounts
/// at once; after each run and after the database is reopened there are
/// exactly `ACCOUNTS` accounts and the total is unchanged.
fn bank_transfers_keep_the_total_and_the_accounts(method: IoMethod) {
    let dir = temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    for run_no in 0..2u64 {
        let db = Database::open(&path, &settings(method)).unwrap();
        let mut s = db.session().unwrap();
        if run_no == 0 {
            run(
                &mut s,
                &format!(
                    "CREATE TABLE acc (id integer NOT NULL, balance bigint NOT NULL); \
                     INSERT INTO acc SELECT i, {BALANCE_START} FROM generate_series(1, {ACCOUNTS}) i"
                ),
            );
        } else {
            check_invariants(&mut s, "after reopen");
        }
        let start = Arc::new(Barrier::new(SESSIONS));
        let workers: Vec<_> = (0..SESSIONS)
            .map(|n| {
                let db = Arc::clone(&db);
                let start = Arc::clone(&start);
                std::thread::spawn(move || {
                    let mut s = db.session().unwrap();
                    let mut rng = Lcg(run_no * 1000 + n as u64 + 1);
                    let mut committed = 0;
                    start.wait();
                    for _ in 0..TRANSFERS_PER_SESSION {
                        let from = 1 + rng.below(ACCOUNTS as u64) as i64;
                        let step = 1 + rng.below(ACCOUNTS as u64 - 1) as i64;
                        let to = 1 + (from - 1 + step) % ACCOUNTS;
                        assert_ne!(from, to);
                        let amount = 1 + rng.below(50) as i64;
                        transfer(&mut s, from, to, amount);
                        committed += 1;
                    }
                    committed
                })
            })
            .collect();
        let committed: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
        assert_eq!(committed, SESSIONS * TRANSFERS_PER_SESSION);
        check_invariants(&mut s, &format!("after run {run_no}"));
        // Vacuum between runs, so that the second run also meets pages
        // whose dead versions were removed and whose room is reused.
        run(&mut s, "VACUUM acc");
        check_invariants(&mut s, &format!("after vacuum {run_no}"));
    }
    let db = Database::open(&path, &settings(method)).unwrap();
    let mut s = db.session().unwrap();
    check_invariants(&mut s, "after the last reopen");
}

/// A data directory holding table `t` (3 rows) and `u` (2 rows), closed.
fn closed_db_with_tables(method: IoMethod) -> (tempfile::TempDir, std::path::PathBuf) {
    let (dir, path, db) = new_db(method);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE t (id integer, note text); INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c'); \
         CREATE TABLE u (id integer); INSERT INTO u VALUES (1), (2)",
    );
    drop(s);
    drop(db);
    (dir, path)
}

fn open_err(path: &std::path::Path, method: IoMethod, extra: &[&str]) -> String {
    let mut settings = settings(method);
    settings.extend(extra.iter().map(|s| s.to_string()));
    match Database::open(path, &settings) {
        Ok(_) => panic!("opened a damaged data directory"),
        Err(e) => e.to_string(),
    }
}

/// The file of table `t`'s main fork.
fn file_of_t(path: &std::path::Path) -> std::path::PathBuf {
    path.join("base").join("16384")
}

/// A table whose file was deleted is an error naming the file, not an
/// empty table; the other tables stay usable.
fn a_deleted_table_file_is_an_error_not_an_empty_table(method: IoMethod) {
    let (_dir, path) = closed_db_with_tables(method);
    std::fs::remove_file(file_of_t(&path)).unwrap();
    let db = Database::open(&path, &settings(method)).unwrap();
    let mut s = db.session().unwrap();
    for text in [
        "SELECT count(*) FROM t",
        "INSERT INTO t VALUES (4, 'd')",
        "DELETE FROM t",
        "VACUUM t",
    ] {
        let e = sql::execute(&mut s, text).expect_err(text).to_string();
        assert!(
            e.contains("could not open file")
                && e.contains("base/16384")
                && e.contains("No such file"),
            "{text}: {e}"
        );
    }
    assert_eq!(scalar(&mut s, "SELECT count(*) FROM u"), 2);
}

/// The commit log and the id reservation are the database's own
/// bookkeeping: missing or cut short, the directory is not opened (rows
/// of committed transactions would vanish, ids would be handed out again).
fn missing_or_truncated_transaction_files_refuse_to_open(method: IoMethod) {
    let (_dir, path) = closed_db_with_tables(method);
    let xact = path.join("xact");
    let saved = std::fs::read(&xact).unwrap();
    std::fs::remove_file(&xact).unwrap();
    let e = open_err(&path, method, &[]);
    assert!(
        e.starts_with("could not open file") && e.contains("xact"),
        "{e}"
    );
    std::fs::write(&xact, &saved[..100]).unwrap();
    let e = open_err(&path, method, &[]);
    assert!(
        e.starts_with("could not access status of transaction"),
        "{e}"
    );
    std::fs::write(&xact, &saved).unwrap();
    let reserved = path.join("xid_reserved");
    std::fs::remove_file(&reserved).unwrap();
    let e = open_err(&path, method, &[]);
    assert!(
        e.contains("xid_reserved") && e.contains("No such file"),
        "{e}"
    );
}

/// An emptied or missing catalog relation is damage, not a database
/// whose tables have no columns.
fn an_emptied_catalog_relation_refuses_to_open(method: IoMethod) {
    let (_dir, path) = closed_db_with_tables(method);
    let columns = path.join("base").join("2");
    let saved = std::fs::read(&columns).unwrap();
    std::fs::write(&columns, b"").unwrap();
    let e = open_err(&path, method, &[]);
    assert!(
        e.contains("the catalog is damaged") && e.contains("has no columns"),
        "{e}"
    );
    std::fs::remove_file(&columns).unwrap();
    let e = open_err(&path, method, &[]);
    assert!(
        e.contains("could not open file") && e.contains("base/2"),
        "{e}"
    );
    std::fs::write(&columns, &saved).unwrap();
    let db = Database::open(&path, &settings(method)).unwrap();
    let mut s = db.session().unwrap();
    assert_eq!(scalar(&mut s, "SELECT count(*) FROM t"), 3);
}

/// A catalog page that fails its checksum stops the directory from
/// opening, and the command line's ignore_checksum_failure (or
/// zero_damaged_pages) gets past it as it would for a table's page.
fn a_damaged_catalog_page_is_recoverable_from_the_command_line(method: IoMethod) {
    let (_dir, path) = closed_db_with_tables(method);
    let tables = path.join("base").join("1");
    let mut page = std::fs::read(&tables).unwrap();
    // A byte in the page's free space: the rows stay intact, the checksum
    // no longer matches.
    page[4096] ^= 0x5a;
    std::fs::write(&tables, &page).unwrap();
    let e = open_err(&path, method, &[]);
    assert!(e.contains("invalid page in block 0"), "{e}");
    let db = Database::open(
        &path,
        &[settings(method), vec!["ignore_checksum_failure=on".into()]].concat(),
    )
    .unwrap();
    let mut s = db.session().unwrap();
    assert_eq!(scalar(&mut s, "SELECT count(*) FROM t"), 3);
    drop(s);
    drop(db);
    // Zeroed, the page loses both tables' rows: the directory opens
    // without them (their column rows are ignored with a warning).
    let db = Database::open(
        &path,
        &[settings(method), vec!["zero_damaged_pages=on".into()]].concat(),
    )
    .unwrap();
    assert!(db.catalog().tables().is_empty());
}

/// Blocks in the main fork of table `name` of an open database.
fn blocks(db: &Database, name: &str) -> u32 {
    let rel = db.catalog().table(name).unwrap().heap.rel;
    db.pool().relation(rel).nblocks(Fork::Main).unwrap()
}

/// How many pages VACUUM of one table says it cut off the end.
fn vacuum_cut(s: &mut Session, table: &str) -> u32 {
    let info = run(s, &format!("VACUUM {table}"))
        .pop()
        .unwrap()
        .notices
        .join("\n");
    info.split(" empty pages cut off the end")
        .next()
        .and_then(|before| before.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of pages cut in {info:?}"))
}

/// Table `t` of 400 rows (about 12 pages) of which all but the first 40
/// are deleted: the pages at its end hold only dead rows.
fn table_with_a_dead_end(db: &Arc<Database>) -> Session {
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE t (id integer NOT NULL, note text); \
         INSERT INTO t SELECT i, repeat('x', 200) FROM generate_series(1, 400) i; \
         CHECKPOINT; DELETE FROM t WHERE id > 40",
    );
    assert!(blocks(db, "t") > 5, "{} blocks", blocks(db, "t"));
    s
}

/// Blocks in table `t`'s main fork, from its file.
fn blocks_of_t(path: &std::path::Path) -> u64 {
    std::fs::metadata(file_of_t(path)).unwrap().len() / 8192
}

/// Single-row inserts from one process after another share a page: the
/// free-space map on disk tells each new process where the room is (it
/// used to live in memory, so each process added a page).
fn free_space_is_reused_across_processes(method: IoMethod) {
    let dir = temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    for i in 0..20 {
        let db = Database::open(&path, &settings(method)).unwrap();
        let mut s = db.session().unwrap();
        if i == 0 {
            run(&mut s, "CREATE TABLE t (id integer, note text)");
        }
        run(&mut s, &format!("INSERT INTO t VALUES ({i}, 'row {i}')"));
    }
    assert_eq!(blocks_of_t(&path), 1);
}

/// Room vacuum finds is used by a later process, and empty pages at the
/// end go back to the file system: a load that failed (rolled back, as a
/// COPY that met a full disk is) leaves nothing behind once vacuumed.
fn vacuum_frees_space_for_later_processes_and_cuts_empty_pages_off_the_end(method: IoMethod) {
    let (_dir, path) = closed_db_with_tables(method);
    {
        let db = Database::open(&path, &settings(method)).unwrap();
        let mut s = db.session().unwrap();
        run(
            &mut s,
            "INSERT INTO t SELECT i, repeat('x', 200) FROM generate_series(10, 3000) i",
        );
        run(
            &mut s,
            "BEGIN; INSERT INTO t SELECT i, repeat('y', 200) FROM generate_series(1, 20000) i; ROLLBACK",
        );
    }
    let loaded = blocks_of_t(&path);
    assert!(loaded > 600, "{loaded} blocks");
    {
        let db = Database::open(&path, &settings(method)).unwrap();
        let mut s = db.session().unwrap();
        run(&mut s, "DELETE FROM t WHERE id >= 10 AND id < 1000");
        assert!(vacuum_cut(&mut s, "t") > 0);
        assert_eq!(scalar(&mut s, "SELECT count(*) FROM t"), 3 + 2001);
    }
    let vacuumed = blocks_of_t(&path);
    assert!(
        vacuumed < 150,
        "the rolled-back load's pages are cut off: {loaded} -> {vacuumed} blocks"
    );
    // A new process fills the room the deleted rows left before it
    // extends the table.
    let db = Database::open(&path, &settings(method)).unwrap();
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "INSERT INTO t SELECT i, repeat('z', 200) FROM generate_series(1, 500) i",
    );
    drop(s);
    drop(db);
    assert_eq!(blocks_of_t(&path), vacuumed);
    assert!(path.join("base").join("16384_fsm").exists());
}

/// Another session holds a buffer of the table's tail for a moment while
/// VACUUM tries to cut it off: VACUUM gives up, and every page it had
/// dropped from the pool must be on disk as it was in memory (dropped
/// unwritten, pruned pages fell back to their versions from before a
/// DELETE and the deleted rows came back; found in review).
fn a_truncation_that_gives_up_loses_no_change(method: IoMethod) {
    let (_dir, _, db) = new_db(method);
    let mut s = table_with_a_dead_end(&db);
    let (rel, nblocks) = (db.catalog().table("t").unwrap().heap.rel, blocks(&db, "t"));
    let mut other = db.session().unwrap();
    let pinned = other.buf.read_buffer(rel, Fork::Main, nblocks - 1).unwrap();
    assert_eq!(vacuum_cut(&mut s, "t"), 0, "a buffer of the end is pinned");
    other.buf.release(pinned);
    assert_eq!(scalar(&mut s, "SELECT count(*) FROM t"), 40);
    // The next VACUUM cuts the end it could not cut before (the empty
    // pages are all-visible now; the last page is always read).
    let cut = vacuum_cut(&mut s, "t");
    assert!(cut > 0);
    assert_eq!(blocks(&db, "t"), nblocks - cut);
    assert_eq!(scalar(&mut s, "SELECT count(*) FROM t"), 40);
}

/// A VACUUM that cannot cut the empty end (a statement is using the
/// table) leaves it all-visible; the next VACUUM still cuts it.
fn an_empty_end_left_by_one_vacuum_is_cut_by_the_next(method: IoMethod) {
    let (_dir, _, db) = new_db(method);
    let mut s = table_with_a_dead_end(&db);
    let nblocks = blocks(&db, "t");
    {
        // An open transaction that read the table holds its lock.
        let mut reader = db.session().unwrap();
        run(&mut reader, "BEGIN; SELECT count(*) FROM t");
        assert_eq!(vacuum_cut(&mut s, "t"), 0, "the table is in use");
        run(&mut reader, "ROLLBACK");
    }
    assert_eq!(blocks(&db, "t"), nblocks);
    let cut = vacuum_cut(&mut s, "t");
    assert!(nblocks - cut <= 3, "{cut} of {nblocks} blocks cut");
    assert_eq!(blocks(&db, "t"), nblocks - cut);
    assert_eq!(scalar(&mut s, "SELECT count(*) FROM t"), 40);
}

/// DROP TABLE while another session holds one of the table's buffers for
/// a moment waits for it, so that no buffer of the dropped table stays in
/// the pool to show up in a new table given the same relation number.
fn a_dropped_tables_pages_never_show_up_in_a_new_table(method: IoMethod) {
    let (_dir, _, db) = new_db(method);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE t (id integer NOT NULL, note text); \
         INSERT INTO t SELECT i, 'old' FROM generate_series(1, 10) i",
    );
    let rel = db.catalog().table("t").unwrap().heap.rel;
    let holder = {
        let db = Arc::clone(&db);
        let (pinned_tx, pinned_rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            let mut other = db.session().unwrap();
            let id = other.buf.read_buffer(rel, Fork::Main, 0).unwrap();
            pinned_tx.send(()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(200));
            other.buf.release(id);
        });
        pinned_rx.recv().unwrap();
        t
    };
    run(&mut s, "DROP TABLE t");
    holder.join().unwrap();
    assert_eq!(db.pool().relation_buffers(rel), (0, 0));
    run(
        &mut s,
        "CREATE TABLE t2 (id integer NOT NULL, note text); INSERT INTO t2 VALUES (1, 'new')",
    );
    assert_eq!(scalar(&mut s, "SELECT count(*) FROM t2"), 1);
}

/// The free-space map is a hint: a map page that fails its checksum is
/// zeroed (with a warning) and inserts and VACUUM go on.
fn a_damaged_free_space_map_page_does_not_stop_inserts(method: IoMethod) {
    let (_dir, path, db) = new_db(method);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE t (id integer, note text); \
         INSERT INTO t SELECT i, repeat('x', 200) FROM generate_series(1, 400) i; \
         DELETE FROM t WHERE id % 2 = 0; VACUUM t",
    );
    drop(s);
    drop(db);
    let fsm = path.join("base").join("16384_fsm");
    let mut page = std::fs::read(&fsm).unwrap();
    page[100] ^= 0xff;
    std::fs::write(&fsm, &page).unwrap();
    let db = Database::open(&path, &settings(method)).unwrap();
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "INSERT INTO t SELECT i, 'again' FROM generate_series(1, 100) i; VACUUM t",
    );
    assert_eq!(scalar(&mut s, "SELECT count(*) FROM t"), 300);
}

for_each_method!(
    an_update_racing_a_commit_follows_the_row_instead_of_duplicating_it,
    a_read_committed_change_rechecks_the_newer_version,
    a_block_another_session_filled_after_an_extension_is_not_formatted_again,
    a_new_block_filled_and_evicted_before_its_extension_ends_keeps_its_rows,
    bank_transfers_keep_the_total_and_the_accounts,
    a_deleted_table_file_is_an_error_not_an_empty_table,
    missing_or_truncated_transaction_files_refuse_to_open,
    an_emptied_catalog_relation_refuses_to_open,
    a_damaged_catalog_page_is_recoverable_from_the_command_line,
    free_space_is_reused_across_processes,
    vacuum_frees_space_for_later_processes_and_cuts_empty_pages_off_the_end,
    a_truncation_that_gives_up_loses_no_change,
    an_empty_end_left_by_one_vacuum_is_cut_by_the_next,
    a_dropped_tables_pages_never_show_up_in_a_new_table,
    a_damaged_free_space_map_page_does_not_stop_inserts,
);
