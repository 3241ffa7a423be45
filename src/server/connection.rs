//! One client connection: the protocol's states, from startup to
//! Terminate, on the connection's own thread and with its own session.
//!
//! ```text
//! Startup ──(SSLRequest: 'S' and TLS with ssl = on, else 'N')──▶ StartupMessage ─▶ authentication (see `auth`) ─▶
//!                                  AuthenticationOk, ParameterStatus…, BackendKeyData, ReadyForQuery
//! Ready ─ Query ─▶ results…, ReadyForQuery
//!       ─ Parse/Bind/Describe/Execute/Close/Flush ─▶ their answers
//!       ─ Sync ─▶ ReadyForQuery
//!       error in an extended-query message: ErrorResponse, then every
//!       message up to the next Sync is skipped
//! COPY: CopyInResponse, CopyData… until CopyDone or CopyFail
//!       CopyOutResponse, CopyData…, CopyDone
//! ```
//!
//! Transactions are PostgreSQL's: outside a block, a simple Query's
//! several statements are one implicit transaction (`sql::
//! execute_simple_query`), and so are the extended protocol's Executes up
//! to a Sync (`database::Implicit::Pipeline`): the first Execute after a
//! Sync opens the grouping, the Sync commits it, and an error anywhere in
//! between rolls back the Executes before it (the messages after it are
//! skipped to the Sync, as ever).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io::{self, BufRead, Read, Write};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::copy::{CopyData, CopyDone, CopyInResponse, CopyOutResponse};
use pgwire::messages::data::{FieldDescription, NoData, ParameterDescription, RowDescription};
use pgwire::messages::extendedquery::{
    Bind, BindComplete, Close, CloseComplete, Describe, Execute, Parse, ParseComplete,
    PortalSuspended, TARGET_TYPE_BYTE_PORTAL, TARGET_TYPE_BYTE_STATEMENT,
};
use pgwire::messages::response::{
    CommandComplete, EmptyQueryResponse, ErrorResponse, NoticeResponse, ReadyForQuery,
    TransactionStatus,
};
use pgwire::messages::startup::{
    Authentication, BackendKeyData, NegotiateProtocolVersion, ParameterStatus, SecretKey, Startup,
};
use pgwire::messages::{PgWireFrontendMessage as Front, SslNegotiationMetaMessage};

use super::auth::{self, AuthFailure};
use super::values::{self, ValueError, FORMAT_BINARY, FORMAT_TEXT};
use super::wire::{MessageReader, MessageWriter, Stream, WireError};
use super::{Shared, DATABASE_NAME, SERVER_VERSION};
use crate::database::{self, Session, SuspendedId};
use crate::sql::{
    self, CopyDirection, Prepared, ResultColumn, RowSink, SqlError, StatementIo, StatementResult,
};
use crate::types::{ColumnType, Value};

/// Client encodings accepted: the server's own, and the names clients in
/// the C locale send, whose bytes are taken as they are.
const CLIENT_ENCODINGS: [&str; 3] = ["UTF8", "UNICODE", "SQL_ASCII"];
/// Most prepared statements and portals a connection may hold, so that a
/// client leaking them cannot grow the server without bound.
const MAX_PREPARED: usize = 10_000;

/// An error to send: SQLSTATE, message, and whether it ends the
/// connection (FATAL).
#[derive(Debug)]
struct ClientError {
    code: &'static str,
    message: String,
    hint: Option<String>,
}

impl ClientError {
    fn new(code: &'static str, message: impl Into<String>) -> ClientError {
        ClientError {
            code,
            message: message.into(),
            hint: None,
        }
    }

    fn protocol(message: impl Into<String>) -> ClientError {
        ClientError::new("08P01", message)
    }
}

impl From<SqlError> for ClientError {
    fn from(e: SqlError) -> ClientError {
        ClientError::new(e.sqlstate(), e.to_string())
    }
}

impl From<ValueError> for ClientError {
    fn from(e: ValueError) -> ClientError {
        ClientError::new(e.sqlstate(), e.to_string())
    }
}

/// A failure that ends the connection: the client went away or broke
/// the protocol.
#[derive(Debug)]
enum Closed {
    /// The client closed it, or it broke; nothing more can be sent.
    Gone,
    /// The client broke the protocol: this FATAL error is sent first.
    Fatal(ClientError),
}

impl From<io::Error> for Closed {
    fn from(_: io::Error) -> Closed {
        Closed::Gone
    }
}

impl From<WireError> for Closed {
    fn from(e: WireError) -> Closed {
        match e {
            WireError::Io(_) | WireError::Eof => Closed::Gone,
            e @ (WireError::TooLong { .. } | WireError::Malformed(_)) => {
                Closed::Fatal(ClientError::protocol(e.to_string()))
            }
        }
    }
}

type Out = Rc<RefCell<MessageWriter>>;

/// Sends an error (or, with `fatal`, the error that ends the connection).
fn send_error(out: &Out, e: &ClientError, fatal: bool) -> io::Result<()> {
    let severity = if fatal { "FATAL" } else { "ERROR" };
    let mut fields = vec![
        (b'S', severity.to_string()),
        (b'V', severity.to_string()),
        (b'C', e.code.to_string()),
        (b'M', e.message.clone()),
    ];
    if let Some(hint) = &e.hint {
        fields.push((b'H', hint.clone()));
    }
    out.borrow_mut().send(&ErrorResponse::new(fields))
}

/// Sends a statement's notice; its text starts with its severity, as the
/// CLI prints it (`WARNING: there is no transaction in progress`).
fn send_notice(out: &Out, notice: &str) -> io::Result<()> {
    let (severity, code, message) = ["WARNING", "NOTICE", "INFO"]
        .into_iter()
        .find_map(|severity| {
            let message = notice.strip_prefix(severity)?.strip_prefix(": ")?;
            // PostgreSQL's codes: warning, successful completion.
            let code = if severity == "WARNING" {
                "01000"
            } else {
                "00000"
            };
            Some((severity, code, message))
        })
        .unwrap_or(("NOTICE", "00000", notice));
    out.borrow_mut().send(&NoticeResponse::new(vec![
        (b'S', severity.into()),
        (b'V', severity.into()),
        (b'C', code.into()),
        (b'M', message.to_string()),
    ]))
}

/// How long a client has to complete startup (PostgreSQL's
/// authentication_timeout): a connection that sends nothing holds a
/// thread only this long.
const STARTUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Runs the connection on `stream` (see [`run`]); a panic ends only this
/// connection, and is counted.
pub(super) fn run_guarded(shared: &Arc<Shared>, stream: Stream, starting: super::Starting) {
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run(shared, stream, starting)
    }));
    if ran.is_err() {
        shared.panics.fetch_add(1, Ordering::SeqCst);
        log::error!("a connection's thread panicked; its connection is closed");
    }
}

/// Runs the connection on `stream` until the client leaves or the server
/// shuts down.
fn run(shared: &Arc<Shared>, stream: Stream, starting: super::Starting) {
    if let Err(e) = stream.set_read_timeout(Some(STARTUP_TIMEOUT)) {
        log::warn!("could not set up a connection: {e}");
        return;
    }
    let (reader_stream, writer_stream) = match stream.try_clone() {
        Ok(clone) => (stream, clone),
        Err(e) => {
            log::warn!("could not set up a connection: {e}");
            return;
        }
    };
    let mut reader = MessageReader::new(reader_stream);
    let out: Out = Rc::new(RefCell::new(MessageWriter::new(writer_stream)));
    let startup = startup(shared, &mut reader, &out);
    drop(starting);
    let startup = match startup {
        Ok(Some(startup)) => startup,
        Ok(None) | Err(Closed::Gone) => return,
        Err(Closed::Fatal(e)) => {
            let _ = send_error(&out, &e, true).and_then(|()| out.borrow_mut().flush());
            out.borrow().stream().close_notify();
            return;
        }
    };
    let StartedUp {
        registered,
        session,
        cancel,
    } = startup;
    // Past startup a connection may idle for as long as its client likes
    // (its socket's keepalive notices a peer that is gone).
    if let Err(e) = reader.stream().set_read_timeout(None) {
        log::warn!("could not set up a connection: {e}");
        return;
    }
    let mut conn = Connection {
        reader,
        out: Rc::clone(&out),
        session,
        cancel,
        statements: ByName::default(),
        portals: ByName::default(),
        copy: CopyParts::new(&out),
    };
    match conn.serve() {
        Ok(()) | Err(Closed::Gone) => {}
        Err(Closed::Fatal(e)) => {
            let _ = send_error(&out, &e, true).and_then(|()| out.borrow_mut().flush());
        }
    }
    // The session's drop rolls back a transaction left open, before the
    // connection gives up its slot.
    drop(conn);
    out.borrow().stream().close_notify();
    drop(registered);
}

struct StartedUp {
    registered: Registered,
    session: Session,
    cancel: Arc<AtomicBool>,
}

/// The startup phase: SSL refused, a cancel request served, or the
/// startup message checked and answered. `None`: the connection ends
/// without a session (a cancel request).
fn startup(
    shared: &Arc<Shared>,
    reader: &mut MessageReader,
    out: &Out,
) -> Result<Option<StartedUp>, Closed> {
    // SSL is accepted on TCP with `ssl = on`; otherwise, and GSS
    // encryption always, refused: the client may go on in the clear (or
    // give up, if it requires encryption). Each pass takes one message;
    // a client may ask for encryption at most twice (GSS, then SSL)
    // before its startup message, as libpq does.
    let startup = loop {
        match reader.next()? {
            None => return Ok(None),
            Some(Front::SslNegotiation(SslNegotiationMetaMessage::None)) => {
                reader.ctx.awaiting_frontend_ssl = false;
            }
            Some(Front::SslNegotiation(SslNegotiationMetaMessage::PostgresSsl(_))) => {
                match (&shared.tls, reader.stream()) {
                    (Some(tls), Stream::Tcp(socket)) => {
                        let socket = socket.try_clone()?;
                        start_tls(&tls.config, socket, reader, out)?;
                    }
                    _ => {
                        out.borrow_mut().send_raw(b"N")?;
                        out.borrow_mut().flush()?;
                    }
                }
            }
            Some(Front::SslNegotiation(SslNegotiationMetaMessage::PostgresGss(_))) => {
                out.borrow_mut().send_raw(b"N")?;
                out.borrow_mut().flush()?;
            }
            Some(Front::CancelRequest(CancelRequest {
                pid, secret_key, ..
            })) => {
                let secret = match secret_key {
                    SecretKey::I32(secret) => Some(secret),
                    SecretKey::Bytes(b) => <[u8; 4]>::try_from(&b[..]).ok().map(i32::from_be_bytes),
                };
                if let Some(secret) = secret {
                    shared.cancel(pid, secret);
                }
                return Ok(None);
            }
            Some(Front::Startup(s)) => break s,
            Some(other) => {
                return Err(Closed::Fatal(ClientError::protocol(format!(
                    "expected a startup message, got {other:?}"
                ))))
            }
        }
    };
    reader.ctx.awaiting_frontend_startup = false;
    reader.ctx.protocol_version = pgwire::messages::ProtocolVersion::PROTOCOL3_0;
    let Startup {
        protocol_number_major,
        protocol_number_minor,
        parameters,
        ..
    } = startup;
    if protocol_number_major != 3 {
        return Err(Closed::Fatal(ClientError::protocol(format!(
            "unsupported frontend protocol {protocol_number_major}.{protocol_number_minor}: server supports 3.0"
        ))));
    }
    let unsupported: Vec<String> = parameters
        .keys()
        .filter(|k| k.starts_with("_pq_."))
        .cloned()
        .collect();
    if protocol_number_minor > 0 || !unsupported.is_empty() {
        // The field is the whole version (PostgreSQL sends
        // PG_PROTOCOL(3, 0) there, and libpq reads it so).
        out.borrow_mut().send(&NegotiateProtocolVersion::new(
            Startup::PROTOCOL_VERSION_3_0,
            unsupported,
        ))?;
    }
    let user = parameters.get("user").cloned().unwrap_or_default();
    if user.is_empty() {
        return Err(Closed::Fatal(ClientError::new(
            "28000",
            "no PostgreSQL user name specified in startup packet",
        )));
    }
    let database = parameters
        .get("database")
        .filter(|d| !d.is_empty())
        .unwrap_or(&user);
    if database != DATABASE_NAME {
        return Err(Closed::Fatal(ClientError {
            hint: Some(format!(
                "a data directory holds one database, \"{DATABASE_NAME}\"; connect to it"
            )),
            ..ClientError::new("3D000", format!("database \"{database}\" does not exist"))
        }));
    }
    if let Some(encoding) = parameters.get("client_encoding") {
        // Compared as PostgreSQL's clean_encoding_name does: letters and
        // digits only, in any case (`utf-8` is UTF8).
        let clean = |name: &str| -> String {
            name.chars()
                .filter(char::is_ascii_alphanumeric)
                .map(|c| c.to_ascii_uppercase())
                .collect()
        };
        if !CLIENT_ENCODINGS.iter().any(|e| clean(e) == clean(encoding)) {
            return Err(Closed::Fatal(ClientError::new(
                "22023",
                format!(
                    "invalid value for parameter \"client_encoding\": \"{encoding}\"; the server speaks UTF8"
                ),
            )));
        }
    }
    // Authenticated before the connection takes one of max_connections'
    // slots: a client failing to log in holds only a starting thread.
    let method = match reader.stream() {
        Stream::Tcp(_) | Stream::Tls { .. } => auth::Method::ScramSha256,
        Stream::Unix(_) => shared.unix_socket_auth,
    };
    // Over TLS, SCRAM binds to the certificate (SCRAM-SHA-256-PLUS).
    let channel_binding = match (reader.stream(), &shared.tls) {
        (Stream::Tls { .. }, Some(tls)) => tls.end_point.as_deref(),
        _ => None,
    };
    let authenticated = auth::authenticate(
        shared.db.catalog(),
        reader,
        &mut out.borrow_mut(),
        &user,
        method,
        &shared.mock_secret,
        channel_binding,
    );
    let role = authenticated.map_err(|failure| match failure {
        AuthFailure::Gone => Closed::Gone,
        AuthFailure::Protocol(message) => Closed::Fatal(ClientError::protocol(message)),
        AuthFailure::Refused { code, message } => Closed::Fatal(ClientError::new(code, message)),
    })?;
    let Some((pid, secret, cancel)) = shared.register(reader.stream()) else {
        return Err(Closed::Fatal(ClientError::new(
            "53300",
            "sorry, too many clients already",
        )));
    };
    // From here the connection leaves the table however it ends, a
    // panic included, so that it never holds a slot of max_connections.
    let registered = Registered {
        shared: Arc::clone(shared),
        pid,
    };
    let started = (|| -> Result<Session, Closed> {
        let mut session = shared.session().map_err(|e| {
            Closed::Fatal(ClientError::new(
                "53300",
                format!("could not open a session: {e}"),
            ))
        })?;
        // A cancel request stops the statement where the executor next
        // looks (between batches, in a wait for another transaction).
        session.set_cancel_flag(Arc::clone(&cancel));
        apply_options(&mut session, parameters.get("options").map(String::as_str))
            .map_err(Closed::Fatal)?;
        let mut o = out.borrow_mut();
        o.send(&Authentication::Ok)?;
        let application_name = parameters
            .get("application_name")
            .cloned()
            .unwrap_or_default();
        for (name, value) in [
            ("server_version", SERVER_VERSION.to_string()),
            ("server_encoding", "UTF8".into()),
            ("client_encoding", "UTF8".into()),
            ("DateStyle", "ISO, MDY".into()),
            ("IntervalStyle", "postgres".into()),
            ("TimeZone", "UTC".into()),
            ("integer_datetimes", "on".into()),
            ("standard_conforming_strings", "on".into()),
            (
                "is_superuser",
                if role.superuser { "on" } else { "off" }.into(),
            ),
            ("session_authorization", user.clone()),
            ("application_name", application_name),
        ] {
            o.send(&ParameterStatus::new(name.into(), value))?;
        }
        o.send(&BackendKeyData::new(pid, SecretKey::I32(secret)))?;
        o.send(&ReadyForQuery::new(TransactionStatus::Idle))?;
        o.flush()?;
        Ok(session)
    })();
    Ok(Some(StartedUp {
        registered,
        session: started?,
        cancel,
    }))
}

/// Answers an SSLRequest with `S` and runs the TLS handshake on
/// `socket`; from then on the reader and writer go through TLS.
fn start_tls(
    config: &Arc<rustls::ServerConfig>,
    socket: std::net::TcpStream,
    reader: &mut MessageReader,
    out: &Out,
) -> Result<(), Closed> {
    // Bytes the client sent after its SSLRequest, before the handshake,
    // would be taken as if they had come encrypted (PostgreSQL's
    // CVE-2021-23214): refused, in the clear, as PostgreSQL does.
    if reader.buffered() > 0 {
        return Err(Closed::Fatal(ClientError::protocol(
            "received unencrypted data after SSL request",
        )));
    }
    {
        let mut o = out.borrow_mut();
        o.send_raw(b"S")?;
        o.flush()?;
    }
    let stream = match super::tls::accept(config, socket) {
        Ok(stream) => stream,
        Err(e) => {
            // Nothing can be said to the client outside the handshake
            // (rustls sent it an alert if it could).
            log::info!("could not accept SSL connection: {e}");
            return Err(Closed::Gone);
        }
    };
    reader.replace_stream(stream.try_clone()?);
    out.borrow_mut().replace_stream(stream);
    // Inside TLS a second SSLRequest is no longer one (PostgreSQL reads
    // it as a startup message of an unknown protocol version).
    reader.ctx.awaiting_frontend_ssl = false;
    Ok(())
}

/// A connection's place in the server's table, given up when dropped.
struct Registered {
    shared: Arc<Shared>,
    pid: i32,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.shared.unregister(self.pid);
    }
}

/// The startup packet's `options` (`-c name=value`, as libpq's
/// PGOPTIONS), applied as SET would.
fn apply_options(session: &mut Session, options: Option<&str>) -> Result<(), ClientError> {
    let Some(options) = options else {
        return Ok(());
    };
    let mut words = options.split_whitespace();
    while let Some(word) = words.next() {
        let setting = match word {
            "-c" => words.next().unwrap_or(""),
            w => w
                .strip_prefix("-c")
                .or_else(|| w.strip_prefix("--"))
                .unwrap_or(""),
        };
        let Some((name, value)) = setting.split_once('=') else {
            return Err(ClientError::new(
                "42601",
                format!("invalid command-line argument for server process: {word}"),
            ));
        };
        session
            .settings
            .set_session(&name.replace('-', "_"), value)
            .map_err(|e| ClientError::from(SqlError::from(e)))?;
    }
    session.settings_changed();
    Ok(())
}

/// A statement prepared by Parse.
struct Statement {
    /// `None`: an empty query string.
    prepared: Option<Prepared>,
    /// The parameter types the client gave in Parse (0: none), reported
    /// back as given (an int2 stays int2, though we take it as integer).
    declared: Vec<u32>,
}

impl Statement {
    /// The type OIDs of its parameters, as ParameterDescription gives
    /// them.
    fn param_oids(&self) -> Vec<u32> {
        let types = self.prepared.as_ref().map_or(&[][..], |p| &p.param_types);
        types
            .iter()
            .enumerate()
            .map(|(i, &ty)| match self.declared.get(i) {
                Some(&oid) if oid != 0 && oid != values::oid::UNKNOWN => oid,
                _ => values::type_oid(ty),
            })
            .collect()
    }
}

/// A portal: a statement with its parameters' values, ready to run.
struct Portal {
    statement: Rc<Statement>,
    /// The result columns' formats, shared with the row sink of each run.
    formats: Rc<[i16]>,
    state: PortalState,
}

/// A portal's life: run by its first Execute, then (after a row limit
/// stopped it) continued by the next ones, then done.
enum PortalState {
    /// Bound, not run: the parameters' values.
    Ready(Vec<Value>),
    /// A query stopped at a row limit: its run, plan tree and snapshot,
    /// kept by the transaction, to go on with at the next Execute.
    Running(SuspendedId),
    /// Any other statement stopped at a row limit (a change with
    /// RETURNING, run to its end at once as in PostgreSQL): its rows
    /// still to send.
    Suspended(Pending),
    /// Run to its end: an Execute of a statement that returns rows
    /// returns none more (under this tag, counting none), one of a change
    /// without rows is refused (PostgreSQL's "portal cannot be run").
    Done(Option<String>),
}

struct Pending {
    rows: std::collections::VecDeque<Vec<Value>>,
    tag: String,
}

struct Connection {
    reader: MessageReader,
    out: Out,
    session: Session,
    cancel: Arc<AtomicBool>,
    statements: ByName<Rc<Statement>>,
    portals: ByName<Portal>,
    copy: CopyParts,
}

impl Connection {
    fn serve(&mut self) -> Result<(), Closed> {
        // After an error in an extended-query message, every message up
        // to the next Sync is skipped.
        let mut skipping = false;
        loop {
            let Some(message) = self.next_message()? else {
                return Ok(());
            };
            if skipping
                && !matches!(
                    message,
                    Front::Sync(_) | Front::Flush(_) | Front::Terminate(_)
                )
            {
                continue;
            }
            let result = match message {
                Front::Query(q) => {
                    self.simple_query(&q.query)?;
                    continue;
                }
                Front::Parse(p) => self.parse(p),
                Front::Bind(b) => self.bind(b),
                Front::Describe(d) => self.describe(d),
                Front::Execute(e) => {
                    let open = self.session.in_transaction();
                    let r = self.execute(e);
                    if open {
                        self.drop_portals_if_transaction_ended();
                    }
                    r
                }
                Front::Close(c) => self.close(c),
                Front::Flush(_) => {
                    self.out.borrow_mut().flush()?;
                    Ok(())
                }
                Front::Sync(_) => {
                    skipping = false;
                    // The pipeline's implicit transaction commits here;
                    // if it cannot, the client hears why before it is
                    // told the server is ready.
                    if let Err(e) = self.session.end_implicit() {
                        send_error(&self.out, &SqlError::from(e).into(), false)?;
                    }
                    // Outside a block, the pipeline's transaction ends here.
                    self.drop_portals_if_transaction_ended();
                    self.ready()?;
                    continue;
                }
                Front::Terminate(_) => return Ok(()),
                // Copy messages outside a COPY are ignored, as
                // PostgreSQL ignores them (a COPY that failed before the
                // client noticed).
                Front::CopyData(_) | Front::CopyDone(_) | Front::CopyFail(_) => continue,
                other => {
                    return Err(Closed::Fatal(ClientError::protocol(format!(
                        "unexpected message {other:?}"
                    ))))
                }
            };
            if let Err(e) = result {
                let e = match e {
                    Failed::Closed(c) => return Err(c),
                    Failed::Error(e) => e,
                };
                // An error anywhere in a pipeline ends its implicit
                // transaction, as a failed statement's does (that one
                // rolled it back already).
                if let Err(e) = self.session.rollback_implicit() {
                    log::error!("could not roll back a pipeline's transaction: {e}");
                }
                // Sent at once, as PostgreSQL does: a client waiting on a
                // Flush, not a Sync, must see it.
                send_error(&self.out, &e, false)?;
                self.out.borrow_mut().flush()?;
                skipping = true;
            }
        }
    }

    /// The client's next message. Idle in a transaction block, it waits
    /// at most idle_in_transaction_session_timeout: a client that holds
    /// a transaction (and its rows) open and goes quiet is cut off, as
    /// PostgreSQL does.
    fn next_message(&mut self) -> Result<Option<Front>, Closed> {
        let limit = match self.session.transaction_status() {
            // A pipeline's implicit transaction holds its rows until
            // the Sync as a block does.
            database::TransactionStatus::Idle if self.session.in_implicit_transaction() => {
                self.session.settings.idle_in_transaction_session_timeout()
            }
            database::TransactionStatus::Idle => None,
            database::TransactionStatus::InBlock | database::TransactionStatus::Failed => {
                self.session.settings.idle_in_transaction_session_timeout()
            }
        };
        // The socket has no timeout otherwise (a COPY's data may take as
        // long as it takes): set only around this read, so that a
        // connection without the limit makes no system call for it.
        if limit.is_some() {
            self.reader.stream().set_read_timeout(limit)?;
        }
        let next = self.reader.next();
        if limit.is_some() {
            self.reader.stream().set_read_timeout(None)?;
        }
        match next {
            Err(WireError::Io(e))
                if limit.is_some()
                    && matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
            {
                Err(Closed::Fatal(ClientError::new(
                    "25P03",
                    "terminating connection due to idle-in-transaction timeout",
                )))
            }
            other => Ok(other?),
        }
    }

    fn ready(&mut self) -> io::Result<()> {
        let status = match self.session.transaction_status() {
            database::TransactionStatus::Idle => TransactionStatus::Idle,
            database::TransactionStatus::InBlock => TransactionStatus::Transaction,
            database::TransactionStatus::Failed => TransactionStatus::Error,
        };
        let mut o = self.out.borrow_mut();
        o.send(&ReadyForQuery::new(status))?;
        o.flush()
    }

    /// Runs `f` (one prepared statement, or a simple query's statements)
    /// with the connection's COPY channel and a row sink sending rows in
    /// `formats`: with `describe`, a RowDescription first (the simple
    /// protocol); with `stream`, rows go out as the executor produces
    /// them, else the statement's result collects them.
    fn run_with_io<R>(
        &mut self,
        formats: Rc<[i16]>,
        describe: bool,
        stream: bool,
        f: impl FnOnce(&mut Session, &mut StatementIo, &Out, &CopyOutEnd) -> Result<R, SqlError>,
    ) -> Result<Result<R, ClientError>, Closed> {
        // A cancel request stops the statement running when it comes
        // (the session's executor and waits look at the flag), none after.
        self.cancel.store(false, Ordering::SeqCst);
        let Connection {
            reader,
            out,
            session,
            copy,
            ..
        } = self;
        let mut channel = CopyChannel::new(reader, out, copy);
        let end_out = channel.end_out.clone();
        let mut sink = ResultSink {
            out: Rc::clone(out),
            formats,
            describe,
        };
        let result = {
            let copy = channel.split();
            let mut io = StatementIo {
                stdin: Some(copy.stdin),
                stdout: Some(copy.stdout),
                rows: if stream { Some(&mut sink) } else { None },
                copy_begin: Some(copy.begin),
                ..Default::default()
            };
            f(session, &mut io, out, &end_out)
        };
        let client_failure = channel.client_failure();
        channel.finish(result.is_ok())?;
        Ok(result.map_err(|e| client_failure.unwrap_or_else(|| e.into())))
    }

    /// The simple query protocol: every statement of `text`, results as
    /// they come, then ReadyForQuery.
    fn simple_query(&mut self, text: &str) -> Result<(), Closed> {
        // The unnamed portal is the Query's now (PostgreSQL's replaces it).
        let unnamed = self.portals.remove("");
        self.close_run(unnamed);
        // A Query amid an unsynced pipeline ends the pipeline's
        // transaction first (PostgreSQL's ends it with the Query's).
        if let Err(e) = self.session.end_implicit() {
            send_error(&self.out, &SqlError::from(e).into(), false)?;
            self.ready()?;
            return Ok(());
        }
        let any = Cell::new(false);
        let outcome = self.run_with_io(Rc::from([]), true, true, |session, io, out, end_out| {
            sql::execute_simple_query(session, text, io, |r| {
                any.set(true);
                // A failure to send shows at the next send or flush.
                let _ = end_out.end().and_then(|()| send_result(out, &r, &[]));
            })
        })?;
        match outcome {
            Ok(()) if !any.get() => self.out.borrow_mut().send(&EmptyQueryResponse::new())?,
            Ok(()) => {}
            Err(e) => send_error(&self.out, &e, false)?,
        }
        self.drop_portals_if_transaction_ended();
        self.ready()?;
        Ok(())
    }

    /// Portals live as long as the transaction they ran in, as in
    /// PostgreSQL: once none is open (after a simple query, a COMMIT or
    /// an error, or at a Sync outside a block) they are gone. Their
    /// suspended queries were closed by the transaction's end. (Bind
    /// opens no transaction here, so an Execute that opened none, or one
    /// that runs in its own, leaves the pipeline's portals be: the caller
    /// asks only after an Execute that found a transaction open.)
    fn drop_portals_if_transaction_ended(&mut self) {
        if !self.session.in_transaction() {
            self.portals.clear();
        }
    }

    fn parse(&mut self, p: Parse) -> Result<(), Failed> {
        let name = p.name.unwrap_or_default();
        room_for(&self.statements, &name, Named::Statement)?;
        let declared = p
            .type_oids
            .iter()
            .enumerate()
            .map(|(i, &oid)| values::param_type(i + 1, oid))
            .collect::<Result<Vec<_>, _>>()?;
        let prepared = sql::prepare(&mut self.session, &p.query, &declared)?;
        self.statements.insert(
            name,
            Rc::new(Statement {
                prepared,
                declared: p.type_oids,
            }),
        );
        self.out.borrow_mut().send(&ParseComplete::new())?;
        Ok(())
    }

    fn bind(&mut self, b: Bind) -> Result<(), Failed> {
        let statement_name = b.statement_name.unwrap_or_default();
        let Some(statement) = self.statements.get(&statement_name).map(Rc::clone) else {
            return Err(unknown_statement(&statement_name).into());
        };
        let portal_name = b.portal_name.unwrap_or_default();
        room_for(&self.portals, &portal_name, Named::Portal)?;
        let types: &[ColumnType] = statement.prepared.as_ref().map_or(&[], |p| &p.param_types);
        if b.parameters.len() != types.len() {
            return Err(SqlError::ParameterCount {
                given: b.parameters.len(),
                expected: types.len(),
            }
            .into());
        }
        let formats = &b.parameter_format_codes;
        if formats.len() > 1 && formats.len() != types.len() {
            return Err(ClientError::protocol(format!(
                "bind message has {} parameter formats but {} parameters",
                formats.len(),
                types.len()
            ))
            .into());
        }
        let mut vals = Vec::with_capacity(types.len());
        for (i, (bytes, &ty)) in b.parameters.iter().zip(types).enumerate() {
            let format = format_of(formats, i);
            vals.push(match bytes {
                None => Value::Null,
                Some(bytes) => values::decode(i + 1, ty, format, bytes)?,
            });
        }
        let columns = statement.prepared.as_ref().map_or(0, |p| p.columns.len());
        let result_formats = &b.result_column_format_codes;
        if result_formats.len() > 1 && result_formats.len() != columns {
            return Err(ClientError::protocol(format!(
                "bind message has {} result formats but query has {columns} columns",
                result_formats.len()
            ))
            .into());
        }
        let formats = (0..columns)
            .map(|i| format_of(result_formats, i))
            .map(|f| match f {
                FORMAT_TEXT | FORMAT_BINARY => Ok(f),
                other => Err(ValueError::FormatCode(other)),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let replaced = self.portals.insert(
            portal_name,
            Portal {
                statement,
                formats: formats.into(),
                state: PortalState::Ready(vals),
            },
        );
        self.close_run(replaced);
        self.out.borrow_mut().send(&BindComplete::new())?;
        Ok(())
    }

    fn describe(&mut self, d: Describe) -> Result<(), Failed> {
        let name = d.name.unwrap_or_default();
        let mut o = self.out.borrow_mut();
        match d.target_type {
            TARGET_TYPE_BYTE_STATEMENT => {
                let Some(statement) = self.statements.get(&name) else {
                    return Err(unknown_statement(&name).into());
                };
                let columns = statement.prepared.as_ref().map_or(&[][..], |p| &p.columns);
                o.send(&ParameterDescription::new(statement.param_oids()))?;
                // Before Bind the formats are not known: text, as the
                // protocol says.
                send_row_description(&mut o, columns, &[])?;
            }
            TARGET_TYPE_BYTE_PORTAL => {
                let Some(portal) = self.portals.get(&name) else {
                    return Err(unknown_portal(&name).into());
                };
                let columns = portal
                    .statement
                    .prepared
                    .as_ref()
                    .map_or(&[][..], |p| &p.columns);
                send_row_description(&mut o, columns, &portal.formats)?;
            }
            other => {
                return Err(ClientError::protocol(format!(
                    "invalid DESCRIBE message subtype {other}"
                ))
                .into())
            }
        }
        Ok(())
    }

    fn close(&mut self, c: Close) -> Result<(), Failed> {
        let name = c.name.unwrap_or_default();
        match c.target_type {
            TARGET_TYPE_BYTE_STATEMENT => {
                self.statements.remove(&name);
            }
            TARGET_TYPE_BYTE_PORTAL => {
                let closed = self.portals.remove(&name);
                self.close_run(closed);
            }
            other => {
                return Err(
                    ClientError::protocol(format!("invalid CLOSE message subtype {other}")).into(),
                )
            }
        }
        self.out.borrow_mut().send(&CloseComplete::new())?;
        Ok(())
    }

    /// Gives back what a portal's suspended query holds, if it is one
    /// (its transaction closes it anyway as it ends).
    fn close_run(&mut self, portal: Option<Portal>) {
        if let Some(Portal {
            state: PortalState::Running(id),
            ..
        }) = portal
        {
            self.session.close_suspended(id);
        }
    }

    fn execute(&mut self, e: Execute) -> Result<(), Failed> {
        // The Executes up to the next Sync are one implicit transaction.
        if self.session.implicit().is_none() {
            self.session.begin_implicit(database::Implicit::Pipeline);
        }
        let name = e.name.unwrap_or_default();
        let max_rows = u64::try_from(e.max_rows).ok().filter(|&n| n > 0);
        let Some(portal) = self.portals.get_mut(&name) else {
            return Err(unknown_portal(&name).into());
        };
        let statement = Rc::clone(&portal.statement);
        let Some(prepared) = &statement.prepared else {
            self.out.borrow_mut().send(&EmptyQueryResponse::new())?;
            return Ok(());
        };
        // A portal that ran is refused in a failed block, as everything
        // but the block's end is (a bound one meets the same refusal as
        // its statement starts, COMMIT and ROLLBACK excepted).
        if !matches!(portal.state, PortalState::Ready(_))
            && self.session.transaction_status() == database::TransactionStatus::Failed
        {
            return Err(SqlError::from(database::XactError::Aborted).into());
        }
        let formats = Rc::clone(&portal.formats);
        let vals = match std::mem::replace(&mut portal.state, PortalState::Done(None)) {
            PortalState::Ready(vals) => vals,
            PortalState::Running(id) => return self.resume(&name, id, formats, max_rows),
            PortalState::Suspended(mut pending) => {
                if !send_pending(&self.out, &mut pending, &formats, max_rows)? {
                    portal.state = PortalState::Suspended(pending);
                } else {
                    portal.state = PortalState::Done(Some(pending.tag));
                }
                return Ok(());
            }
            PortalState::Done(Some(tag)) => {
                self.out
                    .borrow_mut()
                    .send(&CommandComplete::new(tag_counting(&tag, 0)))?;
                portal.state = PortalState::Done(Some(tag));
                return Ok(());
            }
            PortalState::Done(None) => {
                return Err(
                    ClientError::new("55000", format!("portal \"{name}\" cannot be run")).into(),
                )
            }
        };
        let r = match max_rows {
            // A query's rows stream a limit at a time, the rest of its
            // run suspended; any other statement's are kept.
            Some(limit) => self
                .run_with_io(Rc::clone(&formats), false, true, |session, io, _, _| {
                    sql::execute_prepared_limited(session, prepared, vals, io, limit)
                })
                .map_err(Failed::Closed)??,
            None => sql::Limited::Ended(
                self.run_with_io(Rc::clone(&formats), false, true, |session, io, _, _| {
                    sql::execute_prepared(session, prepared, vals, io)
                })
                .map_err(Failed::Closed)??,
            ),
        };
        let out = &self.out;
        let state = match r {
            sql::Limited::Suspended(id) => {
                out.borrow_mut().send(&PortalSuspended::new())?;
                PortalState::Running(id)
            }
            sql::Limited::Ended(r) if r.returns_rows() && !r.streamed => {
                for n in &r.notices {
                    send_notice(out, n)?;
                }
                let mut pending = Pending {
                    rows: r.rows.into(),
                    tag: r.tag,
                };
                if send_pending(out, &mut pending, &formats, max_rows)? {
                    PortalState::Done(Some(pending.tag))
                } else {
                    PortalState::Suspended(pending)
                }
            }
            sql::Limited::Ended(r) => {
                send_result(out, &r, &formats)?;
                PortalState::Done(r.returns_rows().then_some(r.tag))
            }
        };
        if let Some(portal) = self.portals.get_mut(&name) {
            portal.state = state;
        }
        Ok(())
    }

    /// An Execute of portal `name`, whose query was suspended as `id`.
    fn resume(
        &mut self,
        name: &str,
        id: SuspendedId,
        formats: Rc<[i16]>,
        max_rows: Option<u64>,
    ) -> Result<(), Failed> {
        let limit = max_rows.unwrap_or(u64::MAX);
        let r = self
            .run_with_io(formats, false, true, |session, io, _, _| {
                let sink = io.rows.as_deref_mut().expect("asked for above");
                sql::resume_limited(session, id, sink, limit)
            })
            .map_err(Failed::Closed)??;
        let state = match r {
            // Its transaction ended (PostgreSQL drops the portals of a
            // transaction as it commits).
            None => {
                self.portals.remove(name);
                return Err(unknown_portal(name).into());
            }
            Some(sql::Limited::Suspended(id)) => {
                self.out.borrow_mut().send(&PortalSuspended::new())?;
                PortalState::Running(id)
            }
            Some(sql::Limited::Ended(r)) => {
                send_result(&self.out, &r, &[])?;
                PortalState::Done(Some(r.tag))
            }
        };
        if let Some(portal) = self.portals.get_mut(name) {
            portal.state = state;
        }
        Ok(())
    }
}

/// What an extended-query message can fail on.
enum Failed {
    /// An error to report; the connection goes on after the next Sync.
    Error(ClientError),
    /// The connection is over.
    Closed(Closed),
}

impl<E: Into<ClientError>> From<E> for Failed {
    fn from(e: E) -> Failed {
        Failed::Error(e.into())
    }
}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> ClientError {
        ClientError::new("08006", format!("could not send data to client: {e}"))
    }
}

/// What a client names: prepared statements and portals.
#[derive(Clone, Copy)]
enum Named {
    Statement,
    Portal,
}

/// Refuses a new statement or portal `name` where one of that name
/// exists (the unnamed one is replaced), or where the connection holds
/// [`MAX_PREPARED`] already.
/// A connection's prepared statements or portals by name. The unnamed
/// one, which every Bind and Execute of `-M extended` and most drivers
/// name, is kept apart: no hashing and no string compare on that path.
struct ByName<T> {
    unnamed: Option<T>,
    named: HashMap<String, T>,
}

impl<T> Default for ByName<T> {
    fn default() -> Self {
        ByName {
            unnamed: None,
            named: HashMap::new(),
        }
    }
}

impl<T> ByName<T> {
    fn get(&self, name: &str) -> Option<&T> {
        if name.is_empty() {
            self.unnamed.as_ref()
        } else {
            self.named.get(name)
        }
    }

    fn get_mut(&mut self, name: &str) -> Option<&mut T> {
        if name.is_empty() {
            self.unnamed.as_mut()
        } else {
            self.named.get_mut(name)
        }
    }

    fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Puts `value` under `name`, returning what was there.
    fn insert(&mut self, name: String, value: T) -> Option<T> {
        if name.is_empty() {
            self.unnamed.replace(value)
        } else {
            self.named.insert(name, value)
        }
    }

    fn remove(&mut self, name: &str) -> Option<T> {
        if name.is_empty() {
            self.unnamed.take()
        } else {
            self.named.remove(name)
        }
    }

    fn len(&self) -> usize {
        self.named.len() + usize::from(self.unnamed.is_some())
    }

    fn clear(&mut self) {
        self.unnamed = None;
        self.named.clear();
    }
}

fn room_for<T>(held: &ByName<T>, name: &str, kind: Named) -> Result<(), ClientError> {
    let (code, what, plural) = match kind {
        Named::Statement => ("42P05", "prepared statement", "prepared statements"),
        Named::Portal => ("42P03", "cursor", "portals"),
    };
    if !name.is_empty() && held.contains_key(name) {
        return Err(ClientError::new(
            code,
            format!("{what} \"{name}\" already exists"),
        ));
    }
    if held.len() >= MAX_PREPARED {
        return Err(ClientError::new(
            "54000",
            format!("too many {plural} (at most {MAX_PREPARED}); close some"),
        ));
    }
    Ok(())
}

fn unknown_statement(name: &str) -> ClientError {
    ClientError::new(
        "26000",
        format!("prepared statement \"{name}\" does not exist"),
    )
}

fn unknown_portal(name: &str) -> ClientError {
    ClientError::new("34000", format!("portal \"{name}\" does not exist"))
}

/// The format of column or parameter `i` given format codes `codes`:
/// none means text for all, one applies to all.
fn format_of(codes: &[i16], i: usize) -> i16 {
    match codes {
        [] => FORMAT_TEXT,
        [one] => *one,
        many => many.get(i).copied().unwrap_or(FORMAT_TEXT),
    }
}

fn send_row_description(
    o: &mut MessageWriter,
    columns: &[ResultColumn],
    formats: &[i16],
) -> io::Result<()> {
    if columns.is_empty() {
        return o.send(&NoData::new());
    }
    let fields = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            FieldDescription::new(
                c.name.clone(),
                0,
                0,
                values::type_oid(c.ty),
                values::type_size(c.ty),
                values::type_modifier(c.ty),
                format_of(formats, i),
            )
        })
        .collect();
    o.send(&RowDescription::new(fields))
}

/// The type byte of a DataRow message.
const DATA_ROW: u8 = b'D';

/// Sends one row in `formats`, a DataRow encoded in the output buffer.
fn send_row(o: &mut MessageWriter, row: &[Value], formats: &[i16]) -> io::Result<()> {
    let Ok(columns) = i16::try_from(row.len()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a row of {} columns cannot be sent", row.len()),
        ));
    };
    o.send_built(DATA_ROW, |data| {
        data.extend_from_slice(&columns.to_be_bytes());
        for (i, v) in row.iter().enumerate() {
            if v.is_null() {
                data.extend_from_slice(&(-1i32).to_be_bytes());
                continue;
            }
            let at = data.len();
            data.extend_from_slice(&[0; 4]);
            values::encode(v, format_of(formats, i), data);
            let len = (data.len() - at - 4) as i32;
            data[at..at + 4].copy_from_slice(&len.to_be_bytes());
        }
    })
}

/// Sends what one statement returned (the rows it did not stream, its
/// notices, its tag).
fn send_result(out: &Out, r: &StatementResult, formats: &[i16]) -> io::Result<()> {
    let mut o = out.borrow_mut();
    if r.returns_rows() && !r.streamed {
        if formats.is_empty() {
            // The simple protocol describes its rows; Execute does not.
            send_row_description(&mut o, &r.columns, formats)?;
        }
        for row in &r.rows {
            send_row(&mut o, row, formats)?;
        }
    }
    drop(o);
    for n in &r.notices {
        send_notice(out, n)?;
    }
    out.borrow_mut().send(&CommandComplete::new(r.tag.clone()))
}

/// Sends up to `limit` of a portal's kept rows, then PortalSuspended, or
/// all and its tag. Returns whether they were all sent.
fn send_pending(
    out: &Out,
    pending: &mut Pending,
    formats: &[i16],
    limit: Option<u64>,
) -> io::Result<bool> {
    let mut o = out.borrow_mut();
    let mut n = 0;
    while limit.is_none_or(|l| n < l) {
        let Some(row) = pending.rows.pop_front() else {
            break;
        };
        send_row(&mut o, &row, formats)?;
        n += 1;
    }
    if pending.rows.is_empty() && limit.is_none_or(|l| n < l) {
        o.send(&CommandComplete::new(tag_counting(&pending.tag, n)))?;
        Ok(true)
    } else {
        o.send(&PortalSuspended::new())?;
        Ok(false)
    }
}

/// `tag` counting `rows`: each Execute of a portal reports the rows it
/// returned, as PostgreSQL's does (`SELECT 2`, then `SELECT 1`; `INSERT 0
/// 1` for the last of three rows a RETURNING portal returned).
fn tag_counting(tag: &str, rows: u64) -> String {
    match tag.rsplit_once(' ') {
        Some((verb, count)) if count.parse::<u64>().is_ok() => format!("{verb} {rows}"),
        _ => tag.to_string(),
    }
}

/// Receives a query's rows as the executor produces them and sends them
/// (simple protocol: with their RowDescription first).
struct ResultSink {
    out: Out,
    formats: Rc<[i16]>,
    /// Send a RowDescription before the rows (the simple protocol).
    describe: bool,
}

impl RowSink for ResultSink {
    fn begin(&mut self, columns: &[ResultColumn]) -> io::Result<()> {
        if self.describe {
            send_row_description(&mut self.out.borrow_mut(), columns, &self.formats)?;
        }
        Ok(())
    }

    fn rows(&mut self, rows: &mut Vec<Vec<Value>>) -> io::Result<()> {
        let mut o = self.out.borrow_mut();
        for row in rows.iter() {
            send_row(&mut o, row, &self.formats)?;
        }
        Ok(())
    }

    fn end(&mut self, _count: Option<u64>) -> io::Result<()> {
        Ok(())
    }
}

/// COPY FROM STDIN and TO STDOUT over the connection: announces the
/// copy, reads CopyData until CopyDone, writes CopyData and CopyDone.
struct CopyChannel<'c> {
    stdin: CopyIn<'c>,
    stdout: CopyOut,
    begin: &'c mut dyn FnMut(CopyDirection, usize) -> io::Result<()>,
    end_out: CopyOutEnd,
}

/// Ends a COPY TO STDOUT with CopyDone, right after the statement and
/// before its CommandComplete (a simple query's next statement comes
/// after).
#[derive(Clone)]
struct CopyOutEnd {
    state: Rc<Cell<CopyState>>,
    out: Out,
    buf: Rc<RefCell<Vec<u8>>>,
}

impl CopyOutEnd {
    /// After a statement that succeeded: CopyDone if it was a copy out.
    fn end(&self) -> io::Result<()> {
        if self.state.get() != CopyState::Out {
            return Ok(());
        }
        self.state.set(CopyState::None);
        send_copy_data(&self.out, &self.buf)?;
        self.out.borrow_mut().send(&CopyDone::new())
    }
}

/// Sends what a copy out has gathered as one CopyData.
fn send_copy_data(out: &Out, buf: &RefCell<Vec<u8>>) -> io::Result<()> {
    let data = std::mem::take(&mut *buf.borrow_mut());
    if data.is_empty() {
        return Ok(());
    }
    out.borrow_mut().send(&CopyData::new(Bytes::from(data)))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CopyState {
    None,
    In,
    Out,
}

/// The channel's ends, lent to one statement's [`StatementIo`].
struct CopyEnds<'a> {
    stdin: &'a mut dyn BufRead,
    stdout: &'a mut dyn Write,
    begin: &'a mut dyn FnMut(CopyDirection, usize) -> io::Result<()>,
}

/// What a connection's COPY channels share, made once per connection
/// rather than at every statement (four allocations an Execute paid).
struct CopyParts {
    state: Rc<Cell<CopyState>>,
    done: Rc<Cell<bool>>,
    buf: Rc<RefCell<Vec<u8>>>,
    begin: Box<dyn FnMut(CopyDirection, usize) -> io::Result<()>>,
}

impl CopyParts {
    fn new(out: &Out) -> CopyParts {
        let state = Rc::new(Cell::new(CopyState::None));
        let done = Rc::new(Cell::new(false));
        let begin = {
            let out = Rc::clone(out);
            let state = Rc::clone(&state);
            let done = Rc::clone(&done);
            move |direction: CopyDirection, columns: usize| {
                let mut o = out.borrow_mut();
                let formats = vec![FORMAT_TEXT; columns];
                let columns = i16::try_from(columns).unwrap_or(i16::MAX);
                match direction {
                    CopyDirection::In => {
                        state.set(CopyState::In);
                        done.set(false);
                        o.send(&CopyInResponse::new(0, columns, formats))?;
                        // The client sends nothing until it has this.
                        o.flush()
                    }
                    CopyDirection::Out => {
                        state.set(CopyState::Out);
                        o.send(&CopyOutResponse::new(0, columns, formats))
                    }
                }
            }
        };
        CopyParts {
            state,
            done,
            buf: Rc::new(RefCell::new(Vec::new())),
            begin: Box::new(begin),
        }
    }
}

impl<'c> CopyChannel<'c> {
    /// The channel of one statement (or one simple query's statements).
    fn new(reader: &'c mut MessageReader, out: &Out, parts: &'c mut CopyParts) -> CopyChannel<'c> {
        // The previous statement's `finish` left no copy open.
        debug_assert_eq!(parts.state.get(), CopyState::None);
        debug_assert!(parts.buf.borrow().is_empty());
        parts.done.set(false);
        CopyChannel {
            stdin: CopyIn {
                reader,
                chunk: Bytes::new(),
                done: Rc::clone(&parts.done),
                failed: None,
            },
            stdout: CopyOut {
                out: Rc::clone(out),
                buf: Rc::clone(&parts.buf),
            },
            begin: &mut *parts.begin,
            end_out: CopyOutEnd {
                state: Rc::clone(&parts.state),
                out: Rc::clone(out),
                buf: Rc::clone(&parts.buf),
            },
        }
    }

    fn split(&mut self) -> CopyEnds<'_> {
        CopyEnds {
            stdin: &mut self.stdin,
            stdout: &mut self.stdout,
            begin: &mut *self.begin,
        }
    }

    /// Why the client ended a copy in with CopyFail, if it did.
    fn client_failure(&self) -> Option<ClientError> {
        self.stdin
            .failed
            .as_ref()
            .map(|m| ClientError::new("57014", format!("COPY from stdin failed: {m}")))
    }

    /// After the statement (or a simple query's statements): CopyDone
    /// for a copy out that succeeded (one that failed just stops, as
    /// PostgreSQL's does); for a copy in that stopped early (an error),
    /// the rest of the client's data is read and dropped, up to its
    /// CopyDone or CopyFail.
    fn finish(&mut self, ok: bool) -> Result<(), Closed> {
        match self.end_out.state.get() {
            CopyState::None => {}
            CopyState::Out if ok => self.end_out.end()?,
            CopyState::Out => {
                self.end_out.state.set(CopyState::None);
                self.end_out.buf.borrow_mut().clear();
            }
            CopyState::In => {
                self.end_out.state.set(CopyState::None);
                // Bounded by the client: it must end the copy, or the
                // connection ends.
                while !self.stdin.done.get() {
                    match self.stdin.reader.next()? {
                        None => return Err(Closed::Gone),
                        Some(Front::CopyDone(_) | Front::CopyFail(_)) => self.stdin.done.set(true),
                        Some(_) => {}
                    }
                }
            }
        }
        Ok(())
    }
}

/// COPY FROM STDIN's input: the client's CopyData messages, up to its
/// CopyDone.
struct CopyIn<'c> {
    reader: &'c mut MessageReader,
    chunk: Bytes,
    /// The client ended the copy (CopyDone or CopyFail); cleared as the
    /// next copy begins.
    done: Rc<Cell<bool>>,
    /// The client's CopyFail message.
    failed: Option<String>,
}

impl Read for CopyIn<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(buf.len());
        buf[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for CopyIn<'_> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        // Each pass reads one message; the client ends the copy or the
        // connection (a cancel request is seen by COPY itself, every MiB).
        while self.chunk.is_empty() && !self.done.get() {
            let message = self
                .reader
                .next()
                .map_err(|e| io::Error::new(io::ErrorKind::ConnectionAborted, e.to_string()))?;
            match message {
                Some(Front::CopyData(d)) => self.chunk = d.data,
                Some(Front::CopyDone(_)) => self.done.set(true),
                Some(Front::CopyFail(f)) => {
                    self.done.set(true);
                    self.failed = Some(f.message.clone());
                    return Err(io::Error::other(format!(
                        "COPY from stdin failed: {}",
                        f.message
                    )));
                }
                // Allowed during a copy, and ignored (PostgreSQL's words).
                Some(Front::Flush(_) | Front::Sync(_)) => {}
                Some(other) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("unexpected message during COPY from stdin: {other:?}"),
                    ))
                }
                None => {
                    self.done.set(true);
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "unexpected EOF on client connection during COPY from stdin",
                    ));
                }
            }
        }
        Ok(&self.chunk)
    }

    fn consume(&mut self, n: usize) {
        bytes::Buf::advance(&mut self.chunk, n);
    }
}

/// COPY TO STDOUT's output: CopyData messages of up to
/// [`super::wire::WRITE_BUFFER_BYTES`].
struct CopyOut {
    out: Out,
    buf: Rc<RefCell<Vec<u8>>>,
}

impl Write for CopyOut {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let full = {
            let mut gathered = self.buf.borrow_mut();
            gathered.extend_from_slice(buf);
            gathered.len() >= super::wire::WRITE_BUFFER_BYTES
        };
        if full {
            send_copy_data(&self.out, &self.buf)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        send_copy_data(&self.out, &self.buf)
    }
}
