//! Prepared statements, for the extended query protocol: a statement is
//! parsed and described once (its parameters' types and its result's
//! columns), then run any number of times with values for its `$n`
//! parameters.
//!
//! # Plans: custom, then perhaps generic
//!
//! A query or data change (SELECT, INSERT, UPDATE, DELETE) chooses its
//! plan as PostgreSQL's plan cache does (`plancache.c`,
//! `choose_custom_plan`). Its first [`CUSTOM_PLANS_FIRST`] runs are each
//! planned with their values bound (custom plans: `$1` is a constant).
//! The next run plans it once without values (the generic plan: `$1` is
//! the executor's parameter 0, read at each run, so an index scan on
//! `aid = $1` searches for each run's value) and keeps that plan if it
//! costs no more than the custom plans did on average, plus what
//! planning them cost; otherwise every run is planned with its values.
//!
//! ```text
//! Custom { runs < 5 } ──run──▶ Custom { runs + 1 }
//! Custom { runs = 5 } ──generic plan kept──▶ Generic ──catalog or settings moved──▶ Custom { 0 }
//!                     └─costlier, or for one run only──▶ CustomOnly ──catalog moved──▶ Custom { 0 }
//! ```
//!
//! A kept plan runs again for each Execute: its nodes start over with
//! `rescan` (`exec::Bound::again`), so a plan that keeps something for
//! one statement is never kept (`exec::Plan::reusable`: a subquery's
//! InitPlan value, a view's rows), nor one whose planning fixed a value
//! for its run (`LIMIT $1`: `StmtCx::fixed_for_run`; `now()` is a
//! parameter of a generic plan, set at each run). It is
//! current while the catalog's generation (bumped as a table or index is
//! created or dropped) and the session's planner settings are those it
//! was planned with; otherwise it is dropped and the statement starts
//! over with custom plans. Its tables are held and checked for each run
//! by `exec::execute`, as any plan's: one dropped in between (the check
//! racing the generation) is planned again, as a dropped and recreated
//! table is simply found again by planning.
//!
//! Any other statement (SET, SHOW, EXPLAIN, COPY, DDL …) is planned, or
//! run, anew each time.

use std::cell::RefCell;

use sqlparser::ast::Statement;

use super::commands::{
    end_failed, plan_locked, plan_statement, run_plan, run_planned, run_planned_owning, run_with,
    statement_cx, statement_time, SHOW_ALL_COLUMNS, TRANSACTION_ISOLATION,
};
use super::expr::{ident, Placeholders};
use super::parse::{self, Parsed, Stmt};
use super::{ResultColumn, RowSink, SqlError, StatementIo, StatementResult};
use crate::config::{Costs, JoinMethods, ScanMethods};
use crate::database::{Session, StatementSnapshot, SuspendedId, SuspendedRun};
use crate::exec::portal::QueryRun;
use crate::exec::{self, ExecError, Plan, PlanNode};
use crate::types::{ColumnType, Value};

/// Runs planned with their values before a generic plan is tried
/// (PostgreSQL's five).
pub const CUSTOM_PLANS_FIRST: u32 = 5;

/// What planning a statement is taken to cost, in the planner's units,
/// per table it reads and one more, in `cpu_operator_cost`s: PostgreSQL's
/// `cached_plan_cost` allowance, which a generic plan may cost more than
/// the custom ones' average and still be kept, since it saves planning.
const PLANNING_COST_OPERATORS_PER_TABLE: f64 = 1000.0;

/// A statement parsed and described, ready to run with its parameters.
pub struct Prepared {
    parsed: Parsed,
    /// The type of each parameter (`$1` first): as the client gave it,
    /// else as its context in the statement implies, else text.
    pub param_types: Vec<ColumnType>,
    /// The result's columns if the statement returns rows (SELECT, SHOW,
    /// EXPLAIN), else empty.
    pub columns: Vec<ResultColumn>,
    /// How its runs are planned (see the module comment). A statement
    /// runs on its connection's thread, one run at a time.
    plans: RefCell<PlanCache>,
}

/// A prepared statement's plans: the states of the module comment's
/// diagram, whose moves are all in [`run_cached`].
enum PlanCache {
    /// Custom plans, `runs` of them so far, costing `cost_sum` in all.
    Custom { runs: u32, cost_sum: f64 },
    /// The generic plan, kept.
    Generic(Box<KeptPlan>),
    /// Custom plans for every run, decided with the catalog at
    /// `generation`: the generic plan cost more, or was not reusable.
    CustomOnly { generation: u64 },
}

impl PlanCache {
    fn start() -> PlanCache {
        PlanCache::Custom {
            runs: 0,
            cost_sum: 0.0,
        }
    }
}

/// A generic plan and what it was planned with.
struct KeptPlan {
    plan: Plan,
    /// The plan's tables and their lock modes, found once.
    locks: exec::TableLocks,
    columns: Vec<ResultColumn>,
    /// The catalog's generation read before planning it.
    generation: u64,
    settings: PlannerSettings,
    /// The version of the session's settings last found to hold
    /// `settings` (`config::Settings::version`): while it is the same
    /// they are not read again.
    settings_version: u64,
    /// It ran (the next run starts it over).
    ran: bool,
}

/// The session's settings that planning reads: a kept plan is current
/// only while they are unchanged.
#[derive(Debug, Clone, Copy, PartialEq)]
struct PlannerSettings {
    joins: JoinMethods,
    join_collapse_limit: usize,
    scans: ScanMethods,
    costs: Costs,
}

impl PlannerSettings {
    fn of(s: &Session) -> PlannerSettings {
        PlannerSettings {
            joins: s.settings.join_methods(),
            join_collapse_limit: s.settings.join_collapse_limit(),
            scans: s.settings.scan_methods(),
            costs: s.settings.costs(),
        }
    }
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("param_types", &self.param_types)
            .field("columns", &self.columns)
            .finish_non_exhaustive()
    }
}

/// Parses and describes `text`, one statement (or none: `Ok(None)`, an
/// empty query), whose parameters have the types in `declared` where
/// they are `Some` (a client may give some or none).
///
/// Describing plans the statement without running it, so it reports
/// what planning would: an unknown table or column, a type mismatch.
pub fn prepare(
    s: &mut Session,
    text: &str,
    declared: &[Option<ColumnType>],
) -> Result<Option<Prepared>, SqlError> {
    let mut statements = parse::parse(text)?;
    if statements.len() > 1 {
        return Err(SqlError::MultipleCommands);
    }
    let Some(parsed) = statements.pop() else {
        return Ok(None);
    };
    let placeholders = Placeholders::preparing(declared.to_vec());
    let cx = statement_cx(s, &parsed, placeholders);
    let db = s.db().clone();
    let columns = parse::with_stack_for_depth(parsed.depth, || match &parsed.statement {
        Stmt::Ast(st) => match &**st {
            Statement::Query(_)
            | Statement::Insert(_)
            | Statement::Update(_)
            | Statement::Delete(_) => plan_statement(&cx, &db, st).map(|(_, columns)| columns),
            Statement::ShowVariable { variable } => Ok(show_columns(variable)),
            Statement::Explain { .. } => Ok(vec![text_column("QUERY PLAN")]),
            _ => Ok(Vec::new()),
        },
        Stmt::Checkpoint | Stmt::VacuumAnalyze(_) => Ok(Vec::new()),
    })?;
    let param_types = cx.placeholders.resolved_types();
    Ok(Some(Prepared {
        parsed,
        param_types,
        columns,
        plans: RefCell::new(PlanCache::start()),
    }))
}

/// Runs `prepared` with `values` for its parameters (one per parameter,
/// of its type; [`Value::Null`] for NULL), in session `s`, as
/// [`super::execute_each`] runs a statement.
pub fn execute_prepared(
    s: &mut Session,
    prepared: &Prepared,
    values: Vec<Value>,
    io: &mut StatementIo,
) -> Result<StatementResult, SqlError> {
    if values.len() != prepared.param_types.len() {
        return Err(SqlError::ParameterCount {
            given: values.len(),
            expected: prepared.param_types.len(),
        });
    }
    parse::with_stack_for_depth(prepared.parsed.depth, || match &prepared.parsed.statement {
        Stmt::Ast(st)
            if matches!(
                **st,
                Statement::Query(_)
                    | Statement::Insert(_)
                    | Statement::Update(_)
                    | Statement::Delete(_)
            ) =>
        {
            run_planned(s, |s, snapshot| {
                run_cached(s, snapshot, prepared, st, &values, io)
            })
        }
        _ => {
            let placeholders = Placeholders::bound(prepared.param_types.clone(), values);
            run_with(s, &prepared.parsed, io, placeholders)
        }
    })
}

/// What a run with a row limit did ([`execute_prepared_limited`],
/// [`resume_limited`]).
pub enum Limited {
    /// The statement ended: its result, the tag counting the rows of this
    /// call (as PostgreSQL's portal reports each Execute). A query's rows
    /// went to the row sink; any other statement's rows are all here, for
    /// the caller to hand out a limit at a time (a change with RETURNING
    /// runs to its end at once, as PostgreSQL runs one).
    Ended(StatementResult),
    /// The query sent `limit` rows to the row sink and has more: the
    /// transaction keeps it as `id`, for [`resume_limited`].
    Suspended(SuspendedId),
}

/// Runs `prepared` with `values` as a portal with a row limit: a query
/// returns at most `limit` rows to `io`'s row sink and, if it has more,
/// is kept by the transaction to go on later (which must be open beyond
/// this statement: implicit or a block). A query so run is planned with
/// its values, never the kept generic plan: the suspended run owns its
/// plan tree (its nodes' state is the run's), and one prepared statement
/// may have several portals open.
pub fn execute_prepared_limited(
    s: &mut Session,
    prepared: &Prepared,
    values: Vec<Value>,
    io: &mut StatementIo,
    limit: u64,
) -> Result<Limited, SqlError> {
    let query = match &prepared.parsed.statement {
        Stmt::Ast(st) if matches!(**st, Statement::Query(_)) => st,
        _ => {
            // Rows kept whole, to be handed out a limit at a time.
            let sink = io.rows.take();
            let r = execute_prepared(s, prepared, values, io);
            io.rows = sink;
            return r.map(Limited::Ended);
        }
    };
    if values.len() != prepared.param_types.len() {
        return Err(SqlError::ParameterCount {
            given: values.len(),
            expected: prepared.param_types.len(),
        });
    }
    let Some(sink) = io.rows.as_deref_mut() else {
        panic!("a query run with a row limit sends its rows to a row sink");
    };
    if !s.in_transaction_block() && s.implicit().is_none() {
        return Err(SqlError::PortalOutsideTransaction);
    }
    parse::with_stack_for_depth(prepared.parsed.depth, || {
        run_planned_owning(s, |s, mut snapshot| {
            let placeholders = Placeholders::bound(prepared.param_types.clone(), values);
            let cx = statement_cx(s, &prepared.parsed, placeholders);
            let (plan, columns) = plan_locked(&cx, s, &mut snapshot, query)?;
            let run = QueryRun::start(plan, s, snapshot)?;
            fetch_limited(s, Box::new(run), columns, sink, limit)
        })
    })
}

/// Goes on with the query suspended as `id`, returning at most `limit`
/// more rows to `sink`: `None` if its transaction no longer holds it (it
/// ended, closing it). An error ends the statement as failed.
pub fn resume_limited(
    s: &mut Session,
    id: SuspendedId,
    sink: &mut dyn RowSink,
    limit: u64,
) -> Result<Option<Limited>, SqlError> {
    let Some(run) = s.resume(id) else {
        return Ok(None);
    };
    let run: Box<dyn std::any::Any> = run;
    let run = run
        .downcast::<QueryRun>()
        .expect("only queries are suspended by this module");
    match fetch_limited(s, run, Vec::new(), sink, limit) {
        Ok(r) => Ok(Some(r)),
        Err(e) => {
            end_failed(s);
            Err(e)
        }
    }
}

/// Fetches up to `limit` rows of `run` into `sink`, then suspends it with
/// the transaction if it has more.
fn fetch_limited(
    s: &mut Session,
    mut run: Box<QueryRun>,
    columns: Vec<ResultColumn>,
    sink: &mut dyn RowSink,
    limit: u64,
) -> Result<Limited, SqlError> {
    let output_failed = |e: std::io::Error| ExecError::ResultOutput {
        message: e.to_string(),
    };
    if let Err(e) = sink.begin(&columns) {
        run.close(s);
        return Err(output_failed(e).into());
    }
    let mut send = |rows: &mut Vec<Vec<Value>>| sink.rows(rows);
    let fetched = match run.fetch(s, limit, &mut send) {
        Ok(f) => f,
        Err(e) => {
            let _ = sink.end(None);
            return Err(e.into());
        }
    };
    if !fetched.ended {
        return Ok(Limited::Suspended(s.suspend(run)));
    }
    sink.end(Some(fetched.rows)).map_err(output_failed)?;
    Ok(Limited::Ended(StatementResult {
        tag: format!("SELECT {}", fetched.rows),
        columns,
        rows: Vec::new(),
        streamed: true,
        notices: Vec::new(),
    }))
}

/// Runs `statement`, a query or data change of `prepared`, with `values`,
/// choosing its plan (see the module comment): every move of
/// [`PlanCache`] is here.
fn run_cached(
    s: &mut Session,
    snapshot: &mut StatementSnapshot,
    prepared: &Prepared,
    statement: &Statement,
    values: &[Value],
    io: &mut StatementIo,
) -> Result<StatementResult, SqlError> {
    let mut plans = prepared.plans.borrow_mut();
    let generation = s.db().catalog().generation();
    let settings_version = s.settings.version();
    if let PlanCache::Generic(kept) = &mut *plans {
        if kept.settings_version != settings_version && kept.settings == PlannerSettings::of(s) {
            kept.settings_version = settings_version;
        }
    }
    match &mut *plans {
        PlanCache::Generic(kept)
            if kept.generation == generation && kept.settings_version == settings_version =>
        {
            if lock_kept(s, snapshot, &kept.locks, generation)? {
                let params = generic_params(s, values);
                let bound = exec::Bound {
                    params: &params,
                    again: std::mem::replace(&mut kept.ran, true),
                    tables_locked: true,
                };
                let columns = kept.columns.clone();
                return run_plan(s, snapshot, &mut kept.plan, columns, io, bound);
            }
            *plans = PlanCache::start();
        }
        PlanCache::Generic(_) => *plans = PlanCache::start(),
        PlanCache::CustomOnly { generation: then } if *then != generation => {
            *plans = PlanCache::start()
        }
        PlanCache::Custom { .. } | PlanCache::CustomOnly { .. } => {}
    }
    if let PlanCache::Custom { runs, cost_sum } = *plans {
        if runs >= CUSTOM_PLANS_FIRST {
            let average = cost_sum / f64::from(runs);
            let settings = PlannerSettings::of(s);
            match plan_generic(s, prepared, statement, average)
                .map(|(plan, columns)| (exec::TableLocks::of(&plan), plan, columns))
            {
                Some((locks, ..)) if !lock_kept(s, snapshot, &locks, generation)? => {
                    // Changed under the lock: the custom plan below.
                    *plans = PlanCache::start();
                }
                Some((locks, mut plan, columns)) => {
                    let params = generic_params(s, values);
                    let bound = exec::Bound {
                        params: &params,
                        again: false,
                        tables_locked: true,
                    };
                    let result = run_plan(s, snapshot, &mut plan, columns.clone(), io, bound);
                    *plans = PlanCache::Generic(Box::new(KeptPlan {
                        plan,
                        locks,
                        columns,
                        generation,
                        settings,
                        settings_version,
                        ran: true,
                    }));
                    return result;
                }
                None => *plans = PlanCache::CustomOnly { generation },
            }
        }
    }
    let placeholders = Placeholders::bound(prepared.param_types.clone(), values.to_vec());
    let cx = statement_cx(s, &prepared.parsed, placeholders);
    let (mut plan, columns) = plan_locked(&cx, s, snapshot, statement)?;
    if let PlanCache::Custom { runs, cost_sum } = &mut *plans {
        *runs += 1;
        *cost_sum += plan_cost(&plan);
    }
    drop(plans);
    run_plan(s, snapshot, &mut plan, columns, io, exec::Bound::default())
}

/// Locks a kept plan's tables (`locks`) for the statement: false if
/// the plan is no longer current (a table of it was dropped or truncated,
/// or the catalog changed while the lock was waited for, `generation`
/// being what it was planned at). After a wait the snapshot is taken
/// again, as for a statement planned anew (`plan_locked`).
fn lock_kept(
    s: &mut Session,
    snapshot: &mut StatementSnapshot,
    locks: &exec::TableLocks,
    generation: u64,
) -> Result<bool, SqlError> {
    match locks.take(s) {
        Err(ExecError::TableDropped(_)) => Ok(false),
        Err(e) => Err(e.into()),
        Ok(waited) => {
            if waited {
                s.retake_snapshot(snapshot);
            }
            // An index dropped since the generation was read, wait or
            // not, would leave the plan naming a removed file.
            Ok(s.db().catalog().generation() == generation)
        }
    }
}

/// A generic plan's parameters: `values`, then the statement's time
/// (`Placeholders::time_param`).
fn generic_params(s: &Session, values: &[Value]) -> Vec<Value> {
    let mut params = Vec::with_capacity(values.len() + 1);
    params.extend_from_slice(values);
    params.push(Value::Timestamp(statement_time(s)));
    params
}

/// The generic plan of `statement` (each `$n` an executor parameter), if
/// it may be kept: it is reusable, fixed no value for one run, and costs
/// at most `custom_average` and the planning that keeping it saves. A
/// generic plan that cannot be made (some form planned only with values)
/// is not kept either.
fn plan_generic(
    s: &Session,
    prepared: &Prepared,
    statement: &Statement,
    custom_average: f64,
) -> Option<(Plan, Vec<ResultColumn>)> {
    let db = s.db().clone();
    let placeholders = Placeholders::generic(prepared.param_types.clone());
    let cx = statement_cx(s, &prepared.parsed, placeholders);
    let (plan, columns) = plan_statement(&cx, &db, statement).ok()?;
    if cx.fixed_for_run.get() || !plan.reusable() {
        return None;
    }
    let tables = plan.tables().len() as f64;
    let planning = PLANNING_COST_OPERATORS_PER_TABLE * cx.costs.cpu_operator * (tables + 1.0);
    let cost = plan_cost(&plan);
    (cost <= custom_average + planning).then_some((plan, columns))
}

/// The planner's total cost of `plan`: of its topmost node that has an
/// estimate (a projection has none of its own).
fn plan_cost(plan: &Plan) -> f64 {
    fn cost(node: &dyn PlanNode) -> Option<f64> {
        match node.estimate() {
            Some(e) => Some(e.total),
            None => node.children().into_iter().find_map(cost),
        }
    }
    let root: &dyn PlanNode = match plan {
        Plan::Query(q) => q.root.as_ref(),
        Plan::Insert(i) => i.input.as_ref(),
        Plan::Update(u) => u.target.scan.as_ref(),
        Plan::Delete(d) => d.target.scan.as_ref(),
    };
    cost(root).unwrap_or(0.0)
}

fn text_column(name: &str) -> ResultColumn {
    ResultColumn {
        name: name.into(),
        ty: ColumnType::Text,
    }
}

/// The columns `SHOW` returns: the setting's value under its name, or
/// for `SHOW ALL` a row per setting.
fn show_columns(variable: &[sqlparser::ast::Ident]) -> Vec<ResultColumn> {
    let words: Vec<String> = variable.iter().map(ident).collect();
    if words == ["transaction", "isolation", "level"] {
        return vec![text_column(TRANSACTION_ISOLATION)];
    }
    match words.as_slice() {
        [all] if all == "all" => SHOW_ALL_COLUMNS.into_iter().map(text_column).collect(),
        [name] => vec![text_column(name)],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::database::test_session as session;
    use crate::sql::execute;

    #[test]
    fn parameters_take_their_types_from_context_and_run_with_values() {
        let (mut s, _dir) = session();
        execute(
            &mut s,
            "CREATE TABLE t (id integer, note varchar(10), at date);
             INSERT INTO t VALUES (1, 'a', '2024-01-01'), (2, 'b', NULL)",
        )
        .unwrap();
        let p = prepare(
            &mut s,
            "SELECT id, note FROM t WHERE id = $1 AND note <> $2",
            &[],
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            p.param_types,
            [ColumnType::Integer, ColumnType::Varchar(None)]
        );
        assert_eq!(
            p.columns
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>(),
            ["id", "note"]
        );
        let values = vec![Value::Integer(2), Value::Text("x".into())];
        let r = execute_prepared(&mut s, &p, values, &mut StatementIo::default()).unwrap();
        assert_eq!(r.rows, [vec![Value::Integer(2), Value::Text("b".into())]]);

        // An INSERT's parameters take the columns' types; one nothing
        // constrains is text; a type the client gives is kept.
        let p = prepare(&mut s, "INSERT INTO t VALUES ($1, $2, $3)", &[])
            .unwrap()
            .unwrap();
        assert_eq!(
            p.param_types,
            [
                ColumnType::Integer,
                ColumnType::Varchar(None),
                ColumnType::Date
            ]
        );
        assert!(p.columns.is_empty());
        // An operand of unknown type takes its IN list's or its bounds'.
        let p = prepare(
            &mut s,
            "SELECT id FROM t WHERE $1 IN (id, 3) AND $2 BETWEEN id AND 5 AND id BETWEEN $3 AND $4",
            &[],
        )
        .unwrap()
        .unwrap();
        assert_eq!(p.param_types, [ColumnType::Integer; 4]);
        let p = prepare(&mut s, "SELECT $1, $2", &[Some(ColumnType::BigInt)])
            .unwrap()
            .unwrap();
        assert_eq!(p.param_types, [ColumnType::BigInt, ColumnType::Text]);
        let r = execute_prepared(
            &mut s,
            &p,
            vec![Value::BigInt(7), Value::Null],
            &mut StatementIo::default(),
        )
        .unwrap();
        assert_eq!(r.rows, [vec![Value::BigInt(7), Value::Null]]);
    }

    /// A row sink that keeps what it is sent.
    #[derive(Default)]
    struct Kept(Vec<Vec<Value>>);

    impl RowSink for Kept {
        fn begin(&mut self, _: &[ResultColumn]) -> std::io::Result<()> {
            Ok(())
        }
        fn rows(&mut self, rows: &mut Vec<Vec<Value>>) -> std::io::Result<()> {
            self.0.append(rows);
            Ok(())
        }
        fn end(&mut self, _: Option<u64>) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Starts `p` as a portal with row limit `limit`, its rows kept in
    /// `kept`.
    fn open_limited(s: &mut Session, p: &Prepared, kept: &mut Kept, limit: u64) -> Limited {
        let mut io = StatementIo {
            rows: Some(kept),
            ..Default::default()
        };
        execute_prepared_limited(s, p, Vec::new(), &mut io, limit).unwrap()
    }

    fn ids(rows: &[Vec<Value>]) -> Vec<i32> {
        rows.iter()
            .map(|r| match r[0] {
                Value::Integer(i) => i,
                ref other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_suspended_portal_holds_its_pins_and_snapshot_until_its_transaction_ends() {
        let (mut s, _dir) = session();
        execute(
            &mut s,
            "CREATE TABLE t (id integer, pad text);
             INSERT INTO t SELECT i, repeat('x', 200) FROM generate_series(1, 2000) i",
        )
        .unwrap();
        let p = prepare(&mut s, "SELECT id FROM t", &[]).unwrap().unwrap();
        execute(&mut s, "BEGIN").unwrap();
        let mut kept = Kept::default();
        let Limited::Suspended(id) = open_limited(&mut s, &p, &mut kept, 10) else {
            panic!("2000 rows do not fit in 10");
        };
        assert_eq!(ids(&kept.0), (1..=10).collect::<Vec<_>>());
        assert!(s.holds_suspended());
        assert!(s.buf.pinned_count() > 0, "the scan's stream is kept");
        // Another session's commit cannot move the horizon past the
        // portal's snapshot, and the rows it deletes stay the portal's.
        let db = s.db().clone();
        let mut other = db.session().unwrap();
        execute(&mut other, "DELETE FROM t WHERE id > 100").unwrap();
        let held = db.txn().oldest_xmin();
        // Statements of the transaction run between its fetches.
        assert_eq!(
            rows_of(&mut s, "SELECT count(*) FROM t"),
            [[Value::BigInt(100)]]
        );
        let Some(Limited::Suspended(id)) = resume_limited(&mut s, id, &mut kept, 5).unwrap() else {
            panic!("more rows");
        };
        assert_eq!(ids(&kept.0), (1..=15).collect::<Vec<_>>());
        execute(&mut s, "COMMIT").unwrap();
        assert_eq!(
            s.buf.pinned_count(),
            0,
            "the transaction's end closed the run"
        );
        assert!(!s.holds_suspended());
        assert!(db.txn().oldest_xmin() > held, "the snapshot went with it");
        assert!(resume_limited(&mut s, id, &mut kept, 5).unwrap().is_none());
    }

    #[test]
    fn a_portal_fetched_to_its_end_or_closed_lets_go_of_what_it_held() {
        let (mut s, _dir) = session();
        execute(
            &mut s,
            "CREATE TABLE t (id integer);
             INSERT INTO t SELECT i FROM generate_series(1, 3000) i",
        )
        .unwrap();
        let p = prepare(&mut s, "SELECT id FROM t ORDER BY id DESC", &[])
            .unwrap()
            .unwrap();
        execute(&mut s, "BEGIN").unwrap();
        let mut kept = Kept::default();
        let Limited::Suspended(id) = open_limited(&mut s, &p, &mut kept, 1000) else {
            panic!("3000 rows do not fit in 1000");
        };
        let Some(Limited::Suspended(id)) = resume_limited(&mut s, id, &mut kept, 2000).unwrap()
        else {
            panic!("the last rows are not yet known to be the last");
        };
        // Exactly its rows were returned; the next fetch finds the end.
        let Some(Limited::Ended(r)) = resume_limited(&mut s, id, &mut kept, 10).unwrap() else {
            panic!("no rows are left");
        };
        assert_eq!(r.tag, "SELECT 0");
        assert_eq!(ids(&kept.0), (1..=3000).rev().collect::<Vec<_>>());
        assert!(!s.holds_suspended());
        // One closed before its end gives back its pins at once.
        let scan = prepare(&mut s, "SELECT id FROM t", &[]).unwrap().unwrap();
        let Limited::Suspended(id) = open_limited(&mut s, &scan, &mut Kept::default(), 1) else {
            panic!("3000 rows do not fit in 1");
        };
        assert!(s.buf.pinned_count() > 0);
        s.close_suspended(id);
        assert_eq!(s.buf.pinned_count(), 0);
        assert!(!s.holds_suspended());
        execute(&mut s, "COMMIT").unwrap();
    }

    #[test]
    fn an_error_partway_through_a_portal_fails_its_transaction() {
        let (mut s, _dir) = session();
        let p = prepare(
            &mut s,
            "SELECT i FROM generate_series(1, 100) i WHERE 10 / (i - 50) <> 0 OR i > 0",
            &[],
        )
        .unwrap()
        .unwrap();
        execute(&mut s, "BEGIN").unwrap();
        let mut kept = Kept::default();
        // The rows past the limit are not computed: the division by zero
        // at row 50 is not met by the first fetch.
        let Limited::Suspended(id) = open_limited(&mut s, &p, &mut kept, 10) else {
            panic!("100 rows do not fit in 10");
        };
        assert_eq!(ids(&kept.0), (1..=10).collect::<Vec<_>>());
        let e = resume_limited(&mut s, id, &mut kept, 100).err().unwrap();
        assert_eq!(e.sqlstate(), "22012", "{e}");
        assert_eq!(
            s.transaction_status(),
            crate::database::TransactionStatus::Failed
        );
        assert!(!s.holds_suspended());
        assert_eq!(s.buf.pinned_count(), 0);
        execute(&mut s, "ROLLBACK").unwrap();
    }

    /// Runs `p` with `values`, its rows.
    fn run(s: &mut Session, p: &Prepared, values: Vec<Value>) -> Vec<Vec<Value>> {
        execute_prepared(s, p, values, &mut StatementIo::default())
            .unwrap()
            .rows
    }

    /// The rows of `text`, planned with its values in it.
    fn rows_of(s: &mut Session, text: &str) -> Vec<Vec<Value>> {
        execute(s, text).unwrap().pop().unwrap().rows
    }

    /// The titles of the kept plan's nodes (EXPLAIN's), or `None` if no
    /// plan is kept.
    fn kept_plan(p: &Prepared) -> Option<Vec<String>> {
        fn walk(node: &dyn PlanNode, out: &mut Vec<String>) {
            if let Some(d) = node.describe(&Default::default()) {
                out.push(d.title);
            }
            for child in node.children() {
                walk(child, out);
            }
        }
        let plans = p.plans.borrow();
        let PlanCache::Generic(kept) = &*plans else {
            return None;
        };
        let mut titles = Vec::new();
        match &kept.plan {
            Plan::Query(q) => walk(q.root.as_ref(), &mut titles),
            Plan::Insert(i) => walk(i.input.as_ref(), &mut titles),
            Plan::Update(u) => walk(u.target.scan.as_ref(), &mut titles),
            Plan::Delete(d) => walk(d.target.scan.as_ref(), &mut titles),
        }
        Some(titles)
    }

    #[test]
    fn a_kept_plan_runs_with_each_runs_values_as_a_custom_plan_would() {
        let (mut s, _dir) = session();
        execute(
            &mut s,
            "CREATE TABLE t (id integer PRIMARY KEY, v integer, note text);
             INSERT INTO t SELECT g, g % 7, 'n' || g FROM generate_series(1, 2000) g;
             ANALYZE t",
        )
        .unwrap();
        let p = prepare(&mut s, "SELECT v, note FROM t WHERE id = $1", &[])
            .unwrap()
            .unwrap();
        for id in 1..=CUSTOM_PLANS_FIRST as i32 {
            run(&mut s, &p, vec![Value::Integer(id)]);
            assert!(kept_plan(&p).is_none(), "custom plans first");
        }
        for id in [5, 1999, 0, 2001, 77, 77] {
            let rows = run(&mut s, &p, vec![Value::Integer(id)]);
            let titles = kept_plan(&p).expect("the generic plan is kept");
            assert!(titles[0].starts_with("Index Scan"), "{titles:?}");
            let expected = rows_of(&mut s, &format!("SELECT v, note FROM t WHERE id = {id}"));
            assert_eq!(rows, expected, "id {id}");
        }
        let rows = run(&mut s, &p, vec![Value::Null]);
        assert!(rows.is_empty());

        // A range, an IN list, a data change: each kept, each run as its
        // custom plan runs.
        let p = prepare(
            &mut s,
            "SELECT id FROM t WHERE id BETWEEN $1 AND $2 AND v IN ($3, 2) ORDER BY id",
            &[],
        )
        .unwrap()
        .unwrap();
        for (lo, hi, v) in [(1, 30, 1), (5, 9, 3), (100, 140, 6), (40, 10, 1)].repeat(3) {
            let rows = run(
                &mut s,
                &p,
                vec![Value::Integer(lo), Value::Integer(hi), Value::Integer(v)],
            );
            let expected = rows_of(
                &mut s,
                &format!(
                    "SELECT id FROM t WHERE id BETWEEN {lo} AND {hi} AND v IN ({v}, 2) ORDER BY id"
                ),
            );
            assert_eq!(rows, expected, "{lo}..{hi} v {v}");
        }
        assert!(kept_plan(&p).is_some());
        let p = prepare(&mut s, "UPDATE t SET v = v + $2 WHERE id = $1", &[])
            .unwrap()
            .unwrap();
        for id in 1..=12 {
            let r = execute_prepared(
                &mut s,
                &p,
                vec![Value::Integer(id), Value::Integer(100)],
                &mut StatementIo::default(),
            )
            .unwrap();
            assert_eq!(r.tag, "UPDATE 1");
        }
        assert!(kept_plan(&p).is_some());
        assert_eq!(
            rows_of(&mut s, "SELECT count(*) FROM t WHERE v >= 100"),
            [[Value::BigInt(12)]]
        );
        let p = prepare(&mut s, "INSERT INTO t VALUES ($1, $2, $3)", &[])
            .unwrap()
            .unwrap();
        for id in 3001..=3012 {
            let values = vec![
                Value::Integer(id),
                Value::Integer(1),
                Value::Text("i".into()),
            ];
            let r = execute_prepared(&mut s, &p, values, &mut StatementIo::default()).unwrap();
            assert_eq!(r.tag, "INSERT 0 1");
        }
        assert!(kept_plan(&p).is_some());
        assert_eq!(
            rows_of(&mut s, "SELECT count(*), sum(id) FROM t WHERE id > 3000"),
            [[Value::BigInt(12), Value::BigInt((3001..=3012).sum())]]
        );
        // RETURNING's rows and columns come from the kept plan too.
        let p = prepare(
            &mut s,
            "DELETE FROM t WHERE id = $1 RETURNING id + 1, v",
            &[],
        )
        .unwrap()
        .unwrap();
        for id in 3001..=3012 {
            let r = execute_prepared(
                &mut s,
                &p,
                vec![Value::Integer(id)],
                &mut StatementIo::default(),
            )
            .unwrap();
            assert_eq!(r.tag, "DELETE 1");
            assert_eq!(r.columns.len(), 2);
            assert_eq!(r.rows, [[Value::Integer(id + 1), Value::Integer(1)]]);
        }
        assert!(kept_plan(&p).is_some());
    }

    #[test]
    fn a_kept_plan_is_planned_again_after_an_index_or_its_table_changes() {
        let (mut s, _dir) = session();
        execute(
            &mut s,
            "CREATE TABLE t (id integer, v integer);
             INSERT INTO t SELECT g, g * 10 FROM generate_series(1, 5000) g;
             ANALYZE t",
        )
        .unwrap();
        let p = prepare(&mut s, "SELECT v FROM t WHERE id = $1", &[])
            .unwrap()
            .unwrap();
        let runs = CUSTOM_PLANS_FIRST as i32 + 1;
        for id in 1..=runs {
            assert_eq!(
                run(&mut s, &p, vec![Value::Integer(id)]),
                [[Value::Integer(id * 10)]]
            );
        }
        let titles = kept_plan(&p).expect("kept");
        assert!(titles[0].starts_with("Seq Scan"), "{titles:?}");

        // A new index: planned again (custom plans, then a generic plan
        // that uses it).
        execute(&mut s, "CREATE INDEX t_id ON t (id)").unwrap();
        for id in 1..=runs {
            assert_eq!(
                run(&mut s, &p, vec![Value::Integer(id + 100)]),
                [[Value::Integer((id + 100) * 10)]]
            );
        }
        let titles = kept_plan(&p).expect("kept again");
        assert!(titles[0].starts_with("Index Scan"), "{titles:?}");
        // Its index dropped: a sequential scan again.
        execute(&mut s, "DROP INDEX t_id").unwrap();
        assert_eq!(
            run(&mut s, &p, vec![Value::Integer(7)]),
            [[Value::Integer(70)]]
        );
        assert!(kept_plan(&p).is_none());

        // The table dropped and created again, with other rows and its
        // columns in another order: the new table is read.
        for id in 1..=runs {
            run(&mut s, &p, vec![Value::Integer(id)]);
        }
        assert!(kept_plan(&p).is_some());
        execute(
            &mut s,
            "DROP TABLE t;
             CREATE TABLE t (v integer, id integer PRIMARY KEY);
             INSERT INTO t VALUES (-1, 1), (-2, 2)",
        )
        .unwrap();
        assert_eq!(
            run(&mut s, &p, vec![Value::Integer(2)]),
            [[Value::Integer(-2)]]
        );
        for id in 1..=runs {
            let expected: Vec<Vec<Value>> = if id <= 2 {
                vec![vec![Value::Integer(-id)]]
            } else {
                Vec::new()
            };
            assert_eq!(run(&mut s, &p, vec![Value::Integer(id)]), expected);
        }
        assert!(kept_plan(&p).is_some());
        // Dropped for good: the error a custom plan gives.
        execute(&mut s, "DROP TABLE t").unwrap();
        let e = execute_prepared(
            &mut s,
            &p,
            vec![Value::Integer(1)],
            &mut StatementIo::default(),
        )
        .unwrap_err();
        assert!(matches!(e, SqlError::UnknownTable { .. }), "{e}");
    }

    #[test]
    fn a_plan_that_holds_for_one_run_is_not_kept() {
        let (mut s, _dir) = session();
        execute(
            &mut s,
            "CREATE TABLE t (id integer PRIMARY KEY, v integer);
             INSERT INTO t SELECT g, g FROM generate_series(1, 100) g",
        )
        .unwrap();
        // A LIMIT's parameter, an InitPlan's value: planned with each
        // run's values, as a custom plan.
        for text in [
            "SELECT id FROM t WHERE id > $1 ORDER BY id LIMIT $1",
            "SELECT id FROM t WHERE id = $1 AND v = (SELECT max(v) FROM t WHERE id <= $1)",
        ] {
            let p = prepare(&mut s, text, &[]).unwrap().unwrap();
            for n in 1..=10 {
                let rows = run(&mut s, &p, vec![Value::Integer(n)]);
                let expected = rows_of(&mut s, &text.replace("$1", &n.to_string()));
                assert_eq!(rows, expected, "{text} with {n}");
                assert!(kept_plan(&p).is_none(), "{text}");
            }
        }
        // The statement's time is read at each run of a kept plan: the
        // transaction block's start.
        let p = prepare(
            &mut s,
            "SELECT now(), current_date, id FROM t WHERE id = $1 AND now() > '2000-01-01'",
            &[],
        )
        .unwrap()
        .unwrap();
        for block in 0..3 {
            execute(&mut s, "BEGIN").unwrap();
            for n in 1..=4 {
                let rows = run(&mut s, &p, vec![Value::Integer(n)]);
                let expected = rows_of(&mut s, &format!("SELECT now(), current_date, {n}"));
                assert_eq!(rows, expected, "block {block}, run {n}");
            }
            execute(&mut s, "COMMIT").unwrap();
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert!(kept_plan(&p).is_some());

        // Another planner setting: planned again with it.
        let p = prepare(&mut s, "SELECT v FROM t WHERE id = $1", &[])
            .unwrap()
            .unwrap();
        for n in 1..=10 {
            run(&mut s, &p, vec![Value::Integer(n)]);
        }
        assert!(kept_plan(&p).expect("kept")[0].starts_with("Index Scan"));
        execute(
            &mut s,
            "SET enable_indexscan = off; SET enable_bitmapscan = off",
        )
        .unwrap();
        for n in 1..=10 {
            assert_eq!(
                run(&mut s, &p, vec![Value::Integer(n)]),
                [[Value::Integer(n)]]
            );
        }
        let titles = kept_plan(&p).expect("kept");
        assert!(titles[0].starts_with("Seq Scan"), "{titles:?}");
    }

    #[test]
    fn a_prepared_statement_is_one_statement_with_its_parameters() {
        let (mut s, _dir) = session();
        let e = prepare(&mut s, "SELECT 1; SELECT 2", &[]).unwrap_err();
        assert!(matches!(e, SqlError::MultipleCommands), "{e}");
        assert!(prepare(&mut s, " ; ", &[]).unwrap().is_none());
        let p = prepare(&mut s, "SELECT $2::integer", &[]).unwrap().unwrap();
        assert_eq!(p.param_types, [ColumnType::Text, ColumnType::Integer]);
        let e = execute_prepared(&mut s, &p, vec![Value::Null], &mut StatementIo::default())
            .unwrap_err();
        assert!(
            matches!(
                e,
                SqlError::ParameterCount {
                    given: 1,
                    expected: 2
                }
            ),
            "{e}"
        );
        let e = prepare(&mut s, "SELECT * FROM missing WHERE a = $1", &[]).unwrap_err();
        assert!(matches!(e, SqlError::UnknownTable { .. }), "{e}");
    }
}
