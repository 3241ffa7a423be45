//! The workloads a crash test can run, as the components they are made
//! of. A component owns its tables, its sessions and its check; a workload
//! is one component (with the checkpointer for `checkpoint`) or, for
//! `mixed`, several at once chosen by the seed. Components never share a
//! table, so that each one's check can hold the others' sessions in
//! doubt without caring.

use crate::bench::XorShift;

/// What `--workload` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    Insert,
    Update,
    Copy,
    Delete,
    Vacuum,
    Checkpoint,
    Ddl,
    Lock,
    Mixed,
}

impl Workload {
    pub const ALL: [Workload; 9] = [
        Workload::Insert,
        Workload::Update,
        Workload::Copy,
        Workload::Delete,
        Workload::Vacuum,
        Workload::Checkpoint,
        Workload::Ddl,
        Workload::Lock,
        Workload::Mixed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Insert => "insert",
            Workload::Update => "update",
            Workload::Copy => "copy",
            Workload::Delete => "delete",
            Workload::Vacuum => "vacuum",
            Workload::Checkpoint => "checkpoint",
            Workload::Ddl => "ddl",
            Workload::Lock => "lock",
            Workload::Mixed => "mixed",
        }
    }

    /// The workload called `name`, or an error that lists the names.
    pub fn from_name(name: &str) -> Result<Workload, String> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name() == name.trim().to_ascii_lowercase())
            .ok_or_else(|| {
                let names: Vec<&str> = Workload::ALL.iter().map(|w| w.name()).collect();
                format!(
                    "unknown workload \"{name}\"; choose one of {}",
                    names.join(", ")
                )
            })
    }

    /// Whether every change the workload makes is a transaction: not
    /// DDL (the catalog changes at once) nor VACUUM, and so not `mixed`,
    /// which may run them.
    pub fn is_transactional(self) -> bool {
        matches!(
            self,
            Workload::Insert
                | Workload::Update
                | Workload::Copy
                | Workload::Delete
                | Workload::Checkpoint
                | Workload::Lock
        )
    }

    /// The components to run. `mixed` takes two to four data components
    /// and, half the time, the checkpointer, chosen with `rng`.
    pub fn components(self, rng: &mut XorShift) -> Vec<Component> {
        match self {
            Workload::Insert => vec![Component::Insert],
            Workload::Update => vec![Component::Update],
            Workload::Copy => vec![Component::Copy],
            Workload::Delete => vec![Component::Delete],
            Workload::Vacuum => vec![Component::Vacuum],
            Workload::Checkpoint => vec![Component::Update, Component::Checkpointer],
            Workload::Ddl => vec![Component::Ddl],
            Workload::Lock => vec![Component::Lock],
            Workload::Mixed => {
                let mut pool = Component::DATA.to_vec();
                let take = 2 + rng.below(3) as usize;
                let mut chosen = Vec::with_capacity(take + 1);
                for _ in 0..take {
                    chosen.push(pool.remove(rng.below(pool.len() as u64) as usize));
                }
                if rng.below(2) == 0 {
                    chosen.push(Component::Checkpointer);
                }
                chosen.sort();
                chosen
            }
        }
    }
}

/// A part of a workload: its tables, sessions and check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Component {
    /// [`INSERT_SESSIONS`] sessions inserting one row per transaction.
    Insert,
    /// One session updating every row of [`UPDATE_ROWS`] per transaction.
    Update,
    /// One session loading batches of [`COPY_BATCH_ROWS`] rows with COPY.
    Copy,
    /// [`DELETE_SESSIONS`] sessions deleting one row per transaction.
    Delete,
    /// One session updating, deleting and inserting ranges of rows and one
    /// running VACUUM on the same table.
    Vacuum,
    /// One session creating, filling and dropping tables; every other
    /// table is created and loaded with COPY in one transaction (a load
    /// that skips the WAL), every other such load with FREEZE (its pages
    /// all-visible as it fills them).
    Ddl,
    /// [`LOCK_SESSIONS`] sessions locking rows in every strength and
    /// updating their own beside the others' key-share locks.
    Lock,
    /// One session running CHECKPOINT every few commits of the others.
    Checkpointer,
}

impl Component {
    /// The components that change rows (all but the checkpointer).
    pub const DATA: [Component; 7] = [
        Component::Insert,
        Component::Update,
        Component::Copy,
        Component::Delete,
        Component::Vacuum,
        Component::Ddl,
        Component::Lock,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Component::Insert => "insert",
            Component::Update => "update",
            Component::Copy => "copy",
            Component::Delete => "delete",
            Component::Vacuum => "vacuum",
            Component::Ddl => "ddl",
            Component::Lock => "lock",
            Component::Checkpointer => "checkpoint",
        }
    }

    pub fn from_name(name: &str) -> Option<Component> {
        Component::DATA
            .into_iter()
            .chain([Component::Checkpointer])
            .find(|c| c.name() == name)
    }

    /// Sessions (threads) the component runs in the child.
    pub fn sessions(self) -> u32 {
        match self {
            Component::Insert => INSERT_SESSIONS,
            Component::Delete => DELETE_SESSIONS,
            Component::Lock => LOCK_SESSIONS,
            // The writer and the vacuum session.
            Component::Vacuum => 2,
            Component::Update | Component::Copy | Component::Ddl | Component::Checkpointer => 1,
        }
    }

    /// Statements that make the component's tables before the child
    /// starts. Tables with rows are vacuumed, so that the visibility map
    /// has bits set from the start and the workload's changes clear them.
    pub fn setup_sql(self) -> Option<String> {
        match self {
            Component::Insert => Some(format!(
                "CREATE TABLE {INSERT_TABLE} (session integer NOT NULL, seq integer NOT NULL, note text)"
            )),
            Component::Update => Some(format!(
                "CREATE TABLE {UPDATE_TABLE} (id integer NOT NULL, v integer NOT NULL);
                 INSERT INTO {UPDATE_TABLE} SELECT i, 0 FROM generate_series(1, {UPDATE_ROWS}) i;
                 VACUUM {UPDATE_TABLE}"
            )),
            Component::Copy => Some(format!(
                "CREATE TABLE {COPY_TABLE} (batch integer NOT NULL, n integer NOT NULL, note text)"
            )),
            Component::Delete => Some(format!(
                "CREATE TABLE {DELETE_TABLE} (id integer NOT NULL, note text);
                 INSERT INTO {DELETE_TABLE} SELECT i, repeat('d', {NOTE_BYTES}) FROM generate_series(1, {DELETE_ROWS}) i;
                 VACUUM {DELETE_TABLE}"
            )),
            Component::Vacuum => Some(format!(
                "CREATE TABLE {VACUUM_TABLE} (id integer NOT NULL, v integer NOT NULL, note text) WITH (fillfactor = {VACUUM_FILLFACTOR});
                 INSERT INTO {VACUUM_TABLE} SELECT i, 0, repeat('v', {NOTE_BYTES}) FROM generate_series(1, {VACUUM_ROWS}) i;
                 VACUUM {VACUUM_TABLE}"
            )),
            Component::Lock => Some(format!(
                "CREATE TABLE {LOCK_TABLE} (id integer PRIMARY KEY, v integer NOT NULL, note text);
                 INSERT INTO {LOCK_TABLE} SELECT i, 0, repeat('l', {NOTE_BYTES}) FROM generate_series(1, {LOCK_ROWS}) i;
                 VACUUM {LOCK_TABLE}"
            )),
            Component::Ddl | Component::Checkpointer => None,
        }
    }

    /// Whether table `name` is one of this component's.
    pub fn owns(self, name: &str) -> bool {
        match self {
            Component::Insert => name == INSERT_TABLE,
            Component::Update => name == UPDATE_TABLE,
            Component::Copy => name == COPY_TABLE,
            Component::Delete => name == DELETE_TABLE,
            Component::Vacuum => name == VACUUM_TABLE,
            Component::Ddl => ddl_table_number(name).is_some(),
            Component::Lock => name == LOCK_TABLE,
            Component::Checkpointer => false,
        }
    }
}

/// Sessions of the insert component.
pub const INSERT_SESSIONS: u32 = 4;
/// Sessions of the delete component.
pub const DELETE_SESSIONS: u32 = 4;
/// Rows of the update table: every transaction updates them all.
pub const UPDATE_ROWS: i64 = 20_000;
/// Rows per COPY batch.
pub const COPY_BATCH_ROWS: i64 = 50_000;
/// Rows of the delete table at the start.
pub const DELETE_ROWS: i64 = 8_000;
/// Rows of the vacuum table at the start (inserts add more).
pub const VACUUM_ROWS: i64 = 5_000;
/// Room left on the vacuum table's pages, so that updates stay on them
/// and the pages go in and out of all-visible.
pub const VACUUM_FILLFACTOR: u32 = 70;
/// Most rows one change of the vacuum table touches.
pub const VACUUM_RANGE_ROWS_MAX: i64 = 120;
/// Rows the ddl component puts in each table.
pub const DDL_ROWS: i64 = 500;
/// Tables the ddl component keeps; older ones are dropped.
pub const DDL_LIVE_TABLES: usize = 3;
/// Sessions of the lock component; session `i` owns the rows whose id
/// is `i` modulo this. Two are enough for every kind of lock meeting
/// (each locks the other's rows), and `mixed` with the largest other
/// components and the checkpointer then stays within the harness's
/// `max_sessions`.
pub const LOCK_SESSIONS: u32 = 2;
/// Rows of the lock table.
pub const LOCK_ROWS: i64 = 3_000;
/// Most rows one key-share lock of the lock component takes at once.
pub const LOCK_RANGE_ROWS_MAX: i64 = 400;
/// Bytes of filler text in rows that carry one, so that tables span
/// enough pages for some of them to be written back before the kill.
pub const NOTE_BYTES: usize = 100;

pub const INSERT_TABLE: &str = "crash_insert";
pub const UPDATE_TABLE: &str = "crash_update";
pub const COPY_TABLE: &str = "crash_copy";
pub const DELETE_TABLE: &str = "crash_delete";
pub const VACUUM_TABLE: &str = "crash_vacuum";
pub const LOCK_TABLE: &str = "crash_lock";
const DDL_TABLE_PREFIX: &str = "crash_ddl_";

/// The name of the ddl component's table number `n`.
pub fn ddl_table(n: i64) -> String {
    format!("{DDL_TABLE_PREFIX}{n}")
}

/// The number of a ddl component's table, from its name.
pub fn ddl_table_number(name: &str) -> Option<i64> {
    let digits = name.strip_prefix(DDL_TABLE_PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_workload_is_refused_with_the_choices() {
        assert_eq!(Workload::from_name("Update"), Ok(Workload::Update));
        let e = Workload::from_name("updates").unwrap_err();
        assert_eq!(
            e,
            "unknown workload \"updates\"; choose one of insert, update, copy, delete, vacuum, checkpoint, ddl, lock, mixed"
        );
    }

    #[test]
    fn mixed_runs_two_to_four_distinct_data_components() {
        let mut rng = XorShift::new(7);
        for _ in 0..200 {
            let c = Workload::Mixed.components(&mut rng);
            let data: Vec<_> = c
                .iter()
                .filter(|c| **c != Component::Checkpointer)
                .collect();
            assert!((2..=4).contains(&data.len()), "{c:?}");
            let mut unique = c.clone();
            unique.dedup();
            assert_eq!(unique, c, "sorted and distinct");
        }
    }

    #[test]
    fn each_table_belongs_to_one_component() {
        for name in [
            INSERT_TABLE,
            UPDATE_TABLE,
            COPY_TABLE,
            DELETE_TABLE,
            VACUUM_TABLE,
            LOCK_TABLE,
            "crash_ddl_12",
        ] {
            let owners: Vec<_> = Component::DATA
                .into_iter()
                .chain([Component::Checkpointer])
                .filter(|c| c.owns(name))
                .collect();
            assert_eq!(owners.len(), 1, "{name}: {owners:?}");
        }
        assert_eq!(ddl_table_number("crash_ddl_"), None);
        assert_eq!(ddl_table_number("crash_ddl_1x"), None);
        assert_eq!(ddl_table_number(&ddl_table(40)), Some(40));
    }
}
