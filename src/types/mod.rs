//! Column types and their values (DESIGN.md §1, the `types` layer): what a
//! value is, how two values order, which casts exist and what they do, and
//! a value's text forms, with PostgreSQL's rules.
//!
//! This layer sits below the access methods and the executor and imports
//! neither (nor any other layer): the heap encodes [`Value`]s of
//! [`ColumnType`]s into tuples, an index orders keys with [`compare`]
//! without importing the executor, and the executor and the SQL front end
//! build expressions, casts, sorts and COPY out of the same functions. What
//! belongs to evaluating SQL (truth of a WHERE clause, LIKE) stays in
//! `exec`.
//!
//! - `mod.rs`: [`ColumnType`], [`Value`], [`TypeError`], the numeric kinds
//!   and promotion order, and reading a value as a number;
//! - `compare.rs`: [`compare`] (SQL comparison, NULL compares as unknown)
//!   and [`sort_cmp`] (a total order with NULLs placed first or last);
//! - `cast.rs`: which casts and assignments are allowed, and
//!   [`cast_value`];
//! - `text.rs`: a type's input function ([`parse_value`]) and output
//!   ([`value_to_text`] as a cast to text gives it, [`output_text`] as a
//!   result prints);
//! - `double.rs`: [`format_double`], the shortest digits that read back as
//!   the same double, as PostgreSQL 12+ prints them.
//!
//! Doubles order as PostgreSQL orders them, not as IEEE 754 does: NaN
//! equals NaN and sorts above every number, and -0 equals 0, so that a
//! sort and (later) a B-tree see one total order.
//!
//! ```
//! use std::cmp::Ordering;
//! use aiostore::types::{cast_value, compare, parse_value, ColumnType, Value};
//!
//! let x = parse_value(" 42 ", ColumnType::Integer)?;
//! assert_eq!(x, Value::Integer(42));
//! assert_eq!(compare(&x, &Value::Double(41.5)), Some(Ordering::Greater));
//! assert_eq!(compare(&x, &Value::Null), None);
//! let err = cast_value(&Value::Text("4x".into()), ColumnType::Integer).unwrap_err();
//! assert_eq!(err.to_string(), "invalid input syntax for type integer: \"4x\"");
//! # Ok::<(), aiostore::types::TypeError>(())
//! ```

mod cast;
mod compare;
mod double;
mod text;

use thiserror::Error;

pub use cast::{can_assign, can_cast, cast_value};
pub use compare::{compare, sort_cmp};
pub use double::format_double;
pub use text::{output_text, parse_value, value_to_text};

/// A column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColumnType {
    Integer,
    BigInt,
    Double,
    Text,
    Boolean,
}

impl ColumnType {
    pub fn name(self) -> &'static str {
        match self {
            ColumnType::Integer => "integer",
            ColumnType::BigInt => "bigint",
            ColumnType::Double => "double precision",
            ColumnType::Text => "text",
            ColumnType::Boolean => "boolean",
        }
    }

    pub fn code(self) -> i32 {
        self as i32
    }

    pub fn from_code(code: i32) -> Option<ColumnType> {
        [
            ColumnType::Integer,
            ColumnType::BigInt,
            ColumnType::Double,
            ColumnType::Text,
            ColumnType::Boolean,
        ]
        .into_iter()
        .find(|t| t.code() == code)
    }
}

/// A value of a column.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Integer(i32),
    BigInt(i64),
    Double(f64),
    Text(String),
    Boolean(bool),
}

impl Value {
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The type of a non-NULL value.
    pub fn column_type(&self) -> Option<ColumnType> {
        Some(match self {
            Value::Null => return None,
            Value::Integer(_) => ColumnType::Integer,
            Value::BigInt(_) => ColumnType::BigInt,
            Value::Double(_) => ColumnType::Double,
            Value::Text(_) => ColumnType::Text,
            Value::Boolean(_) => ColumnType::Boolean,
        })
    }
}

/// Errors of a type's operations: text that is no value of the type, a
/// value that does not fit it (read, cast or computed), a cast that does
/// not exist. The messages are PostgreSQL's.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum TypeError {
    #[error("{ty} out of range")]
    OutOfRange { ty: &'static str },
    #[error("invalid input syntax for type {ty}: \"{text}\"")]
    InvalidInput { ty: &'static str, text: String },
    /// A number written in range of no value of the type (`'1e400'`,
    /// or `'1e-400'`, which is not zero but rounds to it).
    #[error("\"{text}\" is out of range for type {ty}")]
    InputOutOfRange { ty: &'static str, text: String },
    #[error("cannot cast type {from} to {to}")]
    NoCast {
        from: &'static str,
        to: &'static str,
    },
}

/// Kinds of type, for deciding which operators apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Category {
    Numeric,
    Text,
    Boolean,
}

pub(crate) fn category(ty: ColumnType) -> Category {
    match ty {
        ColumnType::Integer | ColumnType::BigInt | ColumnType::Double => Category::Numeric,
        ColumnType::Text => Category::Text,
        ColumnType::Boolean => Category::Boolean,
    }
}

/// Whether `ty` is one of the numbers (integer, bigint, double precision).
pub(crate) fn is_numeric(ty: ColumnType) -> bool {
    category(ty) == Category::Numeric
}

/// A type's name; "unknown" for an untyped NULL.
pub(crate) fn type_name(ty: Option<ColumnType>) -> &'static str {
    ty.map_or("unknown", ColumnType::name)
}

/// Position in the numeric promotion order, `None` if not numeric.
pub(crate) fn numeric_rank(ty: ColumnType) -> Option<u8> {
    match ty {
        ColumnType::Integer => Some(0),
        ColumnType::BigInt => Some(1),
        ColumnType::Double => Some(2),
        _ => None,
    }
}

/// The value as a 64-bit integer, if it is an integer.
pub fn as_i64(v: &Value) -> Option<i64> {
    match v {
        Value::Integer(x) => Some(i64::from(*x)),
        Value::BigInt(x) => Some(*x),
        _ => None,
    }
}

/// The value as a double, if it is a number.
pub fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Integer(x) => Some(f64::from(*x)),
        Value::BigInt(x) => Some(*x as f64),
        Value::Double(x) => Some(*x),
        _ => None,
    }
}
