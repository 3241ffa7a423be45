//! A value's text forms: a type's input function ([`parse_value`], for a
//! cast from text and a COPY field), the text a cast to text gives
//! ([`value_to_text`]) and the text a result prints as ([`output_text`]).

use super::{format_double, ColumnType, TypeError, Value};

/// The text a value casts to (`v::text`); NULL gives an empty string, for
/// callers that checked it first.
pub fn value_to_text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::Integer(x) => x.to_string(),
        Value::BigInt(x) => x.to_string(),
        Value::Double(x) => format_double(*x),
        Value::Text(s) => s.clone(),
        Value::Boolean(b) => if *b { "true" } else { "false" }.into(),
    }
}

fn parse_bool(s: &str) -> Option<bool> {
    let s = s.trim().to_ascii_lowercase();
    // PostgreSQL accepts any unique prefix of these words.
    let prefix_of = |word: &str| !s.is_empty() && word.starts_with(s.as_str());
    if prefix_of("true") || prefix_of("yes") || s == "on" || s == "1" {
        Some(true)
    } else if prefix_of("false") || prefix_of("no") || s == "off" || s == "of" || s == "0" {
        Some(false)
    } else {
        None
    }
}

fn parse_integer(s: &str, ty: ColumnType) -> Result<i64, TypeError> {
    // Plain digits, the common case (a bulk load parses one per row):
    // read at once, without the trimming and the second look below.
    const PLAIN_DIGITS_MAX: usize = 18;
    let bytes = s.as_bytes();
    if !bytes.is_empty() && bytes.len() <= PLAIN_DIGITS_MAX && bytes.iter().all(u8::is_ascii_digit)
    {
        // At most 18 digits: below 10^18, no overflow possible.
        return Ok(bytes
            .iter()
            .fold(0i64, |n, &b| n * 10 + i64::from(b - b'0')));
    }
    let t = s.trim();
    let invalid = || TypeError::InvalidInput {
        ty: ty.name(),
        text: s.to_string(),
    };
    if t.is_empty()
        || !t
            .trim_start_matches(['+', '-'])
            .bytes()
            .all(|b| b.is_ascii_digit())
    {
        return Err(invalid());
    }
    t.parse::<i64>().map_err(|e| match e.kind() {
        std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
            TypeError::OutOfRange { ty: ty.name() }
        }
        _ => invalid(),
    })
}

/// Refuses what PostgreSQL's `float8in` refuses as out of range: a
/// number (not a spelling of infinity) too large for a double, or one
/// whose digits are not all zero that rounds to zero (`1e-400`).
fn check_double_input_range(x: f64, text: &str) -> Result<(), TypeError> {
    let written_digits = || {
        let mantissa = text.split(['e', 'E']).next().unwrap_or(text);
        mantissa.bytes().any(|b| b.is_ascii_digit())
    };
    let underflow = || {
        let mantissa = text.split(['e', 'E']).next().unwrap_or(text);
        mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b))
    };
    if (x.is_infinite() && written_digits()) || (x == 0.0 && underflow()) {
        return Err(TypeError::InputOutOfRange {
            ty: "double precision",
            text: text.to_string(),
        });
    }
    Ok(())
}

/// The value of type `ty` that the text `s` stands for (a type's input
/// function: a cast from text, or a COPY field).
pub fn parse_value(s: &str, ty: ColumnType) -> Result<Value, TypeError> {
    Ok(match ty {
        ColumnType::Text => Value::Text(s.to_string()),
        ColumnType::Integer => Value::Integer(
            i32::try_from(parse_integer(s, ty)?)
                .map_err(|_| TypeError::OutOfRange { ty: "integer" })?,
        ),
        ColumnType::BigInt => Value::BigInt(parse_integer(s, ty)?),
        ColumnType::Double => {
            let t = s.trim();
            // Rust also takes "inf"; PostgreSQL's spellings are the
            // longer ones, which Rust takes as well.
            match t.parse::<f64>() {
                Ok(x) if !t.is_empty() => {
                    check_double_input_range(x, t)?;
                    Value::Double(x)
                }
                _ => {
                    return Err(TypeError::InvalidInput {
                        ty: "double precision",
                        text: s.to_string(),
                    })
                }
            }
        }
        ColumnType::Boolean => {
            Value::Boolean(parse_bool(s).ok_or_else(|| TypeError::InvalidInput {
                ty: "boolean",
                text: s.to_string(),
            })?)
        }
    })
}

/// A value as PostgreSQL's output functions print it (booleans as `t`
/// and `f`, unlike a cast to text); NULL gives an empty string, for
/// callers that checked it first.
pub fn output_text(v: &Value) -> String {
    match v {
        Value::Boolean(b) => if *b { "t" } else { "f" }.into(),
        other => value_to_text(other),
    }
}
