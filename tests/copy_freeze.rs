//! COPY … WITH (FREEZE) into a table created or truncated in the same
//! transaction: the rows are written frozen and each page the load fills
//! is all-visible, flag and map bit, before the commit (PostgreSQL's
//! `HEAP_INSERT_FROZEN`), so an index-only scan reads no heap page and a
//! VACUUM after the load skips the pages; neither the load's pages nor
//! its map are logged (the table skips the WAL, its files are synced at
//! commit). An abort, or a crash before the commit, leaves nothing of it;
//! a crash after the commit keeps every row and every bit. Rows other
//! statements of the transaction wrote keep their transaction's id, and a
//! page holding them is not all-visible. FREEZE is refused, as before,
//! when the table is not new in the transaction. Other sessions wait for
//! a truncated table (or do not see a created one) until the commit, then
//! see every row; a snapshot taken before the commit sees them too, as
//! PostgreSQL documents (frozen rows are not MVCC-safe). Every I/O method.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aiostore::config::IoMethod;
use aiostore::database::{Database, Session};
use aiostore::heap::tuple::TupleHeader;
use aiostore::page::{is_new, item, line_pointer_count, page_flags, PD_ALL_VISIBLE};
use aiostore::sql;
use aiostore::storage::Fork;
use aiostore::txn::{Xid, FROZEN_XID};
use common::{
    crash, err, ints, new_small_pool_db, relation_files, run, small_pool_settings, storage_is_sound,
};

/// Rows of a load: about 4 MiB of table with `shared_buffers=512`
/// (4 MiB), so that eviction writes pages of it before the commit.
const LOAD_ROWS: i64 = 40_000;

/// The longest the test waits for a waiter to show in the `locks` view.
const SEEN_WAITING_WITHIN: Duration = Duration::from_secs(30);

/// A CSV of rows (i, 'row i') for i in `first..first + rows`, next to the
/// data directory.
fn csv(dir: &Path, first: i64, rows: i64) -> PathBuf {
    let path = dir.join(format!("load-{first}-{rows}.csv"));
    if !path.exists() {
        let text: String = (first..first + rows)
            .map(|i| format!("{i},row {i}\n"))
            .collect();
        std::fs::write(&path, text).unwrap();
    }
    path
}

/// `COPY table FROM` the CSV of `rows` rows from `first`, with FREEZE.
fn copy_freeze(dir: &Path, table: &str, first: i64, rows: i64) -> String {
    format!(
        "COPY {table} FROM '{}' WITH (FORMAT csv, FREEZE)",
        csv(dir, first, rows).display()
    )
}

const CREATE_T: &str = "CREATE TABLE t (id integer PRIMARY KEY, note text)";

/// One heap page as the load left it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PageState {
    /// `PD_ALL_VISIBLE`.
    flag: bool,
    /// Its visibility-map bit.
    bit: bool,
    /// Each tuple's xmin.
    xmins: Vec<Xid>,
}

impl PageState {
    fn all_visible(&self) -> bool {
        self.flag && self.bit
    }

    fn frozen(&self) -> bool {
        !self.xmins.is_empty() && self.xmins.iter().all(|&x| x == FROZEN_XID)
    }
}

/// Every page of relation `rel` (new pages a bulk extension left unused
/// have no tuple and no flag).
fn pages(s: &mut Session, rel: u32) -> Vec<PageState> {
    let nblocks = s.buf.pool().relation(rel).nblocks(Fork::Main).unwrap();
    let bits = aiostore::heap::vm::all_visible_bits(&mut s.buf, rel, nblocks).unwrap();
    (0..nblocks)
        .map(|block| {
            let id = s.buf.read_buffer(rel, Fork::Main, block).unwrap();
            let (flag, xmins) = s.buf.with_page(id, |page| {
                if is_new(page) {
                    return (false, Vec::new());
                }
                let xmins = (0..line_pointer_count(page))
                    .filter_map(|i| item(page, i).map(|t| TupleHeader::read(t).xmin))
                    .collect();
                (page_flags(page) & PD_ALL_VISIBLE != 0, xmins)
            });
            s.buf.release(id);
            PageState {
                flag,
                bit: bits[block as usize],
                xmins,
            }
        })
        .collect()
}

/// The pages holding tuples.
fn filled(pages: &[PageState]) -> Vec<&PageState> {
    pages.iter().filter(|p| !p.xmins.is_empty()).collect()
}

/// (pages skipped as all-visible, pages set all-visible) of the VACUUM
/// of `table`, from its notice.
fn vacuum(s: &mut Session, table: &str) -> (u32, u32) {
    let notice = run(s, &format!("VACUUM {table}"))
        .pop()
        .unwrap()
        .notices
        .into_iter()
        .find(|n| n.contains(&format!("table \"{table}\"")))
        .expect("a notice for the table");
    let figure = |after: &str| -> u32 {
        let end = notice.find(after).unwrap_or_else(|| panic!("{notice}"));
        let start = notice[..end].rfind([' ', '(']).map_or(0, |i| i + 1);
        notice[start..end].parse().unwrap()
    };
    (
        figure(" skipped as all-visible"),
        figure(" set all-visible"),
    )
}

fn wal_records(db: &Database) -> u64 {
    db.wal()
        .stats()
        .records
        .load(std::sync::atomic::Ordering::SeqCst)
}

/// The `Heap Fetches` of EXPLAIN ANALYZE of `sql`, which must be an
/// index-only scan.
fn heap_fetches(s: &mut Session, sql: &str) -> u64 {
    common::force_index(s, true);
    let lines = common::explain_lines(s, &format!("(ANALYZE) {sql}"));
    run(s, "RESET ALL");
    let joined = lines.join("\n");
    assert!(joined.contains("Index Only Scan"), "{joined}");
    lines
        .iter()
        .find_map(|l| l.trim().strip_prefix("Heap Fetches: "))
        .unwrap_or_else(|| panic!("{joined}"))
        .parse()
        .unwrap()
}

/// A load with FREEZE writes frozen rows on pages that are all-visible,
/// flag and bit, as soon as it has filled them, logging none of it; the
/// transaction's later commands see the rows; after the commit VACUUM
/// skips every page and an index-only scan fetches no heap page. Without
/// FREEZE the same load leaves VACUUM every page to set.
fn frozen_rows_fill_all_visible_pages_that_vacuum_skips(method: IoMethod) {
    let (dir, _path, db) = new_small_pool_db(method, false);
    let mut s = db.session().unwrap();
    let records = wal_records(&db);
    run(&mut s, "BEGIN; CREATE TABLE n (id integer, note text)");
    run(&mut s, &copy_freeze(dir.path(), "n", 1, LOAD_ROWS));
    // A later command of the transaction sees the rows.
    assert_eq!(
        ints(&mut s, "SELECT count(*), sum(id) FROM n"),
        [LOAD_ROWS, LOAD_ROWS * (LOAD_ROWS + 1) / 2]
    );
    let rel = db
        .catalog()
        .table_for("n", s.current_xid())
        .unwrap()
        .heap
        .rel;
    let before_commit = pages(&mut s, rel);
    run(&mut s, "COMMIT");
    let logged = wal_records(&db) - records;
    let loaded = filled(&before_commit);
    assert!(loaded.len() > 100, "{} pages", loaded.len());
    for (block, page) in before_commit.iter().enumerate() {
        if !page.xmins.is_empty() {
            assert!(page.frozen(), "block {block}: {page:?}");
            assert!(page.all_visible(), "block {block}: {page:?}");
        }
    }
    // Neither the pages nor their map bits: the creation's few records
    // and the commit.
    assert!(
        logged < 20,
        "{logged} records for a frozen load of {} pages",
        loaded.len()
    );
    assert_eq!(
        pages(&mut s, rel),
        before_commit,
        "the commit changes no page"
    );
    let (skipped, set) = vacuum(&mut s, "n");
    // Every page with rows but the last, which vacuum always reads.
    assert_eq!(set, 0);
    assert!(
        skipped as usize >= loaded.len() - 1,
        "{skipped} of {} pages skipped",
        loaded.len()
    );
    // An index-only scan needs no heap page.
    run(&mut s, "BEGIN");
    run(&mut s, CREATE_T);
    run(&mut s, &copy_freeze(dir.path(), "t", 1, LOAD_ROWS));
    run(&mut s, "COMMIT");
    assert_eq!(
        heap_fetches(&mut s, "SELECT id FROM t WHERE id BETWEEN 100 AND 20000"),
        0
    );
    // The same load without FREEZE: VACUUM has every page to set.
    run(&mut s, "BEGIN; CREATE TABLE plain (id integer, note text)");
    run(
        &mut s,
        &format!(
            "COPY plain FROM '{}' (FORMAT csv)",
            csv(dir.path(), 1, LOAD_ROWS).display()
        ),
    );
    run(&mut s, "COMMIT");
    let plain_rel = db.catalog().table("plain").unwrap().heap.rel;
    let plain = pages(&mut s, plain_rel);
    assert!(filled(&plain)
        .iter()
        .all(|p| !p.flag && !p.bit && !p.frozen()));
    let (skipped, set) = vacuum(&mut s, "plain");
    assert_eq!((skipped, set as usize), (0, filled(&plain).len()));
    drop(s);
    storage_is_sound(&db);
}

/// A COPY FREEZE after plain INSERTs into the same new table freezes only
/// its own rows (PostgreSQL's rule): the page it shares with them stays
/// not all-visible, as does a page a later INSERT adds a row to; a second
/// COPY FREEZE in the transaction fills more all-visible pages. After the
/// commit VACUUM sets the pages it left and skips the others.
fn freeze_after_plain_inserts_freezes_only_its_own_rows(method: IoMethod) {
    let (dir, _path, db) = new_small_pool_db(method, false);
    let mut s = db.session().unwrap();
    run(&mut s, CREATE_T);
    run(&mut s, "INSERT INTO t VALUES (-100, 'committed before')");
    run(&mut s, "BEGIN; TRUNCATE t");
    run(
        &mut s,
        "INSERT INTO t VALUES (-1, 'a'), (-2, 'b'), (-3, 'c')",
    );
    let own = s.current_xid().unwrap();
    run(&mut s, &copy_freeze(dir.path(), "t", 1, LOAD_ROWS));
    let rel = db.catalog().table("t").unwrap().heap.rel;
    let after_first = pages(&mut s, rel);
    let first = &after_first[0];
    assert_eq!(&first.xmins[..3], &[own, own, own], "{first:?}");
    assert!(
        first.xmins[3..].iter().all(|&x| x == FROZEN_XID),
        "{first:?}"
    );
    assert!(!first.flag && !first.bit, "the shared page: {first:?}");
    let rest = filled(&after_first[1..]);
    assert!(rest.len() > 50);
    assert!(
        rest.iter().all(|p| p.frozen() && p.all_visible()),
        "{rest:?}"
    );
    // A plain row on the load's last page takes that page's flag and bit.
    run(&mut s, "INSERT INTO t VALUES (-4, 'd')");
    let after_insert = pages(&mut s, rel);
    let changed: Vec<usize> = (0..after_first.len())
        .filter(|&b| after_first[b] != after_insert[b])
        .collect();
    assert_eq!(changed.len(), 1, "{changed:?}");
    let page = &after_insert[changed[0]];
    assert!(
        !page.flag && !page.bit && page.xmins.contains(&own),
        "{page:?}"
    );
    // A second frozen load in the same transaction.
    run(
        &mut s,
        &copy_freeze(dir.path(), "t", LOAD_ROWS + 1, LOAD_ROWS),
    );
    let after_second = pages(&mut s, rel);
    let not_visible: Vec<usize> = (0..after_second.len())
        .filter(|&b| !after_second[b].xmins.is_empty() && !after_second[b].all_visible())
        .collect();
    // The shared first page, and the page of the INSERT (where the
    // second load began).
    assert_eq!(not_visible, [0, changed[0]], "{after_second:?}");
    assert!(filled(&after_second).len() > 2 * rest.len());
    assert!(after_second
        .iter()
        .filter(|p| p.all_visible())
        .all(PageState::frozen));
    let total = 4 + 2 * LOAD_ROWS;
    assert_eq!(ints(&mut s, "SELECT count(*) FROM t"), [total]);
    run(&mut s, "COMMIT");
    assert_eq!(
        ints(&mut s, "SELECT count(*), min(id), max(id) FROM t"),
        [total, -4, 2 * LOAD_ROWS]
    );
    let (_, set) = vacuum(&mut s, "t");
    assert_eq!(set, 2, "the two pages of plain rows");
    assert!(filled(&pages(&mut s, rel)).iter().all(|p| p.all_visible()));
    drop(s);
    storage_is_sound(&db);
}

/// A frozen load whose transaction rolls back (ROLLBACK, or a failed
/// COPY FREEZE that dooms its block) leaves no row and no file: a
/// truncated table has its old rows, a created one is gone.
fn an_aborted_frozen_load_leaves_nothing(method: IoMethod) {
    let (dir, path, db) = new_small_pool_db(method, false);
    let mut s = db.session().unwrap();
    run(&mut s, CREATE_T);
    run(
        &mut s,
        "INSERT INTO t SELECT i, 'old' FROM generate_series(1, 10) i",
    );
    let files = relation_files(&path);
    let load = copy_freeze(dir.path(), "t", 1, LOAD_ROWS);
    run(&mut s, &format!("BEGIN; TRUNCATE t; {load}"));
    assert!(
        relation_files(&path).len() > files.len(),
        "the load made files"
    );
    run(&mut s, "ROLLBACK");
    assert_eq!(ints(&mut s, "SELECT count(*), max(id) FROM t"), [10, 10]);
    assert_eq!(relation_files(&path), files);
    // A failed frozen load: its first rows are in, frozen, on all-visible
    // pages, when a bad line fails it.
    let bad = dir.path().join("bad.csv");
    let mut text = std::fs::read_to_string(csv(dir.path(), 1, LOAD_ROWS)).unwrap();
    text.push_str("not a number,x\n");
    std::fs::write(&bad, text).unwrap();
    run(&mut s, "BEGIN; TRUNCATE t");
    let e = err(
        &mut s,
        &format!("COPY t FROM '{}' WITH (FORMAT csv, FREEZE)", bad.display()),
    );
    assert!(e.contains(&format!("line {}", LOAD_ROWS + 1)), "{e}");
    assert_eq!(run(&mut s, "COMMIT")[0].tag, "ROLLBACK");
    assert_eq!(ints(&mut s, "SELECT count(*), max(id) FROM t"), [10, 10]);
    assert_eq!(relation_files(&path), files);
    // A created table.
    run(
        &mut s,
        "BEGIN; CREATE TABLE u (id integer PRIMARY KEY, note text)",
    );
    run(&mut s, &copy_freeze(dir.path(), "u", 1, LOAD_ROWS));
    run(&mut s, "ROLLBACK");
    let e = err(&mut s, "SELECT count(*) FROM u");
    assert!(e.contains("does not exist"), "{e}");
    assert_eq!(relation_files(&path), files);
    drop(s);
    storage_is_sound(&db);
}

/// A crash before the frozen load's commit, its all-visible pages and
/// map bits written out by eviction, a flush and a checkpoint, leaves the
/// table as it was and the load's files gone; one after the commit (no
/// checkpoint since) keeps every row, frozen, every page all-visible with
/// its bit on disk, and VACUUM still skips them.
fn a_crash_before_the_commit_leaves_nothing_and_after_it_everything(method: IoMethod) {
    for direct in [false, true] {
        let (dir, path, db) = new_small_pool_db(method, direct);
        let mut s = db.session().unwrap();
        run(&mut s, CREATE_T);
        run(
            &mut s,
            "INSERT INTO t SELECT i, 'old' FROM generate_series(1, 10) i",
        );
        run(&mut s, "CHECKPOINT");
        let files = relation_files(&path);
        run(&mut s, "BEGIN; TRUNCATE t");
        run(&mut s, &copy_freeze(dir.path(), "t", 1, LOAD_ROWS));
        let new_rel = db.catalog().table("t").unwrap().heap.rel;
        assert!(pages(&mut s, new_rel)[1].all_visible());
        s.buf.flush_all().unwrap();
        let mut c = db.session().unwrap();
        run(&mut c, "CHECKPOINT");
        assert!(
            db.pool().relation(new_rel).exists(Fork::VisibilityMap),
            "the map is on disk"
        );
        drop(c);
        db.simulate_crash();
        drop(s);
        crash(db);
        let db = Database::open(&path, &small_pool_settings(method, direct)).unwrap();
        assert!(db.recovery().is_some());
        let mut s = db.session().unwrap();
        assert_eq!(
            ints(&mut s, "SELECT count(*), max(id) FROM t"),
            [10, 10],
            "direct {direct}"
        );
        assert_eq!(relation_files(&path), files, "direct {direct}");
        assert!(!db.pool().relation(new_rel).exists(Fork::Main));
        // After the commit.
        run(&mut s, "BEGIN");
        run(&mut s, "CREATE TABLE u (id integer PRIMARY KEY, note text)");
        run(&mut s, &copy_freeze(dir.path(), "u", 1, LOAD_ROWS));
        run(&mut s, "COMMIT");
        let rel = db.catalog().table("u").unwrap().heap.rel;
        let committed = pages(&mut s, rel);
        drop(s);
        crash(db);
        for round in 0..2 {
            let db = Database::open(&path, &small_pool_settings(method, direct)).unwrap();
            let mut s = db.session().unwrap();
            assert_eq!(
                ints(&mut s, "SELECT count(*), sum(id) FROM u"),
                [LOAD_ROWS, LOAD_ROWS * (LOAD_ROWS + 1) / 2],
                "direct {direct}, round {round}"
            );
            let reopened = pages(&mut s, rel);
            assert_eq!(reopened, committed, "direct {direct}, round {round}");
            assert!(filled(&reopened)
                .iter()
                .all(|p| p.frozen() && p.all_visible()));
            if round == 1 {
                let (skipped, set) = vacuum(&mut s, "u");
                assert_eq!(set, 0);
                assert!(skipped as usize >= filled(&reopened).len() - 1);
            }
            drop(s);
            let findings = storage_is_sound(&db);
            assert!(findings.vm_bits > 0, "{findings:?}");
            crash(db);
        }
    }
}

/// The blocks whose state differs between `before` and `after`.
fn changed_blocks(before: &[PageState], after: &[PageState]) -> Vec<usize> {
    assert_eq!(before.len(), after.len(), "no block added");
    (0..before.len())
        .filter(|&b| before[b] != after[b])
        .collect()
}

/// An UPDATE of a frozen row (a HOT one: fillfactor 90 leaves room on the
/// page) takes its page's flag and bit, in the loading transaction (while
/// the table skips the WAL, its map too) and after the commit (logged);
/// no other page changes. A crash after both, with no checkpoint since
/// the load, keeps every page as it was: the first update's changes in
/// the files the commit synced, the second's by replay. Index-only scans
/// fetch the rows of the two pages, and none once VACUUM set them again.
fn updates_of_frozen_rows_clear_their_pages_in_the_load_and_after(method: IoMethod) {
    let (dir, path, db) = new_small_pool_db(method, false);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "BEGIN; CREATE TABLE t (id integer PRIMARY KEY, note text) WITH (fillfactor = 90)",
    );
    run(&mut s, &copy_freeze(dir.path(), "t", 1, LOAD_ROWS));
    let own = s.current_xid().unwrap();
    let rel = db.catalog().table_for("t", Some(own)).unwrap().heap.rel;
    let loaded = pages(&mut s, rel);
    assert!(filled(&loaded)
        .iter()
        .all(|p| p.frozen() && p.all_visible()));
    run(&mut s, "UPDATE t SET note = 'in the load' WHERE id = 5");
    let in_load = pages(&mut s, rel);
    let first = changed_blocks(&loaded, &in_load);
    assert_eq!(first.len(), 1, "a HOT update stays on its page: {first:?}");
    let page = &in_load[first[0]];
    assert!(
        !page.flag && !page.bit && page.xmins.contains(&own),
        "{page:?}"
    );
    run(&mut s, "COMMIT");
    run(&mut s, "UPDATE t SET note = 'after it' WHERE id = 30000");
    let after = pages(&mut s, rel);
    let second = changed_blocks(&in_load, &after);
    assert_eq!(second.len(), 1, "{second:?}");
    assert_ne!(second, first);
    assert!(!after[second[0]].flag && !after[second[0]].bit);
    drop(s);
    crash(db);
    let db = Database::open(&path, &small_pool_settings(method, false)).unwrap();
    let mut s = db.session().unwrap();
    assert_eq!(pages(&mut s, rel), after, "replay keeps every page");
    assert_eq!(
        ints(&mut s, "SELECT count(*), sum(id) FROM t"),
        [LOAD_ROWS, LOAD_ROWS * (LOAD_ROWS + 1) / 2]
    );
    assert_eq!(
        ints(
            &mut s,
            "SELECT count(*) FROM t WHERE note IN ('in the load', 'after it')"
        ),
        [2]
    );
    let all = format!("SELECT id FROM t WHERE id BETWEEN 1 AND {LOAD_ROWS}");
    let fetched = heap_fetches(&mut s, &all);
    let per_page = LOAD_ROWS as u64 / filled(&after).len() as u64;
    assert!(
        fetched > 0 && fetched <= 3 * per_page,
        "{fetched} heap fetches, about {per_page} rows a page"
    );
    let (_, set) = vacuum(&mut s, "t");
    assert_eq!(set, 2, "the two updated pages");
    assert_eq!(heap_fetches(&mut s, &all), 0);
    drop(s);
    storage_is_sound(&db);
}

/// FREEZE stays refused where the table is not new in the transaction: a
/// table created or truncated by an earlier transaction, one emptied by
/// DELETE; the refused COPY loads nothing.
fn freeze_is_refused_unless_the_table_is_new_in_the_transaction(method: IoMethod) {
    let (dir, _path, db) = new_small_pool_db(method, false);
    let mut s = db.session().unwrap();
    run(&mut s, CREATE_T);
    let load = copy_freeze(dir.path(), "t", 1, 100);
    for before in ["", "BEGIN", "TRUNCATE t; BEGIN", "BEGIN; DELETE FROM t"] {
        if !before.is_empty() {
            run(&mut s, before);
        }
        let e = sql::execute(&mut s, &load).unwrap_err();
        assert_eq!(e.sqlstate(), "55000", "{before}: {e}");
        assert!(
            e.to_string()
                .contains("was not created or truncated in the current transaction"),
            "{e}"
        );
        if s.in_transaction_block() {
            run(&mut s, "ROLLBACK");
        }
        assert_eq!(ints(&mut s, "SELECT count(*) FROM t"), [0], "{before}");
    }
}

/// Waits until `n` table lock requests are waiting.
fn wait_until_waiting(s: &mut Session, n: i64) {
    let started = Instant::now();
    while ints(
        s,
        "SELECT count(*) FROM locks WHERE NOT granted AND locktype = 'relation'",
    )[0] < n
    {
        assert!(
            started.elapsed() < SEEN_WAITING_WITHIN,
            "no {n} waiters showed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Other sessions before and after the commit: a reader of a truncated
/// table waits for the loading transaction and then counts every row; a
/// created table does not exist for them until the commit. A snapshot
/// taken before the commit sees the frozen rows once it may read the
/// table (as in PostgreSQL: frozen rows are visible to every snapshot),
/// where it sees a table loaded without FREEZE empty (its TRUNCATE is
/// not MVCC-safe either).
fn other_sessions_see_the_rows_once_committed(method: IoMethod) {
    let (dir, _path, db) = new_small_pool_db(method, false);
    let mut a = db.session().unwrap();
    let mut b = db.session().unwrap();
    run(&mut a, CREATE_T);
    run(
        &mut a,
        "CREATE TABLE other (x integer); INSERT INTO other VALUES (1)",
    );
    run(&mut a, "INSERT INTO t VALUES (-1, 'old')");
    run(&mut a, "BEGIN; TRUNCATE t");
    run(&mut a, &copy_freeze(dir.path(), "t", 1, LOAD_ROWS));
    let reader = {
        let db = Arc::clone(&db);
        std::thread::spawn(move || {
            let mut r = db.session().unwrap();
            ints(&mut r, "SELECT count(*), min(id) FROM t")
        })
    };
    wait_until_waiting(&mut b, 1);
    run(&mut a, "COMMIT");
    assert_eq!(reader.join().unwrap(), [LOAD_ROWS, 1]);
    // A created table.
    run(
        &mut a,
        "BEGIN; CREATE TABLE u (id integer PRIMARY KEY, note text)",
    );
    run(&mut a, &copy_freeze(dir.path(), "u", 1, LOAD_ROWS));
    let e = err(&mut b, "SELECT count(*) FROM u");
    assert!(e.contains("does not exist"), "{e}");
    run(&mut a, "COMMIT");
    assert_eq!(ints(&mut b, "SELECT count(*) FROM u"), [LOAD_ROWS]);
    // A snapshot older than the commit.
    for freeze in [true, false] {
        run(&mut b, "BEGIN ISOLATION LEVEL REPEATABLE READ");
        assert_eq!(ints(&mut b, "SELECT count(*) FROM other"), [1]);
        let load = if freeze {
            copy_freeze(dir.path(), "t", 1, 1000)
        } else {
            format!(
                "COPY t FROM '{}' (FORMAT csv)",
                csv(dir.path(), 1, 1000).display()
            )
        };
        run(&mut a, &format!("BEGIN; TRUNCATE t; {load}; COMMIT"));
        let seen = if freeze { 1000 } else { 0 };
        assert_eq!(
            ints(&mut b, "SELECT count(*) FROM t"),
            [seen],
            "freeze {freeze}"
        );
        run(&mut b, "COMMIT");
        assert_eq!(ints(&mut b, "SELECT count(*) FROM t"), [1000]);
    }
}

for_each_method!(
    frozen_rows_fill_all_visible_pages_that_vacuum_skips,
    freeze_after_plain_inserts_freezes_only_its_own_rows,
    an_aborted_frozen_load_leaves_nothing,
    a_crash_before_the_commit_leaves_nothing_and_after_it_everything,
    updates_of_frozen_rows_clear_their_pages_in_the_load_and_after,
    freeze_is_refused_unless_the_table_is_new_in_the_transaction,
    other_sessions_see_the_rows_once_committed,
);
