//! Real PostgreSQL clients against `aiostore serve` (the built binary):
//! Debian's `pgbench` initialises its tables and runs its built-in
//! scripts in every query mode with no failed transaction and balances
//! that agree, and `psql` runs statements, COPY and scripts and reports
//! errors with their codes. They connect through the Unix socket.
//!
//! `.ci/run` installs the clients (Debian's `postgresql-15` package). On
//! a machine without them each test says so on stderr and checks nothing
//! else: `PG_BIN` may name the directory holding them.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use aiostore::database::Database;

/// The longest a server takes to open its socket.
const LISTENING_WITHIN: Duration = Duration::from_secs(30);

/// The client program `name`: in `$PG_BIN`, Debian's PostgreSQL
/// directories (newest first), or the PATH.
fn client(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PG_BIN")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    if let Ok(versions) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut found: Vec<PathBuf> = versions.flatten().map(|v| v.path().join("bin")).collect();
        found.sort();
        dirs.extend(found.into_iter().rev());
    }
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

/// Both clients, or None after saying why the test checks nothing.
fn clients(test: &str) -> Option<(PathBuf, PathBuf)> {
    match (client("pgbench"), client("psql")) {
        (Some(pgbench), Some(psql)) => Some((pgbench, psql)),
        _ => {
            eprintln!(
                "{test}: SKIPPED: pgbench and psql are not installed (apt-get install postgresql-15, as .ci/run does, or set PG_BIN)"
            );
            None
        }
    }
}

/// `aiostore serve` on a new data directory, stopped (SIGTERM) when
/// dropped.
struct Server {
    child: Child,
    port: u16,
    sockets: tempfile::TempDir,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start() -> Server {
        let dir = common::temp_dir();
        let path = dir.path().join("data");
        Database::init(&path).unwrap();
        let sockets = tempfile::Builder::new()
            .prefix("sock")
            .tempdir_in("/tmp")
            .unwrap();
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let child = Command::new(env!("CARGO_BIN_EXE_aiostore"))
            .arg("--data-dir")
            .arg(&path)
            .args(["-c", &format!("port={port}")])
            .args([
                "-c",
                &format!("unix_socket_directories={}", sockets.path().display()),
            ])
            .args(["-c", "shared_buffers=2048"])
            .arg("serve")
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let socket = sockets.path().join(format!(".s.PGSQL.{port}"));
        let started = Instant::now();
        while !socket.exists() {
            assert!(
                started.elapsed() < LISTENING_WITHIN,
                "the server never listened"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Server {
            child,
            port,
            sockets,
            _dir: dir,
        }
    }

    /// Runs client `program` with `args` against the server, `input` on
    /// its standard input.
    fn run(&self, program: &Path, args: &[&str], input: &str) -> Output {
        let mut child = Command::new(program)
            .args(["-h", &self.sockets.path().display().to_string()])
            .args(["-p", &self.port.to_string()])
            .args(args)
            .env("PGDATABASE", "postgres")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), input.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    }

    /// The text a client run printed, failing the test if it failed.
    fn ok(&self, program: &Path, args: &[&str], input: &str) -> String {
        let out = self.run(program, args, input);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{} {args:?}: {}\n{text}\n{}",
            program.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        text
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.child.id() as i32).unwrap(),
            rustix::process::Signal::TERM,
        );
        let _ = self.child.wait();
    }
}

#[test]
fn pgbench_initialises_and_runs_its_scripts_in_every_mode() {
    let Some((pgbench, psql)) = clients("pgbench_initialises_and_runs_its_scripts_in_every_mode")
    else {
        return;
    };
    let server = Server::start();
    // DROP … IF EXISTS of four tables, CREATE TABLE … WITH (fillfactor),
    // BEGIN, TRUNCATE of four, INSERTs, COPY … WITH (FREEZE ON), COMMIT,
    // VACUUM ANALYZE, ALTER TABLE … ADD PRIMARY KEY: twice, the second
    // over the first's tables.
    for _ in 0..2 {
        server.ok(&pgbench, &["-i", "-s", "1", "-q"], "");
    }
    let mut transactions = 0;
    for mode in ["simple", "extended", "prepared"] {
        for script in [&["-S"][..], &[][..], &["-N"][..]] {
            let mut args = vec!["-n", "-c", "4", "-j", "2", "-t", "100", "-M", mode];
            args.extend_from_slice(script);
            let out = server.ok(&pgbench, &args, "");
            assert!(
                out.contains("number of transactions actually processed: 400/400")
                    && out.contains("number of failed transactions: 0 (0.000%)"),
                "{mode} {script:?}: {out}"
            );
            if script != ["-S"] {
                transactions += 400;
            }
        }
    }
    // Every TPC-B-like transaction added its delta to an account and to
    // the history (and the default script to a teller and a branch).
    let sums = server.ok(
        &psql,
        &[
            "-At",
            "-c",
            "SELECT (SELECT sum(abalance) FROM pgbench_accounts) = (SELECT sum(delta) FROM pgbench_history), \
                    (SELECT count(*) FROM pgbench_history), \
                    (SELECT sum(tbalance) FROM pgbench_tellers) = (SELECT sum(bbalance) FROM pgbench_branches)",
        ],
        "",
    );
    assert_eq!(sums.trim(), format!("t|{transactions}|t"));
}

#[test]
fn psql_runs_statements_copy_and_scripts_and_reports_errors() {
    let Some((_, psql)) = clients("psql_runs_statements_copy_and_scripts_and_reports_errors")
    else {
        return;
    };
    let server = Server::start();
    let out = server.ok(
        &psql,
        &["-v", "ON_ERROR_STOP=1", "-q", "-At", "-f", "-"],
        "CREATE TABLE t (id integer PRIMARY KEY, note text);\n\
         \\copy t FROM stdin\n1\tone\n2\ttwo\n\\.\n\
         INSERT INTO t VALUES (3, NULL);\n\
         SELECT id, note FROM t ORDER BY id;\n\
         BEGIN;\nUPDATE t SET note = 'changed' WHERE id = 1;\nROLLBACK;\n\
         SELECT note FROM t WHERE id = 1;\n",
    );
    assert_eq!(out, "1|one\n2|two\n3|\none\n");
    // An error: psql's exit status, PostgreSQL's words and code.
    let out = server.run(
        &psql,
        &[
            "-v",
            "ON_ERROR_STOP=1",
            "-v",
            "VERBOSITY=verbose",
            "-c",
            "SELECT * FROM nowhere",
        ],
        "",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("ERROR:  42P01: table \"nowhere\" does not exist"),
        "{stderr}"
    );
    let out = server.run(&psql, &["-c", "INSERT INTO t VALUES (1, 'again')"], "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("duplicate key value violates unique constraint \"t_pkey\""),
        "{stderr}"
    );
    // \copy out, through COPY TO STDOUT.
    let out = server.ok(
        &psql,
        &["-c", "\\copy (SELECT id FROM t ORDER BY id) TO stdout"],
        "",
    );
    assert_eq!(out, "1\n2\n3\n");
}

/// The schema the `\d` tests describe: two tables, a primary key, a
/// UNIQUE constraint over two columns and a descending index.
const DESCRIBED_SCHEMA: &str = "CREATE TABLE t (id integer PRIMARY KEY, note text NOT NULL, \
     score double precision, code varchar(10));\n\
     CREATE INDEX t_note_idx ON t (note DESC);\n\
     CREATE TABLE u (a bigint, b numeric(5,2), c char(3), d date, e timestamp, f boolean, \
     UNIQUE (a, b));\n\
     CREATE ROLE reader;\n";

#[test]
fn psql_lists_tables_indexes_databases_and_roles_from_pg_catalog() {
    let Some((_, psql)) = clients("psql_lists_tables_indexes_databases_and_roles_from_pg_catalog")
    else {
        return;
    };
    let server = Server::start();
    server.ok(
        &psql,
        &["-v", "ON_ERROR_STOP=1", "-q", "-f", "-"],
        DESCRIBED_SCHEMA,
    );
    let owner = aiostore::catalog::current_role_name();
    // Unaligned (-A), so that the owner's name does not change the
    // layout; PostgreSQL 15 prints the same for the same schema, its
    // owner and locale aside.
    let describe = |command: &str| server.ok(&psql, &["-A", "-c", command], "");
    assert_eq!(
        describe("\\dt"),
        format!(
            "List of relations\nSchema|Name|Type|Owner\n\
             public|t|table|{owner}\npublic|u|table|{owner}\n(2 rows)\n"
        )
    );
    assert_eq!(
        describe("\\di"),
        format!(
            "List of relations\nSchema|Name|Type|Owner|Table\n\
             public|t_note_idx|index|{owner}|t\npublic|t_pkey|index|{owner}|t\n\
             public|u_a_b_key|index|{owner}|u\n(3 rows)\n"
        )
    );
    // A pattern goes through `~` and pg_table_is_visible.
    assert_eq!(
        describe("\\dt u*"),
        format!("List of relations\nSchema|Name|Type|Owner\npublic|u|table|{owner}\n(1 row)\n")
    );
    assert_eq!(
        describe("\\l"),
        format!(
            "List of databases\n\
             Name|Owner|Encoding|Collate|Ctype|ICU Locale|Locale Provider|Access privileges\n\
             postgres|{owner}|UTF8|C|C||libc|\n(1 row)\n"
        )
    );
    // In name order, as PostgreSQL lists them.
    let mut roles = [
        "reader|Cannot login|{}".to_string(),
        format!("{owner}|Superuser, Create role, Create DB, Replication, Bypass RLS|{{}}"),
    ];
    roles.sort();
    assert_eq!(
        describe("\\du"),
        format!(
            "List of roles\nRole name|Attributes|Member of\n{}\n",
            roles.join("\n")
        )
    );
    // \d t: columns, types, nullability and indexes, laid out exactly
    // as PostgreSQL 15 lays them out for the same schema.
    assert_eq!(
        server.ok(&psql, &["-c", "\\d t"], ""),
        "                        Table \"public.t\"\n \
         Column |         Type          | Collation | Nullable | Default \n\
         --------+-----------------------+-----------+----------+---------\n \
         id     | integer               |           | not null | \n \
         note   | text                  |           | not null | \n \
         score  | double precision      |           |          | \n \
         code   | character varying(10) |           |          | \n\
         Indexes:\n    \
         \"t_pkey\" PRIMARY KEY, btree (id)\n    \
         \"t_note_idx\" btree (note DESC)\n\n"
    );
    assert_eq!(
        server.ok(&psql, &["-c", "\\d u"], ""),
        "                           Table \"public.u\"\n \
         Column |            Type             | Collation | Nullable | Default \n\
         --------+-----------------------------+-----------+----------+---------\n \
         a      | bigint                      |           |          | \n \
         b      | numeric(5,2)                |           |          | \n \
         c      | character(3)                |           |          | \n \
         d      | date                        |           |          | \n \
         e      | timestamp without time zone |           |          | \n \
         f      | boolean                     |           |          | \n\
         Indexes:\n    \
         \"u_a_b_key\" UNIQUE CONSTRAINT, btree (a, b)\n\n"
    );
    // \d of an index: its columns, kind and table.
    assert_eq!(
        server.ok(&psql, &["-c", "\\d u_a_b_key"], ""),
        "         Index \"public.u_a_b_key\"\n \
         Column |     Type     | Key? | Definition \n\
         --------+--------------+------+------------\n \
         a      | bigint       | yes  | a\n \
         b      | numeric(5,2) | yes  | b\n\
         unique, btree, for table \"public.u\"\n\n"
    );
    assert!(server
        .ok(&psql, &["-c", "\\d t_pkey"], "")
        .ends_with("primary key, btree, for table \"public.t\"\n\n"));
    // The + forms add persistence, access method, size and description.
    assert!(describe("\\dt+ t").contains(&format!("public|t|table|{owner}|permanent|heap|")));
    assert!(describe("\\di+ t_pkey").contains("|permanent|btree|16 kB|"));
    // A catalog query the engine cannot run fails with its SQLSTATE, and
    // the connection goes on.
    let out = server.run(
        &psql,
        &["-v", "VERBOSITY=verbose", "-c", "\\df", "-c", "SELECT 1"],
        "",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ERROR:  42"), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("(1 row)"));
}
