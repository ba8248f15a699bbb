"""How long a server takes to listen on a store: starts `amberdb serve --embedder hashing` on
DIR N times, each time timing from the start to its `listening on` line, then SIGKILLs it (a
store opened with nothing written is left as it was) and waits PAUSE seconds (default 0.5).
Prints each start with what the process held and had spent at `listening on` (anonymous
memory, the part of it in huge pages, minor faults, user and system CPU seconds, from /proc),
the log frames it replayed, and the median.

A PAUSE longer than a VM balloon's free page reporting delay (a few seconds) makes every start
touch memory the host took back (docs/benchmarks.md, "What fresh memory costs on a VM").

Usage: python3 benches/open/server_starts.py target/release/amberdb DIR [N] [PAUSE]
(docs/benchmarks.md, "Opening 1M memories after the keyword index")
"""

import os
import re
import subprocess
import sys
import tempfile
import time


def held(pid: int) -> str:
    """What process `pid` holds and has spent, read from /proc."""
    rollup = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f.readlines()[1:]:
            name, value = line.split(":", 1)
            rollup[name] = int(value.split()[0])
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    minflt, utime, stime = int(fields[7]), int(fields[11]), int(fields[12])
    return (
        f"anon {rollup['Anonymous'] >> 10} MiB (huge {rollup['AnonHugePages'] >> 10}), "
        f"{minflt} minor faults, user {utime / tick:.2f} s, system {stime / tick:.2f} s"
    )


def main() -> None:
    binary, store = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    pause = float(sys.argv[4]) if len(sys.argv) > 4 else 0.5
    times = []
    log = tempfile.TemporaryFile()
    for _ in range(runs):
        log.seek(0)
        log.truncate()
        started = time.monotonic()
        server = subprocess.Popen(
            [binary, "serve", "--port", "0", "--embedder", "hashing", "--data-dir", store],
            stdout=subprocess.PIPE,
            stderr=log,
        )
        line = server.stdout.readline().decode()
        took = time.monotonic() - started
        state = held(server.pid) if line.startswith("listening on ") else ""
        server.kill()
        server.wait()
        if not line.startswith("listening on "):
            sys.exit(f"the server did not start: {line!r}")
        times.append(took)
        log.seek(0)
        replayed = re.search(rb"replayed_frames: (\d+)", log.read())
        frames = replayed.group(1).decode() if replayed else "?"
        print(f"{took:.2f} s ({frames} log frames replayed): {state}", flush=True)
        time.sleep(pause)
    print(" ".join(f"{t:.2f}" for t in times), f"median {sorted(times)[runs // 2]:.2f} s")


if __name__ == "__main__":
    main()
