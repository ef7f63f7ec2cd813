//! `situate store`: the shared store on a real PostgreSQL server with pgvector
//! (`SITUATE_TEST_PG_URL`; `scripts/test.sh` starts one from the pinned wheel).

use crate::{json, run, situate};
use postgres::{Client, NoTls};

/// A fresh database on the test server: its URL, and the server's URL to drop it with.
pub(crate) struct Database {
    server: String,
    name: String,
    pub(crate) url: String,
}

impl Database {
    pub(crate) fn new(tag: &str) -> Database {
        let server = std::env::var("SITUATE_TEST_PG_URL").unwrap_or_else(|_| {
            panic!(
                "SITUATE_TEST_PG_URL is not set: scripts/test.sh starts a PostgreSQL server (scripts/postgres.sh) and sets it"
            )
        });
        let name = format!("cli_{tag}_{}", std::process::id());
        let mut c = Client::connect(&server, NoTls).expect("the test server");
        // One statement each: CREATE DATABASE cannot run in a multi-statement batch.
        for sql in [
            format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            format!("CREATE DATABASE {name}"),
        ] {
            c.batch_execute(&sql).expect("a database");
        }
        let url = format!("{}/{name}", server.rsplit_once('/').expect("a database").0);
        Database { server, name, url }
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&self.server, NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

#[test]
fn store_migrate_creates_the_shared_store_once_from_a_flag_or_the_settings() {
    let db = Database::new("migrate");
    let tmp = tempfile::tempdir().expect("tmp");
    let index = tmp.path().join("idx");
    let out = run(
        situate(&index).args(["store", "migrate", "--store", &db.url]),
        0,
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.starts_with("created the situate store at situate@"),
        "{said}"
    );
    // Again, from `[store] url` in the settings beside the index: already current.
    std::fs::write(
        tmp.path().join("situate.toml"),
        format!("[store]\nurl = \"{}\"\n", db.url),
    )
    .expect("settings");
    let v = json(situate(&index).args(["store", "migrate"]), 0);
    assert_eq!(v["outcome"], "current", "{v:#}");
    assert_eq!(v["format_version"], 2);
    assert!(
        v["postgres"].as_str().is_some_and(|p| p.starts_with("18")),
        "{v:#}"
    );
    assert!(
        v["pgvector"].as_str().is_some_and(|p| !p.is_empty()),
        "{v:#}"
    );
    assert!(
        v["store"].as_str().is_some_and(|s| s.ends_with(&db.name)),
        "{v:#}"
    );
    let mut c = Client::connect(&db.url, NoTls).expect("connect");
    let tables: i64 = c
        .query_one(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'situate'",
            &[],
        )
        .expect("count")
        .get(0);
    assert_eq!(tables, 7);
}

#[test]
fn store_migrate_refuses_bad_input_with_a_clear_error_and_writes_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let index = tmp.path().join("idx");
    let stderr = |args: &[&str]| {
        let out = run(situate(&index).args(args), 1);
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // No store named.
    let err = stderr(&["store", "migrate"]);
    assert!(err.contains("no store: give --store postgres://"), "{err}");
    // Not a PostgreSQL URL.
    let err = stderr(&["store", "migrate", "--store", "mysql://u@127.0.0.1/db"]);
    assert!(err.contains("expected postgres://"), "{err}");
    // A server that is down: named, its password never shown.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let down = format!("postgres://situate:hunter2@127.0.0.1:{port}/db");
    let err = stderr(&["store", "migrate", "--store", &down]);
    assert!(
        err.contains(&format!("situate@127.0.0.1:{port}/db: cannot connect")),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
    // A store of another format: refused, left as it was.
    let db = Database::new("version");
    run(
        situate(&index).args(["store", "migrate", "--store", &db.url]),
        0,
    );
    let mut c = Client::connect(&db.url, NoTls).expect("connect");
    // A store of format 1 (before cards had a kind and a place) is upgraded in place.
    c.batch_execute(
        "ALTER TABLE situate.chunks DROP COLUMN card_kind, DROP COLUMN place;
         UPDATE situate.meta SET value = '1' WHERE key = 'format_version'",
    )
    .expect("format 1");
    let v = json(
        situate(&index).args(["store", "migrate", "--store", &db.url]),
        0,
    );
    assert_eq!(v["outcome"], "upgraded", "{v:#}");
    assert_eq!(v["format_version"], 2);
    let columns: i64 = c
        .query_one(
            "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'situate'
             AND table_name = 'chunks' AND column_name IN ('card_kind', 'place')",
            &[],
        )
        .expect("columns")
        .get(0);
    assert_eq!(columns, 2);
    c.execute(
        "UPDATE situate.meta SET value = '0' WHERE key = 'format_version'",
        &[],
    )
    .expect("another version");
    let err = stderr(&["store", "migrate", "--store", &db.url]);
    assert!(
        err.contains("is of format 0, this build reads format 2; nothing was written"),
        "{err}"
    );
    let v: String = c
        .query_one(
            "SELECT value FROM situate.meta WHERE key = 'format_version'",
            &[],
        )
        .expect("version")
        .get(0);
    assert_eq!(v, "0");
}

/// The chunk part of an Anthropic request (the second content block; empty for a request
/// that carries no chunk).
pub(crate) fn chunk_of(body: &serde_json::Value) -> String {
    body["messages"][0]["content"][1]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A fake Anthropic server that answers every request with the same context (30 input and
/// 9 output tokens), a request that carries a chunk after `delay`.
pub(crate) fn fake_anthropic(delay: std::time::Duration) -> situate_http::fake::FakeServer {
    use situate_http::fake::{FakeServer, Reply};
    FakeServer::start(move |req, _| {
        Reply::json(serde_json::json!({
            "content": [{"type": "text", "text": "This passage belongs to the document described."}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 30, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 9}
        }))
        .delay(if chunk_of(&req.json()).is_empty() { std::time::Duration::ZERO } else { delay })
    })
    .expect("a fake Anthropic server")
}

/// `n` documents of four paragraphs each (a chunk per paragraph at `--max-tokens 40`).
pub(crate) fn write_corpus(dir: &std::path::Path, n: usize, tag: &str) {
    std::fs::create_dir_all(dir).expect("mkdir");
    for d in 0..n {
        let text: String = (0..4)
            .map(|p| format!("Paragraph {p} of {tag} document {d}: the {tag} topic number {d} is described here in some detail, with words enough for a chunk.\n\n"))
            .collect();
        std::fs::write(dir.join(format!("{tag}-{d:02}.txt")), text).expect("write");
    }
}

/// A small deterministic generator (no test randomness that cannot be replayed: the seed
/// is printed on failure).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

#[test]
fn four_workers_killed_ten_times_pay_for_each_context_once() {
    use std::time::{Duration, Instant};
    let db = Database::new("workers");
    let tmp = tempfile::tempdir().expect("tmp");
    let index = tmp.path().join("idx");
    let docs = tmp.path().join("docs");
    write_corpus(&docs, 20, "kill");
    let server = fake_anthropic(Duration::from_millis(120));
    let llm = format!(
        "anthropic:claude-test?base_url={}&concurrency=1&retries=2",
        server.url()
    );
    run(
        situate(&index).args(["store", "migrate", "--store", &db.url]),
        0,
    );
    // The ingest only reads, chunks and queues: no model call.
    let v = json(
        situate(&index)
            .args([
                "ingest",
                "--store",
                &db.url,
                "--context",
                "llm",
                "--llm",
                &llm,
            ])
            .args(["--max-tokens", "40", "--overlap", "0"])
            .arg(&docs),
        0,
    );
    let chunks = v["report"]["chunks"].as_u64().expect("chunks");
    assert_eq!(chunks, 80, "{v:#}");
    assert_eq!(v["report"]["queued_contexts"], 80, "{v:#}");
    assert_eq!(server.calls(), 0, "the ingest called the model");

    // Workers take the method and the LLM the ingest recorded.
    let spawn = |n: usize| {
        situate(&index)
            .env("ANTHROPIC_API_KEY", "k")
            .env_remove("ANTHROPIC_BASE_URL")
            .args(["worker", "--store", &db.url, "--role", "contextualize"])
            .args(["--lease", "2", "--batch", "2", "--until-idle", "--quiet"])
            .args(["--name", &format!("w{n}")])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn a worker")
    };
    let mut workers: Vec<std::process::Child> = (0..4).map(spawn).collect();
    let seed = std::process::id() as u64;
    let mut rng = Lcg(seed);
    let mut kills = 0;
    let mut spawned = 4;
    let started = Instant::now();
    while kills < 10 && started.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(150 + rng.below(250)));
        let i = rng.below(workers.len() as u64) as usize;
        if workers[i].try_wait().expect("wait").is_some() {
            // It finished (nothing left for it): the queue is nearly done.
            break;
        }
        workers[i].kill().expect("SIGKILL");
        workers[i].wait().expect("reaped");
        kills += 1;
        workers[i] = spawn(spawned);
        spawned += 1;
    }
    assert!(
        kills >= 5,
        "only {kills} kills happened before the work ran out (seed {seed})"
    );
    for w in workers {
        finish_worker(w, &format!("seed {seed}"));
    }
    // Every card has its context, written once.
    let status = json(situate(&index).args(["status", "--store", &db.url]), 0);
    assert_eq!(
        status["context_status"],
        serde_json::json!([["verified", 80]]),
        "{status:#}"
    );
    let work = &status["work"];
    let role = |name: &str| {
        work.as_array()
            .and_then(|w| w.iter().find(|r| r["role"] == name))
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(role("contextualize")["queued"], 0, "{status:#}");
    assert_eq!(role("contextualize")["done"], 80, "{status:#}");
    assert_eq!(
        role("embed")["queued"],
        80,
        "each card's embedding queued: {status:#}"
    );
    assert_eq!(status["contexts_cached"], 80, "{status:#}");
    let mut c = Client::connect(&db.url, NoTls).expect("connect");
    let writes: Vec<(i64, i64)> = c
        .query(
            "SELECT card, count(*) FROM situate.changes WHERE card IS NOT NULL GROUP BY card",
            &[],
        )
        .expect("changes")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(writes.len(), 80, "every card's context written");
    assert!(
        writes.iter().all(|(_, n)| *n == 1),
        "a context written twice: {writes:?}"
    );
    // Paid once: a chunk asked for again only when a kill took the worker holding it
    // before the answer reached the shared cache (at most a claim, 2 items, per kill).
    let mut asked: std::collections::HashMap<String, usize> = Default::default();
    for r in server.requests() {
        let chunk = chunk_of(&r.json());
        if !chunk.is_empty() {
            *asked.entry(chunk).or_default() += 1;
        }
    }
    assert_eq!(asked.len(), 80, "every chunk was asked for");
    let again: usize = asked.values().map(|n| n - 1).sum();
    eprintln!("{kills} kills, {again} contexts asked for again, seed {seed}");
    assert!(
        again <= 2 * kills,
        "{again} contexts paid twice after {kills} kills (seed {seed})"
    );
}

/// Waits (up to three minutes) for a worker spawned with its stderr piped to exit, fails
/// the test unless it succeeded, and returns what it logged. `what` goes in the failures.
fn finish_worker(mut w: std::process::Child, what: &str) -> String {
    use std::time::{Duration, Instant};
    let deadline = Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(s) = w.try_wait().expect("wait") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "a worker did not finish ({what})"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    if let Some(mut e) = w.stderr.take() {
        use std::io::Read as _;
        let _ = e.read_to_string(&mut err);
    }
    assert!(status.success(), "a worker failed ({what}): {err}");
    err
}

/// Words for generated documents: varied enough that BM25 scores rarely tie.
const WORDS: &[&str] = &[
    "harbour", "orchard", "glacier", "library", "lantern", "meadow", "copper", "violin", "furnace",
    "compass", "basalt", "juniper", "saffron", "quarry", "tundra", "marble", "beacon", "canyon",
    "falcon", "garnet", "hollow", "ivory", "jasper", "kelp", "lagoon", "mortar", "nectar", "oxide",
    "pylon", "quartz", "rampart", "sextant", "timber", "umber", "vessel", "walnut", "yarrow",
    "zephyr", "anchor", "bramble", "cinder", "dynamo", "ember", "fjord", "gravel", "heron",
    "inlet", "jetty", "kiln", "lichen", "mantle", "nettle", "osprey", "pewter", "quiver", "reed",
    "summit", "thistle", "valley", "willow",
];

/// `docs` documents of `paras` paragraphs of generated words under `dir`.
fn write_words(dir: &std::path::Path, docs: usize, paras: usize, rng: &mut Lcg) {
    std::fs::create_dir_all(dir).expect("mkdir");
    for d in 0..docs {
        let mut text = String::new();
        for _ in 0..paras {
            let n = 18 + rng.below(20) as usize;
            let words: Vec<&str> = (0..n)
                .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
                .collect();
            text.push_str(&words.join(" "));
            text.push_str(".\n\n");
        }
        std::fs::write(dir.join(format!("doc-{d:02}.txt")), text).expect("write");
    }
}

/// Hits as (chunk id, score to 5 places), equal scores in chunk-id order (an order among
/// equals is not part of a ranking).
fn ranking(v: &serde_json::Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = v["hits"]
        .as_array()
        .unwrap_or_else(|| panic!("no hits in {v:#}"))
        .iter()
        .map(|h| {
            (
                h["chunk_id"].as_str().expect("id").to_string(),
                format!("{:.5}", h["score"].as_f64().expect("score")),
            )
        })
        .collect();
    out.sort_by(|a, b| {
        b.1.parse::<f64>()
            .unwrap_or(0.0)
            .total_cmp(&a.1.parse::<f64>().unwrap_or(0.0))
            .then(a.0.cmp(&b.0))
    });
    out
}

#[test]
fn two_query_nodes_fed_during_an_ingest_return_the_embedded_engines_rankings() {
    use crate::serve::Server;
    let db = Database::new("nodes");
    let tmp = tempfile::tempdir().expect("tmp");
    let base = tmp.path();
    let mut rng = Lcg(7);
    let parts = ["alpha", "beta", "gamma"];
    for p in parts {
        write_words(&base.join(p), 8, 5, &mut rng);
    }
    let index = base.join("idx");
    run(
        situate(&index).args(["store", "migrate", "--store", &db.url]),
        0,
    );
    let chunking = ["--max-tokens", "40", "--overlap", "0"];
    // The first part is in the store before the nodes start (their snapshot); the others
    // arrive while they follow.
    let first = json(
        situate(&index)
            .args(["ingest", "--store", &db.url])
            .args(chunking)
            .arg(parts[0]),
        0,
    );
    assert!(
        first["report"]["chunks"].as_u64().unwrap_or(0) > 20,
        "{first:#}"
    );
    let node = |name: &str| {
        Server::start(
            &base.join(name),
            &["--store", &db.url, "--node-embedder", "hash:64"],
            &[],
        )
    };
    let (a, b) = (node("node-a"), node("node-b"));
    let mut position = 0;
    for p in &parts[1..] {
        let v = json(
            situate(&index)
                .args(["ingest", "--store", &db.url])
                .args(chunking)
                .arg(p),
            0,
        );
        position = v["report"]["position"].as_u64().expect("position");
        // Searching while the nodes catch up: answers, never errors.
        for s in [&a, &b] {
            let r = s.post(
                "/v1/search",
                &serde_json::json!({"query": "harbour glacier"}),
            );
            assert_eq!(r.status, 200, "{:#}", r.body);
        }
    }
    // An embed worker fills the store's embedding cache (the nodes take vectors from it
    // when it has them, and embed the rest themselves: the same vectors either way).
    run(
        situate(&index).args([
            "worker",
            "--store",
            &db.url,
            "--role",
            "embed",
            "--embedder",
            "hash:64",
            "--until-idle",
            "--quiet",
        ]),
        0,
    );
    // The embedded engine on the same corpus, ingested the same way.
    let embedded = base.join("embedded");
    for p in parts {
        run(
            situate(&embedded)
                .args(["ingest", "--embedder", "hash:64"])
                .args(chunking)
                .arg(p),
            0,
        );
    }
    let queries = [
        "harbour glacier",
        "copper violin furnace",
        "quiet juniper meadow",
        "summit of the basalt canyon",
        "osprey heron falcon",
        "walnut timber kiln",
    ];
    for mode in ["bm25", "vector", "hybrid"] {
        for q in queries {
            let want = json(
                situate(&embedded).args(["search", q, "-k", "10", "--mode", mode]),
                0,
            );
            for (name, s) in [("a", &a), ("b", &b)] {
                let got = s.post(
                    "/v1/search",
                    &serde_json::json!({"query": q, "k": 10, "mode": mode, "after": position}),
                );
                assert_eq!(got.status, 200, "{:#}", got.body);
                assert_eq!(
                    ranking(&got.body),
                    ranking(&want),
                    "node {name}, {mode}, {q:?}"
                );
            }
        }
    }
    // A node's index is the feed's copy: jobs that would write to it are refused.
    let r = a.post("/v1/jobs", &serde_json::json!({"kind": "rebuild"}));
    assert_eq!(r.status, 409, "{:#}", r.body);
    assert_eq!(
        r.body["type"], "urn:situate:problem:query-node",
        "{:#}",
        r.body
    );
    // Each node reports the position it has applied.
    for s in [&a, &b] {
        let info = s.get("/v1/info").body;
        assert!(
            info["store"]["position"].as_u64().unwrap_or(0) >= position,
            "{info:#}"
        );
        assert_eq!(
            info["stats"]["store"]["chunks"],
            json(situate(&embedded).arg("stats"), 0)["stats"]["store"]["chunks"]
        );
    }
    // `search --store` is a query node too (a directory of its own), reading its writes.
    let cli = json(
        situate(&base.join("node-cli")).args([
            "search",
            "copper violin furnace",
            "-k",
            "10",
            "--mode",
            "hybrid",
            "--store",
            &db.url,
            "--after",
            &position.to_string(),
            "--node-embedder",
            "hash:64",
        ]),
        0,
    );
    let want = json(
        situate(&embedded).args([
            "search",
            "copper violin furnace",
            "-k",
            "10",
            "--mode",
            "hybrid",
        ]),
        0,
    );
    assert_eq!(ranking(&cli), ranking(&want));
    // The vector leg served by pgvector (the HNSW index the embed worker made) finds what
    // the node's own vector leg finds.
    let pg = json(
        situate(&base.join("node-cli")).args([
            "search",
            "copper violin furnace",
            "-k",
            "10",
            "--store",
            &db.url,
            "--pgvector",
        ]),
        0,
    );
    let own = json(
        situate(&embedded).args([
            "search",
            "copper violin furnace",
            "-k",
            "10",
            "--mode",
            "vector",
        ]),
        0,
    );
    let ids = |v: &serde_json::Value| {
        let mut ids: Vec<String> = v["hits"]
            .as_array()
            .expect("hits")
            .iter()
            .map(|h| h["chunk_id"].as_str().expect("id").to_string())
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(&pg).len(), 10, "{pg:#}");
    assert_eq!(
        ids(&pg),
        ids(&own),
        "pgvector against the node's vector leg"
    );
    let mut c = Client::connect(&db.url, NoTls).expect("connect");
    // The index serves the leg's query shape (on so small a table the planner would
    // rather sort; without sorting, only the HNSW index gives the order).
    let mut tx = c.transaction().expect("tx");
    tx.batch_execute("SET LOCAL enable_sort = off")
        .expect("set");
    let plan: Vec<String> = tx
        .query(
            "EXPLAIN SELECT text_hash FROM situate.embeddings WHERE model = 'hash:64'
             ORDER BY embedding::vector(64) <=> array_fill(0.1, ARRAY[64])::vector(64) LIMIT 10",
            &[],
        )
        .expect("explain")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        plan.iter()
            .any(|l| l.contains("Index Scan using embeddings_hnsw_")),
        "{plan:#?}"
    );
    tx.rollback().expect("rollback");
    // `store check`: the node agrees with the store card by card...
    let node_cli = base.join("node-cli");
    let v = json(
        situate(&node_cli).args(["store", "check", "--store", &db.url]),
        0,
    );
    assert_eq!(v["missing"], serde_json::json!([]), "{v:#}");
    assert_eq!(v["differing"], serde_json::json!([]), "{v:#}");
    assert_eq!(v["indexes_consistent"], true, "{v:#}");
    assert_eq!(v["cards"], want_chunks(&embedded), "{v:#}");
    // ...and finds a card changed behind the feed's back (a write with no change row).
    c.execute(
        "UPDATE situate.chunks SET generated_context = 'changed' WHERE chunk_id = 'beta/doc-03.txt#0'",
        &[],
    )
    .expect("update");
    let out = run(
        situate(&node_cli).args(["store", "check", "--store", &db.url]),
        1,
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("differs: beta/doc-03.txt#0: context"),
        "{said}"
    );
    assert!(said.contains("NOT consistent"), "{said}");
}

/// The chunk count of an index.
fn want_chunks(index: &std::path::Path) -> serde_json::Value {
    json(situate(index).arg("stats"), 0)["stats"]["store"]["chunks"].clone()
}

/// A second PostgreSQL server a test starts with `scripts/postgres.sh` (a replica of the
/// test server, or one without pgvector), stopped when dropped.
struct SecondServer {
    dir: tempfile::TempDir,
    pub(crate) url: String,
}

/// `scripts/postgres.sh` with its arguments and the wheel cache the test server used.
fn pg_script(args: &[&std::ffi::OsStr]) -> std::process::Command {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/postgres.sh");
    let mut c = std::process::Command::new("bash");
    c.arg(script).args(args);
    if std::env::var_os("SITUATE_WHEELS").is_none() {
        c.env("SITUATE_WHEELS", primary_dir().join("wheels"));
    }
    c
}

/// The test server's directory (for its binaries, port and wheel).
fn primary_dir() -> std::path::PathBuf {
    std::env::var_os("SITUATE_TEST_PG_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            panic!("SITUATE_TEST_PG_DIR is not set: scripts/test.sh sets it to the directory scripts/postgres.sh started the test server in")
        })
}

impl SecondServer {
    /// `scripts/postgres.sh CMD [PRIMARY] DIR`; the URL it prints.
    fn start(cmd: &str, primary: Option<&std::path::Path>) -> SecondServer {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tmp");
        // The server may run as `nobody`, which must reach its directory.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let data = dir.path().join("server");
        let mut args: Vec<&std::ffi::OsStr> = vec![cmd.as_ref()];
        if let Some(p) = primary {
            args.push(p.as_os_str());
        }
        args.push(data.as_os_str());
        let out = pg_script(&args).output().expect("scripts/postgres.sh");
        assert!(
            out.status.success(),
            "scripts/postgres.sh {cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let url = String::from_utf8_lossy(&out.stdout).trim().to_string();
        SecondServer { dir, url }
    }

    /// The URL of `database` on this server.
    fn database(&self, database: &str) -> String {
        format!(
            "{}/{database}",
            self.url.rsplit_once('/').expect("a database").0
        )
    }
}

impl Drop for SecondServer {
    fn drop(&mut self) {
        let data = self.dir.path().join("server");
        let _ = pg_script(&["stop".as_ref(), data.as_os_str()]).output();
    }
}

#[test]
fn a_streaming_replica_serves_a_query_node_which_keeps_serving_after_promotion() {
    use crate::serve::Server;
    let db = Database::new("replica");
    let tmp = tempfile::tempdir().expect("tmp");
    let base = tmp.path();
    let mut rng = Lcg(11);
    for p in ["one", "two", "three"] {
        write_words(&base.join(p), 4, 3, &mut rng);
    }
    std::fs::write(
        base.join("two/zeppelin.txt"),
        "The zeppelin hangar stands on the heath.",
    )
    .expect("w");
    std::fs::write(
        base.join("three/quokka.txt"),
        "A quokka rests under the pier.",
    )
    .expect("w");
    let index = base.join("idx");
    run(
        situate(&index).args(["store", "migrate", "--store", &db.url]),
        0,
    );
    let ingest = |url: &str, part: &str| {
        json(situate(&index).args(["ingest", "--store", url, part]), 0)["report"]["position"]
            .as_u64()
            .expect("position")
    };
    ingest(&db.url, "one");
    // A hot standby of the test server: the node reads only from it.
    let replica = SecondServer::start("replica", Some(&primary_dir()));
    let replica_url = replica.database(&db.name);
    let node = Server::start(
        &base.join("node"),
        &["--store", &replica_url, "--node-embedder", "hash:64"],
        &[],
    );
    let top = |q: &str, after: u64| {
        let r = node.post(
            "/v1/search",
            &serde_json::json!({"query": q, "k": 1, "mode": "bm25", "after": after}),
        );
        assert_eq!(r.status, 200, "{:#}", r.body);
        r.body["hits"][0]["document_id"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    // Written on the primary, read through the replica's stream.
    let p2 = ingest(&db.url, "two");
    assert_eq!(top("zeppelin hangar", p2), "two/zeppelin.txt");
    // The standby refuses writes: an ingest there is an error, and nothing changes.
    let out = run(
        situate(&index).args(["ingest", "--store", &replica_url, "three"]),
        1,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("read-only"), "{err}");
    // Promoted, the former replica takes writes, and the node, on the same URL, follows.
    let out = pg_script(&[
        "promote".as_ref(),
        replica.dir.path().join("server").as_os_str(),
    ])
    .output()
    .expect("promote");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let p3 = loop {
        let out = situate(&index)
            .args(["--json", "ingest", "--store", &replica_url, "three"])
            .output()
            .expect("ingest");
        if out.status.success() {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
            break v["report"]["position"].as_u64().expect("position");
        }
        // Promotion takes a moment to open the server for writes.
        assert!(
            std::time::Instant::now() < deadline,
            "the promoted server never took writes: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(top("quokka pier", p3), "three/quokka.txt");
    assert_eq!(top("zeppelin hangar", p3), "two/zeppelin.txt");
}

#[test]
fn a_server_without_pgvector_is_refused_with_a_clear_error_and_nothing_written() {
    let server = SecondServer::start("start-without-pgvector", None);
    let tmp = tempfile::tempdir().expect("tmp");
    let index = tmp.path().join("idx");
    let out = run(
        situate(&index).args(["store", "migrate", "--store", &server.url]),
        1,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the pgvector extension is not installed on this server"),
        "{err}"
    );
    let mut c = Client::connect(&server.url, NoTls).expect("connect");
    let schemas: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname = 'situate'",
            &[],
        )
        .expect("count")
        .get(0);
    assert_eq!(schemas, 0, "nothing written");
    // The other commands say the store is missing, and write nothing either.
    std::fs::create_dir_all(tmp.path().join("docs")).expect("mkdir");
    std::fs::write(tmp.path().join("docs/a.txt"), "text").expect("w");
    for args in [
        vec!["ingest", "--store", &server.url, "docs"],
        vec![
            "worker",
            "--store",
            &server.url,
            "--role",
            "contextualize",
            "--until-idle",
        ],
        vec!["status", "--store", &server.url],
        vec!["search", "text", "--store", &server.url],
    ] {
        let out = run(situate(&index).args(&args), 1);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("situate store migrate"), "{args:?}: {err}");
    }
    assert!(!index.join("cards.db").exists(), "no node index was made");
}

#[test]
fn a_worker_with_other_context_settings_stops_and_leaves_the_work_and_local_workers_finish_it() {
    let db = Database::new("settings");
    let tmp = tempfile::tempdir().expect("tmp");
    let index = tmp.path().join("idx");
    let docs = tmp.path().join("docs");
    write_corpus(&docs, 3, "mix");
    let server = fake_anthropic(std::time::Duration::ZERO);
    let llm = format!("anthropic:claude-test?base_url={}", server.url());
    run(
        situate(&index).args(["store", "migrate", "--store", &db.url]),
        0,
    );
    let ingest = || {
        let mut c = situate(&index);
        c.env("ANTHROPIC_API_KEY", "k")
            .env_remove("ANTHROPIC_BASE_URL")
            .args([
                "ingest",
                "--store",
                &db.url,
                "--context",
                "llm",
                "--llm",
                &llm,
            ])
            .args(["--max-tokens", "40", "--overlap", "0"])
            .arg(&docs);
        c
    };
    assert_eq!(json(&mut ingest(), 0)["report"]["queued_contexts"], 12);
    // A worker told to write another kind of context would mix two settings: it stops,
    // names the fix, and gives its claims back at once.
    let out = run(
        situate(&index)
            .env("ANTHROPIC_API_KEY", "k")
            .args(["worker", "--store", &db.url, "--role", "contextualize"])
            .args(["--context", "document", "--llm", &llm, "--until-idle"]),
        1,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("queued for a context with other settings"),
        "{err}"
    );
    let status = json(situate(&index).args(["status", "--store", &db.url]), 0);
    let work = &status["work"][0];
    assert_eq!(work["role"], "contextualize", "{status:#}");
    assert_eq!(work["queued"], 12, "{status:#}");
    assert_eq!(work["leased"], 0, "released: {status:#}");
    assert_eq!(
        status["context_status"],
        serde_json::json!([["pending", 12]])
    );
    assert_eq!(server.calls(), 0, "nothing was paid for");
    // The same ingest again, with two local workers: nothing to read again, the queue done.
    let v = json(ingest().args(["--workers", "2"]), 0);
    assert_eq!(v["report"]["unchanged"], 3, "{v:#}");
    let done: u64 = v["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| w["contexts"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(done, 12, "{v:#}");
    let status = json(situate(&index).args(["status", "--store", &db.url]), 0);
    assert_eq!(
        status["context_status"],
        serde_json::json!([["verified", 12]]),
        "{status:#}"
    );
    assert_eq!(
        status["input_tokens"],
        12 * 30,
        "the cost, from any machine: {status:#}"
    );
    assert_eq!(server.calls(), 12);
}

#[test]
fn a_query_node_killed_while_it_builds_resumes_and_agrees_with_the_store() {
    let db = Database::new("resume");
    let tmp = tempfile::tempdir().expect("tmp");
    let base = tmp.path();
    let mut rng = Lcg(3);
    write_words(&base.join("docs"), 6, 3, &mut rng);
    let index = base.join("idx");
    run(
        situate(&index).args(["store", "migrate", "--store", &db.url]),
        0,
    );
    // No contexts at all: every card is final at once, so every one is queued for its
    // embedding.
    let v = json(
        situate(&index).args(["ingest", "--store", &db.url, "--context", "none", "docs"]),
        0,
    );
    assert_eq!(v["report"]["queued_contexts"], 0, "{v:#}");
    assert_eq!(
        v["report"]["queued_embeddings"], v["report"]["chunks"],
        "{v:#}"
    );
    let node = base.join("node");
    let search = || {
        let mut c = situate(&node);
        c.args(["search", "harbour", "--store", &db.url, "--mode", "bm25"]);
        c
    };
    // Killed after the first batch of the first catch-up is committed, before its
    // position is recorded.
    let out = search()
        .env("SITUATE_CRASH_AT", "follow-apply")
        .output()
        .expect("run");
    assert!(!out.status.success(), "the crash point was not reached");
    json(&mut search(), 0);
    let v = json(
        situate(&node).args(["store", "check", "--store", &db.url]),
        0,
    );
    assert_eq!(v["documents"], 6, "{v:#}");
    assert_eq!(v["missing"], serde_json::json!([]), "{v:#}");
    assert_eq!(v["indexes_consistent"], true, "{v:#}");
    // A directory that follows one store refuses another.
    let other = Database::new("resume_other");
    run(
        situate(&index).args(["store", "migrate", "--store", &other.url]),
        0,
    );
    let out = run(
        situate(&node).args(["search", "harbour", "--store", &other.url]),
        1,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("follows another store"), "{err}");
}

/// A TCP proxy in front of a server that can cut every connection through it at once (a
/// network failure between the workers and PostgreSQL), while still taking new ones.
struct Proxy {
    port: u16,
    open: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl Proxy {
    fn start(upstream: u16) -> Proxy {
        use std::net::{TcpListener, TcpStream};
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let open: std::sync::Arc<std::sync::Mutex<Vec<TcpStream>>> = Default::default();
        let conns = std::sync::Arc::clone(&open);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    // The server is down (restarting): the client sees its connection close.
                    continue;
                };
                let pipe = |mut from: TcpStream, mut to: TcpStream| {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                        let _ = from.shutdown(std::net::Shutdown::Both);
                    });
                };
                if let (Ok(c2), Ok(s2), Ok(c3), Ok(s3)) = (
                    client.try_clone(),
                    server.try_clone(),
                    client.try_clone(),
                    server.try_clone(),
                ) {
                    if let Ok(mut held) = conns.lock() {
                        held.push(c3);
                        held.push(s3);
                    }
                    pipe(client, s2);
                    pipe(server, c2);
                }
            }
        });
        Proxy { port, open }
    }

    /// Cuts every connection open through the proxy; returns how many there were.
    fn cut(&self) -> usize {
        let mut held = self.open.lock().expect("lock");
        let n = held.len() / 2;
        for s in held.drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        n
    }
}

#[test]
fn workers_and_a_query_node_ride_out_postgresql_restarts_and_cut_connections() {
    use crate::serve::Server;
    use std::time::{Duration, Instant};
    let pg = SecondServer::start("start", None);
    let upstream: u16 = pg
        .url
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .expect("port");
    let proxy = Proxy::start(upstream);
    let url = format!("postgres://situate@127.0.0.1:{}/situate", proxy.port);
    let tmp = tempfile::tempdir().expect("tmp");
    let index = tmp.path().join("idx");
    let docs = tmp.path().join("docs");
    write_corpus(&docs, 20, "fault");
    let llm_server = fake_anthropic(Duration::from_millis(100));
    let llm = format!(
        "anthropic:claude-test?base_url={}&concurrency=1&retries=2",
        llm_server.url()
    );
    run(
        situate(&index).args(["store", "migrate", "--store", &url]),
        0,
    );
    let v = json(
        situate(&index)
            .args(["ingest", "--store", &url, "--context", "llm", "--llm", &llm])
            .args(["--max-tokens", "40", "--overlap", "0"])
            .arg(&docs),
        0,
    );
    assert_eq!(v["report"]["queued_contexts"], 80, "{v:#}");
    let node = Server::start(
        &tmp.path().join("node"),
        &["--store", &url, "--node-embedder", "hash:64"],
        &[],
    );
    let spawn = |n: usize| {
        situate(&index)
            .env("ANTHROPIC_API_KEY", "k")
            .env_remove("ANTHROPIC_BASE_URL")
            .args(["worker", "--store", &url, "--role", "contextualize"])
            .args(["--lease", "2", "--batch", "2", "--until-idle", "--quiet"])
            .args(["--name", &format!("w{n}")])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn a worker")
    };
    let workers: Vec<std::process::Child> = (0..2).map(spawn).collect();
    // Faults while they work: two network cuts around a server restart.
    std::thread::sleep(Duration::from_millis(1500));
    let cut1 = proxy.cut();
    std::thread::sleep(Duration::from_millis(1500));
    let out = pg_script(&["restart".as_ref(), pg.dir.path().join("server").as_os_str()])
        .output()
        .expect("restart");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::thread::sleep(Duration::from_millis(1500));
    let cut2 = proxy.cut();
    assert!(
        cut1 > 0 && cut2 > 0,
        "nothing was connected to cut: {cut1}, {cut2}"
    );
    for w in workers {
        let err = finish_worker(w, "after the faults");
        assert!(
            err.contains("reconnected"),
            "the worker never reconnected:\n{err}"
        );
    }
    let status = json(situate(&index).args(["status", "--store", &url]), 0);
    assert_eq!(
        status["context_status"],
        serde_json::json!([["verified", 80]]),
        "{status:#}"
    );
    // A context is asked for again only when a fault lost its answer before it reached the
    // shared cache: at most once per fault (two cuts and a restart), so at most 4 times.
    // (Twice is usual; one CI run saw a context lost to two faults in a row.)
    let mut asked: std::collections::HashMap<String, usize> = Default::default();
    for r in llm_server.requests() {
        let chunk = chunk_of(&r.json());
        if !chunk.is_empty() {
            *asked.entry(chunk).or_default() += 1;
        }
    }
    assert_eq!(asked.len(), 80, "every chunk was asked for");
    let most = asked.values().max().copied().unwrap_or(0);
    let again: usize = asked.values().map(|n| n - 1).sum();
    eprintln!("cuts {cut1} and {cut2} connections, one restart: {again} contexts asked for again");
    assert!(most <= 1 + 3, "a context was paid {most} times");
    // The query node, cut off and restarted under too, catches up with every context.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let info = node.get("/v1/info").body;
        if info["stats"]["store"]["context_status"] == serde_json::json!([["verified", 80]]) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the node did not catch up: {info:#}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The model ids and counts `status --store` reports kept in the store.
fn kept_embeddings(index: &std::path::Path, url: &str) -> std::collections::BTreeMap<String, i64> {
    let v = json(situate(index).args(["status", "--store", url]), 0);
    v["embeddings"]
        .as_array()
        .expect("embeddings")
        .iter()
        .map(|p| {
            (
                p[0].as_str().expect("model").to_string(),
                p[1].as_i64().expect("count"),
            )
        })
        .collect()
}

#[test]
fn a_switch_of_embedder_fills_the_store_then_moves_a_serving_node_and_a_stopped_one() {
    use crate::serve::Server;
    let db = Database::new("reembed");
    let tmp = tempfile::tempdir().expect("tmp");
    let base = tmp.path();
    let mut rng = Lcg(11);
    write_words(&base.join("docs"), 8, 4, &mut rng);
    write_words(&base.join("later"), 3, 2, &mut rng);
    let index = base.join("idx");
    let url = db.url.as_str();
    run(
        situate(&index).args(["store", "migrate", "--store", url]),
        0,
    );
    let chunking = ["--max-tokens", "40", "--overlap", "0"];
    let v = json(
        situate(&index)
            .args(["ingest", "--store", url, "--context", "none"])
            .args(chunking)
            .arg("docs"),
        0,
    );
    let chunks = v["report"]["chunks"].as_i64().expect("chunks");
    assert!(chunks > 20, "{v:#}");
    let worker = |embedder: &str| {
        let mut c = situate(&index);
        c.args([
            "worker",
            "--store",
            url,
            "--role",
            "embed",
            "--embedder",
            embedder,
        ])
        .args(["--until-idle", "--quiet"]);
        c
    };
    run(&mut worker("hash:64"), 0);
    // Two query nodes on the fleet's model: one serving, one stopped.
    let serving = base.join("node-a");
    let stopped = base.join("node-b");
    let s = Server::start(
        &serving,
        &["--store", url, "--node-embedder", "hash:64"],
        &[],
    );
    json(
        situate(&stopped).args([
            "search",
            "harbour",
            "--store",
            url,
            "--node-embedder",
            "hash:64",
        ]),
        0,
    );
    let info = s.get("/v1/info");
    assert_eq!(
        info.body["stats"]["embed_model"], "hash:64",
        "{:#}",
        info.body
    );
    // Refusals first: nothing is queued or recorded.
    for (args, field) in [
        (vec!["--embedder", "none"], "embedder"),
        (vec!["--embedder", "no-such-model"], "embedder"),
        (vec!["--embedder", "hash:96", "--batch", "0"], "batch"),
    ] {
        let out = run(
            situate(&index)
                .args(["store", "reembed", "--store", url])
                .args(&args),
            1,
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(field), "{args:?}: {err}");
    }
    let st = json(situate(&index).args(["status", "--store", url]), 0);
    assert!(
        st["work"]
            .as_array()
            .expect("work")
            .iter()
            .all(|w| !w["role"].as_str().unwrap_or("").starts_with("embed:")),
        "{st:#}"
    );
    // The store filled with the new model, queue only: every final card queued once.
    let q = json(
        situate(&index).args([
            "store",
            "reembed",
            "--store",
            url,
            "--embedder",
            "hash:96",
            "--queue-only",
        ]),
        0,
    );
    assert_eq!(q["cards"], chunks, "{q:#}");
    assert_eq!(q["queued"], q["cards"], "{q:#}");
    assert_eq!(q["embedded"], 0, "{q:#}");
    assert_eq!(q["open"], q["queued"], "{q:#}");
    let model = q["model"].as_str().expect("model").to_string();
    assert!(
        q["filling"]
            .as_array()
            .expect("filling")
            .iter()
            .any(|m| m == model.as_str())
    );
    // An ingest during the fill queues its embeddings for the new model too.
    let later = json(
        situate(&index)
            .args(["ingest", "--store", url, "--context", "none"])
            .args(chunking)
            .arg("later"),
        0,
    );
    let added = later["report"]["chunks"].as_i64().expect("chunks");
    let position = later["report"]["position"].as_u64().expect("position");
    // A worker of the fleet's model leaves the new model's items alone; one of the new
    // model does them (here the command itself, which also finds nothing left to queue).
    run(&mut worker("hash:64"), 0);
    let kept = kept_embeddings(&index, url);
    assert_eq!(kept.get(&model), None, "{kept:?}");
    let f = json(
        situate(&index).args(["store", "reembed", "--store", url, "--embedder", "hash:96"]),
        0,
    );
    assert_eq!(f["cards"], chunks + added, "{f:#}");
    assert_eq!(f["queued"], 0, "every card was queued already: {f:#}");
    assert_eq!(f["open"], 0, "{f:#}");
    assert_eq!(f["embedded"], chunks + added, "{f:#}");
    let kept = kept_embeddings(&index, url);
    assert_eq!(kept.get(&model), Some(&(chunks + added)), "{kept:?}");
    // Once more: everything kept, nothing queued or embedded.
    let again = json(
        situate(&index).args(["store", "reembed", "--store", url, "--embedder", "hash:96"]),
        0,
    );
    assert_eq!(again["kept"], chunks + added, "{again:#}");
    assert_eq!(
        (again["queued"].clone(), again["embedded"].clone()),
        (0.into(), 0.into())
    );
    // The serving node switches through its job: every vector read from the store, none
    // embedded on the node; searches answer throughout.
    let r = s.post(
        "/v1/jobs",
        &serde_json::json!({"kind": "reembed", "embedder": "hash:96"}),
    );
    assert_eq!(r.status, 202, "{:#}", r.body);
    let id = r.body["id"].as_str().expect("job id").to_string();
    loop {
        let a = s.post(
            "/v1/search",
            &serde_json::json!({"query": "harbour glacier", "k": 3}),
        );
        assert_eq!(a.status, 200, "a search during the switch: {:#}", a.body);
        let j = s.get(&format!("/v1/jobs/{id}"));
        if ["succeeded", "failed", "cancelled"].contains(&j.body["state"].as_str().unwrap_or("")) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let j = s.wait_job(&id);
    assert_eq!(j["state"], "succeeded", "{j:#}");
    let result = &j["result"];
    assert_eq!(result["switched"], true, "{j:#}");
    assert_eq!(result["embedded"], 0, "{j:#}");
    assert_eq!(result["from_store"], chunks + added, "{j:#}");
    assert_eq!(result["model"], model.as_str(), "{j:#}");
    let info = s.get("/v1/info");
    assert_eq!(
        info.body["stats"]["embed_model"], "hash:96",
        "{:#}",
        info.body
    );
    // The node went on following: the later documents are found by the vector leg.
    let a = s.post(
        "/v1/search",
        &serde_json::json!({"query": "harbour glacier", "mode": "vector", "k": 100, "after": position}),
    );
    assert_eq!(a.status, 200, "{:#}", a.body);
    let docs: std::collections::BTreeSet<String> = a.body["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .filter_map(|h| h["document_id"].as_str().map(str::to_string))
        .collect();
    assert_eq!(docs.len(), 11, "{docs:?}");
    drop(s);
    // The stopped node switches from the command line, and agrees with the store after.
    let v = json(
        situate(&stopped).args(["reembed", "--store", url, "--embedder", "hash:96"]),
        0,
    );
    assert_eq!(v["embedded"], 0, "{v:#}");
    assert_eq!(v["from_store"], chunks + added, "{v:#}");
    let c = json(
        situate(&stopped).args(["store", "check", "--store", url]),
        0,
    );
    assert_eq!(c["indexes_consistent"], true, "{c:#}");
    assert_eq!(c["documents"], 11, "{c:#}");
    let st = json(situate(&stopped).arg("stats"), 0);
    assert_eq!(st["stats"]["embed_model"], "hash:96", "{st:#}");
    // A model the store was not filled with is embedded on the node itself.
    let v = json(
        situate(&stopped).args(["reembed", "--store", url, "--embedder", "hash:48"]),
        0,
    );
    assert_eq!(v["from_store"], 0, "{v:#}");
    assert_eq!(v["embedded"], chunks + added, "{v:#}");
    // A node that does not exist is not built by a switch.
    let out = run(
        situate(&base.join("nowhere")).args(["reembed", "--store", url, "--embedder", "hash:96"]),
        1,
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("no query node"));
}
