"""How long a server takes to listen on a store: starts `amberdb serve --embedder hashing` on
DIR N times, each time timing from the start to its `listening on` line, then SIGKILLs it (a
store opened with nothing written is left as it was). Prints each start and the median.

Usage: python3 benches/open/server_starts.py target/release/amberdb DIR [N]
(docs/benchmarks.md, "Opening 1M memories after the keyword index")
"""

import subprocess
import sys
import time


def main() -> None:
    binary, store = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    times = []
    for _ in range(runs):
        started = time.monotonic()
        server = subprocess.Popen(
            [binary, "serve", "--port", "0", "--embedder", "hashing", "--data-dir", store],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        line = server.stdout.readline().decode()
        times.append(time.monotonic() - started)
        server.kill()
        server.wait()
        if not line.startswith("listening on "):
            sys.exit(f"the server did not start: {line!r}")
        time.sleep(0.5)
    print(" ".join(f"{t:.2f}" for t in times), f"median {sorted(times)[runs // 2]:.2f} s")


if __name__ == "__main__":
    main()
