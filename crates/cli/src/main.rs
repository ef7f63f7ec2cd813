//! `situate`: the command line. Glue only: each command parses its flags into a request of
//! `situate-engine` (or `situate-models`), makes one call, and prints the answer as text or
//! JSON. Settings (`situate.toml`), their merging and their checks are the engine's.

/// `println!` that returns the write error instead of panicking: a closed pipe
/// (`situate status | head`) then ends the command quietly (see `main`).
macro_rules! outln {
    () => {
        std::io::Write::write_all(&mut std::io::stdout(), b"\n")?
    };
    ($($t:tt)*) => {
        {
            use std::io::Write as _;
            writeln!(std::io::stdout(), $($t)*)?
        }
    };
}

mod commands;
mod contexts;
mod errors;
mod eval;
mod evalset;
mod models;
mod output;
mod shared;
mod tune;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use situate_engine::{
    Access, AnswerSettings, AskRequest, CheckedSearch, Engine, FilterSettings, IngestEvent,
    IngestRequest, SearchRequest, SearchSettings, Settings,
};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

/// Contextual Retrieval: index documents with situating contexts (structural or written by
/// an LLM), search them with contextual BM25 and embeddings fused, rerank, and evaluate.
#[derive(Parser)]
#[command(name = "situate", version, about, max_term_width = 100)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// `situate store …`.
#[derive(Subcommand)]
enum StoreCommand {
    /// Create the store's schema in a PostgreSQL database (pgvector, the `situate` schema,
    /// its tables), or check that it is this build's format; nothing is written on an error
    Migrate {
        /// postgres://USER@HOST:PORT/DATABASE [default: `[store] url`]; PGHOST, PGPORT,
        /// PGUSER, PGPASSWORD and PGDATABASE fill what it leaves out
        #[arg(long)]
        store: Option<String>,
    },
    /// Check a query node (--index) against the store card by card, and its indexes
    /// against its cards, after catching up; exits 1 when anything differs
    Check {
        /// postgres://USER@HOST:PORT/DATABASE [default: `[store] url`]
        #[arg(long)]
        store: Option<String>,
    },
    /// Fill the store with another embedder's vectors of every card while the nodes keep
    /// searching with theirs; then each node switches with `situate reembed --store`.
    /// Workers with `--embedder` of the same model help; a killed run resumes
    Reembed {
        /// postgres://USER@HOST:PORT/DATABASE [default: `[store] url`]
        #[arg(long)]
        store: Option<String>,
        /// The embedder to fill (embeddinggemma-300m, all-minilm-l6-v2:q8, a model directory)
        #[arg(long)]
        embedder: String,
        /// Items claimed and embedded at a time [default: 256]
        #[arg(long)]
        batch: Option<usize>,
        /// Only queue the work, for `situate worker --role embed --embedder …` to do
        #[arg(long)]
        queue_only: bool,
    },
}

#[derive(Args)]
struct Global {
    /// Index directory [default: ./.situate, or `index` in situate.toml]
    #[arg(long, global = true, env = "SITUATE_INDEX")]
    index: Option<PathBuf>,
    /// Settings file [default: ./situate.toml when it exists]
    #[arg(long, global = true)]
    settings: Option<PathBuf>,
    /// Print one JSON document instead of text
    #[arg(long, global = true)]
    json: bool,
    /// No progress display
    #[arg(long, short, global = true)]
    quiet: bool,
    /// Never install a model: a model that is not installed is an error naming the command
    /// that installs it (also SITUATE_OFFLINE=1)
    #[arg(long, global = true)]
    offline: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Create an empty index
    Init {
        /// How Chinese is tokenized for BM25 (fixed for the index's life): bigram or jieba
        #[arg(long)]
        chinese: Option<String>,
        #[command(flatten)]
        embed: EmbedArgs,
    },
    /// Ingest files, directory trees or corpus files (BEIR corpus.jsonl, Anthropic codebase_chunks.json)
    Ingest(IngestArgs),
    /// Search the index
    Search(SearchArgs),
    /// Answer a question from the index, citing the chunks the answer comes from, or say
    /// the documents do not hold the answer
    Ask(AskArgs),
    /// Show one chunk card: context, original and provenance
    Show {
        /// The chunk id (as printed by search)
        chunk_id: String,
    },
    /// Counts, languages, context statuses, and whether the BM25 index agrees with the store
    Stats {
        /// Also check every file (as `situate check` does)
        #[arg(long)]
        verify: bool,
        /// With --verify: SQLite's quick_check instead of its full integrity_check
        #[arg(long, requires = "verify")]
        quick: bool,
    },
    /// Check every file of the index (the store with SQLite's integrity_check, BM25 and
    /// vector snapshot checksums) and compare the cards with the indexes; says what to run
    /// when something is damaged
    Check {
        /// SQLite's quick_check instead of its full integrity_check (faster on a large store)
        #[arg(long)]
        quick: bool,
    },
    /// Context statuses, and the chunks whose context failed or was rejected, with reasons;
    /// with --store, the shared store's progress and cost (the same from any machine)
    Status {
        /// The shared store: postgres://USER@HOST:PORT/DATABASE [default: `[store] url`]
        #[arg(long)]
        store: Option<String>,
    },
    /// Write the contexts and embeddings the shared store has queued (any number of
    /// workers, on any number of machines)
    Worker(shared::WorkerArgs),
    /// Write contexts with an LLM for stored chunks that have none yet (pending, failed)
    Contextualize(contexts::ContextualizeArgs),
    /// List, decide, regenerate, export and import contexts
    #[command(subcommand)]
    Contexts(contexts::ContextsCommand),
    /// Remove a document and its chunks from the store and every index
    Rm {
        /// The document id
        document_id: String,
    },
    /// Rebuild every index from the chunk cards (no LLM calls)
    Rebuild,
    /// Copy the index to a new directory while it is searched and written: the store as of
    /// one commit, the indexes, and a manifest of every file's hash
    Backup {
        /// The new directory (it must not exist, or be empty)
        dir: PathBuf,
    },
    /// Make a new index with this damaged index's settings and copy into it what can still
    /// be read of its context and embedding caches; ingesting the same documents there
    /// then pays for no context again
    Salvage {
        /// The new index's directory
        into: PathBuf,
    },
    /// Restore the index (--index) from a backup, after checking every file of it; the
    /// restored index is brought up to date and checked
    Restore {
        /// The backup directory (made by `situate backup`)
        backup: PathBuf,
        /// Replace the index there: it is moved aside to INDEX.replaced-TIME, not deleted
        #[arg(long)]
        replace: bool,
    },
    /// Move the index to another embedder while it serves: every chunk embedded by the new
    /// model beside the live vectors (no LLM call; cached embeddings reused), then one
    /// atomic switch; a run stopped midway resumes where it was
    Reembed {
        /// The embedder to move to (embeddinggemma-300m, all-minilm-l6-v2:q8, a model
        /// directory, a hosted model)
        #[arg(long)]
        embedder: String,
        /// Inputs embedded and committed at a time [default: 256]
        #[arg(long)]
        batch: Option<usize>,
        /// The index is a query node of this shared store (postgres://…): the new vectors
        /// are read from the store (`situate store reembed` filled it), the rest embedded here
        #[arg(long)]
        store: Option<String>,
    },
    /// Choose the search settings (fusion, α, RRF k, context weight, fetch depth) on your
    /// own questions by cross-validation, and `[answer] min_score` on control questions;
    /// changes nothing unless the gain holds on questions it was not chosen on
    Tune(tune::TuneArgs),
    /// Evaluate retrieval on a data set: Pass@k, recall, MRR, nDCG, MAP per configuration
    Eval(eval::EvalArgs),
    /// Build and check a team's own evaluation set against this index
    #[command(subcommand, name = "eval-set")]
    EvalSet(evalset::EvalSetCommand),
    /// Install and list local models: embedders and the local LLM
    #[command(subcommand)]
    Models(models::ModelsCommand),
    /// The shared store on PostgreSQL + pgvector, for more than one machine
    #[command(subcommand)]
    Store(StoreCommand),
    /// Serve the index over HTTP (search, cards, documents, jobs, review, evaluations,
    /// metrics, MCP at /mcp) until interrupted
    Serve(ServeArgs),
    /// Serve the index to an agent over MCP on stdin/stdout (for Claude Desktop, Claude
    /// Code, Cursor...): search, get_card, explain, list_documents, index_status
    Mcp {
        /// Also offer the write tools: ingest, job_status, review_context
        #[arg(long)]
        allow_write: bool,
        /// Where evaluation reports are kept
        #[arg(long, default_value = "eval")]
        evals: PathBuf,
    },
}

#[derive(Args)]
struct ServeArgs {
    /// Address to listen on; other than loopback only with API keys (port 0: any free port)
    #[arg(long, default_value = "127.0.0.1:7878")]
    bind: std::net::SocketAddr,
    /// API keys file: one `read KEY` or `admin KEY` per line (also SITUATE_ADMIN_KEYS and
    /// SITUATE_READ_KEYS, comma-separated). With keys every route but /healthz and /readyz
    /// needs `Authorization: Bearer KEY`
    #[arg(long)]
    keys: Option<PathBuf>,
    /// A host name clients use to reach the service, accepted in Host and Origin besides
    /// loopback and the bound address (repeatable; `*` accepts any, behind a proxy that
    /// checks it)
    #[arg(long = "allow-host", value_name = "HOST")]
    allow_hosts: Vec<String>,
    /// Reader threads: searches answered at once [default: the number of cores, at most 4]
    #[arg(long)]
    readers: Option<usize>,
    /// The most hits one search may ask for
    #[arg(long, default_value_t = situate_serve::Limits::default().max_k)]
    max_k: usize,
    /// The longest a request may take, in seconds
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
    /// The longest an answer (`/v1/ask`, the MCP tool `ask`) may take, in seconds
    #[arg(long, default_value_t = 300.0)]
    ask_timeout: f64,
    /// The longest a request's head (request line and headers) may take to arrive, in
    /// seconds: a slower client is disconnected
    #[arg(long, default_value_t = 10.0)]
    header_timeout: f64,
    /// The most connections open at once; more wait until one closes
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Where evaluation reports are kept, one folder each (`situate eval --out
    /// DIR/NAME` writes one; eval jobs write there)
    #[arg(long, default_value = "eval")]
    evals: PathBuf,
    /// Where backup jobs write, one folder per backup (`POST /v1/jobs` with kind `backup`,
    /// admin)
    #[arg(long, default_value = "backups")]
    backups: PathBuf,
    /// A directory whose files an ingest job may read by server-side path (repeatable).
    /// Without any: any path when listening on loopback, none over the network (send
    /// `files` or `texts` instead); a symbolic link is not followed out of a root
    #[arg(long = "ingest-root", value_name = "DIR")]
    ingest_roots: Vec<PathBuf>,
    /// Offer the MCP write tools (ingest, job_status, review_context) at /mcp; with keys
    /// they need an admin key
    #[arg(long)]
    mcp_allow_write: bool,
    /// A web origin whose pages may call the API from a browser (CORS), such as
    /// https://app.example (repeatable; none by default: no CORS)
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    cors_origins: Vec<String>,
    /// Serve as a query node of this shared store (postgres://USER@HOST:PORT/DATABASE; a
    /// read-only replica will do): the index directory is built from the store and kept
    /// current from its change feed [default: `[store] url`]
    #[arg(long)]
    store: Option<String>,
    /// Embedder of a query node's index when it is created [default: auto]
    #[arg(long = "node-embedder", requires = "store")]
    node_embedder: Option<String>,
}

#[derive(Args)]
struct EmbedArgs {
    /// Embedder, fixed when the index is created: auto (all-minilm-l6-v2 for English
    /// corpora, multilingual-e5-small otherwise), none (BM25 only), a model name
    /// (`situate models list`: embeddinggemma-300m, nomic-embed-text-v1.5 and
    /// all-mpnet-base-v2 too), a Hugging Face model directory (either BERT kind with `:q8`
    /// to embed passages in int8: all-minilm-l6-v2:q8), or a hosted model: openai:MODEL,
    /// ollama:MODEL, voyage:MODEL, gemini:MODEL, with options after `?` (base_url, key_env,
    /// dimensions, batch, concurrency, retries, timeout). `:DIM` keeps a Matryoshka
    /// dimension (embeddinggemma-300m:256), `:late` embeds by late chunking: each document
    /// read whole, each chunk pooled from its span (nomic-embed-text-v1.5:late)
    /// [default: auto]
    #[arg(long)]
    embedder: Option<String>,
    /// Vector index, fixed when the index is created: auto (exact when small, HNSW when
    /// large), exact or hnsw [default: auto]
    #[arg(long)]
    vector_index: Option<String>,
}

#[derive(Args)]
struct IngestArgs {
    /// Files and directories to ingest
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Context method: none, structural (path, title, headings, enclosing code), llm (a note
    /// per chunk, written by --llm), document (--llm describes each document once; each chunk
    /// gets that description and its structural context) or document+llm (both)
    /// [default: structural]
    #[arg(long)]
    context: Option<String>,
    /// Input format: auto, files, beir (records with a metadata.parent become the chunks of their parent), beir-flat (every record a document) or anthropic
    #[arg(long, default_value = "auto")]
    format: String,
    /// Force the language of every document (en, ru, zh, other) instead of detecting it
    #[arg(long)]
    language: Option<String>,
    /// Largest chunk in tokens [default: 256]
    #[arg(long)]
    max_tokens: Option<usize>,
    /// Tokens shared by neighbouring chunks [default: 32]
    #[arg(long)]
    overlap: Option<usize>,
    /// Count tokens with this tokenizer.json instead of the built-in estimate
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// Documents per committed batch [default: 256; 8 with an LLM]
    #[arg(long)]
    batch: Option<usize>,
    #[command(flatten)]
    llm: contexts::LlmArgs,
    /// Ingest into the shared store: postgres://USER@HOST:PORT/DATABASE (read, chunk and
    /// queue; workers write the contexts) [default: `[store] url`, else the index]
    #[arg(long)]
    store: Option<String>,
    /// With --store: also write the queued contexts with this many local workers
    #[arg(long)]
    workers: Option<usize>,
    /// Exit non-zero when any input was skipped
    #[arg(long)]
    strict: bool,
    /// Metadata for every document of this ingest, KEY=VALUE (repeatable; filter on it
    /// with `search --meta`)
    #[arg(long = "meta", value_name = "KEY=VALUE")]
    meta: Vec<String>,
    #[command(flatten)]
    embed: EmbedArgs,
}

/// The search settings `situate search` and `situate eval` share; unset ones come from
/// `[search]` in situate.toml, then the defaults.
#[derive(Args, Clone, Default)]
pub struct TuningArgs {
    /// Weight of the context relative to the original in contextual BM25 [default: 0.5]
    #[arg(long)]
    context_weight: Option<f32>,
    /// Hits each leg contributes to the fusion [default: 150]
    #[arg(long)]
    fetch: Option<usize>,
    /// Fusion: rrf (weighted reciprocal rank, ranks from 1), minmax (scores scaled by
    /// their observed range), tm2c2 (scaled from the scoring function's minimum: 0 for
    /// BM25, -1 for a cosine) or zscore (mean ± 3σ) [default: the index's, chosen for its
    /// embedder]
    #[arg(long)]
    fusion: Option<String>,
    /// RRF's k [default: 60]
    #[arg(long)]
    rrf_k: Option<f32>,
    /// The vector leg's share of the fusion, 0 (BM25 alone) to 1 (vectors alone); sets
    /// both weights (not with --bm25-weight or --vector-weight)
    #[arg(long)]
    alpha: Option<f32>,
    /// Weight of the BM25 leg [default: 1]
    #[arg(long)]
    bm25_weight: Option<f32>,
    /// Weight of the vector leg [default: 1]
    #[arg(long)]
    vector_weight: Option<f32>,
    /// How many of the fused top hits the reranker re-scores; the hits ranked below follow
    /// in fused order [default: 150]
    #[arg(long)]
    rerank_depth: Option<usize>,
}

impl TuningArgs {
    /// These flags as a settings layer.
    pub fn settings(&self) -> SearchSettings {
        SearchSettings {
            context_weight: self.context_weight,
            fetch: self.fetch,
            fusion: self.fusion.clone(),
            rrf_k: self.rrf_k,
            alpha: self.alpha,
            bm25_weight: self.bm25_weight,
            vector_weight: self.vector_weight,
            rerank_depth: self.rerank_depth,
            ..SearchSettings::default()
        }
    }
}

#[derive(Args)]
struct SearchArgs {
    /// The query
    query: String,
    /// Number of hits [default: 10]
    #[arg(short, long)]
    k: Option<usize>,
    /// BM25 over the original only (plain) or context and original (contextual) [default: contextual]
    #[arg(long)]
    bm25: Option<String>,
    /// bm25, vector or hybrid [default: hybrid when the index has vectors, else bm25]
    #[arg(long)]
    mode: Option<String>,
    /// Show each hit's rank and score in every leg and the fused score
    #[arg(long)]
    explain: bool,
    /// Rerank the fused top hits: none, cross-encoder:DIR (a Hugging Face BERT or XLM-R
    /// cross-encoder; options ?max_tokens=N&batch=N&long=truncate|max), llm (the local LLM
    /// judges each hit), llm:LLM (a GGUF path or hosted LLM), cohere:MODEL, voyage:MODEL,
    /// jina:MODEL, tei:MODEL, vllm:MODEL, infinity:MODEL (with ?base_url=...) [default: none]
    #[arg(long)]
    rerank: Option<String>,
    #[command(flatten)]
    tuning: TuningArgs,
    #[command(flatten)]
    filter: FilterArgs,
    #[command(flatten)]
    node: shared::NodeArgs,
}

/// Which documents a search (or an answer) may use.
#[derive(Args)]
struct FilterArgs {
    /// Only documents of this language (repeatable)
    #[arg(long)]
    language: Vec<String>,
    /// Only this document (repeatable)
    #[arg(long)]
    document: Vec<String>,
    /// Only documents whose id (the path, for files) matches this glob (repeatable)
    #[arg(long)]
    path: Vec<String>,
    /// Only documents with this metadata, KEY=VALUE (repeatable; all must match)
    #[arg(long = "meta", value_name = "KEY=VALUE")]
    meta: Vec<String>,
    /// Only cards of this kind: text, table or image (repeatable)
    #[arg(long)]
    kind: Vec<String>,
}

impl FilterArgs {
    /// These flags as the engine's filter settings.
    fn settings(self) -> FilterSettings {
        FilterSettings {
            documents: self.document,
            paths: self.path,
            languages: self.language,
            meta: self.meta,
            kinds: self.kind,
        }
    }
}

#[derive(Args)]
struct AskArgs {
    /// The question
    question: String,
    /// retrieval (the search's best passages), full (the whole base as one cached prompt)
    /// or auto (full when the base fits --full-budget) [default: auto]
    #[arg(long)]
    mode: Option<String>,
    /// Passages given to the model in retrieval mode [default: 8]
    #[arg(long)]
    passages: Option<usize>,
    /// The model: a catalog name, a .gguf path, anthropic:MODEL, openai:MODEL, ollama:MODEL
    /// [default: the [answer] model, else the [llm] model, else qwen2.5-coder-1.5b-instruct]
    #[arg(long)]
    llm: Option<String>,
    /// Most tokens of the answer [default: 300]
    #[arg(long)]
    max_tokens: Option<usize>,
    /// Do not ask the model when the best passage scores under this (the answer is "not in
    /// the documents") [default: always ask]
    #[arg(long)]
    min_score: Option<f32>,
    /// An answer whose citations do not hold: mark, retry (once, then mark) or refuse
    /// (retry once, then withhold it) [default: mark]
    #[arg(long)]
    unsupported: Option<String>,
    /// Most tokens of the whole base for auto to choose full mode [default: 8000]
    #[arg(long)]
    full_budget: Option<usize>,
    /// The search's legs: bm25, vector or hybrid [default: hybrid when the index has vectors]
    #[arg(long)]
    search_mode: Option<String>,
    /// BM25 over the original only (plain) or context and original (contextual)
    #[arg(long)]
    bm25: Option<String>,
    /// Rerank the fused top hits (as `situate search --rerank`) [default: none]
    #[arg(long)]
    rerank: Option<String>,
    #[command(flatten)]
    tuning: TuningArgs,
    #[command(flatten)]
    filter: FilterArgs,
}

fn main() -> ExitCode {
    situate_engine::tune_malloc();
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            // lopdf and pdf-extract log what the skip reason already says (an encrypted
            // file, a font they guess at): errors only.
            tracing_subscriber::EnvFilter::try_from_env("SITUATE_LOG")
                .unwrap_or_else(|_| "warn,lopdf=error,pdf_extract=error".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(output::colour_on_stderr())
        .init();
    models::set_install_policy(cli.global.offline, cli.global.quiet || cli.global.json);
    let json = cli.global.json;
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            // A closed pipe (`situate search ... | head`) is not an error.
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            errors::report(&e, json)
        }
    }
}

/// The global flags a command's output needs.
#[derive(Clone, Copy)]
pub struct Out {
    /// Print one JSON document.
    pub json: bool,
    /// No progress display.
    pub quiet: bool,
}

fn run(cli: Cli) -> Result<ExitCode> {
    let settings = Settings::load(cli.global.settings.as_deref())?;
    let index = cli
        .global
        .index
        .clone()
        .unwrap_or_else(|| settings.index_dir());
    let out = Out {
        json: cli.global.json,
        quiet: cli.global.quiet,
    };
    match cli.command {
        Command::Init { chinese, embed } => commands::init(out, &settings, &index, chinese, embed),
        Command::Ingest(a) => commands::ingest(out, &settings, &index, a),
        Command::Worker(a) => shared::worker(out, &settings, a),
        Command::Search(a) => commands::search(out, &settings, &index, a),
        Command::Ask(a) => commands::ask(out, &settings, &index, a),
        Command::Show { chunk_id } => {
            let e = Engine::open(&index, Access::Read)?;
            let card = e.chunk(&chunk_id)?;
            let doc = e.document(&card.card.document_id)?;
            output::card(out.json, &card, &doc)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Stats { verify, quick } => commands::stats(out, &index, verify.then_some(!quick)),
        Command::Check { quick } => commands::check(out, &index, !quick),
        Command::Status { store } => {
            if let Some(url) = shared::store_of(store.as_deref(), &settings) {
                return shared::status(out, &url);
            }
            let e = Engine::open(&index, Access::Read)?;
            output::status(out.json, &e.context_report()?)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Contextualize(a) => contexts::run_contextualize(
            out, &settings, &index, &a.status, &a.context, a.batch, &a.llm,
        ),
        Command::Contexts(c) => contexts::run(c, out, &settings, &index),
        Command::Rm { document_id } => {
            let mut e = Engine::open(&index, Access::Write)?;
            let answer = e.remove_document(&document_id)?;
            output::message(out.json, &format!("removed {document_id}"), &answer)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Rebuild => commands::rebuild(out, &index),
        Command::Backup { dir } => commands::backup(out, &index, &dir),
        Command::Salvage { into } => commands::salvage(out, &index, &into),
        Command::Restore { backup, replace } => commands::restore(out, &index, &backup, replace),
        Command::Eval(a) => eval::run(a, &index, &settings, out),
        Command::Reembed {
            embedder,
            batch,
            store,
        } => commands::reembed(out, &settings, &index, embedder, batch, store),
        Command::Tune(a) => tune::run(a, &index, &settings, cli.global.settings.as_deref(), out),
        Command::EvalSet(c) => evalset::run(c, &index),
        Command::Models(c) => models::run(c, out.json),
        Command::Store(StoreCommand::Migrate { store }) => commands::migrate(out, &settings, store),
        Command::Store(StoreCommand::Check { store }) => {
            shared::check(out, &settings, &index, store)
        }
        Command::Store(StoreCommand::Reembed {
            store,
            embedder,
            batch,
            queue_only,
        }) => shared::fill(out, &settings, store, embedder, batch, queue_only),
        Command::Serve(a) => commands::serve(out, settings, index, a),
        Command::Mcp { allow_write, evals } => commands::mcp(settings, index, allow_write, evals),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_definition_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
