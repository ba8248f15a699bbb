"""Leaves a store with a log tail to replay: starts `amberdb serve --embedder hashing` on DIR,
pauses its maintenance (so no checkpoint takes the tail, and no write waits for one), stores N
memories over 4 connections (pipelined, 64 at a time, the semantic dedup hook skipped and the
memory limit raised, as in the kill loop), then SIGKILLs the server. The next open replays
those N frames after the last checkpoint: what an open pays after a kill loop's longest tails
(docs/benchmarks.md, "Fresh memory an open touches").

With `running` after N, maintenance is left running: the N stores then meet the checkpoints
and, past `log_tail_limit`, wait for them; it prints the stores' rate, the round trips of
their batches of 64 (p50, p99, max) and what STATS says of the checkpoints and the waits.

Usage: python3 benches/open/log_tail.py target/release/amberdb DIR N [running]
"""

import json
import socket
import subprocess
import sys
import threading
import time


def stores(addr: tuple, tag: str, n: int, failures: list, batches: list) -> None:
    """Stores `n` memories on one connection, 64 lines in flight, each batch's round trip in
    `batches`; the first reply that is not ok goes to `failures` and ends the connection."""
    with socket.create_connection(addr) as conn:
        replies = conn.makefile("rb")
        done = 0
        while done < n:
            batch = min(64, n - done)
            lines = "".join(
                "STORE "
                + json.dumps(
                    {
                        "content": f"{tag} note {done + i} about the tail of the log",
                        "skip_hooks": ["semantic_dedup"],
                    }
                )
                + "\n"
                for i in range(batch)
            )
            sent = time.monotonic()
            conn.sendall(lines.encode())
            for _ in range(batch):
                reply = json.loads(replies.readline())
                if not reply.get("ok"):
                    failures.append(reply)
                    return
            batches.append(time.monotonic() - sent)
            done += batch


def main() -> None:
    binary, store, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    running = sys.argv[4:] == ["running"]
    if sys.argv[4:] not in ([], ["running"]):
        sys.exit(f"unknown arguments {sys.argv[4:]}: usage in this file's docstring")
    server = subprocess.Popen(
        [binary, "serve", "--port", "0", "--embedder", "hashing", "--data-dir", store]
        + ["--memory-limit", "10000000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    line = server.stdout.readline().decode()
    if not line.startswith("listening on "):
        server.kill()
        sys.exit(f"the server did not start: {line!r}")
    host, port = line.split()[2].rsplit(":", 1)
    addr = (host, int(port))
    if not running:
        with socket.create_connection(addr) as conn:
            conn.sendall(b'MAINTENANCE {"paused": true}\n')
            reply = json.loads(conn.makefile("rb").readline())
            if not reply.get("ok") or not reply["maintenance"]["paused"]:
                server.kill()
                sys.exit(f"maintenance was not paused: {reply}")
    # Texts new to the store at every run: an exact duplicate would be refused.
    tag = f"run {time.time_ns()}"
    failures, batches = [], []
    writers = [
        threading.Thread(
            target=stores,
            args=(addr, f"{tag} writer {w}", n // 4 + (w < n % 4), failures, batches),
        )
        for w in range(4)
    ]
    started = time.monotonic()
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    took = time.monotonic() - started
    if running and not failures:
        with socket.create_connection(addr) as conn:
            conn.sendall(b"STATS {}\n")
            m = json.loads(conn.makefile("rb").readline())["store"]["maintenance"]
        batches.sort()
        at = lambda q: batches[round((len(batches) - 1) * q)] * 1000
        print(
            f"{n / took:.0f} stores/s; batches of 64: p50 {at(0.5):.1f} ms, "
            f"p99 {at(0.99):.1f} ms, max {at(1.0):.1f} ms; {m['checkpoints']} checkpoints, "
            f"{m.get('writes_waited')} writes waited at the log tail limit, the longest "
            f"{m.get('longest_write_wait_seconds')} s"
        )
    server.kill()
    server.wait()
    if failures:
        sys.exit(f"a store failed: {failures[0]}")
    if not running:
        print(f"stored {n} memories after the last checkpoint; the server was killed")


if __name__ == "__main__":
    main()
