//! Row locks: `SELECT … FOR UPDATE`, `FOR NO KEY UPDATE`, `FOR SHARE` and
//! `FOR KEY SHARE`, with NOWAIT and SKIP LOCKED, as PostgreSQL's. Writers
//! and lockers wait for holders of conflicting modes (through the wait
//! graph: deadlocks, lock_timeout), a transaction's own locks never stand
//! in its way, read committed follows a row its holder updated and checks
//! it again, repeatable read fails, and neither a crash nor vacuum leaves
//! a lock standing or takes a locked row for a deleted one. Every wait is
//! forced: the second session is seen waiting (in the `locks` view) before
//! the first goes on. Every I/O method.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use aiostore::config::IoMethod;
use aiostore::database::{Database, Session};
use aiostore::heap::tuple::Locker;
use aiostore::heap::TupleHeader;
use aiostore::sql::{self, SqlError};
use aiostore::storage::Fork;
use aiostore::txn::{RowLockMode, WaitTarget, Xid};
use aiostore::types::Value;

/// The longest a test waits to see a session waiting.
const SEEN_WAITING_WITHIN: Duration = Duration::from_secs(30);

fn open(method: IoMethod) -> (tempfile::TempDir, Arc<Database>) {
    let dir = common::temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    (dir, Database::open(&path, &settings(method)).unwrap())
}

fn settings(method: IoMethod) -> Vec<String> {
    vec![
        format!("io_method={}", method.name()),
        "shared_buffers=256".into(),
        "max_sessions=16".into(),
    ]
}

fn run(s: &mut Session, text: &str) {
    sql::execute(s, text).unwrap_or_else(|e| panic!("{text}: {e}"));
}

/// The first column of every row of the last statement of `text`.
fn column(s: &mut Session, text: &str) -> Vec<i64> {
    common::run(s, text)
        .pop()
        .unwrap()
        .rows
        .iter()
        .map(|r| match r[0] {
            Value::Integer(x) => i64::from(x),
            Value::BigInt(x) => x,
            ref v => panic!("{text}: not an integer: {v:?}"),
        })
        .collect()
}

/// A table `t (id integer PRIMARY KEY, v integer)` of rows 1..=5 with v =
/// 10 × id.
fn table(s: &mut Session) {
    run(
        s,
        "CREATE TABLE t (id integer PRIMARY KEY, v integer);
         INSERT INTO t SELECT g, 10 * g FROM generate_series(1, 5) g",
    );
}

fn xid(s: &Session) -> Xid {
    s.current_xid()
        .expect("the session's transaction has an id")
}

/// Waits until some transaction waits for transaction `holder` (a row it
/// holds), as the `locks` view shows it: a transactionid lock not granted.
fn wait_until_waiting_for(db: &Database, s: &mut Session, holder: Xid) {
    let started = Instant::now();
    loop {
        let shown = column(
            s,
            &format!(
                "SELECT count(*) FROM locks WHERE locktype = 'transactionid' AND transactionid = {holder} AND NOT granted AND mode = 'ShareLock'"
            ),
        );
        if shown == [1] {
            assert!(db
                .txn()
                .lock_rows()
                .iter()
                .any(|r| !r.granted && r.target == WaitTarget::Transaction(holder)));
            return;
        }
        assert!(
            started.elapsed() < SEEN_WAITING_WITHIN,
            "nobody waited for transaction {holder}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until exactly one transaction is waited for (a row it holds),
/// and returns it.
fn waited_for(db: &Database) -> Xid {
    let started = Instant::now();
    loop {
        let waited: Vec<Xid> = db
            .txn()
            .lock_rows()
            .iter()
            .filter(|r| !r.granted)
            .filter_map(|r| match r.target {
                WaitTarget::Transaction(x) => Some(x),
                _ => None,
            })
            .collect();
        if let [x] = waited[..] {
            return x;
        }
        assert!(started.elapsed() < SEEN_WAITING_WITHIN, "nobody waited");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs `text` in `s` on a thread of its own, returning the session and
/// what the statements returned (or the error).
fn spawn(
    mut s: Session,
    text: impl Into<String>,
) -> std::thread::JoinHandle<(Session, Result<Vec<sql::StatementResult>, SqlError>)> {
    let text = text.into();
    std::thread::spawn(move || {
        let result = sql::execute(&mut s, &text);
        (s, result)
    })
}

/// The header of tuple `index` of block 0 of table `name`, as on its page.
fn header(db: &Arc<Database>, name: &str, index: u16) -> TupleHeader {
    let rel = db.catalog().table(name).unwrap().heap.rel;
    let mut s = db.session().unwrap();
    let id = s.buf.read_buffer(rel, Fork::Main, 0).unwrap();
    let h = s.buf.with_page(id, |page| {
        TupleHeader::read(aiostore::page::item(page, index as usize).expect("a tuple"))
    });
    s.buf.release(id);
    h
}

/// Whether block 0 of table `name` is flagged all-visible.
fn all_visible(db: &Arc<Database>, name: &str) -> bool {
    let rel = db.catalog().table(name).unwrap().heap.rel;
    let mut s = db.session().unwrap();
    let id = s.buf.read_buffer(rel, Fork::Main, 0).unwrap();
    let flag = s.buf.with_page(id, |page| {
        aiostore::page::page_flags(page) & aiostore::page::PD_ALL_VISIBLE != 0
    });
    s.buf.release(id);
    flag
}

fn lock_then_change_in_one_transaction(method: IoMethod) {
    let (_dir, db) = open(method);
    let mut s = db.session().unwrap();
    table(&mut s);
    run(&mut s, "BEGIN");
    assert_eq!(
        column(&mut s, "SELECT id FROM t WHERE id <= 2 FOR UPDATE"),
        [1, 2]
    );
    // Its own lock is no obstacle to its UPDATE or DELETE, nor to locking
    // again, weaker or stronger.
    run(&mut s, "SET lock_timeout = 1000");
    assert_eq!(
        column(&mut s, "SELECT id FROM t WHERE id = 1 FOR SHARE"),
        [1]
    );
    run(&mut s, "UPDATE t SET v = v + 1 WHERE id = 1");
    run(&mut s, "DELETE FROM t WHERE id = 2");
    assert_eq!(
        column(&mut s, "SELECT id FROM t WHERE id = 3 FOR KEY SHARE"),
        [3]
    );
    assert_eq!(
        column(
            &mut s,
            "SELECT id FROM t WHERE id = 3 FOR NO KEY UPDATE NOWAIT"
        ),
        [3]
    );
    run(&mut s, "UPDATE t SET v = 0 WHERE id = 3");
    run(&mut s, "COMMIT");
    assert_eq!(
        column(&mut s, "SELECT v FROM t ORDER BY id"),
        [11, 0, 40, 50]
    );
    // A lock whose transaction committed deletes nothing: the rows it
    // locked are there for everyone, and free.
    run(&mut s, "BEGIN; SELECT * FROM t FOR UPDATE; COMMIT");
    assert_eq!(column(&mut s, "SELECT count(*) FROM t"), [4]);
    let mut other = db.session().unwrap();
    run(&mut other, "SET lock_timeout = 1000");
    run(&mut other, "UPDATE t SET v = v + 1");
    assert_eq!(column(&mut other, "SELECT sum(v) FROM t"), [105]);
}

/// Session A holds row 1 `FOR UPDATE`; B runs `second` and is seen waiting
/// for A; A ends with `end`. Returns B's session and result.
fn second_waits_for_a_for_update_holder(
    db: &Arc<Database>,
    second: &'static str,
    end: &str,
) -> (Session, Result<Vec<sql::StatementResult>, SqlError>) {
    let mut a = db.session().unwrap();
    run(&mut a, "BEGIN");
    assert_eq!(
        column(&mut a, "SELECT v FROM t WHERE id = 1 FOR UPDATE"),
        [10]
    );
    let holder = xid(&a);
    let waiter = spawn(db.session().unwrap(), second);
    wait_until_waiting_for(db, &mut a, holder);
    run(&mut a, end);
    waiter.join().unwrap()
}

fn writers_and_lockers_wait_for_a_for_update_holder(method: IoMethod) {
    let (_dir, db) = open(method);
    let mut s = db.session().unwrap();
    table(&mut s);
    for end in ["COMMIT", "ROLLBACK"] {
        let (_, r) =
            second_waits_for_a_for_update_holder(&db, "UPDATE t SET v = v + 1 WHERE id = 1", end);
        r.unwrap();
        assert_eq!(column(&mut s, "SELECT v FROM t WHERE id = 1"), [11]);
        run(&mut s, "UPDATE t SET v = 10 WHERE id = 1");

        let (mut b, r) = second_waits_for_a_for_update_holder(
            &db,
            "BEGIN; SELECT id FROM t WHERE id = 1 FOR KEY SHARE",
            end,
        );
        assert_eq!(r.unwrap().pop().unwrap().rows, [[Value::Integer(1)]]);
        // B's lock holds now: NOWAIT says so.
        let e = sql::execute(&mut s, "SELECT * FROM t WHERE id = 1 FOR UPDATE NOWAIT").unwrap_err();
        assert_eq!(e.sqlstate(), "55P03", "{e}");
        run(&mut b, "COMMIT");

        let (_, r) = second_waits_for_a_for_update_holder(&db, "DELETE FROM t WHERE id = 1", end);
        r.unwrap();
        assert!(column(&mut s, "SELECT id FROM t WHERE id = 1").is_empty());
        run(&mut s, "INSERT INTO t VALUES (1, 10)");
    }
}

fn share_lockers_hold_a_row_together_and_an_update_waits_for_both(method: IoMethod) {
    let (_dir, db) = open(method);
    let mut s = db.session().unwrap();
    table(&mut s);
    let mut a = db.session().unwrap();
    let mut b = db.session().unwrap();
    // Neither waits for the other.
    run(&mut b, "SET lock_timeout = 1000");
    run(&mut a, "BEGIN; SELECT * FROM t WHERE id = 2 FOR SHARE");
    run(&mut b, "BEGIN; SELECT * FROM t WHERE id = 2 FOR SHARE");
    run(&mut b, "SELECT * FROM t WHERE id = 2 FOR KEY SHARE NOWAIT");
    let (xa, xb) = (xid(&a), xid(&b));
    // The tuple names both, through a multi.
    let h = header(&db, "t", 1);
    let Locker::Multi(multi) = h.locker() else {
        panic!("not a multi: {h:?}")
    };
    let mut members = db.txn().running_multi_members(multi);
    members.sort();
    assert_eq!(
        members,
        [(xa, RowLockMode::Share), (xb, RowLockMode::Share)]
    );
    // A third locker in a mode that conflicts with share waits.
    let e = sql::execute(
        &mut s,
        "SELECT * FROM t WHERE id = 2 FOR NO KEY UPDATE NOWAIT",
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "could not obtain lock on row in relation \"t\""
    );
    let writer = spawn(db.session().unwrap(), "UPDATE t SET v = v + 1 WHERE id = 2");
    // It waits for one of them, then, that one gone, for the other.
    let first = waited_for(&db);
    assert!(first == xa || first == xb, "{first}");
    let (first_s, second_s, second) = if first == xa {
        (&mut a, &mut b, xb)
    } else {
        (&mut b, &mut a, xa)
    };
    run(first_s, "COMMIT");
    wait_until_waiting_for(&db, &mut s, second);
    assert!(
        !writer.is_finished(),
        "the UPDATE went on with a share lock held"
    );
    run(second_s, "ROLLBACK");
    writer.join().unwrap().1.unwrap();
    assert_eq!(column(&mut s, "SELECT v FROM t WHERE id = 2"), [21]);
    // The share lock of A, which then updates the row itself, waits only
    // for B's.
    run(&mut a, "BEGIN; SELECT * FROM t WHERE id = 3 FOR SHARE");
    run(&mut b, "BEGIN; SELECT * FROM t WHERE id = 3 FOR SHARE");
    let holder = xid(&b);
    let mut s2 = db.session().unwrap();
    let upgrade = std::thread::spawn(move || {
        run(&mut a, "UPDATE t SET v = 0 WHERE id = 3; COMMIT");
        a
    });
    wait_until_waiting_for(&db, &mut s2, holder);
    run(&mut b, "COMMIT");
    upgrade.join().unwrap();
    assert_eq!(column(&mut s, "SELECT v FROM t WHERE id = 3"), [0]);
}

fn nowait_fails_at_once_naming_the_table(method: IoMethod) {
    let (_dir, db) = open(method);
    let mut s = db.session().unwrap();
    table(&mut s);
    let mut a = db.session().unwrap();
    let mut b = db.session().unwrap();
    run(&mut a, "BEGIN; SELECT * FROM t WHERE id = 1 FOR UPDATE");
    run(&mut a, "UPDATE t SET v = 0 WHERE id = 2");
    for text in [
        "SELECT * FROM t WHERE id = 1 FOR UPDATE NOWAIT",
        "SELECT * FROM t WHERE id = 1 FOR KEY SHARE NOWAIT",
        // A row being updated is held as well.
        "SELECT * FROM t WHERE id = 2 FOR SHARE NOWAIT",
        "SELECT * FROM t FOR SHARE SKIP LOCKED FOR UPDATE NOWAIT",
    ] {
        let started = Instant::now();
        let e = sql::execute(&mut b, text).unwrap_err();
        assert_eq!(e.sqlstate(), "55P03", "{text}: {e}");
        assert_eq!(
            e.to_string(),
            "could not obtain lock on row in relation \"t\"",
            "{text}"
        );
        assert!(started.elapsed() < Duration::from_secs(1), "{text} waited");
    }
    // Rows nobody holds are locked at once.
    assert_eq!(
        column(&mut b, "SELECT id FROM t WHERE id >= 3 FOR UPDATE NOWAIT"),
        [3, 4, 5]
    );
    run(&mut a, "ROLLBACK");
    // A key-share lock leaves FOR NO KEY UPDATE free, not FOR UPDATE.
    run(&mut a, "BEGIN; SELECT * FROM t WHERE id = 1 FOR KEY SHARE");
    assert_eq!(
        column(
            &mut b,
            "SELECT id FROM t WHERE id = 1 FOR NO KEY UPDATE NOWAIT"
        ),
        [1]
    );
    let e = sql::execute(&mut b, "SELECT id FROM t WHERE id = 1 FOR UPDATE NOWAIT").unwrap_err();
    assert_eq!(e.sqlstate(), "55P03", "{e}");
    run(&mut a, "COMMIT");
}

fn skip_locked_workers_take_disjoint_rows(method: IoMethod) {
    let (_dir, db) = open(method);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE queue (id integer PRIMARY KEY, done boolean);
         INSERT INTO queue SELECT g, false FROM generate_series(1, 10) g",
    );
    let take = "SELECT id FROM queue WHERE NOT done ORDER BY id LIMIT 3 FOR UPDATE SKIP LOCKED";
    let mut a = db.session().unwrap();
    let mut b = db.session().unwrap();
    run(&mut a, "BEGIN");
    run(&mut b, "BEGIN");
    // As PostgreSQL 15 returns them: each worker the first rows no other
    // holds.
    assert_eq!(column(&mut a, take), [1, 2, 3]);
    assert_eq!(column(&mut b, take), [4, 5, 6]);
    // Without ORDER BY and LIMIT: every row not held.
    let mut c = db.session().unwrap();
    assert_eq!(
        column(&mut c, "SELECT id FROM queue FOR SHARE SKIP LOCKED"),
        [7, 8, 9, 10]
    );
    // An index scan skips the same rows.
    assert_eq!(
        column(
            &mut c,
            "SELECT id FROM queue WHERE id BETWEEN 2 AND 8 FOR UPDATE SKIP LOCKED"
        ),
        [7, 8]
    );
    run(
        &mut a,
        "UPDATE queue SET done = true WHERE id IN (1, 2, 3); COMMIT",
    );
    // A's rows are done, B's still held.
    assert_eq!(column(&mut c, take), [7, 8, 9]);
    run(
        &mut b,
        "UPDATE queue SET done = true WHERE id IN (4, 5, 6); COMMIT",
    );
    assert_eq!(column(&mut c, "SELECT count(*) FROM queue WHERE done"), [6]);
}

fn read_committed_checks_a_row_its_holder_updated_again(method: IoMethod) {
    let (_dir, db) = open(method);
    let mut s = db.session().unwrap();
    table(&mut s);
    // The holder's update takes row 1 out of the WHERE: it is left out.
    let mut a = db.session().unwrap();
    run(&mut a, "BEGIN; UPDATE t SET v = 99 WHERE id = 1");
    let holder = xid(&a);
    let waiter = spawn(
        db.session().unwrap(),
        "SELECT id, v FROM t WHERE v < 30 ORDER BY id FOR UPDATE",
    );
    wait_until_waiting_for(&db, &mut s, holder);
    run(&mut a, "COMMIT");
    let (_, r) = waiter.join().unwrap();
    assert_eq!(
        r.unwrap().pop().unwrap().rows,
        [[Value::Integer(2), Value::Integer(20)]]
    );
    // Still matching: the newest version is returned, and locked.
    run(&mut a, "BEGIN; UPDATE t SET v = 12 WHERE id = 2");
    let holder = xid(&a);
    let waiter = spawn(
        db.session().unwrap(),
        "BEGIN; SELECT id, v, v * 2 FROM t WHERE v < 30 AND id > 1 FOR UPDATE",
    );
    wait_until_waiting_for(&db, &mut s, holder);
    run(&mut a, "COMMIT");
    let (mut b, r) = waiter.join().unwrap();
    assert_eq!(
        r.unwrap().pop().unwrap().rows,
        [[Value::Integer(2), Value::Integer(12), Value::Integer(24)]]
    );
    let e = sql::execute(&mut s, "SELECT * FROM t WHERE id = 2 FOR UPDATE NOWAIT").unwrap_err();
    assert_eq!(e.sqlstate(), "55P03", "B holds the newest version: {e}");
    run(&mut b, "COMMIT");
}

fn a_concurrent_update_under_repeatable_read_fails_the_locker(method: IoMethod) {
    let (_dir, db) = open(method);
    let mut s = db.session().unwrap();
    table(&mut s);
    let mut b = db.session().unwrap();
    run(
        &mut b,
        "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM t",
    );
    let mut a = db.session().unwrap();
    run(&mut a, "BEGIN; UPDATE t SET v = 11 WHERE id = 1");
    let holder = xid(&a);
    let locker = std::thread::spawn(move || {
        let r = sql::execute(&mut b, "SELECT * FROM t WHERE id = 1 FOR SHARE");
        (b, r)
    });
    wait_until_waiting_for(&db, &mut s, holder);
    run(&mut a, "COMMIT");
    let (mut b, r) = locker.join().unwrap();
    let e = r.unwrap_err();
    assert_eq!(e.sqlstate(), "40001", "{e}");
    run(&mut b, "ROLLBACK");
    // A row only locked meanwhile is no conflict under repeatable read.
    run(
        &mut b,
        "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM t",
    );
    run(&mut a, "BEGIN; SELECT * FROM t WHERE id = 1 FOR UPDATE");
    let holder = xid(&a);
    let locker = std::thread::spawn(move || {
        let r = sql::execute(&mut b, "SELECT v FROM t WHERE id = 1 FOR UPDATE");
        (b, r)
    });
    wait_until_waiting_for(&db, &mut s, holder);
    run(&mut a, "COMMIT");
    let (mut b, r) = locker.join().unwrap();
    assert_eq!(r.unwrap().pop().unwrap().rows, [[Value::Integer(11)]]);
    run(&mut b, "COMMIT");
}

/// Two sessions lock two rows in opposite orders: the second to close
/// the cycle (after its own short deadlock_timeout) fails with 40P01,
/// naming both waits, whether its last step is a lock or an UPDATE, and
/// the other goes on at once.
fn row_locks_in_opposite_order_deadlock(method: IoMethod) {
    let (_dir, db) = open(method);
    let mut s = db.session().unwrap();
    table(&mut s);
    for (b_first, b_second) in [
        (
            "SELECT * FROM t WHERE id = 2 FOR UPDATE",
            "SELECT * FROM t WHERE id = 1 FOR UPDATE",
        ),
        (
            "SELECT * FROM t WHERE id = 2 FOR SHARE",
            "UPDATE t SET v = 0 WHERE id = 1",
        ),
    ] {
        let mut a = db.session().unwrap();
        let mut b = db.session().unwrap();
        run(
            &mut a,
            "SET deadlock_timeout = 60000; SET lock_timeout = 60000",
        );
        run(
            &mut b,
            "SET deadlock_timeout = 100; SET lock_timeout = 5000",
        );
        run(&mut a, "BEGIN; SELECT * FROM t WHERE id = 1 FOR UPDATE");
        run(&mut b, "BEGIN");
        run(&mut b, b_first);
        let holder = xid(&b);
        let a_thread = std::thread::spawn(move || {
            run(&mut a, "SELECT * FROM t WHERE id = 2 FOR UPDATE");
            run(&mut a, "COMMIT");
        });
        wait_until_waiting_for(&db, &mut s, holder);
        let e = sql::execute(&mut b, b_second).unwrap_err();
        assert_eq!(e.sqlstate(), "40P01", "{b_second}: {e}");
        assert_eq!(
            e.to_string().matches("waits for transaction").count(),
            2,
            "{e}"
        );
        // The error ended B's transaction: A goes on.
        a_thread.join().unwrap();
        run(&mut b, "ROLLBACK");
        assert!(db.txn().waits().is_empty());
    }
}

fn waits_for_a_row_lock_end_at_lock_timeout_and_statement_timeout(method: IoMethod) {
    let (_dir, db) = open(method);
    let mut s = db.session().unwrap();
    table(&mut s);
    let mut a = db.session().unwrap();
    run(
        &mut a,
        "BEGIN; SELECT * FROM t WHERE id = 1 FOR NO KEY UPDATE",
    );
    run(&mut s, "SET lock_timeout = 150");
    let started = Instant::now();
    let e = sql::execute(&mut s, "SELECT * FROM t WHERE id = 1 FOR SHARE").unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(150));
    assert_eq!(e.sqlstate(), "55P03", "{e}");
    assert!(e.to_string().contains("lock timeout"), "{e}");
    run(&mut s, "SET lock_timeout = 0; SET statement_timeout = 150");
    let e = sql::execute(&mut s, "DELETE FROM t WHERE id = 1").unwrap_err();
    assert_eq!(e.sqlstate(), "57014", "{e}");
    run(&mut a, "COMMIT");
    run(&mut s, "SET statement_timeout = 0");
    run(&mut s, "DELETE FROM t WHERE id = 1");
}

fn the_statement_holds_its_table_in_row_share_mode(method: IoMethod) {
    let (_dir, db) = open(method);
    let mut s = db.session().unwrap();
    table(&mut s);
    let mut a = db.session().unwrap();
    run(&mut a, "BEGIN; SELECT * FROM t WHERE id = 1 FOR KEY SHARE");
    let owner_rows = common::run(
        &mut s,
        "SELECT mode FROM locks WHERE locktype = 'relation' AND relation = 't'",
    )
    .pop()
    .unwrap()
    .rows;
    assert_eq!(owner_rows, [[Value::Text("RowShareLock".into())]]);
    run(&mut a, "COMMIT");
    // In a subquery of a query the same: the statement holds each table
    // once, in the strongest mode it needs (PostgreSQL would hold an
    // AccessShareLock for the outer reference as well).
    run(
        &mut a,
        "BEGIN; SELECT * FROM t WHERE id IN (SELECT id FROM t WHERE id < 3 FOR UPDATE)",
    );
    let modes = common::run(
        &mut s,
        "SELECT mode FROM locks WHERE locktype = 'relation' AND relation = 't' ORDER BY mode",
    )
    .pop()
    .unwrap()
    .rows;
    assert_eq!(modes, [[Value::Text("RowShareLock".into())]]);
    let e = sql::execute(&mut s, "SELECT * FROM t WHERE id = 2 FOR UPDATE NOWAIT").unwrap_err();
    assert_eq!(e.sqlstate(), "55P03", "{e}");
    run(&mut a, "COMMIT");
}

/// What a second transaction does to a row another holds: lock it in a
/// mode, update it without or with its key, or delete it.
#[derive(Debug, Clone, Copy)]
enum Second {
    Lock(RowLockMode),
    NoKeyUpdate,
    KeyUpdate,
    Delete,
}

impl Second {
    const ALL: [Second; 7] = [
        Second::Lock(RowLockMode::KeyShare),
        Second::Lock(RowLockMode::Share),
        Second::Lock(RowLockMode::NoKeyUpdate),
        Second::Lock(RowLockMode::Update),
        Second::NoKeyUpdate,
        Second::KeyUpdate,
        Second::Delete,
    ];

    /// The mode it takes the row in (PostgreSQL's heap_update and
    /// heap_delete take theirs so).
    fn mode(self) -> RowLockMode {
        match self {
            Second::Lock(mode) => mode,
            Second::NoKeyUpdate => RowLockMode::NoKeyUpdate,
            Second::KeyUpdate | Second::Delete => RowLockMode::Update,
        }
    }

    /// Its statements on row `id`, as one transaction.
    fn text(self, id: i64) -> String {
        match self {
            Second::Lock(mode) => {
                format!(
                    "BEGIN; SELECT id FROM t WHERE id = {id} {}; COMMIT",
                    mode.clause()
                )
            }
            Second::NoKeyUpdate => format!("UPDATE t SET v = -v WHERE id = {id}"),
            Second::KeyUpdate => format!("UPDATE t SET id = -id WHERE id = {id}"),
            Second::Delete => format!("DELETE FROM t WHERE id = {id}"),
        }
    }

    /// Checks that it took effect on row `id` (whose v was 10 × id).
    fn check(self, s: &mut Session, id: i64) {
        let rows = |s: &mut Session, text: String| common::rows(s, &text);
        let found = rows(s, format!("SELECT id, v FROM t WHERE abs(id) = {id}"));
        let row = |id: i64, v: i64| vec![Value::Integer(id as i32), Value::Integer(v as i32)];
        let expected = match self {
            Second::Lock(_) => vec![row(id, 10 * id)],
            Second::NoKeyUpdate => vec![row(id, -10 * id)],
            Second::KeyUpdate => vec![row(-id, 10 * id)],
            Second::Delete => Vec::new(),
        };
        assert_eq!(found, expected, "{self:?} on row {id}");
    }
}

/// PostgreSQL's conflict table, each cell forced: A holds a row in each
/// mode; B locks, updates (with and without its key) or deletes it. B
/// goes on at once where the modes do not conflict (a short lock_timeout
/// would fail it otherwise: A does not end), and where they do is seen
/// waiting for A's transaction in the `locks` view, then goes on once A
/// commits or rolls back.
fn each_strength_holds_back_exactly_the_statements_that_conflict(method: IoMethod) {
    let (_dir, db) = open(method);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE t (id integer PRIMARY KEY, v integer);
         INSERT INTO t SELECT g, 10 * g FROM generate_series(1, 28) g",
    );
    let mut a = db.session().unwrap();
    let mut b = Some(db.session().unwrap());
    run(b.as_mut().unwrap(), "SET lock_timeout = 500");
    let mut id = 0;
    let mut waited = 0;
    for held in RowLockMode::ALL {
        for second in Second::ALL {
            id += 1;
            run(&mut a, "BEGIN");
            assert_eq!(
                column(
                    &mut a,
                    &format!("SELECT id FROM t WHERE id = {id} {}", held.clause())
                ),
                [id]
            );
            let end = if id % 2 == 0 { "COMMIT" } else { "ROLLBACK" };
            if held.conflicts_with(second.mode()) {
                waited += 1;
                let holder = xid(&a);
                let waiter = spawn(b.take().unwrap(), second.text(id));
                wait_until_waiting_for(&db, &mut s, holder);
                assert!(!waiter.is_finished(), "{second:?} went past {held:?}");
                run(&mut a, end);
                let (back, r) = waiter.join().unwrap();
                r.unwrap_or_else(|e| panic!("{second:?} after {held:?}: {e}"));
                b = Some(back);
            } else {
                let text = second.text(id);
                sql::execute(b.as_mut().unwrap(), &text)
                    .unwrap_or_else(|e| panic!("{second:?} waited for {held:?}: {e}"));
                run(&mut a, end);
            }
            second.check(&mut s, id);
        }
    }
    // Key share conflicts with FOR UPDATE, key updates and deletes;
    // share with those and no-key updates and locks; the two update
    // strengths with all but key share and every lock and change.
    assert_eq!(waited, 3 + 5 + 6 + 7);
}

/// A no-key UPDATE goes on beside a `FOR KEY SHARE` lock, and the lock
/// stays: on the new version once the update commits, on the old one if
/// it rolls back; both times a DELETE (and a key update) waits for the
/// key-share locker.
fn a_key_share_lock_lets_a_no_key_update_by_and_stays(method: IoMethod) {
    let (_dir, db) = open(method);
    let mut s = db.session().unwrap();
    table(&mut s);
    let mut a = db.session().unwrap();
    let mut b = db.session().unwrap();
    run(&mut b, "SET lock_timeout = 500");
    for (end, deleter) in [
        ("COMMIT", "DELETE FROM t WHERE id = 1"),
        ("ROLLBACK", "UPDATE t SET id = 100 WHERE id = 1"),
    ] {
        run(&mut a, "BEGIN; SELECT * FROM t WHERE id = 1 FOR KEY SHARE");
        let locker = xid(&a);
        // Assigning the key its own value changes no key either.
        run(
            &mut b,
            "BEGIN; UPDATE t SET v = v + 1, id = id WHERE id = 1",
        );
        let updater = xid(&b);
        let e =
            sql::execute(&mut s, "SELECT * FROM t WHERE id = 1 FOR KEY SHARE NOWAIT").unwrap_err();
        assert_eq!(e.sqlstate(), "55P03", "a running update holds the row: {e}");
        run(&mut b, end);
        let waiter = spawn(db.session().unwrap(), deleter);
        wait_until_waiting_for(&db, &mut s, locker);
        assert_ne!(waited_for(&db), updater);
        // The lock is still the locker's own: no obstacle to it.
        assert_eq!(
            column(&mut a, "SELECT id FROM t WHERE id = 1 FOR UPDATE NOWAIT"),
            [1]
        );
        run(&mut a, "COMMIT");
        waiter.join().unwrap().1.unwrap();
        assert!(column(&mut s, "SELECT id FROM t WHERE id = 1").is_empty());
        run(
            &mut s,
            "DELETE FROM t WHERE id = 100; INSERT INTO t VALUES (1, 10)",
        );
    }
    // Two key-share lockers: the new version names both.
    let mut c = db.session().unwrap();
    run(&mut a, "BEGIN; SELECT * FROM t WHERE id = 2 FOR KEY SHARE");
    run(&mut c, "BEGIN; SELECT * FROM t WHERE id = 2 FOR KEY SHARE");
    let (xa, xc) = (xid(&a), xid(&c));
    run(&mut b, "UPDATE t SET v = 0 WHERE id = 2");
    let waiter = spawn(db.session().unwrap(), "DELETE FROM t WHERE id = 2");
    let first = waited_for(&db);
    let (first_s, second_s, second) = if first == xa {
        (&mut a, &mut c, xc)
    } else {
        assert_eq!(first, xc);
        (&mut c, &mut a, xa)
    };
    run(first_s, "COMMIT");
    wait_until_waiting_for(&db, &mut s, second);
    run(second_s, "COMMIT");
    waiter.join().unwrap().1.unwrap();
    assert!(column(&mut s, "SELECT id FROM t WHERE id = 2").is_empty());
    // A share lock holds a no-key update back.
    run(&mut a, "BEGIN; SELECT * FROM t WHERE id = 3 FOR SHARE");
    let e = sql::execute(&mut b, "UPDATE t SET v = 0 WHERE id = 3").unwrap_err();
    assert_eq!(e.sqlstate(), "55P03", "{e}");
    run(&mut a, "COMMIT");
}

/// What PostgreSQL refuses, with its SQLSTATE and words; what it passes
/// over; and where EXPLAIN shows the LockRows node.
fn locking_clauses_are_refused_where_postgresql_refuses_them(method: IoMethod) {
    let (_dir, db) = open(method);
    let mut s = db.session().unwrap();
    table(&mut s);
    for (text, sqlstate, message) in [
        (
            "SELECT count(*) FROM t FOR UPDATE",
            "0A000",
            "FOR UPDATE is not allowed with aggregate functions",
        ),
        (
            "SELECT v FROM t GROUP BY v FOR NO KEY UPDATE",
            "0A000",
            "FOR NO KEY UPDATE is not allowed with GROUP BY clause",
        ),
        (
            "SELECT 1 FROM t HAVING true FOR SHARE",
            "0A000",
            "FOR SHARE is not allowed with HAVING clause",
        ),
        (
            "SELECT DISTINCT v FROM t FOR KEY SHARE",
            "0A000",
            "FOR KEY SHARE is not allowed with DISTINCT clause",
        ),
        (
            "SELECT id FROM t UNION SELECT id FROM t FOR UPDATE",
            "0A000",
            "FOR UPDATE is not allowed with UNION/INTERSECT/EXCEPT",
        ),
        (
            "(SELECT id FROM t FOR KEY SHARE) UNION SELECT id FROM t",
            "0A000",
            "FOR KEY SHARE is not allowed with UNION/INTERSECT/EXCEPT",
        ),
        (
            "SELECT * FROM t FOR UPDATE OF nope",
            "42P01",
            "relation \"nope\" in FOR UPDATE clause not found in FROM clause",
        ),
        (
            "SELECT * FROM t FOR SHARE OF public.t",
            "42601",
            "FOR SHARE must specify unqualified relation names",
        ),
        (
            "SELECT * FROM generate_series(1, 3) g FOR UPDATE OF g",
            "0A000",
            "FOR UPDATE cannot be applied to a function",
        ),
    ] {
        let e = sql::execute(&mut s, text).unwrap_err();
        assert_eq!(
            (e.sqlstate(), e.to_string().as_str()),
            (sqlstate, message),
            "{text}"
        );
    }
    // A join is refused naming the way round it, which works.
    let e = sql::execute(
        &mut s,
        "SELECT * FROM t a JOIN t b ON a.id = b.id FOR UPDATE OF a",
    )
    .unwrap_err();
    assert_eq!(e.sqlstate(), "0A000", "{e}");
    assert!(
        e.to_string().contains("FROM (SELECT … FOR UPDATE) s JOIN"),
        "{e}"
    );
    assert_eq!(
        column(
            &mut s,
            "SELECT a.id FROM (SELECT id FROM t WHERE id < 3 FOR UPDATE) a JOIN t b ON a.id = b.id ORDER BY 1"
        ),
        [1, 2]
    );
    // Nothing to lock is no error: no FROM, a function, several names.
    assert_eq!(column(&mut s, "SELECT 1 AS one FOR UPDATE"), [1]);
    assert_eq!(
        column(&mut s, "SELECT g FROM generate_series(1, 3) g FOR SHARE"),
        [1, 2, 3]
    );
    assert_eq!(
        column(
            &mut s,
            "SELECT id FROM t WHERE id = 4 FOR KEY SHARE OF t FOR UPDATE OF t NOWAIT"
        ),
        [4]
    );
    assert_eq!(
        common::plan_lines(
            &mut s,
            "EXPLAIN (COSTS OFF) SELECT id FROM t WHERE v > 10 ORDER BY v DESC LIMIT 2 FOR UPDATE"
        ),
        [
            "Limit",
            "  ->  LockRows",
            "        ->  Sort",
            "              Sort Key: v DESC",
            "              ->  Seq Scan on t",
            "                    Filter: (v > 10)",
        ]
    );
}

/// How the tests below make every session read the table.
const SCAN_SETTINGS: [&str; 3] = [
    "SET enable_seqscan = on; SET enable_bitmapscan = off; SET enable_indexscan = off; SET enable_indexonlyscan = off",
    "SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_indexscan = on; SET enable_indexonlyscan = off",
    "SET enable_seqscan = off; SET enable_bitmapscan = on; SET enable_indexscan = off; SET enable_indexonlyscan = off",
];

/// HOT updates (no indexed column changes: `v` has no index) make
/// heap-only versions found through their chain's root. Locks meet them
/// through every scan: the newest version is locked, a no-key HOT update
/// goes on beside a key-share lock and its heap-only version carries
/// the lock, a lock on a row whose HOT update aborted ends that chain
/// (the orphan version is pruned, the row still found), and the
/// read-committed recheck follows a HOT link.
fn row_locks_meet_hot_chains_through_every_scan(method: IoMethod) {
    let (_dir, db) = open(method);
    for scans in SCAN_SETTINGS {
        let session = || {
            let mut s = db.session().unwrap();
            run(&mut s, scans);
            s
        };
        let mut s = session();
        run(&mut s, "DROP TABLE IF EXISTS t");
        table(&mut s);
        let hot_updates = |s: &mut Session| {
            column(
                s,
                "SELECT n_tup_hot_upd FROM stat_tables WHERE relname = 't'",
            )[0]
        };
        run(
            &mut s,
            "UPDATE t SET v = 11 WHERE id = 1; UPDATE t SET v = 12 WHERE id = 1",
        );
        assert_eq!(hot_updates(&mut s), 2, "{scans}");
        let mut a = session();
        run(&mut a, "BEGIN");
        assert_eq!(
            column(&mut a, "SELECT v FROM t WHERE id = 1 FOR KEY SHARE"),
            [12]
        );
        let locker = xid(&a);
        let mut b = session();
        run(&mut b, "SET lock_timeout = 500");
        run(&mut b, "UPDATE t SET v = 13 WHERE id = 1");
        assert_eq!(
            hot_updates(&mut s),
            3,
            "{scans}: the update beside the lock was HOT"
        );
        let deleter = spawn(session(), "DELETE FROM t WHERE id = 1");
        wait_until_waiting_for(&db, &mut s, locker);
        run(&mut a, "COMMIT");
        let (_, r) = deleter.join().unwrap();
        assert_eq!(r.unwrap()[0].tag, "DELETE 1", "{scans}");
        assert!(column(&mut s, "SELECT v FROM t WHERE id = 1").is_empty());

        // A HOT update that aborted, then a lock: the row is the old
        // version again, locked, and found after pruning.
        run(&mut b, "BEGIN; UPDATE t SET v = 0 WHERE id = 2; ROLLBACK");
        assert_eq!(hot_updates(&mut s), 4, "{scans}");
        run(&mut a, "BEGIN");
        assert_eq!(
            column(&mut a, "SELECT v FROM t WHERE id = 2 FOR UPDATE"),
            [20]
        );
        run(&mut s, "VACUUM t");
        assert_eq!(
            column(&mut s, "SELECT v FROM t WHERE id = 2"),
            [20],
            "{scans}"
        );
        let e = sql::execute(&mut s, "SELECT v FROM t WHERE id = 2 FOR SHARE NOWAIT").unwrap_err();
        assert_eq!(e.sqlstate(), "55P03", "{scans}: {e}");
        run(&mut a, "COMMIT");
        run(&mut s, "UPDATE t SET v = 21 WHERE id = 2");
        assert_eq!(
            column(&mut s, "SELECT v FROM t WHERE id = 2"),
            [21],
            "{scans}"
        );

        // The read-committed recheck follows a HOT link to the version
        // the holder made.
        run(&mut a, "BEGIN; UPDATE t SET v = 31 WHERE id = 3");
        let holder = xid(&a);
        let waiter = spawn(
            session(),
            "SELECT v FROM t WHERE id = 3 AND v > 25 FOR UPDATE",
        );
        wait_until_waiting_for(&db, &mut s, holder);
        run(&mut a, "COMMIT");
        let (_, r) = waiter.join().unwrap();
        assert_eq!(
            r.unwrap().pop().unwrap().rows,
            [[Value::Integer(31)]],
            "{scans}"
        );
        common::storage_is_sound(&db);
    }
}

/// Rows a COPY FREEZE loaded (xmin frozen, pages all-visible from the
/// load) lock as any: the lock leaves the page all-visible, holds
/// against NOWAIT, and a no-key update beside a key-share lock of them
/// keeps it.
fn rows_a_frozen_load_wrote_lock_as_any(method: IoMethod) {
    let (dir, db) = open(method);
    let path = dir.path().join("frozen.csv");
    let csv: String = (1..=5).map(|i| format!("{i},{}\n", 10 * i)).collect();
    std::fs::write(&path, csv).unwrap();
    let mut s = db.session().unwrap();
    run(
        &mut s,
        &format!(
            "BEGIN; CREATE TABLE t (id integer PRIMARY KEY, v integer); COPY t FROM '{}' WITH (FORMAT csv, FREEZE); COMMIT",
            path.display()
        ),
    );
    assert!(
        all_visible(&db, "t"),
        "the frozen load left its page all-visible"
    );
    assert_eq!(header(&db, "t", 0).xmin, aiostore::txn::FROZEN_XID);
    let mut a = db.session().unwrap();
    run(&mut a, "BEGIN");
    assert_eq!(
        column(&mut a, "SELECT id FROM t WHERE id <= 2 FOR KEY SHARE"),
        [1, 2]
    );
    let locker = xid(&a);
    assert!(all_visible(&db, "t"), "a lock leaves the page all-visible");
    let e = sql::execute(&mut s, "SELECT id FROM t WHERE id = 1 FOR UPDATE NOWAIT").unwrap_err();
    assert_eq!(e.sqlstate(), "55P03", "{e}");
    run(
        &mut s,
        "SET lock_timeout = 500; UPDATE t SET v = 11 WHERE id = 1",
    );
    let deleter = spawn(db.session().unwrap(), "DELETE FROM t WHERE id <= 2");
    wait_until_waiting_for(&db, &mut s, locker);
    run(&mut a, "COMMIT");
    let (_, r) = deleter.join().unwrap();
    assert_eq!(r.unwrap()[0].tag, "DELETE 2");
    assert_eq!(column(&mut s, "SELECT id FROM t ORDER BY id"), [3, 4, 5]);
    common::storage_is_sound(&db);
}

fn vacuum_keeps_locked_rows_and_clears_ended_locks(method: IoMethod) {
    let (_dir, db) = open(method);
    let mut s = db.session().unwrap();
    table(&mut s);
    let mut a = db.session().unwrap();
    let mut b = db.session().unwrap();
    // Row 1 locked by A alone, row 2 by A and B (a multi); both running.
    run(&mut a, "BEGIN; SELECT * FROM t WHERE id <= 2 FOR SHARE");
    run(&mut b, "BEGIN; SELECT * FROM t WHERE id = 2 FOR KEY SHARE");
    run(&mut s, "VACUUM t");
    assert_eq!(column(&mut s, "SELECT count(*) FROM t"), [5]);
    assert!(matches!(header(&db, "t", 0).locker(), Locker::One(..)));
    assert!(matches!(header(&db, "t", 1).locker(), Locker::Multi(_)));
    // Locked rows are visible to everyone all the same.
    assert!(all_visible(&db, "t"), "vacuum set the page all-visible");
    common::storage_is_sound(&db);
    for id in [1, 2] {
        let e = sql::execute(
            &mut s,
            &format!("SELECT * FROM t WHERE id = {id} FOR UPDATE NOWAIT"),
        )
        .unwrap_err();
        assert_eq!(e.sqlstate(), "55P03", "the locks stand after vacuum: {e}");
    }
    // A lock on an all-visible page leaves it so.
    run(&mut b, "SELECT * FROM t WHERE id = 3 FOR UPDATE");
    assert!(all_visible(&db, "t"));
    run(&mut a, "COMMIT");
    run(&mut b, "COMMIT");
    // The lockers committed long before the horizon: still no deletion.
    run(&mut s, "VACUUM t");
    assert_eq!(column(&mut s, "SELECT count(*) FROM t"), [5]);
    for index in [0, 1, 2] {
        let h = header(&db, "t", index);
        assert_eq!(
            (
                h.xmax,
                h.locker(),
                h.infomask & aiostore::heap::tuple::XMAX_LOCK_BITS
            ),
            (0, Locker::None, 0),
            "vacuum clears a lock whose lockers ended: tuple {index}"
        );
    }
    assert!(all_visible(&db, "t"));
    common::storage_is_sound(&db);
}

fn a_crash_leaves_no_lock_standing(method: IoMethod) {
    let (dir, db) = open(method);
    let mut s = db.session().unwrap();
    table(&mut s);
    let mut a = db.session().unwrap();
    let mut b = db.session().unwrap();
    run(&mut a, "BEGIN; SELECT * FROM t WHERE id = 1 FOR UPDATE");
    run(&mut a, "SELECT * FROM t WHERE id = 2 FOR SHARE");
    run(&mut b, "BEGIN; SELECT * FROM t WHERE id = 2 FOR SHARE");
    // The locked page reaches the disk, and its lock records the WAL.
    run(&mut s, "CHECKPOINT");
    run(&mut a, "SELECT * FROM t WHERE id = 3 FOR KEY SHARE");
    // Row 4: a no-key update in progress beside a key-share lock, which
    // it kept on both versions.
    run(&mut a, "SELECT * FROM t WHERE id = 4 FOR KEY SHARE");
    run(&mut b, "UPDATE t SET v = 41 WHERE id = 4");
    // Those last changes are only in the WAL: replay puts them on the
    // page.
    db.wal().flush_all().unwrap();
    db.simulate_crash();
    drop((a, b, s));
    common::crash(db);
    let db = Database::open(&dir.path().join("data"), &settings(method)).unwrap();
    // The locks are on the page, and mean nothing.
    assert!(matches!(
        header(&db, "t", 0).locker(),
        Locker::One(_, RowLockMode::Update)
    ));
    assert!(matches!(header(&db, "t", 1).locker(), Locker::Multi(_)));
    assert!(matches!(
        header(&db, "t", 2).locker(),
        Locker::One(_, RowLockMode::KeyShare)
    ));
    let mut s = db.session().unwrap();
    run(&mut s, "SET lock_timeout = 1000");
    // The update died with the crash: row 4 is as before it.
    assert_eq!(column(&mut s, "SELECT v FROM t WHERE id = 4"), [40]);
    assert_eq!(
        column(&mut s, "SELECT id FROM t ORDER BY id FOR UPDATE NOWAIT"),
        [1, 2, 3, 4, 5]
    );
    run(&mut s, "UPDATE t SET v = 0 WHERE id <= 4");
    assert_eq!(column(&mut s, "SELECT sum(v) FROM t"), [50]);
    common::storage_is_sound(&db);
}

for_each_method!(
    lock_then_change_in_one_transaction,
    each_strength_holds_back_exactly_the_statements_that_conflict,
    a_key_share_lock_lets_a_no_key_update_by_and_stays,
    locking_clauses_are_refused_where_postgresql_refuses_them,
    row_locks_meet_hot_chains_through_every_scan,
    rows_a_frozen_load_wrote_lock_as_any,
    writers_and_lockers_wait_for_a_for_update_holder,
    share_lockers_hold_a_row_together_and_an_update_waits_for_both,
    nowait_fails_at_once_naming_the_table,
    skip_locked_workers_take_disjoint_rows,
    read_committed_checks_a_row_its_holder_updated_again,
    a_concurrent_update_under_repeatable_read_fails_the_locker,
    row_locks_in_opposite_order_deadlock,
    waits_for_a_row_lock_end_at_lock_timeout_and_statement_timeout,
    the_statement_holds_its_table_in_row_share_mode,
    vacuum_keeps_locked_rows_and_clears_ended_locks,
    a_crash_leaves_no_lock_standing,
);
