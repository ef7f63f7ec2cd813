//! LLM contexts end to end against a fake Anthropic server: a kill -9 in the middle of
//! contextualization, then a re-run that asks again for no context that was finished.

use crate::{json, run, situate};
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

/// An Anthropic-like server whose usage is close to situate's estimate, so that a budget
/// cuts where the estimate says.
fn priced_server() -> FakeServer {
    FakeServer::start(|_, _| {
        Reply::json(json!({
            "content": [{"type": "text", "text": "This passage belongs to the document described."}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 150, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 80}
        }))
    })
    .expect("server")
}

#[test]
fn contexts_are_estimated_budgeted_decided_exported_and_imported() {
    let tmp = tempfile::tempdir().expect("tmp");
    let docs = tmp.path().join("docs");
    std::fs::create_dir_all(&docs).expect("mkdir");
    for t in ["harbour", "orchard", "glacier"] {
        let text: String = (0..3)
            .map(|p| format!("Part {p} on the {t}: the {t} is described here with enough words to fill a chunk.\n\n"))
            .collect();
        std::fs::write(docs.join(format!("{t}.txt")), text).expect("w");
    }
    let server = priced_server();
    let llm = format!("anthropic:claude-3-5-haiku-test?base_url={}", server.url());
    let llm_ingest = |index: &std::path::Path| {
        let mut c = situate(index);
        c.env("ANTHROPIC_API_KEY", "k")
            .env_remove("ANTHROPIC_BASE_URL")
            .args(["ingest", "--context", "llm", "--llm", &llm])
            .args([
                "--embedder",
                "hash:32",
                "--max-tokens",
                "40",
                "--overlap",
                "0",
            ])
            .arg(&docs);
        c
    };
    let index = tmp.path().join("idx");

    // A dry run calls nothing and writes nothing.
    let dry = json(llm_ingest(&index).arg("--dry-run"), 0);
    assert_eq!(server.calls(), 0);
    assert!(!index.exists(), "a dry run makes no index");
    let estimate = dry["estimated_dollars"].as_f64().expect("a price is known");
    let chunks = dry["chunks"].as_u64().expect("chunks");
    assert_eq!(chunks, 9, "{dry}");
    assert!(dry["document_tokens"].as_u64().unwrap_or(0) > 0);
    assert!(
        dry["dollars_per_million_document_tokens"]
            .as_f64()
            .unwrap_or(0.0)
            > 0.0
    );

    // A budget of 60% of the estimate: the first document fits even if every reply were as
    // long as allowed; the second would not. The rest waits.
    let budget = format!("{}", estimate * 0.6);
    let v = json(llm_ingest(&index).args(["--budget", &budget]), 0);
    let r = &v["report"];
    assert_eq!(server.calls(), 3, "{r}");
    assert_eq!(r["contexts_deferred"], 6, "{r}");
    let pending = json(
        situate(&index).args(["contexts", "list", "--status", "pending"]),
        0,
    );
    assert_eq!(pending["contexts"].as_array().map(Vec::len), Some(6));
    assert!(
        pending["contexts"][0]["context_notes"][0]
            .as_str()
            .is_some_and(|n| n.contains("budget"))
    );
    // `contextualize` goes on where it stopped.
    let v = json(
        situate(&index)
            .env("ANTHROPIC_API_KEY", "k")
            .args(["contextualize", "--llm", &llm]),
        0,
    );
    assert_eq!(v["report"]["chunks"], 6, "{v}");
    assert_eq!(server.calls(), 9, "each chunk asked once in all");
    assert!(v["dollars"].as_f64().unwrap_or(0.0) > 0.0);
    let status = json(situate(&index).arg("status"), 0);
    assert_eq!(
        status["context_status"],
        json!([["verified", 9]]),
        "{status}"
    );

    // A person decides.
    let chunk = "docs/harbour.txt#1";
    json(
        situate(&index).args(["contexts", "set", chunk, "--reject"]),
        0,
    );
    let status = json(situate(&index).arg("status"), 0);
    assert_eq!(status["failed_or_rejected"][0]["chunk_id"], chunk);
    assert_eq!(
        status["failed_or_rejected"][0]["provenance"]["method"],
        "manual"
    );
    json(
        situate(&index).args([
            "contexts",
            "set",
            chunk,
            "--text",
            "Zanzibar harbour ferry notes",
        ]),
        0,
    );
    let hits = json(
        situate(&index).args(["search", "Zanzibar", "--mode", "bm25"]),
        0,
    );
    assert_eq!(hits["hits"][0]["chunk_id"], chunk);
    let out = situate(&index)
        .args(["contexts", "set", "nope#3", "--accept"])
        .output()
        .expect("runs");
    assert!(!out.status.success());

    // Export, then import into an index of the same corpus made without contexts.
    let file = tmp.path().join("contexts.jsonl");
    let v = json(situate(&index).arg("contexts").arg("export").arg(&file), 0);
    assert_eq!(v["exported"], 9);
    let mut text = std::fs::read_to_string(&file).expect("read");
    text.push_str(&format!(
        "{}\n",
        json!({"document_id": "docs/gone.txt", "chunk_id": "docs/gone.txt#0", "context": "x", "model": null, "prompt_version": null, "status": "verified"})
    ));
    std::fs::write(&file, text).expect("w");
    let other = tmp.path().join("other");
    json(
        situate(&other)
            .args(["ingest", "--context", "none", "--embedder", "hash:32"])
            .args(["--max-tokens", "40", "--overlap", "0"])
            .arg(&docs),
        0,
    );
    let v = json(situate(&other).arg("contexts").arg("import").arg(&file), 0);
    assert_eq!(v["imported"], 9, "{v}");
    assert_eq!(v["skipped"].as_array().map(Vec::len), Some(1));
    let hits = json(
        situate(&other).args(["search", "Zanzibar", "--mode", "bm25"]),
        0,
    );
    assert_eq!(hits["hits"][0]["chunk_id"], chunk);
    let card = json(situate(&other).args(["show", "docs/glacier.txt#0"]), 0);
    assert_eq!(
        card["context_provenance"]["model"],
        "anthropic:claude-3-5-haiku-test"
    );
    assert_eq!(card["context_status"], "verified");
    let stats = json(situate(&other).arg("stats"), 0);
    assert_eq!(stats["consistent"], true, "{stats}");
    // A malformed file changes nothing.
    std::fs::write(&file, "{\"chunk_id\": 3}\n").expect("w");
    let out = situate(&other)
        .arg("contexts")
        .arg("import")
        .arg(&file)
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 1"));
}

/// With `documents=3`, three documents are contextualized at once: each document's first
/// request (which writes its prompt cache) goes out before any document's later chunks,
/// instead of one document after another; every chunk is still asked exactly once.
#[test]
fn several_documents_are_in_flight_with_a_hosted_model() {
    let tmp = tempfile::tempdir().expect("tmp");
    let docs = tmp.path().join("docs");
    std::fs::create_dir_all(&docs).expect("mkdir");
    let topics = ["harbour", "orchard", "glacier"];
    for t in topics {
        let text: String = (0..3)
            .map(|p| format!("Paragraph {p} about the {t}: the {t} is described here in some detail, with enough words to make a chunk of its own.\n\n"))
            .collect();
        std::fs::write(docs.join(format!("{t}.txt")), text).expect("w");
    }
    let server = FakeServer::start(|_, _| {
        Reply::json(json!({
            "content": [{"type": "text", "text": "This passage belongs to the document described."}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 30, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 9}
        }))
        .delay(Duration::from_millis(300))
    })
    .expect("server");
    let llm = format!(
        "anthropic:claude-test?base_url={}&concurrency=8&documents=3",
        server.url()
    );
    let index = tmp.path().join("idx");
    let v = json(
        situate(&index)
            .env("ANTHROPIC_API_KEY", "k")
            .env_remove("ANTHROPIC_BASE_URL")
            .args(["ingest", "--context", "llm", "--llm", &llm])
            .args(["--embedder", "none", "--max-tokens", "40", "--overlap", "0"])
            .arg(&docs),
        0,
    );
    assert_eq!(v["report"]["chunks"], 9, "{v:#}");
    assert_eq!(v["report"]["context_failures"], 0, "{v:#}");
    let requests = server.requests();
    assert_eq!(requests.len(), 9, "each chunk asked once");
    let topic_of = |r: &situate_http::fake::Request| {
        let doc = r.json()["messages"][0]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        topics
            .iter()
            .find(|t| doc.contains(&format!("about the {t}")))
            .map(|t| t.to_string())
            .unwrap_or_default()
    };
    let mut first: Vec<String> = requests[..3].iter().map(topic_of).collect();
    first.sort();
    assert_eq!(
        first,
        ["glacier", "harbour", "orchard"],
        "the first requests are one per document"
    );
    let mut per_topic: HashMap<String, usize> = HashMap::new();
    for r in &requests {
        *per_topic.entry(topic_of(r)).or_default() += 1;
    }
    assert!(per_topic.values().all(|&n| n == 3), "{per_topic:?}");
}

/// `contexts verify` applies this version's checks to stored LLM contexts: a context that
/// now fails is rejected (and leaves the index), one that now passes is verified (and
/// enters it); a person's decision is left alone.
#[test]
fn contexts_verify_applies_the_current_checks_to_stored_contexts() {
    let tmp = tempfile::tempdir().expect("tmp");
    let docs = tmp.path().join("docs");
    std::fs::create_dir_all(&docs).expect("mkdir");
    let text: String = (0..3)
        .map(|p| format!("Part {p} on the harbour: the harbour is described here with enough words to fill a chunk.\n\n"))
        .collect();
    std::fs::write(docs.join("harbour.txt"), text).expect("w");
    let index = tmp.path().join("idx");
    json(
        situate(&index)
            .args(["ingest", "--context", "none", "--embedder", "none"])
            .args(["--max-tokens", "40", "--overlap", "0"])
            .arg(&docs),
        0,
    );
    let line = |chunk: u32, context: &str, status: &str, method: &str, notes: &[&str]| {
        json!({"document_id": "docs/harbour.txt", "chunk_id": format!("docs/harbour.txt#{chunk}"),
               "context": context, "model": "local:test", "prompt_version": "anthropic-v1",
               "status": status, "method": method, "notes": notes})
        .to_string()
    };
    let file = tmp.path().join("contexts.jsonl");
    std::fs::write(
        &file,
        [
            line(
                0,
                "Zanzibar: a note meant to situate this chunk for search retrieval.",
                "verified",
                "llm",
                &[],
            ),
            line(
                1,
                "The second part of a text describing the harbour.",
                "rejected",
                "llm",
                &["an older check"],
            ),
            line(
                2,
                "Zanzibar to situate this chunk for search retrieval.",
                "verified",
                "manual",
                &["accepted by hand"],
            ),
        ]
        .join("\n"),
    )
    .expect("w");
    json(situate(&index).arg("contexts").arg("import").arg(&file), 0);
    let before = json(
        situate(&index).args(["search", "Zanzibar", "--mode", "bm25"]),
        0,
    );
    assert_eq!(before["hits"].as_array().map(Vec::len), Some(2), "{before}");

    let v = json(situate(&index).args(["contexts", "verify"]), 0);
    assert_eq!(v["checked"], 2, "the manual one is not checked: {v}");
    assert_eq!(v["now_rejected"], 1, "{v}");
    assert_eq!(v["now_verified"], 1, "{v}");
    let card = |n: u32| {
        json(
            situate(&index).args(["show", &format!("docs/harbour.txt#{n}")]),
            0,
        )
    };
    let c0 = card(0);
    assert_eq!(c0["context_status"], "rejected");
    assert!(c0["context_notes"].to_string().contains("chatter"), "{c0}");
    assert_eq!(card(1)["context_status"], "verified");
    assert_eq!(
        card(2)["context_status"],
        "verified",
        "a person's decision stands"
    );
    let after = json(
        situate(&index).args(["search", "Zanzibar", "--mode", "bm25"]),
        0,
    );
    let ids: Vec<&str> = after["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .filter_map(|h| h["chunk_id"].as_str())
        .collect();
    assert_eq!(
        ids,
        ["docs/harbour.txt#2"],
        "the rejected context left the index"
    );
    // Running it again changes nothing.
    let again = json(situate(&index).args(["contexts", "verify"]), 0);
    assert_eq!(again["changed"], 0, "{again}");
}

#[test]
fn document_contexts_describe_each_document_once_and_share_what_was_paid_for() {
    let tmp = tempfile::tempdir().expect("tmp");
    let docs = tmp.path().join("docs");
    std::fs::create_dir_all(&docs).expect("mkdir");
    std::fs::write(
        docs.join("report.md"),
        "# Northwind Traders quarterly report, Q3 2024\n\nNorthwind Traders sells specialty foods.\n\n## Revenue\n\nRevenue rose 4% to 88 million euros, driven by the Nordic region.\n\n## Costs\n\nShipping costs rose sharply after the carrier changed its rates.\n",
    )
    .expect("w");
    std::fs::write(
        docs.join("bucket.py"),
        "\"\"\"Rate limiting for the gateway.\"\"\"\n\nclass TokenBucket:\n    def allow(self) -> bool:\n        return self.tokens >= 1\n",
    )
    .expect("w");
    // Descriptions name the document; notes say which part the chunk is.
    let server = FakeServer::start(|req, _| {
        let asked = chunk_of(&req.json());
        let text = if asked.contains("Describe the document above") {
            if String::from_utf8_lossy(&req.body).contains("TokenBucket") {
                "A Python module with the gateway's token bucket rate limiter."
            } else {
                "The Northwind Traders quarterly report for Q3 2024 on revenue and costs."
            }
        } else {
            // A note must say something of its document: "The part of the document this
            // chunk covers." is rejected as saying nothing.
            "One part of the file, as its own sections divide it."
        };
        Reply::json(json!({
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 30, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 12}
        }))
    })
    .expect("server");
    let llm = format!("anthropic:claude-test?base_url={}", server.url());
    let index = tmp.path().join("idx");
    let ingest = |context: &str| {
        let mut c = situate(&index);
        c.env("ANTHROPIC_API_KEY", "k")
            .env_remove("ANTHROPIC_BASE_URL")
            .args(["ingest", "--context", context, "--llm", &llm])
            .args(["--embedder", "none", "--max-tokens", "24", "--overlap", "0"])
            .arg(&docs);
        c
    };
    let describes = |r: &situate_http::fake::Request| {
        chunk_of(&r.json()).contains("Describe the document above")
    };

    // One request per document, whatever its number of chunks.
    let v = json(&mut ingest("document"), 0);
    let chunks = v["report"]["chunks"].as_u64().expect("chunks");
    assert!(chunks >= 4, "{v}");
    assert_eq!(server.calls(), 2, "one description per document: {v}");
    // The name only the first chunk holds now finds every chunk of the report.
    let found = json(
        situate(&index).args(["search", "Northwind", "--mode", "bm25"]),
        0,
    );
    let hits = found["hits"].as_array().expect("hits");
    assert_eq!(hits.len(), 3, "{found}");
    let costs = hits
        .iter()
        .find(|h| {
            h["original_text"]
                .as_str()
                .unwrap_or("")
                .contains("Shipping costs")
        })
        .expect("the costs chunk is found by the document's name");
    let id = costs["chunk_id"].as_str().expect("id").to_string();
    let card = json(situate(&index).args(["show", &id]), 0);
    assert_eq!(card["context_status"], "verified", "{card}");
    let p = &card["context_provenance"];
    assert_eq!(p["method"], "document");
    let context = card["generated_context"].as_str().expect("context");
    let parts: Vec<(String, String)> = p["parts"]
        .as_array()
        .expect("parts")
        .iter()
        .map(|x| {
            let (a, b) = (
                x["start"].as_u64().unwrap_or(0),
                x["end"].as_u64().unwrap_or(0),
            );
            (
                x["kind"].as_str().unwrap_or("").to_string(),
                context[a as usize..b as usize].to_string(),
            )
        })
        .collect();
    assert_eq!(
        parts,
        [
            (
                "document".to_string(),
                "The Northwind Traders quarterly report for Q3 2024 on revenue and costs."
                    .to_string()
            ),
            (
                "structural".to_string(),
                "From docs/report.md, section Northwind Traders quarterly report, Q3 2024 > Costs."
                    .to_string()
            )
        ],
        "{card}"
    );

    // Doing them again over the index puts the contexts together from the cached pieces.
    let before = server.calls();
    let again = json(
        situate(&index)
            .env("ANTHROPIC_API_KEY", "k")
            .env_remove("ANTHROPIC_BASE_URL")
            .args(["contextualize", "--context", "document", "--llm", &llm])
            .args(["--status", "verified"]),
        0,
    );
    assert_eq!(server.calls(), before, "no call: {again}");
    assert_eq!(json(situate(&index).args(["show", &id]), 0), card);
    let bad = run(
        situate(&index).args(["contextualize", "--context", "structural"]),
        1,
    );
    assert!(String::from_utf8_lossy(&bad.stderr).contains("document+llm"));

    // Description and notes: the descriptions come from the cache, only notes are asked.
    let before = server.calls();
    json(&mut ingest("document+llm"), 0);
    let asked: Vec<_> = server.requests().into_iter().skip(before).collect();
    assert_eq!(asked.len() as u64, chunks, "one note per chunk");
    assert!(!asked.iter().any(describes), "no description asked again");
    let card = json(situate(&index).args(["show", &id]), 0);
    let kinds: Vec<&str> = card["context_provenance"]["parts"]
        .as_array()
        .expect("parts")
        .iter()
        .filter_map(|x| x["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["document", "structural", "chunk"], "{card}");

    // Notes written by `--context llm` are the ones `document+llm` wrote: no call.
    let before = server.calls();
    json(&mut ingest("llm"), 0);
    assert_eq!(server.calls(), before, "the notes were paid for once");

    // The export carries the parts, and a bad method is refused with the list.
    let file = tmp.path().join("contexts.jsonl");
    json(&mut ingest("document"), 0);
    json(situate(&index).arg("contexts").arg("export").arg(&file), 0);
    let exported = std::fs::read_to_string(&file).expect("read");
    assert!(exported.contains("\"parts\""), "{exported}");
    let out = run(
        situate(&index)
            .args(["ingest", "--context", "documents"])
            .arg(&docs),
        1,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("document+llm"), "{err}");
}

#[test]
fn the_small_model_prompt_is_chosen_by_name_and_recorded_as_its_own_version() {
    let tmp = tempfile::tempdir().expect("tmp");
    let docs = tmp.path().join("docs");
    std::fs::create_dir_all(&docs).expect("mkdir");
    std::fs::write(
        docs.join("report.md"),
        "# Northwind Traders quarterly report, Q3 2024\n\nRevenue rose 4% to 88 million euros.\n",
    )
    .expect("w");
    let server = FakeServer::start(|_, _| {
        Reply::json(json!({
            "content": [{"type": "text", "text": "The Northwind Traders quarterly report for Q3 2024, on revenue."}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 30, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 12}
        }))
    })
    .expect("server");
    let llm = format!("anthropic:claude-test?base_url={}", server.url());
    let settings = |name: &str, text: &str| {
        let p = tmp.path().join(name);
        std::fs::write(&p, text).expect("w");
        p
    };
    let ingest = |index: &str, settings: &std::path::Path| {
        let mut c = situate(&tmp.path().join(index));
        c.env("ANTHROPIC_API_KEY", "k")
            .env_remove("ANTHROPIC_BASE_URL")
            .arg("--settings")
            .arg(settings)
            .args([
                "ingest",
                "--context",
                "llm",
                "--llm",
                &llm,
                "--embedder",
                "none",
            ])
            .arg(&docs);
        c
    };

    let small = settings("small.toml", "[llm]\nprompt = \"small\"\n");
    json(&mut ingest("idx", &small), 0);
    let asked = server
        .requests()
        .iter()
        .map(|r| chunk_of(&r.json()))
        .collect::<Vec<_>>();
    assert!(
        !asked.is_empty()
            && asked
                .iter()
                .all(|a| a.contains("say what the document is") && !a.contains("search retrieval")),
        "{asked:?}"
    );
    let cards = json(
        situate(&tmp.path().join("idx")).args(["contexts", "list", "--status", "verified"]),
        0,
    );
    let cards = cards["contexts"].as_array().expect("cards");
    assert!(!cards.is_empty());
    for c in cards {
        assert_eq!(
            c["context_provenance"]["prompt_version"], "small-v1",
            "{c:#}"
        );
    }

    // An unknown name, or a name and a template file at once, is refused before any call.
    let calls = server.calls();
    for (file, text, says) in [
        (
            "typo.toml",
            "[llm]\nprompt = \"smal\"\n",
            "expected anthropic or small",
        ),
        (
            "both.toml",
            "[llm]\nprompt = \"small\"\ntemplate = \"t.txt\"\n",
            "give one",
        ),
    ] {
        let out = run(&mut ingest("other", &settings(file, text)), 1);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{err}");
    }
    assert_eq!(server.calls(), calls, "no request for a refused setting");
}
