use super::*;
use situate_search::SearchRequest;
use std::path::PathBuf;

fn opts(method: &str) -> IngestOptions {
    let mut o = IngestOptions::new(situate_contextualize::by_name(method).expect("method"));
    o.batch_documents = 2;
    o
}

fn search(e: &Engine, q: &str) -> Vec<Hit> {
    let mut req = SearchRequest::new(q, 5);
    req.context_weight = 1.0;
    req.mode = Some(Mode::Bm25);
    e.search(&req).expect("search")
}

fn search_mode(e: &Engine, q: &str, mode: Mode, filter: &DocumentFilter) -> Vec<Hit> {
    let mut req = SearchRequest::new(q, 5);
    req.mode = Some(mode);
    e.search_filtered(&req, filter).expect("search")
}

/// An index whose vectors come from the hashing embedder (no model needed).
fn hashed(backend: Backend) -> CreateSettings {
    CreateSettings {
        embedder: "hash:64".into(),
        vector_index: backend,
        ..CreateSettings::default()
    }
}

fn ids(hits: &[Hit]) -> Vec<&str> {
    hits.iter().map(|h| h.document_id.as_str()).collect()
}

fn corpus(dir: &Path) -> PathBuf {
    let root = dir.join("notes");
    std::fs::create_dir_all(&root).expect("mkdir");
    std::fs::write(
        root.join("a.md"),
        "# Zebras\n\nThey have stripes and live in Africa.",
    )
    .expect("w");
    std::fs::write(
        root.join("b.txt"),
        "Penguins cannot fly but swim very well.",
    )
    .expect("w");
    std::fs::write(root.join("c.txt"), "Owls hunt at night.").expect("w");
    root
}

#[test]
fn ingest_search_reingest_replace_remove() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = corpus(tmp.path());
    let idx = tmp.path().join("idx");
    let mut e = Engine::create(&idx, hashed(Backend::Auto)).expect("create");
    let r = e
        .ingest(std::slice::from_ref(&root), opts("structural"), &mut |_| {})
        .expect("ingest");
    assert_eq!((r.added, r.replaced, r.unchanged), (3, 0, 0));
    // "zebras" is in the title, so the structural context of the chunk matches too.
    let hits = search(&e, "zebras");
    assert_eq!(hits[0].document_id, "notes/a.md");
    assert_eq!(
        hits[0].context.as_deref(),
        Some("From notes/a.md, section Zebras.")
    );
    assert!(e.check().expect("check").is_consistent());

    let r = e
        .ingest(std::slice::from_ref(&root), opts("structural"), &mut |_| {})
        .expect("again");
    assert_eq!((r.added, r.replaced, r.unchanged, r.chunks), (0, 0, 3, 0));
    let generation = e.store().generation().expect("gen");

    std::fs::write(
        root.join("b.txt"),
        "Penguins are birds of the southern hemisphere.",
    )
    .expect("w");
    let r = e
        .ingest(std::slice::from_ref(&root), opts("structural"), &mut |_| {})
        .expect("changed");
    assert_eq!((r.replaced, r.unchanged), (1, 2));
    assert!(e.store().generation().expect("gen") > generation);
    assert!(search(&e, "fly").is_empty());
    assert_eq!(search(&e, "hemisphere")[0].document_id, "notes/b.txt");

    // Changing the context method re-contextualizes every document.
    let r = e
        .ingest(std::slice::from_ref(&root), opts("none"), &mut |_| {})
        .expect("method");
    assert_eq!(r.replaced, 3);
    assert_eq!(search(&e, "zebras")[0].context, None);

    e.remove("notes/c.txt").expect("rm");
    assert!(search(&e, "owls").is_empty());
    assert!(matches!(
        e.remove("notes/c.txt"),
        Err(EngineError::NotFound(_))
    ));
    let c = e.check().expect("check");
    assert!(c.is_consistent(), "{c:?}");
    assert_eq!(c.store_chunks, 2);
}

#[test]
fn an_index_behind_the_store_catches_up_on_open() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = corpus(tmp.path());
    let idx = tmp.path().join("idx");
    {
        let mut e = Engine::create(&idx, hashed(Backend::Auto)).expect("create");
        e.ingest(std::slice::from_ref(&root), opts("none"), &mut |_| {})
            .expect("ingest");
    }
    // Simulate a crash between the store commit and the index commit: write to the store
    // alone, as a crashed writer would have left it.
    {
        let mut store = Store::open(&idx.join(STORE_FILE)).expect("store");
        let mut b = store.batch().expect("batch");
        assert!(b.remove_document("notes/a.md").expect("rm"));
        b.commit().expect("commit");
    }
    let e = Engine::open(&idx, Access::Read).expect("open");
    let c = e.check().expect("check");
    assert!(c.is_consistent(), "{c:?}");
    assert!(search(&e, "zebras").is_empty());
}

#[test]
fn rebuild_from_cards_gives_the_same_results_in_a_new_directory() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = corpus(tmp.path());
    let idx = tmp.path().join("idx");
    let mut e = Engine::create(&idx, hashed(Backend::Auto)).expect("create");
    e.ingest(std::slice::from_ref(&root), opts("structural"), &mut |_| {})
        .expect("ingest");
    let before: Vec<(String, f32)> = search(&e, "penguins swim")
        .into_iter()
        .map(|h| (h.chunk_id, h.score))
        .collect();
    let n = e.rebuild(&mut |_, _| {}).expect("rebuild");
    assert_eq!(n.chunks, 3);
    let after: Vec<(String, f32)> = search(&e, "penguins swim")
        .into_iter()
        .map(|h| (h.chunk_id, h.score))
        .collect();
    assert_eq!(before, after);
    assert!(idx.join("bm25-2").is_dir() && !idx.join("bm25-1").exists());
    drop(e);
    let e = Engine::open(&idx, Access::Read).expect("reopen");
    assert!(e.check().expect("check").is_consistent());
}

#[test]
fn a_second_writer_is_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let idx = tmp.path().join("idx");
    let _e = Engine::create(&idx, hashed(Backend::Auto)).expect("create");
    assert!(matches!(
        Engine::open(&idx, Access::Write),
        Err(EngineError::Locked(_))
    ));
    assert!(Engine::open(&idx, Access::Read).is_ok());
    assert!(matches!(
        Engine::open(&tmp.path().join("nope"), Access::Read),
        Err(EngineError::NoIndex(_))
    ));
}

#[test]
fn vectors_follow_the_store_through_replace_remove_and_reopen() {
    for backend in [Backend::Exact, Backend::Hnsw] {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = corpus(tmp.path());
        let idx = tmp.path().join("idx");
        let mut e = Engine::create(&idx, hashed(backend)).expect("create");
        let r = e
            .ingest(std::slice::from_ref(&root), opts("structural"), &mut |_| {})
            .expect("ingest");
        assert_eq!((r.embedded, r.embed_model.as_deref()), (3, Some("hash:64")));
        let none = DocumentFilter::default();
        assert_eq!(
            ids(&search_mode(&e, "owls hunt", Mode::Vector, &none))[0],
            "notes/c.txt"
        );
        // Replace c.txt: its old vector goes, the new one comes; nothing else is embedded.
        std::fs::write(root.join("c.txt"), "Bats hunt insects in the dark.").expect("w");
        let r = e
            .ingest(std::slice::from_ref(&root), opts("structural"), &mut |_| {})
            .expect("again");
        assert_eq!((r.replaced, r.unchanged, r.embedded), (1, 2, 1));
        let c = e.check().expect("check");
        assert!(c.is_consistent(), "{backend:?}: {c:?}");
        assert_eq!(c.vector_chunks, 3);
        assert_eq!(
            ids(&search_mode(&e, "bats insects", Mode::Vector, &none))[0],
            "notes/c.txt"
        );
        e.remove("notes/c.txt").expect("rm");
        assert!(e.check().expect("check").is_consistent());
        assert!(
            !ids(&search_mode(&e, "bats insects", Mode::Vector, &none)).contains(&"notes/c.txt")
        );
        drop(e);
        // A reader maps the snapshot as it is; the answers are the same.
        let e = Engine::open(&idx, Access::Read).expect("reopen");
        let c = e.check().expect("check");
        assert!(c.is_consistent(), "{backend:?}: {c:?}");
        assert_eq!(
            (c.vector_chunks, e.stats().expect("stats").vector_index),
            (2, Some(backend.as_str().to_string()))
        );
        let hits = search_mode(&e, "penguins swim", Mode::Hybrid, &none);
        assert_eq!(hits[0].document_id, "notes/b.txt");
        let legs: Vec<&str> = hits[0].legs.iter().map(|l| l.leg.as_str()).collect();
        assert_eq!(legs, vec!["bm25", "vector"]);
        assert!(hits[0].legs.iter().all(|l| l.rank == 1));
        assert!(
            (hits[0].score - 2.0 / 61.0).abs() < 1e-6,
            "RRF of two first ranks"
        );
        // Two documents' vectors: any index finds both of the exact top 2.
        let recall = e
            .vector_recall(&["penguins swim", "zebras", "night"], 2, 150)
            .expect("recall");
        assert_eq!(recall, 1.0, "{backend:?}");
    }
}

#[test]
fn a_crash_after_the_store_commit_is_replayed_into_the_vectors() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = corpus(tmp.path());
    let idx = tmp.path().join("idx");
    {
        let mut e = Engine::create(&idx, hashed(Backend::Exact)).expect("create");
        e.ingest(std::slice::from_ref(&root), opts("none"), &mut |_| {})
            .expect("ingest");
    }
    {
        let mut store = Store::open(&idx.join(STORE_FILE)).expect("store");
        let mut b = store.batch().expect("batch");
        assert!(b.remove_document("notes/b.txt").expect("rm"));
        b.commit().expect("commit");
    }
    // A reader while a writer holds the lock: catches up in memory only.
    let lock = take_lock(&idx).expect("lock");
    let e = Engine::open(&idx, Access::Read).expect("open");
    let none = DocumentFilter::default();
    assert!(!ids(&search_mode(&e, "penguins", Mode::Vector, &none)).contains(&"notes/b.txt"));
    let c = e.check().expect("check");
    // BM25 (on disk) waits for the writer; the vectors caught up in memory.
    assert_eq!(c.index_generation + 1, c.store_generation);
    assert!(c.missing_from_vectors.is_empty() && c.not_in_store_vectors.is_empty());
    assert_eq!(c.vector_chunks, 2);
    drop((e, lock));
    // A writer catches up and saves a snapshot of the new generation.
    let e = Engine::open(&idx, Access::Write).expect("open");
    assert!(e.check().expect("check").is_consistent());
    assert_eq!(
        e.store().meta("vector_file").expect("meta").as_deref(),
        Some("vectors-3")
    );
    assert!(idx.join("vectors-3.flat").is_file() && !idx.join("vectors-2.flat").exists());
}

#[test]
fn rebuild_and_reingest_reuse_cached_embeddings() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = corpus(tmp.path());
    let idx = tmp.path().join("idx");
    let mut e = Engine::create(&idx, hashed(Backend::Auto)).expect("create");
    let r = e
        .ingest(std::slice::from_ref(&root), opts("structural"), &mut |_| {})
        .expect("ingest");
    assert_eq!(r.embedded, 3);
    // Other contexts change the indexed texts: new embeddings. Going back reuses the cache.
    let r = e
        .ingest(std::slice::from_ref(&root), opts("none"), &mut |_| {})
        .expect("none");
    assert_eq!((r.replaced, r.embedded), (3, 3));
    let r = e
        .ingest(std::slice::from_ref(&root), opts("structural"), &mut |_| {})
        .expect("structural again");
    assert_eq!((r.replaced, r.embedded), (3, 0));
    // A lost snapshot and a rebuild: all from the cache.
    for f in std::fs::read_dir(&idx).expect("ls").flatten() {
        if f.file_name().to_string_lossy().starts_with("vectors-") {
            std::fs::remove_file(f.path()).expect("rm");
        }
    }
    let r = e.rebuild(&mut |_, _| {}).expect("rebuild");
    assert_eq!((r.chunks, r.vectors, r.embedded), (3, 3, 0));
    drop(e);
    let e = Engine::open(&idx, Access::Read).expect("open");
    assert!(e.check().expect("check").is_consistent());
}

#[test]
fn filters_apply_to_both_legs_before_fusion() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = corpus(tmp.path());
    let idx = tmp.path().join("idx");
    let mut e = Engine::create(&idx, hashed(Backend::Auto)).expect("create");
    let mut o = opts("none");
    o.metadata = vec![("team".into(), "zoo".into())];
    e.ingest(std::slice::from_ref(&root), o, &mut |_| {})
        .expect("ingest");
    let only_c = DocumentFilter {
        document_ids: vec!["notes/c.txt".into()],
        ..Default::default()
    };
    for mode in [Mode::Bm25, Mode::Vector, Mode::Hybrid] {
        // The query matches a.md best, but the filter leaves only c.txt.
        let hits = search_mode(&e, "zebras stripes", mode, &only_c);
        assert!(
            ids(&hits).iter().all(|d| *d == "notes/c.txt"),
            "{mode}: {:?}",
            ids(&hits)
        );
    }
    assert_eq!(
        ids(&search_mode(&e, "owls", Mode::Hybrid, &only_c)),
        vec!["notes/c.txt"]
    );
    let glob = DocumentFilter {
        path_globs: vec!["notes/*.txt".into()],
        ..Default::default()
    };
    let hits = search_mode(&e, "zebras penguins owls", Mode::Hybrid, &glob);
    let mut got = ids(&hits);
    got.sort();
    assert_eq!(got, vec!["notes/b.txt", "notes/c.txt"]);
    let meta = |v: &str| DocumentFilter {
        metadata: vec![("team".into(), v.into())],
        ..Default::default()
    };
    assert_eq!(search_mode(&e, "owls", Mode::Hybrid, &meta("zoo")).len(), 3);
    assert!(search_mode(&e, "owls", Mode::Hybrid, &meta("farm")).is_empty());
    let bad = DocumentFilter {
        metadata: vec![("a'b".into(), "x".into())],
        ..Default::default()
    };
    let mut req = SearchRequest::new("owls", 3);
    req.mode = Some(Mode::Hybrid);
    assert!(e.search_filtered(&req, &bad).is_err());
}

#[test]
fn an_index_without_an_embedder_searches_bm25_and_refuses_the_vector_leg() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = corpus(tmp.path());
    let idx = tmp.path().join("idx");
    let settings = CreateSettings {
        embedder: "none".into(),
        ..CreateSettings::default()
    };
    let mut e = Engine::create(&idx, settings).expect("create");
    let r = e
        .ingest(std::slice::from_ref(&root), opts("none"), &mut |_| {})
        .expect("ingest");
    assert_eq!((r.embedded, r.embed_model), (0, None));
    assert_eq!(e.mode_for(None).expect("mode"), Mode::Bm25);
    let err = e.mode_for(Some(Mode::Hybrid)).expect_err("refused");
    assert_eq!(err.field(), Some("mode"));
    assert!(err.to_string().contains("the embedder none"), "{err}");
    let err = e.vector_recall(&["owls"], 20, 150).expect_err("no vectors");
    assert!(err.to_string().contains("--embedder none"), "{err}");
    assert!(e.check().expect("check").is_consistent());
}

#[test]
fn an_embedder_setting_cut_in_half_by_a_kill_is_completed_on_the_next_ingest() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = corpus(tmp.path());
    let idx = tmp.path().join("idx");
    {
        // What a kill between two separate writes used to leave: the model without its
        // dimension (the model and dimension are now written in one transaction).
        let e = Engine::create(&idx, hashed(Backend::Exact)).expect("create");
        e.store.set_meta("embed_model", "hash:64").expect("meta");
    }
    let mut e = Engine::open(&idx, Access::Write).expect("open");
    let r = e
        .ingest(std::slice::from_ref(&root), opts("none"), &mut |_| {})
        .expect("ingest");
    assert_eq!(r.embedded, 3);
    let c = e.check().expect("check");
    assert!(c.is_consistent(), "{c:?}");
    assert_eq!(c.vector_chunks, 3, "every chunk has its vector");
}

/// A stand-in for an LLM: counts its calls, writes a context per chunk, and can die (panic)
/// after a given number of calls, as a killed process would.
struct Scripted {
    calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    die_after: Option<usize>,
    /// Whether its checks now reject what it wrote before (a changed verifier).
    stricter: bool,
}

#[async_trait::async_trait]
impl situate_core::Contextualizer for Scripted {
    fn method(&self) -> &str {
        "scripted"
    }
    fn fingerprint(&self) -> String {
        "scripted-v1".into()
    }
    fn remembers(&self) -> bool {
        true
    }
    fn recheck(
        &self,
        _doc: &situate_core::DocumentView<'_>,
        _chunk: &situate_core::ChunkView<'_>,
        cached: situate_core::ChunkContext,
    ) -> situate_core::ChunkContext {
        if !self.stricter {
            return cached;
        }
        situate_core::ChunkContext {
            status: situate_core::ContextStatus::Rejected,
            notes: vec!["fails a newer check".into()],
            ..cached
        }
    }
    async fn contextualize(
        &self,
        doc: situate_core::DocumentView<'_>,
        chunks: &[situate_core::ChunkView<'_>],
        sink: &dyn situate_core::ContextSink,
    ) -> std::result::Result<situate_core::DocumentContexts, situate_core::ContextError> {
        use std::sync::atomic::Ordering;
        let mut out = Vec::new();
        for (i, c) in chunks.iter().enumerate() {
            if self
                .die_after
                .is_some_and(|n| self.calls.load(Ordering::SeqCst) >= n)
            {
                panic!("simulated kill during contextualization");
            }
            self.calls.fetch_add(1, Ordering::SeqCst);
            let ctx = situate_core::ChunkContext {
                text: Some(format!("From {}: about {}", doc.id, c.text.len())),
                status: situate_core::ContextStatus::Verified,
                provenance: Some(situate_core::Provenance {
                    method: situate_core::ContextMethod::Llm,
                    model: Some("script".into()),
                    prompt_version: Some("v1".into()),
                    input_hash: self.input_hash(&doc, c),
                    strategy: Some("whole".into()),
                    parts: vec![],
                }),
                notes: vec![],
            };
            sink.finished(i, &ctx, &situate_core::TokenUsage::default());
            out.push(ctx);
        }
        Ok(situate_core::DocumentContexts {
            contexts: out,
            usage: Default::default(),
            document_tokens: 0,
        })
    }
}

#[test]
fn contexts_finished_before_a_crash_are_never_asked_for_again() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let tmp = tempfile::tempdir().expect("tmp");
    let root = corpus(tmp.path());
    let idx = tmp.path().join("idx");
    let calls = std::sync::Arc::new(AtomicUsize::new(0));
    let scripted = |die_after| {
        let mut o = IngestOptions::new(Box::new(Scripted {
            calls: calls.clone(),
            die_after,
            stricter: false,
        }));
        o.batch_documents = 100; // nothing is committed before the crash
        o
    };
    {
        let mut e = Engine::create(&idx, hashed(Backend::Auto)).expect("create");
        let crashed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            e.ingest(std::slice::from_ref(&root), scripted(Some(2)), &mut |_| {})
        }));
        assert!(crashed.is_err(), "the run dies after two contexts");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let mut e = Engine::open(&idx, Access::Write).expect("reopen");
    assert_eq!(
        e.store().stats().expect("stats").chunks,
        0,
        "no batch was committed"
    );
    let r = e
        .ingest(std::slice::from_ref(&root), scripted(None), &mut |_| {})
        .expect("resume");
    assert_eq!(r.contexts_cached, 2, "{r:?}");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "only the third chunk is asked for"
    );
    let cards: Vec<_> = ["notes/a.md", "notes/b.txt", "notes/c.txt"]
        .iter()
        .flat_map(|d| e.store().cards_of(d).expect("cards"))
        .collect();
    assert_eq!(cards.len(), 3, "one card each, no duplicate");
    for c in &cards {
        assert_eq!(c.context_status, situate_core::ContextStatus::Verified);
        let ctx = c.generated_context.as_deref().expect("context");
        assert!(ctx.starts_with(&format!("From {}", c.document_id)), "{ctx}");
        assert_eq!(
            c.provenance.as_ref().and_then(|p| p.strategy.as_deref()),
            Some("whole")
        );
    }
    // The contexts are indexed (contextual BM25 finds a word only the context has).
    assert!(!search(&e, "about").is_empty());
}

#[test]
fn contexts_are_set_by_hand_and_by_a_contextualizer_run_over_the_index() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let tmp = tempfile::tempdir().expect("tmp");
    let root = corpus(tmp.path());
    let idx = tmp.path().join("idx");
    let mut e = Engine::create(&idx, hashed(Backend::Auto)).expect("create");
    e.ingest(std::slice::from_ref(&root), opts("none"), &mut |_| {})
        .expect("ingest");
    assert!(search(&e, "Kenya").is_empty());

    // By hand: an unknown chunk id changes nothing.
    let manual = |chunk: &str, text: &str| ContextUpdate {
        chunk_id: chunk.into(),
        context: situate_core::ChunkContext {
            text: Some(text.into()),
            status: situate_core::ContextStatus::Verified,
            provenance: Some(situate_core::Provenance {
                method: situate_core::ContextMethod::Manual,
                model: None,
                prompt_version: None,
                input_hash: String::new(),
                strategy: None,
                parts: vec![],
            }),
            notes: vec![],
        },
    };
    let err = e
        .set_contexts(&[manual("notes/a.md#0", "Kenya"), manual("nope#9", "x")])
        .expect_err("unknown id");
    assert!(err.to_string().contains("nope#9"), "{err}");
    assert!(search(&e, "Kenya").is_empty(), "nothing was written");
    assert_eq!(
        e.set_contexts(&[manual("notes/a.md#0", "Grevy zebras of Kenya")])
            .expect("set"),
        1
    );
    assert_eq!(ids(&search(&e, "Kenya")), ["notes/a.md"]);
    assert!(e.check().expect("check").is_consistent(), "vectors follow");
    let card = e.chunk("notes/a.md#0").expect("card").card;
    assert_eq!(
        card.provenance.map(|p| p.method),
        Some(situate_core::ContextMethod::Manual)
    );

    // A run over the cards still pending: each asked once; a second run has nothing to do.
    let calls = std::sync::Arc::new(AtomicUsize::new(0));
    let scripted = Scripted {
        calls: calls.clone(),
        die_after: None,
        stricter: false,
    };
    let pending = [situate_core::ContextStatus::Pending];
    let r = e
        .recontextualize(&scripted, &pending, 1, &mut |_, _| {})
        .expect("run");
    assert_eq!((r.chunks, calls.load(Ordering::SeqCst)), (2, 2));
    assert_eq!(
        ids(&search(&e, "about")).len(),
        2,
        "the new contexts are indexed"
    );
    let r = e
        .recontextualize(&scripted, &pending, 1, &mut |_, _| {})
        .expect("again");
    assert_eq!(r.chunks, 0);
    // Regenerating the verified ones finds them in the context cache; the one written by
    // hand is left alone.
    let verified = [situate_core::ContextStatus::Verified];
    let r = e
        .recontextualize(&scripted, &verified, 10, &mut |_, _| {})
        .expect("regenerate");
    assert_eq!((r.chunks, r.contexts_cached), (2, 2));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(ids(&search(&e, "Kenya")), ["notes/a.md"]);
    assert!(e.check().expect("check").is_consistent());
    // Contexts taken from the cache are checked again: checks stricter than when they were
    // written reject them (and they leave the index), still with no call.
    let stricter = Scripted {
        calls: calls.clone(),
        die_after: None,
        stricter: true,
    };
    let r = e
        .recontextualize(&stricter, &verified, 10, &mut |_, _| {})
        .expect("regenerate");
    assert_eq!((r.contexts_cached, r.contexts_rejected), (2, 2), "{r:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert!(
        ids(&search(&e, "about")).is_empty(),
        "rejected contexts are not indexed"
    );
    assert!(e.check().expect("check").is_consistent());
}

/// A reranker that prefers passages naming an animal, and records what it read.
struct Prefers {
    word: &'static str,
    seen: std::sync::Mutex<Vec<(Option<String>, String)>>,
    fail: bool,
}

#[async_trait::async_trait]
impl situate_core::Reranker for Prefers {
    fn id(&self) -> &str {
        "prefers"
    }
    async fn score(
        &self,
        _query: &str,
        passages: &[situate_core::RerankPassage<'_>],
    ) -> std::result::Result<Vec<f32>, situate_core::RerankError> {
        if self.fail {
            return Err(situate_core::RerankError {
                reranker: "prefers".into(),
                message: "the server is down".into(),
            });
        }
        if let Ok(mut s) = self.seen.lock() {
            s.extend(
                passages
                    .iter()
                    .map(|p| (p.context.map(str::to_string), p.text.to_string())),
            );
        }
        Ok(passages
            .iter()
            .map(|p| if p.text.contains(self.word) { 1.0 } else { 0.0 })
            .collect())
    }
}

#[test]
fn reranking_reorders_the_fused_top_hits_and_keeps_k() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = corpus(tmp.path());
    let idx = tmp.path().join("idx");
    let mut e = Engine::create(&idx, hashed(Backend::Exact)).expect("create");
    e.ingest(std::slice::from_ref(&root), opts("structural"), &mut |_| {})
        .expect("ingest");
    let owls = Prefers {
        word: "Owls",
        seen: Default::default(),
        fail: false,
    };
    let mut req = SearchRequest::new("zebras stripes and penguins", 2);
    req.mode = Some(Mode::Hybrid);
    let none = DocumentFilter::default();
    let plain = e.search_filtered(&req, &none).expect("plain");
    assert_ne!(plain[0].document_id, "notes/c.txt");
    let rerank = Rerank {
        reranker: &owls,
        depth: 150,
    };
    let hits = e
        .search_reranked(&req, &none, Some(rerank))
        .expect("reranked");
    // The owl chunk was deep in the fused list (or found by the vector leg only); the
    // reranker brings it to the top, and k = 2 holds.
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[0].document_id, "notes/c.txt");
    assert_eq!(hits[0].score, 1.0);
    let legs: Vec<&str> = hits[0].legs.iter().map(|l| l.leg.as_str()).collect();
    assert!(legs.ends_with(&["fused", "rerank"]), "{legs:?}");
    // Every fused hit was read (3 chunks), each with its structural context apart.
    let seen = owls.seen.lock().expect("seen").clone();
    assert_eq!(seen.len(), 3);
    assert!(seen.iter().all(|(ctx, _)| ctx.is_some()));
    assert!(seen.iter().any(|(_, t)| t.starts_with("Penguins")));
    // A depth of 1 re-scores only the fused top k (depth is at least k).
    let shallow = Rerank {
        reranker: &owls,
        depth: 1,
    };
    let hits = e
        .search_reranked(&req, &none, Some(shallow))
        .expect("shallow");
    assert_eq!(
        ids(&hits).iter().collect::<std::collections::BTreeSet<_>>(),
        ids(&plain)
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
    );
    // A failing reranker is an error, not a silent fall back to the fused order.
    let down = Prefers {
        word: "x",
        seen: Default::default(),
        fail: true,
    };
    let err = e
        .search_reranked(
            &req,
            &none,
            Some(Rerank {
                reranker: &down,
                depth: 150,
            }),
        )
        .expect_err("down");
    assert!(err.to_string().contains("the server is down"), "{err}");
}

#[test]
fn a_reader_knows_when_it_is_stale_and_shares_an_embedder() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = corpus(tmp.path());
    let idx = tmp.path().join("idx");
    let mut w = Engine::create(&idx, hashed(Backend::Auto)).expect("create");
    w.ingest(std::slice::from_ref(&root), opts("structural"), &mut |_| {})
        .expect("ingest");
    let r = Engine::open(&idx, Access::Read).expect("reader");
    assert!(!r.is_stale().expect("stale"));
    // The reader takes the writer's embedder (same model) instead of loading its own.
    let shared = w.embedder().expect("embedder");
    assert!(r.share_embedder(Arc::clone(&shared)).expect("share"));
    assert!(Arc::ptr_eq(&r.embedder().expect("embedder"), &shared));
    // A write makes it stale; a rebuild (a new BM25 directory) too.
    std::fs::write(root.join("d.txt"), "Seals sleep on ice floes.").expect("w");
    w.ingest(std::slice::from_ref(&root), opts("structural"), &mut |_| {})
        .expect("ingest");
    assert!(r.is_stale().expect("stale"));
    let r = Engine::open(&idx, Access::Read).expect("reader");
    assert_eq!(search(&r, "seals")[0].document_id, "notes/d.txt");
    assert!(!r.is_stale().expect("stale"));
    w.rebuild(&mut |_, _| {}).expect("rebuild");
    assert!(r.is_stale().expect("stale after a rebuild"));
}

#[test]
fn card_views_neighbours_and_document_pages() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("notes");
    std::fs::create_dir_all(&root).expect("mkdir");
    let sections: String = (0..5)
        .map(|i| format!("# Part {i}\n\nParagraph number {i} talks about topic {i}.\n\n"))
        .collect();
    std::fs::write(root.join("long.md"), sections).expect("w");
    std::fs::write(root.join("short.txt"), "One line.").expect("w");
    let idx = tmp.path().join("idx");
    let mut e = Engine::create(&idx, hashed(Backend::Auto)).expect("create");
    let mut o = opts("structural");
    o.chunker.max_tokens = 12;
    o.chunker.overlap_tokens = 0;
    e.ingest(std::slice::from_ref(&root), o, &mut |_| {})
        .expect("ingest");
    let ids = e.chunk_ids_of("notes/long.md").expect("chunks");
    assert!(ids.len() >= 4, "{ids:?}");
    let view = e.card_view(&ids[1]).expect("view");
    assert_eq!(view.ordinal, 1);
    assert_eq!(view.document.id, "notes/long.md");
    let context = view.generated_context.clone().expect("structural context");
    assert_eq!(
        view.indexed_text,
        format!("{context}\n\n{}", view.original_text)
    );
    let (prev, next) = e.neighbours(&ids[1], 1, 2).expect("neighbours");
    let ords = |v: &[Neighbour]| v.iter().map(|n| n.ordinal).collect::<Vec<_>>();
    assert_eq!((ords(&prev), ords(&next)), (vec![0], vec![2, 3]));
    assert!(matches!(e.card_view("nope"), Err(EngineError::NotFound(_))));
    assert!(matches!(
        e.chunk_ids_of("nope"),
        Err(EngineError::NotFound(_))
    ));
    let page = e.documents_after(None, 1).expect("page");
    assert_eq!(page[0].id, "notes/long.md");
    let page = e.documents_after(Some(&page[0].id), 5).expect("page");
    assert_eq!(
        page.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(),
        ["notes/short.txt"]
    );
}

#[test]
fn a_cancelled_ingest_stores_nothing_more_and_a_rerun_finishes() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = corpus(tmp.path());
    let idx = tmp.path().join("idx");
    let mut e = Engine::create(&idx, hashed(Backend::Auto)).expect("create");
    let flag = Arc::new(std::sync::atomic::AtomicBool::new(true));
    e.cancel_on(Arc::clone(&flag));
    let r = e
        .ingest(std::slice::from_ref(&root), opts("structural"), &mut |_| {})
        .expect("ingest");
    assert!(r.cancelled);
    assert_eq!((r.added, e.stats().expect("stats").store.documents), (0, 0));
    assert!(e.check().expect("check").is_consistent());
    flag.store(false, std::sync::atomic::Ordering::Release);
    let r = e
        .ingest(std::slice::from_ref(&root), opts("structural"), &mut |_| {})
        .expect("ingest");
    assert!(!r.cancelled);
    assert_eq!(r.added, 3);
}

#[test]
fn chunk_sizes_leave_room_for_the_context_in_the_embedders_window() {
    use crate::ingest_request::chunk_tokens_for;
    // all-MiniLM-L6-v2 reads 256 tokens: the chunk gives way to the prompt and context.
    assert_eq!(chunk_tokens_for(Some(256), "none"), 240);
    assert_eq!(chunk_tokens_for(Some(256), "structural"), 208);
    assert_eq!(chunk_tokens_for(Some(256), "document+llm"), 140);
    // Long windows and models that read everything keep the chunker's 256; a tiny window
    // never makes chunks below 64 tokens.
    assert_eq!(chunk_tokens_for(Some(2048), "llm"), 256);
    assert_eq!(chunk_tokens_for(None, "llm"), 256);
    assert_eq!(chunk_tokens_for(Some(100), "llm"), 64);
}

#[test]
fn an_index_chooses_its_chunk_size_once_for_its_embedder_and_keeps_it() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = corpus(tmp.path());
    let settings = crate::Settings::default();
    let req = |context: &str, embedder: Option<&str>, max_tokens: Option<usize>| IngestRequest {
        paths: vec![root.clone()],
        context: Some(context.into()),
        embedder: embedder.map(str::to_string),
        max_tokens,
        ..IngestRequest::default()
    };
    // A new MiniLM index with structural contexts (nothing is embedded before `run`).
    let minilm = tmp.path().join("minilm");
    let p = prepare_ingest(
        &minilm,
        &settings,
        req("structural", Some("all-minilm-l6-v2"), None),
    )
    .expect("prepare");
    assert!(p.created);
    assert_eq!(p.chunk_tokens(), 208);
    drop(p);
    // Recorded: an ingest with another method cuts the same chunks; a size given wins
    // for its own ingest and changes nothing recorded.
    let p = prepare_ingest(&minilm, &settings, req("none", None, None)).expect("again");
    assert_eq!(p.chunk_tokens(), 208);
    drop(p);
    let p = prepare_ingest(&minilm, &settings, req("none", None, Some(100))).expect("given");
    assert_eq!(p.chunk_tokens(), 100);
    drop(p);
    let e = Engine::open(&minilm, Access::Read).expect("open");
    assert_eq!(e.chunk_tokens().expect("meta"), Some(208));
    assert_eq!(e.stats().expect("stats").chunk_tokens, Some(208));
    drop(e);
    // An index that read documents before sizes were chosen (no record) keeps the
    // chunker's default, so that its documents are not cut again.
    let old = tmp.path().join("old");
    let p = prepare_ingest(&old, &settings, req("none", Some("hash:16"), Some(256))).expect("old");
    p.run(&mut |_| {}).expect("ingest");
    let p = prepare_ingest(&old, &settings, req("none", None, None)).expect("old again");
    assert_eq!(p.chunk_tokens(), 256);
    let outcome = p.run(&mut |_| {}).expect("ingest");
    assert_eq!(outcome.report.unchanged, 3, "{:?}", outcome.report);
    assert_eq!(outcome.chunk_tokens, 256);
}

#[test]
fn texts_are_ingested_with_their_ids_titles_and_metadata_and_read_again_unchanged() {
    let tmp = tempfile::tempdir().expect("tmp");
    let index = tmp.path().join("index");
    let text = |id: &str, body: &str, team: &str| situate_ingest::TextInput {
        id: id.into(),
        text: body.into(),
        title: Some(format!("Note {id}")),
        metadata: [("team".to_string(), serde_json::Value::from(team))]
            .into_iter()
            .collect(),
        kind: None,
        chunks: None,
    };
    let req = IngestRequest {
        texts: vec![
            text("kb/1", "Refunds are paid within 30 days.", "support"),
            text("kb/2", "Deploys run every Tuesday night.", "ops"),
            text("kb/1", "A second text with the same id.", "ops"),
        ],
        embedder: Some("hash:64".into()),
        ..IngestRequest::default()
    };
    let settings = Settings::default();
    let out = ingest_into(&index, &settings, req.clone(), &mut |_| {}).expect("ingest");
    assert_eq!(out.report.added, 2);
    assert_eq!(out.report.skipped.len(), 1, "{:?}", out.report.skipped);
    assert!(
        out.report.skipped[0]
            .reason
            .contains("duplicate document id")
    );
    let again = ingest_into(&index, &settings, req, &mut |_| {}).expect("again");
    assert_eq!((again.report.added, again.report.unchanged), (0, 2));

    let mut search = api::SearchRequest::new("refunds paid");
    search.filter.meta = vec!["team=support".into()];
    let search = search.check(&settings).expect("check");
    let e = Engine::open(&index, Access::Read).expect("open");
    let hits = e
        .query(&search.query, &search.plan, &search.filter)
        .expect("query")
        .hits;
    assert_eq!(ids(&hits), ["kb/1"]);
    assert_eq!(hits[0].title.as_deref(), Some("Note kb/1"));

    let nothing = ingest_into(&index, &settings, IngestRequest::default(), &mut |_| {});
    let err = nothing.expect_err("nothing to ingest is refused");
    assert_eq!(err.field(), Some("paths"), "{err}");
}

/// The fusion an index searches with: the family's row until its embedder is fixed, then
/// the record written then; an index fixed before records existed keeps the old default,
/// and a setting of the user's wins over any of them.
#[test]
fn an_index_searches_with_the_fusion_it_records() {
    let tmp = tempfile::tempdir().expect("tmp");
    let idx = tmp.path().join("i");
    let minilm = CreateSettings {
        embedder: "all-minilm-l6-v2".into(),
        ..CreateSettings::default()
    };
    let e = Engine::create(&idx, minilm).expect("create");
    let row = fusion_defaults::for_embedder("all-minilm-l6-v2");
    assert_eq!(
        e.index_fusion().expect("fusion"),
        row,
        "not fixed yet: the family's row"
    );
    // Fixed before records existed (a model, no record): the fusion it was built for.
    e.store
        .set_meta("embed_model", "all-minilm-l6-v2@0.1.0")
        .expect("meta");
    assert_eq!(
        e.index_fusion().expect("fusion"),
        fusion_defaults::before_records()
    );
    // A record wins over both, and is what a plan without fusion settings searches with.
    let recorded = SearchSettings {
        fusion: Some("zscore".into()),
        alpha: Some(0.35),
        ..SearchSettings::default()
    };
    e.store
        .set_meta(
            vectors::FUSION_META,
            &serde_json::to_string(&recorded).expect("json"),
        )
        .expect("meta");
    assert_eq!(e.index_fusion().expect("fusion"), recorded);
    let plan = SearchSettings::default().plan("m").expect("plan");
    let used = plan
        .with_fusion(&e.index_fusion().expect("fusion"))
        .expect("with");
    assert_eq!(used.fusion, situate_search::fusion::Fusion::ZScore);
    assert!((used.vector_weight - 0.35).abs() < 1e-6);
    let mine = SearchSettings {
        rrf_k: Some(20.0),
        ..SearchSettings::default()
    }
    .plan("m")
    .expect("plan");
    let used = mine.with_fusion(&recorded).expect("with");
    assert_eq!(used.fusion, situate_search::fusion::Fusion::Rrf { k: 20.0 });
    // A record that cannot be read is said, not guessed at.
    e.store.set_meta(vectors::FUSION_META, "{").expect("meta");
    assert!(e.index_fusion().is_err());
}

/// A reader that loaded its vectors before a switch of embedder and catches up after it
/// (as opening does when the index is behind) reloads the new model's vectors instead of
/// replaying the journal onto the old ones (whose snapshot it would then have saved under
/// the new embedder's name), and searches with the new embedder. (Two things make it
/// reload: the model it loaded is not the index's any more, and the switch trimmed the
/// journal past it.)
#[test]
fn a_reader_behind_a_switch_of_embedder_takes_the_new_vectors() {
    let tmp = tempfile::tempdir().expect("tmp");
    let idx = tmp.path().join("i");
    let mut w = Engine::create(&idx, hashed(Backend::Exact)).expect("create");
    w.ingest(&[corpus(tmp.path())], opts("none"), &mut |_| {})
        .expect("ingest");
    drop(w);
    let mut r = Engine::open(&idx, Access::Read).expect("reader");
    let hits = search_mode(&r, "penguins", Mode::Hybrid, &DocumentFilter::default());
    assert!(!hits.is_empty());
    let mut w = Engine::open(&idx, Access::Write).expect("writer");
    let req = ReembedRequest {
        embedder: "hash:32".into(),
        batch: Some(2),
    }
    .check()
    .expect("check");
    let a = w.reembed(&req, &mut |_| {}).expect("reembed");
    assert!(a.switched);
    drop(w);
    assert!(
        r.is_stale().expect("stale"),
        "the switch advanced the generation"
    );
    r.sync_vectors().expect("catch up");
    assert_eq!(r.vectors_model.as_deref(), Some("hash:32"));
    assert_eq!(r.embedder().expect("embedder").model_id(), "hash:32");
    let hits = search_mode(&r, "penguins", Mode::Hybrid, &DocumentFilter::default());
    assert!(
        !hits.is_empty(),
        "a search with the new embedder and vectors"
    );
}
