//! The shared store on PostgreSQL with pgvector: what situate runs on past one machine.
//!
//! The embedded default keeps an index's chunk cards in SQLite beside its derived indexes.
//! Past one machine, the cards live in an existing distributed engine instead: PostgreSQL
//! with pgvector, which teams already run with streaming replicas and managed offerings
//! (never a home-made cluster). Workers on many machines write contexts and embeddings into
//! it; query nodes keep BM25 (tantivy; PostgreSQL has no BM25) and the vector index as local
//! derived indexes and follow its change feed.
//!
//! This crate is that store's foundation (issue 19, in progress): turning a
//! `postgres://` URL into a connection (the `PG*` variables fill what the URL leaves out;
//! the password is never shown), the schema in a `situate` schema of its own with its
//! format version, created or upgraded by [`migrate`] in one transaction under an advisory
//! lock, and refused by [`connect`] when it is of another version — each bad input a
//! clear error with nothing written. The store contract on top of it (documents, cards,
//! caches, the change feed) comes next.
#![warn(missing_docs)]

mod cards;
mod context_cache;
mod embeddings;
pub use cards::SharedDocument;
pub use embeddings::EmbedInput;

use postgres::{Client, Config, NoTls};
use std::time::Duration;

/// Bumped on every incompatible change of the PostgreSQL schema; a store of another
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

/// `Result` with [`PgError`].
pub type Result<T> = std::result::Result<T, PgError>;

/// The `PG*` environment variables a URL's missing parts are taken from, as libpq does.
#[derive(Debug, Clone, Default)]
pub struct Env {
    /// `PGHOST`.
    pub host: Option<String>,
    /// `PGPORT`.
    pub port: Option<String>,
    /// `PGUSER`.
    pub user: Option<String>,
    /// `PGPASSWORD`.
    pub password: Option<String>,
    /// `PGDATABASE`.
    pub database: Option<String>,
}

impl Env {
    /// The variables of this process.
    pub fn from_process() -> Env {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Env {
            host: var("PGHOST"),
            port: var("PGPORT"),
            user: var("PGUSER"),
            password: var("PGPASSWORD"),
            database: var("PGDATABASE"),
        }
    }
}

/// A store URL parsed: the client's configuration and the server named for messages.
#[derive(Clone)]
pub struct Target {
    config: Config,
    shown: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The configuration holds the password: only the server's name is shown.
        f.debug_tuple("Target").field(&self.shown).finish()
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

/// `url` with the password of its user-info part replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user_info, host)) => match user_info.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// Where a port would go in `url`: the end of its one host, when it names a host without
/// a port (`None` for no host, a port given, or several hosts).
fn host_without_port(url: &str) -> Option<usize> {
    let start = url.find("://")? + 3;
    let rest = &url[start..];
    let end = start + rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &url[start..end];
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let has_port = if host.starts_with('[') {
        !host.ends_with(']')
    } else {
        host.contains(':')
    };
    (!host.is_empty() && !has_port && !host.contains(',')).then_some(end)
}

impl Target {
    /// Parses a `postgres://` (or `postgresql://`) URL, filling what it leaves out from
    /// `env` (host, port, user, password, database). Only loopback and Unix-socket servers
    /// are reached without TLS, which this build does not have yet: a `sslmode` other than
    /// `disable`/`prefer` is refused rather than silently ignored.
    pub fn parse(url: &str, env: &Env) -> Result<Target> {
        let bad = |reason: String| PgError::Url {
            url: redact(url),
            reason,
        };
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(bad(
                "expected postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE".to_string(),
            ));
        }
        if let Some(p) = &env.port {
            p.parse::<u16>()
                .map_err(|_| bad(format!("PGPORT {p:?} is not a port number")))?;
        }
        // The client's URL parser gives a host without a port 5432 at once, so PGPORT is
        // put into the URL itself when its host has none (libpq's rule).
        let with_port = match (&env.port, host_without_port(url)) {
            (Some(p), Some(end)) => format!("{}:{p}{}", &url[..end], &url[end..]),
            _ => url.to_string(),
        };
        let mut config: Config = with_port
            .parse()
            .map_err(|e: postgres::Error| bad(e.to_string()))?;
        if config.get_ssl_mode() == postgres::config::SslMode::Require {
            return Err(bad(
                "sslmode=require: this build has no TLS client for PostgreSQL yet; reach the server over loopback, a Unix socket or an SSH tunnel".to_string(),
            ));
        }
        if config.get_hosts().is_empty() {
            config.host(env.host.as_deref().unwrap_or("localhost"));
        }
        if config.get_ports().is_empty()
            && let Some(port) = env.port.as_deref().and_then(|p| p.parse().ok())
        {
            config.port(port);
        }
        if config.get_user().is_none() {
            match &env.user {
                Some(u) => {
                    config.user(u);
                }
                None => {
                    return Err(bad(
                        "no user: give one in the URL (postgres://USER@HOST/DATABASE) or in PGUSER"
                            .to_string(),
                    ));
                }
            }
        }
        if config.get_password().is_none()
            && let Some(p) = &env.password
        {
            config.password(p);
        }
        if config.get_dbname().is_none() {
            let db = env
                .database
                .clone()
                .or_else(|| config.get_user().map(str::to_string))
                .unwrap_or_default();
            config.dbname(&db);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        let host = match config.get_hosts().first() {
            Some(postgres::config::Host::Tcp(h)) => h.clone(),
            #[cfg(unix)]
            Some(postgres::config::Host::Unix(p)) => p.display().to_string(),
            None => "localhost".to_string(),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let shown = format!(
            "{}@{host}:{port}/{}",
            config.get_user().unwrap_or_default(),
            config.get_dbname().unwrap_or_default()
        );
        Ok(Target { config, shown })
    }

    fn client(&self) -> Result<Client> {
        self.config
            .connect(NoTls)
            .map_err(|source| PgError::Connect {
                target: self.shown.clone(),
                source,
            })
    }
}

/// The error of a statement that failed on `target` while doing `op`. A free function of
/// the target, not a method: it is called while a transaction borrows the client.
fn query_failed(
    target: &Target,
    op: &'static str,
) -> impl FnOnce(postgres::Error) -> PgError + use<> {
    let target = target.shown.clone();
    move |source| PgError::Query { target, op, source }
}

/// What [`migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Migration {
    /// The schema was created at [`FORMAT_VERSION`].
    Created,
    /// It was already at [`FORMAT_VERSION`]: nothing changed.
    Current,
    /// It was of an older format and was brought to [`FORMAT_VERSION`] in place.
    Upgraded {
        /// The format it had.
        from: String,
    },
}

/// Format 2 added each card's kind (text, table, image) and place (pages or slides).
const V2_COLUMNS: &str =
    "ALTER TABLE situate.chunks ADD COLUMN IF NOT EXISTS card_kind TEXT NOT NULL DEFAULT 'text';
ALTER TABLE situate.chunks ADD COLUMN IF NOT EXISTS place TEXT;";

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

/// The tables of format 1, in the `situate` schema. The cards keep the original and the
/// context apart, with provenance and status, as in the embedded store; every index a
/// query node keeps is derived from them. `changes` is the change feed query nodes follow:
/// each row carries the id of the transaction that wrote it (`xid8`), so that a reader
/// takes only rows below its snapshot's xmin, whose writers have all ended — a serial
/// column alone commits out of order and a poll of it skips rows.
const TABLES: &str = "
CREATE TABLE situate.meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE situate.documents (
    document_id  TEXT PRIMARY KEY,
    source       TEXT NOT NULL,
    title        TEXT,
    language     TEXT NOT NULL,
    kind         TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    ingest_key   TEXT NOT NULL,
    chunk_count  BIGINT NOT NULL,
    char_count   BIGINT NOT NULL,
    ingested_at  TEXT NOT NULL,
    metadata     JSONB NOT NULL DEFAULT '{}',
    text         TEXT NOT NULL
);
CREATE TABLE situate.chunks (
    id                     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    document_id            TEXT NOT NULL REFERENCES situate.documents(document_id) ON DELETE CASCADE,
    chunk_id               TEXT NOT NULL UNIQUE,
    ordinal                INTEGER NOT NULL,
    char_start             BIGINT NOT NULL,
    char_end               BIGINT NOT NULL,
    heading_path           JSONB NOT NULL DEFAULT '[]',
    original_text          TEXT NOT NULL,
    generated_context      TEXT,
    context_status         TEXT NOT NULL,
    context_method         TEXT,
    context_model          TEXT,
    context_prompt_version TEXT,
    context_input_hash     TEXT,
    context_notes          JSONB NOT NULL DEFAULT '[]',
    context_strategy       TEXT,
    context_parts          JSONB,
    card_kind              TEXT NOT NULL DEFAULT 'text',
    place                  TEXT,
    UNIQUE (document_id, ordinal)
);
CREATE TABLE situate.context_cache (
    input_hash     TEXT PRIMARY KEY,
    context        TEXT,
    status         TEXT NOT NULL,
    method         TEXT NOT NULL,
    model          TEXT,
    prompt_version TEXT,
    strategy       TEXT,
    notes          JSONB NOT NULL DEFAULT '[]',
    usage          JSONB NOT NULL DEFAULT '{}',
    created_at     TEXT NOT NULL,
    parts          JSONB
);
CREATE TABLE situate.embeddings (
    model     TEXT NOT NULL,
    text_hash TEXT NOT NULL,
    embedding vector NOT NULL,
    PRIMARY KEY (model, text_hash)
);
CREATE TABLE situate.changes (
    position    BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    xid         xid8 NOT NULL DEFAULT pg_current_xact_id(),
    document_id TEXT NOT NULL,
    card        BIGINT
);
CREATE INDEX changes_xid ON situate.changes (xid);
CREATE TABLE situate.work (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    role        TEXT NOT NULL,
    chunk_id    TEXT NOT NULL,
    input_hash  TEXT NOT NULL,
    state       TEXT NOT NULL DEFAULT 'queued',
    owner       TEXT,
    lease_until TIMESTAMPTZ,
    attempts    INTEGER NOT NULL DEFAULT 0,
    UNIQUE (role, chunk_id, input_hash)
);
CREATE INDEX work_queued ON situate.work (role, id) WHERE state = 'queued';
";

/// Creates the store's schema in the database `url` names, or checks that it is current:
/// one transaction under an advisory lock (two processes migrating at once wait for each
/// other; a failure writes nothing). A store of another format is refused untouched.
pub fn migrate(url: &str, env: &Env) -> Result<Migration> {
    let target = Target::parse(url, env)?;
    let mut client = target.client()?;
    let q = |op| query_failed(&target, op);
    let mut tx = client.transaction().map_err(q("starting the migration"))?;
    // One lock for every situate migration in this database ('situate' as a number).
    tx.execute(
        "SELECT pg_advisory_xact_lock(7_306_087_400_523_114_597)",
        &[],
    )
    .map_err(q("waiting for other migrations"))?;
    if let Some(found) = stored_version(&mut tx, &target)? {
        if found == "1" {
            tx.batch_execute(V2_COLUMNS)
                .map_err(q("adding the columns of format 2"))?;
            tx.execute(
                "UPDATE situate.meta SET value = $1 WHERE key = 'format_version'",
                &[&FORMAT_VERSION.to_string()],
            )
            .map_err(q("recording the format"))?;
            tx.commit().map_err(q("committing the upgrade"))?;
            return Ok(Migration::Upgraded { from: found });
        }
        if found != FORMAT_VERSION.to_string() {
            return Err(PgError::Version {
                target: target.shown.clone(),
                found,
            });
        }
        return Ok(Migration::Current);
    }
    let available: bool = tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector')",
            &[],
        )
        .map_err(q("looking for pgvector"))?
        .get(0);
    if !available {
        return Err(PgError::NoPgvector {
            target: target.shown.clone(),
        });
    }
    tx.batch_execute("CREATE EXTENSION IF NOT EXISTS vector; CREATE SCHEMA IF NOT EXISTS situate;")
        .map_err(q("creating the pgvector extension and the situate schema"))?;
    tx.batch_execute(TABLES).map_err(q("creating the tables"))?;
    // `store_id` names this store: a query node that followed one store refuses another.
    tx.execute(
        "INSERT INTO situate.meta (key, value) VALUES ('format_version', $1), ('generation', '0'),
           ('store_id', gen_random_uuid()::text)",
        &[&FORMAT_VERSION.to_string()],
    )
    .map_err(q("recording the format version"))?;
    tx.commit().map_err(q("committing the migration"))?;
    Ok(Migration::Created)
}

/// The format version of the store in this database, `None` when it holds none.
fn stored_version(
    client: &mut impl postgres::GenericClient,
    target: &Target,
) -> Result<Option<String>> {
    let q = |op| query_failed(target, op);
    let has_meta: bool = client
        .query_one("SELECT to_regclass('situate.meta') IS NOT NULL", &[])
        .map_err(q("looking for the situate schema"))?
        .get(0);
    if !has_meta {
        return Ok(None);
    }
    let row = client
        .query_opt(
            "SELECT value FROM situate.meta WHERE key = 'format_version'",
            &[],
        )
        .map_err(q("reading the format version"))?;
    Ok(Some(row.map(|r| r.get(0)).unwrap_or_default()))
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

/// A piece of work a worker holds under a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// The work item.
    pub id: i64,
    /// The chunk it is for.
    pub chunk_id: String,
    /// The input hash its result is keyed by (a context is paid for once: results are
    /// written by input hash, a second write of the same one is a no-op).
    pub input_hash: String,
    /// How many times it has been claimed, this time included.
    pub attempts: i32,
}

impl PgStore {
    /// Queues work for `role` (`contextualize`, `embed`): one item per `(chunk_id,
    /// input_hash)`; an item already queued or done is left as it is. Returns how many
    /// were new.
    pub fn enqueue(&mut self, role: &str, items: &[(&str, &str)]) -> Result<u64> {
        let mut tx = self
            .client
            .transaction()
            .map_err(query_failed(&self.target, "queueing work"))?;
        let mut added = 0;
        for (chunk_id, input_hash) in items {
            added += tx
                .execute(
                    "INSERT INTO situate.work (role, chunk_id, input_hash) VALUES ($1, $2, $3)
                     ON CONFLICT (role, chunk_id, input_hash) DO NOTHING",
                    &[&role, chunk_id, input_hash],
                )
                .map_err(query_failed(&self.target, "queueing work"))?;
        }
        tx.commit()
            .map_err(query_failed(&self.target, "queueing work"))?;
        Ok(added)
    }

    /// Claims up to `n` queued items of `role` for `owner`, for `lease` from now. An item
    /// is free when nobody holds it or its lease has run out (its worker died or stalled):
    /// `FOR UPDATE SKIP LOCKED` lets any number of workers claim at once, each item going
    /// to one of them.
    pub fn claim(
        &mut self,
        role: &str,
        owner: &str,
        n: i64,
        lease: Duration,
    ) -> Result<Vec<Claimed>> {
        let rows = self
            .client
            .query(
                "UPDATE situate.work w
                 SET owner = $2, lease_until = clock_timestamp() + make_interval(secs => $4),
                     attempts = w.attempts + 1
                 WHERE w.id IN (
                     SELECT id FROM situate.work
                     WHERE role = $1 AND state = 'queued'
                       AND (lease_until IS NULL OR lease_until < clock_timestamp())
                     ORDER BY id
                     FOR UPDATE SKIP LOCKED
                     LIMIT $3)
                 RETURNING w.id, w.chunk_id, w.input_hash, w.attempts",
                &[&role, &owner, &n, &lease.as_secs_f64()],
            )
            .map_err(query_failed(&self.target, "claiming work"))?;
        let mut claimed: Vec<Claimed> = rows
            .iter()
            .map(|r| Claimed {
                id: r.get(0),
                chunk_id: r.get(1),
                input_hash: r.get(2),
                attempts: r.get(3),
            })
            .collect();
        claimed.sort_by_key(|c| c.id);
        Ok(claimed)
    }

    /// Extends `owner`'s leases on `ids` by `lease` from now (its heartbeat); returns the
    /// items it still held. One whose lease ran out and was claimed by another is not
    /// extended: its result may still be written (keyed by input hash, once).
    pub fn heartbeat(&mut self, owner: &str, ids: &[i64], lease: Duration) -> Result<Vec<i64>> {
        let rows = self
            .client
            .query(
                "UPDATE situate.work SET lease_until = clock_timestamp() + make_interval(secs => $3)
                 WHERE owner = $1 AND id = ANY($2) AND state = 'queued'
                 RETURNING id",
                &[&owner, &ids, &lease.as_secs_f64()],
            )
            .map_err(query_failed(&self.target, "extending leases"))?;
        let mut held: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        held.sort_unstable();
        Ok(held)
    }

    /// Marks an item done (`failed`: with a failure recorded on the card). Done by any
    /// worker that finished it, whether or not its lease still held: the result is
    /// already written by input hash.
    pub fn finish(&mut self, id: i64, failed: bool) -> Result<bool> {
        let state = if failed { "failed" } else { "done" };
        let n = self
            .client
            .execute(
                "UPDATE situate.work SET state = $2, lease_until = NULL WHERE id = $1 AND state = 'queued'",
                &[&id, &state],
            )
            .map_err(query_failed(&self.target, "finishing work"))?;
        Ok(n == 1)
    }

    /// Work of `role` by state: `(queued, held under a live lease, done, failed)`.
    pub fn work_counts(&mut self, role: &str) -> Result<(i64, i64, i64, i64)> {
        let r = self
            .client
            .query_one(
                "SELECT count(*) FILTER (WHERE state = 'queued'),
                        count(*) FILTER (WHERE state = 'queued' AND lease_until >= clock_timestamp()),
                        count(*) FILTER (WHERE state = 'done'),
                        count(*) FILTER (WHERE state = 'failed')
                 FROM situate.work WHERE role = $1",
                &[&role],
            )
            .map_err(query_failed(&self.target, "counting work"))?;
        Ok((r.get(0), r.get(1), r.get(2), r.get(3)))
    }
}

/// One row of the change feed: a document (and, for a context replaced in place, a card)
/// that a committed transaction wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The row's serial number (unique; commit order is not its order).
    pub position: i64,
    /// The transaction that wrote it.
    pub xid: u64,
    /// The document written or removed.
    pub document_id: String,
    /// The card whose context was replaced, when that is all that changed.
    pub card: Option<i64>,
}

/// What one read of the change feed returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changes {
    /// The changes of every transaction in `[from, upto)`, in transaction order.
    pub changes: Vec<Change>,
    /// The feed position to read from next: every transaction below it has ended, so no
    /// change below it can still appear.
    pub upto: u64,
}

impl PgStore {
    /// The changes written by transactions with ids in `[from, upto)`, where `upto` is the
    /// xmin of this read's snapshot: every transaction below it has ended (committed or
    /// rolled back), so the rows below it are final and a reader that goes on from `upto`
    /// never skips one. (A serial column alone is not a position: two writers take
    /// numbers 1 and 2, 2 commits first, a reader sees 2 and moves past 1 before it
    /// commits.) A transaction left open holds `upto` back: the feed lags, it loses
    /// nothing. Start from 0.
    pub fn changes_since(&mut self, from: u64) -> Result<Changes> {
        let rows = self
            .client
            .query(
                "WITH s AS (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin)
                 SELECT s.xmin::text, c.position, c.xid::text, c.document_id, c.card
                 FROM s LEFT JOIN situate.changes c
                   ON c.xid >= $1::text::xid8 AND c.xid < s.xmin
                 ORDER BY c.xid, c.position",
                &[&from.to_string()],
            )
            .map_err(|source| PgError::Query {
                target: self.target.shown.clone(),
                op: "reading the change feed",
                source,
            })?;
        let number = |s: &str| {
            s.parse::<u64>().map_err(|_| PgError::Unreadable {
                target: self.target.shown.clone(),
                what: format!("a transaction id {s:?} that is not a number"),
            })
        };
        let mut upto = from;
        let mut changes = Vec::new();
        for r in &rows {
            upto = number(r.get::<_, &str>(0))?.max(from);
            if let Some(position) = r.get::<_, Option<i64>>(1) {
                changes.push(Change {
                    position,
                    xid: number(r.get::<_, &str>(2))?,
                    document_id: r.get(3),
                    card: r.get(4),
                });
            }
        }
        Ok(Changes { changes, upto })
    }
}

impl PgStore {
    /// A value of the store's settings table.
    pub fn meta(&mut self, key: &str) -> Result<Option<String>> {
        let row = self
            .client
            .query_opt("SELECT value FROM situate.meta WHERE key = $1", &[&key])
            .map_err(query_failed(&self.target, "reading the store's settings"))?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Sets values of the store's settings table, all in one transaction.
    pub fn set_metas(&mut self, pairs: &[(&str, &str)]) -> Result<()> {
        let q = |op| query_failed(&self.target, op);
        let mut tx = self
            .client
            .transaction()
            .map_err(q("writing the store's settings"))?;
        for (key, value) in pairs {
            tx.execute(
                "INSERT INTO situate.meta (key, value) VALUES ($1, $2)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                &[key, value],
            )
            .map_err(q("writing the store's settings"))?;
        }
        tx.commit().map_err(q("writing the store's settings"))
    }

    /// The languages of the stored documents, sorted.
    pub fn languages(&mut self) -> Result<Vec<situate_core::Language>> {
        let rows = self
            .client
            .query(
                "SELECT DISTINCT language FROM situate.documents ORDER BY 1",
                &[],
            )
            .map_err(query_failed(&self.target, "reading the languages"))?;
        let mut out: Vec<situate_core::Language> = rows
            .iter()
            .filter_map(|r| r.get::<_, String>(0).parse().ok())
            .collect();
        out.sort();
        Ok(out)
    }

    /// Gives back `owner`'s leases on `ids` (a worker stopping, or one that cannot do the
    /// work): the items are free for the next claim at once.
    pub fn release(&mut self, owner: &str, ids: &[i64]) -> Result<u64> {
        self.client
            .execute(
                "UPDATE situate.work SET owner = NULL, lease_until = NULL
                 WHERE owner = $1 AND id = ANY($2) AND state = 'queued'",
                &[&owner, &ids],
            )
            .map_err(query_failed(&self.target, "releasing leases"))
    }

    /// Counts over the whole store, for `situate status --store`.
    pub fn counts(&mut self) -> Result<StoreCounts> {
        let q = |op| query_failed(&self.target, op);
        let one = self
            .client
            .query_one(
                "SELECT (SELECT count(*) FROM situate.documents), (SELECT count(*) FROM situate.chunks),
                        (SELECT count(*) FROM situate.context_cache),
                        (SELECT coalesce(sum((usage->>'input_tokens')::bigint), 0)::bigint FROM situate.context_cache),
                        (SELECT coalesce(sum((usage->>'output_tokens')::bigint), 0)::bigint FROM situate.context_cache),
                        pg_snapshot_xmin(pg_current_snapshot())::text",
                &[],
            )
            .map_err(q("counting"))?;
        let groups = |client: &mut postgres::Client, sql: &str| -> Result<Vec<(String, i64)>> {
            Ok(client
                .query(sql, &[])
                .map_err(q("counting"))?
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect())
        };
        let context_status = groups(
            &mut self.client,
            "SELECT context_status, count(*) FROM situate.chunks GROUP BY 1 ORDER BY 2 DESC, 1",
        )?;
        let embeddings = groups(
            &mut self.client,
            "SELECT model, count(*) FROM situate.embeddings GROUP BY 1 ORDER BY 2 DESC, 1",
        )?;
        let work = self
            .client
            .query(
                "SELECT role, count(*) FILTER (WHERE state = 'queued'),
                        count(*) FILTER (WHERE state = 'queued' AND lease_until >= clock_timestamp()),
                        count(*) FILTER (WHERE state = 'done'),
                        count(*) FILTER (WHERE state = 'failed'),
                        count(DISTINCT owner) FILTER (WHERE state = 'queued' AND lease_until >= clock_timestamp())
                 FROM situate.work GROUP BY role ORDER BY role",
                &[],
            )
            .map_err(q("counting work"))?
            .iter()
            .map(|r| WorkCounts {
                role: r.get(0),
                queued: r.get(1),
                leased: r.get(2),
                done: r.get(3),
                failed: r.get(4),
                workers: r.get(5),
            })
            .collect();
        let position: String = one.get(5);
        Ok(StoreCounts {
            documents: one.get(0),
            chunks: one.get(1),
            contexts_cached: one.get(2),
            input_tokens: one.get(3),
            output_tokens: one.get(4),
            context_status,
            embeddings,
            work,
            position: position.parse().unwrap_or(0),
        })
    }
}

/// Counts over the shared store.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct StoreCounts {
    /// Documents.
    pub documents: i64,
    /// Chunk cards.
    pub chunks: i64,
    /// Contexts in the context cache (each paid for once).
    pub contexts_cached: i64,
    /// Input tokens the cached contexts cost.
    pub input_tokens: i64,
    /// Output tokens the cached contexts cost.
    pub output_tokens: i64,
    /// Cards per context status.
    pub context_status: Vec<(String, i64)>,
    /// Kept embeddings per model.
    pub embeddings: Vec<(String, i64)>,
    /// The work queue, per role.
    pub work: Vec<WorkCounts>,
    /// The feed position every change below which is final.
    pub position: u64,
}

/// The work queue of one role.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct WorkCounts {
    /// `contextualize` or `embed`.
    pub role: String,
    /// Items not finished (held or free).
    pub queued: i64,
    /// Of those, held under a live lease.
    pub leased: i64,
    /// Items done.
    pub done: i64,
    /// Items that ended in a recorded failure.
    pub failed: i64,
    /// Workers holding leases now.
    pub workers: i64,
}

#[cfg(test)]
mod tests;
