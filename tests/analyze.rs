//! ANALYZE and the statistics the planner estimates from: what it learns
//! of a column (checked where the whole table is sampled, so the figures
//! are exact), plan choices that change once a table is analysed (a
//! skewed column, a table loaded out of order), statistics kept across a
//! restart and dropped with their table, a damaged statistics file, and
//! the refusals. Every I/O method reads the sample.

mod common;

use aiostore::config::IoMethod;
use aiostore::database::{Database, Session};
use aiostore::types::Value;
use common::{err, new_small_pool_db, run, small_pool_settings};

const METHODS: [IoMethod; 3] = [IoMethod::Sync, IoMethod::Worker, IoMethod::IoUring];

/// EXPLAIN's lines for `sql`, joined.
fn plan(s: &mut Session, sql: &str) -> String {
    run(s, &format!("EXPLAIN (COSTS OFF) {sql}"))
        .pop()
        .unwrap()
        .rows
        .into_iter()
        .map(|r| match &r[0] {
            Value::Text(t) => t.clone(),
            other => panic!("a plan line, not {other:?}"),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn scan_kind(s: &mut Session, sql: &str) -> String {
    let p = plan(s, sql);
    let line = p
        .lines()
        .find(|l| l.contains("Scan") && !l.contains("Bitmap Index Scan"))
        .unwrap_or_else(|| panic!("{p}"));
    let line = line.trim().trim_start_matches("->").trim();
    let end = line.find(" using ").or_else(|| line.find(" on ")).unwrap();
    line[..end].to_string()
}

/// Whether `sql` reads its table through an index: an index scan,
/// index-only or not, or a bitmap heap scan.
fn is_index_scan(s: &mut Session, sql: &str) -> bool {
    scan_kind(s, sql) != "Seq Scan"
}

/// The `stats` row of `table`.`column`: null_frac, n_distinct,
/// most_common_vals, histogram_bounds, correlation.
fn column_stats(s: &mut Session, table: &str, column: &str) -> Vec<Value> {
    let mut rows = run(
        s,
        &format!(
            "SELECT null_frac, n_distinct, most_common_vals, histogram_bounds, correlation \
             FROM stats WHERE tablename = '{table}' AND attname = '{column}'"
        ),
    )
    .pop()
    .unwrap()
    .rows;
    assert_eq!(rows.len(), 1, "{table}.{column}");
    rows.pop().unwrap()
}

fn double(v: &Value) -> f64 {
    match v {
        Value::Double(x) => *x,
        other => panic!("not a double: {other:?}"),
    }
}

#[test]
fn analyze_learns_nulls_distinct_values_common_values_histogram_and_correlation() {
    for method in METHODS {
        let (_dir, _path, db) = new_small_pool_db(method, method == IoMethod::IoUring);
        let mut s = db.session().unwrap();
        run(&mut s, "CREATE TABLE t (id int, few int, maybe text)");
        // 5 000 rows on fewer pages than the sample: all are read, so the
        // statistics are exact.
        run(
            &mut s,
            "INSERT INTO t SELECT i, i % 4, 'v' || i FROM generate_series(1, 5000) AS g(i)",
        );
        run(&mut s, "UPDATE t SET maybe = NULL WHERE id % 10 = 0");
        run(&mut s, "VACUUM t");
        let results = run(&mut s, "ANALYZE t");
        let r = results.last().unwrap();
        assert_eq!(r.tag, "ANALYZE");
        assert!(
            r.notices[0].contains("5000 live rows; 5000 rows in sample, 5000 estimated total rows"),
            "{method:?}: {:?}",
            r.notices
        );
        let id = column_stats(&mut s, "t", "id");
        assert_eq!(double(&id[0]), 0.0);
        assert_eq!(double(&id[1]), -1.0, "unique");
        assert_eq!(id[2], Value::Null, "no common values");
        match &id[3] {
            Value::Text(h) => assert!(h.starts_with("{1,") && h.ends_with(",5000}"), "{h}"),
            other => panic!("{other:?}"),
        }
        // Loaded in order, but the UPDATE moved a tenth of the rows.
        let c = double(&id[4]);
        assert!(c > 0.8 && c < 1.0, "{c}");
        let few = column_stats(&mut s, "t", "few");
        assert_eq!(double(&few[1]), 4.0);
        assert_eq!(few[2], Value::Text("{0,1,2,3}".into()));
        assert_eq!(few[3], Value::Null, "every value is a common one");
        let maybe = column_stats(&mut s, "t", "maybe");
        assert!((double(&maybe[0]) - 0.1).abs() < 1e-9);
        assert!(
            (double(&maybe[1]) + 0.9).abs() < 1e-9,
            "unique but for NULLs"
        );

        // Changes since count towards staleness.
        run(&mut s, "UPDATE t SET few = 0 WHERE id <= 600");
        let tables = run(
            &mut s,
            "SELECT rows, n_mod_since_analyze, stale FROM stat_tables WHERE relname = 't'",
        )
        .pop()
        .unwrap()
        .rows;
        assert_eq!(
            tables,
            vec![vec![
                Value::Double(5000.0),
                Value::BigInt(600),
                Value::Boolean(true)
            ]]
        );
        run(&mut s, "VACUUM ANALYZE t");
        let few = column_stats(&mut s, "t", "few");
        assert_eq!(few[2], Value::Text("{0,1,2,3}".into()), "most common first");
    }
}

#[test]
fn a_skewed_column_is_read_by_index_only_for_its_rare_values_once_analysed() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Worker, false);
    let mut s = db.session().unwrap();
    run(&mut s, "CREATE TABLE t (id int, flag int, pad text)");
    // 95 % of the rows have flag 0, the rest a value of their own.
    run(
        &mut s,
        "INSERT INTO t SELECT i, 0, repeat('x', 40) FROM generate_series(1, 40000) AS g(i)",
    );
    run(&mut s, "UPDATE t SET flag = id WHERE id % 20 = 0");
    run(&mut s, "VACUUM t");
    run(&mut s, "CREATE INDEX t_flag ON t (flag)");
    // Never analysed: an equality is taken to pick 0.5 % of the rows.
    assert!(is_index_scan(
        &mut s,
        "SELECT count(*) FROM t WHERE flag = 0"
    ));
    run(&mut s, "ANALYZE t");
    assert!(!is_index_scan(
        &mut s,
        "SELECT count(*) FROM t WHERE flag = 0"
    ));
    assert!(is_index_scan(
        &mut s,
        "SELECT count(*) FROM t WHERE flag = 40"
    ));
    assert!(!is_index_scan(
        &mut s,
        "SELECT count(*) FROM t WHERE flag < 100"
    ));
    assert!(is_index_scan(
        &mut s,
        "SELECT count(*) FROM t WHERE flag > 39000"
    ));
    // Same rows either way.
    for q in [
        "SELECT count(*) FROM t WHERE flag = 0",
        "SELECT count(*) FROM t WHERE flag = 40",
        "SELECT count(*) FROM t WHERE flag > 39000",
    ] {
        let chosen = run(&mut s, q).pop().unwrap().rows;
        run(&mut s, "SET enable_indexscan = off");
        let seq = run(&mut s, q).pop().unwrap().rows;
        run(&mut s, "SET enable_indexscan = on");
        assert_eq!(chosen, seq, "{q}");
    }
}

#[test]
fn correlation_decides_whether_a_range_is_read_through_the_index() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Sync, false);
    let mut s = db.session().unwrap();
    // Two tables of the same rows: one loaded in id order, one in an
    // order unrelated to id.
    run(&mut s, "CREATE TABLE ordered (id int, pad text)");
    run(&mut s, "CREATE TABLE shuffled (id int, pad text)");
    run(
        &mut s,
        "INSERT INTO ordered SELECT i, repeat('x', 60) FROM generate_series(1, 30000) AS g(i)",
    );
    run(
        &mut s,
        "INSERT INTO shuffled SELECT (i * 7919) % 30000, repeat('x', 60) \
         FROM generate_series(1, 30000) AS g(i)",
    );
    run(&mut s, "CREATE INDEX ordered_id ON ordered (id)");
    run(&mut s, "CREATE INDEX shuffled_id ON shuffled (id)");
    run(&mut s, "ANALYZE");
    let corr = |s: &mut Session, t: &str| double(&column_stats(s, t, "id")[4]);
    assert!(corr(&mut s, "ordered") > 0.99);
    assert!(corr(&mut s, "shuffled").abs() < 0.1);
    // A tenth of the table: a run of pages in one, pages everywhere in
    // the other.
    // (count(*) reads no column: the index's keys are enough.)
    assert_eq!(
        scan_kind(&mut s, "SELECT count(*) FROM ordered WHERE id < 3000"),
        "Index Only Scan"
    );
    assert_eq!(
        scan_kind(&mut s, "SELECT pad FROM ordered WHERE id < 3000"),
        "Index Scan"
    );
    // Pages everywhere are read once each, in order, by a bitmap scan.
    assert_eq!(
        scan_kind(&mut s, "SELECT pad FROM shuffled WHERE id < 3000"),
        "Bitmap Heap Scan"
    );
    assert_eq!(
        scan_kind(&mut s, "SELECT pad FROM shuffled WHERE id < 15000"),
        "Seq Scan"
    );
    // A handful of rows is worth the index either way.
    assert!(is_index_scan(
        &mut s,
        "SELECT count(*) FROM shuffled WHERE id < 20"
    ));
    // Cheaper random reads make the index worth it sooner.
    run(&mut s, "SET random_page_cost = 1.1");
    assert!(is_index_scan(
        &mut s,
        "SELECT count(*) FROM shuffled WHERE id < 300"
    ));
    assert!(err(&mut s, "SET random_page_cost = -1").contains("expected a number from 0"));
}

#[test]
fn statistics_survive_a_restart_and_go_with_their_table() {
    let (_dir, path, db) = new_small_pool_db(IoMethod::IoUring, false);
    let mut s = db.session().unwrap();
    run(&mut s, "CREATE TABLE t (a int)");
    run(&mut s, "CREATE TABLE u (b text)");
    run(
        &mut s,
        "INSERT INTO t SELECT i % 3 FROM generate_series(1, 300) AS g(i)",
    );
    run(&mut s, "INSERT INTO u VALUES ('x'), ('y'), ('x')");
    run(&mut s, "ANALYZE");
    let before = column_stats(&mut s, "t", "a");
    drop(s);
    drop(db);
    let settings = small_pool_settings(IoMethod::IoUring, false);
    let db = Database::open(&path, &settings).unwrap();
    let mut s = db.session().unwrap();
    assert_eq!(column_stats(&mut s, "t", "a"), before);
    assert_eq!(column_stats(&mut s, "u", "b")[2], Value::Text("{x}".into()));
    run(&mut s, "DROP TABLE u");
    run(&mut s, "CREATE TABLE u (b int)");
    let count = |s: &mut Session| run(s, "SELECT count(*) FROM stats").pop().unwrap().rows;
    assert_eq!(
        count(&mut s),
        vec![vec![Value::BigInt(1)]],
        "u's went with it"
    );
    drop(s);
    drop(db);
    // A damaged file is set aside: the tables plan as never analysed.
    let file = path.join("statistics");
    let mut bytes = std::fs::read(&file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&file, bytes).unwrap();
    let db = Database::open(&path, &settings).unwrap();
    let mut s = db.session().unwrap();
    assert_eq!(count(&mut s), vec![vec![Value::BigInt(0)]]);
    run(&mut s, "ANALYZE t");
    assert_eq!(column_stats(&mut s, "t", "a"), before);
}

#[test]
fn analyze_in_a_transaction_sees_its_rows_and_bad_forms_are_refused() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Worker, false);
    let mut s = db.session().unwrap();
    run(&mut s, "BEGIN");
    run(&mut s, "CREATE TABLE t (a int)");
    run(&mut s, "INSERT INTO t SELECT 1 FROM generate_series(1, 10)");
    run(&mut s, "ANALYZE t");
    run(&mut s, "COMMIT");
    assert_eq!(column_stats(&mut s, "t", "a")[2], Value::Text("{1}".into()));
    assert!(err(&mut s, "ANALYZE nosuch").contains("\"nosuch\" does not exist"));
    assert!(err(&mut s, "ANALYZE t (a)").contains("ANALYZE or ANALYZE table"));
    assert!(err(&mut s, "VACUUM ANALYZE nosuch").contains("\"nosuch\" does not exist"));
    run(&mut s, "BEGIN");
    assert!(err(&mut s, "VACUUM ANALYZE t").contains("VACUUM"));
    run(&mut s, "ROLLBACK");
}
