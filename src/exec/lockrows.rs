//! LockRows (PostgreSQL's nodeLockRows): `SELECT … FOR UPDATE`, `FOR NO
//! KEY UPDATE`, `FOR SHARE` and `FOR KEY SHARE` lock each row the node
//! returns, until the transaction ends.
//!
//! ```text
//!   Limit ◀─ LockRows ◀─ [Sort] ◀─ Project ◀─ scan of the table (WHERE)
//! ```
//!
//! The node sits where PostgreSQL's does: above the scan, its filter and
//! any sort, below LIMIT, so that `ORDER BY … LIMIT 1 FOR UPDATE SKIP
//! LOCKED` locks the one row it returns and not every row the WHERE
//! matches. Its child's rows carry their tuple ids (a scan gives them, a
//! projection and a sort keep them), by which it locks them
//! (`Heap::lock_tuple`). It passes no row bound down: a row it leaves out
//! must be made up by another, so a sort below it is never cut to the
//! LIMIT's rows.
//!
//! A row another transaction holds in a conflicting mode is waited for
//! (as an UPDATE waits, through the wait-for graph with the session's
//! `deadlock_timeout`, `lock_timeout`, `statement_timeout` and cancel),
//! left out (`SKIP LOCKED`), or fails the statement at once (`NOWAIT`,
//! 55P03). A row whose holder updated it and committed is, under READ
//! COMMITTED, followed to its newest version, which is checked against
//! the query's WHERE again and locked in its place if it still matches
//! (EvalPlanQual: `dml::follow_update_chain`, as an UPDATE does), the
//! row returned then being made from that version by the query's select
//! list; a deleted row, or one that no longer matches, is left out.
//! Under REPEATABLE READ such a row fails the statement (40001). As in
//! PostgreSQL a newer version is not sorted again: it comes out where
//! the row it replaces was.

use std::sync::Arc;

use super::dml::{chain_step, follow_update_chain};
use super::explain::ExplainOptions;
use super::expr::Expr;
use super::plan::{Batch, Described, ExecCx, NodeCounts, PlanNode};
use super::ExecError;
use crate::catalog::TableDef;
use crate::heap::{LockOutcome, LockWait, Tid, Writer};
use crate::txn::RowLockMode;
use crate::types::Value;

/// What a LockRows node locks, and how it makes a row from a newer
/// version of one.
pub struct LockRowsNode {
    pub child: Box<dyn PlanNode>,
    pub table: Arc<TableDef>,
    pub mode: RowLockMode,
    pub wait: LockWait,
    /// The query's WHERE over a row of the table (every condition, those
    /// an index searches by too): what a newer version must still pass.
    pub condition: Option<Expr>,
    /// The child's columns over a row of the table (the select list and
    /// hidden sort keys of the projection below): the row a newer version
    /// gives. Copies of the projection's expressions, so EXPLAIN shows
    /// their subqueries under the projection only.
    pub outputs: Vec<Expr>,
    pub counts: NodeCounts,
    input: Batch,
}

impl LockRowsNode {
    pub fn new(
        child: Box<dyn PlanNode>,
        table: Arc<TableDef>,
        mode: RowLockMode,
        wait: LockWait,
        condition: Option<Expr>,
        outputs: Vec<Expr>,
    ) -> LockRowsNode {
        LockRowsNode {
            child,
            table,
            mode,
            wait,
            condition,
            outputs,
            counts: NodeCounts::default(),
            input: Batch::default(),
        }
    }

    /// Locks the row at `tid` (whose output is `row`), following it to
    /// its newest version if it was updated (see the module comment).
    /// Returns the row to pass up and where its version is, or None for
    /// a row left out.
    fn lock_row(
        &self,
        cx: &mut ExecCx,
        by: &Writer,
        tid: Tid,
        row: Vec<Value>,
    ) -> Result<Option<(Tid, Vec<Value>)>, ExecError> {
        let db = cx.session.db().clone();
        let mut tid = tid;
        let mut newest: Option<Vec<Value>> = None;
        let mut step = 0;
        loop {
            chain_step(&self.table, step)?;
            step += 1;
            let outcome = db.heap().lock_tuple(
                &mut cx.session.buf,
                &self.table.heap,
                tid,
                by,
                self.mode,
                self.wait,
            )?;
            match outcome {
                LockOutcome::Locked => {
                    let row = match newest {
                        None => row,
                        Some(values) => self
                            .outputs
                            .iter()
                            .map(|e| e.eval(&values, cx))
                            .collect::<Result<Vec<Value>, _>>()?,
                    };
                    return Ok(Some((tid, row)));
                }
                // The snapshot showed a version the transaction itself
                // has changed since (it has no row here any more).
                LockOutcome::Skipped | LockOutcome::SelfChanged => return Ok(None),
                LockOutcome::Changed { by: updater, newer } => {
                    match follow_update_chain(
                        cx,
                        &self.table,
                        self.condition.as_ref(),
                        updater,
                        newer,
                    )? {
                        Some((next, values)) => (tid, newest) = (next, Some(values)),
                        None => return Ok(None),
                    }
                }
            }
        }
    }
}

impl PlanNode for LockRowsNode {
    fn next_batch(
        &mut self,
        cx: &mut ExecCx,
        out: &mut Batch,
        max_rows: usize,
    ) -> Result<(), ExecError> {
        // Until a row is locked or the child ends: each round takes rows
        // of the child, so it ends with the child's rows.
        while out.is_empty() {
            self.input.clear();
            self.child.next_batch(cx, &mut self.input, max_rows)?;
            if self.input.is_empty() {
                break;
            }
            if self.input.tids.len() != self.input.rows.len() {
                return Err(ExecError::Internal(
                    "the rows under a LockRows node do not carry their tuple ids",
                ));
            }
            // A lock needs the transaction's id (PostgreSQL's
            // heap_lock_tuple takes one too): the locker's xid in the
            // tuple is what others wait for.
            let (xid, cid) = cx.session.write_ids()?;
            let by = Writer {
                xid,
                cid,
                waits: cx.session.wait_limits(),
            };
            let rows = std::mem::take(&mut self.input.rows);
            let tids = std::mem::take(&mut self.input.tids);
            for (tid, row) in tids.into_iter().zip(rows) {
                match self.lock_row(cx, &by, tid, row)? {
                    Some((tid, row)) => {
                        out.rows.push(row);
                        out.tids.push(tid);
                    }
                    None => self.counts.removed += 1,
                }
            }
        }
        self.counts.rows += out.len() as u64;
        Ok(())
    }

    fn rescan(&mut self, cx: &mut ExecCx) -> Result<(), ExecError> {
        self.counts.rescans += 1;
        self.child.rescan(cx)
    }

    fn close(&mut self, cx: &mut ExecCx) {
        self.child.close(cx);
    }

    fn describe(&self, _: &ExplainOptions) -> Option<Described> {
        Some(Described {
            title: "LockRows".into(),
            counts: self.counts,
            details: Vec::new(),
        })
    }

    fn children(&self) -> Vec<&dyn PlanNode> {
        vec![self.child.as_ref()]
    }

    fn row_locked_tables(&self, out: &mut Vec<u32>) {
        out.push(self.table.oid);
        self.child.row_locked_tables(out);
    }
}
