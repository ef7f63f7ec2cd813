#!/usr/bin/env bash
# LLM contexts with a local model for the shared evaluation sets, then their evaluation
# rows (EVALUATION.md, "LLM contexts"; wall times in BENCHMARKS.md).
#
#   [LLM=MODEL] [CONTEXTS="MODE..."] [EVAL=0] bench/llm_contexts.sh [SHARED_DATA_DIR] [SET...]
#
#   SHARED_DATA_DIR  default ../shared/data
#   SET              codebase, xquad-en, xquad-ru (default: all three)
#   LLM              a catalog name or a .gguf path (default: qwen2.5-coder-0.5b-instruct)
#   CONTEXTS         context methods, in order (default: "document+llm document llm"). The
#                    first does the LLM work; `document+llm` writes each document's
#                    description and each chunk's note after one shared document prefix,
#                    so `document` and `llm` after it take every piece from the context
#                    cache with no LLM call.
#   EVAL=0           contexts and exports only, no `situate eval`
#   PROMPT           the built-in prompt of the chunk notes: anthropic (default) or small
#                    (`[llm] prompt`); not anthropic, OUT gets `-PROMPT` after the model
#
# Per set, with OUT = bench/out/contexts/LLM: `situate ingest --context MODE` into
# OUT/index-SET for each MODE (each run's wall time and peak memory are added to
# OUT/time-SET.txt), `situate contextualize` over every card (the pieces rechecked and put
# together again, no LLM call), `situate contexts export` to OUT/SET-MODE.jsonl (`+` written `_`; what
# `situate eval` takes as file:OUT/SET-MODE.jsonl), then `situate eval` with the none, structural and
# every MODE's rows, per leg, into OUT/eval-SET. Re-running resumes: finished pieces come
# from the index's context cache. The exports are not committed (this script writes them).
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-../shared/data}
shift || true
sets=("$@")
[ ${#sets[@]} -gt 0 ] || sets=(codebase xquad-en xquad-ru)
llm=${LLM:-qwen2.5-coder-0.5b-instruct}
read -r -a modes <<< "${CONTEXTS:-document+llm document llm}"
out="bench/out/contexts/$(basename "$llm" .gguf)"
prompt=${PROMPT:-anthropic}
[ "$prompt" = anthropic ] || out="$out-$prompt"
mkdir -p "$out"
printf '[llm]\nprompt = "%s"\n' "$prompt" > "$out/settings.toml"
cargo build --release --locked -p situate
bin="${CARGO_TARGET_DIR:-target}/release/situate"
case $llm in *.gguf) models=() ;; *) models=("$llm") ;; esac
"$bin" models install "${models[@]}" all-minilm-l6-v2 multilingual-e5-small > /dev/null

for set in "${sets[@]}"; do
  case $set in
    codebase) input="$data/anthropic-codebase/codebase_chunks.json"; dataset="$data/anthropic-codebase" ;;
    xquad-en) input="$data/xquad-r/en/sentence"; dataset="$input" ;;
    xquad-ru) input="$data/xquad-r/ru/sentence"; dataset="$input" ;;
    *) echo "unknown set $set (codebase, xquad-en, xquad-ru)" >&2; exit 2 ;;
  esac
  files=()
  for mode in "${modes[@]}"; do
    # One line per run: the first is the LLM work, later ones resume or read the cache.
    /usr/bin/time -f '%e s wall, %M KB peak' -o "$out/time.tmp" \
      "$bin" --index "$out/index-$set" --settings "$out/settings.toml" ingest "$input" \
      --context "$mode" --llm "$llm" \
      --embedder none --quiet --json > "$out/ingest-$set-$mode.json"
    echo "$(date -u +%FT%TZ) $mode: $(cat "$out/time.tmp")" >> "$out/time-$set.txt"
    # Every card of the mode put together again from its pieces with this version's checks
    # (a resumed run's first documents were written by an earlier binary): no LLM call.
    "$bin" --index "$out/index-$set" --settings "$out/settings.toml" contextualize \
      --context "$mode" --llm "$llm" --status pending,failed,generated,verified,rejected \
      --quiet --json > "$out/recompose-$set-${mode//+/_}.json"
    # `+` separates a configuration's parts in `situate eval --config`: not in file names.
    "$bin" --index "$out/index-$set" contexts export "$out/$set-${mode//+/_}.jsonl" > /dev/null
    "$bin" --index "$out/index-$set" status --json > "$out/status-$set-${mode//+/_}.json"
    files+=("file:$out/$set-${mode//+/_}.jsonl")
  done
  echo "== $set:"; cat "$out/time-$set.txt"
  [ "${EVAL:-1}" = 0 ] && continue
  configs=""
  for leg in bm25 vector hybrid; do
    for ctx in none structural "${files[@]}"; do
      configs="$configs${configs:+,}$leg+$ctx"
    done
  done
  "$bin" eval --dataset "$dataset" --out "$out/eval-$set" --config "$configs" --quiet > /dev/null
  sed -n '/^| configuration/,/^$/p' "$out/eval-$set/report.md"
done
