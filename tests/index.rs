//! Indexes from SQL: CREATE INDEX and DROP INDEX, entries kept by INSERT,
//! UPDATE and COPY, unique violations with PostgreSQL's text (also
//! between sessions), vacuum removing entries before it frees their
//! rows' line pointers, `verify_index`, and indexes across a crash. Every
//! I/O method.

mod common;

use std::sync::Arc;

use aiostore::config::IoMethod;
use aiostore::database::Database;
use aiostore::types::Value;
use common::{
    crash, err, force_index, ints, new_small_pool_db, plan_lines, relation_files, rows, run,
    small_pool_settings,
};

const METHODS: [IoMethod; 3] = [IoMethod::Sync, IoMethod::Worker, IoMethod::IoUring];

fn verified(s: &mut aiostore::database::Session, index: &str) -> i64 {
    ints(s, &format!("SELECT verify_index('{index}')"))[0]
}

#[test]
fn create_index_builds_and_dml_keeps_entries_for_every_row_version() {
    for method in METHODS {
        let (_dir, _path, db) = new_small_pool_db(method, false);
        let mut s = db.session().unwrap();
        run(
            &mut s,
            "CREATE TABLE t (id int, name text, score double precision)",
        );
        run(
            &mut s,
            "INSERT INTO t SELECT i, 'n' || (i % 100), i / 7.0 FROM generate_series(1, 5000) AS g(i)",
        );
        run(&mut s, "CREATE INDEX ON t (name DESC, id)");
        run(&mut s, "CREATE UNIQUE INDEX t_id ON t (id)");
        assert_eq!(verified(&mut s, "t_name_id_idx"), 5000, "{method:?}");
        assert_eq!(verified(&mut s, "t_id"), 5000);
        // Every new version gets entries; the old ones keep theirs until
        // vacuum.
        run(&mut s, "UPDATE t SET name = 'x' || id WHERE id % 10 = 0");
        run(
            &mut s,
            "INSERT INTO t VALUES (6000, NULL, NULL), (6001, NULL, NULL)",
        );
        run(&mut s, "DELETE FROM t WHERE id <= 100");
        assert_eq!(verified(&mut s, "t_id"), 5002 + 500);
        run(&mut s, "VACUUM t");
        // 100 deleted rows and 500 old versions gone, entries with them.
        assert_eq!(verified(&mut s, "t_id"), 5002 - 100);
        assert_eq!(verified(&mut s, "t_name_id_idx"), 5002 - 100);
        // COPY fills a page at a time and still adds each row's entries.
        let copy = (10_000..12_000)
            .map(|i| format!("{i}\tc{i}\t1.5\n"))
            .collect::<String>();
        let mut input = std::io::Cursor::new(copy.into_bytes());
        let mut io = aiostore::sql::StatementIo {
            stdin: Some(&mut input),
            ..Default::default()
        };
        aiostore::sql::execute_each(&mut s, "COPY t FROM STDIN", &mut io, |_| {}).unwrap();
        assert_eq!(verified(&mut s, "t_id"), 4902 + 2000);
        run(&mut s, "DROP INDEX t_name_id_idx");
        assert!(err(&mut s, "SELECT verify_index('t_name_id_idx')").contains("does not exist"));
        run(&mut s, "DROP TABLE t");
        assert!(err(&mut s, "SELECT verify_index('t_id')").contains("does not exist"));
    }
}

#[test]
fn create_index_on_a_key_too_large_for_a_page_fails_naming_the_index() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Sync, false);
    let mut s = db.session().unwrap();
    run(&mut s, "CREATE TABLE t (id int, v text)");
    run(
        &mut s,
        "INSERT INTO t SELECT i, 'v' || i FROM generate_series(1, 2000) AS g(i)",
    );
    run(&mut s, "INSERT INTO t VALUES (0, repeat('x', 3000))");
    let e = err(&mut s, "CREATE INDEX t_v ON t (v)");
    assert!(
        e.starts_with("index row size ")
            && e.contains("exceeds btree maximum 2696 for index \"t_v\""),
        "{e}"
    );
    // The failed build left no index behind; a build without the long
    // key succeeds.
    run(&mut s, "DELETE FROM t WHERE id = 0");
    run(&mut s, "VACUUM t");
    run(&mut s, "CREATE INDEX t_v ON t (v)");
    assert_eq!(verified(&mut s, "t_v"), 2000);
}

#[test]
fn a_unique_index_refuses_duplicates_with_postgresql_words() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Sync, false);
    let mut s = db.session().unwrap();
    run(&mut s, "CREATE TABLE t (id int, v text)");
    run(
        &mut s,
        "INSERT INTO t VALUES (1, 'a'), (2, 'b'), (NULL, 'c'), (NULL, 'd')",
    );
    run(&mut s, "CREATE UNIQUE INDEX t_pkey ON t (id)");
    assert_eq!(
        err(&mut s, "INSERT INTO t VALUES (2, 'again')"),
        "duplicate key value violates unique constraint \"t_pkey\"\nDETAIL:  Key (id)=(2) already exists."
    );
    // The failed statement left no row (its entry points at a row of an
    // aborted statement, which no later check counts).
    assert_eq!(ints(&mut s, "SELECT count(*) FROM t WHERE id = 2"), vec![1]);
    run(&mut s, "INSERT INTO t VALUES (3, 'c')");
    // An UPDATE that keeps the key is no conflict with its old version;
    // one that takes another row's key is.
    run(&mut s, "UPDATE t SET v = 'z' WHERE id = 3");
    assert!(
        err(&mut s, "UPDATE t SET id = 1 WHERE id = 3").contains("Key (id)=(1) already exists.")
    );
    // A deleted key may come back.
    run(&mut s, "DELETE FROM t WHERE id = 1");
    run(&mut s, "INSERT INTO t VALUES (1, 'back')");
    // Building a unique index over duplicates fails and leaves nothing.
    run(&mut s, "CREATE TABLE d (k int)");
    run(&mut s, "INSERT INTO d VALUES (1), (5), (5)");
    assert_eq!(
        err(&mut s, "CREATE UNIQUE INDEX d_k ON d (k)"),
        "could not create unique index \"d_k\"\nDETAIL:  Key (k)=(5) is duplicated."
    );
    assert!(err(&mut s, "SELECT verify_index('d_k')").contains("does not exist"));
    run(&mut s, "CREATE INDEX d_k ON d (k)");
    assert!(err(&mut s, "CREATE INDEX d_k ON d (k)").contains("relation \"d_k\" already exists"));
    let r = run(&mut s, "CREATE INDEX IF NOT EXISTS d_k ON d (k)");
    assert_eq!(
        r[0].notices,
        vec!["NOTICE: relation \"d_k\" already exists, skipping"]
    );
    assert!(err(&mut s, "CREATE INDEX ON d (nope)").contains("column \"nope\" does not exist"));
    assert!(err(&mut s, "CREATE INDEX ON d USING hash (k)").contains("only btree"));
    assert!(err(&mut s, "BEGIN; CREATE INDEX ON d (k)").contains("CREATE INDEX"));
}

#[test]
fn two_sessions_inserting_one_key_one_wins_and_the_other_waits_then_fails_or_succeeds() {
    for commit in [true, false] {
        let (_dir, _path, db) = new_small_pool_db(IoMethod::Worker, false);
        let mut a = db.session().unwrap();
        run(&mut a, "CREATE TABLE t (id int)");
        run(&mut a, "CREATE UNIQUE INDEX t_id ON t (id)");
        run(&mut a, "BEGIN");
        run(&mut a, "INSERT INTO t VALUES (7)");
        let other = {
            let db = Arc::clone(&db);
            std::thread::spawn(move || {
                let mut b = db.session().unwrap();
                aiostore::sql::execute(&mut b, "INSERT INTO t VALUES (7)").map(|_| ())
            })
        };
        // B waits for A's transaction (bounded by the row wait); A ends it.
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(!other.is_finished(), "the second inserter did not wait");
        run(&mut a, if commit { "COMMIT" } else { "ROLLBACK" });
        let b = other.join().unwrap();
        if commit {
            let e = b.unwrap_err().to_string();
            assert!(e.contains("Key (id)=(7) already exists."), "{e}");
        } else {
            b.unwrap();
        }
        assert_eq!(ints(&mut a, "SELECT count(*) FROM t"), vec![1]);
        // The winner's entry only: after a rollback, the second one's
        // unique check found the entry of the row that rolled back dead
        // to everyone and removed it.
        assert_eq!(verified(&mut a, "t_id"), 1);
    }
}

#[test]
fn a_line_pointer_vacuum_frees_never_brings_back_a_stale_entry() {
    for method in METHODS {
        let (_dir, _path, db) = new_small_pool_db(method, false);
        let mut s = db.session().unwrap();
        run(&mut s, "CREATE TABLE t (k int, pad text)");
        run(
            &mut s,
            "INSERT INTO t SELECT i, repeat('p', 100) FROM generate_series(1, 500) AS g(i)",
        );
        run(&mut s, "CREATE UNIQUE INDEX t_k ON t (k)");
        run(&mut s, "DELETE FROM t WHERE k % 2 = 0");
        run(&mut s, "VACUUM t");
        // The freed line pointers take new rows with the deleted keys:
        // had an old entry survived, it would point at a new row with
        // another key, and the unique check or verify would trip on it.
        run(
            &mut s,
            "INSERT INTO t SELECT i + 1, 'new' FROM generate_series(1, 500, 2) AS g(i)",
        );
        assert_eq!(verified(&mut s, "t_k"), 500, "{method:?}");
        let keys = run(&mut s, "SELECT k FROM t GROUP BY k")
            .pop()
            .unwrap()
            .rows;
        assert_eq!(keys.len(), 500);
    }
}

#[test]
fn indexes_come_back_after_a_crash_and_a_half_made_one_goes() {
    for method in METHODS {
        let (_dir, path, db) = new_small_pool_db(method, false);
        {
            let mut s = db.session().unwrap();
            run(&mut s, "CREATE TABLE t (id int, v text)");
            run(
                &mut s,
                "INSERT INTO t SELECT i, 'v' || i FROM generate_series(1, 3000) AS g(i)",
            );
            run(&mut s, "CREATE UNIQUE INDEX t_id ON t (id)");
            run(&mut s, "CHECKPOINT");
            run(
                &mut s,
                "INSERT INTO t SELECT i, 'w' FROM generate_series(3001, 4000) AS g(i)",
            );
            run(&mut s, "UPDATE t SET v = 'u' WHERE id % 3 = 0");
            // A table whose transaction never commits, with the index of
            // its primary key half made: neither is there after the crash.
            run(&mut s, "BEGIN");
            run(&mut s, "CREATE TABLE u (id int PRIMARY KEY)");
            run(
                &mut s,
                "INSERT INTO u SELECT i FROM generate_series(1, 500) AS g(i)",
            );
            db.wal().flush_all().unwrap();
            // Killed with the transaction open: the session does not roll
            // it back as it goes.
            db.simulate_crash();
        }
        crash(db);
        let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
        let mut s = db.session().unwrap();
        assert_eq!(verified(&mut s, "t_id"), 4000 + 1333, "{method:?}");
        assert!(err(&mut s, "INSERT INTO t VALUES (5, 'dup')").contains("already exists"));
        assert!(err(&mut s, "SELECT verify_index('u_pkey')").contains("does not exist"));
        run(&mut s, "CREATE TABLE u (id int PRIMARY KEY)");
        assert_eq!(verified(&mut s, "u_pkey"), 0);
    }
}

/// Blocks of table `name`'s heap.
fn heap_pages(db: &Arc<Database>, name: &str) -> u32 {
    let rel = db.catalog().table(name).unwrap().heap.rel;
    let s = db.session().unwrap();
    s.buf
        .pool()
        .relation(rel)
        .nblocks(aiostore::storage::Fork::Main)
        .unwrap()
}

#[test]
fn rows_updated_again_and_again_keep_to_their_page_and_an_old_snapshot_keeps_its_versions() {
    for method in METHODS {
        let (_dir, path, db) = new_small_pool_db(method, false);
        let mut s = db.session().unwrap();
        run(
            &mut s,
            "CREATE TABLE t (id int PRIMARY KEY, v int, pad text)",
        );
        run(
            &mut s,
            "INSERT INTO t SELECT i, 0, repeat('x', 100) FROM generate_series(1, 50) AS g(i)",
        );
        assert_eq!(heap_pages(&db, "t"), 1);
        // An old snapshot: the versions it sees must survive pruning.
        let mut old = db.session().unwrap();
        run(&mut old, "BEGIN ISOLATION LEVEL REPEATABLE READ");
        assert_eq!(ints(&mut old, "SELECT sum(v) FROM t"), [0]);
        for i in 0..300 {
            run(
                &mut s,
                &format!("UPDATE t SET v = v + 1 WHERE id = {}", i % 50 + 1),
            );
        }
        assert_eq!(ints(&mut old, "SELECT sum(v) FROM t"), [0], "{method:?}");
        assert_eq!(ints(&mut old, "SELECT v FROM t WHERE id = 7"), [0]);
        run(&mut old, "COMMIT");
        let grown = heap_pages(&db, "t");
        // Each update now prunes what no snapshot needs from the row's
        // page and puts the new version there: the dead versions leave
        // a 4-byte line pointer each until vacuum, not 140 bytes.
        for i in 0..2000 {
            run(
                &mut s,
                &format!("UPDATE t SET v = v + 1 WHERE id = {}", i % 50 + 1),
            );
        }
        let pages = heap_pages(&db, "t");
        assert!(
            pages <= grown + 3,
            "{method:?}: {grown} pages grew to {pages} (no pruning: about 35 more)"
        );
        assert_eq!(ints(&mut s, "SELECT sum(v) FROM t"), [2300]);
        // Each row's entry, and at most the one of its last version before
        // (its deleter was the last to commit when it was checked).
        assert!(verified(&mut s, "t_pkey") <= 100, "{method:?}");
        // Vacuum frees the dead line pointers after their entries.
        run(&mut s, "VACUUM t");
        assert_eq!(verified(&mut s, "t_pkey"), 50, "{method:?}");
        // Replay repeats the pruning: the table reads the same after a
        // crash.
        for i in 0..500 {
            run(
                &mut s,
                &format!("UPDATE t SET v = v + 1 WHERE id = {}", i % 50 + 1),
            );
        }
        drop(s);
        drop(old);
        db.wal().flush_all().unwrap();
        crash(db);
        let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
        let mut s = db.session().unwrap();
        assert_eq!(ints(&mut s, "SELECT sum(v) FROM t"), [2800], "{method:?}");
        assert_eq!(ints(&mut s, "SELECT v FROM t WHERE id = 50"), [56]);
        run(&mut s, "VACUUM t");
        assert_eq!(verified(&mut s, "t_pkey"), 50, "{method:?}");
        assert_eq!(ints(&mut s, "SELECT count(*) FROM t"), [50]);
    }
}

/// A load as loaders write it (`BEGIN; CREATE TABLE; COPY; ALTER TABLE …
/// ADD PRIMARY KEY; CREATE INDEX; COMMIT`): the indexes of a table the
/// block created are the block's. They see its rows and deletions as its
/// statements do (a key deleted and inserted again is no duplicate), are
/// used inside the block, go with its rollback or with a crash before the
/// commit, and are whole after a crash that follows it. Any other table's
/// index is still refused in a block.
#[test]
fn indexes_of_a_table_the_block_created_are_the_blocks() {
    for method in METHODS {
        let (_dir, path, db) = new_small_pool_db(method, false);
        let mut s = db.session().unwrap();
        run(&mut s, "CREATE TABLE t (id int)");
        let files = relation_files(&path);
        let load = "BEGIN; CREATE TABLE u (id int, v text); \
             INSERT INTO u SELECT i, 'v' || i FROM generate_series(1, 2000) AS g(i); \
             DELETE FROM u WHERE id = 5; INSERT INTO u VALUES (5, 'again'); \
             UPDATE u SET v = 'w' WHERE id = 7; \
             ALTER TABLE u ADD PRIMARY KEY (id); CREATE INDEX u_v ON u (v)";
        run(&mut s, load);
        // Another session sees neither the table nor its indexes.
        let mut other = db.session().unwrap();
        assert!(err(&mut other, "SELECT verify_index('u_pkey')").contains("does not exist"));
        force_index(&mut s, true);
        assert!(plan_lines(&mut s, "EXPLAIN SELECT v FROM u WHERE id = 5")
            .iter()
            .any(|l| l.contains("u_pkey")));
        assert_eq!(
            rows(&mut s, "SELECT v FROM u WHERE id = 5"),
            [[Value::Text("again".into())]],
            "{method:?}"
        );
        assert!(err(&mut s, "INSERT INTO u VALUES (7, 'dup')").contains("already exists"));
        run(&mut s, "ROLLBACK");
        assert!(err(&mut s, "SELECT * FROM u").contains("does not exist"));
        assert_eq!(relation_files(&path), files, "{method:?}");
        // A duplicate fails the block, which then leaves nothing either.
        run(
            &mut s,
            "BEGIN; CREATE TABLE d (id int); INSERT INTO d VALUES (1), (1)",
        );
        assert!(err(&mut s, "CREATE UNIQUE INDEX d_id ON d (id)").contains("is duplicated"));
        assert_eq!(run(&mut s, "COMMIT")[0].tag, "ROLLBACK");
        assert_eq!(relation_files(&path), files);
        // Only the creator's table: CREATE INDEX on another is refused.
        run(&mut s, "BEGIN; CREATE TABLE e (id int)");
        assert!(err(&mut s, "CREATE INDEX t_id ON t (id)")
            .contains("CREATE INDEX cannot run inside a transaction block"));
        run(&mut s, "ROLLBACK");
        assert!(err(&mut s, "SELECT * FROM e").contains("does not exist"));
        // A crash before the commit leaves nothing, one after it all.
        run(&mut s, load);
        db.wal().flush_all().unwrap();
        db.simulate_crash();
        drop((s, other));
        crash(db);
        let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
        let mut s = db.session().unwrap();
        assert!(err(&mut s, "SELECT * FROM u").contains("does not exist"));
        assert_eq!(relation_files(&path), files, "{method:?}");
        run(&mut s, load);
        run(&mut s, "COMMIT");
        drop(s);
        crash(db);
        let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
        let mut s = db.session().unwrap();
        assert_eq!(verified(&mut s, "u_pkey"), 2002, "{method:?}");
        assert_eq!(verified(&mut s, "u_v"), 2002);
        assert!(err(&mut s, "INSERT INTO u VALUES (5, 'dup')").contains("already exists"));
    }
}

/// The buffers a lookup by key touches, from EXPLAIN (ANALYZE, BUFFERS).
fn lookup_buffers(s: &mut aiostore::database::Session) -> String {
    plan_lines(s, "EXPLAIN (ANALYZE, BUFFERS) SELECT v FROM t WHERE id = 5")
        .into_iter()
        .find(|l| l.trim_start().starts_with("Buffers:"))
        .expect("a Buffers line")
        .trim()
        .to_string()
}

/// A lookup touches the root, the pages below it and the heap page, and
/// not the metapage (the root is remembered, `btree::RootHint`), also
/// after the root split and a new root took its place.
#[test]
fn a_lookup_does_not_read_the_metapage() {
    for method in METHODS {
        let (_dir, _path, db) = new_small_pool_db(method, false);
        let mut s = db.session().unwrap();
        run(&mut s, "CREATE TABLE t (id int PRIMARY KEY, v text)");
        run(
            &mut s,
            "INSERT INTO t SELECT i, 'v' FROM generate_series(1, 200) AS g(i)",
        );
        force_index(&mut s, false);
        // A root that is a leaf, and the row's heap page.
        assert_eq!(
            lookup_buffers(&mut s),
            "Buffers: shared hit=2",
            "{method:?}"
        );
        run(
            &mut s,
            "INSERT INTO t SELECT i, 'v' FROM generate_series(201, 20000) AS g(i)",
        );
        // The new root, a leaf, the heap page.
        assert_eq!(
            lookup_buffers(&mut s),
            "Buffers: shared hit=3",
            "{method:?}"
        );
        assert_eq!(verified(&mut s, "t_pkey"), 20000);
    }
}
