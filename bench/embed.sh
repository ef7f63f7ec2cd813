#!/usr/bin/env bash
# Embedding throughput, situate against the Python peer in the same run on the same texts:
# all-MiniLM-L6-v2 on the first N SciFact passages (title + abstract, 256-token truncation,
# length-sorted batches) and M queries one at a time, 2 threads each, runs alternated.
# The peers, with the same weights (situate's installed model directory): sentence-transformers
# on PyTorch CPU (bench/embed_peer.py), and ONNX Runtime on the same model exported to ONNX,
# in f32 and in its int8 dynamic-quantized form as fastembed ships it
# (bench/embed_onnx_peer.py; the export is cached in bench/.onnx and checked against the
# reference cosine). The goal is measured against the fastest of them. situate runs three
# times: its default (f32 passages, int8 queries), with SITUATE_QUERY_PRECISION=f32 (the
# reference arithmetic throughout), and as `all-minilm-l6-v2:q8` (int8 passages and queries,
# the arithmetic of ONNX Runtime's int8 model; bench/int8_quality.sh checks what int8
# costs in nDCG@10).
#
#   bench/embed.sh [PASSAGES] [QUERIES] [ROUNDS]     (default 256 200 2)
#
# Running time: about 2.5 minutes per round at the defaults once built and installed (the
# first run installs PyTorch, sentence-transformers and ONNX Runtime in bench/.venv-torch,
# ~2 minutes, and builds situate in release, ~6 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
passages=${1:-256}
queries=${2:-200}
rounds=${3:-2}
data=../shared/data/scifact
venv=bench/.venv-torch
. bench/torch_venv.sh
torch_venv "$venv"
if ! "$venv/bin/python" -c 'import onnxruntime, onnx, onnxscript' 2>/dev/null; then
  "$venv/bin/pip" install --quiet "onnxruntime==1.32.0" "onnx==1.23.2" "onnxscript==0.7.2"
fi
cargo build --release --locked -q -p situate -p situate-bench
bin_dir="${CARGO_TARGET_DIR:-target}/release"
bin="$bin_dir/situate"
bench="$bin_dir/situate-bench"
"$bin" models install all-minilm-l6-v2 >/dev/null
model_dir=$("$bin" models list --json | python3 -c 'import json,sys; print(next(m["path"] for m in json.load(sys.stdin)["models"] if m["name"]=="all-minilm-l6-v2"))')
for round in $(seq "$rounds"); do
  echo "== round $round"
  OPENBLAS_NUM_THREADS=1 "$venv/bin/python" bench/embed_peer.py "$model_dir" "$data" "$passages" "$queries" 2 2>/dev/null | tail -1
  OPENBLAS_NUM_THREADS=1 "$venv/bin/python" bench/embed_onnx_peer.py "$model_dir" "$data" "$passages" "$queries" 2 bench/.onnx f32 int8 2>/dev/null | tail -2
  "$bench" embed --dataset "$data" --passages "$passages" --queries "$queries" | tail -1 | sed 's/^/situate (f32 passages, int8 queries) /'
  SITUATE_QUERY_PRECISION=f32 "$bench" embed --dataset "$data" --passages "$passages" --queries "$queries" | tail -1 | sed 's/^/situate (f32) /'
  "$bench" embed --model all-minilm-l6-v2:q8 --dataset "$data" --passages "$passages" --queries "$queries" | tail -1 | sed 's/^/situate (int8 passages and queries) /'
done
