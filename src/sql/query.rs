//! SELECT: from a `sqlparser` query to an executor pipeline.
//!
//! ```text
//! FROM item ─▶ source (scan, view, generate_series, utility, Result,
//!              a subquery's own plan under a Subquery Scan)
//! FROM a, b / a JOIN b ON … ─▶ joins, left-deep as written: a hash join
//!              on equalities between the items so far and the next,
//!              else a nested loop
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

use super::access::{TableSize, DISABLE_COST};
use super::cost;
use super::expr::{
    constant, function_args, has_aggregate, ident, is_unknown_literal, object_name, output_name,
    reborrow, table_function_args, utility_call, ExprPlanner, Grouping, Outer, Scope, StmtCx,
};
use super::{ResultColumn, SqlError};
use crate::catalog::TableDef;
use crate::config::Costs;
use crate::database::Database;
use crate::exec::agg::Aggregate;
use crate::exec::estimate::UNKNOWN_ROWS;
use crate::exec::{estimate_of, Estimate};
use crate::exec::{
    AggregateNode, BinaryOp, Expr, Filter, FilterNode, HashCond, HashJoinNode, JoinKind, LimitNode,
    MergeCond, MergeJoinNode, NestedLoopNode, PlanNode, ProjectNode, QueryPlan, ResultNode, Series,
    SeriesNode, SortKey, SortNode, SubqueryScanNode, Utility, UtilityCall, View, ViewNode,
};
use crate::types::{as_i64, ColumnType, Value};

use std::sync::Arc;

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
    /// whether it does), run `loops` times, of `size` if known (see
    /// `access::table_scan`).
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
    ) -> Result<super::access::TableScan, SqlError> {
        if let FromItem::Table(table, alias) = self {
            return super::access::table_scan(
                cx,
                db,
                table,
                alias,
                wanted,
                filters,
                super::access::ReadFor::Query,
                order,
                loops,
                size,
            );
        }
        let c = &cx.costs;
        let width = cost::row_width(self.scope().columns.iter().map(|c| c.ty));
        let conjuncts: Vec<&Expr> = filters
            .iter()
            .flat_map(|f| f.predicate.conjuncts())
            .collect();
        let selectivity: f64 = conjuncts
            .iter()
            .map(|e| super::access::default_selectivity(e))
            .product();
        let conditions = conjuncts.len();
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
        locks,
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
    if !locks.is_empty() {
        return Err(cx.unsupported(span, "FOR UPDATE / FOR SHARE"));
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
    if let SetExpr::Select(select) = &*q.body {
        check_select(cx, select)?;
        return plan_select(cx, db, Some(q), select, outer);
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
            plan_select(cx, db, None, select, outer)
        }
        SetExpr::Query(q) => plan_query_in(cx, db, q, outer),
        SetExpr::SetOperation { .. } => super::setop::plan_set_operation(cx, db, body, outer),
        SetExpr::Values(_) => {
            Err(cx.unsupported_hint(body.span(), "VALUES as a query", "; use it in INSERT"))
        }
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
    let node = sort_and_limit(cx, body.query.root, keys, offset, count);
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

/// `node` sorted by `keys` (if any) and cut to `offset` and `count`,
/// each with its estimate.
fn sort_and_limit(
    cx: &StmtCx,
    mut node: Box<dyn PlanNode>,
    keys: Vec<SortKey>,
    offset: u64,
    count: Option<u64>,
) -> Box<dyn PlanNode> {
    let limited = offset > 0 || count.is_some();
    if !keys.is_empty() {
        let input = estimate_of(node.as_ref());
        let mut sort = SortNode::new(node, keys);
        // A LIMIT above reads only its offset and count of rows.
        sort.bound = count.map(|c| offset.saturating_add(c).min(usize::MAX as u64) as usize);
        let estimate = cost::sort(input, count.map(|c| c.saturating_add(offset)), &cx.costs);
        node = cost::estimated(Box::new(sort), estimate);
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
    let relation = object_name(cx, name)?;
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
    let mut planner = ExprPlanner::new(cx, db, &scope, "FROM");
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

/// The planned conditions of a FROM clause of several items.
#[derive(Default)]
struct PlannedJoins {
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

/// Where the conditions of a FROM clause of several items are evaluated:
/// a condition on one item in that item's scan (unless a left join fills
/// that item with NULLs and the condition is a WHERE); anything else in
/// the join that brings in the last item it reads (the WHERE of a cross
/// or inner join is the same as its ON), except a WHERE reading the
/// NULL-filled side of a left join, which is evaluated above all joins.
/// Each join's equalities between the items before it and its item are
/// kept as keys too, for a hash or merge join.
fn plan_joins(
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
struct ItemSizes {
    sizes: Vec<Option<TableSize>>,
}

impl ItemSizes {
    fn of(cx: &StmtCx, db: &Database, items: &[FromItem]) -> ItemSizes {
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
    fn table(&self, item: usize) -> Option<&TableSize> {
        self.sizes.get(item)?.as_ref()
    }

    /// Distinct values and NULL fraction of column `column` of item
    /// `item` in its table (PostgreSQL's default if it is not a table's,
    /// or unknown). As in PostgreSQL, the table's conditions do not lower
    /// the count: the values left are taken to be as spread.
    fn column(&self, item: usize, column: Option<usize>) -> (f64, f64) {
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

/// The join tree of a FROM clause of several items, left-deep as written,
/// each join by the method estimated to cost least.
fn build_joins(
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
                .map(|e| super::access::default_selectivity(e))
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
/// allow (a disabled one costs [`super::access::DISABLE_COST`] more, as
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
                    .map(|e| super::access::default_selectivity(e))
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
            let scan = super::access::table_scan(
                cx,
                db,
                Arc::clone(table),
                alias.clone(),
                wanted.clone(),
                inner_filters,
                super::access::ReadFor::Query,
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
                let wanted_order = super::access::WantedOrder { keys, limit: None };
                let scan = super::access::table_scan(
                    cx,
                    db,
                    Arc::clone(table),
                    alias.clone(),
                    wanted.clone(),
                    filters.clone(),
                    super::access::ReadFor::Query,
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
            let scan = super::access::table_scan(
                cx,
                db,
                Arc::clone(&first.table),
                first.alias.clone(),
                first.wanted.clone(),
                inner_filters,
                super::access::ReadFor::Query,
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

/// A select-list item before planning.
struct Item {
    expr: ast::Expr,
    name: String,
    /// The scope column a `*` put here: planned by position, since its
    /// name may be another column's too (`(SELECT 1 AS a, 2 AS a) s`).
    star: Option<usize>,
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
    let planned = planner.plan(e)?;
    let bad = || SqlError::BadLimit {
        clause,
        value: e.to_string(),
    };
    if planned.is_volatile() {
        return Err(bad());
    }
    match planned.eval(&[], &mut crate::exec::EvalContext::new())? {
        Value::Null => Ok(None),
        v => as_i64(&v)
            .and_then(|n| u64::try_from(n).ok())
            .map(Some)
            .ok_or_else(bad),
    }
}

/// Plans a SELECT, with the ORDER BY and LIMIT of `q` if given (a
/// branch of a set operation has none of its own), inside `outer` if it
/// is a subquery.
fn plan_select(
    cx: &StmtCx,
    db: &Database,
    q: Option<&ast::Query>,
    select: &Select,
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
        for item in &select.projection {
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
                    expand_star(&scope, None, &mut items);
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
                    expand_star(&scope, Some(only), &mut items);
                }
            }
        }
    }

    let group_by: &[ast::Expr] = match &select.group_by {
        GroupByExpr::Expressions(exprs, _) => exprs,
        GroupByExpr::All(_) => &[],
    };
    let order_by: &[ast::OrderByExpr] = match q {
        Some(q) => order_by_exprs(cx, q)?,
        None => &[],
    };
    let aggregated = !group_by.is_empty()
        || select.having.is_some()
        || items.iter().any(|i| has_aggregate(&i.expr))
        || order_by.iter().any(|o| has_aggregate(&o.expr));

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

    let columns: Vec<ResultColumn> = items
        .iter()
        .zip(&outputs)
        .map(|(item, e)| ResultColumn {
            name: item.name.clone(),
            ty: e.ty().unwrap_or(ColumnType::Text),
        })
        .collect();
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
        let scan = item.scan(
            cx,
            db,
            used,
            filters,
            wanted_order.as_ref(),
            1.0,
            sizes.table(0),
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
    node = cost::estimated(Box::new(ProjectNode::new(node, outputs)), estimate);
    // Rows the index gives in order need no sort.
    let keys = if ordered { Vec::new() } else { keys };
    let node = sort_and_limit(cx, node, keys, offset, count);
    Ok(PlannedQuery {
        query: QueryPlan::new(node, items.len()),
        columns,
        unknown: items.iter().map(|i| is_unknown_literal(&i.expr)).collect(),
    })
}
