//! The store contract: what every card store guarantees, whichever engine keeps it — the
//! embedded SQLite store here and the shared PostgreSQL store (`situate-pg`). [`check`]
//! runs the same suite on either, through [`CardStore`]; each store's tests call it. Test
//! code: compiled for this crate's tests and behind the `contract` feature for others'.
//!
//! The invariants: a document and its cards are written whole or not at all; the card
//! keeps the original and the context apart, with provenance, status and notes; one card
//! per chunk id (a chunk id another document's card has is a conflict, and nothing is
//! written); replacing a document replaces its cards; a context is kept once per input
//! hash and read back whole (failed and pending ones are not kept); embeddings are kept
//! by (model, text hash).

use crate::{DocumentState, NewChunk};
use situate_core::{
    CardKind, ChunkCard, ChunkContext, ContextMethod, ContextStatus, DocKind, Document, Language,
    Place, PlaceUnit, Provenance, TokenUsage,
};
use std::collections::HashMap;

/// What a store operation of the contract returns on failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContractError {
    /// The write conflicts with what is stored; nothing was written.
    Conflict(String),
    /// Anything else.
    Other(String),
}

/// A card store as the contract sees it (each write its own transaction).
pub trait CardStore {
    /// Stores a document with its chunks, replacing an earlier version.
    fn put_document(
        &mut self,
        doc: &Document,
        key: &str,
        chunks: &[NewChunk<'_>],
    ) -> Result<(), ContractError>;
    /// Removes a document; `false` when it was not stored.
    fn remove_document(&mut self, id: &str) -> Result<bool, ContractError>;
    /// Replaces a card's context; `false` when there is no such card.
    fn update_context(
        &mut self,
        chunk_id: &str,
        context: &ChunkContext,
    ) -> Result<bool, ContractError>;
    /// A document's stored state.
    fn document_state(&mut self, id: &str) -> Result<Option<DocumentState>, ContractError>;
    /// A document's cards, in order.
    fn cards_of(&mut self, id: &str) -> Result<Vec<ChunkCard>, ContractError>;
    /// Keeps a context by input hash.
    fn put_context(
        &mut self,
        hash: &str,
        context: &ChunkContext,
        usage: &TokenUsage,
    ) -> Result<(), ContractError>;
    /// Kept contexts by input hash.
    fn cached_contexts(
        &mut self,
        hashes: &[&str],
    ) -> Result<HashMap<String, ChunkContext>, ContractError>;
    /// Keeps embeddings of `model` by text hash.
    fn put_embeddings(
        &mut self,
        model: &str,
        items: &[(&str, &[f32])],
    ) -> Result<(), ContractError>;
    /// Kept embeddings of `model`.
    fn embeddings(
        &mut self,
        model: &str,
        hashes: &[&str],
    ) -> Result<HashMap<String, Vec<f32>>, ContractError>;
}

fn document(id: &str, text: &str, language: Language) -> Document {
    Document {
        id: id.into(),
        source: format!("{id}.md"),
        title: Some(format!("Title of {id}")),
        language,
        kind: DocKind::Markdown,
        text: text.into(),
        content_hash: situate_core::content_hash(text.as_bytes()),
        metadata: serde_json::Map::from_iter([("team".to_string(), "docs".into())]),
        preset_chunks: None,
        layout: Default::default(),
    }
}

fn llm_context(text: &str, hash: &str) -> ChunkContext {
    ChunkContext {
        text: Some(text.into()),
        status: ContextStatus::Verified,
        provenance: Some(Provenance {
            method: ContextMethod::Llm,
            model: Some("test-model".into()),
            prompt_version: Some("p1".into()),
            input_hash: hash.into(),
            strategy: Some("whole".into()),
            parts: Vec::new(),
        }),
        notes: vec!["checked".into()],
    }
}

fn chunks<'a>(
    doc: &Document,
    parts: &'a [&'a str],
    contexts: &'a [ChunkContext],
    heading: &'a [String],
) -> Vec<NewChunk<'a>> {
    let mut at = 0;
    parts
        .iter()
        .zip(contexts)
        .enumerate()
        .map(|(i, (p, c))| {
            let n = p.chars().count();
            let chunk = NewChunk {
                chunk_id: format!("{}#{i}", doc.id),
                ordinal: i as u32,
                char_start: at,
                char_end: at + n,
                heading_path: heading,
                // The second card is a table on pages 2-3 of a paged document.
                kind: if i == 1 {
                    CardKind::Table
                } else {
                    CardKind::Text
                },
                place: (i == 1).then_some(Place {
                    unit: PlaceUnit::Page,
                    first: 2,
                    last: 3,
                }),
                original_text: p,
                context: c,
            };
            at += n;
            chunk
        })
        .collect()
}

// Long: the contract's rules one after another, each a few lines on the same store; split,
// they would only pass the store and the ids between them.
/// Runs the contract on `store` (empty of the ids it uses: `contract-*`); panics, naming
/// the broken rule, on the first violation.
pub fn check(store: &mut dyn CardStore) {
    let heading = vec!["Экспорт".to_string(), "CSV".to_string()];
    // The card keeps original and context apart, with provenance, status and notes.
    let parts = ["Задачи выгружаются в CSV. ", "Archived tasks are included."];
    let a = document("contract-a", &parts.concat(), Language::Ru);
    let contexts = [
        llm_context("Раздел об экспорте задач.", "h-a0"),
        ChunkContext {
            text: None,
            status: ContextStatus::Failed,
            provenance: None,
            notes: vec!["the model did not answer".into()],
        },
    ];
    let put = chunks(&a, &parts, &contexts, &heading);
    store
        .put_document(&a, "key-1", &put)
        .expect("put a document");
    let cards = store.cards_of("contract-a").expect("read cards");
    assert_eq!(cards.len(), 2, "one card per chunk");
    for (card, (chunk, context)) in cards.iter().zip(put.iter().zip(&contexts)) {
        assert_eq!(card.chunk_id, chunk.chunk_id);
        assert_eq!(card.document_id, "contract-a");
        assert_eq!(
            card.original_text, chunk.original_text,
            "the original, unchanged"
        );
        assert_eq!(card.generated_context, context.text, "the context, apart");
        assert_eq!(card.context_status, context.status);
        assert_eq!(card.provenance, context.provenance, "the provenance");
        assert_eq!(card.context_notes, context.notes);
        assert_eq!(card.heading_path, heading);
        assert_eq!(
            (card.kind, card.place),
            (chunk.kind, chunk.place),
            "kind and place"
        );
        assert_eq!(
            (card.char_start, card.char_end),
            (chunk.char_start as u64, chunk.char_end as u64)
        );
    }
    assert_eq!(
        store.document_state("contract-a").expect("state"),
        Some(DocumentState {
            content_hash: a.content_hash.clone(),
            ingest_key: "key-1".into()
        })
    );
    // One card per chunk id: another document may not take one; nothing of it is written.
    let b = document("contract-b", "Other text.", Language::En);
    let none = [ChunkContext::none()];
    let mut clash = chunks(&b, &["Other text."], &none, &[]);
    clash[0].chunk_id = "contract-a#1".into();
    match store.put_document(&b, "key-b", &clash) {
        Err(ContractError::Conflict(_)) => {}
        other => panic!("a chunk id of another document's card was accepted: {other:?}"),
    }
    assert_eq!(
        store.document_state("contract-b").expect("state"),
        None,
        "nothing written"
    );
    assert_eq!(
        store.cards_of("contract-a").expect("cards").len(),
        2,
        "the first intact"
    );
    // Replacing a document replaces its cards.
    let a2 = document("contract-a", "Only one chunk now.", Language::Ru);
    let put2 = chunks(&a2, &["Only one chunk now."], &none, &[]);
    store.put_document(&a2, "key-2", &put2).expect("replace");
    let cards = store.cards_of("contract-a").expect("cards");
    assert_eq!(cards.len(), 1, "the old cards are gone");
    assert_eq!(cards[0].original_text, "Only one chunk now.");
    assert_eq!(cards[0].context_status, ContextStatus::Pending);
    // A context replaced in place; an unknown card is reported, not created.
    let later = llm_context("Written later by a worker.", "h-late");
    assert!(
        store
            .update_context("contract-a#0", &later)
            .expect("update")
    );
    let card = &store.cards_of("contract-a").expect("cards")[0];
    assert_eq!(
        card.generated_context.as_deref(),
        Some("Written later by a worker.")
    );
    assert_eq!(card.provenance, later.provenance);
    assert!(
        !store
            .update_context("contract-missing#0", &later)
            .expect("update")
    );
    // A context is kept once per input hash and read back whole; failures are not kept.
    let usage = TokenUsage {
        input_tokens: 100,
        output_tokens: 20,
        ..Default::default()
    };
    let kept = llm_context("Kept once.", "contract-h1");
    store
        .put_context("contract-h1", &kept, &usage)
        .expect("keep");
    store
        .put_context("contract-h2", &contexts[1], &usage)
        .expect("a failure is accepted (and not kept)");
    let got = store
        .cached_contexts(&["contract-h1", "contract-h2", "contract-h3"])
        .expect("read the cache");
    assert_eq!(got.len(), 1, "only the finished context is kept: {got:?}");
    assert_eq!(got["contract-h1"].text, kept.text);
    assert_eq!(got["contract-h1"].status, kept.status);
    assert_eq!(got["contract-h1"].provenance, kept.provenance);
    // Embeddings by (model, text hash).
    let v = [0.25f32, -1.0, 3.5];
    store
        .put_embeddings("contract-model", &[("contract-t1", &v)])
        .expect("keep an embedding");
    let e = store
        .embeddings("contract-model", &["contract-t1", "contract-t2"])
        .expect("read embeddings");
    assert_eq!(e.len(), 1);
    assert_eq!(e["contract-t1"], v.to_vec());
    assert!(
        store
            .embeddings("other-model", &["contract-t1"])
            .expect("read")
            .is_empty(),
        "kept per model"
    );
    // Removing a document removes its cards; removing it again says so.
    assert!(store.remove_document("contract-a").expect("remove"));
    assert!(store.cards_of("contract-a").expect("cards").is_empty());
    assert_eq!(store.document_state("contract-a").expect("state"), None);
    assert!(!store.remove_document("contract-a").expect("remove again"));
}

impl CardStore for crate::Store {
    fn put_document(
        &mut self,
        doc: &Document,
        key: &str,
        chunks: &[NewChunk<'_>],
    ) -> Result<(), ContractError> {
        let mut b = self.batch().map_err(other)?;
        match b.put_document(doc, key, chunks) {
            Err(crate::StoreError::Conflict(c)) => return Err(ContractError::Conflict(c)),
            r => r.map_err(other)?,
        }
        b.commit().map(|_| ()).map_err(other)
    }
    fn remove_document(&mut self, id: &str) -> Result<bool, ContractError> {
        let mut b = self.batch().map_err(other)?;
        let removed = b.remove_document(id).map_err(other)?;
        b.commit().map_err(other)?;
        Ok(removed)
    }
    fn update_context(
        &mut self,
        chunk_id: &str,
        context: &ChunkContext,
    ) -> Result<bool, ContractError> {
        let mut b = self.batch().map_err(other)?;
        let changed = b.update_context(chunk_id, context).map_err(other)?;
        b.commit().map_err(other)?;
        Ok(changed)
    }
    fn document_state(&mut self, id: &str) -> Result<Option<DocumentState>, ContractError> {
        crate::Store::document_state(self, id).map_err(other)
    }
    fn cards_of(&mut self, id: &str) -> Result<Vec<ChunkCard>, ContractError> {
        crate::Store::cards_of(self, id).map_err(other)
    }
    fn put_context(
        &mut self,
        hash: &str,
        context: &ChunkContext,
        usage: &TokenUsage,
    ) -> Result<(), ContractError> {
        self.context_cache_writer()
            .and_then(|w| w.put(hash, context, usage))
            .map_err(other)
    }
    fn cached_contexts(
        &mut self,
        hashes: &[&str],
    ) -> Result<HashMap<String, ChunkContext>, ContractError> {
        crate::Store::cached_contexts(self, hashes).map_err(other)
    }
    fn put_embeddings(
        &mut self,
        model: &str,
        items: &[(&str, &[f32])],
    ) -> Result<(), ContractError> {
        self.cache_embeddings(model, items).map_err(other)
    }
    fn embeddings(
        &mut self,
        model: &str,
        hashes: &[&str],
    ) -> Result<HashMap<String, Vec<f32>>, ContractError> {
        crate::Store::embeddings(self, model, hashes).map_err(other)
    }
}

fn other(e: impl std::fmt::Display) -> ContractError {
    ContractError::Other(e.to_string())
}
