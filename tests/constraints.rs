//! PRIMARY KEY and UNIQUE constraints from SQL: the indexes CREATE TABLE
//! and ALTER TABLE … ADD make and how PostgreSQL names them, violations on
//! INSERT, UPDATE and COPY in PostgreSQL 15's words, DROP INDEX refusing a
//! constraint's index and DROP CONSTRAINT dropping it, `\d`'s listing, and
//! a table with its constraints rolling back, or lost in a crash, as one.

mod common;

use aiostore::catalog::{IndexColumn, IndexKind};
use aiostore::config::IoMethod;
use aiostore::database::{Database, Session};
use common::{crash, err, ints, new_small_pool_db, run, small_pool_settings};

const METHODS: [IoMethod; 3] = [IoMethod::Sync, IoMethod::Worker, IoMethod::IoUring];

fn verified(s: &mut Session, index: &str) -> i64 {
    ints(s, &format!("SELECT verify_index('{index}')"))[0]
}

/// The indexes of `table` as `\d table` lists them.
fn described(db: &Database, table: &str) -> Vec<String> {
    let t = db.catalog().table(table).unwrap();
    aiostore::sql::describe_indexes(db.catalog(), &t)
}

/// Runs `text` with `input` as COPY's standard input.
fn copy_in(s: &mut Session, text: &str, input: &str) -> Result<(), String> {
    let mut input = std::io::Cursor::new(input.as_bytes().to_vec());
    let mut io = aiostore::sql::StatementIo {
        stdin: Some(&mut input),
        ..Default::default()
    };
    aiostore::sql::execute_each(s, text, &mut io, |_| {})
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[test]
fn create_table_constraints_make_indexes_named_as_postgresql_names_them() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Sync, false);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE t (id int PRIMARY KEY, code text UNIQUE, a int, b int, \
         UNIQUE (a, b), CONSTRAINT t_b_named UNIQUE (b))",
    );
    run(&mut s, "CREATE INDEX ON t (a DESC NULLS LAST)");
    run(&mut s, "CREATE UNIQUE INDEX ON t (b DESC)");
    assert_eq!(
        described(&db, "t"),
        [
            "\"t_pkey\" PRIMARY KEY, btree (id)",
            "\"t_a_b_key\" UNIQUE CONSTRAINT, btree (a, b)",
            "\"t_a_idx\" btree (a DESC NULLS LAST)",
            "\"t_b_idx\" UNIQUE, btree (b DESC)",
            "\"t_b_named\" UNIQUE CONSTRAINT, btree (b)",
            "\"t_code_key\" UNIQUE CONSTRAINT, btree (code)",
        ]
    );
    // The primary key's column is NOT NULL in the catalog, as
    // PostgreSQL makes it.
    let t = db.catalog().table("t").unwrap();
    assert!(t.columns[0].not_null && !t.columns[1].not_null);
    assert_eq!(verified(&mut s, "t_pkey"), 0);

    // Table constraints, named ones, and a name taken already: the first
    // free number is added, as PostgreSQL does.
    run(&mut s, "CREATE TABLE other (x int)");
    run(&mut s, "CREATE INDEX u_x_key ON other (x)");
    run(
        &mut s,
        "CREATE TABLE u (x int UNIQUE, y int CONSTRAINT u_y_pk PRIMARY KEY, \"Z\" text, UNIQUE (\"Z\", x))",
    );
    assert_eq!(
        described(&db, "u"),
        [
            "\"u_y_pk\" PRIMARY KEY, btree (y)",
            "\"u_Z_x_key\" UNIQUE CONSTRAINT, btree (\"Z\", x)",
            "\"u_x_key1\" UNIQUE CONSTRAINT, btree (x)",
        ]
    );
    run(
        &mut s,
        "CREATE TABLE v (a int, b int, CONSTRAINT v_ab PRIMARY KEY (a, b))",
    );
    assert_eq!(described(&db, "v"), ["\"v_ab\" PRIMARY KEY, btree (a, b)"]);
    // As PostgreSQL: a second constraint on the same columns makes no
    // second index (the primary key is kept), and an unnamed one takes the
    // later one's name.
    run(
        &mut s,
        "CREATE TABLE r (a int PRIMARY KEY UNIQUE, b int UNIQUE, CONSTRAINT r_b_named UNIQUE (b))",
    );
    assert_eq!(
        described(&db, "r"),
        [
            "\"r_pkey\" PRIMARY KEY, btree (a)",
            "\"r_b_named\" UNIQUE CONSTRAINT, btree (b)",
        ]
    );
    // IF NOT EXISTS over an existing table makes nothing.
    let r = run(&mut s, "CREATE TABLE IF NOT EXISTS r (a int PRIMARY KEY)");
    assert_eq!(
        r[0].notices,
        ["NOTICE: table \"r\" already exists, skipping"]
    );
    assert_eq!(described(&db, "r").len(), 2);
}

#[test]
fn create_table_refuses_bad_constraints_and_leaves_nothing() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Sync, false);
    let mut s = db.session().unwrap();
    assert_eq!(
        err(
            &mut s,
            "CREATE TABLE m (a int PRIMARY KEY, b int PRIMARY KEY)"
        ),
        "multiple primary keys for table \"m\" are not allowed"
    );
    assert_eq!(
        err(
            &mut s,
            "CREATE TABLE m (a int PRIMARY KEY, b int, PRIMARY KEY (b))"
        ),
        "multiple primary keys for table \"m\" are not allowed"
    );
    assert!(err(&mut s, "CREATE TABLE m (a int, UNIQUE (nope))")
        .starts_with("column \"nope\" named in key does not exist"));
    assert_eq!(
        err(&mut s, "CREATE TABLE m (a int, PRIMARY KEY (a, a))"),
        "column \"a\" appears twice in primary key constraint"
    );
    for (text, refused) in [
        ("CREATE TABLE m (a int, CHECK (a > 0))", "CHECK constraints"),
        (
            "CREATE TABLE m (a int, FOREIGN KEY (a) REFERENCES x (y))",
            "FOREIGN KEY constraints",
        ),
        ("CREATE TABLE m (a int REFERENCES x (y))", "REFERENCES"),
        (
            "CREATE TABLE m (a int, UNIQUE (a) DEFERRABLE)",
            "DEFERRABLE",
        ),
        ("CREATE TABLE m (a int, UNIQUE (a DESC))", "sort orders"),
        (
            "CREATE TABLE m (a int, UNIQUE NULLS NOT DISTINCT (a))",
            "NULLS NOT DISTINCT",
        ),
    ] {
        let e = err(&mut s, text);
        assert!(
            e.contains(refused) && e.contains("is not supported"),
            "{text}: {e}"
        );
    }
    // The second index fails (its name is taken) after the table and the
    // first index were made: the statement's transaction takes both back.
    run(&mut s, "CREATE TABLE taken (k int)");
    run(&mut s, "CREATE INDEX taken_idx ON taken (k)");
    assert_eq!(
        err(
            &mut s,
            "CREATE TABLE m (a int PRIMARY KEY, b int CONSTRAINT taken_idx UNIQUE)"
        ),
        "relation \"taken_idx\" already exists"
    );
    assert!(err(&mut s, "SELECT * FROM m").contains("does not exist"));
    assert!(db.catalog().index("m_pkey").is_err());
    run(&mut s, "CREATE TABLE m (a int PRIMARY KEY)");
    assert_eq!(described(&db, "m"), ["\"m_pkey\" PRIMARY KEY, btree (a)"]);
}

#[test]
fn violations_name_the_constraint_on_insert_update_and_copy() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Sync, false);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE t (id int PRIMARY KEY, code text UNIQUE, a int, b int, UNIQUE (a, b))",
    );
    run(
        &mut s,
        "INSERT INTO t VALUES (1, 'x', 1, 2), (2, 'y', NULL, 2)",
    );
    assert_eq!(
        err(&mut s, "INSERT INTO t VALUES (1, 'z', 5, 5)"),
        "duplicate key value violates unique constraint \"t_pkey\"\nDETAIL:  Key (id)=(1) already exists."
    );
    assert_eq!(
        err(&mut s, "INSERT INTO t VALUES (3, 'x', 5, 5)"),
        "duplicate key value violates unique constraint \"t_code_key\"\nDETAIL:  Key (code)=(x) already exists."
    );
    assert_eq!(
        err(&mut s, "INSERT INTO t VALUES (3, 'z', 1, 2)"),
        "duplicate key value violates unique constraint \"t_a_b_key\"\nDETAIL:  Key (a, b)=(1, 2) already exists."
    );
    // NULLs never conflict in a unique constraint; a primary key refuses
    // them.
    run(&mut s, "INSERT INTO t VALUES (3, NULL, NULL, 2)");
    assert_eq!(
        err(&mut s, "INSERT INTO t VALUES (NULL, 'n', 0, 0)"),
        "null value in column \"id\" of relation \"t\" violates not-null constraint"
    );
    assert_eq!(
        err(&mut s, "UPDATE t SET id = 1 WHERE id = 2"),
        "duplicate key value violates unique constraint \"t_pkey\"\nDETAIL:  Key (id)=(1) already exists."
    );
    assert_eq!(
        err(&mut s, "UPDATE t SET id = NULL WHERE id = 2"),
        "null value in column \"id\" of relation \"t\" violates not-null constraint"
    );
    run(&mut s, "UPDATE t SET id = id + 10");
    let e = copy_in(&mut s, "COPY t FROM STDIN", "20\tc\t7\t7\n11\td\t8\t8\n").unwrap_err();
    assert_eq!(
        e,
        "duplicate key value violates unique constraint \"t_pkey\"\nDETAIL:  Key (id)=(11) already exists."
    );
    copy_in(&mut s, "COPY t FROM STDIN", "20\tc\t7\t7\n21\td\t8\t8\n").unwrap();
    assert_eq!(ints(&mut s, "SELECT count(*) FROM t"), [5]);
    // Once vacuum took the old versions' and failed rows' entries, one
    // entry per row.
    run(&mut s, "VACUUM t");
    assert_eq!(verified(&mut s, "t_pkey"), 5);
    assert_eq!(verified(&mut s, "t_a_b_key"), 5);
}

#[test]
fn alter_table_add_primary_key_builds_over_the_rows_or_refuses_them() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Sync, false);
    let mut s = db.session().unwrap();
    // pgbench -i's statement, as it sends it.
    run(
        &mut s,
        "create table pgbench_branches(bid int not null,bbalance int,filler char(88))",
    );
    run(
        &mut s,
        "insert into pgbench_branches(bid,bbalance) select i, 0 from generate_series(1, 50) i",
    );
    let r = run(&mut s, "alter table pgbench_branches add primary key (bid)");
    assert_eq!(r[0].tag, "ALTER TABLE");
    assert_eq!(verified(&mut s, "pgbench_branches_pkey"), 50);
    assert_eq!(
        described(&db, "pgbench_branches"),
        ["\"pgbench_branches_pkey\" PRIMARY KEY, btree (bid)"]
    );

    // Duplicates: PostgreSQL's words, and no index left.
    run(&mut s, "CREATE TABLE t (a int, b text)");
    run(
        &mut s,
        "INSERT INTO t VALUES (1, 'x'), (1, 'y'), (2, NULL), (3, 'z')",
    );
    assert_eq!(
        err(&mut s, "ALTER TABLE t ADD PRIMARY KEY (a)"),
        "could not create unique index \"t_pkey\"\nDETAIL:  Key (a)=(1) is duplicated."
    );
    assert!(db.catalog().index("t_pkey").is_err());
    // NULLs in a key column are refused before duplicates are looked for,
    // as PostgreSQL's SET NOT NULL comes first; a deleted row's do not
    // count.
    assert_eq!(
        err(&mut s, "ALTER TABLE t ADD PRIMARY KEY (b)"),
        "column \"b\" of relation \"t\" contains null values"
    );
    run(&mut s, "DELETE FROM t WHERE b IS NULL OR b = 'y'");
    run(&mut s, "ALTER TABLE t ADD CONSTRAINT t_key PRIMARY KEY (b)");
    assert_eq!(verified(&mut s, "t_key"), 2);
    // From now on the key's column refuses NULL, and \d says so.
    assert_eq!(
        err(&mut s, "INSERT INTO t VALUES (9, NULL)"),
        "null value in column \"b\" of relation \"t\" violates not-null constraint"
    );
    assert_eq!(
        err(&mut s, "ALTER TABLE t ADD PRIMARY KEY (a)"),
        "multiple primary keys for table \"t\" are not allowed"
    );
    // UNIQUE, unnamed and named.
    run(&mut s, "ALTER TABLE t ADD UNIQUE (a)");
    run(
        &mut s,
        "ALTER TABLE ONLY t ADD CONSTRAINT t_a_unique UNIQUE (a, b)",
    );
    assert_eq!(
        described(&db, "t"),
        [
            "\"t_key\" PRIMARY KEY, btree (b)",
            "\"t_a_key\" UNIQUE CONSTRAINT, btree (a)",
            "\"t_a_unique\" UNIQUE CONSTRAINT, btree (a, b)",
        ]
    );
    assert_eq!(
        err(&mut s, "INSERT INTO t VALUES (3, 'q')"),
        "duplicate key value violates unique constraint \"t_a_key\"\nDETAIL:  Key (a)=(3) already exists."
    );
    // What ALTER TABLE does not do, and where it does not run.
    let e = err(&mut s, "ALTER TABLE t ADD COLUMN c int");
    assert!(
        e.contains("ALTER TABLE … ADD COLUMN is not supported"),
        "{e}"
    );
    assert!(err(&mut s, "ALTER TABLE t ADD CHECK (a > 0)").contains("CHECK constraints"));
    assert!(err(&mut s, "ALTER TABLE t ADD UNIQUE (a), ADD UNIQUE (b)")
        .contains("more than one ALTER TABLE action"));
    assert!(err(&mut s, "ALTER TABLE nope ADD UNIQUE (a)").contains("\"nope\" does not exist"));
    let r = run(&mut s, "ALTER TABLE IF EXISTS nope ADD UNIQUE (a)");
    assert_eq!(
        r[0].notices,
        ["NOTICE: relation \"nope\" does not exist, skipping"]
    );
    assert!(err(&mut s, "BEGIN; ALTER TABLE t ADD UNIQUE (b)").contains("ALTER TABLE"));
    run(&mut s, "ROLLBACK");
}

#[test]
fn drop_index_refuses_a_constraints_index_and_drop_constraint_drops_it() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Sync, false);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE t (id int PRIMARY KEY, code text UNIQUE, a int)",
    );
    run(&mut s, "CREATE INDEX ON t (a)");
    assert_eq!(
        err(&mut s, "DROP INDEX t_pkey"),
        "cannot drop index t_pkey because constraint t_pkey on table t requires it\nHINT:  You can drop constraint t_pkey on table t instead."
    );
    // A list with one such index drops none of them.
    assert!(err(&mut s, "DROP INDEX t_a_idx, t_code_key").contains("constraint t_code_key"));
    assert_eq!(described(&db, "t").len(), 3);
    // As does a missing one, unless IF EXISTS passes over it.
    assert_eq!(
        err(&mut s, "DROP INDEX t_a_idx, nope"),
        "index \"nope\" does not exist"
    );
    assert_eq!(described(&db, "t").len(), 3);
    assert_eq!(
        err(&mut s, "ALTER TABLE t DROP CONSTRAINT t_a_idx"),
        "constraint \"t_a_idx\" of relation \"t\" does not exist"
    );
    run(&mut s, "ALTER TABLE t DROP CONSTRAINT t_pkey");
    let r = run(&mut s, "ALTER TABLE t DROP CONSTRAINT IF EXISTS t_pkey");
    assert_eq!(
        r[0].notices,
        ["NOTICE: constraint \"t_pkey\" of relation \"t\" does not exist, skipping"]
    );
    assert!(err(&mut s, "SELECT verify_index('t_pkey')").contains("does not exist"));
    // The key may repeat now; the other constraint still holds.
    run(&mut s, "INSERT INTO t VALUES (1, 'a', 0), (1, 'b', 0)");
    assert!(err(&mut s, "INSERT INTO t VALUES (2, 'a', 0)").contains("\"t_code_key\""));
    run(&mut s, "ALTER TABLE t DROP CONSTRAINT t_code_key");
    let r = run(&mut s, "DROP INDEX IF EXISTS nope, t_a_idx");
    assert_eq!(
        r[0].notices,
        ["NOTICE: index \"nope\" does not exist, skipping"]
    );
    assert!(described(&db, "t").is_empty());
    // The name is free again (the build leaves out the deleted row).
    run(&mut s, "DELETE FROM t WHERE code = 'b'");
    run(&mut s, "ALTER TABLE t ADD PRIMARY KEY (id)");
    assert_eq!(verified(&mut s, "t_pkey"), 1);
}

#[test]
fn an_index_name_taken_while_another_index_builds_is_refused_when_it_publishes() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Sync, false);
    let mut s = db.session().unwrap();
    run(&mut s, "CREATE TABLE a (x int); CREATE TABLE b (x int)");
    let catalog = db.catalog();
    let (a, b) = (catalog.table("a").unwrap(), catalog.table("b").unwrap());
    let key = vec![IndexColumn {
        column: 0,
        desc: false,
        nulls_first: false,
    }];
    // Two sessions' CREATE INDEX x_idx, of different tables, at once: the
    // name is free when each begins its build.
    let mut new = |table| {
        catalog
            .new_index(
                &mut s.buf,
                db.heap(),
                "x_idx",
                table,
                key.clone(),
                IndexKind::Plain,
                false,
            )
            .unwrap()
            .expect("the name is free")
    };
    let (first, second) = (new(&a), new(&b));
    catalog
        .publish_index(&mut s.buf, db.heap(), &a, &first, None)
        .unwrap();
    let e = catalog
        .publish_index(&mut s.buf, db.heap(), &b, &second, None)
        .unwrap_err();
    assert_eq!(e.to_string(), "relation \"x_idx\" already exists");
    catalog
        .discard_index(&mut s.buf, db.heap(), &second)
        .unwrap();
    assert_eq!(catalog.index("x_idx").unwrap().table_oid, a.oid);
    assert_eq!(catalog.indexes_of(&a).len(), 1);
    assert!(catalog.indexes_of(&b).is_empty());
}

#[test]
fn a_table_and_its_constraints_roll_back_together() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Sync, false);
    let mut s = db.session().unwrap();
    run(&mut s, "BEGIN");
    run(&mut s, "CREATE TABLE t (id int PRIMARY KEY, v text UNIQUE)");
    run(&mut s, "INSERT INTO t VALUES (1, 'a'), (2, 'b')");
    assert!(err(&mut s, "INSERT INTO t VALUES (1, 'c')").contains("\"t_pkey\""));
    run(&mut s, "ROLLBACK");
    assert!(err(&mut s, "SELECT * FROM t").contains("does not exist"));
    assert!(db.catalog().index("t_pkey").is_err());
    assert!(db.catalog().index("t_v_key").is_err());
    // A block that commits keeps both, its COPY (which skipped the WAL)
    // indexed too.
    run(&mut s, "BEGIN");
    run(&mut s, "CREATE TABLE t (id int PRIMARY KEY, v text UNIQUE)");
    copy_in(&mut s, "COPY t FROM STDIN", "1\ta\n2\tb\n3\tc\n").unwrap();
    run(&mut s, "COMMIT");
    assert_eq!(verified(&mut s, "t_pkey"), 3);
    assert_eq!(verified(&mut s, "t_v_key"), 3);
    // Another session does not see a table being created, nor may it take
    // its index's name.
    run(&mut s, "BEGIN");
    run(&mut s, "CREATE TABLE p (id int PRIMARY KEY)");
    let mut other = db.session().unwrap();
    assert!(err(&mut other, "CREATE INDEX p_pkey ON t (v)").contains("already exists"));
    assert!(err(&mut other, "SELECT * FROM p").contains("does not exist"));
    run(&mut s, "COMMIT");
    run(&mut other, "INSERT INTO p VALUES (1)");
    assert!(err(&mut other, "INSERT INTO p VALUES (1)").contains("\"p_pkey\""));
}

#[test]
fn constraints_come_back_after_a_crash_and_an_uncommitted_table_goes_with_its_index() {
    for method in METHODS {
        let (_dir, path, db) = new_small_pool_db(method, false);
        {
            let mut s = db.session().unwrap();
            run(&mut s, "CREATE TABLE t (id int PRIMARY KEY, v text)");
            run(
                &mut s,
                "INSERT INTO t SELECT i, 'v' || i FROM generate_series(1, 2000) AS g(i)",
            );
            run(&mut s, "CREATE TABLE a (k int, u int)");
            run(
                &mut s,
                "INSERT INTO a SELECT i, i FROM generate_series(1, 500) AS g(i)",
            );
            run(&mut s, "ALTER TABLE a ADD PRIMARY KEY (k)");
            run(&mut s, "ALTER TABLE a ADD UNIQUE (u)");
            run(&mut s, "ALTER TABLE a DROP CONSTRAINT a_u_key");
            run(&mut s, "BEGIN");
            run(&mut s, "CREATE TABLE lost (id int PRIMARY KEY)");
            run(&mut s, "INSERT INTO lost VALUES (1)");
        }
        crash(db);
        let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
        // Files and catalog agree: the lost table's and index's files
        // are gone.
        common::storage_is_sound(&db);
        let mut s = db.session().unwrap();
        assert_eq!(verified(&mut s, "t_pkey"), 2000, "{method:?}");
        assert_eq!(verified(&mut s, "a_pkey"), 500);
        assert!(db.catalog().index("a_u_key").is_err());
        assert!(err(&mut s, "DROP INDEX a_pkey").contains("constraint a_pkey"));
        assert!(err(&mut s, "INSERT INTO t VALUES (5, 'dup')").contains("\"t_pkey\""));
        assert!(err(&mut s, "INSERT INTO a VALUES (NULL, 1)").contains("not-null"));
        assert!(err(&mut s, "SELECT * FROM lost").contains("does not exist"));
        assert!(db.catalog().index("lost_pkey").is_err());
        run(&mut s, "CREATE TABLE lost (id int PRIMARY KEY)");
        assert_eq!(verified(&mut s, "lost_pkey"), 0);
    }
}
