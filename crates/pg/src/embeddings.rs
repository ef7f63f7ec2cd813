//! The embedding cache on PostgreSQL: vectors by (model id, hash of the embedded text) in a
//! pgvector column, written by `embed` workers and read by query nodes, so that no text is
//! embedded twice across the cluster.

use crate::{PgStore, Result, query_failed};
use pgvector::Vector;
use std::collections::{HashMap, HashSet};
use std::str::FromStr;

/// What an `embed` worker reads of a card to embed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbedInput {
    /// The card's chunk id.
    pub chunk_id: String,
    /// Its context, when it is of an indexed status.
    pub context: Option<String>,
    /// Its original text.
    pub original: String,
}

impl PgStore {
    /// Keeps these vectors of `model` by text hash; a hash already kept is left as it is
    /// (`ON CONFLICT DO NOTHING`). Returns how many were new.
    pub fn put_embeddings(&mut self, model: &str, items: &[(&str, &[f32])]) -> Result<u64> {
        let q = |op| query_failed(&self.target, op);
        let mut tx = self.client.transaction().map_err(q("writing embeddings"))?;
        let insert = tx
            .prepare(
                "INSERT INTO situate.embeddings (model, text_hash, embedding) VALUES ($1, $2, $3)
                 ON CONFLICT (model, text_hash) DO NOTHING",
            )
            .map_err(q("writing embeddings"))?;
        let mut added = 0;
        for (hash, v) in items {
            added += tx
                .execute(&insert, &[&model, hash, &Vector::from(v.to_vec())])
                .map_err(q("writing embeddings"))?;
        }
        tx.commit().map_err(q("writing embeddings"))?;
        Ok(added)
    }

    /// The kept vectors of `model` for these text hashes (those not kept are absent).
    pub fn embeddings(
        &mut self,
        model: &str,
        hashes: &[&str],
    ) -> Result<HashMap<String, Vec<f32>>> {
        let rows = self
            .client
            .query(
                "SELECT text_hash, embedding FROM situate.embeddings
                 WHERE model = $1 AND text_hash = ANY($2)",
                &[&model, &hashes],
            )
            .map_err(query_failed(&self.target, "reading embeddings"))?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, Vector>(1).to_vec()))
            .collect())
    }

    /// Which of these text hashes `model` has a vector for (without reading the vectors).
    pub fn kept_hashes(&mut self, model: &str, hashes: &[&str]) -> Result<HashSet<String>> {
        let rows = self
            .client
            .query(
                "SELECT text_hash FROM situate.embeddings WHERE model = $1 AND text_hash = ANY($2)",
                &[&model, &hashes],
            )
            .map_err(query_failed(&self.target, "reading embeddings"))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Makes sure `model`'s vectors have an HNSW index (cosine): one partial index per model
    /// on `embedding::vector(dim)`, since an HNSW index needs a fixed dimension and the
    /// column holds every model's. Created the first time a model's vectors are written
    /// (cheap on an empty model); the statement is built by the server (`format` with `%I`
    /// and `%L`), never by pasting the model's name into SQL here.
    pub fn ensure_vector_index(&mut self, model: &str, dim: usize) -> Result<()> {
        let name = format!(
            "embeddings_hnsw_{}",
            &situate_core::content_hash(model.as_bytes())[..12]
        );
        let exists: bool = self
            .client
            .query_one("SELECT to_regclass('situate.' || $1) IS NOT NULL", &[&name])
            .map_err(query_failed(&self.target, "looking for the vector index"))?
            .get(0);
        if exists {
            return Ok(());
        }
        let ddl: String = self
            .client
            .query_one(
                "SELECT format('CREATE INDEX IF NOT EXISTS %I ON situate.embeddings USING hnsw \
                 ((embedding::vector(%s)) vector_cosine_ops) WHERE model = %L', $1::text, $2::int, $3::text)",
                &[&name, &(dim as i32), &model],
            )
            .map_err(query_failed(&self.target, "creating the vector index"))?
            .get(0);
        self.client
            .batch_execute(&ddl)
            .map_err(query_failed(&self.target, "creating the vector index"))
    }

    /// The `k` kept texts of `model` nearest to `query` by cosine distance, served by
    /// pgvector (its HNSW index, [`PgStore::ensure_vector_index`], with `ef_search`
    /// candidates): `(text hash, distance)`, nearest first.
    pub fn nearest(
        &mut self,
        model: &str,
        query: &[f32],
        k: i64,
        ef_search: i32,
    ) -> Result<Vec<(String, f32)>> {
        let q = |op| query_failed(&self.target, op);
        let dim = query.len();
        let mut tx = self.client.transaction().map_err(q("searching vectors"))?;
        tx.execute(
            "SELECT set_config('hnsw.ef_search', $1, true)",
            &[&ef_search.to_string()],
        )
        .map_err(q("searching vectors"))?;
        // The dimension is a type modifier, which cannot be a parameter: it is a number
        // this code computed, written into the statement as digits.
        let sql = format!(
            "SELECT text_hash, (embedding::vector({dim}) <=> $2::vector({dim}))::float4
             FROM situate.embeddings WHERE model = $1
             ORDER BY embedding::vector({dim}) <=> $2::vector({dim}) LIMIT $3"
        );
        let rows = tx
            .query(&sql, &[&model, &Vector::from(query.to_vec()), &k])
            .map_err(q("searching vectors"))?;
        tx.commit().map_err(q("searching vectors"))?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// A page of the cards whose context is final (no context work open for them), by
    /// chunk id after `after`: what every model's embedding is of. The embedding of a card
    /// still waiting for its context is queued when a worker writes the context.
    pub fn final_inputs(&mut self, after: &str, limit: i64) -> Result<Vec<EmbedInput>> {
        let rows = self
            .client
            .query(
                "SELECT chunk_id, generated_context, context_status, original_text
                 FROM situate.chunks c WHERE chunk_id > $1
                   AND NOT EXISTS (SELECT 1 FROM situate.work w WHERE w.role = 'contextualize'
                                   AND w.chunk_id = c.chunk_id AND w.state = 'queued')
                 ORDER BY chunk_id LIMIT $2",
                &[&after, &limit],
            )
            .map_err(query_failed(&self.target, "reading the texts to embed"))?;
        Ok(rows.iter().map(embed_input).collect())
    }

    /// What each of these cards embeds (cards that are gone are absent).
    pub fn embed_inputs(&mut self, chunk_ids: &[&str]) -> Result<Vec<EmbedInput>> {
        let rows = self
            .client
            .query(
                "SELECT chunk_id, generated_context, context_status, original_text
                 FROM situate.chunks WHERE chunk_id = ANY($1)",
                &[&chunk_ids],
            )
            .map_err(query_failed(&self.target, "reading the texts to embed"))?;
        Ok(rows.iter().map(embed_input).collect())
    }
}

/// An [`EmbedInput`] from a row of (chunk id, context, status, original).
fn embed_input(r: &postgres::Row) -> EmbedInput {
    let status: String = r.get(2);
    let indexed = situate_core::ContextStatus::from_str(&status).is_ok_and(|s| s.is_indexed());
    EmbedInput {
        chunk_id: r.get(0),
        context: r.get::<_, Option<String>>(1).filter(|_| indexed),
        original: r.get(3),
    }
}
