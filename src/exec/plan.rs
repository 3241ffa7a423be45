//! The plan tree: nodes pulled a batch at a time (see the module comment
//! of `exec`), and what they share: batches, filters, row counts, and the
//! loop that drains a tree.

use std::sync::Arc;

use super::explain::ExplainOptions;
use super::expr::{EvalContext, EvalEnv, Expr};
use super::subplan::SubPlanCall;
use super::value::is_true;
use super::ExecError;
use crate::catalog::TableDef;
use crate::database::Session;
use crate::heap::tuple::decode;
use crate::heap::{ScanControl, Tid};
use crate::txn::Snapshot;
use crate::types::Value;

pub use super::nodes::{
    AggregateNode, LimitNode, ProjectNode, ResultNode, SeriesNode, SortNode, ValuesNode, ViewNode,
};
pub use super::scan::SeqScanNode;

/// Most rows a node that is not a scan returns in one batch (a scan's
/// batch is one page's rows): enough to pay for the call per batch, few
/// enough that a LIMIT above it computes little it will not return.
pub const BATCH_ROWS_MAX: usize = 256;

/// What a consumer wants after a batch (or, for COPY's table path, a row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// No more rows are needed (a limit was reached).
    Stop,
}

/// Rows a node returns at once. A scan also gives each row's tuple id
/// (UPDATE and DELETE change the rows by it); other nodes leave `tids`
/// empty.
#[derive(Debug, Default)]
pub struct Batch {
    pub rows: Vec<Vec<Value>>,
    pub tids: Vec<Tid>,
}

impl Batch {
    pub fn clear(&mut self) {
        self.rows.clear();
        self.tids.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }
}

/// What a node runs with: the session (its buffer pool access), the
/// statement's snapshot, and the expression evaluator's scratch state.
pub struct ExecCx<'a> {
    pub session: &'a mut Session,
    pub snapshot: &'a Snapshot,
    pub eval: &'a mut EvalContext,
}

/// Expressions evaluated with an `ExecCx` may run subqueries.
impl EvalEnv for ExecCx<'_> {
    fn context(&mut self) -> &mut EvalContext {
        self.eval
    }

    fn run_subplan(&mut self, call: &SubPlanCall, row: &[Value]) -> Result<Value, ExecError> {
        call.evaluate(row, self)
    }
}

/// A node of the plan tree, pulled by its parent: PostgreSQL's executor,
/// a batch at a time instead of a row at a time.
///
/// There is no separate open: a node starts on its first pull, so a node
/// never pulled (below a `LIMIT 0`, or the inner side of a join whose
/// outer side is empty) costs nothing, not even a read stream.
///
/// Nodes are `Send`: a tree may outlive the call that started it (a
/// portal suspended at its row limit is kept by its transaction, in the
/// session, and a session may move between threads), so what nodes
/// share is behind `Arc` and a mutex, never `Rc`.
pub trait PlanNode: Send {
    /// Fills `out` (empty on entry) with the next rows, at most
    /// `max_rows` (at least 1); leaves it empty once the node has no more.
    /// A node that ended returns nothing more until it is rescanned. A
    /// parent that needs only a few more rows (a LIMIT) says so in
    /// `max_rows`, so that nothing below it computes, or counts for
    /// EXPLAIN, rows it will not return.
    fn next_batch(
        &mut self,
        cx: &mut ExecCx,
        out: &mut Batch,
        max_rows: usize,
    ) -> Result<(), ExecError>;

    /// Starts the node over, as if never pulled (the inner side of a
    /// nested loop, with new outer values).
    fn rescan(&mut self, cx: &mut ExecCx) -> Result<(), ExecError>;

    /// Gives back what the node holds (a scan's read stream and pins)
    /// and closes its children. Called whether the statement succeeded or
    /// not, and by a parent that needs no more rows (a LIMIT reached): a
    /// scan stops reading there. A closed node may be rescanned.
    fn close(&mut self, cx: &mut ExecCx);

    /// A parent will take at most `rows` rows from each run of this node
    /// (a LIMIT above it, its OFFSET included), said once, before the
    /// first pull: a node that reads ahead need read no further than they
    /// take (an index scan's heap prefetching), and one that returns its
    /// child's rows one for one passes it on. A hint, as PostgreSQL's
    /// tuple bound: a node that cannot use it ignores it (the default),
    /// and the rows it returns are the same either way.
    fn bound_rows(&mut self, _rows: u64) {}

    /// What EXPLAIN shows for the node; `None` for a node EXPLAIN does not
    /// show (a projection, as in PostgreSQL).
    fn describe(&self, opts: &ExplainOptions) -> Option<Described>;

    fn children(&self) -> Vec<&dyn PlanNode>;

    /// The expressions the node evaluates (for the subqueries in them,
    /// which EXPLAIN shows under the node); none by default.
    fn expressions(&self) -> Vec<&Expr> {
        Vec::new()
    }

    /// The planner's estimate of the node (see `estimate`); none unless
    /// it gave one.
    fn estimate(&self) -> Option<super::estimate::Estimate> {
        None
    }

    /// Whether the node keeps something it computed for one statement
    /// across rescans (a view's rows, a utility call's row), so that a
    /// plan holding it cannot run for another statement (a prepared
    /// statement's kept plan, see [`super::Plan::reusable`]); a node whose
    /// `rescan` starts it over entirely keeps nothing (the default).
    fn keeps_statement_state(&self) -> bool {
        false
    }

    /// Every table the subtree reads, its subqueries' too.
    fn tables(&self, out: &mut Vec<Arc<TableDef>>) {
        for child in self.children() {
            child.tables(out);
        }
        subplan_tables(self.expressions(), out);
    }

    /// The oids of the tables whose rows the subtree locks (a LockRows
    /// node's table, `SELECT … FOR UPDATE`), its subqueries' too: the
    /// statement holds those in RowShare mode rather than AccessShare, as
    /// PostgreSQL's.
    fn row_locked_tables(&self, out: &mut Vec<u32>) {
        for child in self.children() {
            child.row_locked_tables(out);
        }
        for e in self.expressions() {
            for call in e.subplans() {
                call.plan.lock().root.row_locked_tables(out);
            }
        }
    }
}

/// The tables the subqueries in `exprs` read.
pub(crate) fn subplan_tables(exprs: Vec<&Expr>, out: &mut Vec<Arc<TableDef>>) {
    for e in exprs {
        for call in e.subplans() {
            call.plan.lock().root.tables(out);
        }
    }
}

/// A node as EXPLAIN shows it.
pub struct Described {
    pub title: String,
    pub counts: NodeCounts,
    pub details: Vec<String>,
}

/// A predicate with the text EXPLAIN shows for it.
#[derive(Clone)]
pub struct Filter {
    pub predicate: Expr,
    pub label: String,
    /// When the predicate is an OR: each of its parts' text
    /// ([`Expr::disjuncts`], in order), so that a BitmapOr can show the
    /// part each index searches by; empty otherwise.
    pub arm_labels: Vec<String>,
}

/// Whether `row` passes `filter` (with none, every row does), counted in
/// `counts` as produced or removed: WHERE, HAVING and the WHERE of UPDATE
/// and DELETE all keep rows this way.
pub(crate) fn passes<E: EvalEnv + ?Sized>(
    filter: Option<&Filter>,
    counts: &mut NodeCounts,
    row: &[Value],
    ctx: &mut E,
) -> Result<bool, ExecError> {
    if let Some(f) = filter {
        if !is_true(&*f.predicate.eval_ref(row, ctx)?) {
            counts.removed += 1;
            return Ok(false);
        }
    }
    counts.rows += 1;
    Ok(true)
}

/// Drops the rows of `batch` (from `from` on) that do not pass `filter`,
/// counting as [`passes`] does; a row's tid (rows of a scan, through a
/// projection) goes with it.
pub(crate) fn keep_passing<E: EvalEnv + ?Sized>(
    filter: Option<&Filter>,
    counts: &mut NodeCounts,
    batch: &mut Batch,
    from: usize,
    ctx: &mut E,
) -> Result<(), ExecError> {
    let with_tids = !batch.tids.is_empty();
    debug_assert!(
        !with_tids || batch.tids.len() == batch.rows.len(),
        "a tid per row, or none"
    );
    let mut kept = from;
    for i in from..batch.rows.len() {
        if passes(filter, counts, &batch.rows[i], ctx)? {
            batch.rows.swap(kept, i);
            if with_tids {
                batch.tids.swap(kept, i);
            }
            kept += 1;
        }
    }
    batch.rows.truncate(kept);
    if with_tids {
        batch.tids.truncate(kept);
    }
    Ok(())
}

/// Rows a node produced and removed, for EXPLAIN ANALYZE.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeCounts {
    /// Rows returned, over every run.
    pub rows: u64,
    /// Rows its filter removed, over every run.
    pub removed: u64,
    /// Times it was started over (the inner side of a nested loop): it
    /// ran `rescans + 1` times.
    pub rescans: u64,
}

impl NodeCounts {
    /// Runs, as EXPLAIN's `loops`.
    pub fn loops(&self) -> u64 {
        self.rescans + 1
    }

    /// `total` per run, rounded, as EXPLAIN shows rows and removed rows.
    pub fn per_loop(&self, total: u64) -> u64 {
        (total as f64 / self.loops() as f64).round() as u64
    }
}

/// A sort key: a column of the rows reaching the sort.
#[derive(Debug, Clone)]
pub struct SortKey {
    pub column: usize,
    pub descending: bool,
    pub nulls_first: bool,
    pub label: String,
}

/// A query: a tree whose rows have `width` columns, and perhaps hidden
/// ones after them (sort keys that are not selected), which the result
/// leaves out.
pub struct QueryPlan {
    pub root: Box<dyn PlanNode>,
    pub width: usize,
}

impl QueryPlan {
    pub fn new(root: Box<dyn PlanNode>, width: usize) -> QueryPlan {
        QueryPlan { root, width }
    }
}

/// Pulls `root` until it ends or `f` answers [`Flow::Stop`], handing `f`
/// each batch; closes the tree on every way out.
pub(crate) fn drain(
    root: &mut dyn PlanNode,
    cx: &mut ExecCx,
    f: impl FnMut(&mut ExecCx, &mut Batch) -> Result<Flow, ExecError>,
) -> Result<(), ExecError> {
    drain_batches_of(root, cx, BATCH_ROWS_MAX, f)
}

/// [`drain`] in batches of at most `max_rows` rows: a caller that needs
/// only the first row or two (EXISTS, a scalar subquery) asks for no more,
/// so the scans below stop there.
pub(crate) fn drain_batches_of(
    root: &mut dyn PlanNode,
    cx: &mut ExecCx,
    max_rows: usize,
    mut f: impl FnMut(&mut ExecCx, &mut Batch) -> Result<Flow, ExecError>,
) -> Result<(), ExecError> {
    debug_assert!(
        (1..=BATCH_ROWS_MAX).contains(&max_rows),
        "a batch holds a row and at most BATCH_ROWS_MAX"
    );
    let mut batch = Batch::default();
    let result = loop {
        batch.clear();
        if let Err(e) = root.next_batch(cx, &mut batch, max_rows) {
            break Err(e);
        }
        if batch.is_empty() {
            break Ok(());
        }
        match f(cx, &mut batch) {
            Ok(Flow::Continue) => {}
            Ok(Flow::Stop) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    root.close(cx);
    result
}

/// Where a query's rows go.
pub enum Rows<'a> {
    /// Into [`super::Outcome::rows`]: for callers that want them all.
    Collect,
    /// To the function, a batch at a time as the tree produces them (rows
    /// without hidden columns), so that a result of any size passes in
    /// bounded memory; `Outcome::rows` stays empty. A failing write stops
    /// the query (`ExecError::ResultOutput`). The function may take the
    /// rows out of the vector: they are not used after.
    Stream(&'a mut dyn FnMut(&mut Vec<Vec<Value>>) -> std::io::Result<()>),
    /// Nowhere, only counted (EXPLAIN ANALYZE).
    Discard,
}

/// Runs a query, sending its rows (without hidden columns) to `out`;
/// returns them when `out` collects, and how many there were.
pub(crate) fn run_query(
    q: &mut QueryPlan,
    s: &mut Session,
    snap: &Snapshot,
    eval: &mut EvalContext,
    out: Rows,
) -> Result<(Vec<Vec<Value>>, u64), ExecError> {
    let mut collected = Vec::new();
    let mut count = 0u64;
    let width = q.width;
    let mut cx = ExecCx {
        session: s,
        snapshot: snap,
        eval,
    };
    let mut out = out;
    drain(q.root.as_mut(), &mut cx, |_, batch| {
        count += batch.rows.len() as u64;
        for row in &mut batch.rows {
            row.truncate(width);
        }
        match &mut out {
            Rows::Collect => collected.append(&mut batch.rows),
            Rows::Stream(f) => f(&mut batch.rows).map_err(|e| ExecError::ResultOutput {
                message: e.to_string(),
            })?,
            Rows::Discard => {}
        }
        Ok(Flow::Continue)
    })?;
    Ok((collected, count))
}

/// Scans `node`'s table with `snap`, decoding the wanted columns (none:
/// an empty row, and no decoding at all), and calls `f` for each visible
/// row; `node`'s filter is not applied (COPY TO a file of a whole table
/// has none). `f` runs under the page's content lock: it must not use the
/// pool; `after_page` runs between pages, with no lock held
/// (`Heap::scan`).
pub(crate) fn scan_table(
    node: &mut SeqScanNode,
    s: &mut Session,
    snap: &Snapshot,
    mut f: impl FnMut(Tid, &[Value]) -> Result<Flow, ExecError>,
    mut after_page: impl FnMut() -> Result<Flow, ExecError>,
) -> Result<(), ExecError> {
    debug_assert!(node.filter.is_none());
    let db = s.db().clone();
    let limits = s.stream_limits();
    let table = Arc::clone(&node.table);
    let types = &table.heap.types;
    let wanted = &node.wanted;
    let decode_any = wanted.iter().any(|&w| w);
    let mut row: Vec<Value> = Vec::with_capacity(types.len());
    let mut failure: Option<ExecError> = None;
    let mut page_failure: Option<ExecError> = None;
    let control = |result: Result<Flow, ExecError>, failure: &mut Option<ExecError>| match result {
        Ok(Flow::Continue) => ScanControl::Continue,
        Ok(Flow::Stop) => ScanControl::Stop,
        Err(e) => {
            *failure = Some(e);
            ScanControl::Stop
        }
    };
    let scanned = db.heap().scan(
        &mut s.buf,
        &table.heap,
        snap,
        limits,
        |tid, tuple| {
            if decode_any {
                if let Err(e) = decode(types, tuple, wanted, &mut row) {
                    failure = Some(e.into());
                    return ScanControl::Stop;
                }
            }
            control(f(tid, &row), &mut failure)
        },
        || control(after_page(), &mut page_failure),
    );
    if let Some(e) = failure.or(page_failure) {
        return Err(e);
    }
    node.stats = Some(scanned?);
    Ok(())
}
