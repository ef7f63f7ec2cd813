#!/usr/bin/env bash
# The test command: installs the models the tests need (pinned and verified; a no-op when
# they are there), then runs every unit test and the CLI integration tests.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --locked --quiet -p situate -- models install all-minilm-l6-v2 multilingual-e5-small smollm2-135m-instruct
cargo test --workspace --locked "$@"
