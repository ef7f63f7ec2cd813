//! The work queue: items claimed under a lease, renewed, released or finished.

use crate::*;

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

/// The store meta listing the models a switch of embedder is filling (a JSON array of
/// model ids): every embedding queued for the fleet's model is queued for each of them too.
pub const EMBED_TARGETS: &str = "embed_targets";

/// The work role that fills `model`'s vectors for a switch of embedder: `embed:MODEL`. An
/// embed worker of that model claims it beside `embed`.
pub fn embed_role(model: &str) -> String {
    format!("embed:{model}")
}

/// Queues one embedding (`$1` chunk id, `$2` input hash) for the fleet's model (`embed`)
/// and for every model a switch is filling ([`EMBED_TARGETS`]); answers how many `embed`
/// items were new (0 or 1).
pub(crate) const ENQUEUE_EMBED: &str = "
    WITH added AS (
        INSERT INTO situate.work (role, chunk_id, input_hash)
        SELECT r, $1, $2 FROM (
            SELECT 'embed' AS r
            UNION ALL
            SELECT 'embed:' || m FROM jsonb_array_elements_text(coalesce(
                (SELECT value::jsonb FROM situate.meta WHERE key = 'embed_targets'), '[]'::jsonb)) AS m
        ) AS roles
        ON CONFLICT (role, chunk_id, input_hash) DO NOTHING
        RETURNING role)
    SELECT count(*) FILTER (WHERE role = 'embed') FROM added";

impl PgStore {
    /// Queues work for `role` (`contextualize`, `embed`, `embed:MODEL`): one item per
    /// `(chunk_id, input_hash)`; an item already queued or done is left as it is. Work for
    /// `embed` is also queued for every model a switch of embedder is filling. Returns how
    /// many items of `role` were new.
    pub fn enqueue(&mut self, role: &str, items: &[(&str, &str)]) -> Result<u64> {
        let mut tx = self
            .client
            .transaction()
            .map_err(query_failed(&self.target, "queueing work"))?;
        let mut added = 0;
        for (chunk_id, input_hash) in items {
            if role == "embed" {
                added += tx
                    .query_one(ENQUEUE_EMBED, &[chunk_id, input_hash])
                    .map_err(query_failed(&self.target, "queueing work"))?
                    .get::<_, i64>(0) as u64;
                continue;
            }
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

    /// Adds `model` to the models a switch of embedder is filling ([`EMBED_TARGETS`]), in
    /// one statement (two switches at once both land); returns the list after.
    pub fn add_embed_target(&mut self, model: &str) -> Result<Vec<String>> {
        let row = self
            .client
            .query_one(
                "INSERT INTO situate.meta (key, value) VALUES ('embed_targets', jsonb_build_array($1::text)::text)
                 ON CONFLICT (key) DO UPDATE SET value = (
                     SELECT jsonb_agg(DISTINCT m ORDER BY m)::text
                     FROM jsonb_array_elements_text(situate.meta.value::jsonb || jsonb_build_array($1::text)) AS m)
                 RETURNING value",
                &[&model],
            )
            .map_err(query_failed(&self.target, "recording the embedder to fill"))?;
        let value: String = row.get(0);
        serde_json::from_str(&value).map_err(|e| PgError::Unreadable {
            target: self.target.to_string(),
            what: format!("the meta {EMBED_TARGETS} ({e})"),
        })
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
