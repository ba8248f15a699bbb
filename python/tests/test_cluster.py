"""The Python clients against cluster nodes (docs/cluster.md, "Routing"): one nats-server
(the pinned one, scripts/nats-server), `amberdb cluster init`, two `amberdb serve --cluster`
nodes. Given both as addresses, `Client` and `AsyncClient` send each write on to its
partition's owner when a node answers `moved`, read their own writes from any node
(`min_seq`), and wait out the death of an owner."""
import asyncio
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

import amberdb
from amberdb.client import partition_of_user

from conftest import amberdb_command

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def nats(tmp_path):
    binary = subprocess.run([str(REPO / "scripts" / "nats-server")], capture_output=True,
                            text=True, check=True).stdout.strip()
    port = free_port()
    conf = tmp_path / "nats.conf"
    conf.write_text(f'listen: 127.0.0.1:{port}\nmax_payload: 8MB\n'
                    f'jetstream {{ store_dir: "{tmp_path / "js"}", sync_interval: always }}\n')
    proc = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"nats://127.0.0.1:{port}"
    for _ in range(100):
        done = subprocess.run(
            [amberdb_command(), "cluster", "init", "--nats", url, "--partitions",
             str(PARTITIONS), "--replicas", "1", "--embedder", "hashing",
             # One server, the test's own: it vouches for its settings.
             "--unchecked-servers"],
            capture_output=True, text=True)
        if done.returncode == 0:
            break
        time.sleep(0.1)
    else:
        proc.kill()
        raise AssertionError(f"cluster init failed: {done.stderr}")
    yield url
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)


def owners(client: amberdb.Client) -> dict:
    stats = client.call("STATS")
    return {p["partition"]: p["owner"] for p in stats["cluster"]["partitions"]}


def user_in(partition: int, prefix: str) -> str:
    return next(f"{prefix}-{i}" for i in range(10_000)
                if partition_of_user(f"{prefix}-{i}", PARTITIONS) == partition)


def test_clients_follow_moved_read_their_writes_and_wait_out_a_dead_owner(nats, start_server):
    nodes = [start_server("--cluster", nats, "--node", f"n{i}") for i in range(2)]
    addresses = [f"{n.host}:{n.port}" for n in nodes]
    deadline = time.monotonic() + 30
    with amberdb.Client(nodes[0].host, nodes[0].port, seeds=addresses[1:]) as db:
        while None in owners(db).values():
            assert time.monotonic() < deadline, owners(db)
            time.sleep(0.1)
        held = owners(db)
        assert set(held.values()) <= {"n0", "n1"}
        stored = {}
        for p in range(PARTITIONS):
            user = user_in(p, "user")
            result = db.store(f"a fact of partition {p}", user_id=user)
            assert result.memory_id >> 40 == p
            stored[result.memory_id] = f"a fact of partition {p}"
        # Read back through whichever node the client is on: each read carries min_seq.
        for memory_id, content in stored.items():
            assert db.get(memory_id).content == content
        # Every node has every write once it has applied it (min_seq by hand here).
        for node in nodes:
            with amberdb.Client(node.host, node.port) as one:
                for memory_id, content in stored.items():
                    seq = db.written_seq(memory_id >> 40)
                    assert seq is not None
                    reply = one.call("GET_BY_MEMORY_ID", memory_id=memory_id, min_seq=seq)
                    assert reply["memory"]["content"] == content
        # The owner of partition 0 dies: the client waits until the other node owns it.
        dead = int(held[0][1:])
        nodes[dead].stop(signal.SIGKILL)
        started = time.monotonic()
        result = db.store("after the owner died", user_id=user_in(0, "after"))
        assert result.memory_id >> 40 == 0
        assert time.monotonic() - started < 15
        survivor = nodes[1 - dead]
        with amberdb.Client(survivor.host, survivor.port) as one:
            assert one.get(result.memory_id).content == "after the owner died"
            for memory_id, content in stored.items():
                assert one.get(memory_id).content == content

    async def concurrently():
        survivor = nodes[1 - dead]
        dead_node = nodes[dead]
        # The dead node's address first: the client goes on to the next one.
        async with await amberdb.AsyncClient.connect(
                dead_node.host, dead_node.port,
                seeds=[f"{survivor.host}:{survivor.port}"]) as adb:
            results = await asyncio.gather(*(
                adb.store(f"async {p}", user_id=user_in(p, "async")) for p in range(PARTITIONS)))
            for p, r in enumerate(results):
                assert r.memory_id >> 40 == p
                assert (await adb.get(r.memory_id)).content == f"async {p}"

    asyncio.run(concurrently())
