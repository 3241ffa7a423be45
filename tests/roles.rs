//! Roles in the catalog through SQL: CREATE, ALTER and DROP ROLE, their
//! errors, their durability across a restart and a crash, and the
//! password verifier's format, checked against SCRAM-SHA-256 computed
//! here from the RFCs' definitions.

mod common;

use aiostore::catalog::{current_role_name, BOOTSTRAP_ROLE_OID};
use aiostore::config::IoMethod;
use aiostore::database::Database;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use common::{crash, err, new_small_pool_db, run, small_pool_settings};
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// PostgreSQL's verifier text for `password` with `salt` and
/// `iterations`, computed from RFC 5802's definitions with the crates
/// directly (not through aiostore's code).
fn independent_verifier(password: &str, salt: &[u8], iterations: u32) -> String {
    let mut salted = [0u8; 32];
    pbkdf2::pbkdf2_hmac::<Sha256>(password.as_bytes(), salt, iterations, &mut salted);
    let hmac = |key: &[u8], data: &[u8]| {
        let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap();
        m.update(data);
        m.finalize().into_bytes().to_vec()
    };
    let client_key = hmac(&salted, b"Client Key");
    let stored_key = Sha256::digest(&client_key).to_vec();
    let server_key = hmac(&salted, b"Server Key");
    format!(
        "SCRAM-SHA-256${iterations}:{}${}:{}",
        BASE64.encode(salt),
        BASE64.encode(stored_key),
        BASE64.encode(server_key)
    )
}

/// The stored verifier of role `name`.
fn verifier_of(db: &Database, name: &str) -> Option<String> {
    db.catalog()
        .role(name)
        .unwrap_or_else(|| panic!("role {name} exists"))
        .password
        .clone()
}

/// What a role is, as a comparable tuple: login, superuser, password.
fn role(db: &Database, name: &str) -> Option<(bool, bool, Option<String>)> {
    db.catalog()
        .role(name)
        .map(|r| (r.login, r.superuser, r.password.clone()))
}

#[test]
fn a_hashed_password_is_postgresqls_verifier_and_a_verifier_is_stored_as_given() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Sync, false);
    let mut s = db.session().unwrap();
    run(&mut s, "CREATE ROLE u LOGIN PASSWORD 'pencil'");
    let stored = verifier_of(&db, "u").expect("a password");
    // SCRAM-SHA-256$4096:<16-byte salt>$<StoredKey>:<ServerKey>, the keys
    // those of "pencil" with that salt.
    let (head, _) = stored.split_once('$').unwrap();
    assert_eq!(head, "SCRAM-SHA-256");
    let iterations_salt = stored.split('$').nth(1).unwrap();
    let (iterations, salt) = iterations_salt.split_once(':').unwrap();
    assert_eq!(iterations, "4096");
    let salt = BASE64.decode(salt).unwrap();
    assert_eq!(salt.len(), 16);
    assert_eq!(stored, independent_verifier("pencil", &salt, 4096));

    // RFC 7677's salt, given as a verifier: stored as it is.
    let rfc_salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
    let given = independent_verifier("pencil", &rfc_salt, 4096);
    run(&mut s, &format!("CREATE USER v PASSWORD '{given}'"));
    assert_eq!(verifier_of(&db, "v").as_deref(), Some(given.as_str()));
    // CREATE USER is CREATE ROLE … LOGIN; CREATE ROLE's default is NOLOGIN.
    assert_eq!(role(&db, "v").map(|r| (r.0, r.1)), Some((true, false)));
    run(&mut s, "CREATE ROLE w");
    assert_eq!(role(&db, "w"), Some((false, false, None)));
}

#[test]
fn role_statements_fail_with_postgresqls_sqlstates() {
    let (_dir, _path, db) = new_small_pool_db(IoMethod::Sync, false);
    let mut s = db.session().unwrap();
    run(&mut s, "CREATE ROLE a");
    let sqlstate = |s: &mut aiostore::database::Session, text: &str| {
        aiostore::sql::execute(s, text)
            .map(drop)
            .map_err(|e| (e.sqlstate(), e.to_string()))
            .expect_err(text)
    };
    assert_eq!(
        sqlstate(&mut s, "CREATE ROLE a"),
        ("42710", "role \"a\" already exists".to_string())
    );
    assert_eq!(
        sqlstate(&mut s, "ALTER ROLE nobody LOGIN"),
        ("42704", "role \"nobody\" does not exist".to_string())
    );
    assert_eq!(
        sqlstate(&mut s, "DROP ROLE nobody"),
        ("42704", "role \"nobody\" does not exist".to_string())
    );
    let owner = current_role_name();
    assert_eq!(
        sqlstate(&mut s, &format!("DROP ROLE \"{owner}\"")).0,
        "2BP01"
    );
    assert_eq!(sqlstate(&mut s, "CREATE ROLE b CREATEDB").0, "0A000");
    assert_eq!(sqlstate(&mut s, "ALTER ROLE a LOGIN NOLOGIN").0, "42601");
    assert_eq!(sqlstate(&mut s, "CREATE ROLE public").0, "42939");
    // Outside transaction blocks only, as DROP TABLE.
    run(&mut s, "BEGIN");
    assert_eq!(sqlstate(&mut s, "CREATE ROLE c").0, "25001");
    run(&mut s, "ROLLBACK");
    // IF EXISTS: a notice, no error.
    let r = run(&mut s, "DROP ROLE IF EXISTS nobody");
    assert_eq!(
        r[0].notices,
        ["NOTICE: role \"nobody\" does not exist, skipping"]
    );
    // The owner's role: made when the directory opened.
    let owner_role = db.catalog().role(&owner).unwrap();
    assert_eq!(owner_role.oid, BOOTSTRAP_ROLE_OID);
    assert!(owner_role.superuser && owner_role.login && owner_role.password.is_none());
}

#[test]
fn roles_survive_a_restart_and_a_crash() {
    let (_dir, path, db) = new_small_pool_db(IoMethod::Worker, false);
    {
        let mut s = db.session().unwrap();
        run(&mut s, "CREATE ROLE keep LOGIN PASSWORD 'one'");
        run(&mut s, "CREATE ROLE changed NOLOGIN");
        run(&mut s, "CREATE ROLE gone");
        run(
            &mut s,
            "ALTER ROLE changed WITH LOGIN SUPERUSER PASSWORD 'two'",
        );
        run(&mut s, "DROP ROLE gone");
    }
    let before: Vec<_> = ["keep", "changed", "gone"]
        .iter()
        .map(|n| role(&db, n))
        .collect();
    assert_eq!(before[1].as_ref().map(|r| (r.0, r.1)), Some((true, true)));
    assert_eq!(before[2], None);
    drop(db);
    let db = Database::open(&path, &small_pool_settings(IoMethod::Worker, false)).unwrap();
    let after: Vec<_> = ["keep", "changed", "gone"]
        .iter()
        .map(|n| role(&db, n))
        .collect();
    assert_eq!(after, before, "after a restart");

    // Changed again, then killed: what each statement reported is there
    // after recovery, and a role changed twice has one row (a third
    // change and a drop work on it).
    {
        let mut s = db.session().unwrap();
        run(&mut s, "ALTER ROLE changed NOSUPERUSER PASSWORD NULL");
        run(&mut s, "ALTER ROLE keep NOLOGIN");
        run(&mut s, "CREATE ROLE late LOGIN");
        run(&mut s, "DROP ROLE IF EXISTS never_was");
    }
    let before = ["keep", "changed", "late"].map(|n| role(&db, n));
    crash(db);
    let db = Database::open(&path, &small_pool_settings(IoMethod::Worker, false)).unwrap();
    assert!(db.recovery().is_some(), "the crash was recovered from");
    let after = ["keep", "changed", "late"].map(|n| role(&db, n));
    assert_eq!(after, before, "after a crash");
    assert_eq!(after[1], Some((true, false, None)));
    let mut s = db.session().unwrap();
    run(&mut s, "ALTER ROLE changed SUPERUSER");
    run(&mut s, "DROP ROLE changed");
    drop(s);
    drop(db);
    let db = Database::open(&path, &small_pool_settings(IoMethod::Worker, false)).unwrap();
    assert_eq!(role(&db, "changed"), None, "no older row came back");
    let mut s = db.session().unwrap();
    assert!(err(&mut s, "DROP ROLE changed").contains("does not exist"));
}

/// A data directory made before roles existed has no roles relation:
/// it opens, with the relation made and the owner's role in it (no
/// password), so its owner can still connect over the Unix socket.
#[test]
fn a_directory_made_before_roles_opens_with_its_owners_role() {
    let (_dir, path, db) = new_small_pool_db(IoMethod::Sync, false);
    let mut s = db.session().unwrap();
    run(
        &mut s,
        "CREATE TABLE t (a integer); INSERT INTO t VALUES (1)",
    );
    drop(s);
    drop(db);
    // As such a directory is after a clean shutdown: no base/4.
    std::fs::remove_file(path.join("base").join("4")).unwrap();
    let db = Database::open(&path, &small_pool_settings(IoMethod::Sync, false)).unwrap();
    let owner = db
        .catalog()
        .role(&current_role_name())
        .expect("the owner's role");
    assert_eq!(owner.oid, BOOTSTRAP_ROLE_OID);
    assert!(owner.login && owner.superuser && owner.password.is_none());
    assert_eq!(db.catalog().roles().len(), 1);
    let mut s = db.session().unwrap();
    assert_eq!(common::ints(&mut s, "SELECT count(*) FROM t"), [1]);
    drop(s);
    drop(db);
    // And it stays: opened again, nothing is added twice.
    let db = Database::open(&path, &small_pool_settings(IoMethod::Sync, false)).unwrap();
    assert_eq!(db.catalog().roles().len(), 1);
}
