//! Query nodes: an index directory that follows the shared store (`situate search|serve
//! --store`).
//!
//! A node keeps a copy of the store's cards in its own embedded store, and BM25 and the
//! vector index derived from them as any index does; searches run on the node alone. It is
//! built from a consistent view of the store (every document as of one snapshot, with that
//! snapshot's feed position) and kept current by following the change feed from there.
//! The feed is read only below the snapshot's xmin (every transaction under it has ended),
//! so a change committed out of order is never skipped. Applying a change re-reads the
//! document as it is now, so applying one twice (after a crash between the write and the
//! recorded position) changes nothing. Embeddings come from the store's cache when an
//! `embed` worker has written them, and are computed on the node otherwise (the node never
//! writes to the store, so it can follow a read-only replica).

use serde::Serialize;
use situate_core::ChunkContext;
use situate_engine::node::embedding_input;
use situate_engine::{Engine, EngineError, Result};
use situate_pg::{Env, PgStore, SharedDocument};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// The node's settings keys in its own store.
const STORE_ID: &str = "shared_store_id";
use situate_engine::node::STORE_POSITION as POSITION;

/// Documents applied per store batch.
const BATCH: usize = 64;

/// What one catch-up did, in its `--json` shape.
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct FollowReport {
    /// The server and database followed.
    pub store: String,
    /// The feed position the node has applied: every change below it is in its indexes.
    pub position: u64,
    /// Documents (re)written from the store.
    pub applied: u64,
    /// Documents removed because the store no longer has them.
    pub removed: u64,
    /// Embeddings taken from the store's cache.
    pub embeddings_from_store: u64,
    /// Texts the node embedded itself (the store had no vector for them yet).
    pub embedded: u64,
}

/// What `situate store check` found, in its `--json` shape.
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct StoreCheck {
    /// The server and database followed.
    pub store: String,
    /// The feed position the node had applied when it was checked.
    pub position: u64,
    /// Documents compared.
    pub documents: u64,
    /// Cards compared.
    pub cards: u64,
    /// Documents of the store the node does not have.
    pub missing: Vec<String>,
    /// Documents the node has and the store does not.
    pub extra: Vec<String>,
    /// Cards that differ (`chunk id: what`), at most 100.
    pub differing: Vec<String>,
    /// Whether the node's own indexes (BM25, vectors) agree with its cards.
    pub indexes_consistent: bool,
}

impl StoreCheck {
    /// Whether the node agrees with the store card by card and its indexes with its cards.
    pub fn is_consistent(&self) -> bool {
        self.missing.is_empty()
            && self.extra.is_empty()
            && self.differing.is_empty()
            && self.indexes_consistent
    }
}

/// The answer to `situate search --store … --pgvector`: the query's nearest chunks as
/// pgvector ranks them.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PgvectorAnswer {
    /// The query.
    pub query: String,
    /// Always `pgvector`: the vector leg alone, from the shared store.
    pub leg: &'static str,
    /// The hits, nearest first.
    pub hits: Vec<PgvectorHit>,
    /// The search's wall time.
    pub took_ms: f64,
}

/// A hit of the `pgvector` leg (`search --store … --pgvector`).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct PgvectorHit {
    /// The chunk.
    pub chunk_id: String,
    /// Its document.
    pub document_id: String,
    /// Cosine similarity (1 − pgvector's cosine distance).
    pub score: f32,
}

/// What a query node's switch of embedder did (`situate reembed --store`, the `reembed`
/// job of a node's service).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct NodeReembedAnswer {
    /// The engine's switch; its `reused` counts the vectors read from the store.
    #[serde(flatten)]
    pub switch: situate_engine::ReembedAnswer,
    /// Vectors of the new model read from the shared store (not embedded on the node).
    pub from_store: u64,
}

/// A connection to the shared store that an index follows.
pub struct Follower {
    store: PgStore,
    /// When this follower last wrote the node's vector snapshot.
    saved: Option<Instant>,
    /// The node's cards by the hash of their embedded text, and the node's generation it
    /// reflects (for the `pgvector` leg, whose answers are text hashes).
    by_hash: Option<(u64, std::collections::HashMap<String, Vec<u64>>)>,
}

/// How often a following node rewrites its vector snapshot. The snapshot is derived (an
/// index opened behind it replays the journal from the generation it reflects), so it is
/// written now and then, not after every catch-up: on a large index it is the slowest
/// part of applying a change.
const SAVE_EVERY: Duration = Duration::from_secs(60);

impl Follower {
    /// Connects to the shared store at `url`.
    pub fn connect(url: &str) -> Result<Follower> {
        Ok(Follower {
            store: PgStore::connect(url, &Env::from_process())?,
            saved: None,
            by_hash: None,
        })
    }

    /// The server and database (`user@host:port/database`).
    pub fn target(&self) -> String {
        self.store.target().to_string()
    }

    /// Brings `engine`'s index up to the store: the first time from a snapshot of every
    /// document, then from the change feed.
    pub fn catch_up(&mut self, engine: &mut Engine) -> Result<FollowReport> {
        engine.require_writer()?;
        let store_id = self.store.meta("store_id")?.unwrap_or_default();
        match engine.store().meta(STORE_ID)? {
            Some(id) if id != store_id => {
                return Err(EngineError::Invalid(format!(
                    "the index at {} follows another store (id {id}; this one is {store_id}): give the node another directory",
                    engine.dir().display()
                )));
            }
            Some(_) => {}
            None if engine.store().generation()? > 0 => {
                return Err(EngineError::Invalid(format!(
                    "the index at {} is not a query node of this store (it has documents of its own): give the node an empty directory",
                    engine.dir().display()
                )));
            }
            // Named before anything is applied: a first catch-up cut short is resumed.
            None => engine.store().set_meta(STORE_ID, &store_id)?,
        }
        let mut report = FollowReport {
            store: self.target(),
            ..Default::default()
        };
        let position = engine
            .store()
            .meta(POSITION)?
            .and_then(|p| p.parse::<u64>().ok());
        let (changed, removed_locally, upto) = match position {
            None => {
                let (ids, upto) = self.store.document_ids()?;
                let local = engine.document_ids()?;
                let keep: BTreeSet<&String> = ids.iter().collect();
                let gone: Vec<String> = local.into_iter().filter(|d| !keep.contains(d)).collect();
                (ids, gone, upto)
            }
            Some(from) => {
                let feed = self.store.changes_since(from)?;
                let ids: BTreeSet<String> =
                    feed.changes.into_iter().map(|c| c.document_id).collect();
                (ids.into_iter().collect(), Vec::new(), feed.upto)
            }
        };
        if !changed.is_empty() || !removed_locally.is_empty() {
            self.choose_embedder(engine)?;
        }
        for part in changed.chunks(BATCH) {
            let mut docs = Vec::with_capacity(part.len());
            let mut gone = Vec::new();
            for id in part {
                match self.store.read_document(id)? {
                    // Written again only when it differs: a replaced document leaves
                    // deleted rows in BM25's statistics until a merge, and a node should
                    // score as an index that ingested the corpus once.
                    Some(d) if !same_as_local(engine, &d)? => docs.push(d),
                    Some(_) => {}
                    None => gone.push(id.clone()),
                }
            }
            self.apply(engine, &docs, &gone, &mut report)?;
            situate_engine::node::crash_point("follow-apply");
        }
        if !removed_locally.is_empty() {
            self.apply(engine, &[], &removed_locally, &mut report)?;
        }
        if self.saved.is_none_or(|t| t.elapsed() >= SAVE_EVERY) {
            engine.save_vectors()?;
            self.saved = Some(Instant::now());
        }
        engine
            .store()
            .set_metas(&[(STORE_ID, &store_id), (POSITION, &upto.to_string())])?;
        report.position = upto;
        Ok(report)
    }

    /// Catches up until the node has applied `position` (read-your-writes: a writer's
    /// position, from `ingest --store`), or fails after `timeout` naming how far it got.
    pub fn wait_for(
        &mut self,
        engine: &mut Engine,
        position: u64,
        timeout: Duration,
    ) -> Result<FollowReport> {
        let started = Instant::now();
        loop {
            let r = self.catch_up(engine)?;
            if r.position >= position {
                return Ok(r);
            }
            if started.elapsed() >= timeout {
                return Err(EngineError::Invalid(format!(
                    "the node has applied the store's changes up to position {}, not {position}, after {:.1} s: \
                     a transaction left open on the server holds the feed back (see pg_stat_activity)",
                    r.position,
                    started.elapsed().as_secs_f64()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `situate store check`: catches up, then compares every document and card of the
    /// store with the node's, and the node's indexes with its cards. A document that
    /// differs is read again after another catch-up before it is reported (a write may
    /// have landed between the two reads).
    pub fn check(&mut self, engine: &mut Engine) -> Result<StoreCheck> {
        let caught = self.catch_up(engine)?;
        let (ids, _) = self.store.document_ids()?;
        let mut report = StoreCheck {
            store: self.target(),
            position: caught.position,
            ..Default::default()
        };
        let mut suspects = Vec::new();
        for id in &ids {
            if let Some(d) = self.store.read_document(id)? {
                report.documents += 1;
                report.cards += d.cards.len() as u64;
                if !same_as_local(engine, &d)? {
                    suspects.push(d.doc.id.clone());
                }
            }
        }
        if !suspects.is_empty() {
            report.position = self.catch_up(engine)?.position;
        }
        for id in suspects {
            let Some(d) = self.store.read_document(&id)? else {
                continue;
            };
            if same_as_local(engine, &d)? {
                continue;
            }
            let local = engine.store().cards_of(&id)?;
            if engine.store().document_state(&id)?.is_none() {
                report.missing.push(id);
                continue;
            }
            let mut said = false;
            for (i, card) in d.cards.iter().enumerate() {
                let why = match local.get(i) {
                    None => Some("absent on the node".to_string()),
                    Some(l) if l.chunk_id != card.chunk_id => {
                        Some(format!("the node has {} here", l.chunk_id))
                    }
                    Some(l) if l.original_text != card.original_text => {
                        Some("original text".into())
                    }
                    Some(l)
                        if l.generated_context != card.generated_context
                            || l.provenance != card.provenance =>
                    {
                        Some("context".into())
                    }
                    Some(l) if l.context_status != card.context_status => Some(format!(
                        "status {} on the node, {} in the store",
                        l.context_status, card.context_status
                    )),
                    Some(_) => None,
                };
                if let Some(w) = why {
                    said = true;
                    if report.differing.len() < 100 {
                        report.differing.push(format!("{}: {w}", card.chunk_id));
                    }
                }
            }
            if !said && report.differing.len() < 100 {
                report
                    .differing
                    .push(format!("{id}: its ingest key or card count"));
            }
        }
        let known: BTreeSet<&String> = ids.iter().collect();
        report.extra = engine
            .document_ids()?
            .into_iter()
            .filter(|d| !known.contains(d))
            .collect();
        report.indexes_consistent = engine.check()?.is_consistent();
        Ok(report)
    }

    /// The vector leg served by pgvector itself, for comparison with the node's own: the
    /// query embedded by the node's embedder, the `k` nearest texts of its model from the
    /// store's HNSW index (`ef_search` candidates), mapped to the node's cards (a text two
    /// cards share is a hit for both; the map is built once per node generation).
    pub fn pgvector_search(
        &mut self,
        engine: &Engine,
        query: &str,
        k: usize,
        ef_search: i32,
    ) -> Result<Vec<PgvectorHit>> {
        let Some(model) = engine.embed_settings()?.model else {
            return Err(EngineError::Invalid(
                "this node has no embedder (created with --node-embedder none)".into(),
            ));
        };
        let v = engine.embed_query(query)?;
        let near = self.store.nearest(&model, &v, k as i64, ef_search)?;
        let generation = engine.store().generation()?;
        let late = engine.late_chunking()?;
        if self.by_hash.as_ref().is_none_or(|(g, _)| *g != generation) {
            let mut map: std::collections::HashMap<String, Vec<u64>> = Default::default();
            engine.store().for_each_index_row(|row| {
                map.entry(situate_engine::node::text_hash(&row, late))
                    .or_default()
                    .push(row.card);
                Ok(())
            })?;
            self.by_hash = Some((generation, map));
        }
        let by_hash = self.by_hash.as_ref().map(|(_, m)| m);
        let mut hits = Vec::new();
        for (hash, distance) in near {
            let keys = by_hash
                .and_then(|m| m.get(&hash))
                .cloned()
                .unwrap_or_default();
            for rec in engine.cards(&keys)? {
                hits.push(PgvectorHit {
                    chunk_id: rec.card.chunk_id.clone(),
                    document_id: rec.card.document_id.clone(),
                    score: 1.0 - distance,
                });
            }
        }
        hits.truncate(k);
        Ok(hits)
    }

    /// Moves this query node to another embedder ([`crate::reembed`]): caught up first,
    /// then the new model's vectors of the node's cards read from the store into the node's
    /// embedding cache (those the store lacks are embedded here, as
    /// [`Engine::reembed`] does), then the engine's one switch. The node serves its old
    /// vectors until the switch and follows the store with the new model after it.
    pub fn reembed(
        &mut self,
        engine: &mut Engine,
        req: &situate_engine::CheckedReembed,
        progress: &mut dyn FnMut(situate_engine::ReembedProgress),
    ) -> Result<NodeReembedAnswer> {
        self.catch_up(engine)?;
        if engine.embed_settings()?.spec == req.embedder {
            let switch = engine.reembed(req, progress)?;
            return Ok(NodeReembedAnswer {
                switch,
                from_store: 0,
            });
        }
        let embedder: std::sync::Arc<dyn situate_core::Embedder> =
            situate_embed::resolve(&req.embedder)
                .map(std::sync::Arc::from)
                .map_err(|e| EngineError::from(situate_engine::node::EmbedderLoad::from(e)))?;
        let model = embedder.model_id().to_string();
        let mut hashes = BTreeSet::new();
        engine.store().for_each_index_row(|row| {
            hashes.insert(situate_engine::node::text_hash(&row, false));
            Ok(())
        })?;
        let hashes: Vec<&str> = hashes.iter().map(String::as_str).collect();
        let mut from_store = 0u64;
        for part in hashes.chunks(1024) {
            let have = engine.store().cached(&model, part)?;
            let want: Vec<&str> = part
                .iter()
                .copied()
                .filter(|h| !have.contains(*h))
                .collect();
            if want.is_empty() {
                continue;
            }
            let kept = self.store.embeddings(&model, &want)?;
            let items: Vec<(&str, &[f32])> = kept
                .iter()
                .map(|(h, v)| (h.as_str(), v.as_slice()))
                .collect();
            engine.store_mut().cache_embeddings(&model, &items)?;
            from_store += items.len() as u64;
        }
        let switch = engine.reembed_with(req, Some(embedder), progress)?;
        self.by_hash = None;
        // What the store wrote during the switch, now with the new model.
        self.catch_up(engine)?;
        Ok(NodeReembedAnswer { switch, from_store })
    }

    /// Chooses an `auto` node's embedder from the languages of the whole store (not of the
    /// first documents applied), as the embedded ingest does from its corpus.
    fn choose_embedder(&mut self, engine: &mut Engine) -> Result<()> {
        let s = engine.embed_settings()?;
        if s.spec == "none" || s.model.is_some() {
            return Ok(());
        }
        let languages = self.store.languages()?;
        engine.choose_embedder(&languages)
    }

    /// The vectors of `docs`' chunks under `model`: those the shared store holds, the others
    /// embedded here (late chunking: the store's vectors are kept under the same late keys as
    /// the embed workers write, and a document with any chunk missing is embedded whole).
    fn vectors_for(
        &mut self,
        engine: &mut Engine,
        model: &str,
        docs: &[SharedDocument],
        contexts: &[Vec<ChunkContext>],
        report: &mut FollowReport,
    ) -> Result<Vec<(String, Vec<f32>)>> {
        let mut vectors: Vec<(String, Vec<f32>)> = Vec::new();
        if engine.late_chunking()? {
            let late: Vec<situate_engine::node::LateDocument> = docs
                .iter()
                .map(|d| situate_engine::node::late_document(&d.doc.id, &d.doc.text, &d.cards))
                .collect();
            let keys: Vec<&str> = late
                .iter()
                .flat_map(|d| d.chunks.iter().map(|(k, _)| k.as_str()))
                .collect();
            let kept = self.store.embeddings(model, &keys)?;
            report.embeddings_from_store += kept.len() as u64;
            let rest: Vec<situate_engine::node::LateDocument> = late
                .into_iter()
                .filter(|d| d.chunks.iter().any(|(k, _)| !kept.contains_key(k)))
                .collect();
            let fresh = engine.embed_late_documents(engine.runtime()?, rest, &mut |_, _| {})?;
            warn_unembedded(&fresh);
            vectors.extend(
                fresh
                    .vectors
                    .into_iter()
                    .filter(|(k, _)| !kept.contains_key(k)),
            );
            report.embedded += vectors.len() as u64;
            vectors.extend(kept);
        } else {
            let texts: Vec<(String, situate_core::PassageInput)> = docs
                .iter()
                .zip(contexts)
                .flat_map(|(d, cs)| {
                    d.cards.iter().zip(cs).map(|(card, c)| {
                        let ctx = c.text.as_deref().filter(|_| c.status.is_indexed());
                        embedding_input(ctx, &card.original_text)
                    })
                })
                .collect();
            let hashes: Vec<&str> = texts.iter().map(|(h, _)| h.as_str()).collect();
            let kept = self.store.embeddings(model, &hashes)?;
            report.embeddings_from_store += kept.len() as u64;
            let rest: Vec<(String, situate_core::PassageInput)> = texts
                .into_iter()
                .filter(|(h, _)| !kept.contains_key(h))
                .collect();
            let fresh = engine.embed_missing(engine.runtime()?, rest, &mut |_, _| {})?;
            warn_unembedded(&fresh);
            report.embedded += fresh.vectors.len() as u64;
            engine.store_mut().record_cuts(model, &fresh.cut_rows())?;
            vectors.extend(kept);
            vectors.extend(fresh.vectors);
        }
        Ok(vectors)
    }

    /// Writes `docs` as the store has them and removes `gone`, in one batch of the node's
    /// store, then brings its indexes up to date.
    fn apply(
        &mut self,
        engine: &mut Engine,
        docs: &[SharedDocument],
        gone: &[String],
        report: &mut FollowReport,
    ) -> Result<()> {
        let contexts: Vec<Vec<ChunkContext>> = docs
            .iter()
            .map(|d| {
                d.cards
                    .iter()
                    .map(|c| ChunkContext {
                        text: c.generated_context.clone(),
                        status: c.context_status,
                        provenance: c.provenance.clone(),
                        notes: c.context_notes.clone(),
                    })
                    .collect()
            })
            .collect();
        let model = engine.embed_settings()?.model;
        let vectors = match &model {
            Some(model) => self.vectors_for(engine, model, docs, &contexts, report)?,
            None => Vec::new(),
        };
        let mut batch = engine.store_mut().batch()?;
        if let Some(model) = &model {
            let items: Vec<(&str, &[f32])> = vectors
                .iter()
                .map(|(h, v)| (h.as_str(), v.as_slice()))
                .collect();
            batch.put_embeddings(model, &items)?;
        }
        for (d, cs) in docs.iter().zip(&contexts) {
            let chunks: Vec<situate_store::NewChunk<'_>> = d
                .cards
                .iter()
                .zip(cs)
                .map(|(c, context)| situate_store::NewChunk {
                    chunk_id: c.chunk_id.clone(),
                    ordinal: c.ordinal,
                    char_start: c.char_start as usize,
                    char_end: c.char_end as usize,
                    heading_path: &c.heading_path,
                    kind: c.kind,
                    place: c.place,
                    original_text: &c.original_text,
                    context,
                })
                .collect();
            batch.put_document(&d.doc, &d.ingest_key, &chunks)?;
            report.applied += 1;
        }
        for id in gone {
            if batch.remove_document(id)? {
                report.removed += 1;
            }
        }
        batch.commit()?;
        engine.sync_index()
    }
}

/// Whether the node already holds `d` as the store has it (same ingest key, same cards
/// with the same contexts).
fn same_as_local(engine: &Engine, d: &SharedDocument) -> Result<bool> {
    if engine
        .store()
        .document_state(&d.doc.id)?
        .is_none_or(|s| s.ingest_key != d.ingest_key)
    {
        return Ok(false);
    }
    let local = engine.store().cards_of(&d.doc.id)?;
    Ok(local.len() == d.cards.len()
        && local.iter().zip(&d.cards).all(|(a, b)| {
            a.chunk_id == b.chunk_id
                && a.original_text == b.original_text
                && (a.kind, a.place) == (b.kind, b.place)
                && a.generated_context == b.generated_context
                && a.context_status == b.context_status
                && a.provenance == b.provenance
                && a.context_notes == b.context_notes
        }))
}

/// Says, in the node's log, how many chunks the node could not embed and why.
fn warn_unembedded(fresh: &situate_engine::node::Embedded) {
    if fresh.failed > 0 {
        tracing::warn!(
            "{} chunk(s) could not be embedded on this node ({}); they are searched by BM25 only until `situate rebuild`",
            fresh.failed,
            fresh.reason.as_deref().unwrap_or_default()
        );
    }
}
