//! The service against hostile callers (SECURITY.md): slow clients, too many connections,
//! guessed keys, server-side paths outside the ingest roots, deep JSON, too many uploads,
//! and no secret in a log, an answer or `/metrics`.

use crate::serve::{Server, assert_problem};
use crate::*;
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

fn addr(s: &Server) -> String {
    format!("127.0.0.1:{}", s.port)
}

#[test]
fn a_slow_client_is_disconnected_and_connections_are_capped() {
    let (_tmp, index) = indexed_corpus("none");
    let s = Server::start(
        &index,
        &["--header-timeout", "1", "--max-connections", "3"],
        &[],
    );
    // Slowloris: a request head sent a line at a time, never finished.
    let mut slow = TcpStream::connect(addr(&s)).expect("connect");
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .expect("write");
    slow.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let started = Instant::now();
    let mut closed = false;
    for _ in 0..60 {
        std::thread::sleep(Duration::from_millis(300));
        if slow.write_all(b"X-Slow: 1\r\n").is_err() {
            closed = true;
            break;
        }
        let mut buf = [0u8; 64];
        slow.set_nonblocking(true).expect("nonblocking");
        let r = slow.read(&mut buf);
        slow.set_nonblocking(false).expect("blocking");
        if matches!(r, Ok(0)) {
            closed = true;
            break;
        }
    }
    assert!(
        closed,
        "a head never finished is still open after {:?}",
        started.elapsed()
    );
    assert_eq!(s.get("/healthz").status, 200);

    // Three idle connections take every slot; a fourth request waits for one of them.
    let idle: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(addr(&s)).expect("connect"))
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut waiting = TcpStream::connect(addr(&s)).expect("the kernel accepts it");
    waiting
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .expect("write");
    waiting
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    let mut buf = Vec::new();
    assert!(
        waiting.read_to_end(&mut buf).is_err() && buf.is_empty(),
        "served beyond the cap: {}",
        String::from_utf8_lossy(&buf)
    );
    // The idle ones are closed by the header timeout; then it is answered.
    drop(idle);
    waiting
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    waiting.read_to_end(&mut buf).expect("answered");
    assert!(
        String::from_utf8_lossy(&buf).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&buf)
    );
}

const ADMIN: &str = "admin-key-0123456789-SECRET-A";
const READER: &str = "read-key-0123456789-SECRET-R";
const HOSTED: &str = "sk-ant-hosted-key-SECRET-H";

#[test]
fn guessed_keys_are_limited_and_logged_without_the_key_and_no_secret_leaks() {
    let (tmp, index) = indexed_corpus("hash:64");
    let log = tmp.path().join("serve.log");
    let s = Server::start_with(
        &index,
        &[],
        &[
            ("SITUATE_ADMIN_KEYS", ADMIN),
            ("SITUATE_READ_KEYS", READER),
            ("ANTHROPIC_API_KEY", HOSTED),
        ],
        Stdio::from(std::fs::File::create(&log).expect("log")),
    );
    let bearer = |k: &str| format!("Bearer {k}");
    let mut bodies = Vec::new();
    // Work with the right keys, and a few wrong requests.
    for (key, path) in [
        (READER, "/v1/info"),
        (READER, "/metrics"),
        (ADMIN, "/v1/jobs"),
        (READER, "/openapi.json"),
    ] {
        let a = s.send("GET", path, &[("authorization", &bearer(key))], None);
        assert_eq!(a.status, 200, "{path}");
        bodies.push(a.body.to_string());
    }
    let a = s.send(
        "POST",
        "/v1/search",
        &[("authorization", &bearer(READER))],
        Some(&json!({"query": "install", "k": 100000})),
    );
    assert_eq!(a.status, 400);
    bodies.push(a.body.to_string());
    let (status, metrics) = s.get_text("/metrics", &[("authorization", &bearer(READER))]);
    assert_eq!(status, 200);
    bodies.push(metrics);

    // Ten wrong keys from this address are answered 401, the next 429, even with a right
    // key, until the minute ends.
    for i in 0..auth_limit() {
        let guess = format!("guess-{i}-SECRET-GUESS-0123456789");
        let a = s.send(
            "GET",
            "/v1/info",
            &[("authorization", &bearer(&guess))],
            None,
        );
        assert_problem(&a, 401, "unauthorized");
        bodies.push(a.body.to_string());
    }
    let a = s.send(
        "GET",
        "/v1/info",
        &[("authorization", &bearer(READER))],
        None,
    );
    assert_problem(&a, 429, "too-many-failures");
    assert!(a.headers.get("retry-after").is_some());
    // Routes without a key stay open.
    assert_eq!(s.get("/healthz").status, 200);
    drop(s);

    let log = std::fs::read_to_string(&log).expect("log");
    assert!(
        log.contains("a wrong API key from 127.0.0.1 for /v1/info"),
        "{log}"
    );
    for text in bodies.iter().chain(std::iter::once(&log)) {
        for secret in ["SECRET-A", "SECRET-R", "SECRET-H", "SECRET-GUESS"] {
            assert!(!text.contains(secret), "{secret} leaked into:\n{text}");
        }
    }
}

fn auth_limit() -> u32 {
    10
}

#[test]
fn server_side_paths_stay_inside_the_ingest_roots() {
    let (tmp, index) = indexed_corpus("hash:64");
    let root = tmp.path().join("shared");
    let outside = tmp.path().join("private");
    std::fs::create_dir_all(&root).expect("mkdir");
    std::fs::create_dir_all(&outside).expect("mkdir");
    std::fs::write(
        root.join("open.md"),
        "# Open\n\nThe open manual of the pump.\n",
    )
    .expect("write");
    std::fs::write(
        outside.join("secret.md"),
        "# Secret\n\nThe payroll of the pump station.\n",
    )
    .expect("write");
    std::os::unix::fs::symlink(outside.join("secret.md"), root.join("link.md")).expect("symlink");
    std::os::unix::fs::symlink(&outside, root.join("dir-link")).expect("symlink");
    let s = Server::start(
        &index,
        &["--ingest-root", root.to_str().expect("utf-8")],
        &[],
    );
    for p in [
        outside.clone(),
        outside.join("secret.md"),
        root.join("link.md"),
    ] {
        let a = s.post("/v1/jobs", &json!({"kind": "ingest", "paths": [p]}));
        assert_problem(&a, 400, "invalid-request");
        assert_eq!(a.body["field"], "paths", "{:#}", a.body);
    }
    let job = s.post("/v1/jobs", &json!({"kind": "ingest", "paths": [root]}));
    assert_eq!(job.status, 202, "{:#}", job.body);
    let done = s.wait_job(job.body["id"].as_str().expect("id"));
    assert_eq!(done["state"], "succeeded", "{done:#}");
    assert_eq!(done["result"]["report"]["added"], 1, "{done:#}");
    let skipped = done["result"]["report"]["skipped"].to_string();
    assert!(
        skipped.contains("link.md") && skipped.contains("symbolic link"),
        "{skipped}"
    );
    let hits = s.post("/v1/search", &json!({"query": "payroll", "mode": "bm25"}));
    assert_eq!(
        hits.body["hits"].as_array().map(Vec::len),
        Some(0),
        "{:#}",
        hits.body
    );
    // An evaluation's data set too.
    let a = s.post(
        "/v1/jobs",
        &json!({"kind": "eval", "name": "x", "dataset": outside}),
    );
    assert_problem(&a, 400, "invalid-request");
    assert_eq!(a.body["field"], "dataset", "{:#}", a.body);
    // Uploads are read wherever the roots are.
    let job = s.post(
        "/v1/jobs",
        &json!({"kind": "ingest", "files": [{"path": "up/a.md", "text": "# A\n\nUploaded text.\n"}]}),
    );
    let done = s.wait_job(job.body["id"].as_str().expect("id"));
    assert_eq!(done["result"]["report"]["added"], 1, "{done:#}");
    drop(s);

    // Over the network with no root, no server-side path at all.
    let s = Server::start(
        &index,
        &["--bind", "0.0.0.0:0", "--allow-host", "0.0.0.0"],
        &[("SITUATE_ADMIN_KEYS", ADMIN)],
    );
    let a = s.send(
        "POST",
        "/v1/jobs",
        &[("authorization", &format!("Bearer {ADMIN}"))],
        Some(&json!({"kind": "ingest", "paths": [root]})),
    );
    assert_problem(&a, 400, "invalid-request");
    assert!(
        a.body["detail"]
            .as_str()
            .is_some_and(|d| d.contains("--ingest-root")),
        "{:#}",
        a.body
    );
}

#[test]
fn deep_json_and_too_many_uploads_are_refused() {
    let (_tmp, index) = indexed_corpus("none");
    let s = Server::start(&index, &[], &[]);
    let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let a = s.post_raw("/v1/search", "application/json", deep.into_bytes());
    assert_eq!(a.status, 400, "{:#}", a.body);
    let files: Vec<_> = (0..10_001)
        .map(|i| json!({"path": format!("f{i}.txt"), "text": "x"}))
        .collect();
    let a = s.post("/v1/jobs", &json!({"kind": "ingest", "files": files}));
    if a.status == 413 {
        // The body limit came first: that bounds them too.
        assert_problem(&a, 413, "body-too-large");
    } else {
        assert_problem(&a, 400, "invalid-request");
        assert_eq!(a.body["field"], "files", "{:#}", a.body);
    }
    assert_eq!(s.get("/healthz").status, 200);
}
