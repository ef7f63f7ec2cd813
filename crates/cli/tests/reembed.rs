//! `situate reembed`: a live switch of embedder while a service and one-shot searches
//! answer, a `kill -9` midway (at a committed batch, and between the new snapshot and the
//! switch) resumed by running it again, the HTTP job, and refusals.

use crate::serve::{Server, many_documents};
use crate::*;
use serde_json::json;

/// An index of `n` small documents with the hashing embedder of `dim` dimensions.
fn index_with(tmp: &Path, n: usize, dim: usize) -> PathBuf {
    let docs = many_documents(tmp, "docs", n);
    let index = tmp.join("idx");
    run(
        situate(&index).arg("ingest").arg(&docs).args([
            "--embedder",
            &format!("hash:{dim}"),
            "--context",
            "none",
        ]),
        0,
    );
    index
}

fn stats(index: &Path) -> Value {
    consistent_stats(index)["stats"].clone()
}

#[test]
fn reembed_switches_while_the_service_and_searches_answer() {
    let tmp = tempfile::tempdir().expect("tmp");
    let index = index_with(tmp.path(), 800, 64);
    let s = Server::start(&index, &[], &[]);
    let before = s.post(
        "/v1/search",
        &json!({"query": "entry 17 about the lamp", "k": 5}),
    );
    assert_eq!(before.status, 200, "{:#}", before.body);
    // The switch in a process of its own (batches of 2: it commits 400 batches), and
    // searches over HTTP and one-shot searches until it ends: every one answers.
    let child = situate(&index)
        .args(["--json", "reembed", "--embedder", "hash:96", "--batch", "2"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("reembed starts");
    let mut child = child;
    let mut answered = 0;
    while child.try_wait().expect("wait").is_none() {
        let r = s.post("/v1/search", &json!({"query": "weather and ships", "k": 3}));
        assert_eq!(r.status, 200, "a search during the switch: {:#}", r.body);
        let v = json(situate(&index).args(["search", "lamp", "-k", "2"]), 0);
        assert_eq!(v["hits"].as_array().map(Vec::len), Some(2), "{v:#}");
        answered += 1;
    }
    let out = child.wait_with_output().expect("reembed ends");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let a: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(answered >= 1, "searches ran beside the switch");
    assert_eq!(a["switched"], true, "{a:#}");
    assert_eq!(a["previous"], "hash:64");
    assert_eq!(a["embedder"], "hash:96");
    assert_eq!(a["vectors"], 800);
    assert_eq!(
        (a["embedded"].as_u64(), a["reused"].as_u64()),
        (Some(800), Some(0))
    );
    let st = stats(&index);
    assert_eq!(st["embed_model"], "hash:96", "{st:#}");
    assert_eq!(st["vectors"], 800);
    // The service's readers follow: its searches use the new vectors (a query whose
    // embedding has the old dimension would fail).
    let after = s.post(
        "/v1/search",
        &json!({"query": "entry 17 about the lamp", "k": 5}),
    );
    assert_eq!(after.status, 200, "{:#}", after.body);
    let info = s.get("/v1/info");
    assert_eq!(
        info.body["stats"]["embed_model"], "hash:96",
        "{:#}",
        info.body
    );
    // Back to the first model: every embedding is in the cache, nothing is embedded.
    let back = json(
        situate(&index).args(["reembed", "--embedder", "hash:64"]),
        0,
    );
    assert_eq!(
        (back["embedded"].as_u64(), back["reused"].as_u64()),
        (Some(0), Some(800)),
        "{back:#}"
    );
    // The same again: nothing to do.
    let same = json(
        situate(&index).args(["reembed", "--embedder", "hash:64"]),
        0,
    );
    assert_eq!(same["switched"], false);
    // As a job over HTTP, with its progress.
    let job = s.post(
        "/v1/jobs",
        &json!({"kind": "reembed", "embedder": "hash:80"}),
    );
    assert_eq!(job.status, 202, "{:#}", job.body);
    let done = s.wait_job(job.body["id"].as_str().expect("id"));
    assert_eq!(done["state"], "succeeded", "{done:#}");
    assert_eq!(done["result"]["embedder"], "hash:80");
    assert_eq!(done["progress"]["embedding"]["done"], 800, "{done:#}");
    let bad = s.post(
        "/v1/jobs",
        &json!({"kind": "reembed", "embedder": "no-such-model"}),
    );
    assert_eq!(bad.status, 400, "{:#}", bad.body);
    assert_eq!(bad.body["field"], "embedder");
}

#[test]
fn a_reembed_killed_midway_keeps_the_old_vectors_and_resumes() {
    let tmp = tempfile::tempdir().expect("tmp");
    let index = index_with(tmp.path(), 200, 64);
    let hits = |index: &Path| -> Vec<String> {
        let v = json(
            situate(index).args(["search", "entry 5 lamp", "-k", "5"]),
            0,
        );
        v["hits"]
            .as_array()
            .expect("hits")
            .iter()
            .map(|h| h["chunk_id"].as_str().expect("id").to_string())
            .collect()
    };
    let old = hits(&index);
    for point in ["reembed-batch", "reembed-switch"] {
        let out = situate(&index)
            .args(["reembed", "--embedder", "hash:128", "--batch", "50"])
            .env("SITUATE_CRASH_AT", point)
            .output()
            .expect("runs");
        assert!(!out.status.success(), "{point}: the process was killed");
        // The index is whole and still the old one: same embedder, same hits.
        let st = stats(&index);
        assert_eq!(st["embed_model"], "hash:64", "{point}: {st:#}");
        assert_eq!(hits(&index), old, "{point}");
    }
    // Run again: what the killed runs embedded is reused, and it switches.
    let a = json(
        situate(&index).args(["reembed", "--embedder", "hash:128", "--batch", "50"]),
        0,
    );
    assert_eq!(a["switched"], true, "{a:#}");
    assert_eq!(
        a["reused"], 200,
        "both killed runs had committed every batch: {a:#}"
    );
    assert_eq!(a["embedded"], 0);
    assert_eq!(stats(&index)["embed_model"], "hash:128");
    let check = json(situate(&index).arg("check"), 0);
    assert_eq!(check["healthy"], true, "{check:#}");
    // No snapshot but the live one is left behind.
    let snapshots: Vec<String> = std::fs::read_dir(&index)
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("vectors-"))
        .collect();
    assert_eq!(snapshots.len(), 1, "{snapshots:?}");
}

#[test]
fn bad_reembed_requests_are_refused_and_change_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let index = index_with(tmp.path(), 5, 64);
    for (embedder, says) in [
        ("no-such-model", "unknown embedder"),
        ("none", "name the embedder"),
        ("nomic-embed-text-v1.5:late", "late-chunking"),
    ] {
        let out = run(situate(&index).args(["reembed", "--embedder", embedder]), 1);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{embedder}: {err}");
    }
    let out = run(
        situate(&index).args(["reembed", "--embedder", "hash:32", "--batch", "0"]),
        1,
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("batch"));
    assert_eq!(stats(&index)["embed_model"], "hash:64");
}
