//! Runs fio (Debian package `fio`) on the same file, block size and depth,
//! so that our figures can be given as ratios to what the device does:
//! reads for the scans and prewarms, a sequential write for the
//! checkpoint of `bench copy-checkpoint`.

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
    let job = Job {
        file,
        size_bytes,
        rw,
        block_bytes,
        depth,
        direct,
        seconds,
        once: false,
    };
    parse(&job.run()?, "read")
}

/// Writes `file` (made `size_bytes` long by fio first, if it is not)
/// sequentially from its start, over and over, with fio's io_uring engine
/// for `seconds`.
pub fn run_sequential_write(
    file: &Path,
    size_bytes: u64,
    block_bytes: usize,
    depth: usize,
    direct: bool,
    seconds: f64,
) -> Result<FioResult, String> {
    let job = Job {
        file,
        size_bytes,
        rw: "write",
        block_bytes,
        depth,
        direct,
        seconds,
        once: false,
    };
    parse(&job.run()?, "write")
}

/// Writes `file` once from its start with direct I/O after allocating it
/// with `fallocate` (made here; the caller removes it): every write lands
/// in an allocated but unwritten extent, as a checkpoint's writes do in
/// a table extended with `fallocate`. The file system converts each
/// extent as its write completes, which a file written over and over
/// ([`run_sequential_write`]) never asks of it.
pub fn run_sequential_write_into_allocated(
    file: &Path,
    size_bytes: u64,
    block_bytes: usize,
    depth: usize,
) -> Result<FioResult, String> {
    let f = std::fs::File::create(file).map_err(|e| format!("{}: {e}", file.display()))?;
    rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::empty(), 0, size_bytes)
        .map_err(|e| format!("fallocate {}: {e}", file.display()))?;
    drop(f);
    let job = Job {
        file,
        size_bytes,
        rw: "write",
        block_bytes,
        depth,
        direct: true,
        // A bound only: the one pass ends first.
        seconds: ONE_PASS_SECONDS_MAX,
        once: true,
    };
    parse(&job.run()?, "write")
}

/// How long a one-pass job may run.
const ONE_PASS_SECONDS_MAX: f64 = 600.0;

/// One fio job: the one way fio is run.
struct Job<'a> {
    file: &'a Path,
    size_bytes: u64,
    /// fio's `--rw`.
    rw: &'a str,
    block_bytes: usize,
    depth: usize,
    direct: bool,
    seconds: f64,
    /// One pass over the file, as it is (`--fallocate=none`), instead of
    /// over and over for `seconds`.
    once: bool,
}

impl Job<'_> {
    /// Runs the job; returns fio's standard output (its JSON report).
    fn run(&self) -> Result<String, String> {
        let output = Command::new("fio")
            .args([
                "--name=aiostore-baseline",
                &format!("--filename={}", self.file.display()),
                &format!("--size={}", self.size_bytes),
                &format!("--direct={}", u8::from(self.direct)),
                "--ioengine=io_uring",
                &format!("--rw={}", self.rw),
                &format!("--bs={}", self.block_bytes),
                &format!("--iodepth={}", self.depth),
                &format!("--runtime={}ms", (self.seconds * 1000.0) as u64),
                if self.once {
                    "--fallocate=none"
                } else {
                    "--time_based"
                },
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
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }
}

/// The figures of the job's `op` ("read" or "write") in fio's JSON.
fn parse(json: &str, op: &str) -> Result<FioResult, String> {
    // fio may print warnings before the JSON document.
    let start = json.find('{').ok_or("fio printed no JSON")?;
    let doc: serde_json::Value =
        serde_json::from_str(&json[start..]).map_err(|e| format!("fio JSON: {e}"))?;
    let job = &doc["jobs"][0];
    let figures = &job[op];
    let number = |v: &serde_json::Value, what: &str| {
        v.as_f64().ok_or_else(|| format!("fio JSON has no {what}"))
    };
    let iops = number(&figures["iops"], &format!("{op}.iops"))?;
    let bytes_per_second = number(&figures["bw_bytes"], &format!("{op}.bw_bytes"))?;
    let ios = number(&figures["total_ios"], &format!("{op}.total_ios"))?;
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
        let r = parse(json, "read").unwrap();
        assert_eq!(r.iops, 40000.5);
        assert_eq!(r.bytes_per_second, 327684096.0);
        assert!((r.cpu_us_per_io - 0.4 * 2_000_000.0 / 80001.0).abs() < 1e-9);
        // A write job's figures are under "write"; its "read" is empty.
        let json = r#"{"jobs":[{"job_runtime":1000,"usr_cpu":1.0,"sys_cpu":1.0,
  "read":{"iops":0.0,"bw_bytes":0,"total_ios":0},
  "write":{"iops":2000.0,"bw_bytes":262144000,"total_ios":2000}}]}"#;
        let w = parse(json, "write").unwrap();
        assert_eq!(w.bytes_per_second, 262144000.0);
        assert_eq!(parse(json, "read").unwrap().bytes_per_second, 0.0);
    }
}
