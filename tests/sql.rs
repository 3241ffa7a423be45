//! SQL end to end: every statement the front end runs, its results and
//! tags, its errors (which must name the object and, for unsupported
//! syntax, the construct and where it is), transactions across sessions,
//! EXPLAIN ANALYZE, the system views and utility functions. Every I/O
//! method.

mod common;

use std::sync::Arc;

use aiostore::config::IoMethod;
use aiostore::database::{Database, Session, XactError};
use aiostore::exec::ExecError;
use aiostore::exec::{Progress, ProgressUnit};
use aiostore::heap::HeapError;
use aiostore::inject::{Injection, BEFORE_COMPLETE_SHARED};
use aiostore::sql::{self, format_csv, format_table, SqlError, StatementIo, StatementResult};
use aiostore::storage::Fork;
use aiostore::types::Value;
use common::{plan_lines, temp_dir};
use proptest::prelude::{any, prop_oneof, Just, Strategy};
use proptest::sample::select;

fn settings(method: IoMethod, extra: &[&str]) -> Vec<String> {
    let mut s = vec![
        format!("io_method={}", method.name()),
        "shared_buffers=64".into(),
        "max_sessions=8".into(),
    ];
    s.extend(extra.iter().map(|x| x.to_string()));
    s
}

fn new_db(method: IoMethod) -> (tempfile::TempDir, Arc<Database>) {
    new_db_with(method, &[])
}

fn new_db_with(method: IoMethod, extra: &[&str]) -> (tempfile::TempDir, Arc<Database>) {
    let dir = temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    let db = Database::open(&path, &settings(method, extra)).unwrap();
    (dir, db)
}

/// Runs `text`, failing the test with the error if it fails.
fn run(s: &mut Session, text: &str) -> Vec<StatementResult> {
    sql::execute(s, text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// The result of the last statement of `text`.
fn last(s: &mut Session, text: &str) -> StatementResult {
    run(s, text).pop().expect("at least one statement")
}

fn rows(s: &mut Session, text: &str) -> Vec<Vec<Value>> {
    last(s, text).rows
}

/// The error `text` fails with.
fn err(s: &mut Session, text: &str) -> SqlError {
    match sql::execute(s, text) {
        Ok(r) => panic!("{text}: expected an error, got {r:?}"),
        Err(e) => e,
    }
}

/// How a statement must fail.
#[derive(Clone, Copy)]
enum Fails<'a> {
    /// With exactly this message.
    With(&'a str),
    /// With a message containing this.
    Containing(&'a str),
    /// With a message starting with this.
    StartingWith(&'a str),
    /// With an error this accepts (a `matches!` on its variant).
    As(fn(&SqlError) -> bool),
}

/// Checks that `text` fails as `expected` says.
fn assert_fails(s: &mut Session, text: &str, expected: Fails) {
    let e = err(s, text);
    let message = e.to_string();
    let (ok, wanted) = match expected {
        Fails::With(m) => (message == m, format!("the message \"{m}\"")),
        Fails::Containing(m) => (message.contains(m), format!("a message containing \"{m}\"")),
        Fails::StartingWith(m) => (
            message.starts_with(m),
            format!("a message starting with \"{m}\""),
        ),
        Fails::As(accepts) => (accepts(&e), "another kind of error".to_string()),
    };
    assert!(ok, "{text}: got \"{message}\" ({e:?}), expected {wanted}");
}

fn int(x: i32) -> Value {
    Value::Integer(x)
}

fn big(x: i64) -> Value {
    Value::BigInt(x)
}

fn text(x: &str) -> Value {
    Value::Text(x.into())
}

/// The single value `text` returns.
fn scalar(s: &mut Session, text: &str) -> Value {
    let r = rows(s, text);
    assert_eq!(r.len(), 1, "{text}: {r:?}");
    assert_eq!(r[0].len(), 1, "{text}: {r:?}");
    r[0][0].clone()
}

fn count(s: &mut Session, table: &str) -> i64 {
    match scalar(s, &format!("SELECT count(*) FROM {table}")) {
        Value::BigInt(n) => n,
        other => panic!("count(*) gave {other:?}"),
    }
}

fn create_t(s: &mut Session) {
    run(s, "CREATE TABLE t (id integer NOT NULL, note text)");
}

/// A new database and a session of it.
fn new_session(method: IoMethod) -> (tempfile::TempDir, Arc<Database>, Session) {
    let (dir, db) = new_db(method);
    let s = db.session().unwrap();
    (dir, db, s)
}

/// [`new_session`], with the table `t` created.
fn session_with_t(method: IoMethod) -> (tempfile::TempDir, Arc<Database>, Session) {
    let (dir, db, mut s) = new_session(method);
    create_t(&mut s);
    (dir, db, s)
}

fn every_type_round_trips_through_insert_and_select(method: IoMethod) {
    let (_dir, _db, mut s) = new_session(method);
    let results = run(
        &mut s,
        "CREATE TABLE all_types (i int4, b int8, d float8, t varchar, f bool, n integer);
         INSERT INTO all_types VALUES
            (1, 9000000000, 1.5, 'one', true, NULL),
            (-2147483648, -1, -0.25, '', false, 7),
            (NULL, NULL, NULL, NULL, NULL, NULL);
         SELECT * FROM all_types",
    );
    let tags: Vec<&str> = results.iter().map(|r| r.tag.as_str()).collect();
    assert_eq!(tags, ["CREATE TABLE", "INSERT 0 3", "SELECT 3"]);
    let select = &results[2];
    let names: Vec<&str> = select.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["i", "b", "d", "t", "f", "n"]);
    assert_eq!(
        select.rows,
        vec![
            vec![
                int(1),
                big(9_000_000_000),
                Value::Double(1.5),
                text("one"),
                Value::Boolean(true),
                Value::Null
            ],
            vec![
                int(i32::MIN),
                big(-1),
                Value::Double(-0.25),
                text(""),
                Value::Boolean(false),
                int(7)
            ],
            vec![Value::Null; 6],
        ]
    );
    // Names fold to lower case unless quoted.
    run(
        &mut s,
        "CREATE TABLE \"Mixed\" (\"Col\" integer); INSERT INTO \"Mixed\" VALUES (1)",
    );
    assert_eq!(scalar(&mut s, "SELECT \"Col\" FROM \"Mixed\""), int(1));
    assert!(matches!(
        err(&mut s, "SELECT * FROM mixed"),
        SqlError::UnknownTable { .. }
    ));
}

fn create_table_checks_options_types_and_names(method: IoMethod) {
    let (_dir, db, mut s) = new_session(method);
    run(
        &mut s,
        "CREATE TABLE t (id integer NOT NULL, note text) WITH (fillfactor = 50)",
    );
    assert_eq!(db.catalog().table("t").unwrap().heap.fillfactor, 50);
    let again = last(&mut s, "CREATE TABLE IF NOT EXISTS t (x integer)");
    assert_eq!(again.tag, "CREATE TABLE");
    assert_eq!(
        again.notices,
        ["NOTICE: table \"t\" already exists, skipping"]
    );
    assert_fails(
        &mut s,
        "CREATE TABLE t (x integer)",
        Fails::With("table \"t\" already exists"),
    );
    for bad in ["5", "101", "'x'"] {
        let e = err(
            &mut s,
            &format!("CREATE TABLE u (a int) WITH (fillfactor = {bad})"),
        );
        assert!(matches!(e, SqlError::Fillfactor { .. }), "{e}");
        assert!(e.to_string().contains("from 10 to 100"), "{e}");
    }
    for (statement, expected) in [
        (
            "CREATE TABLE u (a real)",
            Fails::Containing("type \"REAL\" is not supported; use integer, bigint, numeric"),
        ),
        (
            "CREATE TABLE u (a timestamp with time zone)",
            Fails::As(|e| matches!(e, SqlError::UnknownType { .. })),
        ),
        (
            "CREATE TABLE u (a timestamp(3))",
            Fails::As(|e| matches!(e, SqlError::UnknownType { .. })),
        ),
        (
            "CREATE TABLE u (a int CHECK (a > 0))",
            Fails::Containing("the column option CHECK (a > 0) is not supported"),
        ),
        (
            "CREATE TABLE u (a int, b int, CHECK (a > b))",
            Fails::Containing("CHECK constraints is not supported"),
        ),
        (
            "CREATE TABLE u (a int, b int, FOREIGN KEY (a) REFERENCES t (id))",
            Fails::Containing("FOREIGN KEY constraints is not supported"),
        ),
        (
            "CREATE TABLE u AS SELECT 1",
            Fails::Containing("CREATE TABLE … AS is not supported"),
        ),
        (
            "CREATE TABLE u (a int) WITH (autovacuum_enabled = off)",
            Fails::Containing("only fillfactor is supported"),
        ),
        (
            "CREATE TABLE u (a int, a text)",
            Fails::Containing("column \"a\" is given twice in table \"u\""),
        ),
    ] {
        assert_fails(&mut s, statement, expected);
    }
    assert!(
        db.catalog().table("u").is_err(),
        "no failed CREATE left a table"
    );
}

fn drop_table_removes_it_and_if_exists_only_notes_a_missing_one(method: IoMethod) {
    let (_dir, db, mut s) = new_session(method);
    run(&mut s, "CREATE TABLE a (x int); CREATE TABLE b (x int)");
    // A missing name among several drops nothing.
    assert_fails(
        &mut s,
        "DROP TABLE a, missing",
        Fails::With("table \"missing\" does not exist"),
    );
    assert!(db.catalog().table("a").is_ok());
    assert_eq!(last(&mut s, "DROP TABLE a, b").tag, "DROP TABLE");
    assert!(matches!(
        err(&mut s, "SELECT * FROM a"),
        SqlError::UnknownTable { .. }
    ));
    let r = last(&mut s, "DROP TABLE IF EXISTS a");
    assert_eq!(r.notices, ["NOTICE: table \"a\" does not exist, skipping"]);
    assert!(matches!(
        err(&mut s, "DROP TABLE stat_io"),
        SqlError::ReadOnlyView { .. }
    ));
    assert!(matches!(
        err(&mut s, "INSERT INTO buffers VALUES (1)"),
        SqlError::ReadOnlyView { .. }
    ));
}

fn drop_and_vacuum_are_refused_inside_a_transaction_block(method: IoMethod) {
    let (_dir, db, mut s) = session_with_t(method);
    run(&mut s, "BEGIN");
    assert_fails(
        &mut s,
        "DROP TABLE t",
        Fails::As(|e| matches!(e, SqlError::Xact(XactError::NotInBlock("DROP TABLE")))),
    );
    // The refusal failed the block, as any error does.
    assert!(matches!(
        err(&mut s, "SELECT 1"),
        SqlError::Xact(XactError::Aborted)
    ));
    assert_eq!(last(&mut s, "ROLLBACK").tag, "ROLLBACK");
    // CREATE TABLE is the block's: gone with its rollback.
    run(
        &mut s,
        "BEGIN; CREATE TABLE u (a int); INSERT INTO u VALUES (1)",
    );
    assert_eq!(
        last(&mut s, "SELECT count(*) FROM u").rows[0][0],
        Value::BigInt(1)
    );
    run(&mut s, "ROLLBACK");
    for (statement, what) in [("DROP TABLE t", "DROP TABLE"), ("VACUUM t", "VACUUM")] {
        run(&mut s, "BEGIN");
        assert_fails(
            &mut s,
            statement,
            Fails::With(&format!("{what} cannot run inside a transaction block")),
        );
        run(&mut s, "ROLLBACK");
    }
    assert!(db.catalog().table("u").is_err());
    assert!(db.catalog().table("t").is_ok());
}

fn an_aborted_block_refuses_everything_until_it_ends(method: IoMethod) {
    let (_dir, _db, mut s) = session_with_t(method);
    run(
        &mut s,
        "BEGIN; INSERT INTO t VALUES (1, 'kept until the error')",
    );
    assert!(matches!(
        err(&mut s, "SELECT 1 / 0"),
        SqlError::Exec(ExecError::DivisionByZero)
    ));
    for statement in [
        "INSERT INTO t VALUES (2, 'x')",
        "SELECT 1",
        "SET io_combine_limit = 4",
        "SHOW io_combine_limit",
        "CHECKPOINT",
    ] {
        assert_fails(
            &mut s,
            statement,
            Fails::With("current transaction is aborted, commands ignored until end of transaction block (ROLLBACK)"),
        );
    }
    run(&mut s, "ROLLBACK; BEGIN");
    assert_fails(
        &mut s,
        "SET LOCAL io_combine_limit = 2",
        Fails::As(|e| matches!(e, SqlError::Unsupported { .. })),
    );
    assert!(
        matches!(err(&mut s, "SELECT 1"), SqlError::Xact(XactError::Aborted)),
        "a refused statement fails the block too"
    );
    // COMMIT of a failed block rolls it back, and says so.
    assert_eq!(last(&mut s, "COMMIT").tag, "ROLLBACK");
    assert_eq!(count(&mut s, "t"), 0);
    assert_eq!(
        last(&mut s, "SELECT 1").tag,
        "SELECT 1",
        "a new statement runs"
    );
}

fn rollback_leaves_nothing_behind(method: IoMethod) {
    let (_dir, _db, mut s) = session_with_t(method);
    run(
        &mut s,
        "INSERT INTO t SELECT i, 'before' FROM generate_series(1, 50) i",
    );
    let results = run(
        &mut s,
        "BEGIN;
         INSERT INTO t SELECT i, 'inside' FROM generate_series(51, 500) i;
         UPDATE t SET note = 'changed' WHERE id <= 10;
         DELETE FROM t WHERE id > 40;
         SELECT count(*) FROM t;
         ROLLBACK",
    );
    let tags: Vec<&str> = results.iter().map(|r| r.tag.as_str()).collect();
    assert_eq!(
        tags,
        [
            "BEGIN",
            "INSERT 0 450",
            "UPDATE 10",
            "DELETE 460",
            "SELECT 1",
            "ROLLBACK"
        ]
    );
    assert_eq!(
        results[4].rows,
        vec![vec![big(40)]],
        "the block saw its own changes"
    );
    assert_eq!(count(&mut s, "t"), 50);
    assert_eq!(
        rows(&mut s, "SELECT note, count(*) FROM t GROUP BY note"),
        vec![vec![text("before"), big(50)]]
    );
    let r = last(&mut s, "ROLLBACK");
    assert_eq!(r.notices, ["WARNING: there is no transaction in progress"]);
    let r = last(&mut s, "BEGIN; BEGIN");
    assert_eq!(
        r.notices,
        ["WARNING: there is already a transaction in progress"]
    );
    assert_eq!(last(&mut s, "END").tag, "COMMIT");
}

fn a_failed_statement_is_undone_as_a_whole(method: IoMethod) {
    let (_dir, _db, mut s) = session_with_t(method);
    assert_fails(
        &mut s,
        "INSERT INTO t VALUES (1, 'a'), (2, 'b'), (NULL, 'c')",
        Fails::With("null value in column \"id\" of relation \"t\" violates not-null constraint"),
    );
    assert_eq!(
        count(&mut s, "t"),
        0,
        "the rows before the bad one are gone too"
    );
    // A generated insert failing half-way: nothing of it stays.
    assert_fails(
        &mut s,
        "INSERT INTO t SELECT 1000 / (i - 700), 'x' FROM generate_series(1, 1000) i",
        Fails::As(|e| matches!(e, SqlError::Exec(ExecError::DivisionByZero))),
    );
    assert_eq!(count(&mut s, "t"), 0);
    // An UPDATE failing on one row changes no row.
    run(
        &mut s,
        "INSERT INTO t SELECT i, 'n' FROM generate_series(1, 100) i",
    );
    assert_fails(
        &mut s,
        "UPDATE t SET id = 10 / (id - 50)",
        Fails::As(|e| matches!(e, SqlError::Exec(ExecError::DivisionByZero))),
    );
    assert_eq!(scalar(&mut s, "SELECT sum(id) FROM t"), big(5050));
    // Statements before the failing one in the same text keep their effect.
    assert_fails(
        &mut s,
        "DELETE FROM t WHERE id <= 10; SELECT nope FROM t; DELETE FROM t",
        Fails::As(|e| matches!(e, SqlError::UnknownColumn { .. })),
    );
    assert_eq!(count(&mut s, "t"), 90);
}

fn type_and_null_errors_name_the_column_and_table(method: IoMethod) {
    let (_dir, _db, mut s) = session_with_t(method);
    for (statement, expected) in [
        ("INSERT INTO t VALUES (true, 'x')", Fails::With("column \"id\" of table \"t\" is of type integer but the value is of type boolean; add a cast")),
        ("INSERT INTO t (note) VALUES ('no id')", Fails::As(|e| matches!(e, SqlError::Exec(ExecError::NotNull { .. })))),
        ("INSERT INTO t VALUES ('abc', 'x')", Fails::With("invalid input syntax for type integer: \"abc\"")),
        ("INSERT INTO t VALUES (1, 'x', 3)", Fails::With("INSERT into \"t\" has 3 expressions for 2 target columns")),
        ("INSERT INTO t (id, id) VALUES (1, 2)", Fails::As(|e| matches!(e, SqlError::DuplicateColumn { .. }))),
    ] {
        assert_fails(&mut s, statement, expected);
    }
    run(
        &mut s,
        "INSERT INTO t VALUES ('7', 'literal converted'), (8.4, 'rounded'), (9::bigint, 'bigint')",
    );
    assert_eq!(
        rows(&mut s, "SELECT id FROM t ORDER BY id"),
        vec![vec![int(7)], vec![int(8)], vec![int(9)]]
    );
    for (statement, expected) in [
        (
            "UPDATE t SET id = NULL WHERE id = 7",
            Fails::Containing("column \"id\" of relation \"t\" violates not-null"),
        ),
        (
            "UPDATE t SET note = 5",
            Fails::As(|e| matches!(e, SqlError::Exec(ExecError::ColumnType { .. }))),
        ),
        (
            "SELECT id + note FROM t",
            Fails::StartingWith("operator does not exist: integer + text"),
        ),
        (
            "SELECT * FROM t WHERE id",
            Fails::With("argument of WHERE must be type boolean, not type integer"),
        ),
        (
            "SELECT md5(id) FROM t",
            Fails::Containing("function md5(integer) does not exist"),
        ),
        (
            "SELECT id FROM t WHERE note = 3",
            Fails::StartingWith("operator does not exist: text = integer"),
        ),
        (
            "SELECT 'x'::boolean",
            Fails::With("invalid input syntax for type boolean: \"x\""),
        ),
    ] {
        assert_fails(&mut s, statement, expected);
    }
}

fn unknown_tables_columns_and_functions_are_named(method: IoMethod) {
    let (_dir, _db, mut s) = session_with_t(method);
    for (statement, expected) in [
        (
            "SELECT * FROM missing",
            Fails::StartingWith("table \"missing\" does not exist"),
        ),
        (
            "SELECT id,\n  nope FROM t",
            Fails::With("column \"nope\" does not exist in table \"t\" (at line 2, column 3)"),
        ),
        (
            "SELECT x.id FROM t",
            Fails::With("missing FROM-clause entry for table \"x\" (at line 1, column 8)"),
        ),
        (
            "SELECT t.nope FROM t",
            Fails::Containing("column \"t.nope\" does not exist in table \"t\""),
        ),
    ] {
        assert_fails(&mut s, statement, expected);
    }
    assert_eq!(
        rows(&mut s, "SELECT u.id FROM t AS u"),
        Vec::<Vec<Value>>::new()
    );
    for (statement, expected) in [
        (
            "SELECT frobnicate(1)",
            Fails::StartingWith("function frobnicate() does not exist"),
        ),
        (
            "UPDATE t SET nope = 1",
            Fails::As(|e| matches!(e, SqlError::UnknownColumn { .. })),
        ),
        (
            "DELETE FROM missing",
            Fails::As(|e| matches!(e, SqlError::UnknownTable { .. })),
        ),
    ] {
        assert_fails(&mut s, statement, expected);
    }
}

/// COALESCE, GREATEST and LEAST as PostgreSQL 15 answers them: NULLs
/// passed over (all NULL gives NULL), the arguments meeting in one type (a
/// string literal taking the others'), COALESCE not evaluating past the
/// first value (the division by zero after it is never met).
fn coalesce_greatest_and_least(method: IoMethod) {
    let (_dir, _db, mut s) = new_session(method);
    rows(
        &mut s,
        "CREATE TABLE c (a integer, b integer, t text);
         INSERT INTO c VALUES (1, NULL, NULL), (NULL, 2, 'x'), (NULL, NULL, NULL)",
    );
    let got = rows(
        &mut s,
        "SELECT coalesce(a, b, 0), greatest(a, b), least(a, b, 7), coalesce(t, 'none')
         FROM c ORDER BY a NULLS LAST, b NULLS LAST",
    );
    assert_eq!(
        got,
        vec![
            vec![int(1), int(1), int(1), text("none")],
            vec![int(2), int(2), int(2), text("x")],
            vec![int(0), Value::Null, int(7), text("none")],
        ]
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT coalesce(1, 1 / 0), greatest(1, 2.5::float8), least('b', 'a')"
        ),
        vec![vec![int(1), Value::Double(2.5), text("a")]]
    );
    // NULLIF is its first argument's, compared in the type both share.
    assert_eq!(
        rows(
            &mut s,
            "SELECT nullif(a, 1), nullif(b, 2.0), nullif(t, 'y'), nullif(NULL::integer, 1)
             FROM c ORDER BY a NULLS LAST, b NULLS LAST"
        ),
        vec![
            vec![Value::Null, Value::Null, Value::Null, Value::Null],
            vec![Value::Null, Value::Null, text("x"), Value::Null],
            vec![Value::Null, Value::Null, Value::Null, Value::Null],
        ]
    );
    assert_eq!(
        rows(&mut s, "SELECT nullif(3, 2.5), nullif('a', 'a')"),
        vec![vec![int(3), Value::Null]]
    );
    assert_eq!(
        err(&mut s, "SELECT greatest(1, 'a'::text)").to_string(),
        "GREATEST types integer and text cannot be matched"
    );
    assert_eq!(
        err(&mut s, "SELECT coalesce(1, 'x')").to_string(),
        "invalid input syntax for type integer: \"x\""
    );
}

fn arithmetic_errors_are_errors_not_wrong_answers(method: IoMethod) {
    let (_dir, _db, mut s) = new_session(method);
    for (query, message) in [
        ("SELECT 1 / 0", "division by zero"),
        ("SELECT 5 % 0", "division by zero"),
        ("SELECT 1.5 / 0", "division by zero"),
        ("SELECT 2147483647 + 1", "integer out of range"),
        ("SELECT -2147483648 * -1", "integer out of range"),
        ("SELECT 9223372036854775807 + 1", "bigint out of range"),
        ("SELECT 3000000000::integer", "integer out of range"),
        ("SELECT abs(-2147483648)", "integer out of range"),
    ] {
        assert_eq!(err(&mut s, query).to_string(), message, "{query}");
    }
    assert_eq!(
        rows(
            &mut s,
            "SELECT 7 / 2, -7 / 2, 7 % 3, 7.0 / 2, 2147483647 + 1::bigint, 1 + 2 * 3"
        ),
        vec![vec![
            int(3),
            int(-3),
            int(1),
            // A literal with a point is numeric, as in PostgreSQL, whose
            // division gives it 16 digits after the point here.
            Value::Numeric(aiostore::types::Numeric::parse("3.5000000000000000").unwrap()),
            big(2_147_483_648),
            int(7)
        ]]
    );
    run(
        &mut s,
        "CREATE TABLE n (x integer); INSERT INTO n VALUES (2147483647)",
    );
    assert_eq!(
        err(&mut s, "SELECT sum(x) + 1, x + 1 FROM n GROUP BY x").to_string(),
        "integer out of range"
    );
    assert_eq!(
        scalar(&mut s, "SELECT sum(x) + 1 FROM n"),
        big(2_147_483_648)
    );
}

fn unsupported_syntax_names_the_construct_and_where_it_is(method: IoMethod) {
    let (_dir, _db, mut s) = session_with_t(method);
    let cases = [
        (
            "SELECT 1;\nSELECT * FROM t FULL JOIN t AS u ON true",
            "in statement 2 at line 2, column 27: RIGHT or FULL JOIN is not supported",
        ),
        (
            "SELECT note COLLATE \"de_DE\" FROM t",
            "in statement 1 at line 1, column 8: the collation \"de_DE\" is not supported",
        ),
        (
            "SELECT count(*) FROM t GROUP BY (SELECT 1)",
            "a subquery in GROUP BY is not supported",
        ),
        (
            "SELECT id FROM t, LATERAL (SELECT 1) AS s",
            "LATERAL is not supported",
        ),
        (
            "SELECT DISTINCT id FROM t",
            "SELECT DISTINCT is not supported; use GROUP BY",
        ),
        (
            "COPY t TO STDOUT (FORMAT csv, FORCE_QUOTE (id))",
            "the COPY option FORCE_QUOTE (id) is not supported",
        ),
        (
            "CREATE INDEX i ON t (id) WHERE id > 0",
            "partial indexes (CREATE INDEX … WHERE) is not supported",
        ),
        (
            "SELECT note ~~ 'x' FROM t",
            "the operator ~~ is not supported",
        ),
        (
            "WITH x AS (SELECT 1) SELECT * FROM x",
            "WITH (common table expressions) is not supported",
        ),
        (
            "SELECT count(DISTINCT id) FROM t",
            "count(DISTINCT …) is not supported",
        ),
        (
            "BEGIN ISOLATION LEVEL SERIALIZABLE",
            "ISOLATION LEVEL SERIALIZABLE is not supported; use REPEATABLE READ",
        ),
        (
            "SELECT id FROM t FETCH FIRST 1 ROWS ONLY",
            "FETCH FIRST is not supported; use LIMIT",
        ),
        (
            "INSERT INTO t VALUES (1, 'x') ON CONFLICT DO NOTHING",
            "ON CONFLICT is not supported",
        ),
        (
            "SELECT generate_series(1, 3)",
            "generate_series() in the select list is not supported",
        ),
    ];
    for (query, expected) in cases {
        let e = err(&mut s, query);
        assert!(matches!(e, SqlError::Unsupported { .. }), "{query}: {e:?}");
        assert!(
            e.to_string().contains(expected),
            "{query}: got \"{e}\", expected \"{expected}\""
        );
    }
    let e = err(&mut s, "SELECT 1; SELEC 2");
    let SqlError::Syntax { statement, message } = &e else {
        panic!("expected a syntax error, got {e}");
    };
    assert_eq!(*statement, 2);
    assert!(message.contains("Line: 1, Column: 11"), "{message}");
    // A syntax error anywhere runs nothing.
    assert_fails(
        &mut s,
        "INSERT INTO t VALUES (1, 'x'); SELECT (",
        Fails::As(|e| matches!(e, SqlError::Syntax { statement: 2, .. })),
    );
    assert_eq!(count(&mut s, "t"), 0);
    // A chain of operators too long to walk safely is refused, not a
    // stack overflow; one at the limit runs.
    assert_fails(
        &mut s,
        &format!("SELECT 1{}", "+1".repeat(50_000)),
        Fails::As(|e| matches!(e, SqlError::TooDeep { .. })),
    );
    let limit = sql::MAX_OPERATOR_DEPTH;
    assert_eq!(
        scalar(&mut s, &format!("SELECT 0{}", "+1".repeat(limit))),
        int(limit as i32)
    );
}

fn generate_series_builds_tables_with_md5_repeat_and_random(method: IoMethod) {
    let (_dir, _db, mut s) = new_session(method);
    run(&mut s, "CREATE TABLE t (id integer, hash text, pad text)");
    let r = last(
        &mut s,
        "INSERT INTO t SELECT i, md5(i::text), repeat('x', 100) FROM generate_series(1, 100000) i",
    );
    assert_eq!(r.tag, "INSERT 0 100000");
    assert_eq!(
        rows(
            &mut s,
            "SELECT count(*), min(id), max(id), sum(id), min(length(pad)), max(length(pad)) FROM t"
        ),
        vec![vec![
            big(100_000),
            int(1),
            int(100_000),
            big(5_000_050_000),
            int(100),
            int(100)
        ]]
    );
    // PostgreSQL's md5('1') and md5('100000').
    assert_eq!(
        rows(
            &mut s,
            "SELECT hash FROM t WHERE id IN (1, 100000) ORDER BY id"
        ),
        vec![
            vec![text("c4ca4238a0b923820dcc509a6f75849b")],
            vec![text("14ee22eaba297944c96afdbe5b16c65b")],
        ]
    );
    // random(): in [0, 1), and a different value per row.
    run(&mut s, "CREATE TABLE r (x double precision)");
    run(
        &mut s,
        "INSERT INTO r SELECT random() FROM generate_series(1, 1000)",
    );
    let r = rows(&mut s, "SELECT min(x) >= 0, max(x) < 1, count(*) FROM r");
    assert_eq!(
        r,
        vec![vec![Value::Boolean(true), Value::Boolean(true), big(1000)]]
    );
    let distinct = rows(&mut s, "SELECT x FROM r GROUP BY x").len();
    assert!(distinct > 990, "{distinct} distinct values of 1000");
    // Steps, bigint bounds, empty and NULL ranges, arithmetic and ||.
    assert_eq!(
        rows(&mut s, "SELECT i FROM generate_series(10, 1, -4) AS g(i)"),
        vec![vec![int(10)], vec![int(6)], vec![int(2)]]
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT g FROM generate_series(4294967296, 4294967297) g"
        ),
        vec![vec![big(4_294_967_296)], vec![big(4_294_967_297)]]
    );
    assert_eq!(
        rows(&mut s, "SELECT * FROM generate_series(5, 1)"),
        Vec::<Vec<Value>>::new()
    );
    assert_eq!(
        rows(&mut s, "SELECT * FROM generate_series(1, NULL)"),
        Vec::<Vec<Value>>::new()
    );
    assert!(matches!(
        err(&mut s, "SELECT * FROM generate_series(1, 5, 0)"),
        SqlError::Exec(ExecError::ZeroStep)
    ));
    assert_eq!(
        rows(
            &mut s,
            "SELECT i * 2 + 1, 'row ' || i, i::double precision / 4 FROM generate_series(1, 2) i"
        ),
        vec![
            vec![int(3), text("row 1"), Value::Double(0.25)],
            vec![int(5), text("row 2"), Value::Double(0.5)],
        ]
    );
}

fn group_by_order_by_and_limit_give_postgresql_results(method: IoMethod) {
    let (_dir, _db, mut s) = new_session(method);
    run(
        &mut s,
        "CREATE TABLE m (k integer, v integer, d double precision, name text);
         INSERT INTO m VALUES
            (1, 10, 1.0, 'a'), (1, 20, 2.0, 'b'), (2, 5, NULL, 'c'),
            (2, NULL, 4.0, 'd'), (NULL, 7, 0.5, NULL), (3, 1, 1.5, 'e')",
    );
    let r = last(
        &mut s,
        "SELECT k, count(*) AS n, count(v), sum(v), min(name), max(d), avg(v)
         FROM m GROUP BY k ORDER BY k",
    );
    let names: Vec<&str> = r.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["k", "n", "count", "sum", "min", "max", "avg"]);
    assert_eq!(
        r.rows,
        vec![
            vec![
                int(1),
                big(2),
                big(2),
                big(30),
                text("a"),
                Value::Double(2.0),
                Value::Double(15.0)
            ],
            vec![
                int(2),
                big(2),
                big(1),
                big(5),
                text("c"),
                Value::Double(4.0),
                Value::Double(5.0)
            ],
            vec![
                int(3),
                big(1),
                big(1),
                big(1),
                text("e"),
                Value::Double(1.5),
                Value::Double(1.0)
            ],
            // NULLs group together and sort last ascending.
            vec![
                Value::Null,
                big(1),
                big(1),
                big(7),
                Value::Null,
                Value::Double(0.5),
                Value::Double(7.0)
            ],
        ]
    );
    // DESC puts NULLs first unless told otherwise; position and alias.
    assert_eq!(
        rows(&mut s, "SELECT v FROM m ORDER BY 1 DESC"),
        [Value::Null, int(20), int(10), int(7), int(5), int(1)].map(|v| vec![v])
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT v AS x FROM m ORDER BY x DESC NULLS LAST LIMIT 2"
        ),
        vec![vec![int(20)], vec![int(10)]]
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT v FROM m ORDER BY v NULLS FIRST LIMIT 2 OFFSET 1"
        ),
        vec![vec![int(1)], vec![int(5)]]
    );
    // Sorting on an expression that is not selected, and on several keys.
    assert_eq!(
        rows(
            &mut s,
            "SELECT name FROM m WHERE name IS NOT NULL ORDER BY k DESC, v * -1"
        ),
        [text("e"), text("c"), text("d"), text("b"), text("a")].map(|v| vec![v])
    );
    // HAVING, GROUP BY an expression and by an alias, ORDER BY an aggregate.
    assert_eq!(
        rows(&mut s, "SELECT k % 2 AS parity, count(*) FROM m WHERE k IS NOT NULL GROUP BY parity HAVING count(*) > 2"),
        vec![vec![int(1), big(3)]]
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT k FROM m GROUP BY k ORDER BY sum(v) DESC NULLS LAST, k LIMIT 3"
        ),
        vec![vec![int(1)], vec![Value::Null], vec![int(2)]]
    );
    // Keys match however the column is written.
    assert_eq!(
        rows(
            &mut s,
            "SELECT *, count(*) FROM m WHERE k = 3 GROUP BY k, m.v, \"d\", name"
        ),
        vec![vec![int(3), int(1), Value::Double(1.5), text("e"), big(1)]]
    );
    // An aggregate over no rows is one row; grouped, none.
    assert_eq!(
        rows(
            &mut s,
            "SELECT count(*), sum(v), max(name) FROM m WHERE k > 100"
        ),
        vec![vec![big(0), Value::Null, Value::Null]]
    );
    assert_eq!(
        rows(&mut s, "SELECT k, count(*) FROM m WHERE k > 100 GROUP BY k"),
        Vec::<Vec<Value>>::new()
    );
    assert_eq!(last(&mut s, "SELECT * FROM m LIMIT 0").tag, "SELECT 0");
    for (statement, expected) in [
        ("SELECT k, v FROM m GROUP BY k", Fails::With("column \"v\" must appear in the GROUP BY clause or be used in an aggregate function (at line 1, column 11)")),
        ("SELECT k FROM m ORDER BY 5", Fails::With("ORDER BY position 5 is not in the select list (it has 1 columns)")),
        ("SELECT k, count(*) FROM m GROUP BY 3", Fails::As(|e| {
            matches!(
                e,
                SqlError::BadPosition {
                    clause: "GROUP BY",
                    ..
                }
            )
        })),
        ("SELECT k FROM m LIMIT -1", Fails::As(|e| matches!(e, SqlError::BadLimit { .. }))),
        ("SELECT k FROM m WHERE count(*) > 1", Fails::StartingWith("aggregate functions are not allowed in WHERE")),
        ("SELECT sum(count(*)) FROM m", Fails::As(|e| matches!(e, SqlError::AggregateNotAllowed { .. }))),
    ] {
        assert_fails(&mut s, statement, expected);
    }
}

fn where_supports_comparisons_logic_lists_ranges_nulls_and_like(method: IoMethod) {
    let (_dir, _db, mut s) = new_session(method);
    run(
        &mut s,
        "CREATE TABLE w (id integer, name text, flag boolean);
         INSERT INTO w SELECT i, 'name' || i, i % 3 = 0 FROM generate_series(1, 30) i;
         INSERT INTO w VALUES (NULL, NULL, NULL)",
    );
    for (predicate, expected) in [
        ("id = 5", 1),
        ("id <> 5", 29),
        ("id != 5", 29),
        ("id < 5", 4),
        ("id <= 5", 5),
        ("id > 25", 5),
        ("id >= 25", 6),
        ("id > 10 AND id <= 20", 10),
        ("id < 3 OR id > 28", 4),
        ("NOT id > 3", 3),
        ("id IN (1, 2, 3, 99)", 3),
        ("id NOT IN (1, 2, 3)", 27),
        ("id NOT IN (1, NULL)", 0),
        ("id BETWEEN 5 AND 9", 5),
        ("id NOT BETWEEN 5 AND 9", 25),
        ("id IS NULL", 1),
        ("id IS NOT NULL", 30),
        ("name LIKE 'name1%'", 11),
        ("name LIKE 'name_'", 9),
        ("name NOT LIKE '%0'", 27),
        ("flag", 10),
        ("NOT flag", 20),
        ("flag = true AND id > 20", 4),
        ("id = '7'", 1),
        ("(id = 1 OR id = 2) AND name = 'name2'", 1),
        ("id * 2 = 40", 1),
        ("id IN (1, 2) IS NULL", 1),
    ] {
        let got = scalar(&mut s, &format!("SELECT count(*) FROM w WHERE {predicate}"));
        assert_eq!(got, big(expected), "WHERE {predicate}");
    }
}

fn update_and_delete_change_the_rows_they_match(method: IoMethod) {
    let (_dir, _db, mut s) = session_with_t(method);
    run(
        &mut s,
        "INSERT INTO t SELECT i, 'n' || i FROM generate_series(1, 1000) i",
    );
    assert_eq!(
        last(
            &mut s,
            "UPDATE t SET note = note || '!', id = id + 1000 WHERE id % 10 = 0"
        )
        .tag,
        "UPDATE 100"
    );
    assert_eq!(count(&mut s, "t"), 1000, "an update keeps the row count");
    assert_eq!(
        rows(
            &mut s,
            "SELECT id, note FROM t WHERE id > 1000 ORDER BY id LIMIT 2"
        ),
        vec![vec![int(1010), text("n10!")], vec![int(1020), text("n20!")]]
    );
    assert_eq!(
        last(&mut s, "UPDATE t SET note = 'none' WHERE id < 0").tag,
        "UPDATE 0"
    );
    assert_eq!(
        last(&mut s, "DELETE FROM t WHERE id > 1000 OR id <= 100").tag,
        "DELETE 190"
    );
    assert_eq!(count(&mut s, "t"), 810);
    assert_eq!(
        last(&mut s, "DELETE FROM t AS x WHERE x.id = 101").tag,
        "DELETE 1"
    );
    // Updating a row twice in one transaction updates the newest version.
    run(&mut s, "BEGIN; UPDATE t SET note = 'first' WHERE id = 102; UPDATE t SET note = note || ' second' WHERE id = 102; COMMIT");
    assert_eq!(
        scalar(&mut s, "SELECT note FROM t WHERE id = 102"),
        text("first second")
    );
    // A statement does not see its own rows: this doubles the table once.
    assert_eq!(
        last(&mut s, "INSERT INTO t SELECT id + 5000, note FROM t").tag,
        "INSERT 0 809"
    );
    assert_eq!(last(&mut s, "UPDATE t SET id = id + 1").tag, "UPDATE 1618");
    assert_eq!(
        last(&mut s, "DELETE FROM t WHERE id > 5000").tag,
        "DELETE 809"
    );
    assert_eq!(last(&mut s, "DELETE FROM t").tag, "DELETE 809");
    assert_eq!(count(&mut s, "t"), 0);
}

fn explain_analyze_shows_buffers_and_io_per_scan(method: IoMethod) {
    let (_dir, _db, mut s) = session_with_t(method);
    run(
        &mut s,
        "INSERT INTO t SELECT i, repeat('x', 200) FROM generate_series(1, 5000) i",
    );
    let blocks = match scalar(&mut s, "SELECT prewarm('t')") {
        Value::BigInt(n) => n,
        other => panic!("{other:?}"),
    };
    assert!(blocks > 100, "{blocks} blocks");
    run(&mut s, "CHECKPOINT; SELECT evict_relation('t')");
    let plan: Vec<String> = rows(
        &mut s,
        "EXPLAIN (COSTS OFF, ANALYZE, BUFFERS, IO) SELECT count(*) FROM t WHERE id > 10",
    )
    .into_iter()
    .map(|r| match &r[0] {
        Value::Text(line) => line.clone(),
        other => panic!("{other:?}"),
    })
    .collect();
    assert_eq!(plan[0], "Aggregate (actual rows=1 loops=1)", "{plan:#?}");
    assert_eq!(
        plan[1], "  ->  Seq Scan on t (actual rows=4990 loops=1)",
        "{plan:#?}"
    );
    assert_eq!(plan[2], "        Filter: (id > 10)");
    assert_eq!(plan[3], "        Rows Removed by Filter: 10");
    assert!(plan[4].starts_with("        Buffers: shared "), "{plan:#?}");
    let read: i64 = plan[4]
        .split_whitespace()
        .find_map(|w| w.strip_prefix("read="))
        .expect("blocks were read")
        .parse()
        .unwrap();
    assert!(read > 0 && read <= blocks, "{plan:#?}");
    assert!(plan[5].starts_with("        I/O: ios="), "{plan:#?}");
    let ios: i64 = plan[5]
        .split_whitespace()
        .find_map(|w| w.strip_prefix("ios="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(ios > 0, "{plan:#?}");
    for part in ["blocks/io=", "in-flight=", "waits=", "wait time="] {
        assert!(plan[5].contains(part), "{part} in {}", plan[5]);
    }
    assert!(
        plan.iter().any(|l| l.starts_with("Execution Time: ")),
        "{plan:#?}"
    );
    // A table the pool holds whole: hits only.
    run(
        &mut s,
        "CREATE TABLE small (x int); INSERT INTO small SELECT i FROM generate_series(1, 3000) i",
    );
    let small_blocks = scalar(&mut s, "SELECT prewarm('small')");
    let again = rows(
        &mut s,
        "EXPLAIN (COSTS OFF, ANALYZE, BUFFERS) SELECT count(*) FROM small",
    );
    let buffers = again.iter().find_map(|r| match &r[0] {
        Value::Text(l) if l.contains("Buffers:") => Some(l.clone()),
        _ => None,
    });
    assert_eq!(
        buffers,
        Some(format!(
            "        Buffers: shared hit={}",
            sql::format_value(&small_blocks)
        ))
    );
    // A LIMIT stops the scan: it does not read the whole table, and the
    // scan returns (and counts) only the rows the limit takes.
    let limited = rows(
        &mut s,
        "EXPLAIN (COSTS OFF, ANALYZE) SELECT id FROM t LIMIT 3",
    );
    assert_eq!(limited[0][0], text("Limit (actual rows=3 loops=1)"));
    assert_eq!(
        limited[1][0],
        text("  ->  Seq Scan on t (actual rows=3 loops=1)")
    );
    run(&mut s, "SELECT evict_relation('t')");
    let limited = rows(
        &mut s,
        "EXPLAIN (COSTS OFF, ANALYZE, BUFFERS) SELECT * FROM t LIMIT 10",
    );
    let Value::Text(buffers) = &limited[2][0] else {
        panic!("{limited:?}")
    };
    let touched: i64 = buffers
        .trim()
        .trim_start_matches("Buffers: shared ")
        .split(' ')
        .map(|part| part.split_once('=').unwrap().1.parse::<i64>().unwrap())
        .sum();
    assert!(
        (1..=16).contains(&touched),
        "LIMIT 10 of a {blocks}-block table touched {touched} blocks: {limited:?}"
    );
    // Plain EXPLAIN shows the plan without running it.
    let plain = rows(
        &mut s,
        "EXPLAIN (COSTS OFF) SELECT id, count(*) FROM t GROUP BY id ORDER BY 2 DESC LIMIT 1",
    );
    let plain: Vec<Value> = plain.into_iter().map(|mut r| r.remove(0)).collect();
    assert_eq!(
        plain,
        [
            "Limit",
            "  ->  Sort",
            "        Sort Key: count(*) DESC",
            "        ->  HashAggregate",
            "              Group Key: id",
            "              ->  Seq Scan on t",
        ]
        .map(text)
    );
    assert_eq!(
        last(&mut s, "EXPLAIN (COSTS OFF) DELETE FROM t").tag,
        "EXPLAIN"
    );
    assert_eq!(
        count(&mut s, "t"),
        5000,
        "EXPLAIN without ANALYZE deleted nothing"
    );
    assert_fails(
        &mut s,
        "EXPLAIN (COSTS OFF, IO) SELECT 1",
        Fails::With("EXPLAIN option IO requires ANALYZE"),
    );
}

/// EXPLAIN (ANALYZE, WAL, IO) of an UPDATE of a table larger than the
/// pool shows on its top node the records, page images and bytes it
/// logged and the WAL flushes it waited for: each dirty page evicted
/// during the update is written only after its WAL.
fn explain_analyze_shows_wal_and_flush_waits(method: IoMethod) {
    let (_dir, db) = new_db_with(method, &["shared_buffers=64"]);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE w (id int, note text); INSERT INTO w SELECT i, repeat('x', 200) FROM generate_series(1, 5000) i; CHECKPOINT",
    );
    let plan: Vec<String> = rows(
        &mut s,
        "EXPLAIN (COSTS OFF, ANALYZE, WAL, IO) UPDATE w SET note = repeat('y', 200)",
    )
    .into_iter()
    .map(|r| match &r[0] {
        Value::Text(line) => line.clone(),
        other => panic!("{other:?}"),
    })
    .collect();
    assert_eq!(plan[0], "Update on w (actual rows=0 loops=1)", "{plan:#?}");
    let figure = |line: &str, name: &str| -> f64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} in {line}"))
            .parse()
            .unwrap()
    };
    assert!(plan[1].starts_with("  WAL: records="), "{plan:#?}");
    assert!(figure(&plan[1], "records=") >= 5000.0, "{plan:#?}");
    // The first change to each page after the checkpoint logs its image.
    assert!(figure(&plan[1], "fpi=") >= 30.0, "{plan:#?}");
    assert!(figure(&plan[1], "bytes=") > 5000.0 * 200.0, "{plan:#?}");
    assert!(plan[2].starts_with("  WAL flush: waits="), "{plan:#?}");
    assert!(figure(&plan[2], "waits=") >= 1.0, "{plan:#?}");
    assert!(plan[2].ends_with(" ms"), "{plan:#?}");
    // Without IO, no flush line; a query that logs nothing shows no WAL.
    let quiet = rows(
        &mut s,
        "EXPLAIN (COSTS OFF, ANALYZE, WAL) SELECT count(*) FROM w",
    );
    assert!(
        !quiet
            .iter()
            .any(|r| matches!(&r[0], Value::Text(l) if l.contains("WAL"))),
        "{quiet:?}"
    );
    assert_fails(
        &mut s,
        "EXPLAIN (COSTS OFF, WAL) SELECT 1",
        Fails::With("EXPLAIN option WAL requires ANALYZE"),
    );
}

fn system_views_return_the_engines_state(method: IoMethod) {
    let (_dir, db, mut s) = session_with_t(method);
    run(
        &mut s,
        "INSERT INTO t SELECT i, 'x' FROM generate_series(1, 3000) i; CHECKPOINT",
    );
    let inflight = last(&mut s, "SELECT * FROM aio_inflight");
    let names: Vec<&str> = inflight.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "session",
            "handle",
            "generation",
            "state",
            "op",
            "offset",
            "length",
            "target",
            "result",
            "flags"
        ]
    );
    assert_eq!(
        inflight.rows,
        Vec::<Vec<Value>>::new(),
        "nothing is in flight between statements"
    );
    // Hold a read at its completion (in whichever thread completes it) and
    // look at it from another session.
    run(&mut s, "SELECT evict_relation('t')");
    let rel = db.catalog().table("t").unwrap().heap.rel;
    db.aio()
        .injections()
        .attach(BEFORE_COMPLETE_SHARED, Injection::park().times(1));
    let reader = {
        let db = Arc::clone(&db);
        std::thread::spawn(move || {
            let mut r = db.session().unwrap();
            count(&mut r, "t")
        })
    };
    assert!(db
        .aio()
        .injections()
        .wait_until_parked(BEFORE_COMPLETE_SHARED));
    let held = rows(&mut s, "SELECT op, target, length > 0 FROM aio_inflight");
    db.aio().injections().release(BEFORE_COMPLETE_SHARED);
    assert_eq!(reader.join().unwrap(), 3000);
    assert!(!held.is_empty(), "the held read is listed");
    assert_eq!(held[0][0], text("read"), "{held:?}");
    let Value::Text(target) = &held[0][1] else {
        panic!("{held:?}")
    };
    assert!(target.contains(&format!("relation {rel}")), "{target}");
    assert_eq!(held[0][2], Value::Boolean(true));
    run(&mut s, "SELECT evict_relation('t'); SELECT prewarm('t')");
    let io = rows(
        &mut s,
        "SELECT op, ios > 0, bytes > 0 FROM stat_io WHERE source = 'aio' AND op IN ('read', 'write') ORDER BY op",
    );
    assert_eq!(
        io,
        vec![
            vec![text("read"), Value::Boolean(true), Value::Boolean(true)],
            vec![text("write"), Value::Boolean(true), Value::Boolean(true)],
        ]
    );
    let pool = rows(
        &mut s,
        "SELECT method, hits > 0, reads > 0, writes > 0 FROM stat_io WHERE source = 'buffer pool'",
    );
    assert_eq!(
        pool,
        vec![vec![
            text(db.aio().method().name()),
            Value::Boolean(true),
            Value::Boolean(true),
            Value::Boolean(true)
        ]]
    );
    let nblocks = db
        .pool()
        .relation(db.catalog().table("t").unwrap().heap.rel)
        .nblocks(aiostore::storage::Fork::Main)
        .unwrap();
    let cached = rows(
        &mut s,
        "SELECT count(*), min(b.block), max(block), min(fork) FROM buffers AS b WHERE b.relname = 't' AND valid AND NOT dirty",
    );
    assert_eq!(
        cached,
        vec![vec![
            big(i64::from(nblocks)),
            big(0),
            big(i64::from(nblocks) - 1),
            text("main")
        ]]
    );
}

fn prewarm_evict_and_read_stream_for_blocks_act_on_the_pool(method: IoMethod) {
    let (_dir, db, mut s) = session_with_t(method);
    run(
        &mut s,
        "INSERT INTO t SELECT i, repeat('y', 500) FROM generate_series(1, 300) i; CHECKPOINT",
    );
    let table = db.catalog().table("t").unwrap();
    let nblocks = i64::from(
        db.pool()
            .relation(table.heap.rel)
            .nblocks(aiostore::storage::Fork::Main)
            .unwrap(),
    );
    assert!(nblocks >= 8, "{nblocks}");
    assert_eq!(scalar(&mut s, "SELECT prewarm('t')"), big(nblocks));
    assert_eq!(
        scalar(
            &mut s,
            "SELECT count(*) FROM buffers WHERE relname = 't' AND fork = 'main'"
        ),
        big(nblocks)
    );
    // The inserts also left the table's free-space map page in the pool;
    // evicting the relation takes every fork's buffers.
    let fsm_buffers = match scalar(
        &mut s,
        "SELECT count(*) FROM buffers WHERE relname = 't' AND fork = 'fsm'",
    ) {
        Value::BigInt(n) => n,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        scalar(&mut s, "SELECT evict_relation('T') AS evicted"),
        big(nblocks + fsm_buffers),
        "names fold"
    );
    assert_eq!(
        scalar(&mut s, "SELECT count(*) FROM buffers WHERE relname = 't'"),
        big(0)
    );
    let r = last(
        &mut s,
        "SELECT read_stream_for_blocks('t', ARRAY[0, 1, 2, 3, 2, 7])",
    );
    let names: Vec<&str> = r.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "blocks",
            "hits",
            "reads",
            "ios",
            "foreign_ios",
            "waits",
            "ms"
        ]
    );
    let get = |r: &StatementResult, name: &str| r.rows[0][r.column(name).unwrap()].clone();
    assert_eq!(get(&r, "blocks"), big(6));
    assert_eq!(get(&r, "reads"), big(5), "block 2 again is not read again");
    let r = last(
        &mut s,
        "SELECT * FROM read_stream_for_blocks('t', ARRAY[0, 1, 2])",
    );
    assert_eq!(
        (get(&r, "blocks"), get(&r, "hits"), get(&r, "reads")),
        (big(3), big(3), big(0))
    );
    let past_the_end = format!("SELECT read_stream_for_blocks('t', ARRAY[0, {nblocks}])");
    let beyond =
        format!("block {nblocks} is beyond the end of table \"t\", which has {nblocks} blocks");
    for (statement, expected) in [
        (past_the_end.as_str(), Fails::With(&beyond)),
        (
            "SELECT prewarm('missing')",
            Fails::As(|e| matches!(e, SqlError::UnknownTable { .. })),
        ),
        ("SELECT prewarm(1)", Fails::Containing("prewarm('table')")),
        (
            "SELECT id, prewarm('t') FROM t",
            Fails::As(|e| matches!(e, SqlError::UtilityPlacement { .. })),
        ),
        (
            "SELECT 1 + read_stream_for_blocks('t', ARRAY[0])",
            Fails::As(|e| matches!(e, SqlError::UtilityPlacement { .. })),
        ),
    ] {
        assert_fails(&mut s, statement, expected);
    }
}

fn set_show_and_reset_change_session_settings(method: IoMethod) {
    let (_dir, db, mut s) = new_session(method);
    let mut other = db.session().unwrap();
    assert_eq!(last(&mut s, "SET io_combine_limit = 4").tag, "SET");
    assert_eq!(
        s.buf.settings.io_combine_limit, 4,
        "the buffer session follows"
    );
    let shown = last(&mut s, "SHOW io_combine_limit");
    assert_eq!(shown.columns[0].name, "io_combine_limit");
    // Sizes in PostgreSQL's units, as its SHOW gives them.
    assert_eq!(shown.rows, vec![vec![text("32kB")]]);
    assert_eq!(
        scalar(&mut other, "SHOW io_combine_limit"),
        text("128kB"),
        "per session"
    );
    assert_eq!(scalar(&mut other, "SHOW shared_buffers"), text("512kB"));
    run(
        &mut s,
        "SET effective_io_concurrency TO 0; SET zero_damaged_pages = on",
    );
    let all = rows(&mut s, "SHOW ALL");
    let row = all
        .iter()
        .find(|r| r[0] == text("effective_io_concurrency"))
        .unwrap();
    assert_eq!(
        (&row[1], &row[2]),
        (&text("0"), &text("SET in this session"))
    );
    assert!(
        all.iter()
            .any(|r| r[0] == text("transaction_isolation") && r[1] == text("read committed")),
        "SHOW ALL lists transaction_isolation"
    );
    assert_eq!(scalar(&mut s, "SHOW zero_damaged_pages"), text("on"));
    assert_eq!(last(&mut s, "RESET io_combine_limit").tag, "RESET");
    assert_eq!(scalar(&mut s, "SHOW io_combine_limit"), text("128kB"));
    run(&mut s, "RESET ALL");
    assert_eq!(scalar(&mut s, "SHOW effective_io_concurrency"), text("16"));
    run(
        &mut s,
        "SET io_combine_limit = 2; SET io_combine_limit TO DEFAULT",
    );
    assert_eq!(scalar(&mut s, "SHOW io_combine_limit"), text("128kB"));
    for (statement, expected) in [
        (
            "SET io_method = sync",
            Fails::Containing("can only be set at start-up"),
        ),
        (
            "SET io_combine_limit = 1000",
            Fails::Containing("invalid value \"1000\" for setting \"io_combine_limit\""),
        ),
        (
            "SHOW nonexistent",
            Fails::Containing("unrecognized setting \"nonexistent\""),
        ),
        (
            "SET LOCAL io_combine_limit = 2",
            Fails::As(|e| matches!(e, SqlError::Unsupported { .. })),
        ),
    ] {
        assert_fails(&mut s, statement, expected);
    }
}

fn repeatable_read_keeps_its_snapshot_and_read_committed_does_not(method: IoMethod) {
    let (_dir, db) = new_db(method);
    let mut a = db.session().unwrap();
    let mut b = db.session().unwrap();
    create_t(&mut a);
    run(
        &mut a,
        "INSERT INTO t SELECT i, 'x' FROM generate_series(1, 10) i",
    );

    run(&mut a, "BEGIN ISOLATION LEVEL REPEATABLE READ");
    assert_eq!(count(&mut a, "t"), 10);
    run(
        &mut b,
        "INSERT INTO t VALUES (11, 'committed by b'); DELETE FROM t WHERE id = 1",
    );
    assert_eq!(
        count(&mut a, "t"),
        10,
        "repeatable read: the first snapshot stays"
    );
    assert_eq!(scalar(&mut a, "SELECT min(id) FROM t"), int(1));
    run(&mut a, "COMMIT");
    assert_eq!(count(&mut a, "t"), 10);
    assert_eq!(scalar(&mut a, "SELECT min(id) FROM t"), int(2));

    run(&mut a, "START TRANSACTION ISOLATION LEVEL READ COMMITTED");
    assert_eq!(count(&mut a, "t"), 10);
    run(&mut b, "INSERT INTO t VALUES (12, 'committed by b')");
    assert_eq!(
        count(&mut a, "t"),
        11,
        "read committed: each statement sees new commits"
    );
    run(&mut a, "COMMIT");

    // Nobody sees what is not committed.
    run(&mut b, "BEGIN; INSERT INTO t SELECT i, 'pending' FROM generate_series(100, 199) i; UPDATE t SET note = 'pending' WHERE id = 2");
    assert_eq!(count(&mut a, "t"), 11);
    assert_eq!(
        scalar(&mut a, "SELECT count(*) FROM t WHERE note = 'pending'"),
        big(0)
    );
    assert_eq!(count(&mut b, "t"), 111, "b sees its own work");
    run(&mut b, "COMMIT");
    assert_eq!(
        scalar(&mut a, "SELECT count(*) FROM t WHERE note = 'pending'"),
        big(101)
    );
}

fn a_concurrent_update_of_the_same_row_fails_the_later_transaction(method: IoMethod) {
    let (_dir, db) = new_db(method);
    let mut a = db.session().unwrap();
    let mut b = db.session().unwrap();
    create_t(&mut a);
    run(&mut a, "INSERT INTO t VALUES (1, 'original')");
    run(
        &mut a,
        "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT * FROM t",
    );
    run(&mut b, "UPDATE t SET note = 'b was first' WHERE id = 1");
    let e = err(&mut a, "UPDATE t SET note = 'a was second' WHERE id = 1");
    assert!(
        matches!(
            e,
            SqlError::Exec(ExecError::Heap(HeapError::ConcurrentUpdate { .. }))
        ),
        "{e}"
    );
    assert!(e.to_string().contains("retry the transaction"), "{e}");
    run(&mut a, "ROLLBACK");
    assert_eq!(scalar(&mut a, "SELECT note FROM t"), text("b was first"));
}

fn a_sequential_scan_reads_the_same_rows_with_and_without_direct_io(method: IoMethod) {
    let dir = temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    let query = "SELECT id, note FROM t WHERE id % 7 = 3 ORDER BY id";
    let expected = {
        let db = Database::open(&path, &settings(method, &["io_direct=off"])).unwrap();
        let mut s = db.session().unwrap();
        create_t(&mut s);
        run(
            &mut s,
            "INSERT INTO t SELECT i, md5(i::text) FROM generate_series(1, 20000) i",
        );
        rows(&mut s, query)
    };
    assert_eq!(expected.len(), 2857);
    for direct in ["data", "off", "data"] {
        let db =
            Database::open(&path, &settings(method, &[&format!("io_direct={direct}")])).unwrap();
        let mut s = db.session().unwrap();
        assert_eq!(rows(&mut s, query), expected, "io_direct={direct}");
        assert_eq!(count(&mut s, "t"), 20000, "io_direct={direct}");
    }
}

fn vacuum_removes_dead_rows_and_checkpoint_writes_back(method: IoMethod) {
    let (_dir, _db, mut s) = session_with_t(method);
    run(
        &mut s,
        "CREATE TABLE other (x int); INSERT INTO t SELECT i, 'v' FROM generate_series(1, 2000) i",
    );
    run(&mut s, "DELETE FROM t WHERE id > 1500");
    let r = last(&mut s, "VACUUM t");
    assert_eq!(r.tag, "VACUUM");
    assert_eq!(r.notices.len(), 1);
    assert!(
        r.notices[0].contains("500 dead rows removed, 1500 kept"),
        "{:?}",
        r.notices
    );
    let r = last(&mut s, "VACUUM");
    assert_eq!(r.notices.len(), 2, "every table: {:?}", r.notices);
    assert_eq!(count(&mut s, "t"), 1500);
    assert_fails(
        &mut s,
        "VACUUM missing",
        Fails::As(|e| matches!(e, SqlError::UnknownTable { .. })),
    );
    let dirty_before = scalar(&mut s, "SELECT count(*) FROM buffers WHERE dirty");
    assert_ne!(dirty_before, big(0), "VACUUM left pages to write");
    assert_eq!(last(&mut s, "CHECKPOINT").tag, "CHECKPOINT");
    let dirty = scalar(&mut s, "SELECT count(*) FROM buffers WHERE dirty");
    assert_eq!(dirty, big(0), "CHECKPOINT wrote every dirty buffer");
}

fn results_print_as_tables_and_csv(method: IoMethod) {
    let (_dir, _db, mut s) = new_session(method);
    let results = run(
        &mut s,
        "CREATE TABLE p (id int, note text, ok boolean);
         INSERT INTO p VALUES (1, 'plain', true), (22, 'has, comma', NULL);
         SELECT * FROM p ORDER BY id",
    );
    assert_eq!(format_table(&results[1]), "INSERT 0 2\n");
    assert_eq!(
        format_table(&results[2]),
        " id |    note    | ok\n----+------------+----\n  1 | plain      | t\n 22 | has, comma |\n(2 rows)\n"
    );
    assert_eq!(
        format_csv(&results[2]),
        "id,note,ok\n1,plain,t\n22,\"has, comma\",\n"
    );
    assert_eq!(format_csv(&results[1]), "");
    let one = last(&mut s, "SELECT count(*) AS n FROM p");
    assert!(format_table(&one).ends_with("(1 row)\n"));
}

fn sorts_and_aggregations_beyond_work_mem_spill_and_give_the_same_rows(method: IoMethod) {
    let (dir, _db, mut s) = new_session(method);
    run(
        &mut s,
        // NULL keys, and -0 and 0, group together however they spill.
        "CREATE TABLE t (id int, k text, x double precision);
         INSERT INTO t SELECT g, 'key ' || (g * 7919 % 20011), g % 20011 % 7
           FROM generate_series(1, 60000) g;
         INSERT INTO t SELECT g, NULL, 0.0 FROM generate_series(60001, 61000) g;
         INSERT INTO t SELECT g, 'key ' || (g % 50), -0.0 FROM generate_series(61001, 62000) g;
         INSERT INTO t SELECT g, NULL, -0.0 FROM generate_series(62001, 63000) g",
    );
    let sort = "SELECT k, id FROM t ORDER BY k DESC NULLS LAST, x";
    let group =
        "SELECT k, x, count(*), sum(id), min(id), max(k) FROM t GROUP BY k, x HAVING count(*) > 1";
    run(&mut s, "SET work_mem = '64MB'");
    let in_memory_sorted = rows(&mut s, sort);
    let mut in_memory_groups = rows(&mut s, group);
    run(&mut s, "SET work_mem = '64kB'");
    assert_eq!(
        rows(&mut s, sort),
        in_memory_sorted,
        "a spilled sort is stable"
    );
    let mut spilled_groups = rows(&mut s, group);
    // Hash aggregation returns groups in no set order.
    let by_text = |r: &Vec<Value>| format!("{r:?}");
    in_memory_groups.sort_by_key(by_text);
    spilled_groups.sort_by_key(by_text);
    assert_eq!(spilled_groups, in_memory_groups);
    assert!(in_memory_groups.len() > 1000, "{}", in_memory_groups.len());

    let plan = plan_lines(&mut s, &format!("EXPLAIN (COSTS OFF, ANALYZE) {sort}"));
    assert!(
        plan.iter()
            .any(|l| l.contains("Sort Method: external merge  Disk: ")),
        "{plan:#?}"
    );
    let plan = plan_lines(&mut s, &format!("EXPLAIN (COSTS OFF, ANALYZE) {group}"));
    let batches = plan
        .iter()
        .find_map(|l| l.trim().strip_prefix("Batches: "))
        .unwrap_or_else(|| panic!("{plan:#?}"));
    assert!(
        !batches.starts_with("1 ") && batches.contains("Disk Usage: "),
        "{batches}"
    );
    // A volatile group key is computed once per row, spilled with it:
    // every row lands in exactly one group.
    let random = rows(
        &mut s,
        "SELECT (random() * 20000)::int AS r, count(*) FROM t GROUP BY 1",
    );
    let mut keys: Vec<String> = random.iter().map(|r| format!("{:?}", r[0])).collect();
    let groups = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), groups, "a key returned twice");
    let total: i64 = random
        .iter()
        .map(|r| match r[1] {
            Value::BigInt(n) => n,
            ref v => panic!("{v:?}"),
        })
        .sum();
    assert_eq!(total, 63_000);
    // min and max of text count the text they hold: few groups with long
    // values spill too.
    let plan = plan_lines(
        &mut s,
        "EXPLAIN (COSTS OFF, ANALYZE) SELECT id % 40, max(repeat(k, 300)) FROM t GROUP BY 1",
    );
    let batches = plan
        .iter()
        .find_map(|l| l.trim().strip_prefix("Batches: "))
        .unwrap_or_else(|| panic!("{plan:#?}"));
    assert!(!batches.starts_with("1 "), "{batches}");

    // ORDER BY … LIMIT keeps only the rows it may return (a top-N sort),
    // within 64kB here, and gives the stable sort's first rows.
    let first = rows(&mut s, &format!("{sort} LIMIT 3 OFFSET 5"));
    assert_eq!(first, in_memory_sorted[5..8]);
    let plan = plan_lines(
        &mut s,
        &format!("EXPLAIN (COSTS OFF, ANALYZE) {sort} LIMIT 3 OFFSET 5"),
    );
    assert!(
        plan.iter()
            .any(|l| l.contains("Sort Method: top-N sort  Memory: ")),
        "{plan:#?}"
    );
    run(&mut s, "SET work_mem = '64MB'");
    let plan = plan_lines(&mut s, &format!("EXPLAIN (COSTS OFF, ANALYZE) {sort}"));
    assert!(
        plan.iter()
            .any(|l| l.contains("Sort Method: quicksort  Memory: ")),
        "{plan:#?}"
    );
    let plan = plan_lines(&mut s, &format!("EXPLAIN (COSTS OFF, ANALYZE) {group}"));
    assert!(
        plan.iter()
            .any(|l| l.trim().starts_with("Batches: 1  Memory Usage: ")),
        "{plan:#?}"
    );
    // Spill files have no names, and none is still open: nothing is left
    // behind.
    let tmp = dir.path().join("data").join("tmp");
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
    assert_eq!(aiostore::sort::spill::open_files_in(&tmp), 0);
}

fn joins_give_the_rows_of_their_definition_by_every_method(method: IoMethod) {
    let (_dir, _db, mut s) = new_session(method);
    // Keys with duplicates on both sides, NULLs, and keys one side lacks.
    run(
        &mut s,
        "CREATE TABLE a (id int, k int, name text);
         CREATE TABLE b (id int, k bigint, v text);
         INSERT INTO a SELECT g, g % 300, 'a' || g FROM generate_series(1, 3000) g;
         INSERT INTO a SELECT g, NULL, 'anull' FROM generate_series(3001, 3050) g;
         INSERT INTO b SELECT g, g % 450, 'b' || g FROM generate_series(1, 2000) g;
         INSERT INTO b SELECT g, NULL, 'bnull' FROM generate_series(2001, 2030) g",
    );
    // The definition, computed here from the same data.
    let a: Vec<(i64, Option<i64>)> = (1..=3050)
        .map(|g| (g, (g <= 3000).then_some(g % 300)))
        .collect();
    let b: Vec<(i64, Option<i64>)> = (1..=2030)
        .map(|g| (g, (g <= 2000).then_some(g % 450)))
        .collect();
    let mut inner = Vec::new();
    let mut left = Vec::new();
    for &(ai, ak) in &a {
        let mut matched = false;
        for &(bi, bk) in &b {
            if ak.is_some() && ak == bk && bi % 3 != 0 {
                inner.push(vec![big(ai), big(bi)]);
                left.push(vec![big(ai), big(bi)]);
                matched = true;
            }
        }
        if !matched {
            left.push(vec![big(ai), Value::Null]);
        }
    }
    inner.sort_by_key(|r| format!("{r:?}"));
    left.sort_by_key(|r| format!("{r:?}"));
    let ids = |s: &mut Session, text: &str| {
        let mut got: Vec<Vec<Value>> = rows(s, text)
            .into_iter()
            .map(|r| {
                r.into_iter()
                    .map(|v| match v {
                        Value::Integer(x) => big(i64::from(x)),
                        other => other,
                    })
                    .collect()
            })
            .collect();
        got.sort_by_key(|r| format!("{r:?}"));
        got
    };
    for work_mem in ["64MB", "64kB"] {
        run(&mut s, &format!("SET work_mem = '{work_mem}'"));
        // ON, and a comma with the equality in WHERE: both hash joins
        // (integer against bigint keys compare as bigint).
        assert_eq!(
            ids(
                &mut s,
                "SELECT a.id, b.id FROM a JOIN b ON a.k = b.k WHERE b.id % 3 <> 0"
            ),
            inner,
            "{work_mem}"
        );
        assert_eq!(
            ids(
                &mut s,
                "SELECT a.id, b.id FROM a, b WHERE b.k = a.k AND b.id % 3 <> 0"
            ),
            inner
        );
        // The condition on b in ON filters b before the join: every row
        // of a stays.
        assert_eq!(
            ids(
                &mut s,
                "SELECT x.id, y.id FROM a x LEFT JOIN b y ON x.k = y.k AND y.id % 3 <> 0"
            ),
            left
        );
    }
    // Hash and merge joins turned off: the same equalities by nested loop.
    run(
        &mut s,
        "SET enable_hashjoin = off; SET enable_mergejoin = off",
    );
    let nested = "SELECT a.id, b.id FROM a JOIN b ON a.k = b.k AND b.id % 3 <> 0 WHERE a.id <= 40";
    assert_eq!(
        plan_lines(&mut s, &format!("EXPLAIN (COSTS OFF) {nested}"))[0],
        "Nested Loop"
    );
    let by_nested_loop = ids(&mut s, nested);
    run(&mut s, "RESET enable_mergejoin");
    assert_eq!(
        plan_lines(&mut s, &format!("EXPLAIN (COSTS OFF) {nested}"))[0],
        "Merge Join"
    );
    assert_eq!(ids(&mut s, nested), by_nested_loop);
    run(&mut s, "RESET enable_hashjoin");
    assert_eq!(
        plan_lines(&mut s, &format!("EXPLAIN (COSTS OFF) {nested}"))[0],
        "Hash Join"
    );
    assert_eq!(ids(&mut s, nested), by_nested_loop);
    // Without an equality: a nested loop, same rows.
    let few = |rows: &[Vec<Value>]| -> Vec<Vec<Value>> {
        rows.iter()
            .filter(|r| matches!(r[0], Value::BigInt(x) if x <= 40))
            .cloned()
            .collect()
    };
    assert_eq!(
        ids(
            &mut s,
            "SELECT a.id, b.id FROM a JOIN b ON a.k <= b.k AND a.k >= b.k AND b.id % 3 <> 0 WHERE a.id <= 40"
        ),
        few(&inner)
    );
    // A WHERE on the side a left join fills with NULLs runs after it.
    let unmatched: Vec<Vec<Value>> = left.iter().filter(|r| r[1].is_null()).cloned().collect();
    assert_eq!(
        ids(
            &mut s,
            "SELECT a.id, b.id FROM a LEFT JOIN b ON a.k = b.k AND b.id % 3 <> 0 WHERE b.id IS NULL"
        ),
        unmatched
    );
    // Three tables, an alias, aggregation over the join: a row 7 (k 7)
    // meets b 7, 457, 907, 1357 and 1807, whose rows of a have k 7, 157,
    // 7, 157 and 7.
    assert_eq!(
        rows(
            &mut s,
            "SELECT count(*), min(c.id), max(c.id) FROM a JOIN b ON a.k = b.k
               JOIN a c ON c.id = b.id AND c.k < 100 WHERE a.id = 7"
        ),
        [vec![big(3), Value::Integer(7), Value::Integer(1807)]]
    );
    let plan = plan_lines(
        &mut s,
        "EXPLAIN (COSTS OFF) SELECT a.id FROM a, b WHERE a.k = b.k AND a.id < 5",
    );
    assert_eq!(
        plan,
        // The few rows of a hashed, b probing them (the sides commute,
        // as PostgreSQL commutes them), the probing side first in the
        // condition as PostgreSQL prints it.
        [
            "Hash Join",
            "  Hash Cond: (b.k = a.k)",
            "  ->  Seq Scan on b",
            "  ->  Seq Scan on a",
            "        Filter: (a.id < 5)",
        ]
    );
    let plan = plan_lines(
        &mut s,
        "EXPLAIN (COSTS OFF) SELECT 1 FROM a LEFT JOIN b ON a.id < b.id",
    );
    assert_eq!(
        plan,
        [
            "Nested Loop Left Join",
            "  Join Filter: (a.id < b.id)",
            "  ->  Seq Scan on a",
            "  ->  Seq Scan on b",
        ]
    );
    // An item none of whose columns is read still has its full width in
    // the joined row, so the items after it stay where the plan expects.
    assert_eq!(
        rows(&mut s, "SELECT count(*) FROM a x, b y WHERE x.id <= 10"),
        [vec![big(20_300)]]
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT b.id, b.k, c.id FROM a x, b, a c WHERE x.id <= 2 AND b.id = 7 AND c.id = 9"
        ),
        [
            vec![Value::Integer(7), big(7), Value::Integer(9)],
            vec![Value::Integer(7), big(7), Value::Integer(9)],
        ]
    );
    // Names in ON resolve among the items of its comma group joined so
    // far: `name` is x's there, though z has one too.
    assert_eq!(
        rows(
            &mut s,
            "SELECT count(*) FROM a x JOIN b y ON name = 'a7' AND x.k = y.k JOIN a z ON z.id = y.id"
        ),
        [vec![big(5)]]
    );
    let e = err(&mut s, "SELECT 1 FROM a x0, a x1 LEFT JOIN b ON x0.k = b.k").to_string();
    assert!(
        e.contains("invalid reference to FROM-clause entry for table \"x0\""),
        "{e}"
    );
    // A utility on the inner side of a nested loop runs once per
    // statement: every outer row sees the same result.
    run(&mut s, "SELECT prewarm('b')");
    let evicted = rows(
        &mut s,
        "SELECT evict_relation FROM generate_series(1, 3) g, evict_relation('b')",
    );
    assert_eq!(evicted.len(), 3);
    assert!(
        evicted.iter().all(|r| r == &evicted[0])
            && !matches!(evicted[0][0], Value::BigInt(0) | Value::Integer(0)),
        "{evicted:?}"
    );
    // EXPLAIN ANALYZE shows the inner side's runs, and rows per run.
    let plan = plan_lines(
        &mut s,
        "EXPLAIN (COSTS OFF, ANALYZE) SELECT count(*) FROM a JOIN b ON a.id < b.id WHERE a.id <= 3",
    );
    assert!(
        plan.iter()
            .any(|l| l.trim() == "->  Seq Scan on b (actual rows=2030 loops=3)"),
        "{plan:#?}"
    );
    // char keys of different lengths hash alike whatever their padding;
    // so do text and varchar.
    run(
        &mut s,
        "CREATE TABLE c5 (k char(5), t text); CREATE TABLE c3 (k char(3), v varchar(4));
         INSERT INTO c5 VALUES ('ab', 'x'), ('zz', 'ab'), (NULL, NULL);
         INSERT INTO c3 VALUES ('ab ', 'ab'), ('zz', 'x'), ('q', NULL)",
    );
    assert_eq!(
        plan_lines(
            &mut s,
            "EXPLAIN (COSTS OFF) SELECT 1 FROM c5 JOIN c3 ON c5.k = c3.k"
        )[0],
        "Hash Join"
    );
    assert_eq!(
        plan_lines(
            &mut s,
            "EXPLAIN (COSTS OFF) SELECT 1 FROM c5 JOIN c3 ON c5.t = c3.v"
        )[0],
        "Hash Join"
    );
    assert_eq!(
        ids(&mut s, "SELECT c5.t, c3.v FROM c5 JOIN c3 ON c5.k = c3.k"),
        [vec![text("ab"), text("x")], vec![text("x"), text("ab")]]
    );
    assert_eq!(
        ids(&mut s, "SELECT c5.k, c3.k FROM c5 JOIN c3 ON c5.t = c3.v"),
        [
            vec![Value::Char("ab   ".into()), Value::Char("zz ".into())],
            vec![Value::Char("zz   ".into()), Value::Char("ab ".into())],
        ]
    );
    // Mixed with char, as PostgreSQL 15 compares them: char = varchar as
    // char ('zz   ' = 'zz '), char = text as text ('zz' <> 'zz '). The
    // hash join agrees with the nested loop on both.
    run(
        &mut s,
        "INSERT INTO c3 VALUES ('r', 'zz '); INSERT INTO c5 VALUES ('zz', 'zz ')",
    );
    for (query, expected) in [
        (
            "SELECT c5.t, c3.v FROM c5 JOIN c3 ON c5.k = c3.v",
            vec![
                vec![text("ab"), text("zz ")],
                vec![text("x"), text("ab")],
                vec![text("zz "), text("zz ")],
            ],
        ),
        (
            "SELECT c3.v, c5.t FROM c3 JOIN c5 ON c3.k = c5.t",
            vec![vec![text("ab"), text("ab")]],
        ),
    ] {
        assert_eq!(
            plan_lines(&mut s, &format!("EXPLAIN (COSTS OFF) {query}"))[0],
            "Hash Join"
        );
        assert_eq!(ids(&mut s, query), expected, "{query}");
        run(&mut s, "SET enable_hashjoin = off");
        assert_eq!(ids(&mut s, query), expected, "{query}, merge join");
        run(&mut s, "SET enable_mergejoin = off");
        assert_eq!(ids(&mut s, query), expected, "{query}, nested loop");
        run(&mut s, "RESET enable_hashjoin; RESET enable_mergejoin");
    }
    for (text, message) in [
        (
            "SELECT id FROM a, b",
            "column reference \"id\" is ambiguous",
        ),
        (
            "SELECT a.id FROM a JOIN b ON a.id = c.id",
            "missing FROM-clause entry for table \"c\"",
        ),
        (
            "SELECT 1 FROM a JOIN a ON true",
            "table name \"a\" specified more than once",
        ),
        (
            "SELECT 1 FROM a JOIN b ON b.k = z.k JOIN a z ON true",
            "invalid reference to FROM-clause entry for table \"z\"",
        ),
        (
            "SELECT 1 FROM a RIGHT JOIN b ON true",
            "RIGHT or FULL JOIN is not supported",
        ),
        (
            "SELECT 1 FROM a JOIN b USING (id)",
            "JOIN … USING is not supported",
        ),
        // No cross join by omission, as in PostgreSQL.
        (
            "SELECT 1 FROM a JOIN b",
            "syntax error in statement 1: JOIN without ON at line 1, column 22; give the join its condition with ON, or write CROSS JOIN",
        ),
        (
            "SELECT 1 FROM a LEFT JOIN b WHERE a.id = 1",
            "JOIN without ON at line 1, column 27",
        ),
    ] {
        let e = err(&mut s, text).to_string();
        assert!(e.contains(message), "{text}: {e}");
    }
}

/// A row receiver that records what it was sent, and fails its
/// `fail_at`-th batch.
#[derive(Default)]
struct RecordingSink {
    events: Vec<String>,
    rows: Vec<Vec<Value>>,
    largest_batch: usize,
    fail_at: Option<usize>,
    batches: usize,
}

impl sql::RowSink for RecordingSink {
    fn begin(&mut self, columns: &[sql::ResultColumn]) -> std::io::Result<()> {
        let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
        self.events.push(format!("begin {}", names.join(",")));
        Ok(())
    }

    fn rows(&mut self, rows: &mut Vec<Vec<Value>>) -> std::io::Result<()> {
        self.batches += 1;
        if self.fail_at == Some(self.batches) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "reader went away",
            ));
        }
        self.largest_batch = self.largest_batch.max(rows.len());
        self.rows.append(rows);
        Ok(())
    }

    fn end(&mut self, count: Option<u64>) -> std::io::Result<()> {
        self.events.push(format!("end {count:?}"));
        Ok(())
    }
}

fn run_streaming(
    s: &mut Session,
    text: &str,
    sink: &mut RecordingSink,
) -> Result<Vec<StatementResult>, SqlError> {
    let mut results = Vec::new();
    let mut io = StatementIo {
        rows: Some(sink),
        ..Default::default()
    };
    sql::execute_each(s, text, &mut io, |r| results.push(r)).map(|()| results)
}

fn query_rows_stream_to_a_receiver_in_bounded_batches(method: IoMethod) {
    let (_dir, _db, mut s) = new_session(method);
    let mut sink = RecordingSink::default();
    let results = run_streaming(
        &mut s,
        "CREATE TABLE t (id int, note text);
         INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, 3000) g;
         SELECT id, note FROM t;
         SELECT count(*) AS n FROM t",
        &mut sink,
    )
    .unwrap();
    // Only the queries' rows go to the receiver, each query bracketed.
    assert_eq!(
        sink.events,
        ["begin id,note", "end Some(3000)", "begin n", "end Some(1)"]
    );
    assert_eq!(results[2].tag, "SELECT 3000");
    assert!(results[2].streamed && results[2].rows.is_empty());
    assert!(results[2].returns_rows());
    assert_eq!(sink.rows.len(), 3001);
    for (i, row) in sink.rows[..3000].iter().enumerate() {
        let id = i as i32 + 1;
        assert_eq!(
            row,
            &vec![Value::Integer(id), Value::Text(format!("row {id}"))]
        );
    }
    assert_eq!(sink.rows[3000], vec![big(3000)]);
    assert!(
        sink.largest_batch <= aiostore::exec::plan::BATCH_ROWS_MAX,
        "batches of at most {} rows, got {}",
        aiostore::exec::plan::BATCH_ROWS_MAX,
        sink.largest_batch
    );

    // A query failing after some rows were sent ends the rows without a
    // count, and fails with its own error.
    let mut sink = RecordingSink::default();
    let e = run_streaming(&mut s, "SELECT 1 / (id - 2000) FROM t", &mut sink).unwrap_err();
    assert_eq!(e.to_string(), "division by zero");
    assert_eq!(sink.events, ["begin ?column?", "end None"]);
    assert!(!sink.rows.is_empty() && sink.rows.len() < 2000);

    // A receiver that fails stops the query with an error naming it; the
    // session goes on.
    let mut sink = RecordingSink {
        fail_at: Some(2),
        ..Default::default()
    };
    let e = run_streaming(&mut s, "SELECT id FROM t", &mut sink).unwrap_err();
    assert_eq!(
        e.to_string(),
        "could not send the query's rows: reader went away"
    );
    assert_eq!(sink.events, ["begin id", "end None"]);
    assert_eq!(
        rows(&mut s, "SELECT count(*) FROM t"),
        vec![vec![big(3000)]]
    );
}

/// Runs `text` with `input` as COPY's standard input, returning what
/// COPY … TO STDOUT wrote and the results.
fn run_io(s: &mut Session, text: &str, input: &[u8]) -> (Vec<u8>, Vec<StatementResult>) {
    let (out, results) = try_io(s, text, input);
    (out, results.unwrap_or_else(|e| panic!("{text}: {e}")))
}

fn try_io(
    s: &mut Session,
    text: &str,
    mut input: &[u8],
) -> (Vec<u8>, Result<Vec<StatementResult>, SqlError>) {
    let mut out = Vec::new();
    let mut results = Vec::new();
    let mut io = StatementIo {
        stdin: Some(&mut input),
        stdout: Some(&mut out),
        rows: None,
        progress: None,
        explained_rows: None,
        copy_begin: None,
    };
    let r = sql::execute_each(s, text, &mut io, |r| results.push(r));
    (out, r.map(|()| results))
}

/// Values COPY must carry through unchanged: separators, quotes,
/// escapes, line breaks, the end-of-data marker, NULL's spellings as
/// text, the empty string and NULL itself, extremes of every type.
const TRICKY_ROWS: &str = r#"
    INSERT INTO c VALUES
      (1, 'plain', 1.5, true, 9223372036854775807),
      (2, 'a,b;c', -0.0, false, -9223372036854775807),
      (3, 'say "hi"', 1e300, NULL, 0),
      (4, 'tab	here', 'NaN', true, NULL),
      (5, 'two
lines and cr', 'Infinity', false, 5),
      (6, 'back\slash \N', '-Infinity', NULL, 6),
      (7, '\.', 2.5e-10, true, 7),
      (8, '\N', NULL, NULL, NULL),
      (9, '', 0.1, false, 9),
      (10, NULL, 3, true, 10),
      (11, 'ünïcødé ✓ |;', 1, true, 11)"#;

fn copy_to_of_what_copy_from_loaded_is_identical(method: IoMethod) {
    let (dir, _db, mut s) = new_session(method);
    let create = |s: &mut Session, name: &str| {
        run(
            s,
            &format!("CREATE TABLE {name} (id integer NOT NULL, note text, x double precision, ok boolean, big bigint)"),
        );
    };
    create(&mut s, "c");
    run(&mut s, TRICKY_ROWS);
    // Enough rows for many pages and several output chunks.
    run(
        &mut s,
        "INSERT INTO c SELECT i, md5(i::text), i / 7.0, i % 2 = 0, i * 1000 FROM generate_series(100, 5099) i",
    );
    let expected = rows(&mut s, "SELECT * FROM c ORDER BY id");
    let formats = [
        "",
        "(FORMAT csv)",
        "(FORMAT csv, HEADER)",
        "(FORMAT text, HEADER, DELIMITER '|', NULL 'nil')",
        "WITH CSV HEADER",
        "(FORMAT csv, DELIMITER ';', QUOTE '''', NULL 'NULL')",
    ];
    for (n, options) in formats.iter().enumerate() {
        let copy = format!("c{n}");
        create(&mut s, &copy);
        let (first, results) = run_io(&mut s, &format!("COPY c TO STDOUT {options}"), b"");
        assert_eq!(results[0].tag, "COPY 5011");
        let (_, results) = run_io(&mut s, &format!("COPY {copy} FROM STDIN {options}"), &first);
        assert_eq!(results[0].tag, "COPY 5011", "{options}");
        let (second, _) = run_io(&mut s, &format!("COPY {copy} TO STDOUT {options}"), b"");
        assert!(first == second, "{options}: the second COPY TO differs");
        let loaded = rows(&mut s, &format!("SELECT * FROM {copy} ORDER BY id"));
        assert_eq!(format!("{loaded:?}"), format!("{expected:?}"), "{options}");
    }
    // Through a file, with a column list, and out of a query.
    let file = dir.path().join("c.csv");
    let file = file.to_str().unwrap();
    let r = run(
        &mut s,
        &format!("COPY c (id, note) TO '{file}' (FORMAT csv, HEADER)"),
    );
    assert_eq!(r[0].tag, "COPY 5011");
    let text = std::fs::read_to_string(file).unwrap();
    assert!(
        text.starts_with("id,note\n1,plain\n2,\"a,b;c\"\n"),
        "{text}"
    );
    run(&mut s, "CREATE TABLE f (note text, id integer)");
    let r = run(
        &mut s,
        &format!("COPY f (id, note) FROM '{file}' (FORMAT csv, HEADER)"),
    );
    assert_eq!(r[0].tag, "COPY 5011");
    assert_eq!(
        rows(&mut s, "SELECT id, note FROM f ORDER BY id"),
        rows(&mut s, "SELECT id, note FROM c ORDER BY id")
    );
    let (out, _) = run_io(
        &mut s,
        "COPY (SELECT id, note FROM f WHERE id < 4 ORDER BY id DESC) TO STDOUT (FORMAT csv, HEADER)",
        b"",
    );
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "id,note\n3,\"say \"\"hi\"\"\"\n2,\"a,b;c\"\n1,plain\n"
    );
    // The end-of-data marker ends the input; what follows is not read.
    let (_, r) = run_io(
        &mut s,
        "COPY f FROM STDIN; SELECT count(*) FROM f",
        b"x\t-1\n\\.\nnot\tread\n",
    );
    assert_eq!(r[0].tag, "COPY 1");
    assert_eq!(r[1].rows, [vec![big(5012)]]);
}

fn malformed_copy_input_names_line_and_column_and_loads_nothing(method: IoMethod) {
    let (_dir, _db, mut s) = session_with_t(method);
    run(&mut s, "INSERT INTO t VALUES (1, 'kept')");
    let cases: &[(&str, &[u8], &str)] = &[
        (
            "(FORMAT csv, HEADER)",
            b"id,note\n2,a\n3,b\nx,c\n",
            "COPY t, line 4, column id: invalid input syntax for type integer: \"x\"",
        ),
        (
            "(FORMAT csv)",
            b"2,a\n3\n",
            "COPY t, line 2: missing data for column \"note\"",
        ),
        (
            "(FORMAT csv)",
            b"2,a\n3,b,c\n",
            "COPY t, line 2: extra data after last expected column",
        ),
        (
            "(FORMAT csv)",
            b"2,a\n3,\"open\nstill open\n",
            "COPY t, line 2, column note: unterminated CSV quoted field",
        ),
        (
            "(FORMAT csv)",
            b"2,a\n,b\n",
            "COPY t, line 2: null value in column \"id\" of relation \"t\" violates not-null constraint",
        ),
        (
            "(FORMAT csv)",
            b"2,a\n3,\xff\xfe\n",
            "COPY t, line 2, column note: invalid byte sequence for encoding \"UTF8\"",
        ),
        (
            "(FORMAT csv)",
            b"99999999999,a\n",
            "COPY t, line 1, column id: integer out of range",
        ),
        (
            "",
            b"2\ta\n3\tb\\\n",
            "COPY t, line 2, column note: a backslash at the end of a line escapes nothing; write \\\\ for a backslash",
        ),
        (
            "",
            b"2,a\n",
            "COPY t, line 1, column id: invalid input syntax for type integer: \"2,a\"",
        ),
    ];
    for (options, input, message) in cases {
        let text = format!("COPY t FROM STDIN {options}");
        let (_, r) = try_io(&mut s, &text, input);
        match r {
            Ok(r) => panic!("{text} with {input:?}: expected an error, got {r:?}"),
            Err(e) => assert_eq!(e.to_string(), *message, "{input:?}"),
        }
        assert_eq!(count(&mut s, "t"), 1, "{text} loaded rows before failing");
    }
    // A text value too large for a page.
    let mut long = b"2,".to_vec();
    long.extend(std::iter::repeat_n(b'x', 9000));
    let (_, r) = try_io(&mut s, "COPY t FROM STDIN (FORMAT csv)", &long);
    let e = r.unwrap_err().to_string();
    assert_eq!(
        e,
        "COPY t, line 1: a row of 9026 bytes does not fit in a page (at most 8160 bytes); values larger than a page are not supported yet"
    );
    // Inside a block, a failed COPY fails the block like any statement.
    let (_, r) = try_io(
        &mut s,
        "BEGIN; INSERT INTO t VALUES (5, 'in block'); COPY t FROM STDIN (FORMAT csv)",
        b"6,a\nbad,b\n",
    );
    assert!(r.is_err());
    assert_fails(
        &mut s,
        "SELECT 1",
        Fails::Containing("current transaction is aborted"),
    );
    run(&mut s, "ROLLBACK");
    assert_eq!(count(&mut s, "t"), 1);
}

fn copy_refuses_bad_options_and_missing_streams_by_name(method: IoMethod) {
    let (dir, _db, mut s) = session_with_t(method);
    for (text, expected) in [
        (
            "COPY t TO STDOUT (FORMAT binary)",
            Fails::Containing("COPY FORMAT binary is not supported; use csv or text"),
        ),
        (
            "COPY t TO STDOUT (FORMAT json)",
            Fails::With("COPY format \"json\" not recognized; use csv or text"),
        ),
        (
            "COPY t TO STDOUT (QUOTE '''')",
            Fails::With("COPY QUOTE and ESCAPE are available only in CSV mode; add FORMAT csv"),
        ),
        (
            "COPY t TO STDOUT (FORMAT csv, DELIMITER '\"')",
            Fails::With("COPY delimiter and quote must be different"),
        ),
        (
            "COPY t TO STDOUT (FORMAT csv, NULL 'a,b')",
            Fails::With("COPY delimiter must not appear in the NULL text"),
        ),
        (
            "COPY t TO STDOUT (FREEZE)",
            Fails::Containing("COPY FREEZE cannot be used with COPY TO"),
        ),
        (
            "COPY t FROM PROGRAM 'cat'",
            Fails::Containing("COPY PROGRAM is not supported"),
        ),
        (
            "COPY nope FROM STDIN",
            Fails::With("table \"nope\" does not exist"),
        ),
        (
            "COPY t (id, nope) TO STDOUT",
            Fails::StartingWith("column \"nope\" does not exist in table \"t\""),
        ),
        (
            "COPY t (id, id) FROM STDIN",
            Fails::With("column \"id\" of table \"t\" is given more than once"),
        ),
        (
            "COPY buffers FROM STDIN",
            Fails::As(|e| matches!(e, SqlError::ReadOnlyView { .. })),
        ),
        (
            "COPY t FROM STDIN",
            Fails::StartingWith("COPY FROM STDIN has no input here"),
        ),
        (
            "COPY t TO STDOUT",
            Fails::StartingWith("COPY TO STDOUT has no output here"),
        ),
    ] {
        assert_fails(&mut s, text, expected);
    }
    let missing = dir.path().join("missing.csv");
    assert_fails(
        &mut s,
        &format!("COPY t FROM '{}'", missing.display()),
        Fails::With(&format!(
            "could not open file \"{}\" for reading: No such file or directory (os error 2)",
            missing.display()
        )),
    );
    let unwritable = dir.path().join("no/such/dir.csv");
    assert_fails(
        &mut s,
        &format!("COPY t TO '{}'", unwritable.display()),
        Fails::StartingWith(&format!(
            "could not open file \"{}\" for writing",
            unwritable.display()
        )),
    );
    // A full disk: the error names the file (which, not a regular file,
    // is left where it is).
    run(
        &mut s,
        "INSERT INTO t SELECT i, repeat('x', 100) FROM generate_series(1, 2000) i",
    );
    assert_fails(
        &mut s,
        "COPY t TO '/dev/full'",
        Fails::StartingWith("COPY could not write to file \"/dev/full\": No space left on device"),
    );
    use std::os::unix::fs::FileTypeExt;
    let full = std::fs::metadata("/dev/full").unwrap();
    assert!(full.file_type().is_char_device());
    // A regular file that could not be written whole is removed.
    let partial = dir.path().join("partial.csv");
    std::fs::write(&partial, "old contents").unwrap();
    assert_fails(
        &mut s,
        &format!(
            "COPY (SELECT 1 / (i - 3000) FROM generate_series(1, 5000) i) TO '{}'",
            partial.display()
        ),
        Fails::With("division by zero"),
    );
    assert!(!partial.exists());
    // COPY … FROM STDIN ends its statement: the rest is SQL, not data.
    let (_, r) = try_io(
        &mut s,
        "COPY t FROM STDIN; SELECT count(*) FROM t",
        b"7\tseven\n",
    );
    assert_eq!(r.unwrap()[1].rows, [vec![big(2001)]]);
}

/// Records what statements report.
#[derive(Default)]
struct Recorded(Vec<String>);

impl Progress for Recorded {
    fn begin(&mut self, task: &str, total: Option<u64>, unit: ProgressUnit) {
        self.0.push(format!("begin {task} {total:?} {unit:?}"));
    }
    fn update(&mut self, done: u64) {
        self.0.push(format!("{done}"));
    }
    fn end(&mut self) {
        self.0.push("end".into());
    }
}

fn copy_from_and_vacuum_report_progress(method: IoMethod) {
    let (dir, db, mut s) = session_with_t(method);
    let file = dir.path().join("big.csv");
    let mut data = String::new();
    for i in 0..60_000 {
        data += &format!("{i},{}\n", "y".repeat(20));
    }
    std::fs::write(&file, &data).unwrap();
    let mut recorded = Recorded::default();
    let mut io = StatementIo {
        progress: Some(&mut recorded),
        ..Default::default()
    };
    let text = format!(
        "COPY t FROM '{}' (FORMAT csv); DELETE FROM t WHERE id % 2 = 0; VACUUM t",
        file.display()
    );
    let mut notices = Vec::new();
    sql::execute_each(&mut s, &text, &mut io, |r| notices.extend(r.notices)).unwrap();
    let r = recorded.0;
    let size = data.len() as u64;
    assert_eq!(r[0], format!("begin COPY t Some({size}) Bytes"));
    // At the first line end past a MiB, then at the end of the input.
    let copy_end = r.iter().position(|x| x == "end").unwrap();
    assert_eq!(copy_end, 3, "{r:?}");
    let first: u64 = r[1].parse().unwrap();
    assert!((1 << 20..(1 << 20) + 28).contains(&first), "{r:?}");
    assert_eq!(r[2], size.to_string());
    let rel = db.catalog().table("t").unwrap().heap.rel;
    // Vacuum's progress counts the blocks it found, before it cut the
    // empty ones off the end.
    let cut: u32 = notices
        .iter()
        .find_map(|n| {
            let before = n.split(" empty pages cut off the end").next()?;
            before.rsplit(' ').next()?.parse().ok()
        })
        .expect("vacuum's notice");
    let blocks = db.pool().relation(rel).nblocks(Fork::Main).unwrap() + cut;
    let vacuum = &r[copy_end + 1..];
    assert_eq!(vacuum[0], format!("begin VACUUM t Some({blocks}) Blocks"));
    let done: Vec<u32> = vacuum[1..vacuum.len() - 1]
        .iter()
        .map(|x| x.parse().unwrap())
        .collect();
    assert!(done.windows(2).all(|w| w[0] <= w[1]), "{done:?}");
    assert_eq!(done.last(), Some(&blocks));
    assert_eq!(vacuum.last().unwrap(), "end");
    // A failed COPY ends its task too.
    let mut recorded = Recorded::default();
    let mut input: &[u8] = b"1,a\nx,b\n";
    let mut io = StatementIo {
        stdin: Some(&mut input),
        progress: Some(&mut recorded),
        ..Default::default()
    };
    assert!(sql::execute_each(&mut s, "COPY t FROM STDIN (FORMAT csv)", &mut io, |_| {}).is_err());
    assert_eq!(recorded.0, ["begin COPY t None Bytes", "end"]);
}

fn pages_a_load_extended_but_did_not_fill_survive_vacuum_and_a_restart(method: IoMethod) {
    let (dir, db) = new_db(method);
    let mut s = db.session().unwrap();
    create_t(&mut s);
    // A load extends by growing steps; the last step's blocks stay empty.
    let mut input = String::new();
    for i in 0..3000 {
        input += &format!("{i},{}\n", "z".repeat(40));
    }
    let (_, r) = try_io(&mut s, "COPY t FROM STDIN (FORMAT csv)", input.as_bytes());
    r.unwrap();
    let nblocks = |db: &Database| {
        let rel = db.catalog().table("t").unwrap().heap.rel;
        db.pool().relation(rel).nblocks(Fork::Main).unwrap()
    };
    let blocks = nblocks(&db);
    let report = last(&mut s, "VACUUM t");
    assert!(
        report.notices[0].contains("0 dead rows removed, 3000 kept"),
        "{:?}",
        report.notices
    );
    // Vacuum cut the empty blocks off the end.
    let vacuumed = nblocks(&db);
    assert!(vacuumed < blocks, "{blocks} -> {vacuumed}");
    assert!(
        report.notices[0].contains(&format!(
            "{} empty pages cut off the end",
            blocks - vacuumed
        )),
        "{:?}",
        report.notices
    );
    run(
        &mut s,
        "INSERT INTO t SELECT i, 'again' FROM generate_series(1, 100) i",
    );
    drop(s);
    drop(db);
    let db = Database::open(&dir.path().join("data"), &settings(method, &[])).unwrap();
    let mut s = db.session().unwrap();
    assert_eq!(count(&mut s, "t"), 3100);
    run(&mut s, "VACUUM t");
    assert_eq!(count(&mut s, "t"), 3100);
}

fn a_parenthesized_string_literal_keeps_its_unknown_type(method: IoMethod) {
    let (_dir, _db, mut s) = session_with_t(method);
    run(&mut s, "INSERT INTO t VALUES (7, 'seven')");
    assert_eq!(scalar(&mut s, "SELECT ('7') + 1"), int(8));
    assert_eq!(scalar(&mut s, "SELECT ((('7'))) + 1"), int(8));
    assert_eq!(
        scalar(&mut s, "SELECT id = ('7') FROM t"),
        Value::Boolean(true)
    );
    assert_eq!(
        scalar(&mut s, "SELECT note FROM t WHERE id IN (('7'), 8)"),
        text("seven")
    );
    assert_fails(
        &mut s,
        "SELECT id = ('x') FROM t",
        Fails::Containing("invalid input syntax for type integer"),
    );
}

fn upper_and_lower_map_each_character_without_expanding_it(method: IoMethod) {
    let (_dir, _db, mut s) = new_session(method);
    assert_eq!(scalar(&mut s, "SELECT upper('straße')"), text("STRAßE"));
    assert_eq!(scalar(&mut s, "SELECT lower('STRAßE')"), text("straße"));
    // U+0130's full lower case is two characters; its simple one is i.
    assert_eq!(scalar(&mut s, "SELECT lower('İx')"), text("ix"));
    assert_eq!(scalar(&mut s, "SELECT upper('ﬁ')"), text("ﬁ"));
    assert_eq!(scalar(&mut s, "SELECT upper('Ab1é')"), text("AB1É"));
}

fn cast_columns_are_named_after_the_type_and_columns_after_themselves(method: IoMethod) {
    let (_dir, _db, mut s) = session_with_t(method);
    let names = |s: &mut Session, query: &str| -> Vec<String> {
        last(s, query).columns.into_iter().map(|c| c.name).collect()
    };
    assert_eq!(
        names(
            &mut s,
            "SELECT 1::int4, 1.5::float8::text, '1'::integer, 1::bigint, \
             1::double precision, 1::text, 1::boolean, 'a'::varchar, CAST(1 AS int)"
        ),
        ["int4", "text", "int4", "int8", "float8", "text", "bool", "varchar", "int4"]
    );
    assert_eq!(
        names(
            &mut s,
            "SELECT id::text, (id)::bigint::text, upper(note)::text, id, 1 + 1 FROM t"
        ),
        ["id", "id", "upper", "id", "?column?"]
    );
}

fn start_transaction_is_tagged_as_postgresql_tags_it(method: IoMethod) {
    let (_dir, _db, mut s) = new_session(method);
    assert_eq!(last(&mut s, "START TRANSACTION").tag, "START TRANSACTION");
    let again = last(&mut s, "START TRANSACTION");
    assert_eq!(again.tag, "START TRANSACTION");
    assert_eq!(again.notices.len(), 1, "{again:?}");
    run(&mut s, "COMMIT");
    assert_eq!(last(&mut s, "BEGIN").tag, "BEGIN");
    run(&mut s, "COMMIT");
}

fn show_transaction_isolation_reports_the_blocks_level(method: IoMethod) {
    let (_dir, _db, mut s) = new_session(method);
    let shown = last(&mut s, "SHOW transaction_isolation");
    assert_eq!(shown.columns[0].name, "transaction_isolation");
    assert_eq!(shown.rows, vec![vec![text("read committed")]]);
    run(&mut s, "BEGIN ISOLATION LEVEL REPEATABLE READ");
    assert_eq!(
        scalar(&mut s, "SHOW transaction_isolation"),
        text("repeatable read")
    );
    assert_eq!(
        scalar(&mut s, "SHOW TRANSACTION ISOLATION LEVEL"),
        text("repeatable read")
    );
    run(&mut s, "COMMIT");
    assert_eq!(
        scalar(&mut s, "SHOW transaction_isolation"),
        text("read committed")
    );
    run(&mut s, "START TRANSACTION ISOLATION LEVEL READ COMMITTED");
    assert_eq!(
        scalar(&mut s, "SHOW transaction_isolation"),
        text("read committed")
    );
    run(&mut s, "ROLLBACK");
}

fn double_precision_prints_as_postgresql_prints_it(method: IoMethod) {
    let (_dir, _db, mut s) = new_session(method);
    for (input, expected) in [
        ("0.1", "0.1"),
        ("100", "100"),
        ("0.0001", "0.0001"),
        ("0.00012345", "0.00012345"),
        ("1e-5", "1e-05"),
        ("1.5e-5", "1.5e-05"),
        ("1e15", "1e+15"),
        ("1e16", "1e+16"),
        ("123456789012345678", "1.2345678901234568e+17"),
        ("9007199254740992", "9.007199254740992e+15"),
        ("900719925474099.25", "900719925474099.2"),
        ("43959190597229264", "4.3959190597229264e+16"),
        ("999999999999999", "999999999999999"),
        ("1.5e300", "1.5e+300"),
        ("5e-324", "5e-324"),
        ("-0", "-0"),
        ("0", "0"),
        ("-2.5", "-2.5"),
        ("Infinity", "Infinity"),
        ("-Infinity", "-Infinity"),
        ("NaN", "NaN"),
    ] {
        assert_eq!(
            scalar(&mut s, &format!("SELECT '{input}'::float8::text")),
            text(expected),
            "{input}"
        );
    }
}

fn double_precision_out_of_range_is_an_error(method: IoMethod) {
    let (_dir, _db, mut s) = new_session(method);
    for input in ["1e400", "-1e400", "1e-400", "-2.5e-999"] {
        assert_fails(
            &mut s,
            &format!("SELECT '{input}'::float8"),
            Fails::With(&format!(
                "\"{input}\" is out of range for type double precision"
            )),
        );
    }
    for input in ["0", "0e10", "-0.000e-999", "inf", "-Infinity"] {
        sql::execute(&mut s, &format!("SELECT '{input}'::float8"))
            .unwrap_or_else(|e| panic!("{input}: {e}"));
    }
    assert_fails(
        &mut s,
        "SELECT 1e300::float8 * 1e300::float8",
        Fails::With("value out of range: overflow"),
    );
    assert_fails(
        &mut s,
        "SELECT 1e-300::float8 * 1e-300::float8",
        Fails::With("value out of range: underflow"),
    );
    assert_fails(
        &mut s,
        "SELECT 1e-300::float8 / 1e300::float8",
        Fails::With("value out of range: underflow"),
    );
    assert_eq!(
        scalar(&mut s, "SELECT 0::float8 * 1e-300::float8"),
        Value::Double(0.0)
    );
    for aggregate in ["sum", "avg"] {
        assert_fails(
            &mut s,
            &format!("SELECT {aggregate}(1e308::float8 + g) FROM generate_series(1, 2) g"),
            Fails::With("value out of range: overflow"),
        );
    }
    // avg also keeps the squared deviations, as float8_accum does: their
    // sum overflows here though the values' sum is 0 (PostgreSQL 15 fails
    // the same way; sum() does not).
    run(
        &mut s,
        "CREATE TABLE pair (x double precision); INSERT INTO pair VALUES (1e200), (-1e200)",
    );
    assert_eq!(
        scalar(&mut s, "SELECT sum(x) FROM pair"),
        Value::Double(0.0)
    );
    assert_fails(
        &mut s,
        "SELECT avg(x) FROM pair",
        Fails::With("value out of range: overflow"),
    );
}

fn chained_comparisons_are_a_syntax_error_as_in_postgresql(method: IoMethod) {
    let (_dir, _db, mut s) = new_session(method);
    for query in [
        "SELECT 1 < 2 = true",
        "SELECT 1 = 1 = true",
        "SELECT 3 > 2 > 1",
    ] {
        assert_fails(
            &mut s,
            query,
            Fails::StartingWith("syntax error in statement 1: syntax error at or near"),
        );
    }
    assert_fails(
        &mut s,
        "SELECT 1 < 2 = true",
        Fails::Containing("at or near \"=\" (after line 1, column 13)"),
    );
    assert_eq!(
        scalar(&mut s, "SELECT (1 < 2) = true"),
        Value::Boolean(true)
    );
    assert_eq!(
        scalar(&mut s, "SELECT true = (1 = 1)"),
        Value::Boolean(true)
    );
    assert_eq!(
        scalar(&mut s, "SELECT 1 < 2 AND 2 = 2 OR 1 > 3"),
        Value::Boolean(true)
    );
}

/// Stack of the thread that runs the deep-expression statements: the
/// default of a spawned Rust thread, so the bounds are checked against
/// an ordinary stack rather than a test harness's generous one.
const DEEP_TEST_STACK_BYTES: usize = 2 << 20;

/// Chain length for the deep-expression test: far past any bound.
const DEEP_CHAIN: usize = 100_000;

fn every_deep_expression_is_refused_with_stack_depth_limit_exceeded(method: IoMethod) {
    let (_dir, db) = new_db(method);
    let n = DEEP_CHAIN;
    let chain = |first: &str, op: &str, operand: &str| {
        format!("SELECT {first}{}", format!(" {op} {operand}").repeat(n))
    };
    let mut deep = Vec::new();
    for op in [
        "^", "&", "|", "#", "<<", ">>", "+", "*", "=", "<>", "AND", "OR", "||",
    ] {
        deep.push(chain("1", op, "1"));
    }
    for op in ["~", "ILIKE", "LIKE", "->", "@>", "->>", "#>"] {
        deep.push(chain("'a'", op, "'a'"));
    }
    deep.push(format!("SELECT 1{}", "::int".repeat(n)));
    deep.push(format!("SELECT 1{}", " IS NULL".repeat(n)));
    deep.push(format!("SELECT 1{}", " IN (1)".repeat(n)));
    deep.push(format!("SELECT 1{}", " BETWEEN 0 AND 2".repeat(n)));
    deep.push(format!("SELECT {}1{}", "(".repeat(n), ")".repeat(n)));
    deep.push(format!("SELECT {}1", "- ".repeat(n)));
    deep.push(format!("SELECT {}true", "NOT ".repeat(n)));
    deep.push(format!("SELECT {}1{}", "abs(".repeat(n), ")".repeat(n)));
    deep.push(format!(
        "SELECT {}1{}",
        "CAST(".repeat(n),
        " AS int)".repeat(n)
    ));
    deep.push(format!("SELECT {}1{}", "1 IN (".repeat(n), ")".repeat(n)));
    deep.push(format!(
        "SELECT {}1{}",
        "CASE WHEN true THEN ".repeat(n),
        " END".repeat(n)
    ));
    deep.push(format!(
        "SELECT 1 FROM generate_series(1, 2) g WHERE {}",
        vec!["g = 1"; n].join(" OR ")
    ));
    let worker = std::thread::Builder::new()
        .stack_size(DEEP_TEST_STACK_BYTES)
        .spawn(move || {
            let mut s = db.session().unwrap();
            for query in &deep {
                let message = match sql::execute(&mut s, query) {
                    Ok(_) => format!("{}…: accepted", &query[..40]),
                    Err(e) => e.to_string(),
                };
                assert!(
                    message.starts_with("stack depth limit exceeded"),
                    "{}…: {message}",
                    &query[..40]
                );
                assert!(message.contains("simplify it"), "{message}");
            }
            // What generated SQL writes still works.
            let nested = format!("SELECT {}1{}", "(".repeat(200), ")".repeat(200));
            assert_eq!(scalar(&mut s, &nested), int(1));
            let sum = format!("SELECT 0{}", " + 1".repeat(500));
            assert_eq!(scalar(&mut s, &sum), int(500));
            let calls = format!("SELECT {}-1{}", "abs(".repeat(100), ")".repeat(100));
            assert_eq!(scalar(&mut s, &calls), int(1));
        })
        .unwrap();
    worker
        .join()
        .expect("deep expressions fail without a panic");
}

/// Stack of the thread that runs the deepest accepted statements: far
/// less than the deepest expression's walks take (several MiB in an
/// unoptimised build), so that they pass only by growing their stack.
const SMALL_STACK_BYTES: usize = 256 << 10;

fn nesting_to_the_bound_runs_in_a_small_stack_and_one_level_more_is_refused(method: IoMethod) {
    let (_dir, db) = new_db(method);
    let n = sql::MAX_NESTING_DEPTH;
    let nest = |open: &str, inner: &str, close: &str, levels: usize| {
        format!(
            "SELECT {}{inner}{}",
            open.repeat(levels),
            close.repeat(levels)
        )
    };
    let worker = std::thread::Builder::new()
        .stack_size(SMALL_STACK_BYTES)
        .spawn(move || {
            let mut s = db.session().unwrap();
            let cases = [
                ("(", "1", ")", int(1)),
                ("abs(", "1", ")", int(1)),
                ("- ", "1", "", int(1)),
                ("NOT ", "false", "", Value::Boolean(false)),
                ("CAST(", "1", " AS bigint)", big(1)),
                ("CASE WHEN true THEN ", "1", " END", int(1)),
            ];
            for (open, inner, close, expected) in cases {
                let ok = nest(open, inner, close, n);
                assert_eq!(scalar(&mut s, &ok), expected, "{open}");
                let deep = nest(open, inner, close, n + 1);
                let e = err(&mut s, &deep);
                assert!(
                    matches!(e, SqlError::TooDeep { limit, .. } if limit == n),
                    "{open}: {e}"
                );
                assert!(e.to_string().starts_with("stack depth limit exceeded"));
            }
            // Deep expressions over rows: filtered, aggregated, grouped.
            let deep_id = format!("{}g{}", "(".repeat(n - 1), ")".repeat(n - 1));
            assert_eq!(
                scalar(
                    &mut s,
                    &format!(
                        "SELECT sum({deep_id}) FROM generate_series(1, 4) g WHERE {deep_id} > 1"
                    )
                ),
                big(9)
            );
            assert_eq!(
                rows(
                    &mut s,
                    &format!(
                        "SELECT {deep_id} % 2, count(*) FROM generate_series(1, 5) g \
                         GROUP BY {deep_id} % 2 ORDER BY 1"
                    )
                ),
                vec![vec![int(0), big(2)], vec![int(1), big(3)]]
            );
            let plan = rows(
                &mut s,
                &format!(
                    "EXPLAIN (COSTS OFF) SELECT 1 FROM generate_series(1, 2) g WHERE {deep_id} = 1"
                ),
            );
            let filter = plan.iter().find_map(|r| match &r[0] {
                Value::Text(line) if line.trim_start().starts_with("Filter:") => Some(line.clone()),
                _ => None,
            });
            let filter = filter.unwrap_or_else(|| panic!("no Filter line in {plan:?}"));
            assert!(filter.contains(&deep_id), "the whole expression is shown");
            // The longest chain of operators allowed, and one longer.
            let limit = sql::MAX_OPERATOR_DEPTH;
            let sum = format!("SELECT 0{}", " + 1".repeat(limit));
            assert_eq!(scalar(&mut s, &sum), int(limit as i32));
            let long = format!("SELECT 0{}", " + 1".repeat(limit + 1));
            assert!(matches!(err(&mut s, &long), SqlError::TooDeep { .. }));
        })
        .unwrap();
    worker
        .join()
        .expect("deep expressions run in a small stack without a panic");
}

fn copy_refuses_nul_bytes_and_quotes_only_the_start_of_a_bad_value(method: IoMethod) {
    let (_dir, _db, mut s) = session_with_t(method);
    let nul = "invalid byte sequence for encoding \"UTF8\": 0x00";
    let cases: &[(&str, &[u8])] = &[
        ("", b"1\ta\0b\n"),
        ("", b"1\ta\\0b\n"),
        ("", b"1\ta\\000\n"),
        ("", b"1\ta\\x00\n"),
        ("", b"1\ta\\x0\n"),
        ("(FORMAT csv)", b"1,a\0b\n"),
        ("(FORMAT csv)", b"1,\"a\0b\"\n"),
        ("(FORMAT csv)", b"\0,a\n"),
    ];
    for (options, input) in cases {
        let text = format!("COPY t FROM STDIN {options}");
        let (_, r) = try_io(&mut s, &text, input);
        let message = r.expect_err("a NUL byte was loaded").to_string();
        assert!(message.contains(nul), "{input:?}: {message}");
        assert!(message.starts_with("COPY t, line 1, column "), "{message}");
    }
    assert_eq!(count(&mut s, "t"), 0);
    let (_, r) = try_io(&mut s, "COPY t FROM STDIN", b"1\ta\\x01\\\\0\n");
    r.unwrap();
    assert_eq!(scalar(&mut s, "SELECT note FROM t"), text("a\u{1}\\0"));

    for literal in ["E'\\x00'", "E'a\\0'", "'a' || E'\\000'"] {
        assert_fails(
            &mut s,
            &format!("INSERT INTO t VALUES (2, {literal})"),
            Fails::StartingWith(nul),
        );
    }
    assert_fails(
        &mut s,
        "INSERT INTO t VALUES (2, U&'\\0000')",
        Fails::StartingWith("invalid Unicode escape value"),
    );

    // A long bad value is quoted by its start only.
    let mut input = b"2\t".to_vec();
    input.extend(std::iter::repeat_n(b'y', 1 << 20));
    input.extend_from_slice(b"\n");
    let (_, r) = try_io(&mut s, "COPY t (note, id) FROM STDIN", &input);
    let message = r.expect_err("y… is not an integer").to_string();
    let quoted = format!("\"{}...\"", "y".repeat(100));
    assert!(
        message.ends_with(&quoted),
        "{}",
        &message[..200.min(message.len())]
    );
    assert!(message.len() < 300, "{} bytes", message.len());
}

fn values_is_a_query_whose_columns_take_their_rows_common_type(method: IoMethod) {
    use aiostore::types::ColumnType;
    let (_dir, _db, mut s) = session_with_t(method);
    run(&mut s, "INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')");
    let r = last(
        &mut s,
        "VALUES (1, 'x'), (2, NULL), (3, 'z') ORDER BY column1 DESC LIMIT 2",
    );
    let names: Vec<&str> = r.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["column1", "column2"]);
    assert_eq!(
        r.columns.iter().map(|c| c.ty).collect::<Vec<_>>(),
        [ColumnType::Integer, ColumnType::Text]
    );
    assert_eq!(r.rows, [vec![int(3), text("z")], vec![int(2), Value::Null]]);
    // A string literal takes the others' type; integers widen to bigint.
    let r = last(&mut s, "VALUES (1), ('2'), (3000000000)");
    assert_eq!(r.columns[0].ty, ColumnType::BigInt);
    assert_eq!(r.rows, [[big(1)], [big(2)], [big(3_000_000_000)]]);
    // In FROM with column aliases, joined, and in a subquery.
    assert_eq!(
        rows(
            &mut s,
            "SELECT t.note, v.label FROM t JOIN (VALUES (1, 'one'), (3, 'three')) AS v(id, label)
             ON t.id = v.id ORDER BY t.id"
        ),
        [[text("a"), text("one")], [text("c"), text("three")]]
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT id FROM t WHERE id IN (SELECT column1 FROM (VALUES (2), (9)) x)"
        ),
        [[int(2)]]
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT 0 UNION ALL VALUES (1), ((SELECT max(id) FROM t))"
        ),
        [[int(0)], [int(1)], [int(3)]]
    );
    run(&mut s, "INSERT INTO t SELECT * FROM (VALUES (4, 'd')) v");
    assert_eq!(count(&mut s, "t"), 4);
    // PostgreSQL's errors.
    let e = err(&mut s, "VALUES (1, 2), (3)");
    assert_eq!(e.sqlstate(), "42601");
    assert!(
        e.to_string()
            .starts_with("VALUES lists must all be the same length"),
        "{e}"
    );
    let e = err(&mut s, "VALUES (1), (now()::text)");
    assert_eq!(
        e.to_string(),
        "VALUES types integer and text cannot be matched"
    );
    let e = err(&mut s, "VALUES (1), ('x')");
    assert_eq!(
        e.to_string(),
        "invalid input syntax for type integer: \"x\""
    );
}

for_each_method!(
    every_type_round_trips_through_insert_and_select,
    values_is_a_query_whose_columns_take_their_rows_common_type,
    create_table_checks_options_types_and_names,
    drop_table_removes_it_and_if_exists_only_notes_a_missing_one,
    drop_and_vacuum_are_refused_inside_a_transaction_block,
    an_aborted_block_refuses_everything_until_it_ends,
    rollback_leaves_nothing_behind,
    a_failed_statement_is_undone_as_a_whole,
    type_and_null_errors_name_the_column_and_table,
    unknown_tables_columns_and_functions_are_named,
    arithmetic_errors_are_errors_not_wrong_answers,
    coalesce_greatest_and_least,
    unsupported_syntax_names_the_construct_and_where_it_is,
    generate_series_builds_tables_with_md5_repeat_and_random,
    group_by_order_by_and_limit_give_postgresql_results,
    where_supports_comparisons_logic_lists_ranges_nulls_and_like,
    update_and_delete_change_the_rows_they_match,
    explain_analyze_shows_buffers_and_io_per_scan,
    explain_analyze_shows_wal_and_flush_waits,
    system_views_return_the_engines_state,
    prewarm_evict_and_read_stream_for_blocks_act_on_the_pool,
    set_show_and_reset_change_session_settings,
    repeatable_read_keeps_its_snapshot_and_read_committed_does_not,
    a_concurrent_update_of_the_same_row_fails_the_later_transaction,
    a_sequential_scan_reads_the_same_rows_with_and_without_direct_io,
    vacuum_removes_dead_rows_and_checkpoint_writes_back,
    results_print_as_tables_and_csv,
    query_rows_stream_to_a_receiver_in_bounded_batches,
    sorts_and_aggregations_beyond_work_mem_spill_and_give_the_same_rows,
    joins_give_the_rows_of_their_definition_by_every_method,
    copy_to_of_what_copy_from_loaded_is_identical,
    malformed_copy_input_names_line_and_column_and_loads_nothing,
    copy_refuses_bad_options_and_missing_streams_by_name,
    copy_from_and_vacuum_report_progress,
    pages_a_load_extended_but_did_not_fill_survive_vacuum_and_a_restart,
    a_parenthesized_string_literal_keeps_its_unknown_type,
    upper_and_lower_map_each_character_without_expanding_it,
    cast_columns_are_named_after_the_type_and_columns_after_themselves,
    start_transaction_is_tagged_as_postgresql_tags_it,
    show_transaction_isolation_reports_the_blocks_level,
    double_precision_prints_as_postgresql_prints_it,
    double_precision_out_of_range_is_an_error,
    chained_comparisons_are_a_syntax_error_as_in_postgresql,
    every_deep_expression_is_refused_with_stack_depth_limit_exceeded,
    nesting_to_the_bound_runs_in_a_small_stack_and_one_level_more_is_refused,
    copy_refuses_nul_bytes_and_quotes_only_the_start_of_a_bad_value,
);

/// Random expressions over `t (id integer, note text)` and the column
/// `x` of `generate_series(0, 7) x`: every operator, function, cast and
/// aggregate, on literals of every type, so that type errors, NULLs,
/// overflow, division by zero and aggregates in the wrong place all come
/// up. Numbers stay small so no expression asks for much work.
fn fuzz_expr() -> impl Strategy<Value = String> {
    let leaf = select(vec![
        "id",
        "note",
        "t.id",
        "x",
        "0",
        "1",
        "7",
        "-1",
        "2.5",
        "2147483647",
        "'a'",
        "'7'",
        "''",
        "NULL",
        "true",
        "false",
        "random()",
        "count(*)",
    ])
    .prop_map(String::from);
    leaf.prop_recursive(4, 24, 3, |e| {
        prop_oneof![
            (
                e.clone(),
                select(vec![
                    "+", "-", "*", "/", "%", "||", "=", "<>", "<", ">=", "AND", "OR"
                ]),
                e.clone()
            )
                .prop_map(|(a, op, b)| format!("({a} {op} {b})")),
            (select(vec!["NOT ", "-"]), e.clone()).prop_map(|(op, a)| format!("{op}({a})")),
            (
                select(vec![
                    "md5", "abs", "length", "lower", "count", "sum", "avg", "min", "max"
                ]),
                e.clone()
            )
                .prop_map(|(f, a)| format!("{f}({a})")),
            (e.clone(), select(vec!["0", "3", "id"]))
                .prop_map(|(a, n)| format!("repeat({a}, {n})")),
            (
                e.clone(),
                select(vec![
                    "integer",
                    "bigint",
                    "text",
                    "boolean",
                    "double precision"
                ])
            )
                .prop_map(|(a, t)| format!("({a})::{t}")),
            (e.clone(), any::<bool>())
                .prop_map(|(a, not)| format!("({a} IS {}NULL)", if not { "NOT " } else { "" })),
            (e.clone(), e.clone(), e.clone()).prop_map(|(a, b, c)| format!("({a} IN ({b}, {c}))")),
            (e.clone(), e.clone(), e.clone())
                .prop_map(|(a, b, c)| format!("({a} BETWEEN {b} AND {c})")),
            (e.clone(), e.clone()).prop_map(|(a, b)| format!("({a} LIKE {b})")),
        ]
    })
}

/// Well-typed expressions over `t (id integer, note text)`: integer, text
/// and boolean ones, built from each other, so that most statements plan
/// and run and the evaluator meets overflow, division by zero, bad casts
/// and NULLs.
struct Typed {
    int: proptest::strategy::BoxedStrategy<String>,
    text: proptest::strategy::BoxedStrategy<String>,
    boolean: proptest::strategy::BoxedStrategy<String>,
}

fn typed() -> Typed {
    let int_leaf = select(vec![
        "id",
        "0",
        "1",
        "7",
        "-1",
        "2147483647",
        "length(note)",
    ])
    .prop_map(String::from);
    let text_leaf = select(vec!["note", "'a'", "'7'", "''", "NULL"]).prop_map(String::from);
    let int = int_leaf
        .prop_recursive(3, 16, 2, move |i| {
            prop_oneof![
                (i.clone(), select(vec!["+", "-", "*", "/", "%"]), i.clone())
                    .prop_map(|(a, op, b)| format!("({a} {op} {b})")),
                i.clone().prop_map(|a| format!("-({a})")),
                i.clone().prop_map(|a| format!("abs({a})")),
                i.clone().prop_map(|a| format!("({a})::bigint")),
                i.clone()
                    .prop_map(|a| format!("({a}::double precision / 3)::integer")),
            ]
        })
        .boxed();
    let int_for_text = int.clone();
    let text = text_leaf
        .prop_recursive(3, 16, 2, move |t| {
            prop_oneof![
                (t.clone(), t.clone()).prop_map(|(a, b)| format!("({a} || {b})")),
                (t.clone(), int_for_text.clone()).prop_map(|(a, b)| format!("({a} || {b})")),
                t.clone().prop_map(|a| format!("md5({a})")),
                t.clone().prop_map(|a| format!("lower({a})")),
                (t.clone(), select(vec!["0", "3", "id"]))
                    .prop_map(|(a, n)| format!("repeat({a}, {n})")),
                int_for_text.clone().prop_map(|a| format!("({a})::text")),
            ]
        })
        .boxed();
    let (i, t) = (int.clone(), text.clone());
    let compare = prop_oneof![
        (i.clone(), select(vec!["=", "<>", "<", ">="]), i.clone())
            .prop_map(|(a, op, b)| format!("{a} {op} {b}")),
        (t.clone(), select(vec!["=", "<", "LIKE"]), t.clone())
            .prop_map(|(a, op, b)| format!("{a} {op} {b}")),
        (i.clone(), i.clone(), i.clone()).prop_map(|(a, b, c)| format!("{a} IN ({b}, {c})")),
        (i.clone(), i.clone(), i.clone()).prop_map(|(a, b, c)| format!("{a} BETWEEN {b} AND {c}")),
        t.clone().prop_map(|a| format!("{a} IS NULL")),
        t.prop_map(|a| format!("({a})::integer > 3")),
        select(vec!["true", "false", "NULL::boolean"]).prop_map(String::from),
    ];
    let boolean = compare
        .prop_recursive(2, 8, 2, |b| {
            prop_oneof![
                (b.clone(), select(vec!["AND", "OR"]), b.clone())
                    .prop_map(|(x, op, y)| format!("({x} {op} {y})")),
                b.prop_map(|x| format!("NOT ({x})")),
            ]
        })
        .boxed();
    Typed { int, text, boolean }
}

fn fuzz_statement() -> impl Strategy<Value = String> {
    let Typed { int, text, boolean } = typed();
    let clause = |keyword: &'static str, e: proptest::strategy::BoxedStrategy<String>| {
        proptest::option::of(e)
            .prop_map(move |e| e.map_or(String::new(), |e| format!(" {keyword} {e}")))
    };
    let limit = proptest::option::of(0..5u8)
        .prop_map(|l| l.map_or(String::new(), |n| format!(" LIMIT {n}")));
    let item = prop_oneof![
        int.clone(),
        text.clone(),
        boolean.clone(),
        int.clone().prop_map(|a| format!("sum({a})")),
        int.clone().prop_map(|a| format!("avg({a})")),
        text.clone().prop_map(|a| format!("max({a})")),
        Just("count(*)".to_string()),
    ];
    let plain = (
        proptest::collection::vec(
            prop_oneof![int.clone(), text.clone(), boolean.clone()],
            1..4,
        ),
        clause("WHERE", boolean.clone()),
        clause("ORDER BY", prop_oneof![int.clone(), text.clone()].boxed()),
        limit.clone(),
    )
        .prop_map(|(items, w, o, l)| format!("SELECT {} FROM t{w}{o}{l}", items.join(", ")))
        .boxed();
    let grouped = (
        proptest::collection::vec(item, 1..4),
        clause("WHERE", boolean.clone()),
        clause("HAVING count(*) >", int.clone()),
        limit,
    )
        .prop_map(|(items, w, h, l)| {
            format!(
                "SELECT id % 3, {} FROM t{w} GROUP BY id % 3{h} ORDER BY 1{l}",
                items.join(", ")
            )
        })
        .boxed();
    let chaos = (
        proptest::collection::vec(fuzz_expr(), 1..3),
        select(vec![
            "",
            " FROM t",
            " FROM t AS u",
            " FROM generate_series(0, 7) x",
            " FROM buffers",
        ]),
        proptest::option::of(fuzz_expr()),
    )
        .prop_map(|(items, from, w)| {
            let w = w.map_or(String::new(), |w| format!(" WHERE {w}"));
            format!("SELECT {}{from}{w}", items.join(", "))
        });
    prop_oneof![
        3 => plain.clone(),
        3 => grouped.clone(),
        1 => prop_oneof![plain, grouped].prop_map(|s| format!("EXPLAIN (COSTS OFF, ANALYZE, BUFFERS, IO) {s}")),
        2 => (int.clone(), text.clone()).prop_map(|(a, b)| format!("INSERT INTO t VALUES ({a}, {b})")),
        1 => (0..100i32).prop_map(|k| format!("INSERT INTO t SELECT x + {k}, md5(x::text) FROM generate_series(0, 7) x")),
        2 => (int, text, boolean.clone())
            .prop_map(|(a, b, w)| format!("UPDATE t SET id = {a}, note = {b} WHERE {w}")),
        1 => boolean.prop_map(|w| format!("DELETE FROM t WHERE {w}")),
        2 => chaos,
        1 => proptest::collection::vec(select(FUZZ_TOKENS.to_vec()), 1..16).prop_map(|t| t.join(" ")),
    ]
}

/// Words and symbols for token soup: mostly syntax errors, which must be
/// errors and nothing worse.
const FUZZ_TOKENS: &[&str] = &[
    "SELECT",
    "INSERT",
    "INTO",
    "VALUES",
    "UPDATE",
    "SET",
    "DELETE",
    "FROM",
    "WHERE",
    "GROUP",
    "BY",
    "ORDER",
    "HAVING",
    "LIMIT",
    "OFFSET",
    "AND",
    "OR",
    "NOT",
    "IN",
    "BETWEEN",
    "IS",
    "NULL",
    "LIKE",
    "AS",
    "DESC",
    "NULLS",
    "FIRST",
    "EXPLAIN",
    "ANALYZE",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    "CREATE",
    "TABLE",
    "DROP",
    "IF",
    "EXISTS",
    "VACUUM",
    "SHOW",
    "RESET",
    "CHECKPOINT",
    "TO",
    "ALL",
    "t",
    "id",
    "note",
    "x",
    "t.id",
    "buffers",
    "stat_io",
    "aio_inflight",
    "generate_series",
    "count",
    "sum",
    "avg",
    "min",
    "max",
    "md5",
    "repeat",
    "random",
    "abs",
    "prewarm",
    "evict_relation",
    "read_stream_for_blocks",
    "ARRAY",
    "(",
    ")",
    "[",
    "]",
    ",",
    ";",
    "*",
    "+",
    "-",
    "/",
    "%",
    "||",
    "=",
    "<>",
    "<",
    ">=",
    "::",
    "integer",
    "text",
    "bigint",
    "boolean",
    "double precision",
    "0",
    "1",
    "7",
    "-1",
    "2.5",
    "'a'",
    "'7'",
    "''",
    "true",
    "false",
    "io_combine_limit",
];

/// A result is well formed: every row has a value per column, a SELECT's
/// tag counts its rows, and it formats as a table and as CSV.
fn check_result_shape(text: &str, r: &StatementResult) {
    for row in &r.rows {
        assert_eq!(row.len(), r.columns.len(), "{text}: {r:?}");
    }
    if r.tag.starts_with("SELECT") {
        assert_eq!(r.tag, format!("SELECT {}", r.rows.len()), "{text}");
    }
    let table = format_table(r);
    assert!(table.ends_with('\n'), "{text}: {table:?}");
    let csv = format_csv(r);
    assert_eq!(
        csv.lines().count(),
        if r.returns_rows() {
            r.rows.len() + 1
        } else {
            0
        },
        "{text}: {csv:?}"
    );
}

thread_local! {
    /// The fuzz test's database: (session, database, directory), dropped
    /// in that order.
    static FUZZ: std::cell::RefCell<Option<(Session, Arc<Database>, tempfile::TempDir)>> =
        const { std::cell::RefCell::new(None) };
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]
    #[test]
    fn random_statements_give_results_or_errors_never_panics(
        statements in proptest::collection::vec(fuzz_statement(), 1..4)
    ) {
        FUZZ.with(|cell| {
            let mut cell = cell.borrow_mut();
            let (s, _, _) = cell.get_or_insert_with(|| {
                let (dir, db) = new_db(IoMethod::Sync);
                let mut s = db.session().unwrap();
                run(&mut s, "CREATE TABLE t (id integer, note text);
                             INSERT INTO t SELECT i, md5(i::text) FROM generate_series(1, 20) i");
                (s, db, dir)
            });
            // Start each case outside any block, with the table there:
            // whatever the last case did, these work.
            run(s, "ROLLBACK");
            run(s, "CREATE TABLE IF NOT EXISTS t (id integer, note text)");
            let text = statements.join(";\n");
            match sql::execute(s, &text) {
                Ok(results) => {
                    for r in &results {
                        check_result_shape(&text, r);
                    }
                }
                // An error of the statement, never one of the storage below.
                Err(e) => assert!(
                    !matches!(
                        e,
                        SqlError::Exec(ExecError::Buffer(_) | ExecError::Storage(_))
                            | SqlError::Database(_)
                    ),
                    "{text}: {e}"
                ),
            }
        });
    }
}

#[test]
fn explain_shows_a_sort_key_given_by_position_as_its_column() {
    let (_dir, db) = new_db(IoMethod::Sync);
    let mut s = db.session().unwrap();
    run(&mut s, "CREATE TABLE t (a int, b int)");
    let sort_key = |s: &mut Session, query: &str| -> String {
        common::explain_lines(s, query)
            .into_iter()
            .find_map(|l| l.trim().strip_prefix("Sort Key: ").map(str::to_string))
            .expect("a Sort node")
    };
    assert_eq!(
        sort_key(
            &mut s,
            "SELECT a, b + 1 FROM t ORDER BY 2 DESC NULLS LAST, 1"
        ),
        "b + 1 DESC NULLS LAST, a"
    );
    assert_eq!(sort_key(&mut s, "SELECT * FROM t ORDER BY 2"), "b");
    // Written as an expression, it shows as written.
    assert_eq!(sort_key(&mut s, "SELECT a FROM t ORDER BY b * 2"), "b * 2");
    assert_eq!(
        sort_key(
            &mut s,
            "SELECT a FROM t UNION SELECT b FROM t ORDER BY 1 DESC"
        ),
        "a DESC"
    );
}

#[test]
fn case_regex_any_arrays_and_string_agg_follow_postgresql() {
    let (_dir, db) = new_db(IoMethod::Sync);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE t (id int PRIMARY KEY, k text); \
         INSERT INTO t VALUES (1, 'r'), (2, 'i'), (3, NULL)",
    );
    // Simple and searched CASE; a missing ELSE is NULL; literals meet the
    // operand's type.
    assert_eq!(
        rows(
            &mut s,
            "SELECT CASE k WHEN 'r' THEN 'table' WHEN 'i' THEN 'index' END, \
             CASE WHEN id > 1 THEN id * 10 ELSE 0 END FROM t ORDER BY id"
        ),
        vec![
            vec![Value::Text("table".into()), Value::Integer(0)],
            vec![Value::Text("index".into()), Value::Integer(20)],
            vec![Value::Null, Value::Integer(30)],
        ]
    );
    assert_eq!(
        scalar(&mut s, "SELECT CASE WHEN false THEN 1 ELSE '2' END + 1"),
        Value::Integer(3)
    );
    assert_eq!(
        scalar(&mut s, "SELECT 'ab'::char(4) ~ '^ab$'"),
        Value::Boolean(true)
    );
    assert!(
        err(&mut s, "SELECT CASE WHEN true THEN 1 ELSE 'x'::text END")
            .to_string()
            .contains("CASE types integer and text cannot be matched")
    );
    // Named as PostgreSQL names them.
    let r = last(
        &mut s,
        "SELECT CASE WHEN true THEN 1 END, k COLLATE \"C\", ('{a}'::text[])[1], \
         ARRAY(SELECT 1) FROM t LIMIT 1",
    );
    let names: Vec<&str> = r.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["case", "k", "text", "array"]);
    // An aggregate inside a CASE makes the query an aggregate one.
    assert_eq!(
        scalar(
            &mut s,
            "SELECT CASE WHEN count(*) > 2 THEN 'many' ELSE 'few' END FROM t"
        ),
        Value::Text("many".into())
    );
    // ~ and !~, psql's OPERATOR(pg_catalog.~) and COLLATE.
    assert_eq!(
        scalar(
            &mut s,
            "SELECT count(*) FROM t WHERE k OPERATOR(pg_catalog.~) '^(r|i)$' \
             COLLATE pg_catalog.default AND k !~ '^i'"
        ),
        Value::BigInt(1)
    );
    assert!(err(&mut s, "SELECT 'a' ~ '('")
        .to_string()
        .starts_with("invalid regular expression"));
    // = ANY over an array's text, its elements, array_upper,
    // array_to_string; ARRAY(SELECT …) and string_agg.
    assert_eq!(
        rows(
            &mut s,
            "SELECT 2 = ANY ('{1,2}'), 3 = ANY ('{1,NULL}'), ('{10,20}'::int[])[2] + 1, \
             array_upper('{a,b,c}'::text[], 1), array_to_string('{a,NULL,\"b c\"}', '-'), \
             ARRAY(SELECT k FROM t ORDER BY id), \
             (SELECT string_agg(k, ', ') FROM t)"
        ),
        vec![vec![
            Value::Boolean(true),
            Value::Null,
            Value::Integer(21),
            Value::Integer(3),
            Value::Text("a-b c".into()),
            Value::Text("{r,i,NULL}".into()),
            Value::Text("r, i".into()),
        ]]
    );
}

#[test]
fn pg_catalog_describes_tables_indexes_and_constraints() {
    let (_dir, db) = new_db(IoMethod::Sync);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE t (id int PRIMARY KEY, note varchar(10) NOT NULL, n numeric(5,2)); \
         CREATE INDEX t_note_idx ON t (note DESC)",
    );
    let text = |v: &str| Value::Text(v.into());
    assert_eq!(
        rows(
            &mut s,
            "SELECT c.relname, c.relkind, n.nspname, am.amname, pg_table_is_visible(c.oid), \
                    c.oid::pg_catalog.regclass::pg_catalog.text \
             FROM pg_catalog.pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             JOIN pg_am am ON am.oid = c.relam ORDER BY 1"
        ),
        vec![
            vec![
                text("t"),
                text("r"),
                text("public"),
                text("heap"),
                Value::Boolean(true),
                text("t")
            ],
            vec![
                text("t_note_idx"),
                text("i"),
                text("public"),
                text("btree"),
                Value::Boolean(true),
                text("t_note_idx")
            ],
            vec![
                text("t_pkey"),
                text("i"),
                text("public"),
                text("btree"),
                Value::Boolean(true),
                text("t_pkey")
            ],
        ]
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull \
             FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
             WHERE c.relname = 't' AND a.attnum > 0 ORDER BY a.attnum"
        ),
        vec![
            vec![text("id"), text("integer"), Value::Boolean(true)],
            vec![
                text("note"),
                text("character varying(10)"),
                Value::Boolean(true)
            ],
            vec![text("n"), text("numeric(5,2)"), Value::Boolean(false)],
        ]
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT c.relname, pg_get_indexdef(i.indexrelid, 0, true), \
                    pg_get_constraintdef(con.oid, true), i.indkey \
             FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
             LEFT JOIN pg_constraint con ON con.conindid = i.indexrelid ORDER BY 1"
        ),
        vec![
            vec![
                text("t_note_idx"),
                text("CREATE INDEX t_note_idx ON public.t USING btree (note DESC)"),
                Value::Null,
                text("2"),
            ],
            vec![
                text("t_pkey"),
                text("CREATE UNIQUE INDEX t_pkey ON public.t USING btree (id)"),
                text("PRIMARY KEY (id)"),
                text("1"),
            ],
        ]
    );
    // Sizes from the files, as pg_size_pretty prints them.
    run(&mut s, "INSERT INTO t VALUES (1, 'a', 1)");
    assert_eq!(
        rows(
            &mut s,
            "SELECT pg_relation_size(c.oid) % 8192 = 0 AND pg_relation_size(c.oid) > 0, \
                    pg_table_size(c.oid) >= pg_relation_size(c.oid), \
                    pg_total_relation_size(c.oid) = pg_table_size(c.oid) + pg_indexes_size(c.oid), \
                    pg_size_pretty(8192), obj_description(c.oid, 'pg_class') \
             FROM pg_class c WHERE relname = 't'"
        ),
        vec![vec![
            Value::Boolean(true),
            Value::Boolean(true),
            Value::Boolean(true),
            text("8192 bytes"),
            Value::Null,
        ]]
    );
    // A table a transaction is creating is in its own pg_class only.
    run(&mut s, "BEGIN; CREATE TABLE w (a int)");
    let mut other = db.session().unwrap();
    let count_w = "SELECT count(*) FROM pg_class WHERE relname = 'w'";
    assert_eq!(scalar(&mut s, count_w), Value::BigInt(1));
    assert_eq!(scalar(&mut other, count_w), Value::BigInt(0));
    run(&mut s, "COMMIT");
    assert_eq!(scalar(&mut other, count_w), Value::BigInt(1));
    // pg_catalog's relations cannot be written or made.
    assert!(err(&mut s, "CREATE TABLE pg_class (a int)")
        .to_string()
        .contains("pg_class"));
}

#[test]
fn every_pg_catalog_relation_reads_whole_rows_and_regtype_names_types_as_postgresql() {
    use aiostore::exec::pg_catalog::CatalogView;
    let (_dir, db) = new_db(IoMethod::Sync);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE t (id int PRIMARY KEY, u text UNIQUE, c char(3)) WITH (fillfactor = 70); \
         CREATE INDEX t_c ON t (c)",
    );
    // Each view's rows are built by hand: reading every column of every
    // row checks their widths (rows() asserts them in debug builds) and
    // that each decodes as its declared type.
    for view in CatalogView::ALL {
        let all = format!("SELECT * FROM pg_catalog.{}", view.name());
        let counted = format!("SELECT count(*) FROM pg_catalog.{}", view.name());
        let n = rows(&mut s, &all).len() as i64;
        assert_eq!(
            rows(&mut s, &counted),
            vec![vec![Value::BigInt(n)]],
            "{}",
            view.name()
        );
    }
    assert_eq!(
        rows(
            &mut s,
            "SELECT 1042::regtype::text, 1043::regtype::text, 23::regtype::text, 1114::regtype::text"
        ),
        vec![vec![
            Value::Text("character".into()),
            Value::Text("character varying".into()),
            Value::Text("integer".into()),
            Value::Text("timestamp without time zone".into()),
        ]]
    );
}
