//! `aiostore sql` and `aiostore shell`: running SQL text and printing
//! results, and the interactive prompt (history, multi-line statements,
//! `\timing`, `\d`, `\d t`, `\q`).

use std::cell::{Cell, RefCell};
use std::io::{BufRead, IsTerminal, Read, Write};
use std::rc::Rc;
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::Instant;

use aiostore::database::{Database, Session};
use aiostore::exec::{Progress, ProgressUnit};
use aiostore::sql::{
    format_csv, format_csv_rows, format_row_count, format_table, format_table_rows, ResultColumn,
    RowSink, StatementIo, StatementResult,
};
use aiostore::types::Value;

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Table,
    Csv,
}

/// Rows a query's printer holds before printing them: a result up to
/// this size prints exactly as if printed whole (one aligned table, and
/// nothing but the error if the query fails), a larger one in groups of
/// this size, each aligned on its own as psql's `FETCH_COUNT` prints
/// them, so that a result of any size prints in bounded memory.
const PRINT_GROUP_ROWS: usize = 10_000;

/// Prints one statement's result: rows as a table or CSV, else its tag.
/// Rows streamed to a [`RowPrinter`] were printed already.
pub fn print_result(out: &mut dyn Write, r: &StatementResult, how: Output) -> std::io::Result<()> {
    for notice in &r.notices {
        // Notices carry their level ("NOTICE: …", "INFO: …").
        eprintln!("{notice}");
    }
    if r.streamed && r.returns_rows() {
        Ok(())
    } else if r.returns_rows() {
        match how {
            Output::Table => write!(out, "{}", format_table(r)),
            Output::Csv => write!(out, "{}", format_csv(r)),
        }
    } else {
        writeln!(out, "{}", r.tag)
    }
}

/// Runs `text` in a new session, printing each statement's result as it
/// completes. Returns false if a statement failed (after printing the
/// error).
pub fn run_sql(db: &Arc<Database>, text: &str, how: Output) -> Result<bool, String> {
    let mut s = db.session().map_err(|e| e.to_string())?;
    let mut out = std::io::stdout().lock();
    run_in(&mut s, text, how, &mut out, false)
}

/// [`run_sql`] through the server that holds the data directory.
pub fn run_sql_remote(
    client: &mut aiostore::server::client::Client,
    text: &str,
    how: Output,
) -> Result<bool, String> {
    let mut out = std::io::stdout().lock();
    run_in(client, text, how, &mut out, false)
}

/// Where statements run: a session of this process, or the server that
/// holds the data directory. The outer error ends the run (the
/// connection broke); the inner one is a statement's, printed.
pub trait Runner {
    fn execute_each(
        &mut self,
        text: &str,
        io: &mut StatementIo,
        on_result: &mut dyn FnMut(StatementResult),
    ) -> Result<Result<(), String>, String>;
}

impl Runner for Session {
    fn execute_each(
        &mut self,
        text: &str,
        io: &mut StatementIo,
        on_result: &mut dyn FnMut(StatementResult),
    ) -> Result<Result<(), String>, String> {
        Ok(
            aiostore::sql::execute_simple_query(self, text, io, on_result)
                .map_err(|e| e.to_string()),
        )
    }
}

impl Runner for aiostore::server::client::Client {
    fn execute_each(
        &mut self,
        text: &str,
        io: &mut StatementIo,
        on_result: &mut dyn FnMut(StatementResult),
    ) -> Result<Result<(), String>, String> {
        match aiostore::server::client::Client::execute_each(self, text, io, on_result) {
            Ok(result) => Ok(result.map_err(|e| e.to_string())),
            Err(e) => Err(e.to_string()),
        }
    }
}

fn run_in(
    s: &mut dyn Runner,
    text: &str,
    how: Output,
    out: &mut dyn Write,
    timing: bool,
) -> Result<bool, String> {
    let started = Instant::now();
    let mut failed = None;
    // COPY … TO STDOUT writes between the results, to the same output.
    let out = RefCell::new(out);
    let copied = Cell::new(false);
    let mut copy_out = SharedOutput {
        out: &out,
        used: &copied,
    };
    let bar = Rc::new(RefCell::new(BarSlot::default()));
    let mut stdin = CopyInput::new(Rc::clone(&bar));
    let mut progress = TerminalProgress::new(bar);
    let mut printer = RowPrinter {
        out: &out,
        how,
        columns: Vec::new(),
        group: Vec::new(),
        printed: false,
    };
    let mut io = StatementIo {
        stdin: Some(&mut stdin),
        stdout: Some(&mut copy_out),
        rows: Some(&mut printer),
        progress: Some(&mut progress),
        explained_rows: None,
        copy_begin: None,
    };
    let result = s.execute_each(text, &mut io, &mut |r| {
        // After COPY … TO STDOUT the output is data: its "COPY n" goes to
        // standard error, so that `aiostore sql "COPY …" > file` gives a
        // clean file.
        let printed = if copied.replace(false) {
            print_result(&mut std::io::stderr(), &r, how)
        } else {
            print_result(*out.borrow_mut(), &r, how)
        };
        if let Err(e) = printed {
            failed = Some(e.to_string());
        }
    });
    if let Some(e) = failed {
        return Err(e);
    }
    let result = result?;
    let out = out.into_inner();
    // As psql: the error first, then the time the statement took.
    let _ = out.flush();
    if let Err(e) = &result {
        eprintln!("ERROR:  {e}");
    }
    if timing {
        let _ = writeln!(out, "Time: {:.3} ms", started.elapsed().as_secs_f64() * 1e3);
    }
    let _ = out.flush();
    Ok(result.is_ok())
}

/// Prints a query's rows as the executor sends them, [`PRINT_GROUP_ROWS`]
/// at a time.
struct RowPrinter<'a, 'o> {
    out: &'a RefCell<&'o mut dyn Write>,
    how: Output,
    columns: Vec<ResultColumn>,
    /// Rows not printed yet.
    group: Vec<Vec<Value>>,
    /// A group of this result was printed (with the header).
    printed: bool,
}

impl RowPrinter<'_, '_> {
    fn print_group(&mut self) -> std::io::Result<()> {
        let header = !self.printed;
        let text = match self.how {
            Output::Table => format_table_rows(&self.columns, &self.group, header),
            Output::Csv => format_csv_rows(&self.columns, &self.group, header),
        };
        self.group.clear();
        self.printed = true;
        self.out.borrow_mut().write_all(text.as_bytes())
    }
}

impl RowSink for RowPrinter<'_, '_> {
    fn begin(&mut self, columns: &[ResultColumn]) -> std::io::Result<()> {
        self.columns = columns.to_vec();
        self.group.clear();
        self.printed = false;
        Ok(())
    }

    fn rows(&mut self, rows: &mut Vec<Vec<Value>>) -> std::io::Result<()> {
        if self.columns.is_empty() {
            // `SELECT FROM t`: like any statement without columns, it
            // prints its tag ("SELECT 2") and no rows.
            return Ok(());
        }
        self.group.append(rows);
        if self.group.len() >= PRINT_GROUP_ROWS {
            self.print_group()?;
        }
        Ok(())
    }

    fn end(&mut self, count: Option<u64>) -> std::io::Result<()> {
        if self.columns.is_empty() {
            return Ok(());
        }
        let Some(count) = count else {
            // As psql: a failed query prints no more rows, only its error.
            self.group.clear();
            return Ok(());
        };
        if !self.group.is_empty() || !self.printed {
            self.print_group()?;
        }
        if self.how == Output::Table {
            self.out
                .borrow_mut()
                .write_all(format_row_count(count).as_bytes())?;
        }
        Ok(())
    }
}

/// The shell's output, lent to COPY … TO STDOUT between results; `used`
/// says a COPY wrote (or flushed) it.
struct SharedOutput<'a, 'o> {
    out: &'a RefCell<&'o mut dyn Write>,
    used: &'a Cell<bool>,
}

impl Write for SharedOutput<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.used.set(true);
        self.out.borrow_mut().write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.used.set(true);
        self.out.borrow_mut().flush()
    }
}

/// Standard input for COPY … FROM STDIN; on a terminal, says how to end
/// the data (as psql does) when a COPY first reads it.
struct CopyInput {
    stdin: std::io::StdinLock<'static>,
    bar: Rc<RefCell<BarSlot>>,
}

impl CopyInput {
    fn new(bar: Rc<RefCell<BarSlot>>) -> CopyInput {
        CopyInput {
            stdin: std::io::stdin().lock(),
            bar,
        }
    }

    fn tell(&mut self) {
        let mut slot = self.bar.borrow_mut();
        if !slot.copy_told && self.stdin.is_terminal() {
            // The user types the data: a spinner above the instructions
            // would only move while they type, so none until the COPY ends.
            if let Some(bar) = slot.bar.take() {
                bar.finish_and_clear();
            }
            eprintln!("Enter data to be copied followed by a newline.\nEnd with a backslash and a period on a line by itself, or an EOF signal.");
        }
        slot.copy_told = true;
    }
}

/// The progress bar of the statement running, shared with [`CopyInput`]
/// so that typing data on the terminal hides it.
#[derive(Default)]
struct BarSlot {
    bar: Option<ProgressBar>,
    /// This statement's COPY has said how to end the data; the end of its
    /// task clears it, so that the next COPY FROM STDIN says it again.
    copy_told: bool,
}

impl Read for CopyInput {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.tell();
        self.stdin.read(buf)
    }
}

impl BufRead for CopyInput {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.tell();
        self.stdin.fill_buf()
    }

    fn consume(&mut self, amount: usize) {
        self.stdin.consume(amount)
    }
}

/// A progress bar on standard error, drawn only when it is a terminal
/// (so that scripts and pipes get no control characters).
struct TerminalProgress {
    bar: Rc<RefCell<BarSlot>>,
    enabled: bool,
}

impl TerminalProgress {
    fn new(bar: Rc<RefCell<BarSlot>>) -> TerminalProgress {
        TerminalProgress {
            bar,
            enabled: std::io::stderr().is_terminal(),
        }
    }
}

impl Progress for TerminalProgress {
    fn begin(&mut self, task: &str, total: Option<u64>, unit: ProgressUnit) {
        if !self.enabled {
            return;
        }
        let (amount, rate) = match unit {
            ProgressUnit::Bytes => ("{bytes}/{total_bytes}", " {bytes_per_sec}"),
            // indicatif prints a unitless rate with four decimals.
            ProgressUnit::Blocks => ("{human_pos}/{human_len} blocks", ""),
            ProgressUnit::Rows => ("{human_pos}/{human_len} rows", ""),
        };
        let bar = match total {
            Some(total) => {
                let template = format!("{{msg}} [{{bar:30}}] {amount}{rate}, {{eta}} left");
                let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
                bar.set_style(
                    ProgressStyle::with_template(&template)
                        .unwrap_or_else(|_| ProgressStyle::default_bar())
                        .progress_chars("=> "),
                );
                bar
            }
            None => {
                let amount = amount.split('/').next().unwrap_or("{pos}");
                let template = format!("{{spinner}} {{msg}} {amount}{rate}");
                let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
                bar.set_style(
                    ProgressStyle::with_template(&template)
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                bar
            }
        };
        bar.set_message(task.to_string());
        self.bar.borrow_mut().bar = Some(bar);
    }

    fn update(&mut self, done: u64) {
        // Drawn from the first progress on, not at begin: COPY FROM STDIN
        // on a terminal first waits for typing (see CopyInput::tell),
        // and a bar drawn then would sit above the instructions.
        if let Some(bar) = &self.bar.borrow().bar {
            if bar.is_hidden() {
                bar.set_draw_target(ProgressDrawTarget::stderr());
            }
            bar.set_position(done);
        }
    }

    fn end(&mut self) {
        let mut slot = self.bar.borrow_mut();
        slot.copy_told = false;
        if let Some(bar) = slot.bar.take() {
            bar.finish_and_clear();
        }
    }
}

/// True if `buf` ends a statement: a `;` outside quotes and comments at
/// the end (ignoring trailing blanks).
fn statement_complete(buf: &str) -> bool {
    let mut in_single = false;
    let mut in_double = false;
    let mut last_semicolon = false;
    let mut chars = buf.chars().peekable();
    while let Some(c) = chars.next() {
        if in_single {
            in_single = c != '\'';
            continue;
        }
        if in_double {
            in_double = c != '"';
            continue;
        }
        match c {
            '\'' => in_single = true,
            '"' => in_double = true,
            '-' if chars.peek() == Some(&'-') => {
                // A comment runs to the end of the line.
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
                continue;
            }
            ';' => {
                last_semicolon = true;
                continue;
            }
            c if c.is_whitespace() => continue,
            _ => {}
        }
        last_semicolon = false;
    }
    last_semicolon && !in_single && !in_double
}

/// `\d`: the tables; `\d t`: one table's columns.
/// `\d [name]` as transaction `viewer` (the shell session's open one, if
/// any) sees the catalog: its own uncommitted tables too.
fn describe(
    db: &Database,
    viewer: Option<aiostore::txn::Xid>,
    name: Option<&str>,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    match name {
        None => {
            let mut tables = db.catalog().tables_for(viewer);
            tables.sort_by(|a, b| a.name().cmp(b.name()));
            if tables.is_empty() {
                return writeln!(out, "Did not find any tables.");
            }
            writeln!(out, "{:<30} {:>8} {:>12}", "table", "columns", "blocks")?;
            for t in tables {
                let blocks = db
                    .pool()
                    .relation(t.heap.rel)
                    .nblocks(aiostore::storage::Fork::Main)
                    .map_or("?".to_string(), |n| n.to_string());
                writeln!(
                    out,
                    "{:<30} {:>8} {:>12}",
                    t.name(),
                    t.columns.len(),
                    blocks
                )?;
            }
            Ok(())
        }
        Some(name) => match db
            .catalog()
            .table_for(&aiostore::sql::relation_name_from_text(name), viewer)
        {
            Err(e) => writeln!(out, "{e}"),
            Ok(t) => {
                writeln!(
                    out,
                    "Table \"{}\" (relation {}, fillfactor {})",
                    t.name(),
                    t.heap.rel,
                    t.heap.fillfactor
                )?;
                // Types as psql names them (`character varying(10)`,
                // `timestamp without time zone`), the column as wide as
                // the longest.
                let types: Vec<String> = t.columns.iter().map(|c| c.ty.display_name()).collect();
                let width = types.iter().map(String::len).max().unwrap_or(0).max(18);
                let indexes = db.catalog().indexes_of(&t);
                writeln!(out, "{:<30} {:<width$} nullable", "column", "type")?;
                for (i, (c, ty)) in t.columns.iter().zip(&types).enumerate() {
                    let not_null = aiostore::catalog::refuses_null(&t, &indexes, i);
                    writeln!(
                        out,
                        "{:<30} {:<width$} {}",
                        c.name,
                        ty,
                        if not_null { "not null" } else { "" }
                    )?;
                }
                let lines = aiostore::sql::describe_indexes(db.catalog(), &t);
                if !lines.is_empty() {
                    writeln!(out, "Indexes:")?;
                    for line in lines {
                        writeln!(out, "    {line}")?;
                    }
                }
                Ok(())
            }
        },
    }
}

/// `\di`: every index a statement of transaction `viewer` may use, by
/// name, with its table and definition (as [`describe`] shows it under
/// the table).
fn describe_indexes(
    db: &Database,
    viewer: Option<aiostore::txn::Xid>,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let mut rows = Vec::new();
    for t in db.catalog().tables_for(viewer) {
        for def in db.catalog().indexes_of(&t).iter() {
            let definition = aiostore::sql::describe_index(def, &t);
            rows.push((def.name.clone(), t.name().to_string(), definition));
        }
    }
    if rows.is_empty() {
        return writeln!(out, "Did not find any indexes.");
    }
    rows.sort();
    writeln!(out, "{:<30} {:<30} definition", "index", "table")?;
    for (index, table, definition) in rows {
        writeln!(out, "{index:<30} {table:<30} {definition}")?;
    }
    Ok(())
}

#[cfg(test)]
mod describe_tests {
    use std::sync::Arc;

    use aiostore::database::Database;
    use aiostore::txn::Xid;

    use super::describe;

    fn small_db() -> (tempfile::TempDir, Arc<Database>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        Database::init(&path).unwrap();
        let settings = [
            "io_method=sync".to_string(),
            "shared_buffers=64".into(),
            "max_sessions=8".into(),
        ];
        let db = Database::open(&path, &settings).unwrap();
        (dir, db)
    }

    /// What `\d [name]` prints to transaction `viewer`.
    fn shown(db: &Database, viewer: Option<Xid>, name: Option<&str>) -> String {
        let mut out = Vec::new();
        describe(db, viewer, name, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// The table names of a `\d` listing (the first word of each line
    /// after the header).
    fn listed(text: &str) -> Vec<String> {
        text.lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .collect()
    }

    #[test]
    fn describe_folds_an_unquoted_name_and_keeps_a_quoted_one() {
        assert_eq!(aiostore::sql::relation_name_from_text("T"), "t");
        assert_eq!(aiostore::sql::relation_name_from_text("\"T\""), "T");
        assert_eq!(aiostore::sql::relation_name_from_text("\"a\"\"b\""), "a\"b");
        let (_dir, db) = small_db();
        let mut s = db.session().unwrap();
        aiostore::sql::execute(
            &mut s,
            "CREATE TABLE t (id integer); CREATE TABLE \"T\" (x text)",
        )
        .unwrap();
        let shown = |name: &str| shown(&db, None, Some(name));
        assert!(shown("T").contains("id "), "{}", shown("T"));
        assert!(shown("\"T\"").contains("x "), "{}", shown("\"T\""));
        assert!(shown("\"t\"").contains("id "));
        assert!(shown("nope").contains("does not exist"));
    }

    #[test]
    fn describe_names_types_with_their_length_as_psql_does() {
        let (_dir, db) = small_db();
        let mut s = db.session().unwrap();
        aiostore::sql::execute(
            &mut s,
            "CREATE TABLE t (v varchar(10), c char(3), b bpchar, d date, ts timestamp, \
             u character varying, one char)",
        )
        .unwrap();
        let text = shown(&db, None, Some("t"));
        let types: Vec<&str> = text.lines().skip(2).map(|l| l[30..].trim()).collect();
        assert_eq!(
            types,
            [
                "character varying(10)",
                "character(3)",
                "bpchar",
                "date",
                "timestamp without time zone",
                "character varying",
                "character(1)",
            ],
            "{text}"
        );
    }

    #[test]
    fn describe_lists_a_tables_indexes_as_psql_does() {
        let (_dir, db) = small_db();
        let mut s = db.session().unwrap();
        aiostore::sql::execute(
            &mut s,
            "CREATE TABLE t (id integer PRIMARY KEY, code text UNIQUE, a integer); \
             CREATE INDEX ON t (a DESC NULLS LAST); \
             CREATE TABLE p (k integer, v integer); ALTER TABLE p ADD PRIMARY KEY (k)",
        )
        .unwrap();
        let text = shown(&db, None, Some("t"));
        let indexes: Vec<&str> = text.lines().skip_while(|l| *l != "Indexes:").collect();
        assert_eq!(
            indexes,
            [
                "Indexes:",
                "    \"t_pkey\" PRIMARY KEY, btree (id)",
                "    \"t_a_idx\" btree (a DESC NULLS LAST)",
                "    \"t_code_key\" UNIQUE CONSTRAINT, btree (code)",
            ],
            "{text}"
        );
        // A column of a primary key ALTER TABLE added shows as NOT NULL.
        let text = shown(&db, None, Some("p"));
        let nullable: Vec<&str> = text
            .lines()
            .skip(2)
            .take(2)
            .map(|l| l[50..].trim())
            .collect();
        assert_eq!(nullable, ["not null", ""], "{text}");
        let mut out = Vec::new();
        super::describe_indexes(&db, None, &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert_eq!(
            out.lines()
                .skip(1)
                .filter_map(|l| l.split_whitespace().next())
                .collect::<Vec<_>>(),
            ["p_pkey", "t_a_idx", "t_code_key", "t_pkey"],
            "{out}"
        );
    }

    #[test]
    fn describe_shows_the_sessions_own_uncommitted_table_to_it_alone() {
        let (_dir, db) = small_db();
        let mut s = db.session().unwrap();
        aiostore::sql::execute(&mut s, "CREATE TABLE a (id integer)").unwrap();
        aiostore::sql::execute(&mut s, "BEGIN; CREATE TABLE b (x text)").unwrap();
        let own = s.current_xid();
        assert!(own.is_some(), "the session is in a transaction");
        assert_eq!(listed(&shown(&db, own, None)), ["a", "b"]);
        assert!(shown(&db, own, Some("b")).contains("x "));
        // Another session (no transaction of its own) sees only `a`.
        assert_eq!(listed(&shown(&db, None, None)), ["a"]);
        assert!(shown(&db, None, Some("b")).contains("does not exist"));
        aiostore::sql::execute(&mut s, "ROLLBACK").unwrap();
        assert_eq!(listed(&shown(&db, own, None)), ["a"]);
    }
}

const HELP: &str = "\\d [table]  list tables, or describe one (its columns and indexes)\n\\di         list indexes\n\\timing     toggle timing of statements\n\\q          quit\nSQL statements end with ';' and may span lines.";

/// What the prompt runs against: a session of this process, with the
/// catalog at hand for `\d`, or the server that holds the data directory.
trait ShellTarget: Runner {
    /// `\d [name]`.
    fn describe(&mut self, name: Option<&str>, out: &mut dyn Write) -> std::io::Result<()>;
    /// `\di`.
    fn describe_indexes(&mut self, out: &mut dyn Write) -> std::io::Result<()>;
}

/// The shell's own session of a database it opened.
struct Local<'a> {
    db: &'a Arc<Database>,
    session: Session,
}

impl Runner for Local<'_> {
    fn execute_each(
        &mut self,
        text: &str,
        io: &mut StatementIo,
        on_result: &mut dyn FnMut(StatementResult),
    ) -> Result<Result<(), String>, String> {
        Runner::execute_each(&mut self.session, text, io, on_result)
    }
}

impl ShellTarget for Local<'_> {
    fn describe(&mut self, name: Option<&str>, out: &mut dyn Write) -> std::io::Result<()> {
        describe(self.db, self.session.current_xid(), name, out)
    }

    fn describe_indexes(&mut self, out: &mut dyn Write) -> std::io::Result<()> {
        describe_indexes(self.db, self.session.current_xid(), out)
    }
}

/// Through a server, `\d` asks `pg_catalog`, as psql does: the catalog in
/// memory is the server's.
impl ShellTarget for aiostore::server::client::Client {
    fn describe(&mut self, name: Option<&str>, out: &mut dyn Write) -> std::io::Result<()> {
        let query = match name {
            None => "SELECT c.relname AS \"table\" FROM pg_catalog.pg_class c \
                     WHERE c.relkind = 'r' ORDER BY 1"
                .to_string(),
            Some(table) => format!(
                "SELECT a.attname AS \"column\", \
                        pg_catalog.format_type(a.atttypid, a.atttypmod) AS \"type\", \
                        CASE WHEN a.attnotnull THEN 'not null' ELSE '' END AS \"nullable\" \
                 FROM pg_catalog.pg_attribute a \
                 JOIN pg_catalog.pg_class c ON c.oid = a.attrelid \
                 WHERE c.relname = '{}' AND c.relkind = 'r' AND a.attnum > 0 \
                 ORDER BY a.attnum",
                table.replace('\'', "''")
            ),
        };
        describe_through(self, &query, out)
    }

    fn describe_indexes(&mut self, out: &mut dyn Write) -> std::io::Result<()> {
        describe_through(
            self,
            "SELECT c.relname AS \"index\", pg_catalog.pg_get_indexdef(c.oid) AS \"definition\" \
             FROM pg_catalog.pg_class c WHERE c.relkind = 'i' ORDER BY 1",
            out,
        )
    }
}

/// Runs a catalog query of `\d` through the server, its error printed
/// as a statement's is.
fn describe_through(
    client: &mut aiostore::server::client::Client,
    query: &str,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    if let Err(e) = run_in(client, query, Output::Table, out, false) {
        writeln!(out, "{e}")?;
    }
    Ok(())
}

/// The interactive prompt on a database this process opened.
pub fn shell(db: &Arc<Database>) -> Result<(), String> {
    let session = db.session().map_err(|e| e.to_string())?;
    println!(
        "aiostore shell on \"{}\" (io_method={}); \\? for help, \\q to quit",
        db.dir().display(),
        db.aio().method()
    );
    prompt(&mut Local { db, session })
}

/// The interactive prompt through the server that holds data directory
/// `dir` (as its file `server` says), in a session of that server: what
/// it runs, it runs as `aiostore sql` does through a server.
pub fn shell_remote(
    mut client: aiostore::server::client::Client,
    dir: &std::path::Path,
    server: &aiostore::server::client::ServerFile,
) -> Result<(), String> {
    println!(
        "aiostore shell on \"{}\" through its server (pid {}); \\? for help, \\q to quit",
        dir.display(),
        server.pid
    );
    prompt(&mut client)
}

/// The prompt's loop: lines until `\q` or end of input.
fn prompt(target: &mut dyn ShellTarget) -> Result<(), String> {
    let mut editor = rustyline::DefaultEditor::new().map_err(|e| e.to_string())?;
    let history =
        std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".aiostore_history"));
    if let Some(h) = &history {
        let _ = editor.load_history(h);
    }
    let mut timing = false;
    let mut buf = String::new();
    let mut out = std::io::stdout();
    loop {
        let prompt = if buf.is_empty() {
            "aiostore=> "
        } else {
            "aiostore-> "
        };
        let line = match editor.readline(prompt) {
            Ok(line) => line,
            Err(rustyline::error::ReadlineError::Interrupted) => {
                buf.clear();
                continue;
            }
            Err(rustyline::error::ReadlineError::Eof) => break,
            Err(e) => return Err(e.to_string()),
        };
        let trimmed = line.trim();
        if buf.is_empty() && trimmed.starts_with('\\') {
            let _ = editor.add_history_entry(trimmed);
            let mut words = trimmed.split_whitespace();
            match (words.next(), words.next()) {
                (Some("\\q"), _) => break,
                (Some("\\timing"), _) => {
                    timing = !timing;
                    println!("Timing is {}.", if timing { "on" } else { "off" });
                }
                (Some("\\d"), name) => {
                    target.describe(name, &mut out).map_err(|e| e.to_string())?
                }
                (Some("\\di"), _) => target
                    .describe_indexes(&mut out)
                    .map_err(|e| e.to_string())?,
                (Some("\\?"), _) => println!("{HELP}"),
                (Some(other), _) => println!("invalid command {other}; \\? for help"),
                (None, _) => {}
            }
            continue;
        }
        if trimmed.is_empty() && buf.is_empty() {
            continue;
        }
        buf.push_str(&line);
        buf.push('\n');
        if statement_complete(&buf) {
            let _ = editor.add_history_entry(buf.trim_end());
            run_in(target, &buf, Output::Table, &mut out, timing)?;
            buf.clear();
        }
    }
    if let Some(h) = &history {
        let _ = editor.save_history(h);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::statement_complete;

    #[test]
    fn a_statement_ends_at_a_semicolon_outside_quotes_and_comments() {
        assert!(statement_complete("select 1;"));
        assert!(statement_complete("select 1;  \n"));
        assert!(!statement_complete("select ';'"));
        assert!(!statement_complete("select 1 -- done;"));
        assert!(statement_complete("select 1 -- done;\n;"));
        assert!(!statement_complete("select \"a;"));
        assert!(statement_complete("select 'it''s';"));
    }
}
