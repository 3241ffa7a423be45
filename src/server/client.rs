//! A client of the server, for the CLI: `aiostore sql` and `aiostore
//! shell` on a data directory that a running `aiostore serve` holds send
//! their statements to that server (over its Unix socket) instead of
//! failing on the directory's lock. It speaks the simple query protocol and hands the
//! results to the same [`StatementIo`] receivers a local session feeds,
//! so the CLI prints both alike.
//!
//! The server says where it listens in `aiostore.server` in the data
//! directory (as PostgreSQL's `postmaster.pid` does): written once it
//! listens, removed when it stops.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use bytes::{Buf, BytesMut};
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail};
use pgwire::messages::simplequery::Query;
use pgwire::messages::startup::Startup;
use pgwire::messages::terminate::Terminate;
use pgwire::messages::Message;
use thiserror::Error;

use super::values;
use crate::sql::{ResultColumn, StatementIo, StatementResult};
use crate::types::{parse_value, ColumnType, Value};

/// The file in a data directory that says where its server listens.
pub const SERVER_FILE: &str = "aiostore.server";
/// Rows handed to the row receiver at a time.
const ROWS_PER_BATCH: usize = 256;
/// Bytes of COPY FROM STDIN input sent per CopyData.
const COPY_CHUNK_BYTES: usize = 64 << 10;

/// Where a running server listens, as its file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerFile {
    pub pid: u32,
    pub port: u16,
    /// Its Unix socket, if it has one.
    pub socket: Option<PathBuf>,
}

impl ServerFile {
    /// Writes the file for a server listening on `port` and `socket`.
    pub fn write(dir: &Path, port: u16, socket: Option<&Path>) -> io::Result<()> {
        let text = format!(
            "{}\n{port}\n{}\n",
            std::process::id(),
            socket.map(|s| s.display().to_string()).unwrap_or_default()
        );
        let tmp = dir.join(format!("{SERVER_FILE}.tmp"));
        std::fs::write(&tmp, text)?;
        std::fs::rename(tmp, dir.join(SERVER_FILE))
    }

    /// Removes the file (the server is stopping).
    pub fn remove(dir: &Path) {
        let _ = std::fs::remove_file(dir.join(SERVER_FILE));
    }

    /// The file of `dir`'s server, if it has one that parses.
    pub fn read(dir: &Path) -> Option<ServerFile> {
        let text = std::fs::read_to_string(dir.join(SERVER_FILE)).ok()?;
        let mut lines = text.lines();
        let pid = lines.next()?.parse().ok()?;
        let port = lines.next()?.parse().ok()?;
        let socket = lines.next().filter(|s| !s.is_empty()).map(PathBuf::from);
        Some(ServerFile { pid, port, socket })
    }
}

/// What talking to a server can fail on.
#[derive(Debug, Error)]
pub enum ClientError {
    #[error("could not connect to the server of this data directory ({place}): {source}")]
    Connect { place: String, source: io::Error },
    #[error("lost the connection to the server: {0}")]
    Io(#[from] io::Error),
    #[error("the server sent what this client does not understand: {0}")]
    Protocol(String),
    /// The server refused the connection.
    #[error("{severity}:  {message}")]
    Refused { severity: String, message: String },
}

/// An error a statement got from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerError {
    pub code: String,
    pub message: String,
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// A connection to a server.
pub struct Client {
    stream: UnixStream,
    buf: BytesMut,
}

impl Client {
    /// Connects to the server `file` describes, as `user`.
    pub fn connect(file: &ServerFile, user: &str) -> Result<Client, ClientError> {
        let Some(socket) = &file.socket else {
            return Err(ClientError::Connect {
                place: format!("port {}", file.port),
                source: io::Error::other("the server listens on no Unix socket"),
            });
        };
        let stream = UnixStream::connect(socket).map_err(|source| ClientError::Connect {
            place: socket.display().to_string(),
            source,
        })?;
        let mut client = Client {
            stream,
            buf: BytesMut::new(),
        };
        let mut startup = Startup::new();
        startup.parameters.insert("user".into(), user.into());
        startup
            .parameters
            .insert("database".into(), super::DATABASE_NAME.into());
        startup
            .parameters
            .insert("application_name".into(), "aiostore".into());
        client.send(&startup)?;
        // Up to ReadyForQuery: authentication (trust), parameters, key.
        loop {
            let (kind, body) = client.recv()?;
            match kind {
                b'Z' => return Ok(client),
                b'E' => {
                    let e = error_fields(&body);
                    return Err(ClientError::Refused {
                        severity: "FATAL".into(),
                        message: e.message,
                    });
                }
                b'R' if body.get(..4) != Some(&[0, 0, 0, 0]) => {
                    return Err(ClientError::Protocol(
                        "the server asks for a password, which this client cannot give".into(),
                    ))
                }
                _ => {}
            }
        }
    }

    fn send(&mut self, m: &impl Message) -> Result<(), ClientError> {
        let mut out = BytesMut::new();
        m.encode(&mut out)
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        self.stream.write_all(&out)?;
        Ok(())
    }

    /// The next backend message: its type and body.
    fn recv(&mut self) -> Result<(u8, BytesMut), ClientError> {
        loop {
            if self.buf.len() >= 5 {
                let len = (&self.buf[1..5]).get_i32();
                if len < 4 {
                    return Err(ClientError::Protocol(format!("a message of length {len}")));
                }
                let total = 1 + len as usize;
                if self.buf.len() >= total {
                    let mut m = self.buf.split_to(total);
                    let kind = m[0];
                    m.advance(5);
                    return Ok((kind, m));
                }
            }
            let mut chunk = [0u8; 64 << 10];
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err(ClientError::Io(io::ErrorKind::UnexpectedEof.into()));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Runs the `;`-separated statements of `text` on the server, handing
    /// each one's result to `on_result` and rows, COPY data and input
    /// through `io`, as [`crate::sql::execute_simple_query`] does for a
    /// local session: several statements are one implicit transaction.
    /// `Ok(Err(e))`: a statement failed (and the implicit transaction,
    /// those before it with it, rolled back, as it would locally).
    pub fn execute_each(
        &mut self,
        text: &str,
        io: &mut StatementIo,
        mut on_result: impl FnMut(StatementResult),
    ) -> Result<Result<(), ServerError>, ClientError> {
        self.send(&Query::new(text.into()))?;
        let mut failed = None;
        let mut columns: Vec<ResultColumn> = Vec::new();
        let mut rows: Vec<Vec<Value>> = Vec::new();
        let mut notices = Vec::new();
        // Each pass reads one message; the server ends the query with
        // ReadyForQuery.
        loop {
            let (kind, body) = self.recv()?;
            match kind {
                b'T' => {
                    columns = row_description(&body)?;
                    if let Some(sink) = io.rows.as_deref_mut() {
                        sink.begin(&columns)?;
                    }
                }
                b'D' => {
                    rows.push(data_row(&body, &columns)?);
                    if rows.len() >= ROWS_PER_BATCH {
                        if let Some(sink) = io.rows.as_deref_mut() {
                            sink.rows(&mut rows)?;
                            rows.clear();
                        }
                    }
                }
                b'C' => {
                    let tag = cstring(&body);
                    let streamed = io.rows.is_some() && !columns.is_empty();
                    if let Some(sink) = io.rows.as_deref_mut().filter(|_| streamed) {
                        sink.rows(&mut rows)?;
                        rows.clear();
                        let count = tag.rsplit(' ').next().and_then(|n| n.parse().ok());
                        sink.end(count)?;
                    }
                    on_result(StatementResult {
                        tag,
                        columns: std::mem::take(&mut columns),
                        rows: std::mem::take(&mut rows),
                        streamed,
                        notices: std::mem::take(&mut notices),
                    });
                }
                b'I' => {}
                b'N' => {
                    let n = error_fields(&body);
                    notices.push(format!("{}: {}", n.code_severity(), n.message));
                }
                b'E' => {
                    if let Some(sink) = io.rows.as_deref_mut().filter(|_| !columns.is_empty()) {
                        sink.end(None)?;
                    }
                    columns.clear();
                    rows.clear();
                    failed = Some(error_fields(&body).into_error());
                }
                b'G' => self.copy_in(io)?,
                b'H' => {}
                b'd' => match io.stdout.as_deref_mut() {
                    Some(out) => out.write_all(&body)?,
                    None => io::stdout().write_all(&body)?,
                },
                b'c' => {
                    if let Some(out) = io.stdout.as_deref_mut() {
                        out.flush()?;
                    }
                }
                b'Z' => return Ok(failed.map_or(Ok(()), Err)),
                // ParameterStatus, NotificationResponse: nothing to do.
                b'S' | b'A' => {}
                other => {
                    return Err(ClientError::Protocol(format!(
                        "unexpected message type '{}'",
                        other as char
                    )))
                }
            }
        }
    }

    /// Sends COPY FROM STDIN's input from `io.stdin`, then CopyDone (or
    /// CopyFail if there is no input).
    fn copy_in(&mut self, io: &mut StatementIo) -> Result<(), ClientError> {
        let Some(input) = io.stdin.as_deref_mut() else {
            return self.send(&CopyFail::new(
                "the client has no input for COPY FROM STDIN".into(),
            ));
        };
        let mut chunk = vec![0u8; COPY_CHUNK_BYTES];
        // Bounded by the input: each pass sends what one read gave.
        loop {
            let n = match input.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    return self.send(&CopyFail::new(format!("reading the input failed: {e}")))
                }
            };
            self.send(&CopyData::new(bytes::Bytes::copy_from_slice(&chunk[..n])))?;
        }
        self.send(&CopyDone::new())
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.send(&Terminate::new());
    }
}

/// The fields of an ErrorResponse or NoticeResponse.
struct Fields {
    severity: String,
    code: String,
    message: String,
}

impl Fields {
    fn code_severity(&self) -> &str {
        &self.severity
    }

    fn into_error(self) -> ServerError {
        ServerError {
            code: self.code,
            message: self.message,
        }
    }
}

fn error_fields(body: &[u8]) -> Fields {
    let mut f = Fields {
        severity: "ERROR".into(),
        code: String::new(),
        message: String::new(),
    };
    let mut rest = body;
    while let [kind, tail @ ..] = rest {
        if *kind == 0 {
            break;
        }
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        let value = String::from_utf8_lossy(&tail[..end]).into_owned();
        match kind {
            b'V' => f.severity = value,
            b'C' => f.code = value,
            b'M' => f.message = value,
            _ => {}
        }
        rest = tail.get(end + 1..).unwrap_or(&[]);
    }
    f
}

fn cstring(body: &[u8]) -> String {
    let end = body.iter().position(|&b| b == 0).unwrap_or(body.len());
    String::from_utf8_lossy(&body[..end]).into_owned()
}

/// A RowDescription's columns, typed by their OIDs.
fn row_description(body: &[u8]) -> Result<Vec<ResultColumn>, ClientError> {
    let bad = || ClientError::Protocol("a malformed RowDescription".into());
    let mut b = body;
    if b.len() < 2 {
        return Err(bad());
    }
    let n = b.get_i16();
    let mut columns = Vec::new();
    for _ in 0..n {
        let end = b.iter().position(|&c| c == 0).ok_or_else(bad)?;
        let name = String::from_utf8_lossy(&b[..end]).into_owned();
        b = &b[end + 1..];
        if b.len() < 18 {
            return Err(bad());
        }
        let _table = b.get_i32();
        let _column = b.get_i16();
        let oid = b.get_u32();
        let _size = b.get_i16();
        let modifier = b.get_i32();
        let _format = b.get_i16();
        columns.push(ResultColumn {
            name,
            ty: values::column_type(oid, modifier),
        });
    }
    Ok(columns)
}

/// A DataRow's values (text format), read as their columns' types.
fn data_row(body: &[u8], columns: &[ResultColumn]) -> Result<Vec<Value>, ClientError> {
    let bad = || ClientError::Protocol("a malformed DataRow".into());
    let mut b = body;
    if b.len() < 2 {
        return Err(bad());
    }
    let n = b.get_i16() as usize;
    let mut row = Vec::with_capacity(n);
    for i in 0..n {
        if b.len() < 4 {
            return Err(bad());
        }
        let len = b.get_i32();
        if len < 0 {
            row.push(Value::Null);
            continue;
        }
        let len = len as usize;
        let bytes = b.get(..len).ok_or_else(bad)?;
        let text = String::from_utf8_lossy(bytes);
        let ty = columns.get(i).map_or(ColumnType::Text, |c| c.ty);
        // As the server printed it; a value that does not read back as
        // its type (none should) is shown as the text it was.
        row.push(parse_value(&text, ty).unwrap_or_else(|_| Value::Text(text.into_owned())));
        b = &b[len..];
    }
    Ok(row)
}
