//! COPY: loading a table from CSV or PostgreSQL's text format, and writing
//! a table or a query's rows out in them.
//!
//! # Formats (as PostgreSQL's COPY)
//!
//! *text* (the default): one row per line, fields separated by a tab, NULL
//! written `\N`; a backslash escapes the delimiter, itself and `\b \f \n \r
//! \t \v`, and `\NNN` (octal) and `\xHH` give a byte. *csv*: fields
//! separated by a comma, quoted with `"` when they hold the delimiter, a
//! quote or a line break (a quoted field may span lines; `""` is a quote
//! inside one), NULL written as an empty unquoted field, so that `""` (an
//! empty string) stays distinct from NULL. Both end at the input's end or at
//! a line holding only `\.`; `\r\n` line ends are accepted.
//!
//! # Loading
//!
//! [`copy_from`] reads records one at a time, converts each field with its
//! column's input function and inserts the row as INSERT does (the
//! executor's insert sink, with a bulk-write ring), so a load neither holds
//! the input in memory nor
//! pushes the rest of the pool out. The first bad record fails the
//! statement with its line, column and reason; the statement's rows are
//! then invisible (its transaction, or the block's, is rolled back), so a
//! COPY loads all of its input or nothing.
//!
//! With FREEZE (into a table the transaction created or truncated) the
//! rows are written frozen and each page they fill is all-visible, map
//! bit included (`InsertSink::frozen`, PostgreSQL's `HEAP_INSERT_FROZEN`):
//! a VACUUM after the load skips those pages. A failed load's frozen rows
//! are never seen: the failure rolls the transaction back, which removes
//! the table's new files with them.
//!
//! # Writing out
//!
//! [`copy_to`] formats rows into a buffer while the scan holds the page,
//! and writes the buffer to the output between pages (`Heap::scan`'s
//! `after_page`), when no lock is held: a slow reader of the output holds
//! back the scan, never the writers of the page. `COPY (query) TO` runs
//! the query first and writes its rows after, as a SELECT returns them.

use std::cell::RefCell;
use std::io::{self, BufRead, Write};
use std::sync::Arc;

use super::dml::InsertSink;
use super::plan::{drain, scan_table, ExecCx, Flow, QueryPlan};
use super::progress::{Progress, ProgressUnit, Task};
use super::scan::SeqScanNode;
use super::{lock_table, EvalContext, ExecError, TableLocks};
use crate::catalog::TableDef;
use crate::database::{Session, StatementSnapshot};
use crate::types::{format_double, output_text, parse_value, TypeError, Value};

/// The data format of a COPY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyFormat {
    Text,
    Csv,
}

/// A COPY's format and its options (PostgreSQL's names and defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyOptions {
    pub format: CopyFormat,
    /// The first line holds column names: skipped when loading, written
    /// when writing out.
    pub header: bool,
    pub delimiter: u8,
    /// The text standing for NULL.
    pub null: String,
    /// CSV's quote and escape characters.
    pub quote: u8,
    pub escape: u8,
}

impl CopyOptions {
    /// The defaults of `format`.
    pub fn new(format: CopyFormat) -> CopyOptions {
        match format {
            CopyFormat::Text => CopyOptions {
                format,
                header: false,
                delimiter: b'\t',
                null: "\\N".into(),
                quote: b'"',
                escape: b'"',
            },
            CopyFormat::Csv => CopyOptions {
                format,
                header: false,
                delimiter: b',',
                null: String::new(),
                quote: b'"',
                escape: b'"',
            },
        }
    }
}

/// `COPY table [(columns)] FROM …`.
pub struct CopyFrom {
    pub table: Arc<TableDef>,
    /// The column each input field goes to, in input order; columns not
    /// listed are NULL.
    pub columns: Vec<usize>,
    pub options: CopyOptions,
    /// `FREEZE`: the rows are loaded frozen and their pages all-visible
    /// (the caller checked that the transaction created or truncated the
    /// table).
    pub freeze: bool,
}

/// What `COPY … TO` writes out.
pub enum CopySource {
    /// `COPY table [(columns)] TO`: the columns listed, in that order.
    Table {
        scan: Box<SeqScanNode>,
        columns: Vec<usize>,
    },
    /// `COPY (query) TO`: written as the query's batches come, in
    /// bounded memory unless the query sorts or aggregates.
    Query(QueryPlan),
}

/// `COPY … TO …`.
pub struct CopyTo {
    pub source: CopySource,
    /// Column names, for the header.
    pub names: Vec<String>,
    pub options: CopyOptions,
}

/// Input bytes between progress reports.
const PROGRESS_STEP: u64 = 1 << 20;
/// Output buffered before it is written.
const WRITE_CHUNK: usize = 64 * 1024;

/// Most bytes COPY reads as one line (or one CSV record, with its quoted
/// line breaks): PostgreSQL's limit, 1 GiB. A longer line is refused as
/// soon as it passes the limit, before it is all in memory.
pub const MAX_COPY_LINE_BYTES: usize = 1 << 30;

/// Characters of a bad value or line that a COPY error quotes: enough to
/// recognise it, where quoting all of a long one would make the message
/// as large as the input.
pub const COPY_ERROR_QUOTE_CHARS: usize = 100;

/// The start of `text` for an error message: its first
/// [`COPY_ERROR_QUOTE_CHARS`] characters, and "..." if there are more.
fn quote_start(text: &str) -> String {
    match text.char_indices().nth(COPY_ERROR_QUOTE_CHARS) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_string(),
    }
}

/// A field's conversion error, quoting only the start of the value.
fn shorten_value_error(e: TypeError) -> TypeError {
    match e {
        TypeError::InvalidInput { ty, text } => TypeError::InvalidInput {
            ty,
            text: quote_start(&text),
        },
        TypeError::InvalidDatetime { ty, text } => TypeError::InvalidDatetime {
            ty,
            text: quote_start(&text),
        },
        TypeError::InputOutOfRange { ty, text } => TypeError::InputOutOfRange {
            ty,
            text: quote_start(&text),
        },
        other => other,
    }
}

/// What is wrong with a record of COPY FROM's input.
#[derive(Debug, thiserror::Error)]
pub enum CopyFault {
    #[error("could not read the input: {0}")]
    Read(io::Error),
    #[error(
        "the line is longer than {max_bytes} bytes, the most COPY reads as one line \
         (a CSV record with quoted line breaks counts as one); \
         split the input into shorter lines"
    )]
    LineTooLong { max_bytes: usize },
    #[error("unterminated CSV quoted field")]
    UnterminatedQuote,
    #[error("a backslash at the end of a line escapes nothing; write \\\\ for a backslash")]
    BackslashAtEnd,
    #[error("invalid byte sequence for encoding \"UTF8\": 0x00")]
    Nul,
    #[error("invalid byte sequence for encoding \"UTF8\"")]
    NotUtf8,
    #[error("extra data after last expected column")]
    ExtraData,
    #[error("missing data for column \"{column}\"")]
    MissingData { column: String },
    /// A field that is no value of its column's type.
    #[error(transparent)]
    Value(TypeError),
    /// A row the table refuses (a NULL in a NOT NULL column, a row too
    /// large).
    #[error(transparent)]
    Row(Box<ExecError>),
}

impl CopyFault {
    /// PostgreSQL's SQLSTATE for this fault.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            CopyFault::Read(e) => crate::storage::io_sqlstate(e),
            // PostgreSQL's limit is its 1 GB string ("cannot enlarge
            // string buffer"), a program limit.
            CopyFault::LineTooLong { .. } => "54000",
            CopyFault::UnterminatedQuote
            | CopyFault::BackslashAtEnd
            | CopyFault::ExtraData
            | CopyFault::MissingData { .. } => "22P04", // bad_copy_file_format
            CopyFault::Nul | CopyFault::NotUtf8 => "22021", // character_not_in_repertoire
            CopyFault::Value(e) => e.sqlstate(),
            CopyFault::Row(e) => e.sqlstate(),
        }
    }
}

/// Why a record could not be read (before its fields are converted).
struct RecordError {
    line: u64,
    column: Option<usize>,
    fault: CopyFault,
}

/// Splits the input into records and fields.
struct RecordReader<'a> {
    input: &'a mut dyn BufRead,
    opts: &'a CopyOptions,
    /// The raw bytes of the current record (several lines for a CSV
    /// record with a quoted line break).
    raw: Vec<u8>,
    /// The fields' bytes, unescaped, one after another.
    data: Vec<u8>,
    /// Each field's range in `data`; `None` for NULL.
    fields: Vec<Option<(usize, usize)>>,
    /// Lines read so far; the current record starts at `record_line`.
    lines: u64,
    record_line: u64,
    bytes: u64,
    /// Most bytes of one record ([`MAX_COPY_LINE_BYTES`]; lower in tests).
    record_bytes_max: usize,
}

impl<'a> RecordReader<'a> {
    fn new(input: &'a mut dyn BufRead, opts: &'a CopyOptions) -> Self {
        Self::with_record_limit(input, opts, MAX_COPY_LINE_BYTES)
    }

    /// A reader that refuses records longer than `record_bytes_max`.
    fn with_record_limit(
        input: &'a mut dyn BufRead,
        opts: &'a CopyOptions,
        record_bytes_max: usize,
    ) -> Self {
        RecordReader {
            input,
            opts,
            raw: Vec::new(),
            data: Vec::new(),
            fields: Vec::new(),
            lines: 0,
            record_line: 0,
            bytes: 0,
            record_bytes_max,
        }
    }

    fn error(&self, column: Option<usize>, fault: CopyFault) -> RecordError {
        RecordError {
            line: self.record_line,
            column,
            fault,
        }
    }

    /// Appends the next line to `raw`; false at the end of the input.
    /// Refuses a record that grows past `record_bytes_max`, having read
    /// at most one byte more of it (`read_until` alone would read all of
    /// it first).
    fn read_line(&mut self) -> Result<bool, RecordError> {
        let start = self.raw.len();
        let line = self.lines + 1;
        let room = self.record_bytes_max.saturating_sub(start) as u64 + 1;
        let n = io::Read::take(&mut *self.input, room)
            .read_until(b'\n', &mut self.raw)
            .map_err(|e| RecordError {
                line,
                column: None,
                fault: CopyFault::Read(e),
            })?;
        if self.raw.len() > self.record_bytes_max {
            return Err(RecordError {
                line,
                column: None,
                fault: CopyFault::LineTooLong {
                    max_bytes: self.record_bytes_max,
                },
            });
        }
        self.bytes += n as u64;
        self.lines += u64::from(n > 0);
        Ok(n > 0)
    }

    /// Reads the next record into `fields`; false at the end of the data.
    fn next_record(&mut self) -> Result<bool, RecordError> {
        self.raw.clear();
        self.data.clear();
        self.fields.clear();
        if !self.read_line()? {
            return Ok(false);
        }
        self.record_line = self.lines;
        if line_body(&self.raw) == b"\\." {
            return Ok(false);
        }
        match self.opts.format {
            CopyFormat::Text => self.split_text()?,
            CopyFormat::Csv => self.split_csv()?,
        }
        Ok(true)
    }

    fn split_text(&mut self) -> Result<(), RecordError> {
        let delimiter = self.opts.delimiter;
        let line = line_body(&self.raw);
        let mut start = 0;
        loop {
            // The field's raw end: the next delimiter not escaped.
            let mut end = start;
            while end < line.len() && line[end] != delimiter {
                end += if line[end] == b'\\' { 2 } else { 1 };
            }
            let end = end.min(line.len());
            let field = &line[start..end];
            if field == self.opts.null.as_bytes() {
                self.fields.push(None);
            } else {
                let from = self.data.len();
                unescape_text(field, &mut self.data).map_err(|fault| RecordError {
                    line: self.record_line,
                    column: Some(self.fields.len()),
                    fault,
                })?;
                self.fields.push(Some((from, self.data.len())));
            }
            if end >= line.len() {
                return Ok(());
            }
            start = end + 1;
        }
    }

    fn split_csv(&mut self) -> Result<(), RecordError> {
        let CopyOptions {
            delimiter,
            quote,
            escape,
            ..
        } = *self.opts;
        let mut at = 0;
        loop {
            // One field, starting at `at`.
            let from = self.data.len();
            let mut quoted = false;
            let mut in_quotes = false;
            let raw_start = at;
            // Bytes up to the next one that matters are copied as a run.
            let (end_of_record, raw_end) = loop {
                if at == self.raw.len() {
                    if in_quotes {
                        if !self.read_line()? {
                            return Err(
                                self.error(Some(self.fields.len()), CopyFault::UnterminatedQuote)
                            );
                        }
                        continue;
                    }
                    break (true, at);
                }
                let rest = &self.raw[at..];
                if in_quotes {
                    let n = if escape == quote {
                        memchr::memchr(quote, rest)
                    } else {
                        memchr::memchr2(quote, escape, rest)
                    }
                    .unwrap_or(rest.len());
                    self.data.extend_from_slice(&rest[..n]);
                    at += n;
                    if n == rest.len() {
                        continue;
                    }
                    let b = rest[n];
                    if b == escape && at + 1 < self.raw.len() && {
                        let next = self.raw[at + 1];
                        next == quote || (next == escape && escape != quote)
                    } {
                        self.data.push(self.raw[at + 1]);
                        at += 2;
                    } else if b == quote {
                        in_quotes = false;
                        at += 1;
                    } else {
                        // An escape character escaping nothing is itself.
                        self.data.push(b);
                        at += 1;
                    }
                    continue;
                }
                let n = memchr::memchr3(delimiter, quote, b'\n', rest).unwrap_or(rest.len());
                self.data.extend_from_slice(&rest[..n]);
                at += n;
                if n == rest.len() {
                    continue;
                }
                match rest[n] {
                    b'\n' => {
                        // A \r before the \n belongs to the line end.
                        if n > 0 && rest[n - 1] == b'\r' {
                            self.data.pop();
                            break (true, at - 1);
                        }
                        break (true, at);
                    }
                    b if b == delimiter => {
                        at += 1;
                        break (false, at - 1);
                    }
                    _ => {
                        quoted = true;
                        in_quotes = true;
                        at += 1;
                    }
                }
            };
            if !quoted && self.raw[raw_start..raw_end] == *self.opts.null.as_bytes() {
                self.data.truncate(from);
                self.fields.push(None);
            } else {
                self.fields.push(Some((from, self.data.len())));
            }
            if end_of_record {
                return Ok(());
            }
        }
    }

    /// The text of field `i` (not NULL). Text holds no NUL byte, as in
    /// PostgreSQL: one written raw or made by an escape (`\0`, `\x00`)
    /// is refused as the invalid UTF-8 PostgreSQL calls it.
    fn field(&self, i: usize, (from, to): (usize, usize)) -> Result<&str, RecordError> {
        let bytes = &self.data[from..to];
        if memchr::memchr(0, bytes).is_some() {
            return Err(self.error(Some(i), CopyFault::Nul));
        }
        std::str::from_utf8(bytes).map_err(|_| self.error(Some(i), CopyFault::NotUtf8))
    }
}

/// A line without its line end (`\n` or `\r\n`).
fn line_body(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Undoes the text format's backslash escapes of one field.
fn unescape_text(field: &[u8], out: &mut Vec<u8>) -> Result<(), CopyFault> {
    let mut i = 0;
    while i < field.len() {
        let b = field[i];
        i += 1;
        if b != b'\\' {
            out.push(b);
            continue;
        }
        let Some(&c) = field.get(i) else {
            return Err(CopyFault::BackslashAtEnd);
        };
        i += 1;
        match c {
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(11),
            b'0'..=b'7' => {
                let mut v = u32::from(c - b'0');
                for _ in 0..2 {
                    match field.get(i) {
                        Some(&d @ b'0'..=b'7') => {
                            v = v * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push(v as u8);
            }
            b'x' if field.get(i).is_some_and(u8::is_ascii_hexdigit) => {
                let mut v = 0u8;
                for _ in 0..2 {
                    match field.get(i) {
                        Some(&d) if d.is_ascii_hexdigit() => {
                            v = v * 16 + (d as char).to_digit(16).unwrap_or(0) as u8;
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push(v);
            }
            other => out.push(other),
        }
    }
    Ok(())
}

/// `COPY … FROM`: loads the records of `input` into the plan's table and
/// returns how many rows it loaded. `total` is the input's size, if
/// known, for the progress report.
pub fn copy_from(
    s: &mut Session,
    snap: &mut StatementSnapshot,
    plan: &CopyFrom,
    input: &mut dyn BufRead,
    total: Option<u64>,
    progress: &mut dyn Progress,
) -> Result<u64, ExecError> {
    let table = &plan.table;
    lock_table(s, table, crate::txn::LockMode::RowExclusive)?;
    let ids = s.xid(snap)?;
    let mut task = Task::begin(
        progress,
        &format!("COPY {}", table.name()),
        total,
        ProgressUnit::Bytes,
    );
    let mut reader = RecordReader::new(input, &plan.options);
    let bad = |e: RecordError| ExecError::CopyInput {
        table: table.name().to_string(),
        line: e.line,
        column: e
            .column
            .and_then(|i| plan.columns.get(i).map(|&c| table.columns[c].name.clone())),
        fault: e.fault,
    };
    if plan.options.header && !reader.next_record().map_err(bad)? {
        return Ok(0);
    }
    let mut sink = if plan.freeze {
        InsertSink::frozen(s, Arc::clone(table), ids)
    } else {
        InsertSink::new(s, Arc::clone(table), ids, true)
    };
    let mut row = vec![Value::Null; table.columns.len()];
    let mut reported = 0u64;
    let mut load = |s: &mut Session, sink: &mut InsertSink| -> Result<(), ExecError> {
        while reader.next_record().map_err(bad)? {
            // In PostgreSQL's order: extra fields, then each column's
            // field converted before the next one is looked for.
            if reader.fields.len() > plan.columns.len() {
                return Err(bad(reader.error(None, CopyFault::ExtraData)));
            }
            for (i, &column) in plan.columns.iter().enumerate() {
                let Some(&field) = reader.fields.get(i) else {
                    let column = table.columns[column].name.clone();
                    let fault = CopyFault::MissingData { column };
                    return Err(bad(reader.error(None, fault)));
                };
                row[column] = match field {
                    None => Value::Null,
                    Some(range) => {
                        let text = reader.field(i, range).map_err(bad)?;
                        if let Value::Text(kept) = &mut row[column] {
                            // The last row's string, refilled: no
                            // allocation per text field.
                            kept.clear();
                            kept.push_str(text);
                            continue;
                        }
                        parse_value(text, table.columns[column].ty).map_err(|e| {
                            bad(reader.error(Some(i), CopyFault::Value(shorten_value_error(e))))
                        })?
                    }
                };
            }
            sink.push_row(&row)
                .map_err(|e| bad(reader.error(None, CopyFault::Row(Box::new(e)))))?;
            sink.flush_if_due(s)?;
            if reader.bytes - reported >= PROGRESS_STEP {
                reported = reader.bytes;
                task.update(reported);
                // A load from a file reads no client that could notice a
                // cancel request: it asks here.
                s.check_interrupts()?;
            }
        }
        task.update(reader.bytes);
        Ok(())
    };
    let result = load(s, &mut sink).and_then(|()| sink.flush(s));
    let loaded = sink.finish(s);
    result.map(|()| loaded)
}

/// Writes rows in a COPY format.
struct RowWriter<'a> {
    opts: &'a CopyOptions,
    buf: Vec<u8>,
}

impl RowWriter<'_> {
    fn field_text(&mut self, text: &[u8]) {
        let o = self.opts;
        match o.format {
            CopyFormat::Text => {
                for &b in text {
                    let escaped = match b {
                        b'\\' => b'\\',
                        b'\n' => b'n',
                        b'\r' => b'r',
                        b'\t' => b't',
                        8 => b'b',
                        12 => b'f',
                        11 => b'v',
                        _ if b == o.delimiter => b,
                        _ => {
                            self.buf.push(b);
                            continue;
                        }
                    };
                    self.buf.extend_from_slice(&[b'\\', escaped]);
                }
            }
            CopyFormat::Csv => {
                // Quoted when it would otherwise read back differently:
                // as NULL, split, or as the end-of-data marker.
                let needs_quotes = text == o.null.as_bytes()
                    || text == b"\\."
                    || text
                        .iter()
                        .any(|&b| b == o.delimiter || b == o.quote || b == b'\n' || b == b'\r');
                if !needs_quotes {
                    self.buf.extend_from_slice(text);
                    return;
                }
                self.buf.push(o.quote);
                for &b in text {
                    if b == o.quote || b == o.escape {
                        self.buf.push(o.escape);
                    }
                    self.buf.push(b);
                }
                self.buf.push(o.quote);
            }
        }
    }

    fn value(&mut self, v: &Value) {
        match v {
            Value::Null => {
                // The NULL text as it is (PostgreSQL does not escape it).
                self.buf.extend_from_slice(self.opts.null.as_bytes());
            }
            Value::Integer(x) => {
                let _ = write!(self.buf, "{x}");
            }
            Value::BigInt(x) => {
                let _ = write!(self.buf, "{x}");
            }
            Value::Double(x) => self.field_text(format_double(*x).as_bytes()),
            Value::Boolean(b) => self.buf.push(if *b { b't' } else { b'f' }),
            Value::Text(t) | Value::Char(t) => self.field_text(t.as_bytes()),
            Value::Date(_) | Value::Timestamp(_) | Value::Numeric(_) => {
                self.field_text(output_text(v).as_bytes())
            }
        }
    }

    fn row<'v>(&mut self, values: impl Iterator<Item = &'v Value>) {
        for (i, v) in values.enumerate() {
            if i > 0 {
                self.buf.push(self.opts.delimiter);
            }
            self.value(v);
        }
        self.buf.push(b'\n');
    }

    fn header<'n>(&mut self, names: impl IntoIterator<Item = &'n str>) {
        for (i, name) in names.into_iter().enumerate() {
            if i > 0 {
                self.buf.push(self.opts.delimiter);
            }
            self.field_text(name.as_bytes());
        }
        self.buf.push(b'\n');
    }

    fn flush_to(&mut self, output: &mut dyn Write) -> io::Result<()> {
        output.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }
}

/// `rows` as `COPY … TO (FORMAT csv)` writes them, under a header line
/// of `names` if given (as with `HEADER`).
pub fn csv_rows<'n>(
    names: Option<impl IntoIterator<Item = &'n str>>,
    rows: &[Vec<Value>],
) -> String {
    let opts = CopyOptions::new(CopyFormat::Csv);
    let mut w = RowWriter {
        opts: &opts,
        buf: Vec::new(),
    };
    if let Some(names) = names {
        w.header(names);
    }
    for row in rows {
        w.row(row.iter());
    }
    // Only UTF-8 text and ASCII went in.
    String::from_utf8_lossy(&w.buf).into_owned()
}

/// `COPY … TO`: writes the plan's rows to `output` (named `target` in
/// errors) and returns how many.
pub fn copy_to(
    s: &mut Session,
    snap: &mut StatementSnapshot,
    plan: &mut CopyTo,
    output: &mut dyn Write,
    target: &str,
) -> Result<u64, ExecError> {
    let mut tables = Vec::new();
    let mut row_locked = Vec::new();
    match &plan.source {
        CopySource::Table { scan, .. } => tables.push(Arc::clone(&scan.table)),
        CopySource::Query(q) => {
            q.root.tables(&mut tables);
            q.root.row_locked_tables(&mut row_locked);
        }
    }
    TableLocks::new(tables, None, &row_locked).take(s)?;
    let mut w = RowWriter {
        opts: &plan.options,
        buf: Vec::with_capacity(WRITE_CHUNK * 2),
    };
    let write_failed = |source: io::Error| ExecError::CopyOutput {
        target: target.to_string(),
        source,
    };
    if plan.options.header {
        w.header(plan.names.iter().map(String::as_str));
    }
    let mut count = 0u64;
    match &mut plan.source {
        CopySource::Table { scan, columns } => {
            // Filled under the page lock, emptied between pages.
            let shared = RefCell::new(&mut w);
            let mut write_error = None;
            scan_table(
                scan,
                s,
                snap.get(),
                |_, row| {
                    shared.borrow_mut().row(columns.iter().map(|&c| &row[c]));
                    count += 1;
                    Ok(Flow::Continue)
                },
                || {
                    let mut w = shared.borrow_mut();
                    if w.buf.len() >= WRITE_CHUNK {
                        if let Err(e) = w.flush_to(output) {
                            write_error = Some(e);
                            return Ok(Flow::Stop);
                        }
                    }
                    Ok(Flow::Continue)
                },
            )?;
            if let Some(e) = write_error {
                return Err(write_failed(e));
            }
        }
        CopySource::Query(q) => {
            let mut eval = EvalContext::new();
            let mut cx = ExecCx {
                session: s,
                snapshot: snap.get(),
                eval: &mut eval,
            };
            let width = q.width;
            drain(q.root.as_mut(), &mut cx, |_, batch| {
                for row in &batch.rows {
                    w.row(row[..width.min(row.len())].iter());
                    count += 1;
                }
                if w.buf.len() >= WRITE_CHUNK {
                    w.flush_to(output).map_err(write_failed)?;
                }
                Ok(Flow::Continue)
            })?;
        }
    }
    w.flush_to(output)
        .and_then(|()| output.flush())
        .map_err(write_failed)?;
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields of each record of `input`, NULL as `None`.
    fn records(input: &str, opts: &CopyOptions) -> Result<Vec<Vec<Option<String>>>, String> {
        let mut bytes = input.as_bytes();
        let mut reader = RecordReader::new(&mut bytes, opts);
        let mut out = Vec::new();
        loop {
            match reader.next_record() {
                Ok(false) => return Ok(out),
                Ok(true) => out.push(
                    reader
                        .fields
                        .iter()
                        .map(|f| {
                            f.map(|(a, b)| String::from_utf8_lossy(&reader.data[a..b]).into_owned())
                        })
                        .collect(),
                ),
                Err(e) => return Err(format!("line {}: {}", e.line, e.fault)),
            }
        }
    }

    fn s(x: &str) -> Option<String> {
        Some(x.to_string())
    }

    #[test]
    fn a_line_longer_than_the_cap_is_refused_having_read_only_the_cap() {
        const CAP_BYTES: usize = 1 << 20;
        const INPUT_BYTES: u64 = 4 << 20;
        for format in [CopyFormat::Text, CopyFormat::Csv] {
            let opts = CopyOptions::new(format);
            let long = io::Read::chain(
                &b"1\tshort\n"[..],
                io::Read::take(io::repeat(b'a'), INPUT_BYTES),
            );
            let mut input = io::BufReader::new(long);
            let mut reader = RecordReader::with_record_limit(&mut input, &opts, CAP_BYTES);
            assert!(reader.next_record().is_ok_and(|more| more));
            let Err(e) = reader.next_record() else {
                panic!("a 4 MiB line passed a 1 MiB cap");
            };
            assert_eq!(e.line, 2);
            assert!(
                matches!(e.fault, CopyFault::LineTooLong { max_bytes } if max_bytes == CAP_BYTES),
                "{}",
                e.fault
            );
            assert!(
                reader.raw.capacity() <= 2 * CAP_BYTES,
                "{}",
                reader.raw.capacity()
            );
        }
        // A CSV record's quoted line breaks count towards its length.
        let opts = CopyOptions::new(CopyFormat::Csv);
        let mut input = &b"\"a\nb\nc\nd\"\n"[..];
        let mut reader = RecordReader::with_record_limit(&mut input, &opts, 8);
        let Err(e) = reader.next_record() else {
            panic!("a 12-byte quoted record passed an 8-byte cap");
        };
        assert!(
            e.fault.to_string().contains("longer than 8 bytes"),
            "{}",
            e.fault
        );
        let mut input = &b"\"a\nb\"\n"[..];
        let mut reader = RecordReader::with_record_limit(&mut input, &opts, 8);
        assert!(reader.next_record().is_ok_and(|more| more));
    }

    #[test]
    fn errors_quote_only_the_start_of_a_value() {
        let short = "x".repeat(COPY_ERROR_QUOTE_CHARS);
        assert_eq!(quote_start(&short), short);
        let long = "é".repeat(COPY_ERROR_QUOTE_CHARS + 1);
        assert_eq!(
            quote_start(&long),
            format!("{}...", "é".repeat(COPY_ERROR_QUOTE_CHARS))
        );
    }

    #[test]
    fn csv_fields_follow_postgresql() {
        let csv = CopyOptions::new(CopyFormat::Csv);
        let input = "1,,\"\",\"a,b\"\r\n2,\"say \"\"hi\"\"\",\"two\nlines\",x\"y\"\n\\.\nignored\n";
        assert_eq!(
            records(input, &csv).unwrap(),
            [
                vec![s("1"), None, s(""), s("a,b")],
                vec![s("2"), s("say \"hi\""), s("two\nlines"), s("xy")],
            ]
        );
        let e = records("1,\"open\n2,3\n", &csv).unwrap_err();
        assert_eq!(e, "line 1: unterminated CSV quoted field");
    }

    #[test]
    fn text_fields_follow_postgresql() {
        let text = CopyOptions::new(CopyFormat::Text);
        let input = "1\t\\N\t\ta\\tb\\\\c\\nd\\101\\x41\\,\n";
        assert_eq!(
            records(input, &text).unwrap(),
            [vec![s("1"), None, s(""), s("a\tb\\c\ndAA,")]]
        );
        let e = records("1\tab\\\n", &text).unwrap_err();
        assert!(e.starts_with("line 1: a backslash at the end"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn any_rows_read_back_as_written(
            rows in proptest::collection::vec(
                proptest::collection::vec(proptest::option::of("[a,;|\"'\\\t\r\n.N é]{0,6}"), 1..4),
                1..6,
            ),
            csv in proptest::bool::ANY,
            delimiter in proptest::sample::select(vec![b',', b';', b'|', b'\t']),
        ) {
            let mut opts = CopyOptions::new(if csv { CopyFormat::Csv } else { CopyFormat::Text });
            opts.delimiter = delimiter;
            let mut w = RowWriter { opts: &opts, buf: Vec::new() };
            let values: Vec<Vec<Value>> = rows
                .iter()
                .map(|r| r.iter().map(|f| f.clone().map_or(Value::Null, Value::Text)).collect())
                .collect();
            for row in &values {
                w.row(row.iter());
            }
            let text = String::from_utf8(w.buf).unwrap();
            proptest::prop_assert_eq!(records(&text, &opts).unwrap(), rows, "{}", text);
        }
    }

    #[test]
    fn written_fields_read_back_the_same() {
        let values = [
            "",
            "\\N",
            "\\.",
            "a,b",
            "q\"q",
            "tab\there",
            "line\nbreak",
            "cr\r",
            "back\\slash",
            "plain",
        ];
        for format in [CopyFormat::Text, CopyFormat::Csv] {
            let opts = CopyOptions::new(format);
            let mut w = RowWriter {
                opts: &opts,
                buf: Vec::new(),
            };
            let row: Vec<Value> = values
                .iter()
                .map(|v| Value::Text(v.to_string()))
                .chain([Value::Null])
                .collect();
            w.row(row.iter());
            let text = String::from_utf8(w.buf).unwrap();
            let expected: Vec<Option<String>> = values.iter().map(|v| s(v)).chain([None]).collect();
            assert_eq!(
                records(&text, &opts).unwrap(),
                [expected],
                "{format:?}: {text}"
            );
        }
    }
}
