//! A switch of embedder on the shared store (`situate store reembed`, then `situate
//! reembed --store` or the `reembed` job on each query node).
//!
//! 1. **The store is filled first**, while every node goes on searching with the old
//!    model: [`fill_store`] records the new model as one the store is filling (so an
//!    ingest or a context written meanwhile queues its embedding for it too), queues
//!    `embed:MODEL` work for every card whose context is final and whose text the model
//!    has no vector for, and works that queue as an embed worker until it is empty. Any
//!    number of machines can help (`situate worker --role embed --embedder NEW` claims
//!    `embed:MODEL` beside `embed`); a run killed midway leaves its leases to run out and
//!    resumes where the queue stands. Contexts are never paid again: the vectors are of
//!    the cards' texts as they are.
//! 2. **Each node then switches** ([`crate::follow::Follower::reembed`]): the new model's
//!    vectors read from the store into the node's own embedding cache, whatever the store
//!    lacks embedded on the node, then the engine's one switch
//!    ([`situate_engine::Engine::reembed_with`]). A node serves the old vectors until its
//!    switch; nodes switch one at a time or all at once, as the operator likes.

use crate::worker::{WorkerEvent, WorkerOptions, WorkerRole, run_worker};
use serde::Serialize;
use situate_engine::node::embedding_input;
use situate_engine::{CheckedReembed, EngineError, Result};
use situate_pg::{Env, PgStore};
use std::sync::Arc;

/// Cards read from the store at a time while queueing.
const PAGE: i64 = 2048;

/// What `situate store reembed` did, in its `--json` shape.
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct StoreReembedAnswer {
    /// The server and database (`user@host:port/database`; never the password).
    pub store: String,
    /// The embedder filled.
    pub embedder: String,
    /// Its model id (the store's embeddings are kept under it).
    pub model: String,
    /// Cards whose context is final (each needs a vector of the model).
    pub cards: u64,
    /// Of those, cards the model had a vector for already (an earlier run, a worker).
    pub kept: u64,
    /// Work items queued by this run (`embed:MODEL`).
    pub queued: u64,
    /// Texts this run embedded and kept in the store.
    pub embedded: u64,
    /// Items open when the run ended (0 unless `--queue-only`).
    pub open: i64,
    /// The models the store is filling: every new embedding is queued for each of them.
    pub filling: Vec<String>,
    /// Seconds the run took.
    pub seconds: f64,
}

/// Progress of [`fill_store`].
#[derive(Debug, Clone, Copy)]
pub enum FillEvent {
    /// Cards looked at so far while queueing.
    Queueing {
        /// Cards read.
        cards: u64,
    },
    /// Items of `embed:MODEL` done (by anyone) against all of them.
    Embedding {
        /// Done or failed.
        done: u64,
        /// In all.
        total: u64,
    },
}

/// `situate store reembed`: fills the store with `req.embedder`'s vectors of every final
/// card (module docs), or with `queue_only` only queues them for the workers.
pub fn fill_store(
    url: &str,
    req: &CheckedReembed,
    queue_only: bool,
    on_event: &mut dyn FnMut(FillEvent),
) -> Result<StoreReembedAnswer> {
    let started = std::time::Instant::now();
    let env = Env::from_process();
    let mut store = PgStore::connect(url, &env)?;
    let embedder: Arc<dyn situate_core::Embedder> = situate_embed::resolve(&req.embedder)
        .map(Arc::from)
        .map_err(|e| EngineError::from(situate_engine::node::EmbedderLoad::from(e)))?;
    let model = embedder.model_id().to_string();
    let role = situate_pg::embed_role(&model);
    // Recorded before the cards are read: a card written from now on queues its
    // embedding for the model itself, and one written before is read below.
    let filling = store.add_embed_target(&model)?;
    let mut answer = StoreReembedAnswer {
        store: store.target().to_string(),
        embedder: req.embedder.clone(),
        model: model.clone(),
        filling,
        ..Default::default()
    };
    let mut after = String::new();
    loop {
        let page = store.final_inputs(&after, PAGE)?;
        let Some(last) = page.last() else { break };
        after = last.chunk_id.clone();
        let items: Vec<(String, String)> = page
            .iter()
            .map(|i| {
                let (h, _) = embedding_input(i.context.as_deref(), &i.original);
                (i.chunk_id.clone(), h)
            })
            .collect();
        let hashes: Vec<&str> = items.iter().map(|(_, h)| h.as_str()).collect();
        let kept = store.kept_hashes(&model, &hashes)?;
        let todo: Vec<(&str, &str)> = items
            .iter()
            .filter(|(_, h)| !kept.contains(h))
            .map(|(c, h)| (c.as_str(), h.as_str()))
            .collect();
        answer.cards += items.len() as u64;
        answer.kept += (items.len() - todo.len()) as u64;
        answer.queued += store.enqueue(&role, &todo)?;
        on_event(FillEvent::Queueing {
            cards: answer.cards,
        });
    }
    if !queue_only {
        let mut opts = WorkerOptions::new(WorkerRole::Embed);
        opts.embedder = Some(embedder);
        opts.fill_only = true;
        opts.until_idle = true;
        opts.batch = req.batch.clamp(1, 1024);
        let mut counts = PgStore::connect(url, &env)?;
        let report = run_worker(url, opts, &mut |e| {
            if let WorkerEvent::Progress(_) = e
                && let Ok((queued, _, done, failed)) = counts.work_counts(&role)
            {
                let finished = (done + failed) as u64;
                on_event(FillEvent::Embedding {
                    done: finished,
                    total: finished + queued as u64,
                });
            }
        })?;
        answer.embedded = report.embedded;
    }
    answer.open = store.work_counts(&role)?.0;
    answer.seconds = started.elapsed().as_secs_f64();
    Ok(answer)
}
