//! Sorting byte records (a B-tree build's encoded index tuples) in bounded
//! memory, without a heap allocation per record.
//!
//! [`Sorter`](super::Sorter) sorts rows of [`Value`](crate::types::Value)s:
//! each row is a vector of values, and each text value a string of its
//! own, so a sort of millions of keys spends its time allocating, freeing
//! and chasing pointers. A build already has each key in the form it will
//! write to the page, so [`RecordSorter`] keeps those bytes instead: one
//! arena of records laid end to end and an array of 16-byte entries (an
//! *abbreviated key* and where the record lies), as PostgreSQL's tuplesort
//! keeps `SortTuple`s with a first datum beside a pointer. Entries are
//! sorted by their abbreviated keys, and only entries whose abbreviated
//! keys are equal compare their records with the caller's order.
//!
//! The abbreviated key is the caller's, with one rule: for records `a` and
//! `b`, `abbrev(a) < abbrev(b)` must imply `a` sorts before `b` (equal
//! abbreviated keys say nothing). A constant keeps every comparison full.
//!
//! Beyond the memory limit the entries are sorted and written out as a run
//! (abbreviated key, length, bytes), and runs are merged as
//! [`Sorter`](super::Sorter)'s are ([`add_run`](super::add_run)). The
//! sort is not stable: a build's records are unique (their heap TID is
//! part of the order), so no two compare equal.

use std::cmp::Ordering;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use super::spill::{create_temp_file, rewound};
use super::{merge_fan_in, SortError, SortStats, SPILL_BUFFER_BYTES};

/// The order records sort by (after their abbreviated keys).
pub type RecordOrder = Box<dyn Fn(&[u8], &[u8]) -> Ordering>;

/// Most bytes the arena holds: entries address it with 32 bits. A larger
/// memory limit spills runs of this size.
const ARENA_BYTES_MAX: usize = u32::MAX as usize;
/// The arena's first allocation; it doubles from there up to the memory
/// limit, so a small build does not take `maintenance_work_mem` at once.
const ARENA_BYTES_FIRST: usize = 64 * 1024;
/// Longest record (a B-tree's is at most a third of a page). A run's
/// length word is only trusted up to this, so that a damaged temporary
/// file cannot make a read reserve gigabytes.
pub const RECORD_BYTES_MAX: usize = 1 << 20;
/// Bytes of an entry, as the memory limit counts it.
const ENTRY_BYTES: usize = std::mem::size_of::<Entry>();

/// A record held in memory: its abbreviated key and where its bytes lie
/// in the arena.
#[derive(Debug, Clone, Copy)]
struct Entry {
    abbrev: u64,
    offset: u32,
    len: u32,
}

/// Records being sorted: pushed in any order, then [`finish`]ed.
///
/// [`finish`]: RecordSorter::finish
pub struct RecordSorter {
    order: RecordOrder,
    mem_limit: usize,
    dir: PathBuf,
    arena: Vec<u8>,
    entries: Vec<Entry>,
    /// Runs written, oldest first, with their level (see
    /// [`add_run`](super::add_run)).
    runs: Vec<(RecordRun, u32)>,
    stats: SortStats,
}

impl RecordSorter {
    /// A sort by `order` holding at most about `mem_limit` bytes (records
    /// and entries), spilling to nameless files in `dir` beyond that.
    pub fn new(order: RecordOrder, mem_limit: usize, dir: &Path) -> RecordSorter {
        RecordSorter {
            order,
            mem_limit,
            dir: dir.to_path_buf(),
            arena: Vec::new(),
            entries: Vec::new(),
            runs: Vec::new(),
            stats: SortStats::default(),
        }
    }

    /// Bytes held: what the memory limit counts.
    fn mem(&self) -> usize {
        self.arena.len() + self.entries.len() * ENTRY_BYTES
    }

    /// Adds `record` with abbreviated key `abbrev`.
    pub fn push(&mut self, abbrev: u64, record: &[u8]) -> Result<(), SortError> {
        assert!(
            record.len() <= RECORD_BYTES_MAX,
            "a sort record of {} bytes",
            record.len()
        );
        let len = record.len() as u32;
        let full = !self.entries.is_empty()
            && (self.mem() + record.len() + ENTRY_BYTES > self.mem_limit
                || self.arena.len() + record.len() > ARENA_BYTES_MAX);
        if full {
            self.write_run()?;
        }
        if self.arena.capacity() - self.arena.len() < record.len() {
            // Grow by doubling, but not past the memory limit: a doubling
            // would hold up to twice what the limit allows.
            let wanted = (self.arena.capacity() * 2)
                .max(ARENA_BYTES_FIRST)
                .min(self.mem_limit.min(ARENA_BYTES_MAX))
                .max(self.arena.len() + record.len());
            self.arena.reserve_exact(wanted - self.arena.len());
        }
        let offset = self.arena.len() as u32;
        self.arena.extend_from_slice(record);
        self.entries.push(Entry {
            abbrev,
            offset,
            len,
        });
        self.stats.peak_memory_bytes = self.stats.peak_memory_bytes.max(self.mem() as u64);
        Ok(())
    }

    /// Sorts the entries held by abbreviated key, then record.
    fn sort_entries(&mut self) {
        let (arena, order) = (&self.arena, &self.order);
        let bytes = |e: &Entry| &arena[e.offset as usize..e.offset as usize + e.len as usize];
        self.entries.sort_unstable_by(|x, y| {
            x.abbrev
                .cmp(&y.abbrev)
                .then_with(|| order(bytes(x), bytes(y)))
        });
    }

    /// Sorts the records in memory and writes them out as the next run,
    /// then merges the last runs while `fan_in` of them share a level.
    fn write_run(&mut self) -> Result<(), SortError> {
        self.sort_entries();
        let mut w = RunWriter::create(&self.dir)?;
        for e in &self.entries {
            let at = e.offset as usize;
            w.push(e.abbrev, &self.arena[at..at + e.len as usize])?;
        }
        self.entries.clear();
        self.arena.clear();
        self.stats.external = true;
        self.stats.runs += 1;
        self.stats.spilled_bytes += w.bytes;
        let run = w.finish()?;
        let fan_in = merge_fan_in(self.mem_limit);
        let (dir, order, stats) = (&self.dir, &self.order, &mut self.stats);
        super::add_run(&mut self.runs, run, fan_in, |group| {
            merge_to_run(group, order, dir, stats)
        })
    }

    /// Ends the input: the records in order, merged from disk if they
    /// spilled.
    pub fn finish(mut self) -> Result<SortedRecords, SortError> {
        if self.runs.is_empty() {
            self.sort_entries();
            return Ok(SortedRecords {
                source: RecordSource::Memory {
                    arena: self.arena,
                    entries: self.entries.into_iter(),
                },
                stats: self.stats,
            });
        }
        if !self.entries.is_empty() {
            self.write_run()?;
        }
        // The arena is not needed again: give its memory to the merge.
        self.arena = Vec::new();
        self.entries = Vec::new();
        let fan_in = merge_fan_in(self.mem_limit);
        let runs = std::mem::take(&mut self.runs)
            .into_iter()
            .map(|r| r.0)
            .collect();
        let (dir, order, stats) = (&self.dir, &self.order, &mut self.stats);
        let runs =
            super::merge_passes(runs, fan_in, |group| merge_to_run(group, order, dir, stats))?;
        let merge = RecordMerge::new(runs, &self.order)?;
        Ok(SortedRecords {
            source: RecordSource::Merge {
                merge,
                order: self.order,
                out: Vec::new(),
            },
            stats: self.stats,
        })
    }
}

/// Merges runs into one.
fn merge_to_run(
    group: Vec<RecordRun>,
    order: &RecordOrder,
    dir: &Path,
    stats: &mut SortStats,
) -> Result<RecordRun, SortError> {
    let mut merge = RecordMerge::new(group, order)?;
    let mut w = RunWriter::create(dir)?;
    let mut out = Vec::new();
    while let Some(abbrev) = merge.next_into(order, &mut out)? {
        w.push(abbrev, &out)?;
    }
    stats.spilled_bytes += w.bytes;
    w.finish()
}

/// The sorted records, returned one at a time.
pub struct SortedRecords {
    source: RecordSource,
    stats: SortStats,
}

enum RecordSource {
    Memory {
        arena: Vec<u8>,
        entries: std::vec::IntoIter<Entry>,
    },
    Merge {
        merge: RecordMerge,
        order: RecordOrder,
        /// The record last returned.
        out: Vec<u8>,
    },
}

impl SortedRecords {
    /// The next record, or None after the last; valid until the next call.
    pub fn next_record(&mut self) -> Result<Option<&[u8]>, SortError> {
        match &mut self.source {
            RecordSource::Memory { arena, entries } => Ok(entries.next().map(|e| {
                let at = e.offset as usize;
                &arena[at..at + e.len as usize]
            })),
            RecordSource::Merge { merge, order, out } => {
                Ok(merge.next_into(order, out)?.map(|_| out.as_slice()))
            }
        }
    }

    pub fn stats(&self) -> SortStats {
        self.stats
    }
}

/// A run being written: per record its abbreviated key (u64), length
/// (u32) and bytes.
struct RunWriter {
    dir: PathBuf,
    file: BufWriter<File>,
    records: u64,
    bytes: u64,
}

impl RunWriter {
    fn create(dir: &Path) -> Result<RunWriter, SortError> {
        Ok(RunWriter {
            dir: dir.to_path_buf(),
            file: create_temp_file(dir)?,
            records: 0,
            bytes: 0,
        })
    }

    fn push(&mut self, abbrev: u64, record: &[u8]) -> Result<(), SortError> {
        let len = record.len() as u32;
        let written = self
            .file
            .write_all(&abbrev.to_le_bytes())
            .and_then(|()| self.file.write_all(&len.to_le_bytes()))
            .and_then(|()| self.file.write_all(record));
        written.map_err(|e| SortError::TempFile {
            dir: self.dir.clone(),
            action: "write to",
            source: e,
        })?;
        self.records += 1;
        self.bytes += 12 + record.len() as u64;
        Ok(())
    }

    fn finish(self) -> Result<RecordRun, SortError> {
        let file = rewound(self.file, &self.dir)?;
        Ok(RecordRun {
            reader: BufReader::with_capacity(SPILL_BUFFER_BYTES, file),
            dir: self.dir,
            left: self.records,
        })
    }
}

/// A finished run, read from its first record to its last.
struct RecordRun {
    dir: PathBuf,
    reader: BufReader<File>,
    /// Records not read yet.
    left: u64,
}

impl RecordRun {
    /// Reads the next record into `out`; its abbreviated key, or None
    /// after the last.
    fn next_into(&mut self, out: &mut Vec<u8>) -> Result<Option<u64>, SortError> {
        if self.left == 0 {
            return Ok(None);
        }
        let mut head = [0u8; 12];
        let read = self.reader.read_exact(&mut head).and_then(|()| {
            let len = u32::from_le_bytes(head[8..12].try_into().expect("4")) as usize;
            if len > RECORD_BYTES_MAX {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("a record of {len} bytes, more than {RECORD_BYTES_MAX}"),
                ));
            }
            out.resize(len, 0);
            self.reader.read_exact(out)
        });
        read.map_err(|e| SortError::TempFile {
            dir: self.dir.clone(),
            action: "read",
            source: e,
        })?;
        self.left -= 1;
        Ok(Some(u64::from_le_bytes(head[0..8].try_into().expect("8"))))
    }
}

/// A merge of sorted runs: a binary min-heap of run numbers ordered by
/// each run's next record (abbreviated key first).
struct RecordMerge {
    runs: Vec<RecordRun>,
    /// The next record of each run and its abbreviated key (None once
    /// the run ended).
    heads: Vec<(Option<u64>, Vec<u8>)>,
    /// Runs with a head, as a heap.
    heap: Vec<usize>,
}

impl RecordMerge {
    fn new(mut runs: Vec<RecordRun>, order: &RecordOrder) -> Result<RecordMerge, SortError> {
        let mut heads = Vec::with_capacity(runs.len());
        for run in &mut runs {
            let mut bytes = Vec::new();
            let abbrev = run.next_into(&mut bytes)?;
            heads.push((abbrev, bytes));
        }
        let mut m = RecordMerge {
            heap: (0..runs.len()).filter(|&i| heads[i].0.is_some()).collect(),
            runs,
            heads,
        };
        for i in (0..m.heap.len() / 2).rev() {
            m.sift_down(i, order);
        }
        Ok(m)
    }

    fn less(heads: &[(Option<u64>, Vec<u8>)], a: usize, b: usize, order: &RecordOrder) -> bool {
        let ((Some(x), xb), (Some(y), yb)) = (&heads[a], &heads[b]) else {
            unreachable!("only runs with a head are in the heap");
        };
        x.cmp(y).then_with(|| order(xb, yb)).is_lt()
    }

    fn sift_down(&mut self, at: usize, order: &RecordOrder) {
        let RecordMerge { heads, heap, .. } = self;
        super::sift_down(heap, at, |a, b| RecordMerge::less(heads, a, b, order));
    }

    /// Moves the least head into `out` (reusing its buffer) and returns
    /// its abbreviated key; None when every run has ended.
    fn next_into(
        &mut self,
        order: &RecordOrder,
        out: &mut Vec<u8>,
    ) -> Result<Option<u64>, SortError> {
        let Some(&run) = self.heap.first() else {
            return Ok(None);
        };
        let (abbrev, head) = &mut self.heads[run];
        let taken = abbrev.take();
        debug_assert!(taken.is_some(), "a run in the heap has a head");
        std::mem::swap(head, out);
        *abbrev = self.runs[run].next_into(head)?;
        if abbrev.is_none() {
            let last = self.heap.pop().expect("not empty");
            if !self.heap.is_empty() {
                self.heap[0] = last;
            }
        }
        self.sift_down(0, order);
        Ok(taken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records of a 4-byte big-endian key with many ties and a 4-byte
    /// position (unique, so the order is total), padded to varied lengths.
    fn records(n: u32, seed: u64) -> Vec<Vec<u8>> {
        let mut x = seed;
        (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let mut r = ((x % 500) as u32).to_be_bytes().to_vec();
                r.extend_from_slice(&i.to_be_bytes());
                r.resize(8 + (x % 40) as usize, b'x');
                r
            })
            .collect()
    }

    fn order() -> RecordOrder {
        Box::new(|a: &[u8], b: &[u8]| a[..8].cmp(&b[..8]))
    }

    /// The key's first byte pair: coarse, so most comparisons tie on it.
    fn abbrev(r: &[u8]) -> u64 {
        u64::from(u16::from_be_bytes([r[0], r[1]]))
    }

    fn sort_all(input: &[Vec<u8>], mem: usize, dir: &Path) -> (Vec<Vec<u8>>, SortStats) {
        let mut s = RecordSorter::new(order(), mem, dir);
        for r in input {
            s.push(abbrev(r), r).unwrap();
        }
        let mut sorted = s.finish().unwrap();
        let mut out = Vec::new();
        while let Some(r) = sorted.next_record().unwrap() {
            out.push(r.to_vec());
        }
        (out, sorted.stats())
    }

    #[test]
    fn spilled_record_sorts_equal_a_sort_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let input = records(20_000, 0x9e37_79b9_7f4a_7c15);
        let mut expected = input.clone();
        expected.sort_by(|a, b| a[..8].cmp(&b[..8]));
        let (in_memory, stats) = sort_all(&input, usize::MAX, dir.path());
        assert_eq!(in_memory, expected);
        assert!(!stats.external && stats.runs == 0);
        // 64 kB: about 10 runs in one merge; 4 kB: hundreds, merged 4 at
        // a time as they come and in passes at the end.
        for mem in [64 * 1024, 4 * 1024] {
            let (spilled, stats) = sort_all(&input, mem, dir.path());
            assert_eq!(spilled, expected, "memory {mem}");
            assert!(stats.external && stats.runs > 5, "{stats:?}");
            assert!(stats.peak_memory_bytes <= mem as u64, "{stats:?}");
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn no_records_and_one_record_sort() {
        let dir = tempfile::tempdir().unwrap();
        assert!(sort_all(&[], 1, dir.path()).0.is_empty());
        let one = vec![vec![1u8; 8]];
        assert_eq!(sort_all(&one, 1, dir.path()).0, one);
    }
}
