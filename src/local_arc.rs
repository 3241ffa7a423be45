//! [`LocalArc`]: one session's handle on a shared `Arc`.
//!
//! Every clone or drop of an `Arc` writes its count, and the count of an
//! object every session uses (the database, the buffer pool) is then one
//! cache line that every session's clones write in turn: on 2 cores at
//! 8 pgbench clients, `perf` put about a tenth of the server's time on
//! such counts, each statement paying for the line's trip from the other
//! core, and for the reads of the fields beside it. A session clones its
//! own handle instead: the handle's count is a line only that session
//! writes, and the shared count is written once, when the handle is made.

use std::ops::Deref;
use std::sync::Arc;

/// A handle on `Arc<T>` whose clones write only the handle's own count
/// (see the module comment). It dereferences to the shared `Arc`, so it
/// goes wherever a `&Arc<T>` or a `&T` is wanted.
#[derive(Debug)]
// The second allocation is the point: it holds the count the session
// writes.
#[allow(clippy::redundant_allocation)]
pub struct LocalArc<T>(Arc<Arc<T>>);

impl<T> LocalArc<T> {
    /// A new handle on `shared`: one write of its count.
    pub fn new(shared: &Arc<T>) -> LocalArc<T> {
        LocalArc(Arc::new(Arc::clone(shared)))
    }
}

impl<T> Clone for LocalArc<T> {
    fn clone(&self) -> LocalArc<T> {
        LocalArc(Arc::clone(&self.0))
    }
}

impl<T> Deref for LocalArc<T> {
    type Target = Arc<T>;

    fn deref(&self) -> &Arc<T> {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_of_a_handle_leave_the_shared_count_alone() {
        let shared = Arc::new(5);
        let handle = LocalArc::new(&shared);
        assert_eq!(Arc::strong_count(&shared), 2);
        let clones: Vec<_> = (0..10).map(|_| handle.clone()).collect();
        assert_eq!(Arc::strong_count(&shared), 2, "the handle's count only");
        assert!(clones.iter().all(|c| ***c == 5));
        drop(clones);
        drop(handle);
        assert_eq!(Arc::strong_count(&shared), 1);
    }
}
