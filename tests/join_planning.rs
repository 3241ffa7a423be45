//! The planner's choice of join method by cost: a nested loop whose inner
//! index scan searches by each outer row where few outer rows meet a large
//! indexed table, a hash join where both sides are large, a merge join
//! reading an index in key order where it is forced; the same rows from
//! every method on random data (NULL keys, duplicates, keys of different
//! types, left joins, three tables, a correlated subquery rescanning a
//! parameterized loop); and EXPLAIN's estimates on every node. The join
//! order searched: joins written in a bad order start from the selective
//! item and cost less than in the order written (`join_collapse_limit =
//! 1`), and random joins of two to five tables return the same rows, in
//! the columns' written order, in the order searched, in the order
//! written and by every method. Every I/O method.

mod common;

use aiostore::config::IoMethod;
use aiostore::database::Session;
use common::{err, explain_lines, new_small_pool_db, plan_lines, run, sorted_rows, Rng};

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
    // Merge joins forced: both sides read in key order from their
    // indexes, no sort (PostgreSQL 15's plan).
    run(
        &mut s,
        "SET enable_hashjoin = off; SET enable_nestloop = off",
    );
    assert_eq!(
        nodes(&explain_lines(&mut s, all)),
        [
            "Merge Join",
            "Index Scan using big_pkey on big",
            "Index Scan using small_big_id_idx on small"
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
    let top = top_estimate;
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

/// A plan line's estimate, `(cost=startup..total rows=n width=w)`.
fn estimate(line: &str) -> Option<(f64, f64, f64, u64)> {
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
}

/// The estimate of `query`'s top node.
fn top_estimate(s: &mut Session, query: &str) -> (f64, f64, f64, u64) {
    let lines = plan_lines(s, &format!("EXPLAIN {query}"));
    estimate(&lines[0]).unwrap_or_else(|| panic!("{lines:#?}"))
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

/// `query`'s plan in the order searched against the order written
/// (`join_collapse_limit = 1`): the searched one must cost less and
/// estimate the same rows (a set's rows do not depend on the order
/// joining it). With `run_both`, both must return the same rows.
fn cheaper_than_as_written(s: &mut Session, query: &str, run_both: bool) {
    let searched = top_estimate(s, query);
    let rows = run_both.then(|| sorted_rows(s, query));
    run(s, "SET join_collapse_limit = 1");
    let written = top_estimate(s, query);
    let written_rows = run_both.then(|| sorted_rows(s, query));
    let written_plan = explain_lines(s, query);
    run(s, "RESET join_collapse_limit");
    assert!(
        searched.1 < written.1,
        "{query}: searched {searched:?}, written {written:?}\n{written_plan:#?}"
    );
    assert_eq!(searched.2, written.2, "{query}: the same rows estimated");
    assert_eq!(rows, written_rows, "{query}");
}

#[test]
fn a_chain_written_with_its_large_tables_first_starts_from_the_filtered_one() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Sync, false);
    let mut s = db.session().unwrap();
    // ca and cc are large and not linked to each other; cb links them and
    // only cb is filtered.
    run(
        &mut s,
        "CREATE TABLE ca (id int PRIMARY KEY, v int, pad text);
         CREATE TABLE cc (id int PRIMARY KEY, w int, pad text);
         CREATE TABLE cb (id int PRIMARY KEY, a_id int, c_id int, f int);
         INSERT INTO ca SELECT i, i % 50, repeat('a', 30) FROM generate_series(1, 20000) i;
         INSERT INTO cc SELECT i, i % 70, repeat('c', 30) FROM generate_series(1, 20000) i;
         INSERT INTO cb SELECT i, i * 7 % 20000 + 1, i * 13 % 20000 + 1, i % 1000
           FROM generate_series(1, 20000) i;
         CREATE TABLE tag (id int PRIMARY KEY, label text);
         INSERT INTO tag SELECT i, 'tag ' || i FROM generate_series(1, 40) i;
         ANALYZE",
    );
    // Written as a cartesian product of the two large tables first.
    let chain = "SELECT * FROM ca, cc, cb WHERE cb.a_id = ca.id AND cb.c_id = cc.id AND cb.f < 3";
    assert_eq!(
        explain_lines(&mut s, chain),
        [
            "Nested Loop",
            "  ->  Nested Loop",
            "        ->  Seq Scan on cb",
            "              Filter: (cb.f < 3)",
            "        ->  Index Scan using ca_pkey on ca",
            "              Index Cond: (cb.a_id = ca.id)",
            "  ->  Index Scan using cc_pkey on cc",
            "        Index Cond: (cb.c_id = cc.id)",
        ]
    );
    // (Written so, it would join 400 million pairs: not run.)
    cheaper_than_as_written(&mut s, chain, false);
    // The columns come out as written: ca's, cc's, then cb's.
    let rows = run(&mut s, chain).pop().unwrap().rows;
    assert_eq!(rows.len(), 60);
    for r in &rows {
        assert_eq!(r.len(), 10, "{r:?}");
        assert_eq!((&r[0], &r[3]), (&r[7], &r[8]), "ca.id, cc.id: {r:?}");
    }
    // A left join after them stays on top, its outer side searched the
    // same way.
    let left = format!("{chain} AND cc.w <> 3");
    let left = left.replacen(
        "FROM ca, cc, cb",
        "FROM ca, cc, cb LEFT JOIN tag ON tag.id = cb.f",
        1,
    );
    assert_eq!(
        nodes(&explain_lines(&mut s, &left)),
        [
            "Hash Left Join",
            "Nested Loop",
            "Nested Loop",
            "Seq Scan on cb",
            "Index Scan using ca_pkey on ca",
            "Index Scan using cc_pkey on cc",
            "Seq Scan on tag",
        ]
    );
    cheaper_than_as_written(&mut s, &left, false);
}

#[test]
fn a_star_written_with_its_selective_item_last_starts_from_it() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Sync, false);
    let mut s = db.session().unwrap();
    // A fact table sf, two large dimensions, and ss of which a few rows
    // are wanted, each pointing at ten rows of sf.
    run(
        &mut s,
        "CREATE TABLE sf (id int PRIMARY KEY, d1 int, d2 int, s_id int, amount int);
         CREATE TABLE sd1 (id int PRIMARY KEY, name text);
         CREATE TABLE sd2 (id int PRIMARY KEY, name text);
         CREATE TABLE ss (id int PRIMARY KEY, tag int);
         INSERT INTO sf SELECT i, i * 3 % 40000 + 1, i * 7 % 40000 + 1, i % 5000 + 1, i
           FROM generate_series(1, 50000) i;
         INSERT INTO sd1 SELECT i, 'one' || i FROM generate_series(1, 40000) i;
         INSERT INTO sd2 SELECT i, 'two' || i FROM generate_series(1, 40000) i;
         INSERT INTO ss SELECT i, i % 1000 FROM generate_series(1, 5000) i;
         CREATE INDEX ON sf (s_id);
         ANALYZE",
    );
    let star = "SELECT * FROM sf JOIN sd1 ON sd1.id = sf.d1 JOIN sd2 ON sd2.id = sf.d2
                JOIN ss ON ss.id = sf.s_id WHERE ss.tag = 7";
    assert_eq!(
        nodes(&explain_lines(&mut s, star)),
        [
            "Nested Loop",
            "Nested Loop",
            "Nested Loop",
            "Seq Scan on ss",
            "Bitmap Heap Scan on sf",
            "Bitmap Index Scan on sf_s_id_idx",
            "Index Scan using sd1_pkey on sd1",
            "Index Scan using sd2_pkey on sd2",
        ]
    );
    cheaper_than_as_written(&mut s, star, true);
    // 5 rows of ss, 10 of sf each; the columns as written (sf, sd1, sd2,
    // ss).
    let rows = run(&mut s, star).pop().unwrap().rows;
    assert_eq!(rows.len(), 50);
    for r in &rows {
        assert_eq!(r.len(), 11, "{r:?}");
        assert_eq!(
            (&r[1], &r[2], &r[3]),
            (&r[5], &r[7], &r[9]),
            "sf's keys and the rows they meet: {r:?}"
        );
        assert_eq!(r[10], aiostore::types::Value::Integer(7), "{r:?}");
    }
    // A condition running a subquery between items keeps the order
    // written (the first two may still turn).
    let with_subquery = star.replace(
        "WHERE ss.tag = 7",
        "WHERE ss.tag = 7 AND sd1.id <> (SELECT min(id) FROM sd2 WHERE sd2.id > sf.amount)",
    );
    let searched = explain_lines(&mut s, &with_subquery);
    run(&mut s, "SET join_collapse_limit = 1");
    assert_eq!(explain_lines(&mut s, &with_subquery), searched);
    run(&mut s, "RESET join_collapse_limit");
    // join_collapse_limit below the items joined: the order written.
    run(&mut s, "SET join_collapse_limit = 3");
    assert_eq!(nodes(&explain_lines(&mut s, star))[0], "Hash Join");
    run(&mut s, "SET join_collapse_limit = 4");
    assert_eq!(nodes(&explain_lines(&mut s, star))[3], "Seq Scan on ss");
    run(&mut s, "RESET join_collapse_limit");
    // The search's bound.
    let e = err(&mut s, "SET join_collapse_limit = 13");
    assert!(
        e.contains("join_collapse_limit") && e.contains("from 1 to 12"),
        "{e}"
    );
}

/// Random tables `r0` … `r4` for the join-order differential: (id, k
/// int, b bigint, t text, n int) of 15 to 700 rows, ids from 0, keys of
/// 30 values with duplicates and NULLs, some columns indexed.
fn order_tables(s: &mut Session, rng: &mut Rng) -> Vec<usize> {
    let mut sizes = vec![15, 40, 100, 300, 700];
    shuffle(rng, &mut sizes);
    for (i, &rows) in sizes.iter().enumerate() {
        let values: Vec<String> = (0..rows)
            .map(|id| {
                format!(
                    "({id}, {}, {}, 't' || {}, {})",
                    rng.key(30, 12),
                    rng.key(30, 10),
                    rng.key(30, 15),
                    rng.key(10, 20)
                )
            })
            .collect();
        run(
            s,
            &format!(
                "CREATE TABLE r{i} (id int, k int, b bigint, t text, n int);
                 INSERT INTO r{i} VALUES {}",
                values.join(", ")
            ),
        );
        for column in ["k", "b", "t", "id"] {
            if rng.next().is_multiple_of(2) {
                run(s, &format!("CREATE INDEX ON r{i} ({column})"));
            }
        }
    }
    run(s, "ANALYZE");
    sizes
}

/// `items` in a random order (Fisher–Yates).
fn shuffle<T>(rng: &mut Rng, items: &mut [T]) {
    for i in (1..items.len()).rev() {
        items.swap(i, (rng.next() % (i as u64 + 1)) as usize);
    }
}

/// A random inner join of two to five of the tables `r0` … `r4` in a
/// random written order: linked as a chain or a star by equalities (int,
/// int against bigint, bigint, text), with a condition that is no
/// equality, one reading three items, and filters of one item, at
/// random; each written in the ON of its last item's JOIN where that ON
/// can see its items, else in WHERE (items joined by a comma or CROSS
/// JOIN); and maybe a LEFT JOIN at the end. Its select list is `*`;
/// returned with the number of items it joins.
fn random_join(rng: &mut Rng) -> (String, usize) {
    let count = 2 + (rng.next() % 4) as usize;
    let mut tables: Vec<usize> = (0..5).collect();
    shuffle(rng, &mut tables);
    tables.truncate(count);
    let name = |p: usize| format!("r{}", tables[p]);
    // (written positions read, the position it is written at, text)
    let mut conds: Vec<(Vec<usize>, usize, String)> = Vec::new();
    let equality = |rng: &mut Rng, x: usize, y: usize| {
        let (a, b) = (name(x), name(y));
        let text = match rng.next() % 4 {
            0 => format!("{a}.k = {b}.k"),
            1 => format!("{a}.k = {b}.b"),
            2 => format!("{a}.t = {b}.t"),
            _ => format!("{b}.b = {a}.b"),
        };
        (vec![x, y], x.max(y), text)
    };
    let mut linked: Vec<usize> = (0..count).collect();
    shuffle(rng, &mut linked);
    if rng.next().is_multiple_of(3) {
        for &p in &linked[1..] {
            conds.push(equality(rng, linked[0], p));
        }
    } else {
        for pair in linked.windows(2) {
            conds.push(equality(rng, pair[0], pair[1]));
        }
    }
    let pick = |rng: &mut Rng| (rng.next() % count as u64) as usize;
    if rng.next().is_multiple_of(2) {
        let (x, y) = (pick(rng), pick(rng));
        if x != y {
            let text = format!("{}.n <= {}.n + 3", name(x), name(y));
            conds.push((vec![x, y], x.max(y), text));
        }
    }
    if count >= 3 && rng.next().is_multiple_of(2) {
        let text = format!("{}.k + {}.n = {}.b", name(0), name(1), name(2));
        conds.push((vec![0, 1, 2], 2, text));
    }
    for p in 0..count {
        if rng.next().is_multiple_of(3) {
            // Written at a later item's ON, where it can be.
            let at = p + (rng.next() % (count - p) as u64) as usize;
            conds.push((vec![p], at, format!("{}.n < 5", name(p))));
        }
    }
    // 0: JOIN … ON, 1: a comma, 2: CROSS JOIN.
    let syntax: Vec<u64> = (0..count).map(|_| rng.next() % 3).collect();
    let mut group_start = 0;
    let mut sql = format!("SELECT * FROM {}", name(0));
    let mut wheres = Vec::new();
    for (p, &joined_by) in syntax.iter().enumerate().skip(1) {
        if joined_by == 1 {
            group_start = p;
        }
        let mut on = Vec::new();
        for (read, at, text) in &conds {
            if *at != p {
                continue;
            }
            if joined_by == 0 && read.iter().all(|&r| r >= group_start) {
                on.push(text.clone());
            } else {
                wheres.push(text.clone());
            }
        }
        match (joined_by, on.is_empty()) {
            (1, _) => sql += &format!(", {}", name(p)),
            (0, false) => sql += &format!(" JOIN {} ON {}", name(p), on.join(" AND ")),
            _ => sql += &format!(" CROSS JOIN {}", name(p)),
        }
    }
    wheres.extend(
        conds
            .iter()
            .filter(|(_, at, _)| *at == 0)
            .map(|(_, _, text)| text.clone()),
    );
    let mut items = count;
    if rng.next().is_multiple_of(3) {
        items += 1;
        // Its ON sees the last comma group only.
        let x = group_start + (rng.next() % (count - group_start) as u64) as usize;
        sql += &format!(
            " LEFT JOIN r{} lj ON lj.id = {}.k AND lj.n < 7",
            rng.next() % 5,
            name(x)
        );
        if rng.next().is_multiple_of(2) {
            wheres.push("(lj.id IS NULL OR lj.n <> 1)".into());
        }
    }
    if !wheres.is_empty() {
        sql += &format!(" WHERE {}", wheres.join(" AND "));
    }
    (sql, items)
}

#[test]
fn random_joins_return_the_same_rows_in_any_order_and_by_any_method() {
    const QUERIES: usize = 30;
    for method in METHODS {
        let (_dir, _path, db) = new_small_pool_db(method, false);
        let mut s = db.session().unwrap();
        for seed in [0x853c_49e6_748f_ea9bu64, 0xda3e_39cb_94b9_5bdb] {
            let mut rng = Rng(seed);
            let sizes = order_tables(&mut s, &mut rng);
            let mut reordered = 0;
            for _ in 0..QUERIES {
                let (query, items) = random_join(&mut rng);
                let searched = sorted_rows(&mut s, &query);
                let plan = explain_lines(&mut s, &query);
                // Every item's columns, in the order written.
                let width = 5 * items;
                assert!(
                    searched.iter().all(|r| r.len() == width),
                    "{method:?} {query}: rows of {width} columns"
                );
                run(&mut s, "SET join_collapse_limit = 1");
                let written_plan = explain_lines(&mut s, &query);
                let written = sorted_rows(&mut s, &query);
                run(&mut s, "RESET join_collapse_limit");
                reordered += usize::from(plan != written_plan);
                assert!(
                    written == searched,
                    "{method:?} {query}: {} rows as written, {} as searched; first difference {:?}\n{written_plan:#?}\n{plan:#?}",
                    written.len(),
                    searched.len(),
                    written.iter().zip(&searched).find(|(w, r)| w != r),
                );
                for (name, settings) in FORCED {
                    run(&mut s, settings);
                    let forced_plan = explain_lines(&mut s, &query);
                    let got = sorted_rows(&mut s, &query);
                    assert!(
                        got == searched,
                        "{method:?} {query}: {name} returned {} rows against {}; first difference {:?}\n{forced_plan:#?}\n{plan:#?}",
                        got.len(),
                        searched.len(),
                        got.iter().zip(&searched).find(|(g, r)| g != r),
                    );
                }
                run(
                    &mut s,
                    "RESET enable_hashjoin; RESET enable_mergejoin; RESET enable_nestloop",
                );
            }
            // The search did reorder: most joins here are written in an
            // order that is not the cheapest.
            assert!(
                reordered >= QUERIES / 3,
                "{method:?}: only {reordered} of {QUERIES} plans differ from the order written (sizes {sizes:?})"
            );
            for i in 0..5 {
                run(&mut s, &format!("DROP TABLE r{i}"));
            }
        }
    }
}

/// A join of two skewed columns: half of each side one value. The
/// estimate matches the common values as PostgreSQL's `eqjoinsel` does
/// (1 001 000 pairs, exactly the rows), where the plain estimate over the
/// distinct count would say about 4 000.
#[test]
fn a_join_estimate_matches_the_most_common_values_of_both_sides() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Sync, false);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE f (k int, x int); CREATE TABLE g (k bigint, y int);
         INSERT INTO f SELECT 1, i FROM generate_series(1, 1000) i;
         INSERT INTO f SELECT i + 1, i FROM generate_series(1, 1000) i;
         INSERT INTO g SELECT 1, i FROM generate_series(1, 1000) i;
         INSERT INTO g SELECT i + 1, i FROM generate_series(1, 1000) i;
         ANALYZE",
    );
    let plan = explain_lines(
        &mut s,
        "(ANALYZE, COSTS ON, BUFFERS OFF, SUMMARY OFF) SELECT count(*) FROM f JOIN g ON f.k = g.k",
    );
    let join = plan
        .iter()
        .find(|l| l.contains("Join"))
        .expect("a join node");
    assert!(
        join.contains("rows=1001000 width") && join.ends_with("(actual rows=1001000 loops=1)"),
        "{plan:#?}"
    );
}
