//! A FROM clause of several items: where each condition is evaluated,
//! and the join tree over the items, each join by the method estimated
//! to cost least.

use sqlparser::ast;

use super::{and_all, conjuncts, FromClause, FromItem};
use crate::catalog::TableDef;
use crate::config::Costs;
use crate::database::Database;
use crate::exec::{estimate_of, Estimate};
use crate::exec::{
    Expr, Filter, FilterNode, HashCond, HashJoinNode, JoinKind, MergeCond, MergeJoinNode,
    NestedLoopNode, PlanNode, ProjectNode, SortKey, SortNode,
};
use crate::sql::access::{TableSize, DISABLE_COST};
use crate::sql::cost;
use crate::sql::expr::{ExprPlanner, Scope, StmtCx};
use crate::sql::SqlError;
use crate::types::ColumnType;

use std::sync::Arc;

/// The planned conditions of a FROM clause of several items.
#[derive(Default)]
pub(super) struct PlannedJoins {
    /// Per item: the conditions its scan applies (ANDed), over the
    /// item's own row.
    item_filters: Vec<Vec<Filter>>,
    /// Per join (of item k, at k - 1): its conditions over the joined
    /// row, each with the key a hash or merge join could match it by.
    conds: Vec<Vec<JoinCond>>,
    /// What is evaluated over the whole joined row, after every join: a
    /// WHERE on the side a left join fills with NULLs.
    top: Option<Filter>,
}

/// A condition of a join, over the joined row.
struct JoinCond {
    filter: Filter,
    /// The equality as a hash or merge key, if it is one.
    key: Option<JoinKey>,
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

/// Where the conditions of a FROM clause of several items are evaluated:
/// a condition on one item in that item's scan (unless a left join fills
/// that item with NULLs and the condition is a WHERE); anything else in
/// the join that brings in the last item it reads (the WHERE of a cross
/// or inner join is the same as its ON), except a WHERE reading the
/// NULL-filled side of a left join, which is evaluated above all joins.
/// Each join's equalities between the items before it and its item are
/// kept as keys too, for a hash or merge join.
pub(super) fn plan_joins(
    planner: &mut ExprPlanner,
    from: &FromClause,
    selection: Option<&ast::Expr>,
) -> Result<PlannedJoins, SqlError> {
    let scope = planner.scope();
    let n = from.items.len();
    let mut slots = Slots {
        item_filters: (0..n).map(|_| Vec::new()).collect(),
        conds: (1..n).map(|_| Vec::new()).collect(),
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
            // (for a left join too: its outer rows are kept either way);
            // one reading earlier items stays in the join.
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
    })
}

/// Conditions gathered per item and per join (see [`plan_joins`]).
struct Slots {
    item_filters: Vec<Vec<Filter>>,
    conds: Vec<Vec<JoinCond>>,
}

impl Slots {
    /// Places condition `f` (`conj` planned) that may be evaluated once
    /// items up to `at` are joined: in item `at`'s scan if it reads
    /// nothing else, else in the join of item `at`.
    fn place(
        &mut self,
        planner: &mut ExprPlanner,
        conj: &ast::Expr,
        f: Filter,
        at: usize,
    ) -> Result<(), SqlError> {
        let scope = planner.scope();
        if items_read(&f.predicate, scope).iter().all(|&i| i == at) {
            let start = scope.item_columns(at).start;
            self.item_filters[at].push(Filter {
                arm_labels: f.arm_labels,
                predicate: f.predicate.rebased(start),
                label: f.label,
            });
            return Ok(());
        }
        // A condition running a subquery is never a join key: keys are
        // computed where no subquery can run (and planning it again would
        // plan its subquery again).
        let key = if f.predicate.has_subplan() {
            None
        } else {
            join_key(planner, conj, at)?
        };
        self.conds[at - 1].push(JoinCond { filter: f, key });
        Ok(())
    }
}

/// An equality a join of item `k` matches on, by hash or by merge.
struct JoinKey {
    /// Over the rows of the items before `k`.
    outer: Expr,
    /// Over item `k`'s row.
    inner: Expr,
    /// The type both sides have (cast to it where they differ).
    ty: ColumnType,
    /// Each side's text, and the equality's as written.
    outer_label: String,
    inner_label: String,
    label: String,
    /// The column of the joined row the outer side is, if it is one
    /// (for its statistics).
    outer_column: Option<usize>,
    /// The column of item `k` the inner side is, if it is one; and
    /// whether its values in `ty` keep the column's order (an index on
    /// it then gives a merge join its order).
    inner_column: Option<usize>,
    inner_keeps_order: bool,
}

/// `conj` as a (hash or merge) key of the join of item `k`: an equality between an
/// expression of the items before `k` and one of item `k`, of one type
/// (integers of either width compare as bigint, an integer and a numeric
/// as numeric); None otherwise.
fn join_key(
    planner: &mut ExprPlanner,
    conj: &ast::Expr,
    k: usize,
) -> Result<Option<JoinKey>, SqlError> {
    let ast::Expr::BinaryOp {
        left,
        op: ast::BinaryOperator::Eq,
        right,
    } = conj
    else {
        return Ok(None);
    };
    let scope = planner.scope();
    let (l, r) = (planner.plan(left)?, planner.plan(right)?);
    let (li, ri) = (items_read(&l, scope), items_read(&r, scope));
    let before = |items: &[usize]| !items.is_empty() && items.iter().all(|&i| i < k);
    let only_k = |items: &[usize]| items == [k];
    let (outer, inner, outer_label, inner_label) = if before(&li) && only_k(&ri) {
        (l, r, left.to_string(), right.to_string())
    } else if only_k(&li) && before(&ri) {
        (r, l, right.to_string(), left.to_string())
    } else {
        return Ok(None);
    };
    let start = scope.item_columns(k).start;
    let outer_column = outer.column_index();
    let inner_column = inner.column_index().map(|c| c - start);
    let inner_type = inner.ty();
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
    let (outer, inner) = match (outer.ty(), inner.ty()) {
        (Some(a), Some(b)) if alike(a, b) => (outer, inner),
        (a, b) if integer(a) && integer(b) => (
            Expr::cast(outer, ColumnType::BigInt)?,
            Expr::cast(inner, ColumnType::BigInt)?,
        ),
        // An integer against a numeric compares as numeric: hash both so.
        (a, b) if (integer(a) && numeric(b)) || (numeric(a) && integer(b)) => (
            Expr::cast(outer, ColumnType::Numeric(None))?,
            Expr::cast(inner, ColumnType::Numeric(None))?,
        ),
        // Mixed with char, as PostgreSQL resolves the operator: against
        // varchar both compare as char (padding ignored on both sides),
        // against text both as text (the char's padding cut). Hash both
        // sides in that type.
        (Some(a @ (ColumnType::Char(_) | ColumnType::Varchar(_))), Some(b))
            if matches!(
                (a, b),
                (ColumnType::Char(_), ColumnType::Varchar(_))
                    | (ColumnType::Varchar(_), ColumnType::Char(_))
            ) =>
        {
            (
                Expr::cast(outer, ColumnType::Char(None))?,
                Expr::cast(inner, ColumnType::Char(None))?,
            )
        }
        (Some(a), Some(b)) if textual(a) && textual(b) => (
            Expr::cast(outer, ColumnType::Text)?,
            Expr::cast(inner, ColumnType::Text)?,
        ),
        _ => return Ok(None),
    };
    let Some(ty) = outer.ty() else {
        return Ok(None);
    };
    debug_assert!(
        inner.ty().is_some_and(|t| alike(t, ty)),
        "both sides of a key have one type"
    );
    // Uncast, or an integer widened: the same order. (A text cast of a
    // char, or a char cast of a varchar, can reorder values that differ
    // in trailing characters.)
    let inner_keeps_order = inner_type == Some(ty)
        || (integer(inner_type) && matches!(ty, ColumnType::BigInt | ColumnType::Numeric(_)));
    Ok(Some(JoinKey {
        outer,
        inner: inner.rebased(start),
        ty,
        outer_label,
        inner_label,
        label: format!("{conj}"),
        outer_column,
        inner_column,
        inner_keeps_order,
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

    /// The fraction of pairs `key` of the join of item `k` matches
    /// (PostgreSQL's `eqjoinsel` without common values: the non-NULL
    /// share of both sides over the larger distinct count), and the inner
    /// side's distinct values and the outer side's.
    fn key_selectivity(&self, scope: &Scope, k: usize, key: &JoinKey) -> (f64, f64, f64) {
        let (outer_distinct, outer_nulls) = match key.outer_column {
            Some(c) => {
                let item = scope.columns[c].item;
                self.column(item, Some(c - scope.item_columns(item).start))
            }
            None => self.column(0, None),
        };
        let (inner_distinct, inner_nulls) = self.column(k, key.inner_column);
        let selectivity =
            (1.0 - outer_nulls) * (1.0 - inner_nulls) / outer_distinct.max(inner_distinct).max(1.0);
        (selectivity, inner_distinct, outer_distinct)
    }
}

/// The join tree of a FROM clause of several items, left-deep as written,
/// each join by the method estimated to cost least.
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
    } = planned;
    let wanted = |i: usize| {
        let mut wanted = used[scope.item_columns(i)].to_vec();
        // A scan that decodes no column returns empty rows (count(*)'s
        // fast path); a join needs the item's full width, so that the
        // columns of the items after it are where the plan expects them.
        if !wanted.contains(&true) {
            if let Some(first) = wanted.first_mut() {
                *first = true;
            }
        }
        wanted
    };
    let mut filters = item_filters.into_iter();
    let mut items = from.items.into_iter();
    let first = items.next().expect("several items");
    let first_filters = filters.next().expect("a filter slot per item");
    // The first item, if a table, may be the inner side of the first
    // join instead (an inner join's sides commute).
    let mut first_table = match &first {
        FromItem::Table(table, alias) => Some(FirstTable {
            table: Arc::clone(table),
            alias: alias.clone(),
            wanted: wanted(0),
            filters: first_filters.clone(),
        }),
        _ => None,
    };
    let mut node = first
        .scan(cx, db, wanted(0), first_filters, None, 1.0, sizes.table(0))?
        .node;
    for (k, ((item, spec), conds)) in items
        .zip(from.joins)
        .zip(conds)
        .enumerate()
        .map(|(j, joined)| (j + 1, joined))
    {
        let join = JoinInput {
            item,
            kind: spec.kind,
            conds,
            wanted: wanted(k),
            filters: filters.next().expect("a filter slot per item"),
            first: first_table.take(),
        };
        node = join_item(cx, db, scope, sizes, node, k, join)?;
    }
    Ok(match top {
        Some(f) => {
            let estimate = estimate_of(node.as_ref());
            let conditions = f.predicate.conjuncts();
            let selectivity = conditions
                .iter()
                .map(|e| crate::sql::access::default_selectivity(e))
                .product();
            let estimate = cost::filter(estimate, conditions.len(), selectivity, &cx.costs);
            cost::estimated(Box::new(FilterNode::new(node, f)), estimate)
        }
        None => node,
    })
}

/// Item `k` of a FROM clause as a join brings it in.
struct JoinInput {
    item: FromItem,
    kind: JoinKind,
    conds: Vec<JoinCond>,
    /// The item's columns read.
    wanted: Vec<bool>,
    /// Its own conditions, which its scan applies.
    filters: Vec<Filter>,
    /// For the first join, the first item if it is a table: the join may
    /// run the other way round.
    first: Option<FirstTable>,
}

/// The first item of a FROM clause, a table, as its scan reads it.
struct FirstTable {
    table: Arc<TableDef>,
    alias: Option<String>,
    wanted: Vec<bool>,
    filters: Vec<Filter>,
}

/// How a join runs, as costed.
enum JoinMethod {
    /// Every pair, the conditions a join filter.
    NestedLoop,
    /// The inner side a table scan searching by the outer row's values
    /// (parameters `params`), under the conditions that could not be
    /// moved into it.
    Parameterized {
        scan: Box<dyn PlanNode>,
        params: Vec<(usize, Expr)>,
        remaining: Vec<Filter>,
    },
    Hash,
    /// Both inputs in key order: the inner side's scan, if an index
    /// gives that order (else it is sorted).
    Merge {
        ordered_inner: Option<Box<dyn PlanNode>>,
    },
    /// An inner join of the first two items run the other way round (the
    /// second item outer), its columns put back in order above: a hash
    /// join building from the first item, or a nested loop searching the
    /// first item's table by each row of the second.
    SwappedHash,
    SwappedParameterized {
        scan: Box<dyn PlanNode>,
        params: Vec<(usize, Expr)>,
    },
}

/// `outer` (the items before `k` joined) joined with item `k` by the
/// method estimated to cost least of those the `enable_*` settings
/// allow (a disabled one costs [`crate::sql::access::DISABLE_COST`] more, as
/// in PostgreSQL, so that it is chosen only if every method is
/// disabled): a nested loop, a nested loop whose inner side searches an
/// index by the outer row, a hash join or a merge join.
fn join_item(
    cx: &StmtCx,
    db: &Database,
    scope: &Scope,
    sizes: &ItemSizes,
    outer: Box<dyn PlanNode>,
    k: usize,
    join: JoinInput,
) -> Result<Box<dyn PlanNode>, SqlError> {
    let JoinInput {
        item,
        kind,
        conds,
        wanted,
        filters,
        first,
    } = join;
    let c = &cx.costs;
    let methods = cx.joins;
    let range = scope.item_columns(k);
    let inner_width = range.len();
    let types: Vec<ColumnType> = scope.columns.iter().map(|c| c.ty).collect();
    let table = match &item {
        FromItem::Table(table, alias) => Some((Arc::clone(table), alias.clone())),
        _ => None,
    };
    let oe = estimate_of(outer.as_ref());
    let plain = item
        .scan(
            cx,
            db,
            wanted.clone(),
            filters.clone(),
            None,
            1.0,
            sizes.table(k),
        )?
        .node;
    let ie = estimate_of(plain.as_ref());

    // The join's rows, whatever its method.
    let mut selectivity = 1.0;
    let mut inner_distinct = 1.0;
    let mut outer_distinct = 1.0;
    let mut key_count = 0;
    for cond in &conds {
        match &cond.key {
            Some(key) => {
                let (s, d, o) = sizes.key_selectivity(scope, k, key);
                selectivity *= s;
                inner_distinct *= d;
                outer_distinct *= o;
                key_count += 1;
            }
            None => {
                selectivity *= cond
                    .filter
                    .predicate
                    .conjuncts()
                    .iter()
                    .map(|e| crate::sql::access::default_selectivity(e))
                    .product::<f64>()
            }
        }
    }
    let mut rows = cost::clamp_rows(oe.rows * ie.rows * selectivity);
    if kind == JoinKind::Left {
        rows = rows.max(oe.rows);
    }
    let width = oe.width + ie.width;
    let shape = |conditions: usize| cost::JoinShape {
        rows,
        width,
        conditions,
    };
    let penalty = |allowed: bool| if allowed { 0.0 } else { DISABLE_COST };

    let mut candidates: Vec<(Estimate, JoinMethod)> = vec![(
        cost::nested_loop(oe, ie, &shape(conds.len()), c),
        JoinMethod::NestedLoop,
    )];
    candidates[0].0.total += penalty(methods.nested_loop);
    // The inner table searched by each outer row's values: its scan with
    // the join's conditions over it, the outer columns as parameters.
    if let (Some((table, alias)), false) = (&table, conds.is_empty()) {
        let mut params = Vec::new();
        let mut moved = Vec::new();
        let mut remaining = Vec::new();
        for cond in &conds {
            if cond.filter.predicate.has_subplan() {
                remaining.push(cond.filter.clone());
                continue;
            }
            let predicate = cond.filter.predicate.clone().parameterized(
                range.clone(),
                0,
                &mut params,
                &mut || cx.next_param(),
            );
            moved.push(Filter {
                predicate,
                ..cond.filter.clone()
            });
        }
        if !moved.is_empty() {
            let mut inner_filters = filters.clone();
            inner_filters.extend(moved);
            let scan = crate::sql::access::table_scan(
                cx,
                db,
                Arc::clone(table),
                alias.clone(),
                wanted.clone(),
                inner_filters,
                crate::sql::access::ReadFor::Query,
                None,
                oe.rows,
                sizes.table(k),
            )?
            .node;
            let mut e =
                cost::nested_loop(oe, estimate_of(scan.as_ref()), &shape(remaining.len()), c);
            e.total += penalty(methods.nested_loop);
            candidates.push((
                e,
                JoinMethod::Parameterized {
                    scan,
                    params,
                    remaining,
                },
            ));
        }
    }
    if key_count > 0 {
        let others = conds.len() - key_count;
        let mut e = cost::hash_join(oe, ie, key_count, inner_distinct, &shape(others), c);
        e.total += penalty(methods.hash);
        candidates.push((e, JoinMethod::Hash));
        // A merge join: the outer side sorted; the inner side read in
        // key order through an index where one gives it, else sorted.
        let keys: Vec<&JoinKey> = conds.iter().filter_map(|c| c.key.as_ref()).collect();
        let key_width = cost::row_width(keys.iter().map(|k| k.ty));
        let sorted_outer = key_order_estimate(oe, key_width, false, c);
        let order: Option<Vec<(usize, bool, bool)>> = keys
            .iter()
            .map(|k| {
                Some((
                    k.inner_column.filter(|_| k.inner_keeps_order)?,
                    false,
                    false,
                ))
            })
            .collect();
        let ordered_inner = match (&table, order) {
            (Some((table, alias)), Some(keys)) => {
                let wanted_order = crate::sql::access::WantedOrder { keys, limit: None };
                let scan = crate::sql::access::table_scan(
                    cx,
                    db,
                    Arc::clone(table),
                    alias.clone(),
                    wanted.clone(),
                    filters.clone(),
                    crate::sql::access::ReadFor::Query,
                    Some(&wanted_order),
                    1.0,
                    sizes.table(k),
                )?;
                scan.ordered.then_some(scan.node)
            }
            _ => None,
        };
        let inner_in_order = match &ordered_inner {
            Some(scan) => key_order_estimate(estimate_of(scan.as_ref()), key_width, true, c),
            None => key_order_estimate(ie, key_width, false, c),
        };
        let mut e = cost::merge_join(sorted_outer, inner_in_order, key_count, &shape(others), c);
        e.total += penalty(methods.merge);
        candidates.push((e, JoinMethod::Merge { ordered_inner }));
    }
    // The first join, inner, run the other way round: only where every
    // condition is a key (for a hash join) or can be searched by (for a
    // nested loop), so that nothing is left to evaluate over the joined
    // row in the other order.
    let swappable =
        kind == JoinKind::Inner && !conds.iter().any(|c| c.filter.predicate.has_subplan());
    if let (Some(first), true) = (&first, swappable) {
        debug_assert_eq!(k, 1);
        if key_count == conds.len() && key_count > 0 {
            let mut e = cost::hash_join(ie, oe, key_count, outer_distinct, &shape(0), c);
            e.total += penalty(methods.hash);
            candidates.push((e, JoinMethod::SwappedHash));
        }
        if !conds.is_empty() {
            let mut params = Vec::new();
            let mut inner_filters = first.filters.clone();
            for cond in &conds {
                let predicate = cond.filter.predicate.clone().parameterized(
                    0..range.start,
                    range.start,
                    &mut params,
                    &mut || cx.next_param(),
                );
                inner_filters.push(Filter {
                    predicate,
                    ..cond.filter.clone()
                });
            }
            let scan = crate::sql::access::table_scan(
                cx,
                db,
                Arc::clone(&first.table),
                first.alias.clone(),
                first.wanted.clone(),
                inner_filters,
                crate::sql::access::ReadFor::Query,
                None,
                ie.rows,
                sizes.table(0),
            )?
            .node;
            let mut e = cost::nested_loop(ie, estimate_of(scan.as_ref()), &shape(0), c);
            e.total += penalty(methods.nested_loop);
            candidates.push((e, JoinMethod::SwappedParameterized { scan, params }));
        }
    }
    let (estimate, method) = candidates
        .into_iter()
        .min_by(|a, b| a.0.total.total_cmp(&b.0.total))
        .expect("a nested loop at least");

    let node: Box<dyn PlanNode> = match method {
        JoinMethod::NestedLoop => {
            let on = and_all(conds.into_iter().map(|c| c.filter).collect())?;
            Box::new(NestedLoopNode::new(outer, plain, inner_width, kind, on))
        }
        JoinMethod::Parameterized {
            scan,
            params,
            remaining,
        } => Box::new(
            NestedLoopNode::new(outer, scan, inner_width, kind, and_all(remaining)?)
                .with_params(params),
        ),
        JoinMethod::Hash => {
            let (keys, others) = split_keys(conds);
            let hash = hash_cond(keys, false);
            Box::new(HashJoinNode::new(
                outer,
                plain,
                inner_width,
                kind,
                hash,
                and_all(others)?,
            ))
        }
        JoinMethod::Merge { ordered_inner } => {
            let (keys, others) = split_keys(conds);
            let inner = match ordered_inner {
                Some(scan) => MergeInput {
                    node: scan,
                    ordered: true,
                },
                None => MergeInput {
                    node: plain,
                    ordered: false,
                },
            };
            merge_join(
                MergeInput {
                    node: outer,
                    ordered: false,
                },
                &types[..range.start],
                inner,
                &types[range],
                kind,
                keys,
                and_all(others)?,
                c,
            )
        }
        JoinMethod::SwappedHash => {
            let (keys, others) = split_keys(conds);
            debug_assert!(others.is_empty(), "a join is commuted only if all keys");
            let hash = hash_cond(keys, true);
            let join: Box<dyn PlanNode> = Box::new(HashJoinNode::new(
                plain,
                outer,
                range.start,
                kind,
                hash,
                None,
            ));
            return Ok(in_scope_order(join, estimate, &types, range));
        }
        JoinMethod::SwappedParameterized { scan, params } => {
            let join: Box<dyn PlanNode> = Box::new(
                NestedLoopNode::new(plain, scan, range.start, kind, None).with_params(params),
            );
            return Ok(in_scope_order(join, estimate, &types, range));
        }
    };
    Ok(cost::estimated(node, estimate))
}

/// A join of the first items run the other way round, `join`'s rows being
/// item `range`'s columns then the items' before it, with `estimate`: its
/// columns put back in the order of `types` (the scope's).
fn in_scope_order(
    join: Box<dyn PlanNode>,
    estimate: Estimate,
    types: &[ColumnType],
    range: std::ops::Range<usize>,
) -> Box<dyn PlanNode> {
    let (before, width) = (range.start, range.len());
    let columns: Vec<Expr> = (0..before)
        .map(|c| Expr::column(width + c, types[c]))
        .chain((0..width).map(|c| Expr::column(c, types[before + c])))
        .collect();
    let join = cost::estimated(join, estimate);
    cost::estimated(Box::new(ProjectNode::new(join, columns)), estimate)
}

/// The hash join's condition over `keys`: each key's outer side probes
/// and its inner side builds, or the other way round if `swapped` (the
/// join commuted).
fn hash_cond(keys: Vec<JoinKey>, swapped: bool) -> HashCond {
    let labels: Vec<String> = keys.iter().map(|k| k.label.clone()).collect();
    let (mut outer_keys, mut inner_keys): (Vec<Expr>, Vec<Expr>) =
        keys.into_iter().map(|k| (k.outer, k.inner)).unzip();
    if swapped {
        std::mem::swap(&mut outer_keys, &mut inner_keys);
    }
    HashCond {
        outer_keys,
        inner_keys,
        label: format!("({})", labels.join(" AND ")),
    }
}

/// A join's conditions split into its keys and the rest.
fn split_keys(conds: Vec<JoinCond>) -> (Vec<JoinKey>, Vec<Filter>) {
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
    // As PostgreSQL prints it: the outer side first, each equality in
    // parentheses when there are several, `((a.k = b.k) AND (a.j = b.j))`.
    let equalities: Vec<String> = keys
        .iter()
        .map(|k| format!("({} = {})", k.outer_label, k.inner_label))
        .collect();
    let label = match equalities.as_slice() {
        [one] => one.clone(),
        several => format!("({})", several.join(" AND ")),
    };
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
