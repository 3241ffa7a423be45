//! INSERT, UPDATE and DELETE: from `sqlparser` statements to the
//! executor's plans.
//!
//! Values are converted to their column's type while planning (literals to
//! any type, numbers among numbers; anything else is an error naming the
//! column), so the executor only has to check NOT NULL. An INSERT's input
//! is a pipeline producing rows of the table's full width: columns not
//! named get NULL (there are no defaults yet).

use std::sync::Arc;

use sqlparser::ast::{
    self, AssignmentTarget, FromTable, SetExpr, Spanned, TableFactor, TableObject, TableWithJoins,
};

use super::cost;
use super::expr::{assign, object_name, ExprPlanner, Scope, StmtCx};
use super::query::{plan_query, plan_returning};
use super::{ResultColumn, SqlError};
use crate::catalog::TableDef;
use crate::database::Database;
use crate::exec::{estimate_of, Estimate};
use crate::exec::{
    ChangeTarget, DeletePlan, Expr, Filter, InsertPlan, ProjectNode, UpdatePlan, ValuesNode, View,
};

/// The user table called `name`; a system view is refused as one that
/// cannot be changed.
pub(crate) fn user_table(
    cx: &StmtCx,
    db: &Database,
    name: &str,
) -> Result<Arc<TableDef>, SqlError> {
    cx.table(db, name).map_err(|_| {
        let name = name.to_string();
        if View::by_name(&name).is_some() {
            SqlError::ReadOnlyView { name }
        } else {
            SqlError::UnknownTable {
                name,
                hint: String::new(),
            }
        }
    })
}

/// How many times [`locked_table`] finds a table again after it was
/// dropped or truncated while it waited for its lock (each time it holds
/// the lock of the one it found before, so only a table created again
/// and again meanwhile could use them up).
const RELOCK_ATTEMPTS: usize = 4;

/// The user table called `name`, locked in `mode` for the session's
/// transaction: found again if it changed while the lock was waited for
/// (a TRUNCATE gives it a new file), so that what is returned is the
/// table as it is under the lock.
pub(crate) fn locked_table(
    cx: &StmtCx,
    s: &mut crate::database::Session,
    name: &str,
    mode: crate::txn::LockMode,
) -> Result<Arc<TableDef>, SqlError> {
    for _ in 0..RELOCK_ATTEMPTS {
        let def = user_table(cx, s.db(), name)?;
        match crate::exec::lock_table(s, &def, mode) {
            Err(crate::exec::ExecError::TableDropped(_)) => continue,
            locked => return locked.map(|_| def).map_err(SqlError::from),
        }
    }
    Err(crate::exec::ExecError::TableDropped(name.to_string()).into())
}

/// The table a statement changes: a user table, not a view.
fn target_table(
    cx: &StmtCx,
    db: &Database,
    name: &ast::ObjectName,
) -> Result<Arc<TableDef>, SqlError> {
    user_table(cx, db, &object_name(cx, name)?)
}

/// The one table of UPDATE or DELETE, and its alias.
fn single_table(
    cx: &StmtCx,
    db: &Database,
    t: &TableWithJoins,
) -> Result<(Arc<TableDef>, Option<String>), SqlError> {
    if let Some(join) = t.joins.first() {
        return Err(cx.unsupported(join.relation.span(), "JOIN"));
    }
    match &t.relation {
        TableFactor::Table {
            name,
            alias,
            args: None,
            with_hints,
            version: None,
            with_ordinality: false,
            partitions,
            json_path: None,
            sample: None,
            index_hints,
        } if with_hints.is_empty() && partitions.is_empty() && index_hints.is_empty() => {
            if alias
                .as_ref()
                .is_some_and(|a| !a.columns.is_empty() || a.at.is_some())
            {
                return Err(cx.unsupported(t.relation.span(), "column aliases for a table"));
            }
            let table = target_table(cx, db, name)?;
            Ok((table, alias.as_ref().map(|a| super::expr::ident(&a.name))))
        }
        other => Err(cx.unsupported(other.span(), "this kind of target table")),
    }
}

/// The column indexes `columns` names, in order, each at most once.
pub(crate) fn target_columns<'n>(
    cx: &StmtCx,
    table: &TableDef,
    columns: impl ExactSizeIterator<Item = &'n ast::ObjectName>,
) -> Result<Vec<usize>, SqlError> {
    let mut out = Vec::with_capacity(columns.len());
    for c in columns {
        let name = object_name(cx, c)?;
        let index = table
            .column_index(&name)
            .ok_or_else(|| SqlError::UnknownColumn {
                column: name.clone(),
                relation: format!("table \"{}\"", table.name()),
                at: cx.at(c.span()),
            })?;
        if out.contains(&index) {
            return Err(SqlError::DuplicateColumn {
                table: table.name().to_string(),
                column: name,
            });
        }
        out.push(index);
    }
    Ok(out)
}

pub(crate) fn plan_insert(
    cx: &StmtCx,
    db: &Database,
    insert: &ast::Insert,
) -> Result<(InsertPlan, Vec<ResultColumn>), SqlError> {
    let ast::Insert {
        insert_token: _,
        optimizer_hints,
        or,
        ignore,
        into: _,
        table,
        table_alias,
        columns,
        overwrite,
        source,
        assignments,
        partitioned,
        after_columns,
        has_table_keyword,
        on,
        returning,
        output,
        replace_into,
        priority,
        insert_alias,
        settings,
        format_clause,
        multi_table_insert_type,
        multi_table_into_clauses,
        multi_table_when_clauses,
        multi_table_else_clause,
    } = insert;
    let span = insert.span();
    if output.is_some() {
        return Err(cx.unsupported(span, "OUTPUT"));
    }
    if on.is_some() {
        return Err(cx.unsupported(span, "ON CONFLICT"));
    }
    if !optimizer_hints.is_empty()
        || or.is_some()
        || *ignore
        || table_alias.is_some()
        || *overwrite
        || !assignments.is_empty()
        || partitioned.is_some()
        || !after_columns.is_empty()
        || *has_table_keyword
        || *replace_into
        || priority.is_some()
        || insert_alias.is_some()
        || settings.is_some()
        || format_clause.is_some()
        || multi_table_insert_type.is_some()
        || !multi_table_into_clauses.is_empty()
        || !multi_table_when_clauses.is_empty()
        || multi_table_else_clause.is_some()
    {
        return Err(cx.unsupported(span, "this form of INSERT"));
    }
    let TableObject::TableName(name) = table else {
        return Err(cx.unsupported(span, "INSERT INTO a table function"));
    };
    let table = target_table(cx, db, name)?;
    let (returning, returned) = match returning {
        Some(items) => {
            let scope = Scope::of_table(&table, None);
            let mut planner = ExprPlanner::new(cx, db, &scope, "RETURNING");
            planner.subqueries = true;
            plan_returning(&mut planner, items)?
        }
        None => Default::default(),
    };
    let targets = if columns.is_empty() {
        (0..table.columns.len()).collect()
    } else {
        target_columns(cx, &table, columns.iter())?
    };
    let Some(source) = source else {
        return Err(cx.unsupported_hint(
            span,
            "INSERT … DEFAULT VALUES",
            "; give VALUES or a SELECT",
        ));
    };
    let arity = |expressions: usize| {
        if expressions != targets.len() {
            return Err(SqlError::InsertArity {
                table: table.name().to_string(),
                expressions,
                columns: targets.len(),
            });
        }
        Ok(())
    };
    // Full-width rows: the targets' values in place, NULL elsewhere.
    let full_row = |mut values: Vec<Option<Expr>>| -> Vec<Expr> {
        table
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                values
                    .get_mut(i)
                    .and_then(Option::take)
                    .unwrap_or_else(|| Expr::null(Some(c.ty)))
            })
            .collect()
    };
    if let SetExpr::Values(values) = &*source.body {
        if source.order_by.is_some() || source.limit_clause.is_some() || source.with.is_some() {
            return Err(cx.unsupported(source.span(), "ORDER BY, LIMIT or WITH on VALUES"));
        }
        let scope = Scope::empty();
        let mut planner = ExprPlanner::new(cx, db, &scope, "VALUES");
        planner.subqueries = true;
        let mut rows = Vec::with_capacity(values.rows.len());
        for row in &values.rows {
            arity(row.content.len())?;
            let mut placed: Vec<Option<Expr>> = vec![None; table.columns.len()];
            for (&column, e) in targets.iter().zip(&row.content) {
                if matches!(e, ast::Expr::Identifier(i) if i.value.eq_ignore_ascii_case("default"))
                {
                    return Err(cx.unsupported_hint(
                        e.span(),
                        "DEFAULT",
                        "; columns have no defaults yet, leave the column out to store NULL",
                    ));
                }
                placed[column] = Some(planner.plan_assignment(e, &table, column)?);
            }
            rows.push(full_row(placed));
        }
        let estimate = Estimate::new(
            0.0,
            cx.costs.cpu_tuple * rows.len() as f64,
            rows.len() as f64,
            cost::row_width(table.columns.iter().map(|c| c.ty)),
        );
        let plan = InsertPlan {
            table: Arc::clone(&table),
            input: cost::estimated(Box::new(ValuesNode::new(rows, None)), estimate),
            bulk: false,
            returning,
        };
        return Ok((plan, returned));
    }
    let query = plan_query(cx, db, source)?;
    arity(query.columns.len())?;
    let mut placed: Vec<Option<Expr>> = vec![None; table.columns.len()];
    let outputs = query.columns.iter().zip(&query.unknown);
    for (k, (&column, (output, &unknown))) in targets.iter().zip(outputs).enumerate() {
        placed[column] = Some(assign(Expr::column(k, output.ty), unknown, &table, column)?);
    }
    let estimate = cost::project(
        estimate_of(query.query.root.as_ref()),
        cost::row_width(table.columns.iter().map(|c| c.ty)),
    );
    let input = cost::estimated(
        Box::new(ProjectNode::new(query.query.root, full_row(placed))),
        estimate,
    );
    let plan = InsertPlan {
        table,
        input,
        bulk: true,
        returning,
    };
    Ok((plan, returned))
}

pub(crate) fn plan_update(
    cx: &StmtCx,
    db: &Database,
    update: &ast::Update,
) -> Result<(UpdatePlan, Vec<ResultColumn>), SqlError> {
    let ast::Update {
        update_token: _,
        optimizer_hints,
        table,
        assignments,
        from,
        selection,
        returning,
        output,
        or,
        order_by,
        limit,
    } = update;
    let span = update.span();
    if output.is_some() {
        return Err(cx.unsupported(span, "OUTPUT"));
    }
    if from.is_some() {
        return Err(cx.unsupported(span, "UPDATE … FROM"));
    }
    if !optimizer_hints.is_empty() || or.is_some() || !order_by.is_empty() || limit.is_some() {
        return Err(cx.unsupported(span, "this form of UPDATE"));
    }
    let (table, alias) = single_table(cx, db, table)?;
    let mut names = Vec::with_capacity(assignments.len());
    for a in assignments {
        let AssignmentTarget::ColumnName(name) = &a.target else {
            return Err(cx.unsupported(a.value.span(), "assigning to several columns at once"));
        };
        names.push(name);
    }
    let columns = target_columns(cx, &table, names.into_iter())?;
    let scope = Scope::of_table(&table, alias.as_deref());
    let mut planner = ExprPlanner::new(cx, db, &scope, "UPDATE");
    // The scan applies a filter with a subquery after each page, and
    // the assignments are evaluated outside any page's lock.
    planner.subqueries = true;
    let mut planned = Vec::with_capacity(assignments.len());
    for (column, a) in columns.into_iter().zip(assignments) {
        planned.push((column, planner.plan_assignment(&a.value, &table, column)?));
    }
    let filters = super::query::plan_conditions(&mut planner, selection.as_ref())?;
    let (returning, columns) = match returning {
        Some(items) => plan_returning(&mut planner, items)?,
        None => Default::default(),
    };
    // The new version needs every column of the old one.
    let wanted = vec![true; table.columns.len()];
    let plan = UpdatePlan {
        target: change_target(cx, db, table, alias, wanted, filters)?,
        assignments: planned,
        returning,
    };
    Ok((plan, columns))
}

pub(crate) fn plan_delete(
    cx: &StmtCx,
    db: &Database,
    delete: &ast::Delete,
) -> Result<(DeletePlan, Vec<ResultColumn>), SqlError> {
    let ast::Delete {
        delete_token: _,
        optimizer_hints,
        tables,
        from,
        using,
        selection,
        returning,
        output,
        order_by,
        limit,
    } = delete;
    let span = delete.span();
    if output.is_some() {
        return Err(cx.unsupported(span, "OUTPUT"));
    }
    if using.is_some() {
        return Err(cx.unsupported(span, "DELETE … USING"));
    }
    if !optimizer_hints.is_empty() || !tables.is_empty() || !order_by.is_empty() || limit.is_some()
    {
        return Err(cx.unsupported(span, "this form of DELETE"));
    }
    let (FromTable::WithFromKeyword(from) | FromTable::WithoutKeyword(from)) = from;
    let [target] = from.as_slice() else {
        return Err(cx.unsupported(span, "deleting from several tables"));
    };
    let (table, alias) = single_table(cx, db, target)?;
    let scope = Scope::of_table(&table, alias.as_deref());
    let mut planner = ExprPlanner::new(cx, db, &scope, "DELETE");
    planner.subqueries = true;
    let filters = super::query::plan_conditions(&mut planner, selection.as_ref())?;
    let (returning, columns) = match returning {
        Some(items) => plan_returning(&mut planner, items)?,
        None => Default::default(),
    };
    // The scan decodes what the WHERE and RETURNING read.
    let wanted = std::mem::take(&mut planner.used);
    let plan = DeletePlan {
        target: change_target(cx, db, table, alias, wanted, filters)?,
        returning,
    };
    Ok((plan, columns))
}

/// The rows an UPDATE or DELETE of `table` changes: read as a query would
/// read them (by an index where that is cheaper), and the whole WHERE
/// kept to check newer versions of rows other transactions changed.
fn change_target(
    cx: &StmtCx,
    db: &Database,
    table: Arc<TableDef>,
    alias: Option<String>,
    wanted: Vec<bool>,
    filters: Vec<Filter>,
) -> Result<ChangeTarget, SqlError> {
    let condition = super::query::and_all(filters.clone())?.map(|f| f.predicate);
    let scan = super::access::table_scan(
        cx,
        db,
        Arc::clone(&table),
        alias,
        wanted,
        filters,
        super::access::ReadFor::Change,
        None,
        1.0,
        None,
    )?
    .node;
    Ok(ChangeTarget {
        table,
        scan,
        condition,
    })
}
