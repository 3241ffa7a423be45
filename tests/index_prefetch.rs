//! Index scans that read the table's pages ahead through a read stream
//! (issue 12): the same rows as a sequential scan with prefetching on and
//! off, for every I/O method, forward and backward, `IN` lists and
//! multi-column keys, index-only scans with the visibility map partly
//! cleared, while other sessions update and vacuum, and with batches held
//! ahead while vacuum frees their tuples; the reference thread's parity
//! case; no stream for single-row lookups; LIMIT reads little beyond.

mod common;

use aiostore::config::IoMethod;
use aiostore::database::{Database, Session};
use aiostore::inject::{Injection, INDEX_SCAN_LOADED_AHEAD};
use aiostore::types::Value;
use common::{explain_lines, force_seq, rows, run, sorted_rows, temp_dir, Rng};
use std::sync::Arc;

const METHODS: [IoMethod; 3] = [IoMethod::Sync, IoMethod::Worker, IoMethod::IoUring];

/// Rows of the test table: with fillfactor 20 about 15 a page, so the
/// table (about 1 300 pages) is twice the 4 MiB pool and scans read.
const ROWS: i64 = 20_000;
/// Distinct values of `a`: about 10 rows each, on different pages.
const A_VALUES: u64 = 2_000;

/// A database with a 4 MiB pool and data read with direct I/O, so that
/// pages come from the disk and the stream's reads are real.
fn open(method: IoMethod) -> (tempfile::TempDir, Arc<Database>) {
    let dir = temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    let settings = [
        format!("io_method={}", method.name()),
        "shared_buffers=512".into(),
        "max_sessions=8".into(),
        "io_direct=data".into(),
    ];
    (dir, Database::open(&path, &settings).unwrap())
}

/// `t(a, b, c)`: `a` random in [0, A_VALUES) with a NULL in about one row
/// in 100, `b` random in [0, 50), `c` 40 bytes of filler; indexes on `a`
/// and on `(b, a DESC)`.
fn load(s: &mut Session, seed: u64) {
    run(
        s,
        "CREATE TABLE t (a int, b int, c text) WITH (fillfactor = 20)",
    );
    let mut rng = Rng(seed);
    let mut values = Vec::new();
    for i in 0..ROWS {
        let a = rng.key(A_VALUES, 100);
        values.push(format!(
            "({a}, {}, repeat('{}', 40))",
            rng.below(50),
            i % 10
        ));
        if values.len() == 1_000 {
            run(s, &format!("INSERT INTO t VALUES {}", values.join(", ")));
            values.clear();
        }
    }
    run(s, "CREATE INDEX t_a ON t (a)");
    run(s, "CREATE INDEX t_b_a ON t (b, a DESC)");
    run(s, "VACUUM ANALYZE t");
}

/// A random query the index on `a` or on `(b, a)` answers: ranges,
/// equalities, `IN` lists, both directions, with and without LIMIT.
/// The second part says whether its order is fixed (ORDER BY): then the
/// rows are compared in order on the ordered column.
fn random_query(rng: &mut Rng) -> (String, Option<usize>) {
    let lo = rng.below(A_VALUES);
    let width = [1, 10, 100, 1_000][rng.below(4) as usize];
    let hi = lo + width;
    let limit = [5, 100, 2_000][rng.below(3) as usize];
    match rng.below(7) {
        0 => (format!("SELECT a, b, c FROM t WHERE a BETWEEN {lo} AND {hi}"), None),
        1 => (format!("SELECT a, b, c FROM t WHERE a = {lo}"), None),
        2 => {
            let list: Vec<String> = (0..1 + rng.below(30))
                .map(|_| rng.below(A_VALUES + 10).to_string())
                .collect();
            (
                format!("SELECT a, b, c FROM t WHERE a IN ({}, NULL)", list.join(", ")),
                None,
            )
        }
        3 => (
            format!("SELECT a, b, c FROM t WHERE a >= {lo} ORDER BY a LIMIT {limit}"),
            Some(0),
        ),
        4 => (
            format!("SELECT a, b, c FROM t WHERE a <= {hi} ORDER BY a DESC LIMIT {limit}"),
            Some(0),
        ),
        5 => (
            format!(
                "SELECT a, b, c FROM t WHERE b = {} AND a < {hi}",
                rng.below(50)
            ),
            None,
        ),
        _ => (
            format!(
                "SELECT a, b, c FROM t WHERE b IN ({}, {}) AND a BETWEEN {lo} AND {hi} ORDER BY b, a DESC",
                rng.below(50),
                rng.below(50)
            ),
            Some(1),
        ),
    }
}

/// Reads with a plain index scan only (or index-only where `only`),
/// prefetching or not.
fn force_index(s: &mut Session, prefetch: bool, only: bool) {
    common::force_index(s, only);
    run(
        s,
        &format!(
            "SET enable_indexscan_prefetch = {}",
            if prefetch { "on" } else { "off" }
        ),
    );
}

/// `got` answers `sql` as `expected` (every row the query may return, in
/// the sequential scan's answer without the LIMIT where it has one) does:
/// an unordered query the same rows; an ordered one the same values of
/// its order column in the same order, each row one of the expected.
fn check_same(
    sql: &str,
    ordered_on: Option<usize>,
    got: &[Vec<Value>],
    expected: &[Vec<Value>],
    what: &str,
) {
    let key = |r: &Vec<Value>| format!("{r:?}");
    match ordered_on {
        None => {
            let mut g: Vec<String> = got.iter().map(key).collect();
            let mut e: Vec<String> = expected.iter().map(key).collect();
            g.sort();
            e.sort();
            assert_eq!(g, e, "{what}: {sql}");
        }
        Some(_) => {
            // The expected rows are the sequential scan's in the query's
            // order: the returned rows' order columns must be its first
            // ones, and each row one the scan may return.
            let column = |r: &Vec<Value>| format!("{:?}/{:?}", r[0], r[1]);
            let want: Vec<String> = expected.iter().take(got.len()).map(column).collect();
            let have: Vec<String> = got.iter().map(column).collect();
            if sql.contains("ORDER BY b") {
                assert_eq!(have, want, "{what}: {sql}");
            } else {
                let a = |r: &Vec<Value>| format!("{:?}", r[0]);
                let want: Vec<String> = expected.iter().take(got.len()).map(a).collect();
                let have: Vec<String> = got.iter().map(a).collect();
                assert_eq!(have, want, "{what}: {sql}");
            }
            let all: std::collections::HashSet<String> = expected.iter().map(key).collect();
            assert!(got.iter().all(|r| all.contains(&key(r))), "{what}: {sql}");
        }
    }
}

/// The query without its LIMIT (every row the limited query may return,
/// in order).
fn without_limit(sql: &str) -> String {
    match sql.find(" LIMIT ") {
        Some(at) => sql[..at].to_string(),
        None => sql.to_string(),
    }
}

/// The `Heap:` and `Prefetch:` figures of the plan's index scan:
/// (pages read from disk, streams started).
fn heap_figures(s: &mut Session, sql: &str) -> (u64, u64) {
    let lines = explain_lines(s, &format!("(ANALYZE, BUFFERS, IO) {sql}"));
    let heap = lines
        .iter()
        .find(|l| l.trim_start().starts_with("Heap: "))
        .unwrap_or_else(|| panic!("no Heap line: {lines:?}"));
    let read = figure(heap, "read=");
    let streams = lines
        .iter()
        .find(|l| l.trim_start().starts_with("Prefetch: "))
        .map_or(0, |l| figure(l, "streams="));
    (read, streams)
}

fn figure(line: &str, name: &str) -> u64 {
    let at = line
        .find(name)
        .unwrap_or_else(|| panic!("{name} in {line}"))
        + name.len();
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn prefetching_index_scans_return_the_sequential_scans_rows_for_random_queries() {
    for (round, method) in METHODS.into_iter().enumerate() {
        let (_dir, db) = open(method);
        let mut s = db.session().unwrap();
        load(&mut s, 0x5eed + round as u64);
        // Some rows changed and some gone, the map partly cleared.
        run(&mut s, "UPDATE t SET b = b + 1 WHERE a % 13 = 0");
        run(&mut s, "DELETE FROM t WHERE a % 17 = 0");
        let mut rng = Rng(0xfeed_0000 + round as u64);
        for q in 0..40 {
            let (sql, ordered_on) = random_query(&mut rng);
            force_seq(&mut s);
            let expected = rows(&mut s, &without_limit(&sql));
            let mut without_prefetch = None;
            for prefetch in [false, true] {
                force_index(&mut s, prefetch, false);
                let plan = explain_lines(&mut s, &sql);
                assert!(
                    plan.iter().any(|l| l.contains("Index Scan")),
                    "{sql}: {plan:?}"
                );
                let got = rows(&mut s, &sql);
                check_same(
                    &sql,
                    ordered_on,
                    &got,
                    &expected,
                    &format!("{method:?} query {q} prefetch {prefetch}"),
                );
                // The same index read the same way: the same rows in the
                // same order, ties included.
                match &without_prefetch {
                    None => without_prefetch = Some(got),
                    Some(off) => assert_eq!(&got, off, "{method:?} query {q}: {sql}"),
                }
            }
        }
        // A wide range reads through the stream, and only with
        // prefetching on.
        let wide = "SELECT a, b, c FROM t WHERE a BETWEEN 100 AND 400";
        force_index(&mut s, true, false);
        let (read, streams) = heap_figures(&mut s, wide);
        assert_eq!(streams, 1, "{method:?}");
        assert!(read > 0, "{method:?}: the table is twice the pool");
        force_index(&mut s, false, false);
        assert_eq!(heap_figures(&mut s, wide).1, 0, "{method:?}");
        run(&mut s, "SELECT verify_index('t_a')");
    }
}

#[test]
fn index_only_scans_with_the_visibility_map_partly_cleared_return_the_sequential_scans_rows() {
    for method in METHODS {
        let (_dir, db) = open(method);
        let mut s = db.session().unwrap();
        load(&mut s, 7);
        // Every page all-visible, then some cleared by changes.
        run(&mut s, "UPDATE t SET b = b WHERE a % 97 = 3");
        let mut rng = Rng(99);
        for _ in 0..15 {
            let lo = rng.below(A_VALUES);
            let hi = lo + [10, 300][rng.below(2) as usize];
            for (sql, ordered) in [
                (
                    format!("SELECT a FROM t WHERE a BETWEEN {lo} AND {hi}"),
                    false,
                ),
                (
                    format!("SELECT a FROM t WHERE a <= {hi} ORDER BY a DESC LIMIT 500"),
                    true,
                ),
            ] {
                force_seq(&mut s);
                let mut expected = rows(&mut s, &without_limit(&sql));
                for prefetch in [false, true] {
                    force_index(&mut s, prefetch, true);
                    let plan = explain_lines(&mut s, &sql);
                    assert!(
                        plan.iter().any(|l| l.contains("Index Only Scan")),
                        "{sql}: {plan:?}"
                    );
                    let mut got = rows(&mut s, &sql);
                    if ordered {
                        expected.sort_by_key(|r| std::cmp::Reverse(int(&r[0])));
                        expected.truncate(got.len());
                        assert_eq!(
                            got.iter().map(|r| int(&r[0])).collect::<Vec<_>>(),
                            expected.iter().map(|r| int(&r[0])).collect::<Vec<_>>(),
                            "{method:?} {sql}"
                        );
                    } else {
                        got.sort_by_key(|r| int(&r[0]));
                        expected.sort_by_key(|r| int(&r[0]));
                        assert_eq!(got, expected, "{method:?} {sql}");
                    }
                }
            }
        }
        // The map vouches for most pages and not for all: the scan
        // answers some rows from the index and fetches others.
        force_index(&mut s, true, true);
        let lines = explain_lines(
            &mut s,
            "(ANALYZE, IO) SELECT a FROM t WHERE a BETWEEN 0 AND 1000",
        );
        let fetches = lines
            .iter()
            .find(|l| l.trim_start().starts_with("Heap Fetches: "))
            .map(|l| figure(l, "Heap Fetches: "))
            .unwrap();
        let rows_line = lines
            .iter()
            .find(|l| l.contains("Index Only Scan"))
            .unwrap();
        let returned = figure(rows_line, "actual rows=");
        assert!(fetches > 0 && fetches < returned / 2, "{lines:?}");
    }
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Integer(i) => *i as i64,
        Value::Null => i64::MAX,
        other => panic!("an integer, not {other:?}"),
    }
}

#[test]
fn prefetching_scans_in_one_snapshot_agree_with_a_sequential_scan_while_others_update_and_vacuum() {
    for method in METHODS {
        let (_dir, db) = open(method);
        let mut s = db.session().unwrap();
        load(&mut s, 3);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let db = Arc::clone(&db);
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut w = db.session().unwrap();
                let mut rng = Rng(17);
                let mut rounds = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || rounds < 3 {
                    let lo = rng.below(A_VALUES);
                    run(
                        &mut w,
                        &format!(
                            "UPDATE t SET b = b + 1 WHERE a BETWEEN {lo} AND {}",
                            lo + 50
                        ),
                    );
                    run(
                        &mut w,
                        &format!("DELETE FROM t WHERE a = {}", rng.below(A_VALUES)),
                    );
                    run(
                        &mut w,
                        &format!(
                            "INSERT INTO t SELECT {}, i, 'new' FROM generate_series(1, 20) AS g(i)",
                            rng.below(A_VALUES)
                        ),
                    );
                    run(&mut w, "VACUUM t");
                    rounds += 1;
                }
                rounds
            })
        };
        let mut rng = Rng(4);
        for _ in 0..12 {
            let lo = rng.below(A_VALUES);
            let sql = format!(
                "SELECT a, b, c FROM t WHERE a BETWEEN {lo} AND {}",
                lo + 400
            );
            run(&mut s, "BEGIN ISOLATION LEVEL REPEATABLE READ");
            force_seq(&mut s);
            let expected = sorted_rows(&mut s, &sql);
            for prefetch in [true, false] {
                force_index(&mut s, prefetch, false);
                assert_eq!(sorted_rows(&mut s, &sql), expected, "{method:?} {sql}");
            }
            run(&mut s, "COMMIT");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(writer.join().unwrap() >= 3);
        run(&mut s, "SELECT verify_index('t_a')");
    }
}

#[test]
fn a_batch_held_ahead_while_vacuum_frees_its_tuples_and_new_rows_take_them_returns_only_the_snapshots_rows(
) {
    for method in METHODS {
        let (_dir, db) = open(method);
        let mut s = db.session().unwrap();
        // About 7 rows a page: 850 pages, twice the pool, so the scan
        // waits for reads and its stream looks ahead across leaves.
        run(
            &mut s,
            "CREATE TABLE h (k int, v text, pad text) WITH (fillfactor = 20)",
        );
        run(
            &mut s,
            "INSERT INTO h SELECT i, 'old', repeat('p', 200) FROM generate_series(1, 6000) AS g(i)",
        );
        run(&mut s, "CREATE INDEX h_k ON h (k)");
        // Dead to everyone before the scan starts, all through the range
        // (every leaf the scan reads holds some).
        run(&mut s, "DELETE FROM h WHERE k % 3 = 0");
        let points = Arc::clone(db.aio());
        points
            .injections()
            .attach(INDEX_SCAN_LOADED_AHEAD, Injection::park().times(1));
        let scanner = {
            let db = Arc::clone(&db);
            std::thread::spawn(move || {
                let mut s = db.session().unwrap();
                force_index(&mut s, true, false);
                let got = sorted_rows(&mut s, "SELECT k, v FROM h WHERE k <= 6000");
                let (_, streams) = heap_figures(&mut s, "SELECT k, v FROM h WHERE k <= 10");
                (got, streams)
            })
        };
        assert!(
            points
                .injections()
                .wait_until_parked(INDEX_SCAN_LOADED_AHEAD),
            "{method:?}: the scan never loaded a batch ahead"
        );
        // The scan holds batches (and stream pins) with TIDs of the
        // deleted rows; vacuum removes their entries and frees their line
        // pointers, and new rows, committed after the scan's snapshot,
        // take them.
        run(&mut s, "VACUUM h");
        run(
            &mut s,
            "INSERT INTO h SELECT i, 'new', 'p' FROM generate_series(1, 6000) AS g(i)",
        );
        points.injections().release(INDEX_SCAN_LOADED_AHEAD);
        let (got, _) = scanner.join().unwrap();
        let mut expected: Vec<Vec<Value>> = (1..=6000)
            .filter(|k| k % 3 != 0)
            .map(|k| vec![Value::Integer(k), Value::Text("old".into())])
            .collect();
        expected.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        assert_eq!(got, expected, "{method:?}");
        run(&mut s, "SELECT verify_index('h_k')");
    }
}

/// The reference thread's case: 250 rows on a few pages, in random order
/// of `randkey`, so an index scan's items jump between the pages. A
/// bitmap heap scan pins each page once; the index scan must not access
/// more than one heap buffer more (PostgreSQL pinned 89 where its bitmap
/// scan pinned 5).
#[test]
fn an_index_scan_accesses_no_more_heap_buffers_than_a_bitmap_scan_plus_one() {
    for method in METHODS {
        let (_dir, db) = open(method);
        let mut s = db.session().unwrap();
        run(&mut s, "CREATE TABLE parity (randkey integer, filler text)");
        run(
            &mut s,
            "INSERT INTO parity SELECT (random() * 1000)::int, repeat('filler', 10) \
             FROM generate_series(1, 250)",
        );
        run(&mut s, "CREATE INDEX parity_randkey ON parity (randkey)");
        run(&mut s, "VACUUM ANALYZE parity");
        let sql = "SELECT * FROM parity WHERE randkey < 500";
        for prefetch in [false, true] {
            force_index(&mut s, prefetch, false);
            let index = explain_lines(&mut s, &format!("(ANALYZE, BUFFERS, IO) {sql}"));
            let heap = index.iter().find(|l| l.contains("Heap: ")).unwrap();
            let index_buffers = figure(heap, "hit=") + figure(heap, "read=");
            run(&mut s, "SET enable_bitmapscan = on");
            run(&mut s, "SET enable_indexscan = off");
            let bitmap = explain_lines(&mut s, &format!("(ANALYZE, BUFFERS) {sql}"));
            assert!(bitmap[0].contains("Bitmap Heap Scan"), "{bitmap:?}");
            // The heap node's own Buffers line (the index's is indented
            // under its child).
            let line = bitmap
                .iter()
                .take_while(|l| !l.contains("Bitmap Index Scan"))
                .find(|l| l.contains("Buffers: "))
                .unwrap();
            let bitmap_buffers = line
                .split_whitespace()
                .filter_map(|w| w.split_once('='))
                .map(|(_, n)| n.parse::<u64>().unwrap())
                .sum::<u64>();
            assert!(bitmap_buffers >= 3, "{bitmap:?}");
            assert!(
                index_buffers <= bitmap_buffers + 1,
                "{method:?} prefetch {prefetch}: index scan {index:?}, bitmap {bitmap:?}"
            );
        }
    }
}

#[test]
fn a_nested_loops_inner_index_scan_sets_up_no_stream_for_single_row_lookups() {
    let (_dir, db) = open(IoMethod::Worker);
    let mut s = db.session().unwrap();
    run(&mut s, "CREATE TABLE outer_t (k int)");
    run(
        &mut s,
        "INSERT INTO outer_t SELECT i FROM generate_series(1, 10000) AS g(i)",
    );
    run(
        &mut s,
        "CREATE TABLE inner_t (k int, v text) WITH (fillfactor = 20)",
    );
    run(
        &mut s,
        "INSERT INTO inner_t SELECT i, repeat('v', 40) FROM generate_series(1, 20000) AS g(i)",
    );
    run(&mut s, "CREATE UNIQUE INDEX inner_k ON inner_t (k)");
    run(&mut s, "VACUUM ANALYZE outer_t");
    run(&mut s, "VACUUM ANALYZE inner_t");
    run(&mut s, "SET enable_hashjoin = off");
    run(&mut s, "SET enable_mergejoin = off");
    run(&mut s, "SET enable_bitmapscan = off");
    let lines = explain_lines(
        &mut s,
        "(ANALYZE, IO) SELECT count(v) FROM outer_t JOIN inner_t ON inner_t.k = outer_t.k",
    );
    let inner = lines
        .iter()
        .position(|l| l.contains("Index Scan using inner_k"))
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert!(lines[inner].contains("loops=10000"), "{lines:?}");
    assert!(
        !lines[inner..].iter().any(|l| l.contains("Prefetch:")),
        "a single-row lookup started a stream: {lines:?}"
    );
    // Lookups of many rows each start one stream, reset on every rescan.
    let lines = explain_lines(
        &mut s,
        "(ANALYZE, IO) SELECT count(v) FROM (SELECT k FROM outer_t WHERE k <= 20) o \
         JOIN inner_t ON inner_t.k BETWEEN o.k * 500 AND o.k * 500 + 400",
    );
    let inner = lines
        .iter()
        .position(|l| l.contains("Index Scan using inner_k"))
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert!(lines[inner].contains("loops=20"), "{lines:?}");
    let prefetch = lines[inner..]
        .iter()
        .find(|l| l.contains("Prefetch:"))
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert_eq!(figure(prefetch, "streams="), 1, "{lines:?}");
}

/// `ORDER BY … LIMIT n` on cold pages reads the pages of its `n` rows
/// and no others, with prefetching as without: the LIMIT bounds what the
/// scan feeds its stream, however far the stream's distance would look.
#[test]
fn order_by_limit_reads_only_the_pages_of_the_rows_it_returns() {
    for method in METHODS {
        let (_dir, db) = open(method);
        let mut s = db.session().unwrap();
        load(&mut s, 11);
        drop(s);
        let path = db.dir().to_path_buf();
        drop(db);
        for (sql, limit) in [
            ("SELECT a, c FROM t WHERE a >= 500 ORDER BY a LIMIT 10", 10),
            (
                "SELECT a, c FROM t WHERE a <= 1500 ORDER BY a DESC LIMIT 10",
                10,
            ),
            ("SELECT a, c FROM t WHERE a >= 500 ORDER BY a LIMIT 300", 300),
            (
                "SELECT a, c FROM t WHERE a <= 1500 ORDER BY a DESC LIMIT 300",
                300,
            ),
            // The OFFSET's rows are read too; a LIMIT of a LIMIT bounds
            // by the tighter.
            (
                "SELECT a, c FROM t WHERE a >= 500 ORDER BY a LIMIT 100 OFFSET 200",
                300,
            ),
            (
                "SELECT * FROM (SELECT a, c FROM t WHERE a >= 500 ORDER BY a LIMIT 1000) AS s LIMIT 300",
                300,
            ),
        ] {
            // A fresh pool each time: the scan's pages come from the disk.
            let cold = |prefetch: bool| {
                let db = Database::open(
                    &path,
                    &[
                        format!("io_method={}", method.name()),
                        "shared_buffers=512".into(),
                        "io_direct=data".into(),
                    ],
                )
                .unwrap();
                let mut s = db.session().unwrap();
                force_index(&mut s, prefetch, false);
                (heap_figures(&mut s, sql), rows(&mut s, sql))
            };
            let ((read_without, _), rows_without) = cold(false);
            let ((read, streams), rows_with) = cold(true);
            assert_eq!(rows_with, rows_without, "{method:?} {sql}");
            assert!(
                read_without > limit / 2 && read_without <= limit,
                "{method:?} {sql}: {read_without} heap pages read without prefetching"
            );
            assert_eq!(
                read, read_without,
                "{method:?} {sql}: heap pages read with prefetching and without"
            );
            assert_eq!(streams, 1, "{method:?} {sql}: streams started");
        }
    }
}

/// UPDATE and DELETE through a prefetching index scan change each row
/// once, a leaf's rows at a time, with the stream's pins beside their
/// own on a small pool.
#[test]
fn update_and_delete_through_a_prefetching_index_scan_change_each_row_once() {
    for method in METHODS {
        let (_dir, db) = open(method);
        let mut s = db.session().unwrap();
        load(&mut s, 21);
        force_seq(&mut s);
        let before = rows(
            &mut s,
            "SELECT count(*), sum(b) FROM t WHERE a BETWEEN 200 AND 900",
        );
        let deleted = rows(
            &mut s,
            "SELECT count(*) FROM t WHERE a BETWEEN 1000 AND 1300",
        );
        force_index(&mut s, true, false);
        let plan = explain_lines(
            &mut s,
            "UPDATE t SET b = b + 1000 WHERE a BETWEEN 200 AND 900",
        );
        assert!(
            plan.iter().any(|l| l.contains("Index Scan using t_a")),
            "{plan:?}"
        );
        let lines = explain_lines(
            &mut s,
            "(ANALYZE, IO) UPDATE t SET b = b + 1000 WHERE a BETWEEN 200 AND 900",
        );
        assert!(
            lines.iter().any(|l| l.contains("Prefetch: streams=1")),
            "{method:?}: {lines:?}"
        );
        run(&mut s, "DELETE FROM t WHERE a BETWEEN 1000 AND 1300");
        force_seq(&mut s);
        let after = rows(
            &mut s,
            "SELECT count(*), sum(b) FROM t WHERE a BETWEEN 200 AND 900",
        );
        let (Value::BigInt(n), Value::BigInt(sum)) = (&before[0][0], &before[0][1]) else {
            panic!("{before:?}")
        };
        assert_eq!(
            after,
            vec![vec![Value::BigInt(*n), Value::BigInt(sum + n * 1000)]],
            "{method:?}"
        );
        assert!(
            matches!(deleted[0][0], Value::BigInt(d) if d > 1000),
            "{deleted:?}"
        );
        assert_eq!(
            rows(
                &mut s,
                "SELECT count(*) FROM t WHERE a BETWEEN 1000 AND 1300"
            ),
            vec![vec![Value::BigInt(0)]]
        );
        run(&mut s, "SELECT verify_index('t_a')");
        run(&mut s, "SELECT verify_index('t_b_a')");
    }
}

/// A scan closed by a LIMIT (or a subquery) and run again keeps its
/// stream: a correlated subquery run for many outer rows sets up one.
#[test]
fn a_subquery_scan_run_for_many_outer_rows_sets_up_one_stream() {
    let (_dir, db) = open(IoMethod::Worker);
    let mut s = db.session().unwrap();
    load(&mut s, 5);
    force_index(&mut s, true, false);
    let sql = "SELECT o.a, (SELECT sum(b) FROM (SELECT b FROM t WHERE t.a >= o.a * 40 \
               ORDER BY t.a LIMIT 40) x) FROM (SELECT a FROM t WHERE a < 30 GROUP BY a) o";
    let lines = explain_lines(&mut s, &format!("(ANALYZE, IO) {sql}"));
    let subplan = lines.iter().position(|l| l.contains("SubPlan 1")).unwrap();
    assert!(
        lines[subplan..].iter().any(|l| l.contains("loops=30")),
        "{lines:?}"
    );
    let prefetch: Vec<&String> = lines[subplan..]
        .iter()
        .filter(|l| l.contains("Prefetch:"))
        .collect();
    assert_eq!(prefetch.len(), 1, "{lines:?}");
    assert_eq!(figure(prefetch[0], "streams="), 1, "{lines:?}");
    // And its answers are those of the scan without prefetching.
    let on = sorted_rows(&mut s, sql);
    force_index(&mut s, false, false);
    assert_eq!(sorted_rows(&mut s, sql), on);
}
