//! ANALYZE: a random sample of a table's rows, and the statistics the
//! planner estimates from (`catalog::statistics`).
//!
//! As PostgreSQL's: first a random sample of blocks (Knuth's Algorithm S,
//! up to as many blocks as rows are wanted), read in ascending order
//! through a read stream as PostgreSQL 17 reads them, so that neighbours
//! are combined and reads look ahead; then a reservoir sample of the
//! visible rows on those blocks. The rows are sorted back into physical
//! order, for the correlation. The table's row count is the sampled
//! blocks' live rows scaled to its size.

use std::sync::Arc;

use super::progress::{self, Progress, ProgressUnit};
use super::{lock_table, ExecError};
use crate::catalog::statistics::{column_stats, TableStats, ROWS_PER_TARGET, STATISTICS_TARGET};
use crate::catalog::TableDef;
use crate::database::Session;
use crate::heap::tuple::decode;
use crate::heap::{HeapScan, ScanControl, Tid};
use crate::storage::Fork;
use crate::txn::Snapshot;
use crate::types::Value;

/// What ANALYZE did to one table.
#[derive(Debug, Clone, PartialEq)]
pub struct AnalyzeReport {
    pub pages: u32,
    pub pages_sampled: u32,
    /// Visible rows on the sampled pages.
    pub live_rows_seen: u64,
    /// Rows kept in the sample.
    pub sample_rows: usize,
    /// The table's rows, estimated.
    pub rows: f64,
}

/// A small random generator (splitmix64): sampling needs cheap,
/// well-spread numbers, not cryptographic ones.
struct Random(u64);

impl Random {
    fn seeded() -> Random {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Random(nanos ^ u64::from(std::process::id()).rotate_left(32))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in 0..n (n > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `wanted` of the blocks 0..nblocks, each equally likely, ascending
/// (Knuth's Algorithm S: block t is taken with probability
/// still-wanted / still-left).
fn sample_blocks(nblocks: u32, wanted: u32, random: &mut Random) -> Vec<u32> {
    if wanted >= nblocks {
        return (0..nblocks).collect();
    }
    let mut chosen = Vec::with_capacity(wanted as usize);
    for block in 0..nblocks {
        let left = f64::from(nblocks - block);
        let still = f64::from(wanted) - chosen.len() as f64;
        if left * random.unit() < still {
            chosen.push(block);
        }
        if chosen.len() == wanted as usize {
            break;
        }
    }
    debug_assert_eq!(chosen.len(), wanted as usize, "Algorithm S takes exactly n");
    chosen
}

/// Samples each of `tables` as `snapshot` sees it and stores its
/// statistics, stamped `now`.
pub fn analyze(
    session: &mut Session,
    snapshot: &Snapshot,
    tables: &[Arc<TableDef>],
    now: i64,
    progress: &mut dyn Progress,
) -> Result<Vec<AnalyzeReport>, ExecError> {
    let db = session.db().clone();
    let limits = session.stream_limits();
    let target_rows = ROWS_PER_TARGET * STATISTICS_TARGET;
    let mut random = Random::seeded();
    let mut reports = Vec::with_capacity(tables.len());
    for table in tables {
        lock_table(session, table, crate::txn::LockMode::ShareUpdateExclusive)?;
        let pages = db
            .pool()
            .relation(table.heap.rel)
            .nblocks(Fork::Main)
            .map_err(ExecError::from)?;
        let blocks = sample_blocks(pages, target_rows as u32, &mut random);
        let pages_sampled = blocks.len() as u32;
        let mut task = progress::Task::begin(
            &mut *progress,
            &format!("ANALYZE {}", table.name()),
            Some(u64::from(pages_sampled)),
            ProgressUnit::Blocks,
        );
        let types = &table.heap.types;
        let all = vec![true; types.len()];
        let mut sample: Vec<(Tid, Vec<Value>)> = Vec::with_capacity(target_rows);
        let mut seen: u64 = 0;
        let mut failure = None;
        let mut scan = HeapScan::begin_blocks(&mut session.buf, &table.heap, limits, blocks);
        let mut done = 0u64;
        let result = loop {
            let more = scan.next_page(db.heap(), &mut session.buf, snapshot, |tid, t| {
                seen += 1;
                // Reservoir sampling: the n-th row replaces a random one
                // of the sample with probability target / n.
                let slot = if sample.len() < target_rows {
                    Some(sample.len())
                } else {
                    let k = random.below(seen) as usize;
                    (k < target_rows).then_some(k)
                };
                if let Some(slot) = slot {
                    let mut values = Vec::with_capacity(types.len());
                    if let Err(e) = decode(types, t, &all, &mut values) {
                        failure = Some(e);
                        return ScanControl::Stop;
                    }
                    if slot == sample.len() {
                        sample.push((tid, values));
                    } else {
                        sample[slot] = (tid, values);
                    }
                }
                ScanControl::Continue
            });
            match more {
                Ok(true) if failure.is_none() => {
                    done += 1;
                    task.update(done);
                }
                Ok(_) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        scan.end(&mut session.buf);
        drop(task);
        result?;
        if let Some(e) = failure {
            return Err(e.into());
        }
        sample.sort_unstable_by_key(|(tid, _)| *tid);
        let rows = if pages_sampled == 0 {
            0.0
        } else {
            (seen as f64 / f64::from(pages_sampled) * f64::from(pages)).round()
        };
        let columns = (0..types.len())
            .map(|c| {
                let values: Vec<&Value> = sample.iter().map(|(_, row)| &row[c]).collect();
                column_stats(&values, rows.max(sample.len() as f64), STATISTICS_TARGET)
            })
            .collect();
        let all_visible =
            crate::heap::vm::all_visible_bits(&mut session.buf, table.heap.rel, pages)?
                .into_iter()
                .filter(|&b| b)
                .count() as u32;
        db.statistics().set(
            table.oid,
            TableStats::new(pages, rows, all_visible, columns, now),
            &db.catalog().column_types_by_oid(),
        )?;
        reports.push(AnalyzeReport {
            pages,
            pages_sampled,
            live_rows_seen: seen,
            sample_rows: sample.len(),
            rows,
        });
    }
    Ok(reports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithm_s_takes_exactly_n_ascending_and_spread() {
        let mut r = Random(7);
        for (n, want) in [(10, 3), (1000, 999), (50_000, 30_000), (5, 10), (0, 3)] {
            let b = sample_blocks(n, want, &mut r);
            assert_eq!(b.len(), want.min(n) as usize);
            assert!(b.windows(2).all(|w| w[0] < w[1]));
            assert!(b.iter().all(|&x| x < n));
        }
        // Each block equally likely: over many draws of 10 of 100, every
        // tenth of the table gets about a tenth of the picks.
        let mut counts = [0u32; 10];
        for _ in 0..2000 {
            for b in sample_blocks(100, 10, &mut r) {
                counts[b as usize / 10] += 1;
            }
        }
        assert!(
            counts.iter().all(|&c| (1700..2300).contains(&c)),
            "{counts:?}"
        );
    }
}
