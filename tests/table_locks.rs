//! Table locks (held to the transaction's end) and TRUNCATE: DROP TABLE,
//! TRUNCATE and CREATE INDEX wait for the transactions that use the table,
//! readers queue behind a waiting DROP, a statement that waited for a
//! TRUNCATE reads the new contents, a deadlock through a table lock and a
//! row is found, TRUNCATE is undone by ROLLBACK and by a crash before its
//! commit and kept by its commit, and COPY FREEZE asks for a TRUNCATE in
//! its transaction. The order of each interleaving is forced: a waiter is
//! seen waiting in the `locks` view before the test goes on. Every I/O
//! method.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use aiostore::config::IoMethod;
use aiostore::database::{Database, Session};
use aiostore::sql;
use common::{err, ints, run};

/// The longest the test waits for a waiter to show in the `locks` view.
const SEEN_WAITING_WITHIN: Duration = Duration::from_secs(30);

fn settings(method: IoMethod) -> Vec<String> {
    vec![
        format!("io_method={}", method.name()),
        "shared_buffers=256".into(),
        "max_sessions=16".into(),
    ]
}

fn open(method: IoMethod) -> (tempfile::TempDir, Arc<Database>) {
    let dir = common::temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    (dir, Database::open(&path, &settings(method)).unwrap())
}

/// Waits until `n` table lock requests are waiting (not granted): waits
/// for a row or a key do not count, so a test that goes on after this
/// knows its statement waits for a table.
fn wait_until_waiting(s: &mut Session, n: i64) {
    let started = Instant::now();
    while ints(
        s,
        "SELECT count(*) FROM locks WHERE NOT granted AND locktype = 'relation'",
    )[0] < n
    {
        assert!(
            started.elapsed() < SEEN_WAITING_WITHIN,
            "no {n} waiters showed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs `text` on a session of its own in a thread, returning its
/// result's last statement's rows' first values (or its error's code).
fn spawn(
    db: &Arc<Database>,
    text: &'static str,
) -> std::thread::JoinHandle<Result<Vec<i64>, String>> {
    let db = Arc::clone(db);
    std::thread::spawn(move || {
        let mut s = db.session().unwrap();
        match sql::execute(&mut s, text) {
            Ok(mut results) => Ok(results.pop().map_or(Vec::new(), |r| {
                r.rows
                    .iter()
                    .map(|row| match &row[0] {
                        aiostore::types::Value::BigInt(x) => *x,
                        aiostore::types::Value::Integer(x) => i64::from(*x),
                        v => panic!("not an integer: {v:?}"),
                    })
                    .collect()
            })),
            Err(e) => Err(format!("{} {e}", e.sqlstate())),
        }
    })
}

fn drop_waits_for_a_transaction_that_wrote_the_table(method: IoMethod) {
    let (_dir, db) = open(method);
    let mut a = db.session().unwrap();
    let mut b = db.session().unwrap();
    run(&mut a, "CREATE TABLE t (id integer PRIMARY KEY, v integer)");
    run(&mut a, "BEGIN; INSERT INTO t VALUES (1, 1)");
    // A weak lock with no strong request about: in A's fast-path slot.
    assert_eq!(
        ints(
            &mut b,
            "SELECT count(*) FROM locks WHERE relation = 't' AND mode = 'RowExclusiveLock' AND granted AND fastpath"
        ),
        [1]
    );
    // Before table locks, the statement's end let the DROP through and
    // A's commit then went to a table that was gone.
    run(&mut b, "SET lock_timeout = 100");
    let e = sql::execute(&mut b, "DROP TABLE t").unwrap_err();
    assert_eq!(e.sqlstate(), "55P03", "{e}");
    assert!(e.to_string().contains("AccessExclusiveLock"), "{e}");
    let dropper = spawn(&db, "DROP TABLE t");
    wait_until_waiting(&mut b, 1);
    assert_eq!(
        ints(
            &mut b,
            "SELECT count(*) FROM locks WHERE relation = 't' AND mode = 'RowExclusiveLock' AND granted AND NOT fastpath"
        ),
        [1],
        "A's lock shows, moved to the shared table by the DROP's request"
    );
    run(&mut a, "COMMIT");
    dropper.join().unwrap().unwrap();
    assert!(err(&mut b, "SELECT count(*) FROM t").contains("does not exist"));
}

fn readers_queue_behind_a_waiting_drop(method: IoMethod) {
    let (_dir, db) = open(method);
    let mut a = db.session().unwrap();
    let mut c = db.session().unwrap();
    run(
        &mut a,
        "CREATE TABLE t (id integer); INSERT INTO t VALUES (1)",
    );
    run(&mut a, "BEGIN; SELECT count(*) FROM t");
    let dropper = spawn(&db, "DROP TABLE t");
    wait_until_waiting(&mut c, 1);
    // A new reader waits behind the DROP (else a stream of readers would
    // keep it waiting for ever); A itself reads on.
    run(&mut c, "SET lock_timeout = 100");
    let e = sql::execute(&mut c, "SELECT count(*) FROM t").unwrap_err();
    assert_eq!(e.sqlstate(), "55P03", "{e}");
    assert_eq!(ints(&mut a, "SELECT count(*) FROM t"), [1]);
    run(&mut a, "COMMIT");
    dropper.join().unwrap().unwrap();
    run(&mut c, "SET lock_timeout = 0");
    assert!(err(&mut c, "SELECT count(*) FROM t").contains("does not exist"));
}

fn create_index_waits_for_open_writers_and_not_for_readers(method: IoMethod) {
    let (_dir, db) = open(method);
    let mut a = db.session().unwrap();
    let mut c = db.session().unwrap();
    run(
        &mut a,
        "CREATE TABLE t (id integer, v integer);
         INSERT INTO t SELECT i, i FROM generate_series(1, 1000) i",
    );
    run(&mut c, "BEGIN; SELECT count(*) FROM t");
    run(&mut a, "BEGIN; INSERT INTO t VALUES (5000, 5000)");
    let builder = spawn(&db, "CREATE INDEX t_id ON t (id)");
    wait_until_waiting(&mut c, 1);
    // Readers go on beside a waiting CREATE INDEX (Share does not
    // conflict with AccessShare).
    assert_eq!(ints(&mut c, "SELECT count(*) FROM t"), [1000]);
    run(&mut c, "COMMIT");
    run(&mut a, "COMMIT");
    builder.join().unwrap().unwrap();
    // The index has the row of the transaction it waited for.
    assert_eq!(ints(&mut c, "SELECT verify_index('t_id')"), [1001]);
    common::force_index(&mut c, false);
    assert_eq!(ints(&mut c, "SELECT v FROM t WHERE id = 5000"), [5000]);
}

fn truncate_is_undone_by_rollback_and_kept_by_commit(method: IoMethod) {
    let (dir, db) = open(method);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE t (id integer PRIMARY KEY, v text);
         CREATE INDEX t_v ON t (v);
         INSERT INTO t SELECT i, 'v' || i FROM generate_series(1, 2000) i",
    );
    let old_rel = db.catalog().table("t").unwrap().heap.rel;
    run(
        &mut s,
        "BEGIN; TRUNCATE t; INSERT INTO t VALUES (1, 'new'), (2, 'new')",
    );
    assert_eq!(ints(&mut s, "SELECT count(*) FROM t"), [2]);
    assert_eq!(ints(&mut s, "SELECT verify_index('t_pkey')"), [2]);
    run(&mut s, "ROLLBACK");
    assert_eq!(
        ints(&mut s, "SELECT count(*), sum(id) FROM t"),
        [2000, 2001000]
    );
    assert_eq!(ints(&mut s, "SELECT verify_index('t_pkey')"), [2000]);
    assert_eq!(ints(&mut s, "SELECT verify_index('t_v')"), [2000]);
    assert_eq!(db.catalog().table("t").unwrap().heap.rel, old_rel);
    assert!(err(&mut s, "INSERT INTO t VALUES (7, 'dup')").contains("already exists"));

    run(
        &mut s,
        "BEGIN; TRUNCATE TABLE t; INSERT INTO t VALUES (7, 'kept'); COMMIT",
    );
    assert_eq!(ints(&mut s, "SELECT count(*), sum(id) FROM t"), [1, 7]);
    assert_eq!(ints(&mut s, "SELECT verify_index('t_pkey')"), [1]);
    assert_eq!(ints(&mut s, "SELECT verify_index('t_v')"), [1]);
    run(&mut s, "INSERT INTO t VALUES (8, 'next')");
    assert!(err(&mut s, "INSERT INTO t VALUES (7, 'dup')").contains("already exists"));
    // The old files went with the commit.
    let old_file = dir.path().join("data/base").join(old_rel.to_string());
    assert!(!old_file.exists(), "{} is still there", old_file.display());
    // Outside a block, as its own transaction; several tables at once.
    run(
        &mut s,
        "CREATE TABLE u (a integer); INSERT INTO u VALUES (1); TRUNCATE t, u",
    );
    assert_eq!(ints(&mut s, "SELECT count(*) FROM t"), [0]);
    assert_eq!(ints(&mut s, "SELECT count(*) FROM u"), [0]);
    // A table created in the same block is refused with a clear error.
    let e = sql::execute(&mut s, "BEGIN; CREATE TABLE w (a integer); TRUNCATE w").unwrap_err();
    assert_eq!(e.sqlstate(), "0A000", "{e}");
    run(&mut s, "ROLLBACK");
}

fn a_statement_that_waited_for_a_truncate_reads_the_new_rows(method: IoMethod) {
    let (_dir, db) = open(method);
    let mut a = db.session().unwrap();
    let mut b = db.session().unwrap();
    run(
        &mut a,
        "CREATE TABLE t (id integer PRIMARY KEY);
         INSERT INTO t SELECT i FROM generate_series(1, 100) i",
    );
    run(&mut a, "BEGIN; TRUNCATE t; INSERT INTO t VALUES (7)");
    let reader = spawn(&db, "SELECT sum(id) FROM t");
    let writer = spawn(&db, "UPDATE t SET id = id + 1 WHERE id = 7");
    wait_until_waiting(&mut b, 2);
    run(&mut a, "COMMIT");
    // Both planned for the table's new file (the catalog shows it from
    // the TRUNCATE on) and waited for its lock; what this checks is the
    // snapshot taken again after the wait: the rows A committed, not
    // none. (A plan made before the TRUNCATE is planned again:
    // `vacuum_of_every_table_follows_a_truncate` and the kept plan's
    // test go through that.)
    let sum = reader.join().unwrap().unwrap();
    assert!(sum == [7] || sum == [8], "{sum:?}");
    writer.join().unwrap().unwrap();
    assert_eq!(ints(&mut b, "SELECT count(*), sum(id) FROM t"), [1, 8]);
}

/// A prepared statement past its custom plans keeps a generic plan. A
/// TRUNCATE by another session moves the catalog's generation, so the
/// kept plan is given up; the statement plans for the new files, waits
/// for the TRUNCATE's lock, and reads with a snapshot taken after it:
/// the rows the TRUNCATE's transaction loaded, and not the old ones.
fn a_kept_plan_follows_a_truncate_it_waited_for(method: IoMethod) {
    use aiostore::types::{ColumnType, Value};
    let (_dir, db) = open(method);
    let mut a = db.session().unwrap();
    let mut b = db.session().unwrap();
    run(
        &mut a,
        "CREATE TABLE t (id integer PRIMARY KEY, v integer);
         INSERT INTO t SELECT i, i FROM generate_series(1, 1000) i",
    );
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        let p = sql::prepare(
            &mut b,
            "SELECT v FROM t WHERE id = $1",
            &[Some(ColumnType::Integer)],
        )
        .unwrap()
        .unwrap();
        let mut value = |id: i32| {
            let r = sql::execute_prepared(
                &mut b,
                &p,
                vec![Value::Integer(id)],
                &mut Default::default(),
            )
            .unwrap();
            r.rows.first().map(|row| row[0].clone())
        };
        for id in 1..=10 {
            assert_eq!(value(id), Some(Value::Integer(id)));
        }
        ready_tx.send(()).unwrap();
        go_rx.recv().unwrap();
        // Waits for A's TRUNCATE.
        (value(5), value(6))
    });
    ready_rx.recv().unwrap();
    run(&mut a, "BEGIN; TRUNCATE t; INSERT INTO t VALUES (5, 500)");
    go_tx.send(()).unwrap();
    let mut c = db.session().unwrap();
    wait_until_waiting(&mut c, 1);
    run(&mut a, "COMMIT");
    let (five, six) = t.join().unwrap();
    assert_eq!(five, Some(Value::Integer(500)));
    assert_eq!(six, None);
}

fn a_deadlock_through_a_table_lock_and_a_row_is_found(method: IoMethod) {
    let (_dir, db) = open(method);
    let mut a = db.session().unwrap();
    let mut b = db.session().unwrap();
    run(
        &mut a,
        "CREATE TABLE t (id integer PRIMARY KEY, v integer);
         INSERT INTO t VALUES (1, 0);
         CREATE TABLE u (a integer)",
    );
    run(
        &mut a,
        "SET deadlock_timeout = 60000; SET lock_timeout = 60000",
    );
    run(
        &mut b,
        "SET deadlock_timeout = 100; SET lock_timeout = 5000",
    );
    run(&mut a, "BEGIN; UPDATE t SET v = 1 WHERE id = 1");
    run(&mut b, "BEGIN; SELECT count(*) FROM u");
    let a_thread = std::thread::spawn(move || {
        // Waits for B's AccessShare lock on u.
        let r = sql::execute(&mut a, "TRUNCATE u");
        run(&mut a, "COMMIT");
        r.map(drop).map_err(|e| e.to_string())
    });
    wait_until_waiting(&mut b, 1);
    // B waits for A's row: A waits for B's table; B's check finds it.
    let e = sql::execute(&mut b, "UPDATE t SET v = 2 WHERE id = 1").unwrap_err();
    assert_eq!(e.sqlstate(), "40P01", "{e}");
    let text = e.to_string();
    assert!(
        text.contains("AccessExclusiveLock on relation") && text.contains("waits for transaction"),
        "both waits are named: {text}"
    );
    a_thread.join().unwrap().unwrap();
    run(&mut b, "ROLLBACK");
    assert_eq!(ints(&mut b, "SELECT v FROM t"), [1]);
}

fn copy_freeze_wants_a_truncate_in_its_transaction(method: IoMethod) {
    let (dir, db) = open(method);
    let mut s = db.session().unwrap();
    let file = dir.path().join("rows.csv");
    std::fs::write(&file, "1\n2\n3\n").unwrap();
    run(&mut s, "CREATE TABLE t (a integer)");
    let copy = format!(
        "COPY t FROM '{}' WITH (FORMAT csv, FREEZE ON)",
        file.display()
    );
    let e = sql::execute(&mut s, &copy).unwrap_err();
    assert_eq!(e.sqlstate(), "55000", "{e}");
    run(&mut s, &format!("BEGIN; TRUNCATE t; {copy}; COMMIT"));
    assert_eq!(ints(&mut s, "SELECT count(*), sum(a) FROM t"), [3, 6]);
    // Every spelling of a boolean, and FREEZE off asks for nothing.
    run(
        &mut s,
        &format!(
            "COPY t FROM '{}' WITH (FORMAT csv, FREEZE off, HEADER 0)",
            file.display()
        ),
    );
    assert_eq!(ints(&mut s, "SELECT count(*) FROM t"), [6]);
}

fn truncate_survives_a_crash_only_once_committed(method: IoMethod) {
    let (dir, db) = open(method);
    let path = dir.path().join("data");
    {
        let mut s = db.session().unwrap();
        run(
            &mut s,
            "CREATE TABLE t (id integer PRIMARY KEY);
             INSERT INTO t SELECT i FROM generate_series(1, 1000) i;
             CREATE TABLE u (id integer PRIMARY KEY);
             INSERT INTO u SELECT i FROM generate_series(1, 1000) i;
             CHECKPOINT",
        );
        run(
            &mut s,
            "BEGIN; TRUNCATE t; INSERT INTO t SELECT i FROM generate_series(1, 10) i; COMMIT",
        );
        let mut open_one = db.session().unwrap();
        run(&mut open_one, "BEGIN; TRUNCATE u; INSERT INTO u VALUES (1)");
        db.wal().flush_all().unwrap();
        // Killed with u's truncation open: nothing rolls it back.
        db.simulate_crash();
    }
    common::crash(db);
    let db = Database::open(&path, &settings(method)).unwrap();
    let mut s = db.session().unwrap();
    assert_eq!(ints(&mut s, "SELECT count(*) FROM t"), [10]);
    assert_eq!(ints(&mut s, "SELECT verify_index('t_pkey')"), [10]);
    assert_eq!(ints(&mut s, "SELECT count(*) FROM u"), [1000]);
    assert_eq!(ints(&mut s, "SELECT verify_index('u_pkey')"), [1000]);
}

/// DROP TABLE deletes its catalog rows as its transaction's: a crash
/// after the deletions reached the WAL but before the commit brings the
/// whole table back (rows, columns, index), never part of it; a committed
/// DROP stays done.
fn a_drop_is_whole_or_not_at_all_across_a_crash(method: IoMethod) {
    let (dir, db) = open(method);
    let path = dir.path().join("data");
    {
        let mut s = db.session().unwrap();
        run(
            &mut s,
            "CREATE TABLE t (id integer PRIMARY KEY, a text, b text, c integer);
             INSERT INTO t SELECT i, 'a', 'b', i FROM generate_series(1, 500) i;
             CREATE TABLE gone (x integer); DROP TABLE gone",
        );
        let table = db.catalog().table("t").unwrap();
        // DROP TABLE's statement, stopped before its end.
        let snapshot = s.start_statement().unwrap();
        drop(snapshot);
        aiostore::exec::drop_table(&mut s, &table).unwrap();
        // Still in the cache: it goes with the commit, which never comes.
        assert!(db.catalog().table("t").is_ok());
        db.wal().flush_all().unwrap();
        db.simulate_crash();
    }
    common::crash(db);
    let db = Database::open(&path, &settings(method)).unwrap();
    let mut s = db.session().unwrap();
    assert_eq!(
        ints(&mut s, "SELECT count(*), sum(c) FROM t"),
        [500, 125250]
    );
    assert_eq!(ints(&mut s, "SELECT verify_index('t_pkey')"), [500]);
    assert!(err(&mut s, "SELECT * FROM gone").contains("does not exist"));
    run(&mut s, "DROP TABLE t; CREATE TABLE t (z integer)");
}

/// A DROP of two tables that fails at the second (its lock wait times
/// out) takes neither: the first, whose rows it had deleted, is whole
/// again, its name never free meanwhile, and the catalog loads after a
/// restart (found in review: the name was freed at once and an abort put
/// the old table back over a new one of the same name).
fn a_failed_drop_of_two_tables_takes_neither(method: IoMethod) {
    let (dir, db) = open(method);
    let path = dir.path().join("data");
    {
        let mut a = db.session().unwrap();
        let mut b = db.session().unwrap();
        run(
            &mut a,
            "CREATE TABLE one (id integer PRIMARY KEY); INSERT INTO one VALUES (1), (2);
             CREATE TABLE two (id integer); INSERT INTO two VALUES (3)",
        );
        run(&mut b, "BEGIN; SELECT count(*) FROM two");
        let dropper = std::thread::spawn(move || {
            run(&mut a, "SET lock_timeout = 1000");
            let e = sql::execute(&mut a, "DROP TABLE one, two").unwrap_err();
            (e.sqlstate(), a)
        });
        // While the DROP has deleted one's rows and waits for two, the
        // name one is not free for another table.
        let mut c = db.session().unwrap();
        wait_until_waiting(&mut c, 1);
        assert!(err(&mut c, "CREATE TABLE one (x integer)").contains("already exists"));
        let (code, mut a) = dropper.join().unwrap();
        assert_eq!(code, "55P03");
        run(&mut b, "COMMIT");
        assert_eq!(ints(&mut a, "SELECT count(*), sum(id) FROM one"), [2, 3]);
        assert!(err(&mut a, "CREATE TABLE one (x integer)").contains("already exists"));
        assert_eq!(ints(&mut a, "SELECT verify_index('one_pkey')"), [2]);
    }
    drop(db);
    let db = Database::open(&path, &settings(method)).unwrap();
    let mut s = db.session().unwrap();
    assert_eq!(ints(&mut s, "SELECT count(*) FROM one"), [2]);
    run(&mut s, "DROP TABLE one, two; CREATE TABLE one (x integer)");
}

/// A VACUUM of every table that finds one of them truncated since it
/// listed them vacuums the table's new files, instead of failing because
/// the table it listed was swapped (found in review). The VACUUM is held
/// at the first table (an open ANALYZE holds it) while the TRUNCATE of
/// the second commits.
fn vacuum_of_every_table_follows_a_truncate(method: IoMethod) {
    let (_dir, db) = open(method);
    let mut a = db.session().unwrap();
    let mut x = db.session().unwrap();
    let mut c = db.session().unwrap();
    run(
        &mut a,
        "CREATE TABLE a_first (id integer); INSERT INTO a_first VALUES (1);
         CREATE TABLE t (id integer); INSERT INTO t SELECT i FROM generate_series(1, 1000) i",
    );
    // ANALYZE's ShareUpdateExclusive lock, kept by its block.
    run(&mut x, "BEGIN; ANALYZE a_first");
    let vacuum = std::thread::spawn({
        let db = Arc::clone(&db);
        move || {
            let mut s = db.session().unwrap();
            sql::execute(&mut s, "VACUUM")
                .map(|r| r.iter().flat_map(|r| r.notices.clone()).collect::<Vec<_>>())
                .map_err(|e| e.to_string())
        }
    });
    wait_until_waiting(&mut c, 1);
    run(
        &mut a,
        "BEGIN; TRUNCATE t; INSERT INTO t VALUES (5); COMMIT",
    );
    run(&mut x, "COMMIT");
    let notices = vacuum.join().unwrap().unwrap();
    assert!(
        notices
            .iter()
            .any(|n| n.contains("table \"t\"") && n.contains("1 kept")),
        "{notices:?}"
    );
    assert!(
        notices.iter().any(|n| n.contains("table \"a_first\"")),
        "{notices:?}"
    );
}

for_each_method!(
    drop_waits_for_a_transaction_that_wrote_the_table,
    readers_queue_behind_a_waiting_drop,
    create_index_waits_for_open_writers_and_not_for_readers,
    truncate_is_undone_by_rollback_and_kept_by_commit,
    a_statement_that_waited_for_a_truncate_reads_the_new_rows,
    a_kept_plan_follows_a_truncate_it_waited_for,
    a_deadlock_through_a_table_lock_and_a_row_is_found,
    copy_freeze_wants_a_truncate_in_its_transaction,
    truncate_survives_a_crash_only_once_committed,
    a_drop_is_whole_or_not_at_all_across_a_crash,
    a_failed_drop_of_two_tables_takes_neither,
    vacuum_of_every_table_follows_a_truncate,
);
