//! Casts: which conversions exist (explicit with `::`, or implicit on
//! assignment to a column) and what they do.

use super::{as_f64, as_i64, is_numeric, parse_value, type_name, value_to_text};
use super::{ColumnType, TypeError, Value};

/// Whether `from` can be cast to `to` (explicitly, with `::`).
pub fn can_cast(from: ColumnType, to: ColumnType) -> bool {
    use ColumnType::*;
    from == to
        || (is_numeric(from) && is_numeric(to))
        || from == Text
        || to == Text
        || matches!((from, to), (Integer, Boolean) | (Boolean, Integer))
}

/// Whether a value of type `from` may be stored in a column of type `to`
/// without an explicit cast (PostgreSQL's assignment casts among numbers).
pub fn can_assign(from: ColumnType, to: ColumnType) -> bool {
    from == to || (is_numeric(from) && is_numeric(to))
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

/// Converts `v` to type `to` (a cast). NULL stays NULL.
pub fn cast_value(v: &Value, to: ColumnType) -> Result<Value, TypeError> {
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
        (Value::Integer(_) | Value::BigInt(_), T::Integer | T::BigInt) => {
            to_int(as_i64(v).unwrap_or(0))?
        }
        (Value::Integer(_) | Value::BigInt(_), T::Double) => {
            Value::Double(as_f64(v).unwrap_or(0.0))
        }
        (Value::Double(x), T::Integer | T::BigInt) => to_int(double_to_integer(*x, to)?)?,
        (Value::Double(x), T::Double) => Value::Double(*x),
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
}
