//! Bitmap scans from SQL: forced with the `enable_*` settings they return
//! the rows of a sequential scan for randomised data and queries (each
//! index alone, BitmapOr, BitmapAnd), after updates, deletes and vacuum;
//! lossy bitmaps under the smallest `work_mem`; EXPLAIN's lines; a rescan
//! as the inner side of a correlated subquery; and a scan racing inserts
//! that returns its snapshot's rows. Every I/O method where I/O matters.

mod common;

use aiostore::config::IoMethod;
use aiostore::database::Session;
use aiostore::types::Value;
use common::{
    err, explain_lines, force_bitmap, force_seq, new_small_pool_db, run, sorted_rows, Rng,
};

const METHODS: [IoMethod; 3] = [IoMethod::Sync, IoMethod::Worker, IoMethod::IoUring];

/// `rows` rows with random `a` (0..100), `b` (0..1000), `c` text of 20
/// values, and padding; indexes on `a`, `b` and `(c, b)`.
fn load_random(s: &mut Session, rng: &mut Rng, rows: usize) {
    run(s, "CREATE TABLE t (id int, a int, b int, c text, pad text)");
    let mut values = Vec::new();
    for id in 1..=rows {
        let a = rng.below(100);
        let b = rng.below(1000);
        let c = rng.below(20);
        let a = if rng.below(40) == 0 {
            "NULL".to_string()
        } else {
            a.to_string()
        };
        values.push(format!("({id}, {a}, {b}, 'c{c}', repeat('x', 60))"));
        if values.len() == 500 {
            run(s, &format!("INSERT INTO t VALUES {}", values.join(", ")));
            values.clear();
        }
    }
    if !values.is_empty() {
        run(s, &format!("INSERT INTO t VALUES {}", values.join(", ")));
    }
    run(s, "CREATE INDEX t_a_idx ON t (a)");
    run(s, "CREATE INDEX t_b_idx ON t (b)");
    run(s, "CREATE INDEX t_c_b_idx ON t (c, b)");
}

/// A random condition one of the indexes serves.
fn random_condition(rng: &mut Rng) -> String {
    let a = rng.below(100);
    let b = rng.below(1000);
    let c = rng.below(20);
    match rng.below(9) {
        0 => format!("a = {a}"),
        1 => format!("b BETWEEN {b} AND {}", b + rng.below(60)),
        2 => format!("a IN ({a}, {}, {})", rng.below(100), rng.below(100)),
        3 => format!("a = {a} OR b < {}", rng.below(40)),
        4 => format!("(b = {b} OR a IS NULL)"),
        5 => format!("a = {a} AND b > {b}"),
        6 => format!("c = 'c{c}' AND b < {b}"),
        7 => format!("a < {} AND b < {}", rng.below(10), rng.below(100)),
        _ => format!("(a = {a} OR c = 'c{c}') AND b >= {b}"),
    }
}

#[test]
fn a_bitmap_scan_returns_what_a_sequential_scan_returns() {
    for method in METHODS {
        let (_dir, _path, db) = new_small_pool_db(method, false);
        let mut s = db.session().unwrap();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ method as u64);
        load_random(&mut s, &mut rng, 12_000);
        let mut bitmap_plans = 0;
        for round in 0..3 {
            for _ in 0..25 {
                let cond = random_condition(&mut rng);
                let q = format!("SELECT id, a, b, c FROM t WHERE {cond}");
                force_seq(&mut s);
                let seq = sorted_rows(&mut s, &q);
                force_bitmap(&mut s);
                let shown = explain_lines(&mut s, &q).join("\n");
                if shown.starts_with("Bitmap Heap Scan on t") {
                    bitmap_plans += 1;
                }
                let by_bitmap = sorted_rows(&mut s, &q);
                assert_eq!(
                    by_bitmap.len(),
                    seq.len(),
                    "{method:?} round {round}: {q}\n{shown}"
                );
                assert_eq!(by_bitmap, seq, "{method:?} round {round}: {q}\n{shown}");
            }
            // Change the table between rounds: new versions (and index
            // entries) of some rows, others gone, then vacuumed away.
            force_seq(&mut s);
            let k = 3 + round;
            run(
                &mut s,
                &format!("UPDATE t SET a = (a + 7) % 100, b = b + 1 WHERE id % {k} = 0"),
            );
            run(&mut s, &format!("DELETE FROM t WHERE id % {} = 1", k + 8));
            if round == 1 {
                run(&mut s, "VACUUM t");
            }
        }
        assert!(
            bitmap_plans >= 60,
            "{method:?}: only {bitmap_plans} of 75 queries were bitmap scans"
        );
        for index in ["t_a_idx", "t_b_idx", "t_c_b_idx"] {
            run(&mut s, &format!("SELECT verify_index('{index}')"));
        }
    }
}

#[test]
fn explain_shows_bitmap_heap_scans_with_their_index_scans() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Sync, false);
    let mut s = db.session().unwrap();
    load_random(&mut s, &mut Rng(7), 4000);
    force_bitmap(&mut s);
    assert_eq!(
        explain_lines(&mut s, "SELECT * FROM t WHERE a = 5"),
        [
            "Bitmap Heap Scan on t",
            "  Recheck Cond: (a = 5)",
            "  ->  Bitmap Index Scan on t_a_idx",
            "        Index Cond: (a = 5)",
        ]
    );
    assert_eq!(
        explain_lines(&mut s, "SELECT * FROM t WHERE a = 5 OR b < 10"),
        [
            "Bitmap Heap Scan on t",
            "  Recheck Cond: ((a = 5) OR (b < 10))",
            "  ->  BitmapOr",
            "        ->  Bitmap Index Scan on t_a_idx",
            "              Index Cond: (a = 5)",
            "        ->  Bitmap Index Scan on t_b_idx",
            "              Index Cond: (b < 10)",
        ]
    );
    // Two selective conditions, each served by its own index: ANDed.
    run(&mut s, "SET enable_bitmapscan = on");
    run(&mut s, "SET enable_seqscan = on");
    run(&mut s, "SET enable_indexscan = on");
    let and = explain_lines(&mut s, "SELECT * FROM t WHERE a = 5 AND b = 17 AND id > 0");
    assert_eq!(
        and,
        [
            "Bitmap Heap Scan on t",
            "  Recheck Cond: ((a = 5) AND (b = 17))",
            "  Filter: (id > 0)",
            "  ->  BitmapAnd",
            "        ->  Bitmap Index Scan on t_a_idx",
            "              Index Cond: (a = 5)",
            "        ->  Bitmap Index Scan on t_b_idx",
            "              Index Cond: (b = 17)",
        ]
    );
    // With ANALYZE: rows, heap blocks, buffers and the stream's I/O.
    force_bitmap(&mut s);
    let lines = explain_lines(
        &mut s,
        "(ANALYZE, BUFFERS, IO) SELECT * FROM t WHERE a = 5 OR b < 10",
    );
    let count = &sorted_rows(&mut s, "SELECT count(*) FROM t WHERE a = 5 OR b < 10")[0][0];
    let Value::BigInt(count) = count else {
        panic!("a count, not {count:?}")
    };
    assert!(*count > 0);
    assert_eq!(
        lines[0],
        format!("Bitmap Heap Scan on t (actual rows={count} loops=1)"),
        "{lines:?}"
    );
    for prefix in [
        "  Heap Blocks: exact=",
        "  Buffers: shared ",
        "  I/O: ios=",
        "  ->  BitmapOr (actual rows=0 loops=1)",
        "              Index Searches: 1",
    ] {
        assert!(
            lines.iter().any(|l| l.starts_with(prefix)),
            "no line starting {prefix:?} in {lines:?}"
        );
    }
    assert!(!lines.iter().any(|l| l.contains("lossy=")), "{lines:?}");
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("Rows Removed by Index Recheck")),
        "an exact bitmap over exact searches rechecks nothing away: {lines:?}"
    );
}

#[test]
fn the_planner_prefers_a_bitmap_only_where_it_costs_less() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Sync, false);
    let mut s = db.session().unwrap();
    load_random(&mut s, &mut Rng(11), 4000);
    run(&mut s, "CREATE UNIQUE INDEX t_id_idx ON t (id)");
    // One row by a unique key: a plain index scan.
    assert_eq!(
        explain_lines(&mut s, "SELECT * FROM t WHERE id = 5")[0],
        "Index Scan using t_id_idx on t"
    );
    // An OR of two indexed conditions: only a bitmap can use indexes.
    assert_eq!(
        explain_lines(&mut s, "SELECT * FROM t WHERE id = 5 OR a = 3")[2],
        "  ->  BitmapOr"
    );
    // Nearly all of the table, once ANALYZE says so: read it all. (A
    // never-analysed table's one-sided range is a third of it, which
    // PostgreSQL 15 reads by a bitmap scan, as we do.)
    run(&mut s, "ANALYZE t");
    assert_eq!(
        explain_lines(&mut s, "SELECT * FROM t WHERE b > 5")[0],
        "Seq Scan on t"
    );
    // Off, no bitmap; with the plain index path off too, a bitmap is
    // what uses the index.
    run(&mut s, "SET enable_bitmapscan = off");
    assert_eq!(
        explain_lines(&mut s, "SELECT * FROM t WHERE id = 5 OR a = 3")[0],
        "Seq Scan on t"
    );
    run(&mut s, "SET enable_bitmapscan = on");
    run(&mut s, "SET enable_indexscan = off");
    assert_eq!(
        explain_lines(&mut s, "SELECT * FROM t WHERE id = 5")[0],
        "Bitmap Heap Scan on t"
    );
    assert_eq!(
        run(&mut s, "SHOW enable_bitmapscan").pop().unwrap().rows,
        [vec![Value::Text("on".into())]]
    );
}

#[test]
fn a_limit_does_not_discount_a_disabled_index_scan() {
    // The disabled scan's penalty is a startup cost, as in PostgreSQL: a
    // LIMIT pays its share of a scan's run, but all of its startup. Taken
    // as run cost, 10^10 over a million rows came to less than a bitmap
    // scan and a sort, and ORDER BY … LIMIT 1 read a disabled index.
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Sync, false);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE l (a int, b int); INSERT INTO l SELECT i % 1000, i FROM generate_series(1, 1000000) AS g(i); CREATE INDEX l_a_idx ON l (a); ANALYZE l",
    );
    let query = "SELECT * FROM l WHERE a >= 10 ORDER BY a LIMIT 1";
    force_bitmap(&mut s);
    let lines = explain_lines(&mut s, query);
    assert!(
        lines.iter().any(|l| l.contains("Bitmap Heap Scan on l")),
        "{lines:?}"
    );
    force_seq(&mut s);
    let lines = explain_lines(&mut s, query);
    assert!(
        lines.iter().any(|l| l.contains("Seq Scan on l")),
        "{lines:?}"
    );
    // Allowed, the index gives the order and the limit stops it early.
    run(&mut s, "SET enable_indexscan = on");
    assert_eq!(
        explain_lines(&mut s, query)[1],
        "  ->  Index Scan using l_a_idx on l"
    );
}

/// A table of about 2 300 pages whose rows with `k < 50` lie on every
/// page: more exact pages than 64 kB of bitmap holds.
fn load_wide(s: &mut Session) {
    run(s, "CREATE TABLE w (id int, k int, pad text)");
    run(
        s,
        "INSERT INTO w SELECT i, i % 100, repeat('p', 200) FROM generate_series(1, 80000) AS g(i)",
    );
    run(s, "CREATE INDEX w_k_idx ON w (k)");
}

#[test]
fn a_lossy_bitmap_under_the_smallest_work_mem_still_returns_the_right_rows() {
    for method in METHODS {
        let (_dir, _path, db) = new_small_pool_db(method, false);
        let mut s = db.session().unwrap();
        load_wide(&mut s);
        // 64 kB is work_mem's least value.
        let refused = err(&mut s, "SET work_mem = '32kB'");
        assert!(refused.contains("work_mem"), "{refused}");
        run(&mut s, "SET work_mem = '64kB'");
        run(&mut s, "DELETE FROM w WHERE id % 9 = 0");
        run(&mut s, "UPDATE w SET k = k + 1 WHERE id % 13 = 0");
        for q in [
            "SELECT id, k FROM w WHERE k < 50",
            "SELECT id, k FROM w WHERE k IN (3, 97) OR k = 40",
            "SELECT count(*) FROM w WHERE k BETWEEN 10 AND 12",
        ] {
            force_seq(&mut s);
            let seq = sorted_rows(&mut s, q);
            force_bitmap(&mut s);
            let got = sorted_rows(&mut s, q);
            assert_eq!(got, seq, "{method:?}: {q}");
        }
        let lines = explain_lines(&mut s, "(ANALYZE) SELECT id FROM w WHERE k < 50");
        let blocks = lines
            .iter()
            .find(|l| l.trim_start().starts_with("Heap Blocks:"))
            .unwrap_or_else(|| panic!("{lines:?}"));
        assert!(blocks.contains("lossy="), "{method:?}: {lines:?}");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("  Rows Removed by Index Recheck: ")),
            "{method:?}: {lines:?}"
        );
        // With room, the same bitmap stays exact.
        run(&mut s, "SET work_mem = '64MB'");
        let lines = explain_lines(&mut s, "(ANALYZE) SELECT id FROM w WHERE k < 50");
        assert!(!lines.iter().any(|l| l.contains("lossy=")), "{lines:?}");
    }
}

#[test]
fn a_bitmap_scan_inside_a_correlated_subquery_is_rebuilt_for_each_outer_row() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Worker, false);
    let mut s = db.session().unwrap();
    load_random(&mut s, &mut Rng(23), 6000);
    let q = "SELECT id, (SELECT count(*) FROM t AS n WHERE n.a = t.a OR n.b = t.b) \
             FROM t WHERE id < 40";
    force_seq(&mut s);
    let seq = sorted_rows(&mut s, q);
    force_bitmap(&mut s);
    let got = sorted_rows(&mut s, q);
    assert_eq!(got, seq);
    let lines = explain_lines(&mut s, &format!("(ANALYZE) {q}"));
    let inner = lines
        .iter()
        .find(|l| l.contains("Bitmap Heap Scan on t n"))
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert!(inner.contains("loops=39"), "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.trim() == "Recheck Cond: ((n.a = t.a) OR (n.b = t.b))"),
        "{lines:?}"
    );
}

#[test]
fn a_bitmap_scan_racing_inserts_returns_its_snapshots_rows() {
    for method in METHODS {
        let (_dir, _path, db) = new_small_pool_db(method, false);
        let mut s = db.session().unwrap();
        load_wide(&mut s);
        // Room on every page for the inserts to land among the old rows.
        run(&mut s, "DELETE FROM w WHERE id % 4 = 0");
        run(&mut s, "VACUUM w");
        let q = "SELECT id, k FROM w WHERE k IN (7, 8) OR k = 60";
        run(&mut s, "SET work_mem = '64kB'");
        force_bitmap(&mut s);
        run(&mut s, "BEGIN ISOLATION LEVEL REPEATABLE READ");
        let before = sorted_rows(&mut s, q);
        assert!(!before.is_empty());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let inserter = {
            let db = std::sync::Arc::clone(&db);
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut s = db.session().unwrap();
                let mut batches = 0u32;
                // Bounded: the scans below end it sooner.
                const INSERT_BATCHES_MAX: u32 = 400;
                while !stop.load(std::sync::atomic::Ordering::Relaxed)
                    && batches < INSERT_BATCHES_MAX
                {
                    run(
                        &mut s,
                        "INSERT INTO w SELECT -i, 7, 'new' FROM generate_series(1, 50) AS g(i)",
                    );
                    batches += 1;
                }
                batches
            })
        };
        for _ in 0..5 {
            assert_eq!(sorted_rows(&mut s, q), before, "{method:?}");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let batches = inserter.join().unwrap();
        assert!(batches > 0);
        assert_eq!(sorted_rows(&mut s, q), before, "{method:?}");
        run(&mut s, "COMMIT");
        // A new snapshot sees them.
        let after = sorted_rows(&mut s, q);
        assert_eq!(
            after.len(),
            before.len() + 50 * batches as usize,
            "{method:?}"
        );
    }
}
