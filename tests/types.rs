//! date, timestamp, varchar(n), char(n) and numeric end to end: agreement with
//! PostgreSQL on a checked-in fixture of text inputs, casts, comparisons
//! and arithmetic (`tests/fixtures/pg_types.tsv`, made by
//! `tests/fixtures/pg_types.sh` from a real PostgreSQL), and the types in
//! tables: stored, ordered, filtered, grouped, copied, reopened. Every I/O
//! method.

mod common;

use std::sync::Arc;

use aiostore::config::IoMethod;
use aiostore::database::{Database, Session};
use aiostore::sql::{self, format_table, format_value, SqlError, StatementIo, StatementResult};
use common::temp_dir;

fn settings(method: IoMethod) -> Vec<String> {
    vec![
        format!("io_method={}", method.name()),
        "shared_buffers=64".into(),
        "max_sessions=8".into(),
    ]
}

fn new_db(method: IoMethod) -> (tempfile::TempDir, Arc<Database>) {
    let dir = temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    let db = Database::open(&path, &settings(method)).unwrap();
    (dir, db)
}

fn run(s: &mut Session, text: &str) -> Vec<StatementResult> {
    sql::execute(s, text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// The values of the last statement of `text`, as PostgreSQL prints them.
fn printed(s: &mut Session, text: &str) -> Vec<Vec<String>> {
    run(s, text)
        .pop()
        .expect("a statement")
        .rows
        .iter()
        .map(|r| r.iter().map(format_value).collect())
        .collect()
}

/// The one column of the last statement's rows, printed.
fn column(s: &mut Session, text: &str) -> Vec<String> {
    printed(s, text)
        .into_iter()
        .map(|mut r| r.swap_remove(0))
        .collect()
}

fn error(s: &mut Session, text: &str) -> String {
    match sql::execute(s, text) {
        Ok(r) => panic!("{text}: expected an error, got {r:?}"),
        Err(e) => e.to_string(),
    }
}

/// Asserts that `query`'s hash aggregation spilled: its EXPLAIN ANALYZE
/// shows more than one batch.
fn assert_aggregation_spills(s: &mut Session, query: &str) {
    let plan = column(s, &format!("EXPLAIN (COSTS OFF, ANALYZE) {query}"));
    assert!(
        plan.iter()
            .any(|l| l.contains("Batches:") && !l.contains("Batches: 1 ")),
        "the aggregation did not spill: {plan:#?}"
    );
}

/// Runs `text` with `input` as COPY's standard input; what COPY … TO
/// STDOUT wrote.
fn run_io(s: &mut Session, text: &str, mut input: &[u8]) -> Result<Vec<u8>, SqlError> {
    let mut out = Vec::new();
    let mut io = StatementIo {
        stdin: Some(&mut input),
        stdout: Some(&mut out),
        rows: None,
        progress: None,
        explained_rows: None,
        copy_begin: None,
    };
    sql::execute_each(s, text, &mut io, |_| {}).map(|()| out)
}

/// One line of the fixture: an expression and what PostgreSQL made of
/// `SELECT expression`.
struct Case {
    expression: String,
    outcome: Result<String, String>,
}

fn fixture() -> Vec<Case> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/pg_types.tsv");
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let mut fields = l.splitn(3, '\t');
            let (Some(expression), Some(status), Some(result)) =
                (fields.next(), fields.next(), fields.next())
            else {
                panic!("fixture line without three fields: {l:?}");
            };
            Case {
                expression: expression.to_string(),
                outcome: match status {
                    "ok" => Ok(result.to_string()),
                    "error" => Err(result.to_string()),
                    other => panic!("fixture status {other:?} in {l:?}"),
                },
            }
        })
        .collect()
}

#[test]
fn every_fixture_case_prints_or_fails_as_postgresql_does() {
    let cases = fixture();
    assert!(cases.len() >= 60, "only {} cases", cases.len());
    let (_dir, db) = new_db(IoMethod::Sync);
    let mut s = db.session().unwrap();
    let mut disagreements = Vec::new();
    for case in &cases {
        let query = format!("SELECT {}", case.expression);
        let got = match sql::execute(&mut s, &query) {
            Ok(mut results) => {
                let rows = results.pop().expect("one statement").rows;
                assert_eq!(rows.len(), 1, "{query}");
                Ok(format_value(&rows[0][0]))
            }
            // A DETAIL line is written after `\n` in the fixture.
            Err(e) => Err(e.to_string().replace('\n', "\\n")),
        };
        if got != case.outcome {
            disagreements.push(format!(
                "{query}\n    PostgreSQL: {:?}\n    aiostore:   {got:?}",
                case.outcome
            ));
        }
    }
    assert!(
        disagreements.is_empty(),
        "{} of {} cases disagree:\n{}",
        disagreements.len(),
        cases.len(),
        disagreements.join("\n")
    );
}

const CREATE: &str = "CREATE TABLE ev (id integer, d date, ts timestamp, v varchar(5), c char(3))";
const INSERT: &str = "INSERT INTO ev VALUES
    (1, '2026-11-23', '2026-11-23 17:44:07.5', 'abc', 'a'),
    (2, '0044-03-15 BC', '0044-03-15 12:00 BC', 'b', 'b  '),
    (3, 'infinity', '-infinity', 'zz   ', 'a  '),
    (4, '2000-02-29', '2000-02-29 00:00:00.000001', '', 'ab'),
    (5, NULL, NULL, NULL, NULL)";

/// What the rows of `ev` print as, ordered by id.
fn ev_rows(s: &mut Session) -> Vec<Vec<String>> {
    printed(s, "SELECT id, d, ts, v, c FROM ev ORDER BY id")
}

fn the_types_store_order_filter_and_survive_reopening(method: IoMethod) {
    let (dir, db) = new_db(method);
    let mut s = db.session().unwrap();
    run(&mut s, CREATE);
    run(&mut s, INSERT);
    let expected: Vec<Vec<String>> = [
        ["1", "2026-11-23", "2026-11-23 17:44:07.5", "abc", "a  "],
        ["2", "0044-03-15 BC", "0044-03-15 12:00:00 BC", "b", "b  "],
        // Trailing spaces beyond varchar(5) are cut, not refused.
        ["3", "infinity", "-infinity", "zz   ", "a  "],
        ["4", "2000-02-29", "2000-02-29 00:00:00.000001", "", "ab "],
        ["5", "", "", "", ""],
    ]
    .iter()
    .map(|r| r.iter().map(|x| x.to_string()).collect())
    .collect();
    assert_eq!(ev_rows(&mut s), expected);
    assert_eq!(
        column(&mut s, "SELECT id FROM ev ORDER BY d, id"),
        ["2", "4", "1", "3", "5"]
    );
    assert_eq!(
        column(&mut s, "SELECT id FROM ev ORDER BY ts DESC NULLS LAST"),
        ["1", "4", "2", "3", "5"]
    );
    assert_eq!(
        column(&mut s, "SELECT id FROM ev ORDER BY v, id"),
        ["4", "1", "2", "3", "5"]
    );
    // char(3) orders without its padding: 'a' = 'a  ' < 'ab' < 'b'.
    assert_eq!(
        column(&mut s, "SELECT id FROM ev ORDER BY c, id"),
        ["1", "3", "4", "2", "5"]
    );
    assert_eq!(
        column(
            &mut s,
            "SELECT id FROM ev WHERE d > '2000-01-01' ORDER BY id"
        ),
        ["1", "3", "4"]
    );
    assert_eq!(
        column(&mut s, "SELECT id FROM ev WHERE d = DATE '2000-02-29'"),
        ["4"]
    );
    assert_eq!(
        column(
            &mut s,
            "SELECT id FROM ev WHERE ts BETWEEN '2000-01-01' AND '2030-01-01' ORDER BY id"
        ),
        ["1", "4"]
    );
    assert_eq!(
        column(&mut s, "SELECT id FROM ev WHERE ts < d ORDER BY id"),
        ["3"]
    );
    assert_eq!(
        column(&mut s, "SELECT id FROM ev WHERE v = 'zz'"),
        Vec::<String>::new()
    );
    assert_eq!(column(&mut s, "SELECT id FROM ev WHERE v = 'zz   '"), ["3"]);
    // A literal compared with char(3) is not cut to 3 characters.
    assert_eq!(
        column(&mut s, "SELECT id FROM ev WHERE c = 'a' ORDER BY id"),
        ["1", "3"]
    );
    assert_eq!(
        column(&mut s, "SELECT id FROM ev WHERE c = 'a    '"),
        ["1", "3"]
    );
    assert_eq!(
        column(&mut s, "SELECT id FROM ev WHERE c = 'abc'"),
        Vec::<String>::new()
    );
    assert_eq!(
        column(&mut s, "SELECT id FROM ev WHERE c IN ('ab', 'b')"),
        ["2", "4"]
    );
    assert_eq!(
        printed(
            &mut s,
            "SELECT min(d), max(d), min(ts), max(ts), min(c), max(v) FROM ev"
        ),
        [[
            "0044-03-15 BC",
            "infinity",
            "-infinity",
            "2026-11-23 17:44:07.5",
            "a  ",
            "zz   "
        ]]
    );
    assert_eq!(
        printed(
            &mut s,
            "SELECT d + 1, d - DATE '2000-01-01', length(c) FROM ev WHERE id = 4"
        ),
        [["2000-03-01", "59", "2"]]
    );
    // UPDATE stores through the same assignment rules.
    run(&mut s, "UPDATE ev SET d = ts, c = v WHERE id = 1");
    assert_eq!(
        printed(&mut s, "SELECT d, c FROM ev WHERE id = 1"),
        [["2026-11-23", "abc"]]
    );
    run(
        &mut s,
        "UPDATE ev SET d = '2026-11-23', c = 'a' WHERE id = 1",
    );
    // What was written is read back as it was after a restart.
    drop(s);
    drop(db);
    let db = Database::open(&dir.path().join("data"), &settings(method)).unwrap();
    let mut s = db.session().unwrap();
    assert_eq!(ev_rows(&mut s), expected);
    assert_eq!(
        error(&mut s, "INSERT INTO ev (v) VALUES ('abcdef')"),
        "value too long for type character varying(5)"
    );
}

fn too_long_text_is_refused_when_stored_and_cut_when_cast(method: IoMethod) {
    let (_dir, db) = new_db(method);
    let mut s = db.session().unwrap();
    run(&mut s, CREATE);
    assert_eq!(
        error(&mut s, "INSERT INTO ev (v) VALUES ('abcdef')"),
        "value too long for type character varying(5)"
    );
    assert_eq!(
        error(&mut s, "INSERT INTO ev (c) VALUES ('abcd')"),
        "value too long for type character(3)"
    );
    // Multi-byte characters count as one each.
    run(&mut s, "INSERT INTO ev (id, v) VALUES (1, 'ééééé')");
    run(
        &mut s,
        "INSERT INTO ev (id, v, c) VALUES (2, 'abcdef'::varchar(5), 'xyzw'::char(3))",
    );
    run(
        &mut s,
        "INSERT INTO ev (id, v) VALUES (3, repeat('x', 5) || '   ')",
    );
    assert_eq!(
        error(&mut s, "INSERT INTO ev (v) SELECT repeat('x', 6)"),
        "value too long for type character varying(5)"
    );
    run(&mut s, "INSERT INTO ev (id) VALUES (4)");
    assert_eq!(
        error(&mut s, "UPDATE ev SET v = v || 'x' WHERE id = 1"),
        "value too long for type character varying(5)"
    );
    assert_eq!(
        printed(&mut s, "SELECT id, v, c FROM ev ORDER BY id"),
        [
            ["1", "ééééé", ""],
            ["2", "abcde", "xyz"],
            ["3", "xxxxx", ""],
            ["4", "", ""],
        ]
    );
    let e = run_io(&mut s, "COPY ev (id, v) FROM STDIN", b"9\tabcdefg\n").unwrap_err();
    assert!(
        e.to_string()
            .ends_with("value too long for type character varying(5)"),
        "{e}"
    );
    assert!(error(&mut s, "CREATE TABLE bad (v varchar(0))")
        .contains("length for type varchar must be at least 1"));
    for unsupported in [
        "real",
        "interval",
        "timestamptz",
        "timestamp with time zone",
    ] {
        let e = error(&mut s, &format!("CREATE TABLE bad (x {unsupported})"));
        assert!(e.contains("is not supported"), "{unsupported}: {e}");
    }
}

fn char_values_differing_in_trailing_spaces_group_together(method: IoMethod) {
    let (_dir, db) = new_db(method);
    let mut s = db.session().unwrap();
    // bpchar keeps the spaces it is given, so the stored values differ.
    run(&mut s, "CREATE TABLE g (b bpchar, c char(4), d date)");
    run(
        &mut s,
        "INSERT INTO g VALUES ('a', 'a', '2026-01-01'), ('a ', 'a  ', '2026-01-01'),
                              ('a   ', 'a   ', '2026-01-02'), ('b', 'b', '2026-01-02')",
    );
    assert_eq!(
        printed(
            &mut s,
            "SELECT b || '|', count(*) FROM g GROUP BY b ORDER BY b"
        ),
        [["a|", "3"], ["b|", "1"]]
    );
    assert_eq!(
        printed(&mut s, "SELECT c, count(*) FROM g GROUP BY c ORDER BY c"),
        [["a   ", "3"], ["b   ", "1"]]
    );
    assert_eq!(
        printed(
            &mut s,
            "SELECT d, count(*) FROM g GROUP BY d ORDER BY d DESC"
        ),
        [["2026-01-02", "2"], ["2026-01-01", "2"]]
    );
    // Many groups in little memory: the aggregation and the sort spill,
    // and the spilled values keep their types (char still ignores its
    // padding, dates still print as dates).
    run(&mut s, "SET work_mem = '64kB'");
    run(
        &mut s,
        "INSERT INTO g SELECT repeat('k', i % 3) || (i % 5000)::text || repeat(' ', i % 7),
                              NULL, DATE '2000-01-01' + i % 5000
         FROM generate_series(1, 40000) i",
    );
    assert_eq!(
        column(
            &mut s,
            "SELECT count(*) FROM g WHERE b IS NOT NULL AND b <> 'a' AND b <> 'b'"
        ),
        ["40000"]
    );
    let groups = printed(
        &mut s,
        "SELECT d, count(*), min(b)::text FROM g WHERE c IS NULL GROUP BY d ORDER BY d",
    );
    assert_eq!(groups.len(), 5000);
    assert_eq!(groups[0], ["2000-01-01", "8", "0"]);
    assert_eq!(groups[4999], ["2013-09-08", "8", "4999"]);
    assert_aggregation_spills(
        &mut s,
        "SELECT b, count(*) FROM g WHERE c IS NULL GROUP BY b",
    );
    let keys = printed(
        &mut s,
        "SELECT b, count(*) FROM g WHERE c IS NULL GROUP BY b",
    );
    // Each of the 15000 keys (three prefixes × 5000 numbers) is one group
    // whatever its padding.
    assert_eq!(keys.len(), 15000);
}

fn copy_round_trips_every_type_exactly(method: IoMethod) {
    let (_dir, db) = new_db(method);
    let mut s = db.session().unwrap();
    run(&mut s, CREATE);
    run(&mut s, INSERT);
    run(
        &mut s,
        "CREATE TABLE ev2 (id integer, d date, ts timestamp, v varchar(5), c char(3))",
    );
    for options in ["", "(FORMAT csv)", "(FORMAT csv, HEADER)"] {
        run(&mut s, "DELETE FROM ev2");
        let first = run_io(&mut s, &format!("COPY ev TO STDOUT {options}"), b"").unwrap();
        run_io(&mut s, &format!("COPY ev2 FROM STDIN {options}"), &first).unwrap();
        let second = run_io(&mut s, &format!("COPY ev2 TO STDOUT {options}"), b"").unwrap();
        assert_eq!(
            String::from_utf8(first.clone()).unwrap(),
            String::from_utf8(second).unwrap(),
            "{options}"
        );
        assert_eq!(
            printed(&mut s, "SELECT * FROM ev2 ORDER BY id"),
            printed(&mut s, "SELECT * FROM ev ORDER BY id")
        );
        if options.is_empty() {
            let text = String::from_utf8(first).unwrap();
            assert!(
                text.starts_with("1\t2026-11-23\t2026-11-23 17:44:07.5\tabc\ta  \n"),
                "{text}"
            );
        }
    }
}

fn current_time_is_the_transactions_start(method: IoMethod) {
    let (_dir, db) = new_db(method);
    let mut s = db.session().unwrap();
    run(&mut s, "BEGIN");
    let first = printed(
        &mut s,
        "SELECT now(), CURRENT_TIMESTAMP, LOCALTIMESTAMP, CURRENT_DATE, now()::date",
    );
    std::thread::sleep(std::time::Duration::from_millis(5));
    let second = printed(
        &mut s,
        "SELECT now(), CURRENT_TIMESTAMP, LOCALTIMESTAMP, CURRENT_DATE, now()::date",
    );
    run(&mut s, "COMMIT");
    assert_eq!(first, second, "one transaction, one time");
    let row = &first[0];
    assert!(row[0] == row[1] && row[1] == row[2], "{row:?}");
    assert_eq!(row[3], row[4]);
    let later = column(&mut s, "SELECT now()");
    assert!(later[0] > row[0], "{later:?} after {row:?}");
}

fn date_arithmetic_and_its_missing_interval(method: IoMethod) {
    let (_dir, db) = new_db(method);
    let mut s = db.session().unwrap();
    assert_eq!(
        printed(
            &mut s,
            "SELECT DATE '2024-02-28' + 1, DATE '2024-03-01' - DATE '2023-03-01', \
             TIMESTAMP '2024-02-28 10:00' > DATE '2024-02-28'"
        ),
        [["2024-02-29", "366", "t"]]
    );
    let e = error(&mut s, "SELECT now() - TIMESTAMP '2000-01-01'");
    assert!(e.contains("type interval is not supported"), "{e}");
    let e = error(&mut s, "SELECT DATE '2000-01-01' + DATE '2000-01-01'");
    assert!(e.contains("operator does not exist: date + date"), "{e}");
    // Dates print left-aligned, as text does.
    let table = format_table(&run(&mut s, "SELECT DATE '2026-11-23' AS day, 1 AS n").remove(0));
    assert_eq!(
        table,
        "    day     | n\n------------+---\n 2026-11-23 | 1\n(1 row)\n"
    );
}

const NUM_CREATE: &str = "CREATE TABLE num (id integer, x numeric, p numeric(5,2))";
/// `1.505` is a double here (PostgreSQL reads it as numeric): stored in
/// numeric(5,2) it becomes 1.51 either way.
const NUM_INSERT: &str = "INSERT INTO num VALUES
    (1, '1.50', 1.505), (2, 'NaN', '-2.345'), (3, '-Infinity', 0),
    (4, '1.5', '999.994'), (5, NULL, NULL),
    (6, '12345678901234567890.000000000001', '-0.004'), (7, 'Infinity', 2)";

/// Every expected result below is what PostgreSQL 15 gave for the same
/// statements.
fn numeric_columns_store_order_group_join_and_survive_reopening(method: IoMethod) {
    let (dir, db) = new_db(method);
    let mut s = db.session().unwrap();
    run(&mut s, NUM_CREATE);
    run(&mut s, NUM_INSERT);
    let rows = |s: &mut Session| printed(s, "SELECT id, x, p FROM num ORDER BY id");
    let expected: Vec<Vec<String>> = [
        ["1", "1.50", "1.51"],
        ["2", "NaN", "-2.35"],
        ["3", "-Infinity", "0.00"],
        ["4", "1.5", "999.99"],
        ["5", "", ""],
        ["6", "12345678901234567890.000000000001", "0.00"],
        ["7", "Infinity", "2.00"],
    ]
    .iter()
    .map(|r| r.iter().map(|x| x.to_string()).collect())
    .collect();
    assert_eq!(rows(&mut s), expected);
    // NaN sorts above Infinity; 1.50 and 1.5 are equal.
    assert_eq!(
        column(&mut s, "SELECT id FROM num ORDER BY x, id"),
        ["3", "1", "4", "6", "7", "2", "5"]
    );
    assert_eq!(
        column(&mut s, "SELECT id FROM num ORDER BY x DESC NULLS LAST, id"),
        ["2", "7", "6", "1", "4", "3", "5"]
    );
    assert_eq!(
        printed(&mut s, "SELECT x, count(*) FROM num GROUP BY x ORDER BY x"),
        [
            ["-Infinity", "1"],
            ["1.50", "2"],
            ["12345678901234567890.000000000001", "1"],
            ["Infinity", "1"],
            ["NaN", "1"],
            ["", "1"],
        ]
    );
    assert_eq!(
        printed(
            &mut s,
            "SELECT sum(p), avg(p), min(x), max(x), sum(x) FROM num"
        ),
        [["1001.15", "166.8583333333333333", "-Infinity", "NaN", "NaN"]]
    );
    assert_eq!(
        printed(
            &mut s,
            "SELECT sum(x), avg(x) FROM num WHERE id IN (1, 4, 6)"
        ),
        [[
            "12345678901234567893.000000000001",
            "4115226300411522631.000000000000"
        ]]
    );
    assert_eq!(
        column(&mut s, "SELECT id FROM num WHERE x = '1.5' ORDER BY id"),
        ["1", "4"]
    );
    assert_eq!(
        column(&mut s, "SELECT id FROM num WHERE p > 1 ORDER BY id"),
        ["1", "4", "7"]
    );
    assert_eq!(
        printed(
            &mut s,
            "SELECT id, p * 2, p / 3, -p, p::integer FROM num WHERE id IN (1, 2, 4) ORDER BY id"
        ),
        [
            ["1", "3.02", "0.50333333333333333333", "-1.51", "2"],
            ["2", "-4.70", "-0.78333333333333333333", "2.35", "-2"],
            ["4", "1999.98", "333.3300000000000000", "-999.99", "1000"],
        ]
    );
    let overflow = "numeric field overflow\nDETAIL:  A field with precision 5, scale 2 \
                    must round to an absolute value less than 10^3.";
    assert_eq!(
        error(&mut s, "INSERT INTO num (p) VALUES ('1000')"),
        overflow
    );
    assert_eq!(
        error(&mut s, "UPDATE num SET p = p * 10 WHERE id = 4"),
        overflow
    );
    // An integer joined with a numeric(5,2): hashed as numerics, so 0
    // meets 0.00.
    run(
        &mut s,
        "CREATE TABLE k (n integer); INSERT INTO k VALUES (0), (2), (5)",
    );
    let join = "SELECT k.n, num.id FROM k JOIN num ON num.p = k.n ORDER BY n, id";
    assert_eq!(printed(&mut s, join), [["0", "3"], ["0", "6"], ["2", "7"]]);
    let plan = column(&mut s, &format!("EXPLAIN (COSTS OFF) {join}"));
    assert!(plan.iter().any(|l| l.contains("Hash Join")), "{plan:#?}");
    // COPY writes what PostgreSQL's COPY writes, and reads it back.
    let copied = run_io(&mut s, "COPY num TO STDOUT", b"").unwrap();
    assert_eq!(
        String::from_utf8(copied.clone()).unwrap(),
        "1\t1.50\t1.51\n2\tNaN\t-2.35\n3\t-Infinity\t0.00\n4\t1.5\t999.99\n5\t\\N\t\\N\n\
         6\t12345678901234567890.000000000001\t0.00\n7\tInfinity\t2.00\n"
    );
    run(
        &mut s,
        "CREATE TABLE num2 (id integer, x numeric, p numeric(5,2))",
    );
    run_io(&mut s, "COPY num2 FROM STDIN", &copied).unwrap();
    assert_eq!(
        printed(&mut s, "SELECT id, x, p FROM num2 ORDER BY id"),
        expected
    );
    let e = run_io(&mut s, "COPY num2 FROM STDIN", b"9\t1\t1000\n").unwrap_err();
    assert!(e.to_string().contains("numeric field overflow"), "{e}");
    drop(s);
    drop(db);
    let db = Database::open(&dir.path().join("data"), &settings(method)).unwrap();
    let mut s = db.session().unwrap();
    assert_eq!(rows(&mut s), expected);
    // The catalog kept the precision and scale.
    let table = db.catalog().table_for("num", None).unwrap();
    let types: Vec<String> = table.columns.iter().map(|c| c.ty.display_name()).collect();
    assert_eq!(types, ["integer", "numeric", "numeric(5,2)"]);
}

fn equal_numerics_of_different_scales_group_and_sort_together_when_spilled(method: IoMethod) {
    let (_dir, db) = new_db(method);
    let mut s = db.session().unwrap();
    run(&mut s, "CREATE TABLE ns (x numeric)");
    run(&mut s, "SET work_mem = '64kB'");
    // 20000 values, each written with one, two and three decimals.
    for one in ["1.0", "1.00", "1.000"] {
        run(
            &mut s,
            &format!("INSERT INTO ns SELECT i::numeric * '{one}' FROM generate_series(0, 19999) i"),
        );
    }
    let groups = printed(
        &mut s,
        "SELECT x, count(*) FROM ns GROUP BY x ORDER BY x DESC",
    );
    assert_eq!(groups.len(), 20000);
    assert!(groups.iter().all(|g| g[1] == "3"), "{:?}", &groups[..3]);
    assert_aggregation_spills(&mut s, "SELECT x, count(*) FROM ns GROUP BY x");
    assert_eq!(
        printed(&mut s, "SELECT min(x), max(x), sum(x), avg(x) FROM ns"),
        [[
            "0.000",
            "19999.000",
            "599970000.000",
            "9999.5000000000000000"
        ]]
    );
}

for_each_method!(
    numeric_columns_store_order_group_join_and_survive_reopening,
    equal_numerics_of_different_scales_group_and_sort_together_when_spilled,
    the_types_store_order_filter_and_survive_reopening,
    too_long_text_is_refused_when_stored_and_cut_when_cast,
    char_values_differing_in_trailing_spaces_group_together,
    copy_round_trips_every_type_exactly,
    current_time_is_the_transactions_start,
    date_arithmetic_and_its_missing_interval,
);
