use super::*;
use situate_core::DocKind;

fn collect(paths: &[PathBuf]) -> (Vec<Document>, Vec<Skipped>) {
    let mut docs = vec![];
    let mut skips = vec![];
    for item in read_sources(paths, &SourceOptions::default()) {
        match item {
            SourceItem::Document(d) => docs.push(*d),
            SourceItem::Skipped(s) => skips.push(s),
        }
    }
    (docs, skips)
}

#[test]
fn bad_files_are_skipped_with_reasons_and_the_rest_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("corpus");
    std::fs::create_dir_all(root.join("sub")).expect("mkdir");
    std::fs::write(root.join("good.md"), "# Title\n\nSome text.").expect("write");
    std::fs::write(root.join("sub/code.rs"), "fn main() {}\n").expect("write");
    std::fs::write(root.join("bin.txt"), b"abc\0def").expect("write");
    std::fs::write(root.join("latin1.txt"), b"caf\xe9 au lait").expect("write");
    std::fs::write(root.join("empty.txt"), b"  \n").expect("write");
    std::fs::write(root.join("image.png"), b"\x89PNG").expect("write");
    std::fs::write(root.join(".hidden.txt"), b"secret").expect("write");
    #[cfg(unix)]
    std::os::unix::fs::symlink(&root, root.join("sub/loop")).expect("symlink");
    let (docs, skips) = collect(std::slice::from_ref(&root));
    let ids: Vec<&str> = docs.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, vec!["corpus/good.md", "corpus/sub/code.rs"]);
    assert_eq!(docs[0].title.as_deref(), Some("Title"));
    assert_eq!(docs[1].kind, DocKind::Code("rust".into()));
    let reason = |f: &str| {
        skips
            .iter()
            .find(|s| s.source.ends_with(f))
            .map(|s| s.reason.clone())
            .unwrap_or_default()
    };
    assert!(reason("bin.txt").starts_with("binary"), "{skips:?}");
    assert_eq!(reason("latin1.txt"), "invalid UTF-8 at byte 3");
    assert_eq!(reason("empty.txt"), "empty file");
    assert_eq!(
        reason("image.png"),
        "unsupported file type .png: an image has no text layer; run OCR on it first"
    );
    #[cfg(unix)]
    assert!(reason("loop").starts_with("symlink loop"), "{skips:?}");
    assert!(!skips.iter().any(|s| s.source.contains("hidden")));
}

#[test]
fn configuration_files_are_text_and_a_corpus_in_a_tree_keeps_its_format() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("repo");
    std::fs::create_dir_all(&root).expect("mkdir");
    for (name, text) in [
        ("Cargo.toml", "[package]\nname = \"ledger\"\n"),
        ("deploy.yaml", "replicas: 3\nimage: ledger:1.2\n"),
        ("ci.yml", "jobs:\n  test: cargo test\n"),
        ("settings.json", "{\"port\": 8443}\n"),
        ("php.ini", "[Date]\ndate.timezone = UTC\n"),
        ("setup.cfg", "[metadata]\nname = ledger\n"),
    ] {
        std::fs::write(root.join(name), text).expect("write");
    }
    let corpus = r#"[{"doc_id": "d1", "original_uuid": "u", "content": "x", "chunks": []}]"#;
    std::fs::write(root.join("codebase_chunks.json"), corpus).expect("write");
    let (docs, skips) = collect(std::slice::from_ref(&root));
    let mut ids: Vec<&str> = docs.iter().map(|d| d.id.as_str()).collect();
    ids.sort();
    assert_eq!(
        ids,
        vec![
            "repo/Cargo.toml",
            "repo/ci.yml",
            "repo/deploy.yaml",
            "repo/php.ini",
            "repo/settings.json",
            "repo/setup.cfg"
        ]
    );
    assert!(docs.iter().all(|d| d.kind == DocKind::Text));
    assert_eq!(skips.len(), 1, "{skips:?}");
    assert!(
        skips[0].source.ends_with("codebase_chunks.json")
            && skips[0].reason.contains("Anthropic-format corpus"),
        "{skips:?}"
    );
    // Given by its own path, the corpus is read in its format.
    assert_eq!(
        super::guess_format(&root.join("codebase_chunks.json")),
        SourceFormat::Anthropic
    );
    assert_eq!(
        super::guess_format(&root.join("settings.json")),
        SourceFormat::Files
    );
}

#[test]
fn a_file_and_its_directory_give_the_same_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("docs");
    std::fs::create_dir_all(&root).expect("mkdir");
    std::fs::write(root.join("a.txt"), "hello world").expect("write");
    let (by_dir, _) = collect(std::slice::from_ref(&root));
    let (by_file, _) = collect(&[root.join("a.txt")]);
    assert_eq!(by_dir[0].id, "docs/a.txt");
    assert_eq!(by_file[0].id, "docs/a.txt");
    assert_eq!(by_dir[0].content_hash, by_file[0].content_hash);
}

#[test]
fn html_is_reduced_to_text_with_its_title() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("page.html");
    std::fs::write(&f, "<html><head><title>My Page</title><style>p{}</style></head><body><p>Hello <b>there</b>.</p><script>var x=1;</script></body></html>").expect("write");
    let (docs, _) = collect(&[f]);
    assert_eq!(docs[0].title.as_deref(), Some("My Page"));
    assert!(docs[0].text.contains("Hello there."), "{:?}", docs[0].text);
    assert!(!docs[0].text.contains("var x"));
    assert!(!docs[0].text.contains('<'));
}

#[test]
fn beir_lines_become_documents_and_bad_lines_are_skipped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("corpus.jsonl");
    std::fs::write(
        &f,
        "{\"_id\":\"d1\",\"title\":\"Cats\",\"text\":\"Cats sleep a lot.\"}\nnot json\n{\"_id\":\"\",\"text\":\"x\"}\n\n{\"_id\":7,\"text\":\"Numbers as ids.\",\"metadata\":{\"k\":\"v\"}}\n",
    )
    .expect("write");
    let (docs, skips) = collect(&[dir.path().to_path_buf()]);
    assert_eq!(docs.len(), 2);
    assert_eq!(docs[0].id, "d1");
    assert_eq!(docs[0].text, "Cats\n\nCats sleep a lot.");
    assert_eq!(docs[1].id, "7");
    assert_eq!(
        docs[1].metadata.get("k").and_then(|v| v.as_str()),
        Some("v")
    );
    assert_eq!(skips.len(), 2);
    assert!(skips[0].source.ends_with(":2") && skips[0].reason.starts_with("not a BEIR record"));
    assert!(skips[1].source.ends_with(":3"));
}

#[test]
fn passages_of_a_parent_become_the_chunks_of_one_document() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("corpus.jsonl");
    let line = |id: &str, text: &str, parent: &str, n: u32| {
        format!(
            "{{\"_id\":\"{id}\",\"title\":\"Super Bowl\",\"text\":\"{text}\",\"metadata\":{{\"parent\":\"{parent}\",\"article\":0,\"sentence\":{n}}}}}\n"
        )
    };
    let body = [
        line("p0-s0", "The Broncos won.", "p0", 0),
        line("p0-s1", "They scored 24 points.", "p0", 1),
        line("p1-s0", "It was held in Santa Clara.", "p1", 0),
        "{\"_id\":\"loose\",\"text\":\"No parent here.\"}\n".to_string(),
        line("p0-s2", "A late record of p0.", "p0", 2),
    ]
    .concat();
    std::fs::write(&f, body).expect("write");
    let (docs, skips) = collect(&[f]);
    let ids: Vec<&str> = docs.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["p0", "p1", "loose"]);
    let p0 = &docs[0];
    assert_eq!(
        p0.text,
        "Super Bowl\n\nThe Broncos won. They scored 24 points."
    );
    assert_eq!(p0.title.as_deref(), Some("Super Bowl"));
    let spans = p0.preset_chunks.as_ref().expect("preset chunks");
    let chunks: Vec<(&str, &str)> = spans
        .iter()
        .map(|s| {
            (
                s.chunk_id.as_deref().unwrap_or(""),
                &p0.text[s.byte_start..s.byte_end],
            )
        })
        .collect();
    assert_eq!(
        chunks,
        [
            ("p0-s0", "The Broncos won."),
            ("p0-s1", "They scored 24 points.")
        ]
    );
    // Shared metadata stays; the per-passage key and `parent` do not.
    assert_eq!(p0.metadata.get("article"), Some(&serde_json::json!(0)));
    assert!(p0.metadata.get("sentence").is_none() && p0.metadata.get("parent").is_none());
    assert!(
        docs[2].preset_chunks.is_none(),
        "a record without parent is a document"
    );
    // A parent's records that come back later would replace its document: refused.
    assert_eq!(skips.len(), 1);
    assert!(skips[0].source.ends_with(":5"), "{skips:?}");
    assert!(skips[0].reason.contains("must be consecutive"), "{skips:?}");

    // `beir-flat`: every record its own document, as before.
    let opts = SourceOptions {
        format: SourceFormat::BeirFlat,
        ..SourceOptions::default()
    };
    let flat: Vec<String> = read_sources(&[dir.path().join("corpus.jsonl")], &opts)
        .filter_map(|i| match i {
            SourceItem::Document(d) => Some(d.id),
            SourceItem::Skipped(_) => None,
        })
        .collect();
    assert_eq!(flat, ["p0-s0", "p0-s1", "p1-s0", "loose", "p0-s2"]);
}

#[test]
fn anthropic_chunks_keep_their_ids_and_exact_ranges() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("codebase_chunks.json");
    let doc = serde_json::json!([{
        "doc_id": "doc_1", "original_uuid": "u1", "content": "é first part\nsecond part",
        "chunks": [
            {"chunk_id": "doc_1_chunk_0", "original_index": 0, "content": "é first part\n"},
            {"chunk_id": "doc_1_chunk_1", "original_index": 1, "content": "second part"}
        ]}, {"doc_id": "doc_2", "content": "abc", "chunks": [{"chunk_id": "x", "content": "zzz"}]}]);
    std::fs::write(&f, doc.to_string()).expect("write");
    let (docs, skips) = collect(&[f]);
    assert_eq!(docs.len(), 1);
    let spans = docs[0].preset_chunks.as_ref().expect("preset");
    assert_eq!(spans[1].chunk_id.as_deref(), Some("doc_1_chunk_1"));
    assert_eq!((spans[1].char_start, spans[1].char_end), (13, 24));
    assert_eq!(
        &docs[0].text[spans[1].byte_start..spans[1].byte_end],
        "second part"
    );
    assert!(skips[0].reason.contains("not part of document doc_2"));
}
