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

/// Caches embeddings of `model` by text hash (already cached ones are kept).
pub(crate) fn insert_embeddings(
    conn: &Connection,
    model: &str,
    items: &[(&str, &[f32])],
) -> Result<()> {
    let mut st = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO embeddings(model, text_hash, vector) VALUES (?1, ?2, ?3)",
        )
        .op("caching embeddings")?;
    for (hash, v) in items {
        st.execute(params![model, hash, vector_to_blob(v)])
            .op("caching embeddings")?;
    }
    Ok(())
}
