//! The SQL front end (DESIGN.md §1): parses statements with the
//! `sqlparser` crate (PostgreSQL dialect), plans them into the executor's
//! plans (`exec`), runs them in a session's transaction, and formats the
//! results. It knows SQL text and syntax trees; it knows nothing below the
//! executor except the catalog (to resolve names), the session's
//! transaction calls and its settings.
//!
//! # A statement's life
//!
//! ```text
//! text ─parse─▶ statements ─for each─▶ start_statement ─plan─▶ exec::Plan
//!                                       (snapshot)              │execute
//!                    StatementResult ◀─ end_statement(ok) ◀─────┘
//! ```
//!
//! [`execute`] parses the whole text first (a syntax error anywhere runs
//! nothing, as PostgreSQL treats a multi-statement query string), then runs
//! the statements in order and stops at the first error. Every statement
//! except BEGIN, COMMIT and ROLLBACK is bracketed by the session's
//! `start_statement` and `end_statement(ok)`: outside a transaction block
//! that makes each statement its own transaction, committed if it succeeded
//! and rolled back if it failed, so a failed statement leaves nothing
//! behind (a multi-row INSERT that fails on its third row inserts none).
//! Inside a block a failure marks the block failed, and every statement
//! until ROLLBACK gets "current transaction is aborted".
//!
//! Planning happens inside the statement, so a planning error (unknown
//! column, type mismatch) fails the statement like any other error. DDL
//! (DROP TABLE, CREATE INDEX, the role statements) and VACUUM are refused
//! inside a transaction block: catalog changes take effect at once (see
//! `catalog`), so they could not be rolled back with the block.
//!
//! # What is supported
//!
//! CREATE TABLE (integer, bigint, double precision, text, varchar(n),
//! char(n), boolean, date, timestamp; NOT
//! NULL; `WITH (fillfactor = n)`), DROP TABLE, INSERT (VALUES or SELECT),
//! UPDATE, DELETE, SELECT over tables, views, `generate_series`, utility
//! functions and subqueries, joined (WHERE, GROUP BY, HAVING, ORDER BY,
//! LIMIT/OFFSET, count/sum/avg/min/max; IN, EXISTS and scalar
//! subqueries; UNION, INTERSECT, EXCEPT), EXPLAIN \[ANALYZE\] with `(ANALYZE, BUFFERS, IO)`,
//! BEGIN/START TRANSACTION [ISOLATION LEVEL …], COMMIT/END,
//! ROLLBACK/ABORT, SET/SHOW/RESET, VACUUM, COPY, CHECKPOINT and CREATE,
//! ALTER and DROP ROLE (`roles`).
//! COPY loads a table from a file or from [`StatementIo::stdin`] and
//! writes a table or a query to a file or [`StatementIo::stdout`], in CSV
//! or PostgreSQL's text format (see `exec::copy`). CHECKPOINT
//! writes every dirty buffer back; it is not a recovery point until the
//! WAL exists. SET takes effect at once and is not undone by ROLLBACK.
//! Anything else is refused with an error that names the construct and
//! where it is ("in statement 2 at line 1, column 8: JOIN is not
//! supported").
//!
//! System views, read like tables: `aio_inflight` (one row per I/O handle
//! in use: session, handle, generation, state, op, offset, length, target,
//! result, flags), `stat_io` (cumulative I/O counters per method and
//! operation, and a `buffer pool` row with hits, reads, evictions, writes),
//! `stat_wal` (one row of WAL counters and the insert, flush and redo
//! LSNs), `stat_checkpointer` and `stat_bgwriter` (one row each: the
//! checkpoints and the background writer since opening), `locks` (who
//! waits for whom) and `buffers` (the pool's contents: buffer, rel, relname, fork,
//! block, valid, dirty, io_in_progress, pins, usage). Utility functions:
//! `prewarm('t')` and `evict_relation('t')` return a block count;
//! `read_stream_for_blocks('t', ARRAY[…])` returns one row (blocks, hits,
//! reads, ios, foreign_ios, waits, ms), alone in a SELECT or in FROM.
//!
//! Literals follow PostgreSQL where we have the type: `1` is integer, a
//! number too large for it bigint, `1.5` double precision (PostgreSQL:
//! numeric), and a quoted string takes the type its context wants
//! (`WHERE id = '7'`). Names are folded to lower case unless quoted.
//!
//! # Example
//!
//! ```no_run
//! # fn f(session: &mut aiostore::database::Session) -> Result<(), aiostore::sql::SqlError> {
//! let results = aiostore::sql::execute(
//!     session,
//!     "CREATE TABLE t (id integer NOT NULL, note text);
//!      INSERT INTO t SELECT i, md5(i::text) FROM generate_series(1, 1000) i;
//!      SELECT count(*) FROM t WHERE id % 2 = 0",
//! )?;
//! assert_eq!(results[1].tag, "INSERT 0 1000");
//! print!("{}", aiostore::sql::format_table(&results[2]));
//! # Ok(()) }
//! ```

mod access;
mod bitmap_path;
mod commands;
mod copy;
mod cost;
mod ddl;
mod dml;
mod explain;
mod expr;
mod format;
mod parse;
mod prepared;
mod query;
mod roles;
mod setop;

use std::fmt;
use std::io::{BufRead, Write};

use thiserror::Error;

use crate::catalog::CatalogError;
use crate::config::ConfigError;
use crate::database::{DbError, Session, XactError};
use crate::exec::{ExecError, Progress};
use crate::types::{ColumnType, Value};

pub use expr::MAX_PARAMETERS;
pub use format::{
    describe_index, describe_indexes, format_csv, format_csv_rows, format_row_count, format_table,
    format_table_rows, format_value,
};
pub use parse::{MAX_NESTING_DEPTH, MAX_OPERATOR_DEPTH};
pub use prepared::{
    execute_prepared, execute_prepared_limited, prepare, resume_limited, Limited, Prepared,
};

/// A place in the statement text (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub line: u64,
    pub column: u64,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

/// Errors of SQL statements.
#[derive(Debug, Error)]
pub enum SqlError {
    #[error("syntax error in statement {statement}: {message}")]
    Syntax { statement: usize, message: String },
    #[error("in statement {statement} at {at}: {construct} is not supported{hint}")]
    Unsupported {
        statement: usize,
        at: Position,
        construct: String,
        /// What to do instead ("; use …"), or empty.
        hint: String,
    },
    /// An expression deeper than the parser and planner may walk
    /// (PostgreSQL's words for running out of stack).
    #[error("stack depth limit exceeded (in statement {statement} at {at}): the expression nests more than {limit} {what}; simplify it")]
    TooDeep {
        statement: usize,
        at: Position,
        limit: usize,
        /// What was counted ("operators", …).
        what: &'static str,
    },
    /// A NUL character in a literal or name, which text cannot hold.
    #[error("invalid byte sequence for encoding \"UTF8\": 0x00 (in statement {statement} at {at}); text cannot hold a NUL character")]
    NulInText { statement: usize, at: Position },
    /// A Unicode escape (`E'\u0000'`, `U&'\0000'`) for NUL, refused as
    /// PostgreSQL refuses it.
    #[error("invalid Unicode escape value (in statement {statement} at {at}); text cannot hold a NUL character")]
    NulUnicodeEscape { statement: usize, at: Position },
    /// A `$n` beyond the parameters a statement was given values for.
    #[error("there is no parameter ${number} (at {at})")]
    UnknownParameter { number: usize, at: Position },
    /// A prepared statement must be one statement.
    #[error("cannot insert multiple commands into a prepared statement")]
    MultipleCommands,
    #[error(
        "bind message supplies {given} parameters, but prepared statement requires {expected}"
    )]
    ParameterCount { given: usize, expected: usize },
    #[error("table \"{name}\" does not exist{hint}")]
    UnknownTable { name: String, hint: String },
    #[error("column reference \"{column}\" is ambiguous (at {at}); qualify it with its table's name or alias")]
    AmbiguousColumn { column: String, at: Position },
    #[error("missing FROM-clause entry for table \"{name}\" (at {at})")]
    MissingFromItem { name: String, at: Position },
    #[error("invalid reference to FROM-clause entry for table \"{name}\" (at {at}); a JOIN's ON can read only the tables joined so far")]
    InvalidFromReference { name: String, at: Position },
    #[error("table name \"{name}\" specified more than once; give one of them an alias")]
    DuplicateFromItem { name: String },
    #[error("column \"{column}\" does not exist in {relation} (at {at})")]
    UnknownColumn {
        column: String,
        relation: String,
        at: Position,
    },
    #[error("index \"{name}\" does not exist")]
    UnknownIndex { name: String },
    /// A PRIMARY KEY or UNIQUE constraint naming a column the table does
    /// not have (PostgreSQL's words).
    #[error("column \"{column}\" named in key does not exist (at {at})")]
    KeyColumn { column: String, at: Position },
    #[error("column \"{column}\" appears twice in {constraint}")]
    KeyColumnTwice {
        column: String,
        constraint: &'static str,
    },
    #[error("function {name}() does not exist (at {at}); functions: {known}")]
    UnknownFunction {
        name: String,
        at: Position,
        known: String,
    },
    #[error("column \"{column}\" must appear in the GROUP BY clause or be used in an aggregate function (at {at})")]
    NotGrouped { column: String, at: Position },
    #[error("aggregate functions are not allowed in {clause} (at {at})")]
    AggregateNotAllowed { clause: &'static str, at: Position },
    #[error("{name}() must be called with constant arguments, as {signature} (at {at})")]
    UtilityArguments {
        name: String,
        signature: &'static str,
        at: Position,
    },
    #[error("{name}() can be called only in FROM, or in the select list of a SELECT without FROM (alone, if it returns several columns) (at {at})")]
    UtilityPlacement { name: String, at: Position },
    #[error(
        "type \"{name}\" is not supported; use integer, bigint, numeric, double precision, text, varchar(n), char(n), boolean, date or timestamp"
    )]
    UnknownType { name: String },
    /// A `varchar(n)` or `char(n)` whose n PostgreSQL refuses too.
    #[error("length for type {ty} {problem}")]
    TypeLength { ty: &'static str, problem: String },
    #[error("fillfactor must be an integer from 10 to 100, not {value}")]
    Fillfactor { value: String },
    #[error("INSERT into \"{table}\" has {expressions} expressions for {columns} target columns")]
    InsertArity {
        table: String,
        expressions: usize,
        columns: usize,
    },
    #[error("column \"{column}\" of table \"{table}\" is given more than once")]
    DuplicateColumn { table: String, column: String },
    #[error("{clause} must be a constant, non-negative integer, not {value}")]
    BadLimit { clause: &'static str, value: String },
    #[error("{clause} position {position} is not in the select list (it has {columns} columns)")]
    BadPosition {
        clause: &'static str,
        position: i64,
        columns: usize,
    },
    #[error(
        "subquery in FROM must have an alias (at {at}); for example, FROM (SELECT ...) [AS] foo"
    )]
    SubqueryAlias { at: Position },
    #[error(
        "table \"{name}\" has {available} columns available but {specified} columns specified"
    )]
    TooManyColumnAliases {
        name: String,
        available: usize,
        specified: usize,
    },
    #[error("invalid UNION/INTERSECT/EXCEPT ORDER BY clause (at {at}): only result column names can be used, not expressions or functions; add the expression to every SELECT, or move the UNION into a FROM clause")]
    SetOperationOrder { at: Position },
    #[error("each {op} query must have the same number of columns ({left} and {right})")]
    SetOperationWidth {
        op: &'static str,
        left: usize,
        right: usize,
    },
    #[error("VALUES lists must all be the same length (at {at})")]
    ValuesLength { at: Position },
    #[error("{op} types {left} and {right} cannot be matched")]
    SetOperationTypes {
        op: &'static str,
        left: &'static str,
        right: &'static str,
    },
    /// A subquery of the wrong width for where it is (PostgreSQL's
    /// words: "subquery must return only one column", "subquery has too
    /// many columns").
    #[error("{problem} (at {at})")]
    SubqueryColumns { problem: &'static str, at: Position },
    #[error("\"{name}\" is a system view and cannot be changed")]
    ReadOnlyView { name: String },
    /// A locking clause on a query that has no rows of a table to lock
    /// (PostgreSQL's words: "FOR UPDATE is not allowed with GROUP BY
    /// clause").
    #[error("{clause} is not allowed with {with}")]
    LockingNotAllowed {
        clause: &'static str,
        with: &'static str,
    },
    /// `FOR UPDATE OF x` naming no FROM item (PostgreSQL's words).
    #[error("relation \"{name}\" in {clause} clause not found in FROM clause")]
    LockingTargetMissing { clause: &'static str, name: String },
    /// `FOR UPDATE OF x` naming a FROM item that is no table.
    #[error("{clause} cannot be applied to {what}")]
    LockingTargetKind { clause: &'static str, what: String },
    /// `FOR UPDATE OF s.t` (PostgreSQL's words).
    #[error("{clause} must specify unqualified relation names")]
    LockingQualifiedName { clause: &'static str },
    /// An EXPLAIN option that is not one, or not given on or off.
    #[error("{0}")]
    Explain(String),
    #[error("EXPLAIN option {option} requires ANALYZE")]
    ExplainNeedsAnalyze { option: &'static str },
    /// A COPY option's value PostgreSQL refuses too.
    #[error("{0}")]
    Copy(String),
    /// A COPY that PostgreSQL refuses as not supported (a delimiter of
    /// more than one byte), or that cannot run here (standard input or
    /// output the caller did not give).
    #[error("{0}")]
    CopyUnsupported(String),
    /// PostgreSQL's words and code (object_not_in_prerequisite_state).
    #[error("cannot perform COPY FREEZE because the table \"{table}\" was not created or truncated in the current transaction; TRUNCATE it in the same transaction first, or leave FREEZE out")]
    CopyFreeze { table: String },
    /// A row-limited run asked for where its transaction would end with
    /// its first part (the embedding API outside a block or grouping).
    #[error("a query run a row limit at a time needs a transaction that outlives its first part: run it in a block (BEGIN), or group statements with Session::begin_implicit")]
    PortalOutsideTransaction,
    /// PostgreSQL's words and code (invalid_transaction_state): a portal
    /// of the transaction still reads, and would see the frozen rows.
    #[error("cannot perform COPY FREEZE because of prior transaction activity: a portal of the transaction is still open; close it (or fetch it to its end) first, or leave FREEZE out")]
    CopyFreezeBusy,
    /// COPY's file could not be opened, written or synced.
    #[error("{message}")]
    CopyFile { message: String, io: std::io::Error },
    #[error(transparent)]
    Exec(#[from] ExecError),
    #[error(transparent)]
    Xact(#[from] XactError),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(transparent)]
    Role(#[from] crate::catalog::RoleError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Database(#[from] DbError),
}

impl SqlError {
    /// PostgreSQL's SQLSTATE for this error (five characters), as its
    /// server would report the same condition. Each layer's error says
    /// its own; the wrapped ones are asked.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            SqlError::Syntax { .. } | SqlError::MultipleCommands => "42601",
            SqlError::UnknownParameter { .. } => "42P02", // undefined_parameter
            SqlError::ParameterCount { .. } => "08P01",   // protocol_violation
            SqlError::Unsupported { .. }
            | SqlError::LockingNotAllowed { .. }
            | SqlError::LockingTargetKind { .. } => "0A000",
            SqlError::LockingTargetMissing { .. } => "42P01", // undefined_table
            SqlError::LockingQualifiedName { .. } => "42601", // syntax_error
            SqlError::TooDeep { .. } => "54001",              // statement_too_complex
            SqlError::NulInText { .. } => "22021",            // character_not_in_repertoire
            // PostgreSQL's scanner reports a bad Unicode escape as a
            // syntax error.
            SqlError::NulUnicodeEscape { .. } => "42601",
            SqlError::UnknownTable { .. }
            | SqlError::MissingFromItem { .. }
            | SqlError::InvalidFromReference { .. } => "42P01", // undefined_table
            SqlError::AmbiguousColumn { .. } => "42702",
            SqlError::DuplicateFromItem { .. } => "42712", // duplicate_alias
            SqlError::UnknownColumn { .. } | SqlError::KeyColumn { .. } => "42703",
            SqlError::UnknownIndex { .. } => "42704", // undefined_object
            SqlError::KeyColumnTwice { .. } | SqlError::DuplicateColumn { .. } => "42701",
            // A utility function called with arguments of no signature it
            // has: PostgreSQL finds no such function.
            SqlError::UnknownFunction { .. } | SqlError::UtilityArguments { .. } => "42883",
            SqlError::NotGrouped { .. } | SqlError::AggregateNotAllowed { .. } => "42803",
            // PostgreSQL's "set-returning functions are not allowed in
            // WHERE".
            SqlError::UtilityPlacement { .. } => "0A000",
            // PostgreSQL's "type does not exist" (it is the same message
            // for a type PostgreSQL has and we do not).
            SqlError::UnknownType { .. } => "42704",
            SqlError::TypeLength { .. } | SqlError::Fillfactor { .. } => "22023",
            // PostgreSQL's "INSERT has more expressions than target
            // columns".
            SqlError::InsertArity { .. } => "42601",
            SqlError::BadLimit { clause, .. } => match *clause {
                "OFFSET" => "2201X", // invalid_row_count_in_result_offset_clause
                _ => "2201W",        // invalid_row_count_in_limit_clause
            },
            SqlError::BadPosition { .. } | SqlError::TooManyColumnAliases { .. } => "42P10", // invalid_column_reference
            SqlError::SubqueryAlias { .. }
            | SqlError::SetOperationWidth { .. }
            | SqlError::ValuesLength { .. }
            | SqlError::SubqueryColumns { .. } => "42601",
            SqlError::SetOperationOrder { .. } => "0A000",
            SqlError::SetOperationTypes { .. } => "42804", // datatype_mismatch
            // A system view named where a table is wanted (PostgreSQL's
            // "cannot copy to view", "is not a table").
            SqlError::ReadOnlyView { .. } => "42809", // wrong_object_type
            // PostgreSQL's "unrecognized EXPLAIN option", "requires a
            // Boolean value".
            SqlError::Explain(_) => "42601",
            SqlError::ExplainNeedsAnalyze { .. } | SqlError::Copy(_) => "22023",
            SqlError::CopyUnsupported(_) => "0A000",
            SqlError::CopyFreeze { .. } => "55000",
            SqlError::CopyFreezeBusy | SqlError::PortalOutsideTransaction => "25000",
            SqlError::CopyFile { io, .. } => crate::storage::io_sqlstate(io),
            SqlError::Exec(e) => e.sqlstate(),
            SqlError::Xact(e) => e.sqlstate(),
            SqlError::Catalog(e) => e.sqlstate(),
            SqlError::Role(e) => e.sqlstate(),
            SqlError::Config(e) => e.sqlstate(),
            SqlError::Database(e) => e.sqlstate(),
        }
    }
}

/// A column of a statement's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultColumn {
    pub name: String,
    pub ty: ColumnType,
}

/// What one statement returned.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StatementResult {
    /// The command tag, as PostgreSQL's ("INSERT 0 5", "SELECT 3", …).
    pub tag: String,
    /// Columns of a row-returning statement (empty for others).
    pub columns: Vec<ResultColumn>,
    /// The rows, unless they went to [`StatementIo::rows`] as they were
    /// produced (then `streamed` is set and this is empty).
    pub rows: Vec<Vec<Value>>,
    /// The rows went to [`StatementIo::rows`].
    pub streamed: bool,
    /// Notices and warnings ("table \"t\" already exists, skipping").
    pub notices: Vec<String>,
}

impl StatementResult {
    fn tag(tag: impl Into<String>) -> StatementResult {
        StatementResult {
            tag: tag.into(),
            ..Default::default()
        }
    }

    /// Whether the statement returns rows (SELECT, SHOW, EXPLAIN), even
    /// if none.
    pub fn returns_rows(&self) -> bool {
        !self.columns.is_empty()
    }

    /// The column called `name`, if any.
    pub fn column(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }
}

/// What statements may use besides the database: the input of COPY …
/// FROM STDIN, the output of COPY … TO STDOUT, the receiver of a
/// query's rows, where long statements (COPY FROM, VACUUM) report
/// their progress, and where EXPLAIN ANALYZE puts the rows of the query
/// it ran. Each is optional; a COPY that needs a missing one fails
/// with an error saying so, and without a row receiver a query's rows are
/// collected in its [`StatementResult`].
#[derive(Default)]
pub struct StatementIo<'a> {
    pub stdin: Option<&'a mut dyn BufRead>,
    pub stdout: Option<&'a mut dyn Write>,
    pub rows: Option<&'a mut dyn RowSink>,
    pub progress: Option<&'a mut dyn Progress>,
    /// EXPLAIN ANALYZE appends the rows of the statement it explains here
    /// (collected in memory) instead of only counting them, so that a
    /// benchmark can check the answer of the very run whose figures it
    /// reports: a cold run cannot be repeated to ask for the rows.
    pub explained_rows: Option<&'a mut Vec<Vec<Value>>>,
    /// Told that a COPY … FROM STDIN or TO STDOUT begins, with the
    /// number of columns it copies, before it reads `stdin` or writes
    /// `stdout`: a server announces the copy to its client here.
    pub copy_begin: Option<&'a mut dyn FnMut(CopyDirection, usize) -> std::io::Result<()>>,
}

/// Which way a COPY moves data between a client and a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyDirection {
    /// COPY … FROM STDIN.
    In,
    /// COPY … TO STDOUT.
    Out,
}

/// Receives the rows of a query (SELECT, VALUES) as the executor produces
/// them, a batch at a time, so that a result of any size passes through
/// in bounded memory (PostgreSQL's server sends rows as its executor
/// returns them in the same way). SHOW, EXPLAIN and views' small results
/// are not streamed.
pub trait RowSink {
    /// The result's columns, before its first row.
    fn begin(&mut self, columns: &[ResultColumn]) -> std::io::Result<()>;
    /// The next rows, in order. The receiver may take them out of the
    /// vector (they are not used after), rather than copy them.
    fn rows(&mut self, rows: &mut Vec<Vec<Value>>) -> std::io::Result<()>;
    /// The end of the rows: `Some(count)` when the query finished, `None`
    /// when an error stopped it after [`RowSink::begin`] (what was sent
    /// stays sent, as with PostgreSQL).
    fn end(&mut self, count: Option<u64>) -> std::io::Result<()>;
}

impl StatementIo<'_> {
    /// Calls `f` with the progress receiver, or one that shows nothing.
    pub(crate) fn with_progress<R>(&mut self, f: impl FnOnce(&mut dyn Progress) -> R) -> R {
        match self.progress.as_deref_mut() {
            Some(p) => f(p),
            None => f(&mut crate::exec::NoProgress),
        }
    }
}

/// The relation a name given as text stands for (`\d T`,
/// `prewarm('T')`), read as SQL reads a name: folded to lower case, unless
/// in double quotes, where it keeps its case and `""` is a quote.
pub fn relation_name_from_text(text: &str) -> String {
    match text
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
    {
        Some(quoted) => quoted.replace("\"\"", "\""),
        None => text.to_lowercase(),
    }
}

/// Runs the `;`-separated statements of `text` in `session`, in order,
/// and returns their results. Stops at the first error; the failing
/// statement has been undone (or, inside a transaction block, the block is
/// marked failed), and the statements before it keep their effect.
pub fn execute(session: &mut Session, text: &str) -> Result<Vec<StatementResult>, SqlError> {
    let mut results = Vec::new();
    execute_each(session, text, &mut StatementIo::default(), |r| {
        results.push(r)
    })?;
    Ok(results)
}

/// Like [`execute`], with COPY's input and output and a progress
/// receiver, handing each statement's result to `on_result` as soon as it
/// is complete (for a shell that prints as it goes).
pub fn execute_each(
    session: &mut Session,
    text: &str,
    io: &mut StatementIo,
    on_result: impl FnMut(StatementResult),
) -> Result<(), SqlError> {
    run_each(session, parse::parse(text)?, io, on_result)
}

/// [`execute_each`] as PostgreSQL runs a simple Query message: several
/// statements outside a transaction block are one implicit transaction
/// (`database::Implicit::Statements`), committed after the last; an
/// error in one rolls back those before it too, and the rest do not run.
/// BEGIN among them makes that transaction a block (it stays open after
/// the text), COMMIT or ROLLBACK end it early with a warning, and the
/// statements after start another. A statement that must run outside
/// any block (VACUUM, and here CREATE INDEX, ALTER TABLE, DROP TABLE,
/// DROP INDEX and the role statements) commits those before it and runs
/// in a transaction of its own (PostgreSQL refuses VACUUM there, and
/// runs the others in the implicit transaction). One statement alone
/// runs as [`execute_each`] runs it.
pub fn execute_simple_query(
    session: &mut Session,
    text: &str,
    io: &mut StatementIo,
    on_result: impl FnMut(StatementResult),
) -> Result<(), SqlError> {
    let parsed = parse::parse(text)?;
    let grouped = parsed.len() > 1 && session.implicit().is_none();
    if !grouped {
        return run_each(session, parsed, io, on_result);
    }
    session.begin_implicit(crate::database::Implicit::Statements);
    let ran = run_each(session, parsed, io, on_result);
    // After a failure nothing implicit is open (the failed statement
    // rolled it back); this only ends the grouping.
    let ended = session.end_implicit();
    ran?;
    Ok(ended?)
}

/// Runs parsed statements in order, handing each result to `on_result`;
/// stops at the first error.
fn run_each(
    session: &mut Session,
    parsed: Vec<parse::Parsed>,
    io: &mut StatementIo,
    mut on_result: impl FnMut(StatementResult),
) -> Result<(), SqlError> {
    // Planning copies, compares and drops (an error leaving statements
    // unrun drops them all) parts of the syntax trees with `sqlparser`'s
    // own code, which does not grow the stack.
    let depth = parsed.iter().map(|p| p.depth).max().unwrap_or(0);
    parse::with_stack_for_depth(depth, move || {
        for statement in parsed {
            on_result(commands::run(session, &statement, io)?);
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::database::test_session as session;

    fn rows(s: &mut Session, text: &str) -> Vec<Vec<Value>> {
        let mut results = execute(s, text).unwrap_or_else(|e| panic!("{text}: {e}"));
        results.pop().unwrap().rows
    }

    #[test]
    fn insert_select_converts_unknown_literals_to_the_column_type() {
        let (mut s, _dir) = session();
        execute(&mut s, "CREATE TABLE t (id integer, note text)").unwrap();
        execute(&mut s, "INSERT INTO t (id, note) SELECT NULL, 'a'").unwrap();
        execute(&mut s, "INSERT INTO t SELECT '5', NULL").unwrap();
        assert_eq!(
            rows(&mut s, "SELECT id, note FROM t ORDER BY id"),
            [
                vec![Value::Integer(5), Value::Null],
                vec![Value::Null, Value::Text("a".into())],
            ]
        );
        // A typed value still needs a cast, as in PostgreSQL.
        let e = execute(&mut s, "INSERT INTO t SELECT '5'::text, NULL").unwrap_err();
        assert!(e.to_string().contains("is of type integer"), "{e}");
        let e = execute(&mut s, "INSERT INTO t SELECT 'x', NULL").unwrap_err();
        assert!(e.to_string().contains("invalid input syntax"), "{e}");
    }

    #[test]
    fn prefix_plus_names_itself_when_refused() {
        let (mut s, _dir) = session();
        let e = execute(&mut s, "SELECT +'a'::text").unwrap_err();
        assert_eq!(e.to_string(), "operator does not exist: + text");
        assert_eq!(rows(&mut s, "SELECT +2"), [vec![Value::Integer(2)]]);
    }

    /// Runs `text` as a simple query; returns its results' tags and
    /// notices, and its error.
    fn simple(s: &mut Session, text: &str) -> (Vec<String>, Option<String>) {
        let mut seen = Vec::new();
        let ran = execute_simple_query(s, text, &mut StatementIo::default(), |r| {
            seen.extend(r.notices.iter().cloned());
            seen.push(r.tag);
        });
        (seen, ran.err().map(|e| e.to_string()))
    }

    #[test]
    fn a_simple_querys_statements_commit_or_roll_back_together() {
        let (mut s, _dir) = session();
        execute(&mut s, "CREATE TABLE t (id integer PRIMARY KEY)").unwrap();
        let (_, e) = simple(
            &mut s,
            "INSERT INTO t VALUES (1); INSERT INTO t VALUES (2); INSERT INTO t VALUES (1)",
        );
        assert!(e.is_some_and(|e| e.contains("duplicate key")));
        assert_eq!(
            rows(&mut s, "SELECT count(*) FROM t"),
            [vec![Value::BigInt(0)]]
        );
        assert_eq!(
            s.transaction_status(),
            crate::database::TransactionStatus::Idle
        );
        assert_eq!(s.implicit(), None, "the grouping ends with the text");
        // COMMIT among them commits what came before, and warns.
        let (seen, e) = simple(
            &mut s,
            "INSERT INTO t VALUES (1); COMMIT; INSERT INTO t VALUES (2); INSERT INTO t VALUES (1)",
        );
        assert!(e.is_some());
        assert_eq!(
            seen,
            [
                "INSERT 0 1",
                "WARNING: there is no transaction in progress",
                "COMMIT",
                "INSERT 0 1"
            ]
        );
        assert_eq!(
            rows(&mut s, "SELECT count(*) FROM t"),
            [vec![Value::BigInt(1)]]
        );
        // BEGIN takes in the statements before it, and stays open.
        simple(
            &mut s,
            "INSERT INTO t VALUES (2); BEGIN; INSERT INTO t VALUES (3)",
        );
        assert_eq!(
            s.transaction_status(),
            crate::database::TransactionStatus::InBlock
        );
        execute(&mut s, "ROLLBACK").unwrap();
        assert_eq!(
            rows(&mut s, "SELECT count(*) FROM t"),
            [vec![Value::BigInt(1)]]
        );
        // Asking for another isolation after a statement ran in it is
        // too late, as in PostgreSQL.
        let (_, e) = simple(
            &mut s,
            "INSERT INTO t VALUES (2); BEGIN ISOLATION LEVEL REPEATABLE READ",
        );
        assert!(e.is_some_and(|e| e.contains("before any query")));
        assert_eq!(
            rows(&mut s, "SELECT count(*) FROM t"),
            [vec![Value::BigInt(1)]]
        );
        // A statement that runs in no block commits those before it.
        let (_, e) = simple(
            &mut s,
            "INSERT INTO t VALUES (2); CREATE INDEX ON t (id); INSERT INTO t VALUES (2)",
        );
        assert!(e.is_some());
        assert_eq!(
            rows(&mut s, "SELECT count(*) FROM t"),
            [vec![Value::BigInt(2)]]
        );
    }

    #[test]
    fn explain_analyze_hands_the_rows_it_ran_to_a_caller_that_asks() {
        let (mut s, _dir) = session();
        execute(
            &mut s,
            "CREATE TABLE t (a integer); INSERT INTO t SELECT i FROM generate_series(1, 5) i",
        )
        .unwrap();
        let text = "EXPLAIN ANALYZE SELECT sum(a), count(*) FROM t WHERE a > 1";
        let mut rows = Vec::new();
        let mut io = StatementIo {
            explained_rows: Some(&mut rows),
            ..Default::default()
        };
        let mut results = Vec::new();
        execute_each(&mut s, text, &mut io, |r| results.push(r)).unwrap();
        assert_eq!(rows, [vec![Value::BigInt(14), Value::BigInt(4)]]);
        // The result is still the plan, with the run's row counts.
        let plan: Vec<String> = results[0]
            .rows
            .iter()
            .filter_map(|r| match r.first() {
                Some(Value::Text(line)) => Some(line.to_string()),
                _ => None,
            })
            .collect();
        assert!(
            plan.iter()
                .any(|l| l.contains("Seq Scan on t") && l.contains("rows=4")),
            "{plan:?}"
        );
        // Without the receiver the rows are only counted, as before.
        assert_eq!(rows.len(), 1);
        assert_eq!(self::rows(&mut s, text).len(), plan.len());
    }

    #[test]
    fn errors_carry_the_sqlstate_postgresql_reports_for_them() {
        let (mut s, dir) = session();
        execute(
            &mut s,
            "CREATE TABLE t (id integer PRIMARY KEY, note varchar(3) NOT NULL, d date);
             CREATE TABLE u (id integer, note text);
             INSERT INTO t VALUES (1, 'a', NULL)",
        )
        .unwrap();
        let missing_file = dir.path().join("no such file.csv");
        let cases = [
            ("SELEC 1", "42601"),
            ("SELECT * FROM nope", "42P01"),
            ("SELECT nope FROM t", "42703"),
            ("SELECT id FROM t, u", "42702"),
            ("SELECT nope(1)", "42883"),
            ("CREATE TABLE t (id integer)", "42P07"),
            ("INSERT INTO t VALUES (1, 'b', NULL)", "23505"),
            ("INSERT INTO t VALUES (2, NULL, NULL)", "23502"),
            ("INSERT INTO t VALUES (2, 'long', NULL)", "22001"),
            ("SELECT 1 / 0", "22012"),
            ("SELECT 'x'::integer", "22P02"),
            ("SELECT 'x'::date", "22007"),
            ("SELECT '2023-02-30'::date", "22008"),
            ("SELECT 2147483647 + 1", "22003"),
            ("SELECT note, count(*) FROM t GROUP BY id", "42803"),
            ("SELECT 1 WHERE 1", "42804"),
            ("SELECT true::date", "42846"),
            (
                "SELECT (SELECT id FROM u UNION ALL SELECT 1 UNION ALL SELECT 2)",
                "21000",
            ),
            ("SET no_such_setting = 1", "42704"),
            ("SELECT count(*) FROM t FOR UPDATE", "0A000"),
            ("SELECT * FROM t FOR UPDATE OF nope", "42P01"),
            ("VACUUM buffers", "42809"),
            (
                &format!("COPY u FROM '{}'", missing_file.display()),
                "58P01",
            ),
        ];
        for (text, sqlstate) in cases {
            let e = execute(&mut s, text).unwrap_err();
            assert_eq!(e.sqlstate(), sqlstate, "{text}: {e}");
        }
        // Inside a transaction block: DDL refused, then the block failed.
        execute(&mut s, "BEGIN").unwrap();
        let e = execute(&mut s, "DROP TABLE u").unwrap_err();
        assert_eq!(e.sqlstate(), "25001", "{e}");
        let e = execute(&mut s, "SELECT 1").unwrap_err();
        assert_eq!(e.sqlstate(), "25P02", "{e}");
        execute(&mut s, "ROLLBACK").unwrap();
    }

    #[test]
    fn vacuum_of_a_system_view_says_it_is_one() {
        let (mut s, _dir) = session();
        let e = execute(&mut s, "VACUUM buffers").unwrap_err();
        assert!(matches!(e, SqlError::ReadOnlyView { .. }), "{e}");
    }
}
