#!/usr/bin/env bash
# The test command: every unit test and the CLI integration tests.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --locked "$@"
