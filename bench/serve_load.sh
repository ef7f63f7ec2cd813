#!/usr/bin/env bash
# The service under load (BENCHMARKS.md, "The service under load"): SciFact cut into ~12k
# chunks of at most 128 tokens (hybrid: contextual BM25 + all-MiniLM-L6-v2, the local
# embedder), `situate serve` on loopback, then 10,000 searches at concurrency 64 over the
# JSON API and the same over MCP (the `search` tool on /mcp, one session per worker), the
# serving process's peak memory, and, for comparison, the one-shot CLI (`situate search`,
# which loads the index and the embedder for each query).
#
#   bench/serve_load.sh [SHARED_DATA_DIR]        (default ../shared/data)
#
# Expected running time: ~5 minutes for the index (embedding 12k chunks; kept in
# bench/out/serve-load for the next run), then ~1-3 minutes per load run.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-../shared/data}
out=bench/out/serve-load
mkdir -p "$out"
cargo build --release --locked -p situate -p situate-bench
bin="${CARGO_TARGET_DIR:-target}/release"
idx="$out/index"
if [ ! -f "$idx/cards.db" ]; then
  "$bin/situate" --index "$idx" ingest "$data/scifact" --max-tokens 128 --overlap 0 --quiet > /dev/null
fi
"$bin/situate" --index "$idx" stats --json | python3 -c "import json,sys; s=json.load(sys.stdin)['stats']; print(f\"index: {s['store']['documents']} documents, {s['store']['chunks']} chunks, {s['vectors']} vectors ({s['embed_model']})\")"
queries="$data/scifact/queries.jsonl"

"$bin/situate" --index "$idx" --json serve --bind 127.0.0.1:0 > "$out/serve.json" 2> "$out/serve.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  [ -s "$out/serve.json" ] && break
  sleep 0.1
done
url=$(python3 -c "import json; print(json.load(open('$out/serve.json'))['url'])")
echo "serving at $url (pid $pid), $(nproc) cores"
"$bin/situate-bench" load --url "$url" --queries "$queries" --requests 10000 --concurrency 64
"$bin/situate-bench" load --url "$url" --queries "$queries" --requests 10000 --concurrency 64 --mcp
grep -E "VmHWM|VmRSS" "/proc/$pid/status" | tr -s ' \t' ' '
kill "$pid"
wait "$pid" 2>/dev/null || true
trap - EXIT

# The one-shot CLI: each query a new process (the index opened, the embedder loaded).
python3 - "$bin/situate" "$idx" "$queries" <<'PY'
import json, subprocess, sys, time
situate, idx, path = sys.argv[1:4]
qs = [json.loads(l)["text"] for l in open(path) if l.strip()][:20]
times = []
for q in qs:
    t = time.perf_counter()
    subprocess.run([situate, "--index", idx, "search", q, "--json"], check=True, stdout=subprocess.DEVNULL)
    times.append(time.perf_counter() - t)
times.sort()
print(f"one-shot CLI: {len(times)} queries one after the other, p50 {times[len(times)//2]*1000:.0f} ms, mean {sum(times)/len(times)*1000:.0f} ms a query")
PY
