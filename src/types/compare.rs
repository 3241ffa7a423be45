//! Ordering of values: SQL comparison, where NULL compares as unknown, and
//! the total order a sort uses, which places NULLs first or last.

use std::cmp::Ordering;

use super::datetime::date_as_usecs;
use super::text::trim_char_padding;
use super::{as_f64, as_i64, as_numeric, Value};

/// Orders two doubles as PostgreSQL does: NaN equals NaN and sorts above
/// every number; -0 equals 0.
pub fn cmp_f64(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// Compares two values; `None` if either is NULL (or they are of kinds
/// that do not compare, which type checking rules out).
pub fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Null, _) | (_, Value::Null) => None,
        (Value::Text(x), Value::Text(y)) => Some(x.as_str().cmp(y.as_str())),
        // char(n) compares without its padding, with char(n) and, as
        // PostgreSQL casts varchar to bpchar for it, with varchar. A text
        // operand is compared as text, but char(n) cast to text loses its
        // padding too, so the rule is the same: trailing spaces of the
        // char side do not count.
        (Value::Char(x), Value::Char(y)) => Some(trim_char_padding(x).cmp(trim_char_padding(y))),
        (Value::Char(x), Value::Text(y)) => Some(trim_char_padding(x).cmp(y.as_str())),
        (Value::Text(x), Value::Char(y)) => Some(x.as_str().cmp(trim_char_padding(y))),
        (Value::Date(x), Value::Date(y)) => Some(x.cmp(y)),
        (Value::Timestamp(x), Value::Timestamp(y)) => Some(x.cmp(y)),
        (Value::Date(d), Value::Timestamp(t)) => Some(date_as_usecs(*d).cmp(&i128::from(*t))),
        (Value::Timestamp(t), Value::Date(d)) => Some(i128::from(*t).cmp(&date_as_usecs(*d))),
        (Value::Boolean(x), Value::Boolean(y)) => Some(x.cmp(y)),
        // A numeric against a double compares as doubles (PostgreSQL
        // casts the numeric), against an integer as numerics, exactly.
        (Value::Double(_), _) | (_, Value::Double(_)) => Some(cmp_f64(as_f64(a)?, as_f64(b)?)),
        (Value::Numeric(_), _) | (_, Value::Numeric(_)) => {
            Some(as_numeric(a)?.as_ref().cmp(as_numeric(b)?.as_ref()))
        }
        _ => Some(as_i64(a)?.cmp(&as_i64(b)?)),
    }
}

/// Total order for sorting: NULLs last (or first if `nulls_first`),
/// before any reversal for DESC.
pub fn sort_cmp(a: &Value, b: &Value, nulls_first: bool) -> Ordering {
    match (a.is_null(), b.is_null()) {
        (true, true) => Ordering::Equal,
        (true, false) if nulls_first => Ordering::Less,
        (true, false) => Ordering::Greater,
        (false, true) if nulls_first => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => compare(a, b).unwrap_or(Ordering::Equal),
    }
}
