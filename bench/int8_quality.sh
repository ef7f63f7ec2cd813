#!/usr/bin/env bash
# What situate's int8 arithmetic costs in retrieval quality against the f32 model, for
# queries (the default) and for passages too (an index whose embedder is
# `all-minilm-l6-v2:q8`): nDCG@10 of the vector and hybrid legs on SciFact and
# Anthropic's codebase set, in three arithmetics:
#   f32      passages and queries in f32 (SITUATE_QUERY_PRECISION=f32): the reference model;
#   default  f32 passages, int8 queries (situate's default);
#   int8     int8 passages (`:q8`) and int8 queries.
# Fails when the int8 or default column moves by more than 0.005 from f32 in any
# configuration (issue 21's bound for a quantized path). The evaluation indexes are kept in
# bench/out/int8q (one per set and passage arithmetic) and reused.
#
#   bench/int8_quality.sh [DATA]      (default ../shared/data)
#
# Running time: about 15 minutes the first time on 2 cores (SciFact's 13,566 chunks are
# embedded twice, in f32 and in int8), about 3 minutes after.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-../shared/data}
cargo build --release --locked -q -p situate
bin="${CARGO_TARGET_DIR:-target}/release/situate"
"$bin" models install all-minilm-l6-v2 >/dev/null
out=bench/out/int8q
mkdir -p "$out"
status=0
for set in anthropic-codebase scifact; do
  run() { # NAME QUERY_PRECISION EMBEDDER
    SITUATE_QUERY_PRECISION=$2 "$bin" eval --dataset "$data/$set" --embedder "$3" \
      --out "$out/$set-$1" --work "$out/work-$set-${3/:/-}" \
      --config vector+none,hybrid+none --quiet --json > "$out/$set-$1.json"
  }
  run f32 f32 all-minilm-l6-v2
  run default q8 all-minilm-l6-v2
  run int8 q8 all-minilm-l6-v2:q8
  python3 - "$set" "$out/$set-f32.json" "$out/$set-default.json" "$out/$set-int8.json" <<'PY' || status=1
import json, sys
name = sys.argv[1]
f32, default, int8 = (json.load(open(p)) for p in sys.argv[2:5])
def ndcg(report):
    return {c["name"]: c["metrics"]["ndcg@10"] for c in report["configurations"]}
a, b, c = ndcg(f32), ndcg(default), ndcg(int8)
worst = 0.0
for config in a:
    db, dc = b[config] - a[config], c[config] - a[config]
    worst = max(worst, abs(db), abs(dc))
    print(f"{name} {config}: nDCG@10 f32 {a[config]:.4f}, default (int8 queries) {b[config]:.4f} ({db:+.4f}), int8 passages and queries {c[config]:.4f} ({dc:+.4f})")
print(f"{name}: largest change {worst:.4f} ({'within' if worst <= 0.005 else 'OVER'} 0.005)")
sys.exit(0 if worst <= 0.005 else 1)
PY
done
exit $status
