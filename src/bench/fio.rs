//! Runs fio (Debian package `fio`) on the same file, block size and depth,
//! so that our figures can be given as ratios to what the device does.

use std::path::Path;
use std::process::Command;

/// The I/O pattern of a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    Random,
    Sequential,
}

impl Pattern {
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Random => "random",
            Pattern::Sequential => "sequential",
        }
    }
}

/// What fio measured.
#[derive(Debug, Clone, Copy)]
pub struct FioResult {
    pub iops: f64,
    pub bytes_per_second: f64,
    pub cpu_us_per_io: f64,
}

/// True if an `fio` binary can be run.
pub fn available() -> bool {
    Command::new("fio")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Reads `file` with fio's io_uring engine for `seconds`.
pub fn run(
    file: &Path,
    size_bytes: u64,
    pattern: Pattern,
    block_bytes: usize,
    depth: usize,
    direct: bool,
    seconds: f64,
) -> Result<FioResult, String> {
    let rw = match pattern {
        Pattern::Random => "randread",
        Pattern::Sequential => "read",
    };
    let output = Command::new("fio")
        .args([
            "--name=aiostore-baseline",
            &format!("--filename={}", file.display()),
            &format!("--size={size_bytes}"),
            &format!("--direct={}", u8::from(direct)),
            "--ioengine=io_uring",
            &format!("--rw={rw}"),
            &format!("--bs={block_bytes}"),
            &format!("--iodepth={depth}"),
            &format!("--runtime={}ms", (seconds * 1000.0) as u64),
            "--time_based",
            "--norandommap",
            "--randrepeat=0",
            "--invalidate=0",
            "--output-format=json",
        ])
        .output()
        .map_err(|e| format!("could not run fio: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "fio failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    parse(&String::from_utf8_lossy(&output.stdout))
}

fn parse(json: &str) -> Result<FioResult, String> {
    // fio may print warnings before the JSON document.
    let start = json.find('{').ok_or("fio printed no JSON")?;
    let doc: serde_json::Value =
        serde_json::from_str(&json[start..]).map_err(|e| format!("fio JSON: {e}"))?;
    let job = &doc["jobs"][0];
    let read = &job["read"];
    let number = |v: &serde_json::Value, what: &str| {
        v.as_f64().ok_or_else(|| format!("fio JSON has no {what}"))
    };
    let iops = number(&read["iops"], "read.iops")?;
    let bytes_per_second = number(&read["bw_bytes"], "read.bw_bytes")?;
    let ios = number(&read["total_ios"], "read.total_ios")?;
    let runtime_ms = number(&job["job_runtime"], "job_runtime")?;
    let cpu_percent = number(&job["usr_cpu"], "usr_cpu")? + number(&job["sys_cpu"], "sys_cpu")?;
    let cpu_us = cpu_percent / 100.0 * runtime_ms * 1000.0;
    Ok(FioResult {
        iops,
        bytes_per_second,
        cpu_us_per_io: if ios > 0.0 { cpu_us / ios } else { 0.0 },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_figures_out_of_fio_json() {
        let json = r#"note: both iodepth >= 1 and synchronous I/O engine are selected
{"jobs":[{"job_runtime":2000,"usr_cpu":10.0,"sys_cpu":30.0,
  "read":{"iops":40000.5,"bw_bytes":327684096,"total_ios":80001}}]}"#;
        let r = parse(json).unwrap();
        assert_eq!(r.iops, 40000.5);
        assert_eq!(r.bytes_per_second, 327684096.0);
        assert!((r.cpu_us_per_io - 0.4 * 2_000_000.0 / 80001.0).abs() < 1e-9);
    }
}
