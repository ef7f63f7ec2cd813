//! `situate mcp` (stdio) and `/mcp` on the service (Streamable HTTP), driven by the
//! official Rust SDK's client, and by raw JSON-RPC lines.

use crate::serve::Server;
use crate::*;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ReadResourceRequestParams};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// A tool call's whole result as JSON (`content`, `structuredContent`, `isError`).
pub async fn call_result(
    client: &RunningService<RoleClient, ()>,
    tool: &str,
    args: Value,
) -> Value {
    let Value::Object(args) = args else {
        panic!("arguments are an object")
    };
    let r = client
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args))
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    serde_json::to_value(&r).expect("result")
}

/// A tool call's JSON answer (the text of its one content block), and whether it is an
/// error.
pub async fn call(
    client: &RunningService<RoleClient, ()>,
    tool: &str,
    args: Value,
) -> (Value, bool) {
    let v = call_result(client, tool, args).await;
    let text = v["content"][0]["text"].as_str().unwrap_or("").to_string();
    let is_error = v["isError"].as_bool().unwrap_or(false);
    (
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
        is_error,
    )
}

pub fn mcp_command(index: &Path, allow_write: bool) -> tokio::process::Command {
    let std = situate(index);
    let mut cmd = tokio::process::Command::new(std.get_program());
    cmd.args(std.get_args())
        .current_dir(std.get_current_dir().unwrap_or(Path::new("/")))
        .env_remove("SITUATE_INDEX")
        .arg("mcp");
    if allow_write {
        cmd.arg("--allow-write");
    }
    cmd
}

#[test]
fn an_agent_searches_reads_cards_and_explains_over_stdio() {
    let (_tmp, index) = indexed_corpus("none");
    runtime().block_on(async {
        let transport = TokioChildProcess::new(mcp_command(&index, false).configure(|c| {
            c.stderr(Stdio::null());
        }))
        .expect("spawn");
        let client = ().serve(transport).await.expect("initialize");
        let info = client.peer_info().expect("server info");
        assert_eq!(
            info.server_info.as_ref().map(|s| s.name.as_str()),
            Some("situate")
        );
        let tools = client.list_all_tools().await.expect("tools");
        let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        names.sort();
        assert_eq!(
            names,
            [
                "ask",
                "explain",
                "get_card",
                "index_status",
                "list_documents",
                "search"
            ]
        );
        for t in &tools {
            let hint = t.annotations.as_ref().and_then(|a| a.read_only_hint);
            assert_eq!(hint, Some(true), "{} is read-only", t.name);
        }

        let (r, err) = call(
            &client,
            "search",
            json!({"query": "how often to clean the Fresnel lens"}),
        )
        .await;
        assert!(!err, "{r}");
        let hits = r["hits"].as_array().expect("hits");
        assert!(!hits.is_empty() && hits.len() <= 5, "{r:#}");
        assert_eq!(hits[0]["document_id"], "corpus/guide/install.md");
        assert!(hits[0]["context"].is_string() && hits[0]["text"].is_string());
        let id = hits[0]["chunk_id"].as_str().expect("id").to_string();
        // Snippets and a budget keep the result small; the cursor gives the next hits.
        for h in hits {
            assert!(h["text"].as_str().expect("text").chars().count() <= 301);
        }
        let (page1, _) = call(
            &client,
            "search",
            json!({"query": "lamp", "k": 2, "max_chars": 500}),
        )
        .await;
        let cursor = page1["next_cursor"]
            .as_str()
            .expect("a next page")
            .to_string();
        let (page2, _) = call(
            &client,
            "search",
            json!({"query": "lamp", "k": 2, "cursor": cursor}),
        )
        .await;
        let first = page1["hits"][0]["rank"].as_u64().expect("rank");
        let next = page2["hits"][0]["rank"].as_u64().expect("rank");
        assert!(next > first, "{page1:#} {page2:#}");
        let (bad, err) = call(&client, "search", json!({"query": "lamp", "k": 500})).await;
        assert!(err, "{bad}");
        assert!(
            bad.as_str().expect("text").starts_with("invalid-request"),
            "{bad}"
        );

        let (card, err) = call(
            &client,
            "get_card",
            json!({"chunk_id": id, "neighbours": 1}),
        )
        .await;
        assert!(!err, "{card}");
        assert_eq!(card["chunk_id"], id.as_str());
        assert!(card["original_text"].is_string() && card["neighbours"].is_object());
        let (missing, err) = call(&client, "get_card", json!({"chunk_id": "no-such-chunk"})).await;
        assert!(
            err && missing.as_str().expect("text").starts_with("not-found"),
            "{missing}"
        );

        let (why, err) = call(
            &client,
            "explain",
            json!({"query": "Fresnel lens", "chunk_id": id}),
        )
        .await;
        assert!(!err, "{why}");
        assert!(why["rank"].as_u64().is_some(), "{why:#}");
        assert!(
            why["legs"]
                .as_array()
                .expect("legs")
                .iter()
                .any(|l| l["leg"] == "bm25")
        );

        let (docs, _) = call(&client, "list_documents", json!({"limit": 2})).await;
        assert_eq!(docs["documents"].as_array().expect("docs").len(), 2);
        assert!(docs["next_cursor"].is_string());
        let (status, _) = call(&client, "index_status", json!({})).await;
        assert!(
            status["stats"]["store"]["documents"]
                .as_u64()
                .expect("documents")
                >= 3,
            "{status:#}"
        );

        // Cards are resources too.
        let templates = client
            .list_all_resource_templates()
            .await
            .expect("templates");
        assert_eq!(templates[0].uri_template, "situate://card/{chunk_id}");
        let uri = format!(
            "situate://card/{}",
            id.replace('%', "%25")
                .replace('/', "%2F")
                .replace('#', "%23")
        );
        let res = client
            .read_resource(ReadResourceRequestParams::new(uri))
            .await
            .expect("resource");
        let res = serde_json::to_value(&res).expect("json");
        let text: Value =
            serde_json::from_str(res["contents"][0]["text"].as_str().expect("text")).expect("card");
        assert_eq!(text["chunk_id"], id.as_str());
        assert!(
            client
                .read_resource(ReadResourceRequestParams::new("situate://card/nope"))
                .await
                .is_err()
        );
        client.cancel().await.expect("close");
    });
}

#[test]
fn with_allow_write_an_agent_ingests_and_reviews_over_stdio() {
    let (_tmp, index) = indexed_corpus("none");
    runtime().block_on(async {
        let transport = TokioChildProcess::new(mcp_command(&index, true).configure(|c| {
            c.stderr(Stdio::null());
        }))
        .expect("spawn");
        let client = ().serve(transport).await.expect("initialize");
        let tools = client.list_all_tools().await.expect("tools");
        let writes: Vec<&str> = tools
            .iter()
            .filter(|t| t.annotations.as_ref().and_then(|a| a.read_only_hint) == Some(false))
            .map(|t| t.name.as_ref())
            .collect();
        assert_eq!(writes.len(), 2, "{writes:?}");
        assert!(tools.iter().any(|t| t.name == "job_status"));
        let (job, err) = call(
            &client,
            "ingest",
            json!({"files": [{"path": "notes/kelp.md", "text": "# Kelp\n\nKelp forests grow along cold rocky coasts."}]}),
        )
        .await;
        assert!(!err, "{job}");
        let id = job["id"].as_str().expect("job id").to_string();
        let mut state = job["state"].clone();
        for _ in 0..600 {
            let (s, _) = call(&client, "job_status", json!({"job_id": id})).await;
            state = s["state"].clone();
            if state == "succeeded" || state == "failed" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(state, "succeeded");
        let (r, _) = call(&client, "search", json!({"query": "kelp forests", "k": 1})).await;
        assert_eq!(r["hits"][0]["document_id"], "notes/kelp.md", "{r:#}");
        let chunk = r["hits"][0]["chunk_id"].as_str().expect("id").to_string();
        let (done, err) = call(
            &client,
            "review_context",
            json!({"chunk_id": chunk, "decision": "edit", "text": "Marine biology notes on kelp."}),
        )
        .await;
        assert!(!err, "{done}");
        assert_eq!(done["card"]["context_status"], "verified", "{done:#}");
        assert_eq!(done["job"]["state"], "succeeded", "{done:#}");
        let (card, _) = call(&client, "get_card", json!({"chunk_id": chunk})).await;
        // The review's answer is the card as `get_card` shows it (and as the HTTP review).
        assert_eq!(done["card"], card);
        assert_eq!(card["generated_context"], "Marine biology notes on kelp.");
        assert_eq!(card["context_provenance"]["method"], "manual");
        client.cancel().await.expect("close");
    });
}

#[test]
fn every_line_situate_mcp_writes_to_stdout_is_json_rpc() {
    let (_tmp, index) = indexed_corpus("none");
    let mut child = situate(&index)
        .arg("mcp")
        .env("SITUATE_LOG", "debug")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "search", "arguments": {"query": "lens"}}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "no_such_tool", "arguments": {}}}),
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "search", "arguments": {"query": ""}}}),
    ];
    let stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map(|l| l.expect("a line"))
            .collect::<Vec<String>>()
    });
    for l in &lines {
        writeln!(stdin, "{l}").expect("write");
        stdin.flush().expect("flush");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // Give the last answers time, then close stdin: the server exits.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    drop(stdin);
    let status = child.wait().expect("exit");
    let out = reader.join().expect("reader");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("stderr");
    assert!(status.success(), "{status}: {stderr}");
    assert!(out.len() >= 5, "{out:#?}\n{stderr}");
    let mut ids = Vec::new();
    for line in &out {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}\nstderr: {stderr}"));
        assert_eq!(v["jsonrpc"], "2.0", "{line}");
        if let Some(id) = v["id"].as_u64() {
            ids.push(id);
        }
    }
    ids.sort();
    assert_eq!(ids, [1, 2, 3, 4, 5], "{out:#?}");
    // Logging happened (debug), on stderr only.
    assert!(!stderr.is_empty());
}

#[test]
fn the_service_speaks_mcp_over_http_with_keys_and_roles() {
    let (_tmp, index) = indexed_corpus("none");
    let (read, admin) = ("read-key-for-mcp-00001", "admin-key-for-mcp-00001");
    let s = Server::start(
        &index,
        &["--mcp-allow-write"],
        &[("SITUATE_READ_KEYS", read), ("SITUATE_ADMIN_KEYS", admin)],
    );
    let url = format!("{}/mcp", s.url);
    // No key: refused before MCP is reached.
    let anon = s.post(
        "/mcp",
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    );
    assert_eq!(anon.status, 401);
    runtime().block_on(async {
        use rmcp::transport::StreamableHttpClientTransport;
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        let connect = |key: &str| {
            StreamableHttpClientTransport::from_config(
                StreamableHttpClientTransportConfig::with_uri(url.clone()).auth_header(key.to_string()),
            )
        };
        let reader = ().serve(connect(read)).await.expect("initialize");
        let tools = reader.list_all_tools().await.expect("tools");
        assert_eq!(tools.len(), 9, "{tools:?}");
        let (r, err) = call(&reader, "search", json!({"query": "Fresnel lens", "k": 2})).await;
        assert!(!err, "{r}");
        assert_eq!(r["hits"][0]["document_id"], "corpus/guide/install.md");
        // A write tool with a read key: refused, as a tool error.
        let (denied, err) = call(
            &reader,
            "ingest",
            json!({"files": [{"path": "x.md", "text": "# X\n\nx"}]}),
        )
        .await;
        assert!(err && denied.as_str().expect("text").starts_with("forbidden"), "{denied}");
        reader.cancel().await.expect("close");
        let writer = ().serve(connect(admin)).await.expect("initialize");
        let (job, err) = call(
            &writer,
            "ingest",
            json!({"files": [{"path": "notes/tide.md", "text": "# Tides\n\nSpring tides follow the new moon."}]}),
        )
        .await;
        assert!(!err, "{job}");
        assert!(job["id"].is_string());
        writer.cancel().await.expect("close");
    });
}

/// Runs `tests/python/mcp_client.py` with `args` and parses what it prints.
fn python_client(args: &[&str]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/mcp_client.py");
    let out = std::process::Command::new(test_python())
        .arg(script)
        .args(args)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{e}: {line}"))
}

#[test]
fn the_python_reference_client_lists_and_calls_the_tools_over_stdio_and_http() {
    let (_tmp, index) = indexed_corpus("none");
    let check = |v: &Value| {
        assert_eq!(v["server"], "situate");
        assert_eq!(
            v["tools"],
            json!([
                "ask",
                "explain",
                "get_card",
                "index_status",
                "list_documents",
                "search"
            ])
        );
        assert!(
            v["read_only"]
                .as_object()
                .expect("hints")
                .values()
                .all(|h| h == true)
        );
        assert_eq!(v["top"]["document_id"], "corpus/guide/install.md");
        assert_eq!(v["card"]["chunk_id"], v["top"]["chunk_id"]);
        assert_eq!(v["resource"]["chunk_id"], v["top"]["chunk_id"]);
        assert_eq!(v["empty_query_is_error"], true);
    };
    let bin = env!("CARGO_BIN_EXE_situate");
    check(&python_client(&[
        "stdio",
        bin,
        index.to_str().expect("utf-8"),
    ]));
    let s = Server::start(&index, &[], &[]);
    check(&python_client(&["http", &format!("{}/mcp", s.url)]));
}
