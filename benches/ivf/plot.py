"""Draws the recall-QPS curves of the IVF comparison (benches/ivf/run.sh) as PNGs for docs:
docs/img/ivf-recall-qps-<N>.png, one panel per thread count, from amberdb-N.json and
peers-N.json.

Usage: python plot.py <dir> <N> <out.png>
"""

import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    d, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    ours = json.load(open(os.path.join(d, f"amberdb-{n}.json")))
    peers = json.load(open(os.path.join(d, f"peers-{n}.json")))
    rows = ours["results"] + peers["results"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
    for ax, threads in zip(axes, (1, 2)):
        names = list(dict.fromkeys(r["name"] for r in rows))
        for name in names:
            pts = [r for r in rows if r["name"] == name and r["threads"] == threads]
            if not pts:
                continue
            pts.sort(key=lambda r: r["recall"])
            style = "o-" if name.startswith("amberdb IVF") else ("s" if len(pts) == 1 else ".--")
            ax.plot([r["recall"] for r in pts], [r["qps"] for r in pts], style, label=name,
                    linewidth=2.2 if name.startswith("amberdb IVF") else 1.2)
        ax.axvline(0.95, color="grey", linewidth=0.8, linestyle=":")
        ax.set_xlim(0.5, 1.001)
        ax.set_yscale("log")
        ax.set_xlabel("recall@10")
        ax.set_title(f"{n:,} real-text passages, {threads} thread{'s' if threads > 1 else ''}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("queries per second (log)")
    axes[1].legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
