//! EXPLAIN: a plan as PostgreSQL's text format shows it, with the figures
//! of a run for EXPLAIN ANALYZE.
//!
//! ```text
//! Limit (actual rows=10 loops=1)
//!   ->  Sort (actual rows=10 loops=1)
//!         Sort Key: a DESC
//!         ->  Seq Scan on t (actual rows=4000 loops=1)
//!               Filter: (a > 5)
//!               Rows Removed by Filter: 5
//!               Buffers: shared hit=3 read=41
//!               I/O: ios=4 blocks/io=10.2 in-flight=1.8 waits=2 wait time=0.310 ms
//! Planning Time: 0.081 ms
//! Execution Time: 4.210 ms
//! ```
//!
//! There are no cost estimates (there is no planner choosing between plans
//! yet), so a plain EXPLAIN shows what `EXPLAIN (COSTS OFF)` shows in
//! PostgreSQL. `Buffers` counts the blocks a scan's read stream found in the
//! pool (hit) and the blocks its own I/Os read (read); `I/O` gives the
//! stream's figures from DESIGN.md §6: I/Os started, average blocks per
//! I/O, average I/Os in flight when one started, how often the scan really
//! waited, and how long. `WAL` (as PostgreSQL's option) shows the
//! records, page images and bytes the statement logged; with `IO`, the
//! WAL flushes it waited for (a dirty page written ahead of its WAL) are
//! shown too.

use std::time::Duration;

use super::plan::{Filter, NodeCounts, PlanNode};
use super::Plan;
use crate::catalog::TableDef;
use crate::stream::StreamStats;
use crate::wal::WalUsage;

/// What EXPLAIN shows.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExplainOptions {
    /// The plan ran: show actual row counts.
    pub analyze: bool,
    /// Buffer hits and reads per scan (needs `analyze` for figures).
    pub buffers: bool,
    /// Read stream figures per scan, and the statement's WAL flush waits
    /// (needs `analyze`).
    pub io: bool,
    /// The statement's WAL records, page images and bytes (needs
    /// `analyze`).
    pub wal: bool,
    /// Planning and execution time lines (on with `analyze`).
    pub summary: bool,
}

/// Times for the summary lines, and what the run cost the log.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timing {
    pub planning: Duration,
    pub execution: Duration,
    pub wal: WalUsage,
}

struct Node {
    title: String,
    counts: Option<NodeCounts>,
    details: Vec<String>,
}

/// The lines of EXPLAIN's output for `plan`; `timing` is shown if
/// `summary` is on.
pub fn explain(plan: &Plan, opts: &ExplainOptions, timing: Timing) -> Vec<String> {
    let mut nodes = Vec::new();
    match plan {
        Plan::Query(q) => tree_nodes(q.root.as_ref(), 0, opts, &mut nodes),
        Plan::Insert(i) => {
            nodes.push((0, change_node("Insert", &i.table)));
            tree_nodes(i.input.as_ref(), 1, opts, &mut nodes);
        }
        Plan::Update(u) => {
            nodes.push((0, change_node("Update", &u.target.table)));
            tree_nodes(&u.target, 1, opts, &mut nodes);
        }
        Plan::Delete(d) => {
            nodes.push((0, change_node("Delete", &d.target.table)));
            tree_nodes(&d.target, 1, opts, &mut nodes);
        }
    }
    // As PostgreSQL, on the top node and only when there is something
    // to show: WAL made by the whole statement, and the flushes it waited
    // for (writing a dirty page evicted ahead of its WAL).
    if let (true, Some((_, top))) = (opts.analyze, nodes.first_mut()) {
        let wal = timing.wal;
        if opts.wal && wal.records > 0 {
            top.details.push(format!(
                "WAL: records={} fpi={} bytes={}",
                wal.records, wal.full_page_images, wal.bytes
            ));
        }
        if opts.io && wal.flush_waits > 0 {
            top.details.push(format!(
                "WAL flush: waits={} wait time={:.3} ms",
                wal.flush_waits,
                wal.flush_wait_us as f64 / 1000.0
            ));
        }
    }
    let mut lines = Vec::new();
    for &(depth, ref node) in &nodes {
        // PostgreSQL: a child is "->  " indented two spaces past its
        // parent's details, and its own details six past that.
        let (prefix, detail_indent) = if depth == 0 {
            (String::new(), 2)
        } else {
            (
                format!("{}->  ", " ".repeat(6 * (depth - 1) + 2)),
                6 * depth + 2,
            )
        };
        let mut line = format!("{prefix}{}", node.title);
        if opts.analyze {
            if let Some(c) = node.counts {
                // As PostgreSQL: rows per run, and the runs.
                line.push_str(&format!(
                    " (actual rows={} loops={})",
                    c.per_loop(c.rows),
                    c.loops()
                ));
            }
        }
        lines.push(line);
        for detail in &node.details {
            lines.push(format!("{}{detail}", " ".repeat(detail_indent)));
        }
    }
    if opts.summary {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        lines.push(format!("Planning Time: {:.3} ms", ms(timing.planning)));
        if opts.analyze {
            lines.push(format!("Execution Time: {:.3} ms", ms(timing.execution)));
        }
    }
    lines
}

/// The top node of a data-changing statement: "Insert on t" (it returns
/// no rows, as in PostgreSQL without RETURNING).
fn change_node(verb: &str, table: &TableDef) -> Node {
    Node {
        title: format!("{verb} on {}", table.name()),
        counts: Some(NodeCounts::default()),
        details: Vec::new(),
    }
}

/// `node` and its subtree, each shown node with its depth (a node
/// EXPLAIN does not show puts its children at its own depth).
fn tree_nodes(
    node: &dyn PlanNode,
    depth: usize,
    opts: &ExplainOptions,
    out: &mut Vec<(usize, Node)>,
) {
    let child_depth = match node.describe(opts) {
        Some(d) => {
            out.push((
                depth,
                Node {
                    title: d.title,
                    counts: Some(d.counts),
                    details: d.details,
                },
            ));
            depth + 1
        }
        None => depth,
    };
    for child in node.children() {
        tree_nodes(child, child_depth, opts, out);
    }
}

/// A node's filter and, with ANALYZE, the rows it removed.
pub(crate) fn push_filter(
    details: &mut Vec<String>,
    filter: Option<&Filter>,
    counts: NodeCounts,
    opts: &ExplainOptions,
) {
    push_filter_named(details, "Filter", filter, counts, opts);
}

/// [`push_filter`] under another of PostgreSQL's names ("Join Filter").
pub(crate) fn push_filter_named(
    details: &mut Vec<String>,
    name: &str,
    filter: Option<&Filter>,
    counts: NodeCounts,
    opts: &ExplainOptions,
) {
    if let Some(f) = filter {
        details.push(format!("{name}: {}", f.label));
        if opts.analyze {
            details.push(format!(
                "Rows Removed by {name}: {}",
                counts.per_loop(counts.removed)
            ));
        }
    }
}

/// A scan's `Buffers` and `I/O` lines from its read stream's figures.
pub(crate) fn stream_details(
    details: &mut Vec<String>,
    stream: &StreamStats,
    opts: &ExplainOptions,
) {
    if opts.buffers {
        let mut parts = Vec::new();
        if stream.hits > 0 {
            parts.push(format!("hit={}", stream.hits));
        }
        if stream.io_blocks > 0 {
            parts.push(format!("read={}", stream.io_blocks));
        }
        if !parts.is_empty() {
            details.push(format!("Buffers: shared {}", parts.join(" ")));
        }
    }
    if opts.io {
        let mut line = format!(
            "I/O: ios={} blocks/io={:.1} in-flight={:.1} waits={} wait time={:.3} ms",
            stream.ios,
            stream.blocks_per_io(),
            stream.avg_in_flight(),
            stream.waits,
            stream.wait_time.as_secs_f64() * 1000.0
        );
        if stream.foreign_ios > 0 {
            line.push_str(&format!(" joined={}", stream.foreign_ios));
        }
        details.push(line);
    }
}
