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

mod batch;
mod cards;
mod context_cache;
// The contract suite is test code: its own tests and other stores' tests (`situate-pg`
// enables the feature as a dev-dependency) run it; no product build carries it.
#[cfg(any(test, feature = "contract"))]
pub mod contract;
mod embeddings;
mod filter;
mod journal;
mod salvage;
mod schema;

pub use batch::Batch;
pub use context_cache::ContextCacheWriter;
pub use embeddings::{Cut, blob_to_vector, vector_to_blob};
pub use salvage::Salvaged;

use rusqlite::{Connection, OptionalExtension, params};
use situate_core::{ChunkContext, ContextMethod, Language};
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
    /// The file is damaged: SQLite found it malformed, or not a database at all, or a
    /// column this store always fills is empty.
    #[error("card store: {op}: the file is damaged: {source}")]
    Damaged {
        /// What the store was doing.
        op: &'static str,
        /// SQLite's error.
        source: rusqlite::Error,
    },
}

impl StoreError {
    /// Whether the error says the file is damaged (not that an operation failed).
    pub fn is_damaged(&self) -> bool {
        matches!(self, StoreError::Damaged { .. })
    }
}

/// Writes each `(key, value)` into the settings table within `tx`.
fn insert_metas(tx: &rusqlite::Transaction<'_>, pairs: &[(&str, &str)]) -> Result<()> {
    for (key, value) in pairs {
        tx.execute(
            "INSERT INTO meta(key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            params![key, value],
        )
        .op("writing settings")?;
    }
    Ok(())
}

/// Whether SQLite's error means the file is damaged: malformed pages, a header that is not
/// SQLite's, or a NULL where the schema has `NOT NULL` (only a damaged page gives one; the
/// store reads such columns as non-optional values).
fn is_damage(e: &rusqlite::Error) -> bool {
    match e {
        rusqlite::Error::SqliteFailure(f, _) => matches!(
            f.code,
            rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase
        ),
        rusqlite::Error::InvalidColumnType(_, _, rusqlite::types::Type::Null) => true,
        _ => false,
    }
}

/// The error a streaming read's consumer may return.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `Result` with [`StoreError`].
pub type Result<T> = std::result::Result<T, StoreError>;

pub(crate) trait Op<T> {
    fn op(self, op: &'static str) -> Result<T>;
}

impl<T> Op<T> for rusqlite::Result<T> {
    fn op(self, op: &'static str) -> Result<T> {
        self.map_err(|source| {
            if is_damage(&source) {
                StoreError::Damaged { op, source }
            } else {
                StoreError::Sqlite { op, source }
            }
        })
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
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, schemars::JsonSchema)]
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
    /// What the card holds.
    pub kind: situate_core::CardKind,
    /// Its pages or slides.
    pub place: Option<situate_core::Place>,
    /// The original text.
    pub original_text: &'a str,
    /// The context outcome.
    pub context: &'a ChunkContext,
}

impl<'a> NewChunk<'a> {
    /// The chunks of the document `document_id` cut at `spans`, with their original texts
    /// (`originals`, from [`ChunkSpan::original`]) and contexts, in order.
    ///
    /// [`ChunkSpan::original`]: situate_core::ChunkSpan::original
    pub fn of_spans(
        document_id: &str,
        spans: &'a [situate_core::ChunkSpan],
        originals: &'a [std::borrow::Cow<'a, str>],
        contexts: &'a [ChunkContext],
    ) -> Vec<NewChunk<'a>> {
        spans
            .iter()
            .zip(originals)
            .zip(contexts)
            .map(|((s, original), context)| NewChunk {
                chunk_id: s.id_in(document_id),
                ordinal: s.ordinal,
                char_start: s.char_start,
                char_end: s.char_end,
                heading_path: &s.heading_path,
                kind: s.kind,
                place: s.place,
                original_text: original,
                context,
            })
            .collect()
    }
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

    /// SQLite's own check of the file: `PRAGMA integrity_check` when `full` (every page,
    /// every index against its table, `NOT NULL` columns), `quick_check` otherwise (the
    /// same without comparing indexes with their tables), then `foreign_key_check` (every
    /// card's document exists). Returns what they found, up to 20 lines; empty when the
    /// file is sound. A file too damaged to check is one line saying why.
    pub fn verify(&self, full: bool) -> Result<Vec<String>> {
        let pragma = if full {
            "PRAGMA integrity_check(20)"
        } else {
            "PRAGMA quick_check(20)"
        };
        let mut found = Vec::new();
        let rows = (|| -> rusqlite::Result<Vec<String>> {
            let mut st = self.conn.prepare(pragma)?;
            let rows = st.query_map([], |r| r.get::<_, String>(0))?;
            rows.collect()
        })();
        match rows {
            // SQLite starts its report with the database's name on a line of its own.
            Ok(rows) => found.extend(
                rows.iter()
                    .flat_map(|r| r.lines())
                    .filter(|l| *l != "ok" && !l.starts_with("*** in database"))
                    .map(str::to_string),
            ),
            Err(e) => found.push(e.to_string()),
        }
        let orphans = (|| -> rusqlite::Result<Vec<String>> {
            let mut st = self.conn.prepare("PRAGMA foreign_key_check")?;
            let rows = st.query_map([], |r| {
                Ok(format!(
                    "row {} of {} refers to a missing row of {}",
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(2)?
                ))
            })?;
            rows.take(20).collect()
        })();
        match orphans {
            Ok(rows) => found.extend(rows),
            Err(e) => found.push(e.to_string()),
        }
        found.truncate(20);
        Ok(found)
    }

    /// Writes a consistent copy of the whole store to `path` (`VACUUM INTO`: one read
    /// transaction, so writers on other connections go on meanwhile, and the copy is the
    /// store as of one commit). `path` must not exist.
    pub fn copy_to(&self, path: &Path) -> Result<()> {
        let target = path
            .to_str()
            .ok_or_else(|| StoreError::Format(format!("{} is not a UTF-8 path", path.display())))?;
        self.conn
            .execute("VACUUM INTO ?1", [target])
            .op("copying the store")?;
        Ok(())
    }

    /// A value from the store's settings table.
    pub fn meta(&self, key: &str) -> Result<Option<String>> {
        self.conn
            .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()
            .op("reading settings")
    }

    /// Several settings read in one statement, so from one snapshot of the store: values
    /// a writer changes together (a switch of embedder) are never seen half old, half new.
    pub fn metas(&self, keys: &[&str]) -> Result<std::collections::HashMap<String, String>> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT key, value FROM meta WHERE key IN (SELECT value FROM json_each(?1))",
            )
            .op("reading settings")?;
        let keys = serde_json::to_string(keys)
            .map_err(|e| StoreError::Format(format!("setting names: {e}")))?;
        let rows = st
            .query_map([keys], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })
            .op("reading settings")?;
        let mut out = std::collections::HashMap::new();
        for row in rows {
            let (k, v) = row.op("reading settings")?;
            out.insert(k, v);
        }
        Ok(out)
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

    /// Removes a value from the settings table (its own transaction).
    pub fn remove_meta(&self, key: &str) -> Result<()> {
        self.conn
            .execute("DELETE FROM meta WHERE key = ?1", [key])
            .op("writing settings")?;
        Ok(())
    }

    /// Writes several settings in one transaction: all of them or none.
    pub fn set_metas(&self, pairs: &[(&str, &str)]) -> Result<()> {
        let tx = self.conn.unchecked_transaction().op("writing settings")?;
        insert_metas(&tx, pairs)?;
        tx.commit().op("writing settings")?;
        Ok(())
    }

    /// Writes `pairs` and advances the generation, in one transaction; returns the new
    /// generation. A change every reader must see (`situate reembed`'s switch of
    /// embedder): readers reopen on a new generation.
    pub fn set_metas_advancing(&self, pairs: &[(&str, &str)]) -> Result<u64> {
        let tx = self.conn.unchecked_transaction().op("writing settings")?;
        insert_metas(&tx, pairs)?;
        tx.execute(
            "INSERT INTO meta(key, value) VALUES ('generation', '1') ON CONFLICT(key) DO UPDATE SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)",
            [],
        )
        .op("advancing the generation")?;
        let g: String = tx
            .query_row("SELECT value FROM meta WHERE key = 'generation'", [], |r| {
                r.get(0)
            })
            .op("advancing the generation")?;
        tx.commit().op("writing settings")?;
        g.parse()
            .map_err(|_| StoreError::Format(format!("generation {g:?} is not a number")))
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

pub(crate) use situate_core::now_rfc3339;

#[cfg(test)]
mod tests;

/// The parts of a composed context as stored (JSON), `None` for a context in one piece.
pub(crate) fn parts_column(p: Option<&situate_core::Provenance>) -> Option<String> {
    p.filter(|p| !p.parts.is_empty())
        .and_then(|p| serde_json::to_string(&p.parts).ok())
}

/// The parts of a composed context, read back (a malformed list is a damaged store).
pub(crate) fn parts_of(
    r: &rusqlite::Row<'_>,
    column: usize,
) -> rusqlite::Result<Vec<situate_core::ContextPart>> {
    let Some(s) = r.get::<_, Option<String>>(column)? else {
        return Ok(Vec::new());
    };
    serde_json::from_str(&s).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(
            column,
            rusqlite::types::Type::Text,
            Box::new(StoreError::Format(format!("a context's parts: {e}"))),
        )
    })
}

/// A stored context method, read back (an unknown one is a damaged or newer store).
pub(crate) fn method_column(
    r: &rusqlite::Row<'_>,
    column: usize,
) -> rusqlite::Result<Option<ContextMethod>> {
    let Some(m) = r.get::<_, Option<String>>(column)? else {
        return Ok(None);
    };
    ContextMethod::from_str(&m).map(Some).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(
            column,
            rusqlite::types::Type::Text,
            Box::new(StoreError::Format(e)),
        )
    })
}
