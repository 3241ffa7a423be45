//! TLS for the server's TCP connections (`ssl = on`), as PostgreSQL
//! offers it: a client asks with an SSLRequest before its startup
//! message, the server answers `S` and the TLS handshake follows on the
//! same socket; every later byte both ways is inside TLS.
//!
//! ```text
//! SSLRequest ─▶ 'S' ─▶ TLS handshake (rustls) ─▶ StartupMessage … (encrypted)
//! SSLRequest ─▶ 'N' ─▶ StartupMessage … (in the clear; ssl = off, or a Unix socket)
//! ```
//!
//! The certificate and key are loaded once, at start-up
//! ([`server_config`]), from `ssl_cert_file` and `ssl_key_file` (relative
//! to the data directory: `server.crt`, `server.key`, PostgreSQL's names);
//! anything wrong with them stops the server from starting, with the file
//! and the fix named, rather than failing each connection later.
//!
//! The connection threads block on their sockets, so the TLS session is
//! rustls's blocking [`StreamOwned`] over the TCP socket. Its reader and
//! writer halves (`wire`) share it behind a mutex; both run on the
//! connection's one thread, one after the other, so the lock is never
//! contended. Shutdown and timeouts act on the raw socket beneath, never
//! through the lock (a thread blocked reading holds it).
//!
//! Only the Unix socket is never encrypted, as in PostgreSQL: its
//! directory's permissions are its guard. Over TLS, SCRAM is offered with
//! channel binding (`SCRAM-SHA-256-PLUS`, see `auth`), binding to the
//! certificate's hash ([`server_end_point`]).

use std::io;
use std::net::TcpStream;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use thiserror::Error;

use super::wire::Stream;

/// A TLS session over a client's TCP socket.
pub type TlsSession = StreamOwned<ServerConnection, TcpStream>;

/// The ALPN protocol name PostgreSQL 17 gives its connections: offered,
/// so that a client that sends ALPN finds the server speaks PostgreSQL.
const ALPN_POSTGRESQL: &[u8] = b"postgresql";

/// How to make a certificate and key where none are: said with every
/// error about the files.
const MAKE_ONE: &str = "make a certificate and key (for a test, in the data directory: openssl req -new -x509 -days 365 -nodes -subj /CN=localhost -keyout server.key -out server.crt; chmod 600 server.key), point ssl_cert_file and ssl_key_file at yours, or set ssl = off";

/// What keeps `ssl = on` from working; the server does not start.
#[derive(Debug, Error)]
pub enum TlsError {
    #[error(
        "could not load server certificate file \"{path}\" (ssl_cert_file): {source}; {MAKE_ONE}"
    )]
    CertFile { path: PathBuf, source: io::Error },
    #[error("could not load private key file \"{path}\" (ssl_key_file): {source}; {MAKE_ONE}")]
    KeyFile { path: PathBuf, source: io::Error },
    #[error("server certificate file \"{path}\" (ssl_cert_file) holds no PEM certificate ({reason}); it must hold \"-----BEGIN CERTIFICATE-----\" blocks, the server's first")]
    BadCertificate { path: PathBuf, reason: String },
    #[error("private key file \"{path}\" (ssl_key_file) holds no PEM private key ({reason}); it must hold one unencrypted key (\"-----BEGIN PRIVATE KEY-----\", RSA or EC)")]
    BadKey { path: PathBuf, reason: String },
    #[error("private key file \"{path}\" has group or world access (mode {mode:04o}); it must be u=rw (0600) or less if owned by the server's user, or u=rw,g=r (0640) or less if owned by root: chmod 600 \"{path}\"")]
    KeyPermissions { path: PathBuf, mode: u32 },
    #[error("could not use certificate \"{cert}\" with private key \"{key}\": {reason}; check that the key is the certificate's (its public key must match)")]
    Unusable {
        cert: PathBuf,
        key: PathBuf,
        reason: rustls::Error,
    },
}

/// What `ssl = on` serves with: the TLS configuration, and the
/// certificate's `tls-server-end-point` channel-binding data, if its
/// signature algorithm names a hash (RFC 5929).
#[derive(Debug)]
pub struct ServerTls {
    pub config: Arc<ServerConfig>,
    pub end_point: Option<Vec<u8>>,
}

/// What `ssl = on` serves with: the certificate chain in `cert_file` and
/// its key in `key_file` (each relative to `dir` unless absolute),
/// checked to belong together.
pub fn server_config(dir: &Path, cert_file: &Path, key_file: &Path) -> Result<ServerTls, TlsError> {
    // Relative to the data directory unless absolute (`join` keeps an
    // absolute path as it is).
    let cert_path = dir.join(cert_file);
    let key_path = dir.join(key_file);
    let cert_pem = std::fs::read(&cert_path).map_err(|source| TlsError::CertFile {
        path: cert_path.clone(),
        source,
    })?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadCertificate {
            path: cert_path.clone(),
            reason: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::BadCertificate {
            path: cert_path,
            reason: "none found".into(),
        });
    }
    let end_point = server_end_point(&chain[0]);
    if end_point.is_none() {
        log::warn!(
            "the certificate in \"{}\" is signed with an algorithm that names no single hash (Ed25519, RSA-PSS): SCRAM-SHA-256-PLUS (channel binding) is not offered",
            cert_path.display()
        );
    }
    check_key_permissions(&key_path)?;
    let key_pem = std::fs::read(&key_path).map_err(|source| TlsError::KeyFile {
        path: key_path.clone(),
        source,
    })?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::BadKey {
        path: key_path.clone(),
        reason: e.to_string(),
    })?;
    let unusable = |reason| TlsError::Unusable {
        cert: cert_path.clone(),
        key: key_path.clone(),
        reason,
    };
    let mut config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(unusable)?
            .with_no_client_auth()
            // Checks that the key is the first certificate's.
            .with_single_cert(chain, key)
            .map_err(unusable)?;
    config.alpn_protocols = vec![ALPN_POSTGRESQL.to_vec()];
    Ok(ServerTls {
        config: Arc::new(config),
        end_point,
    })
}

/// The `tls-server-end-point` channel-binding data of certificate `der`
/// (RFC 5929 section 4.1): its hash by the hash its signature algorithm
/// uses, SHA-256 for MD5 and SHA-1, as PostgreSQL computes it (and
/// libpq, and tokio-postgres). `None` for an algorithm with no single
/// hash (Ed25519, RSA-PSS) or a certificate that does not parse; then
/// channel binding is not offered.
pub fn server_end_point(der: &[u8]) -> Option<Vec<u8>> {
    use sha2::{Digest, Sha256, Sha384, Sha512};
    // Certificate ::= SEQUENCE { tbsCertificate SEQUENCE, signatureAlgorithm
    // SEQUENCE { algorithm OBJECT IDENTIFIER, … }, signature BIT STRING }
    let (certificate, _) = der_item(der, DER_SEQUENCE)?;
    let (_, rest) = der_item(certificate, DER_SEQUENCE)?;
    let (algorithm, _) = der_item(rest, DER_SEQUENCE)?;
    let (oid, _) = der_item(algorithm, DER_OID)?;
    /// 1.2.840.113549.1.1 (PKCS #1 signatures) and 1.2.840.10045.4
    /// (ECDSA signatures), as DER encodes their arcs.
    const PKCS1: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01];
    const ECDSA: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04];
    enum Hash {
        Sha256,
        Sha384,
        Sha512,
    }
    let hash = if let Some(last) = oid.strip_prefix(PKCS1) {
        match last {
            // md5WithRSA, sha1WithRSA: SHA-256 (RFC 5929), sha256WithRSA.
            [0x04] | [0x05] | [0x0b] => Hash::Sha256,
            [0x0c] => Hash::Sha384,
            [0x0d] => Hash::Sha512,
            _ => return None,
        }
    } else if let Some(last) = oid.strip_prefix(ECDSA) {
        match last {
            // ecdsa-with-SHA1 (4.1), ecdsa-with-SHA256 (4.3.2), -384, -512.
            [0x01] | [0x03, 0x02] => Hash::Sha256,
            [0x03, 0x03] => Hash::Sha384,
            [0x03, 0x04] => Hash::Sha512,
            _ => return None,
        }
    } else {
        return None;
    };
    Some(match hash {
        Hash::Sha256 => Sha256::digest(der).to_vec(),
        Hash::Sha384 => Sha384::digest(der).to_vec(),
        Hash::Sha512 => Sha512::digest(der).to_vec(),
    })
}

const DER_SEQUENCE: u8 = 0x30;
const DER_OID: u8 = 0x06;

/// The content of the DER item at the start of `bytes` if its tag is
/// `tag`, and what follows it; `None` if it is not, or is cut short.
fn der_item(bytes: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&first, rest) = bytes.split_first()?;
    if first != tag {
        return None;
    }
    let (&length_byte, rest) = rest.split_first()?;
    let (length, rest) = if length_byte < 0x80 {
        (usize::from(length_byte), rest)
    } else {
        // Long form: that many bytes of length follow (a certificate
        // needs at most 4).
        let count = usize::from(length_byte & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let length = rest[..count]
            .iter()
            .fold(0usize, |n, &b| (n << 8) | usize::from(b));
        (length, &rest[count..])
    };
    if rest.len() < length {
        return None;
    }
    Some(rest.split_at(length))
}

/// PostgreSQL's rule for the key file (`check_ssl_key_file_permissions`):
/// no access for others, and for the group only when root owns it (a
/// key shared through a group such as ssl-cert).
fn check_key_permissions(path: &Path) -> Result<(), TlsError> {
    let meta = std::fs::metadata(path).map_err(|source| TlsError::KeyFile {
        path: path.to_path_buf(),
        source,
    })?;
    if !meta.is_file() {
        return Err(TlsError::KeyFile {
            path: path.to_path_buf(),
            source: io::Error::other("not a regular file"),
        });
    }
    let mode = meta.mode() & 0o7777;
    let allowed_beyond_owner = if meta.uid() == 0 { 0o040 } else { 0 };
    if mode & 0o077 & !allowed_beyond_owner != 0 {
        return Err(TlsError::KeyPermissions {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

/// Runs the server's side of the TLS handshake on `socket` (after the
/// `S` answer to an SSLRequest); returns the connection's stream, now
/// encrypted. Each read waits at most the socket's read timeout (the
/// startup's), and the handshake is a few round trips, so a client that
/// stalls it is cut off as one that stalls startup is.
pub fn accept(config: &Arc<ServerConfig>, socket: TcpStream) -> io::Result<Stream> {
    let raw = socket.try_clone()?;
    let conn = ServerConnection::new(Arc::clone(config)).map_err(io::Error::other)?;
    let mut session = StreamOwned::new(conn, socket);
    // Each pass moves the handshake on by at least one flight, or fails
    // (a broken handshake is an error, EOF included).
    while session.conn.is_handshaking() {
        let (read, written) = session.conn.complete_io(&mut session.sock)?;
        if read == 0 && written == 0 && session.conn.is_handshaking() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(Stream::Tls {
        session: Arc::new(Mutex::new(session)),
        socket: raw,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_missing_certificate_names_the_file_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let e = server_config(dir.path(), Path::new("server.crt"), Path::new("server.key"))
            .unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, TlsError::CertFile { .. }), "{text}");
        assert!(text.contains("server.crt"), "{text}");
        assert!(text.contains("ssl = off"), "{text}");
    }

    #[test]
    fn a_key_others_can_read_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("server.key");
        std::fs::write(&key, "not a key").unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = check_key_permissions(&key).unwrap_err();
        assert!(
            matches!(e, TlsError::KeyPermissions { mode: 0o644, .. }),
            "{e}"
        );
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        check_key_permissions(&key).unwrap();
    }

    #[test]
    fn the_end_point_is_the_certificates_hash_by_its_signatures_hash() {
        use sha2::{Digest, Sha256};
        // rcgen signs with ECDSA P-256 and SHA-256 by default.
        let made = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let der = made.cert.der().to_vec();
        assert_eq!(server_end_point(&der), Some(Sha256::digest(&der).to_vec()));
        assert_eq!(server_end_point(&der[..der.len() / 2]), None);
        assert_eq!(server_end_point(b"not a certificate"), None);
    }

    #[test]
    fn text_that_is_not_pem_is_no_certificate() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("server.crt"), "hello").unwrap();
        let e = server_config(dir.path(), Path::new("server.crt"), Path::new("server.key"))
            .unwrap_err();
        assert!(matches!(e, TlsError::BadCertificate { .. }), "{e}");
    }
}
