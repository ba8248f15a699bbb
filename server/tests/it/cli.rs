//! The binary as the README runs it. The default embedder is MiniLM, fetched by
//! `scripts/fetch-model` (which `scripts/test` runs first).

use std::path::Path;
use std::process::{Command, Output};

fn mnemo(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// The line after the `search "<query>` header: the best hit.
fn best_hit<'a>(out: &'a str, query: &str) -> &'a str {
    out.lines()
        .skip_while(|l| !l.starts_with(&format!("search \"{query}")))
        .nth(1)
        .unwrap_or_else(|| panic!("no hits for {query:?} in {out}"))
}

#[test]
fn demo_stores_reopens_and_finds_by_meaning_with_minilm() {
    let dir = tempfile::tempdir().unwrap();
    let out = stdout(&mnemo(&["demo"], dir.path()));
    assert!(
        out.starts_with("embedder sentence-transformers/all-MiniLM-L6-v2"),
        "{out}"
    );
    assert!(
        out.contains("reopened") && out.contains(": 5 memories"),
        "{out}"
    );
    assert!(
        best_hit(&out, "why was the login").contains("flaky because two tests shared"),
        "{out}"
    );
    // No word in common with "never log the AUTH token": found by meaning.
    assert!(
        best_hit(&out, "keeping credentials secret").contains("AUTH token"),
        "{out}"
    );
    // A second run finds them already stored: nothing duplicated.
    let second = stdout(&mnemo(&["demo"], dir.path()));
    assert_eq!(second.matches("already stored").count(), 5, "{second}");
    assert!(stdout(&mnemo(&["stats"], dir.path())).starts_with("memories 5"));
}

#[test]
fn missing_model_files_name_the_fetch_command_and_the_alternative() {
    let dir = tempfile::tempdir().unwrap();
    let nowhere = dir.path().join("no-model-here");
    let out = mnemo(
        &["demo", "--model-dir", nowhere.to_str().unwrap()],
        &dir.path().join("store"),
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no-model-here")
            && stderr.contains("scripts/fetch-model")
            && stderr.contains("--embedder hashing"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("store").exists(),
        "nothing is created without an embedder"
    );
}

#[test]
fn the_no_model_embedder_is_an_explicit_choice_and_sticks_to_its_store() {
    let dir = tempfile::tempdir().unwrap();
    let out = stdout(&mnemo(&["demo", "--embedder", "hashing"], dir.path()));
    assert!(out.starts_with("embedder mnemo-hashing-v1-384"), "{out}");
    // Reopening it with the default embedder is refused, not silently re-embedded.
    let refused = mnemo(&["stats"], dir.path());
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("created with embedder mnemo-hashing-v1-384"),
        "{stderr}"
    );
    assert!(
        stdout(&mnemo(&["stats", "--embedder", "hashing"], dir.path())).starts_with("memories 5")
    );
}
