//! Documents and chunk cards on PostgreSQL: the source of truth, as in the embedded store
//! (the original and the context apart, with provenance and status; one card per chunk
//! id). Every write records its document in the change feed in the same transaction.

use crate::{PgError, PgStore, Result, query_failed};
use postgres::error::SqlState;
use situate_core::{
    ChunkCard, ChunkContext, ContextMethod, ContextStatus, DocKind, Document, Language, Provenance,
};
use situate_store::{DocumentState, NewChunk};
use std::collections::HashMap;
use std::str::FromStr;

/// A context's provenance as the columns store it.
struct ProvenanceColumns<'a> {
    method: Option<&'a str>,
    model: Option<&'a str>,
    prompt_version: Option<&'a str>,
    input_hash: Option<&'a str>,
    strategy: Option<&'a str>,
    parts: Option<String>,
    notes: String,
}

fn columns(context: &ChunkContext) -> ProvenanceColumns<'_> {
    let p = context.provenance.as_ref();
    ProvenanceColumns {
        method: p.map(|p| p.method.as_str()),
        model: p.and_then(|p| p.model.as_deref()),
        prompt_version: p.and_then(|p| p.prompt_version.as_deref()),
        input_hash: p.map(|p| p.input_hash.as_str()),
        strategy: p.and_then(|p| p.strategy.as_deref()),
        parts: p
            .filter(|p| !p.parts.is_empty())
            .and_then(|p| serde_json::to_string(&p.parts).ok()),
        notes: serde_json::to_string(&context.notes).unwrap_or_else(|_| "[]".into()),
    }
}

impl PgStore {
    /// Stores a document and its chunks, replacing any earlier version of it and its
    /// chunks (and the work queued for them: a worker finishing it later writes nothing),
    /// and records the change: one transaction, all or nothing. A chunk id that another
    /// document's card already has is a conflict, and nothing is written. Returns the feed
    /// position a reader must reach to see this write ([`PgStore::changes_since`]).
    pub fn put_document(
        &mut self,
        doc: &Document,
        ingest_key: &str,
        chunks: &[NewChunk<'_>],
    ) -> Result<u64> {
        let q = |op| query_failed(&self.target, op);
        let mut tx = self
            .client
            .transaction()
            .map_err(q("starting a document write"))?;
        drop_work(&mut tx, &self.target, &doc.id)?;
        tx.execute(
            "DELETE FROM situate.chunks WHERE document_id = $1",
            &[&doc.id],
        )
        .map_err(q("removing chunks"))?;
        tx.execute(
            "INSERT INTO situate.documents (document_id, source, title, language, kind, content_hash, ingest_key,
               chunk_count, char_count, ingested_at, metadata, text)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::text::jsonb, $12)
             ON CONFLICT (document_id) DO UPDATE SET source = excluded.source, title = excluded.title,
               language = excluded.language, kind = excluded.kind, content_hash = excluded.content_hash,
               ingest_key = excluded.ingest_key, chunk_count = excluded.chunk_count,
               char_count = excluded.char_count, ingested_at = excluded.ingested_at,
               metadata = excluded.metadata, text = excluded.text",
            &[
                &doc.id,
                &doc.source,
                &doc.title,
                &doc.language.code(),
                &doc.kind.as_stored(),
                &doc.content_hash,
                &ingest_key,
                &(chunks.len() as i64),
                &(doc.text.chars().count() as i64),
                &situate_core::now_rfc3339(),
                &serde_json::Value::Object(doc.metadata.clone()).to_string(),
                &doc.text,
            ],
        )
        .map_err(q("writing a document"))?;
        let insert = tx
            .prepare(
                "INSERT INTO situate.chunks (document_id, chunk_id, ordinal, char_start, char_end, heading_path,
                   original_text, generated_context, context_status, context_method, context_model,
                   context_prompt_version, context_input_hash, context_notes, context_strategy, context_parts,
                   card_kind, place)
                 VALUES ($1, $2, $3, $4, $5, $6::text::jsonb, $7, $8, $9, $10, $11, $12, $13, $14::text::jsonb, $15, $16::text::jsonb, $17, $18)",
            )
            .map_err(q("writing chunks"))?;
        for c in chunks {
            let p = columns(c.context);
            tx.execute(
                &insert,
                &[
                    &doc.id,
                    &c.chunk_id,
                    &(c.ordinal as i32),
                    &(c.char_start as i64),
                    &(c.char_end as i64),
                    &serde_json::to_string(c.heading_path).unwrap_or_else(|_| "[]".into()),
                    &c.original_text,
                    &c.context.text,
                    &c.context.status.as_str(),
                    &p.method,
                    &p.model,
                    &p.prompt_version,
                    &p.input_hash,
                    &p.notes,
                    &p.strategy,
                    &p.parts,
                    &c.kind.as_str(),
                    &c.place.map(|p| p.as_stored()),
                ],
            )
            .map_err(|source| {
                if source.code() == Some(&SqlState::UNIQUE_VIOLATION) {
                    PgError::Conflict(format!(
                        "chunk id {} of document {} is already used by another chunk",
                        c.chunk_id, doc.id
                    ))
                } else {
                    q("writing chunks")(source)
                }
            })?;
        }
        let position = record_change(&mut tx, &self.target, &doc.id, None)?;
        tx.commit().map_err(q("committing a document"))?;
        Ok(position)
    }

    /// Removes a document and its chunks, recording the change; `false` when it was not
    /// stored.
    pub fn remove_document(&mut self, id: &str) -> Result<bool> {
        let q = |op| query_failed(&self.target, op);
        let mut tx = self
            .client
            .transaction()
            .map_err(q("removing a document"))?;
        drop_work(&mut tx, &self.target, id)?;
        let n = tx
            .execute(
                "DELETE FROM situate.documents WHERE document_id = $1",
                &[&id],
            )
            .map_err(q("removing a document"))?;
        if n > 0 {
            record_change(&mut tx, &self.target, id, None)?;
        }
        tx.commit().map_err(q("removing a document"))?;
        Ok(n > 0)
    }

    /// Replaces the context of the card `chunk_id` (text, status, provenance, notes), the
    /// card keeping its key, and records the card in the change feed; `false` when there
    /// is no such card.
    pub fn update_context(&mut self, chunk_id: &str, context: &ChunkContext) -> Result<bool> {
        let q = |op| query_failed(&self.target, op);
        let mut tx = self.client.transaction().map_err(q("updating a context"))?;
        let Some((doc, card)) = write_context(&mut tx, &self.target, chunk_id, context)? else {
            return Ok(false);
        };
        record_change(&mut tx, &self.target, &doc, Some(card))?;
        tx.commit().map_err(q("updating a context"))?;
        Ok(true)
    }

    /// A worker's finished context, all in one transaction: the card `chunk_id` gets
    /// `context`, the change is recorded, the embedding of its new text is queued
    /// (`embed`: the text hash, when the store's embeddings are wanted; also for every
    /// model a switch of embedder is filling, [`PgStore::add_embed_target`]) and the work item
    /// is closed (`failed` for a failed context). Nothing is written, and `None` is
    /// returned, when the item is no longer open (a re-ingest replaced its document, or
    /// another worker finished it after this one's lease ran out); otherwise the feed
    /// position of the write.
    pub fn complete_context(
        &mut self,
        item: i64,
        chunk_id: &str,
        context: &ChunkContext,
        embed: Option<&str>,
    ) -> Result<Option<u64>> {
        let q = |op| query_failed(&self.target, op);
        let mut tx = self.client.transaction().map_err(q("writing a context"))?;
        let open = tx
            .query_opt(
                "SELECT 1 FROM situate.work WHERE id = $1 AND state = 'queued' FOR UPDATE",
                &[&item],
            )
            .map_err(q("checking the work item"))?
            .is_some();
        if !open {
            return Ok(None);
        }
        let written = write_context(&mut tx, &self.target, chunk_id, context)?;
        let failed = context.status == ContextStatus::Failed;
        let state = if failed { "failed" } else { "done" };
        tx.execute(
            "UPDATE situate.work SET state = $2, lease_until = NULL WHERE id = $1",
            &[&item, &state],
        )
        .map_err(q("closing the work item"))?;
        let Some((doc, card)) = written else {
            tx.commit().map_err(q("closing the work item"))?;
            return Ok(None);
        };
        let position = record_change(&mut tx, &self.target, &doc, Some(card))?;
        if let Some(hash) = embed {
            tx.query_one(crate::queue::ENQUEUE_EMBED, &[&chunk_id, &hash])
                .map_err(q("queueing the embedding"))?;
        }
        tx.commit().map_err(q("writing a context"))?;
        Ok(Some(position))
    }

    /// The document each of these chunk ids belongs to (ids with no card are absent).
    pub fn documents_of(&mut self, chunk_ids: &[&str]) -> Result<HashMap<String, String>> {
        let rows = self
            .client
            .query(
                "SELECT chunk_id, document_id FROM situate.chunks WHERE chunk_id = ANY($1)",
                &[&chunk_ids],
            )
            .map_err(query_failed(&self.target, "reading the chunks' documents"))?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Every stored document id, and the feed position of that view: a reader that takes
    /// these documents as they are now and then follows the feed from the position misses
    /// no change (rows written after the view are at or past it).
    pub fn document_ids(&mut self) -> Result<(Vec<String>, u64)> {
        let q = |op| query_failed(&self.target, op);
        let mut tx = self
            .client
            .build_transaction()
            .isolation_level(postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .map_err(q("listing documents"))?;
        let xmin: String = tx
            .query_one("SELECT pg_snapshot_xmin(pg_current_snapshot())::text", &[])
            .map_err(q("listing documents"))?
            .get(0);
        let ids: Vec<String> = tx
            .query(
                "SELECT document_id FROM situate.documents ORDER BY document_id",
                &[],
            )
            .map_err(q("listing documents"))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        tx.commit().map_err(q("listing documents"))?;
        let upto = xmin.parse::<u64>().map_err(|_| PgError::Unreadable {
            target: self.target.to_string(),
            what: format!("a transaction id {xmin:?} that is not a number"),
        })?;
        Ok((ids, upto))
    }

    /// A document as it is now: its fields and text, its ingest key and its cards, read in
    /// one snapshot (never half of a write). `None` when it is not stored.
    pub fn read_document(&mut self, id: &str) -> Result<Option<SharedDocument>> {
        let target = self.target.clone();
        let q = |op| query_failed(&target, op);
        let mut tx = self
            .client
            .build_transaction()
            .isolation_level(postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .map_err(q("reading a document"))?;
        let row = tx
            .query_opt(
                "SELECT source, title, language, kind, content_hash, ingest_key, metadata::text, text
                 FROM situate.documents WHERE document_id = $1",
                &[&id],
            )
            .map_err(q("reading a document"))?;
        let Some(row) = row else {
            tx.commit().map_err(q("reading a document"))?;
            return Ok(None);
        };
        let damaged = |what: String| PgError::Unreadable {
            target: target.to_string(),
            what: format!("the document {id}: {what}"),
        };
        let language: String = row.get(2);
        let metadata: String = row.get(6);
        let metadata = match serde_json::from_str::<serde_json::Value>(&metadata) {
            Ok(serde_json::Value::Object(m)) => m,
            Ok(_) => return Err(damaged("metadata that is not an object".into())),
            Err(e) => return Err(damaged(e.to_string())),
        };
        let doc = Document {
            id: id.to_string(),
            source: row.get(0),
            title: row.get(1),
            language: Language::from_str(&language).map_err(|e| damaged(e.to_string()))?,
            kind: DocKind::from_stored(row.get(3)),
            text: row.get(7),
            content_hash: row.get(4),
            metadata,
            preset_chunks: None,
            layout: Default::default(),
        };
        let ingest_key: String = row.get(5);
        let cards = cards_in(&mut tx, &target, id)?;
        tx.commit().map_err(q("reading a document"))?;
        Ok(Some(SharedDocument {
            doc,
            ingest_key,
            cards,
        }))
    }

    /// The stored state of a document (to decide whether it changed), if it is stored.
    pub fn document_state(&mut self, id: &str) -> Result<Option<DocumentState>> {
        let row = self
            .client
            .query_opt(
                "SELECT content_hash, ingest_key FROM situate.documents WHERE document_id = $1",
                &[&id],
            )
            .map_err(query_failed(&self.target, "reading a document's state"))?;
        Ok(row.map(|r| DocumentState {
            content_hash: r.get(0),
            ingest_key: r.get(1),
        }))
    }

    /// A document's cards, in order.
    pub fn cards_of(&mut self, document_id: &str) -> Result<Vec<ChunkCard>> {
        cards_in(&mut self.client, &self.target, document_id)
    }
}

/// A stored document as a reader takes it: the document (text and fields), its ingest key
/// and its cards in order.
#[derive(Debug, Clone)]
pub struct SharedDocument {
    /// The document.
    pub doc: Document,
    /// Its ingest key (the content with the chunker and contextualizer settings).
    pub ingest_key: String,
    /// Its cards, in order.
    pub cards: Vec<ChunkCard>,
}

/// Removes, in `tx`, the work queued for the cards of `document` (they are being replaced
/// or removed: a worker finishing an item later finds it gone and writes nothing).
fn drop_work(
    tx: &mut postgres::Transaction<'_>,
    target: &crate::Target,
    document: &str,
) -> Result<()> {
    tx.execute(
        "DELETE FROM situate.work WHERE chunk_id IN
           (SELECT chunk_id FROM situate.chunks WHERE document_id = $1)",
        &[&document],
    )
    .map_err(query_failed(target, "removing the document's queued work"))?;
    Ok(())
}

/// Replaces the context of the card `chunk_id` in `tx` (the card keeps its key); its
/// document and key, `None` when there is no such card.
fn write_context(
    tx: &mut postgres::Transaction<'_>,
    target: &crate::Target,
    chunk_id: &str,
    context: &ChunkContext,
) -> Result<Option<(String, i64)>> {
    let p = columns(context);
    let row = tx
        .query_opt(
            "UPDATE situate.chunks SET generated_context = $2, context_status = $3, context_method = $4,
               context_model = $5, context_prompt_version = $6, context_input_hash = $7,
               context_notes = $8::text::jsonb, context_strategy = $9, context_parts = $10::text::jsonb
             WHERE chunk_id = $1
             RETURNING document_id, id",
            &[
                &chunk_id,
                &context.text,
                &context.status.as_str(),
                &p.method,
                &p.model,
                &p.prompt_version,
                &p.input_hash,
                &p.notes,
                &p.strategy,
                &p.parts,
            ],
        )
        .map_err(query_failed(target, "writing a context"))?;
    Ok(row.map(|r| (r.get(0), r.get(1))))
}

/// Records a change of `document` (and `card`, for a context replaced in place) in the
/// transaction `tx`, and returns the feed position past it (this transaction's id + 1).
fn record_change(
    tx: &mut postgres::Transaction<'_>,
    target: &crate::Target,
    document: &str,
    card: Option<i64>,
) -> Result<u64> {
    let xid: String = tx
        .query_one(
            "INSERT INTO situate.changes (document_id, card) VALUES ($1, $2) RETURNING xid::text",
            &[&document, &card],
        )
        .map_err(query_failed(target, "recording the change"))?
        .get(0);
    xid.parse::<u64>()
        .map(|x| x + 1)
        .map_err(|_| PgError::Unreadable {
            target: target.to_string(),
            what: format!("a transaction id {xid:?} that is not a number"),
        })
}

/// The cards of `document_id`, in order, through `client` (a connection or a transaction).
fn cards_in(
    client: &mut impl postgres::GenericClient,
    target: &crate::Target,
    document_id: &str,
) -> Result<Vec<ChunkCard>> {
    {
        let rows = client
            .query(
                "SELECT id, document_id, chunk_id, ordinal, char_start, char_end, heading_path::text,
                        original_text, generated_context, context_status, context_method, context_model,
                        context_prompt_version, context_input_hash, context_notes::text, context_strategy,
                        context_parts::text, card_kind, place
                 FROM situate.chunks WHERE document_id = $1 ORDER BY ordinal",
                &[&document_id],
            )
            .map_err(query_failed(target, "reading cards"))?;
        rows.iter()
            .map(|r| {
                let chunk_id: String = r.get(2);
                let damaged = |what: String| PgError::Unreadable {
                    target: target.to_string(),
                    what: format!("the card {chunk_id}: {what}"),
                };
                let list = |s: String| {
                    serde_json::from_str::<Vec<String>>(&s).map_err(|e| damaged(e.to_string()))
                };
                let status: String = r.get(9);
                let provenance = match r.get::<_, Option<String>>(10) {
                    Some(method) => Some(Provenance {
                        method: ContextMethod::from_str(&method).map_err(damaged)?,
                        model: r.get(11),
                        prompt_version: r.get(12),
                        input_hash: r.get::<_, Option<String>>(13).unwrap_or_default(),
                        strategy: r.get(15),
                        parts: match r.get::<_, Option<String>>(16) {
                            Some(p) => {
                                serde_json::from_str(&p).map_err(|e| damaged(e.to_string()))?
                            }
                            None => Vec::new(),
                        },
                    }),
                    None => None,
                };
                Ok(ChunkCard {
                    card: r.get::<_, i64>(0) as u64,
                    document_id: r.get(1),
                    chunk_id: chunk_id.clone(),
                    ordinal: r.get::<_, i32>(3) as u32,
                    char_start: r.get::<_, i64>(4) as u64,
                    char_end: r.get::<_, i64>(5) as u64,
                    heading_path: list(r.get(6))?,
                    kind: r.get::<_, String>(17).parse().map_err(damaged)?,
                    place: r
                        .get::<_, Option<String>>(18)
                        .and_then(|p| situate_core::Place::from_stored(&p)),
                    original_text: r.get(7),
                    generated_context: r.get(8),
                    context_status: ContextStatus::from_str(&status)
                        .map_err(|e| damaged(e.to_string()))?,
                    provenance,
                    context_notes: list(r.get(14))?,
                })
            })
            .collect()
    }
}
