//! EXPLAIN: options, and planning (and for ANALYZE running) the
//! statement to explain.

use std::time::{Duration, Instant};

use sqlparser::ast::{self, Spanned, Statement};

use super::commands::plan_statement;
use super::expr::{constant, string_literal, StmtCx};
use super::{ResultColumn, SqlError, StatementResult};
use crate::database::{Session, StatementSnapshot};
use crate::exec::{self, ExplainOptions, Timing};
use crate::types::{ColumnType, Value};
use crate::wal::{wal_usage, WalUsage};

/// A boolean option value: none (on), on/off, true/false, 1/0.
fn option_flag(e: Option<&ast::Expr>) -> Option<bool> {
    let Some(e) = e else { return Some(true) };
    match constant(e) {
        Some(Value::Boolean(b)) => return Some(b),
        Some(Value::Integer(n)) if n == 0 || n == 1 => return Some(n == 1),
        _ => {}
    }
    let word = match e {
        ast::Expr::Identifier(i) => i.value.to_lowercase(),
        ast::Expr::Value(v) => string_literal(&v.value)?.to_lowercase(),
        _ => return None,
    };
    match word.as_str() {
        "on" | "true" => Some(true),
        "off" | "false" => Some(false),
        _ => None,
    }
}

pub(crate) fn explain_options(
    cx: &StmtCx,
    statement: &Statement,
    analyze: bool,
    options: &[ast::UtilityOption],
) -> Result<ExplainOptions, SqlError> {
    let mut analyze = analyze;
    let (mut buffers, mut summary, mut io, mut wal) = (None, None, false, false);
    let mut costs = true;
    for option in options {
        let name = option.name.value.to_lowercase();
        if name == "format" {
            let text = matches!(&option.arg, Some(ast::Expr::Identifier(i)) if i.value.eq_ignore_ascii_case("text"));
            if !text {
                return Err(cx.unsupported_hint(
                    statement.span(),
                    "EXPLAIN formats other than TEXT",
                    "; use FORMAT TEXT",
                ));
            }
            continue;
        }
        let on = option_flag(option.arg.as_ref()).ok_or_else(|| {
            SqlError::Explain(format!(
                "EXPLAIN option {} takes on or off, not {}",
                name.to_uppercase(),
                option
                    .arg
                    .as_ref()
                    .map_or(String::new(), ToString::to_string)
            ))
        })?;
        match name.as_str() {
            "analyze" => analyze = on,
            "buffers" => buffers = Some(on),
            "io" => io = on,
            "wal" => wal = on,
            "summary" => summary = Some(on),
            "costs" => costs = on,
            // There is no per-node timing to switch off: ANALYZE shows
            // what PostgreSQL's TIMING OFF shows.
            "timing" => {}
            "verbose" if !on => {}
            "verbose" => return Err(cx.unsupported(statement.span(), "EXPLAIN VERBOSE")),
            other => {
                return Err(SqlError::Explain(format!(
                    "unrecognized EXPLAIN option \"{other}\"; the options are ANALYZE, BUFFERS, IO, WAL, SUMMARY, COSTS, TIMING, FORMAT TEXT"
                )))
            }
        }
    }
    for (on, name) in [(io, "IO"), (wal, "WAL")] {
        if on && !analyze {
            return Err(SqlError::ExplainNeedsAnalyze { option: name });
        }
    }
    Ok(ExplainOptions {
        analyze,
        // As PostgreSQL 18: ANALYZE shows buffers unless told not to.
        buffers: buffers.unwrap_or(analyze),
        io,
        wal,
        summary: summary.unwrap_or(analyze),
        costs,
    })
}

/// Plans `inner` and, for ANALYZE, runs it; the rows it returns are
/// counted, and appended to `rows` if given ([`super::StatementIo::explained_rows`]).
pub(crate) fn explain(
    cx: &StmtCx,
    s: &mut Session,
    snapshot: &mut StatementSnapshot,
    inner: &Statement,
    opts: &ExplainOptions,
    rows: Option<&mut Vec<Vec<Value>>>,
) -> Result<StatementResult, SqlError> {
    let db = s.db().clone();
    let planning_started = Instant::now();
    let (mut plan, _) = plan_statement(cx, &db, inner)?;
    let planning = planning_started.elapsed();
    let mut execution = Duration::ZERO;
    let mut wal = WalUsage::default();
    if opts.analyze {
        let started = Instant::now();
        let wal_before = wal_usage();
        // Unless asked for, the rows are only counted: an EXPLAIN ANALYZE
        // of any size runs in bounded memory.
        match rows {
            None => {
                exec::execute(&mut plan, s, snapshot, exec::Rows::Discard)?;
            }
            Some(rows) => {
                let outcome = exec::execute(&mut plan, s, snapshot, exec::Rows::Collect)?;
                rows.extend(outcome.rows);
            }
        }
        execution = started.elapsed();
        wal = wal_usage().since(&wal_before);
    }
    let lines = exec::explain(
        &plan,
        opts,
        Timing {
            planning,
            execution,
            wal,
        },
    );
    Ok(StatementResult {
        tag: "EXPLAIN".into(),
        columns: vec![ResultColumn {
            name: "QUERY PLAN".into(),
            ty: ColumnType::Text,
        }],
        rows: lines.into_iter().map(|l| vec![Value::Text(l)]).collect(),
        ..Default::default()
    })
}
