//! `situate search --rerank` and rerank rows in `situate eval`, against a local fake
//! reranking server (TEI's protocol).

use crate::*;
use serde_json::json;
use situate_http::fake::{FakeServer, Reply};

/// A TEI-like server: a text scores 1 if it holds `word`, else 0.1 / (1 + its index).
fn tei(word: &'static str) -> FakeServer {
    FakeServer::start(move |req, _| {
        let texts: Vec<String> = req.json()["texts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t.as_str().map(str::to_lowercase))
            .collect();
        let scores: Vec<serde_json::Value> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let s = if t.contains(word) {
                    1.0
                } else {
                    0.1 / (1.0 + i as f64)
                };
                json!({"index": i, "score": s})
            })
            .collect();
        Reply::json(json!(scores))
    })
    .expect("fake server")
}

fn corpus(dir: &Path) -> PathBuf {
    let docs = dir.join("animals");
    std::fs::create_dir_all(&docs).expect("mkdir");
    for (name, text) in [
        (
            "zebra.md",
            "# Zebras\n\nZebras have stripes and live in Africa.",
        ),
        (
            "penguin.md",
            "# Penguins\n\nPenguins cannot fly but swim very well in Africa too.",
        ),
        ("owl.md", "# Owls\n\nOwls hunt at night."),
    ] {
        std::fs::write(docs.join(name), text).expect("write");
    }
    docs
}

#[test]
fn search_reranks_the_fused_hits_and_explains_every_score() {
    let tmp = tempfile::tempdir().expect("tmp");
    let index = tmp.path().join("idx");
    run(
        situate(&index)
            .arg("ingest")
            .arg(corpus(tmp.path()))
            .args(["--embedder", "hash:64"]),
        0,
    );
    let server = tei("owls");
    let spec = format!("tei:m?base_url={}", server.url());
    let plain = json(
        situate(&index).args(["search", "stripes africa", "-k", "2"]),
        0,
    );
    assert_eq!(plain["reranker"], serde_json::Value::Null);
    assert_ne!(plain["hits"][0]["document_id"], "animals/owl.md");

    let v = json(
        situate(&index).args(["search", "stripes africa", "-k", "2", "--rerank", &spec]),
        0,
    );
    assert_eq!(v["reranker"], "tei:m");
    let hits = v["hits"].as_array().expect("hits");
    assert_eq!(hits.len(), 2, "k is kept");
    assert_eq!(hits[0]["document_id"], "animals/owl.md");
    assert_eq!(hits[0]["score"], 1.0);
    let legs: Vec<&str> = hits[0]["legs"]
        .as_array()
        .expect("legs")
        .iter()
        .filter_map(|l| l["leg"].as_str())
        .collect();
    assert!(legs.ends_with(&["fused", "rerank"]), "{legs:?}");
    // The reranker read every fused hit (three chunks), each context in its labelled
    // section; the hits still quote the original alone.
    let sent: Vec<String> = server.requests()[0].json()["texts"]
        .as_array()
        .expect("texts")
        .iter()
        .filter_map(|t| t.as_str().map(str::to_string))
        .collect();
    assert_eq!(sent.len(), 3);
    assert!(
        sent.iter().all(|t| t.starts_with("Context: From animals/")),
        "{sent:?}"
    );
    assert_eq!(hits[0]["original_text"], "# Owls\n\nOwls hunt at night.");

    // --explain shows the fused rank next to the rerank one.
    let out = run(
        situate(&index).args([
            "search",
            "stripes africa",
            "-k",
            "1",
            "--explain",
            "--rerank",
            &spec,
        ]),
        0,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("· rerank #1 (1.0000)"), "{text}");
    assert!(text.contains("· fused #"), "{text}");
    assert!(text.contains("reranked by tei:m"), "{text}");

    // A depth of 1 with -k 1: only the fused top hit is sent.
    let before = server.calls();
    json(
        situate(&index).args([
            "search",
            "stripes africa",
            "-k",
            "1",
            "--rerank-depth",
            "1",
            "--rerank",
            &spec,
        ]),
        0,
    );
    let last = &server.requests()[before];
    assert_eq!(last.json()["texts"].as_array().map(Vec::len), Some(1));

    // The depth is never raised to -k: with depth 1 and -k 3 the reranker reads one hit,
    // and the two below it follow in their fused order with their fused scores.
    let fused = json(
        situate(&index).args(["search", "stripes africa", "-k", "3"]),
        0,
    );
    let before = server.calls();
    let v = json(
        situate(&index).args([
            "search",
            "stripes africa",
            "-k",
            "3",
            "--rerank-depth",
            "1",
            "--rerank",
            &spec,
        ]),
        0,
    );
    assert_eq!(server.calls(), before + 1);
    let last = &server.requests()[before];
    assert_eq!(last.json()["texts"].as_array().map(Vec::len), Some(1));
    let ids = |v: &serde_json::Value| -> Vec<String> {
        v["hits"]
            .as_array()
            .expect("hits")
            .iter()
            .map(|h| h["chunk_id"].as_str().expect("id").to_string())
            .collect()
    };
    assert_eq!(ids(&v), ids(&fused), "one re-scored hit cannot move");
    let has_rerank = |h: &serde_json::Value| {
        h["legs"]
            .as_array()
            .expect("legs")
            .iter()
            .any(|l| l["leg"] == "rerank")
    };
    assert!(has_rerank(&v["hits"][0]));
    for i in 1..3 {
        assert!(!has_rerank(&v["hits"][i]), "hit {i} is below the depth");
        assert_eq!(v["hits"][i]["score"], fused["hits"][i]["score"]);
        assert_eq!(v["hits"][i]["rank"], i + 1);
    }

    // The setting works like the flag.
    std::fs::write(
        tmp.path().join("situate.toml"),
        format!("[search]\nrerank = \"{spec}\"\n"),
    )
    .expect("toml");
    let v = json(
        situate(&index).args(["search", "stripes africa", "-k", "1"]),
        0,
    );
    assert_eq!(v["hits"][0]["document_id"], "animals/owl.md");
}

#[test]
fn a_bad_or_failing_reranker_is_a_clear_error() {
    let tmp = tempfile::tempdir().expect("tmp");
    let index = tmp.path().join("idx");
    run(
        situate(&index)
            .arg("ingest")
            .arg(corpus(tmp.path()))
            .args(["--embedder", "none"]),
        0,
    );
    let out = run(
        situate(&index).args(["search", "owls", "--rerank", "magic"]),
        1,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown reranker") && err.contains("cross-encoder:DIR"),
        "{err}"
    );
    let out = run(
        situate(&index).args(["search", "owls", "--rerank", "cross-encoder:/no/such/model"]),
        1,
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a directory"));
    let out = run(
        situate(&index).args(["search", "owls", "--rerank", "none", "--rerank-depth", "0"]),
        1,
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rerank-depth"));
    // A server that stays down: the search fails rather than answer unreranked.
    let down = FakeServer::start(|_, _| Reply::raw(503, "down")).expect("server");
    let spec = format!("tei:m?base_url={}&retries=2", down.url());
    let out = run(
        situate(&index).args(["search", "owls", "--rerank", &spec]),
        1,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("reranking failed") && err.contains("503"),
        "{err}"
    );
    assert_eq!(down.calls(), 2);
}

#[test]
fn eval_adds_rerank_rows() {
    let tmp = tempfile::tempdir().expect("tmp");
    // `situate eval` on the hand-checked `ranked` set, into `tmp/OUT`, with more arguments.
    let eval = |out: &str, args: &[&str]| {
        let mut cmd = situate(&tmp.path().join("unused"));
        cmd.arg("eval")
            .arg("--dataset")
            .arg(fixtures().join("ranked"))
            .arg("--out")
            .arg(tmp.path().join(out))
            .args(args);
        cmd
    };
    let server = tei("beta");
    let rerank = format!("bm25+none+tei:m?base_url={}", server.url());
    let v = json(
        &mut eval("out", &["--config", &format!("bm25+none,{rerank}")]),
        0,
    );
    let rows = v["configurations"].as_array().expect("rows");
    assert_eq!(rows[1]["name"], "bm25+none+tei:m");
    // The reranker lifts q1's golden d2 ("alpha beta") above d1: MRR@10 goes from
    // (1/2 + 1 + 0) / 3 to (1 + 1 + 0) / 3 (see fixtures/ranked/README.md).
    let mrr = |i: usize| rows[i]["metrics"]["mrr@10"].as_f64().expect("mrr");
    assert!((mrr(0) - 0.5).abs() < 1e-9);
    assert!((mrr(1) - 2.0 / 3.0).abs() < 1e-9, "{:#}", rows[1]);
    assert!(
        tmp.path()
            .join("out/queries-bm25+none+tei:m.jsonl")
            .is_file()
    );
    // A depth under the ranking's length: the reranker sees only the fused top 1, and the
    // rest follows in fused order. q1's d2 stays second (MRR 0.5 again); dropped, MRR
    // would be 1/3, and re-scored, 2/3.
    let before = server.requests().len();
    let v = json(
        &mut eval("out3", &["--rerank-depth", "1", "--config", &rerank]),
        0,
    );
    let row = &v["configurations"][0];
    assert!(
        (row["metrics"]["mrr@10"].as_f64().expect("mrr") - 0.5).abs() < 1e-9,
        "{row:#}"
    );
    let sent = &server.requests()[before..];
    assert!(!sent.is_empty());
    assert!(
        sent.iter()
            .all(|r| r.json()["texts"].as_array().is_some_and(|t| t.len() <= 1)),
        "only the top 1 is re-scored"
    );
    let bad = run(&mut eval("out2", &["--config", "bm25+none+magic"]), 1);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown reranker"));
}
