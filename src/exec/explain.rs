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

use super::plan::{NodeCounts, Op, Pipeline, ScanNode, Source};
use super::{Plan, TargetRows};
use crate::catalog::TableDef;
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
        Plan::Query(p) => pipeline_nodes(p, opts, &mut nodes),
        Plan::Insert(i) => {
            nodes.push(change_node("Insert", &i.table));
            pipeline_nodes(&i.input, opts, &mut nodes);
        }
        Plan::Update(u) => {
            nodes.push(change_node("Update", &u.target.scan.table));
            nodes.push(target_node(&u.target, opts));
        }
        Plan::Delete(d) => {
            nodes.push(change_node("Delete", &d.target.scan.table));
            nodes.push(target_node(&d.target, opts));
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
    for (depth, node) in nodes.iter().enumerate() {
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
                line.push_str(&format!(" (actual rows={} loops=1)", c.rows));
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

/// The scan finding the rows an UPDATE or DELETE changes.
fn target_node(target: &TargetRows, opts: &ExplainOptions) -> Node {
    let filter = target.filter.as_ref().map(|f| f.label.as_str());
    scan_node(&target.scan, filter, target.counts, opts)
}

fn pipeline_nodes(p: &Pipeline, opts: &ExplainOptions, nodes: &mut Vec<Node>) {
    for op in p.ops.iter().rev() {
        match op {
            Op::Project(_) => {}
            Op::Limit(l) => nodes.push(Node {
                title: "Limit".into(),
                counts: Some(l.counts),
                details: Vec::new(),
            }),
            Op::Sort(s) => nodes.push(Node {
                title: "Sort".into(),
                counts: Some(s.counts),
                details: vec![format!(
                    "Sort Key: {}",
                    s.keys
                        .iter()
                        .map(|k| k.label.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )],
            }),
            Op::Aggregate(a) => {
                let mut details = Vec::new();
                if !a.group_labels.is_empty() {
                    details.push(format!("Group Key: {}", a.group_labels.join(", ")));
                }
                if let Some(h) = &a.having {
                    details.push(format!("Filter: {}", h.label));
                    if opts.analyze {
                        details.push(format!("Rows Removed by Filter: {}", a.counts.removed));
                    }
                }
                nodes.push(Node {
                    title: if a.groups.is_empty() {
                        "Aggregate".into()
                    } else {
                        "HashAggregate".into()
                    },
                    counts: Some(a.counts),
                    details,
                });
            }
        }
    }
    let filter = p.filter.as_ref().map(|f| f.label.as_str());
    let title = match &p.source {
        Source::SeqScan(scan) => {
            nodes.push(scan_node(scan, filter, p.counts, opts));
            return;
        }
        Source::Result | Source::Utility(_) => "Result".to_string(),
        Source::Series(series) if series.alias == "generate_series" => {
            "Function Scan on generate_series".to_string()
        }
        Source::Series(series) => format!("Function Scan on generate_series {}", series.alias),
        Source::View(v) => format!("Function Scan on {}", v.name()),
        Source::Values(_) => "Values Scan on \"*VALUES*\"".to_string(),
    };
    let mut details = Vec::new();
    push_filter(&mut details, filter, p.counts, opts);
    nodes.push(Node {
        title,
        counts: Some(p.counts),
        details,
    });
}

fn push_filter(
    details: &mut Vec<String>,
    filter: Option<&str>,
    counts: NodeCounts,
    opts: &ExplainOptions,
) {
    if let Some(label) = filter {
        details.push(format!("Filter: {label}"));
        if opts.analyze {
            details.push(format!("Rows Removed by Filter: {}", counts.removed));
        }
    }
}

fn scan_node(
    scan: &ScanNode,
    filter: Option<&str>,
    counts: NodeCounts,
    opts: &ExplainOptions,
) -> Node {
    let mut title = format!("Seq Scan on {}", scan.table.name());
    if let Some(alias) = &scan.alias {
        title.push(' ');
        title.push_str(alias);
    }
    let mut details = Vec::new();
    push_filter(&mut details, filter, counts, opts);
    if let (true, Some(stats)) = (opts.analyze, &scan.stats) {
        let stream = &stats.stream;
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
    Node {
        title,
        counts: Some(counts),
        details,
    }
}
