#!/usr/bin/env bash
# The Python package (issue 46's measurements), in one run on Anthropic's codebase set
# (737 chunks, 248 queries; structural contexts, all-MiniLM-L6-v2):
#  1. bench/python_overhead.py: `Index.search` against the same search in Rust
#     (`situate-bench query`: request check, engine query, answer as JSON), same index and
#     queries, alternated: the overhead per call at p50, and queries/s with 4 Python
#     threads against one;
#  2. bench/python_recipe.py: situate's hybrid search through the package against the
#     LangChain recipe (BM25Retriever + a vector store + EnsembleRetriever, the same MiniLM
#     weights through sentence-transformers, the same contexts): nDCG@10, Pass@20, latency.
#
#   bench/python.sh [DATA]      (default ../shared/data)
#
# The first run installs PyTorch, sentence-transformers and the LangChain packages in
# bench/.venv-py (pinned) and builds situate in release; the package is built from the same
# release build (`maturin develop --release`).
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-../shared/data}/anthropic-codebase
venv=bench/.venv-py
. bench/torch_venv.sh
torch_venv "$venv"
if ! "$venv/bin/python" -c 'import langchain_classic, langchain_community, langchain_huggingface, rank_bm25' 2>/dev/null; then
  "$venv/bin/pip" install --quiet "maturin==1.16.0" "langchain-core==1.8.3" "langchain-classic==1.0.8" \
    "langchain-community==0.4.2" "rank-bm25==0.2.2" "langchain-huggingface==1.2.3"
fi
cargo build --release --locked -q -p situate -p situate-bench
(cd python && VIRTUAL_ENV="$PWD/../$venv" PATH="$PWD/../$venv/bin:$PATH" maturin develop --release --locked --quiet)
bin_dir="${CARGO_TARGET_DIR:-target}/release"
bin="$bin_dir/situate"
"$bin" models install all-minilm-l6-v2 >/dev/null
model_dir=$("$bin" models list --json | python3 -c 'import json,sys; print(next(m["path"] for m in json.load(sys.stdin)["models"] if m["name"]=="all-minilm-l6-v2"))')
out=bench/out/python
mkdir -p "$out"
index="$out/codebase"
if [ ! -d "$index" ]; then
  "$bin" ingest "$data/codebase_chunks.json" --format anthropic --context structural \
    --embedder all-minilm-l6-v2 --index "$index" --quiet
fi
"$bin" contexts export "$out/contexts.jsonl" --index "$index" --quiet
python3 -c 'import json,sys; [print(json.loads(l)["query"]) for l in open(sys.argv[1]) if l.strip()]' \
  "$data/evaluation_set.jsonl" > "$out/queries.txt"
echo "== the package against the same search in Rust"
OPENBLAS_NUM_THREADS=1 "$venv/bin/python" bench/python_overhead.py "$bin_dir/situate-bench" "$index" "$out/queries.txt" 2
echo "== the package against the LangChain recipe"
OPENBLAS_NUM_THREADS=1 "$venv/bin/python" bench/python_recipe.py "$index" "$data" "$out/contexts.jsonl" "$model_dir"
