//! Keeping the indexes in step with the store: the sync after a write, a rebuild from the
//! cards, a document's removal.

use crate::*;

impl Engine {
    /// Whether BM25 or the vector snapshot reflects an older generation than the store
    /// (a writer committed since; the vector snapshot is written at the end of a run, or
    /// now and then by a query node's follower, so a reader catches its vectors up in
    /// memory from the journal).
    pub(crate) fn index_is_behind(&self) -> Result<bool> {
        let store = self.store.generation()?;
        Ok(self.bm25.generation()? < store || (self.vectors.is_some() && self.vector_gen < store))
    }

    pub(crate) fn remove_stale_index_dirs(&self, current: &str) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("bm25-")
                && name != current
                && e.path().is_dir()
                && let Err(err) = std::fs::remove_dir_all(e.path())
            {
                tracing::warn!(
                    "could not remove the stale index {}: {err}",
                    e.path().display()
                );
            }
        }
    }

    /// Brings the BM25 index up to the store's generation by replaying the journal (or by a
    /// full rebuild when the journal no longer reaches back far enough).
    pub fn sync_index(&mut self) -> Result<()> {
        let store_gen = self.store.generation()?;
        let index_gen = self.bm25.generation()?;
        if index_gen == store_gen {
            return self.sync_vectors();
        }
        let trimmed_to = self.journal_trimmed_to()?;
        if index_gen > store_gen || index_gen < trimmed_to {
            tracing::warn!(
                "BM25 index at generation {index_gen}, store at {store_gen}: rebuilding the index from the cards"
            );
            return self.rebuild_bm25(&mut |_, _| {}).map(|_| ());
        }
        let changes = self.store.journal_after(index_gen)?;
        for (doc, _) in &changes {
            self.bm25.delete_document(doc)?;
            let bm25 = &mut self.bm25;
            self.store.for_each_index_row_of(doc, |row| {
                Ok(bm25.add_chunk(
                    row.card,
                    &row.document_id,
                    row.language,
                    row.context.as_deref(),
                    &row.original,
                )?)
            })?;
        }
        crash_point("index-commit");
        self.bm25.commit(store_gen)?;
        self.sync_vectors()?;
        self.trim_journal()?;
        self.languages = self.store.languages()?;
        Ok(())
    }

    /// Rebuilds every index from the cards alone: BM25, and the vectors from the embedding
    /// cache (embedding only chunks that have no cached vector, e.g. after an embedding
    /// failure). No contextualizer runs. `progress` is called with (chunks done, chunks
    /// total). Returns the number of chunks indexed.
    pub fn rebuild(&mut self, progress: &mut dyn FnMut(u64, u64)) -> Result<RebuildReport> {
        self.require_writer()?;
        self.require_sound_store()?;
        let started = std::time::Instant::now();
        let chunks = self.rebuild_bm25(progress)?;
        let mut embedded = 0;
        if self.embed_settings()?.model.is_some() {
            embedded = self.embed_uncached()?;
            self.reload_vectors()?;
            self.vector_saved = None;
            self.save_vectors()?;
        }
        self.damage.clear();
        Ok(RebuildReport {
            chunks,
            embedded,
            vectors: self.vectors.as_ref().map_or(0, |v| v.len() as u64),
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    /// Rebuilds the BM25 index from the cards alone.
    pub(crate) fn rebuild_bm25(&mut self, progress: &mut dyn FnMut(u64, u64)) -> Result<u64> {
        let current = self
            .store
            .meta("bm25_dir")?
            .unwrap_or_else(|| "bm25-1".to_string());
        let n: u64 = current.trim_start_matches("bm25-").parse().unwrap_or(1);
        let next = format!("bm25-{}", n + 1);
        let next_path = self.dir.join(&next);
        if next_path.exists() {
            std::fs::remove_dir_all(&next_path).map_err(io("cannot remove", &next_path))?;
        }
        let total = self.store.stats()?.chunks;
        let mut fresh = Bm25Index::open(&next_path, self.chinese)?;
        let mut done = 0u64;
        self.store.for_each_index_row(|row| {
            fresh.add_chunk(
                row.card,
                &row.document_id,
                row.language,
                row.context.as_deref(),
                &row.original,
            )?;
            done += 1;
            if done.is_multiple_of(1000) {
                progress(done, total);
            }
            Ok(())
        })?;
        let store_gen = self.store.generation()?;
        fresh.commit(store_gen)?;
        fresh.merge_all()?;
        crash_point("rebuild-switch");
        // The switch is one store write: before it the old index is current, after it the
        // new one. Leftovers are removed on the next open.
        self.store.set_meta("bm25_dir", &next)?;
        let old = std::mem::replace(&mut self.bm25, fresh);
        drop(old);
        self.trim_journal()?;
        self.remove_stale_index_dirs(&next);
        progress(done, total);
        self.languages = self.store.languages()?;
        Ok(done)
    }

    /// Removes a document and its chunks from the store and every index.
    pub fn remove(&mut self, document_id: &str) -> Result<()> {
        self.require_writer()?;
        let mut batch = self.store.batch()?;
        if !batch.remove_document(document_id)? {
            return Err(EngineError::NotFound(format!(
                "no document {document_id:?} in the index"
            )));
        }
        batch.commit()?;
        self.sync_index()?;
        self.save_vectors()
    }
}

/// What [`Engine::rebuild`] did: the answer of `situate rebuild --json` and of a rebuild
/// job.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct RebuildReport {
    /// Chunks indexed in BM25.
    pub chunks: u64,
    /// Texts that had to be embedded (not in the cache; normally 0).
    pub embedded: u64,
    /// Vectors in the rebuilt vector index.
    pub vectors: u64,
    /// How long it took.
    pub seconds: f64,
}
