//! SELECT: from a `sqlparser` query to an executor pipeline.
//!
//! ```text
//! FROM item ─▶ source (scan, view, generate_series, utility, Result,
//!              a subquery's own plan under a Subquery Scan)
//! FROM a, b / a JOIN b ON … ─▶ joins (see `join`): left-deep, the
//!              items before the first LEFT JOIN in the cheapest order
//!              found, each join a nested loop (maybe searching the
//!              inner table's index), a hash or a merge join, by cost
//! WHERE      ─▶ the source's filter (with joins: each condition in the
//!              scan or join that first has its columns; over the
//!              NULL-filled side of a left join, in a Filter above)
//! GROUP BY / aggregates / HAVING ─▶ Aggregate
//! select list (+ ORDER BY expressions not in it, hidden) ─▶ Project
//! ORDER BY   ─▶ Sort          LIMIT / OFFSET ─▶ Limit
//! a UNION b  ─▶ see `setop`
//! ```
//!
//! A subquery, in FROM or in an expression, is planned by the same
//! functions (`plan_query_in`), given the planner of the query around it
//! as its [`Outer`]: a name the subquery does not have is looked up there
//! (and further out), and becomes a parameter the subquery's SubPlan
//! passes in (`sql::expr`, `exec::subplan`).
//!
//! ORDER BY names resolve as in PostgreSQL: a number is a select-list
//! position, a bare name matching a select-list item's name is that item,
//! anything else is an expression over the input (in an aggregated query,
//! over groups and aggregates). GROUP BY accepts positions and select-list
//! aliases too, but a table column of the same name wins there.

use sqlparser::ast::{
    self, GroupByExpr, LimitClause, OrderByKind, OrderBySort, Select, SelectItem,
    SelectItemQualifiedWildcardKind, SetExpr, Spanned, TableFactor, TableWithJoins,
    WildcardAdditionalOptions,
};

use super::access::{ReadFor, TableSize};
use super::cost;
use super::expr::{
    constant, function_args, has_aggregate, ident, is_unknown_literal, object_name, output_name,
    reborrow, table_function_args, utility_call, ExprPlanner, Grouping, Outer, Scope, StmtCx,
};
use super::{ResultColumn, SqlError};
use crate::catalog::TableDef;
use crate::database::Database;
use crate::exec::agg::Aggregate;
use crate::exec::estimate::UNKNOWN_ROWS;
use crate::exec::{estimate_of, Estimate};
use crate::exec::{
    AggregateNode, BinaryOp, Expr, Filter, JoinKind, LimitNode, LockRowsNode, PlanNode,
    ProjectNode, QueryPlan, ResultNode, Series, SeriesNode, SortKey, SortNode, SubqueryScanNode,
    Utility, UtilityCall, View, ViewNode,
};
use crate::types::{as_i64, ColumnType, Value};

use std::sync::Arc;

mod join;
mod locking;

use join::{build_joins, plan_joins, ItemSizes, PlannedJoins};
pub(crate) use locking::clause_name as locking_clause_name;
use locking::{lock_requests, LockRequest, LockRows};

/// A planned query and the columns it returns.
pub(crate) struct PlannedQuery {
    pub query: QueryPlan,
    pub columns: Vec<ResultColumn>,
    /// Per column, whether it is a bare string literal or NULL:
    /// PostgreSQL's `unknown`, which INSERT … SELECT converts to the
    /// target column's type (`INSERT INTO t (id) SELECT NULL`).
    pub unknown: Vec<bool>,
}

/// What one FROM item reads.
enum FromItem {
    Table(Arc<TableDef>, Option<String>),
    View(View, Option<String>),
    /// `generate_series`, and the name of its column.
    Series(Series, String),
    Utility(UtilityCall),
    /// `(SELECT …) AS alias`: the planned query, and its columns' names
    /// (the column aliases given, else the query's own).
    Subquery {
        query: PlannedQuery,
        alias: String,
        names: Vec<String>,
    },
}

impl FromItem {
    /// The names the item offers.
    fn scope(&self) -> Scope {
        match self {
            FromItem::Table(table, alias) => Scope::of_table(table, alias.as_deref()),
            FromItem::View(view, alias) => Scope::single(
                alias.clone().unwrap_or_else(|| view.name().to_string()),
                format!("view \"{}\"", view.name()),
                columns_of(view.columns()),
            ),
            FromItem::Series(series, column) => Scope::single(
                series.alias.clone(),
                "generate_series()".into(),
                vec![(column.clone(), series.ty)],
            ),
            FromItem::Utility(call) => Scope::single(
                call.utility.name().to_string(),
                format!("{}()", call.utility.name()),
                columns_of(call.utility.columns()),
            ),
            FromItem::Subquery {
                query,
                alias,
                names,
            } => Scope::single(
                alias.clone(),
                format!("subquery \"{alias}\""),
                names
                    .iter()
                    .zip(&query.columns)
                    .map(|(name, c)| (name.clone(), c.ty))
                    .collect(),
            ),
        }
    }

    /// The node that reads it, decoding the `wanted` columns, with the
    /// item's own conditions: a table chooses how it is read by them,
    /// for rows in `order` if an index gives it cheaply (the scan says
    /// whether it does), run `loops` times, of `size` if known, for
    /// `purpose` (see `access::table_scan`).
    /// The node carries its estimate.
    #[allow(clippy::too_many_arguments)]
    fn scan(
        self,
        cx: &StmtCx,
        db: &Database,
        wanted: Vec<bool>,
        filters: Vec<Filter>,
        order: Option<&super::access::WantedOrder>,
        loops: f64,
        size: Option<&TableSize>,
        purpose: ReadFor,
    ) -> Result<super::access::TableScan, SqlError> {
        if let FromItem::Table(table, alias) = self {
            return super::access::table_scan(
                cx, db, table, alias, wanted, filters, purpose, order, loops, size,
            );
        }
        let c = &cx.costs;
        let width = cost::row_width(self.scope().columns.iter().map(|c| c.ty));
        let conditions = filters.iter().map(|f| f.predicate.conjuncts().len()).sum();
        let selectivity: f64 = filters
            .iter()
            .map(|f| super::access::default_predicate_selectivity(&f.predicate))
            .product();
        let filter = and_all(filters)?;
        // Rows it makes, each costing a tuple's CPU (a function scan's
        // and a subquery scan's in PostgreSQL).
        let source = |startup: f64, rows: f64| {
            Estimate::new(startup, startup + c.cpu_tuple * rows, rows, width)
        };
        let (node, estimate): (Box<dyn PlanNode>, Estimate) = match self {
            FromItem::Table(..) => unreachable!("read above"),
            FromItem::View(view, _) => (
                Box::new(ViewNode::new(view, filter)),
                source(0.0, UNKNOWN_ROWS),
            ),
            FromItem::Series(series, _) => {
                let rows = series.rows_when_constant().unwrap_or(UNKNOWN_ROWS);
                (Box::new(SeriesNode::new(series, filter)), source(0.0, rows))
            }
            FromItem::Utility(call) => (
                Box::new(ResultNode::new(vec![call], filter)),
                source(0.0, 1.0),
            ),
            // It reads what its own select list needs, whatever is wanted.
            FromItem::Subquery { query, alias, .. } => {
                let width = query.columns.len();
                let inner = estimate_of(query.query.root.as_ref());
                (
                    Box::new(SubqueryScanNode::new(
                        query.query.root,
                        alias,
                        width,
                        filter,
                    )),
                    Estimate {
                        total: inner.total + c.cpu_tuple * inner.rows,
                        ..inner
                    },
                )
            }
        };
        Ok(super::access::TableScan {
            node: cost::estimated(node, cost::filter(estimate, conditions, selectivity, c)),
            ordered: false,
        })
    }
}

/// How a FROM item after the first joins the items before it.
struct JoinSpec {
    kind: JoinKind,
    /// `ON …` (None: a cross join, or a comma).
    on: Option<ast::Expr>,
    /// The first item of its comma-separated group: its ON sees the
    /// items from there to the one it joins, as in PostgreSQL.
    group_start: usize,
}

/// The FROM clause: its items in order, and `joins[k - 1]` joining item
/// k to the items before it (a left-deep tree, as written).
#[derive(Default)]
struct FromClause {
    items: Vec<FromItem>,
    joins: Vec<JoinSpec>,
}

/// Refuses the parts of a query other than a SELECT with ORDER BY and
/// LIMIT/OFFSET.
fn check_query(cx: &StmtCx, q: &ast::Query) -> Result<(), SqlError> {
    let ast::Query {
        with,
        body: _,
        order_by,
        limit_clause,
        fetch,
        locks: _,
        for_clause,
        settings,
        format_clause,
        pipe_operators,
    } = q;
    let span = q.span();
    if let Some(w) = with {
        return Err(cx.unsupported(w.span(), "WITH (common table expressions)"));
    }
    if fetch.is_some() {
        return Err(cx.unsupported_hint(span, "FETCH FIRST", "; use LIMIT"));
    }
    if for_clause.is_some()
        || settings.is_some()
        || format_clause.is_some()
        || !pipe_operators.is_empty()
    {
        return Err(cx.unsupported(span, "this query clause"));
    }
    if let Some(o) = order_by {
        if o.interpolate.is_some() {
            return Err(cx.unsupported(span, "ORDER BY … INTERPOLATE"));
        }
    }
    if let Some(LimitClause::OffsetCommaLimit { offset, .. }) = limit_clause {
        return Err(cx.unsupported_hint(
            offset.span(),
            "LIMIT offset, count",
            "; use LIMIT count OFFSET offset",
        ));
    }
    Ok(())
}

/// Refuses the parts of a SELECT we do not run.
fn check_select(cx: &StmtCx, s: &Select) -> Result<(), SqlError> {
    let Select {
        select_token: _,
        optimizer_hints,
        distinct,
        select_modifiers,
        top,
        top_before_distinct: _,
        projection: _,
        exclude,
        into,
        from: _,
        lateral_views,
        prewhere,
        selection: _,
        connect_by,
        group_by,
        cluster_by,
        distribute_by,
        sort_by,
        having: _,
        named_window,
        qualify,
        window_before_qualify: _,
        value_table_mode,
        flavor,
    } = s;
    let span = s.span();
    let refuse = |what: &str| Err(cx.unsupported(span, what));
    if distinct.is_some() {
        return Err(cx.unsupported_hint(
            span,
            "SELECT DISTINCT",
            "; use GROUP BY on the selected columns",
        ));
    }
    if into.is_some() {
        return refuse("SELECT … INTO");
    }
    if !optimizer_hints.is_empty()
        || select_modifiers.is_some()
        || top.is_some()
        || exclude.is_some()
    {
        return refuse("this SELECT modifier");
    }
    if !lateral_views.is_empty() || prewhere.is_some() || !connect_by.is_empty() {
        return refuse("this SELECT clause");
    }
    if !cluster_by.is_empty() || !distribute_by.is_empty() || !sort_by.is_empty() {
        return refuse("CLUSTER / DISTRIBUTE / SORT BY");
    }
    if !named_window.is_empty() || qualify.is_some() {
        return refuse("window clauses");
    }
    if value_table_mode.is_some() || *flavor != ast::SelectFlavor::Standard {
        return refuse("this form of SELECT");
    }
    match group_by {
        GroupByExpr::All(_) => refuse("GROUP BY ALL"),
        GroupByExpr::Expressions(_, modifiers) if !modifiers.is_empty() => {
            refuse("GROUP BY modifiers (ROLLUP, CUBE, WITH TOTALS)")
        }
        GroupByExpr::Expressions(..) => Ok(()),
    }
}

fn check_wildcard(
    cx: &StmtCx,
    o: &WildcardAdditionalOptions,
    span: sqlparser::tokenizer::Span,
) -> Result<(), SqlError> {
    if o.opt_ilike.is_some()
        || o.opt_exclude.is_some()
        || o.opt_except.is_some()
        || o.opt_replace.is_some()
        || o.opt_rename.is_some()
        || o.opt_alias.is_some()
    {
        return Err(cx.unsupported(span, "options of *"));
    }
    Ok(())
}

/// Plans a query that returns rows.
pub(crate) fn plan_query(
    cx: &StmtCx,
    db: &Database,
    q: &ast::Query,
) -> Result<PlannedQuery, SqlError> {
    plan_query_in(cx, db, q, None)
}

/// Plans a query, inside the query `outer` if it is a subquery (names it
/// does not have are looked up there).
pub(crate) fn plan_query_in(
    cx: &StmtCx,
    db: &Database,
    q: &ast::Query,
    outer: Outer<'_>,
) -> Result<PlannedQuery, SqlError> {
    check_query(cx, q)?;
    let locking = lock_requests(cx, q)?;
    if let SetExpr::Select(select) = &*q.body {
        if let (Some(first), Some(_)) = (locking.first(), &select.distinct) {
            return Err(SqlError::LockingNotAllowed {
                clause: first.mode.clause(),
                with: "DISTINCT clause",
            });
        }
        check_select(cx, select)?;
        return plan_select(cx, db, Some(q), select, &locking, outer);
    }
    if let Some(first) = locking.first() {
        return Err(match &*q.body {
            SetExpr::SetOperation { .. } => SqlError::LockingNotAllowed {
                clause: first.mode.clause(),
                with: "UNION/INTERSECT/EXCEPT",
            },
            _ => cx.unsupported_hint(
                q.span(),
                format!("{} of a parenthesized query", first.mode.clause()),
                "; write the clause inside the parentheses",
            ),
        });
    }
    let body = plan_set_expr(cx, db, &q.body, outer)?;
    order_set_query(cx, db, q, body)
}

/// Plans a query's body without its ORDER BY and LIMIT: a SELECT, a
/// parenthesized query, or a set operation of them.
pub(crate) fn plan_set_expr(
    cx: &StmtCx,
    db: &Database,
    body: &SetExpr,
    outer: Outer<'_>,
) -> Result<PlannedQuery, SqlError> {
    match body {
        SetExpr::Select(select) => {
            check_select(cx, select)?;
            plan_select(cx, db, None, select, &[], outer)
        }
        SetExpr::Query(q) => plan_query_in(cx, db, q, outer),
        SetExpr::SetOperation { .. } => super::setop::plan_set_operation(cx, db, body, outer),
        SetExpr::Values(values) => super::setop::plan_values(cx, db, values, outer),
        other => Err(cx.unsupported(other.span(), "this kind of query")),
    }
}

/// ORDER BY, LIMIT and OFFSET over a set operation's result: ORDER BY
/// names a result column or its position, nothing else (PostgreSQL's
/// rule).
fn order_set_query(
    cx: &StmtCx,
    db: &Database,
    q: &ast::Query,
    body: PlannedQuery,
) -> Result<PlannedQuery, SqlError> {
    let order_by = order_by_exprs(cx, q)?;
    let mut keys = Vec::with_capacity(order_by.len());
    for o in order_by {
        let column = match &o.expr {
            ast::Expr::Identifier(i) => {
                let name = ident(i);
                let mut matching = body
                    .columns
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| c.name == name);
                match (matching.next(), matching.next()) {
                    (Some((at, _)), None) => at,
                    (Some(_), Some(_)) => {
                        return Err(SqlError::AmbiguousColumn {
                            column: name,
                            at: cx.at(o.expr.span()),
                        })
                    }
                    (None, _) => {
                        return Err(SqlError::UnknownColumn {
                            column: name,
                            relation: "the result of the set operation".into(),
                            at: cx.at(o.expr.span()),
                        })
                    }
                }
            }
            e => match constant(e) {
                Some(v) => {
                    let k = as_i64(&v).unwrap_or(0);
                    usize::try_from(k)
                        .ok()
                        .and_then(|k| k.checked_sub(1))
                        .filter(|&k| k < body.columns.len())
                        .ok_or(SqlError::BadPosition {
                            clause: "ORDER BY",
                            position: k,
                            columns: body.columns.len(),
                        })?
                }
                None => {
                    return Err(SqlError::SetOperationOrder {
                        at: cx.at(o.expr.span()),
                    })
                }
            },
        };
        let shown = body.columns[column].name.clone();
        keys.push(sort_key(cx, o, column, Some(shown))?);
    }
    let (offset, count) = limit_clause(cx, db, q.limit_clause.as_ref())?;
    let width = body.query.width;
    let node = sort_and_limit(cx, body.query.root, keys, offset, count, None);
    Ok(PlannedQuery {
        query: QueryPlan::new(node, width),
        ..body
    })
}

/// The ORDER BY items of `q`.
fn order_by_exprs<'q>(cx: &StmtCx, q: &'q ast::Query) -> Result<&'q [ast::OrderByExpr], SqlError> {
    match q.order_by.as_ref().map(|o| &o.kind) {
        None => Ok(&[]),
        Some(OrderByKind::Expressions(exprs)) => Ok(exprs),
        Some(OrderByKind::All(_)) => Err(cx.unsupported(q.span(), "ORDER BY ALL")),
    }
}

/// A sort key on `column` with the direction ORDER BY item `o` gives.
/// EXPLAIN shows it as written, except a position (`ORDER BY 2`), which
/// shows as `shown`, the column's own text, as PostgreSQL shows it.
fn sort_key(
    cx: &StmtCx,
    o: &ast::OrderByExpr,
    column: usize,
    shown: Option<String>,
) -> Result<SortKey, SqlError> {
    if o.with_fill.is_some() {
        return Err(cx.unsupported(o.expr.span(), "ORDER BY … WITH FILL"));
    }
    let descending = match &o.options.sort {
        None | Some(OrderBySort::Asc) => false,
        Some(OrderBySort::Desc) => true,
        Some(OrderBySort::Using(_)) => {
            return Err(cx.unsupported(o.expr.span(), "ORDER BY … USING"))
        }
    };
    let written = o.to_string();
    let label = match shown.filter(|_| constant(&o.expr).is_some()) {
        // The direction and NULLS placement as written after the key.
        Some(text) => {
            let rest = written.strip_prefix(&o.expr.to_string()).unwrap_or("");
            format!("{text}{rest}")
        }
        None => written,
    };
    Ok(SortKey {
        column,
        descending,
        nulls_first: o.options.nulls_first.unwrap_or(descending),
        label,
    })
}

/// The OFFSET and LIMIT of a query (0 and none without them).
fn limit_clause(
    cx: &StmtCx,
    db: &Database,
    clause: Option<&LimitClause>,
) -> Result<(u64, Option<u64>), SqlError> {
    match clause {
        None => Ok((0, None)),
        Some(LimitClause::LimitOffset {
            limit,
            offset,
            limit_by,
        }) => {
            if let Some(first) = limit_by.first() {
                return Err(cx.unsupported(first.span(), "LIMIT BY"));
            }
            let count = match limit {
                Some(e) => limit_value(cx, db, e, "LIMIT")?,
                None => None,
            };
            let offset = match offset {
                Some(o) => limit_value(cx, db, &o.value, "OFFSET")?.unwrap_or(0),
                None => 0,
            };
            Ok((offset, count))
        }
        Some(LimitClause::OffsetCommaLimit { offset, .. }) => {
            Err(cx.unsupported(offset.span(), "LIMIT offset, count"))
        }
    }
}

/// `node` sorted by `keys` (if any), its rows locked as `lock` says (a
/// locking clause: PostgreSQL's LockRows goes above the sort and below
/// the limit), and cut to `offset` and `count`, each with its estimate.
fn sort_and_limit(
    cx: &StmtCx,
    mut node: Box<dyn PlanNode>,
    keys: Vec<SortKey>,
    offset: u64,
    count: Option<u64>,
    lock: Option<LockRows>,
) -> Box<dyn PlanNode> {
    let limited = offset > 0 || count.is_some();
    if !keys.is_empty() {
        let input = estimate_of(node.as_ref());
        let mut sort = SortNode::new(node, keys);
        // A LIMIT above reads only its offset and count of rows, unless
        // rows are locked between: a row left out there must be made up
        // by the next.
        let bound = count
            .filter(|_| lock.is_none())
            .map(|c| c.saturating_add(offset));
        sort.bound = bound.map(|b| b.min(usize::MAX as u64) as usize);
        sort.keep_tids = lock.is_some();
        let estimate = cost::sort(input, bound, &cx.costs);
        node = cost::estimated(Box::new(sort), estimate);
    }
    if let Some(lock) = lock {
        let estimate = cost::lock_rows(estimate_of(node.as_ref()), &cx.costs);
        let locking = LockRowsNode::new(
            node,
            lock.table,
            lock.mode,
            lock.wait,
            lock.condition,
            lock.outputs,
        );
        node = cost::estimated(Box::new(locking), estimate);
    }
    if limited {
        let estimate = cost::limit(estimate_of(node.as_ref()), offset, count);
        node = cost::estimated(Box::new(LimitNode::new(node, offset, count)), estimate);
    }
    node
}

/// Resolves the FROM clause: comma-separated items (cross joins, whose
/// WHERE may join them) and `[INNER | LEFT [OUTER] | CROSS] JOIN … ON`.
fn plan_from(
    cx: &StmtCx,
    db: &Database,
    from: &[TableWithJoins],
    mut outer: Outer<'_>,
) -> Result<FromClause, SqlError> {
    let mut clause = FromClause::default();
    for item in from {
        let group_start = clause.items.len();
        if group_start > 0 {
            clause.joins.push(JoinSpec {
                kind: JoinKind::Inner,
                on: None,
                group_start,
            });
        }
        clause
            .items
            .push(plan_factor(cx, db, &item.relation, reborrow(&mut outer))?);
        for join in &item.joins {
            let span = join.relation.span();
            let (kind, constraint) = match &join.join_operator {
                // `a JOIN b` without ON is no cross join: PostgreSQL
                // refuses it, and so do we, saying what to write.
                ast::JoinOperator::Join(ast::JoinConstraint::None)
                | ast::JoinOperator::Inner(ast::JoinConstraint::None)
                | ast::JoinOperator::Left(ast::JoinConstraint::None)
                | ast::JoinOperator::LeftOuter(ast::JoinConstraint::None) => {
                    return Err(SqlError::Syntax {
                        statement: cx.number,
                        message: format!(
                            "JOIN without ON at {}; give the join its condition with ON, or write CROSS JOIN for every pair",
                            cx.at(span)
                        ),
                    })
                }
                ast::JoinOperator::Join(c) | ast::JoinOperator::Inner(c) => (JoinKind::Inner, c),
                ast::JoinOperator::Left(c) | ast::JoinOperator::LeftOuter(c) => (JoinKind::Left, c),
                ast::JoinOperator::CrossJoin(c) => (JoinKind::Inner, c),
                ast::JoinOperator::Right(_)
                | ast::JoinOperator::RightOuter(_)
                | ast::JoinOperator::FullOuter(_) => {
                    return Err(cx.unsupported_hint(
                        span,
                        "RIGHT or FULL JOIN",
                        "; write the tables the other way round with LEFT JOIN",
                    ))
                }
                _ => return Err(cx.unsupported(span, "this kind of join")),
            };
            let on = match constraint {
                ast::JoinConstraint::On(e) => Some(e.clone()),
                ast::JoinConstraint::None => None,
                ast::JoinConstraint::Using(_) => {
                    return Err(cx.unsupported_hint(
                        span,
                        "JOIN … USING",
                        "; write the equality with ON",
                    ))
                }
                ast::JoinConstraint::Natural => {
                    return Err(cx.unsupported_hint(
                        span,
                        "NATURAL JOIN",
                        "; write the equality with ON",
                    ))
                }
            };
            if join.global {
                return Err(cx.unsupported(span, "GLOBAL joins"));
            }
            clause.joins.push(JoinSpec {
                kind,
                on,
                group_start,
            });
            clause
                .items
                .push(plan_factor(cx, db, &join.relation, reborrow(&mut outer))?);
        }
    }
    debug_assert_eq!(clause.joins.len() + 1, clause.items.len().max(1));
    Ok(clause)
}

/// Resolves one FROM item: a table, a view, `generate_series`, a utility
/// or a subquery.
fn plan_factor(
    cx: &StmtCx,
    db: &Database,
    relation: &TableFactor,
    outer: Outer<'_>,
) -> Result<FromItem, SqlError> {
    if let TableFactor::Derived {
        lateral,
        subquery,
        alias,
        sample,
    } = relation
    {
        let span = relation.span();
        if *lateral {
            return Err(cx.unsupported(span, "LATERAL"));
        }
        if sample.is_some() {
            return Err(cx.unsupported(span, "TABLESAMPLE"));
        }
        return plan_derived(cx, db, span, subquery, alias.as_ref(), outer);
    }
    let TableFactor::Table {
        name,
        alias,
        args,
        with_hints,
        version,
        with_ordinality,
        partitions,
        json_path,
        sample,
        index_hints,
    } = relation
    else {
        return Err(cx.unsupported(
            relation.span(),
            "this FROM item (LATERAL, UNNEST, a parenthesized join, …)",
        ));
    };
    let span = relation.span();
    if !with_hints.is_empty()
        || version.is_some()
        || *with_ordinality
        || !partitions.is_empty()
        || json_path.is_some()
        || sample.is_some()
        || !index_hints.is_empty()
    {
        return Err(cx.unsupported(
            span,
            "this table option (TABLESAMPLE, WITH ORDINALITY, hints, …)",
        ));
    }
    if let Some(a) = alias {
        if a.at.is_some() {
            return Err(cx.unsupported(span, "AT in an alias"));
        }
    }
    // `pg_catalog.pg_class`: a relation of pg_catalog by its schema.
    let relation = match (name.0.len(), super::expr::catalog_name(name)) {
        (2, Some(catalog)) if View::by_name(&catalog).is_some_and(View::is_catalog) => catalog,
        (2, Some(function)) if args.is_some() => function,
        (2, Some(missing)) => {
            return Err(SqlError::UnknownTable {
                name: format!("pg_catalog.{missing}"),
                hint: format!(
                    " (pg_catalog has: {})",
                    crate::exec::pg_catalog::CatalogView::ALL
                        .map(crate::exec::pg_catalog::CatalogView::name)
                        .join(", ")
                ),
            })
        }
        _ => object_name(cx, name)?,
    };
    let alias_name = alias.as_ref().map(|a| ident(&a.name));
    let alias_columns: Vec<String> = alias
        .as_ref()
        .map(|a| a.columns.iter().map(|c| ident(&c.name)).collect())
        .unwrap_or_default();
    let Some(args) = args else {
        if !alias_columns.is_empty() {
            return Err(cx.unsupported(span, "column aliases for a table"));
        }
        if let Ok(table) = cx.table(db, &relation) {
            return Ok(FromItem::Table(table, alias_name));
        }
        if let Some(view) = View::by_name(&relation) {
            return Ok(FromItem::View(view, alias_name));
        }
        return Err(SqlError::UnknownTable {
            name: relation,
            hint: format!(" (views: {})", View::ALL.map(View::name).join(", ")),
        });
    };
    if args.settings.is_some() {
        return Err(cx.unsupported(span, "SETTINGS in a table function"));
    }
    let fargs = table_function_args(cx, &args.args, &relation, span)?;
    if let Some(utility) = Utility::by_name(&relation) {
        return Ok(FromItem::Utility(utility_call(
            cx, db, utility, &fargs, span,
        )?));
    }
    if relation != "generate_series" {
        return Err(cx.unsupported(span, format!("the table function {relation}()")));
    }
    let scope = Scope::empty();
    let mut outer = outer;
    let mut planner = ExprPlanner::with_outer_columns(cx, db, &scope, "FROM", reborrow(&mut outer));
    let mut bounds = Vec::with_capacity(fargs.len());
    for a in &fargs {
        match a {
            ast::FunctionArgExpr::Expr(x) => bounds.push(planner.plan(x)?),
            _ => return Err(cx.unsupported(span, "generate_series(*)")),
        }
    }
    let numeric_ok = |e: &Expr| {
        matches!(
            e.ty(),
            None | Some(ColumnType::Integer | ColumnType::BigInt)
        )
    };
    if !(2..=3).contains(&bounds.len()) || !bounds.iter().all(numeric_ok) {
        return Err(cx.unsupported_hint(
            span,
            "this form of generate_series()",
            "; it takes generate_series(start, stop[, step]) of integer or bigint",
        ));
    }
    let ty = if bounds.iter().any(|b| b.ty() == Some(ColumnType::BigInt)) {
        ColumnType::BigInt
    } else {
        ColumnType::Integer
    };
    let mut bounds = bounds.into_iter().map(|b| Expr::cast(b, ty));
    let (Some(start), Some(stop)) = (bounds.next(), bounds.next()) else {
        return Err(cx.unsupported(span, "generate_series() with fewer than two arguments"));
    };
    let step = bounds.next().transpose()?;
    if alias_columns.len() > 1 {
        return Err(cx.unsupported(span, "more than one column alias for generate_series()"));
    }
    // Named as PostgreSQL names it: g(i) → i; g → g.
    let column = alias_columns
        .first()
        .cloned()
        .or_else(|| alias_name.clone())
        .unwrap_or_else(|| "generate_series".to_string());
    Ok(FromItem::Series(
        Series {
            alias: alias_name.unwrap_or_else(|| "generate_series".to_string()),
            start: start?,
            stop: stop?,
            step,
            ty,
        },
        column,
    ))
}

/// A subquery in FROM: `(SELECT …) AS alias [(column, …)]`. As in
/// PostgreSQL 15 it must have an alias; its columns are named by the
/// column aliases given (the first ones, the rest keeping the query's
/// names), and it sees the queries around its own query (not the other
/// items of its FROM: that would be LATERAL, which `plan_factor` refuses
/// with TABLESAMPLE before this). `span` is the whole FROM item's.
fn plan_derived(
    cx: &StmtCx,
    db: &Database,
    span: sqlparser::tokenizer::Span,
    subquery: &ast::Query,
    alias: Option<&ast::TableAlias>,
    outer: Outer<'_>,
) -> Result<FromItem, SqlError> {
    let Some(alias) = alias else {
        return Err(SqlError::SubqueryAlias { at: cx.at(span) });
    };
    if alias.at.is_some() || alias.columns.iter().any(|c| c.data_type.is_some()) {
        return Err(cx.unsupported(span, "this form of alias for a subquery"));
    }
    let name = ident(&alias.name);
    let query = cx.nested(span, || plan_query_in(cx, db, subquery, outer))?;
    if alias.columns.len() > query.columns.len() {
        return Err(SqlError::TooManyColumnAliases {
            name,
            available: query.columns.len(),
            specified: alias.columns.len(),
        });
    }
    let mut names: Vec<String> = query.columns.iter().map(|c| c.name.clone()).collect();
    for (slot, given) in names.iter_mut().zip(&alias.columns) {
        *slot = ident(&given.name);
    }
    Ok(FromItem::Subquery {
        query,
        alias: name,
        names,
    })
}

/// The ANDed parts of a condition.
fn conjuncts(e: &ast::Expr) -> Vec<&ast::Expr> {
    match e {
        ast::Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::And,
            right,
        } => {
            let mut parts = conjuncts(left);
            parts.extend(conjuncts(right));
            parts
        }
        ast::Expr::Nested(inner) => conjuncts(inner),
        other => vec![other],
    }
}

/// A WHERE of one table, each AND-ed condition on its own: the table's
/// scan may search an index by some of them.
pub(crate) fn plan_conditions(
    planner: &mut ExprPlanner,
    selection: Option<&ast::Expr>,
) -> Result<Vec<Filter>, SqlError> {
    let mut filters = Vec::new();
    for conj in selection.into_iter().flat_map(conjuncts) {
        filters.extend(planner.plan_filter(Some(conj), "WHERE")?);
    }
    Ok(filters)
}

/// `filters` ANDed into one, labelled as PostgreSQL shows an AND of
/// several: `((a > 1) AND (b < 2))`.
pub(crate) fn and_all(filters: Vec<Filter>) -> Result<Option<Filter>, SqlError> {
    let several = filters.len() > 1;
    let mut all: Option<Filter> = None;
    for f in filters {
        all = Some(match all {
            None => f,
            Some(a) => Filter {
                arm_labels: Vec::new(),
                predicate: Expr::binary(BinaryOp::And, a.predicate, f.predicate)?,
                label: format!("{} AND {}", a.label, f.label),
            },
        });
    }
    if several {
        if let Some(f) = &mut all {
            f.label = format!("({})", f.label);
        }
    }
    Ok(all)
}

/// Bytes assumed of an aggregate's value.
const AGGREGATE_WIDTH: usize = 8;

/// Groups `keys` make of `rows` rows (PostgreSQL's `estimate_num_groups`,
/// without its correlation corrections): the product of the keys'
/// distinct values, at most the rows.
fn estimate_groups(scope: &Scope, sizes: &ItemSizes, keys: &[Expr], rows: f64) -> f64 {
    let distinct: f64 = keys
        .iter()
        .map(|key| match key.column_index() {
            Some(c) if c < scope.columns.len() => {
                let item = scope.columns[c].item;
                let column = c - scope.item_columns(item).start;
                sizes.column(item, Some(column)).0
            }
            _ => cost::DEFAULT_NUM_DISTINCT,
        })
        .product();
    cost::clamp_rows(distinct.min(rows))
}

/// A select-list item before planning.
struct Item {
    expr: ast::Expr,
    name: String,
    /// The scope column a `*` put here: planned by position, since its
    /// name may be another column's too (`(SELECT 1 AS a, 2 AS a) s`).
    star: Option<usize>,
}

/// The items of select list `projection` over `scope`, with `*` and
/// `t.*` expanded (a SELECT's, or a data change's RETURNING).
fn select_items(
    cx: &StmtCx,
    scope: &Scope,
    projection: &[SelectItem],
) -> Result<Vec<Item>, SqlError> {
    let mut items = Vec::with_capacity(projection.len());
    for item in projection {
        match item {
            SelectItem::UnnamedExpr(e) => items.push(Item {
                expr: e.clone(),
                name: output_name(e),
                star: None,
            }),
            SelectItem::ExprWithAlias { expr, alias } => items.push(Item {
                expr: expr.clone(),
                name: ident(alias),
                star: None,
            }),
            SelectItem::ExprWithAliases { expr, .. } => {
                return Err(cx.unsupported(expr.span(), "several aliases for one item"))
            }
            SelectItem::Wildcard(options) => {
                check_wildcard(cx, options, item.span())?;
                if scope.columns.is_empty() {
                    return Err(cx.unsupported(item.span(), "SELECT * without FROM"));
                }
                expand_star(scope, None, &mut items);
            }
            SelectItem::QualifiedWildcard(kind, options) => {
                check_wildcard(cx, options, item.span())?;
                let SelectItemQualifiedWildcardKind::ObjectName(name) = kind else {
                    return Err(cx.unsupported(item.span(), format!("{kind}")));
                };
                let name = object_name(cx, name)?;
                let Some(only) = scope.item(&name) else {
                    return Err(SqlError::MissingFromItem {
                        name,
                        at: cx.at(item.span()),
                    });
                };
                expand_star(scope, Some(only), &mut items);
            }
        }
    }
    Ok(items)
}

/// Plans a data change's RETURNING list `projection` with `planner`,
/// whose scope is the changed table's row: the expressions, and the
/// columns of the rows they return.
pub(crate) fn plan_returning(
    planner: &mut ExprPlanner,
    projection: &[SelectItem],
) -> Result<(crate::exec::Returning, Vec<ResultColumn>), SqlError> {
    let items = select_items(planner.cx(), planner.scope(), projection)?;
    planner.clause = "RETURNING";
    let mut exprs = Vec::with_capacity(items.len());
    for item in &items {
        exprs.push(match item.star {
            Some(column) => planner.plan_scope_column(column),
            None => planner.plan(&item.expr)?,
        });
    }
    let columns = result_columns(&items, &exprs);
    let width = cost::row_width(exprs.iter().filter_map(Expr::ty));
    let returning = crate::exec::Returning {
        exprs,
        width,
        returned: 0,
    };
    Ok((returning, columns))
}

/// The result's columns for select-list `items` planned as `outputs`
/// (hidden columns after them are left out): an expression of no type
/// (a NULL) is text, as PostgreSQL's unknown is resolved.
fn result_columns(items: &[Item], outputs: &[Expr]) -> Vec<ResultColumn> {
    items
        .iter()
        .zip(outputs)
        .map(|(item, e)| ResultColumn {
            name: item.name.clone(),
            ty: e.ty().unwrap_or(ColumnType::Text),
        })
        .collect()
}

/// Every column of `scope` (of its item `only`, if given), as `*` and
/// `t.*` select them; qualified when several items could have a column of
/// the name.
fn expand_star(scope: &Scope, only: Option<usize>, items: &mut Vec<Item>) {
    for (at, c) in scope.columns.iter().enumerate() {
        if only.is_some_and(|i| i != c.item) {
            continue;
        }
        let name = ast::Ident::with_quote('"', c.name.clone());
        let expr = if scope.items.len() > 1 {
            let qualifier = ast::Ident::with_quote('"', scope.items[c.item].qualifier.clone());
            ast::Expr::CompoundIdentifier(vec![qualifier, name])
        } else {
            ast::Expr::Identifier(name)
        };
        items.push(Item {
            expr,
            name: c.name.clone(),
            star: Some(at),
        });
    }
}

/// `SELECT read_stream_for_blocks(…)`: a utility returning several
/// columns, alone in the select list, is read as if it were in FROM.
fn lone_row_utility(
    cx: &StmtCx,
    db: &Database,
    projection: &[SelectItem],
) -> Result<Option<UtilityCall>, SqlError> {
    let [SelectItem::UnnamedExpr(ast::Expr::Function(f))] = projection else {
        return Ok(None);
    };
    let Some(utility) = super::expr::function_name(f).and_then(|n| Utility::by_name(&n)) else {
        return Ok(None);
    };
    if utility.columns().len() == 1 {
        return Ok(None);
    }
    let args = function_args(cx, f, utility.name(), f.span())?;
    Ok(Some(utility_call(cx, db, utility, &args, f.span())?))
}

fn columns_of(specs: &[(&'static str, ColumnType)]) -> Vec<(String, ColumnType)> {
    specs
        .iter()
        .map(|&(name, ty)| (name.to_string(), ty))
        .collect()
}

/// A GROUP BY item: a select-list position, a select-list alias that is
/// not a column of the input, or an expression.
fn resolve_group(g: &ast::Expr, items: &[Item], scope: &Scope) -> Result<ast::Expr, SqlError> {
    if let Some(Value::Integer(k)) = constant(g) {
        return usize::try_from(k)
            .ok()
            .and_then(|k| k.checked_sub(1))
            .and_then(|k| items.get(k))
            .map(|item| item.expr.clone())
            .ok_or_else(|| SqlError::BadPosition {
                clause: "GROUP BY",
                position: i64::from(k),
                columns: items.len(),
            });
    }
    if let ast::Expr::Identifier(i) = g {
        let name = ident(i);
        if matches!(scope.find(&name), Ok(None)) {
            if let Some(item) = items.iter().find(|item| item.name == name) {
                return Ok(item.expr.clone());
            }
        }
    }
    Ok(g.clone())
}

/// An ORDER BY item that names a select-list column: by position, or by
/// the name of exactly one item.
fn resolve_order(e: &ast::Expr, items: &[Item]) -> Option<Result<usize, SqlError>> {
    if let Some(v) = constant(e) {
        let k = as_i64(&v)?;
        return Some(
            usize::try_from(k)
                .ok()
                .and_then(|k| k.checked_sub(1))
                .filter(|&k| k < items.len())
                .ok_or(SqlError::BadPosition {
                    clause: "ORDER BY",
                    position: k,
                    columns: items.len(),
                }),
        );
    }
    if let ast::Expr::Identifier(i) = e {
        let name = ident(i);
        let mut matching = items
            .iter()
            .enumerate()
            .filter(|(_, item)| item.name == name);
        if let (Some((at, _)), None) = (matching.next(), matching.next()) {
            return Some(Ok(at));
        }
    }
    None
}

/// The value of a LIMIT or OFFSET expression: a constant, non-negative
/// integer, or NULL (no limit).
fn limit_value(
    cx: &StmtCx,
    db: &Database,
    e: &ast::Expr,
    clause: &'static str,
) -> Result<Option<u64>, SqlError> {
    let scope = Scope::empty();
    let mut planner = ExprPlanner::new(cx, db, &scope, clause);
    // A literal or parameter of unknown type is a bigint here, as
    // PostgreSQL's LIMIT takes one (`LIMIT $1`).
    let planned = planner.plan_against(e, Some(ColumnType::BigInt))?;
    let bad = || SqlError::BadLimit {
        clause,
        value: e.to_string(),
    };
    if planned.is_volatile() {
        return Err(bad());
    }
    if planned.as_const().is_none() {
        // A parameter of a generic plan, read here as NULL: the plan is
        // for this run only, which plans it again with the value (`LIMIT
        // $1`).
        cx.fixed_for_run.set(true);
    }
    match planned.eval(&[], &mut crate::exec::EvalContext::new())? {
        Value::Null => Ok(None),
        v => as_i64(&v)
            .and_then(|n| u64::try_from(n).ok())
            .map(Some)
            .ok_or_else(bad),
    }
}

/// Plans a SELECT, with the ORDER BY, LIMIT and locking clauses of `q`
/// (`locking`) if given (a branch of a set operation has none of its
/// own), inside `outer` if it is a subquery.
fn plan_select(
    cx: &StmtCx,
    db: &Database,
    q: Option<&ast::Query>,
    select: &Select,
    locking: &[LockRequest],
    mut outer: Outer<'_>,
) -> Result<PlannedQuery, SqlError> {
    let mut from = plan_from(cx, db, &select.from, reborrow(&mut outer))?;
    let mut star = false;
    if from.items.is_empty() {
        if let Some(call) = lone_row_utility(cx, db, &select.projection)? {
            from.items.push(FromItem::Utility(call));
            star = true;
        }
    }
    let scope = from
        .items
        .iter()
        .map(FromItem::scope)
        .fold(Scope::empty(), Scope::join);
    for (i, item) in scope.items.iter().enumerate() {
        if scope.items[..i]
            .iter()
            .any(|o| o.qualifier == item.qualifier)
        {
            return Err(SqlError::DuplicateFromItem {
                name: item.qualifier.clone(),
            });
        }
    }

    // The select list, with * expanded.
    let mut items = Vec::new();
    if star {
        expand_star(&scope, None, &mut items);
    } else {
        items = select_items(cx, &scope, &select.projection)?;
    }

    let group_by: &[ast::Expr] = match &select.group_by {
        GroupByExpr::Expressions(exprs, _) => exprs,
        GroupByExpr::All(_) => &[],
    };
    let order_by: &[ast::OrderByExpr] = match q {
        Some(q) => order_by_exprs(cx, q)?,
        None => &[],
    };
    let aggregates = items.iter().any(|i| has_aggregate(&i.expr))
        || order_by.iter().any(|o| has_aggregate(&o.expr));
    let aggregated = !group_by.is_empty() || select.having.is_some() || aggregates;
    locking::check_locking(
        locking,
        !group_by.is_empty(),
        select.having.is_some(),
        aggregates,
    )?;
    let lock_target = locking::lock_target(cx, select.span(), locking, &from.items, &scope)?;

    let mut planner = ExprPlanner::nested(cx, db, &scope, "WHERE", reborrow(&mut outer));
    if from.items.is_empty() {
        planner.utilities = Some(Vec::new());
    }
    let (filters, joins) = if from.items.len() > 1 {
        (
            Vec::new(),
            plan_joins(&mut planner, &from, select.selection.as_ref())?,
        )
    } else {
        (
            plan_conditions(&mut planner, select.selection.as_ref())?,
            PlannedJoins::default(),
        )
    };

    planner.clause = "GROUP BY";
    let mut group_keys = Vec::with_capacity(group_by.len());
    let mut key_exprs = Vec::with_capacity(group_by.len());
    for g in group_by {
        let key = resolve_group(g, &items, &scope)?;
        key_exprs.push(planner.plan(&key)?);
        group_keys.push(key);
    }
    let group_labels: Vec<String> = group_keys.iter().map(ToString::to_string).collect();
    if aggregated {
        planner.grouping = Some(Grouping {
            key_columns: group_keys.iter().map(|k| planner.column_of(k)).collect(),
            key_types: key_exprs.iter().map(Expr::ty).collect(),
            keys: group_keys,
            aggs: Vec::new(),
        });
    }

    planner.clause = "the select list";
    let mut outputs = Vec::with_capacity(items.len());
    for item in &items {
        outputs.push(match item.star {
            Some(column) if planner.grouping.is_none() => planner.plan_scope_column(column),
            _ => planner.plan(&item.expr)?,
        });
    }
    let having = planner.plan_filter(select.having.as_ref(), "HAVING")?;

    planner.clause = "ORDER BY";
    let mut keys = Vec::with_capacity(order_by.len());
    for o in order_by {
        let column = match resolve_order(&o.expr, &items) {
            Some(found) => found?,
            None => match items.iter().position(|item| item.expr == o.expr) {
                Some(at) => at,
                None => {
                    // Sorted on, not selected: a hidden column.
                    outputs.push(planner.plan(&o.expr)?);
                    outputs.len() - 1
                }
            },
        };
        let shown = items.get(column).map(|item| match item.star {
            Some(c) => planner.scope().columns[c].name.clone(),
            None => item.expr.to_string(),
        });
        keys.push(sort_key(cx, o, column, shown)?);
    }
    let (offset, count) = limit_clause(cx, db, q.and_then(|q| q.limit_clause.as_ref()))?;

    let columns = result_columns(&items, &outputs);
    let used = std::mem::take(&mut planner.used);
    let utilities = planner.utilities.take();
    // The order an index of a lone table may give instead of a sort: the
    // ORDER BY's keys, each a column of the table.
    let wanted_order = (!aggregated && !keys.is_empty())
        .then(|| {
            let columns: Option<Vec<(usize, bool, bool)>> = keys
                .iter()
                .map(|k| {
                    let column = outputs[k.column].column_index()?;
                    Some((column, k.descending, k.nulls_first))
                })
                .collect();
            columns.map(|keys| super::access::WantedOrder {
                keys,
                limit: count.map(|c| c.saturating_add(offset)),
            })
        })
        .flatten();
    let mut ordered = false;
    let mut lock: Option<LockRows> = None;
    let c = &cx.costs;
    // What joins and groups are estimated from: the tables' sizes and
    // statistics, read once (a lone table's scan reads them itself when
    // nothing else needs them).
    let sizes = if from.items.len() > 1 || !key_exprs.is_empty() {
        ItemSizes::of(cx, db, &from.items)
    } else {
        ItemSizes::default()
    };
    let mut node: Box<dyn PlanNode> = if from.items.is_empty() {
        let width = cost::row_width(outputs.iter().filter_map(Expr::ty));
        let filter = and_all(filters)?;
        // One row, less what a constant WHERE takes (PostgreSQL's Result).
        let estimate = Estimate::new(0.0, c.cpu_tuple, 1.0, width);
        cost::estimated(
            Box::new(ResultNode::new(utilities.unwrap_or_default(), filter)),
            estimate,
        )
    } else if from.items.len() == 1 {
        let item = from.items.pop().expect("one item");
        // Rows to lock are read from the table, never an index alone, and
        // a newer version of one is checked against the whole WHERE.
        if let (Some((_, mode, wait)), FromItem::Table(table, _)) = (lock_target, &item) {
            lock = Some(LockRows {
                table: Arc::clone(table),
                mode,
                wait,
                condition: and_all(filters.clone())?.map(|f| f.predicate),
                outputs: Vec::new(),
            });
        }
        let purpose = if lock.is_some() {
            ReadFor::Change
        } else {
            ReadFor::Query
        };
        let scan = item.scan(
            cx,
            db,
            used,
            filters,
            wanted_order.as_ref(),
            1.0,
            sizes.table(0),
            purpose,
        )?;
        ordered = scan.ordered;
        scan.node
    } else {
        build_joins(cx, db, &scope, &sizes, from, used, joins)?
    };
    if let Some(grouping) = planner.grouping.take() {
        let aggs: Vec<Aggregate> = grouping.aggs.into_iter().map(|(_, a)| a).collect();
        let input = estimate_of(node.as_ref());
        let groups = estimate_groups(&scope, &sizes, &key_exprs, input.rows);
        let width =
            cost::row_width(key_exprs.iter().filter_map(Expr::ty)) + aggs.len() * AGGREGATE_WIDTH;
        let having_conditions = having.as_ref().map_or(0, |h| h.predicate.conjuncts().len());
        let estimate = cost::aggregate(
            input,
            groups,
            key_exprs.len(),
            aggs.len(),
            having_conditions,
            width,
            c,
        );
        node = cost::estimated(
            Box::new(AggregateNode::new(
                node,
                key_exprs,
                group_labels,
                aggs,
                having,
            )),
            estimate,
        );
    }
    let width = cost::row_width(outputs.iter().filter_map(Expr::ty));
    let estimate = cost::project(estimate_of(node.as_ref()), width);
    if let Some(lock) = &mut lock {
        lock.outputs = outputs.clone();
    }
    node = cost::estimated(Box::new(ProjectNode::new(node, outputs)), estimate);
    // Rows the index gives in order need no sort.
    let keys = if ordered { Vec::new() } else { keys };
    let node = sort_and_limit(cx, node, keys, offset, count, lock);
    Ok(PlannedQuery {
        query: QueryPlan::new(node, items.len()),
        columns,
        unknown: items.iter().map(|i| is_unknown_literal(&i.expr)).collect(),
    })
}
