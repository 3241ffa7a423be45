//! Hash partitions on temporary files, for the hash-based nodes that
//! outgrow `work_mem` (hash aggregation and the hash join): rows are
//! written after their key to one of [`SPILL_PARTITIONS`] files by the
//! key's hash, and each file is processed on its own later, split again
//! (with other hash bits) if it is still too big, at most
//! [`SPILL_DEPTH_MAX`] levels deep.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use super::agg::GroupKey;
use super::ExecError;
use crate::sort::{SpillReader, SpillWriter};
use crate::types::Value;

/// Partitions a full table's rows go to.
pub const SPILL_PARTITIONS: usize = 16;
/// Deepest re-partitioning of a partition that is still too big: beyond it
/// a table grows past `work_mem` rather than spill again. Six levels split
/// the keys 16⁶ (16 M) ways; only keys no hash tells apart go deeper.
pub const SPILL_DEPTH_MAX: u32 = 6;

/// One file per partition, made when its first row comes.
pub struct Partitions {
    files: Vec<Option<SpillWriter>>,
    depth: u32,
    dir: PathBuf,
}

impl Partitions {
    /// Partitions of level `depth` (its hash bits), in `dir`.
    pub fn new(depth: u32, dir: &Path) -> Partitions {
        Partitions {
            files: (0..SPILL_PARTITIONS).map(|_| None).collect(),
            depth,
            dir: dir.to_path_buf(),
        }
    }

    /// Writes `row` after `key` to the key's partition.
    pub fn push(&mut self, key: &GroupKey, row: &[Value]) -> Result<(), ExecError> {
        // SipHash with fixed keys: the same partition in every run; the
        // depth mixed in gives other bits at each level.
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.depth.hash(&mut h);
        key.hash(&mut h);
        let p = (h.finish() % SPILL_PARTITIONS as u64) as usize;
        let file = match &mut self.files[p] {
            Some(file) => file,
            empty => empty.insert(SpillWriter::create(&self.dir)?),
        };
        file.push_joined(&key.0, row)?;
        Ok(())
    }

    /// The files, in partition order (None for a partition no row went
    /// to), their bytes added to `stats`.
    pub fn finish(self, stats: &mut HashStats) -> Result<Vec<Option<SpillReader>>, ExecError> {
        let mut out = Vec::with_capacity(self.files.len());
        for file in self.files {
            out.push(match file {
                Some(f) => {
                    stats.spilled_bytes += f.bytes();
                    Some(f.finish()?)
                }
                None => None,
            });
        }
        Ok(out)
    }
}

/// What a hash table cost, for EXPLAIN ANALYZE (PostgreSQL's "Batches",
/// "Memory Usage" and "Disk Usage").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HashStats {
    /// Tables built: 1, plus one per spilled partition processed.
    pub batches: u64,
    pub peak_memory_bytes: u64,
    pub spilled_bytes: u64,
}

impl HashStats {
    /// A table built, holding at most `memory_bytes`.
    pub fn table_built(&mut self, memory_bytes: usize) {
        self.batches += 1;
        self.note_memory(memory_bytes);
    }

    pub fn note_memory(&mut self, memory_bytes: usize) {
        self.peak_memory_bytes = self.peak_memory_bytes.max(memory_bytes as u64);
    }

    /// EXPLAIN's line, in PostgreSQL's words and units; None before any
    /// table was built.
    pub fn explain_line(&self) -> Option<String> {
        if self.batches == 0 {
            return None;
        }
        let mut line = format!(
            "Batches: {}  Memory Usage: {}kB",
            self.batches,
            self.peak_memory_bytes.div_ceil(1024)
        );
        if self.spilled_bytes > 0 {
            line.push_str(&format!(
                "  Disk Usage: {}kB",
                self.spilled_bytes.div_ceil(1024)
            ));
        }
        Some(line)
    }
}
