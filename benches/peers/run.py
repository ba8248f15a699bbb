"""The peers' half of the side-by-side comparison (run by benches/peers/run.sh).

Loads the vectors and queries amberdb's `peers` binary wrote, times exact top-10 one query at a
time in FAISS (IndexFlatIP), usearch (exact search) and sqlite-vec (vec0 KNN), checks each
one's recall@10 against amberdb's exact ids, and prints one markdown table with amberdb's figures
from the same run.

Usage: python run.py <dir> [sqlite_queries]
"""

import json
import os
import statistics
import sys
import time

import numpy as np

DIM = 384


def recall(found, exact):
    hits = sum(len(set(map(int, f)) & set(e)) for f, e in zip(found, exact))
    return hits / (10 * len(exact))


def timed(fn, queries):
    times, found = [], []
    for q in queries:
        start = time.perf_counter()
        ids = fn(q)
        times.append((time.perf_counter() - start) * 1e3)
        found.append(ids)
    return statistics.median(times), found


def main():
    d = sys.argv[1]
    sqlite_queries = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    xb = np.fromfile(os.path.join(d, "vectors.f32"), dtype="<f4").reshape(-1, DIM)
    xq = np.fromfile(os.path.join(d, "queries.f32"), dtype="<f4").reshape(-1, DIM)
    amberdb = json.load(open(os.path.join(d, "amberdb.json")))
    exact = amberdb["exact_top10"]
    rows = [(r["name"], r["threads"], r["median_ms"], r["recall_at_10"]) for r in amberdb["results"]]

    import faiss

    index = faiss.IndexFlatIP(DIM)
    index.add(xb)
    for threads in (1, 2):
        faiss.omp_set_num_threads(threads)
        ms, found = timed(lambda q: index.search(q[None, :], 10)[1][0], xq)
        rows.append((f"FAISS {faiss.__version__} IndexFlatIP", threads, ms, recall(found, exact)))
    del index

    import usearch
    from usearch.index import MetricKind, search

    for threads in (1, 2):
        ms, found = timed(lambda q: search(xb, q, 10, MetricKind.IP, exact=True, threads=threads).keys, xq)
        rows.append((f"usearch {usearch.__version__} exact", threads, ms, recall(found, exact)))

    # The standard sqlite3 module of many Python builds cannot load extensions; pysqlite3-binary
    # ships its own SQLite that can.
    try:
        import pysqlite3 as sqlite3
    except ImportError:
        import sqlite3

    import sqlite_vec

    db = sqlite3.connect(":memory:")
    db.enable_load_extension(True)
    sqlite_vec.load(db)
    db.execute(f"create virtual table v using vec0(embedding float[{DIM}])")
    start = time.perf_counter()
    with db:
        db.executemany("insert into v(rowid, embedding) values (?, ?)", ((i, xb[i].tobytes()) for i in range(len(xb))))
    load_s = time.perf_counter() - start
    sql = "select rowid from v where embedding match ? and k = 10 order by distance"
    ms, found = timed(lambda q: [r[0] for r in db.execute(sql, (q.tobytes(),))], xq[:sqlite_queries])
    version = db.execute("select vec_version()").fetchone()[0]
    rows.append((f"sqlite-vec {version} vec0 (L2 on unit vectors)", 1, ms, recall(found, exact[:sqlite_queries])))

    print(f"\n{len(xb):,} vectors x {DIM}, {len(xq)} queries one at a time (sqlite-vec: {sqlite_queries}); "
          f"amberdb kernels: {amberdb['backend']}; sqlite-vec load {load_s:.0f} s\n")
    print("| engine | threads | median ms/query | recall@10 vs exact |")
    print("|---|---|---|---|")
    for name, threads, ms, rec in rows:
        print(f"| {name} | {threads} | {ms:.1f} | {rec:.3f} |")


if __name__ == "__main__":
    main()
