#!/usr/bin/env bash
# Embedding speed of the stronger embedders (issue 44), situate against the fastest Python
# runtimes on the same weights in the same run: the first N SciFact passages (title + blank
# line + abstract, each cut at the model's window, length-sorted batches) and M queries one
# at a time, 2 threads each, the model's own prompts.
#
#   situate-bench embed: the default (f32 passages, int8 queries), SITUATE_QUERY_PRECISION=f32
#     (the reference arithmetic throughout), and NAME:q8 (int8 passages and queries);
#   EmbeddingGemma-300M and all-mpnet-base-v2: sentence-transformers on PyTorch, and ONNX
#     Runtime (f32 and its dynamic int8) on the body exported by PyTorch's exporter;
#   nomic-embed-text-v1.5: llama.cpp's embedding mode (llama-cpp-python) on the same GGUF.
#
#   bench/embedders_speed.sh [PASSAGES] [QUERIES] [ROUNDS] [MODEL ...]   (default 32 50 1, all three)
#
# Running time: about 6 minutes per round at the defaults once built, installed and exported
# (the venvs are bench/embed.sh's and bench/llm_speed.sh's: PyTorch, sentence-transformers,
# ONNX Runtime; llama-cpp-python; the ONNX exports are cached in bench/.onnx).
set -euo pipefail
cd "$(dirname "$0")/.."
passages=${1:-32}
queries=${2:-50}
rounds=${3:-1}
shift $(( $# < 3 ? $# : 3 ))
models=${*:-embeddinggemma-300m all-mpnet-base-v2 nomic-embed-text-v1.5}
data=$(cd ../shared/data/scifact && pwd)
venv=bench/.venv-torch
llama=bench/out/venv-llama
[ -x "$venv/bin/python" ] || { echo "run bench/embed.sh once first (it makes $venv)" >&2; exit 2; }
cargo build --release --locked -q -p situate -p situate-bench
bin_dir="${CARGO_TARGET_DIR:-target}/release"
bench="$bin_dir/situate-bench"
path_of() {
  "$bin_dir/situate" models list --json | python3 -c "import json,sys; print(next(m['path'] for m in json.load(sys.stdin)['models'] if m['name']=='$1'))"
}
for round in $(seq "$rounds"); do
  for model in $models; do
    "$bin_dir/situate" models install "$model" >/dev/null
    dir=$(path_of "$model")
    echo "== round $round: $model"
    "$bench" embed --model "$model" --dataset "$data" --passages "$passages" --queries "$queries" | tail -1 | sed 's/^/situate default (f32 passages, int8 queries) /'
    SITUATE_QUERY_PRECISION=f32 "$bench" embed --model "$model" --dataset "$data" --passages "$passages" --queries "$queries" | tail -1 | sed 's/^/situate f32 /'
    "$bench" embed --model "$model:q8" --dataset "$data" --passages "$passages" --queries "$queries" | tail -1 | sed 's/^/situate int8 /'
    case "$model" in
      nomic-embed-text-v1.5)
        [ -x "$llama/bin/python" ] || { echo "run bench/llm_speed.sh once first (it makes $llama)" >&2; exit 2; }
        (cd bench && OPENBLAS_NUM_THREADS=1 "../$llama/bin/python" embedders_peer.py llama "$dir/nomic-embed-text-v1.5.f16.gguf" "$data" "$passages" "$queries" 2 2>/dev/null | tail -1) ;;
      *)
        (cd bench && OPENBLAS_NUM_THREADS=1 "../$venv/bin/python" embedders_peer.py st "$dir" "$data" "$passages" "$queries" 2 2>/dev/null | tail -1)
        (cd bench && OPENBLAS_NUM_THREADS=1 "../$venv/bin/python" embedders_peer.py onnx "$dir" "$data" "$passages" "$queries" 2 .onnx f32 int8 2>/dev/null | tail -2) ;;
    esac
  done
done
