//! LLM contexts end to end against a fake Anthropic server: a kill -9 in the middle of
//! contextualization, then a re-run that asks again for no context that was finished.

use crate::{json, situate};
use serde_json::json;
use situate_http::fake::{FakeServer, Reply};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The chunk part of an Anthropic request (the second content block).
fn chunk_of(body: &serde_json::Value) -> String {
    body["messages"][0]["content"][1]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn kill_9_during_contextualization_then_resume_asks_for_no_finished_context_again() {
    let tmp = tempfile::tempdir().expect("tmp");
    let docs = tmp.path().join("docs");
    std::fs::create_dir_all(&docs).expect("mkdir");
    let topics = ["harbour", "orchard", "glacier", "library"];
    for t in topics {
        let text: String = (0..4)
            .map(|p| format!("Paragraph {p} about the {t}: the {t} is described here in some detail, with enough words to make a chunk of its own.\n\n"))
            .collect();
        std::fs::write(docs.join(format!("{t}.txt")), text).expect("w");
    }
    let server = FakeServer::start(|req, _| {
        Reply::json(json!({
            "content": [{"type": "text", "text": "This passage belongs to the document described."}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 30, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 9}
        }))
        .delay(Duration::from_millis(if chunk_of(&req.json()).is_empty() { 0 } else { 120 }))
    })
    .expect("server");
    let llm = format!(
        "anthropic:claude-test?base_url={}&concurrency=2&retries=2",
        server.url()
    );
    let ingest = |index: &std::path::Path| {
        let mut c = situate(index);
        c.env("ANTHROPIC_API_KEY", "k")
            .env_remove("ANTHROPIC_BASE_URL")
            .args(["ingest", "--context", "llm", "--llm", &llm])
            .args([
                "--embedder",
                "none",
                "--max-tokens",
                "40",
                "--overlap",
                "0",
                "--batch",
                "100",
            ])
            .arg(&docs);
        c
    };
    let index = tmp.path().join("idx");
    let mut child = ingest(&index)
        .arg("--quiet")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let started = Instant::now();
    while server.calls() < 6 && started.elapsed() < Duration::from_secs(60) {
        if let Some(status) = child.try_wait().expect("wait") {
            panic!("the first run ended before the kill: {status}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let before = server.calls();
    assert!(before >= 6, "the first run made {before} calls");

    let v = json(&mut ingest(&index), 0);
    let report = &v["report"];
    let chunks = report["chunks"].as_u64().expect("chunks");
    assert!(chunks >= 8, "{report}");
    let mut asked: HashMap<String, (usize, usize)> = HashMap::new();
    for (i, r) in server.requests().iter().enumerate() {
        let e = asked.entry(chunk_of(&r.json())).or_default();
        if i < before {
            e.0 += 1;
        } else {
            e.1 += 1;
        }
    }
    assert_eq!(asked.len() as u64, chunks, "every chunk was asked for");
    let again: Vec<&String> = asked
        .iter()
        .filter(|(_, (a, b))| *a > 0 && *b > 0)
        .map(|(k, _)| k)
        .collect();
    // Only requests in flight at the kill (at most the concurrency, 2) may be asked again.
    assert!(again.len() <= 2, "asked again: {again:?}");
    assert!(asked.values().all(|(_, b)| *b <= 1), "the re-run asks once");
    assert_eq!(
        report["contexts_cached"].as_u64(),
        Some(chunks - asked.values().filter(|(_, b)| *b == 1).count() as u64),
        "{report}"
    );
    assert!(report["contexts_cached"].as_u64().unwrap_or(0) + 2 >= before as u64);
    // Every card has its context, once.
    let stats = json(situate(&index).arg("stats"), 0);
    assert_eq!(stats["consistent"], true, "{stats}");
    assert_eq!(
        stats["stats"]["store"]["chunks"].as_u64(),
        Some(chunks),
        "{stats}"
    );
    assert_eq!(
        stats["stats"]["store"]["context_status"],
        json!([["verified", chunks]]),
        "{stats}"
    );
    let show = json(situate(&index).args(["show", "docs/glacier.txt#0"]), 0);
    assert_eq!(show["context_status"], "verified", "{show}");
    assert_eq!(show["context_provenance"]["model"], "anthropic:claude-test");
    assert_eq!(show["context_provenance"]["strategy"], "whole");
}
