use super::*;
use situate_core::MatchOn;
use std::path::PathBuf;

fn opts(method: &str) -> IngestOptions {
    let mut o = IngestOptions::new(situate_contextualize::by_name(method).expect("method"));
    o.batch_documents = 2;
    o
}

fn search(e: &Engine, q: &str) -> Vec<Hit> {
    e.search(&SearchRequest {
        text: q,
        k: 5,
        match_on: MatchOn::Contextual,
        context_weight: 1.0,
        languages: &[],
    })
    .expect("search")
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
    let mut e = Engine::create(&idx, CreateSettings::default()).expect("create");
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
        let mut e = Engine::create(&idx, CreateSettings::default()).expect("create");
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
    let mut e = Engine::create(&idx, CreateSettings::default()).expect("create");
    e.ingest(std::slice::from_ref(&root), opts("structural"), &mut |_| {})
        .expect("ingest");
    let before: Vec<(String, f32)> = search(&e, "penguins swim")
        .into_iter()
        .map(|h| (h.chunk_id, h.score))
        .collect();
    let n = e.rebuild(&mut |_, _| {}).expect("rebuild");
    assert_eq!(n, 3);
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
    let _e = Engine::create(&idx, CreateSettings::default()).expect("create");
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
