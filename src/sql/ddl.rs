//! DDL and maintenance: CREATE TABLE, DROP TABLE, CREATE INDEX, DROP
//! INDEX, ALTER TABLE (PRIMARY KEY and UNIQUE constraints), VACUUM.
//!
//! CREATE TABLE is transactional (see `catalog`): inside a block the table
//! is the block's until it commits, and a COPY into it in the same block
//! skips the WAL. The indexes of its PRIMARY KEY and UNIQUE constraints
//! are made in the same transaction, so they come and go with the table.
//! DROP TABLE, CREATE INDEX, DROP INDEX, ALTER TABLE and VACUUM run
//! outside transaction blocks
//! only: a drop takes effect at once, an index counts once built, and
//! VACUUM must see the horizon of the whole system, not of a transaction
//! of its own.

use std::sync::Arc;

use sqlparser::ast::{
    self, helpers::stmt_create_table::CreateTableBuilder, AlterTableOperation, ColumnOption,
    CreateTable, CreateTableOptions, Spanned, SqlOption, TableConstraint,
};
use sqlparser::tokenizer::Span;

use super::dml::{locked_table, user_table};
use super::expr::{column_type, constant, ident, object_name, StmtCx};
use super::{SqlError, StatementResult};
use crate::catalog::{ColumnDef, IndexColumn, IndexKind, TableDef};
use crate::database::{Database, Session, StatementSnapshot};
use crate::exec::{self, ExecError, View};
use crate::txn::LockMode;
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

/// A PRIMARY KEY or UNIQUE constraint of CREATE TABLE or ALTER TABLE …
/// ADD: its index's name, if given, kind and key columns.
struct KeyConstraint {
    name: Option<String>,
    kind: IndexKind,
    columns: Vec<ast::Ident>,
}

impl KeyConstraint {
    /// PostgreSQL's word for the constraint in its errors.
    fn what(&self) -> &'static str {
        if self.kind.primary() {
            "primary key constraint"
        } else {
            "unique constraint"
        }
    }

    /// The index columns of `table` the key names, ascending with NULLs
    /// last (a constraint's index takes no sort options).
    fn index_columns(&self, cx: &StmtCx, table: &TableDef) -> Result<Vec<IndexColumn>, SqlError> {
        let mut columns: Vec<IndexColumn> = Vec::with_capacity(self.columns.len());
        for id in &self.columns {
            let name = ident(id);
            let column = table
                .column_index(&name)
                .ok_or_else(|| SqlError::KeyColumn {
                    column: name.clone(),
                    at: cx.at(id.span),
                })?;
            if columns.iter().any(|c| c.column == column) {
                return Err(SqlError::KeyColumnTwice {
                    column: name,
                    constraint: self.what(),
                });
            }
            columns.push(IndexColumn {
                column,
                desc: false,
                nulls_first: false,
            });
        }
        Ok(columns)
    }
}

/// Refuses what a PRIMARY KEY or UNIQUE constraint may carry beyond its
/// columns (MySQL's index names and types, INCLUDE, DEFERRABLE, …).
fn plain_key_constraint(
    cx: &StmtCx,
    span: Span,
    index_name: &Option<ast::Ident>,
    index_type: &Option<ast::IndexType>,
    include: &[ast::Ident],
    index_options: &[ast::IndexOption],
    characteristics: &Option<ast::ConstraintCharacteristics>,
) -> Result<(), SqlError> {
    let refused = if index_name.is_some() || !index_options.is_empty() {
        Some("index names and options in a constraint")
    } else if index_type.is_some() {
        Some("USING in a constraint")
    } else if !include.is_empty() {
        Some("INCLUDE columns")
    } else if characteristics.is_some() {
        Some("DEFERRABLE, INITIALLY and ENFORCED constraint attributes")
    } else {
        None
    };
    match refused {
        Some(what) => Err(cx.unsupported(span, what)),
        None => Ok(()),
    }
}

/// Refuses what a PRIMARY KEY constraint, of a table or of a column, may
/// carry beyond its name and columns.
fn plain_primary_key(
    cx: &StmtCx,
    span: Span,
    p: &ast::PrimaryKeyConstraint,
) -> Result<(), SqlError> {
    plain_key_constraint(
        cx,
        span,
        &p.index_name,
        &p.index_type,
        &p.include,
        &p.index_options,
        &p.characteristics,
    )
}

/// Refuses what a UNIQUE constraint, of a table or of a column, may
/// carry beyond its name and columns (MySQL's `UNIQUE KEY` and NULLS NOT
/// DISTINCT besides what [`plain_primary_key`] refuses).
fn plain_unique(cx: &StmtCx, span: Span, u: &ast::UniqueConstraint) -> Result<(), SqlError> {
    plain_key_constraint(
        cx,
        span,
        &u.index_name,
        &u.index_type,
        &u.include,
        &u.index_options,
        &u.characteristics,
    )?;
    if u.index_type_display != ast::KeyOrIndexDisplay::None {
        return Err(cx.unsupported(span, format!("UNIQUE {}", u.index_type_display)));
    }
    if u.nulls_distinct == ast::NullsDistinctOption::NotDistinct {
        return Err(cx.unsupported(span, "NULLS NOT DISTINCT"));
    }
    Ok(())
}

/// The PRIMARY KEY or UNIQUE constraint `c` (a table constraint, or one
/// ALTER TABLE adds); other kinds are refused.
fn key_constraint(cx: &StmtCx, c: &TableConstraint) -> Result<KeyConstraint, SqlError> {
    let span = c.span();
    let (name, kind, columns) = match c {
        TableConstraint::PrimaryKey(p) => {
            plain_primary_key(cx, span, p)?;
            (&p.name, IndexKind::PrimaryKey, &p.columns)
        }
        TableConstraint::Unique(u) => {
            plain_unique(cx, span, u)?;
            (&u.name, IndexKind::UniqueConstraint, &u.columns)
        }
        TableConstraint::Check(_) => {
            return Err(cx.unsupported_hint(
                span,
                "CHECK constraints",
                "; PRIMARY KEY and UNIQUE are the constraints there are",
            ))
        }
        TableConstraint::ForeignKey(_) => {
            return Err(cx.unsupported_hint(
                span,
                "FOREIGN KEY constraints",
                "; PRIMARY KEY and UNIQUE are the constraints there are",
            ))
        }
        other => {
            return Err(cx.unsupported_hint(
                span,
                format!("the constraint {other}"),
                "; PRIMARY KEY and UNIQUE are the constraints there are",
            ))
        }
    };
    let mut idents = Vec::with_capacity(columns.len());
    for c in columns {
        let ast::Expr::Identifier(id) = &c.column.expr else {
            return Err(cx.unsupported(span, "expressions in a constraint's key"));
        };
        if c.operator_class.is_some()
            || c.column.options.sort.is_some()
            || c.column.options.nulls_first.is_some()
        {
            return Err(cx.unsupported(
                id.span,
                "sort orders and operator classes in a constraint's key",
            ));
        }
        idents.push(id.clone());
    }
    Ok(KeyConstraint {
        name: name.as_ref().map(ident),
        kind,
        columns: idents,
    })
}

/// The indexes CREATE TABLE makes for `constraints`, as PostgreSQL
/// decides them (`transformIndexConstraints`): one primary key at most,
/// first, then the others in order, leaving out one with the same
/// columns as an earlier one (`UNIQUE PRIMARY KEY`, `UNIQUE (a), UNIQUE
/// (a)`), whose name the earlier one takes if it has none.
fn table_indexes(
    table: &str,
    constraints: Vec<KeyConstraint>,
) -> Result<Vec<KeyConstraint>, SqlError> {
    let (mut primary, others): (Vec<_>, Vec<_>) =
        constraints.into_iter().partition(|c| c.kind.primary());
    if primary.len() > 1 {
        return Err(ExecError::MultiplePrimaryKeys {
            table: table.to_string(),
        }
        .into());
    }
    let mut kept = Vec::with_capacity(primary.len() + others.len());
    kept.append(&mut primary);
    for c in others {
        let key: Vec<String> = c.columns.iter().map(ident).collect();
        match kept
            .iter_mut()
            .find(|k| k.columns.iter().map(ident).eq(key.iter().cloned()))
        {
            Some(earlier) => {
                if earlier.name.is_none() {
                    earlier.name = c.name;
                }
            }
            None => kept.push(c),
        }
    }
    Ok(kept)
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
        .constraints(ct.constraints.clone())
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
    let mut constraints = Vec::new();
    for c in &ct.columns {
        let mut not_null = false;
        for option in &c.options {
            let constraint_name = option.name.as_ref().map(ident);
            match &option.option {
                // PostgreSQL 15 takes a NOT NULL constraint's name and
                // keeps none.
                ColumnOption::NotNull => not_null = true,
                ColumnOption::Null => not_null = false,
                ColumnOption::PrimaryKey(p) => {
                    plain_primary_key(cx, c.name.span, p)?;
                    constraints.push(KeyConstraint {
                        name: constraint_name,
                        kind: IndexKind::PrimaryKey,
                        columns: vec![c.name.clone()],
                    });
                }
                ColumnOption::Unique(u) => {
                    plain_unique(cx, c.name.span, u)?;
                    constraints.push(KeyConstraint {
                        name: constraint_name,
                        kind: IndexKind::UniqueConstraint,
                        columns: vec![c.name.clone()],
                    });
                }
                other => {
                    return Err(cx.unsupported_hint(
                        c.name.span,
                        format!("the column option {other}"),
                        "; columns take a type, NOT NULL, PRIMARY KEY and UNIQUE",
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
    for c in &ct.constraints {
        constraints.push(key_constraint(cx, c)?);
    }
    let constraints = table_indexes(&name, constraints)?;
    // A primary key's columns are NOT NULL, as PostgreSQL makes them.
    for key in constraints.iter().filter(|c| c.kind.primary()) {
        for id in &key.columns {
            if let Some(column) = columns.iter_mut().find(|c| c.name == ident(id)) {
                column.not_null = true;
            }
        }
    }
    let fillfactor = fillfactor(cx, &ct.table_options, span)?;
    let db = s.db().clone();
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
    let Some(table) = created else {
        return Ok(StatementResult {
            notices: vec![format!("NOTICE: table \"{name}\" already exists, skipping")],
            ..StatementResult::tag("CREATE TABLE")
        });
    };
    // The transaction owns the table from here: if an index below fails,
    // its end removes the table and the indexes made so far.
    s.created_table(Arc::clone(&table));
    for key in &constraints {
        let spec = exec::index::IndexSpec {
            name: key.name.clone(),
            columns: key.index_columns(cx, &table)?,
            kind: key.kind,
            if_not_exists: false,
            pending: Some(ids),
        };
        exec::index::create_index(s, &table, spec, &mut exec::NoProgress)?;
    }
    Ok(StatementResult::tag("CREATE TABLE"))
}

/// How an index is added to `table` by statement `what` (CREATE INDEX,
/// ALTER TABLE … ADD): outside a transaction block, as a change of its own
/// that counts once built (None); inside one, only to a table this
/// transaction created, as part of it: the index is the table's, written
/// with the statement's ids, and goes with the table if the transaction
/// aborts (the ids returned). Any other table's index would have to stay
/// unseen by others until the commit, which a catalog index cannot yet,
/// so it is refused as PostgreSQL refuses CREATE INDEX CONCURRENTLY in a
/// block.
fn index_ids_for(
    s: &mut Session,
    table: &crate::catalog::TableDef,
    what: &'static str,
) -> Result<Option<(crate::txn::Xid, crate::txn::CommandId)>, SqlError> {
    if s.in_transaction_block() && table.creator().is_some() && table.creator() == s.current_xid() {
        return Ok(Some(s.write_ids()?));
    }
    s.require_no_block(what)?;
    Ok(None)
}

/// `ALTER TABLE [IF EXISTS] [ONLY] t` with one action: `ADD [CONSTRAINT
/// name] PRIMARY KEY (cols)` or `UNIQUE (cols)`, which builds the index
/// over the rows there are, or `DROP CONSTRAINT [IF EXISTS] name`.
pub(crate) fn alter_table(
    cx: &StmtCx,
    s: &mut Session,
    at: &ast::AlterTable,
    progress: &mut dyn exec::Progress,
) -> Result<StatementResult, SqlError> {
    let span = at.name.span();
    if at.table_type.is_some() || at.location.is_some() || at.on_cluster.is_some() {
        return Err(cx.unsupported(span, "this form of ALTER TABLE"));
    }
    let [operation] = at.operations.as_slice() else {
        return Err(cx.unsupported_hint(
            span,
            "more than one ALTER TABLE action in a statement",
            "; give each action its own ALTER TABLE",
        ));
    };
    let db = s.db().clone();
    let name = object_name(cx, &at.name)?;
    let table = match user_table(cx, &db, &name) {
        Ok(table) => table,
        Err(SqlError::UnknownTable { .. }) if at.if_exists => {
            return Ok(StatementResult {
                notices: vec![format!(
                    "NOTICE: relation \"{name}\" does not exist, skipping"
                )],
                ..StatementResult::tag("ALTER TABLE")
            })
        }
        Err(e) => return Err(e),
    };
    // Only an added key may be part of a block (of its table's creator).
    let pending = match operation {
        AlterTableOperation::AddConstraint { .. } => index_ids_for(s, &table, "ALTER TABLE")?,
        _ => {
            s.require_no_block("ALTER TABLE")?;
            None
        }
    };
    let mut result = StatementResult::tag("ALTER TABLE");
    match operation {
        AlterTableOperation::AddConstraint {
            constraint,
            not_valid,
        } => {
            if *not_valid {
                return Err(cx.unsupported(constraint.span(), "NOT VALID"));
            }
            let key = key_constraint(cx, constraint)?;
            let spec = exec::index::IndexSpec {
                name: key.name.clone(),
                columns: key.index_columns(cx, &table)?,
                kind: key.kind,
                if_not_exists: false,
                pending,
            };
            exec::index::create_index(s, &table, spec, progress)?;
        }
        AlterTableOperation::DropConstraint {
            if_exists,
            name: constraint,
            drop_behavior,
        } => {
            if drop_behavior == &Some(ast::DropBehavior::Cascade) {
                return Err(cx.unsupported(constraint.span, "DROP CONSTRAINT … CASCADE"));
            }
            let constraint = ident(constraint);
            if !exec::index::drop_constraint(s, &table, &constraint, *if_exists)? {
                result.notices.push(format!(
                    "NOTICE: constraint \"{constraint}\" of relation \"{name}\" does not exist, skipping"
                ));
            }
        }
        other => {
            let text = other.to_string();
            let action: Vec<&str> = text
                .split_whitespace()
                .take_while(|w| w.chars().all(|c| c.is_ascii_uppercase()))
                .take(2)
                .collect();
            return Err(cx.unsupported_hint(
                span,
                format!("ALTER TABLE … {}", action.join(" ")),
                "; ALTER TABLE can ADD [CONSTRAINT name] PRIMARY KEY or UNIQUE (columns) and DROP CONSTRAINT name",
            ));
        }
    }
    Ok(result)
}

/// DROP TABLE's and DROP INDEX's course: every name is looked at first by
/// `check` (a missing one, unless IF EXISTS was given, or one refused
/// drops nothing), then each is dropped by `drop_one`, which says false
/// for one that was not there.
pub(super) fn drop_each(
    cx: &StmtCx,
    s: &mut Session,
    names: &[ast::ObjectName],
    (tag, noun): (&'static str, &str),
    check: impl Fn(&Database, &str) -> Result<(), SqlError>,
    drop_one: impl Fn(&mut Session, &Database, &str) -> Result<bool, SqlError>,
) -> Result<StatementResult, SqlError> {
    s.require_no_block(tag)?;
    let db = s.db().clone();
    let mut checked = Vec::with_capacity(names.len());
    for name in names {
        let name = object_name(cx, name)?;
        check(&db, &name)?;
        checked.push(name);
    }
    let mut result = StatementResult::tag(tag);
    for name in checked {
        if !drop_one(s, &db, &name)? {
            result.notices.push(format!(
                "NOTICE: {noun} \"{name}\" does not exist, skipping"
            ));
        }
    }
    Ok(result)
}

pub(crate) fn drop_tables(
    cx: &StmtCx,
    s: &mut Session,
    names: &[ast::ObjectName],
    if_exists: bool,
) -> Result<StatementResult, SqlError> {
    drop_each(
        cx,
        s,
        names,
        ("DROP TABLE", "table"),
        |db, name| match user_table(cx, db, name) {
            Err(SqlError::UnknownTable { .. }) if if_exists => Ok(()),
            found => found.map(drop),
        },
        |s, _, name| {
            let def = match locked_table(cx, s, name, LockMode::AccessExclusive) {
                Err(SqlError::UnknownTable { .. }) if if_exists => return Ok(false),
                found => found?,
            };
            exec::drop_table(s, &def)?;
            Ok(true)
        },
    )
}

pub(crate) fn vacuum(
    cx: &StmtCx,
    s: &mut Session,
    table: Option<&ast::ObjectName>,
    progress: &mut dyn exec::Progress,
) -> Result<StatementResult, SqlError> {
    s.require_no_block("VACUUM")?;
    let db = s.db().clone();
    let tables = match table {
        Some(name) => vec![locked_table(
            cx,
            s,
            &object_name(cx, name)?,
            LockMode::ShareUpdateExclusive,
        )?],
        None => db.catalog().tables(),
    };
    let reports = exec::vacuum(s, &tables, progress)?;
    let notices = reports
        .iter()
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

/// `ANALYZE [t]`: samples the table (every table the statement sees,
/// without one) and stores its statistics for the planner.
pub(crate) fn analyze(
    cx: &StmtCx,
    s: &mut Session,
    snapshot: &crate::txn::Snapshot,
    table: Option<&ast::ObjectName>,
    progress: &mut dyn exec::Progress,
) -> Result<StatementResult, SqlError> {
    let db = s.db().clone();
    let tables = match table {
        Some(name) => vec![user_table(cx, &db, &object_name(cx, name)?)?],
        None => db.catalog().tables_for(cx.viewer),
    };
    let reports = exec::analyze::analyze(s, snapshot, &tables, cx.now, progress)?;
    let notices = tables
        .iter()
        .zip(&reports)
        .map(|(t, r)| {
            format!(
                "INFO: \"{}\": scanned {} of {} pages, containing {} live rows; {} rows in sample, {} estimated total rows",
                t.name(),
                r.pages_sampled,
                r.pages,
                r.live_rows_seen,
                r.sample_rows,
                r.rows
            )
        })
        .collect();
    Ok(StatementResult {
        notices,
        ..StatementResult::tag("ANALYZE")
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
    let db = s.db().clone();
    let table_name = object_name(cx, &ci.table_name)?;
    let table = user_table(cx, &db, &table_name)?;
    let pending = index_ids_for(s, &table, "CREATE INDEX")?;
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
        columns.push(IndexColumn {
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
        kind: if ci.unique {
            IndexKind::Unique
        } else {
            IndexKind::Plain
        },
        if_not_exists: ci.if_not_exists,
        pending,
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
    drop_each(
        cx,
        s,
        names,
        ("DROP INDEX", "index"),
        // Refuses a constraint's index too.
        |db, name| Ok(exec::index::index_to_drop(db, name, if_exists).map(drop)?),
        |s, _, name| Ok(exec::index::drop_index(s, name, if_exists)?),
    )
}
