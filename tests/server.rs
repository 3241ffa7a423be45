//! `aiostore serve` through a real client: the `tokio-postgres` driver,
//! over TCP and the Unix socket, on every I/O method.

mod common;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    _sockets: tempfile::TempDir,
}

impl Served {
    fn port(&self) -> u16 {
        self.handle.as_ref().unwrap().tcp_addresses[0].port()
    }

    fn socket_dir(&self) -> PathBuf {
        let socket = &self.handle.as_ref().unwrap().unix_sockets[0];
        socket.parent().unwrap().to_path_buf()
    }

    /// The Unix socket's path.
    fn socket(&self) -> PathBuf {
        self.handle.as_ref().unwrap().unix_sockets[0].clone()
    }

    fn tcp_config(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=tester password={TESTER_PASSWORD} dbname=postgres",
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

/// The password of role `tester`, which every served database has (a
/// superuser with LOGIN): TCP connections need one.
const TESTER_PASSWORD: &str = "tester-password";

fn serve(method: IoMethod, extra: &[&str]) -> Served {
    serve_prepared(method, extra, |_| {})
}

/// [`serve`], with `prepare` given the data directory before the server
/// starts (to put files in it).
fn serve_prepared(
    method: IoMethod,
    extra: &[&str],
    prepare: impl FnOnce(&std::path::Path),
) -> Served {
    let dir = common::temp_dir();
    let path = dir.path().join("data");
    Database::init(&path).unwrap();
    prepare(&path);
    let sockets = socket_dir();
    let mut settings = vec![
        format!("io_method={}", method.name()),
        "shared_buffers=2048".into(),
        "listen_addresses=localhost".into(),
        "port=0".into(),
        format!("unix_socket_directories={}", sockets.path().display()),
        "max_connections=120".into(),
        "max_sessions=128".into(),
    ];
    settings.extend(extra.iter().map(|s| s.to_string()));
    let db = Database::open(&path, &settings).unwrap();
    let mut s = db.session().unwrap();
    aiostore::sql::execute(
        &mut s,
        &format!("CREATE ROLE tester LOGIN SUPERUSER PASSWORD '{TESTER_PASSWORD}'"),
    )
    .unwrap();
    drop(s);
    let handle = server::start(Arc::clone(&db)).unwrap();
    Served {
        handle: Some(handle),
        db: Some(db),
        path,
        _dir: dir,
        _sockets: sockets,
    }
}

/// A directory for Unix sockets with a short path: a socket's path must
/// fit in 108 bytes, which a deep checkout's target directory may not
/// leave room for.
fn socket_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("aiostore-sock")
        .tempdir_in("/tmp")
        .unwrap()
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

/// A suspended portal is a query partway through its run, not a
/// result: rows past its limit are not computed (a division by zero
/// further on fails the Execute that reaches it, not the first), it reads
/// with the snapshot of its first Execute while the transaction's other
/// statements and other sessions go on (a VACUUM cannot take the rows it
/// still has to return), and two portals of one transaction each go their
/// own way.
fn a_suspended_portal_runs_on_from_where_it_stopped(method: IoMethod) {
    let served = serve(method, &[]);
    runtime().block_on(async {
        let mut c = served.connect().await;
        let other = served.connect().await;
        c.batch_execute(
            "CREATE TABLE p (id integer, pad text);
             INSERT INTO p SELECT i, repeat('x', 300) FROM generate_series(1, 5000) i",
        )
        .await
        .unwrap();
        let t = c.transaction().await.unwrap();
        let failing = t
            .prepare("SELECT i, 100 / (i - 4000) FROM generate_series(1, 5000) i")
            .await
            .unwrap();
        let doomed = t.bind(&failing, &[]).await.unwrap();
        assert_eq!(t.query_portal(&doomed, 3000).await.unwrap().len(), 3000);
        // No sort: the portal's scan reads the table as it is fetched.
        let scan = t.prepare("SELECT id FROM p").await.unwrap();
        let first = t.bind(&scan, &[]).await.unwrap();
        let mut seen: Vec<i32> = Vec::new();
        let rows = t.query_portal(&first, 10).await.unwrap();
        seen.extend(rows.iter().map(|r| r.get::<_, i32>(0)));
        // Another session deletes most rows and vacuums; this one changes
        // the rest. Neither reaches the portal's snapshot.
        other
            .batch_execute("DELETE FROM p WHERE id > 100; VACUUM p")
            .await
            .unwrap();
        t.execute("UPDATE p SET id = -id", &[]).await.unwrap();
        let second = t.bind(&scan, &[]).await.unwrap();
        let mut now: Vec<i32> = t
            .query_portal(&second, 1000)
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        now.sort_unstable();
        assert_eq!(now, (-100..=-1).collect::<Vec<_>>());
        loop {
            let rows = t.query_portal(&first, 777).await.unwrap();
            if rows.is_empty() {
                break;
            }
            seen.extend(rows.iter().map(|r| r.get::<_, i32>(0)));
        }
        assert_eq!(seen, (1..=5000).collect::<Vec<_>>());
        // The doomed portal's next Execute reaches i = 4000 and fails the
        // transaction.
        let e = t.query_portal(&doomed, 3000).await.unwrap_err();
        assert_eq!(code(&e), &SqlState::DIVISION_BY_ZERO, "{e}");
        let e = t.query("SELECT 1", &[]).await.unwrap_err();
        assert_eq!(code(&e), &SqlState::IN_FAILED_SQL_TRANSACTION, "{e}");
        drop((first, second, doomed));
        t.rollback().await.unwrap();
        assert_eq!(count(&c, "SELECT count(*) FROM p").await, 100);
        assert_eq!(served.handle.as_ref().unwrap().panics(), 0);
    });
}

async fn copy_freeze(t: &tokio_postgres::Transaction<'_>) -> Result<u64, tokio_postgres::Error> {
    let data: String = (11..=5000).map(|i| format!("{i}\n")).collect();
    let sink = t
        .copy_in::<_, Bytes>("COPY f FROM STDIN WITH (FREEZE)")
        .await?;
    futures_util::pin_mut!(sink);
    sink.send(Bytes::from(data)).await?;
    sink.finish().await
}

/// A COPY FREEZE while a portal of its transaction is suspended is
/// refused, as PostgreSQL refuses it "because of prior transaction
/// activity": the portal's scan would see the rows frozen after it began.
/// Once the portal is closed the COPY FREEZE goes ahead.
fn a_copy_freeze_waits_for_the_transactions_portals_to_close(method: IoMethod) {
    let served = serve(method, &[]);
    runtime().block_on(async {
        let mut c = served.connect().await;
        c.batch_execute("CREATE TABLE f (id integer)")
            .await
            .unwrap();
        let t = c.transaction().await.unwrap();
        t.batch_execute("TRUNCATE f; INSERT INTO f SELECT i FROM generate_series(1, 10) i")
            .await
            .unwrap();
        let stmt = t.prepare("SELECT id FROM f").await.unwrap();
        let portal = t.bind(&stmt, &[]).await.unwrap();
        assert_eq!(t.query_portal(&portal, 4).await.unwrap().len(), 4);
        let e = copy_freeze(&t).await.unwrap_err();
        assert_eq!(code(&e), &SqlState::INVALID_TRANSACTION_STATE, "{e}");
        t.rollback().await.unwrap();

        let t = c.transaction().await.unwrap();
        t.batch_execute("TRUNCATE f; INSERT INTO f SELECT i FROM generate_series(1, 10) i")
            .await
            .unwrap();
        let portal = t.bind(&stmt, &[]).await.unwrap();
        assert_eq!(t.query_portal(&portal, 4).await.unwrap().len(), 4);
        // Dropping the driver's portal closes it on the server.
        drop(portal);
        assert_eq!(copy_freeze(&t).await.unwrap(), 4990);
        t.commit().await.unwrap();
        assert_eq!(count(&c, "SELECT count(*) FROM f").await, 5000);
    });
}

fn returning_rows_come_back_through_both_protocols(method: IoMethod) {
    let served = serve(method, &[]);
    runtime().block_on(async {
        let mut c = served.connect().await;
        // Simple protocol: a row description, the rows, the change's tag.
        let messages = c
            .simple_query(
                "CREATE TABLE t (id integer PRIMARY KEY, note text);
                 INSERT INTO t SELECT i, 'n' || i FROM generate_series(1, 3) i RETURNING id, note",
            )
            .await
            .unwrap();
        assert_eq!(
            simple_rows(&messages),
            (1..=3)
                .map(|i| vec![Some(i.to_string()), Some(format!("n{i}"))])
                .collect::<Vec<_>>()
        );
        assert!(matches!(
            messages.last(),
            Some(SimpleQueryMessage::CommandComplete(3))
        ));
        // Extended protocol, binary results, a statement described with
        // its columns and run many times (its plan kept).
        let stmt = c
            .prepare("INSERT INTO t VALUES ($1, $2) RETURNING id * 10 AS tens, upper(note)")
            .await
            .unwrap();
        let described: Vec<&str> = stmt.columns().iter().map(|c| c.name()).collect();
        assert_eq!(described, ["tens", "upper"]);
        for id in 10..20 {
            let row = c.query_one(&stmt, &[&id, &"x"]).await.unwrap();
            assert_eq!(
                (row.get::<_, i32>(0), row.get::<_, &str>(1)),
                (id * 10, "X")
            );
        }
        // Execute of a change with RETURNING still reports its count.
        let n = c
            .execute(
                "UPDATE t SET note = 'u' WHERE id >= $1 RETURNING id",
                &[&15i32],
            )
            .await
            .unwrap();
        assert_eq!(n, 5);
        // A portal hands out a change's rows a limit at a time; the change
        // itself ran whole at the first Execute.
        let t = c.transaction().await.unwrap();
        let stmt = t
            .prepare("DELETE FROM t WHERE id >= $1 RETURNING id")
            .await
            .unwrap();
        let portal = t.bind(&stmt, &[&10i32]).await.unwrap();
        let first = t.query_portal(&portal, 4).await.unwrap();
        assert_eq!(first.len(), 4);
        let left: i64 = t
            .query_one("SELECT count(*) FROM t", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(left, 3, "every row was deleted at the first Execute");
        let mut seen: Vec<i32> = first.iter().map(|r| r.get(0)).collect();
        loop {
            let rows = t.query_portal(&portal, 4).await.unwrap();
            if rows.is_empty() {
                break;
            }
            seen.extend(rows.iter().map(|r| r.get::<_, i32>(0)));
        }
        seen.sort_unstable();
        assert_eq!(seen, (10..20).collect::<Vec<_>>());
        t.commit().await.unwrap();
    });
}

for_each_method!(
    queries_run_through_both_protocols,
    returning_rows_come_back_through_both_protocols,
    binary_formats_are_postgresqls,
    errors_carry_sqlstate_and_the_connection_goes_on,
    portals_return_rows_a_limit_at_a_time,
    copy_goes_both_ways,
    a_suspended_portal_runs_on_from_where_it_stopped,
    a_copy_freeze_waits_for_the_transactions_portals_to_close,
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
        let one: i32 = c.query_one("SELECT 1", &[]).await.unwrap().get(0);
        assert_eq!(one, 1);
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

/// Sends a cancel request for `c`'s running statement after `delay`.
fn cancel_after(c: &Client, delay: Duration) -> tokio::task::JoinHandle<()> {
    let token = c.cancel_token();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        token.cancel_query(NoTls).await.unwrap();
    })
}

#[test]
fn a_cancel_request_stops_a_query_before_its_first_row_and_a_wait() {
    let served = serve(IoMethod::Worker, &[]);
    runtime().block_on(async {
        let c = served.connect().await;
        // Only a bound on the test, if the cancel went astray.
        c.batch_execute("SET statement_timeout = 30000")
            .await
            .unwrap();
        let canceler = cancel_after(&c, Duration::from_millis(300));
        // An aggregate: no row until the end, so only the executor's own
        // check can stop it.
        let e = c
            .query_one("SELECT count(*) FROM generate_series(1, 2000000000) i", &[])
            .await
            .unwrap_err();
        assert_eq!(code(&e), &SqlState::QUERY_CANCELED, "{e}");
        // The cancel's, not the statement_timeout bounding the test.
        assert!(format!("{e:?}").contains("user request"), "{e:?}");
        canceler.await.unwrap();
        // A statement waiting for another transaction's row.
        c.batch_execute("CREATE TABLE w (a integer); INSERT INTO w VALUES (1)")
            .await
            .unwrap();
        let holder = served.connect().await;
        holder
            .batch_execute("BEGIN; UPDATE w SET a = 2")
            .await
            .unwrap();
        let canceler = cancel_after(&c, Duration::from_millis(300));
        let e = c.execute("UPDATE w SET a = 3", &[]).await.unwrap_err();
        assert_eq!(code(&e), &SqlState::QUERY_CANCELED, "{e}");
        assert!(format!("{e:?}").contains("user request"), "{e:?}");
        canceler.await.unwrap();
        holder.batch_execute("COMMIT").await.unwrap();
        assert_eq!(count(&c, "SELECT count(*) FROM w WHERE a = 2").await, 1);
    });
}

#[test]
fn an_idle_transaction_is_ended_after_its_timeout() {
    let served = serve(IoMethod::Worker, &[]);
    runtime().block_on(async {
        let c = served.connect().await;
        c.batch_execute("CREATE TABLE i (a integer PRIMARY KEY)")
            .await
            .unwrap();
        // The idler speaks the raw protocol, to read what the server
        // sends it unasked.
        let mut idler = RawClient::connect(&served.socket(), &startup_bytes("tester"));
        idler.until_ready();
        let answer = idler.query(
            "SET idle_in_transaction_session_timeout = 200; BEGIN; INSERT INTO i VALUES (1)",
        );
        assert!(answer.ends_with('Z'), "{answer}");
        let started = Instant::now();
        let (kind, body) = idler.recv();
        assert_eq!(kind, b'E');
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains("FATAL") && text.contains("25P03"), "{text}");
        assert!(started.elapsed() >= Duration::from_millis(150));
        // Its row went with it, and its key is free (were it not, the
        // insert would fail at the lock timeout rather than hang).
        c.batch_execute("SET lock_timeout = 5000").await.unwrap();
        c.execute("INSERT INTO i VALUES (1)", &[]).await.unwrap();
        // Idle outside a block is no reason to end a connection.
        let patient = served.connect().await;
        patient
            .batch_execute("SET idle_in_transaction_session_timeout = 200")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(count(&patient, "SELECT count(*) FROM i").await, 1);
    });
}

#[test]
fn garbage_on_one_connection_harms_no_other() {
    let served = serve(IoMethod::Worker, &[]);
    let port = served.port();
    let socket = served.socket();
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
            let len = (next() % 300) as usize;
            let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            match round % 6 {
                // A Parse shorter than its fields, and a Bind whose
                // parameter runs past its end, after a valid startup.
                4 | 5 => {
                    let mut m = startup_bytes("tester");
                    if round % 6 == 4 {
                        m.extend_from_slice(b"P\0\0\0\x04");
                    } else {
                        m.extend_from_slice(b"B\0\0\0\x10\0\0\0\0\0\x01\0\0\x7f\xff");
                    }
                    bytes = m;
                }
                // A valid startup, then garbage messages.
                0 => {
                    let mut startup = startup_bytes("tester");
                    startup.extend_from_slice(&bytes);
                    bytes = startup;
                }
                // A huge length word.
                1 => bytes
                    .splice(0..0, [b'Q', 0x7f, 0xff, 0xff, 0xff])
                    .for_each(drop),
                _ => {}
            }
            // A valid startup goes over the Unix socket, where it is
            // trusted, so that what follows reaches the query protocol;
            // over TCP the rest is taken as SASL messages, also fuzzed.
            let mut sink = Vec::new();
            if matches!(round % 6, 0 | 4 | 5) && round % 12 < 6 {
                let mut s = std::os::unix::net::UnixStream::connect(&socket).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let _ = s.write_all(&bytes);
                let _ = s.shutdown(std::net::Shutdown::Write);
                let _ = s.read_to_end(&mut sink);
            } else {
                let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let _ = s.write_all(&bytes);
                let _ = s.shutdown(std::net::Shutdown::Write);
                let _ = s.read_to_end(&mut sink);
            }
        }
        let n = count(&c, "SELECT count(*) FROM f").await;
        assert_eq!(n, 1);
    });
    assert_eq!(served.handle.as_ref().unwrap().panics(), 0);
}

#[test]
fn serve_stops_cleanly_on_sigterm() {
    let dir = common::temp_dir();
    let sockets = socket_dir();
    let path = dir.path().join("data");
    // `aiostore init --pwfile`: the owner's role gets the file's first
    // line as its password, and logs in with it over TCP below.
    let pwfile = dir.path().join("pwfile");
    std::fs::write(&pwfile, "owner-secret\nnot the password\n").unwrap();
    let init = std::process::Command::new(env!("CARGO_BIN_EXE_aiostore"))
        .arg("--data-dir")
        .arg(&path)
        .arg("init")
        .arg("--pwfile")
        .arg(&pwfile)
        .output()
        .unwrap();
    assert!(init.status.success(), "{init:?}");
    let owner = aiostore::catalog::current_role_name();
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
            &format!("unix_socket_directories={}", sockets.path().display()),
        ])
        .arg("serve")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    runtime().block_on(async {
        let config = format!(
            "host=127.0.0.1 port={port} user={owner} password=owner-secret dbname=postgres"
        );
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
        c.batch_execute("CREATE TABLE s (a integer); INSERT INTO s VALUES (7)")
            .await
            .unwrap();
        // Its own text: BEGIN would make a block of the statements
        // before it in the same text (PostgreSQL's implicit transaction).
        c.batch_execute("BEGIN; INSERT INTO s VALUES (8)")
            .await
            .unwrap();
        // The CLI on the directory the server holds goes through the
        // server: its rows, its COPY in and out, its errors.
        let cli = |args: &[&str], input: &str| {
            let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_aiostore"))
                .arg("--data-dir")
                .arg(&path)
                .args(args)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
            let out = child.wait_with_output().unwrap();
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        };
        let (ok, out, err) = cli(
            &[
                "sql",
                "COPY s FROM STDIN; SELECT a, a * 2 AS b FROM s ORDER BY a",
            ],
            "9\n",
        );
        assert!(ok, "{err}");
        assert!(out.contains(" 7 | 14") && out.contains(" 9 | 18"), "{out}");
        let (ok, out, _) = cli(&["sql", "COPY s TO STDOUT"], "");
        assert!(ok);
        assert_eq!(out, "7\n9\n");
        let (ok, _, err) = cli(&["sql", "SELECT * FROM nowhere"], "");
        assert!(!ok);
        assert!(
            err.contains("ERROR:  table \"nowhere\" does not exist"),
            "{err}"
        );
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
    assert_eq!(
        common::ints(&mut s, "SELECT count(*), sum(a) FROM s"),
        [2, 16]
    );
    assert!(
        !path.join(aiostore::server::client::SERVER_FILE).exists(),
        "the server removed its file"
    );
}

/// A startup message for `user` and the database "postgres", protocol 3.0.
fn startup_bytes(user: &str) -> Vec<u8> {
    startup_with_version(user, 3, 0)
}

fn startup_with_version(user: &str, major: u16, minor: u16) -> Vec<u8> {
    let params = format!("user\0{user}\0database\0postgres\0\0");
    let mut m = Vec::new();
    m.extend_from_slice(&((8 + params.len()) as i32).to_be_bytes());
    m.extend_from_slice(&major.to_be_bytes());
    m.extend_from_slice(&minor.to_be_bytes());
    m.extend_from_slice(params.as_bytes());
    m
}

/// A frontend message: type byte, length, body.
fn message(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind];
    m.extend_from_slice(&((4 + body.len()) as i32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// A raw protocol client, for what drivers do not let a test send: the
/// type bytes of the backend messages it gets back, with their bodies.
///
/// It connects over the Unix socket, where roles are trusted: TCP would
/// need the SCRAM exchange first.
struct RawClient {
    stream: std::os::unix::net::UnixStream,
}

impl RawClient {
    fn connect(socket: &std::path::Path, startup: &[u8]) -> RawClient {
        let stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut raw = RawClient { stream };
        raw.send(startup);
        raw
    }

    fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// The next backend message: its type and body.
    fn recv(&mut self) -> (u8, Vec<u8>) {
        let mut head = [0u8; 5];
        self.stream.read_exact(&mut head).unwrap();
        let len = i32::from_be_bytes(head[1..5].try_into().unwrap()) as usize;
        let mut body = vec![0u8; len - 4];
        self.stream.read_exact(&mut body).unwrap();
        (head[0], body)
    }

    /// The types of the messages up to and including the next
    /// ReadyForQuery, as a string ("1 2 T D C Z").
    fn until_ready(&mut self) -> String {
        let mut kinds = Vec::new();
        loop {
            let (kind, _) = self.recv();
            kinds.push((kind as char).to_string());
            if kind == b'Z' {
                return kinds.join(" ");
            }
        }
    }

    /// The first field of the first row `text` returns, as text.
    fn scalar(&mut self, text: &str) -> String {
        self.send(&message(b'Q', format!("{text}\0").as_bytes()));
        let mut first = None;
        loop {
            let (kind, body) = self.recv();
            if kind == b'D' && first.is_none() {
                let len = i32::from_be_bytes(body[2..6].try_into().unwrap()) as usize;
                first = Some(String::from_utf8(body[6..6 + len].to_vec()).unwrap());
            }
            assert_ne!(kind, b'E', "{text}: {}", String::from_utf8_lossy(&body));
            if kind == b'Z' {
                return first.expect("a row");
            }
        }
    }

    fn query(&mut self, text: &str) -> String {
        self.send(&message(b'Q', format!("{text}\0").as_bytes()));
        self.until_ready()
    }
}

/// Parse (unnamed), Bind (unnamed portal, no parameters), Execute with
/// `max_rows`, as a client sends them.
fn parse_bind(text: &str) -> Vec<u8> {
    let mut m = message(b'P', format!("\0{text}\0\0\0").as_bytes());
    m.extend(message(b'B', b"\0\0\0\0\0\0\0\0"));
    m
}

fn execute(max_rows: i32) -> Vec<u8> {
    let mut body = vec![0u8];
    body.extend_from_slice(&max_rows.to_be_bytes());
    message(b'E', &body)
}

/// The messages up to the next ReadyForQuery, each a letter, with its
/// tag for a CommandComplete and its SQLSTATE for an error ("C SELECT 1",
/// "E 34000").
fn tagged(raw: &mut RawClient) -> String {
    let mut seen = Vec::new();
    loop {
        let (kind, body) = raw.recv();
        let text = match kind {
            b'C' => format!("C {}", String::from_utf8_lossy(&body[..body.len() - 1])),
            b'E' => {
                let code = body
                    .split(|&b| b == 0)
                    .find_map(|field| field.strip_prefix(b"C"))
                    .expect("an error has a code");
                format!("E {}", String::from_utf8_lossy(code))
            }
            _ => (kind as char).to_string(),
        };
        seen.push(text);
        if kind == b'Z' {
            return seen.join(" ");
        }
    }
}

fn bind_named(portal: &str, text: &str) -> Vec<u8> {
    let mut m = message(b'P', format!("\0{text}\0\0\0").as_bytes());
    m.extend(message(
        b'B',
        format!("{portal}\0\0\0\0\0\0\0\0").as_bytes(),
    ));
    m
}

fn execute_named(portal: &str, max_rows: i32) -> Vec<u8> {
    let mut body = format!("{portal}\0").into_bytes();
    body.extend_from_slice(&max_rows.to_be_bytes());
    message(b'E', &body)
}

/// Each Execute of a portal answers as PostgreSQL 15's does (each
/// sequence below is what it sent for the same messages): the tag counts
/// the rows of that Execute, a finished query returns no more rows, a
/// change is not run twice, and a portal lives as long as its
/// transaction, closed by COMMIT, ROLLBACK or its client.
#[test]
fn portal_executes_answer_as_postgresqls_do() {
    let served = serve(IoMethod::Worker, &[]);
    let mut raw = RawClient::connect(&served.socket(), &startup_bytes("tester"));
    raw.until_ready();
    raw.query("CREATE TABLE pt (a integer); INSERT INTO pt SELECT i FROM generate_series(1, 5) i");
    // `messages`, then a Sync unless they are a simple Query; what came
    // back.
    let mut exchange = |messages: &[Vec<u8>]| {
        let mut m = messages.concat();
        if m[0] != b'Q' {
            m.extend(message(b'S', b""));
        }
        raw.send(&m);
        tagged(&mut raw)
    };
    let select = bind_named("", "SELECT a FROM pt");
    assert_eq!(
        exchange(&[select, execute(2), execute(2), execute(2), execute(2)]),
        "1 2 D D s D D s D C SELECT 1 C SELECT 0 Z"
    );
    let four = bind_named("", "SELECT a FROM pt WHERE a < 5");
    assert_eq!(
        exchange(&[four, execute(2), execute(2), execute(2)]),
        "1 2 D D s D D s C SELECT 0 Z"
    );
    let update = bind_named("", "UPDATE pt SET a = a WHERE a < 3");
    assert_eq!(
        exchange(&[update, execute(2), execute(2)]),
        "1 2 C UPDATE 2 E 55000 Z"
    );

    // COMMIT ends the portal; so does its client's Close.
    let p = || bind_named("p", "SELECT a FROM pt");
    let query = |text: &str| message(b'Q', format!("{text}\0").as_bytes());
    let (ex, close) = (execute_named("p", 2), message(b'C', b"Pp\0"));
    assert_eq!(exchange(&[query("BEGIN")]), "C BEGIN Z");
    assert_eq!(exchange(&[p(), ex.clone()]), "1 2 D D s Z");
    assert_eq!(exchange(&[query("COMMIT")]), "C COMMIT Z");
    assert_eq!(exchange(std::slice::from_ref(&ex)), "E 34000 Z");
    assert_eq!(exchange(&[query("BEGIN")]), "C BEGIN Z");
    assert_eq!(
        exchange(&[p(), ex.clone(), close, ex.clone()]),
        "1 2 D D s 3 E 34000 Z"
    );
    assert_eq!(exchange(&[query("ROLLBACK")]), "C ROLLBACK Z");

    // In a failed block a suspended portal is refused, as anything but
    // the block's end is; after the ROLLBACK its name is free again.
    assert_eq!(exchange(&[query("BEGIN")]), "C BEGIN Z");
    assert_eq!(exchange(&[p(), ex.clone()]), "1 2 D D s Z");
    assert_eq!(exchange(&[query("SELECT * FROM nowhere")]), "E 42P01 Z");
    assert_eq!(exchange(std::slice::from_ref(&ex)), "E 25P02 Z");
    // The block's end is still taken, through an Execute too.
    let rollback = bind_named("", "ROLLBACK");
    assert_eq!(exchange(&[rollback, execute(0)]), "1 2 C ROLLBACK Z");
    let last = bind_named("p", "SELECT a FROM pt WHERE a > 4");
    assert_eq!(exchange(&[last, ex.clone()]), "1 2 D C SELECT 1 Z");

    // Portals bound before a pipeline's first statement outlive an
    // Execute that opens no transaction.
    let (a, b) = (
        bind_named("a", ""),
        bind_named("b", "SELECT a FROM pt WHERE a = 1"),
    );
    let (run_a, run_b) = (execute_named("a", 0), execute_named("b", 0));
    assert_eq!(exchange(&[a, b, run_a, run_b]), "1 2 1 2 I D C SELECT 1 Z");

    // A table a suspended portal reads cannot be truncated under it; a
    // simple Query takes the unnamed portal's place.
    assert_eq!(exchange(&[query("BEGIN")]), "C BEGIN Z");
    assert_eq!(exchange(&[p(), ex]), "1 2 D D s Z");
    assert_eq!(exchange(&[query("TRUNCATE pt")]), "E 55006 Z");
    assert_eq!(exchange(&[query("ROLLBACK")]), "C ROLLBACK Z");
    assert_eq!(exchange(&[query("BEGIN")]), "C BEGIN Z");
    let unnamed = bind_named("", "SELECT a FROM pt");
    assert_eq!(exchange(&[unnamed, execute(2)]), "1 2 D D s Z");
    assert_eq!(exchange(&[query("SELECT 1")]), "T D C SELECT 1 Z");
    assert_eq!(exchange(&[execute(2)]), "E 34000 Z");
    assert_eq!(exchange(&[query("ROLLBACK")]), "C ROLLBACK Z");

    // An error met partway fails the Execute that meets it.
    let failing = bind_named("", "SELECT 1 / (a - 3) FROM pt");
    assert_eq!(
        exchange(&[failing, execute(2), execute(2), execute(2)]),
        "1 2 D D s E 22012 Z"
    );
    assert_eq!(served.handle.as_ref().unwrap().panics(), 0);
}

#[test]
fn protocol_details_match_postgresql() {
    let served = serve(IoMethod::Worker, &[]);
    let mut raw = RawClient::connect(&served.socket(), &startup_bytes("tester"));
    // AuthenticationOk, ParameterStatus (server_version first: PostgreSQL
    // 15's), …, BackendKeyData, ReadyForQuery.
    assert_eq!(raw.recv().0, b'R');
    let (kind, body) = raw.recv();
    assert_eq!(kind, b'S');
    assert!(body.starts_with(b"server_version\x0015."), "{body:?}");
    let startup = raw.until_ready();
    assert!(startup.ends_with("K Z"), "{startup}");
    raw.query("CREATE TABLE r (a integer)");

    // COPY TO STDOUT ends with CopyDone before its CommandComplete, and
    // before the next statement's results.
    raw.query("INSERT INTO r VALUES (1), (2)");
    assert_eq!(raw.query("COPY r TO STDOUT; SELECT 1"), "H d c C T D C Z");
    // Two COPY FROM STDIN in one query each read their own data.
    raw.send(&message(b'Q', b"COPY r FROM STDIN; COPY r FROM STDIN\0"));
    assert_eq!(raw.recv().0, b'G');
    raw.send(&message(b'd', b"3\n"));
    raw.send(&message(b'c', b""));
    assert_eq!(raw.recv().0, b'C');
    assert_eq!(raw.recv().0, b'G');
    raw.send(&message(b'd', b"4\n"));
    raw.send(&message(b'c', b""));
    assert_eq!(raw.until_ready(), "C Z");
    assert_eq!(raw.scalar("SELECT count(*) FROM r"), "4");

    // A finished portal is not run again: an INSERT's second Execute is
    // refused (and the error rolls back the pipeline's implicit
    // transaction, the first Execute's row with it, as in PostgreSQL), a
    // query's returns nothing more.
    let mut m = parse_bind("INSERT INTO r VALUES (5)");
    m.extend(execute(0));
    m.extend(execute(0));
    m.extend(message(b'S', b""));
    raw.send(&m);
    assert_eq!(raw.until_ready(), "1 2 C E Z");
    assert_eq!(raw.scalar("SELECT count(*) FROM r WHERE a = 5"), "0");
    raw.query("INSERT INTO r VALUES (5)");
    let mut m = parse_bind("SELECT a FROM r WHERE a = 5");
    m.extend(execute(0));
    m.extend(execute(0));
    m.extend(message(b'S', b""));
    raw.send(&m);
    assert_eq!(raw.until_ready(), "1 2 D C C Z");
    // A row limit suspends the portal until its rows run out.
    let mut m = parse_bind("SELECT a FROM r ORDER BY a");
    m.extend(execute(2));
    m.extend(execute(2));
    m.extend(execute(2));
    m.extend(message(b'S', b""));
    raw.send(&m);
    assert_eq!(raw.until_ready(), "1 2 D D s D D s D C Z");

    // An error is sent at once, even when the client flushes instead of
    // syncing.
    let mut m = message(b'P', b"\0SELEC 1\0\0\0");
    m.extend(message(b'H', b""));
    raw.send(&m);
    assert_eq!(raw.recv().0, b'E');
    raw.send(&message(b'S', b""));
    assert_eq!(raw.until_ready(), "Z");

    // $n without parameters is an error, not a NULL.
    let answer = raw.query("UPDATE r SET a = $1");
    assert_eq!(answer, "E Z");
    assert_eq!(raw.scalar("SELECT count(*) FROM r WHERE a IS NULL"), "0");

    // A client asking for protocol 3.2 is told the whole version the
    // server speaks.
    let mut newer = RawClient::connect(&served.socket(), &startup_with_version("tester", 3, 2));
    let (kind, body) = newer.recv();
    assert_eq!(kind, b'v');
    assert_eq!(body[..4], 196608i32.to_be_bytes());
    assert!(newer.until_ready().ends_with('Z'));
    assert_eq!(served.handle.as_ref().unwrap().panics(), 0);
}

#[test]
fn limit_takes_a_parameter() {
    let served = serve(IoMethod::Worker, &[]);
    runtime().block_on(async {
        let c = served.connect().await;
        let rows = c
            .query(
                "SELECT i FROM generate_series(1, 10) i ORDER BY i LIMIT $1 OFFSET $2",
                &[&3i64, &2i64],
            )
            .await
            .unwrap();
        let got: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
        assert_eq!(got, [3, 4, 5]);
        // A parameter the client names as int2 stays int2 in the
        // statement's description.
        let stmt = c
            .prepare_typed("SELECT $1::integer + 1", &[Type::INT2])
            .await
            .unwrap();
        assert_eq!(stmt.params(), [Type::INT2]);
        let n: i32 = c.query_one(&stmt, &[&5i16]).await.unwrap().get(0);
        assert_eq!(n, 6);
    });
}

#[test]
fn a_prepared_statements_kept_plan_follows_its_table() {
    let served = serve(IoMethod::Worker, &[]);
    runtime().block_on(async {
        let c = served.connect().await;
        c.batch_execute(
            "CREATE TABLE k (id integer, v text);
             INSERT INTO k SELECT i, 'v' || i FROM generate_series(1, 500) i",
        )
        .await
        .unwrap();
        let select = c.prepare("SELECT v FROM k WHERE id = $1").await.unwrap();
        let update = c
            .prepare("UPDATE k SET v = $2 WHERE id = $1")
            .await
            .unwrap();
        let v = |rows: Vec<tokio_postgres::Row>| -> Vec<String> {
            rows.iter().map(|r| r.get::<_, String>(0)).collect()
        };
        // Past its first five runs the plan is generic and kept: each run
        // still finds its own value.
        for id in 1..=20i32 {
            assert_eq!(
                v(c.query(&select, &[&id]).await.unwrap()),
                [format!("v{id}")]
            );
        }
        for id in 1..=20i32 {
            let n = c.execute(&update, &[&id, &format!("u{id}")]).await.unwrap();
            assert_eq!(n, 1);
        }
        assert_eq!(v(c.query(&select, &[&7i32]).await.unwrap()), ["u7"]);
        // A new index, then the table dropped and created again by
        // another connection: the same statements read the new table.
        let other = served.connect().await;
        other
            .batch_execute("CREATE INDEX k_id ON k (id)")
            .await
            .unwrap();
        for id in 1..=10i32 {
            assert_eq!(
                v(c.query(&select, &[&id]).await.unwrap()),
                [format!("u{id}")]
            );
        }
        other
            .batch_execute(
                "DROP TABLE k;
                 CREATE TABLE k (v text, id integer PRIMARY KEY);
                 INSERT INTO k VALUES ('new', 3)",
            )
            .await
            .unwrap();
        assert_eq!(v(c.query(&select, &[&3i32]).await.unwrap()), ["new"]);
        assert!(c.query(&select, &[&7i32]).await.unwrap().is_empty());
        let n = c.execute(&update, &[&3i32, &"newer"]).await.unwrap();
        assert_eq!(n, 1);
        assert_eq!(v(c.query(&select, &[&3i32]).await.unwrap()), ["newer"]);
        // Dropped for good: the error of a statement planned now.
        other.batch_execute("DROP TABLE k").await.unwrap();
        let e = c.query(&select, &[&3i32]).await.unwrap_err();
        assert_eq!(code(&e), &SqlState::UNDEFINED_TABLE);
    });
    assert_eq!(served.handle.as_ref().unwrap().panics(), 0);
}

#[test]
fn shutdown_does_not_wait_for_a_client_stuck_in_startup() {
    let mut served = serve(IoMethod::Worker, &[]);
    // Connected, never sending its startup message.
    let _silent = std::net::TcpStream::connect(("127.0.0.1", served.port())).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    served.stop();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "shutdown waited {:?}",
        started.elapsed()
    );
}

/// The error a connection attempt with `config` ends with, and how long
/// it took.
async fn refused(config: String) -> (tokio_postgres::Error, Duration) {
    let started = Instant::now();
    let e = tokio_postgres::connect(&config, NoTls)
        .await
        .err()
        .unwrap_or_else(|| panic!("{config}: connected"));
    (e, started.elapsed())
}

#[test]
fn tcp_logins_need_the_right_password_and_failures_look_alike() {
    let served = serve(IoMethod::Worker, &[]);
    runtime().block_on(async {
        let c = served.connect().await;
        c.batch_execute(
            "CREATE ROLE alice LOGIN PASSWORD 'right';
             CREATE ROLE nologin NOLOGIN PASSWORD 'right';
             CREATE USER nopassword",
        )
        .await
        .unwrap();
        let config = |user: &str, password: &str| {
            format!(
                "host=127.0.0.1 port={} user={user} password={password} dbname=postgres",
                served.port()
            )
        };
        let alice = connect(&config("alice", "right")).await;
        let one: i32 = alice.query_one("SELECT 1", &[]).await.unwrap().get(0);
        assert_eq!(one, 1);
        // Each failure waits out the delay; they run side by side.
        let (wrong, unknown, no_password, no_login) = tokio::join!(
            refused(config("alice", "wrong")),
            refused(config("nobody", "right")),
            refused(config("nopassword", "anything")),
            refused(config("nologin", "right")),
        );
        for ((e, elapsed), user) in [
            (&wrong, "alice"),
            (&unknown, "nobody"),
            (&no_password, "nopassword"),
        ] {
            assert_eq!(code(e), &SqlState::INVALID_PASSWORD, "{user}: {e:?}");
            let db = e.as_db_error().unwrap();
            assert_eq!(
                db.message(),
                format!("password authentication failed for user \"{user}\"")
            );
            assert_eq!(db.severity(), "FATAL");
            assert!(
                *elapsed >= server::AUTH_FAILURE_DELAY,
                "{user}: refused after {elapsed:?}"
            );
        }
        let (e, elapsed) = no_login;
        assert_eq!(code(&e), &SqlState::INVALID_AUTHORIZATION_SPECIFICATION);
        assert_eq!(
            e.as_db_error().unwrap().message(),
            "role \"nologin\" is not permitted to log in"
        );
        assert!(elapsed >= server::AUTH_FAILURE_DELAY, "{elapsed:?}");
        // ALTER ROLE takes effect for the next login; an unknown
        // database is still 3D000, whoever asks.
        c.batch_execute("ALTER ROLE alice PASSWORD 'new'; ALTER ROLE nologin LOGIN")
            .await
            .unwrap();
        let (e, _) = refused(config("alice", "right")).await;
        assert_eq!(code(&e), &SqlState::INVALID_PASSWORD);
        connect(&config("alice", "new")).await;
        connect(&config("nologin", "right")).await;
        let (e, _) = refused(format!(
            "host=127.0.0.1 port={} user=nobody password=x dbname=nope",
            served.port()
        ))
        .await;
        assert_eq!(code(&e), &SqlState::INVALID_CATALOG_NAME);
    });
    assert_eq!(served.handle.as_ref().unwrap().panics(), 0);
}

#[test]
fn the_unix_socket_trusts_existing_roles_unless_told_to_ask() {
    let served = serve(IoMethod::Worker, &[]);
    let owner = aiostore::catalog::current_role_name();
    let socket_config = |user: &str, extra: &str| {
        format!(
            "host={} port={} user={user} dbname=postgres {extra}",
            served.socket_dir().display(),
            served.port()
        )
    };
    runtime().block_on(async {
        // The directory's owner has no password, and needs none here.
        let c = connect(&socket_config(&owner, "")).await;
        c.batch_execute("CREATE ROLE quiet NOLOGIN").await.unwrap();
        let (e, _) = refused(socket_config("nobody", "")).await;
        assert_eq!(code(&e), &SqlState::INVALID_AUTHORIZATION_SPECIFICATION);
        assert_eq!(
            e.as_db_error().unwrap().message(),
            "role \"nobody\" does not exist"
        );
        let (e, _) = refused(socket_config("quiet", "")).await;
        assert_eq!(
            e.as_db_error().unwrap().message(),
            "role \"quiet\" is not permitted to log in"
        );
        // The owner has no password, so over TCP it cannot log in.
        let (e, _) = refused(format!(
            "host=127.0.0.1 port={} user={owner} password=x dbname=postgres",
            served.port()
        ))
        .await;
        assert_eq!(code(&e), &SqlState::INVALID_PASSWORD);
    });
    drop(served);
    let served = serve(
        IoMethod::Worker,
        &["unix_socket_authentication=scram-sha-256"],
    );
    let socket_config = |user: &str, extra: &str| {
        format!(
            "host={} port={} user={user} dbname=postgres {extra}",
            served.socket_dir().display(),
            served.port()
        )
    };
    runtime().block_on(async {
        let (e, _) = refused(socket_config("tester", "password=wrong")).await;
        assert_eq!(code(&e), &SqlState::INVALID_PASSWORD);
        let c = connect(&socket_config(
            "tester",
            &format!("password={TESTER_PASSWORD}"),
        ))
        .await;
        let one: i32 = c.query_one("SELECT 1", &[]).await.unwrap().get(0);
        assert_eq!(one, 1);
    });
}

#[test]
fn psql_logs_in_over_tcp_with_pgpassword() {
    const PSQL: &str = "/usr/lib/postgresql/15/bin/psql";
    if !std::path::Path::new(PSQL).exists() {
        eprintln!("skipped: {PSQL} is not installed (apt-get install postgresql-client-15)");
        return;
    }
    let served = serve(IoMethod::Worker, &[]);
    let psql = |password: &str| {
        std::process::Command::new(PSQL)
            .args([
                "-X",
                "-A",
                "-t",
                "-h",
                "127.0.0.1",
                "-U",
                "tester",
                "-d",
                "postgres",
            ])
            .args(["-p", &served.port().to_string()])
            .args(["-c", "SELECT 40 + 2"])
            .env("PGPASSWORD", password)
            .env("PGCONNECT_TIMEOUT", "10")
            .output()
            .unwrap()
    };
    let ok = psql(TESTER_PASSWORD);
    assert!(ok.status.success(), "{ok:?}");
    assert_eq!(String::from_utf8_lossy(&ok.stdout).trim(), "42");
    let wrong = psql("wrong");
    assert!(!wrong.status.success());
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        stderr.contains("password authentication failed for user \"tester\""),
        "{stderr}"
    );
}

/// A self-signed certificate for `localhost` and 127.0.0.1: its PEM, its
/// key's PEM, and its DER (for a client's trusted roots).
fn self_signed() -> (String, String, Vec<u8>) {
    let made =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    (
        made.cert.pem(),
        made.key_pair.serialize_pem(),
        made.cert.der().to_vec(),
    )
}

/// Writes `cert` and `key` as the data directory's server.crt and
/// server.key (the key readable by its owner alone, as the server wants).
fn write_cert(dir: &std::path::Path, cert: &str, key: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(dir.join("server.crt"), cert).unwrap();
    let key_path = dir.join("server.key");
    std::fs::write(&key_path, key).unwrap();
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// A server with `ssl = on` and a new self-signed certificate; returns
/// it and the certificate's DER.
fn serve_tls(method: IoMethod) -> (Served, Vec<u8>) {
    let (cert, key, der) = self_signed();
    let served = serve_prepared(method, &["ssl=on"], |dir| write_cert(dir, &cert, &key));
    (served, der)
}

/// A TLS connector for tokio-postgres trusting the certificate `der`
/// alone.
fn tls_connector(der: &[u8]) -> tokio_postgres_rustls::MakeRustlsConnect {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(der.to_vec()))
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_postgres_rustls::MakeRustlsConnect::new(config)
}

async fn connect_tls(config: &str, der: &[u8]) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(config, tls_connector(der)).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

#[test]
fn sslmode_require_connects_over_tls_and_logs_in_with_scram() {
    let (served, der) = serve_tls(IoMethod::Worker);
    runtime().block_on(async {
        // The driver can bind channels (tokio-postgres-rustls gives it the
        // certificate's hash) and the server offers SCRAM-SHA-256-PLUS:
        // the default channel_binding=prefer takes it.
        let c = connect_tls(&format!("{} sslmode=require", served.tcp_config()), &der)
            .await
            .unwrap();
        c.batch_execute("CREATE TABLE t (id integer PRIMARY KEY, note text)")
            .await
            .unwrap();
        // Both protocols, and a result longer than a TLS record (16 kB)
        // and than the server's write buffer (64 kB).
        let insert = format!(
            "INSERT INTO t SELECT i, '{}' FROM generate_series(1, $1::integer) AS g(i)",
            "x".repeat(100)
        );
        let inserted = c.execute(insert.as_str(), &[&5000i32]).await.unwrap();
        assert_eq!(inserted, 5000);
        let rows = c
            .query("SELECT id, note FROM t ORDER BY id", &[])
            .await
            .unwrap();
        assert_eq!(rows.len(), 5000);
        assert_eq!(rows[4999].get::<_, i32>(0), 5000);
        assert_eq!(count(&c, "SELECT count(*) FROM t").await, 5000);
        let wrong = connect_tls(
            &format!(
                "host=127.0.0.1 port={} user=tester password=wrong dbname=postgres sslmode=require",
                served.port()
            ),
            &der,
        )
        .await
        .unwrap_err();
        assert_eq!(code(&wrong), &SqlState::INVALID_PASSWORD, "{wrong}");
        // Channel binding demanded: SCRAM-SHA-256-PLUS, bound to the
        // certificate the client saw.
        let bound = connect_tls(
            &format!(
                "{} sslmode=require channel_binding=require",
                served.tcp_config()
            ),
            &der,
        )
        .await
        .unwrap();
        assert_eq!(count(&bound, "SELECT count(*) FROM t").await, 5000);
        // In the clear there is nothing to bind to: refused by the client.
        let clear = connect_tls(
            &format!(
                "{} sslmode=disable channel_binding=require",
                served.tcp_config()
            ),
            &der,
        )
        .await
        .unwrap_err();
        let why = format!("{clear:?}");
        assert!(why.contains("channel binding"), "{why}");
    });
    assert_eq!(served.handle.as_ref().unwrap().panics(), 0);
}

#[test]
fn sslmode_require_against_ssl_off_fails_and_prefer_goes_on_in_the_clear() {
    let served = serve(IoMethod::Worker, &[]);
    let (_, _, der) = self_signed();
    runtime().block_on(async {
        let e = connect_tls(&format!("{} sslmode=require", served.tcp_config()), &der)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("TLS"), "{e}");
        let c = connect_tls(&format!("{} sslmode=prefer", served.tcp_config()), &der)
            .await
            .unwrap();
        let one: i32 = c.query_one("SELECT 1", &[]).await.unwrap().get(0);
        assert_eq!(one, 1);
    });
}

#[test]
fn ssl_requests_are_answered_by_transport_and_cleartext_after_one_is_refused() {
    const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
    let (served, _) = serve_tls(IoMethod::Worker);
    let answer = |mut stream: Box<dyn ReadWrite>, extra: &[u8]| {
        let mut bytes = SSL_REQUEST.to_vec();
        bytes.extend_from_slice(extra);
        stream.write_all(&bytes).unwrap();
        stream.set_timeout(Some(Duration::from_secs(30)));
        let mut reply = Vec::new();
        let _ = stream.read_to_end(&mut reply);
        reply
    };
    let tcp = || -> Box<dyn ReadWrite> {
        Box::new(std::net::TcpStream::connect(("127.0.0.1", served.port())).unwrap())
    };
    // The Unix socket is never encrypted, as in PostgreSQL: 'N', then the
    // client goes on (here it just leaves).
    let unix: Box<dyn ReadWrite> =
        Box::new(std::os::unix::net::UnixStream::connect(served.socket()).unwrap());
    let mut stream = unix;
    stream.write_all(&SSL_REQUEST).unwrap();
    let mut one = [0u8; 1];
    stream.read_exact(&mut one).unwrap();
    assert_eq!(&one, b"N");
    drop(stream);
    // TCP: 'S', then a handshake this client does not start.
    let mut stream = tcp();
    stream.write_all(&SSL_REQUEST).unwrap();
    stream.read_exact(&mut one).unwrap();
    assert_eq!(&one, b"S");
    drop(stream);
    // A startup message sent in the clear right behind the request is
    // refused in the clear (CVE-2021-23214), before any 'S'.
    let reply = answer(tcp(), &startup_bytes("tester"));
    assert_eq!(reply.first(), Some(&b'E'), "{reply:?}");
    assert!(
        String::from_utf8_lossy(&reply).contains("received unencrypted data after SSL request"),
        "{reply:?}"
    );
    assert_eq!(served.handle.as_ref().unwrap().panics(), 0);
}

/// A client socket of either kind.
trait ReadWrite: Read + Write {
    fn set_timeout(&self, timeout: Option<Duration>);
}

impl ReadWrite for std::net::TcpStream {
    fn set_timeout(&self, timeout: Option<Duration>) {
        self.set_read_timeout(timeout).unwrap();
    }
}

impl ReadWrite for std::os::unix::net::UnixStream {
    fn set_timeout(&self, timeout: Option<Duration>) {
        self.set_read_timeout(timeout).unwrap();
    }
}

#[test]
fn ssl_on_without_a_usable_certificate_does_not_start_and_says_why() {
    let start = |prepare: &dyn Fn(&std::path::Path)| -> String {
        let dir = common::temp_dir();
        let path = dir.path().join("data");
        Database::init(&path).unwrap();
        prepare(&path);
        let db = Database::open(
            &path,
            &[
                "io_method=sync".into(),
                "ssl=on".into(),
                "port=0".into(),
                "unix_socket_directories=".into(),
                "max_connections=4".into(),
                "max_sessions=16".into(),
            ],
        )
        .unwrap();
        match server::start(db) {
            Ok(_) => panic!("the server started without a usable certificate"),
            Err(e) => e.to_string(),
        }
    };
    let missing = start(&|_| {});
    assert!(
        missing.contains("server.crt") && missing.contains("ssl = off"),
        "{missing}"
    );
    let (cert, key, _) = self_signed();
    let (_, other_key, _) = self_signed();
    let mismatched = start(&|dir| write_cert(dir, &cert, &other_key));
    assert!(
        mismatched.contains("server.crt") && mismatched.contains("server.key"),
        "{mismatched}"
    );
    let open_key = start(&|dir| {
        use std::os::unix::fs::PermissionsExt;
        write_cert(dir, &cert, &key);
        std::fs::set_permissions(
            dir.join("server.key"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
    });
    assert!(open_key.contains("chmod 600"), "{open_key}");
    let not_pem = start(&|dir| write_cert(dir, "not a certificate", &key));
    assert!(not_pem.contains("no PEM certificate"), "{not_pem}");
}

#[test]
fn psql_connects_with_sslmode_require() {
    const PSQL: &str = "/usr/lib/postgresql/15/bin/psql";
    if !std::path::Path::new(PSQL).exists() {
        eprintln!("skipped: {PSQL} is not installed (apt-get install postgresql-client-15)");
        return;
    }
    let (served, _) = serve_tls(IoMethod::Worker);
    let out = std::process::Command::new(PSQL)
        .args([
            "-X",
            "-A",
            "-t",
            "-h",
            "127.0.0.1",
            "-U",
            "tester",
            "-d",
            "postgres",
        ])
        .args(["-p", &served.port().to_string()])
        .args(["-c", "SELECT 40 + 2"])
        .env("PGPASSWORD", TESTER_PASSWORD)
        .env("PGSSLMODE", "require")
        .env("PGCONNECT_TIMEOUT", "10")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "42");
}

/// The messages up to ReadyForQuery: each one's type, and a NoticeResponse's
/// or ErrorResponse's severity and message's first line ("N WARNING: …").
fn responses(raw: &mut RawClient) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let (kind, body) = raw.recv();
        let mut line = (kind as char).to_string();
        if kind == b'N' || kind == b'E' {
            let field = |tag: u8| {
                let mut rest = &body[..];
                while let [t, tail @ ..] = rest {
                    let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
                    if *t == tag {
                        return String::from_utf8_lossy(&tail[..end]).into_owned();
                    }
                    rest = tail.get(end + 1..).unwrap_or(&[]);
                }
                String::new()
            };
            let text = field(b'M');
            let first = text.lines().next().unwrap_or_default();
            line = format!("{line} {}: {first}", field(b'V'));
        }
        seen.push(line);
        if kind == b'Z' {
            return seen;
        }
    }
}

#[test]
fn a_simple_querys_statements_are_one_implicit_transaction() {
    let served = serve(IoMethod::Worker, &[]);
    runtime().block_on(async {
        let c = served.connect().await;
        let other = served.connect().await;
        c.batch_execute("CREATE TABLE t (id integer PRIMARY KEY, note text)")
            .await
            .unwrap();
        // An error in the third statement rolls back the first two.
        let e = c
            .batch_execute(
                "INSERT INTO t VALUES (1, 'a'); INSERT INTO t VALUES (2, 'b'); \
                 INSERT INTO t VALUES (1, 'again')",
            )
            .await
            .unwrap_err();
        assert_eq!(code(&e), &SqlState::UNIQUE_VIOLATION, "{e}");
        assert_eq!(count(&other, "SELECT count(*) FROM t").await, 0);
        // The statements see each other's rows, and commit together.
        let rows = c
            .simple_query(
                "INSERT INTO t VALUES (1, 'a'); UPDATE t SET note = 'A' WHERE id = 1; \
                 SELECT note FROM t",
            )
            .await
            .unwrap();
        assert_eq!(simple_rows(&rows), [vec![Some("A".to_string())]]);
        assert_eq!(count(&other, "SELECT count(*) FROM t").await, 1);
        // BEGIN inside makes the implicit transaction a block, which
        // stays open after the text, the statement before it included.
        c.batch_execute("INSERT INTO t VALUES (2, 'b'); BEGIN; INSERT INTO t VALUES (3, 'c')")
            .await
            .unwrap();
        assert_eq!(count(&other, "SELECT count(*) FROM t").await, 1);
        c.batch_execute("ROLLBACK").await.unwrap();
        assert_eq!(count(&c, "SELECT count(*) FROM t").await, 1);
        // A failure inside that block fails the block, not more.
        let e = c
            .batch_execute("BEGIN; INSERT INTO t VALUES (4, 'd'); SELECT nosuch FROM t")
            .await
            .unwrap_err();
        assert_eq!(code(&e), &SqlState::UNDEFINED_COLUMN, "{e}");
        let e = c.batch_execute("SELECT 1").await.unwrap_err();
        assert_eq!(code(&e), &SqlState::IN_FAILED_SQL_TRANSACTION, "{e}");
        c.batch_execute("ROLLBACK").await.unwrap();
        // A statement that runs in no block here (CREATE INDEX) commits
        // those before it; the ones after it are another transaction.
        let e = c
            .batch_execute(
                "INSERT INTO t VALUES (5, 'e'); CREATE INDEX ON t (note); \
                 INSERT INTO t VALUES (6, 'f'); INSERT INTO t VALUES (6, 'f')",
            )
            .await
            .unwrap_err();
        assert_eq!(code(&e), &SqlState::UNIQUE_VIOLATION, "{e}");
        let ids: Vec<i32> = c
            .query("SELECT id FROM t ORDER BY id", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(ids, [1, 5]);
        c.batch_execute("SELECT 1; VACUUM t").await.unwrap();
    });
    // COMMIT and ROLLBACK inside end it early, with PostgreSQL's warning;
    // the statements after them are a new implicit transaction.
    let mut raw = RawClient::connect(&served.socket(), &startup_bytes("tester"));
    raw.until_ready();
    let seen = {
        raw.send(&message(
            b'Q',
            b"INSERT INTO t VALUES (7, 'g'); COMMIT; INSERT INTO t VALUES (8, 'h'); \
              INSERT INTO t VALUES (7, 'g')\0",
        ));
        responses(&mut raw)
    };
    assert_eq!(
        seen,
        [
            "C",
            "N WARNING: there is no transaction in progress",
            "C",
            "C",
            "E ERROR: duplicate key value violates unique constraint \"t_pkey\"",
            "Z"
        ]
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>(),
        "{seen:?}"
    );
    raw.send(&message(
        b'Q',
        b"INSERT INTO t VALUES (9, 'i'); ROLLBACK; INSERT INTO t VALUES (10, 'j')\0",
    ));
    let seen = responses(&mut raw);
    assert_eq!(
        seen[1], "N WARNING: there is no transaction in progress",
        "{seen:?}"
    );
    assert_eq!(raw.scalar("SELECT count(*) FROM t"), "4");
    assert_eq!(
        raw.scalar("SELECT count(*) FROM t WHERE id IN (1, 5, 7, 10)"),
        "4"
    );
    assert_eq!(served.handle.as_ref().unwrap().panics(), 0);
}

#[test]
fn the_extended_protocols_statements_up_to_a_sync_are_one_implicit_transaction() {
    let served = serve(IoMethod::Worker, &[]);
    let mut raw = RawClient::connect(&served.socket(), &startup_bytes("tester"));
    raw.until_ready();
    let mut other = RawClient::connect(&served.socket(), &startup_bytes("tester"));
    other.until_ready();
    raw.query("CREATE TABLE p (id integer PRIMARY KEY)");
    let run = |text: &str| {
        let mut m = parse_bind(text);
        m.extend(execute(0));
        m
    };
    // Two Executes and a Flush: nothing is committed before the Sync.
    let mut m = run("INSERT INTO p VALUES (1)");
    m.extend(run("INSERT INTO p VALUES (2)"));
    m.extend(message(b'H', b""));
    raw.send(&m);
    for expected in [b'1', b'2', b'C', b'1', b'2', b'C'] {
        assert_eq!(raw.recv().0, expected);
    }
    assert_eq!(other.scalar("SELECT count(*) FROM p"), "0");
    raw.send(&message(b'S', b""));
    assert_eq!(raw.until_ready(), "Z");
    assert_eq!(other.scalar("SELECT count(*) FROM p"), "2");
    // An error in the third rolls back the first two.
    let mut m = run("INSERT INTO p VALUES (3)");
    m.extend(run("INSERT INTO p VALUES (4)"));
    m.extend(run("INSERT INTO p VALUES (1)"));
    m.extend(run("INSERT INTO p VALUES (5)"));
    m.extend(message(b'S', b""));
    raw.send(&m);
    assert_eq!(raw.until_ready(), "1 2 C 1 2 C 1 2 E Z");
    assert_eq!(other.scalar("SELECT count(*) FROM p"), "2");
    // So does an error outside a statement: a Bind with a bad value.
    let mut m = run("INSERT INTO p VALUES (3)");
    m.extend(message(b'P', b"\0INSERT INTO p VALUES ($1)\0\0\0"));
    m.extend(message(b'B', b"\0\0\0\0\0\x01\0\0\0\x03abc\0\0"));
    m.extend(message(b'S', b""));
    raw.send(&m);
    assert_eq!(raw.until_ready(), "1 2 C 1 E Z");
    assert_eq!(other.scalar("SELECT count(*) FROM p"), "2");
    // BEGIN among them opens a block holding the statement before it;
    // COMMIT ends it.
    let mut m = run("INSERT INTO p VALUES (3)");
    m.extend(run("BEGIN"));
    m.extend(run("INSERT INTO p VALUES (4)"));
    m.extend(message(b'S', b""));
    raw.send(&m);
    assert_eq!(raw.until_ready(), "1 2 C 1 2 C 1 2 C Z");
    assert_eq!(other.scalar("SELECT count(*) FROM p"), "2");
    raw.send(&{
        let mut m = run("COMMIT");
        m.extend(message(b'S', b""));
        m
    });
    assert_eq!(raw.until_ready(), "1 2 C Z");
    assert_eq!(other.scalar("SELECT count(*) FROM p"), "4");
    // COMMIT in a pipeline commits what came before, with a warning.
    let mut m = run("INSERT INTO p VALUES (5)");
    m.extend(run("COMMIT"));
    m.extend(run("INSERT INTO p VALUES (1)"));
    m.extend(message(b'S', b""));
    raw.send(&m);
    assert_eq!(raw.until_ready(), "1 2 C 1 2 N C 1 2 E Z");
    assert_eq!(other.scalar("SELECT count(*) FROM p"), "5");
    assert_eq!(served.handle.as_ref().unwrap().panics(), 0);
}
