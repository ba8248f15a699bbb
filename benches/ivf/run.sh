#!/usr/bin/env bash
# The IVF comparison on real text (docs/ivf.md, docs/benchmarks.md "IVF on real text"), one run,
# same vectors: amberdb's exact scans and IVF sweep, 1-bit and i8 codes (benches bin realtext),
# then FAISS IVF-Flat, IVF-SQ8 and IVF-RaBitQ (alone and refined), hnswlib and usearch HNSW
# (M 16, efConstruction 128) from their PyPI packages (pinned below, in a private venv under
# target/), then the curves as a PNG.
#   benches/ivf/run.sh [rows=100000] [queries=1000]
#   benches/ivf/run.sh --background 1000000 1000    the same, detached, logging to the set's
#                                                   directory (run-N.log), waiting for the set's
#                                                   embedding to reach N rows; safe to run again
# Resumes from a ledger (ledger-N-Q.txt in the set's directory): amberdb's half is done once per
# commit, the peers' once (peers.py resumes peer by peer from peers-N.json), so a run cut by the
# end of a session goes on where it stopped. Delete the ledger (and peers-N.json) to measure all
# of it again.
# Needs the set: scripts/real-text all (not part of CI; ~2.5 hours of embedding for 1M passages),
# kept outside the clone in AMBERDB_REAL_TEXT_DIR (default ~/.cache/amberdb/real-text).
set -euo pipefail
cd "$(dirname "$0")/../.."
dir="${AMBERDB_REAL_TEXT_DIR:-$HOME/.cache/amberdb/real-text}"
if [[ "${1:-}" == "--background" ]]; then
  shift
  log="$dir/run-${1:-100000}.log"
  mkdir -p "$dir"
  AMBERDB_WAIT_FOR_SET=1 nohup "$0" "$@" >>"$log" 2>&1 &
  echo "running in the background (pid $!): tail -f $log"
  exit 0
fi
rows="${1:-100000}"; queries="${2:-1000}"
venv="target/peers-venv"
[ -f "$dir/passages.f32" ] || { echo "no $dir/passages.f32: run scripts/real-text all" >&2; exit 1; }
# A run started while the set is still being embedded (scripts/real-text embed, which resumes)
# waits until it holds the rows asked for.
while (( $(stat -c %s "$dir/passages.f32") / 1536 < rows )); do
  [[ -n "${AMBERDB_WAIT_FOR_SET:-}" ]] || { echo "$dir/passages.f32 holds $(( $(stat -c %s "$dir/passages.f32") / 1536 )) rows, $rows asked: run scripts/real-text embed (or AMBERDB_WAIT_FOR_SET=1 to wait)" >&2; exit 1; }
  sleep 60
done
command -v python3 >/dev/null || { echo "python3 not found: install Python 3.9+" >&2; exit 1; }
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || { echo "python3 -m venv failed: install the python3-venv package" >&2; exit 1; }
fi
"$venv/bin/pip" install --quiet numpy==2.4.6 faiss-cpu==1.15.1 usearch==2.26.6 hnswlib==0.8.0 matplotlib==3.11.2
ledger="$dir/ledger-$rows-$queries.txt"
commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- index benches || echo -dirty)"
done_before() { [ -f "$ledger" ] && grep -qxF "$1" "$ledger"; }
echo "$(date -u +%FT%TZ) run $rows × $queries at $commit"
# The memory-bandwidth floor of this run, beside its curves.
cargo run --release --locked -q -p amberdb-benches --bin membw | tee "$dir/membw-$rows.txt"
if done_before "amberdb $commit"; then
  echo "amberdb's half done at $commit (ledger $ledger)"
else
  cargo run --release --locked -p amberdb-benches --bin realtext -- bench "$dir" "$rows" "$queries"
  echo "amberdb $commit" >>"$ledger"
fi
"$venv/bin/python" benches/ivf/peers.py "$dir" "$rows" "$queries"
echo "peers" >>"$ledger"
mkdir -p docs/img
"$venv/bin/python" benches/ivf/plot.py "$dir" "$rows" "docs/img/ivf-recall-qps-$rows.png"
echo "$(date -u +%FT%TZ) done"
