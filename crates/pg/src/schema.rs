//! The schema in a `situate` schema of its own, its format version, and [`migrate`].

use crate::*;

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
pub(crate) fn stored_version(
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
