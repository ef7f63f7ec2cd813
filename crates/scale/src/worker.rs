//! `situate worker --store`: one of any number of processes, on any number of machines,
//! that write the contexts and embeddings the shared store has queued.
//!
//! A worker claims a few items at a time under a lease (`FOR UPDATE SKIP LOCKED`: each
//! item goes to one worker) and a heartbeat thread renews the lease while it works. A
//! worker killed at any moment stops renewing; its lease runs out and another worker
//! claims the items again. Contexts go to the shared context cache, keyed by input hash
//! (`ON CONFLICT DO NOTHING`), the moment the model returns them, so an item claimed again
//! after a kill is read from the cache, not paid for twice; then the card, its change, the
//! embedding it needs and the item's end are written in one transaction.

use crate::store::PgCache;
use serde::Serialize;
use situate_core::{ChunkView, Contextualizer, Document, DocumentView, Embedder, TokenUsage};
use situate_engine::IngestReport;
use situate_engine::node::contextualize_many;
use situate_engine::node::embedding_input;
use situate_engine::node::spans_of;
use situate_engine::{EngineError, Result};
use situate_pg::{Claimed, Env, PgStore};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What a worker does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerRole {
    /// Write the queued contexts (calls the LLM).
    Contextualize,
    /// Embed the cards whose context is final.
    Embed,
    /// Both, contexts first.
    All,
}

impl WorkerRole {
    /// Parses `contextualize`, `embed` or `all`.
    pub fn parse(s: &str) -> Result<WorkerRole> {
        match s {
            "contextualize" => Ok(WorkerRole::Contextualize),
            "embed" => Ok(WorkerRole::Embed),
            "all" => Ok(WorkerRole::All),
            other => Err(EngineError::field_error(
                "role",
                format!("{other:?}: expected contextualize, embed or all"),
            )),
        }
    }

    fn contextualizes(self) -> bool {
        matches!(self, WorkerRole::Contextualize | WorkerRole::All)
    }

    fn embeds(self) -> bool {
        matches!(self, WorkerRole::Embed | WorkerRole::All)
    }
}

/// How a worker runs.
pub struct WorkerOptions {
    /// What it does.
    pub role: WorkerRole,
    /// Who writes the contexts (the `contextualize` role needs one).
    pub contextualizer: Option<Box<dyn Contextualizer>>,
    /// The embedder (the `embed` role needs one).
    pub embedder: Option<Arc<dyn Embedder>>,
    /// Items claimed at a time.
    pub batch: usize,
    /// How long a claim holds without a heartbeat.
    pub lease: Duration,
    /// Stop when no item of its roles is left open (held or free), rather than wait for more.
    pub until_idle: bool,
    /// How long to wait between looks at an empty queue.
    pub poll: Duration,
    /// Its name in the queue (the lease owner): unique per process.
    pub name: String,
    /// Set to stop after the current items.
    pub stop: Option<Arc<AtomicBool>>,
    /// Claim only the work that fills this worker's model for a switch of embedder
    /// (`embed:MODEL`), not the fleet's `embed` items (`situate store reembed`).
    pub fill_only: bool,
}

impl WorkerOptions {
    /// A worker of `role` with 8 items a claim, a 60-second lease, a 1-second poll and a
    /// name from the host and process id.
    pub fn new(role: WorkerRole) -> WorkerOptions {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "host".into());
        WorkerOptions {
            role,
            contextualizer: None,
            embedder: None,
            batch: 8,
            lease: Duration::from_secs(60),
            until_idle: false,
            poll: Duration::from_secs(1),
            name: format!("{host}:{}", std::process::id()),
            stop: None,
            fill_only: false,
        }
    }
}

/// What a worker did, in its `--json` shape.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct WorkerReport {
    /// The server and database.
    pub store: String,
    /// The worker's name in the queue.
    pub worker: String,
    /// Contexts written to cards.
    pub contexts: u64,
    /// Of those, taken from the shared context cache (no model call).
    pub contexts_cached: u64,
    /// Contexts that failed (recorded on the card with the reason).
    pub context_failures: u64,
    /// Contexts that failed a check (stored `rejected`, not indexed).
    pub contexts_rejected: u64,
    /// Texts embedded and kept in the store.
    pub embedded: u64,
    /// Items found already done or replaced (another worker, or a re-ingest): nothing written.
    pub superseded: u64,
    /// Tokens the contextualizer spent.
    pub usage: TokenUsage,
}

/// Something a worker did (for progress display).
#[derive(Debug, Clone)]
pub enum WorkerEvent {
    /// Items claimed.
    Claimed {
        /// `contextualize` or `embed`.
        role: &'static str,
        /// How many.
        items: usize,
    },
    /// The totals so far, after a claim's items were written.
    Progress(WorkerReport),
}

/// Runs a worker on the shared store at `url` until it is stopped, or, with
/// [`WorkerOptions::until_idle`], until no item of its roles is open.
pub fn run_worker(
    url: &str,
    opts: WorkerOptions,
    on_event: &mut dyn FnMut(WorkerEvent),
) -> Result<WorkerReport> {
    let env = Env::from_process();
    let store = PgStore::connect(url, &env)?;
    if opts.role.contextualizes() && opts.contextualizer.is_none() {
        return Err(EngineError::Invalid(
            "a contextualize worker needs a context method (--context, or the one the ingest recorded)".into(),
        ));
    }
    if opts.role.embeds() && opts.embedder.is_none() {
        return Err(EngineError::Invalid(
            "an embed worker needs an embedder (--embedder)".into(),
        ));
    }
    let cache = PgCache::connect(url, &env)?;
    // The heartbeat's own connection (leases are renewed while the other one works).
    let beat = PgStore::connect(url, &env)?;
    let mut conns = (store, cache, beat);
    let mut report = WorkerReport {
        store: conns.0.target().to_string(),
        worker: opts.name.clone(),
        ..Default::default()
    };
    let stopped = || {
        opts.stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
    };
    let mut roles: Vec<String> = Vec::new();
    if opts.role.contextualizes() && !opts.fill_only {
        roles.push("contextualize".into());
    }
    roles.extend(embed_roles(&opts));
    while !stopped() {
        let (store, cache, beat) = &mut conns;
        let pass = one_pass(store, cache, beat, &opts, &roles, &mut report, on_event);
        match pass {
            Ok(Pass::Worked) => on_event(WorkerEvent::Progress(report.clone())),
            Ok(Pass::Done) => break,
            Ok(Pass::Idle) => std::thread::sleep(opts.poll),
            Err(e) if connection_lost(&e) => {
                // The server restarted or the network cut the connection: reconnect and
                // go on. The items this worker held are released when their leases run
                // out, and taken again (a context answered but not yet in the shared
                // cache is asked for once more).
                conns = reconnect(url, &env, &e, &stopped)?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(report)
}

/// What one pass of a worker's loop did.
enum Pass {
    /// Some items were handled.
    Worked,
    /// Nothing to do now.
    Idle,
    /// Nothing left at all (`until_idle`).
    Done,
}

fn one_pass(
    store: &mut PgStore,
    cache: &PgCache,
    beat: &mut PgStore,
    opts: &WorkerOptions,
    roles: &[String],
    report: &mut WorkerReport,
    on_event: &mut dyn FnMut(WorkerEvent),
) -> Result<Pass> {
    let mut did = 0;
    if let Some(ctx) = opts.contextualizer.as_deref().filter(|_| !opts.fill_only) {
        did += contextualize_round(beat, store, cache, ctx, opts, report, on_event)?;
    }
    if did == 0
        && let Some(embedder) = &opts.embedder
        && opts.role.embeds()
    {
        did += embed_round(beat, store, embedder.as_ref(), opts, report, on_event)?;
    }
    if did > 0 {
        return Ok(Pass::Worked);
    }
    if opts.until_idle {
        let mut open = 0;
        for role in roles {
            open += store.work_counts(role)?.0;
        }
        if open == 0 {
            return Ok(Pass::Done);
        }
    }
    Ok(Pass::Idle)
}

/// Whether `e` is a lost connection to the shared store.
fn connection_lost(e: &EngineError) -> bool {
    match e {
        EngineError::SharedStore(pg) => pg.is_connection_lost(),
        EngineError::In { source, .. } => connection_lost(source),
        _ => false,
    }
}

/// How long a worker keeps trying to reconnect before it gives up with the error.
pub const RECONNECT_FOR: Duration = Duration::from_secs(300);

/// Connects again after `lost`, waiting longer between tries (0.2 s doubling to 5 s),
/// for up to [`RECONNECT_FOR`].
fn reconnect(
    url: &str,
    env: &Env,
    lost: &EngineError,
    stopped: &dyn Fn() -> bool,
) -> Result<(PgStore, PgCache, PgStore)> {
    tracing::warn!("lost the shared store ({lost}); reconnecting");
    let started = std::time::Instant::now();
    let mut wait = Duration::from_millis(200);
    loop {
        std::thread::sleep(wait);
        let tried = (|| -> Result<(PgStore, PgCache, PgStore)> {
            Ok((
                PgStore::connect(url, env)?,
                PgCache::connect(url, env)?,
                PgStore::connect(url, env)?,
            ))
        })();
        match tried {
            Ok(conns) => {
                tracing::warn!(
                    "reconnected to the shared store after {:.1} s",
                    started.elapsed().as_secs_f64()
                );
                return Ok(conns);
            }
            Err(e) if connection_lost(&e) && started.elapsed() < RECONNECT_FOR && !stopped() => {
                wait = (wait * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Renews `owner`'s leases on `ids` every third of `lease` from a thread of its own (on
/// the connection `beat`) while `work` runs.
fn under_lease<T>(
    beat: &mut PgStore,
    owner: &str,
    ids: &[i64],
    lease: Duration,
    work: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let (done, wait) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        s.spawn(move || {
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(lease / 3)
            {
                if let Err(e) = beat.heartbeat(owner, ids, lease) {
                    tracing::warn!("could not renew the leases: {e}");
                }
            }
        });
        let out = work();
        let _ = done.send(());
        out
    })
}

/// Claims and writes one batch of contexts; returns how many items it handled.
#[allow(clippy::too_many_arguments)]
fn contextualize_round(
    beat: &mut PgStore,
    store: &mut PgStore,
    cache: &PgCache,
    ctx: &dyn Contextualizer,
    opts: &WorkerOptions,
    report: &mut WorkerReport,
    on_event: &mut dyn FnMut(WorkerEvent),
) -> Result<usize> {
    let claimed = store.claim("contextualize", &opts.name, opts.batch as i64, opts.lease)?;
    if claimed.is_empty() {
        return Ok(0);
    }
    on_event(WorkerEvent::Claimed {
        role: "contextualize",
        items: claimed.len(),
    });
    let ids: Vec<i64> = claimed.iter().map(|c| c.id).collect();
    let n = claimed.len();
    let result = under_lease(beat, &opts.name, &ids, opts.lease, || {
        write_contexts(store, cache, ctx, claimed, report)
    });
    if result.is_err() {
        // Given back at once for another worker (or this one once fixed).
        let _ = store.release(&opts.name, &ids);
    }
    result.map(|()| n)
}

fn write_contexts(
    store: &mut PgStore,
    cache: &PgCache,
    ctx: &dyn Contextualizer,
    claimed: Vec<Claimed>,
    report: &mut WorkerReport,
) -> Result<()> {
    let chunk_ids: Vec<&str> = claimed.iter().map(|c| c.chunk_id.as_str()).collect();
    let documents = store.documents_of(&chunk_ids)?;
    // Items by document, in claim order; an item whose card is gone was replaced.
    let mut by_doc: BTreeMap<String, Vec<&Claimed>> = BTreeMap::new();
    for c in &claimed {
        match documents.get(&c.chunk_id) {
            Some(d) => by_doc.entry(d.clone()).or_default().push(c),
            None => {
                store.finish(c.id, false)?;
                report.superseded += 1;
            }
        }
    }
    let mut docs: Vec<(Document, Vec<situate_core::ChunkSpan>, Vec<&Claimed>)> = Vec::new();
    for (doc_id, items) in by_doc {
        let Some(shared) = store.read_document(&doc_id)? else {
            for c in items {
                store.finish(c.id, false)?;
                report.superseded += 1;
            }
            continue;
        };
        let wanted: HashMap<&str, &Claimed> =
            items.iter().map(|c| (c.chunk_id.as_str(), *c)).collect();
        let cards: Vec<situate_core::ChunkCard> = shared
            .cards
            .into_iter()
            .filter(|c| wanted.contains_key(c.chunk_id.as_str()))
            .collect();
        let spans = spans_of(&doc_id, &shared.doc.text, &cards)?;
        let items: Vec<&Claimed> = cards
            .iter()
            .filter_map(|c| wanted.get(c.chunk_id.as_str()).copied())
            .collect();
        // The worker must write the context the ingest queued: the same input.
        let view = DocumentView::of(&shared.doc);
        for (chunk, item) in ChunkView::all(&shared.doc.text, &spans).iter().zip(&items) {
            let h = ctx.input_hash(&view, chunk);
            if h != item.input_hash {
                return Err(EngineError::Invalid(format!(
                    "chunk {} was queued for a context with other settings than this worker's \
                     (its input hash differs): start the worker with the ingest's --context and --llm, \
                     or without them to use the ones the ingest recorded in the store",
                    item.chunk_id
                )));
            }
        }
        docs.push((shared.doc, spans, items));
    }
    let pairs: Vec<(&Document, &[situate_core::ChunkSpan])> =
        docs.iter().map(|(d, s, _)| (d, s.as_slice())).collect();
    let mut ingest = IngestReport::default();
    let all = contextualize_many(
        situate_engine::node::runtime()?,
        ctx,
        cache,
        &pairs,
        &mut ingest,
    )?;
    report.contexts_cached += ingest.contexts_cached;
    report.usage.add(&ingest.usage);
    for ((doc, spans, items), contexts) in docs.iter().zip(all) {
        for ((span, item), context) in spans.iter().zip(items).zip(contexts) {
            let indexed = context
                .text
                .as_deref()
                .filter(|_| context.status.is_indexed());
            let embed = embedding_input(indexed, &doc.text[span.byte_start..span.byte_end]).0;
            match store.complete_context(item.id, &item.chunk_id, &context, Some(&embed))? {
                Some(_) => {
                    report.contexts += 1;
                    match context.status {
                        situate_core::ContextStatus::Failed => report.context_failures += 1,
                        situate_core::ContextStatus::Rejected => report.contexts_rejected += 1,
                        _ => {}
                    }
                }
                None => report.superseded += 1,
            }
        }
    }
    Ok(())
}

/// The work roles an embed worker claims, in order: the fleet's `embed` (unless
/// [`WorkerOptions::fill_only`]), then `embed:MODEL`, which fills its model for a switch
/// of embedder. Either writes vectors of its model, keyed by text hash.
fn embed_roles(opts: &WorkerOptions) -> Vec<String> {
    let Some(embedder) = opts.embedder.as_ref().filter(|_| opts.role.embeds()) else {
        return Vec::new();
    };
    let mut roles = Vec::new();
    if !opts.fill_only {
        roles.push("embed".to_string());
    }
    roles.push(situate_pg::embed_role(embedder.model_id()));
    roles
}

/// Claims and embeds one batch; returns how many items it handled.
fn embed_round(
    beat: &mut PgStore,
    store: &mut PgStore,
    embedder: &dyn Embedder,
    opts: &WorkerOptions,
    report: &mut WorkerReport,
    on_event: &mut dyn FnMut(WorkerEvent),
) -> Result<usize> {
    let size = opts.batch.max(embedder.call_size()) as i64;
    let mut claimed = Vec::new();
    for role in embed_roles(opts) {
        claimed = store.claim(&role, &opts.name, size, opts.lease)?;
        if !claimed.is_empty() {
            break;
        }
    }
    if claimed.is_empty() {
        return Ok(0);
    }
    on_event(WorkerEvent::Claimed {
        role: "embed",
        items: claimed.len(),
    });
    let ids: Vec<i64> = claimed.iter().map(|c| c.id).collect();
    let n = claimed.len();
    let result = under_lease(beat, &opts.name, &ids, opts.lease, || {
        write_embeddings(store, embedder, &claimed, report)
    });
    if result.is_err() {
        let _ = store.release(&opts.name, &ids);
    }
    result.map(|()| n)
}

fn write_embeddings(
    store: &mut PgStore,
    embedder: &dyn Embedder,
    claimed: &[Claimed],
    report: &mut WorkerReport,
) -> Result<()> {
    if embedder.late() {
        return write_late_embeddings(store, embedder, claimed, report);
    }
    let model = embedder.model_id().to_string();
    let chunk_ids: Vec<&str> = claimed.iter().map(|c| c.chunk_id.as_str()).collect();
    let inputs: HashMap<String, situate_pg::EmbedInput> = store
        .embed_inputs(&chunk_ids)?
        .into_iter()
        .map(|i| (i.chunk_id.clone(), i))
        .collect();
    // The text each item embeds, when its card still embeds it.
    let mut todo: Vec<(String, situate_core::PassageInput)> = Vec::new();
    for c in claimed {
        let Some(i) = inputs.get(&c.chunk_id) else {
            continue;
        };
        let (h, text) = embedding_input(i.context.as_deref(), &i.original);
        if h == c.input_hash && !todo.iter().any(|(t, _)| *t == h) {
            todo.push((h, text));
        }
    }
    let hashes: Vec<&str> = todo.iter().map(|(h, _)| h.as_str()).collect();
    let kept = store.embeddings(&model, &hashes)?;
    todo.retain(|(h, _)| !kept.contains_key(h));
    if !todo.is_empty() {
        let runtime = situate_engine::node::runtime()?;
        let mut vectors: Vec<(String, Vec<f32>)> = Vec::with_capacity(todo.len());
        for part in todo.chunks(embedder.call_size().max(1)) {
            let inputs: Vec<situate_core::PassageInput> =
                part.iter().map(|(_, t)| t.clone()).collect();
            let vs = runtime
                .block_on(embedder.embed_passages(&inputs))
                .map_err(|e| EngineError::Invalid(format!("embedding failed: {e}")))?;
            if vs.len() != part.len() {
                return Err(EngineError::Invalid(format!(
                    "the embedder returned {} vectors for {} texts",
                    vs.len(),
                    part.len()
                )));
            }
            vectors.extend(part.iter().map(|(h, _)| h.clone()).zip(vs));
        }
        if let Some((_, v)) = vectors.first() {
            // The model's HNSW index in pgvector, for the `pgvector` search leg.
            store.ensure_vector_index(&model, v.len())?;
        }
        let items: Vec<(&str, &[f32])> = vectors
            .iter()
            .map(|(h, v)| (h.as_str(), v.as_slice()))
            .collect();
        report.embedded += store.put_embeddings(&model, &items)?;
    }
    finish_claimed(store, claimed, report)
}

/// [`write_embeddings`] for late chunking: the document of each claimed card read from
/// the store and embedded whole, once (overlapping windows when it is longer than the
/// model reads), every chunk of it pooled from its span and kept under its late key, which
/// the query nodes compute the same way; the other items of the same document then find
/// their vectors kept. A document removed meanwhile is skipped (its items went with it).
fn write_late_embeddings(
    store: &mut PgStore,
    embedder: &dyn Embedder,
    claimed: &[Claimed],
    report: &mut WorkerReport,
) -> Result<()> {
    let model = embedder.model_id().to_string();
    let chunk_ids: Vec<&str> = claimed.iter().map(|c| c.chunk_id.as_str()).collect();
    let documents: std::collections::BTreeSet<String> =
        store.documents_of(&chunk_ids)?.into_values().collect();
    let mut docs = Vec::new();
    for id in &documents {
        let Some(shared) = store.read_document(id)? else {
            continue;
        };
        let d = situate_engine::node::late_document(id, &shared.doc.text, &shared.cards);
        let keys: Vec<&str> = d.chunks.iter().map(|(k, _)| k.as_str()).collect();
        let kept = store.embeddings(&model, &keys)?;
        if d.chunks.iter().any(|(k, _)| !kept.contains_key(k)) {
            docs.push(d);
        }
    }
    if !docs.is_empty() {
        let e = situate_engine::node::embed_late(
            situate_engine::node::runtime()?,
            embedder,
            docs,
            &mut |_, _| {},
        );
        if e.failed > 0 {
            return Err(EngineError::Invalid(format!(
                "embedding failed: {}",
                e.reason.unwrap_or_default()
            )));
        }
        if let Some((_, v)) = e.vectors.first() {
            store.ensure_vector_index(&model, v.len())?;
        }
        report.embedded += store.put_embeddings(&model, &e.cache_rows())?;
    }
    finish_claimed(store, claimed, report)
}

/// Marks the claimed embed items done, counting those another write superseded.
fn finish_claimed(
    store: &mut PgStore,
    claimed: &[Claimed],
    report: &mut WorkerReport,
) -> Result<()> {
    for c in claimed {
        if !store.finish(c.id, false)? {
            report.superseded += 1;
        }
    }
    Ok(())
}

/// A worker as a front end asks for it; every `None` falls back to what the store's last
/// ingest recorded, then `situate.toml`, then the default.
#[derive(Debug, Clone, Default)]
pub struct WorkerRequest {
    /// `contextualize`, `embed` or `all` (default all).
    pub role: Option<String>,
    /// The context method [the ingest's].
    pub context: Option<String>,
    /// The LLM [the ingest's, then `[llm] model`].
    pub llm: Option<String>,
    /// The embedder [the default for the store's languages].
    pub embedder: Option<String>,
    /// Items claimed at a time (default 8).
    pub batch: Option<usize>,
    /// The lease in seconds (default 60).
    pub lease: Option<f64>,
    /// Stop when nothing of its roles is left open.
    pub until_idle: bool,
    /// Its name in the queue (default host:pid).
    pub name: Option<String>,
}

/// Checks `req` and builds the worker's contextualizer and embedder for the store at `url`.
pub fn prepare_worker(
    url: &str,
    settings: &situate_engine::Settings,
    req: &WorkerRequest,
) -> Result<WorkerOptions> {
    let role = WorkerRole::parse(req.role.as_deref().unwrap_or("all"))?;
    let mut opts = WorkerOptions::new(role);
    if let Some(b) = req.batch {
        if b == 0 {
            return Err(EngineError::field_error("batch", "must be at least 1"));
        }
        opts.batch = b;
    }
    if let Some(l) = req.lease {
        if !(l.is_finite() && l >= 1.0) {
            return Err(EngineError::field_error(
                "lease",
                format!("{l}: expected a number of seconds, 1 or more"),
            ));
        }
        opts.lease = Duration::from_secs_f64(l);
    }
    if let Some(n) = &req.name {
        opts.name = n.clone();
    }
    opts.until_idle = req.until_idle;
    let env = Env::from_process();
    let mut store = PgStore::connect(url, &env)?;
    if role.contextualizes() {
        let method = req
            .context
            .clone()
            .or(store.meta("context_method")?)
            .unwrap_or_else(|| situate_engine::ContextChoice::Structural.as_str().into());
        let llm = req.llm.clone().or(store.meta("context_llm")?);
        let run = situate_engine::LlmRun {
            llm: llm.filter(|_| situate_engine::uses_llm(&method)),
            ..Default::default()
        };
        opts.contextualizer = Some(
            situate_engine::build_contextualizer(&method, &settings.llm, &run)?.contextualizer,
        );
    }
    if role.embeds() {
        let spec = match &req.embedder {
            Some(e) => e.clone(),
            None => situate_embed::default_for(&store.languages()?).to_string(),
        };
        if spec == "none" || spec == "auto" {
            return Err(EngineError::field_error(
                "embedder",
                format!("{spec}: an embed worker needs a model (or the role contextualize)"),
            ));
        }
        let embedder = situate_embed::resolve(&spec).map_err(|e| {
            EngineError::from(situate_engine::node::EmbedderLoad::from(e))
                .within("the embed role's embedder (--role contextualize writes contexts only)")
        })?;
        opts.embedder = Some(Arc::from(embedder));
    }
    Ok(opts)
}
