//! Indexes in the catalog: one row each in relation 3, cached by name.
//!
//! An index row names its table by oid and its key as text, one entry per
//! key column: the column's number (from 1), then `d` if descending and
//! `f` if NULLs come first (`"2,1d"`: the second column ascending, then
//! the first descending with NULLs first, PostgreSQL's default for DESC).
//!
//! The flags column holds the index's [`IndexKind`]: bit 1 unique, bit 2
//! primary key, bit 4 a UNIQUE constraint's. A catalog written before bit 4
//! existed reads as it meant: a unique index without it is CREATE UNIQUE
//! INDEX's, and a primary key is a constraint either way.
//!
//! CREATE INDEX is not transactional here: it runs outside transaction
//! blocks, builds the index under the table's exclusive `in_use` lock (no
//! statement uses the table meanwhile), and then, if its name is still
//! free, inserts its row with the frozen transaction id and makes the log durable up to it before the
//! index is published, so that from then on it survives a crash as a
//! committed one does. A crash before leaves a file no row names, which
//! start-up removes (as it removes the file of a table whose creation did
//! not commit). DROP INDEX is the reverse, as DROP TABLE is.
//!
//! The exception is an index CREATE TABLE makes for a PRIMARY KEY or
//! UNIQUE constraint: its table is pending (see the catalog's module
//! comment), so the index is too. Its row carries the creating
//! transaction's id, like the table's rows, and counts only if that
//! transaction commits; an abort removes it with the table
//! ([`Catalog::abort_created`]). Table and indexes so come or go together,
//! crash or not: start-up removes the files of both if the commit was not
//! durable. Only the creating transaction sees the table, hence the index;
//! its name is taken for everyone meanwhile, as the table's is.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use super::CATALOG_WRITER;
use crate::btree::{IndexDesc, KeySpec, RootHint};
use crate::buffer::BufferSession;
use crate::heap::{Heap, HeapTable, Tid};
use crate::txn::{CommandId, Xid, FROZEN_XID, INVALID_XID};
use crate::types::{ColumnType, Value};
use crate::wal::record::{SMGR_CREATE, SMGR_DROP};

use super::{log_smgr, scan_rows, Catalog, CatalogError, TableDef, DROP_WAIT, INDEXES_REL};

/// A name as PostgreSQL's `quote_identifier` writes it: bare if it is
/// lower case letters, digits and underscores not starting with a digit,
/// else in double quotes with `"` doubled. (Keywords, which PostgreSQL
/// quotes too, are not told apart.)
pub fn quote_identifier(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// Whether column `column` of `table` refuses NULL: NOT NULL in its
/// catalog row, or a key column of its primary key (`indexes`, the
/// table's): one ALTER TABLE added keeps its columns NOT NULL through its
/// index, not their catalog rows.
pub fn refuses_null(table: &TableDef, indexes: &[Arc<IndexDef>], column: usize) -> bool {
    table.columns[column].not_null
        || indexes
            .iter()
            .any(|i| i.kind.primary() && i.columns.iter().any(|c| c.column == column))
}

/// A key column of an index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexColumn {
    /// The table column (0-based).
    pub column: usize,
    pub desc: bool,
    pub nulls_first: bool,
}

/// What an index is for, as PostgreSQL tells them apart: a plain index, a
/// unique one CREATE UNIQUE INDEX made, and one backing a UNIQUE or
/// PRIMARY KEY constraint, named after the constraint and dropped only
/// with it (ALTER TABLE … DROP CONSTRAINT, DROP TABLE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexKind {
    Plain,
    Unique,
    UniqueConstraint,
    PrimaryKey,
}

const FLAG_UNIQUE: i32 = 1;
const FLAG_PRIMARY: i32 = 2;
const FLAG_CONSTRAINT: i32 = 4;

impl IndexKind {
    /// Refuses a second live row with an equal key.
    pub fn unique(self) -> bool {
        self != IndexKind::Plain
    }

    pub fn primary(self) -> bool {
        self == IndexKind::PrimaryKey
    }

    /// Backs a constraint: DROP INDEX refuses it.
    pub fn constraint(self) -> bool {
        matches!(self, IndexKind::UniqueConstraint | IndexKind::PrimaryKey)
    }

    fn flags(self) -> i32 {
        match self {
            IndexKind::Plain => 0,
            IndexKind::Unique => FLAG_UNIQUE,
            IndexKind::UniqueConstraint => FLAG_UNIQUE | FLAG_CONSTRAINT,
            IndexKind::PrimaryKey => FLAG_UNIQUE | FLAG_PRIMARY | FLAG_CONSTRAINT,
        }
    }

    /// The kind a catalog row's flags mean (see the module comment), or
    /// None for a combination no version wrote.
    fn from_flags(flags: i32) -> Option<IndexKind> {
        let unique = flags & FLAG_UNIQUE != 0;
        let primary = flags & FLAG_PRIMARY != 0;
        let constraint = flags & FLAG_CONSTRAINT != 0;
        match (unique, primary, constraint) {
            _ if flags & !(FLAG_UNIQUE | FLAG_PRIMARY | FLAG_CONSTRAINT) != 0 => None,
            (false, false, false) => Some(IndexKind::Plain),
            (true, false, false) => Some(IndexKind::Unique),
            (true, false, true) => Some(IndexKind::UniqueConstraint),
            (true, true, _) => Some(IndexKind::PrimaryKey),
            _ => None,
        }
    }
}

/// An index, as the catalog knows it.
#[derive(Debug)]
pub struct IndexDef {
    pub oid: u32,
    pub name: String,
    pub table_oid: u32,
    pub rel: u32,
    pub kind: IndexKind,
    pub columns: Vec<IndexColumn>,
    /// Where its catalog row is (None until published).
    row: parking_lot::Mutex<Option<Tid>>,
    /// The oldest snapshot xmin that may read through the index
    /// ([`INVALID_XID`]: any). Set by a build that left out older versions
    /// of HOT chains some snapshot could still see (PostgreSQL's
    /// `indcheckxmin`, see `heap/hot.rs`): an older snapshot could need a
    /// version whose key the index lacks. Kept in memory only: after a
    /// restart no such snapshot is left.
    usable_from: AtomicU32,
    /// Where descents of this file start ([`RootHint`]).
    root: RootHint,
}

impl IndexDef {
    /// The same index in another file (TRUNCATE's), not yet published.
    pub(super) fn with_rel(old: &IndexDef, rel: u32) -> IndexDef {
        IndexDef {
            oid: old.oid,
            name: old.name.clone(),
            table_oid: old.table_oid,
            rel,
            kind: old.kind,
            columns: old.columns.clone(),
            row: parking_lot::Mutex::new(None),
            // An emptied table's index has no entry to lack.
            usable_from: AtomicU32::new(INVALID_XID),
            root: RootHint::default(),
        }
    }

    /// Whether a snapshot with xmin `xmin` may read through the index:
    /// every transaction that had deleted a version the build left out
    /// had ended before it was taken.
    pub fn usable_by(&self, xmin: Xid) -> bool {
        xmin >= self.usable_from.load(Ordering::Acquire)
    }

    /// Whether some snapshot may not read through the index.
    pub fn has_snapshot_limit(&self) -> bool {
        self.usable_from.load(Ordering::Acquire) != INVALID_XID
    }

    /// Makes the index usable only by snapshots whose xmin is at least
    /// `xid` (a transaction id not yet handed out when the build ended).
    pub fn set_usable_from(&self, xid: Xid) {
        debug_assert!(self.row().is_none(), "limited after it was published");
        self.usable_from.store(xid, Ordering::Release);
    }

    /// Where its catalog row is, once published.
    pub(super) fn row(&self) -> Option<Tid> {
        *self.row.lock()
    }

    pub(super) fn set_row(&self, tid: Tid) {
        *self.row.lock() = Some(tid);
    }

    /// Its catalog row's values.
    pub(super) fn row_values(&self) -> [Value; 6] {
        [
            Value::Integer(self.oid as i32),
            Value::Text(self.name.clone()),
            Value::Integer(self.table_oid as i32),
            Value::Integer(self.rel as i32),
            Value::Integer(self.kind.flags()),
            Value::Text(self.keys_text()),
        ]
    }

    /// Its key columns as `pg_get_indexdef` lists them, without the
    /// parentheses: `a, b DESC`, with the sort options that are not the
    /// default (`DESC` is NULLS FIRST, ascending NULLS LAST).
    pub fn key_text(&self, table: &TableDef) -> String {
        let key: Vec<String> = self
            .columns
            .iter()
            .map(|c| {
                let name = quote_identifier(&table.columns[c.column].name);
                match (c.desc, c.nulls_first) {
                    (false, false) | (true, true) => {
                        format!("{name}{}", if c.desc { " DESC" } else { "" })
                    }
                    (false, true) => format!("{name} NULLS FIRST"),
                    (true, false) => format!("{name} DESC NULLS LAST"),
                }
            })
            .collect();
        key.join(", ")
    }

    /// What the B-tree needs to know of the index on `table`.
    pub fn desc(&self, table: &TableDef) -> IndexDesc {
        IndexDesc {
            name: self.name.clone(),
            rel: self.rel,
            spec: KeySpec {
                types: self
                    .columns
                    .iter()
                    .map(|c| table.columns[c.column].ty)
                    .collect(),
                desc: self.columns.iter().map(|c| c.desc).collect(),
                nulls_first: self.columns.iter().map(|c| c.nulls_first).collect(),
            },
            unique: self.kind.unique(),
            column_names: self
                .columns
                .iter()
                .map(|c| table.columns[c.column].name.clone())
                .collect(),
            root: self.root.clone(),
        }
    }

    /// The key of a table row.
    pub fn key_of(&self, row: &[Value]) -> Vec<Value> {
        self.columns.iter().map(|c| row[c.column].clone()).collect()
    }

    fn keys_text(&self) -> String {
        self.columns
            .iter()
            .map(|c| {
                format!(
                    "{}{}{}",
                    c.column + 1,
                    if c.desc { "d" } else { "" },
                    if c.nulls_first { "f" } else { "" }
                )
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    fn parse_keys(text: &str, ncolumns: usize) -> Option<Vec<IndexColumn>> {
        text.split(',')
            .map(|part| {
                let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
                let rest = &part[digits.len()..];
                let n: usize = digits.parse().ok()?;
                if n == 0 || n > ncolumns || !matches!(rest, "" | "d" | "f" | "df") {
                    return None;
                }
                Some(IndexColumn {
                    column: n - 1,
                    desc: rest.contains('d'),
                    nulls_first: rest.contains('f'),
                })
            })
            .collect()
    }
}

/// The cached indexes: by name, and each table's list, oldest first.
/// Every INSERT, UPDATE, COPY and plan asks for its table's list, so the
/// list is kept ready (a shared slice, cloned by its reference count)
/// instead of gathered from every index of the database and sorted on
/// each statement; DDL, which is rare, rebuilds the one table's list. Both
/// maps change together, under the one lock the catalog holds this in.
#[derive(Default)]
pub(super) struct IndexCache {
    by_name: BTreeMap<String, Arc<IndexDef>>,
    by_table: HashMap<u32, Arc<[Arc<IndexDef>]>>,
}

impl IndexCache {
    pub(super) fn get(&self, name: &str) -> Option<&Arc<IndexDef>> {
        self.by_name.get(name)
    }

    pub(super) fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Arc<IndexDef>> {
        self.by_name.values()
    }

    /// The indexes of the table with oid `table_oid`, oldest first.
    pub(super) fn of(&self, table_oid: u32) -> Arc<[Arc<IndexDef>]> {
        self.by_table
            .get(&table_oid)
            .cloned()
            .unwrap_or_else(|| Arc::new([]))
    }

    pub(super) fn insert(&mut self, def: Arc<IndexDef>) {
        let table_oid = def.table_oid;
        let mut list: Vec<Arc<IndexDef>> = self.of(table_oid).to_vec();
        list.push(Arc::clone(&def));
        list.sort_by_key(|i| i.oid);
        let was = self.by_name.insert(def.name.clone(), def);
        assert!(was.is_none(), "two indexes of one name in the cache");
        self.by_table.insert(table_oid, list.into());
    }

    pub(super) fn remove(&mut self, name: &str) {
        let Some(def) = self.by_name.remove(name) else {
            return;
        };
        let list: Vec<Arc<IndexDef>> = self
            .of(def.table_oid)
            .iter()
            .filter(|i| !Arc::ptr_eq(i, &def))
            .cloned()
            .collect();
        if list.is_empty() {
            self.by_table.remove(&def.table_oid);
        } else {
            self.by_table.insert(def.table_oid, list.into());
        }
        debug_assert_eq!(
            self.by_table.values().map(|l| l.len()).sum::<usize>(),
            self.by_name.len(),
            "the index cache's maps disagree"
        );
    }
}

pub(super) fn indexes_heap() -> HeapTable {
    HeapTable {
        name: "catalog indexes".into(),
        rel: INDEXES_REL,
        types: vec![
            ColumnType::Integer,
            ColumnType::Text,
            ColumnType::Integer,
            ColumnType::Integer,
            ColumnType::Integer,
            ColumnType::Text,
        ],
        fillfactor: 100,
    }
}

/// Loads the index rows, checking each against its table. A data
/// directory made before indexes existed gets its (empty) relation.
pub(super) fn load(
    s: &mut BufferSession,
    heap: &Heap,
    tables: &BTreeMap<String, Arc<TableDef>>,
    numbered_up_to: &mut (u32, u32),
    rels: &mut std::collections::BTreeSet<u32>,
    lenient: bool,
) -> Result<IndexCache, CatalogError> {
    let relation = s.pool().relation(INDEXES_REL);
    if !relation.exists(crate::storage::Fork::Main) {
        relation.create(crate::storage::Fork::Main)?;
    }
    let by_oid: BTreeMap<u32, &Arc<TableDef>> = tables.values().map(|t| (t.oid, t)).collect();
    let mut indexes = IndexCache::default();
    for (tid, v) in scan_rows(s, heap, &indexes_heap())? {
        let [Value::Integer(oid), Value::Text(name), Value::Integer(table_oid), Value::Integer(rel), Value::Integer(flags), Value::Text(keys)] =
            &v[..]
        else {
            return Err(CatalogError::Damaged(format!("index row {v:?}")));
        };
        numbered_up_to.0 = numbered_up_to.0.max(*oid as u32);
        numbered_up_to.1 = numbered_up_to.1.max(*rel as u32);
        let table = by_oid.get(&(*table_oid as u32));
        let columns = table.and_then(|t| IndexDef::parse_keys(keys, t.columns.len()));
        let kind = IndexKind::from_flags(*flags);
        let problem = match (table, &columns) {
            (None, _) => Some(format!(
                "names table oid {table_oid}, which is not in the catalog"
            )),
            (_, None) => Some(format!(
                "has key \"{keys}\", which its table's columns do not match"
            )),
            _ if !rels.insert(*rel as u32) => {
                Some(format!("has relation number {rel}, used twice"))
            }
            _ if indexes.contains(name) || tables.contains_key(name) => {
                Some("has a name used twice".into())
            }
            _ if kind.is_none() => Some(format!("has flags {flags}, which no index has")),
            _ => None,
        };
        if let Some(what) = problem {
            let what = format!("index \"{name}\" {what}");
            if !lenient {
                return Err(CatalogError::Damaged(what));
            }
            log::warn!(
                "the catalog is damaged: {what}; with zero_damaged_pages the index is left out"
            );
            continue;
        }
        let def = IndexDef {
            oid: *oid as u32,
            name: name.clone(),
            table_oid: *table_oid as u32,
            rel: *rel as u32,
            kind: kind.expect("checked"),
            columns: columns.expect("checked"),
            row: parking_lot::Mutex::new(Some(tid)),
            usable_from: AtomicU32::new(INVALID_XID),
            root: RootHint::default(),
        };
        indexes.insert(Arc::new(def));
    }
    Ok(indexes)
}

impl Catalog {
    /// The indexes of `table`, oldest first: the cache's list as it is
    /// now (a later CREATE or DROP INDEX makes a new one), shared, so
    /// that asking costs no allocation.
    pub fn indexes_of(&self, table: &TableDef) -> Arc<[Arc<IndexDef>]> {
        self.indexes.read().of(table.oid)
    }

    /// The index called `name`.
    pub fn index(&self, name: &str) -> Result<Arc<IndexDef>, CatalogError> {
        self.indexes
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| CatalogError::NoSuchIndex(name.to_string()))
    }

    /// A name for a new index of `table` on `columns` as PostgreSQL
    /// chooses one (`ChooseIndexName`): `t_pkey` for a primary key,
    /// `t_a_b_key` for a unique constraint and `t_a_b_idx` for any other
    /// index (CREATE UNIQUE INDEX's too), with the first number from 1
    /// that makes it free appended if it is taken (`t_a_key1`). Pending
    /// tables and indexes (another transaction's CREATE TABLE) count as
    /// taken.
    pub fn choose_index_name(&self, table: &str, columns: &[&str], kind: IndexKind) -> String {
        let base = match kind {
            IndexKind::PrimaryKey => format!("{table}_pkey"),
            IndexKind::UniqueConstraint => format!("{table}_{}_key", columns.join("_")),
            IndexKind::Plain | IndexKind::Unique => format!("{table}_{}_idx", columns.join("_")),
        };
        if !self.name_taken(&base) {
            return base;
        }
        (1..)
            .map(|k| format!("{base}{k}"))
            .find(|n| !self.name_taken(n))
            .expect("some number is free")
    }

    /// True if a table or an index is called `name` (another
    /// transaction's pending ones too).
    fn name_taken(&self, name: &str) -> bool {
        self.indexes.read().contains(name) || self.tables.read().contains_key(name)
    }

    /// Creates the file of a new index of `table` (empty, not yet in the
    /// catalog: [`Catalog::publish_index`] adds it once built, or
    /// [`Catalog::discard_index`] removes it). None if the name is taken
    /// and `if_not_exists` was given.
    #[allow(clippy::too_many_arguments)]
    pub fn new_index(
        &self,
        s: &mut BufferSession,
        heap: &Heap,
        name: &str,
        table: &TableDef,
        columns: Vec<IndexColumn>,
        kind: IndexKind,
        if_not_exists: bool,
    ) -> Result<Option<Arc<IndexDef>>, CatalogError> {
        let _ddl = self.ddl.lock();
        if self.name_taken(name) {
            return if if_not_exists {
                Ok(None)
            } else {
                Err(CatalogError::RelationExists(name.to_string()))
            };
        }
        assert!(
            !columns.is_empty() && columns.iter().all(|c| c.column < table.columns.len()),
            "index {name} on columns {columns:?} of {}",
            table.name()
        );
        let (oid, rel, relation) = self.allocate_numbers(s)?;
        log_smgr(heap.wal(), SMGR_CREATE, rel)?;
        relation.create(crate::storage::Fork::Main)?;
        Ok(Some(Arc::new(IndexDef {
            oid,
            name: name.to_string(),
            table_oid: table.oid,
            rel,
            kind,
            columns,
            row: parking_lot::Mutex::new(None),
            usable_from: AtomicU32::new(INVALID_XID),
            root: RootHint::default(),
        })))
    }

    /// Adds a built index of `table` to the catalog (see the module
    /// comment): its row and the cache. With `pending`, the transaction
    /// and command creating `table` itself: the row is that transaction's
    /// and counts once it commits (an abort removes the index with the
    /// table, [`Catalog::abort_created`]). Without, the row is frozen and
    /// durable before this returns.
    pub fn publish_index(
        &self,
        s: &mut BufferSession,
        heap: &Heap,
        table: &TableDef,
        def: &Arc<IndexDef>,
        pending: Option<(Xid, CommandId)>,
    ) -> Result<(), CatalogError> {
        let _ddl = self.ddl.lock();
        assert_eq!(
            def.table_oid, table.oid,
            "index {} of another table",
            def.name
        );
        // A table's own creator may add to it in its transaction; anyone
        // else's index of a pending table would outlive its abort.
        assert_eq!(
            table.creator(),
            pending.map(|(xid, _)| xid),
            "index {} published by a transaction other than its table's creator",
            def.name
        );
        // The name was free when `new_index` looked, but nothing held it
        // during the build: a CREATE INDEX of another table, or a CREATE
        // TABLE, may have taken it since. Two rows of one name would leave
        // a catalog that does not load; the caller discards this index.
        if self.name_taken(&def.name) {
            return Err(CatalogError::RelationExists(def.name.clone()));
        }
        let (xid, cid) = pending.unwrap_or((FROZEN_XID, 0));
        let tid = Self::insert_row(s, heap, &indexes_heap(), &def.row_values(), (xid, cid))?;
        if pending.is_none() {
            let wal = heap.wal();
            wal.flush(wal.insert_position())?;
        }
        *def.row.lock() = Some(tid);
        self.indexes.write().insert(Arc::clone(def));
        self.changed();
        Ok(())
    }

    /// Removes the file of an index that was never published (its build
    /// failed).
    pub fn discard_index(
        &self,
        s: &mut BufferSession,
        heap: &Heap,
        def: &IndexDef,
    ) -> Result<(), CatalogError> {
        assert!(def.row.lock().is_none(), "index {} is published", def.name);
        log_smgr(heap.wal(), SMGR_DROP, def.rel)?;
        Self::remove_relation(s, heap, def.rel, std::time::Instant::now())
    }

    /// Drops an index: its row, buffers and file. The caller holds its
    /// table's `in_use` lock exclusively. Returns false if it did not
    /// exist and `if_exists` was given.
    pub fn drop_index(
        &self,
        s: &mut BufferSession,
        heap: &Heap,
        name: &str,
        if_exists: bool,
    ) -> Result<bool, CatalogError> {
        let _ddl = self.ddl.lock();
        let def = match self.indexes.read().get(name) {
            Some(def) => Arc::clone(def),
            None if if_exists => return Ok(false),
            None => return Err(CatalogError::NoSuchIndex(name.to_string())),
        };
        self.remove_index(s, heap, &def)?;
        Ok(true)
    }

    /// Forgets the indexes of a table whose creation rolled back and
    /// removes their files (their rows stay, invisible, as the table's
    /// do). The caller holds the DDL lock.
    pub(super) fn abort_indexes_of(
        &self,
        s: &mut BufferSession,
        heap: &Heap,
        table: &TableDef,
        started: std::time::Instant,
    ) -> Result<(), CatalogError> {
        for def in self.indexes_of(table).iter() {
            self.indexes.write().remove(&def.name);
            self.changed();
            log_smgr(heap.wal(), SMGR_DROP, def.rel)?;
            Self::remove_relation(s, heap, def.rel, started)?;
        }
        Ok(())
    }

    fn remove_index(
        &self,
        s: &mut BufferSession,
        heap: &Heap,
        def: &IndexDef,
    ) -> Result<(), CatalogError> {
        let started = std::time::Instant::now();
        while s.pool().relation_buffers(def.rel).1 > 0 {
            if started.elapsed() >= DROP_WAIT {
                return Err(CatalogError::InUse(def.name.clone()));
            }
            std::thread::sleep(super::DROP_PIN_POLL);
        }
        if let Some(tid) = *def.row.lock() {
            heap.delete(s, &indexes_heap(), tid, &CATALOG_WRITER, None)?;
        }
        // As DROP TABLE: the row's deletion and the file's removal are
        // durable before the file goes.
        let lsn = log_smgr(heap.wal(), SMGR_DROP, def.rel)?;
        heap.wal().flush(lsn)?;
        self.indexes.write().remove(&def.name);
        self.changed();
        Self::remove_relation(s, heap, def.rel, started)
    }
}

#[cfg(test)]
mod tests {
    use super::IndexKind;

    #[test]
    fn every_kind_reads_back_and_flags_written_before_constraints_keep_their_meaning() {
        for kind in [
            IndexKind::Plain,
            IndexKind::Unique,
            IndexKind::UniqueConstraint,
            IndexKind::PrimaryKey,
        ] {
            assert_eq!(IndexKind::from_flags(kind.flags()), Some(kind));
        }
        // Before the constraint bit: CREATE UNIQUE INDEX's, and a primary
        // key (a constraint either way).
        assert_eq!(IndexKind::from_flags(1), Some(IndexKind::Unique));
        assert_eq!(IndexKind::from_flags(3), Some(IndexKind::PrimaryKey));
        // No version wrote these.
        for flags in [2, 4, 6, 8, -1] {
            assert_eq!(IndexKind::from_flags(flags), None, "{flags}");
        }
    }
}
