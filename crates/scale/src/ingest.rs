//! `situate ingest --store`: read, chunk and queue into the shared store on PostgreSQL.
//!
//! The ingest writes each document with its cards in one transaction. A card whose
//! context an LLM must write is stored `pending` and queued for the `contextualize`
//! workers, unless the shared context cache already holds it (then it is written at once:
//! a context is paid for once across the cluster). Contexts that cost nothing (`none`,
//! `structural`) are written by the ingest itself. Every card whose context is final is
//! queued for the `embed` workers. Nothing here calls an LLM.

use crate::store::PgCache;
use serde::Serialize;
use situate_core::{ChunkContext, ChunkView, ContextStatus, DocumentView};
use situate_engine::Result;
use situate_engine::node::embedding_input;
use situate_engine::node::{
    ContextCache, chunk_spans, contextualize_many, ingest_key, read_documents,
};
use situate_engine::{EngineError, IngestEvent, IngestOptions, IngestRequest, Settings};
use situate_ingest::{Chunker, Skipped};
use situate_store::NewChunk;
use std::path::PathBuf;

/// What the workers are to use, recorded in the store by the ingest so that a worker
/// started without `--context`/`--llm` writes the contexts the ingest queued.
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ContextSpec {
    /// The context method (`none`, `structural`, `llm`, `document`, `document+llm`).
    pub method: String,
    /// The LLM (`--llm`), when one was given.
    pub llm: Option<String>,
}

/// The answer to `situate ingest --store … [--workers N]`: what was queued, and what the
/// workers started beside it did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SharedIngestAnswer {
    /// What the ingest queued.
    pub report: SharedIngestReport,
    /// Each worker's report, in the order they were started.
    pub workers: Vec<crate::worker::WorkerReport>,
}

/// What `situate ingest --store` did, in its `--json` shape.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct SharedIngestReport {
    /// The server and database (`user@host:port/database`; never the password).
    pub store: String,
    /// New documents.
    pub added: u64,
    /// Documents whose content or settings changed: their cards were replaced.
    pub replaced: u64,
    /// Documents already stored as they are.
    pub unchanged: u64,
    /// Cards written.
    pub chunks: u64,
    /// Cards queued for a `contextualize` worker.
    pub queued_contexts: u64,
    /// Cards whose context the shared cache already held (no model call).
    pub contexts_cached: u64,
    /// Cards queued for an `embed` worker.
    pub queued_embeddings: u64,
    /// Inputs skipped, with reasons.
    pub skipped: Vec<SkippedInput>,
    /// The feed position past this ingest's writes: a query node that has applied it
    /// (`search --after`) sees them.
    pub position: u64,
}

/// An input that was not ingested, and why.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SkippedInput {
    /// Where it came from.
    pub source: String,
    /// Why it was skipped.
    pub reason: String,
}

/// Reads `paths`, chunks every new or changed document and writes it to the shared store
/// at `url` (see the module documentation). A document that cannot be written (a chunk
/// id another document's card has) is skipped with the reason; the rest goes on.
pub fn shared_ingest(
    url: &str,
    paths: &[PathBuf],
    mut opts: IngestOptions,
    spec: &ContextSpec,
    on_event: &mut dyn FnMut(IngestEvent<'_>),
) -> Result<SharedIngestReport> {
    let env = situate_pg::Env::from_process();
    let mut store = situate_pg::PgStore::connect(url, &env)?;
    let cache = PgCache::connect(url, &env)?;
    let chunker = Chunker::new(opts.chunker.clone())?;
    let ctx = opts.contextualizer.as_ref();
    let runtime = situate_engine::node::runtime()?;
    let mut pairs = vec![("context_method", spec.method.as_str())];
    if let Some(l) = &spec.llm {
        pairs.push(("context_llm", l.as_str()));
    }
    store.set_metas(&pairs)?;
    let mut report = SharedIngestReport {
        store: store.target().to_string(),
        ..Default::default()
    };
    let skip =
        |report: &mut SharedIngestReport, s: Skipped, on_event: &mut dyn FnMut(IngestEvent<'_>)| {
            on_event(IngestEvent::Skipped(&s));
            report.skipped.push(SkippedInput {
                source: s.source,
                reason: s.reason,
            });
        };
    let texts = std::mem::take(&mut opts.texts);
    for item in read_documents(paths, texts, &opts) {
        let mut doc = match item {
            Ok(d) => d,
            Err(s) => {
                skip(&mut report, s, on_event);
                continue;
            }
        };
        let key = ingest_key(&doc, &chunker, ctx);
        let stored = store.document_state(&doc.id)?;
        if stored.as_ref().is_some_and(|s| s.ingest_key == key) {
            report.unchanged += 1;
            on_event(IngestEvent::Document {
                id: &doc.id,
                outcome: "unchanged",
                chunks: 0,
            });
            continue;
        }
        let spans = match chunk_spans(&mut doc, &chunker) {
            Ok(s) => s,
            Err(s) => {
                skip(&mut report, s, on_event);
                continue;
            }
        };
        let (contexts, hashes) = shared_contexts(ctx, &cache, runtime, &doc, &spans, &mut report)?;
        let originals: Vec<_> = spans.iter().map(|s| s.original(&doc.text)).collect();
        let chunks = NewChunk::of_spans(&doc.id, &spans, &originals, &contexts);
        match store.put_document(&doc, &key, &chunks) {
            Ok(position) => report.position = report.position.max(position),
            Err(situate_pg::PgError::Conflict(reason)) => {
                let source = doc.source.clone();
                skip(&mut report, Skipped { source, reason }, on_event);
                continue;
            }
            Err(e) => return Err(e.into()),
        }
        let contextualize: Vec<(&str, &str)> = (chunks.iter())
            .zip(&hashes)
            .filter_map(|(c, h)| Some((c.chunk_id.as_str(), h.as_deref()?)))
            .collect();
        report.queued_contexts += store.enqueue("contextualize", &contextualize)?;
        let embed_hashes = to_embed(&chunks, &hashes);
        let embed: Vec<(&str, &str)> = embed_hashes
            .iter()
            .map(|(id, h)| (id.as_str(), h.as_str()))
            .collect();
        report.queued_embeddings += store.enqueue("embed", &embed)?;
        report.chunks += spans.len() as u64;
        let outcome = if stored.is_some() {
            report.replaced += 1;
            "replaced"
        } else {
            report.added += 1;
            "added"
        };
        on_event(IngestEvent::Document {
            id: &doc.id,
            outcome,
            chunks: spans.len(),
        });
    }
    Ok(report)
}

/// A document's contexts for the shared store, and for each the input hash it is queued
/// under (`None`: final now). Those that cost nothing are written here; an LLM's come from
/// the shared cache or are left pending for the workers.
fn shared_contexts(
    ctx: &dyn situate_core::Contextualizer,
    cache: &PgCache,
    runtime: &tokio::runtime::Runtime,
    doc: &situate_core::Document,
    spans: &[situate_core::ChunkSpan],
    report: &mut SharedIngestReport,
) -> Result<(Vec<ChunkContext>, Vec<Option<String>>)> {
    if !ctx.remembers() {
        let mut ignored = situate_engine::IngestReport::default();
        let all = contextualize_many(runtime, ctx, cache, &[(doc, spans)], &mut ignored)?;
        let contexts = all.into_iter().next().unwrap_or_default();
        let n = contexts.len();
        return Ok((contexts, vec![None; n]));
    }
    let view = DocumentView::of(doc);
    let chunks = ChunkView::all(&doc.text, spans);
    let hashes: Vec<String> = chunks.iter().map(|c| ctx.input_hash(&view, c)).collect();
    let refs: Vec<&str> = hashes.iter().map(String::as_str).collect();
    let cached = cache.cached(&refs)?;
    Ok(chunks
        .iter()
        .zip(hashes)
        .map(|(c, h)| match cached.get(&h) {
            Some(found) => {
                report.contexts_cached += 1;
                (ctx.recheck(&view, c, found.clone()), None)
            }
            None => (
                ChunkContext {
                    text: None,
                    status: ContextStatus::Pending,
                    provenance: None,
                    notes: vec!["queued for a contextualize worker".into()],
                },
                Some(h),
            ),
        })
        .unzip())
}

/// The embeddings to queue: every card whose context is final (not queued for a worker:
/// a context of no method is final too, and `pending` for want of one), by its text hash.
fn to_embed(chunks: &[NewChunk<'_>], queued: &[Option<String>]) -> Vec<(String, String)> {
    chunks
        .iter()
        .zip(queued)
        .filter(|(_, queued)| queued.is_none())
        .map(|(c, _)| {
            let context = c
                .context
                .text
                .as_deref()
                .filter(|_| c.context.status.is_indexed());
            (
                c.chunk_id.clone(),
                embedding_input(context, c.original_text).0,
            )
        })
        .collect()
}

/// `ingest --store`: `req` checked as [`situate_engine::prepare_ingest`] checks it, then read, chunked and
/// queued into the shared store at `url` ([`shared_ingest`]). The
/// index-creation settings (`--embedder`, `--vector-index`) belong to the query nodes,
/// and a dry run or a budget to the embedded ingest: given here, they are an error.
pub fn ingest_into_store(
    url: &str,
    settings: &Settings,
    req: IngestRequest,
    on_event: &mut dyn FnMut(IngestEvent<'_>),
) -> Result<SharedIngestReport> {
    if req.llm.dry_run || req.llm.budget.is_some() {
        return Err(EngineError::Invalid(
            "--dry-run and --budget apply to the embedded ingest; with --store the workers pay for the contexts (`situate status --store` shows their cost)".into(),
        ));
    }
    if req.vector_index.is_some() || req.embedder.as_deref().is_some_and(|e| e != "auto") {
        return Err(EngineError::Invalid(
            "--embedder and --vector-index are a query node's settings (`situate search|serve --store … --embedder …`) and an embed worker's (`situate worker --role embed --embedder …`), not the shared ingest's".into(),
        ));
    }
    let (mut opts, method, _) = situate_engine::node::ingest_options(settings, &req)?;
    opts.texts = req.texts;
    let spec = ContextSpec {
        method,
        llm: req.llm.llm.clone(),
    };
    shared_ingest(url, &req.paths, opts, &spec, on_event)
}
