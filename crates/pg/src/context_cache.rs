//! The context cache on PostgreSQL: every finished context by its input hash, shared by
//! every worker of the cluster, so that a context is paid for once.

use crate::{PgError, PgStore, Result, query_failed};
use situate_core::{ChunkContext, ContextMethod, ContextStatus, Provenance, TokenUsage};
use std::collections::HashMap;
use std::str::FromStr;

/// The method column of a cached context that has no provenance (as in the embedded store).
const UNKNOWN_METHOD: &str = "unknown";

impl PgStore {
    /// Keeps `context` under `input_hash` unless one is kept already (`ON CONFLICT DO
    /// NOTHING`: two workers that both paid for it keep the first; the lease makes that
    /// rare, the key makes it harmless). Returns whether this write was the one kept.
    /// Failed and pending contexts are not kept: they are to be tried again.
    pub fn put_context(
        &mut self,
        input_hash: &str,
        context: &ChunkContext,
        usage: &TokenUsage,
    ) -> Result<bool> {
        if matches!(
            context.status,
            ContextStatus::Failed | ContextStatus::Pending
        ) {
            return Ok(false);
        }
        let p = context.provenance.as_ref();
        let parts = p
            .filter(|p| !p.parts.is_empty())
            .and_then(|p| serde_json::to_string(&p.parts).ok());
        let n = self
            .client
            .execute(
                "INSERT INTO situate.context_cache
                   (input_hash, context, status, method, model, prompt_version, strategy, notes, usage, created_at, parts)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8::text::jsonb, $9::text::jsonb, $10, $11::text::jsonb)
                 ON CONFLICT (input_hash) DO NOTHING",
                &[
                    &input_hash,
                    &context.text,
                    &context.status.as_str(),
                    &p.map_or(UNKNOWN_METHOD, |p| p.method.as_str()),
                    &p.and_then(|p| p.model.as_deref()),
                    &p.and_then(|p| p.prompt_version.as_deref()),
                    &p.and_then(|p| p.strategy.as_deref()),
                    &serde_json::to_string(&context.notes).unwrap_or_else(|_| "[]".into()),
                    &serde_json::to_string(usage).unwrap_or_else(|_| "{}".into()),
                    &situate_core::now_rfc3339(),
                    &parts,
                ],
            )
            .map_err(query_failed(&self.target, "writing the context cache"))?;
        Ok(n == 1)
    }

    /// The kept contexts for these input hashes (absent ones are not kept).
    pub fn cached_contexts(&mut self, hashes: &[&str]) -> Result<HashMap<String, ChunkContext>> {
        let rows = self
            .client
            .query(
                "SELECT input_hash, context, status, method, model, prompt_version, strategy,
                        notes::text, parts::text
                 FROM situate.context_cache WHERE input_hash = ANY($1)",
                &[&hashes],
            )
            .map_err(query_failed(&self.target, "reading the context cache"))?;
        let mut out = HashMap::new();
        for r in &rows {
            let hash: String = r.get(0);
            let damaged = |what: String| PgError::Unreadable {
                target: self.target.to_string(),
                what: format!("the cached context {hash}: {what}"),
            };
            let status: String = r.get(2);
            let status = ContextStatus::from_str(&status).map_err(|e| damaged(e.to_string()))?;
            let method: String = r.get(3);
            let provenance = if method == UNKNOWN_METHOD {
                None
            } else {
                let parts = match r.get::<_, Option<String>>(8) {
                    Some(p) => serde_json::from_str(&p).map_err(|e| damaged(e.to_string()))?,
                    None => Vec::new(),
                };
                Some(Provenance {
                    method: ContextMethod::from_str(&method).map_err(damaged)?,
                    model: r.get(4),
                    prompt_version: r.get(5),
                    input_hash: hash.clone(),
                    strategy: r.get(6),
                    parts,
                })
            };
            let notes: String = r.get(7);
            let context = ChunkContext {
                text: r.get(1),
                status,
                provenance,
                notes: serde_json::from_str(&notes).map_err(|e| damaged(e.to_string()))?,
            };
            out.insert(hash, context);
        }
        Ok(out)
    }
}
