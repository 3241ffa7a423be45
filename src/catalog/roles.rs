//! Roles in the catalog (PostgreSQL's `pg_authid`): who may connect to
//! the server, and with what password. One row each in relation 4,
//! cached by name.
//!
//! ```text
//! relation 4, roles: oid integer, name text, flags integer,
//!                    password text (NULL: none), version integer
//! ```
//!
//! `flags` holds LOGIN (bit 1) and SUPERUSER (bit 2). The password is a
//! SCRAM-SHA-256 verifier in PostgreSQL's text form (see `scram`); the
//! server never needs the password itself.
//!
//! # Changes and crashes
//!
//! CREATE, ALTER and DROP ROLE are not transactional here (PostgreSQL's
//! are): they run outside transaction blocks, as DROP TABLE does, write
//! their rows with the frozen transaction id under the catalog's DDL lock,
//! and make the log durable up to them before they return, so a role a
//! statement reported changed stays changed after a crash.
//!
//! ALTER ROLE writes the role's new row (its `version` one higher) before
//! it deletes the old one, each a WAL record of its own. A crash between
//! the two leaves both rows; loading keeps the higher version, remembers
//! both, and the next change of the role deletes both. The other order
//! could lose the role altogether.
//!
//! # The owner's role
//!
//! A data directory always has a role for its owner, the bootstrap
//! superuser (oid 10, as PostgreSQL's): `aiostore init` makes it, named
//! after the operating-system user that owns the directory, and DROP ROLE
//! refuses it. A data directory made before roles existed has no roles
//! relation: opening it creates the relation and adds the owner's role
//! without a password ([`Catalog::ensure_owner_role`]), so such a
//! directory keeps working over the Unix socket for its owner, as before.
//! (The relation is created when missing, not treated as empty, so that
//! every open directory has the same relations.)

use std::collections::BTreeMap;
use std::sync::Arc;

use thiserror::Error;

use super::{scan_rows, Catalog, CatalogError, CATALOG_WRITER};
use crate::buffer::BufferSession;
use crate::heap::{Heap, HeapError, HeapTable, Tid};
use crate::txn::FROZEN_XID;
use crate::types::{ColumnType, Value};

/// The roles relation.
pub const ROLES_REL: u32 = 4;
/// The owner's role (PostgreSQL's BOOTSTRAP_SUPERUSERID).
pub const BOOTSTRAP_ROLE_OID: u32 = 10;
/// Oids of roles CREATE ROLE makes start here (PostgreSQL's
/// FirstNormalObjectId).
pub const FIRST_ROLE_OID: u32 = 16384;
/// Longest role name, in bytes (PostgreSQL's NAMEDATALEN - 1).
pub const ROLE_NAME_BYTES_MAX: usize = 63;

const FLAG_LOGIN: i32 = 1;
const FLAG_SUPERUSER: i32 = 2;

/// What CREATE, ALTER or DROP ROLE, or a login, can fail on.
#[derive(Debug, Error)]
pub enum RoleError {
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error("role \"{0}\" already exists")]
    Exists(String),
    #[error("role \"{0}\" does not exist")]
    Missing(String),
    #[error("cannot drop role {0} because it is required by the database system")]
    Required(String),
    #[error("role name \"{0}\" is reserved")]
    Reserved(String),
    #[error(
        "role name \"{name}\" is too long ({bytes} bytes); at most {ROLE_NAME_BYTES_MAX} bytes"
    )]
    NameTooLong { name: String, bytes: usize },
    #[error("could not make a password verifier: {0}")]
    Random(std::io::Error),
    #[error("{0}; give the password itself or a SCRAM-SHA-256 verifier")]
    UnsupportedPassword(&'static str),
}

impl RoleError {
    /// PostgreSQL's SQLSTATE for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            RoleError::Catalog(e) => e.sqlstate(),
            RoleError::Exists(_) => "42710",   // duplicate_object
            RoleError::Missing(_) => "42704",  // undefined_object
            RoleError::Required(_) => "2BP01", // dependent_objects_still_exist
            RoleError::Reserved(_) => "42939", // reserved_name
            RoleError::NameTooLong { .. } => "42622", // name_too_long
            RoleError::Random(_) => "58000",   // system_error
            RoleError::UnsupportedPassword(_) => "0A000",
        }
    }
}

impl From<HeapError> for RoleError {
    fn from(e: HeapError) -> RoleError {
        RoleError::Catalog(e.into())
    }
}

impl From<crate::wal::WalError> for RoleError {
    fn from(e: crate::wal::WalError) -> RoleError {
        RoleError::Catalog(e.into())
    }
}

/// A role, as the catalog knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleDef {
    pub oid: u32,
    pub name: String,
    pub login: bool,
    pub superuser: bool,
    /// A SCRAM-SHA-256 verifier (PostgreSQL's text form), or None: no
    /// password, so no login that needs one.
    pub password: Option<String>,
    /// Counts the role's changes (see the module comment).
    version: i32,
    /// Where its catalog rows are: one, or two after a crash inside an
    /// ALTER ROLE.
    rows: Vec<Tid>,
}

/// What CREATE or ALTER ROLE sets; None leaves it (CREATE: the default,
/// NOLOGIN, NOSUPERUSER, no password).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoleOptions {
    pub login: Option<bool>,
    pub superuser: Option<bool>,
    /// `Some(None)`: PASSWORD NULL. `Some(Some(v))`: a verifier (the
    /// SQL layer hashes a password given in plain text).
    pub password: Option<Option<String>>,
}

fn flags(login: bool, superuser: bool) -> i32 {
    (if login { FLAG_LOGIN } else { 0 }) | (if superuser { FLAG_SUPERUSER } else { 0 })
}

pub(super) fn roles_heap() -> HeapTable {
    HeapTable {
        name: "catalog roles".into(),
        rel: ROLES_REL,
        types: vec![
            ColumnType::Integer,
            ColumnType::Text,
            ColumnType::Integer,
            ColumnType::Text,
            ColumnType::Integer,
        ],
        fillfactor: 100,
    }
}

/// The cached roles, by name.
#[derive(Default)]
pub(super) struct RoleCache {
    by_name: BTreeMap<String, Arc<RoleDef>>,
}

/// Loads the role rows (creating the relation in a data directory made
/// before roles existed; see the module comment).
pub(super) fn load(
    s: &mut BufferSession,
    heap: &Heap,
    lenient: bool,
) -> Result<RoleCache, CatalogError> {
    let relation = s.pool().relation(ROLES_REL);
    if !relation.exists(crate::storage::Fork::Main) {
        relation.create(crate::storage::Fork::Main)?;
    }
    let mut by_oid: BTreeMap<u32, RoleDef> = BTreeMap::new();
    for (tid, v) in scan_rows(s, heap, &roles_heap())? {
        let (oid, name, flags, password, version) = match &v[..] {
            [Value::Integer(oid), Value::Text(name), Value::Integer(flags), password, Value::Integer(version)]
                if matches!(password, Value::Text(_) | Value::Null) =>
            {
                let password = match password {
                    Value::Text(p) => Some(p.clone()),
                    _ => None,
                };
                (*oid as u32, name.clone(), *flags, password, *version)
            }
            _ => return Err(CatalogError::Damaged(format!("role row {v:?}"))),
        };
        if flags & !(FLAG_LOGIN | FLAG_SUPERUSER) != 0 {
            return Err(CatalogError::Damaged(format!(
                "role \"{name}\" has flags {flags}, which no role has"
            )));
        }
        let row = RoleDef {
            oid,
            name,
            login: flags & FLAG_LOGIN != 0,
            superuser: flags & FLAG_SUPERUSER != 0,
            password,
            version,
            rows: vec![tid],
        };
        match by_oid.get_mut(&oid) {
            None => {
                by_oid.insert(oid, row);
            }
            // A crash between an ALTER ROLE's two writes: the newer row
            // wins, and both are deleted by the next change.
            Some(held) if held.version != row.version => {
                let mut rows = held.rows.clone();
                rows.push(tid);
                if row.version > held.version {
                    *held = row;
                }
                held.rows = rows;
            }
            Some(held) => {
                return Err(CatalogError::Damaged(format!(
                    "role \"{}\" (oid {oid}) has two rows of version {} (file base/{ROLES_REL})",
                    held.name, held.version
                )))
            }
        }
    }
    let mut cache = RoleCache::default();
    for (_, role) in by_oid {
        if cache.by_name.contains_key(&role.name) {
            let what = format!("role \"{}\" is in the catalog twice", role.name);
            if !lenient {
                return Err(CatalogError::Damaged(what));
            }
            log::warn!("the catalog is damaged: {what}; with zero_damaged_pages one is left out");
            continue;
        }
        cache.by_name.insert(role.name.clone(), Arc::new(role));
    }
    Ok(cache)
}

/// Refuses names PostgreSQL refuses for a role.
fn check_name(name: &str) -> Result<(), RoleError> {
    if matches!(name, "public" | "none") || name.starts_with("pg_") {
        return Err(RoleError::Reserved(name.to_string()));
    }
    if name.len() > ROLE_NAME_BYTES_MAX {
        return Err(RoleError::NameTooLong {
            name: name.to_string(),
            bytes: name.len(),
        });
    }
    Ok(())
}

impl Catalog {
    /// The role called `name`.
    pub fn role(&self, name: &str) -> Option<Arc<RoleDef>> {
        self.roles.read().by_name.get(name).cloned()
    }

    /// Every role, by name.
    pub fn roles(&self) -> Vec<Arc<RoleDef>> {
        self.roles.read().by_name.values().cloned().collect()
    }

    /// Adds the owner's role if the directory has no role at all (one
    /// made before roles existed, or by `init`): named `owner`,
    /// superuser, login, no password. Returns whether it added it.
    pub fn ensure_owner_role(
        &self,
        s: &mut BufferSession,
        heap: &Heap,
        owner: &str,
    ) -> Result<bool, CatalogError> {
        let _ddl = self.ddl.lock();
        if !self.roles.read().by_name.is_empty() {
            return Ok(false);
        }
        let role = RoleDef {
            oid: BOOTSTRAP_ROLE_OID,
            name: owner.to_string(),
            login: true,
            superuser: true,
            password: None,
            version: 0,
            rows: Vec::new(),
        };
        match self.write_role(s, heap, role) {
            Ok(_) => Ok(true),
            Err(RoleError::Catalog(e)) => Err(e),
            // Only storage fails when writing a row; kept typed anyway.
            Err(e) => Err(CatalogError::Damaged(e.to_string())),
        }
    }

    /// CREATE ROLE: a new role with `options`, durable when this returns.
    pub fn create_role(
        &self,
        s: &mut BufferSession,
        heap: &Heap,
        name: &str,
        options: RoleOptions,
    ) -> Result<(), RoleError> {
        check_name(name)?;
        let _ddl = self.ddl.lock();
        let oid = {
            let roles = self.roles.read();
            if roles.by_name.contains_key(name) {
                return Err(RoleError::Exists(name.to_string()));
            }
            roles
                .by_name
                .values()
                .map(|r| r.oid + 1)
                .max()
                .unwrap_or(0)
                .max(FIRST_ROLE_OID)
        };
        let role = RoleDef {
            oid,
            name: name.to_string(),
            login: options.login.unwrap_or(false),
            superuser: options.superuser.unwrap_or(false),
            password: options.password.flatten(),
            version: 0,
            rows: Vec::new(),
        };
        self.write_role(s, heap, role).map(drop)
    }

    /// ALTER ROLE: changes what `options` names, durable when this
    /// returns.
    pub fn alter_role(
        &self,
        s: &mut BufferSession,
        heap: &Heap,
        name: &str,
        options: RoleOptions,
    ) -> Result<(), RoleError> {
        let _ddl = self.ddl.lock();
        let old = self
            .role(name)
            .ok_or_else(|| RoleError::Missing(name.to_string()))?;
        let new = RoleDef {
            oid: old.oid,
            name: old.name.clone(),
            login: options.login.unwrap_or(old.login),
            superuser: options.superuser.unwrap_or(old.superuser),
            password: match options.password {
                Some(p) => p,
                None => old.password.clone(),
            },
            version: old.version.wrapping_add(1),
            // Until they are deleted the old rows are the role's too: a
            // DROP after a failure here must delete them as well.
            rows: old.rows.clone(),
        };
        // The new row first (see the module comment), then the old ones
        // go.
        let new = self.write_role(s, heap, new)?;
        for &tid in &old.rows {
            heap.delete(s, &roles_heap(), tid, &CATALOG_WRITER, None)?;
        }
        flush_wal(heap)?;
        let mut rows = new.rows.clone();
        rows.retain(|tid| !old.rows.contains(tid));
        debug_assert_eq!(rows.len(), 1, "a role has one live row after ALTER");
        self.roles.write().by_name.insert(
            new.name.clone(),
            Arc::new(RoleDef {
                rows,
                ..(*new).clone()
            }),
        );
        Ok(())
    }

    /// DROP ROLE: its rows go, durably. Returns false if it did not exist
    /// and `if_exists` was given.
    pub fn drop_role(
        &self,
        s: &mut BufferSession,
        heap: &Heap,
        name: &str,
        if_exists: bool,
    ) -> Result<bool, RoleError> {
        let _ddl = self.ddl.lock();
        let role = match self.role(name) {
            Some(role) => role,
            None if if_exists => return Ok(false),
            None => return Err(RoleError::Missing(name.to_string())),
        };
        if role.oid == BOOTSTRAP_ROLE_OID {
            return Err(RoleError::Required(name.to_string()));
        }
        for &tid in &role.rows {
            heap.delete(s, &roles_heap(), tid, &CATALOG_WRITER, None)?;
        }
        flush_wal(heap)?;
        self.roles.write().by_name.remove(name);
        Ok(true)
    }

    /// Inserts `role`'s row (frozen), makes the log durable up to it and
    /// puts the role in the cache in place of any of its name, its new
    /// row added to the ones it has. The caller holds the DDL lock.
    fn write_role(
        &self,
        s: &mut BufferSession,
        heap: &Heap,
        mut role: RoleDef,
    ) -> Result<Arc<RoleDef>, RoleError> {
        let table = roles_heap();
        let values = [
            Value::Integer(role.oid as i32),
            Value::Text(role.name.clone()),
            Value::Integer(flags(role.login, role.superuser)),
            role.password.clone().map_or(Value::Null, Value::Text),
            Value::Integer(role.version),
        ];
        role.rows
            .push(Self::insert_row(s, heap, &table, &values, (FROZEN_XID, 0))?);
        flush_wal(heap)?;
        let role = Arc::new(role);
        self.roles
            .write()
            .by_name
            .insert(role.name.clone(), Arc::clone(&role));
        Ok(role)
    }
}

/// The name of the operating-system user `uid` (its passwd entry), or
/// None if it has none (a container's user may not).
pub fn os_user_name(uid: u32) -> Option<String> {
    /// Bytes for the entry's strings; getpwuid_r says ERANGE if they do
    /// not fit, and a name longer than a role's would not do anyway.
    const PASSWD_BUF_BYTES: usize = 4096;
    let mut buf = vec![0 as libc::c_char; PASSWD_BUF_BYTES];
    // SAFETY: all-zero is a valid `passwd` (null pointers, zero ids);
    // getpwuid_r fills it.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is to a live local of the size passed;
    // getpwuid_r writes only into them and sets `found` to `&entry` or
    // null.
    let rc = unsafe { libc::getpwuid_r(uid, &mut entry, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || entry.pw_name.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r succeeded, so pw_name points to a NUL-terminated
    // string inside `buf`, which lives to the end of this function.
    let name = unsafe { std::ffi::CStr::from_ptr(entry.pw_name) };
    name.to_str()
        .ok()
        .filter(|n| !n.is_empty())
        .map(str::to_string)
}

/// The name the owner's role gets for a directory owned by `uid`, and
/// the name a local client connects as: the user's passwd name, else
/// `$USER`, else `postgres` (a user without a name in a container).
pub fn role_name_for_uid(uid: u32) -> String {
    os_user_name(uid)
        .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| "postgres".to_string())
}

/// The role name of the user running this process (see
/// [`role_name_for_uid`]).
pub fn current_role_name() -> String {
    role_name_for_uid(rustix::process::geteuid().as_raw())
}

/// Makes the log durable up to everything inserted so far.
fn flush_wal(heap: &Heap) -> Result<(), RoleError> {
    let wal = heap.wal();
    wal.flush(wal.insert_position())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_and_overlong_names_are_refused_as_postgresql_does() {
        assert_eq!(check_name("public").unwrap_err().sqlstate(), "42939");
        assert_eq!(check_name("pg_monitor").unwrap_err().sqlstate(), "42939");
        assert_eq!(check_name(&"r".repeat(64)).unwrap_err().sqlstate(), "42622");
        assert!(check_name(&"r".repeat(63)).is_ok());
    }

    /// A crash between ALTER ROLE's two writes leaves the old row and
    /// the new: the directory opens with the new one, and the next change
    /// deletes both, so the old one never comes back.
    #[test]
    fn a_crash_inside_alter_role_keeps_the_newer_row_and_the_next_change_removes_both() {
        let (mut s, dir) = crate::database::test_session();
        let db = s.db().clone();
        crate::sql::execute(&mut s, "CREATE ROLE r LOGIN PASSWORD 'old'").unwrap();
        let old = db.catalog().role("r").unwrap();
        // The new row of an ALTER that never got to delete the old one.
        let table = roles_heap();
        let values = [
            Value::Integer(old.oid as i32),
            Value::Text("r".into()),
            Value::Integer(FLAG_SUPERUSER),
            Value::Null,
            Value::Integer(old.version + 1),
        ];
        Catalog::insert_row(&mut s.buf, db.heap(), &table, &values, (FROZEN_XID, 0)).unwrap();
        db.wal().flush_all().unwrap();
        drop(s);
        // Killed: nothing more is written (the old row stays live).
        db.simulate_crash();
        drop(db);
        let path = dir.path().join("data");
        let settings = [
            "io_method=sync".to_string(),
            "shared_buffers=64".into(),
            "max_sessions=8".into(),
        ];
        let db = crate::database::Database::open(&path, &settings).unwrap();
        let r = db.catalog().role("r").unwrap();
        assert_eq!(
            (r.login, r.superuser, r.password.as_deref()),
            (false, true, None)
        );
        assert_eq!(r.rows.len(), 2);
        let mut s = db.session().unwrap();
        crate::sql::execute(&mut s, "ALTER ROLE r LOGIN").unwrap();
        assert_eq!(db.catalog().role("r").unwrap().rows.len(), 1);
        crate::sql::execute(&mut s, "DROP ROLE r").unwrap();
        drop(s);
        drop(db);
        let db = crate::database::Database::open(&path, &settings).unwrap();
        assert!(db.catalog().role("r").is_none(), "a deleted row came back");
    }

    #[test]
    fn the_current_user_has_a_name() {
        assert!(!current_role_name().is_empty());
        assert_eq!(
            os_user_name(0).as_deref(),
            Some("root"),
            "uid 0 is root on any Linux"
        );
    }
}
