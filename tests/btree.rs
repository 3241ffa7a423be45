//! The B-tree access method below SQL: inserts with splits, scans in both
//! directions, ranges and IN lists, builds, bulk deletes, uniqueness,
//! concurrent inserters and crash recovery, each checked against a model
//! and with `Btree::verify`, on every I/O method.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use aiostore::btree::{
    Bound, Btree, BtreeError, BtreeScan, Direction, IndexDesc, KeyRange, KeySpec, Liveness,
    ScanKeys, SortSpace, UniqueCheck,
};
use aiostore::buffer::BufferSession;
use aiostore::config::IoMethod;
use aiostore::database::Database;
use aiostore::heap::Tid;
use aiostore::storage::Fork;
use aiostore::types::{ColumnType, Value};
use common::{crash, new_small_pool_db};

const METHODS: [IoMethod; 3] = [IoMethod::Sync, IoMethod::Worker, IoMethod::IoUring];
/// Below the first user relation, so that start-up after a crash does not
/// take the file for an orphan of an uncommitted CREATE TABLE.
const REL: u32 = 100;

fn index(unique: bool) -> IndexDesc {
    IndexDesc {
        name: "t_k_idx".into(),
        rel: REL,
        spec: KeySpec {
            types: vec![ColumnType::Integer, ColumnType::Text],
            desc: vec![false, false],
            nulls_first: vec![false, false],
        },
        unique,
        column_names: vec!["k".into(), "pad".into()],
    }
}

fn create(db: &Arc<Database>, s: &mut BufferSession, idx: &IndexDesc) -> Btree {
    s.pool().relation(idx.rel).create(Fork::Main).unwrap();
    let bt = Btree::new(Arc::clone(db.wal()));
    bt.create_empty(s, idx).unwrap();
    bt
}

/// A key whose padding makes pages split often (about 30 tuples a page).
fn key(k: i32) -> Vec<Value> {
    vec![Value::Integer(k), Value::Text(format!("{k:0>200}"))]
}

fn space(mem_bytes: usize, temp_dir: &std::path::Path) -> SortSpace<'_> {
    SortSpace {
        mem_bytes,
        temp_dir,
    }
}

fn tid(n: u32) -> Tid {
    Tid {
        block: n / 100,
        index: (n % 100) as u16,
    }
}

fn scan(
    bt: &Btree,
    s: &mut BufferSession,
    idx: &IndexDesc,
    keys: ScanKeys,
    dir: Direction,
) -> Vec<(i32, Tid)> {
    let mut sc = BtreeScan::new(idx.clone(), keys, dir, true);
    let mut out = Vec::new();
    while let Some(batch) = sc.next_batch(bt, s).unwrap() {
        assert!(!batch.items.is_empty(), "an empty batch");
        for item in batch.items {
            match item.key[0] {
                Value::Integer(k) => out.push((k, item.tid)),
                ref v => panic!("key {v:?}"),
            }
        }
    }
    out
}

fn range(lo: Option<(i32, bool)>, hi: Option<(i32, bool)>) -> KeyRange {
    let b = |(k, inclusive): (i32, bool)| Bound {
        values: vec![Value::Integer(k)],
        inclusive,
    };
    KeyRange {
        lower: lo.map(b),
        upper: hi.map(b),
    }
}

/// A pseudo-random permutation step (a full-period LCG modulo 2^k).
fn shuffled(n: u32) -> Vec<u32> {
    let mut v: Vec<u32> = (0..n).collect();
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

#[test]
fn random_inserts_split_into_a_sound_tree_that_scans_in_order_both_ways() {
    for method in METHODS {
        let (_dir, _path, db) = new_small_pool_db(method, false);
        let mut sess = db.session().unwrap();
        let s = &mut sess.buf;
        let idx = index(false);
        let bt = create(&db, s, &idx);
        let mut model = BTreeSet::new();
        for n in shuffled(3000) {
            // Keys repeat: 1000 values, three rows each.
            let k = (n % 1000) as i32;
            bt.insert(s, &idx, &key(k), tid(n), None).unwrap();
            model.insert((k, tid(n)));
        }
        let report = bt.verify(s, &idx).unwrap();
        assert!(report.levels >= 3, "{method:?}: {report:?} levels");
        assert_eq!(report.entries.len(), 3000);
        assert_eq!(report.pages_without_downlink, 0);
        let forward: Vec<_> = model.iter().copied().collect();
        assert_eq!(
            scan(&bt, s, &idx, ScanKeys::all(), Direction::Forward),
            forward
        );
        let mut backward = forward.clone();
        backward.reverse();
        assert_eq!(
            scan(&bt, s, &idx, ScanKeys::all(), Direction::Backward),
            backward
        );
        // Ranges, both directions, inclusive and exclusive ends.
        for (lo, hi) in [
            (Some((10, true)), Some((20, false))),
            (Some((990, false)), None),
            (None, Some((3, true))),
            (Some((500, true)), Some((500, true))),
        ] {
            let keys = ScanKeys {
                ranges: vec![range(lo, hi)],
            };
            let want: Vec<_> = model
                .iter()
                .filter(|(k, _)| {
                    lo.is_none_or(|(l, inc)| if inc { *k >= l } else { *k > l })
                        && hi.is_none_or(|(h, inc)| if inc { *k <= h } else { *k < h })
                })
                .copied()
                .collect();
            assert_eq!(
                scan(&bt, s, &idx, keys.clone(), Direction::Forward),
                want,
                "{lo:?}..{hi:?}"
            );
            let mut rev = want.clone();
            rev.reverse();
            assert_eq!(
                scan(&bt, s, &idx, keys, Direction::Backward),
                rev,
                "{lo:?}..{hi:?} backward"
            );
        }
        // An IN list: equality ranges in order, some on one page.
        let list = [3, 4, 5, 400, 401, 999, 1500];
        let keys = ScanKeys {
            ranges: list
                .iter()
                .map(|&k| range(Some((k, true)), Some((k, true))))
                .collect(),
        };
        let want: Vec<_> = model
            .iter()
            .filter(|(k, _)| list.contains(k))
            .copied()
            .collect();
        let mut sc = BtreeScan::new(idx.clone(), keys.clone(), Direction::Forward, true);
        let mut got = Vec::new();
        while let Some(b) = sc.next_batch(&bt, s).unwrap() {
            got.extend(b.items.iter().map(|i| i.tid));
        }
        assert_eq!(got, want.iter().map(|w| w.1).collect::<Vec<_>>());
        assert!(
            sc.descents <= 4,
            "{method:?}: {} descents for neighbours",
            sc.descents
        );
        let mut rev = want.clone();
        rev.reverse();
        assert_eq!(scan(&bt, s, &idx, keys, Direction::Backward), rev);
        assert_eq!(
            scan(&bt, s, &idx, ScanKeys::none(), Direction::Forward),
            vec![]
        );
    }
}

#[test]
fn ascending_inserts_leave_pages_nearly_full() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Sync, false);
    let mut sess = db.session().unwrap();
    let s = &mut sess.buf;
    let idx = index(false);
    let bt = create(&db, s, &idx);
    for n in 0..3000 {
        bt.insert(s, &idx, &key(n as i32), tid(n), None).unwrap();
    }
    let report = bt.verify(s, &idx).unwrap();
    // About 30 tuples of 224 bytes fit a page; at 90 % a page takes ~32.
    let pages = s.pool().relation(REL).nblocks(Fork::Main).unwrap();
    assert!(
        pages < 3000 / 26 + 10,
        "{pages} pages for 3000 ascending keys ({report:?})"
    );
}

#[test]
fn a_build_makes_the_same_index_as_inserts() {
    for method in METHODS {
        let (dir, _path, db) = new_small_pool_db(method, false);
        let mut sess = db.session().unwrap();
        let s = &mut sess.buf;
        let idx = index(false);
        s.pool().relation(REL).create(Fork::Main).unwrap();
        let bt = Btree::new(Arc::clone(db.wal()));
        let mut rows = shuffled(5000).into_iter();
        let mut next = || Ok(rows.next().map(|n| (key((n % 2000) as i32), tid(n))));
        // 64 KiB of sort memory: the sort spills.
        let stats = bt
            .build(
                s,
                &idx,
                &mut next,
                space(64 << 10, dir.path()),
                None,
                &mut |_| {},
            )
            .unwrap();
        assert!(stats.sort_external, "{stats:?}");
        assert_eq!(stats.tuples, 5000);
        let report = bt.verify(s, &idx).unwrap();
        assert_eq!(report.entries.len(), 5000);
        assert!(report.levels >= 2);
        let mut model: Vec<_> = (0..5000).map(|n| ((n % 2000) as i32, tid(n))).collect();
        model.sort();
        assert_eq!(
            scan(&bt, s, &idx, ScanKeys::all(), Direction::Forward),
            model
        );
        // A built index takes inserts and splits like any other.
        for n in 5000..6000 {
            bt.insert(s, &idx, &key((n % 2000) as i32), tid(n), None)
                .unwrap();
        }
        assert_eq!(bt.verify(s, &idx).unwrap().entries.len(), 6000);
        // An empty build is an empty root leaf.
        let empty = IndexDesc {
            rel: REL + 1,
            ..index(false)
        };
        s.pool().relation(empty.rel).create(Fork::Main).unwrap();
        bt.build(
            s,
            &empty,
            &mut || Ok(None),
            space(1 << 20, dir.path()),
            None,
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(bt.verify(s, &empty).unwrap().entries, vec![]);
        assert_eq!(
            scan(&bt, s, &empty, ScanKeys::all(), Direction::Backward),
            vec![]
        );
    }
}

#[test]
fn bulk_delete_removes_exactly_the_dead_tids() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Worker, false);
    let mut sess = db.session().unwrap();
    let limits = sess.stream_limits();
    let s = &mut sess.buf;
    let idx = index(false);
    let bt = create(&db, s, &idx);
    for n in shuffled(2000) {
        bt.insert(s, &idx, &key((n % 500) as i32), tid(n), None)
            .unwrap();
    }
    let dead = |t: Tid| (t.block * 100 + t.index as u32).is_multiple_of(3);
    let stats = bt.bulk_delete(s, &idx, &dead, limits).unwrap();
    assert_eq!(
        stats.tuples_removed,
        (0..2000u32).filter(|n| n.is_multiple_of(3)).count() as u64
    );
    let report = bt.verify(s, &idx).unwrap();
    assert!(report.entries.iter().all(|(_, t)| !dead(*t)));
    assert_eq!(report.entries.len() as u64, stats.tuples_left);
}

/// Rows are live unless listed dead; one transaction may be "running".
struct Rows {
    dead: BTreeSet<Tid>,
    running: Option<(Tid, u32)>,
    waited: Vec<u32>,
}

impl UniqueCheck for Rows {
    fn liveness(&mut self, tid: Tid) -> Result<Liveness, BtreeError> {
        Ok(match self.running {
            Some((t, xid)) if t == tid => Liveness::InProgress(xid),
            _ if self.dead.contains(&tid) => Liveness::Dead,
            _ => Liveness::Live,
        })
    }

    fn wait_for(&mut self, xid: u32) -> Result<(), BtreeError> {
        // The transaction aborts: its row is dead.
        let (t, _) = self.running.take().unwrap();
        self.dead.insert(t);
        self.waited.push(xid);
        Ok(())
    }
}

#[test]
fn a_unique_index_refuses_a_live_duplicate_and_waits_for_a_running_one() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Sync, false);
    let mut sess = db.session().unwrap();
    let s = &mut sess.buf;
    let idx = index(true);
    let bt = create(&db, s, &idx);
    let mut rows = Rows {
        dead: BTreeSet::new(),
        running: None,
        waited: Vec::new(),
    };
    for n in 0..500 {
        bt.insert(s, &idx, &key(n as i32), tid(n), Some(&mut rows))
            .unwrap();
    }
    let e = bt
        .insert(s, &idx, &key(7), tid(900), Some(&mut rows))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("duplicate key value violates unique constraint \"t_k_idx\"\nDETAIL:  Key (k, pad)=(7, {:0>200}) already exists.", 7)
    );
    // A dead duplicate does not count; a running one is waited for.
    rows.dead.insert(tid(8));
    bt.insert(s, &idx, &key(8), tid(901), Some(&mut rows))
        .unwrap();
    rows.running = Some((tid(9), 77));
    bt.insert(s, &idx, &key(9), tid(902), Some(&mut rows))
        .unwrap();
    assert_eq!(rows.waited, vec![77]);
    // NULLs never conflict.
    let null_key = vec![Value::Null, Value::Text("x".into())];
    bt.insert(s, &idx, &null_key, tid(903), Some(&mut rows))
        .unwrap();
    bt.insert(s, &idx, &null_key, tid(904), Some(&mut rows))
        .unwrap();
    assert_eq!(bt.verify(s, &idx).unwrap().entries.len(), 504);
}

#[test]
fn concurrent_inserters_build_a_sound_tree() {
    for method in METHODS {
        let (_dir, _path, db) = new_small_pool_db(method, false);
        let idx = index(false);
        let bt = {
            let mut sess = db.session().unwrap();
            Arc::new(create(&db, &mut sess.buf, &idx))
        };
        let threads: Vec<_> = (0..4u32)
            .map(|t| {
                let (db, bt, idx) = (Arc::clone(&db), Arc::clone(&bt), idx.clone());
                std::thread::spawn(move || {
                    let mut sess = db.session().unwrap();
                    let mut scans = 0;
                    for n in shuffled(1500) {
                        let n = n * 4 + t;
                        bt.insert(&mut sess.buf, &idx, &key((n % 3000) as i32), tid(n), None)
                            .unwrap();
                        if n.is_multiple_of(200) {
                            // A scan while others split: every key it
                            // returns is in order, none twice.
                            let got = scan(
                                &bt,
                                &mut sess.buf,
                                &idx,
                                ScanKeys::all(),
                                Direction::Forward,
                            );
                            assert!(
                                got.windows(2).all(|w| w[0] < w[1]),
                                "a concurrent scan out of order"
                            );
                            let back = scan(
                                &bt,
                                &mut sess.buf,
                                &idx,
                                ScanKeys::all(),
                                Direction::Backward,
                            );
                            assert!(
                                back.windows(2).all(|w| w[0] > w[1]),
                                "a backward scan out of order"
                            );
                            scans += 1;
                        }
                    }
                    scans
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let mut sess = db.session().unwrap();
        let report = bt.verify(&mut sess.buf, &idx).unwrap();
        assert_eq!(report.entries.len(), 6000, "{method:?}");
        let tids: BTreeSet<Tid> = report.entries.iter().map(|e| e.1).collect();
        assert_eq!(tids.len(), 6000);
    }
}

#[test]
fn an_index_comes_back_whole_after_a_crash() {
    for method in METHODS {
        let (_dir, path, db) = new_small_pool_db(method, false);
        let idx = index(false);
        {
            let mut sess = db.session().unwrap();
            let s = &mut sess.buf;
            let bt = create(&db, s, &idx);
            for n in shuffled(2000) {
                bt.insert(s, &idx, &key((n % 700) as i32), tid(n), None)
                    .unwrap();
            }
            // Half the inserts come after a checkpoint: replay starts there,
            // with page images for the pages changed first after it.
            db.checkpoint(false).unwrap();
            for n in 2000..2600 {
                bt.insert(s, &idx, &key((n % 700) as i32), tid(n), None)
                    .unwrap();
            }
            db.wal().flush_all().unwrap();
        }
        crash(db);
        let db = Database::open(&path, &common::small_pool_settings(method, false)).unwrap();
        let mut sess = db.session().unwrap();
        let bt = Btree::new(Arc::clone(db.wal()));
        let report = bt.verify(&mut sess.buf, &idx).unwrap();
        assert_eq!(report.entries.len(), 2600, "{method:?}");
        let got = scan(
            &bt,
            &mut sess.buf,
            &idx,
            ScanKeys::all(),
            Direction::Forward,
        );
        let mut model: Vec<_> = (0..2600).map(|n| ((n % 700) as i32, tid(n))).collect();
        model.sort();
        assert_eq!(got, model);
    }
}
