#!/usr/bin/env bash
# Fusion across the shared sets and the catalog's embedders (issue 60). For each set and
# embedder:
#  1. `situate eval` with the configurations bm25+none, vector+none and hybrid+none: builds
#     (or reuses) the evaluation index with no context in bench/out/fusion/indexes/SET, and
#     reports each leg and hybrid search at the index's default fusion
#     (bench/out/fusion/SET-EMBEDDER/report.json);
#  2. `situate tune --report-grid` on that index (fetch 150, the grid's fusions × α × RRF
#     k): every point's nDCG@10 (bench/out/fusion/SET-EMBEDDER/tune.json).
# Then bench/fusion_table.py prints the fusion table and the leave-one-set-out choice per
# embedder family (EVALUATION.md, "Fusion").
#
#   bench/fusion.sh [SET ...]          SET: codebase xquad-en xquad-ru scifact (default: all)
#
# EMBEDDERS overrides the embedders (space-separated; default: the five of the catalog,
# the three larger ones with int8 passages, `:q8`, for the ingest's speed). SITUATE names a
# built binary (default: a release build); DATA is ../shared/data by default. STAGE=index
# builds the indexes and evaluates only (no tune). Indexes are kept, so a re-run embeds
# nothing: on 2 cores the first run takes hours (EmbeddingGemma's SciFact index alone about
# an hour), a re-run minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${DATA:-../shared/data}
sets=${*:-codebase xquad-en xquad-ru scifact}
embedders=${EMBEDDERS:-all-minilm-l6-v2 multilingual-e5-small embeddinggemma-300m:q8 nomic-embed-text-v1.5:q8 all-mpnet-base-v2:q8}
if [ -z "${SITUATE:-}" ]; then
  cargo build --release --locked -q -p situate
  SITUATE="${CARGO_TARGET_DIR:-target}/release/situate"
fi
out=bench/out/fusion
for embedder in $embedders; do
  "$SITUATE" models install "${embedder%%:*}" >/dev/null
  for set in $sets; do
    case "$set" in
      codebase) path=anthropic-codebase extra=() ;;
      xquad-en) path=xquad-r/en/sentence extra=() ;;
      xquad-ru) path=xquad-r/ru/sentence extra=() ;;
      scifact) path=scifact extra=(--max-tokens 1024) ;;
      *) echo "unknown set $set (codebase, xquad-en, xquad-ru, scifact)" >&2; exit 2 ;;
    esac
    dir="$out/$set-${embedder//:/-}"
    # A work folder per set: eval names an index after its set's folder, and XQuAD-R's
    # English and Russian folders are both `sentence`.
    work=$out/indexes/$set
    mkdir -p "$dir" "$work"
    echo "== $set $embedder"
    start=$(date +%s)
    if [ ! -f "$dir/report.json" ]; then
      "$SITUATE" eval --dataset "$data/$path" --out "$dir" --work "$work" --embedder "$embedder" \
        -q --offline --config bm25+none,vector+none,hybrid+none "${extra[@]}" > /dev/null
    fi
    [ "${STAGE:-}" = index ] && { echo "   $(($(date +%s) - start)) s"; continue; }
    # The index eval built for the vector configurations: SET-none-EMBEDDER_TAG-TOKENS-OVERLAP.
    tag=$(printf '%s' "$embedder" | sed 's/[^[:alnum:]-]/_/g')
    name=$(basename "$data/$path")
    index=$(ls -d "$work/$name-none-$tag-"* | head -1)
    if [ ! -f "$dir/tune.json" ]; then
      "$SITUATE" --index "$index" tune --questions "$data/$path" --fetches 150 \
        --alphas 0.05,0.1,0.15,0.2,0.25,0.3,0.35,0.4,0.45,0.5,0.55,0.6,0.65,0.7,0.75,0.8,0.85,0.9,0.95 \
        --report-grid --json -q > "$dir/tune.json.partial"
      mv "$dir/tune.json.partial" "$dir/tune.json"
    fi
    echo "   $(($(date +%s) - start)) s"
  done
done
[ "${STAGE:-}" = index ] || python3 bench/fusion_table.py "$out"
