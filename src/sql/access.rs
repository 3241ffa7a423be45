//! How a table is read: a sequential scan, or an index scan through one of
//! its B-tree indexes, whichever is estimated to cost less.
//!
//! There are no statistics yet (no ANALYZE): the estimates are
//! PostgreSQL's for a table never analysed. The table's size is its page
//! count now, its row count what that many pages hold at the width its
//! column types suggest, and a condition's selectivity PostgreSQL's
//! defaults: 0.5 % for an equality (or IS NULL, or per value of an `IN`
//! list), a third for a one-sided range, 0.5 % for a range bounded on
//! both sides, and one row for equalities on every column of a unique
//! index. Costs are in PostgreSQL's units: a sequential page read is 1, a
//! random one 4, a row 0.01 of CPU, an index entry 0.005, an operator
//! 0.0025.

use std::sync::Arc;

use crate::catalog::{IndexDef, TableDef};
use crate::database::Database;
use crate::exec::indexscan::{IndexQual, IndexScanNode, IndexSearch};
use crate::exec::{BinaryOp, Filter, PlanNode, SeqScanNode};
use crate::storage::{Fork, BLOCK_SIZE};
use crate::types::ColumnType;

use super::expr::StmtCx;
use crate::btree::Direction;
use crate::exec::expr::IndexCond;

pub(super) const SEQ_PAGE_COST: f64 = 1.0;
pub(super) const RANDOM_PAGE_COST: f64 = 4.0;
pub(super) const CPU_TUPLE_COST: f64 = 0.01;
const CPU_INDEX_TUPLE_COST: f64 = 0.005;
pub(super) const CPU_OPERATOR_COST: f64 = 0.0025;
/// What a disabled method costs on top (PostgreSQL's `disable_cost`): it
/// is chosen only when nothing else can be.
const DISABLE_COST: f64 = 1.0e10;
/// Selectivity of an equality, and of a range bounded on both sides.
const EQ_SELECTIVITY: f64 = 0.005;
/// Selectivity of a range bounded on one side.
const RANGE_SELECTIVITY: f64 = 1.0 / 3.0;
/// Entries of a leaf page, for the number of leaves a scan reads.
const ENTRIES_PER_LEAF: f64 = 200.0;
/// Bytes a row takes besides its columns: tuple header and line pointer.
const ROW_OVERHEAD: usize = 28;
/// Bytes assumed for a column of variable width.
const VARIABLE_WIDTH: usize = 32;

/// The scan node for `table`, decoding `wanted`, with the item's
/// conditions `filters` (over the table's columns): an index scan if one
/// of its indexes can search by some of them and costs less.
pub(crate) fn table_scan(
    cx: &StmtCx,
    db: &Database,
    table: Arc<TableDef>,
    alias: Option<String>,
    wanted: Vec<bool>,
    filters: Vec<Filter>,
) -> Result<Box<dyn PlanNode>, super::SqlError> {
    let indexes = db.catalog().indexes_of(&table);
    if indexes.is_empty() {
        // Nothing to choose from: not even the table's size is needed.
        let filter = super::query::and_all(filters)?;
        return Ok(Box::new(SeqScanNode::new(table, alias, wanted, filter)));
    }
    let size = TableSize::of(db, &table);
    let seq_cost = size.pages * SEQ_PAGE_COST
        + size.rows * (CPU_TUPLE_COST + CPU_OPERATOR_COST * filters.len() as f64)
        + if cx.scans.seq { 0.0 } else { DISABLE_COST };
    let index_penalty = if cx.scans.index { 0.0 } else { DISABLE_COST };
    let mut best: Option<(f64, IndexPlan)> = None;
    for index in indexes.iter() {
        let Some(plan) = index_plan(index, &filters, &size) else {
            continue;
        };
        let cost = plan.cost + index_penalty;
        if cost < seq_cost && best.as_ref().is_none_or(|(c, _)| cost < *c) {
            best = Some((cost, plan));
        }
    }
    // The bitmap path, beside the index path: taken where it is the
    // cheapest of the three.
    let bitmap_penalty = if cx.scans.bitmap { 0.0 } else { DISABLE_COST };
    let best_cost = best.as_ref().map_or(seq_cost, |(c, _)| *c);
    if let Some(bitmap) = super::bitmap_path::best_bitmap_plan(&indexes, &filters, &size) {
        if bitmap.cost + bitmap_penalty < best_cost {
            return super::bitmap_path::bitmap_scan_node(table, alias, wanted, filters, bitmap);
        }
    }
    let Some((_, plan)) = best else {
        let filter = super::query::and_all(filters)?;
        return Ok(Box::new(SeqScanNode::new(table, alias, wanted, filter)));
    };
    // The key conditions are searched by and rechecked; the rest filter.
    let mut keys = Vec::new();
    let mut rest = Vec::new();
    for (i, f) in filters.into_iter().enumerate() {
        if plan.used.contains(&i) {
            keys.push(f);
        } else {
            rest.push(f);
        }
    }
    let (recheck, label) = super::query::and_all(keys)?
        .map(|k| (k.predicate, k.label))
        .unzip();
    let search = IndexSearch {
        quals: plan.quals,
        recheck,
        label,
    };
    Ok(Box::new(IndexScanNode::new(
        table,
        plan.index,
        alias,
        Direction::Forward,
        search,
        wanted,
        super::query::and_all(rest)?,
    )))
}

/// A table's size as the planner sees it.
pub(super) struct TableSize {
    pub pages: f64,
    pub rows: f64,
}

impl TableSize {
    fn of(db: &Database, table: &TableDef) -> TableSize {
        // A table whose size cannot be read is planned as an empty one:
        // the scan will report the error.
        let pages = db
            .pool()
            .relation(table.heap.rel)
            .nblocks(Fork::Main)
            .unwrap_or(0) as f64;
        let width: usize = ROW_OVERHEAD
            + table
                .columns
                .iter()
                .map(|c| match c.ty {
                    ColumnType::Boolean => 1,
                    ColumnType::Integer | ColumnType::Date => 4,
                    ColumnType::BigInt | ColumnType::Double | ColumnType::Timestamp => 8,
                    _ => VARIABLE_WIDTH,
                })
                .sum::<usize>();
        let per_page = (BLOCK_SIZE / width).max(1) as f64;
        TableSize {
            pages,
            rows: pages * per_page,
        }
    }
}

/// An index scan as costed.
#[derive(Clone)]
pub(super) struct IndexPlan {
    pub index: Arc<IndexDef>,
    pub quals: Vec<IndexQual>,
    /// Which of the filters are key conditions.
    pub used: Vec<usize>,
    pub cost: f64,
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
    for key in 0..index.columns.len() {
        let here: Vec<&(usize, usize, IndexCond)> =
            conds.iter().filter(|(_, k, _)| *k == key).collect();
        let mut equal = None;
        let (mut lower, mut upper) = (false, false);
        for (i, _, cond) in &here {
            let qual = match *cond {
                IndexCond::Compare { op, value, .. } => {
                    match op {
                        BinaryOp::Eq => equal = Some(EQ_SELECTIVITY),
                        BinaryOp::Gt | BinaryOp::Ge => lower = true,
                        _ => upper = true,
                    }
                    IndexQual::Compare {
                        key,
                        op,
                        value: value.clone(),
                    }
                }
                IndexCond::In { values, .. } => {
                    let s = (values.len() as f64 * EQ_SELECTIVITY).min(1.0);
                    equal = Some(equal.map_or(s, |e: f64| e.min(s)));
                    IndexQual::In {
                        key,
                        values: values.to_vec(),
                    }
                }
                IndexCond::IsNull { .. } => {
                    equal = Some(EQ_SELECTIVITY);
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
                if lower && upper {
                    selectivity *= EQ_SELECTIVITY;
                } else if lower || upper {
                    selectivity *= RANGE_SELECTIVITY;
                }
                break;
            }
        }
    }
    if quals.is_empty() {
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
    let mut rows = selectivity * size.rows;
    if index.kind.unique() && equal_keys == index.columns.len() {
        rows = rows.min(1.0);
    }
    let rows = rows.max(1.0);
    let height = (size.rows.max(1.0).ln() / ENTRIES_PER_LEAF.ln())
        .ceil()
        .max(1.0);
    let leaves = (rows / ENTRIES_PER_LEAF).ceil();
    // Distinct heap pages the rows are on, if they lie anywhere (the
    // Mackert–Lohman estimate PostgreSQL uses, without its cache term).
    let heap_pages = if size.pages > 0.0 {
        size.pages * (1.0 - (-rows / size.pages).exp())
    } else {
        0.0
    };
    let index_cost = RANDOM_PAGE_COST * (height + leaves) + rows * CPU_INDEX_TUPLE_COST;
    let cost = index_cost
        + RANDOM_PAGE_COST * heap_pages
        + rows * CPU_TUPLE_COST
        + rows * CPU_OPERATOR_COST * filters.len() as f64;
    Some(IndexPlan {
        index: Arc::clone(index),
        quals,
        used,
        cost,
        rows,
        index_cost,
    })
}
