//! Index scans from SQL: the planner's choice between a sequential scan
//! and an index scan, the same rows either way for every kind of key
//! condition (equality, ranges, IN lists, IS NULL, multi-column keys,
//! descending columns, values of other types), EXPLAIN's lines, and a
//! scan whose batch of TIDs outlives the entries vacuum removes. Every
//! I/O method.

mod common;

use aiostore::config::IoMethod;
use aiostore::database::Session;
use aiostore::types::Value;
use common::{explain_lines as plan, new_small_pool_db, run, sorted_rows};

const METHODS: [IoMethod; 3] = [IoMethod::Sync, IoMethod::Worker, IoMethod::IoUring];

/// A table of 20 000 rows over about 150 pages: `id` unique, `a` with 200
/// distinct values and a NULL in every 50th row, `b` text, `c` a double.
fn load(s: &mut Session) {
    run(
        s,
        "CREATE TABLE t (id int, a int, b text, c double precision, pad text)",
    );
    run(
        s,
        "INSERT INTO t SELECT i, i % 200, 'b' || (i % 37), i / 8.0, repeat('x', 20) \
         FROM generate_series(1, 20000) AS g(i)",
    );
    run(s, "UPDATE t SET a = NULL WHERE id % 50 = 0");
    run(s, "VACUUM t");
    run(s, "CREATE UNIQUE INDEX t_id ON t (id)");
    run(s, "CREATE INDEX t_a ON t (a)");
    run(s, "CREATE INDEX t_b_id ON t (b DESC, id)");
    run(s, "CREATE INDEX t_c ON t (c DESC NULLS LAST)");
}

const QUERIES: &[&str] = &[
    "SELECT id FROM t WHERE id = 777",
    "SELECT id FROM t WHERE 777 = id",
    "SELECT id FROM t WHERE id = 0",
    "SELECT id FROM t WHERE id = NULL",
    "SELECT id, a FROM t WHERE id < 30",
    "SELECT id FROM t WHERE id <= 30 AND id > 10",
    "SELECT id FROM t WHERE id >= 19990",
    "SELECT id FROM t WHERE id > 19990 AND id < 19980",
    "SELECT id FROM t WHERE id > 10 AND id >= 12 AND id < 40 AND id <= 39",
    "SELECT id FROM t WHERE id BETWEEN 100 AND 120",
    "SELECT id FROM t WHERE id IN (5, 3, 5, 19999, 40000, NULL)",
    "SELECT id FROM t WHERE id IN (5, 6) AND id = 6",
    "SELECT id FROM t WHERE id = 5.0",
    "SELECT id FROM t WHERE id = 5.5",
    "SELECT id FROM t WHERE id < 5.5",
    "SELECT id FROM t WHERE id > 19998.5",
    "SELECT id FROM t WHERE id IN (1.0, 2.5, 3)",
    "SELECT id FROM t WHERE id = 5 AND b = 'b5'",
    "SELECT id FROM t WHERE id < 100 AND a = 7",
    "SELECT id FROM t WHERE a = 7",
    "SELECT id FROM t WHERE a IS NULL AND id < 1000",
    "SELECT id FROM t WHERE a IS NULL",
    "SELECT id FROM t WHERE a > 197",
    "SELECT id FROM t WHERE a < 2",
    "SELECT id FROM t WHERE b = 'b3' AND id < 500",
    "SELECT id FROM t WHERE b = 'b3' AND id BETWEEN 300 AND 900",
    "SELECT id FROM t WHERE b IN ('b3', 'b30', 'zz') AND id < 200",
    "SELECT id FROM t WHERE b > 'b35' AND id < 100",
    "SELECT id FROM t WHERE b < 'b10'",
    "SELECT id FROM t WHERE c > 2490",
    "SELECT id FROM t WHERE c < 1.5",
    "SELECT id FROM t WHERE c >= 10 AND c <= 11",
    "SELECT id FROM t WHERE c = 12.5",
    "SELECT id FROM t WHERE c = 12.5 OR id = 3",
    "SELECT id FROM t WHERE id = (SELECT 42)",
    // Rescanned with each outer row's value.
    "SELECT id FROM t WHERE id < 60 AND EXISTS (SELECT 1 FROM t AS n WHERE n.id = t.id * 3)",
    "SELECT id, (SELECT max(n.c) FROM t AS n WHERE n.b = t.b AND n.id < 100) FROM t WHERE id < 40",
    "SELECT count(*) FROM t WHERE id < 5000",
];

#[test]
fn an_index_scan_returns_what_a_sequential_scan_returns() {
    for method in METHODS {
        let (_dir, _path, db) = new_small_pool_db(method, false);
        let mut s = db.session().unwrap();
        load(&mut s);
        // Two more versions of some rows, and rows deleted: the index has
        // entries of dead versions that the scan must not return.
        run(&mut s, "UPDATE t SET a = a + 1 WHERE id % 7 = 0");
        run(&mut s, "DELETE FROM t WHERE id % 11 = 0");
        for q in QUERIES {
            run(&mut s, "SET enable_indexscan = off");
            let seq = sorted_rows(&mut s, q);
            run(&mut s, "SET enable_indexscan = on");
            run(&mut s, "SET enable_seqscan = off");
            let by_index = sorted_rows(&mut s, q);
            let shown = plan(&mut s, q).join("\n");
            run(&mut s, "SET enable_seqscan = on");
            assert_eq!(by_index, seq, "{method:?}: {q}\n{shown}");
        }
    }
}

#[test]
fn the_planner_takes_an_index_for_a_selective_condition_and_not_for_a_wide_one() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Sync, false);
    let mut s = db.session().unwrap();
    load(&mut s);
    assert_eq!(
        plan(&mut s, "SELECT * FROM t WHERE id = 5"),
        ["Index Scan using t_id on t", "  Index Cond: (id = 5)"]
    );
    assert_eq!(
        plan(
            &mut s,
            "SELECT * FROM t WHERE b = 'b1' AND id = 5 AND c > 0"
        ),
        [
            "Index Scan using t_id on t",
            "  Index Cond: (id = 5)",
            "  Filter: ((b = 'b1') AND (c > 0))"
        ]
    );
    // Both columns of the two-column index: it finds one row.
    let two = plan(
        &mut s,
        "SELECT * FROM t WHERE b = 'b1' AND id BETWEEN 5 AND 6",
    );
    assert_eq!(two[0], "Index Scan using t_b_id on t", "{two:?}");
    // All but five rows are better read whole, once ANALYZE says so (a
    // never-analysed table's one-sided range is a third of it, which
    // PostgreSQL 15 reads by a bitmap scan, as we do).
    run(&mut s, "ANALYZE t");
    assert_eq!(
        plan(&mut s, "SELECT * FROM t WHERE id > 5"),
        ["Seq Scan on t", "  Filter: (id > 5)"]
    );
    // Off, the plain index scan is not used: as in PostgreSQL, a bitmap
    // scan reads the index instead, and with both off nothing does; nor
    // is the index used where no condition fits it.
    run(&mut s, "SET enable_indexscan = off");
    assert_eq!(
        plan(&mut s, "SELECT * FROM t WHERE id = 5")[0],
        "Bitmap Heap Scan on t"
    );
    run(&mut s, "SET enable_bitmapscan = off");
    assert_eq!(
        plan(&mut s, "SELECT * FROM t WHERE id = 5")[0],
        "Seq Scan on t"
    );
    run(&mut s, "SET enable_indexscan = on");
    assert_eq!(
        plan(&mut s, "SELECT * FROM t WHERE id + 1 = 5")[0],
        "Seq Scan on t"
    );
    assert_eq!(
        plan(&mut s, "SELECT * FROM t WHERE id = 5 OR a = 3")[0],
        "Seq Scan on t"
    );
    // An OR is served by a bitmap scan, not a plain index scan.
    run(&mut s, "SET enable_bitmapscan = on");
    assert_eq!(
        plan(&mut s, "SELECT * FROM t WHERE id = 5 OR a = 3")[..3],
        [
            "Bitmap Heap Scan on t",
            "  Recheck Cond: ((id = 5) OR (a = 3))",
            "  ->  BitmapOr"
        ]
    );
    // A correlated subquery searches the index with each outer row's
    // value.
    let correlated = plan(
        &mut s,
        "SELECT id FROM t WHERE id < 9 AND EXISTS (SELECT 1 FROM t AS n WHERE n.id = t.id * 3)",
    );
    assert!(
        correlated
            .iter()
            .any(|l| l.contains("Index Only Scan using t_id on t n")),
        "{correlated:?}"
    );
    assert!(
        correlated
            .iter()
            .any(|l| l.trim() == "Index Cond: (n.id = t.id * 3)"),
        "{correlated:?}"
    );
    // A join's inner table filtered by a constant is read by its index.
    run(&mut s, "CREATE TABLE u (x int)");
    run(&mut s, "INSERT INTO u VALUES (1), (2)");
    let join = plan(&mut s, "SELECT * FROM u JOIN t ON t.a = u.x WHERE t.id = 9");
    assert!(
        join.iter()
            .any(|l| l.contains("Index Scan using t_id on t")),
        "{join:?}"
    );
}

#[test]
fn explain_analyze_shows_the_index_searches_and_buffers() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Worker, false);
    let mut s = db.session().unwrap();
    load(&mut s);
    // (Else a bitmap scan reads the three rows, as in PostgreSQL 15.)
    run(&mut s, "SET enable_bitmapscan = off");
    let lines = plan(
        &mut s,
        "(ANALYZE, BUFFERS) SELECT id, a FROM t WHERE id IN (3, 5000, 9000)",
    );
    assert!(
        lines[0].starts_with("Index Scan using t_id on t (actual rows=3 loops=1)"),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"  Index Cond: (id IN (3, 5000, 9000))".to_string()),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"  Index Searches: 3".to_string()),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("  Buffers: shared ")),
        "{lines:?}"
    );
    // Rescanned once per outer row: the searches of every loop, as
    // PostgreSQL 18 counts them, where rows are per loop.
    run(
        &mut s,
        "SET enable_hashjoin = off; SET enable_mergejoin = off",
    );
    let lines = plan(
        &mut s,
        "(ANALYZE, BUFFERS OFF) SELECT t.a FROM generate_series(1, 4) k JOIN t ON t.id = k * 1000",
    );
    let inner = lines
        .iter()
        .position(|l| l.contains("Index Scan using t_id on t"))
        .expect("the inner index scan");
    assert!(
        lines[inner].ends_with("(actual rows=1 loops=4)"),
        "{lines:?}"
    );
    assert!(
        lines[inner + 1..]
            .iter()
            .any(|l| l.trim() == "Index Searches: 4"),
        "{lines:?}"
    );
}

#[test]
fn a_scan_holding_tids_that_vacuum_frees_and_new_rows_reuse_returns_only_its_snapshots_rows() {
    use aiostore::inject::{Injection, INDEX_SCAN_BEFORE_HEAP_FETCH};
    for method in METHODS {
        let (_dir, _path, db) = new_small_pool_db(method, false);
        let mut s = db.session().unwrap();
        run(&mut s, "CREATE TABLE t (k int, v text)");
        run(
            &mut s,
            "INSERT INTO t SELECT i, 'old' FROM generate_series(1, 2000) AS g(i)",
        );
        run(&mut s, "CREATE INDEX t_k ON t (k)");
        // Dead to everyone before the scan starts: their entries are in
        // the batch the scan copies, vacuum may free their line pointers.
        run(&mut s, "DELETE FROM t WHERE k <= 200 AND k % 2 = 0");
        let points = std::sync::Arc::clone(db.aio());
        points
            .injections()
            .attach(INDEX_SCAN_BEFORE_HEAP_FETCH, Injection::park().times(1));
        let scanner = {
            let db = std::sync::Arc::clone(&db);
            std::thread::spawn(move || {
                let mut s = db.session().unwrap();
                // The plain index scan, whose batches hold copied TIDs.
                run(&mut s, "SET enable_seqscan = off");
                run(&mut s, "SET enable_bitmapscan = off");
                sorted_rows(&mut s, "SELECT k, v FROM t WHERE k <= 200")
            })
        };
        assert!(points
            .injections()
            .wait_until_parked(INDEX_SCAN_BEFORE_HEAP_FETCH));
        // The scan holds TIDs of the deleted rows; vacuum removes their
        // entries and frees their line pointers, and new rows (in range,
        // committed after the scan's snapshot) take them.
        run(&mut s, "VACUUM t");
        run(
            &mut s,
            "INSERT INTO t SELECT i, 'new' FROM generate_series(1, 200) AS g(i)",
        );
        points.injections().release(INDEX_SCAN_BEFORE_HEAP_FETCH);
        let got = scanner.join().unwrap();
        let expected: Vec<Vec<Value>> = {
            let mut rows: Vec<Vec<Value>> = (1..=200)
                .filter(|k| k % 2 == 1)
                .map(|k| vec![Value::Integer(k), Value::Text("old".into())])
                .collect();
            rows.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
            rows
        };
        assert_eq!(got, expected, "{method:?}");
        // And the index agrees with the table after all of it.
        run(&mut s, "SELECT verify_index('t_k')");
    }
}

#[test]
fn update_and_delete_find_their_rows_through_an_index_and_change_each_once() {
    for method in METHODS {
        let (_dir, _path, db) = new_small_pool_db(method, false);
        let mut s = db.session().unwrap();
        load(&mut s);
        assert_eq!(
            plan(&mut s, "UPDATE t SET c = 0 WHERE id = 5"),
            [
                "Update on t",
                "  ->  Index Scan using t_id on t",
                "        Index Cond: (id = 5)"
            ]
        );
        assert_eq!(
            plan(&mut s, "DELETE FROM t WHERE id IN (1, 2) AND a > 0"),
            [
                "Delete on t",
                "  ->  Bitmap Heap Scan on t",
                "        Recheck Cond: (id IN (1, 2))",
                "        Filter: (a > 0)",
                "        ->  Bitmap Index Scan on t_id",
                "              Index Cond: (id IN (1, 2))"
            ]
        );
        run(&mut s, "SET enable_seqscan = off");
        // Moving keys forward through the index the scan reads: every new
        // version's entry lands ahead of the scan, and none is changed
        // again (the Halloween problem).
        let before = sorted_rows(
            &mut s,
            "SELECT count(*), sum(a) FROM t WHERE a >= 100 AND a < 150",
        );
        let (n, sum) = (int(&before[0][0]), int(&before[0][1]));
        let tag = &run(&mut s, "UPDATE t SET a = a + 1 WHERE a >= 100 AND a < 150")[0].tag;
        assert_eq!(tag, &format!("UPDATE {n}"), "{method:?}");
        let after = sorted_rows(
            &mut s,
            "SELECT count(*), sum(a) FROM t WHERE a >= 101 AND a < 151",
        );
        assert_eq!(int(&after[0][0]), n, "{method:?}");
        assert_eq!(int(&after[0][1]), sum + n, "{method:?}");
        let tag = &run(&mut s, "UPDATE t SET id = id + 100000 WHERE id <= 1000")[0].tag;
        assert_eq!(tag, "UPDATE 1000", "{method:?}");
        let tag = &run(&mut s, "DELETE FROM t WHERE id BETWEEN 100001 AND 100010")[0].tag;
        assert_eq!(tag, "DELETE 10", "{method:?}");
        run(&mut s, "SET enable_seqscan = on");
        assert_eq!(
            sorted_rows(&mut s, "SELECT count(*), min(id), max(id) FROM t"),
            [vec![
                Value::BigInt(19_990),
                Value::Integer(1001),
                Value::Integer(101_000)
            ]],
            "{method:?}"
        );
        for index in ["t_id", "t_a", "t_b_id", "t_c"] {
            run(&mut s, &format!("SELECT verify_index('{index}')"));
        }
    }
}

#[test]
fn an_update_through_an_index_racing_a_commit_follows_the_newer_version() {
    use aiostore::inject::{Injection, TXN_STATUS_BETWEEN_LOOKUPS};
    // (session 1's change, session 2's statement through the index, its
    // tag, and the rows afterwards)
    for (first, second, tag, expected) in [
        (
            "UPDATE acc SET balance = balance + 1 WHERE id = 1",
            "UPDATE acc SET balance = balance + 10 WHERE id = 1",
            "UPDATE 1",
            "1:111 2:200",
        ),
        (
            "UPDATE acc SET id = 3 WHERE id = 1",
            "UPDATE acc SET balance = 0 WHERE id = 1",
            "UPDATE 0",
            "2:200 3:100",
        ),
        (
            "UPDATE acc SET balance = balance + 5 WHERE id = 1",
            "DELETE FROM acc WHERE id = 1 AND balance < 105",
            "DELETE 0",
            "1:105 2:200",
        ),
    ] {
        let (_dir, _path, db) = new_small_pool_db(IoMethod::Sync, false);
        let mut s1 = db.session().unwrap();
        run(&mut s1, "CREATE TABLE acc (id integer, balance integer)");
        run(&mut s1, "INSERT INTO acc VALUES (1, 100), (2, 200)");
        run(&mut s1, "CREATE UNIQUE INDEX acc_id ON acc (id)");
        run(&mut s1, &format!("BEGIN; {first}"));
        let points = db.txn().injections();
        points.attach(TXN_STATUS_BETWEEN_LOOKUPS, Injection::park().times(1));
        let racer = {
            let db = std::sync::Arc::clone(&db);
            std::thread::spawn(move || {
                let mut s2 = db.session().unwrap();
                run(&mut s2, "SET enable_seqscan = off");
                let shown = plan(&mut s2, second).join("\n");
                assert!(shown.contains("Index Scan using acc_id"), "{shown}");
                aiostore::sql::execute(&mut s2, second)
            })
        };
        assert!(points.wait_until_parked(TXN_STATUS_BETWEEN_LOOKUPS));
        run(&mut s1, "COMMIT");
        points.release(TXN_STATUS_BETWEEN_LOOKUPS);
        let outcome = racer.join().unwrap().unwrap();
        assert_eq!(outcome[0].tag, tag, "{first} / {second}");
        let rows = sorted_rows(&mut s1, "SELECT id, balance FROM acc");
        let shown: Vec<String> = rows
            .iter()
            .map(|r| format!("{}:{}", int(&r[0]), int(&r[1])))
            .collect();
        assert_eq!(shown.join(" "), expected, "{first} / {second}");
        run(&mut s1, "SELECT verify_index('acc_id')");
    }
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Integer(i) => i64::from(*i),
        Value::BigInt(i) => *i,
        other => panic!("an integer, not {other:?}"),
    }
}

/// The `Heap Fetches` EXPLAIN ANALYZE reports for `sql`, an index-only
/// scan.
fn heap_fetches(s: &mut Session, sql: &str) -> u64 {
    let lines = plan(s, &format!("(ANALYZE) {sql}"));
    let joined = lines.join("\n");
    assert!(
        joined.contains("Index Only Scan using t_id on t"),
        "{joined}"
    );
    lines
        .iter()
        .find_map(|l| l.trim().strip_prefix("Heap Fetches: "))
        .unwrap_or_else(|| panic!("{joined}"))
        .parse()
        .unwrap()
}

#[test]
fn an_index_only_scan_reads_the_table_only_for_pages_the_map_does_not_vouch_for() {
    for method in METHODS {
        let (_dir, _path, db) = new_small_pool_db(method, method == IoMethod::IoUring);
        let mut s = db.session().unwrap();
        load(&mut s);
        // (Else a bitmap scan reads them, as in PostgreSQL 15.)
        run(&mut s, "SET enable_bitmapscan = off");
        let q = "SELECT id FROM t WHERE id BETWEEN 100 AND 5000";
        let count = "SELECT count(id) FROM t WHERE id BETWEEN 100 AND 5000";
        // Vacuumed before the indexes were made: every page all-visible.
        assert_eq!(heap_fetches(&mut s, q), 0, "{method:?}");
        let all = sorted_rows(&mut s, q);
        assert_eq!(all.len(), 4901);
        // A delete clears its pages' bits: their rows are read from the
        // table, and the deleted ones are not returned.
        run(&mut s, "DELETE FROM t WHERE id % 100 = 0 AND id < 3000");
        assert!(heap_fetches(&mut s, q) > 0);
        let after = sorted_rows(&mut s, q);
        run(&mut s, "SET enable_indexonlyscan = off");
        assert!(!plan(&mut s, q).join("\n").contains("Index Only"));
        assert_eq!(sorted_rows(&mut s, q), after);
        run(&mut s, "SET enable_indexonlyscan = on");
        assert_eq!(after.len(), 4901 - 29);
        // A snapshot taken before another delete still counts its rows:
        // the delete cleared the bits, so they come from the table.
        let mut old = db.session().unwrap();
        run(&mut old, "BEGIN ISOLATION LEVEL REPEATABLE READ");
        assert_eq!(common::ints(&mut old, count), vec![4872]);
        run(&mut s, "DELETE FROM t WHERE id BETWEEN 4000 AND 4099");
        assert_eq!(common::ints(&mut old, count), vec![4872]);
        assert_eq!(common::ints(&mut s, count), vec![4772]);
        run(&mut old, "COMMIT");
        // Vacuum sets the bits again (once the index entries are gone).
        run(&mut s, "VACUUM t");
        run(&mut s, "VACUUM t");
        assert_eq!(heap_fetches(&mut s, q), 0);
        assert_eq!(common::ints(&mut s, count), vec![4772]);
        // UPDATE and DELETE read their rows from the table, never from
        // the index alone.
        let shown = plan(&mut s, "DELETE FROM t WHERE id = 7").join("\n");
        assert!(!shown.contains("Index Only"), "{shown}");
    }
}

/// The rows of `sql` in the order it returns them.
fn ordered_rows(s: &mut Session, sql: &str) -> Vec<Vec<Value>> {
    run(s, sql).pop().unwrap().rows
}

#[test]
fn an_index_gives_the_order_by_and_a_limit_reads_only_what_it_returns() {
    for method in METHODS {
        let (_dir, _path, db) = new_small_pool_db(method, method == IoMethod::IoUring);
        let mut s = db.session().unwrap();
        load(&mut s);
        run(&mut s, "UPDATE t SET a = a + 1 WHERE id % 7 = 0");
        run(&mut s, "DELETE FROM t WHERE id % 11 = 0");
        // Only the ORDER BY's columns are selected: rows with equal keys
        // may come in any order.
        let queries = [
            "SELECT id FROM t ORDER BY id LIMIT 10",
            "SELECT id FROM t ORDER BY id DESC LIMIT 10",
            "SELECT id FROM t ORDER BY id LIMIT 5 OFFSET 100",
            "SELECT id FROM t WHERE id > 19950 ORDER BY id DESC",
            "SELECT id FROM t WHERE id BETWEEN 100 AND 300 ORDER BY id",
            "SELECT a FROM t ORDER BY a LIMIT 300",
            "SELECT a FROM t ORDER BY a DESC LIMIT 300",
            "SELECT a FROM t ORDER BY a DESC NULLS FIRST LIMIT 300",
            "SELECT a FROM t ORDER BY a NULLS FIRST LIMIT 300",
            "SELECT a FROM t WHERE a < 3 ORDER BY a DESC",
            "SELECT b, id FROM t ORDER BY b DESC, id LIMIT 50",
            "SELECT b, id FROM t ORDER BY b, id DESC LIMIT 50",
            "SELECT b FROM t WHERE b > 'b35' ORDER BY b DESC",
            "SELECT c FROM t ORDER BY c DESC NULLS LAST LIMIT 20",
            "SELECT c FROM t ORDER BY c ASC NULLS FIRST LIMIT 20",
            "SELECT id FROM t ORDER BY id",
        ];
        // The one order no index here gives: `a` is ASC NULLS LAST.
        let needs_sort = "SELECT a FROM t ORDER BY a NULLS FIRST LIMIT 300";
        for q in queries {
            run(&mut s, "SET enable_indexscan = off");
            run(&mut s, "SET enable_indexonlyscan = off");
            let sorted = ordered_rows(&mut s, q);
            assert!(plan(&mut s, q).iter().any(|l| l.contains("Sort")), "{q}");
            run(&mut s, "SET enable_indexscan = on");
            assert!(!sorted.is_empty(), "{q}");
            // As chosen; then with random reads made cheap, so that every
            // order an index gives is read through it, plain and
            // index-only.
            for settings in [
                "SET enable_indexonlyscan = on",
                "SET random_page_cost = 0.01",
                "SET enable_indexonlyscan = off",
            ] {
                run(&mut s, settings);
                let shown = plan(&mut s, q).join("\n");
                if settings != "SET enable_indexonlyscan = on" {
                    assert_eq!(shown.contains("Sort"), q == needs_sort, "{q}\n{shown}");
                }
                assert_eq!(ordered_rows(&mut s, q), sorted, "{method:?}: {q}\n{shown}");
            }
            run(&mut s, "RESET random_page_cost");
        }
    }
}

#[test]
fn the_planner_spares_the_sort_where_an_index_gives_the_order() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Worker, false);
    let mut s = db.session().unwrap();
    load(&mut s);
    run(&mut s, "ANALYZE t");
    assert_eq!(
        plan(&mut s, "SELECT * FROM t ORDER BY id LIMIT 5"),
        ["Limit", "  ->  Index Scan using t_id on t"]
    );
    assert_eq!(
        plan(&mut s, "SELECT * FROM t ORDER BY id DESC LIMIT 5"),
        ["Limit", "  ->  Index Scan Backward using t_id on t"]
    );
    // The two-column index in its order, or all reversed; not mixed.
    assert_eq!(
        plan(&mut s, "SELECT * FROM t ORDER BY b DESC, id LIMIT 5")[1],
        "  ->  Index Scan using t_b_id on t"
    );
    assert_eq!(
        plan(&mut s, "SELECT * FROM t ORDER BY b, id DESC LIMIT 5")[1],
        "  ->  Index Scan Backward using t_b_id on t"
    );
    assert_eq!(
        plan(&mut s, "SELECT * FROM t ORDER BY b, id LIMIT 5")[1],
        "  ->  Sort"
    );
    // NULLs must come where the index puts them.
    assert_eq!(
        plan(&mut s, "SELECT * FROM t ORDER BY a NULLS FIRST LIMIT 5")[1],
        "  ->  Sort"
    );
    // A LIMIT reads a handful of pages, not the table.
    let lines = plan(
        &mut s,
        "(ANALYZE, BUFFERS) SELECT * FROM t ORDER BY id DESC LIMIT 5",
    );
    let buffers: u64 = lines
        .iter()
        .filter_map(|l| l.trim().strip_prefix("Buffers: shared "))
        .flat_map(|b| b.split(' '))
        .filter_map(|part| part.split('=').nth(1))
        .map(|n| n.parse::<u64>().unwrap())
        .sum();
    assert!(buffers > 0 && buffers < 10, "{lines:?}");
    // Without a LIMIT, every row of an unordered column (a cycles
    // through the table) is fetched through the index: cheap while the
    // table fits in the cache the planner assumes, a page read per row
    // once it does not (PostgreSQL's choice too).
    assert_eq!(
        plan(&mut s, "SELECT * FROM t ORDER BY a")[0],
        "Index Scan using t_a on t"
    );
    run(&mut s, "SET effective_cache_size = '64kB'");
    assert_eq!(plan(&mut s, "SELECT * FROM t ORDER BY a")[0], "Sort");
    run(&mut s, "RESET effective_cache_size");
    // An aggregate's order is not the table's.
    assert_eq!(
        plan(&mut s, "SELECT a, count(*) FROM t GROUP BY a ORDER BY a")[0],
        "Sort"
    );
}

#[test]
fn an_index_only_scan_holding_entries_that_vacuum_removes_never_returns_a_deleted_row() {
    use aiostore::inject::INDEX_SCAN_BEFORE_HEAP_FETCH;
    for method in METHODS {
        let (_dir, _path, db) = new_small_pool_db(method, false);
        let mut s = db.session().unwrap();
        table_with_deleted_rows(&mut s);
        let (points, scanner) = parked_index_only_scan(&db, INDEX_SCAN_BEFORE_HEAP_FETCH, |s| {
            sorted_rows(s, "SELECT k FROM t WHERE k <= 200")
        });
        // Vacuum removes the deleted rows' entries and line pointers, and
        // a second pass marks their pages all-visible again: the entries
        // the parked scan holds must not be vouched for by those bits.
        run(&mut s, "VACUUM t");
        run(&mut s, "VACUUM t");
        points.injections().release(INDEX_SCAN_BEFORE_HEAP_FETCH);
        let got = scanner.join().unwrap();
        let expected: Vec<Vec<Value>> = {
            let mut rows: Vec<Vec<Value>> = (1..=200)
                .filter(|k| k % 2 == 1)
                .map(|k| vec![Value::Integer(k)])
                .collect();
            rows.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
            rows
        };
        assert_eq!(got, expected, "{method:?}");
    }
}

#[test]
fn vacuum_waits_for_an_index_only_scan_to_let_go_of_its_leaf() {
    use aiostore::inject::INDEX_ONLY_SCAN_LEAF_PINNED;
    for method in METHODS {
        let (_dir, _path, db) = new_small_pool_db(method, false);
        let mut s = db.session().unwrap();
        table_with_deleted_rows(&mut s);
        let (points, scanner) = parked_index_only_scan(&db, INDEX_ONLY_SCAN_LEAF_PINNED, |s| {
            common::ints(s, "SELECT count(k) FROM t WHERE k <= 200")
        });
        // The scan holds the first leaf pinned: vacuum's index pass cannot
        // remove the dead rows' entries there until it lets go.
        let vacuum = {
            let db = std::sync::Arc::clone(&db);
            std::thread::spawn(move || {
                let mut s = db.session().unwrap();
                run(&mut s, "VACUUM t");
                run(&mut s, "VACUUM t");
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(
            !vacuum.is_finished(),
            "{method:?}: vacuum removed entries from a leaf an index-only scan holds"
        );
        points.injections().release(INDEX_ONLY_SCAN_LEAF_PINNED);
        assert_eq!(scanner.join().unwrap(), vec![100]);
        vacuum.join().unwrap();
        run(&mut s, "SELECT verify_index('t_k')");
        assert_eq!(
            common::ints(&mut s, "SELECT count(k) FROM t WHERE k <= 200"),
            vec![100]
        );
    }
}

#[test]
fn every_scan_type_agrees_within_one_snapshot_while_others_change_and_vacuum_the_table() {
    // One session changes the table and vacuums it without pause; the
    // other, in a repeatable-read transaction, runs each query by every
    // scan type and compares: within one snapshot they must agree, and
    // with its first answer, however the table changes meanwhile.
    for method in METHODS {
        scan_types_agree_while_the_table_changes(method);
    }
}

fn scan_types_agree_while_the_table_changes(method: IoMethod) {
    let (_dir, _path, db) = new_small_pool_db(method, false);
    let mut s = db.session().unwrap();
    run(&mut s, "CREATE TABLE t (id int, k int, v text)");
    run(
        &mut s,
        "INSERT INTO t SELECT i, i % 97, 'v' FROM generate_series(1, 6000) AS g(i)",
    );
    run(&mut s, "CREATE INDEX t_id ON t (id)");
    run(&mut s, "CREATE INDEX t_k ON t (k)");
    run(&mut s, "VACUUM ANALYZE t");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let db = std::sync::Arc::clone(&db);
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut s = db.session().unwrap();
            let mut round = 0u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                round += 1;
                let at = (round * 389) % 6000;
                run(
                    &mut s,
                    &format!(
                        "UPDATE t SET k = (k + 1) % 97 WHERE id BETWEEN {at} AND {}",
                        at + 40
                    ),
                );
                run(
                    &mut s,
                    &format!("DELETE FROM t WHERE id = {}", (round * 131) % 6000),
                );
                run(
                    &mut s,
                    &format!(
                        "INSERT INTO t VALUES ({}, {}, 'n')",
                        6000 + round,
                        round % 97
                    ),
                );
                if round.is_multiple_of(5) {
                    run(&mut s, "VACUUM t");
                }
            }
            round
        })
    };
    // Each way of reading, and what its plan must show ("Index" covers
    // an index-only scan, which a query reading a column outside the
    // index cannot have).
    let methods = [
        ("SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_seqscan = on", "Seq Scan"),
        ("SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_indexscan = on; SET enable_indexonlyscan = off", "Index Scan"),
        ("SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_indexscan = on; SET enable_indexonlyscan = on", "Index"),
        ("SET enable_seqscan = off; SET enable_indexscan = off; SET enable_bitmapscan = on", "Bitmap Heap Scan"),
    ];
    let queries = [
        "SELECT count(*), sum(id) FROM t WHERE id < 3000",
        "SELECT count(id), sum(id) FROM t WHERE id BETWEEN 1000 AND 5000",
        "SELECT count(*), sum(id) FROM t WHERE k = 5",
        "SELECT count(k), sum(k) FROM t WHERE k < 10",
        "SELECT id FROM t WHERE id > 5900 ORDER BY id",
        "SELECT k FROM t WHERE k IN (1, 50, 96) ORDER BY k LIMIT 30",
    ];
    let mut s = db.session().unwrap();
    for round in 0..12 {
        run(&mut s, "BEGIN ISOLATION LEVEL REPEATABLE READ");
        for q in queries {
            let mut first: Option<Vec<Vec<Value>>> = None;
            // Twice through the methods: the table changes in between.
            for (m, scan) in methods.iter().chain(methods.iter()) {
                run(&mut s, m);
                let shown = plan(&mut s, q).join("\n");
                assert!(shown.contains(scan), "{q} with {m}:\n{shown}");
                let got = run(&mut s, q).pop().unwrap().rows;
                match &first {
                    None => first = Some(got),
                    Some(f) => assert_eq!(&got, f, "{method:?} round {round}: {q} with {m}"),
                }
            }
        }
        run(&mut s, "COMMIT");
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let rounds = writer.join().unwrap();
    assert!(rounds > 0);
    run(&mut s, "SELECT verify_index('t_id'), verify_index('t_k')");
}

/// A table `t (k int, v text)` of 2000 rows indexed on k and vacuumed
/// (every page all-visible), then the even k up to 200 deleted: dead to
/// every snapshot taken after, their entries still in the index.
fn table_with_deleted_rows(s: &mut Session) {
    run(s, "CREATE TABLE t (k int, v text)");
    run(
        s,
        "INSERT INTO t SELECT i, 'v' FROM generate_series(1, 2000) AS g(i)",
    );
    run(s, "CREATE INDEX t_k ON t (k)");
    run(s, "VACUUM t");
    run(s, "DELETE FROM t WHERE k <= 200 AND k % 2 = 0");
}

/// Starts `query` in a session of its own on `table_with_deleted_rows`'s
/// table, read by an index-only scan, and returns once it is parked at
/// injection point `point` (attached for one hit): the points, to
/// release it, and the thread, for its answer.
fn parked_index_only_scan<T: Send + 'static>(
    db: &std::sync::Arc<aiostore::database::Database>,
    point: &'static str,
    query: fn(&mut Session) -> T,
) -> (
    std::sync::Arc<aiostore::aio::Aio>,
    std::thread::JoinHandle<T>,
) {
    let points = std::sync::Arc::clone(db.aio());
    points
        .injections()
        .attach(point, aiostore::inject::Injection::park().times(1));
    let scanner = {
        let db = std::sync::Arc::clone(db);
        std::thread::spawn(move || {
            let mut s = db.session().unwrap();
            run(&mut s, "SET enable_seqscan = off");
            run(&mut s, "SET enable_bitmapscan = off");
            let shown = plan(&mut s, "SELECT k FROM t WHERE k <= 200").join("\n");
            assert!(shown.contains("Index Only Scan"), "{shown}");
            query(&mut s)
        })
    };
    assert!(points.injections().wait_until_parked(point));
    (points, scanner)
}

/// Entries of index `name` (`verify_index` checks them and counts them).
fn index_entries(s: &mut Session, name: &str) -> i64 {
    common::ints(s, &format!("SELECT verify_index('{name}')"))[0]
}

#[test]
fn entries_of_versions_dead_to_every_snapshot_go_and_an_old_snapshot_keeps_its_own() {
    for method in METHODS {
        let (_dir, _path, db) = new_small_pool_db(method, false);
        let mut s = db.session().unwrap();
        run(&mut s, "CREATE TABLE t (id int PRIMARY KEY, v int)");
        // An index on v makes every update of v a new entry in each
        // index (not HOT, tests/hot.rs).
        run(&mut s, "CREATE INDEX t_v ON t (v)");
        run(&mut s, "INSERT INTO t VALUES (1, 0), (2, 0)");
        common::force_index(&mut s, false);
        // An old snapshot holds back the horizon: every version the
        // updates leave may still be its to see, so every entry stays.
        let mut old = db.session().unwrap();
        common::force_index(&mut old, false);
        run(&mut old, "BEGIN ISOLATION LEVEL REPEATABLE READ");
        assert_eq!(common::ints(&mut old, "SELECT v FROM t WHERE id = 1"), [0]);
        for _ in 0..100 {
            run(&mut s, "UPDATE t SET v = v + 1 WHERE id = 1");
        }
        assert_eq!(index_entries(&mut s, "t_pkey"), 102, "{method:?}");
        assert_eq!(
            common::ints(&mut old, "SELECT v FROM t WHERE id = 1"),
            [0],
            "{method:?}: the old snapshot's version, found through the index"
        );
        run(&mut old, "COMMIT");
        // Now the first lookup finds the 100 versions dead to everyone and
        // removes their entries, and says so.
        let shown = plan(&mut s, "(ANALYZE, IO) SELECT v FROM t WHERE id = 1").join("\n");
        assert!(
            shown.contains("Index Entries Removed: 100"),
            "{method:?}: {shown}"
        );
        assert_eq!(common::ints(&mut s, "SELECT v FROM t WHERE id = 1"), [100]);
        assert_eq!(index_entries(&mut s, "t_pkey"), 2, "{method:?}");
        // With no old snapshot, each UPDATE's unique check removes the
        // entries of the versions before it: they never pile up.
        for _ in 0..100 {
            run(&mut s, "UPDATE t SET v = v + 1 WHERE id = 2");
        }
        assert!(index_entries(&mut s, "t_pkey") <= 4, "{method:?}");
        assert_eq!(common::ints(&mut s, "SELECT v FROM t WHERE id = 2"), [100]);
        // A rolled-back insert's entry goes too (its row is dead to all).
        run(&mut s, "BEGIN");
        run(&mut s, "INSERT INTO t VALUES (3, 0)");
        run(&mut s, "ROLLBACK");
        assert!(common::rows(&mut s, "SELECT v FROM t WHERE id = 3").is_empty());
        assert!(index_entries(&mut s, "t_pkey") <= 3, "{method:?}");
        run(&mut s, "VACUUM t");
        assert_eq!(index_entries(&mut s, "t_pkey"), 2, "{method:?}");
    }
}

#[test]
fn a_lookup_leaves_the_entries_of_a_leaf_an_index_only_scan_holds() {
    use aiostore::inject::INDEX_ONLY_SCAN_LEAF_PINNED;
    for method in METHODS {
        let (_dir, _path, db) = new_small_pool_db(method, false);
        let mut s = db.session().unwrap();
        table_with_deleted_rows(&mut s);
        let before = index_entries(&mut s, "t_k");
        let (points, scanner) = parked_index_only_scan(&db, INDEX_ONLY_SCAN_LEAF_PINNED, |s| {
            common::ints(s, "SELECT count(k) FROM t WHERE k <= 200")
        });
        // The deleted rows are dead to everyone, but the parked scan pins
        // the leaf their entries are on: removing them could let vacuum
        // free their line pointers and mark their pages all-visible
        // before the scan looks them up in the map (as for VACUUM itself).
        common::force_index(&mut s, false);
        assert_eq!(
            common::ints(&mut s, "SELECT count(v) FROM t WHERE k <= 200"),
            [100]
        );
        assert_eq!(index_entries(&mut s, "t_k"), before, "{method:?}");
        points.injections().release(INDEX_ONLY_SCAN_LEAF_PINNED);
        assert_eq!(scanner.join().unwrap(), vec![100]);
        // Let go, the leaf's dead entries go with the next lookup.
        assert_eq!(
            common::ints(&mut s, "SELECT count(v) FROM t WHERE k <= 200"),
            [100]
        );
        assert_eq!(index_entries(&mut s, "t_k"), before - 100, "{method:?}");
    }
}
