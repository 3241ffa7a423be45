//! The bitmap path of [`super::access`]: a Bitmap Heap Scan over one
//! index's bitmap, over a BitmapAnd of two indexes' bitmaps (conditions
//! ANDed in the WHERE, each served by its own index), or over a BitmapOr
//! (an OR whose every part an index serves), costed as PostgreSQL costs
//! them (`cost_bitmap_heap_scan`, `cost_bitmap_and_node`,
//! `cost_bitmap_or_node`).
//!
//! The costing functions take the estimated rows and the table's size as
//! inputs, from the same [`IndexPlan`] the index path computes: where the
//! estimates come from is the index path's business, and better ones
//! (statistics) change the bitmap's costs with them.

use std::sync::Arc;

use super::access::{index_plan, pages_fetched, IndexPlan, TableSize};
use super::cost;
use crate::catalog::{IndexDef, TableDef};
use crate::config::Costs;
use crate::exec::bitmapscan::{
    BitmapHeapScanNode, BitmapIndexScanNode, BitmapNode, BitmapSetNode, BitmapSetOp,
};
use crate::exec::{Estimate, Expr, Filter, PlanNode};

/// PostgreSQL's charge for adding one index tuple to a bitmap, as a
/// fraction of an operator's cost (`cost_bitmap_tree_node`).
const BITMAP_ADD_OPERATOR_FRACTION: f64 = 0.1;
/// PostgreSQL's charge for each further input of a BitmapAnd or a
/// BitmapOr, in operators (combining two bitmaps).
const BITMAP_COMBINE_OPERATORS: f64 = 100.0;

/// The pages a scan fetching `rows` rows scattered over a table of
/// `pages` pages reads: Mackert and Lohman's estimate (PostgreSQL's
/// `index_pages_fetched`), at most the table, since a bitmap reads each
/// page once. At least one page, for a table with any.
pub(crate) fn bitmap_pages_fetched(rows: f64, pages: f64, c: &Costs) -> f64 {
    let table = pages.max(1.0);
    pages_fetched(rows, pages, c).clamp(1.0, table)
}

/// What a Bitmap Heap Scan costs: building its bitmap (`bitmap_cost`),
/// reading the `pages_fetched` pages its `rows` rows lie on in block
/// order, each costing between a random and a sequential read by how
/// much of the table is read (`sqrt(pages_fetched / pages)`: the more
/// pages, the closer together), and each row's CPU with its `quals`
/// conditions rechecked or filtered (PostgreSQL's
/// `cost_bitmap_heap_scan`).
pub(crate) fn bitmap_heap_cost(
    bitmap_cost: f64,
    rows: f64,
    pages: f64,
    quals: usize,
    c: &Costs,
) -> f64 {
    let table = pages.max(1.0);
    let fetched = bitmap_pages_fetched(rows, pages, c);
    let cost_per_page = if fetched >= 2.0 {
        c.random_page - (c.random_page - c.seq_page) * (fetched / table).sqrt()
    } else {
        c.random_page
    };
    debug_assert!(
        c.random_page < c.seq_page || (c.seq_page..=c.random_page).contains(&cost_per_page)
    );
    let cpu_per_row = c.cpu_tuple + c.cpu_operator * quals as f64;
    bitmap_cost + fetched * cost_per_page + rows * cpu_per_row
}

/// What a Bitmap Index Scan costs: the index scan's own part (descent,
/// leaves, index tuples) and adding each row to the bitmap.
pub(crate) fn bitmap_index_cost(plan: &IndexPlan, c: &Costs) -> f64 {
    plan.index_cost + BITMAP_ADD_OPERATOR_FRACTION * c.cpu_operator * plan.rows
}

/// A BitmapAnd's or BitmapOr's (cost, rows) over its inputs' (cost,
/// rows), in a table of `table_rows` rows: the inputs' costs and a charge
/// per further input; the rows of independent conditions, multiplied
/// for AND and added for OR (at most the table).
pub(crate) fn bitmap_set_estimate(
    op: BitmapSetOp,
    inputs: &[(f64, f64)],
    table_rows: f64,
    c: &Costs,
) -> (f64, f64) {
    debug_assert!(inputs.len() >= 2);
    let table_rows = table_rows.max(1.0);
    let cost = inputs.iter().map(|(c, _)| c).sum::<f64>()
        + BITMAP_COMBINE_OPERATORS * c.cpu_operator * (inputs.len() - 1) as f64;
    let selectivity = match op {
        BitmapSetOp::And => inputs.iter().map(|(_, r)| r / table_rows).product::<f64>(),
        BitmapSetOp::Or => inputs
            .iter()
            .map(|(_, r)| r / table_rows)
            .sum::<f64>()
            .min(1.0),
    };
    (cost, (selectivity * table_rows).max(1.0))
}

/// One Bitmap Index Scan as planned: the index plan and its `Index Cond`
/// text.
struct BitmapInput {
    plan: IndexPlan,
    label: String,
}

/// A bitmap heap scan as costed.
pub(crate) struct BitmapPlan {
    inputs: Vec<BitmapInput>,
    /// How the inputs combine (None for one input).
    op: Option<BitmapSetOp>,
    /// Which of the filters the bitmap searches by, whole: the recheck.
    used: Vec<usize>,
    pub cost: f64,
    /// The bitmap's part of `cost`, paid before the first row, and the
    /// rows it finds.
    pub startup: f64,
    bitmap_rows: f64,
}

/// The text of the filters at `used`, ANDed as the index path labels its
/// key conditions.
fn and_label(filters: &[Filter], used: &[usize]) -> String {
    let labels: Vec<&str> = used.iter().map(|&i| filters[i].label.as_str()).collect();
    if labels.len() == 1 {
        labels[0].to_string()
    } else {
        format!("({})", labels.join(" AND "))
    }
}

/// The cheapest bitmap heap scan of a table with `indexes`, searching by
/// what it can of `filters`: over one index, over a BitmapAnd of two
/// indexes searching by different filters, or over a BitmapOr for a
/// filter that is an OR whose every part an index searches by whole.
/// None if no index serves any filter.
pub(crate) fn best_bitmap_plan(
    indexes: &[Arc<IndexDef>],
    filters: &[Filter],
    size: &TableSize,
) -> Option<BitmapPlan> {
    let quals = filters.len();
    let c = &size.costs;
    let singles: Vec<IndexPlan> = indexes
        .iter()
        .filter_map(|index| index_plan(index, filters, size))
        .filter(|plan| !plan.used.is_empty())
        .collect();
    let mut candidates: Vec<BitmapPlan> = Vec::new();
    for plan in &singles {
        let bitmap_cost = bitmap_index_cost(plan, c);
        let cost = bitmap_heap_cost(bitmap_cost, plan.rows, size.pages, quals, c);
        candidates.push(BitmapPlan {
            inputs: vec![BitmapInput {
                label: and_label(filters, &plan.used),
                plan: plan.clone(),
            }],
            op: None,
            used: plan.used.clone(),
            cost,
            startup: bitmap_cost,
            bitmap_rows: plan.rows,
        });
    }
    // Two indexes searching by different filters, ANDed.
    for (i, a) in singles.iter().enumerate() {
        for b in &singles[i + 1..] {
            if Arc::ptr_eq(&a.index, &b.index) || a.used.iter().any(|u| b.used.contains(u)) {
                continue;
            }
            let inputs = [
                (bitmap_index_cost(a, c), a.rows),
                (bitmap_index_cost(b, c), b.rows),
            ];
            let (bitmap_cost, rows) = bitmap_set_estimate(BitmapSetOp::And, &inputs, size.rows, c);
            let mut used: Vec<usize> = a.used.iter().chain(&b.used).copied().collect();
            used.sort_unstable();
            candidates.push(BitmapPlan {
                inputs: vec![
                    BitmapInput {
                        label: and_label(filters, &a.used),
                        plan: a.clone(),
                    },
                    BitmapInput {
                        label: and_label(filters, &b.used),
                        plan: b.clone(),
                    },
                ],
                op: Some(BitmapSetOp::And),
                used,
                cost: bitmap_heap_cost(bitmap_cost, rows, size.pages, quals, c),
                startup: bitmap_cost,
                bitmap_rows: rows,
            });
        }
    }
    for (at, filter) in filters.iter().enumerate() {
        if let Some(plan) = or_plan(indexes, filter, at, size, quals) {
            candidates.push(plan);
        }
    }
    candidates
        .into_iter()
        .min_by(|a, b| a.cost.total_cmp(&b.cost))
}

/// A BitmapOr for `filter` (the `at`th), if it is an OR whose every part
/// some index searches by whole (the cheapest such index for each part).
fn or_plan(
    indexes: &[Arc<IndexDef>],
    filter: &Filter,
    at: usize,
    size: &TableSize,
    quals: usize,
) -> Option<BitmapPlan> {
    let c = &size.costs;
    let arms: Vec<&Expr> = filter.predicate.disjuncts();
    if arms.len() < 2 || arms.len() != filter.arm_labels.len() {
        return None;
    }
    let mut inputs = Vec::with_capacity(arms.len());
    for (arm, label) in arms.into_iter().zip(&filter.arm_labels) {
        let arm_filter = [Filter {
            predicate: arm.clone(),
            label: label.clone(),
            arm_labels: Vec::new(),
        }];
        let best = indexes
            .iter()
            .filter_map(|index| index_plan(index, &arm_filter, size))
            .filter(|plan| plan.used == [0])
            .min_by(|a, b| bitmap_index_cost(a, c).total_cmp(&bitmap_index_cost(b, c)))?;
        inputs.push(BitmapInput {
            plan: best,
            label: label.clone(),
        });
    }
    let estimates: Vec<(f64, f64)> = inputs
        .iter()
        .map(|i| (bitmap_index_cost(&i.plan, c), i.plan.rows))
        .collect();
    let (bitmap_cost, rows) = bitmap_set_estimate(BitmapSetOp::Or, &estimates, size.rows, c);
    Some(BitmapPlan {
        inputs,
        op: Some(BitmapSetOp::Or),
        used: vec![at],
        cost: bitmap_heap_cost(bitmap_cost, rows, size.pages, quals, c),
        startup: bitmap_cost,
        bitmap_rows: rows,
    })
}

/// The Bitmap Heap Scan node for `plan`: the filters it searches by are
/// its `Recheck Cond`, the rest its `Filter`.
pub(crate) fn bitmap_scan_node(
    table: Arc<TableDef>,
    alias: Option<String>,
    wanted: Vec<bool>,
    filters: Vec<Filter>,
    plan: BitmapPlan,
    c: &Costs,
) -> Result<Box<dyn PlanNode>, super::SqlError> {
    let (mut keys, rest) = super::access::split_filters(filters, &plan.used);
    let recheck = match plan.op {
        // As PostgreSQL shows an OR: each part parenthesised.
        Some(BitmapSetOp::Or) => {
            let or = keys.pop().expect("a BitmapOr searches by its OR");
            debug_assert!(keys.is_empty());
            let label = format!("({})", or.arm_labels.join(" OR "));
            Filter { label, ..or }
        }
        _ => super::query::and_all(keys)?.expect("a bitmap searches by some filter"),
    };
    let mut nodes: Vec<Box<dyn BitmapNode>> = plan
        .inputs
        .into_iter()
        .map(|input| {
            // As PostgreSQL shows a bitmap: its cost from nothing, its
            // TIDs as rows, no width.
            let cost = bitmap_index_cost(&input.plan, c);
            let mut node =
                BitmapIndexScanNode::new(&table, input.plan.index, input.plan.quals, input.label);
            node.estimate = Some(Estimate::new(
                0.0,
                cost,
                cost::clamp_rows(input.plan.rows),
                0,
            ));
            Box::new(node) as Box<dyn BitmapNode>
        })
        .collect();
    let input: Box<dyn BitmapNode> = match plan.op {
        None => nodes.pop().expect("one input"),
        Some(op) => {
            let mut node = BitmapSetNode::new(op, nodes);
            node.estimate = Some(Estimate::new(
                plan.startup,
                plan.startup,
                cost::clamp_rows(plan.bitmap_rows),
                0,
            ));
            Box::new(node)
        }
    };
    Ok(Box::new(BitmapHeapScanNode::new(
        table,
        alias,
        wanted,
        input,
        recheck,
        super::query::and_all(rest)?,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PostgreSQL's default costs, with a cache larger than the tables.
    const C: Costs = Costs::DEFAULTS;
    const RANDOM_PAGE_COST: f64 = C.random_page;
    const SEQ_PAGE_COST: f64 = C.seq_page;
    const CPU_TUPLE_COST: f64 = C.cpu_tuple;
    const CPU_OPERATOR_COST: f64 = C.cpu_operator;

    #[test]
    fn pages_fetched_grow_with_rows_up_to_the_table() {
        assert_eq!(bitmap_pages_fetched(1.0, 1000.0, &C), 1.0);
        let some = bitmap_pages_fetched(500.0, 1000.0, &C);
        assert!((400.0..=500.0).contains(&some), "{some}");
        assert_eq!(bitmap_pages_fetched(1.0e9, 1000.0, &C), 1000.0);
    }

    #[test]
    fn a_page_costs_less_the_more_of_the_table_a_bitmap_reads() {
        let per_page = |rows: f64| {
            bitmap_heap_cost(0.0, rows, 10_000.0, 0, &C) / bitmap_pages_fetched(rows, 10_000.0, &C)
        };
        // One page: a random read; the whole table: nearly sequential.
        assert!((per_page(1.0) - (RANDOM_PAGE_COST + CPU_TUPLE_COST)).abs() < 1e-9);
        assert!(per_page(1.0e7) < SEQ_PAGE_COST + 1.0e7 * CPU_TUPLE_COST / 10_000.0 + 1e-6);
        assert!(per_page(100.0) > per_page(5000.0));
    }

    #[test]
    fn and_multiplies_and_or_adds_the_rows_of_its_inputs() {
        let inputs = [(10.0, 100.0), (20.0, 50.0)];
        let (and_cost, and_rows) = bitmap_set_estimate(BitmapSetOp::And, &inputs, 1000.0, &C);
        assert!((and_rows - 5.0).abs() < 1e-9, "{and_rows}");
        assert!((and_cost - (30.0 + 100.0 * CPU_OPERATOR_COST)).abs() < 1e-9);
        let (_, or_rows) = bitmap_set_estimate(BitmapSetOp::Or, &inputs, 1000.0, &C);
        assert!((or_rows - 150.0).abs() < 1e-9, "{or_rows}");
        let (_, all) =
            bitmap_set_estimate(BitmapSetOp::Or, &[(1.0, 900.0), (1.0, 900.0)], 1000.0, &C);
        assert_eq!(all, 1000.0);
    }
}
