//! Printing results: an aligned table as psql prints it, or CSV.
//!
//! Values print as PostgreSQL's text output does: booleans as `t`/`f`,
//! doubles with the shortest digits that read back the same, NULL as
//! nothing.

use super::StatementResult;
use crate::types::is_numeric;

/// A value as PostgreSQL prints it (NULL as an empty string).
pub use crate::types::output_text as format_value;

/// psql's aligned format: a centred header, a rule, one line per row
/// (numbers right-aligned), and "(N rows)". A statement that returns no
/// rows prints its command tag.
pub fn format_table(result: &StatementResult) -> String {
    if !result.returns_rows() {
        return format!("{}\n", result.tag);
    }
    let cells: Vec<Vec<String>> = result
        .rows
        .iter()
        .map(|row| row.iter().map(format_value).collect())
        .collect();
    let width = |s: &str| s.chars().count();
    let widths: Vec<usize> = result
        .columns
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
    let header = result
        .columns
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
    line(header, &mut out);
    let rule = widths
        .iter()
        .map(|&w| "-".repeat(w + 2))
        .collect::<Vec<_>>()
        .join("+");
    out.push_str(&rule);
    out.push('\n');
    for row in &cells {
        let parts = result
            .columns
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
    let n = result.rows.len();
    out.push_str(&format!("({n} {})\n", if n == 1 { "row" } else { "rows" }));
    out
}

/// CSV with a header line, as `COPY … TO STDOUT (FORMAT csv, HEADER)`
/// writes it (NULL an empty, unquoted field; the empty string `""`). A
/// statement that returns no rows gives an empty string.
pub fn format_csv(result: &StatementResult) -> String {
    if !result.returns_rows() {
        return String::new();
    }
    crate::exec::copy::csv_with_header(result.columns.iter().map(|c| c.name.as_str()), &result.rows)
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
            notices: Vec::new(),
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
