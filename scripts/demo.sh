#!/usr/bin/env bash
# The demo on the embedded default: build situate, ingest a real corpus (this repository's
# own code and documents, plus the multilingual fixtures inside it) with structural
# contexts, and answer a few questions, showing each hit's context and original apart.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -p situate
bin=target/release/situate
index=target/demo-index
rm -rf "$index"

echo "== ingest"
"$bin" --index "$index" ingest README.md ARCHITECTURE.md crates --context structural
echo
"$bin" --index "$index" stats
for q in \
  "what happens after a crash between the store commit and the index commit" \
  "how is Chinese text cut into terms" \
  "проверка генератора зимой"; do
  echo
  echo "== search: $q"
  "$bin" --index "$index" search "$q" -k 3
done
