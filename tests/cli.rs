//! The `aiostore` command on a data directory: init, refusals, and the
//! utilities' error messages.

mod common;

use std::process::Command;

/// Runs the command on data directory `dir` with extra environment
/// variables; returns success and standard output + standard error.
fn aiostore_env(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_aiostore"))
        .arg("--data-dir")
        .arg(dir)
        .args(args)
        .env_remove("AIOSTORE_DATA")
        .envs(env.iter().copied())
        .output()
        .expect("runs");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// [`aiostore_env`] without extra environment variables.
fn aiostore(dir: &std::path::Path, args: &[&str]) -> (bool, String) {
    aiostore_env(dir, args, &[])
}

#[test]
fn init_creates_a_directory_once_and_the_utilities_name_what_is_wrong() {
    let tmp = common::temp_dir();
    let dir = tmp.path().join("data");
    let (ok, text) = aiostore(&dir, &["prewarm", "t"]);
    assert!(!ok && text.contains("aiostore init"), "{text}");
    let (ok, text) = aiostore(&dir, &["init"]);
    assert!(ok, "{text}");
    let (ok, text) = aiostore(&dir, &["init"]);
    assert!(!ok && text.contains("is not empty"), "{text}");
    let (ok, text) = aiostore(&dir, &["prewarm", "t"]);
    assert!(!ok && text.contains("table \"t\" does not exist"), "{text}");
    let (ok, text) = aiostore(&dir, &["read-blocks", "t", "3-1"]);
    assert!(!ok && text.contains("runs backwards"), "{text}");
    let (ok, text) = aiostore(&dir, &["read-blocks", "t", "1,x"]);
    assert!(!ok && text.contains("\"x\" in the block list"), "{text}");
    // A range far beyond the table is refused by its size, before four
    // billion block numbers are allocated.
    let (ok, text) = aiostore(&dir, &["sql", "CREATE TABLE t (id integer)"]);
    assert!(ok, "{text}");
    let (ok, text) = aiostore(&dir, &["read-blocks", "t", "0-4294967295"]);
    assert!(
        !ok && text.contains(
            "block range 0-4294967295 is beyond the end of relation \"t\", which has 0 blocks"
        ),
        "{text}"
    );
}

/// Runs `aiostore sql text` with `input` on standard input; returns
/// success, standard output and standard error.
fn sql_with_input(dir: &std::path::Path, text: &str, input: &[u8]) -> (bool, String, String) {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_aiostore"))
        .arg("--data-dir")
        .arg(dir)
        .args(["sql", text])
        .env_remove("AIOSTORE_DATA")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn copy_reads_standard_input_and_writes_clean_standard_output() {
    let tmp = common::temp_dir();
    let dir = tmp.path().join("data");
    assert!(aiostore(&dir, &["init"]).0);
    let (ok, out, err) = sql_with_input(
        &dir,
        "CREATE TABLE t (id integer, note text); COPY t FROM STDIN (FORMAT csv, HEADER); VACUUM t",
        b"id,note\n1,\"a,b\"\n2,\n",
    );
    assert!(ok, "{out}{err}");
    assert_eq!(out, "CREATE TABLE\nCOPY 2\nVACUUM\n");
    // Not a terminal: no progress bar, only the vacuum report.
    assert!(
        err.starts_with("INFO: table \"t\"") && !err.contains('\x1b'),
        "{err:?}"
    );
    // The data alone on standard output; its "COPY n" on standard error.
    let (ok, out, err) = sql_with_input(&dir, "COPY t TO STDOUT (FORMAT csv)", b"");
    assert!(ok, "{err}");
    assert_eq!(out, "1,\"a,b\"\n2,\n");
    assert_eq!(err, "COPY 2\n");
    let (ok, out, err) = sql_with_input(&dir, "COPY t FROM STDIN (FORMAT csv)", b"3,c\nx,d\n");
    assert!(!ok && out.is_empty());
    assert_eq!(
        err,
        "ERROR:  COPY t, line 2, column id: invalid input syntax for type integer: \"x\"\n"
    );
}

#[test]
fn large_results_print_in_aligned_groups_and_small_failing_ones_print_only_the_error() {
    let tmp = common::temp_dir();
    let dir = tmp.path().join("data");
    assert!(aiostore(&dir, &["init"]).0);
    // Past the printer's group of 10 000 rows: each group is aligned on
    // its own (the first holds only numbers up to 5 digits wide, like
    // the second), the header comes once and the count at the end.
    let (ok, out, err) = sql_with_input(&dir, "SELECT g FROM generate_series(1, 25000) g", b"");
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[..3], ["   g", "-------", "     1"]);
    assert_eq!(lines.len(), 2 + 25000 + 1);
    assert_eq!(lines.last(), Some(&"(25000 rows)"));
    for (i, line) in lines[2..25002].iter().enumerate() {
        assert_eq!(line.trim_start(), (i + 1).to_string());
    }
    assert_eq!(lines.iter().filter(|l| l.starts_with("---")).count(), 1);
    // CSV prints the same rows, once, with one header line.
    let mut args = vec![
        "sql",
        "--csv",
        "SELECT g, 'x' AS t FROM generate_series(1, 25000) g",
    ];
    let (ok, text) = aiostore(&dir, &args);
    assert!(ok, "{text}");
    let expected: String = std::iter::once("g,t\n".to_string())
        .chain((1..=25000).map(|g| format!("{g},x\n")))
        .collect();
    assert_eq!(text, expected);
    // A statement without columns prints its tag, streamed or not.
    let (ok, out, err) = sql_with_input(&dir, "SELECT FROM generate_series(1, 3)", b"");
    assert!(ok, "{err}");
    assert_eq!(out, "SELECT 3\n");
    // A failure before the first group was printed prints only the error;
    // a later one, the groups before it.
    args[2] = "SELECT 1 / (g - 500) FROM generate_series(1, 25000) g";
    let (ok, text) = aiostore(&dir, &args);
    assert!(!ok);
    assert_eq!(text, "ERROR:  division by zero\n");
    let (ok, out, err) = sql_with_input(
        &dir,
        "SELECT g / (g - 20000) FROM generate_series(1, 25000) g",
        b"",
    );
    assert!(!ok);
    assert_eq!(err, "ERROR:  division by zero\n");
    let printed = out.lines().count();
    assert!(
        (2 + 10_000..2 + 20_000).contains(&printed),
        "{printed} lines before the error"
    );
}

#[test]
fn quick_demo_prints_a_table_verdicts_and_a_chart_and_reuses_a_kept_directory() {
    let tmp = common::temp_dir();
    let dir = tmp.path().join("demo");
    let chart = tmp.path().join("demo.svg");
    let quick_demo = |extra: &[&str]| {
        let dir = dir.to_str().expect("UTF-8 path");
        let args = [&["demo", "--quick", "--dir", dir][..], extra].concat();
        aiostore(&tmp.path().join("unused-data"), &args)
    };
    let (ok, text) = quick_demo(&[]);
    assert!(ok, "{text}");
    assert!(
        text.contains(&format!("aiostore demo in \"{}\"", dir.display())),
        "{text}"
    );
    assert!(text.contains("every run is cold"), "{text}");
    // The rows carry their verdict's name ("combining", not "seqscan").
    for row in [
        "combining ",
        "prewarm ",
        "repeated blocks ",
        "look-ahead ",
        "index 1 row ",
        "ORDER BY LIMIT 1000 ",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(row)),
            "no {row} row: {text}"
        );
    }
    // Cold is checked, not claimed: every count(*) and prewarm row read the
    // whole table from disk.
    let cold = text
        .lines()
        .find(|l| l.starts_with("cold: "))
        .unwrap_or_else(|| panic!("no cold line: {text}"));
    let words: Vec<&str> = cold.split_whitespace().collect();
    let nblocks: u64 = words[1].parse().expect("a block count");
    assert!(nblocks > 0 && words[3] == words[1], "{cold}");
    let checked_rows: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("combining ") || l.starts_with("prewarm "))
        .collect();
    assert!(!checked_rows.is_empty(), "{text}");
    for row in checked_rows {
        assert!(
            row.split_whitespace().any(|w| w == nblocks.to_string()),
            "{row} does not show {nblocks} reads: {text}"
        );
    }
    // Each combining row compares with its own method's 8 KiB reads.
    for line in text.lines().filter(|l| l.starts_with("combining ")) {
        let method = line.split_whitespace().nth(1).expect("a method");
        assert!(line.ends_with(&format!("{method} 8 KiB reads")), "{line}");
    }
    // Each index experiment reads the table four ways, against the index
    // scan without prefetching, and says what prefetching did.
    for experiment in ["index 1 row ", "index 100 rows ", "ORDER BY LIMIT 1000 "] {
        let rows: Vec<&str> = text.lines().filter(|l| l.starts_with(experiment)).collect();
        assert_eq!(rows.len(), 4, "{experiment}: {text}");
        for (row, variant) in rows.iter().zip([
            "bitmap scan",
            "index scan, no prefetch",
            "index scan, prefetch",
            "seq scan",
        ]) {
            assert!(row.contains(variant), "{row}");
            assert!(row.ends_with(" index scan, no prefetch"), "{row}");
        }
    }
    for verdict in [
        "combining: ",
        "prewarm: ",
        "repeated blocks: ",
        "look-ahead: ",
        "index scans: with prefetching the cold index scan was ",
        "ORDER BY … LIMIT 1000: the index scan was ",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(verdict)),
            "no {verdict} verdict: {text}"
        );
    }
    assert!(
        text.contains(&format!("chart: {}", chart.display())),
        "{text}"
    );
    let svg = std::fs::read_to_string(&chart).expect("the chart was written");
    assert!(
        svg.starts_with("<svg")
            && svg.contains("look-ahead")
            && svg.contains("cold index experiments")
            && svg.contains("index scan, prefetch"),
        "{svg}"
    );
    assert!(text.contains("aiostore bench"), "{text}");
    assert!(
        !dir.exists(),
        "the demo directory is removed without --keep"
    );

    // With --keep it stays, and the next run reuses its tables (and,
    // without --keep, removes it at the end).
    let (ok, text) = quick_demo(&["--keep"]);
    assert!(ok && dir.join("AIOSTORE_VERSION").exists(), "{text}");
    assert!(text.contains("the next run reuses it"), "{text}");
    let (ok, text) = quick_demo(&[]);
    assert!(ok, "{text}");
    assert!(
        text.contains("reusing the demo database an earlier --keep run built"),
        "{text}"
    );
    assert!(!dir.exists(), "removed without --keep: {text}");

    // A non-empty directory the demo did not make is refused, untouched.
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("mine.txt"), "keep me").expect("write");
    let (ok, text) = quick_demo(&[]);
    assert!(
        !ok && text.contains("already exists and is not empty"),
        "{text}"
    );
    assert!(
        dir.join("mine.txt").exists(),
        "a refused run removes nothing"
    );
}

#[test]
fn bench_files_go_in_their_own_directory_removed_unless_kept() {
    let tmp = common::temp_dir();
    let data = tmp.path().join("data");
    let dir = tmp.path().join("bench");
    let dir_arg = dir.to_str().expect("UTF-8 path");
    let bench = [
        "bench",
        "repeated-blocks",
        "--methods",
        "sync",
        "--dir",
        dir_arg,
    ];
    let (ok, text) = aiostore(&data, &bench);
    assert!(ok, "{text}");
    assert!(
        text.contains(&format!("benchmark files in \"{dir_arg}\"")),
        "{text}"
    );
    assert!(!dir.exists(), "removed without --keep: {text}");
    assert!(!data.exists(), "nothing written to the data directory");

    let (ok, text) = aiostore(&data, &[&bench[..], &["--keep"]].concat());
    assert!(ok && dir.join("base").exists(), "{text}");
    // A kept directory is reused, then removed by a run without --keep.
    let (ok, text) = aiostore(&data, &bench);
    assert!(ok && !dir.exists(), "{text}");

    // An empty directory the user made is used and left in place, empty.
    std::fs::create_dir_all(&dir).expect("mkdir");
    let (ok, text) = aiostore(&data, &bench);
    assert!(ok, "{text}");
    assert!(
        text.contains("removed the files in") && dir.exists(),
        "{text}"
    );
    assert_eq!(std::fs::read_dir(&dir).expect("lists").count(), 0, "{text}");
    std::fs::remove_dir(&dir).expect("rmdir");

    // A directory the benchmark did not make is never used (or removed).
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("mine.txt"), "keep me").expect("write");
    let (ok, text) = aiostore(&data, &bench);
    assert!(
        !ok && text.contains("already exists and is not empty"),
        "{text}"
    );
    assert!(dir.join("mine.txt").exists());
}

#[test]
fn verify_file_recognises_a_cluster_without_data_checksums_and_still_flags_one_bad_page() {
    let tmp = common::temp_dir();
    let fixture = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/pg15_heap_3blocks.bin"
    ))
    .expect("fixture");
    // initdb without --data-checksums leaves pd_checksum (bytes 8..10 of
    // each page header) zero.
    let mut unchecksummed = fixture.clone();
    for page in unchecksummed.chunks_exact_mut(8192) {
        page[8..10].copy_from_slice(&[0, 0]);
    }
    let file = tmp.path().join("16384");
    std::fs::write(&file, &unchecksummed).expect("write");
    let path = file.to_str().expect("UTF-8 path");
    let (ok, text) = aiostore(tmp.path(), &["verify-file", path]);
    assert!(ok, "{text}");
    assert!(
        text.contains("no page carries a checksum: the cluster was initialised without data checksums; headers verified only"),
        "{text}"
    );
    assert!(text.contains("pages=3 failures=0"), "{text}");

    // One zeroed checksum among valid ones is damage, not a setting.
    let mut one_bad = fixture;
    one_bad[8192 + 8..8192 + 10].copy_from_slice(&[0, 0]);
    std::fs::write(&file, &one_bad).expect("write");
    let (ok, text) = aiostore(tmp.path(), &["verify-file", path]);
    assert!(!ok && text.contains("block 1: checksum mismatch"), "{text}");
    assert!(!text.contains("no page carries a checksum"), "{text}");
}

#[test]
fn sql_text_may_start_with_a_hyphen() {
    let tmp = common::temp_dir();
    let dir = tmp.path().join("data");
    assert!(aiostore(&dir, &["init"]).0);
    let (ok, text) = aiostore(&dir, &["sql", "-- a comment\nSELECT 41 + 1"]);
    assert!(ok && text.contains("42"), "{text}");
    // Reaches the SQL parser, which refuses it, instead of clap taking
    // "-1 + 2" for an option.
    let (ok, text) = aiostore(&dir, &["sql", "-1 + 2"]);
    assert!(
        !ok && text.contains("ERROR:") && !text.contains("unexpected argument"),
        "{text}"
    );
}

#[test]
fn settings_show_units_sources_descriptions_and_an_io_uring_fallback_with_its_reason() {
    let tmp = common::temp_dir();
    let dir = tmp.path().join("data");
    let (ok, text) = aiostore(&dir, &["-c", "shared_buffers=16MB", "settings"]);
    assert!(ok, "{text}");
    let line = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name}: {text}"))
            .to_string()
    };
    let shared_buffers = line("shared_buffers");
    assert!(
        shared_buffers.contains("16MB")
            && shared_buffers.contains("command line")
            && shared_buffers.contains("Size of the shared buffer pool"),
        "{shared_buffers}"
    );
    assert!(line("io_combine_limit").contains("128kB"), "{text}");

    // Forced unavailability (EPERM): the value in use and why, in the
    // utility and in SQL.
    let eperm = [("AIOSTORE_TEST_IO_URING_SETUP_ERRNO", "1")];
    let (ok, text) = aiostore_env(&dir, &["show", "io_method"], &eperm);
    assert!(ok, "{text}");
    assert!(
        text.contains("io_method = worker")
            && text.contains("fell back to worker: io_uring is not permitted (EPERM)"),
        "{text}"
    );
    assert!(aiostore(&dir, &["init"]).0);
    let (ok, text) = aiostore_env(&dir, &["sql", "SHOW io_method"], &eperm);
    assert!(
        ok && text.contains(" worker") && !text.contains(" io_uring\n"),
        "{text}"
    );
}

#[test]
fn the_shell_prints_an_error_before_its_time_and_prewarm_says_its_pool_ends_with_it() {
    let tmp = common::temp_dir();
    let dir = tmp.path().join("data");
    assert!(aiostore(&dir, &["init"]).0);
    // Both streams into one pipe, to see their order.
    let out = Command::new("sh")
        .arg("-c")
        .arg("printf '\\\\timing\\nSELECT nosuch FROM nothing;\\n' | \"$0\" --data-dir \"$1\" shell 2>&1")
        .arg(env!("CARGO_BIN_EXE_aiostore"))
        .arg(&dir)
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let error = text.find("ERROR:").unwrap_or_else(|| panic!("{text}"));
    let time = text.find("Time:").unwrap_or_else(|| panic!("{text}"));
    assert!(error < time, "the error comes first: {text}");

    assert!(
        aiostore(
            &dir,
            &[
                "sql",
                "CREATE TABLE t (id integer); INSERT INTO t VALUES (1)"
            ]
        )
        .0
    );
    let (ok, text) = aiostore(&dir, &["prewarm", "t"]);
    assert!(
        ok && text.contains("ends with the command") && text.contains("SELECT prewarm('t')"),
        "{text}"
    );
    let (ok, text) = aiostore(&dir, &["read-blocks", "--help"]);
    assert!(ok && !text.contains("--warm"), "{text}");
}

#[test]
fn shared_buffers_the_machine_cannot_give_or_too_small_for_max_sessions_fail_with_the_fix() {
    let tmp = common::temp_dir();
    let dir = tmp.path().join("data");
    assert!(aiostore(&dir, &["init"]).0);
    if std::fs::read_to_string("/proc/sys/vm/overcommit_memory").is_ok_and(|m| m.trim() != "1") {
        // 8 TB: more than any machine we run on, refused by the kernel.
        let (ok, text) = aiostore(&dir, &["-c", "shared_buffers=8192GB", "sql", "SELECT 1"]);
        assert!(!ok, "{text}");
        assert!(
            text.contains("could not allocate shared_buffers = 8388608 MB")
                && text.contains("lower shared_buffers"),
            "{text}"
        );
    }
    let (ok, text) = aiostore(&dir, &["-c", "shared_buffers=64", "sql", "SELECT 1"]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("max_sessions = 64") && text.contains("raise shared_buffers to at least 2MB"),
        "{text}"
    );
    // The smallest pool allowed with the default max_sessions scans a table
    // larger than itself, cold.
    let small = ["-c", "shared_buffers=2MB", "-c", "io_direct=data", "sql"];
    let (ok, text) = aiostore(
        &dir,
        &[&small[..], &["CREATE TABLE t (id integer, note text); INSERT INTO t SELECT i, md5(i::text) FROM generate_series(1, 50000) i"]].concat(),
    );
    assert!(ok, "{text}");
    let (ok, text) = aiostore(&dir, &[&small[..], &["SELECT count(*) FROM t"]].concat());
    assert!(ok && text.contains("50000"), "{text}");
}

#[test]
fn bench_seqscan_takes_the_users_start_up_settings() {
    let tmp = common::temp_dir();
    let bench_dir = tmp.path().join("bench");
    // A 1 MB pool is too small for the default max_sessions (64): the
    // user's max_sessions=4 must reach the benchmark's database.
    let (ok, text) = aiostore(
        &tmp.path().join("data"),
        &[
            "-c",
            "shared_buffers=1MB",
            "-c",
            "max_sessions=4",
            "bench",
            "seqscan",
            "--size-mib",
            "8",
            "--methods",
            "sync",
            "--no-fio",
            "--dir",
            bench_dir.to_str().expect("UTF-8 path"),
        ],
    );
    assert!(ok, "{text}");
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("count ")).collect();
    assert_eq!(rows.len(), 2, "combine 1 and 16: {text}");
}

#[test]
fn benchmarks_and_the_demo_skip_an_unavailable_io_uring_with_the_reason() {
    let tmp = common::temp_dir();
    let data = tmp.path().join("data");
    let eperm = [("AIOSTORE_TEST_IO_URING_SETUP_ERRNO", "1")];
    let bench_dir = tmp.path().join("bench");
    let (ok, text) = aiostore_env(
        &data,
        &[
            "bench",
            "rawio",
            "--size-mib",
            "8",
            "--seconds",
            "0.05",
            "--depths",
            "1",
            "--methods",
            "sync,io_uring",
            "--patterns",
            "random",
            "--no-fio",
            "--dir",
            bench_dir.to_str().expect("UTF-8 path"),
        ],
        &eperm,
    );
    assert!(ok, "{text}");
    assert!(
        text.contains("note: io_uring skipped: io_uring is not permitted (EPERM)"),
        "{text}"
    );
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("random ")).collect();
    assert!(rows.iter().any(|l| l.contains(" sync ")), "{text}");
    assert!(!rows.iter().any(|l| l.contains(" io_uring ")), "{text}");

    let demo_dir = tmp.path().join("demo");
    let (ok, text) = aiostore_env(
        &data,
        &[
            "demo",
            "--quick",
            "--dir",
            demo_dir.to_str().expect("UTF-8 path"),
        ],
        &eperm,
    );
    assert!(ok, "{text}");
    assert!(
        text.contains("io_uring skipped: io_uring is not permitted (EPERM)"),
        "{text}"
    );
    assert!(!text.contains("io_uring, 128 KiB reads"), "{text}");
    assert_eq!(
        text.matches("io_uring skipped").count(),
        1,
        "the demo says it once: {text}"
    );

    // Nothing left to run: an error before any table is built.
    let (ok, text) = aiostore_env(
        &data,
        &[
            "bench",
            "seqscan",
            "--methods",
            "io_uring",
            "--dir",
            bench_dir.to_str().expect("UTF-8 path"),
        ],
        &eperm,
    );
    assert!(!ok, "{text}");
    assert!(
        text.contains("no I/O method left to run")
            && text.contains("io_uring is not permitted (EPERM)")
            && !text.contains("preparing table"),
        "{text}"
    );
}

/// `bench recovery` builds one crashed directory and replays copies of it
/// with recovery_prefetch off and on, per method: the same records each
/// time, pages read from disk, and the ratio on the case with prefetching.
#[test]
fn bench_recovery_replays_one_crash_with_prefetching_off_and_on() {
    let tmp = common::temp_dir();
    let bench_dir = tmp.path().join("bench");
    let (ok, text) = aiostore(
        &tmp.path().join("data"),
        &[
            "bench",
            "recovery",
            "--shared-buffers-mib",
            "2",
            "--table-mib",
            "8",
            "--wal-mib",
            "12",
            "--latency-us",
            "0",
            "--methods",
            "sync,worker",
            "--json",
            "--dir",
            bench_dir.to_str().expect("UTF-8 path"),
        ],
    );
    assert!(ok, "{text}");
    assert!(text.contains("io_direct=data (cold"), "{text}");
    let cases: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    assert_eq!(cases.len(), 4, "{text}");
    for pair in cases.chunks(2) {
        let (off, on) = (&pair[0], &pair[1]);
        assert_eq!(off["prefetch"], false, "{text}");
        assert_eq!(on["prefetch"], true, "{text}");
        assert_eq!(off["records"], on["records"], "{text}");
        assert!(off["pages_read"].as_u64().unwrap() > 0, "{text}");
        assert!(on["prefetched"].as_u64().unwrap() > 0, "{text}");
        // The speedup is the off case's seconds over the on case's.
        let speedup = off["seconds"].as_f64().unwrap() / on["seconds"].as_f64().unwrap();
        let ratio = on["ratio"].as_f64().unwrap();
        assert!(
            (ratio - speedup).abs() <= 1e-9 * speedup,
            "{ratio} {speedup}: {text}"
        );
        assert!(off["ratio"].is_null(), "{text}");
    }
}

#[test]
fn bench_commit_runs_every_case_each_round_and_compares_medians() {
    let tmp = common::temp_dir();
    let bench_dir = tmp.path().join("bench");
    let (ok, text) = aiostore(
        &tmp.path().join("data"),
        &[
            "bench",
            "--dir",
            bench_dir.to_str().expect("UTF-8 path"),
            "commit",
            "--sessions",
            "1,2",
            "--seconds",
            "0.2",
            "--latency-us",
            "0",
            "--rounds",
            "2",
            "--method",
            "sync",
        ],
    );
    assert!(ok, "{text}");
    // Buffered WAL at concurrency 1, direct at 1 and 8, each at 1 and 2
    // sessions: six cases, twice.
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    assert_eq!(rows.len(), 12, "{text}");
    // The same cases in the same order each round.
    let case = |row: &str| row.split_whitespace().take(4).collect::<Vec<_>>().join(" ");
    for (a, b) in rows[..6].iter().zip(&rows[6..]) {
        assert_eq!(case(a), case(b), "{text}");
    }
    for row in &rows {
        let commits: f64 = row
            .split_whitespace()
            .nth(4)
            .expect("a rate")
            .parse()
            .expect("a number");
        assert!(commits > 0.0, "every case commits: {text}");
    }
    assert!(
        text.contains("wal_io_concurrency=8 = ") && text.contains("(medians of 2 rounds)"),
        "{text}"
    );
    let (ok, text) = aiostore(
        &tmp.path().join("data"),
        &[
            "bench",
            "--dir",
            bench_dir.to_str().expect("UTF-8 path"),
            "commit",
            "--rounds",
            "0",
        ],
    );
    assert!(!ok && text.contains("--rounds of at least 1"), "{text}");
}

/// `bench copy-checkpoint` at a tiny size, buffered and direct: every
/// configuration loads, checkpoints what the load left dirty and vacuums a
/// table whose every page it dirties; the targets judged from those, or
/// said to be unmeasured; bad options and a run the disk cannot hold
/// refused before anything is written.
#[test]
fn bench_copy_checkpoint_loads_checkpoints_and_vacuums_each_configuration() {
    let tmp = common::temp_dir();
    let bench_dir = tmp.path().join("bench");
    let dir_arg = bench_dir.to_str().expect("UTF-8 path");
    let args = |extra: &[&'static str]| -> Vec<&str> {
        let mut args = vec!["bench", "--dir", dir_arg, "copy-checkpoint", "--no-fio"];
        args.extend_from_slice(extra);
        args
    };
    let (ok, text) = aiostore(
        &tmp.path().join("data"),
        &args(&[
            "--sessions",
            "2",
            "--seconds",
            "0.3",
            "--csv-mib",
            "1",
            "--vacuum-mib",
            "2",
            "--shared-buffers-mib",
            "64",
            "--methods",
            "worker",
            "--json",
        ]),
    );
    assert!(ok, "{text}");
    let objects: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    let cases: Vec<&serde_json::Value> =
        objects.iter().filter(|o| o["case"] == "aiostore").collect();
    assert_eq!(cases.len(), 2, "{text}");
    assert_eq!(cases[0]["io_direct"], "off", "{text}");
    assert_eq!(cases[1]["io_direct"], "data", "{text}");
    for c in &cases {
        let copies = c["copies"].as_u64().unwrap();
        assert!(copies >= 2, "each session COPYs at least once: {text}");
        let tps = c["tps"].as_f64().unwrap();
        let seconds = c["seconds"].as_f64().unwrap();
        assert!((tps * seconds - copies as f64).abs() < 1e-6, "{text}");
        assert_eq!(c["checkpoint_during_load"], false, "{text}");
        assert!(c["checkpoint_mib"].as_f64().unwrap() > 0.0, "{text}");
        // The checkpointer's own report of the write phase, within the
        // statement's time.
        let write_s = c["checkpoint_write_seconds"].as_f64().unwrap();
        assert!(write_s > 0.0, "{text}");
        assert!(
            write_s <= c["checkpoint_seconds"].as_f64().unwrap(),
            "{text}"
        );
        assert!(
            c["fio_after_checkpoint"].is_null() && c["fio_allocated_after_checkpoint"].is_null(),
            "--no-fio: {text}"
        );
        let v = &c["vacuum"];
        let rows = v["rows"].as_u64().unwrap();
        // Every other row of each copy of the CSV.
        let deleted = v["rows_deleted"].as_u64().unwrap();
        assert!(deleted * 2 <= rows && deleted * 2 + 10 >= rows, "{text}");
        assert_eq!(v["dead_rows_removed"], v["rows_deleted"], "{text}");
        assert!(
            v["blocks_written"].as_u64().unwrap() >= v["table_blocks_after"].as_u64().unwrap(),
            "the VACUUM dirtied every page: {text}"
        );
        assert!(v["table_mib"].as_f64().unwrap() >= 2.0, "{text}");
    }
    let verdicts: Vec<&serde_json::Value> =
        objects.iter().filter(|o| o["case"] == "verdict").collect();
    assert_eq!(verdicts.len(), 4, "{text}");
    // fio and PostgreSQL did not run; direct and buffered both did, on an
    // asynchronous method (sync is not judged).
    assert!(
        verdicts[0]["met"].is_null() && verdicts[3]["met"].is_null(),
        "{text}"
    );
    assert!(
        verdicts[0]["why"]
            .as_str()
            .is_some_and(|why| why.contains("did not run")),
        "{text}"
    );
    assert!(
        verdicts[1]["met"].is_boolean() && verdicts[2]["met"].is_boolean(),
        "{text}"
    );
    assert!(!bench_dir.exists(), "removed without --keep: {text}");

    let (ok, text) = aiostore(&tmp.path().join("data"), &args(&["--io-direct", "wal"]));
    assert!(
        !ok && text.contains("unknown value \"wal\" for --io-direct"),
        "{text}"
    );
    let (ok, text) = aiostore(&tmp.path().join("data"), &args(&["--sessions", "0"]));
    assert!(!ok && text.contains("--sessions from 1"), "{text}");
    let (ok, text) = aiostore(
        &tmp.path().join("data"),
        &args(&["--csv-mib", "1000000", "--shared-buffers-mib", "64"]),
    );
    assert!(
        !ok && text.contains("GiB free in") && text.contains("lower --seconds"),
        "{text}"
    );
    assert!(!bench_dir.exists(), "{text}");
}

/// `bench indexscan` at a tiny size: every case's scans appear as JSON
/// cells with the fields, all scans of a case return the same
/// answer (the count the data set gives), the cold runs read the heap, and
/// a bad choice is refused before anything is built.
#[test]
fn bench_indexscan_reports_every_cell_and_its_scans_agree() {
    let tmp = common::temp_dir();
    let bench_dir = tmp.path().join("bench");
    let dir_arg = bench_dir.to_str().expect("UTF-8 path");
    let args = |extra: &[&'static str]| -> Vec<&str> {
        let mut args = vec!["bench", "--dir", dir_arg, "indexscan", "--rows", "15000"];
        args.extend_from_slice(extra);
        args
    };
    let (ok, text) = aiostore(
        &tmp.path().join("data"),
        &args(&[
            "--datasets",
            "random,cyclic",
            "--matching",
            "1,100",
            "--latency-us",
            "0,100",
            "--runs",
            "1",
            "--json",
        ]),
    );
    assert!(ok, "{text}");
    let objects: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    let cells: Vec<&serde_json::Value> = objects.iter().filter(|o| o["case"] == "cell").collect();
    for dataset in ["random", "cyclic"] {
        for matches in [1u64, 100] {
            for query in ["point", "order"] {
                for latency in [0u64, 100] {
                    let case: Vec<&&serde_json::Value> = cells
                        .iter()
                        .filter(|c| {
                            c["dataset"] == dataset
                                && c["matches"] == matches
                                && c["query"] == query
                                && c["latency_us"] == latency
                        })
                        .collect();
                    let scans: Vec<String> = case
                        .iter()
                        .map(|c| format!("{}/{}", c["scan"], c["prefetch"]))
                        .collect();
                    // The sequential scan runs at the largest count and
                    // no added latency only.
                    let seq = matches == 100 && latency == 0;
                    let mut want = vec!["\"bitmap\"/null", "\"index\"/true", "\"index\"/false"];
                    if seq {
                        want.push("\"seq\"/null");
                    }
                    assert_eq!(scans, want, "{dataset} {matches} {query} {latency}: {text}");
                    for c in &case {
                        for field in ["ms", "heap_reads", "heap_hits", "ios"] {
                            assert!(c[field].is_number(), "{field} of {c}");
                        }
                        assert!(c["ms"].as_f64().unwrap() > 0.0, "{c}");
                        // The same answer from every scan.
                        assert_eq!(c["result"], case[0]["result"], "{text}");
                    }
                    let result = case[0]["result"].as_str().expect("count|sum");
                    let count: u64 = result.split('|').next().unwrap().parse().expect("a count");
                    // Cyclic values match exactly m rows, and LIMIT m
                    // takes m; the random set's counts vary about m.
                    if dataset == "cyclic" || query == "order" {
                        assert_eq!(count, matches, "{result}");
                    } else {
                        assert!(count > 0 && count <= 2 * matches, "{result}");
                    }
                    // Cold: the bitmap heap scan read its pages from disk,
                    // the sequential scan every page.
                    let reads = |scan: &str| {
                        case.iter()
                            .find(|c| c["scan"] == scan)
                            .map(|c| c["heap_reads"].as_u64().unwrap())
                    };
                    assert!(reads("bitmap").unwrap() >= 1, "{text}");
                    if seq {
                        assert!(reads("seq").unwrap() > 500, "{text}");
                    }
                }
            }
        }
    }
    assert_eq!(cells.len(), 2 * 2 * 2 * 2 * 3 + 2 * 2, "{text}");
    let verdicts = objects.iter().filter(|o| o["case"] == "verdict").count();
    assert_eq!(verdicts, 6, "{text}");
    assert!(!bench_dir.exists(), "removed without --keep");

    // A bad choice names the option and the choices, before any build.
    let (ok, text) = aiostore(&tmp.path().join("data"), &args(&["--datasets", "zipf"]));
    assert!(!ok, "{text}");
    assert!(
        text.contains("unknown value \"zipf\" for --datasets; use random, sequential or cyclic"),
        "{text}"
    );
    assert!(
        !bench_dir.exists() && !text.contains("preparing table"),
        "{text}"
    );
    let (ok, text) = aiostore(&tmp.path().join("data"), &args(&["--matching", "10000"]));
    assert!(
        !ok && text
            .contains("--matching 10000: each count must be from 1 to half of --rows (7500)"),
        "{text}"
    );
}

/// `aiostore serve` on `dir`, on a Unix socket in `sockets` alone;
/// returns once it has written the file that tells the CLI where it is.
fn serve_in_background(dir: &std::path::Path, sockets: &std::path::Path) -> std::process::Child {
    let child = Command::new(env!("CARGO_BIN_EXE_aiostore"))
        .arg("--data-dir")
        .arg(dir)
        .args(["-c", "listen_addresses="])
        .args([
            "-c",
            &format!("unix_socket_directories={}", sockets.display()),
        ])
        .args(["-c", "shared_buffers=2048", "serve"])
        .env_remove("AIOSTORE_DATA")
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("runs");
    let file = dir.join(aiostore::server::client::SERVER_FILE);
    let started = std::time::Instant::now();
    while !file.exists() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "the server never wrote {}",
            file.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child
}

#[test]
fn shell_and_sql_beside_a_running_server_go_through_it() {
    use std::io::Write;
    let tmp = common::temp_dir();
    let dir = tmp.path().join("data");
    assert!(aiostore(&dir, &["init"]).0);
    // A socket's path must fit in 108 bytes: a short directory.
    let sockets = tempfile::Builder::new()
        .prefix("cli-sock")
        .tempdir_in("/tmp")
        .unwrap();
    let mut server = serve_in_background(&dir, sockets.path());
    let mut shell = Command::new(env!("CARGO_BIN_EXE_aiostore"))
        .arg("--data-dir")
        .arg(&dir)
        .arg("shell")
        .env_remove("AIOSTORE_DATA")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    shell
        .stdin
        .take()
        .unwrap()
        .write_all(
            b"CREATE TABLE t (id integer,\n  note text);\n\
              INSERT INTO t VALUES (1, 'one'), (2, 'two');\n\
              SELECT id, note FROM t ORDER BY id;\n\
              \\d t\n\
              SELECT nosuch FROM t;\n\
              BEGIN;\nINSERT INTO t VALUES (3, 'three');\nCOMMIT;\n\\q\n",
        )
        .unwrap();
    let out = shell.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("through its server (pid "), "{stdout}");
    assert!(
        stdout.contains("CREATE TABLE") && stdout.contains("INSERT 0 2"),
        "{stdout}"
    );
    assert!(
        stdout.contains(" 1 | one") && stdout.contains(" 2 | two"),
        "{stdout}"
    );
    // `\d t` asks the server's pg_catalog.
    assert!(
        stdout.contains("note") && stdout.contains("integer") && stdout.contains("text"),
        "{stdout}"
    );
    assert!(
        stderr.contains("ERROR:  column \"nosuch\" does not exist"),
        "{stderr}"
    );
    // What the shell did, the server's other sessions see: committed.
    let (ok, out, err) = sql_with_input(&dir, "SELECT count(*) FROM t", b"");
    assert!(ok, "{err}");
    assert!(out.contains(" 3\n"), "{out}");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(server.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    assert!(server.wait().unwrap().success());
    // Stopped, the server leaves the directory to the CLI itself.
    let (ok, text) = aiostore(&dir, &["sql", "SELECT count(*) FROM t"]);
    assert!(ok && text.contains(" 3\n"), "{text}");
}
