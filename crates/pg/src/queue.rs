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
