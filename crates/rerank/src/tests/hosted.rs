//! Hosted rerank APIs (Cohere, Voyage, Jina, TEI, vLLM, Infinity) against fake servers.

use super::*;
use crate::hosted::HostedReranker;
use serde_json::{Value, json};
use situate_core::Reranker;
use situate_http::fake::{FakeServer, Reply};

#[tokio::test]
async fn hosted_rerankers_speak_each_protocol_and_split_into_batches() {
    // Each protocol's answer shape, results in reverse order (mapped back by index).
    let server = FakeServer::start(|req, _| {
        let body = req.json();
        let query = body["query"].as_str().unwrap_or_default().to_string();
        let docs: Vec<String> = body["documents"]
            .as_array()
            .or_else(|| body["texts"].as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|d| d.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let scored: Vec<(usize, f64)> = docs
            .iter()
            .enumerate()
            .rev()
            .map(|(i, d)| (i, overlap(&query, d)))
            .collect();
        let list = |key: &str| -> Vec<Value> {
            scored
                .iter()
                .map(|(i, s)| json!({"index": i, key: s}))
                .collect()
        };
        Reply::json(match req.path.as_str() {
            "/v2/rerank" => json!({"id": "x", "results": list("relevance_score")}),
            "/voyage/rerank" => json!({"object": "list", "data": list("relevance_score")}),
            "/tei/rerank" => json!(list("score")),
            _ => json!({"results": list("relevance_score")}),
        })
    })
    .expect("server");
    let url = server.url().to_string();
    let env = env_with(&[
        ("COHERE_API_KEY", "co-secret"),
        ("VOYAGE_API_KEY", "vo-secret"),
        ("JINA_API_KEY", "jina-secret"),
    ]);
    let specs = [
        (
            format!("cohere:rerank-v3.5?base_url={url}&batch=2"),
            "/v2/rerank",
            Some("Bearer co-secret"),
        ),
        (
            format!("voyage:rerank-2.5?base_url={url}/voyage&batch=2"),
            "/voyage/rerank",
            Some("Bearer vo-secret"),
        ),
        (
            format!("jina:jina-reranker-v2?base_url={url}/jina&batch=2"),
            "/jina/rerank",
            Some("Bearer jina-secret"),
        ),
        (
            format!("tei:bge-reranker-base?base_url={url}/tei&batch=2"),
            "/tei/rerank",
            None,
        ),
        (
            format!("vllm:bge-reranker-v2-m3?base_url={url}/vllm&batch=2"),
            "/vllm/rerank",
            None,
        ),
    ];
    let passages = five();
    for (spec, path, auth) in specs {
        let before = server.calls();
        let r = HostedReranker::from_spec_with_env(&spec, &env).expect("spec");
        let scores = r
            .score("how much did the revenue grow", &passages)
            .await
            .expect("scores");
        assert_eq!(scores, vec![0.0, 2.0, 1.0, 0.0, 6.0], "{spec}");
        let reqs: Vec<_> = server.requests()[before..].to_vec();
        assert_eq!(reqs.len(), 3, "{spec}: 5 passages in batches of 2");
        for req in &reqs {
            assert_eq!(req.path, path);
            assert_eq!(req.header("authorization"), auth, "{spec}");
        }
        let mut sent: Vec<Value> = Vec::new();
        for req in &reqs {
            let b = req.json();
            let docs = if path == "/tei/rerank" {
                assert_eq!(b["truncate"], true);
                assert!(b.get("model").is_none());
                b["texts"].clone()
            } else {
                assert!(
                    b["model"].as_str().is_some_and(|m| spec.contains(m)),
                    "{spec}"
                );
                b["documents"].clone()
            };
            sent.extend(docs.as_array().cloned().unwrap_or_default());
        }
        sent.sort_by_key(|d| d.to_string());
        assert!(
            sent.contains(&json!("Context: from acme\nPassage: the revenue grew")),
            "{spec}: the context is sent in its labelled section: {sent:?}"
        );
    }
}

#[tokio::test]
async fn hosted_rerankers_retry_and_reject_unusable_answers() {
    // 429 with retry-after, then 500, then an answer.
    let server = FakeServer::start(|req, n| match n {
        0 => Reply::raw(429, "slow down").header("retry-after", "0"),
        1 => Reply::raw(500, "oops"),
        _ => {
            let n = req.json()["texts"].as_array().map_or(0, Vec::len);
            Reply::json(json!(
                (0..n)
                    .map(|i| json!({"index": i, "score": i as f64}))
                    .collect::<Vec<_>>()
            ))
        }
    })
    .expect("server");
    let r = HostedReranker::from_spec_with_env(
        &format!("tei:m?base_url={}", server.url()),
        &env_with(&[]),
    )
    .expect("spec");
    let scores = r.score("q", &five()).await.expect("after retries");
    assert_eq!(scores, vec![0.0, 1.0, 2.0, 3.0, 4.0]);
    assert_eq!(server.calls(), 3);

    for (bad, why) in [
        (json!([{"index": 0, "score": 1.0}]), "not scored"),
        (
            json!([{"index": 0, "score": 1.0}, {"index": 0, "score": 2.0}]),
            "twice",
        ),
        (json!([{"index": 7, "score": 1.0}]), "out of range"),
        (json!({"error": "no"}), "no list"),
        (json!([{"score": 1.0}]), "without an index"),
    ] {
        let server = FakeServer::start(move |_, _| Reply::json(bad.clone())).expect("server");
        let r = HostedReranker::from_spec_with_env(
            &format!("tei:m?base_url={}&retries=1", server.url()),
            &env_with(&[]),
        )
        .expect("spec");
        let e = r.score("q", &five()[..2]).await.expect_err("unusable");
        assert!(e.to_string().contains(why), "{why}: {e}");
    }
    // A public API without its key is refused before anything is sent; the key never shows.
    let e = HostedReranker::from_spec_with_env("cohere:rerank-v3.5", &env_with(&[]))
        .err()
        .expect("no key");
    assert!(e.to_string().contains("COHERE_API_KEY"), "{e}");
    let server = FakeServer::start(|_, _| Reply::raw(401, "bad key")).expect("server");
    let r = HostedReranker::from_spec_with_env(
        &format!("cohere:m?base_url={}", server.url()),
        &env_with(&[("COHERE_API_KEY", "sk-very-secret")]),
    )
    .expect("spec");
    let e = r.score("q", &five()).await.expect_err("401");
    assert!(!e.to_string().contains("sk-very-secret"), "{e}");
    assert_eq!(server.calls(), 1, "a 401 is not retried");
}
