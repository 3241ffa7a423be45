//! The PostgreSQL wire-protocol server behind `aiostore serve`
//! (DESIGN.md §1, a front end beside the CLI): `psql`, `pgbench` and
//! ordinary drivers connect to it as they do to PostgreSQL.
//!
//! # Shape
//!
//! One process holds the data directory, its buffer pool and its AIO
//! workers; every connection is a thread of it with a [`Session`] of its
//! own, so sessions share the pool, join each other's reads and complete
//! each other's I/O as the engine intends. The threads block on their
//! sockets: a statement runs on its connection's thread, and its rows go
//! out as the executor produces them (see `wire` for how memory stays
//! bounded when a client reads slowly).
//!
//! ```text
//! listeners (TCP on listen_addresses:port, Unix .s.PGSQL.<port>)
//!     │ accept, at most max_connections
//!     ▼
//! connection thread: startup ─▶ ReadyForQuery ─▶ Query | Parse/Bind/Describe/Execute/Sync
//!     │  Session (its transaction, settings)       │
//!     └──────────────── sql::execute_simple_query / sql::prepare, execute_prepared
//! ```
//!
//! `pgwire` supplies the messages' encoding; the protocol's states
//! (startup, simple and extended query, COPY both ways, error recovery
//! to the next Sync) are in `connection`.
//!
//! # Shutdown
//!
//! SIGTERM or SIGINT (or [`ServerHandle::shutdown`]) stops accepting,
//! ends every connection (a transaction in progress rolls back, as when
//! its client disconnects), waits for their threads, and returns; closing
//! the database then writes the shutdown checkpoint.
//!
//! # Authentication
//!
//! Between the startup message and AuthenticationOk a connection is
//! authenticated (`auth`): SCRAM-SHA-256 over TCP, `trust` over the Unix
//! socket (unless `unix_socket_authentication` says scram-sha-256), against
//! the roles in the catalog (`catalog::roles`). A failure is answered
//! after [`AUTH_FAILURE_DELAY`], alike for a wrong password, an unknown
//! role and a role without a password.
//!
//! # TLS
//!
//! With `ssl = on` a TCP client that sends an SSLRequest gets `S` and a
//! TLS handshake (`tls`, rustls over the blocking socket); without it,
//! `N`, and the client goes on in the clear or gives up.
//!
//! # Not yet
//!
//! Privileges: any role that logs in may do anything.

mod auth;
pub mod client;
mod connection;
pub mod tls;
pub mod values;
mod wire;

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;
use thiserror::Error;

use crate::database::{Database, Session};
pub use auth::{Method as AuthMethod, AUTH_FAILURE_DELAY, MOCK_SECRET_FILE};
use wire::Stream;

pub use crate::catalog::DATABASE_NAME;
/// The version reported to clients as `server_version`: the PostgreSQL
/// release whose protocol, catalog queries and behaviour we follow.
pub const SERVER_VERSION: &str = concat!("15.0 (aiostore ", env!("CARGO_PKG_VERSION"), ")");
/// How long the accept loop waits for a connection before it looks at
/// the shutdown flag again.
const ACCEPT_POLL: Duration = Duration::from_millis(200);
/// Sessions the database keeps for itself (checkpointer, background
/// writer, WAL writer, AIO workers' completions) beyond the connections:
/// `max_sessions` must leave this many.
pub const RESERVED_SESSIONS: usize = 8;

/// What keeps the server from starting.
#[derive(Debug, Error)]
pub enum ServerError {
    #[error("could not listen on {address}: {source}; is another server running on this port? Choose another with -c port=N")]
    Listen {
        address: String,
        source: std::io::Error,
    },
    #[error("could not resolve listen address \"{address}\": {source}; fix listen_addresses")]
    Resolve {
        address: String,
        source: std::io::Error,
    },
    #[error("the server would listen nowhere: listen_addresses and unix_socket_directories are both empty")]
    NoListeners,
    #[error("max_connections ({connections}) needs max_sessions of at least {needed} ({RESERVED_SESSIONS} more, for the database's own sessions); set -c max_sessions={needed}")]
    TooFewSessions { connections: usize, needed: usize },
    #[error("could not watch for SIGTERM and SIGINT: {0}")]
    Signals(std::io::Error),
    #[error("waiting for connections failed: {0}")]
    Poll(std::io::Error),
    #[error("could not read or write the authentication secret {MOCK_SECRET_FILE} in the data directory: {0}")]
    Secret(std::io::Error),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
}

/// A connection's entry in the server's table, for cancel requests and
/// shutdown.
struct ConnectionEntry {
    secret: i32,
    /// Set by a cancel request for the statement running now.
    cancel: Arc<AtomicBool>,
    /// Another handle on the connection's socket, to end it at shutdown.
    stream: Stream,
}

/// What the listeners and connections share.
struct Shared {
    db: Arc<Database>,
    max_connections: usize,
    shutdown: Arc<AtomicBool>,
    next_pid: AtomicI32,
    connections: Mutex<HashMap<i32, ConnectionEntry>>,
    /// Connections accepted and not yet through startup, by accept
    /// order: shut down at shutdown too, and at most max_connections.
    starting: Mutex<HashMap<u64, Stream>>,
    /// Connection threads that panicked (each is logged; tests read it).
    panics: std::sync::atomic::AtomicU64,
    /// How Unix-socket connections authenticate (TCP ones always use
    /// SCRAM-SHA-256; see `auth`).
    unix_socket_auth: auth::Method,
    /// What mock salts are derived from (see `auth`).
    mock_secret: [u8; auth::MOCK_SECRET_BYTES],
    /// With `ssl = on`: the certificate and key TCP connections are
    /// encrypted with when they ask, and the certificate's channel-binding
    /// data (see `tls`).
    tls: Option<tls::ServerTls>,
}

impl Shared {
    /// Registers a new connection, unless there are max_connections
    /// already. Returns its process id, secret key and cancel flag.
    fn register(&self, stream: &Stream) -> Option<(i32, i32, Arc<AtomicBool>)> {
        let mut connections = self.connections.lock();
        // Checked under the lock the shutdown sweep takes after setting
        // the flag: a connection is either swept or never registered.
        if connections.len() >= self.max_connections || self.shutdown.load(Ordering::SeqCst) {
            return None;
        }
        let pid = self.next_pid.fetch_add(1, Ordering::Relaxed);
        let secret = random_secret();
        let cancel = Arc::new(AtomicBool::new(false));
        let stream = stream.try_clone().ok()?;
        connections.insert(
            pid,
            ConnectionEntry {
                secret,
                cancel: Arc::clone(&cancel),
                stream,
            },
        );
        Some((pid, secret, cancel))
    }

    /// Notes connection `id` as starting, unless max_connections are
    /// starting already or the server is shutting down; the guard
    /// forgets it.
    fn starting(self: &Arc<Self>, id: u64, stream: &Stream) -> Option<Starting> {
        let mut starting = self.starting.lock();
        if starting.len() >= self.max_connections || self.shutdown.load(Ordering::SeqCst) {
            return None;
        }
        starting.insert(id, stream.try_clone().ok()?);
        Some(Starting {
            shared: Arc::clone(self),
            id,
        })
    }

    fn unregister(&self, pid: i32) {
        self.connections.lock().remove(&pid);
    }

    /// A cancel request: sets the connection's flag if the key matches
    /// (a wrong key is ignored without a word, as PostgreSQL does).
    fn cancel(&self, pid: i32, secret: i32) {
        if let Some(entry) = self.connections.lock().get(&pid) {
            if entry.secret == secret {
                entry.cancel.store(true, Ordering::SeqCst);
                // A statement waiting for another transaction looks now.
                self.db.txn().wake_waiters();
            }
        }
    }

    fn connection_count(&self) -> usize {
        self.connections.lock().len()
    }

    fn session(&self) -> Result<Session, crate::database::DbError> {
        self.db.session()
    }
}

/// A connection in startup; dropping it (startup over, either way)
/// forgets it.
struct Starting {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for Starting {
    fn drop(&mut self) {
        self.shared.starting.lock().remove(&self.id);
    }
}

/// A secret key for cancel requests that another client cannot guess.
fn random_secret() -> i32 {
    let mut bytes = [0u8; 4];
    // getrandom(2) never fails for 4 bytes once the pool is initialised;
    // if it did, the time's low bits still differ per connection.
    if crate::catalog::scram::fill_random(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        bytes = nanos.to_ne_bytes();
    }
    i32::from_ne_bytes(bytes)
}

/// Where the server listens.
enum Listener {
    Tcp(TcpListener),
    Unix {
        listener: UnixListener,
        path: PathBuf,
    },
}

impl Listener {
    fn accept(&self) -> std::io::Result<Stream> {
        Ok(match self {
            Listener::Tcp(l) => {
                let (s, _) = l.accept()?;
                // Rows go out in blocks already; small messages
                // (ReadyForQuery) must not wait for Nagle.
                s.set_nodelay(true)?;
                // A peer that vanished (its host down, no FIN) is found
                // by keepalive, which frees its slot and its locks, as
                // PostgreSQL's sockets do.
                rustix::net::sockopt::set_socket_keepalive(&s, true)?;
                Stream::Tcp(s)
            }
            Listener::Unix { listener, .. } => Stream::Unix(listener.accept()?.0),
        })
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix { path, .. } = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A running server, for tests and embedders: where it listens, and how
/// to stop it.
pub struct ServerHandle {
    shutdown: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pub tcp_addresses: Vec<SocketAddr>,
    pub unix_sockets: Vec<PathBuf>,
    shared: Arc<Shared>,
}

impl ServerHandle {
    /// How many connection threads panicked (a bug: each is logged, and
    /// only its own connection is lost).
    pub fn panics(&self) -> u64 {
        self.shared.panics.load(Ordering::SeqCst)
    }

    /// Connections through startup now.
    pub fn connections(&self) -> usize {
        self.shared.connection_count()
    }

    /// The TCP port (0 if it listens on none).
    pub fn port(&self) -> u16 {
        self.tcp_addresses.first().map_or(0, |a| a.port())
    }

    /// Stops accepting, ends every connection and waits for them.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shutdown.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                log::error!("the server's accept thread panicked");
            }
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts serving `db` on the addresses its settings name, in a thread of
/// its own; returns once the listeners are bound.
pub fn start(db: Arc<Database>) -> Result<ServerHandle, ServerError> {
    let settings = db.settings();
    let max_connections = settings.max_connections();
    let needed = max_connections + RESERVED_SESSIONS;
    if settings.max_sessions() < needed {
        return Err(ServerError::TooFewSessions {
            connections: max_connections,
            needed,
        });
    }
    // Before binding: a server that cannot serve TLS as asked does not
    // start at all (rather than refusing each client that asks).
    let tls = if settings.ssl() {
        Some(tls::server_config(
            db.dir(),
            settings.ssl_cert_file(),
            settings.ssl_key_file(),
        )?)
    } else {
        None
    };
    let listeners = bind(
        &settings.listen_addresses(),
        settings.port(),
        &settings.unix_socket_directories(),
    )?;
    let tcp_addresses = listeners
        .iter()
        .filter_map(|l| match l {
            Listener::Tcp(t) => t.local_addr().ok(),
            Listener::Unix { .. } => None,
        })
        .collect();
    let unix_sockets = listeners
        .iter()
        .filter_map(|l| match l {
            Listener::Unix { path, .. } => Some(path.clone()),
            Listener::Tcp(_) => None,
        })
        .collect();
    let mock_secret = auth::mock_secret(db.dir()).map_err(ServerError::Secret)?;
    let unix_socket_auth = if settings.unix_socket_password() {
        auth::Method::ScramSha256
    } else {
        auth::Method::Trust
    };
    let shutdown = Arc::new(AtomicBool::new(false));
    let shared = Arc::new(Shared {
        db,
        max_connections,
        shutdown: Arc::clone(&shutdown),
        // Distinct from the process id's neighbours' in practice; any
        // value works, the secret key is what guards a cancel.
        next_pid: AtomicI32::new((std::process::id() % 100_000) as i32 * 1000 + 1),
        connections: Mutex::new(HashMap::new()),
        starting: Mutex::new(HashMap::new()),
        panics: std::sync::atomic::AtomicU64::new(0),
        unix_socket_auth,
        mock_secret,
        tls,
    });
    let panics = Arc::clone(&shared);
    let thread = std::thread::Builder::new()
        .name("aiostore-postmaster".into())
        .spawn(move || accept_loop(&shared, listeners))
        .map_err(ServerError::Poll)?;
    Ok(ServerHandle {
        shutdown,
        thread: Some(thread),
        tcp_addresses,
        unix_sockets,
        shared: panics,
    })
}

/// `aiostore serve`: serves `db` until SIGTERM or SIGINT, then shuts down
/// cleanly. `on_ready` is told where it listens.
pub fn serve(db: Arc<Database>, on_ready: impl FnOnce(&ServerHandle)) -> Result<(), ServerError> {
    let handle = start(db)?;
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, Arc::clone(&stop)).map_err(ServerError::Signals)?;
    }
    // The CLI finds the server here (and only while it runs).
    let dir = handle.shared.db.dir().to_path_buf();
    if let Err(e) = client::ServerFile::write(
        &dir,
        handle.port(),
        handle.unix_sockets.first().map(PathBuf::as_path),
    ) {
        log::warn!(
            "could not write {}: {e}; `aiostore sql` and `aiostore shell` will not find the server",
            client::SERVER_FILE
        );
    }
    on_ready(&handle);
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(ACCEPT_POLL);
    }
    log::info!("received a shutdown signal: ending connections");
    client::ServerFile::remove(&dir);
    handle.shutdown();
    Ok(())
}

/// Binds the TCP and Unix listeners.
fn bind(
    addresses: &[String],
    port: u16,
    socket_dirs: &[PathBuf],
) -> Result<Vec<Listener>, ServerError> {
    let mut listeners = Vec::new();
    for address in addresses {
        let hosts: Vec<SocketAddr> = match address.as_str() {
            "*" => vec![SocketAddr::from(([0, 0, 0, 0], port))],
            "localhost" => vec![SocketAddr::from(([127, 0, 0, 1], port))],
            host => (host, port)
                .to_socket_addrs()
                .map_err(|source| ServerError::Resolve {
                    address: host.to_string(),
                    source,
                })?
                .collect(),
        };
        for addr in hosts {
            let listener = TcpListener::bind(addr).map_err(|source| ServerError::Listen {
                address: addr.to_string(),
                source,
            })?;
            listeners.push(Listener::Tcp(listener));
        }
    }
    // With port 0 the system picked the TCP port; the socket is named
    // after it, as a client would look for it.
    let port = match listeners.first() {
        Some(Listener::Tcp(t)) if port == 0 => t.local_addr().map_or(0, |a| a.port()),
        _ => port,
    };
    for dir in socket_dirs {
        let path = dir.join(format!(".s.PGSQL.{port}"));
        let listener = bind_unix(&path)?;
        listeners.push(Listener::Unix { listener, path });
    }
    if listeners.is_empty() {
        return Err(ServerError::NoListeners);
    }
    for l in &listeners {
        let nonblocking = match l {
            Listener::Tcp(t) => t.set_nonblocking(true),
            Listener::Unix { listener, .. } => listener.set_nonblocking(true),
        };
        nonblocking.map_err(ServerError::Poll)?;
    }
    Ok(listeners)
}

/// Binds a Unix socket at `path`, replacing a socket file left by a
/// server that is gone (nothing accepts on it), never one in use.
fn bind_unix(path: &Path) -> Result<UnixListener, ServerError> {
    let error = |source| ServerError::Listen {
        address: path.display().to_string(),
        source,
    };
    match UnixListener::bind(path) {
        Ok(l) => Ok(l),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(error(e));
            }
            std::fs::remove_file(path).map_err(error)?;
            UnixListener::bind(path).map_err(error)
        }
        Err(e) => Err(error(e)),
    }
}

/// Accepts connections until shutdown, each on a thread of its own; then
/// ends them all and waits for their threads.
fn accept_loop(shared: &Arc<Shared>, listeners: Vec<Listener>) {
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    let mut accepted: u64 = 0;
    while !shared.shutdown.load(Ordering::SeqCst) {
        let mut fds: Vec<rustix::event::PollFd> = listeners
            .iter()
            .map(|l| match l {
                Listener::Tcp(t) => rustix::event::PollFd::new(t, rustix::event::PollFlags::IN),
                Listener::Unix { listener, .. } => {
                    rustix::event::PollFd::new(listener, rustix::event::PollFlags::IN)
                }
            })
            .collect();
        let timeout = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: ACCEPT_POLL.as_nanos() as i64,
        };
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                log::error!("waiting for connections failed: {e}; the server stops");
                break;
            }
        }
        let ready: Vec<bool> = fds.iter().map(|f| !f.revents().is_empty()).collect();
        drop(fds);
        for (listener, ready) in listeners.iter().zip(ready) {
            if !ready {
                continue;
            }
            match listener.accept() {
                Ok(stream) => {
                    accepted += 1;
                    let Some(starting) = shared.starting(accepted, &stream) else {
                        // As many are still starting as may be connected:
                        // a client holding connections open in startup
                        // gets no more threads.
                        stream.shutdown();
                        continue;
                    };
                    let shared = Arc::clone(shared);
                    let spawned = std::thread::Builder::new()
                        .name("aiostore-connection".into())
                        .spawn(move || connection::run_guarded(&shared, stream, starting));
                    match spawned {
                        Ok(t) => threads.push(t),
                        Err(e) => log::error!("could not start a connection's thread: {e}"),
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => {
                    // Out of file descriptors, say: wait before trying
                    // again rather than spin.
                    log::warn!("could not accept a connection: {e}");
                    std::thread::sleep(ACCEPT_POLL);
                }
            }
        }
        threads.retain(|t| !t.is_finished());
    }
    // Stop accepting first, then end the connections: a blocked read
    // returns once its socket is shut down, and the session's drop rolls
    // back its transaction.
    drop(listeners);
    for entry in shared.connections.lock().values() {
        entry.cancel.store(true, Ordering::SeqCst);
        entry.stream.shutdown();
    }
    shared.db.txn().wake_waiters();
    for stream in shared.starting.lock().values() {
        stream.shutdown();
    }
    for t in threads {
        if t.join().is_err() {
            log::error!("a connection's thread panicked");
        }
    }
    debug_assert_eq!(shared.connection_count(), 0);
}
