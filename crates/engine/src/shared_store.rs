//! The shared store on PostgreSQL + pgvector (`situate store …`): what situate runs on past
//! one machine. Today: creating or checking its schema ([`migrate`]); the workers and query
//! nodes that use it come next (issue 19).

use crate::{EngineError, Result};
use serde::Serialize;

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
pub fn store_url(given: Option<&str>, settings: &crate::settings::Settings) -> Result<String> {
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
        }
        .to_string(),
        format_version,
        postgres,
        pgvector,
    })
}
