//! Integration tests: they drive the `situate` binary on committed fixtures and on corpora
//! they write themselves. One test binary (see ripgrep's layout) with a module per area.

mod api;
mod ask;
mod backup;
mod browser;
mod contexts;
mod crash;
mod documents;
mod eval;
mod faults;
mod hosted;
mod ingest;
mod integrity;
mod mcp;
mod models;
mod reembed;
mod rerank;
mod search;
mod security;
mod serve;
mod store;
mod tune;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The committed fixtures.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("fixtures")
}

/// The committed fixture corpus ingested into a fresh index with small chunks (the manual
/// has a chunk per section) and `embedder` (`none`: BM25 only, no model to load;
/// `hash:DIM`: vectors without a model's time).
pub fn indexed_corpus(embedder: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tmp");
    let index = tmp.path().join("idx");
    run(
        situate(&index)
            .arg("ingest")
            .arg(fixtures().join("corpus"))
            .args([
                "--max-tokens",
                "60",
                "--overlap",
                "0",
                "--embedder",
                embedder,
            ]),
        0,
    );
    (tmp, index)
}

/// The Python `scripts/test.sh` installs the test's packages into (the `mcp` client,
/// schemathesis).
pub fn test_python() -> String {
    std::env::var("SITUATE_TEST_PYTHON").unwrap_or_else(|_| {
        panic!(
            "SITUATE_TEST_PYTHON is not set: scripts/test.sh sets it to a Python with the test packages (mcp==2.3.0, schemathesis==4.32.5)"
        )
    })
}

/// A command for the binary under test, on `index`, with no settings file in reach.
pub fn situate(index: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_situate"));
    c.arg("--index")
        .arg(index)
        .env_remove("SITUATE_INDEX")
        .env_remove("SITUATE_CRASH_AT");
    // Run beside the index (where no situate.toml is, unless a test writes one).
    c.current_dir(
        index
            .parent()
            .filter(|p| p.is_dir())
            .unwrap_or(Path::new("/")),
    );
    c
}

/// Runs and returns the output, failing the test with stderr when the exit status is not
/// `code`.
pub fn run(cmd: &mut Command, code: i32) -> Output {
    let out = cmd.output().expect("the situate binary runs");
    assert_eq!(
        out.status.code(),
        Some(code),
        "{cmd:?}\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs with `--json` and parses stdout.
pub fn json(cmd: &mut Command, code: i32) -> Value {
    let out = run(cmd.arg("--json"), code);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// The reason an ingest's JSON report (`ingest --json`) gives for skipping the file whose path
/// ends with `name`; panics when it was not skipped.
pub fn skip_reason(v: &Value, name: &str) -> String {
    let skipped = v["report"]["skipped"].as_array().expect("skipped");
    skipped
        .iter()
        .find(|s| s["source"].as_str().is_some_and(|p| p.ends_with(name)))
        .and_then(|s| s["reason"].as_str())
        .unwrap_or_else(|| panic!("{name} not reported as skipped: {skipped:#?}"))
        .to_string()
}

/// `situate stats --json`, asserting the index agrees with the store.
pub fn consistent_stats(index: &Path) -> Value {
    let v = json(situate(index).arg("stats"), 0);
    assert_eq!(v["consistent"], Value::Bool(true), "{v:#}");
    v
}

/// The documents the index holds, asserting it agrees with its store.
pub fn documents(index: &Path) -> u64 {
    consistent_stats(index)["stats"]["store"]["documents"]
        .as_u64()
        .expect("documents")
}

/// The chunk ids of a search, best first.
/// Chunk ids found for `query`; BM25 unless `extra` names another `--mode` (these tests are
/// about lexical matching; hybrid search has its own tests).
pub fn search_ids(index: &Path, query: &str, extra: &[&str]) -> Vec<String> {
    let mut cmd = situate(index);
    cmd.arg("search").arg(query).args(extra);
    if !extra.contains(&"--mode") {
        cmd.args(["--mode", "bm25"]);
    }
    let v = json(&mut cmd, 0);
    v["hits"]
        .as_array()
        .expect("hits array")
        .iter()
        .map(|h| h["chunk_id"].as_str().expect("chunk_id").to_string())
        .collect()
}
