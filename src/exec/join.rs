//! Joins of two inputs: a nested loop, which rescans its inner side for
//! each outer row (where an index scan's rescan will matter), and a hash
//! join, which builds a table of its inner side and probes it with the
//! outer rows, partitioning both sides to temporary files when the inner
//! side exceeds `work_mem` (a grace hash join).
//!
//! A joined row is the outer row's columns followed by the inner row's.
//! A left join returns an outer row that matched nothing once, with NULL
//! for every inner column. Neither join promises an order.

use std::collections::HashMap;
use std::path::PathBuf;

use super::agg::GroupKey;
use super::explain::{push_filter_named, ExplainOptions};
use super::expr::{EvalContext, Expr};
use super::partition::{HashStats, Partitions, SPILL_DEPTH_MAX};
use super::plan::{passes, Batch, Described, ExecCx, Filter, NodeCounts, PlanNode, BATCH_ROWS_MAX};
use super::ExecError;
use crate::sort::{row_bytes, SpillReader};
use crate::types::Value;

/// Which rows a join returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinKind {
    /// Pairs that match.
    Inner,
    /// Pairs that match, and each outer row that matched none, once, with
    /// NULL inner columns.
    Left,
}

impl JoinKind {
    /// What EXPLAIN adds to a join's name: "Hash Left Join".
    pub(super) fn word(self) -> &'static str {
        match self {
            JoinKind::Inner => "",
            JoinKind::Left => " Left",
        }
    }
}

/// `outer` followed by `inner` (or by `inner_width` NULLs).
pub(super) fn joined(outer: &[Value], inner: Option<&[Value]>, inner_width: usize) -> Vec<Value> {
    let mut row = Vec::with_capacity(outer.len() + inner_width);
    row.extend_from_slice(outer);
    match inner {
        Some(inner) => {
            debug_assert_eq!(inner.len(), inner_width, "inner rows have the inner width");
            row.extend_from_slice(inner);
        }
        None => row.resize(outer.len() + inner_width, Value::Null),
    }
    row
}

/// What EXPLAIN shows of a join on equality keys, hash or merge (`method`),
/// as PostgreSQL prints it: "Hash Left Join", its keys as "Hash Cond:" and
/// the rest of its condition as "Join Filter:".
pub(super) fn describe_equality_join(
    method: &str,
    kind: JoinKind,
    cond_label: &str,
    extra: Option<&Filter>,
    counts: NodeCounts,
    opts: &ExplainOptions,
) -> Described {
    let mut details = vec![format!("{method} Cond: {cond_label}")];
    push_filter_named(&mut details, "Join Filter", extra, counts, opts);
    Described {
        title: format!("{method}{} Join", kind.word()),
        counts,
        details,
    }
}

/// Pulls rows of a child one at a time, a batch at a time underneath.
#[derive(Default)]
pub(super) struct RowSource {
    batch: std::vec::IntoIter<Vec<Value>>,
    ended: bool,
}

impl RowSource {
    /// The next row of `child`, asking it for at most `want` rows when its
    /// batch is used up (so that a LIMIT above reads little below).
    pub(super) fn next(
        &mut self,
        child: &mut dyn PlanNode,
        cx: &mut ExecCx,
        want: usize,
    ) -> Result<Option<Vec<Value>>, ExecError> {
        loop {
            if let Some(row) = self.batch.next() {
                return Ok(Some(row));
            }
            if self.ended {
                return Ok(None);
            }
            let mut batch = Batch::default();
            child.next_batch(cx, &mut batch, want.clamp(1, BATCH_ROWS_MAX))?;
            if batch.is_empty() {
                self.ended = true;
                // Its scans' streams and pins are not needed any more.
                child.close(cx);
                return Ok(None);
            }
            self.batch = batch.rows.into_iter();
        }
    }
}

/// A nested loop join: for each outer row, the inner side is rescanned and
/// every pair that passes `on` returned.
pub struct NestedLoopNode {
    pub outer: Box<dyn PlanNode>,
    pub inner: Box<dyn PlanNode>,
    pub kind: JoinKind,
    /// The join condition, over the joined row (None: every pair).
    pub on: Option<Filter>,
    inner_width: usize,
    pub counts: NodeCounts,
    outer_rows: RowSource,
    /// The outer row being joined, and whether it matched yet.
    current: Option<(Vec<Value>, bool)>,
    /// The inner side was pulled since it was last (re)started.
    inner_used: bool,
    done: bool,
    /// Parameters the inner side reads (`$n`), each set from the outer
    /// row (the expression over it) before the inner side runs for it:
    /// an inner index scan searching by the outer row's values.
    params: Vec<(usize, Expr)>,
}

impl NestedLoopNode {
    /// Joins `outer` with `inner`, whose rows have `inner_width` columns.
    pub fn new(
        outer: Box<dyn PlanNode>,
        inner: Box<dyn PlanNode>,
        inner_width: usize,
        kind: JoinKind,
        on: Option<Filter>,
    ) -> NestedLoopNode {
        NestedLoopNode {
            outer,
            inner,
            kind,
            on,
            inner_width,
            counts: NodeCounts::default(),
            outer_rows: RowSource::default(),
            current: None,
            inner_used: false,
            done: false,
            params: Vec::new(),
        }
    }

    /// The same join, setting `params` from each outer row before the
    /// inner side runs for it (a parameterized nested loop).
    pub fn with_params(mut self, params: Vec<(usize, Expr)>) -> NestedLoopNode {
        self.params = params;
        self
    }
}

impl PlanNode for NestedLoopNode {
    fn next_batch(
        &mut self,
        cx: &mut ExecCx,
        out: &mut Batch,
        max_rows: usize,
    ) -> Result<(), ExecError> {
        let want = BATCH_ROWS_MAX.min(max_rows);
        let mut inner = Batch::default();
        while !self.done && out.len() < want {
            let room = want - out.len();
            if self.current.is_none() {
                match self.outer_rows.next(self.outer.as_mut(), cx, room)? {
                    None => {
                        self.done = true;
                        self.inner.close(cx);
                        break;
                    }
                    Some(row) => {
                        for (n, e) in &self.params {
                            let v = e.eval(&row, cx)?;
                            cx.eval.set_param(*n, v);
                        }
                        if self.inner_used {
                            self.inner.rescan(cx)?;
                        }
                        self.inner_used = true;
                        self.current = Some((row, false));
                    }
                }
            }
            // At most one joined row per inner row: asking for the room
            // left never makes more than the parent takes.
            inner.clear();
            self.inner.next_batch(cx, &mut inner, room)?;
            let (outer_row, matched) = self.current.as_mut().expect("set above");
            if inner.is_empty() {
                if self.kind == JoinKind::Left && !*matched {
                    out.rows.push(joined(outer_row, None, self.inner_width));
                    self.counts.rows += 1;
                }
                self.current = None;
                continue;
            }
            for inner_row in &inner.rows {
                let row = joined(outer_row, Some(inner_row), self.inner_width);
                if passes(self.on.as_ref(), &mut self.counts, &row, cx)? {
                    out.rows.push(row);
                    *matched = true;
                }
            }
        }
        Ok(())
    }

    fn rescan(&mut self, cx: &mut ExecCx) -> Result<(), ExecError> {
        self.counts.rescans += 1;
        self.outer_rows = RowSource::default();
        self.current = None;
        self.inner_used = false;
        self.done = false;
        self.outer.rescan(cx)?;
        self.inner.rescan(cx)
    }

    fn close(&mut self, cx: &mut ExecCx) {
        self.done = true;
        self.current = None;
        self.outer.close(cx);
        self.inner.close(cx);
    }

    fn describe(&self, opts: &ExplainOptions) -> Option<Described> {
        let mut details = Vec::new();
        push_filter_named(
            &mut details,
            "Join Filter",
            self.on.as_ref(),
            self.counts,
            opts,
        );
        let title = match self.kind {
            JoinKind::Inner => "Nested Loop".to_string(),
            kind => format!("Nested Loop{} Join", kind.word()),
        };
        Some(Described {
            title,
            counts: self.counts,
            details,
        })
    }

    fn children(&self) -> Vec<&dyn PlanNode> {
        vec![self.outer.as_ref(), self.inner.as_ref()]
    }

    fn expressions(&self) -> Vec<&Expr> {
        self.on.iter().map(|f| &f.predicate).collect()
    }
}

/// The equality a hash join matches on: `outer_keys[i] = inner_keys[i]`
/// for every i. Each pair must have one type (the planner casts), since
/// equal values of different types need not hash alike.
pub struct HashCond {
    pub outer_keys: Vec<Expr>,
    pub inner_keys: Vec<Expr>,
    /// What EXPLAIN shows: `(a.id = b.id)`.
    pub label: String,
}

/// A hash join: builds a table of the inner side's rows by key, then
/// looks each outer row up in it. Rows whose key has a NULL match nothing
/// (SQL equality). Once the inner rows exceed `work_mem`, every inner row
/// goes to a hash partition by its key ([`Partitions`]), and so does every
/// outer row; each pair of partitions is joined after the other, a
/// partition still too big being split again, at most
/// [`SPILL_DEPTH_MAX`] levels deep.
pub struct HashJoinNode {
    pub outer: Box<dyn PlanNode>,
    pub inner: Box<dyn PlanNode>,
    pub kind: JoinKind,
    pub cond: HashCond,
    /// The rest of the join condition, over the joined row.
    pub extra: Option<Filter>,
    inner_width: usize,
    pub counts: NodeCounts,
    state: HashState,
    stats: HashStats,
}

/// Where a hash join is.
enum HashState {
    Start,
    Probing(Box<Probing>),
    Done,
}

/// Probing `table` with rows of `probe`, then the pending partitions.
struct Probing {
    table: BuildTable,
    probe: Probe,
    /// The outer row being returned: its key, the next of its matches,
    /// and whether one passed.
    current: Option<Current>,
    pending: Vec<PartitionPair>,
}

impl HashState {
    fn probing(table: BuildTable, probe: Probe, pending: Vec<PartitionPair>) -> HashState {
        HashState::Probing(Box::new(Probing {
            table,
            probe,
            current: None,
            pending,
        }))
    }
}

struct Current {
    row: Vec<Value>,
    key: GroupKey,
    next: usize,
    matched: bool,
}

/// Where outer rows come from.
enum Probe {
    Child(RowSource),
    /// A spilled partition: each row after its key.
    Spilled(SpillReader),
    /// Nothing (the inner side spilled: only partitions are left).
    Nothing,
}

/// A partition of each side, to join at `depth`; no inner file when no
/// inner row fell in it (a left join still returns the outer rows).
struct PartitionPair {
    inner: Option<SpillReader>,
    outer: SpillReader,
    depth: u32,
}

/// The inner rows by key.
#[derive(Default)]
struct BuildTable {
    rows: Vec<Vec<Value>>,
    index: HashMap<GroupKey, Vec<usize>>,
    mem: usize,
}

impl BuildTable {
    /// The rows whose key is `key`.
    fn matches(&self, key: &GroupKey) -> &[usize] {
        self.index.get(key).map_or(&[], Vec::as_slice)
    }
}

/// Reads one side's rows into a table, until they exceed the memory limit;
/// from then on into partitions of level `depth`.
struct Builder {
    table: BuildTable,
    parts: Option<Partitions>,
    limit: usize,
    depth: u32,
    dir: PathBuf,
}

impl Builder {
    fn new(cx: &ExecCx, depth: u32) -> Builder {
        Builder {
            table: BuildTable::default(),
            parts: None,
            limit: cx.session.settings.work_mem_bytes(),
            depth,
            dir: cx.session.db().temp_dir(),
        }
    }

    fn add(
        &mut self,
        key: GroupKey,
        row: Vec<Value>,
        stats: &mut HashStats,
    ) -> Result<(), ExecError> {
        if let Some(p) = &mut self.parts {
            return p.push(&key, &row);
        }
        let t = &mut self.table;
        t.mem += row_bytes(&row)
            + row_bytes(&key.0)
            + std::mem::size_of::<(GroupKey, Vec<usize>, usize)>();
        t.index.entry(key).or_default().push(t.rows.len());
        t.rows.push(row);
        stats.note_memory(t.mem);
        if t.mem > self.limit && self.depth < SPILL_DEPTH_MAX {
            // Too big: every row so far goes to its partition too.
            let mut p = Partitions::new(self.depth, &self.dir);
            let table = std::mem::take(&mut self.table);
            for (k, ats) in &table.index {
                for &at in ats {
                    p.push(k, &table.rows[at])?;
                }
            }
            self.parts = Some(p);
        }
        Ok(())
    }
}

/// Evaluates `keys` over `row` into `key`; false if one is NULL (the row
/// can match nothing, as NULL equals nothing).
fn eval_key(
    keys: &[Expr],
    row: &[Value],
    eval: &mut EvalContext,
    key: &mut GroupKey,
) -> Result<bool, ExecError> {
    key.0.clear();
    for k in keys {
        key.0.push(k.eval(row, eval)?);
    }
    Ok(!key.0.iter().any(Value::is_null))
}

/// A spilled row split into its key (`key_len` values) and the row.
fn split_spilled(mut spilled: Vec<Value>, key_len: usize) -> (GroupKey, Vec<Value>) {
    let row = spilled.split_off(key_len);
    (GroupKey(spilled), row)
}

impl HashJoinNode {
    /// Joins `outer` with `inner` (rows of `inner_width` columns) where
    /// `cond` holds, and `extra` if given.
    pub fn new(
        outer: Box<dyn PlanNode>,
        inner: Box<dyn PlanNode>,
        inner_width: usize,
        kind: JoinKind,
        cond: HashCond,
        extra: Option<Filter>,
    ) -> HashJoinNode {
        assert_eq!(
            cond.outer_keys.len(),
            cond.inner_keys.len(),
            "a key for each side"
        );
        assert!(!cond.outer_keys.is_empty(), "a hash join has a key");
        HashJoinNode {
            outer,
            inner,
            kind,
            cond,
            extra,
            inner_width,
            counts: NodeCounts::default(),
            state: HashState::Start,
            stats: HashStats::default(),
        }
    }

    /// Reads the inner side into a table or, once it exceeds `work_mem`,
    /// into partitions; in that case the outer side is partitioned too.
    fn build(&mut self, cx: &mut ExecCx) -> Result<HashState, ExecError> {
        let mut builder = Builder::new(cx, 0);
        let mut inner = RowSource::default();
        while let Some(row) = inner.next(self.inner.as_mut(), cx, BATCH_ROWS_MAX)? {
            let mut key = GroupKey::default();
            if eval_key(&self.cond.inner_keys, &row, cx.eval, &mut key)? {
                builder.add(key, row, &mut self.stats)?;
            }
        }
        let Some(inner_parts) = builder.parts else {
            self.stats.table_built(builder.table.mem);
            return Ok(HashState::probing(
                builder.table,
                Probe::Child(RowSource::default()),
                Vec::new(),
            ));
        };
        // A row with a NULL key keeps it: it hashes somewhere and finds no
        // inner row there (none with a NULL key was kept), so a left join
        // returns it unmatched.
        let mut outer_parts = Partitions::new(0, &builder.dir);
        let mut outer = RowSource::default();
        let mut key = GroupKey::default();
        while let Some(row) = outer.next(self.outer.as_mut(), cx, BATCH_ROWS_MAX)? {
            let matchable = eval_key(&self.cond.outer_keys, &row, cx.eval, &mut key)?;
            if matchable || self.kind == JoinKind::Left {
                outer_parts.push(&key, &row)?;
            }
        }
        let pending = self.pair_partitions(inner_parts, outer_parts, 1)?;
        Ok(HashState::probing(
            BuildTable::default(),
            Probe::Nothing,
            pending,
        ))
    }

    /// Pairs each side's partitions; a pair is joined at `depth`.
    fn pair_partitions(
        &mut self,
        inner: Partitions,
        outer: Partitions,
        depth: u32,
    ) -> Result<Vec<PartitionPair>, ExecError> {
        let inner = inner.finish(&mut self.stats)?;
        let outer = outer.finish(&mut self.stats)?;
        let mut pending = Vec::new();
        for (inner, outer) in inner.into_iter().zip(outer) {
            // No outer rows: nothing to return. No inner rows: only a left
            // join returns the outer rows, all unmatched.
            let Some(outer) = outer else { continue };
            if inner.is_none() && self.kind == JoinKind::Inner {
                continue;
            }
            pending.push(PartitionPair {
                inner,
                outer,
                depth,
            });
        }
        Ok(pending)
    }

    /// Builds the table of one inner partition and probes it with the
    /// outer one; a partition still too big (and not too deep) is split
    /// again, both sides, into `pending`.
    fn join_partition(
        &mut self,
        pair: PartitionPair,
        cx: &mut ExecCx,
        pending: &mut Vec<PartitionPair>,
    ) -> Result<(BuildTable, Probe), ExecError> {
        let key_len = self.cond.inner_keys.len();
        let PartitionPair {
            inner,
            mut outer,
            depth,
        } = pair;
        let mut builder = Builder::new(cx, depth);
        if let Some(mut inner) = inner {
            while let Some(spilled) = inner.next_row()? {
                let (key, row) = split_spilled(spilled, key_len);
                builder.add(key, row, &mut self.stats)?;
            }
        }
        let Some(inner_parts) = builder.parts else {
            self.stats.table_built(builder.table.mem);
            return Ok((builder.table, Probe::Spilled(outer)));
        };
        let mut outer_parts = Partitions::new(depth, &builder.dir);
        while let Some(spilled) = outer.next_row()? {
            let (key, row) = split_spilled(spilled, key_len);
            outer_parts.push(&key, &row)?;
        }
        pending.extend(self.pair_partitions(inner_parts, outer_parts, depth + 1)?);
        Ok((BuildTable::default(), Probe::Nothing))
    }
}

impl PlanNode for HashJoinNode {
    fn next_batch(
        &mut self,
        cx: &mut ExecCx,
        out: &mut Batch,
        max_rows: usize,
    ) -> Result<(), ExecError> {
        let want = BATCH_ROWS_MAX.min(max_rows);
        let key_len = self.cond.outer_keys.len();
        while out.len() < want {
            let p = match &mut self.state {
                HashState::Start => {
                    self.state = self.build(cx)?;
                    continue;
                }
                HashState::Done => break,
                HashState::Probing(p) => p,
            };
            let Probing {
                table,
                probe,
                current,
                pending,
            } = &mut **p;
            if let Some(c) = current {
                let matches = table.matches(&c.key);
                while c.next < matches.len() && out.len() < want {
                    let inner_row = &table.rows[matches[c.next]];
                    c.next += 1;
                    let row = joined(&c.row, Some(inner_row), self.inner_width);
                    if passes(self.extra.as_ref(), &mut self.counts, &row, cx)? {
                        out.rows.push(row);
                        c.matched = true;
                    }
                }
                if c.next == matches.len() {
                    if self.kind == JoinKind::Left && !c.matched {
                        out.rows.push(joined(&c.row, None, self.inner_width));
                        self.counts.rows += 1;
                    }
                    *current = None;
                }
                continue;
            }
            let room = want - out.len();
            let next = match probe {
                Probe::Child(source) => match source.next(self.outer.as_mut(), cx, room)? {
                    Some(row) => {
                        // A key with a NULL matches nothing: no inner row
                        // with one is in the table.
                        let mut key = GroupKey::default();
                        eval_key(&self.cond.outer_keys, &row, cx.eval, &mut key)?;
                        Some((key, row))
                    }
                    None => None,
                },
                Probe::Spilled(reader) => reader
                    .next_row()?
                    .map(|spilled| split_spilled(spilled, key_len)),
                Probe::Nothing => None,
            };
            if let Some((key, row)) = next {
                *current = Some(Current {
                    row,
                    key,
                    next: 0,
                    matched: false,
                });
                continue;
            }
            match pending.pop() {
                Some(pair) => {
                    let mut pending = std::mem::take(pending);
                    let (table, probe) = self.join_partition(pair, cx, &mut pending)?;
                    self.state = HashState::probing(table, probe, pending);
                }
                None => {
                    self.state = HashState::Done;
                    self.outer.close(cx);
                    self.inner.close(cx);
                }
            }
        }
        Ok(())
    }

    fn rescan(&mut self, cx: &mut ExecCx) -> Result<(), ExecError> {
        self.counts.rescans += 1;
        self.state = HashState::Start;
        self.outer.rescan(cx)?;
        self.inner.rescan(cx)
    }

    fn close(&mut self, cx: &mut ExecCx) {
        // Drops the table and the partitions' files.
        self.state = HashState::Done;
        self.outer.close(cx);
        self.inner.close(cx);
    }

    fn describe(&self, opts: &ExplainOptions) -> Option<Described> {
        let mut described = describe_equality_join(
            "Hash",
            self.kind,
            &self.cond.label,
            self.extra.as_ref(),
            self.counts,
            opts,
        );
        if opts.analyze {
            described.details.extend(self.stats.explain_line());
        }
        Some(described)
    }

    fn children(&self) -> Vec<&dyn PlanNode> {
        vec![self.outer.as_ref(), self.inner.as_ref()]
    }

    fn expressions(&self) -> Vec<&Expr> {
        self.extra.iter().map(|f| &f.predicate).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Source;
    use crate::database::test_session as session;
    use crate::exec::expr::BinaryOp;
    use crate::exec::nodes::tests::{in_statement, pull, rows};
    use crate::sort::spill::open_files_in;
    use crate::types::ColumnType;

    /// (key, tag) rows: keys with duplicates, NULLs, and keys only one
    /// side has.
    fn side(n: i32, modulo: i32, tag: &str) -> Vec<Vec<Value>> {
        (0..n)
            .map(|i| {
                let key = if i % 7 == 3 {
                    Value::Null
                } else {
                    Value::Integer(i * 5 % modulo)
                };
                vec![key, Value::Text(format!("{tag}{i}"))]
            })
            .collect()
    }

    /// The join by definition: every pair whose keys are equal (not NULL),
    /// and for a left join each unmatched outer row with NULLs.
    fn reference(outer: &[Vec<Value>], inner: &[Vec<Value>], kind: JoinKind) -> Vec<Vec<Value>> {
        let mut out = Vec::new();
        for o in outer {
            let mut matched = false;
            for i in inner {
                if !o[0].is_null() && o[0] == i[0] {
                    out.push(joined(o, Some(i), 2));
                    matched = true;
                }
            }
            if kind == JoinKind::Left && !matched {
                out.push(joined(o, None, 2));
            }
        }
        out
    }

    fn sorted(mut rows: Vec<Vec<Value>>) -> Vec<Vec<Value>> {
        rows.sort_by_key(|r| format!("{r:?}"));
        rows
    }

    fn key(column: usize) -> Expr {
        Expr::column(column, ColumnType::Integer)
    }

    fn equal_keys() -> Filter {
        Filter {
            arm_labels: Vec::new(),
            predicate: Expr::binary(BinaryOp::Eq, key(0), key(2)).unwrap(),
            label: "(o.k = i.k)".into(),
        }
    }

    fn hash_join(outer: &[Vec<Value>], inner: &[Vec<Value>], kind: JoinKind) -> HashJoinNode {
        let cond = HashCond {
            outer_keys: vec![key(0)],
            inner_keys: vec![key(0)],
            label: "(o.k = i.k)".into(),
        };
        HashJoinNode::new(rows(outer).0, rows(inner).0, 2, kind, cond, None)
    }

    #[test]
    fn every_join_method_gives_the_joins_definition_in_memory_and_spilled() {
        let (mut s, _dir) = session();
        // 25 000 inner rows take about 6 MB: at 64kB each of the 16
        // partitions is still too big and is split again.
        let outer = side(1000, 400, "o");
        let inner = side(25_000, 700, "i");
        for kind in [JoinKind::Inner, JoinKind::Left] {
            let expected = sorted(reference(&outer, &inner, kind));
            assert!(expected.len() > 10_000, "{}", expected.len());
            let mut nested = NestedLoopNode::new(
                rows(&outer[..40]).0,
                rows(&inner).0,
                2,
                kind,
                Some(equal_keys()),
            );
            let got = sorted(pull(&mut s, &mut nested));
            let want = sorted(reference(&outer[..40], &inner, kind));
            let first_difference = got.iter().zip(&want).position(|(a, b)| a != b);
            assert!(
                got.len() == want.len() && first_difference.is_none(),
                "nested loop, {kind:?}: {} rows against {}, first difference at {first_difference:?}: {:?} {:?}",
                got.len(),
                want.len(),
                first_difference.map(|i| &got[i]),
                first_difference.map(|i| &want[i]),
            );
            for work_mem in ["64MB", "64kB"] {
                s.settings
                    .set("work_mem", work_mem, Source::Session)
                    .unwrap();
                let mut hash = hash_join(&outer, &inner, kind);
                assert_eq!(
                    sorted(pull(&mut s, &mut hash)),
                    expected,
                    "hash, {kind:?}, {work_mem}"
                );
                let stats = hash.stats;
                assert_eq!(
                    stats.batches > crate::exec::partition::SPILL_PARTITIONS as u64,
                    work_mem == "64kB",
                    "{stats:?}"
                );
                assert_eq!(stats.spilled_bytes > 0, work_mem == "64kB", "{stats:?}");
            }
        }
    }

    #[test]
    fn a_nested_loop_rescans_its_inner_side_for_each_outer_row_and_stops_at_a_limit() {
        let (mut s, _dir) = session();
        let outer = side(10, 1000, "o");
        let inner = side(6, 1000, "i");
        let (inner_node, inner_returned) = rows(&inner);
        let mut nested = NestedLoopNode::new(rows(&outer).0, inner_node, 2, JoinKind::Inner, None);
        // A cross join: every pair, in outer order.
        let all = pull(&mut s, &mut nested);
        assert_eq!(all.len(), 60);
        assert_eq!(all[6], joined(&outer[1], Some(&inner[0]), 2));
        assert_eq!(
            inner_returned.get(),
            60,
            "the inner side read once per outer row"
        );
        // Closed at the end of the pull: nothing more until a rescan, which
        // starts both sides over.
        assert!(pull(&mut s, &mut nested).is_empty());
        in_statement(&mut s, |cx| nested.rescan(cx).unwrap());
        assert_eq!(pull(&mut s, &mut nested), all);

        // A parent asking for few rows gets no more, and the inner side
        // computes no more than that.
        let (inner_node, inner_returned) = rows(&inner);
        let mut nested = NestedLoopNode::new(rows(&outer).0, inner_node, 2, JoinKind::Inner, None);
        in_statement(&mut s, |cx| {
            let mut out = Batch::default();
            nested.next_batch(cx, &mut out, 4).unwrap();
            assert_eq!(out.len(), 4);
            assert_eq!(inner_returned.get(), 4);
            nested.close(cx);
            out.clear();
            nested.next_batch(cx, &mut out, 4).unwrap();
            assert!(out.is_empty(), "a closed join returns nothing");
        });
    }

    #[test]
    fn a_hash_join_that_stops_early_gives_back_its_files() {
        let (mut s, dir) = session();
        s.settings.set("work_mem", "64kB", Source::Session).unwrap();
        let outer = side(3000, 400, "o");
        let inner = side(2500, 700, "i");
        let mut hash = hash_join(&outer, &inner, JoinKind::Inner);
        let tmp = in_statement(&mut s, |cx| {
            let tmp = cx.session.db().temp_dir();
            let mut out = Batch::default();
            hash.next_batch(cx, &mut out, 10).unwrap();
            assert_eq!(out.len(), 10);
            // Partitions still to join are open (nameless) files.
            assert!(open_files_in(&tmp) > 0, "the join spilled");
            hash.close(cx);
            assert_eq!(open_files_in(&tmp), 0, "closing gave the files back");
            tmp
        });
        assert!(tmp.starts_with(dir.path()));
        assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
    }
}
