//! DDL and maintenance: CREATE TABLE, DROP TABLE, CREATE INDEX, DROP
//! INDEX, VACUUM.
//!
//! CREATE TABLE is transactional (see `catalog`): inside a block the table
//! is the block's until it commits, and a COPY into it in the same block
//! skips the WAL. DROP TABLE, CREATE INDEX, DROP INDEX and VACUUM run
//! outside transaction blocks
//! only: a drop takes effect at once, and VACUUM must see the horizon of
//! the whole system, not of a transaction of its own.

use std::sync::Arc;

use sqlparser::ast::{
    self, helpers::stmt_create_table::CreateTableBuilder, ColumnOption, CreateTable,
    CreateTableOptions, Spanned, SqlOption,
};
use sqlparser::tokenizer::Span;

use super::dml::user_table;
use super::expr::{column_type, constant, ident, object_name, StmtCx};
use super::{SqlError, StatementResult};
use crate::catalog::ColumnDef;
use crate::database::{Session, StatementSnapshot};
use crate::exec::{self, View};
use crate::types::Value;

/// Fill factor of a table created without one.
const DEFAULT_FILLFACTOR: u8 = 100;
const MIN_FILLFACTOR: i32 = 10;

/// What makes `ct` more than `CREATE TABLE [IF NOT EXISTS] t (…) [WITH (…)]`.
fn create_table_extra(ct: &CreateTable) -> &'static str {
    if ct.or_replace {
        "CREATE OR REPLACE TABLE"
    } else if ct.temporary {
        "TEMPORARY tables"
    } else if ct.unlogged {
        "UNLOGGED tables"
    } else if ct.query.is_some() {
        "CREATE TABLE … AS"
    } else if ct.like.is_some() {
        "CREATE TABLE … LIKE"
    } else if !ct.constraints.is_empty() {
        "table constraints (PRIMARY KEY, UNIQUE, CHECK, FOREIGN KEY)"
    } else if ct.partition_by.is_some() {
        "PARTITION BY"
    } else if ct.inherits.is_some() {
        "INHERITS"
    } else if ct.on_commit.is_some() {
        "ON COMMIT"
    } else {
        "this form of CREATE TABLE"
    }
}

fn fillfactor(cx: &StmtCx, options: &CreateTableOptions, span: Span) -> Result<u8, SqlError> {
    let list = match options {
        CreateTableOptions::None => return Ok(DEFAULT_FILLFACTOR),
        CreateTableOptions::With(list) => list,
        _ => {
            return Err(cx.unsupported_hint(
                span,
                "these table options",
                "; use WITH (fillfactor = n)",
            ))
        }
    };
    let mut fillfactor = DEFAULT_FILLFACTOR;
    for option in list {
        match option {
            SqlOption::KeyValue { key, value } if ident(key) == "fillfactor" => {
                fillfactor = match constant(value) {
                    Some(Value::Integer(n))
                        if (MIN_FILLFACTOR..=i32::from(DEFAULT_FILLFACTOR)).contains(&n) =>
                    {
                        u8::try_from(n).unwrap_or(DEFAULT_FILLFACTOR)
                    }
                    _ => {
                        return Err(SqlError::Fillfactor {
                            value: value.to_string(),
                        })
                    }
                };
            }
            other => {
                return Err(cx.unsupported_hint(
                    span,
                    format!("the table option {other}"),
                    "; only fillfactor is supported",
                ))
            }
        }
    }
    Ok(fillfactor)
}

pub(crate) fn create_table(
    cx: &StmtCx,
    s: &mut Session,
    snapshot: &mut StatementSnapshot,
    ct: &CreateTable,
) -> Result<StatementResult, SqlError> {
    let span = ct.name.span();
    let canonical = CreateTableBuilder::new(ct.name.clone())
        .if_not_exists(ct.if_not_exists)
        .columns(ct.columns.clone())
        .table_options(ct.table_options.clone())
        .build();
    if canonical != *ct {
        return Err(cx.unsupported(span, create_table_extra(ct)));
    }
    let name = object_name(cx, &ct.name)?;
    if View::by_name(&name).is_some() {
        return Err(SqlError::ReadOnlyView { name });
    }
    let mut columns = Vec::with_capacity(ct.columns.len());
    for c in &ct.columns {
        let mut not_null = false;
        for option in &c.options {
            if option.name.is_some() {
                return Err(cx.unsupported(c.name.span, "named column constraints"));
            }
            match &option.option {
                ColumnOption::NotNull => not_null = true,
                ColumnOption::Null => not_null = false,
                other => {
                    return Err(cx.unsupported_hint(
                        c.name.span,
                        format!("the column option {other}"),
                        "; columns take a type and NOT NULL",
                    ))
                }
            }
        }
        columns.push(ColumnDef {
            name: ident(&c.name),
            ty: column_type(&c.data_type)?,
            not_null,
        });
    }
    let fillfactor = fillfactor(cx, &ct.table_options, span)?;
    let db = Arc::clone(s.db());
    let ids = s.xid(snapshot)?;
    let created = db.catalog().create_table(
        &mut s.buf,
        db.heap(),
        &name,
        columns,
        fillfactor,
        ct.if_not_exists,
        ids,
    )?;
    let done = created.is_some();
    if let Some(def) = created {
        s.created_table(def);
    }
    Ok(if done {
        StatementResult::tag("CREATE TABLE")
    } else {
        StatementResult {
            notices: vec![format!("NOTICE: table \"{name}\" already exists, skipping")],
            ..StatementResult::tag("CREATE TABLE")
        }
    })
}

pub(crate) fn drop_tables(
    cx: &StmtCx,
    s: &mut Session,
    names: &[ast::ObjectName],
    if_exists: bool,
) -> Result<StatementResult, SqlError> {
    s.require_no_block("DROP TABLE")?;
    let db = Arc::clone(s.db());
    let mut tables = Vec::with_capacity(names.len());
    // Every name first: a missing one drops nothing.
    for name in names {
        let name = object_name(cx, name)?;
        if let Err(e) = user_table(cx, &db, &name) {
            if !(if_exists && matches!(e, SqlError::UnknownTable { .. })) {
                return Err(e);
            }
        }
        tables.push(name);
    }
    let mut result = StatementResult::tag("DROP TABLE");
    for name in tables {
        if !db
            .catalog()
            .drop_table(&mut s.buf, db.heap(), &name, if_exists)?
        {
            result
                .notices
                .push(format!("NOTICE: table \"{name}\" does not exist, skipping"));
        }
    }
    Ok(result)
}

pub(crate) fn vacuum(
    cx: &StmtCx,
    s: &mut Session,
    table: Option<&ast::ObjectName>,
    progress: &mut dyn exec::Progress,
) -> Result<StatementResult, SqlError> {
    s.require_no_block("VACUUM")?;
    let db = Arc::clone(s.db());
    let tables = match table {
        Some(name) => vec![user_table(cx, &db, &object_name(cx, name)?)?],
        None => db.catalog().tables(),
    };
    let reports = exec::vacuum(s, &tables, progress)?;
    let notices = tables
        .iter()
        .zip(&reports)
        .map(|(t, r)| {
            format!(
                "INFO: table \"{}\": {} pages ({} skipped as all-visible, {} set all-visible, {} empty pages cut off the end), {} dead rows removed, {} kept",
                t.name(),
                r.pages,
                r.pages_skipped,
                r.pages_set_all_visible,
                r.pages_truncated,
                r.tuples_removed,
                r.tuples_kept
            )
        })
        .collect();
    Ok(StatementResult {
        notices,
        ..StatementResult::tag("VACUUM")
    })
}

/// `CREATE [UNIQUE] INDEX [IF NOT EXISTS] [name] ON t [USING btree]
/// (col [ASC | DESC] [NULLS FIRST | LAST], …)`.
pub(crate) fn create_index(
    cx: &StmtCx,
    s: &mut Session,
    ci: &ast::CreateIndex,
    progress: &mut dyn exec::Progress,
) -> Result<StatementResult, SqlError> {
    let span = Span::empty();
    let refuse = |what: &str| Err(cx.unsupported(span, what.to_string()));
    if ci.concurrently {
        return refuse("CREATE INDEX CONCURRENTLY");
    }
    if !ci.include.is_empty() {
        return refuse("INCLUDE columns");
    }
    if ci.predicate.is_some() {
        return refuse("partial indexes (CREATE INDEX … WHERE)");
    }
    if !ci.with.is_empty() || !ci.index_options.is_empty() || !ci.alter_options.is_empty() {
        return refuse("index options");
    }
    if ci.nulls_distinct == Some(false) {
        return refuse("NULLS NOT DISTINCT");
    }
    if ci.r#async {
        return refuse("CREATE INDEX ASYNC");
    }
    match &ci.using {
        None | Some(ast::IndexType::BTree) => {}
        Some(other) => return refuse(&format!("index access method {other}; only btree exists")),
    }
    s.require_no_block("CREATE INDEX")?;
    let db = Arc::clone(s.db());
    let table_name = object_name(cx, &ci.table_name)?;
    let table = user_table(cx, &db, &table_name)?;
    let mut columns = Vec::with_capacity(ci.columns.len());
    for c in &ci.columns {
        if c.operator_class.is_some() {
            return refuse("operator classes");
        }
        let ast::Expr::Identifier(id) = &c.column.expr else {
            return refuse("indexes on expressions");
        };
        let name = ident(id);
        let column = table
            .column_index(&name)
            .ok_or_else(|| SqlError::UnknownColumn {
                column: name.clone(),
                relation: format!("table \"{}\"", table.name()),
                at: cx.at(id.span),
            })?;
        let desc = match &c.column.options.sort {
            None | Some(ast::OrderBySort::Asc) => false,
            Some(ast::OrderBySort::Desc) => true,
            Some(ast::OrderBySort::Using(_)) => return refuse("USING an operator in an index"),
        };
        columns.push(crate::catalog::IndexColumn {
            column,
            desc,
            // PostgreSQL's default: NULLs sort as larger than any value,
            // so first in a descending column.
            nulls_first: c.column.options.nulls_first.unwrap_or(desc),
        });
    }
    let name = ci.name.as_ref().map(|n| object_name(cx, n)).transpose()?;
    let spec = exec::index::IndexSpec {
        name,
        columns,
        unique: ci.unique,
        primary: false,
        if_not_exists: ci.if_not_exists,
    };
    let mut result = StatementResult::tag("CREATE INDEX");
    let wanted = spec.name.clone();
    if exec::index::create_index(s, &table, spec, progress)?.is_none() {
        result.notices.push(format!(
            "NOTICE: relation \"{}\" already exists, skipping",
            wanted.unwrap_or_default()
        ));
    }
    Ok(result)
}

/// `DROP INDEX [IF EXISTS] name, …`.
pub(crate) fn drop_indexes(
    cx: &StmtCx,
    s: &mut Session,
    names: &[ast::ObjectName],
    if_exists: bool,
) -> Result<StatementResult, SqlError> {
    s.require_no_block("DROP INDEX")?;
    let db = Arc::clone(s.db());
    let mut indexes = Vec::with_capacity(names.len());
    // Every name first: a missing one drops nothing.
    for name in names {
        let name = object_name(cx, name)?;
        if db.catalog().index(&name).is_err() && !if_exists {
            return Err(SqlError::UnknownIndex { name });
        }
        indexes.push(name);
    }
    let mut result = StatementResult::tag("DROP INDEX");
    for name in indexes {
        if !exec::index::drop_index(s, &name, if_exists)? {
            result
                .notices
                .push(format!("NOTICE: index \"{name}\" does not exist, skipping"));
        }
    }
    Ok(result)
}
