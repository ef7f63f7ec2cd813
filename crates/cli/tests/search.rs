//! Searching the committed multilingual fixture corpus.

use crate::*;

#[test]
fn hits_carry_context_and_original_apart() {
    let (_tmp, index) = indexed_corpus("none");
    let v = json(
        situate(&index).args(["search", "how often to clean the Fresnel lens", "-k", "3"]),
        0,
    );
    let hits = v["hits"].as_array().expect("hits");
    assert!(!hits.is_empty() && hits.len() <= 3);
    let top = &hits[0];
    for field in [
        "document_id",
        "chunk_id",
        "score",
        "context",
        "original_text",
    ] {
        assert!(top.get(field).is_some(), "hit lacks {field}: {top:#}");
    }
    assert_eq!(top["document_id"], "corpus/guide/install.md");
    let original = top["original_text"].as_str().expect("original");
    let context = top["context"].as_str().expect("structural context");
    assert!(original.contains("Fresnel lens"));
    assert!(
        context.contains("Maintenance"),
        "heading path in the context: {context}"
    );
    assert!(
        !original.contains(context),
        "the original is not merged with the context"
    );

    // The human output shows them on separate labelled lines.
    let out = run(situate(&index).args(["search", "Fresnel lens"]), 0);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "    context   From corpus/guide/install.md, section Lighthouse Keeper's Manual"
        ),
        "{text}"
    );
    assert!(text.contains("    original  "), "{text}");
}

#[test]
fn contextual_bm25_finds_what_plain_bm25_cannot() {
    let (_tmp, index) = indexed_corpus("none");
    // "Keeper" is only in the manual's title; the chunk about bulbs does not say it, but its
    // structural context carries the title.
    let plain = search_ids(&index, "keeper", &["--bm25", "plain", "-k", "20"]);
    let ctx = search_ids(&index, "keeper", &["-k", "20"]);
    assert!(
        plain
            .iter()
            .all(|id| id.starts_with("corpus/guide/install.md#0")),
        "{plain:?}"
    );
    assert!(
        ctx.len() >= 4,
        "every chunk of the manual is found: {ctx:?}"
    );
    let bulbs = search_ids(&index, "keeper spare bulbs", &["-k", "1"]);
    assert!(
        !plain.contains(&bulbs[0]),
        "{bulbs:?} was not findable by 'keeper' without context"
    );
}

#[test]
fn code_html_russian_and_chinese_are_searchable() {
    let (_tmp, index) = indexed_corpus("none");
    assert!(search_ids(&index, "overdraft transfer", &[])[0].starts_with("corpus/src/ledger.rs#"));
    assert!(search_ids(&index, "heapq due jobs", &[])[0].starts_with("corpus/src/scheduler.py#"));
    let faq = search_ids(&index, "ticket price children", &[]);
    assert!(faq[0].starts_with("corpus/guide/faq.html#"));
    assert!(
        search_ids(&index, "tracking code", &[])
            .iter()
            .all(|id| !id.contains("faq")),
        "scripts are not indexed"
    );
    // Russian: a different inflection of the word in the text (генератор → генератора).
    assert!(
        search_ids(&index, "проверка генератора смотрителем", &[])[0]
            .starts_with("corpus/ru/mayak.txt#")
    );
    // Chinese: a word inside an unsegmented sentence.
    assert!(search_ids(&index, "发电机", &[])[0].starts_with("corpus/zh/dengta.txt#"));
    let stats = consistent_stats(&index);
    let langs = stats["stats"]["store"]["languages"].to_string();
    assert!(
        langs.contains("\"ru\"") && langs.contains("\"zh\"") && langs.contains("\"en\""),
        "{langs}"
    );
}

#[test]
fn show_prints_the_whole_card() {
    let (_tmp, index) = indexed_corpus("none");
    let id = search_ids(&index, "overdraft", &[])[0].clone();
    let v = json(situate(&index).args(["show", &id]), 0);
    assert_eq!(v["chunk_id"], Value::String(id.clone()));
    assert_eq!(v["context_status"], "generated");
    assert_eq!(v["context_provenance"]["method"], "structural");
    assert!(
        v["generated_context"]
            .as_str()
            .expect("ctx")
            .contains("Rust source")
    );
    assert!(
        v["generated_context"]
            .as_str()
            .expect("ctx")
            .contains("impl Ledger > fn transfer")
    );
    let err = run(situate(&index).args(["show", "no-such-chunk"]), 1);
    assert!(String::from_utf8_lossy(&err.stderr).contains("no chunk \"no-such-chunk\""));
}

#[test]
fn searching_without_an_index_says_what_to_do() {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = run(situate(&tmp.path().join("none")).args(["search", "x"]), 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no situate index at") && err.contains("situate ingest"),
        "{err}"
    );
}

#[test]
fn anthropic_and_beir_corpora() {
    let tmp = tempfile::tempdir().expect("tmp");
    let index = tmp.path().join("idx");
    let v = json(
        situate(&index)
            .arg("ingest")
            .arg(fixtures().join("anthropic/codebase_chunks.json"))
            .args(["--embedder", "none"]),
        0,
    );
    assert_eq!(v["report"]["added"], 3);
    assert_eq!(
        v["report"]["chunks"], 6,
        "the file's own chunk boundaries are kept"
    );
    let hits = json(
        situate(&index).args(["search", "salt SecureRandom bytes", "--mode", "bm25"]),
        0,
    );
    assert_eq!(hits["hits"][0]["chunk_id"], "doc_1_chunk_2");
    let card = json(situate(&index).args(["show", "doc_2_chunk_1"]), 0);
    assert!(
        card["generated_context"]
            .as_str()
            .expect("ctx")
            .contains("namespace net"),
        "{card:#}"
    );
    assert!(
        card["original_text"]
            .as_str()
            .expect("orig")
            .starts_with("void Connection::Reconnect")
    );

    let v = json(
        situate(&index).arg("ingest").arg(fixtures().join("beir")),
        0,
    );
    assert_eq!(v["report"]["added"], 4);
    assert_eq!(
        search_ids(&index, "sea tides electricity", &["-k", "1"]),
        vec!["d1#0"]
    );
    consistent_stats(&index);
}

/// A small English corpus where one document answers a question in other words.
fn paraphrase_corpus(root: &Path) {
    std::fs::create_dir_all(root.join("help")).expect("mkdir");
    std::fs::create_dir_all(root.join("misc")).expect("mkdir");
    std::fs::write(
        root.join("help/account.md"),
        "To change a forgotten password, open Settings and choose Recover account.",
    )
    .expect("w");
    std::fs::write(
        root.join("help/taxes.md"),
        "The quarterly tax filing deadline is the last day of the month.",
    )
    .expect("w");
    std::fs::write(
        root.join("misc/cats.md"),
        "Cats sleep for most of the day and hunt at dusk.",
    )
    .expect("w");
}

/// [`paraphrase_corpus`] ingested into `root/idx` with `flags`: its three documents
/// embedded by `model`, and the vector leg finding the answer that shares no word with the
/// question. Returns the index.
fn paraphrase_index(root: &Path, flags: &[&str], model: &str) -> std::path::PathBuf {
    paraphrase_corpus(root);
    let index = root.join("idx");
    let mut args = vec!["ingest", "help", "misc"];
    args.extend_from_slice(flags);
    let v = json(situate(&index).current_dir(root).args(args), 0);
    assert_eq!(v["report"]["embed_model"], model);
    assert_eq!(v["report"]["embedded"], 3);
    let vec = search_ids(
        &index,
        "I cannot remember my login credentials",
        &["--mode", "vector"],
    );
    assert_eq!(vec[0], "help/account.md#0", "{vec:?}");
    index
}

#[test]
fn hybrid_search_finds_paraphrases_and_explains_each_leg() {
    let tmp = tempfile::tempdir().expect("tmp");
    let index = paraphrase_index(
        tmp.path(),
        &["--meta", "team=support"],
        "all-minilm-l6-v2@0.1.0",
    );
    // No word in common with the answer: BM25 finds nothing, the real MiniLM finds it.
    let q = "I cannot remember my login credentials";
    assert!(search_ids(&index, q, &[]).is_empty());
    // Hybrid (the default) fuses as the index records for its embedder.
    let d = json(
        situate(&index).args(["search", "forgotten password settings"]),
        0,
    );
    assert_eq!(d["mode"], "hybrid");
    assert_eq!(d["fusion"]["from"], "index", "{:#}", d["fusion"]);
    assert_eq!(d["hits"][0]["chunk_id"], "help/account.md#0");
    // RRF: fused score = sum of 1/(60 + rank) over the legs that found it.
    let v = json(
        situate(&index).args(["search", "forgotten password settings", "--fusion", "rrf"]),
        0,
    );
    assert_eq!(v["fusion"]["from"], "settings");
    let top = &v["hits"][0];
    assert_eq!(top["chunk_id"], "help/account.md#0");
    let legs = top["legs"].as_array().expect("legs");
    assert_eq!(legs.len(), 2, "{legs:?}");
    let fused: f64 = legs
        .iter()
        .map(|l| 1.0 / (60.0 + l["rank"].as_f64().expect("rank")))
        .sum();
    assert!((top["score"].as_f64().expect("score") - fused).abs() < 1e-6);
    let out = run(
        situate(&index).args([
            "search",
            "forgotten password settings",
            "--explain",
            "-k",
            "1",
        ]),
        0,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("explain   bm25 #1") && text.contains("vector #1") && text.contains("fused"),
        "{text}"
    );
    // Filters reach both legs: by path glob, document, and ingest metadata.
    let cats = search_ids(
        &index,
        "password",
        &["--mode", "hybrid", "--path", "misc/*"],
    );
    assert_eq!(cats, vec!["misc/cats.md#0"]);
    let doc = search_ids(
        &index,
        "password",
        &["--mode", "vector", "--document", "help/taxes.md"],
    );
    assert_eq!(doc, vec!["help/taxes.md#0"]);
    assert_eq!(
        search_ids(
            &index,
            "cats",
            &["--mode", "hybrid", "--meta", "team=support"]
        )
        .len(),
        3
    );
    assert!(
        search_ids(
            &index,
            "cats",
            &["--mode", "hybrid", "--meta", "team=sales"]
        )
        .is_empty()
    );
    let out = run(situate(&index).args(["search", "x", "--meta", "nokey"]), 1);
    assert!(String::from_utf8_lossy(&out.stderr).contains("KEY=VALUE"));
    // Removing a document keeps every index in step (stats exits 0 only when consistent).
    run(situate(&index).args(["rm", "help/taxes.md"]), 0);
    let s = json(situate(&index).arg("stats"), 0);
    assert_eq!(s["consistency"]["vector_chunks"], 2);
    assert_eq!(s["stats"]["vector_index"], "exact");
}

/// An index whose embedder is named `:q8` embeds its passages in int8 (MiniLM and the
/// multilingual e5): its own model id (so its vectors are never mixed with the reference
/// model's), the same paraphrase found; `:q8` after a model that does not embed is refused
/// before anything is written.
#[test]
fn int8_passages_are_an_index_of_their_own_and_still_find_paraphrases() {
    let tmp = tempfile::tempdir().expect("tmp");
    for (embedder, id) in [
        ("all-minilm-l6-v2:q8", "all-minilm-l6-v2@0.1.0:q8"),
        ("multilingual-e5-small:q8", "multilingual-e5-small@0.3.0:q8"),
    ] {
        let root = tmp.path().join(embedder.replace(':', "-"));
        let index = paraphrase_index(&root, &["--embedder", embedder], id);
        let s = json(situate(&index).arg("stats"), 0);
        assert_eq!(s["consistency"]["vector_chunks"], 3);
    }
    let bad = tmp.path().join("bad");
    let out = run(
        situate(&bad)
            .current_dir(tmp.path().join("all-minilm-l6-v2-q8"))
            .args(["ingest", "help", "--embedder", "smollm2-135m-instruct:q8"]),
        1,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not an embedding model"), "{err}");
    // Refused before the index was created: no index pinned to an embedder that cannot load.
    assert!(!bad.exists(), "an index was left at {}", bad.display());
}

#[test]
fn an_index_without_embeddings_says_so_when_asked_for_vectors() {
    let tmp = tempfile::tempdir().expect("tmp");
    paraphrase_corpus(tmp.path());
    let index = tmp.path().join("idx");
    run(
        situate(&index)
            .current_dir(tmp.path())
            .args(["ingest", "help", "--embedder", "none"]),
        0,
    );
    let v = json(situate(&index).args(["search", "password"]), 0);
    assert_eq!(v["mode"], "bm25", "no vectors: BM25 by default");
    let out = run(
        situate(&index).args(["search", "password", "--mode", "hybrid"]),
        1,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("mode (--mode): hybrid needs vectors") && err.contains("embedder none"),
        "{err}"
    );
    // Embedder settings belong to index creation.
    let out = run(
        situate(&index).current_dir(tmp.path()).args([
            "ingest",
            "misc",
            "--embedder",
            "all-minilm-l6-v2",
        ]),
        1,
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("already exists"));
    run(
        situate(&index)
            .current_dir(tmp.path())
            .args(["ingest", "misc", "--embedder", "none"]),
        0,
    );
}

#[test]
fn a_russian_question_finds_its_english_passage_with_multilingual_e5() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("kb");
    std::fs::create_dir_all(&root).expect("mkdir");
    std::fs::write(
        root.join("password.md"),
        "Steps to change a forgotten password: open Settings, then Recover account.",
    )
    .expect("w");
    std::fs::write(
        root.join("taxes.md"),
        "The quarterly tax filing deadline is the last day of April.",
    )
    .expect("w");
    std::fs::write(
        root.join("ru.md"),
        "Кошки спят большую часть дня и охотятся в сумерках.",
    )
    .expect("w");
    std::fs::write(root.join("zh.md"), "长城是中国古代的军事防御工程。").expect("w");
    let index = tmp.path().join("idx");
    let v = json(
        situate(&index)
            .current_dir(tmp.path())
            .args(["ingest", "kb"]),
        0,
    );
    // Not (mostly) English: the multilingual default.
    assert_eq!(v["report"]["embed_model"], "multilingual-e5-small@0.3.0");
    let hits = search_ids(
        &index,
        "Как сбросить забытый пароль?",
        &["--mode", "vector"],
    );
    assert_eq!(hits[0], "kb/password.md#0", "{hits:?}");
    let hits = search_ids(&index, "猫什么时候睡觉", &["--mode", "vector"]);
    assert_eq!(hits[0], "kb/ru.md#0", "{hits:?}");
}

#[test]
fn warnings_on_a_pipe_carry_no_colour_codes() {
    let tmp = tempfile::tempdir().expect("tmp");
    paraphrase_corpus(tmp.path());
    let index = tmp.path().join("idx");
    run(
        situate(&index)
            .current_dir(tmp.path())
            .args(["ingest", "help", "--embedder", "hash:32"]),
        0,
    );
    // A damaged vector snapshot is rebuilt from the embedding cache, with a warning.
    let snapshot = std::fs::read_dir(&index)
        .expect("index dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "flat"))
        .expect("a vector snapshot");
    let mut bytes = std::fs::read(&snapshot).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&snapshot, bytes).expect("damage");
    let out = run(situate(&index).args(["search", "password"]), 0);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("reloading the vectors"), "{err}");
    assert!(!err.contains('\u{1b}'), "no ANSI codes on a pipe: {err:?}");
}

/// `SITUATE_CPU` forces each instruction-set level this CPU runs: the same hits and the
/// same scores on every one (MiniLM's int8 products and its attention, BM25's selection,
/// the exact vector search); `stats` names the level; a level the CPU does not run, or no
/// level, is refused with the levels it does run.
#[test]
fn every_cpu_level_this_machine_runs_gives_the_same_hits_and_scores() {
    let tmp = tempfile::tempdir().expect("tmp");
    let index = paraphrase_index(
        tmp.path(),
        &["--embedder", "all-minilm-l6-v2:q8"],
        "all-minilm-l6-v2@0.1.0:q8",
    );
    let s = json(situate(&index).arg("stats"), 0);
    let runs: Vec<String> = s["cpu"]["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|l| l.as_str().expect("level").to_string())
        .collect();
    assert_eq!(runs.first().map(String::as_str), Some("scalar"), "{s:#}");
    assert_eq!(
        s["cpu"]["level"],
        runs.last().map(String::as_str).unwrap_or("")
    );
    // Ids and scores to six decimals (`serve::ranked`).
    let hits = |level: &str, q: &str| {
        crate::serve::ranked(&json(
            situate(&index)
                .env("SITUATE_CPU", level)
                .args(["search", q, "-k", "3"]),
            0,
        ))
    };
    let queries = ["I cannot remember my login credentials", "tax deadline"];
    let want: Vec<_> = queries.iter().map(|q| hits("auto", q)).collect();
    assert_eq!(want[0][0].0, "help/account.md#0", "{want:?}");
    for level in &runs {
        let st = json(situate(&index).env("SITUATE_CPU", level).arg("stats"), 0);
        assert_eq!(st["cpu"]["level"], level.as_str(), "{st:#}");
        for (q, want) in queries.iter().zip(&want) {
            assert_eq!(&hits(level, q), want, "{level}, {q:?}");
        }
    }
    for bad in ["sse9", "avxvnni", "avx512vnni"] {
        if runs.iter().any(|l| l == bad) {
            continue;
        }
        let out = run(situate(&index).env("SITUATE_CPU", bad).arg("stats"), 1);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("SITUATE_CPU")
                && err.contains(runs.last().map(String::as_str).unwrap_or("")),
            "{err}"
        );
    }
}
