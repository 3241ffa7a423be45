//! COPY: resolves what to copy and where (a table or query; a file,
//! standard input or output) and hands the executor a reader or writer.
//! Files are opened here, not in the executor, which knows no files; a
//! relative path is taken from the process's working directory (the
//! database is embedded: there is no server directory to be relative to).

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::Path;

use sqlparser::ast::{
    CopyLegacyCsvOption, CopyLegacyOption, CopyOption, CopySource as AstSource, CopyTarget, Ident,
    ObjectName, Spanned, Statement,
};

use super::dml::{locked_table, target_columns};
use super::expr::{ident, object_name, StmtCx};
use super::query::plan_query;
use super::{CopyDirection, SqlError, StatementIo, StatementResult};
use crate::database::{Session, StatementSnapshot};
use crate::exec::{self, CopyFormat, CopyFrom, CopyOptions, CopySource, CopyTo, SeqScanNode};
use crate::txn::LockMode;

/// Reads from files in pieces this large.
const FILE_BUFFER: usize = 256 * 1024;

/// Runs COPY `st`.
pub(crate) fn copy(
    cx: &StmtCx,
    s: &mut Session,
    snapshot: &mut StatementSnapshot,
    io: &mut StatementIo,
    st: &Statement,
) -> Result<StatementResult, SqlError> {
    let Statement::Copy {
        source,
        to,
        target,
        options,
        legacy_options,
        values,
    } = st
    else {
        return Err(exec::ExecError::Internal("COPY of a statement that is not COPY").into());
    };
    if !values.is_empty() {
        return Err(cx.unsupported(st.span(), "COPY data inside the statement text"));
    }
    let opts = copy_options(cx, st, options, legacy_options)?;
    let freeze = options
        .iter()
        .any(|o| matches!(o, CopyOption::Freeze(true)));
    let db = s.db().clone();
    let count = if *to {
        if freeze {
            return Err(SqlError::CopyUnsupported(
                "COPY FREEZE cannot be used with COPY TO; leave FREEZE out".into(),
            ));
        }
        let (source, names) = match source {
            AstSource::Table {
                table_name,
                columns,
            } => {
                let table =
                    locked_table(cx, s, &object_name(cx, table_name)?, LockMode::AccessShare)?;
                // Read what committed while the lock was waited for, as a
                // query planned after its locks does.
                s.retake_snapshot(snapshot);
                let columns = copy_columns(cx, &table, columns)?;
                let names = columns
                    .iter()
                    .map(|&c| table.columns[c].name.clone())
                    .collect();
                let mut wanted = vec![false; table.columns.len()];
                for &c in &columns {
                    wanted[c] = true;
                }
                let scan = Box::new(SeqScanNode::new(table, None, wanted, None));
                (CopySource::Table { scan, columns }, names)
            }
            AstSource::Query(q) => {
                let planned = plan_query(cx, &db, q)?;
                let names = planned.columns.into_iter().map(|c| c.name).collect();
                (CopySource::Query(planned.query), names)
            }
        };
        let mut plan = CopyTo {
            source,
            names,
            options: opts,
        };
        match target {
            CopyTarget::Stdout => {
                let Some(out) = io.stdout.as_deref_mut() else {
                    return Err(SqlError::CopyUnsupported(
                        "COPY TO STDOUT has no output here: give the statement one (StatementIo::stdout), or write to a file with COPY … TO 'file'".into(),
                    ));
                };
                if let Some(begin) = io.copy_begin.as_deref_mut() {
                    begin(CopyDirection::Out, plan.names.len()).map_err(client_error)?;
                }
                exec::copy_to(s, snapshot, &mut plan, out, "standard output")?
            }
            CopyTarget::File { filename } => copy_to_file(s, snapshot, &mut plan, filename)?,
            CopyTarget::Stdin => {
                return Err(SqlError::CopyUnsupported(
                    "COPY TO STDIN is not possible; use COPY … TO STDOUT".into(),
                ))
            }
            CopyTarget::Program { .. } => {
                return Err(cx.unsupported_hint(
                    st.span(),
                    "COPY PROGRAM",
                    "; copy to a file or STDOUT",
                ))
            }
        }
    } else {
        let AstSource::Table {
            table_name,
            columns,
        } = source
        else {
            return Err(cx.unsupported(st.span(), "COPY (query) FROM"));
        };
        let table = locked_table(cx, s, &object_name(cx, table_name)?, LockMode::RowExclusive)?;
        // PostgreSQL's condition, under which the rows can be written
        // frozen: nobody else can read the table's new files before the
        // commit (a created table is the transaction's alone, a truncated
        // one is held in AccessExclusive mode), and an abort removes them,
        // frozen rows with them. There are no savepoints, so no
        // subtransaction can roll back the creation without the rows. Nor
        // does an earlier command of the transaction still read the table
        // (a portal suspended at its row limit would see rows frozen
        // after it began): each statement's reads end with it, and
        // PostgreSQL's refusal, "because of prior transaction activity",
        // is ours while the transaction holds a suspended portal. Such a
        // table skips the WAL, and so does its visibility map. As in
        // PostgreSQL, a COPY FROM STDIN is refused once it has begun (a
        // driver waits for CopyInResponse before it hears of an error).
        let refusal = if !freeze {
            None
        } else if s.holds_suspended() {
            Some(SqlError::CopyFreezeBusy)
        } else if !s.new_files_in_transaction(table.oid) {
            Some(SqlError::CopyFreeze {
                table: table.name().to_string(),
            })
        } else {
            None
        };
        let columns = copy_columns(cx, &table, columns)?;
        let plan = CopyFrom {
            table,
            columns,
            options: opts,
            freeze,
        };
        let loaded = match target {
            CopyTarget::Stdin => {
                let Some(input) = io.stdin.take() else {
                    return Err(SqlError::CopyUnsupported(
                        "COPY FROM STDIN has no input here: give the statement one (StatementIo::stdin), or load a file with COPY … FROM 'file'".into(),
                    ));
                };
                if let Some(begin) = io.copy_begin.as_deref_mut() {
                    if let Err(e) = begin(CopyDirection::In, plan.columns.len()) {
                        io.stdin = Some(input);
                        return Err(client_error(e));
                    }
                }
                if let Some(refusal) = refusal {
                    io.stdin = Some(input);
                    return Err(refusal);
                }
                let loaded =
                    io.with_progress(|p| exec::copy_from(s, snapshot, &plan, &mut *input, None, p));
                // Lent back for the statements after this one.
                io.stdin = Some(input);
                loaded?
            }
            CopyTarget::File { filename } => {
                if let Some(refusal) = refusal {
                    return Err(refusal);
                }
                let file =
                    File::open(filename).map_err(|e| file_error(filename, "open", "reading", e))?;
                let total = file.metadata().map(|m| m.len()).ok();
                let mut input = BufReader::with_capacity(FILE_BUFFER, file);
                io.with_progress(|p| exec::copy_from(s, snapshot, &plan, &mut input, total, p))?
            }
            CopyTarget::Stdout => {
                return Err(SqlError::CopyUnsupported(
                    "COPY FROM STDOUT is not possible; use COPY … FROM STDIN".into(),
                ))
            }
            CopyTarget::Program { .. } => {
                return Err(cx.unsupported_hint(
                    st.span(),
                    "COPY PROGRAM",
                    "; copy from a file or STDIN",
                ))
            }
        };
        db.statistics().note_changes(plan.table.oid, loaded);
        loaded
    };
    Ok(StatementResult::tag(format!("COPY {count}")))
}

/// Writes `plan`'s rows to the file `filename`, created or truncated; a
/// COPY that fails removes a regular file rather than leave a part that
/// looks whole (never a device or a pipe: `/dev/full` must stay).
fn copy_to_file(
    s: &mut Session,
    snapshot: &mut StatementSnapshot,
    plan: &mut CopyTo,
    filename: &str,
) -> Result<u64, SqlError> {
    let file = File::create(filename).map_err(|e| file_error(filename, "open", "writing", e))?;
    let mut out = BufWriter::with_capacity(FILE_BUFFER, file);
    let target = format!("file \"{filename}\"");
    let result = exec::copy_to(s, snapshot, plan, &mut out, &target)
        .map_err(SqlError::from)
        .and_then(|count| {
            let file = out
                .into_inner()
                .map_err(|e| file_error(filename, "write", "", e.into_error()))?;
            file.sync_all()
                .map_err(|e| file_error(filename, "write", "", e))?;
            Ok(count)
        });
    if result.is_err() && std::fs::symlink_metadata(filename).is_ok_and(|m| m.file_type().is_file())
    {
        let _ = std::fs::remove_file(filename);
    }
    result
}

fn file_error(filename: &str, action: &str, purpose: &str, e: std::io::Error) -> SqlError {
    let mut message = format!("could not {action} file \"{filename}\"");
    if !purpose.is_empty() {
        message += &format!(" for {purpose}");
    }
    message += &format!(": {e}");
    if Path::new(filename).is_relative() {
        if let Ok(cwd) = std::env::current_dir() {
            message += &format!(
                " (a relative path is taken from the working directory, {})",
                cwd.display()
            );
        }
    }
    SqlError::CopyFile { message, io: e }
}

/// The columns `columns` names (all of the table's when empty).
fn copy_columns(
    cx: &StmtCx,
    table: &crate::catalog::TableDef,
    columns: &[Ident],
) -> Result<Vec<usize>, SqlError> {
    if columns.is_empty() {
        return Ok((0..table.columns.len()).collect());
    }
    let names: Vec<ObjectName> = columns
        .iter()
        .map(|c| ObjectName::from(vec![c.clone()]))
        .collect();
    target_columns(cx, table, names.iter())
}

/// A one-byte character option.
fn one_byte(option: &str, c: char) -> Result<u8, SqlError> {
    u8::try_from(c).ok().filter(u8::is_ascii).ok_or_else(|| {
        SqlError::CopyUnsupported(format!(
            "COPY {option} must be a single one-byte character, not '{c}'"
        ))
    })
}

/// The format and options of a COPY, in PostgreSQL's option list or its
/// older keyword form (`WITH CSV HEADER`), checked as PostgreSQL does.
fn copy_options(
    cx: &StmtCx,
    st: &Statement,
    options: &[CopyOption],
    legacy: &[CopyLegacyOption],
) -> Result<CopyOptions, SqlError> {
    let mut format = CopyFormat::Text;
    for o in options {
        if let CopyOption::Format(name) = o {
            format = match ident(name).as_str() {
                "csv" => CopyFormat::Csv,
                "text" => CopyFormat::Text,
                "binary" => {
                    return Err(cx.unsupported_hint(
                        st.span(),
                        "COPY FORMAT binary",
                        "; use csv or text",
                    ))
                }
                other => {
                    return Err(SqlError::Copy(format!(
                        "COPY format \"{other}\" not recognized; use csv or text"
                    )))
                }
            };
        }
    }
    if legacy.iter().any(|o| matches!(o, CopyLegacyOption::Csv(_))) {
        format = CopyFormat::Csv;
    }
    let mut opts = CopyOptions::new(format);
    let (mut quote, mut escape) = (None, None);
    for o in options {
        match o {
            // Checked where the direction and the table are known.
            CopyOption::Format(_) | CopyOption::Freeze(_) => {}
            CopyOption::Header(h) => opts.header = *h,
            CopyOption::Delimiter(c) => opts.delimiter = one_byte("delimiter", *c)?,
            CopyOption::Null(n) => opts.null = n.clone(),
            CopyOption::Quote(c) => quote = Some(one_byte("quote", *c)?),
            CopyOption::Escape(c) => escape = Some(one_byte("escape", *c)?),
            CopyOption::Encoding(e)
                if matches!(e.to_ascii_lowercase().as_str(), "utf8" | "utf-8") => {}
            other => return Err(cx.unsupported(st.span(), format!("the COPY option {other}"))),
        }
    }
    for o in legacy {
        match o {
            CopyLegacyOption::Csv(csv) => {
                for c in csv {
                    match c {
                        CopyLegacyCsvOption::Header => opts.header = true,
                        CopyLegacyCsvOption::Quote(c) => quote = Some(one_byte("quote", *c)?),
                        CopyLegacyCsvOption::Escape(c) => escape = Some(one_byte("escape", *c)?),
                        other => {
                            return Err(
                                cx.unsupported(st.span(), format!("the COPY option {other}"))
                            )
                        }
                    }
                }
            }
            CopyLegacyOption::Header => opts.header = true,
            CopyLegacyOption::Delimiter(c) => opts.delimiter = one_byte("delimiter", *c)?,
            CopyLegacyOption::Null(n) => opts.null = n.clone(),
            other => return Err(cx.unsupported(st.span(), format!("the COPY option {other}"))),
        }
    }
    let bad = |m: &str| Err(SqlError::Copy(m.to_string()));
    if format == CopyFormat::Text && (quote.is_some() || escape.is_some()) {
        return Err(SqlError::CopyUnsupported(
            "COPY QUOTE and ESCAPE are available only in CSV mode; add FORMAT csv".into(),
        ));
    }
    opts.quote = quote.unwrap_or(opts.quote);
    opts.escape = escape.unwrap_or(opts.quote);
    if matches!(opts.delimiter, b'\n' | b'\r') || opts.null.contains(['\n', '\r']) {
        return bad("COPY delimiter and NULL text cannot contain a newline or carriage return");
    }
    if format == CopyFormat::Text
        && (opts.delimiter == b'\\'
            || opts.delimiter == b'.'
            || opts.delimiter.is_ascii_alphanumeric())
    {
        return bad(
            "COPY delimiter cannot be a backslash, a period, a letter or a digit in text format",
        );
    }
    if format == CopyFormat::Csv && opts.delimiter == opts.quote {
        return bad("COPY delimiter and quote must be different");
    }
    if opts.null.as_bytes().contains(&opts.delimiter) {
        return bad("COPY delimiter must not appear in the NULL text");
    }
    Ok(opts)
}

/// A failure to announce a copy to the client (its connection broke).
fn client_error(e: std::io::Error) -> SqlError {
    SqlError::CopyFile {
        message: format!("could not start the copy with the client: {e}"),
        io: e,
    }
}
