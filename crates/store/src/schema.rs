//! The store's schema and its format version, checked on every open.

use crate::{Op, Result, StoreError};
use rusqlite::Connection;

/// Bumped on every incompatible schema change; a store of another version is refused.
pub const FORMAT_VERSION: u32 = 7;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS documents (
    document_id  TEXT PRIMARY KEY,
    source       TEXT NOT NULL,
    title        TEXT,
    language     TEXT NOT NULL,
    kind         TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    ingest_key   TEXT NOT NULL,
    chunk_count  INTEGER NOT NULL,
    char_count   INTEGER NOT NULL,
    ingested_at  TEXT NOT NULL,
    metadata     TEXT NOT NULL DEFAULT '{}',
    text         TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS chunks (
    id                     INTEGER PRIMARY KEY,
    document_id            TEXT NOT NULL REFERENCES documents(document_id),
    chunk_id               TEXT NOT NULL UNIQUE,
    ordinal                INTEGER NOT NULL,
    char_start             INTEGER NOT NULL,
    char_end               INTEGER NOT NULL,
    heading_path           TEXT NOT NULL DEFAULT '[]',
    original_text          TEXT NOT NULL,
    generated_context      TEXT,
    context_status         TEXT NOT NULL,
    context_method         TEXT,
    context_model          TEXT,
    context_prompt_version TEXT,
    context_input_hash     TEXT,
    context_notes          TEXT NOT NULL DEFAULT '[]',
    context_strategy       TEXT,
    context_parts          TEXT,
    card_kind              TEXT NOT NULL DEFAULT 'text',
    place                  TEXT,
    UNIQUE (document_id, ordinal)
);
CREATE TABLE IF NOT EXISTS index_journal (
    document_id TEXT PRIMARY KEY,
    generation  INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS index_journal_generation ON index_journal(generation);
";

/// The embedding cache as version 6 lays it out: a rowid table, whose rows keep a vector
/// of up to about 4 KB on their own page. Versions 2–5 had a `WITHOUT ROWID` table, whose
/// rows are index entries: past about 1 KB the rest of each row went to an overflow page
/// of its own, so a 384-dimension vector (1.5 KB) took two pages, 6.5 KB of which 2.8 were
/// unused (at one million chunks 3.9 GB of overflow pages, 2.8 GB of them empty;
/// BENCHMARKS.md).
const EMBEDDINGS_TABLE: &str = "
CREATE TABLE IF NOT EXISTS embeddings (
    model     TEXT NOT NULL,
    text_hash TEXT NOT NULL,
    vector    BLOB NOT NULL,
    UNIQUE (model, text_hash)
);
";

/// Version 7's table: the texts whose embedding input was longer than the embedder reads,
/// by (model, text hash), with the tokens the input had and how many were cut (only cut
/// texts have a row). Derived data, like the embedding cache beside it: `stats` counts the
/// cards it covers, so that no input is cut silently.
const V7_TABLES: &str = "
CREATE TABLE IF NOT EXISTS embedding_cuts (
    model     TEXT NOT NULL,
    text_hash TEXT NOT NULL,
    tokens    INTEGER NOT NULL,
    cut       INTEGER NOT NULL,
    PRIMARY KEY (model, text_hash)
) WITHOUT ROWID;
";

/// Version 6's migration: the embedding cache copied into the rowid layout.
fn v6_embeddings() -> String {
    format!(
        "ALTER TABLE embeddings RENAME TO embeddings_v5;{EMBEDDINGS_TABLE}
        INSERT INTO embeddings(model, text_hash, vector)
            SELECT model, text_hash, vector FROM embeddings_v5;
        DROP TABLE embeddings_v5;"
    )
}

/// The tables version 2 added: the embedding cache (in version 6's layout) and the card
/// journal.
const V2_TABLES: &str = "
CREATE TABLE IF NOT EXISTS card_journal (
    card       INTEGER PRIMARY KEY,
    generation INTEGER NOT NULL
);
";

/// What version 3 added: the LLM context cache (one row per finished context, written as
/// soon as the model answers, so a crash never costs a call twice) and the window strategy
/// on each card.
const V3_TABLES: &str = "
CREATE TABLE IF NOT EXISTS context_cache (
    input_hash     TEXT PRIMARY KEY,
    context        TEXT,
    status         TEXT NOT NULL,
    method         TEXT NOT NULL,
    model          TEXT,
    prompt_version TEXT,
    strategy       TEXT,
    notes          TEXT NOT NULL DEFAULT '[]',
    usage          TEXT NOT NULL DEFAULT '{}',
    created_at     TEXT NOT NULL,
    parts          TEXT
) WITHOUT ROWID;
";

pub fn prepare(conn: &Connection) -> Result<()> {
    // WAL lets searches read while an ingest writes; FULL sync makes each commit durable.
    conn.pragma_update(None, "journal_mode", "WAL")
        .op("enabling WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")
        .op("setting synchronous")?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .op("enabling foreign keys")?;
    conn.busy_timeout(std::time::Duration::from_secs(30))
        .op("setting the busy timeout")?;
    // An existing store is only read here: a search opening the store must not queue
    // behind an ingest's write transaction.
    let existing: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'format_version'",
            [],
            |r| r.get(0),
        )
        .ok();
    // Version 1 had neither v2 table; adding them is its whole migration (a version-1
    // index has no vector index whose deletions it would need). Version 3 added the context
    // cache and each card's window strategy; version 4 the parts of composed contexts;
    // version 5 each card's kind (text, table, image) and place (pages or slides); version
    // 6 moved the embedding cache to a rowid table (a copy of every cached vector, once);
    // version 7 added the table of cut embedding inputs.
    const V5_COLUMNS: &str = "ALTER TABLE chunks ADD COLUMN card_kind TEXT NOT NULL DEFAULT 'text';ALTER TABLE chunks ADD COLUMN place TEXT;";
    const V4_COLUMNS: &str = "ALTER TABLE chunks ADD COLUMN context_parts TEXT;";
    let v6 = v6_embeddings();
    let upgrade = match existing.as_deref() {
        Some("1") => Some(format!(
            "{EMBEDDINGS_TABLE}{V2_TABLES}ALTER TABLE chunks ADD COLUMN context_strategy TEXT;{V3_TABLES}{V4_COLUMNS}{V5_COLUMNS}{V7_TABLES}"
        )),
        Some("2") => Some(format!(
            "ALTER TABLE chunks ADD COLUMN context_strategy TEXT;{V3_TABLES}{V4_COLUMNS}{V5_COLUMNS}{v6}{V7_TABLES}"
        )),
        Some("3") => Some(format!(
            "{V4_COLUMNS}ALTER TABLE context_cache ADD COLUMN parts TEXT;{V5_COLUMNS}{v6}{V7_TABLES}"
        )),
        Some("4") => Some(format!("{V5_COLUMNS}{v6}{V7_TABLES}")),
        Some("5") => Some(format!("{v6}{V7_TABLES}")),
        Some("6") => Some(V7_TABLES.to_string()),
        _ => None,
    };
    if let Some(steps) = upgrade {
        conn.execute_batch(&format!(
            "BEGIN IMMEDIATE;{steps}UPDATE meta SET value = '{FORMAT_VERSION}' WHERE key = 'format_version';COMMIT;"
        ))
        .op("upgrading the store's format")?;
        if !matches!(existing.as_deref(), Some("1" | "6")) {
            // The old cache's pages are free now (4.4 GB of a 1M-chunk store): give them back
            // to the file system once, rather than leave the upgraded store larger than
            // before (at 1M: 9.6 GB until vacuumed, 5.2 GB after).
            conn.execute_batch("VACUUM;")
                .op("compacting the store after its upgrade")?;
        }
        return Ok(());
    }
    if let Some(version) = existing {
        return check_version(&version);
    }
    conn.execute_batch(&format!(
        "BEGIN IMMEDIATE;{SCHEMA}{EMBEDDINGS_TABLE}{V2_TABLES}{V3_TABLES}{V7_TABLES}
        INSERT OR IGNORE INTO meta(key, value) VALUES ('format_version', '{FORMAT_VERSION}');
        INSERT OR IGNORE INTO meta(key, value) VALUES ('generation', '0');
        COMMIT;"
    ))
    .op("creating the schema")?;
    let version: String = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'format_version'",
            [],
            |r| r.get(0),
        )
        .op("reading the format version")?;
    check_version(&version)
}

fn check_version(version: &str) -> Result<()> {
    if version != FORMAT_VERSION.to_string() {
        return Err(StoreError::Format(format!(
            "format version {version} is not supported by this build (it reads version {FORMAT_VERSION}); \
             re-create the index with this version"
        )));
    }
    Ok(())
}
