//! CREATE ROLE, CREATE USER, ALTER ROLE (ALTER USER) and DROP ROLE (DROP
//! USER): who may connect to the server (see `catalog::roles`).
//!
//! The options are PostgreSQL's LOGIN/NOLOGIN, SUPERUSER/NOSUPERUSER and
//! PASSWORD 'pw' / PASSWORD NULL; the others (CREATEDB, INHERIT, VALID
//! UNTIL, IN ROLE, …) are refused, since nothing here would honour them.
//! A password is stored as a SCRAM-SHA-256 verifier: one given already as
//! a verifier is stored as it is (as PostgreSQL does, so a verifier
//! copied from PostgreSQL keeps working), any other text is hashed with a
//! new random salt. An empty password clears it, with PostgreSQL's
//! notice.
//!
//! Like DROP TABLE, they run outside transaction blocks: a role change
//! is durable when the statement returns and cannot be rolled back.

use sqlparser::ast::{self, AlterRoleOperation, CreateRole, Password, RoleOption, Spanned};
use sqlparser::tokenizer::Span;

use super::ddl::drop_each;
use super::expr::{constant, ident, object_name, StmtCx};
use super::{SqlError, StatementResult};
use crate::catalog::scram::Verifier;
use crate::catalog::{RoleError, RoleOptions};
use crate::database::Session;
use crate::types::Value;

/// The options of CREATE or ALTER ROLE, gathered; an option given twice
/// is refused (PostgreSQL's "conflicting or redundant options").
struct Gathered {
    options: RoleOptions,
    notices: Vec<String>,
}

fn redundant(cx: &StmtCx, span: Span) -> SqlError {
    SqlError::Syntax {
        statement: cx.number,
        message: format!("conflicting or redundant options (at {})", cx.at(span)),
    }
}

/// The verifier to store for a PASSWORD option (see the module comment),
/// or None for PASSWORD NULL and the empty password.
fn password_verifier(
    cx: &StmtCx,
    password: &Password,
    notices: &mut Vec<String>,
) -> Result<Option<String>, SqlError> {
    let expr = match password {
        Password::NullPassword => return Ok(None),
        Password::Password(expr) => expr,
    };
    let text = match constant(expr) {
        Some(Value::Text(t)) => t,
        Some(Value::Null) => return Ok(None),
        _ => {
            return Err(cx.unsupported_hint(
                expr.span(),
                format!("the password {expr}"),
                "; give it as a string literal",
            ))
        }
    };
    if text.is_empty() {
        notices.push("NOTICE: empty string is not a valid password, clearing password".into());
        return Ok(None);
    }
    if Verifier::parse(&text).is_some() {
        return Ok(Some(text));
    }
    let md5_verifier = text.len() == 35
        && text.starts_with("md5")
        && text[3..].bytes().all(|b| b.is_ascii_hexdigit());
    if md5_verifier {
        return Err(
            RoleError::UnsupportedPassword("MD5 password verifiers are not supported").into(),
        );
    }
    let verifier = Verifier::new(&text).map_err(RoleError::Random)?;
    Ok(Some(verifier.to_string()))
}

impl Gathered {
    fn new() -> Gathered {
        Gathered {
            options: RoleOptions::default(),
            notices: Vec::new(),
        }
    }

    fn login(&mut self, cx: &StmtCx, span: Span, on: bool) -> Result<(), SqlError> {
        if self.options.login.replace(on).is_some() {
            return Err(redundant(cx, span));
        }
        Ok(())
    }

    fn superuser(&mut self, cx: &StmtCx, span: Span, on: bool) -> Result<(), SqlError> {
        if self.options.superuser.replace(on).is_some() {
            return Err(redundant(cx, span));
        }
        Ok(())
    }

    fn password(&mut self, cx: &StmtCx, span: Span, password: &Password) -> Result<(), SqlError> {
        if self.options.password.is_some() {
            return Err(redundant(cx, span));
        }
        let verifier = password_verifier(cx, password, &mut self.notices)?;
        self.options.password = Some(verifier);
        Ok(())
    }
}

/// The one role name of a statement.
fn role_name(cx: &StmtCx, names: &[ast::ObjectName], span: Span) -> Result<String, SqlError> {
    match names {
        [name] => object_name(cx, name),
        _ => Err(cx.unsupported(span, "more than one role in CREATE ROLE")),
    }
}

pub(crate) fn create_role(
    cx: &StmtCx,
    s: &mut Session,
    statement: &ast::Statement,
    cr: &CreateRole,
) -> Result<StatementResult, SqlError> {
    s.require_no_block("CREATE ROLE")?;
    let span = statement.span();
    let refused = [
        (cr.if_not_exists, "CREATE ROLE IF NOT EXISTS"),
        (cr.inherit.is_some(), "INHERIT"),
        (cr.bypassrls.is_some(), "BYPASSRLS"),
        (cr.create_db.is_some(), "CREATEDB"),
        (cr.create_role.is_some(), "CREATEROLE"),
        (cr.replication.is_some(), "REPLICATION"),
        (cr.connection_limit.is_some(), "CONNECTION LIMIT"),
        (cr.valid_until.is_some(), "VALID UNTIL"),
        (!cr.in_role.is_empty() || !cr.in_group.is_empty(), "IN ROLE"),
        (!cr.role.is_empty() || !cr.user.is_empty(), "ROLE"),
        (!cr.admin.is_empty(), "ADMIN"),
        (cr.authorization_owner.is_some(), "AUTHORIZATION"),
    ];
    if let Some((_, what)) = refused.iter().find(|(given, _)| *given) {
        return Err(cx.unsupported_hint(
            span,
            format!("the role option {what}"),
            "; roles take LOGIN, SUPERUSER and PASSWORD",
        ));
    }
    let name = role_name(cx, &cr.names, span)?;
    let mut gathered = Gathered::new();
    gathered.options.login = cr.login;
    gathered.options.superuser = cr.superuser;
    if let Some(password) = &cr.password {
        gathered.password(cx, span, password)?;
    }
    let db = s.db().clone();
    db.catalog()
        .create_role(&mut s.buf, db.heap(), &name, gathered.options)?;
    Ok(StatementResult {
        notices: gathered.notices,
        ..StatementResult::tag("CREATE ROLE")
    })
}

pub(crate) fn alter_role(
    cx: &StmtCx,
    s: &mut Session,
    statement: &ast::Statement,
    name: &ast::Ident,
    operation: &AlterRoleOperation,
) -> Result<StatementResult, SqlError> {
    s.require_no_block("ALTER ROLE")?;
    let span = statement.span();
    let AlterRoleOperation::WithOptions { options } = operation else {
        return Err(cx.unsupported_hint(
            span,
            "this form of ALTER ROLE",
            "; ALTER ROLE name [WITH] LOGIN, SUPERUSER or PASSWORD changes a role",
        ));
    };
    let mut gathered = Gathered::new();
    for option in options {
        match option {
            RoleOption::Login(on) => gathered.login(cx, span, *on)?,
            RoleOption::SuperUser(on) => gathered.superuser(cx, span, *on)?,
            RoleOption::Password(p) => gathered.password(cx, span, p)?,
            other => {
                return Err(cx.unsupported_hint(
                    span,
                    format!("the role option {other}"),
                    "; roles take LOGIN, SUPERUSER and PASSWORD",
                ))
            }
        }
    }
    let name = ident(name);
    let db = s.db().clone();
    db.catalog()
        .alter_role(&mut s.buf, db.heap(), &name, gathered.options)?;
    Ok(StatementResult {
        notices: gathered.notices,
        ..StatementResult::tag("ALTER ROLE")
    })
}

pub(crate) fn drop_roles(
    cx: &StmtCx,
    s: &mut Session,
    names: &[ast::ObjectName],
    if_exists: bool,
) -> Result<StatementResult, SqlError> {
    drop_each(
        cx,
        s,
        names,
        ("DROP ROLE", "role"),
        |db, name| match db.catalog().role(name) {
            Some(_) => Ok(()),
            None if if_exists => Ok(()),
            None => Err(RoleError::Missing(name.to_string()).into()),
        },
        |s, db, name| {
            Ok(db
                .catalog()
                .drop_role(&mut s.buf, db.heap(), name, if_exists)?)
        },
    )
}
