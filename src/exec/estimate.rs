//! The planner's estimate of a node, as EXPLAIN shows it:
//! `(cost=startup..total rows=n width=w)`.
//!
//! The planner (in `sql`) computes estimates while it chooses a plan and
//! attaches each to the node it built by wrapping it in [`Estimated`],
//! which passes everything else through; a node without one shows none.
//! A parent's estimate is made from its children's ([`estimate_of`]), so
//! the planner reads them back from the nodes rather than carrying them
//! beside.

use std::sync::Arc;

use super::explain::ExplainOptions;
use super::expr::Expr;
use super::plan::{Batch, Described, ExecCx, PlanNode};
use super::ExecError;
use crate::catalog::TableDef;

/// What the planner expects of a node, in PostgreSQL's cost units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// Cost until the first row can be returned.
    pub startup: f64,
    /// Cost of returning every row.
    pub total: f64,
    /// Rows returned per run.
    pub rows: f64,
    /// Average bytes of a returned row.
    pub width: usize,
}

impl Estimate {
    /// An estimate of `rows` rows of `width` bytes costing `total`, all
    /// of it before the first row if `startup` says so.
    pub fn new(startup: f64, total: f64, rows: f64, width: usize) -> Estimate {
        debug_assert!(
            startup >= 0.0 && startup <= total + 1e-9 && rows >= 0.0,
            "an estimate's startup cost lies within its total, its rows are not negative: {startup}..{total} rows={rows}"
        );
        Estimate {
            startup,
            total,
            rows,
            width,
        }
    }

    /// As EXPLAIN prints it (PostgreSQL's format).
    pub fn label(&self) -> String {
        format!(
            "(cost={:.2}..{:.2} rows={:.0} width={})",
            self.startup, self.total, self.rows, self.width
        )
    }
}

/// Rows PostgreSQL assumes of a source it cannot size (a function scan).
pub const UNKNOWN_ROWS: f64 = 1000.0;

/// `node`'s estimate; a node the planner gave none (which EXPLAIN shows
/// without one) is taken as [`UNKNOWN_ROWS`] rows costing nothing.
pub fn estimate_of(node: &dyn PlanNode) -> Estimate {
    node.estimate()
        .unwrap_or_else(|| Estimate::new(0.0, 0.0, UNKNOWN_ROWS, 0))
}

/// `node` with the planner's estimate of it.
pub struct Estimated {
    node: Box<dyn PlanNode>,
    estimate: Estimate,
}

impl Estimated {
    pub fn wrap(node: Box<dyn PlanNode>, estimate: Estimate) -> Box<dyn PlanNode> {
        Box::new(Estimated { node, estimate })
    }
}

impl PlanNode for Estimated {
    fn next_batch(
        &mut self,
        cx: &mut ExecCx,
        out: &mut Batch,
        max_rows: usize,
    ) -> Result<(), ExecError> {
        self.node.next_batch(cx, out, max_rows)
    }

    fn rescan(&mut self, cx: &mut ExecCx) -> Result<(), ExecError> {
        self.node.rescan(cx)
    }

    fn close(&mut self, cx: &mut ExecCx) {
        self.node.close(cx)
    }

    fn bound_rows(&mut self, rows: u64) {
        self.node.bound_rows(rows)
    }

    fn describe(&self, opts: &ExplainOptions) -> Option<Described> {
        self.node.describe(opts)
    }

    fn children(&self) -> Vec<&dyn PlanNode> {
        self.node.children()
    }

    fn expressions(&self) -> Vec<&Expr> {
        self.node.expressions()
    }

    fn tables(&self, out: &mut Vec<Arc<TableDef>>) {
        self.node.tables(out)
    }

    fn row_locked_tables(&self, out: &mut Vec<u32>) {
        self.node.row_locked_tables(out)
    }

    fn keeps_statement_state(&self) -> bool {
        self.node.keeps_statement_state()
    }

    fn estimate(&self) -> Option<Estimate> {
        Some(self.estimate)
    }
}
