//! `aiostore bench checksum`: page checksum speed on one core, against a
//! straightforward C implementation of the same algorithm compiled with
//! `-O3 -march=native` in the same run (benches/c/pg_checksum.c).
//!
//! With direct I/O there is no page cache copy to hide behind, and checksum
//! verification becomes a visible share of a read's cost
//! (reference/aio-v2-checksums-2025.txt), so this must stay vectorised.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::XorShift;
use crate::page::{page_checksum, PageBytes};
use crate::storage::{AlignedBuf, BLOCK_SIZE};

const C_SOURCE: &str = include_str!("../../benches/c/pg_checksum.c");

#[derive(Debug, Clone, Serialize)]
pub struct ChecksumResult {
    pub bench: &'static str,
    pub mib: usize,
    pub pages: usize,
    pub seconds: f64,
    pub gb_s: f64,
    /// The C baseline's figure from the same run, if a C compiler exists.
    pub c_gb_s: Option<f64>,
    pub vs_c: Option<f64>,
}

/// Rounds of Rust and C runs, alternated so that both see the same
/// machine; the medians are compared.
pub const ROUNDS: usize = 3;

/// Checksums `mib` MiB of random pages repeatedly for about `seconds` per
/// round, alternating with the C baseline.
pub fn run(mib: usize, seconds: f64, compare_with_c: bool) -> Result<ChecksumResult, String> {
    let pages = (mib << 20) / BLOCK_SIZE;
    let mut buf = AlignedBuf::new(pages.max(1) * BLOCK_SIZE);
    let mut rng = XorShift::new(42);
    for word in buf.chunks_exact_mut(8) {
        word.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    let c_binary = if compare_with_c {
        build_c_baseline()?
    } else {
        None
    };
    let mut rust = Vec::new();
    let mut c = Vec::new();
    let mut elapsed_total = 0.0;
    for _ in 0..ROUNDS {
        let (gb_s, elapsed) = rust_round(&buf, seconds);
        rust.push(gb_s);
        elapsed_total += elapsed;
        if let Some((_, binary)) = &c_binary {
            c.push(run_c_baseline(binary, mib)?);
        }
    }
    if let Some((dir, _)) = &c_binary {
        let _ = std::fs::remove_dir_all(dir);
    }
    let gb_s = super::median(&rust).expect("ROUNDS is above 0");
    let c_gb_s = super::median(&c);
    Ok(ChecksumResult {
        bench: "checksum",
        mib,
        pages,
        seconds: elapsed_total,
        gb_s,
        c_gb_s,
        vs_c: c_gb_s.map(|c| gb_s / c),
    })
}

/// One timed pass: GB/s and seconds.
fn rust_round(buf: &AlignedBuf, seconds: f64) -> (f64, f64) {
    let limit = Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let mut bytes = 0u64;
    let mut sink = 0u64;
    while started.elapsed() < limit {
        for (blkno, page) in buf.chunks_exact(BLOCK_SIZE).enumerate() {
            let page: &PageBytes = page.try_into().expect("one block");
            sink =
                sink.wrapping_add(page_checksum(std::hint::black_box(page), blkno as u32) as u64);
        }
        bytes += buf.len() as u64;
    }
    std::hint::black_box(sink);
    let elapsed = started.elapsed().as_secs_f64();
    (bytes as f64 / elapsed / 1e9, elapsed)
}

/// Builds the C baseline into a temporary directory; `None` if there is no
/// C compiler.
fn build_c_baseline() -> Result<Option<(PathBuf, PathBuf)>, String> {
    let dir = tempfile_dir()?;
    let source = dir.join("pg_checksum.c");
    let binary = dir.join("pg_checksum");
    std::fs::write(&source, C_SOURCE).map_err(|e| e.to_string())?;
    match Command::new("cc")
        .args(["-O3", "-march=native", "-o"])
        .arg(&binary)
        .arg(&source)
        .status()
    {
        Err(_) => {
            let _ = std::fs::remove_dir_all(&dir);
            Ok(None)
        }
        Ok(status) if !status.success() => Err("the C baseline did not compile".to_string()),
        Ok(_) => Ok(Some((dir, binary))),
    }
}

/// Runs the C baseline once (about 2 s) and returns its GB/s.
fn run_c_baseline(binary: &Path, mib: usize) -> Result<f64, String> {
    let output = Command::new(binary)
        .args(["--bench", &mib.to_string()])
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.split_whitespace()
        .find_map(|field| field.strip_prefix("gb_s="))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("the C baseline printed no gb_s: {text}"))
}

fn tempfile_dir() -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("aiostore-checksum-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    Ok(dir)
}
