#!/usr/bin/env bash
# situate's kernels at every level this CPU runs, against the machine's limits and ONNX
# Runtime (issue 61; BENCHMARKS.md, "Roofline"). The binary is the portable build
# (x86-64-v2, `RUSTFLAGS="-C target-cpu=x86-64-v2"`, in target-portable/ unless
# PORTABLE_TARGET names another folder), so that a level's path runs only that level's
# instructions: in a `target-cpu=native` build on an AVX-512 machine, LLVM may use AVX-512
# instructions inside the AVX2 functions too.
#
#   bench/kernels.sh [ROUNDS]        (default 2)
#
# Per round: `situate-bench roofline` at each level (peaks by small loops, then the int8
# product on MiniLM's shapes), then MiniLM `:q8` (int8 passages and queries) passages/s
# and query p50 at each level, and ONNX Runtime 1.32's int8 model in the same round
# (bench/embed_onnx_peer.py; it chooses its own kernels, the CPU's best: say so when
# comparing a lower level of situate with it). 256 SciFact passages, 200 queries, 2 threads.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
data=../shared/data/scifact
portable=${PORTABLE_TARGET:-target-portable}
venv=bench/.venv-torch
. bench/torch_venv.sh
torch_venv "$venv"
if ! "$venv/bin/python" -c 'import onnxruntime, onnx, onnxscript' 2>/dev/null; then
  "$venv/bin/pip" install --quiet "onnxruntime==1.32.0" "onnx==1.23.2" "onnxscript==0.7.2"
fi
cargo build --release --locked -q -p situate
CARGO_TARGET_DIR=$portable RUSTFLAGS="-C target-cpu=x86-64-v2" \
  cargo build --release --locked -q -p situate-bench
bench=$portable/release/situate-bench
bin="${CARGO_TARGET_DIR:-target}/release/situate"
"$bin" models install all-minilm-l6-v2 >/dev/null
model_dir=$("$bin" models list --json | python3 -c 'import json,sys; print(next(m["path"] for m in json.load(sys.stdin)["models"] if m["name"]=="all-minilm-l6-v2"))')
grep -m1 '^model name' /proc/cpuinfo || true
echo "cpu flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|f16c|avx512f|avx512bw|avx512_vnni|avx_vnni)$' | tr '\n' ' ')"
levels=$("$bench" roofline --seconds 0.1 2>/dev/null | sed -n 's/.*this CPU runs \([^)]*\)).*/\1/p' | tr -d ',' | tr ' ' '\n' | grep -v scalar)
for round in $(seq "$rounds"); do
  echo "== round $round"
  for level in $levels; do
    echo "-- $level"
    SITUATE_CPU=$level "$bench" roofline 2>/dev/null
    SITUATE_CPU=$level "$bench" embed --model all-minilm-l6-v2:q8 --dataset "$data" --passages 256 --queries 200 2>/dev/null | tail -1
  done
  echo "-- ONNX Runtime"
  OPENBLAS_NUM_THREADS=1 "$venv/bin/python" bench/embed_onnx_peer.py "$model_dir" "$data" 256 200 2 bench/.onnx int8 2>/dev/null | tail -1
done
