//! The planner's choice of join method by cost: a nested loop whose inner
//! index scan searches by each outer row where few outer rows meet a large
//! indexed table, a hash join where both sides are large, a merge join
//! reading an index in key order where it is forced; the same rows from
//! every method on random data (NULL keys, duplicates, keys of different
//! types, left joins, three tables, a correlated subquery rescanning a
//! parameterized loop); and EXPLAIN's estimates on every node. Every I/O
//! method.

mod common;

use aiostore::config::IoMethod;
use aiostore::database::Session;
use common::{explain_lines, new_small_pool_db, plan_lines, run, sorted_rows};

const METHODS: [IoMethod; 3] = [IoMethod::Sync, IoMethod::Worker, IoMethod::IoUring];

/// `big` (50 000 rows, `id` its primary key) and `small` (1 000 rows
/// pointing into `big` by `big_id`, which has an index), analysed.
fn load(s: &mut Session) {
    run(
        s,
        "CREATE TABLE big (id int PRIMARY KEY, x int, pad text);
         CREATE TABLE small (id int PRIMARY KEY, big_id int, y int);
         INSERT INTO big SELECT i, i % 100, repeat('p', 20) FROM generate_series(1, 50000) i;
         INSERT INTO small SELECT i, i * 37 % 50000 + 1, i FROM generate_series(1, 1000) i;
         CREATE INDEX ON small (big_id);
         ANALYZE",
    );
}

/// The plan's node titles, top down, without their arrows.
fn nodes(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .enumerate()
        .filter(|(i, l)| *i == 0 || l.trim_start().starts_with("->"))
        .map(|(_, l)| l.trim_start().trim_start_matches("->  ").to_string())
        .collect()
}

#[test]
fn each_join_method_is_chosen_where_it_costs_least() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Sync, false);
    let mut s = db.session().unwrap();
    load(&mut s);
    // Ten outer rows: ten searches of big's primary key.
    let few =
        "SELECT small.id, big.x FROM small JOIN big ON big.id = small.big_id WHERE small.y < 10";
    assert_eq!(
        explain_lines(&mut s, few),
        [
            "Nested Loop",
            "  ->  Seq Scan on small",
            "        Filter: (small.y < 10)",
            "  ->  Index Scan using big_pkey on big",
            "        Index Cond: (big.id = small.big_id)",
        ]
    );
    // Both sides whole: a hash join, built over the smaller one.
    let all = "SELECT small.id, big.x FROM big JOIN small ON big.id = small.big_id";
    assert_eq!(
        nodes(&explain_lines(&mut s, all)),
        ["Hash Join", "Seq Scan on big", "Seq Scan on small"]
    );
    // Merge joins forced: the inner side read in key order from its
    // index, the outer sorted; the small side is the one sorted (the
    // sides commute), big read in key order through its primary key.
    run(
        &mut s,
        "SET enable_hashjoin = off; SET enable_nestloop = off",
    );
    assert_eq!(
        nodes(&explain_lines(&mut s, all)),
        [
            "Merge Join",
            "Sort",
            "Seq Scan on small",
            "Index Scan using big_pkey on big"
        ]
    );
    // Every method off: the cheapest all the same (PostgreSQL only
    // penalises a disabled method).
    run(&mut s, "SET enable_mergejoin = off");
    assert_eq!(nodes(&explain_lines(&mut s, few))[0], "Nested Loop");
    // Nested loops off alone: the few rows are hashed instead.
    run(
        &mut s,
        "RESET enable_hashjoin; RESET enable_mergejoin; SET enable_nestloop = off",
    );
    assert_ne!(nodes(&explain_lines(&mut s, few))[0], "Nested Loop");
    run(&mut s, "RESET enable_nestloop");

    // The inner index scan runs once per outer row.
    let analyzed = explain_lines(&mut s, &format!("(ANALYZE, SUMMARY OFF) {few}"));
    let inner = analyzed
        .iter()
        .find(|l| l.contains("Index Scan using big_pkey"))
        .expect("the inner index scan");
    assert!(
        inner.ends_with("(actual rows=1 loops=9)"),
        "{inner}: {analyzed:#?}"
    );
}

#[test]
fn explain_shows_an_estimate_on_every_node_as_postgresql_does() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Sync, false);
    let mut s = db.session().unwrap();
    load(&mut s);
    let queries = [
        "SELECT * FROM big",
        "SELECT * FROM big WHERE id = 5",
        "SELECT x, count(*) FROM big GROUP BY x ORDER BY 2 DESC LIMIT 3",
        "SELECT small.id, big.x FROM small JOIN big ON big.id = small.big_id WHERE small.y < 10",
        "SELECT * FROM big LEFT JOIN small ON big.id = small.big_id AND small.y > big.x",
        "SELECT * FROM big WHERE id IN (SELECT big_id FROM small WHERE y = 3)",
        "SELECT id FROM small UNION SELECT x FROM big",
        "SELECT * FROM generate_series(1, 10) g JOIN big ON big.id = g",
        "SELECT (SELECT max(id) FROM small), count(*) FROM big",
        "UPDATE small SET y = y + 1 WHERE id < 5",
        "DELETE FROM small WHERE big_id = 7",
        "INSERT INTO small VALUES (5000, 1, 1)",
        "SELECT * FROM buffers",
    ];
    let estimate = |line: &str| -> Option<(f64, f64, f64, u64)> {
        let (_, rest) = line.split_once("  (cost=")?;
        let (costs, rest) = rest.split_once(" rows=")?;
        let (rows, rest) = rest.split_once(" width=")?;
        let width = rest.strip_suffix(')')?;
        let (startup, total) = costs.split_once("..")?;
        Some((
            startup.parse().ok()?,
            total.parse().ok()?,
            rows.parse().ok()?,
            width.parse().ok()?,
        ))
    };
    for query in queries {
        let lines = plan_lines(&mut s, &format!("EXPLAIN {query}"));
        for node in nodes(&lines) {
            let Some((startup, total, rows, _)) = estimate(&node) else {
                panic!("{query}: a node without an estimate: {node:?} in {lines:#?}");
            };
            assert!(
                startup <= total && rows >= 0.0,
                "{query}: {node} in {lines:#?}"
            );
        }
    }
    // Figures that follow from the statistics alone, as PostgreSQL's.
    let top = |s: &mut Session, query: &str| {
        let lines = plan_lines(s, &format!("EXPLAIN {query}"));
        estimate(&lines[0]).unwrap_or_else(|| panic!("{lines:#?}"))
    };
    assert_eq!(top(&mut s, "SELECT * FROM big").2, 50_000.0);
    assert_eq!(top(&mut s, "SELECT * FROM big WHERE id = 5").2, 1.0);
    // A common value's frequency as the sample saw it: near 1 %.
    let common = top(&mut s, "SELECT * FROM big WHERE x = 5").2;
    assert!((400.0..=600.0).contains(&common), "{common}");
    assert_eq!(top(&mut s, "SELECT * FROM big LIMIT 7").2, 7.0);
    assert_eq!(
        top(&mut s, "SELECT x, count(*) FROM big GROUP BY x").2,
        100.0
    );
    assert_eq!(
        top(&mut s, "SELECT * FROM generate_series(1, 10) g").2,
        10.0
    );
    // A join of a foreign key with the key it points at: a row per
    // referencing row.
    assert_eq!(
        top(
            &mut s,
            "SELECT * FROM big JOIN small ON big.id = small.big_id"
        )
        .2,
        1000.0
    );
    // COSTS OFF leaves them out.
    assert_eq!(
        plan_lines(&mut s, "EXPLAIN (COSTS OFF) SELECT * FROM big"),
        ["Seq Scan on big"]
    );
}

/// A small deterministic generator (xorshift), so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value below `n`, or NULL one time in `null_one_in`.
    fn key(&mut self, n: u64, null_one_in: u64) -> String {
        if self.next().is_multiple_of(null_one_in) {
            "NULL".into()
        } else {
            (self.next() % n).to_string()
        }
    }
}

/// Random tables: `o` (outer, 300 rows), `i` (inner, 4 000 rows with
/// indexes on `k`, `(k, j)` and `t`), `w` (a third table, 500 rows,
/// indexed on `k`); keys with duplicates and NULLs, `i.k` a bigint
/// against `o.k` an integer.
fn random_tables(s: &mut Session, seed: u64) {
    let mut rng = Rng(seed);
    run(
        s,
        "CREATE TABLE o (id int, k int, j int, t text);
         CREATE TABLE i (id int, k bigint, j int, t text);
         CREATE TABLE w (id int, k int)",
    );
    let mut insert = |table: &str, rows: usize, keys: u64| {
        let values: Vec<String> = (0..rows)
            .map(|n| {
                let (k, j) = (rng.key(keys, 20), rng.key(5, 10));
                match table {
                    "w" => format!("({n}, {k})"),
                    _ => format!("({n}, {k}, {j}, 't' || {})", rng.key(keys, 15)),
                }
            })
            .collect();
        run(
            s,
            &format!("INSERT INTO {table} VALUES {}", values.join(", ")),
        );
    };
    insert("o", 300, 400);
    insert("i", 4000, 400);
    insert("w", 500, 400);
    run(
        s,
        "CREATE INDEX ON i (k); CREATE INDEX ON i (k, j); CREATE INDEX ON i (t);
         CREATE INDEX ON w (k); ANALYZE",
    );
}

const DIFFERENTIAL_QUERIES: &[&str] = &[
    "SELECT o.id, i.id FROM o JOIN i ON o.k = i.k",
    "SELECT o.id, i.id FROM o LEFT JOIN i ON i.k = o.k",
    "SELECT o.id, i.id FROM o JOIN i ON o.k = i.k AND o.j = i.j",
    "SELECT o.id, i.id FROM o LEFT JOIN i ON o.k = i.k AND i.j = o.j AND i.id < o.id * 20",
    "SELECT o.id, i.id FROM o JOIN i ON i.t = o.t",
    // Written with the large table first: run the other way round, the
    // few rows of o driving (a loop into i's index, or a hash of o).
    "SELECT i.id, o.id, i.k FROM i JOIN o ON o.k = i.k WHERE o.j = 1",
    "SELECT i.id, o.id FROM i JOIN o ON o.k = i.k AND o.j = i.j WHERE o.id < 50",
    "SELECT o.id, i.id FROM o, i WHERE i.k = o.k + 1 AND o.j = 2",
    // A range join: only the nested loop can run it; the inner index
    // scan searches by the range.
    "SELECT o.id, i.id FROM o JOIN i ON i.k > o.k AND i.k < o.k + 3 WHERE o.id < 40",
    "SELECT o.id, i.id, w.id FROM o JOIN i ON o.k = i.k JOIN w ON w.k = i.j + o.j",
    "SELECT o.id, i.id, w.id FROM o LEFT JOIN i ON o.k = i.k LEFT JOIN w ON w.k = o.j",
    "SELECT count(*), count(i.id), sum(o.id + i.id) FROM o LEFT JOIN i ON o.k = i.k",
    // A join inside a correlated subquery: the parameterized loop runs
    // again for each outer row, its own parameters set inside.
    "SELECT w.id, (SELECT count(*) FROM o JOIN i ON i.k = o.k WHERE o.j = w.k % 5) FROM w WHERE w.id < 30",
];

/// Settings forcing one method, as PostgreSQL's tests force one: the
/// others off.
const FORCED: [(&str, &str); 3] = [
    (
        "hash",
        "RESET enable_hashjoin; SET enable_mergejoin = off; SET enable_nestloop = off",
    ),
    (
        "merge",
        "SET enable_hashjoin = off; RESET enable_mergejoin; SET enable_nestloop = off",
    ),
    (
        "nested loop",
        "SET enable_hashjoin = off; SET enable_mergejoin = off; RESET enable_nestloop",
    ),
];

#[test]
fn parameterized_nested_loops_return_the_rows_of_every_other_method() {
    for method in METHODS {
        let (_dir, _path, db) = new_small_pool_db(method, false);
        let mut s = db.session().unwrap();
        for seed in [0x9e37_79b9_7f4a_7c15u64, 0x2545_f491_4f6c_dd1d] {
            random_tables(&mut s, seed);
            let mut searched = 0;
            for query in DIFFERENTIAL_QUERIES {
                run(
                    &mut s,
                    "RESET enable_hashjoin; RESET enable_mergejoin; RESET enable_nestloop",
                );
                let chosen = sorted_rows(&mut s, query);
                assert!(
                    chosen.len() > 10 || query.contains("count("),
                    "{method:?} {query}: a join worth comparing, {} rows",
                    chosen.len()
                );
                for (name, settings) in FORCED {
                    run(&mut s, settings);
                    let plan = explain_lines(&mut s, query);
                    if name == "nested loop" {
                        // The inner table searched by the outer row's
                        // values through one of its indexes.
                        searched += usize::from(plan.iter().any(|l| {
                            l.contains("Index Cond") && (l.contains("o.") || l.contains("i."))
                        }));
                    }
                    let got = sorted_rows(&mut s, query);
                    assert!(
                        got == chosen,
                        "{method:?} {query}: {name} returned {} rows against {} of the chosen plan; first difference {:?}\n{plan:#?}",
                        got.len(),
                        chosen.len(),
                        got.iter().zip(&chosen).find(|(g, c)| g != c),
                    );
                }
            }
            assert!(
                searched >= DIFFERENTIAL_QUERIES.len() / 2,
                "{method:?}: only {searched} of the nested loops searched the inner table's index"
            );
            run(
                &mut s,
                "RESET enable_hashjoin; RESET enable_mergejoin; RESET enable_nestloop;
                 DROP TABLE o; DROP TABLE i; DROP TABLE w",
            );
        }
    }
}

#[test]
fn every_join_method_agrees_within_one_snapshot_while_others_change_and_vacuum_the_tables() {
    // One session changes the inner table and vacuums it without pause
    // (pruning and reusing the TIDs its indexes point at); the other, in
    // a repeatable-read transaction, runs each join by every method, twice
    // through: within one snapshot they must all agree with its first
    // answer, however the tables change meanwhile.
    for method in METHODS {
        join_methods_agree_while_the_tables_change(method);
    }
}

fn join_methods_agree_while_the_tables_change(method: IoMethod) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let (_dir, _path, db) = new_small_pool_db(method, false);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE o (id int, k int);
         CREATE TABLE i (id int, k int, v text);
         INSERT INTO o SELECT n, n % 300 FROM generate_series(1, 200) n;
         INSERT INTO i SELECT n, n % 300, 'v' FROM generate_series(1, 6000) n;
         CREATE INDEX i_k ON i (k); CREATE INDEX i_id ON i (id);
         VACUUM ANALYZE",
    );
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let db = Arc::clone(&db);
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut s = db.session().unwrap();
            let mut round = 0u64;
            while !stop.load(Ordering::SeqCst) {
                round += 1;
                let at = (round * 389) % 6000;
                run(
                    &mut s,
                    &format!(
                        "UPDATE i SET k = (k + 1) % 300 WHERE id BETWEEN {at} AND {}",
                        at + 40
                    ),
                );
                run(
                    &mut s,
                    &format!("DELETE FROM i WHERE id = {}", (round * 131) % 6000),
                );
                run(
                    &mut s,
                    &format!(
                        "INSERT INTO i VALUES ({}, {}, 'n')",
                        6000 + round,
                        round % 300
                    ),
                );
                if round.is_multiple_of(5) {
                    run(&mut s, "VACUUM i");
                }
            }
            round
        })
    };
    let queries = [
        "SELECT count(*), sum(i.id) FROM o JOIN i ON i.k = o.k",
        "SELECT count(*), count(i.id) FROM o LEFT JOIN i ON i.k = o.k AND i.id < 3000",
        "SELECT o.id, i.id FROM o JOIN i ON i.k = o.k WHERE o.id < 20 ORDER BY 1, 2",
    ];
    let mut s = db.session().unwrap();
    for round in 0..8 {
        run(&mut s, "BEGIN ISOLATION LEVEL REPEATABLE READ");
        for q in queries {
            let mut first: Option<Vec<Vec<aiostore::types::Value>>> = None;
            for (name, settings) in FORCED.iter().chain(FORCED.iter()) {
                run(&mut s, settings);
                if *name == "nested loop" {
                    // The inner table searched by each outer row.
                    let shown = explain_lines(&mut s, q).join("\n");
                    assert!(shown.contains("Cond: (i.k = o.k)"), "{q}:\n{shown}");
                }
                let got = run(&mut s, q).pop().unwrap().rows;
                match &first {
                    None => first = Some(got),
                    Some(f) => assert_eq!(&got, f, "{method:?} round {round}: {q} by {name}"),
                }
            }
        }
        run(&mut s, "COMMIT");
    }
    stop.store(true, Ordering::SeqCst);
    let rounds = writer.join().unwrap();
    assert!(rounds > 0);
    run(&mut s, "SELECT verify_index('i_k'), verify_index('i_id')");
}

#[test]
fn an_inner_join_of_two_tables_runs_the_other_way_round_where_that_costs_less() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Sync, false);
    let mut s = db.session().unwrap();
    load(&mut s);
    // Written big first: the few rows of small still drive the loop, and
    // the columns come back in the order written.
    let few = "SELECT * FROM big JOIN small ON big.id = small.big_id WHERE small.y < 4";
    assert_eq!(
        explain_lines(&mut s, few),
        [
            "Nested Loop",
            "  ->  Seq Scan on small",
            "        Filter: (small.y < 4)",
            "  ->  Index Scan using big_pkey on big",
            "        Index Cond: (big.id = small.big_id)",
        ]
    );
    let rows = run(&mut s, few).pop().unwrap().rows;
    let by_hash = {
        run(
            &mut s,
            "SET enable_nestloop = off; SET enable_mergejoin = off",
        );
        let rows = run(&mut s, few).pop().unwrap().rows;
        run(&mut s, "RESET enable_nestloop; RESET enable_mergejoin");
        rows
    };
    assert_eq!(rows.len(), 3, "{rows:?}");
    let mut sorted = rows.clone();
    sorted.sort_by_key(|r| format!("{r:?}"));
    let mut hashed = by_hash;
    hashed.sort_by_key(|r| format!("{r:?}"));
    assert_eq!(sorted, hashed);
    // big's columns (id, x, pad) first, then small's (id, big_id, y).
    for r in &rows {
        assert_eq!(r.len(), 6);
        assert_eq!(r[0], r[4], "big.id = small.big_id: {r:?}");
    }
    // A hash join builds from the smaller side whichever is written
    // first.
    let both = "SELECT count(*) FROM small JOIN big ON big.id = small.big_id";
    assert_eq!(
        explain_lines(&mut s, both)
            .iter()
            .map(|l| l.trim_start().trim_start_matches("->  ").to_string())
            .filter(|l| l.contains("Scan"))
            .collect::<Vec<_>>(),
        ["Seq Scan on big", "Seq Scan on small"]
    );
    // A left join keeps its sides.
    let left = "SELECT count(*) FROM big LEFT JOIN small ON big.id = small.big_id";
    assert_eq!(
        explain_lines(&mut s, left)
            .iter()
            .find(|l| l.contains("Scan"))
            .map(|l| l.trim_start().trim_start_matches("->  ")),
        Some("Seq Scan on big")
    );
}
