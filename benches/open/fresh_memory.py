"""What touching memory costs a process on this host: fresh anonymous memory against a file
already in the page cache (docs/benchmarks.md, "What fresh memory costs on a VM").

Each round sleeps PAUSE seconds (long enough for a VM balloon's free page reporting to hand
freed memory back to the host), then times, in a new child process each:
  - fresh: MiB of anonymous memory mapped, advised for huge pages as mimalloc does, and
    written once a page;
  - mapped: FILE mapped read-only with MAP_POPULATE and read once a page (run it on a file
    that is in the page cache, such as a store's checkpoint just read).
Prints both per round and the milliseconds per MiB.

Usage: python3 benches/open/fresh_memory.py MIB FILE [ROUNDS] [PAUSE]
"""

import mmap
import os
import subprocess
import sys
import time

PAGE = 4096


def fresh(mib: int) -> float:
    n = mib << 20
    started = time.perf_counter()
    m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_HUGEPAGE)
    for i in range(0, n, PAGE):
        m[i] = 1
    return time.perf_counter() - started


def mapped(path: str) -> tuple[float, int]:
    with open(path, "rb") as f:
        n = os.fstat(f.fileno()).st_size
        started = time.perf_counter()
        m = mmap.mmap(
            f.fileno(), n, flags=mmap.MAP_PRIVATE | mmap.MAP_POPULATE, prot=mmap.PROT_READ
        )
        total = 0
        for i in range(0, n, PAGE):
            total += m[i]
        return time.perf_counter() - started, n >> 20


def child(what: str, arg: str) -> float:
    out = subprocess.run(
        [sys.executable, __file__, "--child", what, arg], capture_output=True, text=True, check=True
    )
    return float(out.stdout)


def main() -> None:
    if sys.argv[1] == "--child":
        what, arg = sys.argv[2], sys.argv[3]
        print(fresh(int(arg)) if what == "fresh" else mapped(arg)[0])
        return
    mib, path = int(sys.argv[1]), sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    pause = float(sys.argv[4]) if len(sys.argv) > 4 else 4.0
    file_mib = os.path.getsize(path) >> 20
    for r in range(rounds):
        time.sleep(pause)
        f = child("fresh", str(mib))
        time.sleep(pause)
        m = child("mapped", path)
        print(
            f"round {r + 1}: fresh {mib} MiB {f:.3f} s ({1000 * f / mib:.2f} ms/MiB); "
            f"mapped {file_mib} MiB {m:.3f} s ({1000 * m / max(file_mib, 1):.3f} ms/MiB)",
            flush=True,
        )


if __name__ == "__main__":
    main()
