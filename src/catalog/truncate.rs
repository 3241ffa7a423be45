//! TRUNCATE in the catalog: the table and each of its indexes get new,
//! empty files (PostgreSQL's new relfilenode), so that a TRUNCATE is
//! transactional, inside a block as outside one.
//!
//! The truncating transaction holds the table in AccessExclusive mode
//! (`txn/locks.rs`) until it ends, so no one else reads either file
//! meanwhile, and the cache can show the new files at once: whoever finds
//! the table waits for its lock, and finds it again afterwards (the SQL
//! layer plans again when a table changed under its lock).
//!
//! Durability follows CREATE TABLE's: the new files' creation is logged
//! before they are made, the catalog rows naming them replace the old
//! ones as the transaction's own changes (the old rows deleted, new rows
//! inserted, with its xid), and the new heap file skips the WAL until the
//! commit syncs it (a bulk load after TRUNCATE writes no WAL for its
//! pages, as with PostgreSQL's `wal_level = minimal`). At commit the old
//! files go ([`Catalog::commit_truncated`]); at abort the new ones do and
//! the cache shows the old ones again ([`Catalog::abort_truncated`]). A
//! crash in between leaves files the catalog does not name, which
//! start-up removes.

use std::sync::Arc;

use super::indexes::indexes_heap;
use super::{log_smgr, tables_heap, Catalog, CatalogError, IndexDef, TableDef, TABLES_REL};
use crate::buffer::BufferSession;
use crate::heap::{Heap, Writer};
use crate::types::Value;
use crate::wal::record::{SMGR_CREATE, SMGR_DROP};

/// A table truncated by a transaction that has not ended: the table and
/// indexes as they were, and as they are until it ends.
#[derive(Debug)]
pub struct Truncation {
    pub old: Arc<TableDef>,
    pub new: Arc<TableDef>,
    pub old_indexes: Vec<Arc<IndexDef>>,
    pub new_indexes: Vec<Arc<IndexDef>>,
}

impl Truncation {
    /// The relation numbers that go if the transaction commits.
    pub fn old_rels(&self) -> impl Iterator<Item = u32> + '_ {
        std::iter::once(self.old.heap.rel).chain(self.old_indexes.iter().map(|i| i.rel))
    }

    /// Those that go if it aborts.
    pub fn new_rels(&self) -> impl Iterator<Item = u32> + '_ {
        std::iter::once(self.new.heap.rel).chain(self.new_indexes.iter().map(|i| i.rel))
    }
}

impl Catalog {
    /// Gives table `def` and its indexes new, empty files for the
    /// transaction `by` writes as (see the module comment), and shows
    /// them in the cache. The caller holds the table in AccessExclusive
    /// mode, makes each new index a valid empty B-tree, and ends the
    /// transaction with [`Catalog::commit_truncated`] or
    /// [`Catalog::abort_truncated`]. A table created by a transaction
    /// still running is refused by the caller.
    pub fn truncate_table(
        &self,
        s: &mut BufferSession,
        heap: &Heap,
        def: &Arc<TableDef>,
        by: &Writer,
    ) -> Result<Truncation, CatalogError> {
        assert!(def.creator().is_none(), "truncating a pending table");
        let _ddl = self.ddl.lock();
        assert!(
            self.holds(def),
            "table {} changed under its lock",
            def.name()
        );
        let old_indexes: Vec<Arc<IndexDef>> = self.indexes_of(def).to_vec();
        let mut made: Vec<u32> = Vec::new();
        let result = self.swap_files(s, heap, def, &old_indexes, by, &mut made);
        let (new, new_indexes) = match result {
            Ok(swapped) => swapped,
            Err(e) => {
                // Nothing names the new files yet (the rows written are
                // the transaction's, gone with its abort): remove them.
                for &rel in &made {
                    let removed = log_smgr(heap.wal(), SMGR_DROP, rel)
                        .map_err(CatalogError::from)
                        .and_then(|_| {
                            Self::remove_relation(s, heap, rel, std::time::Instant::now())
                        });
                    if let Err(cleanup) = removed {
                        log::error!("TRUNCATE {} failed ({e}); its new file, relation {rel}, could not be removed: {cleanup}", def.name());
                    }
                }
                return Err(e);
            }
        };
        self.tables
            .write()
            .insert(def.name().to_string(), Arc::clone(&new));
        {
            let mut indexes = self.indexes.write();
            for (old, new) in old_indexes.iter().zip(&new_indexes) {
                indexes.remove(&old.name);
                indexes.insert(Arc::clone(new));
            }
        }
        // Kept plans name the old files: they are made again.
        self.changed();
        Ok(Truncation {
            old: Arc::clone(def),
            new,
            old_indexes,
            new_indexes,
        })
    }

    /// The I/O of [`Self::truncate_table`]: new files (their numbers
    /// pushed to `made` as each exists) and the catalog rows naming them.
    fn swap_files(
        &self,
        s: &mut BufferSession,
        heap: &Heap,
        def: &TableDef,
        old_indexes: &[Arc<IndexDef>],
        by: &Writer,
        made: &mut Vec<u32>,
    ) -> Result<(Arc<TableDef>, Vec<Arc<IndexDef>>), CatalogError> {
        let mut new_file = |s: &mut BufferSession| -> Result<u32, CatalogError> {
            let (_, rel, relation) = self.allocate_numbers(s)?;
            log_smgr(heap.wal(), SMGR_CREATE, rel)?;
            relation.create(crate::storage::Fork::Main)?;
            made.push(rel);
            Ok(rel)
        };
        let rel = new_file(s)?;
        heap.skip_wal(rel, by.xid);
        let mut rows = def.rows.clone();
        let table_row = rows
            .iter_mut()
            .find(|(r, _)| *r == TABLES_REL)
            .expect("a table has its row");
        heap.delete(s, &tables_heap(), table_row.1, by, None)?;
        table_row.1 = Self::insert_row(
            s,
            heap,
            &tables_heap(),
            &[
                Value::Integer(def.oid as i32),
                Value::Text(def.name().to_string()),
                Value::Integer(rel as i32),
                Value::Integer(def.heap.fillfactor as i32),
            ],
            (by.xid, by.cid),
        )?;
        let new = Arc::new(TableDef::new(
            def.oid,
            def.name().to_string(),
            rel,
            def.heap.fillfactor,
            def.columns.clone(),
            rows,
        ));
        let mut new_indexes = Vec::with_capacity(old_indexes.len());
        for old in old_indexes {
            let rel = new_file(s)?;
            if let Some(tid) = old.row() {
                heap.delete(s, &indexes_heap(), tid, by, None)?;
            }
            let index = IndexDef::with_rel(old, rel);
            let tid = Self::insert_row(
                s,
                heap,
                &indexes_heap(),
                &index.row_values(),
                (by.xid, by.cid),
            )?;
            index.set_row(tid);
            new_indexes.push(Arc::new(index));
        }
        Ok((new, new_indexes))
    }

    /// After the truncating transaction committed: removes the old files
    /// (the removal logged and durable first, as DROP TABLE's). A file
    /// that cannot be removed is left for start-up after a crash, which
    /// removes files no catalog row names.
    pub fn commit_truncated(
        &self,
        s: &mut BufferSession,
        heap: &Heap,
        truncations: &[Truncation],
    ) -> Result<(), CatalogError> {
        if truncations.is_empty() {
            return Ok(());
        }
        let _ddl = self.ddl.lock();
        self.remove_files(s, heap, truncations.iter().flat_map(Truncation::old_rels))
    }

    /// After the truncating transaction aborted: shows the old table and
    /// indexes in the cache again (its rows of them count again, as the
    /// deletions were its own) and removes the new files. Undone in the
    /// reverse order, so a table truncated twice gets its first files back.
    pub fn abort_truncated(
        &self,
        s: &mut BufferSession,
        heap: &Heap,
        truncations: &[Truncation],
    ) -> Result<(), CatalogError> {
        if truncations.is_empty() {
            // Most transactions: no lock, and kept plans stay current.
            return Ok(());
        }
        let _ddl = self.ddl.lock();
        for t in truncations.iter().rev() {
            self.tables
                .write()
                .insert(t.old.name().to_string(), Arc::clone(&t.old));
            let mut indexes = self.indexes.write();
            for (old, new) in t.old_indexes.iter().zip(&t.new_indexes) {
                indexes.remove(&new.name);
                indexes.insert(Arc::clone(old));
            }
        }
        self.changed();
        self.remove_files(s, heap, truncations.iter().flat_map(Truncation::new_rels))
    }

    /// Logs the removal of `rels` (durably) and removes their buffers and
    /// files, going on past a failure and returning the first.
    pub(super) fn remove_files(
        &self,
        s: &mut BufferSession,
        heap: &Heap,
        rels: impl Iterator<Item = u32>,
    ) -> Result<(), CatalogError> {
        let started = std::time::Instant::now();
        let mut first_error = None;
        for rel in rels {
            let removed = log_smgr(heap.wal(), SMGR_DROP, rel)
                .and_then(|lsn| heap.wal().flush(lsn))
                .map_err(CatalogError::from)
                .and_then(|()| Self::remove_relation(s, heap, rel, started));
            if let Err(e) = removed {
                log::error!("could not remove relation {rel} after its transaction ended: {e}; start-up after a crash removes it");
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
