#!/usr/bin/env bash
# MiniLM embedding figures side by side with raw ONNX Runtime (Python onnxruntime 1.31.1 on the
# same graph and texts), in one run: the full tables once each, then the headline figures
# (2 threads: short texts in 32s, long in 8s, single short texts) alternating HEADLINE_ROUNDS
# times (default 8), because this shared machine drifts by ±30% within minutes: compare the
# medians. Needs scripts/fetch-model (run here first). The Python
# venv lives in target/embed-venv.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/fetch-model
model_dir="${AMBERDB_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/amberdb/all-MiniLM-L6-v2}"
venv=target/embed-venv
if [[ ! -x "$venv/bin/python" ]]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet onnxruntime==1.31.1 tokenizers==0.23.3 numpy==2.4.6
fi
cargo build --release --locked -p amberdb-benches --bin embedbench
echo "## amberdb OnnxEmbedder"
target/release/embedbench
echo
echo "## raw ONNX Runtime (Python)"
"$venv/bin/python" benches/embed/raw_ort.py "$model_dir" target/bench-data
echo
echo "## headline, alternating (sentences/s)"
for _ in $(seq "${HEADLINE_ROUNDS:-8}"); do
  target/release/embedbench headline
  "$venv/bin/python" benches/embed/raw_ort.py "$model_dir" target/bench-data headline
done
