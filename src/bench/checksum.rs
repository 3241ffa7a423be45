//! `aiostore bench checksum`: page checksum speed on one core, against a
//! straightforward C implementation of the same algorithm compiled with
//! `-O3 -march=native` in the same run (benches/c/pg_checksum.c).
//!
//! With direct I/O there is no page cache copy to hide behind, and checksum
//! verification becomes a visible share of a read's cost
//! (reference/aio-v2-checksums-2025.txt), so this must stay vectorised.

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

/// Checksums `mib` MiB of random pages repeatedly for about `seconds`.
pub fn run(mib: usize, seconds: f64, compare_with_c: bool) -> Result<ChecksumResult, String> {
    let pages = (mib << 20) / BLOCK_SIZE;
    let mut buf = AlignedBuf::new(pages.max(1) * BLOCK_SIZE);
    let mut rng = XorShift::new(42);
    for word in buf.chunks_exact_mut(8) {
        word.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
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
    let gb_s = bytes as f64 / elapsed / 1e9;
    let c_gb_s = if compare_with_c {
        c_baseline(mib)?
    } else {
        None
    };
    Ok(ChecksumResult {
        bench: "checksum",
        mib,
        pages,
        seconds: elapsed,
        gb_s,
        c_gb_s,
        vs_c: c_gb_s.map(|c| gb_s / c),
    })
}

/// Builds and runs the C baseline; `None` if there is no C compiler.
fn c_baseline(mib: usize) -> Result<Option<f64>, String> {
    let dir = tempfile_dir()?;
    let source = dir.join("pg_checksum.c");
    let binary = dir.join("pg_checksum");
    std::fs::write(&source, C_SOURCE).map_err(|e| e.to_string())?;
    let compiled = Command::new("cc")
        .args(["-O3", "-march=native", "-o"])
        .arg(&binary)
        .arg(&source)
        .status();
    let result = match compiled {
        Err(_) => Ok(None),
        Ok(status) if !status.success() => Err("the C baseline did not compile".to_string()),
        Ok(_) => {
            let output = Command::new(&binary)
                .args(["--bench", &mib.to_string()])
                .output()
                .map_err(|e| e.to_string())?;
            let text = String::from_utf8_lossy(&output.stdout);
            text.split_whitespace()
                .find_map(|field| field.strip_prefix("gb_s="))
                .and_then(|v| v.parse().ok())
                .map(Some)
                .ok_or_else(|| format!("the C baseline printed no gb_s: {text}"))
        }
    };
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn tempfile_dir() -> Result<std::path::PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("aiostore-checksum-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    Ok(dir)
}
