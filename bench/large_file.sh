#!/usr/bin/env bash
# Ingest of one 50 MB text file (and one 50 MB source file): time and peak memory.
# The file is generated (deterministic), so nothing large is committed.
#
#   bench/large_file.sh [SIZE_MB]      (default 50)
set -euo pipefail
cd "$(dirname "$0")/.."
mb=${1:-50}
out=bench/out/large
rm -rf "$out" && mkdir -p "$out/text" "$out/code"
python3 - "$out" "$mb" <<'PY'
import random, sys
out, mb = sys.argv[1], int(sys.argv[2])
rng = random.Random(7)
words = ("river station measured rain report winter generator lamp lens bulb keeper tower storm "
         "battery solar north cabinet cotton glass coating water weekly motor platform brass bolt").split()
target = mb * 1024 * 1024
with open(f"{out}/text/big.txt", "w") as f:
    n = 0
    while n < target:
        para = " ".join(". ".join(" ".join(rng.choice(words) for _ in range(rng.randint(6, 18))).capitalize()
                                  for _ in range(rng.randint(2, 6))).split()) + ".\n\n"
        f.write(para); n += len(para)
with open(f"{out}/code/big.py", "w") as f:
    n = i = 0
    while n < target:
        block = (f"class Station{i}:\n    \"\"\"Station {i}.\"\"\"\n\n    def measure(self, day):\n"
                 f"        rain = {rng.randint(0, 99)} * day\n        return rain + {i}\n\n\n")
        f.write(block); n += len(block); i += 1
PY
cargo build --release --locked -p situate -p situate-bench
bin_dir="${CARGO_TARGET_DIR:-target}/release"
for kind in text code; do
  /usr/bin/time -f '%e %M' -o "$out/$kind.time" \
    "$bin_dir/situate" --index "$out/index-$kind" ingest "$out/$kind" --context structural --json > "$out/$kind.json"
  read -r secs rss < "$out/$kind.time"
  python3 - "$out/$kind.json" "$secs" "$rss" "$kind" "$mb" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); secs, rss, kind, mb = float(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
print(f"| {mb} MB {kind} file | {r['report']['chunks']} chunks | {secs:.1f} s | {mb and int(mb)/secs:.1f} MB/s | peak RSS {rss/1024:.0f} MB |")
PY
done

# Peak heap (what the process allocates, without page cache and mapped index files, which
# RSS includes): MASSIF=1 bench/large_file.sh  (valgrind; about 10x slower).
if [ "${MASSIF:-0}" = 1 ]; then
  rm -rf "$out/index-massif"
  valgrind --tool=massif --massif-out-file="$out/massif.out" \
    "$bin_dir/situate" --index "$out/index-massif" ingest "$out/text" --context structural -q > /dev/null 2>&1
  ms_print "$out/massif.out" | awk '/^ +[0-9]+ +[0-9,]+ +[0-9,]+/ {gsub(",", "", $3); if ($3 > m) m = $3}
    END {printf "| %s MB text file | peak heap %.1f MB (massif) |\n", "'"$mb"'", m / 1048576}'
fi
