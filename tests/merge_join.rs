//! Merge joins end to end: on randomised tables (keys with duplicates and
//! NULLs, one and two key columns, integer against bigint and numeric,
//! text) a merge join (`enable_hashjoin = off`) returns the rows a hash
//! join and a nested loop (`enable_mergejoin = off` too) return, for inner
//! and left joins, with extra ON conditions and joins of three tables;
//! EXPLAIN's shape as PostgreSQL 15 prints it; a merge join inside a
//! correlated subquery, rescanned per outer row; and a duplicate group far
//! bigger than `work_mem`. One I/O method: nothing here is about I/O.

mod common;

use std::sync::Arc;

use aiostore::config::IoMethod;
use aiostore::database::{Database, Session};
use aiostore::types::Value;
use common::{plan_lines, run, sorted_rows, temp_dir, Rng};

fn new_db() -> (tempfile::TempDir, Arc<Database>) {
    let dir = temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    let settings = vec![
        format!("io_method={}", IoMethod::Sync.name()),
        "shared_buffers=64".into(),
        "max_sessions=4".into(),
    ];
    let db = Database::open(&path, &settings).unwrap();
    (dir, db)
}

fn rows(s: &mut Session, text: &str) -> Vec<Vec<Value>> {
    run(s, text).pop().expect("a statement").rows
}

/// The join nodes of a plan, top down: "Merge Join", "Hash Left Join", ….
fn join_nodes(s: &mut Session, query: &str) -> Vec<String> {
    plan_lines(s, &format!("EXPLAIN (COSTS OFF) {query}"))
        .into_iter()
        .map(|l| l.trim_start().trim_start_matches("->  ").to_string())
        .filter(|l| l.ends_with("Join") || l.starts_with("Nested Loop"))
        .collect()
}

/// Tables a, b, c, d with random keys: duplicates on every side, NULLs,
/// keys one side has and the other not; b.k is bigint and d.n numeric, so
/// that keys compare across types; v is text.
fn random_tables(s: &mut Session, seed: u64) {
    let mut rng = Rng(seed);
    run(
        s,
        "CREATE TABLE a (id int, k int, j int, v text);
         CREATE TABLE b (id int, k bigint, j int, v text);
         CREATE TABLE c (id int, k int);
         CREATE TABLE d (id int, n numeric(6,2))",
    );
    for (table, count) in [("a", 300), ("b", 400), ("c", 150), ("d", 120)] {
        let values: Vec<String> = (0..count)
            .map(|id| match table {
                "a" | "b" => {
                    let v = match rng.key(12, 8).as_str() {
                        "NULL" => "NULL".to_string(),
                        v => format!("'v{v}'"),
                    };
                    format!("({id}, {}, {}, {v})", rng.key(40, 9), rng.key(3, 10))
                }
                "c" => format!("({id}, {})", rng.key(30, 7)),
                _ => {
                    // Whole numbers at several scales (equal to integers)
                    // and some that equal none.
                    let n = match rng.below(4) {
                        0 => "NULL".to_string(),
                        1 => format!("{}.50", rng.below(40)),
                        2 => format!("{}.00", rng.below(40)),
                        _ => format!("{}", rng.below(40)),
                    };
                    format!("({id}, {n})")
                }
            })
            .collect();
        run(
            s,
            &format!("INSERT INTO {table} VALUES {}", values.join(", ")),
        );
    }
}

/// The method each setting combination is meant to force, and how.
/// Each join method, forced as PostgreSQL's tests force one: the other
/// two turned off (the planner chooses by cost among those on).
const METHODS: [(&str, &str, &str); 3] = [
    (
        "hash",
        "Hash",
        "RESET enable_hashjoin; SET enable_mergejoin = off; SET enable_nestloop = off",
    ),
    (
        "merge",
        "Merge",
        "SET enable_hashjoin = off; RESET enable_mergejoin; SET enable_nestloop = off",
    ),
    (
        "nested loop",
        "Nested Loop",
        "SET enable_hashjoin = off; SET enable_mergejoin = off; RESET enable_nestloop",
    ),
];

const DIFFERENTIAL_QUERIES: &[&str] = &[
    // One key, inner and left, int against bigint.
    "SELECT a.id, b.id FROM a JOIN b ON a.k = b.k",
    "SELECT a.id, b.id FROM a LEFT JOIN b ON b.k = a.k",
    // Two keys.
    "SELECT a.id, b.id FROM a JOIN b ON a.k = b.k AND a.j = b.j",
    "SELECT a.id, b.id, b.v FROM a LEFT JOIN b ON a.j = b.j AND b.k = a.k",
    // Extra conditions that are no equality between the sides: a join
    // filter on the matched pairs (for a left join, an outer row all of
    // whose pairs fail comes back with NULLs), and ones on one side.
    "SELECT a.id, b.id FROM a JOIN b ON a.k = b.k AND a.id < b.id",
    "SELECT a.id, b.id FROM a LEFT JOIN b ON a.k = b.k AND a.id + b.id > 300",
    "SELECT a.id, b.id FROM a LEFT JOIN b ON a.k = b.k AND b.id % 3 <> 0 AND a.j <> b.j",
    "SELECT a.id, b.id FROM a, b WHERE a.k = b.k AND a.j < b.j AND b.id > 50",
    // Text keys; an integer against a numeric.
    "SELECT a.id, b.id FROM a JOIN b ON a.v = b.v AND a.j = b.j",
    "SELECT a.id, b.id FROM a LEFT JOIN b ON b.v = a.v",
    "SELECT a.id, d.id FROM a JOIN d ON a.k = d.n",
    "SELECT d.id, a.id FROM d LEFT JOIN a ON d.n = a.k",
    // Three tables: the second join's outer side is the first's result.
    "SELECT a.id, b.id, c.id FROM a JOIN b ON a.k = b.k JOIN c ON c.k = b.j",
    "SELECT a.id, b.id, c.id FROM a LEFT JOIN b ON a.k = b.k LEFT JOIN c ON c.k = a.j AND c.id > b.id",
    "SELECT a.id, c.id, b.id FROM a JOIN c ON a.k = c.k LEFT JOIN b ON b.k = c.k AND b.j = a.j",
    "SELECT c.id, a.id, d.id FROM c, a, d WHERE c.k = a.j AND d.n = a.k",
    // Aggregated, so that duplicates count.
    "SELECT count(*), count(b.id), sum(a.id + b.id) FROM a LEFT JOIN b ON a.k = b.k",
];

/// Runs `query` with each method forced and asserts that all return the
/// hash join's rows. Returns the merge join's plan.
fn compare_methods(s: &mut Session, query: &str) -> Vec<String> {
    let mut results = Vec::new();
    let mut merge_plan = Vec::new();
    for (name, node, settings) in METHODS {
        run(s, settings);
        let joins = join_nodes(s, query);
        assert!(
            !joins.is_empty() && joins.iter().all(|j| j.starts_with(node)),
            "{query}: {name} planned {joins:?}"
        );
        if node == "Merge" {
            merge_plan = plan_lines(s, &format!("EXPLAIN (COSTS OFF) {query}"));
        }
        results.push((name, sorted_rows(s, query)));
    }
    let (_, by_hash) = &results[0];
    // (An aggregate's one row counts the pairs itself.)
    assert!(
        by_hash.len() > 20 || query.contains("count(*)"),
        "{query}: a join worth comparing, {} rows",
        by_hash.len()
    );
    for (name, got) in &results[1..] {
        assert!(
            got == by_hash,
            "{query}: {name} returned {} rows against the hash join's {}; first difference {:?}",
            got.len(),
            by_hash.len(),
            got.iter().zip(by_hash).find(|(g, h)| g != h)
        );
    }
    merge_plan
}

/// Whether a merge join of `plan` reads its outer (first) input, and
/// whether its inner input, straight from an index scan in key order.
fn merge_inputs_from_indexes(plan: &[String]) -> (bool, bool) {
    // Where a line's node title starts: after its indent and its arrow.
    let title_at = |l: &str| {
        let indent = l.len() - l.trim_start().len();
        indent
            + if l.trim_start().starts_with("->") {
                4
            } else {
                0
            }
    };
    let Some(at) = plan
        .iter()
        .position(|l| l.contains("Merge Join") || l.contains("Merge Left Join"))
    else {
        return (false, false);
    };
    let children_at = title_at(&plan[at]) + 2;
    let inputs: Vec<&String> = plan[at + 1..]
        .iter()
        .filter(|l| {
            l.trim_start().starts_with("->") && l.len() - l.trim_start().len() == children_at
        })
        .collect();
    let from_index = |l: Option<&&String>| l.is_some_and(|l| l.contains("Index"));
    (from_index(inputs.first()), from_index(inputs.get(1)))
}

#[test]
fn merge_join_returns_the_rows_of_hash_join_and_nested_loop_on_random_tables() {
    let (_dir, db) = new_db();
    let mut s = db.session().unwrap();
    for seed in [0x9e37_79b9_7f4a_7c15u64, 0x2545_f491_4f6c_dd1d] {
        random_tables(&mut s, seed);
        for query in DIFFERENTIAL_QUERIES {
            compare_methods(&mut s, query);
        }
        // Again with indexes on the keys (the nested loops then search
        // them; at this size the merge joins still sort).
        run(
            &mut s,
            "CREATE INDEX ON a (k); CREATE INDEX ON b (k); CREATE INDEX ON a (j, k);
             CREATE INDEX ON b (j, k); CREATE INDEX ON c (k); CREATE INDEX ON a (v, j);
             CREATE INDEX ON b (v, j); ANALYZE",
        );
        for query in DIFFERENTIAL_QUERIES {
            compare_methods(&mut s, query);
        }
        run(
            &mut s,
            "RESET enable_hashjoin; RESET enable_mergejoin; DROP TABLE a; DROP TABLE b; DROP TABLE c; DROP TABLE d",
        );
    }
}

/// Large enough that an index scan in key order costs less than a sort:
/// a forced merge join reads both sides from their indexes, outer side
/// too (PostgreSQL 15's plan for it), and returns the hash join's rows,
/// NULL and duplicate keys included, inner and left.
#[test]
fn a_merge_join_reads_both_sides_in_key_order_from_their_indexes() {
    let (_dir, db) = new_db();
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE p (id int PRIMARY KEY, v text);
         CREATE TABLE q (id int, p_id bigint, w int);
         INSERT INTO p SELECT i, 'p' || i FROM generate_series(1, 20000) i;
         INSERT INTO q SELECT i, (i * 7) % 25000, i % 10 FROM generate_series(1, 40000) i;
         UPDATE q SET p_id = NULL WHERE id % 97 = 0;
         CREATE INDEX ON q (p_id);
         VACUUM ANALYZE",
    );
    // (outer side, inner side) read from an index. A tenth of q, filtered,
    // costs less sorted than read whole in key order. (Half of q filtered
    // was a choice close enough for ANALYZE's random sample to flip it.)
    let queries = [
        (
            "SELECT p.id, q.id FROM p JOIN q ON q.p_id = p.id",
            (true, true),
        ),
        // (A join filter reading p alone: a left join keeps every p row.)
        (
            "SELECT p.id, q.id, q.w FROM p LEFT JOIN q ON q.p_id = p.id AND p.v <> 'p7'",
            (true, true),
        ),
        (
            "SELECT q.id, p.v FROM q JOIN p ON p.id = q.p_id WHERE q.w = 3",
            (false, true),
        ),
    ];
    for (query, from_indexes) in queries {
        let plan = compare_methods(&mut s, query);
        assert_eq!(
            merge_inputs_from_indexes(&plan),
            from_indexes,
            "{query}: {plan:#?}"
        );
    }
    let (_, _, merge_only) = METHODS[1];
    run(&mut s, merge_only);
    assert_eq!(
        plan_lines(&mut s, &format!("EXPLAIN (COSTS OFF) {}", queries[0].0)),
        [
            "Merge Join",
            "  Merge Cond: (p.id = q.p_id)",
            "  ->  Index Only Scan using p_pkey on p",
            "  ->  Index Scan using q_p_id_idx on q",
        ]
    );
}

#[test]
fn explain_shows_a_merge_join_as_postgresql_does() {
    let (_dir, db) = new_db();
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE a (id int, k int, j int);
         CREATE TABLE b (id int, k bigint, j int);
         CREATE TABLE c (id int, k int);
         SET enable_hashjoin = off",
    );
    // Each checked against PostgreSQL 15's EXPLAIN (COSTS OFF) of the
    // same query on the same (empty) tables, where PostgreSQL put the
    // tables in the written order.
    let cases: &[(&str, &[&str])] = &[
        (
            "SELECT a.id, b.id FROM a JOIN b ON b.k = a.k",
            &[
                "Merge Join",
                "  Merge Cond: (a.k = b.k)",
                "  ->  Sort",
                "        Sort Key: a.k",
                "        ->  Seq Scan on a",
                "  ->  Sort",
                "        Sort Key: b.k",
                "        ->  Seq Scan on b",
            ],
        ),
        (
            "SELECT a.id, b.id FROM a LEFT JOIN b ON a.j = b.j AND b.k = a.k AND a.id < b.id",
            &[
                "Merge Left Join",
                "  Merge Cond: ((a.j = b.j) AND (a.k = b.k))",
                "  Join Filter: (a.id < b.id)",
                "  ->  Sort",
                "        Sort Key: a.j, a.k",
                "        ->  Seq Scan on a",
                "  ->  Sort",
                "        Sort Key: b.j, b.k",
                "        ->  Seq Scan on b",
            ],
        ),
        (
            "SELECT a.id, c.id FROM a JOIN c ON a.k = c.k AND a.j = c.id",
            &[
                "Merge Join",
                "  Merge Cond: ((a.k = c.k) AND (a.j = c.id))",
                "  ->  Sort",
                "        Sort Key: a.k, a.j",
                "        ->  Seq Scan on a",
                "  ->  Sort",
                "        Sort Key: c.k, c.id",
                "        ->  Seq Scan on c",
            ],
        ),
    ];
    for (query, expected) in cases {
        assert_eq!(
            plan_lines(&mut s, &format!("EXPLAIN (COSTS OFF) {query}")),
            *expected,
            "{query}"
        );
    }
    // Three tables: the first join is the second's outer side.
    assert_eq!(
        plan_lines(
            &mut s,
            "EXPLAIN (COSTS OFF) SELECT a.id FROM a JOIN b ON a.k = b.k JOIN c ON c.k = b.j"
        ),
        [
            "Merge Join",
            "  Merge Cond: (b.j = c.k)",
            "  ->  Sort",
            "        Sort Key: b.j",
            "        ->  Merge Join",
            "              Merge Cond: (a.k = b.k)",
            "              ->  Sort",
            "                    Sort Key: a.k",
            "                    ->  Seq Scan on a",
            "              ->  Sort",
            "                    Sort Key: b.k",
            "                    ->  Seq Scan on b",
            "  ->  Sort",
            "        Sort Key: c.k",
            "        ->  Seq Scan on c",
        ]
    );
    // With nested loops off too, a merge join all the same; with merge
    // joins off, a nested loop; with every method off, as PostgreSQL, a
    // join all the same (a hash join here).
    let query = "EXPLAIN (COSTS OFF) SELECT a.id FROM a JOIN b ON a.k = b.k";
    for (settings, first) in [
        ("SET enable_nestloop = off", "Merge Join"),
        (
            "RESET enable_nestloop; SET enable_mergejoin = off",
            "Nested Loop",
        ),
        ("SET enable_nestloop = off", "Hash Join"),
        (
            "RESET enable_nestloop; RESET enable_mergejoin; RESET enable_hashjoin",
            "Hash Join",
        ),
    ] {
        run(&mut s, settings);
        assert_eq!(plan_lines(&mut s, query)[0], first, "{settings}");
    }
    // A join without an equality has no keys to merge on.
    run(&mut s, "SET enable_hashjoin = off");
    assert_eq!(
        plan_lines(
            &mut s,
            "EXPLAIN (COSTS OFF) SELECT a.id FROM a JOIN b ON a.k < b.k"
        )[0],
        "Nested Loop"
    );
}

#[test]
fn explain_analyze_counts_a_merge_joins_rows_and_what_its_filter_removed() {
    let (_dir, db) = new_db();
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE a (id int, k int);
         CREATE TABLE b (id int, k int);
         INSERT INTO a SELECT i, i % 10 FROM generate_series(1, 100) AS g(i);
         INSERT INTO b SELECT i, i % 5 FROM generate_series(1, 20) AS g(i);
         SET enable_hashjoin = off",
    );
    // Keys 0..4 of a (50 rows) each meet 4 rows of b: 200 pairs, of which
    // the filter keeps those with a.id < b.id.
    let kept = rows(
        &mut s,
        "SELECT count(*) FROM a JOIN b ON a.k = b.k AND a.id < b.id",
    );
    let kept = match kept[0][0] {
        Value::BigInt(n) => n,
        ref other => panic!("{other:?}"),
    };
    assert!(kept > 0 && kept < 200, "{kept}");
    let lines = plan_lines(
        &mut s,
        "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT a.id, b.id FROM a JOIN b ON a.k = b.k AND a.id < b.id",
    );
    assert_eq!(
        lines[..3],
        [
            format!("Merge Join (actual rows={kept} loops=1)"),
            "  Merge Cond: (a.k = b.k)".to_string(),
            "  Join Filter: (a.id < b.id)".to_string(),
        ]
    );
    assert_eq!(
        lines[3],
        format!("  Rows Removed by Join Filter: {}", 200 - kept)
    );
}

#[test]
fn a_merge_join_in_a_correlated_subquery_is_rescanned_per_outer_row() {
    let (_dir, db) = new_db();
    let mut s = db.session().unwrap();
    random_tables(&mut s, 0x1234_5678_9abc_def1);
    let query = "SELECT c.id, (SELECT count(*) FROM a JOIN b ON a.k = b.k AND a.j = b.j \
                 WHERE b.id > c.id * 2) FROM c";
    let mut results = Vec::new();
    for (name, node, settings) in METHODS {
        run(&mut s, settings);
        let joins = join_nodes(&mut s, query);
        assert!(
            joins.len() == 1 && joins[0].starts_with(node),
            "{name}: {joins:?}"
        );
        results.push(sorted_rows(&mut s, query));
    }
    assert_eq!(results[0].len(), 150);
    let mut counts: Vec<String> = results[0].iter().map(|r| format!("{:?}", r[1])).collect();
    counts.sort();
    counts.dedup();
    assert!(
        counts.len() > 10,
        "the counts differ by outer row: {counts:?}"
    );
    assert_eq!(results[1], results[0], "merge join against hash join");
    assert_eq!(results[2], results[0], "nested loop against hash join");
    // The join ran once per row of c: a rescan each time after the first.
    run(&mut s, METHODS[1].2);
    let lines = plan_lines(
        &mut s,
        &format!("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) {query}"),
    );
    let merge = lines
        .iter()
        .find(|l| l.contains("Merge Join"))
        .unwrap_or_else(|| panic!("{lines:#?}"));
    assert!(merge.ends_with("loops=150)"), "{merge}");
}

#[test]
fn a_duplicate_group_far_beyond_work_mem_is_replayed_from_a_file() {
    let (_dir, db) = new_db();
    let mut s = db.session().unwrap();
    // 20 000 inner rows of key 1 (about 2 MB as rows) against 64kB of
    // work_mem, met by 7 outer rows of key 1, around rows of other keys
    // each side has once (the outer side 14 of 30), and NULLs.
    run(
        &mut s,
        "CREATE TABLE a (id int, k int);
         CREATE TABLE b (id int, k int, pad text);
         INSERT INTO a SELECT i, 1 FROM generate_series(3, 21, 3) AS g(i);
         INSERT INTO a SELECT i, i + 100 FROM generate_series(1, 21) AS g(i) WHERE i % 3 <> 0;
         INSERT INTO a VALUES (100, NULL);
         INSERT INTO b SELECT i, 1, repeat('x', 40) FROM generate_series(1, 20000) AS g(i);
         INSERT INTO b SELECT 100500 + i, 100 + i, NULL FROM generate_series(1, 30) AS g(i);
         INSERT INTO b VALUES (0, NULL, NULL);
         SET work_mem = '64kB';
         SET enable_hashjoin = off",
    );
    let query = "SELECT count(*), count(b.id), sum(a.id), sum(b.id) FROM a LEFT JOIN b ON a.k = b.k AND b.id % 1000 <> a.id";
    assert!(join_nodes(&mut s, query)[0].starts_with("Merge"));
    let by_merge = rows(&mut s, query);
    run(&mut s, "RESET enable_hashjoin");
    assert!(join_nodes(&mut s, query)[0].starts_with("Hash"));
    let by_hash = rows(&mut s, query);
    assert_eq!(by_merge, by_hash);
    // 7 outer rows of key 1, each meeting the 20 000 less the 20 its
    // filter drops; the 14 others meet their key once; the NULL key meets
    // nothing and comes back once.
    assert_eq!(
        by_merge[0][..2],
        [
            Value::BigInt(7 * (20_000 - 20) + 14 + 1),
            Value::BigInt(7 * (20_000 - 20) + 14)
        ],
        "{by_merge:?}"
    );
}
