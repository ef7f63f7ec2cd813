#!/usr/bin/env bash
# BM25 benchmark: situate against bm25s on SciFact (300 test queries, one thread), same
# machine, same run. Also ingest throughput. Results go to bench/out/bm25-*.json and the
# ratios are printed; BENCHMARKS.md records a run.
#
#   bench/bm25.sh [DATASET_DIR]      (default ../shared/data/scifact)
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-../shared/data/scifact}
out=bench/out
mkdir -p "$out"

# The peer, in its own virtualenv (bm25s 0.3.16 as in shared/BASELINES.md).
if [ ! -x bench/.venv/bin/python ]; then
  python3 -m venv bench/.venv
  bench/.venv/bin/pip install --quiet "bm25s==0.3.16" "PyStemmer==3.1.0" numpy scipy
fi

cargo build --release --locked -p situate
bin=target/release/situate
index="$out/bm25-index"

for context in none structural; do
  rm -rf "$index-$context"
  /usr/bin/time -f '%e s, %M kB peak' -o "$out/ingest-$context.time" \
    "$bin" --index "$index-$context" ingest "$data" --context "$context" --json > "$out/ingest-$context.json"
done

# Alternate peer and situate runs so that machine noise hits both.
for round in 1 2; do
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 bench/.venv/bin/python bench/bm25s_peer.py --dataset "$data" --k 10 > "$out/bm25s-$round.json"
  "$bin" --index "$index-none" bench bm25 --dataset "$data" --k 10 --bm25 plain > "$out/situate-plain-$round.json"
  "$bin" --index "$index-structural" bench bm25 --dataset "$data" --k 10 --bm25 contextual > "$out/situate-structural-$round.json"
done

python3 - "$out" <<'PY'
import json, sys, glob, os
out = sys.argv[1]
def best(pattern):
    runs = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, pattern)))]
    return max(runs, key=lambda r: r["queries_per_second"])
peer = best("bm25s-*.json")
print(f"bm25s       {peer['queries_per_second']:9.0f} q/s  nDCG@10 {peer['ndcg_at_10']:.4f}")
for name in ("plain", "structural"):
    s = best(f"situate-{name}-*.json")
    print(f"situate {name:10s} {s['queries_per_second']:9.0f} q/s  nDCG@10 {s['ndcg_at_10']:.4f}  "
          f"ratio {s['queries_per_second'] / peer['queries_per_second']:.2f}x")
for context in ("none", "structural"):
    r = json.load(open(os.path.join(out, f"ingest-{context}.json")))
    t = open(os.path.join(out, f"ingest-{context}.time")).read().strip()
    rep = r["report"]
    print(f"ingest --context {context}: {rep['added']} documents, {rep['chunks']} chunks in {r['seconds']:.2f} s "
          f"= {rep['added'] / r['seconds']:.0f} docs/s, {rep['chunks'] / r['seconds']:.0f} chunks/s ({t})")
PY
