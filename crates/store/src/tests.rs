use super::*;
use situate_core::{ContextStatus, DocKind, Document, DocumentFilter, Provenance};

fn doc(id: &str, text: &str) -> Document {
    Document {
        id: id.into(),
        source: format!("{id}.txt"),
        title: Some("T".into()),
        language: Language::En,
        kind: DocKind::Text,
        text: text.into(),
        content_hash: situate_core::content_hash(text.as_bytes()),
        metadata: Default::default(),
        preset_chunks: None,
        layout: Default::default(),
    }
}

fn put(store: &mut Store, d: &Document, parts: &[&str], ctx: &ChunkContext) -> u64 {
    let chunks: Vec<NewChunk<'_>> = parts
        .iter()
        .enumerate()
        .map(|(i, p)| NewChunk {
            chunk_id: format!("{}#{i}", d.id),
            ordinal: i as u32,
            char_start: 0,
            char_end: p.chars().count(),
            heading_path: &[],
            kind: Default::default(),
            place: None,
            original_text: p,
            context: ctx,
        })
        .collect();
    let mut b = store.batch().expect("batch");
    b.put_document(d, "key", &chunks).expect("put");
    b.commit().expect("commit")
}

#[test]
fn replacing_a_document_replaces_its_chunks_and_journals_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut s = Store::open(&dir.path().join("s.db")).expect("open");
    let d = doc("a", "one two three");
    assert_eq!(
        put(&mut s, &d, &["one", "two", "three"], &ChunkContext::none()),
        1
    );
    assert_eq!(s.index_rows_of("a").expect("rows").len(), 3);
    let g = put(&mut s, &d, &["only"], &ChunkContext::none());
    assert_eq!(g, 2);
    let rows = s.index_rows_of("a").expect("rows");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].original, "only");
    assert_eq!(
        s.journal_after(0).expect("journal"),
        vec![("a".to_string(), 2)]
    );
    s.trim_journal(2).expect("trim");
    assert!(s.journal_after(0).expect("journal").is_empty());
    assert_eq!(s.stats().expect("stats").chunks, 1);
}

#[test]
fn uncommitted_batches_leave_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut s = Store::open(&dir.path().join("s.db")).expect("open");
    {
        let mut b = s.batch().expect("batch");
        b.put_document(&doc("a", "x"), "k", &[]).expect("put");
        // dropped without commit
    }
    assert_eq!(s.document_state("a").expect("state"), None);
    assert_eq!(s.generation().expect("gen"), 0);
}

#[test]
fn only_indexed_statuses_reach_the_index_rows() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut s = Store::open(&dir.path().join("s.db")).expect("open");
    let prov = Provenance {
        method: situate_core::ContextMethod::Structural,
        model: None,
        prompt_version: None,
        input_hash: "h".into(),
        strategy: Some("whole".into()),
        parts: vec![],
    };
    let good = ChunkContext {
        text: Some("ctx".into()),
        status: ContextStatus::Generated,
        provenance: Some(prov.clone()),
        notes: vec![],
    };
    let bad = ChunkContext {
        text: Some("wrong".into()),
        status: ContextStatus::Rejected,
        provenance: Some(prov),
        notes: vec!["made up".into()],
    };
    put(&mut s, &doc("g", "x"), &["x"], &good);
    put(&mut s, &doc("r", "y"), &["y"], &bad);
    assert_eq!(
        s.index_rows_of("g").expect("rows")[0].context.as_deref(),
        Some("ctx")
    );
    assert_eq!(s.index_rows_of("r").expect("rows")[0].context, None);
    let card = s
        .card_by_chunk_id("r#0")
        .expect("read")
        .expect("exists")
        .card;
    assert_eq!(card.generated_context.as_deref(), Some("wrong"));
    assert_eq!(card.context_notes, vec!["made up"]);
    assert_eq!(
        card.provenance.map(|p| p.method),
        Some(situate_core::ContextMethod::Structural)
    );
}

#[test]
fn chunk_ids_are_unique_across_documents() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut s = Store::open(&dir.path().join("s.db")).expect("open");
    put(&mut s, &doc("a", "x"), &["x"], &ChunkContext::none());
    let d = doc("b", "y");
    let ctx = ChunkContext::none();
    let chunk = NewChunk {
        chunk_id: "a#0".into(),
        ordinal: 0,
        char_start: 0,
        char_end: 1,
        heading_path: &[],
        kind: Default::default(),
        place: None,
        original_text: "y",
        context: &ctx,
    };
    let mut b = s.batch().expect("batch");
    let err = b
        .put_document(&d, "k", &[chunk])
        .expect_err("duplicate chunk id");
    assert!(err.to_string().contains("already used"), "{err}");
}

#[test]
fn removal_and_reopen() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("s.db");
    {
        let mut s = Store::open(&path).expect("open");
        put(&mut s, &doc("a", "x"), &["x"], &ChunkContext::none());
        let mut b = s.batch().expect("batch");
        assert!(b.remove_document("a").expect("rm"));
        assert!(!b.remove_document("nope").expect("rm"));
        b.commit().expect("commit");
    }
    let s = Store::open(&path).expect("reopen");
    assert_eq!(s.document("a").expect("read"), None);
    assert_eq!(s.generation().expect("gen"), 2);
    assert_eq!(
        s.journal_after(1).expect("journal"),
        vec![("a".to_string(), 2)]
    );
}

#[test]
fn timestamps_are_rfc3339() {
    let t = now_rfc3339();
    assert_eq!(t.len(), 20);
    assert!(t.starts_with("20") && t.ends_with('Z'));
}

#[test]
fn a_store_of_another_format_version_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("s.db");
    drop(Store::open(&path).expect("create"));
    let conn = rusqlite::Connection::open(&path).expect("raw");
    conn.execute(
        "UPDATE meta SET value = '99' WHERE key = 'format_version'",
        [],
    )
    .expect("set");
    drop(conn);
    let err = Store::open(&path).err().expect("refused").to_string();
    assert!(err.contains("format version 99"), "{err}");
}

#[test]
fn version_1_to_6_stores_are_upgraded_in_place() {
    for (from, downgrade) in [
        (
            "1",
            "DROP TABLE embeddings; DROP TABLE card_journal; DROP TABLE context_cache;
             ALTER TABLE chunks DROP COLUMN context_strategy; ALTER TABLE chunks DROP COLUMN context_parts;",
        ),
        (
            "2",
            "DROP TABLE context_cache; ALTER TABLE chunks DROP COLUMN context_strategy;
             ALTER TABLE chunks DROP COLUMN context_parts;",
        ),
        (
            "3",
            "ALTER TABLE chunks DROP COLUMN context_parts; ALTER TABLE context_cache DROP COLUMN parts;",
        ),
        ("4", ""),
        ("5", ""),
        ("6", "DROP TABLE embedding_cuts;"),
    ] {
        // Versions before 5 also lack version 5's columns; versions 2 to 5 have the embedding
        // cache in its old layout (a WITHOUT ROWID table), with a vector to carry over.
        let v5 = if from == "5" || from == "6" {
            ""
        } else {
            "ALTER TABLE chunks DROP COLUMN card_kind; ALTER TABLE chunks DROP COLUMN place;"
        };
        let old_cache = if from == "1" || from == "6" {
            ""
        } else {
            "DROP TABLE embeddings;
             CREATE TABLE embeddings (model TEXT NOT NULL, text_hash TEXT NOT NULL,
                 vector BLOB NOT NULL, PRIMARY KEY (model, text_hash)) WITHOUT ROWID;
             INSERT INTO embeddings VALUES ('m', 'kept', X'0000803F');"
        };
        let downgrade = format!("{downgrade} {v5} {old_cache}");
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("s.db");
        {
            let mut s = Store::open(&path).expect("create");
            put(&mut s, &doc("a", "one"), &["one"], &ChunkContext::none());
        }
        // Make it an older store: without the tables and columns that came later.
        let conn = rusqlite::Connection::open(&path).expect("raw");
        conn.execute_batch(&format!(
            "{downgrade} UPDATE meta SET value = '{from}' WHERE key = 'format_version';"
        ))
        .expect("downgrade");
        drop(conn);
        let mut s = Store::open(&path).expect("upgraded");
        assert_eq!(
            s.meta("format_version").expect("meta").as_deref(),
            Some("7")
        );
        // Version 7's table is there: a cut input is recorded and read back.
        s.record_cuts("m", &[("long", 300, 44)]).expect("record");
        assert_eq!(s.embedding_cuts("m").expect("read")["long"], (300, 44), "v{from}");
        if from != "1" && from != "6" {
            let kept = s.embeddings("m", &["kept"]).expect("read");
            assert_eq!(kept["kept"], vec![1.0], "a cached vector survives (v{from})");
            // The old cache's pages went back to the file system.
            let free: i64 = s
                .conn
                .query_row("PRAGMA freelist_count", [], |r| r.get(0))
                .expect("freelist");
            assert_eq!(free, 0, "v{from}");
        }
        assert_eq!(s.stats().expect("stats").chunks, 1, "the cards survive");
        let old = s.cards_of("a").expect("cards").remove(0);
        assert_eq!(
            (old.kind, old.place),
            (situate_core::CardKind::Text, None),
            "an old card reads as text without a place (v{from})"
        );
        s.cache_embeddings("m", &[("h", &[0.5, -1.0][..])])
            .expect("cache");
        let got = s.embeddings("m", &["h", "other"]).expect("read");
        assert_eq!(got.len(), 1);
        assert_eq!(got["h"], vec![0.5, -1.0]);
        assert_eq!(s.cards_of("a").expect("cards").len(), 1, "v{from}");
        // The columns of version 4 are there: a composed context keeps its parts.
        let composed = composed_context();
        put(&mut s, &doc("b", "two"), &["two"], &composed);
        let card = s.cards_of("b").expect("cards").remove(0);
        assert_eq!(card.provenance, composed.provenance, "v{from}");
        let w = s.context_cache_writer().expect("writer");
        w.put("k", &composed, &Default::default()).expect("cache");
        let cached = s.cached_contexts(&["k"]).expect("read");
        assert_eq!(
            cached["k"].provenance.as_ref().map(|p| &p.parts),
            composed.provenance.as_ref().map(|p| &p.parts)
        );
    }
}

/// A cached 384-dimension vector (1,536 bytes) stays on its row's page: 300 of them take
/// about 120 pages of 4 KB, where the WITHOUT ROWID layout of versions 2–5 took two pages
/// each (a row past about 1 KB overflows to a page of its own).
#[test]
fn cached_vectors_do_not_overflow_their_pages() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("s.db");
    let mut s = Store::open(&path).expect("create");
    let pages = |s: &Store| -> i64 {
        s.conn
            .query_row("PRAGMA page_count", [], |r| r.get(0))
            .expect("page count")
    };
    let before = pages(&s);
    let v: Vec<f32> = (0..384).map(|i| i as f32 / 384.0).collect();
    let hashes: Vec<String> = (0..300).map(|i| format!("{i:064x}")).collect();
    let items: Vec<(&str, &[f32])> = hashes.iter().map(|h| (h.as_str(), &v[..])).collect();
    s.cache_embeddings("all-minilm-l6-v2@0.1.0", &items)
        .expect("cache");
    s.conn
        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .expect("checkpoint");
    let used = pages(&s) - before;
    assert!(
        (100..=200).contains(&used),
        "300 vectors of 1,536 bytes took {used} pages of 4 KB"
    );
    let back = s
        .embeddings("all-minilm-l6-v2@0.1.0", &[hashes[7].as_str()])
        .expect("read");
    assert_eq!(back[&hashes[7]], v);
}

/// A context put together from a document description and a structural part.
fn composed_context() -> ChunkContext {
    use situate_core::{ContextPart, PartKind};
    let text = "Acme's Q2 report. From report.md, section Europe.";
    ChunkContext {
        text: Some(text.into()),
        status: ContextStatus::Verified,
        provenance: Some(Provenance {
            method: situate_core::ContextMethod::Document,
            model: Some("local:qwen".into()),
            prompt_version: Some("describe-v1".into()),
            input_hash: "k".into(),
            strategy: Some("whole".into()),
            parts: vec![
                ContextPart {
                    kind: PartKind::Document,
                    start: 0,
                    end: 17,
                    model: Some("local:qwen".into()),
                    prompt_version: Some("describe-v1".into()),
                    input_hash: Some("d".into()),
                    strategy: Some("whole".into()),
                },
                ContextPart {
                    kind: PartKind::Structural,
                    start: 18,
                    end: text.len(),
                    model: None,
                    prompt_version: Some("structural-v1".into()),
                    input_hash: None,
                    strategy: None,
                },
            ],
        }),
        notes: vec![],
    }
}

#[test]
fn replaced_and_removed_cards_are_journaled_by_key_and_filters_select_cards() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut s = Store::open(&dir.path().join("s.db")).expect("open");
    let mut a = doc("docs/a", "one two");
    a.metadata.insert("team".into(), "ops".into());
    put(&mut s, &a, &["one", "two"], &ChunkContext::none());
    put(
        &mut s,
        &doc("b", "three"),
        &["three"],
        &ChunkContext::none(),
    );
    let old: Vec<u64> = s
        .index_rows_of("docs/a")
        .expect("rows")
        .iter()
        .map(|r| r.card)
        .collect();
    assert!(s.removed_cards_after(0).expect("journal").is_empty());
    put(&mut s, &a, &["one two"], &ChunkContext::none()); // generation 3 replaces a's cards
    let mut removed = s.removed_cards_after(2).expect("journal");
    removed.sort_unstable();
    assert_eq!(removed, old);
    let filter = |f: DocumentFilter| s.filter_cards(&f).expect("filter").len();
    assert_eq!(filter(DocumentFilter::default()), 2);
    let by_meta = DocumentFilter {
        metadata: vec![("team".into(), "ops".into())],
        ..Default::default()
    };
    assert_eq!(filter(by_meta), 1);
    let by_glob = DocumentFilter {
        path_globs: vec!["docs/*".into()],
        document_ids: vec!["docs/a".into(), "b".into()],
        ..Default::default()
    };
    assert_eq!(filter(by_glob), 1, "every part must match");
    s.trim_journal(3).expect("trim");
    assert!(s.removed_cards_after(0).expect("journal").is_empty());
}

#[test]
fn a_cached_context_takes_a_new_verdict_and_keeps_the_rest() {
    let dir = tempfile::tempdir().expect("tmp");
    let s = Store::open(&dir.path().join("s.db")).expect("open");
    let w = s.context_cache_writer().expect("writer");
    let prov = situate_core::Provenance {
        method: situate_core::ContextMethod::Llm,
        model: Some("local:test".into()),
        prompt_version: Some("anthropic-v1".into()),
        input_hash: "h1".into(),
        strategy: Some("whole".into()),
        parts: vec![],
    };
    let verified = ChunkContext {
        text: Some("A context.".into()),
        status: ContextStatus::Verified,
        provenance: Some(prov.clone()),
        notes: vec![],
    };
    let usage = situate_core::TokenUsage {
        input_tokens: 10,
        output_tokens: 3,
        ..Default::default()
    };
    w.put("h1", &verified, &usage).expect("put");
    let rejected = ChunkContext {
        status: ContextStatus::Rejected,
        notes: vec!["chatter".into()],
        ..verified.clone()
    };
    w.set_verdict("h1", &rejected).expect("verdict");
    w.set_verdict("not-cached", &rejected)
        .expect("no error for a hash not cached");
    let got = s.cached_contexts(&["h1"]).expect("read");
    let c = &got["h1"];
    assert_eq!(c.status, ContextStatus::Rejected);
    assert_eq!(c.notes, ["chatter"]);
    assert_eq!(
        c.provenance.as_ref().and_then(|p| p.model.as_deref()),
        Some("local:test")
    );
}

#[test]
fn documents_are_listed_page_by_page_in_id_order() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut s = Store::open(&dir.path().join("s.db")).expect("open");
    for id in ["c", "a", "e", "b", "d"] {
        put(&mut s, &doc(id, "text"), &["text"], &ChunkContext::none());
    }
    let ids = |page: Vec<StoredDocument>| page.into_iter().map(|d| d.id).collect::<Vec<_>>();
    assert_eq!(ids(s.documents_after(None, 2).expect("page")), ["a", "b"]);
    assert_eq!(
        ids(s.documents_after(Some("b"), 2).expect("page")),
        ["c", "d"]
    );
    // A document removed before the cursor does not shift the next page.
    let mut b = s.batch().expect("batch");
    assert!(b.remove_document("a").expect("remove"));
    b.commit().expect("commit");
    assert_eq!(ids(s.documents_after(Some("d"), 2).expect("page")), ["e"]);
    assert!(s.documents_after(Some("e"), 2).expect("page").is_empty());
    // A cursor that is no document id still orders.
    assert_eq!(ids(s.documents_after(Some("bb"), 1).expect("page")), ["c"]);
}

#[test]
fn cards_are_listed_by_status_page_by_page() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut s = Store::open(&dir.path().join("s.db")).expect("open");
    put(
        &mut s,
        &doc("b", "x"),
        &["b0", "b1", "b2"],
        &ChunkContext::none(),
    );
    put(&mut s, &doc("a", "x"), &["a0", "a1"], &composed_context());
    let ids = |v: Vec<situate_core::CardRecord>| {
        v.into_iter().map(|r| r.card.chunk_id).collect::<Vec<_>>()
    };
    assert_eq!(
        ids(s.cards_with_status_after(&[], None, 3).expect("page")),
        ["a#0", "a#1", "b#0"]
    );
    assert_eq!(
        ids(s
            .cards_with_status_after(&[], Some(("a", 1)), 10)
            .expect("page")),
        ["b#0", "b#1", "b#2"]
    );
    let status = composed_context().status;
    assert_eq!(
        ids(s
            .cards_with_status_after(&[status], None, 10)
            .expect("page")),
        ["a#0", "a#1"]
    );
    assert_eq!(
        ids(s
            .cards_with_status_after(&[ContextStatus::Pending, status], Some(("a", 0)), 2)
            .expect("page")),
        ["a#1", "b#0"]
    );
}

#[test]
fn the_embedded_store_keeps_the_store_contract() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut s = Store::open(&dir.path().join("s.db")).expect("open");
    crate::contract::check(&mut s);
}

#[test]
fn verify_finds_a_page_whose_cells_went_missing_and_copy_to_is_sound() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("cards.db");
    {
        let mut store = Store::open(&path).expect("open");
        let ctx = ChunkContext {
            text: None,
            status: ContextStatus::Pending,
            provenance: None,
            notes: vec![],
        };
        for i in 0..40 {
            let text = format!("report {i}: ").repeat(40);
            let parts: Vec<String> = (0..4).map(|p| format!("{p} {text}")).collect();
            let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
            put(&mut store, &doc(&format!("d{i}"), &text), &parts, &ctx);
        }
        assert_eq!(store.verify(true).expect("verify"), Vec::<String>::new());
        // The copy is the store as of its last commit, and sound.
        let copy = dir.path().join("copy.db");
        store.copy_to(&copy).expect("copy");
        let copied = Store::open(&copy).expect("open copy");
        assert_eq!(copied.verify(true).expect("verify"), Vec::<String>::new());
        assert_eq!(
            copied.stats().expect("stats"),
            store.stats().expect("stats")
        );
        assert!(
            store.copy_to(&copy).is_err(),
            "an existing file is not overwritten"
        );
    }
    // One leaf of the chunks table loses its last cell, as a torn page might.
    let (page_size, root) = {
        let c = Connection::open(&path).expect("open");
        let ps: i64 = c
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .expect("ps");
        let root: i64 = c
            .query_row(
                "SELECT rootpage FROM sqlite_master WHERE name = 'chunks'",
                [],
                |r| r.get(0),
            )
            .expect("root");
        (ps as usize, root as usize)
    };
    let mut b = std::fs::read(&path).expect("read");
    let at = (root - 1) * page_size;
    assert_eq!(b[at], 0x05, "an interior root");
    let cell = at + u16::from_be_bytes([b[at + 12], b[at + 13]]) as usize;
    let child = u32::from_be_bytes([b[cell], b[cell + 1], b[cell + 2], b[cell + 3]]) as usize;
    let leaf = (child - 1) * page_size;
    let cells = u16::from_be_bytes([b[leaf + 3], b[leaf + 4]]);
    b[leaf + 3..leaf + 5].copy_from_slice(&(cells - 1).to_be_bytes());
    std::fs::write(&path, b).expect("write");
    let store = Store::open(&path).expect("open");
    for full in [false, true] {
        let found = store.verify(full).expect("verify");
        assert!(!found.is_empty(), "full {full}");
        assert!(found.iter().all(|f| !f.starts_with("***")), "{found:?}");
    }
}
