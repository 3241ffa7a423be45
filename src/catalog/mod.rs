//! The catalog: tables and their columns, stored as heap tuples in two
//! catalog relations and cached in memory.
//!
//! ```text
//! relation 1, tables:  oid integer, name text, rel integer, fillfactor integer
//! relation 2, columns: table_oid integer, attnum integer, name text,
//!                      type integer, not_null boolean
//! ```
//!
//! Catalog rows are written with the frozen transaction id, so they are
//! visible to every snapshot the moment they are written, and DDL takes
//! effect at once rather than at commit; that is why DDL is refused inside
//! a transaction block. Dropping a table deletes its rows the same way.
//!
//! DDL is crash-safe through the WAL: CREATE TABLE logs the file's creation
//! before creating it and its catalog rows after, and returns only once
//! the log is durable; DROP TABLE logs the rows' deletion and the file's
//! removal and makes them durable before removing the files. Replay
//! repeats both, and start-up after a crash removes a table file the
//! catalog does not know (created, then the crash came before its rows).
//! The cache is loaded by scanning both relations when the data directory
//! opens and changed together with them under the catalog lock.
//!
//! A statement holds its table's `in_use` lock shared; DROP TABLE takes it
//! exclusively, so a table's files are never removed under a running scan.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use thiserror::Error;

use crate::buffer::{BufferError, BufferSession};
use crate::heap::tuple::{decode, encode};
use crate::heap::{ColumnType, Heap, HeapError, HeapTable, InsertState, ScanControl, Tid, Value};
use crate::stream::StreamLimits;
use crate::txn::FROZEN_XID;
use crate::wal::record::{SMGR_CREATE, SMGR_DROP};
use crate::wal::{Rmgr, Wal, WalError};

pub const TABLES_REL: u32 = 1;
pub const COLUMNS_REL: u32 = 2;
/// Relation numbers of user tables start here (as PostgreSQL's do).
pub const FIRST_USER_REL: u32 = 16384;
/// How often DROP TABLE looks again for pins on the table's buffers.
const DROP_PIN_POLL: std::time::Duration = std::time::Duration::from_millis(1);
/// How long DROP TABLE waits for statements using the table.
pub const DROP_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

#[derive(Debug, Error)]
pub enum CatalogError {
    #[error(transparent)]
    Storage(#[from] crate::storage::StorageError),
    #[error(transparent)]
    Heap(#[from] HeapError),
    #[error(transparent)]
    Buffer(#[from] BufferError),
    #[error(transparent)]
    Wal(#[from] WalError),
    #[error("table \"{0}\" already exists")]
    TableExists(String),
    #[error("table \"{0}\" does not exist")]
    NoSuchTable(String),
    #[error("column \"{column}\" is given twice in table \"{table}\"")]
    DuplicateColumn { table: String, column: String },
    #[error("table \"{0}\" must have at least one column")]
    NoColumns(String),
    #[error("table \"{0}\" is in use by another session's statement; try again when it ends")]
    InUse(String),
    #[error("the catalog is damaged: {0}; the data directory cannot be opened safely")]
    Damaged(String),
}

/// A column of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnDef {
    pub name: String,
    pub ty: ColumnType,
    pub not_null: bool,
}

/// A table, as the catalog knows it.
#[derive(Debug)]
pub struct TableDef {
    pub oid: u32,
    pub columns: Vec<ColumnDef>,
    pub heap: HeapTable,
    /// Held shared by statements using the table, exclusively by DROP.
    pub in_use: Arc<RwLock<()>>,
    /// Where its catalog rows are, for DROP.
    rows: Vec<(u32, Tid)>,
}

impl TableDef {
    fn new(
        oid: u32,
        name: String,
        rel: u32,
        fillfactor: u8,
        columns: Vec<ColumnDef>,
        rows: Vec<(u32, Tid)>,
    ) -> TableDef {
        TableDef {
            oid,
            heap: HeapTable {
                name,
                rel,
                types: columns.iter().map(|c| c.ty).collect(),
                fillfactor,
            },
            columns,
            in_use: Arc::new(RwLock::new(())),
            rows,
        }
    }

    pub fn name(&self) -> &str {
        &self.heap.name
    }

    /// Index of the column called `name`.
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }
}

fn tables_heap() -> HeapTable {
    HeapTable {
        name: "catalog tables".into(),
        rel: TABLES_REL,
        types: vec![
            ColumnType::Integer,
            ColumnType::Text,
            ColumnType::Integer,
            ColumnType::Integer,
        ],
        fillfactor: 100,
    }
}

fn columns_heap() -> HeapTable {
    HeapTable {
        name: "catalog columns".into(),
        rel: COLUMNS_REL,
        types: vec![
            ColumnType::Integer,
            ColumnType::Integer,
            ColumnType::Text,
            ColumnType::Integer,
            ColumnType::Boolean,
        ],
        fillfactor: 100,
    }
}

/// The cached catalog of one database.
pub struct Catalog {
    tables: RwLock<BTreeMap<String, Arc<TableDef>>>,
    /// Serialises DDL.
    ddl: Mutex<()>,
    /// The highest oid and relation number any catalog row had at load,
    /// tables left out as damaged included: new tables are numbered above
    /// them, so that what a damaged catalog lost is never overwritten.
    numbered_up_to: (u32, u32),
}

/// The snapshot catalog scans use: frozen rows only (all catalog rows).
fn catalog_snapshot() -> crate::txn::Snapshot {
    crate::txn::Snapshot {
        xmin: crate::txn::FIRST_NORMAL_XID,
        xmax: crate::txn::FIRST_NORMAL_XID,
        in_progress: Vec::new(),
        own: None,
        command: 0,
    }
}

/// Every row of a catalog relation, with where it is.
fn scan_rows(
    s: &mut BufferSession,
    heap: &Heap,
    table: &HeapTable,
) -> Result<Vec<(Tid, Vec<Value>)>, CatalogError> {
    let mut rows = Vec::new();
    let mut failure = None;
    let all = vec![true; table.types.len()];
    heap.scan(
        s,
        table,
        &catalog_snapshot(),
        StreamLimits::default(),
        |tid, t| {
            let mut v = Vec::new();
            match decode(&table.types, t, &all, &mut v) {
                Ok(()) => rows.push((tid, v)),
                Err(e) => failure = Some(format!("{}: {e}", table.name)),
            }
            ScanControl::Continue
        },
        || ScanControl::Continue,
    )?;
    match failure {
        Some(e) => Err(CatalogError::Damaged(e)),
        None => Ok(rows),
    }
}

impl Catalog {
    /// Creates the catalog relations of a new data directory.
    pub fn bootstrap(s: &mut BufferSession) -> Result<(), CatalogError> {
        for rel in [TABLES_REL, COLUMNS_REL] {
            s.pool().relation(rel).create(crate::storage::Fork::Main)?;
        }
        Ok(())
    }

    /// Loads the catalog.
    pub fn load(s: &mut BufferSession, heap: &Heap) -> Result<Catalog, CatalogError> {
        let rows = scan_rows(s, heap, &tables_heap())?;
        let column_rows = scan_rows(s, heap, &columns_heap())?;
        // oid -> (name, rel, fillfactor, catalog rows)
        type TableRow = (String, u32, u8, Vec<(u32, Tid)>);
        let mut numbered_up_to = (0u32, 0u32);
        let mut by_oid: BTreeMap<u32, TableRow> = BTreeMap::new();
        for (tid, v) in rows {
            match &v[..] {
                [Value::Integer(oid), Value::Text(name), Value::Integer(rel), Value::Integer(ff)] =>
                {
                    numbered_up_to.0 = numbered_up_to.0.max(*oid as u32);
                    numbered_up_to.1 = numbered_up_to.1.max(*rel as u32);
                    let row = (
                        name.clone(),
                        *rel as u32,
                        *ff as u8,
                        vec![(TABLES_REL, tid)],
                    );
                    if by_oid.insert(*oid as u32, row).is_some() {
                        return Err(CatalogError::Damaged(format!(
                            "two tables have oid {oid} (file base/{TABLES_REL})"
                        )));
                    }
                }
                other => return Err(CatalogError::Damaged(format!("table row {other:?}"))),
            }
        }
        let mut cols: BTreeMap<u32, BTreeMap<i32, ColumnDef>> = BTreeMap::new();
        for (tid, v) in column_rows {
            match &v[..] {
                [Value::Integer(oid), Value::Integer(attnum), Value::Text(name), Value::Integer(ty), Value::Boolean(nn)] =>
                {
                    let ty = ColumnType::from_code(*ty).ok_or_else(|| {
                        CatalogError::Damaged(format!("column {name} has type code {ty}"))
                    })?;
                    numbered_up_to.0 = numbered_up_to.0.max(*oid as u32);
                    let column = ColumnDef {
                        name: name.clone(),
                        ty,
                        not_null: *nn,
                    };
                    if cols
                        .entry(*oid as u32)
                        .or_default()
                        .insert(*attnum, column)
                        .is_some()
                    {
                        return Err(CatalogError::Damaged(format!(
                            "table oid {oid} has two columns numbered {attnum} (file base/{COLUMNS_REL})"
                        )));
                    }
                    if let Some(t) = by_oid.get_mut(&(*oid as u32)) {
                        t.3.push((COLUMNS_REL, tid));
                    }
                }
                other => return Err(CatalogError::Damaged(format!("column row {other:?}"))),
            }
        }
        // With zero_damaged_pages, a zeroed catalog page loses the rows on
        // it; the tables they described are left out with a warning
        // instead of keeping the whole directory closed.
        let lenient = s.settings.zero_damaged_pages;
        let mut tables = BTreeMap::new();
        let mut rels = std::collections::BTreeSet::new();
        for (oid, (name, rel, fillfactor, rows)) in by_oid {
            let columns = cols.remove(&oid).unwrap_or_default();
            let problem =
                Self::check_table(oid, rel, fillfactor, &columns, &mut rels).or_else(|| {
                    tables
                        .contains_key(&name)
                        .then(|| "is in the catalog twice".into())
                });
            if let Some(what) = problem {
                let what = format!("table \"{name}\" {what}");
                if !lenient {
                    return Err(CatalogError::Damaged(what));
                }
                log::warn!(
                    "the catalog is damaged: {what}; with zero_damaged_pages the table is left out"
                );
                continue;
            }
            let columns: Vec<ColumnDef> = columns.into_values().collect();
            let def = TableDef::new(oid, name.clone(), rel, fillfactor, columns, rows);
            tables.insert(name, Arc::new(def));
        }
        if let Some(oid) = cols.keys().next() {
            let what = format!(
                "columns of table oid {oid} are in the catalog but the table is not (file base/{TABLES_REL})"
            );
            if !lenient {
                return Err(CatalogError::Damaged(what));
            }
            log::warn!("the catalog is damaged: {what}; with zero_damaged_pages they are ignored");
        }
        Ok(Catalog {
            tables: RwLock::new(tables),
            ddl: Mutex::new(()),
            numbered_up_to,
        })
    }

    /// What is wrong with a table's catalog entry, if anything: it has
    /// columns numbered 1..=n (a gap is a lost column row, and its tuples
    /// would be decoded with the wrong types), a relation number of its
    /// own and a fillfactor CREATE TABLE accepts.
    fn check_table(
        oid: u32,
        rel: u32,
        fillfactor: u8,
        columns: &BTreeMap<i32, ColumnDef>,
        rels: &mut std::collections::BTreeSet<u32>,
    ) -> Option<String> {
        if columns.is_empty() {
            return Some(format!(
                "(oid {oid}) has no columns in the catalog's columns relation (file base/{COLUMNS_REL})"
            ));
        }
        if let Some((expected, found)) = (1..)
            .zip(columns.keys())
            .find(|(expected, found)| expected != *found)
        {
            return Some(format!(
                "(oid {oid}) lacks column {expected} in the catalog (found column {found} next)"
            ));
        }
        if rel < FIRST_USER_REL || !rels.insert(rel) {
            return Some(format!(
                "has relation number {rel}, which is not a table's or is used twice"
            ));
        }
        if !(10..=100).contains(&fillfactor) {
            return Some(format!("has fillfactor {fillfactor}"));
        }
        None
    }

    pub fn table(&self, name: &str) -> Result<Arc<TableDef>, CatalogError> {
        self.tables
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| CatalogError::NoSuchTable(name.to_string()))
    }

    /// Every relation's name by relation number: the catalog's own and the
    /// tables (for listings such as the buffer pool's).
    pub fn relation_names(&self) -> std::collections::HashMap<u32, String> {
        [tables_heap(), columns_heap()]
            .into_iter()
            .map(|t| (t.rel, t.name))
            .chain(
                self.tables
                    .read()
                    .values()
                    .map(|t| (t.heap.rel, t.name().to_string())),
            )
            .collect()
    }

    pub fn tables(&self) -> Vec<Arc<TableDef>> {
        self.tables.read().values().cloned().collect()
    }

    /// Creates a table and its (empty) relation. Returns false if it
    /// existed and `if_not_exists` was given.
    pub fn create_table(
        &self,
        s: &mut BufferSession,
        heap: &Heap,
        name: &str,
        columns: Vec<ColumnDef>,
        fillfactor: u8,
        if_not_exists: bool,
    ) -> Result<bool, CatalogError> {
        let _ddl = self.ddl.lock();
        if self.tables.read().contains_key(name) {
            return if if_not_exists {
                Ok(false)
            } else {
                Err(CatalogError::TableExists(name.to_string()))
            };
        }
        if columns.is_empty() {
            return Err(CatalogError::NoColumns(name.to_string()));
        }
        for (i, c) in columns.iter().enumerate() {
            if columns[..i].iter().any(|d| d.name == c.name) {
                return Err(CatalogError::DuplicateColumn {
                    table: name.to_string(),
                    column: c.name.clone(),
                });
            }
        }
        let existing = self.tables.read();
        let oid = existing
            .values()
            .map(|t| t.oid)
            .chain([self.numbered_up_to.0])
            .max()
            .unwrap_or(0)
            + 1;
        let mut rel = existing
            .values()
            .map(|t| t.heap.rel)
            .chain([self.numbered_up_to.1])
            .max()
            .map_or(FIRST_USER_REL, |r| r + 1)
            .max(FIRST_USER_REL);
        drop(existing);
        // Skip numbers whose files exist (left by a crash between creating
        // them and writing the catalog row, or a table a damaged catalog
        // lost: not ours to remove) or whose blocks are still in the pool
        // (a dropped table's, pinned for a moment when it was dropped).
        let relation = loop {
            let relation = s.pool().relation(rel);
            let has_files = crate::storage::Fork::ALL
                .iter()
                .any(|&f| relation.exists(f));
            if !has_files && s.pool().relation_buffers(rel).0 == 0 {
                break relation;
            }
            rel = rel
                .checked_add(1)
                .ok_or_else(|| CatalogError::Damaged("relation numbers are used up".to_string()))?;
        };
        log_smgr(heap.wal(), SMGR_CREATE, rel)?;
        relation.create(crate::storage::Fork::Main)?;
        let mut rows = Vec::new();
        let mut insert = |s: &mut BufferSession, table: &HeapTable, values: &[Value]| {
            let t = encode(&table.types, values, FROZEN_XID, 0).map_err(HeapError::from)?;
            let mut state = InsertState::default();
            let tid = heap.insert(s, table, &t, &mut state);
            state.finish(s);
            rows.push((table.rel, tid?));
            Ok::<_, CatalogError>(())
        };
        insert(
            s,
            &tables_heap(),
            &[
                Value::Integer(oid as i32),
                Value::Text(name.to_string()),
                Value::Integer(rel as i32),
                Value::Integer(fillfactor as i32),
            ],
        )?;
        for (attnum, c) in columns.iter().enumerate() {
            insert(
                s,
                &columns_heap(),
                &[
                    Value::Integer(oid as i32),
                    Value::Integer(attnum as i32 + 1),
                    Value::Text(c.name.clone()),
                    Value::Integer(c.ty.code()),
                    Value::Boolean(c.not_null),
                ],
            )?;
        }
        // Durable before the table is announced: a crash after this
        // returns keeps it.
        heap.wal().flush_all()?;
        let def = TableDef::new(oid, name.to_string(), rel, fillfactor, columns, rows);
        self.tables.write().insert(name.to_string(), Arc::new(def));
        Ok(true)
    }

    /// Drops a table: its catalog rows, buffers and files. Returns false if
    /// it did not exist and `if_exists` was given.
    pub fn drop_table(
        &self,
        s: &mut BufferSession,
        heap: &Heap,
        name: &str,
        if_exists: bool,
    ) -> Result<bool, CatalogError> {
        let _ddl = self.ddl.lock();
        let def = match self.tables.read().get(name) {
            Some(def) => Arc::clone(def),
            None if if_exists => return Ok(false),
            None => return Err(CatalogError::NoSuchTable(name.to_string())),
        };
        let started = std::time::Instant::now();
        let Some(_exclusive) = def.in_use.try_write_for(DROP_WAIT) else {
            return Err(CatalogError::InUse(name.to_string()));
        };
        // No statement uses the table now, but a checkpoint or a victim
        // search may hold one of its buffers for a moment: wait for them
        // before changing anything, since the buffers must all go (one left
        // behind would be written to a removed file, or read back as a new
        // table's page).
        while s.pool().relation_buffers(def.heap.rel).1 > 0 {
            if started.elapsed() >= DROP_WAIT {
                return Err(CatalogError::InUse(name.to_string()));
            }
            std::thread::sleep(DROP_PIN_POLL);
        }
        for &(rel, tid) in &def.rows {
            let table = if rel == TABLES_REL {
                tables_heap()
            } else {
                columns_heap()
            };
            heap.delete(s, &table, tid, FROZEN_XID, 0, None)?;
        }
        // The rows' deletion and the files' removal are durable before
        // the files go (PostgreSQL's pending deletes at commit): a crash
        // then cannot bring the table back without its file.
        let lsn = log_smgr(heap.wal(), SMGR_DROP, def.heap.rel)?;
        heap.wal().flush(lsn)?;
        self.tables.write().remove(name);
        // A pin taken since the look above is as brief: try again until
        // every buffer is gone (bounded, like the wait above).
        while s.discard_relation(def.heap.rel)?.skipped > 0 {
            if started.elapsed() >= DROP_WAIT * 2 {
                log::error!(
                    "DROP TABLE {name}: buffers of relation {} stayed pinned; they are left in the pool",
                    def.heap.rel
                );
                break;
            }
            std::thread::sleep(DROP_PIN_POLL);
        }
        s.pool().relation(def.heap.rel).unlink()?;
        s.pool().forget_written_files(def.heap.rel);
        heap.forget(def.heap.rel);
        Ok(true)
    }
}

/// Logs a relation file's creation or removal (data: rel, fork).
fn log_smgr(wal: &Wal, info: u8, rel: u32) -> Result<crate::wal::Lsn, WalError> {
    let mut data = rel.to_le_bytes().to_vec();
    data.push(crate::storage::Fork::Main as u8);
    wal.insert(Rmgr::Smgr, info, 0, &[], &data)
}
