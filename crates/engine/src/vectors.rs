//! The engine's vector side: which embedder an index uses, embedding chunks through the
//! cache, and keeping the vector index in step with the store (the same journal protocol
//! as BM25, plus the card journal for deletions).
//!
//! The embedding cache (`embeddings` in `cards.db`, keyed by model id and the hash of the
//! indexed text) is written in the same transaction as the cards it belongs to, so the
//! vector index is derived data like BM25: it is replayed from the journal and the cache,
//! saved as a snapshot named after the generation it reflects, and rebuilt with no
//! embedding call for any text embedded before.

use crate::{Engine, EngineError, Result};
use situate_core::{EmbedKind, Embedder, Language, PassageInput, content_hash, indexed_text};
use situate_vector::{Backend, Vectors};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};

/// The store meta that holds the fusion an index records ([`Engine::index_fusion`]).
pub(crate) const FUSION_META: &str = "fusion";

pub use crate::late::{LateDocument, embed_late, late_document, text_hash};
pub(crate) use crate::late::{late_key, reassemble};

/// What [`Engine::embed_missing`] returns.
#[derive(Default)]
pub struct Embedded {
    /// The new (text hash, vector) pairs to cache.
    pub vectors: Vec<(String, Vec<f32>)>,
    /// How many texts failed.
    pub failed: usize,
    /// The first failure's reason.
    pub reason: Option<String>,
    /// The embedded texts whose input was longer than the embedder reads: (hash, tokens
    /// of the input, tokens cut), recorded beside the cache (`embedding_cuts`).
    pub cuts: Vec<(String, u64, u64)>,
    /// The embedder's window in tokens, when it has one.
    pub window: Option<usize>,
}

impl Embedded {
    /// The cuts as the store records them.
    pub fn cut_rows(&self) -> Vec<situate_store::Cut<'_>> {
        self.cuts
            .iter()
            .map(|(h, tokens, cut)| (h.as_str(), *tokens, *cut))
            .collect()
    }

    /// The vectors as the store caches them.
    pub fn cache_rows(&self) -> Vec<(&str, &[f32])> {
        self.vectors
            .iter()
            .map(|(h, v)| (h.as_str(), v.as_slice()))
            .collect()
    }
}

/// The embedding settings of an index, from its store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbedSettings {
    /// `none`, `auto` (chosen at the first ingest from the corpus languages) or a model.
    pub spec: String,
    /// The model id whose cached embeddings the index uses (set once chosen).
    pub model: Option<String>,
    /// The vectors' dimension (set once chosen).
    pub dim: Option<usize>,
}

/// What is embedded for a chunk (its context and original, which the embedder joins) and
/// the hash it is cached under (of its indexed text: an embedder that joins them otherwise
/// has a model id of its own, so the hash still names one input).
pub fn embedding_input(context: Option<&str>, original: &str) -> (String, PassageInput) {
    let text = indexed_text(context, original);
    (
        content_hash(text.as_bytes()),
        PassageInput::new(context, original),
    )
}

/// The process's one async runtime for hosted models ([`Engine::runtime`]), also used by
/// the shared store's workers, which have no engine.
/// A query's embedding by `embedder`.
pub(crate) fn embed_query_with(
    embedder: &dyn Embedder,
    runtime: &tokio::runtime::Runtime,
    text: &str,
) -> Result<Vec<f32>> {
    let mut v = runtime
        .block_on(embedder.embed(&[text], EmbedKind::Query))
        .map_err(|e| {
            EngineError::Invalid(format!(
                "cannot embed the query: {e} (--mode bm25 searches without the embedder)"
            ))
        })?;
    v.pop()
        .ok_or_else(|| EngineError::Invalid("the embedder returned no vector".into()))
}

/// The one Tokio runtime the engine's embedders and the shared store's connections run
/// on, made on first use.
pub fn runtime() -> Result<&'static tokio::runtime::Runtime> {
    static RUNTIME: std::sync::OnceLock<std::result::Result<tokio::runtime::Runtime, String>> =
        std::sync::OnceLock::new();
    let rt = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("situate-engine-io")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the async runtime: {e}"))
    });
    rt.as_ref().map_err(|e| EngineError::Invalid(e.clone()))
}

impl Engine {
    /// The index's embedder settings as stored: the spec, and once chosen the model and
    /// its dimension.
    pub fn embed_settings(&self) -> Result<EmbedSettings> {
        Ok(self.embed_settings_with(&[])?.0)
    }

    /// [`Engine::embed_settings`] and the settings `also` names, read at once (one
    /// snapshot of the store: a switch of embedder changes them together).
    pub(crate) fn embed_settings_with(
        &self,
        also: &[&str],
    ) -> Result<(EmbedSettings, HashMap<String, String>)> {
        let mut keys = vec!["embedder", "embed_model", "embed_dim"];
        keys.extend_from_slice(also);
        let mut m = self.store.metas(&keys)?;
        let s = EmbedSettings {
            spec: m.remove("embedder").unwrap_or_else(|| "none".to_string()),
            model: m.remove("embed_model"),
            dim: m.remove("embed_dim").and_then(|d| d.parse().ok()),
        };
        Ok((s, m))
    }

    /// The fusion this index searches with when no setting says otherwise: the one it
    /// recorded when its embedder was fixed; for an index whose embedder was fixed before
    /// indexes recorded one, the fusion it was built for
    /// ([`crate::fusion_defaults::before_records`]); with no embedder fixed yet, the one
    /// it will record ([`crate::fusion_defaults::for_corpus`]).
    pub fn index_fusion(&self) -> Result<crate::settings::SearchSettings> {
        match self.store.meta(FUSION_META)? {
            Some(json) => serde_json::from_str(&json).map_err(|e| {
                EngineError::Invalid(format!(
                    "the index's recorded fusion ({json}) cannot be read: {e}"
                ))
            }),
            None => {
                let s = self.embed_settings()?;
                Ok(match s.model {
                    Some(_) => crate::fusion_defaults::before_records(),
                    None => crate::fusion_defaults::for_corpus(&s.spec, &self.store.languages()?),
                })
            }
        }
    }

    /// The embedder and vector index settings the index was created with (the embedder as
    /// chosen, once `auto` has chosen).
    pub fn embed_creation_settings(&self) -> Result<(String, String)> {
        Ok((
            self.embed_settings()?.spec,
            self.vector_backend.as_str().to_string(),
        ))
    }

    /// The async runtime that drives hosted models (embedders, LLMs, rerankers), started on
    /// first use and shared by every engine of the process. One runtime, not one per engine:
    /// a hosted model's HTTP client keeps its connections on the runtime that opened them,
    /// and a model shared between engines (the service's readers share the embedder and
    /// the answer models) would otherwise wait on a connection whose runtime no thread
    /// drives. Its one worker drives the connections; each engine call blocks on its own
    /// future from its own thread.
    pub fn runtime(&self) -> Result<&'static tokio::runtime::Runtime> {
        runtime()
    }

    /// The index's embedder, loaded on first use.
    pub fn embedder(&self) -> Result<Arc<dyn Embedder>> {
        let loaded = self.embedder.get_or_init(|| {
            // The embedder the loaded vectors were made with: a reader opened before a
            // switch of embedder searches its old vectors with the old model, not with the
            // model the store names now.
            let spec = match (&self.vectors_spec, self.embed_settings()) {
                (Some(spec), _) => spec.clone(),
                (None, Ok(s)) => s.spec,
                (None, Err(e)) => return Err(EmbedderLoad::Failed(e.to_string())),
            };
            if spec == "none" || spec == "auto" {
                return Err(EmbedderLoad::Failed("this index has no embedder (created with --embedder none, or nothing ingested yet)".into()));
            }
            situate_embed::resolve(&spec)
                .map(Arc::from)
                .map_err(EmbedderLoad::from)
        });
        loaded.clone().map_err(EngineError::from)
    }

    /// Chooses the embedder of an `auto` index from the languages about to be ingested,
    /// records it, and creates the (empty) vector index. A no-op once chosen.
    pub fn choose_embedder(&mut self, languages: &[Language]) -> Result<()> {
        let s = self.embed_settings()?;
        if s.spec == "none" || (s.model.is_some() && s.dim.is_some()) {
            return Ok(());
        }
        if s.spec == "auto" {
            let chosen = situate_embed::default_for(languages);
            self.store.set_meta("embedder", chosen)?;
        }
        let embedder = self.embedder()?;
        // A hosted model of unknown dimension is asked once; if it cannot be reached the
        // ingest stops here, before anything is written.
        let dim = self
            .runtime()?
            .block_on(embedder.probe_dim())
            .map_err(|e| EngineError::Invalid(format!("cannot set up the embedder: {e}")))?;
        // Model and dimension together: an index with one and not the other (a kill between
        // two writes) would never build its vectors.
        // The fusion the index searches with unless told otherwise: the table's choice for
        // this embedder now, kept whatever the table says later.
        let spec = self.embed_settings()?.spec;
        let fusion = serde_json::to_string(&crate::fusion_defaults::for_corpus(&spec, languages))
            .map_err(|e| EngineError::Internal(format!("the fusion record: {e}")))?;
        self.store.set_metas(&[
            ("embed_model", embedder.model_id()),
            ("embed_dim", &dim.to_string()),
            (FUSION_META, &fusion),
        ])?;
        if self.store.generation()? > 0 {
            // Cards committed while the setting was incomplete (an index written by a
            // version that could be killed between the two writes): index their cached
            // embeddings; `rebuild` embeds the rest.
            return self.reload_vectors();
        }
        self.vectors = Some(Vectors::new(dim, self.vector_backend)?);
        self.vectors_spec = Some(spec);
        self.vectors_model = Some(embedder.model_id().to_string());
        self.vector_gen = self.store.generation()?;
        Ok(())
    }

    /// Embeds the texts (by hash) not yet cached for this index's model; returns the
    /// vectors to cache, and the number of texts whose embedding failed with the first
    /// reason (those chunks are stored and BM25-indexed without a vector).
    pub fn embed_missing(
        &self,
        runtime: &tokio::runtime::Runtime,
        texts: Vec<(String, PassageInput)>,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Embedded> {
        let Some(model) = self.embed_settings()?.model else {
            return Ok(Embedded::default());
        };
        self.embed_missing_with(&|| self.embedder(), &model, runtime, texts, progress)
    }

    /// [`Engine::embed_missing`] with another embedder than the index's (`situate
    /// reembed`): `model` is its id in the cache, `embedder` loads it when anything is
    /// left to embed.
    pub(crate) fn embed_missing_with(
        &self,
        embedder: &dyn Fn() -> Result<Arc<dyn Embedder>>,
        model: &str,
        runtime: &tokio::runtime::Runtime,
        texts: Vec<(String, PassageInput)>,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Embedded> {
        let hashes: Vec<&str> = texts.iter().map(|(h, _)| h.as_str()).collect();
        let cached = self.store.embeddings(model, &hashes)?;
        let mut todo: Vec<(String, PassageInput)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (h, t) in texts {
            if !cached.contains_key(&h) && seen.insert(h.clone()) {
                todo.push((h, t));
            }
        }
        if todo.is_empty() {
            return Ok(Embedded::default());
        }
        let embedder = embedder()?;
        if embedder.late() {
            // Ingest, new contexts and the repair read whole documents instead; what is
            // left (a query node of the shared store) has only the chunks.
            return Err(EngineError::Invalid(format!(
                "{} embeds by late chunking (whole documents), which this path cannot: use the embedder without `{}`",
                embedder.model_id(),
                situate_embed::LATE
            )));
        }
        // What each input loses to the embedder's window (counted, never silent).
        let mut cuts = Vec::new();
        let mut window = None;
        for (h, t) in &todo {
            if let Some((tokens, max)) = embedder.passage_tokens(t) {
                window = Some(max);
                if tokens > max {
                    cuts.push((h.clone(), tokens as u64, (tokens - max) as u64));
                }
            }
        }
        // Similar lengths together: each batch is padded to its longest text.
        todo.sort_by_key(|(_, t)| t.original.len() + t.context.as_ref().map_or(0, |c| c.len() + 2));
        let total = todo.len();
        let mut out = Vec::with_capacity(total);
        let (mut failed, mut reason) = (0usize, None);
        for part in todo.chunks(embedder.call_size().max(1)) {
            let inputs: Vec<PassageInput> = part.iter().map(|(_, t)| t.clone()).collect();
            match runtime.block_on(embedder.embed_passages(&inputs)) {
                Ok(vs) if vs.len() == part.len() => {
                    out.extend(part.iter().map(|(h, _)| h.clone()).zip(vs));
                }
                Ok(vs) => {
                    failed += part.len();
                    reason.get_or_insert(format!(
                        "embedder returned {} vectors for {} texts",
                        vs.len(),
                        part.len()
                    ));
                }
                Err(e) => {
                    failed += part.len();
                    reason.get_or_insert(e.to_string());
                }
            }
            progress(out.len() + failed, total);
        }
        let done: HashSet<&str> = out.iter().map(|(h, _)| h.as_str()).collect();
        cuts.retain(|(h, _, _)| done.contains(h.as_str()));
        Ok(Embedded {
            vectors: out,
            failed,
            reason,
            cuts,
            window,
        })
    }

    /// Whether the index embeds passages by late chunking (its embedder's name ends
    /// `:late`).
    pub fn late_chunking(&self) -> Result<bool> {
        Ok(self.embed_settings()?.spec.ends_with(situate_embed::LATE))
    }

    /// Late chunking: each document read once by the embedder, each chunk's vector pooled
    /// from its span, keyed by the chunk's cache hash. A document whose embedding fails
    /// counts all its chunks as failed.
    pub fn embed_late_documents(
        &self,
        runtime: &tokio::runtime::Runtime,
        docs: Vec<LateDocument>,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Embedded> {
        if docs.is_empty() || self.embed_settings()?.model.is_none() {
            return Ok(Embedded::default());
        }
        Ok(embed_late(
            runtime,
            self.embedder()?.as_ref(),
            docs,
            progress,
        ))
    }

    /// Embeds and caches every card's text that has no cached embedding (the repair after
    /// embedding failures; a no-op normally).
    pub(crate) fn embed_uncached(&mut self) -> Result<u64> {
        let late = self.late_chunking()?;
        if late {
            return self.embed_uncached_late();
        }
        let Some(model) = self.embed_settings()?.model else {
            return Ok(0);
        };
        let mut missing = std::collections::HashSet::new();
        for (_, h, cached) in self.card_hashes(&model)? {
            if !cached {
                missing.insert(h);
            }
        }
        if missing.is_empty() {
            return Ok(0);
        }
        let mut texts = Vec::new();
        self.store.for_each_index_row(|row| {
            let h = text_hash(&row, late);
            if missing.remove(&h) {
                texts.push((h, PassageInput::new(row.context.as_deref(), &row.original)));
            }
            Ok(())
        })?;
        let e = self.embed_missing(self.runtime()?, texts, &mut |_, _| {})?;
        self.store.cache_embeddings(&model, &e.cache_rows())?;
        self.store.record_cuts(&model, &e.cut_rows())?;
        if e.failed > 0 {
            return Err(EngineError::Invalid(format!(
                "{} chunks could not be embedded: {}",
                e.failed,
                e.reason.unwrap_or_default()
            )));
        }
        Ok(e.vectors.len() as u64)
    }

    /// [`Engine::embed_uncached`] for late chunking: the documents of the cards without a
    /// vector, each put back together from its cards ([`reassemble`]) and embedded whole.
    fn embed_uncached_late(&mut self) -> Result<u64> {
        let late = self.late_chunking()?;
        let Some(model) = self.embed_settings()?.model else {
            return Ok(0);
        };
        let mut docs = std::collections::BTreeSet::new();
        let mut missing = HashSet::new();
        for (_, h, cached) in self.card_hashes(&model)? {
            if !cached {
                missing.insert(h);
            }
        }
        if missing.is_empty() {
            return Ok(0);
        }
        self.store.for_each_index_row(|row| {
            if missing.contains(&text_hash(&row, late)) {
                docs.insert(row.document_id.clone());
            }
            Ok(())
        })?;
        let mut late = Vec::new();
        for id in docs {
            let cards = self.store.cards_of(&id)?;
            let (text, _) = reassemble(&cards);
            late.push(late_document(&id, &text, &cards));
        }
        let e = self.embed_late_documents(self.runtime()?, late, &mut |_, _| {})?;
        self.store.replace_embeddings(&model, &e.cache_rows())?;
        if e.failed > 0 {
            return Err(EngineError::Invalid(format!(
                "{} chunks could not be embedded: {}",
                e.failed,
                e.reason.unwrap_or_default()
            )));
        }
        Ok(e.vectors.len() as u64)
    }

    /// Brings the vector index up to the store's generation: removes replaced and deleted
    /// cards (card journal), adds the changed documents' cards from the embedding cache.
    /// Falls back to a full reload from the cache when the journal no longer reaches back.
    pub(crate) fn sync_vectors(&mut self) -> Result<()> {
        let late = self.late_chunking()?;
        let Some(model) = self.embed_settings()?.model else {
            return Ok(());
        };
        let store_gen = self.store.generation()?;
        if self.vectors.is_none() || self.vector_gen == store_gen {
            return Ok(());
        }
        // The index switched embedder since these vectors were loaded (`reembed`): the
        // journal says nothing of it; the new model's vectors come from the cache.
        if self.vectors_model.as_deref() != Some(model.as_str()) {
            return self.reload_vectors();
        }
        if self.vector_gen > store_gen || self.vector_gen < self.journal_trimmed_to()? {
            return self.reload_vectors();
        }
        let removed = self.store.removed_cards_after(self.vector_gen)?;
        let changes = self.store.journal_after(self.vector_gen)?;
        let mut adds: Vec<(u64, String)> = Vec::new();
        for (doc, _) in &changes {
            self.store.for_each_index_row_of(doc, |row| {
                adds.push((row.card, text_hash(&row, late)));
                Ok(())
            })?;
        }
        let hashes: Vec<&str> = adds.iter().map(|(_, h)| h.as_str()).collect();
        let cache = self.store.embeddings(&model, &hashes)?;
        let Some(vectors) = self.vectors.as_mut() else {
            return Ok(());
        };
        for key in removed {
            vectors.remove(key)?;
        }
        let items: Vec<(u64, &[f32])> = adds
            .iter()
            .filter_map(|(key, h)| cache.get(h).map(|v| (*key, v.as_slice())))
            .collect();
        vectors.add_batch(&items)?;
        vectors.rebalance()?;
        self.vector_gen = store_gen;
        Ok(())
    }

    /// Rebuilds the in-memory vector index from the cache alone (cards without a cached
    /// embedding are left out; `rebuild` embeds them first).
    pub(crate) fn reload_vectors(&mut self) -> Result<()> {
        let s = self.embed_settings()?;
        let late = s.spec.ends_with(situate_embed::LATE);
        let (Some(model), Some(dim)) = (s.model, s.dim) else {
            return Ok(());
        };
        if self.vectors_spec.as_deref() != Some(s.spec.as_str()) {
            // Another embedder than the one loaded (a switch): load it afresh when asked.
            self.embedder = OnceLock::new();
        }
        self.vectors_spec = Some(s.spec);
        self.vectors_model = Some(model.clone());
        let mut rows = Vec::new();
        self.store.for_each_index_row(|row| {
            rows.push((row.card, text_hash(&row, late)));
            Ok(())
        })?;
        let (fresh, _) = self.vectors_from_cache(&model, dim, &rows)?;
        self.vectors = Some(fresh);
        self.vector_gen = self.store.generation()?;
        Ok(())
    }

    /// A vector index of `model`'s cached embeddings of `rows` (card key, cache hash), in
    /// the index's backend, and how many rows the cache had no embedding for (left out).
    pub(crate) fn vectors_from_cache(
        &self,
        model: &str,
        dim: usize,
        rows: &[(u64, String)],
    ) -> Result<(Vectors, usize)> {
        let mut fresh = Vectors::new(dim, Backend::Exact)?;
        let mut missing = 0;
        for part in rows.chunks(4096) {
            let hashes: Vec<&str> = part.iter().map(|(_, h)| h.as_str()).collect();
            let cache = self.store.embeddings(model, &hashes)?;
            for (key, h) in part {
                match cache.get(h) {
                    Some(v) => fresh.add(*key, v)?,
                    None => missing += 1,
                }
            }
        }
        // Built exact (fast to fill), then switched to the configured backend.
        fresh.set_backend(self.vector_backend)?;
        Ok((fresh, missing))
    }

    /// Saves the vector index if it is ahead of its last snapshot, switches to the new
    /// snapshot with one store write, removes older ones, and trims the journal as far
    /// as every index allows.
    pub fn save_vectors(&mut self) -> Result<()> {
        if let Some(v) = &self.vectors
            && self.vector_saved != Some(self.vector_gen)
        {
            let stem = v.save(&self.dir, self.vector_gen)?;
            crate::crash_point("vector-switch");
            self.store.set_meta("vector_file", &stem)?;
            self.vector_saved = Some(self.vector_gen);
            situate_vector::Vectors::remove_stale(&self.dir, Some(&stem));
        }
        self.trim_journal()
    }

    /// The query's embedding with this index's model.
    pub fn embed_query(&self, text: &str) -> Result<Vec<f32>> {
        embed_query_with(self.embedder()?.as_ref(), self.runtime()?, text)
    }

    /// The vector leg's recall against exact search, for measuring an approximate (HNSW)
    /// index: each query embedded once by this index's model, searched as a hybrid search's
    /// vector leg asks (its best `fetch`), and the mean share of the exact top `k` among
    /// the leg's top `k`. An exact index gives 1.0. Copies every vector first (the index's
    /// size in memory), so this is for benchmarks, not for serving.
    pub fn vector_recall(&self, queries: &[&str], k: usize, fetch: usize) -> Result<f64> {
        let Some(vectors) = &self.vectors else {
            return Err(EngineError::Invalid(
                "this index has no vectors (created with --embedder none)".into(),
            ));
        };
        let exact = vectors.exact_copy()?;
        let mut sum = 0.0;
        for q in queries {
            let v = self.embed_query(q)?;
            let want: HashSet<u64> = exact
                .search(&v, k, None)
                .into_iter()
                .map(|h| h.card)
                .collect();
            let got = vectors.search_vec(&v, fetch.max(k), None)?;
            let found = got
                .iter()
                .take(k)
                .filter(|h| want.contains(&h.card))
                .count();
            sum += found as f64 / want.len().max(1) as f64;
        }
        Ok(sum / queries.len().max(1) as f64)
    }

    /// Cards of the store and whether each has a cached embedding (for `check`).
    pub(crate) fn cards_with_embeddings(&self) -> Result<HashMap<u64, bool>> {
        let Some(model) = self.embed_settings()?.model else {
            return Ok(HashMap::new());
        };
        Ok(self
            .card_hashes(&model)?
            .into_iter()
            .map(|(card, _, cached)| (card, cached))
            .collect())
    }

    /// Every card's key, embedding text hash, and whether `model` has it cached.
    fn card_hashes(&self, model: &str) -> Result<Vec<(u64, String, bool)>> {
        let late = self.late_chunking()?;
        let mut rows = Vec::new();
        self.store.for_each_index_row(|row| {
            rows.push((row.card, text_hash(&row, late)));
            Ok(())
        })?;
        let mut out = Vec::with_capacity(rows.len());
        for part in rows.chunks(4096) {
            let hashes: Vec<&str> = part.iter().map(|(_, h)| h.as_str()).collect();
            let cached = self.store.cached(model, &hashes)?;
            out.extend(
                part.iter()
                    .map(|(k, h)| (*k, h.clone(), cached.contains(h))),
            );
        }
        Ok(out)
    }
}

/// Why the index's embedder could not be loaded, kept with the engine so that every call
/// after the first failed load answers the same error (an [`EngineError`] is not `Clone`).
#[derive(Debug, Clone)]
pub enum EmbedderLoad {
    /// A model of the catalog is not installed ([`EngineError::ModelMissing`]).
    Missing {
        /// The model.
        model: String,
        /// The command that installs it.
        install: String,
        /// Why it could not be installed now.
        message: String,
    },
    /// Anything else, in words.
    Failed(String),
}

impl From<situate_embed::ResolveError> for EmbedderLoad {
    fn from(e: situate_embed::ResolveError) -> Self {
        match e {
            situate_embed::ResolveError::Missing {
                model,
                install,
                message,
            } => EmbedderLoad::Missing {
                model,
                install,
                message,
            },
            other => EmbedderLoad::Failed(other.to_string()),
        }
    }
}

impl From<EmbedderLoad> for EngineError {
    fn from(e: EmbedderLoad) -> Self {
        match e {
            EmbedderLoad::Missing {
                model,
                install,
                message,
            } => EngineError::ModelMissing {
                model,
                install,
                message,
            },
            EmbedderLoad::Failed(message) => EngineError::Invalid(message),
        }
    }
}
