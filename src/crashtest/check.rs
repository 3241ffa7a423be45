//! What a crash test checks once the child is dead: the data directory is
//! reopened in this process (which is where recovery runs) and
//!
//! 1. every table in the catalog belongs to a component of the workload;
//! 2. each component's tables hold what its sessions' histories allow:
//!    every acknowledged transaction, nothing that never began, and the
//!    transaction in doubt of each session wholly or not at all (the
//!    `judge_*` functions, which take the rows read and decide);
//! 3. the visibility map agrees with the heap: a set bit's page has
//!    `PD_ALL_VISIBLE` and only tuples inserted by committed transactions
//!    and not deleted by one, and no bit is set past the heap's end;
//! 4. after every dirty buffer has been written back (recovery may leave
//!    its repairs in the pool), every page of every file under `base/`
//!    verifies (header and checksum), every relation file belongs to a
//!    catalog table or the catalog itself, and every table has its file.
//!
//! The judges compare whole states, which is simple to get right: a
//! session's transactions are totally ordered, so the allowed states are
//! the one after its acknowledged prefix and the one after that prefix
//! and its transaction in doubt. Sessions of one component touch disjoint
//! rows (their own session number, their own ids), so the allowed states
//! of a table are the products of its sessions' states.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use super::protocol::{History, Op, SessionLog, SessionName};
use super::workload::*;
use crate::catalog::{COLUMNS_REL, INDEXES_REL, ROLES_REL, TABLES_REL};
use crate::database::{Database, Session};
use crate::heap::{vm, TupleHeader};
use crate::page::{item, line_pointer_count, page_flags, PD_ALL_VISIBLE};
use crate::storage::{Fork, SegmentFile, BLOCK_SIZE};
use crate::txn::XidStatus;
use crate::types::Value;

/// Problems listed in one failure message; the rest are counted.
const PROBLEMS_SHOWN_MAX: usize = 5;
/// Keys listed in one problem; the rest are counted.
const KEYS_SHOWN_MAX: usize = 5;

/// What became of the transactions in doubt whose effect the check could
/// tell apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Found committed.
    pub applied: usize,
    /// Found absent.
    pub absent: usize,
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, other: Tally) {
        self.applied += other.applied;
        self.absent += other.absent;
    }
}

impl Tally {
    fn resolved(applied: bool) -> Tally {
        Tally {
            applied: usize::from(applied),
            absent: usize::from(!applied),
        }
    }
}

/// What a passing check saw, for the iteration's line.
#[derive(Debug, Clone, Default)]
pub struct Findings {
    pub in_doubt: Tally,
    /// Visibility map bits set (and checked).
    pub vm_bits: usize,
    pub files: usize,
    pub pages: u64,
    /// Files ending in a partial block, which the engine ignores.
    pub partial_tails: usize,
}

/// Reopens the data directory and runs every check (see the module
/// comment). Returns the failure, or what was found.
pub fn check_database(
    data_dir: &Path,
    settings: &[String],
    components: &[Component],
    history: &History,
) -> Result<Findings, String> {
    let db = Database::open(data_dir, settings)
        .map_err(|e| format!("could not reopen the data directory: {e}"))?;
    let mut s = db
        .session()
        .map_err(|e| format!("could not start a session: {e}"))?;
    let mut findings = Findings::default();
    let tables = db.catalog().tables();
    let stray: Vec<&str> = tables
        .iter()
        .map(|t| t.name())
        .filter(|name| !components.iter().any(|c| c.owns(name)))
        .collect();
    if !stray.is_empty() {
        return Err(format!(
            "the catalog has tables no session created: {}",
            stray.join(", ")
        ));
    }
    let mut problems = Vec::new();
    for &component in components {
        match judge_component(&mut s, component, history) {
            Ok(tally) => findings.in_doubt += tally,
            Err(e) => problems.push(format!("{}: {e}", component.name())),
        }
    }
    if let Err(e) = check_storage(&db, &mut s, &tables, &mut findings) {
        problems.push(e);
    }
    drop(s);
    drop(db);
    if problems.is_empty() {
        Ok(findings)
    } else {
        // Each group shortened its own list; all groups are shown.
        Err(problems.join("; "))
    }
}

fn join_problems(mut problems: Vec<String>) -> String {
    let more = problems.len().saturating_sub(PROBLEMS_SHOWN_MAX);
    problems.truncate(PROBLEMS_SHOWN_MAX);
    let mut text = problems.join("; ");
    if more > 0 {
        text.push_str(&format!("; and {more} more problems"));
    }
    text
}

/// `keys` as "12, 13, 40 … (57 in all)".
fn some_keys(keys: &[i64]) -> String {
    let shown: Vec<String> = keys
        .iter()
        .take(KEYS_SHOWN_MAX)
        .map(|k| k.to_string())
        .collect();
    if keys.len() > KEYS_SHOWN_MAX {
        format!("{} … ({} in all)", shown.join(", "), keys.len())
    } else {
        shown.join(", ")
    }
}

fn query(s: &mut Session, sql: &str) -> Result<Vec<Vec<Value>>, String> {
    let mut results = crate::sql::execute(s, sql).map_err(|e| format!("{sql}: {e}"))?;
    Ok(results.pop().map(|r| r.rows).unwrap_or_default())
}

fn int(v: &Value) -> Result<i64, String> {
    match v {
        Value::Integer(x) => Ok(i64::from(*x)),
        Value::BigInt(x) => Ok(*x),
        other => Err(format!("expected an integer, found {other:?}")),
    }
}

/// Rows of integers.
fn int_rows(s: &mut Session, sql: &str) -> Result<Vec<Vec<i64>>, String> {
    query(s, sql)?
        .iter()
        .map(|row| row.iter().map(int).collect())
        .collect()
}

fn pairs(rows: Vec<Vec<i64>>) -> Vec<(i64, i64)> {
    rows.into_iter().map(|r| (r[0], r[1])).collect()
}

/// Reads the component's tables and judges them against the history.
fn judge_component(
    s: &mut Session,
    component: Component,
    history: &History,
) -> Result<Tally, String> {
    let log = |index: u32| history.session(SessionName { component, index });
    match component {
        Component::Insert => {
            let rows = int_rows(s, &format!("SELECT session, seq FROM {INSERT_TABLE}"))?;
            let logs: Vec<SessionLog> = (0..INSERT_SESSIONS).map(log).collect();
            judge_insert(&logs, &pairs(rows))
        }
        Component::Update => {
            let rows = int_rows(s, &format!("SELECT id, v FROM {UPDATE_TABLE}"))?;
            judge_update(&log(0), &pairs(rows))
        }
        Component::Copy => {
            let rows = int_rows(
                s,
                &format!(
                    "SELECT batch, count(*), min(n), max(n), sum(n), sum(n::bigint * n) FROM {COPY_TABLE} GROUP BY batch"
                ),
            )?;
            let batches = rows
                .into_iter()
                .map(|r| BatchStats {
                    batch: r[0],
                    rows: r[1],
                    min: r[2],
                    max: r[3],
                    sum: r[4],
                    sum_of_squares: r[5],
                })
                .collect::<Vec<_>>();
            judge_copy(&log(0), &batches)
        }
        Component::Delete => {
            let rows = int_rows(s, &format!("SELECT id FROM {DELETE_TABLE}"))?;
            let ids: Vec<i64> = rows.into_iter().map(|r| r[0]).collect();
            let logs: Vec<SessionLog> = (0..DELETE_SESSIONS).map(log).collect();
            judge_delete(&logs, &ids)
        }
        Component::Vacuum => {
            let rows = int_rows(s, &format!("SELECT id, v FROM {VACUUM_TABLE}"))?;
            judge_vacuum(&log(0), &pairs(rows))
        }
        Component::Ddl => {
            let mut tables = BTreeMap::new();
            for def in s.db().catalog().tables() {
                let Some(n) = ddl_table_number(def.name()) else {
                    continue;
                };
                let sql = format!(
                    "SELECT count(*), min(i), max(i), sum(i), min(k), max(k) FROM {}",
                    def.name()
                );
                let row = query(s, &sql)?.pop().unwrap_or_default();
                // An empty table's min and max are NULL.
                let row = match row.first() {
                    Some(count) if int(count)? == 0 => vec![0],
                    _ => row.iter().map(int).collect::<Result<Vec<_>, _>>()?,
                };
                tables.insert(n, ddl_table_state(n, &row)?);
            }
            judge_ddl(&log(0), &tables)
        }
        Component::Lock => {
            let rows = int_rows(s, &format!("SELECT id, v FROM {LOCK_TABLE}"))?;
            let logs: Vec<SessionLog> = (0..LOCK_SESSIONS).map(log).collect();
            let tally = judge_lock(&logs, &pairs(rows))?;
            no_row_stays_locked(s)?;
            Ok(tally)
        }
        Component::Checkpointer => Ok(Tally::default()),
    }
}

/// After the restart no locker runs: every row of the lock table can be
/// locked `FOR UPDATE NOWAIT`, the strongest mode, at once (the
/// transaction rolls back, leaving only ended locks).
fn no_row_stays_locked(s: &mut Session) -> Result<(), String> {
    let sql = format!("BEGIN; SELECT id FROM {LOCK_TABLE} FOR UPDATE NOWAIT; ROLLBACK");
    let results = crate::sql::execute(s, &sql).map_err(|e| {
        let _ = crate::sql::execute(s, "ROLLBACK");
        format!("a row stays locked after the restart: {sql}: {e}")
    })?;
    let locked = results.get(1).map_or(0, |r| r.rows.len()) as i64;
    if locked != LOCK_ROWS {
        return Err(format!(
            "{locked} of the {LOCK_ROWS} rows could be locked after the restart"
        ));
    }
    Ok(())
}

/// The lock table: exactly ids 1..=[`LOCK_ROWS`] (a lock-only xmax hides
/// no row, and a no-key update beside locks makes no second one), and
/// session `i`'s rows (id ≡ i modulo [`LOCK_SESSIONS`]) all with the same
/// v: its acknowledged transactions, or one more if one is in doubt.
pub fn judge_lock(logs: &[SessionLog], rows: &[(i64, i64)]) -> Result<Tally, String> {
    let mut problems = Vec::new();
    let mut found: BTreeMap<i64, i64> = BTreeMap::new();
    let mut twice = Vec::new();
    for &(id, v) in rows {
        if found.insert(id, v).is_some() {
            twice.push(id);
        }
    }
    if !twice.is_empty() {
        problems.push(format!("ids more than once: {}", some_keys(&twice)));
    }
    let missing: Vec<i64> = (1..=LOCK_ROWS)
        .filter(|id| !found.contains_key(id))
        .collect();
    if !missing.is_empty() {
        problems.push(format!("ids missing: {}", some_keys(&missing)));
    }
    let foreign: Vec<i64> = found
        .keys()
        .filter(|id| !(1..=LOCK_ROWS).contains(*id))
        .copied()
        .collect();
    if !foreign.is_empty() {
        problems.push(format!("ids never inserted: {}", some_keys(&foreign)));
    }
    let mut tally = Tally::default();
    for (index, log) in logs.iter().enumerate() {
        let acked = log.acked().len() as i64;
        let doubt = matches!(log.in_doubt(), Some(Op::LockUpdate { .. }));
        let values: BTreeSet<i64> = found
            .iter()
            .filter(|(id, _)| *id % i64::from(LOCK_SESSIONS) == index as i64)
            .map(|(_, &v)| v)
            .collect();
        match values.iter().copied().collect::<Vec<_>>()[..] {
            [] => {}
            [v] if v == acked => {
                if doubt {
                    tally += Tally::resolved(false);
                }
            }
            [v] if doubt && v == acked + 1 => tally += Tally::resolved(true),
            [v] => problems.push(format!(
                "session {index}'s rows have v = {v}; expected {acked} (transactions acknowledged){}",
                if doubt { " or one more (in doubt)" } else { "" }
            )),
            _ => problems.push(format!(
                "session {index}'s rows were torn: v = {}",
                some_keys(&values.into_iter().collect::<Vec<_>>())
            )),
        }
    }
    if problems.is_empty() {
        Ok(tally)
    } else {
        Err(join_problems(problems))
    }
}

/// Insert sessions: session `i`'s rows are (i, 1..=n) for the n
/// acknowledged inserts, and maybe the one in doubt.
pub fn judge_insert(logs: &[SessionLog], rows: &[(i64, i64)]) -> Result<Tally, String> {
    let mut seen: BTreeMap<i64, BTreeSet<i64>> = BTreeMap::new();
    let mut twice = Vec::new();
    for &(session, seq) in rows {
        if !seen.entry(session).or_default().insert(seq) {
            twice.push(format!("({session}, {seq})"));
        }
    }
    let mut problems = Vec::new();
    if !twice.is_empty() {
        problems.push(format!("rows appear twice: {}", twice.join(", ")));
    }
    let mut tally = Tally::default();
    for (index, log) in logs.iter().enumerate() {
        let found = seen.remove(&(index as i64)).unwrap_or_default();
        let keys = |ops: &[Op]| -> BTreeSet<i64> {
            ops.iter()
                .filter_map(|op| match op {
                    Op::Insert { key } => Some(*key),
                    _ => None,
                })
                .collect()
        };
        let acked = keys(log.acked());
        let doubt = log.in_doubt().and_then(|op| keys(&[op]).pop_first());
        let missing: Vec<i64> = acked.difference(&found).copied().collect();
        if !missing.is_empty() {
            problems.push(format!(
                "session {index} lost acknowledged rows: seq {}",
                some_keys(&missing)
            ));
        }
        let unknown: Vec<i64> = found
            .iter()
            .filter(|k| !acked.contains(k) && Some(**k) != doubt)
            .copied()
            .collect();
        if !unknown.is_empty() {
            problems.push(format!(
                "session {index} has rows that never began: seq {}",
                some_keys(&unknown)
            ));
        }
        if let Some(key) = doubt {
            tally += Tally::resolved(found.contains(&key));
        }
    }
    if let Some(session) = seen.keys().next() {
        problems.push(format!("rows of session {session}, which never ran"));
    }
    if problems.is_empty() {
        Ok(tally)
    } else {
        Err(join_problems(problems))
    }
}

/// The update table: exactly ids 1..=[`UPDATE_ROWS`], all with the same
/// v: the number of acknowledged updates, or one more if one is in doubt.
pub fn judge_update(log: &SessionLog, rows: &[(i64, i64)]) -> Result<Tally, String> {
    let acked = log.acked().len() as i64;
    let doubt = matches!(log.in_doubt(), Some(Op::Update { .. }));
    let mut problems = Vec::new();
    let mut counts: BTreeMap<i64, usize> = BTreeMap::new();
    let mut by_value: BTreeMap<i64, usize> = BTreeMap::new();
    for &(id, v) in rows {
        *counts.entry(id).or_default() += 1;
        *by_value.entry(v).or_default() += 1;
    }
    let missing: Vec<i64> = (1..=UPDATE_ROWS)
        .filter(|id| !counts.contains_key(id))
        .collect();
    let twice: Vec<i64> = counts
        .iter()
        .filter(|(_, &n)| n > 1)
        .map(|(&id, _)| id)
        .collect();
    let foreign: Vec<i64> = counts
        .keys()
        .filter(|id| !(1..=UPDATE_ROWS).contains(*id))
        .copied()
        .collect();
    if rows.len() as i64 != UPDATE_ROWS {
        problems.push(format!("{} rows instead of {UPDATE_ROWS}", rows.len()));
    }
    if !missing.is_empty() {
        problems.push(format!("ids missing: {}", some_keys(&missing)));
    }
    if !twice.is_empty() {
        problems.push(format!("ids more than once: {}", some_keys(&twice)));
    }
    if !foreign.is_empty() {
        problems.push(format!("ids never inserted: {}", some_keys(&foreign)));
    }
    let expected = if doubt {
        format!(
            "{acked} (updates acknowledged) or {} (one more in doubt)",
            acked + 1
        )
    } else {
        format!("{acked} (updates acknowledged)")
    };
    let mut tally = Tally::default();
    match by_value.len() {
        0 => {}
        1 => {
            let (&v, _) = by_value.first_key_value().expect("one value");
            if v == acked || (doubt && v == acked + 1) {
                if doubt {
                    tally = Tally::resolved(v == acked + 1);
                }
            } else {
                problems.push(format!("every row has v = {v}; expected {expected}"));
            }
        }
        _ => {
            let values: Vec<String> = by_value
                .iter()
                .map(|(v, n)| format!("{n} rows with v = {v}"))
                .collect();
            problems.push(format!(
                "a torn update: {}; expected all equal to {expected}",
                values.join(", ")
            ));
        }
    }
    if problems.is_empty() {
        Ok(tally)
    } else {
        Err(join_problems(problems))
    }
}

/// One COPY batch's rows, summarised by SQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchStats {
    pub batch: i64,
    pub rows: i64,
    pub min: i64,
    pub max: i64,
    pub sum: i64,
    pub sum_of_squares: i64,
}

impl BatchStats {
    /// The figures of a batch with each of n = 1..=[`COPY_BATCH_ROWS`]
    /// once: count, range and the sums of n and n² leave no room for a
    /// duplicate making up for a missing row.
    fn is_complete(&self) -> bool {
        let n = COPY_BATCH_ROWS;
        (self.rows, self.min, self.max, self.sum, self.sum_of_squares)
            == (n, 1, n, n * (n + 1) / 2, n * (n + 1) * (2 * n + 1) / 6)
    }
}

/// COPY batches: each all there or not at all; acknowledged ones there,
/// the one in doubt either way, no other.
pub fn judge_copy(log: &SessionLog, batches: &[BatchStats]) -> Result<Tally, String> {
    let batch_of = |op: &Op| match op {
        Op::Copy { batch } => Some(*batch),
        _ => None,
    };
    let acked: BTreeSet<i64> = log.acked().iter().filter_map(batch_of).collect();
    let doubt = log.in_doubt().as_ref().and_then(batch_of);
    let mut problems = Vec::new();
    let mut present = BTreeSet::new();
    for b in batches {
        present.insert(b.batch);
        if !b.is_complete() {
            problems.push(if b.rows == COPY_BATCH_ROWS {
                format!(
                    "batch {} has {} rows but not n = 1..={COPY_BATCH_ROWS} once each",
                    b.batch, b.rows
                )
            } else {
                format!(
                    "a torn batch: batch {} has {} of {COPY_BATCH_ROWS} rows",
                    b.batch, b.rows
                )
            });
        }
        if !acked.contains(&b.batch) && Some(b.batch) != doubt {
            problems.push(format!("batch {} never began but is there", b.batch));
        }
    }
    let missing: Vec<i64> = acked.difference(&present).copied().collect();
    if !missing.is_empty() {
        problems.push(format!(
            "acknowledged batches are missing: {}",
            some_keys(&missing)
        ));
    }
    if !problems.is_empty() {
        return Err(join_problems(problems));
    }
    Ok(doubt.map_or_else(Tally::default, |b| Tally::resolved(present.contains(&b))))
}

/// Delete sessions: an id whose delete was acknowledged is gone, one
/// whose delete never began is there once, the one in doubt either.
pub fn judge_delete(logs: &[SessionLog], ids: &[i64]) -> Result<Tally, String> {
    let id_of = |op: &Op| match op {
        Op::Delete { id } => Some(*id),
        _ => None,
    };
    let mut counts: BTreeMap<i64, usize> = BTreeMap::new();
    for &id in ids {
        *counts.entry(id).or_default() += 1;
    }
    let mut deleted = BTreeSet::new();
    let mut doubts = BTreeSet::new();
    for log in logs {
        deleted.extend(log.acked().iter().filter_map(id_of));
        doubts.extend(log.in_doubt().as_ref().and_then(id_of));
    }
    let mut problems = Vec::new();
    let twice: Vec<i64> = counts
        .iter()
        .filter(|(_, &n)| n > 1)
        .map(|(&id, _)| id)
        .collect();
    if !twice.is_empty() {
        problems.push(format!("ids more than once: {}", some_keys(&twice)));
    }
    let foreign: Vec<i64> = counts
        .keys()
        .filter(|id| !(1..=DELETE_ROWS).contains(*id))
        .copied()
        .collect();
    if !foreign.is_empty() {
        problems.push(format!("ids never inserted: {}", some_keys(&foreign)));
    }
    let back: Vec<i64> = deleted
        .iter()
        .filter(|id| counts.contains_key(id))
        .copied()
        .collect();
    if !back.is_empty() {
        problems.push(format!(
            "rows whose delete was acknowledged are there: id {}",
            some_keys(&back)
        ));
    }
    let lost: Vec<i64> = (1..=DELETE_ROWS)
        .filter(|id| !counts.contains_key(id) && !deleted.contains(id) && !doubts.contains(id))
        .collect();
    if !lost.is_empty() {
        problems.push(format!(
            "rows no session deleted are gone: id {}",
            some_keys(&lost)
        ));
    }
    if !problems.is_empty() {
        return Err(join_problems(problems));
    }
    let mut tally = Tally::default();
    for id in doubts {
        tally += Tally::resolved(!counts.contains_key(&id));
    }
    Ok(tally)
}

/// The vacuum table's rows (id → v) after `ops`, from the table as set
/// up.
fn vacuum_model(ops: &[Op]) -> BTreeMap<i64, i64> {
    let mut rows: BTreeMap<i64, i64> = (1..=VACUUM_ROWS).map(|id| (id, 0)).collect();
    for op in ops {
        match *op {
            Op::UpdateRange { first, last } => {
                for (_, v) in rows.range_mut(first..=last) {
                    *v += 1;
                }
            }
            Op::DeleteRange { first, last } => {
                rows.retain(|id, _| !(first..=last).contains(id));
            }
            Op::InsertRange { first, last } => rows.extend((first..=last).map(|id| (id, 0))),
            _ => {}
        }
    }
    rows
}

/// The vacuum table equals the state after the writer's acknowledged
/// changes, or after those and the one in doubt. (The VACUUM session
/// changes no row.)
pub fn judge_vacuum(log: &SessionLog, rows: &[(i64, i64)]) -> Result<Tally, String> {
    let mut found = BTreeMap::new();
    let mut twice = Vec::new();
    for &(id, v) in rows {
        if found.insert(id, v).is_some() {
            twice.push(id);
        }
    }
    if !twice.is_empty() {
        return Err(format!("ids more than once: {}", some_keys(&twice)));
    }
    let acked = vacuum_model(log.acked());
    if found == acked {
        // A change in doubt that changes nothing (an update of deleted
        // ids) cannot be told apart.
        let tells = log.in_doubt().is_some() && vacuum_model(log.began()) != acked;
        return Ok(if tells {
            Tally::resolved(false)
        } else {
            Tally::default()
        });
    }
    if log.in_doubt().is_some() && found == vacuum_model(log.began()) {
        return Ok(Tally::resolved(true));
    }
    let mut differences = Vec::new();
    for id in acked.keys().chain(found.keys()).collect::<BTreeSet<_>>() {
        match (acked.get(id), found.get(id)) {
            (Some(a), Some(f)) if a != f => {
                differences.push(format!("id {id}: v = {f}, expected {a}"))
            }
            (Some(_), None) => differences.push(format!("id {id} is missing")),
            (None, Some(_)) => differences.push(format!("id {id} should not be there")),
            _ => {}
        }
    }
    let count = differences.len();
    differences.truncate(KEYS_SHOWN_MAX);
    let doubt = log
        .in_doubt()
        .map(|op| format!(" nor after the change in doubt ({op})"))
        .unwrap_or_default();
    Err(format!(
        "{VACUUM_TABLE} is not as after the {} acknowledged changes{doubt}: {} ({count} differences from the acknowledged state)",
        log.acked().len(),
        differences.join(", ")
    ))
}

/// What a ddl table holds: all its rows or none.
fn ddl_table_state(n: i64, row: &[i64]) -> Result<i64, String> {
    let name = ddl_table(n);
    match row {
        [0, ..] => Ok(0),
        [count, min_i, max_i, sum_i, min_k, max_k] => {
            let r = DDL_ROWS;
            if (*count, *min_i, *max_i, *sum_i) == (r, 1, r, r * (r + 1) / 2)
                && (*min_k, *max_k) == (n, n)
            {
                Ok(r)
            } else if *count != r {
                Err(format!("a torn fill: {name} has {count} of {r} rows"))
            } else {
                Err(format!(
                    "{name} has {r} rows but not its own i = 1..={r} once each"
                ))
            }
        }
        other => Err(format!("{name}: unexpected summary {other:?}")),
    }
}

/// Live ddl tables (number → rows) after `ops`.
fn ddl_model(ops: &[Op]) -> BTreeMap<i64, i64> {
    let mut tables = BTreeMap::new();
    for op in ops {
        match *op {
            Op::Create { table } => {
                tables.insert(table, 0);
            }
            Op::Fill { table } | Op::Load { table } => {
                tables.insert(table, DDL_ROWS);
            }
            Op::Drop { table } => {
                tables.remove(&table);
            }
            _ => {}
        }
    }
    tables
}

/// The ddl tables (number → rows: 0 or [`DDL_ROWS`]) equal the state
/// after the acknowledged statements, or after those and the one in
/// doubt.
pub fn judge_ddl(log: &SessionLog, tables: &BTreeMap<i64, i64>) -> Result<Tally, String> {
    let acked = ddl_model(log.acked());
    if *tables == acked {
        return Ok(log
            .in_doubt()
            .map_or_else(Tally::default, |_| Tally::resolved(false)));
    }
    if log.in_doubt().is_some() && *tables == ddl_model(log.began()) {
        return Ok(Tally::resolved(true));
    }
    let mut problems = Vec::new();
    for n in acked.keys().chain(tables.keys()).collect::<BTreeSet<_>>() {
        let name = ddl_table(*n);
        match (acked.get(n), tables.get(n)) {
            (Some(a), Some(f)) if a != f => {
                problems.push(format!("{name} has {f} rows where {a} were acknowledged"))
            }
            (Some(_), None) => problems.push(format!(
                "{name} is gone although its creation was acknowledged and no drop"
            )),
            (None, Some(_)) => {
                let dropped = log.acked().contains(&Op::Drop { table: *n });
                problems.push(if dropped {
                    format!("{name} is there although its drop was acknowledged")
                } else {
                    format!("{name} is there although its creation was never acknowledged")
                })
            }
            _ => {}
        }
    }
    if let Some(op) = log.in_doubt() {
        problems.push(format!(
            "nor is it the state after the statement in doubt ({op})"
        ));
    }
    Err(join_problems(problems))
}

/// Checks 3 and 4 of the module comment for the committed `tables` of an
/// open database: each one's visibility map agrees with its heap, and
/// (after a checkpoint writes back what recovery left in the pool) every
/// page of every relation file verifies, every index agrees with its
/// table, every file belongs to a table, an index or the catalog, and each
/// of them has its file. Also for tests of recovery
/// that need no history.
pub fn check_storage(
    db: &Database,
    s: &mut Session,
    tables: &[Arc<crate::catalog::TableDef>],
    findings: &mut Findings,
) -> Result<(), String> {
    let mut problems = Vec::new();
    for table in tables {
        match check_visibility_map(s, table.heap.rel) {
            Ok(bits) => findings.vm_bits += bits,
            Err(e) => problems.push(format!(
                "visibility map of {} (relation {}): {e}",
                table.name(),
                table.heap.rel
            )),
        }
        // An index must agree with its table after a crash as before: the
        // same structure checks and one entry per row version.
        for index in db.catalog().indexes_of(table).iter() {
            // As a statement of its own: it locks the table.
            let verified = match s.start_statement() {
                Ok(snapshot) => {
                    drop(snapshot);
                    let verified =
                        crate::exec::index::verify_index(s, &index.name).map_err(|e| e.to_string());
                    let ended = s.end_statement(verified.is_ok());
                    verified.and(ended.map_err(|e| e.to_string()))
                }
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) = verified {
                problems.push(format!("index {} of {}: {e}", index.name, table.name()));
            }
        }
    }
    // Recovery may have left its repairs in the pool: the files are
    // checked as the engine leaves them once everything is written back.
    // They are checked after a failure above too, since what they show
    // (a file without its table) often explains it.
    let mut tables_by_rel: BTreeMap<u32, String> = tables
        .iter()
        .map(|t| (t.heap.rel, t.name().to_string()))
        .collect();
    tables_by_rel.insert(TABLES_REL, "the catalog's tables".into());
    tables_by_rel.insert(COLUMNS_REL, "the catalog's columns".into());
    tables_by_rel.insert(INDEXES_REL, "the catalog's indexes".into());
    tables_by_rel.insert(ROLES_REL, "the catalog's roles".into());
    for table in tables {
        for index in db.catalog().indexes_of(table).iter() {
            tables_by_rel.insert(index.rel, format!("index {}", index.name));
        }
    }
    let files = db
        .checkpoint(false)
        .map(drop)
        .map_err(|e| format!("could not write back the buffers after the checks: {e}"))
        .and_then(|()| check_files(db, &tables_by_rel, findings));
    if let Err(e) = files {
        problems.push(format!("files: {e}"));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// Every set bit of relation `rel`'s visibility map: its heap page exists,
/// has `PD_ALL_VISIBLE`, and holds only tuples whose inserter committed
/// and that no committed transaction deleted. Returns the bits set.
fn check_visibility_map(s: &mut Session, rel: u32) -> Result<usize, String> {
    let pool = Arc::clone(s.buf.pool());
    let relation = pool.relation(rel);
    let nblocks = relation.nblocks(Fork::Main).map_err(|e| e.to_string())?;
    let vm_blocks = relation
        .nblocks(Fork::VisibilityMap)
        .map_err(|e| e.to_string())?;
    let covered = vm_blocks.saturating_mul(vm::HEAP_BLOCKS_PER_VM_PAGE);
    let bits = vm::all_visible_bits(&mut s.buf, rel, covered).map_err(|e| e.to_string())?;
    let txn = Arc::clone(s.db().txn());
    let mut set = 0;
    let mut problems = Vec::new();
    for block in (0..covered).filter(|&b| bits[b as usize]) {
        set += 1;
        if block >= nblocks {
            problems.push(format!(
                "the bit of block {block} is set but the heap has {nblocks} blocks"
            ));
            continue;
        }
        let id = s
            .buf
            .read_buffer(rel, Fork::Main, block)
            .map_err(|e| e.to_string())?;
        let problem = s.buf.with_page(id, |page| {
            if page_flags(page) & PD_ALL_VISIBLE == 0 {
                return Some(format!(
                    "the bit of block {block} is set but the page lacks PD_ALL_VISIBLE"
                ));
            }
            for index in 0..line_pointer_count(page) {
                let Some(t) = item(page, index) else { continue };
                let h = TupleHeader::read(t);
                if txn.status(h.xmin) != XidStatus::Committed {
                    return Some(format!(
                        "block {block} is all-visible but tuple {index} was inserted by transaction {}, which did not commit",
                        h.xmin
                    ));
                }
                // A lock-only xmax deletes nothing.
                if let Some(deleter) = h.deleter().filter(|&d| txn.status(d) != XidStatus::Aborted) {
                    return Some(format!(
                        "block {block} is all-visible but tuple {index} was deleted by transaction {deleter}, which did not abort",
                    ));
                }
            }
            None
        });
        s.buf.release(id);
        problems.extend(problem);
    }
    if problems.is_empty() {
        Ok(set)
    } else {
        Err(join_problems(problems))
    }
}

/// A relation file's name: relation, fork, segment.
fn parse_relation_file(name: &str) -> Option<(u32, Fork, u32)> {
    let (stem, segno) = match name.split_once('.') {
        Some((stem, seg)) => (stem, seg.parse().ok().filter(|&s| s > 0)?),
        None => (name, 0),
    };
    let (rel, fork) = match stem.split_once('_') {
        Some((rel, "vm")) => (rel, Fork::VisibilityMap),
        Some((rel, "fsm")) => (rel, Fork::FreeSpace),
        Some(_) => return None,
        None => (stem, Fork::Main),
    };
    if rel.is_empty() || !rel.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((rel.parse().ok()?, fork, segno))
}

/// Every relation file under `base/`: its pages verify, it belongs to a
/// relation in `tables_by_rel`, and each of those has its main fork.
/// Files that are not relation files are not the engine's relations and
/// are left alone.
fn check_files(
    db: &Database,
    tables_by_rel: &BTreeMap<u32, String>,
    findings: &mut Findings,
) -> Result<(), String> {
    let base = db.dir().join(crate::database::BASE_DIR);
    let entries =
        std::fs::read_dir(&base).map_err(|e| format!("could not list {}: {e}", base.display()))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("could not list {}: {e}", base.display()))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    let direct = db.settings().io_direct().data;
    let per_segment = db.pool().blocks_per_segment();
    let depth = db.settings().effective_io_concurrency().max(1);
    let combine = db.settings().io_combine_limit();
    let mut problems = Vec::new();
    let mut mains = BTreeSet::new();
    let mut orphans: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for name in names {
        let Some((rel, fork, segno)) = parse_relation_file(&name) else {
            continue;
        };
        let shown = format!("base/{name}");
        if !tables_by_rel.contains_key(&rel) {
            orphans.entry(rel).or_default().push(shown.clone());
        }
        if fork == Fork::Main && segno == 0 {
            mains.insert(rel);
        }
        let path = base.join(&name);
        let verified = SegmentFile::open_path(&path, direct, false, segno * per_segment)
            .map_err(|e| e.to_string())
            .and_then(|file| {
                let size = file.size_bytes().map_err(|e| e.to_string())?;
                if size % BLOCK_SIZE as u64 != 0 {
                    findings.partial_tails += 1;
                }
                crate::tools::verify_blocks(
                    db.aio(),
                    &file,
                    size / BLOCK_SIZE as u64,
                    depth,
                    combine,
                )
                .map_err(|e| e.to_string())
            });
        findings.files += 1;
        match verified {
            Ok(report) => {
                findings.pages += report.pages;
                for failure in report.failures {
                    problems.push(format!("{shown} {failure}"));
                }
            }
            Err(e) => problems.push(format!("could not verify {shown}: {e}")),
        }
    }
    for (rel, files) in orphans {
        problems.push(format!(
            "relation {rel} belongs to no table in the catalog but has files ({})",
            files.join(", ")
        ));
    }
    for (rel, name) in tables_by_rel {
        if !mains.contains(rel) {
            problems.push(format!("{name} (relation {rel}) has no file base/{rel}"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(join_problems(problems))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session log from protocol lines: `ops` began, the first `acked`
    /// acknowledged.
    fn log(component: Component, ops: &[Op], acked: usize) -> SessionLog {
        let name = SessionName {
            component,
            index: 0,
        };
        let mut h = History::default();
        h.record("ready").unwrap();
        for (i, op) in ops.iter().enumerate() {
            h.record(&super::super::protocol::begin_line(name, i + 1, *op))
                .unwrap();
            if i < acked {
                h.record(&super::super::protocol::ack_line(name, i + 1))
                    .unwrap();
            }
        }
        h.session(name)
    }

    fn updates(n: i64) -> Vec<Op> {
        (1..=n)
            .map(|generation| Op::Update { generation })
            .collect()
    }

    fn update_rows(v: impl Fn(i64) -> i64) -> Vec<(i64, i64)> {
        (1..=UPDATE_ROWS).map(|id| (id, v(id))).collect()
    }

    #[test]
    fn lock_sessions_own_their_rows_and_may_leave_one_transaction_in_doubt() {
        let ops: Vec<Op> = (1..=3)
            .map(|generation| Op::LockUpdate { generation })
            .collect();
        let logs = [
            log(Component::Lock, &ops, 3),
            log(Component::Lock, &ops, 2),
            SessionLog::default(),
        ];
        let rows = |v: [i64; 3]| -> Vec<(i64, i64)> {
            (1..=LOCK_ROWS)
                .map(|id| (id, v[(id % i64::from(LOCK_SESSIONS)) as usize]))
                .collect()
        };
        assert_eq!(
            judge_lock(&logs, &rows([3, 2, 0])),
            Ok(Tally::resolved(false))
        );
        assert_eq!(
            judge_lock(&logs, &rows([3, 3, 0])),
            Ok(Tally::resolved(true))
        );
        let e = judge_lock(&logs, &rows([2, 2, 0])).unwrap_err();
        assert!(e.contains("session 0's rows have v = 2; expected 3"), "{e}");
        let mut torn = rows([3, 2, 0]);
        // Id 1 is session 1's.
        torn[0].1 = 3;
        let e = judge_lock(&logs, &torn).unwrap_err();
        assert!(e.contains("session 1's rows were torn: v = 2, 3"), "{e}");
        let mut lost = rows([3, 2, 0]);
        let (id, v) = lost.pop().unwrap();
        lost.push((1, v));
        let e = judge_lock(&logs, &lost).unwrap_err();
        assert!(
            e.contains("ids more than once: 1") && e.contains(&format!("ids missing: {id}")),
            "{e}"
        );
    }

    #[test]
    fn an_update_in_doubt_is_accepted_committed_or_not() {
        let log = log(Component::Update, &updates(4), 3);
        assert_eq!(
            judge_update(&log, &update_rows(|_| 3)),
            Ok(Tally::resolved(false))
        );
        assert_eq!(
            judge_update(&log, &update_rows(|_| 4)),
            Ok(Tally::resolved(true))
        );
        let e = judge_update(&log, &update_rows(|_| 2)).unwrap_err();
        assert!(e.contains("every row has v = 2; expected 3"), "{e}");
        let e = judge_update(&log, &update_rows(|_| 5)).unwrap_err();
        assert!(e.contains("v = 5"), "{e}");
    }

    #[test]
    fn a_torn_or_lossy_update_is_reported() {
        let log = log(Component::Update, &updates(4), 4);
        assert_eq!(
            judge_update(&log, &update_rows(|_| 4)),
            Ok(Tally::default())
        );
        let e = judge_update(&log, &update_rows(|id| if id < 100 { 3 } else { 4 })).unwrap_err();
        assert!(e.contains("a torn update: 99 rows with v = 3"), "{e}");
        let mut rows = update_rows(|_| 4);
        rows.pop();
        rows.push((1, 4));
        let e = judge_update(&log, &rows).unwrap_err();
        assert!(
            e.contains("ids missing: 20000") && e.contains("ids more than once: 1"),
            "{e}"
        );
    }

    #[test]
    fn inserts_need_every_acknowledged_row_and_nothing_unbegun() {
        let ops: Vec<Op> = (1..=3).map(|key| Op::Insert { key }).collect();
        let logs = [log(Component::Insert, &ops, 2), SessionLog::default()];
        assert_eq!(
            judge_insert(&logs, &[(0, 1), (0, 2)]),
            Ok(Tally::resolved(false))
        );
        assert_eq!(
            judge_insert(&logs, &[(0, 1), (0, 2), (0, 3)]),
            Ok(Tally::resolved(true))
        );
        let e = judge_insert(&logs, &[(0, 1)]).unwrap_err();
        assert!(e.contains("session 0 lost acknowledged rows: seq 2"), "{e}");
        let e = judge_insert(&logs, &[(0, 1), (0, 2), (0, 4)]).unwrap_err();
        assert!(e.contains("never began: seq 4"), "{e}");
        let e = judge_insert(&logs, &[(0, 1), (0, 2), (1, 1)]).unwrap_err();
        assert!(e.contains("never began: seq 1"), "{e}");
        let e = judge_insert(&logs, &[(0, 1), (0, 2), (0, 2)]).unwrap_err();
        assert!(e.contains("twice: (0, 2)"), "{e}");
    }

    fn batch(batch: i64, rows: i64) -> BatchStats {
        let n = rows;
        BatchStats {
            batch,
            rows,
            min: 1,
            max: n,
            sum: n * (n + 1) / 2,
            sum_of_squares: n * (n + 1) * (2 * n + 1) / 6,
        }
    }

    #[test]
    fn a_copy_batch_is_all_there_or_absent() {
        let ops: Vec<Op> = (1..=3).map(|batch| Op::Copy { batch }).collect();
        let log = log(Component::Copy, &ops, 2);
        let whole = |b| batch(b, COPY_BATCH_ROWS);
        assert_eq!(
            judge_copy(&log, &[whole(1), whole(2)]),
            Ok(Tally::resolved(false))
        );
        assert_eq!(
            judge_copy(&log, &[whole(1), whole(2), whole(3)]),
            Ok(Tally::resolved(true))
        );
        let e = judge_copy(&log, &[whole(1), whole(2), batch(3, 1000)]).unwrap_err();
        assert!(
            e.contains("a torn batch: batch 3 has 1000 of 50000 rows"),
            "{e}"
        );
        let e = judge_copy(&log, &[whole(1)]).unwrap_err();
        assert!(e.contains("acknowledged batches are missing: 2"), "{e}");
        let e = judge_copy(&log, &[whole(1), whole(2), whole(4)]).unwrap_err();
        assert!(e.contains("batch 4 never began"), "{e}");
        let mut shifted = whole(2);
        shifted.sum_of_squares += 1;
        let e = judge_copy(&log, &[whole(1), shifted]).unwrap_err();
        assert!(e.contains("not n = 1..=50000 once each"), "{e}");
    }

    #[test]
    fn deletes_remove_acknowledged_ids_and_no_other() {
        let ops = [Op::Delete { id: 8 }, Op::Delete { id: 4 }];
        let logs = [log(Component::Delete, &ops, 1)];
        let without = |gone: &[i64]| -> Vec<i64> {
            (1..=DELETE_ROWS).filter(|id| !gone.contains(id)).collect()
        };
        assert_eq!(
            judge_delete(&logs, &without(&[8])),
            Ok(Tally::resolved(false))
        );
        assert_eq!(
            judge_delete(&logs, &without(&[8, 4])),
            Ok(Tally::resolved(true))
        );
        let e = judge_delete(&logs, &without(&[])).unwrap_err();
        assert!(e.contains("delete was acknowledged are there: id 8"), "{e}");
        let e = judge_delete(&logs, &without(&[8, 12])).unwrap_err();
        assert!(e.contains("no session deleted are gone: id 12"), "{e}");
    }

    #[test]
    fn the_vacuum_table_matches_its_acknowledged_changes() {
        let ops = [
            Op::UpdateRange { first: 1, last: 3 },
            Op::Vacuum,
            Op::DeleteRange { first: 2, last: 2 },
            Op::InsertRange {
                first: VACUUM_ROWS + 1,
                last: VACUUM_ROWS + 2,
            },
        ];
        let rows = |ops: &[Op]| -> Vec<(i64, i64)> { vacuum_model(ops).into_iter().collect() };
        let log3 = log(Component::Vacuum, &ops, 3);
        assert_eq!(
            judge_vacuum(&log3, &rows(&ops[..3])),
            Ok(Tally::resolved(false))
        );
        assert_eq!(judge_vacuum(&log3, &rows(&ops)), Ok(Tally::resolved(true)));
        let e = judge_vacuum(&log3, &rows(&ops[..2])).unwrap_err();
        assert!(e.contains("id 2 should not be there"), "{e}");
        let mut torn = rows(&ops[..3]);
        torn[0].1 = 0;
        let e = judge_vacuum(&log3, &torn).unwrap_err();
        assert!(e.contains("id 1: v = 0, expected 1"), "{e}");
    }

    #[test]
    fn ddl_tables_follow_their_statements() {
        let ops = [
            Op::Create { table: 1 },
            Op::Fill { table: 1 },
            Op::Create { table: 2 },
            Op::Drop { table: 1 },
        ];
        let tables = |pairs: &[(i64, i64)]| pairs.iter().copied().collect::<BTreeMap<_, _>>();
        let log3 = log(Component::Ddl, &ops, 3);
        assert_eq!(
            judge_ddl(&log3, &tables(&[(1, DDL_ROWS), (2, 0)])),
            Ok(Tally::resolved(false))
        );
        assert_eq!(
            judge_ddl(&log3, &tables(&[(2, 0)])),
            Ok(Tally::resolved(true))
        );
        let e = judge_ddl(&log3, &tables(&[(1, 0), (2, 0)])).unwrap_err();
        assert!(
            e.contains("crash_ddl_1 has 0 rows where 500 were acknowledged"),
            "{e}"
        );
        let log4 = log(Component::Ddl, &ops, 4);
        let e = judge_ddl(&log4, &tables(&[(1, DDL_ROWS), (2, 0)])).unwrap_err();
        assert!(
            e.contains("crash_ddl_1 is there although its drop was acknowledged"),
            "{e}"
        );
        assert!(ddl_table_state(3, &[10, 1, 10, 55, 3, 3])
            .unwrap_err()
            .contains("a torn fill: crash_ddl_3 has 10 of 500 rows"));
    }

    #[test]
    fn relation_file_names_are_read_as_the_storage_layer_writes_them() {
        assert_eq!(parse_relation_file("16384"), Some((16384, Fork::Main, 0)));
        assert_eq!(
            parse_relation_file("16384_vm"),
            Some((16384, Fork::VisibilityMap, 0))
        );
        assert_eq!(
            parse_relation_file("16385_fsm.2"),
            Some((16385, Fork::FreeSpace, 2))
        );
        assert_eq!(parse_relation_file("1.1"), Some((1, Fork::Main, 1)));
        for not_ours in ["16384_xx", "x16384", "16384.0", "16384.", "", "_vm"] {
            assert_eq!(parse_relation_file(not_ours), None, "{not_ours}");
        }
    }
}
