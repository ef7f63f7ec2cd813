//! Salvage: what can still be read of a damaged store's caches, copied into a sound one.
//!
//! A damaged store is never repaired from itself (the engine refuses to rebuild from it),
//! but what was paid for in it, the contexts in the context cache and the vectors in the
//! embedding cache, is worth keeping: an ingest of the same documents into a new index
//! then takes them from there with no model call. Each table is read in key order, a page
//! at a time, and a read that fails is resumed past the failing key where the key allows
//! (the embedding cache's rowids), so one bad page costs only its own rows.

use crate::{Op, Result, Store};
use rusqlite::types::Value;
use rusqlite::{Connection, OpenFlags, params_from_iter};
use std::path::Path;

/// Rows read at a time.
const PAGE: i64 = 256;

/// What [`Store::salvage_from`] copied.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct Salvaged {
    /// Contexts copied into the context cache.
    pub contexts: u64,
    /// Vectors copied into the embedding cache.
    pub embeddings: u64,
    /// Rows of the table of cut embedding inputs copied.
    pub cuts: u64,
    /// The settings read from the damaged store (`embedder`, `chinese_tokenizer`, ...).
    pub settings: Vec<(String, String)>,
    /// What could not be read (each a table and SQLite's error).
    pub unreadable: Vec<String>,
}

/// The settings an index made again needs to agree with the damaged one.
const SETTINGS: [&str; 6] = [
    "chinese_tokenizer",
    "embedder",
    "vector_index",
    "embed_model",
    "embed_dim",
    "chunk_tokens",
];

impl Store {
    /// The settings of the (maybe damaged) store at `path`, read-only: what
    /// [`Store::salvage_from`] reports, without copying anything.
    pub fn salvage_settings(path: &Path) -> Result<Vec<(String, String)>> {
        Ok(read_settings(&open_damaged(path)?, &mut Vec::new()))
    }

    /// Reads the damaged store at `path` (read-only) and copies what can be read of its
    /// context cache, embedding cache and cut-input table into this store (rows this store
    /// has already are kept). Returns the counts, the damaged store's settings, and what
    /// could not be read.
    pub fn salvage_from(&self, path: &Path) -> Result<Salvaged> {
        let old = open_damaged(path)?;
        let mut out = Salvaged::default();
        out.settings = read_settings(&old, &mut out.unreadable);
        let tx = self.conn.unchecked_transaction().op("salvaging")?;
        out.contexts = copy_by_key(
            &old,
            &tx,
            "context_cache",
            &["input_hash"],
            &[
                "context",
                "status",
                "method",
                "model",
                "prompt_version",
                "strategy",
                "notes",
                "usage",
                "created_at",
                "parts",
            ],
            &mut out.unreadable,
        )?;
        out.cuts = copy_by_key(
            &old,
            &tx,
            "embedding_cuts",
            &["model", "text_hash"],
            &["tokens", "cut"],
            &mut out.unreadable,
        )?;
        out.embeddings = copy_embeddings(&old, &tx, &mut out.unreadable)?;
        tx.commit().op("salvaging")?;
        Ok(out)
    }
}

/// The damaged store, read-only.
fn open_damaged(path: &Path) -> Result<Connection> {
    Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .op("opening the damaged store")
}

/// The [`SETTINGS`] the store holds; a row that cannot be read is said in `unreadable`.
fn read_settings(old: &Connection, unreadable: &mut Vec<String>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for key in SETTINGS {
        match old.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| {
            r.get::<_, String>(0)
        }) {
            Ok(v) => out.push((key.to_string(), v)),
            Err(rusqlite::Error::QueryReturnedNoRows) => {}
            Err(e) => unreadable.push(format!("settings ({key}): {e}")),
        }
    }
    out
}

fn insert(
    tx: &rusqlite::Transaction<'_>,
    table: &str,
    cols: &[&str],
    row: Vec<Value>,
) -> Result<u64> {
    let marks: Vec<String> = (1..=cols.len()).map(|i| format!("?{i}")).collect();
    let sql = format!(
        "INSERT OR IGNORE INTO {table}({}) VALUES ({})",
        cols.join(", "),
        marks.join(", ")
    );
    let n = tx
        .prepare_cached(&sql)
        .and_then(|mut st| st.execute(params_from_iter(row)))
        .op("writing salvaged rows")?;
    Ok(n as u64)
}

/// Reads a page of rows of `sql` (bound to `after`), each of `width` values.
fn page(
    old: &Connection,
    sql: &str,
    after: &[Value],
    width: usize,
) -> rusqlite::Result<Vec<Vec<Value>>> {
    let mut st = old.prepare_cached(sql)?;
    let rows = st.query_map(params_from_iter(after.iter()), |r| {
        (0..width).map(|i| r.get::<_, Value>(i)).collect()
    })?;
    rows.collect()
}

/// A table read in the order of its key columns `keys` (a text key, or the cut table's
/// (model, text_hash)), a page at a time; a failure ends the table's copy (a key of text
/// cannot be stepped past).
fn copy_by_key(
    old: &Connection,
    tx: &rusqlite::Transaction<'_>,
    table: &str,
    keys: &[&str],
    rest: &[&str],
    unreadable: &mut Vec<String>,
) -> Result<u64> {
    let cols: Vec<&str> = keys.iter().chain(rest).copied().collect();
    let marks: Vec<String> = (1..=keys.len()).map(|i| format!("?{i}")).collect();
    let sql = format!(
        "SELECT {} FROM {table} WHERE ({}) > ({}) ORDER BY {} LIMIT {PAGE}",
        cols.join(", "),
        keys.join(", "),
        marks.join(", "),
        keys.join(", ")
    );
    let mut after = vec![Value::Text(String::new()); keys.len()];
    let mut copied = 0;
    loop {
        match page(old, &sql, &after, cols.len()) {
            Ok(rows) => {
                let last = rows.len() < PAGE as usize;
                for row in rows {
                    after = row[..keys.len()].to_vec();
                    copied += insert(tx, table, &cols, row)?;
                }
                if last {
                    return Ok(copied);
                }
            }
            Err(e) => {
                unreadable.push(format!("{table} after {after:?}: {e}"));
                return Ok(copied);
            }
        }
    }
}

/// The embedding cache, by rowid: a page that fails is stepped over a row at a time, then
/// in growing strides, up to the largest rowid the table's b-tree still names.
fn copy_embeddings(
    old: &Connection,
    tx: &rusqlite::Transaction<'_>,
    unreadable: &mut Vec<String>,
) -> Result<u64> {
    let cols = ["model", "text_hash", "vector"];
    let sql = format!(
        "SELECT rowid, model, text_hash, vector FROM embeddings WHERE rowid > ?1 ORDER BY rowid LIMIT {PAGE}"
    );
    let max: i64 = match old.query_row("SELECT max(rowid) FROM embeddings", [], |r| {
        r.get::<_, Option<i64>>(0)
    }) {
        Ok(m) => m.unwrap_or(0),
        Err(e) => {
            unreadable.push(format!("embeddings: {e}"));
            return Ok(0);
        }
    };
    let (mut after, mut copied, mut stride, mut lost) = (0i64, 0u64, 1i64, 0u32);
    while after < max {
        match page(old, &sql, &[Value::Integer(after)], 4) {
            Ok(rows) => {
                stride = 1;
                let last = rows.len() < PAGE as usize;
                for mut row in rows {
                    if let Value::Integer(id) = row[0] {
                        after = id;
                    }
                    row.remove(0);
                    copied += insert(tx, "embeddings", &cols, row)?;
                }
                if last {
                    break;
                }
            }
            Err(e) => {
                lost += 1;
                if lost <= 3 {
                    unreadable.push(format!("embeddings after rowid {after}: {e}"));
                }
                after += stride;
                stride = (stride * 2).min(4096);
            }
        }
    }
    if lost > 3 {
        unreadable.push(format!("embeddings: {lost} unreadable stretches in all"));
    }
    Ok(copied)
}
