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

use bytes::{Buf, BytesMut};
use pgwire::messages::{DecodeContext, Message, PgWireFrontendMessage};
use thiserror::Error;

/// The longest frontend message accepted (a query's text, a Bind's
/// values, one CopyData). PostgreSQL allows 1 GB; a client that needs
/// more than this for one message is sending data that belongs in COPY.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;
/// Outgoing bytes gathered before they are written to the socket.
pub const WRITE_BUFFER_BYTES: usize = 64 << 10;
/// Bytes read from the socket at a time.
const READ_CHUNK_BYTES: usize = 64 << 10;

/// A client's connection, over TCP or a Unix socket.
#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }

    /// Ends both directions: a thread blocked reading it returns.
    pub fn shutdown(&self) {
        // It may already be closed by the client; nothing to do then.
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
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
    pub ctx: DecodeContext,
}

impl MessageReader {
    pub fn new(stream: Stream) -> MessageReader {
        MessageReader {
            stream,
            buf: BytesMut::with_capacity(READ_CHUNK_BYTES),
            ctx: DecodeContext::default(),
        }
    }

    /// The connection's stream (to register a handle on it).
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// The next message; `None` if the client closed the connection
    /// between messages.
    pub fn next(&mut self) -> Result<Option<PgWireFrontendMessage>, WireError> {
        loop {
            self.check_length()?;
            match PgWireFrontendMessage::decode(&mut self.buf, &self.ctx) {
                Ok(Some(m)) => return Ok(Some(m)),
                Ok(None) => {}
                Err(e) => return Err(WireError::Malformed(e.to_string())),
            }
            let start = self.buf.len();
            self.buf.resize(start + READ_CHUNK_BYTES, 0);
            let n = match self.stream.read(&mut self.buf[start..]) {
                Ok(n) => n,
                Err(e) => {
                    self.buf.truncate(start);
                    return Err(e.into());
                }
            };
            self.buf.truncate(start + n);
            if n == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(WireError::Eof)
                };
            }
        }
    }

    /// Refuses a message whose length word is too large, before waiting
    /// for its bytes. Messages before startup have no type byte.
    fn check_length(&self) -> Result<(), WireError> {
        let at = if self.ctx.awaiting_frontend_startup {
            0
        } else {
            1
        };
        if self.buf.len() < at + 4 {
            return Ok(());
        }
        let length = (&self.buf[at..at + 4]).get_i32();
        if length < 4 || length as usize > MAX_MESSAGE_BYTES {
            return Err(WireError::TooLong {
                length: length.max(0) as usize,
            });
        }
        Ok(())
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

    /// Writes out everything queued: before the server waits for the
    /// client.
    pub fn flush(&mut self) -> io::Result<()> {
        self.write_out()?;
        self.stream.flush()
    }
}
