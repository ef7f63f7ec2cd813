//! The hosted embedders against local fake servers speaking each protocol.

use crate::hosted::HostedEmbedder;
use serde_json::{Value, json};
use situate_core::{EmbedKind, Embedder};
use situate_http::fake::{FakeServer, Reply, Request};
use std::time::Duration;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// A deterministic, unnormalised vector for a text: [length, 1, 2].
fn fake_vector(text: &str) -> Value {
    json!([text.chars().count() as f64, 1.0, 2.0])
}

fn inputs(req: &Request) -> Vec<String> {
    req.json()["input"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// An OpenAI-style server that answers with `data` in reverse order (the index tells).
fn openai_server() -> FakeServer {
    FakeServer::start(|req, _| {
        let data: Vec<Value> = inputs(req)
            .iter()
            .enumerate()
            .rev()
            .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": fake_vector(t)}))
            .collect();
        Reply::json(json!({"object": "list", "data": data, "usage": {"prompt_tokens": 3, "total_tokens": 3}}))
    })
    .expect("server")
}

fn env_with(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let pairs: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
}

fn check_vector(v: &[f32], text: &str) {
    let raw = [text.chars().count() as f32, 1.0, 2.0];
    let norm = raw.iter().map(|x| x * x).sum::<f32>().sqrt();
    for (a, b) in v.iter().zip(raw) {
        assert!(
            (a - b / norm).abs() < 1e-6,
            "{v:?} is not {text:?}'s vector"
        );
    }
}

#[test]
fn openai_protocol_batches_orders_and_normalises() {
    let server = openai_server();
    let spec = "openai:text-embedding-3-small?dimensions=3&batch=4&concurrency=2";
    let env = env_with(&[
        ("OPENAI_API_KEY", "sk-test"),
        ("OPENAI_BASE_URL", &format!("{}/v1/", server.url())),
    ]);
    let e = HostedEmbedder::from_spec_with_env(spec, &env).expect("spec");
    assert_eq!(e.model_id(), "openai:text-embedding-3-small:3");
    assert_eq!(e.dim(), 3, "dimensions= is known without a request");
    let texts: Vec<String> = (0..10).map(|i| "x".repeat(i + 1)).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let vs = rt()
        .block_on(e.embed(&refs, EmbedKind::Passage))
        .expect("embed");
    assert_eq!(vs.len(), 10);
    for (v, t) in vs.iter().zip(&texts) {
        check_vector(v, t);
    }
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3, "10 texts in batches of 4");
    assert!(server.max_in_flight() <= 2);
    for r in &reqs {
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/v1/embeddings");
        assert_eq!(r.header("authorization"), Some("Bearer sk-test"));
        assert_eq!(r.header("content-type"), Some("application/json"));
        let body = r.json();
        assert_eq!(body["model"], "text-embedding-3-small");
        assert_eq!(body["dimensions"], 3);
        assert_eq!(body["encoding_format"], "float");
    }
    let mut sent: Vec<String> = reqs.iter().flat_map(inputs).collect();
    sent.sort();
    let mut want = texts.clone();
    want.sort();
    assert_eq!(sent, want, "every text sent once");
}

#[test]
fn local_servers_need_no_key_and_unknown_models_probe_their_dimension() {
    let server = openai_server();
    let spec = format!("ollama:nomic-embed-text?base_url={}/v1", server.url());
    let e = HostedEmbedder::from_spec_with_env(&spec, &env_with(&[])).expect("no key needed");
    assert_eq!(e.dim(), 0, "unknown until asked");
    let rt = rt();
    assert_eq!(rt.block_on(e.probe_dim()).expect("probe"), 3);
    assert_eq!(e.dim(), 3);
    assert_eq!(server.calls(), 1);
    assert_eq!(server.requests()[0].header("authorization"), None);
    rt.block_on(e.probe_dim()).expect("known now");
    assert_eq!(server.calls(), 1, "the probe runs once");
}

#[test]
fn voyage_protocol_sends_input_type_and_output_dimension() {
    let server = openai_server();
    let env = env_with(&[
        ("VOYAGE_API_KEY", "pa-test"),
        ("VOYAGE_BASE_URL", &format!("{}/v1", server.url())),
    ]);
    let e =
        HostedEmbedder::from_spec_with_env("voyage:voyage-3.5?dimensions=3", &env).expect("spec");
    let rt = rt();
    rt.block_on(e.embed(&["a query"], EmbedKind::Query))
        .expect("query");
    let vs = rt
        .block_on(e.embed(&["passage one", "two"], EmbedKind::Passage))
        .expect("passages");
    check_vector(&vs[0], "passage one");
    check_vector(&vs[1], "two");
    let reqs = server.requests();
    assert_eq!(reqs[0].path, "/v1/embeddings");
    assert_eq!(reqs[0].header("authorization"), Some("Bearer pa-test"));
    assert_eq!(reqs[0].json()["input_type"], "query");
    assert_eq!(reqs[1].json()["input_type"], "document");
    assert_eq!(reqs[1].json()["output_dimension"], 3);
    assert_eq!(reqs[1].json()["model"], "voyage-3.5");
}

#[test]
fn gemini_protocol_uses_batch_embed_contents_and_task_types() {
    let server = FakeServer::start(|req, _| {
        let embeddings: Vec<Value> = req.json()["requests"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|r| json!({"values": fake_vector(r["content"]["parts"][0]["text"].as_str().unwrap_or(""))}))
                    .collect()
            })
            .unwrap_or_default();
        Reply::json(json!({"embeddings": embeddings}))
    })
    .expect("server");
    let env = env_with(&[
        ("GOOGLE_API_KEY", "g-key"),
        ("GEMINI_BASE_URL", &format!("{}/v1beta", server.url())),
    ]);
    let e = HostedEmbedder::from_spec_with_env("gemini:gemini-embedding-001?dimensions=3", &env)
        .expect("spec");
    let rt = rt();
    let vs = rt
        .block_on(e.embed(&["alpha", "be"], EmbedKind::Passage))
        .expect("embed");
    check_vector(&vs[0], "alpha");
    check_vector(&vs[1], "be");
    rt.block_on(e.embed(&["q"], EmbedKind::Query))
        .expect("query");
    let reqs = server.requests();
    assert_eq!(
        reqs[0].path,
        "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    );
    assert_eq!(reqs[0].header("x-goog-api-key"), Some("g-key"));
    let body = reqs[0].json();
    assert_eq!(body["requests"][0]["model"], "models/gemini-embedding-001");
    assert_eq!(body["requests"][0]["taskType"], "RETRIEVAL_DOCUMENT");
    assert_eq!(body["requests"][0]["outputDimensionality"], 3);
    assert_eq!(body["requests"][1]["content"]["parts"][0]["text"], "be");
    assert_eq!(reqs[1].json()["requests"][0]["taskType"], "RETRIEVAL_QUERY");
}

#[test]
fn rate_limits_and_server_errors_are_retried_then_reported() {
    let server = FakeServer::start(|req, n| match n {
        0 => Reply::raw(429, "{\"error\": {\"message\": \"Rate limit reached\"}}")
            .header("retry-after-ms", "200"),
        1 => Reply::raw(502, "bad gateway"),
        2 => {
            Reply::json(json!({"data": [{"index": 0, "embedding": fake_vector(&inputs(req)[0])}]}))
                .delay(Duration::from_secs(3))
        }
        3 => {
            Reply::json(json!({"data": [{"index": 0, "embedding": fake_vector(&inputs(req)[0])}]}))
        }
        _ => Reply::raw(500, "internal error: model crashed"),
    })
    .expect("server");
    let spec = format!("openai:m?base_url={}&retries=4&timeout=1", server.url());
    let e = HostedEmbedder::from_spec_with_env(&spec, &env_with(&[])).expect("spec");
    let rt = rt();
    let start = std::time::Instant::now();
    let v = rt
        .block_on(e.embed(&["hello"], EmbedKind::Passage))
        .expect("fourth try");
    check_vector(&v[0], "hello");
    assert_eq!(server.calls(), 4, "429, 502, a timeout, then the answer");
    assert!(
        start.elapsed() >= Duration::from_millis(200),
        "retry-after-ms honoured"
    );
    let err = rt
        .block_on(e.embed(&["again"], EmbedKind::Passage))
        .expect_err("500 four times");
    assert_eq!(server.calls(), 8);
    let text = err.to_string();
    assert!(
        text.contains("500") && text.contains("model crashed") && text.contains("4 attempt"),
        "{text}"
    );
}

#[test]
fn bad_answers_are_errors_not_wrong_vectors() {
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"data": [{"index": 0, "embedding": [1.0, 0.0]}]}),
            "1 vectors for 2 texts",
        ),
        (
            json!({"data": [{"index": 0, "embedding": [1.0, 0.0]}, {"index": 0, "embedding": [0.0, 1.0]}]}),
            "index 0 twice",
        ),
        (
            json!({"data": [{"index": 0, "embedding": [1.0, 0.0]}, {"index": 1, "embedding": [0.0, 0.0]}]}),
            "zero vector",
        ),
        (
            json!({"data": [{"index": 0, "embedding": [1.0, 0.0]}, {"index": 1, "embedding": [0.0, 1.0, 0.0]}]}),
            "3-dimensional vector where 2",
        ),
        (json!({"error": "no data"}), "no `data` array"),
    ];
    for (answer, expected) in cases {
        let a = answer.clone();
        let server = FakeServer::start(move |_, _| Reply::json(a.clone())).expect("server");
        let spec = format!("openai:m?base_url={}", server.url());
        let e = HostedEmbedder::from_spec_with_env(&spec, &env_with(&[])).expect("spec");
        let err = rt()
            .block_on(e.embed(&["a", "b"], EmbedKind::Passage))
            .expect_err("bad answer");
        assert!(err.to_string().contains(expected), "{answer}: {err}");
    }
}

#[test]
fn specs_are_checked_before_any_request() {
    let none = env_with(&[]);
    let err = |spec: &str| {
        HostedEmbedder::from_spec_with_env(spec, &none)
            .err()
            .expect(spec)
            .to_string()
    };
    assert!(err("openai:text-embedding-3-small").contains("OPENAI_API_KEY"));
    assert!(err("voyage:voyage-3.5").contains("VOYAGE_API_KEY"));
    assert!(err("gemini:gemini-embedding-001").contains("GEMINI_API_KEY or GOOGLE_API_KEY"));
    assert!(err("openai:m?base_url=http://h&colour=red").contains("unknown option"));
    assert!(err("openai:m?base_url=http://h&batch=0").contains("batch=0"));
    assert!(err("openai:m?base_url=ftp://h").contains("http://"));
    assert!(err("openai:m?base_url=http://h&key_env=MY_KEY").contains("MY_KEY"));
    assert!(err("openai:?base_url=http://h").contains("model name"));
    assert!(err("gemini:g?base_url=http://h&batch=200").contains("100"));
    let with_key = env_with(&[("MY_KEY", "k")]);
    let e = HostedEmbedder::from_spec_with_env("openai:m?key_env=MY_KEY", &with_key)
        .expect("key from key_env");
    assert_eq!(e.options().key.as_deref(), Some("k"));
    assert_eq!(e.options().base_url, "https://api.openai.com/v1");
    assert!(crate::hosted::is_hosted("voyage:x") && !crate::hosted::is_hosted("hash:8"));
}
