//! The shared store on PostgreSQL with pgvector: what situate runs on past one machine.
//!
//! The embedded default keeps an index's chunk cards in SQLite beside its derived indexes.
//! Past one machine, the cards live in an existing distributed engine instead: PostgreSQL
//! with pgvector, which teams already run with streaming replicas and managed offerings
//! (never a home-made cluster). Workers on many machines write contexts and embeddings into
//! it; query nodes keep BM25 (tantivy; PostgreSQL has no BM25) and the vector index as local
//! derived indexes and follow its change feed.
//!
//! This crate is that store's client, a file per part: `target.rs` (a `postgres://` URL
//! into a connection, the `PG*` variables filling what it leaves out, the password never
//! shown), `schema.rs` (the tables in a `situate` schema of their own with a format version,
//! created or upgraded by [`migrate`] in one transaction under an advisory lock; a store of
//! another version is refused by [`PgStore::connect`] untouched), `cards.rs` (documents and
//! cards, written whole), `context_cache.rs` and `embeddings.rs` (what was paid for, by
//! input hash), `queue.rs` (the work queue under leases), `feed.rs` (the change feed) and
//! `meta.rs` (settings and counts). Every bad input is a clear error with nothing written.
#![warn(missing_docs)]

mod cards;
mod context_cache;
mod embeddings;
mod feed;
mod meta;
mod queue;
mod schema;
mod target;
pub use cards::SharedDocument;
pub use embeddings::EmbedInput;

use postgres::{Client, Config, NoTls};
use std::time::Duration;

/// Bumped on every incompatible change of the PostgreSQL schema; a store of another
pub use feed::*;
pub use meta::*;
pub use queue::*;
pub use schema::*;
pub use target::*;

/// version is refused, never written.
pub const FORMAT_VERSION: u32 = 2;

/// The schema situate's tables live in, apart from whatever else the database holds.
pub const SCHEMA: &str = "situate";

/// How long a connection attempt may take before it is an error.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors of the PostgreSQL store, each saying which server (never its password). The
/// client's error is the source, not repeated in the message (its own message already
/// carries its cause, which a printed chain would show twice).
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// The URL does not parse.
    #[error("store URL {url}: {reason}")]
    Url {
        /// The URL, its password hidden.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The server could not be reached or refused the connection.
    #[error("PostgreSQL at {target}: cannot connect")]
    Connect {
        /// `user@host:port/database`.
        target: String,
        /// The client's error.
        source: postgres::Error,
    },
    /// The server has no pgvector.
    #[error(
        "PostgreSQL at {target}: the pgvector extension is not installed on this server (CREATE EXTENSION vector needs it); install pgvector, then run `situate store migrate`"
    )]
    NoPgvector {
        /// `user@host:port/database`.
        target: String,
    },
    /// The database holds no situate store yet.
    #[error(
        "PostgreSQL at {target}: no situate store in this database (schema `{SCHEMA}`); create it with `situate store migrate`"
    )]
    NoStore {
        /// `user@host:port/database`.
        target: String,
    },
    /// The database holds a store of another format version.
    #[error(
        "PostgreSQL at {target}: the situate store is of format {found}, this build reads format {FORMAT_VERSION}; nothing was written"
    )]
    Version {
        /// `user@host:port/database`.
        target: String,
        /// The version found.
        found: String,
    },
    /// The server answered something this build cannot read.
    #[error("PostgreSQL at {target}: {what}")]
    Unreadable {
        /// `user@host:port/database`.
        target: String,
        /// What could not be read.
        what: String,
    },
    /// A write conflicts with what is stored (nothing was written).
    #[error("{0}")]
    Conflict(String),
    /// A statement failed.
    #[error("PostgreSQL at {target}: {op}")]
    Query {
        /// `user@host:port/database`.
        target: String,
        /// What the store was doing.
        op: &'static str,
        /// The client's error.
        source: postgres::Error,
    },
}

impl PgError {
    /// Whether the connection to the server was lost or could not be made (a server
    /// restarting, a network cut): worth reconnecting and trying again, unlike an error in
    /// what was asked.
    pub fn is_connection_lost(&self) -> bool {
        match self {
            PgError::Connect { .. } => true,
            PgError::Query { source, .. } => {
                if source.is_closed() {
                    return true;
                }
                if let Some(code) = source.code() {
                    // Class 08 (connection exception) and the server shutting down.
                    let c = code.code();
                    return c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03");
                }
                // No SQL state: the socket failed under the client.
                let mut e: Option<&(dyn std::error::Error + 'static)> = Some(source);
                while let Some(err) = e {
                    if err.downcast_ref::<std::io::Error>().is_some() {
                        return true;
                    }
                    e = err.source();
                }
                false
            }
            _ => false,
        }
    }
}

/// `Result` with [`PgError`].
pub type Result<T> = std::result::Result<T, PgError>;

/// The error of a statement that failed on `target` while doing `op`. A free function of
/// the target, not a method: it is called while a transaction borrows the client.
fn query_failed(
    target: &Target,
    op: &'static str,
) -> impl FnOnce(postgres::Error) -> PgError + use<> {
    let target = target.shown.clone();
    move |source| PgError::Query { target, op, source }
}

/// A connection to a store of this build's format.
pub struct PgStore {
    client: Client,
    target: Target,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// Connects to the store in the database `url` names; a database without one, or with
    /// one of another format, is an error and nothing is written.
    pub fn connect(url: &str, env: &Env) -> Result<PgStore> {
        let target = Target::parse(url, env)?;
        let mut client = target.client()?;
        match stored_version(&mut client, &target)? {
            None => Err(PgError::NoStore {
                target: target.shown.clone(),
            }),
            Some(v) if v != FORMAT_VERSION.to_string() => Err(PgError::Version {
                target: target.shown.clone(),
                found: v,
            }),
            Some(_) => Ok(PgStore { client, target }),
        }
    }

    /// The server this store is on (`user@host:port/database`).
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The store's format version and the server's PostgreSQL and pgvector versions.
    pub fn versions(&mut self) -> Result<(u32, String, String)> {
        let row = self
            .client
            .query_one(
                "SELECT current_setting('server_version'), (SELECT extversion FROM pg_extension WHERE extname = 'vector')",
                &[],
            )
            .map_err(|source| PgError::Query {
                target: self.target.shown.clone(),
                op: "reading the server's versions",
                source,
            })?;
        Ok((
            FORMAT_VERSION,
            row.get(0),
            row.get::<_, Option<String>>(1).unwrap_or_default(),
        ))
    }
}

#[cfg(test)]
mod tests;
