//! The data directory's lock against a forked child holding a copy of
//! its descriptor. A test binary of its own: its fork copies every
//! descriptor of the process, so it would hold other tests' locks too.

mod common;

use aiostore::config::IoMethod;
use aiostore::database::Database;
use common::temp_dir;

/// A database closed while a forked child still holds a copy of its
/// directory's descriptor (any thread starting a program forks, and the
/// child holds every descriptor until it execs) opens again once the
/// child lets go, rather than failing as in use by a process that has
/// gone.
#[test]
fn a_database_reopens_while_a_forked_child_still_holds_the_old_lock() {
    for method in [IoMethod::Sync, IoMethod::Worker, IoMethod::IoUring] {
        let dir = temp_dir();
        let path = dir.path().join("data");
        Database::init(&path).unwrap();
        let settings = [format!("io_method={}", method.name())];
        let db = Database::open(&path, &settings).unwrap();
        // SAFETY: the child only sleeps and exits, both async-signal-safe.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork: {}", std::io::Error::last_os_error());
        if child == 0 {
            unsafe {
                libc::usleep(150_000);
                libc::_exit(0);
            }
        }
        drop(db);
        let reopened = Database::open(&path, &settings);
        let mut status = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        drop(reopened.unwrap_or_else(|e| panic!("{method:?}: reopening: {e}")));
    }
}
