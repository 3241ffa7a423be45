//! The AIO scenarios of DESIGN.md §11 that need no buffer pool, for every
//! I/O method. Interleavings are forced with injection points and
//! barriers, never left to timing.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use aiostore::aio::{
    read_blocks, write_blocks, Aio, AioConfig, AioError, AioSession, AioWarning, BlockReader,
    IoReturn, IoReturnCell, IoStatus, IoVec, WaitRef,
};
use aiostore::config::IoMethod;
use aiostore::inject::{Injection, BEFORE_COMPLETE_SHARED, WORKER_AFTER_REOPEN};
use aiostore::stats::IoOp;
use aiostore::storage::{AlignedBuf, Fork, SegmentFile, Smgr, BLOCK_SIZE};
use common::*;

const B: u64 = BLOCK_SIZE as u64;

/// Starts a read of `len` bytes at `offset` into `buf` and returns its wait
/// reference and return cell.
fn start_read(
    session: &mut AioSession,
    file: &Arc<SegmentFile>,
    offset: u64,
    buf: &mut AlignedBuf,
) -> (WaitRef, IoReturnCell) {
    let token = session.acquire().expect("acquire");
    let wref = session.wait_ref(&token);
    let ret = IoReturnCell::default();
    session.set_return(&token, &ret).unwrap();
    let iov = [IoVec::new(buf.as_mut_ptr(), buf.len())];
    // SAFETY: every test waits for the read before touching or freeing buf.
    unsafe { session.start_readv(token, file, offset, &iov) }.expect("start read");
    (wref, ret)
}

/// A data file of `nblocks` pattern blocks, AIO started with `config` and
/// one session of it.
fn open_file(config: AioConfig, nblocks: u32, direct: bool) -> (DataFile, Arc<Aio>, AioSession) {
    let data = data_file(nblocks, direct);
    let aio = start(&config);
    let session = aio.session().unwrap();
    (data, aio, session)
}

/// Makes the next I/O to complete report `raw` (bytes, or a negative
/// errno) instead of its own result.
fn rewrite_next_result(aio: &Aio, raw: i64) {
    aio.injections().attach(
        BEFORE_COMPLETE_SHARED,
        Injection::rewrite_result(raw).times(1),
    );
}

fn read_and_collect(
    session: &mut AioSession,
    file: &Arc<SegmentFile>,
    offset: u64,
    buf: &mut AlignedBuf,
) -> IoReturn {
    let (wref, ret) = start_read(session, file, offset, buf);
    session.wait(wref).unwrap();
    ret.take().expect("collected by wait")
}

// ---- handle misuse -------------------------------------------------------

fn a_leaked_handle_is_reported_and_released(method: IoMethod) {
    let aio = start(&config(method));
    let mut session = aio.session().unwrap();
    let _forgotten = session.acquire().unwrap();
    let warnings = session.check_resources();
    assert!(
        matches!(warnings[..], [AioWarning::LeakedHandle { .. }]),
        "{warnings:?}"
    );
    assert!(warnings[0].to_string().contains("leaked AIO handle"));
    // The handle went back: the session can use all of its handles again.
    assert!(session.check_resources().is_empty());
    let t = session.acquire().unwrap();
    session.release(t).unwrap();
}

fn a_second_handed_out_handle_is_an_error_and_acquiring_after_it_works(method: IoMethod) {
    let (data, _aio, mut session) = open_file(config(method), 4, false);
    let first = session.acquire().unwrap();
    let err = session.acquire().unwrap_err();
    assert!(matches!(err, AioError::HandleAlreadyHandedOut), "{err}");
    assert!(matches!(
        session.acquire_nb(),
        Err(AioError::HandleAlreadyHandedOut)
    ));
    session.release(first).unwrap();
    let mut buf = AlignedBuf::new(BLOCK_SIZE);
    let ret = read_and_collect(&mut session, &data.file, 2 * B, &mut buf);
    assert_eq!(ret.result.status, IoStatus::Ok);
    check_block(2, &buf);
}

fn a_batch_left_open_is_reported_and_its_io_submitted(method: IoMethod) {
    let (data, aio, mut session) = open_file(config(method), 4, false);
    session.enter_batch().unwrap();
    assert!(matches!(
        session.enter_batch(),
        Err(AioError::BatchAlreadyStarted)
    ));
    let mut buf = AlignedBuf::new(BLOCK_SIZE);
    let (wref, ret) = start_read(&mut session, &data.file, B, &mut buf);
    if method == IoMethod::Sync {
        assert_eq!(
            session.staged_count(),
            0,
            "the sync method executes at staging"
        );
        assert!(aio.is_done(wref));
    } else {
        assert_eq!(session.staged_count(), 1, "batch mode holds the I/O back");
    }
    let warnings = session.check_resources();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(matches!(warnings[0], AioWarning::BatchLeftOpen { .. }));
    assert_eq!(session.staged_count(), 0);
    session.wait(wref).unwrap();
    assert_eq!(ret.take().unwrap().result.status, IoStatus::Ok);
    check_block(1, &buf);
}

fn staged_ios_are_held_until_the_batch_ends(method: IoMethod) {
    let (data, aio, mut session) = open_file(config(method), 16, true);
    let mut bufs: Vec<AlignedBuf> = (0..8).map(|_| AlignedBuf::new(BLOCK_SIZE)).collect();
    session.enter_batch().unwrap();
    let started: Vec<_> = bufs
        .iter_mut()
        .enumerate()
        .map(|(i, buf)| start_read(&mut session, &data.file, (2 * i as u64) * B, buf))
        .collect();
    if method == IoMethod::Sync {
        assert_eq!(
            session.staged_count(),
            0,
            "the sync method executes at staging"
        );
        for (wref, _) in &started {
            assert!(aio.is_done(*wref));
        }
    } else {
        assert_eq!(session.staged_count(), 8);
        assert_eq!(session.in_flight_count(), 0);
    }
    session.exit_batch();
    assert_eq!(session.staged_count(), 0);
    for (i, (wref, ret)) in started.into_iter().enumerate() {
        session.wait(wref).unwrap();
        assert_eq!(ret.take().unwrap().result.status, IoStatus::Ok);
        check_block(2 * i as u32, &bufs[i]);
    }
}

/// Longest a test lets a watchdog look for an I/O its issuer executed
/// before it takes the issuer to be parked.
const WATCHDOG_LIMIT: Duration = Duration::from_secs(2);

/// Four reads hold every handle, their completions parked; `acquire` then
/// blocks until one of them is let go.
fn acquire_waits_for_in_flight_io_when_every_handle_is_busy(method: IoMethod) {
    let four_handles = AioConfig {
        io_max_concurrency: 4,
        ..config(method)
    };
    let (data, aio, mut session) = open_file(four_handles, 64, true);
    for _attempt in 0..100 {
        let mut bufs: Vec<AlignedBuf> = (0..5).map(|_| AlignedBuf::new(BLOCK_SIZE)).collect();
        // Hold every completion, so that all four handles stay busy.
        aio.injections()
            .attach(BEFORE_COMPLETE_SHARED, Injection::park());
        // Under worker, a read whose submission finds the queue's lock
        // taken is executed by the issuer, which then parks at the point
        // itself: the watchdog lets it go, and the attempt is repeated.
        let (started_all_tx, started_all_rx) = std::sync::mpsc::channel();
        let watchdog = {
            let aio = Arc::clone(&aio);
            std::thread::spawn(move || {
                let deadline = Instant::now() + WATCHDOG_LIMIT;
                while started_all_rx.try_recv().is_err() {
                    // The issuer's own read shows as "sync" once it is
                    // parked, unless the snapshot could not look at the
                    // handle then; starting four reads takes microseconds,
                    // so an issuer still not done at the deadline is parked
                    // too. Either way the attempt is repeated.
                    if aio.inflight().iter().any(|row| row.flags == "sync")
                        || Instant::now() >= deadline
                    {
                        aio.injections().detach(BEFORE_COMPLETE_SHARED);
                        return true;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                false
            })
        };
        let mut started = Vec::new();
        for (blkno, buf) in bufs.iter_mut().take(4).enumerate() {
            started.push(start_read(&mut session, &data.file, blkno as u64 * B, buf));
        }
        started_all_tx.send(()).unwrap();
        if watchdog.join().unwrap() {
            aio.injections().detach(BEFORE_COMPLETE_SHARED);
            for (wref, _) in started {
                session.wait(wref).unwrap();
            }
            continue;
        }
        assert!(
            session.acquire_nb().unwrap().is_none(),
            "no handle is free or completed"
        );
        let released = Arc::new(AtomicBool::new(false));
        let releaser = {
            let (aio, released) = (Arc::clone(&aio), Arc::clone(&released));
            std::thread::spawn(move || {
                // Under io_uring the session parks here itself once it
                // reaps in acquire; under worker the workers are parked
                // already, so give the session time to block in acquire.
                assert!(aio.injections().wait_until_parked(BEFORE_COMPLETE_SHARED));
                std::thread::sleep(Duration::from_millis(50));
                released.store(true, Ordering::SeqCst);
                aio.injections().detach(BEFORE_COMPLETE_SHARED);
            })
        };
        // Blocks until the oldest read completes, then reuses its handle.
        let token = session.acquire().unwrap();
        assert!(
            released.load(Ordering::SeqCst),
            "acquire returned while every handle was busy"
        );
        session.release(token).unwrap();
        releaser.join().unwrap();
        started.push(start_read(&mut session, &data.file, 4 * B, &mut bufs[4]));
        for (blkno, (wref, ret)) in started.into_iter().enumerate() {
            session.wait(wref).unwrap();
            assert_eq!(ret.take().unwrap().result.status, IoStatus::Ok);
            check_block(blkno as u32, &bufs[blkno]);
        }
        return;
    }
    panic!("the issuer executed a read itself in 100 tries");
}

fn a_reader_recycles_handles_when_it_keeps_more_reads_than_handles(method: IoMethod) {
    let four_handles = AioConfig {
        io_max_concurrency: 4,
        ..config(method)
    };
    let (data, aio, mut session) = open_file(four_handles, 64, true);
    let mut reader = BlockReader::new(Arc::clone(&aio), Arc::clone(&data.file), 16, 1);
    for blkno in 0..16 {
        reader.start(&mut session, blkno * B, 1).unwrap();
    }
    for blkno in 0..16 {
        let read = reader.next_completed(&mut session).unwrap().unwrap();
        assert_eq!(read.offset, blkno * B);
        check_block(blkno as u32, read.data);
    }
}

fn a_released_handle_forgets_its_callbacks_data_and_return(method: IoMethod) {
    let (data, _aio, mut session) = open_file(config(method), 4, true);
    let token = session.acquire().unwrap();
    let stale = IoReturnCell::default();
    session.set_return(&token, &stale).unwrap();
    session.set_data(&token, &[5]).unwrap();
    // A misaligned buffer is refused and the handle goes back.
    let mut buf = AlignedBuf::new(2 * BLOCK_SIZE);
    let bad = [IoVec::new(unsafe { buf.as_mut_ptr().add(512) }, BLOCK_SIZE)];
    // SAFETY: refused before any I/O starts.
    let err = unsafe { session.start_readv(token, &data.file, 0, &bad) }.unwrap_err();
    assert!(err.to_string().contains("not aligned"), "{err}");
    let mut page = AlignedBuf::new(BLOCK_SIZE);
    let ret = read_and_collect(&mut session, &data.file, B, &mut page);
    assert_eq!(ret.result.status, IoStatus::Ok);
    assert!(
        stale.take().is_none(),
        "the refused I/O's return cell got another I/O's result"
    );
}

fn tokens_must_be_the_sessions_current_handed_out_handle(method: IoMethod) {
    let data = data_file(4, false);
    let aio = start(&config(method));
    let mut a = aio.session().unwrap();
    let mut b = aio.session().unwrap();
    let token = a.acquire().unwrap();
    let wref = a.wait_ref(&token);
    assert!(matches!(
        a.wait(wref),
        Err(AioError::WaitOnUnstartedIo { .. })
    ));
    let mut buf = AlignedBuf::new(BLOCK_SIZE);
    let iov = [IoVec::new(buf.as_mut_ptr(), BLOCK_SIZE)];
    // SAFETY: refused before any I/O starts.
    let err = unsafe { b.start_readv(token, &data.file, 0, &iov) }.unwrap_err();
    assert!(matches!(err, AioError::StaleHandle { .. }), "{err}");
    // The refused token was consumed; A's handle is still handed out.
    assert_eq!(a.check_resources().len(), 1);
    let t = a.acquire().unwrap();
    a.release(t).unwrap();
}

fn an_io_that_is_not_whole_blocks_is_refused(method: IoMethod) {
    let (data, _aio, mut session) = open_file(config(method), 4, false);
    let token = session.acquire().unwrap();
    let mut buf = AlignedBuf::new(BLOCK_SIZE);
    let iov = [IoVec::new(buf.as_mut_ptr(), 4096)];
    // SAFETY: refused before any I/O starts.
    let err = unsafe { session.start_readv(token, &data.file, 0, &iov) }.unwrap_err();
    assert!(
        matches!(err, AioError::NotWholeBlocks { len: 4096 }),
        "{err}"
    );
    assert!(
        session.check_resources().is_empty(),
        "the refused handle went back"
    );
}

fn fsync_runs_through_the_method_and_reports_errors(method: IoMethod) {
    let (data, aio, mut session) = open_file(config(method), 4, true);
    for inject in [None, Some(-(libc::EIO as i64))] {
        if let Some(raw) = inject {
            rewrite_next_result(&aio, raw);
        }
        let token = session.acquire().unwrap();
        let wref = session.wait_ref(&token);
        let ret = IoReturnCell::default();
        session.set_return(&token, &ret).unwrap();
        session.start_fsync(token, &data.file).unwrap();
        session.wait(wref).unwrap();
        let ret = ret.take().unwrap();
        match inject {
            None => assert_eq!(aio.check(&ret).unwrap(), None),
            Some(_) => {
                let err = aio.check(&ret).unwrap_err();
                assert_eq!(
                    err.to_string(),
                    format!(
                        "could not fsync file \"{}\": Input/output error",
                        data.path.display()
                    )
                );
            }
        }
    }
    assert_eq!(aio.stats().row(method, IoOp::Fsync).unwrap().ios, 2);
}

// ---- short reads -----------------------------------------------------------

fn short_read_to_a_block_boundary_is_partial_not_an_error(method: IoMethod) {
    let (data, aio, mut session) = open_file(config(method), 8, false);
    rewrite_next_result(&aio, 2 * B as i64);
    let mut buf = AlignedBuf::new(3 * BLOCK_SIZE);
    let ret = read_and_collect(&mut session, &data.file, 0, &mut buf);
    assert_eq!(ret.result.status, IoStatus::Partial);
    assert_eq!(ret.result.result, 2, "two whole blocks arrived");
    let err = aio.check(&ret).unwrap_err();
    assert!(err.to_string().contains("read only 2 of 3 blocks"), "{err}");
}

fn short_read_under_one_block_is_an_error_naming_the_blocks(method: IoMethod) {
    let (data, aio, mut session) = open_file(config(method), 8, false);
    rewrite_next_result(&aio, 4096);
    let mut buf = AlignedBuf::new(2 * BLOCK_SIZE);
    let ret = read_and_collect(&mut session, &data.file, 3 * B, &mut buf);
    assert_eq!(ret.result.status, IoStatus::Error);
    let message = aio.check(&ret).unwrap_err().to_string();
    assert_eq!(
        message,
        format!(
            "could not read blocks 3..4 of file \"{}\": read only 4096 of 8192 bytes",
            data.path.display()
        )
    );
}

fn reading_past_the_end_reads_zero_bytes_and_is_an_error(method: IoMethod) {
    let (data, _aio, mut session) = open_file(config(method), 2, true);
    let mut buf = AlignedBuf::new(BLOCK_SIZE);
    let err = read_blocks(&mut session, &data.file, 2 * B, &mut buf).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "could not read block 2 of file \"{}\": read only 0 of 8192 bytes",
            data.path.display()
        )
    );
}

fn multi_block_reads_cut_to_one_or_two_blocks_are_completed_by_reissuing(method: IoMethod) {
    for cut_blocks in [1u64, 2] {
        let (data, aio, mut session) = open_file(config(method), 8, true);
        rewrite_next_result(&aio, (cut_blocks * B) as i64);
        let mut buf = AlignedBuf::new(5 * BLOCK_SIZE);
        read_blocks(&mut session, &data.file, 2 * B, &mut buf).unwrap();
        for (i, block) in buf.chunks_exact(BLOCK_SIZE).enumerate() {
            check_block(2 + i as u32, block);
        }
        let row = aio.stats().row(method, IoOp::Read).unwrap();
        assert_eq!(row.partial, 1);
        assert_eq!(row.ios, 2, "one cut read and one for the remainder");
    }
}

// ---- errors ----------------------------------------------------------------

fn eio_is_reported_with_its_text_and_the_next_read_succeeds(method: IoMethod) {
    let (data, aio, mut session) = open_file(config(method), 4, false);
    aio.injections().attach(
        BEFORE_COMPLETE_SHARED,
        Injection::rewrite_result(-(libc::EIO as i64)),
    );
    let mut buf = AlignedBuf::new(BLOCK_SIZE);
    let err = read_blocks(&mut session, &data.file, B, &mut buf).unwrap_err();
    assert_eq!(err.errno(), Some(libc::EIO));
    assert_eq!(
        err.to_string(),
        format!(
            "could not read block 1 of file \"{}\": Input/output error",
            data.path.display()
        )
    );
    aio.injections().detach(BEFORE_COMPLETE_SHARED);
    read_blocks(&mut session, &data.file, B, &mut buf).unwrap();
    check_block(1, &buf);
    assert_eq!(aio.stats().row(method, IoOp::Read).unwrap().errors, 1);
}

fn erofs_on_a_write_is_reported_with_its_text_and_the_next_write_succeeds(method: IoMethod) {
    let (data, aio, mut session) = open_file(config(method), 4, true);
    aio.injections().attach(
        BEFORE_COMPLETE_SHARED,
        Injection::rewrite_result(-(libc::EROFS as i64)),
    );
    let mut page = AlignedBuf::new(BLOCK_SIZE);
    page.fill(0xAB);
    let err = write_blocks(&mut session, &data.file, 2 * B, &page).unwrap_err();
    assert_eq!(err.errno(), Some(libc::EROFS));
    assert!(
        err.to_string().ends_with(": Read-only file system"),
        "{err}"
    );
    assert!(
        err.to_string()
            .starts_with("could not write block 2 of file"),
        "{err}"
    );
    aio.injections().detach(BEFORE_COMPLETE_SHARED);
    write_blocks(&mut session, &data.file, 2 * B, &page).unwrap();
    let mut back = AlignedBuf::new(BLOCK_SIZE);
    read_blocks(&mut session, &data.file, 2 * B, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0xAB));
}

fn a_worker_that_cannot_reopen_the_file_fails_only_that_io(method: IoMethod) {
    let (data, aio, mut session) = open_file(config(method), 8, false);
    // A read is run by the issuer instead when the queue lock is contended;
    // that read then passes no reopen, so try until a worker took one.
    let mut failed = None;
    for _ in 0..100 {
        aio.injections().attach(
            WORKER_AFTER_REOPEN,
            Injection::rewrite_result(-(libc::ENOENT as i64)).at_offset(3 * B),
        );
        let mut bad = AlignedBuf::new(BLOCK_SIZE);
        let mut good = AlignedBuf::new(BLOCK_SIZE);
        let (bad_ref, bad_ret) = start_read(&mut session, &data.file, 3 * B, &mut bad);
        let (good_ref, good_ret) = start_read(&mut session, &data.file, 4 * B, &mut good);
        session.wait(bad_ref).unwrap();
        session.wait(good_ref).unwrap();
        aio.injections().detach(WORKER_AFTER_REOPEN);
        assert_eq!(good_ret.take().unwrap().result.status, IoStatus::Ok);
        check_block(4, &good);
        let bad = bad_ret.take().unwrap();
        if bad.result.status == IoStatus::Error {
            failed = Some(bad);
            break;
        }
    }
    let bad = failed.expect("no read reached an I/O worker in 100 tries");
    let err = aio.check(&bad).unwrap_err();
    assert_eq!(err.errno(), Some(libc::ENOENT));
    assert!(
        err.to_string().ends_with("No such file or directory"),
        "{err}"
    );
    // The workers are still serving I/O.
    let mut buf = AlignedBuf::new(BLOCK_SIZE);
    read_blocks(&mut session, &data.file, 3 * B, &mut buf).unwrap();
    check_block(3, &buf);
}

// ---- closing files ---------------------------------------------------------

fn closing_a_relation_with_io_staged_lets_the_io_finish_then_closes_the_file(method: IoMethod) {
    let dir = temp_dir();
    let smgr = Arc::new(Smgr::new(dir.path(), true).unwrap());
    let rel = smgr.relation(16384);
    rel.create(Fork::Main).unwrap();
    let mut pages = AlignedBuf::new(4 * BLOCK_SIZE);
    pages.fill(7);
    rel.extend(Fork::Main, 0, &pages).unwrap();
    let aio = start(&config(method));
    let mut session = aio.session().unwrap();
    let loc = rel.locate(Fork::Main, 2).unwrap();
    let weak = Arc::downgrade(&loc.file);
    session.enter_batch().unwrap();
    let mut buf = AlignedBuf::new(BLOCK_SIZE);
    let (wref, ret) = start_read(&mut session, &loc.file, loc.offset, &mut buf);
    drop(loc);
    rel.close();
    session.exit_batch();
    session.wait(wref).unwrap();
    assert_eq!(ret.take().unwrap().result.status, IoStatus::Ok);
    assert!(buf.iter().all(|&b| b == 7));
    assert!(
        weak.upgrade().is_none(),
        "the file is closed once its last I/O is collected"
    );
}

fn dropping_a_relation_with_io_in_flight_lets_the_io_finish(method: IoMethod) {
    let dir = temp_dir();
    let smgr = Arc::new(Smgr::new(dir.path(), false).unwrap());
    let rel = Arc::new(smgr.relation(16385));
    rel.create(Fork::Main).unwrap();
    rel.extend(Fork::Main, 0, &vec![9u8; 2 * BLOCK_SIZE])
        .unwrap();
    let aio = start(&config(method));
    aio.injections()
        .attach(BEFORE_COMPLETE_SHARED, Injection::park().times(1));
    let loc = rel.locate(Fork::Main, 1).unwrap();
    let weak = Arc::downgrade(&loc.file);
    let reader = {
        let aio = Arc::clone(&aio);
        std::thread::spawn(move || {
            let mut session = aio.session().unwrap();
            let mut buf = AlignedBuf::new(BLOCK_SIZE);
            let (wref, ret) = start_read(&mut session, &loc.file, loc.offset, &mut buf);
            // Only the I/O itself holds the file from here on.
            drop(loc);
            session.wait(wref).unwrap();
            let ret = ret.take().unwrap();
            (ret.result.status, buf.iter().all(|&b| b == 9))
        })
    };
    assert!(aio.injections().wait_until_parked(BEFORE_COMPLETE_SHARED));
    rel.unlink().unwrap();
    assert!(!dir.path().join("16385").exists());
    assert!(
        weak.upgrade().is_some(),
        "the in-flight read keeps its file open"
    );
    aio.injections().release(BEFORE_COMPLETE_SHARED);
    let (status, contents_ok) = reader.join().unwrap();
    assert_eq!(status, IoStatus::Ok);
    assert!(contents_ok);
    assert!(weak.upgrade().is_none());
}

// ---- foreign completion ----------------------------------------------------

/// Under io_uring nothing but a waiter reaps, so B completes A's read by
/// reaping A's ring; under worker a worker completes it and B only waits,
/// and sync completes it in A.
fn another_thread_completes_a_read_its_issuer_never_waits_for(method: IoMethod) {
    let data = data_file(8, true);
    let aio = start(&config(method));
    let issued = Arc::new(Barrier::new(2));
    let done = Arc::new(Barrier::new(2));
    let buf = Arc::new(parking_lot::Mutex::new(AlignedBuf::new(2 * BLOCK_SIZE)));
    let (tx, rx) = std::sync::mpsc::channel();
    let issuer = {
        let (aio, file, issued, done, buf) = (
            Arc::clone(&aio),
            Arc::clone(&data.file),
            Arc::clone(&issued),
            Arc::clone(&done),
            Arc::clone(&buf),
        );
        std::thread::spawn(move || {
            let mut session = aio.session().unwrap();
            let (wref, _ret) = start_read(&mut session, &file, 5 * B, &mut buf.lock());
            tx.send(wref).unwrap();
            issued.wait();
            // Never waits for its read; keeps its session until told.
            done.wait();
        })
    };
    let wref = rx.recv().unwrap();
    issued.wait();
    let mut other = aio.session().unwrap();
    other.wait(wref).unwrap();
    assert!(aio.is_done(wref));
    check_block(5, &buf.lock()[..BLOCK_SIZE]);
    check_block(6, &buf.lock()[BLOCK_SIZE..]);
    done.wait();
    issuer.join().unwrap();
}

/// A issues a read and ends its session; B then waits for the read and it
/// completes (for io_uring, B reaps A's ring). The completion is held at the
/// injection point until A's session is gone.
fn a_read_is_completed_by_another_thread_after_its_session_ended(method: IoMethod) {
    let data = data_file(8, true);
    let aio = start(&config(method));
    for _attempt in 0..100 {
        aio.injections()
            .attach(BEFORE_COMPLETE_SHARED, Injection::park().times(1));
        let buf = Arc::new(parking_lot::Mutex::new(AlignedBuf::new(BLOCK_SIZE)));
        let (tx, rx) = std::sync::mpsc::channel();
        let issuer = {
            let (aio, file, buf) = (Arc::clone(&aio), Arc::clone(&data.file), Arc::clone(&buf));
            std::thread::spawn(move || {
                let mut session = aio.session().unwrap();
                let started = start_read(&mut session, &file, 7 * B, &mut buf.lock());
                drop(session);
                tx.send(started).unwrap();
            })
        };
        let waiter = {
            let aio = Arc::clone(&aio);
            std::thread::spawn(move || {
                let (wref, ret): (WaitRef, IoReturnCell) = rx.recv().unwrap();
                let mut session = aio.session().unwrap();
                session.wait(wref).unwrap();
                (wref, ret)
            })
        };
        assert!(aio.injections().wait_until_parked(BEFORE_COMPLETE_SHARED));
        // The sync method, or a worker queue found busy, runs the read in
        // the issuer, which is then parked inside start with its session
        // still open: release it and try again.
        let issuer_parked =
            !issuer.is_finished() && aio.inflight().iter().any(|row| row.flags == "sync");
        if method != IoMethod::Sync && issuer_parked {
            aio.injections().release(BEFORE_COMPLETE_SHARED);
            issuer.join().unwrap();
            waiter.join().unwrap();
            continue;
        }
        if method == IoMethod::Sync {
            aio.injections().release(BEFORE_COMPLETE_SHARED);
            issuer.join().unwrap();
        } else {
            // The issuer's session ends while its read is held.
            issuer.join().unwrap();
            aio.injections().release(BEFORE_COMPLETE_SHARED);
        }
        let (wref, ret) = waiter.join().unwrap();
        assert!(aio.is_done(wref));
        check_block(7, &buf.lock());
        // The next session prefers the slot with the orphaned handle and
        // collects it, result and all.
        let mut next = aio.session().unwrap();
        next.collect_completed();
        assert_eq!(
            ret.take().expect("orphan collected").result.status,
            IoStatus::Ok
        );
        return;
    }
    panic!("the read never reached the method's own executor in 100 tries");
}

fn a_wait_reference_whose_generation_moved_on_returns_at_once(method: IoMethod) {
    let (data, aio, mut session) = open_file(config(method), 8, true);
    let mut buf = AlignedBuf::new(BLOCK_SIZE);
    let (old, _) = start_read(&mut session, &data.file, 0, &mut buf);
    session.wait(old).unwrap();
    // The same handle (idle handles are a stack) now carries a read that
    // stays in flight: its completion is held at the injection point.
    let token = session.acquire().unwrap();
    let newer = session.wait_ref(&token);
    assert_eq!(newer.handle_index(), old.handle_index());
    assert_ne!(newer.generation(), old.generation());
    session.release(token).unwrap();
    if method == IoMethod::Sync {
        // Sync I/O never stays in flight; the generation check is all.
        assert!(aio.is_done(old));
        return;
    }
    aio.injections()
        .attach(BEFORE_COMPLETE_SHARED, Injection::park().times(1));
    let mut buf2 = AlignedBuf::new(BLOCK_SIZE);
    let (held, ret) = start_read(&mut session, &data.file, B, &mut buf2);
    assert_eq!(held.handle_index(), old.handle_index());
    let other = {
        let aio = Arc::clone(&aio);
        std::thread::spawn(move || {
            // For io_uring, a waiter must reap the ring to reach the point.
            aio.wait(held);
        })
    };
    assert!(aio.injections().wait_until_parked(BEFORE_COMPLETE_SHARED));
    assert!(!aio.is_done(held));
    let started = Instant::now();
    aio.wait(old);
    assert!(aio.is_done(old));
    assert!(started.elapsed() < Duration::from_secs(5));
    aio.injections().release(BEFORE_COMPLETE_SHARED);
    other.join().unwrap();
    session.wait(held).unwrap();
    assert_eq!(ret.take().unwrap().result.status, IoStatus::Ok);
    check_block(1, &buf2);
}

// ---- observability ---------------------------------------------------------

fn the_inflight_view_shows_a_held_io_and_counters_outlive_the_session(method: IoMethod) {
    let data = data_file(8, true);
    let aio = start(&config(method));
    aio.injections()
        .attach(BEFORE_COMPLETE_SHARED, Injection::park().times(1));
    let aio2 = Arc::clone(&aio);
    let file = Arc::clone(&data.file);
    let t = std::thread::spawn(move || {
        let mut session = aio2.session().unwrap();
        let mut buf = AlignedBuf::new(2 * BLOCK_SIZE);
        read_and_collect(&mut session, &file, 2 * B, &mut buf);
    });
    assert!(aio.injections().wait_until_parked(BEFORE_COMPLETE_SHARED));
    let rows = aio.inflight();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[0];
    assert_eq!(row.state, "submitted");
    assert_eq!((row.op, row.offset, row.length), ("read", 2 * B, 2 * B));
    assert_eq!(
        row.target,
        format!("blocks 2..3 of file \"{}\"", data.path.display())
    );
    assert_eq!(row.result, None);
    // Under worker the issuer runs the read itself ("sync") when it finds
    // the queue's lock taken.
    let expected_flags: &[&str] = match method {
        IoMethod::Sync => &["sync"],
        IoMethod::Worker => &["direct", "sync"],
        IoMethod::IoUring => &["direct"],
    };
    assert!(
        expected_flags.contains(&row.flags.as_str()),
        "{}",
        row.flags
    );
    aio.injections().release(BEFORE_COMPLETE_SHARED);
    t.join().unwrap();
    assert!(aio.inflight().is_empty());
    let stats = aio.stats().row(method, IoOp::Read).unwrap();
    assert_eq!((stats.ios, stats.bytes), (1, 2 * B));
    assert_eq!(stats.latency_us_buckets.iter().sum::<u64>(), 1);
}

/// An I/O its issuer asked to run itself (`set_synchronous`, as the WAL
/// does its buffered writes) is done when its start returns, for every
/// method and inside a batch too, and completes as any other: its result
/// in its return cell, its data read. The batch's other I/O waits for the
/// batch's end as before.
fn a_synchronous_io_is_done_when_its_start_returns(method: IoMethod) {
    let (data, aio, mut session) = open_file(config(method), 4, false);
    session.enter_batch().unwrap();
    let mut held = AlignedBuf::new(BLOCK_SIZE);
    let (held_ref, held_ret) = start_read(&mut session, &data.file, 2 * B, &mut held);
    let mut buf = AlignedBuf::new(BLOCK_SIZE);
    let token = session.acquire().unwrap();
    let wref = session.wait_ref(&token);
    let ret = IoReturnCell::default();
    session.set_return(&token, &ret).unwrap();
    session.set_synchronous(&token).unwrap();
    let iov = [IoVec::new(buf.as_mut_ptr(), buf.len())];
    // SAFETY: the read is done (asserted below) before buf is touched.
    unsafe { session.start_readv(token, &data.file, B, &iov) }.unwrap();
    assert!(aio.is_done(wref), "a synchronous I/O ran at its start");
    let held_back = usize::from(method != IoMethod::Sync);
    assert_eq!(session.staged_count(), held_back, "the batch's read waits");
    session.wait(wref).unwrap();
    assert_eq!(ret.take().unwrap().result.status, IoStatus::Ok);
    check_block(1, &buf);
    session.exit_batch();
    session.wait(held_ref).unwrap();
    assert_eq!(held_ret.take().unwrap().result.status, IoStatus::Ok);
    check_block(2, &held);
}

fn debug_io_latency_delays_every_io(method: IoMethod) {
    const LATENCY: Duration = Duration::from_millis(20);
    let slow = AioConfig {
        debug_io_latency_us: LATENCY.as_micros() as u64,
        ..config(method)
    };
    let (data, _aio, mut session) = open_file(slow, 4, true);
    let mut buf = AlignedBuf::new(BLOCK_SIZE);
    let started = Instant::now();
    read_blocks(&mut session, &data.file, B, &mut buf).unwrap();
    assert!(
        started.elapsed() >= LATENCY,
        "read: {:?}",
        started.elapsed()
    );
    check_block(1, &buf);
    let started = Instant::now();
    write_blocks(&mut session, &data.file, B, &buf).unwrap();
    assert!(
        started.elapsed() >= LATENCY,
        "write: {:?}",
        started.elapsed()
    );
}

// ---- stress ----------------------------------------------------------------

fn stress(method: IoMethod, direct: bool) {
    const SESSIONS: u64 = 8;
    const READS_PER_SESSION: usize = 2000;
    let data = data_file(1024, direct);
    let aio = start(&config(method));
    let threads: Vec<_> = (0..SESSIONS)
        .map(|seed| {
            let (aio, file, nblocks) = (Arc::clone(&aio), Arc::clone(&data.file), data.nblocks);
            std::thread::spawn(move || {
                let mut rng = XorShift::new(0x9E37_79B9_7F4A_7C15 ^ (seed + 1));
                let mut session = aio.session().unwrap();
                let mut reader = BlockReader::new(Arc::clone(&aio), file, 8, 4);
                let mut expected = std::collections::VecDeque::new();
                let mut verified = 0;
                while verified < READS_PER_SESSION {
                    while reader.has_room() {
                        let blocks = 1 + rng.below(4) as u32;
                        let first = rng.below((nblocks - blocks) as u64) as u32;
                        reader
                            .start(&mut session, first as u64 * B, blocks as usize)
                            .unwrap();
                        expected.push_back(first);
                    }
                    let read = reader.next_completed(&mut session).unwrap().unwrap();
                    let first = expected.pop_front().unwrap();
                    for (i, block) in read.data.chunks_exact(BLOCK_SIZE).enumerate() {
                        check_block(first + i as u32, block);
                    }
                    verified += 1;
                }
                reader.drain(&mut session);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let row = aio.stats().row(method, IoOp::Read).unwrap();
    assert!(row.ios >= SESSIONS * READS_PER_SESSION as u64);
    assert_eq!(row.errors, 0);
}

fn stress_eight_sessions_buffered(method: IoMethod) {
    stress(method, false);
}

fn stress_eight_sessions_direct(method: IoMethod) {
    stress(method, true);
}

for_each_method!(
    a_leaked_handle_is_reported_and_released,
    a_second_handed_out_handle_is_an_error_and_acquiring_after_it_works,
    a_batch_left_open_is_reported_and_its_io_submitted,
    staged_ios_are_held_until_the_batch_ends,
    a_reader_recycles_handles_when_it_keeps_more_reads_than_handles,
    a_released_handle_forgets_its_callbacks_data_and_return,
    tokens_must_be_the_sessions_current_handed_out_handle,
    an_io_that_is_not_whole_blocks_is_refused,
    fsync_runs_through_the_method_and_reports_errors,
    short_read_to_a_block_boundary_is_partial_not_an_error,
    short_read_under_one_block_is_an_error_naming_the_blocks,
    reading_past_the_end_reads_zero_bytes_and_is_an_error,
    multi_block_reads_cut_to_one_or_two_blocks_are_completed_by_reissuing,
    eio_is_reported_with_its_text_and_the_next_read_succeeds,
    erofs_on_a_write_is_reported_with_its_text_and_the_next_write_succeeds,
    closing_a_relation_with_io_staged_lets_the_io_finish_then_closes_the_file,
    dropping_a_relation_with_io_in_flight_lets_the_io_finish,
    another_thread_completes_a_read_its_issuer_never_waits_for,
    a_read_is_completed_by_another_thread_after_its_session_ended,
    a_wait_reference_whose_generation_moved_on_returns_at_once,
    the_inflight_view_shows_a_held_io_and_counters_outlive_the_session,
    debug_io_latency_delays_every_io,
    a_synchronous_io_is_done_when_its_start_returns,
    stress_eight_sessions_buffered,
    stress_eight_sessions_direct;
    not sync:
    // A sync read completes before its handle could be waited for.
    acquire_waits_for_in_flight_io_when_every_handle_is_busy;
    worker only:
    // Only I/O workers reopen files.
    a_worker_that_cannot_reopen_the_file_fails_only_that_io,
);
