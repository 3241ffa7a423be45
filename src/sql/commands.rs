//! Running one statement: transaction control, the statement bracket
//! (`start_statement` … `end_statement`), and dispatching each kind of
//! statement (DDL is in `ddl`, EXPLAIN in `explain`); settings are here.

use std::sync::Arc;

use sqlparser::ast::{
    self, DescribeAlias, ObjectType, Reset, ResetStatement, Set, Spanned, Statement,
    TransactionAccessMode, TransactionIsolationLevel, TransactionMode,
};
use sqlparser::tokenizer::Span;

use super::copy::copy;
use super::ddl::{analyze, create_table, drop_tables, vacuum};
use super::dml::{locked_table, plan_delete, plan_insert, plan_update};
use super::explain::{explain, explain_options};
use super::expr::{constant, ident, object_name, Placeholders, StmtCx};
use super::parse::{Parsed, Stmt};
use super::query::plan_query;
use super::{ResultColumn, RowSink, SqlError, StatementIo, StatementResult};
use crate::config::{Context, SETTINGS};
use crate::database::{Isolation, Session, StatementSnapshot, XactError};
use crate::exec::{self, ExecError, Plan};
use crate::txn::LockMode;
use crate::types::{ColumnType, Value};

/// Ends the statement as `result` says; an error ending it (a commit that
/// failed) replaces a success, never a failure.
fn finish<R>(s: &mut Session, result: Result<R, SqlError>) -> Result<R, SqlError> {
    let ended = s.end_statement(result.is_ok());
    match (result, ended) {
        (Ok(r), Ok(())) => Ok(r),
        (Ok(_), Err(e)) => Err(e.into()),
        (Err(e), _) => Err(e),
    }
}

/// A statement that reads or writes table data, with its snapshot.
fn in_statement(
    s: &mut Session,
    f: impl FnOnce(&mut Session, &mut StatementSnapshot) -> Result<StatementResult, SqlError>,
) -> Result<StatementResult, SqlError> {
    let result = match s.start_statement() {
        Ok(mut snapshot) => {
            let r = f(s, &mut snapshot);
            drop(snapshot);
            r
        }
        Err(e) => Err(e.into()),
    };
    finish(s, result)
}

/// A statement that reads no table data: refused in a failed block like
/// any other, but holds no snapshot while it runs (VACUUM must not hold
/// back the horizon it cleans up to).
fn utility(
    s: &mut Session,
    f: impl FnOnce(&mut Session) -> Result<StatementResult, SqlError>,
) -> Result<StatementResult, SqlError> {
    let result = match s.start_statement() {
        Ok(snapshot) => {
            drop(snapshot);
            f(s)
        }
        Err(e) => Err(e.into()),
    };
    finish(s, result)
}

/// [`utility`] for a statement that reads a table: `f` gets the
/// statement's snapshot.
fn with_snapshot(
    s: &mut Session,
    f: impl FnOnce(&mut Session, &crate::txn::Snapshot) -> Result<StatementResult, SqlError>,
) -> Result<StatementResult, SqlError> {
    let result = match s.start_statement() {
        Ok(snapshot) => f(s, snapshot.get()),
        Err(e) => Err(e.into()),
    };
    finish(s, result)
}

/// The leading keywords of a statement, to name it when refusing it.
fn statement_kind(st: &Statement) -> String {
    let text = st.to_string();
    let words: Vec<&str> = text
        .split_whitespace()
        .take(3)
        .take_while(|w| w.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        .collect();
    if words.is_empty() {
        "this statement".into()
    } else {
        words.join(" ")
    }
}

/// Runs one parsed statement.
pub(crate) fn run(
    s: &mut Session,
    parsed: &Parsed,
    io: &mut StatementIo,
) -> Result<StatementResult, SqlError> {
    run_with(s, parsed, io, Placeholders::default())
}

/// Runs one parsed statement with its placeholders' values.
pub(crate) fn run_with(
    s: &mut Session,
    parsed: &Parsed,
    io: &mut StatementIo,
    placeholders: Placeholders,
) -> Result<StatementResult, SqlError> {
    if runs_outside_blocks(parsed) {
        // The implicit transaction's statements so far commit first; this
        // one runs in a transaction of its own (Session::require_no_block).
        s.commit_implicit()?;
    }
    let result = dispatch(s, parsed, io, placeholders);
    let ends_block = matches!(
        &parsed.statement,
        Stmt::Ast(st) if matches!(**st, Statement::Commit { .. } | Statement::Rollback { .. })
    );
    if result.is_err() && !ends_block {
        end_failed(s);
    }
    result
}

/// Whether `parsed` is a statement that must run in a transaction of its
/// own, outside any block (each calls `Session::require_no_block` as it
/// starts): VACUUM, as in PostgreSQL, and, as limits of this engine,
/// CREATE INDEX, ALTER TABLE, DROP TABLE, DROP INDEX and the role
/// statements. Told before it starts, so that an implicit transaction
/// can commit the statements before it first.
fn runs_outside_blocks(parsed: &Parsed) -> bool {
    match &parsed.statement {
        Stmt::VacuumAnalyze(_) => true,
        Stmt::Checkpoint => false,
        Stmt::Ast(statement) => match &**statement {
            Statement::Vacuum(_)
            | Statement::CreateIndex(_)
            | Statement::AlterTable(_)
            | Statement::CreateRole(_)
            | Statement::AlterRole { .. } => true,
            Statement::Drop { object_type, .. } => matches!(
                object_type,
                ObjectType::Table | ObjectType::Index | ObjectType::Role | ObjectType::User
            ),
            _ => false,
        },
    }
}

/// After a statement that failed: one refused before it started (an
/// unsupported form) fails a transaction block like any other error. For
/// one that already ended, this changes nothing: outside a block there is
/// no transaction left, inside one it is already marked failed.
pub(crate) fn end_failed(s: &mut Session) {
    if let Err(e) = s.end_statement(false) {
        log::error!("could not end a failed statement: {e}");
    }
}

/// Runs a query or data change that `f` plans and runs with
/// [`run_plan`], as [`run_with`] runs one it plans itself: in the
/// statement bracket, with the statement's snapshot (a prepared
/// statement's kept plan).
pub(crate) fn run_planned(
    s: &mut Session,
    f: impl FnOnce(&mut Session, &mut StatementSnapshot) -> Result<StatementResult, SqlError>,
) -> Result<StatementResult, SqlError> {
    let result = in_statement(s, f);
    if result.is_err() {
        end_failed(s);
    }
    result
}

/// [`run_planned`] for a statement that may outlive this call (a portal
/// suspended at its row limit): `f` owns the statement's snapshot, to
/// keep it with what it suspends.
pub(crate) fn run_planned_owning<R>(
    s: &mut Session,
    f: impl FnOnce(&mut Session, StatementSnapshot) -> Result<R, SqlError>,
) -> Result<R, SqlError> {
    let result = match s.start_statement() {
        Ok(snapshot) => f(s, snapshot),
        Err(e) => Err(e.into()),
    };
    let result = finish(s, result);
    if result.is_err() {
        end_failed(s);
    }
    result
}

/// Runs `plan`, a query's or a data change's, with `bound`'s parameters,
/// sending a query's rows to `io`'s row sink if it has one.
pub(crate) fn run_plan(
    s: &mut Session,
    snapshot: &mut StatementSnapshot,
    plan: &mut Plan,
    columns: Vec<ResultColumn>,
    io: &mut StatementIo,
    bound: exec::Bound,
) -> Result<StatementResult, SqlError> {
    let sink = match plan {
        Plan::Query(_) => io.rows.as_deref_mut(),
        _ => None,
    };
    let streamed = sink.is_some();
    let outcome = match sink {
        None => exec::execute_bound(plan, s, snapshot, exec::Rows::Collect, bound)?,
        Some(sink) => stream_rows(s, snapshot, plan, &columns, sink, bound)?,
    };
    let tag = match plan {
        Plan::Query(_) => format!("SELECT {}", outcome.count),
        Plan::Insert(_) => format!("INSERT 0 {}", outcome.count),
        Plan::Update(_) => format!("UPDATE {}", outcome.count),
        Plan::Delete(_) => format!("DELETE {}", outcome.count),
    };
    Ok(StatementResult {
        tag,
        columns,
        rows: outcome.rows,
        streamed,
        notices: Vec::new(),
    })
}

/// The time `now()` and `CURRENT_TIMESTAMP` give the statement, as a
/// timestamp (UTC; there are no time zones): its transaction block's
/// start, or else now, as the statement's own transaction starts with it.
pub(crate) fn statement_time(s: &Session) -> i64 {
    let at = s
        .transaction_start()
        .unwrap_or_else(std::time::SystemTime::now);
    let unix_usecs = match at.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_micros()).unwrap_or(i64::MAX),
    };
    crate::types::datetime::timestamp_from_unix_usecs(unix_usecs)
}

/// The planning context of statement `parsed` in session `s`.
pub(crate) fn statement_cx(s: &Session, parsed: &Parsed, placeholders: Placeholders) -> StmtCx {
    StmtCx {
        number: parsed.number,
        start: parsed.start,
        viewer: s.current_xid(),
        now: statement_time(s),
        joins: s.settings.join_methods(),
        join_collapse_limit: s.settings.join_collapse_limit(),
        scans: s.settings.scan_methods(),
        costs: s.settings.costs(),
        subplans: Default::default(),
        // A generic plan's placeholders are its first parameters.
        params: std::cell::Cell::new(placeholders.params_taken()),
        subquery_depth: Default::default(),
        placeholders,
        fixed_for_run: Default::default(),
        snapshot_xmin: s.snapshot_xmin_bound(),
    }
}

fn dispatch(
    s: &mut Session,
    parsed: &Parsed,
    io: &mut StatementIo,
    placeholders: Placeholders,
) -> Result<StatementResult, SqlError> {
    let cx = statement_cx(s, parsed, placeholders);
    let statement = match &parsed.statement {
        Stmt::Checkpoint => {
            return utility(s, |s| {
                s.db().checkpoint(false)?;
                Ok(StatementResult::tag("CHECKPOINT"))
            });
        }
        Stmt::Ast(statement) => &**statement,
        Stmt::VacuumAnalyze(statement) => {
            let Statement::Vacuum(v) = &**statement else {
                return Err(cx.unsupported(statement.span(), statement_kind(statement)));
            };
            let table = vacuum_table(&cx, statement, v)?;
            return io.with_progress(|progress| {
                utility(s, |s| {
                    let vacuumed = vacuum(&cx, s, table, progress)?;
                    // Sampled as the table is after the vacuum, with a
                    // snapshot the vacuum did not have to respect (VACUUM
                    // runs in no transaction block, so there are no own
                    // rows to see).
                    let snapshot = s.db().txn().snapshot(None, 0);
                    let analyzed = analyze(&cx, s, snapshot.snapshot(), table, progress)?;
                    Ok(StatementResult {
                        notices: [vacuumed.notices, analyzed.notices].concat(),
                        ..StatementResult::tag("VACUUM")
                    })
                })
            });
        }
    };
    match statement {
        Statement::StartTransaction {
            modes,
            begin: spelled_begin,
            modifier,
            statements,
            exception,
            has_end_keyword,
            ..
        } => {
            if modifier.is_some()
                || !statements.is_empty()
                || exception.is_some()
                || *has_end_keyword
            {
                return Err(cx.unsupported(statement.span(), "this form of BEGIN"));
            }
            // PostgreSQL tags the statement with its own spelling.
            let tag = if *spelled_begin {
                "BEGIN"
            } else {
                "START TRANSACTION"
            };
            begin(&cx, s, statement, modes, tag)
        }
        Statement::Commit {
            chain,
            end: _,
            modifier,
        } => {
            if *chain || modifier.is_some() {
                return Err(cx.unsupported(statement.span(), "COMMIT AND CHAIN"));
            }
            // PostgreSQL commits an implicit transaction, and warns.
            let implicit = s.in_implicit_transaction();
            match s.commit() {
                Ok(true) if implicit => {
                    Ok(with_notice("COMMIT", "there is no transaction in progress"))
                }
                Ok(true) => Ok(StatementResult::tag("COMMIT")),
                // A failed block can only roll back, and says so.
                Ok(false) => Ok(StatementResult::tag("ROLLBACK")),
                Err(XactError::NotInProgress) => {
                    Ok(with_notice("COMMIT", "there is no transaction in progress"))
                }
                Err(e) => Err(e.into()),
            }
        }
        Statement::Rollback { chain, savepoint } => {
            if savepoint.is_some() {
                return Err(cx.unsupported(statement.span(), "savepoints"));
            }
            if *chain {
                return Err(cx.unsupported(statement.span(), "ROLLBACK AND CHAIN"));
            }
            let implicit = s.in_implicit_transaction();
            match s.rollback() {
                Ok(()) if implicit => Ok(with_notice(
                    "ROLLBACK",
                    "there is no transaction in progress",
                )),
                Ok(()) => Ok(StatementResult::tag("ROLLBACK")),
                Err(XactError::NotInProgress) => Ok(with_notice(
                    "ROLLBACK",
                    "there is no transaction in progress",
                )),
                Err(e) => Err(e.into()),
            }
        }
        Statement::Query(_)
        | Statement::Insert(_)
        | Statement::Update(_)
        | Statement::Delete(_) => in_statement(s, |s, snapshot| {
            let (mut plan, columns) = plan_locked(&cx, s, snapshot, statement)?;
            run_plan(s, snapshot, &mut plan, columns, io, exec::Bound::default())
        }),
        Statement::Copy { .. } => {
            in_statement(s, |s, snapshot| copy(&cx, s, snapshot, io, statement))
        }
        Statement::Explain {
            describe_alias,
            analyze,
            verbose,
            query_plan,
            estimate,
            statement: inner,
            format,
            options,
        } => {
            if *describe_alias != DescribeAlias::Explain || *query_plan || *estimate {
                return Err(cx.unsupported(statement.span(), "this form of EXPLAIN"));
            }
            if *verbose {
                return Err(cx.unsupported(statement.span(), "EXPLAIN VERBOSE"));
            }
            if format.is_some() {
                return Err(cx.unsupported(statement.span(), "EXPLAIN FORMAT"));
            }
            let opts =
                explain_options(&cx, statement, *analyze, options.as_deref().unwrap_or(&[]))?;
            let rows = io.explained_rows.as_deref_mut();
            in_statement(s, |s, snapshot| {
                explain(&cx, s, snapshot, inner, &opts, rows)
            })
        }
        Statement::CreateIndex(ci) => io.with_progress(|progress| {
            utility(s, |s| super::ddl::create_index(&cx, s, ci, progress))
        }),
        Statement::AlterTable(at) => io.with_progress(|progress| {
            utility(s, |s| super::ddl::alter_table(&cx, s, at, progress))
        }),
        Statement::CreateRole(cr) => {
            utility(s, |s| super::roles::create_role(&cx, s, statement, cr))
        }
        Statement::AlterRole { name, operation } => utility(s, |s| {
            super::roles::alter_role(&cx, s, statement, name, operation)
        }),
        Statement::CreateTable(ct) => {
            in_statement(s, |s, snapshot| create_table(&cx, s, snapshot, ct))
        }
        Statement::Drop {
            object_type,
            if_exists,
            names,
            cascade,
            restrict: _,
            purge,
            temporary,
            table,
        } => {
            if *cascade || *purge || *temporary || table.is_some() {
                return Err(
                    cx.unsupported(statement.span(), format!("this form of DROP {object_type}"))
                );
            }
            match object_type {
                ObjectType::Table => utility(s, |s| drop_tables(&cx, s, names, *if_exists)),
                ObjectType::Index => {
                    utility(s, |s| super::ddl::drop_indexes(&cx, s, names, *if_exists))
                }
                ObjectType::Role | ObjectType::User => {
                    utility(s, |s| super::roles::drop_roles(&cx, s, names, *if_exists))
                }
                _ => Err(cx.unsupported(statement.span(), format!("DROP {object_type}"))),
            }
        }
        Statement::Set(set) => {
            let Set::SingleAssignment {
                scope,
                hivevar,
                variable,
                values,
            } = set
            else {
                return Err(cx.unsupported(Span::empty(), statement_kind(statement)));
            };
            match scope {
                None | Some(ast::ContextModifier::Session) => {}
                Some(_) => {
                    return Err(cx.unsupported_hint(
                        statement.span(),
                        "SET LOCAL / GLOBAL",
                        "; SET applies to the session",
                    ))
                }
            }
            if *hivevar {
                return Err(cx.unsupported(statement.span(), "this form of SET"));
            }
            let name = object_name(&cx, variable)?;
            let value = match values.as_slice() {
                [v] => setting_value(v),
                _ => None,
            };
            let Some(value) = value else {
                return Err(cx.unsupported_hint(
                    statement.span(),
                    "this value for SET",
                    "; give one number, word or quoted string",
                ));
            };
            utility(s, |s| {
                if value.eq_ignore_ascii_case("default") {
                    reset_settings(s, &[name])?;
                } else {
                    s.settings.set_session(&name, &value)?;
                    s.settings_changed();
                }
                Ok(StatementResult::tag("SET"))
            })
        }
        Statement::ShowVariable { variable } => {
            let words: Vec<String> = variable.iter().map(ident).collect();
            // PostgreSQL's spelling of SHOW transaction_isolation.
            if words == ["transaction", "isolation", "level"] {
                return utility(s, |s| show(s, TRANSACTION_ISOLATION));
            }
            let [name] = variable.as_slice() else {
                return Err(cx.unsupported(
                    statement.span(),
                    format!(
                        "SHOW {}",
                        variable
                            .iter()
                            .map(|v| v.value.as_str())
                            .collect::<Vec<_>>()
                            .join(" ")
                    ),
                ));
            };
            let name = ident(name);
            utility(s, |s| show(s, &name))
        }
        Statement::Reset(ResetStatement { reset }) => {
            let names: Vec<String> = match reset {
                Reset::ALL => SETTINGS
                    .iter()
                    .filter(|d| d.context == Context::Session)
                    .map(|d| d.name.to_string())
                    .collect(),
                Reset::ConfigurationParameter(name) => vec![object_name(&cx, name)?],
                Reset::SessionAuthorization => {
                    return Err(cx.unsupported(statement.span(), "RESET SESSION AUTHORIZATION"))
                }
            };
            utility(s, |s| {
                reset_settings(s, &names)?;
                Ok(StatementResult::tag("RESET"))
            })
        }
        Statement::Truncate(t) => {
            let ast::Truncate {
                table_names,
                partitions,
                table: _,
                if_exists,
                identity: _,
                cascade: _,
                on_cluster,
            } = t;
            // RESTART IDENTITY, CASCADE and ONLY change nothing here: no
            // table has identity columns, foreign keys or children.
            if partitions.is_some() || *if_exists || on_cluster.is_some() {
                return Err(cx.unsupported(statement.span(), "this form of TRUNCATE"));
            }
            in_statement(s, |s, snapshot| {
                let mut tables = Vec::with_capacity(table_names.len());
                for target in table_names {
                    let name = object_name(&cx, &target.name)?;
                    if !tables
                        .iter()
                        .any(|t: &Arc<crate::catalog::TableDef>| t.name() == name)
                    {
                        tables.push(locked_table(&cx, s, &name, LockMode::AccessExclusive)?);
                    }
                }
                exec::truncate(s, snapshot, &tables)?;
                Ok(StatementResult::tag("TRUNCATE TABLE"))
            })
        }
        Statement::Vacuum(v) => {
            let table = vacuum_table(&cx, statement, v)?;
            io.with_progress(|progress| utility(s, |s| vacuum(&cx, s, table, progress)))
        }
        Statement::Analyze(a) => {
            let ast::Analyze {
                has_table_keyword,
                table_name,
                for_columns,
                columns,
                partitions,
                cache_metadata,
                noscan,
                compute_statistics,
            } = a;
            if *has_table_keyword
                || *for_columns
                || !columns.is_empty()
                || partitions.is_some()
                || *cache_metadata
                || *noscan
                || *compute_statistics
            {
                return Err(cx.unsupported_hint(
                    statement.span(),
                    "this form of ANALYZE",
                    "; use ANALYZE or ANALYZE table (every column is analysed)",
                ));
            }
            io.with_progress(|progress| {
                with_snapshot(s, |s, snapshot| {
                    analyze(&cx, s, snapshot, table_name.as_ref(), progress)
                })
            })
        }
        other => Err(cx.unsupported(Span::empty(), statement_kind(other))),
    }
}

/// The table a VACUUM names, if any; refuses the forms it does not run.
fn vacuum_table<'a>(
    cx: &StmtCx,
    statement: &Statement,
    v: &'a ast::VacuumStatement,
) -> Result<Option<&'a ast::ObjectName>, SqlError> {
    let ast::VacuumStatement {
        full,
        sort_only,
        delete_only,
        reindex,
        recluster,
        table_name,
        threshold,
        boost,
    } = v;
    if *full {
        return Err(cx.unsupported_hint(statement.span(), "VACUUM FULL", "; use VACUUM"));
    }
    if *sort_only || *delete_only || *reindex || *recluster || threshold.is_some() || *boost {
        return Err(cx.unsupported(statement.span(), "this form of VACUUM"));
    }
    Ok(table_name.as_ref())
}

/// Puts the session's settings `names` back to the database's values
/// (RESET, SET … TO DEFAULT).
fn reset_settings(s: &mut Session, names: &[String]) -> Result<(), SqlError> {
    let db = s.db().clone();
    for name in names {
        s.settings.reset_session(name, db.settings())?;
    }
    s.settings_changed();
    Ok(())
}

/// Runs the query `plan`, sending its rows to `sink` as they come.
fn stream_rows(
    s: &mut Session,
    snapshot: &mut StatementSnapshot,
    plan: &mut Plan,
    columns: &[ResultColumn],
    sink: &mut dyn RowSink,
    bound: exec::Bound,
) -> Result<exec::Outcome, SqlError> {
    let output_failed = |e: std::io::Error| ExecError::ResultOutput {
        message: e.to_string(),
    };
    sink.begin(columns).map_err(output_failed)?;
    let mut send = |rows: &mut Vec<Vec<Value>>| sink.rows(rows);
    let outcome = exec::execute_bound(plan, s, snapshot, exec::Rows::Stream(&mut send), bound);
    let ended = sink.end(outcome.as_ref().ok().map(|o| o.count));
    // The query's own error first: a failed end after it changes nothing.
    let outcome = outcome?;
    ended.map_err(output_failed)?;
    Ok(outcome)
}

fn with_notice(tag: &str, notice: &str) -> StatementResult {
    StatementResult {
        notices: vec![format!("WARNING: {notice}")],
        ..StatementResult::tag(tag)
    }
}

fn begin(
    cx: &StmtCx,
    s: &mut Session,
    statement: &Statement,
    modes: &[TransactionMode],
    tag: &str,
) -> Result<StatementResult, SqlError> {
    let mut isolation = Isolation::ReadCommitted;
    for mode in modes {
        match mode {
            // PostgreSQL runs READ UNCOMMITTED as READ COMMITTED, too.
            TransactionMode::IsolationLevel(
                TransactionIsolationLevel::ReadCommitted
                | TransactionIsolationLevel::ReadUncommitted,
            ) => isolation = Isolation::ReadCommitted,
            TransactionMode::IsolationLevel(TransactionIsolationLevel::RepeatableRead) => {
                isolation = Isolation::RepeatableRead
            }
            TransactionMode::IsolationLevel(level) => {
                return Err(cx.unsupported_hint(
                    statement.span(),
                    format!("ISOLATION LEVEL {level}"),
                    "; use REPEATABLE READ or READ COMMITTED",
                ))
            }
            TransactionMode::AccessMode(TransactionAccessMode::ReadWrite) => {}
            TransactionMode::AccessMode(TransactionAccessMode::ReadOnly) => {
                return Err(cx.unsupported(statement.span(), "READ ONLY transactions"))
            }
        }
    }
    match s.begin(isolation) {
        Ok(()) => Ok(StatementResult::tag(tag)),
        Err(XactError::AlreadyInProgress) => Ok(with_notice(
            tag,
            "there is already a transaction in progress",
        )),
        Err(e) => Err(e.into()),
    }
}

/// How many times a statement is planned again because a table it uses
/// was dropped or truncated between its planning and its lock (each
/// attempt holds the locks of the tables it found, so only a table
/// created again and again under that name could use them all up).
const REPLAN_ATTEMPTS: usize = 4;

/// Plans `statement` and locks the tables the plan uses, planning again
/// (with a new read committed snapshot) if one of them changed while its
/// lock was waited for: the plan returned is made for the tables as they
/// are under the locks, and after a wait the snapshot is taken again, as
/// PostgreSQL takes a statement's snapshot after its locks.
pub(crate) fn plan_locked(
    cx: &StmtCx,
    s: &mut Session,
    snapshot: &mut StatementSnapshot,
    statement: &Statement,
) -> Result<(Plan, Vec<ResultColumn>), SqlError> {
    let db = s.db().clone();
    let mut attempts = 0;
    loop {
        let generation = db.catalog().generation();
        let planned = plan_statement(cx, &db, statement)?;
        match exec::lock_plan_tables(s, &planned.0) {
            Err(ExecError::TableDropped(_)) if attempts < REPLAN_ATTEMPTS => {
                attempts += 1;
                s.retake_snapshot(snapshot);
            }
            Ok(waited) => {
                if waited {
                    // What the holder committed meanwhile (a TRUNCATE's
                    // new rows, shown by the catalog before the wait) is
                    // read.
                    s.retake_snapshot(snapshot);
                }
                // An index dropped or made between planning and the locks
                // (with or without a wait) is planned for: the plan may
                // name a removed index.
                if db.catalog().generation() != generation && attempts < REPLAN_ATTEMPTS {
                    attempts += 1;
                    continue;
                }
                return Ok(planned);
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Plans a statement the executor runs, with the columns it returns.
pub(crate) fn plan_statement(
    cx: &StmtCx,
    db: &crate::database::Database,
    statement: &Statement,
) -> Result<(Plan, Vec<ResultColumn>), SqlError> {
    Ok(match statement {
        Statement::Query(q) => {
            let planned = plan_query(cx, db, q)?;
            (Plan::Query(planned.query), planned.columns)
        }
        Statement::Insert(i) => {
            let (plan, columns) = plan_insert(cx, db, i)?;
            (Plan::Insert(plan), columns)
        }
        Statement::Update(u) => {
            let (plan, columns) = plan_update(cx, db, u)?;
            (Plan::Update(plan), columns)
        }
        Statement::Delete(d) => {
            let (plan, columns) = plan_delete(cx, db, d)?;
            (Plan::Delete(plan), columns)
        }
        other => {
            return Err(cx.unsupported(
                Span::empty(),
                format!("EXPLAIN of {}", statement_kind(other)),
            ))
        }
    })
}

/// The text a SET value stands for.
fn setting_value(e: &ast::Expr) -> Option<String> {
    match constant(e) {
        Some(Value::Boolean(b)) => return Some(if b { "on" } else { "off" }.into()),
        Some(Value::Null) => return None,
        Some(Value::Text(t)) => return Some(t),
        Some(_) => return Some(e.to_string()),
        None => {}
    }
    match e {
        ast::Expr::Identifier(i) => Some(i.value.clone()),
        _ => None,
    }
}

/// The read-only setting that reports the transaction's isolation: not a
/// session setting (BEGIN ISOLATION LEVEL sets it), so it is answered here.
pub(crate) const TRANSACTION_ISOLATION: &str = "transaction_isolation";
/// The columns of `SHOW ALL`.
pub(crate) const SHOW_ALL_COLUMNS: [&str; 4] = ["name", "setting", "source", "description"];

fn isolation_name(isolation: Isolation) -> &'static str {
    match isolation {
        Isolation::ReadCommitted => "read committed",
        Isolation::RepeatableRead => "repeatable read",
    }
}

fn show(s: &mut Session, name: &str) -> Result<StatementResult, SqlError> {
    if name == "all" {
        let mut rows: Vec<Vec<Value>> = s
            .settings
            .rows()
            .into_iter()
            .map(|(def, value, source)| {
                vec![
                    Value::Text(def.name.to_string()),
                    Value::Text(crate::config::format_value(def, value)),
                    Value::Text(source.to_string()),
                    Value::Text(def.description.to_string()),
                ]
            })
            .collect();
        rows.push(vec![
            Value::Text(TRANSACTION_ISOLATION.to_string()),
            Value::Text(isolation_name(s.isolation()).to_string()),
            Value::Text("transaction".to_string()),
            Value::Text(
                "the current transaction's isolation level (BEGIN ISOLATION LEVEL sets it)"
                    .to_string(),
            ),
        ]);
        let column = |name: &str| ResultColumn {
            name: name.into(),
            ty: ColumnType::Text,
        };
        return Ok(StatementResult {
            tag: "SHOW".into(),
            columns: SHOW_ALL_COLUMNS.into_iter().map(column).collect(),
            rows,
            ..Default::default()
        });
    }
    let value = if name.eq_ignore_ascii_case(TRANSACTION_ISOLATION) {
        isolation_name(s.isolation()).to_string()
    } else {
        s.settings.show(name)?.0
    };
    Ok(StatementResult {
        tag: "SHOW".into(),
        columns: vec![ResultColumn {
            name: name.to_string(),
            ty: ColumnType::Text,
        }],
        rows: vec![vec![Value::Text(value)]],
        ..Default::default()
    })
}
