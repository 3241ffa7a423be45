//! Planner statistics: what ANALYZE learns about a table from a sample of
//! its rows, and the selectivity estimates the planner draws from it.
//!
//! Per table: its page and row counts when analysed; per column the null
//! fraction, average width, number of distinct values, most common values
//! with their frequencies, histogram bounds of the other values and the
//! correlation between the values' order and the rows' physical order
//! (PostgreSQL's pg_class.relpages/reltuples and pg_statistic). The
//! estimators follow PostgreSQL's (`eqsel`, `scalarineqsel`,
//! `analyze_mcv_list`, the Haas–Stokes distinct-count estimator), so that
//! plans are chosen as a PostgreSQL user expects.
//!
//! Statistics are advisory: they live in one file of the data directory,
//! `statistics`, rewritten whole (synced, then renamed over the old one)
//! by each ANALYZE, so a crash leaves the old or the new file, never a
//! torn one. A file that does not read back (wrong magic or CRC) is set
//! aside with a warning and the tables are planned as never analysed: no
//! data depends on it. PostgreSQL keeps them in a catalog table; a file of
//! their own keeps the catalog's relations, and their WAL, about data.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::heap::tuple::{decode_values, encode_values_into};
use crate::types::{compare, sort_cmp, ColumnType, Value};

/// The statistics file's name in the data directory.
pub const STATISTICS_FILE: &str = "statistics";
const MAGIC: &[u8; 8] = b"AIOSTAT1";
/// How many rows ANALYZE samples per unit of `default_statistics_target`
/// (PostgreSQL's 300, from the histogram-error bound its sampling
/// follows).
pub const ROWS_PER_TARGET: usize = 300;
/// `default_statistics_target`: most common values and histogram buckets
/// kept per column.
pub const STATISTICS_TARGET: usize = 100;
/// Changes to a table after which its statistics count as stale:
/// PostgreSQL's autovacuum analyze threshold, 50 rows plus a tenth of the
/// table.
const STALE_BASE_ROWS: f64 = 50.0;
const STALE_FRACTION: f64 = 0.1;

/// What ANALYZE learnt about one column.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnStats {
    /// Fraction of rows whose value is NULL.
    pub null_frac: f64,
    /// Average width of the non-null values in bytes.
    pub avg_width: f64,
    /// Distinct non-null values: a count if positive, minus a fraction of
    /// the rows if negative (it grows with the table), as PostgreSQL's
    /// `stadistinct`; 0 if unknown.
    pub n_distinct: f64,
    /// The most common values, most common first, with the fraction of
    /// all rows each makes up.
    pub mcv: Vec<(Value, f64)>,
    /// Bounds of equal-population buckets of the values not in `mcv`,
    /// ascending; empty if fewer than two.
    pub histogram: Vec<Value>,
    /// Correlation between the values' order and the rows' physical
    /// order, -1 to 1; None if fewer than two values were sampled.
    pub correlation: Option<f64>,
}

/// What ANALYZE learnt about one table.
#[derive(Debug)]
pub struct TableStats {
    /// Pages of the table when analysed.
    pub pages: u32,
    /// Live rows estimated when analysed.
    pub rows: f64,
    /// Pages the visibility map said were all-visible when analysed
    /// (PostgreSQL's `relallvisible`): the share of an index-only scan's
    /// rows that need no table read.
    pub all_visible_pages: u32,
    pub columns: Vec<ColumnStats>,
    /// When it was analysed, microseconds since 2000-01-01.
    pub analyzed_at: i64,
    /// Rows inserted, updated or deleted since (PostgreSQL's
    /// `n_mod_since_analyze`); not kept across restarts.
    changed: AtomicU64,
}

impl TableStats {
    pub fn new(
        pages: u32,
        rows: f64,
        all_visible_pages: u32,
        columns: Vec<ColumnStats>,
        analyzed_at: i64,
    ) -> TableStats {
        assert!(all_visible_pages <= pages, "all-visible pages are pages");
        TableStats {
            pages,
            rows,
            all_visible_pages,
            columns,
            analyzed_at,
            changed: AtomicU64::new(0),
        }
    }

    /// Rows changed since the table was analysed.
    pub fn changed_since(&self) -> u64 {
        self.changed.load(Ordering::Relaxed)
    }

    /// Whether enough of the table changed since that a new ANALYZE is
    /// due (PostgreSQL's autovacuum threshold).
    pub fn is_stale(&self) -> bool {
        self.changed_since() as f64 > STALE_BASE_ROWS + STALE_FRACTION * self.rows
    }

    /// Fraction of the table's pages all-visible when analysed.
    pub fn all_visible_fraction(&self) -> f64 {
        if self.pages == 0 {
            0.0
        } else {
            f64::from(self.all_visible_pages) / f64::from(self.pages)
        }
    }

    /// Rows the table holds now, estimated from its density when analysed
    /// and its size now (as PostgreSQL's `estimate_rel_size`): a table
    /// that grew since is not planned at its old size.
    pub fn rows_now(&self, pages_now: u32) -> f64 {
        if self.pages == 0 {
            return self.rows;
        }
        (self.rows / f64::from(self.pages) * f64::from(pages_now)).round()
    }
}

/// Whether a sample value `a` is the same as `b` for counting and
/// grouping (NULLs are never passed in).
fn same(a: &Value, b: &Value) -> bool {
    sort_cmp(a, b, false) == std::cmp::Ordering::Equal
}

/// The bytes a value takes, for the average width.
fn value_width(v: &Value) -> f64 {
    match v {
        Value::Null => 0.0,
        Value::Boolean(_) => 1.0,
        Value::Integer(_) | Value::Date(_) => 4.0,
        Value::BigInt(_) | Value::Double(_) | Value::Timestamp(_) => 8.0,
        Value::Text(s) | Value::Char(s) => s.len() as f64 + 1.0,
        Value::Numeric(n) => n.to_string().len() as f64 / 2.0 + 4.0,
    }
}

/// Statistics of one column from its values in a sample of `total_rows`
/// rows, the values in the rows' physical order, keeping up to `target`
/// most common values and histogram buckets.
pub fn column_stats(sample: &[&Value], total_rows: f64, target: usize) -> ColumnStats {
    let n = sample.len();
    let mut values: Vec<(&Value, usize)> = sample
        .iter()
        .filter(|v| !v.is_null())
        .enumerate()
        .map(|(position, v)| (*v, position))
        .collect();
    if values.is_empty() {
        return ColumnStats {
            null_frac: if n == 0 { 0.0 } else { 1.0 },
            avg_width: 0.0,
            n_distinct: 0.0,
            mcv: Vec::new(),
            histogram: Vec::new(),
            correlation: None,
        };
    }
    let nonnull = values.len();
    let null_frac = (n - nonnull) as f64 / n as f64;
    let avg_width = values.iter().map(|(v, _)| value_width(v)).sum::<f64>() / nonnull as f64;
    // Sorted by value, then by physical position: a value's rank against
    // its position gives the correlation.
    values.sort_by(|a, b| sort_cmp(a.0, b.0, false).then(a.1.cmp(&b.1)));
    let correlation = correlation(values.iter().map(|(_, position)| *position));
    // Runs of equal values: (first index in `values`, count).
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (i, (v, _)) in values.iter().enumerate() {
        match runs.last_mut() {
            Some((start, count)) if same(values[*start].0, v) => *count += 1,
            _ => runs.push((i, 1)),
        }
    }
    let distinct = runs.len();
    let repeated = runs.iter().filter(|(_, c)| *c > 1).count();
    let n_distinct = estimate_distinct(distinct, repeated, nonnull, null_frac, total_rows);
    // Candidates for the list: values seen more than once, most common
    // first (ties by value, for a stable list).
    let mut candidates: Vec<(usize, usize)> =
        runs.iter().copied().filter(|(_, c)| *c > 1).collect();
    candidates.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    candidates.truncate(target);
    let keep = if repeated == distinct && n_distinct > 0.0 && distinct <= target {
        // Every value sampled was seen twice or more, and all fit: the
        // column probably has just these values.
        candidates.len()
    } else {
        mcv_count(&candidates, n_distinct, null_frac, n, total_rows)
    };
    let mcv: Vec<(Value, f64)> = candidates[..keep]
        .iter()
        .map(|&(start, count)| (values[start].0.clone(), count as f64 / n as f64))
        .collect();
    // The histogram covers the values not in the list.
    let in_mcv: std::collections::HashSet<usize> =
        candidates[..keep].iter().map(|&(start, _)| start).collect();
    let rest: Vec<&Value> = runs
        .iter()
        .filter(|(start, _)| !in_mcv.contains(start))
        .flat_map(|&(start, count)| values[start..start + count].iter().map(|(v, _)| *v))
        .collect();
    let rest_distinct = runs.len() - keep;
    let histogram = if rest_distinct >= 2 {
        let bounds = rest_distinct.min(target + 1);
        let mut h: Vec<Value> = (0..bounds)
            .map(|i| rest[i * (rest.len() - 1) / (bounds - 1)].clone())
            .collect();
        h.dedup_by(|a, b| same(a, b));
        if h.len() >= 2 {
            h
        } else {
            Vec::new()
        }
    } else {
        Vec::new()
    };
    ColumnStats {
        null_frac,
        avg_width,
        n_distinct,
        mcv,
        histogram,
        correlation,
    }
}

/// Pearson correlation of positions 0..n against the permutation
/// `positions` (the physical position of the value ranked i-th).
fn correlation(positions: impl ExactSizeIterator<Item = usize>) -> Option<f64> {
    let n = positions.len() as f64;
    if n < 2.0 {
        return None;
    }
    let xy: f64 = positions
        .enumerate()
        .map(|(rank, position)| rank as f64 * position as f64)
        .sum();
    // Both variables are 0..n in some order: their sums are known.
    let sum = n * (n - 1.0) / 2.0;
    let sum_sq = n * (n - 1.0) * (2.0 * n - 1.0) / 6.0;
    let c = (n * xy - sum * sum) / (n * sum_sq - sum * sum);
    Some(c.clamp(-1.0, 1.0))
}

/// Distinct non-null values in the table, from `distinct` seen in a
/// sample of `sampled` non-null values (a `null_frac` of the rows being
/// NULL), `repeated` of them more than once: PostgreSQL's rules, with
/// the Haas–Stokes Duj1 estimator in between. As a negative fraction of
/// `total_rows` when it is likely to grow with the table (above a tenth
/// of it).
fn estimate_distinct(
    distinct: usize,
    repeated: usize,
    sampled: usize,
    null_frac: f64,
    total_rows: f64,
) -> f64 {
    let total_nonnull = (total_rows * (1.0 - null_frac)).max(sampled as f64);
    if repeated == 0 {
        // Every value sampled was unique: assume the column is.
        return -(1.0 - null_frac).clamp(0.0, 1.0);
    }
    let estimate = if repeated == distinct {
        // Every value was seen more than once: assume we saw them all.
        distinct as f64
    } else {
        let once = (distinct - repeated) as f64;
        let n = sampled as f64;
        let d = distinct as f64;
        let duj1 = n * d / ((n - once) + once * n / total_nonnull);
        duj1.clamp(d, total_nonnull.max(d)).round()
    };
    if estimate > 0.1 * total_rows {
        -(estimate / total_rows).min(1.0)
    } else {
        estimate
    }
}

/// How many of `candidates` (run start, count; most common first) to keep
/// as most common values: those significantly more common than the
/// values left out would be estimated to be (PostgreSQL's
/// `analyze_mcv_list`: the sample count above the others' estimate by two
/// standard errors of a hypergeometric sample, plus a half).
fn mcv_count(
    candidates: &[(usize, usize)],
    n_distinct: f64,
    null_frac: f64,
    sample_rows: usize,
    total_rows: f64,
) -> usize {
    let n = sample_rows as f64;
    if n >= total_rows || total_rows <= 1.0 {
        // The whole table was read: every repeated value is known.
        return candidates.len();
    }
    let distinct_in_table = if n_distinct < 0.0 {
        -n_distinct * total_rows
    } else {
        n_distinct
    };
    let mut keep = candidates.len();
    let mut counted: f64 = candidates.iter().map(|c| c.1 as f64).sum();
    while keep > 0 {
        let last = candidates[keep - 1].1 as f64;
        counted -= last;
        // The frequency the least common kept value would be given if it
        // were left out, as `eq` gives it.
        let mut others = (1.0 - counted / n - null_frac).clamp(0.0, 1.0);
        let other_distinct = distinct_in_table - (keep as f64 - 1.0);
        if other_distinct > 1.0 {
            others /= other_distinct;
        }
        let total = total_rows;
        let k = total * last / n;
        let variance = n * k * (total - k) * (total - n) / (total * total * (total - 1.0));
        if last > others * n + 2.0 * variance.max(0.0).sqrt() + 0.5 {
            break;
        }
        keep -= 1;
    }
    keep
}

/// Fraction of the rows a comparison is assumed to pass when the
/// statistics say nothing (PostgreSQL's `DEFAULT_INEQ_SEL`).
pub const DEFAULT_RANGE_SELECTIVITY: f64 = 1.0 / 3.0;
/// Fraction of the rows an equality is assumed to pass when the
/// statistics say nothing (`DEFAULT_EQ_SEL`), and a range bounded on both
/// sides (`DEFAULT_RANGE_INEQ_SEL`).
pub const DEFAULT_EQ_SELECTIVITY: f64 = 0.005;

impl ColumnStats {
    /// Distinct non-null values in a table of `rows` rows.
    pub fn distinct_in(&self, rows: f64) -> f64 {
        if self.n_distinct < 0.0 {
            (-self.n_distinct * rows).max(1.0)
        } else {
            self.n_distinct
        }
    }

    fn mcv_total(&self) -> f64 {
        self.mcv.iter().map(|(_, f)| f).sum()
    }

    /// Fraction of rows equal to `value` (`eqsel` with a constant): its
    /// frequency if it is a most common value, otherwise an equal share
    /// of what the common values leave, at most the least common one's.
    pub fn eq(&self, value: &Value, rows: f64) -> f64 {
        if value.is_null() {
            return 0.0;
        }
        if let Some((_, f)) = self
            .mcv
            .iter()
            .find(|(v, _)| compare(v, value) == Some(std::cmp::Ordering::Equal))
        {
            return *f;
        }
        let mut s = (1.0 - self.mcv_total() - self.null_frac).clamp(0.0, 1.0);
        let others = self.distinct_in(rows) - self.mcv.len() as f64;
        if others > 1.0 {
            s /= others;
        }
        if let Some(least) = self.mcv.last() {
            s = s.min(least.1);
        }
        s
    }

    /// Fraction of the pairs of a row with this column's value and a row
    /// with `other`'s that are equal (PostgreSQL's `eqjoinsel_inner` when
    /// both columns have most common values), this column having
    /// `distinct` values and `other` `other_distinct`. The common values
    /// the two lists share match exactly; what is left of each side
    /// matches the rest of the other at one distinct value's share, taken
    /// from whichever side gives the smaller estimate. None if either
    /// side has no common values (the caller then takes the plain
    /// estimate, the non-NULL shares over the larger distinct count).
    pub fn join_selectivity(
        &self,
        distinct: f64,
        other: &ColumnStats,
        other_distinct: f64,
    ) -> Option<f64> {
        if self.mcv.is_empty() || other.mcv.is_empty() {
            return None;
        }
        let mut other_matched = vec![false; other.mcv.len()];
        let (mut matched_product, mut matched, mut matches) = (0.0, 0.0, 0.0);
        for (v, f) in &self.mcv {
            let found = other.mcv.iter().enumerate().find(|&(j, (w, _))| {
                !other_matched[j] && compare(v, w) == Some(std::cmp::Ordering::Equal)
            });
            if let Some((j, (_, g))) = found {
                other_matched[j] = true;
                matched_product += f * g;
                matched += f;
                matches += 1.0;
            }
        }
        let other_matched_freq: f64 = other
            .mcv
            .iter()
            .zip(&other_matched)
            .filter(|(_, &m)| m)
            .map(|((_, g), _)| g)
            .sum();
        let matched_product = matched_product.clamp(0.0, 1.0);
        let unmatched = (self.mcv_total() - matched).max(0.0);
        let other_unmatched = (other.mcv_total() - other_matched_freq).max(0.0);
        // The non-NULL rows outside either list.
        let rest = (1.0 - self.null_frac - self.mcv_total()).clamp(0.0, 1.0);
        let other_rest = (1.0 - other.null_frac - other.mcv_total()).clamp(0.0, 1.0);
        // Seen from each side: its unmatched common values meet the
        // other's values outside its list, and its rest meets every other
        // value of the other side's not matched.
        let from = |unmatched: f64,
                    rest: f64,
                    o_rest: f64,
                    o_unmatched: f64,
                    o_distinct: f64,
                    o_listed: f64| {
            let mut s = matched_product;
            if o_distinct > o_listed {
                s += unmatched * o_rest / (o_distinct - o_listed);
            }
            if o_distinct > matches {
                s += rest * (o_rest + o_unmatched) / (o_distinct - matches);
            }
            s
        };
        let mine = from(
            unmatched,
            rest,
            other_rest,
            other_unmatched,
            other_distinct,
            other.mcv.len() as f64,
        );
        let theirs = from(
            other_unmatched,
            other_rest,
            rest,
            unmatched,
            distinct,
            self.mcv.len() as f64,
        );
        Some(mine.min(theirs).clamp(0.0, 1.0))
    }

    /// Fraction of rows equal to a value not known when planning (a
    /// parameter): one distinct value's share.
    pub fn eq_unknown(&self, rows: f64) -> f64 {
        let distinct = self.distinct_in(rows);
        if distinct >= 1.0 {
            ((1.0 - self.null_frac) / distinct).clamp(0.0, 1.0)
        } else {
            DEFAULT_EQ_SELECTIVITY
        }
    }

    /// Fraction of rows whose value is below `value` (or equal, if
    /// `inclusive`): the common values below it counted exactly, the rest
    /// from where `value` falls in the histogram, interpolated within its
    /// bucket where the type is a number or a time (`scalarineqsel`).
    pub fn below(&self, value: &Value, inclusive: bool) -> f64 {
        use std::cmp::Ordering::*;
        if value.is_null() {
            return 0.0;
        }
        let passes = |v: &Value| match compare(v, value) {
            Some(Less) => true,
            Some(Equal) => inclusive,
            _ => false,
        };
        let common: f64 = self
            .mcv
            .iter()
            .filter(|(v, _)| passes(v))
            .map(|(_, f)| f)
            .sum();
        let rest = (1.0 - self.null_frac - self.mcv_total()).max(0.0);
        let in_histogram = match self.histogram_fraction(value) {
            Some(f) => f,
            // No histogram: the common values are all there is to go by;
            // the others are assumed to fall like them.
            None if self.mcv_total() > 0.0 => common / self.mcv_total(),
            None => DEFAULT_RANGE_SELECTIVITY,
        };
        (common + in_histogram * rest).clamp(0.0, 1.0)
    }

    /// Fraction of the histogram's population below `value`.
    fn histogram_fraction(&self, value: &Value) -> Option<f64> {
        use std::cmp::Ordering::*;
        let h = &self.histogram;
        if h.len() < 2 {
            return None;
        }
        let buckets = (h.len() - 1) as f64;
        if compare(value, &h[0]) != Some(Greater) {
            return Some(0.0);
        }
        if compare(value, &h[h.len() - 1]) != Some(Less) {
            return Some(1.0);
        }
        // The bucket [h[i], h[i+1]) holding value.
        let i = h.partition_point(|b| compare(b, value) != Some(Greater)) - 1;
        let within = match (as_scalar(&h[i]), as_scalar(&h[i + 1]), as_scalar(value)) {
            (Some(lo), Some(hi), Some(v)) if hi > lo => ((v - lo) / (hi - lo)).clamp(0.0, 1.0),
            _ => 0.5,
        };
        Some((i as f64 + within) / buckets)
    }
}

/// A value on a line, for interpolating within a histogram bucket.
fn as_scalar(v: &Value) -> Option<f64> {
    match v {
        Value::Date(d) => Some(f64::from(*d)),
        Value::Timestamp(t) => Some(*t as f64),
        _ => crate::types::as_f64(v).filter(|x| x.is_finite()),
    }
}

/// Every table's statistics, by table oid, and the file they are kept in.
pub struct Statistics {
    path: PathBuf,
    tables: RwLock<HashMap<u32, Arc<TableStats>>>,
    /// Serialises rewrites of the file.
    writing: Mutex<()>,
    /// Rows updated since the database opened, by table oid.
    updates: Mutex<HashMap<u32, UpdateCounts>>,
}

/// Rows a table's UPDATEs changed since the database opened, and how many
/// of those made heap-only versions (PostgreSQL's `n_tup_upd` and
/// `n_tup_hot_upd`): how often updates keep off the indexes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpdateCounts {
    pub updated: u64,
    pub hot: u64,
}

/// Why the statistics could not be saved.
#[derive(Debug, thiserror::Error)]
#[error("could not {op} the statistics file {path}: {source}")]
pub struct StatisticsError {
    op: &'static str,
    path: PathBuf,
    source: std::io::Error,
}

impl StatisticsError {
    /// PostgreSQL's SQLSTATE for this error.
    pub fn sqlstate(&self) -> &'static str {
        crate::storage::io_sqlstate(&self.source)
    }
}

impl Statistics {
    /// The statistics of the data directory `dir`, for the tables `types`
    /// gives the column types of (by oid): a table's entry whose columns
    /// do not match is dropped, as is a file that does not read back.
    pub fn load(dir: &Path, types: &HashMap<u32, Vec<ColumnType>>) -> Statistics {
        let path = dir.join(STATISTICS_FILE);
        let tables = match std::fs::read(&path) {
            Ok(bytes) => match decode_file(&bytes, types) {
                Ok(tables) => tables,
                Err(what) => {
                    log::warn!(
                        "the statistics file {} is damaged ({what}); tables are planned as never analysed until ANALYZE runs",
                        path.display()
                    );
                    HashMap::new()
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => HashMap::new(),
            Err(e) => {
                log::warn!(
                    "could not read the statistics file {}: {e}; tables are planned as never analysed",
                    path.display()
                );
                HashMap::new()
            }
        };
        Statistics {
            path,
            tables: RwLock::new(tables),
            writing: Mutex::new(()),
            updates: Mutex::new(HashMap::new()),
        }
    }

    /// Counts an UPDATE statement's `updated` rows of table `oid`, `hot`
    /// of them heap-only versions.
    pub fn note_updates(&self, oid: u32, updated: u64, hot: u64) {
        debug_assert!(hot <= updated);
        if updated > 0 {
            let mut updates = self.updates.lock();
            let counts = updates.entry(oid).or_default();
            counts.updated += updated;
            counts.hot += hot;
        }
    }

    /// The rows table `oid`'s updates changed since the database opened.
    pub fn update_counts(&self, oid: u32) -> UpdateCounts {
        self.updates.lock().get(&oid).copied().unwrap_or_default()
    }

    /// The statistics of the table `oid`, if it was analysed.
    pub fn of(&self, oid: u32) -> Option<Arc<TableStats>> {
        self.tables.read().get(&oid).cloned()
    }

    /// Counts `rows` changed rows of table `oid` towards its statistics'
    /// staleness.
    pub fn note_changes(&self, oid: u32, rows: u64) {
        if let Some(t) = self.tables.read().get(&oid) {
            t.changed.fetch_add(rows, Ordering::Relaxed);
        }
    }

    /// Replaces the statistics of table `oid` and saves them all, keeping
    /// only the tables `live` says still exist (`types` of each).
    pub fn set(
        &self,
        oid: u32,
        stats: TableStats,
        live: &HashMap<u32, Vec<ColumnType>>,
    ) -> Result<(), StatisticsError> {
        let _writing = self.writing.lock();
        let mut next: HashMap<u32, Arc<TableStats>> = self.tables.read().clone();
        next.insert(oid, Arc::new(stats));
        next.retain(|oid, _| live.contains_key(oid));
        self.write_file(&next, live)?;
        *self.tables.write() = next;
        Ok(())
    }

    fn write_file(
        &self,
        tables: &HashMap<u32, Arc<TableStats>>,
        types: &HashMap<u32, Vec<ColumnType>>,
    ) -> Result<(), StatisticsError> {
        let bytes = encode_file(tables, types);
        let tmp = self.path.with_extension("tmp");
        let fail = |op, source| StatisticsError {
            op,
            path: tmp.clone(),
            source,
        };
        let mut f = std::fs::File::create(&tmp).map_err(|e| fail("create", e))?;
        f.write_all(&bytes).map_err(|e| fail("write", e))?;
        f.sync_all().map_err(|e| fail("sync", e))?;
        drop(f);
        std::fs::rename(&tmp, &self.path).map_err(|e| fail("rename", e))?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| fail("sync the directory of", e))?;
        }
        Ok(())
    }
}

/// The file: magic, table count, then per table its oid, pages, rows,
/// time and columns (each: null fraction, width, distinct, correlation,
/// the common values as one encoded row with their frequencies, the
/// histogram as one encoded row), then a CRC-32C of all before it.
fn encode_file(
    tables: &HashMap<u32, Arc<TableStats>>,
    types: &HashMap<u32, Vec<ColumnType>>,
) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(MAGIC);
    let mut oids: Vec<u32> = tables
        .keys()
        .copied()
        .filter(|o| types.contains_key(o))
        .collect();
    oids.sort_unstable();
    b.extend_from_slice(&(oids.len() as u32).to_le_bytes());
    for oid in oids {
        let t = &tables[&oid];
        let tys = &types[&oid];
        assert_eq!(tys.len(), t.columns.len(), "statistics for every column");
        b.extend_from_slice(&oid.to_le_bytes());
        b.extend_from_slice(&t.pages.to_le_bytes());
        b.extend_from_slice(&t.rows.to_le_bytes());
        b.extend_from_slice(&t.all_visible_pages.to_le_bytes());
        b.extend_from_slice(&t.analyzed_at.to_le_bytes());
        b.extend_from_slice(&(t.columns.len() as u32).to_le_bytes());
        for (c, &ty) in t.columns.iter().zip(tys) {
            for x in [
                c.null_frac,
                c.avg_width,
                c.n_distinct,
                c.correlation.unwrap_or(f64::NAN),
            ] {
                b.extend_from_slice(&x.to_le_bytes());
            }
            let (values, freqs): (Vec<Value>, Vec<f64>) = c.mcv.iter().cloned().unzip();
            put_values(&mut b, ty, &values);
            for f in freqs {
                b.extend_from_slice(&f.to_le_bytes());
            }
            put_values(&mut b, ty, &c.histogram);
        }
    }
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

fn put_values(b: &mut Vec<u8>, ty: ColumnType, values: &[Value]) {
    let types = vec![ty; values.len()];
    let mut row = Vec::new();
    let has_nulls =
        encode_values_into(&types, values, &mut row).expect("sampled values fit their column");
    debug_assert!(!has_nulls, "statistics hold no NULL values");
    b.extend_from_slice(&(values.len() as u32).to_le_bytes());
    b.extend_from_slice(&(row.len() as u32).to_le_bytes());
    b.extend_from_slice(&row);
}

/// Reads what [`encode_file`] wrote; tables unknown to `types`, or whose
/// column types differ, are left out.
fn decode_file(
    bytes: &[u8],
    types: &HashMap<u32, Vec<ColumnType>>,
) -> Result<HashMap<u32, Arc<TableStats>>, String> {
    if bytes.len() < MAGIC.len() + 8 || &bytes[..MAGIC.len()] != MAGIC {
        return Err("not an aiostore statistics file".into());
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err("incorrect CRC".into());
    }
    let mut r = Reader {
        b: body,
        at: MAGIC.len(),
    };
    let mut tables = HashMap::new();
    for _ in 0..r.u32()? {
        let oid = r.u32()?;
        let pages = r.u32()?;
        let rows = r.f64()?;
        let all_visible_pages = r.u32()?.min(pages);
        let analyzed_at = r.u64()? as i64;
        let ncolumns = r.u32()? as usize;
        let tys = types.get(&oid);
        let mut columns = Vec::with_capacity(ncolumns);
        for i in 0..ncolumns {
            let ty = tys.and_then(|t| t.get(i)).copied();
            let null_frac = r.f64()?;
            let avg_width = r.f64()?;
            let n_distinct = r.f64()?;
            let correlation = Some(r.f64()?).filter(|c| !c.is_nan());
            let (count, values) = r.values(ty)?;
            // Each common value's frequency follows, also where the values
            // are skipped (a table that is gone): reading `values.len()`
            // of them there lost the place in the file.
            let mut frequencies = Vec::with_capacity(count);
            for _ in 0..count {
                frequencies.push(r.f64()?);
            }
            let mcv = values.into_iter().zip(frequencies).collect();
            let histogram = r.values(ty)?.1;
            columns.push(ColumnStats {
                null_frac,
                avg_width,
                n_distinct,
                mcv,
                histogram,
                correlation,
            });
        }
        if tys.is_some_and(|t| t.len() == ncolumns) {
            tables.insert(
                oid,
                Arc::new(TableStats::new(
                    pages,
                    rows,
                    all_visible_pages,
                    columns,
                    analyzed_at,
                )),
            );
        }
    }
    if r.at != body.len() {
        return Err(format!("{} bytes after the last table", body.len() - r.at));
    }
    Ok(tables)
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let end = end.ok_or_else(|| format!("cut short at byte {}", self.at))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn f64(&mut self) -> Result<f64, String> {
        Ok(f64::from_bits(self.u64()?))
    }
    /// An encoded row of values of type `ty` and how many it holds; with
    /// no type (a table that is gone) it is skipped and read as none.
    fn values(&mut self, ty: Option<ColumnType>) -> Result<(usize, Vec<Value>), String> {
        let n = self.u32()? as usize;
        let len = self.u32()? as usize;
        let row = self.take(len)?;
        let Some(ty) = ty else {
            return Ok((n, Vec::new()));
        };
        let types = vec![ty; n];
        let mut out = Vec::with_capacity(n);
        decode_values(&types, row, n, false, &vec![true; n], &mut out)
            .map_err(|e| format!("values: {e}"))?;
        Ok((n, out))
    }
}

#[cfg(test)]
mod tests {
    fn with_mcv(mcv: &[(i64, f64)], null_frac: f64) -> ColumnStats {
        ColumnStats {
            null_frac,
            avg_width: 4.0,
            n_distinct: 0.0,
            mcv: mcv
                .iter()
                .map(|&(v, f)| (Value::Integer(v as i32), f))
                .collect(),
            histogram: Vec::new(),
            correlation: None,
        }
    }

    #[test]
    fn join_selectivity_matches_common_values_exactly() {
        // Every value common on both sides: the exact share of equal
        // pairs, where the plain estimate (1 / 2) is off.
        let a = with_mcv(&[(1, 0.5), (2, 0.5)], 0.0);
        let b = with_mcv(&[(1, 0.9), (3, 0.1)], 0.0);
        let s = a.join_selectivity(2.0, &b, 2.0).unwrap();
        assert!((s - 0.45).abs() < 1e-9, "{s}");
        assert_eq!(
            b.join_selectivity(2.0, &a, 2.0),
            Some(s),
            "either side first"
        );
        // Half of each side one value, the rest 1000 values once each:
        // 0.25 from the common value and the rest's share of 1000.
        let skewed = with_mcv(&[(1, 0.5)], 0.0);
        let s = skewed.join_selectivity(1001.0, &skewed, 1001.0).unwrap();
        assert!((s - (0.25 + 0.5 * 0.5 / 1000.0)).abs() < 1e-9, "{s}");
        // NULLs match nothing; no common values, no estimate here.
        let with_nulls = with_mcv(&[(1, 0.25)], 0.5);
        let s = with_nulls.join_selectivity(2.0, &with_nulls, 2.0).unwrap();
        assert!((s - (0.0625 + 0.25 * 0.25)).abs() < 1e-9, "{s}");
        assert_eq!(a.join_selectivity(2.0, &with_mcv(&[], 0.0), 5.0), None);
    }

    use super::*;

    fn ints(xs: &[i32]) -> Vec<Value> {
        xs.iter().map(|&x| Value::Integer(x)).collect()
    }

    fn stats_of(values: &[Value], total: f64) -> ColumnStats {
        let refs: Vec<&Value> = values.iter().collect();
        column_stats(&refs, total, STATISTICS_TARGET)
    }

    #[test]
    fn a_unique_column_is_all_distinct_with_a_histogram_and_full_correlation() {
        let v = ints(&(0..10_000).collect::<Vec<_>>());
        let s = stats_of(&v, 1_000_000.0);
        assert_eq!(s.null_frac, 0.0);
        assert_eq!(s.n_distinct, -1.0);
        assert!(s.mcv.is_empty());
        assert_eq!(s.histogram.len(), STATISTICS_TARGET + 1);
        assert_eq!(s.histogram[0], Value::Integer(0));
        assert_eq!(s.histogram[STATISTICS_TARGET], Value::Integer(9_999));
        assert!((s.correlation.unwrap() - 1.0).abs() < 1e-9);
        let below = s.below(&Value::Integer(2_500), false);
        assert!((below - 0.25).abs() < 0.01, "{below}");
    }

    #[test]
    fn a_column_of_few_values_keeps_them_all_as_common_values() {
        let v: Vec<Value> = (0..10_000).map(|i| Value::Integer(i % 10)).collect();
        let s = stats_of(&v, 1_000_000.0);
        assert_eq!(s.n_distinct, 10.0);
        assert_eq!(s.mcv.len(), 10);
        assert!(s.histogram.is_empty());
        assert!((s.eq(&Value::Integer(3), 1e6) - 0.1).abs() < 1e-9);
        assert!(s.eq(&Value::Integer(11), 1e6) < 1e-9);
        // Values cycle through the table: only the order of equal
        // values' rows correlates (about 0.1 for ten values).
        assert!(s.correlation.unwrap().abs() < 0.15);
        assert!((s.below(&Value::Integer(5), false) - 0.5).abs() < 1e-9);
        assert!((s.below(&Value::Integer(5), true) - 0.6).abs() < 1e-9);
    }

    #[test]
    fn a_skewed_column_keeps_its_common_values_and_estimates_the_rest() {
        // Half the rows are 0, the rest unique.
        let v: Vec<Value> = (0..10_000)
            .map(|i| Value::Integer(if i % 2 == 0 { 0 } else { i }))
            .collect();
        let s = stats_of(&v, 10_000_000.0);
        assert_eq!(s.mcv.len(), 1);
        assert_eq!(s.mcv[0].0, Value::Integer(0));
        assert!((s.mcv[0].1 - 0.5).abs() < 1e-9);
        // Haas–Stokes from 5 000 values seen once and one seen 5 000
        // times: it cannot tell this from a table of few values, and
        // (as PostgreSQL's) says about 10 000.
        assert_eq!(s.n_distinct, 9992.0);
        let other = s.eq(&Value::Integer(7), 10_000_000.0);
        assert!((other - 0.5 / 9991.0).abs() < 1e-9, "{other}");
    }

    #[test]
    fn nulls_count_in_the_null_fraction_only() {
        let mut v = ints(&(0..900).collect::<Vec<_>>());
        v.extend(std::iter::repeat_n(Value::Null, 100));
        let s = stats_of(&v, 1000.0);
        assert!((s.null_frac - 0.1).abs() < 1e-9);
        assert!((s.n_distinct + 0.9).abs() < 1e-9);
        let all = s.below(&Value::Integer(10_000), true);
        assert!((all - 0.9).abs() < 1e-9, "{all}");
        let all_null = stats_of(&[Value::Null, Value::Null], 2.0);
        assert_eq!(all_null.null_frac, 1.0);
        assert_eq!(all_null.eq_unknown(2.0), DEFAULT_EQ_SELECTIVITY);
    }

    #[test]
    fn text_values_histogram_and_file_round_trip() {
        let v: Vec<Value> = (0..5_000)
            .map(|i| Value::Text(format!("{:05}", (i * 7919) % 5_000)))
            .collect();
        let s = stats_of(&v, 5_000.0);
        assert!(s.histogram.len() > 2);
        let dir = tempfile::tempdir().unwrap();
        let types: HashMap<u32, Vec<ColumnType>> =
            [(7, vec![ColumnType::Text, ColumnType::Integer])].into();
        let stats = Statistics::load(dir.path(), &types);
        let int_stats = stats_of(&ints(&[1, 1, 2, 3]), 4.0);
        stats
            .set(
                7,
                TableStats::new(3, 5_000.0, 2, vec![s.clone(), int_stats.clone()], 42),
                &types,
            )
            .unwrap();
        let again = Statistics::load(dir.path(), &types);
        let t = again.of(7).unwrap();
        assert_eq!(
            (t.pages, t.rows, t.all_visible_pages, t.analyzed_at),
            (3, 5_000.0, 2, 42)
        );
        assert_eq!(t.columns, vec![s, int_stats]);
        // A table whose columns changed is left out; a damaged file
        // reads as no statistics.
        let other: HashMap<u32, Vec<ColumnType>> = [(7, vec![ColumnType::Text])].into();
        assert!(Statistics::load(dir.path(), &other).of(7).is_none());
        let path = dir.path().join(STATISTICS_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[20] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        assert!(Statistics::load(dir.path(), &types).of(7).is_none());
    }

    #[test]
    fn a_dropped_tables_common_values_do_not_hide_the_others_statistics() {
        // DROP TABLE leaves a table's entry in the file until the next
        // ANALYZE rewrites it; loading must skip the entry whole.
        let dir = tempfile::tempdir().unwrap();
        let both: HashMap<u32, Vec<ColumnType>> = [
            (7, vec![ColumnType::Integer]),
            (8, vec![ColumnType::Integer]),
        ]
        .into();
        let stats = Statistics::load(dir.path(), &both);
        let common = stats_of(&ints(&[1, 1, 1, 2, 2, 3]), 6.0);
        assert!(!common.mcv.is_empty());
        for oid in [7, 8] {
            let t = TableStats::new(1, 6.0, 1, vec![common.clone()], 0);
            stats.set(oid, t, &both).unwrap();
        }
        let after_drop: HashMap<u32, Vec<ColumnType>> = [(8, vec![ColumnType::Integer])].into();
        let again = Statistics::load(dir.path(), &after_drop);
        assert!(again.of(7).is_none());
        assert_eq!(
            again.of(8).expect("table 8's statistics").columns,
            vec![common]
        );
    }

    #[test]
    fn staleness_counts_changes_against_the_size() {
        let t = TableStats::new(10, 1000.0, 0, Vec::new(), 0);
        assert!(!t.is_stale());
        t.changed.fetch_add(150, Ordering::Relaxed);
        assert!(!t.is_stale());
        t.changed.fetch_add(1, Ordering::Relaxed);
        assert!(t.is_stale());
        assert_eq!(t.rows_now(20), 2000.0);
    }
}
