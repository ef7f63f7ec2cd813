//! The context cache: every finished context by its input hash, written as soon as the
//! model answers (on a connection of its own), so that no context is paid for twice.

use crate::{Op, Result, Store, StoreError, now_rfc3339};
use rusqlite::{Connection, OptionalExtension, params};
use situate_core::{ChunkContext, ContextStatus, Provenance};
use std::collections::HashMap;
use std::str::FromStr;

/// The method column of a cached context that has no provenance.
const UNKNOWN_METHOD: &str = "unknown";

impl Store {
    /// Finished contexts in the context cache for these input hashes (absent ones are not
    /// cached).
    pub fn cached_contexts(&self, hashes: &[&str]) -> Result<HashMap<String, ChunkContext>> {
        let mut st = self
            .conn
            .prepare_cached(CACHE_SELECT)
            .op("reading the context cache")?;
        let mut out = HashMap::new();
        for h in hashes {
            if out.contains_key(*h) {
                continue;
            }
            let row = st
                .query_row([h], |r| cached_row(r, h))
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
}

/// The columns a cached context is read from.
const CACHE_SELECT: &str =
    "SELECT context, status, method, model, prompt_version, strategy, notes, parts
                 FROM context_cache WHERE input_hash = ?1";

/// One row of the context cache, read back under its key `h`.
fn cached_row(r: &rusqlite::Row<'_>, h: &str) -> rusqlite::Result<ChunkContext> {
    let status: String = r.get(1)?;
    let notes: String = r.get(6)?;
    // A context cached without provenance was written as method `unknown`.
    let method = match r.get_ref(2)?.as_str_or_null()? {
        None | Some(UNKNOWN_METHOD) => None,
        Some(_) => crate::method_column(r, 2)?,
    };
    let provenance = match method {
        Some(method) => Some(Provenance {
            method,
            model: r.get(3)?,
            prompt_version: r.get(4)?,
            input_hash: h.to_string(),
            strategy: r.get(5)?,
            parts: crate::parts_of(r, 7)?,
        }),
        None => None,
    };
    Ok(ChunkContext {
        text: r.get(0)?,
        status: ContextStatus::from_str(&status).unwrap_or(ContextStatus::Pending),
        provenance,
        notes: serde_json::from_str(&notes).unwrap_or_default(),
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
            "INSERT OR REPLACE INTO context_cache(input_hash, context, status, method, model, prompt_version, strategy, notes, usage, created_at, parts)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                input_hash,
                context.text,
                context.status.as_str(),
                p.map_or(UNKNOWN_METHOD, |p| p.method.as_str()),
                p.and_then(|p| p.model.as_deref()),
                p.and_then(|p| p.prompt_version.as_deref()),
                p.and_then(|p| p.strategy.as_deref()),
                serde_json::to_string(&context.notes).unwrap_or_else(|_| "[]".into()),
                serde_json::to_string(usage).unwrap_or_else(|_| "{}".into()),
                now_rfc3339(),
                crate::parts_column(p),
            ],
        )
        .op("writing the context cache")?;
        Ok(())
    }

    /// The context kept under `input_hash`, if any (read on this writer's connection, so a
    /// contextualizer can look up pieces of its own while the store is busy elsewhere).
    pub fn get(&self, input_hash: &str) -> Result<Option<ChunkContext>> {
        let conn = self
            .conn
            .lock()
            .map_err(|_| StoreError::Format("the context cache writer is poisoned".into()))?;
        conn.query_row(CACHE_SELECT, [input_hash], |r| cached_row(r, input_hash))
            .optional()
            .op("reading the context cache")
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
