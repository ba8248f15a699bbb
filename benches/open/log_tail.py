"""Leaves a store with a log tail to replay: starts `amberdb serve --embedder hashing` on DIR,
pauses its maintenance (so no checkpoint takes the tail, and no write waits for one), stores N
memories over 4 connections (pipelined, 64 at a time, the semantic dedup hook skipped and the
memory limit raised, as in the kill loop), then SIGKILLs the server. The next open replays
those N frames after the last checkpoint: what an open pays after a kill loop's longest tails
(docs/benchmarks.md, "Fresh memory an open touches").

Usage: python3 benches/open/log_tail.py target/release/amberdb DIR N
"""

import json
import socket
import subprocess
import sys
import threading
import time


def stores(addr: tuple, tag: str, n: int, failures: list) -> None:
    """Stores `n` memories on one connection, 64 lines in flight; the first reply that is not
    ok goes to `failures` and ends the connection."""
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
            conn.sendall(lines.encode())
            for _ in range(batch):
                reply = json.loads(replies.readline())
                if not reply.get("ok"):
                    failures.append(reply)
                    return
            done += batch


def main() -> None:
    binary, store, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
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
    with socket.create_connection(addr) as conn:
        conn.sendall(b'MAINTENANCE {"paused": true}\n')
        reply = json.loads(conn.makefile("rb").readline())
        if not reply.get("ok") or not reply["maintenance"]["paused"]:
            server.kill()
            sys.exit(f"maintenance was not paused: {reply}")
    # Texts new to the store at every run: an exact duplicate would be refused.
    tag = f"run {time.time_ns()}"
    failures = []
    writers = [
        threading.Thread(
            target=stores,
            args=(addr, f"{tag} writer {w}", n // 4 + (w < n % 4), failures),
        )
        for w in range(4)
    ]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    server.kill()
    server.wait()
    if failures:
        sys.exit(f"a store failed: {failures[0]}")
    print(f"stored {n} memories after the last checkpoint; the server was killed")


if __name__ == "__main__":
    main()
