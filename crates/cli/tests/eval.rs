//! `situate eval` and `situate eval-set`: metrics on hand-checked cases, reports, controls.

use crate::*;

fn eval(out: &Path, dataset: &Path, extra: &[&str]) -> Value {
    let index = out.join("unused-index");
    json(
        situate(&index)
            .arg("eval")
            .arg("--dataset")
            .arg(dataset)
            .arg("--out")
            .arg(out)
            .args(extra),
        0,
    )
}

fn metric(report: &Value, config: &str, name: &str) -> f64 {
    report["configurations"]
        .as_array()
        .expect("configurations")
        .iter()
        .find(|c| c["name"] == config)
        .and_then(|c| c["metrics"][name].as_f64())
        .unwrap_or_else(|| panic!("{config} has no {name}: {report:#}"))
}

#[test]
fn metrics_match_the_hand_checked_case() {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("out");
    // See fixtures/ranked/README.md for the hand computation.
    let r = eval(&out, &fixtures().join("ranked"), &["--config", "bm25+none"]);
    let m = |n: &str| metric(&r, "bm25+none+none", n);
    assert!((m("mrr@10") - 0.5).abs() < 1e-9);
    assert!((m("pass@1") - 1.0 / 3.0).abs() < 1e-9);
    assert!((m("pass@5") - 2.0 / 3.0).abs() < 1e-9);
    assert!((m("failure_rate@20") - 1.0 / 3.0).abs() < 1e-9);
    assert!((m("ndcg@10") - (1.0 / 3f64.log2() + 1.0) / 3.0).abs() < 1e-6);
    assert!((m("map") - 0.5).abs() < 1e-9);
    for f in [
        "report.md",
        "report.json",
        "failure.svg",
        "queries-bm25+none+none.jsonl",
    ] {
        assert!(out.join(f).is_file(), "{f} written");
    }
    let per_query =
        std::fs::read_to_string(out.join("queries-bm25+none+none.jsonl")).expect("jsonl");
    let first: Value =
        serde_json::from_str(per_query.lines().next().expect("a line")).expect("json");
    assert_eq!(first["golden"], serde_json::json!(["d2"]));
    assert_eq!(first["retrieved"][1]["id"], "d2");
    assert_eq!(first["retrieved"][1]["legs"][0]["leg"], "bm25");
    let md = std::fs::read_to_string(out.join("report.md")).expect("md");
    assert!(md.contains("| bm25+none+none |") && md.contains("failure.svg"));
}

#[test]
fn anthropic_set_by_text_and_by_id_and_an_ablation_row() {
    let tmp = tempfile::tempdir().expect("tmp");
    let set = fixtures().join("anthropic");
    let by_text = eval(&tmp.path().join("text"), &set, &[]);
    assert_eq!(
        by_text["matching"], "stripped_text",
        "the cookbook's matching is the default for its set"
    );
    let by_id = eval(&tmp.path().join("id"), &set, &["--matching", "id"]);
    // doc_3_chunk_0 repeats doc_1_chunk_0's text and ties with it; by text, either counts.
    let diff =
        metric(&by_text, "bm25+none+none", "pass@1") - metric(&by_id, "bm25+none+none", "pass@1");
    assert!((diff - 1.0 / 3.0).abs() < 1e-9, "{diff}");
    let rows = by_text["configurations"].as_array().expect("rows");
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1]["name"], "bm25+structural+none");
    assert!(rows[1]["failure_reduction"].is_number() || rows[1]["failure_reduction"].is_null());
}

#[test]
fn unanswerable_controls_get_an_abstain_report() {
    let tmp = tempfile::tempdir().expect("tmp");
    let controls = tmp.path().join("controls.txt");
    std::fs::write(
        &controls,
        "what is the boiling point of mercury\nwho won the 1998 world cup\n",
    )
    .expect("w");
    let r = eval(
        &tmp.path().join("out"),
        &fixtures().join("beir"),
        &[
            "--config",
            "bm25+none",
            "--controls",
            controls.to_str().expect("utf8"),
        ],
    );
    assert_eq!(r["unanswerable_queries"], 2);
    let ab = &r["configurations"][0]["abstain"];
    assert_eq!(ab["answerable"], 3);
    assert_eq!(ab["unanswerable"], 2);
    assert!(
        ab["threshold"].is_number() && ab["curve"].as_array().is_some_and(|c| !c.is_empty()),
        "{ab:#}"
    );
    let md = std::fs::read_to_string(tmp.path().join("out/report.md")).expect("md");
    assert!(md.contains("Unanswerable queries"));
}

#[test]
fn bad_configurations_are_refused_clearly() {
    let tmp = tempfile::tempdir().expect("tmp");
    for (config, says) in [
        ("fancy+none", "unknown mode"),
        ("bm25+llm", "file:FILE"),
        ("bm25+file:/nonexistent.jsonl", "no contexts file"),
        ("bm25+none+cohere", "unknown reranker"),
        ("bm25", "MODE+CONTEXT"),
    ] {
        let out = run(
            situate(&tmp.path().join("i"))
                .arg("eval")
                .arg("--dataset")
                .arg(fixtures().join("beir"))
                .arg("--out")
                .arg(tmp.path().join("o"))
                .args(["--config", config]),
            1,
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{config}: {err}");
    }
    // Search settings go through the same checks as `situate search`, before any index is
    // built.
    for (flags, says) in [
        (["--context-weight=-1", "--split=test"], "--context-weight"),
        (["--rerank-depth=0", "--split=test"], "--rerank-depth"),
        (
            ["--fusion=borda", "--split=test"],
            "rrf, minmax, tm2c2 or zscore",
        ),
    ] {
        let out = run(
            situate(&tmp.path().join("i"))
                .arg("eval")
                .arg("--dataset")
                .arg(fixtures().join("beir"))
                .arg("--out")
                .arg(tmp.path().join("o2"))
                .args(flags),
            1,
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{flags:?}: {err}");
        assert!(
            !tmp.path().join("o2").join("indexes").exists(),
            "refused before any index was built"
        );
    }
}

#[test]
fn building_a_team_set_with_eval_set() {
    let tmp = tempfile::tempdir().expect("tmp");
    let index = tmp.path().join("idx");
    run(
        situate(&index)
            .arg("ingest")
            .arg(fixtures().join("corpus"))
            .args(["--embedder", "none"]),
        0,
    );
    let set = tmp.path().join("team.jsonl");
    run(situate(&index).args(["eval-set", "new"]).arg(&set), 0);
    run(situate(&index).args(["eval-set", "new"]).arg(&set), 1); // never overwrites
    // The template's example ids are not in this index: check says so, naming the lines.
    let out = run(situate(&index).args(["eval-set", "check"]).arg(&set), 1);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("golden chunk \"docs/security.md#2\" is not in the index")
    );

    std::fs::write(&set, "").expect("empty the set");
    run(
        situate(&index).args(["eval-set", "add"]).arg(&set).args([
            "--query",
            "how to clean the Fresnel lens",
            "--pick",
            "1",
        ]),
        0,
    );
    run(
        situate(&index).args(["eval-set", "add"]).arg(&set).args([
            "--query",
            "price of a helicopter",
            "--unanswerable",
        ]),
        0,
    );
    let no_pick = run(
        situate(&index)
            .args(["eval-set", "add"])
            .arg(&set)
            .args(["--query", "x"]),
        1,
    );
    assert!(String::from_utf8_lossy(&no_pick.stderr).contains("--pick"));
    let out = run(situate(&index).args(["eval-set", "check"]).arg(&set), 0);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("2 questions (1 answerable, 1 unanswerable), 0 problems")
    );

    // The set evaluates against the index it was built on.
    let r = json(
        situate(&index)
            .arg("eval")
            .arg("--dataset")
            .arg(&set)
            .arg("--out")
            .arg(tmp.path().join("out"))
            .args(["--config", "bm25+none,bm25+indexed"]),
        0,
    );
    assert_eq!(metric(&r, "bm25+indexed+none", "pass@1"), 1.0);
    assert_eq!(r["unanswerable_queries"], 1);

    // A duplicate question is a problem.
    let first = std::fs::read_to_string(&set)
        .expect("read")
        .lines()
        .next()
        .expect("line")
        .replace("\"q1\"", "\"q9\"");
    std::fs::write(
        &set,
        format!("{}{first}\n", std::fs::read_to_string(&set).expect("read")),
    )
    .expect("w");
    let out = run(situate(&index).args(["eval-set", "check"]).arg(&set), 1);
    assert!(String::from_utf8_lossy(&out.stdout).contains("the same question as line 1"));
}

#[test]
fn exported_llm_contexts_are_evaluated_without_an_llm() {
    let tmp = tempfile::tempdir().expect("tmp");
    let file = tmp.path().join("contexts.jsonl");
    let line = |doc: &str, chunk: &str, ctx: &str| {
        serde_json::json!({"document_id": doc, "chunk_id": chunk, "context": ctx,
            "model": "local:test", "prompt_version": "anthropic-v1", "status": "verified"})
        .to_string()
    };
    std::fs::write(
        &file,
        [
            line(
                "doc_1",
                "doc_1_chunk_2",
                "Salt generation with SecureRandom in the crypto helper.",
            ),
            line("doc_9", "doc_9_chunk_0", "A chunk of another corpus."),
        ]
        .join("\n"),
    )
    .expect("w");
    let config = format!("bm25+none,bm25+file:{}", file.display());
    let out = tmp.path().join("out");
    let r = eval(&out, &fixtures().join("anthropic"), &["--config", &config]);
    let rows = r["configurations"].as_array().expect("rows");
    assert_eq!(rows.len(), 2);
    assert!(
        rows[1]["name"]
            .as_str()
            .is_some_and(|n| n.contains("file:"))
    );
    assert!(rows[1]["metrics"]["pass@5"].is_number());
    // The evaluation index holds the imported context, with its provenance.
    let index = std::fs::read_dir(out.join("indexes"))
        .expect("indexes")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().contains("-file-"))
        .expect("an index for the file's contexts");
    let card = json(situate(&index).args(["show", "doc_1_chunk_2"]), 0);
    assert_eq!(card["context_provenance"]["model"], "local:test");
    assert!(
        card["generated_context"]
            .as_str()
            .is_some_and(|c| c.starts_with("Salt generation"))
    );
}

/// A BEIR corpus whose records are sentences with a `metadata.parent` (XQuAD-R's sentence
/// level): each paragraph is ingested as a document whose chunks are its sentences, the
/// judged ids are the sentence ids, and a context (here the structural one: the title) puts
/// back what a sentence lacks.
#[test]
fn sentences_with_a_parent_are_judged_as_chunks_of_their_paragraph() {
    let tmp = tempfile::tempdir().expect("tmp");
    let set = tmp.path().join("sentence");
    std::fs::create_dir_all(set.join("qrels")).expect("dirs");
    let rec = |id: &str, title: &str, text: &str, parent: &str| {
        serde_json::json!({"_id": id, "title": title, "text": text, "metadata": {"parent": parent}})
            .to_string()
    };
    let corpus = [
        rec(
            "a0-p0-s0",
            "Lionel Messi",
            "Messi plays football for Argentina.",
            "a0-p0",
        ),
        rec(
            "a0-p0-s1",
            "Lionel Messi",
            "He scored twice in the final.",
            "a0-p0",
        ),
        rec(
            "a1-p0-s0",
            "Serena Williams",
            "Williams plays tennis for the United States.",
            "a1-p0",
        ),
        rec(
            "a1-p0-s1",
            "Serena Williams",
            "She scored twice in the final.",
            "a1-p0",
        ),
    ]
    .join("\n");
    std::fs::write(set.join("corpus.jsonl"), corpus + "\n").expect("corpus");
    std::fs::write(
        set.join("queries.jsonl"),
        "{\"_id\":\"q1\",\"text\":\"Who scored twice in the final, Messi?\"}\n{\"_id\":\"q2\",\"text\":\"Serena Williams scored twice in the final\"}\n",
    )
    .expect("queries");
    std::fs::write(
        set.join("qrels/test.tsv"),
        "query-id\tcorpus-id\tscore\nq1\ta0-p0-s1\t1\nq2\ta1-p0-s1\t1\n",
    )
    .expect("qrels");
    let out = tmp.path().join("out");
    let r = eval(&out, &set, &["--config", "bm25+none,bm25+structural"]);
    assert_eq!(r["level"], "chunk", "{r:#}");
    let per_query =
        std::fs::read_to_string(out.join("queries-bm25+none+none.jsonl")).expect("jsonl");
    let first: Value =
        serde_json::from_str(per_query.lines().next().expect("a line")).expect("json");
    assert_eq!(first["golden"], serde_json::json!(["a0-p0-s1"]));
    assert!(
        first["retrieved"]
            .as_array()
            .expect("retrieved")
            .iter()
            .all(|h| h["id"].as_str().is_some_and(|id| id.contains("-s"))),
        "hits are sentences: {first:#}"
    );
    // Without a context, "He/She scored twice in the final" tie on the query's words; with
    // the title as context, the right sentence comes first for both questions.
    assert!(
        (metric(&r, "bm25+structural+none", "pass@1") - 1.0).abs() < 1e-9,
        "{r:#}"
    );
    assert!(metric(&r, "bm25+none+none", "mrr@10") < 1.0, "{r:#}");
}

/// Two sets whose folders share a name (XQuAD-R's `en/sentence` and `ru/sentence`) are not
/// ingested into one evaluation index: the second is refused, naming `--work`, and the
/// first one's index is left as it was.
#[test]
fn two_sets_of_one_name_in_one_work_folder_are_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let beir = fixtures().join("beir");
    let mut sets = Vec::new();
    for lang in ["en", "ru"] {
        let set = tmp.path().join(lang).join("sentence");
        std::fs::create_dir_all(set.join("qrels")).expect("dirs");
        for f in ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"] {
            std::fs::copy(beir.join(f), set.join(f)).expect("copy");
        }
        sets.push(set);
    }
    let work = tmp.path().join("work");
    let run_on = |set: &Path, code: i32| {
        run(
            situate(&tmp.path().join("unused"))
                .arg("eval")
                .arg("--dataset")
                .arg(set)
                .arg("--out")
                .arg(tmp.path().join("out"))
                .arg("--work")
                .arg(&work)
                .args(["--config", "bm25+none"]),
            code,
        )
    };
    run_on(&sets[0], 0);
    run_on(&sets[0], 0); // the same set again reuses its index
    let out = run_on(&sets[1], 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("same name") && err.contains("--work"), "{err}");
}
