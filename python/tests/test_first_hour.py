"""What a new Python agent builder meets in the first hour (issue #46): a new user's first
search, a second run of the README snippet, store-wide hook settings, chat history as agent
frameworks hold it, feedback in the protocol's words, and every method's arguments checked
against the command table the engine publishes (HELP)."""
import inspect
import typing

import pytest

import amberdb
from amberdb._api import Commands


def test_a_new_users_first_search_is_an_empty_page(hashing_store):
    page = hashing_store.search("anything at all", user_id="brand-new-user")
    assert list(page) == []
    # A session that does not exist is still named.
    with pytest.raises(amberdb.NotFound):
        hashing_store.search("x", user_id="brand-new-user", session_id="nope")


def test_the_readme_snippet_runs_twice(store_dir):
    for run in range(2):
        with amberdb.Store(store_dir, embedder="hashing") as db:
            stored = db.store("pytest -x stops at the first failure", tags=["python"])
            assert stored.outcome == ("stored" if run == 0 else "duplicate")
            assert stored.memory_id == 1
    # Reopened without naming the embedder: the store remembers it.
    with amberdb.Store(store_dir) as db:
        assert db.stats()["store"]["embedder"] == "amberdb-hashing-v1-384"
        assert db.stats()["store"]["memory_limit"] == 1_000_000


def test_store_wide_hook_settings(store_dir):
    a = "User prefers Sublime Text for Python"
    b = "User prefers Sublime Text for SQL"
    with amberdb.Store(store_dir / "default", embedder="hashing") as db:
        db.store(a)
        default_outcome = db.store(b).outcome
    with amberdb.Store(store_dir / "off", embedder="hashing", semantic_dedup=False) as db:
        db.store(a)
        assert db.store(b).outcome == "stored"
        assert len(list(db.search("Sublime Text"))) == 2
        assert db.store(a).outcome == "duplicate", "exact duplicates are still caught"
    assert default_outcome in ("stored", "superseded", "merged")
    with pytest.raises(ValueError, match="dedup_distance"):
        amberdb.Store(store_dir / "bad", embedder="hashing", dedup_distance=3.0)
    with pytest.raises(ValueError, match="merge"):
        amberdb.Store(store_dir / "bad2", embedder="hashing", merge="always")


def test_feedback_takes_the_protocols_words(hashing_store):
    mid = hashing_store.store("the cache lives in /var/cache/app").memory_id
    hashing_store.feedback(mid, "harmful")
    hashing_store.feedback(mid, "harmful")
    hashing_store.feedback(mid, True)
    m = hashing_store.get(mid)
    assert (m.helpful_count, m.harmful_count) == (1, 2)
    with pytest.raises(amberdb.InvalidArgument):
        hashing_store.feedback(mid, "meh")
    with pytest.raises(TypeError):
        hashing_store.feedback(mid, 1)


def test_call_takes_a_command_argument(hashing_store):
    help_ = hashing_store.call("HELP", command="SEARCH_MEMORIES")
    assert help_["command"] == "SEARCH_MEMORIES"
    assert any(a["name"] == "query" for a in help_["arguments"])


def test_add_messages_creates_its_user_and_session(hashing_store):
    ids = hashing_store.add_messages("thread-1", [
        {"role": "user", "content": "My cat is called Miso"},
        {"role": "assistant", "content": "Nice name!"},
    ], user_id="new-user")
    assert len(ids) == 2
    assert [s.id for s in hashing_store.list_sessions(user_id="new-user")] == ["thread-1"]
    hits = hashing_store.search("cat", user_id="new-user", session_id="thread-1")
    assert ids[0] in [h.id for h in hits]


class _Recorder(Commands):
    def __init__(self):
        self.seen = None

    def _run(self, command, args, parse):
        self.seen = (command, args)
        return None


def _sample(param: inspect.Parameter):
    name = param.name
    if name in ("content", "query", "text", "key", "dest", "preview_id", "snapshot_id",
                "session_id", "agent_id", "user_id", "token", "description", "name", "prefix"):
        return "x"
    if name in ("value",):
        return {"a": 1}
    if name in ("messages",):
        return [{"role": "user", "content": "x"}]
    if name in ("items", "tags", "skip_hooks", "force_hooks"):
        return ["x"]
    if name == "feedback":
        return "helpful"
    return 1


def test_every_method_names_its_commands_arguments(hashing_store):
    """Each method sends one command; every keyword it takes is an argument of that command
    (HELP), and every argument of the command is reachable from the method (a parameter, or
    `**more`). A renamed or missing argument fails here, not in a user's agent loop."""
    checked = 0
    for name, method in inspect.getmembers(Commands, inspect.isfunction):
        if name.startswith("_") or name in ("call", "all_memories"):  # all_memories pages recent
            continue
        sig = inspect.signature(method)
        params = [p for p in list(sig.parameters.values())[1:]
                  if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
        rec = _Recorder()
        getattr(rec, name)(*[_sample(p) for p in params if p.default is p.empty])
        command = rec.seen[0]
        help_ = hashing_store.call("HELP", command=command)
        # request_id is the client's own: it makes one for every write (a caller's own id
        # goes through `call`, docs/python.md).
        arguments = {a["name"] for a in help_["arguments"]} - {"request_id"}
        takes = {p.name for p in params}
        assert takes <= arguments, f"{name}: {takes - arguments} are not {command}'s arguments"
        has_more = any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())
        assert has_more or arguments <= takes, (
            f"{name}: {command}'s {arguments - takes} cannot be given")
        hints = typing.get_type_hints(method)
        for arg in help_["arguments"]:
            p = sig.parameters.get(arg["name"])
            if p is None:
                continue
            # The annotation admits HELP's type (a time is text on the wire: `Time` takes text,
            # datetime and date).
            admits = _TYPES[arg["type"]]
            shown = repr(hints.get(p.name, p.annotation))
            assert any(t in shown for t in admits), (
                f"{name}({p.name}: {shown}): {command}'s {arg['name']} is {arg['type']}")
            # A default is None (the server's default applies) or the server's own.
            if p.default is not p.empty and p.default is not None and "default" in arg:
                assert p.default == arg["default"], (
                    f"{name}({p.name}={p.default!r}): {command}'s default is {arg['default']!r}")
            if arg["required"]:
                assert p.default is p.empty, f"{name}: {arg['name']} is required by {command}"
        checked += 1
    assert checked >= 40


# What a method's annotation shows for each HELP type.
_TYPES = {
    "string": ("str", "Time"),
    "integer": ("int",),
    "number": ("float",),
    "boolean": ("bool",),
    "array": ("Sequence", "List", "list", "Iterable"),
    "object": ("Dict", "Mapping", "dict", "Any"),
}


def test_add_messages_takes_openai_and_langchain_messages(hashing_store):
    openai = [
        {"role": "developer", "content": "Answer briefly."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in"},
                                     {"type": "text", "text": "Lisbon?"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Lisbon\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny, 24 C"},
        {"role": "assistant", "content": "Sunny, 24 degrees.", "time": "2026-11-01T10:00:00Z"},
    ]
    ids = hashing_store.add_messages("openai-thread", openai, user_id="ann")
    got = [(m.role, m.content) for m in map(hashing_store.get, ids)]
    assert got == [
        ("system", "Answer briefly."),
        ("user", "Weather in\nLisbon?"),
        ("assistant", 'called get_weather({"city": "Lisbon"})'),
        ("tool", "sunny, 24 C"),
        ("assistant", "Sunny, 24 degrees."),
    ]
    assert hashing_store.get(ids[-1]).valid_from.year == 2026
    with pytest.raises(ValueError, match=r"messages\[0\].*image_url"):
        hashing_store.add_messages("t", [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:..."}}]}], user_id="ann")
    with pytest.raises(TypeError, match=r"messages\[1\]"):
        hashing_store.add_messages("t", [{"role": "user", "content": "a"}, 42], user_id="ann")

    from langchain_core import messages  # the test venv has it (scripts/python-test)
    lc = [
        messages.SystemMessage("You are a travel agent."),
        messages.HumanMessage("And in Porto?"),
        messages.AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": "Porto"},
                                            "id": "c2"}]),
        messages.ToolMessage("rain, 17 C", tool_call_id="c2"),
        messages.AIMessage("Rain in Porto."),
    ]
    ids = hashing_store.add_messages("lc-thread", lc, user_id="ann")
    got = [(m.role, m.content) for m in map(hashing_store.get, ids)]
    assert got == [
        ("system", "You are a travel agent."),
        ("user", "And in Porto?"),
        ("assistant", 'called get_weather({"city": "Porto"})'),
        ("tool", "rain, 17 C"),
        ("assistant", "Rain in Porto."),
    ]


class FakeServer:
    """A loopback server that answers each connection as `script` says: for the n-th
    connection, `script(n, line)` returns the reply line, or None to stay silent, or "close"
    to drop the connection."""

    def __init__(self, script):
        import socket
        import threading

        self.script = script
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.lines = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        import threading

        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            n = self.connections
            self.connections += 1
            threading.Thread(target=self._answer, args=(conn, n), daemon=True).start()

    def _answer(self, conn, n):
        import json

        with conn, conn.makefile("rb") as lines:
            for raw in lines:
                self.lines.append(raw.decode())
                head, _, body = raw.decode().strip().partition(" ")
                tag = head[1:] if head.startswith("@") else None
                command = body.partition(" ")[0] if tag else head
                reply = self.script(n, command)
                if reply == "close":
                    return
                if reply is not None:
                    if tag is not None:
                        reply = dict(reply, tag=tag)
                    conn.sendall((json.dumps(reply) + "\n").encode())

    def close(self):
        self.sock.close()


PONG = {"ok": True, "reply": "PONG"}


def test_client_times_out_and_connects_again():
    # The first connection never answers; the next ones do.
    server = FakeServer(lambda n, command: None if n == 0 else PONG)
    client = amberdb.Client("127.0.0.1", server.port, timeout=0.3)
    with pytest.raises(TimeoutError, match="connects again"):
        client.ping()
    assert client.ping() is True
    assert server.connections == 2
    client.close()
    server.close()


def test_client_connects_again_after_the_server_drops_it():
    # A request the server dropped after it was sent is sent once more on a new connection:
    # a read as it is, a write with the same request id (the server answers a second arrival
    # with the first one's reply). A command the client does not know is not sent again: it
    # fails, and the next call connects again.
    import json

    server = FakeServer(lambda n, command: "close" if n in (0, 2, 4) else PONG)
    client = amberdb.Client("127.0.0.1", server.port, timeout=5)
    assert client.ping() is True
    assert server.connections == 2
    client.close()
    client.call("DELETE_BY_MEMORY_ID", memory_id=1)
    assert server.connections == 4
    sent = [json.loads(line.partition(" ")[2]) for line in server.lines if "DELETE" in line]
    assert len(sent) == 2 and sent[0]["request_id"] == sent[1]["request_id"]
    client.close()
    with pytest.raises(ConnectionError):
        client.call("NOT_A_COMMAND_THE_CLIENT_KNOWS")
    assert client.ping() is True
    assert server.connections == 6
    client.close()
    server.close()


def test_async_client_times_out_and_connects_again():
    import asyncio

    async def run(port):
        db = await amberdb.AsyncClient.connect("127.0.0.1", port, timeout=0.3)
        with pytest.raises(TimeoutError):
            await db.ping()
        # The server drops this connection on its next line: a ping (safe to run twice) is
        # sent again on a new connection; so is a delete, with its request id; a command the
        # client does not know is not, and fails.
        assert await db.ping() is True
        await db.call("DELETE_BY_MEMORY_ID", memory_id=1)
        with pytest.raises(ConnectionError):
            await db.call("NOT_A_COMMAND_THE_CLIENT_KNOWS")
        await asyncio.sleep(0.05)
        assert await db.ping() is True
        await db.close()

    answers = {0: [None, "close"], 1: [PONG, "close"], 2: [PONG, "close"]}
    server = FakeServer(lambda n, command: answers[n].pop(0) if n in answers else PONG)
    asyncio.run(run(server.port))
    assert server.connections == 4
    deletes = [line for line in server.lines if "DELETE" in line]
    assert len(deletes) == 2 and deletes[0].split('"request_id"')[1] == deletes[1].split('"request_id"')[1]
    server.close()


def test_wrong_client_arguments_fail_at_once():
    with pytest.raises(TypeError, match="AsyncClient.connect"):
        amberdb.AsyncClient("127.0.0.1", 7733)
    with pytest.raises(ValueError, match="port"):
        amberdb.Client("127.0.0.1", 0)
    with pytest.raises(ValueError, match="timeout"):
        amberdb.Client("127.0.0.1", 7733, timeout=-1)
    from amberdb.langgraph import AmberStore

    class NotAClient:
        pass

    with pytest.raises(TypeError, match="blocking amberdb.Client"):
        AmberStore(NotAClient())


def _python_blocks(path):
    import re

    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


def test_the_readme_and_docs_snippets_run_twice_in_a_row(tmp_path, start_server):
    """Every Python snippet of README.md and of docs/python.md, as a reader pastes them,
    against a running server (their ports replaced by its: 7733 the line protocol, 7734 HTTP),
    twice in the same directory. The MemFuse and MCP snippets run with the SDKs the test venv
    holds (scripts/python-test)."""
    import subprocess
    import sys
    from pathlib import Path

    server = start_server("--http", "127.0.0.1:0")
    root = Path(__file__).resolve().parents[2]
    snippets = _python_blocks(root / "README.md") + _python_blocks(root / "docs" / "python.md")
    assert len(snippets) >= 3
    for i, code in enumerate(snippets):
        code = code.replace("7733", str(server.port)).replace("7734", str(server.http_port))
        if "async def main" in code:
            code += "\nasyncio.run(main())\n"
        cwd = tmp_path / f"snippet{i}"
        cwd.mkdir()
        for run in range(2):
            done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                                  text=True, timeout=300)
            assert done.returncode == 0, f"snippet {i}, run {run}:\n{code}\n{done.stderr}"
            if "pytest -x stops the run" in code:
                assert "pytest -x stops the run" in done.stdout, done.stdout


def _pause(proc):
    """Stops the server and waits until every thread of it is stopped: SIGSTOP is delivered
    asynchronously, and on a busy machine a thread may still answer a request just after the
    signal was sent."""
    import os
    import signal
    import time

    proc.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states = []
        for task in os.listdir(f"/proc/{proc.pid}/task"):
            with open(f"/proc/{proc.pid}/task/{task}/stat") as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
        if all(s in ("T", "t") for s in states):
            return
        time.sleep(0.01)
    raise AssertionError(f"the server did not stop: thread states {states}")


def test_a_paused_and_a_killed_server_under_both_clients(tmp_path, start_server):
    import asyncio
    import signal
    import time

    data = tmp_path / "served"
    server = start_server(data_dir=data)
    port = server.port
    client = amberdb.Client("127.0.0.1", port, timeout=0.5)
    stored = client.store("written before the trouble").memory_id
    # Paused: the call times out; resumed, the next call connects again and works.
    _pause(server.proc)
    with pytest.raises(TimeoutError):
        client.ping()
    server.proc.send_signal(signal.SIGCONT)
    assert client.ping() is True

    async def paused_async():
        db = await amberdb.AsyncClient.connect("127.0.0.1", port, timeout=0.5)
        _pause(server.proc)
        with pytest.raises(TimeoutError):
            await db.ping()
        server.proc.send_signal(signal.SIGCONT)
        assert await db.ping() is True
        return db

    loop = asyncio.new_event_loop()
    adb = loop.run_until_complete(paused_async())
    # Killed and started again on the same port: the next call of each client reconnects,
    # and what was acknowledged is there.
    server.stop(signal.SIGKILL)
    with pytest.raises(OSError):
        client.ping()

    async def after_kill():
        await asyncio.sleep(0.2)  # the reader sees the connection end
        with pytest.raises(OSError):
            await adb.ping()

    loop.run_until_complete(after_kill())
    deadline = time.monotonic() + 10
    while True:
        try:
            start_server(data_dir=data, port=port)
            break
        except AssertionError:  # the port not free yet
            assert time.monotonic() < deadline
            time.sleep(0.2)
    assert client.get(stored).content == "written before the trouble"

    async def reconnected():
        assert (await adb.get(stored)).content == "written before the trouble"
        await adb.close()

    loop.run_until_complete(reconnected())
    loop.close()
    client.close()


def test_amber_store_over_each_kind_of_connection(hashing_store, start_server):
    import asyncio

    from amberdb.langgraph import AmberStore

    server = start_server()
    with amberdb.Client("127.0.0.1", server.port) as client:
        for db in (hashing_store, client):
            store = AmberStore(db)
            store.put(("prefs", "ann"), "food", {"likes": "pizza"})
            assert store.get(("prefs", "ann"), "food").value == {"likes": "pizza"}

    async def with_async():
        db = await amberdb.AsyncClient.connect("127.0.0.1", server.port)
        with pytest.raises(TypeError, match="blocking amberdb.Client"):
            AmberStore(db)
        await db.close()

    asyncio.run(with_async())
