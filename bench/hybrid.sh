#!/usr/bin/env bash
# Vector-leg benchmarks for BENCHMARKS.md:
#  1. HNSW (usearch) against exact search on synthetic clustered 384-d unit vectors:
#     build time, top-150 latency, recall@20 (bench vectors);
#  2. hybrid query latency p50/p99 (no reranking) and peak memory at 10k and 100k chunks:
#     a synthetic corpus (Zipf words, one chunk per document) ingested with the hashing
#     embedder (384 dimensions, like MiniLM; instant, so 100k chunks ingest in minutes).
#     The query's real MiniLM embedding is timed separately by `bench embed` (3.).
#  3. all-MiniLM-L6-v2 passages/s and query latency (bench embed on SciFact).
# Usage: bench/hybrid.sh [SIZES...]   (default: 10000 100000)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -q -p situate -p situate-bench
bin_dir="${CARGO_TARGET_DIR:-target}/release"
bin="$bin_dir/situate"
bench="$bin_dir/situate-bench"
out=bench/out/hybrid
mkdir -p "$out"
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(10000 100000)

echo "== vector index: exact vs HNSW (100k x 384)"
"$bench" vectors --n 100000

for n in "${sizes[@]}"; do
  echo "== hybrid latency at $n chunks"
  corpus="$out/synth-$n"
  index="$out/index-$n"
  [ -f "$corpus/corpus.jsonl" ] || "$bench" synth --n "$n" --out "$corpus"
  if [ ! -f "$index/cards.db" ]; then
    /usr/bin/time -f "ingest: %e s, peak %M kB" \
      "$bin" --index "$index" --quiet ingest "$corpus/corpus.jsonl" --format beir \
      --context none --embedder hash:384 --language en >/dev/null
  fi
  "$bench" --index "$index" hybrid --queries "$corpus/queries.txt"
done

echo "== all-MiniLM-L6-v2 (query embedding is part of every vector/hybrid query)"
"$bench" embed --dataset ../shared/data/scifact --passages 256 --queries 200
