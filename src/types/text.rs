//! A value's text forms: a type's input function ([`parse_value`], for a
//! cast from text and a COPY field), the text a cast to text gives
//! ([`value_to_text`]) and the text a result prints as ([`output_text`]).

use super::datetime::{format_date, format_timestamp, parse_date, parse_timestamp};
use super::{format_double, ColumnType, Numeric, TypeError, Value};

/// Largest length a `varchar(n)` or `char(n)` may declare (PostgreSQL's
/// `MaxAttrSize`, 10 MB); it also keeps a catalog type code in 32 bits.
pub const MAX_CHAR_LENGTH: u32 = 10 * 1024 * 1024;

/// A `char(n)` value without its padding: what it compares, hashes and
/// casts to text as (PostgreSQL's `bcTruelen` and `rtrim1` strip spaces
/// only).
pub fn trim_char_padding(s: &str) -> &str {
    s.trim_end_matches(' ')
}

/// `length()` of a value of a character type: characters, not bytes, and
/// for `char(n)` without its padding.
pub fn char_length(v: &Value) -> Option<usize> {
    match v {
        Value::Text(s) => Some(s.chars().count()),
        Value::Char(s) => Some(trim_char_padding(s).chars().count()),
        _ => None,
    }
}

/// `s` made a value of character type `ty` (text, `varchar(n)`,
/// `char(n)`). Text longer than n characters is cut to n when `explicit`
/// (a cast, `'abcdef'::varchar(3)`) and refused otherwise (input,
/// assignment), unless all it has beyond n are spaces, which are cut:
/// PostgreSQL's `varchar` and `bpchar` length coercions. `char(n)` is
/// then padded with spaces to n characters.
pub(crate) fn fit_characters(s: &str, ty: ColumnType, explicit: bool) -> Result<Value, TypeError> {
    let to_value = |s: String| match ty {
        ColumnType::Char(_) => Value::Char(s),
        _ => Value::Text(s),
    };
    let Some(max_chars) = ty.max_chars() else {
        return Ok(to_value(s.to_string()));
    };
    let limit = max_chars as usize;
    // Byte offset of the character after the first `limit`, if any.
    let cut = s.char_indices().nth(limit).map(|(at, _)| at);
    let mut kept = match cut {
        None => s.to_string(),
        Some(at) => {
            if !explicit && s[at..].bytes().any(|b| b != b' ') {
                return Err(TypeError::TooLong {
                    ty: ty.name(),
                    max_chars,
                });
            }
            s[..at].to_string()
        }
    };
    if let ColumnType::Char(_) = ty {
        let have = if cut.is_some() {
            limit
        } else {
            kept.chars().count()
        };
        kept.extend(std::iter::repeat_n(' ', limit - have));
    }
    Ok(to_value(kept))
}

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
        Value::Date(d) => format_date(*d),
        Value::Timestamp(t) => format_timestamp(*t),
        Value::Numeric(x) => x.to_string(),
        // bpchar to text is PostgreSQL's rtrim1: the padding goes.
        Value::Char(s) => trim_char_padding(s).to_string(),
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

/// The double precision value the text `s` stands for (`float8in`).
pub(crate) fn parse_double(s: &str) -> Result<f64, TypeError> {
    let t = s.trim();
    // Rust also takes "inf"; PostgreSQL's spellings are the longer ones,
    // which Rust takes as well.
    match t.parse::<f64>() {
        Ok(x) if !t.is_empty() => {
            check_double_input_range(x, t)?;
            Ok(x)
        }
        _ => Err(TypeError::InvalidInput {
            ty: "double precision",
            text: s.to_string(),
        }),
    }
}

/// The value of type `ty` that the text `s` stands for (a type's input
/// function with the type's modifier: a COPY field, or the text of a
/// cast, which then applies its own length rule). Text too long for a
/// `varchar(n)` or `char(n)` is refused, unless the excess is spaces.
pub fn parse_value(s: &str, ty: ColumnType) -> Result<Value, TypeError> {
    Ok(match ty {
        ColumnType::Text => Value::Text(s.to_string()),
        ColumnType::Varchar(_) | ColumnType::Char(_) => fit_characters(s, ty, false)?,
        ColumnType::Date => Value::Date(parse_date(s)?),
        ColumnType::Timestamp => Value::Timestamp(parse_timestamp(s)?),
        ColumnType::Integer => Value::Integer(
            i32::try_from(parse_integer(s, ty)?)
                .map_err(|_| TypeError::OutOfRange { ty: "integer" })?,
        ),
        ColumnType::BigInt => Value::BigInt(parse_integer(s, ty)?),
        ColumnType::Double => Value::Double(parse_double(s)?),
        ColumnType::Numeric(typmod) => Value::Numeric(Numeric::parse(s)?.apply_typmod(typmod)?),
        ColumnType::Boolean => {
            Value::Boolean(parse_bool(s).ok_or_else(|| TypeError::InvalidInput {
                ty: "boolean",
                text: s.to_string(),
            })?)
        }
    })
}

/// [`output_text`] appended to `out`, with no string of its own for the
/// values results mostly hold (integers, text): a server encodes each
/// row's values into its output buffer.
pub fn write_output_text(v: &Value, out: &mut impl std::fmt::Write) -> std::fmt::Result {
    match v {
        Value::Integer(x) => write!(out, "{x}"),
        Value::BigInt(x) => write!(out, "{x}"),
        // char(n) prints padded, as output_text prints it.
        Value::Text(s) | Value::Char(s) => out.write_str(s),
        other => out.write_str(&output_text(other)),
    }
}

/// A value as PostgreSQL's output functions print it (booleans as `t`
/// and `f`, and `char(n)` with its padding, unlike a cast to text); NULL gives an empty string, for
/// callers that checked it first.
pub fn output_text(v: &Value) -> String {
    match v {
        Value::Boolean(b) => if *b { "t" } else { "f" }.into(),
        // char(n) prints padded.
        Value::Char(s) => s.clone(),
        other => value_to_text(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_output_text_is_output_text() {
        for v in [
            Value::Integer(-42),
            Value::BigInt(i64::MIN),
            Value::Text("a b".into()),
            Value::Char("ab  ".into()),
            Value::Boolean(true),
            Value::Double(1.5),
            Value::Date(0),
        ] {
            let mut written = String::new();
            write_output_text(&v, &mut written).unwrap();
            assert_eq!(written, output_text(&v), "{v:?}");
        }
    }

    #[test]
    fn char_pads_and_refuses_all_but_trailing_spaces() {
        let c3 = ColumnType::Char(Some(3));
        let v3 = ColumnType::Varchar(Some(3));
        assert_eq!(parse_value("a", c3).unwrap(), Value::Char("a  ".into()));
        assert_eq!(
            parse_value("abc   ", c3).unwrap(),
            Value::Char("abc".into())
        );
        assert_eq!(
            parse_value("abcd", c3).unwrap_err().to_string(),
            "value too long for type character(3)"
        );
        assert_eq!(parse_value("ab  ", v3).unwrap(), Value::Text("ab ".into()));
        assert_eq!(
            parse_value("abcd", v3).unwrap_err().to_string(),
            "value too long for type character varying(3)"
        );
        // Characters, not bytes.
        assert_eq!(parse_value("éèê", v3).unwrap(), Value::Text("éèê".into()));
        assert_eq!(parse_value("é", c3).unwrap(), Value::Char("é  ".into()));
        assert_eq!(
            fit_characters("éèêë", v3, true).unwrap(),
            Value::Text("éèê".into())
        );
        assert_eq!(
            fit_characters("abcdef", c3, true).unwrap(),
            Value::Char("abc".into())
        );
        // bpchar and varchar without n keep what they are given.
        assert_eq!(
            parse_value("ab  ", ColumnType::Char(None)).unwrap(),
            Value::Char("ab  ".into())
        );
        assert_eq!(
            parse_value("abcd", ColumnType::Varchar(None)).unwrap(),
            Value::Text("abcd".into())
        );
    }

    #[test]
    fn char_prints_padded_but_casts_to_text_and_measures_without_padding() {
        let v = Value::Char("ab  ".into());
        assert_eq!(output_text(&v), "ab  ");
        assert_eq!(value_to_text(&v), "ab");
        assert_eq!(char_length(&v), Some(2));
        assert_eq!(char_length(&Value::Text("ab  ".into())), Some(4));
    }
}
