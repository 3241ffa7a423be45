//! `INSERT`, `UPDATE` and `DELETE … RETURNING`, as PostgreSQL's: the
//! expressions over each inserted row, each row's new version or each
//! deleted row, with `*`, `t.*`, aliases, expressions and subqueries; the
//! command tag still counts the rows changed; a change that fails returns
//! no row; a read-committed change that waited for another writer returns
//! the version it changed. Every I/O method.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use aiostore::config::IoMethod;
use aiostore::database::{Database, Session};
use aiostore::sql::{self, ResultColumn, StatementIo};
use aiostore::txn::WaitTarget;
use aiostore::types::{ColumnType, Value};

/// The longest a test waits to see a session waiting.
const SEEN_WAITING_WITHIN: Duration = Duration::from_secs(30);

fn open(method: IoMethod) -> (tempfile::TempDir, Arc<Database>) {
    let dir = common::temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    let settings = [
        format!("io_method={}", method.name()),
        "shared_buffers=256".to_string(),
    ];
    (dir, Database::open(&path, &settings).unwrap())
}

/// `t (id integer PRIMARY KEY, v integer, note text)` of rows 1..=5, v =
/// 10 × id, note 'n' || id.
fn table(s: &mut Session) {
    common::run(
        s,
        "CREATE TABLE t (id integer PRIMARY KEY, v integer, note text);
         INSERT INTO t SELECT g, 10 * g, 'n' || g FROM generate_series(1, 5) g",
    );
}

fn int(x: i32) -> Value {
    Value::Integer(x)
}

fn text(x: &str) -> Value {
    Value::Text(x.into())
}

/// The ids of `t`, in order.
fn ids(s: &mut Session) -> Vec<Value> {
    common::rows(s, "SELECT id FROM t ORDER BY id")
        .into_iter()
        .map(|mut r| r.remove(0))
        .collect()
}

fn names(columns: &[ResultColumn]) -> Vec<&str> {
    columns.iter().map(|c| c.name.as_str()).collect()
}

fn each_change_returns_its_rows_and_counts_them(method: IoMethod) {
    let (_dir, db) = open(method);
    let mut s = db.session().unwrap();
    table(&mut s);

    let r = common::run(
        &mut s,
        "INSERT INTO t VALUES (6, 60, 'six'), (7, NULL, 'seven') RETURNING *",
    )
    .pop()
    .unwrap();
    assert_eq!(r.tag, "INSERT 0 2");
    assert_eq!(names(&r.columns), ["id", "v", "note"]);
    assert_eq!(
        r.rows,
        [
            vec![int(6), int(60), text("six")],
            vec![int(7), Value::Null, text("seven")]
        ]
    );
    // A column left out is returned as stored (NULL); expressions get
    // PostgreSQL's names.
    let r = common::run(&mut s, "INSERT INTO t (id) SELECT g FROM generate_series(8, 9) g RETURNING id * 2 AS twice, note, v + 1")
        .pop()
        .unwrap();
    assert_eq!(r.tag, "INSERT 0 2");
    assert_eq!(names(&r.columns), ["twice", "note", "?column?"]);
    assert_eq!(r.columns[0].ty, ColumnType::Integer);
    assert_eq!(
        r.rows,
        [
            vec![int(16), Value::Null, Value::Null],
            vec![int(18), Value::Null, Value::Null]
        ]
    );

    // UPDATE returns the new version, through an index scan and a HOT
    // update alike, and a subquery sees the table as the statement began.
    let r = common::run(
        &mut s,
        "UPDATE t AS x SET v = v + 1, note = upper(note) WHERE id = 2
         RETURNING x.*, (SELECT count(*) FROM t) AS rows_before",
    )
    .pop()
    .unwrap();
    assert_eq!(r.tag, "UPDATE 1");
    assert_eq!(names(&r.columns), ["id", "v", "note", "rows_before"]);
    assert_eq!(
        r.rows,
        [vec![int(2), int(21), text("N2"), Value::BigInt(9)]]
    );
    let mut r = common::run(
        &mut s,
        "UPDATE t SET v = 0 WHERE id BETWEEN 3 AND 4 RETURNING id, v",
    )
    .pop()
    .unwrap();
    r.rows.sort_by_key(|row| format!("{row:?}"));
    assert_eq!(r.rows, [[int(3), int(0)], [int(4), int(0)]]);

    // DELETE returns the row deleted, every column it names decoded even
    // where the WHERE reads one only.
    let r = common::run(&mut s, "DELETE FROM t WHERE v = 50 RETURNING note, id")
        .pop()
        .unwrap();
    assert_eq!(r.tag, "DELETE 1");
    assert_eq!(r.rows, [[text("n5"), int(5)]]);
    // EXPLAIN ANALYZE counts them as the change node's rows.
    let plan = common::plan_lines(
        &mut s,
        "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) DELETE FROM t WHERE id >= 8 RETURNING id",
    );
    assert_eq!(plan[0], "Delete on t (actual rows=2 loops=1)", "{plan:?}");
    common::run(&mut s, "INSERT INTO t (id) VALUES (8), (9)");
    // Nothing matched: no rows, and still the columns.
    let r = common::run(&mut s, "DELETE FROM t WHERE id = 99 RETURNING id")
        .pop()
        .unwrap();
    assert_eq!((r.tag.as_str(), r.rows.len()), ("DELETE 0", 0));
    assert!(r.returns_rows());
    assert_eq!(ids(&mut s), [1, 2, 3, 4, 6, 7, 8, 9].map(int));
    common::storage_is_sound(&db);
}

fn a_change_that_fails_returns_nothing_and_changes_nothing(method: IoMethod) {
    let (_dir, db) = open(method);
    let mut s = db.session().unwrap();
    table(&mut s);
    // The second row's key is taken: the first is not returned either.
    let e = sql::execute(
        &mut s,
        "INSERT INTO t VALUES (10, 1, 'a'), (1, 1, 'b') RETURNING id",
    )
    .unwrap_err();
    assert_eq!(e.sqlstate(), "23505", "{e}");
    let e = sql::execute(&mut s, "UPDATE t SET v = 1 / (id - 3) RETURNING id").unwrap_err();
    assert_eq!(e.sqlstate(), "22012", "{e}");
    assert_eq!(
        common::ints(&mut s, "SELECT sum(v) FROM t"),
        [150],
        "nothing changed"
    );
    // What RETURNING may not hold is refused as PostgreSQL refuses it.
    for (bad, code, says) in [
        (
            "INSERT INTO t VALUES (11) RETURNING nosuch",
            "42703",
            "nosuch",
        ),
        (
            "UPDATE t SET v = 1 RETURNING count(*)",
            "42803",
            "RETURNING",
        ),
        ("DELETE FROM t RETURNING u.*", "42P01", "u"),
    ] {
        let e = sql::execute(&mut s, bad).unwrap_err();
        assert_eq!(e.sqlstate(), code, "{bad}: {e}");
        assert!(e.to_string().contains(says), "{bad}: {e}");
    }
    assert_eq!(common::ints(&mut s, "SELECT count(*) FROM t"), [5]);
}

fn a_prepared_change_returns_the_rows_of_each_run(method: IoMethod) {
    let (_dir, db) = open(method);
    let mut s = db.session().unwrap();
    table(&mut s);
    let insert = sql::prepare(
        &mut s,
        "INSERT INTO t VALUES ($1, $2, 'p') RETURNING id, v * $2",
        &[],
    )
    .unwrap()
    .unwrap();
    assert_eq!(names(&insert.columns), ["id", "?column?"]);
    let update = sql::prepare(
        &mut s,
        "UPDATE t SET v = v + 1 WHERE id = $1 RETURNING v",
        &[],
    )
    .unwrap()
    .unwrap();
    // Past the custom plans a prepared statement tries first (that the
    // kept plan is used is checked in `sql::prepared`'s tests).
    for id in 100..120 {
        let r = sql::execute_prepared(
            &mut s,
            &insert,
            vec![int(id), int(2)],
            &mut StatementIo::default(),
        )
        .unwrap();
        assert_eq!(
            (r.tag.as_str(), r.rows.clone()),
            ("INSERT 0 1", vec![vec![int(id), int(4)]])
        );
        let r = sql::execute_prepared(&mut s, &update, vec![int(1)], &mut StatementIo::default())
            .unwrap();
        assert_eq!(r.rows, [[int(10 + id - 99)]]);
    }
    assert_eq!(common::ints(&mut s, "SELECT count(*) FROM t"), [25]);
}

/// Waits until a transaction waits for the one `holder` has open (a row
/// it changed).
fn wait_until_someone_waits(db: &Database) {
    let started = Instant::now();
    while !db
        .txn()
        .lock_rows()
        .iter()
        .any(|r| !r.granted && matches!(r.target, WaitTarget::Transaction(_)))
    {
        assert!(started.elapsed() < SEEN_WAITING_WITHIN, "nobody waited");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs `text` in a new session of `db` on a thread of its own, returning
/// the rows of its last statement.
fn spawn(db: &Arc<Database>, text: &str) -> std::thread::JoinHandle<Vec<Vec<Value>>> {
    let mut s = db.session().unwrap();
    let text = text.to_string();
    std::thread::spawn(move || {
        let mut rows = common::run(&mut s, &text).pop().unwrap().rows;
        rows.sort_by_key(|row| format!("{row:?}"));
        rows
    })
}

fn after_a_wait_the_version_changed_is_returned(method: IoMethod) {
    let (_dir, db) = open(method);
    let mut a = db.session().unwrap();
    table(&mut a);
    // The holder's update keeps row 2 in the WHERE: the waiter updates
    // the newest version, and returns that.
    common::run(&mut a, "BEGIN; UPDATE t SET v = 12 WHERE id = 2");
    let waiter = spawn(&db, "UPDATE t SET v = v + 1 WHERE v < 30 RETURNING id, v");
    wait_until_someone_waits(&db);
    common::run(&mut a, "COMMIT");
    assert_eq!(
        waiter.join().unwrap(),
        [[int(1), int(11)], [int(2), int(13)]]
    );

    // Row 2 now fails the WHERE, row 3 still passes: one row deleted,
    // returned with the values it had when deleted.
    common::run(
        &mut a,
        "BEGIN; UPDATE t SET v = 99 WHERE id = 2; UPDATE t SET note = 'late' WHERE id = 3",
    );
    let waiter = spawn(
        &db,
        "DELETE FROM t WHERE v BETWEEN 12 AND 30 RETURNING id, v, note",
    );
    wait_until_someone_waits(&db);
    common::run(&mut a, "COMMIT");
    assert_eq!(waiter.join().unwrap(), [[int(3), int(30), text("late")]]);
    assert_eq!(ids(&mut a), [1, 2, 4, 5].map(int));
}

for_each_method!(
    each_change_returns_its_rows_and_counts_them,
    a_change_that_fails_returns_nothing_and_changes_nothing,
    a_prepared_change_returns_the_rows_of_each_run,
    after_a_wait_the_version_changed_is_returned,
);
