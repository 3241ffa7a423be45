//! INSERT, UPDATE and DELETE.
//!
//! Each takes the transaction id (and the statement's command id) before
//! its first write and stamps every tuple it writes with them. An UPDATE
//! writes the new version first and then marks the old one with a pointer
//! to it (`Heap::delete` with `newer`), as the heap expects; rows to change
//! are found with the statement's snapshot by a scan node and changed a
//! batch (a page's matching rows) at a time, between the scan's pages. The
//! command id keeps the scan from seeing the versions the statement
//! writes, wherever they land. NOT NULL is checked per row before the row is encoded, so
//! the error names the table and column.
//!
//! A DELETE, and an UPDATE that changes a key column (one of a unique
//! index), take each row as `FOR UPDATE` would; any other UPDATE as `FOR
//! NO KEY UPDATE`, which `FOR KEY SHARE` lockers do not hold back (their
//! locks stay, see `heap/lock.rs`). Both wait for the holders of
//! conflicting row locks, as for an earlier writer of the row.

use std::sync::Arc;

use super::expr::EvalContext;
use super::index::TableIndexes;
use super::plan::{drain, ExecCx, Flow, PlanNode};
use super::value::is_true;
use super::{ExecError, Expr, Outcome};
use crate::catalog::TableDef;
use crate::database::{Database, Isolation, Session, StatementSnapshot};
use crate::heap::tuple::{decode, encode_into};
use crate::heap::{DeleteOutcome, HeapError, InsertState, Tid, Writer};
use crate::local_arc::LocalArc;
use crate::txn::{CommandId, RowLockMode, Xid, FROZEN_XID};
use crate::types::Value;

/// `INSERT INTO table …`: the input produces rows of the table's full
/// width, in column order, of the columns' types.
pub struct InsertPlan {
    pub table: Arc<TableDef>,
    pub input: Box<dyn PlanNode>,
    /// Load through a bulk-write ring (many rows) instead of the pool.
    pub bulk: bool,
    /// RETURNING's expressions over each inserted row (full width).
    pub returning: Returning,
}

/// `UPDATE table SET … WHERE …`.
pub struct UpdatePlan {
    /// The rows to change, every column decoded (the new version needs
    /// them all).
    pub target: ChangeTarget,
    /// (column, new value over the old row).
    pub assignments: Vec<(usize, Expr)>,
    /// RETURNING's expressions over each row's new version.
    pub returning: Returning,
}

/// `DELETE FROM table WHERE …`.
pub struct DeletePlan {
    /// The rows to delete (with the columns RETURNING uses decoded).
    pub target: ChangeTarget,
    /// RETURNING's expressions over each deleted row.
    pub returning: Returning,
}

/// A data change's RETURNING clause: the expressions it returns for each
/// row changed, over the row's columns (empty without the clause). The
/// rows are kept in [`Outcome::rows`] until the statement ends, as
/// PostgreSQL runs such a change to its end before it returns a row: a
/// client never sees rows of a change that then failed.
#[derive(Default)]
pub struct Returning {
    pub exprs: Vec<Expr>,
    /// The width of a returned row, as the planner estimates it.
    pub width: usize,
    /// Rows returned, over every run (EXPLAIN ANALYZE's actual rows of
    /// the change's node).
    pub returned: u64,
}

impl Returning {
    /// Adds the values RETURNING gives for `row` to `out` (nothing
    /// without a RETURNING clause).
    fn add(
        &self,
        row: &[Value],
        cx: &mut ExecCx,
        out: &mut Vec<Vec<Value>>,
    ) -> Result<(), ExecError> {
        if self.exprs.is_empty() {
            return Ok(());
        }
        let values = self
            .exprs
            .iter()
            .map(|e| e.eval(row, cx))
            .collect::<Result<Vec<_>, _>>()?;
        out.push(values);
        Ok(())
    }
}

/// The rows an UPDATE or DELETE changes: a scan of the table (sequential
/// or through an index) that returns the rows its WHERE matches, and that
/// WHERE whole, to check a newer version of a row against.
pub struct ChangeTarget {
    pub table: Arc<TableDef>,
    pub scan: Box<dyn PlanNode>,
    pub condition: Option<Expr>,
}

/// Refuses NULL in a NOT NULL column, then encodes `row` as written by
/// (`xid`, `cid`), appending it to `out` (unchanged on an error).
fn encode_row(
    table: &TableDef,
    row: &[Value],
    xid: Xid,
    cid: CommandId,
    out: &mut Vec<u8>,
) -> Result<(), ExecError> {
    for (column, v) in table.columns.iter().zip(row) {
        if column.not_null && v.is_null() {
            return Err(ExecError::NotNull {
                table: table.name().to_string(),
                column: column.name.clone(),
            });
        }
        if let Some(ty) = v.column_type() {
            if !column.ty.holds(v) {
                return Err(ExecError::ColumnType {
                    table: table.name().to_string(),
                    column: column.name.clone(),
                    expected: column.ty.name(),
                    found: ty.name(),
                });
            }
        }
    }
    Ok(encode_into(&table.heap.types, row, xid, cid, out)?)
}

/// Tuples a bulk load gathers before inserting them together, and bytes
/// (PostgreSQL's COPY buffers 1000 tuples or 64 kB): enough to fill a few
/// pages, so that each page is filled, and logged, at once
/// (`Heap::insert_batch`).
const BULK_INSERT_TUPLES_MAX: usize = 1000;
const BULK_INSERT_BYTES_MAX: usize = 64 * 1024;

/// Inserts rows into a table as one statement's writes: the target page
/// stays pinned between rows (a bulk-write ring for loads) until
/// [`InsertSink::finish`]. A bulk load gathers its tuples and inserts them
/// a batch at a time ([`InsertSink::flush`]); the statement does not see
/// its own rows, so nothing can tell.
pub(crate) struct InsertSink {
    db: LocalArc<Database>,
    table: Arc<TableDef>,
    /// The inserting transaction and command, and how its unique checks
    /// wait (made once: a row-at-a-time INSERT flushes per row).
    by: Writer,
    /// The xmin and cmin each tuple is written with: `by`'s, or those of
    /// a frozen load (see [`InsertSink::frozen`]).
    stamp: (Xid, CommandId),
    state: InsertState,
    inserted: u64,
    bulk: bool,
    /// A bulk load's gathered tuples, one after another, and where each
    /// ends.
    batch: Vec<u8>,
    batch_ends: Vec<usize>,
    /// The table's indexes, and the gathered rows for their entries
    /// (kept only if there are indexes).
    indexes: TableIndexes,
    batch_rows: Vec<Vec<Value>>,
    tids: Vec<Tid>,
}

impl InsertSink {
    pub(crate) fn new(
        s: &Session,
        table: Arc<TableDef>,
        (xid, cid): (Xid, CommandId),
        bulk: bool,
    ) -> InsertSink {
        let db = s.db().clone();
        let indexes = TableIndexes::of(&db, &table);
        InsertSink {
            indexes,
            batch_rows: Vec::new(),
            tids: Vec::new(),
            state: if bulk {
                InsertState::bulk(db.pool().nbuffers())
            } else {
                InsertState::default()
            },
            db,
            table,
            by: Writer {
                xid,
                cid,
                waits: s.wait_limits(),
            },
            stamp: (xid, cid),
            inserted: 0,
            bulk,
            batch: Vec::new(),
            batch_ends: Vec::new(),
        }
    }

    /// A bulk load of frozen rows (COPY FREEZE) for transaction `xid`,
    /// which created or truncated the table: the rows are written with
    /// the frozen xmin, visible to every command and transaction without
    /// a look at who wrote them, and the pages they fill are all-visible
    /// at once (`InsertState::frozen_load`). The caller has checked the
    /// condition; before the commit nobody else can read the table, and
    /// no command of `xid` reading it is still running (a statement's
    /// reads end with it, and a portal's rows are made at its first
    /// Execute).
    pub(crate) fn frozen(
        s: &Session,
        table: Arc<TableDef>,
        (xid, cid): (Xid, CommandId),
    ) -> InsertSink {
        let nbuffers = s.db().pool().nbuffers();
        InsertSink {
            stamp: (FROZEN_XID, 0),
            state: InsertState::frozen_load(nbuffers, xid),
            ..InsertSink::new(s, table, (xid, cid), true)
        }
    }

    /// Adds `row`, encoded, to the rows to insert (errors here are the
    /// row's: NULL in a NOT NULL column, a wrong type, too large); call
    /// [`InsertSink::flush_if_due`] after it.
    pub(crate) fn push_row(&mut self, row: &[Value]) -> Result<(), ExecError> {
        let (xmin, cmin) = self.stamp;
        encode_row(&self.table, row, xmin, cmin, &mut self.batch)?;
        self.batch_ends.push(self.batch.len());
        if !self.indexes.is_empty() {
            self.batch_rows.push(row.to_vec());
        }
        Ok(())
    }

    /// Inserts the rows pushed: at once outside a bulk load, else when the
    /// batch is full.
    pub(crate) fn flush_if_due(&mut self, s: &mut Session) -> Result<(), ExecError> {
        if !self.bulk
            || self.batch_ends.len() >= BULK_INSERT_TUPLES_MAX
            || self.batch.len() >= BULK_INSERT_BYTES_MAX
        {
            self.flush(s)?;
        }
        Ok(())
    }

    /// Inserts the tuples gathered, as one batch (`Heap::insert_batch`); a
    /// bulk load must call it after its last row (a failed statement need
    /// not: its rows are never visible).
    pub(crate) fn flush(&mut self, s: &mut Session) -> Result<(), ExecError> {
        if self.batch_ends.is_empty() {
            return Ok(());
        }
        let mut tuples: Vec<&[u8]> = Vec::with_capacity(self.batch_ends.len());
        let mut start = 0;
        for &end in &self.batch_ends {
            tuples.push(&self.batch[start..end]);
            start = end;
        }
        self.tids.clear();
        self.db.heap().insert_batch(
            &mut s.buf,
            &self.table.heap,
            &tuples,
            &mut self.state,
            &mut self.tids,
        )?;
        debug_assert_eq!(self.tids.len(), tuples.len(), "a TID for each tuple");
        // The index entries come after the rows are in the heap: a unique
        // check looks at the rows an equal key points to.
        for (row, &tid) in self.batch_rows.iter().zip(&self.tids) {
            self.indexes
                .insert_row(&self.db, &mut s.buf, &self.table, row, tid, &self.by)?;
        }
        self.inserted += tuples.len() as u64;
        self.batch.clear();
        self.batch_ends.clear();
        self.batch_rows.clear();
        Ok(())
    }

    /// Releases the target page (whether the statement failed or not)
    /// and returns how many rows were inserted. Rows still gathered are
    /// dropped: a statement that succeeded has flushed them.
    pub(crate) fn finish(mut self, s: &mut Session) -> u64 {
        self.state.finish(&mut s.buf);
        self.inserted
    }
}

pub(crate) fn run_insert(
    plan: &mut InsertPlan,
    s: &mut Session,
    snap: &mut StatementSnapshot,
    eval: &mut EvalContext,
) -> Result<Outcome, ExecError> {
    let ids = s.xid(snap)?;
    let mut sink = InsertSink::new(s, Arc::clone(&plan.table), ids, plan.bulk);
    let mut cx = ExecCx {
        session: s,
        snapshot: snap.get(),
        eval,
    };
    let returning = &plan.returning;
    let mut returned = Vec::new();
    let result = drain(plan.input.as_mut(), &mut cx, |cx, batch| {
        for row in &batch.rows {
            sink.push_row(row)?;
            sink.flush_if_due(cx.session)?;
            returning.add(row, cx, &mut returned)?;
        }
        Ok(Flow::Continue)
    })
    .and_then(|()| sink.flush(s));
    let inserted = sink.finish(s);
    result?;
    debug_assert!(returning.exprs.is_empty() || returned.len() as u64 == inserted);
    plan.returning.returned += returned.len() as u64;
    Ok(Outcome {
        rows: returned,
        count: inserted,
    })
}

/// Most versions of one row a read-committed UPDATE or DELETE follows when
/// other transactions keep changing it under it (a bound: each step means
/// another transaction committed a change of that very row meanwhile).
const UPDATE_CHAIN_MAX: usize = 1000;

/// Where a read-committed statement goes after the row of `table` it was
/// changing or locking turned out changed by transaction `by`, which
/// committed: to the newer version (`newer`), if it still exists and
/// still passes the statement's WHERE clause `condition`, with its values
/// (every column); None if the row is gone or no longer matches.
/// PostgreSQL's EvalPlanQual: the statement acts on the row as it is now
/// rather than failing. Under repeatable read it fails, as there.
pub(crate) fn follow_update_chain(
    cx: &mut ExecCx,
    table: &TableDef,
    condition: Option<&Expr>,
    by: Xid,
    newer: Option<Tid>,
) -> Result<Option<(Tid, Vec<Value>)>, ExecError> {
    let s = &mut *cx.session;
    if s.isolation() == Isolation::RepeatableRead {
        return Err(HeapError::ConcurrentUpdate {
            table: table.name().to_string(),
        }
        .into());
    }
    let Some(newer) = newer else {
        return Ok(None);
    };
    let db = s.db().clone();
    let Some(bytes) = db
        .heap()
        .fetch_version(&mut s.buf, &table.heap, newer, by)?
    else {
        return Ok(None);
    };
    let mut row = Vec::with_capacity(table.columns.len());
    decode(
        &table.heap.types,
        &bytes,
        &vec![true; table.columns.len()],
        &mut row,
    )?;
    let matches = match condition {
        Some(condition) => is_true(&*condition.eval_ref(&row, cx)?),
        None => true,
    };
    Ok(matches.then_some((newer, row)))
}

/// Refuses to follow a row's update chain past [`UPDATE_CHAIN_MAX`].
pub(crate) fn chain_step(table: &TableDef, step: usize) -> Result<(), ExecError> {
    if step >= UPDATE_CHAIN_MAX {
        return Err(HeapError::ConcurrentUpdate {
            table: table.name().to_string(),
        }
        .into());
    }
    Ok(())
}

/// Pulls the rows `target` matches, a batch at a time, and calls `change`
/// for each (with the session, its tid and values); returns how many
/// `change` counted.
fn change_rows(
    target: &mut ChangeTarget,
    s: &mut Session,
    snap: &StatementSnapshot,
    eval: &mut EvalContext,
    mut change: impl FnMut(&mut ExecCx, &ChangeTarget, Tid, Vec<Value>) -> Result<bool, ExecError>,
) -> Result<u64, ExecError> {
    let mut changed = 0;
    let mut cx = ExecCx {
        session: s,
        snapshot: snap.get(),
        eval,
    };
    let mut batch = super::plan::Batch::default();
    let result = loop {
        batch.clear();
        // A page's matching rows at a time.
        if let Err(e) = target.scan.next_batch(&mut cx, &mut batch, usize::MAX) {
            break Err(e);
        }
        if batch.is_empty() {
            break Ok(());
        }
        let rows = batch.tids.drain(..).zip(batch.rows.drain(..));
        let applied = rows.into_iter().try_for_each(|(tid, row)| {
            if change(&mut cx, target, tid, row)? {
                changed += 1;
            }
            Ok(())
        });
        if let Err(e) = applied {
            break Err(e);
        }
    };
    target.scan.close(&mut cx);
    result.map(|()| changed)
}

pub(crate) fn run_update(
    plan: &mut UpdatePlan,
    s: &mut Session,
    snap: &mut StatementSnapshot,
    eval: &mut EvalContext,
) -> Result<Outcome, ExecError> {
    let (xid, cid) = s.xid(snap)?;
    let by = Writer {
        xid,
        cid,
        waits: s.wait_limits(),
    };
    let db = s.db().clone();
    let table = Arc::clone(&plan.target.table);
    let indexes = TableIndexes::of(&db, &table);
    let mut state = InsertState::default();
    let assignments = &plan.assignments;
    let returning = &plan.returning;
    let mut returned = Vec::new();
    let mut hot_updates = 0;
    let result = change_rows(&mut plan.target, s, snap, eval, |cx, target, tid, old| {
        let (mut tid, mut old) = (tid, old);
        let mut step = 0;
        loop {
            chain_step(&table, step)?;
            step += 1;
            let mut new = old.clone();
            for (column, e) in assignments {
                let slot = new.get_mut(*column).ok_or(ExecError::Internal(
                    "UPDATE assigns a column the row does not have",
                ))?;
                *slot = e.eval(&old, cx)?;
            }
            let s = &mut *cx.session;
            let mut tuple = Vec::new();
            encode_row(&table, &new, xid, cid, &mut tuple)?;
            let keep_entries = indexes.keep_entries(&old, &new);
            let (new_tid, hot) = db.heap().insert_version(
                &mut s.buf,
                &table.heap,
                &mut tuple,
                &mut state,
                tid,
                keep_entries,
            )?;
            // As PostgreSQL's heap_update: a key changes only if the image
            // of a key column does (assigning the same value changes none).
            let mode = if indexes.keys_change(&old, &new) {
                RowLockMode::Update
            } else {
                RowLockMode::NoKeyUpdate
            };
            let outcome = db.heap().try_delete(
                &mut s.buf,
                &table.heap,
                tid,
                &by,
                Some(new_tid),
                hot,
                mode,
            )?;
            if outcome == DeleteOutcome::Deleted {
                // A HOT version is found through the old one's entries.
                // Any other gets its own, after the old one is marked: a
                // unique check must see it deleted by us, not live.
                if hot {
                    hot_updates += 1;
                } else {
                    indexes.insert_row(&db, &mut s.buf, &table, &new, new_tid, &by)?;
                }
                returning.add(&new, cx, &mut returned)?;
                return Ok(true);
            }
            // The new version must not survive: this command inserted and
            // deleted it, so nobody ever sees it.
            db.heap()
                .delete(&mut s.buf, &table.heap, new_tid, &by, None)?;
            let DeleteOutcome::Changed { by, newer } = outcome else {
                // Already changed by this transaction: the statement's
                // snapshot should not have shown it.
                return Ok(false);
            };
            match follow_update_chain(cx, &table, target.condition.as_ref(), by, newer)? {
                Some((next, values)) => (tid, old) = (next, values),
                None => return Ok(false),
            }
        }
    });
    state.finish(&mut s.buf);
    let count = result?;
    db.statistics().note_updates(table.oid, count, hot_updates);
    plan.returning.returned += returned.len() as u64;
    Ok(Outcome {
        rows: returned,
        count,
    })
}

pub(crate) fn run_delete(
    plan: &mut DeletePlan,
    s: &mut Session,
    snap: &mut StatementSnapshot,
    eval: &mut EvalContext,
) -> Result<Outcome, ExecError> {
    let (xid, cid) = s.xid(snap)?;
    let by = Writer {
        xid,
        cid,
        waits: s.wait_limits(),
    };
    let db = s.db().clone();
    let table = Arc::clone(&plan.target.table);
    let returning = &plan.returning;
    let mut returned = Vec::new();
    let deleted = change_rows(&mut plan.target, s, snap, eval, |cx, target, tid, row| {
        let (mut tid, mut row) = (tid, row);
        let mut step = 0;
        loop {
            chain_step(&table, step)?;
            step += 1;
            match db.heap().try_delete(
                &mut cx.session.buf,
                &table.heap,
                tid,
                &by,
                None,
                false,
                RowLockMode::Update,
            )? {
                DeleteOutcome::Deleted => {
                    returning.add(&row, cx, &mut returned)?;
                    return Ok(true);
                }
                DeleteOutcome::AlreadyOurs => return Ok(false),
                DeleteOutcome::Changed { by, newer } => {
                    match follow_update_chain(cx, &table, target.condition.as_ref(), by, newer)? {
                        Some(newer) => (tid, row) = newer,
                        None => return Ok(false),
                    }
                }
            }
        }
    })?;
    plan.returning.returned += returned.len() as u64;
    Ok(Outcome {
        rows: returned,
        count: deleted,
    })
}
