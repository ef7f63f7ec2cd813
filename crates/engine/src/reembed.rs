//! A live switch of embedder ([`Engine::reembed`], `situate reembed`): every card's
//! embedding input embedded by the new model beside the live vectors, then one switch.
//!
//! - **Nothing is paid twice.** Contexts are read from the cards (no LLM call); an input the
//!   embedding cache already holds for the new model (an earlier run, an earlier switch to
//!   the same model) is not embedded again.
//! - **Searches go on.** Until the switch the index's settings, vector snapshot and
//!   embedder are the old ones: readers (a one-shot search, the service, the Python
//!   package) answer from them. The run holds the write lock, so ingests wait for it.
//! - **One switch.** The new vectors are saved as the next generation's snapshot beside the
//!   live one, then one store transaction sets the embedder, its model and dimension, the
//!   snapshot, the fusion recorded for the new embedder, and advances the generation:
//!   every reader reopens onto the new vectors at its next search.
//! - **A crash resumes.** Embeddings are committed to the cache a batch at a time; a run
//!   killed midway left only cache entries and perhaps an unused snapshot file, and running
//!   the same command again embeds what is left and switches.

use crate::vectors::text_hash;
use crate::*;
use serde::{Deserialize, Serialize};
use situate_core::PassageInput;
use std::collections::HashSet;

/// `situate reembed`, the admin job `reembed` and `Index.reembed`: the embedder to move to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReembedRequest {
    /// The new embedder, as `--embedder` names one (`embeddinggemma-300m`, `:q8`, a model
    /// directory, a hosted model).
    pub embedder: String,
    /// Inputs embedded and committed to the cache at a time (default 256): what a crash
    /// can lose.
    #[serde(default)]
    pub batch: Option<usize>,
}

/// A checked [`ReembedRequest`].
#[derive(Debug, Clone)]
pub struct CheckedReembed {
    /// The embedder spec.
    pub embedder: String,
    /// Inputs per committed batch.
    pub batch: usize,
}

impl ReembedRequest {
    /// Checks the request: a known embedder, and one the switch can embed chunk by chunk.
    pub fn check(&self) -> Result<CheckedReembed> {
        let embedder = self.embedder.trim().to_string();
        if embedder.is_empty() || embedder == "none" || embedder == "auto" {
            return Err(EngineError::field_error(
                "embedder",
                format!(
                    "{embedder:?}: name the embedder to move to (all-minilm-l6-v2, embeddinggemma-300m, a model directory, ...)"
                ),
            ));
        }
        if embedder.ends_with(situate_embed::LATE) {
            return Err(EngineError::field_error(
                "embedder",
                format!(
                    "{embedder}: a late-chunking embedder reads whole documents, which a switch does not yet; create an index with it (`situate ingest --embedder {embedder}`)"
                ),
            ));
        }
        situate_embed::check(&embedder)
            .map_err(|e| EngineError::field_error("embedder", e.to_string()))?;
        let batch = self.batch.unwrap_or(256);
        if !(1..=100_000).contains(&batch) {
            return Err(EngineError::field_error(
                "batch",
                format!("must be from 1 to 100000, not {batch}"),
            ));
        }
        Ok(CheckedReembed { embedder, batch })
    }
}

/// How far a switch has come.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ReembedProgress {
    /// Inputs with a vector of the new model (cached before, or embedded now).
    pub done: u64,
    /// Inputs in all.
    pub total: u64,
    /// Seconds since the run started.
    pub seconds: f64,
    /// Seconds left at this run's rate, once it has one.
    pub eta_seconds: Option<f64>,
}

/// What a switch did.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ReembedAnswer {
    /// The embedder before.
    pub previous: String,
    /// The embedder now.
    pub embedder: String,
    /// The new model's id in the embedding cache.
    pub model: String,
    /// Its dimension.
    pub dim: usize,
    /// Chunks with a vector of the new model.
    pub vectors: u64,
    /// Inputs whose vector was in the cache already (not embedded again).
    pub reused: u64,
    /// Inputs embedded by this run.
    pub embedded: u64,
    /// Inputs longer than the new model reads (their ends are not in their vectors).
    pub cut: u64,
    /// Whether the index switched (false: it used this embedder already).
    pub switched: bool,
    /// The fusion the index now records for its embedder (by `situate.toml` names).
    pub fusion: crate::settings::SearchSettings,
    /// Seconds the run took.
    pub seconds: f64,
}

impl Engine {
    /// Moves the index to another embedder while it serves (module docs). `progress` is
    /// called after each committed batch.
    pub fn reembed(
        &mut self,
        req: &CheckedReembed,
        progress: &mut dyn FnMut(ReembedProgress),
    ) -> Result<ReembedAnswer> {
        self.reembed_with(req, None, progress)
    }

    /// [`Engine::reembed`] with the new embedder already loaded (`loaded`, for
    /// `req.embedder`): a query node loads it first to learn its model id and fill the
    /// cache from the shared store.
    pub fn reembed_with(
        &mut self,
        req: &CheckedReembed,
        loaded: Option<Arc<dyn Embedder>>,
        progress: &mut dyn FnMut(ReembedProgress),
    ) -> Result<ReembedAnswer> {
        self.require_writer()?;
        self.require_sound_store()?;
        let started = std::time::Instant::now();
        let previous = self.embed_settings()?;
        if previous.spec == req.embedder && previous.model.is_some() {
            return Ok(ReembedAnswer {
                model: previous.model.clone().unwrap_or_default(),
                dim: previous.dim.unwrap_or(0),
                vectors: self.vectors.as_ref().map_or(0, |v| v.len() as u64),
                previous: previous.spec.clone(),
                embedder: previous.spec,
                reused: 0,
                embedded: 0,
                cut: 0,
                switched: false,
                fusion: self.index_fusion()?,
                seconds: started.elapsed().as_secs_f64(),
            });
        }
        let runtime = self.runtime()?;
        let embedder: Arc<dyn Embedder> = match loaded {
            Some(e) => e,
            None => situate_embed::resolve(&req.embedder)
                .map(Arc::from)
                .map_err(|e| EngineError::from(vectors::EmbedderLoad::from(e)))?,
        };
        let dim = runtime
            .block_on(embedder.probe_dim())
            .map_err(|e| EngineError::Invalid(format!("cannot set up {}: {e}", req.embedder)))?;
        let model = embedder.model_id().to_string();
        // Every card's cache hash, and each distinct input once (chunk by chunk: `check`
        // refused `:late`).
        let mut rows: Vec<(u64, String)> = Vec::new();
        let mut unique: Vec<(String, PassageInput)> = Vec::new();
        let mut seen = HashSet::new();
        self.store.for_each_index_row(|row| {
            let h = text_hash(&row, false);
            if seen.insert(h.clone()) {
                unique.push((
                    h.clone(),
                    PassageInput::new(row.context.as_deref(), &row.original),
                ));
            }
            rows.push((row.card, h));
            Ok(())
        })?;
        let total = rows.len() as u64;
        let hashes: Vec<&str> = unique.iter().map(|(h, _)| h.as_str()).collect();
        let mut cached: HashSet<String> = HashSet::new();
        for part in hashes.chunks(4096) {
            cached.extend(self.store.cached(&model, part)?);
        }
        let reused = rows.iter().filter(|(_, h)| cached.contains(h)).count() as u64;
        let todo: Vec<(String, PassageInput)> = unique
            .into_iter()
            .filter(|(h, _)| !cached.contains(h))
            .collect();
        let load = || Ok(Arc::clone(&embedder));
        let (mut embedded, mut cut, mut done_inputs) = (0u64, 0u64, cached.len() as u64);
        let inputs_total = done_inputs + todo.len() as u64;
        let report = |done: u64, embedded_now: u64| {
            let seconds = started.elapsed().as_secs_f64();
            ReembedProgress {
                done,
                total: inputs_total,
                seconds,
                eta_seconds: (embedded_now > 0).then(|| {
                    seconds / embedded_now as f64 * inputs_total.saturating_sub(done) as f64
                }),
            }
        };
        progress(report(done_inputs, 0));
        for part in todo.chunks(req.batch) {
            if self.cancel_requested() {
                return Err(EngineError::Conflict(format!(
                    "the switch to {} was cancelled after {embedded} new embeddings (kept: running it again goes on from there)",
                    req.embedder
                )));
            }
            let e =
                self.embed_missing_with(&load, &model, runtime, part.to_vec(), &mut |_, _| {})?;
            self.store.cache_embeddings(&model, &e.cache_rows())?;
            self.store.record_cuts(&model, &e.cut_rows())?;
            crash_point("reembed-batch");
            if e.failed > 0 {
                return Err(EngineError::Invalid(format!(
                    "{} inputs could not be embedded by {} ({}); the index still searches with {}, and the {embedded} embedded so far are kept for the next run",
                    e.failed,
                    req.embedder,
                    e.reason.unwrap_or_default(),
                    previous.spec
                )));
            }
            embedded += e.vectors.len() as u64;
            cut += e.cuts.len() as u64;
            done_inputs += part.len() as u64;
            progress(report(done_inputs, embedded));
        }
        // The new vectors, from the cache alone.
        let (fresh, missing) = self.vectors_from_cache(&model, dim, &rows)?;
        if missing > 0 {
            return Err(EngineError::Internal(format!(
                "{missing} embeddings of {model} are not in the cache after they were embedded"
            )));
        }
        // Saved as the next generation's snapshot, beside the live one.
        let next = self.store.generation()? + 1;
        let stem = fresh.save(&self.dir, next)?;
        crash_point("reembed-switch");
        let fusion = crate::fusion_defaults::for_corpus(&req.embedder, &self.store.languages()?);
        let fusion_json = serde_json::to_string(&fusion)
            .map_err(|e| EngineError::Internal(format!("the fusion record: {e}")))?;
        let generation = self.store.set_metas_advancing(&[
            ("embedder", &req.embedder),
            ("embed_model", &model),
            ("embed_dim", &dim.to_string()),
            ("vector_file", &stem),
            (vectors::FUSION_META, &fusion_json),
        ])?;
        // This engine follows: the new vectors and embedder, BM25 committed at the new
        // generation (nothing in it changed), the old snapshot removed.
        self.vectors = Some(fresh);
        self.vectors_spec = Some(req.embedder.clone());
        self.vectors_model = Some(model.clone());
        self.vector_gen = generation;
        self.vector_saved = Some(generation);
        self.embedder = OnceLock::new();
        let _ = self.embedder.set(Ok(embedder));
        self.sync_index()?;
        situate_vector::Vectors::remove_stale(&self.dir, Some(&stem));
        Ok(ReembedAnswer {
            previous: previous.spec,
            embedder: req.embedder.clone(),
            model,
            dim,
            vectors: total,
            reused,
            embedded,
            cut,
            switched: true,
            fusion,
            seconds: started.elapsed().as_secs_f64(),
        })
    }
}
