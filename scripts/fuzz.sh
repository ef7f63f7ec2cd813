#!/usr/bin/env bash
# Runs situate's fuzz targets (fuzz/fuzz_targets, libFuzzer through cargo fuzz on the
# nightly toolchain) for a set time each, and prints one line per target.
#
#   scripts/fuzz.sh [SECONDS] [TARGET ...]     # default 1800 s (30 CPU-minutes) each, every target
#   FUZZ_JOBS=2 scripts/fuzz.sh 60             # two targets at a time (one process each)
#
# Each target starts from its committed seeds (fuzz/seeds/TARGET, remade by fuzz/seeds.py)
# and the corpus earlier runs grew (target/fuzz/corpus/TARGET, kept between runs). An input
# that panics, takes more than 10 s, or needs more than 1 GiB is a failure: libFuzzer
# stops and writes it to fuzz/artifacts/TARGET/ (reproduce with `cargo +nightly fuzz run
# TARGET FILE`); a fixed one becomes a regression test holding the input. Logs go to
# target/fuzz/logs/TARGET.log. Needs `cargo install cargo-fuzz` and the nightly toolchain.
# Built without a sanitizer (`-s none`): the targets' code and its parsers are safe Rust, and
# the run then goes about twice as fast. Release code, as shipped (no debug assertions).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-1800}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(ls fuzz/fuzz_targets | sed 's/\.rs$//')
fi
jobs=${FUZZ_JOBS:-1}
mkdir -p target/fuzz/logs target/fuzz/corpus
(cd fuzz && cargo +nightly fuzz build -s none -O >/dev/null)

run_one() {
  local t=$1 seconds=$2
  local corpus=target/fuzz/corpus/$t log=target/fuzz/logs/$t.log
  mkdir -p "$corpus" "fuzz/artifacts/$t"
  local start end status=0
  start=$(date +%s)
  (cd fuzz && cargo +nightly fuzz run -s none -O "$t" \
    "../$corpus" "seeds/$t" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=1024 -max_len=1048576 \
    -print_final_stats=1 -artifact_prefix="artifacts/$t/") >"$log" 2>&1 || status=$?
  end=$(date +%s)
  local execs cov
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo "?")
  if [ "$status" -eq 0 ]; then
    echo "$t: ok, $((end - start)) s, $execs inputs, coverage $cov"
  else
    echo "$t: FAILED (exit $status) after $((end - start)) s: $(ls "fuzz/artifacts/$t" | head -3 | tr '\n' ' ')see $log"
  fi
}
export -f run_one
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c "run_one {} $seconds"
