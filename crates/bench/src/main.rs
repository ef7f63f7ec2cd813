//! `situate-bench`: the measurements behind BENCHMARKS.md (not tests: they time things),
//! kept out of the `situate` binary, which carries only product commands. The `bench/*.sh`
//! scripts run it.

/// `println!` that returns the write error instead of panicking.
macro_rules! outln {
    ($($t:tt)*) => {
        {
            use std::io::Write as _;
            writeln!(std::io::stdout(), $($t)*)?
        }
    };
}

mod generate;
mod llm;
mod load;
mod query;
mod rerank;
mod roofline;
mod vectors;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use situate_core::{LexicalQuery, MatchOn};
use situate_engine::{Access, Engine, Settings};
use situate_eval::{Judgments, dedup_ranked, mean, ndcg_at, recall_at};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

/// situate's benchmarks (BENCHMARKS.md).
#[derive(Parser)]
#[command(name = "situate-bench", version, about, max_term_width = 100)]
struct Cli {
    /// Index directory (for the benchmarks that run on an index)
    #[arg(long, global = true, env = "SITUATE_INDEX", default_value = ".situate")]
    index: PathBuf,
    #[command(subcommand)]
    command: BenchCommand,
}

fn main() -> ExitCode {
    situate_engine::tune_malloc();
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SITUATE_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    // Every speed figure names the instructions it ran with (BENCHMARKS.md).
    if let Err(e) = situate_core::cpu::check() {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    let here: Vec<&str> = situate_core::cpu::levels_here()
        .into_iter()
        .map(|l| l.name())
        .collect();
    eprintln!(
        "situate-bench: kernels at {} (this CPU runs {}; SITUATE_CPU forces a level)",
        situate_core::cpu::chosen(),
        here.join(", ")
    );
    let default_llm = match Settings::load(None) {
        Ok(s) => s.default_llm(),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match run(cli.command, &cli.index, &default_llm) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Subcommand)]
enum BenchCommand {
    /// The machine's peak FMA and int8 rates and memory bandwidth, by small loops, and the
    /// int8 product's achieved rates against them (SITUATE_CPU forces a lower level)
    Roofline {
        /// Seconds per peak loop (about)
        #[arg(long, default_value_t = 1.0)]
        seconds: f64,
    },
    /// BM25 queries per second and quality on a BEIR data set already ingested into --index
    Bm25 {
        /// The BEIR folder (queries.jsonl, qrels/)
        #[arg(long)]
        dataset: PathBuf,
        /// The qrels split
        #[arg(long, default_value = "test")]
        split: String,
        /// How many times the whole query set is run (the best run is reported)
        #[arg(long, default_value_t = 5)]
        repeat: usize,
        /// The smallest number of results fetched per query (at least 20, for recall@20)
        #[arg(long, default_value_t = 20)]
        k: usize,
        /// Chunks fetched per query; they are reduced to documents (a document ranks where its
        /// best chunk ranks) before the metrics, so a document cut into several chunks does
        /// not crowd others out of the top k
        #[arg(long, default_value_t = 100)]
        fetch: usize,
        /// plain or contextual BM25
        #[arg(long, default_value = "contextual")]
        bm25: String,
        /// What the qrels judge: `document` ids (BEIR corpora ingested as documents) or
        /// `chunk` ids (corpora whose entries are chunks, such as Anthropic's codebase set)
        #[arg(long, default_value = "document")]
        level: String,
        /// Weight of the context fields
        #[arg(long, default_value_t = situate_core::DEFAULT_CONTEXT_WEIGHT)]
        context_weight: f32,
    },
    /// The local LLM writing contexts for the first documents of an Anthropic-format corpus,
    /// its replies side by side and (with --compare) one at a time
    Contexts {
        /// The corpus (codebase_chunks.json: documents with their chunks)
        #[arg(long)]
        corpus: PathBuf,
        /// The GGUF model [default: the installed smollm2-135m-instruct]
        #[arg(long)]
        model: Option<PathBuf>,
        /// Documents
        #[arg(long, default_value_t = 3)]
        docs: usize,
        /// Most new tokens per context
        #[arg(long, default_value_t = 160)]
        max_tokens: usize,
        /// Replies written side by side
        #[arg(long, default_value_t = situate_llm::local::DEFAULT_BATCH)]
        batch: usize,
        /// Run again one reply at a time and check the contexts are the same
        #[arg(long)]
        compare: bool,
        /// Write the exact prompts here (JSON lines), for bench/llama_cpp_peer.py
        #[arg(long)]
        prompts_out: Option<PathBuf>,
        /// The built-in prompt: anthropic or small
        #[arg(long, default_value = "anthropic")]
        prompt: String,
        /// Print every context and why it was rejected
        #[arg(long)]
        verbose: bool,
    },
    /// Prompt-reading and generation speed of a GGUF model on situate's forward pass, one
    /// sequence and several side by side (bench/llm_speed.sh compares it with llama.cpp)
    Generate {
        /// The GGUF model
        #[arg(long)]
        model: PathBuf,
        /// Prompt tokens
        #[arg(long, default_value_t = 512)]
        prompt: usize,
        /// Tokens generated per sequence
        #[arg(long, default_value_t = 128)]
        new_tokens: usize,
        /// Sequences decoded side by side after the prompt (1: none)
        #[arg(long, default_value_t = 8)]
        batch: usize,
        /// Prompt tokens per forward pass
        #[arg(long, default_value_t = 512)]
        piece: usize,
    },
    /// Embedding throughput (passages) and latency (queries) of an embedder
    Embed {
        /// The embedder (a model name or directory)
        #[arg(long, default_value = "all-minilm-l6-v2")]
        model: String,
        /// A BEIR folder: passages from corpus.jsonl (title, blank line, text), queries from
        /// queries.jsonl
        #[arg(long)]
        dataset: PathBuf,
        /// Passages to embed
        #[arg(long, default_value_t = 512)]
        passages: usize,
        /// Queries to embed one at a time
        #[arg(long, default_value_t = 200)]
        queries: usize,
    },
    /// Vector index build time, latency and HNSW recall@20 against exact search, on
    /// synthetic clustered unit vectors
    Vectors {
        /// Vectors
        #[arg(long, default_value_t = 100_000)]
        n: usize,
        /// Dimensions
        #[arg(long, default_value_t = 384)]
        dim: usize,
        /// Queries
        #[arg(long, default_value_t = 200)]
        queries: usize,
        /// Hits per query (the fusion's per-leg fetch)
        #[arg(long, default_value_t = 150)]
        limit: usize,
        /// HNSW search effort(s) to measure (ef; comma-separated), one graph for all
        #[arg(long, value_delimiter = ',', default_value = "400")]
        ef: Vec<usize>,
    },
    /// Hybrid query latency (p50/p99, no reranking) and peak memory on an index already
    /// built (see bench/hybrid.sh for the synthetic corpus)
    Hybrid {
        /// Queries, one per line
        #[arg(long)]
        queries: PathBuf,
        /// Runs over the query set (the first warms up and is not counted)
        #[arg(long, default_value_t = 3)]
        repeat: usize,
    },
    /// The search every front end makes (request check, engine query, the answer as JSON),
    /// one query at a time on an index already built: p50/p99 and queries/s (the Rust side
    /// of bench/python.sh)
    Query {
        /// Queries, one per line (or a question file)
        #[arg(long)]
        queries: PathBuf,
        /// Hits per query
        #[arg(long, default_value_t = 20)]
        k: usize,
        /// bm25, vector or hybrid [the index's default]
        #[arg(long)]
        mode: Option<String>,
        /// Runs over the query set (the first warms up and is not counted)
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        /// Then the queries from this many threads at once, an engine each
        #[arg(long, default_value_t = 1)]
        threads: usize,
    },
    /// A reranker's latency per query on an index already built (--index): the top --depth
    /// hits of each query re-scored (bench/rerank.sh)
    Rerank {
        /// The reranker (cross-encoder:DIR, llm, llm:LLM, tei:MODEL, ...)
        #[arg(long)]
        reranker: String,
        /// Queries: a BEIR queries.jsonl or one per line
        #[arg(long)]
        queries: PathBuf,
        /// Queries timed (after one warm-up query)
        #[arg(long, default_value_t = 20)]
        n: usize,
        /// Hits re-scored per query
        #[arg(long, default_value_t = situate_search::rerank::DEFAULT_DEPTH)]
        depth: usize,
        /// Write each query's passages (as the reranker read them) and scores here (JSONL)
        #[arg(long)]
        pairs: Option<PathBuf>,
    },
    /// Many searches at once against a running `situate serve`: requests/s, errors and
    /// latency percentiles, over the JSON API or over MCP (bench/serve_load.sh)
    Load {
        /// The service, http://HOST:PORT; several, comma-separated, share the load (each
        /// client keeps to one)
        #[arg(long)]
        url: String,
        /// Queries: a BEIR queries.jsonl or one per line (cycled)
        #[arg(long)]
        queries: PathBuf,
        /// Requests in all
        #[arg(long, default_value_t = 10_000)]
        requests: usize,
        /// Requests in flight at once
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        /// Hits per search
        #[arg(long, default_value_t = 10)]
        k: usize,
        /// Call the MCP `search` tool on /mcp (one session per worker) instead of
        /// POST /v1/search
        #[arg(long)]
        mcp: bool,
    },
    /// The vector leg served by pgvector (the store's HNSW index) against a query node's own
    /// vector leg (--index, a node of --store): per query, the time of each and the share of
    /// the node's top k that pgvector finds, at each ef_search
    Pgvector {
        /// The shared store
        #[arg(long)]
        store: String,
        /// Queries: a BEIR queries.jsonl or one per line
        #[arg(long)]
        queries: PathBuf,
        /// Hits compared
        #[arg(long, default_value_t = 10)]
        k: usize,
        /// hnsw.ef_search values, comma-separated
        #[arg(long, default_value = "40,100")]
        ef_search: String,
        /// At most this many queries
        #[arg(long, default_value_t = 300)]
        limit: usize,
    },
    /// A stand-in for a hosted LLM: an Anthropic-style server on loopback that answers every
    /// request with a fixed context after a fixed latency; prints its URL, then the number
    /// of requests it has answered every second, until killed
    FakeLlm {
        /// Milliseconds before each answer
        #[arg(long, default_value_t = 100)]
        latency_ms: u64,
    },
    /// Writes a synthetic corpus of N chunk-sized documents (Zipf-distributed words) as a
    /// BEIR corpus.jsonl, and queries drawn from it
    Synth {
        /// Documents
        #[arg(long)]
        n: usize,
        /// Output folder
        #[arg(long)]
        out: PathBuf,
    },
}

// Long: one arm per benchmark, each a call into its module.
fn run(cmd: BenchCommand, index: &Path, default_llm: &str) -> Result<ExitCode> {
    match cmd {
        BenchCommand::Rerank {
            reranker,
            queries,
            n,
            depth,
            pairs,
        } => {
            crate::rerank::run(
                index,
                &reranker,
                default_llm,
                &queries,
                n,
                depth,
                pairs.as_deref(),
            )?;
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Bm25 {
            dataset,
            split,
            repeat,
            k,
            fetch,
            bm25,
            level,
            context_weight,
        } => {
            let by_chunk = match level.as_str() {
                "document" => false,
                "chunk" => true,
                _ => bail!("--level is document or chunk"),
            };
            bm25_bench(
                index,
                &dataset,
                &split,
                repeat,
                k.max(20),
                fetch.max(k).max(20),
                &bm25,
                by_chunk,
                context_weight,
            )
        }
        BenchCommand::Embed {
            model,
            dataset,
            passages,
            queries,
        } => crate::vectors::embed(&model, &dataset, passages, queries),
        BenchCommand::Vectors {
            n,
            dim,
            queries,
            limit,
            ef,
        } => crate::vectors::vectors(n, dim, queries, limit, &ef),
        BenchCommand::Hybrid { queries, repeat } => crate::vectors::hybrid(index, &queries, repeat),
        BenchCommand::Query {
            queries,
            k,
            mode,
            repeat,
            threads,
        } => crate::query::query(index, &queries, k, mode.as_deref(), repeat, threads),
        BenchCommand::Synth { n, out } => crate::vectors::synth(n, &out),
        BenchCommand::Load {
            url,
            queries,
            requests,
            concurrency,
            k,
            mcp,
        } => {
            let qs = crate::load::read_queries(&queries)?;
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            // The TLS provider reqwest's client needs, though every request is plain http.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let report = rt.block_on(crate::load::run(&url, qs, requests, concurrency, k, mcp))?;
            report.print(if mcp {
                "MCP tools/call search"
            } else {
                "POST /v1/search"
            });
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Pgvector {
            store,
            queries,
            k,
            ef_search,
            limit,
        } => {
            let qs: Vec<String> = crate::load::read_queries(&queries)?
                .into_iter()
                .take(limit)
                .collect();
            let mut engine = Engine::open(index, Access::Write)?;
            let mut follower = situate_scale::follow::Follower::connect(&store)?;
            follower.catch_up(&mut engine)?;
            let plan = situate_engine::SearchSettings {
                mode: Some("vector".into()),
                k: Some(k),
                ..Default::default()
            }
            .over(&Default::default())
            .plan(default_llm)?;
            let filter = situate_core::DocumentFilter::default();
            let pct = |v: &mut Vec<f64>, p: f64| {
                v.sort_by(f64::total_cmp);
                v[((p / 100.0) * (v.len() - 1) as f64).round() as usize]
            };
            // Warm both (the model, the connection, the index pages).
            engine.query(&qs[0], &plan, &filter)?;
            let mut node_ms = Vec::new();
            let mut truth = Vec::new();
            for q in &qs {
                let t = Instant::now();
                let r = engine.query(q, &plan, &filter)?;
                node_ms.push(t.elapsed().as_secs_f64() * 1000.0);
                truth.push(
                    r.hits
                        .iter()
                        .map(|h| h.chunk_id.clone())
                        .collect::<Vec<_>>(),
                );
            }
            println!(
                "node's own vector leg ({} queries, query embedding included): p50 {:.1} ms, p99 {:.1} ms",
                qs.len(),
                pct(&mut node_ms.clone(), 50.0),
                pct(&mut node_ms, 99.0)
            );
            for ef in ef_search.split(',') {
                let ef: i32 = ef.trim().parse()?;
                follower.pgvector_search(&engine, &qs[0], k, ef)?;
                let (mut ms, mut found) = (Vec::new(), 0usize);
                let mut total = 0usize;
                for (q, want) in qs.iter().zip(&truth) {
                    let t = Instant::now();
                    let hits = follower.pgvector_search(&engine, q, k, ef)?;
                    ms.push(t.elapsed().as_secs_f64() * 1000.0);
                    found += want
                        .iter()
                        .filter(|id| hits.iter().any(|h| &h.chunk_id == *id))
                        .count();
                    total += want.len();
                }
                println!(
                    "pgvector HNSW, ef_search {ef}: p50 {:.1} ms, p99 {:.1} ms (query embedding and the node's card map included); {:.3} of the node's top {k} found",
                    pct(&mut ms.clone(), 50.0),
                    pct(&mut ms, 99.0),
                    found as f64 / total.max(1) as f64
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::FakeLlm { latency_ms } => {
            use situate_http::fake::{FakeServer, Reply};
            let server = FakeServer::start(move |_, _| {
                Reply::json(serde_json::json!({
                    "content": [{"type": "text", "text": "This passage belongs to the study the document reports."}],
                    "stop_reason": "end_turn",
                    "usage": {"input_tokens": 400, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 12}
                }))
                .delay(std::time::Duration::from_millis(latency_ms))
            })?;
            println!("{}", server.url());
            loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
                println!("requests {}", server.calls());
            }
        }
        BenchCommand::Roofline { seconds } => crate::roofline::roofline(seconds),
        BenchCommand::Generate {
            model,
            prompt,
            new_tokens,
            batch,
            piece,
        } => crate::generate::generate(&model, prompt, new_tokens, batch, piece),
        BenchCommand::Contexts {
            corpus,
            model,
            docs,
            max_tokens,
            batch,
            compare,
            prompts_out,
            prompt,
            verbose,
        } => {
            let model = model.unwrap_or_else(|| {
                situate_models::models_dir()
                    .join("smollm2-135m-instruct")
                    .join("SmolLM2-135M-Instruct.Q4_1.gguf")
            });
            crate::llm::contexts(
                &model,
                &corpus,
                docs,
                max_tokens,
                batch,
                compare,
                prompts_out.as_deref(),
                &prompt,
                verbose,
            )
        }
    }
}

// Long: one benchmark's setup, timed runs and report, as the others in this file.
#[allow(clippy::too_many_arguments)]
fn bm25_bench(
    index: &Path,
    dataset: &Path,
    split: &str,
    repeat: usize,
    k: usize,
    fetch: usize,
    bm25: &str,
    by_chunk: bool,
    context_weight: f32,
) -> Result<ExitCode> {
    let engine = Engine::open(index, Access::Read)?;
    let match_on: MatchOn = situate_engine::parse_match_on(bm25)?;
    let qrels =
        situate_eval::beir::read_qrels(&dataset.join("qrels").join(format!("{split}.tsv")))?;
    let queries = situate_eval::beir::read_queries(&dataset.join("queries.jsonl"))?;
    let mut ids: Vec<&String> = qrels.keys().collect();
    ids.sort();
    let texts: Vec<(&str, &str)> = ids
        .iter()
        .map(|id| {
            queries
                .get(*id)
                .map(|t| (id.as_str(), t.as_str()))
                .with_context(|| format!("query {id} has no text"))
        })
        .collect::<Result<_>>()?;
    if texts.is_empty() || repeat == 0 || k == 0 {
        bail!("nothing to run");
    }
    let langs = engine.languages().to_vec();
    let lexical = engine.lexical();
    let run_once = || -> Result<Vec<Vec<u64>>> {
        texts
            .iter()
            .map(|(_, t)| {
                let q = LexicalQuery {
                    filter: None,
                    text: t,
                    limit: fetch,
                    match_on,
                    context_weight,
                    languages: &langs,
                };
                Ok(lexical
                    .search(&q)
                    .map_err(|e| anyhow::anyhow!(e))?
                    .into_iter()
                    .map(|h| h.card)
                    .collect())
            })
            .collect()
    };
    run_once()?; // warm the page cache
    let mut best = f64::INFINITY;
    let mut results = Vec::new();
    for _ in 0..repeat {
        let t = Instant::now();
        results = run_once()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    // Quality: card → document id (judgments are per document; a document's best chunk counts).
    let mut doc_of: HashMap<u64, String> = HashMap::new();
    let mut ndcg = Vec::new();
    let mut recall10 = Vec::new();
    let mut recall20 = Vec::new();
    for ((qid, _), cards) in texts.iter().zip(&results) {
        let missing: Vec<u64> = cards
            .iter()
            .copied()
            .filter(|c| !doc_of.contains_key(c))
            .collect();
        for rec in engine.cards(&missing)? {
            let id = if by_chunk {
                rec.card.chunk_id
            } else {
                rec.card.document_id
            };
            doc_of.insert(rec.card.card, id);
        }
        let docs = dedup_ranked(cards.iter().filter_map(|c| doc_of.get(c).cloned()));
        let rel: &Judgments = &qrels[*qid];
        ndcg.push(ndcg_at(&docs, rel, 10));
        recall10.push(recall_at(&docs, rel, 10));
        recall20.push(recall_at(&docs, rel, 20));
    }
    let qps = texts.len() as f64 / best;
    let out = serde_json::json!({
        "queries": texts.len(),
        "k": k,
        "chunks_fetched": fetch,
        "bm25": bm25,
        "context_weight": context_weight,
        "judged": if by_chunk { "chunk" } else { "document" },
        "best_seconds": best,
        "queries_per_second": qps,
        "ndcg_at_10": mean(&ndcg),
        "recall_at_10": mean(&recall10),
        "recall_at_20": mean(&recall20),
        "threads": 1,
    });
    outln!("{}", serde_json::to_string_pretty(&out)?);
    Ok(ExitCode::SUCCESS)
}
