//! Transactions waiting for each other: a deadlock between two writers
//! (of rows, and of unique keys) is found after deadlock_timeout and
//! breaks with 40P01 for the one that closed the cycle, and lock_timeout
//! bounds a wait. The order of the waits is forced: the first waiter is
//! seen waiting (in the transaction manager's wait graph) before the
//! second begins. Every I/O method.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use aiostore::config::IoMethod;
use aiostore::database::{Database, Session};
use aiostore::sql::{self, SqlError};

fn open(method: IoMethod) -> (tempfile::TempDir, Arc<Database>) {
    let dir = common::temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    let settings = vec![
        format!("io_method={}", method.name()),
        "shared_buffers=256".into(),
        "max_sessions=16".into(),
    ];
    (dir, Database::open(&path, &settings).unwrap())
}

fn run(s: &mut Session, text: &str) {
    sql::execute(s, text).unwrap_or_else(|e| panic!("{text}: {e}"));
}

/// Session A holds `first` and then runs `a_second`, which waits for B;
/// session B, holding `b_first`, runs `b_second`, which waits for A and
/// closes the cycle. B's short deadlock_timeout makes it the one whose
/// check finds it. Returns B's error; A's statement completes as the
/// error ends B's transaction, before B's ROLLBACK.
fn deadlock(
    method: IoMethod,
    setup: &str,
    a_first: &str,
    b_first: &str,
    a_second: &'static str,
    b_second: &str,
) -> (SqlError, Arc<Database>, tempfile::TempDir) {
    let (dir, db) = open(method);
    let mut a = db.session().unwrap();
    let mut b = db.session().unwrap();
    run(&mut a, setup);
    // The lock timeouts only bound the test if deadlock detection broke.
    run(
        &mut a,
        "SET deadlock_timeout = 60000; SET lock_timeout = 60000",
    );
    run(
        &mut b,
        "SET deadlock_timeout = 100; SET lock_timeout = 5000",
    );
    run(&mut a, &format!("BEGIN; {a_first}"));
    run(&mut b, &format!("BEGIN; {b_first}"));
    let a_thread = std::thread::spawn(move || {
        run(&mut a, a_second);
        run(&mut a, "COMMIT");
    });
    common::wait_until_someone_waits(&db, "the first session");
    // The locks view shows A waiting for B.
    let shown = common::ints(
        &mut b,
        "SELECT count(*), min(xid), min(transactionid) FROM locks WHERE locktype = 'transactionid' AND NOT granted",
    );
    assert_eq!(shown[0], 1, "{shown:?}");
    assert!(shown[1] < shown[2], "A (the older) waits for B: {shown:?}");
    let started = Instant::now();
    let e = sql::execute(&mut b, b_second).unwrap_err();
    assert!(
        started.elapsed() >= Duration::from_millis(100),
        "the check ran before deadlock_timeout"
    );
    // The error ended B's transaction: A goes on before B's ROLLBACK.
    a_thread.join().unwrap();
    run(&mut b, "ROLLBACK");
    (e, db, dir)
}

fn opposite_row_updates_deadlock_and_one_goes_on(method: IoMethod) {
    let (e, db, _dir) = deadlock(
        method,
        "CREATE TABLE t (id integer PRIMARY KEY, v integer);
         INSERT INTO t VALUES (1, 0), (2, 0)",
        "UPDATE t SET v = v + 1 WHERE id = 1",
        "UPDATE t SET v = v + 10 WHERE id = 2",
        "UPDATE t SET v = v + 1 WHERE id = 2",
        "UPDATE t SET v = v + 10 WHERE id = 1",
    );
    assert_eq!(e.sqlstate(), "40P01", "{e}");
    let text = e.to_string();
    assert!(
        text.contains("deadlock detected") && text.matches("waits for transaction").count() == 2,
        "both sides are named: {text}"
    );
    // A's two changes stand; B's were rolled back.
    let mut s = db.session().unwrap();
    assert_eq!(
        common::ints(
            &mut s,
            "SELECT (SELECT v FROM t WHERE id = 1), (SELECT v FROM t WHERE id = 2)"
        ),
        [1, 1]
    );
    assert!(db.txn().waits().is_empty());
}

fn opposite_key_inserts_deadlock(method: IoMethod) {
    let (e, db, _dir) = deadlock(
        method,
        "CREATE TABLE k (id integer PRIMARY KEY)",
        "INSERT INTO k VALUES (1)",
        "INSERT INTO k VALUES (2)",
        "INSERT INTO k VALUES (2)",
        "INSERT INTO k VALUES (1)",
    );
    assert_eq!(e.sqlstate(), "40P01", "{e}");
    let mut s = db.session().unwrap();
    assert_eq!(
        common::ints(&mut s, "SELECT min(id), max(id), count(*) FROM k"),
        [1, 2, 2]
    );
}

fn lock_timeout_ends_a_wait(method: IoMethod) {
    let (_dir, db) = open(method);
    let mut a = db.session().unwrap();
    let mut b = db.session().unwrap();
    run(
        &mut a,
        "CREATE TABLE t (id integer, v integer); INSERT INTO t VALUES (1, 0)",
    );
    run(&mut a, "BEGIN; UPDATE t SET v = 1");
    run(&mut b, "SET lock_timeout = 150");
    let started = Instant::now();
    let e = sql::execute(&mut b, "DELETE FROM t").unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(150));
    assert_eq!(e.sqlstate(), "55P03", "{e}");
    assert!(e.to_string().contains("lock timeout"), "{e}");
    run(&mut a, "COMMIT");
    // Without the limit it waits for the holder, then goes on.
    run(&mut b, "SET lock_timeout = 0");
    run(&mut a, "BEGIN; UPDATE t SET v = 2");
    let waiter = std::thread::spawn(move || {
        run(&mut b, "UPDATE t SET v = v + 10");
        b
    });
    common::wait_until_someone_waits(&db, "the first session");
    run(&mut a, "COMMIT");
    let mut b = waiter.join().unwrap();
    assert_eq!(common::ints(&mut b, "SELECT v FROM t"), [12]);
}

fn statement_timeout_stops_a_long_statement_and_a_wait(method: IoMethod) {
    let (dir, db) = open(method);
    let mut a = db.session().unwrap();
    let mut b = db.session().unwrap();
    run(&mut b, "SET statement_timeout = 200");
    let started = Instant::now();
    let e = sql::execute(
        &mut b,
        "SELECT count(*) FROM generate_series(1, 2000000000) i",
    )
    .unwrap_err();
    assert_eq!(e.sqlstate(), "57014", "{e}");
    assert!(e.to_string().contains("statement timeout"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(20));
    // A wait for another transaction's row ends at the deadline too.
    run(
        &mut a,
        "CREATE TABLE t (id integer, v integer); INSERT INTO t VALUES (1, 0)",
    );
    run(&mut a, "BEGIN; UPDATE t SET v = 1");
    let e = sql::execute(&mut b, "UPDATE t SET v = 2").unwrap_err();
    assert_eq!(e.sqlstate(), "57014", "{e}");
    run(&mut a, "COMMIT");
    // Each statement has its own deadline.
    run(&mut b, "UPDATE t SET v = 3");
    // An index build and a COPY from a file stop too (they read no
    // client and run no plan, so they ask themselves).
    run(&mut b, "SET statement_timeout = 0");
    run(
        &mut b,
        "CREATE TABLE big (a integer, note text);
         INSERT INTO big SELECT i, md5(i::text) FROM generate_series(1, 50000) i",
    );
    let file = dir.path().join("big.csv");
    run(
        &mut b,
        &format!("COPY big TO '{}' (FORMAT csv)", file.display()),
    );
    run(&mut b, "SET statement_timeout = 1");
    let e = sql::execute(&mut b, "CREATE INDEX big_a ON big (a)").unwrap_err();
    assert_eq!(e.sqlstate(), "57014", "{e}");
    let e = sql::execute(
        &mut b,
        &format!("COPY big FROM '{}' (FORMAT csv)", file.display()),
    )
    .unwrap_err();
    assert_eq!(e.sqlstate(), "57014", "{e}");
    run(&mut b, "SET statement_timeout = 0");
    assert_eq!(common::ints(&mut b, "SELECT count(*) FROM big"), [50000]);
    run(&mut b, "CREATE INDEX big_a ON big (a)");
}

for_each_method!(
    opposite_row_updates_deadlock_and_one_goes_on,
    opposite_key_inserts_deadlock,
    lock_timeout_ends_a_wait,
    statement_timeout_stops_a_long_statement_and_a_wait,
);
