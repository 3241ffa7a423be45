//! `aiostore serve` through a real client: the `tokio-postgres` driver,
//! over TCP and the Unix socket, on every I/O method.

mod common;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use aiostore::config::IoMethod;
use aiostore::database::Database;
use aiostore::server::{self, ServerHandle};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt, TryStreamExt};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{FromSql, Type};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

/// A database served on an ephemeral TCP port and a Unix socket in its
/// temporary directory.
struct Served {
    handle: Option<ServerHandle>,
    db: Option<Arc<Database>>,
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Served {
    fn port(&self) -> u16 {
        self.handle.as_ref().unwrap().tcp_addresses[0].port()
    }

    fn socket_dir(&self) -> PathBuf {
        let socket = &self.handle.as_ref().unwrap().unix_sockets[0];
        socket.parent().unwrap().to_path_buf()
    }

    fn tcp_config(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=tester dbname=postgres",
            self.port()
        )
    }

    async fn connect(&self) -> Client {
        connect(&self.tcp_config()).await
    }

    /// Stops the server and closes the database (its shutdown
    /// checkpoint), returning the data directory.
    fn stop(&mut self) -> PathBuf {
        self.handle.take().unwrap().shutdown();
        let db = self.db.take().unwrap();
        assert_eq!(
            Arc::strong_count(&db),
            1,
            "the server let go of the database"
        );
        drop(db);
        self.path.clone()
    }
}

fn serve(method: IoMethod, extra: &[&str]) -> Served {
    let dir = common::temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    let mut settings = vec![
        format!("io_method={}", method.name()),
        "shared_buffers=2048".into(),
        "listen_addresses=localhost".into(),
        "port=0".into(),
        format!("unix_socket_directories={}", dir.path().display()),
        "max_connections=120".into(),
        "max_sessions=128".into(),
    ];
    settings.extend(extra.iter().map(|s| s.to_string()));
    let db = Database::open(&path, &settings).unwrap();
    let handle = server::start(Arc::clone(&db)).unwrap();
    Served {
        handle: Some(handle),
        db: Some(db),
        path,
        _dir: dir,
    }
}

async fn connect(config: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(config, NoTls).await.unwrap();
    tokio::spawn(async move {
        // The connection ends with an error when a test breaks it on
        // purpose; the client's calls report what matters.
        let _ = connection.await;
    });
    client
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A value's bytes as the server sent them, whatever its type: to check
/// binary formats against PostgreSQL's own bytes.
struct Raw(Vec<u8>);

impl<'a> FromSql<'a> for Raw {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(raw.to_vec()))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

fn code(e: &tokio_postgres::Error) -> &SqlState {
    e.code().unwrap_or_else(|| panic!("no SQLSTATE in {e:?}"))
}

/// The one bigint a query such as `SELECT count(*) …` returns.
async fn count(c: &Client, query: &str) -> i64 {
    c.query_one(query, &[]).await.unwrap().get(0)
}

fn simple_rows(messages: &[SimpleQueryMessage]) -> Vec<Vec<Option<String>>> {
    messages
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect()
}

fn queries_run_through_both_protocols(method: IoMethod) {
    let served = serve(method, &[]);
    runtime().block_on(async {
        let c = served.connect().await;
        let messages = c
            .simple_query(
                "CREATE TABLE t (id integer PRIMARY KEY, big bigint, x double precision, note text, ok boolean);
                 INSERT INTO t SELECT i, i * 10000000000, i / 4.0, 'n' || i, i % 2 = 0 FROM generate_series(1, 1000) i;
                 SELECT id, note, ok FROM t WHERE id <= 2 ORDER BY id",
            )
            .await
            .unwrap();
        assert_eq!(
            simple_rows(&messages),
            [
                vec![Some("1".into()), Some("n1".into()), Some("f".into())],
                vec![Some("2".into()), Some("n2".into()), Some("t".into())],
            ]
        );
        let tags: Vec<u64> = messages
            .iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::CommandComplete(n) => Some(*n),
                _ => None,
            })
            .collect();
        assert_eq!(tags, [0, 1000, 2]);

        // Extended protocol: parameters typed from their context, binary
        // results.
        let rows = c
            .query(
                "SELECT id, big, x, note, ok FROM t WHERE id = $1 OR note = $2 ORDER BY id",
                &[&7i32, &"n9"],
            )
            .await
            .unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].get::<_, i32>(0), 7);
        assert_eq!(rows[0].get::<_, i64>(1), 70_000_000_000);
        assert_eq!(rows[0].get::<_, f64>(2), 1.75);
        assert_eq!(rows[0].get::<_, &str>(3), "n7");
        assert!(!rows[0].get::<_, bool>(4));
        assert_eq!(rows[1].get::<_, i32>(0), 9);
        // A streamed result of many rows.
        let all = c.query("SELECT id FROM t ORDER BY id", &[]).await.unwrap();
        assert_eq!(all.len(), 1000);
        assert_eq!(all[999].get::<_, i32>(0), 1000);
        // NULL both ways, and a parameter whose type the client names.
        let stmt = c
            .prepare_typed("SELECT $1::bigint, $2", &[Type::INT8, Type::TEXT])
            .await
            .unwrap();
        let row = c
            .query_one(&stmt, &[&None::<i64>, &Some("x")])
            .await
            .unwrap();
        assert_eq!(row.get::<_, Option<i64>>(0), None);
        assert_eq!(row.get::<_, Option<&str>>(1), Some("x"));
        // DML through Execute reports its row count.
        let n = c
            .execute("UPDATE t SET note = $1 WHERE id > $2", &[&"late", &990i32])
            .await
            .unwrap();
        assert_eq!(n, 10);
        let n = c
            .execute("INSERT INTO t (id, note) VALUES ($1, $2)", &[&2000i32, &"x"])
            .await
            .unwrap();
        assert_eq!(n, 1);
    });
}

fn binary_formats_are_postgresqls(method: IoMethod) {
    let served = serve(method, &[]);
    runtime().block_on(async {
        let c = served.connect().await;
        let row = c
            .query_one(
                "SELECT '2000-01-02'::date, '2000-01-01 00:00:01.5'::timestamp, 12345.678::numeric, 'ab'::char(3), -0.5::numeric",
                &[],
            )
            .await
            .unwrap();
        // date_send: days since 2000-01-01; timestamp_send: microseconds.
        assert_eq!(row.get::<_, Raw>(0).0, 1i32.to_be_bytes());
        assert_eq!(row.get::<_, Raw>(1).0, 1_500_000i64.to_be_bytes());
        // numeric_send(12345.678): 3 digits, weight 1, sign +, dscale 3.
        assert_eq!(
            row.get::<_, Raw>(2).0,
            [0, 3, 0, 1, 0, 0, 0, 3, 0, 1, 0x09, 0x29, 0x1a, 0x7c]
        );
        assert_eq!(row.get::<_, &str>(3), "ab ");
        // numeric_send(-0.5): 1 digit 5000, weight -1, sign -, dscale 1.
        assert_eq!(
            row.get::<_, Raw>(4).0,
            [0, 1, 0xff, 0xff, 0x40, 0, 0, 1, 0x13, 0x88]
        );
        let types: Vec<Type> = row.columns().iter().map(|c| c.type_().clone()).collect();
        assert_eq!(
            types,
            [Type::DATE, Type::TIMESTAMP, Type::NUMERIC, Type::BPCHAR, Type::NUMERIC]
        );
    });
}

fn errors_carry_sqlstate_and_the_connection_goes_on(method: IoMethod) {
    let served = serve(method, &[]);
    runtime().block_on(async {
        let c = served.connect().await;
        let e = c.simple_query("SELECT * FROM missing").await.unwrap_err();
        assert_eq!(code(&e), &SqlState::UNDEFINED_TABLE);
        let e = c.query("SELEC 1", &[]).await.unwrap_err();
        assert_eq!(code(&e), &SqlState::SYNTAX_ERROR);
        c.batch_execute("CREATE TABLE k (id integer PRIMARY KEY)")
            .await
            .unwrap();
        c.execute("INSERT INTO k VALUES ($1)", &[&1i32])
            .await
            .unwrap();
        let e = c
            .execute("INSERT INTO k VALUES ($1)", &[&1i32])
            .await
            .unwrap_err();
        assert_eq!(code(&e), &SqlState::UNIQUE_VIOLATION);
        // A failed transaction block refuses until ROLLBACK.
        c.batch_execute("BEGIN").await.unwrap();
        let e = c.query("SELECT 1 / 0", &[]).await.unwrap_err();
        assert_eq!(code(&e), &SqlState::DIVISION_BY_ZERO);
        let e = c.query("SELECT 1", &[]).await.unwrap_err();
        assert_eq!(code(&e), &SqlState::IN_FAILED_SQL_TRANSACTION);
        c.batch_execute("ROLLBACK").await.unwrap();
        let one: i32 = c.query_one("SELECT 1", &[]).await.unwrap().get(0);
        assert_eq!(one, 1);
        // A parameter value that is not of its type.
        let stmt = c
            .prepare_typed("SELECT $1::integer", &[Type::TEXT])
            .await
            .unwrap();
        let e = c.query(&stmt, &[&"x"]).await.unwrap_err();
        assert_eq!(code(&e), &SqlState::INVALID_TEXT_REPRESENTATION, "{e}");
        // An empty query (EmptyQueryResponse, which the driver reports
        // as a command of no rows).
        let empty = c.simple_query(" ; ").await.unwrap();
        assert!(
            matches!(empty.as_slice(), [SimpleQueryMessage::CommandComplete(0)]),
            "{}",
            empty.len()
        );
    });
}

fn portals_return_rows_a_limit_at_a_time(method: IoMethod) {
    let served = serve(method, &[]);
    runtime().block_on(async {
        let mut c = served.connect().await;
        let t = c.transaction().await.unwrap();
        let stmt = t
            .prepare("SELECT i FROM generate_series(1, 100) i WHERE i <= $1")
            .await
            .unwrap();
        let portal = t.bind(&stmt, &[&10i32]).await.unwrap();
        let mut seen = Vec::new();
        loop {
            let rows = t.query_portal(&portal, 4).await.unwrap();
            if rows.is_empty() {
                break;
            }
            assert!(rows.len() <= 4);
            seen.extend(rows.iter().map(|r| r.get::<_, i32>(0)));
        }
        assert_eq!(seen, (1..=10).collect::<Vec<_>>());
        t.commit().await.unwrap();
        // Named statements live on until closed.
        let s1 = c.prepare("SELECT $1::integer + 1").await.unwrap();
        let s2 = c.prepare("SELECT $1::text || 'x'").await.unwrap();
        for i in 0..3 {
            let a: i32 = c.query_one(&s1, &[&i]).await.unwrap().get(0);
            let b: String = c.query_one(&s2, &[&"y"]).await.unwrap().get(0);
            assert_eq!((a, b.as_str()), (i + 1, "yx"));
        }
    });
}

fn copy_goes_both_ways(method: IoMethod) {
    let served = serve(method, &[]);
    runtime().block_on(async {
        let c = served.connect().await;
        c.batch_execute("CREATE TABLE c (id integer, note text)")
            .await
            .unwrap();
        let sink = c.copy_in::<_, Bytes>("COPY c FROM STDIN").await.unwrap();
        futures_util::pin_mut!(sink);
        let mut data = String::new();
        for i in 0..20_000 {
            data.push_str(&format!("{i}\tnote {i}\n"));
        }
        for chunk in data.as_bytes().chunks(7000) {
            sink.send(Bytes::copy_from_slice(chunk)).await.unwrap();
        }
        assert_eq!(sink.finish().await.unwrap(), 20_000);
        let out = c.copy_out("COPY c TO STDOUT").await.unwrap();
        let chunks: Vec<Bytes> = out.try_collect().await.unwrap();
        let text: Vec<u8> = chunks.concat();
        assert_eq!(String::from_utf8(text).unwrap(), data);
        // A copy of nothing still opens and closes.
        c.batch_execute("CREATE TABLE e (a integer)").await.unwrap();
        let out = c.copy_out("COPY e TO STDOUT").await.unwrap();
        let chunks: Vec<Bytes> = out.try_collect().await.unwrap();
        assert!(chunks.concat().is_empty());
        // Bad data fails the COPY and loads nothing; the connection goes on.
        let sink = c.copy_in::<_, Bytes>("COPY c FROM STDIN").await.unwrap();
        futures_util::pin_mut!(sink);
        sink.send(Bytes::from_static(b"1\tok\nx\tbad\n"))
            .await
            .unwrap();
        let e = sink.finish().await.unwrap_err();
        assert_eq!(code(&e), &SqlState::INVALID_TEXT_REPRESENTATION, "{e}");
        let n = count(&c, "SELECT count(*) FROM c").await;
        assert_eq!(n, 20_000);
    });
}

for_each_method!(
    queries_run_through_both_protocols,
    binary_formats_are_postgresqls,
    errors_carry_sqlstate_and_the_connection_goes_on,
    portals_return_rows_a_limit_at_a_time,
    copy_goes_both_ways,
);

#[test]
fn unix_socket_and_startup_errors() {
    let served = serve(IoMethod::Worker, &[]);
    runtime().block_on(async {
        let config = format!(
            "host={} port={} user=tester dbname=postgres",
            served.socket_dir().display(),
            served.port()
        );
        let c = connect(&config).await;
        let v: String = c
            .query_one("SHOW server_version", &[])
            .await
            .map(|r| r.get(0))
            .unwrap_or_else(|_| "15".into());
        assert!(!v.is_empty());
        let e = tokio_postgres::connect(
            &format!(
                "host=127.0.0.1 port={} user=tester dbname=nope",
                served.port()
            ),
            NoTls,
        )
        .await
        .err()
        .expect("an unknown database is refused");
        assert_eq!(code(&e), &SqlState::INVALID_CATALOG_NAME);
    });
}

#[test]
fn max_connections_refuses_the_one_too_many() {
    let served = serve(IoMethod::Worker, &["max_connections=3"]);
    runtime().block_on(async {
        let mut clients = Vec::new();
        for _ in 0..3 {
            clients.push(served.connect().await);
        }
        let e = tokio_postgres::connect(&served.tcp_config(), NoTls)
            .await
            .err()
            .expect("a fourth connection is refused");
        assert_eq!(code(&e), &SqlState::TOO_MANY_CONNECTIONS);
        drop(clients.pop());
        // Its slot is free once its thread has ended.
        let mut tries = 0;
        while tokio_postgres::connect(&served.tcp_config(), NoTls)
            .await
            .is_err()
        {
            tries += 1;
            assert!(tries < 100, "the freed slot was never reused");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

#[test]
fn a_hundred_connections_share_the_pool() {
    let served = serve(IoMethod::IoUring, &[]);
    runtime().block_on(async {
        let setup = served.connect().await;
        setup
            .batch_execute(
                "CREATE TABLE h (id integer PRIMARY KEY, who integer);
                 INSERT INTO h SELECT i, 0 FROM generate_series(1, 10000) i",
            )
            .await
            .unwrap();
        let mut tasks = Vec::new();
        for who in 0..100i32 {
            let config = served.tcp_config();
            tasks.push(tokio::spawn(async move {
                let c = connect(&config).await;
                let n = count(&c, "SELECT count(*) FROM h").await;
                c.execute("INSERT INTO h VALUES ($1, $2)", &[&(20_000 + who), &who])
                    .await
                    .unwrap();
                n
            }));
        }
        for t in tasks {
            assert!(t.await.unwrap() >= 10_000);
        }
        let n = count(&setup, "SELECT count(*) FROM h WHERE id > 10000").await;
        assert_eq!(n, 100);
    });
}

#[test]
fn a_client_that_leaves_mid_transaction_or_mid_copy_is_rolled_back() {
    let mut served = serve(IoMethod::Worker, &[]);
    runtime().block_on(async {
        let c = served.connect().await;
        c.batch_execute("CREATE TABLE g (id integer PRIMARY KEY)")
            .await
            .unwrap();
        let leaver = served.connect().await;
        leaver
            .batch_execute("BEGIN; INSERT INTO g VALUES (1)")
            .await
            .unwrap();
        drop(leaver);
        let copier = served.connect().await;
        let mut sink = Box::pin(
            copier
                .copy_in::<_, Bytes>("COPY g FROM STDIN")
                .await
                .unwrap(),
        );
        sink.send(Bytes::from_static(b"2\n3\n")).await.unwrap();
        sink.flush().await.unwrap();
        drop(sink);
        drop(copier);
        // The key 1 is free again once the leaver's session has ended.
        let mut tries = 0;
        loop {
            match c.execute("INSERT INTO g VALUES (1)", &[]).await {
                Ok(_) => break,
                Err(e) => {
                    tries += 1;
                    assert!(tries < 200, "the leaver's row stayed: {e}");
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
            }
        }
        let n = count(&c, "SELECT count(*) FROM g").await;
        assert_eq!(n, 1);
    });
    // Shutdown ends every connection and closes cleanly.
    let path = served.stop();
    let db = Database::open(&path, &[]).unwrap();
    assert!(
        db.recovery().is_none(),
        "a clean shutdown needs no recovery"
    );
}

#[test]
fn a_cancel_request_stops_a_streaming_query() {
    let served = serve(IoMethod::Worker, &[]);
    runtime().block_on(async {
        let c = served.connect().await;
        let rows = c
            .query_raw(
                "SELECT i FROM generate_series(1, 2000000000) i",
                std::iter::empty::<i32>(),
            )
            .await
            .unwrap();
        futures_util::pin_mut!(rows);
        let first = rows.next().await.unwrap().unwrap();
        assert_eq!(first.get::<_, i32>(0), 1);
        c.cancel_token().cancel_query(NoTls).await.unwrap();
        let mut n = 0u64;
        let e = loop {
            match rows.next().await {
                Some(Ok(_)) => n += 1,
                Some(Err(e)) => break e,
                None => panic!("the query ran to its end after {n} rows"),
            }
        };
        assert_eq!(code(&e), &SqlState::QUERY_CANCELED, "{e}");
        let one: i32 = c.query_one("SELECT 1", &[]).await.unwrap().get(0);
        assert_eq!(one, 1);
    });
}

#[test]
fn garbage_on_one_connection_harms_no_other() {
    let served = serve(IoMethod::Worker, &[]);
    let port = served.port();
    runtime().block_on(async {
        let c = served.connect().await;
        c.batch_execute("CREATE TABLE f (a integer); INSERT INTO f VALUES (1)")
            .await
            .unwrap();
        // xorshift: reproducible random bytes without a dependency.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..200 {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let len = (next() % 300) as usize;
            let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            match round % 4 {
                // A valid startup, then garbage messages.
                0 => {
                    let mut startup = Vec::new();
                    let params = b"user\0fuzz\0database\0postgres\0\0";
                    startup.extend_from_slice(&((8 + params.len()) as i32).to_be_bytes());
                    startup.extend_from_slice(&196608i32.to_be_bytes());
                    startup.extend_from_slice(params);
                    startup.extend_from_slice(&bytes);
                    bytes = startup;
                }
                // A huge length word.
                1 => bytes
                    .splice(0..0, [b'Q', 0x7f, 0xff, 0xff, 0xff])
                    .for_each(drop),
                _ => {}
            }
            let _ = s.write_all(&bytes);
            let _ = s.shutdown(std::net::Shutdown::Write);
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink);
        }
        let n = count(&c, "SELECT count(*) FROM f").await;
        assert_eq!(n, 1);
    });
}

#[test]
fn serve_stops_cleanly_on_sigterm() {
    let dir = common::temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_aiostore"))
        .arg("--data-dir")
        .arg(&path)
        .args(["-c", &format!("port={port}")])
        .args([
            "-c",
            &format!("unix_socket_directories={}", dir.path().display()),
        ])
        .arg("serve")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    runtime().block_on(async {
        let config = format!("host=127.0.0.1 port={port} user=tester dbname=postgres");
        let mut tries = 0;
        let c = loop {
            match tokio_postgres::connect(&config, NoTls).await {
                Ok((c, conn)) => {
                    tokio::spawn(async move {
                        let _ = conn.await;
                    });
                    break c;
                }
                Err(e) => {
                    tries += 1;
                    assert!(tries < 200, "the server never listened: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        c.batch_execute(
            "CREATE TABLE s (a integer); INSERT INTO s VALUES (7); BEGIN; INSERT INTO s VALUES (8)",
        )
        .await
        .unwrap();
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
            rustix::process::Signal::TERM,
        )
        .unwrap();
    });
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success(), "{status}: {stderr}");
    assert!(stderr.contains("ready for connections"), "{stderr}");
    let db = Database::open(&path, &[]).unwrap();
    assert!(
        db.recovery().is_none(),
        "a clean shutdown needs no recovery"
    );
    let mut s = db.session().unwrap();
    assert_eq!(common::ints(&mut s, "SELECT a FROM s"), [7]);
}
