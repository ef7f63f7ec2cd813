//! One typed API: the command, the HTTP service and MCP answer the same search and the
//! same card from the engine's answer types, and refuse the same invalid field with the
//! same kind and field name.

use crate::mcp::{call, call_result, mcp_command, runtime};
use crate::serve::{Server, ranked};
use crate::*;
use rmcp::ServiceExt;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::json;
use std::process::Stdio;

/// A search answer without its timing, which differs between any two runs.
fn untimed(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("took_ms");
    }
    v
}

#[test]
fn the_command_the_service_and_mcp_answer_alike_and_refuse_a_field_alike() {
    let (_tmp, index) = indexed_corpus("hash:64");
    let s = Server::start(&index, &[], &[]);

    // The same search: `search --json` and `POST /v1/search` print the same answer type.
    let cli = json(situate(&index).args(["search", "lens", "-k", "3"]), 0);
    let http = s.post("/v1/search", &json!({"query": "lens", "k": 3}));
    assert_eq!(http.status, 200, "{}", http.body);
    assert_eq!(untimed(cli.clone()), untimed(http.body.clone()));
    let hits = cli["hits"].as_array().expect("hits");
    assert_eq!(hits.len(), 3);
    let first = hits[0]["chunk_id"].as_str().expect("id").to_string();

    // The same card: `show --json`, `GET /v1/cards/…` and MCP's `get_card`.
    let card_cli = json(situate(&index).args(["show", &first]), 0);
    let card_http = s.get(&format!("/v1/cards/{}", first.replace('#', "%23")));
    assert_eq!(card_http.status, 200);
    assert_eq!(card_cli, card_http.body);

    // An invalid field: the same kind (code) and field name everywhere.
    let bad_cli = json(
        situate(&index).args(["search", "lens", "--language", "klingon"]),
        1,
    );
    assert_eq!(bad_cli["error"]["code"], "invalid-request");
    assert_eq!(bad_cli["error"]["field"], "filter.languages");
    let stderr = String::from_utf8_lossy(
        &run(
            situate(&index).args(["search", "lens", "--context-weight=-1"]),
            1,
        )
        .stderr,
    )
    .to_string();
    assert!(
        stderr.contains("context_weight (--context-weight): must be a number >= 0"),
        "{stderr}"
    );
    let bad_http = s.post(
        "/v1/search",
        &json!({"query": "lens", "filter": {"languages": ["klingon"]}}),
    );
    assert_eq!(bad_http.status, 400);
    assert_eq!(bad_http.body["code"], "invalid-request");
    assert_eq!(bad_http.body["field"], "filter.languages");
    let unknown = s.post("/v1/search", &json!({"query": "lens", "kk": 3}));
    assert_eq!(unknown.status, 400);
    assert_eq!(unknown.body["field"], "kk");

    runtime().block_on(async {
        let transport = TokioChildProcess::new(mcp_command(&index, false).configure(|c| {
            c.stderr(Stdio::null());
        }))
        .expect("spawn");
        let client = ().serve(transport).await.expect("initialize");
        // MCP's search is the same search (its hits carry snippets for an agent): the
        // same chunks and scores.
        let (found, is_error) = call(&client, "search", json!({"query": "lens", "k": 3})).await;
        assert!(!is_error, "{found}");
        assert_eq!(ranked(&found), ranked(&cli));
        let (card, _) = call(&client, "get_card", json!({"chunk_id": first})).await;
        assert_eq!(card, card_cli);
        let bad = call_result(
            &client,
            "search",
            json!({"query": "lens", "filter": {"languages": ["klingon"]}}),
        )
        .await;
        assert_eq!(bad["isError"], true);
        assert_eq!(bad["structuredContent"]["code"], "invalid-request");
        assert_eq!(bad["structuredContent"]["field"], "filter.languages");
        client.cancel().await.expect("close");
    });
}
