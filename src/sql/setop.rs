//! Set operations: `UNION [ALL]`, `INTERSECT [ALL]` and `EXCEPT [ALL]`
//! of queries, with PostgreSQL's rules.
//!
//! ```text
//! a UNION ALL b UNION ALL c ─▶ Append (a, b, c)
//! a UNION b UNION c         ─▶ HashAggregate (every column a key) ◀─ Append
//! a INTERSECT b, a EXCEPT b ─▶ HashSetOp ◀─ Append (a with a 0, b with a 1)
//! ```
//!
//! A chain of the same operator is one node over all its branches, as
//! PostgreSQL flattens it: `a UNION b UNION c`, and a `UNION ALL` inside a
//! `UNION` (whose duplicates the outer `UNION` removes anyway). Removing
//! duplicates is a hash aggregation grouped on every column, so a large
//! `UNION` spills to temporary files beyond `work_mem` as `GROUP BY`
//! does; `INTERSECT` and `EXCEPT` count each row's copies per side the
//! same way (`exec::SetOpNode`).
//!
//! Every branch must have as many columns as the first ("each UNION query
//! must have the same number of columns"). Each column's type is resolved
//! across the branches as PostgreSQL's `select_common_type` does: string
//! literals and NULLs (`unknown`) take the others' type (text if all are
//! unknown); otherwise the types must be of one category ("UNION types
//! integer and text cannot be matched"), and the result is the wider
//! number, `timestamp` over `date`, `text` over the other character types,
//! else the first branch's type (so `char(n)` first stays `char`). Every
//! branch's values are cast to that type; the names are the first
//! branch's.
//!
//! A `VALUES` list used as a query (`VALUES (1, 'a'), (2, 'b')`, or in
//! FROM as `(VALUES …) AS v(id, note)`) resolves each column across its
//! rows by the same rule, as PostgreSQL's `transformValuesClause` does; its
//! columns are `column1`, `column2`, ….

use sqlparser::ast::{self, SetExpr, SetOperator, SetQuantifier, Spanned};

use super::cost;
use super::expr::{is_unknown_literal, reborrow, ExprPlanner, Outer, Scope, StmtCx};
use super::query::{plan_set_expr, PlannedQuery};
use super::{ResultColumn, SqlError};
use crate::database::Database;
use crate::exec::{estimate_of, Estimate};
use crate::exec::{
    AggregateNode, AppendNode, Expr, PlanNode, ProjectNode, QueryPlan, SetOpKind, SetOpNode,
    ValuesNode,
};
use crate::types::{category, is_numeric, numeric_rank, ColumnType};

/// Which set operation, and whether ALL.
#[derive(Clone, Copy, PartialEq, Eq)]
struct SetOp {
    op: SetOperator,
    all: bool,
}

impl SetOp {
    /// The operator's name in messages.
    fn name(self) -> &'static str {
        match self.op {
            SetOperator::Union => "UNION",
            SetOperator::Intersect => "INTERSECT",
            SetOperator::Except | SetOperator::Minus => "EXCEPT",
        }
    }
}

/// The operator of a set operation `body`, refusing what we do not run.
fn set_op(cx: &StmtCx, body: &SetExpr) -> Result<Option<SetOp>, SqlError> {
    let SetExpr::SetOperation {
        op, set_quantifier, ..
    } = body
    else {
        return Ok(None);
    };
    let all = match set_quantifier {
        SetQuantifier::All => true,
        SetQuantifier::Distinct | SetQuantifier::None => false,
        other => {
            return Err(cx.unsupported(body.span(), format!("{op} {other}")));
        }
    };
    if *op == SetOperator::Minus {
        return Err(cx.unsupported_hint(body.span(), "MINUS", "; use EXCEPT"));
    }
    Ok(Some(SetOp { op: *op, all }))
}

/// The branches of `body`, a set operation `op`, with the same operation
/// below it flattened into one list (see the module comment).
fn branches<'q>(
    cx: &StmtCx,
    body: &'q SetExpr,
    op: SetOp,
    out: &mut Vec<&'q SetExpr>,
) -> Result<(), SqlError> {
    if let SetExpr::SetOperation { left, right, .. } = body {
        for side in [left, right] {
            match set_op(cx, side)? {
                Some(inner)
                    if op.op == SetOperator::Union
                        && inner.op == SetOperator::Union
                        && (inner.all == op.all || inner.all) =>
                {
                    branches(cx, side, op, out)?
                }
                _ => out.push(side),
            }
        }
    }
    Ok(())
}

/// The type a result column takes across branches of types `types`
/// (None: unknown), PostgreSQL's `select_common_type`.
/// `op` names the construct in the error ("UNION", "VALUES").
fn common_type(op: &'static str, types: &[Option<ColumnType>]) -> Result<ColumnType, SqlError> {
    use ColumnType as T;
    let mut candidate: Option<ColumnType> = None;
    for &ty in types.iter().flatten() {
        let Some(c) = candidate else {
            candidate = Some(ty);
            continue;
        };
        if category(c) != category(ty) {
            return Err(SqlError::SetOperationTypes {
                op,
                left: c.name(),
                right: ty.name(),
            });
        }
        candidate = Some(match (c, ty) {
            _ if c == ty => c,
            _ if is_numeric(c) => {
                if numeric_rank(ty) > numeric_rank(c) {
                    ty
                } else {
                    c
                }
            }
            (T::Text, _) | (_, T::Text) => T::Text,
            (T::Timestamp, _) | (_, T::Timestamp) => T::Timestamp,
            // Two lengths of one type, or char against varchar: the
            // first one's type, without a length.
            _ => c.without_modifier(),
        });
    }
    Ok(candidate.unwrap_or(T::Text))
}

/// Plans a set operation (`body` is a `SetExpr::SetOperation`).
pub(crate) fn plan_set_operation(
    cx: &StmtCx,
    db: &Database,
    body: &SetExpr,
    mut outer: Outer<'_>,
) -> Result<PlannedQuery, SqlError> {
    let Some(op) = set_op(cx, body)? else {
        return Err(crate::exec::ExecError::Internal("a set operation that is none").into());
    };
    let mut sides = Vec::new();
    branches(cx, body, op, &mut sides)?;
    debug_assert!(sides.len() >= 2, "a set operation has two sides");
    let mut planned: Vec<PlannedQuery> = Vec::with_capacity(sides.len());
    for side in sides {
        // PostgreSQL refuses a locking clause on a branch as on the whole
        // (transformSetOperationTree).
        if let SetExpr::Query(q) = side {
            if let Some(lock) = q.locks.first() {
                return Err(SqlError::LockingNotAllowed {
                    clause: super::query::locking_clause_name(lock),
                    with: "UNION/INTERSECT/EXCEPT",
                });
            }
        }
        planned.push(plan_set_expr(cx, db, side, reborrow(&mut outer))?);
    }
    let width = planned[0].columns.len();
    for query in &planned[1..] {
        if query.columns.len() != width {
            return Err(SqlError::SetOperationWidth {
                op: op.name(),
                left: width,
                right: query.columns.len(),
            });
        }
    }
    let mut columns: Vec<ResultColumn> = Vec::with_capacity(width);
    for k in 0..width {
        let types: Vec<Option<ColumnType>> = planned
            .iter()
            .map(|q| (!q.unknown[k]).then_some(q.columns[k].ty))
            .collect();
        columns.push(ResultColumn {
            name: planned[0].columns[k].name.clone(),
            ty: common_type(op.name(), &types)?,
        });
    }
    // Each branch cast to the result's types, without hidden columns; for
    // INTERSECT and EXCEPT, with the side it is on after them.
    let mut inputs: Vec<Box<dyn PlanNode>> = Vec::with_capacity(planned.len());
    for (side, query) in planned.into_iter().enumerate() {
        let mut exprs = Vec::with_capacity(width + 1);
        for (k, c) in columns.iter().enumerate() {
            let ty = query.columns[k].ty;
            let column = Expr::column(k, ty);
            // A length dropped is no conversion: a char(3) stays padded
            // as a char of no length, as in PostgreSQL.
            exprs.push(if ty.without_modifier() == c.ty {
                column
            } else {
                Expr::cast(column, c.ty)?
            });
        }
        if op.op != SetOperator::Union {
            exprs.push(Expr::constant(crate::types::Value::Integer(i32::from(
                side > 0,
            ))));
        }
        let input = estimate_of(query.query.root.as_ref());
        let estimate = cost::project(input, cost::row_width(exprs.iter().filter_map(Expr::ty)));
        inputs.push(cost::estimated(
            Box::new(ProjectNode::new(query.query.root, exprs)),
            estimate,
        ));
    }
    let c = &cx.costs;
    let sides: Vec<Estimate> = inputs.iter().map(|i| estimate_of(i.as_ref())).collect();
    let appended = cost::append(&sides, c);
    let append = cost::estimated(Box::new(AppendNode::new(inputs)), appended);
    // Each row's key compared or hashed: an operator per column.
    let per_row = c.cpu_operator * width as f64 * appended.rows;
    let keys = || -> Vec<Expr> {
        columns
            .iter()
            .enumerate()
            .map(|(k, c)| Expr::column(k, c.ty))
            .collect()
    };
    let labels: Vec<String> = columns.iter().map(|c| c.name.clone()).collect();
    let root: Box<dyn PlanNode> = match (op.op, op.all) {
        (SetOperator::Union, true) => append,
        (SetOperator::Union, false) => {
            // Distinct rows: PostgreSQL's default per column, at most
            // every row.
            let groups = cost::DEFAULT_NUM_DISTINCT.powi(width as i32);
            let estimate = cost::aggregate(appended, groups, width, 0, 0, appended.width, c);
            cost::estimated(
                Box::new(AggregateNode::new(append, keys(), labels, Vec::new(), None)),
                estimate,
            )
        }
        (operator, all) => {
            let kind = if operator == SetOperator::Intersect {
                SetOpKind::Intersect
            } else {
                SetOpKind::Except
            };
            // As PostgreSQL: at most the smaller side for INTERSECT, the
            // left side for EXCEPT.
            let rows = match kind {
                SetOpKind::Intersect => sides.iter().map(|e| e.rows).fold(f64::MAX, f64::min),
                SetOpKind::Except => sides[0].rows,
            };
            let estimate = Estimate::new(
                appended.total,
                appended.total + per_row,
                cost::clamp_rows(rows),
                appended.width,
            );
            cost::estimated(
                Box::new(SetOpNode::new(append, keys(), labels, kind, all)),
                estimate,
            )
        }
    };
    Ok(PlannedQuery {
        query: QueryPlan::new(root, width),
        unknown: vec![false; width],
        columns,
    })
}

/// Plans a `VALUES` list used as a query, inside `outer` if it is a
/// subquery: each column of the common type of its rows' expressions
/// (string literals and NULLs taking the others' type, text if all are).
pub(crate) fn plan_values(
    cx: &StmtCx,
    db: &Database,
    values: &ast::Values,
    mut outer: Outer<'_>,
) -> Result<PlannedQuery, SqlError> {
    let scope = Scope::empty();
    let mut planner = ExprPlanner::nested(cx, db, &scope, "VALUES", reborrow(&mut outer));
    let width = values.rows.first().map_or(0, |r| r.content.len());
    let mut rows: Vec<Vec<Expr>> = Vec::with_capacity(values.rows.len());
    for row in &values.rows {
        if row.content.len() != width {
            return Err(SqlError::ValuesLength {
                at: cx.at(row.span()),
            });
        }
        let planned = row
            .content
            .iter()
            .map(|e| planner.plan(e))
            .collect::<Result<Vec<_>, _>>()?;
        rows.push(planned);
    }
    let mut columns: Vec<ResultColumn> = Vec::with_capacity(width);
    for k in 0..width {
        let types: Vec<Option<ColumnType>> = values
            .rows
            .iter()
            .zip(&rows)
            .map(|(row, planned)| {
                (!is_unknown_literal(&row.content[k]))
                    .then(|| planned[k].ty())
                    .flatten()
            })
            .collect();
        columns.push(ResultColumn {
            name: format!("column{}", k + 1),
            ty: common_type("VALUES", &types)?,
        });
    }
    for row in &mut rows {
        for (e, c) in row.iter_mut().zip(&columns) {
            let planned = std::mem::replace(e, Expr::null(None));
            *e = match planned.ty() {
                Some(ty) if ty.without_modifier() == c.ty => planned,
                _ => Expr::cast(planned, c.ty)?,
            };
        }
    }
    let estimate = Estimate::new(
        0.0,
        cx.costs.cpu_tuple * rows.len() as f64,
        rows.len() as f64,
        cost::row_width(columns.iter().map(|c| c.ty)),
    );
    let root = cost::estimated(Box::new(ValuesNode::new(rows, None)), estimate);
    Ok(PlannedQuery {
        query: QueryPlan::new(root, width),
        unknown: vec![false; width],
        columns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_type_follows_postgresql() {
        use ColumnType as T;
        let union = "UNION";
        let t = |types: &[Option<ColumnType>]| common_type(union, types).unwrap();
        assert_eq!(t(&[Some(T::Integer), Some(T::BigInt)]), T::BigInt);
        assert_eq!(t(&[Some(T::Integer), None, Some(T::Double)]), T::Double);
        assert_eq!(t(&[None, None]), T::Text);
        assert_eq!(
            t(&[Some(T::Char(Some(2))), Some(T::Varchar(Some(3)))]),
            T::Char(None)
        );
        assert_eq!(
            t(&[Some(T::Varchar(Some(3))), Some(T::Char(Some(2)))]),
            T::Varchar(None)
        );
        assert_eq!(t(&[Some(T::Varchar(Some(3))), Some(T::Text)]), T::Text);
        assert_eq!(
            t(&[Some(T::Varchar(Some(3))), Some(T::Varchar(Some(3)))]),
            T::Varchar(Some(3))
        );
        assert_eq!(t(&[Some(T::Date), Some(T::Timestamp)]), T::Timestamp);
        let e = common_type(union, &[Some(T::Integer), Some(T::Text)]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "UNION types integer and text cannot be matched"
        );
    }
}
