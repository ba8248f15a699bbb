"""What a LangGraph store call costs on amberdb, and what the adapter adds, in one run.

    python python/bench/langgraph_store.py [N] [minilm|hashing]

Needs the wheel and `langgraph` installed (scripts/python-test's venv has both). Puts N items
(`{"memory": ..., "n": i}`, index field `memory`) into `AmberStore` over an embedded
`amberdb.Store` (durable: each put is fsynced before it returns), then gets and searches them
(`limit=10`; with a query, and with a query and a filter). The same puts, gets and searches
through `amberdb.Store.put_item` / `get_item` / `search` directly give the adapter's share.
Each phase searches its own query texts (a repeated query would be answered from the
embedder's cache). Prints medians and p99 per call in microseconds, as JSON.
"""
import json
import statistics
import sys
import tempfile
import time

import amberdb
from amberdb.langgraph import AmberStore

TOPICS = ["cache", "deploy", "editor", "database", "pytest", "coffee", "flight", "kubernetes"]


def text(i):
    return f"note {i}: the {TOPICS[i % 8]} {i % 37} setting changed in week {i % 11}"


def timed(calls):
    micros = []
    for call in calls:
        t = time.perf_counter()
        call()
        micros.append((time.perf_counter() - t) * 1e6)
    micros.sort()
    return {"median_us": round(statistics.median(micros)), "p99_us": round(micros[int(len(micros) * 0.99) - 1])}


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    embedder = sys.argv[2] if len(sys.argv) > 2 else "hashing"
    out = {"n": n, "embedder": embedder}
    with tempfile.TemporaryDirectory() as d, AmberStore.open(d, embedder=embedder,
                                                             index={"fields": ["memory"]}) as lg:
        ns = ("bench", "u1")
        out["langgraph_put"] = timed(
            lambda i=i: lg.put(ns, f"k{i}", {"memory": text(i), "n": i}) for i in range(n))
        out["langgraph_get"] = timed(lambda i=i: lg.get(ns, f"k{i}") for i in range(0, n, 4))
        out["langgraph_search"] = timed(
            lambda i=i: lg.search(ns, query=text(i * 7), limit=10) for i in range(n // 4))
        out["langgraph_search_filtered"] = timed(
            lambda i=i: lg.search(ns, query=text(i * 7 + 1), filter={"n": {"$lt": n // 2}}, limit=10)
            for i in range(n // 4))
    with tempfile.TemporaryDirectory() as d, amberdb.Store(d, embedder=embedder) as db:
        user = "bench.u1"
        out["store_put_item"] = timed(
            lambda i=i: db.put_item(f"k{i}", {"memory": text(i), "n": i}, text(i), user_id=user)
            for i in range(n))
        out["store_get_item"] = timed(lambda i=i: db.get_item(f"k{i}", user_id=user) for i in range(0, n, 4))
        out["store_search"] = timed(
            lambda i=i: db.search(text(i * 7 + 2), user_id=user, kind="item", strategy="similarity",
                                  limit=10, count_access=False) for i in range(n // 4))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
