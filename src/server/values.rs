//! Values on the wire: each column type's PostgreSQL type OID, size and
//! modifier (for RowDescription and ParameterDescription), and its text
//! and binary formats, both ways (results out, parameters in). The
//! binary formats are PostgreSQL's `typsend`/`typreceive` ones, so that a
//! driver decodes them as it decodes PostgreSQL's.

use bytes::{BufMut, BytesMut};
use thiserror::Error;

pub use crate::types::pg::{column_type, oid, type_modifier, type_oid, type_size};
use crate::types::{parse_value, write_output_text, ColumnType, Numeric, TypeError, Value};

/// The protocol's format codes.
pub const FORMAT_TEXT: i16 = 0;
pub const FORMAT_BINARY: i16 = 1;

/// A parameter value the client sent that is not one of its type.
#[derive(Debug, Error)]
pub enum ValueError {
    #[error("unsupported format code: {0}; use 0 (text) or 1 (binary)")]
    FormatCode(i16),
    #[error("incorrect binary data format in bind parameter {param}: {problem}")]
    Binary { param: usize, problem: String },
    #[error("invalid byte sequence for encoding \"UTF8\" in bind parameter {param}")]
    Utf8 { param: usize },
    #[error("{source} (bind parameter {param})")]
    Input { param: usize, source: TypeError },
    #[error("type OID {oid} of parameter ${param} is not supported; use integer, bigint, double precision, numeric, text, varchar, char, boolean, date or timestamp, or leave it unspecified (0)")]
    UnknownTypeOid { param: usize, oid: u32 },
}

impl ValueError {
    /// PostgreSQL's SQLSTATE for the same problem.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            ValueError::FormatCode(_) => "08P01",
            ValueError::Binary { .. } => "22P03",
            ValueError::Utf8 { .. } => "22021",
            ValueError::Input { source, .. } => source.sqlstate(),
            ValueError::UnknownTypeOid { .. } => "42704",
        }
    }
}

/// The column type a client's parameter type OID stands for; `None` for
/// 0 and `unknown` (infer it from the statement).
pub fn param_type(param: usize, type_oid: u32) -> Result<Option<ColumnType>, ValueError> {
    Ok(Some(match type_oid {
        0 | oid::UNKNOWN => return Ok(None),
        oid::BOOL => ColumnType::Boolean,
        oid::INT2 | oid::INT4 => ColumnType::Integer,
        oid::INT8 => ColumnType::BigInt,
        oid::FLOAT4 | oid::FLOAT8 => ColumnType::Double,
        oid::TEXT => ColumnType::Text,
        oid::VARCHAR => ColumnType::Varchar(None),
        oid::BPCHAR => ColumnType::Char(None),
        oid::DATE => ColumnType::Date,
        oid::TIMESTAMP => ColumnType::Timestamp,
        oid::NUMERIC => ColumnType::Numeric(None),
        oid => return Err(ValueError::UnknownTypeOid { param, oid }),
    }))
}

/// Appends `v` (not NULL) in `format` to `out`, without the length word.
pub fn encode(v: &Value, format: i16, out: &mut BytesMut) {
    debug_assert!(!v.is_null(), "NULL is sent as length -1, not encoded");
    if format != FORMAT_BINARY {
        // Writing to a BytesMut cannot fail (it grows).
        let written = write_output_text(v, out);
        debug_assert!(written.is_ok(), "a BytesMut takes any text");
        return;
    }
    match v {
        Value::Null => {}
        Value::Integer(x) => out.put_i32(*x),
        Value::BigInt(x) => out.put_i64(*x),
        Value::Double(x) => out.put_f64(*x),
        Value::Text(s) | Value::Char(s) => out.put_slice(s.as_bytes()),
        Value::Boolean(b) => out.put_u8(u8::from(*b)),
        // Both count from 2000-01-01, as PostgreSQL's binary formats do.
        Value::Date(d) => out.put_i32(*d),
        Value::Timestamp(t) => out.put_i64(*t),
        Value::Numeric(n) => encode_numeric(n, out),
    }
}

/// Decodes parameter `param` (1-based, for messages) of type `ty` from
/// `bytes` in `format`.
pub fn decode(
    param: usize,
    ty: ColumnType,
    format: i16,
    bytes: &[u8],
) -> Result<Value, ValueError> {
    match format {
        FORMAT_TEXT => {
            let text = std::str::from_utf8(bytes).map_err(|_| ValueError::Utf8 { param })?;
            if text.contains('\0') {
                return Err(ValueError::Utf8 { param });
            }
            parse_value(text, ty).map_err(|source| ValueError::Input { param, source })
        }
        FORMAT_BINARY => decode_binary(param, ty, bytes),
        other => Err(ValueError::FormatCode(other)),
    }
}

/// `b` as an array, its length checked by the caller.
fn be_bytes<const N: usize>(b: &[u8]) -> [u8; N] {
    b.try_into().expect("the caller checked the length")
}

fn decode_binary(param: usize, ty: ColumnType, bytes: &[u8]) -> Result<Value, ValueError> {
    let wrong = |problem: &str| ValueError::Binary {
        param,
        problem: problem.to_string(),
    };
    let fixed = |n: usize| -> Result<&[u8], ValueError> {
        if bytes.len() == n {
            Ok(bytes)
        } else {
            Err(wrong(&format!(
                "{} bytes for {}, which takes {n}",
                bytes.len(),
                ty.name()
            )))
        }
    };
    Ok(match ty {
        // A client that named int2 sends two bytes.
        ColumnType::Integer if bytes.len() == 2 => {
            Value::Integer(i16::from_be_bytes([bytes[0], bytes[1]]) as i32)
        }
        ColumnType::Integer => Value::Integer(i32::from_be_bytes(be_bytes::<4>(fixed(4)?))),
        ColumnType::BigInt => Value::BigInt(i64::from_be_bytes(be_bytes::<8>(fixed(8)?))),
        // float4 from a client that named it.
        ColumnType::Double if bytes.len() == 4 => {
            Value::Double(f32::from_be_bytes(be_bytes::<4>(bytes)) as f64)
        }
        ColumnType::Double => Value::Double(f64::from_be_bytes(be_bytes::<8>(fixed(8)?))),
        // boolrecv: any byte but 0 is true.
        ColumnType::Boolean => Value::Boolean(fixed(1)?[0] != 0),
        // Checked as date_recv and timestamp_recv check: text input
        // refuses what is out of range, so binary input must too.
        ColumnType::Date => {
            let d = i32::from_be_bytes(be_bytes::<4>(fixed(4)?));
            if !crate::types::datetime::date_is_valid(d) {
                return Err(ValueError::Input {
                    param,
                    source: TypeError::DateOutOfRange,
                });
            }
            Value::Date(d)
        }
        ColumnType::Timestamp => {
            let t = i64::from_be_bytes(be_bytes::<8>(fixed(8)?));
            if !crate::types::datetime::timestamp_is_valid(t) {
                return Err(ValueError::Input {
                    param,
                    source: TypeError::DateOutOfRangeForTimestamp,
                });
            }
            Value::Timestamp(t)
        }
        ColumnType::Text | ColumnType::Varchar(_) | ColumnType::Char(_) => {
            return decode(param, ty, FORMAT_TEXT, bytes)
        }
        ColumnType::Numeric(_) => {
            let text = decode_numeric(bytes).map_err(wrong)?;
            return decode(param, ty, FORMAT_TEXT, text.as_bytes());
        }
    })
}

// PostgreSQL's binary numeric: ndigits, weight, sign and dscale (int16
// each), then ndigits base-10000 digits, the first of weight `weight`.
const NUMERIC_POS: u16 = 0x0000;
const NUMERIC_NEG: u16 = 0x4000;
const NUMERIC_NAN: u16 = 0xC000;
const NUMERIC_PINF: u16 = 0xD000;
const NUMERIC_NINF: u16 = 0xF000;
const NBASE_DIGITS: usize = 4;

/// `n` in PostgreSQL's binary numeric format, from its text (which has
/// exactly its display scale's fraction digits).
fn encode_numeric(n: &Numeric, out: &mut BytesMut) {
    let text = n.to_string();
    let special = match text.as_str() {
        "NaN" => Some(NUMERIC_NAN),
        "Infinity" => Some(NUMERIC_PINF),
        "-Infinity" => Some(NUMERIC_NINF),
        _ => None,
    };
    if let Some(sign) = special {
        out.put_i16(0);
        out.put_i16(0);
        out.put_u16(sign);
        out.put_u16(0);
        return;
    }
    let (sign, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (NUMERIC_NEG, rest),
        None => (NUMERIC_POS, text.as_str()),
    };
    let (int, frac) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    // Pad the integer part on the left and the fraction on the right to
    // whole base-10000 digits.
    let int_pad = (NBASE_DIGITS - int.len() % NBASE_DIGITS) % NBASE_DIGITS;
    let frac_pad = (NBASE_DIGITS - frac.len() % NBASE_DIGITS) % NBASE_DIGITS;
    let decimal: String = std::iter::repeat_n('0', int_pad)
        .chain(int.chars())
        .chain(frac.chars())
        .chain(std::iter::repeat_n('0', frac_pad))
        .collect();
    let mut digits: Vec<i16> = decimal
        .as_bytes()
        .chunks(NBASE_DIGITS)
        .map(|c| {
            c.iter()
                .fold(0i16, |acc, &b| acc * 10 + i16::from(b - b'0'))
        })
        .collect();
    // In i32: 131072 integer digits (numeric's most) make weight 32767,
    // one step short of overflowing an int16 on the way.
    let mut weight = ((int_pad + int.len()) / NBASE_DIGITS) as i32 - 1;
    // Leading and trailing zero digits are not stored.
    let leading = digits.iter().take_while(|&&d| d == 0).count();
    digits.drain(..leading);
    weight -= leading as i32;
    while digits.last() == Some(&0) {
        digits.pop();
    }
    if digits.is_empty() {
        weight = 0;
    }
    debug_assert!(i16::try_from(weight).is_ok() && digits.len() <= usize::from(u16::MAX));
    // PostgreSQL sends the digit count as an int16 that its receiver
    // reads unsigned: numeric's largest values have more than 32767.
    out.put_u16(digits.len() as u16);
    out.put_i16(weight as i16);
    out.put_u16(sign);
    out.put_u16(frac.len() as u16);
    for d in digits {
        out.put_i16(d);
    }
}

/// The text of a binary numeric, for `Numeric`'s own input.
fn decode_numeric(bytes: &[u8]) -> Result<String, &'static str> {
    let word = |i: usize| -> Result<u16, &'static str> {
        bytes
            .get(2 * i..2 * i + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
            .ok_or("a numeric shorter than its header says")
    };
    let ndigits = usize::from(word(0)?);
    let weight = i32::from(word(1)? as i16);
    let sign = word(2)?;
    let dscale = word(3)?;
    match sign {
        NUMERIC_NAN => return Ok("NaN".into()),
        NUMERIC_PINF => return Ok("Infinity".into()),
        NUMERIC_NINF => return Ok("-Infinity".into()),
        NUMERIC_POS | NUMERIC_NEG => {}
        _ => return Err("invalid sign in a numeric"),
    }
    if bytes.len() != 8 + 2 * ndigits || dscale > 0x3fff {
        return Err("a numeric whose length does not match its digits");
    }
    let mut int = String::new();
    let mut frac = String::new();
    for i in 0..ndigits {
        let d = word(4 + i)?;
        if d >= 10000 {
            return Err("a numeric digit out of range");
        }
        let group = format!("{d:04}");
        if (i as i32) <= weight {
            int.push_str(&group);
        } else {
            frac.push_str(&group);
        }
    }
    // Digits of weight below the first stored one (weight < -1) are
    // zeros after the point; whole groups above the last are zeros before.
    // (At most 32768 groups either way: the weight is an int16.)
    let int_groups = (weight + 1).max(0) as usize;
    let stored_int_groups = int_groups.min(ndigits);
    int.extend(std::iter::repeat_n(
        '0',
        (int_groups - stored_int_groups) * NBASE_DIGITS,
    ));
    if weight < -1 {
        frac.insert_str(0, &"0".repeat((-1 - weight) as usize * NBASE_DIGITS));
    }
    let mut frac: String = frac.chars().take(dscale as usize).collect();
    while frac.len() < dscale as usize {
        frac.push('0');
    }
    let int = int.trim_start_matches('0');
    let mut text = String::new();
    if sign == NUMERIC_NEG {
        text.push('-');
    }
    text.push_str(if int.is_empty() { "0" } else { int });
    if !frac.is_empty() {
        text.push('.');
        text.push_str(&frac);
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numeric_round_trip(text: &str) -> String {
        let n = Numeric::parse(text).unwrap();
        let mut out = BytesMut::new();
        encode_numeric(&n, &mut out);
        decode_numeric(&out).unwrap()
    }

    #[test]
    fn numeric_binary_round_trips_through_base_10000_digits() {
        for text in [
            "0",
            "0.00",
            "1",
            "-1",
            "12345.678",
            "10000",
            "100000000.0001",
            "0.00001",
            "-0.000123400",
            "99999999999999999999.99",
            "NaN",
            "Infinity",
            "-Infinity",
        ] {
            assert_eq!(numeric_round_trip(text), text, "{text}");
        }
    }

    #[test]
    fn numeric_binary_matches_postgresql_bytes() {
        // SELECT numeric_send(12345.678): 3 digits, weight 1, positive,
        // dscale 3, digits 1 2345 6780.
        let mut out = BytesMut::new();
        encode_numeric(&Numeric::parse("12345.678").unwrap(), &mut out);
        assert_eq!(
            &out[..],
            [0, 3, 0, 1, 0, 0, 0, 3, 0, 1, 0x09, 0x29, 0x1a, 0x7c]
        );
    }

    proptest::proptest! {
        /// A client's bytes, whatever they are, decode or are refused.
        #[test]
        fn any_binary_numeric_decodes_or_is_refused(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40)) {
            if let Ok(text) = decode_numeric(&bytes) {
                proptest::prop_assert!(Numeric::parse(&text).is_ok(), "{}", text);
            }
        }
    }

    #[test]
    fn binary_dates_out_of_range_are_refused_as_text_ones_are() {
        let e = decode(
            1,
            ColumnType::Date,
            FORMAT_BINARY,
            &2_145_032_948i32.to_be_bytes(),
        )
        .unwrap_err();
        assert_eq!(e.sqlstate(), "22008", "{e}");
        let ok = decode(1, ColumnType::Date, FORMAT_BINARY, &1i32.to_be_bytes()).unwrap();
        assert_eq!(ok, Value::Date(1));
    }

    #[test]
    fn the_largest_numeric_has_weight_32767() {
        let n = Numeric::parse(&"9".repeat(131_072)).unwrap();
        let mut out = BytesMut::new();
        encode_numeric(&n, &mut out);
        assert_eq!(
            &out[..4],
            [0x80, 0x00, 0x7f, 0xff],
            "32768 digits, weight 32767"
        );
        assert_eq!(decode_numeric(&out).unwrap(), "9".repeat(131_072));
    }

    #[test]
    fn binary_parameters_of_the_wrong_length_are_refused() {
        let e = decode(2, ColumnType::Integer, FORMAT_BINARY, &[0, 0, 1]).unwrap_err();
        assert!(matches!(e, ValueError::Binary { param: 2, .. }), "{e}");
        assert_eq!(e.sqlstate(), "22P03");
        let v = decode(1, ColumnType::BigInt, FORMAT_BINARY, &7i64.to_be_bytes()).unwrap();
        assert_eq!(v, Value::BigInt(7));
        let e = decode(1, ColumnType::Integer, FORMAT_TEXT, b"x").unwrap_err();
        assert_eq!(e.sqlstate(), "22P02");
        assert!(decode(1, ColumnType::Text, FORMAT_TEXT, b"a\0b").is_err());
    }
}
