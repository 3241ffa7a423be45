//! SCRAM-SHA-256 (RFC 5802, RFC 7677) as PostgreSQL stores and checks
//! passwords: the verifier a role's password is kept as, and the
//! arithmetic both sides of the exchange share. The exchange itself (the
//! messages and their order) is the server's, in `server::auth`.
//!
//! A verifier is PostgreSQL's text form,
//! `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` (base64
//! throughout), so a verifier copied from `pg_authid.rolpassword` works
//! here and one made here works in PostgreSQL:
//!
//! ```text
//! SaltedPassword = PBKDF2-HMAC-SHA-256(SASLprep(password), salt, iterations)
//! ClientKey = HMAC(SaltedPassword, "Client Key")    StoredKey = SHA-256(ClientKey)
//! ServerKey = HMAC(SaltedPassword, "Server Key")
//! ```
//!
//! The server never sees the password: the client proves it knows
//! ClientKey by sending `ClientKey XOR HMAC(StoredKey, AuthMessage)`, and
//! the server proves it holds the verifier with
//! `HMAC(ServerKey, AuthMessage)`.
//!
//! ```
//! use aiostore::catalog::scram::Verifier;
//! let v = Verifier::from_password("pencil", b"0123456789abcdef", 4096);
//! let text = v.to_string();
//! assert!(text.starts_with("SCRAM-SHA-256$4096:"));
//! assert_eq!(Verifier::parse(&text), Some(v));
//! ```

use std::fmt;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// The mechanism's name, as the server advertises it and verifiers
/// start with.
pub const MECHANISM: &str = "SCRAM-SHA-256";
/// PBKDF2 iterations of a new verifier (PostgreSQL's
/// `scram_iterations` default).
pub const ITERATIONS: u32 = 4096;
/// Bytes of a new verifier's random salt (PostgreSQL's
/// SCRAM_DEFAULT_SALT_LEN).
pub const SALT_BYTES: usize = 16;
/// Bytes of a SHA-256 digest, hence of every key.
pub const KEY_BYTES: usize = 32;
/// Most iterations a verifier may ask for: a stored verifier is trusted,
/// but a damaged one must not make a login compute for hours.
pub const ITERATIONS_MAX: u32 = 1 << 24;

/// A key: a SHA-256 digest or an HMAC-SHA-256.
pub type Key = [u8; KEY_BYTES];

/// A password in SCRAM-SHA-256 form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verifier {
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub stored_key: Key,
    pub server_key: Key,
}

/// HMAC-SHA-256 of the concatenation of `parts` under `key`.
pub fn hmac(key: &[u8], parts: &[&[u8]]) -> Key {
    // HMAC accepts a key of any length (a long one is hashed first).
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

/// SHA-256 of `data`.
pub fn sha256(data: &[u8]) -> Key {
    Sha256::digest(data).into()
}

/// The password as SCRAM hashes it: SASLprep'd (RFC 4013), or as given if
/// SASLprep refuses it (prohibited characters), as PostgreSQL and libpq
/// both do so that any password still works.
pub fn prepare_password(password: &str) -> std::borrow::Cow<'_, str> {
    stringprep::saslprep(password).unwrap_or(std::borrow::Cow::Borrowed(password))
}

/// SaltedPassword: PBKDF2-HMAC-SHA-256 of the prepared password.
pub fn salted_password(password: &str, salt: &[u8], iterations: u32) -> Key {
    let mut out = [0u8; KEY_BYTES];
    pbkdf2::pbkdf2_hmac::<Sha256>(
        prepare_password(password).as_bytes(),
        salt,
        iterations,
        &mut out,
    );
    out
}

impl Verifier {
    /// The verifier of `password` with `salt` and `iterations`.
    pub fn from_password(password: &str, salt: &[u8], iterations: u32) -> Verifier {
        assert!(iterations >= 1, "SCRAM needs at least one iteration");
        let salted = salted_password(password, salt, iterations);
        Verifier {
            iterations,
            salt: salt.to_vec(),
            stored_key: sha256(&hmac(&salted, &[b"Client Key"])),
            server_key: hmac(&salted, &[b"Server Key"]),
        }
    }

    /// The verifier of `password` with a new random salt and the default
    /// iterations (what CREATE ROLE … PASSWORD stores).
    pub fn new(password: &str) -> std::io::Result<Verifier> {
        let mut salt = [0u8; SALT_BYTES];
        fill_random(&mut salt)?;
        Ok(Verifier::from_password(password, &salt, ITERATIONS))
    }

    /// Reads PostgreSQL's text form; None if `text` is not a verifier (as
    /// PostgreSQL's `parse_scram_secret`, such a text is a password).
    pub fn parse(text: &str) -> Option<Verifier> {
        let rest = text.strip_prefix(MECHANISM)?.strip_prefix('$')?;
        let (iterations_salt, keys) = rest.split_once('$')?;
        let (iterations, salt) = iterations_salt.split_once(':')?;
        let (stored, server) = keys.split_once(':')?;
        let iterations: u32 = iterations.parse().ok()?;
        if !(1..=ITERATIONS_MAX).contains(&iterations) {
            return None;
        }
        let salt = BASE64.decode(salt).ok()?;
        if salt.is_empty() {
            return None;
        }
        Some(Verifier {
            iterations,
            salt,
            stored_key: BASE64.decode(stored).ok()?.try_into().ok()?,
            server_key: BASE64.decode(server).ok()?.try_into().ok()?,
        })
    }

    /// Checks a client's proof (ClientKey XOR ClientSignature) for
    /// `auth_message`: true if it came from the password.
    pub fn check_proof(&self, auth_message: &[u8], proof: &[u8]) -> bool {
        if proof.len() != KEY_BYTES {
            return false;
        }
        let signature = hmac(&self.stored_key, &[auth_message]);
        let mut client_key = [0u8; KEY_BYTES];
        for (k, (p, s)) in client_key.iter_mut().zip(proof.iter().zip(signature)) {
            *k = p ^ s;
        }
        // Compared in constant time: how much of it matched must not
        // show in how long the comparison took.
        let computed = sha256(&client_key);
        computed
            .iter()
            .zip(self.stored_key.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }

    /// The server's signature for `auth_message`, its half of the proof.
    pub fn server_signature(&self, auth_message: &[u8]) -> Key {
        hmac(&self.server_key, &[auth_message])
    }
}

impl fmt::Display for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{MECHANISM}${}:{}${}:{}",
            self.iterations,
            BASE64.encode(&self.salt),
            BASE64.encode(self.stored_key),
            BASE64.encode(self.server_key)
        )
    }
}

/// Fills `buf` from the kernel's random pool (getrandom(2)).
pub fn fill_random(buf: &mut [u8]) -> std::io::Result<()> {
    let mut filled = 0;
    // getrandom(2) returns at most 32 MiB per call and may be cut short
    // by a signal; a salt or a nonce takes one call.
    for _ in 0..RANDOM_ATTEMPTS_MAX {
        if filled == buf.len() {
            return Ok(());
        }
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    if filled == buf.len() {
        Ok(())
    } else {
        Err(std::io::Error::other("getrandom(2) returned too few bytes"))
    }
}

/// Calls of getrandom(2) [`fill_random`] makes at most.
const RANDOM_ATTEMPTS_MAX: usize = 16;

/// Base64 as SCRAM writes it (standard alphabet, padded).
pub fn base64_encode(data: &[u8]) -> String {
    BASE64.encode(data)
}

/// Base64 as SCRAM writes it; None if `text` is not.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    BASE64.decode(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 section 3: user "user", password "pencil", salt
    /// `W22ZaJ0SNY7soEsUEjb6gQ==`, 4096 iterations, and the exchange's
    /// messages.
    const SALT_B64: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
    const CLIENT_FIRST_BARE: &str = "n=user,r=rOprNGfwEbeRWgbNEkqO";
    const SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const CLIENT_FINAL_WITHOUT_PROOF: &str =
        "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    const PROOF_B64: &str = "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const SERVER_SIGNATURE_B64: &str = "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    fn rfc_verifier() -> Verifier {
        Verifier::from_password("pencil", &base64_decode(SALT_B64).unwrap(), 4096)
    }

    fn auth_message() -> String {
        format!("{CLIENT_FIRST_BARE},{SERVER_FIRST},{CLIENT_FINAL_WITHOUT_PROOF}")
    }

    #[test]
    fn the_rfc_7677_proof_is_accepted_and_the_server_signature_matches() {
        let v = rfc_verifier();
        let proof = base64_decode(PROOF_B64).unwrap();
        assert!(v.check_proof(auth_message().as_bytes(), &proof));
        assert_eq!(
            base64_encode(&v.server_signature(auth_message().as_bytes())),
            SERVER_SIGNATURE_B64
        );
    }

    #[test]
    fn a_proof_from_another_password_or_message_is_refused() {
        let v = rfc_verifier();
        let proof = base64_decode(PROOF_B64).unwrap();
        let mut other = auth_message();
        other.push('x');
        assert!(!v.check_proof(other.as_bytes(), &proof));
        let wrong = Verifier::from_password("pencil2", &v.salt, 4096);
        assert!(!wrong.check_proof(auth_message().as_bytes(), &proof));
        assert!(!v.check_proof(auth_message().as_bytes(), &proof[..31]));
    }

    #[test]
    fn verifier_text_is_postgresqls_and_reads_back() {
        let v = rfc_verifier();
        let text = v.to_string();
        let parts: Vec<&str> = text.split(['$', ':']).collect();
        assert_eq!(parts[0], "SCRAM-SHA-256");
        assert_eq!(parts[1], "4096");
        assert_eq!(parts[2], SALT_B64);
        assert_eq!(Verifier::parse(&text), Some(v));
        for not_one in [
            "pencil",
            "SCRAM-SHA-256$",
            "SCRAM-SHA-256$0:W22ZaJ0SNY7soEsUEjb6gQ==$a:b",
            "SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$AAAA:AAAA",
            "md5c0ffee",
        ] {
            assert_eq!(Verifier::parse(not_one), None, "{not_one}");
        }
    }

    #[test]
    fn a_new_verifier_has_a_random_salt_and_the_default_iterations() {
        let a = Verifier::new("pw").unwrap();
        let b = Verifier::new("pw").unwrap();
        assert_eq!(a.iterations, ITERATIONS);
        assert_eq!(a.salt.len(), SALT_BYTES);
        assert_ne!(a.salt, b.salt);
    }
}
