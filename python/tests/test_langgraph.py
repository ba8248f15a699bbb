"""amberdb as LangGraph's store, driven by LangGraph's own package from PyPI: the BaseStore
methods, a compiled graph whose nodes read and write long-term memory, async calls, the store
over a running server, and everything still there after a reopen."""
import asyncio
import operator
import uuid
from datetime import datetime
from typing import Annotated, List, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore, InvalidNamespaceError, Item, SearchItem

import amberdb
from amberdb.langgraph import AmberStore


@pytest.fixture
def lg(store_dir):
    with AmberStore.open(store_dir, embedder="hashing") as store:
        yield store


def test_put_get_delete_and_what_an_item_is(lg):
    assert isinstance(lg, BaseStore)
    ns = ("users", "alice", "prefs")
    lg.put(ns, "food", {"likes": "pizza", "rating": 4})
    first = lg.get(ns, "food")
    assert isinstance(first, Item)
    assert (first.namespace, first.key, first.value) == (ns, "food", {"likes": "pizza", "rating": 4})
    assert isinstance(first.created_at, datetime) and first.created_at.tzinfo is not None
    lg.put(ns, "food", {"likes": "sushi"})
    second = lg.get(ns, "food")
    assert second.value == {"likes": "sushi"}, "a put replaces the value whole"
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    # Namespaces are separate, and a namespace is not its prefix.
    assert lg.get(("users", "alice"), "food") is None
    assert lg.get(("users", "bob", "prefs"), "food") is None
    lg.delete(ns, "food")
    assert lg.get(ns, "food") is None
    lg.delete(ns, "food")  # deleting what is gone is not an error
    # LangGraph's namespace rules hold, in its methods and in a batch of raw ops.
    with pytest.raises(InvalidNamespaceError):
        lg.put(("a.b",), "k", {})
    with pytest.raises(ValueError):
        lg.get(("",), "k")
    with pytest.raises(NotImplementedError):
        lg.put(ns, "k", {"v": 1}, ttl=5)
    # amberdb's own limits are typed errors, and nothing is written.
    with pytest.raises(amberdb.LimitExceeded):
        lg.put(ns, "k" * 513, {"v": 1})
    with pytest.raises(amberdb.LimitExceeded):
        lg.put(ns, "big", {"v": "x" * (256 * 1024)})
    assert lg.search(ns) == []


def test_search_filters_pages_and_merges_namespaces(lg):
    for i in range(120):
        ns = ("docs", "team-a" if i % 2 else "team-b")
        lg.put(ns, f"doc-{i:03d}", {"n": i, "kind": "even" if i % 2 == 0 else "odd",
                                     "meta": {"tag": "t%d" % (i % 3)}, "text": f"note number {i}"})
    last_seq = lg.db.stats()["store"]["last_seq"]
    # No query: namespace order, then key order; offset and limit as LangGraph's.
    page = lg.search(("docs",), limit=5, offset=2)
    assert [i.key for i in page] == ["doc-005", "doc-007", "doc-009", "doc-011", "doc-013"]
    assert all(isinstance(i, SearchItem) and i.score is None for i in page)
    # Filters: equality, operators, nested objects, over more than one page of hits.
    odd_big = lg.search(("docs",), filter={"kind": "odd", "n": {"$gte": 100}}, limit=50)
    assert sorted(i.value["n"] for i in odd_big) == [n for n in range(101, 120, 2)]
    tagged = lg.search(("docs", "team-b"), filter={"meta": {"tag": "t0"}}, limit=100)
    assert sorted(i.value["n"] for i in tagged) == [n for n in range(0, 120, 6)]
    assert lg.search(("docs",), filter={"n": {"$lt": 3, "$ne": 1}}, limit=10) != []
    # A query: every hit scored, best first, across both namespaces, never short of limit.
    hits = lg.search(("docs",), query="note number 7", limit=20)
    assert len(hits) == 20
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert hits[0].value["n"] == 7, [h.key for h in hits[:5]]
    assert {h.namespace for h in hits} == {("docs", "team-a"), ("docs", "team-b")}
    filtered = lg.search(("docs",), query="note number 7", filter={"kind": "even"}, limit=30)
    assert len(filtered) == 30 and all(h.value["kind"] == "even" for h in filtered)
    deep = lg.search(("docs",), query="note", filter={"n": 119}, limit=3)
    assert [h.key for h in deep] == ["doc-119"], "a filter that selects one item still finds it"
    # Reads are not accesses: none of the searches wrote anything.
    assert lg.db.stats()["store"]["last_seq"] == last_seq


def test_list_namespaces(lg):
    for ns in [("a", "x", "1"), ("a", "y"), ("b", "x"), ("c",)]:
        lg.put(ns, "k", {"v": 1})
    assert lg.list_namespaces() == [("a", "x", "1"), ("a", "y"), ("b", "x"), ("c",)]
    assert lg.list_namespaces(prefix=("a",)) == [("a", "x", "1"), ("a", "y")]
    assert lg.list_namespaces(suffix=("x",)) == [("b", "x")]
    assert lg.list_namespaces(prefix=("*", "x")) == [("a", "x", "1"), ("b", "x")]
    assert lg.list_namespaces(max_depth=1) == [("a",), ("b",), ("c",)]
    assert lg.list_namespaces(limit=2, offset=1) == [("a", "y"), ("b", "x")]
    lg.delete(("c",), "k")
    assert ("c",) not in lg.list_namespaces()


def test_index_fields_choose_the_text_and_search_finds_by_meaning(store_dir):
    # MiniLM: found by meaning, from the field the index names only.
    with AmberStore.open(store_dir, index={"fields": ["memory"]}) as lg:
        ns = ("memories", "u1")
        lg.put(ns, "m1", {"memory": "The user prefers dark mode in every editor", "source": "chat"})
        lg.put(ns, "m2", {"memory": "The user's cat is called Miso", "source": "chat"})
        lg.put(ns, "m3", {"memory": "Deploys happen on Tuesdays", "source": "chat"})
        lg.put(ns, "raw", {"memory": "the pet's name"}, index=False)
        assert lg.search(ns, query="what is the name of their pet?", limit=1)[0].key == "m2"
        assert lg.search(ns, query="which colour theme does the user like?", limit=1)[0].key == "m1"
        # index=False: found by its key, not its value.
        top = lg.search(ns, query="the pet's name", limit=4)
        assert top[0].key == "m2" and len(top) == 4
    with pytest.warns(UserWarning, match="own embedder"):
        AmberStore(amberdb.Store(store_dir.parent / "other", embedder="hashing"),
                   index={"dims": 1536, "embed": "openai:text-embedding-3-small"}).db.close()


class State(TypedDict):
    user: str
    said: str
    recalled: Annotated[List[str], operator.add]


def build_graph(store: BaseStore):
    """A two-node graph: one node remembers what the user said, the next recalls by meaning."""

    def remember(state: State, *, store: BaseStore):
        store.put(("memories", state["user"]), str(uuid.uuid4()), {"text": state["said"]})
        return {}

    def recall(state: State, *, store: BaseStore):
        hits = store.search(("memories", state["user"]), query=state["said"], limit=2)
        return {"recalled": [h.value["text"] for h in hits]}

    g = StateGraph(State)
    g.add_node("remember", remember)
    g.add_node("recall", recall)
    g.add_edge(START, "remember")
    g.add_edge("remember", "recall")
    g.add_edge("recall", END)
    return g.compile(store=store)


def test_a_compiled_graph_keeps_long_term_memory_across_a_reopen(store_dir):
    with AmberStore.open(store_dir, embedder="hashing") as lg:
        graph = build_graph(lg)
        out = graph.invoke({"user": "ada", "said": "I keep my notes in Obsidian", "recalled": []})
        assert out["recalled"] == ["I keep my notes in Obsidian"]
        graph.invoke({"user": "ada", "said": "my editor is Helix", "recalled": []})
        graph.invoke({"user": "bob", "said": "bob's editor is Emacs", "recalled": []})
    with AmberStore.open(store_dir, embedder="hashing") as lg:
        texts = sorted(i.value["text"] for i in lg.search(("memories", "ada"), limit=10))
        assert texts == ["I keep my notes in Obsidian", "my editor is Helix"]
        out = build_graph(lg).invoke({"user": "ada", "said": "my editor is Helix", "recalled": []})
        assert out["recalled"][0] == "my editor is Helix"
        assert len(lg.search(("memories",), limit=10)) == 4, "ada 3, bob 1"


def test_async_calls_run_concurrently(lg):
    async def main():
        ns = ("async",)
        await asyncio.gather(*(lg.aput(ns, f"k{i}", {"i": i}) for i in range(40)))
        got = await asyncio.gather(*(lg.aget(ns, f"k{i}") for i in range(40)))
        assert [g.value["i"] for g in got] == list(range(40))
        hits = await lg.asearch(ns, query="k", filter={"i": {"$lt": 10}}, limit=20)
        assert sorted(h.value["i"] for h in hits) == list(range(10))
        await lg.adelete(ns, "k0")
        assert await lg.aget(ns, "k0") is None
        assert await lg.alist_namespaces() == [ns]

    asyncio.run(main())


def test_the_store_over_a_running_server(server):
    with amberdb.Client(server.host, server.port) as client:
        lg = AmberStore(client)
        lg.put(("srv", "u"), "k", {"v": [1, 2, {"x": None}]})
        assert lg.get(("srv", "u"), "k").value == {"v": [1, 2, {"x": None}]}
        assert [h.key for h in lg.search(("srv",), query="anything")] == ["k"]
        assert lg.list_namespaces() == [("srv", "u")]
        # The same items through the plain API.
        assert client.item_users() == {"srv.u": 1}
        assert client.get_item("k", user_id="srv.u").value == {"v": [1, 2, {"x": None}]}
        assert client.delete_item("k", user_id="srv.u") is True
        assert client.delete_item("k", user_id="srv.u") is False


def test_langmem_memory_tools_run_on_it(store_dir):
    # LangMem's own tools, as an agent calls them, with MiniLM: the one line a LangMem user
    # changes is the store the graph is compiled with.
    from langmem import create_manage_memory_tool, create_search_memory_tool

    manage = create_manage_memory_tool(namespace=("memories", "{langgraph_user_id}"))
    search = create_search_memory_tool(namespace=("memories", "{langgraph_user_id}"))

    class Turn(TypedDict):
        said: List[str]

    def agent(state: Turn):
        ids = [manage.invoke({"content": c, "action": "create"}).split()[-1]
               for c in ("Ada prefers dark mode in her editor", "Ada's cat is called Miso")]
        manage.invoke({"content": "Ada's cat is called Mochi", "action": "update", "id": ids[1]})
        found = search.invoke({"query": "what is the pet's name?", "limit": 1})
        manage.invoke({"action": "delete", "id": ids[0]})
        return {"said": [found]}

    with AmberStore.open(store_dir) as lg:
        g = StateGraph(Turn)
        g.add_node("agent", agent)
        g.add_edge(START, "agent")
        g.add_edge("agent", END)
        out = g.compile(store=lg).invoke({"said": []}, {"configurable": {"langgraph_user_id": "ada"}})
        assert "Mochi" in out["said"][0] and "Miso" not in out["said"][0], out
        left = lg.search(("memories", "ada"))
        assert [i.value["content"] for i in left] == ["Ada's cat is called Mochi"]
