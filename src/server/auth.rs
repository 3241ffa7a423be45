//! Authentication: who a connection is, decided once per connection
//! between its startup message and AuthenticationOk.
//!
//! ```text
//! TCP:          StartupMessage ─▶ AuthenticationSASL ["SCRAM-SHA-256"]
//!               SASLInitialResponse (client-first) ─▶ AuthenticationSASLContinue (server-first)
//!               SASLResponse (client-final) ─▶ AuthenticationSASLFinal (server-final)
//!               ─▶ AuthenticationOk …
//! Unix socket:  StartupMessage ─▶ AuthenticationOk …   (trust, the default)
//! ```
//!
//! TCP connections always authenticate with SCRAM-SHA-256 (RFC 5802,
//! 7677; the arithmetic is in `catalog::scram`): the role must exist,
//! have LOGIN, and have a password. Unix-socket connections are `trust`
//! for any role that exists and has LOGIN, as PostgreSQL's initdb sets up
//! `local all all trust`: the socket directory's permissions decide who
//! may connect (keep `unix_socket_directories` to directories only trusted
//! users can write to and reach). `unix_socket_authentication =
//! scram-sha-256` asks for the password on the socket too.
//!
//! Over TLS the server offers `SCRAM-SHA-256-PLUS` first, with channel
//! binding `tls-server-end-point` (RFC 5929: the hash of the server's
//! certificate, see `tls::server_end_point`), as PostgreSQL does: the
//! client's proof then covers the certificate it saw, so a man in the
//! middle holding another certificate cannot relay the exchange. Plain
//! `SCRAM-SHA-256` is offered too; a client that chooses it while saying
//! it could bind (`y`) is refused, since the server could (a downgrade).
//! In the clear only `SCRAM-SHA-256` is offered, and `y` is accepted.
//!
//! # Failing alike
//!
//! A wrong password, a role that does not exist and a role without a
//! password all fail the same way: the exchange runs to its end (for an
//! unknown role, or one without a password, with a made-up salt derived
//! from the name and the server's secret, as PostgreSQL's mock
//! authentication does, so the salt of a name is the same on every try),
//! and the error is the same `password authentication failed for user
//! "x"` (28P01). A role without LOGIN is told so (28000), but only after
//! its password was right, since only then would PostgreSQL tell. Every
//! failure is sent [`AUTH_FAILURE_DELAY`] after the client's last message,
//! so neither the answer nor its timing tells the cases apart, and each
//! guess costs a connection that long.

use std::time::Duration;

use bytes::Bytes;
use pgwire::messages::startup::{Authentication, PasswordMessageFamily};
use pgwire::messages::PgWireFrontendMessage as Front;

use super::wire::{MessageReader, MessageWriter, WireError};
use crate::catalog::scram::{self, Verifier, MECHANISM};
use crate::catalog::{Catalog, RoleDef};

/// How long after the client's last message a failed authentication is
/// answered (see the module comment): long enough that guessing
/// passwords is slow, short enough for a person who mistyped.
pub const AUTH_FAILURE_DELAY: Duration = Duration::from_millis(1000);
/// Random bytes in the server's part of the nonce (PostgreSQL's
/// SCRAM_RAW_NONCE_LEN).
const SERVER_NONCE_BYTES: usize = 18;
/// Bytes of the server's secret that mock salts are derived from.
pub const MOCK_SECRET_BYTES: usize = 32;

/// The file in the data directory holding the server's secret for mock
/// salts: kept across restarts, since a salt that changed with each
/// start would tell a made-up role from a real one.
pub const MOCK_SECRET_FILE: &str = "aiostore.auth_secret";

/// The server's secret for mock salts: read from [`MOCK_SECRET_FILE`],
/// or made and written there (readable by the owner alone) the first
/// time.
pub(super) fn mock_secret(dir: &std::path::Path) -> std::io::Result<[u8; MOCK_SECRET_BYTES]> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(MOCK_SECRET_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => {
            if let Ok(secret) = <[u8; MOCK_SECRET_BYTES]>::try_from(&bytes[..]) {
                return Ok(secret);
            }
            log::warn!(
                "{} holds {} bytes, not {MOCK_SECRET_BYTES}; a new secret replaces it",
                path.display(),
                bytes.len()
            );
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut secret = [0u8; MOCK_SECRET_BYTES];
    scram::fill_random(&mut secret)?;
    let tmp = dir.join(format!("{MOCK_SECRET_FILE}.tmp"));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(&secret)?;
    file.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    Ok(secret)
}

/// How a connection authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// The role must exist and have LOGIN; no password is asked for.
    Trust,
    /// SCRAM-SHA-256 with the role's password.
    ScramSha256,
}

/// Why authentication ended without a login.
#[derive(Debug)]
pub(super) enum AuthFailure {
    /// The client left, or the connection broke.
    Gone,
    /// The client broke the protocol (08P01): sent at once.
    Protocol(String),
    /// The login is refused: sent as it is (the delay is over).
    Refused { code: &'static str, message: String },
}

impl From<WireError> for AuthFailure {
    fn from(e: WireError) -> AuthFailure {
        match e {
            WireError::Io(_) | WireError::Eof => AuthFailure::Gone,
            e @ (WireError::TooLong { .. } | WireError::Malformed(_)) => {
                AuthFailure::Protocol(e.to_string())
            }
        }
    }
}

impl From<std::io::Error> for AuthFailure {
    fn from(_: std::io::Error) -> AuthFailure {
        AuthFailure::Gone
    }
}

fn password_failed(user: &str) -> AuthFailure {
    AuthFailure::Refused {
        code: "28P01", // invalid_password
        message: format!("password authentication failed for user \"{user}\""),
    }
}

/// Waits out the failure delay, then returns `failure`.
fn after_delay(failure: AuthFailure) -> AuthFailure {
    std::thread::sleep(AUTH_FAILURE_DELAY);
    failure
}

/// Authenticates `user` by `method` over the connection; returns its role.
/// Nothing is sent on success beyond the SASL messages: the caller sends
/// AuthenticationOk.
pub(super) fn authenticate(
    catalog: &Catalog,
    reader: &mut MessageReader,
    out: &mut MessageWriter,
    user: &str,
    method: Method,
    mock_secret: &[u8; MOCK_SECRET_BYTES],
    channel_binding: Option<&[u8]>,
) -> Result<std::sync::Arc<RoleDef>, AuthFailure> {
    let role = catalog.role(user);
    let role = match method {
        Method::Trust => role.ok_or_else(|| {
            after_delay(AuthFailure::Refused {
                code: "28000", // invalid_authorization_specification
                message: format!("role \"{user}\" does not exist"),
            })
        })?,
        Method::ScramSha256 => {
            let verifier = role
                .as_ref()
                .and_then(|r| r.password.as_deref())
                .and_then(Verifier::parse);
            let doomed = verifier.is_none();
            let verifier = verifier.unwrap_or_else(|| mock_verifier(user, mock_secret));
            let mut nonce = [0u8; SERVER_NONCE_BYTES];
            scram::fill_random(&mut nonce).map_err(|e| AuthFailure::Refused {
                code: "58000",
                message: format!("could not generate a SCRAM nonce: {e}"),
            })?;
            let mut exchange = ScramExchange::new(verifier, &nonce);
            exchange.channel_binding = channel_binding.map(<[u8]>::to_vec);
            let ok = scram_over_wire(reader, out, &mut exchange)?;
            match (ok, role) {
                (true, Some(role)) if !doomed => role,
                _ => return Err(after_delay(password_failed(user))),
            }
        }
    };
    if !role.login {
        return Err(after_delay(AuthFailure::Refused {
            code: "28000",
            message: format!("role \"{user}\" is not permitted to log in"),
        }));
    }
    Ok(role)
}

/// A verifier for a role that has none, or does not exist: its salt is
/// the same for a name on every try (an attacker comparing salts learns
/// nothing), and no password matches its keys.
fn mock_verifier(user: &str, secret: &[u8; MOCK_SECRET_BYTES]) -> Verifier {
    let salt = scram::hmac(secret, &[b"mock salt", user.as_bytes()]);
    Verifier {
        iterations: scram::ITERATIONS,
        salt: salt[..scram::SALT_BYTES].to_vec(),
        stored_key: scram::hmac(secret, &[b"mock stored key", user.as_bytes()]),
        server_key: scram::hmac(secret, &[b"mock server key", user.as_bytes()]),
    }
}

/// Runs `exchange` over the connection; returns whether the client's
/// proof was right (then the server's final message has been sent).
fn scram_over_wire(
    reader: &mut MessageReader,
    out: &mut MessageWriter,
    exchange: &mut ScramExchange,
) -> Result<bool, AuthFailure> {
    // PostgreSQL's order: the one with channel binding first.
    let offered: Vec<String> = if exchange.channel_binding.is_some() {
        vec![MECHANISM_PLUS.to_string(), MECHANISM.to_string()]
    } else {
        vec![MECHANISM.to_string()]
    };
    out.send(&Authentication::SASL(offered.clone()))?;
    out.flush()?;
    let initial = next_password_message(reader)?
        .into_sasl_initial_response()
        .map_err(|e| AuthFailure::Protocol(format!("malformed SASLInitialResponse: {e}")))?;
    if !offered.contains(&initial.auth_method) {
        return Err(AuthFailure::Protocol(format!(
            "client selected an invalid SASL authentication mechanism \"{}\"; the server offers {}",
            initial.auth_method,
            offered.join(", ")
        )));
    }
    exchange.plus = initial.auth_method == MECHANISM_PLUS;
    let data = initial.data.unwrap_or_default();
    let server_first = exchange.client_first(&data)?;
    out.send(&Authentication::SASLContinue(Bytes::from(server_first)))?;
    out.flush()?;
    let response = next_password_message(reader)?
        .into_sasl_response()
        .map_err(|e| AuthFailure::Protocol(format!("malformed SASLResponse: {e}")))?;
    match exchange.client_final(&response.data)? {
        Some(server_final) => {
            out.send(&Authentication::SASLFinal(Bytes::from(server_final)))?;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// The client's next message, which must be a password message (all the
/// SASL responses are).
fn next_password_message(reader: &mut MessageReader) -> Result<PasswordMessageFamily, AuthFailure> {
    match reader.next()? {
        None => Err(AuthFailure::Gone),
        Some(Front::PasswordMessageFamily(p)) => Ok(p),
        Some(other) => Err(AuthFailure::Protocol(format!(
            "expected SASL response, got {other:?}"
        ))),
    }
}

/// The server's side of one SCRAM-SHA-256 exchange, without I/O: the
/// messages in, the answers out. Its states, in the only order allowed:
///
/// ```text
/// AwaitClientFirst ─client_first─▶ AwaitClientFinal ─client_final─▶ Done
/// ```
pub struct ScramExchange {
    verifier: Verifier,
    server_nonce: String,
    state: ScramState,
    /// The connection's channel-binding data (`tls-server-end-point`),
    /// if it is TLS and the certificate has it: then PLUS is offered.
    channel_binding: Option<Vec<u8>>,
    /// The client chose `SCRAM-SHA-256-PLUS`.
    plus: bool,
}

/// SCRAM with channel binding, offered over TLS.
pub const MECHANISM_PLUS: &str = "SCRAM-SHA-256-PLUS";
/// The one channel-binding type offered (RFC 5929), PostgreSQL's.
const CHANNEL_BINDING_TYPE: &str = "tls-server-end-point";

enum ScramState {
    AwaitClientFirst,
    AwaitClientFinal {
        /// What `c=` must say, base64-encoded: the GS2 header, then with
        /// PLUS the channel-binding data.
        binding: Vec<u8>,
        client_first_bare: String,
        server_first: String,
        /// Client's and server's nonces together.
        nonce: String,
    },
    Done,
}

fn malformed(detail: &str) -> AuthFailure {
    AuthFailure::Protocol(format!("malformed SCRAM message: {detail}"))
}

/// The value of attribute `name` (`name=value`) as the next one of
/// `parts`.
fn attribute<'a>(
    parts: &mut impl Iterator<Item = &'a str>,
    name: char,
) -> Result<&'a str, AuthFailure> {
    let part = parts
        .next()
        .ok_or_else(|| malformed(&format!("attribute \"{name}\" expected")))?;
    let mut chars = part.chars();
    match (chars.next(), chars.next()) {
        (Some(n), Some('=')) if n == name => Ok(&part[2..]),
        _ => Err(malformed(&format!(
            "attribute \"{name}\" expected, found \"{part}\""
        ))),
    }
}

impl ScramExchange {
    /// An exchange checking against `verifier`, with the server's random
    /// nonce bytes.
    pub fn new(verifier: Verifier, server_nonce: &[u8]) -> ScramExchange {
        ScramExchange {
            verifier,
            server_nonce: scram::base64_encode(server_nonce),
            state: ScramState::AwaitClientFirst,
            channel_binding: None,
            plus: false,
        }
    }

    /// Takes the client-first-message; returns the server-first-message.
    pub(super) fn client_first(&mut self, message: &[u8]) -> Result<String, AuthFailure> {
        if !matches!(self.state, ScramState::AwaitClientFirst) {
            return Err(malformed("client-first-message out of order"));
        }
        let text = std::str::from_utf8(message).map_err(|_| malformed("not UTF-8"))?;
        // gs2-header: cbind-flag "," [authzid] ","
        let mut parts = text.splitn(3, ',');
        let flag = parts.next().unwrap_or_default();
        // PostgreSQL's checks and words (read_client_first_message).
        match (flag, self.plus) {
            ("n", false) => {}
            // The client could bind but thinks the server cannot: so it
            // is in the clear; over TLS PLUS was offered, and a client
            // that saw no PLUS had its offer changed on the way.
            ("y", false) if self.channel_binding.is_none() => {}
            ("y", false) => {
                return Err(AuthFailure::Protocol(
                    "SCRAM channel binding negotiation error: the client supports SCRAM channel binding but thinks the server does not; however, this server does support channel binding".into(),
                ))
            }
            (f, true) if f.strip_prefix("p=") == Some(CHANNEL_BINDING_TYPE) => {}
            (f, true) if f.starts_with("p=") => {
                return Err(AuthFailure::Protocol(format!(
                    "unsupported SCRAM channel-binding type \"{}\"; the server binds with {CHANNEL_BINDING_TYPE}",
                    &f[2..]
                )))
            }
            (_, true) => {
                return Err(AuthFailure::Protocol(
                    "the client selected SCRAM-SHA-256-PLUS, but the SCRAM message does not specify channel binding".into(),
                ))
            }
            (f, false) if f.starts_with("p=") => {
                return Err(AuthFailure::Protocol(
                    "the client selected SCRAM-SHA-256 without channel binding, but the SCRAM message includes channel binding data".into(),
                ))
            }
            _ => return Err(malformed("unexpected channel-binding flag")),
        }
        let authzid = parts.next().ok_or_else(|| malformed("comma expected"))?;
        if !authzid.is_empty() {
            return Err(AuthFailure::Protocol(
                "client uses authorization identity, but it is not supported".into(),
            ));
        }
        let bare = parts.next().ok_or_else(|| malformed("comma expected"))?;
        let mut binding = format!("{flag},,").into_bytes();
        if self.plus {
            // PLUS is offered only with the data (scram_over_wire).
            let data = self.channel_binding.as_deref().ok_or_else(|| {
                AuthFailure::Protocol("SCRAM-SHA-256-PLUS was not offered".into())
            })?;
            binding.extend_from_slice(data);
        }
        let mut attributes = bare.split(',');
        if bare.starts_with("m=") {
            return Err(AuthFailure::Protocol(
                "client requires an unsupported SCRAM extension".into(),
            ));
        }
        // The user name is the startup message's; this one is ignored,
        // as PostgreSQL does (libpq sends it empty).
        attribute(&mut attributes, 'n')?;
        let client_nonce = attribute(&mut attributes, 'r')?;
        if client_nonce.is_empty() || !client_nonce.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            return Err(malformed("the client's nonce is empty or not printable"));
        }
        let nonce = format!("{client_nonce}{}", self.server_nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            scram::base64_encode(&self.verifier.salt),
            self.verifier.iterations
        );
        self.state = ScramState::AwaitClientFinal {
            binding,
            client_first_bare: bare.to_string(),
            server_first: server_first.clone(),
            nonce,
        };
        Ok(server_first)
    }

    /// Takes the client-final-message; returns the server-final-message
    /// if the proof was right, None if it was not.
    pub(super) fn client_final(&mut self, message: &[u8]) -> Result<Option<String>, AuthFailure> {
        let ScramState::AwaitClientFinal {
            binding: expected_binding,
            client_first_bare,
            server_first,
            nonce,
        } = std::mem::replace(&mut self.state, ScramState::Done)
        else {
            return Err(malformed("client-final-message out of order"));
        };
        let text = std::str::from_utf8(message).map_err(|_| malformed("not UTF-8"))?;
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or_else(|| malformed("proof expected"))?;
        let mut attributes = without_proof.split(',');
        let binding = attribute(&mut attributes, 'c')?;
        if scram::base64_decode(binding).as_deref() != Some(&expected_binding[..]) {
            // With PLUS: the client saw another certificate (a man in the
            // middle), or hashed it otherwise. PostgreSQL's words.
            return Err(AuthFailure::Protocol(
                "SCRAM channel binding check failed".into(),
            ));
        }
        if attribute(&mut attributes, 'r')? != nonce {
            return Err(malformed("nonce does not match"));
        }
        let proof = scram::base64_decode(proof).ok_or_else(|| malformed("proof is not base64"))?;
        let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
        if !self.verifier.check_proof(auth_message.as_bytes(), &proof) {
            return Ok(None);
        }
        let signature = self.verifier.server_signature(auth_message.as_bytes());
        Ok(Some(format!("v={}", scram::base64_encode(&signature))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 section 3's exchange, the server's nonce part being what
    /// follows the client's in its server-first-message.
    #[test]
    fn the_rfc_7677_exchange_runs_to_the_rfc_s_server_final_message() {
        let salt = scram::base64_decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let verifier = Verifier::from_password("pencil", &salt, 4096);
        let mut exchange = ScramExchange::new(verifier, b"");
        // The RFC's server nonce is not base64 of anything; set it as is.
        exchange.server_nonce = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0".into();
        let server_first = exchange
            .client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
            .unwrap();
        assert_eq!(
            server_first,
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let server_final = exchange
            .client_final(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
            .unwrap();
        assert_eq!(
            server_final.as_deref(),
            Some("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
        );
    }

    #[test]
    fn a_wrong_proof_fails_and_malformed_messages_are_protocol_errors() {
        let verifier = Verifier::from_password("pencil", b"salt", 4096);
        let mut exchange = ScramExchange::new(verifier.clone(), b"0123456789abcdefgh");
        let first = exchange.client_first(b"n,,n=,r=abc").unwrap();
        let nonce = first.split(',').next().unwrap();
        let wrong = format!("c=biws,{nonce},p={}", scram::base64_encode(&[7u8; 32]));
        assert!(exchange.client_final(wrong.as_bytes()).unwrap().is_none());
        // Nothing more is taken once done.
        assert!(matches!(
            exchange.client_final(wrong.as_bytes()),
            Err(AuthFailure::Protocol(_))
        ));
        for bad in [
            &b"p=tls-server-end-point,,n=,r=abc"[..],
            b"n,a=admin,n=,r=abc",
            b"n,,m=ext,n=,r=abc",
            b"n,,n=,r=",
            b"x,,n=,r=abc",
            b"n,,",
            b"\xff",
        ] {
            let mut e = ScramExchange::new(verifier.clone(), b"nonce");
            assert!(
                matches!(e.client_first(bad), Err(AuthFailure::Protocol(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        // Over TLS (binding data at hand): "y" is a downgrade; PLUS needs
        // "p=tls-server-end-point", and the plain mechanism no "p=".
        for (plus, message) in [
            (false, &b"y,,n=,r=abc"[..]),
            (false, b"p=tls-server-end-point,,n=,r=abc"),
            (true, b"n,,n=,r=abc"),
            (true, b"p=tls-unique,,n=,r=abc"),
        ] {
            let mut e = ScramExchange::new(verifier.clone(), b"nonce");
            e.channel_binding = Some(vec![7; 32]);
            e.plus = plus;
            assert!(
                matches!(e.client_first(message), Err(AuthFailure::Protocol(_))),
                "{}",
                String::from_utf8_lossy(message)
            );
        }
        let mut e = ScramExchange::new(verifier.clone(), b"nonce");
        e.channel_binding = Some(vec![7; 32]);
        e.plus = true;
        let first = e.client_first(b"p=tls-server-end-point,,n=,r=abc").unwrap();
        let nonce = first.split(',').next().unwrap().to_string();
        // The binding must be the header and the certificate's hash.
        let header_only = scram::base64_encode(b"p=tls-server-end-point,,");
        assert!(matches!(
            e.client_final(format!("c={header_only},{nonce},p=AAAA").as_bytes()),
            Err(AuthFailure::Protocol(m)) if m.contains("channel binding check failed")
        ));
        // A binding that is not the header's, a nonce that is not the
        // server's.
        let started = || {
            let mut e = ScramExchange::new(verifier.clone(), b"nonce");
            let first = e.client_first(b"n,,n=,r=abc").unwrap();
            let nonce = first.split(',').next().unwrap().to_string();
            (e, nonce)
        };
        let (_, nonce) = started();
        for bad in [
            format!("c=eSws,{nonce},p=AAAA"),
            "c=biws,r=abc,p=AAAA".to_string(),
            format!("c=biws,{nonce}"),
            format!("c=biws,{nonce},p=not base64!"),
        ] {
            let (mut e, _) = started();
            assert!(
                matches!(
                    e.client_final(bad.as_bytes()),
                    Err(AuthFailure::Protocol(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_mock_salt_is_the_same_for_a_name_and_differs_between_names() {
        let secret = [3u8; MOCK_SECRET_BYTES];
        assert_eq!(mock_verifier("x", &secret), mock_verifier("x", &secret));
        assert_ne!(
            mock_verifier("x", &secret).salt,
            mock_verifier("y", &secret).salt
        );
        assert_eq!(mock_verifier("x", &secret).salt.len(), scram::SALT_BYTES);
    }
}
