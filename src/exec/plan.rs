//! Pipelines: a source, a filter and operators, run by pushing rows (see
//! the module comment of `exec`).

use std::collections::HashMap;
use std::sync::Arc;

use super::agg::{Acc, Aggregate, GroupKey};
use super::expr::{EvalContext, Expr};
use super::value::is_true;
use super::views::{UtilityCall, View};
use super::ExecError;
use crate::catalog::TableDef;
use crate::database::Session;
use crate::heap::tuple::decode;
use crate::heap::{ScanControl, ScanStats, Tid};
use crate::txn::Snapshot;
use crate::types::{as_i64, sort_cmp, ColumnType, TypeError, Value};

/// What a consumer wants after a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// No more rows are needed (a limit was reached).
    Stop,
}

/// A sequential scan of a table.
pub struct ScanNode {
    pub table: Arc<TableDef>,
    /// The name the statement gave it, if not its own.
    pub alias: Option<String>,
    /// Columns some expression reads; the others are not decoded.
    pub wanted: Vec<bool>,
    /// Figures of the scan once it ran (EXPLAIN ANALYZE).
    pub stats: Option<ScanStats>,
}

impl ScanNode {
    /// A scan of `table` decoding the columns `wanted` marks.
    pub fn new(table: Arc<TableDef>, alias: Option<String>, wanted: Vec<bool>) -> ScanNode {
        debug_assert_eq!(wanted.len(), table.columns.len());
        ScanNode {
            table,
            alias,
            wanted,
            stats: None,
        }
    }
}

/// Where a pipeline's rows come from.
pub enum Source {
    /// One row without columns (SELECT without FROM).
    Result,
    SeqScan(ScanNode),
    Series(Series),
    /// A system view, read when the statement runs.
    View(View),
    /// One row: the results of the calls, side by side.
    Utility(Vec<UtilityCall>),
    /// A VALUES list.
    Values(Vec<Vec<Expr>>),
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
}

/// A predicate with the text EXPLAIN shows for it.
pub struct Filter {
    pub predicate: Expr,
    pub label: String,
}

/// Whether `row` passes `filter` (with none, every row does), counted in
/// `counts` as produced or removed: WHERE, HAVING and the WHERE of UPDATE
/// and DELETE all keep rows this way.
pub(crate) fn passes(
    filter: Option<&Filter>,
    counts: &mut NodeCounts,
    row: &[Value],
    ctx: &mut EvalContext,
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

/// Rows a node produced and removed, for EXPLAIN ANALYZE.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeCounts {
    pub rows: u64,
    /// Rows its filter removed.
    pub removed: u64,
}

/// A sort key: a column of the rows reaching the sort.
pub struct SortKey {
    pub column: usize,
    pub descending: bool,
    pub nulls_first: bool,
    pub label: String,
}

/// An operator of a pipeline.
pub enum Op {
    /// Boxed: its hash table makes it several times larger than the others.
    Aggregate(Box<AggregateOp>),
    Project(ProjectOp),
    Sort(SortOp),
    Limit(LimitOp),
}

/// Grouping and aggregates; emits `[group values…, aggregate results…]`.
pub struct AggregateOp {
    pub(crate) groups: Vec<Expr>,
    pub(crate) group_labels: Vec<String>,
    pub(crate) aggs: Vec<Aggregate>,
    /// HAVING, over the emitted row.
    pub(crate) having: Option<Filter>,
    /// The only group when there is no GROUP BY.
    single: Vec<Acc>,
    /// The key of the row being added, kept to reuse its allocation.
    key: GroupKey,
    index: HashMap<GroupKey, usize>,
    /// Groups in order of first appearance.
    grouped: Vec<(Vec<Value>, Vec<Acc>)>,
    pub counts: NodeCounts,
}

/// Computes output columns.
pub struct ProjectOp {
    exprs: Vec<Expr>,
    buf: Vec<Value>,
}

/// Sorts everything it receives.
pub struct SortOp {
    pub(crate) keys: Vec<SortKey>,
    rows: Vec<Vec<Value>>,
    pub counts: NodeCounts,
}

/// OFFSET and LIMIT.
pub struct LimitOp {
    pub(crate) offset: u64,
    pub(crate) count: Option<u64>,
    skipped: u64,
    pub counts: NodeCounts,
}

impl Op {
    /// Groups by `groups` (no groups: one group, which exists even for no
    /// input) and computes `aggs`; `having` filters the result rows.
    pub fn aggregate(
        groups: Vec<Expr>,
        group_labels: Vec<String>,
        aggs: Vec<Aggregate>,
        having: Option<Filter>,
    ) -> Op {
        let single = aggs.iter().map(Aggregate::start).collect();
        Op::Aggregate(Box::new(AggregateOp {
            groups,
            group_labels,
            aggs,
            having,
            single,
            key: GroupKey(Vec::new()),
            index: HashMap::new(),
            grouped: Vec::new(),
            counts: NodeCounts::default(),
        }))
    }

    /// Replaces each row by `exprs` evaluated over it.
    pub fn project(exprs: Vec<Expr>) -> Op {
        Op::Project(ProjectOp {
            buf: Vec::with_capacity(exprs.len()),
            exprs,
        })
    }

    /// Sorts by `keys`, the first one first (a stable sort).
    pub fn sort(keys: Vec<SortKey>) -> Op {
        Op::Sort(SortOp {
            keys,
            rows: Vec::new(),
            counts: NodeCounts::default(),
        })
    }

    /// Skips `offset` rows, then passes at most `count`.
    pub fn limit(offset: u64, count: Option<u64>) -> Op {
        Op::Limit(LimitOp {
            offset,
            count,
            skipped: 0,
            counts: NodeCounts::default(),
        })
    }

    fn push(
        &mut self,
        row: &[Value],
        rest: &mut [Op],
        ctx: &mut EvalContext,
        out: &mut Out,
    ) -> Result<Flow, ExecError> {
        match self {
            Op::Aggregate(a) => {
                if a.groups.is_empty() {
                    for (agg, acc) in a.aggs.iter().zip(a.single.iter_mut()) {
                        agg.update(acc, row, ctx)?;
                    }
                    return Ok(Flow::Continue);
                }
                a.key.0.clear();
                for g in &a.groups {
                    a.key.0.push(g.eval(row, ctx)?);
                }
                let at = match a.index.get(&a.key) {
                    Some(&at) => at,
                    None => {
                        let at = a.grouped.len();
                        a.grouped.push((
                            a.key.0.clone(),
                            a.aggs.iter().map(Aggregate::start).collect(),
                        ));
                        a.index.insert(a.key.clone(), at);
                        at
                    }
                };
                let accs = &mut a.grouped[at].1;
                for (agg, acc) in a.aggs.iter().zip(accs.iter_mut()) {
                    agg.update(acc, row, ctx)?;
                }
                Ok(Flow::Continue)
            }
            Op::Project(p) => {
                p.buf.clear();
                for e in &p.exprs {
                    let v = e.eval(row, ctx)?;
                    p.buf.push(v);
                }
                push(rest, &p.buf, ctx, out)
            }
            Op::Sort(s) => {
                s.rows.push(row.to_vec());
                Ok(Flow::Continue)
            }
            Op::Limit(l) => {
                if l.count.is_some_and(|c| l.counts.rows >= c) {
                    return Ok(Flow::Stop);
                }
                if l.skipped < l.offset {
                    l.skipped += 1;
                    return Ok(Flow::Continue);
                }
                l.counts.rows += 1;
                let flow = push(rest, row, ctx, out)?;
                if l.count.is_some_and(|c| l.counts.rows >= c) {
                    return Ok(Flow::Stop);
                }
                Ok(flow)
            }
        }
    }

    /// Emits what the operator kept, once its input is done.
    fn flush(
        &mut self,
        rest: &mut [Op],
        ctx: &mut EvalContext,
        out: &mut Out,
    ) -> Result<(), ExecError> {
        match self {
            Op::Aggregate(a) => {
                let mut emit = |a: &mut AggregateOp, keys: Vec<Value>, accs: &[Acc]| {
                    let mut row = keys;
                    for (agg, acc) in a.aggs.iter().zip(accs) {
                        row.push(agg.result(acc)?);
                    }
                    if !passes(a.having.as_ref(), &mut a.counts, &row, ctx)? {
                        return Ok(Flow::Continue);
                    }
                    push(rest, &row, ctx, out)
                };
                if a.groups.is_empty() {
                    let accs = std::mem::take(&mut a.single);
                    emit(a, Vec::new(), &accs)?;
                } else {
                    for (keys, accs) in std::mem::take(&mut a.grouped) {
                        if emit(a, keys, &accs)? == Flow::Stop {
                            break;
                        }
                    }
                    a.index.clear();
                }
                Ok(())
            }
            Op::Sort(s) => {
                let keys = &s.keys;
                s.rows.sort_by(|x, y| {
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
                });
                for row in std::mem::take(&mut s.rows) {
                    s.counts.rows += 1;
                    if push(rest, &row, ctx, out)? == Flow::Stop {
                        break;
                    }
                }
                Ok(())
            }
            Op::Project(_) | Op::Limit(_) => Ok(()),
        }
    }
}

/// Where the last operator's rows go.
pub(crate) type Out<'a> = dyn FnMut(&[Value]) -> Result<Flow, ExecError> + 'a;

fn push(
    ops: &mut [Op],
    row: &[Value],
    ctx: &mut EvalContext,
    out: &mut Out,
) -> Result<Flow, ExecError> {
    match ops.split_first_mut() {
        None => out(row),
        Some((op, rest)) => op.push(row, rest, ctx, out),
    }
}

fn finish(ops: &mut [Op], ctx: &mut EvalContext, out: &mut Out) -> Result<(), ExecError> {
    if let Some((op, rest)) = ops.split_first_mut() {
        op.flush(rest, ctx, out)?;
        finish(rest, ctx, out)?;
    }
    Ok(())
}

/// A source, filter and operators.
pub struct Pipeline {
    pub source: Source,
    pub filter: Option<Filter>,
    pub ops: Vec<Op>,
    /// Columns of the result; the last operator may add hidden ones (sort
    /// keys that are not selected) after them.
    pub width: usize,
    /// Rows the source produced (after the filter).
    pub counts: NodeCounts,
}

impl Pipeline {
    /// Rows of `source` passing `filter`, through `ops`; the result has
    /// `width` columns.
    pub fn new(source: Source, filter: Option<Filter>, ops: Vec<Op>, width: usize) -> Pipeline {
        Pipeline {
            source,
            filter,
            ops,
            width,
            counts: NodeCounts::default(),
        }
    }

    pub(crate) fn tables(&self, out: &mut Vec<Arc<TableDef>>) {
        match &self.source {
            Source::SeqScan(scan) => out.push(Arc::clone(&scan.table)),
            Source::Utility(calls) => out.extend(calls.iter().map(|c| Arc::clone(&c.table))),
            _ => {}
        }
    }
}

/// Passes a source row through the filter and the operators.
fn feed(
    filter: &Option<Filter>,
    counts: &mut NodeCounts,
    ops: &mut [Op],
    row: &[Value],
    ctx: &mut EvalContext,
    out: &mut Out,
) -> Result<Flow, ExecError> {
    if !passes(filter.as_ref(), counts, row, ctx)? {
        return Ok(Flow::Continue);
    }
    push(ops, row, ctx, out)
}

/// Scans `node`'s table with `snap`, decoding the wanted columns (none:
/// an empty row, and no decoding at all), and calls `f` for each visible
/// row. `f` runs under the page's content lock: it must not use the pool;
/// `after_page` runs between pages, with no lock held (`Heap::scan`).
pub(crate) fn scan_table(
    node: &mut ScanNode,
    s: &mut Session,
    snap: &Snapshot,
    mut f: impl FnMut(Tid, &[Value]) -> Result<Flow, ExecError>,
    mut after_page: impl FnMut() -> Result<Flow, ExecError>,
) -> Result<(), ExecError> {
    let db = Arc::clone(s.db());
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

/// Consumes the rows a pipeline returns.
pub(crate) trait RowSink {
    fn accept(&mut self, s: &mut Session, row: &[Value]) -> Result<Flow, ExecError>;

    /// The same, for a row the caller no longer needs.
    fn accept_owned(&mut self, s: &mut Session, row: Vec<Value>) -> Result<Flow, ExecError> {
        self.accept(s, &row)
    }
}

/// Keeps the first `width` columns of each row: a query's result.
struct Collect {
    width: usize,
    rows: Vec<Vec<Value>>,
}

impl RowSink for Collect {
    fn accept(&mut self, _: &mut Session, row: &[Value]) -> Result<Flow, ExecError> {
        self.rows.push(row[..self.width.min(row.len())].to_vec());
        Ok(Flow::Continue)
    }

    fn accept_owned(&mut self, _: &mut Session, mut row: Vec<Value>) -> Result<Flow, ExecError> {
        row.truncate(self.width);
        self.rows.push(row);
        Ok(Flow::Continue)
    }
}

/// Runs a query, returning its rows.
pub(crate) fn run_query(
    p: &mut Pipeline,
    s: &mut Session,
    snap: &Snapshot,
    ctx: &mut EvalContext,
) -> Result<Vec<Vec<Value>>, ExecError> {
    let mut collect = Collect {
        width: p.width,
        rows: Vec::new(),
    };
    run_pipeline(p, s, snap, ctx, &mut collect)?;
    Ok(collect.rows)
}

/// Runs `p`, giving its rows to `sink`.
pub(crate) fn run_pipeline(
    p: &mut Pipeline,
    s: &mut Session,
    snap: &Snapshot,
    ctx: &mut EvalContext,
    sink: &mut dyn RowSink,
) -> Result<(), ExecError> {
    let Pipeline {
        source,
        filter,
        ops,
        counts,
        ..
    } = p;
    if let Source::SeqScan(node) = source {
        // Rows leave the page lock only through this buffer (see the
        // module comment of `exec`).
        let mut buffered: Vec<Vec<Value>> = Vec::new();
        {
            let mut out = |row: &[Value]| {
                buffered.push(row.to_vec());
                Ok(Flow::Continue)
            };
            scan_table(
                node,
                s,
                snap,
                |_, row| feed(filter, counts, ops, row, ctx, &mut out),
                || Ok(Flow::Continue),
            )?;
            finish(ops, ctx, &mut out)?;
        }
        for row in buffered {
            if sink.accept_owned(s, row)? == Flow::Stop {
                break;
            }
        }
        return Ok(());
    }
    // Sources that need the session produce their rows before the sink
    // takes it.
    let prepared: Option<Vec<Vec<Value>>> = match source {
        Source::View(view) => Some(view.rows(s.db())),
        Source::Utility(calls) => {
            let mut row = Vec::new();
            for call in calls.iter() {
                row.extend(call.run(s)?);
            }
            Some(vec![row])
        }
        _ => None,
    };
    let mut out = |row: &[Value]| sink.accept(s, row);
    let out: &mut Out = &mut out;
    match source {
        Source::SeqScan(_) => {
            return Err(ExecError::Internal("a table scan reached the direct path"))
        }
        Source::View(_) | Source::Utility(_) => {
            for row in prepared.unwrap_or_default() {
                if feed(filter, counts, ops, &row, ctx, out)? == Flow::Stop {
                    break;
                }
            }
        }
        Source::Result => {
            feed(filter, counts, ops, &[], ctx, out)?;
        }
        Source::Values(rows) => {
            let mut row = Vec::new();
            for exprs in rows.iter() {
                row.clear();
                for e in exprs {
                    row.push(e.eval(&[], ctx)?);
                }
                if feed(filter, counts, ops, &row, ctx, out)? == Flow::Stop {
                    break;
                }
            }
        }
        Source::Series(series) => {
            let Some((first, last, step)) = series.bounds(ctx)? else {
                return finish(ops, ctx, out);
            };
            let mut i = first;
            let mut row = [Value::Null];
            while (step > 0 && i <= last) || (step < 0 && i >= last) {
                row[0] = match series.ty {
                    ColumnType::Integer => Value::Integer(
                        i32::try_from(i).map_err(|_| TypeError::OutOfRange { ty: "integer" })?,
                    ),
                    _ => Value::BigInt(i),
                };
                if feed(filter, counts, ops, &row, ctx, out)? == Flow::Stop {
                    break;
                }
                // Overflow past the type's end means the series is done.
                match i.checked_add(step) {
                    Some(next) => i = next,
                    None => break,
                }
            }
        }
    }
    finish(ops, ctx, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drive(ops: &mut [Op], rows: &[Vec<Value>]) -> Vec<Vec<Value>> {
        let mut got = Vec::new();
        let mut ctx = EvalContext::new();
        let mut out = |row: &[Value]| {
            got.push(row.to_vec());
            Ok(Flow::Continue)
        };
        for row in rows {
            if push(ops, row, &mut ctx, &mut out).unwrap() == Flow::Stop {
                break;
            }
        }
        finish(ops, &mut ctx, &mut out).unwrap();
        got
    }

    fn ints(xs: &[Option<i32>]) -> Vec<Vec<Value>> {
        xs.iter()
            .map(|x| vec![x.map_or(Value::Null, Value::Integer)])
            .collect()
    }

    #[test]
    fn sort_puts_nulls_last_ascending_and_first_descending() {
        let input = ints(&[Some(2), None, Some(1), Some(3)]);
        let key = |descending, nulls_first| SortKey {
            column: 0,
            descending,
            nulls_first,
            label: String::new(),
        };
        let got = drive(&mut [Op::sort(vec![key(false, false)])], &input);
        assert_eq!(got, ints(&[Some(1), Some(2), Some(3), None]));
        let got = drive(&mut [Op::sort(vec![key(true, true)])], &input);
        assert_eq!(got, ints(&[None, Some(3), Some(2), Some(1)]));
        let got = drive(&mut [Op::sort(vec![key(true, false)])], &input);
        assert_eq!(got, ints(&[Some(3), Some(2), Some(1), None]));
    }

    #[test]
    fn limit_skips_the_offset_and_stops_the_source() {
        let input = ints(&[Some(1), Some(2), Some(3), Some(4), Some(5)]);
        let mut ops = [Op::limit(1, Some(2))];
        let got = drive(&mut ops, &input);
        assert_eq!(got, ints(&[Some(2), Some(3)]));
        let Op::Limit(l) = &ops[0] else { panic!() };
        assert_eq!(
            (l.skipped, l.counts.rows),
            (1, 2),
            "stopped after the limit"
        );
    }

    #[test]
    fn grouping_without_groups_gives_one_row_even_for_no_input() {
        let count = Aggregate::new(super::super::agg::AggFunc::CountStar, None).unwrap();
        let got = drive(&mut [Op::aggregate(vec![], vec![], vec![count], None)], &[]);
        assert_eq!(got, vec![vec![Value::BigInt(0)]]);
        let count = Aggregate::new(super::super::agg::AggFunc::CountStar, None).unwrap();
        let group = Expr::column(0, ColumnType::Integer);
        let got = drive(
            &mut [Op::aggregate(
                vec![group],
                vec![String::new()],
                vec![count],
                None,
            )],
            &ints(&[Some(1), None, Some(1), None, Some(2)]),
        );
        assert_eq!(
            got,
            vec![
                vec![Value::Integer(1), Value::BigInt(2)],
                vec![Value::Null, Value::BigInt(2)],
                vec![Value::Integer(2), Value::BigInt(1)],
            ]
        );
    }
}
