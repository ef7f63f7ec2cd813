#!/usr/bin/env bash
# Runs situate's fuzz targets (fuzz/fuzz_targets, libFuzzer through cargo fuzz on the
# nightly toolchain) for a set CPU time each, and prints one line per target.
#
#   scripts/fuzz.sh [SECONDS] [TARGET ...]     # 1800 CPU-seconds (30 CPU-minutes) each, every target
#   FUZZ_JOBS=2 scripts/fuzz.sh 60             # two targets at a time (one process each)
#   scripts/fuzz.sh --top-up 1800              # each target only what it lacks of 1800 in the ledger
#   scripts/fuzz.sh --ledger                   # what the ledger holds, per target
#
# Time is CPU time, measured (a niced run on a busy machine takes longer on the clock):
# each target runs in rounds of at most 10 minutes until it has used SECONDS of CPU. Every
# round is appended to the ledger target/fuzz/ledger.tsv (date, commit, target, CPU
# seconds, inputs, outcome), which `--top-up` and the summary line read, so a long
# campaign can be spread over several runs.
#
# Each target starts from its committed seeds (fuzz/seeds/TARGET, remade by fuzz/seeds.py)
# and the corpus earlier runs grew (target/fuzz/corpus/TARGET, kept between runs). An input
# that panics, takes more than 10 s, or needs more than 1 GiB is a failure: libFuzzer
# stops and writes it to fuzz/artifacts/TARGET/ (reproduce with `cargo +nightly fuzz run
# TARGET FILE`); a fixed one becomes a regression test holding the input. Logs go to
# target/fuzz/logs/TARGET.log. Needs `cargo install cargo-fuzz` and the nightly toolchain.
# Built without a sanitizer (`-s none`): the targets' code and its parsers are safe Rust, and
# the run then goes about twice as fast. Release code, as shipped (no debug assertions).
# A stack overflow kills the process before libFuzzer can save the input (SIGSEGV, no
# artifact): rebuild with the default sanitizer (`cargo +nightly fuzz run TARGET`, address)
# to catch it with its input.
set -euo pipefail
cd "$(dirname "$0")/.."
# `scripts/fuzz.sh --ledger`: the ledger summed per target (CPU-minutes, inputs, rounds,
# failed rounds, commits), every target listed, those with no round included.
if [ "${1:-}" = "--ledger" ]; then
  [ -f target/fuzz/ledger.tsv ] || { echo "no ledger yet: target/fuzz/ledger.tsv" >&2; exit 1; }
  ls fuzz/fuzz_targets | sed 's/\.rs$//' | awk -F'\t' '
    FNR == NR { if (FNR > 1) { cpu[$3] += $4; n[$3] += $5; r[$3]++
                  if ($6 ~ /^failed/) f[$3]++
                  if (index(" " c[$3] " ", " " $2 " ") == 0) c[$3] = c[$3] (c[$3] ? " " : "") $2 }
                next }
    { printf "%-16s %6.1f CPU-min %12d inputs %3d rounds %2d failed  %s\n", $1, cpu[$1] / 60, n[$1], r[$1], f[$1], c[$1] }
  ' target/fuzz/ledger.tsv -
  exit 0
fi
top_up=0
if [ "${1:-}" = "--top-up" ]; then
  top_up=1
  shift
fi
seconds=${1:-1800}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(ls fuzz/fuzz_targets | sed 's/\.rs$//')
fi
jobs=${FUZZ_JOBS:-1}
# How much longer than its CPU time a round takes on the clock, in percent (see run_one).
cores=$(nproc)
export FUZZ_SHARE=$((jobs > cores ? jobs * 100 / cores : 100))
mkdir -p target/fuzz/logs target/fuzz/corpus
ledger=target/fuzz/ledger.tsv
[ -f $ledger ] || printf 'date\tcommit\ttarget\tcpu_seconds\tinputs\toutcome\n' >$ledger
(cd fuzz && cargo +nightly fuzz build -s none -O >/dev/null)

# CPU seconds the ledger holds for a target.
spent() {
  awk -F'\t' -v t="$1" '$3 == t { s += $4 } END { printf "%d", s }' target/fuzz/ledger.tsv
}

run_one() {
  local t=$1 seconds=$2 top_up=$3
  local corpus=target/fuzz/corpus/$t log=target/fuzz/logs/$t.log
  local ledger=target/fuzz/ledger.tsv commit
  commit=$(git rev-parse --short HEAD)
  mkdir -p "$corpus" "fuzz/artifacts/$t"
  local want=$seconds
  [ "$top_up" -eq 1 ] && want=$((seconds - $(spent "$t")))
  # A target the ledger already has its time for is left alone, its log (and the coverage
  # its last run reached) kept.
  if [ "$want" -le 0 ]; then
    echo "$t: has its time already, $(spent "$t") CPU-s in the ledger"
    return 0
  fi
  local used=0 inputs=0 status=0 start
  start=$(date +%s)
  : >"$log"
  while [ "$used" -lt "$want" ] && [ "$status" -eq 0 ]; do
    # A round is clock time (libFuzzer's -max_total_time), the goal CPU time: with more
    # jobs than cores each target gets a share of a core, so the round asks for the CPU
    # time left stretched by that share (else the last rounds shrink one after another,
    # each paying for a start), and at least 30 s.
    local round=$(((want - used) * FUZZ_SHARE / 100)) times
    [ $round -lt 30 ] && round=30
    [ $round -gt 600 ] && round=600
    times=$(mktemp)
    # Built first, untimed: sources changed since the last round are compiled here, and
    # that work is not fuzzing (the timed run below then only starts the target).
    (cd fuzz && cargo +nightly fuzz build -s none -O "$t") >>"$log" 2>&1 || status=$?
    [ "$status" -eq 0 ] || break
    (cd fuzz && /usr/bin/time -f '%U %S' -o "$times" cargo +nightly fuzz run -s none -O "$t" \
      "../$corpus" "seeds/$t" -- \
      -max_total_time="$round" -timeout=10 -rss_limit_mb=1024 -max_len=1048576 \
      -print_final_stats=1 -artifact_prefix="artifacts/$t/") >>"$log" 2>&1 || status=$?
    local cpu n
    cpu=$(awk '/^[0-9.]+ [0-9.]+$/ { printf "%d", $1 + $2 }' "$times")
    rm -f "$times"
    n=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo 0)
    used=$((used + ${cpu:-0}))
    inputs=$((inputs + ${n:-0}))
    local outcome=ok
    [ "$status" -eq 0 ] || outcome="failed (exit $status)"
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$commit" "$t" "${cpu:-0}" "${n:-0}" "$outcome" >>"$ledger"
  done
  local cov
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo "?")
  if [ "$status" -eq 0 ]; then
    echo "$t: ok, $used CPU-s in $(($(date +%s) - start)) s, $inputs inputs, coverage $cov; $(spent "$t") CPU-s in the ledger"
  else
    echo "$t: FAILED (exit $status) after $used CPU-s: $(ls "fuzz/artifacts/$t" | head -3 | tr '\n' ' ')see $log"
  fi
}
export -f run_one spent
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c "run_one {} $seconds $top_up"
