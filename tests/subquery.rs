//! Subqueries and set operations end to end: agreement with PostgreSQL
//! on a checked-in fixture of queries (`tests/fixtures/pg_subquery.tsv`,
//! made by `tests/fixtures/pg_subquery.sh` from a real PostgreSQL 15 over
//! the tables of `pg_subquery_setup.sql`), how often a subquery runs
//! (once, hashed, per row) as EXPLAIN ANALYZE counts it, EXPLAIN's shapes,
//! subqueries in INSERT, UPDATE and DELETE, UNION and IN beyond
//! `work_mem`, and the limits. One I/O method: what is tested here is
//! above the I/O layer.

mod common;

use std::sync::Arc;

use aiostore::config::IoMethod;
use aiostore::database::{Database, Session};
use aiostore::sql::{self, format_value, SqlError, StatementResult};
use aiostore::types::Value;
use common::temp_dir;

fn new_db(extra: &[&str]) -> (tempfile::TempDir, Arc<Database>) {
    let dir = temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    let mut settings = vec![
        format!("io_method={}", IoMethod::Sync.name()),
        "shared_buffers=64".into(),
        "max_sessions=8".into(),
    ];
    settings.extend(extra.iter().map(|x| x.to_string()));
    let db = Database::open(&path, &settings).unwrap();
    (dir, db)
}

fn run(s: &mut Session, text: &str) -> Vec<StatementResult> {
    sql::execute(s, text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn last(s: &mut Session, text: &str) -> StatementResult {
    run(s, text).pop().expect("a statement")
}

fn error(s: &mut Session, text: &str) -> SqlError {
    match sql::execute(s, text) {
        Ok(r) => panic!("{text}: expected an error, got {r:?}"),
        Err(e) => e,
    }
}

/// The one column of the last statement's rows, printed as psql prints
/// them (NULL as NULL).
fn column(s: &mut Session, text: &str) -> Vec<String> {
    last(s, text).rows.iter().map(|r| print(&r[0])).collect()
}

fn print(v: &Value) -> String {
    match v {
        Value::Null => "NULL".into(),
        v => format_value(v),
    }
}

/// EXPLAIN's lines for `query` (which may begin with options in
/// parentheses), without estimates.
fn explain(s: &mut Session, query: &str) -> Vec<String> {
    let explain = match query.strip_prefix('(') {
        Some(options) => format!("EXPLAIN (COSTS OFF, {options}"),
        None => format!("EXPLAIN (COSTS OFF) {query}"),
    };
    last(s, &explain)
        .rows
        .iter()
        .map(|r| format_value(&r[0]))
        .collect()
}

/// EXPLAIN (ANALYZE, BUFFERS OFF, SUMMARY OFF)'s lines for `query`.
fn explain_analyze(s: &mut Session, query: &str) -> Vec<String> {
    explain(s, &format!("(ANALYZE, BUFFERS OFF, SUMMARY OFF) {query}"))
}

/// The fixture's tables in a new database.
fn fixture_session() -> (tempfile::TempDir, Arc<Database>, Session) {
    let (dir, db) = new_db(&[]);
    let mut s = db.session().unwrap();
    let setup = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/pg_subquery_setup.sql"
    ))
    .unwrap();
    run(&mut s, &setup);
    (dir, db, s)
}

/// One line of the fixture: a query, and PostgreSQL's column names and
/// rows (values between `|`) or its error.
struct Case {
    query: String,
    outcome: Result<(String, Vec<String>), String>,
}

fn fixture() -> Vec<Case> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/pg_subquery.tsv"
    );
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let mut fields = l.split('\t');
            let (Some(query), Some(status), Some(first)) =
                (fields.next(), fields.next(), fields.next())
            else {
                panic!("fixture line without three fields: {l:?}");
            };
            let outcome = match status {
                "ok" => Ok((first.to_string(), fields.map(str::to_string).collect())),
                "error" => Err(first.to_string()),
                other => panic!("fixture status {other:?} in {l:?}"),
            };
            Case {
                query: query.to_string(),
                outcome,
            }
        })
        .collect()
}

#[test]
fn every_fixture_query_returns_or_fails_as_postgresql_does() {
    let cases = fixture();
    assert!(cases.len() >= 80, "only {} cases", cases.len());
    let (_dir, _db, mut s) = fixture_session();
    let mut disagreements = Vec::new();
    for case in &cases {
        let ordered = case.query.to_uppercase().contains("ORDER BY");
        let got = sql::execute(&mut s, &case.query).map(|mut results| {
            let r = results.pop().expect("one statement");
            let names: Vec<&str> = r.columns.iter().map(|c| c.name.as_str()).collect();
            let rows: Vec<String> = r
                .rows
                .iter()
                .map(|row| row.iter().map(print).collect::<Vec<_>>().join("|"))
                .collect();
            (names.join("|"), rows)
        });
        let agrees = match (&got, &case.outcome) {
            (Ok((names, rows)), Ok((pg_names, pg_rows))) => {
                let (mut rows, mut pg_rows) = (rows.clone(), pg_rows.clone());
                if !ordered {
                    rows.sort();
                    pg_rows.sort();
                }
                names == pg_names && rows == pg_rows
            }
            // Our messages add where and what to do; PostgreSQL's text
            // must be in them.
            (Err(e), Err(pg)) => e.to_string().contains(pg.as_str()),
            _ => false,
        };
        if !agrees {
            disagreements.push(format!(
                "{}\n    PostgreSQL: {:?}\n    aiostore:   {:?}",
                case.query,
                case.outcome,
                got.map_err(|e| e.to_string())
            ));
        }
    }
    assert!(
        disagreements.is_empty(),
        "{} of {} queries disagree:\n{}",
        disagreements.len(),
        cases.len(),
        disagreements.join("\n")
    );
}

#[test]
fn explain_shows_subplans_initplans_and_set_operations_as_postgresql_does() {
    let (_dir, _db, mut s) = fixture_session();
    assert_eq!(
        explain(&mut s, "SELECT * FROM t WHERE a = (SELECT max(x) FROM u)"),
        [
            "Seq Scan on t",
            "  Filter: (a = $0)",
            "  InitPlan 1 (returns $0)",
            "    ->  Aggregate",
            "          ->  Seq Scan on u",
        ]
    );
    assert_eq!(
        explain(
            &mut s,
            "SELECT * FROM t WHERE a NOT IN (SELECT x FROM u) ORDER BY a"
        ),
        [
            "Sort",
            "  Sort Key: a",
            "  ->  Seq Scan on t",
            "        Filter: (NOT (hashed SubPlan 1))",
            "        SubPlan 1",
            "          ->  Seq Scan on u",
        ]
    );
    // A select list's subquery shows under the scan computing the list.
    assert_eq!(
        explain(&mut s, "SELECT a, (SELECT y FROM u WHERE u.x = t.a) FROM t"),
        [
            "Seq Scan on t",
            "  SubPlan 1",
            "    ->  Seq Scan on u",
            "          Filter: (u.x = t.a)",
        ]
    );
    assert_eq!(
        explain(&mut s, "SELECT a FROM t UNION SELECT x FROM u"),
        [
            "HashAggregate",
            "  Group Key: a",
            "  ->  Append",
            "        ->  Seq Scan on t",
            "        ->  Seq Scan on u",
        ]
    );
    assert_eq!(
        explain(
            &mut s,
            "SELECT a FROM t UNION ALL SELECT x FROM u ORDER BY 1 LIMIT 2"
        ),
        [
            "Limit",
            "  ->  Sort",
            "        Sort Key: a",
            "        ->  Append",
            "              ->  Seq Scan on t",
            "              ->  Seq Scan on u",
        ]
    );
    assert_eq!(
        explain(&mut s, "SELECT a FROM t EXCEPT ALL SELECT x FROM u"),
        [
            "HashSetOp Except All",
            "  ->  Append",
            "        ->  Seq Scan on t",
            "        ->  Seq Scan on u",
        ]
    );
    assert_eq!(
        explain(
            &mut s,
            "SELECT * FROM (SELECT a FROM t WHERE a > 1) AS s JOIN u ON s.a = u.x WHERE s.a < 3"
        ),
        // The hash table built from the subquery's few rows, u probing
        // it (the sides commute, as in PostgreSQL's plan, which pulls the
        // subquery up and shows no Subquery Scan); the condition shows
        // the probing side first.
        [
            "Hash Join",
            "  Hash Cond: (u.x = s.a)",
            "  ->  Seq Scan on u",
            "  ->  Subquery Scan on s",
            "        Filter: (s.a < 3)",
            "        ->  Seq Scan on t",
            "              Filter: (a > 1)",
        ]
    );
    // A correlated subquery in a join's condition shows under the join,
    // after its inputs.
    assert_eq!(
        explain(
            &mut s,
            "SELECT * FROM t JOIN u ON t.a = u.x \
             AND u.y <> (SELECT min(y) FROM u u2 WHERE u2.x = t.a)"
        ),
        [
            "Hash Join",
            "  Hash Cond: (t.a = u.x)",
            "  Join Filter: (u.y <> (SubPlan 1))",
            "  ->  Seq Scan on t",
            "  ->  Seq Scan on u",
            "  SubPlan 1",
            "    ->  Aggregate",
            "          ->  Seq Scan on u u2",
            "                Filter: (u2.x = t.a)",
        ]
    );
}

/// The `loops=` of the first line of `lines` containing `what`.
fn loops(lines: &[String], what: &str) -> u64 {
    let line = lines
        .iter()
        .find(|l| l.contains(what))
        .unwrap_or_else(|| panic!("no {what:?} in {lines:#?}"));
    let at = line.find("loops=").expect("ANALYZE shows loops") + "loops=".len();
    line[at..].trim_end_matches(')').parse().unwrap()
}

#[test]
fn uncorrelated_subqueries_run_once_and_correlated_ones_once_per_row() {
    let (_dir, db) = new_db(&[]);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE big (id integer, g integer);
         INSERT INTO big SELECT i, i % 10 FROM generate_series(1, 1000) i;
         CREATE TABLE small (g integer, name text);
         INSERT INTO small SELECT i, 'g' || i FROM generate_series(0, 4) i",
    );
    // InitPlan: once, whatever the rows.
    let lines = explain_analyze(
        &mut s,
        "SELECT count(*) FROM big WHERE g = (SELECT max(g) FROM small)",
    );
    assert_eq!(loops(&lines, "Seq Scan on small"), 1, "{lines:#?}");
    // Hashed IN: one run builds the set.
    let lines = explain_analyze(
        &mut s,
        "SELECT count(*) FROM big WHERE g IN (SELECT g FROM small)",
    );
    assert!(
        lines.iter().any(|l| l.contains("(hashed SubPlan 1)")),
        "{lines:#?}"
    );
    assert_eq!(loops(&lines, "Seq Scan on small"), 1, "{lines:#?}");
    // Correlated: once per outer row, through the scan's rescan.
    let lines = explain_analyze(
        &mut s,
        "SELECT count(*) FROM big WHERE id <= 20 AND EXISTS (SELECT 1 FROM small WHERE small.g = big.g)",
    );
    assert_eq!(loops(&lines, "Seq Scan on small"), 20, "{lines:#?}");
    assert_eq!(
        column(
            &mut s,
            "SELECT count(*) FROM big WHERE EXISTS (SELECT 1 FROM small WHERE small.g = big.g)"
        ),
        ["500"]
    );
    assert_eq!(
        column(
            &mut s,
            "SELECT count(*) FROM big WHERE g NOT IN (SELECT g FROM small WHERE small.name <> 'g' || big.g)"
        ),
        ["1000"]
    );
    // A correlated subquery with LIMIT and ORDER BY starts over each time.
    assert_eq!(
        column(
            &mut s,
            "SELECT sum((SELECT b.id FROM big b WHERE b.g = small.g ORDER BY b.id DESC LIMIT 1)) FROM small"
        ),
        // The largest id of each g in 0..=4.
        [(1000 + 991 + 992 + 993 + 994).to_string()]
    );
}

#[test]
fn insert_update_and_delete_take_subqueries() {
    let (_dir, _db, mut s) = fixture_session();
    run(
        &mut s,
        "CREATE TABLE r (a integer, b text);
         INSERT INTO r SELECT a, b FROM t UNION SELECT x, y FROM u;
         INSERT INTO r VALUES ((SELECT max(x) FROM u) + 1, (SELECT min(y) FROM u))",
    );
    // (1, 'one') is in both.
    assert_eq!(column(&mut s, "SELECT count(*) FROM r"), ["9"]);
    assert_eq!(column(&mut s, "SELECT b FROM r WHERE a = 6"), ["drei"],);
    let r = last(
        &mut s,
        "UPDATE r SET b = (SELECT max(y) FROM u WHERE u.x = r.a) WHERE a IN (SELECT x FROM u)",
    );
    assert_eq!(r.tag, "UPDATE 5");
    assert_eq!(
        column(&mut s, "SELECT b FROM r WHERE a IN (1, 3, 5) ORDER BY a, b"),
        ["one", "trois", "trois", "trois", "five"]
    );
    let r = last(
        &mut s,
        "DELETE FROM r WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.a = r.a)",
    );
    assert_eq!(r.tag, "DELETE 3");
    assert_eq!(
        column(&mut s, "SELECT a FROM r ORDER BY a"),
        ["1", "2", "2", "3", "3", "3"]
    );
    // NOT IN over a NULL matches nothing, as in PostgreSQL.
    let r = last(&mut s, "DELETE FROM r WHERE a NOT IN (SELECT x FROM n)");
    assert_eq!(r.tag, "DELETE 0");
}

#[test]
fn union_and_in_beyond_work_mem_spill_or_fall_back_and_stay_correct() {
    let (_dir, db) = new_db(&["work_mem=64kB"]);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE a (x integer); CREATE TABLE b (x integer);
         INSERT INTO a SELECT i FROM generate_series(1, 30000) i;
         INSERT INTO b SELECT i FROM generate_series(20001, 50000) i",
    );
    let lines = explain_analyze(&mut s, "SELECT x FROM a UNION SELECT x FROM b");
    assert!(
        lines.iter().any(|l| l.contains("Disk Usage")),
        "the union spilled: {lines:#?}"
    );
    assert_eq!(
        column(
            &mut s,
            "SELECT count(*) FROM (SELECT x FROM a UNION SELECT x FROM b) u"
        ),
        ["50000"]
    );
    assert_eq!(
        column(
            &mut s,
            "SELECT count(*) FROM (SELECT x FROM a INTERSECT SELECT x FROM b) u"
        ),
        ["10000"]
    );
    assert_eq!(
        column(
            &mut s,
            "SELECT count(*) FROM (SELECT x FROM a EXCEPT SELECT x FROM b) u"
        ),
        ["20000"]
    );
    // 30 000 values exceed 64kB: the hashed IN runs per row instead,
    // reading b again each time; a few rows keep that short. One run
    // gave up building the set, then one run for each of the 10 rows.
    let lines = explain_analyze(
        &mut s,
        "SELECT count(*) FROM a WHERE x > 29990 AND x IN (SELECT x FROM b)",
    );
    assert_eq!(loops(&lines, "Seq Scan on b"), 11, "{lines:#?}");
    assert_eq!(
        column(
            &mut s,
            "SELECT count(*) FROM a WHERE x > 29990 AND x IN (SELECT x FROM b)"
        ),
        ["10"]
    );
    assert_eq!(
        column(
            &mut s,
            "SELECT count(*) FROM a WHERE x > 19995 AND x < 20005 AND x NOT IN (SELECT x FROM b)"
        ),
        ["5"]
    );
}

#[test]
fn subqueries_nest_to_a_bound_and_are_refused_where_they_cannot_run() {
    let (_dir, db) = new_db(&[]);
    let mut s = db.session().unwrap();
    let nested = |levels: usize| {
        let mut q = "SELECT 1".to_string();
        for _ in 0..levels {
            q = format!("SELECT ({q}) + 1");
        }
        q
    };
    assert_eq!(column(&mut s, &nested(40)), ["41"]);
    let e = error(&mut s, &nested(100));
    assert!(matches!(e, SqlError::TooDeep { .. }), "{e}");
    let mut from = "SELECT 1 AS x".to_string();
    for i in 0..40 {
        from = format!("SELECT x + 1 AS x FROM ({from}) AS s{i}");
    }
    assert_eq!(column(&mut s, &from), ["41"]);
    run(&mut s, "CREATE TABLE t (a integer)");
    for (query, expected) in [
        (
            "SELECT a FROM t GROUP BY (SELECT 1)",
            "a subquery in GROUP BY is not supported",
        ),
        (
            "SELECT * FROM t LIMIT (SELECT 1)",
            "a subquery in LIMIT is not supported",
        ),
        (
            "SELECT * FROM t, LATERAL (SELECT t.a) AS s",
            "LATERAL is not supported",
        ),
    ] {
        let e = error(&mut s, query);
        assert!(e.to_string().contains(expected), "{query}: {e}");
    }
    // A FROM subquery does not see the other items of its FROM.
    let e = error(&mut s, "SELECT * FROM t, (SELECT t.a) AS s");
    assert!(
        e.to_string()
            .contains("missing FROM-clause entry for table \"t\""),
        "{e}"
    );
}
