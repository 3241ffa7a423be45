//! Estimates of the nodes above the scans, from their inputs' estimates:
//! sorts, limits, filters, aggregation and the three join methods, as
//! PostgreSQL's `costsize.c` makes them (the scans' own are in
//! [`super::access`]).
//!
//! The join methods' costs decide which one a join runs with
//! (`query::join`, for each order it compares):
//!
//! ```text
//! nested loop  outer + outer rows × (inner's cost per run)       + pairs × conditions
//! hash join    outer + inner + building the table over the inner + outer rows × probing
//! merge join   both inputs sorted (or ordered already)           + one pass over both
//! ```
//!
//! A nested loop whose inner side searches an index by the outer row's
//! values (parameterized) costs one index search per outer row, which
//! is what makes it win for a few outer rows against a large inner table.

use crate::config::Costs;
use crate::exec::{Estimate, Estimated, PlanNode};
use crate::heap::tuple::fixed_width;
use crate::storage::BLOCK_SIZE;
use crate::types::ColumnType;

/// Bytes assumed for a value of variable width (PostgreSQL's
/// `get_typavgwidth` default).
pub(super) const VARIABLE_WIDTH: usize = 32;
/// Distinct values assumed of a column nothing is known about
/// (PostgreSQL's `DEFAULT_NUM_DISTINCT`).
pub(super) const DEFAULT_NUM_DISTINCT: f64 = 200.0;
/// Bytes a row takes in a sort's or a hash table's memory besides its
/// values (PostgreSQL's tuple header and slot overhead, roughly).
const IN_MEMORY_ROW_OVERHEAD: f64 = 24.0;
/// Runs a spilling sort merges at once, at the least (PostgreSQL's
/// `MINORDER`).
const MERGE_ORDER_MIN: f64 = 6.0;
/// Of a spilling sort's page I/O, the share taken to be sequential
/// (PostgreSQL's 3/4).
const SORT_SEQUENTIAL_SHARE: f64 = 0.75;

/// Bytes a value of type `ty` takes, on average as assumed.
pub(super) fn type_width(ty: ColumnType) -> usize {
    fixed_width(&ty).unwrap_or(VARIABLE_WIDTH)
}

/// Bytes a row of `types` takes, as assumed.
pub(super) fn row_width(types: impl IntoIterator<Item = ColumnType>) -> usize {
    types.into_iter().map(type_width).sum()
}

/// `node` with `estimate` attached, for EXPLAIN and for the nodes built
/// above it.
pub(super) fn estimated(node: Box<dyn PlanNode>, estimate: Estimate) -> Box<dyn PlanNode> {
    Estimated::wrap(node, estimate)
}

/// Rows as PostgreSQL rounds an estimate (`clamp_row_est`): a whole
/// number, at least one.
pub(super) fn clamp_rows(rows: f64) -> f64 {
    if rows.is_nan() || rows <= 1.0 {
        1.0
    } else {
        rows.round()
    }
}

/// Bytes `rows` rows of `width` take in memory.
fn memory_bytes(rows: f64, width: usize) -> f64 {
    rows * (width as f64 + IN_MEMORY_ROW_OVERHEAD)
}

/// What sorting `rows` rows of `width` bytes costs, before the first
/// comes out (PostgreSQL's `cost_sort`): two operators per comparison,
/// n log n comparisons (n log 2k for a bounded sort keeping the first k);
/// beyond `work_mem`, writing and reading the runs once per merge pass.
pub(super) fn sort_cost(rows: f64, width: usize, limit: Option<u64>, c: &Costs) -> f64 {
    let rows = rows.max(2.0);
    let kept = match limit {
        Some(k) if (2 * k.max(1)) as f64 <= rows => 2.0 * k.max(1) as f64,
        _ => rows,
    };
    let compare = 2.0 * c.cpu_operator * rows * kept.log2();
    let bytes = memory_bytes(rows, width);
    let spill = if kept == rows && bytes > c.work_mem_bytes {
        let pages = (bytes / BLOCK_SIZE as f64).ceil();
        let runs = (bytes / c.work_mem_bytes).ceil().max(2.0);
        let passes = (runs.ln() / MERGE_ORDER_MIN.ln()).ceil().max(1.0);
        let per_page =
            SORT_SEQUENTIAL_SHARE * c.seq_page + (1.0 - SORT_SEQUENTIAL_SHARE) * c.random_page;
        2.0 * pages * passes * per_page
    } else {
        0.0
    };
    compare + spill
}

/// A Sort of `input`, keeping the first `limit` rows if bounded.
pub(super) fn sort(input: Estimate, limit: Option<u64>, c: &Costs) -> Estimate {
    let startup = input.total + sort_cost(input.rows, input.width, limit, c);
    Estimate::new(
        startup,
        startup + c.cpu_operator * input.rows,
        input.rows,
        input.width,
    )
}

/// A Limit skipping `offset` rows of `input` and returning at most
/// `count`: its share of the input's run (PostgreSQL's `Limit` path).
pub(super) fn limit(input: Estimate, offset: u64, count: Option<u64>) -> Estimate {
    let rows_in = input.rows.max(1.0);
    let run = input.total - input.startup;
    let skipped = (offset as f64).min(rows_in);
    let end = count.map_or(rows_in, |n| (skipped + n as f64).min(rows_in));
    Estimate::new(
        input.startup + run * skipped / rows_in,
        input.startup + run * end / rows_in,
        clamp_rows(end - skipped),
        input.width,
    )
}

/// A filter of `conditions` conditions passing `selectivity` of
/// `input`'s rows.
pub(super) fn filter(input: Estimate, conditions: usize, selectivity: f64, c: &Costs) -> Estimate {
    Estimate::new(
        input.startup,
        input.total + c.cpu_operator * conditions as f64 * input.rows,
        clamp_rows(input.rows * selectivity),
        input.width,
    )
}

/// A LockRows node over `input`: a tuple's CPU per row locked (PostgreSQL's
/// `create_lockrows_path`; the lock's I/O is not counted, as there).
pub(super) fn lock_rows(input: Estimate, c: &Costs) -> Estimate {
    Estimate::new(
        input.startup,
        input.total + c.cpu_tuple * input.rows,
        input.rows,
        input.width,
    )
}

/// A projection of `input` to rows of `width` bytes: PostgreSQL counts
/// its work in its input's nodes, so only the width changes.
pub(super) fn project(input: Estimate, width: usize) -> Estimate {
    Estimate { width, ..input }
}

/// An aggregation of `input` into `groups` groups (1 without keys) by
/// `keys` key expressions, computing `aggregates` aggregates, with a
/// HAVING of `having` conditions (PostgreSQL's `cost_agg`, hashed where
/// there are keys: every row goes into the table before a group comes
/// out; beyond `work_mem` the table's rows are written and read once).
pub(super) fn aggregate(
    input: Estimate,
    groups: f64,
    keys: usize,
    aggregates: usize,
    having: usize,
    width: usize,
    c: &Costs,
) -> Estimate {
    let per_row = c.cpu_operator * (keys + aggregates) as f64;
    let groups = if keys == 0 {
        1.0
    } else {
        clamp_rows(groups.min(input.rows))
    };
    let spill = if keys > 0 && memory_bytes(groups, width) > c.work_mem_bytes {
        2.0 * (memory_bytes(input.rows, input.width) / BLOCK_SIZE as f64).ceil() * c.seq_page
    } else {
        0.0
    };
    let startup = input.total + per_row * input.rows + spill;
    let total = startup + (c.cpu_tuple + c.cpu_operator * having as f64) * groups;
    let rows = if having > 0 {
        clamp_rows(groups * crate::catalog::statistics::DEFAULT_RANGE_SELECTIVITY)
    } else {
        groups
    };
    Estimate::new(startup, total, rows, width)
}

/// An Append of `inputs`, one after another.
pub(super) fn append(inputs: &[Estimate], c: &Costs) -> Estimate {
    let rows: f64 = inputs.iter().map(|e| e.rows).sum();
    let startup = inputs.first().map_or(0.0, |e| e.startup);
    let total = inputs.iter().map(|e| e.total).sum::<f64>() + c.cpu_tuple * rows;
    let width = inputs.iter().map(|e| e.width).max().unwrap_or(0);
    Estimate::new(startup, total, clamp_rows(rows), width)
}

/// How a join is estimated: its rows, and the conditions it evaluates on
/// each pair besides the keys a hash or merge join matches by.
pub(super) struct JoinShape {
    /// Rows the join returns.
    pub rows: f64,
    /// Its width (the outer's and the inner's).
    pub width: usize,
    /// Conditions evaluated on each pair that reaches them.
    pub conditions: usize,
}

/// A nested loop running `inner` once per row of `outer` (PostgreSQL's
/// `initial_cost_nestloop`, without a Material node: each run of the
/// inner side costs its whole run again; a parameterized inner side's
/// estimate is already one run's, a search by the outer row's values).
pub(super) fn nested_loop(
    outer: Estimate,
    inner: Estimate,
    shape: &JoinShape,
    c: &Costs,
) -> Estimate {
    let loops = outer.rows.max(1.0);
    let startup = outer.startup + inner.startup;
    let pairs = loops * inner.rows;
    let total = outer.total
        + loops * inner.total
        + c.cpu_operator * shape.conditions as f64 * pairs
        + c.cpu_tuple * shape.rows;
    Estimate::new(startup, total, shape.rows, shape.width)
}

/// A hash join building its table over `inner` and probing it with each
/// row of `outer` by `keys` keys, the inner keys having `inner_distinct`
/// distinct values (PostgreSQL's `initial_cost_hashjoin` and
/// `final_cost_hashjoin`: building costs an operator per key and a tuple
/// per inner row, probing an operator per key per outer row and half a
/// bucket's comparisons; a table beyond `work_mem` writes and reads both
/// sides once).
pub(super) fn hash_join(
    outer: Estimate,
    inner: Estimate,
    keys: usize,
    inner_distinct: f64,
    shape: &JoinShape,
    c: &Costs,
) -> Estimate {
    let keys = keys as f64;
    let mut startup =
        outer.startup + inner.total + (c.cpu_operator * keys + c.cpu_tuple) * inner.rows;
    let bucket_rows = inner.rows / inner_distinct.clamp(1.0, inner.rows.max(1.0));
    let mut run = (outer.total - outer.startup)
        + c.cpu_operator * keys * outer.rows
        + c.cpu_operator * keys * outer.rows * bucket_rows * 0.5
        + c.cpu_operator * shape.conditions as f64 * outer.rows * bucket_rows
        + c.cpu_tuple * shape.rows;
    if memory_bytes(inner.rows, inner.width) > c.work_mem_bytes {
        let pages = |e: Estimate| (memory_bytes(e.rows, e.width) / BLOCK_SIZE as f64).ceil();
        startup += c.seq_page * pages(inner);
        run += c.seq_page * (pages(inner) + 2.0 * pages(outer));
    }
    Estimate::new(startup, startup + run, shape.rows, shape.width)
}

/// A merge join of `outer` and `inner`, each already in key order (their
/// sorts, where needed, are in their estimates): one pass over both,
/// comparing `keys` keys (PostgreSQL's `initial_cost_mergejoin`, without
/// its rescans of duplicate inner runs).
pub(super) fn merge_join(
    outer: Estimate,
    inner: Estimate,
    keys: usize,
    shape: &JoinShape,
    c: &Costs,
) -> Estimate {
    let startup = outer.startup + inner.startup;
    let total = outer.total
        + inner.total
        + c.cpu_operator * keys as f64 * (outer.rows + inner.rows)
        + c.cpu_operator * shape.conditions as f64 * shape.rows
        + c.cpu_tuple * shape.rows;
    Estimate::new(startup, total, shape.rows, shape.width)
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: Costs = Costs::DEFAULTS;

    #[test]
    fn a_limit_takes_its_share_of_the_run() {
        let input = Estimate::new(10.0, 110.0, 1000.0, 8);
        let l = limit(input, 100, Some(10));
        assert_eq!(l.rows, 10.0);
        assert!((l.startup - 20.0).abs() < 1e-9, "{l:?}");
        assert!((l.total - 21.0).abs() < 1e-9, "{l:?}");
        // A limit beyond the rows returns what there is.
        assert_eq!(limit(input, 0, Some(5000)).rows, 1000.0);
        assert_eq!(limit(input, 0, Some(5000)).total, 110.0);
    }

    #[test]
    fn a_sort_beyond_work_mem_pays_for_its_runs() {
        let small = sort_cost(1000.0, 8, None, &C);
        let large = sort_cost(1_000_000.0, 100, None, &C);
        let in_memory_large = 2.0 * C.cpu_operator * 1e6 * 1e6f64.log2();
        assert!(small < 100.0);
        assert!(large > in_memory_large + 1000.0, "{large}");
        // Bounded, it keeps few rows and never spills.
        assert!(sort_cost(1_000_000.0, 100, Some(10), &C) < in_memory_large);
    }

    #[test]
    fn joins_of_few_outer_rows_favour_a_nested_loop_over_a_hash_join() {
        let shape = |rows| JoinShape {
            rows,
            width: 16,
            conditions: 0,
        };
        // Ten outer rows, each finding one row through an index costing
        // 8.5 per search; or a hash join over a 100 000-row table.
        let outer = Estimate::new(0.0, 20.0, 10.0, 8);
        let searched = Estimate::new(0.3, 8.5, 1.0, 8);
        let scanned = Estimate::new(0.0, 1443.0, 100_000.0, 8);
        let nl = nested_loop(outer, searched, &shape(10.0), &C);
        let hj = hash_join(outer, scanned, 1, 100_000.0, &shape(10.0), &C);
        assert!(nl.total < hj.total, "{nl:?} {hj:?}");
        // A hundred thousand outer rows: the other way round.
        let outer = Estimate::new(0.0, 1443.0, 100_000.0, 8);
        let nl = nested_loop(outer, searched, &shape(100_000.0), &C);
        let hj = hash_join(outer, scanned, 1, 100_000.0, &shape(100_000.0), &C);
        assert!(hj.total < nl.total, "{nl:?} {hj:?}");
    }
}
