//! PostgreSQL's identities for our types: each column type's `pg_type`
//! OID, size and modifier (`atttypmod`), and back. The server's
//! RowDescription and the `pg_catalog` relations (`exec::pg_catalog`)
//! both describe a column with them, so a client sees one answer
//! whichever it asks.

use super::{ColumnType, NumericTypmod};

/// PostgreSQL's type OIDs (`pg_type.oid`) for the types we have, and the
/// ones a client may name for a parameter that we take as one of ours.
pub mod oid {
    pub const BOOL: u32 = 16;
    pub const INT8: u32 = 20;
    pub const INT2: u32 = 21;
    pub const INT4: u32 = 23;
    pub const TEXT: u32 = 25;
    pub const FLOAT4: u32 = 700;
    pub const FLOAT8: u32 = 701;
    pub const UNKNOWN: u32 = 705;
    pub const BPCHAR: u32 = 1042;
    pub const VARCHAR: u32 = 1043;
    pub const DATE: u32 = 1082;
    pub const TIMESTAMP: u32 = 1114;
    pub const NUMERIC: u32 = 1700;
}

/// The OID of column type `ty`.
pub fn type_oid(ty: ColumnType) -> u32 {
    match ty {
        ColumnType::Integer => oid::INT4,
        ColumnType::BigInt => oid::INT8,
        ColumnType::Double => oid::FLOAT8,
        ColumnType::Text => oid::TEXT,
        ColumnType::Boolean => oid::BOOL,
        ColumnType::Date => oid::DATE,
        ColumnType::Timestamp => oid::TIMESTAMP,
        ColumnType::Varchar(_) => oid::VARCHAR,
        ColumnType::Char(_) => oid::BPCHAR,
        ColumnType::Numeric(_) => oid::NUMERIC,
    }
}

/// `pg_type.typlen`: the fixed size in bytes, or -1 for a varlena.
pub fn type_size(ty: ColumnType) -> i16 {
    match ty {
        ColumnType::Boolean => 1,
        ColumnType::Integer | ColumnType::Date => 4,
        ColumnType::BigInt | ColumnType::Double | ColumnType::Timestamp => 8,
        ColumnType::Text
        | ColumnType::Varchar(_)
        | ColumnType::Char(_)
        | ColumnType::Numeric(_) => -1,
    }
}

/// The type modifier (`atttypmod`): the length plus 4 for `varchar(n)`
/// and `char(n)`, `(precision << 16 | scale) + 4` for `numeric(p, s)`,
/// else -1.
pub fn type_modifier(ty: ColumnType) -> i32 {
    const VARHDRSZ: i32 = 4;
    match ty {
        ColumnType::Varchar(Some(n)) | ColumnType::Char(Some(n)) => n as i32 + VARHDRSZ,
        ColumnType::Numeric(Some(t)) => {
            ((t.precision() as i32) << 16 | (t.scale() as i32 & 0x7ff)) + VARHDRSZ
        }
        _ => -1,
    }
}

/// The column type of a result column of type `oid` with modifier
/// `typmod` (a client reading RowDescription); text for a type we do not
/// have.
pub fn column_type(oid: u32, typmod: i32) -> ColumnType {
    const VARHDRSZ: i32 = 4;
    let length = u32::try_from(typmod - VARHDRSZ).ok();
    match oid {
        oid::BOOL => ColumnType::Boolean,
        oid::INT2 | oid::INT4 => ColumnType::Integer,
        oid::INT8 => ColumnType::BigInt,
        oid::FLOAT4 | oid::FLOAT8 => ColumnType::Double,
        oid::VARCHAR => ColumnType::Varchar(length),
        oid::BPCHAR => ColumnType::Char(length),
        oid::DATE => ColumnType::Date,
        oid::TIMESTAMP => ColumnType::Timestamp,
        // Its modifier only limits what is stored; the text is exact.
        oid::NUMERIC => ColumnType::Numeric(None),
        _ => ColumnType::Text,
    }
}

/// `pg_database.encoding` of UTF8, the one server encoding
/// (PostgreSQL's `PG_UTF8`).
pub const ENCODING_UTF8: i64 = 6;

/// PostgreSQL's `format_type(type_oid, typmod)`: the type's name as
/// psql's `\d` shows it (`character varying(10)`, `numeric(5,2)`,
/// `timestamp without time zone`), without a modifier when `typmod` is
/// None or negative, and `???` for a type that is not ours (as
/// PostgreSQL answers for an OID `pg_type` lacks).
pub fn format_type(type_oid: u32, typmod: Option<i32>) -> String {
    const VARHDRSZ: i32 = 4;
    let typmod = typmod.filter(|&m| m >= 0);
    let ty = match type_oid {
        oid::INT2 => return "smallint".to_string(),
        oid::FLOAT4 => return "real".to_string(),
        oid::NUMERIC => ColumnType::Numeric(typmod.and_then(|m| {
            let bits = m - VARHDRSZ;
            // The scale is the low 11 bits, signed (PostgreSQL 15
            // allows a negative scale).
            let scale = ((bits & 0x7ff) ^ 0x400) - 0x400;
            NumericTypmod::new(i64::from(bits >> 16), i64::from(scale)).ok()
        })),
        oid::BOOL
        | oid::INT4
        | oid::INT8
        | oid::TEXT
        | oid::FLOAT8
        | oid::BPCHAR
        | oid::VARCHAR
        | oid::DATE
        | oid::TIMESTAMP => column_type(type_oid, typmod.unwrap_or(-1)),
        _ => return "???".to_string(),
    };
    ty.display_name()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_type_reads_back_each_types_modifier() {
        for ty in [
            ColumnType::Integer,
            ColumnType::Varchar(Some(10)),
            ColumnType::Varchar(None),
            ColumnType::Char(Some(3)),
            ColumnType::Char(None),
            ColumnType::Numeric(Some(NumericTypmod::new(5, 2).unwrap())),
            ColumnType::Numeric(Some(NumericTypmod::new(3, -2).unwrap())),
            ColumnType::Numeric(None),
            ColumnType::Timestamp,
        ] {
            let m = type_modifier(ty);
            assert_eq!(format_type(type_oid(ty), Some(m)), ty.display_name());
        }
        assert_eq!(format_type(oid::VARCHAR, None), "character varying");
        assert_eq!(format_type(oid::INT2, Some(-1)), "smallint");
        assert_eq!(format_type(99999, Some(-1)), "???");
    }
}
