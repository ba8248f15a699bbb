"""The second hour of a new agent builder (issue #55), as they meet it: a LangGraph thread
passed whole on every turn, a long LangMem query, a server restarted under both clients, times
as Python writes them, everything out and back in on an open store, paging, typed and
documented results, a notebook cell run again, mem0's memories in LangMem's namespace."""
import asyncio
import inspect
import json
import signal
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest

import amberdb
from amberdb.langgraph import AmberStore


def test_a_langgraph_graph_that_passes_its_whole_state_stores_each_turn_once(hashing_store):
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    def remember(state: MessagesState):
        # What a memory node does: hand the whole thread over, every turn.
        hashing_store.add_messages("thread-1", state["messages"], user_id="ada")
        return {"messages": [AIMessage(f"noted ({len(state['messages'])})")]}

    g = StateGraph(MessagesState)
    g.add_node("remember", remember)
    g.add_edge(START, "remember")
    g.add_edge("remember", END)
    graph = g.compile()
    state = {"messages": []}
    for turn in range(10):
        state = graph.invoke({"messages": state["messages"] + [HumanMessage(f"turn {turn}")]})
    held = hashing_store.recent(user_id="ada", limit=50)
    # Ten user turns and nine replies were ever passed in (the last reply after the last call).
    assert len(held) == 19, [m.content for m in held]
    assert sorted(m.content for m in held if m.role == "user") == sorted(
        f"turn {t}" for t in range(10))
    # The same thread again, as plain dicts without ids: judged by position.
    plain = [{"role": "user" if m.type == "human" else "assistant", "content": m.content}
             for m in state["messages"][:-1]]
    again = hashing_store.add_messages("thread-1", plain, user_id="ada")
    assert again == [] and len(again.skipped) == 19
    assert {s.by for s in again.skipped} == {"position"}


def test_a_thread_sent_again_over_a_client_is_skipped_by_id(server):
    with amberdb.Client(server.host, server.port) as db:
        turns = [{"role": "user", "content": "hi", "id": "m1"},
                 {"role": "assistant", "content": "hello", "id": "m2"}]
        assert len(db.add_messages("t", turns)) == 2
        window = turns[1:] + [{"role": "user", "content": "bye", "id": "m3"}]
        added = db.add_messages("t", window)
        assert len(added) == 1 and [(s.position, s.by) for s in added.skipped] == [(0, "id")]
        every = db.add_messages("t", turns[:1], skip_held=False)
        assert len(every) == 1 and every.skipped == []
        with pytest.raises(amberdb.InvalidArgument, match="item 1"):
            db.add_messages("t", [turns[0], turns[0]])


def test_a_5000_character_langmem_search_answers(store_dir):
    from langmem import create_manage_memory_tool, create_search_memory_tool

    long_query = ("what does Ada like to drink in the morning " * 120)[:5000]
    assert len(long_query) == 5000
    with AmberStore.open(store_dir, embedder="hashing") as lg:
        manage = create_manage_memory_tool(namespace=("memories", "ada"), store=lg)
        search = create_search_memory_tool(namespace=("memories", "ada"), store=lg)
        manage.invoke({"content": "Ada drinks green tea in the morning", "action": "create"})
        found = search.invoke({"query": long_query, "limit": 3})
        assert "green tea" in str(found)
        hits = lg.search(("memories", "ada"), query=long_query, limit=3)
        assert [h.value["content"] for h in hits] == ["Ada drinks green tea in the morning"]


def test_a_server_killed_and_restarted_under_both_clients_surfaces_no_error(tmp_path, start_server):
    data = tmp_path / "served"
    first = start_server(data_dir=data)
    port = first.port
    client = amberdb.Client(first.host, port, timeout=30)
    client.store("before the restart")

    async def async_session(phase):
        return await acl.store(f"async {phase}"), await acl.search("restart")

    loop = asyncio.new_event_loop()
    acl = loop.run_until_complete(amberdb.AsyncClient.connect(first.host, port, timeout=30))
    loop.run_until_complete(async_session("before"))
    for kill in (signal.SIGKILL, signal.SIGTERM):
        first.stop(kill)
        first = start_server(data_dir=data, port=port)
        # The first call of each idle client after the restart: no error, nothing lost.
        assert client.search("before the restart").hits[0].content == "before the restart"
        assert client.store(f"after {kill.name}").outcome == "stored"
        stored, hits = loop.run_until_complete(async_session(kill.name))
        assert stored.outcome == "stored" and len(hits) >= 1
    texts = {m.content for m in client.recent(limit=50)}
    assert {"before the restart", "after SIGKILL", "after SIGTERM", "async before",
            "async SIGKILL", "async SIGTERM"} <= texts
    loop.run_until_complete(acl.close())
    loop.close()
    client.close()


def test_times_as_python_writes_them_and_langchains_tuples(hashing_store):
    said = datetime(2024, 5, 1, 9, 30, tzinfo=timezone(timedelta(hours=2)))
    ids = hashing_store.add_messages("t", [
        {"role": "user", "content": "aware datetime", "time": said},
        {"role": "user", "content": "a date", "time": date(2024, 5, 2)},
        {"role": "assistant", "content": "created_at key", "created_at": "2024-05-03T10:00:00Z"},
        ("user", "a tuple"),
    ])
    got = [hashing_store.get(i) for i in ids]
    assert got[0].valid_from == said.astimezone(timezone.utc)
    assert got[1].valid_from == datetime(2024, 5, 2, tzinfo=timezone.utc)
    assert got[2].valid_from == datetime(2024, 5, 3, 10, tzinfo=timezone.utc)
    assert (got[3].role, got[3].content) == ("user", "a tuple")
    with pytest.raises(ValueError, match="timezone-aware"):
        hashing_store.add_messages("t", [{"role": "user", "content": "x",
                                          "time": datetime(2024, 5, 1)}])
    hits = hashing_store.search("date", valid_after=date(2024, 5, 2), mode="keyword")
    assert "a date" in [h.content for h in hits]


def test_export_and_import_on_an_open_store_keep_ids_versions_and_lineage(tmp_path):
    with amberdb.Store(tmp_path / "a", embedder="hashing") as db:
        first = db.store("the deploy script lives in ops/deploy.sh", user_id="ada")
        db.delete(db.store("a note to delete", user_id="ada").memory_id)
        updated = db.update(first.memory_id, content="the deploy script lives in tools/deploy.sh")
        assert isinstance(updated, amberdb.Updated) and updated.supersedes == [first.memory_id]
        db.add_messages("chat", [("user", "hello"), ("assistant", "hi")], user_id="ada")
        db.put_item("prefs", {"theme": "dark"}, "theme preference", user_id="ada")
        # Exported while the store is open and in use (another thread could be writing).
        out = db.export(tmp_path / "everything.jsonl")
        assert (out.live, out.archived) == (4, 1), out
        with pytest.raises(amberdb.InvalidArgument, match="exists"):
            db.export(tmp_path / "everything.jsonl")
        before = {m.id: m for m in db.all_memories(user_id="ada")}
        history = db.history(updated.memory_id)
        lineage = db.lineage(updated.memory_id)
    with amberdb.Store(tmp_path / "b", embedder="hashing") as db:
        done = db.import_file(tmp_path / "everything.jsonl")
        assert isinstance(done, amberdb.Imported)
        assert (done.format, done.ids_kept, done.stored, done.archived) == ("export", True, 5, 1)
        after = {m.id: m for m in db.all_memories(user_id="ada")}
        assert after == before, "ids, texts, times, counts: every field"
        assert db.history(updated.memory_id) == history
        assert [m.id for m in db.lineage(updated.memory_id)] == [m.id for m in lineage]
        assert db.import_file(tmp_path / "everything.jsonl").stored == 0, "run again: nothing"
    with amberdb.Store(tmp_path / "c", embedder="hashing") as db:
        for i in range(3):
            db.store(f"already here {i}", user_id="bob")
        done = db.import_file(tmp_path / "everything.jsonl")
        assert done.ids_kept is False and len(done.renumbered) == 5
        here = dict(done.renumbered)[updated.memory_id]
        assert db.history(here).count == 2, "lineage follows the new ids"


def test_recent_pages_and_all_memories_meets_each_once(hashing_store):
    for i in range(23):
        hashing_store.store(f"note number {i}")
    pages = [hashing_store.recent(limit=10, offset=o) for o in (0, 10, 20, 30)]
    assert [len(p) for p in pages] == [10, 10, 3, 0]
    ids = [m.id for p in pages for m in p]
    assert len(set(ids)) == 23 and ids == sorted(ids, reverse=True)
    assert [m.id for m in hashing_store.all_memories(page=7)] == ids


def test_results_are_typed_with_datetimes(hashing_store):
    stored = hashing_store.store("alice likes tea", user_id="a", category="nonsense")
    assert (stored.category, stored.category_reason) == ("other", "fallback"), stored.raw
    assert isinstance(hashing_store.feedback(stored.memory_id, "helpful"), amberdb.FeedbackResult)
    history = hashing_store.history(stored.memory_id)
    assert isinstance(history, amberdb.History) and len(history) == 1
    assert isinstance(history.versions[0].created_at, datetime)
    knowledge = hashing_store.add_knowledge(["the sky is blue", "the sky is blue"], user_id="a")
    assert isinstance(knowledge, amberdb.KnowledgeResult)
    assert [r.outcome for r in knowledge.results] == ["stored", "duplicate"]
    assert isinstance(knowledge.results[0].created_at, datetime)
    deleted = hashing_store.delete(stored.memory_id)
    assert isinstance(deleted, amberdb.Deleted) and deleted.memory_id == stored.memory_id


def _public_methods():
    from amberdb.client import Pending, Pipeline

    for cls in (amberdb.Store, amberdb.Client, amberdb.AsyncClient, Pipeline, Pending,
                AmberStore, amberdb.SearchResult):
        for name, fn in inspect.getmembers(cls):
            if name.startswith("_") and name not in ("__init__", "__enter__", "__aenter__"):
                continue
            if not (inspect.isfunction(fn) or isinstance(fn, property)):
                continue
            if cls is AmberStore and name not in vars(AmberStore):
                continue  # LangGraph's own BaseStore methods
            yield cls, name, fn


def test_every_public_method_has_a_docstring_and_a_return_type():
    missing, untyped = [], []
    for cls, name, fn in _public_methods():
        target = fn.fget if isinstance(fn, property) else fn
        if not inspect.getdoc(target) and name != "__init__":
            missing.append(f"{cls.__name__}.{name}")
        if "return" not in getattr(target, "__annotations__", {}):
            untyped.append(f"{cls.__name__}.{name}")
    assert missing == [], f"public methods without a docstring: {missing}"
    assert untyped == [], f"public methods without a return type: {untyped}"


def test_errors_speak_python(tmp_path, hashing_store):
    with pytest.raises(ValueError) as e:
        amberdb.Store(tmp_path / "limit", embedder="hashing", memory_limit=0)
    assert "..=" not in str(e.value) and "1 to 10000000" in str(e.value), e.value
    first = hashing_store.store("a fact about tea")
    hashing_store.update(first.memory_id, content="a fact about coffee")
    with pytest.raises(amberdb.NotFound) as e:
        hashing_store.get(first.memory_id)
    assert "Store::" not in e.value.message and "lineage" in e.value.message
    dest = tmp_path / "exists.jsonl"
    dest.write_text("")
    with pytest.raises(NotADirectoryError, match="is a file, not a store directory"):
        amberdb.Store(dest, embedder="hashing")
    with pytest.raises(amberdb.InvalidArgument) as e:
        hashing_store.export(dest)
    assert "os error" not in e.value.message
    assert "--embedder" not in amberdb._errors.python_words(
        "run `amberdb model fetch`, or choose (`--embedder hashing`, `HashingEmbedder`)")


def test_opening_a_path_twice_in_one_process_shares_the_store(tmp_path):
    path = tmp_path / "nb"
    first = amberdb.Store(path, embedder="hashing")
    kept = first.store("from the first cell").memory_id
    again = amberdb.Store(str(path) + "/", embedder="hashing")  # the cell run again
    assert again.get(kept).content == "from the first cell"
    same = amberdb.Store(path)  # options left out take the open store's
    with pytest.raises(ValueError, match=r"memory_limit=5 \(it is open with None\)"):
        amberdb.Store(path, memory_limit=5)
    with pytest.raises(ValueError, match=r"embedder='minilm' \(it is open with 'hashing'\)"):
        amberdb.Store(path, embedder="minilm")
    # Another process is refused: one process owns a store.
    import subprocess
    import sys
    other = subprocess.run(
        [sys.executable, "-c", f"import amberdb; amberdb.Store({str(path)!r})"],
        capture_output=True, text=True, timeout=60)
    assert other.returncode != 0 and "locked by another process" in other.stderr, other.stderr
    first.close()
    assert again.get(kept).content == "from the first cell", "still open for the others"
    again.close()
    same.close()
    assert same.closed
    with amberdb.Store(path, embedder="hashing", memory_limit=5) as reopened:  # all closed
        assert reopened.get(kept).content == "from the first cell"


def test_mem0_memories_land_where_langmem_looks(tmp_path):
    from langmem import create_search_memory_tool

    mem0 = {"results": [
        {"id": "m-1", "memory": "Likes to play cricket on weekends", "user_id": "alice",
         "hash": "h1", "metadata": None, "created_at": "2024-07-26T10:44:36-07:00",
         "updated_at": None},
    ]}
    source = tmp_path / "mem0.json"
    source.write_text(json.dumps(mem0, indent=2))
    with AmberStore.open(tmp_path / "store", embedder="hashing") as lg:
        done = lg.db.import_file(source)
        assert (done.format, done.stored) == ("mem0", 1), done
        item = lg.get(("memories", "alice"), "m-1")
        assert item.value["content"] == "Likes to play cricket on weekends"
        search = create_search_memory_tool(namespace=("memories", "alice"), store=lg)
        assert "cricket" in str(search.invoke({"query": "cricket weekends"}))


def test_amber_store_open_of_an_address_connects_instead_of_making_a_directory(
        server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    address = f"{server.host}:{server.port}"
    with AmberStore.open(address) as lg:
        lg.put(("ns",), "k", {"v": 1})
        assert lg.get(("ns",), "k").value == {"v": 1}
    assert not Path(address).exists()
