//! `pg_catalog`: PostgreSQL's system catalogs as read-only views of ours,
//! so that psql's `\d` commands (and other clients' catalog queries) run
//! against the server, with PostgreSQL's relation and column names.
//!
//! Each relation is a [`CatalogView`], one of the system views
//! ([`super::View::Catalog`]): its rows are computed from the catalog
//! when a statement reads it, for the tables, indexes and roles that
//! statement sees (its own uncommitted CREATE TABLE included). The
//! functions psql calls on oids (`pg_get_userbyid`, `pg_get_indexdef`, a
//! cast to `regclass`, …) are [`CatalogFunction`]s: planned as a table
//! from each oid the catalog holds to the function's value
//! ([`super::expr::OidLookup`]), since evaluation has no catalog to ask.
//!
//! How our catalog maps onto PostgreSQL's:
//!
//! - one database ([`DATABASE_NAME`], oid 5 as in PostgreSQL 15), one
//!   schema for tables and indexes (`public`, oid 2200) besides
//!   `pg_catalog` (oid 11, whose relations are not listed in `pg_class`);
//! - a table is a `pg_class` row of kind `r` with access method `heap`,
//!   an index one of kind `i` with `btree`, each with its own oid; a
//!   PRIMARY KEY or UNIQUE constraint is a `pg_constraint` row whose oid
//!   is its index's;
//! - owners are not recorded: every relation and the database belong to
//!   the bootstrap superuser (oid 10, the role `init` made);
//! - columns of the types PostgreSQL uses here are ours: `oid`, `regproc`
//!   and `xid` are integer or bigint, `name` and `"char"` are text, and an
//!   array (`aclitem[]`, `int2vector`, `text[]`) is its text form
//!   (`{a,b}`, or `1 2` for an int2vector) as psql reads it;
//! - what we lack is empty or constant: no defaults (`pg_attrdef`), no
//!   role memberships (`pg_auth_members`), no privileges (`relacl` and
//!   `datacl` NULL), no inheritance, TOAST, rules or triggers.

use std::collections::HashMap;
use std::sync::Arc;

use super::expr::{array_text, OidLookup};
use super::views::ColumnSpec;
use super::ExecError;
use crate::catalog::{quote_identifier, refuses_null, IndexDef, TableDef, DATABASE_NAME};
use crate::database::Database;
use crate::storage::{Fork, BLOCK_SIZE};
use crate::txn::Xid;
use crate::types::pg::{type_modifier, type_oid, type_size, ENCODING_UTF8};
use crate::types::{ColumnType, Value};

/// `pg_namespace.oid` of `pg_catalog`.
pub const NAMESPACE_PG_CATALOG: i32 = 11;
/// `pg_namespace.oid` of `public`, where every table and index is.
pub const NAMESPACE_PUBLIC: i32 = 2200;
/// `pg_database.oid` of the one database (PostgreSQL 15's `postgres`).
pub const DATABASE_OID: i32 = 5;
/// `pg_am.oid` of `heap` and `btree`.
const AM_HEAP: i32 = 2;
const AM_BTREE: i32 = 403;
/// `pg_tablespace.oid` of `pg_default`.
const TABLESPACE_DEFAULT: i32 = 1663;
/// `pg_collation.oid` of `default`, the collation of every text column
/// (byte order: PostgreSQL's `C`).
const COLLATION_DEFAULT: i32 = 100;
const COLLATION_C: i32 = 950;
const COLLATION_POSIX: i32 = 951;
/// The owner of every relation and of the database (see the module
/// comment).
const OWNER: i32 = crate::catalog::BOOTSTRAP_ROLE_OID as i32;

/// A relation of `pg_catalog`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatalogView {
    Class,
    Namespace,
    Am,
    Database,
    Roles,
    AuthMembers,
    Attribute,
    Index,
    Constraint,
    Attrdef,
    Type,
    Collation,
    Inherits,
    Policy,
    StatisticExt,
    Publication,
    PublicationNamespace,
    PublicationRel,
}

use ColumnType::{BigInt, Boolean, Double, Integer, Text, Timestamp};

const PG_CLASS: &[ColumnSpec] = &[
    ("oid", Integer),
    ("relname", Text),
    ("relnamespace", Integer),
    ("reltype", Integer),
    ("reloftype", Integer),
    ("relowner", Integer),
    ("relam", Integer),
    ("relfilenode", Integer),
    ("reltablespace", Integer),
    ("relpages", Integer),
    ("reltuples", Double),
    ("relallvisible", Integer),
    ("reltoastrelid", Integer),
    ("relhasindex", Boolean),
    ("relisshared", Boolean),
    ("relpersistence", Text),
    ("relkind", Text),
    ("relnatts", Integer),
    ("relchecks", Integer),
    ("relhasrules", Boolean),
    ("relhastriggers", Boolean),
    ("relhassubclass", Boolean),
    ("relrowsecurity", Boolean),
    ("relforcerowsecurity", Boolean),
    ("relispopulated", Boolean),
    ("relreplident", Text),
    ("relispartition", Boolean),
    ("relrewrite", Integer),
    ("relfrozenxid", BigInt),
    ("relminmxid", BigInt),
    ("relacl", Text),
    ("reloptions", Text),
    ("relpartbound", Text),
];

const PG_NAMESPACE: &[ColumnSpec] = &[
    ("oid", Integer),
    ("nspname", Text),
    ("nspowner", Integer),
    ("nspacl", Text),
];

const PG_AM: &[ColumnSpec] = &[
    ("oid", Integer),
    ("amname", Text),
    ("amhandler", Text),
    ("amtype", Text),
];

const PG_DATABASE: &[ColumnSpec] = &[
    ("oid", Integer),
    ("datname", Text),
    ("datdba", Integer),
    ("encoding", Integer),
    ("datlocprovider", Text),
    ("datistemplate", Boolean),
    ("datallowconn", Boolean),
    ("datconnlimit", Integer),
    ("datfrozenxid", BigInt),
    ("datminmxid", BigInt),
    ("dattablespace", Integer),
    ("datcollate", Text),
    ("datctype", Text),
    ("daticulocale", Text),
    ("datcollversion", Text),
    ("datacl", Text),
];

/// `rolvaliduntil` is `timestamp with time zone` in PostgreSQL; we have
/// no such type, and no role has an expiry.
const PG_ROLES: &[ColumnSpec] = &[
    ("rolname", Text),
    ("rolsuper", Boolean),
    ("rolinherit", Boolean),
    ("rolcreaterole", Boolean),
    ("rolcreatedb", Boolean),
    ("rolcanlogin", Boolean),
    ("rolreplication", Boolean),
    ("rolconnlimit", Integer),
    ("rolpassword", Text),
    ("rolvaliduntil", Timestamp),
    ("rolbypassrls", Boolean),
    ("rolconfig", Text),
    ("oid", Integer),
];

const PG_AUTH_MEMBERS: &[ColumnSpec] = &[
    ("roleid", Integer),
    ("member", Integer),
    ("grantor", Integer),
    ("admin_option", Boolean),
];

const PG_ATTRIBUTE: &[ColumnSpec] = &[
    ("attrelid", Integer),
    ("attname", Text),
    ("atttypid", Integer),
    ("attstattarget", Integer),
    ("attlen", Integer),
    ("attnum", Integer),
    ("attndims", Integer),
    ("attcacheoff", Integer),
    ("atttypmod", Integer),
    ("attbyval", Boolean),
    ("attalign", Text),
    ("attstorage", Text),
    ("attcompression", Text),
    ("attnotnull", Boolean),
    ("atthasdef", Boolean),
    ("atthasmissing", Boolean),
    ("attidentity", Text),
    ("attgenerated", Text),
    ("attisdropped", Boolean),
    ("attislocal", Boolean),
    ("attinhcount", Integer),
    ("attcollation", Integer),
    ("attacl", Text),
    ("attoptions", Text),
    ("attfdwoptions", Text),
    ("attmissingval", Text),
];

/// `indkey`, `indcollation`, `indclass` and `indoption` are
/// int2vector / oidvector in PostgreSQL: their text (`1 2`) here.
const PG_INDEX: &[ColumnSpec] = &[
    ("indexrelid", Integer),
    ("indrelid", Integer),
    ("indnatts", Integer),
    ("indnkeyatts", Integer),
    ("indisunique", Boolean),
    ("indnullsnotdistinct", Boolean),
    ("indisprimary", Boolean),
    ("indisexclusion", Boolean),
    ("indimmediate", Boolean),
    ("indisclustered", Boolean),
    ("indisvalid", Boolean),
    ("indcheckxmin", Boolean),
    ("indisready", Boolean),
    ("indislive", Boolean),
    ("indisreplident", Boolean),
    ("indkey", Text),
    ("indcollation", Text),
    ("indclass", Text),
    ("indoption", Text),
    ("indexprs", Text),
    ("indpred", Text),
];

const PG_CONSTRAINT: &[ColumnSpec] = &[
    ("oid", Integer),
    ("conname", Text),
    ("connamespace", Integer),
    ("contype", Text),
    ("condeferrable", Boolean),
    ("condeferred", Boolean),
    ("convalidated", Boolean),
    ("conrelid", Integer),
    ("contypid", Integer),
    ("conindid", Integer),
    ("conparentid", Integer),
    ("confrelid", Integer),
    ("confupdtype", Text),
    ("confdeltype", Text),
    ("confmatchtype", Text),
    ("conislocal", Boolean),
    ("coninhcount", Integer),
    ("connoinherit", Boolean),
    ("conkey", Text),
    ("confkey", Text),
    ("conpfeqop", Text),
    ("conppeqop", Text),
    ("conffeqop", Text),
    ("confdelsetcols", Text),
    ("conexclop", Text),
    ("conbin", Text),
];

const PG_ATTRDEF: &[ColumnSpec] = &[
    ("oid", Integer),
    ("adrelid", Integer),
    ("adnum", Integer),
    ("adbin", Text),
];

/// The columns of PostgreSQL's `pg_type` that describe a base type (its
/// I/O functions and storage details beyond them are left out).
const PG_TYPE: &[ColumnSpec] = &[
    ("oid", Integer),
    ("typname", Text),
    ("typnamespace", Integer),
    ("typowner", Integer),
    ("typlen", Integer),
    ("typbyval", Boolean),
    ("typtype", Text),
    ("typcategory", Text),
    ("typispreferred", Boolean),
    ("typisdefined", Boolean),
    ("typdelim", Text),
    ("typrelid", Integer),
    ("typelem", Integer),
    ("typarray", Integer),
    ("typnotnull", Boolean),
    ("typbasetype", Integer),
    ("typtypmod", Integer),
    ("typndims", Integer),
    ("typcollation", Integer),
];

const PG_COLLATION: &[ColumnSpec] = &[
    ("oid", Integer),
    ("collname", Text),
    ("collnamespace", Integer),
    ("collowner", Integer),
    ("collprovider", Text),
    ("collisdeterministic", Boolean),
    ("collencoding", Integer),
    ("collcollate", Text),
    ("collctype", Text),
];

const PG_INHERITS: &[ColumnSpec] = &[
    ("inhrelid", Integer),
    ("inhparent", Integer),
    ("inhseqno", Integer),
    ("inhdetachpending", Boolean),
];

const PG_POLICY: &[ColumnSpec] = &[
    ("oid", Integer),
    ("polname", Text),
    ("polrelid", Integer),
    ("polcmd", Text),
    ("polpermissive", Boolean),
    ("polroles", Text),
    ("polqual", Text),
    ("polwithcheck", Text),
];

const PG_STATISTIC_EXT: &[ColumnSpec] = &[
    ("oid", Integer),
    ("stxrelid", Integer),
    ("stxname", Text),
    ("stxnamespace", Integer),
    ("stxowner", Integer),
    ("stxstattarget", Integer),
    ("stxkeys", Text),
    ("stxkind", Text),
    ("stxexprs", Text),
];

const PG_PUBLICATION: &[ColumnSpec] = &[
    ("oid", Integer),
    ("pubname", Text),
    ("pubowner", Integer),
    ("puballtables", Boolean),
    ("pubinsert", Boolean),
    ("pubupdate", Boolean),
    ("pubdelete", Boolean),
    ("pubtruncate", Boolean),
    ("pubviaroot", Boolean),
];

const PG_PUBLICATION_NAMESPACE: &[ColumnSpec] =
    &[("oid", Integer), ("pnpubid", Integer), ("pnnspid", Integer)];

const PG_PUBLICATION_REL: &[ColumnSpec] = &[
    ("oid", Integer),
    ("prpubid", Integer),
    ("prrelid", Integer),
    ("prqual", Text),
    ("prattrs", Text),
];

fn oid(x: u32) -> Value {
    Value::Integer(i32::try_from(x).unwrap_or(i32::MAX))
}

fn int(x: usize) -> Value {
    Value::Integer(i32::try_from(x).unwrap_or(i32::MAX))
}

fn text(s: &str) -> Value {
    Value::Text(s.to_string())
}

fn boolean(b: bool) -> Value {
    Value::Boolean(b)
}

/// Whether a column's type takes a collation (the character types).
fn collatable(ty: ColumnType) -> bool {
    matches!(
        ty,
        ColumnType::Text | ColumnType::Varchar(_) | ColumnType::Char(_)
    )
}

/// What the catalog holds for one statement: its tables and each one's
/// indexes.
struct Relations {
    tables: Vec<(Arc<TableDef>, Vec<Arc<IndexDef>>)>,
}

impl Relations {
    fn of(db: &Database, viewer: Option<Xid>) -> Relations {
        let catalog = db.catalog();
        Relations {
            tables: catalog
                .tables_for(viewer)
                .into_iter()
                .map(|t| {
                    let indexes = catalog.indexes_of(&t).to_vec();
                    (t, indexes)
                })
                .collect(),
        }
    }

    fn indexes(&self) -> impl Iterator<Item = (&TableDef, &IndexDef)> {
        self.tables
            .iter()
            .flat_map(|(t, ix)| ix.iter().map(move |i| (&**t, &**i)))
    }
}

/// An index's key columns as 1-based column numbers, space-separated
/// (an int2vector's text).
fn index_key_text(index: &IndexDef) -> String {
    index
        .columns
        .iter()
        .map(|c| (c.column + 1).to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `pg_get_indexdef(index)`: `CREATE [UNIQUE] INDEX i ON public.t USING
/// btree (a, b DESC)`.
fn index_definition(table: &TableDef, index: &IndexDef) -> String {
    format!(
        "CREATE {}INDEX {} ON public.{} USING btree ({})",
        if index.kind.unique() { "UNIQUE " } else { "" },
        quote_identifier(&index.name),
        quote_identifier(table.name()),
        index.key_text(table),
    )
}

/// `pg_get_constraintdef(constraint)`: `PRIMARY KEY (a, b)`, `UNIQUE (c)`.
fn constraint_definition(table: &TableDef, index: &IndexDef) -> String {
    let columns: Vec<String> = index
        .columns
        .iter()
        .map(|c| quote_identifier(&table.columns[c.column].name))
        .collect();
    let kind = if index.kind.primary() {
        "PRIMARY KEY"
    } else {
        "UNIQUE"
    };
    format!("{kind} ({})", columns.join(", "))
}

/// Our types, as `pg_type` lists them: name, category, whether
/// preferred in it, whether passed by value.
const TYPES: [(ColumnType, &str, &str, bool); 10] = [
    (ColumnType::Boolean, "bool", "B", true),
    (ColumnType::BigInt, "int8", "N", false),
    (ColumnType::Integer, "int4", "N", false),
    (ColumnType::Text, "text", "S", true),
    (ColumnType::Double, "float8", "N", true),
    (ColumnType::Char(None), "bpchar", "S", false),
    (ColumnType::Varchar(None), "varchar", "S", false),
    (ColumnType::Date, "date", "D", false),
    (ColumnType::Timestamp, "timestamp", "D", false),
    (ColumnType::Numeric(None), "numeric", "N", false),
];

impl CatalogView {
    /// Every relation.
    pub const ALL: [CatalogView; 18] = [
        CatalogView::Class,
        CatalogView::Namespace,
        CatalogView::Am,
        CatalogView::Database,
        CatalogView::Roles,
        CatalogView::AuthMembers,
        CatalogView::Attribute,
        CatalogView::Index,
        CatalogView::Constraint,
        CatalogView::Attrdef,
        CatalogView::Type,
        CatalogView::Collation,
        CatalogView::Inherits,
        CatalogView::Policy,
        CatalogView::StatisticExt,
        CatalogView::Publication,
        CatalogView::PublicationNamespace,
        CatalogView::PublicationRel,
    ];

    /// The relation called `name` (without `pg_catalog.`), if any.
    pub fn by_name(name: &str) -> Option<CatalogView> {
        CatalogView::ALL.into_iter().find(|v| v.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            CatalogView::Class => "pg_class",
            CatalogView::Namespace => "pg_namespace",
            CatalogView::Am => "pg_am",
            CatalogView::Database => "pg_database",
            CatalogView::Roles => "pg_roles",
            CatalogView::AuthMembers => "pg_auth_members",
            CatalogView::Attribute => "pg_attribute",
            CatalogView::Index => "pg_index",
            CatalogView::Constraint => "pg_constraint",
            CatalogView::Attrdef => "pg_attrdef",
            CatalogView::Type => "pg_type",
            CatalogView::Collation => "pg_collation",
            CatalogView::Inherits => "pg_inherits",
            CatalogView::Policy => "pg_policy",
            CatalogView::StatisticExt => "pg_statistic_ext",
            CatalogView::Publication => "pg_publication",
            CatalogView::PublicationNamespace => "pg_publication_namespace",
            CatalogView::PublicationRel => "pg_publication_rel",
        }
    }

    pub fn columns(self) -> &'static [ColumnSpec] {
        match self {
            CatalogView::Class => PG_CLASS,
            CatalogView::Namespace => PG_NAMESPACE,
            CatalogView::Am => PG_AM,
            CatalogView::Database => PG_DATABASE,
            CatalogView::Roles => PG_ROLES,
            CatalogView::AuthMembers => PG_AUTH_MEMBERS,
            CatalogView::Attribute => PG_ATTRIBUTE,
            CatalogView::Index => PG_INDEX,
            CatalogView::Constraint => PG_CONSTRAINT,
            CatalogView::Attrdef => PG_ATTRDEF,
            CatalogView::Type => PG_TYPE,
            CatalogView::Collation => PG_COLLATION,
            CatalogView::Inherits => PG_INHERITS,
            CatalogView::Policy => PG_POLICY,
            CatalogView::StatisticExt => PG_STATISTIC_EXT,
            CatalogView::Publication => PG_PUBLICATION,
            CatalogView::PublicationNamespace => PG_PUBLICATION_NAMESPACE,
            CatalogView::PublicationRel => PG_PUBLICATION_REL,
        }
    }

    /// The rows a statement of transaction `viewer` sees now.
    pub fn rows(self, db: &Database, viewer: Option<Xid>) -> Vec<Vec<Value>> {
        let rows = match self {
            CatalogView::Class => class_rows(db, &Relations::of(db, viewer)),
            CatalogView::Namespace => [
                (NAMESPACE_PG_CATALOG, "pg_catalog"),
                (NAMESPACE_PUBLIC, "public"),
            ]
            .into_iter()
            .map(|(o, name)| {
                vec![
                    Value::Integer(o),
                    text(name),
                    Value::Integer(OWNER),
                    Value::Null,
                ]
            })
            .collect(),
            CatalogView::Am => [
                (AM_HEAP, "heap", "heap_tableam_handler", "t"),
                (AM_BTREE, "btree", "bthandler", "i"),
            ]
            .into_iter()
            .map(|(o, name, handler, kind)| {
                vec![Value::Integer(o), text(name), text(handler), text(kind)]
            })
            .collect(),
            CatalogView::Database => vec![vec![
                Value::Integer(DATABASE_OID),
                text(DATABASE_NAME),
                Value::Integer(OWNER),
                Value::Integer(ENCODING_UTF8 as i32),
                text("c"),
                boolean(false),
                boolean(true),
                Value::Integer(-1),
                Value::BigInt(0),
                Value::BigInt(0),
                Value::Integer(TABLESPACE_DEFAULT),
                // Text compares byte by byte: PostgreSQL's C locale.
                text("C"),
                text("C"),
                Value::Null,
                Value::Null,
                Value::Null,
            ]],
            CatalogView::Roles => db
                .catalog()
                .roles()
                .iter()
                .map(|r| {
                    // Privileges are not checked (docs/server.md): a
                    // superuser may do what each attribute allows, and
                    // nothing records them for other roles.
                    let s = r.superuser;
                    vec![
                        text(&r.name),
                        boolean(s),
                        boolean(true),
                        boolean(s),
                        boolean(s),
                        boolean(r.login),
                        boolean(s),
                        Value::Integer(-1),
                        text("********"),
                        Value::Null,
                        boolean(s),
                        Value::Null,
                        oid(r.oid),
                    ]
                })
                .collect(),
            // What we do not have: role memberships, defaults,
            // inheritance, row security policies, extended statistics,
            // logical replication.
            CatalogView::AuthMembers
            | CatalogView::Attrdef
            | CatalogView::Inherits
            | CatalogView::Policy
            | CatalogView::StatisticExt
            | CatalogView::Publication
            | CatalogView::PublicationNamespace
            | CatalogView::PublicationRel => Vec::new(),
            CatalogView::Attribute => attribute_rows(&Relations::of(db, viewer)),
            CatalogView::Index => Relations::of(db, viewer)
                .indexes()
                .map(|(table, index)| {
                    let n = int(index.columns.len());
                    let options = index
                        .columns
                        .iter()
                        // PostgreSQL's INDOPTION_DESC and
                        // INDOPTION_NULLS_FIRST bits.
                        .map(|c| (u8::from(c.desc) | u8::from(c.nulls_first) << 1).to_string())
                        .collect::<Vec<_>>()
                        .join(" ");
                    let collations = index
                        .columns
                        .iter()
                        .map(|c| {
                            let ty = table.columns[c.column].ty;
                            if collatable(ty) { COLLATION_DEFAULT } else { 0 }.to_string()
                        })
                        .collect::<Vec<_>>()
                        .join(" ");
                    vec![
                        oid(index.oid),
                        oid(table.oid),
                        n.clone(),
                        n,
                        boolean(index.kind.unique()),
                        boolean(false),
                        boolean(index.kind.primary()),
                        boolean(false),
                        boolean(true),
                        boolean(false),
                        boolean(true),
                        // indcheckxmin: old snapshots may not use it.
                        boolean(index.has_snapshot_limit()),
                        boolean(true),
                        boolean(true),
                        boolean(false),
                        Value::Text(index_key_text(index)),
                        Value::Text(collations),
                        // Operator classes are not recorded; each key's
                        // is its type's default B-tree class.
                        Value::Text(vec!["0"; index.columns.len()].join(" ")),
                        Value::Text(options),
                        Value::Null,
                        Value::Null,
                    ]
                })
                .collect(),
            CatalogView::Constraint => Relations::of(db, viewer)
                .indexes()
                .filter(|(_, index)| index.kind.constraint())
                .map(|(table, index)| {
                    let key = array_text(
                        index
                            .columns
                            .iter()
                            .map(|c| Some((c.column + 1).to_string())),
                    );
                    let mut row = vec![
                        oid(index.oid),
                        text(&index.name),
                        Value::Integer(NAMESPACE_PUBLIC),
                        text(if index.kind.primary() { "p" } else { "u" }),
                        boolean(false),
                        boolean(false),
                        boolean(true),
                        oid(table.oid),
                        Value::Integer(0),
                        oid(index.oid),
                        Value::Integer(0),
                        Value::Integer(0),
                        text(" "),
                        text(" "),
                        text(" "),
                        boolean(true),
                        Value::Integer(0),
                        boolean(true),
                        Value::Text(key),
                    ];
                    row.resize(PG_CONSTRAINT.len(), Value::Null);
                    row
                })
                .collect(),
            CatalogView::Type => TYPES
                .iter()
                .map(|&(ty, name, category, preferred)| {
                    let size = type_size(ty);
                    vec![
                        oid(type_oid(ty)),
                        text(name),
                        Value::Integer(NAMESPACE_PG_CATALOG),
                        Value::Integer(OWNER),
                        Value::Integer(i32::from(size)),
                        boolean(size > 0),
                        text("b"),
                        text(category),
                        boolean(preferred),
                        boolean(true),
                        text(","),
                        Value::Integer(0),
                        Value::Integer(0),
                        Value::Integer(0),
                        boolean(false),
                        Value::Integer(0),
                        Value::Integer(-1),
                        Value::Integer(0),
                        Value::Integer(if collatable(ty) { COLLATION_DEFAULT } else { 0 }),
                    ]
                })
                .collect(),
            CatalogView::Collation => [
                (COLLATION_DEFAULT, "default", "d", None),
                (COLLATION_C, "C", "c", Some("C")),
                (COLLATION_POSIX, "POSIX", "c", Some("POSIX")),
            ]
            .into_iter()
            .map(|(o, name, provider, locale)| {
                let locale = locale.map_or(Value::Null, text);
                vec![
                    Value::Integer(o),
                    text(name),
                    Value::Integer(NAMESPACE_PG_CATALOG),
                    Value::Integer(OWNER),
                    text(provider),
                    boolean(true),
                    Value::Integer(-1),
                    locale.clone(),
                    locale,
                ]
            })
            .collect(),
        };
        debug_assert!(rows.iter().all(|r| r.len() == self.columns().len()));
        rows
    }
}

fn class_rows(db: &Database, relations: &Relations) -> Vec<Vec<Value>> {
    let mut rows = Vec::new();
    for (table, indexes) in &relations.tables {
        let stats = db.statistics().of(table.oid);
        let fillfactor = table.heap.fillfactor;
        rows.push(class_row(ClassRow {
            oid: table.oid,
            name: table.name(),
            am: AM_HEAP,
            filenode: table.heap.rel,
            // As PostgreSQL: what the last ANALYZE found, -1 rows if none.
            pages: stats.as_ref().map_or(0, |s| s.pages),
            tuples: stats.as_ref().map_or(-1.0, |s| s.rows),
            all_visible: stats.as_ref().map_or(0, |s| s.all_visible_pages),
            has_index: !indexes.is_empty(),
            kind: "r",
            columns: table.columns.len(),
            replica_identity: "d",
            options: (fillfactor != 100).then(|| {
                Value::Text(array_text(std::iter::once(Some(format!(
                    "fillfactor={fillfactor}"
                )))))
            }),
        }));
        for index in indexes {
            rows.push(class_row(ClassRow {
                oid: index.oid,
                name: &index.name,
                am: AM_BTREE,
                filenode: index.rel,
                pages: 0,
                tuples: -1.0,
                all_visible: 0,
                has_index: false,
                kind: "i",
                columns: index.columns.len(),
                replica_identity: "n",
                options: None,
            }));
        }
    }
    rows
}

/// What tells one `pg_class` row from another (the rest is the same for
/// every relation we have).
struct ClassRow<'a> {
    oid: u32,
    name: &'a str,
    am: i32,
    filenode: u32,
    pages: u32,
    tuples: f64,
    all_visible: u32,
    has_index: bool,
    kind: &'static str,
    columns: usize,
    replica_identity: &'static str,
    options: Option<Value>,
}

/// A `pg_class` row, in [`PG_CLASS`]'s order.
fn class_row(r: ClassRow) -> Vec<Value> {
    vec![
        oid(r.oid),
        text(r.name),
        Value::Integer(NAMESPACE_PUBLIC),
        Value::Integer(0),
        Value::Integer(0),
        Value::Integer(OWNER),
        Value::Integer(r.am),
        oid(r.filenode),
        Value::Integer(0),
        oid(r.pages),
        Value::Double(r.tuples),
        oid(r.all_visible),
        Value::Integer(0),
        boolean(r.has_index),
        boolean(false),
        text("p"),
        text(r.kind),
        int(r.columns),
        Value::Integer(0),
        boolean(false),
        boolean(false),
        boolean(false),
        boolean(false),
        boolean(false),
        boolean(true),
        text(r.replica_identity),
        boolean(false),
        Value::Integer(0),
        Value::BigInt(0),
        Value::BigInt(0),
        Value::Null,
        r.options.unwrap_or(Value::Null),
        Value::Null,
    ]
}

/// One `pg_attribute` row: `relation`'s column `number` (from 1) of
/// type `ty`.
fn attribute_row(
    relation: u32,
    name: &str,
    number: usize,
    ty: ColumnType,
    not_null: bool,
) -> Vec<Value> {
    let size = type_size(ty);
    vec![
        oid(relation),
        text(name),
        oid(type_oid(ty)),
        Value::Integer(-1),
        Value::Integer(i32::from(size)),
        int(number),
        Value::Integer(0),
        Value::Integer(-1),
        Value::Integer(type_modifier(ty)),
        boolean(size > 0),
        text(match size {
            1 => "c",
            8 => "d",
            _ => "i",
        }),
        text(if size > 0 { "p" } else { "x" }),
        text(""),
        boolean(not_null),
        boolean(false),
        boolean(false),
        text(""),
        text(""),
        boolean(false),
        boolean(true),
        Value::Integer(0),
        Value::Integer(if collatable(ty) { COLLATION_DEFAULT } else { 0 }),
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Null,
    ]
}

fn attribute_rows(relations: &Relations) -> Vec<Vec<Value>> {
    let mut rows = Vec::new();
    for (table, indexes) in &relations.tables {
        for (i, c) in table.columns.iter().enumerate() {
            rows.push(attribute_row(
                table.oid,
                &c.name,
                i + 1,
                c.ty,
                refuses_null(table, indexes, i),
            ));
        }
        for index in indexes {
            for (i, key) in index.columns.iter().enumerate() {
                let c = &table.columns[key.column];
                rows.push(attribute_row(index.oid, &c.name, i + 1, c.ty, false));
            }
        }
    }
    rows
}

/// A function of an oid that reads the catalog (see the module comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatalogFunction {
    /// `pg_get_userbyid(role)`: the role's name.
    PgGetUserbyid,
    /// `pg_table_is_visible(relation)`: true for every relation we have
    /// (all are in `public`, on the search path).
    PgTableIsVisible,
    /// `pg_get_indexdef(index[, column, pretty])`: its CREATE INDEX (the
    /// whole of it: `column` must be 0).
    PgGetIndexdef,
    /// `pg_get_constraintdef(constraint[, pretty])`.
    PgGetConstraintdef,
    /// `pg_relation_is_publishable(relation)`: true for a table.
    PgRelationIsPublishable,
    /// `pg_get_statisticsobjdef_columns(statistics)`: the columns of an
    /// extended statistics object, of which there are none.
    PgGetStatisticsobjdefColumns,
    /// `pg_relation_size(relation)`: its main fork's bytes.
    PgRelationSize,
    /// `pg_table_size(relation)`: the bytes of all its forks (no TOAST
    /// here), its indexes not counted.
    PgTableSize,
    /// `pg_indexes_size(table)`: its indexes' bytes.
    PgIndexesSize,
    /// `pg_total_relation_size(table)`: itself and its indexes.
    PgTotalRelationSize,
    /// `obj_description(oid, catalog)`, `shobj_description(oid,
    /// catalog)`, `col_description(relation, column)`: an object's
    /// comment; there is no COMMENT, so none has one.
    ObjDescription,
    ShobjDescription,
    ColDescription,
    /// `oid::regclass`: the relation's name.
    Regclass,
    /// `oid::regtype`: the type's name.
    Regtype,
    /// `oid::regnamespace`: the schema's name.
    Regnamespace,
}

impl CatalogFunction {
    pub const ALL: [CatalogFunction; 13] = [
        CatalogFunction::PgGetUserbyid,
        CatalogFunction::PgTableIsVisible,
        CatalogFunction::PgGetIndexdef,
        CatalogFunction::PgGetConstraintdef,
        CatalogFunction::PgRelationIsPublishable,
        CatalogFunction::PgGetStatisticsobjdefColumns,
        CatalogFunction::PgRelationSize,
        CatalogFunction::PgTableSize,
        CatalogFunction::PgIndexesSize,
        CatalogFunction::PgTotalRelationSize,
        CatalogFunction::ObjDescription,
        CatalogFunction::ShobjDescription,
        CatalogFunction::ColDescription,
    ];

    /// The function called `name`, if any (the casts are found by
    /// [`CatalogFunction::by_cast`]).
    pub fn by_name(name: &str) -> Option<CatalogFunction> {
        CatalogFunction::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The cast to type `name` (`regclass`, `regtype`, `regnamespace`).
    pub fn by_cast(name: &str) -> Option<CatalogFunction> {
        Some(match name {
            "regclass" => CatalogFunction::Regclass,
            "regtype" => CatalogFunction::Regtype,
            "regnamespace" => CatalogFunction::Regnamespace,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            CatalogFunction::PgGetUserbyid => "pg_get_userbyid",
            CatalogFunction::PgTableIsVisible => "pg_table_is_visible",
            CatalogFunction::PgGetIndexdef => "pg_get_indexdef",
            CatalogFunction::PgGetConstraintdef => "pg_get_constraintdef",
            CatalogFunction::PgRelationIsPublishable => "pg_relation_is_publishable",
            CatalogFunction::PgGetStatisticsobjdefColumns => "pg_get_statisticsobjdef_columns",
            CatalogFunction::PgRelationSize => "pg_relation_size",
            CatalogFunction::PgTableSize => "pg_table_size",
            CatalogFunction::PgIndexesSize => "pg_indexes_size",
            CatalogFunction::PgTotalRelationSize => "pg_total_relation_size",
            CatalogFunction::ObjDescription => "obj_description",
            CatalogFunction::ShobjDescription => "shobj_description",
            CatalogFunction::ColDescription => "col_description",
            CatalogFunction::Regclass => "regclass",
            CatalogFunction::Regtype => "regtype",
            CatalogFunction::Regnamespace => "regnamespace",
        }
    }

    /// Its result type.
    pub fn result_type(self) -> ColumnType {
        match self {
            CatalogFunction::PgTableIsVisible | CatalogFunction::PgRelationIsPublishable => {
                ColumnType::Boolean
            }
            CatalogFunction::PgRelationSize
            | CatalogFunction::PgTableSize
            | CatalogFunction::PgIndexesSize
            | CatalogFunction::PgTotalRelationSize => ColumnType::BigInt,
            _ => ColumnType::Text,
        }
    }

    /// Whether its first further argument is a second key (a column
    /// number) rather than a constant it ignores.
    pub fn takes_column(self) -> bool {
        matches!(
            self,
            CatalogFunction::PgGetIndexdef | CatalogFunction::ColDescription
        )
    }

    /// How many arguments it takes beyond the oid, at most: a column
    /// number ([`CatalogFunction::takes_column`]), else constants (a
    /// `pretty` flag, a catalog's name).
    pub fn extra_args(self) -> usize {
        match self {
            CatalogFunction::PgGetIndexdef => 2,
            CatalogFunction::PgGetConstraintdef
            | CatalogFunction::ObjDescription
            | CatalogFunction::ShobjDescription
            | CatalogFunction::ColDescription => 1,
            _ => 0,
        }
    }

    /// Its table of values as a statement of transaction `viewer` sees
    /// the catalog now (and the sizes the files have now).
    pub fn lookup(self, db: &Database, viewer: Option<Xid>) -> Result<OidLookup, ExecError> {
        let mut values = HashMap::new();
        let mut missing: fn(i64) -> Value = |_| Value::Null;
        let key = |oid: u32| i64::from(oid);
        match self {
            CatalogFunction::PgGetUserbyid => {
                for r in db.catalog().roles() {
                    values.insert((key(r.oid), 0), text(&r.name));
                }
                missing = |oid| Value::Text(format!("unknown (OID={oid})"));
            }
            CatalogFunction::PgTableIsVisible => {
                for (table, indexes) in &Relations::of(db, viewer).tables {
                    values.insert((key(table.oid), 0), boolean(true));
                    for index in indexes {
                        values.insert((key(index.oid), 0), boolean(true));
                    }
                }
            }
            CatalogFunction::PgGetIndexdef => {
                for (table, index) in Relations::of(db, viewer).indexes() {
                    // A column's: its name alone (PostgreSQL's attrsOnly).
                    for (i, c) in index.columns.iter().enumerate() {
                        values.insert(
                            (key(index.oid), i as i64 + 1),
                            Value::Text(quote_identifier(&table.columns[c.column].name)),
                        );
                    }
                    values.insert(
                        (key(index.oid), 0),
                        Value::Text(index_definition(table, index)),
                    );
                }
            }
            CatalogFunction::PgGetConstraintdef => {
                for (table, index) in Relations::of(db, viewer).indexes() {
                    if index.kind.constraint() {
                        values.insert(
                            (key(index.oid), 0),
                            Value::Text(constraint_definition(table, index)),
                        );
                    }
                }
            }
            CatalogFunction::PgRelationIsPublishable => {
                for (table, indexes) in &Relations::of(db, viewer).tables {
                    values.insert((key(table.oid), 0), boolean(true));
                    for index in indexes {
                        values.insert((key(index.oid), 0), boolean(false));
                    }
                }
            }
            CatalogFunction::PgGetStatisticsobjdefColumns
            | CatalogFunction::ObjDescription
            | CatalogFunction::ShobjDescription
            | CatalogFunction::ColDescription => {}
            CatalogFunction::PgRelationSize
            | CatalogFunction::PgTableSize
            | CatalogFunction::PgIndexesSize
            | CatalogFunction::PgTotalRelationSize => {
                let forks: &[Fork] = if self == CatalogFunction::PgRelationSize {
                    &[Fork::Main]
                } else {
                    &Fork::ALL
                };
                let bytes = |rel: u32, forks: &[Fork]| -> Result<i64, ExecError> {
                    let relation = db.pool().relation(rel);
                    let mut blocks = 0u64;
                    for &fork in forks {
                        blocks += u64::from(relation.nblocks(fork)?);
                    }
                    Ok(i64::try_from(blocks * BLOCK_SIZE as u64).unwrap_or(i64::MAX))
                };
                for (table, indexes) in &Relations::of(db, viewer).tables {
                    let mut index_bytes = 0;
                    for index in indexes {
                        let size = bytes(index.rel, forks)?;
                        index_bytes += size;
                        // An index's own size; of an index it has none.
                        let own = match self {
                            CatalogFunction::PgIndexesSize => 0,
                            _ => size,
                        };
                        values.insert((key(index.oid), 0), Value::BigInt(own));
                    }
                    let size = match self {
                        CatalogFunction::PgIndexesSize => index_bytes,
                        CatalogFunction::PgTotalRelationSize => {
                            bytes(table.heap.rel, forks)? + index_bytes
                        }
                        _ => bytes(table.heap.rel, forks)?,
                    };
                    values.insert((key(table.oid), 0), Value::BigInt(size));
                }
            }
            CatalogFunction::Regclass => {
                for (table, indexes) in &Relations::of(db, viewer).tables {
                    values.insert((key(table.oid), 0), text(table.name()));
                    for index in indexes {
                        values.insert((key(index.oid), 0), text(&index.name));
                    }
                }
                missing = |oid| Value::Text(oid.to_string());
            }
            CatalogFunction::Regtype => {
                // PostgreSQL's regtype output is format_type_be's
                // (`character`, not `bpchar`).
                for (ty, ..) in TYPES {
                    values.insert((key(type_oid(ty)), 0), text(ty.name()));
                }
                missing = |oid| Value::Text(oid.to_string());
            }
            CatalogFunction::Regnamespace => {
                values.insert((i64::from(NAMESPACE_PG_CATALOG), 0), text("pg_catalog"));
                values.insert((i64::from(NAMESPACE_PUBLIC), 0), text("public"));
                missing = |oid| Value::Text(oid.to_string());
            }
        }
        Ok(OidLookup {
            function: self.name(),
            values,
            missing,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_relation_is_found_by_its_name_and_has_unique_columns() {
        for view in CatalogView::ALL {
            assert_eq!(CatalogView::by_name(view.name()), Some(view));
            let mut names: Vec<&str> = view.columns().iter().map(|c| c.0).collect();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), view.columns().len(), "{}", view.name());
        }
        for f in CatalogFunction::ALL {
            assert_eq!(CatalogFunction::by_name(f.name()), Some(f));
        }
    }
}
