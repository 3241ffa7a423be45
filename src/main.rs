//! The `aiostore` command: settings, file verification and benchmarks.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};

mod shell;

use aiostore::aio::{Aio, AioConfig};
use aiostore::bench::fio::Pattern;
use aiostore::bench::rawio::{self, RawioOptions, ReadMethod};
use aiostore::config::Settings;
use aiostore::crashtest::{KillWindow, Workload};
use aiostore::database::Database;
use aiostore::storage::Fork;

#[derive(Parser)]
#[command(
    name = "aiostore",
    version,
    about = "An embeddable storage engine built around asynchronous and direct I/O"
)]
struct Cli {
    /// Data directory (holds aiostore.toml and the data files).
    #[arg(
        long,
        env = "AIOSTORE_DATA",
        default_value = "./aiostore-data",
        global = true
    )]
    data_dir: PathBuf,

    /// Sets a setting, as name=value; repeatable (like `postgres -c`).
    #[arg(short = 'c', value_name = "NAME=VALUE", global = true)]
    settings: Vec<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Prints every setting, its value and where the value came from.
    #[command(alias = "show-all")]
    Settings,
    /// Shows one setting, or all of them (`show all`), like SQL's SHOW.
    Show { name: String },
    /// Verifies every page (header and checksum) of a raw relation segment
    /// file, ours or PostgreSQL's, reading it through the AIO subsystem.
    VerifyFile {
        file: PathBuf,
        /// Block number of the file's first page (131072 × N for segment
        /// file `.N`), since checksums include the block number.
        #[arg(long, default_value_t = 0)]
        first_block: u32,
    },
    /// Creates a data directory (see --data-dir) with an empty catalog and
    /// a superuser role named after the operating-system user running it.
    Init {
        /// The role's password: the first line of FILE. Without it the
        /// role has none, and can connect only over the Unix socket
        /// (trusted, as PostgreSQL's initdb sets up local connections).
        #[arg(long, value_name = "FILE")]
        pwfile: Option<PathBuf>,
    },
    /// Runs one or more `;`-separated SQL statements and prints their
    /// results as aligned tables (or CSV with --csv). On a data directory
    /// that `aiostore serve` holds, the server runs them.
    Sql {
        /// The statements; may start with `-` (`-1 + 2`, `-- comment`).
        #[arg(allow_hyphen_values = true)]
        text: String,
        /// Prints rows as CSV with a header line (as `COPY … TO STDOUT
        /// (FORMAT csv, HEADER)`) instead of aligned tables. Either way
        /// rows print as the query produces them, in bounded memory.
        #[arg(long)]
        csv: bool,
    },
    /// An interactive SQL prompt (history, multi-line statements, \timing,
    /// \d, \d t, \q). On a data directory that `aiostore serve` holds,
    /// its statements run in a session of the server.
    Shell,
    /// Serves the data directory to PostgreSQL clients (psql, pgbench,
    /// drivers) over TCP (listen_addresses, port) and a Unix socket
    /// (unix_socket_directories), until SIGTERM or SIGINT; database
    /// "postgres". Each connection is a session of this one process.
    Serve,
    /// Reads every block of a table through a read stream and reports
    /// hits, reads, I/Os, waits and time. The buffer pool is this
    /// command's own and ends with it: to keep a table in the pool for
    /// queries, run `SELECT prewarm('t')` in `aiostore shell`.
    Prewarm {
        table: String,
        #[arg(long)]
        json: bool,
    },
    /// Drops a table's buffers from this command's own pool (dirty ones
    /// written first), which starts empty and ends with the command: it
    /// shows the mechanism. In `aiostore shell` the pool lives on between
    /// statements.
    Evict {
        table: String,
        #[arg(long)]
        json: bool,
    },
    /// Reads the given blocks of a table, in order, through one read stream
    /// (the reference thread's read_stream_for_blocks). The pool is this
    /// command's own, so it starts cold; repeated blocks in the list show
    /// hits.
    ReadBlocks {
        table: String,
        /// Block numbers and ranges: 0,2,2,4 or 10-20,5.
        blocks: String,
        #[arg(long)]
        json: bool,
    },
    /// The first command to run: builds a small database in a directory of
    /// its own and shows, in under a minute, what the engine's I/O does
    /// (combining, prewarm, repeated blocks, look-ahead, index scans with
    /// and without prefetching against bitmap and sequential scans), each
    /// run cold.
    Demo {
        /// Directory for the demo database, created and removed at the end
        /// (unless --keep); one an earlier --keep run left is reused, its
        /// tables not built again.
        #[arg(long, default_value = "./aiostore-demo")]
        dir: PathBuf,
        /// Keep the demo directory afterwards, for the next run.
        #[arg(long)]
        keep: bool,
        /// Where to write the chart (SVG). Default: the directory's name
        /// with .svg, beside it.
        #[arg(long)]
        chart: Option<PathBuf>,
        /// A tiny run for tests (1 MiB pool, 8 MiB table).
        #[arg(long, hide = true)]
        quick: bool,
    },
    /// Prints the write-ahead log's records, one line each, like
    /// PostgreSQL's pg_waldump: from the last checkpoint's redo point (or
    /// --start) to the end of the log, and then where and why reading
    /// stopped. Reads the files only: no lock, so it also runs beside a
    /// running database.
    Waldump {
        /// Where to start, as X/Y in hex (default: the control file's
        /// redo point, or a segment file's start). A position inside a
        /// record moves on to the next record.
        #[arg(long, value_name = "LSN", value_parser = aiostore::tools::waldump::parse_lsn_arg)]
        start: Option<u64>,
        /// Read no record that starts at or after this LSN.
        #[arg(long, value_name = "LSN", value_parser = aiostore::tools::waldump::parse_lsn_arg)]
        end: Option<u64>,
        /// Read at most this many records.
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
        /// Print the number of records, their bytes and their page images'
        /// bytes per resource manager and record kind instead of the
        /// records.
        #[arg(long)]
        stats: bool,
        /// A data directory, its wal/ directory or a segment file in it
        /// (default: --data-dir).
        #[arg(value_name = "FILE_OR_DIR")]
        path: Option<PathBuf>,
    },
    /// Runs a benchmark.
    Bench(BenchCommand),
    /// Runs a workload in a child process, kills it with SIGKILL at a
    /// random moment, reopens the data directory and checks it: every
    /// acknowledged commit kept, nothing half done, pages, visibility map
    /// and files sound; again for each iteration (docs/crashtest.md).
    Crashtest {
        /// insert, update, copy, delete, vacuum, checkpoint, ddl, lock or mixed.
        #[arg(long, value_parser = parse_workload)]
        workload: Workload,
        #[arg(long, default_value_t = 20)]
        iterations: u32,
        /// Seed of the first iteration (default: from the clock); each
        /// iteration's line shows its own, which reproduces its choices.
        #[arg(long)]
        seed: Option<u64>,
        /// When the child is killed, in milliseconds after it is ready:
        /// MIN..MAX, or one number.
        #[arg(long, default_value = "300..1500", value_parser = parse_kill_window)]
        kill_after_ms: KillWindow,
        /// Directory for the iterations' data directories (created if
        /// missing); a passing iteration's is removed unless --keep, a
        /// failing one's is kept. (--data-dir is not used: each
        /// iteration makes its own data directory here.)
        #[arg(long, default_value = "./aiostore-crashtest")]
        dir: PathBuf,
        /// Keep every iteration's directory.
        #[arg(long)]
        keep: bool,
        /// Stop the child cleanly instead of killing it: every check must
        /// pass then, WAL or not (a check of the harness itself).
        #[arg(long)]
        clean_stop: bool,
        /// The child writes every buffer back before each commit, which
        /// keeps what committed without a WAL: the kills must pass (a
        /// check of the harness; insert, update, copy, delete and
        /// checkpoint only).
        #[arg(long)]
        flush_before_commit: bool,
    },
    /// The child of `crashtest`: runs the workload's sessions on
    /// --data-dir and reports each transaction on standard output.
    #[command(hide = true)]
    CrashtestChild {
        /// Comma-separated components (insert, update, copy, delete,
        /// vacuum, ddl, checkpoint).
        #[arg(long)]
        components: String,
        #[arg(long)]
        seed: u64,
        /// Directory for scratch files (COPY's CSV files).
        #[arg(long)]
        files: PathBuf,
        #[arg(long)]
        flush_before_commit: bool,
    },
}

/// `aiostore bench …`: the benchmark and where its files go.
#[derive(Args)]
struct BenchCommand {
    /// Directory for the benchmark's files (tables, the rawio file): made
    /// for the run and removed at the end unless --keep. A directory kept
    /// by an earlier --keep run is reused, so large tables are built once.
    #[arg(long, global = true, default_value = "./aiostore-bench")]
    dir: PathBuf,
    /// Keep the benchmark's files for the next run.
    #[arg(long, global = true)]
    keep: bool,
    #[command(subcommand)]
    which: Bench,
}

#[derive(Subcommand)]
enum Bench {
    /// Raw read throughput of each I/O method against pread and fio.
    Rawio(RawioArgs),
    /// Cold prewarm of a relation larger than shared_buffers through a read
    /// stream, per method, io_combine_limit 1/16 and
    /// effective_io_concurrency 0/16, against fio; then cached stream vs
    /// plain buffer lookups.
    Prewarm {
        /// Relation size in MiB (default: 4 × shared_buffers).
        #[arg(long)]
        size_mib: Option<u64>,
        /// Comma-separated: sync, worker, io_uring.
        #[arg(long, value_delimiter = ',', default_value = "sync,worker,io_uring")]
        methods: Vec<String>,
        #[arg(long)]
        no_fio: bool,
        #[arg(long)]
        json: bool,
    },
    /// A stream over blocks i..i+3 for i in 1..=10000 against the same
    /// distinct blocks once each, cold.
    RepeatedBlocks {
        /// Comma-separated: sync, worker, io_uring.
        #[arg(long, value_delimiter = ',', default_value = "sync,worker,io_uring")]
        methods: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// Cold SELECT count(*) over a table at least 8 × shared_buffers, per
    /// method and io_combine_limit 1/16, direct I/O, against fio.
    Seqscan {
        /// Table size in MiB (built with the SQL generator in seqscan/ in
        /// the benchmark directory; reused when kept with --keep).
        #[arg(long, default_value_t = 2048)]
        size_mib: u64,
        /// Comma-separated: sync, worker, io_uring.
        #[arg(long, value_delimiter = ',', default_value = "sync,worker,io_uring")]
        methods: Vec<String>,
        #[arg(long)]
        no_fio: bool,
        #[arg(long)]
        json: bool,
    },
    /// COPY of the seqscan table out to CSV, then loading that CSV per
    /// method, WAL-logged (into a table created before) and skipping the
    /// WAL (table created in the load's transaction): seconds, MiB/s of
    /// CSV, rows/s, WAL MiB.
    Copy {
        /// Table size in MiB (the seqscan benchmark's table).
        #[arg(long, default_value_t = 2048)]
        size_mib: u64,
        /// Comma-separated: sync, worker, io_uring.
        #[arg(long, value_delimiter = ',', default_value = "sync,worker,io_uring")]
        methods: Vec<String>,
        /// Then run this script on the same CSV, `benches/pg_copy.sh`
        /// (PostgreSQL's COPY, both ways, as many runs; root), and print
        /// the ratios of the medians.
        #[arg(long)]
        pg_script: Option<PathBuf>,
        /// Loads per method and WAL mode.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
        runs: u32,
        /// io_direct of the loads: data (the table written with O_DIRECT)
        /// or off (through the page cache, as PostgreSQL writes).
        #[arg(long, default_value = "data", value_parser = ["data", "off"])]
        io_direct: String,
        #[arg(long)]
        json: bool,
    },
    /// The reference thread's parallel COPY experiment: sessions each
    /// COPYing a CSV into its own table for a fixed time, then CHECKPOINT,
    /// per method, buffered and direct I/O: COPY tps with its spread, the
    /// checkpoint's time and MiB/s against fio's sequential direct write,
    /// and a cold VACUUM that dirties every page of a table; against
    /// PostgreSQL 15's same load (`--pg-script
    /// benches/pg_copy_checkpoint.sh`); a verdict per target. Each
    /// configuration's data directory is removed after it.
    CopyCheckpoint {
        /// Sessions, each COPYing into its own table.
        #[arg(long, default_value_t = 8)]
        sessions: usize,
        /// Seconds of load per configuration (the COPYs in flight then
        /// finish).
        #[arg(long, default_value_t = 60.0)]
        seconds: f64,
        /// Size of the CSV each COPY loads, in MiB (kept in
        /// copy-checkpoint/ of the benchmark directory; reused with --keep).
        #[arg(long, default_value_t = 90)]
        csv_mib: u64,
        /// Comma-separated: sync, worker, io_uring.
        #[arg(long, value_delimiter = ',', default_value = "sync,worker,io_uring")]
        methods: Vec<String>,
        /// Comma-separated io_direct values: off (buffered), data (direct).
        #[arg(long, value_delimiter = ',', default_value = "off,data")]
        io_direct: Vec<String>,
        /// shared_buffers of every configuration (and PostgreSQL's), in MiB.
        #[arg(long, default_value_t = 8192)]
        shared_buffers_mib: u64,
        /// Size of the VACUUM's table in MiB; 0 skips the VACUUM.
        #[arg(long, default_value_t = 1024)]
        vacuum_mib: u64,
        /// Do not run fio's sequential direct write (the checkpoint's
        /// target is then not measured).
        #[arg(long)]
        no_fio: bool,
        /// Seconds of fio's write.
        #[arg(long, default_value_t = 5.0)]
        fio_seconds: f64,
        /// Then run this script, `benches/pg_copy_checkpoint.sh`
        /// (PostgreSQL 15, the same load; root), and judge the tps target.
        #[arg(long)]
        pg_script: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// CREATE INDEX on the integer column a and the text column b of the
    /// seqscan benchmark's table (5 M rows), several runs each, against
    /// PostgreSQL 15's CREATE INDEX of the same data in the same run
    /// (`--pg-script benches/pg_index_build.sh`): per-run ms, medians and
    /// the ratio ours / PostgreSQL's.
    IndexBuild {
        /// Rows of the table (built in index-build/ in the benchmark
        /// directory; reused when kept with --keep).
        #[arg(long, default_value_t = 5_000_000)]
        rows: u64,
        /// CREATE INDEX runs per column and cache state, on each system.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
        runs: u32,
        /// The sort's memory on both systems (PostgreSQL's default).
        #[arg(long, default_value = "64MB")]
        maintenance_work_mem: String,
        /// Comma-separated: warm (the table read once before, through the
        /// page cache), cold (page cache dropped before each run; root).
        #[arg(long, value_delimiter = ',', default_value = "warm")]
        cache: Vec<String>,
        /// The I/O method (default: the io_method setting).
        #[arg(long)]
        method: Option<String>,
        /// Then run this script, `benches/pg_index_build.sh` (PostgreSQL
        /// 15 on the same data, as many runs; root), and print the
        /// ratios of the medians.
        #[arg(long)]
        pg_script: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// The reference thread's OLTP query, cold: SELECT count(b) FROM
    /// btree_test WHERE a = k with k = 1, 10, …, 100 000 rows matching,
    /// spread over the table, forced to a bitmap heap scan, a plain index
    /// scan and (largest k only) a sequential scan, against PostgreSQL 15's
    /// same query on the same data in the same run (`--pg-script
    /// benches/pg_bitmapscan.sh`), runs alternating: per-run ms, medians
    /// and the ratio ours / PostgreSQL's. Root (drops the page cache).
    Bitmapscan {
        /// Rows of the table (built in bitmapscan/ in the benchmark
        /// directory; reused when kept with --keep).
        #[arg(long, default_value_t = 5_000_000)]
        rows: u64,
        /// Cold runs per matching count and method, on each system.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
        runs: u32,
        /// Comma-separated matching-row counts (of 1,10,100,1000,10000,100000).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "1,10,100,1000,10000,100000"
        )]
        matching: Vec<u64>,
        /// Comma-separated: bitmap, index, seq (seq for the largest count only).
        #[arg(long, value_delimiter = ',', default_value = "bitmap,index,seq")]
        scan: Vec<String>,
        /// The I/O method (default: the io_method setting).
        #[arg(long)]
        method: Option<String>,
        /// After each of our runs, run this script,
        /// `benches/pg_bitmapscan.sh` (PostgreSQL 15 on the same data,
        /// the same case; root), and print the ratios of the medians.
        #[arg(long)]
        pg_script: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// The reference thread's index prefetching experiments (issue 12),
    /// cold: tables (a integer, b text) WITH (fillfactor = 20) of random,
    /// sequential and cyclic data where each value matches 1, 10, …,
    /// 100 000 rows; WHERE a = v and WHERE a >= v ORDER BY a LIMIT m read
    /// by a bitmap scan, an index scan without and with prefetching
    /// (enable_indexscan_prefetch) and a sequential scan, on the local
    /// disk and with added I/O latency; against PostgreSQL 15 on the same
    /// data in the same run (`--pg-script benches/pg_indexscan.sh`), runs
    /// alternating: per-run figures, medians, the ratios the issue's
    /// targets name and a verdict per target.
    Indexscan {
        /// Rows of each table (built in indexscan/ in the benchmark
        /// directory when its cases come; kept for the next run with
        /// --keep, else dropped when its cases are done).
        #[arg(long, default_value_t = 5_000_000)]
        rows: u64,
        /// Cold runs per case and scan, on each system (ours three times
        /// as many where every scan of the case takes under 20 ms; a run
        /// over 20 s is not repeated).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
        runs: u32,
        /// Comma-separated: random, sequential, cyclic.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "random,sequential,cyclic"
        )]
        datasets: Vec<String>,
        /// Comma-separated rows each value matches (the reference's
        /// 1,10,100,1000,10000,100000; each at most half of --rows).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "1,10,100,1000,10000,100000"
        )]
        matching: Vec<u64>,
        /// Comma-separated: point (WHERE a = v), order (WHERE a >= v
        /// ORDER BY a LIMIT m).
        #[arg(long, value_delimiter = ',', default_value = "point,order")]
        queries: Vec<String>,
        /// Comma-separated: bitmap, index-noprefetch, index-prefetch, seq
        /// (seq at the largest count and no added latency only).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "bitmap,index-noprefetch,index-prefetch,seq"
        )]
        scans: Vec<String>,
        /// Comma-separated added I/O latencies in µs (debug_io_latency_us;
        /// PostgreSQL runs at 0 only).
        #[arg(long, value_delimiter = ',', default_value = "0,500")]
        latency_us: Vec<u64>,
        /// The I/O method (default: the io_method setting).
        #[arg(long)]
        method: Option<String>,
        /// After each of our runs at 0 µs, run this script,
        /// `benches/pg_indexscan.sh` (PostgreSQL 15 on the same data, the
        /// same case; root), and print the ratios.
        #[arg(long)]
        pg_script: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Single-row INSERT transactions from 1, 8 and 32 sessions for a
    /// fixed time, buffered and direct WAL, with and without 500 µs of
    /// added I/O latency: commits/s, WAL writes/s and syncs/s (group
    /// commit).
    Commit {
        /// Comma-separated session counts.
        #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
        sessions: Vec<usize>,
        /// Seconds per case.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// Comma-separated added I/O latencies in µs (debug_io_latency_us).
        #[arg(long, value_delimiter = ',', default_value = "0,500")]
        latency_us: Vec<u64>,
        /// Comma-separated wal_io_concurrency values: 1 is one WAL write
        /// in flight at a time (PostgreSQL's way). Only where a completed
        /// write is durable (direct WAL, or wal_sync_method open_*); the
        /// others run at 1.
        #[arg(long, value_delimiter = ',', default_value = "1,8")]
        wal_io_concurrency: Vec<usize>,
        /// Times through every case, one case after the other each round,
        /// so that a change in the device's speed falls on every case;
        /// the ratios are of the medians.
        #[arg(long, default_value_t = 1)]
        rounds: usize,
        /// The I/O method (default: the io_method setting).
        #[arg(long)]
        method: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Crash recovery of random row updates to a table 4 × shared_buffers:
    /// replay time with recovery_prefetch off and on, per method, with and
    /// without 500 µs of added I/O latency, cold (direct I/O on data).
    Recovery {
        /// shared_buffers of every database of the benchmark, in MiB.
        #[arg(long, default_value_t = 16)]
        shared_buffers_mib: u64,
        /// Table size in MiB (default: 4 × shared_buffers).
        #[arg(long)]
        table_mib: Option<u64>,
        /// WAL of random updates to replay, in MiB, counted from the first
        /// update (so the page images of each page's first change after
        /// the checkpoint are part of it). The reference case is
        /// 1024; the default keeps the run well under a minute.
        #[arg(long, default_value_t = 64)]
        wal_mib: u64,
        /// Comma-separated added I/O latencies in µs (debug_io_latency_us).
        #[arg(long, value_delimiter = ',', default_value = "0,500")]
        latency_us: Vec<u64>,
        /// Comma-separated: sync, worker, io_uring.
        #[arg(long, value_delimiter = ',', default_value = "worker,io_uring")]
        methods: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// Random blocks of a buffered relation with the page cache dropped,
    /// effective_io_concurrency 0 vs 16 per method (the sync method's
    /// posix_fadvise advice). Needs root.
    Advice {
        /// Relation size in MiB.
        #[arg(long, default_value_t = 1024)]
        size_mib: u64,
        /// Comma-separated: sync, worker, io_uring.
        #[arg(long, value_delimiter = ',', default_value = "sync,worker,io_uring")]
        methods: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// Page checksum speed on one core, against a C baseline.
    Checksum {
        /// Size of the in-memory buffer to checksum, in MiB. The default
        /// fits in cache and measures computation; 64 or more measures
        /// memory bandwidth as well.
        #[arg(long, default_value_t = 1)]
        mib: usize,
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
        /// Skip building and running the C baseline.
        #[arg(long)]
        no_c: bool,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
struct RawioArgs {
    /// File to read (created if missing, and then left in place). Default:
    /// rawio.dat in the benchmark directory (--dir).
    #[arg(long)]
    file: Option<PathBuf>,
    #[arg(long, default_value_t = 2048)]
    size_mib: u64,
    /// Seconds per case.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Buffered instead of direct I/O (a warm page cache unless
    /// --drop-caches).
    #[arg(long)]
    buffered: bool,
    /// With --buffered, drop the page cache before each case (root only).
    #[arg(long)]
    drop_caches: bool,
    /// Comma-separated: pread, sync, worker, io_uring.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "pread,sync,worker,io_uring"
    )]
    methods: Vec<String>,
    /// Comma-separated: random (8 KiB), sequential (128 KiB).
    #[arg(long, value_delimiter = ',', default_value = "random,sequential")]
    patterns: Vec<String>,
    /// Comma-separated queue depths.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,128")]
    depths: Vec<usize>,
    /// Do not run fio for the ratios.
    #[arg(long)]
    no_fio: bool,
    /// One JSON object per case instead of a table.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, String> {
    // Only a missing data directory means "no configuration file"; one
    // that cannot be looked at is reported rather than skipped.
    let data_dir = cli
        .data_dir
        .try_exists()
        .map_err(|e| {
            format!(
                "could not look at the data directory \"{}\" (for its {}): {e}",
                cli.data_dir.display(),
                aiostore::config::CONFIG_FILE_NAME
            )
        })?
        .then_some(cli.data_dir.as_path());
    let mut settings = Settings::load(data_dir, &cli.settings).map_err(|e| e.to_string())?;
    let mut out = std::io::stdout().lock();
    match cli.command {
        Command::Show { name } if name != "all" => {
            note_io_uring_fallback(&mut settings);
            let (def, value, source) = settings
                .rows()
                .into_iter()
                .find(|(d, _, _)| d.name.eq_ignore_ascii_case(&name))
                .ok_or_else(|| {
                    format!("unrecognized setting \"{name}\"; `aiostore show all` lists the valid names")
                })?;
            writeln!(
                out,
                "{} = {}  ({source}; {})",
                def.name,
                aiostore::config::format_value(def, value),
                def.description
            )
            .map_err(|e| e.to_string())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Settings | Command::Show { .. } => {
            note_io_uring_fallback(&mut settings);
            let rows: Vec<[String; 4]> = settings
                .rows()
                .into_iter()
                .map(|(def, value, source)| {
                    [
                        def.name.to_string(),
                        aiostore::config::format_value(def, value),
                        source.to_string(),
                        def.description.to_string(),
                    ]
                })
                .collect();
            let width = |i: usize| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0);
            let (w0, w1, w2) = (width(0), width(1), width(2));
            writeln!(
                out,
                "{:<w0$}  {:<w1$}  {:<w2$}  description",
                "name", "value", "source"
            )
            .map_err(|e| e.to_string())?;
            for [name, value, source, description] in rows {
                writeln!(
                    out,
                    "{name:<w0$}  {value:<w1$}  {source:<w2$}  {description}"
                )
                .map_err(|e| e.to_string())?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::VerifyFile { file, first_block } => {
            let aio = Aio::start(&AioConfig {
                max_sessions: 1,
                ..AioConfig::from_settings(&settings)
            })
            .map_err(|e| e.to_string())?;
            let report = aiostore::tools::verify_file(
                &aio,
                &file,
                first_block,
                settings.io_direct().data,
                settings.effective_io_concurrency().max(1),
                settings.io_combine_limit(),
            )
            .map_err(|e| e.to_string())?;
            if report.without_checksums() {
                writeln!(
                    out,
                    "no page carries a checksum: the cluster was initialised without data checksums; headers verified only\npages={} failures=0",
                    report.pages
                )
                .map_err(|e| e.to_string())?;
                return Ok(ExitCode::SUCCESS);
            }
            for failure in &report.failures {
                writeln!(out, "{failure}").map_err(|e| e.to_string())?;
            }
            writeln!(
                out,
                "pages={} failures={}",
                report.pages,
                report.failures.len()
            )
            .map_err(|e| e.to_string())?;
            Ok(if report.failures.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Init { ref pwfile } => {
            // Read first: a missing or empty file leaves no directory
            // behind.
            let password = pwfile.as_deref().map(read_pwfile).transpose()?;
            Database::init(&cli.data_dir).map_err(|e| e.to_string())?;
            // Opening adds the owner's role (catalog/roles.rs).
            let db = Database::open(&cli.data_dir, &cli.settings).map_err(|e| e.to_string())?;
            let role = aiostore::catalog::current_role_name();
            match password {
                Some(password) => {
                    let mut s = db.session().map_err(|e| e.to_string())?;
                    let statement = format!(
                        "ALTER ROLE \"{}\" PASSWORD '{}'",
                        role.replace('"', "\"\""),
                        password.replace('\'', "''")
                    );
                    aiostore::sql::execute(&mut s, &statement).map_err(|e| e.to_string())?;
                }
                None => eprintln!(
                    "warning: enabling \"trust\" authentication for local connections\n\
                     hint: role \"{role}\" has no password, so it can connect only over the Unix socket; \
                     give it one with --pwfile next time, or ALTER ROLE \"{role}\" PASSWORD '…'"
                ),
            }
            drop(db);
            writeln!(
                out,
                "created data directory \"{}\" with superuser role \"{role}\"",
                cli.data_dir.display()
            )
            .map_err(|e| e.to_string())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Sql { ref text, csv } => {
            let how = if csv {
                shell::Output::Csv
            } else {
                shell::Output::Table
            };
            let ok = match Database::open(&cli.data_dir, &cli.settings) {
                Ok(db) => shell::run_sql(&db, text, how)?,
                // A server holds the directory: its session runs the text.
                Err(e @ aiostore::database::DbError::InUse { .. }) => {
                    let (mut client, _) = connect_to_server(&cli.data_dir, e)?;
                    shell::run_sql_remote(&mut client, text, how)?
                }
                Err(e) => return Err(e.to_string()),
            };
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Serve => {
            let command_line = serve_command_line(&cli)?;
            let db = Database::open(&cli.data_dir, &command_line).map_err(|e| e.to_string())?;
            aiostore::server::serve(Arc::clone(&db), |h| {
                let places: Vec<String> = h
                    .tcp_addresses
                    .iter()
                    .map(|a| a.to_string())
                    .chain(h.unix_sockets.iter().map(|p| p.display().to_string()))
                    .collect();
                eprintln!(
                    "aiostore serve: database \"{}\" of {} ready for connections on {}",
                    aiostore::server::DATABASE_NAME,
                    cli.data_dir.display(),
                    places.join(", ")
                );
            })
            .map_err(|e| e.to_string())?;
            eprintln!("aiostore serve: shutting down");
            drop(db);
            Ok(ExitCode::SUCCESS)
        }
        Command::Shell => {
            match Database::open(&cli.data_dir, &cli.settings) {
                Ok(db) => shell::shell(&db)?,
                // A server holds the directory: the prompt is its session's.
                Err(e @ aiostore::database::DbError::InUse { .. }) => {
                    let (client, file) = connect_to_server(&cli.data_dir, e)?;
                    shell::shell_remote(client, &cli.data_dir, &file)?
                }
                Err(e) => return Err(e.to_string()),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Prewarm { ref table, json } => {
            let (db, mut s, rel) = open_table(&cli, table)?;
            let limits = s.stream_limits();
            let report = aiostore::tools::prewarm(&mut s.buf, rel, Fork::Main, limits)
                .map_err(|e| e.to_string())?;
            print_stream_report(&mut out, "prewarm", table, &report, json)?;
            if !json {
                writeln!(
                    out,
                    "read {table} into this command's buffer pool, which ends with the command; to keep it warm for queries run SELECT prewarm('{table}') in aiostore shell"
                )
                .map_err(|e| e.to_string())?;
            }
            drop((s, db));
            Ok(ExitCode::SUCCESS)
        }
        Command::Evict { ref table, json } => {
            let (db, mut s, rel) = open_table(&cli, table)?;
            let outcome = s.buf.evict_relation(rel).map_err(|e| e.to_string())?;
            let line = if json {
                serde_json::json!({"table": table, "evicted": outcome.evicted, "skipped": outcome.skipped})
                    .to_string()
            } else {
                format!(
                    "evict {table}: evicted={} skipped={} (skipped buffers are pinned)\nthis command's pool starts empty and ends with it, so this only shows the mechanism; in aiostore shell, SELECT prewarm('{table}') and the pool live on between statements",
                    outcome.evicted, outcome.skipped
                )
            };
            writeln!(out, "{line}").map_err(|e| e.to_string())?;
            drop((s, db));
            Ok(ExitCode::SUCCESS)
        }
        Command::ReadBlocks {
            ref table,
            ref blocks,
            json,
        } => {
            let blocks = parse_block_list(blocks)?;
            let (db, mut s, rel) = open_table(&cli, table)?;
            let nblocks = s
                .buf
                .pool()
                .relation(rel)
                .nblocks(Fork::Main)
                .map_err(|e| e.to_string())?;
            let blocks = blocks.expand(table, nblocks).map_err(|e| e.to_string())?;
            let limits = s.stream_limits();
            let report = aiostore::tools::read_stream_for_blocks(
                &mut s.buf,
                rel,
                Fork::Main,
                &blocks,
                limits,
            )
            .map_err(|e| e.to_string())?;
            print_stream_report(&mut out, "read-blocks", table, &report, json)?;
            drop((s, db));
            Ok(ExitCode::SUCCESS)
        }
        Command::Demo {
            ref dir,
            keep,
            ref chart,
            quick,
        } => {
            let chart = chart.clone().unwrap_or_else(|| dir.with_extension("svg"));
            run_demo(dir, keep, &chart, quick, &settings, &mut out)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Waldump {
            start,
            end,
            limit,
            stats,
            ref path,
        } => {
            let opts = aiostore::tools::waldump::WaldumpOptions {
                path: path.clone().unwrap_or_else(|| cli.data_dir.clone()),
                start,
                end,
                limit,
                stats,
            };
            match aiostore::tools::waldump::run(&opts, &mut out) {
                Ok(_) => Ok(ExitCode::SUCCESS),
                // `aiostore waldump | head`: the reader has seen enough.
                Err(aiostore::tools::waldump::WaldumpError::Output(e))
                    if e.kind() == std::io::ErrorKind::BrokenPipe =>
                {
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => Err(e.to_string()),
            }
        }
        Command::Bench(bench) => run_bench(bench, &settings, &mut out),
        Command::Crashtest {
            workload,
            iterations,
            seed,
            kill_after_ms,
            ref dir,
            keep,
            clean_stop,
            flush_before_commit,
        } => {
            let exe = std::env::current_exe()
                .map_err(|e| format!("could not find this program to run as the child: {e}"))?;
            let seed = seed.unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
            let opts = aiostore::crashtest::Options {
                workload,
                iterations,
                seed,
                kill_after: kill_after_ms,
                dir: dir.clone(),
                keep,
                clean_stop,
                flush_before_commit,
                settings: cli.settings.clone(),
                exe,
            };
            let report = aiostore::crashtest::run(&opts, &mut out)?;
            Ok(if report.failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::CrashtestChild {
            ref components,
            seed,
            ref files,
            flush_before_commit,
        } => {
            // The child's sessions write its protocol lines to standard
            // output from their own threads: the lock must go first.
            drop(out);
            let opts = aiostore::crashtest::child::ChildOptions {
                data_dir: cli.data_dir.clone(),
                settings: cli.settings.clone(),
                components: aiostore::crashtest::child::parse_components(components)?,
                seed,
                files: files.clone(),
                flush_before_commit,
            };
            aiostore::crashtest::child::run(&opts, Box::new(std::io::stdout()))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A comma-separated option's values, each one of the choices `parse`
/// knows; an unknown one is refused naming the option and the choices.
fn parse_choices<T>(
    values: &[String],
    option: &str,
    parse: impl Fn(&str) -> Option<T>,
    choices: &str,
) -> Result<Vec<T>, String> {
    values
        .iter()
        .map(|v| {
            parse(v.trim())
                .ok_or_else(|| format!("unknown value \"{v}\" for {option}; use {choices}"))
        })
        .collect()
}

/// `--workload`, with the choices in the error.
fn parse_workload(text: &str) -> Result<Workload, String> {
    Workload::from_name(text)
}

/// `--kill-after-ms MIN..MAX`.
fn parse_kill_window(text: &str) -> Result<KillWindow, String> {
    KillWindow::parse(text)
}

/// Runs one benchmark: checksum in memory, the others with their files in
/// a directory of their own ([`in_bench_dir`]).
fn run_bench(
    bench: BenchCommand,
    settings: &Settings,
    out: &mut dyn Write,
) -> Result<ExitCode, String> {
    let (bench_dir, keep) = (bench.dir.as_path(), bench.keep);
    match bench.which {
        Bench::Checksum {
            mib,
            seconds,
            no_c,
            json,
        } => {
            let r = aiostore::bench::checksum::run(mib, seconds, !no_c)?;
            let line = if json {
                serde_json::to_string(&r).map_err(|e| e.to_string())?
            } else {
                format!(
                    "aiostore bench checksum: mib={} pages={} seconds={:.2}\nrust gb_s={:.2}  c(-O3 -march=native) gb_s={}  rust/c={}",
                    r.mib,
                    r.pages,
                    r.seconds,
                    r.gb_s,
                    r.c_gb_s.map_or("-".into(), |c| format!("{c:.2}")),
                    r.vs_c.map_or("-".into(), |v| format!("{v:.2}")),
                )
            };
            writeln!(out, "{line}").map_err(|e| e.to_string())?;
            Ok(ExitCode::SUCCESS)
        }
        Bench::Rawio(args) => in_bench_dir(bench_dir, keep, |dir| {
            let options = rawio_options(dir, settings, &args)?;
            rawio::run(&options, args.json, out).map(drop)
        }),
        Bench::Prewarm {
            size_mib,
            methods,
            no_fio,
            json,
        } => in_bench_dir(bench_dir, keep, |dir| {
            let mut options = stream_bench_options(dir, settings, &methods)?;
            options.relation_mib = size_mib.unwrap_or(options.relation_mib);
            options.fio = !no_fio;
            aiostore::bench::streams::run_prewarm(&options, json, out).map(drop)
        }),
        Bench::RepeatedBlocks { methods, json } => in_bench_dir(bench_dir, keep, |dir| {
            let options = stream_bench_options(dir, settings, &methods)?;
            aiostore::bench::streams::run_repeated(&options, json, out).map(drop)
        }),
        Bench::Seqscan {
            size_mib,
            methods,
            no_fio,
            json,
        } => in_bench_dir(bench_dir, keep, |dir| {
            let options = seqscan_options(dir, settings, size_mib, &methods, !no_fio)?;
            aiostore::bench::seqscan::run_seqscan(&options, json, out).map(drop)
        }),
        Bench::Copy {
            size_mib,
            methods,
            pg_script,
            runs,
            io_direct,
            json,
        } => in_bench_dir(bench_dir, keep, |dir| {
            let options = seqscan_options(dir, settings, size_mib, &methods, false)?;
            let copy = aiostore::bench::seqscan::CopyBenchOptions {
                pg_script,
                runs,
                io_direct: if io_direct == "off" { "off" } else { "data" },
            };
            aiostore::bench::seqscan::run_copy(&options, &copy, json, out).map(drop)
        }),
        Bench::CopyCheckpoint {
            sessions,
            seconds,
            csv_mib,
            methods,
            io_direct,
            shared_buffers_mib,
            vacuum_mib,
            no_fio,
            fio_seconds,
            pg_script,
            json,
        } => {
            use aiostore::bench::copy_checkpoint::{self, DataIo};
            // Every choice is checked before the directory is made.
            let data_io = parse_choices(&io_direct, "--io-direct", DataIo::parse, "off or data")?;
            let methods = usable_methods(parse_methods(&methods)?)?;
            in_bench_dir(bench_dir, keep, |dir| {
                let options = copy_checkpoint::CopyCheckpointOptions {
                    dir: dir.join("copy-checkpoint"),
                    methods,
                    data_io,
                    sessions,
                    seconds,
                    csv_mib,
                    shared_buffers_mib,
                    vacuum_mib,
                    fio: !no_fio,
                    fio_seconds,
                    pg_script,
                    extra_settings: forwarded_settings(settings),
                };
                copy_checkpoint::run(&options, json, out).map(drop)
            })
        }
        Bench::IndexBuild {
            rows,
            runs,
            maintenance_work_mem,
            cache,
            method,
            pg_script,
            json,
        } => in_bench_dir(bench_dir, keep, |dir| {
            let caches = cache
                .iter()
                .map(|c| {
                    aiostore::bench::index_build::Cache::parse(c.trim()).ok_or_else(|| {
                        format!("unknown cache state \"{c}\" for --cache; use warm or cold")
                    })
                })
                .collect::<Result<_, _>>()?;
            let options = aiostore::bench::index_build::IndexBuildOptions {
                dir: dir.join("index-build"),
                rows,
                runs,
                maintenance_work_mem,
                caches,
                method: bench_method(method, settings)?,
                shared_buffers: settings.shared_buffers() as u32,
                pg_script,
                extra_settings: forwarded_settings(settings),
            };
            aiostore::bench::index_build::run(&options, json, out).map(drop)
        }),
        Bench::Bitmapscan {
            rows,
            runs,
            matching,
            scan,
            method,
            pg_script,
            json,
        } => in_bench_dir(bench_dir, keep, |dir| {
            let methods = scan
                .iter()
                .map(|m| {
                    aiostore::bench::bitmapscan::ScanMethod::parse(m.trim()).ok_or_else(|| {
                        format!("unknown scan \"{m}\" for --scan; use bitmap, index or seq")
                    })
                })
                .collect::<Result<_, _>>()?;
            let options = aiostore::bench::bitmapscan::BitmapscanOptions {
                dir: dir.join("bitmapscan"),
                rows,
                runs,
                methods,
                matching,
                method: bench_method(method, settings)?,
                shared_buffers: settings.shared_buffers() as u32,
                pg_script,
                extra_settings: forwarded_settings(settings),
            };
            aiostore::bench::bitmapscan::run(&options, json, out).map(drop)
        }),
        Bench::Indexscan {
            rows,
            runs,
            datasets,
            matching,
            queries,
            scans,
            latency_us,
            method,
            pg_script,
            json,
        } => {
            use aiostore::bench::indexscan::{self, Dataset, Query, Scan};
            // Every choice is checked before the directory is made.
            let datasets = parse_choices(
                &datasets,
                "--datasets",
                Dataset::parse,
                "random, sequential or cyclic",
            )?;
            let queries = parse_choices(&queries, "--queries", Query::parse, "point or order")?;
            let scans = parse_choices(
                &scans,
                "--scans",
                Scan::parse,
                "bitmap, index-noprefetch, index-prefetch or seq",
            )?;
            let method = bench_method(method, settings)?;
            in_bench_dir(bench_dir, keep, |dir| {
                let options = indexscan::IndexscanOptions {
                    db: indexscan::IndexscanDb {
                        dir: dir.join("indexscan"),
                        method,
                        shared_buffers: settings.shared_buffers() as u32,
                        extra_settings: forwarded_settings(settings),
                    },
                    rows,
                    runs,
                    datasets,
                    matching,
                    queries,
                    scans,
                    latencies_us: latency_us,
                    pg_script,
                    keep_tables: keep,
                };
                indexscan::run(&options, json, out).map(drop)
            })
        }
        Bench::Commit {
            sessions,
            seconds,
            latency_us,
            wal_io_concurrency,
            rounds,
            method,
            json,
        } => in_bench_dir(bench_dir, keep, |dir| {
            if sessions.is_empty() || sessions.contains(&0) || seconds.is_nan() || seconds <= 0.0 {
                return Err("bench commit needs session counts of at least 1 (--sessions 1,8,32) and --seconds above 0".into());
            }
            if rounds == 0 {
                return Err("bench commit needs --rounds of at least 1".into());
            }
            if wal_io_concurrency.is_empty()
                || wal_io_concurrency.iter().any(|&c| !(1..=64).contains(&c))
            {
                return Err(
                    "bench commit needs --wal-io-concurrency values from 1 to 64 (1,8)".into(),
                );
            }
            let options = aiostore::bench::commit::CommitOptions {
                dir: dir.join("commit"),
                method: bench_method(method, settings)?,
                sessions,
                seconds,
                latencies_us: latency_us,
                direct: vec![false, true],
                concurrency: wal_io_concurrency,
                rounds,
                extra_settings: forwarded_settings(settings)
                    .into_iter()
                    .filter(|s| {
                        !s.starts_with("max_sessions=") && !s.starts_with("wal_io_concurrency=")
                    })
                    .collect(),
            };
            std::fs::create_dir_all(&options.dir).map_err(|e| e.to_string())?;
            aiostore::bench::commit::run(&options, json, out).map(drop)
        }),
        Bench::Recovery {
            shared_buffers_mib,
            table_mib,
            wal_mib,
            latency_us,
            methods,
            json,
        } => in_bench_dir(bench_dir, keep, |dir| {
            let options = aiostore::bench::recovery::RecoveryOptions {
                dir: dir.join("recovery"),
                methods: usable_methods(parse_methods(&methods)?)?,
                shared_buffers_mib,
                table_mib: table_mib.unwrap_or(4 * shared_buffers_mib),
                wal_mib,
                latencies_us: latency_us,
                extra_settings: forwarded_settings(settings)
                    .into_iter()
                    .chain(
                        ["maintenance_io_concurrency", "io_combine_limit"]
                            .iter()
                            .filter_map(|name| non_default_setting(settings, name)),
                    )
                    .collect(),
            };
            std::fs::create_dir_all(&options.dir).map_err(|e| e.to_string())?;
            aiostore::bench::recovery::run(&options, json, out).map(drop)
        }),
        Bench::Advice {
            size_mib,
            methods,
            json,
        } => in_bench_dir(bench_dir, keep, |dir| {
            let mut options = stream_bench_options(dir, settings, &methods)?;
            options.relation_mib = size_mib;
            aiostore::bench::streams::run_advice(&options, json, out).map(drop)
        }),
    }
}

/// Runs `bench` with its files in the benchmark directory `path`, saying
/// where they go before and what became of them after.
fn in_bench_dir(
    path: &std::path::Path,
    keep: bool,
    bench: impl FnOnce(&std::path::Path) -> Result<(), String>,
) -> Result<ExitCode, String> {
    let scratch = ScratchDir::open_bench(path, keep)?;
    eprintln!("{}", scratch.describe());
    bench(&scratch.path)?;
    eprintln!("{}", scratch.finish());
    Ok(ExitCode::SUCCESS)
}

/// Opens the data directory and finds `table`'s relation.
fn open_table(
    cli: &Cli,
    table: &str,
) -> Result<(Arc<Database>, aiostore::database::Session, u32), String> {
    let db = Database::open(&cli.data_dir, &cli.settings).map_err(|e| e.to_string())?;
    let rel = db
        .catalog()
        .table(table)
        .map_err(|e| e.to_string())?
        .heap
        .rel;
    let s = db.session().map_err(|e| e.to_string())?;
    Ok((db, s, rel))
}

fn print_stream_report(
    out: &mut dyn Write,
    what: &str,
    table: &str,
    r: &aiostore::tools::StreamReport,
    json: bool,
) -> Result<(), String> {
    let line = if json {
        let mut v = serde_json::to_value(r).map_err(|e| e.to_string())?;
        v["table"] = table.into();
        v.to_string()
    } else {
        format!(
            "{what} {table}: blocks={} hits={} reads={} ios={} foreign_ios={} waits={} ms={:.3}",
            r.blocks,
            r.hits,
            r.reads,
            r.ios,
            r.foreign_ios,
            r.waits,
            r.seconds * 1e3
        )
    };
    writeln!(out, "{line}").map_err(|e| e.to_string())
}

/// Parses `0,2,2,4` and `10-20` (inclusive); checked against the
/// relation's size before it is expanded.
fn parse_block_list(text: &str) -> Result<aiostore::tools::BlockList, String> {
    aiostore::tools::parse_block_list(text).map_err(|e| e.to_string())
}

/// `--methods` of the benchmarks that run the AIO methods only.
fn parse_methods(methods: &[String]) -> Result<Vec<aiostore::config::IoMethod>, String> {
    methods
        .iter()
        .map(|m| match ReadMethod::parse(m.trim()) {
            Some(ReadMethod::Aio(method)) => Ok(method),
            _ => Err(format!(
                "unknown method \"{m}\" for --methods; use sync, worker or io_uring"
            )),
        })
        .collect()
}

/// `--method` of the benchmarks that run one AIO method: that one, else
/// the io_method setting; refused where the kernel refuses io_uring
/// ([`usable_methods`]).
fn bench_method(
    method: Option<String>,
    settings: &Settings,
) -> Result<aiostore::config::IoMethod, String> {
    let method = match method {
        Some(m) => parse_methods(&[m])?[0],
        None => settings.io_method(),
    };
    Ok(usable_methods(vec![method])?[0])
}

fn stream_bench_options(
    bench_dir: &std::path::Path,
    settings: &Settings,
    methods: &[String],
) -> Result<aiostore::bench::streams::StreamBenchOptions, String> {
    let methods = usable_methods(parse_methods(methods)?)?;
    let shared_buffers = settings.shared_buffers() as u32;
    Ok(aiostore::bench::streams::StreamBenchOptions {
        dir: bench_dir.join("base"),
        methods,
        shared_buffers,
        relation_mib: 4 * ((shared_buffers as u64 * 8192) >> 20),
        fio: true,
        io_workers: settings.io_workers(),
    })
}

fn rawio_options(
    bench_dir: &std::path::Path,
    settings: &Settings,
    args: &RawioArgs,
) -> Result<RawioOptions, String> {
    let methods = args
        .methods
        .iter()
        .map(|m| {
            ReadMethod::parse(m.trim()).ok_or_else(|| {
                format!("unknown method \"{m}\" for --methods; use pread, sync, worker or io_uring")
            })
        })
        .collect::<Result<_, _>>()?;
    let methods = usable_methods(methods)?;
    let patterns = args
        .patterns
        .iter()
        .map(|p| match p.trim() {
            "random" => Ok(Pattern::Random),
            "sequential" => Ok(Pattern::Sequential),
            other => Err(format!(
                "unknown pattern \"{other}\" for --patterns; use random or sequential"
            )),
        })
        .collect::<Result<_, _>>()?;
    if let Some(&bad) = args.depths.iter().find(|&&d| d == 0 || d > 1024) {
        return Err(format!("--depths: {bad} is out of range; use 1 to 1024"));
    }
    if args.size_mib == 0 {
        return Err("--size-mib must be at least 1".into());
    }
    if !args.seconds.is_finite() || args.seconds <= 0.0 {
        return Err("--seconds must be positive".into());
    }
    Ok(RawioOptions {
        file: args
            .file
            .clone()
            .unwrap_or_else(|| bench_dir.join("rawio.dat")),
        size_mib: args.size_mib,
        seconds: args.seconds,
        direct: !args.buffered,
        drop_caches: args.drop_caches,
        methods,
        patterns,
        depths: args.depths.clone(),
        fio: !args.no_fio,
        io_workers: settings.io_workers(),
        debug_io_latency_us: settings.debug_io_latency_us(),
    })
}

/// The seqscan table's benchmarks (seqscan, copy) share its directory.
fn seqscan_options(
    bench_dir: &std::path::Path,
    settings: &Settings,
    size_mib: u64,
    methods: &[String],
    fio: bool,
) -> Result<aiostore::bench::seqscan::SeqscanOptions, String> {
    Ok(aiostore::bench::seqscan::SeqscanOptions {
        dir: bench_dir.join("seqscan"),
        methods: usable_methods(parse_methods(methods)?)?,
        size_mib,
        shared_buffers: settings.shared_buffers() as u32,
        fio,
        extra_settings: forwarded_settings(settings),
    })
}

/// Start-up settings the user chose (`-c`, the configuration file) that
/// the databases of `bench seqscan`, `bench copy` and the demo take over.
/// The others are each case's own: io_method, io_combine_limit and
/// shared_buffers are what the cases vary or size, and io_direct=data is
/// what makes every case cold.
const FORWARDED_SETTINGS: [&str; 3] = ["io_workers", "max_sessions", "io_max_concurrency"];

/// [`FORWARDED_SETTINGS`] not at their defaults, as `name=value`.
fn forwarded_settings(settings: &Settings) -> Vec<String> {
    FORWARDED_SETTINGS
        .iter()
        .filter_map(|name| non_default_setting(settings, name))
        .collect()
}

/// Setting `name` as `name=value` if the user set it.
fn non_default_setting(settings: &Settings, name: &str) -> Option<String> {
    settings
        .rows()
        .into_iter()
        .find(|(def, _, source)| {
            def.name == name && !matches!(source, aiostore::config::Source::Default)
        })
        .map(|(def, value, _)| {
            format!(
                "{}={}",
                def.name,
                aiostore::config::format_value(def, value)
            )
        })
}

/// Marks a directory as aiostore bench's, so that a later run may reuse
/// and remove it.
const BENCH_DIR_MARKER: &str = "AIOSTORE_BENCH_DIR";
/// The same for the demo's directory.
const DEMO_DIR_MARKER: &str = "AIOSTORE_DEMO_DIR";

/// A directory this command uses for its files, removed at the end (also
/// on an error) unless it is to be kept. Only what this command made is
/// removed: the directory itself if it created it (or an earlier bench
/// run did, see [`BENCH_DIR_MARKER`]), else only the files put in it.
struct ScratchDir {
    path: PathBuf,
    keep: bool,
    /// Whether the directory itself is ours to remove; false for an empty
    /// directory the user had made.
    ours: bool,
    /// Set by [`ScratchDir::finish`], so that drop does not remove twice.
    finished: bool,
    /// An earlier run left it (with --keep), and its files are reused.
    reused: bool,
}

impl ScratchDir {
    /// Uses `path`, which must not exist or be empty, so that removing
    /// it at the end cannot remove anything the user had.
    fn create(path: &std::path::Path, keep: bool, what: &str) -> Result<ScratchDir, String> {
        let is_empty_dir = std::fs::read_dir(path).is_ok_and(|mut d| d.next().is_none());
        let existed = path.exists();
        if existed && !is_empty_dir {
            return Err(format!(
                "{what} directory \"{}\" already exists and is not empty; remove it or choose another with --dir",
                path.display()
            ));
        }
        std::fs::create_dir_all(path).map_err(|e| {
            format!(
                "could not create the {what} directory \"{}\": {e}",
                path.display()
            )
        })?;
        Ok(ScratchDir {
            path: path.to_path_buf(),
            keep,
            ours: !existed,
            finished: false,
            reused: false,
        })
    }

    /// The benchmark directory ([`ScratchDir::open_marked`]), marked at
    /// once.
    fn open_bench(path: &std::path::Path, keep: bool) -> Result<ScratchDir, String> {
        let dir = ScratchDir::open_marked(path, keep, "benchmark", BENCH_DIR_MARKER)?;
        dir.mark(BENCH_DIR_MARKER, "aiostore bench")?;
        Ok(dir)
    }

    /// A directory a command keeps its files in: reused if it holds the
    /// file `marker` (an earlier run left it with --keep), else made if
    /// missing or empty. Anything else is refused, because the directory
    /// is removed at the end. The caller marks a new one
    /// ([`ScratchDir::mark`]) once what it put there may be reused.
    fn open_marked(
        path: &std::path::Path,
        keep: bool,
        what: &str,
        marker: &str,
    ) -> Result<ScratchDir, String> {
        if path.join(marker).exists() {
            return Ok(ScratchDir {
                path: path.to_path_buf(),
                keep,
                ours: true,
                finished: false,
                reused: true,
            });
        }
        ScratchDir::create(path, keep, what)
    }

    /// Writes the file `marker` that lets a later run of `maker` reuse the
    /// directory.
    fn mark(&self, marker: &str, maker: &str) -> Result<(), String> {
        let marker = self.path.join(marker);
        std::fs::write(
            &marker,
            format!("Made by {maker}; removed at the end of a run without --keep.\n"),
        )
        .map_err(|e| format!("could not write {}: {e}", marker.display()))
    }

    /// Where the files go, for the output.
    fn describe(&self) -> String {
        format!(
            "benchmark files in \"{}\" ({})",
            self.path.display(),
            if self.keep {
                "kept at the end: --keep"
            } else {
                "removed at the end; --keep keeps them for the next run"
            }
        )
    }

    /// Removes what this command made: the directory, or the files in a
    /// directory the user had.
    fn remove(&self) -> std::io::Result<()> {
        if self.ours {
            return std::fs::remove_dir_all(&self.path);
        }
        for entry in std::fs::read_dir(&self.path)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                std::fs::remove_dir_all(entry.path())?;
            } else {
                std::fs::remove_file(entry.path())?;
            }
        }
        Ok(())
    }

    /// Keeps or removes the directory and says which, for the output;
    /// "removed" only once it is gone.
    fn finish(mut self) -> String {
        self.finished = true;
        let path = self.path.display();
        if self.keep {
            return format!("kept \"{path}\" (--keep); remove it yourself");
        }
        match self.remove() {
            Ok(()) if self.ours => format!("removed \"{path}\" (--keep keeps it)"),
            Ok(()) => format!(
                "removed the files in \"{path}\" (--keep keeps them); the directory was there before, so it stays"
            ),
            Err(e) => format!("could not remove \"{path}\": {e}; remove it yourself"),
        }
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if !self.keep && !self.finished {
            if let Err(e) = self.remove() {
                eprintln!("warning: could not remove \"{}\": {e}", self.path.display());
            }
        }
    }
}

/// `aiostore demo`.
fn run_demo(
    dir: &std::path::Path,
    keep: bool,
    chart: &std::path::Path,
    quick: bool,
    settings: &Settings,
    out: &mut dyn Write,
) -> Result<(), String> {
    use aiostore::bench::demo;
    let started = std::time::Instant::now();
    let scratch = ScratchDir::open_marked(dir, keep, "demo", DEMO_DIR_MARKER)?;
    let mut opts = if quick {
        demo::DemoOptions::quick(scratch.path.clone())
    } else {
        demo::DemoOptions::standard(scratch.path.clone())
    };
    opts.extra_settings = forwarded_settings(settings);
    let io = |e: std::io::Error| e.to_string();
    writeln!(
        out,
        "aiostore demo in \"{}\": shared_buffers={} MiB, table {} MiB ({}× shared_buffers){}; every run is cold (database reopened with O_DIRECT, so neither the pool nor the page cache holds the table)",
        scratch.path.display(),
        opts.pool_mib(),
        opts.table_mib(),
        demo::TABLE_TIMES_POOL,
        opts.extra_settings
            .iter()
            .map(|s| format!(", {s}"))
            .collect::<String>()
    )
    .map_err(io)?;
    writeln!(
        out,
        "{}",
        if scratch.reused {
            "reusing the demo database an earlier --keep run built: its tables are not built again"
        } else if keep {
            "building the demo database (kept with --keep: the next run reuses it and skips the build)"
        } else {
            "building the demo database (run with --keep to keep it: the next run then skips the build)"
        }
    )
    .map_err(io)?;
    out.flush().map_err(io)?;
    let report = demo::run(&opts, &mut std::io::stderr())?;
    // The database is whole now (it was made in the empty directory, which
    // the marker could not share before): a later run may reuse it.
    scratch.mark(DEMO_DIR_MARKER, "aiostore demo")?;
    writeln!(out).map_err(io)?;
    demo::print_report(out, &report).map_err(io)?;
    demo::write_chart(chart, &report)?;
    writeln!(out, "chart: {}", chart.display()).map_err(io)?;
    let fate = scratch.finish();
    writeln!(
        out,
        "{fate}; total {:.1} s\nfull benchmarks (larger tables, fio and ratios): aiostore bench seqscan | prewarm | repeated-blocks | rawio | copy | advice | index-build | bitmapscan | indexscan | copy-checkpoint; see docs/benchmarks.md",
        started.elapsed().as_secs_f64()
    )
    .map_err(io)?;
    Ok(())
}

/// `methods` without io_uring where the kernel refuses it, the note on
/// standard error (see [`aiostore::bench::usable_methods`]).
fn usable_methods<M: aiostore::bench::OnIoMethod>(methods: Vec<M>) -> Result<Vec<M>, String> {
    aiostore::bench::usable_methods(methods, &mut std::io::stderr())
}

/// With io_method=io_uring, asks the kernel (one ring, see
/// [`aiostore::aio::probe_io_uring`]) so that `aiostore settings` and `show`
/// say what a database would use: `worker` and why, where io_uring is
/// refused. Never fails: listing the settings must work even where the
/// probe cannot.
fn note_io_uring_fallback(settings: &mut Settings) {
    if settings.io_method() != aiostore::config::IoMethod::IoUring {
        return;
    }
    if let Some(reason) = aiostore::aio::probe_io_uring() {
        let note = aiostore::database::fallback_note(&reason);
        if let Err(e) =
            settings.record_fallback("io_method", aiostore::config::IoMethod::Worker.name(), note)
        {
            eprintln!("note: io_uring is not usable here ({reason}); {e}");
        }
    }
}

/// A connection to the server that holds data directory `dir` (its lock
/// refused us with `in_use`), as the OS user's role, which `init` made
/// and the server's Unix socket trusts (catalog/roles.rs). Without the
/// server's file (a server that is starting or stopping, or a process
/// that is no server) the lock's own error stands.
fn connect_to_server(
    dir: &std::path::Path,
    in_use: aiostore::database::DbError,
) -> Result<
    (
        aiostore::server::client::Client,
        aiostore::server::client::ServerFile,
    ),
    String,
> {
    let Some(file) = aiostore::server::client::ServerFile::read(dir) else {
        return Err(in_use.to_string());
    };
    let user = aiostore::catalog::current_role_name();
    let client =
        aiostore::server::client::Client::connect(&file, &user).map_err(|e| e.to_string())?;
    Ok((client, file))
}

/// The settings `aiostore serve` opens the database with: the command
/// line's, and room for max_connections sessions where max_sessions was
/// left at its default (a smaller value set on purpose is refused, with
/// the fix, when the server starts).
fn serve_command_line(cli: &Cli) -> Result<Vec<String>, String> {
    let settings = Settings::load(Some(&cli.data_dir), &cli.settings).map_err(|e| e.to_string())?;
    let mut command_line = cli.settings.clone();
    let needed = settings.max_connections() + aiostore::server::RESERVED_SESSIONS;
    if settings.is_default("max_sessions") && settings.max_sessions() < needed {
        command_line.push(format!("max_sessions={needed}"));
    }
    Ok(command_line)
}

/// The password in `--pwfile`'s first line (initdb's rule), without its
/// line ending.
fn read_pwfile(path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("could not read password file \"{}\": {e}", path.display()))?;
    let line = text.lines().next().unwrap_or_default();
    if line.is_empty() {
        return Err(format!("password file \"{}\" is empty", path.display()));
    }
    Ok(line.to_string())
}
