#!/usr/bin/env bash
# A signal from an unfinished `bench/llm_contexts.sh` codebase run: the documents it has
# committed so far, evaluated on the questions whose golden documents are all among them,
# against the whole corpus (EVALUATION.md, "Local contexts"). No LLM call: the run's index
# is copied, each mode's contexts are put together from its context cache, exported, and
# evaluated with none and structural beside them.
#
#   [LLM=MODEL] bench/llm_contexts_partial.sh [SHARED_DATA_DIR]
#
# The run may go on meanwhile (stop it with `kill -STOP` for a copy taken between two
# commits, `kill -CONT` after). Writes OUT/partial/ (OUT = bench/out/contexts/LLM).
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-../shared/data}
llm=${LLM:-qwen2.5-coder-0.5b-instruct}
out="bench/out/contexts/$(basename "$llm" .gguf)"
part="$out/partial"
bin="${CARGO_TARGET_DIR:-target}/release/situate"
rm -rf "$part" && mkdir -p "$part"
cp -r "$out/index-codebase" "$part/index"
rm -f "$part/index/write.lock"
files=()
for mode in document+llm document llm; do
  "$bin" --index "$part/index" --offline contextualize --context "$mode" --llm "$llm" \
    --status pending,failed,generated,verified,rejected --quiet --json > "$part/contextualize-$mode.json"
  "$bin" --index "$part/index" contexts export "$part/codebase-${mode//+/_}.jsonl" > /dev/null
  files+=("file:$part/codebase-${mode//+/_}.jsonl")
done
python3 bench/subset_questions.py "$data" "$part/index" "$part/dataset" | tee "$part/subset.txt"
configs=""
for leg in bm25 vector hybrid; do
  for ctx in none structural "${files[@]}"; do
    configs="$configs${configs:+,}$leg+$ctx"
  done
done
"$bin" eval --dataset "$part/dataset" --out "$part/eval" --config "$configs" --quiet > /dev/null
sed -n '/^| configuration/,/^$/p' "$part/eval/report.md"
