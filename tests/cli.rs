//! The `aiostore` command on a data directory: init, refusals, and the
//! utilities' error messages.

mod common;

use std::process::Command;

fn aiostore(dir: &std::path::Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_aiostore"))
        .arg("--data-dir")
        .arg(dir)
        .args(args)
        .env_remove("AIOSTORE_DATA")
        .output()
        .expect("runs");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
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
fn quick_demo_prints_a_table_verdicts_and_a_chart_and_removes_its_directory() {
    let tmp = common::temp_dir();
    let dir = tmp.path().join("demo");
    let chart = tmp.path().join("demo.svg");
    let (ok, text) = aiostore(
        &tmp.path().join("unused-data"),
        &[
            "demo",
            "--quick",
            "--dir",
            dir.to_str().expect("UTF-8 path"),
        ],
    );
    assert!(ok, "{text}");
    assert!(
        text.contains(&format!("aiostore demo in \"{}\"", dir.display())),
        "{text}"
    );
    assert!(text.contains("every run is cold"), "{text}");
    for row in ["seqscan ", "prewarm ", "repeated blocks ", "look-ahead "] {
        assert!(
            text.lines().any(|l| l.starts_with(row)),
            "no {row} row: {text}"
        );
    }
    for verdict in [
        "combining: ",
        "prewarm: ",
        "repeated blocks: ",
        "look-ahead: ",
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
        svg.starts_with("<svg") && svg.contains("look-ahead"),
        "{svg}"
    );
    assert!(text.contains("aiostore bench"), "{text}");
    assert!(
        !dir.exists(),
        "the demo directory is removed without --keep"
    );

    // With --keep it stays; a second run refuses the non-empty directory.
    let (ok, text) = aiostore(
        &tmp.path().join("unused-data"),
        &[
            "demo",
            "--quick",
            "--keep",
            "--dir",
            dir.to_str().expect("UTF-8 path"),
        ],
    );
    assert!(ok && dir.join("AIOSTORE_VERSION").exists(), "{text}");
    let (ok, text) = aiostore(
        &tmp.path().join("unused-data"),
        &[
            "demo",
            "--quick",
            "--dir",
            dir.to_str().expect("UTF-8 path"),
        ],
    );
    assert!(
        !ok && text.contains("already exists and is not empty"),
        "{text}"
    );
    assert!(
        dir.join("AIOSTORE_VERSION").exists(),
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
