#!/usr/bin/env bash
# Rerank latency per query (the top 150 BM25 hits of each SciFact query re-scored), situate
# against sentence-transformers' CrossEncoder on PyTorch CPU in the same run on the same
# pairs, 2 threads each, runs alternated; then the local LLM judge (SmolLM2) on a few
# queries. No cross-encoder weights install here (shared/MODELS.md), so the cross-encoders
# timed have real rerankers' shapes (bench/cross_encoder_dirs.py): MiniLM-L6 (all-MiniLM's
# encoder, as ms-marco-MiniLM-L-6-v2) and BERT-base (random, as bge-reranker-base's size).
# The peer also reports how far its scores are from situate's on the same pairs.
#
#   bench/rerank.sh [QUERIES] [ROUNDS] [LLM_QUERIES]     (default 20 2 2; BERT-base gets a
#                                                        fifth of QUERIES, one round: it is
#                                                        about 6x slower)
set -euo pipefail
cd "$(dirname "$0")/.."
queries=${1:-20}
rounds=${2:-2}
llm_queries=${3:-2}
data=../shared/data/scifact
out=bench/out/rerank
venv=bench/.venv-torch
mkdir -p "$out"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  # As bench/embed.sh: the CUDA wheel without its CUDA libraries, CPU dependencies named.
  "$venv/bin/pip" install --quiet --no-deps "torch==2.15.0"
  "$venv/bin/pip" install --quiet sympy networkx jinja2 filelock fsspec typing-extensions "numpy==2.4.6"
  "$venv/bin/pip" install --quiet "sentence-transformers==6.2.0" "transformers==5.24.0"
fi
cargo build --release --locked -q -p situate -p situate-bench
bin_dir="${CARGO_TARGET_DIR:-target}/release"
bin="$bin_dir/situate"
bench="$bin_dir/situate-bench"
"$bin" models install all-minilm-l6-v2 smollm2-135m-instruct >/dev/null
minilm=$("$bin" models list --json | python3 -c 'import json,sys; print(next(m["path"] for m in json.load(sys.stdin)["models"] if m["name"]=="all-minilm-l6-v2"))')
[ -f "$out/bert-base/model.safetensors" ] || "$venv/bin/python" bench/cross_encoder_dirs.py "$minilm" "$out" >/dev/null
index="$out/index-scifact"
[ -d "$index" ] || "$bin" --index "$index" ingest "$data/corpus.jsonl" --embedder none --context none --quiet >/dev/null
for model in minilm-l6 bert-base; do
  n=$queries r=$rounds
  if [ "$model" = bert-base ]; then n=$(( queries / 5 > 2 ? queries / 5 : 2 )); r=1; fi
  for round in $(seq "$r"); do
    echo "== $model, round $round"
    "$bench" --index "$index" rerank --reranker "cross-encoder:$out/$model" \
      --queries "$data/queries.jsonl" --n "$n" --pairs "$out/pairs-$model.jsonl"
    OPENBLAS_NUM_THREADS=1 "$venv/bin/python" bench/rerank_peer.py "$out/$model" "$out/pairs-$model.jsonl" 2 2>/dev/null | tail -1
  done
done
echo "== llm (SmolLM2-135M judge)"
"$bench" --index "$index" rerank --reranker llm --queries "$data/queries.jsonl" --n "$llm_queries"
