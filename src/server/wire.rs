//! The connection's byte streams: frontend messages read and decoded
//! (with `pgwire`'s codecs) and backend messages encoded and written.
//!
//! Memory per connection is bounded both ways. A message longer than
//! [`MAX_MESSAGE_BYTES`] is refused from its length word, before it is
//! read. Outgoing messages gather in a buffer that is written out once it
//! holds [`WRITE_BUFFER_BYTES`]; the write blocks while the client does not
//! read, which holds up the statement producing the rows, so a slow reader
//! slows its own query and costs the server nothing more.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use bytes::{Buf, BufMut, BytesMut};
use parking_lot::Mutex;
use pgwire::messages::{DecodeContext, Message, PgWireFrontendMessage};
use thiserror::Error;

use super::tls::TlsSession;

/// The longest frontend message accepted (a query's text, a Bind's
/// values, one CopyData). PostgreSQL allows 1 GB; a client that needs
/// more than this for one message is sending data that belongs in COPY.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;
/// Outgoing bytes gathered before they are written to the socket.
pub const WRITE_BUFFER_BYTES: usize = 64 << 10;
/// Bytes read from the socket at a time.
const READ_CHUNK_BYTES: usize = 64 << 10;

/// A client's connection, over TCP or a Unix socket, or TLS over TCP.
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// TLS over TCP (see `tls`): the session, shared by the connection's
    /// reader and writer (on its one thread, so never contended), and
    /// the socket beneath it, for timeouts and shutdown without the
    /// session's lock (which a thread blocked reading holds).
    Tls {
        session: Arc<Mutex<TlsSession>>,
        socket: TcpStream,
    },
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stream::Tcp(s) => f.debug_tuple("Tcp").field(s).finish(),
            Stream::Unix(s) => f.debug_tuple("Unix").field(s).finish(),
            Stream::Tls { socket, .. } => f.debug_tuple("Tls").field(socket).finish(),
        }
    }
}

impl Stream {
    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Tls { session, socket } => Stream::Tls {
                session: Arc::clone(session),
                socket: socket.try_clone()?,
            },
        })
    }

    /// A bound on each read (`None`: none).
    pub fn set_read_timeout(&self, timeout: Option<std::time::Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) | Stream::Tls { socket: s, .. } => s.set_read_timeout(timeout),
            Stream::Unix(s) => s.set_read_timeout(timeout),
        }
    }

    /// Ends both directions: a thread blocked reading it returns.
    pub fn shutdown(&self) {
        // It may already be closed by the client; nothing to do then.
        let _ = match self {
            Stream::Tcp(s) | Stream::Tls { socket: s, .. } => s.shutdown(Shutdown::Both),
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }

    /// Ends a TLS session with close_notify, as a server that closes
    /// the connection on purpose does (the client then knows nothing was
    /// cut off); nothing for a plain socket.
    pub fn close_notify(&self) {
        if let Stream::Tls { session, .. } = self {
            let mut session = session.lock();
            session.conn.send_close_notify();
            // The client may be gone already; nothing to do then.
            let _ = session.flush();
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
            Stream::Tls { session, .. } => session.lock().read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
            Stream::Tls { session, .. } => session.lock().write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
            Stream::Tls { session, .. } => session.lock().flush(),
        }
    }
}

/// What reading a message can fail on.
#[derive(Debug, Error)]
pub enum WireError {
    #[error("could not receive data from client: {0}")]
    Io(#[from] io::Error),
    /// The client closed the connection in the middle of a message.
    #[error("unexpected EOF on client connection")]
    Eof,
    #[error("invalid message length {length}: at most {MAX_MESSAGE_BYTES} bytes")]
    TooLong { length: usize },
    #[error("invalid frontend message: {0}")]
    Malformed(String),
}

/// Frontend messages from a client's stream.
pub struct MessageReader {
    stream: Stream,
    buf: BytesMut,
    /// What each read lands in, zeroed once at start: reading into `buf`'s
    /// spare room would zero [`READ_CHUNK_BYTES`] per read (a safe `read`
    /// wants initialised bytes), where a message is mostly far shorter.
    chunk: Box<[u8]>,
    pub ctx: DecodeContext,
}

impl MessageReader {
    pub fn new(stream: Stream) -> MessageReader {
        MessageReader {
            stream,
            buf: BytesMut::with_capacity(READ_CHUNK_BYTES),
            chunk: vec![0; READ_CHUNK_BYTES].into_boxed_slice(),
            ctx: DecodeContext::default(),
        }
    }

    /// The connection's stream (to register a handle on it).
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Bytes the client sent that no message has taken yet.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Reads from `stream` from now on (the connection became TLS).
    /// Nothing may be buffered from the old one: bytes sent in the clear
    /// after an SSLRequest would otherwise be taken as if they came
    /// through TLS.
    pub fn replace_stream(&mut self, stream: Stream) {
        assert_eq!(
            self.buf.len(),
            0,
            "cleartext bytes buffered across a TLS upgrade"
        );
        self.stream = stream;
    }

    /// The next message; `None` if the client closed the connection
    /// between messages.
    pub fn next(&mut self) -> Result<Option<PgWireFrontendMessage>, WireError> {
        // Each pass reads more of a message; the message's length is
        // bounded and the client closing the connection ends it.
        loop {
            if let Some(m) = self.decode_buffered()? {
                return Ok(Some(m));
            }
            let n = self.stream.read(&mut self.chunk)?;
            self.buf.extend_from_slice(&self.chunk[..n]);
            if n == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(WireError::Eof)
                };
            }
        }
    }

    /// The first buffered message, if all of it is there. A message is
    /// cut to its length word before it is decoded, and must be exactly
    /// as long as its fields (PostgreSQL's `pq_getmsgend`): `pgwire`'s
    /// decoders read from whatever buffer they are given, so a message
    /// shorter than its fields would read into the next one, or past the
    /// end (where they panic; that panic is caught and reported as the
    /// malformed message it is).
    fn decode_buffered(&mut self) -> Result<Option<PgWireFrontendMessage>, WireError> {
        if self.ctx.awaiting_frontend_ssl {
            // An SSL or GSS request (8 bytes), or a look at what comes
            // next that consumes nothing.
            return decode_guarded(&mut self.buf, &self.ctx);
        }
        // Messages before startup have no type byte.
        let at = usize::from(!self.ctx.awaiting_frontend_startup);
        if self.buf.len() < at + 4 {
            return Ok(None);
        }
        let length = (&self.buf[at..at + 4]).get_i32();
        if length < 4 || length as usize > MAX_MESSAGE_BYTES {
            return Err(WireError::TooLong {
                length: length.max(0) as usize,
            });
        }
        let total = at + length as usize;
        if self.buf.len() < total {
            self.buf.reserve(total - self.buf.len());
            return Ok(None);
        }
        let mut frame = self.buf.split_to(total);
        match decode_guarded(&mut frame, &self.ctx)? {
            Some(m) if frame.is_empty() => Ok(Some(m)),
            Some(_) => Err(WireError::Malformed(format!(
                "invalid message format: {} bytes after its last field",
                frame.len()
            ))),
            None => Err(WireError::Malformed(
                "invalid message format: shorter than its fields".into(),
            )),
        }
    }
}

/// Decodes a message from `buf`, a panic in the decoder being a malformed
/// message.
fn decode_guarded(
    buf: &mut BytesMut,
    ctx: &DecodeContext,
) -> Result<Option<PgWireFrontendMessage>, WireError> {
    let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        PgWireFrontendMessage::decode(buf, ctx)
    }));
    match decoded {
        Ok(Ok(m)) => Ok(m),
        Ok(Err(e)) => Err(WireError::Malformed(e.to_string())),
        Err(_) => Err(WireError::Malformed(
            "invalid message format: its fields run past its end".into(),
        )),
    }
}

/// Backend messages to a client's stream, gathered and written in
/// blocks.
pub struct MessageWriter {
    stream: Stream,
    buf: BytesMut,
}

impl MessageWriter {
    pub fn new(stream: Stream) -> MessageWriter {
        MessageWriter {
            stream,
            buf: BytesMut::with_capacity(WRITE_BUFFER_BYTES),
        }
    }

    /// Queues message `m`, writing out the buffer once it is full.
    pub fn send(&mut self, m: &impl Message) -> io::Result<()> {
        m.encode(&mut self.buf)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        if self.buf.len() >= WRITE_BUFFER_BYTES {
            self.write_out()?;
        }
        Ok(())
    }

    /// Queues a message of type `tag` whose body `body` appends, the
    /// length word filled in after it: a DataRow encoded in place, with
    /// no buffer of its own.
    pub fn send_built(&mut self, tag: u8, body: impl FnOnce(&mut BytesMut)) -> io::Result<()> {
        self.buf.put_u8(tag);
        let at = self.buf.len();
        self.buf.put_i32(0);
        body(&mut self.buf);
        let Ok(length) = i32::try_from(self.buf.len() - at) else {
            self.buf.truncate(at - 1);
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a message longer than 2 GiB cannot be sent",
            ));
        };
        self.buf[at..at + 4].copy_from_slice(&length.to_be_bytes());
        if self.buf.len() >= WRITE_BUFFER_BYTES {
            self.write_out()?;
        }
        Ok(())
    }

    /// Queues raw bytes (the one-byte answer to an SSL request).
    pub fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.buf.extend_from_slice(bytes);
        Ok(())
    }

    fn write_out(&mut self) -> io::Result<()> {
        self.stream.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }

    /// Writes to `stream` from now on (the connection became TLS);
    /// everything queued must have been written out to the old one.
    pub fn replace_stream(&mut self, stream: Stream) {
        assert!(self.buf.is_empty(), "unwritten bytes across a TLS upgrade");
        self.stream = stream;
    }

    /// The stream written to.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Writes out everything queued: before the server waits for the
    /// client.
    pub fn flush(&mut self) -> io::Result<()> {
        self.write_out()?;
        self.stream.flush()
    }
}
