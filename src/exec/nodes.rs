//! The plan nodes other than scans of tables: sources of rows that read no
//! table (a SELECT without FROM, VALUES, `generate_series`, system views),
//! and the operators above a source (aggregation, projection, sorting,
//! limits).

use std::sync::Arc;

use super::agg::{Acc, Aggregate, Group, GroupTable, SpilledGroups};
use super::explain::{push_filter, ExplainOptions};
use super::expr::{EvalContext, Expr};
use super::partition::HashStats;
use super::plan::{
    drain, keep_passing, passes, subplan_tables, Batch, Described, ExecCx, Filter, Flow,
    NodeCounts, PlanNode, SortKey, BATCH_ROWS_MAX,
};
use super::views::{UtilityCall, View};
use super::ExecError;
use crate::catalog::TableDef;
use crate::heap::Tid;
use crate::sort::{RowOrder, SortStats, SortedRows, Sorter};
use crate::types::{as_i64, sort_cmp, ColumnType, TypeError, Value};

/// One row: no columns (a SELECT without FROM), or the results of
/// utility calls side by side (`SELECT prewarm('t')`).
pub struct ResultNode {
    pub calls: Vec<UtilityCall>,
    pub filter: Option<Filter>,
    pub counts: NodeCounts,
    /// The row, computed once per statement: a rescan (the inner side of
    /// a nested loop) returns it again rather than calling the utilities
    /// again, as PostgreSQL runs a function scan once.
    row: Option<Vec<Value>>,
    done: bool,
}

impl ResultNode {
    pub fn new(calls: Vec<UtilityCall>, filter: Option<Filter>) -> ResultNode {
        ResultNode {
            calls,
            filter,
            counts: NodeCounts::default(),
            row: None,
            done: false,
        }
    }
}

impl PlanNode for ResultNode {
    fn next_batch(
        &mut self,
        cx: &mut ExecCx,
        out: &mut Batch,
        _max_rows: usize,
    ) -> Result<(), ExecError> {
        if std::mem::replace(&mut self.done, true) {
            return Ok(());
        }
        if self.row.is_none() {
            let mut row = Vec::new();
            for call in &self.calls {
                row.extend(call.run(cx.session)?);
            }
            self.row = Some(row);
        }
        out.rows.push(self.row.clone().expect("computed above"));
        keep_passing(self.filter.as_ref(), &mut self.counts, out, 0, cx)
    }

    fn rescan(&mut self, _: &mut ExecCx) -> Result<(), ExecError> {
        self.counts.rescans += 1;
        self.done = false;
        Ok(())
    }

    fn close(&mut self, _: &mut ExecCx) {
        self.done = true;
    }

    fn keeps_statement_state(&self) -> bool {
        !self.calls.is_empty()
    }

    fn describe(&self, opts: &ExplainOptions) -> Option<Described> {
        Some(leaf(
            "Result".into(),
            self.filter.as_ref(),
            self.counts,
            opts,
        ))
    }

    fn children(&self) -> Vec<&dyn PlanNode> {
        Vec::new()
    }

    fn expressions(&self) -> Vec<&Expr> {
        self.filter.iter().map(|f| &f.predicate).collect()
    }

    fn tables(&self, out: &mut Vec<Arc<TableDef>>) {
        // verify_index holds its table exclusively itself.
        out.extend(
            self.calls
                .iter()
                .filter(|c| c.utility != super::views::Utility::VerifyIndex)
                .map(|c| Arc::clone(&c.table)),
        );
        subplan_tables(self.expressions(), out);
    }
}

/// A leaf as EXPLAIN shows it: a title and its filter.
fn leaf(
    title: String,
    filter: Option<&Filter>,
    counts: NodeCounts,
    opts: &ExplainOptions,
) -> Described {
    let mut details = Vec::new();
    push_filter(&mut details, filter, counts, opts);
    Described {
        title,
        counts,
        details,
    }
}

/// A VALUES list.
pub struct ValuesNode {
    pub rows: Vec<Vec<Expr>>,
    pub filter: Option<Filter>,
    pub counts: NodeCounts,
    next: usize,
}

impl ValuesNode {
    pub fn new(rows: Vec<Vec<Expr>>, filter: Option<Filter>) -> ValuesNode {
        ValuesNode {
            rows,
            filter,
            counts: NodeCounts::default(),
            next: 0,
        }
    }
}

impl PlanNode for ValuesNode {
    fn next_batch(
        &mut self,
        cx: &mut ExecCx,
        out: &mut Batch,
        max_rows: usize,
    ) -> Result<(), ExecError> {
        while out.is_empty() && self.next < self.rows.len() {
            let end = (self.next + BATCH_ROWS_MAX.min(max_rows)).min(self.rows.len());
            for exprs in &self.rows[self.next..end] {
                let row = exprs
                    .iter()
                    .map(|e| e.eval(&[], cx))
                    .collect::<Result<Vec<_>, _>>()?;
                out.rows.push(row);
            }
            self.next = end;
            keep_passing(self.filter.as_ref(), &mut self.counts, out, 0, cx)?;
        }
        Ok(())
    }

    fn rescan(&mut self, _: &mut ExecCx) -> Result<(), ExecError> {
        self.counts.rescans += 1;
        self.next = 0;
        Ok(())
    }

    fn close(&mut self, _: &mut ExecCx) {
        self.next = self.rows.len();
    }

    fn describe(&self, opts: &ExplainOptions) -> Option<Described> {
        let title = "Values Scan on \"*VALUES*\"".to_string();
        Some(leaf(title, self.filter.as_ref(), self.counts, opts))
    }

    fn children(&self) -> Vec<&dyn PlanNode> {
        Vec::new()
    }

    fn expressions(&self) -> Vec<&Expr> {
        self.rows
            .iter()
            .flatten()
            .chain(self.filter.iter().map(|f| &f.predicate))
            .collect()
    }
}

/// `generate_series(start, stop[, step])`: one column of `ty`.
pub struct Series {
    /// The name the statement gave it ("generate_series" if none).
    pub alias: String,
    pub start: Expr,
    pub stop: Expr,
    pub step: Option<Expr>,
    /// Integer or bigint.
    pub ty: ColumnType,
}

impl Series {
    /// The first value, last value and step; `None` if one is NULL (no
    /// rows, as PostgreSQL).
    fn bounds(&self, ctx: &mut EvalContext) -> Result<Option<(i64, i64, i64)>, ExecError> {
        let mut bound =
            |e: &Expr| -> Result<Option<i64>, ExecError> { Ok(as_i64(&*e.eval_ref(&[], ctx)?)) };
        let (Some(first), Some(last)) = (bound(&self.start)?, bound(&self.stop)?) else {
            return Ok(None);
        };
        let step = match &self.step {
            Some(e) => match bound(e)? {
                Some(0) => return Err(ExecError::ZeroStep),
                Some(x) => x,
                None => return Ok(None),
            },
            None => 1,
        };
        Ok(Some((first, last, step)))
    }

    /// How many values it makes, if its bounds are constants (what
    /// PostgreSQL's planner knows of it then); None otherwise.
    pub fn rows_when_constant(&self) -> Option<f64> {
        let constant = |e: &Expr| e.as_const().and_then(as_i64);
        let (first, last) = (constant(&self.start)?, constant(&self.stop)?);
        let step = match &self.step {
            Some(e) => constant(e)?,
            None => 1,
        };
        if step == 0 {
            return None;
        }
        let span = (i128::from(last) - i128::from(first)) / i128::from(step);
        Some(if span < 0 { 0.0 } else { (span + 1) as f64 })
    }
}

/// Where a series is.
#[derive(Clone, Copy)]
enum SeriesState {
    NotStarted,
    /// The next value, the last, the step.
    At(i64, i64, i64),
    Done,
}

/// The rows of a [`Series`], computed as they are pulled (a series of a
/// billion values feeding an INSERT is never held in memory).
pub struct SeriesNode {
    pub series: Series,
    pub filter: Option<Filter>,
    pub counts: NodeCounts,
    state: SeriesState,
}

impl SeriesNode {
    pub fn new(series: Series, filter: Option<Filter>) -> SeriesNode {
        SeriesNode {
            series,
            filter,
            counts: NodeCounts::default(),
            state: SeriesState::NotStarted,
        }
    }
}

impl PlanNode for SeriesNode {
    fn next_batch(
        &mut self,
        cx: &mut ExecCx,
        out: &mut Batch,
        max_rows: usize,
    ) -> Result<(), ExecError> {
        // A leaf: every batch of every plan comes through one, so this is
        // where a cancel request or statement_timeout stops a statement.
        cx.session.check_interrupts()?;
        if let SeriesState::NotStarted = self.state {
            self.state = match self.series.bounds(cx.eval)? {
                Some((first, last, step)) => SeriesState::At(first, last, step),
                None => SeriesState::Done,
            };
        }
        while out.is_empty() {
            let SeriesState::At(mut i, last, step) = self.state else {
                return Ok(());
            };
            while out.len() < BATCH_ROWS_MAX.min(max_rows)
                && ((step > 0 && i <= last) || (step < 0 && i >= last))
            {
                out.rows.push(vec![match self.series.ty {
                    ColumnType::Integer => Value::Integer(
                        i32::try_from(i).map_err(|_| TypeError::OutOfRange { ty: "integer" })?,
                    ),
                    _ => Value::BigInt(i),
                }]);
                // Overflow past the type's end means the series is done.
                match i.checked_add(step) {
                    Some(next) => i = next,
                    None => {
                        i = last;
                        self.state = SeriesState::Done;
                        break;
                    }
                }
            }
            if let SeriesState::At(..) = self.state {
                let more = (step > 0 && i <= last) || (step < 0 && i >= last);
                self.state = if more {
                    SeriesState::At(i, last, step)
                } else {
                    SeriesState::Done
                };
            }
            keep_passing(self.filter.as_ref(), &mut self.counts, out, 0, cx)?;
        }
        Ok(())
    }

    fn rescan(&mut self, _: &mut ExecCx) -> Result<(), ExecError> {
        self.counts.rescans += 1;
        self.state = SeriesState::NotStarted;
        Ok(())
    }

    fn close(&mut self, _: &mut ExecCx) {
        self.state = SeriesState::Done;
    }

    fn describe(&self, opts: &ExplainOptions) -> Option<Described> {
        let title = if self.series.alias == "generate_series" {
            "Function Scan on generate_series".to_string()
        } else {
            format!("Function Scan on generate_series {}", self.series.alias)
        };
        Some(leaf(title, self.filter.as_ref(), self.counts, opts))
    }

    fn children(&self) -> Vec<&dyn PlanNode> {
        Vec::new()
    }

    fn expressions(&self) -> Vec<&Expr> {
        self.filter.iter().map(|f| &f.predicate).collect()
    }
}

/// A system view, read when first pulled.
pub struct ViewNode {
    pub view: View,
    pub filter: Option<Filter>,
    pub counts: NodeCounts,
    /// The view's rows, read once per statement: a rescan returns the
    /// same rows (one statement sees one version of the view).
    rows: Option<Vec<Vec<Value>>>,
    /// The next row to return.
    next: usize,
    done: bool,
}

impl ViewNode {
    pub fn new(view: View, filter: Option<Filter>) -> ViewNode {
        ViewNode {
            view,
            filter,
            counts: NodeCounts::default(),
            rows: None,
            next: 0,
            done: false,
        }
    }
}

impl PlanNode for ViewNode {
    fn next_batch(
        &mut self,
        cx: &mut ExecCx,
        out: &mut Batch,
        max_rows: usize,
    ) -> Result<(), ExecError> {
        if self.done {
            return Ok(());
        }
        let view = self.view;
        let viewer = cx.session.current_xid();
        let rows = self
            .rows
            .get_or_insert_with(|| view.rows(cx.session.db(), viewer));
        while out.is_empty() {
            let end = (self.next + BATCH_ROWS_MAX.min(max_rows)).min(rows.len());
            out.rows.extend_from_slice(&rows[self.next..end]);
            self.next = end;
            if out.is_empty() {
                self.done = true;
                return Ok(());
            }
            keep_passing(self.filter.as_ref(), &mut self.counts, out, 0, cx)?;
        }
        Ok(())
    }

    fn rescan(&mut self, _: &mut ExecCx) -> Result<(), ExecError> {
        self.counts.rescans += 1;
        self.next = 0;
        self.done = false;
        Ok(())
    }

    fn close(&mut self, _: &mut ExecCx) {
        self.done = true;
    }

    fn keeps_statement_state(&self) -> bool {
        true
    }

    fn describe(&self, opts: &ExplainOptions) -> Option<Described> {
        let title = format!("Function Scan on {}", self.view.name());
        Some(leaf(title, self.filter.as_ref(), self.counts, opts))
    }

    fn children(&self) -> Vec<&dyn PlanNode> {
        Vec::new()
    }

    fn expressions(&self) -> Vec<&Expr> {
        self.filter.iter().map(|f| &f.predicate).collect()
    }
}

/// The next batch of `child`'s rows (at most `max_rows`) that pass
/// `filter`, each batch shaped by `prepare` before it is filtered: the
/// loop of the nodes that filter their child's rows (Filter, Subquery
/// Scan). It pulls until some row passes or the child ends, so an empty
/// `out` means the end.
fn next_passing(
    child: &mut dyn PlanNode,
    filter: Option<&Filter>,
    counts: &mut NodeCounts,
    cx: &mut ExecCx,
    out: &mut Batch,
    max_rows: usize,
    mut prepare: impl FnMut(&mut Batch),
) -> Result<(), ExecError> {
    // Each pass reads a batch of the child; the child ends in a bounded
    // number of them.
    loop {
        child.next_batch(cx, out, max_rows)?;
        if out.is_empty() {
            return Ok(());
        }
        prepare(out);
        keep_passing(filter, counts, out, 0, cx)?;
        if !out.is_empty() {
            return Ok(());
        }
    }
}

/// Returns the rows of its child that pass a filter (a WHERE that
/// cannot be evaluated in a scan: over a join's rows).
pub struct FilterNode {
    pub child: Box<dyn PlanNode>,
    pub filter: Filter,
    pub counts: NodeCounts,
}

impl FilterNode {
    pub fn new(child: Box<dyn PlanNode>, filter: Filter) -> FilterNode {
        FilterNode {
            child,
            filter,
            counts: NodeCounts::default(),
        }
    }
}

impl PlanNode for FilterNode {
    fn next_batch(
        &mut self,
        cx: &mut ExecCx,
        out: &mut Batch,
        max_rows: usize,
    ) -> Result<(), ExecError> {
        next_passing(
            self.child.as_mut(),
            Some(&self.filter),
            &mut self.counts,
            cx,
            out,
            max_rows,
            |_| {},
        )
    }

    fn rescan(&mut self, cx: &mut ExecCx) -> Result<(), ExecError> {
        self.counts.rescans += 1;
        self.child.rescan(cx)
    }

    fn close(&mut self, cx: &mut ExecCx) {
        self.child.close(cx);
    }

    fn describe(&self, opts: &ExplainOptions) -> Option<Described> {
        let mut details = Vec::new();
        push_filter(&mut details, Some(&self.filter), self.counts, opts);
        Some(Described {
            title: "Filter".into(),
            counts: self.counts,
            details,
        })
    }

    fn children(&self) -> Vec<&dyn PlanNode> {
        vec![self.child.as_ref()]
    }

    fn expressions(&self) -> Vec<&Expr> {
        vec![&self.filter.predicate]
    }
}

/// A subquery in FROM (`(SELECT …) AS s`): its rows without the hidden
/// columns its tree may add after them (sort keys not selected), filtered
/// by the conditions that read only it.
pub struct SubqueryScanNode {
    pub child: Box<dyn PlanNode>,
    pub alias: String,
    /// The subquery's columns: rows are cut to this.
    pub width: usize,
    pub filter: Option<Filter>,
    pub counts: NodeCounts,
}

impl SubqueryScanNode {
    pub fn new(
        child: Box<dyn PlanNode>,
        alias: String,
        width: usize,
        filter: Option<Filter>,
    ) -> SubqueryScanNode {
        SubqueryScanNode {
            child,
            alias,
            width,
            filter,
            counts: NodeCounts::default(),
        }
    }
}

impl PlanNode for SubqueryScanNode {
    fn next_batch(
        &mut self,
        cx: &mut ExecCx,
        out: &mut Batch,
        max_rows: usize,
    ) -> Result<(), ExecError> {
        let width = self.width;
        next_passing(
            self.child.as_mut(),
            self.filter.as_ref(),
            &mut self.counts,
            cx,
            out,
            max_rows,
            |batch| {
                // Its rows are new rows, not a table's.
                batch.tids.clear();
                for row in &mut batch.rows {
                    debug_assert!(row.len() >= width, "a subquery's row has its columns");
                    row.truncate(width);
                }
            },
        )
    }

    fn rescan(&mut self, cx: &mut ExecCx) -> Result<(), ExecError> {
        self.counts.rescans += 1;
        self.child.rescan(cx)
    }

    fn close(&mut self, cx: &mut ExecCx) {
        self.child.close(cx);
    }

    fn bound_rows(&mut self, rows: u64) {
        // Row for row unless a filter drops some.
        if self.filter.is_none() {
            self.child.bound_rows(rows);
        }
    }

    fn describe(&self, opts: &ExplainOptions) -> Option<Described> {
        let title = format!("Subquery Scan on {}", self.alias);
        Some(leaf(title, self.filter.as_ref(), self.counts, opts))
    }

    fn children(&self) -> Vec<&dyn PlanNode> {
        vec![self.child.as_ref()]
    }

    fn expressions(&self) -> Vec<&Expr> {
        self.filter.iter().map(|f| &f.predicate).collect()
    }
}

/// The rows of each child in turn (UNION ALL); each child is closed as it
/// ends, so only one child's scan reads at a time.
pub struct AppendNode {
    pub inputs: Vec<Box<dyn PlanNode>>,
    pub counts: NodeCounts,
    /// The child being read.
    current: usize,
}

impl AppendNode {
    pub fn new(inputs: Vec<Box<dyn PlanNode>>) -> AppendNode {
        AppendNode {
            inputs,
            counts: NodeCounts::default(),
            current: 0,
        }
    }
}

impl PlanNode for AppendNode {
    fn next_batch(
        &mut self,
        cx: &mut ExecCx,
        out: &mut Batch,
        max_rows: usize,
    ) -> Result<(), ExecError> {
        // At most one pass over the children.
        while let Some(child) = self.inputs.get_mut(self.current) {
            child.next_batch(cx, out, max_rows)?;
            if !out.is_empty() {
                // The children's rows are not one table's.
                out.tids.clear();
                self.counts.rows += out.len() as u64;
                return Ok(());
            }
            child.close(cx);
            self.current += 1;
        }
        Ok(())
    }

    fn rescan(&mut self, cx: &mut ExecCx) -> Result<(), ExecError> {
        self.counts.rescans += 1;
        self.current = 0;
        for child in &mut self.inputs {
            child.rescan(cx)?;
        }
        Ok(())
    }

    fn close(&mut self, cx: &mut ExecCx) {
        self.current = self.inputs.len();
        for child in &mut self.inputs {
            child.close(cx);
        }
    }

    fn describe(&self, _: &ExplainOptions) -> Option<Described> {
        Some(Described {
            title: "Append".into(),
            counts: self.counts,
            details: Vec::new(),
        })
    }

    fn children(&self) -> Vec<&dyn PlanNode> {
        self.inputs.iter().map(|c| c.as_ref()).collect()
    }
}

/// Computes output columns from each row of its child.
pub struct ProjectNode {
    pub child: Box<dyn PlanNode>,
    pub exprs: Vec<Expr>,
    input: Batch,
}

impl ProjectNode {
    pub fn new(child: Box<dyn PlanNode>, exprs: Vec<Expr>) -> ProjectNode {
        ProjectNode {
            child,
            exprs,
            input: Batch::default(),
        }
    }
}

impl PlanNode for ProjectNode {
    fn next_batch(
        &mut self,
        cx: &mut ExecCx,
        out: &mut Batch,
        max_rows: usize,
    ) -> Result<(), ExecError> {
        self.input.clear();
        self.child.next_batch(cx, &mut self.input, max_rows)?;
        for row in &self.input.rows {
            let projected = self
                .exprs
                .iter()
                .map(|e| e.eval(row, cx))
                .collect::<Result<Vec<_>, _>>()?;
            out.rows.push(projected);
        }
        // A projection keeps the rows, so it keeps what they are.
        out.tids.append(&mut self.input.tids);
        Ok(())
    }

    fn rescan(&mut self, cx: &mut ExecCx) -> Result<(), ExecError> {
        self.child.rescan(cx)
    }

    fn close(&mut self, cx: &mut ExecCx) {
        self.child.close(cx);
    }

    fn bound_rows(&mut self, rows: u64) {
        // One row out for each row in.
        self.child.bound_rows(rows);
    }

    fn describe(&self, _: &ExplainOptions) -> Option<Described> {
        None
    }

    fn children(&self) -> Vec<&dyn PlanNode> {
        vec![self.child.as_ref()]
    }

    fn expressions(&self) -> Vec<&Expr> {
        self.exprs.iter().collect()
    }
}

/// Pulls every row of `child`, handing each batch to `f`, and closes it:
/// for the nodes that must see all their input before returning a row.
fn consume(
    child: &mut dyn PlanNode,
    cx: &mut ExecCx,
    mut f: impl FnMut(&mut Batch, &mut ExecCx) -> Result<(), ExecError>,
) -> Result<(), ExecError> {
    // `drain` closes it at the end: its scans' streams and pins are not
    // needed while the result is returned.
    drain(child, cx, |cx, batch| {
        f(batch, cx)?;
        Ok(Flow::Continue)
    })
}

/// Sorts everything its child returns (a stable sort), in `work_mem`:
/// beyond it the sort spills runs to temporary files and merges them
/// (`sort::Sorter`). With `keep_tids` (a LockRows above: `ORDER BY … FOR
/// UPDATE`), rows that come with their tuple ids keep them, each carried
/// through the sort as one more value of its row; otherwise the ids are
/// dropped (no sort pays for them unasked).
pub struct SortNode {
    pub child: Box<dyn PlanNode>,
    pub keys: Vec<SortKey>,
    /// Only this many first rows will be pulled (a LIMIT above): a top-N
    /// sort, which holds about twice that many rows.
    pub bound: Option<usize>,
    /// Its rows keep their tuple ids (see above).
    pub keep_tids: bool,
    pub counts: NodeCounts,
    sorted: Option<SortedRows>,
    /// The sorted rows end with their tuple ids ([`tid_value`]).
    with_tids: bool,
    /// The last sort's statistics, for EXPLAIN ANALYZE.
    stats: Option<SortStats>,
}

/// A tuple id as a value a row can carry through a sort.
fn tid_value(tid: Tid) -> Value {
    Value::BigInt(i64::from(tid.block) << 16 | i64::from(tid.index))
}

/// The tuple id [`tid_value`] made.
fn value_tid(v: &Value) -> Option<Tid> {
    match *v {
        Value::BigInt(x) => Some(Tid {
            block: u32::try_from(x >> 16).ok()?,
            index: (x & 0xFFFF) as u16,
        }),
        _ => None,
    }
}

impl SortNode {
    pub fn new(child: Box<dyn PlanNode>, keys: Vec<SortKey>) -> SortNode {
        SortNode {
            child,
            keys,
            bound: None,
            keep_tids: false,
            counts: NodeCounts::default(),
            sorted: None,
            with_tids: false,
            stats: None,
        }
    }

    /// Consumes the child into a sort.
    fn sort(&mut self, cx: &mut ExecCx) -> Result<SortedRows, ExecError> {
        let keys = self.keys.clone();
        let order: RowOrder = Box::new(move |x, y| compare_rows(&keys, x, y));
        let mut sorter = Sorter::new(
            order,
            cx.session.settings.work_mem_bytes(),
            &cx.session.db().temp_dir(),
        );
        if let Some(bound) = self.bound {
            sorter = sorter.with_bound(bound);
        }
        let mut with_tids = None;
        let keep_tids = self.keep_tids;
        consume(self.child.as_mut(), cx, |batch, _| {
            if !keep_tids {
                batch.tids.clear();
            }
            let tids = !batch.tids.is_empty();
            if *with_tids.get_or_insert(tids) != tids {
                return Err(ExecError::Internal(
                    "a sort's input gave tuple ids with some batches only",
                ));
            }
            let mut tids = batch.tids.drain(..);
            for mut row in batch.rows.drain(..) {
                if let Some(tid) = tids.next() {
                    row.push(tid_value(tid));
                }
                sorter.push(row)?;
            }
            debug_assert!(tids.next().is_none(), "a tid per row");
            Ok(())
        })?;
        self.with_tids = with_tids.unwrap_or(false);
        Ok(sorter.finish()?)
    }
}

/// Orders two rows by `keys`, the first key first.
fn compare_rows(keys: &[SortKey], x: &[Value], y: &[Value]) -> std::cmp::Ordering {
    for k in keys {
        let (a, b) = (
            x.get(k.column).unwrap_or(&Value::Null),
            y.get(k.column).unwrap_or(&Value::Null),
        );
        let ord = sort_cmp(a, b, k.nulls_first);
        // DESC reverses values, not where NULLs go.
        let ord = if k.descending && !a.is_null() && !b.is_null() {
            ord.reverse()
        } else {
            ord
        };
        if ord.is_ne() {
            return ord;
        }
    }
    std::cmp::Ordering::Equal
}

impl PlanNode for SortNode {
    fn next_batch(
        &mut self,
        cx: &mut ExecCx,
        out: &mut Batch,
        max_rows: usize,
    ) -> Result<(), ExecError> {
        if self.sorted.is_none() {
            let sorted = self.sort(cx)?;
            self.stats = Some(sorted.stats());
            self.sorted = Some(sorted);
        }
        let sorted = self.sorted.as_mut().expect("sorted above");
        let want = BATCH_ROWS_MAX.min(max_rows);
        while out.len() < want {
            match sorted.next_row()? {
                Some(mut row) => {
                    if self.with_tids {
                        let tid = row
                            .pop()
                            .as_ref()
                            .and_then(value_tid)
                            .ok_or(ExecError::Internal("a sorted row lost its tuple id"))?;
                        out.tids.push(tid);
                    }
                    out.rows.push(row);
                }
                None => break,
            }
        }
        self.counts.rows += out.len() as u64;
        Ok(())
    }

    fn rescan(&mut self, cx: &mut ExecCx) -> Result<(), ExecError> {
        self.counts.rescans += 1;
        self.sorted = None;
        self.child.rescan(cx)
    }

    fn close(&mut self, cx: &mut ExecCx) {
        // Drops the runs' files; an empty source keeps returning nothing
        // until a rescan.
        self.sorted = Some(SortedRows::empty());
        self.child.close(cx);
    }

    fn describe(&self, opts: &ExplainOptions) -> Option<Described> {
        let keys: Vec<&str> = self.keys.iter().map(|k| k.label.as_str()).collect();
        let mut details = vec![format!("Sort Key: {}", keys.join(", "))];
        if let (true, Some(stats)) = (opts.analyze, self.stats) {
            // PostgreSQL's words and units.
            details.push(if stats.external {
                // A top-N sort spills only when n rows exceed work_mem;
                // then it is an external merge of cut runs.
                format!(
                    "Sort Method: external merge  Disk: {}kB  Runs: {}",
                    stats.spilled_bytes.div_ceil(1024),
                    stats.runs
                )
            } else {
                format!(
                    "Sort Method: {}  Memory: {}kB",
                    if stats.top_n {
                        "top-N sort"
                    } else {
                        "quicksort"
                    },
                    stats.peak_memory_bytes.div_ceil(1024)
                )
            });
        }
        Some(Described {
            title: "Sort".into(),
            counts: self.counts,
            details,
        })
    }

    fn children(&self) -> Vec<&dyn PlanNode> {
        vec![self.child.as_ref()]
    }
}

/// OFFSET and LIMIT: once it has returned `count` rows it closes its
/// child, which stops a scan below it from reading further.
pub struct LimitNode {
    pub child: Box<dyn PlanNode>,
    pub offset: u64,
    pub count: Option<u64>,
    pub counts: NodeCounts,
    skipped: u64,
    /// Rows returned in this run.
    returned: u64,
    done: bool,
    input: Batch,
}

impl LimitNode {
    pub fn new(mut child: Box<dyn PlanNode>, offset: u64, count: Option<u64>) -> LimitNode {
        if let Some(count) = count {
            child.bound_rows(offset.saturating_add(count));
        }
        LimitNode {
            child,
            offset,
            count,
            counts: NodeCounts::default(),
            skipped: 0,
            returned: 0,
            done: false,
            input: Batch::default(),
        }
    }

    fn reached(&self) -> bool {
        self.count.is_some_and(|c| self.returned >= c)
    }
}

impl PlanNode for LimitNode {
    fn bound_rows(&mut self, rows: u64) {
        // The tighter of the two: a LIMIT of a LIMIT.
        let within = self.offset.saturating_add(rows);
        let own = self.count.map(|c| self.offset.saturating_add(c));
        self.child
            .bound_rows(own.map_or(within, |own| own.min(within)));
    }

    fn next_batch(
        &mut self,
        cx: &mut ExecCx,
        out: &mut Batch,
        max_rows: usize,
    ) -> Result<(), ExecError> {
        while !self.done && out.is_empty() {
            if self.reached() {
                self.done = true;
                self.child.close(cx);
                break;
            }
            self.input.clear();
            // Only the rows still to skip and to return, and no more
            // than the parent asked for.
            let room = match self.count {
                Some(c) => (c - self.returned) as usize,
                None => usize::MAX,
            };
            let want = ((self.offset - self.skipped) as usize)
                .saturating_add(room.min(max_rows))
                .max(1);
            self.child.next_batch(cx, &mut self.input, want)?;
            if self.input.is_empty() {
                self.done = true;
                break;
            }
            let skip = (self.offset - self.skipped).min(self.input.len() as u64) as usize;
            self.skipped += skip as u64;
            let take = (self.input.len() - skip).min(room).min(max_rows);
            out.rows.extend(self.input.rows.drain(skip..skip + take));
            if !self.input.tids.is_empty() {
                out.tids
                    .extend_from_slice(&self.input.tids[skip..skip + take]);
            }
            self.returned += take as u64;
            self.counts.rows += take as u64;
        }
        Ok(())
    }

    fn rescan(&mut self, cx: &mut ExecCx) -> Result<(), ExecError> {
        self.counts.rescans += 1;
        self.skipped = 0;
        self.returned = 0;
        self.done = false;
        self.child.rescan(cx)
    }

    fn close(&mut self, cx: &mut ExecCx) {
        self.done = true;
        self.child.close(cx);
    }

    fn describe(&self, _: &ExplainOptions) -> Option<Described> {
        Some(Described {
            title: "Limit".into(),
            counts: self.counts,
            details: Vec::new(),
        })
    }

    fn children(&self) -> Vec<&dyn PlanNode> {
        vec![self.child.as_ref()]
    }
}

/// Grouping and aggregates over its child's rows; returns `[group
/// values…, aggregate results…]` per group (one group, even for no input,
/// without GROUP BY), filtered by HAVING. Groups are kept in a hash table
/// within `work_mem` ([`GroupTable`]); beyond it, rows of new groups spill
/// to partitions aggregated one after another once the table's groups
/// were returned, so neither the table nor the result is ever held whole.
pub struct AggregateNode {
    pub child: Box<dyn PlanNode>,
    pub(crate) groups: Vec<Expr>,
    pub(crate) group_labels: Vec<String>,
    pub(crate) aggs: Vec<Aggregate>,
    /// HAVING, over the returned row.
    pub(crate) having: Option<Filter>,
    pub counts: NodeCounts,
    state: AggState,
    stats: HashStats,
}

/// Where an aggregation is.
enum AggState {
    /// Not started, or rescanned.
    Start,
    /// Returning the groups of one table, with partitions still to
    /// aggregate after them.
    Returning {
        groups: std::vec::IntoIter<Group>,
        pending: Vec<SpilledGroups>,
    },
    /// Every group returned, or closed.
    Done,
}

impl AggregateNode {
    pub fn new(
        child: Box<dyn PlanNode>,
        groups: Vec<Expr>,
        group_labels: Vec<String>,
        aggs: Vec<Aggregate>,
        having: Option<Filter>,
    ) -> AggregateNode {
        AggregateNode {
            child,
            groups,
            group_labels,
            aggs,
            having,
            counts: NodeCounts::default(),
            state: AggState::Start,
            stats: HashStats::default(),
        }
    }

    /// Consumes the child: its one group without GROUP BY, else its
    /// groups' table and the partitions spilled from it.
    fn aggregate_input(&mut self, cx: &mut ExecCx) -> Result<AggState, ExecError> {
        let AggregateNode {
            child,
            groups,
            aggs,
            ..
        } = self;
        if groups.is_empty() {
            let mut single: Vec<Acc> = aggs.iter().map(Aggregate::start).collect();
            consume(child.as_mut(), cx, |batch, eval| {
                for row in &batch.rows {
                    for (agg, acc) in aggs.iter().zip(single.iter_mut()) {
                        agg.update(acc, row, eval)?;
                    }
                }
                Ok(())
            })?;
            return Ok(AggState::Returning {
                groups: vec![(Vec::new(), single)].into_iter(),
                pending: Vec::new(),
            });
        }
        let mut table = GroupTable::new(
            0,
            cx.session.settings.work_mem_bytes(),
            &cx.session.db().temp_dir(),
        );
        consume(child.as_mut(), cx, |batch, eval| {
            for row in &batch.rows {
                table.add(row, groups, aggs, eval)?;
            }
            Ok(())
        })?;
        let (groups, pending) = table.finish(&mut self.stats)?;
        Ok(AggState::Returning {
            groups: groups.into_iter(),
            pending,
        })
    }

    /// Aggregates the rows of one spilled partition.
    fn aggregate_partition(
        &mut self,
        part: SpilledGroups,
        cx: &mut ExecCx,
    ) -> Result<(Vec<Group>, Vec<SpilledGroups>), ExecError> {
        let SpilledGroups { mut rows, depth } = part;
        let mut table = GroupTable::new(
            depth,
            cx.session.settings.work_mem_bytes(),
            &cx.session.db().temp_dir(),
        );
        let key_len = self.groups.len();
        while let Some(row) = rows.next_row()? {
            table.add_spilled(&row, key_len, &self.aggs, cx)?;
        }
        table.finish(&mut self.stats)
    }
}

impl PlanNode for AggregateNode {
    fn next_batch(
        &mut self,
        cx: &mut ExecCx,
        out: &mut Batch,
        max_rows: usize,
    ) -> Result<(), ExecError> {
        let want = BATCH_ROWS_MAX.min(max_rows);
        while out.len() < want {
            match &mut self.state {
                AggState::Start => self.state = self.aggregate_input(cx)?,
                AggState::Done => break,
                AggState::Returning { groups, pending } => {
                    if let Some((keys, accs)) = groups.next() {
                        let mut row = keys;
                        for (agg, acc) in self.aggs.iter().zip(&accs) {
                            row.push(agg.result(acc)?);
                        }
                        if passes(self.having.as_ref(), &mut self.counts, &row, cx)? {
                            out.rows.push(row);
                        }
                    } else if let Some(part) = pending.pop() {
                        let mut pending = std::mem::take(pending);
                        let (groups, more) = self.aggregate_partition(part, cx)?;
                        pending.extend(more);
                        self.state = AggState::Returning {
                            groups: groups.into_iter(),
                            pending,
                        };
                    } else {
                        self.state = AggState::Done;
                    }
                }
            }
        }
        Ok(())
    }

    fn rescan(&mut self, cx: &mut ExecCx) -> Result<(), ExecError> {
        self.counts.rescans += 1;
        self.state = AggState::Start;
        self.child.rescan(cx)
    }

    fn close(&mut self, cx: &mut ExecCx) {
        // Drops the spilled partitions' files.
        self.state = AggState::Done;
        self.child.close(cx);
    }

    fn describe(&self, opts: &ExplainOptions) -> Option<Described> {
        let mut details = Vec::new();
        if !self.group_labels.is_empty() {
            details.push(format!("Group Key: {}", self.group_labels.join(", ")));
            if opts.analyze {
                details.extend(self.stats.explain_line());
            }
        }
        push_filter(&mut details, self.having.as_ref(), self.counts, opts);
        Some(Described {
            title: if self.groups.is_empty() {
                "Aggregate".into()
            } else {
                "HashAggregate".into()
            },
            counts: self.counts,
            details,
        })
    }

    fn children(&self) -> Vec<&dyn PlanNode> {
        vec![self.child.as_ref()]
    }

    fn expressions(&self) -> Vec<&Expr> {
        self.having.iter().map(|f| &f.predicate).collect()
    }
}

/// Which rows an INTERSECT or EXCEPT keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetOpKind {
    Intersect,
    Except,
}

/// INTERSECT [ALL] and EXCEPT [ALL] (PostgreSQL's HashSetOp): its child
/// returns each row of either side with its side after it (0 for the
/// left, 1 for the right); rows are counted per side in a hash
/// aggregation (which spills beyond `work_mem` as GROUP BY does), and
/// each distinct row is returned as many times as the operation keeps
/// it: once if on both sides (INTERSECT) or only on the left (EXCEPT);
/// with ALL, the smaller count, or the left count less the right one.
pub struct SetOpNode {
    /// Groups by every column, counting rows (`count(*)`) and right-side
    /// rows (`sum(side)`).
    agg: AggregateNode,
    pub kind: SetOpKind,
    pub all: bool,
    pub counts: NodeCounts,
    /// A row still to be returned, and how many more times.
    pending: Option<(Vec<Value>, u64)>,
    input: Batch,
}

impl SetOpNode {
    /// Over `child`, whose rows are `keys` (every column) and the side.
    pub fn new(
        child: Box<dyn PlanNode>,
        keys: Vec<Expr>,
        labels: Vec<String>,
        kind: SetOpKind,
        all: bool,
    ) -> SetOpNode {
        let side = Expr::column(keys.len(), ColumnType::Integer);
        let aggs = vec![
            Aggregate::new(super::agg::AggFunc::CountStar, None).expect("count(*) is valid"),
            Aggregate::new(super::agg::AggFunc::Sum, Some(side)).expect("sum(integer) is valid"),
        ];
        SetOpNode {
            agg: AggregateNode::new(child, keys, labels, aggs, None),
            kind,
            all,
            counts: NodeCounts::default(),
            pending: None,
            input: Batch::default(),
        }
    }

    /// How many times a row seen `left` and `right` times is returned.
    fn copies(&self, left: u64, right: u64) -> u64 {
        match (self.kind, self.all) {
            (SetOpKind::Intersect, false) => u64::from(left > 0 && right > 0),
            (SetOpKind::Intersect, true) => left.min(right),
            (SetOpKind::Except, false) => u64::from(left > 0 && right == 0),
            (SetOpKind::Except, true) => left.saturating_sub(right),
        }
    }
}

impl PlanNode for SetOpNode {
    fn next_batch(
        &mut self,
        cx: &mut ExecCx,
        out: &mut Batch,
        max_rows: usize,
    ) -> Result<(), ExecError> {
        let want = BATCH_ROWS_MAX.min(max_rows);
        let width = self.agg.groups.len();
        // Each pass returns a pending row's copies or reads groups; it ends
        // when the batch is full or the groups are.
        loop {
            if let Some((row, left)) = &mut self.pending {
                while *left > 0 && out.len() < want {
                    out.rows.push(row.clone());
                    *left -= 1;
                }
                if *left > 0 {
                    break;
                }
                self.pending = None;
            }
            if out.len() >= want {
                break;
            }
            if self.input.is_empty() {
                self.agg.next_batch(cx, &mut self.input, BATCH_ROWS_MAX)?;
                if self.input.is_empty() {
                    break;
                }
                // Taken from the end below: keep the groups' order.
                self.input.rows.reverse();
            }
            let Some(mut row) = self.input.rows.pop() else {
                continue;
            };
            let count = |v: Option<&Value>| as_i64(v.unwrap_or(&Value::Null)).unwrap_or(0);
            let total = count(row.get(width));
            let right = count(row.get(width + 1));
            debug_assert!(
                (0..=total).contains(&right),
                "right-side rows are some of the rows"
            );
            let copies = self.copies((total - right) as u64, right as u64);
            row.truncate(width);
            if copies > 0 {
                self.pending = Some((row, copies));
            }
        }
        self.counts.rows += out.len() as u64;
        Ok(())
    }

    fn rescan(&mut self, cx: &mut ExecCx) -> Result<(), ExecError> {
        self.counts.rescans += 1;
        self.pending = None;
        self.input.clear();
        self.agg.rescan(cx)
    }

    fn close(&mut self, cx: &mut ExecCx) {
        self.pending = None;
        self.input.clear();
        self.agg.close(cx);
    }

    fn describe(&self, _: &ExplainOptions) -> Option<Described> {
        let op = match self.kind {
            SetOpKind::Intersect => "Intersect",
            SetOpKind::Except => "Except",
        };
        Some(Described {
            title: format!("HashSetOp {op}{}", if self.all { " All" } else { "" }),
            counts: self.counts,
            details: Vec::new(),
        })
    }

    fn children(&self) -> Vec<&dyn PlanNode> {
        // The counting aggregation is part of this node.
        vec![self.agg.child.as_ref()]
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::database::Session;
    use crate::exec::plan::{drain, Flow};
    use crate::exec::{agg::AggFunc, SeqScanNode};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A count shared between a test and a node it made (nodes are Send).
    #[derive(Clone, Default)]
    pub(crate) struct Count(Arc<AtomicUsize>);

    impl Count {
        pub(crate) fn get(&self) -> usize {
            self.0.load(Ordering::Relaxed)
        }
        fn add(&self, n: usize) {
            self.0.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Rows given up front, returned at most `chunk` per batch, counting
    /// the rows it was asked for and returned.
    pub(crate) struct Rows {
        rows: Vec<Vec<Value>>,
        chunk: usize,
        next: usize,
        /// Shared with the test, which reads it once the node is a child.
        returned: Count,
    }

    impl PlanNode for Rows {
        fn next_batch(
            &mut self,
            _: &mut ExecCx,
            out: &mut Batch,
            max_rows: usize,
        ) -> Result<(), ExecError> {
            assert!(max_rows >= 1);
            let end = (self.next + self.chunk.min(max_rows)).min(self.rows.len());
            out.rows.extend_from_slice(&self.rows[self.next..end]);
            self.returned.add(end - self.next);
            self.next = end;
            Ok(())
        }
        fn rescan(&mut self, _: &mut ExecCx) -> Result<(), ExecError> {
            self.next = 0;
            Ok(())
        }
        fn close(&mut self, _: &mut ExecCx) {
            self.next = self.rows.len();
        }
        fn describe(&self, _: &ExplainOptions) -> Option<Described> {
            None
        }
        fn children(&self) -> Vec<&dyn PlanNode> {
            Vec::new()
        }
    }

    /// A source of `input`, two rows a batch, and the count of rows it
    /// returned.
    pub(crate) fn rows(input: &[Vec<Value>]) -> (Box<Rows>, Count) {
        let returned = Count::default();
        let node = Box::new(Rows {
            rows: input.to_vec(),
            chunk: 2,
            next: 0,
            returned: returned.clone(),
        });
        (node, returned)
    }

    use crate::database::test_session as session;

    /// Runs `f` with an executor context, inside a statement of `s`.
    pub(crate) fn in_statement<R>(s: &mut Session, f: impl FnOnce(&mut ExecCx) -> R) -> R {
        let snapshot = s.start_statement().unwrap();
        let mut eval = EvalContext::new();
        let result = f(&mut ExecCx {
            session: s,
            snapshot: snapshot.get(),
            eval: &mut eval,
        });
        drop(snapshot);
        s.end_statement(true).unwrap();
        result
    }

    /// Every row `root` returns.
    pub(crate) fn pull(s: &mut Session, root: &mut dyn PlanNode) -> Vec<Vec<Value>> {
        in_statement(s, |cx| {
            let mut got = Vec::new();
            drain(root, cx, |_, batch| {
                got.append(&mut batch.rows);
                Ok(Flow::Continue)
            })
            .unwrap();
            got
        })
    }

    fn ints(xs: &[Option<i32>]) -> Vec<Vec<Value>> {
        xs.iter()
            .map(|x| vec![x.map_or(Value::Null, Value::Integer)])
            .collect()
    }

    fn key(descending: bool, nulls_first: bool) -> SortKey {
        SortKey {
            column: 0,
            descending,
            nulls_first,
            label: String::new(),
        }
    }

    #[test]
    fn sort_puts_nulls_last_ascending_and_first_descending() {
        let (mut s, _dir) = session();
        let input = ints(&[Some(2), None, Some(1), Some(3)]);
        let mut sort = SortNode::new(rows(&input).0, vec![key(false, false)]);
        assert_eq!(
            pull(&mut s, &mut sort),
            ints(&[Some(1), Some(2), Some(3), None])
        );
        let mut sort = SortNode::new(rows(&input).0, vec![key(true, true)]);
        assert_eq!(
            pull(&mut s, &mut sort),
            ints(&[None, Some(3), Some(2), Some(1)])
        );
        let mut sort = SortNode::new(rows(&input).0, vec![key(true, false)]);
        assert_eq!(
            pull(&mut s, &mut sort),
            ints(&[Some(3), Some(2), Some(1), None])
        );
    }

    #[test]
    fn limit_skips_the_offset_and_asks_its_child_for_no_more_than_it_needs() {
        let (mut s, _dir) = session();
        let input = ints(&[Some(1), Some(2), Some(3), Some(4), Some(5)]);
        let (child, returned) = rows(&input);
        let mut limit = LimitNode::new(child, 1, Some(2));
        assert_eq!(pull(&mut s, &mut limit), ints(&[Some(2), Some(3)]));
        assert_eq!((limit.skipped, limit.counts.rows), (1, 2));
        assert_eq!(
            returned.get(),
            3,
            "the child returned only the offset and the limit"
        );
        // A rescan starts over.
        in_statement(&mut s, |cx| limit.rescan(cx).unwrap());
        assert_eq!(pull(&mut s, &mut limit), ints(&[Some(2), Some(3)]));
    }

    #[test]
    fn limit_zero_never_pulls_its_child() {
        let (mut s, _dir) = session();
        let (child, returned) = rows(&ints(&[Some(1)]));
        let mut limit = LimitNode::new(child, 0, Some(0));
        assert!(pull(&mut s, &mut limit).is_empty());
        assert_eq!(returned.get(), 0);
    }

    #[test]
    fn grouping_without_groups_gives_one_row_even_for_no_input() {
        let (mut s, _dir) = session();
        let count = Aggregate::new(AggFunc::CountStar, None).unwrap();
        let mut agg = AggregateNode::new(rows(&[]).0, vec![], vec![], vec![count], None);
        assert_eq!(pull(&mut s, &mut agg), vec![vec![Value::BigInt(0)]]);
        let count = Aggregate::new(AggFunc::CountStar, None).unwrap();
        let group = Expr::column(0, ColumnType::Integer);
        let input = ints(&[Some(1), None, Some(1), None, Some(2)]);
        let mut agg = AggregateNode::new(
            rows(&input).0,
            vec![group],
            vec![String::new()],
            vec![count],
            None,
        );
        assert_eq!(
            pull(&mut s, &mut agg),
            vec![
                vec![Value::Integer(1), Value::BigInt(2)],
                vec![Value::Null, Value::BigInt(2)],
                vec![Value::Integer(2), Value::BigInt(1)],
            ]
        );
    }

    #[test]
    fn a_series_and_values_return_batches_of_at_most_what_is_asked() {
        let (mut s, _dir) = session();
        let lit = |v: i64| Expr::constant(Value::BigInt(v));
        let series = Series {
            alias: "generate_series".into(),
            start: lit(1),
            stop: lit(1000),
            step: None,
            ty: ColumnType::BigInt,
        };
        let mut limit = LimitNode::new(Box::new(SeriesNode::new(series, None)), 0, Some(300));
        let got = pull(&mut s, &mut limit);
        assert_eq!(got.len(), 300);
        assert_eq!(got[299], vec![Value::BigInt(300)]);
        let values = (0..600).map(|i| vec![lit(i)]).collect();
        let mut node = ValuesNode::new(values, None);
        assert_eq!(pull(&mut s, &mut node).len(), 600);
    }

    #[test]
    fn a_scan_paused_mid_page_and_rescanned_returns_every_row_once() {
        let (mut s, _dir) = session();
        crate::sql::execute(
            &mut s,
            "CREATE TABLE t (id int); INSERT INTO t SELECT i FROM generate_series(1, 2000) i",
        )
        .unwrap();
        let table = s.db().catalog().table("t").unwrap();
        let mut scan = SeqScanNode::new(table, None, vec![true], None);
        let all = in_statement(&mut s, |cx| {
            // Three rows at a time: the scan pauses inside its first page.
            let mut got = Vec::new();
            for _ in 0..5 {
                let mut batch = Batch::default();
                scan.next_batch(cx, &mut batch, 3).unwrap();
                assert_eq!(batch.len(), 3);
                assert_eq!(batch.tids.len(), 3);
                got.extend(batch.rows);
            }
            assert_eq!(
                got,
                (1..=15)
                    .map(|i| vec![Value::Integer(i)])
                    .collect::<Vec<_>>()
            );
            assert_eq!(scan.counts.rows, 15, "rows counted as returned");
            scan.rescan(cx).unwrap();
            let mut all = Vec::new();
            loop {
                let mut batch = Batch::default();
                scan.next_batch(cx, &mut batch, 7).unwrap();
                if batch.is_empty() {
                    break;
                }
                all.extend(batch.rows);
            }
            scan.close(cx);
            all
        });
        assert_eq!(
            all,
            (1..=2000)
                .map(|i| vec![Value::Integer(i)])
                .collect::<Vec<_>>()
        );
        assert_eq!(s.buf.pinned_count(), 0, "the scan let go of every page");
    }
}
