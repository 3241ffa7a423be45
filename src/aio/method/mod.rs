//! The asynchronous execution methods. `sync` needs no code of its own: the
//! issuer executes at submission (`AioShared::submit`).

pub(crate) mod uring;
pub(crate) mod worker;
