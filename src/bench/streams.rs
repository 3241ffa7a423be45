//! `aiostore bench prewarm` and `aiostore bench repeated-blocks`: the
//! buffer pool and read streams on cold (O_DIRECT) relations.
//!
//! prewarm: the reference thread's `pg_prewarm` experiment, reading a
//! relation several times larger than `shared_buffers` through a stream,
//! per method, with `io_combine_limit` 1 and 16 and
//! `effective_io_concurrency` 0 and 16, against fio's sequential 128 KiB
//! direct read of the same file in the same run. Then, on a relation that
//! fits in the pool, a stream over cached blocks against a loop of plain
//! buffer lookups.
//!
//! repeated-blocks: reference/read-stream-inprogress-io-2025.txt scaled to
//! this machine: a stream over blocks i, i+1, i+2, i+3 for i in 1..=10000
//! (40 000 requests, 10 003 distinct blocks), against a stream over the same
//! distinct blocks once each, both from a cold pool.
//!
//! advice: random blocks of a buffered relation with the page cache dropped
//! before each case, `effective_io_concurrency` 0 against 16. With the sync
//! method the only way to overlap reads is to tell the kernel what comes
//! next (`posix_fadvise(WILLNEED)`); the other methods overlap their own.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use super::fio::{self, Pattern};
use crate::aio::{Aio, AioConfig};
use crate::buffer::{BufferPool, BufferTag, PoolConfig, SessionSettings};
use crate::config::IoMethod;
use crate::page::{add_item, init_page, set_checksum, PageBytes};
use crate::storage::{AlignedBuf, Fork, Smgr, BLOCK_SIZE};
use crate::stream::StreamLimits;
use crate::tools::{prewarm, read_stream_for_blocks, StreamReport};

/// Relation numbers the benchmarks use in their own directory.
const PREWARM_REL: u32 = 1;
const CACHED_REL: u32 = 2;
const REPEATED_REL: u32 = 3;
const ADVICE_REL: u32 = 4;

/// One measured case.
#[derive(Debug, Clone, Serialize)]
pub struct StreamCase {
    pub bench: &'static str,
    pub case: &'static str,
    pub method: &'static str,
    pub io_combine_limit: usize,
    pub effective_io_concurrency: usize,
    pub shared_buffers: u32,
    pub direct: bool,
    pub seconds: f64,
    pub mib_s: f64,
    pub blocks: u64,
    pub reads: u64,
    pub hits: u64,
    pub ios: u64,
    pub waits: u64,
    /// mib_s divided by fio's sequential 128 KiB direct read (prewarm), or
    /// seconds divided by the comparison case's (cached stream, repeated).
    pub ratio: Option<f64>,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct StreamBenchOptions {
    pub dir: PathBuf,
    pub methods: Vec<IoMethod>,
    pub shared_buffers: u32,
    pub relation_mib: u64,
    pub fio: bool,
    pub io_workers: usize,
}

/// Writes `nblocks` checksummed pages for `rel` in `dir`, unless the
/// relation already has exactly that many.
fn ensure_relation(smgr: &Arc<Smgr>, rel: u32, nblocks: u32) -> Result<(), String> {
    let relation = smgr.relation(rel);
    if relation.exists(Fork::Main)
        && relation.nblocks(Fork::Main).map_err(|e| e.to_string())? == nblocks
    {
        return Ok(());
    }
    relation.unlink().map_err(|e| e.to_string())?;
    relation.create(Fork::Main).map_err(|e| e.to_string())?;
    const CHUNK_BLOCKS: u32 = 128;
    let mut chunk = AlignedBuf::new(CHUNK_BLOCKS as usize * BLOCK_SIZE);
    let mut block = 0;
    while block < nblocks {
        let n = CHUNK_BLOCKS.min(nblocks - block);
        for i in 0..n {
            let page: &mut PageBytes = (&mut chunk
                [i as usize * BLOCK_SIZE..(i as usize + 1) * BLOCK_SIZE])
                .try_into()
                .expect("one block");
            init_page(page, 0);
            let text = format!("block {} of relation {rel} ", block + i).repeat(40);
            add_item(page, text.as_bytes()).expect("fits");
            set_checksum(page, block + i);
        }
        relation
            .extend(Fork::Main, block, &chunk[..n as usize * BLOCK_SIZE])
            .map_err(|e| e.to_string())?;
        block += n;
    }
    relation.fsync(Fork::Main).map_err(|e| e.to_string())
}

fn start_pool(
    opts: &StreamBenchOptions,
    smgr: &Arc<Smgr>,
    method: IoMethod,
) -> Result<Arc<BufferPool>, String> {
    let aio = Aio::start(&AioConfig {
        method,
        io_workers: opts.io_workers,
        max_sessions: 2,
        io_max_concurrency: 64,
        io_max_combine_limit: 16,
        debug_io_latency_us: 0,
    })
    .map_err(|e| e.to_string())?;
    super::check_method(&aio, method)?;
    BufferPool::new(
        aio,
        Arc::clone(smgr),
        &PoolConfig {
            nbuffers: opts.shared_buffers,
            max_sessions: 1,
        },
    )
    .map_err(|e| e.to_string())
}

fn case(
    bench: &'static str,
    name: &'static str,
    method: IoMethod,
    combine: usize,
    eic: usize,
    opts: &StreamBenchOptions,
    report: &StreamReport,
) -> StreamCase {
    StreamCase {
        bench,
        case: name,
        method: method.name(),
        io_combine_limit: combine,
        effective_io_concurrency: eic,
        shared_buffers: opts.shared_buffers,
        direct: true,
        seconds: report.seconds,
        mib_s: report.blocks as f64 * BLOCK_SIZE as f64 / (1 << 20) as f64 / report.seconds,
        blocks: report.blocks,
        reads: report.reads,
        hits: report.hits,
        ios: report.ios,
        waits: report.waits,
        ratio: None,
    }
}

fn emit(out: &mut dyn Write, json: bool, c: &StreamCase) -> Result<(), String> {
    super::emit_case(out, json, c, |c| {
        format!(
            "{:<10} {:<9} {:>7} {:>4} {:>8.3} {:>9.1} {:>8} {:>8} {:>7} {:>7} {:>7}",
            c.case,
            c.method,
            c.io_combine_limit,
            c.effective_io_concurrency,
            c.seconds,
            c.mib_s,
            c.reads,
            c.hits,
            c.ios,
            c.waits,
            c.ratio.map_or("-".into(), |r| format!("{r:.2}"))
        )
    })
}

const TABLE_HEADER: &str =
    "case       method    combine  eic  seconds     MiB/s    reads     hits     ios   waits   ratio";

/// Runs the prewarm benchmark.
pub fn run_prewarm(
    opts: &StreamBenchOptions,
    json: bool,
    out: &mut dyn Write,
) -> Result<Vec<StreamCase>, String> {
    let smgr = Arc::new(Smgr::new(&opts.dir, true).map_err(|e| e.to_string())?);
    let nblocks = (opts.relation_mib << 20) as u32 / BLOCK_SIZE as u32;
    let _ = writeln!(
        std::io::stderr(),
        "preparing a {} MiB relation in {} ...",
        opts.relation_mib,
        opts.dir.display()
    );
    ensure_relation(&smgr, PREWARM_REL, nblocks)?;
    let use_fio = opts.fio && fio::available() && opts.relation_mib <= 1024;
    if !json {
        writeln!(
            out,
            "aiostore bench prewarm: relation={} MiB shared_buffers={} MiB direct=true cache=cold (O_DIRECT, new pool per case) io_workers={} fio={}",
            opts.relation_mib,
            (opts.shared_buffers as usize * BLOCK_SIZE) >> 20,
            opts.io_workers,
            if use_fio { "yes" } else { "no" }
        )
        .map_err(|e| e.to_string())?;
        writeln!(out, "{TABLE_HEADER}").map_err(|e| e.to_string())?;
    }
    let segment = segment_path(&opts.dir, PREWARM_REL);
    let mut cases = Vec::new();
    for &method in &opts.methods {
        let fio_mib_s = if use_fio {
            let r = fio::run(
                &segment,
                nblocks as u64 * BLOCK_SIZE as u64,
                Pattern::Sequential,
                16 * BLOCK_SIZE,
                16,
                true,
                2.0,
            )?;
            let mib_s = r.bytes_per_second / (1 << 20) as f64;
            let mut c = case(
                "prewarm",
                "fio",
                method,
                16,
                16,
                opts,
                &StreamReport::default(),
            );
            c.mib_s = mib_s;
            c.seconds = 2.0;
            c.ratio = Some(1.0);
            emit(out, json, &c)?;
            cases.push(c);
            Some(mib_s)
        } else {
            None
        };
        for combine in [1usize, 16] {
            for eic in [0usize, 16] {
                let pool = start_pool(opts, &smgr, method)?;
                let mut session = pool
                    .session(SessionSettings {
                        io_combine_limit: combine,
                        ..Default::default()
                    })
                    .map_err(|e| e.to_string())?;
                let limits = StreamLimits {
                    effective_io_concurrency: eic,
                    maintenance_io_concurrency: eic,
                };
                let report = prewarm(&mut session, PREWARM_REL, Fork::Main, limits)
                    .map_err(|e| e.to_string())?;
                let mut c = case("prewarm", "prewarm", method, combine, eic, opts, &report);
                c.ratio = fio_mib_s.map(|f| c.mib_s / f);
                emit(out, json, &c)?;
                cases.push(c);
            }
        }
        cases.extend(cached(opts, &smgr, method, json, out)?);
    }
    Ok(cases)
}

/// A cached relation read through a stream, against a loop of plain
/// buffer lookups over the same blocks.
fn cached(
    opts: &StreamBenchOptions,
    smgr: &Arc<Smgr>,
    method: IoMethod,
    json: bool,
    out: &mut dyn Write,
) -> Result<Vec<StreamCase>, String> {
    let nblocks = (opts.shared_buffers / 2).min(16384);
    ensure_relation(smgr, CACHED_REL, nblocks)?;
    let pool = start_pool(opts, smgr, method)?;
    let mut session = pool
        .session(SessionSettings::default())
        .map_err(|e| e.to_string())?;
    prewarm(
        &mut session,
        CACHED_REL,
        Fork::Main,
        StreamLimits::default(),
    )
    .map_err(|e| e.to_string())?;
    const ROUNDS: usize = 5;
    let (mut stream_best, mut lookup_best) = (f64::MAX, f64::MAX);
    let mut last = StreamReport::default();
    for _ in 0..ROUNDS {
        let report = prewarm(
            &mut session,
            CACHED_REL,
            Fork::Main,
            StreamLimits::default(),
        )
        .map_err(|e| e.to_string())?;
        stream_best = stream_best.min(report.seconds);
        last = report;
        let started = Instant::now();
        for block in 0..nblocks {
            let tag = BufferTag {
                rel: CACHED_REL,
                fork: Fork::Main,
                block,
            };
            let (id, found) = session.get_buffer(tag, None).map_err(|e| e.to_string())?;
            debug_assert!(found);
            session.release(id);
        }
        lookup_best = lookup_best.min(started.elapsed().as_secs_f64());
    }
    let mut stream_case = case(
        "prewarm",
        "cached",
        method,
        16,
        16,
        opts,
        &StreamReport {
            seconds: stream_best,
            ..last
        },
    );
    stream_case.ratio = Some(stream_best / lookup_best);
    let mut lookup_case = case(
        "prewarm",
        "lookups",
        method,
        0,
        0,
        opts,
        &StreamReport {
            blocks: nblocks as u64,
            hits: nblocks as u64,
            seconds: lookup_best,
            ..Default::default()
        },
    );
    lookup_case.ratio = Some(1.0);
    emit(out, json, &stream_case)?;
    emit(out, json, &lookup_case)?;
    Ok(vec![stream_case, lookup_case])
}

fn segment_path(dir: &Path, rel: u32) -> PathBuf {
    dir.join(rel.to_string())
}

/// Times each block is asked for in the repeated-blocks stream.
pub const REPEATS: u32 = 4;

/// The repeated-blocks streams: blocks i..i+REPEATS for i in
/// 1..=last_start, and the same distinct blocks once each. The relation
/// needs last_start + REPEATS blocks.
pub fn repeated_block_lists(last_start: u32) -> (Vec<u32>, Vec<u32>) {
    let repeated = (1..=last_start).flat_map(|i| i..i + REPEATS).collect();
    let distinct = (1..last_start + REPEATS).collect();
    (repeated, distinct)
}

/// `count` distinct random blocks below `nblocks`, in random order, the
/// same ones every run (a fixed seed). `count` must not exceed `nblocks`,
/// or the loop could not finish.
pub fn random_distinct_blocks(count: u32, nblocks: u32) -> Vec<u32> {
    assert!(count <= nblocks, "{count} distinct blocks of {nblocks}");
    let mut rng = super::XorShift::new(0x5eed);
    let mut seen = std::collections::HashSet::new();
    let mut blocks = Vec::with_capacity(count as usize);
    while blocks.len() < count as usize {
        let b = rng.below(nblocks as u64) as u32;
        if seen.insert(b) {
            blocks.push(b);
        }
    }
    blocks
}

/// Runs the repeated-blocks benchmark.
pub fn run_repeated(
    opts: &StreamBenchOptions,
    json: bool,
    out: &mut dyn Write,
) -> Result<Vec<StreamCase>, String> {
    const LAST_START: u32 = 10_000;
    let smgr = Arc::new(Smgr::new(&opts.dir, true).map_err(|e| e.to_string())?);
    ensure_relation(&smgr, REPEATED_REL, LAST_START + REPEATS)?;
    let (repeated, distinct) = repeated_block_lists(LAST_START);
    if !json {
        writeln!(
            out,
            "aiostore bench repeated-blocks: {} requests over {} distinct blocks vs {} distinct once each; shared_buffers={} MiB direct=true cache=cold (O_DIRECT, new pool per case)",
            repeated.len(),
            distinct.len(),
            distinct.len(),
            (opts.shared_buffers as usize * BLOCK_SIZE) >> 20
        )
        .map_err(|e| e.to_string())?;
        writeln!(out, "{TABLE_HEADER}").map_err(|e| e.to_string())?;
    }
    let mut cases = Vec::new();
    for &method in &opts.methods {
        let run = |blocks: &[u32]| -> Result<StreamReport, String> {
            let pool = start_pool(opts, &smgr, method)?;
            let mut session = pool
                .session(SessionSettings::default())
                .map_err(|e| e.to_string())?;
            read_stream_for_blocks(
                &mut session,
                REPEATED_REL,
                Fork::Main,
                blocks,
                StreamLimits::default(),
            )
            .map_err(|e| e.to_string())
        };
        let distinct_report = run(&distinct)?;
        let repeated_report = run(&repeated)?;
        let mut d = case(
            "repeated-blocks",
            "distinct",
            method,
            16,
            16,
            opts,
            &distinct_report,
        );
        d.ratio = Some(1.0);
        let mut r = case(
            "repeated-blocks",
            "repeated",
            method,
            16,
            16,
            opts,
            &repeated_report,
        );
        r.ratio = Some(repeated_report.seconds / distinct_report.seconds);
        emit(out, json, &r)?;
        emit(out, json, &d)?;
        cases.push(r);
        cases.push(d);
    }
    Ok(cases)
}

/// Runs the advice benchmark (needs root, to drop the page cache).
pub fn run_advice(
    opts: &StreamBenchOptions,
    json: bool,
    out: &mut dyn Write,
) -> Result<Vec<StreamCase>, String> {
    const RANDOM_BLOCKS: u32 = 4000;
    let nblocks = (opts.relation_mib << 20) as u32 / BLOCK_SIZE as u32;
    if nblocks < RANDOM_BLOCKS * 2 {
        return Err(format!(
            "--size-mib {} is too small; use at least {}",
            opts.relation_mib,
            (RANDOM_BLOCKS as usize * 2 * BLOCK_SIZE) >> 20
        ));
    }
    ensure_relation(
        &Arc::new(Smgr::new(&opts.dir, true).map_err(|e| e.to_string())?),
        ADVICE_REL,
        nblocks,
    )?;
    let buffered = Arc::new(Smgr::new(&opts.dir, false).map_err(|e| e.to_string())?);
    let blocks = random_distinct_blocks(RANDOM_BLOCKS, nblocks);
    if !json {
        writeln!(
            out,
            "aiostore bench advice: {RANDOM_BLOCKS} random blocks of a {} MiB relation; shared_buffers={} MiB direct=false cache=cold (page cache dropped before each case)",
            opts.relation_mib,
            (opts.shared_buffers as usize * BLOCK_SIZE) >> 20
        )
        .map_err(|e| e.to_string())?;
        writeln!(out, "{TABLE_HEADER}").map_err(|e| e.to_string())?;
    }
    let mut cases = Vec::new();
    for &method in &opts.methods {
        let mut baseline = None;
        for eic in [0usize, 16] {
            super::drop_page_cache()
                .map_err(|e| format!("could not drop the page cache (run as root): {e}"))?;
            let pool = start_pool(opts, &buffered, method)?;
            let mut session = pool
                .session(SessionSettings::default())
                .map_err(|e| e.to_string())?;
            let limits = StreamLimits {
                effective_io_concurrency: eic,
                maintenance_io_concurrency: eic,
            };
            let report =
                read_stream_for_blocks(&mut session, ADVICE_REL, Fork::Main, &blocks, limits)
                    .map_err(|e| e.to_string())?;
            let mut c = case("advice", "random", method, 16, eic, opts, &report);
            c.direct = false;
            let base = *baseline.get_or_insert(report.seconds);
            c.ratio = Some(report.seconds / base);
            emit(out, json, &c)?;
            cases.push(c);
        }
    }
    Ok(cases)
}
