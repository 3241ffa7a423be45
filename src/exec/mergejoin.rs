//! A merge join: both inputs arrive sorted ascending by their join keys
//! (NULLs last), and the join walks them side by side, as PostgreSQL's
//! merge join does.
//!
//! For each outer row the inner side is advanced past every row whose key
//! is lower; the inner rows whose key equals the outer row's form the
//! current *group*, read once and replayed for every outer row with that
//! key (duplicates on both sides). A group is kept in memory up to
//! `work_mem`; a bigger one is written to a temporary file, which is read
//! again from its start for each outer row of the key (`SpillReader::rewind`):
//! a skewed key costs I/O, never unbounded memory.
//!
//! Keys compare with [`sort_cmp`] (NULLs last), the order the Sort nodes
//! below produce, and are equal where [`compare`] says so: the equality the
//! hash join's keys use too, so that both joins return the same rows for
//! the same (cast, one-typed) key expressions. A key with a NULL matches
//! nothing; a left join still returns its outer row, with NULLs.
//!
//! Each input may carry hidden columns after the ones the join returns
//! (the planner appends the evaluated keys there to sort by them): rows
//! are cut to `outer_width` and `inner_width` before they are joined.

use std::cmp::Ordering;

use super::explain::ExplainOptions;
use super::expr::{EvalContext, Expr};
use super::join::{describe_equality_join, joined, JoinKind, RowSource};
use super::plan::{passes, Batch, Described, ExecCx, Filter, NodeCounts, PlanNode, BATCH_ROWS_MAX};
use super::ExecError;
use crate::sort::{row_bytes, SpillReader, SpillWriter};
use crate::types::{compare, sort_cmp, Value};

/// The equality a merge join matches on: `outer_keys[i] = inner_keys[i]`
/// for every i, each input sorted ascending by its keys, NULLs last. Each
/// pair must have one type (the planner casts, as for a hash join).
pub struct MergeCond {
    pub outer_keys: Vec<Expr>,
    pub inner_keys: Vec<Expr>,
    /// What EXPLAIN shows: `(a.id = b.id)`.
    pub label: String,
}

/// Orders two keys as the inputs are sorted: column by column, NULLs last.
fn key_order(a: &[Value], b: &[Value]) -> Ordering {
    debug_assert_eq!(a.len(), b.len(), "keys of one join have one length");
    for (x, y) in a.iter().zip(b) {
        let ord = sort_cmp(x, y, false);
        if ord.is_ne() {
            return ord;
        }
    }
    Ordering::Equal
}

/// Whether two keys match: every part equal, none NULL (SQL equality, as
/// the hash join's `GroupKey` compares non-NULL values).
fn keys_match(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| compare(x, y).is_some_and(Ordering::is_eq))
}

/// `keys` evaluated over `row`.
fn eval_keys(
    keys: &[Expr],
    row: &[Value],
    eval: &mut EvalContext,
) -> Result<Vec<Value>, ExecError> {
    keys.iter().map(|k| k.eval(row, eval)).collect()
}

/// The inner rows of one key.
#[derive(Default)]
struct Group {
    /// The outer key the group was gathered for (None: none yet). Equal to
    /// every row's key in it; the group may be empty (no inner row has the
    /// key), so that further outer rows of the key find that at once.
    key: Option<Vec<Value>>,
    rows: Vec<Vec<Value>>,
    mem_bytes: usize,
    /// Once the rows exceed `work_mem`: all of them, in a file.
    spilled: Option<SpillWriter>,
    /// The finished file, read for each outer row of the key.
    replay: Option<SpillReader>,
}

impl Group {
    fn is_empty(&self) -> bool {
        self.rows.is_empty() && self.replay.is_none()
    }
}

/// What a merge join has read and holds between batches.
#[derive(Default)]
struct MergeState {
    outer_rows: RowSource,
    inner_rows: RowSource,
    /// The next inner row (its key, and the row cut to the inner width),
    /// read ahead and not yet in a group or skipped.
    inner_next: Option<(Vec<Value>, Vec<Value>)>,
    /// The inner side has no more rows (after `inner_next`).
    inner_ended: bool,
    group: Group,
    current: Option<Current>,
    /// Keys of the last row taken from each side, to check the order the
    /// join relies on (in debug builds).
    outer_key_last: Option<Vec<Value>>,
    inner_key_last: Option<Vec<Value>>,
    done: bool,
}

/// The outer row being joined with the group.
struct Current {
    row: Vec<Value>,
    /// The group holds its key's inner rows (false: it matches nothing).
    matchable: bool,
    /// The next in-memory group row to pair it with.
    next: usize,
    matched: bool,
}

/// Joins two inputs sorted by their keys (see the module comment).
pub struct MergeJoinNode {
    pub outer: Box<dyn PlanNode>,
    pub inner: Box<dyn PlanNode>,
    pub kind: JoinKind,
    pub cond: MergeCond,
    /// The rest of the join condition, over the joined row.
    pub extra: Option<Filter>,
    outer_width: usize,
    inner_width: usize,
    pub counts: NodeCounts,
    state: MergeState,
    /// Groups that exceeded `work_mem` and went to a file, over every run.
    pub groups_spilled: u64,
}

impl MergeJoinNode {
    /// Joins `outer` with `inner`, both sorted by their keys of `cond`,
    /// returning the first `outer_width` columns of an outer row followed
    /// by the first `inner_width` of an inner one, where `cond` holds and
    /// `extra` if given.
    pub fn new(
        outer: Box<dyn PlanNode>,
        inner: Box<dyn PlanNode>,
        outer_width: usize,
        inner_width: usize,
        kind: JoinKind,
        cond: MergeCond,
        extra: Option<Filter>,
    ) -> MergeJoinNode {
        assert_eq!(
            cond.outer_keys.len(),
            cond.inner_keys.len(),
            "a key for each side"
        );
        assert!(!cond.outer_keys.is_empty(), "a merge join has a key");
        MergeJoinNode {
            outer,
            inner,
            kind,
            cond,
            extra,
            outer_width,
            inner_width,
            counts: NodeCounts::default(),
            state: MergeState::default(),
            groups_spilled: 0,
        }
    }

    /// The next inner row, read ahead into `inner_next` (None: the inner
    /// side ended).
    fn peek_inner(&mut self, cx: &mut ExecCx) -> Result<Option<&[Value]>, ExecError> {
        let st = &mut self.state;
        if st.inner_next.is_none() && !st.inner_ended {
            match st
                .inner_rows
                .next(self.inner.as_mut(), cx, BATCH_ROWS_MAX)?
            {
                None => st.inner_ended = true,
                Some(mut row) => {
                    let key = eval_keys(&self.cond.inner_keys, &row, cx.eval)?;
                    debug_assert!(
                        st.inner_key_last
                            .as_ref()
                            .is_none_or(|last| key_order(last, &key).is_le()),
                        "the inner side of a merge join arrives sorted by its keys: {:?} after {:?}",
                        key,
                        st.inner_key_last
                    );
                    row.truncate(self.inner_width);
                    debug_assert_eq!(row.len(), self.inner_width, "inner rows are that wide");
                    st.inner_next = Some((key, row));
                }
            }
        }
        Ok(st.inner_next.as_ref().map(|(key, _)| key.as_slice()))
    }

    /// Takes the row `peek_inner` read ahead.
    fn take_inner(&mut self) -> Option<Vec<Value>> {
        let (key, row) = self.state.inner_next.take()?;
        self.state.inner_key_last = Some(key);
        Some(row)
    }

    /// Makes the group the inner rows of `key` (which has no NULL),
    /// reading the inner side past the lower keys; whether there are any.
    fn find_group(&mut self, key: &[Value], cx: &mut ExecCx) -> Result<bool, ExecError> {
        if let Some(group_key) = &self.state.group.key {
            if keys_match(group_key, key) {
                return Ok(!self.state.group.is_empty());
            }
            debug_assert!(
                key_order(group_key, key).is_lt(),
                "outer keys ascend, so a new key is above the group's"
            );
        }
        self.state.group = Group {
            key: Some(key.to_vec()),
            ..Group::default()
        };
        // Skip the inner rows below the key. Each step takes a row from a
        // finite input, so the loop ends.
        loop {
            let Some(inner_key) = self.peek_inner(cx)? else {
                return Ok(false);
            };
            match key_order(inner_key, key) {
                Ordering::Less => {
                    self.take_inner();
                }
                Ordering::Equal => break,
                Ordering::Greater => return Ok(false),
            }
        }
        let limit = cx.session.settings.work_mem_bytes();
        while let Some(inner_key) = self.peek_inner(cx)? {
            if !keys_match(inner_key, key) {
                break;
            }
            let Some(row) = self.take_inner() else { break };
            self.add_to_group(row, limit, cx)?;
        }
        let group = &mut self.state.group;
        if let Some(writer) = group.spilled.take() {
            debug_assert!(
                group.rows.is_empty(),
                "a spilled group's rows are in its file"
            );
            group.replay = Some(writer.finish()?);
        }
        debug_assert!(!group.is_empty(), "the key had an inner row");
        Ok(true)
    }

    /// Adds an inner row to the group, moving the group to a file once it
    /// holds more than `limit_bytes`.
    fn add_to_group(
        &mut self,
        row: Vec<Value>,
        limit_bytes: usize,
        cx: &mut ExecCx,
    ) -> Result<(), ExecError> {
        let group = &mut self.state.group;
        if let Some(writer) = &mut group.spilled {
            return Ok(writer.push(&row)?);
        }
        group.mem_bytes += row_bytes(&row);
        group.rows.push(row);
        if group.mem_bytes > limit_bytes {
            let mut writer = SpillWriter::create(&cx.session.db().temp_dir())?;
            for row in group.rows.drain(..) {
                writer.push(&row)?;
            }
            group.mem_bytes = 0;
            group.spilled = Some(writer);
            self.groups_spilled += 1;
        }
        Ok(())
    }

    /// Reads the next outer row into `current`; false once there is none.
    fn next_outer(&mut self, cx: &mut ExecCx, room: usize) -> Result<bool, ExecError> {
        let Some(mut row) = self.state.outer_rows.next(self.outer.as_mut(), cx, room)? else {
            return Ok(false);
        };
        let key = eval_keys(&self.cond.outer_keys, &row, cx.eval)?;
        debug_assert!(
            self.state
                .outer_key_last
                .as_ref()
                .is_none_or(|last| key_order(last, &key).is_le()),
            "the outer side of a merge join arrives sorted by its keys: {:?} after {:?}",
            key,
            self.state.outer_key_last
        );
        row.truncate(self.outer_width);
        debug_assert_eq!(row.len(), self.outer_width, "outer rows are that wide");
        // A key with a NULL matches nothing (and is not looked up: the
        // group stays for the keys after it).
        let matchable = !key.iter().any(Value::is_null) && self.find_group(&key, cx)?;
        if matchable {
            if let Some(replay) = &mut self.state.group.replay {
                replay.rewind()?;
            }
        }
        self.state.outer_key_last = Some(key);
        self.state.current = Some(Current {
            row,
            matchable,
            next: 0,
            matched: false,
        });
        Ok(true)
    }

    /// Pairs the current outer row with the rest of its group, until `out`
    /// holds `want` rows; true once the group is used up.
    fn pair_current(
        &mut self,
        cx: &mut ExecCx,
        out: &mut Batch,
        want: usize,
    ) -> Result<bool, ExecError> {
        let MergeState { group, current, .. } = &mut self.state;
        let Some(c) = current else { return Ok(true) };
        if !c.matchable {
            return Ok(true);
        }
        while out.len() < want {
            let spilled_row;
            let inner_row: &[Value] = match &mut group.replay {
                Some(replay) => match replay.next_row()? {
                    Some(row) => {
                        spilled_row = row;
                        &spilled_row
                    }
                    None => return Ok(true),
                },
                None => match group.rows.get(c.next) {
                    Some(row) => {
                        c.next += 1;
                        row
                    }
                    None => return Ok(true),
                },
            };
            let row = joined(&c.row, Some(inner_row), self.inner_width);
            if passes(self.extra.as_ref(), &mut self.counts, &row, cx)? {
                out.rows.push(row);
                c.matched = true;
            }
        }
        Ok(false)
    }

    /// Ends the join: no more rows until a rescan.
    fn finish(&mut self, cx: &mut ExecCx) {
        // Drops the group and its file.
        self.state = MergeState {
            done: true,
            ..MergeState::default()
        };
        self.outer.close(cx);
        self.inner.close(cx);
    }
}

impl PlanNode for MergeJoinNode {
    fn next_batch(
        &mut self,
        cx: &mut ExecCx,
        out: &mut Batch,
        max_rows: usize,
    ) -> Result<(), ExecError> {
        let want = BATCH_ROWS_MAX.min(max_rows);
        while !self.state.done && out.len() < want {
            if self.state.current.is_none() {
                let room = want - out.len();
                if !self.next_outer(cx, room)? {
                    self.finish(cx);
                    break;
                }
                let unmatched_inner = self.state.current.as_ref().is_some_and(|c| !c.matchable);
                if unmatched_inner
                    && self.kind == JoinKind::Inner
                    && self.state.inner_ended
                    && self.state.inner_next.is_none()
                {
                    // The inner side is used up: no later outer key (they
                    // only ascend) can match, and an inner join returns
                    // only matches.
                    self.finish(cx);
                    break;
                }
            }
            if !self.pair_current(cx, out, want)? {
                continue;
            }
            if let Some(c) = self.state.current.take() {
                if self.kind == JoinKind::Left && !c.matched {
                    out.rows.push(joined(&c.row, None, self.inner_width));
                    self.counts.rows += 1;
                }
            }
        }
        Ok(())
    }

    fn rescan(&mut self, cx: &mut ExecCx) -> Result<(), ExecError> {
        self.counts.rescans += 1;
        self.state = MergeState::default();
        self.outer.rescan(cx)?;
        self.inner.rescan(cx)
    }

    fn close(&mut self, cx: &mut ExecCx) {
        self.finish(cx);
    }

    fn describe(&self, opts: &ExplainOptions) -> Option<Described> {
        Some(describe_equality_join(
            "Merge",
            self.kind,
            &self.cond.label,
            self.extra.as_ref(),
            self.counts,
            opts,
        ))
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

    /// (key, tag, hidden) rows sorted by key, NULLs last: duplicates (key
    /// 5 `big` times), NULLs, and keys only one side has. The hidden
    /// column stands for the keys the planner appends; the join cuts it.
    fn side(n: i32, modulo: i32, big: usize) -> Vec<Vec<Value>> {
        let mut rows: Vec<Vec<Value>> = (0..n)
            .map(|i| {
                let key = if i % 7 == 3 {
                    Value::Null
                } else {
                    Value::Integer(i * 3 % modulo)
                };
                vec![key, Value::Text(format!("t{i}")), Value::Boolean(true)]
            })
            .collect();
        rows.extend((0..big).map(|i| {
            vec![
                Value::Integer(5),
                Value::Text(format!("t{:040}", i * 7919 % 10_000)),
                Value::Boolean(false),
            ]
        }));
        rows.sort_by(|a, b| sort_cmp(&a[0], &b[0], false));
        rows
    }

    /// The join by definition, over the first two columns of each side.
    fn reference(
        outer: &[Vec<Value>],
        inner: &[Vec<Value>],
        kind: JoinKind,
        extra: impl Fn(&[Value]) -> bool,
    ) -> Vec<Vec<Value>> {
        let mut out = Vec::new();
        for o in outer {
            let mut matched = false;
            for i in inner {
                let row = joined(&o[..2], Some(&i[..2]), 2);
                if !o[0].is_null() && o[0] == i[0] && extra(&row) {
                    out.push(row);
                    matched = true;
                }
            }
            if kind == JoinKind::Left && !matched {
                out.push(joined(&o[..2], None, 2));
            }
        }
        out
    }

    fn sorted(mut rows: Vec<Vec<Value>>) -> Vec<Vec<Value>> {
        rows.sort_by_key(|r| format!("{r:?}"));
        rows
    }

    fn merge_join(
        outer: &[Vec<Value>],
        inner: &[Vec<Value>],
        kind: JoinKind,
        extra: Option<Filter>,
    ) -> MergeJoinNode {
        let cond = MergeCond {
            outer_keys: vec![Expr::column(0, ColumnType::Integer)],
            inner_keys: vec![Expr::column(0, ColumnType::Integer)],
            label: "(o.k = i.k)".into(),
        };
        MergeJoinNode::new(rows(outer).0, rows(inner).0, 2, 2, kind, cond, extra)
    }

    /// `o.tag < i.tag`, over the joined row (o.k, o.tag, i.k, i.tag).
    fn tags_ascend() -> Filter {
        Filter {
            arm_labels: Vec::new(),
            predicate: Expr::binary(
                BinaryOp::Lt,
                Expr::column(1, ColumnType::Text),
                Expr::column(3, ColumnType::Text),
            )
            .unwrap(),
            label: "(o.tag < i.tag)".into(),
        }
    }

    #[test]
    fn a_merge_join_gives_the_joins_definition_with_groups_in_memory_and_spilled() {
        let (mut s, _dir) = session();
        let outer = side(300, 40, 3);
        let inner = side(500, 60, 2000);
        for kind in [JoinKind::Inner, JoinKind::Left] {
            for filtered in [false, true] {
                let expected = sorted(reference(&outer, &inner, kind, |row| {
                    !filtered
                        || matches!((&row[1], &row[3]), (Value::Text(o), Value::Text(i)) if o < i)
                }));
                assert!(expected.len() > 3000, "{}", expected.len());
                for work_mem in ["64MB", "64kB"] {
                    s.settings
                        .set("work_mem", work_mem, Source::Session)
                        .unwrap();
                    let extra = filtered.then(tags_ascend);
                    let mut join = merge_join(&outer, &inner, kind, extra);
                    let got = sorted(pull(&mut s, &mut join));
                    assert!(
                        got == expected,
                        "{kind:?}, filtered {filtered}, {work_mem}: {} rows against {}",
                        got.len(),
                        expected.len()
                    );
                    // The 2000 rows of key 5 take about 200kB.
                    assert_eq!(join.groups_spilled > 0, work_mem == "64kB", "{work_mem}");
                }
            }
        }
    }

    #[test]
    fn a_merge_join_rescans_and_gives_back_a_spilled_groups_file_when_closed_early() {
        let (mut s, dir) = session();
        s.settings.set("work_mem", "64kB", Source::Session).unwrap();
        let outer = side(50, 10, 2);
        let inner = side(80, 10, 2000);
        let mut join = merge_join(&outer, &inner, JoinKind::Left, None);
        let all = pull(&mut s, &mut join);
        assert_eq!(
            sorted(all.clone()),
            sorted(reference(&outer, &inner, JoinKind::Left, |_| true))
        );
        // Ended: nothing more until a rescan, which starts both sides over.
        assert!(pull(&mut s, &mut join).is_empty());
        in_statement(&mut s, |cx| join.rescan(cx).unwrap());
        assert_eq!(pull(&mut s, &mut join), all);
        assert_eq!(join.counts.rescans, 1);

        in_statement(&mut s, |cx| join.rescan(cx).unwrap());
        let tmp = in_statement(&mut s, |cx| {
            let tmp = cx.session.db().temp_dir();
            // Pull until the group of key 5 is being replayed from its file.
            let mut out = Batch::default();
            let mut pulled = 0;
            while open_files_in(&tmp) == 0 {
                out.clear();
                join.next_batch(cx, &mut out, 7).unwrap();
                assert!(!out.is_empty(), "the group of key 5 spills before the end");
                assert!(out.len() <= 7, "no more rows than asked for");
                pulled += out.len();
            }
            assert!(pulled < all.len());
            join.close(cx);
            assert_eq!(open_files_in(&tmp), 0, "closing gave the file back");
            out.clear();
            join.next_batch(cx, &mut out, 7).unwrap();
            assert!(out.is_empty(), "a closed join returns nothing");
            tmp
        });
        assert!(tmp.starts_with(dir.path()));
    }

    #[test]
    fn keys_match_as_the_hash_joins_equality_does() {
        use crate::types::Numeric;
        let n = |text: &str| Value::Numeric(Numeric::parse(text).unwrap());
        // Equal numerics of other scales, and char(n) without padding.
        assert!(keys_match(&[n("1.50")], &[n("1.5")]));
        assert!(keys_match(
            &[Value::Char("ab  ".into())],
            &[Value::Char("ab".into())]
        ));
        // NULL matches nothing, itself neither, but sorts (last) as equal
        // to NULL.
        assert!(!keys_match(&[Value::Null], &[Value::Null]));
        assert!(key_order(&[Value::Null], &[Value::Null]).is_eq());
        assert!(key_order(&[Value::Integer(9)], &[Value::Null]).is_lt());
        assert!(!keys_match(
            &[Value::Integer(1), Value::Null],
            &[Value::Integer(1), Value::Null]
        ));
    }
}
