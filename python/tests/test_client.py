"""The clients against a server started from the wheel's `amberdb serve`."""
import asyncio
import signal

import pytest

import amberdb


def test_sync_client_end_to_end(server):
    with amberdb.Client(server.host, server.port) as db:
        assert db.ping() is True
        stored = db.store("pytest -x stops the run at the first failing test", tags=["Python"])
        assert stored.outcome == "stored" and stored.tags == ["python"]
        dup = db.store("pytest -x stops the run at the first failing test")
        assert dup.outcome == "duplicate" and dup.memory_id == stored.memory_id
        hits = db.search("pytest", mode="keyword")
        assert hits.ids == [stored.memory_id] and hits[0].tags == ["python"]
        assert db.get(stored.memory_id).content.startswith("pytest -x")
        uni = db.store("naïve café ☕ — 日本語 notes\nwith a second line")
        assert db.get(uni.memory_id).content == "naïve café ☕ — 日本語 notes\nwith a second line"
        with pytest.raises(amberdb.InvalidArgument) as bad:
            db.search("x", colour="red")
        assert "colour" in str(bad.value)
        with pytest.raises(amberdb.NotFound):
            db.get(999_999)
        assert db.ping()  # the connection survives errors


def test_pipeline_runs_in_order_and_reports_each_error(server):
    with amberdb.Client(server.host, server.port) as db:
        with db.pipeline() as p:
            stores = [p.store(f"pipelined note {i}") for i in range(600)]  # three chunks
            dup = p.store("pipelined note 7")
            found = p.search("pipelined note", mode="text", limit=50, deduplicate=False)
        ids = [s.result().memory_id for s in stores]
        assert ids == sorted(ids) and len(set(ids)) == 600
        assert dup.result().outcome == "duplicate" and dup.error is None
        assert len(found.result()) == 50
        assert db.stats()["store"]["memories"] == 600


def test_async_client_pipelines_concurrent_calls(server):
    async def main():
        async with await amberdb.AsyncClient.connect(server.host, server.port) as db:
            assert await db.ping()
            stored = await asyncio.gather(*(db.store(f"async note {i}") for i in range(200)))
            assert len({s.memory_id for s in stored}) == 200
            hits, recent, missing = await asyncio.gather(
                db.search("async note", mode="text", limit=5),
                db.recent(limit=3),
                db.get(999_999),
                return_exceptions=True,
            )
            assert len(hits) == 5 and len(recent) == 3
            assert isinstance(missing, amberdb.NotFound)
        with pytest.raises(ConnectionError):
            await db.ping()

    asyncio.run(main())


def test_auth_with_a_token(start_server, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("admin-secret\nann ann-secret\n")
    s = start_server("--token-file", str(tokens))
    with amberdb.Client(s.host, s.port) as anon:
        assert anon.ping()  # PING works before AUTH
        with pytest.raises(amberdb.Unauthorized):
            anon.store("no token, no store")
    with amberdb.Client(s.host, s.port, token="ann-secret") as ann:
        assert ann.store("ann's note").memory_id
        with pytest.raises(amberdb.Forbidden):
            ann.search("note", user_id="bob")
        with pytest.raises(amberdb.Forbidden):
            ann.stats()
    with pytest.raises(amberdb.Unauthorized):
        amberdb.Client(s.host, s.port, token="wrong")

    async def bad_async_token():
        await amberdb.AsyncClient.connect(s.host, s.port, token="wrong")

    with pytest.raises(amberdb.Unauthorized):
        asyncio.run(bad_async_token())
    with amberdb.Client(s.host, s.port, token="admin-secret") as admin:
        assert admin.stats()["store"]["memories"] == 1


def test_sigterm_stops_the_server_cleanly_and_nothing_is_lost(start_server, tmp_path):
    data = tmp_path / "kept"
    s = start_server(data_dir=data)
    with amberdb.Client(s.host, s.port) as db:
        ids = [db.store(f"kept note {i}").memory_id for i in range(20)]
    assert s.stop(signal.SIGTERM) == 0
    assert amberdb.check(data)["clean"] is True
    with amberdb.Store(data, embedder="hashing") as db:
        assert [db.get(i).content for i in ids] == [f"kept note {i}" for i in range(20)]


def test_a_server_that_dies_fails_the_calls_waiting_on_it(start_server):
    s = start_server()
    sync = amberdb.Client(s.host, s.port)
    assert sync.ping()

    async def main():
        db = await amberdb.AsyncClient.connect(s.host, s.port)
        assert await db.ping()
        s.stop(signal.SIGKILL)
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(db.ping(), timeout=30)
        with pytest.raises(ConnectionError):
            await db.store("after the server died")
        await db.close()

    asyncio.run(main())
    with pytest.raises(OSError):  # ConnectionError or a broken pipe: both OSError
        sync.ping()
    sync.close()


def test_every_write_carries_a_request_id_and_a_lost_reply_is_fetched_again(server):
    import socket
    import threading
    import uuid

    from amberdb.client import WRITES, request_id

    # The client's list of writes is the server's: every command HELP calls a write.
    with amberdb.Client(server.host, server.port) as db:
        listed = db._run("HELP", {}, lambda r: r["commands"])
        writes = set()
        for c in listed:
            info = db._run("HELP", {"command": c["command"]}, lambda r: r)
            if info["class"] == "write":
                writes.add(c["command"])
                if c["alias"]:
                    writes.add(c["alias"])
        assert writes == set(WRITES)
    made = uuid.UUID(request_id())
    assert made.version == 7
    # A proxy that forwards the first request, reads the server's reply, and drops it: the
    # write ran, its reply was lost. The client sends it again (a new connection goes
    # straight to the server) with the same request id, and gets the first reply.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    forwarded = []
    proxied = {"n": 0}

    def proxy():
        while True:
            conn, _ = listener.accept()
            upstream = socket.create_connection((server.host, server.port))
            if proxied["n"] == 0:
                proxied["n"] += 1
                line = conn.makefile("rb").readline()
                forwarded.append(line)
                upstream.sendall(line)
                upstream.makefile("rb").readline()
                conn.close()
                upstream.close()
                continue

            def pump(a, b):
                try:
                    while True:
                        data = a.recv(65536)
                        if not data:
                            break
                        b.sendall(data)
                except OSError:
                    pass
                finally:
                    b.close()

            threading.Thread(target=pump, args=(conn, upstream), daemon=True).start()
            threading.Thread(target=pump, args=(upstream, conn), daemon=True).start()

    threading.Thread(target=proxy, daemon=True).start()
    port = listener.getsockname()[1]
    with amberdb.Client("127.0.0.1", port) as db:
        stored = db.store("the retry must not store this twice", user_id="retry-user")
    assert stored.outcome == "stored", "the first reply, not a rerun's duplicate"
    assert b'"request_id"' in forwarded[0]
    with amberdb.Client(server.host, server.port) as db:
        held = db.recent(user_id="retry-user", limit=10)
        assert [m.id for m in held] == [stored.memory_id]
