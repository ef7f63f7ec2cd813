//! `situate serve`: the real binary bound on loopback, driven over HTTP.

use crate::*;
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

/// A running `situate serve`, killed when dropped.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The bound port.
    pub port: u16,
    rt: tokio::runtime::Runtime,
    client: reqwest::Client,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An answer: status, content type and the body as JSON (`Null` when it is not JSON).
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub body: Value,
    pub headers: reqwest::header::HeaderMap,
}

impl Server {
    /// Starts `situate serve --bind 127.0.0.1:0` on `index` with `args` and `envs`, and
    /// waits for its "listening" line.
    pub fn start(index: &Path, args: &[&str], envs: &[(&str, &str)]) -> Server {
        Server::start_with(index, args, envs, Stdio::inherit())
    }

    /// [`Server::start`] with its log (stderr) sent to `stderr`; `args` may name its own
    /// `--bind`.
    pub fn start_with(index: &Path, args: &[&str], envs: &[(&str, &str)], stderr: Stdio) -> Server {
        let mut cmd = situate(index);
        cmd.args(["--json", "serve"]);
        if !args.contains(&"--bind") {
            cmd.args(["--bind", "127.0.0.1:0"]);
        }
        cmd.args(args)
            .env_remove("SITUATE_ADMIN_KEYS")
            .env_remove("SITUATE_READ_KEYS")
            .stdout(Stdio::piped())
            .stderr(stderr);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("situate serve starts");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("a line from situate serve");
        let v: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                let status = child.wait().expect("exit");
                panic!("situate serve did not start ({status}): {e}: {line:?}");
            }
        };
        let addr: std::net::SocketAddr = v["listening"]
            .as_str()
            .expect("listening")
            .parse()
            .expect("address");
        let _ = rustls::crypto::ring::default_provider().install_default();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        Server {
            child,
            url: format!("http://{addr}"),
            port: addr.port(),
            rt,
            client: reqwest::Client::new(),
        }
    }

    /// Sends `method path` with `headers` and an optional JSON body.
    pub fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Answer {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self.client.request(method, format!("{}{path}", self.url));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        self.answer(req)
    }

    /// The status and text of `GET path` with `headers` (for answers that are not JSON).
    pub fn get_text(&self, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
        let mut req = self.client.get(format!("{}{path}", self.url));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        self.rt.block_on(async {
            let r = req.send().await.expect("the service answers");
            let status = r.status().as_u16();
            (status, r.text().await.expect("text"))
        })
    }

    /// Sends `req` and reads its answer.
    fn answer(&self, req: reqwest::RequestBuilder) -> Answer {
        self.rt.block_on(async {
            let r = req.send().await.expect("the service answers");
            let headers = r.headers().clone();
            let content_type = headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let status = r.status().as_u16();
            let bytes = r.bytes().await.expect("body");
            Answer {
                status,
                content_type,
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                headers,
            }
        })
    }

    pub fn get(&self, path: &str) -> Answer {
        self.send("GET", path, &[], None)
    }

    pub fn post(&self, path: &str, body: &Value) -> Answer {
        self.send("POST", path, &[], Some(body))
    }

    /// Sends raw bytes as the body with a content type.
    pub fn post_raw(&self, path: &str, content_type: &str, body: Vec<u8>) -> Answer {
        let req = self
            .client
            .post(format!("{}{path}", self.url))
            .header("content-type", content_type)
            .body(body);
        self.answer(req)
    }
}

/// Asserts `a` is a problem+json answer with `status` and `code`.
#[track_caller]
pub fn assert_problem(a: &Answer, status: u16, code: &str) {
    assert_eq!(
        (a.status, a.content_type.as_str(), a.body["code"].as_str()),
        (status, "application/problem+json", Some(code)),
        "{:#}",
        a.body
    );
    assert_eq!(a.body["type"], format!("urn:situate:problem:{code}"));
    assert_eq!(a.body["status"], status);
    assert!(a.body["title"].is_string() && a.body["detail"].is_string());
}

/// The ids and scores of hits.
pub fn ranked(v: &Value) -> Vec<(String, String)> {
    v["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| {
            (
                h["chunk_id"].as_str().expect("id").to_string(),
                format!("{:.6}", h["score"].as_f64().expect("score")),
            )
        })
        .collect()
}

#[test]
fn the_service_answers_searches_cards_and_documents_as_the_cli_does() {
    let (_tmp, index) = indexed_corpus("hash:64");
    let s = Server::start(&index, &[], &[]);
    assert_eq!(s.get("/healthz").body["status"], "ok");
    assert_eq!(s.get("/readyz").body["status"], "ready");
    let info = s.get("/v1/info");
    assert_eq!(info.status, 200);
    assert_eq!(info.body["default_mode"], "hybrid");
    let documents = info.body["stats"]["store"]["documents"]
        .as_u64()
        .expect("documents");
    assert!(documents >= 3, "{:#}", info.body);

    // A search, with a filter and tuning, answers exactly as `situate search --json`.
    let q = "how often to clean the Fresnel lens";
    let a = s.post(
        "/v1/search",
        &json!({"query": q, "k": 5, "bm25_weight": 2.0, "filter": {"languages": ["en"]}}),
    );
    assert_eq!(a.status, 200, "{:#}", a.body);
    let cli = json(
        situate(&index).args([
            "search",
            q,
            "-k",
            "5",
            "--bm25-weight",
            "2",
            "--language",
            "en",
        ]),
        0,
    );
    assert_eq!(ranked(&a.body), ranked(&cli));
    assert_eq!(a.body["mode"], "hybrid");
    assert!(a.body["took_ms"].as_f64().is_some());
    let top = &a.body["hits"][0];
    assert_eq!(top["document_id"], "corpus/guide/install.md");
    assert!(top["context"].is_string() && top["original_text"].is_string());
    let legs: Vec<&str> = top["legs"]
        .as_array()
        .expect("legs")
        .iter()
        .map(|l| l["leg"].as_str().expect("leg"))
        .collect();
    assert!(
        legs.contains(&"bm25") && legs.contains(&"vector"),
        "{legs:?}"
    );
    // Every mode, and plain BM25.
    for (mode, bm25) in [
        ("bm25", "plain"),
        ("vector", "contextual"),
        ("hybrid", "plain"),
    ] {
        let a = s.post(
            "/v1/search",
            &json!({"query": q, "mode": mode, "bm25": bm25, "k": 3}),
        );
        assert_eq!(
            (a.status, a.body["mode"].as_str()),
            (200, Some(mode)),
            "{:#}",
            a.body
        );
        let cli = json(
            situate(&index).args(["search", q, "-k", "3", "--mode", mode, "--bm25", bm25]),
            0,
        );
        assert_eq!(ranked(&a.body), ranked(&cli));
    }

    // A card in full, as `situate show --json`, with its neighbours on request.
    let id = top["chunk_id"].as_str().expect("id");
    let encoded = id
        .replace('%', "%25")
        .replace('#', "%23")
        .replace(' ', "%20");
    let card = s.get(&format!("/v1/cards/{encoded}"));
    assert_eq!(card.status, 200, "{:#}", card.body);
    let shown = json(situate(&index).args(["show", id]), 0);
    assert_eq!(card.body, shown);
    assert!(
        card.body["indexed_text"]
            .as_str()
            .expect("indexed")
            .ends_with(card.body["original_text"].as_str().expect("original"))
    );
    let near = s.get(&format!("/v1/cards/{encoded}?neighbours=1"));
    let ordinal = card.body["ordinal"].as_u64().expect("ordinal");
    let before = near.body["neighbours"]["before"]
        .as_array()
        .expect("before");
    let after = near.body["neighbours"]["after"].as_array().expect("after");
    assert!(before.len() <= 1 && after.len() <= 1 && before.len() + after.len() >= 1);
    for n in before {
        assert_eq!(n["ordinal"].as_u64(), Some(ordinal - 1));
    }
    for n in after {
        assert_eq!(n["ordinal"].as_u64(), Some(ordinal + 1));
    }

    // Documents page by page: every document once, in id order.
    let mut seen: Vec<String> = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = s.get(&format!("/v1/documents?limit=2&cursor={cursor}"));
        assert_eq!(page.status, 200, "{:#}", page.body);
        let docs = page.body["documents"].as_array().expect("documents");
        assert!(docs.len() <= 2);
        seen.extend(
            docs.iter()
                .map(|d| d["id"].as_str().expect("id").to_string()),
        );
        match page.body["next_cursor"].as_str() {
            Some(c) => cursor = c.to_string(),
            None => break,
        }
    }
    assert_eq!(seen.len() as u64, documents);
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    let doc = s.get("/v1/documents/corpus/guide/install.md");
    assert_eq!(doc.status, 200, "{:#}", doc.body);
    assert_eq!(doc.body["document"]["id"], "corpus/guide/install.md");
    let chunk_ids = doc.body["chunk_ids"].as_array().expect("chunk ids");
    assert_eq!(
        chunk_ids.len() as u64,
        doc.body["document"]["chunk_count"].as_u64().expect("count")
    );
    assert!(chunk_ids.iter().any(|c| c == id));

    // The metrics count what was answered, by route pattern, and give the index's size.
    let m =
        s.rt.block_on(async {
            let r = s.client.get(format!("{}/metrics", s.url)).send().await?;
            let ct = r
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            Ok::<_, reqwest::Error>((r.status().as_u16(), ct, r.text().await?))
        })
        .expect("metrics");
    assert_eq!(m.0, 200);
    assert!(m.1.starts_with("application/openmetrics-text"), "{}", m.1);
    let searches = 1 + 3; // the first search and one per mode above
    assert!(
        m.2.contains(&format!(
            r#"situate_http_requests_total{{route="/v1/search",method="POST",status="200"}} {searches}"#
        )),
        "{}",
        m.2
    );
    assert!(m.2.contains(r#"route="/v1/cards/{*chunk_id}""#), "{}", m.2);
    assert!(!m.2.contains(&encoded), "chunk ids are no label: {}", m.2);
    assert!(
        m.2.contains(&format!("situate_index_documents {documents}")),
        "{}",
        m.2
    );
}

#[test]
fn bad_requests_get_problem_json_with_a_stable_code() {
    let (_tmp, index) = indexed_corpus("hash:64");
    let s = Server::start(&index, &["--max-k", "20"], &[]);
    let search = |body: Value| s.post("/v1/search", &body);
    assert_problem(
        &search(json!({"query": "lens", "kk": 3})),
        400,
        "invalid-request",
    );
    assert_problem(&search(json!({"k": 3})), 400, "invalid-request");
    assert_problem(&search(json!({"query": "  "})), 400, "invalid-request");
    assert_problem(
        &search(json!({"query": "lens", "k": 21})),
        400,
        "k-too-large",
    );
    assert_problem(
        &search(json!({"query": "lens", "k": 0})),
        400,
        "invalid-request",
    );
    assert_problem(
        &search(json!({"query": "lens", "mode": "fuzzy"})),
        400,
        "invalid-request",
    );
    assert_problem(
        &search(json!({"query": "lens", "filter": {"languages": ["klingon"]}})),
        400,
        "invalid-request",
    );
    assert_problem(
        &search(json!({"query": "lens", "filter": {"meta": ["novalue"]}})),
        400,
        "invalid-request",
    );
    assert_problem(
        &search(json!({"query": "x".repeat(2001)})),
        400,
        "query-too-long",
    );
    // A reranker that does not exist is the request's fault (schemathesis found it answered 502).
    assert_problem(
        &search(json!({"query": "lens", "rerank": "psychic"})),
        400,
        "invalid-request",
    );
    assert_problem(
        &s.post_raw("/v1/search", "application/json", b"{\"query\": ".to_vec()),
        400,
        "invalid-json",
    );
    assert_problem(
        &s.post_raw(
            "/v1/search",
            "text/plain",
            b"{\"query\": \"lens\"}".to_vec(),
        ),
        415,
        "unsupported-media-type",
    );
    let huge = format!("{{\"query\": \"{}\"}}", "y".repeat(100 * 1024));
    assert_problem(
        &s.post_raw("/v1/search", "application/json", huge.into_bytes()),
        413,
        "body-too-large",
    );
    assert_problem(&s.get("/v1/nothing"), 404, "route-not-found");
    assert_problem(&s.get("/v1/search"), 405, "method-not-allowed");
    assert_problem(&s.get("/v1/cards/no-such-chunk"), 404, "not-found");
    assert_problem(&s.get("/v1/documents/no/such/doc"), 404, "not-found");
    assert_problem(&s.get("/v1/documents?cursor=zz"), 400, "invalid-request");
    assert_problem(&s.get("/v1/documents?limit=0"), 400, "invalid-request");
    assert_problem(&s.get("/v1/documents?limit=many"), 400, "invalid-request");
    let id = json(situate(&index).args(["search", "lens", "-k", "1"]), 0)["hits"][0]["chunk_id"]
        .as_str()
        .expect("id")
        .replace('#', "%23");
    assert_problem(
        &s.get(&format!("/v1/cards/{id}?neighbours=999")),
        400,
        "invalid-request",
    );
    // The service still answers after all of that.
    assert_eq!(search(json!({"query": "lens"})).status, 200);
}

#[test]
fn keys_roles_and_the_host_and_origin_checks() {
    let (_tmp, index) = indexed_corpus("hash:64");
    // Listening beyond loopback without keys is refused at start.
    let out = run(
        situate(&index)
            .args(["serve", "--bind", "0.0.0.0:0"])
            .env_remove("SITUATE_ADMIN_KEYS")
            .env_remove("SITUATE_READ_KEYS"),
        1,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("without API keys"), "{err}");
    // A short key is refused, and not echoed.
    let out = run(
        situate(&index)
            .args(["serve", "--bind", "127.0.0.1:0"])
            .env("SITUATE_READ_KEYS", "tiny-key"),
        1,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("at least 16") && !err.contains("tiny-key"),
        "{err}"
    );

    let (read, admin) = ("read-key-for-tests-0001", "admin-key-for-tests-0001");
    let s = Server::start(
        &index,
        &["--allow-host", "search.internal"],
        &[("SITUATE_READ_KEYS", read), ("SITUATE_ADMIN_KEYS", admin)],
    );
    let bearer = |k: &str| format!("Bearer {k}");
    let body = json!({"query": "lens"});
    // The probes need no key; everything else does.
    assert_eq!(s.get("/healthz").status, 200);
    assert_eq!(s.get("/readyz").status, 200);
    assert_problem(&s.post("/v1/search", &body), 401, "unauthorized");
    assert_problem(
        &s.send(
            "POST",
            "/v1/search",
            &[("authorization", &bearer("not-a-key-0000000000"))],
            Some(&body),
        ),
        401,
        "unauthorized",
    );
    let r = s.send(
        "POST",
        "/v1/search",
        &[("authorization", &bearer(read))],
        Some(&body),
    );
    assert_eq!(r.status, 200, "{:#}", r.body);
    let r = s.send("GET", "/v1/info", &[("authorization", &bearer(read))], None);
    assert_eq!((r.status, r.body["auth"].as_str()), (200, Some("api keys")));
    // A read key on a write route is forbidden; an admin key passes the guard.
    assert_problem(
        &s.send(
            "DELETE",
            "/v1/documents/corpus/guide/install.md",
            &[("authorization", &bearer(read))],
            None,
        ),
        403,
        "forbidden",
    );
    let r = s.send(
        "DELETE",
        "/v1/documents/corpus/guide/install.md",
        &[("authorization", &bearer(admin))],
        None,
    );
    assert_ne!(r.status, 403, "{:#}", r.body);
    assert_ne!(r.status, 401, "{:#}", r.body);
    // Jobs are an admin's, even to list.
    assert_problem(
        &s.send("GET", "/v1/jobs", &[("authorization", &bearer(read))], None),
        403,
        "forbidden",
    );
    let r = s.send(
        "GET",
        "/v1/jobs",
        &[("authorization", &bearer(admin))],
        None,
    );
    assert_eq!(r.status, 200, "{:#}", r.body);
    // DNS rebinding: a Host that is not this service, even with a key.
    let auth = bearer(admin);
    assert_problem(
        &s.send(
            "GET",
            "/v1/info",
            &[("authorization", &auth), ("host", "attacker.example")],
            None,
        ),
        403,
        "host-not-allowed",
    );
    let allowed = format!("search.internal:{}", s.port);
    let r = s.send(
        "GET",
        "/v1/info",
        &[("authorization", &auth), ("host", &allowed)],
        None,
    );
    assert_eq!(r.status, 200, "{:#}", r.body);
    // A page on another origin.
    assert_problem(
        &s.send(
            "POST",
            "/v1/search",
            &[
                ("authorization", &auth),
                ("origin", "https://attacker.example"),
            ],
            Some(&body),
        ),
        403,
        "origin-not-allowed",
    );
    let own = s.url.clone();
    let r = s.send(
        "POST",
        "/v1/search",
        &[("authorization", &auth), ("origin", &own)],
        Some(&body),
    );
    assert_eq!(r.status, 200, "{:#}", r.body);
}

#[test]
fn searches_see_what_is_ingested_beside_the_running_service() {
    let (tmp, index) = indexed_corpus("hash:64");
    let s = Server::start(&index, &["--readers", "2"], &[]);
    let query = json!({"query": "aurora borealis photography", "mode": "bm25", "k": 3});
    let before = s.post("/v1/search", &query);
    assert_eq!(before.status, 200);
    assert!(
        !ranked(&before.body)
            .iter()
            .any(|(id, _)| id.starts_with("more/")),
        "{:#}",
        before.body
    );
    let more = tmp.path().join("more");
    std::fs::create_dir_all(&more).expect("mkdir");
    std::fs::write(
        more.join("aurora.md"),
        "# Aurora borealis\n\nPhotography of the aurora borealis needs a tripod and long exposures.",
    )
    .expect("write");
    run(situate(&index).arg("ingest").arg(&more), 0);
    // Every reader sees it (each checks the store before answering).
    for _ in 0..4 {
        let after = s.post("/v1/search", &query);
        assert_eq!(after.status, 200);
        assert_eq!(
            after.body["hits"][0]["document_id"], "more/aurora.md",
            "{:#}",
            after.body
        );
    }
}

impl Server {
    /// Reads a Server-Sent Events stream to its end: (event name, data as JSON) pairs.
    pub fn events(&self, path: &str) -> Vec<(String, Value)> {
        self.read_events(self.client.get(format!("{}{path}", self.url)))
    }

    /// [`Server::events`] of a POST with a JSON body.
    pub fn post_events(&self, path: &str, body: &Value) -> Vec<(String, Value)> {
        self.read_events(self.client.post(format!("{}{path}", self.url)).json(body))
    }

    fn read_events(&self, req: reqwest::RequestBuilder) -> Vec<(String, Value)> {
        self.rt.block_on(async {
            let mut r = req.send().await.expect("the service answers");
            assert_eq!(r.status().as_u16(), 200);
            assert_eq!(
                r.headers()
                    .get("content-type")
                    .and_then(|v| v.to_str().ok()),
                Some("text/event-stream")
            );
            let mut text = String::new();
            let read = async {
                while let Some(chunk) = r.chunk().await.expect("a chunk") {
                    text.push_str(&String::from_utf8_lossy(&chunk));
                }
            };
            tokio::time::timeout(std::time::Duration::from_secs(300), read)
                .await
                .expect("the stream ends when the job does");
            text.split("\n\n")
                .filter_map(|block| {
                    let mut name = None;
                    let mut data = String::new();
                    for line in block.lines() {
                        if let Some(n) = line.strip_prefix("event:") {
                            name = Some(n.trim().to_string());
                        } else if let Some(d) = line.strip_prefix("data:") {
                            data.push_str(d.trim_start());
                        }
                    }
                    Some((name?, serde_json::from_str(&data).expect("JSON data")))
                })
                .collect()
        })
    }

    /// Polls a job until it is over; returns its last status.
    pub fn wait_job(&self, id: &str) -> Value {
        for _ in 0..6000 {
            let s = self.get(&format!("/v1/jobs/{id}"));
            assert_eq!(s.status, 200, "{:#}", s.body);
            if ["succeeded", "failed", "cancelled"]
                .contains(&s.body["state"].as_str().unwrap_or(""))
            {
                return s.body;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("job {id} did not end");
    }
}

/// `n` small text documents under `dir/name`.
pub fn many_documents(dir: &Path, name: &str, n: usize) -> PathBuf {
    let root = dir.join(name);
    std::fs::create_dir_all(&root).expect("mkdir");
    for i in 0..n {
        std::fs::write(
            root.join(format!("doc-{i:05}.txt")),
            format!("Record {i} of the archive. The lighthouse keeper wrote entry {i} about weather, ships and the lamp."),
        )
        .expect("write");
    }
    root
}

/// `situate stats --json`'s counts, failing unless the indexes agree with the store.
fn stats_are_consistent(index: &Path) -> Value {
    let v = json(situate(index).arg("stats"), 0);
    assert_eq!(v["consistent"], true, "{v:#}");
    v["stats"].clone()
}

#[test]
fn jobs_ingest_uploads_and_paths_delete_and_rebuild_with_progress_as_events() {
    let (tmp, index) = indexed_corpus("hash:64");
    let s = Server::start(&index, &[], &[]);
    let job = s.post(
        "/v1/jobs",
        &json!({"kind": "ingest", "files": [
            {"path": "notes/aurora.md", "text": "# Aurora\n\nPhotograph the aurora borealis from a dark field with a tripod."},
            {"path": "todo.txt", "text": "Buy a tripod."}
        ]}),
    );
    assert_eq!(job.status, 202, "{:#}", job.body);
    let id = job.body["id"].as_str().expect("id").to_string();
    assert_eq!(job.body["kind"], "ingest");
    let events = s.events(&format!("/v1/jobs/{id}/events"));
    let (last_name, last) = events.last().expect("events");
    assert_eq!(last_name, "end");
    assert!(
        events[..events.len() - 1]
            .iter()
            .all(|(n, _)| n == "status")
    );
    assert_eq!(last["state"], "succeeded", "{last:#}");
    assert_eq!(last["result"]["report"]["added"], 2);
    assert_eq!(last["progress"]["documents"]["done"], 2);
    assert!(last["commits"].as_u64().expect("commits") >= 1);
    assert!(last["started_at"].is_string() && last["finished_at"].is_string());
    // The events of a finished job: its final status at once.
    let again = s.events(&format!("/v1/jobs/{id}/events"));
    assert_eq!((again.len(), again[0].0.as_str()), (1, "end"));
    // The uploaded document is searchable under its upload path.
    let q = json!({"query": "aurora borealis tripod", "mode": "bm25", "k": 1});
    assert_eq!(
        s.post("/v1/search", &q).body["hits"][0]["document_id"],
        "notes/aurora.md"
    );

    // Server-side paths, as `situate ingest` takes them.
    let root = many_documents(tmp.path(), "archive", 5);
    let job = s.post(
        "/v1/jobs",
        &json!({"kind": "ingest", "paths": [root], "meta": ["team=ops"]}),
    );
    assert_eq!(job.status, 202, "{:#}", job.body);
    let done = s.wait_job(job.body["id"].as_str().expect("id"));
    assert_eq!(
        (
            done["state"].as_str(),
            done["result"]["report"]["added"].as_u64()
        ),
        (Some("succeeded"), Some(5))
    );
    let filtered = s.post(
        "/v1/search",
        &json!({"query": "lighthouse keeper", "k": 10, "filter": {"meta": ["team=ops"]}}),
    );
    assert_eq!(filtered.body["hits"].as_array().expect("hits").len(), 5);

    // Deletion is a job; a document that is not there is a 404 at once.
    assert_problem(
        &s.send("DELETE", "/v1/documents/no/such.md", &[], None),
        404,
        "not-found",
    );
    let del = s.send("DELETE", "/v1/documents/notes/aurora.md", &[], None);
    assert_eq!(del.status, 202, "{:#}", del.body);
    let done = s.wait_job(del.body["id"].as_str().expect("id"));
    assert_eq!(done["state"], "succeeded", "{done:#}");
    assert_problem(&s.get("/v1/documents/notes/aurora.md"), 404, "not-found");
    assert_ne!(
        s.post("/v1/search", &q).body["hits"][0]["document_id"],
        "notes/aurora.md"
    );

    // A rebuild, then the index agrees with the store.
    let job = s.post("/v1/jobs", &json!({"kind": "rebuild"}));
    let done = s.wait_job(job.body["id"].as_str().expect("id"));
    assert_eq!(done["state"], "succeeded", "{done:#}");
    assert!(done["result"]["chunks"].as_u64().expect("chunks") > 5);
    stats_are_consistent(&index);
    let listed = s.get("/v1/jobs");
    assert_eq!(listed.body["jobs"].as_array().expect("jobs").len(), 4);

    // Bad jobs.
    assert_problem(
        &s.post("/v1/jobs", &json!({"kind": "ingest"})),
        400,
        "invalid-request",
    );
    assert_problem(
        &s.post("/v1/jobs", &json!({"kind": "launch"})),
        400,
        "invalid-request",
    );
    assert_problem(
        &s.post(
            "/v1/jobs",
            &json!({"kind": "ingest", "files": [{"path": "../escape.md", "text": "x"}]}),
        ),
        400,
        "invalid-request",
    );
    assert_problem(&s.get("/v1/jobs/nope-1"), 404, "not-found");
    // A job that fails says why.
    let job = s.post(
        "/v1/jobs",
        &json!({"kind": "ingest", "paths": ["/no/such/dir"], "context": "psychic"}),
    );
    let done = s.wait_job(job.body["id"].as_str().expect("id"));
    assert_eq!(
        (done["state"].as_str(), done["error"]["code"].as_str()),
        (Some("failed"), Some("invalid-request")),
        "{done:#}"
    );
}

#[test]
fn searches_answer_during_an_ingest_job_and_a_cancelled_job_finishes_when_run_again() {
    let (tmp, index) = indexed_corpus("hash:64");
    let before = stats_are_consistent(&index)["store"]["documents"]
        .as_u64()
        .expect("docs");
    let root = many_documents(tmp.path(), "archive", 1500);
    let s = Server::start(&index, &[], &[]);
    let spec = json!({"kind": "ingest", "paths": [root], "batch": 25});
    let job = s.post("/v1/jobs", &spec);
    let id = job.body["id"].as_str().expect("id").to_string();
    // Searches answer while the job writes: the status says running before and after.
    let mut answered_while_running = 0;
    loop {
        let st = s.get(&format!("/v1/jobs/{id}")).body;
        if st["state"] != "running" {
            if st["state"] == "queued" {
                continue;
            }
            break;
        }
        let r = s.post(
            "/v1/search",
            &json!({"query": "lighthouse keeper entry", "k": 3}),
        );
        assert_eq!(r.status, 200, "{:#}", r.body);
        let st = s.get(&format!("/v1/jobs/{id}")).body;
        if st["state"] == "running" {
            answered_while_running += 1;
        }
        if st["commits"].as_u64().unwrap_or(0) >= 3 && answered_while_running >= 2 {
            // Enough seen: cancel it.
            let c = s.post(&format!("/v1/jobs/{id}/cancel"), &json!({}));
            assert_eq!(c.status, 200, "{:#}", c.body);
            assert_eq!(c.body["cancel_requested"], true);
            break;
        }
    }
    assert!(
        answered_while_running >= 2,
        "searched {answered_while_running} times during the job"
    );
    let done = s.wait_job(&id);
    assert_eq!(done["state"], "cancelled", "{done:#}");
    let partial = stats_are_consistent(&index)["store"]["documents"]
        .as_u64()
        .expect("docs");
    assert!(partial > before && partial < before + 1500, "{partial}");
    // The same job again finishes the work, nothing duplicated.
    let job = s.post("/v1/jobs", &spec);
    let done = s.wait_job(job.body["id"].as_str().expect("id"));
    assert_eq!(done["state"], "succeeded", "{done:#}");
    assert_eq!(
        done["result"]["report"]["added"].as_u64(),
        Some(before + 1500 - partial)
    );
    let stats = stats_are_consistent(&index);
    assert_eq!(stats["store"]["documents"].as_u64(), Some(before + 1500));
    // Cancelling a finished job changes nothing.
    let c = s.post(
        &format!("/v1/jobs/{}/cancel", done["id"].as_str().expect("id")),
        &json!({}),
    );
    assert_eq!(c.body["state"], "succeeded");
}

#[test]
fn a_server_killed_mid_ingest_loses_nothing_when_the_job_is_run_again() {
    let (tmp, index) = indexed_corpus("hash:64");
    let before = stats_are_consistent(&index)["store"]["documents"]
        .as_u64()
        .expect("docs");
    let root = many_documents(tmp.path(), "archive", 1200);
    let spec = json!({"kind": "ingest", "paths": [root], "batch": 20});
    let mut s = Server::start(&index, &[], &[]);
    let job = s.post("/v1/jobs", &spec);
    let id = job.body["id"].as_str().expect("id").to_string();
    loop {
        let st = s.get(&format!("/v1/jobs/{id}")).body;
        assert_ne!(
            st["state"], "succeeded",
            "the ingest ended before the kill; make it longer"
        );
        if st["commits"].as_u64().unwrap_or(0) >= 2 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // SIGKILL: no shutdown, no cleanup.
    s.child.kill().expect("kill -9");
    s.child.wait().expect("reaped");
    let s = Server::start(&index, &[], &[]);
    let job = s.post("/v1/jobs", &spec);
    let done = s.wait_job(job.body["id"].as_str().expect("id"));
    assert_eq!(done["state"], "succeeded", "{done:#}");
    let stats = stats_are_consistent(&index);
    assert_eq!(
        stats["store"]["documents"].as_u64(),
        Some(before + 1200),
        "{stats:#}"
    );
    let page = s.get("/v1/documents?limit=500").body;
    assert_eq!(page["documents"].as_array().expect("docs").len(), 500);
    let hits = s.post(
        "/v1/search",
        &json!({"query": "entry 1199", "mode": "bm25", "k": 1}),
    );
    assert_eq!(
        hits.body["hits"][0]["document_id"], "archive/doc-01199.txt",
        "{:#}",
        hits.body
    );
}

#[test]
fn contexts_are_written_by_a_job_listed_for_review_and_decided_by_a_person() {
    use situate_http::fake::{FakeServer, Reply};
    let tmp = tempfile::tempdir().expect("tmp");
    let docs = tmp.path().join("docs");
    std::fs::create_dir_all(&docs).expect("mkdir");
    for t in ["harbour", "orchard"] {
        let text: String = (0..3)
            .map(|p| format!("Paragraph {p} about the {t}: the {t} is described here in some detail, with enough words to make a chunk of its own.\n\n"))
            .collect();
        std::fs::write(docs.join(format!("{t}.txt")), text).expect("w");
    }
    let index = tmp.path().join("idx");
    run(
        situate(&index).arg("ingest").arg(&docs).args([
            "--context",
            "none",
            "--embedder",
            "none",
            "--max-tokens",
            "40",
            "--overlap",
            "0",
        ]),
        0,
    );
    let server = FakeServer::start(|_, _| {
        Reply::json(json!({
            "content": [{"type": "text", "text": "From the description of the harbour and the orchard."}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 30, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 9}
        }))
    })
    .expect("server");
    let s = Server::start(&index, &[], &[("ANTHROPIC_API_KEY", "k")]);
    let pending = s.get("/v1/contexts?status=pending&limit=100");
    let n = pending.body["contexts"].as_array().expect("contexts").len();
    assert!(n >= 6, "{:#}", pending.body);
    let llm = format!(
        "anthropic:claude-3-5-haiku-latest?base_url={}&retries=1",
        server.url()
    );
    let job = s.post(
        "/v1/jobs",
        &json!({"kind": "contextualize", "statuses": ["pending"], "llm": llm}),
    );
    assert_eq!(job.status, 202, "{:#}", job.body);
    let done = s.wait_job(job.body["id"].as_str().expect("id"));
    assert_eq!(done["state"], "succeeded", "{done:#}");
    assert_eq!(
        done["progress"]["contexts"]["done"].as_u64(),
        Some(n as u64)
    );
    assert_eq!(done["tokens"]["output_tokens"].as_u64(), Some(9 * n as u64));
    assert!(done["dollars"].is_number(), "{done:#}");
    assert!(server.calls() >= n);
    // Nothing pending any more; the queue pages through what the LLM wrote.
    assert!(
        s.get("/v1/contexts?status=pending").body["contexts"]
            .as_array()
            .expect("c")
            .is_empty()
    );
    let mut listed = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = s.get(&format!(
            "/v1/contexts?status=verified,rejected,generated&limit=4&cursor={cursor}"
        ));
        assert_eq!(page.status, 200, "{:#}", page.body);
        for c in page.body["contexts"].as_array().expect("contexts") {
            assert!(c["generated_context"].is_string() && c["original_text"].is_string());
            listed.push(c["chunk_id"].as_str().expect("id").to_string());
        }
        match page.body["next_cursor"].as_str() {
            Some(c) => cursor = c.to_string(),
            None => break,
        }
    }
    assert_eq!(listed.len(), n);
    let path = |id: &str| format!("/v1/contexts/{}", id.replace('#', "%23"));

    // Decisions: with the writer free, the answer is the card as it now is.
    let edit = s.post(
        &path(&listed[0]),
        &json!({"decision": "edit", "text": "The harbour chapter of the guide."}),
    );
    assert_eq!(edit.status, 200, "{:#}", edit.body);
    assert_eq!(
        edit.body["card"]["generated_context"],
        "The harbour chapter of the guide."
    );
    assert_eq!(edit.body["card"]["context_status"], "verified");
    assert_eq!(edit.body["card"]["context_provenance"]["method"], "manual");
    let reject = s.post(&path(&listed[1]), &json!({"decision": "reject"}));
    assert_eq!(
        reject.body["card"]["context_status"], "rejected",
        "{:#}",
        reject.body
    );
    let accept = s.post(&path(&listed[1]), &json!({"decision": "accept"}));
    assert_eq!(
        accept.body["card"]["context_status"], "verified",
        "{:#}",
        accept.body
    );
    // The same as the CLI sees.
    let shown = json(situate(&index).args(["show", &listed[0]]), 0);
    assert_eq!(shown["context_provenance"]["method"], "manual");
    // A search finds the edited context at once.
    let hit = s.post(
        "/v1/search",
        &json!({"query": "harbour chapter guide", "k": 1}),
    );
    assert_eq!(
        hit.body["hits"][0]["chunk_id"],
        listed[0].as_str(),
        "{:#}",
        hit.body
    );
    // Bad decisions.
    assert_problem(
        &s.post(&path(&listed[0]), &json!({"decision": "maybe"})),
        400,
        "invalid-request",
    );
    assert_problem(
        &s.post(&path(&listed[0]), &json!({"decision": "edit"})),
        400,
        "invalid-request",
    );
    assert_problem(
        &s.post(
            &path(&listed[0]),
            &json!({"decision": "accept", "text": "x"}),
        ),
        400,
        "invalid-request",
    );
    assert_problem(
        &s.post(&path("no-such-chunk"), &json!({"decision": "accept"})),
        404,
        "not-found",
    );
    assert_problem(&s.get("/v1/contexts?status=sleepy"), 400, "invalid-request");
    assert_problem(&s.get("/v1/contexts?cursor=00"), 400, "invalid-request");
    assert_problem(
        &s.post(
            "/v1/jobs",
            &json!({"kind": "contextualize", "context": "structural"}),
        ),
        400,
        "invalid-request",
    );
}

#[test]
fn an_eval_job_writes_a_report_the_service_lists_with_its_plot() {
    let (tmp, index) = indexed_corpus("hash:64");
    let evals = tmp.path().join("evals");
    let s = Server::start(&index, &["--evals", evals.to_str().expect("utf-8")], &[]);
    assert_eq!(s.get("/v1/evals").body["evals"], json!([]));
    let job = s.post(
        "/v1/jobs",
        &json!({"kind": "eval", "dataset": fixtures().join("ranked"), "name": "ranked-1",
                "configs": ["bm25+none"]}),
    );
    assert_eq!(job.status, 202, "{:#}", job.body);
    let done = s.wait_job(job.body["id"].as_str().expect("id"));
    assert_eq!(done["state"], "succeeded", "{done:#}");
    assert!(
        done["progress"]["queries"]["done"]
            .as_u64()
            .expect("queries")
            >= 3
    );
    // The same numbers as `situate eval` (fixtures/ranked/README.md: MRR@10 0.5).
    let list = s.get("/v1/evals").body;
    assert_eq!(list["evals"][0]["id"], "ranked-1", "{list:#}");
    assert_eq!(
        list["evals"][0]["configurations"],
        json!(["bm25+none+none"])
    );
    let r = s.get("/v1/evals/ranked-1");
    assert_eq!(r.status, 200, "{:#}", r.body);
    let mrr = r.body["report"]["configurations"][0]["metrics"]["mrr@10"]
        .as_f64()
        .expect("mrr");
    assert!((mrr - 0.5).abs() < 1e-9, "{mrr}");
    assert!(
        r.body["table"]
            .as_str()
            .expect("table")
            .contains("bm25+none+none")
    );
    assert_eq!(r.body["plot"], "/v1/evals/ranked-1/failure.svg");
    let svg = s.rt.block_on(async {
        let r = s
            .client
            .get(format!("{}/v1/evals/ranked-1/failure.svg", s.url))
            .send()
            .await
            .expect("svg");
        let ct = r.headers()["content-type"]
            .to_str()
            .expect("ct")
            .to_string();
        (ct, r.text().await.expect("text"))
    });
    assert_eq!(svg.0, "image/svg+xml");
    assert!(svg.1.contains("<svg"));
    // Names that would leave the folder, and reports that do not exist.
    assert_problem(&s.get("/v1/evals/..%2Findex"), 400, "invalid-request");
    assert_problem(&s.get("/v1/evals/nope"), 404, "not-found");
    assert_problem(
        &s.post(
            "/v1/jobs",
            &json!({"kind": "eval", "dataset": "x", "name": "../up"}),
        ),
        400,
        "invalid-request",
    );
    let bad = s.post(
        "/v1/jobs",
        &json!({"kind": "eval", "dataset": "/no/such/set", "name": "x"}),
    );
    let done = s.wait_job(bad.body["id"].as_str().expect("id"));
    assert_eq!(done["state"], "failed", "{done:#}");
}

#[test]
fn schemathesis_finds_no_server_error_and_no_answer_outside_the_openapi_document() {
    let (_tmp, index) = indexed_corpus("hash:64");
    let python = test_python();
    let st = Path::new(&python)
        .parent()
        .expect("the venv's bin")
        .join("schemathesis");
    // The document is served as the code generates it.
    let read = "read-key-for-schemathesis-1";
    let s = Server::start(
        &index,
        &[],
        &[
            ("SITUATE_READ_KEYS", read),
            ("SITUATE_ADMIN_KEYS", "admin-key-for-schemathesis"),
        ],
    );
    let served = s.get("/openapi.json");
    assert_eq!(served.status, 200);
    assert_eq!(served.body["openapi"], "3.0.3");
    // Every operation the document describes is a route the service has, with that method
    // (the document's route table and the router cannot drift apart unseen).
    let auth = format!("Bearer {read}");
    let paths = served.body["paths"].as_object().expect("paths");
    for (path, ops) in paths {
        let concrete: String = path
            .split('/')
            .map(|p| {
                if p.starts_with('{') {
                    "no-such-thing"
                } else {
                    p
                }
            })
            .collect::<Vec<_>>()
            .join("/");
        for method in ops.as_object().expect("operations").keys() {
            let body = (method == "post").then(|| json!({}));
            let r = s.send(
                &method.to_uppercase(),
                &concrete,
                &[("authorization", &auth)],
                body.as_ref(),
            );
            for code in ["route-not-found", "method-not-allowed"] {
                assert_ne!(r.body["code"], code, "{method} {path}: {}", r.body);
            }
            assert_ne!(r.status, 405, "{method} {path}");
        }
    }
    // A read key: every read route is fuzzed; the write routes answer their (documented)
    // refusal. Writes with random bodies (an ingest of random paths) are not for a fuzzer.
    let out = std::process::Command::new(st)
        .arg("run")
        .arg(format!("{}/openapi.json", s.url))
        .args([
            "--checks",
            "not_a_server_error,response_schema_conformance",
            "--header",
            &format!("Authorization: Bearer {read}"),
            "--max-examples",
            "25",
            "--workers",
            "1",
            "--seed",
            "20261202",
            "--suppress-health-check=filter_too_much",
            "--no-color",
        ])
        .output()
        .expect("schemathesis runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(" passed") && !text.contains("Failures:") && !text.contains("Errors:"),
        "{text}"
    );
}

#[test]
fn cors_is_off_unless_origins_are_configured() {
    let (_tmp, index) = indexed_corpus("hash:64");
    let body = json!({"query": "lens"});
    let app = "https://app.example";
    let s = Server::start(&index, &[], &[]);
    let r = s.send("POST", "/v1/search", &[("origin", app)], Some(&body));
    assert_problem(&r, 403, "origin-not-allowed");
    assert!(r.headers.get("access-control-allow-origin").is_none());
    let ok = s.post("/v1/search", &body);
    assert!(ok.headers.get("access-control-allow-origin").is_none());
    drop(s);

    let key = "admin-key-for-cors-test-01";
    let s = Server::start(
        &index,
        &["--cors-origin", app],
        &[("SITUATE_ADMIN_KEYS", key)],
    );
    // The browser's preflight carries no key; it is answered before the guard.
    let pre = s.send(
        "OPTIONS",
        "/v1/search",
        &[
            ("origin", app),
            ("access-control-request-method", "POST"),
            (
                "access-control-request-headers",
                "authorization,content-type",
            ),
        ],
        None,
    );
    assert_eq!(pre.status, 200);
    assert_eq!(pre.headers["access-control-allow-origin"], app);
    let methods = pre.headers["access-control-allow-methods"]
        .to_str()
        .expect("methods");
    assert!(methods.contains("POST"), "{methods}");
    let bearer = format!("Bearer {key}");
    let r = s.send(
        "POST",
        "/v1/search",
        &[("origin", app), ("authorization", &bearer)],
        Some(&body),
    );
    assert_eq!(r.status, 200, "{:#}", r.body);
    assert_eq!(r.headers["access-control-allow-origin"], app);
    // Another origin still cannot, key or not.
    let other = s.send(
        "POST",
        "/v1/search",
        &[
            ("origin", "https://other.example"),
            ("authorization", &bearer),
        ],
        Some(&body),
    );
    assert_problem(&other, 403, "origin-not-allowed");
    assert!(other.headers.get("access-control-allow-origin").is_none());
}
