//! The index scan node: rows of a table found through a B-tree, in the
//! index's order (or its reverse), a leaf page's matches at a time.
//!
//! The node turns its key conditions into the B-tree's [`ScanKeys`] when
//! it starts (and again on each rescan, when parameters may have changed),
//! pulls batches of heap TIDs from the B-tree and fetches each tuple that
//! the statement's snapshot sees. Every condition of the WHERE is checked
//! on the fetched row, the key conditions too: the ranges searched can be
//! wider than the conditions (a cross product of `IN` lists cut at
//! [`KEY_RANGES_MAX`]), never narrower.

mod fetch;

use std::cmp::Ordering;
use std::sync::Arc;

use fetch::{Fetched, IndexFetch};
pub use fetch::{PrefetchStats, BATCHES_WITHOUT_PAGE_MAX, PREFETCH_AFTER_PAGES, RING_BATCHES};

use super::explain::{
    leaf_pages_text, push_buffers, push_filter, push_io, scan_title, ExplainOptions,
};
use super::expr::{BinaryOp, Expr};
use super::plan::{keep_passing, Batch, Described, ExecCx, Filter, NodeCounts, PlanNode};
use super::value::is_true;
use super::ExecError;
use crate::btree::{Bound, BtreeScan, Direction, IndexDesc, KeyRange, KeySpec, ScanKeys};
use crate::buffer::ReadCounts;
use crate::catalog::{IndexDef, TableDef};
use crate::heap::tuple::decode;
use crate::types::{compare, Value};

/// Most ranges one scan searches: the cross product of `IN` lists on
/// several key columns is cut at the last column that keeps it within
/// this (the rows are still checked against every condition).
pub const KEY_RANGES_MAX: usize = 10_000;

/// A condition on one key column of the index.
#[derive(Debug, Clone)]
pub enum IndexQual {
    /// `key op value`, op one of = < <= > >=.
    Compare {
        key: usize,
        op: BinaryOp,
        value: Expr,
    },
    /// `key IN (values…)`.
    In { key: usize, values: Vec<Expr> },
    /// `key IS NULL`.
    IsNull { key: usize },
}

impl IndexQual {
    fn key(&self) -> usize {
        match self {
            IndexQual::Compare { key, .. }
            | IndexQual::In { key, .. }
            | IndexQual::IsNull { key } => *key,
        }
    }
}

/// What the scan searches for: its key conditions, and EXPLAIN's text of
/// them.
pub struct IndexSearch {
    pub quals: Vec<IndexQual>,
    /// Every key condition, ANDed, checked on each row fetched.
    pub recheck: Option<Expr>,
    /// `Index Cond:`'s text; None if the scan reads the whole index (for
    /// its order).
    pub label: Option<String>,
}

/// A scan of a table through one of its B-tree indexes.
pub struct IndexScanNode {
    pub table: Arc<TableDef>,
    pub index: Arc<IndexDef>,
    /// The name the statement gave the table, if not its own.
    pub alias: Option<String>,
    desc: IndexDesc,
    direction: Direction,
    search: IndexSearch,
    /// Columns some expression reads; the others are not decoded.
    wanted: Vec<bool>,
    /// The conditions of the WHERE that are not key conditions.
    pub filter: Option<Filter>,
    pub counts: NodeCounts,
    /// Rows the recheck of the key conditions removed (only where the
    /// ranges searched were wider than the conditions).
    rechecked_out: u64,
    /// The index and heap reading, kept from run to run (a rescan resets
    /// it, so its read stream is set up once).
    fetch: Option<IndexFetch>,
    /// The next pull starts a run: searches with the conditions' values
    /// then.
    run_begun: bool,
    /// Returns rows from the index's keys where the visibility map says
    /// every tuple of the page is visible (an index-only scan); every
    /// wanted column is a key column.
    index_only: bool,
    /// Rows an index-only scan had to fetch from the table.
    heap_fetches: u64,
    /// Figures over every run, for EXPLAIN ANALYZE.
    buffers: ReadCounts,
    ended: bool,
    /// Rows a parent takes from a run at most (a LIMIT above).
    row_bound: Option<u64>,
}

impl IndexScanNode {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        table: Arc<TableDef>,
        index: Arc<IndexDef>,
        alias: Option<String>,
        direction: Direction,
        search: IndexSearch,
        wanted: Vec<bool>,
        filter: Option<Filter>,
    ) -> IndexScanNode {
        debug_assert_eq!(wanted.len(), table.columns.len());
        debug_assert!(search.quals.iter().all(|q| q.key() < index.columns.len()));
        // The planner marks every column a condition reads as wanted: the
        // recheck and the filter find them decoded.
        let read = search
            .recheck
            .iter()
            .chain(filter.iter().map(|f| &f.predicate));
        for e in read {
            assert!(
                e.columns_read().iter().all(|&c| wanted[c]),
                "a condition of an index scan reads a column the scan does not decode"
            );
        }
        IndexScanNode {
            desc: index.desc(&table),
            table,
            index,
            alias,
            direction,
            search,
            wanted,
            filter,
            counts: NodeCounts::default(),
            rechecked_out: 0,
            fetch: None,
            run_begun: false,
            index_only: false,
            heap_fetches: 0,
            buffers: ReadCounts::default(),
            ended: false,
            row_bound: None,
        }
    }

    /// Makes the scan index-only: rows come from the index's keys, and
    /// from the table only where the visibility map cannot vouch for a
    /// page. Every column the scan decodes must be a key column.
    pub fn index_only(mut self) -> IndexScanNode {
        assert!(
            self.wanted
                .iter()
                .enumerate()
                .all(|(c, &w)| !w || self.index.columns.iter().any(|k| k.column == c)),
            "an index-only scan returns key columns only"
        );
        self.index_only = true;
        self
    }

    /// Starts a run: the B-tree searched with the key conditions' values
    /// now, through the scan's fetch (made on the first run).
    fn begin(&mut self, cx: &mut ExecCx) -> Result<(), ExecError> {
        let keys = scan_keys(&self.search.quals, &self.desc.spec, cx)?;
        match &mut self.fetch {
            Some(fetch) => fetch.rescan(cx, keys),
            None => {
                let mut scan =
                    BtreeScan::new(self.desc.clone(), keys, self.direction, self.index_only);
                // `enable_indexscan_prefetch = off` is an index scan as it
                // was before any prefetching, leaves read one by one too:
                // what the benchmarks compare with.
                let prefetch = cx.session.settings.indexscan_prefetch();
                if prefetch {
                    scan = scan.reading_leaves_ahead(cx.session.stream_limits());
                }
                if self.index_only {
                    scan = scan.keeping_leaf_pins();
                }
                self.fetch = Some(IndexFetch::new(
                    &self.table.heap,
                    scan,
                    self.index_only,
                    prefetch,
                ));
            }
        }
        // Rows the filter removes do not count against a LIMIT: which
        // items it needs is not known then.
        let bound = self.row_bound.filter(|_| self.filter.is_none());
        self.fetch.as_mut().expect("made").set_row_bound(bound);
        self.run_begun = true;
        Ok(())
    }

    /// Fills `out` with rows (those the snapshot sees and the recheck
    /// passes) until `max_rows`; true once the index has no more.
    fn fetch_rows(
        &mut self,
        cx: &mut ExecCx,
        out: &mut Batch,
        max_rows: usize,
    ) -> Result<bool, ExecError> {
        let fetch = self.fetch.as_mut().expect("begun");
        let types = &self.table.heap.types;
        let wanted = &self.wanted;
        let mut decode_wanted =
            |tuple: &[u8], row: &mut Vec<Value>| decode(types, tuple, wanted, row);
        while out.len() < max_rows {
            // A leaf's rows at a time at most: a caller asking for every
            // row (an UPDATE) changes them a batch at a time.
            if !out.is_empty() && fetch.at_batch_end() {
                return Ok(false);
            }
            let (tid, row) = match fetch.next(cx, &mut decode_wanted)? {
                None => return Ok(true),
                Some(Fetched::Key(tid, key)) => {
                    debug_assert!(self.index_only);
                    debug_assert_eq!(key.len(), self.index.columns.len());
                    let mut row = vec![Value::Null; types.len()];
                    for (column, value) in self.index.columns.iter().zip(key) {
                        if wanted[column.column] {
                            row[column.column] = value;
                        }
                    }
                    (tid, row)
                }
                Some(Fetched::Row(tid, row)) => {
                    self.heap_fetches += u64::from(self.index_only);
                    (tid, row)
                }
                Some(Fetched::Invisible) => {
                    self.heap_fetches += u64::from(self.index_only);
                    continue;
                }
            };
            if let Some(recheck) = &self.search.recheck {
                if !is_true(&*recheck.eval_ref(&row, cx)?) {
                    self.rechecked_out += 1;
                    fetch.row_dropped();
                    continue;
                }
            }
            out.rows.push(row);
            out.tids.push(tid);
        }
        Ok(false)
    }

    /// Fills `out` with rows that pass the filter too; true once the
    /// index has no more.
    fn fill(
        &mut self,
        cx: &mut ExecCx,
        out: &mut Batch,
        max_rows: usize,
    ) -> Result<bool, ExecError> {
        loop {
            let start = out.len();
            let done = self.fetch_rows(cx, out, max_rows)?;
            // The WHERE's other conditions may run subqueries: applied
            // with no page locked.
            keep_passing(self.filter.as_ref(), &mut self.counts, out, start, cx)?;
            if done || !out.is_empty() {
                return Ok(done);
            }
        }
    }

    /// Ends the run: its pins go, the fetch stays for a rescan.
    fn end_run(&mut self, cx: &mut ExecCx) {
        if let Some(fetch) = &mut self.fetch {
            fetch.release(cx);
        }
        self.run_begun = false;
    }

    /// Figures over every run: heap and prefetching, and the index's.
    fn figures(&self) -> (PrefetchStats, IndexFigures) {
        match &self.fetch {
            Some(fetch) => {
                let scan = fetch.index_scan();
                let index = IndexFigures {
                    leaf_pages: scan.leaf_pages,
                    leaf_pages_read_ahead: scan.leaf_pages_read_ahead,
                    searches: scan.descents,
                };
                (fetch.stats(), index)
            }
            None => (PrefetchStats::default(), IndexFigures::default()),
        }
    }
}

impl PlanNode for IndexScanNode {
    fn next_batch(
        &mut self,
        cx: &mut ExecCx,
        out: &mut Batch,
        max_rows: usize,
    ) -> Result<(), ExecError> {
        // A leaf: every batch of every plan comes through one, so this is
        // where a cancel request or statement_timeout stops a statement.
        cx.session.check_interrupts()?;
        debug_assert!(out.is_empty());
        if self.ended {
            return Ok(());
        }
        if !self.run_begun {
            self.begin(cx)?;
        }
        let before = cx.session.buf.counts;
        let result = self.fill(cx, out, max_rows);
        self.buffers.add(cx.session.buf.counts.since(before));
        if result? {
            self.ended = true;
            self.end_run(cx);
        }
        Ok(())
    }

    fn rescan(&mut self, cx: &mut ExecCx) -> Result<(), ExecError> {
        self.counts.rescans += 1;
        self.end_run(cx);
        self.ended = false;
        Ok(())
    }

    fn bound_rows(&mut self, rows: u64) {
        self.row_bound = Some(rows);
    }

    fn close(&mut self, cx: &mut ExecCx) {
        // The fetch and its stream stay, pins released, for a rescan
        // after the close (a LIMIT or a subquery closes its scan and may
        // run it again).
        self.end_run(cx);
        self.ended = true;
    }

    fn describe(&self, opts: &ExplainOptions) -> Option<Described> {
        let backward = if self.direction == Direction::Backward {
            " Backward"
        } else {
            ""
        };
        let only = if self.index_only { " Only" } else { "" };
        let title = scan_title(
            format!(
                "Index{only} Scan{backward} using {} on {}",
                self.index.name,
                self.table.name()
            ),
            self.alias.as_deref(),
        );
        let mut details = Vec::new();
        if let Some(label) = &self.search.label {
            details.push(format!("Index Cond: {label}"));
        }
        if opts.analyze && self.rechecked_out > 0 {
            details.push(format!(
                "Rows Removed by Index Recheck: {}",
                self.counts.per_loop(self.rechecked_out)
            ));
        }
        push_filter(&mut details, self.filter.as_ref(), self.counts, opts);
        if opts.analyze {
            if self.index_only {
                details.push(format!(
                    "Heap Fetches: {}",
                    self.counts.per_loop(self.heap_fetches)
                ));
            }
            let (stats, index) = self.figures();
            // Over every loop, as PostgreSQL 18 counts them (rows and
            // heap fetches are per loop).
            details.push(format!("Index Searches: {}", index.searches));
            if opts.buffers {
                push_buffers(&mut details, self.buffers.hits, self.buffers.reads);
            }
            if opts.io {
                details.push(format!(
                    "Heap: fetches={} visible={} pages={} hit={} read={} {}",
                    stats.heap.fetches,
                    stats.heap.visible,
                    stats.heap.pages,
                    stats.heap_buffers.hits,
                    stats.heap_buffers.reads,
                    leaf_pages_text(index.leaf_pages, index.leaf_pages_read_ahead)
                ));
                if stats.entries_removed > 0 {
                    details.push(format!(
                        "Index Entries Removed: {} (rows dead to every snapshot)",
                        stats.entries_removed
                    ));
                }
                if stats.streams > 0 {
                    details.push(format!(
                        "Prefetch: streams={} distance={}",
                        stats.streams, stats.max_distance
                    ));
                    push_io(&mut details, &stats.stream);
                }
            }
        }
        Some(Described {
            title,
            counts: self.counts,
            details,
        })
    }

    fn children(&self) -> Vec<&dyn PlanNode> {
        Vec::new()
    }

    fn expressions(&self) -> Vec<&Expr> {
        // The key conditions' InitPlans are shown (and their tables
        // held) through the recheck, which has them all.
        self.search
            .recheck
            .iter()
            .chain(self.filter.iter().map(|f| &f.predicate))
            .collect()
    }

    fn tables(&self, out: &mut Vec<Arc<TableDef>>) {
        out.push(Arc::clone(&self.table));
        super::plan::subplan_tables(self.expressions(), out);
    }
}

/// The index's side of an index scan's figures, over every run.
#[derive(Debug, Clone, Copy, Default)]
struct IndexFigures {
    leaf_pages: u64,
    /// Of `leaf_pages`, those taken from the scan's read-ahead stream.
    leaf_pages_read_ahead: u64,
    /// Descents from the root.
    searches: u64,
}

/// One key column's part of the search: the values it must equal (sorted
/// in the index's order, each once), or a range.
enum ColumnKeys {
    Equal(Vec<Value>),
    Range {
        lower: Option<(Value, bool)>,
        upper: Option<(Value, bool)>,
    },
}

/// The B-tree search for `quals` with their values now: equalities (and
/// `IN` lists) on the leading key columns, then a range on the next one.
pub fn scan_keys(
    quals: &[IndexQual],
    spec: &KeySpec,
    cx: &mut ExecCx,
) -> Result<ScanKeys, ExecError> {
    let mut columns: Vec<ColumnKeys> = Vec::new();
    for key in 0..spec.columns() {
        let mut equal: Option<Vec<Value>> = None;
        let mut lower: Option<(Value, bool)> = None;
        let mut upper: Option<(Value, bool)> = None;
        for q in quals.iter().filter(|q| q.key() == key) {
            let (values, range_op) = match q {
                IndexQual::Compare {
                    op: BinaryOp::Eq,
                    value,
                    ..
                } => (vec![value.eval(&[], cx)?], None),
                IndexQual::Compare { op, value, .. } => (vec![value.eval(&[], cx)?], Some(*op)),
                IndexQual::In { values, .. } => (
                    values
                        .iter()
                        .map(|v| v.eval(&[], cx))
                        .collect::<Result<Vec<_>, _>>()?,
                    None,
                ),
                IndexQual::IsNull { .. } => (vec![Value::Null], None),
            };
            let is_null_qual = matches!(q, IndexQual::IsNull { .. });
            match range_op {
                None => {
                    // A comparison with NULL matches nothing; IS NULL
                    // matches the NULLs, which the index orders too.
                    let mut values: Vec<Value> = values
                        .into_iter()
                        .filter(|v| is_null_qual || !v.is_null())
                        .collect();
                    values.sort_by(|a, b| spec.cmp_column(key, a, b));
                    values.dedup_by(|a, b| spec.cmp_column(key, a, b) == Ordering::Equal);
                    equal = Some(match equal {
                        None => values,
                        // Both must hold: the values in both lists.
                        Some(before) => before
                            .into_iter()
                            .filter(|v| {
                                values
                                    .iter()
                                    .any(|w| spec.cmp_column(key, v, w) == Ordering::Equal)
                            })
                            .collect(),
                    });
                }
                Some(op) => {
                    let v = values.into_iter().next().expect("one value");
                    if v.is_null() {
                        return Ok(ScanKeys::none());
                    }
                    let inclusive = matches!(op, BinaryOp::Le | BinaryOp::Ge);
                    // The tighter of two bounds on one side, in the values'
                    // own order (the index's may be descending).
                    let tighter = |old: Option<(Value, bool)>, greater_wins: bool| match old {
                        None => Some((v.clone(), inclusive)),
                        Some((o, o_inc)) => match compare(&v, &o) {
                            Some(Ordering::Equal) => Some((o, o_inc && inclusive)),
                            Some(Ordering::Greater) if greater_wins => Some((v.clone(), inclusive)),
                            Some(Ordering::Less) if !greater_wins => Some((v.clone(), inclusive)),
                            _ => Some((o, o_inc)),
                        },
                    };
                    if matches!(op, BinaryOp::Gt | BinaryOp::Ge) {
                        lower = tighter(lower, true);
                    } else {
                        upper = tighter(upper, false);
                    }
                }
            }
        }
        match equal {
            Some(values) if values.is_empty() => return Ok(ScanKeys::none()),
            Some(values) => columns.push(ColumnKeys::Equal(values)),
            None => {
                if lower.is_some() || upper.is_some() {
                    columns.push(ColumnKeys::Range { lower, upper });
                }
                break;
            }
        }
    }
    Ok(build_ranges(columns, spec))
}

/// The ranges, in the index's order, for the leading columns' keys: the
/// cross product of the equal values (cut where it would pass
/// [`KEY_RANGES_MAX`]), each with the range on the column after them.
fn build_ranges(mut columns: Vec<ColumnKeys>, spec: &KeySpec) -> ScanKeys {
    let mut product = 1usize;
    for (at, c) in columns.iter().enumerate() {
        if let ColumnKeys::Equal(values) = c {
            product = product.saturating_mul(values.len());
            if product > KEY_RANGES_MAX {
                columns.truncate(at);
                break;
            }
        }
    }
    let mut prefixes: Vec<Vec<Value>> = vec![Vec::new()];
    let mut range = None;
    for c in columns {
        match c {
            ColumnKeys::Equal(values) => {
                prefixes = prefixes
                    .into_iter()
                    .flat_map(|p| {
                        values.iter().map(move |v| {
                            let mut p = p.clone();
                            p.push(v.clone());
                            p
                        })
                    })
                    .collect();
            }
            ColumnKeys::Range { lower, upper } => range = Some((lower, upper)),
        }
    }
    let key = prefixes[0].len();
    let ranges = prefixes
        .into_iter()
        .map(|prefix| {
            let with = |last: Value, inclusive: bool| {
                let mut values = prefix.clone();
                values.push(last);
                Bound { values, inclusive }
            };
            let whole = || {
                (!prefix.is_empty()).then(|| Bound {
                    values: prefix.clone(),
                    inclusive: true,
                })
            };
            let Some((lower, upper)) = &range else {
                return KeyRange {
                    lower: whole(),
                    upper: whole(),
                };
            };
            // In a descending column the values' lower bound is where the
            // index's order ends.
            let (first, last) = if spec.desc[key] {
                (upper, lower)
            } else {
                (lower, upper)
            };
            // The NULLs of the column lie at one end of the index's order;
            // a comparison never matches them, so an open side at that end
            // stops short of them.
            let open = |nulls_there: bool| {
                if nulls_there {
                    Some(with(Value::Null, false))
                } else {
                    whole()
                }
            };
            let bounded =
                |b: &Option<(Value, bool)>| b.clone().map(|(v, inclusive)| with(v, inclusive));
            KeyRange {
                lower: bounded(first).or_else(|| open(spec.nulls_first[key])),
                upper: bounded(last).or_else(|| open(!spec.nulls_first[key])),
            }
        })
        .collect();
    ScanKeys { ranges }
}
