//! Against a real PostgreSQL server with pgvector: `SITUATE_TEST_PG_URL` names it
//! (`scripts/test.sh` starts one from the pinned wheel with `scripts/postgres.sh` and
//! stops it at the end). Each test works in a database of its own.

use super::*;
use situate_core::{ChunkContext, ContextStatus};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The test server's URL; its absence is a failure, not a skip.
fn server_url() -> String {
    std::env::var("SITUATE_TEST_PG_URL").unwrap_or_else(|_| {
        panic!(
            "SITUATE_TEST_PG_URL is not set: the PostgreSQL tests need a server (scripts/test.sh starts one with scripts/postgres.sh)"
        )
    })
}

/// A fresh, empty database on the test server, dropped when the guard goes.
struct Database {
    admin: String,
    name: String,
    url: String,
}

impl Database {
    fn new() -> Database {
        static N: AtomicUsize = AtomicUsize::new(0);
        let admin = server_url();
        let name = format!(
            "t_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        let mut c = Client::connect(&admin, NoTls).expect("the test server");
        c.batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create database");
        let base = admin.rsplit_once('/').expect("a database in the URL").0;
        let url = format!("{base}/{name}");
        Database { admin, name, url }
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&self.admin, NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

fn tables(url: &str) -> Vec<String> {
    let mut c = Client::connect(url, NoTls).expect("connect");
    c.query(
        "SELECT table_schema || '.' || table_name FROM information_schema.tables WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1",
        &[],
    )
    .expect("tables")
    .iter()
    .map(|r| r.get(0))
    .collect()
}

#[test]
fn migrate_creates_the_schema_once_and_connect_opens_it() {
    let db = Database::new();
    let env = Env::default();
    // A database with no store: connecting says how to create one, and writes nothing.
    let err = PgStore::connect(&db.url, &env).expect_err("no store yet");
    assert!(matches!(err, PgError::NoStore { .. }), "{err}");
    assert!(err.to_string().contains("situate store migrate"), "{err}");
    assert!(tables(&db.url).is_empty());

    assert_eq!(migrate(&db.url, &env).expect("migrate"), Migration::Created);
    assert_eq!(migrate(&db.url, &env).expect("again"), Migration::Current);
    let t = tables(&db.url);
    for table in [
        "situate.meta",
        "situate.documents",
        "situate.chunks",
        "situate.context_cache",
        "situate.embeddings",
        "situate.changes",
    ] {
        assert!(t.iter().any(|x| x == table), "{table} in {t:?}");
    }
    let mut store = PgStore::connect(&db.url, &env).expect("connect");
    let (format, server, vector) = store.versions().expect("versions");
    assert_eq!(format, FORMAT_VERSION);
    assert!(server.starts_with("18"), "{server}");
    assert!(!vector.is_empty());
    assert!(
        store
            .target()
            .to_string()
            .ends_with(&format!("/{}", db.name))
    );
}

#[test]
fn two_migrations_at_once_create_one_schema() {
    let db = Database::new();
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| migrate(&db.url, &Env::default())))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    let created = results
        .iter()
        .filter(|r| matches!(r, Ok(Migration::Created)))
        .count();
    let current = results
        .iter()
        .filter(|r| matches!(r, Ok(Migration::Current)))
        .count();
    assert_eq!((created, current), (1, 3), "{results:?}");
}

#[test]
fn a_store_of_another_format_is_refused_untouched() {
    let db = Database::new();
    migrate(&db.url, &Env::default()).expect("migrate");
    let mut c = Client::connect(&db.url, NoTls).expect("connect");
    c.execute(
        "UPDATE situate.meta SET value = '999' WHERE key = 'format_version'",
        &[],
    )
    .expect("pretend another version");
    let before = tables(&db.url);
    for err in [
        PgStore::connect(&db.url, &Env::default()).expect_err("connect"),
        migrate(&db.url, &Env::default()).expect_err("migrate"),
    ] {
        assert!(
            matches!(&err, PgError::Version { found, .. } if found == "999"),
            "{err}"
        );
        assert!(err.to_string().contains("nothing was written"), "{err}");
    }
    assert_eq!(tables(&db.url), before);
    let v: String = c
        .query_one(
            "SELECT value FROM situate.meta WHERE key = 'format_version'",
            &[],
        )
        .expect("version")
        .get(0);
    assert_eq!(v, "999");
}

#[test]
fn a_server_that_is_down_is_a_clear_error_without_the_password() {
    // A port nothing listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let url = format!("postgres://situate:s3cret-pw@127.0.0.1:{port}/situate");
    let err = PgStore::connect(&url, &Env::default()).expect_err("down");
    let msg = err.to_string();
    assert!(matches!(err, PgError::Connect { .. }), "{msg}");
    assert!(
        msg.contains(&format!("situate@127.0.0.1:{port}/situate")),
        "{msg}"
    );
    assert!(!msg.contains("s3cret-pw"), "{msg}");
    assert!(!format!("{err:?}").contains("s3cret-pw"));
    let err = migrate(&url, &Env::default()).expect_err("down");
    assert!(matches!(err, PgError::Connect { .. }), "{err}");
}

#[test]
fn wrong_urls_are_refused_before_any_connection() {
    let env = Env::default();
    for (url, says) in [
        ("mysql://u@127.0.0.1/db", "expected postgres://"),
        (
            "postgres://u:pw@127.0.0.1:notaport/db",
            "store URL postgres://u:***@",
        ),
        ("postgres://127.0.0.1/db", "no user"),
        ("postgres://u@127.0.0.1/db?sslmode=require", "no TLS client"),
    ] {
        let err = Target::parse(url, &env).expect_err(url);
        assert!(matches!(err, PgError::Url { .. }), "{url}: {err}");
        assert!(err.to_string().contains(says), "{url}: {err}");
        assert!(!err.to_string().contains(":pw@"), "{err}");
    }
}

#[test]
fn the_pg_variables_fill_what_the_url_leaves_out() {
    let env = Env {
        host: Some("db.internal".into()),
        port: Some("6543".into()),
        user: Some("reader".into()),
        password: Some("from-env".into()),
        database: Some("cards".into()),
    };
    let t = Target::parse("postgres://", &env).expect("parse");
    assert_eq!(t.to_string(), "reader@db.internal:6543/cards");
    assert_eq!(t.config.get_password(), Some(&b"from-env"[..]));
    assert!(!format!("{t:?}").contains("from-env"));
    // The URL wins over the variables.
    let t = Target::parse("postgres://own@127.0.0.1:5433/mine", &env).expect("parse");
    assert_eq!(t.to_string(), "own@127.0.0.1:5433/mine");
    // PGPORT applies to a host given without a port (the client alone would take 5432).
    let t = Target::parse("postgres://own@127.0.0.1/mine", &env).expect("parse");
    assert_eq!(t.to_string(), "own@127.0.0.1:6543/mine");
    // The database defaults to the user's name, as in libpq.
    let t = Target::parse("postgres://own@127.0.0.1", &Env::default()).expect("parse");
    assert_eq!(t.to_string(), "own@127.0.0.1:5432/own");
    let bad = Env {
        port: Some("sixty".into()),
        ..Env::default()
    };
    let err = Target::parse("postgres://u@h/db", &bad).expect_err("port");
    assert!(err.to_string().contains("PGPORT"), "{err}");
}

#[test]
fn redact_hides_only_the_password() {
    assert_eq!(
        redact("postgres://u:secret@h:5432/db?x=1"),
        "postgres://u:***@h:5432/db?x=1"
    );
    assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
    assert_eq!(redact("not a url"), "not a url");
}

#[test]
fn the_change_feed_never_skips_a_change_committed_out_of_order() {
    let db = Database::new();
    migrate(&db.url, &Env::default()).expect("migrate");
    let mut store = PgStore::connect(&db.url, &Env::default()).expect("connect");
    let start = store.changes_since(0).expect("empty feed");
    assert!(start.changes.is_empty());
    let mut a = Client::connect(&db.url, NoTls).expect("writer a");
    let mut b = Client::connect(&db.url, NoTls).expect("writer b");
    let mut ta = a.transaction().expect("a");
    ta.execute(
        "INSERT INTO situate.changes (document_id) VALUES ('first')",
        &[],
    )
    .expect("a writes");
    let mut tb = b.transaction().expect("b");
    tb.execute(
        "INSERT INTO situate.changes (document_id) VALUES ('second')",
        &[],
    )
    .expect("b writes");
    tb.commit().expect("b commits first");
    // `second` has the larger serial and is committed; `first` is not yet. A poll of the
    // serial would hand out `second` and move past `first`. The feed holds both back.
    let read = store.changes_since(start.upto).expect("read");
    assert!(read.changes.is_empty(), "{read:?}");
    ta.commit().expect("a commits");
    // xmin is cluster-wide: another test's open transaction may hold the feed back for a
    // moment (lag, never loss), so read on until both have come.
    let (docs, upto) = read_until(&mut store, read.upto, 2);
    assert_eq!(docs, ["first", "second"]);
    // Read again from where it stopped: nothing twice.
    let again = store.changes_since(upto).expect("again");
    assert!(again.changes.is_empty(), "{again:?}");
    assert!(again.upto >= upto);
    // A rolled-back write never appears.
    let mut tc = a.transaction().expect("c");
    tc.execute(
        "INSERT INTO situate.changes (document_id) VALUES ('rolled back')",
        &[],
    )
    .expect("c writes");
    tc.rollback().expect("rollback");
    b.execute(
        "INSERT INTO situate.changes (document_id) VALUES ('third')",
        &[],
    )
    .expect("d writes");
    let (docs, _) = read_until(&mut store, again.upto, 1);
    assert_eq!(docs, ["third"]);
}

/// Reads the feed from `from` until `n` changes have come (or 30 s have passed), in order;
/// the documents and the position to go on from.
fn read_until(store: &mut PgStore, from: u64, n: usize) -> (Vec<String>, u64) {
    let (changes, upto) = changes_until(store, from, n);
    (changes.into_iter().map(|c| c.document_id).collect(), upto)
}

/// [`read_until`], the changes whole.
fn changes_until(store: &mut PgStore, mut from: u64, n: usize) -> (Vec<Change>, u64) {
    let mut docs = Vec::new();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while docs.len() < n && std::time::Instant::now() < until {
        let read = store.changes_since(from).expect("read");
        assert!(read.upto >= from, "the feed never goes back");
        docs.extend(read.changes);
        from = read.upto;
        if docs.len() < n {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    (docs, from)
}

#[test]
fn four_workers_claiming_at_once_take_each_item_once() {
    let db = Database::new();
    migrate(&db.url, &Env::default()).expect("migrate");
    let mut store = PgStore::connect(&db.url, &Env::default()).expect("connect");
    let items: Vec<(String, String)> = (0..200)
        .map(|i| (format!("doc#{i}"), format!("h{i}")))
        .collect();
    let refs: Vec<(&str, &str)> = items
        .iter()
        .map(|(c, h)| (c.as_str(), h.as_str()))
        .collect();
    assert_eq!(store.enqueue("contextualize", &refs).expect("enqueue"), 200);
    // Queued again (an ingest run twice): nothing new.
    assert_eq!(store.enqueue("contextualize", &refs).expect("again"), 0);
    let taken: Vec<Vec<Claimed>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|w| {
                let url = db.url.clone();
                s.spawn(move || {
                    let mut mine = Vec::new();
                    let mut store = PgStore::connect(&url, &Env::default()).expect("connect");
                    loop {
                        let got = store
                            .claim(
                                "contextualize",
                                &format!("w{w}"),
                                7,
                                Duration::from_secs(60),
                            )
                            .expect("claim");
                        if got.is_empty() {
                            break;
                        }
                        for c in &got {
                            assert!(store.finish(c.id, false).expect("finish"));
                        }
                        mine.extend(got);
                    }
                    mine
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker"))
            .collect()
    });
    let mut all: Vec<String> = taken.iter().flatten().map(|c| c.chunk_id.clone()).collect();
    all.sort();
    let mut expected: Vec<String> = items.iter().map(|(c, _)| c.clone()).collect();
    expected.sort();
    assert_eq!(all, expected, "every item once, none twice");
    assert!(taken.iter().flatten().all(|c| c.attempts == 1));
    assert_eq!(
        store.work_counts("contextualize").expect("counts"),
        (0, 0, 200, 0)
    );
}

#[test]
fn a_lease_that_runs_out_is_claimed_again_and_a_heartbeat_keeps_one() {
    let db = Database::new();
    migrate(&db.url, &Env::default()).expect("migrate");
    let mut store = PgStore::connect(&db.url, &Env::default()).expect("connect");
    store
        .enqueue("embed", &[("a#0", "h0"), ("a#1", "h1")])
        .expect("enqueue");
    // Worker 2 takes one on a long lease, worker 1 the other on a lease already over (it
    // "died").
    let live = store
        .claim("embed", "w2", 1, Duration::from_secs(600))
        .expect("claim");
    let dead = store
        .claim("embed", "w1", 1, Duration::ZERO)
        .expect("claim");
    assert_eq!((dead.len(), live.len()), (1, 1));
    assert_ne!(dead[0].id, live[0].id);
    // The dead worker's item is free again, the live one's is not.
    let again = store
        .claim("embed", "w3", 10, Duration::from_secs(600))
        .expect("claim");
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0].id, dead[0].id);
    assert_eq!(again[0].attempts, 2);
    // w1's heartbeat comes too late: the item is w3's now; w2's keeps its own.
    assert!(
        store
            .heartbeat("w1", &[dead[0].id], Duration::from_secs(600))
            .expect("hb")
            .is_empty()
    );
    assert_eq!(
        store
            .heartbeat("w2", &[live[0].id], Duration::from_secs(600))
            .expect("hb"),
        [live[0].id]
    );
    assert_eq!(store.work_counts("embed").expect("counts"), (2, 2, 0, 0));
    // Finished once: a second finish (the dead worker waking up) changes nothing.
    assert!(store.finish(again[0].id, false).expect("finish"));
    assert!(!store.finish(again[0].id, false).expect("twice"));
    assert!(store.finish(live[0].id, true).expect("failed"));
    assert_eq!(store.work_counts("embed").expect("counts"), (0, 0, 1, 1));
    assert!(
        store
            .claim("embed", "w4", 10, Duration::from_secs(1))
            .expect("claim")
            .is_empty()
    );
}

fn composed_context(text: &str) -> situate_core::ChunkContext {
    use situate_core::{ContextMethod, ContextPart, ContextStatus, PartKind, Provenance};
    situate_core::ChunkContext {
        text: Some(text.to_string()),
        status: ContextStatus::Verified,
        provenance: Some(Provenance {
            method: ContextMethod::Document,
            model: Some("local:qwen2.5-coder-0.5b-instruct@0.9.0".into()),
            prompt_version: Some("describe-v1".into()),
            input_hash: "h-doc".into(),
            strategy: Some("whole".into()),
            parts: vec![ContextPart {
                kind: PartKind::Document,
                start: 0,
                end: text.len(),
                model: Some("local:qwen2.5-coder-0.5b-instruct@0.9.0".into()),
                prompt_version: Some("describe-v1".into()),
                input_hash: Some("h-part".into()),
                strategy: Some("whole".into()),
            }],
        }),
        notes: vec!["a note «in Russian»".into()],
    }
}

#[test]
fn a_context_is_kept_once_by_input_hash_across_workers() {
    let db = Database::new();
    migrate(&db.url, &Env::default()).expect("migrate");
    let usage = situate_core::TokenUsage {
        input_tokens: 10,
        output_tokens: 5,
        ..Default::default()
    };
    // Four workers that all paid for the same context: one write is kept.
    let kept: Vec<bool> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|w| {
                let url = db.url.clone();
                s.spawn(move || {
                    let mut store = PgStore::connect(&url, &Env::default()).expect("connect");
                    store
                        .put_context(
                            "h-doc",
                            &composed_context(&format!("Worker {w}'s text.")),
                            &usage,
                        )
                        .expect("put")
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker"))
            .collect()
    });
    assert_eq!(kept.iter().filter(|k| **k).count(), 1, "{kept:?}");
    let mut store = PgStore::connect(&db.url, &Env::default()).expect("connect");
    let got = store.cached_contexts(&["h-doc", "h-absent"]).expect("read");
    assert_eq!(got.len(), 1);
    let winner = kept.iter().position(|k| *k).expect("one kept");
    assert_eq!(
        got["h-doc"],
        composed_context(&format!("Worker {winner}'s text.")),
        "read back as written: text, status, provenance with its parts, notes"
    );
    // A failed context is not kept (to be tried again).
    let mut failed = composed_context("x");
    failed.status = situate_core::ContextStatus::Failed;
    assert!(!store.put_context("h-failed", &failed, &usage).expect("put"));
    assert!(
        store
            .cached_contexts(&["h-failed"])
            .expect("read")
            .is_empty()
    );
    // A context without provenance reads back without one.
    let bare = situate_core::ChunkContext {
        text: Some("Set by hand.".into()),
        status: situate_core::ContextStatus::Verified,
        provenance: None,
        notes: vec![],
    };
    assert!(store.put_context("h-bare", &bare, &usage).expect("put"));
    assert_eq!(
        store.cached_contexts(&["h-bare"]).expect("read")["h-bare"],
        bare
    );
}

fn doc(id: &str, text: &str) -> situate_core::Document {
    situate_core::Document {
        id: id.into(),
        source: format!("{id}.md"),
        title: Some("Регламент".into()),
        language: situate_core::Language::Ru,
        kind: situate_core::DocKind::Markdown,
        text: text.into(),
        content_hash: situate_core::content_hash(text.as_bytes()),
        metadata: serde_json::Map::from_iter([("team".to_string(), serde_json::json!("ops"))]),
        preset_chunks: None,
        layout: Default::default(),
    }
}

/// Stores `d` with one chunk per part, the `i`th with `contexts[i % len]`.
fn put(
    store: &mut PgStore,
    d: &situate_core::Document,
    parts: &[&str],
    contexts: &[situate_core::ChunkContext],
) -> Result<u64> {
    let heading = vec!["Экспорт".to_string()];
    let chunks: Vec<situate_store::NewChunk<'_>> = parts
        .iter()
        .enumerate()
        .map(|(i, p)| situate_store::NewChunk {
            chunk_id: format!("{}#{i}", d.id),
            ordinal: i as u32,
            char_start: i * 10,
            char_end: i * 10 + p.chars().count(),
            heading_path: &heading,
            kind: Default::default(),
            place: None,
            original_text: p,
            context: &contexts[i % contexts.len()],
        })
        .collect();
    store.put_document(d, "key-1", &chunks)
}

#[test]
fn cards_keep_the_original_and_the_context_apart_and_every_write_is_in_the_feed() {
    let db = Database::new();
    migrate(&db.url, &Env::default()).expect("migrate");
    let mut store = PgStore::connect(&db.url, &Env::default()).expect("connect");
    let d = doc(
        "aster",
        "Для тарифа Команда доступен экспорт CSV. Выгрузка содержит только активные задачи.",
    );
    let contexts = [
        composed_context("Регламент экспорта сервиса Aster."),
        situate_core::ChunkContext::none(),
    ];
    put(
        &mut store,
        &d,
        &[
            "Для тарифа Команда доступен экспорт CSV.",
            "Выгрузка содержит только активные задачи.",
        ],
        &contexts,
    )
    .expect("put");
    let cards = store.cards_of("aster").expect("cards");
    assert_eq!(cards.len(), 2);
    assert_eq!(
        cards[1].original_text,
        "Выгрузка содержит только активные задачи."
    );
    assert_eq!(
        cards[0].generated_context.as_deref(),
        Some("Регламент экспорта сервиса Aster.")
    );
    assert_eq!(cards[0].provenance, contexts[0].provenance);
    assert_eq!(cards[0].context_notes, contexts[0].notes);
    assert_eq!(cards[1].provenance, None);
    assert_eq!(cards[1].heading_path, ["Экспорт"]);
    assert_eq!((cards[1].char_start, cards[1].ordinal), (10, 1));
    assert_eq!(
        store
            .document_state("aster")
            .expect("state")
            .map(|s| s.ingest_key),
        Some("key-1".to_string())
    );
    // Replaced with one chunk: one card.
    put(&mut store, &d, &["Только одна часть."], &contexts).expect("replace");
    let cards = store.cards_of("aster").expect("cards");
    assert_eq!(cards.len(), 1);
    // A context replaced in place: the card keeps its key, the feed names it.
    let manual = situate_core::ChunkContext {
        text: Some("Решение человека.".into()),
        status: situate_core::ContextStatus::Verified,
        provenance: None,
        notes: vec![],
    };
    assert!(store.update_context("aster#0", &manual).expect("update"));
    assert!(!store.update_context("nowhere#0", &manual).expect("absent"));
    let after = store.cards_of("aster").expect("cards");
    assert_eq!(after[0].card, cards[0].card);
    assert_eq!(
        after[0].generated_context.as_deref(),
        Some("Решение человека.")
    );
    // Another document may not take a chunk id that is used: nothing of it is written.
    let other = doc("other", "x");
    let mut clash: Vec<situate_store::NewChunk<'_>> = Vec::new();
    let none = situate_core::ChunkContext::none();
    clash.push(situate_store::NewChunk {
        chunk_id: "aster#0".into(),
        ordinal: 0,
        char_start: 0,
        char_end: 1,
        heading_path: &[],
        kind: Default::default(),
        place: None,
        original_text: "x",
        context: &none,
    });
    let err = store
        .put_document(&other, "k", &clash)
        .expect_err("conflict");
    assert!(matches!(err, PgError::Conflict(_)), "{err}");
    assert!(store.document_state("other").expect("state").is_none());
    // Removed; a second removal finds nothing.
    assert!(store.remove_document("aster").expect("rm"));
    assert!(!store.remove_document("aster").expect("rm again"));
    assert!(store.cards_of("aster").expect("cards").is_empty());
    // The feed: two puts, the card's update, the removal; not the failed write.
    let (feed, _) = changes_until(&mut store, 0, 4);
    let docs: Vec<&str> = feed.iter().map(|c| c.document_id.as_str()).collect();
    assert_eq!(docs, ["aster", "aster", "aster", "aster"]);
    assert_eq!(
        feed.iter().filter_map(|c| c.card).collect::<Vec<_>>(),
        [cards[0].card as i64]
    );
}

#[test]
fn the_shared_store_keeps_the_store_contract() {
    let db = Database::new();
    let env = Env::default();
    migrate(&db.url, &env).expect("migrate");
    let mut store = PgStore::connect(&db.url, &env).expect("connect");
    situate_store::contract::check(&mut store);
}

#[test]
fn a_finished_context_is_written_once_and_a_replaced_documents_work_writes_nothing() {
    let db = Database::new();
    let env = Env::default();
    migrate(&db.url, &env).expect("migrate");
    let mut store = PgStore::connect(&db.url, &env).expect("connect");
    let d = doc("guide", "First part. Second part.");
    let pending = ChunkContext::none();
    put(
        &mut store,
        &d,
        &["First part. ", "Second part."],
        std::slice::from_ref(&pending),
    )
    .expect("put");
    store
        .enqueue("contextualize", &[("guide#0", "h0"), ("guide#1", "h1")])
        .expect("queue");
    let claimed = store
        .claim("contextualize", "w", 2, Duration::from_secs(30))
        .expect("claim");
    assert_eq!(claimed.len(), 2);
    let written = ChunkContext {
        text: Some("From the guide.".into()),
        status: ContextStatus::Verified,
        provenance: None,
        notes: vec![],
    };
    // The card, its change, the embedding's work and the item's end, together.
    let at = store
        .complete_context(claimed[0].id, "guide#0", &written, Some("t0"))
        .expect("complete")
        .expect("written");
    assert!(at > 0);
    let cards = store.cards_of("guide").expect("cards");
    assert_eq!(
        cards[0].generated_context.as_deref(),
        Some("From the guide.")
    );
    assert_eq!(
        store.work_counts("embed").expect("counts").0,
        1,
        "the embedding queued"
    );
    // Finishing the same item again writes nothing (another worker after a lost lease).
    let again = ChunkContext {
        text: Some("A second answer.".into()),
        ..written.clone()
    };
    assert_eq!(
        store
            .complete_context(claimed[0].id, "guide#0", &again, Some("t0b"))
            .expect("complete"),
        None
    );
    assert_eq!(
        store.cards_of("guide").expect("cards")[0]
            .generated_context
            .as_deref(),
        Some("From the guide.")
    );
    // The document is re-ingested: its queued work goes with its old cards, and a worker
    // finishing an old item writes nothing into the new card.
    put(
        &mut store,
        &d,
        &["First part. ", "Second part."],
        &[pending],
    )
    .expect("again");
    assert_eq!(
        store
            .complete_context(claimed[1].id, "guide#1", &written, None)
            .expect("complete"),
        None
    );
    assert_eq!(
        store.cards_of("guide").expect("cards")[1].generated_context,
        None
    );
}

#[test]
fn a_reader_takes_a_whole_document_and_the_position_past_its_view() {
    let db = Database::new();
    let env = Env::default();
    migrate(&db.url, &env).expect("migrate");
    let mut store = PgStore::connect(&db.url, &env).expect("connect");
    let mut d = doc("notes", "Alpha beta. Gamma delta.");
    d.metadata.insert("team".into(), "search".into());
    let at = put(
        &mut store,
        &d,
        &["Alpha beta. ", "Gamma delta."],
        &[ChunkContext::none()],
    )
    .expect("put");
    let read = store.read_document("notes").expect("read").expect("stored");
    assert_eq!(read.doc.text, d.text);
    assert_eq!(read.doc.metadata, d.metadata);
    assert_eq!(read.doc.language, d.language);
    assert_eq!(read.ingest_key, "key-1");
    assert_eq!(read.cards.len(), 2);
    assert!(store.read_document("missing").expect("read").is_none());
    // Every document, with a position at or past every write they show.
    let (ids, upto) = ids_until(&mut store, at);
    assert_eq!(ids, vec!["notes".to_string()]);
    assert!(upto >= at);
    // Embeddings round-trip through pgvector, per model; a second write keeps the first.
    let v = [0.5f32, -0.25, 1.0];
    assert_eq!(store.put_embeddings("m", &[("t", &v)]).expect("put"), 1);
    assert_eq!(
        store
            .put_embeddings("m", &[("t", &[9.0, 9.0, 9.0])])
            .expect("put"),
        0
    );
    assert_eq!(store.embeddings("m", &["t"]).expect("get")["t"], v.to_vec());
    let inputs = store.embed_inputs(&["notes#1"]).expect("inputs");
    assert_eq!(inputs[0].original, "Gamma delta.");
    assert_eq!(inputs[0].context, None);
}

/// [`PgStore::document_ids`] until its position reaches `at` (another test's open
/// transaction may hold the cluster-wide xmin back for a moment).
fn ids_until(store: &mut PgStore, at: u64) -> (Vec<String>, u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (ids, upto) = store.document_ids().expect("ids");
        if upto >= at || std::time::Instant::now() > deadline {
            return (ids, upto);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

// The contract suite reads the shared store through the trait it checks (test-only: the
// suite is behind situate-store's `contract` feature).
impl situate_store::contract::CardStore for super::PgStore {
    fn put_document(
        &mut self,
        doc: &situate_core::Document,
        key: &str,
        chunks: &[situate_store::NewChunk<'_>],
    ) -> std::result::Result<(), situate_store::contract::ContractError> {
        use situate_store::contract::ContractError;
        match super::PgStore::put_document(self, doc, key, chunks) {
            Ok(_) => Ok(()),
            Err(super::PgError::Conflict(c)) => Err(ContractError::Conflict(c)),
            Err(e) => Err(ContractError::Other(e.to_string())),
        }
    }
    fn remove_document(
        &mut self,
        id: &str,
    ) -> std::result::Result<bool, situate_store::contract::ContractError> {
        super::PgStore::remove_document(self, id).map_err(contract_error)
    }
    fn update_context(
        &mut self,
        chunk_id: &str,
        context: &situate_core::ChunkContext,
    ) -> std::result::Result<bool, situate_store::contract::ContractError> {
        super::PgStore::update_context(self, chunk_id, context).map_err(contract_error)
    }
    fn document_state(
        &mut self,
        id: &str,
    ) -> std::result::Result<
        Option<situate_store::DocumentState>,
        situate_store::contract::ContractError,
    > {
        super::PgStore::document_state(self, id).map_err(contract_error)
    }
    fn cards_of(
        &mut self,
        id: &str,
    ) -> std::result::Result<Vec<situate_core::ChunkCard>, situate_store::contract::ContractError>
    {
        super::PgStore::cards_of(self, id).map_err(contract_error)
    }
    fn put_context(
        &mut self,
        hash: &str,
        context: &situate_core::ChunkContext,
        usage: &situate_core::TokenUsage,
    ) -> std::result::Result<(), situate_store::contract::ContractError> {
        super::PgStore::put_context(self, hash, context, usage)
            .map(|_| ())
            .map_err(contract_error)
    }
    fn cached_contexts(
        &mut self,
        hashes: &[&str],
    ) -> std::result::Result<
        std::collections::HashMap<String, situate_core::ChunkContext>,
        situate_store::contract::ContractError,
    > {
        super::PgStore::cached_contexts(self, hashes).map_err(contract_error)
    }
    fn put_embeddings(
        &mut self,
        model: &str,
        items: &[(&str, &[f32])],
    ) -> std::result::Result<(), situate_store::contract::ContractError> {
        super::PgStore::put_embeddings(self, model, items)
            .map(|_| ())
            .map_err(contract_error)
    }
    fn embeddings(
        &mut self,
        model: &str,
        hashes: &[&str],
    ) -> std::result::Result<
        std::collections::HashMap<String, Vec<f32>>,
        situate_store::contract::ContractError,
    > {
        super::PgStore::embeddings(self, model, hashes).map_err(contract_error)
    }
}

fn contract_error(e: super::PgError) -> situate_store::contract::ContractError {
    situate_store::contract::ContractError::Other(e.to_string())
}
