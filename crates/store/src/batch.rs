//! Writes: a [`Batch`] is one SQLite transaction that advances the store generation and
//! journals every document it changes.

use crate::embeddings::insert_embeddings;
use crate::journal::{journal, journal_removed_cards};
use crate::{NewChunk, Op, Result, Store, StoreError, now_rfc3339};
use rusqlite::{OptionalExtension, Transaction, params};
use situate_core::{ChunkContext, Document};

impl Store {
    /// Starts a batch of writes (one transaction).
    pub fn batch(&mut self) -> Result<Batch<'_>> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .op("starting a write")?;
        Ok(Batch { tx, changed: 0 })
    }
}

/// A group of writes committed together (one SQLite transaction).
pub struct Batch<'a> {
    tx: Transaction<'a>,
    changed: usize,
}

impl Batch<'_> {
    /// Stores a document and its chunks, replacing any earlier version of it and its chunks.
    ///
    /// All or nothing per document (a savepoint): on error the batch is as before the call
    /// and may go on with other documents.
    pub fn put_document(
        &mut self,
        doc: &Document,
        ingest_key: &str,
        chunks: &[NewChunk<'_>],
    ) -> Result<()> {
        let sp = self.tx.savepoint().op("starting a document write")?;
        journal_removed_cards(&sp, &doc.id)?;
        sp.execute("DELETE FROM chunks WHERE document_id = ?1", [&doc.id])
            .op("removing chunks")?;
        sp.execute(
            "INSERT INTO documents(document_id, source, title, language, kind, content_hash, ingest_key, chunk_count, char_count, ingested_at, metadata, text)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
             ON CONFLICT(document_id) DO UPDATE SET source = excluded.source, title = excluded.title,
               language = excluded.language, kind = excluded.kind, content_hash = excluded.content_hash,
               ingest_key = excluded.ingest_key, chunk_count = excluded.chunk_count,
               char_count = excluded.char_count, ingested_at = excluded.ingested_at,
               metadata = excluded.metadata, text = excluded.text",
            params![
                doc.id,
                doc.source,
                doc.title,
                doc.language.code(),
                doc.kind.as_stored(),
                doc.content_hash,
                ingest_key,
                chunks.len() as i64,
                doc.text.chars().count() as i64,
                now_rfc3339(),
                serde_json::Value::Object(doc.metadata.clone()).to_string(),
                doc.text,
            ],
        )
        .op("writing a document")?;
        {
            let mut st = sp
                .prepare_cached(
                    "INSERT INTO chunks(document_id, chunk_id, ordinal, char_start, char_end, heading_path, original_text,
                       generated_context, context_status, context_method, context_model, context_prompt_version,
                       context_input_hash, context_notes, context_strategy, context_parts, card_kind, place)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
                )
                .op("writing chunks")?;
            for c in chunks {
                let p = c.context.provenance.as_ref();
                st.execute(params![
                    doc.id,
                    c.chunk_id,
                    c.ordinal,
                    c.char_start as i64,
                    c.char_end as i64,
                    serde_json::to_string(c.heading_path).unwrap_or_else(|_| "[]".into()),
                    c.original_text,
                    c.context.text,
                    c.context.status.as_str(),
                    p.map(|p| p.method.as_str()),
                    p.and_then(|p| p.model.as_deref()),
                    p.and_then(|p| p.prompt_version.as_deref()),
                    p.map(|p| p.input_hash.as_str()),
                    serde_json::to_string(&c.context.notes).unwrap_or_else(|_| "[]".into()),
                    p.and_then(|p| p.strategy.as_deref()),
                    crate::parts_column(p),
                    c.kind.as_str(),
                    c.place.map(|p| p.as_stored()),
                ])
                .map_err(|source| match &source {
                    rusqlite::Error::SqliteFailure(e, _)
                        if e.code == rusqlite::ErrorCode::ConstraintViolation =>
                    {
                        StoreError::Conflict(format!(
                            "chunk id {} of document {} is already used by another chunk",
                            c.chunk_id, doc.id
                        ))
                    }
                    _ => StoreError::Sqlite {
                        op: "writing chunks",
                        source,
                    },
                })?;
            }
        }
        journal(&sp, &doc.id)?;
        sp.commit().op("finishing a document write")?;
        self.changed += 1;
        Ok(())
    }

    /// Removes a document and its chunks; `false` when it was not stored.
    pub fn remove_document(&mut self, id: &str) -> Result<bool> {
        journal_removed_cards(&self.tx, id)?;
        self.tx
            .execute("DELETE FROM chunks WHERE document_id = ?1", [id])
            .op("removing chunks")?;
        let n = self
            .tx
            .execute("DELETE FROM documents WHERE document_id = ?1", [id])
            .op("removing a document")?;
        if n > 0 {
            journal(&self.tx, id)?;
            self.changed += 1;
        }
        Ok(n > 0)
    }

    /// Replaces the context of the card `chunk_id` (its text, status, provenance and notes);
    /// the card keeps its key. `false` when there is no such card. The document is journaled
    /// so that the indexes take the new context (the vector index replaces the card's vector).
    pub fn update_context(&mut self, chunk_id: &str, context: &ChunkContext) -> Result<bool> {
        let doc: Option<(String, i64)> = self
            .tx
            .query_row(
                "SELECT document_id, id FROM chunks WHERE chunk_id = ?1",
                [chunk_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .op("finding a card")?;
        let Some((doc, card)) = doc else {
            return Ok(false);
        };
        let p = context.provenance.as_ref();
        self.tx
            .execute(
                "UPDATE chunks SET generated_context = ?2, context_status = ?3, context_method = ?4,
                   context_model = ?5, context_prompt_version = ?6, context_input_hash = ?7,
                   context_notes = ?8, context_strategy = ?9, context_parts = ?10
                 WHERE id = ?1",
                params![
                    card,
                    context.text,
                    context.status.as_str(),
                    p.map(|p| p.method.as_str()),
                    p.and_then(|p| p.model.as_deref()),
                    p.and_then(|p| p.prompt_version.as_deref()),
                    p.map(|p| p.input_hash.as_str()),
                    serde_json::to_string(&context.notes).unwrap_or_else(|_| "[]".into()),
                    p.and_then(|p| p.strategy.as_deref()),
                    crate::parts_column(p),
                ],
            )
            .op("updating a context")?;
        self.tx
            .execute(
                "INSERT INTO card_journal(card, generation)
                 VALUES (?1, (SELECT CAST(value AS INTEGER) + 1 FROM meta WHERE key = 'generation'))
                 ON CONFLICT(card) DO UPDATE SET generation = excluded.generation",
                [card],
            )
            .op("writing the card journal")?;
        journal(&self.tx, &doc)?;
        self.changed += 1;
        Ok(true)
    }

    /// Caches embeddings of `model` by text hash (already cached ones are kept).
    pub fn put_embeddings(&mut self, model: &str, items: &[(&str, &[f32])]) -> Result<()> {
        insert_embeddings(&self.tx, model, items)
    }

    /// Caches embeddings of `model` in this batch, replacing cached ones (late chunking:
    /// a vector depends on its whole document).
    pub fn replace_embeddings(&mut self, model: &str, items: &[(&str, &[f32])]) -> Result<()> {
        crate::embeddings::write_embeddings(&self.tx, model, items, true)
    }

    /// Records embedding inputs of `model` that were cut to its window, in this batch.
    pub fn put_embedding_cuts(
        &mut self,
        model: &str,
        items: &[crate::embeddings::Cut<'_>],
    ) -> Result<()> {
        crate::embeddings::insert_cuts(&self.tx, model, items)
    }

    /// Documents written or removed in this batch so far.
    pub fn changed(&self) -> usize {
        self.changed
    }

    /// Commits; returns the new generation. Nothing is visible (or durable) before this.
    pub fn commit(self) -> Result<u64> {
        self.tx
            .execute("UPDATE meta SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT) WHERE key = 'generation'", [])
            .op("advancing the generation")?;
        let g: String = self
            .tx
            .query_row("SELECT value FROM meta WHERE key = 'generation'", [], |r| {
                r.get(0)
            })
            .op("advancing the generation")?;
        self.tx.commit().op("committing")?;
        g.parse()
            .map_err(|_| StoreError::Format(format!("generation {g:?} is not a number")))
    }
}
