//! Fusion settings in every front end, the fusion an index records, and `situate tune`:
//! recovering a known good setting on a synthetic set, declining where every setting is
//! equal, writing `situate.toml`, the HTTP job, and bad input.
//!
//! The synthetic set (a BEIR folder written by [`synthetic`]): each question is a rare word
//! and a common word; its golden document holds the rare word ("RARE ledger entry"), and
//! half the corpus's short documents repeat the common word ("COMMON COMMON"). BM25 weighs
//! the rare word (high IDF) and ranks the golden document first; the hashing embedder has
//! no IDF and ranks those documents first (cosine 0.71 against 0.41). So the known good
//! setting weighs BM25 more: TM2C2 up to α ≈ 0.7, min-max a little beyond, RRF only with a
//! small k and α put every golden document first, while the vector-heavy setting the test
//! starts from (RRF, α 0.9) ranks it about 20th.

use crate::serve::Server;
use crate::*;
use serde_json::json;

/// A rare word per question: letters only, distinct after stemming.
fn rare(i: usize) -> String {
    const SYL: [&str; 8] = ["ka", "lo", "mi", "nu", "pe", "ri", "so", "tu"];
    format!("zu{}{}{}x", SYL[i % 8], SYL[(i / 8) % 8], SYL[(i / 64) % 8])
}

const COMMON: [&str; 2] = ["river", "stone"];

/// The synthetic BEIR folder of `n` questions (`with_common`: each question also has its
/// common word; without it both legs agree on every question) and a controls file.
fn synthetic(dir: &Path, n: usize, with_common: bool) -> (PathBuf, PathBuf) {
    let beir = dir.join(if with_common { "conflict" } else { "agree" });
    std::fs::create_dir_all(beir.join("qrels")).expect("dirs");
    let mut corpus = String::new();
    let mut queries = String::new();
    let mut qrels = String::from("query-id\tcorpus-id\tscore\n");
    for i in 0..n {
        let c = COMMON[i % COMMON.len()];
        corpus += &format!(
            "{}\n{}\n",
            json!({"_id": format!("g{i}"), "title": "", "text": format!("{} ledger entry", rare(i))}),
            json!({"_id": format!("d{i}"), "title": "", "text": format!("{c} {c}")})
        );
        let text = if with_common {
            format!("{} {c}", rare(i))
        } else {
            rare(i)
        };
        queries += &format!("{}\n", json!({"_id": format!("q{i}"), "text": text}));
        qrels += &format!("q{i}\tg{i}\t1\n");
    }
    std::fs::write(beir.join("corpus.jsonl"), corpus).expect("corpus");
    std::fs::write(beir.join("queries.jsonl"), queries).expect("queries");
    std::fs::write(beir.join("qrels").join("test.tsv"), qrels).expect("qrels");
    let controls = dir.join("controls.txt");
    std::fs::write(
        &controls,
        "what is quantum chromodynamics\nwho painted the night watch\nhow tall is everest\nwhen did rome fall\nwhich enzyme splits lactose\n",
    )
    .expect("controls");
    (beir, controls)
}

/// An index of the synthetic corpus with the hashing embedder.
fn index_of(tmp: &Path, beir: &Path) -> PathBuf {
    let index = tmp.join("idx");
    run(
        situate(&index)
            .arg("ingest")
            .arg(beir.join("corpus.jsonl"))
            .args(["--embedder", "hash:256", "--context", "none"]),
        0,
    );
    index
}

fn top_ids(v: &Value) -> Vec<String> {
    v["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| h["document_id"].as_str().expect("id").to_string())
        .collect()
}

#[test]
fn tune_recovers_a_known_good_setting_writes_it_and_the_search_uses_it() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (beir, controls) = synthetic(tmp.path(), 40, true);
    let index = index_of(tmp.path(), &beir);
    // The index records the fusion it was built for; with no setting of the user's a
    // search uses it.
    let q = format!("{} {}", rare(35), COMMON[35 % 2]);
    let v = json(situate(&index).args(["search", &q, "-k", "3"]), 0);
    assert_eq!(v["fusion"]["from"], "index", "{:#}", v["fusion"]);
    assert_eq!(v["fusion"]["fusion"], "rrf");
    // The user's settings start vector-heavy, with a comment and a key tune must keep.
    let toml_path = tmp.path().join("situate.toml");
    std::fs::write(
        &toml_path,
        "# our team's settings\n[search]\nk = 5\nfusion = \"rrf\"\nalpha = 0.9 # vectors first\n",
    )
    .expect("toml");
    let v = json(situate(&index).args(["search", &q, "-k", "3"]), 0);
    assert_eq!(v["fusion"]["from"], "settings");
    assert_ne!(
        top_ids(&v)[0],
        "g35",
        "vector-heavy RRF ranks a distractor first"
    );

    let a = json(
        situate(&index)
            .args(["tune", "--questions"])
            .arg(&beir)
            .args(["--queries", "30", "--test-rest", "--controls"])
            .arg(&controls)
            .arg("--write"),
        0,
    );
    assert_eq!(a["decision"], "change", "{a:#}");
    assert_eq!(a["questions"], 30);
    assert_eq!(a["controls"], 5);
    let current = a["current"]["score"].as_f64().expect("current");
    let best = a["best"]["score"].as_f64().expect("best");
    assert!(
        current < 0.5,
        "the starting setting ranks golden documents low: {current}"
    );
    assert!(
        (best - 1.0).abs() < 1e-9,
        "some setting puts every golden document first: {a:#}"
    );
    let alpha = a["best"]["alpha"].as_f64().expect("alpha");
    assert!(alpha < 0.8, "the good setting weighs BM25 more: {a:#}");
    assert!(
        a["out_of_sample"]["gain"].as_f64().expect("gain") > 0.3,
        "{a:#}"
    );
    assert_eq!(
        a["out_of_sample"]["fold_gains"]
            .as_array()
            .expect("folds")
            .len(),
        5
    );
    assert!(
        a["in_sample_gain"].as_f64().expect("in")
            >= a["out_of_sample"]["gain"].as_f64().expect("out") - 1e-9
    );
    // The 10 questions tuning never saw gain as much.
    let held = &a["held_out"];
    assert_eq!(held["questions"], 10);
    assert!(
        (held["chosen"].as_f64().expect("chosen") - 1.0).abs() < 1e-9,
        "{held:#}"
    );
    assert!(held["current"].as_f64().expect("current") < 0.5, "{held:#}");
    assert_eq!(
        held["best"], held["chosen"],
        "the choice is the best point: {held:#}"
    );
    // min_score from the controls: none of them is answered at it, and at most 5% of the
    // answerable questions are lost.
    let m = &a["min_score"];
    assert_eq!(m["controls_answered"].as_f64(), Some(0.0), "{m:#}");
    assert!(
        m["answerable_lost"].as_f64().expect("lost") <= 0.05,
        "{m:#}"
    );
    // situate.toml: the choice in [search] with a comment on where it came from, the team's
    // comment and `k` kept, alpha once, and [answer] min_score.
    let written = std::fs::read_to_string(&toml_path).expect("toml");
    assert!(written.contains("# our team's settings"), "{written}");
    assert!(written.contains("# situate tune on"), "{written}");
    assert_eq!(written.matches("alpha").count(), 1, "{written}");
    let t: toml::Table = written.parse().expect("valid TOML");
    assert_eq!(t["search"]["k"].as_integer(), Some(5), "{written}");
    assert_eq!(
        t["search"]["fusion"].as_str(),
        a["best"]["fusion"].as_str(),
        "{written}"
    );
    assert!(t["answer"]["min_score"].as_float().is_some(), "{written}");
    // A search now uses it, and finds the golden document first; --explain shows each
    // leg's normalised value and where the fusion came from.
    let v = json(situate(&index).args(["search", &q, "-k", "3"]), 0);
    assert_eq!(v["fusion"]["from"], "settings");
    assert_eq!(v["fusion"]["fusion"], a["best"]["fusion"]);
    assert_eq!(top_ids(&v)[0], "g35");
    assert!(
        v["hits"][0]["legs"][0]["normalized"].is_number(),
        "{:#}",
        v["hits"][0]
    );
    let text = run(
        situate(&index).args(["search", &q, "-k", "1", "--explain"]),
        0,
    );
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(" → ") && text.contains("your settings'"),
        "{text}"
    );
}

#[test]
fn tune_declines_where_every_setting_is_equal_and_writes_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (beir, _) = synthetic(tmp.path(), 30, false);
    let index = index_of(tmp.path(), &beir);
    let a = json(
        situate(&index)
            .args(["tune", "--questions"])
            .arg(&beir)
            .args(["--write", "--fusions", "rrf,tm2c2,zscore"]),
        0,
    );
    assert_eq!(a["decision"], "keep", "{a:#}");
    assert!((a["best"]["score"].as_f64().expect("best") - 1.0).abs() < 1e-9);
    assert_eq!(a["in_sample_gain"].as_f64(), Some(0.0));
    assert_eq!(a["out_of_sample"]["gain"].as_f64(), Some(0.0));
    assert!(
        a["reason"].as_str().expect("reason").contains("no point"),
        "{a:#}"
    );
    assert!(a["written"].is_null());
    assert!(!tmp.path().join("situate.toml").exists(), "nothing written");
    // The text report says so too.
    let out = run(situate(&index).args(["tune", "--questions"]).arg(&beir), 0);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("keep: no point"), "{text}");
}

#[test]
fn fusion_settings_are_checked_and_bad_tune_input_is_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (beir, _) = synthetic(tmp.path(), 12, true);
    let index = index_of(tmp.path(), &beir);
    let refused = |args: &[&str], says: &str| {
        let out = run(situate(&index).args(args), 1);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    };
    refused(
        &["search", "x", "--fusion", "borda"],
        "rrf, minmax, tm2c2 or zscore",
    );
    refused(&["search", "x", "--alpha", "1.5"], "alpha");
    refused(
        &["search", "x", "--alpha", "0.5", "--vector-weight", "2"],
        "not both",
    );
    let q = beir.to_str().expect("utf-8");
    refused(&["tune", "--questions", q, "--folds", "1"], "folds");
    refused(&["tune", "--questions", q, "--metric", "ndcg@11"], "metric");
    refused(
        &["tune", "--questions", q, "--alphas", "0.5,2"],
        "grid.alphas",
    );
    refused(
        &["tune", "--questions", q, "--queries", "3"],
        "3 answerable questions",
    );
    let missing = tmp.path().join("no-such.jsonl");
    let out = run(
        situate(&index).args(["tune", "--questions"]).arg(&missing),
        1,
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such"));
    // Each fusion searches, and every hit keeps each leg's normalised value.
    for fusion in ["rrf", "minmax", "tm2c2", "zscore"] {
        let v = json(
            situate(&index).args(["search", &rare(3), "--fusion", fusion, "--alpha", "0.3"]),
            0,
        );
        assert_eq!(v["fusion"]["fusion"], fusion);
        assert!((v["fusion"]["vector_weight"].as_f64().expect("w") - 0.3).abs() < 1e-6);
        assert_eq!(top_ids(&v)[0], "g3", "{fusion}");
        let legs = v["hits"][0]["legs"].as_array().expect("legs");
        assert_eq!(legs.len(), 2, "{fusion}");
        assert!(legs.iter().all(|l| l["normalized"].is_number()), "{fusion}");
    }
}

#[test]
fn the_service_takes_fusion_settings_and_runs_tune_as_a_job() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (beir, controls) = synthetic(tmp.path(), 20, true);
    let index = index_of(tmp.path(), &beir);
    let s = Server::start(&index, &[], &[]);
    let q = format!("{} {}", rare(4), COMMON[0]);
    let r = s.post(
        "/v1/search",
        &json!({"query": q, "fusion": "tm2c2", "alpha": 0.2, "k": 3}),
    );
    assert_eq!(r.status, 200, "{:#}", r.body);
    assert_eq!(r.body["fusion"]["fusion"], "tm2c2");
    assert_eq!(top_ids(&r.body)[0], "g4");
    let r = s.post("/v1/search", &json!({"query": q, "fusion": "borda"}));
    assert_eq!(r.status, 400);
    assert_eq!(r.body["field"], "fusion", "{:#}", r.body);
    let job = s.post(
        "/v1/jobs",
        &json!({"kind": "tune", "questions": beir, "controls": controls, "folds": 4}),
    );
    assert_eq!(job.status, 202, "{:#}", job.body);
    let done = s.wait_job(job.body["id"].as_str().expect("id"));
    assert_eq!(done["state"], "succeeded", "{done:#}");
    let a = &done["result"];
    assert_eq!(a["decision"], "change", "{a:#}");
    assert_eq!(a["folds"], 4);
    assert!(
        a["settings"]["alpha"].as_f64().expect("alpha") < 0.8,
        "{a:#}"
    );
    let bad = s.post(
        "/v1/jobs",
        &json!({"kind": "tune", "questions": beir, "folds": 0}),
    );
    assert_eq!(bad.status, 400, "{:#}", bad.body);
    assert_eq!(bad.body["field"], "folds", "{:#}", bad.body);
}

#[test]
fn an_agent_chooses_the_fusion_over_mcp() {
    use crate::mcp::{call, mcp_command, runtime};
    use rmcp::ServiceExt;
    use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
    let tmp = tempfile::tempdir().expect("tmp");
    let (beir, _) = synthetic(tmp.path(), 20, true);
    let index = index_of(tmp.path(), &beir);
    let q = format!("{} {}", rare(6), COMMON[0]);
    runtime().block_on(async {
        let transport = TokioChildProcess::new(mcp_command(&index, false).configure(|c| {
            c.stderr(std::process::Stdio::null());
        }))
        .expect("spawn");
        let client = ().serve(transport).await.expect("initialize");
        let (r, err) = call(
            &client,
            "search",
            json!({"query": q, "k": 3, "fusion": "tm2c2", "alpha": 0.2}),
        )
        .await;
        assert!(!err, "{r}");
        assert_eq!(r["hits"][0]["document_id"], "g6", "{r:#}");
        let (why, err) = call(
            &client,
            "explain",
            json!({"query": q, "chunk_id": "g6#0", "fusion": "zscore", "alpha": 0.3}),
        )
        .await;
        assert!(!err, "{why}");
        let legs = why["legs"].as_array().expect("legs");
        assert!(legs.iter().all(|l| l["normalized"].is_number()), "{why:#}");
        let (bad, err) = call(&client, "search", json!({"query": q, "fusion": "borda"})).await;
        assert!(err, "{bad}");
        assert!(bad.to_string().contains("fusion"), "{bad}");
        client.cancel().await.expect("close");
    });
}
