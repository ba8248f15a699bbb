#!/usr/bin/env bash
# Side by side, one run, same vectors: amberdb's exact scan against FAISS, usearch and sqlite-vec
# from their PyPI packages (pinned below, installed into a private venv under target/).
#   benches/peers/run.sh [rows=1000000] [queries=32] [sqlite_queries=8]
# Not part of CI: at 1M rows it needs ~8 GB of memory and a few minutes (sqlite-vec's load).
set -euo pipefail
cd "$(dirname "$0")/../.."
rows="${1:-1000000}"; queries="${2:-32}"; sqlite_queries="${3:-8}"
out="target/bench-data/peers-$rows"
venv="target/peers-venv"
command -v python3 >/dev/null || { echo "python3 not found: install Python 3.9+" >&2; exit 1; }
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || { echo "python3 -m venv failed: install the python3-venv package" >&2; exit 1; }
fi
"$venv/bin/pip" install --quiet numpy==2.4.6 faiss-cpu==1.15.1 usearch==2.26.6 sqlite-vec==0.1.9 pysqlite3-binary==0.5.4.post2
cargo run --release --locked -p amberdb-benches --bin peers -- "$rows" "$queries" "$out"
"$venv/bin/python" benches/peers/run.py "$out" "$sqlite_queries"
