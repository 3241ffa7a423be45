//! Bulk loads and transactional CREATE TABLE: a table created in a
//! transaction is that transaction's until it commits (nobody else sees
//! it; an abort removes it with its files), and a load into it skips the
//! WAL and syncs the table at commit instead (PostgreSQL's `wal_level =
//! minimal`). Crashes before and after the commit, with the table's pages
//! written by eviction and by a checkpoint meanwhile, replay of the
//! table's creation over its synced file, and logged changes after the
//! commit. A COPY into a table created earlier logs one multi-insert record
//! per page, which replay applies once. (`tests/crash.rs` kills real
//! processes running such loads in the ddl workload.)

mod common;

use std::path::Path;
use std::sync::atomic::Ordering;

use aiostore::config::IoMethod;
use aiostore::database::Database;
use common::{crash, err, ints, new_small_pool_db, run, small_pool_settings, storage_is_sound};

/// Rows of the loads: with `shared_buffers=512` (4 MiB, a 64-buffer
/// bulk-write ring) about 6 MiB of table, so eviction writes most of its
/// pages before the commit.
const LOAD_ROWS: i64 = 60_000;

/// A CSV of rows (i, 'row i', i % 7) for i in 1..=rows, next to the data
/// directory.
fn csv(dir: &Path, rows: i64) -> String {
    let path = dir.join(format!("load-{rows}.csv"));
    if !path.exists() {
        let text: String = (1..=rows)
            .map(|i| format!("{i},row {i},{}\n", i % 7))
            .collect();
        std::fs::write(&path, text).unwrap();
    }
    path.to_str().unwrap().to_string()
}

const CREATE: &str = "CREATE TABLE t (id integer NOT NULL, note text, k integer)";

/// The relation files of `rel` under `path`/base.
fn files_of(path: &Path, rel: u32) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(path.join("base"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.split(|c: char| !c.is_ascii_digit()).next() == Some(rel.to_string().as_str()))
        .collect();
    names.sort();
    names
}

fn wal_bytes(db: &Database) -> u64 {
    db.wal().stats().bytes.load(Ordering::SeqCst)
}

fn wal_records(db: &Database) -> u64 {
    db.wal().stats().records.load(Ordering::SeqCst)
}

fn table_bytes(db: &Database, name: &str) -> u64 {
    let rel = db.catalog().table(name).unwrap().heap.rel;
    u64::from(
        db.pool()
            .relation(rel)
            .nblocks(aiostore::storage::Fork::Main)
            .unwrap(),
    ) * aiostore::storage::BLOCK_SIZE as u64
}

/// Other sessions do not see a table before its creator commits: they
/// cannot read it, create it or drop it; then they see it with its rows.
fn a_table_is_its_creators_until_commit(method: IoMethod) {
    let (dir, _path, db) = new_small_pool_db(method, false);
    let mut a = db.session().unwrap();
    let mut b = db.session().unwrap();
    run(&mut a, "BEGIN");
    run(&mut a, CREATE);
    run(
        &mut a,
        &format!("COPY t FROM '{}' (FORMAT csv)", csv(dir.path(), 1000)),
    );
    run(&mut a, "INSERT INTO t VALUES (0, 'zero', 0)");
    assert_eq!(ints(&mut a, "SELECT count(*) FROM t"), vec![1001]);
    let e = err(&mut b, "SELECT count(*) FROM t");
    assert!(e.contains("\"t\" does not exist"), "{e}");
    let e = err(&mut b, CREATE);
    assert!(
        e.contains("is being created by a transaction still in progress"),
        "{e}"
    );
    let e = err(&mut b, "CREATE TABLE IF NOT EXISTS t (x int)");
    assert!(e.contains("is being created"), "{e}");
    let e = err(&mut b, "DROP TABLE t");
    assert!(e.contains("does not exist"), "{e}");
    assert!(db.catalog().table("t").is_err());
    assert!(db.catalog().tables().is_empty());
    // A table of its own, created meanwhile, is not held up.
    run(&mut b, "CREATE TABLE u (x int)");
    // Its own statements see it, updates and deletes included.
    run(&mut a, "UPDATE t SET k = 100 WHERE id <= 10");
    run(&mut a, "DELETE FROM t WHERE id = 0");
    run(&mut a, "COMMIT");
    assert_eq!(
        ints(&mut b, "SELECT count(*), sum(id) FROM t"),
        vec![1000, 500_500]
    );
    assert_eq!(
        ints(&mut b, "SELECT count(*) FROM t WHERE k = 100"),
        vec![10]
    );
    assert!(db.catalog().table("t").unwrap().creator().is_none());
    // Changes after the commit are logged as any.
    run(&mut b, "INSERT INTO t VALUES (2000, 'later', 1)");
    drop((a, b));
    drop(db);
    let db = Database::open(
        &dir.path().join("data"),
        &small_pool_settings(method, false),
    )
    .unwrap();
    let mut s = db.session().unwrap();
    assert_eq!(ints(&mut s, "SELECT count(*) FROM t"), vec![1001]);
    assert_eq!(ints(&mut s, "SELECT count(*) FROM u"), vec![0]);
}

/// A creation that rolls back (ROLLBACK, a failed block's COMMIT, a
/// failed statement of its own, the session ending) leaves no table and
/// no file, and the name can be used again.
fn a_creation_that_rolls_back_leaves_nothing(method: IoMethod) {
    let (dir, path, db) = new_small_pool_db(method, false);
    let input = csv(dir.path(), LOAD_ROWS);
    let load = format!("COPY t FROM '{input}' (FORMAT csv)");
    let rels = || aiostore::database::recovery::table_files(&path.join("base"), 16384).unwrap();
    let mut s = db.session().unwrap();
    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "1,one,1\nnot a number,two,2\n").unwrap();
    let bad_load = format!("COPY t FROM '{}' (FORMAT csv)", bad.display());
    for ending in ["ROLLBACK", "failed COMMIT", "session end"] {
        run(&mut s, "BEGIN");
        run(&mut s, CREATE);
        run(&mut s, &load);
        assert!(!rels().is_empty(), "{ending}: the load made no file");
        match ending {
            "ROLLBACK" => {
                run(&mut s, "ROLLBACK");
            }
            "failed COMMIT" => {
                let e = err(&mut s, &bad_load);
                assert!(e.contains("line 2"), "{e}");
                assert_eq!(run(&mut s, "COMMIT")[0].tag, "ROLLBACK");
            }
            _ => {
                drop(s);
                s = db.session().unwrap();
            }
        }
        assert!(rels().is_empty(), "{ending}: files left: {:?}", rels());
        assert!(db.catalog().table("t").is_err(), "{ending}");
        let e = err(&mut s, "SELECT * FROM t");
        assert!(e.contains("does not exist"), "{ending}: {e}");
    }
    run(&mut s, CREATE);
    run(&mut s, &load);
    assert_eq!(ints(&mut s, "SELECT count(*) FROM t"), vec![LOAD_ROWS]);
    drop(s);
    storage_is_sound(&db);
    drop(db);
    let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
    let mut s = db.session().unwrap();
    assert_eq!(ints(&mut s, "SELECT count(*) FROM t"), vec![LOAD_ROWS]);
}

/// A load into a table created in the same transaction logs (almost)
/// nothing; into a table created before, it logs about the table's size
/// in multi-insert records, a few per page instead of one per row.
fn a_load_logs_nothing_into_a_new_table_and_pages_into_an_old_one(method: IoMethod) {
    let (dir, _path, db) = new_small_pool_db(method, false);
    let input = csv(dir.path(), LOAD_ROWS);
    let mut s = db.session().unwrap();
    let (bytes, records) = (wal_bytes(&db), wal_records(&db));
    run(&mut s, "BEGIN");
    run(&mut s, CREATE);
    run(&mut s, &format!("COPY t FROM '{input}' (FORMAT csv)"));
    run(&mut s, "COMMIT");
    let table = table_bytes(&db, "t");
    let skipped = (wal_bytes(&db) - bytes, wal_records(&db) - records);
    assert!(
        skipped.0 < 16 * 1024 && skipped.1 < 20,
        "the load into a new table logged {skipped:?} for a {table}-byte table"
    );
    run(
        &mut s,
        "CREATE TABLE old (id integer NOT NULL, note text, k integer)",
    );
    let (bytes, records) = (wal_bytes(&db), wal_records(&db));
    run(&mut s, &format!("COPY old FROM '{input}' (FORMAT csv)"));
    let logged = (wal_bytes(&db) - bytes, wal_records(&db) - records);
    let pages = table_bytes(&db, "old") / aiostore::storage::BLOCK_SIZE as u64;
    assert!(
        logged.0 >= table / 2 && logged.0 < table * 3 / 2,
        "a load of a {table}-byte table logged {logged:?}"
    );
    // An INIT record and a MULTI_INSERT per page (a few pages take two
    // batches), and the commit.
    assert!(
        logged.1 <= 3 * pages + 10 && logged.1 < LOAD_ROWS as u64 / 20,
        "{logged:?} records for {pages} pages of {LOAD_ROWS} rows"
    );
    assert_eq!(
        ints(&mut s, "SELECT count(*), sum(id) FROM old"),
        ints(&mut s, "SELECT count(*), sum(id) FROM t")
    );
}

/// Crashes before the loading transaction commits, with its pages written
/// by eviction and by a checkpoint: the table is gone with its files.
fn a_crash_before_commit_leaves_no_table_and_no_file(method: IoMethod) {
    for checkpoint_during_load in [false, true] {
        let (dir, path, db) = new_small_pool_db(method, false);
        let input = csv(dir.path(), LOAD_ROWS);
        let mut s = db.session().unwrap();
        run(&mut s, "CREATE TABLE other (id int)");
        run(&mut s, "BEGIN");
        run(&mut s, CREATE);
        run(&mut s, &format!("COPY t FROM '{input}' (FORMAT csv)"));
        if checkpoint_during_load {
            let mut c = db.session().unwrap();
            run(&mut c, "INSERT INTO other VALUES (1)");
            run(&mut c, "CHECKPOINT");
        }
        let rel = {
            let rels =
                aiostore::database::recovery::table_files(&path.join("base"), 16384).unwrap();
            *rels.iter().max().unwrap()
        };
        assert!(!files_of(&path, rel).is_empty());
        db.simulate_crash();
        drop(s);
        crash(db);
        let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
        assert!(db.recovery().is_some());
        let mut s = db.session().unwrap();
        let e = err(&mut s, "SELECT count(*) FROM t");
        assert!(e.contains("does not exist"), "{e}");
        assert!(
            files_of(&path, rel).is_empty(),
            "checkpoint {checkpoint_during_load}: {:?}",
            files_of(&path, rel)
        );
        assert_eq!(
            ints(&mut s, "SELECT count(*) FROM other"),
            vec![i64::from(checkpoint_during_load)]
        );
        drop(s);
        storage_is_sound(&db);
        // The name and a new number are free.
        let mut s = db.session().unwrap();
        run(&mut s, CREATE);
    }
}

/// Crashes after the loading transaction committed: every row is there,
/// every page verifies and the visibility map agrees, whether replay
/// starts before the table's creation (replaying it must not empty the
/// synced file) or after it (a checkpoint ran during the load, writing
/// pages never logged); the changes after the commit are logged, the
/// first one to each page with its image, and replayed.
fn a_crash_after_commit_keeps_every_row(method: IoMethod) {
    for direct in [false, true] {
        for checkpoint_during_load in [false, true] {
            let case = format!("direct {direct}, checkpoint {checkpoint_during_load}");
            let (dir, path, db) = new_small_pool_db(method, direct);
            let input = csv(dir.path(), LOAD_ROWS);
            let redo_before = db.wal().redo();
            let mut s = db.session().unwrap();
            run(&mut s, "BEGIN");
            run(&mut s, CREATE);
            run(&mut s, &format!("COPY t FROM '{input}' (FORMAT csv)"));
            if checkpoint_during_load {
                let mut c = db.session().unwrap();
                run(&mut c, "CHECKPOINT");
                assert!(db.wal().redo() > redo_before, "{case}");
            }
            run(
                &mut s,
                "INSERT INTO t SELECT g, 'more', 1 FROM generate_series(100001, 100100) g",
            );
            run(&mut s, "COMMIT");
            // Logged changes after the commit: each page's first carries
            // its image (the page was never logged, its pd_lsn is 0).
            let images = db.wal().stats().full_page_images.load(Ordering::SeqCst);
            run(&mut s, "UPDATE t SET k = -1 WHERE id % 1000 = 0");
            let new_images = db.wal().stats().full_page_images.load(Ordering::SeqCst) - images;
            assert!(
                new_images >= (LOAD_ROWS / 1000) as u64 / 2,
                "{case}: {new_images} images for updates on 60 pages"
            );
            run(&mut s, "DELETE FROM t WHERE id > 100050");
            if !checkpoint_during_load {
                // The log from before the creation is replayed.
                assert_eq!(db.wal().redo(), redo_before, "{case}");
            }
            drop(s);
            crash(db);
            for round in 0..2 {
                let db = Database::open(&path, &small_pool_settings(method, direct)).unwrap();
                assert!(db.recovery().is_some(), "{case}");
                let mut s = db.session().unwrap();
                assert_eq!(
                    ints(&mut s, "SELECT count(*), sum(id), max(id) FROM t"),
                    vec![
                        LOAD_ROWS + 50,
                        LOAD_ROWS * (LOAD_ROWS + 1) / 2 + 50 * 100_025 + 25,
                        100_050
                    ],
                    "{case}, round {round}"
                );
                assert_eq!(
                    ints(&mut s, "SELECT count(*) FROM t WHERE k = -1"),
                    vec![LOAD_ROWS / 1000],
                    "{case}, round {round}"
                );
                if round == 0 {
                    // The map: VACUUM sets every bit (logged), a crash
                    // keeps them true.
                    run(&mut s, "VACUUM t");
                    // Made durable, as the WAL writer would within
                    // wal_writer_delay (VACUUM commits nothing).
                    db.wal().flush_all().unwrap();
                    drop(s);
                    crash(db);
                    continue;
                }
                drop(s);
                let findings = storage_is_sound(&db);
                assert!(findings.vm_bits > 0, "{case}: {findings:?}");
                assert!(findings.pages > 0, "{case}: {findings:?}");
            }
        }
    }
}

/// A multi-insert record is replayed onto pages that do not have it, and
/// skipped on pages written after it (their `pd_lsn` covers it); twice in
/// a row changes nothing.
fn multi_insert_replay_is_idempotent(method: IoMethod) {
    for written_back in [false, true] {
        let (dir, path, db) = new_small_pool_db(method, false);
        let input = csv(dir.path(), LOAD_ROWS);
        let mut s = db.session().unwrap();
        run(&mut s, CREATE);
        run(&mut s, "CHECKPOINT");
        run(&mut s, &format!("COPY t FROM '{input}' (FORMAT csv)"));
        if written_back {
            s.buf.flush_all().unwrap();
        }
        drop(s);
        crash(db);
        for round in 0..2 {
            let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
            let report = db.recovery().unwrap().clone();
            let mut s = db.session().unwrap();
            assert_eq!(
                ints(&mut s, "SELECT count(*), sum(id), sum(k) FROM t"),
                vec![
                    LOAD_ROWS,
                    LOAD_ROWS * (LOAD_ROWS + 1) / 2,
                    (1..=LOAD_ROWS).map(|i| i % 7).sum::<i64>()
                ],
                "written back {written_back}, round {round}: {report:?}"
            );
            if round == 0 && !written_back {
                assert!(report.pages_changed > 100, "{report:?}");
            }
            drop(s);
            if round == 1 {
                storage_is_sound(&db);
            }
            crash(db);
        }
    }
}

for_each_method!(
    a_table_is_its_creators_until_commit,
    a_creation_that_rolls_back_leaves_nothing,
    a_load_logs_nothing_into_a_new_table_and_pages_into_an_old_one,
    a_crash_before_commit_leaves_no_table_and_no_file,
    a_crash_after_commit_keeps_every_row,
    multi_insert_replay_is_idempotent,
);
