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
