//! A query run a row limit's worth at a time: what a portal of the
//! extended query protocol is while its client fetches (an Execute with a
//! row count, then more Executes for the rest).
//!
//! The run keeps its plan tree, with whatever its nodes hold between
//! batches (a scan's read stream and pins, a sort's sorted rows), its
//! snapshot and its parameters. Between fetches it belongs to its
//! transaction (`Session::suspend`), which closes it if it ends first;
//! other statements of the transaction run meanwhile. Each fetch pulls the
//! tree until the limit is reached or the tree ends, asking no node for
//! more rows than the limit leaves, so nothing is computed and held past
//! it: a portal of a billion rows fetched a hundred at a time holds a
//! batch, never the result.

use super::expr::EvalContext;
use super::plan::{Batch, ExecCx, QueryPlan, BATCH_ROWS_MAX};
use super::{lock_plan_tables, ExecError, Plan};
use crate::database::{Session, StatementSnapshot, SuspendedRun};
use crate::types::Value;

/// A query partway through its rows.
pub struct QueryRun {
    plan: QueryPlan,
    snapshot: StatementSnapshot,
    eval: EvalContext,
    /// The tree ended (or failed) and is closed: nothing more to fetch.
    ended: bool,
}

/// What one fetch did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fetched {
    /// Rows it returned.
    pub rows: u64,
    /// The query has no more rows (its tree is closed).
    pub ended: bool,
}

impl QueryRun {
    /// Starts `plan`, a query's, with `snapshot`, holding its tables as
    /// any run does.
    pub fn start(
        plan: Plan,
        session: &mut Session,
        snapshot: StatementSnapshot,
    ) -> Result<QueryRun, ExecError> {
        lock_plan_tables(session, &plan)?;
        let Plan::Query(plan) = plan else {
            panic!("only a query's rows are fetched a limit at a time")
        };
        Ok(QueryRun {
            plan,
            snapshot,
            eval: EvalContext::new(),
            ended: false,
        })
    }

    /// Hands `out` the query's next rows, at most `limit` (at least 1),
    /// a batch at a time. Stops at the limit without looking further, so
    /// a run that returned exactly its last rows learns it ended at the
    /// next fetch (as PostgreSQL's portal does). On an error, and at the
    /// end, the tree is closed.
    pub fn fetch(
        &mut self,
        session: &mut Session,
        limit: u64,
        out: &mut dyn FnMut(&mut Vec<Vec<Value>>) -> std::io::Result<()>,
    ) -> Result<Fetched, ExecError> {
        assert!(limit >= 1, "a fetch asks for a row at least");
        if self.ended {
            return Ok(Fetched {
                rows: 0,
                ended: true,
            });
        }
        let width = self.plan.width;
        let root = self.plan.root.as_mut();
        let mut cx = ExecCx {
            session,
            snapshot: self.snapshot.get(),
            eval: &mut self.eval,
        };
        let mut batch = Batch::default();
        let mut rows = 0u64;
        let result = loop {
            if rows == limit {
                break Ok(false);
            }
            batch.clear();
            let want = usize::try_from(limit - rows)
                .unwrap_or(usize::MAX)
                .min(BATCH_ROWS_MAX);
            if let Err(e) = root.next_batch(&mut cx, &mut batch, want) {
                break Err(e);
            }
            if batch.is_empty() {
                break Ok(true);
            }
            assert!(
                batch.rows.len() <= want,
                "a node returned {} rows where {want} were asked for",
                batch.rows.len()
            );
            rows += batch.rows.len() as u64;
            for row in &mut batch.rows {
                row.truncate(width);
            }
            if let Err(e) = out(&mut batch.rows) {
                break Err(ExecError::ResultOutput {
                    message: e.to_string(),
                });
            }
        };
        match result {
            Ok(false) => Ok(Fetched { rows, ended: false }),
            Ok(true) => {
                root.close(&mut cx);
                self.ended = true;
                Ok(Fetched { rows, ended: true })
            }
            Err(e) => {
                root.close(&mut cx);
                self.ended = true;
                Err(e)
            }
        }
    }
}

impl SuspendedRun for QueryRun {
    fn close(&mut self, session: &mut Session) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        let mut cx = ExecCx {
            session,
            snapshot: self.snapshot.get(),
            eval: &mut self.eval,
        };
        self.plan.root.close(&mut cx);
    }

    fn reads_table(&self, oid: u32) -> bool {
        let mut tables = Vec::new();
        self.plan.root.tables(&mut tables);
        tables.iter().any(|t| t.oid == oid)
    }
}
