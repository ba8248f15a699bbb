#!/usr/bin/env bash
# The IVF comparison on real text (docs/ivf.md, docs/benchmarks.md "IVF on real text"), one run,
# same vectors: amberdb's exact scans and IVF sweep (benches bin realtext), then FAISS IVF-Flat
# and IVF-SQ8 (same nlist), hnswlib and usearch HNSW (M 16, efConstruction 128) from their
# PyPI packages (pinned below, in a private venv under target/), then the curves as a PNG.
#   benches/ivf/run.sh [rows=100000] [queries=1000]
# Needs the set: scripts/real-text all (not part of CI; ~2.5 hours of embedding for 1M passages).
set -euo pipefail
cd "$(dirname "$0")/../.."
rows="${1:-100000}"; queries="${2:-1000}"
dir="target/real-text"
venv="target/peers-venv"
[ -f "$dir/passages.f32" ] || { echo "no $dir/passages.f32: run scripts/real-text all" >&2; exit 1; }
command -v python3 >/dev/null || { echo "python3 not found: install Python 3.9+" >&2; exit 1; }
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || { echo "python3 -m venv failed: install the python3-venv package" >&2; exit 1; }
fi
"$venv/bin/pip" install --quiet numpy==2.4.6 faiss-cpu==1.15.1 usearch==2.26.6 hnswlib==0.8.0 matplotlib==3.11.2
cargo run --release --locked -p amberdb-benches --bin realtext -- bench "$dir" "$rows" "$queries"
"$venv/bin/python" benches/ivf/peers.py "$dir" "$rows" "$queries"
mkdir -p docs/img
"$venv/bin/python" benches/ivf/plot.py "$dir" "$rows" "docs/img/ivf-recall-qps-$rows.png"
