//! Index scans and bitmap index scans that read B-tree leaf pages ahead
//! (issue 12: "leaf pages themselves are read ahead too when the scan
//! moves fast across them"): cold forward, backward and index-only range
//! scans over hundreds of leaves return a sequential scan's rows and read
//! leaves ahead, point lookups and short ranges none; leaves split under
//! a scan holding some read ahead; `IN` lists with many descents; bitmap
//! scans. Every I/O method, a small pool, direct I/O.

mod common;

use std::sync::Arc;

use aiostore::config::IoMethod;
use aiostore::database::{Database, Session};
use aiostore::inject::{Injection, BTREE_SCAN_READING_AHEAD};
use aiostore::types::Value;
use common::{
    explain_lines, force_bitmap, force_index, force_seq, rows, run, sorted_rows, temp_dir, Rng,
};

const METHODS: [IoMethod; 3] = [IoMethod::Sync, IoMethod::Worker, IoMethod::IoUring];

/// Rows of the test table. With 150-byte keys a leaf holds about 48
/// entries, so each index has about 310 leaves (and `g`'s 25 values
/// about 12 each); table and indexes are twice the 4 MiB pool.
const ROWS: i64 = 15_000;
/// Distinct values of `g`.
const G_VALUES: i64 = 25;

/// A database with a 4 MiB pool (64 pins a session) and data read with
/// direct I/O, so that leaves come from the disk.
fn settings(method: IoMethod) -> Vec<String> {
    vec![
        format!("io_method={}", method.name()),
        "shared_buffers=512".into(),
        "max_sessions=8".into(),
        "io_direct=data".into(),
    ]
}

fn open(method: IoMethod) -> (tempfile::TempDir, Arc<Database>) {
    let dir = temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    (dir, Database::open(&path, &settings(method)).unwrap())
}

/// `db` closed and opened again: a pool that holds none of its pages.
fn reopened_cold(db: Arc<Database>, method: IoMethod) -> Arc<Database> {
    let path = db.dir().to_path_buf();
    drop(db);
    Database::open(&path, &settings(method)).unwrap()
}

/// `t(a, g, b)`: `a` from 1 to ROWS, `g` = a % G_VALUES, `b` a 150-byte
/// filler; indexes on `(a, b)` and `(g, b)`, whose wide keys give them
/// many leaves.
fn load(s: &mut Session) {
    run(s, "CREATE TABLE t (a int, g int, b text)");
    run(
        s,
        &format!(
            "INSERT INTO t SELECT i, i % {G_VALUES}, repeat('b', 150) \
             FROM generate_series(1, {ROWS}) AS s(i)"
        ),
    );
    run(s, "CREATE INDEX t_a_b ON t (a, b)");
    run(s, "CREATE INDEX t_g_b ON t (g, b)");
    run(s, "VACUUM ANALYZE t");
}

fn figure(line: &str, name: &str) -> Option<u64> {
    let at = line.find(name)? + name.len();
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The scan node's leaf figures from EXPLAIN (ANALYZE, IO) of `sql`:
/// (leaf pages, leaf pages read ahead), from an index scan's `Heap:` line
/// or a bitmap index scan's `Index:` line, and the plan.
fn leaf_figures(s: &mut Session, sql: &str) -> (u64, u64, Vec<String>) {
    let lines = explain_lines(s, &format!("(ANALYZE, IO) {sql}"));
    let line = lines
        .iter()
        .find(|l| l.contains("leaf pages="))
        .unwrap_or_else(|| panic!("no leaf pages in {lines:?}"));
    let leaves = figure(line, "leaf pages=").unwrap();
    let ahead = figure(line, "read ahead=").unwrap_or(0);
    (leaves, ahead, lines)
}

/// `rows` sorted as `ORDER BY a DESC` would return them.
fn by_a_descending(mut rows: Vec<Vec<Value>>) -> Vec<Vec<Value>> {
    rows.sort_by_key(|r| match r[0] {
        Value::Integer(a) => std::cmp::Reverse(a),
        ref v => panic!("a is an integer, not {v:?}"),
    });
    rows
}

#[test]
fn cold_range_scans_read_leaves_ahead_and_return_the_sequential_scans_rows() {
    let range = "a BETWEEN 1000 AND 12000";
    for method in METHODS {
        let (_dir, db) = open(method);
        let mut s = db.session().unwrap();
        load(&mut s);
        force_seq(&mut s);
        let expected = sorted_rows(&mut s, &format!("SELECT a, g FROM t WHERE {range}"));
        let expected_keys = sorted_rows(&mut s, &format!("SELECT a FROM t WHERE {range}"));
        drop(s);
        let db = reopened_cold(db, method);
        let mut s = db.session().unwrap();
        for (only, columns, want) in [(false, "a, g", &expected), (true, "a", &expected_keys)] {
            force_index(&mut s, only);
            let node = if only {
                "Index Only Scan"
            } else {
                "Index Scan"
            };
            let forward = format!("SELECT {columns} FROM t WHERE {range}");
            assert_eq!(&sorted_rows(&mut s, &forward), want, "{method:?} {forward}");
            let backward = format!("{forward} ORDER BY a DESC");
            assert_eq!(
                rows(&mut s, &backward),
                by_a_descending(want.clone()),
                "{method:?} {backward}"
            );
            for (sql, direction) in [(&forward, ""), (&backward, " Backward")] {
                let (leaves, ahead, plan) = leaf_figures(&mut s, sql);
                assert!(
                    plan[0].contains(&format!("{node}{direction} using t_a_b")),
                    "{plan:?}"
                );
                assert!(leaves >= 200, "{method:?} {sql}: {plan:?}");
                // All but the first few: a range reads two leaves itself.
                assert!(ahead + 3 >= leaves, "{method:?} {sql}: {plan:?}");
            }
        }
        // A point lookup and a range within two leaves read none ahead.
        force_index(&mut s, false);
        for sql in [
            "SELECT a, g FROM t WHERE a = 5000",
            "SELECT a, g FROM t WHERE a = 5000 ORDER BY a DESC",
            "SELECT a, g FROM t WHERE a BETWEEN 5000 AND 5030",
        ] {
            let (leaves, ahead, plan) = leaf_figures(&mut s, sql);
            assert!(leaves <= 2, "{method:?} {sql}: {plan:?}");
            assert_eq!(ahead, 0, "{method:?} {sql}: {plan:?}");
        }
        assert_eq!(s.buf.pinned_count(), 0, "{method:?}");
    }
}

#[test]
fn a_scan_reading_leaves_ahead_returns_its_snapshots_rows_when_those_leaves_split() {
    let range = "a BETWEEN 1000 AND 6000";
    for method in METHODS {
        for (sql, ordered) in [
            (format!("SELECT a, g, b FROM t WHERE {range}"), false),
            (
                format!("SELECT a, g, b FROM t WHERE {range} ORDER BY a DESC"),
                true,
            ),
        ] {
            // The leaves as built, so that the rows below split those
            // the scan reads ahead, whichever way it goes.
            let (_dir, db) = open(method);
            let mut s = db.session().unwrap();
            load(&mut s);
            force_seq(&mut s);
            let expected = sorted_rows(&mut s, &sql);
            let expected = if ordered {
                by_a_descending(expected)
            } else {
                expected
            };
            let points = Arc::clone(db.aio());
            points
                .injections()
                .attach(BTREE_SCAN_READING_AHEAD, Injection::park().times(1));
            let scanner = {
                let db = Arc::clone(&db);
                let sql = sql.clone();
                std::thread::spawn(move || {
                    let mut s = db.session().unwrap();
                    force_index(&mut s, false);
                    let got = if ordered {
                        rows(&mut s, &sql)
                    } else {
                        sorted_rows(&mut s, &sql)
                    };
                    assert_eq!(s.buf.pinned_count(), 0);
                    got
                })
            };
            assert!(
                points
                    .injections()
                    .wait_until_parked(BTREE_SCAN_READING_AHEAD),
                "{method:?} {sql}: the scan never read a leaf ahead"
            );
            // The scan took a leaf from its stream and holds more read
            // ahead as their parent named them. Rows committed now (after
            // its snapshot) go to every leaf of the range, beside the old
            // rows of their key, and split them all several times.
            for _ in 0..2 {
                run(
                    &mut s,
                    "INSERT INTO t SELECT i, i % 25, repeat('c', 150) \
                     FROM generate_series(1000, 6000) AS s(i)",
                );
            }
            points.injections().release(BTREE_SCAN_READING_AHEAD);
            let got = scanner.join().unwrap();
            assert_eq!(got.len(), expected.len(), "{method:?} {sql}");
            assert_eq!(got, expected, "{method:?} {sql}");
            run(&mut s, "SELECT verify_index('t_a_b')");
        }
    }
}

#[test]
fn in_lists_spread_across_the_index_return_the_sequential_scans_rows() {
    for method in METHODS {
        let (_dir, db) = open(method);
        let mut s = db.session().unwrap();
        load(&mut s);
        let mut rng = Rng(0x1eaf ^ method as u64);
        let spread: Vec<String> = (0..200)
            .map(|_| (1 + rng.below(ROWS as u64 + 50)).to_string())
            .collect();
        let spread = spread.join(", ");
        // (query, reads leaves ahead): the `g` values each span a dozen
        // leaves, 2 and 3 and 23 and 24 starting where the one before ended.
        let queries = [
            (format!("SELECT a, g FROM t WHERE a IN ({spread})"), false),
            (
                "SELECT a, g FROM t WHERE g IN (2, 3, 9, 17, 23, 24)".to_string(),
                true,
            ),
            (
                "SELECT a, g FROM t WHERE g IN (2, 3, 9, 17, 23, 24) ORDER BY g DESC".to_string(),
                true,
            ),
            (
                format!("SELECT a, g FROM t WHERE a IN ({spread}) ORDER BY a DESC"),
                false,
            ),
        ];
        for (sql, wide) in &queries {
            force_seq(&mut s);
            let expected = sorted_rows(&mut s, sql);
            force_index(&mut s, false);
            assert_eq!(&sorted_rows(&mut s, sql), &expected, "{method:?} {sql}");
            let (_, ahead, plan) = leaf_figures(&mut s, sql);
            assert!(plan[0].contains("Index Scan"), "{sql}: {plan:?}");
            if *wide {
                assert!(ahead > 0, "{method:?} {sql}: {plan:?}");
            } else {
                assert_eq!(ahead, 0, "{method:?} {sql}: {plan:?}");
            }
        }
        assert_eq!(s.buf.pinned_count(), 0, "{method:?}");
    }
}

#[test]
fn bitmap_scans_reading_leaves_ahead_return_the_sequential_scans_rows() {
    let queries = [
        "SELECT a, g FROM t WHERE a BETWEEN 1000 AND 12000",
        "SELECT a, g FROM t WHERE g IN (2, 3, 9, 17)",
        "SELECT a, g FROM t WHERE a BETWEEN 3000 AND 9000 OR g = 4",
        "SELECT a, g FROM t WHERE a BETWEEN 3000 AND 9000 AND g IN (4, 5)",
    ];
    for method in METHODS {
        let (_dir, db) = open(method);
        let mut s = db.session().unwrap();
        load(&mut s);
        force_seq(&mut s);
        let expected: Vec<_> = queries.iter().map(|q| sorted_rows(&mut s, q)).collect();
        drop(s);
        let db = reopened_cold(db, method);
        let mut s = db.session().unwrap();
        force_bitmap(&mut s);
        for (sql, want) in queries.iter().zip(&expected) {
            assert_eq!(&sorted_rows(&mut s, sql), want, "{method:?} {sql}");
        }
        let (leaves, ahead, plan) = leaf_figures(&mut s, queries[0]);
        assert!(plan[0].contains("Bitmap Heap Scan"), "{plan:?}");
        assert!(leaves >= 200, "{method:?}: {plan:?}");
        assert!(ahead + 3 >= leaves, "{method:?}: {plan:?}");
        let (_, ahead, plan) = leaf_figures(&mut s, queries[1]);
        assert!(ahead > 0, "{method:?}: {plan:?}");
        assert_eq!(s.buf.pinned_count(), 0, "{method:?}");
    }
}
