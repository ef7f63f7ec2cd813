#!/usr/bin/env bash
# Hybrid query latency at 100k chunks with real all-MiniLM-L6-v2 embeddings (issue 21's
# goal 3): p50/p99 of the BM25, vector and hybrid legs in one process with the models warm,
# the query embedded inside every vector/hybrid search (no caching: each query is embedded
# every time), and the vector leg's recall@20 against exact search over the same vectors.
#
# The corpus is real text a fresh clone has on disk after its first build: the Rust sources
# of the crates in Cargo.lock, as cargo unpacked them (files of 2–64 KiB, crates and files
# in sorted order, up to 15.3 MB), cut at 64 tokens (overlap 8): 101,603 chunks on
# 2026-12-03. Queries: the 248 code questions of Anthropic's codebase set. Both query
# arithmetics are measured: Q8 (the default) and f32 (SITUATE_QUERY_PRECISION=f32).
#
#   bench/hybrid_real.sh [DATA]      (default ../shared/data)
#
# Running time: the ingest embeds 101,603 chunks (about 50 minutes on 2 cores: 2,992 s on
# 2026-12-03 with other work running); the queries take about a minute. bench/out/real100k
# keeps the corpus and the index between runs.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-../shared/data}
cargo build --release --locked -q -p situate -p situate-bench
bin_dir="${CARGO_TARGET_DIR:-target}/release"
out=bench/out/real100k
mkdir -p "$out"
if [ ! -d "$out/corpus" ]; then
  python3 - "${CARGO_HOME:-$HOME/.cargo}/registry/src" "$out/corpus" 15300000 <<'PY'
import os, re, shutil, sys
src, out, budget = sys.argv[1], sys.argv[2], int(sys.argv[3])
lock = open("Cargo.lock").read()
wanted = {f"{n}-{v}" for n, v in re.findall(r'name = "([^"]+)"\nversion = "([^"]+)"', lock)}
crates = sorted(
    (os.path.join(src, reg, c), c)
    for reg in sorted(os.listdir(src))
    for c in os.listdir(os.path.join(src, reg))
    if c in wanted
)
files = []
for path, _ in crates:
    for root, dirs, names in os.walk(path):
        for n in names:
            p = os.path.join(root, n)
            if n.endswith(".rs") and 2048 <= os.path.getsize(p) <= 65536:
                files.append((os.path.relpath(p, os.path.dirname(path)), p))
files.sort()
total = 0
for rel, p in files:
    os.makedirs(os.path.join(out, os.path.dirname(rel)), exist_ok=True)
    shutil.copyfile(p, os.path.join(out, rel))
    total += os.path.getsize(p)
    if total >= budget:
        break
print(f"corpus: {total} bytes of Rust source")
PY
fi
if [ ! -f "$out/index/cards.db" ]; then
  /usr/bin/time -f "ingest: %e s, peak %M kB" "$bin_dir/situate" --index "$out/index" --quiet \
    ingest "$out/corpus" --context none --embedder all-minilm-l6-v2 --language en \
    --max-tokens 64 --overlap 8 >/dev/null
  du -sh "$out/index"
fi
for precision in q8 f32; do
  echo "== queries embedded in $precision"
  SITUATE_QUERY_PRECISION=$precision /usr/bin/time -f "process peak %M kB" \
    "$bin_dir/situate-bench" --index "$out/index" hybrid \
    --queries "$data/anthropic-codebase-beir/queries.jsonl"
done
