"""The Python API's overhead per call against the Rust library, in one run.

    python python/bench/overhead.py [N] [path/to/api_calls]

Runs the Rust bench binary (`cargo build --release -p amberdb-benches --bin api_calls`) and the
same calls through `amberdb.Store` (the installed wheel), three times each, alternating, and
prints the medians and the difference per call: N stores (hashing embedder, default hooks,
durable) then N searches (no access counted), the texts of benches/src/bin/api_calls.rs.
Also times the raw native call (`NativeStore.call`, JSON text in and out, no result types)
to split the cost between the boundary with the command table, and the typed results.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import amberdb
from amberdb import _amberdb


def note(i):
    return f"note {i}: the cache {i % 37} warms in {i % 11} seconds at boot"


def query(i):
    return f"cache {i % 37} warm boot"


def summary(micros):
    micros = sorted(micros)
    return {"median_us": micros[len(micros) // 2], "p99_us": micros[round((len(micros) - 1) * 0.99)]}


def python_run(n):
    with tempfile.TemporaryDirectory() as d, amberdb.Store(d, embedder="hashing") as db, \
            tempfile.TemporaryDirectory() as d2, amberdb.Store(d2, embedder="hashing") as raw_db:
        stores, raw_stores, searches, raw = [], [], [], []
        for i in range(n):
            t = time.perf_counter()
            db.store(note(i))
            stores.append((time.perf_counter() - t) * 1e6)
            t = time.perf_counter()
            raw_db._native.call("STORE_MEMORY", json.dumps({"content": note(i)}))
            raw_stores.append((time.perf_counter() - t) * 1e6)
        for i in range(n):
            t = time.perf_counter()
            db.search(query(i), count_access=False)
            searches.append((time.perf_counter() - t) * 1e6)
            t = time.perf_counter()
            db._native.call("SEARCH_MEMORIES", json.dumps({"query": query(i), "count_access": False}))
            raw.append((time.perf_counter() - t) * 1e6)
        return {"store": summary(stores), "raw_store": summary(raw_stores),
                "search": summary(searches), "raw_search": summary(raw)}


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    binary = sys.argv[2] if len(sys.argv) > 2 else os.path.join("target", "release", "api_calls")
    rust, py = [], []
    for _ in range(3):
        rust.append(json.loads(subprocess.run([binary, str(n)], check=True, capture_output=True,
                                              text=True).stdout))
        py.append(python_run(n))
    med = lambda runs, kind: statistics.median(r[kind]["median_us"] for r in runs)  # noqa: E731
    out = {
        "calls": n,
        "amberdb": amberdb.__version__,
        "rust_store_us": med(rust, "store"), "python_store_us": med(py, "store"),
        "rust_search_us": med(rust, "search"), "python_search_us": med(py, "search"),
        "python_raw_store_us": med(py, "raw_store"),
        "python_raw_search_us": med(py, "raw_search"),
    }
    out["store_overhead_us"] = out["python_store_us"] - out["rust_store_us"]
    out["search_overhead_us"] = out["python_search_us"] - out["rust_search_us"]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
