//! Sorting rows in bounded memory, and the temporary files it spills to
//! (the `sort` layer: above `types`, below the executor and the access
//! methods, so that a B-tree build can sort its keys as a query sorts its
//! rows).
//!
//! [`Sorter`] keeps rows in memory until they exceed its memory limit
//! (`work_mem` for a query), then sorts them and writes them out as a
//! *run*. Runs are merged, at most [`merge_fan_in`] at a time, as they come
//! (like the digits of a counter: when the last `fan_in` runs are of one
//! level they become one run of the next), so that the files open stay
//! about `fan_in` per level however large the input; at the end the rest
//! are merged, in passes while more than `fan_in` are left. The sort is
//! stable: rows that compare equal keep their input order, since runs hold
//! consecutive stretches of the input and merging prefers the earlier run.
//! A sort that fits in memory sorts in place and touches no file.
//!
//! - `records.rs`: [`RecordSorter`], the same sort for byte records (a
//!   B-tree build's encoded index tuples) kept in one arena with
//!   abbreviated keys, without an allocation per record.
//! - `spill.rs`: nameless temporary files of self-describing rows
//!   ([`SpillWriter`], [`SpillReader`]), also used by hash aggregation's
//!   spilled partitions, and [`row_bytes`], how memory is counted.

use std::cmp::Ordering;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::types::Value;

pub mod records;
pub mod spill;

pub use records::{RecordOrder, RecordSorter, SortedRecords};
pub use spill::{row_bytes, SpillReader, SpillWriter, SPILL_BUFFER_BYTES};

/// Fewest runs merged at once, however small the memory limit (each
/// costs [`SPILL_BUFFER_BYTES`]): fewer would mean many merge passes.
pub const MERGE_FAN_IN_MIN: usize = 4;
/// Most runs merged at once. Each is an open file, and a sort holds up
/// to this many per level (levels grow as log(rows) / log(fan-in): 4 for
/// a billion rows at 4MB), which must stay well inside the usual limit of
/// 1024 open files; and beyond this choosing the next row costs more than
/// another pass saves.
pub const MERGE_FAN_IN_MAX: usize = 64;

/// How many runs one merge reads at a time within `mem_bytes`.
pub fn merge_fan_in(mem_bytes: usize) -> usize {
    (mem_bytes / SPILL_BUFFER_BYTES).clamp(MERGE_FAN_IN_MIN, MERGE_FAN_IN_MAX)
}

/// Adds a run just written (level 0) to `runs` (oldest first, with their
/// levels), then merges the last `fan_in` runs with `merge` into one of the
/// next level while they share a level: like the digits of a counter, so
/// that about `fan_in` runs per level stay open however large the input.
/// Levels never rise along the vector. Both sorters keep their runs so.
pub(crate) fn add_run<R>(
    runs: &mut Vec<(R, u32)>,
    run: R,
    fan_in: usize,
    mut merge: impl FnMut(Vec<R>) -> Result<R, SortError>,
) -> Result<(), SortError> {
    runs.push((run, 0));
    while let Some(&(_, level)) = runs.last() {
        let n = runs.len();
        if n < fan_in || runs[n - fan_in..].iter().any(|r| r.1 != level) {
            break;
        }
        let group = runs.drain(n - fan_in..).map(|r| r.0).collect();
        let merged = merge(group)?;
        runs.push((merged, level + 1));
    }
    Ok(())
}

/// Merges `runs` (oldest first) with `merge`, `fan_in` neighbouring runs
/// at a time, in passes until one merge can read every run: each pass
/// keeps earlier input earlier, so a stable merge stays stable. Both
/// sorters end their input so.
pub(crate) fn merge_passes<R>(
    mut runs: Vec<R>,
    fan_in: usize,
    mut merge: impl FnMut(Vec<R>) -> Result<R, SortError>,
) -> Result<Vec<R>, SortError> {
    debug_assert!(fan_in >= MERGE_FAN_IN_MIN, "a merge reads several runs");
    let mut passes = 0;
    while runs.len() > fan_in {
        passes += 1;
        assert!(passes <= 64, "merge passes do not shrink the runs");
        let mut merged = Vec::with_capacity(runs.len().div_ceil(fan_in));
        let mut left = runs.into_iter();
        loop {
            let group: Vec<R> = left.by_ref().take(fan_in).collect();
            if group.is_empty() {
                break;
            }
            merged.push(merge(group)?);
        }
        runs = merged;
    }
    Ok(runs)
}

/// Restores a binary min-heap `heap` below `at`, where `less(a, b)` says
/// element `a` goes before `b`: the sift-down of both sorters' merges,
/// whose heaps hold run numbers ordered by each run's next record.
pub(crate) fn sift_down(heap: &mut [usize], mut at: usize, less: impl Fn(usize, usize) -> bool) {
    loop {
        let (l, r) = (2 * at + 1, 2 * at + 2);
        let mut least = at;
        if l < heap.len() && less(heap[l], heap[least]) {
            least = l;
        }
        if r < heap.len() && less(heap[r], heap[least]) {
            least = r;
        }
        if least == at {
            return;
        }
        heap.swap(at, least);
        at = least;
    }
}

/// A failure of a temporary file (full disk, directory not writable, a
/// file read back short).
#[derive(Debug, Error)]
pub enum SortError {
    #[error("could not {action} a temporary file in \"{}\": {source}; it must be a writable directory with free space (it is on the data directory's file system), or raise work_mem so that less is spilled", dir.display())]
    TempFile {
        dir: PathBuf,
        action: &'static str,
        source: std::io::Error,
    },
}

impl SortError {
    /// PostgreSQL's SQLSTATE for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            SortError::TempFile { source, .. } => crate::storage::io_sqlstate(source),
        }
    }
}

/// The order rows sort by.
pub type RowOrder = Box<dyn Fn(&[Value], &[Value]) -> Ordering + Send>;

/// How a sort ran, for EXPLAIN ANALYZE (PostgreSQL's "Sort Method").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SortStats {
    /// The rows did not fit in memory and were merged from runs on disk.
    pub external: bool,
    /// Only the first rows were wanted, and the others were dropped as
    /// the input came (a top-N sort).
    pub top_n: bool,
    /// Most memory the rows held at once, in bytes ([`row_bytes`]).
    pub peak_memory_bytes: u64,
    /// Runs written by the first pass (0 in memory).
    pub runs: u64,
    /// Bytes written to temporary files, every pass.
    pub spilled_bytes: u64,
}

/// Rows being sorted: pushed in any order, then [`Sorter::finish`]ed.
pub struct Sorter {
    order: RowOrder,
    /// Only this many first rows are wanted (a LIMIT above the sort).
    bound: Option<usize>,
    mem_limit: usize,
    dir: PathBuf,
    rows: Vec<Vec<Value>>,
    mem: usize,
    /// Runs written, oldest first, with their level (0: written from
    /// memory; n + 1: merged from `fan_in` runs of level n). Levels never
    /// rise along the vector.
    runs: Vec<(SpillReader, u32)>,
    stats: SortStats,
}

impl Sorter {
    /// A sort by `order` holding at most about `mem_limit` bytes of rows,
    /// spilling to nameless files in `dir` beyond that.
    pub fn new(order: RowOrder, mem_limit: usize, dir: &Path) -> Sorter {
        Sorter {
            order,
            bound: None,
            mem_limit,
            dir: dir.to_path_buf(),
            rows: Vec::new(),
            mem: 0,
            runs: Vec::new(),
            stats: SortStats::default(),
        }
    }

    /// Only the first `bound` rows of the result will be read: once twice
    /// that many are held, the rows are sorted and all but the first
    /// `bound` dropped, so that `ORDER BY … LIMIT n` holds about 2n rows
    /// (PostgreSQL's bounded sort keeps a heap of n; sorting 2n rows per n
    /// new ones costs the same order of work and keeps the sort stable
    /// without numbering the rows).
    pub fn with_bound(mut self, bound: usize) -> Sorter {
        self.bound = Some(bound.max(1));
        self
    }

    pub fn push(&mut self, row: Vec<Value>) -> Result<(), SortError> {
        self.mem += row_bytes(&row);
        self.rows.push(row);
        self.stats.peak_memory_bytes = self.stats.peak_memory_bytes.max(self.mem as u64);
        if let Some(bound) = self.bound {
            if self.rows.len() >= bound.saturating_mul(2) {
                self.cut_to(bound);
                self.stats.top_n = true;
            }
        }
        // At least two rows per run, so that every run makes progress.
        if self.mem > self.mem_limit && self.rows.len() > 1 {
            self.write_run()?;
        }
        Ok(())
    }

    /// Sorts the rows held and keeps the first `keep`.
    fn cut_to(&mut self, keep: usize) {
        self.rows.sort_by(|x, y| (self.order)(x, y));
        for row in self.rows.drain(keep.min(self.rows.len())..) {
            self.mem -= row_bytes(&row);
        }
    }

    /// Sorts the rows in memory and writes them out as the next run (only
    /// the first `bound` of them: no later row of this run can be wanted),
    /// then merges the last runs while `fan_in` of them share a level.
    fn write_run(&mut self) -> Result<(), SortError> {
        self.cut_to(self.bound.unwrap_or(usize::MAX));
        let mut w = SpillWriter::create(&self.dir)?;
        for row in self.rows.drain(..) {
            w.push(&row)?;
        }
        self.mem = 0;
        self.stats.external = true;
        self.stats.runs += 1;
        self.stats.spilled_bytes += w.bytes();
        let run = w.finish()?;
        let fan_in = merge_fan_in(self.mem_limit);
        let mut runs = std::mem::take(&mut self.runs);
        let added = add_run(&mut runs, run, fan_in, |group| self.merge_to_run(group));
        self.runs = runs;
        added
    }

    /// Runs written and not yet merged into others (each an open file).
    #[cfg(test)]
    fn open_runs(&self) -> usize {
        self.runs.len()
    }

    /// Merges neighbouring runs into one (its first `bound` rows).
    fn merge_to_run(&mut self, group: Vec<SpillReader>) -> Result<SpillReader, SortError> {
        let mut merge = Merge::new(group, &self.order)?;
        let mut w = SpillWriter::create(&self.dir)?;
        let keep = self.bound.unwrap_or(usize::MAX) as u64;
        while w.rows() < keep {
            let Some(row) = merge.next_row(&self.order)? else {
                break;
            };
            w.push(&row)?;
        }
        self.stats.spilled_bytes += w.bytes();
        w.finish()
    }

    /// Ends the input: the rows in order, merged from disk if they spilled.
    pub fn finish(mut self) -> Result<SortedRows, SortError> {
        if self.runs.is_empty() {
            self.cut_to(self.bound.unwrap_or(usize::MAX));
            return Ok(SortedRows {
                source: Source::Memory(self.rows.into_iter()),
                stats: self.stats,
            });
        }
        if !self.rows.is_empty() {
            self.write_run()?;
        }
        // Merge passes until one merge can read every run; each merges
        // neighbouring runs so that earlier input stays earlier (stable).
        let fan_in = merge_fan_in(self.mem_limit);
        let runs = std::mem::take(&mut self.runs)
            .into_iter()
            .map(|r| r.0)
            .collect();
        let runs = merge_passes(runs, fan_in, |group| self.merge_to_run(group))?;
        let merge = Merge::new(runs, &self.order)?;
        Ok(SortedRows {
            source: Source::Merge(merge, self.order),
            stats: self.stats,
        })
    }
}

/// The sorted rows, returned one at a time.
pub struct SortedRows {
    source: Source,
    stats: SortStats,
}

enum Source {
    Memory(std::vec::IntoIter<Vec<Value>>),
    Merge(Merge, RowOrder),
}

impl SortedRows {
    /// No rows (a closed sort).
    pub fn empty() -> SortedRows {
        SortedRows {
            source: Source::Memory(Vec::new().into_iter()),
            stats: SortStats::default(),
        }
    }

    pub fn next_row(&mut self) -> Result<Option<Vec<Value>>, SortError> {
        match &mut self.source {
            Source::Memory(rows) => Ok(rows.next()),
            Source::Merge(merge, order) => merge.next_row(order),
        }
    }

    pub fn stats(&self) -> SortStats {
        self.stats
    }
}

/// A merge of sorted runs: a binary min-heap of run numbers ordered by
/// each run's next row, ties by run number (the earlier run first).
struct Merge {
    runs: Vec<SpillReader>,
    /// The next row of each run (None once it ended).
    heads: Vec<Option<Vec<Value>>>,
    /// Runs with a head, as a heap.
    heap: Vec<usize>,
}

impl Merge {
    fn new(mut runs: Vec<SpillReader>, order: &RowOrder) -> Result<Merge, SortError> {
        let mut heads = Vec::with_capacity(runs.len());
        for run in &mut runs {
            heads.push(run.next_row()?);
        }
        let mut m = Merge {
            heap: (0..runs.len()).filter(|&i| heads[i].is_some()).collect(),
            runs,
            heads,
        };
        for i in (0..m.heap.len() / 2).rev() {
            m.sift_down(i, order);
        }
        Ok(m)
    }

    fn less(heads: &[Option<Vec<Value>>], a: usize, b: usize, order: &RowOrder) -> bool {
        let (x, y) = (heads[a].as_ref(), heads[b].as_ref());
        let (Some(x), Some(y)) = (x, y) else {
            unreachable!("only runs with a head are in the heap");
        };
        order(x, y).then(a.cmp(&b)).is_lt()
    }

    fn sift_down(&mut self, at: usize, order: &RowOrder) {
        let Merge { heads, heap, .. } = self;
        sift_down(heap, at, |a, b| Merge::less(heads, a, b, order));
    }

    fn next_row(&mut self, order: &RowOrder) -> Result<Option<Vec<Value>>, SortError> {
        let Some(&run) = self.heap.first() else {
            return Ok(None);
        };
        let next = self.runs[run].next_row()?;
        let row = std::mem::replace(&mut self.heads[run], next);
        if self.heads[run].is_none() {
            let last = self.heap.pop().expect("not empty");
            if !self.heap.is_empty() {
                self.heap[0] = last;
            }
        }
        self.sift_down(0, order);
        debug_assert!(row.is_some(), "a run in the heap has a head");
        Ok(row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows of (key, input position), keys with many ties.
    fn rows(n: usize, seed: u64) -> Vec<Vec<Value>> {
        let mut x = seed;
        (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let key = if x.is_multiple_of(10) {
                    Value::Null
                } else {
                    Value::Text(format!("k{}", x % 500))
                };
                vec![key, Value::BigInt(i as i64)]
            })
            .collect()
    }

    fn by_key() -> RowOrder {
        Box::new(|x: &[Value], y: &[Value]| crate::types::sort_cmp(&x[0], &y[0], false))
    }

    fn sort_all(input: &[Vec<Value>], mem: usize, dir: &Path) -> (Vec<Vec<Value>>, SortStats) {
        let mut s = Sorter::new(by_key(), mem, dir);
        for row in input {
            s.push(row.clone()).unwrap();
        }
        let mut sorted = s.finish().unwrap();
        let mut out = Vec::new();
        while let Some(row) = sorted.next_row().unwrap() {
            out.push(row);
        }
        (out, sorted.stats())
    }

    #[test]
    fn spilled_sorts_equal_a_stable_sort_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let input = rows(20_000, 0x9e37_79b9_7f4a_7c15);
        let mut expected = input.clone();
        let order = by_key();
        expected.sort_by(|x, y| order(x, y));
        let (in_memory, stats) = sort_all(&input, usize::MAX, dir.path());
        assert_eq!(in_memory, expected);
        assert!(!stats.external && stats.spilled_bytes == 0 && stats.runs == 0);
        // 64 kB: about 30 runs, 4 kB: hundreds; either limit merges 4 runs
        // at a time (MERGE_FAN_IN_MIN), so both take several passes.
        for mem in [64 * 1024, 4 * 1024] {
            let (spilled, stats) = sort_all(&input, mem, dir.path());
            assert_eq!(spilled, expected, "work_mem {mem}");
            assert!(stats.external && stats.runs > 10, "{stats:?}");
            assert!(stats.peak_memory_bytes <= mem as u64 + 200, "{stats:?}");
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_bounded_sort_returns_the_first_rows_of_the_stable_sort_holding_few() {
        let dir = tempfile::tempdir().unwrap();
        let input = rows(20_000, 42);
        let (all, _) = sort_all(&input, usize::MAX, dir.path());
        for (bound, mem) in [
            (1, usize::MAX),
            (10, usize::MAX),
            (300, usize::MAX),
            (300, 8 * 1024),
        ] {
            let mut s = Sorter::new(by_key(), mem, dir.path()).with_bound(bound);
            for row in &input {
                s.push(row.clone()).unwrap();
            }
            let mut sorted = s.finish().unwrap();
            let mut first = Vec::new();
            while first.len() < bound {
                first.push(sorted.next_row().unwrap().expect("at least bound rows"));
            }
            assert_eq!(first, all[..bound], "bound {bound}, memory {mem}");
            let stats = sorted.stats();
            if mem == usize::MAX {
                assert!(stats.top_n, "{stats:?}");
                // About 2 × bound rows held at most, never the 20 000.
                let row = input.iter().map(|r| row_bytes(r)).max().unwrap() as u64;
                assert!(
                    stats.peak_memory_bytes <= 2 * bound as u64 * row,
                    "{stats:?}"
                );
                assert!(!stats.external);
            }
        }
    }

    #[test]
    fn runs_are_merged_as_they_come_so_few_files_stay_open() {
        let dir = tempfile::tempdir().unwrap();
        let input = rows(20_000, 7);
        // 4 kB: fan-in 4, hundreds of runs.
        let mut s = Sorter::new(by_key(), 4 * 1024, dir.path());
        let mut most_open = 0;
        for row in &input {
            s.push(row.clone()).unwrap();
            most_open = most_open.max(s.open_runs());
        }
        assert!(s.stats.runs > 300, "{:?}", s.stats);
        // At most 3 runs of each level (a fourth merges them), and about
        // log4(runs) levels.
        assert!(most_open <= 3 * 6, "{most_open} runs open at once");
        let mut sorted = s.finish().unwrap();
        let mut out = Vec::new();
        while let Some(row) = sorted.next_row().unwrap() {
            out.push(row);
        }
        let (expected, _) = sort_all(&input, usize::MAX, dir.path());
        assert_eq!(out, expected);
    }

    #[test]
    fn no_rows_and_one_row_sort() {
        let dir = tempfile::tempdir().unwrap();
        assert!(sort_all(&[], 1, dir.path()).0.is_empty());
        let one = vec![vec![Value::Integer(1)]];
        assert_eq!(sort_all(&one, 1, dir.path()).0, one);
    }
}
