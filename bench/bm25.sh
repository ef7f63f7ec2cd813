#!/usr/bin/env bash
# BM25 benchmark: situate against bm25s (k1=1.5, b=0.75, English stop words + Snowball
# stemmer), one thread, same machine, same run, runs alternated so that noise hits both.
# Quality (nDCG@10, recall) is computed by the same definitions on both sides.
#
#   bench/bm25.sh [SHARED_DATA_DIR]     (default ../shared/data)
#
# Writes bench/out/bm25/*.json (its own folder: other benchmarks keep indexes under
# bench/out) and prints the table recorded in BENCHMARKS.md.
# Running time: about 4 minutes on 2 cores once built (ingest ~1 min, the three rounds ~3
# min); the release build adds ~6 minutes the first time. The indexes are BM25-only
# (`--embedder none`): this benchmark measures the lexical leg and builds nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-../shared/data}
scifact="$data/scifact"
codebase="$data/anthropic-codebase"
out=bench/out/bm25
rm -rf "$out" && mkdir -p "$out"

if [ ! -x bench/.venv/bin/python ]; then
  python3 -m venv bench/.venv
  bench/.venv/bin/pip install --quiet "bm25s==0.3.16" "PyStemmer==3.1.0" numpy scipy
fi
cargo build --release --locked -p situate -p situate-bench
bin_dir="${CARGO_TARGET_DIR:-target}/release"
bin="$bin_dir/situate"
bench="$bin_dir/situate-bench"

# name | input | ingest flags
ingest() {
  local name=$1 input=$2; shift 2
  /usr/bin/time -f '%e %M' -o "$out/ingest-$name.time" \
    "$bin" --index "$out/index-$name" ingest "$input" --embedder none "$@" --json > "$out/ingest-$name.json"
}
ingest scifact-whole "$scifact" --context none --max-tokens 1024
ingest scifact-none "$scifact" --context none
ingest scifact-structural "$scifact" --context structural
ingest xquad-en-none "$data/xquad-r/en/sentence" --context none --format beir-flat
ingest xquad-ru-none "$data/xquad-r/ru/sentence" --context none --format beir-flat
ingest codebase-none "$codebase/codebase_chunks.json" --context none
ingest codebase-structural "$codebase/codebase_chunks.json" --context structural

# Chinese: character bigrams against jieba on the small committed set (bench/zh-small).
for t in bigram jieba; do
  "$bin" --index "$out/index-zh-$t" init --chinese "$t" --embedder none > /dev/null
  "$bin" --index "$out/index-zh-$t" ingest bench/zh-small --context none --json > "$out/ingest-zh-$t.json"
done

peer() { OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 bench/.venv/bin/python bench/bm25s_peer.py "$@"; }
for round in 1 2 3; do
  peer --dataset "$scifact" --k 20 > "$out/peer-scifact-$round.json"
  "$bench" --index "$out/index-scifact-whole" bm25 --dataset "$scifact" --bm25 plain > "$out/run-scifact-whole-$round.json"
  "$bench" --index "$out/index-scifact-none" bm25 --dataset "$scifact" --bm25 plain > "$out/run-scifact-none-$round.json"
  "$bench" --index "$out/index-scifact-structural" bm25 --dataset "$scifact" --bm25 contextual > "$out/run-scifact-structural-$round.json"
  peer --dataset "$data/anthropic-codebase-beir" --k 20 > "$out/peer-codebase-$round.json"
  "$bench" --index "$out/index-codebase-none" bm25 --dataset "$data/anthropic-codebase-beir" --level chunk --bm25 plain > "$out/run-codebase-none-$round.json"
  "$bench" --index "$out/index-codebase-structural" bm25 --dataset "$data/anthropic-codebase-beir" --level chunk --bm25 contextual > "$out/run-codebase-structural-$round.json"
  for lang in en ru; do
    peer --dataset "$data/xquad-r/$lang/sentence" --lang "$lang" --k 20 > "$out/peer-xquad-$lang-$round.json"
    "$bench" --index "$out/index-xquad-$lang-none" bm25 --dataset "$data/xquad-r/$lang/sentence" --bm25 plain > "$out/run-xquad-$lang-none-$round.json"
  done
  for t in bigram jieba; do
    "$bench" --index "$out/index-zh-$t" bm25 --dataset bench/zh-small --bm25 plain --repeat 20 > "$out/run-zh-$t-$round.json"
  done
done

python3 - "$out" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
def runs(prefix):
    return [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, prefix + "-*.json")))]
def f(x):
    return "–" if x is None else f"{x:.4f}"
def median_qps(rs):
    q = sorted(r["queries_per_second"] for r in rs)
    return q[len(q) // 2]
print("| data set | system | nDCG@10 | recall@10 | recall@20 | queries/s (median of 3) | vs bm25s |")
print("|---|---|---|---|---|---|---|")
for ds, rows in (("scifact", ("whole", "none", "structural")), ("codebase", ("none", "structural")),
                 ("xquad-en", ("none",)), ("xquad-ru", ("none",))):
    peer = runs(f"peer-{ds}")
    pq = median_qps(peer)
    p = peer[0]
    print(f"| {ds} | {p['peer']} | {f(p['ndcg_at_10'])} | {f(p.get('recall_at_10'))} | "
          f"{f(p.get('recall_at_20'))} | {pq:,.0f} | 1.00x |")
    for name in rows:
        rs = runs(f"run-{ds}-{name}")
        r = rs[0]
        q = median_qps(rs)
        print(f"| {ds} | situate {name} ({r['bm25']}) | {f(r['ndcg_at_10'])} | {f(r.get('recall_at_10'))} | "
              f"{f(r['recall_at_20'])} | {q:,.0f} | {q / pq:.2f}x |")
print()
print("| Chinese tokenizer (bench/zh-small, 20 queries) | nDCG@10 | recall@10 | queries/s (median of 3) |")
print("|---|---|---|---|")
for t in ("bigram", "jieba"):
    rs = runs(f"run-zh-{t}")
    print(f"| {t} | {f(rs[0]['ndcg_at_10'])} | {f(rs[0]['recall_at_10'])} | {median_qps(rs):,.0f} |")
print()
print("| ingest | documents | chunks | seconds | documents/s | chunks/s | peak RSS |")
print("|---|---|---|---|---|---|---|")
for p in sorted(glob.glob(os.path.join(out, "ingest-*.json"))):
    if "-zh-" in p:
        continue
    name = os.path.basename(p)[len("ingest-"):-len(".json")]
    r = json.load(open(p))
    secs, rss = open(os.path.join(out, f"ingest-{name}.time")).read().split()
    rep = r["report"]
    docs = rep["added"] + rep["replaced"]
    print(f"| {name} | {docs} | {rep['chunks']} | {r['seconds']:.2f} | {docs / r['seconds']:,.0f} | "
          f"{rep['chunks'] / r['seconds']:,.0f} | {int(rss) / 1024:.0f} MB |")
PY
