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

/// An answer without what differs between any two runs or indexes: timings, the index
/// directory, the service's uptime.
fn untimed(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        for k in ["took_ms", "seconds", "index", "uptime_s"] {
            o.remove(k);
        }
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

    // The same state: `stats --json`, `GET /v1/info` and (below) MCP's `index_status`.
    let stats = json(situate(&index).arg("stats"), 0);
    let info = s.get("/v1/info").body;
    assert_eq!(stats["default_mode"], info["default_mode"]);
    assert_eq!(stats["stats"]["store"], info["stats"]["store"]);
    assert_eq!(stats["stats"]["embed_model"], info["stats"]["embed_model"]);
    assert_eq!(stats["consistent"], true);

    // The same pages: the review queue from the command and the service, the documents
    // from the service and (below) MCP.
    let queue = json(
        situate(&index).args(["contexts", "list", "--status", "generated,verified"]),
        0,
    );
    let page = s
        .get("/v1/contexts?status=generated,verified&limit=500")
        .body;
    assert_eq!(queue, page);
    assert!(!queue["contexts"].as_array().expect("contexts").is_empty());
    let documents = s.get("/v1/documents?limit=2").body;
    assert_eq!(documents["documents"].as_array().map(Vec::len), Some(2));
    let bad_limit = s.get("/v1/documents?limit=0");
    assert_eq!(bad_limit.status, 400);
    assert_eq!(bad_limit.body["field"], "limit");

    // What the service says now, for MCP to say the same (the test's HTTP client cannot
    // run inside the MCP client's runtime).
    let info = s.get("/v1/info").body;
    let documents_now = s.get("/v1/documents?limit=2").body;
    runtime().block_on(async {
        let transport = TokioChildProcess::new(mcp_command(&index, false).configure(|c| {
            c.stderr(Stdio::null());
        }))
        .expect("spawn");
        let client = ().serve(transport).await.expect("initialize");
        let (status, _) = call(&client, "index_status", json!({})).await;
        // The MCP server is a service of its own over the same index: the same state, its
        // own jobs and readers.
        for k in ["default_mode", "limits", "version"] {
            assert_eq!(status[k], info[k], "{k}");
        }
        assert_eq!(status["stats"]["store"], info["stats"]["store"]);
        let (docs, _) = call(&client, "list_documents", json!({"limit": 2})).await;
        assert_eq!(docs, documents_now, "MCP and HTTP pages");
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

    // The same ingest report (last: it changes the service's index): `ingest --json` into
    // one copy of the index, an ingest job into the service's.
    let more = tempfile::tempdir().expect("tmp");
    std::fs::write(
        more.path().join("tides.md"),
        "# Tides\n\nSpring tides follow the new and the full moon.\n",
    )
    .expect("write");
    std::fs::write(more.path().join("blob.bin"), [0u8, 159, 146, 150]).expect("write");
    let (_other_tmp, other) = indexed_corpus("hash:64");
    let ingest_cli = json(situate(&other).arg("ingest").arg(more.path()), 0);
    let job = s.post(
        "/v1/jobs",
        &json!({"kind": "ingest", "paths": [more.path()]}),
    );
    assert_eq!(job.status, 202, "{}", job.body);
    let done = s.wait_job(job.body["id"].as_str().expect("id"));
    assert_eq!(done["state"], "succeeded", "{done:#}");
    assert_eq!(untimed(ingest_cli.clone()), untimed(done["result"].clone()));
    assert_eq!(ingest_cli["report"]["added"], 1, "{ingest_cli:#}");
    assert_eq!(
        ingest_cli["report"]["skipped"].as_array().map(Vec::len),
        Some(1)
    );

    // An ingest setting refused alike: by its field (and flag) from the command, by its
    // field in the failed job's error.
    let bad = json(
        situate(&other)
            .arg("ingest")
            .arg(more.path())
            .args(["--batch", "0"]),
        1,
    );
    assert_eq!(bad["error"]["field"], "batch", "{bad:#}");
    assert_eq!(bad["error"]["code"], "invalid-request");
    let job = s.post(
        "/v1/jobs",
        &json!({"kind": "ingest", "paths": [more.path()], "batch": 0}),
    );
    let failed = s.wait_job(job.body["id"].as_str().expect("id"));
    assert_eq!(failed["state"], "failed", "{failed:#}");
    assert_eq!(failed["error"]["field"], "batch", "{failed:#}");
    assert_eq!(failed["error"]["code"], "invalid-request");
}
