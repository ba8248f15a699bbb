"""The embedded API end to end: the wheel's Rust library in this process."""
import threading
from datetime import datetime, timedelta, timezone

import pytest

import amberdb

NOTES = [
    "pytest -x stops the run at the first failing test",
    "The deploy script needs AWS credentials in the environment",
    "Use git bisect to find the commit that introduced a regression",
    "The staging database listens on port 5432",
]


def test_search_by_meaning_with_the_real_model(store_dir):
    # MiniLM: the default embedder, fetched by scripts/fetch-model (CI) or on first use.
    with amberdb.Store(store_dir) as db:
        ids = [db.store(n).memory_id for n in NOTES]
        # No word in common with the note it must find.
        hits = db.search("how can I halt testing after one error?", limit=3)
        assert hits.ids[0] == ids[0], hits
        assert isinstance(hits[0], amberdb.Hit) and 0.0 < hits[0].score <= 1.0
        assert db.search("which commit broke things").ids[0] == ids[2]
        assert len(db.search("anything", limit=10)) == 4


def test_dedup_outcomes_with_the_real_model(store_dir):
    with amberdb.Store(store_dir) as db:
        first = db.store(NOTES[0])
        assert first.outcome == "stored"
        # An exact duplicate is an outcome naming the memory that holds it, never an error.
        exact = db.store(NOTES[0])
        assert exact.outcome == "duplicate" and exact.memory_id == first.memory_id
        # The same words in another case and punctuation merge; other words stay apart.
        near = db.store(NOTES[0].upper() + "!")
        assert near.outcome == "merged"
        assert first.memory_id in near.supersedes
        assert near.decisions[0].relation == "duplicate"
        port = db.store(NOTES[3])
        moved = db.store("The staging database listens on port 6543")
        assert moved.outcome == "superseded" and moved.supersedes == [port.memory_id]
        assert db.search("staging database port", limit=1)[0].content.endswith("6543")
        assert [m.id for m in db.lineage(moved.memory_id)] == [port.memory_id]


def test_typed_results_round_trip(hashing_store):
    db = hashing_store
    db.create_user("ann")
    db.create_agent("helper", user_id="ann")
    stored = db.store("Redis keeps everything in memory", category="architecture",
                      tags=["Redis", "cache"], user_id="ann", agent_id="helper")
    assert isinstance(stored, amberdb.StoreResult)
    assert stored.tags == ["redis", "cache"]  # canonical tags
    m = db.get(stored.memory_id)
    assert isinstance(m, amberdb.Memory)
    assert (m.content, m.user_id, m.agent_id, m.category) == (
        "Redis keeps everything in memory", "ann", "helper", "architecture")
    assert m.created_at.tzinfo is not None
    assert abs(m.created_at - datetime.now(timezone.utc)) < timedelta(minutes=5)
    assert m.access_count >= 1
    assert db.get(stored.memory_id).access_count == m.access_count + 1
    assert [r.id for r in db.recent(user_id="ann")] == [stored.memory_id]
    assert db.recent() == []  # user "default" has none: tenants never cross
    assert list(db.search("Redis", user_id="bob")) == []  # bob stored nothing: tenants never cross
    assert db.tags(user_id="ann") == ["cache", "redis"]
    fb = db.feedback(stored.memory_id, "helpful")
    assert fb.helpful_count == 1
    upd = db.update(stored.memory_id, content="Redis keeps its dataset in memory")
    assert upd.memory_id != stored.memory_id
    with pytest.raises(amberdb.NotFound):
        db.get(10_000)
    db.delete(upd.memory_id)
    with pytest.raises(amberdb.NotFound):
        db.get(upd.memory_id)


def test_users_agents_sessions_and_the_query(hashing_store):
    db = hashing_store
    user = db.create_user("ann", name="Ann")
    assert isinstance(user, amberdb.Entity) and user.id == "ann" and user.name == "Ann"
    db.create_agent("helper", user_id="ann")
    db.create_session("s1", user_id="ann", agent_id="helper")
    assert [s.id for s in db.list_sessions(user_id="ann")] == ["s1"]
    ids = db.add_messages("s1", [{"role": "user", "content": "my cat is called Miso"},
                                 {"role": "assistant", "content": "noted: your cat is Miso"}],
                          user_id="ann")
    assert len(ids) == 2
    q = db.query("what is my cat called", user_id="ann", session_id="s1", store_type="keyword")
    assert q["status"] == "success" and q["data"]["total"] >= 1
    with pytest.raises(amberdb.AlreadyExists):
        db.create_user("ann")
    assert db.delete_user("ann")["deleted_records"] >= 2
    with pytest.raises(amberdb.NotFound):
        db.get_user("ann")


def test_an_error_raises_and_changes_nothing(hashing_store):
    db = hashing_store
    db.store("one note")
    before = db.stats()["store"]
    with pytest.raises(amberdb.InvalidArgument) as bad:
        db.store("x", category=7)
    assert bad.value.field == "category" and isinstance(bad.value, ValueError)
    with pytest.raises(amberdb.LimitExceeded):
        db.store("y" * 10_001)
    with pytest.raises(amberdb.LimitExceeded):
        db.search("note", limit=51)
    with pytest.raises(amberdb.InvalidArgument) as unknown:
        db.search("note", colour="red")
    assert "colour" in str(unknown.value)
    with pytest.raises(amberdb.UnknownCommand) as typo:
        db.call("STOR", content="x")
    assert "STORE_MEMORY" in typo.value.did_you_mean
    with pytest.raises(ValueError):
        db.search("note", created_after=datetime(2026, 1, 1))  # naive: refused before sending
    after = db.stats()["store"]
    assert after["memories"] == before["memories"] == 1
    assert after["last_seq"] == before["last_seq"]


def test_close_and_reopen_keeps_everything(store_dir):
    with amberdb.Store(store_dir, embedder="hashing") as db:
        ids = [db.store(f"note number {i}", tags=[f"t{i % 3}"]).memory_id for i in range(100)]
        db.delete(ids[0])
        snapshot = db.snapshot_create(description="before")
        assert snapshot["snapshot_id"]
    assert db.closed
    with pytest.raises(ValueError, match="closed"):
        db.get(ids[1])
    db.close()  # a second close does nothing
    # Named in the words `embedder=` takes, not the engine's model ids.
    with pytest.raises(ValueError, match='made with embedder="hashing".*leave embedder out'):
        amberdb.Store(store_dir, embedder="minilm", fetch_model=False)
    # A reopen needs no embedder: the store's own is used (MiniLM is never fetched here).
    with amberdb.Store(store_dir, fetch_model=False) as db:
        assert db.stats()["store"]["embedder"].startswith("amberdb-hashing")
        assert db.stats()["store"]["memories"] == 99
        assert db.get(ids[50]).content == "note number 50"
        # The same process opening it again shares it (the embedder it resolved to is the
        # one asked for); another process is refused (test_second_hour.py).
        with amberdb.Store(store_dir, embedder="hashing") as again:
            assert again.get(ids[50]).content == "note number 50"
        assert db.get(ids[50]).content == "note number 50", "still open for the first"
    assert amberdb.check(store_dir)["clean"] is True


def test_threads_share_one_store(hashing_store):
    db = hashing_store
    errors = []

    def writer(n):
        try:
            for i in range(50):
                db.store(f"thread {n} note {i}", user_id=f"u{n}")
                db.search(f"thread {n}", user_id=f"u{n}", mode="text")
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert db.stats()["store"]["memories"] == 200
    assert all(len(db.recent(user_id=f"u{n}", limit=50)) == 50 for n in range(4))


def test_compaction_snapshots_backup_and_check(hashing_store, tmp_path):
    db = hashing_store
    for whose in ("the", "this", "our"):
        db.store(f"the build cache lives in the target directory of {whose} workspace",
                 skip_hooks=["semantic_dedup"])
    preview = db.compact_preview()
    assert [len(g["members"]) for g in preview["groups"]] == [3], preview
    applied = db.compact_apply(preview["preview_id"])
    merged_id = applied["merged"][0][0]
    assert db.stats()["store"]["memories"] == 1
    assert len(db.lineage(merged_id)) == 3
    db.compact_undo(merged_id)
    assert db.stats()["store"]["memories"] == 3
    report = db.backup(tmp_path / "backup")
    assert report["check"]["clean"] is True and report["files"] > 0
    with amberdb.Store(tmp_path / "backup", embedder="hashing") as copy:
        assert copy.stats()["store"]["memories"] == 3
    purged = db.purge()
    assert "removed_bytes" in purged


def test_bad_open_arguments(tmp_path):
    with pytest.raises(ValueError, match="embedder"):
        amberdb.Store(tmp_path / "s", embedder="word2vec")
    with pytest.raises(ValueError, match="memory_limit"):
        amberdb.Store(tmp_path / "s", embedder="hashing", memory_limit=0)
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    with pytest.raises(OSError, match="a-file"):
        amberdb.Store(a_file, embedder="hashing")
    assert a_file.read_text() == "not a directory"
    missing = tmp_path / "no-model"
    with pytest.raises(OSError, match="fetch"):
        amberdb.Store(tmp_path / "s2", model_dir=missing, fetch_model=False)


def test_session_neighbours_and_mend(hashing_store):
    db = hashing_store
    db.create_session("chat")
    ids = db.add_messages("chat", [
        {"role": "user", "content": "What genre is the novel?"},
        {"role": "assistant", "content": "It's a mix of drama and romance!"},
        {"role": "user", "content": "Sounds lovely"},
    ])
    hits = db.search("romance", mode="keyword", neighbours=1)
    turn = next(h for h in hits if h.id == ids[1])
    assert [(n["memory_id"], n["position"]) for n in turn.context] == [(ids[0], -1), (ids[2], 1)]
    assert turn.context[0]["content"] == "What genre is the novel?"
    assert all(h.context == [] for h in db.search("romance", mode="keyword"))
    with pytest.raises(amberdb.LimitExceeded):
        db.search("romance", neighbours=6)

    # Sessions instead of turns: one hit per session, its other turns beside it.
    db.create_session("other")
    other = db.add_messages("other", [{"role": "user", "content": "A romance set in Lisbon"}])
    by_turn = db.search("romance novel genre", mode="keyword", group="records",
                        session_lend=0, date_boost=0)
    by_session = db.search("romance novel genre", mode="keyword", group="session",
                           session_lend=0, date_boost=0)
    assert len(by_session) < len(by_turn)
    chat = next(h for h in by_session if h.session_id == "chat")
    assert {t["memory_id"] for t in chat.session_turns} | {chat.id} <= set(ids)
    assert chat.session_turns, "the chat's other matching turns are listed"
    assert any(h.id == other[0] for h in by_session)
    with pytest.raises(amberdb.InvalidArgument):
        db.search("romance", group="sessions")

    # A looser merge than the default's, then mended: the merged text comes back, and goes
    # again on undo.
    db.store("The nightly backup runs at two in the morning")
    merged = db.store("The nightly backup runs at two in the morning on the db host",
                      merge="paraphrases")
    assert merged.outcome == "merged"
    with pytest.raises(amberdb.InvalidArgument):
        db.store("x", merge="everything")
    preview = db.mend_preview()
    assert len(preview["restore"]) == 1
    mended = db.mend_apply(preview["preview_id"])
    archived, copy = mended["restored"][0]
    assert db.get(copy).content in (
        "The nightly backup runs at two in the morning",
        "The nightly backup runs at two in the morning on the db host",
    )
    assert db.mend_undo(copy)["original"] == archived
    with pytest.raises(amberdb.NotFound):
        db.get(copy)


def test_bge_small_is_named_like_the_other_embedders(store_dir):
    # The second embedder (issue #58 item 2), fetched by scripts/test like MiniLM.
    with amberdb.Store(store_dir, embedder="bge-small") as db:
        db.store("the deploy key rotates every ninety days")
        db.store("lunch is at noon on fridays")
        assert db.stats()["store"]["embedder"] == "BAAI/bge-small-en-v1.5"
        hits = db.search("how often do we change credentials", limit=1)
        assert hits[0].content.startswith("the deploy key")
    with pytest.raises(ValueError, match='made with embedder="bge-small"'):
        amberdb.Store(store_dir, embedder="minilm", fetch_model=False)
    with pytest.raises(ValueError, match="is not one of minilm, bge-small, hashing"):
        amberdb.Store(store_dir, embedder="bge-large")
    with amberdb.Store(store_dir, fetch_model=False) as db:
        assert db.stats()["store"]["memories"] == 2
