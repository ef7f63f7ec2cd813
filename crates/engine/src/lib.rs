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
mod backup;
mod context_file;
mod context_run;
mod contexts;
pub mod contextualizers;
mod error;
pub mod fusion_defaults;
mod ingest;
mod ingest_request;
mod integrity;
mod late;
mod maintain;
mod malloc;
pub mod node;
mod open;
mod query;
mod reembed;
mod review;
pub mod settings;
mod stats;
pub mod tuning;
mod vectors;
mod view;

pub use api::{
    AskRequest, CheckedAsk, CheckedSearch, CheckedTune, HeldOut, MinScore, OutOfSample,
    ScoredPoint, SearchRequest, TuneAnswer, TuneGrid, TuneMetric, TunePoint, TuneRequest,
    tune_defaults, write_tuned,
};
pub use ask::{Abstention, AnswerCost, AnswerModels, AnswerResponse};
pub use backup::{BackupAnswer, BackupFile, MANIFEST, Manifest, RestoreAnswer};
pub use context_file::{ContextRecord, ExportAnswer, ImportReport};
pub use contexts::{ContextProgress, ContextUpdate};
pub use contextualizers::{
    BuiltContextualizer, ContextChoice, LlmRun, build_contextualizer, uses_llm,
};
pub use error::{EngineError, ErrorKind, REBUILD_FIX, STORE_FIX, Wire, error_chain};
pub use ingest::{EmbedCut, IngestEvent, IngestOptions, IngestReport};
pub use ingest_request::{
    DryRunAnswer, IngestOutcome, IngestRequest, PreparedIngest, ingest_into, prepare_ingest,
};
pub use integrity::{Damage, IntegrityAnswer, Part, PartCheck, PartState, SalvageAnswer};
pub use maintain::RebuildReport;
pub use malloc::tune_malloc;
#[cfg(test)]
use open::{STORE_FILE, take_lock};
pub use query::{FusionUsed, Rerank, SearchResponse};
pub use reembed::{CheckedReembed, ReembedAnswer, ReembedProgress, ReembedRequest};
pub use review::{Decision, ReverifyReport};
pub use settings::{
    AnswerMode, AnswerPlan, AnswerSettings, FilterSettings, SearchPlan, SearchSettings, Settings,
    Unsupported,
};
pub use situate_answer::{Citation, Passage};
pub use situate_index::ChineseTokenizer;
pub use situate_ingest::{SourceOptions, TextInput};
pub use situate_llm::cost::Price;
pub use situate_search::Mode;
pub use situate_store::{Stats, StoredDocument};
pub use situate_vector::Backend as VectorBackend;
pub use stats::{Consistency, EngineStats};
pub use view::{CardView, ContextItem, Neighbour, SharedModels};

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
    /// The embedder spec the loaded vectors were made with, which [`Engine::embedder`]
    /// loads: fixed when the vectors are loaded, so a reader keeps a consistent pair across
    /// a switch of embedder until it reopens.
    vectors_spec: Option<String>,
    /// The model id those vectors are of ([`Engine::share_embedder`] takes only that one).
    vectors_model: Option<String>,
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
    /// What opening found damaged and stood in for ([`Engine::open_damaged`]; a vector
    /// snapshot reloaded from the embedding cache).
    damage: Vec<integrity::Damage>,
    _lock: Option<File>,
}

impl Engine {
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

    /// An error unless this engine was opened to write ([`Access::Write`]).
    pub fn require_writer(&self) -> Result<()> {
        if self._lock.is_none() {
            return Err(EngineError::Internal(
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
            Some(m) => Err(EngineError::field_error(
                "mode",
                format!(
                    "{m} needs vectors, and this index has none (it was created with the embedder none); use bm25, or re-create the index with an embedder"
                ),
            )),
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
}

struct StoreCards<'a>(&'a Store);

impl CardSource for StoreCards<'_> {
    fn cards(&self, keys: &[u64]) -> std::result::Result<Vec<CardRecord>, IndexError> {
        self.0.cards(keys).map_err(|e| Box::new(e) as IndexError)
    }
}

/// Test hook for crash tests: `SITUATE_CRASH_AT=<point>` aborts the process (as `kill -9`
/// would, with no cleanup) when it reaches that point. Points: `index-create` (a new store
/// written under its temporary name, not yet renamed), `store-commit` (after a batch is
/// committed to the store, before the index has it), `index-commit` (before the index
/// commits), `rebuild-switch` (a new index written, not yet switched to), `vector-switch`,
/// `reembed-batch` (a switch of embedder's batch committed to the cache) and
/// `reembed-switch` (its new snapshot written, the index not yet switched).
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
        _ => Err(EngineError::field_error(
            "bm25",
            format!("unknown BM25 mode {s:?}: expected plain or contextual"),
        )),
    }
}

#[cfg(test)]
mod tests;
