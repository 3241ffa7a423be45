//! The WAL seen from outside: `aiostore waldump` on a database's log
//! (every record, chained by its `prev`; the default start at the redo
//! point; `--stats`; beside a running database; its refusals), and the
//! `stat_wal` view.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};

use aiostore::database::{Database, Session};
use aiostore::sql;
use aiostore::tools::waldump::pg_lsn;
use aiostore::types::Value;
use aiostore::wal::record::parse_lsn;
use aiostore::wal::{Lsn, FIRST_LSN};

/// Held by each test for its whole run. The data directory lock is a
/// `flock` on the directory's descriptor, which a child process that
/// another test thread forks holds too until it execs: a database closed
/// and reopened meanwhile would find its directory "in use".
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn run(s: &mut Session, text: &str) -> Vec<sql::StatementResult> {
    sql::execute(s, text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// Runs `aiostore waldump` with `args` on data directory `dir`; returns
/// success and standard output, with standard error after it.
fn waldump(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_aiostore"))
        .arg("--data-dir")
        .arg(dir)
        .arg("waldump")
        .args(args)
        .env_remove("AIOSTORE_DATA")
        .output()
        .expect("runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// One record line of the output.
#[derive(Debug)]
struct Line {
    rmgr: String,
    lsn: Lsn,
    prev: Lsn,
    desc: String,
}

/// The record lines of `out` (`rmgr: … lsn: X/Y, prev X/Y, desc: …`).
fn records(out: &str) -> Vec<Line> {
    out.lines()
        .filter(|l| l.starts_with("rmgr: "))
        .map(|l| {
            let field = |name: &str, until: &str| {
                let from = l.find(name).unwrap_or_else(|| panic!("{name} in {l}")) + name.len();
                let rest = &l[from..];
                rest[..rest.find(until).unwrap_or(rest.len())]
                    .trim()
                    .to_string()
            };
            let lsn = |text: String| parse_lsn(&text).unwrap_or_else(|| panic!("{text} in {l}"));
            Line {
                rmgr: field("rmgr: ", " len"),
                lsn: lsn(field("lsn: ", ",")),
                prev: lsn(field("prev ", ",")),
                desc: field("desc: ", "\n"),
            }
        })
        .collect()
}

/// A new database at `path`, open.
fn new_database(path: &Path) -> Arc<Database> {
    Database::init(path).unwrap();
    Database::open(path, &[]).unwrap()
}

/// A closed database whose log holds a table's creation, inserts, a
/// delete, a commit and an abort. Returns the table's relation number.
fn closed_database(path: &Path) -> u32 {
    let db = new_database(path);
    let mut s = db.session().unwrap();
    run(&mut s, "CREATE TABLE t (id int, v text)");
    run(&mut s, "INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')");
    run(&mut s, "BEGIN; INSERT INTO t VALUES (4, 'd'); ROLLBACK");
    run(&mut s, "DELETE FROM t WHERE id = 2");
    let rel = db.catalog().table("t").unwrap().heap.rel;
    drop(s);
    assert_eq!(Arc::strong_count(&db), 1);
    drop(db);
    rel
}

#[test]
fn waldump_prints_every_record_chained_to_the_one_before() {
    let _serial = one_at_a_time();
    let tmp = common::temp_dir();
    let path = tmp.path().join("data");
    let rel = closed_database(&path);
    let (ok, out, err) = waldump(&path, &["--start", &pg_lsn(FIRST_LSN)]);
    assert!(ok, "{out}{err}");
    let recs = records(&out);
    assert!(recs.len() > 10, "{out}");
    assert_eq!(recs[0].lsn, FIRST_LSN, "{out}");
    assert_eq!(recs[0].prev, 0, "the log's first record has no prev");
    for pair in recs.windows(2) {
        assert_eq!(pair[1].prev, pair[0].lsn, "{pair:?}");
        assert!(pair[1].lsn > pair[0].lsn, "{pair:?}");
    }
    let has = |rmgr: &str, desc: &str| {
        recs.iter()
            .any(|r| r.rmgr == rmgr && r.desc.starts_with(desc))
    };
    assert!(
        has("Storage", &format!("CREATE rel {rel} fork main")),
        "{out}"
    );
    let table_inserts = format!("blkref #0: rel {rel} fork main blk 0");
    let inserts = recs
        .iter()
        .filter(|r| r.desc.starts_with("INSERT off: ") && r.desc.ends_with(&table_inserts))
        .count();
    assert_eq!(inserts, 4, "three committed, one rolled back: {out}");
    assert!(has("Heap", "SET_XMAX off: 1, xmax: "), "{out}");
    assert!(has("Transaction", "COMMIT 20"), "{out}");
    assert!(has("Transaction", "ABORT 20"), "{out}");
    assert!(has("XLOG", "CHECKPOINT_SHUTDOWN redo 0/"), "{out}");
    let last_line = out.lines().last().unwrap();
    assert!(
        last_line.starts_with("end of WAL at ") && last_line.contains("no record"),
        "{out}"
    );
}

#[test]
fn waldump_starts_at_the_redo_point_and_stops_at_limit_and_end() {
    let _serial = one_at_a_time();
    let tmp = common::temp_dir();
    let path = tmp.path().join("data");
    closed_database(&path);
    // By default: the shutdown checkpoint's redo point, which the
    // checkpoint record names.
    let (ok, out, err) = waldump(&path, &[]);
    assert!(ok, "{out}{err}");
    let recs = records(&out);
    let checkpoint = recs
        .iter()
        .rev()
        .find(|r| r.desc.starts_with("CHECKPOINT_SHUTDOWN"))
        .unwrap_or_else(|| panic!("{out}"));
    let redo = checkpoint.desc["CHECKPOINT_SHUTDOWN redo ".len()..]
        .split(';')
        .next()
        .unwrap();
    assert_eq!(parse_lsn(redo), Some(recs[0].lsn), "{out}");
    // --limit and --end stop reading and say so.
    let (ok, out, err) = waldump(&path, &["--start", &pg_lsn(FIRST_LSN), "--limit", "3"]);
    assert!(ok, "{out}{err}");
    let recs = records(&out);
    assert_eq!(recs.len(), 3, "{out}");
    assert!(out.contains("stopped after --limit 3 records"), "{out}");
    let end = pg_lsn(recs[2].lsn);
    let (ok, out, err) = waldump(&path, &["--start", &pg_lsn(FIRST_LSN), "--end", &end]);
    assert!(ok, "{out}{err}");
    assert_eq!(records(&out).len(), 2, "{out}");
    assert!(out.contains("reached the end of the range at"), "{out}");
    // A start inside a record moves on to the next one.
    let inside = pg_lsn(recs[1].lsn + 8);
    let (ok, out, err) = waldump(&path, &["--start", &inside, "--limit", "1"]);
    assert!(ok, "{out}{err}");
    assert!(
        out.starts_with(&format!("first record is after {inside}")),
        "{out}"
    );
    assert_eq!(records(&out)[0].lsn, recs[2].lsn, "{out}");
}

/// A COPY into a table created earlier logs a multi-insert record per
/// page, which waldump describes.
#[test]
fn waldump_describes_a_copys_multi_inserts() {
    let _serial = one_at_a_time();
    let tmp = common::temp_dir();
    let path = tmp.path().join("data");
    let db = new_database(&path);
    let csv = tmp.path().join("rows.csv");
    let rows: String = (1..=2000).map(|i| format!("{i},row {i}\n")).collect();
    std::fs::write(&csv, rows).unwrap();
    let mut s = db.session().unwrap();
    run(&mut s, "CREATE TABLE t (id int, v text)");
    let start = db.wal().insert_position();
    run(
        &mut s,
        &format!("COPY t FROM '{}' (FORMAT csv)", csv.display()),
    );
    drop(s);
    drop(db);
    let (ok, out, err) = waldump(&path, &["--start", &pg_lsn(start)]);
    assert!(ok, "{out}{err}");
    let multi: Vec<Line> = records(&out)
        .into_iter()
        .filter(|r| r.rmgr == "Heap" && r.desc.starts_with("MULTI_INSERT ntuples: "))
        .collect();
    assert!(multi.len() >= 5, "{out}");
    assert!(multi[0].desc.contains(", off: 0.."), "{out}");
    let tuples: u64 = multi
        .iter()
        .map(|r| {
            r.desc["MULTI_INSERT ntuples: ".len()..]
                .split(',')
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    assert_eq!(tuples, 2000, "{out}");
    assert!(
        !records(&out)
            .iter()
            .any(|r| r.desc.starts_with("INSERT off: ")),
        "{out}"
    );
}

#[test]
fn waldump_stats_count_what_the_records_show() {
    let _serial = one_at_a_time();
    let tmp = common::temp_dir();
    let path = tmp.path().join("data");
    closed_database(&path);
    let start = pg_lsn(FIRST_LSN);
    let (ok, out, _) = waldump(&path, &["--start", &start]);
    assert!(ok);
    let mut per_rmgr: BTreeMap<String, u64> = BTreeMap::new();
    let mut per_kind: BTreeMap<String, u64> = BTreeMap::new();
    let recs = records(&out);
    for r in &recs {
        *per_rmgr.entry(r.rmgr.clone()).or_default() += 1;
        let kind = r.desc.split([' ', ',']).next().unwrap();
        *per_kind.entry(format!("{}/{kind}", r.rmgr)).or_default() += 1;
    }
    let (ok, stats, err) = waldump(&path, &["--start", &start, "--stats"]);
    assert!(ok, "{stats}{err}");
    assert!(records(&stats).is_empty(), "no record lines: {stats}");
    let count_of = |name: &str| -> u64 {
        let line = stats
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no row {name}: {stats}"));
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    for (rmgr, n) in &per_rmgr {
        assert_eq!(count_of(rmgr), *n, "{rmgr}: {stats}");
    }
    for (kind, n) in &per_kind {
        assert_eq!(count_of(kind), *n, "{kind}: {stats}");
    }
    assert_eq!(count_of("Total"), recs.len() as u64, "{stats}");
    assert!(stats.contains("FPI size"), "{stats}");
    assert!(stats.lines().last().unwrap().starts_with("end of WAL at"));
}

#[test]
fn waldump_reads_beside_a_running_database_without_its_lock() {
    let _serial = one_at_a_time();
    let tmp = common::temp_dir();
    let path = tmp.path().join("data");
    let db = new_database(&path);
    let mut s = db.session().unwrap();
    run(&mut s, "CREATE TABLE t (id int); INSERT INTO t VALUES (1)");
    let (ok, out, err) = waldump(&path, &["--start", &pg_lsn(FIRST_LSN)]);
    assert!(ok, "{out}{err}");
    assert!(
        records(&out).iter().any(|r| r.desc.starts_with("COMMIT")),
        "{out}"
    );
    // At the insert position: nothing yet, which is the end of the log.
    let at = pg_lsn(db.wal().insert_position());
    let (ok, out, err) = waldump(&path, &["--start", &at]);
    assert!(ok, "{out}{err}");
    assert!(out.starts_with("end of WAL at"), "{out}");
}

#[test]
fn waldump_names_what_is_wrong_and_the_fix() {
    let _serial = one_at_a_time();
    let tmp = common::temp_dir();
    let path = tmp.path().join("data");
    let (ok, _, err) = waldump(&path, &[]);
    assert!(
        !ok && err.contains("does not exist") && err.contains("--data-dir"),
        "{err}"
    );
    std::fs::create_dir_all(&path).unwrap();
    let (ok, _, err) = waldump(&path, &[]);
    assert!(
        !ok && err.contains("holds no WAL directory (wal/)"),
        "{err}"
    );
    std::fs::remove_dir(&path).unwrap();
    closed_database(&path);
    let (ok, _, err) = waldump(&path, &["--start", "1000000"]);
    assert!(
        !ok && err.contains("--start") && err.contains("X/Y"),
        "{err}"
    );
    let (ok, _, err) = waldump(&path, &["--start", "0/9000000"]);
    assert!(
        !ok && err.contains("000000010000000000000009") && err.contains("does not exist"),
        "{err}"
    );
    let (ok, _, err) = waldump(&path, &["--start", "0/1000100", "--end", "0/1000000"]);
    assert!(!ok && err.contains("is after --end"), "{err}");
    let control = path.join(aiostore::wal::control::CONTROL_FILE);
    let (ok, _, err) = waldump(&path, &[control.to_str().unwrap()]);
    assert!(!ok && err.contains("is not a WAL segment file"), "{err}");
    std::fs::remove_file(&control).unwrap();
    let (ok, _, err) = waldump(&path, &[]);
    assert!(
        !ok && err.contains("could not find the redo point") && err.contains("--start"),
        "{err}"
    );
}

/// `stat_wal`'s one row, by column name.
fn stat_wal(s: &mut Session) -> BTreeMap<String, Value> {
    let r = run(s, "SELECT * FROM stat_wal").pop().unwrap();
    assert_eq!(r.rows.len(), 1, "{r:?}");
    r.columns
        .iter()
        .map(|c| c.name.clone())
        .zip(r.rows[0].iter().cloned())
        .collect()
}

fn big(row: &BTreeMap<String, Value>, name: &str) -> i64 {
    match row[name] {
        Value::BigInt(x) => x,
        ref v => panic!("{name}: {v:?}"),
    }
}

fn lsn(row: &BTreeMap<String, Value>, name: &str) -> Lsn {
    match &row[name] {
        Value::Text(t) => parse_lsn(t).unwrap_or_else(|| panic!("{name}: {t}")),
        v => panic!("{name}: {v:?}"),
    }
}

#[test]
fn stat_wal_counts_records_and_its_flush_lsn_advances_at_commit() {
    let _serial = one_at_a_time();
    let tmp = common::temp_dir();
    let path = tmp.path().join("data");
    let db = new_database(&path);
    let mut s = db.session().unwrap();
    run(&mut s, "CREATE TABLE t (id int)");
    let before = stat_wal(&mut s);
    run(&mut s, "BEGIN; INSERT INTO t VALUES (1), (2)");
    let inserted = stat_wal(&mut s);
    assert!(
        big(&inserted, "records") >= big(&before, "records") + 2,
        "{before:?} {inserted:?}"
    );
    assert!(big(&inserted, "bytes") > big(&before, "bytes"));
    assert!(lsn(&inserted, "insert_lsn") > lsn(&before, "insert_lsn"));
    run(&mut s, "COMMIT");
    let committed = stat_wal(&mut s);
    assert!(
        lsn(&committed, "flush_lsn") > lsn(&inserted, "flush_lsn"),
        "{inserted:?} {committed:?}"
    );
    assert!(lsn(&committed, "flush_lsn") <= lsn(&committed, "insert_lsn"));
    assert!(lsn(&committed, "redo_lsn") <= lsn(&committed, "flush_lsn"));
    assert!(big(&committed, "syncs") + big(&committed, "writes") > 0);
    assert!(matches!(committed["write_time_ms"], Value::Double(ms) if ms >= 0.0));
    // The view reads the same log the database writes.
    assert_eq!(
        lsn(&committed, "insert_lsn"),
        db.wal().insert_position(),
        "{committed:?}"
    );
}
