//! An ingest as a front end asks it ([`IngestRequest`]): what is given explicitly (flags, a
//! request body) over `situate.toml`, checked in one place, then [`ingest_into`] opens or
//! creates the index and runs [`Engine::ingest`].

use crate::contextualizers::{LlmRun, build_contextualizer};
use crate::settings::{Settings, key_values};
use crate::{Engine, EngineError, IngestEvent, IngestOptions, IngestReport, Result, TextInput};
use situate_ingest::SourceFormat;
use situate_llm::cost::Price;
use std::path::{Path, PathBuf};

/// What to ingest and how; every `None` falls back to `situate.toml`, then the default.
#[derive(Debug, Clone, Default)]
pub struct IngestRequest {
    /// Files and directories (or corpus files).
    pub paths: Vec<PathBuf>,
    /// Documents given as text (ids, titles and metadata the caller's), read after `paths`.
    pub texts: Vec<TextInput>,
    /// The context method: `none`, `structural` or `llm` (default structural).
    pub context: Option<String>,
    /// `auto`, `files`, `beir`, `beir-flat` or `anthropic` (default auto).
    pub format: Option<String>,
    /// A language forced on every document.
    pub language: Option<String>,
    /// Largest chunk in tokens (default 256).
    pub max_tokens: Option<usize>,
    /// Tokens shared by neighbouring chunks (default 32).
    pub overlap: Option<usize>,
    /// A tokenizer.json to count tokens with.
    pub tokenizer: Option<PathBuf>,
    /// Documents per committed batch [256; 8 with an LLM].
    pub batch: Option<usize>,
    /// The LLM run (`--llm`, `--budget`, `--dry-run`).
    pub llm: LlmRun,
    /// Metadata for every document, `KEY=VALUE`.
    pub meta: Vec<String>,
    /// The embedder, when the index is created.
    pub embedder: Option<String>,
    /// The vector index backend, when the index is created.
    pub vector_index: Option<String>,
    /// Set to stop the ingest early ([`Engine::cancel_on`]).
    pub cancel: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Read only under these directories (a service's `--ingest-root`s, canonical); `None`
    /// reads any path.
    pub roots: Option<Vec<PathBuf>>,
}

/// What [`ingest_into`] did: the answer of `situate ingest --json` and of an `ingest` job
/// (its `result`).
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct IngestOutcome {
    /// The index directory.
    #[serde(rename = "index")]
    pub dir: PathBuf,
    /// Whether the index was created by this ingest.
    pub created: bool,
    /// The context method used.
    #[serde(rename = "context")]
    pub method: String,
    /// The largest chunk this ingest cut, in the chunker's tokens.
    pub chunk_tokens: usize,
    /// The counts.
    pub report: IngestReport,
    /// What the LLM calls cost, when its price is known.
    pub dollars: Option<f64>,
    /// The ingest's wall time.
    pub seconds: f64,
    /// The LLM's price, when known.
    #[serde(skip)]
    pub price: Option<Price>,
}

/// What a dry run would cost (`situate ingest --dry-run --json`): nothing called or written.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct DryRunAnswer {
    /// Always `true`: nothing was called or written.
    pub dry_run: bool,
    /// Documents to contextualize (new or changed).
    pub documents: u64,
    /// Documents unchanged since the last ingest.
    pub unchanged: u64,
    /// Chunks they hold.
    pub chunks: u64,
    /// Contexts already in the context cache (no call).
    pub contexts_cached: u64,
    /// The documents' tokens.
    pub document_tokens: u64,
    /// The calls' estimated tokens.
    pub estimated_usage: situate_core::TokenUsage,
    /// Their estimated cost, when the LLM's price is known.
    pub estimated_dollars: Option<f64>,
    /// That cost per million document tokens.
    pub dollars_per_million_document_tokens: Option<f64>,
}

impl IngestOutcome {
    /// A dry run's outcome as its answer.
    pub fn dry_run(&self) -> DryRunAnswer {
        let r = &self.report;
        let dollars = self.price.map(|p| p.dollars(&r.usage));
        DryRunAnswer {
            dry_run: true,
            documents: r.added + r.replaced,
            unchanged: r.unchanged,
            chunks: r.chunks,
            contexts_cached: r.contexts_cached,
            document_tokens: r.document_tokens,
            estimated_usage: r.usage,
            estimated_dollars: dollars,
            dollars_per_million_document_tokens: dollars
                .filter(|_| r.document_tokens > 0)
                .map(|d| d * 1e6 / r.document_tokens as f64),
        }
    }
}

/// An ingest checked and ready to run ([`prepare_ingest`]): the index is open (created when
/// there was none), the contextualizer built.
pub struct PreparedIngest {
    engine: Engine,
    opts: IngestOptions,
    paths: Vec<PathBuf>,
    /// Whether the index was created for this ingest.
    pub created: bool,
    /// The context method.
    pub method: String,
    /// The LLM's price, when known (for progress in dollars).
    pub price: Option<Price>,
    index: PathBuf,
    // A dry run on an index not yet made works here; it goes when the ingest is dropped.
    _scratch: Option<tempfile::TempDir>,
}

/// Checks `req` against `settings`, opens the index at `index` (creating it with the
/// request's creation settings when there is none) and builds the contextualizer; nothing
/// is ingested yet ([`PreparedIngest::run`]). A dry run on an index not yet made works on a
/// scratch one and writes nothing at `index`. Creation settings given for an existing index
/// must equal its own (they cannot change).
pub fn prepare_ingest(
    index: &Path,
    settings: &Settings,
    req: IngestRequest,
) -> Result<PreparedIngest> {
    let (mut opts, method, price) = ingest_options(settings, &req)?;
    opts.texts = req.texts;
    let chunk_given = req.max_tokens.or(settings.chunk.max_tokens).is_some();
    let mut created = !Engine::exists(index);
    let create =
        settings.create_settings(None, req.embedder.as_deref(), req.vector_index.as_deref())?;
    // A dry run on an index not yet made works on a scratch one: it writes nothing here.
    let scratch = if opts.dry_run && created {
        created = false;
        Some(tempfile::tempdir().map_err(crate::io(
            "cannot make a scratch index in",
            &std::env::temp_dir(),
        ))?)
    } else {
        None
    };
    let target = scratch
        .as_ref()
        .map(|d| d.path().join("index"))
        .unwrap_or_else(|| index.to_path_buf());
    let mut e = Engine::open_or_create(&target, create)?;
    if let Some(flag) = &req.cancel {
        e.cancel_on(std::sync::Arc::clone(flag));
    }
    if !chunk_given && let Some(n) = e.choose_chunk_tokens(&method, !opts.dry_run)? {
        opts.chunker.max_tokens = n;
    }
    if !created && scratch.is_none() {
        // Creation settings may be repeated (re-running a command), not changed.
        let (embedder, backend) = e.embed_creation_settings()?;
        for (field, given, stored) in [
            ("embedder", &req.embedder, &embedder),
            ("vector_index", &req.vector_index, &backend),
        ] {
            if let Some(g) = given
                && g != stored
                && g != "auto"
            {
                return Err(EngineError::field_error(
                    field,
                    format!(
                        "{g} differs from the index's {stored}: it applies when an index is created, and {} already exists (ingest into a new index, or leave it out)",
                        index.display()
                    ),
                ));
            }
        }
    }
    Ok(PreparedIngest {
        engine: e,
        opts,
        paths: req.paths,
        created,
        method,
        price,
        index: index.to_path_buf(),
        _scratch: scratch,
    })
}

/// The most tokens of the context an index's chunk size leaves room for, by context
/// method, besides the prompt and special tokens ([`PROMPT_ROOM`]): none for `none`; a
/// heading path for `structural`; the 50–100 tokens of an LLM's note or description (or
/// an imported context) for every other method.
fn context_room(method: &str) -> usize {
    match method {
        "none" => 0,
        "structural" => 32,
        _ => 100,
    }
}

/// Tokens of an embedder's window kept for its prompt and special tokens
/// (EmbeddingGemma's `title: none | text: ` and its two special tokens are 9).
const PROMPT_ROOM: usize = 16;

/// The largest chunk an index cuts when no ingest names one: the chunker's 256 tokens
/// (close to the chunks of Anthropic's benchmark), or less when the embedder reads fewer
/// than chunk, context ([`context_room`]) and prompt together, so that the context does not
/// push the chunk's end out of its vector (all-MiniLM-L6-v2 reads 256: 208 tokens with
/// structural contexts, 140 with an LLM's). Never below 64. The chunker's counter is an
/// estimate unless `[chunk] tokenizer` names one, so a few inputs may still be cut: ingest
/// and `stats` count them.
pub(crate) fn chunk_tokens_for(window: Option<usize>, method: &str) -> usize {
    let default = situate_ingest::ChunkerConfig::default().max_tokens;
    match window {
        None => default,
        Some(w) => w
            .saturating_sub(PROMPT_ROOM + context_room(method))
            .clamp(64, default),
    }
}

impl Engine {
    /// The chunk size every ingest without one of its own uses, chosen when the index was
    /// created (`chunk_tokens_for`); `None` for an index made before chunk sizes were
    /// chosen per embedder (its ingests keep the chunker's default).
    pub fn chunk_tokens(&self) -> Result<Option<usize>> {
        match self.store.meta(CHUNK_TOKENS)? {
            None => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| {
                EngineError::Invalid(format!(
                    "the index's {CHUNK_TOKENS} is {v:?}, not a number of tokens"
                ))
            }),
        }
    }

    /// The chunk size of an ingest with context `method` that names none: the index's
    /// own; for an index with nothing in it yet (just created, or by `situate init`)
    /// the size that fits its embedder ([`chunk_tokens_for`]), recorded when `record`
    /// so that every later ingest cuts the same chunks; `None` (the chunker's default)
    /// for an index made before sizes were chosen per embedder.
    fn choose_chunk_tokens(&self, method: &str, record: bool) -> Result<Option<usize>> {
        if let Some(n) = self.chunk_tokens()? {
            return Ok(Some(n));
        }
        if self.store.generation()? > 0 {
            return Ok(None);
        }
        let spec = self.embed_settings()?.spec;
        let n = chunk_tokens_for(situate_embed::passage_window(&spec), method);
        if record {
            self.require_writer()?;
            self.store.set_meta(CHUNK_TOKENS, &n.to_string())?;
        }
        Ok(Some(n))
    }
}

/// The index setting that records [`Engine::chunk_tokens`].
const CHUNK_TOKENS: &str = "chunk_max_tokens";

/// The ingest options, context method and price `req` asks for over `settings`, checked.
pub fn ingest_options(
    settings: &Settings,
    req: &IngestRequest,
) -> Result<(IngestOptions, String, Option<Price>)> {
    if req.paths.is_empty() && req.texts.is_empty() {
        return Err(EngineError::field_error(
            "paths",
            "nothing to ingest: give paths or texts",
        ));
    }
    let method = req
        .context
        .clone()
        .or(settings.ingest.context.clone())
        .unwrap_or_else(|| crate::ContextChoice::Structural.as_str().into());
    let built = build_contextualizer(&method, &settings.llm, &req.llm)?;
    let price = built.price;
    let mut opts = IngestOptions::new(built.contextualizer);
    opts.dry_run = req.llm.dry_run;
    opts.sources.roots = req.roots.clone();
    opts.sources.format = req
        .format
        .as_deref()
        .unwrap_or("auto")
        .parse::<SourceFormat>()
        .map_err(EngineError::Invalid)?;
    opts.sources.language = match req.language.clone().or(settings.ingest.language.clone()) {
        Some(l) => Some(l.parse().map_err(EngineError::Invalid)?),
        None => None,
    };
    if let Some(l) = &settings.ingest.default_language {
        opts.sources.default_language = l.parse().map_err(EngineError::Invalid)?;
    }
    opts.chunker.max_tokens = req
        .max_tokens
        .or(settings.chunk.max_tokens)
        .unwrap_or(opts.chunker.max_tokens);
    opts.chunker.overlap_tokens = req
        .overlap
        .or(settings.chunk.overlap_tokens)
        .unwrap_or(opts.chunker.overlap_tokens);
    opts.chunker.tokenizer = req.tokenizer.clone().or(settings.chunk.tokenizer.clone());
    if req.batch == Some(0) {
        return Err(EngineError::field_error("batch", "must be at least 1"));
    }
    // An LLM takes seconds per chunk: commit every few documents so that what is done is
    // searchable early (contexts are kept as they finish in any case).
    opts.batch_documents = match req.batch {
        None if crate::uses_llm(&method) => 8,
        None => 256,
        Some(b) => b,
    };
    opts.metadata = key_values("meta", &req.meta)?;
    if let Some((k, _)) = opts
        .metadata
        .iter()
        .find(|(k, _)| !k.chars().all(|c| c.is_alphanumeric() || "_-.".contains(c)))
    {
        return Err(EngineError::field_error(
            "meta",
            format!("key {k:?}: use letters, digits, '_', '-' and '.' only"),
        ));
    }

    Ok((opts, method, price))
}

impl PreparedIngest {
    /// The largest chunk this ingest will cut, in the chunker's tokens.
    pub fn chunk_tokens(&self) -> usize {
        self.opts.chunker.max_tokens
    }

    /// Runs the ingest, reporting each step to `on_event`.
    pub fn run(mut self, on_event: &mut dyn FnMut(IngestEvent<'_>)) -> Result<IngestOutcome> {
        let chunk_tokens = self.chunk_tokens();
        let started = std::time::Instant::now();
        let report = self.engine.ingest(&self.paths, self.opts, on_event)?;
        let dir = if self._scratch.is_some() {
            self.index
        } else {
            self.engine.dir().to_path_buf()
        };
        Ok(IngestOutcome {
            dollars: self.price.map(|p| p.dollars(&report.usage)),
            seconds: started.elapsed().as_secs_f64(),
            report,
            created: self.created,
            method: self.method,
            price: self.price,
            dir,
            chunk_tokens,
        })
    }
}

/// [`prepare_ingest`], then [`PreparedIngest::run`].
pub fn ingest_into(
    index: &Path,
    settings: &Settings,
    req: IngestRequest,
    on_event: &mut dyn FnMut(IngestEvent<'_>),
) -> Result<IngestOutcome> {
    prepare_ingest(index, settings, req)?.run(on_event)
}
