//! Printing results: an aligned table as psql prints it, or CSV.
//!
//! Values print as PostgreSQL's text output does: booleans as `t`/`f`,
//! doubles with the shortest digits that read back the same, NULL as
//! nothing.

use super::{ResultColumn, StatementResult};
use crate::catalog::{IndexDef, IndexKind, TableDef};
use crate::types::{is_numeric, Value};

/// A value as PostgreSQL prints it (NULL as an empty string).
pub use crate::types::output_text as format_value;

/// psql's aligned format: a centred header, a rule, one line per row
/// (numbers right-aligned), and "(N rows)". A statement that returns no
/// rows prints its command tag.
pub fn format_table(result: &StatementResult) -> String {
    if !result.returns_rows() {
        return format!("{}\n", result.tag);
    }
    let mut out = format_table_rows(&result.columns, &result.rows, true);
    out.push_str(&format_row_count(result.rows.len() as u64));
    out
}

/// One group of rows of an aligned table, each column as wide as its
/// widest value in the group (and its name); with `header`, the header
/// and rule first. A result printed in groups, as it streams, is aligned
/// group by group (as psql's `FETCH_COUNT` prints it).
pub fn format_table_rows(columns: &[ResultColumn], rows: &[Vec<Value>], header: bool) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(format_value).collect())
        .collect();
    let width = |s: &str| s.chars().count();
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            cells
                .iter()
                .filter_map(|row| row.get(i))
                .map(|s| width(s))
                .chain([width(&c.name)])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let line = |parts: Vec<String>, out: &mut String| {
        out.push_str(parts.join("|").trim_end());
        out.push('\n');
    };
    if header {
        let names = columns
            .iter()
            .zip(&widths)
            .map(|(c, &w)| {
                let pad = w - width(&c.name);
                format!(
                    " {}{}{} ",
                    " ".repeat(pad / 2),
                    c.name,
                    " ".repeat(pad - pad / 2)
                )
            })
            .collect();
        line(names, &mut out);
        let rule = widths
            .iter()
            .map(|&w| "-".repeat(w + 2))
            .collect::<Vec<_>>()
            .join("+");
        out.push_str(&rule);
        out.push('\n');
    }
    for row in &cells {
        let parts = columns
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, &w))| {
                let s = row.get(i).map_or("", String::as_str);
                let pad = " ".repeat(w - width(s));
                if is_numeric(c.ty) {
                    format!(" {pad}{s} ")
                } else {
                    format!(" {s}{pad} ")
                }
            })
            .collect();
        line(parts, &mut out);
    }
    out
}

/// The line that ends an aligned table: "(N rows)".
pub fn format_row_count(n: u64) -> String {
    format!("({n} {})\n", if n == 1 { "row" } else { "rows" })
}

/// CSV with a header line, as `COPY … TO STDOUT (FORMAT csv, HEADER)`
/// writes it (NULL an empty, unquoted field; the empty string `""`). A
/// statement that returns no rows gives an empty string.
pub fn format_csv(result: &StatementResult) -> String {
    if !result.returns_rows() {
        return String::new();
    }
    format_csv_rows(&result.columns, &result.rows, true)
}

/// Rows as [`format_csv`] writes them, after the header line if `header`.
pub fn format_csv_rows(columns: &[ResultColumn], rows: &[Vec<Value>], header: bool) -> String {
    let names = header.then(|| columns.iter().map(|c| c.name.as_str()));
    crate::exec::copy::csv_rows(names, rows)
}

/// The indexes of `table` as psql's `\d t` lists them under "Indexes:",
/// in its order (the primary key first, then by name), one line each
/// without the indentation: `"t_pkey" PRIMARY KEY, btree (id)`, `"t_code_key"
/// UNIQUE CONSTRAINT, btree (code)`, `"t_u" UNIQUE, btree (u)`, `"t_a_idx"
/// btree (a DESC NULLS LAST)`.
pub fn describe_indexes(catalog: &crate::catalog::Catalog, table: &TableDef) -> Vec<String> {
    let mut indexes = catalog.indexes_of(table).to_vec();
    indexes.sort_by(|a, b| (!a.kind.primary(), &a.name).cmp(&(!b.kind.primary(), &b.name)));
    indexes
        .iter()
        .map(|def| format!("\"{}\" {}", def.name, describe_index(def, table)))
        .collect()
}

/// What follows an index's name in [`describe_indexes`]: its kind and
/// `pg_get_indexdef`'s method and key (sort options where they are not
/// the default: `DESC` is NULLS FIRST, ascending NULLS LAST).
pub fn describe_index(def: &IndexDef, table: &TableDef) -> String {
    let kind = match def.kind {
        IndexKind::PrimaryKey => "PRIMARY KEY, ",
        IndexKind::UniqueConstraint => "UNIQUE CONSTRAINT, ",
        IndexKind::Unique => "UNIQUE, ",
        IndexKind::Plain => "",
    };
    format!("{kind}btree ({})", def.key_text(table))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::ResultColumn;
    use crate::types::{ColumnType, Value};

    fn result() -> StatementResult {
        StatementResult {
            tag: "SELECT 2".into(),
            columns: vec![
                ResultColumn {
                    name: "id".into(),
                    ty: ColumnType::Integer,
                },
                ResultColumn {
                    name: "note".into(),
                    ty: ColumnType::Text,
                },
                ResultColumn {
                    name: "ok".into(),
                    ty: ColumnType::Boolean,
                },
            ],
            rows: vec![
                vec![
                    Value::Integer(7),
                    Value::Text("a, \"b\"".into()),
                    Value::Boolean(true),
                ],
                vec![Value::Integer(1234), Value::Null, Value::Boolean(false)],
            ],
            ..Default::default()
        }
    }

    #[test]
    fn tables_align_like_psql() {
        assert_eq!(
            format_table(&result()),
            "  id  |  note  | ok\n\
             ------+--------+----\n\
             \x20   7 | a, \"b\" | t\n\
             \x201234 |        | f\n\
             (2 rows)\n"
        );
        assert_eq!(
            format_table(&StatementResult::tag("INSERT 0 1")),
            "INSERT 0 1\n"
        );
    }

    #[test]
    fn groups_of_a_streamed_table_align_on_their_own_under_one_header() {
        let r = result();
        let (first, second) = r.rows.split_at(1);
        let printed = format_table_rows(&r.columns, first, true)
            + &format_table_rows(&r.columns, second, false)
            + &format_row_count(2);
        assert_eq!(
            printed,
            " id |  note  | ok\n\
             ----+--------+----\n\
             \x20 7 | a, \"b\" | t\n\
             \x201234 |      | f\n\
             (2 rows)\n"
        );
        // CSV groups join into exactly the whole.
        let csv =
            format_csv_rows(&r.columns, first, true) + &format_csv_rows(&r.columns, second, false);
        assert_eq!(csv, format_csv(&r));
    }

    #[test]
    fn csv_quotes_what_needs_it_and_leaves_null_empty() {
        let mut r = result();
        r.rows.push(vec![
            Value::Integer(0),
            Value::Text(String::new()),
            Value::Null,
        ]);
        assert_eq!(
            format_csv(&r),
            "id,note,ok\n7,\"a, \"\"b\"\"\",t\n1234,,f\n0,\"\",\n"
        );
    }
}
