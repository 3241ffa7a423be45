//! System views and utility functions: sources whose rows come from the
//! engine's state rather than from a table.
//!
//! Views are read when the statement runs, each from one snapshot of its
//! source (`Aio::inflight`, the I/O counters, the pool's contents, the
//! WAL's counters and positions); a view
//! never blocks the I/O path. Utility functions (`prewarm`,
//! `evict_relation`, `read_stream_for_blocks`) act on the buffer pool, so
//! they run as a pipeline's source, outside any scan callback, and only
//! when the statement runs (plain EXPLAIN does not call them).

use std::sync::Arc;

use super::expr::array_text;
use super::pg_catalog::CatalogView;
use super::ExecError;
use crate::catalog::TableDef;
use crate::database::{Database, Session};
use crate::storage::Fork;
use crate::txn::{WaitTarget, Xid};
use crate::types::{ColumnType, Value};
use crate::wal::format_lsn;

/// A column of a view or utility function: name and type.
pub type ColumnSpec = (&'static str, ColumnType);

/// A system view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// One row per I/O handle that is not idle (DESIGN.md §10).
    AioInflight,
    /// Cumulative I/O statistics per method and operation, and the buffer
    /// pool's counters.
    StatIo,
    /// The buffer pool's contents, one row per buffer holding a block.
    Buffers,
    /// The write-ahead log's cumulative counters and positions, one row
    /// (PostgreSQL's pg_stat_wal with pg_current_wal_insert_lsn and
    /// pg_current_wal_flush_lsn).
    StatWal,
    /// What ANALYZE learnt of each column, one row per column of an
    /// analysed table (PostgreSQL's pg_stats).
    Stats,
    /// Per table: its size when analysed, when that was, the rows
    /// changed since, and the rows updated since the database opened, in
    /// place or not (PostgreSQL's pg_stat_user_tables, in part).
    StatTables,
    /// Checkpoints since the database opened, and the last one, one row
    /// (PostgreSQL's pg_stat_checkpointer, with the last's figures).
    StatCheckpointer,
    /// The background writer's counters and the buffers sessions took,
    /// one row (PostgreSQL's pg_stat_bgwriter).
    StatBgwriter,
    /// Locks held and waited for (PostgreSQL's pg_locks): table locks, each
    /// transaction's own id, and waits for another's id (a row, a unique
    /// key).
    Locks,
    /// A relation of `pg_catalog` (see `exec::pg_catalog`).
    Catalog(CatalogView),
}

const AIO_INFLIGHT: &[ColumnSpec] = &[
    ("session", ColumnType::Integer),
    ("handle", ColumnType::Integer),
    ("generation", ColumnType::BigInt),
    ("state", ColumnType::Text),
    ("op", ColumnType::Text),
    ("offset", ColumnType::BigInt),
    ("length", ColumnType::BigInt),
    ("target", ColumnType::Text),
    ("result", ColumnType::BigInt),
    ("flags", ColumnType::Text),
];

/// `source` is "aio" for the rows of one (method, op), whose pool columns
/// are NULL, and "buffer pool" for the one row of pool counters, whose I/O
/// columns are NULL (as PostgreSQL's pg_stat_io leaves what does not apply
/// NULL).
const STAT_IO: &[ColumnSpec] = &[
    ("source", ColumnType::Text),
    ("method", ColumnType::Text),
    ("op", ColumnType::Text),
    ("ios", ColumnType::BigInt),
    ("bytes", ColumnType::BigInt),
    ("errors", ColumnType::BigInt),
    ("partial", ColumnType::BigInt),
    ("executed_by_issuer", ColumnType::BigInt),
    ("latency_us_total", ColumnType::BigInt),
    ("latency_us_p50", ColumnType::BigInt),
    ("latency_us_p99", ColumnType::BigInt),
    ("hits", ColumnType::BigInt),
    ("reads", ColumnType::BigInt),
    ("evictions", ColumnType::BigInt),
    ("writes", ColumnType::BigInt),
    ("checksum_failures", ColumnType::BigInt),
    ("advised", ColumnType::BigInt),
];

/// Where `stat_io`'s buffer pool columns start (`hits`); the I/O
/// columns come before.
const STAT_IO_POOL_COLUMN: usize = 11;

const BUFFERS: &[ColumnSpec] = &[
    ("buffer", ColumnType::Integer),
    ("rel", ColumnType::BigInt),
    ("relname", ColumnType::Text),
    ("fork", ColumnType::Text),
    ("block", ColumnType::BigInt),
    ("valid", ColumnType::Boolean),
    ("dirty", ColumnType::Boolean),
    ("io_in_progress", ColumnType::Boolean),
    ("pins", ColumnType::Integer),
    ("usage", ColumnType::Integer),
];

/// The counters of `wal::WalStats` (times in milliseconds), then where the
/// next record goes, how far the log is durable and the last checkpoint's
/// redo point, each as `X/Y`.
const STAT_WAL: &[ColumnSpec] = &[
    ("records", ColumnType::BigInt),
    ("full_page_images", ColumnType::BigInt),
    ("bytes", ColumnType::BigInt),
    ("writes", ColumnType::BigInt),
    ("syncs", ColumnType::BigInt),
    ("write_time_ms", ColumnType::Double),
    ("sync_time_ms", ColumnType::Double),
    ("padding_bytes", ColumnType::BigInt),
    ("flushes_shared", ColumnType::BigInt),
    ("writes_in_flight", ColumnType::BigInt),
    ("writes_in_flight_peak", ColumnType::BigInt),
    ("insert_lsn", ColumnType::Text),
    ("flush_lsn", ColumnType::Text),
    ("redo_lsn", ColumnType::Text),
];

const STAT_CHECKPOINTER: &[ColumnSpec] = &[
    ("num_timed", ColumnType::BigInt),
    ("num_requested", ColumnType::BigInt),
    ("buffers_written", ColumnType::BigInt),
    ("write_time_ms", ColumnType::Double),
    ("sync_time_ms", ColumnType::Double),
    ("files_synced", ColumnType::BigInt),
    ("last_cause", ColumnType::Text),
    ("last_buffers", ColumnType::BigInt),
    ("last_writes", ColumnType::BigInt),
    ("last_write_time_ms", ColumnType::Double),
    ("last_write_mib_per_s", ColumnType::Double),
    ("last_files", ColumnType::BigInt),
    ("last_sync_time_ms", ColumnType::Double),
];

const LOCKS: &[ColumnSpec] = &[
    ("locktype", ColumnType::Text),
    ("relation", ColumnType::Text),
    ("transactionid", ColumnType::BigInt),
    ("virtualtransaction", ColumnType::BigInt),
    ("xid", ColumnType::BigInt),
    ("mode", ColumnType::Text),
    ("granted", ColumnType::Boolean),
    ("fastpath", ColumnType::Boolean),
];

const STAT_BGWRITER: &[ColumnSpec] = &[
    ("rounds", ColumnType::BigInt),
    ("buffers_clean", ColumnType::BigInt),
    ("maxwritten_clean", ColumnType::BigInt),
    ("buffers_alloc", ColumnType::BigInt),
];

/// Lists are in PostgreSQL's array text form (`{1,2,3}`).
const STATS: &[ColumnSpec] = &[
    ("tablename", ColumnType::Text),
    ("attname", ColumnType::Text),
    ("null_frac", ColumnType::Double),
    ("avg_width", ColumnType::Integer),
    ("n_distinct", ColumnType::Double),
    ("most_common_vals", ColumnType::Text),
    ("most_common_freqs", ColumnType::Text),
    ("histogram_bounds", ColumnType::Text),
    ("correlation", ColumnType::Double),
];

const STAT_TABLES: &[ColumnSpec] = &[
    ("relname", ColumnType::Text),
    ("pages", ColumnType::BigInt),
    ("rows", ColumnType::Double),
    ("n_mod_since_analyze", ColumnType::BigInt),
    ("stale", ColumnType::Boolean),
    ("last_analyze", ColumnType::Timestamp),
    ("n_tup_upd", ColumnType::BigInt),
    ("n_tup_hot_upd", ColumnType::BigInt),
];

/// A value's text output, for a list of values.
fn value_text(v: &Value) -> String {
    match crate::types::cast_value(v, ColumnType::Text) {
        Ok(Value::Text(t)) => t,
        _ => format!("{v:?}"),
    }
}

fn int(x: u32) -> Value {
    Value::Integer(i32::try_from(x).unwrap_or(i32::MAX))
}

fn big(x: u64) -> Value {
    Value::BigInt(i64::try_from(x).unwrap_or(i64::MAX))
}

fn text(s: &str) -> Value {
    Value::Text(s.to_string())
}

impl View {
    /// Every view of the engine's own (the `pg_catalog` relations are
    /// [`CatalogView::ALL`]).
    pub const ALL: [View; 9] = [
        View::AioInflight,
        View::StatIo,
        View::Buffers,
        View::StatWal,
        View::Stats,
        View::StatTables,
        View::StatCheckpointer,
        View::StatBgwriter,
        View::Locks,
    ];

    /// The view called `name`, if any: one of ours, or a `pg_catalog`
    /// relation (PostgreSQL finds those without their schema too).
    pub fn by_name(name: &str) -> Option<View> {
        View::ALL
            .into_iter()
            .find(|v| v.name() == name)
            .or_else(|| CatalogView::by_name(name).map(View::Catalog))
    }

    /// Whether it is a relation of `pg_catalog`.
    pub fn is_catalog(self) -> bool {
        matches!(self, View::Catalog(_))
    }

    /// The name SQL reads it by.
    pub fn name(self) -> &'static str {
        match self {
            View::AioInflight => "aio_inflight",
            View::StatIo => "stat_io",
            View::Buffers => "buffers",
            View::StatWal => "stat_wal",
            View::Stats => "stats",
            View::StatTables => "stat_tables",
            View::StatCheckpointer => "stat_checkpointer",
            View::StatBgwriter => "stat_bgwriter",
            View::Locks => "locks",
            View::Catalog(c) => c.name(),
        }
    }

    /// Its columns, in order.
    pub fn columns(self) -> &'static [ColumnSpec] {
        match self {
            View::AioInflight => AIO_INFLIGHT,
            View::StatIo => STAT_IO,
            View::Buffers => BUFFERS,
            View::StatWal => STAT_WAL,
            View::Stats => STATS,
            View::StatTables => STAT_TABLES,
            View::StatCheckpointer => STAT_CHECKPOINTER,
            View::StatBgwriter => STAT_BGWRITER,
            View::Locks => LOCKS,
            View::Catalog(c) => c.columns(),
        }
    }

    /// The view's rows now, as a statement of transaction `viewer` sees
    /// them (the catalog's tables it created, not yet committed,
    /// included).
    pub fn rows(self, db: &Database, viewer: Option<Xid>) -> Vec<Vec<Value>> {
        match self {
            View::Catalog(c) => c.rows(db, viewer),
            View::AioInflight => db
                .aio()
                .inflight()
                .into_iter()
                .map(|io| {
                    vec![
                        int(io.session),
                        int(io.handle),
                        big(io.generation),
                        text(io.state),
                        text(io.op),
                        big(io.offset),
                        big(io.length),
                        Value::Text(io.target),
                        io.result.map_or(Value::Null, Value::BigInt),
                        Value::Text(io.flags),
                    ]
                })
                .collect(),
            View::StatIo => {
                let mut rows: Vec<Vec<Value>> = db
                    .aio()
                    .stats()
                    .rows()
                    .into_iter()
                    .map(|r| {
                        let quantile = |q| r.latency_us_quantile(q).map_or(Value::Null, big);
                        let mut row = vec![
                            text("aio"),
                            text(r.method),
                            text(r.op),
                            big(r.ios),
                            big(r.bytes),
                            big(r.errors),
                            big(r.partial),
                            big(r.executed_by_issuer),
                            big(r.latency_us_total),
                            quantile(0.5),
                            quantile(0.99),
                        ];
                        debug_assert_eq!(row.len(), STAT_IO_POOL_COLUMN);
                        row.resize(STAT_IO.len(), Value::Null);
                        row
                    })
                    .collect();
                let pool = db.pool().stats();
                let load = |c: &std::sync::atomic::AtomicU64| {
                    big(c.load(std::sync::atomic::Ordering::Relaxed))
                };
                debug_assert_eq!(STAT_IO[STAT_IO_POOL_COLUMN].0, "hits");
                let mut row = vec![text("buffer pool"), text(db.aio().method().name())];
                row.resize(STAT_IO_POOL_COLUMN, Value::Null);
                row.extend([
                    load(&pool.hits),
                    load(&pool.reads),
                    load(&pool.evictions),
                    load(&pool.writes),
                    load(&pool.checksum_failures),
                    load(&pool.advised),
                ]);
                debug_assert_eq!(row.len(), STAT_IO.len());
                rows.push(row);
                rows
            }
            View::Buffers => {
                let names = db.catalog().relation_names();
                db.pool()
                    .contents()
                    .into_iter()
                    .map(|b| {
                        vec![
                            int(b.buffer),
                            big(u64::from(b.tag.rel)),
                            names.get(&b.tag.rel).map_or(Value::Null, |n| text(n)),
                            text(b.tag.fork.name()),
                            big(u64::from(b.tag.block)),
                            Value::Boolean(b.valid),
                            Value::Boolean(b.dirty),
                            Value::Boolean(b.io_in_progress),
                            int(b.pins),
                            int(b.usage),
                        ]
                    })
                    .collect()
            }
            View::StatCheckpointer => {
                let c = db.checkpointer_stats();
                let ms = |d: std::time::Duration| Value::Double(d.as_secs_f64() * 1000.0);
                let mut row = vec![
                    big(c.timed),
                    big(c.requested),
                    big(c.buffers_written),
                    ms(c.write_time),
                    ms(c.sync_time),
                    big(c.files_synced),
                ];
                match c.last {
                    Some(last) => {
                        let mib = (last.buffers * crate::storage::BLOCK_SIZE as u64) as f64
                            / f64::from(1u32 << 20);
                        let secs = last.write_time.as_secs_f64();
                        row.extend([
                            text(last.cause.name()),
                            big(last.buffers),
                            big(last.writes),
                            ms(last.write_time),
                            if secs > 0.0 {
                                Value::Double(mib / secs)
                            } else {
                                Value::Null
                            },
                            big(last.files),
                            ms(last.sync_time),
                        ]);
                    }
                    None => row.extend(std::iter::repeat_n(Value::Null, 7)),
                }
                debug_assert_eq!(row.len(), STAT_CHECKPOINTER.len());
                vec![row]
            }
            View::Locks => {
                let names: std::collections::HashMap<u32, String> = db
                    .catalog()
                    .tables()
                    .iter()
                    .map(|t| (t.oid, t.name().to_string()))
                    .collect();
                db.txn()
                    .lock_rows()
                    .into_iter()
                    .map(|r| {
                        let (locktype, relation, transactionid, mode) = match r.target {
                            WaitTarget::Table { oid, mode } => (
                                "relation",
                                // A table dropped meanwhile, or one
                                // another transaction is creating.
                                Value::Text(names.get(&oid).cloned().unwrap_or(oid.to_string())),
                                Value::Null,
                                mode.name(),
                            ),
                            WaitTarget::Transaction(xid) => (
                                "transactionid",
                                Value::Null,
                                big(xid.into()),
                                // Its own id held exclusively, another's
                                // waited for in share mode.
                                if r.granted {
                                    "ExclusiveLock"
                                } else {
                                    "ShareLock"
                                },
                            ),
                        };
                        vec![
                            Value::Text(locktype.into()),
                            relation,
                            transactionid,
                            big(r.owner),
                            r.xid.map_or(Value::Null, |x| big(x.into())),
                            Value::Text(mode.into()),
                            Value::Boolean(r.granted),
                            Value::Boolean(r.fast_path),
                        ]
                    })
                    .collect()
            }
            View::StatBgwriter => {
                let b = db.bgwriter_stats();
                let allocs = db
                    .pool()
                    .stats()
                    .allocs
                    .load(std::sync::atomic::Ordering::Relaxed);
                vec![vec![
                    big(b.rounds),
                    big(b.buffers_clean),
                    big(b.maxwritten_clean),
                    big(allocs),
                ]]
            }
            View::StatWal => {
                let wal = db.wal();
                // Flushed first: what is durable was inserted, so the row
                // never shows flush_lsn past insert_lsn.
                let flushed = wal.flushed();
                let inserted = wal.insert_position();
                let stats = wal.stats();
                let load =
                    |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
                let ms = |c: &std::sync::atomic::AtomicU64| Value::Double(load(c) as f64 / 1000.0);
                let row = vec![
                    big(load(&stats.records)),
                    big(load(&stats.full_page_images)),
                    big(load(&stats.bytes)),
                    big(load(&stats.writes)),
                    big(load(&stats.syncs)),
                    ms(&stats.write_us),
                    ms(&stats.sync_us),
                    big(load(&stats.padding_bytes)),
                    big(load(&stats.flushes_shared)),
                    big(load(&stats.writes_in_flight)),
                    big(load(&stats.writes_in_flight_peak)),
                    text(&format_lsn(inserted)),
                    text(&format_lsn(flushed)),
                    text(&format_lsn(wal.redo())),
                ];
                debug_assert_eq!(row.len(), STAT_WAL.len());
                vec![row]
            }
            View::Stats => {
                let mut rows = Vec::new();
                for table in db.catalog().tables() {
                    let Some(stats) = db.statistics().of(table.oid) else {
                        continue;
                    };
                    for (column, c) in table.columns.iter().zip(&stats.columns) {
                        let list = |values: &mut dyn Iterator<Item = String>, empty: bool| {
                            if empty {
                                Value::Null
                            } else {
                                Value::Text(array_text(values.map(Some)))
                            }
                        };
                        rows.push(vec![
                            text(table.name()),
                            text(&column.name),
                            Value::Double(c.null_frac),
                            Value::Integer(c.avg_width.round() as i32),
                            Value::Double(c.n_distinct),
                            list(
                                &mut c.mcv.iter().map(|(v, _)| value_text(v)),
                                c.mcv.is_empty(),
                            ),
                            list(
                                &mut c.mcv.iter().map(|(_, f)| format!("{f:.6}")),
                                c.mcv.is_empty(),
                            ),
                            list(
                                &mut c.histogram.iter().map(value_text),
                                c.histogram.is_empty(),
                            ),
                            c.correlation.map_or(Value::Null, Value::Double),
                        ]);
                    }
                }
                rows
            }
            View::StatTables => db
                .catalog()
                .tables()
                .into_iter()
                .map(|table| {
                    let stats = db.statistics().of(table.oid);
                    let updates = db.statistics().update_counts(table.oid);
                    vec![
                        text(table.name()),
                        stats
                            .as_ref()
                            .map_or(Value::Null, |s| big(u64::from(s.pages))),
                        stats
                            .as_ref()
                            .map_or(Value::Null, |s| Value::Double(s.rows)),
                        stats
                            .as_ref()
                            .map_or(Value::Null, |s| big(s.changed_since())),
                        Value::Boolean(stats.as_ref().is_none_or(|s| s.is_stale())),
                        stats
                            .as_ref()
                            .map_or(Value::Null, |s| Value::Timestamp(s.analyzed_at)),
                        big(updates.updated),
                        big(updates.hot),
                    ]
                })
                .collect(),
        }
    }
}

/// A utility function over a table's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Utility {
    /// `prewarm('t')`: reads every block of `t` into the pool through a
    /// read stream; returns the number of blocks.
    Prewarm,
    /// `evict_relation('t')`: drops `t`'s buffers from the pool (writing
    /// dirty ones back); returns how many were evicted.
    EvictRelation,
    /// `read_stream_for_blocks('t', ARRAY[…])`: reads those blocks, in
    /// that order, through one read stream; returns one row of its figures.
    ReadStreamForBlocks,
    /// `verify_index('i')`: checks index `i`'s structure and that it holds
    /// exactly the table's rows (`exec::index::verify_index`); returns
    /// the number of entries, or fails naming the damage.
    VerifyIndex,
}

const PREWARM: &[ColumnSpec] = &[("prewarm", ColumnType::BigInt)];
const EVICT_RELATION: &[ColumnSpec] = &[("evict_relation", ColumnType::BigInt)];
const VERIFY_INDEX: &[ColumnSpec] = &[("verify_index", ColumnType::BigInt)];
const READ_STREAM_FOR_BLOCKS: &[ColumnSpec] = &[
    ("blocks", ColumnType::BigInt),
    ("hits", ColumnType::BigInt),
    ("reads", ColumnType::BigInt),
    ("ios", ColumnType::BigInt),
    ("foreign_ios", ColumnType::BigInt),
    ("waits", ColumnType::BigInt),
    ("ms", ColumnType::Double),
];

impl Utility {
    /// Every utility function.
    pub const ALL: [Utility; 4] = [
        Utility::Prewarm,
        Utility::EvictRelation,
        Utility::ReadStreamForBlocks,
        Utility::VerifyIndex,
    ];

    /// The utility function called `name`, if any.
    pub fn by_name(name: &str) -> Option<Utility> {
        Utility::ALL.into_iter().find(|u| u.name() == name)
    }

    /// The name SQL calls it by.
    pub fn name(self) -> &'static str {
        match self {
            Utility::Prewarm => "prewarm",
            Utility::EvictRelation => "evict_relation",
            Utility::ReadStreamForBlocks => "read_stream_for_blocks",
            Utility::VerifyIndex => "verify_index",
        }
    }

    /// How it is called, for error messages.
    pub fn signature(self) -> &'static str {
        match self {
            Utility::Prewarm => "prewarm('table')",
            Utility::EvictRelation => "evict_relation('table')",
            Utility::ReadStreamForBlocks => "read_stream_for_blocks('table', ARRAY[block, …])",
            Utility::VerifyIndex => "verify_index('index')",
        }
    }

    /// The columns of the row it returns.
    pub fn columns(self) -> &'static [ColumnSpec] {
        match self {
            Utility::Prewarm => PREWARM,
            Utility::EvictRelation => EVICT_RELATION,
            Utility::ReadStreamForBlocks => READ_STREAM_FOR_BLOCKS,
            Utility::VerifyIndex => VERIFY_INDEX,
        }
    }
}

/// A call of a utility function.
pub struct UtilityCall {
    pub utility: Utility,
    /// The table it works on (`verify_index`'s: the index's table, which
    /// it holds exclusively itself rather than shared with the statement).
    pub table: Arc<TableDef>,
    /// The index (`verify_index` only).
    pub index: Option<String>,
    /// Blocks to read (`read_stream_for_blocks` only).
    pub blocks: Vec<u32>,
}

impl UtilityCall {
    /// Calls it; returns the values of [`Utility::columns`].
    pub(crate) fn run(&self, s: &mut Session) -> Result<Vec<Value>, ExecError> {
        let rel = self.table.heap.rel;
        let limits = s.stream_limits();
        Ok(match self.utility {
            Utility::VerifyIndex => {
                let name = self.index.as_deref().unwrap_or_default();
                vec![big(super::index::verify_index(s, name)?)]
            }
            Utility::Prewarm => {
                let report = crate::tools::prewarm(&mut s.buf, rel, Fork::Main, limits)?;
                vec![big(report.blocks)]
            }
            Utility::EvictRelation => {
                let outcome = s.buf.evict_relation(rel)?;
                vec![big(u64::from(outcome.evicted))]
            }
            Utility::ReadStreamForBlocks => {
                let nblocks = s.buf.pool().relation(rel).nblocks(Fork::Main)?;
                if let Some(&block) = self.blocks.iter().find(|&&b| b >= nblocks) {
                    return Err(ExecError::BlockOutOfRange {
                        table: self.table.name().to_string(),
                        block,
                        nblocks,
                    });
                }
                let r = crate::tools::read_stream_for_blocks(
                    &mut s.buf,
                    rel,
                    Fork::Main,
                    &self.blocks,
                    limits,
                )?;
                vec![
                    big(r.blocks),
                    big(r.hits),
                    big(r.reads),
                    big(r.ios),
                    big(r.foreign_ios),
                    big(r.waits),
                    Value::Double(r.seconds * 1000.0),
                ]
            }
        })
    }
}
