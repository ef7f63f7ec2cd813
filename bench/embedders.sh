#!/usr/bin/env bash
# The local embedders side by side (issue 44): each set evaluated with each embedder by
# `situate eval`, the vector and hybrid legs with no context and with structural contexts,
# and late chunking (`NAME:late`) where the embedder reads whole documents. One folder per
# set and embedder in bench/out/embedders (its report.md and report.json), then one table.
#
#   bench/embedders.sh [SET ...]
#
# SET: codebase (Anthropic's codebase set), xquad-en and xquad-ru (XQuAD-R, sentence level:
# each sentence a chunk of its paragraph), scifact (whole abstracts). Default: codebase
# xquad-en xquad-ru. EMBEDDERS overrides the embedders per run (space-separated; the
# defaults below are each set's). SITUATE names a built binary (default: a release build).
# DATA is ../shared/data by default.
#
# Running time on 2 cores (f32, reference arithmetic): EmbeddingGemma embeds about 300
# tokens/s of passages; codebase about 25 minutes per embedder, xquad-en/ru about 4,
# scifact (5,221 abstracts) about 2 hours for EmbeddingGemma.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${DATA:-../shared/data}
sets=${*:-codebase xquad-en xquad-ru}
if [ -z "${SITUATE:-}" ]; then
  cargo build --release --locked -q -p situate
  SITUATE="${CARGO_TARGET_DIR:-target}/release/situate"
fi
out=bench/out/embedders
mkdir -p "$out"
for set in $sets; do
  case "$set" in
    codebase)
      path=anthropic-codebase extra=()
      default="all-minilm-l6-v2 embeddinggemma-300m nomic-embed-text-v1.5 all-mpnet-base-v2" ;;
    xquad-en)
      path=xquad-r/en/sentence extra=()
      default="all-minilm-l6-v2 multilingual-e5-small embeddinggemma-300m nomic-embed-text-v1.5 all-mpnet-base-v2 embeddinggemma-300m:late nomic-embed-text-v1.5:late" ;;
    xquad-ru)
      path=xquad-r/ru/sentence extra=()
      default="multilingual-e5-small embeddinggemma-300m embeddinggemma-300m:late" ;;
    scifact)
      path=scifact extra=(--max-tokens 1024)
      default="all-minilm-l6-v2 embeddinggemma-300m nomic-embed-text-v1.5 all-mpnet-base-v2" ;;
    *) echo "unknown set $set (codebase, xquad-en, xquad-ru, scifact)" >&2; exit 2 ;;
  esac
  for embedder in ${EMBEDDERS:-$default}; do
    "$SITUATE" models install "${embedder%%:*}" >/dev/null
    dir="$out/$set-${embedder//:/-}"
    case "$embedder" in
      *:late) configs=vector+none,hybrid+none ;;
      *) configs=bm25+none,vector+none,hybrid+none,vector+structural,hybrid+structural ;;
    esac
    [ -f "$dir/report.json" ] && { echo "== $set $embedder: kept ($dir)"; continue; }
    echo "== $set $embedder"
    start=$(date +%s)
    "$SITUATE" eval --dataset "$data/$path" --out "$dir" --embedder "$embedder" -q --offline \
      --config "$configs" "${extra[@]}" > /dev/null
    echo "   $(($(date +%s) - start)) s"
  done
done
# One table: set, embedder, configuration, Pass@20 (recall@20), nDCG@10.
python3 - "$out" <<'EOF'
import json, os, sys
out = sys.argv[1]
print("| set | embedder | configuration | Pass@20 | nDCG@10 | failure@20 |")
print("|---|---|---|---|---|---|")
for d in sorted(os.listdir(out)):
    p = os.path.join(out, d, "report.json")
    if not os.path.exists(p):
        continue
    r = json.load(open(p))
    head, _, embedder = d.partition("-")
    if head == "xquad":
        lang, _, embedder = embedder.partition("-")
        head = f"xquad-{lang}"
    for c in r["configurations"]:
        m = c["metrics"]
        p20 = m.get("pass@20", m.get("recall@20", float("nan")))
        print(f"| {head} | {embedder} | {c['name']} | {p20:.4f} | {m.get('ndcg@10', float('nan')):.4f} | {1 - p20:.4f} |")
EOF
