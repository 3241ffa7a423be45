//! Benchmark programs behind `aiostore bench …`.
//!
//! Each prints the settings it ran with, whether the cache was cold, a table
//! of figures and, with `--json`, one JSON object per case. Variants are
//! compared as ratios measured in the same run, case by case and next to
//! each other in time, because the machines we run on are shared and noisy.

pub mod checksum;
pub mod demo;
pub mod fio;
pub mod rawio;
pub mod seqscan;
pub mod streams;

use std::time::Duration;

/// CPU time (user + system) used by this process so far, all threads.
pub fn process_cpu_time() -> Duration {
    // SAFETY: getrusage only writes the struct we pass.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// A small xorshift generator: benchmarks need cheap, reproducible random
/// offsets, not statistical quality.
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> XorShift {
        XorShift(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// Why io_uring cannot be used here, if it cannot: tries to set up one
/// small ring the way the AIO subsystem does, so that a benchmark can skip
/// io_uring with the kernel's reason instead of failing (or measuring the
/// worker method under io_uring's name).
pub fn io_uring_unavailable(io_workers: usize) -> Option<String> {
    let probe = crate::aio::Aio::start(&crate::aio::AioConfig {
        method: crate::config::IoMethod::IoUring,
        io_workers,
        max_sessions: 1,
        io_max_concurrency: 1,
        io_max_combine_limit: 1,
        debug_io_latency_us: 0,
    });
    match probe {
        Ok(aio) => aio.fallback_reason().map(str::to_string),
        Err(e) => Some(e.to_string()),
    }
}

/// Drops the kernel page cache (root only), for cold buffered runs.
pub fn drop_page_cache() -> std::io::Result<()> {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3\n")
}

/// Writes one benchmark case: as a JSON object with `--json`, else as the
/// table row `row` formats.
pub(crate) fn emit_case<C: serde::Serialize>(
    out: &mut dyn std::io::Write,
    json: bool,
    case: &C,
    row: impl FnOnce(&C) -> String,
) -> Result<(), String> {
    let line = if json {
        serde_json::to_string(case).map_err(|e| e.to_string())?
    } else {
        row(case)
    };
    writeln!(out, "{line}").map_err(|e| e.to_string())
}
