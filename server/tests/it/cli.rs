//! The binary as the README runs it.

use std::process::Command;

#[test]
fn demo_stores_reopens_and_finds_by_meaning() {
    let dir = tempfile::tempdir().unwrap();
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_mnemo"))
            .args(["demo", "--dir"])
            .arg(dir.path())
            .output()
            .unwrap()
    };
    let first = run();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let out = String::from_utf8(first.stdout).unwrap();
    assert!(
        out.contains("reopened") && out.contains(": 5 memories"),
        "{out}"
    );
    let flaky = out
        .lines()
        .skip_while(|l| !l.starts_with("search \"why was the login"))
        .nth(1)
        .unwrap();
    assert!(flaky.contains("flaky because two tests shared"), "{out}");
    // A second run finds them already stored: nothing duplicated.
    let second = String::from_utf8(run().stdout).unwrap();
    assert_eq!(second.matches("already stored").count(), 5, "{second}");
    let stats = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(["stats", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        String::from_utf8(stats.stdout)
            .unwrap()
            .starts_with("memories 5")
    );
}
