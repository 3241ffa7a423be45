//! Heap tuple format: a fixed header with the MVCC fields, a null bitmap
//! when some column is NULL, then the values in column order.
//!
//! ```text
//! 0  xmin  u32      inserting transaction
//! 4  xmax  u32      deleting/updating transaction, 0 if none
//! 8  cmin  u32      command of xmin that inserted it
//! 12 cmax  u32      command of xmax that deleted it
//! 16 ctid  u32+u16  itself, or the newer version after an update
//! 22 infomask u16
//! 24 natts u16
//! 26 null bitmap (if HAS_NULLS), one bit per column, 1 = not null
//!    values: integer 4 bytes, bigint 8, double precision 8, boolean 1,
//!    date 4 (days since 2000-01-01), timestamp 8 (microseconds since
//!    2000-01-01), text, varchar and char u16 length + UTF-8 bytes (char
//!    with its padding), numeric u16 length + its storage form (a u16 of
//!    sign and display scale, then the digits' magnitude in binary, see
//!    `Numeric::encode`); all little-endian, unaligned
//! ```
//!
//! cmin and cmax are both kept (PostgreSQL folds them into combo ids) since
//! a page has room and it keeps visibility checks to plain comparisons.

use thiserror::Error;

use crate::page::{LINE_POINTER_SIZE, MAX_ALIGN, PAGE_HEADER_SIZE};
use crate::storage::BLOCK_SIZE;
use crate::txn::{CommandId, RowLockMode, Xid, INVALID_XID};
use crate::types::{ColumnType, Numeric, Value};

pub const TUPLE_HEADER_SIZE: usize = 26;

/// Largest tuple a page can hold (one per page).
pub const MAX_TUPLE_SIZE: usize =
    (BLOCK_SIZE - PAGE_HEADER_SIZE - LINE_POINTER_SIZE) / MAX_ALIGN * MAX_ALIGN;

pub const HAS_NULLS: u16 = 0x0001;
/// xmax is an update; ctid names the newer version.
pub const UPDATED: u16 = 0x0002;
/// The update made a heap-only tuple (HOT, PostgreSQL's
/// `HEAP_HOT_UPDATED`): the newer version is on the same page, and no
/// index was given an entry for it, since no indexed column changed.
pub const HOT_UPDATED: u16 = 0x0004;
/// A heap-only tuple (PostgreSQL's `HEAP_ONLY_TUPLE`): no index entry
/// points at it; it is found from the root of its HOT chain (the first
/// version on the page, or the redirect pruning left in its place) by
/// following `HOT_UPDATED` ctids.
pub const HEAP_ONLY: u16 = 0x0008;
/// xmax only locks the row (PostgreSQL's `HEAP_XMAX_LOCK_ONLY`): the row
/// is neither deleted nor updated, whoever holds it. Visibility, pruning
/// and unique checks ignore such an xmax; writers and lockers wait for it
/// (`heap::lock`).
pub const XMAX_LOCK_ONLY: u16 = 0x0010;
/// xmax is a multi, an id standing for several lockers
/// (`txn::create_multi`); always with [`XMAX_LOCK_ONLY`] (a multi holds
/// lockers only).
pub const XMAX_IS_MULTI: u16 = 0x0020;
/// The mode of a single locker's lock ([`RowLockMode::bits`]), two bits
/// from [`XMAX_LOCK_MODE_SHIFT`]; 0 for a multi (its members' modes are in
/// the multi) and without a lock.
pub const XMAX_LOCK_MODE: u16 = 0x00C0;
pub const XMAX_LOCK_MODE_SHIFT: u32 = 6;
/// Every bit that says what a lock-only xmax is.
pub const XMAX_LOCK_BITS: u16 = XMAX_LOCK_ONLY | XMAX_IS_MULTI | XMAX_LOCK_MODE;

/// A tuple's location: block and line pointer index (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tid {
    pub block: u32,
    pub index: u16,
}

#[derive(Debug, Error, PartialEq)]
pub enum TupleError {
    #[error("a row of {size} bytes does not fit in a page (at most {MAX_TUPLE_SIZE} bytes); values larger than a page are not supported yet")]
    TooLarge { size: usize },
    #[error("row has {got} values for {expected} columns")]
    Arity { got: usize, expected: usize },
    #[error("value {value:?} does not have type {expected}")]
    Type {
        value: Value,
        expected: &'static str,
    },
    #[error("damaged tuple: {0}")]
    Damaged(&'static str),
}

impl TupleError {
    /// PostgreSQL's SQLSTATE for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            // PostgreSQL's "row is too big".
            TupleError::TooLarge { .. } => "54000",
            // The executor gives a row of its table's shape: a bug if not.
            TupleError::Arity { .. } | TupleError::Type { .. } => "XX000",
            TupleError::Damaged(_) => "XX001",
        }
    }
}

/// The MVCC fields of a tuple.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TupleHeader {
    pub xmin: Xid,
    pub xmax: Xid,
    pub cmin: CommandId,
    pub cmax: CommandId,
    pub ctid: Tid,
    pub infomask: u16,
    pub natts: u16,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

impl TupleHeader {
    pub fn read(t: &[u8]) -> TupleHeader {
        debug_assert!(t.len() >= TUPLE_HEADER_SIZE);
        TupleHeader {
            xmin: u32_at(t, 0),
            xmax: u32_at(t, 4),
            cmin: u32_at(t, 8),
            cmax: u32_at(t, 12),
            ctid: Tid {
                block: u32_at(t, 16),
                index: u16_at(t, 20),
            },
            infomask: u16_at(t, 22),
            natts: u16_at(t, 24),
        }
    }

    pub fn write(&self, t: &mut [u8]) {
        t[0..4].copy_from_slice(&self.xmin.to_le_bytes());
        t[4..8].copy_from_slice(&self.xmax.to_le_bytes());
        t[8..12].copy_from_slice(&self.cmin.to_le_bytes());
        t[12..16].copy_from_slice(&self.cmax.to_le_bytes());
        t[16..20].copy_from_slice(&self.ctid.block.to_le_bytes());
        t[20..22].copy_from_slice(&self.ctid.index.to_le_bytes());
        t[22..24].copy_from_slice(&self.infomask.to_le_bytes());
        t[24..26].copy_from_slice(&self.natts.to_le_bytes());
    }

    /// The transaction that deleted or updated the tuple (committed or
    /// not): its xmax, unless that is unset or only locks the row.
    pub fn deleter(&self) -> Option<Xid> {
        (self.xmax != INVALID_XID && self.infomask & XMAX_LOCK_ONLY == 0).then_some(self.xmax)
    }

    /// Who locks the row without changing it, as the xmax says (whether
    /// they still run is the transaction manager's to say).
    pub fn locker(&self) -> Locker {
        Locker::of(self.xmax, self.infomask)
    }

    /// The infomask bits of a lock-only xmax: one locker in `mode`, or a
    /// multi (`mode` None).
    pub fn lock_bits(mode: Option<RowLockMode>) -> u16 {
        match mode {
            Some(mode) => XMAX_LOCK_ONLY | mode.bits() << XMAX_LOCK_MODE_SHIFT,
            None => XMAX_LOCK_ONLY | XMAX_IS_MULTI,
        }
    }

    /// Updated by a HOT update: the newer version is `ctid`, a heap-only
    /// tuple on the same page.
    pub fn is_hot_updated(&self) -> bool {
        self.infomask & HOT_UPDATED != 0
    }

    /// A heap-only tuple: reached through its HOT chain, never from an
    /// index entry.
    pub fn is_heap_only(&self) -> bool {
        self.infomask & HEAP_ONLY != 0
    }

    /// Sets or clears the heap-only flag of an encoded tuple (an update
    /// decides where the new version goes only once it has it encoded).
    pub fn set_heap_only(t: &mut [u8], heap_only: bool) {
        let mut infomask = u16_at(t, 22);
        if heap_only {
            infomask |= HEAP_ONLY;
        } else {
            infomask &= !HEAP_ONLY;
        }
        t[22..24].copy_from_slice(&infomask.to_le_bytes());
        debug_assert_eq!(TupleHeader::read(t).is_heap_only(), heap_only);
    }

    /// Sets only the tuple's ctid (an insert stamps where it landed).
    pub fn write_ctid(t: &mut [u8], ctid: Tid) {
        t[16..20].copy_from_slice(&ctid.block.to_le_bytes());
        t[20..22].copy_from_slice(&ctid.index.to_le_bytes());
        debug_assert_eq!(TupleHeader::read(t).ctid, ctid);
    }
}

/// Who a lock-only xmax names ([`TupleHeader::locker`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Locker {
    /// No lock: xmax unset, or a deleter's.
    None,
    /// One transaction, in its mode.
    One(Xid, RowLockMode),
    /// A multi, whose members are in the transaction manager.
    Multi(Xid),
}

impl Locker {
    /// Who `xmax` with the infomask `infomask` names. Lock bits on an
    /// xmax that is no lock, and a multi's mode bits, are never written
    /// (`heap::apply`) and are ignored here.
    pub fn of(xmax: Xid, infomask: u16) -> Locker {
        if xmax == INVALID_XID || infomask & XMAX_LOCK_ONLY == 0 {
            Locker::None
        } else if infomask & XMAX_IS_MULTI != 0 {
            Locker::Multi(xmax)
        } else {
            let bits = (infomask & XMAX_LOCK_MODE) >> XMAX_LOCK_MODE_SHIFT;
            Locker::One(xmax, RowLockMode::from_bits(bits))
        }
    }
}

/// Encodes a row of `types` inserted by (`xmin`, `cmin`).
pub fn encode(
    types: &[ColumnType],
    values: &[Value],
    xmin: Xid,
    cmin: CommandId,
) -> Result<Vec<u8>, TupleError> {
    let mut t = Vec::new();
    encode_into(types, values, xmin, cmin, &mut t)?;
    Ok(t)
}

/// [`encode`], appending the tuple to `out` (a bulk load's batch, so that
/// a row costs no allocation). On an error `out` is as it was.
pub fn encode_into(
    types: &[ColumnType],
    values: &[Value],
    xmin: Xid,
    cmin: CommandId,
    out: &mut Vec<u8>,
) -> Result<(), TupleError> {
    let start = out.len();
    out.resize(start + TUPLE_HEADER_SIZE, 0);
    let has_nulls = match encode_values_into(types, values, out) {
        Ok(has_nulls) => has_nulls,
        Err(e) => {
            out.truncate(start);
            return Err(e);
        }
    };
    TupleHeader {
        xmin,
        xmax: 0,
        cmin,
        cmax: 0,
        ctid: Tid { block: 0, index: 0 },
        infomask: if has_nulls { HAS_NULLS } else { 0 },
        natts: types.len() as u16,
    }
    .write(&mut out[start..]);
    let size = out.len() - start;
    if size > MAX_TUPLE_SIZE {
        out.truncate(start);
        return Err(TupleError::TooLarge { size });
    }
    Ok(())
}

/// Appends the values of a row of `types`: a null bitmap if any is NULL,
/// then each non-NULL value. Returns whether there was a bitmap (what the
/// reader must be told, as a heap tuple's `HAS_NULLS` flag or an index
/// tuple's tells it). The heap's tuples and the B-tree's index tuples
/// share this form. On an error `out` is as it was.
pub fn encode_values_into(
    types: &[ColumnType],
    values: &[Value],
    out: &mut Vec<u8>,
) -> Result<bool, TupleError> {
    if values.len() != types.len() {
        return Err(TupleError::Arity {
            got: values.len(),
            expected: types.len(),
        });
    }
    let has_nulls = values.iter().any(Value::is_null);
    let bitmap_len = if has_nulls {
        types.len().div_ceil(8)
    } else {
        0
    };
    let start = out.len();
    let data_len: usize = values
        .iter()
        .map(|v| match v {
            Value::Null => 0,
            Value::Integer(_) | Value::Date(_) => 4,
            Value::BigInt(_) | Value::Double(_) | Value::Timestamp(_) => 8,
            Value::Boolean(_) => 1,
            Value::Text(s) | Value::Char(s) => 2 + s.len(),
            Value::Numeric(x) => 2 + x.encoded_len(),
        })
        .sum();
    out.reserve(bitmap_len + data_len);
    out.resize(start + bitmap_len, 0);
    let failed = |out: &mut Vec<u8>, e: TupleError| {
        out.truncate(start);
        Err(e)
    };
    for (i, (ty, v)) in types.iter().zip(values).enumerate() {
        if !v.is_null() && has_nulls {
            out[start + i / 8] |= 1 << (i % 8);
        }
        match (ty, v) {
            (_, Value::Null) => {}
            (ColumnType::Integer, Value::Integer(x)) => out.extend_from_slice(&x.to_le_bytes()),
            (ColumnType::BigInt, Value::BigInt(x)) => out.extend_from_slice(&x.to_le_bytes()),
            (ColumnType::Double, Value::Double(x)) => out.extend_from_slice(&x.to_le_bytes()),
            (ColumnType::Boolean, Value::Boolean(x)) => out.push(*x as u8),
            (ColumnType::Date, Value::Date(x)) => out.extend_from_slice(&x.to_le_bytes()),
            (ColumnType::Timestamp, Value::Timestamp(x)) => out.extend_from_slice(&x.to_le_bytes()),
            (ColumnType::Text | ColumnType::Varchar(_), Value::Text(s))
            | (ColumnType::Char(_), Value::Char(s)) => {
                if s.len() > MAX_TUPLE_SIZE {
                    return failed(
                        out,
                        TupleError::TooLarge {
                            size: TUPLE_HEADER_SIZE + s.len(),
                        },
                    );
                }
                out.extend_from_slice(&(s.len() as u16).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            (ColumnType::Numeric(_), Value::Numeric(x)) => {
                let len = x.encoded_len();
                if len > MAX_TUPLE_SIZE {
                    return failed(
                        out,
                        TupleError::TooLarge {
                            size: TUPLE_HEADER_SIZE + len,
                        },
                    );
                }
                out.extend_from_slice(&(len as u16).to_le_bytes());
                let at = out.len();
                x.encode(out);
                debug_assert_eq!(out.len() - at, len);
            }
            (ty, v) => {
                let e = TupleError::Type {
                    value: v.clone(),
                    expected: ty.name(),
                };
                return failed(out, e);
            }
        }
    }
    Ok(has_nulls)
}

/// Decodes the columns whose `wanted` flag is set (others come back as
/// NULL), so that a scan pays only for the columns it uses.
pub fn decode(
    types: &[ColumnType],
    t: &[u8],
    wanted: &[bool],
    out: &mut Vec<Value>,
) -> Result<(), TupleError> {
    out.clear();
    if t.len() < TUPLE_HEADER_SIZE {
        return Err(TupleError::Damaged("shorter than its header"));
    }
    let natts = u16_at(t, 24) as usize;
    let has_nulls = u16_at(t, 22) & HAS_NULLS != 0;
    decode_values(
        types,
        &t[TUPLE_HEADER_SIZE..],
        natts,
        has_nulls,
        wanted,
        out,
    )
}

/// Bytes a non-null value of type `ty` takes in encoded values, for the
/// fixed-width types; None for the variable-length ones, which take a
/// 2-byte length and then that many bytes.
pub fn fixed_width(ty: &ColumnType) -> Option<usize> {
    match ty {
        ColumnType::Integer | ColumnType::Date => Some(4),
        ColumnType::BigInt | ColumnType::Double | ColumnType::Timestamp => Some(8),
        ColumnType::Boolean => Some(1),
        ColumnType::Text
        | ColumnType::Varchar(_)
        | ColumnType::Char(_)
        | ColumnType::Numeric(_) => None,
    }
}

/// Decodes values written by [`encode_values_into`] (`natts` of them,
/// with a bitmap if `has_nulls`), the columns whose `wanted` flag is set
/// (others come back as NULL), appending them to `out`.
pub fn decode_values(
    types: &[ColumnType],
    t: &[u8],
    natts: usize,
    has_nulls: bool,
    wanted: &[bool],
    out: &mut Vec<Value>,
) -> Result<(), TupleError> {
    let bitmap_len = if has_nulls { natts.div_ceil(8) } else { 0 };
    let mut at = bitmap_len;
    if at > t.len() {
        return Err(TupleError::Damaged("null bitmap past its end"));
    }
    let need = |at: usize, n: usize| {
        if at + n > t.len() {
            Err(TupleError::Damaged("value past its end"))
        } else {
            Ok(())
        }
    };
    for (i, ty) in types.iter().enumerate() {
        // Columns added after the tuple was written read as NULL.
        let present = i < natts && (!has_nulls || t[i / 8] & (1 << (i % 8)) != 0);
        if !present {
            out.push(Value::Null);
            continue;
        }
        let want = wanted.get(i).copied().unwrap_or(false);
        let width = match fixed_width(ty) {
            Some(width) => width,
            None => {
                need(at, 2)?;
                2 + u16_at(t, at) as usize
            }
        };
        need(at, width)?;
        if !want {
            out.push(Value::Null);
            at += width;
            continue;
        }
        let bytes = &t[at..at + width];
        out.push(match ty {
            ColumnType::Integer => Value::Integer(i32::from_le_bytes(bytes.try_into().expect("4"))),
            ColumnType::BigInt => Value::BigInt(i64::from_le_bytes(bytes.try_into().expect("8"))),
            ColumnType::Double => Value::Double(f64::from_le_bytes(bytes.try_into().expect("8"))),
            ColumnType::Boolean => Value::Boolean(bytes[0] != 0),
            ColumnType::Date => Value::Date(i32::from_le_bytes(bytes.try_into().expect("4"))),
            ColumnType::Timestamp => {
                Value::Timestamp(i64::from_le_bytes(bytes.try_into().expect("8")))
            }
            ColumnType::Text | ColumnType::Varchar(_) | ColumnType::Char(_) => {
                let s = std::str::from_utf8(&bytes[2..])
                    .map_err(|_| TupleError::Damaged("text is not UTF-8"))?
                    .to_string();
                match ty {
                    ColumnType::Char(_) => Value::Char(s),
                    _ => Value::Text(s),
                }
            }
            ColumnType::Numeric(_) => Value::Numeric(
                Numeric::decode(&bytes[2..])
                    .ok_or(TupleError::Damaged("not a numeric's storage form"))?,
            ),
        });
        at += width;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn value_of(ty: ColumnType) -> impl Strategy<Value = Value> {
        let non_null = match ty {
            ColumnType::Integer => any::<i32>().prop_map(Value::Integer).boxed(),
            ColumnType::BigInt => any::<i64>().prop_map(Value::BigInt).boxed(),
            ColumnType::Double => any::<f64>()
                .prop_filter("NaN never equals itself", |x| !x.is_nan())
                .prop_map(Value::Double)
                .boxed(),
            ColumnType::Boolean => any::<bool>().prop_map(Value::Boolean).boxed(),
            ColumnType::Text | ColumnType::Varchar(_) => ".{0,40}".prop_map(Value::Text).boxed(),
            ColumnType::Date => any::<i32>().prop_map(Value::Date).boxed(),
            ColumnType::Timestamp => any::<i64>().prop_map(Value::Timestamp).boxed(),
            ColumnType::Char(_) => ".{0,40}".prop_map(Value::Char).boxed(),
            ColumnType::Numeric(_) => prop_oneof![
                (any::<i128>(), 0u32..40).prop_map(|(d, s)| format!("{d}e-{s}")),
                Just("NaN".to_string()),
                Just("-Infinity".to_string()),
                Just("-12345678901234567890123456789012345678901234567890.5".to_string()),
            ]
            .prop_map(|text| Value::Numeric(Numeric::parse(&text).unwrap()))
            .boxed(),
        };
        prop_oneof![1 => Just(Value::Null), 4 => non_null]
    }

    fn row() -> impl Strategy<Value = (Vec<ColumnType>, Vec<Value>)> {
        let ty = prop_oneof![
            Just(ColumnType::Integer),
            Just(ColumnType::BigInt),
            Just(ColumnType::Double),
            Just(ColumnType::Text),
            Just(ColumnType::Boolean),
            Just(ColumnType::Date),
            Just(ColumnType::Timestamp),
            Just(ColumnType::Varchar(Some(40))),
            Just(ColumnType::Char(Some(40))),
            Just(ColumnType::Numeric(None)),
        ];
        proptest::collection::vec(ty, 0..20).prop_flat_map(|types| {
            let values: Vec<_> = types.iter().map(|&t| value_of(t)).collect();
            (Just(types), values)
        })
    }

    proptest! {
        #[test]
        fn a_row_decodes_to_what_was_encoded((types, values) in row(), xmin in 3u32.., cmin: u32) {
            let t = encode(&types, &values, xmin, cmin).unwrap();
            let mut out = Vec::new();
            decode(&types, &t, &vec![true; types.len()], &mut out).unwrap();
            prop_assert_eq!(&out, &values);
            let h = TupleHeader::read(&t);
            prop_assert_eq!((h.xmin, h.cmin, h.xmax), (xmin, cmin, 0));
        }

        #[test]
        fn unwanted_columns_are_skipped_not_misread((types, values) in row(), mask: u32) {
            let t = encode(&types, &values, 3, 0).unwrap();
            let wanted: Vec<bool> = (0..types.len()).map(|i| mask & (1 << i) != 0).collect();
            let mut out = Vec::new();
            decode(&types, &t, &wanted, &mut out).unwrap();
            for (i, v) in out.iter().enumerate() {
                if wanted[i] { prop_assert_eq!(v, &values[i]); } else { prop_assert!(v.is_null()); }
            }
        }

        #[test]
        fn decoding_garbage_errs_instead_of_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            let types = [ColumnType::Text, ColumnType::Integer, ColumnType::Numeric(None)];
            let mut out = Vec::new();
            let _ = decode(&types, &bytes, &[true; 3], &mut out);
        }
    }

    #[test]
    fn a_row_larger_than_a_page_is_refused_naming_the_limit() {
        let big = Value::Text("x".repeat(9000));
        let err = encode(&[ColumnType::Text], &[big], 3, 0).unwrap_err();
        assert!(err.to_string().contains("does not fit in a page"), "{err}");
        let err = encode(&[ColumnType::Integer], &[Value::Text("a".into())], 3, 0).unwrap_err();
        assert!(err.to_string().contains("integer"), "{err}");
    }
}
