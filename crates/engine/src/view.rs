//! Read views that every front end shows the same way: a chunk card in full (`situate show
//! --json`, `GET /v1/cards/…`), its neighbours, and the documents page by page.

use crate::{Engine, EngineError, Result};
use situate_core::{CardRecord, ChunkCard, ContextStatus, Provenance, indexed_text};
use situate_store::StoredDocument;
use std::sync::{Arc, Mutex};

/// A chunk card in full: the original and the context apart, the text the indexes see,
/// the context's status, provenance and check notes, and its document.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct CardView {
    /// The document the chunk belongs to.
    pub document_id: String,
    /// The chunk's id.
    pub chunk_id: String,
    /// Position in the document, from 0.
    pub ordinal: u32,
    /// Character range in the document.
    pub char_start: u64,
    /// End of the character range (exclusive).
    pub char_end: u64,
    /// Markdown heading path (outermost first).
    pub heading_path: Vec<String>,
    /// What the card holds (text, table, image).
    pub kind: situate_core::CardKind,
    /// The pages or slides it covers, in a paged document (PDF, PPTX).
    pub place: Option<situate_core::Place>,
    /// The chunk's own text, exactly as in the document: what answers are built from.
    pub original_text: String,
    /// The situating context, if one was written (whatever its status).
    pub generated_context: Option<String>,
    /// What the embedder and the contextual BM25 index see: the context (when its status
    /// is indexed) before the original.
    pub indexed_text: String,
    /// The context's status.
    pub context_status: ContextStatus,
    /// Where the context came from.
    pub context_provenance: Option<Provenance>,
    /// Why a context was rejected or failed (empty otherwise).
    pub context_notes: Vec<String>,
    /// The document.
    pub document: StoredDocument,
}

impl CardView {
    /// The view of `card` in `document`.
    pub fn new(card: ChunkCard, document: StoredDocument) -> CardView {
        let indexed = indexed_text(card.indexable_context(), &card.original_text);
        CardView {
            document_id: card.document_id,
            chunk_id: card.chunk_id,
            ordinal: card.ordinal,
            char_start: card.char_start,
            char_end: card.char_end,
            heading_path: card.heading_path,
            kind: card.kind,
            place: card.place,
            original_text: card.original_text,
            generated_context: card.generated_context,
            indexed_text: indexed,
            context_status: card.context_status,
            context_provenance: card.provenance,
            context_notes: card.context_notes,
            document,
        }
    }
}

/// The chunks next to one in its document (by ordinal), without their documents.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct Neighbour {
    /// The chunk's id.
    pub chunk_id: String,
    /// Position in the document.
    pub ordinal: u32,
    /// Markdown heading path.
    pub heading_path: Vec<String>,
    /// What the card holds (text, table, image).
    pub kind: situate_core::CardKind,
    /// The pages or slides it covers.
    pub place: Option<situate_core::Place>,
    /// The chunk's own text.
    pub original_text: String,
    /// Its context, if one was written.
    pub generated_context: Option<String>,
    /// The context's status.
    pub context_status: ContextStatus,
}

impl From<ChunkCard> for Neighbour {
    fn from(c: ChunkCard) -> Neighbour {
        Neighbour {
            chunk_id: c.chunk_id,
            ordinal: c.ordinal,
            heading_path: c.heading_path,
            kind: c.kind,
            place: c.place,
            original_text: c.original_text,
            generated_context: c.generated_context,
            context_status: c.context_status,
        }
    }
}

/// A card as the context review lists it: the context and the original apart, with the
/// status, where the context came from and why a check rejected it.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct ContextItem {
    /// The chunk's id.
    pub chunk_id: String,
    /// Its document.
    pub document_id: String,
    /// The document's title.
    pub title: Option<String>,
    /// Position in the document.
    pub ordinal: u32,
    /// Markdown heading path.
    pub heading_path: Vec<String>,
    /// The chunk's own text.
    pub original_text: String,
    /// The context, if one was written.
    pub generated_context: Option<String>,
    /// The context's status.
    pub context_status: ContextStatus,
    /// Where the context came from.
    pub context_provenance: Option<Provenance>,
    /// Why a context was rejected or failed.
    pub context_notes: Vec<String>,
}

impl From<CardRecord> for ContextItem {
    fn from(r: CardRecord) -> ContextItem {
        let c = r.card;
        ContextItem {
            chunk_id: c.chunk_id,
            document_id: c.document_id,
            title: r.title,
            ordinal: c.ordinal,
            heading_path: c.heading_path,
            original_text: c.original_text,
            generated_context: c.generated_context,
            context_status: c.context_status,
            context_provenance: c.provenance,
            context_notes: c.context_notes,
        }
    }
}

impl Engine {
    /// Up to `limit` cards whose context status is one of `statuses` (every card when
    /// empty) in document order, after the card (document id, ordinal) `after`: the
    /// review queue, page by page.
    pub fn contexts_after(
        &self,
        statuses: &[ContextStatus],
        after: Option<(&str, u32)>,
        limit: usize,
    ) -> Result<Vec<ContextItem>> {
        Ok(self
            .store
            .cards_with_status_after(statuses, after, limit)?
            .into_iter()
            .map(ContextItem::from)
            .collect())
    }

    /// The full view of one chunk card ([`EngineError::NotFound`] when there is none).
    pub fn card_view(&self, chunk_id: &str) -> Result<CardView> {
        let CardRecord { card, .. } = self.chunk(chunk_id)?;
        let document = self.document(&card.document_id)?;
        Ok(CardView::new(card, document))
    }

    /// Up to `before` chunks before `chunk_id` and `after` chunks after it, in its
    /// document's order (the chunk itself excluded).
    pub fn neighbours(
        &self,
        chunk_id: &str,
        before: u32,
        after: u32,
    ) -> Result<(Vec<Neighbour>, Vec<Neighbour>)> {
        let card = self.chunk(chunk_id)?.card;
        let (lo, hi) = (
            card.ordinal.saturating_sub(before),
            card.ordinal.saturating_add(after),
        );
        let (mut prev, mut next) = (Vec::new(), Vec::new());
        for c in self.store.cards_of(&card.document_id)? {
            if c.ordinal >= lo && c.ordinal < card.ordinal {
                prev.push(Neighbour::from(c));
            } else if c.ordinal > card.ordinal && c.ordinal <= hi {
                next.push(Neighbour::from(c));
            }
        }
        Ok((prev, next))
    }

    /// Up to `limit` documents in id order after the document id `after` (keyset
    /// pagination: the last id of a page is the cursor of the next).
    pub fn documents_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<StoredDocument>> {
        Ok(self.store.documents_after(after, limit)?)
    }

    /// The chunk ids of a document, in order ([`EngineError::NotFound`] when there is no
    /// such document).
    pub fn chunk_ids_of(&self, document_id: &str) -> Result<Vec<String>> {
        if self.store.document(document_id)?.is_none() {
            return Err(EngineError::NotFound(format!(
                "no document {document_id:?} in the index"
            )));
        }
        Ok(self
            .store
            .cards_of(document_id)?
            .into_iter()
            .map(|c| c.chunk_id)
            .collect())
    }

    /// The store generation: it advances with every committed write, by this process or
    /// another. A long-lived reader reopens when it changes, to see the new cards.
    pub fn generation(&self) -> Result<u64> {
        Ok(self.store.generation()?)
    }

    /// Whether another engine (of this process or another) has committed since this one
    /// was opened: a long-lived reader then reopens to see the new cards, vectors and BM25
    /// index. One small store read.
    pub fn is_stale(&self) -> Result<bool> {
        let bm25_dir = self
            .store
            .meta("bm25_dir")?
            .unwrap_or_else(|| "bm25-1".to_string());
        Ok(self.store.generation()? != self.opened.0 || bm25_dir != self.opened.1)
    }

    /// Gives this engine an embedder already loaded (by another engine on the same index),
    /// so that several readers share one model in memory. Returns whether it was taken: not
    /// when this engine has loaded its own already, nor when the index's model is another.
    pub fn share_embedder(&self, embedder: Arc<dyn situate_core::Embedder>) -> Result<bool> {
        let model = match &self.vectors_model {
            Some(m) => Some(m.clone()),
            None => self.embed_settings()?.model,
        };
        if model.as_deref() != Some(embedder.model_id()) {
            return Ok(false);
        }
        Ok(self.embedder.set(Ok(embedder)).is_ok())
    }
}

/// The models several read-only engines on one index load once and share: the embedder and
/// the answer models (the service's readers, the Python package's reading threads), so a
/// model stays warm and in memory once.
#[derive(Default)]
pub struct SharedModels {
    embedder: Mutex<Option<Arc<dyn situate_core::Embedder>>>,
    answer_models: crate::AnswerModels,
}

impl SharedModels {
    /// Gives `e` the shared models ([`Engine::share_embedder`],
    /// [`Engine::share_answer_models`]); the first engine that searches vectors loads the
    /// embedder, which becomes the shared one. An engine whose index has another embedder
    /// (created again meanwhile) loads its own, which becomes the shared one instead.
    pub fn share_with(&self, e: &mut Engine) {
        e.share_answer_models(self.answer_models.clone());
        let Ok(mut slot) = self.embedder.lock() else {
            return;
        };
        if let Some(shared) = slot.as_ref()
            && !e.share_embedder(Arc::clone(shared)).unwrap_or(false)
        {
            *slot = None;
        }
        if slot.is_none()
            && e.mode_for(None)
                .is_ok_and(|m| m != situate_search::Mode::Bm25)
        {
            match e.embedder() {
                Ok(emb) => *slot = Some(emb),
                Err(err) => tracing::warn!("cannot load the embedder: {err}"),
            }
        }
    }
}
