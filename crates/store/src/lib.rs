//! The chunk-card store: documents and chunk cards in one SQLite file.
//!
//! The store is the source of truth. Each chunk card keeps `original_text` and
//! `generated_context` apart, with the context's provenance and status; every index is
//! derived from the cards and can be rebuilt from them without an LLM call.
//!
//! **Writes** happen in [`Batch`]es, each one SQLite transaction: a crash before
//! [`Batch::commit`] leaves the store exactly as it was. Each committed batch bumps the
//! store's *generation* and records, in an index journal, which documents it changed. An
//! index records the generation it has caught up with; on open the engine replays the
//! journal past that point, so the indexes always converge on the store.
#![warn(missing_docs)]

mod schema;

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use situate_core::{
    CardRecord, CardSet, ChunkCard, ChunkContext, ContextStatus, Document, DocumentFilter,
    Language, Provenance,
};
use std::collections::HashMap;
use std::path::Path;
use std::str::FromStr;

/// Store errors, each with what the store was doing.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed.
    #[error("card store: {op}: {source}")]
    Sqlite {
        /// What the store was doing.
        op: &'static str,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// The file is not a store this version can read.
    #[error("card store: {0}")]
    Format(String),
    /// The consumer of a streaming read failed (its error, unchanged).
    #[error(transparent)]
    Consumer(Box<dyn std::error::Error + Send + Sync>),
    /// A write conflicts with what is stored (the write was rolled back).
    #[error("{0}")]
    Conflict(String),
}

/// The error a streaming read's consumer may return.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `Result` with [`StoreError`].
pub type Result<T> = std::result::Result<T, StoreError>;

trait Op<T> {
    fn op(self, op: &'static str) -> Result<T>;
}

impl<T> Op<T> for rusqlite::Result<T> {
    fn op(self, op: &'static str) -> Result<T> {
        self.map_err(|source| StoreError::Sqlite { op, source })
    }
}

/// What the store remembers of an ingested document, to decide whether it changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentState {
    /// Hash of the source content.
    pub content_hash: String,
    /// Hash of the content together with the chunker and contextualizer settings.
    pub ingest_key: String,
}

/// A stored document's fields (without its chunks).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StoredDocument {
    /// The document id.
    pub id: String,
    /// Where it came from.
    pub source: String,
    /// Its title.
    pub title: Option<String>,
    /// Its language.
    pub language: Language,
    /// Its kind (`text`, `markdown`, `code:rust`, ...).
    pub kind: String,
    /// Hash of the source content.
    pub content_hash: String,
    /// Number of chunks.
    pub chunk_count: u64,
    /// Length of the text in characters.
    pub char_count: u64,
    /// When it was (re)ingested, RFC 3339 UTC.
    pub ingested_at: String,
    /// Source metadata.
    pub metadata: serde_json::Value,
}

/// What an index needs of a card.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexRow {
    /// The card's row key.
    pub card: u64,
    /// Its document.
    pub document_id: String,
    /// Its document's language (which analyzer applies).
    pub language: Language,
    /// The context, when it is of an indexed status.
    pub context: Option<String>,
    /// The original text.
    pub original: String,
}

/// Counts over the whole store.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Stats {
    /// Documents.
    pub documents: u64,
    /// Chunk cards.
    pub chunks: u64,
    /// Characters of original text over all chunks.
    pub chunk_chars: u64,
    /// Documents per language.
    pub languages: Vec<(String, u64)>,
    /// Chunks per context status.
    pub context_status: Vec<(String, u64)>,
    /// Chunks per context method.
    pub context_methods: Vec<(String, u64)>,
    /// The store's generation (committed batches).
    pub generation: u64,
    /// Cached embeddings per model.
    pub embeddings: Vec<(String, u64)>,
}

/// Encodes a vector as little-endian f32 bytes (the embedding cache's format).
pub fn vector_to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Decodes [`vector_to_blob`]'s format.
pub fn blob_to_vector(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A chunk to write.
#[derive(Debug, Clone)]
pub struct NewChunk<'a> {
    /// Its id (unique in the store).
    pub chunk_id: String,
    /// Position in the document.
    pub ordinal: u32,
    /// Character range start.
    pub char_start: usize,
    /// Character range end (exclusive).
    pub char_end: usize,
    /// Markdown heading path.
    pub heading_path: &'a [String],
    /// The original text.
    pub original_text: &'a str,
    /// The context outcome.
    pub context: &'a ChunkContext,
}

/// The embedded card store.
pub struct Store {
    conn: Connection,
}

impl Store {
    /// Opens (creating if needed) the store at `path`.
    pub fn open(path: &Path) -> Result<Store> {
        let conn = Connection::open(path).op("opening the database")?;
        schema::prepare(&conn)?;
        Ok(Store { conn })
    }

    /// A value from the store's settings table.
    pub fn meta(&self, key: &str) -> Result<Option<String>> {
        self.conn
            .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()
            .op("reading settings")
    }

    /// Sets a value in the settings table (its own transaction).
    pub fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO meta(key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                params![key, value],
            )
            .op("writing settings")?;
        Ok(())
    }

    /// Writes several settings in one transaction: all of them or none.
    pub fn set_metas(&self, pairs: &[(&str, &str)]) -> Result<()> {
        let tx = self.conn.unchecked_transaction().op("writing settings")?;
        for (key, value) in pairs {
            tx.execute(
                "INSERT INTO meta(key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                params![key, value],
            )
            .op("writing settings")?;
        }
        tx.commit().op("writing settings")?;
        Ok(())
    }

    /// The number of committed batches so far.
    pub fn generation(&self) -> Result<u64> {
        Ok(self
            .meta("generation")?
            .and_then(|g| g.parse().ok())
            .unwrap_or(0))
    }

    /// The stored state of a document, if it is stored.
    pub fn document_state(&self, id: &str) -> Result<Option<DocumentState>> {
        self.conn
            .query_row(
                "SELECT content_hash, ingest_key FROM documents WHERE document_id = ?1",
                [id],
                |r| {
                    Ok(DocumentState {
                        content_hash: r.get(0)?,
                        ingest_key: r.get(1)?,
                    })
                },
            )
            .optional()
            .op("reading a document's state")
    }

    /// Starts a batch of writes (one transaction).
    pub fn batch(&mut self) -> Result<Batch<'_>> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .op("starting a write")?;
        Ok(Batch { tx, changed: 0 })
    }

    /// Documents changed after `generation`, with the generation that last changed each
    /// (the index journal).
    pub fn journal_after(&self, generation: u64) -> Result<Vec<(String, u64)>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT document_id, generation FROM index_journal WHERE generation > ?1 ORDER BY generation")
            .op("reading the index journal")?;
        let rows = st
            .query_map([generation as i64], |r| {
                Ok((r.get(0)?, r.get::<_, i64>(1)? as u64))
            })
            .op("reading the index journal")?;
        rows.collect::<rusqlite::Result<_>>()
            .op("reading the index journal")
    }

    /// Forgets journal entries the indexes have applied (up to `generation`).
    pub fn trim_journal(&self, generation: u64) -> Result<()> {
        self.conn
            .execute(
                "DELETE FROM index_journal WHERE generation <= ?1",
                [generation as i64],
            )
            .op("trimming the index journal")?;
        self.conn
            .execute(
                "DELETE FROM card_journal WHERE generation <= ?1",
                [generation as i64],
            )
            .op("trimming the card journal")?;
        Ok(())
    }

    /// Card keys removed (or replaced) after `generation`.
    pub fn removed_cards_after(&self, generation: u64) -> Result<Vec<u64>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT card FROM card_journal WHERE generation > ?1")
            .op("reading the card journal")?;
        let rows = st
            .query_map([generation as i64], |r| r.get::<_, i64>(0))
            .op("reading the card journal")?;
        rows.map(|r| r.map(|k| k as u64))
            .collect::<rusqlite::Result<_>>()
            .op("reading the card journal")
    }

    /// The index rows of one document's cards, in chunk order.
    pub fn index_rows_of(&self, document_id: &str) -> Result<Vec<IndexRow>> {
        let mut rows = Vec::new();
        self.for_each_index_row_of(document_id, |r| {
            rows.push(r);
            Ok(())
        })?;
        Ok(rows)
    }

    /// Calls `f` with each of one document's index rows, in chunk order, streaming (a large
    /// document's chunks are never all in memory at once).
    pub fn for_each_index_row_of(
        &self,
        document_id: &str,
        mut f: impl FnMut(IndexRow) -> std::result::Result<(), BoxError>,
    ) -> Result<()> {
        let mut st = self
            .conn
            .prepare_cached(&format!(
                "{INDEX_ROW_SELECT} WHERE c.document_id = ?1 ORDER BY c.ordinal"
            ))
            .op("reading cards")?;
        let mut rows = st.query([document_id]).op("reading cards")?;
        while let Some(r) = rows.next().op("reading cards")? {
            f(index_row(r).op("reading cards")?).map_err(StoreError::Consumer)?;
        }
        Ok(())
    }

    /// Calls `f` with every card's index row, streaming (for rebuilds).
    pub fn for_each_index_row(
        &self,
        mut f: impl FnMut(IndexRow) -> std::result::Result<(), BoxError>,
    ) -> Result<()> {
        let mut st = self
            .conn
            .prepare(&format!("{INDEX_ROW_SELECT} ORDER BY c.id"))
            .op("reading cards")?;
        let mut rows = st.query([]).op("reading cards")?;
        while let Some(r) = rows.next().op("reading cards")? {
            let row = index_row(r).op("reading cards")?;
            f(row).map_err(StoreError::Consumer)?;
        }
        Ok(())
    }

    /// Cards by row key, with their documents' title and source, in the order asked
    /// (missing keys are left out).
    pub fn cards(&self, keys: &[u64]) -> Result<Vec<CardRecord>> {
        let mut st = self
            .conn
            .prepare_cached(&format!("{CARD_SELECT} WHERE c.id = ?1"))
            .op("reading cards")?;
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            if let Some(c) = st
                .query_row([*k as i64], card_with_document)
                .optional()
                .op("reading cards")?
            {
                out.push(c);
            }
        }
        Ok(out)
    }

    /// A card by chunk id.
    pub fn card_by_chunk_id(&self, chunk_id: &str) -> Result<Option<CardRecord>> {
        self.conn
            .query_row(
                &format!("{CARD_SELECT} WHERE c.chunk_id = ?1"),
                [chunk_id],
                card_with_document,
            )
            .optional()
            .op("reading a card")
    }

    /// A document's cards, in order.
    pub fn cards_of(&self, document_id: &str) -> Result<Vec<ChunkCard>> {
        let mut st = self
            .conn
            .prepare_cached(&format!(
                "{CARD_SELECT} WHERE c.document_id = ?1 ORDER BY c.ordinal"
            ))
            .op("reading cards")?;
        let rows = st
            .query_map([document_id], |r| card_with_document(r).map(|c| c.card))
            .op("reading cards")?;
        rows.collect::<rusqlite::Result<_>>().op("reading cards")
    }

    /// A stored document.
    pub fn document(&self, id: &str) -> Result<Option<StoredDocument>> {
        self.conn
            .query_row(
                "SELECT document_id, source, title, language, kind, content_hash, chunk_count, char_count, ingested_at, metadata FROM documents WHERE document_id = ?1",
                [id],
                |r| {
                    let lang: String = r.get(3)?;
                    let meta: String = r.get(9)?;
                    Ok(StoredDocument {
                        id: r.get(0)?,
                        source: r.get(1)?,
                        title: r.get(2)?,
                        language: Language::from_str(&lang).unwrap_or(Language::Other),
                        kind: r.get(4)?,
                        content_hash: r.get(5)?,
                        chunk_count: r.get::<_, i64>(6)? as u64,
                        char_count: r.get::<_, i64>(7)? as u64,
                        ingested_at: r.get(8)?,
                        metadata: serde_json::from_str(&meta).unwrap_or(serde_json::Value::Null),
                    })
                },
            )
            .optional()
            .op("reading a document")
    }

    /// A stored document's whole text.
    pub fn document_text(&self, id: &str) -> Result<Option<String>> {
        self.conn
            .query_row(
                "SELECT text FROM documents WHERE document_id = ?1",
                [id],
                |r| r.get(0),
            )
            .optional()
            .op("reading a document's text")
    }

    /// Counts over the store.
    pub fn stats(&self) -> Result<Stats> {
        let one = |sql: &str| -> Result<u64> {
            self.conn
                .query_row(sql, [], |r| r.get::<_, i64>(0))
                .map(|v| v as u64)
                .op("counting")
        };
        let groups = |sql: &str| -> Result<Vec<(String, u64)>> {
            let mut st = self.conn.prepare(sql).op("counting")?;
            let rows = st
                .query_map([], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
                })
                .op("counting")?;
            rows.collect::<rusqlite::Result<_>>().op("counting")
        };
        Ok(Stats {
            documents: one("SELECT count(*) FROM documents")?,
            chunks: one("SELECT count(*) FROM chunks")?,
            chunk_chars: one("SELECT coalesce(sum(char_end - char_start), 0) FROM chunks")?,
            languages: groups(
                "SELECT language, count(*) FROM documents GROUP BY language ORDER BY 2 DESC",
            )?,
            context_status: groups(
                "SELECT context_status, count(*) FROM chunks GROUP BY 1 ORDER BY 2 DESC",
            )?,
            context_methods: groups(
                "SELECT coalesce(context_method, 'none'), count(*) FROM chunks GROUP BY 1 ORDER BY 2 DESC",
            )?,
            generation: self.generation()?,
            embeddings: groups(
                "SELECT model, count(*) FROM embeddings GROUP BY 1 ORDER BY 2 DESC",
            )?,
        })
    }

    /// Which of these text hashes have a cached embedding of `model` (the vectors are not
    /// read).
    pub fn cached(
        &self,
        model: &str,
        hashes: &[&str],
    ) -> Result<std::collections::HashSet<String>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT 1 FROM embeddings WHERE model = ?1 AND text_hash = ?2")
            .op("reading cached embeddings")?;
        let mut out = std::collections::HashSet::new();
        for h in hashes {
            if !out.contains(*h)
                && st
                    .exists(params![model, h])
                    .op("reading cached embeddings")?
            {
                out.insert(h.to_string());
            }
        }
        Ok(out)
    }

    /// Cached embeddings of `model` for these text hashes (those not cached are absent).
    pub fn embeddings(&self, model: &str, hashes: &[&str]) -> Result<HashMap<String, Vec<f32>>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT vector FROM embeddings WHERE model = ?1 AND text_hash = ?2")
            .op("reading cached embeddings")?;
        let mut out = HashMap::new();
        for h in hashes {
            if out.contains_key(*h) {
                continue;
            }
            if let Some(b) = st
                .query_row(params![model, h], |r| r.get::<_, Vec<u8>>(0))
                .optional()
                .op("reading cached embeddings")?
            {
                out.insert(h.to_string(), blob_to_vector(&b));
            }
        }
        Ok(out)
    }

    /// Caches embeddings outside a batch (its own transaction; the generation does not
    /// change: the cache is derived data, not content).
    pub fn cache_embeddings(&mut self, model: &str, items: &[(&str, &[f32])]) -> Result<()> {
        let tx = self.conn.transaction().op("caching embeddings")?;
        insert_embeddings(&tx, model, items)?;
        tx.commit().op("caching embeddings")
    }

    /// Documents (in id order) that have cards whose context status is one of `statuses`.
    pub fn documents_with_status(&self, statuses: &[ContextStatus]) -> Result<Vec<String>> {
        let mut out = Vec::new();
        let mut st = self
            .conn
            .prepare_cached("SELECT DISTINCT document_id FROM chunks WHERE context_status = ?1")
            .op("listing documents by context status")?;
        for s in statuses {
            let rows = st
                .query_map([s.as_str()], |r| r.get::<_, String>(0))
                .op("listing documents by context status")?;
            for r in rows {
                out.push(r.op("listing documents by context status")?);
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// Cards whose context status is one of `statuses` (all cards when empty), in document
    /// and chunk order, calling `f` for each.
    pub fn for_each_card_with_status(
        &self,
        statuses: &[ContextStatus],
        f: &mut dyn FnMut(CardRecord) -> Result<()>,
    ) -> Result<()> {
        let mut st = self
            .conn
            .prepare(&format!("{CARD_SELECT} ORDER BY c.document_id, c.ordinal"))
            .op("listing cards")?;
        let mut rows = st.query([]).op("listing cards")?;
        while let Some(r) = rows.next().op("listing cards")? {
            let rec = card_with_document(r).op("listing cards")?;
            if statuses.is_empty() || statuses.contains(&rec.card.context_status) {
                f(rec)?;
            }
        }
        Ok(())
    }

    /// Finished contexts in the context cache for these input hashes (absent ones are not
    /// cached).
    pub fn cached_contexts(&self, hashes: &[&str]) -> Result<HashMap<String, ChunkContext>> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT context, status, method, model, prompt_version, strategy, notes
                 FROM context_cache WHERE input_hash = ?1",
            )
            .op("reading the context cache")?;
        let mut out = HashMap::new();
        for h in hashes {
            if out.contains_key(*h) {
                continue;
            }
            let row = st
                .query_row([h], |r| {
                    let status: String = r.get(1)?;
                    let notes: String = r.get(6)?;
                    Ok(ChunkContext {
                        text: r.get(0)?,
                        status: ContextStatus::from_str(&status).unwrap_or(ContextStatus::Pending),
                        provenance: Some(Provenance {
                            method: r.get(2)?,
                            model: r.get(3)?,
                            prompt_version: r.get(4)?,
                            input_hash: h.to_string(),
                            strategy: r.get(5)?,
                        }),
                        notes: serde_json::from_str(&notes).unwrap_or_default(),
                    })
                })
                .optional()
                .op("reading the context cache")?;
            if let Some(c) = row {
                out.insert(h.to_string(), c);
            }
        }
        Ok(out)
    }

    /// A writer for the context cache on a connection of its own, usable from any thread
    /// while this store's connection is busy elsewhere.
    pub fn context_cache_writer(&self) -> Result<ContextCacheWriter> {
        let path = self
            .conn
            .path()
            .filter(|p| !p.is_empty())
            .ok_or_else(|| StoreError::Format("the store has no file to share".into()))?;
        let conn = Connection::open(path).op("opening the context cache")?;
        conn.pragma_update(None, "synchronous", "FULL")
            .op("setting synchronous")?;
        conn.busy_timeout(std::time::Duration::from_secs(30))
            .op("setting the busy timeout")?;
        Ok(ContextCacheWriter {
            conn: std::sync::Mutex::new(conn),
        })
    }

    /// The card keys of the documents `filter` allows.
    pub fn filter_cards(&self, filter: &DocumentFilter) -> Result<CardSet> {
        let mut clauses: Vec<String> = Vec::new();
        let mut args: Vec<String> = Vec::new();
        let any_of = |column: &str, op: &str, values: &[String], args: &mut Vec<String>| {
            if values.is_empty() {
                return None;
            }
            let ors: Vec<String> = values
                .iter()
                .map(|v| {
                    args.push(v.clone());
                    format!("{column} {op} ?{}", args.len())
                })
                .collect();
            Some(format!("({})", ors.join(" OR ")))
        };
        clauses.extend(any_of(
            "d.document_id",
            "=",
            &filter.document_ids,
            &mut args,
        ));
        clauses.extend(any_of(
            "d.document_id",
            "GLOB",
            &filter.path_globs,
            &mut args,
        ));
        let langs: Vec<String> = filter
            .languages
            .iter()
            .map(|l| l.code().to_string())
            .collect();
        clauses.extend(any_of("d.language", "=", &langs, &mut args));
        for (key, value) in &filter.metadata {
            if key.is_empty()
                || !key
                    .chars()
                    .all(|c| c.is_alphanumeric() || "_-.".contains(c))
            {
                return Err(StoreError::Conflict(format!(
                    "metadata key {key:?}: use letters, digits, '_', '-' and '.' only"
                )));
            }
            args.push(format!("$.\"{key}\""));
            let path = args.len();
            args.push(value.clone());
            clauses.push(format!(
                "CAST(json_extract(d.metadata, ?{path}) AS TEXT) = ?{}",
                args.len()
            ));
        }
        let sql = format!(
            "SELECT c.id FROM chunks c JOIN documents d ON d.document_id = c.document_id{}",
            if clauses.is_empty() {
                String::new()
            } else {
                format!(" WHERE {}", clauses.join(" AND "))
            }
        );
        let mut st = self.conn.prepare(&sql).op("filtering documents")?;
        let rows = st
            .query_map(rusqlite::params_from_iter(args.iter()), |r| {
                r.get::<_, i64>(0)
            })
            .op("filtering documents")?;
        let mut set = CardSet::new();
        for r in rows {
            set.insert(r.op("filtering documents")? as u64);
        }
        Ok(set)
    }

    /// Languages that have at least one document.
    pub fn languages(&self) -> Result<Vec<Language>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT DISTINCT language FROM documents")
            .op("reading languages")?;
        let rows = st
            .query_map([], |r| r.get::<_, String>(0))
            .op("reading languages")?;
        let mut out: Vec<Language> = rows
            .collect::<rusqlite::Result<Vec<_>>>()
            .op("reading languages")?
            .iter()
            .filter_map(|l| Language::from_str(l).ok())
            .collect();
        out.sort();
        Ok(out)
    }
}

const INDEX_ROW_SELECT: &str = "SELECT c.id, c.document_id, d.language, c.generated_context, c.context_status, c.original_text FROM chunks c JOIN documents d ON d.document_id = c.document_id";

fn index_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<IndexRow> {
    let lang: String = r.get(2)?;
    let status: String = r.get(4)?;
    let indexed = ContextStatus::from_str(&status)
        .map(|s| s.is_indexed())
        .unwrap_or(false);
    let context: Option<String> = r.get(3)?;
    Ok(IndexRow {
        card: r.get::<_, i64>(0)? as u64,
        document_id: r.get(1)?,
        language: Language::from_str(&lang).unwrap_or(Language::Other),
        context: context.filter(|c| indexed && !c.trim().is_empty()),
        original: r.get(5)?,
    })
}

const CARD_SELECT: &str = "SELECT c.id, c.document_id, c.chunk_id, c.ordinal, c.char_start, c.char_end, c.heading_path, c.original_text, c.generated_context, c.context_status, c.context_method, c.context_model, c.context_prompt_version, c.context_input_hash, c.context_notes, d.title, d.source, c.context_strategy FROM chunks c JOIN documents d ON d.document_id = c.document_id";

fn card_with_document(r: &rusqlite::Row<'_>) -> rusqlite::Result<CardRecord> {
    let json_list = |s: String| serde_json::from_str::<Vec<String>>(&s).unwrap_or_default();
    let status: String = r.get(9)?;
    let method: Option<String> = r.get(10)?;
    let provenance = match method {
        Some(method) => Some(Provenance {
            method,
            model: r.get(11)?,
            prompt_version: r.get(12)?,
            input_hash: r.get::<_, Option<String>>(13)?.unwrap_or_default(),
            strategy: r.get(17)?,
        }),
        None => None,
    };
    Ok(CardRecord {
        card: ChunkCard {
            card: r.get::<_, i64>(0)? as u64,
            document_id: r.get(1)?,
            chunk_id: r.get(2)?,
            ordinal: r.get(3)?,
            char_start: r.get::<_, i64>(4)? as u64,
            char_end: r.get::<_, i64>(5)? as u64,
            heading_path: json_list(r.get(6)?),
            original_text: r.get(7)?,
            generated_context: r.get(8)?,
            context_status: ContextStatus::from_str(&status).unwrap_or(ContextStatus::Pending),
            provenance,
            context_notes: json_list(r.get(14)?),
        },
        title: r.get(15)?,
        source: r.get(16)?,
    })
}

/// Writes finished contexts to the context cache, each in its own durable transaction (the
/// cache is derived data: the generation does not change).
pub struct ContextCacheWriter {
    conn: std::sync::Mutex<Connection>,
}

impl ContextCacheWriter {
    /// Keeps `context` under `input_hash` (replacing an older entry). Contexts that failed
    /// are not kept: they are to be tried again.
    pub fn put(
        &self,
        input_hash: &str,
        context: &ChunkContext,
        usage: &situate_core::TokenUsage,
    ) -> Result<()> {
        if matches!(
            context.status,
            ContextStatus::Failed | ContextStatus::Pending
        ) {
            return Ok(());
        }
        let p = context.provenance.as_ref();
        let conn = self
            .conn
            .lock()
            .map_err(|_| StoreError::Format("the context cache writer is poisoned".into()))?;
        conn.execute(
            "INSERT OR REPLACE INTO context_cache(input_hash, context, status, method, model, prompt_version, strategy, notes, usage, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                input_hash,
                context.text,
                context.status.as_str(),
                p.map_or("unknown", |p| p.method.as_str()),
                p.and_then(|p| p.model.as_deref()),
                p.and_then(|p| p.prompt_version.as_deref()),
                p.and_then(|p| p.strategy.as_deref()),
                serde_json::to_string(&context.notes).unwrap_or_else(|_| "[]".into()),
                serde_json::to_string(usage).unwrap_or_else(|_| "{}".into()),
                now_rfc3339(),
            ],
        )
        .op("writing the context cache")?;
        Ok(())
    }

    /// Replaces the verdict (text, status, reasons) of a cached context, keeping its usage
    /// and model: after its checks were run again (`situate contexts verify`), so that a
    /// later run taking it from the cache gets the new verdict. A hash not cached is no
    /// error.
    pub fn set_verdict(&self, input_hash: &str, context: &ChunkContext) -> Result<()> {
        let conn = self
            .conn
            .lock()
            .map_err(|_| StoreError::Format("the context cache writer is poisoned".into()))?;
        conn.execute(
            "UPDATE context_cache SET context = ?2, status = ?3, notes = ?4 WHERE input_hash = ?1",
            params![
                input_hash,
                context.text,
                context.status.as_str(),
                serde_json::to_string(&context.notes).unwrap_or_else(|_| "[]".into()),
            ],
        )
        .op("updating the context cache")?;
        Ok(())
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
                       context_input_hash, context_notes, context_strategy)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
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
                   context_notes = ?8, context_strategy = ?9
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

/// Records that a document changed in the generation being written.
fn journal(conn: &Connection, id: &str) -> Result<()> {
    conn.execute(
        "INSERT INTO index_journal(document_id, generation)
         VALUES (?1, (SELECT CAST(value AS INTEGER) + 1 FROM meta WHERE key = 'generation'))
         ON CONFLICT(document_id) DO UPDATE SET generation = excluded.generation",
        [id],
    )
    .op("writing the index journal")?;
    Ok(())
}

/// Caches embeddings of `model` by text hash (already cached ones are kept).
fn insert_embeddings(conn: &Connection, model: &str, items: &[(&str, &[f32])]) -> Result<()> {
    let mut st = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO embeddings(model, text_hash, vector) VALUES (?1, ?2, ?3)",
        )
        .op("caching embeddings")?;
    for (hash, v) in items {
        st.execute(params![model, hash, vector_to_blob(v)])
            .op("caching embeddings")?;
    }
    Ok(())
}

/// Records the card keys of a document's chunks about to be deleted, so indexes that cannot
/// delete by document (the vector index) remove exactly those keys on replay.
fn journal_removed_cards(conn: &Connection, id: &str) -> Result<()> {
    conn.execute(
        "INSERT INTO card_journal(card, generation)
         SELECT id, (SELECT CAST(value AS INTEGER) + 1 FROM meta WHERE key = 'generation')
         FROM chunks WHERE document_id = ?1
         ON CONFLICT(card) DO UPDATE SET generation = excluded.generation",
        [id],
    )
    .op("writing the card journal")?;
    Ok(())
}

/// Now as RFC 3339 UTC (seconds), computed by hand: a date library for one timestamp is not
/// worth the dependency.
fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests;
