//! The sequential scan node: a table's visible rows, one page per batch,
//! read through the heap's pull scan (and so its read stream).

use std::sync::Arc;

use super::explain::{push_filter, scan_title, stream_details, ExplainOptions};
use super::plan::{keep_passing, passes, Batch, Described, ExecCx, Filter, NodeCounts, PlanNode};
use super::ExecError;
use crate::catalog::TableDef;
use crate::heap::tuple::decode;
use crate::heap::{HeapScan, ScanControl, ScanStats};
use crate::types::Value;

/// A sequential scan of a table, with the filter of the statement's WHERE
/// applied as each page is read: under the page's content lock as each
/// row is decoded, or, for a filter that runs a subquery (which reads
/// other pages), to the page's rows once the lock is released.
pub struct SeqScanNode {
    pub table: Arc<TableDef>,
    /// The name the statement gave it, if not its own.
    pub alias: Option<String>,
    /// Columns some expression reads; the others are not decoded.
    pub wanted: Vec<bool>,
    pub filter: Option<Filter>,
    pub counts: NodeCounts,
    /// Figures of the scan's read stream once it ended (EXPLAIN ANALYZE),
    /// of its last run if it was rescanned.
    pub stats: Option<ScanStats>,
    /// Boxed: a read stream is large, and most plans hold a scan node.
    scan: Option<Box<HeapScan>>,
    /// The scan went past the last page (or was closed).
    ended: bool,
    /// The row being decoded, kept to reuse its allocation.
    row: Vec<Value>,
    /// The filter runs a subquery: it is applied after the page's lock
    /// is released.
    filter_after_page: bool,
}

impl SeqScanNode {
    /// A scan of `table` decoding the columns `wanted` marks, returning
    /// the rows that pass `filter`.
    pub fn new(
        table: Arc<TableDef>,
        alias: Option<String>,
        wanted: Vec<bool>,
        filter: Option<Filter>,
    ) -> SeqScanNode {
        debug_assert_eq!(wanted.len(), table.columns.len());
        let filter_after_page = filter.as_ref().is_some_and(|f| f.predicate.has_subplan());
        SeqScanNode {
            filter_after_page,
            row: Vec::with_capacity(wanted.len()),
            table,
            alias,
            wanted,
            filter,
            counts: NodeCounts::default(),
            stats: None,
            scan: None,
            ended: false,
        }
    }

    /// Ends the heap scan, if one runs, keeping its figures.
    fn end_scan(&mut self, cx: &mut ExecCx) {
        if let Some(scan) = self.scan.take() {
            // Every run's figures, as EXPLAIN shows a rescanned scan's.
            let ended = (*scan).end(&mut cx.session.buf);
            match &mut self.stats {
                Some(all) => all.stream.add(&ended.stream),
                None => self.stats = Some(ended),
            }
        }
    }
}

impl PlanNode for SeqScanNode {
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
        let db = cx.session.db().clone();
        if self.scan.is_none() {
            let limits = cx.session.stream_limits();
            self.scan = Some(Box::new(HeapScan::begin(
                &mut cx.session.buf,
                &self.table.heap,
                limits,
            )?));
        }
        let SeqScanNode {
            table,
            wanted,
            filter,
            counts,
            scan,
            row,
            filter_after_page,
            ..
        } = self;
        let scan = scan.as_mut().expect("begun above");
        let types = &table.heap.types;
        let decode_any = wanted.iter().any(|&w| w);
        // Pages whose tuples are all invisible or filtered out give no
        // batch: go on to the next.
        let more = loop {
            let mut failure: Option<ExecError> = None;
            let page_start = out.len();
            let more =
                scan.next_page(db.heap(), &mut cx.session.buf, cx.snapshot, |tid, tuple| {
                    // Under the page's content lock: decode and filter only,
                    // never the pool.
                    if decode_any {
                        if let Err(e) = decode(types, tuple, wanted, row) {
                            failure = Some(e.into());
                            return ScanControl::Stop;
                        }
                    }
                    let passed = if *filter_after_page {
                        Ok(true)
                    } else {
                        passes(filter.as_ref(), counts, row, cx.eval)
                    };
                    match passed {
                        Ok(true) => {
                            out.rows.push(row.clone());
                            out.tids.push(tid);
                            // Enough: the scan pauses here, in this page.
                            if out.len() >= max_rows {
                                ScanControl::Stop
                            } else {
                                ScanControl::Continue
                            }
                        }
                        Ok(false) => ScanControl::Continue,
                        Err(e) => {
                            failure = Some(e);
                            ScanControl::Stop
                        }
                    }
                })?;
            if let Some(e) = failure {
                return Err(e);
            }
            debug_assert_eq!(out.rows.len(), out.tids.len());
            if *filter_after_page {
                // No lock is held now: the filter's subqueries may read.
                keep_passing(filter.as_ref(), counts, out, page_start, cx)?;
            }
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
            format!("Seq Scan on {}", self.table.name()),
            self.alias.as_deref(),
        );
        let mut details = Vec::new();
        push_filter(&mut details, self.filter.as_ref(), self.counts, opts);
        if let (true, Some(stats)) = (opts.analyze, &self.stats) {
            stream_details(&mut details, &stats.stream, opts);
        }
        Some(Described {
            title,
            counts: self.counts,
            details,
        })
    }

    fn children(&self) -> Vec<&dyn PlanNode> {
        Vec::new()
    }

    fn expressions(&self) -> Vec<&super::expr::Expr> {
        self.filter.iter().map(|f| &f.predicate).collect()
    }

    fn tables(&self, out: &mut Vec<Arc<TableDef>>) {
        out.push(Arc::clone(&self.table));
        super::plan::subplan_tables(self.expressions(), out);
    }
}
