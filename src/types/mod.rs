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
//!   the same double, as PostgreSQL 12+ prints them;
//! - `datetime.rs`: `date` and `timestamp`: the calendar, their text forms,
//!   ranges and arithmetic;
//! - `numeric.rs`: [`Numeric`], PostgreSQL's arbitrary-precision decimal:
//!   its text forms, display scales, `numeric(p, s)`, order and
//!   arithmetic.
//!
//! `varchar(n)` and `char(n)` carry their length in the [`ColumnType`]
//! (PostgreSQL's typmod). A varchar value is [`Value::Text`]; a char value
//! is [`Value::Char`], padded, and compares, hashes and measures without
//! its trailing spaces.
//!
//! `numeric(p, s)` carries its precision and scale in the [`ColumnType`]
//! too ([`NumericTypmod`]); a numeric value ([`Value::Numeric`]) keeps its
//! display scale, so `1.50` prints as written and equals `1.5`.
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
pub mod datetime;
mod double;
mod numeric;
pub mod pg;
mod text;

use thiserror::Error;

pub use cast::{assign_value, can_assign, can_cast, cast_value};
pub use compare::{cmp_f64, compare, sort_cmp};
pub use double::format_double;
pub use numeric::{Numeric, NumericTypmod, NUMERIC_DSCALE_MAX, NUMERIC_MAX_INTEGER_DIGITS};
pub use text::{
    char_length, output_text, parse_value, trim_char_padding, value_to_text, write_output_text,
    MAX_CHAR_LENGTH,
};

/// A column's type, with its modifier where the type has one (the
/// length limit of `varchar(n)` and `char(n)`, PostgreSQL's typmod).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColumnType {
    Integer,
    BigInt,
    Double,
    Text,
    Boolean,
    /// Days since 2000-01-01 (see `datetime`).
    Date,
    /// `timestamp without time zone`: microseconds since 2000-01-01.
    Timestamp,
    /// `character varying(n)`, at most n characters; `None`: no limit.
    /// Its values are [`Value::Text`].
    Varchar(Option<u32>),
    /// `character(n)`, blank-padded to n characters; `None`: `bpchar`,
    /// neither padded nor limited. Its values are [`Value::Char`].
    Char(Option<u32>),
    /// `numeric(p, s)`; `None`: `numeric`, any precision and scale.
    Numeric(Option<NumericTypmod>),
}

/// Bits of a catalog type code below the length modifier (see
/// [`ColumnType::code`]).
const CODE_BASE_BITS: u32 = 8;

impl ColumnType {
    /// The type's name in messages, without its modifier (PostgreSQL's
    /// `format_type_be`: `character varying`, `timestamp without time
    /// zone`).
    pub fn name(self) -> &'static str {
        match self {
            ColumnType::Integer => "integer",
            ColumnType::BigInt => "bigint",
            ColumnType::Double => "double precision",
            ColumnType::Text => "text",
            ColumnType::Boolean => "boolean",
            ColumnType::Date => "date",
            ColumnType::Timestamp => "timestamp without time zone",
            ColumnType::Varchar(_) => "character varying",
            ColumnType::Char(_) => "character",
            ColumnType::Numeric(_) => "numeric",
        }
    }

    /// The type with its modifier as psql's `\d` shows it
    /// (`character varying(10)`, `character(3)`, `bpchar`).
    pub fn display_name(self) -> String {
        match self {
            ColumnType::Varchar(Some(n)) => format!("character varying({n})"),
            ColumnType::Char(Some(n)) => format!("character({n})"),
            // PostgreSQL's own spelling: `character` alone would mean
            // character(1).
            ColumnType::Char(None) => "bpchar".to_string(),
            ColumnType::Numeric(Some(t)) => format!("numeric({},{})", t.precision(), t.scale()),
            other => other.name().to_string(),
        }
    }

    /// The length limit in characters of `varchar(n)` and `char(n)`.
    pub fn max_chars(self) -> Option<u32> {
        match self {
            ColumnType::Varchar(n) | ColumnType::Char(n) => n,
            _ => None,
        }
    }

    /// The type without its modifier: what an operator takes (PostgreSQL
    /// resolves `c = 'abcdef'` against `bpchar`, not `char(3)`, so the
    /// literal is not cut to the column's length).
    pub fn without_modifier(self) -> ColumnType {
        match self {
            ColumnType::Varchar(_) => ColumnType::Varchar(None),
            ColumnType::Char(_) => ColumnType::Char(None),
            ColumnType::Numeric(_) => ColumnType::Numeric(None),
            other => other,
        }
    }

    /// Whether `v` (not NULL) is a value of this type as stored: text
    /// for text and `varchar`, [`Value::Char`] for `char`.
    pub fn holds(self, v: &Value) -> bool {
        matches!(
            (self, v),
            (ColumnType::Integer, Value::Integer(_))
                | (ColumnType::BigInt, Value::BigInt(_))
                | (ColumnType::Double, Value::Double(_))
                | (ColumnType::Text | ColumnType::Varchar(_), Value::Text(_))
                | (ColumnType::Boolean, Value::Boolean(_))
                | (ColumnType::Date, Value::Date(_))
                | (ColumnType::Timestamp, Value::Timestamp(_))
                | (ColumnType::Char(_), Value::Char(_))
                | (ColumnType::Numeric(_), Value::Numeric(_))
        )
    }

    /// The type's code in the catalog: the base type in the low 8 bits,
    /// the modifier (0 for none) above them: a length, or a numeric's
    /// precision and scale ([`NumericTypmod::to_bits`], 21 bits). Types
    /// without a modifier keep the codes they had before modifiers
    /// existed, so older data directories read unchanged.
    pub fn code(self) -> i32 {
        let (base, modifier): (u32, u32) = match self {
            ColumnType::Integer => (0, 0),
            ColumnType::BigInt => (1, 0),
            ColumnType::Double => (2, 0),
            ColumnType::Text => (3, 0),
            ColumnType::Boolean => (4, 0),
            ColumnType::Date => (5, 0),
            ColumnType::Timestamp => (6, 0),
            ColumnType::Varchar(n) => (7, n.unwrap_or(0)),
            ColumnType::Char(n) => (8, n.unwrap_or(0)),
            ColumnType::Numeric(t) => (9, t.map_or(0, NumericTypmod::to_bits)),
        };
        debug_assert!(modifier <= MAX_CHAR_LENGTH);
        // MAX_CHAR_LENGTH < 2^24, and a numeric's modifier < 2^21: the
        // shifted modifier fits 32 bits, and the word is stored as the
        // i32 with the same bits.
        (base | (modifier << CODE_BASE_BITS)) as i32
    }

    /// The type a catalog code stands for, if any.
    pub fn from_code(code: i32) -> Option<ColumnType> {
        let code = code as u32;
        let base = code & ((1 << CODE_BASE_BITS) - 1);
        let modifier = code >> CODE_BASE_BITS;
        let length = (modifier != 0).then_some(modifier);
        if modifier > MAX_CHAR_LENGTH {
            return None;
        }
        let ty = match base {
            0 => ColumnType::Integer,
            1 => ColumnType::BigInt,
            2 => ColumnType::Double,
            3 => ColumnType::Text,
            4 => ColumnType::Boolean,
            5 => ColumnType::Date,
            6 => ColumnType::Timestamp,
            7 => return Some(ColumnType::Varchar(length)),
            8 => return Some(ColumnType::Char(length)),
            9 if modifier == 0 => ColumnType::Numeric(None),
            9 => return NumericTypmod::from_bits(modifier).map(|t| ColumnType::Numeric(Some(t))),
            _ => return None,
        };
        (modifier == 0).then_some(ty)
    }
}

/// A value of a column.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Integer(i32),
    BigInt(i64),
    Double(f64),
    /// A `text` or `varchar` value.
    Text(String),
    Boolean(bool),
    /// Days since 2000-01-01.
    Date(i32),
    /// Microseconds since 2000-01-01 00:00:00.
    Timestamp(i64),
    /// A `char(n)` value, padded with spaces to n characters; its
    /// trailing spaces do not count in comparisons, hashing or `length`.
    Char(String),
    /// A `numeric` value, with its display scale.
    Numeric(Numeric),
}

impl Value {
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// Whether the two are stored alike, byte for byte (PostgreSQL's
    /// `datumIsEqual`), which is stricter than `==`: `1.0` and `1.00`
    /// are equal numerics of other display scales, `0.0` and `-0.0` equal
    /// doubles of other bits. An update is HOT only if every indexed
    /// column keeps its image: an index-only scan answers with the key's
    /// bytes, which must be the row's.
    pub fn same_image(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Double(a), Value::Double(b)) => a.to_bits() == b.to_bits(),
            (Value::Numeric(a), Value::Numeric(b)) => {
                let (mut x, mut y) = (Vec::new(), Vec::new());
                a.encode(&mut x);
                b.encode(&mut y);
                x == y
            }
            (a, b) => a == b,
        }
    }

    /// The type of a non-NULL value (without a modifier: a `Text` value
    /// may be of a `varchar(n)` column too).
    pub fn column_type(&self) -> Option<ColumnType> {
        Some(match self {
            Value::Null => return None,
            Value::Integer(_) => ColumnType::Integer,
            Value::BigInt(_) => ColumnType::BigInt,
            Value::Double(_) => ColumnType::Double,
            Value::Text(_) => ColumnType::Text,
            Value::Boolean(_) => ColumnType::Boolean,
            Value::Date(_) => ColumnType::Date,
            Value::Timestamp(_) => ColumnType::Timestamp,
            Value::Char(_) => ColumnType::Char(None),
            Value::Numeric(_) => ColumnType::Numeric(None),
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
    /// Text that is no date or timestamp: PostgreSQL's message for it is
    /// `InvalidInput`'s, its SQLSTATE another.
    #[error("invalid input syntax for type {ty}: \"{text}\"")]
    InvalidDatetime { ty: &'static str, text: String },
    /// A number written in range of no value of the type (`'1e400'`,
    /// or `'1e-400'`, which is not zero but rounds to it).
    #[error("\"{text}\" is out of range for type {ty}")]
    InputOutOfRange { ty: &'static str, text: String },
    /// A date or timestamp whose fields are each in range of a field
    /// but do not make one (`2023-02-30`, `25:00`, year 0).
    #[error("date/time field value out of range: \"{text}\"")]
    FieldOutOfRange { text: String },
    /// A date or timestamp written outside the type's range.
    #[error("{ty} out of range: \"{text}\"")]
    ValueOutOfRange { ty: &'static str, text: String },
    /// Date arithmetic beyond the type's range.
    #[error("date out of range")]
    DateOutOfRange,
    #[error("date out of range for timestamp")]
    DateOutOfRangeForTimestamp,
    #[error("cannot subtract infinite dates")]
    InfiniteDateDifference,
    /// Text longer than a `varchar(n)` or `char(n)` takes, stored or
    /// read (an explicit cast cuts it instead).
    #[error("value too long for type {ty}({max_chars})")]
    TooLong { ty: &'static str, max_chars: u32 },
    /// A numeric beyond what its storage format holds (more than 131072
    /// digits before the point, or 16383 after).
    #[error("value overflows numeric format")]
    NumericFormatOverflow,
    /// A value that does not fit a `numeric(p, s)` once rounded to s.
    #[error(
        "numeric field overflow\nDETAIL:  A field with precision {precision}, scale {scale} {}",
        numeric_field_limit(*precision, *scale, *infinite)
    )]
    NumericFieldOverflow {
        precision: u16,
        scale: i16,
        infinite: bool,
    },
    /// A `numeric(p, s)` whose p or s PostgreSQL refuses too.
    #[error("NUMERIC {what} {value} must be between {min} and {max}")]
    NumericTypmod {
        what: &'static str,
        value: i64,
        min: i64,
        max: i64,
    },
    /// NaN or an infinity cast to an integer type.
    #[error("cannot convert {what} to {ty}")]
    CannotConvert {
        what: &'static str,
        ty: &'static str,
    },
    #[error("division by zero")]
    DivisionByZero,
    #[error("cannot cast type {from} to {to}")]
    NoCast {
        from: &'static str,
        to: &'static str,
    },
}

impl TypeError {
    /// PostgreSQL's SQLSTATE for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            TypeError::OutOfRange { .. }
            | TypeError::InputOutOfRange { .. }
            | TypeError::NumericFormatOverflow
            | TypeError::NumericFieldOverflow { .. } => "22003", // numeric_value_out_of_range
            TypeError::InvalidInput { .. } => "22P02", // invalid_text_representation
            TypeError::InvalidDatetime { .. } => "22007", // invalid_datetime_format
            TypeError::FieldOutOfRange { .. }
            | TypeError::ValueOutOfRange { .. }
            | TypeError::DateOutOfRange
            | TypeError::DateOutOfRangeForTimestamp
            | TypeError::InfiniteDateDifference => "22008", // datetime_field_overflow
            TypeError::TooLong { .. } => "22001",      // string_data_right_truncation
            TypeError::NumericTypmod { .. } => "22023", // invalid_parameter_value
            // PostgreSQL's "cannot convert NaN to integer" is a feature
            // not supported, not a value out of range.
            TypeError::CannotConvert { .. } => "0A000",
            TypeError::DivisionByZero => "22012",
            TypeError::NoCast { .. } => "42846", // cannot_coerce
        }
    }
}

/// The end of "numeric field overflow"'s detail: the bound the rounded
/// value must stay below, written as PostgreSQL writes it (`10^3`; `1`
/// for 10^0), or that it cannot be infinite.
fn numeric_field_limit(precision: u16, scale: i16, infinite: bool) -> String {
    if infinite {
        return "cannot hold an infinite value.".into();
    }
    match i32::from(precision) - i32::from(scale) {
        0 => "must round to an absolute value less than 1.".into(),
        digits => format!("must round to an absolute value less than 10^{digits}."),
    }
}

/// Kinds of type, for deciding which operators apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Category {
    Numeric,
    /// text, varchar and char.
    Text,
    Boolean,
    /// date and timestamp, which compare with each other.
    DateTime,
}

pub(crate) fn category(ty: ColumnType) -> Category {
    match ty {
        ColumnType::Integer | ColumnType::BigInt | ColumnType::Double | ColumnType::Numeric(_) => {
            Category::Numeric
        }
        ColumnType::Text | ColumnType::Varchar(_) | ColumnType::Char(_) => Category::Text,
        ColumnType::Boolean => Category::Boolean,
        ColumnType::Date | ColumnType::Timestamp => Category::DateTime,
    }
}

/// Whether `ty` is one of the numbers (integer, bigint, numeric, double
/// precision).
pub(crate) fn is_numeric(ty: ColumnType) -> bool {
    category(ty) == Category::Numeric
}

/// A type's name; "unknown" for an untyped NULL.
pub(crate) fn type_name(ty: Option<ColumnType>) -> &'static str {
    ty.map_or("unknown", ColumnType::name)
}

/// Whether `ty` is one of the character types (text, varchar, char).
pub(crate) fn is_text(ty: ColumnType) -> bool {
    category(ty) == Category::Text
}

/// Position in the numeric promotion order, `None` if not numeric:
/// PostgreSQL's implicit casts go integer → bigint → numeric → double
/// precision (`1 + 1.5::numeric` is numeric, `1.5::numeric + 1.5::float8`
/// double).
pub(crate) fn numeric_rank(ty: ColumnType) -> Option<u8> {
    match ty {
        ColumnType::Integer => Some(0),
        ColumnType::BigInt => Some(1),
        ColumnType::Numeric(_) => Some(2),
        ColumnType::Double => Some(3),
        _ => None,
    }
}

/// The value as a numeric, if it is an integer or a numeric (exactly).
pub fn as_numeric(v: &Value) -> Option<std::borrow::Cow<'_, Numeric>> {
    match v {
        Value::Numeric(x) => Some(std::borrow::Cow::Borrowed(x)),
        _ => as_i64(v).map(|x| std::borrow::Cow::Owned(Numeric::from_i64(x))),
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

/// The value as a double, if it is a number (a numeric beyond a
/// double's range as an infinity).
pub fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Integer(x) => Some(f64::from(*x)),
        Value::BigInt(x) => Some(*x as f64),
        Value::Double(x) => Some(*x),
        Value::Numeric(x) => Some(x.to_f64_lossy()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_codes_of_the_first_types_are_unchanged_and_every_code_reads_back() {
        // Written by data directories before lengths existed.
        let old = [
            ColumnType::Integer,
            ColumnType::BigInt,
            ColumnType::Double,
            ColumnType::Text,
            ColumnType::Boolean,
        ];
        for (code, ty) in old.into_iter().enumerate() {
            assert_eq!(ty.code(), code as i32);
        }
        for ty in old.into_iter().chain([
            ColumnType::Date,
            ColumnType::Timestamp,
            ColumnType::Varchar(None),
            ColumnType::Varchar(Some(1)),
            ColumnType::Varchar(Some(MAX_CHAR_LENGTH)),
            ColumnType::Char(None),
            ColumnType::Char(Some(3)),
            ColumnType::Char(Some(MAX_CHAR_LENGTH)),
            ColumnType::Numeric(None),
            ColumnType::Numeric(NumericTypmod::new(5, 2).ok()),
            ColumnType::Numeric(NumericTypmod::new(1000, -1000).ok()),
            ColumnType::Numeric(NumericTypmod::new(1, 1000).ok()),
        ]) {
            assert_eq!(ColumnType::from_code(ty.code()), Some(ty), "{ty:?}");
        }
        // A length on a type that takes none, an unknown base, a length
        // beyond the limit: not codes we write.
        assert_eq!(ColumnType::from_code(3 | (5 << 8)), None);
        assert_eq!(ColumnType::from_code(99), None);
        assert_eq!(ColumnType::from_code(-1), None);
        // A numeric modifier with precision 0.
        assert_eq!(ColumnType::from_code(9 | (5 << 8)), None);
    }

    #[test]
    fn char_compares_without_padding_and_dates_against_timestamps_by_midnight() {
        use std::cmp::Ordering::*;
        let c = |s: &str| Value::Char(s.into());
        assert_eq!(compare(&c("a  "), &c("a")), Some(Equal));
        assert_eq!(compare(&c("a"), &c("a\t")), Some(Less));
        assert_eq!(compare(&c("ab "), &c("b")), Some(Less));
        assert_eq!(compare(&c("a  "), &Value::Text("a ".into())), Some(Less));
        let day = datetime::USECS_PER_DAY;
        assert_eq!(
            compare(&Value::Date(1), &Value::Timestamp(day)),
            Some(Equal)
        );
        assert_eq!(
            compare(&Value::Date(1), &Value::Timestamp(day + 1)),
            Some(Less)
        );
        // Beyond the timestamp range a date still orders, not fails.
        assert_eq!(
            compare(&Value::Date(2_000_000_000), &Value::Timestamp(i64::MAX - 1)),
            Some(Greater)
        );
        assert_eq!(
            compare(&Value::Date(i32::MIN), &Value::Timestamp(i64::MIN)),
            Some(Equal)
        );
    }
}
