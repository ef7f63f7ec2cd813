#!/usr/bin/env bash
# The portable build against the native one (issue 61, part 1): the same sources built
# twice, with `.cargo/config.toml`'s `-C target-cpu=native` (target/) and with
# `RUSTFLAGS="-C target-cpu=x86-64-v2"` (target-portable/, x86-64 with SSE4.2 and POPCNT:
# every x86-64 CPU of the last fifteen years; situate's kernels and candle's choose AVX2,
# AVX-512 and VNNI at run time). Runs alternate, on the same machine, 2 threads:
# MiniLM, multilingual-e5-small (4-bit), EmbeddingGemma `:q8` and nomic-embed passages and
# queries (`situate-bench embed`, SciFact texts), BM25 queries on the SciFact index that
# bench/fusion.sh builds (skipped without it), and Qwen2.5-Coder-0.5B's prompt and
# generation (`situate-bench generate`).
#
#   bench/portable.sh [ROUNDS]        (default 2)
#
# Running time: about 5 minutes per round once built; building the portable binary from
# nothing takes about 25 minutes of 2 cores. Every line names the kernels' level
# (`situate-bench` prints it).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
data=../shared/data/scifact
cargo build --release --locked -q -p situate -p situate-bench
CARGO_TARGET_DIR=target-portable RUSTFLAGS="-C target-cpu=x86-64-v2" \
  cargo build --release --locked -q -p situate-bench
native=${CARGO_TARGET_DIR:-target}/release/situate-bench
portable=target-portable/release/situate-bench
"$native" --version >/dev/null
"${CARGO_TARGET_DIR:-target}/release/situate" models install all-minilm-l6-v2 multilingual-e5-small embeddinggemma-300m \
  nomic-embed-text-v1.5 qwen2.5-coder-0.5b-instruct >/dev/null 2>&1 || true
gguf=$HOME/.cache/situate/models/qwen2.5-coder-0.5b-instruct/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
bm25=$(ls -d bench/out/fusion/indexes/scifact/scifact-none-none-* 2>/dev/null | head -1 || true)
grep -m1 '^model name' /proc/cpuinfo || true
for round in $(seq "$rounds"); do
  for build in native portable; do
    bin=$native
    [ "$build" = portable ] && bin=$portable
    echo "== round $round: $build"
    "$bin" embed --model all-minilm-l6-v2 --dataset "$data" --passages 128 --queries 100 2>&1 | tail -2
    "$bin" embed --model multilingual-e5-small --dataset "$data" --passages 24 --queries 40 2>&1 | tail -1
    "$bin" embed --model embeddinggemma-300m:q8 --dataset "$data" --passages 12 --queries 30 2>&1 | tail -1
    "$bin" embed --model nomic-embed-text-v1.5 --dataset "$data" --passages 12 --queries 30 2>&1 | tail -1
    if [ -n "$bm25" ]; then
      "$bin" --index "$bm25" bm25 --dataset "$data" --repeat 3 2>/dev/null | grep queries_per_second
    fi
    "$bin" generate --model "$gguf" --prompt 256 --new-tokens 48 --batch 4 2>&1 | tail -3
  done
done
