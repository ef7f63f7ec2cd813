//! The shared store's commands: `ingest --store`, `worker`, `status --store` and the query
//! node side of `search --store` (each a thin call into the engine).

use crate::{Out, output};
use anyhow::Result;
use clap::Args;
use situate_engine::settings::Settings;
use situate_engine::{Engine, IngestEvent, IngestRequest};
use situate_scale::follow::{FollowReport, Follower};
use situate_scale::worker::{WorkerEvent, WorkerRequest, prepare_worker, run_worker};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Args)]
pub struct WorkerArgs {
    /// The shared store: postgres://USER@HOST:PORT/DATABASE [default: `[store] url`];
    /// PGHOST, PGPORT, PGUSER, PGPASSWORD and PGDATABASE fill what it leaves out
    #[arg(long)]
    store: Option<String>,
    /// What to do: contextualize (write the queued contexts), embed (embed cards whose
    /// context is final, into the store's pgvector cache) or all [default: all]
    #[arg(long)]
    role: Option<String>,
    /// Context method [default: the one the store's last ingest recorded]
    #[arg(long)]
    context: Option<String>,
    /// The LLM [default: the one the store's last ingest recorded, then `[llm] model`]
    #[arg(long)]
    llm: Option<String>,
    /// Embedder of the embed role [default: the default for the store's languages]
    #[arg(long)]
    embedder: Option<String>,
    /// Items claimed at a time [default: 8]
    #[arg(long)]
    batch: Option<usize>,
    /// Seconds a claim holds without a heartbeat (a killed worker's items are claimed
    /// again after this) [default: 60]
    #[arg(long)]
    lease: Option<f64>,
    /// Stop when no item of its roles is left open, instead of waiting for more
    #[arg(long)]
    until_idle: bool,
    /// Its name in the queue [default: HOST:PID]
    #[arg(long)]
    name: Option<String>,
}

/// The query-node flags of `search`.
#[derive(Args)]
pub struct NodeArgs {
    /// Search as a query node of this shared store: the index directory (--index) follows
    /// the store (built on first use, then kept current from its change feed) [default:
    /// `[store] url`]
    #[arg(long)]
    pub store: Option<String>,
    /// Wait until the node has applied this feed position (printed by `ingest --store`):
    /// read your writes
    #[arg(long, requires = "store")]
    after: Option<u64>,
    /// The longest to wait for --after, in seconds
    #[arg(long, default_value_t = 30.0, requires = "after")]
    wait: f64,
    /// Embedder of a node's index when it is created [default: auto]
    #[arg(long = "node-embedder", requires = "store")]
    embedder: Option<String>,
    /// The vector leg served by pgvector itself (the store's HNSW index) instead of the
    /// node's hybrid search, for comparison: nearest chunks by cosine similarity
    #[arg(long, requires = "store")]
    pub pgvector: bool,
    /// Candidates pgvector's HNSW search keeps (hnsw.ef_search; more is slower and finds more)
    #[arg(long, default_value_t = 100, requires = "pgvector")]
    ef_search: i32,
}

/// The store URL given or set, if any (`None`: the embedded index).
pub fn store_of(given: Option<&str>, settings: &Settings) -> Option<String> {
    given
        .map(str::to_string)
        .or_else(|| settings.store.url.clone())
        .filter(|u| !u.trim().is_empty())
}

/// `situate ingest --store`: read, chunk, queue; with `--workers N`, also write the queued
/// contexts with N local workers before returning.
pub fn ingest(
    out: Out,
    settings: &Settings,
    url: &str,
    req: IngestRequest,
    workers: Option<usize>,
    strict: bool,
) -> Result<ExitCode> {
    let bar = output::progress_bar(out.quiet || out.json, None, "queueing");
    let (mut docs, mut chunks) = (0u64, 0u64);
    let report = situate_scale::ingest_into_store(url, settings, req, &mut |ev| {
        if let IngestEvent::Document { chunks: c, .. } = ev {
            docs += 1;
            chunks += c as u64;
            bar.set_message(format!("{docs} documents, {chunks} chunks"));
            bar.tick();
        }
    })?;
    bar.finish_and_clear();
    let mut worked = Vec::new();
    if let Some(n) = workers {
        if n == 0 {
            anyhow::bail!("--workers must be at least 1");
        }
        let results: Vec<Result<situate_scale::worker::WorkerReport>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..n)
                .map(|i| {
                    s.spawn(move || -> Result<_> {
                        let req = WorkerRequest {
                            role: Some("contextualize".into()),
                            until_idle: true,
                            name: Some(format!(
                                "{}:{}:{i}",
                                std::env::var("HOSTNAME").unwrap_or_else(|_| "host".into()),
                                std::process::id()
                            )),
                            ..Default::default()
                        };
                        let opts = prepare_worker(url, settings, &req)?;
                        Ok(run_worker(url, opts, &mut |_| {})?)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a worker thread panicked")))
                })
                .collect()
        });
        for r in results {
            worked.push(r?);
        }
    }
    let answer = situate_scale::ingest::SharedIngestAnswer {
        report,
        workers: worked,
    };
    let (report, worked) = (&answer.report, &answer.workers);
    if out.json {
        output::print_json(&answer)?;
    } else {
        let mut o = String::new();
        o.push_str(&format!(
            "{} added, {} replaced, {} unchanged, {} skipped: {} chunks into {}\n",
            report.added,
            report.replaced,
            report.unchanged,
            report.skipped.len(),
            report.chunks,
            report.store
        ));
        o.push_str(&format!(
            "queued {} contexts for the workers ({} from the shared cache), {} embeddings; feed position {}\n",
            report.queued_contexts, report.contexts_cached, report.queued_embeddings, report.position
        ));
        for s in &report.skipped {
            o.push_str(&format!("  skipped {}: {}\n", s.source, s.reason));
        }
        for w in worked {
            o.push_str(&format!(
                "worker {}: {} contexts ({} cached, {} failed)\n",
                w.worker, w.contexts, w.contexts_cached, w.context_failures
            ));
        }
        print!("{o}");
    }
    let nothing = report.added + report.replaced + report.unchanged == 0;
    Ok(if nothing || (strict && !report.skipped.is_empty()) {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

/// `situate worker`.
pub fn worker(out: Out, settings: &Settings, a: WorkerArgs) -> Result<ExitCode> {
    let url = situate_scale::store::store_url(a.store.as_deref(), settings)?;
    let req = WorkerRequest {
        role: a.role,
        context: a.context,
        llm: a.llm,
        embedder: a.embedder,
        batch: a.batch,
        lease: a.lease,
        until_idle: a.until_idle,
        name: a.name,
    };
    // A worker stopped by a signal (or killed) keeps nothing: its leases run out and its
    // items are claimed again; what it had paid for is in the shared context cache.
    let opts = prepare_worker(&url, settings, &req)?;
    let quiet = out.quiet || out.json;
    let report = run_worker(&url, opts, &mut |ev| {
        if quiet {
            return;
        }
        if let WorkerEvent::Progress(r) = ev {
            eprintln!(
                "worker {}: {} contexts ({} cached, {} failed), {} embedded",
                r.worker, r.contexts, r.contexts_cached, r.context_failures, r.embedded
            );
        }
    })?;
    output::message(
        out.json,
        &format!(
            "worker {} stopped: {} contexts ({} cached, {} failed, {} rejected), {} embedded, {} superseded; tokens in {} out {}",
            report.worker,
            report.contexts,
            report.contexts_cached,
            report.context_failures,
            report.contexts_rejected,
            report.embedded,
            report.superseded,
            report.usage.input_tokens,
            report.usage.output_tokens
        ),
        &report,
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `situate status --store`.
pub fn status(out: Out, url: &str) -> Result<ExitCode> {
    let s = situate_scale::store::status(url)?;
    if out.json {
        output::print_json(&s)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut o = format!(
        "store {}: {} documents, {} chunks; feed position {}\n",
        s.store, s.counts.documents, s.counts.chunks, s.counts.position
    );
    let statuses: Vec<String> = s
        .counts
        .context_status
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    o.push_str(&format!("contexts: {}\n", statuses.join(", ")));
    o.push_str(&format!(
        "context cache: {} contexts, {} input and {} output tokens paid (method {}{})\n",
        s.counts.contexts_cached,
        s.counts.input_tokens,
        s.counts.output_tokens,
        s.context_method.as_deref().unwrap_or("-"),
        s.context_llm
            .as_deref()
            .map(|l| format!(", llm {l}"))
            .unwrap_or_default()
    ));
    for w in &s.counts.work {
        o.push_str(&format!(
            "{}: {} open ({} leased by {} workers), {} done, {} failed\n",
            w.role, w.queued, w.leased, w.workers, w.done, w.failed
        ));
    }
    for (model, n) in &s.counts.embeddings {
        o.push_str(&format!("embeddings: {n} of {model}\n"));
    }
    print!("{o}");
    Ok(ExitCode::SUCCESS)
}

/// `search --store … --pgvector`: the node caught up, then its query's nearest chunks from
/// pgvector.
pub fn pgvector(
    out: Out,
    settings: &Settings,
    index: &Path,
    url: &str,
    a: &NodeArgs,
    query: &str,
    k: usize,
) -> Result<ExitCode> {
    if !(1..=10_000).contains(&a.ef_search) {
        anyhow::bail!("--ef-search must be from 1 to 10000");
    }
    let (e, mut f, _) = node(settings, index, url, a)?;
    let started = std::time::Instant::now();
    let hits = f.pgvector_search(&e, query, k, a.ef_search)?;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    let answer = situate_scale::follow::PgvectorAnswer {
        query: query.to_string(),
        leg: "pgvector",
        hits,
        took_ms: ms,
    };
    let hits = &answer.hits;
    if out.json {
        output::print_json(&answer)?;
    } else {
        let mut o = String::new();
        for (i, h) in hits.iter().enumerate() {
            o.push_str(&format!(
                "{:>2}. {}  [{}]  cosine {:.3}\n",
                i + 1,
                h.chunk_id,
                h.document_id,
                h.score
            ));
        }
        o.push_str(&format!(
            "{} hits, pgvector (the store's HNSW index), {ms:.1} ms\n",
            hits.len()
        ));
        print!("{o}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Brings the query node at `index` up to the store (waiting for `--after` when given)
/// and returns it open, with its connection to the store and what the catch-up did.
pub fn node(
    settings: &Settings,
    index: &Path,
    url: &str,
    a: &NodeArgs,
) -> Result<(Engine, Follower, FollowReport)> {
    if !(a.wait.is_finite() && a.wait >= 0.0) {
        anyhow::bail!("--wait must be a number of seconds, 0 or more");
    }
    let create = settings.create_settings(None, a.embedder.as_deref(), None)?;
    // The store first: a wrong URL or a database without a store leaves no node behind.
    let mut f = Follower::connect(url)?;
    let mut e = Engine::open_or_create(index, create)?;
    let r = match a.after {
        Some(p) => f.wait_for(&mut e, p, Duration::from_secs_f64(a.wait))?,
        None => f.catch_up(&mut e)?,
    };
    Ok((e, f, r))
}

/// `situate store reembed`: the store filled with another embedder's vectors.
pub fn fill(
    out: Out,
    settings: &Settings,
    store: Option<String>,
    embedder: String,
    batch: Option<usize>,
    queue_only: bool,
) -> Result<ExitCode> {
    let req = situate_engine::ReembedRequest { embedder, batch }.check()?;
    let url = situate_scale::store::store_url(store.as_deref(), settings)?;
    let bar = output::progress_bar(out.quiet || out.json, Some(0), "embedding");
    let a = situate_scale::reembed::fill_store(&url, &req, queue_only, &mut |e| match e {
        situate_scale::reembed::FillEvent::Queueing { cards } => {
            bar.set_message(format!("{cards} cards read"))
        }
        situate_scale::reembed::FillEvent::Embedding { done, total } => {
            bar.set_length(total);
            bar.set_position(done);
        }
    })?;
    bar.finish_and_clear();
    let text = format!(
        "{}: {} of {} cards had a vector of {} already; {} queued, {} embedded by this run, {} left open ({:.1} s). Switch each query node with `situate reembed --store … --embedder {}`.",
        a.store, a.kept, a.cards, a.model, a.queued, a.embedded, a.open, a.seconds, a.embedder
    );
    output::message(out.json, &text, &a)?;
    Ok(ExitCode::SUCCESS)
}

/// `situate store check`: the node at `index` against the store, card by card.
pub fn check(
    out: Out,
    settings: &Settings,
    index: &Path,
    store: Option<String>,
) -> Result<ExitCode> {
    let url = situate_scale::store::store_url(store.as_deref(), settings)?;
    let mut f = Follower::connect(&url)?;
    if !Engine::exists(index) {
        anyhow::bail!(
            "no query node at {}: `situate search|serve --store … --index {}` builds one",
            index.display(),
            index.display()
        );
    }
    let mut e = Engine::open(index, situate_engine::Access::Write)?;
    let r = f.check(&mut e)?;
    if out.json {
        output::print_json(&r)?;
    } else {
        let mut o = format!(
            "node {} against {} at position {}: {} documents, {} cards compared\n",
            index.display(),
            r.store,
            r.position,
            r.documents,
            r.cards
        );
        for d in &r.missing {
            o.push_str(&format!("  missing on the node: {d}\n"));
        }
        for d in &r.extra {
            o.push_str(&format!("  on the node, not in the store: {d}\n"));
        }
        for c in &r.differing {
            o.push_str(&format!("  differs: {c}\n"));
        }
        if !r.indexes_consistent {
            o.push_str("  the node's indexes disagree with its cards (`situate stats` shows how; `situate rebuild` repairs)\n");
        }
        o.push_str(if r.is_consistent() {
            "consistent\n"
        } else {
            "NOT consistent\n"
        });
        print!("{o}");
    }
    Ok(if r.is_consistent() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
