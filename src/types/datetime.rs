//! `date` and `timestamp` (without time zone): PostgreSQL's
//! representations, calendar, text forms and arithmetic.
//!
//! A date is an `i32` count of days since 2000-01-01 and a timestamp an
//! `i64` count of microseconds since 2000-01-01 00:00:00, as PostgreSQL
//! stores them, so that their order is the integers' order. The calendar
//! is the proleptic Gregorian one with astronomical year numbering
//! inside (year 0 is 1 BC, and a leap year: `0001-02-29 BC` exists); text
//! writes years before 1 AD with a ` BC` suffix. The extremes of each
//! integer stand for `-infinity` and `infinity`, so they sort below and
//! above every other value.
//!
//! Ranges are PostgreSQL's: dates from 4714-11-24 BC (Julian day 0) to
//! 5874897-12-31, timestamps from 4714-11-24 00:00:00 BC to 294276-12-31
//! 23:59:59.999999.
//!
//! Input is a subset of what PostgreSQL's `DecodeDateTime` reads: ISO
//! `YYYY-MM-DD` (a year of three or more digits), then optionally a time
//! after a space or `T` (`HH:MM`, `HH:MM:SS`, `HH:MM:SS.ffffff`, fractions
//! beyond microseconds rounded as PostgreSQL rounds them: the fraction read
//! as a double, times 10⁶, rounded half to even), and `BC` or `AD` as a
//! word of its own; or `infinity`, `-infinity`, `epoch`, in any case, with
//! white space around. Time zones, `today`/`now`, month names and the
//! `MDY` orders are not read: they are "invalid input syntax".

use super::TypeError;

/// Microseconds in a day.
pub const USECS_PER_DAY: i64 = 86_400_000_000;
/// The date standing for `-infinity` (PostgreSQL's `DATEVAL_NOBEGIN`).
pub const DATE_NEG_INFINITY: i32 = i32::MIN;
/// The date standing for `infinity` (`DATEVAL_NOEND`).
pub const DATE_INFINITY: i32 = i32::MAX;
/// The timestamp standing for `-infinity` (`DT_NOBEGIN`).
pub const TIMESTAMP_NEG_INFINITY: i64 = i64::MIN;
/// The timestamp standing for `infinity` (`DT_NOEND`).
pub const TIMESTAMP_INFINITY: i64 = i64::MAX;

/// Days from 1970-01-01 to 2000-01-01, the epoch of both types.
const UNIX_EPOCH_DAYS: i64 = 10_957;
/// The first date: 4714-11-24 BC (astronomical year -4713), Julian day 0.
const DATE_MIN: i32 = -2_451_545;
/// The last date: 5874897-12-31.
const DATE_MAX: i32 = 2_145_031_948;
/// The first timestamp: 4714-11-24 00:00:00 BC.
const TIMESTAMP_MIN: i64 = DATE_MIN as i64 * USECS_PER_DAY;
/// One past the last timestamp: 294277-01-01 00:00:00.
const TIMESTAMP_END: i64 = 9_223_371_331_200_000_000;

/// Whether astronomical year `y` is a leap year (Gregorian rules).
pub fn is_leap_year(y: i64) -> bool {
    y.rem_euclid(4) == 0 && (y.rem_euclid(100) != 0 || y.rem_euclid(400) == 0)
}

/// Days in `month` (1–12) of astronomical year `y`.
pub fn days_in_month(y: i64, month: u32) -> u32 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if is_leap_year(y) => 29,
        2 => 28,
        _ => 31,
    }
}

/// Days since 2000-01-01 of a proleptic Gregorian date (astronomical
/// year), by the era arithmetic of Howard Hinnant's `days_from_civil`.
pub fn days_from_civil(y: i64, month: u32, day: u32) -> i64 {
    debug_assert!((1..=12).contains(&month) && (1..=31).contains(&day));
    let y = if month <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let year_of_era = y.rem_euclid(400);
    let m = i64::from(month);
    let day_of_year = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468 - UNIX_EPOCH_DAYS
}

/// The date (astronomical year, month, day) `days` after 2000-01-01; the
/// inverse of [`days_from_civil`].
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + UNIX_EPOCH_DAYS + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = year_of_era + era * 400 + i64::from(month <= 2);
    (y, month, day)
}

/// Whether `d` is a date in range (or one of the infinities).
pub fn date_is_valid(d: i32) -> bool {
    d == DATE_NEG_INFINITY || d == DATE_INFINITY || (DATE_MIN..=DATE_MAX).contains(&d)
}

/// Whether `t` is a timestamp in range (or one of the infinities).
pub fn timestamp_is_valid(t: i64) -> bool {
    t == TIMESTAMP_NEG_INFINITY
        || t == TIMESTAMP_INFINITY
        || (TIMESTAMP_MIN..TIMESTAMP_END).contains(&t)
}

/// A date's or timestamp's text as PostgreSQL reads it, taken apart.
enum Parsed {
    Infinity,
    NegInfinity,
    /// Fields as written: `year` is the year of its era (`bc`).
    Fields {
        year: i64,
        bc: bool,
        month: u32,
        day: u32,
        /// Microseconds into the day (up to a whole day: `24:00:00`,
        /// `23:59:60`, or a fraction rounded up to the next second).
        time_usecs: i64,
    },
}

/// Why text is not a date or timestamp, before the type is known.
enum ParseError {
    Syntax,
    /// A field outside its range (month 13, February 30, year 0, 25:00).
    Field,
    /// A year too far out for the type.
    Range,
}

fn digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// A field of digits as a number; `Field` if it is too large for any.
fn field(s: &str) -> Result<i64, ParseError> {
    if !digits(s) {
        return Err(ParseError::Syntax);
    }
    s.parse::<i64>()
        .ok()
        .filter(|&v| v <= i64::from(i32::MAX))
        .ok_or(ParseError::Field)
}

/// `HH:MM[:SS[.ffff]]` as microseconds into the day.
fn parse_time(s: &str) -> Result<i64, ParseError> {
    let mut parts = s.splitn(3, ':');
    let hour = field(parts.next().unwrap_or(""))?;
    let minute = field(parts.next().ok_or(ParseError::Syntax)?)?;
    let (second, fraction_usecs) = match parts.next() {
        None => (0, 0),
        Some(sec) => {
            let (whole, fraction) = match sec.split_once('.') {
                Some((w, f)) => (w, Some(f)),
                None => (sec, None),
            };
            let fraction_usecs = match fraction {
                None | Some("") => 0,
                Some(f) if digits(f) => {
                    // As PostgreSQL: the fraction read as a double, times
                    // 10^6, rounded half to even (so .1234565 gives
                    // 123456: the double is just below the half).
                    let x: f64 = format!("0.{f}").parse().map_err(|_| ParseError::Syntax)?;
                    (x * 1e6).round_ties_even() as i64
                }
                Some(_) => return Err(ParseError::Syntax),
            };
            (field(whole)?, fraction_usecs)
        }
    };
    if hour > 24 || minute > 59 || second > 60 {
        return Err(ParseError::Field);
    }
    let usecs = ((hour * 60 + minute) * 60 + second) * 1_000_000 + fraction_usecs;
    if usecs > USECS_PER_DAY {
        return Err(ParseError::Field);
    }
    Ok(usecs)
}

/// Reads the text of a date or timestamp (see the module comment).
fn parse(s: &str) -> Result<Parsed, ParseError> {
    let t = s.trim_matches(|c: char| c.is_ascii_whitespace());
    if t.eq_ignore_ascii_case("infinity") {
        return Ok(Parsed::Infinity);
    }
    if t.eq_ignore_ascii_case("-infinity") {
        return Ok(Parsed::NegInfinity);
    }
    if t.eq_ignore_ascii_case("epoch") {
        return Ok(Parsed::Fields {
            year: 1970,
            bc: false,
            month: 1,
            day: 1,
            time_usecs: 0,
        });
    }
    let mut words = t.split_ascii_whitespace();
    let first = words.next().ok_or(ParseError::Syntax)?;
    let (date, mut time) = match first.find(['T', 't']) {
        Some(at) => (&first[..at], Some(&first[at + 1..])),
        None => (first, None),
    };
    let mut era: Option<bool> = None;
    for w in words {
        if w.eq_ignore_ascii_case("bc") || w.eq_ignore_ascii_case("ad") {
            if era.is_some() {
                return Err(ParseError::Syntax);
            }
            era = Some(w.eq_ignore_ascii_case("bc"));
        } else if time.is_none() && w.contains(':') {
            time = Some(w);
        } else {
            return Err(ParseError::Syntax);
        }
    }
    let mut fields = date.split('-');
    let (Some(y), Some(m), Some(d), None) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return Err(ParseError::Syntax);
    };
    // A year of three or more digits marks ISO order (PostgreSQL reads
    // shorter first fields as a month or day); a month has one or two.
    if y.len() < 3 || !digits(y) || m.len() > 2 || !digits(m) || !digits(d) {
        return Err(ParseError::Syntax);
    }
    let time_usecs = match time {
        Some(time) => parse_time(time)?,
        None => 0,
    };
    let (year, month, day) = (field(y)?, field(m)?, field(d)?);
    let bc = era == Some(true);
    let astronomical = if bc { 1 - year } else { year };
    if year == 0 || !(1..=12).contains(&month) {
        return Err(ParseError::Field);
    }
    let month = month as u32;
    if day < 1 || day > i64::from(days_in_month(astronomical, month)) {
        return Err(ParseError::Field);
    }
    Ok(Parsed::Fields {
        year,
        bc,
        month,
        day: day as u32,
        time_usecs,
    })
}

/// Days since 2000-01-01 of parsed fields, if within the Julian day
/// range PostgreSQL checks before it converts (4714-11-24 BC up to, not
/// including, 5874898-01-01).
fn julian_days(year: i64, bc: bool, month: u32, day: u32) -> Option<i64> {
    let y = if bc { 1 - year } else { year };
    let days = days_from_civil(y, month, day);
    (i64::from(DATE_MIN)..=i64::from(DATE_MAX))
        .contains(&days)
        .then_some(days)
}

fn input_error(e: ParseError, ty: &'static str, s: &str) -> TypeError {
    match e {
        ParseError::Syntax => TypeError::InvalidDatetime {
            ty,
            text: s.to_string(),
        },
        ParseError::Field => TypeError::FieldOutOfRange {
            text: s.to_string(),
        },
        ParseError::Range => TypeError::ValueOutOfRange {
            ty,
            text: s.to_string(),
        },
    }
}

/// The date text `s` stands for (`date`'s input function). A time in it
/// is read and dropped, as PostgreSQL drops it.
pub fn parse_date(s: &str) -> Result<i32, TypeError> {
    let days = match parse(s).map_err(|e| input_error(e, "date", s))? {
        Parsed::Infinity => return Ok(DATE_INFINITY),
        Parsed::NegInfinity => return Ok(DATE_NEG_INFINITY),
        Parsed::Fields {
            year,
            bc,
            month,
            day,
            ..
        } => julian_days(year, bc, month, day),
    };
    let d = days.ok_or_else(|| input_error(ParseError::Range, "date", s))?;
    Ok(d as i32)
}

/// The timestamp text `s` stands for (`timestamp`'s input function).
pub fn parse_timestamp(s: &str) -> Result<i64, TypeError> {
    let out_of_range = || input_error(ParseError::Range, "timestamp", s);
    match parse(s).map_err(|e| input_error(e, "timestamp", s))? {
        Parsed::Infinity => Ok(TIMESTAMP_INFINITY),
        Parsed::NegInfinity => Ok(TIMESTAMP_NEG_INFINITY),
        Parsed::Fields {
            year,
            bc,
            month,
            day,
            time_usecs,
        } => {
            let days = julian_days(year, bc, month, day).ok_or_else(out_of_range)?;
            // Within the Julian range the product fits an i128 easily,
            // and the sum is checked against the type's range.
            let t = i128::from(days) * i128::from(USECS_PER_DAY) + i128::from(time_usecs);
            i64::try_from(t)
                .ok()
                .filter(|&t| (TIMESTAMP_MIN..TIMESTAMP_END).contains(&t))
                .ok_or_else(out_of_range)
        }
    }
}

/// `YYYY-MM-DD` of an astronomical year, and whether it is BC.
fn format_ymd(out: &mut String, days: i64) -> bool {
    use std::fmt::Write;
    let (y, m, d) = civil_from_days(days);
    let bc = y <= 0;
    let year = if bc { 1 - y } else { y };
    let _ = write!(out, "{year:04}-{m:02}-{d:02}");
    bc
}

/// A date as PostgreSQL writes it with `DateStyle = ISO`.
pub fn format_date(d: i32) -> String {
    match d {
        DATE_INFINITY => "infinity".into(),
        DATE_NEG_INFINITY => "-infinity".into(),
        d => {
            let mut out = String::with_capacity(13);
            if format_ymd(&mut out, i64::from(d)) {
                out.push_str(" BC");
            }
            out
        }
    }
}

/// A timestamp as PostgreSQL writes it with `DateStyle = ISO`: seconds
/// with a fraction only when it is not zero, without trailing zeros.
pub fn format_timestamp(t: i64) -> String {
    use std::fmt::Write;
    match t {
        TIMESTAMP_INFINITY => "infinity".into(),
        TIMESTAMP_NEG_INFINITY => "-infinity".into(),
        t => {
            let days = t.div_euclid(USECS_PER_DAY);
            let usecs = t.rem_euclid(USECS_PER_DAY);
            let mut out = String::with_capacity(29);
            let bc = format_ymd(&mut out, days);
            let secs = usecs / 1_000_000;
            let fraction = usecs % 1_000_000;
            let _ = write!(
                out,
                " {:02}:{:02}:{:02}",
                secs / 3600,
                secs / 60 % 60,
                secs % 60
            );
            if fraction != 0 {
                let digits = format!("{fraction:06}");
                out.push('.');
                out.push_str(digits.trim_end_matches('0'));
            }
            if bc {
                out.push_str(" BC");
            }
            out
        }
    }
}

/// `date + days` (or `- days` with `days` negated); an infinite date
/// stays infinite, as in PostgreSQL.
pub fn date_add_days(d: i32, days: i64) -> Result<i32, TypeError> {
    if d == DATE_INFINITY || d == DATE_NEG_INFINITY {
        return Ok(d);
    }
    i64::from(d)
        .checked_add(days)
        .filter(|r| (i64::from(DATE_MIN)..=i64::from(DATE_MAX)).contains(r))
        .map(|r| r as i32)
        .ok_or(TypeError::DateOutOfRange)
}

/// `a - b` in days.
pub fn date_difference(a: i32, b: i32) -> Result<i32, TypeError> {
    let infinite = |d: i32| d == DATE_INFINITY || d == DATE_NEG_INFINITY;
    if infinite(a) || infinite(b) {
        return Err(TypeError::InfiniteDateDifference);
    }
    // Both in range: the difference fits (the range spans < 2^31 days).
    Ok(a - b)
}

/// A date as the timestamp of its midnight (a cast `date::timestamp`).
pub fn date_to_timestamp(d: i32) -> Result<i64, TypeError> {
    match d {
        DATE_INFINITY => Ok(TIMESTAMP_INFINITY),
        DATE_NEG_INFINITY => Ok(TIMESTAMP_NEG_INFINITY),
        d => i64::from(d)
            .checked_mul(USECS_PER_DAY)
            .filter(|t| (TIMESTAMP_MIN..TIMESTAMP_END).contains(t))
            .ok_or(TypeError::DateOutOfRangeForTimestamp),
    }
}

/// The date of a timestamp (a cast `timestamp::date`, which drops the
/// time of day).
pub fn timestamp_to_date(t: i64) -> i32 {
    match t {
        TIMESTAMP_INFINITY => DATE_INFINITY,
        TIMESTAMP_NEG_INFINITY => DATE_NEG_INFINITY,
        // In range, a timestamp's day is a date in range.
        t => t.div_euclid(USECS_PER_DAY) as i32,
    }
}

/// A date as microseconds since 2000-01-01, not limited to the
/// timestamp range (to compare a date with a timestamp: 5874897-12-31 is
/// later than every timestamp, not an error).
pub fn date_as_usecs(d: i32) -> i128 {
    match d {
        DATE_INFINITY => i128::from(TIMESTAMP_INFINITY),
        DATE_NEG_INFINITY => i128::from(TIMESTAMP_NEG_INFINITY),
        d => i128::from(d) * i128::from(USECS_PER_DAY),
    }
}

/// A time since the Unix epoch as a timestamp (microseconds since
/// 2000-01-01, UTC: there are no time zones).
pub fn timestamp_from_unix_usecs(unix_usecs: i64) -> i64 {
    unix_usecs - UNIX_EPOCH_DAYS * USECS_PER_DAY
}

#[cfg(test)]
mod tests {
    use super::*;

    fn date(s: &str) -> Result<String, String> {
        parse_date(s).map(format_date).map_err(|e| e.to_string())
    }

    fn ts(s: &str) -> Result<String, String> {
        parse_timestamp(s)
            .map(format_timestamp)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn civil_days_round_trip_across_eras_and_range_ends() {
        assert_eq!(days_from_civil(2000, 1, 1), 0);
        assert_eq!(days_from_civil(1970, 1, 1), -UNIX_EPOCH_DAYS);
        assert_eq!(days_from_civil(-4713, 11, 24), i64::from(DATE_MIN));
        assert_eq!(days_from_civil(5_874_897, 12, 31), i64::from(DATE_MAX));
        assert_eq!(
            days_from_civil(294_277, 1, 1) * USECS_PER_DAY,
            TIMESTAMP_END
        );
        for days in (i64::from(DATE_MIN)..=i64::from(DATE_MAX)).step_by(9973) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        for days in -800_000..800_000 {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
    }

    #[test]
    fn leap_years_follow_the_gregorian_rules() {
        assert_eq!(date("2000-02-29").unwrap(), "2000-02-29");
        assert_eq!(date("2024-02-29").unwrap(), "2024-02-29");
        assert_eq!(
            date("1900-02-29").unwrap_err(),
            "date/time field value out of range: \"1900-02-29\""
        );
        assert_eq!(
            date("2023-02-30").unwrap_err(),
            "date/time field value out of range: \"2023-02-30\""
        );
        // 1 BC is astronomical year 0, a leap year; 4 BC is -3, not one.
        assert_eq!(date("0001-02-29 BC").unwrap(), "0001-02-29 BC");
        assert!(date("0004-02-29 BC").is_err());
        assert_eq!(date("0005-02-29 BC").unwrap(), "0005-02-29 BC");
    }

    #[test]
    fn bc_years_round_trip_and_order_before_ad() {
        let one_bc = parse_date("0001-01-01 BC").unwrap();
        let last_bc = parse_date("0001-12-31 BC").unwrap();
        let one_ad = parse_date("0001-01-01").unwrap();
        assert_eq!(last_bc + 1, one_ad);
        assert!(one_bc < last_bc);
        assert_eq!(format_date(one_bc), "0001-01-01 BC");
        assert_eq!(date("0044-03-15 bc").unwrap(), "0044-03-15 BC");
        assert_eq!(date("0044-03-15 AD").unwrap(), "0044-03-15");
        assert!(parse_date("0044-03-15 BC").unwrap() < parse_date("0043-03-15 BC").unwrap());
        assert_eq!(
            date("0000-01-01").unwrap_err(),
            "date/time field value out of range: \"0000-01-01\""
        );
        assert_eq!(
            ts("0001-12-31 23:59:59 BC").unwrap(),
            "0001-12-31 23:59:59 BC"
        );
    }

    #[test]
    fn range_ends_are_postgresqls() {
        assert_eq!(date("4714-11-24 BC").unwrap(), "4714-11-24 BC");
        assert_eq!(
            date("4714-11-23 BC").unwrap_err(),
            "date out of range: \"4714-11-23 BC\""
        );
        assert_eq!(date("5874897-12-31").unwrap(), "5874897-12-31");
        assert_eq!(
            date("5874898-01-01").unwrap_err(),
            "date out of range: \"5874898-01-01\""
        );
        assert_eq!(
            ts("294276-12-31 23:59:59.999999").unwrap(),
            "294276-12-31 23:59:59.999999"
        );
        assert_eq!(
            ts("294277-01-01").unwrap_err(),
            "timestamp out of range: \"294277-01-01\""
        );
        assert_eq!(ts("4714-11-24 00:00 BC").unwrap(), "4714-11-24 00:00:00 BC");
        assert_eq!(
            ts("4714-11-23 23:59:59 BC").unwrap_err(),
            "timestamp out of range: \"4714-11-23 23:59:59 BC\""
        );
        assert_eq!(
            date_add_days(DATE_MAX, 1).unwrap_err().to_string(),
            "date out of range"
        );
        assert!(date_to_timestamp(parse_date("294277-01-01").unwrap()).is_err());
    }

    #[test]
    fn infinities_order_around_every_value() {
        let neg = parse_date(" -Infinity ").unwrap();
        let pos = parse_date("infinity").unwrap();
        for d in [DATE_MIN, 0, DATE_MAX] {
            assert!(neg < d && d < pos);
        }
        assert_eq!(format_date(neg), "-infinity");
        let neg = parse_timestamp("-infinity").unwrap();
        let pos = parse_timestamp("INFINITY").unwrap();
        for t in [TIMESTAMP_MIN, 0, TIMESTAMP_END - 1] {
            assert!(neg < t && t < pos);
        }
        assert_eq!(format_timestamp(pos), "infinity");
        assert_eq!(date_add_days(DATE_INFINITY, -5).unwrap(), DATE_INFINITY);
        assert_eq!(
            date_difference(DATE_INFINITY, 0).unwrap_err().to_string(),
            "cannot subtract infinite dates"
        );
        assert_eq!(
            date_to_timestamp(DATE_NEG_INFINITY).unwrap(),
            TIMESTAMP_NEG_INFINITY
        );
        assert_eq!(timestamp_to_date(TIMESTAMP_INFINITY), DATE_INFINITY);
    }

    #[test]
    fn fractional_seconds_round_as_postgresql_does() {
        assert_eq!(ts("2026-11-23 17:44:07").unwrap(), "2026-11-23 17:44:07");
        assert_eq!(
            ts("2026-11-23T17:44:07.5").unwrap(),
            "2026-11-23 17:44:07.5"
        );
        assert_eq!(
            ts("2026-11-23 17:44:07.123456").unwrap(),
            "2026-11-23 17:44:07.123456"
        );
        assert_eq!(
            ts("2026-11-23 17:44:07.000000").unwrap(),
            "2026-11-23 17:44:07"
        );
        assert_eq!(ts("2026-11-23 17:44:07.").unwrap(), "2026-11-23 17:44:07");
        // The double nearest .1234565 is below the half; .1234575's
        // product is the half exactly, and goes to even.
        assert_eq!(
            ts("2000-01-01 12:00:00.1234565").unwrap(),
            "2000-01-01 12:00:00.123456"
        );
        assert_eq!(
            ts("2000-01-01 12:00:00.1234575").unwrap(),
            "2000-01-01 12:00:00.123458"
        );
        assert_eq!(
            ts("2020-12-31 23:59:59.9999995").unwrap(),
            "2021-01-01 00:00:00"
        );
        assert_eq!(ts("2020-01-05 24:00:00").unwrap(), "2020-01-06 00:00:00");
        assert_eq!(ts("2020-01-05 23:59:60").unwrap(), "2020-01-06 00:00:00");
        assert!(ts("2020-01-05 23:59:60.5").is_err());
        assert!(ts("2020-01-05 24:00:01").is_err());
        assert!(ts("2020-01-05 23:60").is_err());
        assert_eq!(
            ts("2020-01-05 12").unwrap_err(),
            "invalid input syntax for type timestamp: \"2020-01-05 12\""
        );
    }

    #[test]
    fn date_input_takes_iso_with_words_and_white_space() {
        assert_eq!(date(" 2020-1-5 ").unwrap(), "2020-01-05");
        assert_eq!(date("epoch").unwrap(), "1970-01-01");
        assert_eq!(date("2020-01-05 12:30").unwrap(), "2020-01-05");
        assert_eq!(ts("epoch").unwrap(), "1970-01-01 00:00:00");
        assert_eq!(ts("2020-01-05").unwrap(), "2020-01-05 00:00:00");
        for bad in [
            "",
            "x",
            "+infinity",
            "2020-01-05x",
            "2020-01-05 bc ad",
            "2020/01/05",
        ] {
            assert_eq!(
                date(bad).unwrap_err(),
                format!("invalid input syntax for type date: \"{bad}\"")
            );
        }
        assert!(date("2020-13-01")
            .unwrap_err()
            .starts_with("date/time field"));
    }
}
