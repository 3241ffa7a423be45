//! SELECT: from a `sqlparser` query to an executor pipeline.
//!
//! ```text
//! FROM item ─▶ source (scan, view, generate_series, utility, Result)
//! WHERE      ─▶ the source's filter
//! GROUP BY / aggregates / HAVING ─▶ Aggregate
//! select list (+ ORDER BY expressions not in it, hidden) ─▶ Project
//! ORDER BY   ─▶ Sort          LIMIT / OFFSET ─▶ Limit
//! ```
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

use super::expr::{
    constant, function_args, has_aggregate, ident, is_unknown_literal, object_name, output_name,
    table_function_args, utility_call, ExprPlanner, Grouping, Scope, ScopeColumn, StmtCx,
};
use super::{ResultColumn, SqlError};
use crate::catalog::TableDef;
use crate::database::Database;
use crate::exec::agg::Aggregate;
use crate::exec::{
    AggregateNode, Expr, LimitNode, PlanNode, ProjectNode, QueryPlan, ResultNode, SeqScanNode,
    Series, SeriesNode, SortKey, SortNode, Utility, UtilityCall, View, ViewNode,
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

/// What the FROM clause names.
enum FromItem {
    None,
    Table(Arc<TableDef>, Option<String>),
    View(View, Option<String>),
    /// `generate_series`, and the name of its column.
    Series(Series, String),
    Utility(UtilityCall),
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
    check_query(cx, q)?;
    let select = match &*q.body {
        SetExpr::Select(s) => s,
        SetExpr::SetOperation { op, .. } => {
            return Err(cx.unsupported(q.body.span(), format!("{op} (set operations)")))
        }
        SetExpr::Values(_) => {
            return Err(cx.unsupported_hint(
                q.body.span(),
                "VALUES as a query",
                "; use it in INSERT",
            ))
        }
        SetExpr::Query(_) => return Err(cx.unsupported(q.body.span(), "parenthesized queries")),
        other => return Err(cx.unsupported(other.span(), "this kind of query")),
    };
    check_select(cx, select)?;
    plan_select(cx, db, q, select)
}

/// Resolves the FROM clause.
fn plan_from(cx: &StmtCx, db: &Database, from: &[TableWithJoins]) -> Result<FromItem, SqlError> {
    let item = match from {
        [] => return Ok(FromItem::None),
        [item] => item,
        [_, second, ..] => {
            return Err(cx.unsupported_hint(
                second.relation.span(),
                "several tables in FROM",
                "; a query reads one table (joins come later)",
            ))
        }
    };
    if let Some(join) = item.joins.first() {
        return Err(cx.unsupported(join.relation.span(), "JOIN"));
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
    } = &item.relation
    else {
        return Err(cx.unsupported(
            item.relation.span(),
            "this FROM item (subqueries, LATERAL, UNNEST, …)",
        ));
    };
    let span = item.relation.span();
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

/// A select-list item before planning.
struct Item {
    expr: ast::Expr,
    name: String,
}

/// Every column of `scope`, as `*` selects them.
fn expand_star(scope: &Scope, items: &mut Vec<Item>) {
    for c in &scope.columns {
        items.push(Item {
            expr: ast::Expr::Identifier(ast::Ident::with_quote('"', c.name.clone())),
            name: c.name.clone(),
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

fn columns_of(specs: &[(&'static str, ColumnType)]) -> Vec<ScopeColumn> {
    specs
        .iter()
        .map(|&(name, ty)| ScopeColumn {
            name: name.to_string(),
            ty,
        })
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
        if scope.find(&name).is_none() {
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

fn plan_select(
    cx: &StmtCx,
    db: &Database,
    q: &ast::Query,
    select: &Select,
) -> Result<PlannedQuery, SqlError> {
    let mut from = plan_from(cx, db, &select.from)?;
    let mut star = false;
    if matches!(from, FromItem::None) {
        if let Some(call) = lone_row_utility(cx, db, &select.projection)? {
            from = FromItem::Utility(call);
            star = true;
        }
    }
    let scope = match &from {
        FromItem::None => Scope::empty(),
        FromItem::Table(table, alias) => Scope::of_table(table, alias.as_deref()),
        FromItem::View(view, alias) => Scope {
            qualifier: Some(alias.clone().unwrap_or_else(|| view.name().to_string())),
            describe: format!("view \"{}\"", view.name()),
            columns: columns_of(view.columns()),
        },
        FromItem::Series(series, column) => Scope {
            qualifier: Some(series.alias.clone()),
            describe: "generate_series()".into(),
            columns: vec![ScopeColumn {
                name: column.clone(),
                ty: series.ty,
            }],
        },
        FromItem::Utility(call) => Scope {
            qualifier: Some(call.utility.name().to_string()),
            describe: format!("{}()", call.utility.name()),
            columns: columns_of(call.utility.columns()),
        },
    };

    // The select list, with * expanded.
    let mut items = Vec::new();
    if star {
        expand_star(&scope, &mut items);
    } else {
        for item in &select.projection {
            match item {
                SelectItem::UnnamedExpr(e) => items.push(Item {
                    expr: e.clone(),
                    name: output_name(e),
                }),
                SelectItem::ExprWithAlias { expr, alias } => items.push(Item {
                    expr: expr.clone(),
                    name: ident(alias),
                }),
                SelectItem::ExprWithAliases { expr, .. } => {
                    return Err(cx.unsupported(expr.span(), "several aliases for one item"))
                }
                SelectItem::Wildcard(options) => {
                    check_wildcard(cx, options, item.span())?;
                    if scope.columns.is_empty() {
                        return Err(cx.unsupported(item.span(), "SELECT * without FROM"));
                    }
                    expand_star(&scope, &mut items);
                }
                SelectItem::QualifiedWildcard(kind, options) => {
                    check_wildcard(cx, options, item.span())?;
                    let SelectItemQualifiedWildcardKind::ObjectName(name) = kind else {
                        return Err(cx.unsupported(item.span(), format!("{kind}")));
                    };
                    let name = object_name(cx, name)?;
                    if scope.qualifier.as_deref() != Some(name.as_str()) {
                        return Err(SqlError::UnknownTable {
                            name,
                            hint: " in FROM".into(),
                        });
                    }
                    expand_star(&scope, &mut items);
                }
            }
        }
    }

    let group_by: &[ast::Expr] = match &select.group_by {
        GroupByExpr::Expressions(exprs, _) => exprs,
        GroupByExpr::All(_) => &[],
    };
    let order_by: &[ast::OrderByExpr] = match q.order_by.as_ref().map(|o| &o.kind) {
        None => &[],
        Some(OrderByKind::Expressions(exprs)) => exprs,
        Some(OrderByKind::All(_)) => return Err(cx.unsupported(q.span(), "ORDER BY ALL")),
    };
    let aggregated = !group_by.is_empty()
        || select.having.is_some()
        || items.iter().any(|i| has_aggregate(&i.expr))
        || order_by.iter().any(|o| has_aggregate(&o.expr));

    let mut planner = ExprPlanner::new(cx, db, &scope, "WHERE");
    if matches!(from, FromItem::None) {
        planner.utilities = Some(Vec::new());
    }
    let filter = planner.plan_filter(select.selection.as_ref(), "WHERE")?;

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
        outputs.push(planner.plan(&item.expr)?);
    }
    let having = planner.plan_filter(select.having.as_ref(), "HAVING")?;

    planner.clause = "ORDER BY";
    let mut keys = Vec::with_capacity(order_by.len());
    for o in order_by {
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
        keys.push(SortKey {
            column,
            descending,
            nulls_first: o.options.nulls_first.unwrap_or(descending),
            label: o.to_string(),
        });
    }

    let (offset, count) = match &q.limit_clause {
        None => (0, None),
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
            (offset, count)
        }
        Some(LimitClause::OffsetCommaLimit { offset, .. }) => {
            return Err(cx.unsupported(offset.span(), "LIMIT offset, count"))
        }
    };

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
    let mut node: Box<dyn PlanNode> = match from {
        FromItem::None => Box::new(ResultNode::new(utilities.unwrap_or_default(), filter)),
        FromItem::Table(table, alias) => Box::new(SeqScanNode::new(table, alias, used, filter)),
        FromItem::View(view, _) => Box::new(ViewNode::new(view, filter)),
        FromItem::Series(series, _) => Box::new(SeriesNode::new(series, filter)),
        FromItem::Utility(call) => Box::new(ResultNode::new(vec![call], filter)),
    };
    if let Some(grouping) = planner.grouping.take() {
        let aggs: Vec<Aggregate> = grouping.aggs.into_iter().map(|(_, a)| a).collect();
        node = Box::new(AggregateNode::new(
            node,
            key_exprs,
            group_labels,
            aggs,
            having,
        ));
    }
    node = Box::new(ProjectNode::new(node, outputs));
    if !keys.is_empty() {
        let mut sort = SortNode::new(node, keys);
        // A LIMIT above reads only its offset and count of rows.
        sort.bound = count.map(|c| offset.saturating_add(c).min(usize::MAX as u64) as usize);
        node = Box::new(sort);
    }
    if offset > 0 || count.is_some() {
        node = Box::new(LimitNode::new(node, offset, count));
    }
    Ok(PlannedQuery {
        query: QueryPlan::new(node, items.len()),
        columns,
        unknown: items.iter().map(|i| is_unknown_literal(&i.expr)).collect(),
    })
}
