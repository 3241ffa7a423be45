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

use super::estimate::Estimate;
use super::plan::{Filter, NodeCounts, PlanNode};
use super::subplan::{SubPlan, SubPlanMode};
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
    /// The planner's estimate of each node (on unless `COSTS OFF`).
    pub costs: bool,
}

/// Times for the summary lines, and what the run cost the log.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timing {
    pub planning: Duration,
    pub execution: Duration,
    pub wal: WalUsage,
}

/// A line of the plan: a node (with its details), or the title of a
/// subquery's tree ("SubPlan 1").
struct Node {
    /// None for a subquery's title, which is only a detail line.
    title: Option<String>,
    /// The planner's estimate, if it gave one.
    estimate: Option<Estimate>,
    counts: Option<NodeCounts>,
    details: Vec<String>,
    /// Spaces before the title's `->  `; `None` for the top node, which
    /// has no arrow.
    arrow_at: Option<usize>,
    /// Spaces before each detail line.
    detail_indent: usize,
}

/// The top node's details' indentation.
const TOP_DETAIL_INDENT: usize = 2;

/// Where a child's arrow and details go, for a parent whose details are at
/// `detail_indent` (PostgreSQL: the arrow at their column, the child's
/// details six past it).
fn child_position(detail_indent: usize) -> (usize, usize) {
    (detail_indent, detail_indent + 6)
}

/// The same for a subquery's tree, under its title at `detail_indent`:
/// two spaces further in, as PostgreSQL indents it.
fn subplan_position(detail_indent: usize) -> (usize, usize) {
    (detail_indent + 2, detail_indent + 8)
}

/// The lines of EXPLAIN's output for `plan`; `timing` is shown if
/// `summary` is on.
pub fn explain(plan: &Plan, opts: &ExplainOptions, timing: Timing) -> Vec<String> {
    let mut nodes = Vec::new();
    let top = (None, TOP_DETAIL_INDENT);
    let (arrow, details) = child_position(TOP_DETAIL_INDENT);
    let under_top = (Some(arrow), details);
    match plan {
        Plan::Query(q) => tree_nodes(q.root.as_ref(), top, Vec::new(), opts, &mut nodes),
        Plan::Insert(i) => {
            nodes.push(change_node(
                "Insert",
                &i.table,
                i.input.as_ref(),
                &i.returning,
            ));
            tree_nodes(i.input.as_ref(), under_top, Vec::new(), opts, &mut nodes);
        }
        Plan::Update(u) => {
            nodes.push(change_node(
                "Update",
                &u.target.table,
                u.target.scan.as_ref(),
                &u.returning,
            ));
            tree_nodes(
                u.target.scan.as_ref(),
                under_top,
                Vec::new(),
                opts,
                &mut nodes,
            );
        }
        Plan::Delete(d) => {
            nodes.push(change_node(
                "Delete",
                &d.target.table,
                d.target.scan.as_ref(),
                &d.returning,
            ));
            tree_nodes(
                d.target.scan.as_ref(),
                under_top,
                Vec::new(),
                opts,
                &mut nodes,
            );
        }
    }
    // As PostgreSQL, on the top node and only when there is something
    // to show: WAL made by the whole statement, and the flushes it waited
    // for (writing a dirty page evicted ahead of its WAL).
    if let (true, Some(top)) = (opts.analyze, nodes.first_mut()) {
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
    for node in &nodes {
        if let Some(title) = &node.title {
            let mut line = match node.arrow_at {
                None => title.clone(),
                Some(at) => format!("{}->  {title}", " ".repeat(at)),
            };
            if let (true, Some(e)) = (opts.costs, node.estimate) {
                // Two spaces, as PostgreSQL sets the estimate off.
                line.push_str("  ");
                line.push_str(&e.label());
            }
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
        }
        for detail in &node.details {
            lines.push(format!("{}{detail}", " ".repeat(node.detail_indent)));
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
/// Its estimate is its input's cost, with no rows returned.
fn change_node(
    verb: &str,
    table: &TableDef,
    input: &dyn PlanNode,
    returning: &super::Returning,
) -> Node {
    // As PostgreSQL's ModifyTable: it returns rows only with RETURNING,
    // one for each row its input gives it to change.
    let returns = !returning.exprs.is_empty();
    Node {
        title: Some(format!("{verb} on {}", table.name())),
        estimate: input.estimate().map(|e| Estimate {
            rows: if returns { e.rows } else { 0.0 },
            width: if returns { returning.width } else { 0 },
            ..e
        }),
        counts: Some(NodeCounts {
            rows: returning.returned,
            ..NodeCounts::default()
        }),
        details: Vec::new(),
        arrow_at: None,
        detail_indent: TOP_DETAIL_INDENT,
    }
}

type SharedSubPlan = std::sync::Arc<parking_lot::Mutex<SubPlan>>;

/// Adds to `out` the subqueries `node`'s expressions run that it does not
/// hold yet, in order: each is shown once.
fn add_node_subplans(node: &dyn PlanNode, out: &mut Vec<SharedSubPlan>) {
    for e in node.expressions() {
        for call in e.subplans() {
            if !out.iter().any(|p| std::sync::Arc::ptr_eq(p, &call.plan)) {
                out.push(std::sync::Arc::clone(&call.plan));
            }
        }
    }
}

/// `node` and its subtree at `position` (where its arrow and its details
/// go). A node EXPLAIN does not show (a projection) puts its children
/// where it would have been, and hands its subqueries to the first of
/// them (`inherited`), as PostgreSQL shows a select list's subqueries
/// under the scan that computes it. As PostgreSQL orders them, a node's
/// InitPlans come before its children and its SubPlans after.
fn tree_nodes(
    node: &dyn PlanNode,
    position: (Option<usize>, usize),
    inherited: Vec<SharedSubPlan>,
    opts: &ExplainOptions,
    out: &mut Vec<Node>,
) {
    let mut subplans = inherited;
    add_node_subplans(node, &mut subplans);
    let Some(d) = node.describe(opts) else {
        let mut pass = Some(subplans);
        for child in node.children() {
            tree_nodes(child, position, pass.take().unwrap_or_default(), opts, out);
        }
        return;
    };
    let (arrow_at, detail_indent) = position;
    out.push(Node {
        title: Some(d.title),
        estimate: node.estimate(),
        counts: Some(d.counts),
        details: d.details,
        arrow_at,
        detail_indent,
    });
    let (init, per_row): (Vec<_>, Vec<_>) = subplans
        .into_iter()
        .partition(|p| p.lock().mode == SubPlanMode::Once);
    let show_subplans = |plans: Vec<SharedSubPlan>, out: &mut Vec<Node>| {
        for p in plans {
            let p = p.lock();
            out.push(Node {
                title: None,
                estimate: None,
                counts: None,
                details: vec![p.title()],
                arrow_at: None,
                detail_indent,
            });
            let (arrow, details) = subplan_position(detail_indent);
            tree_nodes(
                p.root.as_ref(),
                (Some(arrow), details),
                Vec::new(),
                opts,
                out,
            );
        }
    };
    show_subplans(init, out);
    let (arrow, details) = child_position(detail_indent);
    for child in node.children() {
        tree_nodes(child, (Some(arrow), details), Vec::new(), opts, out);
    }
    show_subplans(per_row, out);
}

/// A scan's title: `what` ("Seq Scan on t"), then the alias the statement
/// gave the table, if any, as PostgreSQL shows it ("Seq Scan on t x").
pub(crate) fn scan_title(what: String, alias: Option<&str>) -> String {
    match alias {
        Some(alias) => format!("{what} {alias}"),
        None => what,
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

/// The `Buffers` line of blocks found in the pool and blocks read, if
/// there were any, as PostgreSQL leaves out the parts that are zero.
pub(crate) fn push_buffers(details: &mut Vec<String>, hits: u64, reads: u64) {
    let mut parts = Vec::new();
    if hits > 0 {
        parts.push(format!("hit={hits}"));
    }
    if reads > 0 {
        parts.push(format!("read={reads}"));
    }
    if !parts.is_empty() {
        details.push(format!("Buffers: shared {}", parts.join(" ")));
    }
}

/// An index scan's leaf figures for its IO line: `leaf pages=N`, and
/// `read ahead=M` where the scan took some from its read-ahead stream (as
/// `Buffers` leaves out its zero parts).
pub(crate) fn leaf_pages_text(leaf_pages: u64, read_ahead: u64) -> String {
    debug_assert!(
        read_ahead <= leaf_pages,
        "leaves read ahead are leaves read"
    );
    if read_ahead > 0 {
        format!("leaf pages={leaf_pages} read ahead={read_ahead}")
    } else {
        format!("leaf pages={leaf_pages}")
    }
}

/// A scan's `Buffers` and `I/O` lines from its read stream's figures.
pub(crate) fn stream_details(
    details: &mut Vec<String>,
    stream: &StreamStats,
    opts: &ExplainOptions,
) {
    if opts.buffers {
        push_buffers(details, stream.hits, stream.io_blocks);
    }
    if opts.io {
        push_io(details, stream);
    }
}

/// EXPLAIN's `I/O:` line for a read stream's figures.
pub(crate) fn push_io(details: &mut Vec<String>, stream: &StreamStats) {
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
