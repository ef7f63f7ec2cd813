//! Documents and chunk cards on PostgreSQL: the source of truth, as in the embedded store
//! (the original and the context apart, with provenance and status; one card per chunk
//! id). Every write records its document in the change feed in the same transaction.

use crate::{PgError, PgStore, Result, query_failed};
use postgres::error::SqlState;
use situate_core::{ChunkCard, ChunkContext, ContextMethod, ContextStatus, Document, Provenance};
use situate_store::{DocumentState, NewChunk};
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
    /// chunks, and records the change: one transaction, all or nothing. A chunk id that
    /// another document's card already has is a conflict, and nothing is written.
    pub fn put_document(
        &mut self,
        doc: &Document,
        ingest_key: &str,
        chunks: &[NewChunk<'_>],
    ) -> Result<()> {
        let q = |op| query_failed(&self.target, op);
        let mut tx = self
            .client
            .transaction()
            .map_err(q("starting a document write"))?;
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
                   context_prompt_version, context_input_hash, context_notes, context_strategy, context_parts)
                 VALUES ($1, $2, $3, $4, $5, $6::text::jsonb, $7, $8, $9, $10, $11, $12, $13, $14::text::jsonb, $15, $16::text::jsonb)",
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
        tx.execute(
            "INSERT INTO situate.changes (document_id) VALUES ($1)",
            &[&doc.id],
        )
        .map_err(q("recording the change"))?;
        tx.commit().map_err(q("committing a document"))
    }

    /// Removes a document and its chunks, recording the change; `false` when it was not
    /// stored.
    pub fn remove_document(&mut self, id: &str) -> Result<bool> {
        let q = |op| query_failed(&self.target, op);
        let mut tx = self
            .client
            .transaction()
            .map_err(q("removing a document"))?;
        let n = tx
            .execute(
                "DELETE FROM situate.documents WHERE document_id = $1",
                &[&id],
            )
            .map_err(q("removing a document"))?;
        if n > 0 {
            tx.execute(
                "INSERT INTO situate.changes (document_id) VALUES ($1)",
                &[&id],
            )
            .map_err(q("recording the change"))?;
        }
        tx.commit().map_err(q("removing a document"))?;
        Ok(n > 0)
    }

    /// Replaces the context of the card `chunk_id` (text, status, provenance, notes), the
    /// card keeping its key, and records the card in the change feed; `false` when there
    /// is no such card.
    pub fn update_context(&mut self, chunk_id: &str, context: &ChunkContext) -> Result<bool> {
        let p = columns(context);
        let q = |op| query_failed(&self.target, op);
        let mut tx = self.client.transaction().map_err(q("updating a context"))?;
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
            .map_err(q("updating a context"))?;
        let Some(row) = row else {
            return Ok(false);
        };
        let (doc, card): (String, i64) = (row.get(0), row.get(1));
        tx.execute(
            "INSERT INTO situate.changes (document_id, card) VALUES ($1, $2)",
            &[&doc, &card],
        )
        .map_err(q("recording the change"))?;
        tx.commit().map_err(q("updating a context"))?;
        Ok(true)
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
        let rows = self
            .client
            .query(
                "SELECT id, document_id, chunk_id, ordinal, char_start, char_end, heading_path::text,
                        original_text, generated_context, context_status, context_method, context_model,
                        context_prompt_version, context_input_hash, context_notes::text, context_strategy,
                        context_parts::text
                 FROM situate.chunks WHERE document_id = $1 ORDER BY ordinal",
                &[&document_id],
            )
            .map_err(query_failed(&self.target, "reading cards"))?;
        rows.iter()
            .map(|r| {
                let chunk_id: String = r.get(2);
                let damaged = |what: String| PgError::Unreadable {
                    target: self.target.to_string(),
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
