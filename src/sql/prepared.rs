//! Prepared statements, for the extended query protocol: a statement is
//! parsed and described once (its parameters' types and its result's
//! columns), then run any number of times with values for its `$n`
//! parameters.
//!
//! A run plans the statement again with its values bound, as PostgreSQL
//! plans a statement with custom plans: each run is planned for the
//! values it has, and a table dropped and created again in between is
//! simply found again. Planning is cheap next to a run's I/O here, and
//! there is no plan cache to invalidate.

use std::sync::Arc;

use sqlparser::ast::Statement;

use super::commands::{
    plan_statement, run_with, statement_cx, SHOW_ALL_COLUMNS, TRANSACTION_ISOLATION,
};
use super::expr::{ident, Placeholders};
use super::parse::{self, Parsed, Stmt};
use super::{ResultColumn, SqlError, StatementIo, StatementResult};
use crate::database::Session;
use crate::types::{ColumnType, Value};

/// A statement parsed and described, ready to run with its parameters.
pub struct Prepared {
    parsed: Parsed,
    /// The type of each parameter (`$1` first): as the client gave it,
    /// else as its context in the statement implies, else text.
    pub param_types: Vec<ColumnType>,
    /// The result's columns if the statement returns rows (SELECT, SHOW,
    /// EXPLAIN), else empty.
    pub columns: Vec<ResultColumn>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("param_types", &self.param_types)
            .field("columns", &self.columns)
            .finish_non_exhaustive()
    }
}

/// Parses and describes `text`, one statement (or none: `Ok(None)`, an
/// empty query), whose parameters have the types in `declared` where
/// they are `Some` (a client may give some or none).
///
/// Describing plans the statement without running it, so it reports
/// what planning would: an unknown table or column, a type mismatch.
pub fn prepare(
    s: &mut Session,
    text: &str,
    declared: &[Option<ColumnType>],
) -> Result<Option<Prepared>, SqlError> {
    let mut statements = parse::parse(text)?;
    if statements.len() > 1 {
        return Err(SqlError::MultipleCommands);
    }
    let Some(parsed) = statements.pop() else {
        return Ok(None);
    };
    let placeholders = Placeholders::preparing(declared.to_vec());
    let cx = statement_cx(s, &parsed, placeholders);
    let db = Arc::clone(s.db());
    let columns = parse::with_stack_for_depth(parsed.depth, || match &parsed.statement {
        Stmt::Ast(st) => match &**st {
            Statement::Query(_)
            | Statement::Insert(_)
            | Statement::Update(_)
            | Statement::Delete(_) => plan_statement(&cx, &db, st).map(|(_, columns)| columns),
            Statement::ShowVariable { variable } => Ok(show_columns(variable)),
            Statement::Explain { .. } => Ok(vec![text_column("QUERY PLAN")]),
            _ => Ok(Vec::new()),
        },
        Stmt::Checkpoint | Stmt::VacuumAnalyze(_) => Ok(Vec::new()),
    })?;
    let param_types = cx.placeholders.resolved_types();
    Ok(Some(Prepared {
        parsed,
        param_types,
        columns,
    }))
}

/// Runs `prepared` with `values` for its parameters (one per parameter,
/// of its type; [`Value::Null`] for NULL), in session `s`, as
/// [`super::execute_each`] runs a statement.
pub fn execute_prepared(
    s: &mut Session,
    prepared: &Prepared,
    values: Vec<Value>,
    io: &mut StatementIo,
) -> Result<StatementResult, SqlError> {
    if values.len() != prepared.param_types.len() {
        return Err(SqlError::ParameterCount {
            given: values.len(),
            expected: prepared.param_types.len(),
        });
    }
    let placeholders = Placeholders::bound(prepared.param_types.clone(), values);
    parse::with_stack_for_depth(prepared.parsed.depth, || {
        run_with(s, &prepared.parsed, io, placeholders)
    })
}

fn text_column(name: &str) -> ResultColumn {
    ResultColumn {
        name: name.into(),
        ty: ColumnType::Text,
    }
}

/// The columns `SHOW` returns: the setting's value under its name, or
/// for `SHOW ALL` a row per setting.
fn show_columns(variable: &[sqlparser::ast::Ident]) -> Vec<ResultColumn> {
    let words: Vec<String> = variable.iter().map(ident).collect();
    if words == ["transaction", "isolation", "level"] {
        return vec![text_column(TRANSACTION_ISOLATION)];
    }
    match words.as_slice() {
        [all] if all == "all" => SHOW_ALL_COLUMNS.into_iter().map(text_column).collect(),
        [name] => vec![text_column(name)],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::database::test_session as session;
    use crate::sql::execute;

    #[test]
    fn parameters_take_their_types_from_context_and_run_with_values() {
        let (mut s, _dir) = session();
        execute(
            &mut s,
            "CREATE TABLE t (id integer, note varchar(10), at date);
             INSERT INTO t VALUES (1, 'a', '2024-01-01'), (2, 'b', NULL)",
        )
        .unwrap();
        let p = prepare(
            &mut s,
            "SELECT id, note FROM t WHERE id = $1 AND note <> $2",
            &[],
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            p.param_types,
            [ColumnType::Integer, ColumnType::Varchar(None)]
        );
        assert_eq!(
            p.columns
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>(),
            ["id", "note"]
        );
        let values = vec![Value::Integer(2), Value::Text("x".into())];
        let r = execute_prepared(&mut s, &p, values, &mut StatementIo::default()).unwrap();
        assert_eq!(r.rows, [vec![Value::Integer(2), Value::Text("b".into())]]);

        // An INSERT's parameters take the columns' types; one nothing
        // constrains is text; a type the client gives is kept.
        let p = prepare(&mut s, "INSERT INTO t VALUES ($1, $2, $3)", &[])
            .unwrap()
            .unwrap();
        assert_eq!(
            p.param_types,
            [
                ColumnType::Integer,
                ColumnType::Varchar(None),
                ColumnType::Date
            ]
        );
        assert!(p.columns.is_empty());
        // An operand of unknown type takes its IN list's or its bounds'.
        let p = prepare(
            &mut s,
            "SELECT id FROM t WHERE $1 IN (id, 3) AND $2 BETWEEN id AND 5 AND id BETWEEN $3 AND $4",
            &[],
        )
        .unwrap()
        .unwrap();
        assert_eq!(p.param_types, [ColumnType::Integer; 4]);
        let p = prepare(&mut s, "SELECT $1, $2", &[Some(ColumnType::BigInt)])
            .unwrap()
            .unwrap();
        assert_eq!(p.param_types, [ColumnType::BigInt, ColumnType::Text]);
        let r = execute_prepared(
            &mut s,
            &p,
            vec![Value::BigInt(7), Value::Null],
            &mut StatementIo::default(),
        )
        .unwrap();
        assert_eq!(r.rows, [vec![Value::BigInt(7), Value::Null]]);
    }

    #[test]
    fn a_prepared_statement_is_one_statement_with_its_parameters() {
        let (mut s, _dir) = session();
        let e = prepare(&mut s, "SELECT 1; SELECT 2", &[]).unwrap_err();
        assert!(matches!(e, SqlError::MultipleCommands), "{e}");
        assert!(prepare(&mut s, " ; ", &[]).unwrap().is_none());
        let p = prepare(&mut s, "SELECT $2::integer", &[]).unwrap().unwrap();
        assert_eq!(p.param_types, [ColumnType::Text, ColumnType::Integer]);
        let e = execute_prepared(&mut s, &p, vec![Value::Null], &mut StatementIo::default())
            .unwrap_err();
        assert!(
            matches!(
                e,
                SqlError::ParameterCount {
                    given: 1,
                    expected: 2
                }
            ),
            "{e}"
        );
        let e = prepare(&mut s, "SELECT * FROM missing WHERE a = $1", &[]).unwrap_err();
        assert!(matches!(e, SqlError::UnknownTable { .. }), "{e}");
    }
}
