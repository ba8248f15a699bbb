#!/usr/bin/env python3
"""The table docs/benchmarks.md quotes from one run of benches/ivf/run.sh: for every index and
thread count, queries per second at recall@10 0.95 and 0.99, interpolated linearly between the
two points of its sweep around the target (recall rises with the parameter; queries per second
between those two points is taken as a straight line in recall), and its build time and bytes.

  benches/ivf/summary.py DIR N     reads DIR/amberdb-N.json and DIR/peers-N.json
"""
import json
import os
import sys


def at(points, target):
    """q/s at `target` recall from (recall, qps) points sorted by the sweep's parameter."""
    for (r0, q0), (r1, q1) in zip(points, points[1:]):
        if r0 < target <= r1:
            return q0 + (q1 - q0) * (target - r0) / (r1 - r0)
    if points and points[0][0] >= target:
        return points[0][1]
    return None


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    d, n = sys.argv[1], sys.argv[2]
    ours = json.load(open(os.path.join(d, f"amberdb-{n}.json")))
    peers = json.load(open(os.path.join(d, f"peers-{n}.json")))
    rows = ours["results"] + peers["results"]
    builds = {b["name"]: b for b in peers["builds"]}
    builds["amberdb IVF"] = {"build_seconds": ours["build_seconds"], "index_bytes": ours["index_bytes"]}
    names = []
    for r in rows:
        if r["param"] != "-" and r["name"] not in names:
            names.append(r["name"])
    print("| index | build s | MB | 0.95, 1 thread | 0.95, 2 threads | 0.99, 1 thread | 0.99, 2 threads |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        cells = []
        for target in (0.95, 0.99):
            for threads in (1, 2):
                sweep = sorted((r for r in rows if r["name"] == name and r["threads"] == threads),
                               key=lambda r: float(str(r["param"]).split("=")[-1]))
                q = at([(r["recall"], r["qps"]) for r in sweep], target)
                cells.append("-" if q is None else f"{q:,.0f}")
        b = builds.get(name, {})
        build = f'{b["build_seconds"]:.1f}' if "build_seconds" in b else ""
        size = f'{b["index_bytes"] / 1e6:.1f}' if "index_bytes" in b else ""
        print(f"| {name} | {build} | {size} | " + " | ".join(cells) + " |")
    print(f"\nnlist {ours['nlist']}, built nprobe {ours['nprobe']}; kernels {ours.get('scan_kernels')}, "
          f"bits {ours.get('bit_kernel')}; open {ours.get('open_seconds', 0):.2f} s")


if __name__ == "__main__":
    main()
