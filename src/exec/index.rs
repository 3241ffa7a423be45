//! Indexes as statements meet them: CREATE INDEX (a B-tree built from the
//! table), DROP INDEX, the entries every new row version gets, the unique
//! check against the heap, vacuum's index pass and `verify_index`.
//!
//! The B-tree knows neither heap visibility nor transactions; this is
//! where they meet it ([`RowCheck`]). A statement reads its table's index
//! list after it locks the table (`txn/locks.rs`): a writer's
//! RowExclusive lock conflicts with CREATE INDEX's Share lock and DROP
//! INDEX's AccessExclusive one, so a writing transaction either gives an
//! index entries for all its rows or for none.

use std::ops::ControlFlow;
use std::sync::Arc;

use crate::btree::{BtreeError, BuildKeys, IndexDesc, Liveness, SortSpace, UniqueCheck};
use crate::buffer::BufferSession;
use crate::catalog::{CatalogError, IndexColumn, IndexDef, IndexKind, TableDef};
use crate::database::{Database, Session};
use crate::heap::tuple::decode;
use crate::heap::{HeapError, HeapTable, LineAt, Tid, Writer};
use crate::stream::StreamLimits;
use crate::txn::{CommandId, LockMode, TxnManager, WaitLimits, Xid, XidStatus, INVALID_XID};
use crate::types::Value;

use super::progress::{self, Progress, ProgressUnit};
use super::ExecError;

/// Rows a CREATE INDEX reads between two reports of its progress.
const BUILD_PROGRESS_ROWS: u64 = 10_000;

/// A unique index's question about a row with an equal key, answered from
/// the heap as PostgreSQL's dirty snapshot does: a row whose inserter or
/// deleter is still running is waited for; one deleted by a committed
/// transaction (or by this one) or inserted by an aborted one is no
/// conflict; any other is.
pub(crate) struct RowCheck<'a> {
    db: &'a Database,
    table: &'a HeapTable,
    /// The checking transaction (its own rows and deletions count as
    /// done), or none for a build of its own.
    own: Xid,
    /// How the checking transaction waits for another.
    waits: &'a WaitLimits,
    /// The oldest snapshot's horizon, taken when first needed: a row
    /// deleted below it is dead to every snapshot. Taken once per check,
    /// as the horizon only moves on, an old one errs on keeping entries.
    oldest: Option<Xid>,
}

/// The longest an index build waits for a transaction inserting or
/// deleting a row it meets.
const BUILD_ROW_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl<'a> RowCheck<'a> {
    pub(crate) fn new(
        db: &'a Database,
        table: &'a HeapTable,
        own: Xid,
        waits: &'a WaitLimits,
    ) -> RowCheck<'a> {
        RowCheck {
            db,
            table,
            own,
            waits,
            oldest: None,
        }
    }

    fn status(txn: &TxnManager, own: Xid, xid: Xid) -> XidStatus {
        if xid == own {
            XidStatus::Committed
        } else {
            txn.status(xid)
        }
    }
}

impl UniqueCheck for RowCheck<'_> {
    /// The row's liveness is its HOT chain's (the entry points at the
    /// chain's root, see `heap/hot.rs`): that of its first version that
    /// is not dead, else dead, and removable only if every version is.
    fn liveness(&mut self, s: &mut BufferSession, tid: Tid) -> Result<Liveness, BtreeError> {
        let txn = self.db.txn();
        let (own, oldest) = (self.own, &mut self.oldest);
        let mut found = None;
        let mut removable = true;
        let line = self.db.heap().chain_at(s, self.table, tid, |h| {
            let version = match Self::status(txn, own, h.xmin) {
                XidStatus::Aborted => Liveness::Dead { removable: true },
                XidStatus::InProgress => Liveness::InProgress(h.xmin),
                // A locked row is live, whoever locks it.
                XidStatus::Committed => match h.deleter() {
                    None => Liveness::Live,
                    Some(deleter) => match Self::status(txn, own, deleter) {
                        XidStatus::Aborted => Liveness::Live,
                        XidStatus::InProgress => Liveness::InProgress(deleter),
                        XidStatus::Committed => {
                            // Our own deletion counts as committed here but
                            // is not below the horizon: our transaction
                            // still runs.
                            let oldest = *oldest.get_or_insert_with(|| txn.oldest_xmin());
                            Liveness::Dead {
                                removable: deleter < oldest && deleter != own,
                            }
                        }
                    },
                },
            };
            match version {
                Liveness::Dead { removable: r } => {
                    removable &= r;
                    ControlFlow::Continue(())
                }
                decided => {
                    found = Some(decided);
                    ControlFlow::Break(())
                }
            }
        })?;
        Ok(match (line, found) {
            (_, Some(decided)) => decided,
            (LineAt::Versions, None) => Liveness::Dead { removable },
            // Pruned: dead to everyone.
            (LineAt::Dead, None) => Liveness::Dead { removable: true },
            // No tuple there: nothing to conflict with, but nothing says
            // why, so the entry stays for vacuum to judge.
            (LineAt::Nothing, None) => Liveness::Dead { removable: false },
        })
    }

    fn wait_for(&mut self, xid: Xid) -> Result<(), BtreeError> {
        if self.own == INVALID_XID {
            // A build of its own, which no one waits for: its wait
            // cannot close a cycle, and it ends when the inserter does
            // (or after the bound, then failing its check).
            self.db.txn().wait_for(xid, BUILD_ROW_WAIT);
            return Ok(());
        }
        // Two inserters of one key waiting on each other is a deadlock,
        // found as a row wait's is.
        self.db
            .txn()
            .wait_for_transaction(self.own, xid, self.waits)
            .map_err(|source| {
                BtreeError::Heap(Box::new(HeapError::Wait {
                    table: self.table.name.clone(),
                    source,
                }))
            })
    }
}

/// The indexes of one table as a statement writes it.
pub(crate) struct TableIndexes {
    indexes: Vec<(Arc<IndexDef>, IndexDesc)>,
}

impl TableIndexes {
    /// The table's indexes now (the caller holds the table).
    pub(crate) fn of(db: &Database, table: &TableDef) -> TableIndexes {
        TableIndexes {
            indexes: db
                .catalog()
                .indexes_of(table)
                .iter()
                .map(|def| {
                    let desc = def.desc(table);
                    (Arc::clone(def), desc)
                })
                .collect(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.indexes.is_empty()
    }

    /// Whether an update from `old` to `new` may be HOT (see
    /// `heap/hot.rs`): no index's column changed its stored image, so the
    /// entries of the old version are right for the new one.
    pub(crate) fn keep_entries(&self, old: &[Value], new: &[Value]) -> bool {
        self.indexes.iter().all(|(def, _)| {
            def.columns
                .iter()
                .all(|c| old[c.column].same_image(&new[c.column]))
        })
    }

    /// Whether an update from `old` to `new` changes a key, as
    /// PostgreSQL's row locks count keys (`INDEX_ATTR_BITMAP_KEY`, and
    /// heap_update's comparison of images): a column of a unique index
    /// whose stored image differs. An update that changes none conflicts
    /// with no `FOR KEY SHARE` lock (`Heap::try_delete`).
    pub(crate) fn keys_change(&self, old: &[Value], new: &[Value]) -> bool {
        self.indexes
            .iter()
            .filter(|(def, _)| def.kind.unique())
            .any(|(def, _)| {
                def.columns
                    .iter()
                    .any(|c| !old[c.column].same_image(&new[c.column]))
            })
    }

    /// Adds the entries of a new row version at `tid`, written by `own`.
    /// A NULL in a primary key column is refused first, before any entry:
    /// CREATE TABLE made those columns NOT NULL, but a primary key ALTER
    /// TABLE added is kept only here (the columns' catalog rows stay as
    /// they were).
    pub(crate) fn insert_row(
        &self,
        db: &Database,
        s: &mut BufferSession,
        table: &TableDef,
        row: &[Value],
        tid: Tid,
        by: &Writer,
    ) -> Result<(), ExecError> {
        for (def, _) in self.indexes.iter().filter(|(d, _)| d.kind.primary()) {
            if let Some(c) = def.columns.iter().find(|c| row[c.column].is_null()) {
                return Err(ExecError::NotNull {
                    table: table.name().to_string(),
                    column: table.columns[c.column].name.clone(),
                });
            }
        }
        for (def, desc) in &self.indexes {
            let key = def.key_of(row);
            let mut check = RowCheck::new(db, &table.heap, by.xid, &by.waits);
            let unique: Option<&mut dyn UniqueCheck> = if def.kind.unique() {
                Some(&mut check)
            } else {
                None
            };
            db.btree().insert(s, desc, &key, tid, unique)?;
        }
        Ok(())
    }
}

/// What CREATE INDEX, or a PRIMARY KEY or UNIQUE constraint, asks for.
pub struct IndexSpec {
    /// None: chosen as PostgreSQL chooses it
    /// ([`crate::catalog::Catalog::choose_index_name`]).
    pub name: Option<String>,
    pub columns: Vec<IndexColumn>,
    pub kind: IndexKind,
    pub if_not_exists: bool,
    /// The transaction and command creating the table in this statement
    /// (CREATE TABLE's constraints): the index is the table's, counting
    /// when its transaction commits. None: the index counts once built.
    pub pending: Option<(Xid, CommandId)>,
}

/// CREATE INDEX, and the index of a PRIMARY KEY or UNIQUE constraint:
/// builds a B-tree of `table` holding it exclusively (see the module
/// comment) and publishes it. A primary key is refused if the table has
/// one, or if a row holds NULL in one of its columns. Returns the index's
/// name, or None if it existed and IF NOT EXISTS was given.
pub fn create_index(
    session: &mut Session,
    table: &Arc<TableDef>,
    spec: IndexSpec,
    progress: &mut dyn Progress,
) -> Result<Option<String>, ExecError> {
    let db = session.db().clone();
    // Readers go on; writers wait (PostgreSQL's mode for CREATE INDEX).
    // A constraint's index (ALTER TABLE … ADD PRIMARY KEY / UNIQUE) takes
    // the table alone, as ALTER TABLE does: two Share holders could both
    // pass the one-primary-key check below.
    let mode = if spec.kind.constraint() {
        LockMode::AccessExclusive
    } else {
        LockMode::Share
    };
    super::lock_table(session, table, mode)?;
    if spec.kind.primary()
        && db
            .catalog()
            .indexes_of(table)
            .iter()
            .any(|i| i.kind.primary())
    {
        return Err(ExecError::MultiplePrimaryKeys {
            table: table.name().to_string(),
        });
    }
    let name = spec.name.unwrap_or_else(|| {
        let columns: Vec<&str> = spec
            .columns
            .iter()
            .map(|c| table.columns[c.column].name.as_str())
            .collect();
        db.catalog()
            .choose_index_name(table.name(), &columns, spec.kind)
    });
    let Some(def) = db.catalog().new_index(
        &mut session.buf,
        db.heap(),
        &name,
        table,
        spec.columns,
        spec.kind,
        spec.if_not_exists,
    )?
    else {
        return Ok(None);
    };
    // A build inside the transaction that created the table reads that
    // transaction's rows and deletions as done, as its statements do.
    let own = spec.pending.map_or(INVALID_XID, |(xid, _)| xid);
    let built = build(&db, session, table, &def, own, progress);
    let published = built.and_then(|()| {
        db.catalog()
            .publish_index(&mut session.buf, db.heap(), table, &def, spec.pending)
            .map_err(ExecError::from)
    });
    if let Err(e) = published {
        if let Err(cleanup) = db
            .catalog()
            .discard_index(&mut session.buf, db.heap(), &def)
        {
            log::error!("CREATE INDEX {name} failed ({e}); its file, relation {}, could not be removed: {cleanup}", def.rel);
        }
        return Err(e);
    }
    Ok(Some(name))
}

/// Calls `f` with the key of index `def` and the TID of every row of
/// `table` some transaction may still see, the root of its HOT chain
/// ([`Heap::scan_for_index_build`]): the entries the index must hold.
/// `f` runs under the heap page's shared lock; the caller holds the table
/// against writers, so that lock keeps out no statement. The first error
/// ends the calls and is returned. Returns whether older versions of a
/// HOT chain that some snapshot may still see were left out.
///
/// [`Heap::scan_for_index_build`]: crate::heap::Heap::scan_for_index_build
fn index_entries(
    db: &Database,
    session: &mut Session,
    table: &TableDef,
    def: &IndexDef,
    mut f: impl FnMut(&[Value], Tid) -> Result<(), ExecError>,
) -> Result<bool, ExecError> {
    let mut wanted = vec![false; table.columns.len()];
    for c in &def.columns {
        wanted[c.column] = true;
    }
    // Columns after the last key column are not even walked over.
    let decoded = def.columns.iter().map(|c| c.column + 1).max().unwrap_or(0);
    let types = &table.heap.types[..decoded];
    let limits = session.stream_limits();
    let mut row = Vec::with_capacity(decoded);
    let mut key = Vec::with_capacity(def.columns.len());
    let mut failure = None;
    let older_versions_left_out =
        db.heap()
            .scan_for_index_build(&mut session.buf, &table.heap, limits, |tid, t| {
                if failure.is_some() {
                    return;
                }
                row.clear();
                let done = match decode(types, t, &wanted, &mut row) {
                    Ok(()) => {
                        // The key's values move out of the row (no copy of
                        // a text), unless a column is in the key twice.
                        key.clear();
                        for (i, c) in def.columns.iter().enumerate() {
                            let again = def.columns[i + 1..].iter().any(|d| d.column == c.column);
                            key.push(if again {
                                row[c.column].clone()
                            } else {
                                std::mem::replace(&mut row[c.column], Value::Null)
                            });
                        }
                        f(&key, tid)
                    }
                    Err(e) => Err(HeapError::from(e).into()),
                };
                failure = done.err();
            })?;
    failure.map_or(Ok(older_versions_left_out), Err)
}

/// Builds index `def` from every row of `table` some transaction may
/// still see (committed or not: an open transaction's rows must be found
/// if it commits). The keys go straight into a sort bounded by
/// `maintenance_work_mem` as the heap is read. `own` is the building
/// transaction when the index is part of it (INVALID_XID otherwise): its
/// rows are no one's to wait for, and those it deleted are no duplicates.
fn build(
    db: &Arc<Database>,
    session: &mut Session,
    table: &Arc<TableDef>,
    def: &Arc<IndexDef>,
    own: Xid,
    progress: &mut dyn Progress,
) -> Result<(), ExecError> {
    let desc = def.desc(table);
    let temp = db.temp_dir();
    let mut keys = BuildKeys::new(
        &desc,
        SortSpace {
            mem_bytes: session.settings.maintenance_work_mem_bytes(),
            temp_dir: &temp,
        },
    );
    // A primary key's rows with a NULL in a key column, for
    // `refuse_nulls` (their liveness is read after the scan).
    let mut nulls = Vec::new();
    let mut task = progress::Task::begin(
        progress,
        &format!("CREATE INDEX {}", def.name),
        None,
        ProgressUnit::Rows,
    );
    let interrupt = session.interrupt();
    let older_versions_left_out = index_entries(db, session, table, def, |key, tid| {
        if def.kind.primary() {
            if let Some(i) = key.iter().position(Value::is_null) {
                nulls.push((tid, i));
            }
        }
        keys.push(key, tid)?;
        if keys.pushed().is_multiple_of(BUILD_PROGRESS_ROWS) {
            task.update(keys.pushed());
            // A cancel request or statement_timeout stops a build too.
            interrupt.check()?;
        }
        Ok(())
    })?;
    task.update(keys.pushed());
    if older_versions_left_out {
        // Snapshots that may still see such a version must not use the
        // index: those older than every deleter's end (`heap/hot.rs`).
        def.set_usable_from(db.txn().next_xid());
    }
    let mut check = RowCheck::new(db, &table.heap, own, &WaitLimits::DEFAULT);
    refuse_nulls(session, table, def, &nulls, &mut check)?;
    let unique: Option<&mut dyn UniqueCheck> = if def.kind.unique() {
        Some(&mut check)
    } else {
        None
    };
    db.btree().build(&mut session.buf, &desc, keys, unique)?;
    Ok(())
}

/// A primary key's check before its build, as PostgreSQL's SET NOT NULL
/// is (and so before duplicates are looked for): no row but a dead one
/// may hold NULL in a key column. A row whose inserter or deleter is
/// still running counts, since it may stay. `nulls` are the rows with a
/// NULL key column, and which column.
fn refuse_nulls(
    session: &mut Session,
    table: &TableDef,
    def: &IndexDef,
    nulls: &[(Tid, usize)],
    check: &mut RowCheck,
) -> Result<(), ExecError> {
    for &(tid, i) in nulls {
        if !matches!(
            check.liveness(&mut session.buf, tid)?,
            Liveness::Dead { .. }
        ) {
            return Err(ExecError::PrimaryKeyNulls {
                table: table.name().to_string(),
                column: table.columns[def.columns[i].column].name.clone(),
            });
        }
    }
    Ok(())
}

/// The table index `def` belongs to.
fn table_of(db: &Database, def: &IndexDef) -> Result<Arc<TableDef>, ExecError> {
    db.catalog()
        .tables()
        .into_iter()
        .find(|t| t.oid == def.table_oid)
        .ok_or_else(|| CatalogError::NoSuchIndex(def.name.clone()).into())
}

/// An index and the table it belongs to.
pub type IndexOfTable = (Arc<IndexDef>, Arc<TableDef>);

/// The index DROP INDEX `name` would drop, with its table: None if there
/// is none and `if_exists` was given; refused if it backs a constraint
/// (PostgreSQL's words: drop the constraint instead).
pub fn index_to_drop(
    db: &Database,
    name: &str,
    if_exists: bool,
) -> Result<Option<IndexOfTable>, ExecError> {
    let def = match db.catalog().index(name) {
        Ok(def) => def,
        Err(_) if if_exists => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let table = table_of(db, &def)?;
    if def.kind.constraint() {
        return Err(ExecError::IndexOfConstraint {
            index: def.name.clone(),
            table: table.name().to_string(),
        });
    }
    Ok(Some((def, table)))
}

/// DROP INDEX: holds the index's table exclusively, then drops it.
/// Returns false if it did not exist and `if_exists` was given.
pub fn drop_index(session: &mut Session, name: &str, if_exists: bool) -> Result<bool, ExecError> {
    let db = session.db().clone();
    let Some((def, table)) = index_to_drop(&db, name, if_exists)? else {
        return Ok(false);
    };
    drop_held(session, &def, &table, if_exists)
}

/// ALTER TABLE … DROP CONSTRAINT `name`: drops the index backing the
/// PRIMARY KEY or UNIQUE constraint `name` of `table`. Returns false if
/// there is none and `if_exists` was given.
pub fn drop_constraint(
    session: &mut Session,
    table: &Arc<TableDef>,
    name: &str,
    if_exists: bool,
) -> Result<bool, ExecError> {
    let db = session.db().clone();
    let found = db
        .catalog()
        .indexes_of(table)
        .iter()
        .find(|i| i.name == name && i.kind.constraint())
        .cloned();
    match found {
        Some(def) => drop_held(session, &def, table, if_exists),
        None if if_exists => Ok(false),
        None => Err(ExecError::NoSuchConstraint {
            constraint: name.to_string(),
            table: table.name().to_string(),
        }),
    }
}

/// Drops index `def` of `table` once it holds the table exclusively.
fn drop_held(
    session: &mut Session,
    def: &IndexDef,
    table: &Arc<TableDef>,
    if_exists: bool,
) -> Result<bool, ExecError> {
    let db = session.db().clone();
    super::lock_table(session, table, LockMode::AccessExclusive)?;
    let dropped = db
        .catalog()
        .drop_index(&mut session.buf, db.heap(), &def.name, if_exists)?;
    db.btree().forget(def.rel);
    Ok(dropped)
}

/// Vacuum's index pass for `table`: deletes from every index the entries
/// of the dead tuples vacuum found (sorted), before their line pointers
/// are freed.
pub(crate) fn vacuum_indexes(
    db: &Database,
    s: &mut BufferSession,
    table: &TableDef,
    dead: &[Tid],
    limits: StreamLimits,
) -> Result<(), ExecError> {
    let is_dead = |tid: Tid| dead.binary_search(&tid).is_ok();
    for def in db.catalog().indexes_of(table).iter() {
        db.btree()
            .bulk_delete(s, &def.desc(table), &is_dead, limits)?;
    }
    Ok(())
}

/// `verify_index('name')`: the B-tree's structure ([`crate::btree::Btree::verify`]),
/// then that every row of the table a transaction may still see has
/// exactly one entry with its key, and that no entry points elsewhere
/// than at such a row. Holds the table exclusively. Returns the number of
/// entries.
pub fn verify_index(session: &mut Session, name: &str) -> Result<u64, ExecError> {
    let db = session.db().clone();
    let def = db.catalog().index(name)?;
    let table = table_of(&db, &def)?;
    // No writer changes the table while its rows and entries are compared.
    super::lock_table(session, &table, LockMode::Share)?;
    let desc = def.desc(&table);
    let report = db.btree().verify(&mut session.buf, &desc)?;
    let mut rows = std::collections::HashMap::new();
    // Whether older versions of HOT chains were left out does not change
    // what the index must hold.
    index_entries(&db, session, &table, &def, |key, tid| {
        rows.insert(tid, key.to_vec());
        Ok(())
    })?;
    let bad = |what: String| -> ExecError {
        BtreeError::Damaged {
            index: name.to_string(),
            block: 0,
            what,
        }
        .into()
    };
    let mut seen = std::collections::HashSet::new();
    for (key, tid) in &report.entries {
        if !seen.insert(*tid) {
            return Err(bad(format!(
                "row {}/{} has two entries",
                tid.block, tid.index
            )));
        }
        // An entry of a row vacuum already removed is allowed only while
        // the row's tuple is still there; past that it is damage.
        if let Some(row_key) = rows.get(tid) {
            if desc.spec.cmp_values(row_key, key) != std::cmp::Ordering::Equal {
                return Err(bad(format!(
                    "the entry of row {}/{} has key ({}), the row ({})",
                    tid.block,
                    tid.index,
                    crate::btree::key_text(key),
                    crate::btree::key_text(row_key)
                )));
            }
        }
    }
    if let Some(tid) = rows.keys().find(|t| !seen.contains(t)) {
        return Err(bad(format!("row {}/{} has no entry", tid.block, tid.index)));
    }
    Ok(report.entries.len() as u64)
}
