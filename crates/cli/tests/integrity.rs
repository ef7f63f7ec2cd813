//! Damaged files, damaged as a disk or a bad copy would: each part's damage is named, with
//! the fix that part takes (`situate rebuild` for a derived index; never for the store,
//! the source of truth), and `situate check` tells them apart.

use crate::*;
use std::fs;

/// Flips every bit of the byte at `at` (clamped to the file).
fn flip(path: &Path, at: usize) {
    let mut bytes = fs::read(path).expect("read");
    let i = at.min(bytes.len() - 1);
    bytes[i] ^= 0xff;
    fs::write(path, bytes).expect("write");
}

/// The one file of `dir` whose name ends with `suffix`.
fn file_ending(dir: &Path, suffix: &str) -> PathBuf {
    let found: Vec<PathBuf> = fs::read_dir(dir)
        .expect("read dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    assert_eq!(found.len(), 1, "{suffix} in {}: {found:?}", dir.display());
    found[0].clone()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn damaged_bm25_files_are_caught_on_open_and_rebuilt() {
    // A flipped byte in `.term` failed every search with tantivy's "Unsupported fst
    // version"; in `.fieldnorm` it changed scores silently; `stats` said all was well.
    for ext in ["term", "fieldnorm"] {
        let (_tmp, index) = indexed_corpus("hash:64");
        let before = search_ids(&index, "install the package", &[]);
        assert!(!before.is_empty());
        let file = file_ending(&index.join("bm25-1"), &format!(".{ext}"));
        let name = file
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let len = fs::metadata(&file).expect("metadata").len() as usize;
        flip(&file, len / 2);

        for args in [
            &["search", "install the package", "--mode", "bm25"][..],
            &["stats"][..],
        ] {
            let out = run(situate(&index).args(args), 1);
            let err = stderr(&out);
            assert!(
                err.contains("the BM25 index (bm25-1) is damaged")
                    && err.contains(&name)
                    && err.contains("`situate rebuild`"),
                "{args:?} ({ext}): {err}"
            );
        }
        let v = json(situate(&index).arg("check"), 1);
        assert_eq!(v["healthy"], false, "{v:#}");
        assert_eq!(v["store"]["state"], "ok", "{v:#}");
        assert_eq!(v["bm25"]["state"], "damaged", "{v:#}");
        assert!(
            v["bm25"]["found"][0]
                .as_str()
                .is_some_and(|f| f.contains(&name) && f.contains("checksum")),
            "{v:#}"
        );
        assert!(
            v["fix"]
                .as_str()
                .is_some_and(|f| f.contains("situate rebuild"))
        );
        // `stats --verify` on an index that cannot open gives the same report.
        let out = run(situate(&index).args(["stats", "--verify"]), 1);
        assert!(
            stdout(&out).contains("bm25        DAMAGED bm25-1"),
            "{}",
            stdout(&out)
        );

        run(situate(&index).arg("rebuild"), 0);
        let v = json(situate(&index).arg("check"), 0);
        assert_eq!(v["healthy"], true, "{v:#}");
        assert!(
            !index.join("bm25-1").exists(),
            "the damaged index is removed"
        );
        assert_eq!(search_ids(&index, "install the package", &[]), before);
    }
}

#[test]
fn a_damaged_vector_snapshot_is_reloaded_from_the_cache_and_rewritten() {
    let (_tmp, index) = indexed_corpus("hash:64");
    let vector = ["--mode", "vector"];
    let before = search_ids(&index, "install the package", &vector);
    let snapshot = file_ending(&index, ".flat");
    let len = fs::metadata(&snapshot).expect("metadata").len() as usize;
    flip(&snapshot, len / 2);
    // Searches answer as before, from the embedding cache.
    assert_eq!(search_ids(&index, "install the package", &vector), before);
    let v = json(situate(&index).arg("check"), 1);
    assert_eq!(v["vectors"]["state"], "reloaded", "{v:#}");
    assert!(
        v["vectors"]["found"][0]
            .as_str()
            .is_some_and(|f| f.contains("checksum")),
        "{v:#}"
    );
    assert!(
        v["fix"]
            .as_str()
            .is_some_and(|f| f.contains("situate rebuild"))
    );
    run(situate(&index).arg("rebuild"), 0);
    assert_eq!(json(situate(&index).arg("check"), 0)["healthy"], true);
    assert_eq!(search_ids(&index, "install the package", &vector), before);
}

/// An index of `n` generated documents, enough for the store's chunk table to span many
/// pages.
fn generated_index(n: usize) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tmp");
    let docs = tmp.path().join("docs");
    fs::create_dir(&docs).expect("mkdir");
    for i in 0..n {
        let body: String = (0..6)
            .map(|p| {
                format!(
                    "Paragraph {p} of report {i}: the turbine in hall {i} ran for {} hours before its bearing number {p} was replaced.\n\n",
                    100 + i * 7 + p
                )
            })
            .collect();
        fs::write(
            docs.join(format!("r{i:03}.md")),
            format!("# Report {i}\n\n{body}"),
        )
        .expect("write");
    }
    let index = tmp.path().join("idx");
    run(
        situate(&index).arg("ingest").arg(&docs).args([
            "--max-tokens",
            "40",
            "--overlap",
            "0",
            "--embedder",
            "hash:64",
        ]),
        0,
    );
    (tmp, index)
}

/// Lowers the cell count of one leaf page of the store's `chunks` table by one, as a torn
/// or bit-rotted page might: that card is gone from every scan, silently, while the
/// table's indexes still count it.
fn drop_a_card_from_a_leaf(db: &Path) {
    let (page_size, root): (usize, usize) = {
        let c =
            rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .expect("open");
        let ps: i64 = c
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .expect("page size");
        let root: i64 = c
            .query_row(
                "SELECT rootpage FROM sqlite_master WHERE name = 'chunks'",
                [],
                |r| r.get(0),
            )
            .expect("root page");
        (ps as usize, root as usize)
    };
    let mut b = fs::read(db).expect("read");
    let at = |page: usize| (page - 1) * page_size;
    let u16_at = |b: &[u8], i: usize| u16::from_be_bytes([b[i], b[i + 1]]) as usize;
    let root_at = at(root);
    assert_eq!(
        b[root_at], 0x05,
        "the chunks table's root is an interior page"
    );
    let first_cell = root_at + u16_at(&b, root_at + 12);
    let child = u32::from_be_bytes([
        b[first_cell],
        b[first_cell + 1],
        b[first_cell + 2],
        b[first_cell + 3],
    ]) as usize;
    let leaf = at(child);
    assert_eq!(b[leaf], 0x0d, "its first child is a leaf");
    let cells = u16_at(&b, leaf + 3);
    assert!(cells > 1);
    b[leaf + 3..leaf + 5].copy_from_slice(&((cells - 1) as u16).to_be_bytes());
    fs::write(db, b).expect("write");
}

#[test]
fn a_damaged_store_is_named_and_never_rebuilt_from_itself() {
    let (_tmp, index) = generated_index(60);
    let chunks = consistent_stats(&index)["stats"]["store"]["chunks"]
        .as_u64()
        .expect("chunks");
    drop_a_card_from_a_leaf(&index.join("cards.db"));

    // `stats` sees one card fewer than the indexes hold; it used to advise a rebuild,
    // which would have made the indexes from the damaged store.
    let v = json(situate(&index).arg("stats"), 1);
    assert_eq!(v["consistency"]["store_chunks"], chunks - 1, "{v:#}");
    let out = run(situate(&index).arg("stats"), 1);
    let text = stdout(&out);
    assert!(text.contains("run `situate check`"), "{text}");
    assert!(!text.contains("situate rebuild"), "{text}");

    for quick in [false, true] {
        let mut cmd = situate(&index);
        cmd.arg("check");
        if quick {
            cmd.arg("--quick");
        }
        let v = json(&mut cmd, 1);
        assert_eq!(v["store"]["state"], "damaged", "{v:#}");
        assert_eq!(v["full"], !quick);
        assert!(!v["store"]["found"].as_array().expect("found").is_empty());
        assert_eq!(v["bm25"]["state"], "ok", "{v:#}");
        assert!(v["consistency"].is_null(), "{v:#}");
        let fix = v["fix"].as_str().expect("fix");
        assert!(
            fix.contains("never rebuilt from itself") && fix.contains("situate restore"),
            "{fix}"
        );
    }
    let out = run(situate(&index).args(["stats", "--verify"]), 1);
    assert!(
        stdout(&out).contains("store       DAMAGED cards.db"),
        "{}",
        stdout(&out)
    );

    // A rebuild refuses, and leaves the indexes as they were.
    let out = run(situate(&index).arg("rebuild"), 1);
    let err = stderr(&out);
    assert!(
        err.contains("the card store (cards.db) is damaged")
            && err.contains("never rebuilt from itself"),
        "{err}"
    );
    assert!(index.join("bm25-1").is_dir() && !index.join("bm25-2").exists());
}

#[test]
fn every_card_of_a_split_table_has_a_vector() {
    // A table cut into pieces repeats its header row in each later piece's original. The
    // ingest used to embed the bare span, so those cards had no vector and no cached
    // embedding, and the check did not count them.
    let tmp = tempfile::tempdir().expect("tmp");
    let docs = tmp.path().join("docs");
    fs::create_dir(&docs).expect("mkdir");
    let rows: String = (0..80)
        .map(|i| {
            format!(
                "| pump {i} | station {} | {} litres a minute |\n",
                i % 7,
                40 + i
            )
        })
        .collect();
    fs::write(
        docs.join("pumps.md"),
        format!("# Pumps\n\n| pump | station | flow |\n|---|---|---|\n{rows}"),
    )
    .expect("write");
    let index = tmp.path().join("idx");
    run(
        situate(&index).arg("ingest").arg(&docs).args([
            "--max-tokens",
            "60",
            "--embedder",
            "hash:64",
        ]),
        0,
    );
    let v = consistent_stats(&index);
    let chunks = v["stats"]["store"]["chunks"].as_u64().expect("chunks");
    assert!(chunks > 3, "the table is split: {v:#}");
    assert_eq!(v["consistency"]["unembedded"], 0, "{v:#}");
    assert_eq!(v["stats"]["vectors"], chunks, "{v:#}");
    // A rebuild finds nothing to embed.
    let r = json(situate(&index).arg("rebuild"), 0);
    assert_eq!(r["embedded"], 0, "{r:#}");
}

#[test]
fn a_damaged_store_is_salvaged_and_its_contexts_are_not_paid_for_again() {
    let server = crate::store::fake_anthropic(std::time::Duration::ZERO);
    let llm = format!(
        "anthropic:claude-test?base_url={}&concurrency=1&retries=1",
        server.url()
    );
    let tmp = tempfile::tempdir().expect("tmp");
    let docs = tmp.path().join("docs");
    crate::store::write_corpus(&docs, 60, "salvage");
    let ingest = |index: &Path| {
        let mut c = situate(index);
        c.env("ANTHROPIC_API_KEY", "k")
            .env_remove("ANTHROPIC_BASE_URL")
            .arg("ingest")
            .arg(&docs)
            .args(["--context", "llm", "--llm", &llm, "--embedder", "hash:64"])
            .args(["--max-tokens", "40", "--overlap", "0"]);
        c
    };
    let damaged = tmp.path().join("damaged");
    let v = json(&mut ingest(&damaged), 0);
    let chunks = v["report"]["chunks"].as_u64().expect("chunks");
    let paid = server.calls();
    assert!(paid >= chunks as usize, "{paid} calls for {chunks} chunks");
    drop_a_card_from_a_leaf(&damaged.join("cards.db"));
    assert_eq!(
        json(situate(&damaged).arg("check"), 1)["store"]["state"],
        "damaged"
    );

    let fresh = tmp.path().join("fresh");
    let v = json(situate(&damaged).arg("salvage").arg(&fresh), 0);
    assert_eq!(v["salvaged"]["contexts"], chunks, "{v:#}");
    assert_eq!(v["salvaged"]["embeddings"], chunks, "{v:#}");
    assert!(v["next"].as_str().is_some_and(|n| n.contains("ingest")));
    // Salvage reads the damaged index only, and refuses a directory with an index.
    run(situate(&damaged).arg("salvage").arg(&fresh), 1);

    let v = json(&mut ingest(&fresh), 0);
    assert_eq!(v["report"]["chunks"], chunks, "{v:#}");
    assert_eq!(
        server.calls(),
        paid,
        "a salvaged context was paid for again"
    );
    let check = json(situate(&fresh).arg("check"), 0);
    assert_eq!(check["healthy"], true, "{check:#}");
    let status = json(situate(&fresh).arg("status"), 0);
    assert_eq!(
        status["context_status"],
        serde_json::json!([["verified", chunks]]),
        "{status:#}"
    );
}
