//! Progress of long statements (COPY FROM, VACUUM), for a front end that
//! shows it: the `aiostore` command draws a bar on a terminal. The
//! executor reports; it does not know how, or whether, it is shown.

/// What a task counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressUnit {
    /// Bytes of input read (COPY FROM).
    Bytes,
    /// Blocks of a table processed (VACUUM).
    Blocks,
    /// Rows processed (CREATE INDEX).
    Rows,
}

/// Receives the progress of one task at a time.
pub trait Progress {
    /// A task starts; `total` units of work, if known (COPY FROM STDIN
    /// does not know how much will come).
    fn begin(&mut self, task: &str, total: Option<u64>, unit: ProgressUnit);
    /// `done` units of the task are finished.
    fn update(&mut self, done: u64);
    /// The task is over, finished or failed.
    fn end(&mut self);
}

/// Shows nothing: for callers that did not ask for progress.
pub struct NoProgress;

impl Progress for NoProgress {
    fn begin(&mut self, _: &str, _: Option<u64>, _: ProgressUnit) {}
    fn update(&mut self, _: u64) {}
    fn end(&mut self) {}
}

/// Ends the task when dropped, so that an error leaves no bar behind.
pub(crate) struct Task<'a> {
    progress: &'a mut dyn Progress,
}

impl<'a> Task<'a> {
    pub(crate) fn begin(
        progress: &'a mut dyn Progress,
        task: &str,
        total: Option<u64>,
        unit: ProgressUnit,
    ) -> Task<'a> {
        progress.begin(task, total, unit);
        Task { progress }
    }

    pub(crate) fn update(&mut self, done: u64) {
        self.progress.update(done);
    }
}

impl Drop for Task<'_> {
    fn drop(&mut self) {
        self.progress.end();
    }
}
