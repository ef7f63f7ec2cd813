//! Changing the contexts of stored cards: an LLM run over an existing index (`situate
//! contextualize`, `situate contexts regenerate`), a person's decision (`contexts set`) and
//! imports (`contexts import`).
//!
//! Cards keep their keys; each change is written in a store batch with the embeddings the
//! new texts need, then the indexes catch up through the journal, as after an ingest.

use crate::ingest::{IngestReport, Waiting};
use crate::{Engine, EngineError, Result};
use situate_core::{
    ChunkCard, ChunkContext, ChunkSpan, ContextStatus, Contextualizer, DocKind, Document,
    Provenance,
};

/// A new context for one card.
#[derive(Debug, Clone)]
pub struct ContextUpdate {
    /// The card's chunk id.
    pub chunk_id: String,
    /// Its new context.
    pub context: ChunkContext,
}

/// Progress of a context run.
#[derive(Debug, Clone, Copy)]
pub struct ContextProgress {
    /// Chunks handled so far.
    pub chunks_done: u64,
    /// Chunks to handle in all.
    pub chunks_total: u64,
}

impl Engine {
    /// Late chunking's vectors for new contexts: each card's cached vector (under its
    /// current text's hash) cached again under its new text's hash. A card with no cached
    /// vector gets none here (`situate rebuild` embeds it with its document).
    fn carry_late_vectors(&self, updates: &[ContextUpdate]) -> Result<crate::vectors::Embedded> {
        let mut out = crate::vectors::Embedded::default();
        let Some(model) = self.embed_settings()?.model else {
            return Ok(out);
        };
        for u in updates {
            let Some(rec) = self.store.card_by_chunk_id(&u.chunk_id)? else {
                continue;
            };
            let old_ctx = rec
                .card
                .generated_context
                .as_deref()
                .filter(|_| rec.card.context_status.is_indexed());
            let old = crate::vectors::embedding_input(old_ctx, &rec.card.original_text).0;
            let new_ctx = u
                .context
                .text
                .as_deref()
                .filter(|_| u.context.status.is_indexed());
            let new = crate::vectors::embedding_input(new_ctx, &rec.card.original_text).0;
            let doc = &rec.card.document_id;
            let (old, new) = (
                crate::vectors::late_key(doc, &old),
                crate::vectors::late_key(doc, &new),
            );
            if let Some(v) = self.store.embeddings(&model, &[old.as_str()])?.remove(&old) {
                out.vectors.push((new, v));
            }
        }
        Ok(out)
    }

    /// Writes new contexts for existing cards, in one batch: the embeddings their new texts
    /// need are computed first, then the cards are updated and the indexes brought up to
    /// date. Unknown chunk ids are an error that names them, and nothing is written.
    /// Returns the number of cards changed.
    pub fn set_contexts(&mut self, updates: &[ContextUpdate]) -> Result<usize> {
        self.require_writer()?;
        if updates.is_empty() {
            return Ok(0);
        }
        let mut texts = Vec::with_capacity(updates.len());
        let mut unknown = Vec::new();
        for u in updates {
            match self.store.card_by_chunk_id(&u.chunk_id)? {
                Some(rec) => {
                    let ctx = u
                        .context
                        .text
                        .as_deref()
                        .filter(|_| u.context.status.is_indexed());
                    texts.push(crate::vectors::embedding_input(
                        ctx,
                        &rec.card.original_text,
                    ));
                }
                None => unknown.push(u.chunk_id.as_str()),
            }
        }
        if !unknown.is_empty() {
            return Err(EngineError::NotFound(format!(
                "no such chunk(s): {}; nothing was changed",
                unknown.join(", ")
            )));
        }
        let embedded = if self.late_chunking()? {
            // A late vector is pooled from the document, which a context does not enter:
            // each card's vector is carried over to its new text's hash, no model call.
            self.carry_late_vectors(updates)?
        } else {
            self.embed_missing(self.runtime()?, texts, &mut |_, _| {})?
        };
        if embedded.failed > 0 {
            tracing::warn!(
                "{} new context(s) could not be embedded ({}); `situate rebuild` embeds them later",
                embedded.failed,
                embedded.reason.as_deref().unwrap_or_default()
            );
        }
        let model = self.embed_settings()?.model;
        let mut batch = self.store.batch()?;
        if let Some(model) = &model {
            batch.put_embeddings(model, &embedded.cache_rows())?;
            batch.put_embedding_cuts(model, &embedded.cut_rows())?;
        }
        let mut changed = 0;
        for u in updates {
            if batch.update_context(&u.chunk_id, &u.context)? {
                changed += 1;
            }
        }
        batch.commit()?;
        self.sync_index()?;
        self.save_vectors()?;
        Ok(changed)
    }

    /// Runs `ctx` over the stored cards whose context status is one of `statuses`, document
    /// by document, writing every `batch_documents` documents. Cards a person decided
    /// (provenance `manual`) are left as they are. Contexts already in the
    /// context cache are reused and new ones are cached as they finish, as in ingest, so an
    /// interrupted run loses nothing it paid for.
    pub fn recontextualize(
        &mut self,
        ctx: &dyn Contextualizer,
        statuses: &[ContextStatus],
        batch_documents: usize,
        on_progress: &mut dyn FnMut(ContextProgress, &IngestReport),
    ) -> Result<IngestReport> {
        self.require_writer()?;
        let writer = if ctx.remembers() {
            Some(self.store.context_cache_writer()?)
        } else {
            None
        };
        let docs = self.store.documents_with_status(statuses)?;
        let mut total = 0u64;
        for d in &docs {
            total += self
                .store
                .cards_of(d)?
                .iter()
                .filter(|c| statuses.contains(&c.context_status) && !is_manual(c))
                .count() as u64;
        }
        let mut report = IngestReport::default();
        let mut pending: Vec<ContextUpdate> = Vec::new();
        let mut pending_docs = 0usize;
        // Documents waiting for contexts: up to `in_flight` are contextualized together.
        let mut waiting: Vec<Waiting<Vec<ChunkCard>>> = Vec::new();
        let in_flight = ctx.documents_in_flight().max(1);
        for id in &docs {
            if self.cancel_requested() {
                report.cancelled = true;
                break;
            }
            let (Some(stored), Some(text)) =
                (self.store.document(id)?, self.store.document_text(id)?)
            else {
                continue;
            };
            let cards: Vec<_> = self
                .store
                .cards_of(id)?
                .into_iter()
                .filter(|c| statuses.contains(&c.context_status) && !is_manual(c))
                .collect();
            if cards.is_empty() {
                continue;
            }
            let spans = spans_of(id, &text, &cards)?;
            let doc = Document {
                id: stored.id.clone(),
                source: stored.source.clone(),
                title: stored.title.clone(),
                language: stored.language,
                kind: DocKind::from_stored(&stored.kind),
                text,
                content_hash: stored.content_hash.clone(),
                metadata: Default::default(),
                preset_chunks: None,
                layout: Default::default(),
            };
            waiting.push(Waiting {
                doc,
                spans,
                item: cards,
            });
            if waiting.len() >= in_flight {
                self.settle_stored(
                    ctx,
                    writer.as_ref(),
                    &mut waiting,
                    &mut pending,
                    &mut pending_docs,
                    batch_documents,
                    total,
                    &mut report,
                    on_progress,
                )?;
            }
        }
        if !report.cancelled {
            self.settle_stored(
                ctx,
                writer.as_ref(),
                &mut waiting,
                &mut pending,
                &mut pending_docs,
                batch_documents,
                total,
                &mut report,
                on_progress,
            )?;
        }
        self.set_contexts(&pending)?;
        Ok(report)
    }
}

impl Engine {
    /// [`Engine::settle`] for stored cards: each document's new contexts are queued as
    /// updates, written every `batch_documents` documents.
    #[allow(clippy::too_many_arguments)]
    fn settle_stored(
        &mut self,
        ctx: &dyn Contextualizer,
        writer: Option<&situate_store::ContextCacheWriter>,
        waiting: &mut Vec<Waiting<Vec<ChunkCard>>>,
        pending: &mut Vec<ContextUpdate>,
        pending_docs: &mut usize,
        batch_documents: usize,
        total: u64,
        report: &mut IngestReport,
        on_progress: &mut dyn FnMut(ContextProgress, &IngestReport),
    ) -> Result<()> {
        self.settle(
            ctx,
            writer,
            waiting,
            report,
            &mut |engine, w, contexts, report| {
                let cards = w.item;
                report.chunks += cards.len() as u64;
                report.replaced += 1;
                for (c, context) in cards.iter().zip(contexts) {
                    pending.push(ContextUpdate {
                        chunk_id: c.chunk_id.clone(),
                        context,
                    });
                }
                *pending_docs += 1;
                on_progress(
                    ContextProgress {
                        chunks_done: report.chunks,
                        chunks_total: total,
                    },
                    report,
                );
                if *pending_docs >= batch_documents.max(1) {
                    engine.set_contexts(pending)?;
                    pending.clear();
                    *pending_docs = 0;
                }
                Ok(())
            },
        )
    }
}

fn is_manual(c: &situate_core::ChunkCard) -> bool {
    c.provenance.as_ref().is_some_and(Provenance::is_manual)
}

/// The chunk spans of stored cards of the document `id` whose text is `text` (a card whose
/// range lies outside the text is a damaged index: an error).
pub fn spans_of(id: &str, text: &str, cards: &[ChunkCard]) -> Result<Vec<ChunkSpan>> {
    let positions: Vec<u64> = cards
        .iter()
        .flat_map(|c| [c.char_start, c.char_end])
        .collect();
    let at = byte_offsets(text, &positions);
    let spans: Vec<ChunkSpan> = cards
        .iter()
        .filter_map(|c| {
            let (s, e) = (*at.get(&c.char_start)?, *at.get(&c.char_end)?);
            (s <= e).then(|| ChunkSpan {
                ordinal: c.ordinal,
                byte_start: s,
                byte_end: e,
                char_start: c.char_start as usize,
                char_end: c.char_end as usize,
                heading_path: c.heading_path.clone(),
                chunk_id: None,
                kind: c.kind,
                place: c.place,
                lead: None,
            })
        })
        .collect();
    if spans.len() != cards.len() {
        return Err(EngineError::Internal(format!(
            "document {id}: a card's range lies outside its text; run `situate rebuild` or re-ingest it"
        )));
    }
    Ok(spans)
}

/// Byte offsets of the character positions `wanted` in `text`, in one pass.
fn byte_offsets(text: &str, wanted: &[u64]) -> std::collections::HashMap<u64, usize> {
    let mut want: Vec<u64> = wanted.to_vec();
    want.sort_unstable();
    want.dedup();
    let mut out = std::collections::HashMap::with_capacity(want.len());
    let mut next = want.iter().peekable();
    let mut n = 0u64;
    for (b, _) in text.char_indices() {
        while next.peek().is_some_and(|&&w| w == n) {
            out.insert(n, b);
            next.next();
        }
        n += 1;
    }
    for &w in next {
        if w == n {
            out.insert(w, text.len());
        }
    }
    out
}
