//! A query's locking clauses (`FOR UPDATE`, `FOR NO KEY UPDATE`, `FOR
//! SHARE`, `FOR KEY SHARE`, each `[OF name, …] [NOWAIT | SKIP LOCKED]`):
//! which FROM item's rows they lock, in which mode, and what PostgreSQL
//! refuses (`transformLockingClause`, `CheckSelectLocking`).
//!
//! Without `OF` a clause locks the rows of every table of the FROM
//! clause; generate_series, utilities and system views have none and are
//! passed over, as PostgreSQL passes over functions. With `OF` each name
//! must be a FROM item, and a table. Several clauses on one table take
//! the strongest mode, and the strongest wait policy (`NOWAIT` over `SKIP
//! LOCKED` over waiting), as PostgreSQL's `applyLockingClause`.
//! **Departure:** rows are locked for one table at a time: a query whose
//! clauses reach a table of a join (or of a subquery in FROM) is refused
//! (0A000); its newer versions would need the join rechecked
//! (PostgreSQL's EvalPlanQual of joins). A locking clause inside the
//! subquery works (`FROM (SELECT … FOR UPDATE) s JOIN …`).

use std::sync::Arc;

use sqlparser::ast::{self, NonBlock, ObjectNamePart, Spanned};

use super::super::expr::{ident, Scope, StmtCx};
use super::super::parse::{KEY_SHARE_MARK, NO_KEY_UPDATE_MARK};
use super::super::SqlError;
use super::FromItem;
use crate::catalog::TableDef;
use crate::exec::Expr;
use crate::heap::LockWait;
use crate::txn::RowLockMode;

/// One locking clause of a query, for one name of its `OF` list (the
/// parser made a clause per name) or for every table.
pub(super) struct LockRequest {
    pub mode: RowLockMode,
    pub wait: LockWait,
    /// The FROM item it names (`OF t`), if it names one.
    pub of: Option<String>,
}

/// The query's locking clauses, read back from what `sqlparser` parsed
/// (the strengths it does not know carry a mark as their name's first
/// part: `parse::rewrite_locking_clauses`).
pub(super) fn lock_requests(cx: &StmtCx, q: &ast::Query) -> Result<Vec<LockRequest>, SqlError> {
    let mut requests = Vec::with_capacity(q.locks.len());
    for lock in &q.locks {
        let (mode, parts) = strength(lock);
        let of = match parts {
            [] => None,
            [ObjectNamePart::Identifier(name)] => Some(ident(name)),
            [ObjectNamePart::Identifier(_), ..] => {
                return Err(SqlError::LockingQualifiedName {
                    clause: mode.clause(),
                })
            }
            _ => {
                return Err(
                    cx.unsupported(q.span(), format!("this name in a {} clause", mode.clause()))
                )
            }
        };
        let wait = match lock.nonblock {
            None => LockWait::Block,
            Some(NonBlock::Nowait) => LockWait::NoWait,
            Some(NonBlock::SkipLocked) => LockWait::SkipLocked,
        };
        requests.push(LockRequest { mode, wait, of });
    }
    Ok(requests)
}

/// The strength a clause asks for, and the parts of its `OF` name (the
/// mark of a strength `sqlparser` does not know taken off).
fn strength(lock: &ast::LockClause) -> (RowLockMode, &[ObjectNamePart]) {
    let mode = match lock.lock_type {
        ast::LockType::Update => RowLockMode::Update,
        ast::LockType::Share => RowLockMode::Share,
    };
    let parts: &[ObjectNamePart] = lock.of.as_ref().map_or(&[], |n| n.0.as_slice());
    if let [ObjectNamePart::Identifier(first), rest @ ..] = parts {
        if first.quote_style.is_some() {
            match first.value.as_str() {
                KEY_SHARE_MARK => return (RowLockMode::KeyShare, rest),
                NO_KEY_UPDATE_MARK => return (RowLockMode::NoKeyUpdate, rest),
                _ => {}
            }
        }
    }
    (mode, parts)
}

/// The clause a parsed locking clause spells (`FOR KEY SHARE`), for
/// messages.
pub(crate) fn clause_name(lock: &ast::LockClause) -> &'static str {
    strength(lock).0.clause()
}

/// Refuses a locking clause on a SELECT whose rows are no table's rows:
/// grouped, with HAVING, or with aggregates (PostgreSQL's checks, in its
/// order; DISTINCT and set operations are refused before planning).
pub(super) fn check_locking(
    requests: &[LockRequest],
    grouped: bool,
    having: bool,
    aggregates: bool,
) -> Result<(), SqlError> {
    let Some(first) = requests.first() else {
        return Ok(());
    };
    let with = if grouped {
        "GROUP BY clause"
    } else if having {
        "HAVING clause"
    } else if aggregates {
        "aggregate functions"
    } else {
        return Ok(());
    };
    Err(SqlError::LockingNotAllowed {
        clause: first.mode.clause(),
        with,
    })
}

/// What a query's LockRows node locks: the table, in which mode and how
/// it waits, and how it checks and makes a row from a newer version of
/// one (the query's WHERE and its projection, over a row of the table).
pub(super) struct LockRows {
    pub table: Arc<TableDef>,
    pub mode: RowLockMode,
    pub wait: LockWait,
    pub condition: Option<Expr>,
    pub outputs: Vec<Expr>,
}

/// The FROM item whose rows `requests` lock, with the strongest mode and
/// wait policy asked of it: None if they lock nothing (no clause, or no
/// table in FROM). `span` is the query's, for the refusals.
pub(super) fn lock_target(
    cx: &StmtCx,
    span: sqlparser::tokenizer::Span,
    requests: &[LockRequest],
    items: &[FromItem],
    scope: &Scope,
) -> Result<Option<(usize, RowLockMode, LockWait)>, SqlError> {
    let mut targets: Vec<(usize, RowLockMode, LockWait)> = Vec::new();
    for request in requests {
        let clause = request.mode.clause();
        let named = match &request.of {
            Some(name) => {
                let Some(at) = scope.item(name) else {
                    return Err(SqlError::LockingTargetMissing {
                        clause,
                        name: name.clone(),
                    });
                };
                vec![at]
            }
            None => (0..items.len()).collect(),
        };
        for at in named {
            match &items[at] {
                FromItem::Table(..) => {}
                FromItem::Subquery { alias, .. } => {
                    return Err(cx.unsupported_hint(
                        span,
                        format!("{clause} of the subquery \"{alias}\" in FROM"),
                        "; write the clause inside the subquery",
                    ))
                }
                // Rows no table holds: passed over unless named.
                other if request.of.is_some() => {
                    return Err(SqlError::LockingTargetKind {
                        clause,
                        what: match other {
                            FromItem::View(view, _) => {
                                format!(
                                    "the system view \"{}\" (its rows are computed, not stored)",
                                    view.name()
                                )
                            }
                            _ => "a function".into(),
                        },
                    })
                }
                _ => continue,
            }
            match targets.iter_mut().find(|(i, ..)| *i == at) {
                Some((_, mode, wait)) => {
                    *mode = (*mode).max(request.mode);
                    *wait = (*wait).max(request.wait);
                }
                None => targets.push((at, request.mode, request.wait)),
            }
        }
    }
    match targets[..] {
        [] => Ok(None),
        [target] if items.len() == 1 => Ok(Some(target)),
        [(_, mode, _), ..] => Err(cx.unsupported_hint(
            span,
            format!("{} in a query of several FROM items (a join)", mode.clause()),
            "; lock each table's rows in a SELECT of that table alone, or with the clause in a subquery of the join: FROM (SELECT … FOR UPDATE) s JOIN …",
        )),
    }
}
