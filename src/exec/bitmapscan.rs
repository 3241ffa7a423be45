//! Bitmap scans: a table's rows found through one or more B-tree indexes,
//! read in block order.
//!
//! ```text
//! Bitmap Heap Scan on t
//!   Recheck Cond: ((a = 1) OR (b < 3))
//!   ->  BitmapOr
//!         ->  Bitmap Index Scan on t_a_idx
//!               Index Cond: (a = 1)
//!         ->  Bitmap Index Scan on t_b_idx
//!               Index Cond: (b < 3)
//! ```
//!
//! The nodes below the heap scan return a [`TidBitmap`], not rows
//! ([`BitmapNode`], PostgreSQL's MultiExecProcNode): a Bitmap Index Scan
//! fills one from a B-tree search (the same search an index scan makes,
//! [`scan_keys`]), BitmapAnd intersects its children's, BitmapOr unites
//! them. Each bitmap is kept within `work_mem`, going lossy per page
//! beyond it. The Bitmap Heap Scan builds the bitmap on its first pull
//! (and again after each rescan, when the conditions' parameters may have
//! changed) and reads its pages through a read stream in block order
//! ([`HeapBitmapScan`]), so every heap page is read once and neighbouring
//! pages are read by one I/O.
//!
//! The heap scan rechecks the index conditions on every row it returns,
//! as the index scan does: on a lossy page that is what picks the
//! matching rows out of the page, and elsewhere it costs a comparison and
//! guards the cases where the bitmap holds more than the conditions
//! match (an exact page kept by BitmapAnd against a lossy one, ranges
//! searched wider than the conditions).

use std::sync::Arc;

use super::estimate::Estimate;
use super::explain::{
    leaf_pages_text, push_buffers, push_filter, scan_title, stream_details, ExplainOptions,
};
use super::expr::Expr;
use super::indexscan::{scan_keys, IndexQual};
use super::plan::{keep_passing, Batch, Described, ExecCx, Filter, NodeCounts, PlanNode};
use super::value::is_true;
use super::ExecError;
use crate::btree::{BtreeScan, Direction, IndexDesc};
use crate::buffer::ReadCounts;
use crate::catalog::{IndexDef, TableDef};
use crate::heap::tuple::decode;
use crate::heap::{BitmapScanStats, HeapBitmapScan, ScanControl};
use crate::tidbitmap::TidBitmap;
use crate::types::Value;

/// A node that returns a TID bitmap instead of rows: the children of a
/// Bitmap Heap Scan, BitmapAnd and BitmapOr. Its [`PlanNode`] side is for
/// EXPLAIN and the plan's walks; pulling rows from it is an error.
pub trait BitmapNode: PlanNode {
    /// The TIDs its conditions match, with their values now.
    fn bitmap(&mut self, cx: &mut ExecCx) -> Result<TidBitmap, ExecError>;
}

/// What a bitmap node answers to a pull for rows: it has none to give.
fn no_rows() -> Result<(), ExecError> {
    Err(ExecError::Internal(
        "a bitmap node was pulled for rows; it gives its parent a bitmap",
    ))
}

/// Counts one more build of a bitmap node: as EXPLAIN's loops.
fn count_build(counts: &mut NodeCounts, built: &mut bool) {
    if std::mem::replace(built, true) {
        counts.rescans += 1;
    }
}

/// A B-tree search whose matches go into a bitmap.
pub struct BitmapIndexScanNode {
    pub index: Arc<IndexDef>,
    desc: IndexDesc,
    quals: Vec<IndexQual>,
    /// `Index Cond:`'s text.
    label: String,
    /// `rows` counts the TIDs found, as PostgreSQL's actual rows do.
    counts: NodeCounts,
    built: bool,
    buffers: ReadCounts,
    leaf_pages: u64,
    /// Of `leaf_pages`, those taken from the scan's read-ahead stream.
    leaf_pages_read_ahead: u64,
    searches: u64,
    /// The planner's estimate (the bitmap's cost, its TIDs).
    pub estimate: Option<Estimate>,
}

impl BitmapIndexScanNode {
    pub fn new(
        table: &TableDef,
        index: Arc<IndexDef>,
        quals: Vec<IndexQual>,
        label: String,
    ) -> BitmapIndexScanNode {
        debug_assert!(
            !quals.is_empty(),
            "a bitmap index scan searches by something"
        );
        BitmapIndexScanNode {
            desc: index.desc(table),
            index,
            quals,
            label,
            counts: NodeCounts::default(),
            built: false,
            buffers: ReadCounts::default(),
            leaf_pages: 0,
            leaf_pages_read_ahead: 0,
            searches: 0,
            estimate: None,
        }
    }

    fn fill(&mut self, cx: &mut ExecCx, bitmap: &mut TidBitmap) -> Result<(), ExecError> {
        let db = cx.session.db().clone();
        let keys = scan_keys(&self.quals, &self.desc.spec, cx)?;
        let mut scan = BtreeScan::new(self.desc.clone(), keys, Direction::Forward, false)
            .reading_leaves_ahead(cx.session.stream_limits());
        let result = (|| {
            while let Some(batch) = scan.next_batch(db.btree(), &mut cx.session.buf)? {
                self.counts.rows += batch.items.len() as u64;
                bitmap.add_all(batch.items.iter().map(|i| i.tid))?;
            }
            Ok(())
        })();
        // A bitmap that failed to grow stops the scan before its end,
        // with leaves read ahead still pinned.
        scan.release(&mut cx.session.buf);
        self.leaf_pages += scan.leaf_pages;
        self.leaf_pages_read_ahead += scan.leaf_pages_read_ahead;
        self.searches += scan.descents;
        result
    }
}

impl BitmapNode for BitmapIndexScanNode {
    fn bitmap(&mut self, cx: &mut ExecCx) -> Result<TidBitmap, ExecError> {
        count_build(&mut self.counts, &mut self.built);
        let mut bitmap = TidBitmap::new(cx.session.settings.work_mem_bytes());
        let before = cx.session.buf.counts;
        let result = self.fill(cx, &mut bitmap);
        self.buffers.add(cx.session.buf.counts.since(before));
        result.map(|()| bitmap)
    }
}

impl PlanNode for BitmapIndexScanNode {
    fn next_batch(&mut self, _: &mut ExecCx, _: &mut Batch, _: usize) -> Result<(), ExecError> {
        no_rows()
    }

    fn estimate(&self) -> Option<Estimate> {
        self.estimate
    }

    fn rescan(&mut self, _: &mut ExecCx) -> Result<(), ExecError> {
        // Each build searches afresh: nothing is kept between them.
        Ok(())
    }

    fn close(&mut self, _: &mut ExecCx) {}

    fn describe(&self, opts: &ExplainOptions) -> Option<Described> {
        let mut details = vec![format!("Index Cond: {}", self.label)];
        if opts.analyze {
            // Over every loop, as PostgreSQL 18 counts them (rows and
            // heap fetches are per loop).
            details.push(format!("Index Searches: {}", self.searches));
            if opts.buffers {
                push_buffers(&mut details, self.buffers.hits, self.buffers.reads);
            }
            if opts.io {
                details.push(format!(
                    "Index: {}",
                    leaf_pages_text(self.leaf_pages, self.leaf_pages_read_ahead)
                ));
            }
        }
        Some(Described {
            title: format!("Bitmap Index Scan on {}", self.index.name),
            counts: self.counts,
            details,
        })
    }

    fn children(&self) -> Vec<&dyn PlanNode> {
        Vec::new()
    }
}

/// Whether a [`BitmapSetNode`] intersects or unites its children's
/// bitmaps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BitmapSetOp {
    And,
    Or,
}

/// BitmapAnd or BitmapOr of two or more bitmap nodes.
pub struct BitmapSetNode {
    op: BitmapSetOp,
    inputs: Vec<Box<dyn BitmapNode>>,
    counts: NodeCounts,
    built: bool,
    /// The planner's estimate (the combined bitmap's cost, its TIDs).
    pub estimate: Option<Estimate>,
}

impl BitmapSetNode {
    pub fn new(op: BitmapSetOp, inputs: Vec<Box<dyn BitmapNode>>) -> BitmapSetNode {
        assert!(inputs.len() >= 2, "a {op:?} of fewer than two bitmaps");
        BitmapSetNode {
            op,
            inputs,
            counts: NodeCounts::default(),
            built: false,
            estimate: None,
        }
    }
}

impl BitmapNode for BitmapSetNode {
    fn bitmap(&mut self, cx: &mut ExecCx) -> Result<TidBitmap, ExecError> {
        count_build(&mut self.counts, &mut self.built);
        let (first, rest) = self.inputs.split_first_mut().expect("two or more");
        let mut result = first.bitmap(cx)?;
        for input in rest {
            // An empty intersection stays empty: the other searches
            // need not run (PostgreSQL stops there too).
            if self.op == BitmapSetOp::And && result.is_empty() {
                break;
            }
            let other = input.bitmap(cx)?;
            match self.op {
                BitmapSetOp::And => result.intersect(&other),
                BitmapSetOp::Or => result.union(&other),
            }
        }
        Ok(result)
    }
}

impl PlanNode for BitmapSetNode {
    fn next_batch(&mut self, _: &mut ExecCx, _: &mut Batch, _: usize) -> Result<(), ExecError> {
        no_rows()
    }

    fn estimate(&self) -> Option<Estimate> {
        self.estimate
    }

    fn rescan(&mut self, _: &mut ExecCx) -> Result<(), ExecError> {
        Ok(())
    }

    fn close(&mut self, _: &mut ExecCx) {}

    fn describe(&self, _: &ExplainOptions) -> Option<Described> {
        let title = match self.op {
            BitmapSetOp::And => "BitmapAnd",
            BitmapSetOp::Or => "BitmapOr",
        };
        Some(Described {
            title: title.into(),
            counts: self.counts,
            details: Vec::new(),
        })
    }

    fn children(&self) -> Vec<&dyn PlanNode> {
        self.inputs
            .iter()
            .map(|i| i.as_ref() as &dyn PlanNode)
            .collect()
    }
}

/// The rows of a table at the TIDs of a bitmap, read in block order (see
/// the module comment).
pub struct BitmapHeapScanNode {
    pub table: Arc<TableDef>,
    /// The name the statement gave it, if not its own.
    pub alias: Option<String>,
    /// Columns some expression reads; the others are not decoded.
    wanted: Vec<bool>,
    input: Box<dyn BitmapNode>,
    /// Every index condition, ANDed or ORed as the bitmap combines them,
    /// checked on each row (`Recheck Cond`).
    recheck: Filter,
    /// The conditions of the WHERE that no index searched by.
    pub filter: Option<Filter>,
    pub counts: NodeCounts,
    /// Rows the recheck removed, over every run.
    rechecked_out: u64,
    /// Boxed: a read stream is large.
    scan: Option<Box<HeapBitmapScan>>,
    /// Figures of every run that ended.
    stats: Option<BitmapScanStats>,
    ended: bool,
}

impl BitmapHeapScanNode {
    pub fn new(
        table: Arc<TableDef>,
        alias: Option<String>,
        wanted: Vec<bool>,
        input: Box<dyn BitmapNode>,
        recheck: Filter,
        filter: Option<Filter>,
    ) -> BitmapHeapScanNode {
        debug_assert_eq!(wanted.len(), table.columns.len());
        // The planner marks every column a condition reads as wanted: the
        // recheck and the filter find them decoded.
        for e in std::iter::once(&recheck.predicate).chain(filter.iter().map(|f| &f.predicate)) {
            assert!(
                e.columns_read().iter().all(|&c| wanted[c]),
                "a condition of a bitmap heap scan reads a column the scan does not decode"
            );
        }
        BitmapHeapScanNode {
            table,
            alias,
            wanted,
            input,
            recheck,
            filter,
            counts: NodeCounts::default(),
            rechecked_out: 0,
            scan: None,
            stats: None,
            ended: false,
        }
    }

    /// Ends the heap scan, if one runs, keeping its figures.
    fn end_scan(&mut self, cx: &mut ExecCx) {
        if let Some(scan) = self.scan.take() {
            let ended = (*scan).end(&mut cx.session.buf);
            match &mut self.stats {
                Some(all) => all.add(&ended),
                None => self.stats = Some(ended),
            }
        }
    }

    /// Builds the bitmap and begins reading its pages.
    fn begin(&mut self, cx: &mut ExecCx) -> Result<(), ExecError> {
        let bitmap = self.input.bitmap(cx)?;
        let limits = cx.session.stream_limits();
        self.scan = Some(Box::new(HeapBitmapScan::begin(
            &mut cx.session.buf,
            &self.table.heap,
            bitmap,
            limits,
        )?));
        Ok(())
    }

    /// Drops the rows of `out` from `from` on that fail the recheck,
    /// counting them.
    fn recheck_rows(
        &mut self,
        cx: &mut ExecCx,
        out: &mut Batch,
        from: usize,
    ) -> Result<(), ExecError> {
        let mut kept = from;
        for i in from..out.rows.len() {
            if is_true(&*self.recheck.predicate.eval_ref(&out.rows[i], cx)?) {
                out.rows.swap(kept, i);
                out.tids.swap(kept, i);
                kept += 1;
            } else {
                self.rechecked_out += 1;
            }
        }
        out.rows.truncate(kept);
        out.tids.truncate(kept);
        Ok(())
    }
}

impl PlanNode for BitmapHeapScanNode {
    fn next_batch(
        &mut self,
        cx: &mut ExecCx,
        out: &mut Batch,
        max_rows: usize,
    ) -> Result<(), ExecError> {
        // A leaf: every batch of every plan comes through one, so this is
        // where a cancel request or statement_timeout stops a statement.
        cx.session.check_interrupts()?;
        debug_assert!(out.is_empty());
        if self.ended {
            return Ok(());
        }
        if self.scan.is_none() {
            self.begin(cx)?;
        }
        let db = cx.session.db().clone();
        let table = Arc::clone(&self.table);
        let types = &table.heap.types;
        let decode_any = self.wanted.iter().any(|&w| w);
        let mut row: Vec<Value> = Vec::with_capacity(types.len());
        // Pages whose tuples are all invisible or filtered out give no
        // batch: go on to the next.
        let more = loop {
            let page_start = out.len();
            let mut failure: Option<ExecError> = None;
            let scan = self.scan.as_mut().expect("begun above");
            let wanted = &self.wanted;
            let more =
                scan.next_page(db.heap(), &mut cx.session.buf, cx.snapshot, |tid, tuple| {
                    // Under the page's content lock: decode only. The recheck
                    // and the filter may run subqueries, which read pages.
                    if decode_any {
                        if let Err(e) = decode(types, tuple, wanted, &mut row) {
                            failure = Some(e.into());
                            return ScanControl::Stop;
                        }
                    }
                    out.rows.push(row.clone());
                    out.tids.push(tid);
                    if out.len() >= max_rows {
                        ScanControl::Stop
                    } else {
                        ScanControl::Continue
                    }
                })?;
            if let Some(e) = failure {
                return Err(e);
            }
            debug_assert_eq!(out.rows.len(), out.tids.len());
            self.recheck_rows(cx, out, page_start)?;
            keep_passing(self.filter.as_ref(), &mut self.counts, out, page_start, cx)?;
            if !more || !out.is_empty() {
                break more;
            }
        };
        if !more {
            self.ended = true;
            self.end_scan(cx);
        }
        Ok(())
    }

    fn rescan(&mut self, cx: &mut ExecCx) -> Result<(), ExecError> {
        self.counts.rescans += 1;
        self.end_scan(cx);
        self.ended = false;
        Ok(())
    }

    fn close(&mut self, cx: &mut ExecCx) {
        self.end_scan(cx);
        self.ended = true;
    }

    fn describe(&self, opts: &ExplainOptions) -> Option<Described> {
        let title = scan_title(
            format!("Bitmap Heap Scan on {}", self.table.name()),
            self.alias.as_deref(),
        );
        let mut details = vec![format!("Recheck Cond: {}", self.recheck.label)];
        if opts.analyze && self.rechecked_out > 0 {
            details.push(format!(
                "Rows Removed by Index Recheck: {}",
                self.counts.per_loop(self.rechecked_out)
            ));
        }
        push_filter(&mut details, self.filter.as_ref(), self.counts, opts);
        if let (true, Some(stats)) = (opts.analyze, &self.stats) {
            // As PostgreSQL: totals over every run, the zero parts left out.
            let mut parts = Vec::new();
            if stats.exact_pages > 0 {
                parts.push(format!("exact={}", stats.exact_pages));
            }
            if stats.lossy_pages > 0 {
                parts.push(format!("lossy={}", stats.lossy_pages));
            }
            if !parts.is_empty() {
                details.push(format!("Heap Blocks: {}", parts.join(" ")));
            }
            stream_details(&mut details, &stats.stream, opts);
        }
        Some(Described {
            title,
            counts: self.counts,
            details,
        })
    }

    fn children(&self) -> Vec<&dyn PlanNode> {
        vec![self.input.as_ref() as &dyn PlanNode]
    }

    fn expressions(&self) -> Vec<&Expr> {
        // The index conditions' InitPlans are shown (and their tables
        // held) through the recheck, which has them all.
        std::iter::once(&self.recheck.predicate)
            .chain(self.filter.iter().map(|f| &f.predicate))
            .collect()
    }

    fn tables(&self, out: &mut Vec<Arc<TableDef>>) {
        out.push(Arc::clone(&self.table));
        super::plan::subplan_tables(self.expressions(), out);
    }
}
