//! A hosted embedder end to end: ingest, search, an outage and its repair, against a local
//! fake OpenAI-compatible server whose vectors come from the hashing embedder.

use crate::{consistent_stats, json, run, situate};
use serde_json::{Value, json};
use situate_embed::hashing::HashEmbedder;
use situate_http::fake::{FakeServer, Reply};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

fn openai_like(down: Arc<AtomicBool>) -> FakeServer {
    let model = HashEmbedder::new(64);
    FakeServer::start(move |req, _| {
        if down.load(Ordering::SeqCst) {
            return Reply::raw(503, "{\"error\": \"down for maintenance\"}");
        }
        let body = req.json();
        let data: Vec<Value> = body["input"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, t)| json!({"index": i, "embedding": model.vector(t.as_str().unwrap_or(""))}))
            .collect();
        Reply::json(json!({"data": data}))
    })
    .expect("fake server")
}

#[test]
fn a_hosted_embedder_ingests_searches_survives_an_outage_and_is_repaired() {
    let tmp = tempfile::tempdir().expect("tmp");
    let docs = tmp.path().join("docs");
    std::fs::create_dir_all(&docs).expect("mkdir");
    std::fs::write(
        docs.join("keys.md"),
        "Rotate the signing key every ninety days.",
    )
    .expect("w");
    std::fs::write(docs.join("cats.md"), "Cats sleep for most of the day.").expect("w");
    let down = Arc::new(AtomicBool::new(false));
    let server = openai_like(down.clone());
    let spec = format!(
        "openai:fake-embed?base_url={}/v1&retries=2&timeout=5",
        server.url()
    );
    let index = tmp.path().join("idx");
    let v = json(
        situate(&index)
            .env("OPENAI_API_KEY", "sk-test-never-stored")
            .env_remove("OPENAI_BASE_URL")
            .args(["ingest", "--embedder", &spec])
            .arg(&docs),
        0,
    );
    assert_eq!(v["report"]["embed_model"], "openai:fake-embed");
    // Keys are read from the environment each time, never written to the index.
    for entry in std::fs::read_dir(&index).expect("index dir").flatten() {
        if entry.path().is_file() {
            let bytes = std::fs::read(entry.path()).expect("read");
            assert!(
                !bytes
                    .windows(b"sk-test-never-stored".len())
                    .any(|w| w == b"sk-test-never-stored"),
                "{} holds the key",
                entry.path().display()
            );
        }
    }
    assert_eq!(v["report"]["embedded"], 2);
    let calls_after_ingest = server.calls();
    assert!(calls_after_ingest >= 2, "a dimension probe, then the texts");
    let r = json(
        situate(&index).args(["search", "signing key", "--mode", "vector"]),
        0,
    );
    assert_eq!(r["hits"][0]["chunk_id"], "docs/keys.md#0");
    assert_eq!(
        server.calls(),
        calls_after_ingest + 1,
        "one request for the query"
    );
    let r = json(situate(&index).args(["search", "rotate key"]), 0);
    assert_eq!(r["mode"], "hybrid");
    assert_eq!(r["hits"][0]["legs"].as_array().map(Vec::len), Some(2));

    // The server goes down: a new document is stored and BM25-indexed, the failure reported.
    down.store(true, Ordering::SeqCst);
    std::fs::write(docs.join("dogs.md"), "Dogs bark at the postman.").expect("w");
    let v = json(situate(&index).arg("ingest").arg(&docs), 0);
    assert_eq!(v["report"]["embedding_failures"], 1, "{v:#}");
    let reason = v["report"]["embedding_error"].as_str().unwrap_or("");
    assert!(
        reason.contains("503") && reason.contains("maintenance"),
        "{reason}"
    );
    let r = json(
        situate(&index).args(["search", "postman", "--mode", "bm25"]),
        0,
    );
    assert_eq!(r["hits"][0]["chunk_id"], "docs/dogs.md#0");
    let out = run(situate(&index).args(["search", "postman"]), 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot embed the query") && err.contains("--mode bm25"),
        "{err}"
    );

    // Back up: rebuild embeds only what is missing; every index agrees with the cards.
    down.store(false, Ordering::SeqCst);
    let v = json(situate(&index).arg("rebuild"), 0);
    assert_eq!(v["embedded"], 1, "{v:#}");
    let s = consistent_stats(&index);
    assert_eq!(s["consistency"]["vector_chunks"], 3);
    let r = json(
        situate(&index).args(["search", "barking dogs postman", "--mode", "vector"]),
        0,
    );
    assert_eq!(r["hits"][0]["chunk_id"], "docs/dogs.md#0");
}

#[test]
fn a_public_hosted_api_without_a_key_is_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().expect("tmp");
    std::fs::write(tmp.path().join("a.md"), "Some text.").expect("w");
    let index = tmp.path().join("idx");
    let out = run(
        situate(&index)
            .env_remove("VOYAGE_API_KEY")
            .env_remove("VOYAGE_BASE_URL")
            .args(["ingest", "--embedder", "voyage:voyage-3.5"])
            .arg(tmp.path().join("a.md")),
        1,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("VOYAGE_API_KEY"), "{err}");
    if index.join("cards.db").exists() {
        let s = json(situate(&index).arg("stats"), 0);
        assert_eq!(s["stats"]["store"]["chunks"], 0, "{s:#}");
    }
}
