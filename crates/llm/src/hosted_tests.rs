//! The hosted LLMs against local fake servers speaking the Anthropic and OpenAI protocols.

use crate::hosted::HostedLlm;
use crate::{Finish, Llm, LlmContextualizer, SharedPrompt};
use serde_json::{Value, json};
use situate_core::{
    ChunkSpan, ChunkView, ContextStatus, Contextualizer, DocKind, DocumentView, Language, NoSink,
};
use situate_http::fake::{FakeServer, Reply, Request};
use std::time::Duration;

fn env_with(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let pairs: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
}

/// The chunk of an Anthropic request (the second content block).
fn anthropic_chunk(req: &Request) -> String {
    req.json()["messages"][0]["content"][1]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn anthropic_answer(text: &str, first: bool) -> Reply {
    Reply::json(json!({
        "id": "msg_1", "type": "message", "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "usage": {
            "input_tokens": 20,
            "cache_creation_input_tokens": if first { 500 } else { 0 },
            "cache_read_input_tokens": if first { 0 } else { 500 },
            "output_tokens": 12
        }
    }))
}

fn prompt<'a>(prefix: &'a str, suffixes: &'a [String]) -> SharedPrompt<'a> {
    SharedPrompt {
        system: None,
        prefix,
        suffixes,
        max_tokens: 100,
    }
}

#[tokio::test]
async fn anthropic_requests_mark_the_document_for_caching_and_write_it_first() {
    let server = FakeServer::start(|req, n| {
        // The cache-writing request is slow; the others overlap one another.
        let reply = anthropic_answer(&format!("About {}", anthropic_chunk(req)), n == 0);
        reply.delay(Duration::from_millis(if n == 0 { 150 } else { 80 }))
    })
    .expect("server");
    let llm = HostedLlm::from_spec_with_env(
        &format!(
            "anthropic:claude-test?base_url={}&concurrency=8",
            server.url()
        ),
        &env_with(&[("ANTHROPIC_API_KEY", "sk-test")]),
    )
    .expect("spec");
    assert_eq!(llm.window(), 200_000);
    let suffixes: Vec<String> = (0..5).map(|i| format!("chunk {i}")).collect();
    let replies = llm
        .generate_shared(prompt("<document>D</document>", &suffixes), &|_, _| {})
        .await;
    for (i, r) in replies.iter().enumerate() {
        let g = r.as_ref().expect("reply");
        assert_eq!(g.text, format!("About chunk {i}"), "replies stay in order");
        assert_eq!(g.finish, Finish::Stop);
    }
    assert_eq!(
        replies[0]
            .as_ref()
            .expect("r")
            .usage
            .cache_creation_input_tokens,
        500
    );
    assert_eq!(
        replies[4]
            .as_ref()
            .expect("r")
            .usage
            .cache_read_input_tokens,
        500
    );
    let reqs = server.requests();
    assert_eq!(reqs.len(), 5);
    let first = &reqs[0];
    assert_eq!(first.path, "/v1/messages");
    assert_eq!(first.header("x-api-key"), Some("sk-test"));
    assert_eq!(first.header("anthropic-version"), Some("2023-06-01"));
    let body = first.json();
    assert_eq!(body["model"], "claude-test");
    assert_eq!(body["max_tokens"], 100);
    let content = &body["messages"][0]["content"];
    assert_eq!(content[0]["text"], "<document>D</document>");
    assert_eq!(content[0]["cache_control"], json!({"type": "ephemeral"}));
    assert_eq!(content[1]["text"], "chunk 0");
    assert!(
        content[1].get("cache_control").is_none(),
        "only the document is cached"
    );
    assert_eq!(
        anthropic_chunk(first),
        "chunk 0",
        "the cache-writing request goes first"
    );
    // The first was answered before the others were sent; the others went together.
    assert_eq!(server.max_in_flight(), 4);
}

#[tokio::test]
async fn failures_are_retried_and_a_persistent_one_fails_only_its_chunk() {
    // Request 0: 429 with retry-after; 1: 500; 2: malformed JSON; 3: too slow; then answers,
    // except that the chunk "doomed" always gets a 500.
    let server = FakeServer::start(|req, n| {
        if anthropic_chunk(req) == "doomed" {
            return Reply::raw(500, r#"{"error": "overloaded"}"#);
        }
        match n {
            0 => Reply::raw(429, r#"{"error": "rate limited"}"#).header("retry-after", "0"),
            1 => Reply::raw(500, "oops"),
            2 => Reply::raw(200, "{not json"),
            3 => Reply::json(json!({})).delay(Duration::from_secs(3)),
            _ => anthropic_answer(&format!("About {}", anthropic_chunk(req)), false),
        }
    })
    .expect("server");
    let llm = HostedLlm::from_spec_with_env(
        &format!(
            "anthropic:claude-test?base_url={}&concurrency=1&retries=6&timeout=1",
            server.url()
        ),
        &env_with(&[("ANTHROPIC_API_KEY", "k")]),
    )
    .expect("spec");
    let suffixes = vec!["fine".to_string(), "doomed".to_string()];
    let replies = llm
        .generate_shared(prompt("D", &suffixes), &|_, _| {})
        .await;
    assert_eq!(
        replies[0].as_ref().expect("retried to success").text,
        "About fine"
    );
    let e = replies[1].as_ref().expect_err("fails").to_string();
    assert!(e.contains("500") && e.contains("6 attempt"), "{e}");
    assert_eq!(server.calls(), 5 + 6);
}

#[tokio::test]
async fn openai_chat_puts_the_document_first_and_reads_cached_tokens() {
    let server = FakeServer::start(|req, _| {
        let body = req.json();
        let content = body["messages"][0]["content"].as_str().unwrap_or_default().to_string();
        Reply::json(json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": format!(" Context for {} ", content.len())}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 300, "completion_tokens": 100, "prompt_tokens_details": {"cached_tokens": 256}}
        }))
    })
    .expect("server");
    let llm = HostedLlm::from_spec_with_env(
        "openai:gpt-4o-mini?max_tokens_field=max_completion_tokens",
        &env_with(&[
            ("OPENAI_API_KEY", "sk-o"),
            ("OPENAI_BASE_URL", server.url()),
        ]),
    )
    .expect("spec");
    assert_eq!(llm.window(), 128_000);
    let suffixes = vec!["S".to_string()];
    let g = llm
        .generate_shared(prompt("DOC ", &suffixes), &|_, _| {})
        .await
        .remove(0)
        .expect("reply");
    assert_eq!(g.text, "Context for 5");
    assert_eq!(g.finish, Finish::Length);
    assert_eq!(
        (
            g.usage.input_tokens,
            g.usage.cache_read_input_tokens,
            g.usage.output_tokens
        ),
        (44, 256, 100)
    );
    let req = &server.requests()[0];
    assert_eq!(req.path, "/chat/completions");
    assert_eq!(req.header("authorization"), Some("Bearer sk-o"));
    let body = req.json();
    assert_eq!(body["model"], "gpt-4o-mini");
    assert_eq!(body["max_completion_tokens"], 100);
    assert!(body.get("max_tokens").is_none());
    assert_eq!(
        body["messages"][0],
        json!({"role": "user", "content": "DOC S"})
    );
}

#[test]
fn specs_are_checked_before_anything_is_sent() {
    let none = env_with(&[]);
    for (spec, want) in [
        ("anthropic:claude-x", "no API key: set ANTHROPIC_API_KEY"),
        ("openai:gpt-4o", "no API key: set OPENAI_API_KEY"),
        ("anthropic:", "model name is missing"),
        ("anthropic:c?colour=red", "unknown option"),
        ("anthropic:c?base_url=ftp://x", "must start with http"),
        ("anthropic:c?key_env=MY_KEY", "MY_KEY (key_env) is not set"),
        ("openai:m?concurrency=0", "expected a number from 1 to 64"),
    ] {
        let e = HostedLlm::from_spec_with_env(spec, &none)
            .err()
            .unwrap_or_else(|| panic!("{spec} accepted"))
            .to_string();
        assert!(e.contains(want), "{spec}: {e}");
    }
    // A local server needs no key.
    let ollama = HostedLlm::from_spec_with_env("ollama:qwen2.5:1.5b", &none).expect("ok");
    assert_eq!(ollama.id(), "ollama:qwen2.5:1.5b");
}

/// The contextualizer over a hosted model: verified and rejected contexts, usage summed.
#[tokio::test]
async fn hosted_contexts_are_checked_like_local_ones() {
    let server = FakeServer::start(|req, n| {
        let chunk = anthropic_chunk(req);
        let text = if chunk.contains("Revenue") {
            "This chunk is from ACME Corp's Q2 2023 report, on revenue."
        } else {
            "This chunk is from the Q3 2024 report by John Smith."
        };
        anthropic_answer(text, n == 0)
    })
    .expect("server");
    let llm = HostedLlm::from_spec_with_env(
        &format!("anthropic:claude-test?base_url={}", server.url()),
        &env_with(&[("ANTHROPIC_API_KEY", "k")]),
    )
    .expect("spec");
    let c = LlmContextualizer::new(Box::new(llm));
    let text = "ACME Corp report, Q2 2023.\n\nRevenue grew by 3%.\n\nCosts fell by 2%.";
    let kind = DocKind::Text;
    let doc = DocumentView {
        id: "acme",
        source: "acme",
        title: None,
        language: Language::En,
        kind: &kind,
        text,
        content_hash: "h",
    };
    let spans: Vec<ChunkSpan> = ["Revenue grew by 3%.", "Costs fell by 2%."]
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let s = text.find(t).expect("in doc");
            ChunkSpan {
                ordinal: i as u32,
                byte_start: s,
                byte_end: s + t.len(),
                char_start: s,
                char_end: s + t.len(),
                heading_path: vec![],
                chunk_id: None,
                ..Default::default()
            }
        })
        .collect();
    let chunks: Vec<ChunkView<'_>> = spans
        .iter()
        .map(|s| ChunkView {
            span: s,
            text: &text[s.byte_start..s.byte_end],
        })
        .collect();
    let out = c.contextualize(doc, &chunks, &NoSink).await.expect("runs");
    assert_eq!(
        out.contexts[0].status,
        ContextStatus::Verified,
        "{:?}",
        out.contexts[0].notes
    );
    assert_eq!(out.contexts[1].status, ContextStatus::Rejected);
    assert!(
        out.contexts[1].notes[0].contains("2024"),
        "{:?}",
        out.contexts[1].notes
    );
    assert_eq!(out.usage.cache_creation_input_tokens, 500);
    assert_eq!(out.usage.cache_read_input_tokens, 500);
    assert_eq!(out.usage.output_tokens, 24);
    let first: Value = server.requests()[0].json();
    assert!(
        first["messages"][0]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("<document>\nACME Corp report")),
        "Anthropic's prompt: {first}"
    );
}

/// A document longer than the window: chunks of different lengths still fall on the same
/// grid of windows, so neighbours share one document block (one cache write, many reads).
#[tokio::test]
async fn chunks_of_a_long_document_share_windows_whatever_their_length() {
    let server = FakeServer::start(|_, n| anthropic_answer("From the long ACME report.", n == 0))
        .expect("server");
    let llm = HostedLlm::from_spec_with_env(
        &format!(
            "anthropic:claude-test?base_url={}&window=1500",
            server.url()
        ),
        &env_with(&[("ANTHROPIC_API_KEY", "k")]),
    )
    .expect("spec");
    let c = LlmContextualizer::new(Box::new(llm));
    let paragraphs: Vec<String> = (0..100)
        .map(|i| {
            format!(
                "Section {i} of the ACME report covers {}.",
                vec!["one more topic"; 3 + i % 7].join(" and ")
            )
        })
        .collect();
    let text = paragraphs.join("\n\n");
    assert!(text.len() / 3 > 3 * 1500, "several windows long");
    let kind = DocKind::Text;
    let doc = DocumentView {
        id: "acme",
        source: "acme",
        title: None,
        language: Language::En,
        kind: &kind,
        text: &text,
        content_hash: "h",
    };
    let mut spans = Vec::new();
    let mut at = 0;
    for (i, p) in paragraphs.iter().enumerate() {
        let s = text[at..].find(p.as_str()).expect("in doc") + at;
        spans.push(ChunkSpan {
            ordinal: i as u32,
            byte_start: s,
            byte_end: s + p.len(),
            char_start: s,
            char_end: s + p.len(),
            heading_path: vec![],
            chunk_id: None,
            ..Default::default()
        });
        at = s + p.len();
    }
    let chunks: Vec<ChunkView<'_>> = spans
        .iter()
        .map(|s| ChunkView {
            span: s,
            text: &text[s.byte_start..s.byte_end],
        })
        .collect();
    let out = c.contextualize(doc, &chunks, &NoSink).await.expect("runs");
    assert!(out.contexts.iter().all(|c| {
        c.provenance
            .as_ref()
            .and_then(|p| p.strategy.as_deref())
            .is_some_and(|s| s.starts_with("window"))
    }));
    let blocks: std::collections::HashSet<String> = server
        .requests()
        .iter()
        .map(|r| r.json()["messages"][0]["content"][0]["text"].to_string())
        .collect();
    assert_eq!(server.calls(), 100);
    assert!(
        blocks.len() <= 20,
        "{} distinct document blocks for 100 chunks: windows are not shared",
        blocks.len()
    );
}

/// Anthropic's streamed events for `pieces` of text.
fn anthropic_stream(pieces: &[&str]) -> Reply {
    let mut events = vec![(
        "message_start",
        json!({"type": "message_start", "message": {"usage": {
            "input_tokens": 20, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 500, "output_tokens": 1}}}),
    )];
    events.push((
        "content_block_start",
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ));
    events.push(("ping", json!({"type": "ping"})));
    for p in pieces {
        events.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}),
        ));
    }
    events.push((
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 9}}),
    ));
    events.push(("message_stop", json!({"type": "message_stop"})));
    Reply::events(&events)
}

/// Collects what `generate_streamed` hands on.
async fn streamed(llm: &HostedLlm) -> (Result<crate::Generation, crate::LlmError>, Vec<String>) {
    let pieces = std::sync::Mutex::new(Vec::new());
    let suffixes = ["Q".to_string()];
    let r = llm
        .generate_streamed(prompt("P", &suffixes), &|t| {
            if let Ok(mut p) = pieces.lock() {
                p.push(t.to_string());
            }
        })
        .await;
    (r, pieces.into_inner().unwrap_or_default())
}

#[tokio::test]
async fn replies_stream_as_their_events_arrive_for_both_protocols() {
    let server = FakeServer::start(|req, _| {
        let body = req.json();
        assert_eq!(body["stream"], true, "{body}");
        if req.path == "/v1/messages" {
            anthropic_stream(&["  Нет, ", "архивные ", "не попадут", " [1].", "\n"])
        } else {
            assert_eq!(body["stream_options"], json!({"include_usage": true}));
            let chunk = |content: Value, finish: Value| {
                json!({"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]})
            };
            let mut events: Vec<(&str, Value)> = ["No", ", only ", "active ones."]
                .iter()
                .map(|t| ("message", chunk(json!(t), Value::Null)))
                .collect();
            events.push(("message", chunk(Value::Null, json!("stop"))));
            events.push((
                "message",
                json!({"choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 5,
                    "prompt_tokens_details": {"cached_tokens": 30}}}),
            ));
            Reply::raw(
                200,
                events
                    .iter()
                    .map(|(_, v)| format!("data: {v}\n\n"))
                    .chain(["data: [DONE]\n\n".to_string()])
                    .collect::<String>(),
            )
            .header("content-type", "text/event-stream; charset=utf-8")
        }
    })
    .expect("server");
    let env = env_with(&[("ANTHROPIC_API_KEY", "k"), ("OPENAI_API_KEY", "k")]);
    let anthropic = HostedLlm::from_spec_with_env(
        &format!("anthropic:claude-test?base_url={}", server.url()),
        &env,
    )
    .expect("spec");
    let (r, pieces) = streamed(&anthropic).await;
    let g = r.expect("streamed reply");
    // Piece by piece, trimmed as the whole reply is, adding up to it.
    assert_eq!(pieces, ["Нет,", " архивные", " не попадут", " [1]."]);
    assert_eq!(g.text, pieces.concat());
    assert_eq!(g.finish, Finish::Length);
    assert_eq!(
        (g.usage.cache_read_input_tokens, g.usage.output_tokens),
        (500, 9)
    );
    let openai =
        HostedLlm::from_spec_with_env(&format!("openai:gpt-test?base_url={}", server.url()), &env)
            .expect("spec");
    let (r, pieces) = streamed(&openai).await;
    let g = r.expect("streamed reply");
    assert_eq!(pieces, ["No", ", only", " active ones."]);
    assert_eq!(g.text, "No, only active ones.");
    assert_eq!(
        (
            g.usage.input_tokens,
            g.usage.cache_read_input_tokens,
            g.usage.output_tokens
        ),
        (20, 30, 5)
    );
}

#[tokio::test]
async fn a_stream_that_fails_or_stops_short_is_an_error_and_a_plain_answer_is_taken() {
    let server = FakeServer::start(|req, _| match req.json()["max_tokens"].as_u64() {
        // An error event part way.
        Some(1) => Reply::events(&[
            ("message_start", json!({"type": "message_start", "message": {"usage": {}}})),
            ("error", json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})),
        ]),
        // Cut before message_stop (the connection closes cleanly).
        Some(2) => Reply::events(&[(
            "content_block_delta",
            json!({"type": "content_block_delta", "delta": {"type": "text_delta", "text": "Half"}}),
        )]),
        // A server that ignores "stream".
        _ => anthropic_answer("Whole reply.", true),
    })
    .expect("server");
    let llm = HostedLlm::from_spec_with_env(
        &format!("anthropic:claude-test?base_url={}&retries=1", server.url()),
        &env_with(&[("ANTHROPIC_API_KEY", "k")]),
    )
    .expect("spec");
    let ask = |max_tokens: usize| {
        let llm = &llm;
        async move {
            let suffixes = ["Q".to_string()];
            let p = SharedPrompt {
                max_tokens,
                ..prompt("P", &suffixes)
            };
            llm.generate_streamed(p, &|_| {}).await
        }
    };
    let e = ask(1).await.expect_err("error event").to_string();
    assert!(e.contains("Overloaded"), "{e}");
    let e = ask(2).await.expect_err("cut short").to_string();
    assert!(e.contains("stream ended before the reply did"), "{e}");
    let g = ask(100).await.expect("a plain answer");
    assert_eq!(g.text, "Whole reply.");
    assert_eq!(g.usage.cache_creation_input_tokens, 500);
}
