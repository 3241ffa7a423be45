//! Settings: names, defaults, ranges, and where each value came from.
//!
//! Every setting is described once, in [`SETTINGS`]. A value can come from
//! four places, later ones overriding earlier ones:
//!
//! 1. the built-in default;
//! 2. `aiostore.toml` in the data directory (`name = value` lines);
//! 3. the environment, as `AIOSTORE_<NAME>` (upper case);
//! 4. the command line, as `-c name=value` (repeatable, like `postgres -c`).
//!
//! A bad name or value is refused with an error that names the setting and
//! its valid range. `aiostore settings` prints every value with its source.
//!
//! This module knows nothing about the rest of the engine; the layers below
//! read typed values through the accessors at the bottom of this file.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// Size of a data block in bytes; memory settings given as plain numbers are
/// counted in these units, as in PostgreSQL.
pub const BLOCK_SIZE_BYTES: u64 = 8192;

/// Buffers each session must be able to pin (shared_buffers /
/// max_sessions). Every statement we have runs with 2 (measured: cold
/// scans, UPDATE, DELETE, VACUUM, COPY in and out); 4 leaves room for a
/// statement that holds one more page, and costs at most 4 × 8 kB per
/// session.
pub const MIN_PINS_PER_SESSION: usize = 4;

/// Largest `join_collapse_limit`: the planner's join-order search costs
/// up to 2^n × n joins for n items, about 49 000 at 12, already a
/// noticeable share of a short query's time (PostgreSQL searches 12
/// items or more genetically instead, `geqo_threshold`; we join more
/// than the limit in the order written).
pub const JOIN_COLLAPSE_LIMIT_MAX: i64 = 12;

/// Name of the configuration file inside the data directory.
pub const CONFIG_FILE_NAME: &str = "aiostore.toml";

/// Prefix of environment variables that set a setting.
pub const ENV_PREFIX: &str = "AIOSTORE_";

/// Errors from reading or checking settings.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("unrecognized setting \"{name}\" (from {origin}); `aiostore settings` lists the valid names")]
    UnknownName { name: String, origin: Source },
    #[error("invalid value \"{value}\" for setting \"{name}\" (from {origin}): {expected}")]
    InvalidValue {
        name: String,
        value: String,
        origin: Source,
        expected: String,
    },
    #[error("setting \"{name}\" can only be set at start-up (in aiostore.toml, as AIOSTORE_{env}, or with -c); SET cannot change it", env = name.to_uppercase())]
    StartupOnly { name: &'static str },
    #[error("-c expects name=value, got \"{arg}\"")]
    MalformedArgument { arg: String },
    #[error("could not read {path}: {reason}")]
    ConfigFile { path: PathBuf, reason: String },
    #[error("setting \"{name}\" = {value} conflicts with {other}: {fix}")]
    Conflict {
        name: &'static str,
        value: String,
        other: String,
        fix: String,
    },
}

impl ConfigError {
    /// PostgreSQL's SQLSTATE for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            // PostgreSQL's "unrecognized configuration parameter".
            ConfigError::UnknownName { .. } => "42704",
            ConfigError::InvalidValue { .. } | ConfigError::Conflict { .. } => "22023",
            ConfigError::StartupOnly { .. } => "55P02", // cant_change_runtime_param
            ConfigError::MalformedArgument { .. } => "42601",
            ConfigError::ConfigFile { .. } => "F0000", // config_file_error
        }
    }
}

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Default,
    ConfigFile(PathBuf),
    Environment(String),
    CommandLine,
    /// `SET` in the session showing it.
    Session,
    /// The value asked for (from `from`) could not be used, so the engine
    /// uses another; `note` says why (io_uring refused by the kernel).
    Fallback {
        from: Box<Source>,
        note: String,
    },
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => write!(f, "default"),
            Source::ConfigFile(path) => write!(f, "configuration file {}", path.display()),
            Source::Environment(var) => write!(f, "environment variable {var}"),
            Source::CommandLine => write!(f, "command line"),
            Source::Session => write!(f, "SET in this session"),
            Source::Fallback { from, note } => write!(f, "{from}; {note}"),
        }
    }
}

/// The kind of value a setting holds, with its valid range.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A whole number in `min..=max`; `-1` may be allowed as "auto" via `min`.
    Integer {
        min: i64,
        max: i64,
    },
    /// An amount of memory, stored in 8 KiB blocks; accepts plain block
    /// counts or a number with a unit (`kB`, `MB`, `GB`).
    Blocks {
        min: i64,
        max: i64,
    },
    /// A duration in `min..=max` of `unit`, stored in that unit; accepts
    /// a plain number of it or a number with a unit (`us`, `ms`, `s`,
    /// `min`, `h`, `d`), as PostgreSQL's time settings do.
    Time {
        unit: TimeUnit,
        min: i64,
        max: i64,
    },
    Bool,
    Enum(&'static [&'static str]),
    /// A number with a fraction in `min..=max` (the planner's costs).
    Real {
        min: f64,
        max: f64,
    },
    /// Free text (addresses, directories), at most this many bytes.
    Text {
        max_len: usize,
    },
}

/// The unit a time setting is stored in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    Microseconds,
    Milliseconds,
    Seconds,
}

impl TimeUnit {
    fn micros(self) -> i64 {
        match self {
            TimeUnit::Microseconds => 1,
            TimeUnit::Milliseconds => 1_000,
            TimeUnit::Seconds => 1_000_000,
        }
    }
}

/// The units a time setting accepts, in microseconds, largest first (the
/// order SHOW picks one in).
const TIME_UNITS: [(&str, i64); 6] = [
    ("d", 86_400_000_000),
    ("h", 3_600_000_000),
    ("min", 60_000_000),
    ("s", 1_000_000),
    ("ms", 1_000),
    ("us", 1),
];

/// Which join methods the planner may choose (`enable_hashjoin`,
/// `enable_mergejoin`, `enable_nestloop`). With all off, as in
/// PostgreSQL, it still joins somehow: the choice is only steered away
/// from the disabled ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JoinMethods {
    pub hash: bool,
    pub merge: bool,
    pub nested_loop: bool,
}

/// Which ways of reading a table the planner may choose. With both off,
/// as in PostgreSQL, it still reads the table somehow: the choice is only
/// steered away from the disabled ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanMethods {
    pub index: bool,
    pub index_only: bool,
    pub seq: bool,
    pub bitmap: bool,
}

/// The planner's cost parameters, in PostgreSQL's units (a sequential
/// page read is 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Costs {
    pub seq_page: f64,
    pub random_page: f64,
    pub cpu_tuple: f64,
    pub cpu_index_tuple: f64,
    pub cpu_operator: f64,
    /// `effective_cache_size` in pages.
    pub effective_cache_pages: f64,
    /// `work_mem` in bytes: where sorts and hash tables are expected to
    /// spill.
    pub work_mem_bytes: f64,
}

impl Costs {
    /// PostgreSQL's defaults (and ours), with `effective_cache_size` of
    /// 4 GiB and `work_mem` of 4 MiB: what the planner's unit tests cost
    /// with.
    pub const DEFAULTS: Costs = Costs {
        seq_page: 1.0,
        random_page: 4.0,
        cpu_tuple: 0.01,
        cpu_index_tuple: 0.005,
        cpu_operator: 0.0025,
        effective_cache_pages: 524_288.0,
        work_mem_bytes: 4.0 * 1024.0 * 1024.0,
    };
}

/// When a setting may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// Read once when the database starts.
    Startup,
    /// May differ per session (and later be changed by `SET`).
    Session,
}

/// The description of one setting.
#[derive(Debug)]
pub struct SettingDef {
    pub name: &'static str,
    pub default: &'static str,
    pub kind: Kind,
    pub context: Context,
    pub description: &'static str,
}

/// Every setting this build knows. Names and defaults follow PostgreSQL
/// where it has the same setting.
pub static SETTINGS: &[SettingDef] = &[
    SettingDef {
        name: "io_method",
        default: "io_uring",
        kind: Kind::Enum(&["sync", "worker", "io_uring"]),
        context: Context::Startup,
        description: "How asynchronous I/O is executed; io_uring falls back to worker where the kernel refuses it",
    },
    SettingDef {
        name: "io_workers",
        default: "16",
        kind: Kind::Integer { min: 1, max: 32 },
        context: Context::Startup,
        description: "Number of I/O worker threads for io_method=worker",
    },
    SettingDef {
        name: "io_max_concurrency",
        default: "-1",
        kind: Kind::Integer { min: -1, max: 1024 },
        context: Context::Startup,
        description: "I/O handles per session; -1 means min(64, shared_buffers / max_sessions)",
    },
    SettingDef {
        name: "io_combine_limit",
        default: "16",
        kind: Kind::Blocks { min: 1, max: 128 },
        context: Context::Session,
        description: "Largest read or write combined into one I/O, in blocks (at most io_max_combine_limit)",
    },
    SettingDef {
        name: "io_max_combine_limit",
        default: "16",
        kind: Kind::Blocks { min: 1, max: 128 },
        context: Context::Startup,
        description: "Upper bound of io_combine_limit; sizes the iovec room of every handle",
    },
    SettingDef {
        name: "effective_io_concurrency",
        default: "16",
        kind: Kind::Integer { min: 0, max: 1000 },
        context: Context::Session,
        description: "I/Os a read stream keeps in flight; 0 reads synchronously",
    },
    SettingDef {
        name: "maintenance_io_concurrency",
        default: "16",
        kind: Kind::Integer { min: 0, max: 1000 },
        context: Context::Session,
        description: "Like effective_io_concurrency, for maintenance work",
    },
    SettingDef {
        name: "work_mem",
        default: "4MB",
        kind: Kind::Blocks {
            min: 8,
            max: 1 << 28,
        },
        context: Context::Session,
        description: "Memory a sort or a hash aggregation uses before it spills to temporary files in the data directory's tmp/",
    },
    SettingDef {
        name: "maintenance_work_mem",
        default: "64MB",
        kind: Kind::Blocks {
            min: 128,
            max: 1 << 28,
        },
        context: Context::Session,
        description: "Memory CREATE INDEX sorts its keys in before it spills to temporary files in the data directory's tmp/",
    },
    SettingDef {
        name: "io_direct",
        default: "off",
        kind: Kind::Enum(&["off", "data", "wal", "data+wal"]),
        context: Context::Startup,
        description: "Which files are opened with O_DIRECT, bypassing the kernel page cache",
    },
    SettingDef {
        name: "shared_buffers",
        default: "128MB",
        kind: Kind::Blocks {
            min: 16,
            max: 1 << 30,
        },
        context: Context::Startup,
        description: "Size of the shared buffer pool",
    },
    SettingDef {
        name: "max_sessions",
        default: "64",
        kind: Kind::Integer { min: 1, max: 4096 },
        context: Context::Startup,
        description: "Most sessions (threads with their own AIO slot) open at once",
    },
    SettingDef {
        name: "listen_addresses",
        default: "localhost",
        kind: Kind::Text { max_len: 1024 },
        context: Context::Startup,
        description: "TCP addresses `aiostore serve` listens on, comma-separated (localhost, an IP address, or * for all); empty for the Unix socket alone",
    },
    SettingDef {
        name: "port",
        default: "5432",
        kind: Kind::Integer { min: 0, max: 65535 },
        context: Context::Startup,
        description: "TCP port of `aiostore serve`, also in its Unix socket's name (.s.PGSQL.<port>); 0: a free one the system picks",
    },
    SettingDef {
        name: "unix_socket_directories",
        default: "/tmp",
        kind: Kind::Text { max_len: 1024 },
        context: Context::Startup,
        description: "Directories `aiostore serve` makes its Unix socket in, comma-separated; empty for none",
    },
    SettingDef {
        name: "unix_socket_authentication",
        default: "trust",
        kind: Kind::Enum(&["trust", "scram-sha-256"]),
        context: Context::Startup,
        description: "How `aiostore serve` authenticates connections over its Unix socket: trust (any role with LOGIN; the socket directory's permissions are the guard, as PostgreSQL's initdb default) or scram-sha-256 (the role's password, as over TCP)",
    },
    SettingDef {
        name: "ssl",
        default: "off",
        kind: Kind::Bool,
        context: Context::Startup,
        description: "Whether `aiostore serve` accepts TLS on TCP connections (an SSLRequest is answered 'S' and the TLS handshake follows), with ssl_cert_file and ssl_key_file",
    },
    SettingDef {
        name: "ssl_cert_file",
        default: "server.crt",
        kind: Kind::Text { max_len: 1024 },
        context: Context::Startup,
        description: "The server's TLS certificate (PEM; the chain after it, if any), relative to the data directory unless absolute",
    },
    SettingDef {
        name: "ssl_key_file",
        default: "server.key",
        kind: Kind::Text { max_len: 1024 },
        context: Context::Startup,
        description: "The TLS certificate's private key (PEM, unencrypted; readable by its owner alone), relative to the data directory unless absolute",
    },
    SettingDef {
        name: "max_connections",
        default: "100",
        kind: Kind::Integer { min: 1, max: 4000 },
        context: Context::Startup,
        description: "Most client connections `aiostore serve` accepts at once; each is a session, so max_sessions must leave room for them",
    },
    SettingDef {
        name: "deadlock_timeout",
        default: "1000",
        kind: Kind::Time {
            unit: TimeUnit::Milliseconds,
            min: 1,
            max: i32::MAX as i64,
        },
        context: Context::Session,
        description: "Milliseconds a transaction waits for another (a row, a key) before it checks for a deadlock",
    },
    SettingDef {
        name: "lock_timeout",
        default: "0",
        kind: Kind::Time {
            unit: TimeUnit::Milliseconds,
            min: 0,
            max: i32::MAX as i64,
        },
        context: Context::Session,
        description: "Milliseconds a transaction waits for another (a row, a key) before it gives up; 0: as long as the other runs",
    },
    SettingDef {
        name: "statement_timeout",
        default: "0",
        kind: Kind::Time {
            unit: TimeUnit::Milliseconds,
            min: 0,
            max: i32::MAX as i64,
        },
        context: Context::Session,
        description: "Milliseconds a statement may run before it is canceled; 0: no limit",
    },
    SettingDef {
        name: "idle_in_transaction_session_timeout",
        default: "0",
        kind: Kind::Time {
            unit: TimeUnit::Milliseconds,
            min: 0,
            max: i32::MAX as i64,
        },
        context: Context::Session,
        description: "Milliseconds a server connection may sit idle inside a transaction block before the server ends it (and the transaction); 0: no limit",
    },
    SettingDef {
        name: "zero_damaged_pages",
        default: "off",
        kind: Kind::Bool,
        context: Context::Session,
        description: "Zero pages that fail verification, with a warning, instead of failing the read",
    },
    SettingDef {
        name: "enable_hashjoin",
        default: "on",
        kind: Kind::Bool,
        context: Context::Session,
        description: "Lets the planner use hash joins; off makes them cost disable_cost more (chosen only where every join method is off), to compare the methods",
    },
    SettingDef {
        name: "enable_mergejoin",
        default: "on",
        kind: Kind::Bool,
        context: Context::Session,
        description: "Lets the planner use merge joins (both inputs in join-key order, sorted or read from an index); off makes them cost disable_cost more, to compare the methods",
    },
    SettingDef {
        name: "enable_indexscan",
        default: "on",
        kind: Kind::Bool,
        context: Context::Session,
        description: "Lets the planner read tables through their B-tree indexes; off scans them sequentially, to compare the two",
    },
    SettingDef {
        name: "enable_indexonlyscan",
        default: "on",
        kind: Kind::Bool,
        context: Context::Session,
        description: "Lets the planner answer from an index's keys alone where they hold every column a query reads, reading the table only for pages the visibility map does not vouch for; off fetches every row from the table, to compare the two",
    },
    SettingDef {
        name: "enable_bitmapscan",
        default: "on",
        kind: Kind::Bool,
        context: Context::Session,
        description: "Lets the planner read tables through bitmap scans (one or more B-tree indexes, the heap read in block order); off uses a plain index scan or a sequential scan instead, to compare them",
    },
    SettingDef {
        name: "enable_indexscan_prefetch",
        default: "on",
        kind: Kind::Bool,
        context: Context::Session,
        description: "Lets index scans and index-only scans read the table's pages ahead of need through a read stream, once a scan has touched a few pages; off reads each page when its first row is wanted, to compare the two",
    },
    SettingDef {
        name: "enable_seqscan",
        default: "on",
        kind: Kind::Bool,
        context: Context::Session,
        description: "Lets the planner scan tables sequentially where an index could be used instead; a table with no usable index is still scanned",
    },
    SettingDef {
        name: "seq_page_cost",
        default: "1",
        kind: Kind::Real { min: 0.0, max: 1.0e10 },
        context: Context::Session,
        description: "The planner's estimate of the cost of a page read as part of a sequential run (PostgreSQL's unit)",
    },
    SettingDef {
        name: "random_page_cost",
        default: "4",
        kind: Kind::Real { min: 0.0, max: 1.0e10 },
        context: Context::Session,
        description: "The planner's estimate of the cost of a page read out of sequence; lower it towards seq_page_cost for storage where random reads cost little more",
    },
    SettingDef {
        name: "cpu_tuple_cost",
        default: "0.01",
        kind: Kind::Real { min: 0.0, max: 1.0e10 },
        context: Context::Session,
        description: "The planner's estimate of the cost of processing one row",
    },
    SettingDef {
        name: "cpu_index_tuple_cost",
        default: "0.005",
        kind: Kind::Real { min: 0.0, max: 1.0e10 },
        context: Context::Session,
        description: "The planner's estimate of the cost of processing one index entry",
    },
    SettingDef {
        name: "cpu_operator_cost",
        default: "0.0025",
        kind: Kind::Real { min: 0.0, max: 1.0e10 },
        context: Context::Session,
        description: "The planner's estimate of the cost of evaluating one operator or function",
    },
    SettingDef {
        name: "effective_cache_size",
        default: "4GB",
        kind: Kind::Blocks {
            min: 1,
            max: i32::MAX as i64,
        },
        context: Context::Session,
        description: "The planner's assumption of the cache (buffer pool and kernel) a query's repeated page reads find: index scans that revisit pages cost less below it",
    },
    SettingDef {
        name: "enable_nestloop",
        default: "on",
        kind: Kind::Bool,
        context: Context::Session,
        description: "Lets the planner use nested loops, plain or searching the inner table's index by each outer row; off makes them cost disable_cost more (a join without an equality has no other method)",
    },
    SettingDef {
        name: "join_collapse_limit",
        default: "8",
        kind: Kind::Integer {
            min: 1,
            max: JOIN_COLLAPSE_LIMIT_MAX,
        },
        context: Context::Session,
        description: "FROM items (up to the first LEFT JOIN) whose join order the planner searches for the cheapest; beyond that many, or at 1, they join in the order written",
    },
    SettingDef {
        name: "ignore_checksum_failure",
        default: "off",
        kind: Kind::Bool,
        context: Context::Session,
        description: "Warn about and use pages whose checksum does not match",
    },
    SettingDef {
        name: "wal_buffers",
        default: "16MB",
        kind: Kind::Blocks {
            min: 32,
            max: 1 << 17,
        },
        context: Context::Startup,
        description: "Size of the in-memory WAL ring records are inserted into before they are written",
    },
    SettingDef {
        name: "wal_sync_method",
        default: "auto",
        kind: Kind::Enum(&["auto", "fdatasync", "fsync", "open_datasync", "open_sync"]),
        context: Context::Startup,
        description: "How WAL writes are made durable: fdatasync or fsync after writing, or segments opened O_DSYNC (open_datasync) or O_SYNC (open_sync) so that a completed write is durable; auto is open_datasync when io_direct includes wal, else fdatasync",
    },
    SettingDef {
        name: "wal_io_concurrency",
        default: "8",
        kind: Kind::Integer { min: 1, max: 64 },
        context: Context::Startup,
        description: "Most WAL writes in flight at once when a completed write is durable (wal_sync_method open_datasync or open_sync, the default with io_direct=wal); 1 writes one at a time, as PostgreSQL does. Writes synced afterwards always go one at a time",
    },
    SettingDef {
        name: "synchronous_commit",
        default: "on",
        kind: Kind::Bool,
        context: Context::Session,
        description: "A commit waits until its WAL record is durable; off returns at once and may lose the last moments of commits on a crash (never corrupting)",
    },
    SettingDef {
        name: "full_page_writes",
        default: "on",
        kind: Kind::Bool,
        context: Context::Startup,
        description: "Log a page's whole image at its first change after each checkpoint, so that replay repairs a page torn by a crash",
    },
    SettingDef {
        name: "wal_writer_delay",
        default: "200",
        kind: Kind::Time { unit: TimeUnit::Milliseconds, min: 1, max: 10_000 },
        context: Context::Startup,
        description: "Milliseconds between the background flushes of WAL that commits did not flush (synchronous_commit = off)",
    },
    SettingDef {
        name: "checkpoint_timeout",
        default: "300",
        kind: Kind::Time { unit: TimeUnit::Seconds, min: 1, max: 86_400 },
        context: Context::Startup,
        description: "Seconds between automatic checkpoints",
    },
    SettingDef {
        name: "checkpoint_completion_target",
        default: "0.9",
        kind: Kind::Real { min: 0.0, max: 1.0 },
        context: Context::Startup,
        description: "Fraction of checkpoint_timeout (or of the WAL before the next size-triggered checkpoint) over which an automatic checkpoint spreads its writes; CHECKPOINT and shutdown write at full speed",
    },
    SettingDef {
        name: "bgwriter_delay",
        default: "200",
        kind: Kind::Time { unit: TimeUnit::Milliseconds, min: 10, max: 10_000 },
        context: Context::Startup,
        description: "Milliseconds between rounds of the background writer, which writes dirty buffers just ahead of the clock sweep so that sessions find clean ones",
    },
    SettingDef {
        name: "bgwriter_lru_maxpages",
        default: "100",
        kind: Kind::Integer {
            min: 0,
            max: 1_073_741_823,
        },
        context: Context::Startup,
        description: "Most buffers the background writer writes in one round; 0 turns it off",
    },
    SettingDef {
        name: "bgwriter_lru_multiplier",
        default: "2",
        kind: Kind::Real { min: 0.0, max: 10.0 },
        context: Context::Startup,
        description: "How many clean buffers the background writer keeps ahead of the clock sweep, as a multiple of the buffers sessions took in recent rounds",
    },
    SettingDef {
        name: "max_wal_size",
        default: "1GB",
        kind: Kind::Blocks {
            min: 4096,
            max: 1 << 30,
        },
        context: Context::Startup,
        description: "WAL written since the last checkpoint that starts a checkpoint (at half of it), bounding replay after a crash",
    },
    SettingDef {
        name: "recovery_prefetch",
        default: "on",
        kind: Kind::Bool,
        context: Context::Startup,
        description: "Read the data pages that upcoming WAL records touch ahead through a read stream during crash recovery (sized by maintenance_io_concurrency)",
    },
    SettingDef {
        name: "debug_io_latency_us",
        default: "0",
        kind: Kind::Time {
            unit: TimeUnit::Microseconds,
            min: 0,
            max: 10_000_000,
        },
        context: Context::Startup,
        description: "Adds this many microseconds to every data I/O, to simulate high-latency storage",
    },
];

/// A checked value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Integer(i64),
    Bool(bool),
    Enum(&'static str),
    Real(f64),
    Text(String),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Integer(n) => write!(f, "{n}"),
            Value::Bool(b) => write!(f, "{}", if *b { "on" } else { "off" }),
            Value::Enum(s) => write!(f, "{s}"),
            Value::Real(x) => write!(f, "{x}"),
            Value::Text(t) => write!(f, "{t}"),
        }
    }
}

/// A value as `SHOW` and `aiostore settings` show it: memory sizes with the largest
/// unit that divides them (`128MB`, `128kB`), as PostgreSQL's SHOW does;
/// other values as they are.
pub fn format_value(def: &SettingDef, value: &Value) -> String {
    match (def.kind, value) {
        (Kind::Blocks { .. }, Value::Integer(blocks)) if *blocks >= 0 => {
            format_blocks(*blocks as u64)
        }
        (Kind::Time { unit, .. }, Value::Integer(n)) => format_time(*n, unit),
        _ => value.to_string(),
    }
}

/// A number of blocks as a size with the largest unit that divides it.
fn format_blocks(blocks: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GB"), (1 << 20, "MB"), (1 << 10, "kB")];
    let bytes = blocks * BLOCK_SIZE_BYTES;
    UNITS
        .iter()
        .find(|(unit, _)| bytes.is_multiple_of(*unit))
        .map_or_else(
            || format!("{bytes}B"),
            |(unit, name)| format!("{}{name}", bytes / unit),
        )
}

fn find(name: &str) -> Option<&'static SettingDef> {
    SETTINGS.iter().find(|d| d.name == name)
}

fn expected(def: &SettingDef) -> String {
    match def.kind {
        Kind::Integer { min, max } => format!("expected an integer from {min} to {max}"),
        Kind::Blocks { min, max } => format!(
            "expected a number of 8kB blocks from {min} to {max}, or a size with unit kB, MB or GB in that range"
        ),
        Kind::Time { unit, min, max } => {
            let base = TIME_UNITS
                .iter()
                .find(|(_, micros)| *micros == unit.micros())
                .map_or("us", |(name, _)| name);
            format!(
                "expected a time from {min} to {max} {base}, as a number of {base} or with unit us, ms, s, min, h or d"
            )
        }
        Kind::Bool => "expected on or off (true/false, yes/no, 1/0)".to_string(),
        Kind::Enum(values) => format!("expected one of: {}", values.join(", ")),
        Kind::Real { min, max } => format!("expected a number from {min} to {max}"),
        Kind::Text { max_len } => format!("expected text of at most {max_len} bytes"),
    }
}

/// Parses `raw` for the setting `def`. Returns a description of the valid
/// range on failure.
fn parse_value(def: &SettingDef, raw: &str) -> Result<Value, String> {
    let text = raw.trim();
    match def.kind {
        Kind::Integer { min, max } => match text.parse::<i64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(Value::Integer(n)),
            _ => Err(expected(def)),
        },
        Kind::Blocks { min, max } => match parse_blocks(text) {
            Some(n) if (min..=max).contains(&n) => Ok(Value::Integer(n)),
            _ => Err(expected(def)),
        },
        Kind::Time { unit, min, max } => match parse_time(text, unit) {
            Some(n) if (min..=max).contains(&n) => Ok(Value::Integer(n)),
            _ => Err(expected(def)),
        },
        Kind::Bool => match text.to_ascii_lowercase().as_str() {
            "on" | "true" | "yes" | "1" => Ok(Value::Bool(true)),
            "off" | "false" | "no" | "0" => Ok(Value::Bool(false)),
            _ => Err(expected(def)),
        },
        Kind::Enum(values) => values
            .iter()
            .find(|v| v.eq_ignore_ascii_case(text))
            .map(|v| Value::Enum(v))
            .ok_or_else(|| expected(def)),
        Kind::Real { min, max } => match text.parse::<f64>() {
            Ok(x) if x.is_finite() && (min..=max).contains(&x) => Ok(Value::Real(x)),
            _ => Err(expected(def)),
        },
        Kind::Text { max_len } if text.len() <= max_len => Ok(Value::Text(text.to_string())),
        Kind::Text { .. } => Err(expected(def)),
    }
}

/// Parses a duration into `unit`: a plain number is one of `unit`, a
/// number with a unit is converted and rounded to the nearest whole
/// `unit`, as PostgreSQL rounds (`1.5s` is 1500 ms; `100us` of a
/// milliseconds setting is 0). None for anything else, or a value too
/// large to hold.
fn parse_time(text: &str, unit: TimeUnit) -> Option<i64> {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(text.len());
    let (number, name) = text.split_at(split);
    let name = name.trim();
    if name.is_empty() {
        return number.parse::<i64>().ok();
    }
    let number: f64 = number.parse().ok()?;
    let micros = TIME_UNITS.iter().find(|(n, _)| *n == name)?.1;
    let value = (number * micros as f64 / unit.micros() as f64).round();
    (value.is_finite() && value.abs() < i64::MAX as f64).then_some(value as i64)
}

/// A duration stored in `unit` as SHOW shows it: with the largest unit
/// that divides it (`1s`, `200ms`, `5min`), as PostgreSQL's SHOW does;
/// zero and negative values ("none", "auto") as plain numbers.
fn format_time(value: i64, unit: TimeUnit) -> String {
    if value <= 0 {
        return value.to_string();
    }
    let micros = i128::from(value) * i128::from(unit.micros());
    TIME_UNITS
        .iter()
        .filter(|(_, m)| *m >= unit.micros())
        .find(|(_, m)| micros % i128::from(*m) == 0)
        .map_or_else(
            || value.to_string(),
            |(name, m)| format!("{}{name}", micros / i128::from(*m)),
        )
}

/// Parses a memory amount into 8 KiB blocks. A size with a unit must be a
/// whole number of blocks, so that nothing is silently rounded.
fn parse_blocks(text: &str) -> Option<i64> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let number: i64 = digits.parse().ok()?;
    let bytes_per_unit: i64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" => return Some(number),
        "kb" => 1 << 10,
        "mb" => 1 << 20,
        "gb" => 1 << 30,
        _ => return None,
    };
    let bytes = number.checked_mul(bytes_per_unit)?;
    let block = BLOCK_SIZE_BYTES as i64;
    (bytes % block == 0).then_some(bytes / block)
}

/// The effective settings, each with its source.
#[derive(Debug, Clone)]
pub struct Settings {
    values: BTreeMap<&'static str, (Value, Source)>,
    /// Names these values: a new number, unique in the process, at every
    /// change (a copy keeps it, with the same values). A kept plan checks
    /// that the settings it was planned with still hold by this number,
    /// without reading them each time (see [`Settings::version`]).
    version: u64,
    /// The timeouts every statement reads, decoded at each change: a
    /// lookup in `values` is a string comparison per tree node, four of
    /// them per statement (`perf`, pgbench at 8 clients).
    timeouts: Timeouts,
}

/// See [`Settings::timeouts`]; milliseconds, 0 for none.
#[derive(Debug, Clone, Copy, Default)]
struct Timeouts {
    statement: i64,
    lock: i64,
    idle_in_transaction_session: i64,
    deadlock: i64,
}

/// A timeout in milliseconds as an optional duration (0: no limit).
fn limit(ms: i64) -> Option<std::time::Duration> {
    (ms != 0).then(|| std::time::Duration::from_millis(ms as u64))
}

/// The next [`Settings::version`].
static NEXT_SETTINGS_VERSION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn new_settings_version() -> u64 {
    NEXT_SETTINGS_VERSION.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Default for Settings {
    fn default() -> Self {
        let values = SETTINGS
            .iter()
            .map(|def| {
                let value = parse_value(def, def.default)
                    .unwrap_or_else(|e| panic!("built-in default of {} is invalid: {e}", def.name));
                (def.name, (value, Source::Default))
            })
            .collect();
        let mut settings = Settings {
            values,
            version: 0,
            timeouts: Timeouts::default(),
        };
        settings.changed();
        settings
    }
}

impl Settings {
    /// Loads settings in the documented order: defaults, the data
    /// directory's config file (if it exists), the environment, then
    /// `-c name=value` arguments.
    pub fn load(data_dir: Option<&Path>, command_line: &[String]) -> Result<Self, ConfigError> {
        let mut settings = Settings::default();
        if let Some(dir) = data_dir {
            let path = dir.join(CONFIG_FILE_NAME);
            // A missing file means defaults; a file that is there but
            // cannot be looked at (permission, a symlink loop, a data
            // "directory" that is a file) is an error, never ignored.
            let exists = path.try_exists().map_err(|e| ConfigError::ConfigFile {
                path: path.clone(),
                reason: e.to_string(),
            })?;
            if exists {
                settings.apply_config_file(&path)?;
            }
        }
        settings.apply_environment(std::env::vars())?;
        for arg in command_line {
            let (name, value) = arg
                .split_once('=')
                .ok_or_else(|| ConfigError::MalformedArgument { arg: arg.clone() })?;
            settings.set(name.trim(), value, Source::CommandLine)?;
        }
        settings.check()?;
        Ok(settings)
    }

    /// Sets one value, checking name and range.
    pub fn set(&mut self, name: &str, raw: &str, source: Source) -> Result<(), ConfigError> {
        let lower = name.to_ascii_lowercase();
        let def = find(&lower).ok_or_else(|| ConfigError::UnknownName {
            name: name.to_string(),
            origin: source.clone(),
        })?;
        let value = parse_value(def, raw).map_err(|expected| ConfigError::InvalidValue {
            name: def.name.to_string(),
            value: raw.to_string(),
            origin: source.clone(),
            expected,
        })?;
        self.values.insert(def.name, (value, source));
        self.changed();
        Ok(())
    }

    /// Records that the engine uses `value` for `name` instead of what was
    /// asked, and why, so that SHOW and `aiostore settings` tell the truth
    /// (io_uring refused by the kernel: `worker`).
    pub fn record_fallback(
        &mut self,
        name: &str,
        value: &str,
        note: String,
    ) -> Result<(), ConfigError> {
        let def = find(name).ok_or_else(|| ConfigError::UnknownName {
            name: name.to_string(),
            origin: Source::Default,
        })?;
        let from = self.values[def.name].1.clone();
        self.set(
            name,
            value,
            Source::Fallback {
                from: Box::new(from),
                note,
            },
        )
    }

    /// `SET name = value` in a session: only session settings, and the
    /// settings must still agree with each other afterwards.
    pub fn set_session(&mut self, name: &str, raw: &str) -> Result<(), ConfigError> {
        let def = find(&name.to_ascii_lowercase()).ok_or_else(|| ConfigError::UnknownName {
            name: name.to_string(),
            origin: Source::Session,
        })?;
        if def.context == Context::Startup {
            return Err(ConfigError::StartupOnly { name: def.name });
        }
        let before = self.values.get(def.name).cloned();
        self.set(name, raw, Source::Session)?;
        if let Err(e) = self.check() {
            if let Some(before) = before {
                self.values.insert(def.name, before);
                self.changed();
            }
            return Err(e);
        }
        Ok(())
    }

    /// `RESET name`: back to the value `base` has.
    pub fn reset_session(&mut self, name: &str, base: &Settings) -> Result<(), ConfigError> {
        let def = find(&name.to_ascii_lowercase()).ok_or_else(|| ConfigError::UnknownName {
            name: name.to_string(),
            origin: Source::Session,
        })?;
        self.values.insert(def.name, base.values[def.name].clone());
        self.changed();
        Ok(())
    }

    /// After every change of `values`: a new version, the timeouts
    /// decoded again.
    fn changed(&mut self) {
        self.version = new_settings_version();
        self.timeouts = Timeouts {
            statement: self.integer("statement_timeout"),
            lock: self.integer("lock_timeout"),
            idle_in_transaction_session: self.integer("idle_in_transaction_session_timeout"),
            deadlock: self.integer("deadlock_timeout"),
        };
    }

    /// A number naming these values: two settings of the same version
    /// hold the same values (one is a copy of the other, unchanged since),
    /// so a value computed from them need not be computed again while the
    /// version stays. Settings of different versions may still agree.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The value of `name` as text, for `SHOW`.
    pub fn show(&self, name: &str) -> Result<(String, &Source), ConfigError> {
        let def = find(&name.to_ascii_lowercase()).ok_or_else(|| ConfigError::UnknownName {
            name: name.to_string(),
            origin: Source::Session,
        })?;
        let (value, source) = &self.values[def.name];
        Ok((format_value(def, value), source))
    }

    fn apply_config_file(&mut self, path: &Path) -> Result<(), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::ConfigFile {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let table: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| ConfigError::ConfigFile {
                    path: path.to_path_buf(),
                    reason: e.to_string(),
                })?;
        for (name, value) in table {
            let raw = match value {
                toml::Value::String(s) => s,
                toml::Value::Integer(n) => n.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                other => other.to_string(),
            };
            self.set(&name, &raw, Source::ConfigFile(path.to_path_buf()))?;
        }
        Ok(())
    }

    fn apply_environment(
        &mut self,
        vars: impl Iterator<Item = (String, String)>,
    ) -> Result<(), ConfigError> {
        for (var, value) in vars {
            let Some(name) = var.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            // AIOSTORE_DATA names the data directory, not a setting.
            if name == "DATA" {
                continue;
            }
            // AIOSTORE_TEST_* are test hooks read by the layers they
            // concern (e.g. aio::IO_URING_SETUP_ERRNO_ENV), not settings.
            if name.starts_with("TEST_") {
                continue;
            }
            self.set(name, &value, Source::Environment(var.clone()))?;
        }
        Ok(())
    }

    /// Checks the rules that tie settings together.
    fn check(&self) -> Result<(), ConfigError> {
        let combine = self.io_combine_limit();
        let max_combine = self.io_max_combine_limit();
        if combine > max_combine {
            return Err(ConfigError::Conflict {
                name: "io_combine_limit",
                value: combine.to_string(),
                other: format!("io_max_combine_limit = {max_combine}"),
                fix: "lower io_combine_limit or raise io_max_combine_limit".into(),
            });
        }
        // Each session may pin shared_buffers / max_sessions buffers. With
        // fewer than MIN_PINS_PER_SESSION every cold scan failed with
        // "session pin limit of 1"; refuse the combination up front.
        let buffers = self.shared_buffers();
        let sessions = self.max_sessions();
        if buffers < sessions * MIN_PINS_PER_SESSION {
            let min_buffers = (sessions * MIN_PINS_PER_SESSION) as u64;
            return Err(ConfigError::Conflict {
                name: "shared_buffers",
                value: format_blocks(buffers as u64),
                other: format!("max_sessions = {sessions}"),
                fix: format!(
                    "every session needs at least {MIN_PINS_PER_SESSION} buffers to pin; raise shared_buffers to at least {} or lower max_sessions to at most {}",
                    format_blocks(min_buffers),
                    (buffers / MIN_PINS_PER_SESSION).max(1)
                ),
            });
        }
        Ok(())
    }

    fn get(&self, name: &str) -> &Value {
        &self
            .values
            .get(name)
            .unwrap_or_else(|| panic!("setting {name} is not in SETTINGS"))
            .0
    }

    fn integer(&self, name: &str) -> i64 {
        match self.get(name) {
            Value::Integer(n) => *n,
            other => panic!("setting {name} is not an integer: {other}"),
        }
    }

    fn boolean(&self, name: &str) -> bool {
        match self.get(name) {
            Value::Bool(b) => *b,
            other => panic!("setting {name} is not a bool: {other}"),
        }
    }

    fn real(&self, name: &str) -> f64 {
        match self.get(name) {
            Value::Real(x) => *x,
            other => panic!("setting {name} is not a number: {other}"),
        }
    }

    fn text(&self, name: &str) -> &str {
        match self.get(name) {
            Value::Text(t) => t,
            other => panic!("setting {name} is not text: {other}"),
        }
    }

    /// The addresses the server listens on for TCP (`listen_addresses`):
    /// host names or IP addresses, `localhost` for the loopback
    /// addresses, `*` for all; empty for none.
    pub fn listen_addresses(&self) -> Vec<String> {
        self.text("listen_addresses")
            .split(',')
            .map(|a| a.trim().to_string())
            .filter(|a| !a.is_empty())
            .collect()
    }

    /// The TCP port, also in the Unix socket's name (`.s.PGSQL.<port>`).
    pub fn port(&self) -> u16 {
        self.integer("port") as u16
    }

    /// Directories the server makes its Unix socket in (empty: none).
    pub fn unix_socket_directories(&self) -> Vec<std::path::PathBuf> {
        self.text("unix_socket_directories")
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .map(std::path::PathBuf::from)
            .collect()
    }

    /// Whether the server asks for a password over its Unix socket
    /// (`unix_socket_authentication = scram-sha-256`) or trusts it.
    pub fn unix_socket_password(&self) -> bool {
        self.enumeration("unix_socket_authentication") == "scram-sha-256"
    }

    /// Whether the server accepts TLS on TCP connections (`ssl`).
    pub fn ssl(&self) -> bool {
        self.boolean("ssl")
    }

    /// The server's certificate file (`ssl_cert_file`), as given: a
    /// relative path is the data directory's.
    pub fn ssl_cert_file(&self) -> &Path {
        Path::new(self.text("ssl_cert_file"))
    }

    /// The certificate's private key file (`ssl_key_file`), as given.
    pub fn ssl_key_file(&self) -> &Path {
        Path::new(self.text("ssl_key_file"))
    }

    /// How long a wait for another transaction goes before the deadlock
    /// check.
    pub fn deadlock_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.timeouts.deadlock as u64)
    }

    /// How long a wait for another transaction may last (`None`: no
    /// limit).
    pub fn lock_timeout(&self) -> Option<std::time::Duration> {
        limit(self.timeouts.lock)
    }

    /// How long a statement may run (`None`: no limit).
    pub fn statement_timeout(&self) -> Option<std::time::Duration> {
        limit(self.timeouts.statement)
    }

    /// How long a connection may idle in a transaction block (`None`:
    /// no limit).
    pub fn idle_in_transaction_session_timeout(&self) -> Option<std::time::Duration> {
        limit(self.timeouts.idle_in_transaction_session)
    }

    pub fn max_connections(&self) -> usize {
        self.integer("max_connections") as usize
    }

    fn enumeration(&self, name: &str) -> &'static str {
        match self.get(name) {
            Value::Enum(s) => s,
            other => panic!("setting {name} is not an enum: {other}"),
        }
    }

    /// Whether setting `name` has its built-in default (no file, variable
    /// or command line set it).
    pub fn is_default(&self, name: &str) -> bool {
        matches!(self.values.get(name), Some((_, Source::Default)))
    }

    /// Every setting with its value, source and description, in table order.
    pub fn rows(&self) -> Vec<(&'static SettingDef, &Value, &Source)> {
        SETTINGS
            .iter()
            .map(|def| {
                let (value, source) = &self.values[def.name];
                (def, value, source)
            })
            .collect()
    }

    pub fn io_method(&self) -> IoMethod {
        match self.enumeration("io_method") {
            "sync" => IoMethod::Sync,
            "worker" => IoMethod::Worker,
            _ => IoMethod::IoUring,
        }
    }

    pub fn io_workers(&self) -> usize {
        self.integer("io_workers") as usize
    }

    /// Handles per session slot, with `-1` resolved as DESIGN.md §9 says.
    pub fn io_max_concurrency(&self) -> usize {
        match self.integer("io_max_concurrency") {
            -1 => (self.shared_buffers() / self.max_sessions()).clamp(1, 64),
            n => n as usize,
        }
    }

    pub fn io_combine_limit(&self) -> usize {
        self.integer("io_combine_limit") as usize
    }

    pub fn io_max_combine_limit(&self) -> usize {
        self.integer("io_max_combine_limit") as usize
    }

    /// `maintenance_work_mem` in bytes.
    pub fn maintenance_work_mem_bytes(&self) -> usize {
        self.integer("maintenance_work_mem") as usize * BLOCK_SIZE_BYTES as usize
    }

    /// `work_mem` in bytes.
    pub fn work_mem_bytes(&self) -> usize {
        self.integer("work_mem") as usize * BLOCK_SIZE_BYTES as usize
    }

    pub fn effective_io_concurrency(&self) -> usize {
        self.integer("effective_io_concurrency") as usize
    }

    pub fn maintenance_io_concurrency(&self) -> usize {
        self.integer("maintenance_io_concurrency") as usize
    }

    pub fn io_direct(&self) -> IoDirect {
        match self.enumeration("io_direct") {
            "data" => IoDirect {
                data: true,
                wal: false,
            },
            "wal" => IoDirect {
                data: false,
                wal: true,
            },
            "data+wal" => IoDirect {
                data: true,
                wal: true,
            },
            _ => IoDirect::default(),
        }
    }

    /// Number of 8 KiB buffers in the shared pool.
    pub fn shared_buffers(&self) -> usize {
        self.integer("shared_buffers") as usize
    }

    pub fn max_sessions(&self) -> usize {
        self.integer("max_sessions") as usize
    }

    pub fn zero_damaged_pages(&self) -> bool {
        self.boolean("zero_damaged_pages")
    }

    /// Which join methods the planner may choose (`enable_hashjoin`,
    /// `enable_mergejoin`, `enable_nestloop`).
    pub fn join_methods(&self) -> JoinMethods {
        JoinMethods {
            hash: self.boolean("enable_hashjoin"),
            merge: self.boolean("enable_mergejoin"),
            nested_loop: self.boolean("enable_nestloop"),
        }
    }

    /// FROM items whose join order the planner searches
    /// (`join_collapse_limit`; 1: the order written).
    pub fn join_collapse_limit(&self) -> usize {
        self.integer("join_collapse_limit") as usize
    }

    /// Which ways of reading a table the planner may choose
    /// (`enable_indexscan`, `enable_seqscan`, `enable_bitmapscan`).
    pub fn scan_methods(&self) -> ScanMethods {
        ScanMethods {
            index: self.boolean("enable_indexscan"),
            index_only: self.boolean("enable_indexonlyscan"),
            seq: self.boolean("enable_seqscan"),
            bitmap: self.boolean("enable_bitmapscan"),
        }
    }

    /// Whether index scans read the table's pages ahead of need
    /// (`enable_indexscan_prefetch`).
    pub fn indexscan_prefetch(&self) -> bool {
        self.boolean("enable_indexscan_prefetch")
    }

    /// The planner's cost parameters.
    pub fn costs(&self) -> Costs {
        Costs {
            seq_page: self.real("seq_page_cost"),
            random_page: self.real("random_page_cost"),
            cpu_tuple: self.real("cpu_tuple_cost"),
            cpu_index_tuple: self.real("cpu_index_tuple_cost"),
            cpu_operator: self.real("cpu_operator_cost"),
            effective_cache_pages: self.integer("effective_cache_size") as f64,
            work_mem_bytes: self.work_mem_bytes() as f64,
        }
    }

    pub fn ignore_checksum_failure(&self) -> bool {
        self.boolean("ignore_checksum_failure")
    }

    /// Blocks of the WAL ring.
    pub fn wal_buffers(&self) -> usize {
        self.integer("wal_buffers") as usize
    }

    /// `wal_sync_method` as set (`auto` included: the WAL resolves it).
    pub fn wal_sync_method(&self) -> &'static str {
        self.enumeration("wal_sync_method")
    }

    pub fn wal_io_concurrency(&self) -> usize {
        self.integer("wal_io_concurrency") as usize
    }

    pub fn synchronous_commit(&self) -> bool {
        self.boolean("synchronous_commit")
    }

    pub fn wal_writer_delay(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.integer("wal_writer_delay") as u64)
    }

    pub fn checkpoint_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.integer("checkpoint_timeout") as u64)
    }

    pub fn checkpoint_completion_target(&self) -> f64 {
        self.real("checkpoint_completion_target")
    }

    pub fn bgwriter_delay(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.integer("bgwriter_delay") as u64)
    }

    pub fn bgwriter_lru_maxpages(&self) -> u64 {
        self.integer("bgwriter_lru_maxpages") as u64
    }

    pub fn bgwriter_lru_multiplier(&self) -> f64 {
        self.real("bgwriter_lru_multiplier")
    }

    /// Bytes of WAL between checkpoints.
    pub fn max_wal_size_bytes(&self) -> u64 {
        self.integer("max_wal_size") as u64 * BLOCK_SIZE_BYTES
    }

    pub fn full_page_writes(&self) -> bool {
        self.boolean("full_page_writes")
    }

    pub fn recovery_prefetch(&self) -> bool {
        self.boolean("recovery_prefetch")
    }

    pub fn debug_io_latency_us(&self) -> u64 {
        self.integer("debug_io_latency_us") as u64
    }
}

/// How I/O is executed (DESIGN.md §3.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IoMethod {
    Sync,
    Worker,
    IoUring,
}

impl IoMethod {
    pub const ALL: [IoMethod; 3] = [IoMethod::Sync, IoMethod::Worker, IoMethod::IoUring];

    pub fn name(self) -> &'static str {
        match self {
            IoMethod::Sync => "sync",
            IoMethod::Worker => "worker",
            IoMethod::IoUring => "io_uring",
        }
    }
}

impl fmt::Display for IoMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which kinds of file are opened with O_DIRECT.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoDirect {
    pub data: bool,
    pub wal: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decoded_timeouts_follow_every_change() {
        use std::time::Duration;
        let base = Settings::default();
        let mut s = base.clone();
        assert_eq!(s.statement_timeout(), None);
        s.set_session("statement_timeout", "250").unwrap();
        s.set_session("lock_timeout", "2000").unwrap();
        s.set_session("idle_in_transaction_session_timeout", "60000")
            .unwrap();
        s.set_session("deadlock_timeout", "50").unwrap();
        assert_eq!(s.statement_timeout(), Some(Duration::from_millis(250)));
        assert_eq!(s.lock_timeout(), Some(Duration::from_secs(2)));
        assert_eq!(
            s.idle_in_transaction_session_timeout(),
            Some(Duration::from_secs(60))
        );
        assert_eq!(s.deadlock_timeout(), Duration::from_millis(50));
        assert!(s.set_session("statement_timeout", "soon").is_err());
        assert_eq!(s.statement_timeout(), Some(Duration::from_millis(250)));
        s.reset_session("statement_timeout", &base).unwrap();
        assert_eq!(s.statement_timeout(), None);
        assert_eq!(s.lock_timeout(), Some(Duration::from_secs(2)));
    }

    #[test]
    fn time_settings_take_postgresql_units_and_show_with_them() {
        use std::time::Duration;
        let mut s = Settings::default();
        for (raw, millis) in [
            ("2s", 2_000),
            ("1.5s", 1_500),
            (" 250 ms ", 250),
            ("3min", 180_000),
            ("1h", 3_600_000),
            ("1d", 86_400_000),
            ("1500us", 2),
            ("400us", 0),
            ("42", 42),
        ] {
            s.set_session("lock_timeout", raw).unwrap();
            assert_eq!(s.lock_timeout(), limit(millis), "{raw}");
        }
        s.set_session("statement_timeout", "90s").unwrap();
        assert_eq!(s.statement_timeout(), Some(Duration::from_secs(90)));
        assert_eq!(s.show("statement_timeout").unwrap().0, "90s");
        s.set_session("statement_timeout", "120000").unwrap();
        assert_eq!(s.show("statement_timeout").unwrap().0, "2min");
        s.set_session("statement_timeout", "1001").unwrap();
        assert_eq!(s.show("statement_timeout").unwrap().0, "1001ms");
        s.set_session("statement_timeout", "0").unwrap();
        assert_eq!(s.show("statement_timeout").unwrap().0, "0");
        // What SHOW prints reads back as the same value.
        for raw in ["5min", "1001ms", "2h", "0"] {
            s.set_session("deadlock_timeout", raw).ok();
            let shown = s.show("deadlock_timeout").unwrap().0;
            let before = s.deadlock_timeout();
            s.set_session("deadlock_timeout", &shown).unwrap();
            assert_eq!(s.deadlock_timeout(), before, "{raw} shown as {shown}");
        }
        // A seconds setting in its own unit and in others.
        s.set("checkpoint_timeout", "10min", Source::CommandLine)
            .unwrap();
        assert_eq!(s.checkpoint_timeout(), Duration::from_secs(600));
        assert_eq!(s.show("checkpoint_timeout").unwrap().0, "10min");
        // Units that are not time, values out of range or too large.
        for raw in ["2 weeks", "5MB", "s", "1e400s", "-5s", "25d"] {
            let e = s.set_session("lock_timeout", raw).unwrap_err().to_string();
            assert!(e.contains("with unit us, ms, s, min, h or d"), "{raw}: {e}");
        }
    }

    #[test]
    fn defaults_match_the_design_table() {
        let s = Settings::default();
        assert_eq!(s.io_method(), IoMethod::IoUring);
        assert_eq!(s.io_workers(), 16);
        assert_eq!(s.shared_buffers(), 16384);
        assert_eq!(s.io_max_concurrency(), 64);
        assert_eq!(s.io_combine_limit(), 16);
        assert_eq!(s.effective_io_concurrency(), 16);
        assert_eq!(s.io_direct(), IoDirect::default());
        assert!(!s.zero_damaged_pages());
        assert!(s.recovery_prefetch());
        assert_eq!(s.costs(), Costs::DEFAULTS);
    }

    #[test]
    fn memory_units_are_converted_to_blocks() {
        assert_eq!(parse_blocks("16"), Some(16));
        assert_eq!(parse_blocks("128kB"), Some(16));
        assert_eq!(parse_blocks("1MB"), Some(128));
        assert_eq!(parse_blocks("1GB"), Some(131072));
        assert_eq!(parse_blocks("12kB"), None, "not a whole number of blocks");
        assert_eq!(parse_blocks("1TB"), None);
    }

    #[test]
    fn out_of_range_value_is_refused_with_the_range() {
        let mut s = Settings::default();
        let err = s.set("io_workers", "0", Source::CommandLine).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("io_workers") && text.contains("from 1 to 32"),
            "{text}"
        );
    }

    #[test]
    fn unknown_name_is_refused() {
        let mut s = Settings::default();
        let err = s.set("io_wrokers", "3", Source::CommandLine).unwrap_err();
        assert!(err
            .to_string()
            .contains("unrecognized setting \"io_wrokers\""));
    }

    #[test]
    fn later_sources_override_earlier_ones_and_are_recorded() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(CONFIG_FILE_NAME),
            "io_workers = 5\nio_method = \"worker\"\n",
        )
        .unwrap();
        let s = Settings::load(Some(dir.path()), &["io_workers=7".into()]).unwrap();
        assert_eq!(s.io_workers(), 7);
        assert_eq!(s.io_method(), IoMethod::Worker);
        let rows = s.rows();
        let (_, _, source) = rows.iter().find(|(d, _, _)| d.name == "io_method").unwrap();
        assert!(matches!(source, Source::ConfigFile(_)));
        let (_, _, source) = rows
            .iter()
            .find(|(d, _, _)| d.name == "io_workers")
            .unwrap();
        assert_eq!(**source, Source::CommandLine);
    }

    #[test]
    fn a_config_file_that_cannot_be_read_is_an_error_naming_it_and_a_missing_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            Settings::load(Some(dir.path()), &[]).is_ok(),
            "missing: defaults"
        );
        let path = dir.path().join(CONFIG_FILE_NAME);
        let named = |e: ConfigError, reason: &str| {
            let text = e.to_string();
            assert!(
                text.contains(&path.display().to_string()) && text.contains(reason),
                "{text}"
            );
        };
        std::fs::write(&path, b"io_workers = \"\xff\"\n").unwrap();
        named(Settings::load(Some(dir.path()), &[]).unwrap_err(), "UTF-8");
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        named(
            Settings::load(Some(dir.path()), &[]).unwrap_err(),
            "directory",
        );
        std::fs::remove_dir(&path).unwrap();
        // A symlink to itself: exists() says false, which used to mean
        // "use the defaults" without a word.
        std::os::unix::fs::symlink(&path, &path).unwrap();
        named(
            Settings::load(Some(dir.path()), &[]).unwrap_err(),
            "symbolic links",
        );
    }

    #[test]
    fn fallback_is_shown_as_the_value_in_use_with_the_reason() {
        let mut s = Settings::default();
        s.record_fallback("io_method", "worker", "fell back to worker: EPERM".into())
            .unwrap();
        assert_eq!(s.io_method(), IoMethod::Worker);
        let (value, source) = s.show("io_method").unwrap();
        assert_eq!(value, "worker");
        assert_eq!(source.to_string(), "default; fell back to worker: EPERM");
    }

    #[test]
    fn a_pool_too_small_for_max_sessions_is_refused_naming_both_and_the_minimum() {
        let err = Settings::load(None, &["shared_buffers=64".into()]).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("shared_buffers")
                && text.contains("max_sessions = 64")
                && text.contains("at least 2MB")
                && text.contains("at most 16"),
            "{text}"
        );
        assert!(Settings::load(
            None,
            &["shared_buffers=64".into(), "max_sessions=16".into()]
        )
        .is_ok());
        assert!(Settings::load(None, &["shared_buffers=256".into()]).is_ok());
    }

    #[test]
    fn memory_sizes_are_shown_with_the_largest_whole_unit() {
        let def = |name| find(name).unwrap();
        let v = Value::Integer;
        assert_eq!(format_value(def("shared_buffers"), &v(16384)), "128MB");
        assert_eq!(format_value(def("shared_buffers"), &v(524288)), "4GB");
        assert_eq!(format_value(def("shared_buffers"), &v(17)), "136kB");
        assert_eq!(format_value(def("io_combine_limit"), &v(16)), "128kB");
        assert_eq!(format_value(def("io_workers"), &v(16)), "16");
    }

    #[test]
    fn environment_variables_set_values() {
        let mut s = Settings::default();
        s.apply_environment(
            vec![
                ("AIOSTORE_IO_WORKERS".to_string(), "9".to_string()),
                ("AIOSTORE_DATA".to_string(), "/somewhere".to_string()),
                ("PATH".to_string(), "/bin".to_string()),
            ]
            .into_iter(),
        )
        .unwrap();
        assert_eq!(s.io_workers(), 9);
    }

    #[test]
    fn combine_limit_above_its_maximum_is_a_conflict() {
        let err = Settings::load(None, &["io_combine_limit=32".into()]).unwrap_err();
        assert!(err.to_string().contains("io_max_combine_limit"), "{err}");
    }
}
