//! The B-tree's page layout: the metapage, each page's links, and index
//! tuples, with the key order that places them.
//!
//! ```text
//! block 0, the metapage: page header, then at 24
//!   magic u32, version u32, root u32, level u32   (pd_lower past them)
//! other blocks: page header, line pointers in key order, tuples, then
//! the special space (16 bytes):
//!   prev u32, next u32   siblings at the same level (0: none, as block 0
//!                        is the metapage)
//!   level u32            0 for leaves
//!   flags u16            LEAF, ROOT
//! ```
//!
//! A page that is not the rightmost of its level starts with its *high
//! key* (line pointer 0): an upper bound of its keys, copied from the
//! first key of its right sibling when it split. Its other tuples are its
//! data. On an internal page the first data tuple has no key (minus
//! infinity): its child holds everything below the second's key.
//!
//! An index tuple:
//!
//! ```text
//! 0  pointer block u32   a leaf's: the heap tuple's block; an internal
//!                        page's: the child; a high key's: 0
//! 4  pointer index u16   a leaf's: the heap tuple's line pointer
//! 6  info u16            HAS_NULLS, PIVOT, MINUS_INFINITY
//! 8  a pivot's heap TID: block u32, index u16, 2 bytes 0
//!    then the key values as a heap tuple holds them (null bitmap if
//!    HAS_NULLS, then each non-null value)
//! ```
//!
//! Keys are unique: the heap TID is the key's last column (PostgreSQL 12's
//! "heapkeyspace"), so equal values order by where their rows are, an
//! insertion has one place to go, and vacuum finds an entry by its TID.
//! Pivots (high keys and an internal page's keys) carry the TID of the
//! leaf tuple they were copied from.

use std::cmp::Ordering;

use crate::heap::tuple::{decode_values, encode_values_into, fixed_width, Tid};
use crate::page::{init_page, item, line_pointer_count, special, special_mut, PageBytes};
use crate::types::{cmp_f64, sort_cmp, ColumnType, Numeric, Value};

use super::BtreeError;

/// The metapage's block.
pub const META_BLOCK: u32 = 0;
/// "No page": block 0 is the metapage, so no link points at it.
pub const NO_PAGE: u32 = 0;
/// The metapage's mark (PostgreSQL's BTREE_MAGIC).
pub const BTREE_MAGIC: u32 = 0x053162;
pub const BTREE_VERSION: u32 = 1;
/// Size of the special space.
pub const SPECIAL_SIZE: usize = 16;
/// Where the metapage's fields end (its `pd_lower`, so that a page image
/// keeps them).
pub const META_END: usize = crate::page::PAGE_HEADER_SIZE + 16;

pub const FLAG_LEAF: u16 = 1;
pub const FLAG_ROOT: u16 = 2;
pub const FLAG_META: u16 = 8;

pub const INFO_HAS_NULLS: u16 = 1;
/// A pivot: the heap TID of its origin follows the header.
pub const INFO_PIVOT: u16 = 2;
/// An internal page's first data tuple: no key, below everything.
pub const INFO_MINUS_INFINITY: u16 = 4;
const TUPLE_HEADER_SIZE: usize = 8;
const PIVOT_TID_SIZE: usize = 8;

/// Largest leaf tuple, as PostgreSQL's B-tree limits it (a third of a
/// page, so that a split always leaves room on both sides): one whose
/// pivot (8 bytes more) still fits that bound.
pub const MAX_TUPLE_SIZE: usize = 2704 - PIVOT_TID_SIZE;

/// A page's links and level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Special {
    pub prev: u32,
    pub next: u32,
    pub level: u32,
    pub flags: u16,
}

impl Special {
    pub fn read(page: &PageBytes) -> Special {
        let b = special(page);
        debug_assert_eq!(b.len(), SPECIAL_SIZE, "not a B-tree page");
        Special {
            prev: u32::from_le_bytes(b[0..4].try_into().expect("4")),
            next: u32::from_le_bytes(b[4..8].try_into().expect("4")),
            level: u32::from_le_bytes(b[8..12].try_into().expect("4")),
            flags: u16::from_le_bytes(b[12..14].try_into().expect("2")),
        }
    }

    pub fn write(&self, page: &mut PageBytes) {
        let b = special_mut(page);
        b[0..4].copy_from_slice(&self.prev.to_le_bytes());
        b[4..8].copy_from_slice(&self.next.to_le_bytes());
        b[8..12].copy_from_slice(&self.level.to_le_bytes());
        b[12..14].copy_from_slice(&self.flags.to_le_bytes());
    }

    pub fn is_leaf(&self) -> bool {
        self.flags & FLAG_LEAF != 0
    }

    pub fn is_rightmost(&self) -> bool {
        self.next == NO_PAGE
    }

    /// Line pointer of the first data tuple (after the high key, if any).
    pub fn first_data(&self) -> usize {
        usize::from(!self.is_rightmost())
    }
}

/// Formats `page` as an empty B-tree page.
pub fn init_btree_page(page: &mut PageBytes, special: Special) {
    init_page(page, SPECIAL_SIZE);
    special.write(page);
}

/// The metapage's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub root: u32,
    /// The root's level (0: the root is a leaf).
    pub level: u32,
}

impl Meta {
    /// Reads the metapage, checking its mark.
    pub fn read(page: &PageBytes) -> Option<Meta> {
        let at = crate::page::PAGE_HEADER_SIZE;
        let u = |i: usize| u32::from_le_bytes(page[at + i..at + i + 4].try_into().expect("4"));
        (u(0) == BTREE_MAGIC && u(4) == BTREE_VERSION).then(|| Meta {
            root: u(8),
            level: u(12),
        })
    }

    /// Formats `page` as the metapage with these fields.
    pub fn write(&self, page: &mut PageBytes) {
        init_page(page, SPECIAL_SIZE);
        let at = crate::page::PAGE_HEADER_SIZE;
        for (i, v) in [BTREE_MAGIC, BTREE_VERSION, self.root, self.level]
            .into_iter()
            .enumerate()
        {
            page[at + 4 * i..at + 4 * i + 4].copy_from_slice(&v.to_le_bytes());
        }
        page[12..14].copy_from_slice(&(META_END as u16).to_le_bytes());
        Special {
            prev: NO_PAGE,
            next: NO_PAGE,
            level: 0,
            flags: FLAG_META,
        }
        .write(page);
    }
}

/// How an index orders its keys: one entry per column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySpec {
    pub types: Vec<ColumnType>,
    pub desc: Vec<bool>,
    pub nulls_first: Vec<bool>,
}

impl KeySpec {
    pub fn columns(&self) -> usize {
        self.types.len()
    }

    /// Compares key column `i`'s values in the index's order.
    pub fn cmp_column(&self, i: usize, a: &Value, b: &Value) -> Ordering {
        // NULLS FIRST is about the column's order as written, so with
        // DESC the NULLs' place in the ascending order flips too.
        let ord = sort_cmp(a, b, self.nulls_first[i] != self.desc[i]);
        if self.desc[i] {
            ord.reverse()
        } else {
            ord
        }
    }

    /// Compares two keys (values only, no TID).
    pub fn cmp_values(&self, a: &[Value], b: &[Value]) -> Ordering {
        for i in 0..a.len().min(b.len()) {
            match self.cmp_column(i, &a[i], &b[i]) {
                Ordering::Equal => {}
                other => return other,
            }
        }
        Ordering::Equal
    }
}

/// An index tuple, decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexTuple {
    /// A leaf's heap TID, or an internal tuple's child (its block).
    pub pointer: Tid,
    /// A pivot's origin, or a leaf's own heap TID.
    pub heap_tid: Option<Tid>,
    pub minus_infinity: bool,
    pub values: Vec<Value>,
}

/// Encodes a leaf tuple: `values` of `spec`'s types pointing at `tid`.
pub fn leaf_tuple(spec: &KeySpec, values: &[Value], tid: Tid) -> Result<Vec<u8>, BtreeError> {
    let mut t = Vec::with_capacity(32);
    t.extend_from_slice(&tid.block.to_le_bytes());
    t.extend_from_slice(&tid.index.to_le_bytes());
    t.extend_from_slice(&[0, 0]);
    let has_nulls = encode_values_into(&spec.types, values, &mut t)?;
    set_info(&mut t, if has_nulls { INFO_HAS_NULLS } else { 0 });
    Ok(t)
}

/// Encodes a leaf tuple as [`leaf_tuple`] does, into `out` (cleared
/// first), so that a caller encoding many reuses one buffer.
pub fn leaf_tuple_into(
    spec: &KeySpec,
    values: &[Value],
    tid: Tid,
    out: &mut Vec<u8>,
) -> Result<(), BtreeError> {
    out.clear();
    out.extend_from_slice(&tid.block.to_le_bytes());
    out.extend_from_slice(&tid.index.to_le_bytes());
    out.extend_from_slice(&[0, 0]);
    let has_nulls = encode_values_into(&spec.types, values, out)?;
    set_info(out, if has_nulls { INFO_HAS_NULLS } else { 0 });
    Ok(())
}

/// Compares two leaf tuples in the index's order, key values then heap
/// TID, as [`KeySpec::cmp_values`] orders their decoded values, without
/// decoding them: what a build's sort compares millions of times.
pub fn cmp_leaf_tuples(spec: &KeySpec, a: &[u8], b: &[u8]) -> Ordering {
    debug_assert!(info(a) & INFO_PIVOT == 0 && info(b) & INFO_PIVOT == 0);
    let (da, db) = (&a[TUPLE_HEADER_SIZE..], &b[TUPLE_HEADER_SIZE..]);
    let (nulls_a, nulls_b) = (info(a) & INFO_HAS_NULLS != 0, info(b) & INFO_HAS_NULLS != 0);
    let bitmap_len = spec.columns().div_ceil(8);
    let mut at_a = if nulls_a { bitmap_len } else { 0 };
    let mut at_b = if nulls_b { bitmap_len } else { 0 };
    for (i, ty) in spec.types.iter().enumerate() {
        let present_a = !nulls_a || da[i / 8] & (1 << (i % 8)) != 0;
        let present_b = !nulls_b || db[i / 8] & (1 << (i % 8)) != 0;
        // As cmp_column orders them: after DESC's reversal, NULLs come
        // first exactly when the column says NULLS FIRST.
        let null_side = if spec.nulls_first[i] {
            Ordering::Less
        } else {
            Ordering::Greater
        };
        let ord = match (present_a, present_b) {
            (false, false) => Ordering::Equal,
            (false, true) => null_side,
            (true, false) => null_side.reverse(),
            (true, true) => {
                let va = encoded_value(ty, da, at_a);
                let vb = encoded_value(ty, db, at_b);
                at_a += va.len();
                at_b += vb.len();
                let ord = cmp_encoded(ty, va, vb);
                if spec.desc[i] {
                    ord.reverse()
                } else {
                    ord
                }
            }
        };
        if ord != Ordering::Equal {
            return ord;
        }
        // Only equal columns get here: both NULL (no bytes to step over)
        // or both present (stepped over above). A NULL against a value
        // is never equal, so neither offset can be left behind.
        debug_assert_eq!(
            present_a, present_b,
            "a NULL column compares unequal to a value"
        );
    }
    pointer(a).cmp(&pointer(b))
}

/// The bytes of a non-null value of type `ty` stored at `at` of a
/// tuple's values (a variable-length one with its 2-byte length).
fn encoded_value<'a>(ty: &ColumnType, data: &'a [u8], at: usize) -> &'a [u8] {
    let width = fixed_width(ty)
        .unwrap_or_else(|| 2 + u16::from_le_bytes([data[at], data[at + 1]]) as usize);
    &data[at..at + width]
}

/// Compares two non-null encoded values of type `ty` as
/// [`crate::types::compare`] compares them decoded.
fn cmp_encoded(ty: &ColumnType, a: &[u8], b: &[u8]) -> Ordering {
    let i32_of = |x: &[u8]| i32::from_le_bytes(x.try_into().expect("4"));
    let i64_of = |x: &[u8]| i64::from_le_bytes(x.try_into().expect("8"));
    match ty {
        ColumnType::Integer | ColumnType::Date => i32_of(a).cmp(&i32_of(b)),
        ColumnType::BigInt | ColumnType::Timestamp => i64_of(a).cmp(&i64_of(b)),
        ColumnType::Double => cmp_f64(
            f64::from_bits(i64_of(a) as u64),
            f64::from_bits(i64_of(b) as u64),
        ),
        ColumnType::Boolean => (a[0] != 0).cmp(&(b[0] != 0)),
        // Text orders by its bytes (str's order, the "C" collation).
        ColumnType::Text | ColumnType::Varchar(_) => a[2..].cmp(&b[2..]),
        ColumnType::Char(_) => trim_spaces(&a[2..]).cmp(trim_spaces(&b[2..])),
        ColumnType::Numeric(_) => {
            let decoded = |x: &[u8]| Numeric::decode(&x[2..]).expect("a numeric the build encoded");
            decoded(a).cmp(&decoded(b))
        }
    }
}

/// `char(n)` bytes without their padding, as `trim_char_padding`.
fn trim_spaces(mut x: &[u8]) -> &[u8] {
    while let [rest @ .., b' '] = x {
        x = rest;
    }
    x
}

/// An abbreviated key of a leaf tuple for a build's sort (see
/// [`crate::sort::RecordSorter`]): its first column's value (an integer's
/// or timestamp's order, a text's first 8 bytes), so that
/// `abbrev_key(a) < abbrev_key(b)` implies `a` sorts before `b` in
/// [`cmp_leaf_tuples`]' order. Equal abbreviated keys say nothing; types
/// not abbreviated give a constant.
pub fn abbrev_key(spec: &KeySpec, t: &[u8]) -> u64 {
    let Some(ty) = spec.types.first() else {
        return 0;
    };
    let data = &t[TUPLE_HEADER_SIZE..];
    let has_nulls = info(t) & INFO_HAS_NULLS != 0;
    if has_nulls && data[0] & 1 == 0 {
        // NULL sorts first or last whatever the direction.
        return if spec.nulls_first[0] { 0 } else { u64::MAX };
    }
    let at = if has_nulls {
        spec.columns().div_ceil(8)
    } else {
        0
    };
    let v = encoded_value(ty, data, at);
    let ascending = match ty {
        ColumnType::Integer | ColumnType::Date => {
            let x = i32::from_le_bytes(v.try_into().expect("4"));
            (((x as u32) ^ (1 << 31)) as u64) << 32
        }
        ColumnType::BigInt | ColumnType::Timestamp => {
            (i64::from_le_bytes(v.try_into().expect("8")) as u64) ^ (1 << 63)
        }
        ColumnType::Text | ColumnType::Varchar(_) => {
            let mut prefix = [0u8; 8];
            let n = (v.len() - 2).min(8);
            prefix[..n].copy_from_slice(&v[2..2 + n]);
            u64::from_be_bytes(prefix)
        }
        _ => 0,
    };
    if spec.desc[0] {
        !ascending
    } else {
        ascending
    }
}

/// The length of [`pivot_of`] of `tuple`, without making it.
pub fn pivot_len(tuple: &[u8]) -> usize {
    if info(tuple) & INFO_PIVOT != 0 {
        tuple.len()
    } else {
        tuple.len() + PIVOT_TID_SIZE
    }
}

/// A pivot made from a leaf or pivot tuple: the same key and heap TID,
/// pointing at `child` (0 for a high key).
pub fn pivot_of(tuple: &[u8], child: u32) -> Vec<u8> {
    let i = info(tuple);
    assert!(i & INFO_MINUS_INFINITY == 0, "a pivot of minus infinity");
    let mut t = Vec::with_capacity(tuple.len() + PIVOT_TID_SIZE);
    t.extend_from_slice(&child.to_le_bytes());
    t.extend_from_slice(&[0, 0]);
    t.extend_from_slice(&(i | INFO_PIVOT).to_le_bytes());
    if i & INFO_PIVOT != 0 {
        t.extend_from_slice(&tuple[TUPLE_HEADER_SIZE..]);
    } else {
        t.extend_from_slice(&tuple[0..6]);
        t.extend_from_slice(&[0, 0]);
        t.extend_from_slice(&tuple[TUPLE_HEADER_SIZE..]);
    }
    debug_assert_eq!(t.len(), pivot_len(tuple));
    t
}

/// An internal page's first data tuple: no key, pointing at `child`.
pub fn minus_infinity(child: u32) -> Vec<u8> {
    let mut t = Vec::with_capacity(TUPLE_HEADER_SIZE);
    t.extend_from_slice(&child.to_le_bytes());
    t.extend_from_slice(&[0, 0]);
    t.extend_from_slice(&(INFO_PIVOT | INFO_MINUS_INFINITY).to_le_bytes());
    t
}

fn set_info(t: &mut [u8], info: u16) {
    t[6..8].copy_from_slice(&info.to_le_bytes());
}

pub fn info(t: &[u8]) -> u16 {
    u16::from_le_bytes([t[6], t[7]])
}

/// The tuple's pointer: a leaf's heap TID, an internal tuple's child.
pub fn pointer(t: &[u8]) -> Tid {
    Tid {
        block: u32::from_le_bytes(t[0..4].try_into().expect("4")),
        index: u16::from_le_bytes([t[4], t[5]]),
    }
}

/// The heap TID a tuple orders by (None for minus infinity).
pub fn heap_tid(t: &[u8]) -> Option<Tid> {
    let i = info(t);
    if i & INFO_MINUS_INFINITY != 0 {
        None
    } else if i & INFO_PIVOT != 0 {
        Some(pointer(&t[TUPLE_HEADER_SIZE..]))
    } else {
        Some(pointer(t))
    }
}

fn values_bytes(t: &[u8]) -> &[u8] {
    if info(t) & INFO_PIVOT != 0 {
        &t[TUPLE_HEADER_SIZE + PIVOT_TID_SIZE..]
    } else {
        &t[TUPLE_HEADER_SIZE..]
    }
}

/// Decodes a tuple's key values into `out`.
pub fn tuple_values(spec: &KeySpec, t: &[u8], out: &mut Vec<Value>) -> Result<(), BtreeError> {
    out.clear();
    if t.len() < TUPLE_HEADER_SIZE {
        return Err(BtreeError::damaged(
            "an index tuple shorter than its header",
        ));
    }
    if info(t) & INFO_MINUS_INFINITY != 0 {
        return Ok(());
    }
    let all = [true; 32];
    let wanted: &[bool] = if spec.columns() <= all.len() {
        &all[..spec.columns()]
    } else {
        &vec![true; spec.columns()]
    };
    decode_values(
        &spec.types,
        values_bytes(t),
        spec.columns(),
        info(t) & INFO_HAS_NULLS != 0,
        wanted,
        out,
    )?;
    Ok(())
}

/// Decodes a whole tuple.
pub fn decode_tuple(spec: &KeySpec, t: &[u8]) -> Result<IndexTuple, BtreeError> {
    let mut values = Vec::new();
    tuple_values(spec, t, &mut values)?;
    Ok(IndexTuple {
        pointer: pointer(t),
        heap_tid: heap_tid(t),
        minus_infinity: info(t) & INFO_MINUS_INFINITY != 0,
        values,
    })
}

/// Where a search goes, compared with tuples: a key prefix, then either a
/// heap TID (an insertion's exact place) or a side: before every tuple
/// whose first columns equal the prefix, or after all of them.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub values: Vec<Value>,
    pub tid: Option<Tid>,
    /// With no TID (or a prefix shorter than the key): after the tuples
    /// equal to the prefix, not before them.
    pub after_equal: bool,
}

impl Target {
    /// Before every tuple whose key starts with `values`.
    pub fn before(values: Vec<Value>) -> Target {
        Target {
            values,
            tid: None,
            after_equal: false,
        }
    }

    /// After every tuple whose key starts with `values`.
    pub fn after(values: Vec<Value>) -> Target {
        Target {
            values,
            tid: None,
            after_equal: true,
        }
    }

    /// The place of one leaf tuple.
    pub fn exact(values: Vec<Value>, tid: Tid) -> Target {
        Target {
            values,
            tid: Some(tid),
            after_equal: false,
        }
    }

    /// How the target compares with tuple `t` (Greater: the target lies
    /// after it). `scratch` holds the decoded values.
    pub fn cmp_tuple(
        &self,
        spec: &KeySpec,
        t: &[u8],
        scratch: &mut Vec<Value>,
    ) -> Result<Ordering, BtreeError> {
        if info(t) & INFO_MINUS_INFINITY != 0 {
            return Ok(Ordering::Greater);
        }
        match cmp_key_bytes(spec, &self.values, t) {
            Some(Ordering::Equal) => {}
            Some(other) => return Ok(other),
            None => {
                tuple_values(spec, t, scratch)?;
                for (i, v) in self.values.iter().enumerate() {
                    match spec.cmp_column(i, v, &scratch[i]) {
                        Ordering::Equal => {}
                        other => return Ok(other),
                    }
                }
            }
        }
        let side = if self.after_equal {
            Ordering::Greater
        } else {
            Ordering::Less
        };
        if self.values.len() < spec.columns() {
            return Ok(side);
        }
        Ok(match (self.tid, heap_tid(t)) {
            (Some(mine), Some(theirs)) => mine.cmp(&theirs),
            _ => side,
        })
    }
}

/// How `values` (a key prefix) compare with the first columns of tuple
/// `t`, read straight from its bytes: the path every descent takes, a
/// dozen comparisons a page, which decoding each tuple into values (a
/// `String` per text column) made the largest part of a pgbench lookup's
/// own CPU. It answers for NULL-free tuples whose columns are integers,
/// dates, timestamps or text compared with values of their own type
/// (text orders by its bytes, as [`crate::types::compare`] orders it);
/// for anything else, or bytes that do not parse, None: the caller
/// decodes, and reports damage where there is some.
fn cmp_key_bytes(spec: &KeySpec, values: &[Value], t: &[u8]) -> Option<Ordering> {
    if info(t) & INFO_HAS_NULLS != 0 {
        return None;
    }
    let bytes = values_bytes(t);
    let mut at = 0;
    for (i, v) in values.iter().enumerate() {
        let ty = spec.types.get(i)?;
        let width = match fixed_width(ty) {
            Some(width) => width,
            None => 2 + usize::from(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?)),
        };
        let column = bytes.get(at..at + width)?;
        let ord = match (v, ty) {
            (Value::Integer(a), ColumnType::Integer) | (Value::Date(a), ColumnType::Date) => {
                a.cmp(&i32::from_le_bytes(column.try_into().ok()?))
            }
            (Value::BigInt(a), ColumnType::BigInt)
            | (Value::Timestamp(a), ColumnType::Timestamp) => {
                a.cmp(&i64::from_le_bytes(column.try_into().ok()?))
            }
            (Value::Text(a), ColumnType::Text | ColumnType::Varchar(_)) => {
                a.as_bytes().cmp(&column[2..])
            }
            _ => return None,
        };
        match if spec.desc[i] { ord.reverse() } else { ord } {
            Ordering::Equal => at += width,
            other => return Some(other),
        }
    }
    Some(Ordering::Equal)
}

/// The first line pointer at or after `from` whose tuple is not below
/// `target` (binary search; the page's data tuples are in key order).
pub fn lower_bound(
    spec: &KeySpec,
    page: &PageBytes,
    from: usize,
    target: &Target,
    scratch: &mut Vec<Value>,
) -> Result<usize, BtreeError> {
    let (mut lo, mut hi) = (from, line_pointer_count(page));
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let t = page_tuple(page, mid)?;
        if target.cmp_tuple(spec, t, scratch)? == Ordering::Greater {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

/// Tuple `index` of the page, or a damage error if it has none.
pub fn page_tuple(page: &PageBytes, index: usize) -> Result<&[u8], BtreeError> {
    item(page, index)
        .filter(|t| t.len() >= TUPLE_HEADER_SIZE)
        .ok_or_else(|| BtreeError::damaged("a line pointer without an index tuple"))
}

/// True if the target lies at or past the page's high key: what it looks
/// for is on a page to the right.
pub fn beyond_high_key(
    spec: &KeySpec,
    page: &PageBytes,
    target: &Target,
    scratch: &mut Vec<Value>,
) -> Result<bool, BtreeError> {
    let sp = Special::read(page);
    if sp.is_rightmost() {
        return Ok(false);
    }
    Ok(target.cmp_tuple(spec, page_tuple(page, 0)?, scratch)? != Ordering::Less)
}

/// The line pointer of the child an internal page sends `target` to: the
/// last data tuple below it.
pub fn child_index(
    spec: &KeySpec,
    page: &PageBytes,
    target: &Target,
    scratch: &mut Vec<Value>,
) -> Result<usize, BtreeError> {
    let sp = Special::read(page);
    let first = sp.first_data();
    if line_pointer_count(page) <= first {
        return Err(BtreeError::damaged("an internal page without data tuples"));
    }
    let at = lower_bound(spec, page, first, target, scratch)?;
    // Minus infinity is below every target, so `at` > first.
    Ok(at.max(first + 1) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::BLOCK_SIZE;

    fn spec() -> KeySpec {
        KeySpec {
            types: vec![ColumnType::Integer, ColumnType::Text],
            desc: vec![false, true],
            nulls_first: vec![false, false],
        }
    }

    /// A value of `ty` from a small range, so that many tie, or NULL.
    fn some_value(ty: &ColumnType, x: u64) -> Value {
        let v = (x >> 8) % 7;
        if x.is_multiple_of(9) {
            return Value::Null;
        }
        let texts = ["", "a", "ab", "ab\u{0}", "abcdefgh", "abcdefghi", "é", "zz"];
        let text = texts[(x >> 8) as usize % texts.len()].to_string();
        match ty {
            ColumnType::Integer => Value::Integer([i32::MIN, -1, 0, 1, 7, i32::MAX, 3][v as usize]),
            ColumnType::Date => Value::Date(v as i32 - 3),
            ColumnType::BigInt => {
                Value::BigInt([i64::MIN, -1, 0, 1, 1 << 40, i64::MAX, 5][v as usize])
            }
            ColumnType::Timestamp => Value::Timestamp(v as i64 - 3),
            ColumnType::Double => {
                Value::Double([f64::NAN, -0.0, 0.0, -1.5, 2.0, f64::INFINITY, 1e300][v as usize])
            }
            ColumnType::Boolean => Value::Boolean(v.is_multiple_of(2)),
            ColumnType::Text | ColumnType::Varchar(_) => Value::Text(text),
            ColumnType::Char(_) => Value::Char(format!("{text}{}", " ".repeat(v as usize % 3))),
            ColumnType::Numeric(_) => Value::Numeric(
                Numeric::parse(
                    ["-1.50", "0", "0.000", "1.5", "1.50", "NaN", "-Infinity"][v as usize],
                )
                .unwrap(),
            ),
        }
    }

    #[test]
    fn encoded_leaf_tuples_compare_as_their_values_and_abbreviations_agree() {
        let types = [
            ColumnType::Integer,
            ColumnType::BigInt,
            ColumnType::Double,
            ColumnType::Text,
            ColumnType::Boolean,
            ColumnType::Date,
            ColumnType::Timestamp,
            ColumnType::Varchar(None),
            ColumnType::Char(None),
            ColumnType::Numeric(None),
        ];
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for first in &types {
            for second in [ColumnType::Integer, ColumnType::Text] {
                for flags in 0..16u8 {
                    let spec = KeySpec {
                        types: vec![*first, second],
                        desc: vec![flags & 1 != 0, flags & 2 != 0],
                        nulls_first: vec![flags & 4 != 0, flags & 8 != 0],
                    };
                    let entries: Vec<(Vec<Value>, Tid, Vec<u8>)> = (0..40u32)
                        .map(|i| {
                            let values = vec![
                                some_value(&spec.types[0], next()),
                                some_value(&spec.types[1], next()),
                            ];
                            let tid = Tid {
                                block: i % 3,
                                index: (i / 3) as u16,
                            };
                            let t = leaf_tuple(&spec, &values, tid).unwrap();
                            (values, tid, t)
                        })
                        .collect();
                    for (va, ta, a) in &entries {
                        for (vb, tb, b) in &entries {
                            let expected = spec.cmp_values(va, vb).then(ta.cmp(tb));
                            assert_eq!(
                                cmp_leaf_tuples(&spec, a, b),
                                expected,
                                "{spec:?}: {va:?} {ta:?} against {vb:?} {tb:?}"
                            );
                            if abbrev_key(&spec, a) < abbrev_key(&spec, b) {
                                assert_eq!(expected, Ordering::Less, "{spec:?}: {va:?} {vb:?}");
                            }
                            // A search's target, read from the bytes where
                            // `cmp_key_bytes` can, against the leaf tuple
                            // and its pivot alike.
                            let mut scratch = Vec::new();
                            let prefix = spec.cmp_column(0, &va[0], &vb[0]);
                            for t in [b.clone(), pivot_of(b, 1)] {
                                let exact = Target::exact(va.clone(), *ta);
                                assert_eq!(
                                    exact.cmp_tuple(&spec, &t, &mut scratch).unwrap(),
                                    expected
                                );
                                let before = Target::before(va[..1].to_vec());
                                let after = Target::after(va[..1].to_vec());
                                assert_eq!(
                                    before.cmp_tuple(&spec, &t, &mut scratch).unwrap(),
                                    prefix.then(Ordering::Less),
                                    "{spec:?}: {va:?} before {vb:?}"
                                );
                                assert_eq!(
                                    after.cmp_tuple(&spec, &t, &mut scratch).unwrap(),
                                    prefix.then(Ordering::Greater)
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn tuples_and_pivots_keep_their_key_and_tid() {
        let s = spec();
        let tid = Tid { block: 7, index: 3 };
        let values = vec![Value::Integer(5), Value::Null];
        let leaf = leaf_tuple(&s, &values, tid).unwrap();
        let d = decode_tuple(&s, &leaf).unwrap();
        assert_eq!(
            (d.pointer, d.heap_tid, d.values.clone()),
            (tid, Some(tid), values.clone())
        );
        let pivot = pivot_of(&leaf, 42);
        let p = decode_tuple(&s, &pivot).unwrap();
        assert_eq!(p.pointer.block, 42);
        assert_eq!((p.heap_tid, p.values), (Some(tid), values));
        let again = pivot_of(&pivot, 9);
        assert_eq!(heap_tid(&again), Some(tid));
        assert_eq!(pointer(&again).block, 9);
        assert_eq!(heap_tid(&minus_infinity(3)), None);
    }

    #[test]
    fn targets_order_by_columns_then_tid() {
        let s = spec();
        let mut scratch = Vec::new();
        let t = |a: i32, b: &str, block: u32| {
            leaf_tuple(
                &s,
                &[Value::Integer(a), Value::Text(b.into())],
                Tid { block, index: 0 },
            )
            .unwrap()
        };
        let x = t(5, "m", 10);
        let mut cmp = |target: &Target| target.cmp_tuple(&s, &x, &mut scratch).unwrap();
        assert_eq!(
            cmp(&Target::before(vec![Value::Integer(5)])),
            Ordering::Less
        );
        assert_eq!(
            cmp(&Target::after(vec![Value::Integer(5)])),
            Ordering::Greater
        );
        assert_eq!(
            cmp(&Target::before(vec![Value::Integer(6)])),
            Ordering::Greater
        );
        // The second column is descending: "z" comes before "m".
        let z = vec![Value::Integer(5), Value::Text("z".into())];
        assert_eq!(cmp(&Target::after(z)), Ordering::Less);
        let m = vec![Value::Integer(5), Value::Text("m".into())];
        let tid = |block| Tid { block, index: 0 };
        assert_eq!(cmp(&Target::exact(m.clone(), tid(9))), Ordering::Less);
        assert_eq!(cmp(&Target::exact(m.clone(), tid(10))), Ordering::Equal);
        assert_eq!(cmp(&Target::exact(m, tid(11))), Ordering::Greater);
        // NULLs sort last in an ascending column.
        let null = vec![Value::Null];
        assert_eq!(cmp(&Target::before(null)), Ordering::Greater);
    }

    #[test]
    fn the_metapage_reads_back_and_keeps_its_fields_below_pd_lower() {
        let mut page = [0u8; BLOCK_SIZE];
        Meta { root: 3, level: 2 }.write(&mut page);
        assert_eq!(Meta::read(&page), Some(Meta { root: 3, level: 2 }));
        let h = crate::page::PageHeader::read(&page);
        assert!(h.is_sane());
        assert_eq!(h.lower as usize, META_END);
    }
}
