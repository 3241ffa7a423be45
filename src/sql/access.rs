//! How a table is read: a sequential scan, or an index scan through one of
//! its B-tree indexes, whichever is estimated to cost less.
//!
//! Estimates follow PostgreSQL's. A table's size is its page count now
//! and, once ANALYZE has run, its row count from the density it had then;
//! a condition's selectivity comes from the column's statistics (most
//! common values, histogram, null fraction, distinct count: see
//! `catalog::statistics`). A table never analysed is estimated as
//! PostgreSQL estimates one: as many rows as its pages hold at the width
//! its column types suggest, 0.5 % for an equality, a third for a
//! one-sided range, 0.5 % for a range bounded on both sides. An index
//! scan's heap reads cost between a random read per distinct page
//! (Mackert–Lohman, with `effective_cache_size`) and a sequential run of
//! pages, as the leading column's correlation squared says (`cost_index`).
//! Costs are in PostgreSQL's units and parameters (`seq_page_cost`,
//! `random_page_cost`, `cpu_tuple_cost`, `cpu_index_tuple_cost`,
//! `cpu_operator_cost`).

use std::sync::Arc;

use crate::catalog::statistics::{
    ColumnStats, TableStats, DEFAULT_EQ_SELECTIVITY, DEFAULT_RANGE_SELECTIVITY,
};
use crate::catalog::{IndexDef, TableDef};
use crate::config::Costs;
use crate::database::Database;
use crate::exec::indexscan::{IndexQual, IndexScanNode, IndexSearch};
use crate::exec::{BinaryOp, Filter, PlanNode, SeqScanNode};
use crate::storage::{Fork, BLOCK_SIZE};

use super::cost;
use super::expr::StmtCx;
use crate::btree::Direction;
use crate::exec::expr::{Expr, IndexCond};
use crate::exec::Estimate;

/// What a disabled method costs on top (PostgreSQL's `disable_cost`): it
/// is chosen only when nothing else can be. A scan's is a startup cost, as
/// in PostgreSQL, so that a LIMIT, which pays only its share of a scan's
/// run, still pays all of it.
pub(super) const DISABLE_COST: f64 = 1.0e10;
/// Pages a table never analysed is taken to have at the least
/// (PostgreSQL's 10).
const UNANALYSED_PAGES_MIN: u32 = 10;
/// Entries of a leaf page, for the height of an index.
const ENTRIES_PER_LEAF: f64 = 200.0;
/// Operators a B-tree descent costs per level, besides its comparisons
/// (PostgreSQL's charge for the page's CPU work in `btcostestimate`).
const DESCENT_OPERATORS_PER_LEVEL: f64 = 50.0;
/// How much of the leading column's correlation a multi-column index is
/// taken to keep (PostgreSQL's factor).
const MULTI_COLUMN_CORRELATION: f64 = 0.75;
/// Bytes a row takes besides its columns: tuple header and line pointer.
const ROW_OVERHEAD: usize = 28;
/// Below this a two-sided range's estimate is taken as nearly empty, not
/// as the statistics' rounding (PostgreSQL's bound).
const RANGE_ROUNDING: f64 = -0.01;
/// A two-sided range the estimate makes empty (PostgreSQL's 1.0e-10):
/// small, but not zero, so that costs still order.
const RANGE_NEARLY_EMPTY: f64 = 1.0e-10;

/// An order a query wants a table's rows in, which an index may give
/// (sparing the sort), and how many rows the query takes.
pub(crate) struct WantedOrder {
    /// (table column, descending, NULLs first), most significant first.
    pub keys: Vec<(usize, bool, bool)>,
    /// OFFSET + LIMIT, if limited: the rows read before the query stops.
    pub limit: Option<u64>,
}

/// A table's scan as planned: its node, and whether its rows come in the
/// order wanted.
pub(crate) struct TableScan {
    pub node: Box<dyn PlanNode>,
    pub ordered: bool,
}

/// The scan node for `table`, decoding `wanted`, with the item's
/// conditions `filters` (over the table's columns): a sequential, index,
/// index-only or bitmap scan, whichever costs least; with `order`, an
/// index scan giving that order where it costs less than the cheapest
/// scan and a sort. The node carries its estimate; `loops` is how often
/// it is expected to run (the inner side of a nested loop searching by
/// each outer row: the pages its runs share are read once, as PostgreSQL
/// takes them to be). `size` is the table's, if the caller has it
/// already (a join estimating its size); else it is read here.
#[allow(clippy::too_many_arguments)]
pub(crate) fn table_scan(
    cx: &StmtCx,
    db: &Database,
    table: Arc<TableDef>,
    alias: Option<String>,
    wanted: Vec<bool>,
    filters: Vec<Filter>,
    purpose: ReadFor,
    order: Option<&WantedOrder>,
    loops: f64,
    size: Option<&TableSize>,
) -> Result<TableScan, super::SqlError> {
    let mut indexes = db.catalog().indexes_of(&table);
    if indexes.iter().any(|i| !i.usable_by(cx.snapshot_xmin)) {
        // Built while a snapshot like this one could still see versions
        // it lacks (`heap/hot.rs`); a later run may use it.
        indexes = indexes
            .iter()
            .filter(|i| i.usable_by(cx.snapshot_xmin))
            .cloned()
            .collect::<Vec<_>>()
            .into();
        cx.fixed_for_run.set(true);
    }
    let read;
    let size = match size {
        Some(size) => size,
        None => {
            read = TableSize::of(db, &table, &indexes, cx.costs);
            &read
        }
    };
    let c = &cx.costs;
    let rows = filtered_rows(size, &filters);
    let width = size.width(&table, &wanted);
    let seq_penalty = if cx.scans.seq { 0.0 } else { DISABLE_COST };
    let seq_cost = size.pages * c.seq_page
        + size.rows * (c.cpu_tuple + c.cpu_operator * filters.len() as f64)
        + seq_penalty;
    let scan = |node: Box<dyn PlanNode>, startup: f64, total: f64, ordered: bool| TableScan {
        node: cost::estimated(node, Estimate::new(startup, total, rows, width)),
        ordered,
    };
    let seq_scan = |filters: Vec<Filter>| -> Result<TableScan, super::SqlError> {
        let filter = super::query::and_all(filters)?;
        let node: Box<dyn PlanNode> = Box::new(SeqScanNode::new(
            Arc::clone(&table),
            alias.clone(),
            wanted.clone(),
            filter,
        ));
        Ok(scan(node, seq_penalty, seq_cost, false))
    };
    if indexes.is_empty() {
        return seq_scan(filters);
    }
    let index_penalty = if cx.scans.index { 0.0 } else { DISABLE_COST };
    // Each index's plan, costed once: index-only where its keys hold
    // every column read, the table then read only for the pages not
    // all-visible (`cost_index`); for an order wanted, a scan of the
    // whole index where no condition can be searched by.
    let plans: Vec<IndexPlan> = indexes
        .iter()
        .filter_map(|index| {
            let whole = order.is_some_and(|o| gives_order(index, &o.keys).is_some());
            let mut plan = index_plan_with(index, &filters, size, whole, loops)?;
            plan.index_only = cx.scans.index_only
                && purpose == ReadFor::Query
                && wanted
                    .iter()
                    .enumerate()
                    .all(|(col, &w)| !w || index.columns.iter().any(|k| k.column == col));
            if plan.index_only {
                plan.cost -= plan.heap_io * size.all_visible_fraction();
            }
            plan.startup += index_penalty;
            plan.cost += index_penalty;
            Some(plan)
        })
        .collect();
    // The cheapest scan that searches by a condition.
    let best = plans
        .iter()
        .filter(|plan| !plan.quals.is_empty())
        .filter(|plan| plan.cost < seq_cost)
        .min_by(|a, b| a.cost.total_cmp(&b.cost));
    // The bitmap path, beside the index path.
    let bitmap_penalty = if cx.scans.bitmap { 0.0 } else { DISABLE_COST };
    let mut best_cost = best.map_or(seq_cost, |p| p.cost);
    let mut bitmap = None;
    if let Some(mut plan) = super::bitmap_path::best_bitmap_plan(&indexes, &filters, size) {
        plan.startup += bitmap_penalty;
        plan.cost += bitmap_penalty;
        if plan.cost < best_cost {
            best_cost = plan.cost;
            bitmap = Some(plan);
        }
    }
    // An index giving the order wanted, against the cheapest scan and a
    // sort of its rows (a LIMIT takes its share of the index scan's run,
    // after its startup, and bounds the sort).
    if let Some(order) = order {
        let sorted_cost = best_cost + cost::sort_cost(rows, width, order.limit, c);
        let share = order.limit.map_or(1.0, |k| (k as f64 / rows).min(1.0));
        let ordered = plans
            .iter()
            .filter_map(|plan| Some((gives_order(&plan.index, &order.keys)?, plan)))
            .filter(|(_, plan)| plan.startup + (plan.cost - plan.startup) * share < sorted_cost)
            .min_by(|a, b| a.1.cost.total_cmp(&b.1.cost));
        if let Some((direction, plan)) = ordered {
            let (startup, total) = (plan.startup, plan.cost);
            let node = index_scan_node(table, alias, wanted, filters, plan.clone(), direction)?;
            return Ok(scan(node, startup, total, true));
        }
    }
    if let Some(plan) = bitmap {
        let (startup, total) = (plan.startup, plan.cost);
        let node = super::bitmap_path::bitmap_scan_node(
            Arc::clone(&table),
            alias,
            wanted.clone(),
            filters,
            plan,
            c,
        )?;
        return Ok(scan(node, startup, total, false));
    }
    let Some(plan) = best else {
        return seq_scan(filters);
    };
    let (startup, total) = (plan.startup, plan.cost);
    let node = index_scan_node(
        Arc::clone(&table),
        alias.clone(),
        wanted.clone(),
        filters,
        plan.clone(),
        Direction::Forward,
    )?;
    Ok(scan(node, startup, total, false))
}

/// The index scan node for `plan`: its key conditions are searched by
/// and rechecked, the other filters filter.
fn index_scan_node(
    table: Arc<TableDef>,
    alias: Option<String>,
    wanted: Vec<bool>,
    filters: Vec<Filter>,
    plan: IndexPlan,
    direction: Direction,
) -> Result<Box<dyn PlanNode>, super::SqlError> {
    let (keys, rest) = split_filters(filters, &plan.used);
    let (recheck, label) = super::query::and_all(keys)?
        .map(|k| (k.predicate, k.label))
        .unzip();
    let search = IndexSearch {
        quals: plan.quals,
        recheck,
        label,
    };
    let node = IndexScanNode::new(
        table,
        plan.index,
        alias,
        direction,
        search,
        wanted,
        super::query::and_all(rest)?,
    );
    Ok(Box::new(if plan.index_only {
        node.index_only()
    } else {
        node
    }))
}

/// `filters` split into those at the positions `used` (an index or
/// bitmap searches by them, and rechecks them) and the rest (which
/// filter), each in its order.
pub(super) fn split_filters(filters: Vec<Filter>, used: &[usize]) -> (Vec<Filter>, Vec<Filter>) {
    let (keys, rest): (Vec<_>, Vec<_>) = filters
        .into_iter()
        .enumerate()
        .partition(|(i, _)| used.contains(i));
    let strip = |v: Vec<(usize, Filter)>| v.into_iter().map(|(_, f)| f).collect();
    (strip(keys), strip(rest))
}

/// Which way to scan `index` for rows in the order `keys` (column,
/// descending, NULLs first): forward if they are its leading columns as
/// it orders them, backward if all reversed (NULLs flipped too); None if
/// it cannot give that order.
fn gives_order(index: &IndexDef, keys: &[(usize, bool, bool)]) -> Option<Direction> {
    if keys.is_empty() || keys.len() > index.columns.len() {
        return None;
    }
    let matches = |reversed: bool| {
        keys.iter()
            .zip(&index.columns)
            .all(|(&(col, desc, nulls_first), k)| {
                k.column == col
                    && (k.desc != reversed) == desc
                    && (k.nulls_first != reversed) == nulls_first
            })
    };
    if matches(false) {
        Some(Direction::Forward)
    } else if matches(true) {
        Some(Direction::Backward)
    } else {
        None
    }
}

/// Rows left after `filters`: the conditions an index could search by
/// estimated from the statistics, the others at PostgreSQL's defaults.
pub(super) fn filtered_rows(size: &TableSize, filters: &[Filter]) -> f64 {
    let selectivity: f64 = filters
        .iter()
        .flat_map(|f| f.predicate.conjuncts())
        .map(|c| match c.as_index_cond() {
            Some(cond) => size.selectivity(&cond),
            None => default_selectivity(c),
        })
        .product();
    cost::clamp_rows(size.rows * selectivity)
}

/// Fraction of rows a condition nothing is known about passes, as
/// PostgreSQL assumes: an equality one distinct value's share of the
/// default, anything else a third.
pub(super) fn default_selectivity(condition: &Expr) -> f64 {
    match condition.comparison_op() {
        Some(BinaryOp::Eq) => DEFAULT_EQ_SELECTIVITY,
        Some(BinaryOp::Ne) => 1.0 - DEFAULT_EQ_SELECTIVITY,
        _ => DEFAULT_RANGE_SELECTIVITY,
    }
}

/// Fraction of rows `predicate` passes where nothing is known of it: the
/// product of [`default_selectivity`] over its ANDed parts.
pub(super) fn default_predicate_selectivity(predicate: &Expr) -> f64 {
    predicate
        .conjuncts()
        .iter()
        .map(|c| default_selectivity(c))
        .product()
}

/// What a table is read for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadFor {
    /// A query's rows.
    Query,
    /// The rows an UPDATE or DELETE changes: each is locked and changed
    /// in the table, so it is always read from there (never index-only).
    Change,
}

/// A table's size as the planner sees it, with its statistics if it was
/// analysed.
pub(crate) struct TableSize {
    pub pages: f64,
    pub rows: f64,
    stats: Option<Arc<TableStats>>,
    /// Pages of each of the table's indexes, by relation number.
    index_pages: Vec<(u32, f64)>,
    /// Columns that are a unique index's only key.
    unique_columns: Vec<usize>,
    /// The statement's cost parameters.
    pub costs: Costs,
}

impl TableSize {
    pub(crate) fn of(
        db: &Database,
        table: &TableDef,
        indexes: &[Arc<IndexDef>],
        costs: Costs,
    ) -> TableSize {
        // A table whose size cannot be read is planned as an empty one:
        // the scan will report the error.
        let pages = db
            .pool()
            .relation(table.heap.rel)
            .nblocks(Fork::Main)
            .unwrap_or(0);
        let stats = db.statistics().of(table.oid);
        // A table never analysed and smaller than a few pages is taken to
        // be that size, as PostgreSQL takes one (`estimate_rel_size`): it
        // may have just been created and be about to fill, and a plan for
        // an empty table (a nested loop over it) is ruinous when it is not.
        let pages = match &stats {
            Some(_) => pages,
            None => pages.max(UNANALYSED_PAGES_MIN),
        };
        let rows = match &stats {
            Some(s) => s.rows_now(pages),
            None => f64::from(pages) * rows_per_page(table),
        };
        let index_pages = indexes
            .iter()
            .map(|i| {
                let pages = db.pool().relation(i.rel).nblocks(Fork::Main).unwrap_or(0);
                (i.rel, f64::from(pages))
            })
            .collect();
        let unique_columns = indexes
            .iter()
            .filter(|i| i.kind.unique() && i.columns.len() == 1)
            .map(|i| i.columns[0].column)
            .collect();
        TableSize {
            pages: f64::from(pages),
            rows,
            stats,
            index_pages,
            unique_columns,
            costs,
        }
    }

    /// Pages of the index with relation number `rel` (one of the table's).
    fn index_pages(&self, rel: u32) -> f64 {
        self.index_pages
            .iter()
            .find(|(r, _)| *r == rel)
            .map_or(1.0, |(_, p)| *p)
    }

    /// The statistics of column `column`, if the table was analysed.
    pub(super) fn column(&self, column: usize) -> Option<&ColumnStats> {
        self.stats.as_ref()?.columns.get(column)
    }

    /// Fraction of the rows passing `cond`.
    fn selectivity(&self, cond: &IndexCond) -> f64 {
        let column = self.column(cond.column());
        let s = match (*cond, column) {
            (IndexCond::IsNull { .. }, Some(c)) => c.null_frac,
            (IndexCond::IsNull { .. }, None) => DEFAULT_EQ_SELECTIVITY,
            (IndexCond::In { values, .. }, _) => values
                .iter()
                .map(|v| self.equal(column, v))
                .sum::<f64>()
                .min(1.0),
            (IndexCond::Compare { op, value, .. }, _) => match op {
                BinaryOp::Eq => self.equal(column, value),
                op => match (column, value.as_const()) {
                    (Some(c), Some(v)) => {
                        let below = |inclusive| c.below(v, inclusive);
                        match op {
                            BinaryOp::Lt => below(false),
                            BinaryOp::Le => below(true),
                            BinaryOp::Gt => 1.0 - c.null_frac - below(true),
                            _ => 1.0 - c.null_frac - below(false),
                        }
                    }
                    _ => DEFAULT_RANGE_SELECTIVITY,
                },
            },
        };
        s.clamp(0.0, 1.0)
    }

    /// Fraction of the rows equal to `value`.
    fn equal(&self, column: Option<&ColumnStats>, value: &Expr) -> f64 {
        match (column, value.as_const()) {
            (Some(c), Some(v)) => c.eq(v, self.rows),
            (Some(c), None) => c.eq_unknown(self.rows),
            (None, _) => DEFAULT_EQ_SELECTIVITY,
        }
    }

    /// Fraction of the rows between a lower bound passing `lower` of them
    /// and an upper one passing `upper` (`clauselist_selectivity`'s range
    /// pairs: each bound's rows overlap in the range, and NULLs pass
    /// neither).
    fn range(&self, column: usize, lower: f64, upper: f64) -> f64 {
        let null_frac = self.column(column).map_or(0.0, |c| c.null_frac);
        let s = lower + upper - 1.0 + null_frac;
        if s > 0.0 {
            s
        } else if s < RANGE_ROUNDING || self.stats.is_none() {
            DEFAULT_EQ_SELECTIVITY
        } else {
            RANGE_NEARLY_EMPTY
        }
    }

    /// Average bytes of the `wanted` columns of a row: as analysed, or
    /// as their types suggest.
    fn width(&self, table: &TableDef, wanted: &[bool]) -> usize {
        table
            .columns
            .iter()
            .enumerate()
            .filter(|&(i, _)| wanted.get(i).copied().unwrap_or(false))
            .map(|(i, c)| match self.column(i) {
                Some(s) => s.avg_width.round() as usize,
                None => cost::type_width(c.ty),
            })
            .sum()
    }

    /// Distinct values of column `column`: as analysed; unknown, all of
    /// them for a column a unique index has to itself, else PostgreSQL's
    /// default (or the rows, in a table of fewer).
    pub(super) fn distinct(&self, column: usize) -> f64 {
        if let Some(c) = self.column(column) {
            return c.distinct_in(self.rows).max(1.0);
        }
        if self.unique_columns.contains(&column) {
            return self.rows.max(1.0);
        }
        cost::clamp_rows(self.rows.min(cost::DEFAULT_NUM_DISTINCT))
    }

    /// Fraction of column `column`'s values that are NULL (none if not
    /// analysed).
    pub(super) fn null_frac(&self, column: usize) -> f64 {
        self.column(column).map_or(0.0, |c| c.null_frac)
    }

    /// Fraction of the pages all-visible when analysed (none if never).
    fn all_visible_fraction(&self) -> f64 {
        self.stats
            .as_ref()
            .map_or(0.0, |s| s.all_visible_fraction())
    }

    /// Correlation of column `column`'s values with the rows' order.
    fn correlation(&self, column: usize) -> f64 {
        self.column(column)
            .and_then(|c| c.correlation)
            .unwrap_or(0.0)
    }
}

/// Rows a page holds at the width `table`'s column types suggest (for a
/// table never analysed).
fn rows_per_page(table: &TableDef) -> f64 {
    let width = ROW_OVERHEAD + cost::row_width(table.columns.iter().map(|c| c.ty));
    (BLOCK_SIZE / width).max(1) as f64
}

/// Distinct pages `tuples` fetches in random order touch in a table of
/// `pages` pages, counting a page again if the cache of
/// `effective_cache_size` has let it go (Mackert and Lohman, as
/// PostgreSQL's `index_pages_fetched`).
pub(super) fn pages_fetched(tuples: f64, pages: f64, c: &Costs) -> f64 {
    let t = pages.max(1.0);
    let b = c.effective_cache_pages.max(1.0);
    let fetched = if t <= b {
        (2.0 * t * tuples / (2.0 * t + tuples)).min(t)
    } else {
        let limit = 2.0 * t * b / (2.0 * t - b);
        if tuples <= limit {
            2.0 * t * tuples / (2.0 * t + tuples)
        } else {
            b + (tuples - limit) * (t - b) / t
        }
    };
    fetched.ceil()
}

/// An index scan as costed.
#[derive(Clone)]
pub(super) struct IndexPlan {
    pub index: Arc<IndexDef>,
    pub quals: Vec<IndexQual>,
    /// Which of the filters are key conditions.
    pub used: Vec<usize>,
    pub cost: f64,
    /// The part of `cost` before the first row: one descent.
    pub startup: f64,
    /// The table reads' part of `cost`.
    heap_io: f64,
    index_only: bool,
    /// Rows the key conditions are estimated to find (at least 1).
    pub rows: f64,
    /// The index's part of `cost`: descent, leaf pages and index tuples
    /// (what a bitmap index scan costs before its heap is read).
    pub index_cost: f64,
}

/// The scan of `index` searching by what it can of `filters`, with its
/// cost; None if it can search by none of them.
pub(super) fn index_plan(
    index: &Arc<IndexDef>,
    filters: &[Filter],
    size: &TableSize,
) -> Option<IndexPlan> {
    index_plan_with(index, filters, size, false, 1.0)
}

/// [`index_plan`], or with `whole` a scan of all of the index where no
/// condition can be searched by; one of `loops` runs, whose pages are
/// read once for all of them as far as the cache holds them (PostgreSQL's
/// `loop_count`).
fn index_plan_with(
    index: &Arc<IndexDef>,
    filters: &[Filter],
    size: &TableSize,
    whole: bool,
    loops: f64,
) -> Option<IndexPlan> {
    let loops = loops.max(1.0);
    let c = &size.costs;
    let index_pages = size.index_pages(index.rel);
    // Each condition on a key column, with the filter it is part of (a
    // BETWEEN is two).
    let conds: Vec<(usize, usize, IndexCond)> = filters
        .iter()
        .enumerate()
        .flat_map(|(i, f)| f.predicate.conjuncts().into_iter().map(move |c| (i, c)))
        .filter_map(|(i, c)| {
            let cond = c.as_index_cond()?;
            let key = index
                .columns
                .iter()
                .position(|c| c.column == cond.column())?;
            Some((i, key, cond))
        })
        .collect();
    // Like the scan (`scan_keys`): equalities on leading columns, then a
    // range on the next; conditions on the columns after those are not
    // searched by and stay in the filter.
    let mut selectivity = 1.0;
    let mut used = Vec::new();
    let mut quals = Vec::new();
    let mut equal_keys = 0;
    // Index searches: the product of the IN lists' lengths.
    let mut searches = 1.0;
    for key in 0..index.columns.len() {
        let column = index.columns[key].column;
        let here: Vec<&(usize, usize, IndexCond)> =
            conds.iter().filter(|(_, k, _)| *k == key).collect();
        let mut equal: Option<f64> = None;
        let (mut lower, mut upper): (Option<f64>, Option<f64>) = (None, None);
        for (i, _, cond) in &here {
            let s = size.selectivity(cond);
            let qual = match *cond {
                IndexCond::Compare { op, value, .. } => {
                    match op {
                        BinaryOp::Eq => equal = Some(equal.map_or(s, |e| e.min(s))),
                        BinaryOp::Gt | BinaryOp::Ge => lower = Some(lower.map_or(s, |l| l.min(s))),
                        _ => upper = Some(upper.map_or(s, |u| u.min(s))),
                    }
                    IndexQual::Compare {
                        key,
                        op,
                        value: value.clone(),
                    }
                }
                IndexCond::In { values, .. } => {
                    equal = Some(equal.map_or(s, |e| e.min(s)));
                    searches *= values.len().max(1) as f64;
                    IndexQual::In {
                        key,
                        values: values.to_vec(),
                    }
                }
                IndexCond::IsNull { .. } => {
                    equal = Some(equal.map_or(s, |e| e.min(s)));
                    IndexQual::IsNull { key }
                }
            };
            used.push(*i);
            quals.push(qual);
        }
        match equal {
            Some(s) => {
                selectivity *= s;
                equal_keys += 1;
            }
            None => {
                selectivity *= match (lower, upper) {
                    (Some(l), Some(u)) => size.range(column, l, u),
                    (Some(s), None) | (None, Some(s)) => s,
                    (None, None) => 1.0,
                };
                break;
            }
        }
    }
    if quals.is_empty() && !whole {
        return None;
    }
    // A filter goes to the index condition only if all of it is searched
    // by; one partly searched by stays a filter too.
    let searched = used.clone();
    used.sort_unstable();
    used.dedup();
    used.retain(|&i| {
        let parts = filters[i].predicate.conjuncts().len();
        searched.iter().filter(|&&j| j == i).count() == parts
    });
    let mut tuples = selectivity * size.rows;
    if index.kind.unique() && equal_keys == index.columns.len() {
        tuples = tuples.min(searches);
    }
    let tuples = tuples.max(1.0);
    // The index's own part (`genericcostestimate`, `btcostestimate`):
    // the leaf pages holding the entries, each entry's CPU, and per
    // search a descent's comparisons and pages' CPU.
    let entries = size.rows.max(1.0);
    let mut index_pages_read = (tuples * index_pages / entries).ceil().max(1.0);
    if loops > 1.0 {
        index_pages_read = pages_fetched(index_pages_read * loops, index_pages, c) / loops;
    }
    let height = (entries.ln() / ENTRIES_PER_LEAF.ln()).ceil().max(1.0);
    let descent = entries.log2().ceil() * c.cpu_operator
        + (height + 1.0) * DESCENT_OPERATORS_PER_LEVEL * c.cpu_operator;
    let index_cost = index_pages_read * c.random_page
        + tuples * (c.cpu_index_tuple + c.cpu_operator * quals.len() as f64)
        + searches * descent;
    // The heap's part (`cost_index`): between a random read of each
    // distinct page the rows are on, if they lie anywhere, and a
    // sequential run over the fraction of the table they fill, if the
    // table is in the index's order, by the correlation squared.
    let worst = pages_fetched(tuples * loops, size.pages, c) / loops * c.random_page;
    let run = (selectivity * size.pages).ceil().max(1.0);
    let best = c.random_page + (run - 1.0) * c.seq_page;
    let mut correlation = size.correlation(index.columns[0].column);
    if index.columns.len() > 1 {
        correlation *= MULTI_COLUMN_CORRELATION;
    }
    let heap_io = worst + correlation * correlation * (best - worst);
    let cpu = tuples * (c.cpu_tuple + c.cpu_operator * filters.len() as f64);
    Some(IndexPlan {
        index: Arc::clone(index),
        quals,
        used,
        cost: index_cost + heap_io + cpu,
        startup: descent,
        heap_io,
        index_only: false,
        rows: tuples,
        index_cost,
    })
}
