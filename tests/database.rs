//! Data directories, the catalog, transactions and the heap, below SQL:
//! init/open/lock/version, MVCC visibility across sessions, rollback,
//! vacuum and the visibility map. Every I/O method.

mod common;

use std::sync::Arc;

use aiostore::catalog::ColumnDef;
use aiostore::config::IoMethod;
use aiostore::database::{Database, DbError, Isolation, Session};
use aiostore::heap::tuple::{decode, encode};
use aiostore::heap::{InsertState, ScanControl, Tid};
use aiostore::types::{ColumnType, Value};
use common::temp_dir;

fn open(dir: &std::path::Path, method: IoMethod) -> Arc<Database> {
    Database::open(
        dir,
        &[
            format!("io_method={}", method.name()),
            "shared_buffers=64".into(),
            "max_sessions=8".into(),
        ],
    )
    .unwrap()
}

fn new_db(method: IoMethod) -> (tempfile::TempDir, Arc<Database>) {
    let dir = temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    let db = open(&path, method);
    (dir, db)
}

/// Creates table t as a statement of its own transaction (committed).
fn create_t(s: &mut Session) {
    let db = s.db().clone();
    let mut snap = s.start_statement().unwrap();
    let ids = s.xid(&mut snap).unwrap();
    let def = db
        .catalog()
        .create_table(
            &mut s.buf,
            db.heap(),
            "t",
            vec![
                ColumnDef {
                    name: "id".into(),
                    ty: ColumnType::Integer,
                    not_null: true,
                },
                ColumnDef {
                    name: "note".into(),
                    ty: ColumnType::Text,
                    not_null: false,
                },
            ],
            100,
            false,
            ids,
        )
        .unwrap()
        .expect("created");
    s.created_table(def);
    drop(snap);
    s.end_statement(true).unwrap();
    assert!(db.catalog().table("t").unwrap().creator().is_none());
}

/// Inserts rows `ids` in one statement of the session's transaction.
fn insert(s: &mut Session, ids: impl IntoIterator<Item = i32>) -> Vec<Tid> {
    let db = s.db().clone();
    let table = db.catalog().table("t").unwrap();
    let mut snap = s.start_statement().unwrap();
    let (xid, cid) = s.xid(&mut snap).unwrap();
    let mut state = InsertState::default();
    let mut tids = Vec::new();
    for id in ids {
        let t = encode(
            &table.heap.types,
            &[Value::Integer(id), Value::Text(format!("row {id}"))],
            xid,
            cid,
        )
        .unwrap();
        tids.push(
            db.heap()
                .insert(&mut s.buf, &table.heap, &t, &mut state)
                .unwrap(),
        );
    }
    state.finish(&mut s.buf);
    drop(snap);
    s.end_statement(true).unwrap();
    tids
}

/// Deletes the rows at `tids` in one statement of the session's
/// transaction.
fn delete(s: &mut Session, tids: impl IntoIterator<Item = Tid>) {
    let db = s.db().clone();
    let table = db.catalog().table("t").unwrap();
    let mut snap = s.start_statement().unwrap();
    let (xid, cid) = s.xid(&mut snap).unwrap();
    let by = aiostore::heap::Writer {
        xid,
        cid,
        waits: s.wait_limits(),
    };
    for tid in tids {
        db.heap()
            .delete(&mut s.buf, &table.heap, tid, &by, None)
            .unwrap();
    }
    drop(snap);
    s.end_statement(true).unwrap();
}

/// The ids a new statement of the session sees, sorted.
fn ids(s: &mut Session) -> Vec<i32> {
    let db = s.db().clone();
    let table = db.catalog().table("t").unwrap();
    let snap = s.start_statement().unwrap();
    let mut out = Vec::new();
    let limits = s.stream_limits();
    db.heap()
        .scan(
            &mut s.buf,
            &table.heap,
            snap.get(),
            limits,
            |_, t| {
                let mut v = Vec::new();
                decode(&table.heap.types, t, &[true, false], &mut v).unwrap();
                match v[0] {
                    Value::Integer(id) => out.push(id),
                    ref other => panic!("{other:?}"),
                }
                ScanControl::Continue
            },
            || ScanControl::Continue,
        )
        .unwrap();
    drop(snap);
    s.end_statement(true).unwrap();
    out.sort();
    out
}

fn a_table_survives_reopening(method: IoMethod) {
    let (dir, db) = new_db(method);
    let mut s = db.session().unwrap();
    create_t(&mut s);
    insert(&mut s, 0..500);
    drop(s);
    drop(db);
    let db = open(&dir.path().join("data"), method);
    let mut s = db.session().unwrap();
    assert_eq!(ids(&mut s), (0..500).collect::<Vec<_>>());
    assert_eq!(db.catalog().table("t").unwrap().columns.len(), 2);
}

fn a_second_open_is_refused_naming_the_holder(method: IoMethod) {
    let (dir, db) = new_db(method);
    let path = dir.path().join("data");
    let err = Database::open(&path, &[]).err().expect("second open fails");
    assert!(matches!(err, DbError::InUse { .. }), "{err}");
    assert!(
        err.to_string()
            .contains(&format!("in use by process {}", std::process::id())),
        "{err}"
    );
    // The lock is not the pid file: deleting it lets nobody in.
    std::fs::remove_file(path.join("aiostore.pid")).unwrap();
    let err = Database::open(&path, &[])
        .err()
        .expect("open fails without the pid file");
    assert!(matches!(err, DbError::InUse { .. }), "{err}");
    drop(db);
    // A pid file left behind (as by a process that died) is taken over.
    let pid_file = path.join("aiostore.pid");
    std::fs::write(&pid_file, "999999\n").unwrap();
    let db = open(&path, method);
    assert_eq!(
        std::fs::read_to_string(&pid_file).unwrap(),
        format!("{}\n", std::process::id()),
        "the new holder wrote its pid"
    );
    let err = Database::open(&path, &[])
        .err()
        .expect("the lock is held again");
    assert!(matches!(err, DbError::InUse { .. }), "{err}");
    drop(db);
}

fn init_refuses_a_used_directory_and_open_an_incompatible_one(method: IoMethod) {
    let (dir, db) = new_db(method);
    let path = dir.path().join("data");
    drop(db);
    let err = Database::init(&path).unwrap_err();
    assert!(err.to_string().contains("is not empty"), "{err}");
    std::fs::write(
        path.join("AIOSTORE_VERSION"),
        "aiostore data directory format 99\n",
    )
    .unwrap();
    let err = Database::open(&path, &[]).err().unwrap();
    assert!(err.to_string().contains("incompatible version"), "{err}");
    let err = Database::open(&dir.path().join("nowhere"), &[])
        .err()
        .unwrap();
    assert!(err.to_string().contains("aiostore init"), "{err}");
}

fn sessions_see_only_committed_rows(method: IoMethod) {
    let (_dir, db) = new_db(method);
    let mut a = db.session().unwrap();
    let mut b = db.session().unwrap();
    create_t(&mut a);
    insert(&mut a, 0..10);
    a.begin(Isolation::ReadCommitted).unwrap();
    insert(&mut a, 10..20);
    let first: Vec<i32> = (0..10).collect();
    let both: Vec<i32> = (0..20).collect();
    // A sees its own rows; B sees none of them until A commits.
    assert_eq!(ids(&mut a), both);
    assert_eq!(ids(&mut b), first);
    b.begin(Isolation::RepeatableRead).unwrap();
    assert_eq!(ids(&mut b), first);
    assert!(a.commit().unwrap());
    // Repeatable read keeps its snapshot; read committed moves on.
    assert_eq!(ids(&mut b), first);
    b.commit().unwrap();
    assert_eq!(ids(&mut b), both);
    // A rolled-back transaction leaves nothing.
    a.begin(Isolation::ReadCommitted).unwrap();
    insert(&mut a, 100..200);
    assert_eq!(ids(&mut a).len(), 120, "A saw its rows before rolling back");
    a.rollback().unwrap();
    assert_eq!(ids(&mut a), both);
    assert_eq!(ids(&mut b), both);
}

fn vacuum_removes_dead_rows_and_sets_the_map_only_for_pages_all_can_see(method: IoMethod) {
    let (_dir, db) = new_db(method);
    let mut s = db.session().unwrap();
    create_t(&mut s);
    let tids = insert(&mut s, 0..2000);
    let table = db.catalog().table("t").unwrap();
    // Delete the first 100 rows (all on block 0).
    let first_hundred: Vec<Tid> = (0..100u16).map(|index| Tid { block: 0, index }).collect();
    assert_eq!(tids[..100], first_hundred[..]);
    delete(&mut s, first_hundred);
    // An open transaction that inserted into the last page keeps that
    // page from being all-visible.
    let mut other = db.session().unwrap();
    other.begin(Isolation::ReadCommitted).unwrap();
    let last = insert(&mut other, [5000])[0].block;
    let limits = s.stream_limits();
    let report = db
        .heap()
        .vacuum(&mut s.buf, &table.heap, limits, false, &mut |_, _| {})
        .unwrap();
    assert_eq!(report.tuples_removed, 100);
    assert_eq!(report.tuples_kept, 1901);
    assert_eq!(report.pages_set_all_visible, report.pages - 1, "{report:?}");
    let bits =
        aiostore::heap::vm::all_visible_bits(&mut s.buf, table.heap.rel, report.pages).unwrap();
    assert!(!bits[last as usize]);
    other.commit().unwrap();
    let mut left: Vec<i32> = (100..2000).collect();
    left.push(5000);
    assert_eq!(ids(&mut s), left);
    // A second vacuum skips the all-visible pages; a change clears a bit.
    let report = db
        .heap()
        .vacuum(&mut s.buf, &table.heap, limits, false, &mut |_, _| {})
        .unwrap();
    assert_eq!(report.pages_skipped, report.pages - 1, "{report:?}");
    delete(&mut s, [Tid { block: 1, index: 0 }]);
    let bits =
        aiostore::heap::vm::all_visible_bits(&mut s.buf, table.heap.rel, report.pages).unwrap();
    assert!(!bits[1], "a delete clears the page's bit");
    assert!(bits[0]);
}

fn a_row_inserted_while_vacuum_decides_keeps_the_page_from_being_all_visible(method: IoMethod) {
    let (_dir, db) = new_db(method);
    let mut s = db.session().unwrap();
    create_t(&mut s);
    insert(&mut s, 0..10);
    drop(s);
    // Vacuum looks at block 0 (every row visible to all), then parks
    // before changing it.
    let point = aiostore::inject::VACUUM_BEFORE_PAGE_CHANGE;
    db.aio()
        .injections()
        .attach(point, aiostore::inject::Injection::park().times(1));
    let vacuum = {
        let db = Arc::clone(&db);
        std::thread::spawn(move || {
            let mut s = db.session().unwrap();
            let table = db.catalog().table("t").unwrap();
            let limits = s.stream_limits();
            db.heap()
                .vacuum(&mut s.buf, &table.heap, limits, false, &mut |_, _| {})
                .unwrap()
        })
    };
    assert!(db.aio().injections().wait_until_parked(point));
    // Meanwhile a transaction inserts into the same page and stays open.
    let mut writer = db.session().unwrap();
    writer.begin(Isolation::ReadCommitted).unwrap();
    assert_eq!(insert(&mut writer, [99])[0].block, 0);
    db.aio().injections().release(point);
    let report = vacuum.join().unwrap();
    assert_eq!(report.pages_set_all_visible, 0, "{report:?}");
    // Had the page been marked all-visible, readers would skip the check
    // that hides the uncommitted row.
    let mut reader = db.session().unwrap();
    assert_eq!(ids(&mut reader), (0..10).collect::<Vec<_>>());
    writer.commit().unwrap();
    assert_eq!(ids(&mut reader).len(), 11);
}

/// Vacuum sets block 1's all-visible flag, then a delete clears it before
/// vacuum sets the map bits (and finds no bit to clear): vacuum must look
/// at the flag again and leave block 1's bit clear.
fn a_change_between_vacuums_flag_and_its_bit_leaves_the_bit_clear(method: IoMethod) {
    let (_dir, db) = new_db(method);
    let mut s = db.session().unwrap();
    create_t(&mut s);
    insert(&mut s, 0..600);
    let table = db.catalog().table("t").unwrap();
    let point = aiostore::inject::VACUUM_BEFORE_MAP_BITS;
    db.aio()
        .injections()
        .attach(point, aiostore::inject::Injection::park().times(1));
    let vacuum = {
        let db = Arc::clone(&db);
        let table = Arc::clone(&table);
        std::thread::spawn(move || {
            let mut s = db.session().unwrap();
            let limits = s.stream_limits();
            db.heap()
                .vacuum(&mut s.buf, &table.heap, limits, false, &mut |_, _| {})
                .unwrap()
        })
    };
    assert!(db.aio().injections().wait_until_parked(point));
    delete(&mut s, [Tid { block: 1, index: 0 }]);
    db.aio().injections().release(point);
    let report = vacuum.join().unwrap();
    assert_eq!(report.pages_set_all_visible, report.pages, "{report:?}");
    let bits =
        aiostore::heap::vm::all_visible_bits(&mut s.buf, table.heap.rel, report.pages).unwrap();
    assert!(
        !bits[1],
        "block 1 lost its flag, yet kept its bit: {bits:?}"
    );
    assert!(
        bits.iter().enumerate().all(|(b, &set)| set == (b != 1)),
        "{bits:?}"
    );
}

/// A vacuum that no change overlaps reads each page of a table larger
/// than the pool once: setting the map bits does not read them again
/// (with direct I/O every such read would go to the disk).
fn vacuum_with_no_concurrent_change_reads_each_page_once(method: IoMethod) {
    let (_dir, db) = new_db(method);
    let mut s = db.session().unwrap();
    create_t(&mut s);
    insert(&mut s, 0..40_000);
    let table = db.catalog().table("t").unwrap();
    let nblocks = db
        .pool()
        .relation(table.heap.rel)
        .nblocks(aiostore::storage::Fork::Main)
        .unwrap();
    assert!(
        nblocks > 2 * db.pool().nbuffers(),
        "the table ({nblocks} blocks) must not fit in the pool"
    );
    let reads = || {
        db.pool()
            .stats()
            .reads
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let before = reads();
    let limits = s.stream_limits();
    let report = db
        .heap()
        .vacuum(&mut s.buf, &table.heap, limits, false, &mut |_, _| {})
        .unwrap();
    assert_eq!(report.pages_set_all_visible, nblocks, "{report:?}");
    let read = reads() - before;
    // Each heap page the pool did not hold once, plus the map forks' few
    // pages (a second look would read them all again).
    let outside_pool = u64::from(nblocks - db.pool().nbuffers());
    assert!(
        read >= outside_pool && read <= u64::from(nblocks) + 8,
        "vacuum read {read} blocks of a {nblocks}-block table"
    );
}

for_each_method!(
    a_change_between_vacuums_flag_and_its_bit_leaves_the_bit_clear,
    a_row_inserted_while_vacuum_decides_keeps_the_page_from_being_all_visible,
    a_table_survives_reopening,
    a_second_open_is_refused_naming_the_holder,
    init_refuses_a_used_directory_and_open_an_incompatible_one,
    sessions_see_only_committed_rows,
    vacuum_with_no_concurrent_change_reads_each_page_once,
    vacuum_removes_dead_rows_and_sets_the_map_only_for_pages_all_can_see,
);
