//! The shared store on PostgreSQL + pgvector (`situate store …`): what situate runs on past
//! one machine. This module: the store's URL, creating or checking its schema
//! ([`migrate`]), its status ([`status`]) and the shared context cache as the
//! contextualizers see it. Ingest into it: `shared_ingest`; its workers: `worker`; query
//! nodes following it: `follow`.

use serde::Serialize;
use situate_core::ChunkContext;
use situate_engine::node::{ContextCache, ContextKeeper};
use situate_engine::{EngineError, Result};
use std::collections::HashMap;
use std::sync::Mutex;

/// The shared context cache on its own connection, usable from a contextualizer's tasks.
///
/// Each call runs on a thread of its own: the synchronous PostgreSQL client blocks on an
/// async runtime of its own, which tokio forbids inside the engine's runtime, where the
/// contextualizers call their sink.
pub(crate) struct PgCache {
    store: Mutex<situate_pg::PgStore>,
}

impl PgCache {
    pub(crate) fn connect(url: &str, env: &situate_pg::Env) -> Result<PgCache> {
        Ok(PgCache {
            store: Mutex::new(situate_pg::PgStore::connect(url, env)?),
        })
    }

    /// Runs `f` with the connection, on a thread outside any async runtime.
    pub(crate) fn with<T: Send>(
        &self,
        f: impl FnOnce(&mut situate_pg::PgStore) -> Result<T> + Send,
    ) -> Result<T> {
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut store = self.store.lock().map_err(|_| {
                    EngineError::Invalid("the context cache's connection was poisoned".into())
                })?;
                f(&mut store)
            })
            .join()
            .map_err(|_| EngineError::Invalid("the context cache's thread panicked".into()))?
        })
    }
}

impl ContextKeeper for PgCache {
    fn get(&self, key: &str) -> Result<Option<ChunkContext>> {
        let key = key.to_string();
        self.with(move |s| Ok(s.cached_contexts(&[&key])?.into_values().next()))
    }
    fn put(
        &self,
        key: &str,
        context: &ChunkContext,
        usage: &situate_core::TokenUsage,
    ) -> Result<()> {
        self.with(|s| {
            s.put_context(key, context, usage)
                .map(|_| ())
                .map_err(Into::into)
        })
    }
}

impl ContextCache for PgCache {
    fn cached(&self, hashes: &[&str]) -> Result<HashMap<String, ChunkContext>> {
        self.with(|s| s.cached_contexts(hashes).map_err(Into::into))
    }
    fn keeper(&self) -> Option<&dyn ContextKeeper> {
        Some(self)
    }
}

/// What `situate store migrate` did, in its `--json` shape.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct MigrateReport {
    /// The server and database (`user@host:port/database`; never the password).
    pub store: String,
    /// `created` (the schema was made) or `current` (it was already this build's format).
    pub outcome: String,
    /// The store's format version.
    pub format_version: u32,
    /// The server's PostgreSQL version.
    pub postgres: String,
    /// Its pgvector version.
    pub pgvector: String,
}

/// The store URL a command uses: the one given (`--store`), else `[store] url`.
pub fn store_url(given: Option<&str>, settings: &situate_engine::Settings) -> Result<String> {
    given
        .map(str::to_string)
        .or_else(|| settings.store.url.clone())
        .filter(|u| !u.trim().is_empty())
        .ok_or_else(|| {
            EngineError::Invalid(
                "no store: give --store postgres://USER@HOST:PORT/DATABASE or [store] url in situate.toml".to_string(),
            )
        })
}

/// Creates the shared store's schema in the database `url` names (pgvector, the `situate`
/// schema, its tables, its format version), or checks that it is current. One transaction
/// under an advisory lock; a wrong URL, a server that is down, a server without pgvector or
/// a store of another format is an error and nothing is written.
pub fn migrate(url: &str) -> Result<MigrateReport> {
    let env = situate_pg::Env::from_process();
    let outcome = situate_pg::migrate(url, &env)?;
    let mut store = situate_pg::PgStore::connect(url, &env)?;
    let (format_version, postgres, pgvector) = store.versions()?;
    Ok(MigrateReport {
        store: store.target().to_string(),
        outcome: match outcome {
            situate_pg::Migration::Created => "created",
            situate_pg::Migration::Current => "current",
            situate_pg::Migration::Upgraded { .. } => "upgraded",
        }
        .to_string(),
        format_version,
        postgres,
        pgvector,
    })
}

/// What `situate status --store` shows: progress and cost, the same from any machine.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct StoreStatus {
    /// The server and database (`user@host:port/database`; never the password).
    pub store: String,
    /// Documents, cards per context status (`pending` ones wait for a worker), contexts
    /// and the tokens they cost, embeddings, the work queue per role, the feed position.
    #[serde(flatten)]
    pub counts: situate_pg::StoreCounts,
    /// The context method the last ingest recorded for the workers.
    pub context_method: Option<String>,
    /// The LLM the last ingest recorded, when one was given.
    pub context_llm: Option<String>,
}

/// The shared store's progress and cost ([`StoreStatus`]).
pub fn status(url: &str) -> Result<StoreStatus> {
    let mut store = situate_pg::PgStore::connect(url, &situate_pg::Env::from_process())?;
    Ok(StoreStatus {
        store: store.target().to_string(),
        counts: store.counts()?,
        context_method: store.meta("context_method")?,
        context_llm: store.meta("context_llm")?,
    })
}

/// The context method and LLM the store's last ingest recorded, for a worker started
/// without `--context`/`--llm`.
pub fn recorded_contexts(url: &str) -> Result<(Option<String>, Option<String>)> {
    let mut store = situate_pg::PgStore::connect(url, &situate_pg::Env::from_process())?;
    Ok((store.meta("context_method")?, store.meta("context_llm")?))
}
