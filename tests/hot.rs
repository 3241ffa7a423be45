//! HOT updates (`src/heap/hot.rs`): an update that changes no indexed
//! column and finds room on its row's page makes a heap-only version with
//! no index entries. Every kind of scan, and unique checks, find it
//! through its chain's root; old snapshots find their own version there;
//! pruning shortens chains and vacuum keeps their redirects; replay after
//! a crash rebuilds them; and an index built over chains that old
//! snapshots still need is not used by those snapshots. Every I/O method.

mod common;

use aiostore::config::IoMethod;
use aiostore::database::{Database, Session};
use aiostore::types::Value;
use common::{explain_lines as plan, ints, new_small_pool_db, run};

/// Rows of table `t` updated since the database opened, and of those
/// HOT (`stat_tables`).
fn updates(s: &mut Session) -> (i64, i64) {
    let counts = ints(
        s,
        "SELECT n_tup_upd, n_tup_hot_upd FROM stat_tables WHERE relname = 't'",
    );
    (counts[0], counts[1])
}

/// The entries of index `name` (`verify_index` checks them against the
/// table first).
fn entries(s: &mut Session, name: &str) -> i64 {
    ints(s, &format!("SELECT verify_index('{name}')"))[0]
}

fn pages(s: &mut Session) -> i64 {
    ints(
        s,
        "SELECT pg_relation_size(oid) / 8192 FROM pg_class WHERE relname = 't'",
    )[0]
}

/// Each way of reading `t` by condition: sequential, bitmap, index and
/// index-only scans, as the settings force them.
const SCANS: [&str; 4] = ["seq", "bitmap", "index", "index-only"];

fn force(s: &mut Session, scan: &str) {
    match scan {
        "seq" => common::force_seq(s),
        "bitmap" => common::force_bitmap(s),
        "index" => common::force_index(s, false),
        _ => common::force_index(s, true),
    }
}

/// `query` by each scan of [`SCANS`], checking that the plan is the one
/// forced, as EXPLAIN names it (where the index does not hold every
/// column read, an index-only scan is a plain one).
fn by_every_scan(s: &mut Session, query: &str) -> Vec<Vec<Vec<Value>>> {
    SCANS
        .iter()
        .map(|scan| {
            force(s, scan);
            let shown = plan(s, query).join("\n");
            let node = match *scan {
                "seq" => "Seq Scan",
                "bitmap" => "Bitmap Heap Scan",
                "index" => "Index Scan",
                _ => "Index",
            };
            assert!(shown.contains(node), "{scan}: {query}: {shown}");
            common::sorted_rows(s, query)
        })
        .collect()
}

fn updates_of_unindexed_columns_make_no_entries_and_every_scan_finds_the_row(method: IoMethod) {
    let (_dir, _path, db) = new_small_pool_db(method, false);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE t (id int PRIMARY KEY, k int, v int, pad text) WITH (fillfactor = 40)",
    );
    run(&mut s, "CREATE INDEX t_k ON t (k)");
    run(
        &mut s,
        "INSERT INTO t SELECT i, i % 10, 0, repeat('x', 40) FROM generate_series(1, 200) AS g(i)",
    );
    let pages_before = pages(&mut s);
    for _ in 0..30 {
        run(&mut s, "UPDATE t SET v = v + 1");
    }
    let (updated, hot) = updates(&mut s);
    assert_eq!(updated, 6000);
    // Each page's room (fillfactor) and its dead versions, pruned when
    // the room runs out, hold every version. (At fillfactor 50 they would
    // not quite: an updated row keeps its root line pointer as a
    // redirect, so a page holds its rows, their redirects and a new
    // version of each, and 48 rows of 80 bytes need 8256 bytes of 8168.)
    assert_eq!(hot, 6000, "{method:?}");
    assert_eq!(entries(&mut s, "t_pkey"), 200, "{method:?}");
    assert_eq!(entries(&mut s, "t_k"), 200, "{method:?}");
    assert_eq!(
        pages(&mut s),
        pages_before,
        "{method:?}: the versions kept to their pages"
    );
    let want = vec![vec![Value::Integer(42), Value::Integer(30)]];
    for (scan, rows) in SCANS
        .iter()
        .zip(by_every_scan(&mut s, "SELECT id, v FROM t WHERE id = 42"))
    {
        assert_eq!(rows, want, "{method:?}, {scan}");
    }
    // An index-only scan on pages no longer all-visible reads each row's
    // chain for the one version its snapshot sees.
    common::force_index(&mut s, true);
    let query = "SELECT count(id) FROM t WHERE id <= 150";
    let shown = plan(&mut s, query).join("\n");
    assert!(shown.contains("Index Only Scan"), "{shown}");
    assert_eq!(ints(&mut s, query), [150], "{method:?}");
    for rows in by_every_scan(&mut s, "SELECT id FROM t WHERE k = 3") {
        assert_eq!(rows.len(), 20, "{method:?}");
    }
    assert_eq!(
        by_every_scan(&mut s, "SELECT count(*), sum(v) FROM t WHERE id <= 200")
            .into_iter()
            .map(|r| r[0].clone())
            .collect::<Vec<_>>(),
        vec![vec![Value::BigInt(200), Value::BigInt(6000)]; 4],
        "{method:?}"
    );
    common::storage_is_sound(&db);
}

fn an_old_snapshot_finds_its_version_through_the_chain(method: IoMethod) {
    let (_dir, _path, db) = new_small_pool_db(method, false);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE t (id int PRIMARY KEY, v int) WITH (fillfactor = 50)",
    );
    run(
        &mut s,
        "INSERT INTO t SELECT i, 0 FROM generate_series(1, 100) AS g(i)",
    );
    let mut old = db.session().unwrap();
    run(&mut old, "BEGIN ISOLATION LEVEL REPEATABLE READ");
    assert_eq!(ints(&mut old, "SELECT v FROM t WHERE id = 7"), [0]);
    for _ in 0..20 {
        run(&mut s, "UPDATE t SET v = v + 1 WHERE id = 7");
    }
    assert_eq!(updates(&mut s).1, 20, "{method:?}");
    let at = |v: i32| vec![vec![Value::Integer(7), Value::Integer(v)]];
    for rows in by_every_scan(&mut old, "SELECT id, v FROM t WHERE id = 7") {
        assert_eq!(rows, at(0), "{method:?}: the old snapshot's version");
    }
    for rows in by_every_scan(&mut s, "SELECT id, v FROM t WHERE id = 7") {
        assert_eq!(rows, at(20), "{method:?}");
    }
    run(&mut old, "COMMIT");
    // With the old snapshot gone, pruning and vacuum take the versions.
    run(&mut s, "VACUUM t");
    assert_eq!(entries(&mut s, "t_pkey"), 100, "{method:?}");
    for rows in by_every_scan(&mut s, "SELECT id, v FROM t WHERE id = 7") {
        assert_eq!(rows, at(20), "{method:?}");
    }
    common::storage_is_sound(&db);
}

fn a_row_updated_again_and_again_keeps_to_its_page(method: IoMethod) {
    let (_dir, _path, db) = new_small_pool_db(method, false);
    let mut s = db.session().unwrap();
    // Full pages (fillfactor 100): the room comes from pruning alone.
    run(&mut s, "CREATE TABLE t (id int PRIMARY KEY, v int)");
    run(
        &mut s,
        "INSERT INTO t SELECT i, 0 FROM generate_series(1, 10) AS g(i)",
    );
    for _ in 0..1000 {
        run(&mut s, "UPDATE t SET v = v + 1 WHERE id = 3");
    }
    assert_eq!(updates(&mut s), (1000, 1000), "{method:?}");
    assert_eq!(pages(&mut s), 1, "{method:?}");
    assert_eq!(entries(&mut s, "t_pkey"), 10, "{method:?}");
    assert_eq!(ints(&mut s, "SELECT v FROM t WHERE id = 3"), [1000]);
    // Vacuum keeps the chain's redirect; the row is found through it.
    run(&mut s, "VACUUM t");
    common::force_index(&mut s, false);
    assert_eq!(ints(&mut s, "SELECT v FROM t WHERE id = 3"), [1000]);
    assert_eq!(entries(&mut s, "t_pkey"), 10, "{method:?}");
    // The row deleted, its whole chain goes, and its entry with it.
    run(&mut s, "DELETE FROM t WHERE id = 3");
    run(&mut s, "VACUUM t");
    assert_eq!(entries(&mut s, "t_pkey"), 9, "{method:?}");
    assert!(common::rows(&mut s, "SELECT v FROM t WHERE id = 3").is_empty());
    run(&mut s, "INSERT INTO t VALUES (3, -1)");
    assert_eq!(ints(&mut s, "SELECT v FROM t WHERE id = 3"), [-1]);
    common::storage_is_sound(&db);
}

fn an_update_of_an_indexed_column_gives_it_entries(method: IoMethod) {
    let (_dir, _path, db) = new_small_pool_db(method, false);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE t (id int PRIMARY KEY, k int, x numeric) WITH (fillfactor = 50)",
    );
    run(&mut s, "CREATE INDEX t_k ON t (k)");
    run(&mut s, "CREATE INDEX t_x ON t (x)");
    run(
        &mut s,
        "INSERT INTO t VALUES (1, 10, '1.0'), (2, 20, '2.0')",
    );
    run(&mut s, "UPDATE t SET k = 11 WHERE id = 1");
    assert_eq!(updates(&mut s), (1, 0), "{method:?}");
    assert_eq!(entries(&mut s, "t_k"), 3, "{method:?}");
    assert_eq!(entries(&mut s, "t_pkey"), 3, "{method:?}");
    for rows in by_every_scan(&mut s, "SELECT id FROM t WHERE k = 11") {
        assert_eq!(rows, [[Value::Integer(1)]], "{method:?}");
    }
    for rows in by_every_scan(&mut s, "SELECT id FROM t WHERE k = 10") {
        assert!(rows.is_empty(), "{method:?}");
    }
    // The same value is the same image: HOT.
    run(&mut s, "UPDATE t SET k = k WHERE id = 2");
    assert_eq!(updates(&mut s), (2, 1), "{method:?}");
    // An equal numeric of another scale is another image, which an
    // index-only scan must answer with: not HOT. (String literals: a
    // literal with a point is a double here, not a numeric as in
    // PostgreSQL.)
    run(&mut s, "UPDATE t SET x = '1.00' WHERE id = 1");
    assert_eq!(updates(&mut s), (3, 1), "{method:?}");
    common::force_index(&mut s, true);
    let shown = plan(&mut s, "SELECT x FROM t WHERE x = 1").join("\n");
    assert!(shown.contains("Index Only Scan"), "{shown}");
    assert_eq!(
        common::rows(&mut s, "SELECT x::text FROM t WHERE x = 1"),
        [[Value::Text("1.00".into())]],
        "{method:?}"
    );
    common::storage_is_sound(&db);
}

fn unique_checks_follow_the_chain_to_the_live_version(method: IoMethod) {
    let (_dir, _path, db) = new_small_pool_db(method, false);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE t (id int PRIMARY KEY, v int) WITH (fillfactor = 50)",
    );
    run(&mut s, "INSERT INTO t VALUES (1, 0)");
    for _ in 0..5 {
        run(&mut s, "UPDATE t SET v = v + 1 WHERE id = 1");
    }
    assert_eq!(updates(&mut s).1, 5);
    // The entry leads to versions dead and one live: a duplicate.
    let e = aiostore::sql::execute(&mut s, "INSERT INTO t VALUES (1, 9)").unwrap_err();
    assert_eq!(e.sqlstate(), "23505", "{method:?}: {e}");
    // The transaction's own HOT version counts as live to it.
    run(&mut s, "BEGIN");
    run(&mut s, "UPDATE t SET v = 100 WHERE id = 1");
    let e = aiostore::sql::execute(&mut s, "INSERT INTO t VALUES (1, 9)").unwrap_err();
    assert_eq!(e.sqlstate(), "23505", "{method:?}: {e}");
    run(&mut s, "ROLLBACK");
    // Another's HOT update in progress: the inserter waits for it, then
    // finds the row live either way.
    for end in ["COMMIT", "ROLLBACK"] {
        let mut a = db.session().unwrap();
        run(&mut a, "BEGIN");
        run(&mut a, "UPDATE t SET v = v + 1 WHERE id = 1");
        let db2 = std::sync::Arc::clone(&db);
        let inserter = std::thread::spawn(move || {
            let mut b = db2.session().unwrap();
            aiostore::sql::execute(&mut b, "INSERT INTO t VALUES (1, 9)")
                .map(|_| ())
                .map_err(|e| e.sqlstate())
        });
        common::wait_until_someone_waits(&db, "the inserter");
        run(&mut a, end);
        assert_eq!(
            inserter.join().unwrap(),
            Err("23505"),
            "{method:?} after {end}"
        );
    }
    assert_eq!(ints(&mut s, "SELECT v FROM t WHERE id = 1"), [6]);
    // Deleted, its key is free again.
    run(&mut s, "DELETE FROM t WHERE id = 1");
    run(&mut s, "INSERT INTO t VALUES (1, 7)");
    run(&mut s, "VACUUM t");
    assert_eq!(entries(&mut s, "t_pkey"), 1, "{method:?}");
    assert_eq!(ints(&mut s, "SELECT v FROM t WHERE id = 1"), [7]);
}

fn a_rolled_back_hot_update_leaves_the_row_and_its_version_goes(method: IoMethod) {
    let (_dir, _path, db) = new_small_pool_db(method, false);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE t (id int PRIMARY KEY, v int) WITH (fillfactor = 50)",
    );
    run(
        &mut s,
        "INSERT INTO t SELECT i, 0 FROM generate_series(1, 20) AS g(i)",
    );
    run(&mut s, "BEGIN; UPDATE t SET v = 5 WHERE id <= 10; ROLLBACK");
    for rows in by_every_scan(&mut s, "SELECT sum(v) FROM t WHERE id <= 20") {
        assert_eq!(rows, [[Value::BigInt(0)]], "{method:?}");
    }
    run(&mut s, "UPDATE t SET v = 1 WHERE id <= 10");
    run(&mut s, "VACUUM t");
    for rows in by_every_scan(&mut s, "SELECT sum(v) FROM t WHERE id <= 20") {
        assert_eq!(rows, [[Value::BigInt(10)]], "{method:?}");
    }
    assert_eq!(entries(&mut s, "t_pkey"), 20, "{method:?}");
    common::storage_is_sound(&db);
}

fn chains_come_back_whole_after_a_crash(method: IoMethod) {
    let (_dir, path, db) = new_small_pool_db(method, false);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE t (id int PRIMARY KEY, k int, v int) WITH (fillfactor = 70)",
    );
    run(&mut s, "CREATE INDEX t_k ON t (k)");
    run(
        &mut s,
        "INSERT INTO t SELECT i, i % 7, 0 FROM generate_series(1, 500) AS g(i)",
    );
    run(&mut s, "CHECKPOINT");
    // Versions, pruning, redirects and a vacuum after the checkpoint:
    // replay makes each again.
    for round in 0..20 {
        run(&mut s, "UPDATE t SET v = v + 1 WHERE id % 5 = 0");
        if round == 10 {
            run(&mut s, "VACUUM t");
            run(&mut s, "UPDATE t SET k = k + 1 WHERE id = 1");
        }
    }
    run(&mut s, "BEGIN; UPDATE t SET v = -1; ROLLBACK");
    drop(s);
    common::crash(db);
    let db = Database::open(&path, &common::small_pool_settings(method, false)).unwrap();
    let mut s = db.session().unwrap();
    assert_eq!(entries(&mut s, "t_pkey"), 500 + 1, "{method:?}");
    assert_eq!(entries(&mut s, "t_k"), 500 + 1, "{method:?}");
    for rows in by_every_scan(&mut s, "SELECT count(*), sum(v) FROM t WHERE id <= 500") {
        assert_eq!(
            rows,
            [[Value::BigInt(500), Value::BigInt(100 * 20)]],
            "{method:?}"
        );
    }
    common::storage_is_sound(&db);
}

fn an_index_built_over_chains_old_snapshots_need_is_not_theirs(method: IoMethod) {
    let (_dir, _path, db) = new_small_pool_db(method, false);
    let mut s = db.session().unwrap();
    // No index: every update is HOT, whatever it changes.
    run(
        &mut s,
        "CREATE TABLE t (id int, b int, pad text) WITH (fillfactor = 50)",
    );
    run(
        &mut s,
        "INSERT INTO t SELECT i, i, repeat('p', 30) FROM generate_series(1, 300) AS g(i)",
    );
    let mut old = db.session().unwrap();
    run(&mut old, "BEGIN ISOLATION LEVEL REPEATABLE READ");
    assert_eq!(ints(&mut old, "SELECT count(*) FROM t"), [300]);
    run(&mut s, "UPDATE t SET b = b + 1000 WHERE id <= 10");
    assert_eq!(updates(&mut s), (10, 10), "{method:?}");
    // The build indexes each chain once, by its newest version: b = 1005
    // for row 5, not the b = 5 the old snapshot sees.
    run(&mut s, "CREATE INDEX t_b ON t (b)");
    assert_eq!(
        common::rows(
            &mut s,
            "SELECT i.indcheckxmin FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
             WHERE c.relname = 't_b'"
        ),
        [[Value::Boolean(true)]]
    );
    common::force_index(&mut old, false);
    let shown = plan(&mut old, "SELECT id FROM t WHERE b = 5").join("\n");
    assert!(
        !shown.contains("t_b"),
        "{method:?}: the old snapshot may not use the index: {shown}"
    );
    assert_eq!(
        ints(&mut old, "SELECT id FROM t WHERE b = 5"),
        [5],
        "{method:?}"
    );
    // A snapshot taken after the build may.
    common::force_index(&mut s, false);
    let shown = plan(&mut s, "SELECT id FROM t WHERE b = 1005").join("\n");
    assert!(
        shown.contains("Index Scan using t_b"),
        "{method:?}: {shown}"
    );
    assert_eq!(ints(&mut s, "SELECT id FROM t WHERE b = 1005"), [5]);
    assert!(common::rows(&mut s, "SELECT id FROM t WHERE b = 5").is_empty());
    // And so does the old session's next transaction.
    run(&mut old, "COMMIT");
    let shown = plan(&mut old, "SELECT id FROM t WHERE b = 1005").join("\n");
    assert!(
        shown.contains("Index Scan using t_b"),
        "{method:?}: {shown}"
    );
    assert_eq!(entries(&mut s, "t_b"), 300, "{method:?}");
    // A build with no old snapshot about leaves no such limit.
    run(&mut s, "UPDATE t SET b = b + 1 WHERE id <= 10");
    run(&mut s, "CREATE INDEX t_b2 ON t (b, id)");
    assert_eq!(
        common::rows(
            &mut s,
            "SELECT i.indcheckxmin FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
             WHERE c.relname = 't_b2'"
        ),
        [[Value::Boolean(false)]]
    );
}

for_each_method!(
    updates_of_unindexed_columns_make_no_entries_and_every_scan_finds_the_row,
    an_old_snapshot_finds_its_version_through_the_chain,
    a_row_updated_again_and_again_keeps_to_its_page,
    an_update_of_an_indexed_column_gives_it_entries,
    unique_checks_follow_the_chain_to_the_live_version,
    a_rolled_back_hot_update_leaves_the_row_and_its_version_goes,
    chains_come_back_whole_after_a_crash,
    an_index_built_over_chains_old_snapshots_need_is_not_theirs,
);
