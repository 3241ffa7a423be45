//! `numeric`: PostgreSQL's arbitrary-precision decimal, with its text
//! forms, display scales, rounding, limits, ordering and arithmetic.
//!
//! A finite value is an integer of any size (`num_bigint::BigInt`) times
//! 10^-scale, where the scale is PostgreSQL's *display scale* (`dscale`):
//! the number of digits after the point the value prints with. `1.50` is
//! 150 × 10^-2 and prints `1.50`; it equals `1.5` (15 × 10^-1), and the
//! two hash alike (the `Hash` drops trailing zeros first). Every
//! operation sets the result's scale as PostgreSQL's does (`+`: the larger
//! scale; `*`: the sum; `/`: `select_div_scale`; `round(x, n)`: n), so
//! that results print as PostgreSQL prints them. Beside the numbers are
//! `NaN`, which equals itself and sorts above everything, and `Infinity`
//! and `-Infinity` (PostgreSQL 14+).
//!
//! Why not a decimal crate: `rust_decimal` holds 28 digits, PostgreSQL up
//! to 131072 before the point and 16383 after; `bigdecimal` holds them,
//! but its scale rules are not PostgreSQL's (its division works to a
//! precision of 100 digits, its text form switches to exponents, its
//! scale may be negative), so every operation would have been rewritten
//! over it anyway. What a crate does better than we would, exact integer
//! arithmetic of any size, comes from `num-bigint`.
//!
//! Limits, as PostgreSQL's storage format has them: a display scale of at
//! most [`NUMERIC_DSCALE_MAX`] digits and at most
//! [`NUMERIC_MAX_INTEGER_DIGITS`] digits before the point; a value beyond
//! either is "value overflows numeric format".
//!
//! ```
//! use aiostore::types::Numeric;
//!
//! let x = Numeric::parse(" 1.50 ")?;
//! assert_eq!(x.to_string(), "1.50");
//! let third = Numeric::from_i64(1).div(&Numeric::from_i64(3))?;
//! assert_eq!(third.to_string(), "0.33333333333333333333");
//! assert_eq!(x.add(&third)?.to_string(), "1.83333333333333333333");
//! assert!(Numeric::parse("NaN")? > Numeric::parse("Infinity")?);
//! # Ok::<(), aiostore::types::TypeError>(())
//! ```

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

use num_bigint::{BigInt, BigUint, Sign};
use num_integer::Integer;
use num_traits::{Signed, ToPrimitive, Zero};

use super::TypeError;

/// Largest display scale a value may have (PostgreSQL's
/// `NUMERIC_DSCALE_MAX`, the 14 bits its header keeps for it).
pub const NUMERIC_DSCALE_MAX: u16 = 0x3FFF;

/// Most digits a value may have before the point: PostgreSQL keeps the
/// weight of the first base-10000 digit in 16 bits, so 32768 × 4.
pub const NUMERIC_MAX_INTEGER_DIGITS: i64 = 131_072;

/// Largest precision `numeric(p, s)` may declare, and the bounds of its
/// scale (PostgreSQL 15's `NUMERIC_MAX_PRECISION`, `NUMERIC_MIN_SCALE`,
/// `NUMERIC_MAX_SCALE`).
pub const NUMERIC_MAX_PRECISION: i64 = 1000;
pub const NUMERIC_MIN_SCALE: i64 = -1000;
pub const NUMERIC_MAX_SCALE: i64 = 1000;

/// Significant digits a quotient has at least (`NUMERIC_MIN_SIG_DIGITS`),
/// and the largest scale `select_div_scale` picks
/// (`NUMERIC_MAX_DISPLAY_SCALE`).
const DIV_MIN_SIG_DIGITS: i64 = 16;
const DIV_MAX_DISPLAY_SCALE: i64 = 1000;

/// `round(x, n)` and `trunc(x, n)` take n within ± this
/// (`NUMERIC_MAX_RESULT_SCALE`).
const ROUND_SCALE_LIMIT: i64 = 2000;

/// An exponent written in input beyond ± this is refused before it is
/// used (PostgreSQL's `INT_MAX / 2` bound, which keeps its arithmetic on
/// the exponent from overflowing).
const INPUT_EXPONENT_LIMIT: i64 = (i32::MAX / 2) as i64;

/// Decimal digits per digit of PostgreSQL's base (10000): the unit in
/// which `select_div_scale` estimates a quotient's size.
const NBASE_DIGITS: i64 = 4;

/// Significant digits of a double that `float8_numeric` keeps (`DBL_DIG`).
const DOUBLE_DIGITS: usize = 15;

/// The precision and scale of `numeric(p, s)` (PostgreSQL's typmod):
/// values are rounded to s digits after the point (s may be negative:
/// to tens, hundreds…) and must then be below 10^(p - s) in magnitude.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NumericTypmod {
    precision: u16,
    scale: i16,
}

impl NumericTypmod {
    /// `numeric(precision, scale)`, checked as PostgreSQL's
    /// `numerictypmodin` checks it.
    pub fn new(precision: i64, scale: i64) -> Result<NumericTypmod, TypeError> {
        if !(1..=NUMERIC_MAX_PRECISION).contains(&precision) {
            return Err(TypeError::NumericTypmod {
                what: "precision",
                value: precision,
                min: 1,
                max: NUMERIC_MAX_PRECISION,
            });
        }
        if !(NUMERIC_MIN_SCALE..=NUMERIC_MAX_SCALE).contains(&scale) {
            return Err(TypeError::NumericTypmod {
                what: "scale",
                value: scale,
                min: NUMERIC_MIN_SCALE,
                max: NUMERIC_MAX_SCALE,
            });
        }
        // In range, so both fit.
        Ok(NumericTypmod {
            precision: precision as u16,
            scale: scale as i16,
        })
    }

    pub fn precision(self) -> u16 {
        self.precision
    }

    pub fn scale(self) -> i16 {
        self.scale
    }

    /// The typmod in 21 bits, never 0 (precision ≥ 1): the catalog's
    /// modifier field (see `ColumnType::code`).
    pub(crate) fn to_bits(self) -> u32 {
        let scale_offset = (i32::from(self.scale) - NUMERIC_MIN_SCALE as i32) as u32;
        (u32::from(self.precision) << 11) | scale_offset
    }

    /// The typmod [`NumericTypmod::to_bits`] gave, if `bits` is one.
    pub(crate) fn from_bits(bits: u32) -> Option<NumericTypmod> {
        let precision = i64::from(bits >> 11);
        let scale = i64::from(bits & 0x7FF) + NUMERIC_MIN_SCALE;
        NumericTypmod::new(precision, scale).ok()
    }
}

/// A `numeric` value. Boxed, so that a [`super::Value`] holding one
/// stays as small as the other values.
#[derive(Debug, Clone)]
pub struct Numeric(Box<Repr>);

#[derive(Debug, Clone)]
enum Repr {
    NaN,
    Infinity,
    NegInfinity,
    Finite(Finite),
}

/// `digits` × 10^-`scale`; `scale` is the display scale, at most
/// [`NUMERIC_DSCALE_MAX`].
#[derive(Debug, Clone)]
struct Finite {
    digits: BigInt,
    scale: u16,
}

impl Finite {
    /// Both operands' digits at the larger of their scales, and that
    /// scale. An operand already at it is borrowed, not copied: this runs
    /// for every row a `sum` adds and every comparison of two numerics.
    fn aligned<'a>(&'a self, other: &'a Finite) -> (Cow<'a, BigInt>, Cow<'a, BigInt>, u16) {
        let up = |x: &BigInt, by: u16| Cow::Owned(x * ten_pow(u64::from(by)));
        match self.scale.cmp(&other.scale) {
            Ordering::Equal => (
                Cow::Borrowed(&self.digits),
                Cow::Borrowed(&other.digits),
                self.scale,
            ),
            Ordering::Less => (
                up(&self.digits, other.scale - self.scale),
                Cow::Borrowed(&other.digits),
                other.scale,
            ),
            Ordering::Greater => (
                Cow::Borrowed(&self.digits),
                up(&other.digits, self.scale - other.scale),
                self.scale,
            ),
        }
    }
}

/// Characters PostgreSQL's input functions skip around a value (C's
/// `isspace`).
fn is_c_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\u{b}' | '\u{c}' | '\r')
}

fn ten_pow(n: u64) -> BigInt {
    num_traits::pow(BigInt::from(10u8), n as usize)
}

/// `x` divided by `d` (> 0), rounded half away from zero (PostgreSQL's
/// `round_var`).
fn div_round_half_away(x: &BigInt, d: &BigInt) -> BigInt {
    let (q, r) = x.div_rem(d);
    if (r.abs() << 1) >= *d {
        if x.is_negative() {
            q - 1
        } else {
            q + 1
        }
    } else {
        q
    }
}

impl Numeric {
    fn finite(digits: BigInt, scale: u16) -> Numeric {
        debug_assert!(scale <= NUMERIC_DSCALE_MAX);
        Numeric(Box::new(Repr::Finite(Finite { digits, scale })))
    }

    pub fn nan() -> Numeric {
        Numeric(Box::new(Repr::NaN))
    }

    pub fn infinity(negative: bool) -> Numeric {
        Numeric(Box::new(if negative {
            Repr::NegInfinity
        } else {
            Repr::Infinity
        }))
    }

    pub fn from_i64(x: i64) -> Numeric {
        Numeric::finite(BigInt::from(x), 0)
    }

    pub fn is_nan(&self) -> bool {
        matches!(*self.0, Repr::NaN)
    }

    /// Whether it is `Infinity` or `-Infinity`.
    pub fn is_infinite(&self) -> bool {
        matches!(*self.0, Repr::Infinity | Repr::NegInfinity)
    }

    /// The display scale (0 for NaN and the infinities).
    pub fn scale(&self) -> u16 {
        match &*self.0 {
            Repr::Finite(Finite { scale, .. }) => *scale,
            _ => 0,
        }
    }

    fn sign(&self) -> Ordering {
        match &*self.0 {
            Repr::NaN => Ordering::Equal,
            Repr::Infinity => Ordering::Greater,
            Repr::NegInfinity => Ordering::Less,
            Repr::Finite(Finite { digits, .. }) => match digits.sign() {
                Sign::Minus => Ordering::Less,
                Sign::NoSign => Ordering::Equal,
                Sign::Plus => Ordering::Greater,
            },
        }
    }

    /// A finite value checked against the storage format's limits
    /// (PostgreSQL's `make_result`): the scale, and the digits before
    /// the point.
    fn checked(digits: BigInt, scale: i64) -> Result<Numeric, TypeError> {
        let Ok(scale) = u16::try_from(scale) else {
            return Err(TypeError::NumericFormatOverflow);
        };
        if scale > NUMERIC_DSCALE_MAX {
            return Err(TypeError::NumericFormatOverflow);
        }
        // Below this many bits a value has fewer digits than the limit,
        // so the common case skips counting them (a sum adds a row at a
        // time).
        const BITS_BELOW_DIGIT_LIMIT: u64 = 400_000;
        debug_assert!(
            (BITS_BELOW_DIGIT_LIMIT as f64 * std::f64::consts::LOG10_2)
                < NUMERIC_MAX_INTEGER_DIGITS as f64
        );
        if digits.bits() > BITS_BELOW_DIGIT_LIMIT
            && decimal_len(digits.magnitude()) - i64::from(scale) > NUMERIC_MAX_INTEGER_DIGITS
        {
            return Err(TypeError::NumericFormatOverflow);
        }
        Ok(Numeric::finite(digits, scale))
    }

    /// The value `text` stands for (PostgreSQL's `numeric_in` without a
    /// typmod): spaces around it, a sign, digits with at most one point
    /// and at least one digit, an exponent (`1.5e3`, `1E-3`); or `NaN`,
    /// `Infinity`, `inf` with a sign, in any case. The display scale is
    /// the digits written after the point less the exponent, and not
    /// below 0 (`1.50` has 2, `1.5e3` 0, `15e-3` 3).
    pub fn parse(text: &str) -> Result<Numeric, TypeError> {
        let invalid = || TypeError::InvalidInput {
            ty: "numeric",
            text: text.to_string(),
        };
        let t = text.trim_matches(is_c_space);
        let spelled = |words: &[&str]| words.iter().any(|w| t.eq_ignore_ascii_case(w));
        if spelled(&["nan"]) {
            return Ok(Numeric::nan());
        }
        if spelled(&["infinity", "+infinity", "inf", "+inf"]) {
            return Ok(Numeric::infinity(false));
        }
        if spelled(&["-infinity", "-inf"]) {
            return Ok(Numeric::infinity(true));
        }
        let bytes = t.as_bytes();
        let mut at = 0;
        let negative = match bytes.first() {
            Some(b'-') => {
                at += 1;
                true
            }
            Some(b'+') => {
                at += 1;
                false
            }
            _ => false,
        };
        let mut mantissa = String::with_capacity(bytes.len());
        let mut fraction_digits: i64 = 0;
        let mut seen_point = false;
        while let Some(&b) = bytes.get(at) {
            match b {
                b'0'..=b'9' => {
                    mantissa.push(b as char);
                    if seen_point {
                        fraction_digits += 1;
                    }
                }
                b'.' if !seen_point => seen_point = true,
                _ => break,
            }
            at += 1;
        }
        if mantissa.is_empty() {
            return Err(invalid());
        }
        let mut exponent: i64 = 0;
        if matches!(bytes.get(at), Some(b'e' | b'E')) {
            // As C's strtol reads it: spaces, a sign, digits.
            let rest = &t[at + 1..];
            let rest = rest.trim_start_matches(is_c_space);
            let (exp_negative, digits) = match rest.as_bytes().first() {
                Some(b'-') => (true, &rest[1..]),
                Some(b'+') => (false, &rest[1..]),
                _ => (false, rest),
            };
            let len = digits.bytes().take_while(u8::is_ascii_digit).count();
            if len == 0 {
                return Err(invalid());
            }
            // Saturating, as strtol does; the limit below refuses it.
            let magnitude = digits[..len].bytes().fold(0i64, |n, b| {
                n.saturating_mul(10).saturating_add(i64::from(b - b'0'))
            });
            exponent = if exp_negative { -magnitude } else { magnitude };
            at = t.len() - digits.len() + len;
            if exponent >= INPUT_EXPONENT_LIMIT || exponent <= -INPUT_EXPONENT_LIMIT {
                return Err(TypeError::NumericFormatOverflow);
            }
        }
        if at != t.len() {
            return Err(invalid());
        }
        let significant = mantissa.trim_start_matches('0');
        // value = significant × 10^(exponent - fraction_digits)
        let shift = exponent - fraction_digits;
        let scale = (-shift).max(0);
        if scale > i64::from(NUMERIC_DSCALE_MAX) {
            return Err(TypeError::NumericFormatOverflow);
        }
        if significant.is_empty() {
            return Ok(Numeric::finite(BigInt::zero(), scale as u16));
        }
        if significant.len() as i64 + shift > NUMERIC_MAX_INTEGER_DIGITS {
            return Err(TypeError::NumericFormatOverflow);
        }
        let magnitude: BigUint = significant.parse().map_err(|_| invalid())?;
        let mut digits = BigInt::from_biguint(Sign::Plus, magnitude);
        if shift > 0 {
            digits *= ten_pow(shift as u64);
        }
        if negative {
            digits = -digits;
        }
        Numeric::checked(digits, scale)
    }

    /// The value made to fit `numeric(p, s)` (PostgreSQL's
    /// `apply_typmod`): rounded half away from zero to s digits after the
    /// point (its display scale becomes s, or 0 if s is negative), then
    /// refused with "numeric field overflow" if its magnitude is not below
    /// 10^(p - s). NaN fits any; an infinity none. `None` (plain
    /// `numeric`, PostgreSQL's typmod -1) keeps the value as it is.
    pub fn apply_typmod(self, typmod: Option<NumericTypmod>) -> Result<Numeric, TypeError> {
        let Some(typmod) = typmod else {
            return Ok(self);
        };
        let overflow = |infinite| TypeError::NumericFieldOverflow {
            precision: typmod.precision,
            scale: typmod.scale,
            infinite,
        };
        let rounded = match &*self.0 {
            Repr::NaN => return Ok(self),
            Repr::Infinity | Repr::NegInfinity => return Err(overflow(true)),
            Repr::Finite(_) => self.round(i64::from(typmod.scale))?,
        };
        let max_integer_digits = i64::from(typmod.precision) - i64::from(typmod.scale);
        if let Some(integer_digits) = rounded.integer_digits() {
            if integer_digits > max_integer_digits {
                return Err(overflow(false));
            }
        }
        Ok(rounded)
    }

    /// For a finite value other than zero, the position of its first
    /// digit counted from the point: 3 for 123.4, 0 for 0.5, -1 for 0.05.
    fn integer_digits(&self) -> Option<i64> {
        match &*self.0 {
            Repr::Finite(Finite { digits, scale }) if !digits.is_zero() => {
                Some(decimal_len(digits.magnitude()) - i64::from(*scale))
            }
            _ => None,
        }
    }

    /// The value rounded half away from zero to `scale` digits after the
    /// point (negative: to tens, hundreds…), with that display scale (0
    /// if negative): `round(x, n)`, and a typmod's rounding.
    pub fn round(&self, scale: i64) -> Result<Numeric, TypeError> {
        self.rescale(scale, true)
    }

    /// The value truncated towards zero to `scale` digits after the
    /// point: `trunc(x, n)`.
    pub fn trunc(&self, scale: i64) -> Result<Numeric, TypeError> {
        self.rescale(scale, false)
    }

    fn rescale(&self, scale: i64, round: bool) -> Result<Numeric, TypeError> {
        let Repr::Finite(Finite {
            digits,
            scale: have,
        }) = &*self.0
        else {
            return Ok(self.clone());
        };
        let scale = scale.clamp(-ROUND_SCALE_LIMIT, ROUND_SCALE_LIMIT);
        let have = i64::from(*have);
        let kept = if scale >= have {
            digits * ten_pow((scale - have) as u64)
        } else {
            let divisor = ten_pow((have - scale) as u64);
            let quotient = if round {
                div_round_half_away(digits, &divisor)
            } else {
                digits / &divisor
            };
            if scale < 0 {
                // Back to units: the digits below 10^-scale are zeros.
                quotient * ten_pow(scale.unsigned_abs())
            } else {
                quotient
            }
        };
        Numeric::checked(kept, scale.max(0))
    }

    /// `ceil(x)` (`ceiling`): the least integer not below it, scale 0.
    pub fn ceil(&self) -> Result<Numeric, TypeError> {
        self.to_integer_by(|q, r| if r.is_positive() { q + 1 } else { q })
    }

    /// `floor(x)`: the greatest integer not above it, scale 0.
    pub fn floor(&self) -> Result<Numeric, TypeError> {
        self.to_integer_by(|q, r| if r.is_negative() { q - 1 } else { q })
    }

    /// An integer from the truncated quotient and remainder of the
    /// digits by 10^scale.
    fn to_integer_by(&self, pick: impl Fn(BigInt, BigInt) -> BigInt) -> Result<Numeric, TypeError> {
        let Repr::Finite(Finite { digits, scale }) = &*self.0 else {
            return Ok(self.clone());
        };
        let (q, r) = digits.div_rem(&ten_pow(u64::from(*scale)));
        Numeric::checked(pick(q, r), 0)
    }

    /// `-x`.
    pub fn neg(&self) -> Numeric {
        match &*self.0 {
            Repr::NaN => Numeric::nan(),
            Repr::Infinity => Numeric::infinity(true),
            Repr::NegInfinity => Numeric::infinity(false),
            Repr::Finite(Finite { digits, scale }) => Numeric::finite(-digits, *scale),
        }
    }

    /// `abs(x)`.
    pub fn abs(&self) -> Numeric {
        if self.sign() == Ordering::Less {
            self.neg()
        } else {
            self.clone()
        }
    }

    /// `x + y`, at the larger of the two scales. Infinity plus -Infinity
    /// is NaN.
    pub fn add(&self, other: &Numeric) -> Result<Numeric, TypeError> {
        match (&*self.0, &*other.0) {
            (Repr::NaN, _) | (_, Repr::NaN) => Ok(Numeric::nan()),
            (Repr::Infinity, Repr::NegInfinity) | (Repr::NegInfinity, Repr::Infinity) => {
                Ok(Numeric::nan())
            }
            (Repr::Infinity | Repr::NegInfinity, _) => Ok(self.clone()),
            (_, Repr::Infinity | Repr::NegInfinity) => Ok(other.clone()),
            (Repr::Finite(a), Repr::Finite(b)) => {
                let (a, b, scale) = a.aligned(b);
                Numeric::checked(&*a + &*b, i64::from(scale))
            }
        }
    }

    /// `x - y`.
    pub fn sub(&self, other: &Numeric) -> Result<Numeric, TypeError> {
        self.add(&other.neg())
    }

    /// `x * y`, exact at the sum of the scales, rounded to the largest
    /// scale if beyond it. Zero times an infinity is NaN.
    pub fn mul(&self, other: &Numeric) -> Result<Numeric, TypeError> {
        match (&*self.0, &*other.0) {
            (Repr::NaN, _) | (_, Repr::NaN) => Ok(Numeric::nan()),
            (Repr::Finite(a), Repr::Finite(b)) => {
                let scale = i64::from(a.scale) + i64::from(b.scale);
                let product = &a.digits * &b.digits;
                let max = i64::from(NUMERIC_DSCALE_MAX);
                if scale > max {
                    let divisor = ten_pow((scale - max) as u64);
                    return Numeric::checked(div_round_half_away(&product, &divisor), max);
                }
                Numeric::checked(product, scale)
            }
            // An infinity times a number: an infinity of the product's
            // sign, or NaN for zero.
            _ => Ok(match (self.sign() as i8) * (other.sign() as i8) {
                0 => Numeric::nan(),
                sign => Numeric::infinity(sign < 0),
            }),
        }
    }

    /// The first base-10000 digit of a finite value other than zero and
    /// its weight (the power of 10000 it stands for), as PostgreSQL's
    /// digits are grouped from the point: what `select_div_scale`
    /// estimates a quotient's size from. (0, 0) for zero.
    fn nbase_weight_and_first_digit(x: &Finite) -> (i64, u32) {
        if x.digits.is_zero() {
            return (0, 0);
        }
        let text = x.digits.magnitude().to_string();
        let first_exponent = text.len() as i64 - 1 - i64::from(x.scale);
        let weight = first_exponent.div_euclid(NBASE_DIGITS);
        // The first group holds the digits of exponents
        // 4·weight ..= first_exponent, 1 to 4 of them.
        let group_len = (first_exponent - NBASE_DIGITS * weight + 1) as usize;
        let taken = &text[..group_len.min(text.len())];
        let mut first: u32 = taken.parse().unwrap_or(0);
        for _ in taken.len()..group_len {
            first *= 10;
        }
        (weight, first)
    }

    /// The scale of `x / y` (PostgreSQL's `select_div_scale`): enough for
    /// 16 significant digits, estimated in base-10000 digits, and no less
    /// than either operand's scale; at most 1000.
    fn division_scale(a: &Finite, b: &Finite) -> i64 {
        let (weight1, first1) = Numeric::nbase_weight_and_first_digit(a);
        let (weight2, first2) = Numeric::nbase_weight_and_first_digit(b);
        let mut quotient_weight = weight1 - weight2;
        if first1 <= first2 {
            quotient_weight -= 1;
        }
        (DIV_MIN_SIG_DIGITS - quotient_weight * NBASE_DIGITS)
            .max(i64::from(a.scale))
            .max(i64::from(b.scale))
            .clamp(0, DIV_MAX_DISPLAY_SCALE)
    }

    /// `x / y`, rounded half away from zero to the scale
    /// `select_div_scale` picks. A finite number divided by an infinity
    /// is 0; division by zero is an error unless x is NaN.
    pub fn div(&self, other: &Numeric) -> Result<Numeric, TypeError> {
        match (&*self.0, &*other.0) {
            (Repr::NaN, _) | (_, Repr::NaN) => Ok(Numeric::nan()),
            (Repr::Infinity | Repr::NegInfinity, Repr::Infinity | Repr::NegInfinity) => {
                Ok(Numeric::nan())
            }
            (_, Repr::Finite(Finite { digits, .. })) if digits.is_zero() => {
                Err(TypeError::DivisionByZero)
            }
            (Repr::Infinity | Repr::NegInfinity, _) => Ok(Numeric::infinity(
                (self.sign() as i8) * (other.sign() as i8) < 0,
            )),
            (Repr::Finite(_), Repr::Infinity | Repr::NegInfinity) => Ok(Numeric::from_i64(0)),
            (Repr::Finite(a), Repr::Finite(b)) => {
                let scale = Numeric::division_scale(a, b);
                // a·10^-sa / (b·10^-sb) · 10^scale = a·10^(scale+sb-sa) / b
                let shift = scale + i64::from(b.scale) - i64::from(a.scale);
                let (numerator, denominator) = if shift >= 0 {
                    (&a.digits * ten_pow(shift as u64), b.digits.clone())
                } else {
                    (a.digits.clone(), &b.digits * ten_pow(shift.unsigned_abs()))
                };
                // Round on the magnitudes, then give the quotient its sign.
                let negative = numerator.is_negative() != denominator.is_negative();
                let q = div_round_half_away(&numerator.abs(), &denominator.abs());
                Numeric::checked(if negative { -q } else { q }, scale)
            }
        }
    }

    /// `x % y`: the remainder of the division truncated towards zero, with
    /// x's sign, at the larger scale. An infinite x gives NaN (but is an
    /// error for y = 0); an infinite y gives x.
    pub fn rem(&self, other: &Numeric) -> Result<Numeric, TypeError> {
        match (&*self.0, &*other.0) {
            (Repr::NaN, _) | (_, Repr::NaN) => Ok(Numeric::nan()),
            (_, Repr::Finite(Finite { digits, .. })) if digits.is_zero() => {
                Err(TypeError::DivisionByZero)
            }
            (Repr::Infinity | Repr::NegInfinity, _) => Ok(Numeric::nan()),
            (_, Repr::Infinity | Repr::NegInfinity) => Ok(self.clone()),
            (Repr::Finite(a), Repr::Finite(b)) => {
                let (a, b, scale) = a.aligned(b);
                // BigInt's % truncates: the remainder has the dividend's sign.
                Numeric::checked(&*a % &*b, i64::from(scale))
            }
        }
    }

    /// The value rounded half away from zero, as a 64-bit integer: a cast
    /// to `ty` (`integer` or `bigint`, named in the errors), whose caller
    /// checks the narrower range of `integer` as for any integer.
    pub fn to_integer(&self, ty: &'static str) -> Result<i64, TypeError> {
        match &*self.0 {
            Repr::NaN => Err(TypeError::CannotConvert { what: "NaN", ty }),
            Repr::Infinity | Repr::NegInfinity => Err(TypeError::CannotConvert {
                what: "infinity",
                ty,
            }),
            Repr::Finite(Finite { digits, scale }) => {
                let rounded = div_round_half_away(digits, &ten_pow(u64::from(*scale)));
                rounded.to_i64().ok_or(TypeError::OutOfRange { ty })
            }
        }
    }

    /// The value as a double, the nearest to it (PostgreSQL's
    /// `numeric_float8`, which reads the value's text as a double: a value
    /// beyond a double's range is an error naming that text).
    pub fn to_f64(&self) -> Result<f64, TypeError> {
        match &*self.0 {
            Repr::NaN => Ok(f64::NAN),
            Repr::Infinity => Ok(f64::INFINITY),
            Repr::NegInfinity => Ok(f64::NEG_INFINITY),
            Repr::Finite(_) => super::text::parse_double(&self.to_string()),
        }
    }

    /// The value as a double without an error: what comparing a numeric
    /// with a double uses (beyond a double's range, an infinity).
    pub fn to_f64_lossy(&self) -> f64 {
        match &*self.0 {
            Repr::NaN => f64::NAN,
            Repr::Infinity => f64::INFINITY,
            Repr::NegInfinity => f64::NEG_INFINITY,
            Repr::Finite(_) => self.to_string().parse().unwrap_or(f64::NAN),
        }
    }

    /// A double as PostgreSQL's `float8_numeric` converts it: its 15
    /// significant digits (`%.15g`), not the shortest that read back, so
    /// `0.1::float8 + 0.2` gives `0.3`.
    pub fn from_f64(x: f64) -> Result<Numeric, TypeError> {
        if x.is_nan() {
            return Ok(Numeric::nan());
        }
        if x.is_infinite() {
            return Ok(Numeric::infinity(x < 0.0));
        }
        let text = format!("{:.*e}", DOUBLE_DIGITS - 1, x);
        // `%g` drops the mantissa's trailing zeros, so they add no scale.
        let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
        let mantissa = if mantissa.contains('.') {
            mantissa.trim_end_matches('0').trim_end_matches('.')
        } else {
            mantissa
        };
        Numeric::parse(&format!("{mantissa}e{exponent}"))
    }

    /// Digits and scale without the trailing zeros of the scale (equal
    /// values give one form): what hashing uses. Generic so that digits
    /// fitting 64 bits are stripped without allocating.
    fn normalized<T: Integer + From<u8>>(mut digits: T, mut scale: u16) -> (T, u16) {
        let ten = T::from(10u8);
        while scale > 0 && !digits.is_zero() {
            let (q, r) = digits.div_rem(&ten);
            if !r.is_zero() {
                break;
            }
            digits = q;
            scale -= 1;
        }
        if digits.is_zero() {
            scale = 0;
        }
        (digits, scale)
    }

    /// Appends the value's storage form: a little-endian u16 header, then
    /// for a finite value the digits' magnitude, little-endian, as few
    /// bytes as it takes (none for zero). The header holds the display
    /// scale in its low 14 bits and the kind in its top 2, as
    /// PostgreSQL's does: 00 positive, 01 negative, 11 special (NaN, and
    /// in the scale bits 1 for Infinity, 2 for -Infinity).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let header: u16 = match &*self.0 {
            Repr::NaN => HEADER_SPECIAL,
            Repr::Infinity => HEADER_SPECIAL | SPECIAL_INFINITY,
            Repr::NegInfinity => HEADER_SPECIAL | SPECIAL_NEG_INFINITY,
            Repr::Finite(Finite { digits, scale }) => {
                debug_assert!(*scale <= NUMERIC_DSCALE_MAX);
                let sign = if digits.is_negative() {
                    HEADER_NEGATIVE
                } else {
                    0
                };
                sign | scale
            }
        };
        out.extend_from_slice(&header.to_le_bytes());
        if let Repr::Finite(Finite { digits, .. }) = &*self.0 {
            if !digits.is_zero() {
                out.extend_from_slice(&digits.magnitude().to_bytes_le());
            }
        }
    }

    /// Bytes [`Numeric::encode`] appends.
    pub fn encoded_len(&self) -> usize {
        match &*self.0 {
            Repr::Finite(Finite { digits, .. }) if !digits.is_zero() => {
                2 + (digits.magnitude().bits() as usize).div_ceil(8)
            }
            _ => 2,
        }
    }

    /// The value [`Numeric::encode`] wrote as `bytes` (all of them);
    /// `None` if they are not such a value.
    pub fn decode(bytes: &[u8]) -> Option<Numeric> {
        let header = u16::from_le_bytes(bytes.get(..2)?.try_into().ok()?);
        let magnitude = &bytes[2..];
        let scale = header & NUMERIC_DSCALE_MAX;
        match header & !NUMERIC_DSCALE_MAX {
            HEADER_SPECIAL if magnitude.is_empty() => match scale {
                0 => Some(Numeric::nan()),
                SPECIAL_INFINITY => Some(Numeric::infinity(false)),
                SPECIAL_NEG_INFINITY => Some(Numeric::infinity(true)),
                _ => None,
            },
            sign @ (0 | HEADER_NEGATIVE) => {
                // The encoder writes no high zero byte (and none for zero).
                if magnitude.last() == Some(&0) {
                    return None;
                }
                let sign = if sign == HEADER_NEGATIVE && !magnitude.is_empty() {
                    Sign::Minus
                } else {
                    Sign::Plus
                };
                let digits = BigInt::from_biguint(sign, BigUint::from_bytes_le(magnitude));
                Some(Numeric::finite(digits, scale))
            }
            _ => None,
        }
    }

    /// Memory the value owns beyond the [`Numeric`] itself (for
    /// `work_mem` accounting).
    pub fn heap_bytes(&self) -> usize {
        let digits = match &*self.0 {
            Repr::Finite(Finite { digits, .. }) => {
                digits.magnitude().bits().div_ceil(64) as usize * 8
            }
            _ => 0,
        };
        std::mem::size_of::<Repr>() + digits
    }
}

const HEADER_NEGATIVE: u16 = 0x4000;
const HEADER_SPECIAL: u16 = 0xC000;
const SPECIAL_INFINITY: u16 = 1;
const SPECIAL_NEG_INFINITY: u16 = 2;

/// Decimal digits of `x` (1 for 0).
fn decimal_len(x: &BigUint) -> i64 {
    // A first guess from the bits, off by at most one, then checked.
    let bits = x.bits();
    if bits < 64 {
        let v = x.to_u64().unwrap_or(0);
        return v.checked_ilog10().map_or(1, |l| i64::from(l) + 1);
    }
    // 2^(bits-1) ≤ x < 2^bits: x has `guess` or `guess + 1` digits, or
    // `guess - 1` should the rounding of the product land just above an
    // integer.
    let guess = ((bits - 1) as f64 * std::f64::consts::LOG10_2) as u64 + 1;
    let low = num_traits::pow(BigUint::from(10u8), (guess - 1) as usize);
    if *x < low {
        guess as i64 - 1
    } else if *x >= low * 10u8 {
        guess as i64 + 1
    } else {
        guess as i64
    }
}

impl fmt::Display for Numeric {
    /// The text PostgreSQL's `numeric_out` prints: the digits with as
    /// many after the point as the display scale, never in exponent form;
    /// `NaN`, `Infinity`, `-Infinity`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &*self.0 {
            Repr::NaN => f.write_str("NaN"),
            Repr::Infinity => f.write_str("Infinity"),
            Repr::NegInfinity => f.write_str("-Infinity"),
            Repr::Finite(Finite { digits, scale }) => {
                let scale = usize::from(*scale);
                let text = digits.magnitude().to_string();
                if digits.is_negative() {
                    f.write_str("-")?;
                }
                if scale == 0 {
                    return f.write_str(&text);
                }
                if text.len() <= scale {
                    f.write_str("0.")?;
                    for _ in text.len()..scale {
                        f.write_str("0")?;
                    }
                    return f.write_str(&text);
                }
                let (whole, fraction) = text.split_at(text.len() - scale);
                write!(f, "{whole}.{fraction}")
            }
        }
    }
}

impl PartialEq for Numeric {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Numeric {}

impl PartialOrd for Numeric {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Numeric {
    /// PostgreSQL's order: -Infinity, the numbers, Infinity, NaN (NaN
    /// equals NaN); numbers by value whatever their scales.
    fn cmp(&self, other: &Self) -> Ordering {
        fn rank(r: &Repr) -> u8 {
            match r {
                Repr::NegInfinity => 0,
                Repr::Finite(_) => 1,
                Repr::Infinity => 2,
                Repr::NaN => 3,
            }
        }
        match (&*self.0, &*other.0) {
            (Repr::Finite(a), Repr::Finite(b)) => {
                // Signs first: a scale-up is only needed between two
                // numbers of one sign (aligned borrows both if their
                // scales agree).
                a.digits.sign().cmp(&b.digits.sign()).then_with(|| {
                    let (a, b, _) = a.aligned(b);
                    a.cmp(&b)
                })
            }
            (a, b) => rank(a).cmp(&rank(b)),
        }
    }
}

impl Hash for Numeric {
    /// Equal values hash alike: `1.0` and `1.00` as `1`.
    fn hash<H: Hasher>(&self, state: &mut H) {
        match &*self.0 {
            Repr::NaN => state.write_u8(0),
            Repr::Infinity => state.write_u8(1),
            Repr::NegInfinity => state.write_u8(2),
            Repr::Finite(Finite { digits, scale }) => {
                state.write_u8(3);
                // Every row a hash join or GROUP BY sees is hashed: digits
                // that fit 64 bits (nearly all) are normalized there,
                // without copying the BigInt.
                if let Some(digits) = digits.to_i64() {
                    let (digits, scale) = Numeric::normalized(digits, *scale);
                    state.write_i64(digits);
                    state.write_u16(scale);
                    return;
                }
                let (digits, scale) = Numeric::normalized(digits.clone(), *scale);
                // Equal values must hash alike whichever branch they took:
                // `1.000…0` with digits beyond 64 bits normalizes to 1,
                // and hashes as the branch above would.
                match digits.to_i64() {
                    Some(digits) => state.write_i64(digits),
                    None => digits.hash(state),
                }
                state.write_u16(scale);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn n(s: &str) -> Numeric {
        Numeric::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn input_keeps_the_written_scale_and_prints_as_postgresql() {
        for (input, printed) in [
            ("1.50", "1.50"),
            (" -1.5e3 ", "-1500"),
            ("1.5e-3", "0.0015"),
            ("150e-1", "15.0"),
            (".5", "0.5"),
            ("5.", "5"),
            ("+.5", "0.5"),
            ("-.5e1", "-5"),
            ("-0.00", "0.00"),
            ("-0", "0"),
            ("0e200000", "0"),
            ("1e 3", "1000"),
            ("007.10", "7.10"),
            (" nan ", "NaN"),
            ("-INF", "-Infinity"),
            ("+infinity", "Infinity"),
        ] {
            assert_eq!(n(input).to_string(), printed, "{input}");
        }
        for bad in [
            "",
            "  ",
            ".",
            "1.5e",
            "1e+ 3",
            "+-1",
            "1_000",
            "0x10",
            "- 1",
            "1 e3",
            "1.2.3",
            "Infinityx",
            "-NaN",
        ] {
            assert_eq!(
                Numeric::parse(bad).unwrap_err().to_string(),
                format!("invalid input syntax for type numeric: \"{bad}\""),
            );
        }
        for overflow in ["1e131072", "1e-16384", "0e-20000", "1e99999999999999999999"] {
            assert_eq!(
                Numeric::parse(overflow).unwrap_err(),
                TypeError::NumericFormatOverflow,
                "{overflow}"
            );
        }
        assert!(Numeric::parse("1e131071").is_ok());
        assert_eq!(n("1e-16383").scale(), 16383);
    }

    #[test]
    fn typmods_round_half_away_from_zero_and_refuse_what_does_not_fit() {
        let t = |p, s| NumericTypmod::new(p, s).unwrap();
        let fit = |x: &str, p, s| n(x).apply_typmod(Some(t(p, s))).map(|v| v.to_string());
        assert_eq!(fit("123.456", 5, 2).unwrap(), "123.46");
        assert_eq!(fit("-999.994", 5, 2).unwrap(), "-999.99");
        assert_eq!(fit("2.5", 1, 0).unwrap(), "3");
        assert_eq!(fit("-2.5", 1, 0).unwrap(), "-3");
        assert_eq!(fit("1.5", 5, 3).unwrap(), "1.500");
        assert_eq!(fit("0.0125", 2, 3).unwrap(), "0.013");
        assert_eq!(fit("5", 3, -1).unwrap(), "10");
        assert_eq!(fit("NaN", 5, 2).unwrap(), "NaN");
        assert_eq!(
            fit("999.995", 5, 2).unwrap_err().to_string(),
            "numeric field overflow\nDETAIL:  A field with precision 5, scale 2 must round to an absolute value less than 10^3."
        );
        assert!(fit("1", 2, 2)
            .unwrap_err()
            .to_string()
            .ends_with("less than 1."));
        assert!(fit("1", 2, 3)
            .unwrap_err()
            .to_string()
            .ends_with("less than 10^-1."));
        assert!(fit("-Infinity", 5, 2)
            .unwrap_err()
            .to_string()
            .ends_with("cannot hold an infinite value."));
        assert_eq!(
            NumericTypmod::new(0, 0).unwrap_err().to_string(),
            "NUMERIC precision 0 must be between 1 and 1000"
        );
        assert_eq!(
            NumericTypmod::new(5, -1001).unwrap_err().to_string(),
            "NUMERIC scale -1001 must be between -1000 and 1000"
        );
        for (p, s) in [(1, -1000), (1000, 1000), (5, 2), (1, 0)] {
            let typmod = t(p, s);
            assert!(typmod.to_bits() != 0);
            assert_eq!(NumericTypmod::from_bits(typmod.to_bits()), Some(typmod));
        }
    }

    #[test]
    fn arithmetic_sets_scales_as_postgresql_does() {
        let div = |a: &str, b: &str| n(a).div(&n(b)).map(|v| v.to_string());
        assert_eq!(div("1", "3").unwrap(), "0.33333333333333333333");
        assert_eq!(div("10", "4").unwrap(), "2.5000000000000000");
        assert_eq!(div("1", "7e10").unwrap(), "0.0000000000142857142857142857");
        assert_eq!(div("1.00", "3").unwrap(), "0.33333333333333333333");
        assert_eq!(
            div("123456789.123", "0.001").unwrap(),
            "123456789123.00000000"
        );
        assert_eq!(div("2", "3").unwrap(), "0.66666666666666666667");
        assert_eq!(div("-2", "3").unwrap(), "-0.66666666666666666667");
        assert_eq!(div("1", "0").unwrap_err(), TypeError::DivisionByZero);
        assert_eq!(div("NaN", "0").unwrap(), "NaN");
        assert_eq!(div("Infinity", "0").unwrap_err(), TypeError::DivisionByZero);
        assert_eq!(div("-5.5", "Infinity").unwrap(), "0");
        assert_eq!(div("Infinity", "-2").unwrap(), "-Infinity");
        assert_eq!(div("Infinity", "Infinity").unwrap(), "NaN");
        let rem = |a: &str, b: &str| n(a).rem(&n(b)).map(|v| v.to_string());
        assert_eq!(rem("5.5", "2").unwrap(), "1.5");
        assert_eq!(rem("-5.5", "2.25").unwrap(), "-1.00");
        assert_eq!(rem("5", "Infinity").unwrap(), "5");
        assert_eq!(rem("Infinity", "2").unwrap(), "NaN");
        assert_eq!(rem("NaN", "0").unwrap(), "NaN");
        assert_eq!(rem("Infinity", "0").unwrap_err(), TypeError::DivisionByZero);
        assert_eq!(rem("5", "0").unwrap_err(), TypeError::DivisionByZero);
        assert_eq!(n("1.5").mul(&n("2.25")).unwrap().to_string(), "3.375");
        assert_eq!(n("1.5").add(&n("2.250")).unwrap().to_string(), "3.750");
        assert_eq!(n("Infinity").mul(&n("0")).unwrap().to_string(), "NaN");
        assert_eq!(
            n("Infinity").mul(&n("-2")).unwrap().to_string(),
            "-Infinity"
        );
        assert_eq!(
            n("Infinity").add(&n("-Infinity")).unwrap().to_string(),
            "NaN"
        );
        assert_eq!(
            n("Infinity").sub(&n("Infinity")).unwrap().to_string(),
            "NaN"
        );
        assert_eq!(n("0.00").neg().to_string(), "0.00");
        assert_eq!(n("-1.50").abs().to_string(), "1.50");
        assert_eq!(
            n("9e131071").mul(&n("10")).unwrap_err(),
            TypeError::NumericFormatOverflow
        );
        // The product's scale is capped, rounding.
        let tiny = n("1e-16383");
        assert_eq!(tiny.mul(&n("0.5")).unwrap().to_string(), tiny.to_string());
    }

    #[test]
    fn rounding_functions_follow_postgresql() {
        let s = |x: Result<Numeric, TypeError>| x.unwrap().to_string();
        assert_eq!(s(n("2.5").round(0)), "3");
        assert_eq!(s(n("-2.5").round(0)), "-3");
        assert_eq!(s(n("2.567").round(2)), "2.57");
        assert_eq!(s(n("1234.5").round(-2)), "1200");
        assert_eq!(s(n("1.5").round(5)), "1.50000");
        assert_eq!(s(n("-2.567").trunc(1)), "-2.5");
        assert_eq!(s(n("2.567").trunc(0)), "2");
        assert_eq!(s(n("-2.5").ceil()), "-2");
        assert_eq!(s(n("-2.5").floor()), "-3");
        assert_eq!(s(n("2.000").ceil()), "2");
        assert_eq!(s(n("NaN").round(2)), "NaN");
    }

    #[test]
    fn conversions_follow_postgresql() {
        let int = |x: &str| n(x).to_integer("integer");
        assert_eq!(int("2.5"), Ok(3));
        assert_eq!(int("-2.5"), Ok(-3));
        // integer's narrower range: `cast::tests::casts_follow_postgresql`.
        assert_eq!(
            n("9223372036854775807.5")
                .to_integer("bigint")
                .unwrap_err()
                .to_string(),
            "bigint out of range"
        );
        assert_eq!(
            int("NaN").unwrap_err().to_string(),
            "cannot convert NaN to integer"
        );
        assert_eq!(
            int("-Infinity").unwrap_err().to_string(),
            "cannot convert infinity to integer"
        );
        let from = |x: f64| Numeric::from_f64(x).unwrap().to_string();
        assert_eq!(from(0.1 + 0.2), "0.3");
        assert_eq!(from(1.0 / 3.0), "0.333333333333333");
        assert_eq!(from(1e20), "100000000000000000000");
        assert_eq!(from(1.5), "1.5");
        assert_eq!(from(-0.0), "0");
        assert_eq!(from(123456789012345678.0), "123456789012346000");
        assert_eq!(from(1e-20), "0.00000000000000000001");
        assert_eq!(from(f64::NEG_INFINITY), "-Infinity");
        assert_eq!(n("0.1").to_f64(), Ok(0.1));
        assert!(n("1e400")
            .to_f64()
            .unwrap_err()
            .to_string()
            .ends_with("is out of range for type double precision"));
    }

    #[test]
    fn equal_values_of_different_scales_compare_and_hash_alike() {
        use std::collections::hash_map::DefaultHasher;
        let hash = |x: &Numeric| {
            let mut h = DefaultHasher::new();
            x.hash(&mut h);
            h.finish()
        };
        for (a, b) in [
            ("1.0", "1.00"),
            ("1", "1.00000000000000000000000000000"),
            ("-12345678901234567890.5", "-12345678901234567890.500"),
            ("100", "100.000"),
            ("0", "-0.00"),
            ("-2.50", "-2.5"),
        ] {
            assert_eq!(n(a), n(b));
            assert_eq!(hash(&n(a)), hash(&n(b)), "{a} {b}");
        }
        let ordered = [
            "-Infinity",
            "-1e100",
            "-1.5",
            "0",
            "0.001",
            "1",
            "1.0001",
            "1e100",
            "Infinity",
            "NaN",
        ];
        for pair in ordered.windows(2) {
            assert!(n(pair[0]) < n(pair[1]), "{pair:?}");
        }
        assert_eq!(n("NaN"), n("nan"));
    }

    #[test]
    fn the_storage_form_reads_back_and_refuses_other_bytes() {
        for x in [
            "0",
            "0.00",
            "1.50",
            "-1.50",
            "NaN",
            "Infinity",
            "-Infinity",
            "1e131071",
            "-1e-16383",
            "255",
            "256",
        ] {
            let v = n(x);
            let mut bytes = Vec::new();
            v.encode(&mut bytes);
            assert_eq!(bytes.len(), v.encoded_len(), "{x}");
            let back = Numeric::decode(&bytes).unwrap();
            assert_eq!(back.to_string(), v.to_string());
        }
        assert!(Numeric::decode(&[]).is_none());
        assert!(Numeric::decode(&[0, 0, 1, 0]).is_none());
        assert!(Numeric::decode(&[0x03, 0xC0]).is_none());
        assert!(Numeric::decode(&[0x00, 0xC0, 7]).is_none());
    }

    fn finite() -> impl Strategy<Value = Numeric> {
        (any::<i128>(), 0u16..40).prop_map(|(d, s)| Numeric::finite(BigInt::from(d), s))
    }

    proptest! {
        #[test]
        fn text_output_reads_back_as_an_equal_value_of_the_same_scale(x in finite()) {
            let back = Numeric::parse(&x.to_string()).unwrap();
            prop_assert_eq!(&back, &x);
            prop_assert_eq!(back.scale(), x.scale());
            let mut bytes = Vec::new();
            x.encode(&mut bytes);
            prop_assert_eq!(Numeric::decode(&bytes).unwrap().to_string(), x.to_string());
        }

        #[test]
        fn order_agrees_with_doubles_where_they_are_exact(
            a in -(1i64 << 40)..(1i64 << 40), b in -(1i64 << 40)..(1i64 << 40),
            sa in 0u32..8, sb in 0u32..8,
        ) {
            // Multiples of 2^-sa are exact in both types.
            let x = a as f64 / f64::from(1u32 << sa);
            let y = b as f64 / f64::from(1u32 << sb);
            let nx = Numeric::from_i64(a).div(&Numeric::from_i64(1 << sa)).unwrap();
            let ny = Numeric::from_i64(b).div(&Numeric::from_i64(1 << sb)).unwrap();
            prop_assert_eq!(nx.to_f64().unwrap(), x);
            prop_assert_eq!(nx.cmp(&ny), x.partial_cmp(&y).unwrap());
        }

        #[test]
        fn sums_and_differences_are_exact(x in finite(), y in finite()) {
            let sum = x.add(&y).unwrap();
            prop_assert_eq!(sum.sub(&y).unwrap(), x.clone());
            prop_assert_eq!(sum.scale(), x.scale().max(y.scale()));
            let product = x.mul(&y).unwrap();
            prop_assert_eq!(product.scale(), x.scale() + y.scale());
        }
    }
}
