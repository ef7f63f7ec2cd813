#!/usr/bin/env bash
# What situate's Q8 query arithmetic costs in retrieval quality: nDCG@10 of the vector and
# hybrid legs on SciFact and Anthropic's codebase set with queries embedded in f32
# (SITUATE_QUERY_PRECISION=f32) and in Q8 (the default), the same f32 passage vectors (the
# evaluation indexes are built once in bench/out/qprec and reused). Fails when any
# configuration moves by more than 0.005 (issue 21's bound for a quantized path).
#
#   bench/query_quality.sh [DATA]      (default ../shared/data)
#
# Running time: about 30 minutes the first time on 2 cores (SciFact's 13,566 chunks are
# embedded once), about 2 minutes after.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-../shared/data}
cargo build --release --locked -q -p situate
bin="${CARGO_TARGET_DIR:-target}/release/situate"
out=bench/out/qprec
mkdir -p "$out"
status=0
for set in anthropic-codebase scifact; do
  for precision in f32 q8; do
    SITUATE_QUERY_PRECISION=$precision "$bin" eval --dataset "$data/$set" \
      --out "$out/$set-$precision" --work "$out/work-$set" \
      --config vector+none,hybrid+none --quiet --json > "$out/$set-$precision.json"
  done
  python3 - "$set" "$out/$set-f32.json" "$out/$set-q8.json" <<'PY' || status=1
import json, sys
name, f32, q8 = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
def ndcg(report):
    return {c["name"]: c["metrics"]["ndcg@10"] for c in report["configurations"]}
a, b = ndcg(f32), ndcg(q8)
worst = 0.0
for config in a:
    d = b[config] - a[config]
    worst = max(worst, abs(d))
    print(f"{name} {config}: nDCG@10 f32 {a[config]:.4f}, Q8 queries {b[config]:.4f} ({d:+.4f})")
print(f"{name}: largest change {worst:.4f} ({'within' if worst <= 0.005 else 'OVER'} 0.005)")
sys.exit(0 if worst <= 0.005 else 1)
PY
done
exit $status
