//! The embedded engine: one index directory holding the card store and the BM25 index,
//! kept in step. It is the API every front end (the `situate` command, the HTTP service,
//! MCP, the workers) calls: a request type per operation ([`api`]), one error type with
//! kinds ([`EngineError`], [`ErrorKind`]).
//!
//! # Example: ingest a folder, then search it
//!
//! ```
//! use situate_engine::{Access, Engine, IngestRequest, SearchRequest, Settings, ingest_into};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let tmp = tempfile::tempdir()?;
//! let docs = tmp.path().join("docs");
//! std::fs::create_dir(&docs)?;
//! std::fs::write(
//!     docs.join("lamp.md"),
//!     "# Lamp\n\n## Replacing the bulb\n\nUnscrew the cover, then turn the old bulb anticlockwise.\n",
//! )?;
//! std::fs::write(docs.join("tea.md"), "# Tea\n\nSteep green tea at 80 degrees for two minutes.\n")?;
//!
//! // Ingest with structural contexts; `hash:64` is a model-free stand-in embedder (a real
//! // index leaves `embedder` unset: `auto` installs and picks a local model).
//! let index = tmp.path().join("index");
//! let settings = Settings::default();
//! let outcome = ingest_into(
//!     &index,
//!     &settings,
//!     IngestRequest {
//!         paths: vec![docs],
//!         embedder: Some("hash:64".into()),
//!         ..IngestRequest::default()
//!     },
//!     &mut |_event| {},
//! )?;
//! assert_eq!(outcome.report.added, 2);
//!
//! // The same search request the CLI, the HTTP service and MCP build, checked once.
//! let search = SearchRequest::new("how do I replace the bulb").check(&settings)?;
//! let engine = Engine::open(&index, Access::Read)?;
//! let answer = engine.query(&search.query, &search.plan, &search.filter)?;
//! let best = &answer.hits[0];
//! assert_eq!(best.document_id, "docs/lamp.md");
//! // The original chunk and its context are kept apart.
//! assert!(best.original_text.contains("anticlockwise"));
//! assert_eq!(best.context.as_deref(), Some("From docs/lamp.md, section Lamp."));
//! # Ok(())
//! # }
//! ```
//!
//! ```text
//! INDEX_DIR/
//!   cards.db        the chunk-card store (SQLite): the source of truth
//!   bm25-N/         the tantivy index; N changes on every rebuild
//!   write.lock      held by the one process that writes
//! ```
//!
//! # Write protocol (crash safety)
//!
//! Documents are written in batches. For each batch:
//!
//! 1. the store commits the documents and chunk cards in one SQLite transaction, which also
//!    advances the store *generation* and journals the changed document ids;
//! 2. the BM25 index deletes those documents' chunks, re-adds them from the store, and
//!    commits with the store generation as its payload;
//! 3. the journal is trimmed up to that generation.
//!
//! A crash before (1) commits loses only the uncommitted batch, which a re-run redoes (it
//! is not in the store, so it is not "unchanged"). A crash between (1) and (2) leaves the
//! index behind the store: every open for writing replays the journal past the index's
//! generation (step 2 again, idempotent: delete then add). A crash during (3) leaves journal
//! entries the index already has; replaying them is harmless. So after any crash, re-running
//! the same ingest finishes the job with nothing lost and nothing duplicated, and the index
//! agrees with the store. [`Engine::check`] verifies that agreement card by card.
//!
//! A rebuild writes a complete new index into a fresh `bm25-N` directory and switches to it
//! with one store transaction; leftovers of an interrupted rebuild are removed on open.
#![warn(missing_docs)]

pub mod api;
mod ask;
mod context_file;
mod contexts;
pub mod contextualizers;
mod error;
mod ingest;
mod ingest_request;
mod malloc;
pub mod node;
mod query;
mod review;
pub mod settings;
mod vectors;
mod view;

pub use api::{AskRequest, CheckedAsk, CheckedSearch, SearchRequest};
pub use ask::{Abstention, AnswerCost, AnswerModels, AnswerResponse};
pub use context_file::{ContextRecord, ExportAnswer, ImportReport};
pub use contexts::{ContextProgress, ContextUpdate};
pub use contextualizers::{BuiltContextualizer, LlmRun, build_contextualizer, uses_llm};
pub use error::{EngineError, ErrorKind, Wire};
pub use ingest::{EmbedCut, IngestEvent, IngestOptions, IngestReport};
pub use ingest_request::{
    DryRunAnswer, IngestOutcome, IngestRequest, PreparedIngest, ingest_into, prepare_ingest,
};
pub use malloc::tune_malloc;
pub use query::{Rerank, SearchResponse};
pub use review::{Decision, ReverifyReport};
pub use settings::{
    AnswerMode, AnswerPlan, AnswerSettings, FilterSettings, SearchPlan, SearchSettings, Settings,
    Unsupported,
};
pub use situate_answer::{Citation, Passage};
pub use situate_index::ChineseTokenizer;
pub use situate_llm::cost::Price;
pub use situate_search::Mode;
pub use situate_store::{Stats, StoredDocument};
pub use situate_vector::Backend as VectorBackend;
pub use view::{CardView, ContextItem, Neighbour};

use situate_core::{
    CardRecord, DocumentFilter, Embedder, Hit, IndexError, Language, LexicalIndex, MatchOn,
};
use situate_index::Bm25Index;
use situate_search::{CardSource, Legs};
use situate_store::Store;
use situate_vector::{Backend, Vectors};
use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

pub use error::Result;
pub(crate) use error::io;

/// Settings fixed when an index is created (stored in it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateSettings {
    /// How Chinese text is tokenized for BM25.
    pub chinese: ChineseTokenizer,
    /// The embedder: `auto` (MiniLM for English corpora, multilingual-e5 otherwise, chosen
    /// at the first ingest), `none` (BM25 only), a model name or a model directory (a local
    /// BERT model with `:q8` for int8 passages), checked by [`situate_embed::check`] before
    /// the index is created.
    pub embedder: String,
    /// The vector index backend (`auto`: exact when small, HNSW when large).
    pub vector_index: Backend,
}

impl Default for CreateSettings {
    fn default() -> Self {
        CreateSettings {
            chinese: ChineseTokenizer::default(),
            embedder: "auto".to_string(),
            vector_index: Backend::Auto,
        }
    }
}

/// Whether a command may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Searches and inspection; catches the index up with the store if no writer is busy.
    Read,
    /// Ingest, removal, rebuild: takes the write lock for the engine's lifetime.
    Write,
}

/// One situate index directory.
pub struct Engine {
    dir: PathBuf,
    store: Store,
    bm25: Bm25Index,
    chinese: ChineseTokenizer,
    languages: Vec<Language>,
    embedder: OnceLock<std::result::Result<Arc<dyn Embedder>, vectors::EmbedderLoad>>,
    vectors: Option<Vectors>,
    /// The store generation the in-memory vectors reflect.
    vector_gen: u64,
    /// The generation of the vector snapshot on disk.
    vector_saved: Option<u64>,
    vector_backend: Backend,
    rerankers: query::Rerankers,
    answer_models: ask::AnswerModels,
    /// The store generation and BM25 directory when this engine was opened: everything it
    /// loaded reflects at least that state ([`Engine::is_stale`]).
    opened: (u64, String),
    /// Set by a front end to stop a long run early ([`Engine::cancel_on`]).
    cancel: Option<Arc<std::sync::atomic::AtomicBool>>,
    _lock: Option<File>,
}

const STORE_FILE: &str = "cards.db";

impl Engine {
    /// Whether `dir` holds an index.
    pub fn exists(dir: &Path) -> bool {
        dir.join(STORE_FILE).is_file()
    }

    /// Creates an index in `dir` (which may exist and be empty of an index).
    pub fn create(dir: &Path, settings: CreateSettings) -> Result<Engine> {
        if Engine::exists(dir) {
            return Err(EngineError::Invalid(format!(
                "an index already exists at {}",
                dir.display()
            )));
        }
        // An embedder no ingest could load is refused before the index exists: it could not
        // be changed afterwards.
        situate_embed::check(&settings.embedder)
            .map_err(|e| EngineError::Invalid(e.to_string()))?;
        std::fs::create_dir_all(dir).map_err(io("cannot create", dir))?;
        // The store is made under a temporary name with its creation settings, then renamed:
        // a kill before the rename leaves no index (a re-run creates it afresh), never one
        // whose settings are missing.
        let creating = dir.join(format!("{STORE_FILE}.creating"));
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let leftover = PathBuf::from(format!("{}{suffix}", creating.display()));
            match std::fs::remove_file(&leftover) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(io("cannot remove", &leftover)(e));
                }
                _ => {}
            }
        }
        let store = Store::open(&creating)?;
        store.set_metas(&[
            ("chinese_tokenizer", settings.chinese.as_str()),
            ("embedder", &settings.embedder),
            ("vector_index", settings.vector_index.as_str()),
        ])?;
        // Closing the only connection checkpoints the write-ahead log into the file.
        drop(store);
        crash_point("index-create");
        let target = dir.join(STORE_FILE);
        std::fs::rename(&creating, &target).map_err(io("cannot create", &target))?;
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
        Engine::open(dir, Access::Write)
    }

    /// Opens the index in `dir`.
    pub fn open(dir: &Path, access: Access) -> Result<Engine> {
        if !Engine::exists(dir) {
            return Err(EngineError::NoIndex(dir.to_path_buf()));
        }
        let lock = match access {
            Access::Write => Some(take_lock(dir)?),
            Access::Read => None,
        };
        let store = Store::open(&dir.join(STORE_FILE))?;
        let opened_generation = store.generation()?;
        let chinese = match store.meta("chinese_tokenizer")? {
            Some(c) => c.parse().map_err(EngineError::Invalid)?,
            None => ChineseTokenizer::default(),
        };
        let bm25_name = store
            .meta("bm25_dir")?
            .unwrap_or_else(|| "bm25-1".to_string());
        let bm25 = Bm25Index::open(&dir.join(&bm25_name), chinese)?;
        let languages = store.languages()?;
        let vector_backend = match store.meta("vector_index")? {
            Some(b) => b.parse().map_err(EngineError::Invalid)?,
            None => Backend::Auto,
        };
        let mut engine = Engine {
            dir: dir.to_path_buf(),
            store,
            bm25,
            chinese,
            languages,
            embedder: OnceLock::new(),
            vectors: None,
            vector_gen: 0,
            vector_saved: None,
            vector_backend,
            rerankers: Default::default(),
            answer_models: Default::default(),
            opened: (opened_generation, bm25_name.clone()),
            cancel: None,
            _lock: lock,
        };
        engine.load_vectors()?;
        if engine._lock.is_some() {
            engine.remove_stale_index_dirs(&bm25_name);
            engine.sync_index()?;
            engine.save_vectors()?;
        } else if engine.index_is_behind()? {
            // A crashed writer left the index behind; catch up if nobody is writing now.
            if let Ok(lock) = take_lock(dir) {
                engine._lock = Some(lock);
                engine.sync_index()?;
                engine.save_vectors()?;
                engine.bm25.close_writer();
                engine._lock = None;
            } else {
                // A writer is busy: catch the vectors up in memory only. BM25 stays as
                // loaded: the engine counts as of BM25's generation, so `is_stale` sends
                // its reader to reopen once the writer has committed BM25 too (a reader
                // opened between a writer's store commit and its BM25 commit would
                // otherwise keep the older BM25 view).
                engine.sync_vectors()?;
                engine.opened.0 = engine.opened.0.min(engine.bm25.generation()?);
            }
        }
        Ok(engine)
    }

    /// Loads the vector snapshot (if the index has vectors): memory-mapped when it is
    /// current and this engine only reads, so a search touches only the pages it needs.
    fn load_vectors(&mut self) -> Result<()> {
        let s = self.embed_settings()?;
        let (Some(_), Some(_)) = (s.model, s.dim) else {
            return Ok(());
        };
        let store_gen = self.store.generation()?;
        let snapshot = self.store.meta("vector_file")?;
        let gen_of = |stem: &str| stem.trim_start_matches("vectors-").parse::<u64>().ok();
        match snapshot
            .as_deref()
            .and_then(|st| gen_of(st).map(|g| (st, g)))
        {
            Some((stem, g)) => {
                let view = self._lock.is_none() && g == store_gen;
                match Vectors::load(&self.dir, stem, self.vector_backend, view) {
                    Ok(v) => {
                        self.vectors = Some(v);
                        self.vector_gen = g;
                        self.vector_saved = Some(g);
                    }
                    Err(e) => {
                        tracing::warn!("{e}; reloading the vectors from the embedding cache");
                        self.reload_vectors()?;
                    }
                }
            }
            None => self.reload_vectors()?,
        }
        Ok(())
    }

    fn journal_trimmed_to(&self) -> Result<u64> {
        Ok(self
            .store
            .meta("journal_trimmed_to")?
            .and_then(|v| v.parse().ok())
            .unwrap_or(0))
    }

    /// Trims the journal up to the oldest generation any saved index reflects.
    fn trim_journal(&mut self) -> Result<()> {
        let mut upto = self.bm25.generation()?;
        if self.vectors.is_some() {
            upto = upto.min(self.vector_saved.unwrap_or(0));
        }
        if upto > self.journal_trimmed_to()? {
            self.store.trim_journal(upto)?;
            self.store
                .set_meta("journal_trimmed_to", &upto.to_string())?;
        }
        Ok(())
    }

    /// Opens the index, creating it with `settings` if there is none.
    pub fn open_or_create(dir: &Path, settings: CreateSettings) -> Result<Engine> {
        if Engine::exists(dir) {
            Engine::open(dir, Access::Write)
        } else {
            Engine::create(dir, settings)
        }
    }

    /// Makes the long runs of this engine ([`Engine::ingest`], [`Engine::recontextualize`])
    /// stop early once `flag` is set (a service's job cancelled): no new document is
    /// started, the documents whose contexts are written are committed, and the report says
    /// `cancelled`. Running the same work again finishes it.
    pub fn cancel_on(&mut self, flag: Arc<std::sync::atomic::AtomicBool>) {
        self.cancel = Some(flag);
    }

    pub(crate) fn cancel_requested(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(|c| c.load(std::sync::atomic::Ordering::Acquire))
    }

    /// The index directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The card store, for the scale-out crate (a query node writes the store's cards into
    /// it) and the engine's tests; front ends use the engine's methods.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The card store, to write: a query node writes the store's cards into it, then
    /// brings the indexes level with [`Engine::sync_index`].
    pub fn store_mut(&mut self) -> &mut Store {
        &mut self.store
    }

    /// Cards by row key (as the legs return them), with their documents' title and source,
    /// in the order asked; keys without a card are left out.
    pub fn cards(&self, keys: &[u64]) -> Result<Vec<CardRecord>> {
        Ok(self.store.cards(keys)?)
    }

    /// How Chinese is tokenized in this index.
    pub fn chinese_tokenizer(&self) -> ChineseTokenizer {
        self.chinese
    }

    /// Whether BM25 or the vector snapshot reflects an older generation than the store
    /// (a writer committed since; the vector snapshot is written at the end of a run, or
    /// now and then by a query node's follower, so a reader catches its vectors up in
    /// memory from the journal).
    fn index_is_behind(&self) -> Result<bool> {
        let store = self.store.generation()?;
        Ok(self.bm25.generation()? < store || (self.vectors.is_some() && self.vector_gen < store))
    }

    fn remove_stale_index_dirs(&self, current: &str) {
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
        let started = std::time::Instant::now();
        let chunks = self.rebuild_bm25(progress)?;
        let mut embedded = 0;
        if self.embed_settings()?.model.is_some() {
            embedded = self.embed_uncached()?;
            self.reload_vectors()?;
            self.vector_saved = None;
            self.save_vectors()?;
        }
        Ok(RebuildReport {
            chunks,
            embedded,
            vectors: self.vectors.as_ref().map_or(0, |v| v.len() as u64),
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    /// Rebuilds the BM25 index from the cards alone.
    fn rebuild_bm25(&mut self, progress: &mut dyn FnMut(u64, u64)) -> Result<u64> {
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

    /// An error unless this engine was opened to write ([`Access::Write`]).
    pub fn require_writer(&self) -> Result<()> {
        if self._lock.is_none() {
            return Err(EngineError::Invalid(
                "this engine was opened read-only".into(),
            ));
        }
        Ok(())
    }

    /// The mode a request runs in: as asked, or hybrid when the index has vectors and BM25
    /// when it has none. Asking for the vector leg of an index without vectors is an error.
    pub fn mode_for(&self, asked: Option<Mode>) -> Result<Mode> {
        match asked {
            None if self.vectors.is_some() => Ok(Mode::Hybrid),
            None => Ok(Mode::Bm25),
            Some(Mode::Bm25) => Ok(Mode::Bm25),
            Some(m) if self.vectors.is_some() => Ok(m),
            Some(m) => Err(EngineError::Invalid(format!(
                "--mode {m} needs vectors, and this index has none (it was created with --embedder none); use --mode bm25, or re-create the index with an embedder"
            ))),
        }
    }

    /// Searches: BM25, vectors or both fused (see [`situate_search::SearchRequest`]), restricted to the
    /// documents `filter` allows.
    pub fn search(&self, req: &situate_search::SearchRequest<'_>) -> Result<Vec<Hit>> {
        self.search_filtered(req, &DocumentFilter::default())
    }

    /// [`Engine::search`] with a metadata filter, applied inside each leg.
    pub fn search_filtered(
        &self,
        req: &situate_search::SearchRequest<'_>,
        filter: &DocumentFilter,
    ) -> Result<Vec<Hit>> {
        let mode = self.mode_for(req.mode)?;
        let langs: Vec<Language> = if req.languages.is_empty() {
            self.languages.clone()
        } else {
            req.languages.to_vec()
        };
        if langs.is_empty() || req.k == 0 {
            return Ok(Vec::new()); // nothing ingested yet
        }
        let cards = if filter.is_empty() {
            None
        } else {
            let set = self.store.filter_cards(filter)?;
            if set.is_empty() {
                return Ok(Vec::new());
            }
            Some(set)
        };
        let req = situate_search::SearchRequest {
            languages: &langs,
            ..req.clone()
        };
        // The query is embedded when the search needs it (in hybrid mode on a second thread
        // while BM25 runs); the embedder is loaded here, so that a missing one is reported
        // as such before anything runs. An embedding failure keeps its own error.
        let embedder = match (mode, &self.vectors) {
            (Mode::Bm25, _) | (_, None) => None,
            _ => Some((self.embedder()?, self.runtime()?)),
        };
        let failure: std::sync::Mutex<Option<EngineError>> = std::sync::Mutex::new(None);
        let embed = || -> std::result::Result<Vec<f32>, situate_core::IndexError> {
            let (embedder, runtime) = embedder.as_ref().ok_or("no embedder")?;
            vectors::embed_query_with(embedder.as_ref(), runtime, req.text).map_err(|e| {
                let message = e.to_string();
                if let Ok(mut slot) = failure.lock() {
                    *slot = Some(e);
                }
                situate_core::IndexError::from(message)
            })
        };
        let legs = Legs {
            lexical: &self.bm25,
            vector: match (&self.vectors, &embedder) {
                (Some(v), Some(_)) => Some((
                    v as &dyn situate_core::VectorIndex,
                    situate_search::QueryVector::Lazy(&embed),
                )),
                _ => None,
            },
        };
        let found =
            situate_search::search(&legs, &StoreCards(&self.store), &req, mode, cards.as_ref());
        match found {
            Ok(hits) => Ok(hits),
            Err(e) => match failure.into_inner().ok().flatten() {
                Some(embedding) => Err(embedding),
                None => Err(EngineError::Search(e)),
            },
        }
    }

    /// The raw BM25 leg (card keys and scores), for benchmarks and evaluation.
    pub fn lexical(&self) -> &dyn LexicalIndex {
        &self.bm25
    }

    /// Languages present in the index.
    pub fn languages(&self) -> &[Language] {
        &self.languages
    }

    /// A chunk card with its document's title and source.
    pub fn chunk(&self, chunk_id: &str) -> Result<CardRecord> {
        self.store
            .card_by_chunk_id(chunk_id)?
            .ok_or_else(|| EngineError::NotFound(format!("no chunk {chunk_id:?} in the index")))
    }

    /// A stored document.
    pub fn document(&self, id: &str) -> Result<StoredDocument> {
        self.store
            .document(id)?
            .ok_or_else(|| EngineError::NotFound(format!("no document {id:?} in the index")))
    }

    /// Counts over the index.
    pub fn stats(&self) -> Result<EngineStats> {
        let embed = self.embed_settings()?;
        Ok(EngineStats {
            store: self.store.stats()?,
            bm25_chunks: self.bm25.num_chunks(),
            bm25_segments: self.bm25.num_segments(),
            bm25_generation: self.bm25.generation()?,
            chinese_tokenizer: self.chinese.as_str().to_string(),
            disk_bytes: dir_size(&self.dir),
            embed_cut: match &embed.model {
                Some(model) => self.embed_cut(model)?,
                None => EmbedCut::default(),
            },
            chunk_tokens: self.chunk_tokens()?,
            embedder: embed.spec,
            embed_model: embed.model,
            vectors: self.vectors.as_ref().map_or(0, |v| v.len() as u64),
            vector_index: self.vectors.as_ref().map(|v| v.kind().to_string()),
        })
    }

    /// The index's cards whose embedding input was cut to the embedder's window (recorded
    /// when they were embedded; no model is loaded). The cards are read only when some
    /// input of this model was ever cut.
    fn embed_cut(&self, model: &str) -> Result<EmbedCut> {
        let cuts = self.store.embedding_cuts(model)?;
        let mut out = EmbedCut::default();
        if cuts.is_empty() {
            return Ok(out);
        }
        let late = self.late_chunking()?;
        self.store.for_each_index_row(|row| {
            if let Some((tokens, cut)) = cuts.get(&vectors::text_hash(&row, late)) {
                out.texts += 1;
                out.input_tokens += tokens;
                out.tokens += cut;
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// Compares the BM25 index with the store card by card.
    pub fn check(&self) -> Result<Consistency> {
        let mut in_store = BTreeSet::new();
        self.store.for_each_index_row(|row| {
            in_store.insert(row.card);
            Ok(())
        })?;
        let in_index: BTreeSet<u64> = self.bm25.card_keys()?.into_iter().collect();
        let missing: Vec<u64> = in_store.difference(&in_index).copied().take(20).collect();
        let extra: Vec<u64> = in_index.difference(&in_store).copied().take(20).collect();
        // Vectors: exactly the cards that have a cached embedding.
        let (mut vector_missing, mut vector_extra) = (Vec::new(), Vec::new());
        if let Some(v) = &self.vectors {
            let want = self.cards_with_embeddings()?;
            let have: BTreeSet<u64> = v.keys().into_iter().collect();
            vector_missing = want
                .iter()
                .filter(|(k, cached)| **cached && !have.contains(k))
                .map(|(k, _)| *k)
                .take(20)
                .collect();
            vector_extra = have
                .iter()
                .filter(|k| want.get(k) != Some(&true))
                .copied()
                .take(20)
                .collect();
        }
        Ok(Consistency {
            vector_chunks: self.vectors.as_ref().map_or(0, |v| v.len() as u64),
            missing_from_vectors: vector_missing,
            not_in_store_vectors: vector_extra,
            store_chunks: in_store.len() as u64,
            index_chunks: self.bm25.num_chunks(),
            missing_from_index: missing,
            not_in_store: extra,
            store_generation: self.store.generation()?,
            index_generation: self.bm25.generation()?,
        })
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

/// What [`Engine::check`] found.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Consistency {
    /// Chunk cards in the store.
    pub store_chunks: u64,
    /// Chunks in the BM25 index (live documents).
    pub index_chunks: u64,
    /// Up to 20 card keys in the store but not in the index.
    pub missing_from_index: Vec<u64>,
    /// Up to 20 card keys in the index but not in the store.
    pub not_in_store: Vec<u64>,
    /// Vectors in the vector index.
    pub vector_chunks: u64,
    /// Up to 20 card keys with a cached embedding but no vector.
    pub missing_from_vectors: Vec<u64>,
    /// Up to 20 vector keys that are not a card with a cached embedding.
    pub not_in_store_vectors: Vec<u64>,
    /// The store's generation.
    pub store_generation: u64,
    /// The generation the index reflects.
    pub index_generation: u64,
}

impl Consistency {
    /// Whether the index holds exactly the store's cards, once each.
    pub fn is_consistent(&self) -> bool {
        self.store_chunks == self.index_chunks
            && self.missing_from_index.is_empty()
            && self.not_in_store.is_empty()
            && self.missing_from_vectors.is_empty()
            && self.not_in_store_vectors.is_empty()
            && self.store_generation == self.index_generation
    }
}

/// Counts over the index.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct EngineStats {
    /// The store's counts.
    pub store: Stats,
    /// Chunks in the BM25 index.
    pub bm25_chunks: u64,
    /// Segments of the BM25 index (fewer is faster to search).
    pub bm25_segments: usize,
    /// The store generation the BM25 index reflects.
    pub bm25_generation: u64,
    /// Chinese tokenizer of this index.
    pub chinese_tokenizer: String,
    /// Size of the index directory on disk.
    pub disk_bytes: u64,
    /// The embedder setting (`none`, `auto`, a model).
    pub embedder: String,
    /// The model id of the cached embeddings, once chosen.
    pub embed_model: Option<String>,
    /// Vectors in the vector index.
    pub vectors: u64,
    /// The vector index's backend now (`exact`, `hnsw`), if any.
    pub vector_index: Option<String>,
    /// The cards whose embedding input (context + chunk) was longer than the embedder
    /// reads: their ends are not in their vectors (`window` is not known here).
    pub embed_cut: EmbedCut,
    /// The largest chunk an ingest cuts when it names no size, chosen when the index was
    /// first ingested into so that context and chunk fit the embedder's window; `null` for
    /// an index made before sizes were chosen per embedder (256 tokens).
    pub chunk_tokens: Option<usize>,
}

struct StoreCards<'a>(&'a Store);

impl CardSource for StoreCards<'_> {
    fn cards(&self, keys: &[u64]) -> std::result::Result<Vec<CardRecord>, IndexError> {
        self.0.cards(keys).map_err(|e| Box::new(e) as IndexError)
    }
}

fn take_lock(dir: &Path) -> Result<File> {
    let path = dir.join("write.lock");
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io("cannot open", &path))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => Err(EngineError::Locked(dir.to_path_buf())),
        Err(std::fs::TryLockError::Error(e)) => Err(EngineError::Io {
            op: "cannot lock",
            path,
            source: e,
        }),
    }
}

fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Test hook for crash tests: `SITUATE_CRASH_AT=<point>` aborts the process (as `kill -9`
/// would, with no cleanup) when it reaches that point. Points: `index-create` (a new store
/// written under its temporary name, not yet renamed), `store-commit` (after a batch is
/// committed to the store, before the index has it), `index-commit` (before the index
/// commits), `rebuild-switch` (a new index written, not yet switched to), `vector-switch`.
pub fn crash_point(name: &str) {
    if std::env::var("SITUATE_CRASH_AT").is_ok_and(|v| v == name) {
        std::process::abort();
    }
}

/// Plain or contextual BM25 by name (`plain`, `contextual`).
pub fn parse_match_on(s: &str) -> Result<MatchOn> {
    match s {
        "plain" => Ok(MatchOn::Plain),
        "contextual" => Ok(MatchOn::Contextual),
        _ => Err(EngineError::Invalid(format!(
            "unknown BM25 mode {s:?}: expected plain or contextual"
        ))),
    }
}

#[cfg(test)]
mod tests;
