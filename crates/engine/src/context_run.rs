//! Running a contextualizer over documents: several at once, each context kept in the
//! context cache (the index's own, or the shared store's) as soon as it is written, and the
//! contexts already kept taken from it instead of asked for again.

use crate::{IngestReport, Result};
use situate_core::{
    ChunkContext, ChunkSpan, ChunkView, ContextSink, ContextStatus, Contextualizer, Document,
    DocumentView, TokenUsage,
};
use std::collections::HashMap;

/// Where a remembering contextualizer's (an LLM's) contexts are kept by input hash: the
/// index's own context cache, or the shared store's on PostgreSQL (one for the whole
/// cluster, so a context is paid for once whichever worker writes it).
pub trait ContextCache {
    /// The kept contexts for these input hashes (absent ones are not kept).
    fn cached(&self, hashes: &[&str]) -> Result<HashMap<String, ChunkContext>>;
    /// What keeps each context as it is written (`None`: nothing is kept).
    fn keeper(&self) -> Option<&dyn ContextKeeper>;
}

/// Keeps finished contexts as they are written, from the contextualizer's own tasks.
pub trait ContextKeeper: Send + Sync {
    /// One kept context.
    fn get(&self, key: &str) -> Result<Option<ChunkContext>>;
    /// Keeps a finished context (failed and pending ones are not kept).
    fn put(&self, key: &str, context: &ChunkContext, usage: &TokenUsage) -> Result<()>;
}

impl ContextKeeper for situate_store::ContextCacheWriter {
    fn get(&self, key: &str) -> Result<Option<ChunkContext>> {
        Ok(situate_store::ContextCacheWriter::get(self, key)?)
    }
    fn put(&self, key: &str, context: &ChunkContext, usage: &TokenUsage) -> Result<()> {
        Ok(situate_store::ContextCacheWriter::put(
            self, key, context, usage,
        )?)
    }
}

/// The index's own context cache: read through the store, written through the writer's
/// connection (which may be used while the engine's connection is in a transaction).
pub(crate) struct LocalCache<'a> {
    pub store: &'a situate_store::Store,
    pub writer: Option<&'a situate_store::ContextCacheWriter>,
}

impl ContextCache for LocalCache<'_> {
    fn cached(&self, hashes: &[&str]) -> Result<HashMap<String, ChunkContext>> {
        Ok(self.store.cached_contexts(hashes)?)
    }
    fn keeper(&self) -> Option<&dyn ContextKeeper> {
        self.writer.map(|w| w as &dyn ContextKeeper)
    }
}

/// Keeps each finished context in the context cache as soon as it is written.
struct CacheSink<'a> {
    cache: Option<&'a dyn ContextKeeper>,
    hashes: Vec<&'a str>,
}

impl ContextSink for CacheSink<'_> {
    fn finished(&self, chunk: usize, context: &ChunkContext, usage: &TokenUsage) {
        let (Some(c), Some(h)) = (self.cache, self.hashes.get(chunk)) else {
            return;
        };
        if let Err(e) = c.put(h, context, usage) {
            tracing::warn!("could not keep a context in the cache: {e}");
        }
    }

    fn recall(&self, key: &str) -> Option<ChunkContext> {
        match self.cache?.get(key) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("could not read the context cache: {e}");
                None
            }
        }
    }

    fn keep(&self, key: &str, context: &ChunkContext, usage: &TokenUsage) {
        if let Some(c) = self.cache
            && let Err(e) = c.put(key, context, usage)
        {
            tracing::warn!("could not keep a context in the cache: {e}");
        }
    }
}

/// What one document needs from the contextualizer.
struct Asked<'a> {
    view: DocumentView<'a>,
    chunks: Vec<ChunkView<'a>>,
    hashes: Vec<String>,
    cached: HashMap<String, ChunkContext>,
    /// Chunks not in the cache, in order.
    missing: Vec<usize>,
}

impl<'a> Asked<'a> {
    /// `doc`'s chunks, and which of them the context cache holds (none for a
    /// contextualizer that does not remember).
    fn of(
        doc: &'a Document,
        spans: &'a [ChunkSpan],
        ctx: &dyn Contextualizer,
        cache: &dyn ContextCache,
    ) -> Result<Self> {
        let remembers = ctx.remembers();
        let view = DocumentView::of(doc);
        let chunks = ChunkView::all(&doc.text, spans);
        let hashes: Vec<String> = if remembers {
            chunks.iter().map(|c| ctx.input_hash(&view, c)).collect()
        } else {
            Vec::new()
        };
        let cached = if remembers {
            let refs: Vec<&str> = hashes.iter().map(String::as_str).collect();
            cache.cached(&refs)?
        } else {
            HashMap::new()
        };
        let missing: Vec<usize> = (0..chunks.len())
            .filter(|&i| !remembers || !cached.contains_key(&hashes[i]))
            .collect();
        Ok(Asked {
            view,
            chunks,
            hashes,
            cached,
            missing,
        })
    }
}

/// Runs the contextualizer on several documents at the same time (as many as
/// [`Contextualizer::documents_in_flight`] allows; the caller groups them). A failure never
/// loses a document: its chunks are stored with status `failed` and the reason, and indexed
/// with their original text.
///
/// For a contextualizer that [remembers](Contextualizer::remembers) (an LLM), contexts already
/// in the context cache are taken from it and only the others are asked for; each new one is
/// put in the cache as soon as it is written, so a crash or a kill never pays for it twice.
pub fn contextualize_many(
    runtime: &tokio::runtime::Runtime,
    ctx: &dyn Contextualizer,
    cache: &dyn ContextCache,
    docs: &[(&Document, &[ChunkSpan])],
    report: &mut IngestReport,
) -> Result<Vec<Vec<ChunkContext>>> {
    let remembers = ctx.remembers();
    let mut asked: Vec<Asked<'_>> = Vec::with_capacity(docs.len());
    for (doc, spans) in docs {
        let a = Asked::of(doc, spans, ctx, cache)?;
        report.contexts_cached += (a.chunks.len() - a.missing.len()) as u64;
        asked.push(a);
    }
    let sinks: Vec<CacheSink<'_>> = asked
        .iter()
        .map(|a| CacheSink {
            cache: cache.keeper().filter(|_| remembers),
            hashes: a
                .missing
                .iter()
                .filter_map(|&i| a.hashes.get(i).map(String::as_str))
                .collect(),
        })
        .collect();
    let views: Vec<Vec<ChunkView<'_>>> = asked
        .iter()
        .map(|a| a.missing.iter().map(|&i| a.chunks[i]).collect())
        .collect();
    let calls = asked
        .iter()
        .zip(&views)
        .zip(&sinks)
        .filter(|((_, v), _)| !v.is_empty())
        .map(|((a, v), sink)| ctx.contextualize(a.view, v, sink));
    let mut answers = runtime
        .block_on(futures_util::future::join_all(calls))
        .into_iter();
    let failed = |why: String| ChunkContext {
        text: None,
        status: ContextStatus::Failed,
        provenance: None,
        notes: vec![why],
    };
    let mut out = Vec::with_capacity(asked.len());
    for (a, v) in asked.iter().zip(&views) {
        let fresh: Vec<ChunkContext> = if v.is_empty() {
            Vec::new()
        } else {
            match answers.next().map(|r| r.map_err(|e| e.to_string())) {
                Some(Ok(d)) if d.contexts.len() == v.len() => {
                    report.usage.add(&d.usage);
                    report.document_tokens += d.document_tokens;
                    d.contexts
                }
                Some(Ok(d)) => {
                    let why = format!(
                        "contextualizer returned {} contexts for {} chunks",
                        d.contexts.len(),
                        v.len()
                    );
                    vec![failed(why); v.len()]
                }
                Some(Err(why)) => vec![failed(why); v.len()],
                None => vec![failed("no answer for this document".into()); v.len()],
            }
        };
        let mut fresh = fresh.into_iter();
        let contexts: Vec<ChunkContext> = (0..a.chunks.len())
            .map(|i| {
                if a.missing.binary_search(&i).is_ok() {
                    fresh
                        .next()
                        .unwrap_or_else(|| failed("no context returned".into()))
                } else {
                    // Checked again: the checks may have changed since it was cached.
                    a.cached
                        .get(&a.hashes[i])
                        .cloned()
                        .map(|c| ctx.recheck(&a.view, &a.chunks[i], c))
                        .unwrap_or_else(|| failed("the cached context vanished".into()))
                }
            })
            .collect();
        for c in &contexts {
            match c.status {
                ContextStatus::Failed => report.context_failures += 1,
                ContextStatus::Rejected => report.contexts_rejected += 1,
                ContextStatus::Pending if !c.notes.is_empty() => report.contexts_deferred += 1,
                _ => {}
            }
        }
        out.push(contexts);
    }
    Ok(out)
}
