//! The store's settings table and the counts `situate status --store` shows.

use crate::*;

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
