//! `situate`: the command line. Glue only: parsing, settings, progress and output; the work
//! happens in `situate-engine`.

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

mod bench;
mod bench_llm;
mod bench_rerank;
mod bench_vec;
mod config;
mod contexts;
mod eval;
mod evalset;
mod models;
mod output;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use config::Settings;
use situate_core::{Language, MatchOn};
use situate_engine::{Access, CreateSettings, Engine, IngestEvent, IngestOptions};
use situate_ingest::SourceFormat;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

/// Contextual Retrieval: index documents with situating contexts, search them with BM25.
#[derive(Parser)]
#[command(name = "situate", version, about, max_term_width = 100)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
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
    /// Show one chunk card: context, original and provenance
    Show {
        /// The chunk id (as printed by search)
        chunk_id: String,
    },
    /// Counts, languages, context statuses, and whether the BM25 index agrees with the store
    Stats,
    /// Context statuses, and the chunks whose context failed or was rejected, with reasons
    Status,
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
    /// Evaluate retrieval on a data set: Pass@k, recall, MRR, nDCG, MAP per configuration
    Eval(eval::EvalArgs),
    /// Build and check a team's own evaluation set against this index
    #[command(subcommand, name = "eval-set")]
    EvalSet(evalset::EvalSetCommand),
    /// Install and list local models (embedders)
    #[command(subcommand)]
    Models(models::ModelsCommand),
    /// Benchmarks (see BENCHMARKS.md)
    #[command(subcommand, hide = true)]
    Bench(bench::BenchCommand),
}

#[derive(Args)]
struct EmbedArgs {
    /// Embedder, fixed when the index is created: auto (all-minilm-l6-v2 for English
    /// corpora, multilingual-e5-small otherwise), none (BM25 only), a model name, a
    /// Hugging Face model directory, or a hosted model: openai:MODEL, ollama:MODEL,
    /// voyage:MODEL, gemini:MODEL, with options after `?` (base_url, key_env, dimensions,
    /// batch, concurrency, retries, timeout) [default: auto]
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
    /// Context method: none or structural [default: structural]
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
    /// Weight of the context relative to the original [default: 0.5]
    #[arg(long)]
    context_weight: Option<f32>,
    /// Only documents of this language (repeatable)
    #[arg(long)]
    language: Vec<String>,
    /// bm25, vector or hybrid [default: hybrid when the index has vectors, else bm25]
    #[arg(long)]
    mode: Option<String>,
    /// Show each hit's rank and score in every leg and the fused score
    #[arg(long)]
    explain: bool,
    /// Hits each leg contributes to the fusion [default: 150]
    #[arg(long)]
    fetch: Option<usize>,
    /// Fusion: rrf (weighted reciprocal rank, ranks from 1) or minmax (weighted sum of
    /// min-max normalised scores) [default: rrf]
    #[arg(long)]
    fusion: Option<String>,
    /// RRF's k [default: 60]
    #[arg(long)]
    rrf_k: Option<f32>,
    /// Weight of the BM25 leg [default: 1]
    #[arg(long)]
    bm25_weight: Option<f32>,
    /// Weight of the vector leg [default: 1]
    #[arg(long)]
    vector_weight: Option<f32>,
    /// Rerank the fused top hits: none, cross-encoder:DIR (a Hugging Face BERT or XLM-R
    /// cross-encoder; options ?max_tokens=N&batch=N&long=truncate|max), llm (the local LLM
    /// judges each hit), llm:LLM (a GGUF path or hosted LLM), cohere:MODEL, voyage:MODEL,
    /// jina:MODEL, tei:MODEL, vllm:MODEL, infinity:MODEL (with ?base_url=...) [default: none]
    #[arg(long)]
    rerank: Option<String>,
    /// How many fused hits the reranker re-scores (at least -k) [default: 150]
    #[arg(long)]
    rerank_depth: Option<usize>,
    /// Only this document (repeatable)
    #[arg(long)]
    document: Vec<String>,
    /// Only documents whose id (the path, for files) matches this glob (repeatable)
    #[arg(long)]
    path: Vec<String>,
    /// Only documents with this metadata, KEY=VALUE (repeatable; all must match)
    #[arg(long = "meta", value_name = "KEY=VALUE")]
    meta: Vec<String>,
}

/// Parses repeated KEY=VALUE arguments.
fn key_values(flag: &str, items: &[String]) -> Result<Vec<(String, String)>> {
    items
        .iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
            _ => bail!("{flag} {kv:?}: expected KEY=VALUE"),
        })
        .collect()
}

fn create_settings(
    settings: &Settings,
    chinese: Option<String>,
    embed: &EmbedArgs,
) -> Result<CreateSettings> {
    let chinese = chinese
        .or(settings.bm25.chinese.clone())
        .unwrap_or_else(|| "bigram".into());
    let embedder = embed
        .embedder
        .clone()
        .or(settings.embed.embedder.clone())
        .unwrap_or_else(|| "auto".into());
    let vector_index = embed
        .vector_index
        .clone()
        .or(settings.embed.vector_index.clone())
        .unwrap_or_else(|| "auto".into());
    Ok(CreateSettings {
        chinese: chinese.parse().map_err(anyhow::Error::msg)?,
        embedder,
        vector_index: vector_index.parse().map_err(anyhow::Error::msg)?,
    })
}

/// Keeps freed memory in the process for reuse. By default glibc serves every large block
/// (a model's activations: tens of megabytes) with a fresh `mmap` and returns it on free, so
/// each tensor of a forward pass costs zeroed pages from the kernel: about a quarter of
/// MiniLM's embedding time went to page faults (perf, BENCHMARKS.md). With large blocks kept
/// on the heap MiniLM embeds about 1.3x faster. Set from the binary, not the library: the
/// allocator is the program's choice.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn tune_malloc() {
    // SAFETY: mallopt only sets allocator parameters; called first thing, before any thread.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn tune_malloc() {}

fn main() -> ExitCode {
    tune_malloc();
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SITUATE_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
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
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    let settings = Settings::load(cli.global.settings.as_deref())?;
    let index = cli
        .global
        .index
        .clone()
        .unwrap_or_else(|| settings.index_dir());
    let g = &cli.global;
    match cli.command {
        Command::Init { chinese, embed } => {
            let create = create_settings(&settings, chinese, &embed)?;
            let embedder = create.embedder.clone();
            let e = Engine::create(&index, create)?;
            output::message(
                g.json,
                &format!(
                    "created an index at {} (embedder: {embedder})",
                    e.dir().display()
                ),
                &serde_json::json!({
                    "index": e.dir(), "chinese_tokenizer": e.chinese_tokenizer().as_str(),
                    "embedder": embedder,
                }),
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Ingest(a) => ingest(g, &settings, &index, a),
        Command::Search(a) => {
            let e = Engine::open(&index, Access::Read)?;
            let match_on = match a.bm25.or(settings.search.bm25.clone()) {
                Some(m) => situate_engine::parse_match_on(&m)?,
                None => MatchOn::Contextual,
            };
            let languages = a
                .language
                .iter()
                .map(|l| l.parse::<Language>().map_err(anyhow::Error::msg))
                .collect::<Result<Vec<_>>>()?;
            let k = a.k.or(settings.search.k).unwrap_or(10);
            if k == 0 {
                bail!("-k must be at least 1");
            }
            let context_weight = a
                .context_weight
                .or(settings.search.context_weight)
                .unwrap_or(situate_core::DEFAULT_CONTEXT_WEIGHT);
            if !(context_weight.is_finite() && context_weight >= 0.0) {
                bail!("--context-weight must be a number >= 0");
            }
            let mut req = situate_search::SearchRequest::new(&a.query, k);
            req.match_on = match_on;
            req.context_weight = context_weight;
            req.languages = &languages;
            req.mode = match a.mode.or(settings.search.mode.clone()) {
                Some(m) => Some(m.parse().map_err(anyhow::Error::msg)?),
                None => None,
            };
            req.fetch = a.fetch.or(settings.search.fetch).unwrap_or(req.fetch);
            if req.fetch == 0 {
                bail!("--fetch must be at least 1");
            }
            let rrf_k = a.rrf_k.or(settings.search.rrf_k).unwrap_or(60.0);
            if !(rrf_k.is_finite() && rrf_k >= 0.0) {
                bail!("--rrf-k must be a number >= 0");
            }
            req.fusion = match a.fusion.or(settings.search.fusion.clone()).as_deref() {
                None | Some("rrf") => situate_search::fusion::Fusion::Rrf { k: rrf_k },
                Some("minmax") => situate_search::fusion::Fusion::MinMax,
                Some(f) => bail!("unknown fusion {f:?}: expected rrf or minmax"),
            };
            req.bm25_weight = a.bm25_weight.or(settings.search.bm25_weight).unwrap_or(1.0);
            req.vector_weight = a
                .vector_weight
                .or(settings.search.vector_weight)
                .unwrap_or(1.0);
            for (flag, w) in [
                ("--bm25-weight", req.bm25_weight),
                ("--vector-weight", req.vector_weight),
            ] {
                if !(w.is_finite() && w >= 0.0) {
                    bail!("{flag} must be a number >= 0");
                }
            }
            let filter = situate_core::DocumentFilter {
                document_ids: a.document.clone(),
                path_globs: a.path.clone(),
                languages: languages.clone(),
                metadata: key_values("--meta", &a.meta)?,
            };
            let mode = e.mode_for(req.mode)?;
            let rerank_spec = a
                .rerank
                .clone()
                .or(settings.search.rerank.clone())
                .unwrap_or_else(|| "none".into());
            let depth = a
                .rerank_depth
                .or(settings.search.rerank_depth)
                .unwrap_or(situate_search::rerank::DEFAULT_DEPTH);
            if depth == 0 {
                bail!("--rerank-depth must be at least 1");
            }
            let reranker = situate_rerank::resolve(&rerank_spec, &settings.default_llm())?;
            let started = Instant::now();
            let hits = e.search_reranked(
                &req,
                &filter,
                reranker
                    .as_deref()
                    .map(|r| situate_engine::Rerank { reranker: r, depth }),
            )?;
            let shown = output::SearchShown {
                query: &a.query,
                match_on,
                mode,
                explain: a.explain,
                reranker: reranker.as_deref().map(|r| r.id()),
            };
            output::hits(g.json, &shown, &hits, started.elapsed())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Show { chunk_id } => {
            let e = Engine::open(&index, Access::Read)?;
            let card = e.chunk(&chunk_id)?;
            let doc = e.document(&card.card.document_id)?;
            output::card(g.json, &card, &doc)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Stats => {
            let e = Engine::open(&index, Access::Read)?;
            let stats = e.stats()?;
            let check = e.check()?;
            output::stats(g.json, e.dir(), &stats, &check)?;
            Ok(if check.is_consistent() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Status => {
            let e = Engine::open(&index, Access::Read)?;
            let stats = e.stats()?;
            let mut listed = Vec::new();
            e.store().for_each_card_with_status(
                &[
                    situate_core::ContextStatus::Failed,
                    situate_core::ContextStatus::Rejected,
                ],
                &mut |rec| {
                    listed.push(rec.card);
                    Ok(())
                },
            )?;
            if g.json {
                output::print_json(&serde_json::json!({
                    "context_status": stats.store.context_status,
                    "context_methods": stats.store.context_methods,
                    "failed_or_rejected": listed,
                }))?;
            } else {
                for (status, n) in &stats.store.context_status {
                    outln!("{status:<10} {n}");
                }
                for c in listed.iter().take(50) {
                    outln!(
                        "  {} {}: {}",
                        c.context_status,
                        c.chunk_id,
                        c.context_notes.join("; ")
                    );
                }
                if listed.len() > 50 {
                    outln!("  ... {} more: `situate contexts list`", listed.len() - 50);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Contextualize(a) => contexts::run_contextualize(
            (g.json, g.quiet),
            &settings,
            &index,
            &a.status,
            a.batch,
            &a.llm,
        ),
        Command::Contexts(c) => contexts::run(c, (g.json, g.quiet), &settings, &index),
        Command::Rm { document_id } => {
            let mut e = Engine::open(&index, Access::Write)?;
            e.remove(&document_id)?;
            output::message(
                g.json,
                &format!("removed {document_id}"),
                &serde_json::json!({"removed": document_id}),
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Rebuild => {
            let mut e = Engine::open(&index, Access::Write)?;
            let total = e.store().stats()?.chunks;
            let bar = output::progress_bar(g.quiet || g.json, Some(total), "indexing cards");
            let started = Instant::now();
            let r = e.rebuild(&mut |done, _| bar.set_position(done))?;
            bar.finish_and_clear();
            let secs = started.elapsed().as_secs_f64();
            output::message(
                g.json,
                &format!(
                    "rebuilt the indexes from {} chunk cards in {secs:.1} s: no LLM calls, {} vectors ({} texts embedded that were not cached)",
                    r.chunks, r.vectors, r.embedded
                ),
                &serde_json::json!({"chunks": r.chunks, "vectors": r.vectors, "embedded": r.embedded, "seconds": secs}),
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Eval(a) => eval::run(a, &index, &settings.default_llm(), g.json, g.quiet),
        Command::EvalSet(c) => evalset::run(c, &index),
        Command::Models(c) => models::run(c, g.json),
        Command::Bench(b) => bench::run(b, &index, &settings.default_llm()),
    }
}

fn ingest(
    g: &Global,
    settings: &Settings,
    index: &std::path::Path,
    a: IngestArgs,
) -> Result<ExitCode> {
    let method = a
        .context
        .or(settings.ingest.context.clone())
        .unwrap_or_else(|| "structural".into());
    let built = contexts::build(&method, settings, &a.llm)?;
    let price = built.price;
    let mut opts = IngestOptions::new(built.contextualizer);
    opts.dry_run = a.llm.dry_run;
    opts.sources.format = a
        .format
        .parse::<SourceFormat>()
        .map_err(anyhow::Error::msg)?;
    opts.sources.language = match a.language.or(settings.ingest.language.clone()) {
        Some(l) => Some(l.parse().map_err(anyhow::Error::msg)?),
        None => None,
    };
    if let Some(l) = &settings.ingest.default_language {
        opts.sources.default_language = l.parse().map_err(anyhow::Error::msg)?;
    }
    opts.chunker.max_tokens = a
        .max_tokens
        .or(settings.chunk.max_tokens)
        .unwrap_or(opts.chunker.max_tokens);
    opts.chunker.overlap_tokens = a
        .overlap
        .or(settings.chunk.overlap_tokens)
        .unwrap_or(opts.chunker.overlap_tokens);
    opts.chunker.tokenizer = a.tokenizer.or(settings.chunk.tokenizer.clone());
    if a.batch == Some(0) {
        bail!("--batch must be at least 1");
    }
    // An LLM takes seconds per chunk: commit every few documents so that what is done is
    // searchable early (contexts are kept as they finish in any case).
    opts.batch_documents = match a.batch {
        None if method == "llm" => 8,
        None => 256,
        Some(b) => b,
    };
    opts.metadata = key_values("--meta", &a.meta)?;
    if let Some((k, _)) = opts
        .metadata
        .iter()
        .find(|(k, _)| !k.chars().all(|c| c.is_alphanumeric() || "_-.".contains(c)))
    {
        bail!("--meta key {k:?}: use letters, digits, '_', '-' and '.' only");
    }

    let mut created = !Engine::exists(index);
    let create = create_settings(settings, None, &a.embed)?;
    // A dry run on an index not yet made works on a scratch one: it writes nothing here.
    let scratch = if opts.dry_run && created {
        created = false;
        Some(tempfile::tempdir().context("making a scratch index for the dry run")?)
    } else {
        None
    };
    let target = scratch
        .as_ref()
        .map(|d| d.path().join("index"))
        .unwrap_or_else(|| index.to_path_buf());
    let mut e = Engine::open_or_create(&target, create)
        .with_context(|| format!("opening the index at {}", index.display()))?;
    if !created {
        // Creation settings may be repeated (re-running a command), not changed.
        let (embedder, backend) = e.embed_creation_settings()?;
        for (flag, given, stored) in [
            ("--embedder", &a.embed.embedder, &embedder),
            ("--vector-index", &a.embed.vector_index, &backend),
        ] {
            if let Some(g) = given
                && g != stored
                && g != "auto"
            {
                bail!(
                    "{flag} {g} differs from the index's {stored}: it applies when an index is created, and {} already exists (ingest into a new --index, or drop the flag)",
                    index.display()
                );
            }
        }
    }
    let bar = output::progress_bar(g.quiet || g.json, None, "ingesting");
    let (mut docs, mut chunks, mut skipped) = (0u64, 0u64, 0u64);
    let started = Instant::now();
    let report = e.ingest(&a.paths, opts, &mut |ev| {
        match ev {
            IngestEvent::Document { chunks: c, .. } => {
                docs += 1;
                chunks += c as u64;
            }
            IngestEvent::Skipped(_) => skipped += 1,
            IngestEvent::Committed { .. } => {}
            IngestEvent::Contextualized {
                chunks: done,
                usage,
                cached,
            } => {
                if method == "llm" {
                    bar.set_message(format!(
                        "{docs} documents; {}",
                        contexts::progress_message(done, None, &usage, cached, price, started)
                    ));
                    bar.tick();
                }
                return;
            }
            IngestEvent::Embedding { done, total } => {
                bar.set_message(format!(
                    "{docs} documents, {chunks} chunks, {skipped} skipped; embedding {done}/{total}"
                ));
                bar.tick();
                return;
            }
        }
        bar.set_message(format!(
            "{docs} documents, {chunks} chunks, {skipped} skipped"
        ));
        bar.tick();
    })?;
    bar.finish_and_clear();
    let elapsed = started.elapsed();
    if a.llm.dry_run {
        let docs = report.added + report.replaced;
        let per_million = price
            .filter(|_| report.document_tokens > 0)
            .map(|p| p.dollars(&report.usage) * 1e6 / report.document_tokens as f64);
        if g.json {
            output::print_json(&serde_json::json!({
                "dry_run": true,
                "documents": docs,
                "unchanged": report.unchanged,
                "chunks": report.chunks,
                "contexts_cached": report.contexts_cached,
                "document_tokens": report.document_tokens,
                "estimated_usage": report.usage,
                "estimated_dollars": price.map(|p| p.dollars(&report.usage)),
                "dollars_per_million_document_tokens": per_million,
            }))?;
        } else {
            outln!(
                "dry run: {docs} documents to contextualize ({} unchanged), {} chunks ({} contexts already in the cache), {} document tokens; nothing was called or written",
                report.unchanged,
                report.chunks,
                report.contexts_cached,
                report.document_tokens
            );
            outln!("{}", contexts::cost_line(&report.usage, price, docs, true));
            if let Some(m) = per_million {
                outln!("${m:.2} per million document tokens");
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    output::ingest_report(g.json, e.dir(), created, &method, &report, elapsed)?;
    if method == "llm" && !g.json {
        let docs = report.added + report.replaced;
        outln!("{}", contexts::cost_line(&report.usage, price, docs, false));
        if let Some(p) = price.filter(|_| report.document_tokens > 0) {
            outln!(
                "${:.2} per million document tokens",
                p.dollars(&report.usage) * 1e6 / report.document_tokens as f64
            );
        }
        if report.contexts_deferred > 0 {
            outln!(
                "{} chunks were left without a context (budget reached); `situate contextualize` goes on",
                report.contexts_deferred
            );
        }
    }
    let nothing = report.documents_ok() == 0;
    Ok(if nothing || (a.strict && !report.skipped.is_empty()) {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

/// Whether progress bars can be drawn (stderr is a terminal).
fn interactive() -> bool {
    std::io::stderr().is_terminal()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_definition_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
