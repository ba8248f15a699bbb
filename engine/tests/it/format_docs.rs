//! docs/format says what the code writes: the version each file kind is written at and read
//! up to, the newest entry of each version history, the frame types of the log, the kind and
//! role codes of a record, and a frozen fixture for the log's current version. A format change
//! that forgets its doc (or its fixture) fails here (issue #47: the frame-type range had
//! drifted to 1..=12 while the code had 15).

use amberdb::{Kind, Role};
use std::collections::BTreeSet;
use std::path::Path;

fn doc(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/format")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The line of `text` that contains `needle` (exactly one).
fn line_with<'a>(text: &'a str, needle: &str) -> &'a str {
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(needle)).collect();
    assert_eq!(lines.len(), 1, "one line with {needle:?}: {lines:?}");
    lines[0]
}

/// The first entry of the "Version history" list: its version number.
fn newest_history_entry(text: &str) -> u16 {
    let history = text
        .split("## Version history")
        .nth(1)
        .expect("a Version history section");
    let first = history
        .lines()
        .find(|l| l.starts_with("- "))
        .expect("an entry");
    first[2..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a version number in {first:?}"))
}

fn check_versions(name: &str, version: u16) {
    let text = doc(name);
    let header = line_with(&text, "readers accept");
    assert!(
        header.contains(&format!(
            "readers accept 1..={version} (writers write {version})"
        )),
        "{name}: {header:?} (the code writes and reads up to {version})"
    );
    assert_eq!(
        newest_history_entry(&text),
        version,
        "{name}: version history"
    );
}

#[test]
fn the_format_docs_name_the_versions_the_code_writes() {
    check_versions("log.md", amberdb::log::format::VERSION);
    check_versions("checkpoint.md", amberdb::checkpoint::format::VERSION);
    // Every log version has its frozen fixture (tests/it/fixtures.rs opens them all).
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "tests/fixtures/v{}/store",
        amberdb::log::format::VERSION
    ));
    assert!(fixture.is_dir(), "{} missing", fixture.display());
}

#[test]
fn the_log_doc_lists_every_frame_type_the_code_has() {
    use amberdb::log::format::*;
    let code: BTreeSet<u8> = [
        TYPE_STORE,
        TYPE_DELETE,
        TYPE_UPDATE,
        TYPE_TOUCH,
        TYPE_SET_TAGS,
        TYPE_ARCHIVE,
        TYPE_STORE_ARCHIVED,
        TYPE_CANONICAL_TAG,
        TYPE_SNAPSHOT,
        TYPE_BATCH,
        TYPE_ENTITY,
        TYPE_DELETE_ENTITY,
        TYPE_FORGET_ARCHIVED,
        TYPE_REEMBED,
        TYPE_MODEL,
        TYPE_REQUEST,
        TYPE_CLAIM,
        TYPE_SKIP,
    ]
    .into_iter()
    .collect();
    let text = doc("log.md");
    let table = text
        .split("| type | name |")
        .nth(1)
        .expect("the frame type table");
    let documented: BTreeSet<u8> = table
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.split('|')
                .nth(1)
                .and_then(|c| c.trim().parse().ok())
                .unwrap_or_else(|| panic!("a type number in {l:?}"))
        })
        .collect();
    assert_eq!(documented, code, "log.md's frame type table");
    let max = code.iter().max().copied().unwrap_or(0);
    let range = line_with(&text, "type    1..=");
    assert!(
        range.contains(&format!("1..={max} ")),
        "the frame layout says {range:?}; the code has types 1..={max}"
    );
}

#[test]
fn the_record_encoding_names_every_kind_and_role() {
    let text = doc("log.md");
    let kinds = line_with(&text, "kind              u8:");
    for (code, kind) in Kind::ALL.iter().enumerate() {
        assert!(
            kinds.contains(&format!("{code} {}", kind.as_str())),
            "log.md's kind codes {kinds:?} lack {code} {}",
            kind.as_str()
        );
    }
    let roles = line_with(&text, "role              u8:");
    for (i, role) in Role::ALL.iter().enumerate() {
        assert!(
            roles.contains(&format!("{} {}", i + 1, role.as_str())),
            "log.md's role codes {roles:?} lack {} {}",
            i + 1,
            role.as_str()
        );
    }
}
