#!/usr/bin/env bash
# Full-context against retrieval answers on a small base (EVALUATION.md, "Answers"): one
# XQuAD-R article as the whole base, its questions, answered by a local model both ways.
#
#   [LLM=MODEL] [ARTICLE=0] [QUERIES=50] bench/answers_small_base.sh [SHARED_DATA_DIR] [LANG...]
#
#   SHARED_DATA_DIR  default ../shared/data
#   LANG             en, ru (default: both)
#   LLM              the answer model (default: situate's, Qwen2.5-Coder-1.5B-Instruct)
#   ARTICLE          the XQuAD-R article that is the base (0: Super Bowl 50, 20 sentences)
#   QUERIES          its first questions asked (0: all)
#
# Per language, into OUT = bench/out/answers/xquad-LANG-aARTICLE: OUT/set (a BEIR set: the
# article's sentences, the questions whose golden sentence is one of them, their qrels),
# then `situate eval --answers retrieval,full` with `hybrid+structural` into OUT/eval. The
# English run also asks the first 15 SciFact claims as controls (questions the base cannot
# answer) when the SciFact set is there.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-../shared/data}
shift || true
langs=("$@")
[ ${#langs[@]} -gt 0 ] || langs=(en ru)
article=${ARTICLE:-0}
cargo build --release --locked -p situate
bin="${CARGO_TARGET_DIR:-target}/release/situate"
llm=()
[ -n "${LLM:-}" ] && llm=(--llm "$LLM")
"$bin" models install > /dev/null   # the defaults: the answer model, the embedders
case ${LLM:-} in ''|*.gguf|*:*) ;; *) "$bin" models install "$LLM" > /dev/null ;; esac

for lang in "${langs[@]}"; do
  out="bench/out/answers/xquad-$lang-a$article"
  mkdir -p "$out/set/qrels"
  python3 - "$data/xquad-r/$lang/sentence" "$out/set" "$article" <<'PY'
import json, os, sys
src, dst, article = sys.argv[1], sys.argv[2], int(sys.argv[3])
kept = set()
with open(os.path.join(dst, "corpus.jsonl"), "w") as f:
    for line in open(os.path.join(src, "corpus.jsonl")):
        if json.loads(line)["metadata"]["article"] == article:
            f.write(line)
            kept.add(json.loads(line)["_id"])
qrels = [l.rstrip("\n").split("\t") for l in open(os.path.join(src, "qrels", "test.tsv"))]
asked = {q for q, c, _ in qrels[1:] if c in kept}
with open(os.path.join(dst, "qrels", "test.tsv"), "w") as f:
    f.write("\t".join(qrels[0]) + "\n")
    for row in qrels[1:]:
        if row[0] in asked:
            f.write("\t".join(row) + "\n")
n = 0
with open(os.path.join(dst, "queries.jsonl"), "w") as f:
    for line in open(os.path.join(src, "queries.jsonl")):
        if json.loads(line)["_id"] in asked:
            f.write(line)
            n += 1
print(f"{len(kept)} sentences, {n} questions")
PY
  first=()
  [ "${QUERIES:-50}" = 0 ] || first=(--queries "${QUERIES:-50}")
  controls=()
  if [ "$lang" = en ] && [ -f "$data/scifact/queries.jsonl" ]; then
    head -15 "$data/scifact/queries.jsonl" \
      | python3 -c 'import sys,json; [print(json.loads(l)["text"]) for l in sys.stdin]' > "$out/controls15.txt"
    controls=(--controls "$out/controls15.txt")
  fi
  /usr/bin/time -f '%e s wall, %M KB peak' -o "$out/time.txt" \
    "$bin" eval --dataset "$out/set" --out "$out/eval" --config hybrid+structural \
    "${first[@]}" "${controls[@]}" --answers retrieval,full "${llm[@]}" --quiet > /dev/null
  echo "== xquad-$lang, article $article: $(cat "$out/time.txt")"
  sed -n '/^## Answers/,/^## /p' "$out/eval/report.md" | grep '^|'
done
