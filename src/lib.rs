//! aiostore: an embeddable storage engine built around asynchronous and
//! direct I/O, in the way the PostgreSQL AIO work describes it.
//!
//! The modules follow the layers of DESIGN.md §1, bottom-up; each uses only
//! the ones listed before it (`stats` and `inject` are used by all):
//!
//! - [`config`]: settings, defaults, ranges, sources;
//! - [`storage`]: relation forks in 1 GiB segment files, O_DIRECT, alignment;
//! - [`aio`]: handles, wait references, batches, methods, callbacks, results;
//! - [`page`]: page header, line pointers, checksums;
//! - [`buffer`]: the shared buffer pool, start/wait reads, write-back;
//! - [`stream`]: read streams with look-ahead and I/O combining;
//! - [`wal`]: the write-ahead log: records, concurrent insertion, group
//!   commit, segments, the control file, reading the log back;
//! - [`types`]: column types and values: ordering, casts, text input and
//!   output (it uses no other module, and every layer above may use it);
//! - [`txn`]: transaction ids, the commit log, MVCC snapshots;
//! - [`heap`]: heap tables, visibility, vacuum, the visibility map;
//! - [`btree`]: B-tree indexes;
//! - [`tidbitmap`]: TID bitmaps, exact or lossy per page, for bitmap heap
//!   scans;
//! - [`catalog`]: tables and columns, stored in heap pages;
//! - [`database`]: a data directory (lock, version, catalog) and sessions;
//! - [`exec`]: the executor: scans, filters, aggregates, sorts, data
//!   changes, EXPLAIN;
//! - [`sql`]: the SQL front end: parsing, planning, output formats;
//! - [`server`]: the PostgreSQL wire-protocol server (`aiostore serve`),
//!   a front end beside the CLI;
//! - [`stats`]: counters, histograms, the in-flight I/O view;
//! - [`inject`]: injection points for tests that force interleavings.
//!
//! `bench` holds the benchmark programs behind `aiostore bench …`, and
//! `crashtest` the kill-and-check harness behind `aiostore crashtest`.

pub mod aio;
pub mod bench;
pub mod btree;
pub mod buffer;
pub mod catalog;
pub mod config;
pub mod crashtest;
pub mod database;
pub mod exec;
pub mod heap;
pub mod inject;
pub mod local_arc;
pub mod page;
pub mod server;
pub mod sort;
pub mod sql;
pub mod stats;
pub mod storage;
pub mod stream;
pub mod tidbitmap;
pub mod tools;
pub mod txn;
pub mod types;
pub mod wal;
