//! The embedding cache: vectors by (model id, hash of the embedded text), so that no text
//! is embedded twice.

use crate::{Op, Result, Store};
use rusqlite::{Connection, OptionalExtension, params};
use std::collections::HashMap;

/// Encodes a vector as little-endian f32 bytes (the embedding cache's format).
pub fn vector_to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Decodes [`vector_to_blob`]'s format.
pub fn blob_to_vector(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

impl Store {
    /// Which of these text hashes have a cached embedding of `model` (the vectors are not
    /// read).
    pub fn cached(
        &self,
        model: &str,
        hashes: &[&str],
    ) -> Result<std::collections::HashSet<String>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT 1 FROM embeddings WHERE model = ?1 AND text_hash = ?2")
            .op("reading cached embeddings")?;
        let mut out = std::collections::HashSet::new();
        for h in hashes {
            if !out.contains(*h)
                && st
                    .exists(params![model, h])
                    .op("reading cached embeddings")?
            {
                out.insert(h.to_string());
            }
        }
        Ok(out)
    }

    /// Cached embeddings of `model` for these text hashes (those not cached are absent).
    pub fn embeddings(&self, model: &str, hashes: &[&str]) -> Result<HashMap<String, Vec<f32>>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT vector FROM embeddings WHERE model = ?1 AND text_hash = ?2")
            .op("reading cached embeddings")?;
        let mut out = HashMap::new();
        for h in hashes {
            if out.contains_key(*h) {
                continue;
            }
            if let Some(b) = st
                .query_row(params![model, h], |r| r.get::<_, Vec<u8>>(0))
                .optional()
                .op("reading cached embeddings")?
            {
                out.insert(h.to_string(), blob_to_vector(&b));
            }
        }
        Ok(out)
    }

    /// Caches embeddings outside a batch (its own transaction; the generation does not
    /// change: the cache is derived data, not content).
    pub fn cache_embeddings(&mut self, model: &str, items: &[(&str, &[f32])]) -> Result<()> {
        let tx = self.conn.transaction().op("caching embeddings")?;
        insert_embeddings(&tx, model, items)?;
        tx.commit().op("caching embeddings")
    }
}

/// A text whose embedding input was cut: its hash, the tokens the input had, the tokens cut.
pub type Cut<'a> = (&'a str, u64, u64);

/// Records cut embedding inputs of `model` (a text embedded again replaces its row).
pub(crate) fn insert_cuts(conn: &Connection, model: &str, items: &[Cut<'_>]) -> Result<()> {
    let mut st = conn
        .prepare_cached(
            "INSERT OR REPLACE INTO embedding_cuts(model, text_hash, tokens, cut) VALUES (?1, ?2, ?3, ?4)",
        )
        .op("recording cut embedding inputs")?;
    for (hash, tokens, cut) in items {
        st.execute(params![model, hash, *tokens as i64, *cut as i64])
            .op("recording cut embedding inputs")?;
    }
    Ok(())
}

impl Store {
    /// The cut embedding inputs of `model`: text hash → (tokens the input had, tokens cut).
    pub fn embedding_cuts(&self, model: &str) -> Result<HashMap<String, (u64, u64)>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT text_hash, tokens, cut FROM embedding_cuts WHERE model = ?1")
            .op("reading cut embedding inputs")?;
        let rows = st
            .query_map(params![model], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    (r.get::<_, i64>(1)? as u64, r.get::<_, i64>(2)? as u64),
                ))
            })
            .op("reading cut embedding inputs")?;
        rows.collect::<rusqlite::Result<HashMap<_, _>>>()
            .op("reading cut embedding inputs")
    }

    /// Caches embeddings outside a batch, replacing cached ones (late chunking's vectors).
    pub fn replace_embeddings(&mut self, model: &str, items: &[(&str, &[f32])]) -> Result<()> {
        let tx = self.conn.transaction().op("caching embeddings")?;
        write_embeddings(&tx, model, items, true)?;
        tx.commit().op("caching embeddings")
    }

    /// Records cut embedding inputs outside a batch (its own transaction).
    pub fn record_cuts(&mut self, model: &str, items: &[Cut<'_>]) -> Result<()> {
        let tx = self
            .conn
            .transaction()
            .op("recording cut embedding inputs")?;
        insert_cuts(&tx, model, items)?;
        tx.commit().op("recording cut embedding inputs")
    }
}

/// Caches embeddings of `model` by text hash (already cached ones are kept).
pub(crate) fn insert_embeddings(
    conn: &Connection,
    model: &str,
    items: &[(&str, &[f32])],
) -> Result<()> {
    write_embeddings(conn, model, items, false)
}

/// Caches embeddings of `model` by text hash, replacing cached ones when `replace`: a late
/// chunking vector depends on its whole document, not only on its text, so a document
/// ingested again brings new vectors for unchanged texts.
pub(crate) fn write_embeddings(
    conn: &Connection,
    model: &str,
    items: &[(&str, &[f32])],
    replace: bool,
) -> Result<()> {
    let mut st = conn
        .prepare_cached(if replace {
            "INSERT OR REPLACE INTO embeddings(model, text_hash, vector) VALUES (?1, ?2, ?3)"
        } else {
            "INSERT OR IGNORE INTO embeddings(model, text_hash, vector) VALUES (?1, ?2, ?3)"
        })
        .op("caching embeddings")?;
    for (hash, v) in items {
        st.execute(params![model, hash, vector_to_blob(v)])
            .op("caching embeddings")?;
    }
    Ok(())
}
