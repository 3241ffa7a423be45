//! The B-tree access method below SQL: inserts with splits, scans in both
//! directions, ranges and IN lists, builds, bulk deletes, uniqueness,
//! concurrent inserters and crash recovery, each checked against a model
//! and with `Btree::verify`, on every I/O method.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use aiostore::btree::{
    Bound, Btree, BtreeError, BtreeScan, BuildKeys, BuildStats, Direction, IndexDesc, KeyRange,
    KeySpec, Liveness, ScanKeys, SortSpace, UniqueCheck,
};
use aiostore::buffer::BufferSession;
use aiostore::config::IoMethod;
use aiostore::database::{Database, Session};
use aiostore::heap::Tid;
use aiostore::storage::Fork;
use aiostore::stream::StreamLimits;
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
        root: Default::default(),
    }
}

/// `idx` as a reopened database knows it: its catalog loads each index
/// anew, without the root hint of the process before (which, for a copy
/// of the files made earlier, names a root the copy may not have).
fn reopened(idx: IndexDesc) -> IndexDesc {
    IndexDesc {
        root: Default::default(),
        ..idx
    }
}

fn create(db: &Arc<Database>, s: &mut BufferSession, idx: &IndexDesc) -> Btree {
    s.pool().relation(idx.rel).create(Fork::Main).unwrap();
    let bt = Btree::new(Arc::clone(db.wal()));
    bt.create_empty(s, idx).unwrap();
    bt
}

/// A database with a small pool, a session of it, and the index `idx`:
/// empty (`create`), or only its file (`build` fills it).
struct Fixture {
    dir: tempfile::TempDir,
    path: std::path::PathBuf,
    db: Arc<Database>,
    sess: Session,
    idx: IndexDesc,
    bt: Arc<Btree>,
}

impl Fixture {
    /// With an empty index.
    fn empty(method: IoMethod, idx: IndexDesc) -> Fixture {
        let (dir, path, db) = new_small_pool_db(method, false);
        let mut sess = db.session().unwrap();
        let bt = Arc::new(create(&db, &mut sess.buf, &idx));
        Fixture {
            dir,
            path,
            db,
            sess,
            idx,
            bt,
        }
    }

    /// With the index's file but nothing in it, for [`build`].
    fn unbuilt(method: IoMethod, idx: IndexDesc) -> Fixture {
        let (dir, path, db) = new_small_pool_db(method, false);
        let sess = db.session().unwrap();
        sess.buf
            .pool()
            .relation(idx.rel)
            .create(Fork::Main)
            .unwrap();
        let bt = Arc::new(Btree::new(Arc::clone(db.wal())));
        Fixture {
            dir,
            path,
            db,
            sess,
            idx,
            bt,
        }
    }

    /// Runs `f` in a thread with a session of its own.
    fn in_session<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Btree, &mut BufferSession, &IndexDesc) -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let (db, bt, idx) = (Arc::clone(&self.db), Arc::clone(&self.bt), self.idx.clone());
        std::thread::spawn(move || {
            let mut sess = db.session().unwrap();
            f(&bt, &mut sess.buf, &idx)
        })
    }

    /// Parks the first session to reach injection point `point`.
    fn park_once_at(&self, point: &'static str) -> Arc<aiostore::aio::Aio> {
        let points = Arc::clone(self.db.aio());
        points
            .injections()
            .attach(point, aiostore::inject::Injection::park().times(1));
        points
    }
}

/// Builds `idx` (an empty file) from `entries` with `mem_bytes` of sort
/// memory, spilling into `temp_dir`.
fn build(
    bt: &Btree,
    s: &mut BufferSession,
    idx: &IndexDesc,
    entries: impl IntoIterator<Item = (Vec<Value>, Tid)>,
    mem_bytes: usize,
    temp_dir: &std::path::Path,
) -> BuildStats {
    let mut keys = BuildKeys::new(
        idx,
        SortSpace {
            mem_bytes,
            temp_dir,
        },
    );
    for (values, tid) in entries {
        keys.push(&values, tid).unwrap();
    }
    bt.build(s, idx, keys, None).unwrap()
}

/// A key whose padding makes pages split often (about 30 tuples a page).
fn key(k: i32) -> Vec<Value> {
    vec![Value::Integer(k), Value::Text(format!("{k:0>200}"))]
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
    scan_counting(bt, s, idx, keys, dir).0
}

/// [`scan`], returning the scan's figures too.
fn scan_counting(
    bt: &Btree,
    s: &mut BufferSession,
    idx: &IndexDesc,
    keys: ScanKeys,
    dir: Direction,
) -> (Vec<(i32, Tid)>, BtreeScan) {
    drain(bt, s, BtreeScan::new(idx.clone(), keys, dir, true))
}

/// Every batch of `sc` as (key, TID) pairs, and the scan for its figures.
fn drain(bt: &Btree, s: &mut BufferSession, mut sc: BtreeScan) -> (Vec<(i32, Tid)>, BtreeScan) {
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
    (out, sc)
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

/// Keys and their TIDs, as scans return them.
type Keys = Vec<(i32, Tid)>;

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
        let mut f = Fixture::empty(method, index(false));
        let (s, idx, bt) = (&mut f.sess.buf, &f.idx, &*f.bt);
        let mut model = BTreeSet::new();
        for n in shuffled(3000) {
            // Keys repeat: 1000 values, three rows each.
            let k = (n % 1000) as i32;
            bt.insert(s, idx, &key(k), tid(n), None).unwrap();
            model.insert((k, tid(n)));
        }
        let report = bt.verify(s, idx).unwrap();
        assert!(report.levels >= 3, "{method:?}: {report:?} levels");
        assert_eq!(report.entries.len(), 3000);
        assert_eq!(report.pages_without_downlink, 0);
        let forward: Vec<_> = model.iter().copied().collect();
        assert_eq!(
            scan(bt, s, idx, ScanKeys::all(), Direction::Forward),
            forward
        );
        let mut backward = forward.clone();
        backward.reverse();
        assert_eq!(
            scan(bt, s, idx, ScanKeys::all(), Direction::Backward),
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
                scan(bt, s, idx, keys.clone(), Direction::Forward),
                want,
                "{lo:?}..{hi:?}"
            );
            let mut rev = want.clone();
            rev.reverse();
            assert_eq!(
                scan(bt, s, idx, keys, Direction::Backward),
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
        while let Some(b) = sc.next_batch(bt, s).unwrap() {
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
        assert_eq!(scan(bt, s, idx, keys, Direction::Backward), rev);
        assert_eq!(
            scan(bt, s, idx, ScanKeys::none(), Direction::Forward),
            vec![]
        );
    }
}

#[test]
fn ascending_inserts_leave_pages_nearly_full() {
    let mut f = Fixture::empty(IoMethod::Sync, index(false));
    let (s, idx, bt) = (&mut f.sess.buf, &f.idx, &*f.bt);
    for n in 0..3000 {
        bt.insert(s, idx, &key(n as i32), tid(n), None).unwrap();
    }
    let report = bt.verify(s, idx).unwrap();
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
        let mut f = Fixture::unbuilt(method, index(false));
        let (s, idx, bt) = (&mut f.sess.buf, &f.idx, &*f.bt);
        let rows = shuffled(5000)
            .into_iter()
            .map(|n| (key((n % 2000) as i32), tid(n)));
        // 64 KiB of sort memory: the sort spills.
        let stats = build(bt, s, idx, rows, 64 << 10, f.dir.path());
        assert!(stats.sort_external, "{stats:?}");
        assert_eq!(stats.tuples, 5000);
        let report = bt.verify(s, idx).unwrap();
        assert_eq!(report.entries.len(), 5000);
        assert!(report.levels >= 2);
        let mut model: Vec<_> = (0..5000).map(|n| ((n % 2000) as i32, tid(n))).collect();
        model.sort();
        assert_eq!(scan(bt, s, idx, ScanKeys::all(), Direction::Forward), model);
        // A built index takes inserts and splits like any other.
        for n in 5000..6000 {
            bt.insert(s, idx, &key((n % 2000) as i32), tid(n), None)
                .unwrap();
        }
        assert_eq!(bt.verify(s, idx).unwrap().entries.len(), 6000);
        // An empty build is an empty root leaf.
        let empty = IndexDesc {
            rel: REL + 1,
            // Its own file, so its own hint.
            root: Default::default(),
            ..idx.clone()
        };
        s.pool().relation(empty.rel).create(Fork::Main).unwrap();
        build(bt, s, &empty, [], 1 << 20, f.dir.path());
        assert_eq!(bt.verify(s, &empty).unwrap().entries, vec![]);
        assert_eq!(
            scan(bt, s, &empty, ScanKeys::all(), Direction::Backward),
            vec![]
        );
    }
}

#[test]
fn bulk_delete_removes_exactly_the_dead_tids() {
    let mut f = Fixture::empty(IoMethod::Worker, index(false));
    let limits = f.sess.stream_limits();
    let (s, idx, bt) = (&mut f.sess.buf, &f.idx, &*f.bt);
    for n in shuffled(2000) {
        bt.insert(s, idx, &key((n % 500) as i32), tid(n), None)
            .unwrap();
    }
    let dead = |t: Tid| (t.block * 100 + t.index as u32).is_multiple_of(3);
    let stats = bt.bulk_delete(s, idx, &dead, limits).unwrap();
    assert_eq!(
        stats.tuples_removed,
        (0..2000u32).filter(|n| n.is_multiple_of(3)).count() as u64
    );
    let report = bt.verify(s, idx).unwrap();
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
    fn liveness(&mut self, _: &mut BufferSession, tid: Tid) -> Result<Liveness, BtreeError> {
        Ok(match self.running {
            Some((t, xid)) if t == tid => Liveness::InProgress(xid),
            _ if self.dead.contains(&tid) => Liveness::Dead { removable: false },
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
    let mut f = Fixture::empty(IoMethod::Sync, index(true));
    let (s, idx, bt) = (&mut f.sess.buf, &f.idx, &*f.bt);
    let mut rows = Rows {
        dead: BTreeSet::new(),
        running: None,
        waited: Vec::new(),
    };
    for n in 0..500 {
        bt.insert(s, idx, &key(n as i32), tid(n), Some(&mut rows))
            .unwrap();
    }
    let e = bt
        .insert(s, idx, &key(7), tid(900), Some(&mut rows))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("duplicate key value violates unique constraint \"t_k_idx\"\nDETAIL:  Key (k, pad)=(7, {:0>200}) already exists.", 7)
    );
    // A dead duplicate does not count; a running one is waited for.
    rows.dead.insert(tid(8));
    bt.insert(s, idx, &key(8), tid(901), Some(&mut rows))
        .unwrap();
    rows.running = Some((tid(9), 77));
    bt.insert(s, idx, &key(9), tid(902), Some(&mut rows))
        .unwrap();
    assert_eq!(rows.waited, vec![77]);
    // NULLs never conflict.
    let null_key = vec![Value::Null, Value::Text("x".into())];
    bt.insert(s, idx, &null_key, tid(903), Some(&mut rows))
        .unwrap();
    bt.insert(s, idx, &null_key, tid(904), Some(&mut rows))
        .unwrap();
    assert_eq!(bt.verify(s, idx).unwrap().entries.len(), 504);
}

#[test]
fn concurrent_inserters_build_a_sound_tree() {
    for method in METHODS {
        let mut f = Fixture::empty(method, index(false));
        let threads: Vec<_> = (0..4u32)
            .map(|t| {
                f.in_session(move |bt, s, idx| {
                    let mut scans = 0;
                    for n in shuffled(1500) {
                        let n = n * 4 + t;
                        bt.insert(s, idx, &key((n % 3000) as i32), tid(n), None)
                            .unwrap();
                        if n.is_multiple_of(200) {
                            // A scan while others split: every key it
                            // returns is in order, none twice.
                            let got = scan(bt, s, idx, ScanKeys::all(), Direction::Forward);
                            assert!(
                                got.windows(2).all(|w| w[0] < w[1]),
                                "a concurrent scan out of order"
                            );
                            let back = scan(bt, s, idx, ScanKeys::all(), Direction::Backward);
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
        let scans: u32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        // Thread t inserts 4n + t: only thread 0 meets multiples of 200,
        // every 50th of its 1500.
        assert_eq!(scans, 30, "{method:?}: scans while others split");
        let (s, idx, bt) = (&mut f.sess.buf, &f.idx, &*f.bt);
        let report = bt.verify(s, idx).unwrap();
        assert_eq!(report.entries.len(), 6000, "{method:?}");
        let tids: BTreeSet<Tid> = report.entries.iter().map(|e| e.1).collect();
        assert_eq!(tids.len(), 6000);
    }
}

#[test]
fn an_index_comes_back_whole_after_a_crash() {
    for method in METHODS {
        let mut f = Fixture::empty(method, index(false));
        let (s, idx, bt) = (&mut f.sess.buf, &f.idx, &*f.bt);
        for n in shuffled(2000) {
            bt.insert(s, idx, &key((n % 700) as i32), tid(n), None)
                .unwrap();
        }
        // Half the inserts come after a checkpoint: replay starts there,
        // with page images for the pages changed first after it.
        f.db.checkpoint(false).unwrap();
        for n in 2000..2600 {
            bt.insert(s, idx, &key((n % 700) as i32), tid(n), None)
                .unwrap();
        }
        f.db.wal().flush_all().unwrap();
        let Fixture {
            dir: _dir,
            path,
            db,
            sess,
            idx,
            bt,
        } = f;
        drop((sess, bt));
        crash(db);
        let idx = reopened(idx);
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

/// Loads keys 0, 10, 20, … (`n` of them) in ascending order, so that the
/// gaps between them can be filled later to split chosen pages.
fn load_spaced(bt: &Btree, s: &mut BufferSession, idx: &IndexDesc, n: u32) -> Vec<(i32, Tid)> {
    (0..n)
        .map(|i| {
            let k = (i * 10) as i32;
            bt.insert(s, idx, &key(k), tid(i), None).unwrap();
            (k, tid(i))
        })
        .collect()
}

/// Inserts the nine keys between each pair of loaded ones (10k+1 …
/// 10k+9 for each k of `ks`), splitting the pages that hold them.
fn fill_gaps(bt: &Btree, s: &mut BufferSession, idx: &IndexDesc, ks: std::ops::Range<u32>) {
    for k in ks {
        for d in 1..10 {
            let n = 10_000 + k * 10 + d;
            bt.insert(s, idx, &key((k * 10 + d) as i32), tid(n), None)
                .unwrap();
        }
    }
}

/// Runs a whole scan in another session, parked the first time it moves
/// between leaf pages while `meanwhile` changes the index, and returns
/// what it read.
fn scan_with_splits_between_pages(
    method: IoMethod,
    direction: Direction,
    meanwhile: impl Fn(&Btree, &mut BufferSession, &IndexDesc),
) -> (Keys, Keys, u64) {
    use aiostore::inject::BTREE_SCAN_BETWEEN_PAGES;
    let mut f = Fixture::empty(method, index(false));
    let loaded = load_spaced(&f.bt, &mut f.sess.buf, &f.idx, 300);
    let points = f.park_once_at(BTREE_SCAN_BETWEEN_PAGES);
    let scanner = f.in_session(move |bt, s, idx| {
        let (got, sc) = scan_counting(bt, s, idx, ScanKeys::all(), direction);
        (got, sc.left_steps_repaired)
    });
    assert!(points
        .injections()
        .wait_until_parked(BTREE_SCAN_BETWEEN_PAGES));
    let (s, idx, bt) = (&mut f.sess.buf, &f.idx, &*f.bt);
    meanwhile(bt, s, idx);
    points.injections().release(BTREE_SCAN_BETWEEN_PAGES);
    let (got, repaired) = scanner.join().unwrap();
    bt.verify(s, idx).unwrap();
    (loaded, got, repaired)
}

/// Keeps the keys that were there before the scan, in order: what a scan
/// must return exactly once each, whatever it also returns of keys
/// inserted while it ran.
fn original(got: &[(i32, Tid)]) -> Vec<(i32, Tid)> {
    got.iter().filter(|(k, _)| k % 10 == 0).copied().collect()
}

#[test]
fn a_forward_scan_misses_and_repeats_nothing_when_the_pages_around_it_split() {
    for method in METHODS {
        // The scan read the first leaf and waits to read the second; both
        // split several times meanwhile (keys between the loaded ones).
        let (loaded, got, _) =
            scan_with_splits_between_pages(method, Direction::Forward, |bt, s, idx| {
                fill_gaps(bt, s, idx, 0..80)
            });
        assert!(
            got.windows(2).all(|w| w[0] < w[1]),
            "{method:?}: out of order or repeated"
        );
        assert_eq!(original(&got), loaded, "{method:?}");
    }
}

#[test]
fn a_backward_scan_finds_its_way_left_when_the_left_page_split() {
    for method in METHODS {
        // The scan read the last leaf and waits to step left; the pages
        // to its left split meanwhile, so the page it recorded no longer
        // links to where it was.
        let (loaded, got, repaired) =
            scan_with_splits_between_pages(method, Direction::Backward, |bt, s, idx| {
                fill_gaps(bt, s, idx, 200..300)
            });
        assert!(
            got.windows(2).all(|w| w[0] > w[1]),
            "{method:?}: out of order or repeated"
        );
        assert!(
            repaired > 0,
            "{method:?}: the page left of the scan did not split under it"
        );
        let mut want = loaded;
        want.reverse();
        assert_eq!(original(&got), want, "{method:?}");
    }
}

/// A scan of `keys` that reads leaves ahead (see `scan_counting`); it
/// holds no pin once it has returned its last batch.
fn scan_reading_ahead(
    bt: &Btree,
    s: &mut BufferSession,
    idx: &IndexDesc,
    keys: ScanKeys,
    dir: Direction,
) -> (Keys, BtreeScan) {
    let sc =
        BtreeScan::new(idx.clone(), keys, dir, true).reading_leaves_ahead(StreamLimits::default());
    let (got, sc) = drain(bt, s, sc);
    assert_eq!(s.pinned_count(), 0, "leaves read ahead left pinned");
    (got, sc)
}

#[test]
fn a_scan_reading_leaves_ahead_returns_what_one_reading_them_one_by_one_returns() {
    use aiostore::btree::LEAF_READ_AHEAD_AFTER_PAGES;
    for method in METHODS {
        let mut f = Fixture::empty(method, index(false));
        let (s, idx, bt) = (&mut f.sess.buf, &f.idx, &*f.bt);
        for n in shuffled(3000) {
            bt.insert(s, idx, &key((n % 1000) as i32), tid(n), None)
                .unwrap();
        }
        // Three levels: the leaves' parents are several pages, so
        // read-ahead feeds from one after another.
        assert!(bt.verify(s, idx).unwrap().levels >= 3, "{method:?}");
        let one = |k: i32| range(Some((k, true)), Some((k, true)));
        let cases = [
            ("all", ScanKeys::all(), true),
            (
                "a range",
                ScanKeys {
                    ranges: vec![range(Some((100, true)), Some((900, false)))],
                },
                true,
            ),
            (
                "a key",
                ScanKeys {
                    ranges: vec![one(500)],
                },
                false,
            ),
            (
                "a short range",
                ScanKeys {
                    ranges: vec![range(Some((20, false)), Some((25, true)))],
                },
                false,
            ),
            (
                "keys spread out",
                ScanKeys {
                    ranges: (0..1000).step_by(37).map(one).collect(),
                },
                false,
            ),
            // Wide ranges, some starting on the page where the one
            // before ended.
            (
                "wide ranges",
                ScanKeys {
                    ranges: vec![
                        range(Some((0, true)), Some((150, true))),
                        range(Some((150, false)), Some((400, true))),
                        range(Some((401, true)), Some((402, true))),
                        range(Some((700, false)), None),
                    ],
                },
                true,
            ),
        ];
        for (what, keys, wide) in cases {
            for dir in [Direction::Forward, Direction::Backward] {
                let want = scan(bt, s, idx, keys.clone(), dir);
                let (got, sc) = scan_reading_ahead(bt, s, idx, keys.clone(), dir);
                assert_eq!(got, want, "{method:?} {what} {dir:?}");
                assert_eq!(
                    sc.leaf_read_ahead_abandoned(),
                    0,
                    "{method:?} {what} {dir:?}"
                );
                let ahead = sc.leaf_pages_read_ahead;
                if wide {
                    assert!(ahead > 0, "{method:?} {what} {dir:?}");
                } else {
                    assert_eq!(ahead, 0, "{method:?} {what} {dir:?}");
                }
                if what == "all" {
                    // All but the leaves read before read-ahead starts.
                    assert_eq!(
                        ahead + LEAF_READ_AHEAD_AFTER_PAGES,
                        sc.leaf_pages,
                        "{method:?} {dir:?}"
                    );
                }
            }
        }
    }
}

/// [`scan_with_splits_between_pages`] for a scan reading leaves ahead,
/// parked when it has taken its first leaf from its stream: the
/// scanner's keys, and how often it gave read-ahead up and how many
/// leaves it read ahead.
fn scan_reading_ahead_with_splits(
    method: IoMethod,
    direction: Direction,
    meanwhile: impl Fn(&Btree, &mut BufferSession, &IndexDesc),
) -> (Keys, Keys, u64, u64) {
    use aiostore::inject::BTREE_SCAN_READING_AHEAD;
    let mut f = Fixture::empty(method, index(false));
    let loaded = load_spaced(&f.bt, &mut f.sess.buf, &f.idx, 300);
    let points = f.park_once_at(BTREE_SCAN_READING_AHEAD);
    let scanner = f.in_session(move |bt, s, idx| {
        let (got, sc) = scan_reading_ahead(bt, s, idx, ScanKeys::all(), direction);
        (
            got,
            sc.leaf_read_ahead_abandoned(),
            sc.leaf_pages_read_ahead,
        )
    });
    assert!(points
        .injections()
        .wait_until_parked(BTREE_SCAN_READING_AHEAD));
    let (s, idx, bt) = (&mut f.sess.buf, &f.idx, &*f.bt);
    meanwhile(bt, s, idx);
    points.injections().release(BTREE_SCAN_READING_AHEAD);
    let (got, abandoned, ahead) = scanner.join().unwrap();
    bt.verify(s, idx).unwrap();
    (loaded, got, abandoned, ahead)
}

#[test]
fn a_scan_reading_ahead_follows_the_links_when_the_leaves_ahead_split() {
    for method in METHODS {
        // The scan took its third leaf (keys from about 660) from its
        // stream, the next ones fed as the parent named them; that leaf
        // and those after it split before it locks it.
        let (loaded, got, abandoned, ahead) =
            scan_reading_ahead_with_splits(method, Direction::Forward, |bt, s, idx| {
                fill_gaps(bt, s, idx, 60..200)
            });
        assert!(
            got.windows(2).all(|w| w[0] < w[1]),
            "{method:?}: out of order or repeated"
        );
        assert_eq!(original(&got), loaded, "{method:?}");
        assert!(ahead > 0, "{method:?}");
        assert_eq!(
            abandoned, 1,
            "{method:?}: the chain left the downlinks once"
        );
    }
}

#[test]
fn a_backward_scan_reading_ahead_follows_the_links_when_the_leaves_ahead_split() {
    for method in METHODS {
        // The scan took its third leaf from the end from its stream; it
        // and the leaves left of it split, so the page it took no longer
        // links to where the scan was.
        let (loaded, got, abandoned, ahead) =
            scan_reading_ahead_with_splits(method, Direction::Backward, |bt, s, idx| {
                fill_gaps(bt, s, idx, 100..250)
            });
        assert!(
            got.windows(2).all(|w| w[0] > w[1]),
            "{method:?}: out of order or repeated"
        );
        let mut want = loaded;
        want.reverse();
        assert_eq!(original(&got), want, "{method:?}");
        assert!(ahead > 0, "{method:?}");
        assert_eq!(
            abandoned, 1,
            "{method:?}: the chain left the downlinks once"
        );
    }
}

#[test]
fn searches_find_every_key_while_a_split_waits_for_its_downlink() {
    use aiostore::inject::BTREE_SPLIT_BEFORE_DOWNLINK;
    for method in METHODS {
        let mut f = Fixture::empty(method, index(false));
        let loaded = load_spaced(&f.bt, &mut f.sess.buf, &f.idx, 300);
        let points = f.park_once_at(BTREE_SPLIT_BEFORE_DOWNLINK);
        // Fill a gap in the middle until a page splits; that insert parks
        // with the left half locked and no downlink for the right half.
        let splitter = f.in_session(|bt, s, idx| {
            for d in 1..10u32 {
                for k in 100..140u32 {
                    let n = 10_000 + k * 10 + d;
                    bt.insert(s, idx, &key((k * 10 + d) as i32), tid(n), None)
                        .unwrap();
                }
            }
        });
        assert!(points
            .injections()
            .wait_until_parked(BTREE_SPLIT_BEFORE_DOWNLINK));
        // A scan of the range being split: its descent reaches the left
        // half (the parent has no downlink for the right one yet) and
        // waits for its lock; let go, it must move right to the keys the
        // split moved.
        let searcher = f.in_session(|bt, s, idx| {
            let keys = ScanKeys {
                ranges: vec![range(Some((1000, true)), Some((1400, true)))],
            };
            scan(bt, s, idx, keys, Direction::Forward)
        });
        let (s, idx, bt) = (&mut f.sess.buf, &f.idx, &*f.bt);
        // Keys right of the split: a backward scan from the end reaches
        // them through right-links and left-links alone (it never needs
        // the locked left half until it gets there).
        let keys = ScanKeys {
            ranges: vec![range(Some((2000, true)), None)],
        };
        let got = scan(bt, s, idx, keys, Direction::Backward);
        let mut want: Vec<_> = loaded.iter().filter(|(k, _)| *k >= 2000).copied().collect();
        want.reverse();
        assert_eq!(got, want, "{method:?}");
        std::thread::sleep(std::time::Duration::from_millis(100));
        points.injections().release(BTREE_SPLIT_BEFORE_DOWNLINK);
        let found = searcher.join().unwrap();
        assert!(found.windows(2).all(|w| w[0] < w[1]), "{method:?}");
        let want: Vec<_> = loaded
            .iter()
            .filter(|(k, _)| (1000..=1400).contains(k))
            .copied()
            .collect();
        assert_eq!(original(&found), want, "{method:?}");
        splitter.join().unwrap();
        let report = bt.verify(s, idx).unwrap();
        assert_eq!(report.entries.len(), 300 + 9 * 40);
        assert_eq!(report.pages_without_downlink, 0);
    }
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(i32, u32),
        /// Removes every entry whose TID is a multiple of this (vacuum).
        Vacuum(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            20 => (-50i32..50, 0u32..100_000).prop_map(|(k, n)| Op::Insert(k, n)),
            1 => (2u32..7).prop_map(Op::Vacuum),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        /// After any mix of inserts (many equal keys, NULLs among them)
        /// and bulk deletes the tree verifies and holds what a model holds,
        /// in the index's order (descending, NULLs first).
        #[test]
        fn random_inserts_and_deletes_keep_the_tree_sound(ops in proptest::collection::vec(op(), 1..600)) {
            let idx = IndexDesc {
                spec: KeySpec {
                    types: vec![ColumnType::Integer, ColumnType::Text],
                    desc: vec![true, false],
                    nulls_first: vec![true, false],
                },
                ..index(false)
            };
            let mut f = Fixture::empty(IoMethod::Sync, idx);
            let limits = f.sess.stream_limits();
            let (s, idx, bt) = (&mut f.sess.buf, &f.idx, &*f.bt);
            let mut model: Vec<(Option<i32>, u32)> = Vec::new();
            for op in ops {
                match op {
                    Op::Insert(k, n) => {
                        if model.iter().any(|m| m.1 == n) {
                            continue;
                        }
                        let v = (k % 7 != 0).then_some(k);
                        let values = vec![
                            v.map_or(Value::Null, Value::Integer),
                            Value::Text("p".repeat(300)),
                        ];
                        bt.insert(s, idx, &values, tid(n), None).unwrap();
                        model.push((v, n));
                    }
                    Op::Vacuum(m) => {
                        let dead = |t: Tid| (t.block * 100 + t.index as u32).is_multiple_of(m);
                        bt.bulk_delete(s, idx, &dead, limits).unwrap();
                        model.retain(|e| !e.1.is_multiple_of(m));
                    }
                }
            }
            // NULLs first, then descending keys; equal keys by TID.
            model.sort_by(|a, b| match (a.0, b.0) {
                (None, None) => tid(a.1).cmp(&tid(b.1)),
                (None, Some(_)) => std::cmp::Ordering::Less,
                (Some(_), None) => std::cmp::Ordering::Greater,
                (Some(x), Some(y)) => y.cmp(&x).then(tid(a.1).cmp(&tid(b.1))),
            });
            let report = bt.verify(s, idx).unwrap();
            let got: Vec<Tid> = report.entries.iter().map(|e| e.1).collect();
            let want: Vec<Tid> = model.iter().map(|m| tid(m.1)).collect();
            prop_assert_eq!(&got, &want);
            let mut sc = BtreeScan::new(idx.clone(), ScanKeys::all(), Direction::Backward, false);
            let mut back = Vec::new();
            while let Some(b) = sc.next_batch(bt, s).unwrap() {
                back.extend(b.items.iter().map(|i| i.tid));
            }
            back.reverse();
            prop_assert_eq!(back, want);
        }
    }
}

// ---------------------------------------------------------------------
// Cases a review found broken: builds with uneven keys, crashes between
// a split's steps, vacuum racing splits, damage verify must see, pins
// left on an error path.
// ---------------------------------------------------------------------

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// build.rs add_to_level reserves room for the pivot of the tuple being
/// added, but the high key written when the page is finished is the pivot
/// of the *next* tuple: a large key after small ones finds no room.
#[test]
fn a_build_takes_a_large_key_after_small_ones() {
    let mut f = Fixture::unbuilt(IoMethod::Sync, index(false));
    let (s, idx, bt) = (&mut f.sess.buf, &f.idx, &*f.bt);
    let small = (1..=350u32).map(|n| {
        (
            vec![Value::Integer(n as i32), Value::Text("a".into())],
            tid(n),
        )
    });
    let large = (
        vec![Value::Integer(1_000_000), Value::Text("x".repeat(2000))],
        tid(351),
    );
    let stats = build(bt, s, idx, small.chain([large]), 1 << 20, f.dir.path());
    assert_eq!(stats.tuples, 351);
    assert_eq!(bt.verify(s, idx).unwrap().entries.len(), 351);
}

/// A crash after a root split is logged and before the new root is: the
/// root's right half has no parent, and its first split takes the
/// "stack empty, not the root, level == meta.level" arm of
/// insert_downlink, which reports damage.
#[test]
fn inserts_go_on_after_a_crash_between_a_root_split_and_its_new_root() {
    use aiostore::inject::BTREE_SPLIT_BEFORE_DOWNLINK;
    let method = IoMethod::Sync;
    let f = Fixture::empty(method, index(false));
    let points = f.park_once_at(BTREE_SPLIT_BEFORE_DOWNLINK);
    let inserter = f.in_session(|bt, s, idx| {
        for n in 0..60u32 {
            bt.insert(s, idx, &key(n as i32), tid(n), None).unwrap();
        }
    });
    assert!(points
        .injections()
        .wait_until_parked(BTREE_SPLIT_BEFORE_DOWNLINK));
    f.db.wal().flush_all().unwrap();
    let image = f.dir.path().join("crash-image");
    copy_dir(&f.path, &image);
    points.injections().release(BTREE_SPLIT_BEFORE_DOWNLINK);
    inserter.join().unwrap();
    let Fixture {
        dir: _dir,
        db,
        sess,
        idx,
        bt,
        ..
    } = f;
    drop((sess, bt, db));
    let idx = reopened(idx);
    let db = Database::open(&image, &common::small_pool_settings(method, false)).unwrap();
    let mut sess = db.session().unwrap();
    let s = &mut sess.buf;
    let bt = Btree::new(Arc::clone(db.wal()));
    bt.verify(s, &idx).unwrap();
    // Ascending keys go to the root's right half until it splits.
    for n in 100..200u32 {
        bt.insert(s, &idx, &key(n as i32), tid(n), None)
            .unwrap_or_else(|e| panic!("insert of {n} after the crash: {e}"));
    }
    bt.verify(s, &idx).unwrap();
}

/// bulk_delete scans blocks 1..nblocks as counted at its start; a split
/// meanwhile moves tuples of a page it has not reached yet to a new block
/// past that end, and their dead TIDs stay in the index (PostgreSQL's
/// btvacuumscan re-reads the length and goes on).
#[test]
fn bulk_delete_reaches_pages_split_off_while_it_runs() {
    let mut f = Fixture::empty(IoMethod::Sync, index(false));
    let limits = f.sess.stream_limits();
    let (s, idx, bt) = (&mut f.sess.buf, &f.idx, &*f.bt);
    load_spaced(bt, s, idx, 300);
    let other = std::cell::RefCell::new(f.db.session().unwrap());
    let once = std::cell::Cell::new(false);
    let is_dead = |t: Tid| {
        let n = t.block * 100 + t.index as u32;
        n < 10_000 && n.is_multiple_of(2)
    };
    let dead = |t: Tid| {
        if !once.replace(true) {
            // Another session splits the last leaves while vacuum is on
            // the first one.
            fill_gaps(bt, &mut other.borrow_mut().buf, idx, 200..300);
        }
        is_dead(t)
    };
    bt.bulk_delete(s, idx, &dead, limits).unwrap();
    let report = bt.verify(s, idx).unwrap();
    let left: Vec<_> = report.entries.iter().filter(|e| is_dead(e.1)).collect();
    assert!(
        left.is_empty(),
        "{} entries of dead rows left, e.g. {:?}",
        left.len(),
        left.first().map(|e| e.1)
    );
}

/// verify walks each level by right-links and never checks that the
/// downlinks it collected were reached: a downlink pointing one level too
/// far down passes, while a search through it fails.
#[test]
fn verify_reports_a_downlink_to_the_wrong_level() {
    use aiostore::buffer::LockMode;
    let mut f = Fixture::unbuilt(IoMethod::Sync, index(false));
    let (s, idx, bt) = (&mut f.sess.buf, &f.idx, &*f.bt);
    let rows = (1..=3000u32).map(|n| (key(n as i32), tid(n)));
    build(bt, s, idx, rows, 1 << 20, f.dir.path());
    assert_eq!(bt.verify(s, idx).unwrap().levels, 3);
    let read = |s: &mut BufferSession, block: u32| -> Vec<u8> {
        let id = s.read_buffer(REL, Fork::Main, block).unwrap();
        let g = s.lock_page(id, LockMode::Shared);
        let v = g.page().to_vec();
        drop(g);
        s.release(id);
        v
    };
    let child = |page: &[u8], i: usize| -> u32 {
        let page: &aiostore::page::PageBytes = page.try_into().unwrap();
        let t = aiostore::page::item(page, i).unwrap();
        u32::from_le_bytes(t[0..4].try_into().unwrap())
    };
    let meta = read(s, 0);
    let root = u32::from_le_bytes(meta[32..36].try_into().unwrap());
    // The root is alone on its level: item 0 is minus infinity.
    let first_internal = child(&read(s, root), 0);
    // That page has a high key: item 1 is its minus infinity.
    let leaf = child(&read(s, first_internal), 1);
    let id = s.read_buffer(REL, Fork::Main, root).unwrap();
    let mut g = s.lock_page(id, LockMode::Exclusive);
    aiostore::page::item_mut(g.page_mut(), 1).unwrap()[0..4].copy_from_slice(&leaf.to_le_bytes());
    drop(g);
    s.release(id);
    // The damage is real: a search through the root's second downlink
    // finds a leaf where it expects an internal page.
    let mut sc = BtreeScan::new(
        idx.clone(),
        ScanKeys {
            ranges: vec![range(Some((1000, true)), Some((1000, true)))],
        },
        Direction::Forward,
        false,
    );
    let searched = sc.next_batch(bt, s);
    assert!(searched.is_err(), "the search got {searched:?}");
    let verified = bt.verify(s, idx).map(|r| r.pages_without_downlink);
    assert!(
        verified.is_err(),
        "verify passed, pages_without_downlink = {verified:?}"
    );
}

struct FailsOnLaterPage;

impl UniqueCheck for FailsOnLaterPage {
    fn liveness(&mut self, _: &mut BufferSession, tid: Tid) -> Result<Liveness, BtreeError> {
        if tid.block * 100 + tid.index as u32 >= 50 {
            Err(BtreeError::UniqueRetries {
                index: "a heap read failed".into(),
                tries: 0,
            })
        } else {
            Ok(Liveness::Dead { removable: false })
        }
    }

    fn wait_for(&mut self, _xid: u32) -> Result<(), BtreeError> {
        Ok(())
    }
}

/// find_equal_live returns with `?` while it holds a right page
/// (`right`), whose guard drops but whose pin stays.
#[test]
fn a_failed_unique_check_leaves_no_pin() {
    let mut f = Fixture::empty(IoMethod::Sync, index(true));
    let (s, idx, bt) = (&mut f.sess.buf, &f.idx, &*f.bt);
    // 60 equal keys (dead rows) over two leaves.
    for n in 0..60 {
        bt.insert(s, idx, &key(7), tid(n), None).unwrap();
    }
    assert_eq!(s.pinned_count(), 0);
    let e = bt
        .insert(s, idx, &key(7), tid(99), Some(&mut FailsOnLaterPage))
        .unwrap_err();
    assert_eq!(s.pinned_count(), 0, "pins left after: {e}");
}
