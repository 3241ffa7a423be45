//! The executor (DESIGN.md §1): runs plans built by a front end over
//! tables, the heap and transactions. It knows scan nodes, filters,
//! aggregation, sorting, limits, data changes and EXPLAIN's
//! instrumentation; it knows nothing of SQL text, files or I/O methods.
//!
//! # Plans
//!
//! A statement is one [`Plan`]: a query ([`QueryPlan`]), or an insert,
//! update or delete. A query is a tree of [`PlanNode`]s, pulled from the
//! top a batch at a time (PostgreSQL's executor, in batches rather than
//! row by row):
//!
//! ```text
//!   Limit ◀─ Sort ◀─ Project ◀─ [Aggregate] ◀─ Seq Scan (filter)
//! ```
//!
//! A scan's batch is one page's visible rows that pass its filter,
//! decoded and copied out under the page's content lock (the scan decodes
//! only columns some expression uses: `SELECT count(*)` decodes none);
//! other nodes return up to [`plan::BATCH_ROWS_MAX`] rows. Between batches
//! no page is locked, so whoever pulls may use the buffer pool: an INSERT …
//! SELECT inserts each batch as it comes, and UPDATE and DELETE change the
//! rows of each batch of their scan before pulling the next (the command
//! id keeps a statement from seeing its own changes). A parent that needs
//! no more rows closes its child: `LIMIT` closes the scan below it, whose
//! read stream then stops, so `SELECT … LIMIT 10` reads only the pages
//! it needs and what the stream had read ahead. Sort and Aggregate consume
//! their input before returning a row. A locking query (`SELECT … FOR
//! UPDATE`) has a LockRows node between the Sort and the Limit
//! ([`lockrows`]), which locks each row it passes up by its tuple id.
//!
//! # Transactions and tables
//!
//! [`execute`] takes the statement's snapshot from the caller (the session
//! decides read committed or repeatable read), holds every table it uses
//! shared (`TableDef::in_use`, so DROP TABLE waits), assigns the transaction
//! id before the first write of a data-changing statement, and writes new
//! tuples with that id and the statement's command id. Failing half-way is
//! fine: the caller ends the statement as failed and the transaction
//! machinery makes everything it wrote invisible.
//!
//! # Example
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use aiostore::exec::{self, AggregateNode, Plan, QueryPlan, SeqScanNode};
//! # use aiostore::exec::agg::{AggFunc, Aggregate};
//! # fn f(s: &mut aiostore::database::Session) -> Result<(), Box<dyn std::error::Error>> {
//! // SELECT count(*) FROM t
//! let table = s.db().catalog().table("t")?;
//! let scan = SeqScanNode::new(table, None, vec![false; 2], None);
//! let count = Aggregate::new(AggFunc::CountStar, None)?;
//! let root = AggregateNode::new(Box::new(scan), vec![], vec![], vec![count], None);
//! let mut plan = Plan::Query(QueryPlan::new(Box::new(root), 1));
//! let mut snapshot = s.start_statement()?;
//! let outcome = exec::execute(&mut plan, s, &mut snapshot, exec::Rows::Collect);
//! drop(snapshot);
//! s.end_statement(outcome.is_ok())?;
//! println!("{:?}", outcome?.rows);
//! # Ok(()) }
//! ```

pub mod agg;
pub mod analyze;
pub mod bitmapscan;
pub mod copy;
pub mod dml;
pub mod estimate;
pub mod explain;
pub mod expr;
pub mod index;
pub mod indexscan;
pub mod join;
pub mod lockrows;
pub mod mergejoin;
pub mod nodes;
pub mod partition;
pub mod pg_catalog;
pub mod plan;
pub mod portal;
pub mod progress;
pub mod scan;
pub mod subplan;
pub mod value;
pub mod views;

use std::sync::Arc;

use thiserror::Error;

use crate::buffer::BufferError;
use crate::catalog::{CatalogError, TableDef};
use crate::database::{Database, Session, StatementSnapshot, XactError};
use crate::heap::{HeapError, TupleError};
use crate::storage::StorageError;
use crate::txn::LockMode;
use crate::types::{TypeError, Value};

pub use copy::{
    copy_from, copy_to, CopyFault, CopyFormat, CopyFrom, CopyOptions, CopySource, CopyTo,
};
pub use dml::{ChangeTarget, DeletePlan, InsertPlan, Returning, UpdatePlan};
pub use estimate::{estimate_of, Estimate, Estimated};
pub use explain::{explain, ExplainOptions, Timing};
pub use expr::{BinaryOp, EvalContext, Expr, Function};
pub use join::{HashCond, HashJoinNode, JoinKind, NestedLoopNode};
pub use lockrows::LockRowsNode;
pub use mergejoin::{MergeCond, MergeJoinNode};
pub use nodes::{
    AggregateNode, AppendNode, FilterNode, LimitNode, ProjectNode, ResultNode, Series, SeriesNode,
    SetOpKind, SetOpNode, SortNode, SubqueryScanNode, ValuesNode, ViewNode,
};
pub use plan::{Batch, ExecCx, Filter, Flow, PlanNode, QueryPlan, Rows, SortKey};
pub use progress::{NoProgress, Progress, ProgressUnit};
pub use scan::SeqScanNode;
pub use subplan::{SubLink, SubPlan, SubPlanCall, SubPlanMode};
pub use views::{Utility, UtilityCall, View};

/// Errors of executing (and of type-checking expressions while planning).
#[derive(Debug, Error)]
pub enum ExecError {
    /// A cancel request or statement_timeout stopped the statement.
    #[error(transparent)]
    Interrupted(#[from] crate::txn::Interrupted),
    #[error("division by zero")]
    DivisionByZero,
    /// Text that is no value of its type, a value that does not fit its
    /// type (read, cast, or computed: integer arithmetic that overflows),
    /// or a cast that does not exist.
    #[error(transparent)]
    Type(#[from] TypeError),
    /// A double precision result too large to represent, from finite
    /// operands (PostgreSQL's words).
    #[error("value out of range: overflow")]
    Overflow,
    /// A double precision result too close to zero to represent, from
    /// operands that are not zero.
    #[error("value out of range: underflow")]
    Underflow,
    #[error("operator does not exist: {left} {op} {right}; cast one side to the other's type (e.g. x::bigint or x::text)")]
    NoOperator {
        left: &'static str,
        op: &'static str,
        right: &'static str,
    },
    #[error("operator does not exist: {op} {ty}")]
    NoPrefixOperator { op: &'static str, ty: &'static str },
    #[error("argument of {context} must be type boolean, not type {ty}")]
    NotBoolean {
        context: &'static str,
        ty: &'static str,
    },
    #[error("function {call} does not exist; it is {signature} (add casts to match)")]
    NoFunction {
        call: String,
        signature: &'static str,
    },
    #[error("a text value of {bytes} bytes exceeds the limit of {limit} bytes")]
    TextTooLong { bytes: usize, limit: usize },
    #[error("LIKE pattern must not end with escape character")]
    LikeEscape,
    /// A pattern of `~` that does not compile (the `regex` crate's
    /// syntax, close to PostgreSQL's for the patterns psql sends).
    #[error("invalid regular expression: {0}")]
    Regex(String),
    /// CASE branches (or COALESCE, GREATEST, LEAST arguments) of types no
    /// one type holds (PostgreSQL's words).
    #[error("{construct} types {first} and {other} cannot be matched")]
    CaseTypes {
        construct: &'static str,
        first: &'static str,
        other: &'static str,
    },
    #[error(
        "null value in column \"{column}\" of relation \"{table}\" violates not-null constraint"
    )]
    NotNull { table: String, column: String },
    /// ALTER TABLE … ADD PRIMARY KEY over a row with a NULL key column.
    #[error("column \"{column}\" of relation \"{table}\" contains null values")]
    PrimaryKeyNulls { table: String, column: String },
    #[error("multiple primary keys for table \"{table}\" are not allowed")]
    MultiplePrimaryKeys { table: String },
    /// DROP INDEX of an index a PRIMARY KEY or UNIQUE constraint owns
    /// (named as the index).
    #[error("cannot drop index {index} because constraint {index} on table {table} requires it\nHINT:  You can drop constraint {index} on table {table} instead.")]
    IndexOfConstraint { index: String, table: String },
    #[error("constraint \"{constraint}\" of relation \"{table}\" does not exist")]
    NoSuchConstraint { constraint: String, table: String },
    #[error("column \"{column}\" of table \"{table}\" is of type {expected} but the value is of type {found}; add a cast")]
    ColumnType {
        table: String,
        column: String,
        expected: &'static str,
        found: &'static str,
    },
    /// `timestamp - timestamp` (or with a date), whose result type in
    /// PostgreSQL is `interval`.
    #[error("{left} - {right} gives an interval, and type interval is not supported; cast both sides to date to subtract them as a number of days")]
    NoInterval {
        left: &'static str,
        right: &'static str,
    },
    /// A scalar subquery (`(SELECT …)` in an expression) that returned a
    /// second row (PostgreSQL's words).
    #[error("more than one row returned by a subquery used as an expression")]
    SubqueryRows,
    #[error("step size of generate_series cannot be zero")]
    ZeroStep,
    #[error("block {block} is beyond the end of table \"{table}\", which has {nblocks} blocks")]
    BlockOutOfRange {
        table: String,
        block: u32,
        nblocks: u32,
    },
    /// A bad record of COPY FROM's input; `column` names the field's
    /// column when the fault is in one field.
    #[error("COPY {table}, line {line}{}: {fault}", column.as_ref().map(|c| format!(", column {c}")).unwrap_or_default())]
    CopyInput {
        table: String,
        line: u64,
        column: Option<String>,
        fault: CopyFault,
    },
    #[error("COPY could not write to {target}: {source}")]
    CopyOutput {
        target: String,
        source: std::io::Error,
    },
    /// The receiver of a query's streamed rows failed (the shell's
    /// output closed, say); the rows before it were delivered.
    #[error("could not send the query's rows: {message}")]
    ResultOutput { message: String },
    #[error("table \"{0}\" was dropped while the statement was being prepared; run it again")]
    TableDropped(String),
    #[error("cannot truncate table \"{0}\": it was created in this transaction and is not committed yet; commit its creation first, or use DELETE")]
    TruncateCreated(String),
    /// PostgreSQL's refusal (object_in_use): a portal of the session's
    /// transaction, suspended at its row limit, still reads the table.
    #[error("cannot change table \"{0}\" because it is being used by active queries in this session (a portal suspended at its row limit reads it); close the portal, or fetch it to its end, first")]
    TableInUse(String),
    /// A wait for a table lock ended without it (deadlock, lock_timeout,
    /// cancel).
    #[error("could not lock table \"{table}\": {source}")]
    Lock {
        table: String,
        source: crate::txn::WaitError,
    },
    /// A sort's or hash aggregation's temporary file failed.
    #[error(transparent)]
    Sort(#[from] crate::sort::SortError),
    #[error(transparent)]
    Heap(#[from] HeapError),
    #[error(transparent)]
    Tuple(#[from] TupleError),
    #[error(transparent)]
    Buffer(#[from] BufferError),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(transparent)]
    Index(#[from] crate::btree::BtreeError),
    #[error(transparent)]
    Xact(#[from] XactError),
    #[error(transparent)]
    Statistics(#[from] crate::catalog::statistics::StatisticsError),
    #[error(transparent)]
    Bitmap(#[from] crate::tidbitmap::TidBitmapError),
    /// A broken invariant of the executor itself (never the user's input).
    #[error("internal error in the executor: {0}")]
    Internal(&'static str),
}

impl ExecError {
    /// PostgreSQL's SQLSTATE for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            ExecError::Interrupted(i) => i.sqlstate(),
            ExecError::DivisionByZero => "22012",
            ExecError::Type(e) => e.sqlstate(),
            // PostgreSQL's float overflow and underflow errors.
            ExecError::Overflow | ExecError::Underflow => "22003",
            ExecError::NoOperator { .. }
            | ExecError::NoPrefixOperator { .. }
            | ExecError::NoFunction { .. } => "42883", // undefined_function
            ExecError::NotBoolean { .. } | ExecError::ColumnType { .. } => "42804", // datatype_mismatch
            // PostgreSQL's string limit ("requested length too large").
            ExecError::TextTooLong { .. } => "54000",
            ExecError::LikeEscape => "22025", // invalid_escape_sequence
            ExecError::Regex(_) => "2201B",   // invalid_regular_expression
            ExecError::CaseTypes { .. } => "42804",
            ExecError::NotNull { .. } | ExecError::PrimaryKeyNulls { .. } => "23502",
            ExecError::MultiplePrimaryKeys { .. } => "42P16", // invalid_table_definition
            ExecError::IndexOfConstraint { .. } => "2BP01",   // dependent_objects_still_exist
            ExecError::NoSuchConstraint { .. } => "42704",    // undefined_object
            // PostgreSQL has the interval type; we do not.
            ExecError::NoInterval { .. } => "0A000",
            ExecError::SubqueryRows => "21000", // cardinality_violation
            ExecError::ZeroStep | ExecError::BlockOutOfRange { .. } => "22023",
            ExecError::CopyInput { fault, .. } => fault.sqlstate(),
            ExecError::CopyOutput { source, .. } => crate::storage::io_sqlstate(source),
            // The receiver of the rows is the client: PostgreSQL's "could
            // not send data to client".
            ExecError::ResultOutput { .. } => "08006",
            // Run again, the statement finds the table gone (or its
            // successor): PostgreSQL's lookup after a concurrent DROP.
            ExecError::TableDropped(_) => "42P01",
            ExecError::Lock { source, .. } => source.sqlstate(),
            ExecError::TruncateCreated(_) => "0A000",
            ExecError::TableInUse(_) => "55006",
            ExecError::Sort(e) => e.sqlstate(),
            ExecError::Heap(e) => e.sqlstate(),
            ExecError::Tuple(e) => e.sqlstate(),
            ExecError::Buffer(e) => e.sqlstate(),
            ExecError::Storage(e) => e.sqlstate(),
            ExecError::Catalog(e) => e.sqlstate(),
            ExecError::Index(e) => e.sqlstate(),
            ExecError::Xact(e) => e.sqlstate(),
            ExecError::Statistics(e) => e.sqlstate(),
            ExecError::Bitmap(e) => e.sqlstate(),
            ExecError::Internal(_) => "XX000",
        }
    }
}

/// A statement's plan.
pub enum Plan {
    /// Returns rows.
    Query(QueryPlan),
    Insert(InsertPlan),
    Update(UpdatePlan),
    Delete(DeletePlan),
}

impl Plan {
    /// The oid of the table the plan writes, if it writes one.
    pub fn written_table(&self) -> Option<u32> {
        match self {
            Plan::Query(_) => None,
            Plan::Insert(i) => Some(i.table.oid),
            Plan::Update(u) => Some(u.target.table.oid),
            Plan::Delete(d) => Some(d.target.table.oid),
        }
    }

    /// Every table the plan reads or writes.
    pub fn tables(&self) -> Vec<Arc<TableDef>> {
        let mut out = Vec::new();
        match self {
            Plan::Query(q) => q.root.tables(&mut out),
            Plan::Insert(i) => {
                out.push(Arc::clone(&i.table));
                i.input.tables(&mut out);
            }
            // The target, and the tables its WHERE's and its assignments'
            // subqueries read.
            Plan::Update(u) => {
                u.target.scan.tables(&mut out);
                plan::subplan_tables(u.assignments.iter().map(|(_, e)| e).collect(), &mut out);
            }
            Plan::Delete(d) => d.target.scan.tables(&mut out),
        }
        // And those RETURNING's subqueries read.
        plan::subplan_tables(self.returning().iter().collect(), &mut out);
        out
    }

    /// The oids of the tables whose rows the plan locks (`SELECT … FOR
    /// UPDATE`, in a query or its subqueries).
    pub fn row_locked_tables(&self) -> Vec<u32> {
        let mut out = Vec::new();
        match self {
            Plan::Query(q) => q.root.row_locked_tables(&mut out),
            Plan::Insert(i) => i.input.row_locked_tables(&mut out),
            Plan::Update(u) => u.target.scan.row_locked_tables(&mut out),
            Plan::Delete(d) => d.target.scan.row_locked_tables(&mut out),
        }
        let assignments = match self {
            Plan::Update(u) => u.assignments.iter().map(|(_, e)| e).collect(),
            _ => Vec::new(),
        };
        for e in assignments.into_iter().chain(self.returning()) {
            for call in e.subplans() {
                call.plan.lock().root.row_locked_tables(&mut out);
            }
        }
        out
    }

    /// The expressions of a data change's RETURNING clause (none for a
    /// query, or a change without one).
    pub fn returning(&self) -> &[Expr] {
        match self {
            Plan::Query(_) => &[],
            Plan::Insert(i) => &i.returning.exprs,
            Plan::Update(u) => &u.returning.exprs,
            Plan::Delete(d) => &d.returning.exprs,
        }
    }

    /// Whether the plan can run again for another statement (a prepared
    /// statement's kept plan): each run starts its nodes over with
    /// `rescan`, so none may keep what it computed for one statement
    /// (`PlanNode::keeps_statement_state`), and no subquery may keep its
    /// value or hashed rows (an InitPlan's value holds for one statement).
    pub fn reusable(&self) -> bool {
        fn exprs_reusable(exprs: Vec<&Expr>) -> bool {
            exprs.iter().all(|e| e.subplans().is_empty())
        }
        fn node_reusable(node: &dyn PlanNode) -> bool {
            !node.keeps_statement_state()
                && exprs_reusable(node.expressions())
                && node.children().into_iter().all(node_reusable)
        }
        exprs_reusable(self.returning().iter().collect())
            && match self {
                Plan::Query(q) => node_reusable(q.root.as_ref()),
                Plan::Insert(i) => node_reusable(i.input.as_ref()),
                Plan::Update(u) => {
                    node_reusable(u.target.scan.as_ref())
                        && exprs_reusable(u.target.condition.iter().collect())
                        && exprs_reusable(u.assignments.iter().map(|(_, e)| e).collect())
                }
                Plan::Delete(d) => {
                    node_reusable(d.target.scan.as_ref())
                        && exprs_reusable(d.target.condition.iter().collect())
                }
            }
    }

    /// Starts the plan's nodes over for another run (see
    /// [`Plan::reusable`]).
    fn rescan(&mut self, cx: &mut ExecCx) -> Result<(), ExecError> {
        match self {
            Plan::Query(q) => q.root.rescan(cx),
            Plan::Insert(i) => i.input.rescan(cx),
            Plan::Update(u) => u.target.scan.rescan(cx),
            Plan::Delete(d) => d.target.scan.rescan(cx),
        }
    }
}

/// What a statement returned.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The rows of a query run with [`Rows::Collect`].
    pub rows: Vec<Vec<Value>>,
    /// Rows returned, inserted, updated or deleted.
    pub count: u64,
}

/// Locks `table` in `mode` for the session's transaction (see
/// `txn/locks.rs`), then checks that it was not dropped, or truncated
/// into a new file, since the caller found it: a table swapped under a
/// plan is [`ExecError::TableDropped`], which the SQL layer answers by
/// planning again, now holding the lock. Returns whether it waited for
/// the lock (a statement that did reads with a snapshot taken after it).
pub fn lock_table(
    session: &mut Session,
    table: &Arc<TableDef>,
    mode: LockMode,
) -> Result<bool, ExecError> {
    // What takes a table whole (DROP, TRUNCATE, ALTER) must not pull it
    // from under a scan of this transaction's that is to go on.
    if mode == LockMode::AccessExclusive && session.suspended_reads(table.oid) {
        return Err(ExecError::TableInUse(table.name().to_string()));
    }
    let waited = session
        .lock_table(table.oid, mode)
        .map_err(|source| ExecError::Lock {
            table: table.name().to_string(),
            source,
        })?;
    check_not_dropped(session.db(), table)?;
    Ok(waited)
}

/// Locks every table `plan` uses ([`TableLocks`]): [`execute`] does it
/// too, but a caller that sends anything (a row description) before
/// running the plan locks first, to plan again if a table changed.
/// Returns whether it waited for a lock.
pub fn lock_plan_tables(session: &mut Session, plan: &Plan) -> Result<bool, ExecError> {
    TableLocks::of(plan).take(session)
}

/// The tables a plan uses, each once with the mode a statement running
/// it locks it in: the one it writes (if any) RowExclusive, those whose
/// rows it locks (`FOR UPDATE`) RowShare, those it only reads
/// AccessShare. Found by walking the plan and its subqueries, so a kept
/// plan keeps its list instead of walking the tree on every run.
#[derive(Debug, Clone)]
pub struct TableLocks(Vec<(Arc<TableDef>, LockMode)>);

impl TableLocks {
    pub fn of(plan: &Plan) -> TableLocks {
        TableLocks::new(
            plan.tables(),
            plan.written_table(),
            &plan.row_locked_tables(),
        )
    }

    /// The list for `tables` (repeats allowed), of which the statement
    /// writes `written` and locks the rows of `row_locked`.
    pub(crate) fn new(
        tables: Vec<Arc<TableDef>>,
        written: Option<u32>,
        row_locked: &[u32],
    ) -> TableLocks {
        let mut locks: Vec<(Arc<TableDef>, LockMode)> = Vec::new();
        for table in tables {
            if locks.iter().any(|(t, _)| t.oid == table.oid) {
                continue;
            }
            let mode = if Some(table.oid) == written {
                LockMode::RowExclusive
            } else if row_locked.contains(&table.oid) {
                LockMode::RowShare
            } else {
                LockMode::AccessShare
            };
            locks.push((table, mode));
        }
        TableLocks(locks)
    }

    /// Locks each table for the session's transaction ([`lock_table`]).
    /// Returns whether it waited for any.
    pub fn take(&self, session: &mut Session) -> Result<bool, ExecError> {
        let mut waited = false;
        for (table, mode) in &self.0 {
            waited |= lock_table(session, table, *mode)?;
        }
        Ok(waited)
    }
}

/// Fails if `table` was dropped (and perhaps created again) since it was
/// planned; called with the table held, so that the answer stays true.
fn check_not_dropped(db: &Database, table: &Arc<TableDef>) -> Result<(), ExecError> {
    if db.catalog().holds(table) {
        Ok(())
    } else {
        Err(ExecError::TableDropped(table.name().to_string()))
    }
}

/// Runs `plan` as one statement of `session`, reading with `snapshot`,
/// sending a query's rows to `rows`. Instrumentation for EXPLAIN ANALYZE
/// is left in the plan.
pub fn execute(
    plan: &mut Plan,
    session: &mut Session,
    snapshot: &mut StatementSnapshot,
    rows: Rows,
) -> Result<Outcome, ExecError> {
    execute_bound(plan, session, snapshot, rows, Bound::default())
}

/// How a kept plan runs again: the values of its parameters, and whether
/// it ran before.
#[derive(Debug, Default, Clone, Copy)]
pub struct Bound<'a> {
    /// The values of the statement's first parameters, `$1` … of a
    /// prepared statement planned without its values ([`Expr::param`] 0
    /// …; the planner numbers its subqueries' parameters after them).
    pub params: &'a [Value],
    /// The plan ran before: its nodes are started over with `rescan`
    /// first. Only a [`Plan::reusable`] plan may run again.
    pub again: bool,
    /// The keeper locked the plan's tables for this statement already
    /// (a kept plan's [`TableLocks`], checked not dropped there); false:
    /// they are found and locked here.
    pub tables_locked: bool,
}

/// [`execute`] with the parameters' values of `bound`, again if it says
/// so. The tables are held, and checked not dropped, as for any run: a
/// kept plan whose table was dropped since fails with
/// [`ExecError::TableDropped`], before it reads or writes anything, and its
/// keeper plans the statement again.
pub fn execute_bound(
    plan: &mut Plan,
    session: &mut Session,
    snapshot: &mut StatementSnapshot,
    rows: Rows,
    bound: Bound,
) -> Result<Outcome, ExecError> {
    if !bound.tables_locked {
        lock_plan_tables(session, plan)?;
    }
    let mut ctx = EvalContext::new();
    for (n, v) in bound.params.iter().enumerate() {
        ctx.set_param(n, v.clone());
    }
    if bound.again {
        debug_assert!(plan.reusable(), "only a reusable plan runs again");
        let mut cx = ExecCx {
            session,
            snapshot: snapshot.get(),
            eval: &mut ctx,
        };
        plan.rescan(&mut cx)?;
    }
    match plan {
        Plan::Query(q) => {
            let (rows, count) = plan::run_query(q, session, snapshot.get(), &mut ctx, rows)?;
            Ok(Outcome { rows, count })
        }
        Plan::Insert(i) => {
            let outcome = dml::run_insert(i, session, snapshot, &mut ctx)?;
            session
                .db()
                .statistics()
                .note_changes(i.table.oid, outcome.count);
            Ok(outcome)
        }
        Plan::Update(u) => {
            let outcome = dml::run_update(u, session, snapshot, &mut ctx)?;
            session
                .db()
                .statistics()
                .note_changes(u.target.table.oid, outcome.count);
            Ok(outcome)
        }
        Plan::Delete(d) => {
            let outcome = dml::run_delete(d, session, snapshot, &mut ctx)?;
            session
                .db()
                .statistics()
                .note_changes(d.target.table.oid, outcome.count);
            Ok(outcome)
        }
    }
}

/// VACUUM: removes the dead tuples of each table and marks pages whose
/// every tuple everyone sees all-visible (`Heap::vacuum`), holding each
/// table (so DROP TABLE waits) while it is vacuumed, and reporting each
/// table's progress in blocks. Returns each table vacuumed (as it was
/// when locked) with its report.
pub fn vacuum(
    session: &mut Session,
    tables: &[Arc<TableDef>],
    progress: &mut dyn Progress,
) -> Result<Vec<(Arc<TableDef>, crate::heap::VacuumReport)>, ExecError> {
    let db = session.db().clone();
    let limits = session.stream_limits();
    let mut reports = Vec::with_capacity(tables.len());
    for listed in tables {
        // Beside readers and writers, not beside another VACUUM or a
        // CREATE INDEX (PostgreSQL's mode for VACUUM). A table truncated
        // since it was listed is vacuumed as it is now (new files); one
        // dropped since is left out.
        let table = match lock_table(session, listed, LockMode::ShareUpdateExclusive) {
            Ok(_) => Arc::clone(listed),
            Err(ExecError::TableDropped(_)) => match db.catalog().table(listed.name()) {
                Ok(now) if now.oid == listed.oid => {
                    lock_table(session, &now, LockMode::ShareUpdateExclusive)?;
                    now
                }
                _ => continue,
            },
            Err(e) => return Err(e),
        };
        let table = &table;
        let name = format!("VACUUM {}", table.name());
        // The task begins when vacuum knows the table's size.
        let mut unstarted = Some(&mut *progress);
        let mut task = None;
        let indexes = db.catalog().indexes_of(table);
        let result = db.heap().vacuum(
            &mut session.buf,
            &table.heap,
            limits,
            !indexes.is_empty(),
            &mut |done, total| {
                task.get_or_insert_with(|| {
                    let progress = unstarted.take().expect("the task begins once");
                    progress::Task::begin(progress, &name, Some(total.into()), ProgressUnit::Blocks)
                })
                .update(done.into())
            },
        );
        drop(task);
        let mut report = result?;
        if !report.dead.is_empty() {
            // The index entries go before the line pointers are freed: a
            // freed one may hold another row at once.
            let mut dead = std::mem::take(&mut report.dead);
            dead.sort_unstable();
            index::vacuum_indexes(&db, &mut session.buf, table, &dead, limits)?;
            // Counted in `tuples_removed` already, as vacuum listed them.
            let freed = db
                .heap()
                .remove_dead(&mut session.buf, &table.heap, &dead)?;
            debug_assert_eq!(freed, dead.len() as u64);
        }
        if report.empty_pages_at_end > 0 {
            report.pages_truncated = truncate_empty_tail(session, table, &report, limits)?;
        }
        // Each table's locks go as its vacuum ends, as PostgreSQL vacuums
        // each table in a transaction of its own: a VACUUM of every table
        // does not keep the first from its next DDL (VACUUM runs in no
        // block, so it holds nothing else of the caller's).
        session.unlock_table(table.oid);
        reports.push((Arc::clone(table), report));
    }
    Ok(reports)
}

/// DROP TABLE of `table`, locked in AccessExclusive mode by the caller:
/// its catalog rows (and its indexes') deleted as the session's
/// transaction's, its files removed when that commits
/// ([`crate::catalog::Catalog::drop_table`]).
pub fn drop_table(session: &mut Session, table: &Arc<TableDef>) -> Result<(), ExecError> {
    let db = session.db().clone();
    lock_table(session, table, LockMode::AccessExclusive)?;
    let (xid, cid) = session.write_ids()?;
    let writer = crate::heap::Writer {
        xid,
        cid,
        waits: session.wait_limits(),
    };
    let dropped = db
        .catalog()
        .drop_table(&mut session.buf, db.heap(), table, &writer)?;
    session.dropped_table(dropped);
    Ok(())
}

/// TRUNCATE: gives each table and its indexes new, empty files for the
/// session's transaction (`catalog/truncate.rs`), each index a valid empty
/// B-tree; the old files go when the transaction commits. Locks each
/// table in AccessExclusive mode (the caller, which found them, did
/// already).
pub fn truncate(
    session: &mut Session,
    snapshot: &mut StatementSnapshot,
    tables: &[Arc<TableDef>],
) -> Result<(), ExecError> {
    let db = session.db().clone();
    let (xid, cid) = session.xid(snapshot)?;
    let writer = crate::heap::Writer {
        xid,
        cid,
        waits: session.wait_limits(),
    };
    for table in tables {
        lock_table(session, table, LockMode::AccessExclusive)?;
        if table.creator().is_some() {
            return Err(ExecError::TruncateCreated(table.name().to_string()));
        }
        let truncation =
            db.catalog()
                .truncate_table(&mut session.buf, db.heap(), table, &writer)?;
        let indexes: Vec<_> = truncation
            .new_indexes
            .iter()
            .map(|i| i.desc(&truncation.new))
            .collect();
        // Recorded before the indexes are written, so that a failure
        // below is undone with the rest at the abort.
        session.truncated_table(truncation);
        for index in &indexes {
            db.btree().create_empty(&mut session.buf, index)?;
        }
    }
    Ok(())
}

/// Cuts the empty pages vacuum found at the end of `table` off its file,
/// if the table can be had exclusively at once: no statement may scan
/// blocks that are going. A table in use keeps its pages (for the next
/// VACUUM), as PostgreSQL's VACUUM gives up truncating when it cannot get
/// its lock; waiting would stall every new statement behind the wait.
/// Its AccessExclusive lock, once had, lasts to the transaction's end
/// like any other; VACUUM's transaction ends with it.
fn truncate_empty_tail(
    session: &mut Session,
    table: &Arc<TableDef>,
    report: &crate::heap::VacuumReport,
    limits: crate::stream::StreamLimits,
) -> Result<u32, ExecError> {
    if !session.try_lock_table(table.oid, LockMode::AccessExclusive) {
        return Ok(0);
    }
    let db = session.db().clone();
    check_not_dropped(&db, table)?;
    Ok(db.heap().truncate_empty_tail(
        &mut session.buf,
        &table.heap,
        report.empty_pages_at_end,
        limits,
    )?)
}
