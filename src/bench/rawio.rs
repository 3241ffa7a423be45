//! `aiostore bench rawio`: raw read throughput of each I/O method against
//! plain `pread` and fio, on one file, with no buffer pool in the way.
//!
//! For each pattern (random 8 KiB, sequential 128 KiB) and depth, fio runs
//! first (if installed), then every method, one after the other, so that
//! each ratio compares runs seconds apart on the same file.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use super::fio::{self, Pattern};
use super::{drop_page_cache, process_cpu_time, XorShift};
use crate::aio::{Aio, AioConfig, BlockReader, IoVec};
use crate::config::IoMethod;
use crate::storage::{AlignedBuf, SegmentFile, BLOCK_SIZE};

/// A way to read: our AIO methods, or plain synchronous `pread`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMethod {
    Pread,
    Aio(IoMethod),
}

impl ReadMethod {
    pub fn name(self) -> &'static str {
        match self {
            ReadMethod::Pread => "pread",
            ReadMethod::Aio(m) => m.name(),
        }
    }

    pub fn parse(name: &str) -> Option<ReadMethod> {
        match name {
            "pread" => Some(ReadMethod::Pread),
            "sync" => Some(ReadMethod::Aio(IoMethod::Sync)),
            "worker" => Some(ReadMethod::Aio(IoMethod::Worker)),
            "io_uring" => Some(ReadMethod::Aio(IoMethod::IoUring)),
            _ => None,
        }
    }
}

impl super::OnIoMethod for ReadMethod {
    fn io_method(&self) -> Option<IoMethod> {
        match self {
            ReadMethod::Pread => None,
            ReadMethod::Aio(m) => Some(*m),
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct RawioOptions {
    pub file: PathBuf,
    pub size_mib: u64,
    pub seconds: f64,
    pub direct: bool,
    pub drop_caches: bool,
    pub methods: Vec<ReadMethod>,
    pub patterns: Vec<Pattern>,
    pub depths: Vec<usize>,
    pub fio: bool,
    pub io_workers: usize,
    pub debug_io_latency_us: u64,
}

/// One measured case.
#[derive(Debug, Clone, Serialize)]
pub struct RawioCase {
    pub bench: &'static str,
    pub method: &'static str,
    pub pattern: &'static str,
    pub block_kib: usize,
    pub depth: usize,
    pub direct: bool,
    pub cache: &'static str,
    pub io_workers: usize,
    pub debug_io_latency_us: u64,
    pub seconds: f64,
    pub ios: u64,
    pub iops: f64,
    pub mib_s: f64,
    pub cpu_us_per_io: f64,
    /// iops divided by fio's at the same pattern, block size and depth.
    pub vs_fio: Option<f64>,
    /// Submission-to-completion latency from the AIO histogram (upper
    /// bound of the power-of-two bucket holding the quantile).
    pub latency_us_p50: Option<u64>,
    pub latency_us_p99: Option<u64>,
}

/// What one run of a method measured.
struct Measured {
    seconds: f64,
    ios: u64,
    cpu_us_per_io: f64,
    latency_us_p50: Option<u64>,
    latency_us_p99: Option<u64>,
}

fn block_bytes(pattern: Pattern) -> usize {
    match pattern {
        Pattern::Random => BLOCK_SIZE,
        Pattern::Sequential => 16 * BLOCK_SIZE,
    }
}

/// Creates (or extends) the benchmark file with incompressible data, so
/// that no layer can shortcut reading it.
pub fn prepare_file(path: &Path, size_mib: u64, progress: &mut dyn Write) -> Result<(), String> {
    let want = size_mib << 20;
    if std::fs::metadata(path).is_ok_and(|m| m.len() >= want) {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("could not create {}: {e}", dir.display()))?;
    }
    let _ = writeln!(progress, "creating {} ({size_mib} MiB) ...", path.display());
    let file = SegmentFile::create_path(path, false).map_err(|e| e.to_string())?;
    let mut chunk = AlignedBuf::new(1 << 20);
    let mut rng = XorShift::new(0x5eed);
    for mib in 0..size_mib {
        for word in chunk.chunks_exact_mut(8) {
            word.copy_from_slice(&rng.next_u64().to_le_bytes());
        }
        file.write_all_at(mib << 20, &chunk)
            .map_err(|e| e.to_string())?;
    }
    file.fdatasync().map_err(|e| e.to_string())
}

/// Runs every case, printing a table (or JSON lines) to `out`.
pub fn run(opts: &RawioOptions, json: bool, out: &mut dyn Write) -> Result<Vec<RawioCase>, String> {
    let size = opts.size_mib << 20;
    prepare_file(&opts.file, opts.size_mib, &mut std::io::stderr())?;
    let use_fio = opts.fio && fio::available();
    let cache = match (opts.direct, opts.drop_caches) {
        (true, _) => "cold (O_DIRECT)",
        (false, true) => "cold (page cache dropped before each case)",
        (false, false) => "warm (buffered, page cache not dropped)",
    };
    let header = format!(
        "aiostore bench rawio: file={} size={} MiB seconds={} direct={} cache={} io_workers={} debug_io_latency_us={} fio={}",
        opts.file.display(),
        opts.size_mib,
        opts.seconds,
        opts.direct,
        cache,
        opts.io_workers,
        opts.debug_io_latency_us,
        if use_fio { "yes" } else { "not installed or disabled" }
    );
    let w = |out: &mut dyn Write, line: String| {
        out.write_all(line.as_bytes()).map_err(|e| e.to_string())
    };
    if !json {
        w(out, format!("{header}\n"))?;
        w(
            out,
            format!(
                "{:<11} {:>6} {:>5} {:<9} {:>10} {:>9} {:>9} {:>7} {:>13}\n",
                "pattern",
                "KiB",
                "depth",
                "method",
                "iops",
                "MiB/s",
                "cpu_us/io",
                "vs_fio",
                "p50/p99 us<="
            ),
        )?;
    }
    let mut cases = Vec::new();
    for &pattern in &opts.patterns {
        for &depth in &opts.depths {
            let bytes = block_bytes(pattern);
            let mut fio_iops = None;
            let mut emit = |case: RawioCase, out: &mut dyn Write| -> Result<(), String> {
                let line = if json {
                    serde_json::to_string(&case).map_err(|e| e.to_string())? + "\n"
                } else {
                    format!(
                        "{:<11} {:>6} {:>5} {:<9} {:>10.0} {:>9.1} {:>9.2} {:>7} {:>13}\n",
                        case.pattern,
                        case.block_kib,
                        case.depth,
                        case.method,
                        case.iops,
                        case.mib_s,
                        case.cpu_us_per_io,
                        case.vs_fio.map_or("-".to_string(), |r| format!("{r:.2}")),
                        match (case.latency_us_p50, case.latency_us_p99) {
                            (Some(a), Some(b)) => format!("{a}/{b}"),
                            _ => "-".to_string(),
                        }
                    )
                };
                w(out, line)?;
                cases.push(case);
                Ok(())
            };
            let base = |method: &'static str,
                        seconds: f64,
                        ios: u64,
                        cpu_us_per_io: f64,
                        fio: Option<f64>| {
                let iops = ios as f64 / seconds;
                RawioCase {
                    bench: "rawio",
                    method,
                    pattern: pattern.name(),
                    block_kib: bytes / 1024,
                    depth,
                    direct: opts.direct,
                    cache,
                    io_workers: opts.io_workers,
                    debug_io_latency_us: opts.debug_io_latency_us,
                    seconds,
                    ios,
                    iops,
                    mib_s: iops * bytes as f64 / (1 << 20) as f64,
                    cpu_us_per_io,
                    vs_fio: fio.map(|f| iops / f),
                    latency_us_p50: None,
                    latency_us_p99: None,
                }
            };
            if use_fio {
                maybe_drop_caches(opts)?;
                let r = fio::run(
                    &opts.file,
                    size,
                    pattern,
                    bytes,
                    depth,
                    opts.direct,
                    opts.seconds,
                )?;
                fio_iops = Some(r.iops);
                let mut case = base(
                    "fio",
                    opts.seconds,
                    (r.iops * opts.seconds) as u64,
                    r.cpu_us_per_io,
                    None,
                );
                case.iops = r.iops;
                case.mib_s = r.bytes_per_second / (1 << 20) as f64;
                case.vs_fio = Some(1.0);
                emit(case, out)?;
            }
            for &method in &opts.methods {
                if method == ReadMethod::Pread && depth != 1 {
                    continue; // pread has no queue: it only exists at depth 1.
                }
                maybe_drop_caches(opts)?;
                let m = measure(opts, method, pattern, depth, size)?;
                let mut case = base(method.name(), m.seconds, m.ios, m.cpu_us_per_io, fio_iops);
                case.latency_us_p50 = m.latency_us_p50;
                case.latency_us_p99 = m.latency_us_p99;
                emit(case, out)?;
            }
        }
    }
    Ok(cases)
}

fn maybe_drop_caches(opts: &RawioOptions) -> Result<(), String> {
    if opts.drop_caches && !opts.direct {
        drop_page_cache()
            .map_err(|e| format!("could not drop the page cache (needs root): {e}"))?;
    }
    Ok(())
}

/// Runs one case for `opts.seconds`.
fn measure(
    opts: &RawioOptions,
    method: ReadMethod,
    pattern: Pattern,
    depth: usize,
    size: u64,
) -> Result<Measured, String> {
    let bytes = block_bytes(pattern);
    let units = size / bytes as u64;
    let file =
        SegmentFile::open_path(&opts.file, opts.direct, false, 0).map_err(|e| e.to_string())?;
    let mut rng = XorShift::new(0xC0FFEE ^ depth as u64);
    let mut sequential_next = 0u64;
    let mut next_offset = || match pattern {
        Pattern::Random => rng.below(units) * bytes as u64,
        Pattern::Sequential => {
            let offset = sequential_next * bytes as u64;
            sequential_next = (sequential_next + 1) % units;
            offset
        }
    };
    let cpu_before = process_cpu_time();
    let started = Instant::now();
    let deadline = started + std::time::Duration::from_secs_f64(opts.seconds);
    let mut ios = 0u64;
    let mut latency = (None, None);
    match method {
        ReadMethod::Pread => {
            let mut buf = AlignedBuf::new(bytes);
            let iov = [IoVec::new(buf.as_mut_ptr(), bytes).0];
            while Instant::now() < deadline {
                // SAFETY: iov describes buf, which we own for the loop.
                let n = unsafe { file.preadv(next_offset(), &iov) };
                if n != bytes as i64 {
                    return Err(format!("pread returned {n}, expected {bytes}"));
                }
                ios += 1;
            }
        }
        ReadMethod::Aio(io_method) => {
            let aio = Aio::start(&AioConfig {
                method: io_method,
                io_workers: opts.io_workers,
                max_sessions: 1,
                io_max_concurrency: depth.max(1),
                io_max_combine_limit: 16,
                debug_io_latency_us: opts.debug_io_latency_us,
            })
            .map_err(|e| e.to_string())?;
            super::check_method(&aio, io_method)?;
            let mut session = aio.session().map_err(|e| e.to_string())?;
            let mut reader = BlockReader::new(Arc::clone(&aio), file, depth, bytes / BLOCK_SIZE);
            while Instant::now() < deadline {
                while reader.has_room() {
                    reader
                        .start(&mut session, next_offset(), bytes / BLOCK_SIZE)
                        .map_err(|e| e.to_string())?;
                }
                match reader.next_completed(&mut session) {
                    Some(Ok(_)) => ios += 1,
                    Some(Err(e)) => return Err(e.to_string()),
                    None => unreachable!("reads are in flight"),
                }
            }
            reader.drain(&mut session);
            if let Some(row) = aio.stats().row(io_method, crate::stats::IoOp::Read) {
                latency = (row.latency_us_quantile(0.5), row.latency_us_quantile(0.99));
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu_us = (process_cpu_time() - cpu_before).as_secs_f64() * 1e6;
    Ok(Measured {
        seconds,
        ios,
        cpu_us_per_io: cpu_us / ios.max(1) as f64,
        latency_us_p50: latency.0,
        latency_us_p99: latency.1,
    })
}
