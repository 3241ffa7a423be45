//! Observability: cumulative I/O counters, latency histograms, and the row
//! type of the in-flight I/O view.
//!
//! Every layer reports into this module; it depends on nothing but the
//! settings' method names. Counters are cumulative (never gauges), kept in
//! atomics owned by the `Aio` instance rather than by sessions, so they
//! survive the end of the session that did the I/O. `reset` zeroes them.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::config::IoMethod;

/// The operation an I/O performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IoOp {
    Read = 0,
    Write = 1,
    /// Flush a file's data to stable storage (fdatasync).
    Fsync = 2,
}

impl IoOp {
    pub const ALL: [IoOp; 3] = [IoOp::Read, IoOp::Write, IoOp::Fsync];

    pub fn name(self) -> &'static str {
        match self {
            IoOp::Read => "read",
            IoOp::Write => "write",
            IoOp::Fsync => "fsync",
        }
    }
}

impl fmt::Display for IoOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Latency buckets: bucket `i` counts I/Os that took less than 2^i µs (the
/// last one everything slower), so 24 buckets reach about 8 seconds.
pub const LATENCY_BUCKETS: usize = 24;

#[derive(Debug, Default)]
struct OpCounters {
    ios: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    partial: AtomicU64,
    executed_by_issuer: AtomicU64,
    latency_ns_total: AtomicU64,
    latency_us_buckets: [AtomicU64; LATENCY_BUCKETS],
}

/// One completed I/O, as reported by the AIO layer.
#[derive(Debug, Clone, Copy)]
pub struct CompletedIo {
    pub method: IoMethod,
    pub op: IoOp,
    /// Raw result: bytes transferred, or a negative errno.
    pub raw: i64,
    pub partial: bool,
    /// True if the issuing thread executed it (sync method, or a worker
    /// queue that was full or contended).
    pub by_issuer: bool,
    /// From submission to completion.
    pub latency: Duration,
}

/// Cumulative I/O statistics per method and operation.
#[derive(Debug, Default)]
pub struct IoStats {
    cells: [[OpCounters; 3]; 3],
}

fn method_index(method: IoMethod) -> usize {
    match method {
        IoMethod::Sync => 0,
        IoMethod::Worker => 1,
        IoMethod::IoUring => 2,
    }
}

/// A copy of the counters of one (method, operation).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OpStatsRow {
    pub method: &'static str,
    pub op: &'static str,
    pub ios: u64,
    pub bytes: u64,
    pub errors: u64,
    pub partial: u64,
    pub executed_by_issuer: u64,
    pub latency_us_total: u64,
    /// Count per bucket; bucket `i` is "under 2^i µs".
    pub latency_us_buckets: Vec<u64>,
}

impl OpStatsRow {
    /// The latency below which `fraction` (0..=1) of I/Os completed, as the
    /// upper bound of the histogram bucket that holds it.
    pub fn latency_us_quantile(&self, fraction: f64) -> Option<u64> {
        let total: u64 = self.latency_us_buckets.iter().sum();
        if total == 0 {
            return None;
        }
        let target = (fraction * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &n) in self.latency_us_buckets.iter().enumerate() {
            seen += n;
            if seen >= target {
                return Some(1u64 << i);
            }
        }
        None
    }
}

impl IoStats {
    pub fn record(&self, io: CompletedIo) {
        let c = &self.cells[method_index(io.method)][io.op as usize];
        c.ios.fetch_add(1, Ordering::Relaxed);
        if io.raw > 0 {
            c.bytes.fetch_add(io.raw as u64, Ordering::Relaxed);
        }
        if io.raw < 0 {
            c.errors.fetch_add(1, Ordering::Relaxed);
        }
        if io.partial {
            c.partial.fetch_add(1, Ordering::Relaxed);
        }
        if io.by_issuer {
            c.executed_by_issuer.fetch_add(1, Ordering::Relaxed);
        }
        let ns = io.latency.as_nanos().min(u64::MAX as u128) as u64;
        c.latency_ns_total.fetch_add(ns, Ordering::Relaxed);
        let us = ns / 1000;
        let bucket = (u64::BITS - us.leading_zeros()) as usize;
        c.latency_us_buckets[bucket.min(LATENCY_BUCKETS - 1)].fetch_add(1, Ordering::Relaxed);
    }

    /// Rows for every (method, operation) that has done any I/O.
    pub fn rows(&self) -> Vec<OpStatsRow> {
        let mut rows = Vec::new();
        for method in IoMethod::ALL {
            for op in IoOp::ALL {
                let c = &self.cells[method_index(method)][op as usize];
                let ios = c.ios.load(Ordering::Relaxed);
                if ios == 0 {
                    continue;
                }
                rows.push(OpStatsRow {
                    method: method.name(),
                    op: op.name(),
                    ios,
                    bytes: c.bytes.load(Ordering::Relaxed),
                    errors: c.errors.load(Ordering::Relaxed),
                    partial: c.partial.load(Ordering::Relaxed),
                    executed_by_issuer: c.executed_by_issuer.load(Ordering::Relaxed),
                    latency_us_total: c.latency_ns_total.load(Ordering::Relaxed) / 1000,
                    latency_us_buckets: c
                        .latency_us_buckets
                        .iter()
                        .map(|b| b.load(Ordering::Relaxed))
                        .collect(),
                });
            }
        }
        rows
    }

    pub fn row(&self, method: IoMethod, op: IoOp) -> Option<OpStatsRow> {
        self.rows()
            .into_iter()
            .find(|r| r.method == method.name() && r.op == op.name())
    }

    /// Zeroes every counter.
    pub fn reset(&self) {
        for per_method in &self.cells {
            for c in per_method {
                for counter in [
                    &c.ios,
                    &c.bytes,
                    &c.errors,
                    &c.partial,
                    &c.executed_by_issuer,
                    &c.latency_ns_total,
                ] {
                    counter.store(0, Ordering::Relaxed);
                }
                for b in &c.latency_us_buckets {
                    b.store(0, Ordering::Relaxed);
                }
            }
        }
    }
}

/// One row of the in-flight I/O view: a handle that is not idle.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct InflightIo {
    pub session: u32,
    pub handle: u32,
    pub generation: u64,
    pub state: &'static str,
    pub op: &'static str,
    pub offset: u64,
    pub length: u64,
    /// What is being read or written, e.g. "blocks 1..4 of relation 16384".
    pub target: String,
    /// Raw result once known: bytes, or a negative errno.
    pub result: Option<i64>,
    /// "sync" if executed by the issuer, "direct" or "buffered".
    pub flags: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_land_in_power_of_two_buckets() {
        let stats = IoStats::default();
        for us in [0u64, 1, 3, 100, 100] {
            stats.record(CompletedIo {
                method: IoMethod::Worker,
                op: IoOp::Read,
                raw: 8192,
                partial: false,
                by_issuer: false,
                latency: Duration::from_micros(us),
            });
        }
        let row = stats.row(IoMethod::Worker, IoOp::Read).unwrap();
        assert_eq!(row.ios, 5);
        assert_eq!(row.bytes, 5 * 8192);
        assert_eq!(row.latency_us_buckets[0], 1, "0 µs");
        assert_eq!(row.latency_us_buckets[1], 1, "1 µs is under 2");
        assert_eq!(row.latency_us_buckets[2], 1, "3 µs is under 4");
        assert_eq!(row.latency_us_buckets[7], 2, "100 µs is under 128");
        assert_eq!(row.latency_us_quantile(0.5), Some(4));
        assert_eq!(row.latency_us_quantile(1.0), Some(128));
        stats.reset();
        assert!(stats.rows().is_empty());
    }
}
