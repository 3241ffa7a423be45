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
use std::hash::{Hash, Hasher};
use std::path::Path;

use super::agg::{GroupKey, SPILL_DEPTH_MAX, SPILL_PARTITIONS};
use super::explain::ExplainOptions;
use super::expr::{EvalContext, Expr};
use super::plan::{passes, Batch, Described, ExecCx, Filter, NodeCounts, PlanNode, BATCH_ROWS_MAX};
use super::ExecError;
use crate::sort::{row_bytes, SpillReader, SpillWriter};
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
    fn title_suffix(self) -> &'static str {
        match self {
            JoinKind::Inner => "",
            JoinKind::Left => " Left Join",
        }
    }
}

/// `outer` followed by `inner` (or by `inner_width` NULLs).
fn joined(outer: &[Value], inner: Option<&[Value]>, inner_width: usize) -> Vec<Value> {
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

/// EXPLAIN's lines for a join's extra condition, in PostgreSQL's words.
fn push_join_filter(
    details: &mut Vec<String>,
    filter: Option<&Filter>,
    counts: NodeCounts,
    opts: &ExplainOptions,
) {
    if let Some(f) = filter {
        details.push(format!("Join Filter: {}", f.label));
        if opts.analyze {
            details.push(format!(
                "Rows Removed by Join Filter: {}",
                counts.per_loop(counts.removed)
            ));
        }
    }
}

/// Pulls rows of a child one at a time, a batch at a time underneath.
#[derive(Default)]
struct RowSource {
    batch: std::vec::IntoIter<Vec<Value>>,
    ended: bool,
}

impl RowSource {
    /// The next row of `child`, asking it for at most `want` rows when its
    /// batch is used up (so that a LIMIT above reads little below).
    fn next(
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
        }
    }

    fn reset(&mut self) {
        self.outer_rows = RowSource::default();
        self.current = None;
        self.done = false;
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
                if passes(self.on.as_ref(), &mut self.counts, &row, cx.eval)? {
                    out.rows.push(row);
                    *matched = true;
                }
            }
        }
        Ok(())
    }

    fn rescan(&mut self, cx: &mut ExecCx) -> Result<(), ExecError> {
        self.counts.rescans += 1;
        self.reset();
        self.outer.rescan(cx)?;
        self.inner.rescan(cx)?;
        self.inner_used = false;
        Ok(())
    }

    fn close(&mut self, cx: &mut ExecCx) {
        self.done = true;
        self.current = None;
        self.outer.close(cx);
        self.inner.close(cx);
    }

    fn describe(&self, opts: &ExplainOptions) -> Option<Described> {
        let mut details = Vec::new();
        push_join_filter(&mut details, self.on.as_ref(), self.counts, opts);
        Some(Described {
            title: format!("Nested Loop{}", self.kind.title_suffix()),
            counts: self.counts,
            details,
        })
    }

    fn children(&self) -> Vec<&dyn PlanNode> {
        vec![self.outer.as_ref(), self.inner.as_ref()]
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

/// What a hash join cost, for EXPLAIN ANALYZE (PostgreSQL's "Batches"
/// and "Memory Usage" of its Hash node).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HashJoinStats {
    /// Tables built: 1, or one per partition once the inner side spilled.
    pub batches: u64,
    pub peak_memory_bytes: u64,
    pub spilled_bytes: u64,
}

/// A hash join: builds a table of the inner side's rows by key, then
/// looks each outer row up in it. Rows whose key has a NULL match nothing
/// (SQL equality). Once the inner rows exceed `work_mem`, every inner row
/// goes to one of [`SPILL_PARTITIONS`] files by its key's hash, and so
/// does every outer row; each pair of partitions is joined after the
/// other, a partition still too big being split again, at most
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
    stats: HashJoinStats,
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
    /// The outer row being returned: its matches and the next of them.
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

/// An outer row being joined.
struct Current {
    row: Vec<Value>,
    matches: Vec<usize>,
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
    fn insert(&mut self, key: GroupKey, row: Vec<Value>) {
        self.mem += row_bytes(&row)
            + row_bytes(&key.0)
            + std::mem::size_of::<(GroupKey, Vec<usize>, usize)>();
        let at = self.rows.len();
        self.rows.push(row);
        self.index.entry(key).or_default().push(at);
    }

    /// Sends every row to its partition (the table was too big).
    fn spill_into(self, p: &mut Partitions, dir: &Path) -> Result<(), ExecError> {
        for (k, ats) in &self.index {
            for &at in ats {
                p.push(dir, k, &self.rows[at])?;
            }
        }
        Ok(())
    }
}

/// One file per partition, made when first needed.
struct Partitions {
    files: Vec<Option<SpillWriter>>,
    depth: u32,
}

impl Partitions {
    fn new(depth: u32) -> Partitions {
        Partitions {
            files: (0..SPILL_PARTITIONS).map(|_| None).collect(),
            depth,
        }
    }

    fn push(&mut self, dir: &Path, key: &GroupKey, row: &[Value]) -> Result<(), ExecError> {
        // Other hash bits at each depth, so that a partition split again
        // spreads out.
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (self.depth, "hash join").hash(&mut h);
        key.hash(&mut h);
        let p = (h.finish() % SPILL_PARTITIONS as u64) as usize;
        let file = match &mut self.files[p] {
            Some(file) => file,
            empty => empty.insert(SpillWriter::create(dir)?),
        };
        file.push_joined(&key.0, row)?;
        Ok(())
    }

    /// The files, in partition order (None for a partition never used).
    fn finish(self, spilled: &mut u64) -> Result<Vec<Option<SpillReader>>, ExecError> {
        let mut out = Vec::with_capacity(self.files.len());
        for file in self.files {
            out.push(match file {
                Some(f) => {
                    *spilled += f.bytes();
                    Some(f.finish()?)
                }
                None => None,
            });
        }
        Ok(out)
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

/// What to do after looking at the probe side.
enum Step {
    Row(GroupKey, Vec<Value>),
    NextPartition(PartitionPair),
    Finished,
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
            stats: HashJoinStats::default(),
        }
    }

    /// Reads the inner side into a table or, once it exceeds `work_mem`,
    /// into partitions; in that case the outer side is partitioned too.
    fn build(&mut self, cx: &mut ExecCx) -> Result<HashState, ExecError> {
        let limit = cx.session.settings.work_mem_bytes();
        let dir = cx.session.db().temp_dir();
        let mut table = BuildTable::default();
        let mut parts: Option<Partitions> = None;
        let mut key = GroupKey(Vec::new());
        let mut inner = RowSource::default();
        while let Some(row) = inner.next(self.inner.as_mut(), cx, BATCH_ROWS_MAX)? {
            if !eval_key(&self.cond.inner_keys, &row, cx.eval, &mut key)? {
                continue;
            }
            match &mut parts {
                Some(p) => p.push(&dir, &key, &row)?,
                None => {
                    table.insert(key.clone(), row);
                    self.stats.peak_memory_bytes =
                        self.stats.peak_memory_bytes.max(table.mem as u64);
                    if table.mem > limit {
                        let mut p = Partitions::new(0);
                        std::mem::take(&mut table).spill_into(&mut p, &dir)?;
                        parts = Some(p);
                    }
                }
            }
        }
        let Some(inner_parts) = parts else {
            self.stats.batches += 1;
            return Ok(HashState::probing(
                table,
                Probe::Child(RowSource::default()),
                Vec::new(),
            ));
        };
        // A row with a NULL key keeps it: it hashes somewhere and finds no
        // inner row there (none with a NULL key was kept), so a left join
        // returns it unmatched.
        let mut outer_parts = Partitions::new(0);
        let mut outer = RowSource::default();
        while let Some(row) = outer.next(self.outer.as_mut(), cx, BATCH_ROWS_MAX)? {
            let matchable = eval_key(&self.cond.outer_keys, &row, cx.eval, &mut key)?;
            if matchable || self.kind == JoinKind::Left {
                outer_parts.push(&dir, &key, &row)?;
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
        let inner = inner.finish(&mut self.stats.spilled_bytes)?;
        let outer = outer.finish(&mut self.stats.spilled_bytes)?;
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
        let limit = cx.session.settings.work_mem_bytes();
        let dir = cx.session.db().temp_dir();
        let key_len = self.cond.inner_keys.len();
        let PartitionPair {
            inner,
            mut outer,
            depth,
        } = pair;
        let mut table = BuildTable::default();
        let mut split: Option<Partitions> = None;
        if let Some(mut inner) = inner {
            while let Some(spilled) = inner.next_row()? {
                let (k, row) = spilled.split_at(key_len);
                let key = GroupKey(k.to_vec());
                match &mut split {
                    Some(p) => p.push(&dir, &key, row)?,
                    None => {
                        table.insert(key, row.to_vec());
                        self.stats.peak_memory_bytes =
                            self.stats.peak_memory_bytes.max(table.mem as u64);
                        if table.mem > limit && depth < SPILL_DEPTH_MAX {
                            let mut p = Partitions::new(depth);
                            std::mem::take(&mut table).spill_into(&mut p, &dir)?;
                            split = Some(p);
                        }
                    }
                }
            }
        }
        let Some(inner_parts) = split else {
            self.stats.batches += 1;
            return Ok((table, Probe::Spilled(outer)));
        };
        let mut outer_parts = Partitions::new(depth);
        while let Some(spilled) = outer.next_row()? {
            let (k, row) = spilled.split_at(key_len);
            outer_parts.push(&dir, &GroupKey(k.to_vec()), row)?;
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
        let mut key = GroupKey(Vec::new());
        while out.len() < want {
            let step = match &mut self.state {
                HashState::Start => {
                    self.state = self.build(cx)?;
                    continue;
                }
                HashState::Done => break,
                HashState::Probing(p) => {
                    let Probing {
                        table,
                        probe,
                        current,
                        pending,
                    } = &mut **p;
                    if let Some(c) = current {
                        while c.next < c.matches.len() && out.len() < want {
                            let inner_row = &table.rows[c.matches[c.next]];
                            c.next += 1;
                            let row = joined(&c.row, Some(inner_row), self.inner_width);
                            if passes(self.extra.as_ref(), &mut self.counts, &row, cx.eval)? {
                                out.rows.push(row);
                                c.matched = true;
                            }
                        }
                        if c.next == c.matches.len() {
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
                        Probe::Child(source) => source
                            .next(self.outer.as_mut(), cx, room)?
                            .map(|row| {
                                eval_key(&self.cond.outer_keys, &row, cx.eval, &mut key)
                                    .map(|_| (std::mem::take(&mut key), row))
                            })
                            .transpose()?,
                        Probe::Spilled(reader) => reader.next_row()?.map(|mut spilled| {
                            let row = spilled.split_off(key_len);
                            (GroupKey(spilled), row)
                        }),
                        Probe::Nothing => None,
                    };
                    match next {
                        Some((k, row)) => Step::Row(k, row),
                        None => match pending.pop() {
                            Some(pair) => Step::NextPartition(pair),
                            None => Step::Finished,
                        },
                    }
                }
            };
            match step {
                Step::Row(k, row) => {
                    let HashState::Probing(p) = &mut self.state else {
                        unreachable!("probing");
                    };
                    let Probing { table, current, .. } = &mut **p;
                    // A key with a NULL matches nothing: no inner row with
                    // one is in the table.
                    let matches = table.index.get(&k).cloned().unwrap_or_default();
                    key = k;
                    *current = Some(Current {
                        row,
                        matches,
                        next: 0,
                        matched: false,
                    });
                }
                Step::NextPartition(pair) => {
                    let HashState::Probing(p) = &mut self.state else {
                        unreachable!("probing");
                    };
                    let mut pending = std::mem::take(&mut p.pending);
                    let (table, probe) = self.join_partition(pair, cx, &mut pending)?;
                    self.state = HashState::probing(table, probe, pending);
                }
                Step::Finished => {
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
        let mut details = vec![format!("Hash Cond: {}", self.cond.label)];
        push_join_filter(&mut details, self.extra.as_ref(), self.counts, opts);
        if opts.analyze && self.stats.batches > 0 {
            let s = self.stats;
            let mut line = format!(
                "Batches: {}  Memory Usage: {}kB",
                s.batches,
                s.peak_memory_bytes.div_ceil(1024)
            );
            if s.spilled_bytes > 0 {
                line.push_str(&format!(
                    "  Disk Usage: {}kB",
                    s.spilled_bytes.div_ceil(1024)
                ));
            }
            details.push(line);
        }
        Some(Described {
            title: format!("Hash{} Join", self.kind.title_suffix().replace(" Join", "")),
            counts: self.counts,
            details,
        })
    }

    fn children(&self) -> Vec<&dyn PlanNode> {
        vec![self.outer.as_ref(), self.inner.as_ref()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Source;
    use crate::database::test_session as session;
    use crate::exec::expr::BinaryOp;
    use crate::exec::nodes::tests::{pull, rows};
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
                    stats.batches > SPILL_PARTITIONS as u64,
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
        {
            let snapshot = s.start_statement().unwrap();
            let mut eval = EvalContext::new();
            let mut cx = ExecCx {
                session: &mut s,
                snapshot: snapshot.get(),
                eval: &mut eval,
            };
            nested.rescan(&mut cx).unwrap();
            drop(snapshot);
            s.end_statement(true).unwrap();
        }
        assert_eq!(pull(&mut s, &mut nested), all);

        // A parent asking for few rows gets no more, and the inner side
        // computes no more than that.
        let (inner_node, inner_returned) = rows(&inner);
        let mut nested = NestedLoopNode::new(rows(&outer).0, inner_node, 2, JoinKind::Inner, None);
        let snapshot = s.start_statement().unwrap();
        let mut eval = EvalContext::new();
        let mut cx = ExecCx {
            session: &mut s,
            snapshot: snapshot.get(),
            eval: &mut eval,
        };
        let mut out = Batch::default();
        nested.next_batch(&mut cx, &mut out, 4).unwrap();
        assert_eq!(out.len(), 4);
        assert_eq!(inner_returned.get(), 4);
        nested.close(&mut cx);
        out.clear();
        nested.next_batch(&mut cx, &mut out, 4).unwrap();
        assert!(out.is_empty(), "a closed join returns nothing");
        drop(snapshot);
        s.end_statement(true).unwrap();
    }

    #[test]
    fn a_hash_join_that_stops_early_gives_back_its_files() {
        let (mut s, dir) = session();
        s.settings.set("work_mem", "64kB", Source::Session).unwrap();
        let outer = side(3000, 400, "o");
        let inner = side(2500, 700, "i");
        let mut hash = hash_join(&outer, &inner, JoinKind::Inner);
        let snapshot = s.start_statement().unwrap();
        let mut eval = EvalContext::new();
        let mut cx = ExecCx {
            session: &mut s,
            snapshot: snapshot.get(),
            eval: &mut eval,
        };
        let mut out = Batch::default();
        hash.next_batch(&mut cx, &mut out, 10).unwrap();
        assert_eq!(out.len(), 10);
        let tmp = cx.session.db().temp_dir();
        hash.close(&mut cx);
        drop(snapshot);
        s.end_statement(true).unwrap();
        assert!(tmp.starts_with(dir.path()));
        assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
    }
}
