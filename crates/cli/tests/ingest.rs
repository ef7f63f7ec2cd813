//! Ingest: bad inputs, re-ingest, changed documents, removal, rebuild.

use crate::*;

/// A corpus with one good file and every kind of bad input.
fn bad_corpus(root: &Path) {
    std::fs::create_dir_all(root.join("sub")).expect("mkdir");
    std::fs::write(
        root.join("good.txt"),
        "The only good file talks about glaciers.",
    )
    .expect("w");
    std::fs::write(root.join("binary.txt"), b"\x7fELF\x02\x01\x01\x00\x00\x00").expect("w");
    std::fs::write(root.join("latin1.md"), b"# Caf\xe9\n").expect("w");
    std::fs::write(root.join("empty.txt"), b"").expect("w");
    std::fs::write(root.join("photo.jpg"), b"\xff\xd8\xff").expect("w");
    std::os::unix::fs::symlink(root, root.join("sub/loop")).expect("symlink");
    std::os::unix::fs::symlink(root.join("gone.txt"), root.join("dangling.txt")).expect("symlink");
}

#[test]
fn bad_inputs_are_reported_and_the_rest_is_ingested() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("bad");
    bad_corpus(&root);
    let index = tmp.path().join("idx");
    let v = json(
        situate(&index)
            .arg("ingest")
            .arg(&root)
            .args(["--embedder", "none"]),
        0,
    );
    assert_eq!(v["report"]["added"], 1, "{v:#}");
    let skipped = v["report"]["skipped"].as_array().expect("skipped");
    let reason = |name: &str| skip_reason(&v, name);
    assert!(reason("binary.txt").starts_with("binary file"));
    assert!(reason("latin1.md").starts_with("invalid UTF-8 at byte 5"));
    assert_eq!(reason("empty.txt"), "empty file");
    assert!(reason("photo.jpg").starts_with("unsupported file type .jpg"));
    assert!(reason("loop").starts_with("symlink loop"));
    assert!(reason("dangling.txt").starts_with("unreadable"));
    assert_eq!(skipped.len(), 6);

    // The human summary lists them too.
    let out = run(situate(&index).arg("ingest").arg(&root), 0);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("1 unchanged") && text.contains("skipped 6:"),
        "{text}"
    );
    // --strict turns skips into a failure status; nothing ingestable is always one.
    run(situate(&index).arg("ingest").arg(&root).arg("--strict"), 3);
    run(
        situate(&index).arg("ingest").arg(root.join("binary.txt")),
        3,
    );
    run(
        situate(&index)
            .arg("ingest")
            .arg(tmp.path().join("does-not-exist")),
        3,
    );
    consistent_stats(&index);
}

#[test]
fn reingest_is_a_no_op_and_a_changed_document_replaces_its_chunks() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("docs");
    std::fs::create_dir_all(&root).expect("mkdir");
    let long: String = (0..200)
        .map(|i| format!("Paragraph {i} talks about river otters and their dens.\n\n"))
        .collect();
    std::fs::write(root.join("otters.txt"), &long).expect("w");
    std::fs::write(root.join("other.txt"), "Beavers build dams.").expect("w");
    let index = tmp.path().join("idx");
    let first = json(
        situate(&index)
            .arg("ingest")
            .arg(&root)
            .args(["--embedder", "none"]),
        0,
    );
    let chunks_before = first["report"]["chunks"].as_u64().expect("n");
    assert!(chunks_before > 3);
    let stats_before = consistent_stats(&index);

    let again = json(situate(&index).arg("ingest").arg(&root), 0);
    assert_eq!(again["report"]["unchanged"], 2);
    assert_eq!(again["report"]["chunks"], 0);
    let stats_again = consistent_stats(&index);
    assert_eq!(
        stats_before["stats"]["store"]["generation"], stats_again["stats"]["store"]["generation"],
        "nothing was written"
    );

    std::fs::write(
        root.join("otters.txt"),
        "Otters moved away. Only herons remain.",
    )
    .expect("w");
    let changed = json(situate(&index).arg("ingest").arg(&root), 0);
    assert_eq!(changed["report"]["replaced"], 1);
    assert_eq!(changed["report"]["unchanged"], 1);
    let stats = consistent_stats(&index);
    assert_eq!(
        stats["stats"]["store"]["chunks"], 2,
        "old chunks are gone: {stats:#}"
    );
    assert!(search_ids(&index, "dens", &[]).is_empty());
    assert_eq!(search_ids(&index, "herons", &[]), vec!["docs/otters.txt#0"]);

    // Settings that change chunks re-ingest; the chunk count follows them.
    let smaller = json(
        situate(&index)
            .arg("ingest")
            .arg(&root)
            .args(["--context", "none"]),
        0,
    );
    assert_eq!(smaller["report"]["replaced"], 2);
    assert_eq!(
        json(situate(&index).args(["show", "docs/otters.txt#0"]), 0)["context_status"],
        "pending"
    );

    run(situate(&index).args(["rm", "docs/other.txt"]), 0);
    assert!(search_ids(&index, "beavers", &[]).is_empty());
    let out = run(situate(&index).args(["rm", "docs/other.txt"]), 1);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no document"));
    assert_eq!(consistent_stats(&index)["stats"]["store"]["documents"], 1);
}

#[test]
fn rebuild_needs_only_the_cards() {
    let tmp = tempfile::tempdir().expect("tmp");
    let index = tmp.path().join("idx");
    // The hashing embedder: vectors to rebuild, no model to load.
    run(
        situate(&index)
            .arg("ingest")
            .arg(fixtures().join("corpus"))
            .args(["--embedder", "hash:64"]),
        0,
    );
    let before = search_ids(&index, "lighthouse generator winter", &[]);
    // Move the sources away: a rebuild must not need them.
    let v = json(situate(&index).arg("rebuild"), 0);
    assert!(v["chunks"].as_u64().expect("n") > 5);
    assert_eq!(v["vectors"], v["chunks"], "every card has its vector back");
    assert_eq!(v["embedded"], 0, "from the embedding cache: {v:#}");
    assert_eq!(
        search_ids(&index, "lighthouse generator winter", &[]),
        before
    );
    consistent_stats(&index);
}

#[test]
fn settings_file_and_bad_settings() {
    let tmp = tempfile::tempdir().expect("tmp");
    let index = tmp.path().join("idx");
    std::fs::write(
        tmp.path().join("situate.toml"),
        "[ingest]\ncontext = \"none\"\n[search]\nk = 1\n",
    )
    .expect("w");
    run(
        situate(&index)
            .arg("ingest")
            .arg(fixtures().join("beir"))
            .args(["--embedder", "none"]),
        0,
    );
    let v = json(situate(&index).args(["search", "energy"]), 0);
    assert_eq!(
        v["hits"].as_array().expect("hits").len(),
        1,
        "k from situate.toml"
    );
    assert_eq!(
        v["hits"][0]["context"],
        Value::Null,
        "context method from situate.toml"
    );

    std::fs::write(tmp.path().join("situate.toml"), "[search]\nkk = 1\n").expect("w");
    let out = run(situate(&index).args(["search", "energy"]), 1);
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown field"));
    std::fs::remove_file(tmp.path().join("situate.toml")).expect("rm");
    let out = run(
        situate(&index)
            .arg("ingest")
            .arg(fixtures().join("beir"))
            .args(["--max-tokens", "8", "--overlap", "8"]),
        1,
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("overlap"));
    let out = run(
        situate(&index)
            .arg("ingest")
            .arg(fixtures().join("beir"))
            .args(["--context", "magic"]),
        1,
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown context method"));
}

/// A chunk longer than the embedder reads is never cut silently: the ingest report and
/// `stats` say how many texts and tokens were cut (all-MiniLM-L6-v2 reads 256 tokens), and
/// the same text under EmbeddingGemma (2,048 tokens) is not cut.
#[test]
fn inputs_longer_than_the_embedders_window_are_counted_not_cut_silently() {
    let tmp = tempfile::tempdir().expect("tmp");
    let docs = tmp.path().join("long");
    std::fs::create_dir_all(&docs).expect("mkdir");
    let long: String = (0..80)
        .map(|i| format!("Sentence {i} of the maintenance log says the pump ran for {i} hours. "))
        .collect();
    std::fs::write(docs.join("log.txt"), &long).expect("w");
    std::fs::write(docs.join("short.txt"), "The pump was serviced in May.").expect("w");
    let ingest = |index: &Path, embedder: &str| {
        json(
            situate(index)
                .arg("--offline")
                .arg("ingest")
                .arg(&docs)
                .args(["--embedder", embedder, "--max-tokens", "2000"]),
            0,
        )
    };
    let index = tmp.path().join("minilm");
    let v = ingest(&index, "all-minilm-l6-v2");
    let cut = &v["report"]["embed_cut"];
    assert_eq!(cut["texts"], 1, "{v:#}");
    assert_eq!(cut["window"], 256, "{v:#}");
    let (tokens, lost) = (
        cut["input_tokens"].as_u64().expect("n"),
        cut["tokens"].as_u64().expect("n"),
    );
    assert!(tokens > 800 && lost == tokens - 256, "{v:#}");
    let stats = consistent_stats(&index);
    assert_eq!(stats["stats"]["embed_cut"]["texts"], 1, "{stats:#}");
    assert_eq!(stats["stats"]["embed_cut"]["tokens"], lost, "{stats:#}");
    let out = run(situate(&index).arg("stats"), 0);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("1 of 2 texts were longer than") && text.contains(&lost.to_string()),
        "{text}"
    );
    // Ingested again, nothing is embedded, and stats still knows.
    let again = ingest(&index, "all-minilm-l6-v2");
    assert_eq!(again["report"]["embed_cut"]["texts"], 0, "{again:#}");
    assert_eq!(consistent_stats(&index)["stats"]["embed_cut"]["texts"], 1);

    let index = tmp.path().join("gemma");
    let v = ingest(&index, "embeddinggemma-300m:128");
    assert_eq!(v["report"]["embed_cut"]["texts"], 0, "{v:#}");
    assert_eq!(consistent_stats(&index)["stats"]["embed_cut"]["texts"], 0);
}
