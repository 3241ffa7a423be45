//! The catalog: tables and their columns, stored as heap tuples in two
//! catalog relations and cached in memory.
//!
//! ```text
//! relation 1, tables:  oid integer, name text, rel integer, fillfactor integer
//! relation 2, columns: table_oid integer, attnum integer, name text,
//!                      type integer, not_null boolean
//! relation 3, indexes: oid integer, name text, table_oid integer,
//!                      rel integer, flags integer, keys text
//! relation 4, roles:   see roles.rs
//! ```
//!
//! Indexes are in `indexes.rs`; roles (relation 4) and their SCRAM
//! passwords in `roles.rs` and `scram.rs`.
//!
//! CREATE TABLE is transactional, as PostgreSQL's: its catalog rows carry
//! the creating transaction's id, and the table is *pending* until that
//! transaction ends. A pending table is in the cache with its creator
//! ([`TableDef::creator`]): only statements of that transaction find it
//! ([`Catalog::table_for`]), another CREATE TABLE of the name is refused
//! while it is pending, and the transaction's end either publishes it
//! ([`Catalog::commit_created`]) or removes it with its files
//! ([`Catalog::abort_created`], PostgreSQL's pending deletes at abort).
//! While pending, its pages skip the WAL (see `heap`); the commit syncs its
//! files first. DROP TABLE deletes the rows of the table, its columns and
//! its indexes as its transaction's changes; the AccessExclusive lock
//! keeps everyone else out until the transaction ends, and the cache
//! forgets the table and its files go once the commit is durable
//! ([`Catalog::commit_dropped`]); an abort changes nothing more. It is
//! still refused inside a transaction block.
//!
//! DDL is crash-safe through the WAL: CREATE TABLE logs the file's creation
//! before creating it and its catalog rows after, which count once the
//! creating transaction's commit is durable; DROP TABLE's deletions count
//! the same way (all of a table's rows or none, whenever a crash comes),
//! and the files' removal is logged and durable before they go, after the
//! commit. Replay repeats both (replaying a creation never empties a
//! file that exists: a table whose load skipped the WAL keeps what its
//! commit synced), and start-up after a crash removes a table file the
//! catalog does not know (created by a transaction that never committed).
//! The cache is loaded by scanning both relations when the data directory
//! opens, counting the rows whose inserting transaction committed, and
//! changed together with them under the catalog lock.
//!
//! A statement locks its tables (`txn/locks.rs`) until its transaction
//! ends; DROP TABLE takes the AccessExclusive lock, so a table's files are
//! never removed under a running scan or a transaction that wrote it.

use std::collections::BTreeMap;
use std::sync::Arc;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};
use thiserror::Error;

mod indexes;
mod roles;
pub mod scram;
pub mod statistics;
mod truncate;

pub use indexes::{quote_identifier, refuses_null, IndexColumn, IndexDef, IndexKind};
pub use roles::{
    current_role_name, role_name_for_uid, RoleDef, RoleError, RoleOptions, BOOTSTRAP_ROLE_OID,
    ROLES_REL,
};
pub use truncate::Truncation;
// `Dropped` is defined below, beside `drop_table`.

use crate::buffer::{BufferError, BufferSession};
use crate::heap::tuple::{decode, encode};
use crate::heap::{Heap, HeapError, HeapTable, InsertState, ScanControl, Tid, Writer};
use crate::stream::StreamLimits;
use crate::txn::{CommandId, WaitLimits, Xid, FROZEN_XID, INVALID_XID};
use crate::types::{ColumnType, Value};
use crate::wal::record::{SMGR_CREATE, SMGR_DROP};
use crate::wal::{Rmgr, Wal, WalError};

pub const TABLES_REL: u32 = 1;
pub const COLUMNS_REL: u32 = 2;
pub const INDEXES_REL: u32 = 3;

/// Who deletes catalog rows: they are written frozen, one change at a
/// time under the catalog's lock, so no transaction holds one that
/// another would wait for.
pub(crate) const CATALOG_WRITER: Writer = Writer {
    xid: FROZEN_XID,
    cid: 0,
    waits: WaitLimits::DEFAULT,
};

/// Relation numbers of user tables start here (as PostgreSQL's do).
pub const FIRST_USER_REL: u32 = 16384;
/// The one database a data directory holds, by the name clients ask for
/// (PostgreSQL's default maintenance database).
pub const DATABASE_NAME: &str = "postgres";
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
    #[error("relation \"{0}\" already exists")]
    RelationExists(String),
    #[error("index \"{0}\" does not exist")]
    NoSuchIndex(String),
    #[error(
        "table \"{0}\" is being created by a transaction still in progress; try again when it ends"
    )]
    CreationInProgress(String),
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

impl CatalogError {
    /// PostgreSQL's SQLSTATE for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            CatalogError::Storage(e) => e.sqlstate(),
            CatalogError::Heap(e) => e.sqlstate(),
            CatalogError::Buffer(e) => e.sqlstate(),
            CatalogError::Wal(e) => e.sqlstate(),
            CatalogError::TableExists(_) | CatalogError::RelationExists(_) => "42P07",
            CatalogError::NoSuchIndex(_) => "42704", // undefined_object
            CatalogError::NoSuchTable(_) => "42P01",
            CatalogError::DuplicateColumn { .. } => "42701",
            // PostgreSQL allows a table without columns; we do not.
            CatalogError::NoColumns(_) => "0A000",
            // Another session's transaction holds the table (PostgreSQL
            // would wait for its lock instead).
            CatalogError::CreationInProgress(_) | CatalogError::InUse(_) => "55006",
            CatalogError::Damaged(_) => "XX001",
        }
    }
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
    /// Where its catalog rows are, for DROP.
    rows: Vec<(u32, Tid)>,
    /// The transaction that created it, while that transaction runs
    /// ([`INVALID_XID`] once it committed, and for every table loaded).
    created_by: AtomicU32,
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
            rows,
            created_by: AtomicU32::new(INVALID_XID),
        }
    }

    pub fn name(&self) -> &str {
        &self.heap.name
    }

    /// The transaction that created the table and has not ended yet (only
    /// its statements see the table), or None for a committed table.
    pub fn creator(&self) -> Option<Xid> {
        match self.created_by.load(Ordering::SeqCst) {
            INVALID_XID => None,
            xid => Some(xid),
        }
    }

    /// True if a statement of transaction `viewer` sees the table.
    fn visible_to(&self, viewer: Option<Xid>) -> bool {
        self.creator().is_none_or(|creator| Some(creator) == viewer)
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
    /// Indexes by name and by table (see `indexes.rs`).
    indexes: RwLock<indexes::IndexCache>,
    /// Roles by name (see `roles.rs`).
    roles: RwLock<roles::RoleCache>,
    /// Serialises DDL.
    ddl: Mutex<()>,
    /// The highest oid and relation number any catalog row had at load,
    /// tables left out as damaged included, and any table created since
    /// (committed or not): new tables are numbered above them, so that
    /// what a damaged catalog lost is never overwritten, and the number of
    /// a table whose creation rolled back is not reused while its
    /// creation record may still be replayed.
    numbered_up_to: Mutex<(u32, u32)>,
    /// Counts the changes of the tables and indexes in the cache (one
    /// created, dropped, or whose creation rolled back): a plan kept
    /// across statements (a prepared statement's) is planned again once
    /// it moved. Bumped after the change is in the cache, so that a plan
    /// made after reading it saw every change up to that count.
    generation: AtomicU64,
}

/// The snapshot the catalog is loaded with: no transaction is running
/// when a data directory opens, so a row counts if the transaction that
/// inserted it committed (the frozen id counts as committed) and no
/// committed one deleted it.
fn catalog_snapshot() -> crate::txn::Snapshot {
    crate::txn::Snapshot {
        xmin: Xid::MAX,
        xmax: Xid::MAX,
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
        for rel in [TABLES_REL, COLUMNS_REL, INDEXES_REL, ROLES_REL] {
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
        let indexes = indexes::load(s, heap, &tables, &mut numbered_up_to, &mut rels, lenient)?;
        let roles = roles::load(s, heap, lenient)?;
        Ok(Catalog {
            tables: RwLock::new(tables),
            indexes: RwLock::new(indexes),
            roles: RwLock::new(roles),
            ddl: Mutex::new(()),
            numbered_up_to: Mutex::new(numbered_up_to),
            generation: AtomicU64::new(0),
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

    /// The committed table called `name`.
    pub fn table(&self, name: &str) -> Result<Arc<TableDef>, CatalogError> {
        self.table_for(name, None)
    }

    /// The table called `name` as a statement of transaction `viewer` sees
    /// it: committed, or created by `viewer` itself.
    pub fn table_for(
        &self,
        name: &str,
        viewer: Option<Xid>,
    ) -> Result<Arc<TableDef>, CatalogError> {
        self.tables
            .read()
            .get(name)
            .filter(|t| t.visible_to(viewer))
            .cloned()
            .ok_or_else(|| CatalogError::NoSuchTable(name.to_string()))
    }

    /// The count of changes to the tables and indexes in the cache (see
    /// the field): read it before planning, and a plan made then is
    /// current while it is the same.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Counts a change of the cache's tables or indexes, once it is in.
    pub(crate) fn changed(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// True if `table` is still the catalog's entry under its name (not
    /// dropped, nor its creation rolled back).
    pub fn holds(&self, table: &Arc<TableDef>) -> bool {
        self.tables
            .read()
            .get(table.name())
            .is_some_and(|t| Arc::ptr_eq(t, table))
    }

    /// Every relation's name by relation number: the catalog's own and the
    /// tables (for listings such as the buffer pool's).
    pub fn relation_names(&self) -> std::collections::HashMap<u32, String> {
        [tables_heap(), columns_heap(), indexes::indexes_heap()]
            .into_iter()
            .chain([roles::roles_heap()])
            .map(|t| (t.rel, t.name))
            .chain(
                self.tables
                    .read()
                    .values()
                    .map(|t| (t.heap.rel, t.name().to_string())),
            )
            .chain(
                self.indexes
                    .read()
                    .values()
                    .map(|i| (i.rel, i.name.clone())),
            )
            .collect()
    }

    /// The column types of every table, committed or not, by oid (what
    /// the statistics file is checked against).
    pub fn column_types_by_oid(&self) -> std::collections::HashMap<u32, Vec<ColumnType>> {
        self.tables
            .read()
            .values()
            .map(|t| (t.oid, t.heap.types.clone()))
            .collect()
    }

    /// The committed tables.
    pub fn tables(&self) -> Vec<Arc<TableDef>> {
        self.tables_for(None)
    }

    /// The tables a statement of transaction `viewer` sees: committed, or
    /// created by `viewer` itself (as [`Catalog::table_for`]).
    pub fn tables_for(&self, viewer: Option<Xid>) -> Vec<Arc<TableDef>> {
        self.tables
            .read()
            .values()
            .filter(|t| t.visible_to(viewer))
            .cloned()
            .collect()
    }

    /// Creates a table and its (empty) relation for transaction `xid`
    /// (command `cid`): pending until the transaction ends, which must
    /// call [`Catalog::commit_created`] or [`Catalog::abort_created`] with
    /// it. Its pages skip the WAL until then. Returns None if the table
    /// existed and `if_not_exists` was given.
    #[allow(clippy::too_many_arguments)]
    pub fn create_table(
        &self,
        s: &mut BufferSession,
        heap: &Heap,
        name: &str,
        columns: Vec<ColumnDef>,
        fillfactor: u8,
        if_not_exists: bool,
        (xid, cid): (Xid, CommandId),
    ) -> Result<Option<Arc<TableDef>>, CatalogError> {
        assert!(
            xid >= crate::txn::FIRST_NORMAL_XID,
            "a table is created by a transaction"
        );
        let _ddl = self.ddl.lock();
        if self.indexes.read().contains(name) {
            return if if_not_exists {
                Ok(None)
            } else {
                Err(CatalogError::RelationExists(name.to_string()))
            };
        }
        if let Some(existing) = self.tables.read().get(name) {
            return match existing.creator() {
                Some(creator) if creator != xid => {
                    Err(CatalogError::CreationInProgress(name.to_string()))
                }
                _ if if_not_exists => Ok(None),
                _ => Err(CatalogError::TableExists(name.to_string())),
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
        let (oid, rel, relation) = self.allocate_numbers(s)?;
        log_smgr(heap.wal(), SMGR_CREATE, rel)?;
        relation.create(crate::storage::Fork::Main)?;
        // From here on a failure removes the file again (nothing else
        // knows the table yet, so no transaction end would).
        heap.skip_wal(rel, xid);
        let inserted = Self::insert_rows(s, heap, oid, name, rel, fillfactor, &columns, (xid, cid));
        let rows = match inserted {
            Ok(rows) => rows,
            Err(e) => {
                let removed = log_smgr(heap.wal(), SMGR_DROP, rel)
                    .map_err(CatalogError::from)
                    .and_then(|_| Self::remove_relation(s, heap, rel, std::time::Instant::now()));
                if let Err(cleanup) = removed {
                    log::error!("CREATE TABLE {name} failed ({e}); its file, relation {rel}, could not be removed: {cleanup}");
                }
                return Err(e);
            }
        };
        let def = TableDef::new(oid, name.to_string(), rel, fillfactor, columns, rows);
        def.created_by.store(xid, Ordering::SeqCst);
        let def = Arc::new(def);
        self.tables
            .write()
            .insert(name.to_string(), Arc::clone(&def));
        self.changed();
        Ok(Some(def))
    }

    /// An oid and a relation number for a new table or index, above every
    /// one in use or used since the catalog was loaded, and the relation
    /// (no file yet). The caller holds the DDL lock.
    fn allocate_numbers(
        &self,
        s: &mut BufferSession,
    ) -> Result<(u32, u32, Arc<crate::storage::SmgrRelation>), CatalogError> {
        let mut numbered = self.numbered_up_to.lock();
        let (mut oid, mut rel) = *numbered;
        for t in self.tables.read().values() {
            oid = oid.max(t.oid);
            rel = rel.max(t.heap.rel);
        }
        for i in self.indexes.read().values() {
            oid = oid.max(i.oid);
            rel = rel.max(i.rel);
        }
        let oid = oid + 1;
        let mut rel = (rel + 1).max(FIRST_USER_REL);
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
        *numbered = (oid, rel);
        Ok((oid, rel, relation))
    }

    /// Inserts a new table's catalog rows as written by (`xid`, `cid`),
    /// returning where they went.
    #[allow(clippy::too_many_arguments)]
    fn insert_rows(
        s: &mut BufferSession,
        heap: &Heap,
        oid: u32,
        name: &str,
        rel: u32,
        fillfactor: u8,
        columns: &[ColumnDef],
        (xid, cid): (Xid, CommandId),
    ) -> Result<Vec<(u32, Tid)>, CatalogError> {
        let mut rows = Vec::new();
        let mut insert = |s: &mut BufferSession, table: &HeapTable, values: &[Value]| {
            rows.push((
                table.rel,
                Self::insert_row(s, heap, table, values, (xid, cid))?,
            ));
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
        Ok(rows)
    }

    /// Inserts one row into catalog relation `table` as written by
    /// (`xid`, `cid`), returning where it went.
    fn insert_row(
        s: &mut BufferSession,
        heap: &Heap,
        table: &HeapTable,
        values: &[Value],
        (xid, cid): (Xid, CommandId),
    ) -> Result<Tid, CatalogError> {
        let t = encode(&table.types, values, xid, cid).map_err(HeapError::from)?;
        let mut state = InsertState::default();
        let tid = heap.insert(s, table, &t, &mut state);
        state.finish(s);
        Ok(tid?)
    }

    /// Publishes the tables transaction `xid` created, once its commit is
    /// recorded: from now on every statement sees them. Their files were
    /// synced before the commit was logged (`Heap::end_wal_skip`).
    pub fn commit_created(&self, xid: Xid, created: &[Arc<TableDef>]) {
        for def in created {
            let was = def.created_by.swap(INVALID_XID, Ordering::SeqCst);
            assert_eq!(
                was,
                xid,
                "table {} published by another transaction",
                def.name()
            );
            debug_assert!(self.holds(def), "a pending table left the catalog");
        }
    }

    /// Removes the tables transaction `xid` created, after it aborted:
    /// from the cache, then their buffers and files and those of their
    /// indexes (the constraints CREATE TABLE made), as DROP TABLE does
    /// (the removal is logged, so replay removes them too; the catalog
    /// rows stay, invisible, as their inserter aborted).
    pub fn abort_created(
        &self,
        s: &mut BufferSession,
        heap: &Heap,
        xid: Xid,
        created: &[Arc<TableDef>],
    ) -> Result<(), CatalogError> {
        let _ddl = self.ddl.lock();
        let started = std::time::Instant::now();
        let mut first_error = None;
        for def in created {
            assert_eq!(
                def.creator(),
                Some(xid),
                "table {} aborted by another transaction",
                def.name()
            );
            {
                let mut tables = self.tables.write();
                if tables.get(def.name()).is_some_and(|t| Arc::ptr_eq(t, def)) {
                    tables.remove(def.name());
                }
            }
            self.changed();
            // Its constraints' indexes first: they name the table.
            let removed = self
                .abort_indexes_of(s, heap, def, started)
                .and_then(|()| {
                    log_smgr(heap.wal(), SMGR_DROP, def.heap.rel).map_err(CatalogError::from)
                })
                .and_then(|_| Self::remove_relation(s, heap, def.heap.rel, started));
            if let Err(e) = removed {
                // Start-up after a crash removes files no table owns; a
                // clean shutdown leaves them until then.
                log::error!(
                    "could not remove the files of table \"{}\" (relation {}), whose creation rolled back: {e}",
                    def.name(),
                    def.heap.rel
                );
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Discards every buffer of `rel` (waiting, bounded, for the brief pins
    /// of a checkpoint or a victim search) and removes its files: the end
    /// of a dropped table, or of one whose creation rolled back.
    fn remove_relation(
        s: &mut BufferSession,
        heap: &Heap,
        rel: u32,
        started: std::time::Instant,
    ) -> Result<(), CatalogError> {
        while s.discard_relation(rel)?.skipped > 0 {
            if started.elapsed() >= DROP_WAIT * 2 {
                log::error!("relation {rel}: buffers stayed pinned; they are left in the pool");
                break;
            }
            std::thread::sleep(DROP_PIN_POLL);
        }
        s.pool().relation(rel).unlink()?;
        s.pool().forget_written_files(rel);
        heap.forget(rel);
        Ok(())
    }

    /// Drops table `def` and its indexes for the transaction `by` writes
    /// as: their catalog rows are deleted as that transaction's changes
    /// (so a crash before its commit is durable brings all of them back,
    /// and one after takes all of them: the rows of one table never part).
    /// The cache and the files keep them until the commit:
    /// [`Catalog::commit_dropped`] removes both; an abort leaves them. The caller holds
    /// the table in AccessExclusive mode (no statement uses it), and found
    /// it since it took the lock (`def` is the table, not one dropped).
    pub fn drop_table(
        &self,
        s: &mut BufferSession,
        heap: &Heap,
        def: &Arc<TableDef>,
        by: &Writer,
    ) -> Result<Dropped, CatalogError> {
        let _ddl = self.ddl.lock();
        let name = def.name();
        // DROP runs outside transaction blocks, so it created no table.
        assert!(def.creator().is_none(), "dropping a pending table");
        assert!(self.holds(def), "table {name} was dropped under its lock");
        let indexes: Vec<Arc<IndexDef>> = self.indexes_of(def).to_vec();
        for index in &indexes {
            if let Some(tid) = index.row() {
                heap.delete(s, &indexes::indexes_heap(), tid, by, None)?;
            }
        }
        for &(rel, tid) in &def.rows {
            let table = if rel == TABLES_REL {
                tables_heap()
            } else {
                columns_heap()
            };
            heap.delete(s, &table, tid, by, None)?;
        }
        // The cache keeps the table until the commit (`commit_dropped`):
        // whoever looks it up meanwhile waits for its lock and then finds
        // it gone, and its name stays taken, so an abort has nothing to
        // put back (and no one else's table of that name to collide with).
        Ok(Dropped {
            table: Arc::clone(def),
            indexes,
        })
    }

    /// After the dropping transaction committed: removes the files of the
    /// tables it dropped and of their indexes (the removal logged and
    /// durable first; a file that cannot be removed is left for start-up
    /// after a crash, which removes files no catalog row names).
    pub fn commit_dropped(
        &self,
        s: &mut BufferSession,
        heap: &Heap,
        dropped: &[Dropped],
    ) -> Result<(), CatalogError> {
        if dropped.is_empty() {
            // Most transactions: no lock, and kept plans stay current.
            return Ok(());
        }
        let _ddl = self.ddl.lock();
        for d in dropped {
            {
                let mut tables = self.tables.write();
                let name = d.table.name();
                assert!(
                    tables.get(name).is_some_and(|t| Arc::ptr_eq(t, &d.table)),
                    "table {name} changed while its drop held it"
                );
                tables.remove(name);
            }
            let mut cached = self.indexes.write();
            for index in &d.indexes {
                cached.remove(&index.name);
            }
        }
        self.changed();
        self.remove_files(s, heap, dropped.iter().flat_map(Dropped::rels))
    }
}

/// A table dropped by a transaction that has not ended, with its indexes:
/// gone from the cache, its files still there.
#[derive(Debug)]
pub struct Dropped {
    pub table: Arc<TableDef>,
    pub indexes: Vec<Arc<IndexDef>>,
}

impl Dropped {
    /// The relation numbers whose files go when the drop commits.
    pub fn rels(&self) -> impl Iterator<Item = u32> + '_ {
        std::iter::once(self.table.heap.rel).chain(self.indexes.iter().map(|i| i.rel))
    }
}

/// Logs a relation file's creation or removal (data: rel, fork).
fn log_smgr(wal: &Wal, info: u8, rel: u32) -> Result<crate::wal::Lsn, WalError> {
    let mut data = rel.to_le_bytes().to_vec();
    data.push(crate::storage::Fork::Main as u8);
    wal.insert(Rmgr::Smgr, info, 0, &[], &data)
}
