//! Writes the frozen format-version-1 fixtures into `engine/tests/fixtures/v1/`. Run once per
//! format version; the test suite opens them forever after (`tests/it/fixtures.rs`).

use mnemo_engine::{Category, NewMemory, Role, Store, StoreOptions};
use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1");
    if root.exists() {
        return Err(format!(
            "{} exists: fixtures are frozen, never regenerated",
            root.display()
        )
        .into());
    }
    let dir = root.join("store");
    let store = Store::open(&dir, StoreOptions::hashing())?;
    let notes = [
        (
            "default",
            "Use cargo nextest for faster parallel test runs",
            Category::ToolUsage,
            vec!["rust", "testing"],
        ),
        (
            "default",
            "The flaky login test was a race on the session cookie",
            Category::BugFix,
            vec!["auth", "flaky"],
        ),
        (
            "default",
            "We chose an append-only log with checkpoints for durability",
            Category::Architecture,
            vec!["storage"],
        ),
        (
            "alice",
            "Alice prefers answers with code examples in Python",
            Category::Other,
            vec!["preference"],
        ),
        (
            "alice",
            "Postgres connection pool exhausted under load; raise max_connections",
            Category::Performance,
            vec!["postgres", "db"],
        ),
        (
            "default",
            "Rotate the API key every ninety days",
            Category::Security,
            vec!["keys"],
        ),
    ];
    let mut ids = Vec::new();
    for (user, text, category, tags) in &notes[..4] {
        ids.push(
            store.store(
                NewMemory::new(*text)
                    .user(*user)
                    .category(*category)
                    .tags(tags.clone()),
            )?,
        );
    }
    store.checkpoint()?;
    for (user, text, category, tags) in &notes[4..] {
        ids.push(
            store.store(
                NewMemory::new(*text)
                    .user(*user)
                    .category(*category)
                    .tags(tags.clone()),
            )?,
        );
    }
    ids.push(
        store.store(
            NewMemory::new("How do I reset my password?")
                .user("alice")
                .message("s-1", Role::User),
        )?,
    );
    store.delete(ids[1])?; // sealed row: tombstone
    store.delete(ids[4])?; // growing row
    ids.push(
        store.store(
            NewMemory::new("Open the settings page and choose reset.")
                .user("alice")
                .message("s-1", Role::Assistant),
        )?,
    );
    let mut tsv = String::new();
    for id in &ids {
        if let Ok(m) = store.get(*id) {
            tsv.push_str(&format!(
                "{}\t{}\t{}\t{}\n",
                m.id,
                m.user_id,
                m.tags.join(","),
                m.content
            ));
        }
    }
    store.close()?;
    std::fs::remove_file(dir.join("LOCK"))?;
    std::fs::write(root.join("expected.tsv"), tsv)?;
    let wal = std::fs::read_dir(&dir)?
        .filter_map(Result::ok)
        .map(|e| e.file_name().into_string().unwrap_or_default())
        .filter(|n| n.starts_with("wal-"))
        .max()
        .ok_or("no log file")?;
    for copy in ["torn", "corrupt"] {
        std::fs::create_dir_all(root.join(copy))?;
        for e in std::fs::read_dir(&dir)? {
            let e = e?;
            std::fs::copy(e.path(), root.join(copy).join(e.file_name()))?;
        }
    }
    let bytes = std::fs::read(dir.join(&wal))?;
    // torn: the last frame loses its final 100 bytes.
    std::fs::write(root.join("torn").join(&wal), &bytes[..bytes.len() - 100])?;
    // corrupt: one bit flipped in the first frame after the header, with valid frames after it.
    let mut bad = bytes.clone();
    bad[32 + 20] ^= 0x04;
    std::fs::write(root.join("corrupt").join(&wal), bad)?;
    eprintln!("wrote {}", root.display());
    Ok(())
}
