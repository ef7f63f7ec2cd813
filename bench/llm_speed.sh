#!/usr/bin/env bash
# Local generation speed: situate's forward pass beside llama.cpp on the same GGUF files, the
# same machine and threads, in the same run (BENCHMARKS.md, "Local generation speed").
#
#   [MODELS="NAME..."] bench/llm_speed.sh [SHARED_DATA_DIR] [DOCS]     (default ../shared/data, 3 documents)
#
#   MODELS  catalog names (default: both Qwen2.5-Coder models)
#
# For each Qwen2.5-Coder model of the catalog (installed first, pinned and sha256-checked):
#  1. raw speed, llama-bench style: a 512-token prompt, then 128 tokens one at a time,
#     then (situate) 8 sequences side by side: `situate-bench generate` and
#     `bench/llama_cpp_peer.py speed`;
#  2. contexts for the first DOCS documents of Anthropic's codebase set with Anthropic's
#     prompt, greedy, 160 new tokens at most: situate writing 8 replies side by side and
#     then one at a time (checking the contexts are identical), and llama.cpp on the exact
#     same prompts one after the other (it reuses the document's KV cache between them).
# llama.cpp is the `llama-cpp-python` package (it vendors llama.cpp and builds it with CMake
# and a C++ compiler, ~10 minutes on 2 cores), installed in bench/out/venv-llama.
# Expected running time: ~15 minutes for the builds, then ~40 minutes with 3 documents.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-../shared/data}
docs=${2:-3}
out=bench/out/llm-speed
mkdir -p "$out"
venv=bench/out/venv-llama
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import llama_cpp" 2>/dev/null; then
  python3 -m venv "$venv"
  CMAKE_ARGS="-DGGML_NATIVE=ON" "$venv/bin/pip" install -q llama-cpp-python==0.3.36 numpy
fi
cargo build --release --locked -p situate -p situate-bench
bin_dir="${CARGO_TARGET_DIR:-target}/release"
threads=$(nproc)
read -r -a models <<< "${MODELS:-qwen2.5-coder-0.5b-instruct qwen2.5-coder-1.5b-instruct}"
for model in "${models[@]}"; do
  "$bin_dir/situate" models install "$model" > /dev/null
  gguf="$("$bin_dir/situate" models list --json | python3 -c "import json,sys; print(next(m['path'] for m in json.load(sys.stdin)['models'] if m['name'] == '$model'))")/$model-q4_k_m.gguf"
  echo "== $model: raw speed"
  "$bin_dir/situate-bench" generate --model "$gguf" --prompt 512 --new-tokens 128 --batch 8
  "$venv/bin/python" bench/llama_cpp_peer.py "$gguf" "$threads" speed 512 128
  echo "== $model: contexts for $docs documents of the codebase set"
  "$bin_dir/situate-bench" contexts --corpus "$data/anthropic-codebase/codebase_chunks.json" \
    --model "$gguf" --docs "$docs" --compare --prompts-out "$out/prompts-$model.jsonl"
  "$venv/bin/python" bench/llama_cpp_peer.py "$gguf" "$threads" contexts "$out/prompts-$model.jsonl" 160
done
