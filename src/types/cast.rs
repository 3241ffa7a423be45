//! Casts: which conversions exist (explicit with `::`, or implicit on
//! assignment to a column) and what they do.

use super::datetime::{date_to_timestamp, timestamp_to_date};
use super::text::fit_characters;
use super::{as_f64, as_i64, category, is_numeric, is_text, parse_value, type_name};
use super::{value_to_text, Category, ColumnType, Numeric, TypeError, Value};

/// Whether `from` can be cast to `to` (explicitly, with `::`): among
/// numbers, among character types and from or to any of them (their
/// text forms), between date and timestamp, and integer to boolean and
/// back.
pub fn can_cast(from: ColumnType, to: ColumnType) -> bool {
    use ColumnType::*;
    from == to
        || (is_numeric(from) && is_numeric(to))
        || is_text(from)
        || is_text(to)
        || (category(from) == Category::DateTime && category(to) == Category::DateTime)
        || matches!((from, to), (Integer, Boolean) | (Boolean, Integer))
}

/// Whether a value of type `from` may be stored in a column of type `to`
/// without an explicit cast: PostgreSQL's assignment casts among numbers,
/// among character types (a length limit is checked as the value is
/// stored), and between date and timestamp (the time of day dropped).
pub fn can_assign(from: ColumnType, to: ColumnType) -> bool {
    from == to
        || (is_numeric(from) && is_numeric(to))
        || (is_text(from) && is_text(to))
        || (category(from) == Category::DateTime && category(to) == Category::DateTime)
}

/// Rounds a double to an integer as PostgreSQL does (half to even),
/// refusing what does not fit `ty`.
fn double_to_integer(x: f64, ty: ColumnType) -> Result<i64, TypeError> {
    let r = x.round_ties_even();
    // 2^63 is the first double above i64::MAX; -2^63 is i64::MIN.
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    let fits = match ty {
        ColumnType::Integer => (f64::from(i32::MIN)..=f64::from(i32::MAX)).contains(&r),
        _ => (-TWO_POW_63..TWO_POW_63).contains(&r),
    };
    if !fits {
        return Err(TypeError::OutOfRange { ty: ty.name() });
    }
    Ok(r as i64)
}

/// Converts `v` to type `to` (an explicit cast: text too long for a
/// `varchar(n)` or `char(n)` is cut). NULL stays NULL.
pub fn cast_value(v: &Value, to: ColumnType) -> Result<Value, TypeError> {
    convert(v, to, true)
}

/// Converts `v` to type `to` as storing it in a column of that type does
/// (an assignment: text too long for a `varchar(n)` or `char(n)` is an
/// error unless the excess is spaces). NULL stays NULL.
pub fn assign_value(v: &Value, to: ColumnType) -> Result<Value, TypeError> {
    convert(v, to, false)
}

fn convert(v: &Value, to: ColumnType, explicit: bool) -> Result<Value, TypeError> {
    use ColumnType as T;
    let to_int = |x: i64| -> Result<Value, TypeError> {
        match to {
            T::Integer => i32::try_from(x)
                .map(Value::Integer)
                .map_err(|_| TypeError::OutOfRange { ty: "integer" }),
            _ => Ok(Value::BigInt(x)),
        }
    };
    Ok(match (v, to) {
        (Value::Null, _) => Value::Null,
        (v, T::Text) => Value::Text(value_to_text(v)),
        // Among character types the text is kept as it is (a char(n)
        // loses its padding first, as bpchar to text does), then fitted.
        (Value::Text(s) | Value::Char(s), T::Varchar(_) | T::Char(_)) => {
            let s = match v {
                Value::Char(_) => value_to_text(v),
                _ => s.clone(),
            };
            fit_characters(&s, to, explicit)?
        }
        (v, T::Varchar(_) | T::Char(_)) => fit_characters(&value_to_text(v), to, explicit)?,
        (Value::Date(d), T::Date) => Value::Date(*d),
        (Value::Date(d), T::Timestamp) => Value::Timestamp(date_to_timestamp(*d)?),
        (Value::Timestamp(t), T::Timestamp) => Value::Timestamp(*t),
        (Value::Timestamp(t), T::Date) => Value::Date(timestamp_to_date(*t)),
        (Value::Char(s), to) => parse_value(super::text::trim_char_padding(s), to)?,
        (Value::Integer(_) | Value::BigInt(_), T::Integer | T::BigInt) => {
            to_int(as_i64(v).unwrap_or(0))?
        }
        (Value::Integer(_) | Value::BigInt(_), T::Double) => {
            Value::Double(as_f64(v).unwrap_or(0.0))
        }
        (Value::Double(x), T::Integer | T::BigInt) => to_int(double_to_integer(*x, to)?)?,
        (Value::Double(x), T::Double) => Value::Double(*x),
        (Value::Integer(_) | Value::BigInt(_), T::Numeric(typmod)) => {
            Value::Numeric(Numeric::from_i64(as_i64(v).unwrap_or(0)).apply_typmod(typmod)?)
        }
        (Value::Double(x), T::Numeric(typmod)) => {
            Value::Numeric(Numeric::from_f64(*x)?.apply_typmod(typmod)?)
        }
        (Value::Numeric(x), T::Numeric(typmod)) => Value::Numeric(x.clone().apply_typmod(typmod)?),
        // Rounded half away from zero (a double rounds half to even).
        (Value::Numeric(x), T::Integer | T::BigInt) => to_int(x.to_integer(to.name())?)?,
        (Value::Numeric(x), T::Double) => Value::Double(x.to_f64()?),
        (Value::Integer(x), T::Boolean) => Value::Boolean(*x != 0),
        (Value::Boolean(b), T::Integer) => Value::Integer(i32::from(*b)),
        (Value::Boolean(b), T::Boolean) => Value::Boolean(*b),
        (Value::Text(s), to) => parse_value(s, to)?,
        (v, to) => {
            return Err(TypeError::NoCast {
                from: type_name(v.column_type()),
                to: to.name(),
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn casts_follow_postgresql() {
        let text = |s: &str| Value::Text(s.into());
        assert_eq!(
            cast_value(&text(" 42 "), ColumnType::Integer).unwrap(),
            Value::Integer(42)
        );
        assert!(matches!(
            cast_value(&text("4x"), ColumnType::Integer),
            Err(TypeError::InvalidInput { ty: "integer", .. })
        ));
        assert!(matches!(
            cast_value(&text("99999999999"), ColumnType::Integer),
            Err(TypeError::OutOfRange { ty: "integer" })
        ));
        assert_eq!(
            cast_value(&Value::Double(2.5), ColumnType::Integer).unwrap(),
            Value::Integer(2)
        );
        assert_eq!(
            cast_value(&Value::Double(3.5), ColumnType::Integer).unwrap(),
            Value::Integer(4)
        );
        assert!(cast_value(&Value::Double(1e19), ColumnType::BigInt).is_err());
        // A numeric rounds half away from zero, then must fit integer's
        // range as any integer must.
        let numeric = |s: &str| Value::Numeric(Numeric::parse(s).unwrap());
        assert_eq!(
            cast_value(&numeric("2147483647.5"), ColumnType::Integer)
                .unwrap_err()
                .to_string(),
            "integer out of range"
        );
        assert_eq!(
            cast_value(&numeric("2147483646.5"), ColumnType::Integer).unwrap(),
            Value::Integer(i32::MAX)
        );
        assert_eq!(
            cast_value(&Value::Boolean(true), ColumnType::Text).unwrap(),
            text("true")
        );
        assert_eq!(
            cast_value(&text("yes"), ColumnType::Boolean).unwrap(),
            Value::Boolean(true)
        );
        assert!(!can_cast(ColumnType::Double, ColumnType::Boolean));
        assert!(can_cast(ColumnType::Integer, ColumnType::Boolean));
    }

    #[test]
    fn casts_cut_char_types_and_assignments_refuse() {
        let text = |s: &str| Value::Text(s.into());
        let v3 = ColumnType::Varchar(Some(3));
        let c3 = ColumnType::Char(Some(3));
        assert_eq!(cast_value(&text("abcdef"), v3).unwrap(), text("abc"));
        assert_eq!(
            cast_value(&text("a"), c3).unwrap(),
            Value::Char("a  ".into())
        );
        assert_eq!(
            assign_value(&text("abcd"), v3).unwrap_err().to_string(),
            "value too long for type character varying(3)"
        );
        assert_eq!(
            assign_value(&text("abc  "), c3).unwrap(),
            Value::Char("abc".into())
        );
        // char(n) to text or varchar drops the padding.
        let padded = Value::Char("ab ".into());
        assert_eq!(cast_value(&padded, ColumnType::Text).unwrap(), text("ab"));
        assert_eq!(
            cast_value(&padded, ColumnType::Varchar(None)).unwrap(),
            text("ab")
        );
        assert_eq!(cast_value(&Value::Integer(12345), v3).unwrap(), text("123"));
    }

    #[test]
    fn date_and_timestamp_cast_to_each_other() {
        let day = crate::types::datetime::USECS_PER_DAY;
        assert_eq!(
            cast_value(&Value::Date(3), ColumnType::Timestamp).unwrap(),
            Value::Timestamp(3 * day)
        );
        // The time of day goes, towards the earlier day before 2000 too.
        assert_eq!(
            cast_value(&Value::Timestamp(-1), ColumnType::Date).unwrap(),
            Value::Date(-1)
        );
        assert_eq!(
            cast_value(&Value::Text("2000-01-02".into()), ColumnType::Date).unwrap(),
            Value::Date(1)
        );
        assert_eq!(
            cast_value(&Value::Date(1), ColumnType::Text).unwrap(),
            Value::Text("2000-01-02".into())
        );
        assert!(!can_cast(ColumnType::Date, ColumnType::Integer));
        assert!(can_assign(ColumnType::Date, ColumnType::Timestamp));
    }
}
