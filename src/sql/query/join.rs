//! A FROM clause of several items: where each condition is evaluated,
//! the order the items join in, and each join's method, chosen by
//! estimated cost as PostgreSQL's planner chooses them.
//!
//! **Conditions** (`plan_joins`). ON and WHERE are split into their
//! ANDed parts. A part reading one item is evaluated by that item's
//! scan; any other part by the first join that has every item it needs
//! (a [`JoinCond`]'s `items`). An equality between an expression of some
//! items and one of another item is kept with its two sides planned
//! ([`Equality`]): wherever one side's items are joined and the other
//! side's item is the one joining them, it is that join's hash or merge
//! key and a condition its parameterized scan can search an index by. A
//! WHERE part reading the side a left join fills with NULLs is
//! evaluated above every join.
//!
//! **Order** (`JoinSearch`). The items before the first LEFT JOIN are
//! joined by inner joins (a comma or CROSS JOIN is one whose WHERE may
//! join it), which may run in any order. The planner searches it as
//! PostgreSQL's `standard_join_search` does, by dynamic programming
//! over the sets of those items: each set's cheapest plan is the
//! cheapest, over its items `k`, of the set's plan without `k` joined
//! with `k` by each join method (left-deep: the inner side of a join is
//! always one item, as a parameterized scan and an index-ordered merge
//! input need). A set grows only by an item a condition links it to,
//! unless it or the item has no condition to anything outside it
//! (PostgreSQL's `join_search_one_level`: no cartesian product while a
//! join by a condition is possible). Each set's rows are estimated once,
//! from the set alone ([`SubsetRows`]), so that every order building it
//! is costed against the same rows. The items from the first LEFT JOIN
//! on then join on top in the order written, each as it is written:
//! PostgreSQL's rules for moving outer joins are subtle, and a left join
//! must keep its NULL-filled side after its outer side. With more items
//! than `join_collapse_limit` before the first LEFT JOIN, with the
//! setting at 1, or with a condition between items that runs a subquery
//! (left at the join written, as before the search), the items join in
//! the order written, except that the first two may run the other way
//! round unless such a condition is between them (PostgreSQL tries every
//! join both ways round; here only the first join can be turned, as any
//! other's inner side would be a join).
//!
//! **Rows.** An executor join returns the outer row's columns followed
//! by the inner row's, so a joined row holds its items' columns in the
//! order joined. Conditions are planned over the scope's row (the items
//! in the order written) and moved onto the joined row at the join that
//! evaluates them (`Expr::remapped`); a `ProjectNode` above the last join
//! puts the columns back in the order written where the order differs.
//!
//! ```text
//! FROM big b1 JOIN big b2 ON b2.x = b1.x JOIN small s ON s.id = b2.id WHERE s.y < 10
//!   {b1} {b2} {s}  each item's scan (s's with its Filter: (s.y < 10))
//!   {b1, b2}       the cheaper of {b1} ⋈ b2 and {b2} ⋈ b1, each by its
//!                  cheapest method (a hash join, say)
//!   {b2, s}        the cheaper of {b2} ⋈ s and {s} ⋈ b2 (a nested loop
//!                  from s's few rows searching big_pkey, say)
//!   {b1, s}        not made: no condition links them, and each has one
//!                  to b2
//!   {b1, b2, s}    the cheaper of {b2, s} ⋈ b1 and {b1, b2} ⋈ s
//!   Project        the columns back as written (b1, b2, s) if they are
//!                  not so
//! ```

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use sqlparser::ast;

use super::{and_all, conjuncts, FromClause, FromItem};
use crate::catalog::statistics::ColumnStats;
use crate::catalog::TableDef;
use crate::config::{Costs, JOIN_COLLAPSE_LIMIT_MAX};
use crate::database::Database;
use crate::exec::{estimate_of, Estimate};
use crate::exec::{
    Expr, Filter, FilterNode, HashCond, HashJoinNode, JoinKind, MergeCond, MergeJoinNode,
    NestedLoopNode, PlanNode, ProjectNode, SortKey, SortNode,
};
use crate::sql::access::{self, TableSize, DISABLE_COST};
use crate::sql::cost;
use crate::sql::expr::{ExprPlanner, Scope, StmtCx};
use crate::sql::SqlError;
use crate::types::ColumnType;

/// Most items whose join order is searched (`join_collapse_limit` at
/// most).
const SEARCHED_ITEMS_MAX: usize = JOIN_COLLAPSE_LIMIT_MAX as usize;
// The search's sets of items are the bits of a `u32`.
const _: () = assert!(SEARCHED_ITEMS_MAX < u32::BITS as usize);
/// Costs of two orders this close (relatively) are equal: they differ
/// only by floating-point rounding (orders mirroring each other cost the
/// same), and the order tried first, nearest the written one, stays.
const COST_TIE_FRACTION: f64 = 1e-9;

/// The planned conditions of a FROM clause of several items.
#[derive(Default)]
pub(super) struct PlannedJoins {
    /// Per item: the conditions its scan applies (ANDed), over the
    /// item's own row.
    item_filters: Vec<Vec<Filter>>,
    /// The conditions joins evaluate, over the scope's row.
    conds: Vec<JoinCond>,
    /// What is evaluated over the whole joined row, after every join: a
    /// WHERE on the side a left join fills with NULLs (over the scope's
    /// row).
    top: Option<Filter>,
    /// How many items come before the first left join (all, if there is
    /// none): they join by inner joins, in an order searched.
    inner_items: usize,
}

/// A condition a join evaluates, over the scope's row.
struct JoinCond {
    filter: Filter,
    /// The items joined before it can be evaluated, ascending, at least
    /// two: those it reads, and for a condition of a join from the first
    /// left join on, the item that join brings in (those joins keep the
    /// order written and their conditions: a left join's ON must not run
    /// below it).
    items: Vec<usize>,
    /// Its sides, if it is an equality between expressions of separate
    /// items (and runs no subquery).
    equality: Option<Equality>,
}

/// An equality between expressions of separate items, `a = b`, each
/// side cast to one type in which equal values hash alike (integers of
/// either width compare as bigint, an integer and a numeric as numeric).
/// At a join that brings in one side's only item after the other side's
/// items it is a key: hashed, merged, or searched by.
struct Equality {
    sides: [KeySide; 2],
    ty: ColumnType,
}

/// One side of an [`Equality`].
struct KeySide {
    /// Over the scope's row, cast to the equality's type.
    expr: Expr,
    /// As written.
    label: String,
    /// The items it reads, ascending; never empty, none of the other
    /// side's.
    items: Vec<usize>,
    /// The (item, column of the item) it is, if it is a bare column: for
    /// its statistics, and for an index that may give its order.
    column: Option<(usize, usize)>,
    /// Whether its values in the equality's type keep the column's order
    /// (uncast, or an integer widened): an index on the column then
    /// gives a merge join its order.
    keeps_order: bool,
}

/// The FROM items whose columns `e` reads, ascending.
fn items_read(e: &Expr, scope: &Scope) -> Vec<usize> {
    let mut items: Vec<usize> = e
        .columns_read()
        .into_iter()
        .map(|c| scope.columns[c].item)
        .collect();
    items.dedup();
    items
}

/// Where the conditions of a FROM clause of several items are evaluated.
/// Before the first left join, every join is inner: a condition reading
/// one item filters that item's scan (an ON reading an item joined
/// earlier too), and any other is evaluated wherever its items first
/// meet. From the first left join on, the joins keep the order written
/// and a condition stays where it is written: in the scan of the item a
/// join brings in if it reads nothing else, else in that join (the WHERE
/// of an inner join is the same as its ON), except a WHERE reading the
/// NULL-filled side of a left join, which is evaluated above all joins.
pub(super) fn plan_joins(
    planner: &mut ExprPlanner,
    from: &FromClause,
    selection: Option<&ast::Expr>,
) -> Result<PlannedJoins, SqlError> {
    let scope = planner.scope();
    let n = from.items.len();
    let inner_items = from
        .joins
        .iter()
        .position(|j| j.kind == JoinKind::Left)
        .map_or(n, |j| j + 1);
    let mut slots = Slots {
        item_filters: (0..n).map(|_| Vec::new()).collect(),
        conds: Vec::new(),
        inner_items,
    };
    for (j, spec) in from.joins.iter().enumerate() {
        let k = j + 1;
        // Names in ON resolve among the items of its group joined so far.
        planner.visible = Some(spec.group_start..k + 1);
        for conj in spec.on.iter().flat_map(conjuncts) {
            let f = planner
                .plan_filter(Some(conj), "JOIN/ON")?
                .expect("a condition");
            // An ON reading only the item joined filters that item's rows
            // (for a left join too: its outer rows are kept either way).
            slots.place(planner, conj, f, k)?;
        }
    }
    planner.visible = None;
    let mut top = Vec::new();
    for conj in selection.into_iter().flat_map(conjuncts) {
        let f = planner
            .plan_filter(Some(conj), "WHERE")?
            .expect("a condition");
        let last = items_read(&f.predicate, scope).last().copied().unwrap_or(0);
        if last > 0 && from.joins[last - 1].kind == JoinKind::Left {
            top.push(f);
        } else {
            slots.place(planner, conj, f, last)?;
        }
    }
    Ok(PlannedJoins {
        item_filters: slots.item_filters,
        conds: slots.conds,
        top: and_all(top)?,
        inner_items,
    })
}

/// Conditions gathered per item and for the joins (see [`plan_joins`]).
struct Slots {
    item_filters: Vec<Vec<Filter>>,
    conds: Vec<JoinCond>,
    inner_items: usize,
}

impl Slots {
    /// Places condition `f` (`conj` planned) written at item `at` (the
    /// item whose ON it is, or the last a WHERE reads).
    fn place(
        &mut self,
        planner: &mut ExprPlanner,
        conj: &ast::Expr,
        f: Filter,
        at: usize,
    ) -> Result<(), SqlError> {
        let scope = planner.scope();
        let read = items_read(&f.predicate, scope);
        let inner = at < self.inner_items;
        let own = match read.as_slice() {
            [] => Some(at),
            &[i] if i == at || inner => Some(i),
            _ => None,
        };
        if let Some(item) = own {
            let start = scope.item_columns(item).start;
            self.item_filters[item].push(Filter {
                arm_labels: f.arm_labels,
                predicate: f.predicate.rebased(start),
                label: f.label,
            });
            return Ok(());
        }
        let mut items = read;
        if !inner && !items.contains(&at) {
            items.push(at);
            items.sort_unstable();
        }
        debug_assert!(items.len() >= 2, "a join condition needs two items");
        // A condition running a subquery is never a join key: keys are
        // computed where no subquery can run (and planning it again would
        // plan its subquery again).
        let equality = if f.predicate.has_subplan() {
            None
        } else {
            equality(planner, conj)?
        };
        self.conds.push(JoinCond {
            filter: f,
            items,
            equality,
        });
        Ok(())
    }
}

/// `conj` as an [`Equality`]: an equality between expressions of
/// separate items, of one type; None otherwise.
fn equality(planner: &mut ExprPlanner, conj: &ast::Expr) -> Result<Option<Equality>, SqlError> {
    let ast::Expr::BinaryOp {
        left,
        op: ast::BinaryOperator::Eq,
        right,
    } = conj
    else {
        return Ok(None);
    };
    let scope = planner.scope();
    let (a, b) = (planner.plan(left)?, planner.plan(right)?);
    let (a_items, b_items) = (items_read(&a, scope), items_read(&b, scope));
    if a_items.is_empty() || b_items.is_empty() || a_items.iter().any(|i| b_items.contains(i)) {
        return Ok(None);
    }
    let column = |e: &Expr| {
        let c = e.column_index()?;
        let item = scope.columns[c].item;
        Some((item, c - scope.item_columns(item).start))
    };
    let (a_column, b_column) = (column(&a), column(&b));
    let (a_type, b_type) = (a.ty(), b.ty());
    let integer =
        |t: Option<ColumnType>| matches!(t, Some(ColumnType::Integer | ColumnType::BigInt));
    // Equal values of these pairs are equal `Value`s that hash alike:
    // text and varchar of any length are both `Value::Text`, char of any
    // length `Value::Char` (whose hash ignores the padding).
    let alike = |a: ColumnType, b: ColumnType| match (a, b) {
        (ColumnType::Text | ColumnType::Varchar(_), ColumnType::Text | ColumnType::Varchar(_)) => {
            true
        }
        (ColumnType::Char(_), ColumnType::Char(_)) => true,
        // Equal numerics hash alike whatever their scales.
        (ColumnType::Numeric(_), ColumnType::Numeric(_)) => true,
        _ => a == b,
    };
    let numeric = |t: Option<ColumnType>| matches!(t, Some(ColumnType::Numeric(_)));
    let textual = |t: ColumnType| {
        matches!(
            t,
            ColumnType::Text | ColumnType::Varchar(_) | ColumnType::Char(_)
        )
    };
    // Every rule below is symmetric: the sides' order does not matter.
    let (a, b) = match (a_type, b_type) {
        (Some(x), Some(y)) if alike(x, y) => (a, b),
        (x, y) if integer(x) && integer(y) => (
            Expr::cast(a, ColumnType::BigInt)?,
            Expr::cast(b, ColumnType::BigInt)?,
        ),
        // An integer against a numeric compares as numeric: hash both so.
        (x, y) if (integer(x) && numeric(y)) || (numeric(x) && integer(y)) => (
            Expr::cast(a, ColumnType::Numeric(None))?,
            Expr::cast(b, ColumnType::Numeric(None))?,
        ),
        // Mixed with char, as PostgreSQL resolves the operator: against
        // varchar both compare as char (padding ignored on both sides),
        // against text both as text (the char's padding cut). Hash both
        // sides in that type.
        (Some(x @ (ColumnType::Char(_) | ColumnType::Varchar(_))), Some(y))
            if matches!(
                (x, y),
                (ColumnType::Char(_), ColumnType::Varchar(_))
                    | (ColumnType::Varchar(_), ColumnType::Char(_))
            ) =>
        {
            (
                Expr::cast(a, ColumnType::Char(None))?,
                Expr::cast(b, ColumnType::Char(None))?,
            )
        }
        (Some(x), Some(y)) if textual(x) && textual(y) => (
            Expr::cast(a, ColumnType::Text)?,
            Expr::cast(b, ColumnType::Text)?,
        ),
        _ => return Ok(None),
    };
    let Some(ty) = a.ty() else {
        return Ok(None);
    };
    debug_assert!(
        b.ty().is_some_and(|t| alike(t, ty)),
        "both sides of a key have one type"
    );
    // Uncast, or an integer widened: the same order. (A text cast of a
    // char, or a char cast of a varchar, can reorder values that differ
    // in trailing characters.)
    let keeps_order = |t: Option<ColumnType>| {
        t == Some(ty) || (integer(t) && matches!(ty, ColumnType::BigInt | ColumnType::Numeric(_)))
    };
    Ok(Some(Equality {
        sides: [
            KeySide {
                expr: a,
                label: left.to_string(),
                items: a_items,
                column: a_column,
                keeps_order: keeps_order(a_type),
            },
            KeySide {
                expr: b,
                label: right.to_string(),
                items: b_items,
                column: b_column,
                keeps_order: keeps_order(b_type),
            },
        ],
        ty,
    }))
}

/// What the planner knows of each FROM item for estimating joins: a
/// table's size and statistics.
#[derive(Default)]
pub(super) struct ItemSizes {
    sizes: Vec<Option<TableSize>>,
}

impl ItemSizes {
    pub(super) fn of(cx: &StmtCx, db: &Database, items: &[FromItem]) -> ItemSizes {
        let sizes = items
            .iter()
            .map(|item| match item {
                FromItem::Table(table, _) => Some(TableSize::of(
                    db,
                    table,
                    &db.catalog().indexes_of(table),
                    cx.costs,
                )),
                _ => None,
            })
            .collect();
        ItemSizes { sizes }
    }

    /// Item `item`'s size, if it is a table.
    pub(super) fn table(&self, item: usize) -> Option<&TableSize> {
        self.sizes.get(item)?.as_ref()
    }

    /// Distinct values and NULL fraction of column `column` of item
    /// `item` in its table (PostgreSQL's default if it is not a table's,
    /// or unknown). As in PostgreSQL, the table's conditions do not lower
    /// the count: the values left are taken to be as spread.
    pub(super) fn column(&self, item: usize, column: Option<usize>) -> (f64, f64) {
        let known = column.and_then(|c| Some((self.table(item)?, c)));
        match known {
            Some((size, c)) => (size.distinct(c), size.null_frac(c)),
            None => (cost::DEFAULT_NUM_DISTINCT, 0.0),
        }
    }

    /// Distinct values and NULL fraction of an equality's side.
    fn side(&self, side: &KeySide) -> (f64, f64) {
        match side.column {
            Some((item, column)) => self.column(item, Some(column)),
            None => (cost::DEFAULT_NUM_DISTINCT, 0.0),
        }
    }

    /// The fraction of pairs `equality` matches, whichever side is joined
    /// first (PostgreSQL's `eqjoinsel`): where both sides are analysed
    /// columns with most common values, matching those values
    /// ([`ColumnStats::join_selectivity`]); else the non-NULL share of
    /// both sides over the larger distinct count.
    fn equality_selectivity(&self, equality: &Equality) -> f64 {
        let [a, b] = equality.sides.each_ref().map(|s| self.side(s));
        let [a_stats, b_stats] = equality.sides.each_ref().map(|s| self.stats(s));
        if let (Some(a_stats), Some(b_stats)) = (a_stats, b_stats) {
            if let Some(s) = a_stats.join_selectivity(a.0, b_stats, b.0) {
                return s;
            }
        }
        (1.0 - a.1) * (1.0 - b.1) / a.0.max(b.0).max(1.0)
    }

    /// The statistics of an equality's side, if it is an analysed column.
    fn stats(&self, side: &KeySide) -> Option<&ColumnStats> {
        let (item, column) = side.column?;
        self.table(item)?.column(column)
    }

    /// The fraction of pairs `cond` keeps: an equality's, else
    /// PostgreSQL's default for each of its parts.
    fn selectivity(&self, cond: &JoinCond) -> f64 {
        match &cond.equality {
            Some(equality) => self.equality_selectivity(equality),
            None => access::default_predicate_selectivity(&cond.filter.predicate),
        }
    }
}

/// Row estimates of sets of items joined by inner joins, each from the
/// set alone: the product of its items' rows and of the selectivities of
/// the conditions among them, taken in one order whatever the order
/// joined, and rounded once. PostgreSQL likewise estimates a join
/// relation's rows once, whichever pair of relations first makes it, so
/// that the plans it compares for a set return the same rows.
struct SubsetRows {
    /// Per item, its scan's rows.
    items: Vec<f64>,
    /// Each condition among the items: the items it needs, and the
    /// fraction of rows it keeps.
    conds: Vec<(Vec<usize>, f64)>,
}

impl SubsetRows {
    /// The rows of the set of items `contains` says are in it.
    fn rows(&self, contains: impl Fn(usize) -> bool) -> f64 {
        let items: f64 = (0..self.items.len())
            .filter(|&i| contains(i))
            .map(|i| self.items[i])
            .product();
        let kept: f64 = self
            .conds
            .iter()
            .filter(|(needs, _)| needs.iter().all(|&i| contains(i)))
            .map(|(_, selectivity)| selectivity)
            .product();
        cost::clamp_rows(items * kept)
    }
}

/// The join tree of a FROM clause of several items: the order found by
/// [`JoinSearch`], each join by the method estimated to cost least, its
/// rows in the order written.
pub(super) fn build_joins(
    cx: &StmtCx,
    db: &Database,
    scope: &Scope,
    sizes: &ItemSizes,
    from: FromClause,
    used: Vec<bool>,
    planned: PlannedJoins,
) -> Result<Box<dyn PlanNode>, SqlError> {
    let PlannedJoins {
        item_filters,
        conds,
        top,
        inner_items,
    } = planned;
    let mut search = JoinSearch::new(
        cx,
        db,
        scope,
        sizes,
        from,
        used,
        item_filters,
        conds,
        inner_items,
    )?;
    let path = search.search()?;
    search.build(&path, top)
}

/// A FROM item as the search joins it.
struct SearchItem {
    /// Its table, if it is one: a nested loop may search it by the outer
    /// row, a merge join read it in key order through an index.
    table: Option<(Arc<TableDef>, Option<String>)>,
    /// Its columns read, and its own conditions.
    wanted: Vec<bool>,
    filters: Vec<Filter>,
    /// Its scan with its own conditions, built once; the plan takes it.
    plain: Option<Box<dyn PlanNode>>,
    /// That scan's estimate.
    estimate: Estimate,
    /// Its columns in the scope's row.
    columns: Range<usize>,
    /// How it joins the items written before it (the first: inner).
    kind: JoinKind,
}

/// How a join runs, as costed; the plan builds its nodes once the order
/// is chosen.
#[derive(Clone, Copy, Debug)]
enum JoinMethod {
    /// Every pair, the conditions a join filter.
    NestedLoop,
    /// The inner side the item's table scan searching by the outer row's
    /// values, each run estimated as `inner`; the conditions that cannot
    /// move into it (running a subquery) a join filter.
    Parameterized {
        inner: Estimate,
    },
    Hash,
    /// Both inputs in key order: each side read in it through an index
    /// (its scan estimated as given), else sorted. Only a lone item's
    /// scan can be the outer side read in order.
    Merge {
        ordered_outer: Option<Estimate>,
        ordered_inner: Option<Estimate>,
    },
}

/// A left-deep join of some of the items, as costed.
#[derive(Clone)]
struct JoinPath {
    /// The items in the order joined: the joined row holds their columns
    /// in this order.
    order: Vec<usize>,
    /// For each item after the first, how it joins the items before it,
    /// and that join's estimate.
    steps: Vec<(JoinMethod, Estimate)>,
    /// The whole join's estimate.
    estimate: Estimate,
}

/// A condition at the join that evaluates it.
struct PlacedCond {
    /// Over the joined row.
    filter: Filter,
    /// The condition as a key of this join, if it is one here.
    key: Option<JoinKey>,
}

/// An equality a join matches on, by hash or by merge.
struct JoinKey {
    /// Over the outer rows (the items joined before).
    outer: Expr,
    /// Over the inner item's row.
    inner: Expr,
    /// The type both sides have (cast to it where they differ).
    ty: ColumnType,
    /// Each side's text as written.
    outer_label: String,
    inner_label: String,
    /// The column of the inner item the inner side is, if it is one; and
    /// whether its values in `ty` keep the column's order (an index on
    /// it then gives a merge join its order).
    inner_column: Option<usize>,
    inner_keeps_order: bool,
    /// The (item, column of the item) the outer side is, if it is a bare
    /// column whose values in `ty` keep the column's order.
    outer_ordered_column: Option<(usize, usize)>,
    /// The inner side's distinct values (the hash table's buckets used).
    inner_distinct: f64,
}

/// Item `k`'s table scan searching by the outer row (see
/// [`JoinSearch::parameterized_scan`]).
struct ParameterizedScan {
    node: Box<dyn PlanNode>,
    /// The parameters the loop sets from each outer row: (`$n`, the
    /// outer row's column).
    params: Vec<(usize, Expr)>,
    /// The conditions left to the join.
    remaining: Vec<Filter>,
}

/// The search for the cheapest join order of a FROM clause, and the plan
/// of the order found (see the module comment).
struct JoinSearch<'a> {
    cx: &'a StmtCx,
    db: &'a Database,
    sizes: &'a ItemSizes,
    items: Vec<SearchItem>,
    conds: Vec<JoinCond>,
    /// Per condition, the fraction of rows it keeps.
    selectivity: Vec<f64>,
    /// The types of the scope's columns.
    types: Vec<ColumnType>,
    /// The row estimates of sets of the items joined by inner joins.
    rows: SubsetRows,
    /// How many items come before the first left join.
    inner_items: usize,
    /// Estimates of an item's scan in the order of some of its columns,
    /// by (item, columns): None where no index gives that order. A merge
    /// join is costed with the same inner item and keys from many sets.
    ordered_scans: HashMap<(usize, Vec<usize>), Option<Estimate>>,
}

impl<'a> JoinSearch<'a> {
    /// The search over `from`'s items, the first `inner_items` joined by
    /// inner joins, each item's scan with its own conditions
    /// `item_filters` built (and estimated) once, decoding the columns
    /// `used` of the scope.
    #[allow(clippy::too_many_arguments)]
    fn new(
        cx: &'a StmtCx,
        db: &'a Database,
        scope: &Scope,
        sizes: &'a ItemSizes,
        from: FromClause,
        used: Vec<bool>,
        item_filters: Vec<Vec<Filter>>,
        conds: Vec<JoinCond>,
        inner_items: usize,
    ) -> Result<JoinSearch<'a>, SqlError> {
        debug_assert!((1..=from.items.len()).contains(&inner_items));
        let kinds = std::iter::once(JoinKind::Inner).chain(from.joins.iter().map(|j| j.kind));
        let mut items = Vec::with_capacity(from.items.len());
        for (i, ((item, filters), kind)) in from
            .items
            .into_iter()
            .zip(item_filters)
            .zip(kinds)
            .enumerate()
        {
            let columns = scope.item_columns(i);
            let mut wanted = used[columns.clone()].to_vec();
            // A scan that decodes no column returns empty rows (count(*)'s
            // fast path); a join needs the item's full width, so that the
            // columns of the items after it are where the plan expects
            // them.
            if !wanted.contains(&true) {
                if let Some(first) = wanted.first_mut() {
                    *first = true;
                }
            }
            let table = match &item {
                FromItem::Table(table, alias) => Some((Arc::clone(table), alias.clone())),
                _ => None,
            };
            let plain = item
                .scan(
                    cx,
                    db,
                    wanted.clone(),
                    filters.clone(),
                    None,
                    1.0,
                    sizes.table(i),
                    super::super::access::ReadFor::Query,
                )?
                .node;
            items.push(SearchItem {
                table,
                wanted,
                filters,
                estimate: estimate_of(plain.as_ref()),
                plain: Some(plain),
                columns,
                kind,
            });
        }
        let selectivity: Vec<f64> = conds.iter().map(|c| sizes.selectivity(c)).collect();
        // Only the sets of inner-joined items have a row estimate of
        // their own; a left join's rows follow from its outer side's.
        let rows = SubsetRows {
            items: items[..inner_items]
                .iter()
                .map(|i| i.estimate.rows)
                .collect(),
            conds: conds
                .iter()
                .zip(&selectivity)
                .filter(|(c, _)| c.items.iter().all(|&i| i < inner_items))
                .map(|(c, &s)| (c.items.clone(), s))
                .collect(),
        };
        Ok(JoinSearch {
            cx,
            db,
            sizes,
            items,
            conds,
            selectivity,
            types: scope.columns.iter().map(|c| c.ty).collect(),
            rows,
            inner_items,
            ordered_scans: HashMap::new(),
        })
    }

    /// The cheapest order found for the items, the first `inner_items`
    /// joined by inner joins (see the module comment).
    fn search(&mut self) -> Result<JoinPath, SqlError> {
        let inner_items = self.inner_items;
        let searched = (3..=self.cx.join_collapse_limit.min(SEARCHED_ITEMS_MAX))
            .contains(&inner_items)
            && !self.conds.iter().any(|c| c.filter.predicate.has_subplan());
        let mut path = if searched {
            self.cheapest_order()?
        } else {
            self.written_order()?
        };
        for k in inner_items..self.items.len() {
            path = self.join(&path, k)?;
        }
        Ok(path)
    }

    /// The items before the first left join in the order written, the
    /// first two the other way round where that costs less (unless a
    /// condition between them runs a subquery).
    fn written_order(&mut self) -> Result<JoinPath, SqlError> {
        let mut path = self.single(0);
        if self.inner_items < 2 {
            return Ok(path);
        }
        path = self.join(&path, 1)?;
        let turnable = !self
            .placed(&[1], 0)
            .iter()
            .any(|&c| self.conds[c].filter.predicate.has_subplan());
        if turnable {
            let turned = self.join(&self.single(1), 0)?;
            if turned.estimate.total < path.estimate.total {
                path = turned;
            }
        }
        for k in 2..self.inner_items {
            path = self.join(&path, k)?;
        }
        Ok(path)
    }

    /// The cheapest left-deep order of the items before the first left
    /// join: dynamic programming over their sets, smallest first.
    fn cheapest_order(&mut self) -> Result<JoinPath, SqlError> {
        let m = self.inner_items;
        assert!(
            m <= SEARCHED_ITEMS_MAX,
            "{m} items exceed the search's sets"
        );
        let bit = |i: usize| 1u32 << i;
        let full = (1u32 << m) - 1;
        // The items each condition among them links, as sets.
        let links: Vec<u32> = self
            .conds
            .iter()
            .filter(|c| c.items.iter().all(|&i| i < m))
            .map(|c| c.items.iter().fold(0, |set, &i| set | bit(i)))
            .collect();
        let mut best: Vec<Option<JoinPath>> = vec![None; 1 << m];
        for i in 0..m {
            best[bit(i) as usize] = Some(self.single(i));
        }
        for size in 2..=m as u32 {
            let sets: Vec<u32> = (1..=full).filter(|s| s.count_ones() == size).collect();
            // First by conditions only; where that makes no set of this
            // size, by cartesian products too (PostgreSQL's fallback).
            for cartesian in [false, true] {
                let mut made = false;
                for &set in &sets {
                    let mut cheapest: Option<JoinPath> = None;
                    // The highest item first: among equal costs the order
                    // nearest the written one stays.
                    for k in (0..m).rev().filter(|&k| set & bit(k) != 0) {
                        let rest = set & !bit(k);
                        let Some(outer) = &best[rest as usize] else {
                            continue;
                        };
                        if !cartesian && !joins_by_condition(rest, k, &links) {
                            continue;
                        }
                        let path = self.join(outer, k)?;
                        if cheapest.as_ref().is_none_or(|c| {
                            path.estimate.total < c.estimate.total * (1.0 - COST_TIE_FRACTION)
                        }) {
                            cheapest = Some(path);
                        }
                    }
                    if cheapest.is_some() {
                        made = true;
                        best[set as usize] = cheapest;
                    }
                }
                if made {
                    break;
                }
            }
        }
        Ok(best[full as usize]
            .take()
            .expect("each size makes a set, and the largest is the only one"))
    }

    /// Item `i` alone: its scan.
    fn single(&self, i: usize) -> JoinPath {
        JoinPath {
            order: vec![i],
            steps: Vec::new(),
            estimate: self.items[i].estimate,
        }
    }

    /// Where each column of the scope is in the rows of the items
    /// `order` joined in that order (None: an item not joined).
    fn layout(&self, order: &[usize]) -> Vec<Option<usize>> {
        let mut layout = vec![None; self.types.len()];
        let mut at = 0;
        for &i in order {
            for c in self.items[i].columns.clone() {
                layout[c] = Some(at);
                at += 1;
            }
        }
        layout
    }

    /// The conditions the join of item `k` to the items `joined`
    /// evaluates: those needing `k` and otherwise only items joined.
    fn placed(&self, joined: &[usize], k: usize) -> Vec<usize> {
        (0..self.conds.len())
            .filter(|&c| {
                let items = &self.conds[c].items;
                items.contains(&k) && items.iter().all(|&i| i == k || joined.contains(&i))
            })
            .collect()
    }

    /// The conditions `placed` of the join of item `k` to the items
    /// `joined`, moved onto its joined row, each with its key if it is
    /// one there: an equality whose one side reads `k` alone (the other
    /// then reads only items joined).
    fn placed_conds(&self, joined: &[usize], k: usize, placed: &[usize]) -> Vec<PlacedCond> {
        let mut order = joined.to_vec();
        order.push(k);
        let outer_layout = self.layout(joined);
        let layout = self.layout(&order);
        let item = &self.items[k];
        placed
            .iter()
            .map(|&c| {
                let cond = &self.conds[c];
                let key = cond.equality.as_ref().and_then(|eq| {
                    let inner_at = eq.sides.iter().position(|s| s.items == [k])?;
                    let (inner, outer) = (&eq.sides[inner_at], &eq.sides[1 - inner_at]);
                    debug_assert!(outer.items.iter().all(|i| joined.contains(i)));
                    Some(JoinKey {
                        outer: outer.expr.clone().remapped(&outer_layout),
                        inner: inner.expr.clone().rebased(item.columns.start),
                        ty: eq.ty,
                        outer_label: outer.label.clone(),
                        inner_label: inner.label.clone(),
                        inner_column: inner.column.map(|(_, column)| column),
                        inner_keeps_order: inner.keeps_order,
                        outer_ordered_column: outer.column.filter(|_| outer.keeps_order),
                        inner_distinct: self.sizes.side(inner).0,
                    })
                });
                PlacedCond {
                    filter: Filter {
                        predicate: cond.filter.predicate.clone().remapped(&layout),
                        ..cond.filter.clone()
                    },
                    key,
                }
            })
            .collect()
    }

    /// The rows of `outer` joined with item `k`, `placed` the join's
    /// conditions: among the inner-joined items, the set's own estimate;
    /// from the first left join on, the outer rows times the item's times
    /// the conditions' selectivities, a left join's at least the outer
    /// rows.
    fn join_rows(&self, outer: &JoinPath, k: usize, placed: &[usize]) -> f64 {
        if k < self.inner_items {
            return self.rows.rows(|i| i == k || outer.order.contains(&i));
        }
        let (oe, ie) = (outer.estimate, self.items[k].estimate);
        let kept: f64 = placed.iter().map(|&c| self.selectivity[c]).product();
        let rows = cost::clamp_rows(oe.rows * ie.rows * kept);
        match self.items[k].kind {
            JoinKind::Left => rows.max(oe.rows),
            _ => rows,
        }
    }

    /// `outer` joined with item `k` by the method estimated to cost least
    /// of those the `enable_*` settings allow (a disabled one costs
    /// [`DISABLE_COST`] more, as in PostgreSQL, so that it is chosen only
    /// if every method is disabled): a nested loop, a nested loop whose
    /// inner side searches an index by the outer row, a hash join or a
    /// merge join.
    fn join(&mut self, outer: &JoinPath, k: usize) -> Result<JoinPath, SqlError> {
        let cx = self.cx;
        let c = &cx.costs;
        let methods = cx.joins;
        let placed = self.placed(&outer.order, k);
        let conds = self.placed_conds(&outer.order, k, &placed);
        let rows = self.join_rows(outer, k, &placed);
        let oe = outer.estimate;
        let ie = self.items[k].estimate;
        let shape = |conditions: usize| cost::JoinShape {
            rows,
            width: oe.width + ie.width,
            conditions,
        };
        let penalty = |allowed: bool| if allowed { 0.0 } else { DISABLE_COST };

        let mut candidates: Vec<(Estimate, JoinMethod)> = vec![(
            cost::nested_loop(oe, ie, &shape(conds.len()), c),
            JoinMethod::NestedLoop,
        )];
        candidates[0].0.total += penalty(methods.nested_loop);
        // The scan is built for its estimate only, its parameters
        // numbered from a scratch counter: the plan numbers them when it
        // builds the scan again, so that the candidates not taken use no
        // numbers (an InitPlan's `$n` after the join stays as it was).
        let mut scratch = cx.params.get();
        let mut next = || {
            scratch += 1;
            scratch - 1
        };
        let outer_width = self.width(&outer.order);
        if let Some(scan) = self.parameterized_scan(&conds, outer_width, k, oe.rows, &mut next)? {
            let inner = estimate_of(scan.node.as_ref());
            let mut e = cost::nested_loop(oe, inner, &shape(scan.remaining.len()), c);
            e.total += penalty(methods.nested_loop);
            candidates.push((e, JoinMethod::Parameterized { inner }));
        }
        let keys: Vec<&JoinKey> = conds.iter().filter_map(|c| c.key.as_ref()).collect();
        if !keys.is_empty() {
            let others = conds.len() - keys.len();
            let inner_distinct = keys.iter().map(|k| k.inner_distinct).product();
            let mut e = cost::hash_join(oe, ie, keys.len(), inner_distinct, &shape(others), c);
            e.total += penalty(methods.hash);
            candidates.push((e, JoinMethod::Hash));
            // A merge join: each side read in key order through an index
            // where one gives it, else sorted. The outer side can be read
            // so only while it is one item's scan.
            let key_width = cost::row_width(keys.iter().map(|k| k.ty));
            let ordered_outer = match outer.order[..] {
                [o] => {
                    let columns: Option<Vec<usize>> = keys
                        .iter()
                        .map(|k| match k.outer_ordered_column {
                            Some((item, column)) if item == o => Some(column),
                            _ => None,
                        })
                        .collect();
                    match columns {
                        Some(columns) => self.ordered_scan_estimate(o, columns)?,
                        None => None,
                    }
                }
                _ => None,
            };
            let sorted_outer = match ordered_outer {
                Some(scan) => key_order_estimate(scan, key_width, true, c),
                None => key_order_estimate(oe, key_width, false, c),
            };
            let order: Option<Vec<usize>> = keys
                .iter()
                .map(|k| k.inner_column.filter(|_| k.inner_keeps_order))
                .collect();
            let ordered_inner = match order {
                Some(columns) => self.ordered_scan_estimate(k, columns)?,
                None => None,
            };
            let inner_in_order = match ordered_inner {
                Some(scan) => key_order_estimate(scan, key_width, true, c),
                None => key_order_estimate(ie, key_width, false, c),
            };
            let mut e =
                cost::merge_join(sorted_outer, inner_in_order, keys.len(), &shape(others), c);
            e.total += penalty(methods.merge);
            candidates.push((
                e,
                JoinMethod::Merge {
                    ordered_outer,
                    ordered_inner,
                },
            ));
        }
        let (estimate, method) = candidates
            .into_iter()
            .min_by(|a, b| a.0.total.total_cmp(&b.0.total))
            .expect("a nested loop at least");
        debug_assert_eq!(estimate.rows, rows);
        let mut path = outer.clone();
        path.order.push(k);
        path.steps.push((method, estimate));
        path.estimate = estimate;
        Ok(path)
    }

    /// The width of the rows of the items `order` joined.
    fn width(&self, order: &[usize]) -> usize {
        order.iter().map(|&i| self.items[i].columns.len()).sum()
    }

    /// Item `k`'s table scan searching by the outer row, run `loops`
    /// times: its own conditions and the join's `conds` (over the joined
    /// row, the outer row's `outer_width` columns first), the outer row's
    /// columns made parameters numbered by `next_param`. None if the item
    /// is no table or no condition can move into its scan (a condition
    /// running a subquery stays in the join).
    fn parameterized_scan(
        &self,
        conds: &[PlacedCond],
        outer_width: usize,
        k: usize,
        loops: f64,
        next_param: &mut dyn FnMut() -> usize,
    ) -> Result<Option<ParameterizedScan>, SqlError> {
        let item = &self.items[k];
        let Some((table, alias)) = &item.table else {
            return Ok(None);
        };
        let inner = outer_width..outer_width + item.columns.len();
        let mut params = Vec::new();
        let mut filters = item.filters.clone();
        let mut remaining = Vec::new();
        for cond in conds {
            if cond.filter.predicate.has_subplan() {
                remaining.push(cond.filter.clone());
                continue;
            }
            let predicate = cond.filter.predicate.clone().parameterized(
                inner.clone(),
                0,
                &mut params,
                next_param,
            );
            filters.push(Filter {
                predicate,
                ..cond.filter.clone()
            });
        }
        if filters.len() == item.filters.len() {
            return Ok(None);
        }
        let node = self.table_scan(k, table, alias, filters, None, loops)?.node;
        Ok(Some(ParameterizedScan {
            node,
            params,
            remaining,
        }))
    }

    /// Item `k`'s table scan in the order of its `columns` (ascending,
    /// NULLs last), if an index gives that order.
    fn ordered_scan(
        &self,
        k: usize,
        columns: &[usize],
    ) -> Result<Option<Box<dyn PlanNode>>, SqlError> {
        let item = &self.items[k];
        let Some((table, alias)) = &item.table else {
            return Ok(None);
        };
        let wanted_order = access::WantedOrder {
            keys: columns.iter().map(|&c| (c, false, false)).collect(),
            limit: None,
        };
        let scan = self.table_scan(
            k,
            table,
            alias,
            item.filters.clone(),
            Some(&wanted_order),
            1.0,
        )?;
        Ok(scan.ordered.then_some(scan.node))
    }

    /// Item `k`'s table (`table`, named `alias`) read for the query with
    /// `filters`, in `order` if given, run `loops` times: the scan
    /// `access::table_scan` chooses, of the size the search read.
    fn table_scan(
        &self,
        k: usize,
        table: &Arc<TableDef>,
        alias: &Option<String>,
        filters: Vec<Filter>,
        order: Option<&access::WantedOrder>,
        loops: f64,
    ) -> Result<access::TableScan, SqlError> {
        access::table_scan(
            self.cx,
            self.db,
            Arc::clone(table),
            alias.clone(),
            self.items[k].wanted.clone(),
            filters,
            access::ReadFor::Query,
            order,
            loops,
            self.sizes.table(k),
        )
    }

    /// Item `item`'s scan in the order of `columns`, costed by the search
    /// as `costed`, as a merge join's input.
    fn ordered_input(
        &self,
        item: usize,
        columns: &[usize],
        costed: Estimate,
    ) -> Result<MergeInput, SqlError> {
        let scan = self
            .ordered_scan(item, columns)?
            .expect("costed as read in order, so an index gives it");
        debug_assert_eq!(estimate_of(scan.as_ref()), costed, "the scan costed");
        Ok(MergeInput {
            node: scan,
            ordered: true,
        })
    }

    /// The estimate of [`JoinSearch::ordered_scan`], built once per item
    /// and columns.
    fn ordered_scan_estimate(
        &mut self,
        k: usize,
        columns: Vec<usize>,
    ) -> Result<Option<Estimate>, SqlError> {
        if self.items[k].table.is_none() {
            return Ok(None);
        }
        if let Some(&known) = self.ordered_scans.get(&(k, columns.clone())) {
            return Ok(known);
        }
        let estimate = self
            .ordered_scan(k, &columns)?
            .map(|scan| estimate_of(scan.as_ref()));
        self.ordered_scans.insert((k, columns), estimate);
        Ok(estimate)
    }

    /// Item `k`'s plain scan, which only one join takes.
    fn take_plain(&mut self, k: usize) -> Box<dyn PlanNode> {
        self.items[k]
            .plain
            .take()
            .expect("each item joins once, its plain scan taken at most once")
    }

    /// The plan of `path`, which joins every item: its joins, `top` (over
    /// the scope's row) evaluated above them, and the columns put back in
    /// the scope's order if they are not in it.
    fn build(
        &mut self,
        path: &JoinPath,
        top: Option<Filter>,
    ) -> Result<Box<dyn PlanNode>, SqlError> {
        debug_assert_eq!(path.order.len(), self.items.len());
        let mut node = self.take_plain(path.order[0]);
        let mut evaluated = 0;
        for (j, &(method, estimate)) in path.steps.iter().enumerate() {
            let (joined, k) = (&path.order[..=j], path.order[j + 1]);
            let placed = self.placed(joined, k);
            evaluated += placed.len();
            let conds = self.placed_conds(joined, k, &placed);
            node = self.join_node(node, joined, k, conds, method, estimate)?;
        }
        debug_assert_eq!(evaluated, self.conds.len(), "each condition evaluated once");
        let layout = self.layout(&path.order);
        if let Some(f) = top {
            let estimate = estimate_of(node.as_ref());
            let conditions = f.predicate.conjuncts().len();
            let selectivity = access::default_predicate_selectivity(&f.predicate);
            let estimate = cost::filter(estimate, conditions, selectivity, &self.cx.costs);
            let f = Filter {
                predicate: f.predicate.remapped(&layout),
                ..f
            };
            node = cost::estimated(Box::new(FilterNode::new(node, f)), estimate);
        }
        if path.order.iter().enumerate().all(|(at, &i)| at == i) {
            return Ok(node);
        }
        // The columns back in the order written.
        let columns: Vec<Expr> = layout
            .iter()
            .zip(&self.types)
            .map(|(at, &ty)| Expr::column(at.expect("every item joined"), ty))
            .collect();
        let estimate = estimate_of(node.as_ref());
        Ok(cost::estimated(
            Box::new(ProjectNode::new(node, columns)),
            estimate,
        ))
    }

    /// The node joining `outer` (the items `joined`) with item `k` by
    /// `method`, on `conds`, with `estimate`.
    fn join_node(
        &mut self,
        outer: Box<dyn PlanNode>,
        joined: &[usize],
        k: usize,
        conds: Vec<PlacedCond>,
        method: JoinMethod,
        estimate: Estimate,
    ) -> Result<Box<dyn PlanNode>, SqlError> {
        let cx = self.cx;
        let kind = self.items[k].kind;
        let inner_width = self.items[k].columns.len();
        let node: Box<dyn PlanNode> = match method {
            JoinMethod::NestedLoop => {
                let on = and_all(conds.into_iter().map(|c| c.filter).collect())?;
                let inner = self.take_plain(k);
                Box::new(NestedLoopNode::new(outer, inner, inner_width, kind, on))
            }
            JoinMethod::Parameterized { inner } => {
                let loops = estimate_of(outer.as_ref()).rows;
                let scan = self
                    .parameterized_scan(&conds, self.width(joined), k, loops, &mut || {
                        cx.next_param()
                    })?
                    .expect("costed as a parameterized scan, so one");
                debug_assert_eq!(estimate_of(scan.node.as_ref()), inner, "the scan costed");
                Box::new(
                    NestedLoopNode::new(
                        outer,
                        scan.node,
                        inner_width,
                        kind,
                        and_all(scan.remaining)?,
                    )
                    .with_params(scan.params),
                )
            }
            JoinMethod::Hash => {
                let (keys, others) = split_keys(conds);
                let inner = self.take_plain(k);
                Box::new(HashJoinNode::new(
                    outer,
                    inner,
                    inner_width,
                    kind,
                    hash_cond(keys),
                    and_all(others)?,
                ))
            }
            JoinMethod::Merge {
                ordered_outer,
                ordered_inner,
            } => {
                let (keys, others) = split_keys(conds);
                let outer = match ordered_outer {
                    // The lone item's plain scan, never opened, gives way
                    // to its scan in key order.
                    Some(costed) => {
                        let [o] = joined[..] else {
                            unreachable!("only a lone item's scan is read in order")
                        };
                        let columns: Vec<usize> = keys
                            .iter()
                            .map(|k| {
                                k.outer_ordered_column
                                    .expect("an ordered outer key is a column")
                                    .1
                            })
                            .collect();
                        self.ordered_input(o, &columns, costed)?
                    }
                    None => MergeInput {
                        node: outer,
                        ordered: false,
                    },
                };
                let inner = match ordered_inner {
                    Some(costed) => {
                        let columns: Vec<usize> = keys
                            .iter()
                            .map(|k| k.inner_column.expect("an ordered key is a column"))
                            .collect();
                        self.ordered_input(k, &columns, costed)?
                    }
                    None => MergeInput {
                        node: self.take_plain(k),
                        ordered: false,
                    },
                };
                let outer_types: Vec<ColumnType> = joined
                    .iter()
                    .flat_map(|&i| self.types[self.items[i].columns.clone()].iter().copied())
                    .collect();
                merge_join(
                    outer,
                    &outer_types,
                    inner,
                    &self.types[self.items[k].columns.clone()],
                    kind,
                    keys,
                    and_all(others)?,
                    &cx.costs,
                )
            }
        };
        Ok(cost::estimated(node, estimate))
    }
}

/// Whether the search joins item `k` to the set `rest` without a
/// cartesian product's excuse: where a condition links them, or where
/// there is nothing to wait for, no condition linking `rest` to any item
/// outside it, or `k` to any other item (PostgreSQL's
/// `join_search_one_level` makes a join without a condition only then).
/// `links` holds the set of items each condition needs.
fn joins_by_condition(rest: u32, k: usize, links: &[u32]) -> bool {
    let k = 1u32 << k;
    let linked = links.iter().any(|&l| l & k != 0 && l & rest != 0);
    let rest_links_out = links.iter().any(|&l| l & rest != 0 && l & !rest != 0);
    let k_links = links.iter().any(|&l| l & k != 0);
    linked || !rest_links_out || !k_links
}

/// The hash join's condition over `keys`: each key's outer side probes
/// and its inner side builds.
fn hash_cond(keys: Vec<JoinKey>) -> HashCond {
    let label = keys_label(&keys);
    let (outer_keys, inner_keys) = keys.into_iter().map(|k| (k.outer, k.inner)).unzip();
    HashCond {
        outer_keys,
        inner_keys,
        label,
    }
}

/// A hash or merge join's keys as PostgreSQL prints them: each equality
/// outer side first, in parentheses when there are several, `((a.k =
/// b.k) AND (a.j = b.j))`.
fn keys_label(keys: &[JoinKey]) -> String {
    let equalities: Vec<String> = keys
        .iter()
        .map(|k| format!("({} = {})", k.outer_label, k.inner_label))
        .collect();
    match equalities.as_slice() {
        [one] => one.clone(),
        several => format!("({})", several.join(" AND ")),
    }
}

/// A join's conditions split into its keys and the rest.
fn split_keys(conds: Vec<PlacedCond>) -> (Vec<JoinKey>, Vec<Filter>) {
    let mut keys = Vec::new();
    let mut others = Vec::new();
    for cond in conds {
        match cond.key {
            Some(key) => keys.push(key),
            None => others.push(cond.filter),
        }
    }
    (keys, others)
}

/// One input of a merge join, and whether it comes in key order already.
struct MergeInput {
    node: Box<dyn PlanNode>,
    ordered: bool,
}

/// A merge join of `outer` (rows of `outer_types`) and `inner` (rows of
/// `inner_types`) on `keys`: each input gets its keys computed into
/// columns after its own and is sorted by them unless it comes in their
/// order (the Sort node spills beyond `work_mem`); the join cuts those
/// columns off again.
#[allow(clippy::too_many_arguments)]
fn merge_join(
    outer: MergeInput,
    outer_types: &[ColumnType],
    inner: MergeInput,
    inner_types: &[ColumnType],
    kind: JoinKind,
    keys: Vec<JoinKey>,
    extra: Option<Filter>,
    c: &Costs,
) -> Box<dyn PlanNode> {
    let (outer_width, inner_width) = (outer_types.len(), inner_types.len());
    let label = keys_label(&keys);
    let key_columns = |width: usize| -> Vec<Expr> {
        keys.iter()
            .enumerate()
            .map(|(j, k)| Expr::column(width + j, k.ty))
            .collect()
    };
    let cond = MergeCond {
        outer_keys: key_columns(outer_width),
        inner_keys: key_columns(inner_width),
        label,
    };
    let (mut outer_keys, mut inner_keys) = (Vec::new(), Vec::new());
    let (mut outer_labels, mut inner_labels) = (Vec::new(), Vec::new());
    for k in keys {
        outer_keys.push(k.outer);
        inner_keys.push(k.inner);
        outer_labels.push(k.outer_label);
        inner_labels.push(k.inner_label);
    }
    let outer = in_key_order(outer, outer_types, outer_keys, outer_labels, c);
    let inner = in_key_order(inner, inner_types, inner_keys, inner_labels, c);
    Box::new(MergeJoinNode::new(
        outer,
        inner,
        outer_width,
        inner_width,
        kind,
        cond,
        extra,
    ))
}

/// `input` (rows of `types`) with `keys` computed after its columns, in
/// their order ascending, NULLs last (the order a merge join needs):
/// sorted by them unless it comes so.
fn in_key_order(
    input: MergeInput,
    types: &[ColumnType],
    keys: Vec<Expr>,
    labels: Vec<String>,
    c: &Costs,
) -> Box<dyn PlanNode> {
    let width = types.len();
    let estimate = estimate_of(input.node.as_ref());
    let key_width = cost::row_width(keys.iter().filter_map(Expr::ty));
    let projected = key_order_estimate(estimate, key_width, true, c);
    let mut columns: Vec<Expr> = types
        .iter()
        .enumerate()
        .map(|(i, &ty)| Expr::column(i, ty))
        .collect();
    columns.extend(keys);
    let node = cost::estimated(Box::new(ProjectNode::new(input.node, columns)), projected);
    if input.ordered {
        return node;
    }
    let sort_keys = labels
        .into_iter()
        .enumerate()
        .map(|(j, label)| SortKey {
            column: width + j,
            descending: false,
            nulls_first: false,
            label,
        })
        .collect();
    cost::estimated(
        Box::new(SortNode::new(node, sort_keys)),
        key_order_estimate(estimate, key_width, false, c),
    )
}

/// The estimate of a merge join's input of estimate `input` with keys of
/// `key_width` bytes computed after its columns, sorted by them unless
/// `ordered` already ([`in_key_order`]).
fn key_order_estimate(input: Estimate, key_width: usize, ordered: bool, c: &Costs) -> Estimate {
    let projected = cost::project(input, input.width + key_width);
    if ordered {
        projected
    } else {
        cost::sort(projected, None, c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Items a (1 000 rows), b (50), c (20 000), d (7): conditions a–b,
    /// b–c, one reading a, b and c, and c–d.
    fn chain() -> SubsetRows {
        SubsetRows {
            items: vec![1000.0, 50.0, 20_000.0, 7.0],
            conds: vec![
                (vec![0, 1], 0.01),
                (vec![1, 2], 0.002),
                (vec![0, 1, 2], 1.0 / 3.0),
                (vec![2, 3], 0.2),
            ],
        }
    }

    fn members(set: u32) -> Vec<usize> {
        (0..4).filter(|&i| set & (1 << i) != 0).collect()
    }

    #[test]
    fn a_sets_rows_are_the_same_whichever_item_joins_it_last() {
        let rows = chain();
        for set in 1u32..16 {
            let estimate = rows.rows(|i| set & (1 << i) != 0);
            // What the search asks when it joins item k last to the rest:
            // the same figure for every k.
            for k in members(set) {
                let rest = set & !(1 << k);
                let joined = rows.rows(|i| i == k || rest & (1 << i) != 0);
                assert_eq!(
                    joined.to_bits(),
                    estimate.to_bits(),
                    "set {set:b}, {k} last"
                );
            }
            // And it is what a left-deep order meets, multiplying in each
            // condition at the join that completes it (before rounding).
            let mut product = 1.0;
            let mut joined: Vec<usize> = Vec::new();
            for k in members(set).into_iter().rev() {
                product *= rows.items[k];
                for (needs, s) in &rows.conds {
                    if needs.contains(&k) && needs.iter().all(|&i| i == k || joined.contains(&i)) {
                        product *= s;
                    }
                }
                joined.push(k);
            }
            assert!(
                (cost::clamp_rows(product) - estimate).abs() <= 1.0,
                "set {set:b}: {product} against {estimate}"
            );
        }
        // a ⋈ b: 1 000 × 50 × 0.01; with c too, the three-item condition's
        // third; a ⋈ c, no condition between them: their product.
        assert_eq!(rows.rows(|i| i < 2), 500.0);
        assert_eq!(rows.rows(|i| i < 3), 6667.0);
        assert_eq!(rows.rows(|i| i == 0 || i == 2), 20_000_000.0);
    }

    #[test]
    fn a_set_is_rounded_once_not_at_each_join() {
        // Joined one by one, a ⋈ b would round 0.5 rows up to 1 before c
        // multiplies it; the set's estimate rounds the product once.
        let rows = SubsetRows {
            items: vec![10.0, 10.0, 10.0],
            conds: vec![(vec![0, 1], 0.005), (vec![1, 2], 0.01)],
        };
        assert_eq!(rows.rows(|i| i < 2), 1.0);
        assert_eq!(rows.rows(|_| true), 1.0);
        let rows = SubsetRows {
            items: vec![10.0, 10.0, 1000.0],
            conds: vec![(vec![0, 1], 0.005), (vec![1, 2], 0.01)],
        };
        // 0.5 × 1 000 × 0.01 = 5 (joined one by one: 1 × 1 000 × 0.01 =
        // 10).
        assert_eq!(rows.rows(|_| true), 5.0);
    }

    #[test]
    fn a_cartesian_product_waits_until_no_condition_can_join() {
        // a–b, b–c; d linked to nothing.
        let links = [0b0011, 0b0110];
        assert!(joins_by_condition(0b0001, 1, &links));
        // a has a condition to b: not joined to c first.
        assert!(!joins_by_condition(0b0001, 2, &links));
        // d has none: it may join anything, and anything it.
        assert!(joins_by_condition(0b0001, 3, &links));
        assert!(joins_by_condition(0b1000, 0, &links));
        // {a, b, c} links to nothing outside: it may join d.
        assert!(joins_by_condition(0b0111, 3, &links));
    }
}
