//! The ingest path: read → skip unchanged → chunk → contextualize → store → index.

use crate::{Engine, Result, crash_point};
use situate_core::{ChunkContext, ChunkSpan, Contextualizer, Document, TokenUsage, hash_parts};
use situate_ingest::{
    Chunker, ChunkerConfig, Skipped, SourceItem, SourceOptions, TextInput, read_sources,
    text_document,
};
use situate_store::NewChunk;
use std::collections::HashMap;
use std::path::PathBuf;

pub(crate) use crate::context_run::{LocalCache, contextualize_many};

/// How to ingest.
pub struct IngestOptions {
    /// How to read the inputs.
    pub sources: SourceOptions,
    /// How to chunk.
    pub chunker: ChunkerConfig,
    /// Who writes the contexts.
    pub contextualizer: Box<dyn Contextualizer>,
    /// Documents per committed batch (a crash loses at most one uncommitted batch).
    pub batch_documents: usize,
    /// Bytes of document text per committed batch.
    pub batch_bytes: usize,
    /// Metadata added to every document of this ingest (`--meta key=value`), usable in
    /// search filters.
    pub metadata: Vec<(String, String)>,
    /// Read, chunk and contextualize (an estimating contextualizer calls nothing), but
    /// write nothing: for `--dry-run` cost estimates.
    pub dry_run: bool,
    /// Documents given as text, read after the paths.
    pub texts: Vec<TextInput>,
}

impl IngestOptions {
    /// Default batching (256 documents or 32 MiB of text) with the given contextualizer.
    pub fn new(contextualizer: Box<dyn Contextualizer>) -> Self {
        IngestOptions {
            sources: SourceOptions::default(),
            chunker: ChunkerConfig::default(),
            contextualizer,
            batch_documents: 256,
            batch_bytes: 32 << 20,
            metadata: Vec::new(),
            dry_run: false,
            texts: Vec::new(),
        }
    }
}

/// Something that happened during an ingest (for progress display).
#[derive(Debug)]
pub enum IngestEvent<'a> {
    /// A document was read and handled.
    Document {
        /// Its id.
        id: &'a str,
        /// `added`, `replaced` or `unchanged`.
        outcome: &'static str,
        /// Its chunk count (0 when unchanged).
        chunks: usize,
    },
    /// An input was skipped.
    Skipped(&'a Skipped),
    /// Chunks are being embedded (texts done, texts to embed in this batch).
    Embedding {
        /// Texts embedded so far in this batch.
        done: usize,
        /// Texts to embed in this batch (cached ones are not counted).
        total: usize,
    },
    /// A document's chunks have their contexts (totals so far).
    Contextualized {
        /// Chunks contextualized so far.
        chunks: u64,
        /// Tokens spent so far.
        usage: TokenUsage,
        /// Contexts taken from the cache so far.
        cached: u64,
    },
    /// A batch was committed to the store and the index.
    Committed {
        /// The store generation now.
        generation: u64,
    },
}

/// What an ingest did.
#[derive(Debug, Clone, Default, serde::Serialize, schemars::JsonSchema)]
pub struct IngestReport {
    /// New documents.
    pub added: u64,
    /// Documents whose content (or ingest settings) changed: their chunks were replaced.
    pub replaced: u64,
    /// Documents already stored as they are: nothing done.
    pub unchanged: u64,
    /// Chunk cards written.
    pub chunks: u64,
    /// Chunks whose context could not be written (indexed with their original only).
    pub context_failures: u64,
    /// Chunks whose context failed a check (stored as `rejected`, not indexed).
    pub contexts_rejected: u64,
    /// Chunks whose context came from the context cache (no model call).
    pub contexts_cached: u64,
    /// Chunks the contextualizer left for later, with a reason (a budget reached).
    pub contexts_deferred: u64,
    /// Tokens of document text the contextualizer read.
    pub document_tokens: u64,
    /// Inputs skipped, with reasons.
    pub skipped: Vec<Skipped>,
    /// Tokens the contextualizer spent.
    pub usage: TokenUsage,
    /// Texts embedded (cache misses).
    pub embedded: u64,
    /// Chunks whose embedding failed (stored and BM25-indexed without a vector;
    /// `situate rebuild` embeds them).
    pub embedding_failures: u64,
    /// The first embedding failure's reason.
    pub embedding_error: Option<String>,
    /// The embedder model used, if any.
    pub embed_model: Option<String>,
    /// The texts embedded in this run whose input was longer than the embedder reads.
    pub embed_cut: EmbedCut,
    /// Whether the run was cancelled ([`Engine::cancel_on`]) before it read every input:
    /// the documents whose contexts were written are committed, the rest are not stored,
    /// so running it again finishes the work.
    pub cancelled: bool,
}

/// Embedding inputs cut to the embedder's window (context + chunk longer than it reads):
/// in an ingest's report (the texts it embedded) and in `stats` (the index's cards).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct EmbedCut {
    /// Texts whose input was cut.
    pub texts: u64,
    /// The tokens those inputs had, all together.
    pub input_tokens: u64,
    /// The tokens cut from them (never embedded), all together.
    pub tokens: u64,
    /// The embedder's window in tokens (prompt and special tokens included), when known.
    pub window: Option<usize>,
}

impl IngestReport {
    /// Documents that are in the index as read (added, replaced or unchanged).
    pub fn documents_ok(&self) -> u64 {
        self.added + self.replaced + self.unchanged
    }
}

struct Prepared {
    doc: Document,
    key: String,
    spans: Vec<ChunkSpan>,
    contexts: Vec<ChunkContext>,
    replaced: bool,
}

impl Engine {
    /// Ingests every path: new and changed documents are chunked, contextualized, stored and
    /// indexed in committed batches; unchanged ones are left alone; bad inputs are reported
    /// in [`IngestReport::skipped`] and the rest goes on.
    pub fn ingest(
        &mut self,
        paths: &[PathBuf],
        mut opts: IngestOptions,
        on_event: &mut dyn FnMut(IngestEvent<'_>),
    ) -> Result<IngestReport> {
        self.require_writer()?;
        let chunker = Chunker::new(opts.chunker.clone())?;
        opts.sources.exclude.push(self.dir.clone());
        let ctx = opts.contextualizer.as_ref();
        let cache_writer = if ctx.remembers() {
            Some(self.store.context_cache_writer()?)
        } else {
            None
        };
        let mut report = IngestReport::default();
        let mut pending: Vec<Prepared> = Vec::new();
        let mut pending_bytes = 0usize;
        // Documents read and chunked, waiting for their contexts: up to `in_flight` are
        // contextualized at the same time.
        let mut waiting: Vec<Waiting<Fresh>> = Vec::new();
        let in_flight = ctx.documents_in_flight().max(1);

        let texts = std::mem::take(&mut opts.texts);
        for item in read_documents(paths, texts, &opts) {
            if self.cancel_requested() {
                report.cancelled = true;
                break;
            }
            let mut doc = match item {
                Ok(d) => d,
                Err(s) => {
                    on_event(IngestEvent::Skipped(&s));
                    report.skipped.push(s);
                    continue;
                }
            };
            let key = ingest_key(&doc, &chunker, ctx);
            let stored = self.store.document_state(&doc.id)?;
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
                    on_event(IngestEvent::Skipped(&s));
                    report.skipped.push(s);
                    continue;
                }
            };
            waiting.push(Waiting {
                doc,
                spans,
                item: Fresh {
                    key,
                    replaced: stored.is_some(),
                },
            });
            if waiting.len() >= in_flight {
                self.settle_fresh(
                    &opts,
                    cache_writer.as_ref(),
                    &mut waiting,
                    &mut pending,
                    &mut pending_bytes,
                    &mut report,
                    on_event,
                )?;
            }
        }
        // Cancelled: the documents still waiting for their contexts are left for the next
        // run (not stored, so not "unchanged" then); those with contexts are committed.
        if !report.cancelled {
            self.settle_fresh(
                &opts,
                cache_writer.as_ref(),
                &mut waiting,
                &mut pending,
                &mut pending_bytes,
                &mut report,
                on_event,
            )?;
        }
        if opts.dry_run {
            return Ok(report);
        }
        self.flush(&mut pending, &mut report, on_event)?;
        self.bm25.finish_merges()?;
        self.save_vectors()?;
        report.embed_model = self.embed_settings()?.model;
        Ok(report)
    }

    /// The one context-settling step of an ingest and of a context run over stored cards
    /// ([`Engine::recontextualize`]): contextualizes the waiting documents together (taking
    /// what the context cache holds), then hands each on, in reading order, with its
    /// contexts to `on_done`, which queues it and writes a batch when one is full.
    pub(crate) fn settle<T>(
        &mut self,
        ctx: &dyn Contextualizer,
        cache_writer: Option<&situate_store::ContextCacheWriter>,
        waiting: &mut Vec<Waiting<T>>,
        report: &mut IngestReport,
        on_done: &mut OnSettled<'_, T>,
    ) -> Result<()> {
        if waiting.is_empty() {
            return Ok(());
        }
        let docs: Vec<(&Document, &[ChunkSpan])> = waiting
            .iter()
            .map(|w| (&w.doc, w.spans.as_slice()))
            .collect();
        let cache = LocalCache {
            store: &self.store,
            writer: cache_writer,
        };
        let all = contextualize_many(self.runtime()?, ctx, &cache, &docs, report)?;
        for (w, contexts) in waiting.drain(..).zip(all) {
            on_done(self, w, contexts, report)?;
        }
        Ok(())
    }

    /// [`Engine::settle`] for an ingest: each document goes to the pending batch, which is
    /// committed when it is full.
    #[allow(clippy::too_many_arguments)]
    fn settle_fresh(
        &mut self,
        opts: &IngestOptions,
        cache_writer: Option<&situate_store::ContextCacheWriter>,
        waiting: &mut Vec<Waiting<Fresh>>,
        pending: &mut Vec<Prepared>,
        pending_bytes: &mut usize,
        report: &mut IngestReport,
        on_event: &mut dyn FnMut(IngestEvent<'_>),
    ) -> Result<()> {
        self.settle(
            opts.contextualizer.as_ref(),
            cache_writer,
            waiting,
            report,
            &mut |engine, w, contexts, report| {
                let Waiting {
                    doc,
                    spans,
                    item: Fresh { key, replaced },
                } = w;
                on_event(IngestEvent::Contextualized {
                    chunks: report.chunks + spans.len() as u64,
                    usage: report.usage,
                    cached: report.contexts_cached,
                });
                report.chunks += spans.len() as u64;
                if replaced {
                    report.replaced += 1;
                } else {
                    report.added += 1;
                }
                if opts.dry_run {
                    return Ok(());
                }
                on_event(IngestEvent::Document {
                    id: &doc.id,
                    outcome: if replaced { "replaced" } else { "added" },
                    chunks: spans.len(),
                });
                *pending_bytes += doc.text.len();
                pending.push(Prepared {
                    doc,
                    key,
                    spans,
                    contexts,
                    replaced,
                });
                if pending.len() >= opts.batch_documents || *pending_bytes >= opts.batch_bytes {
                    engine.flush(pending, report, on_event)?;
                    *pending_bytes = 0;
                }
                Ok(())
            },
        )
    }

    /// The vectors of the pending documents' chunks (context and original) that the cache
    /// does not hold; with `late`, each document read once and its chunks' vectors pooled
    /// from their spans.
    fn embed_pending(
        &self,
        pending: &[Prepared],
        late: bool,
        on_event: &mut dyn FnMut(IngestEvent<'_>),
    ) -> Result<crate::vectors::Embedded> {
        if late {
            // Each document read once; the chunks' vectors pooled from their spans.
            let docs = pending
                .iter()
                .map(|p| crate::vectors::LateDocument {
                    text: p.doc.text.clone(),
                    chunks: p
                        .spans
                        .iter()
                        .zip(&p.contexts)
                        .map(|(s, c)| {
                            let ctx = c.text.as_deref().filter(|_| c.status.is_indexed());
                            // The card's original (a table piece's header row, then its
                            // span): its hash is the card's, as `text_hash` computes it.
                            let h =
                                crate::vectors::embedding_input(ctx, &s.original(&p.doc.text)).0;
                            (
                                crate::vectors::late_key(&p.doc.id, &h),
                                (s.byte_start, s.byte_end),
                            )
                        })
                        .collect(),
                })
                .collect();
            self.embed_late_documents(self.runtime()?, docs, &mut |done, total| {
                on_event(IngestEvent::Embedding { done, total })
            })
        } else {
            let texts: Vec<(String, situate_core::PassageInput)> = pending
                .iter()
                .flat_map(|p| {
                    p.spans.iter().zip(&p.contexts).map(|(s, c)| {
                        let ctx = c.text.as_deref().filter(|_| c.status.is_indexed());
                        crate::vectors::embedding_input(ctx, &s.original(&p.doc.text))
                    })
                })
                .collect();
            self.embed_missing(self.runtime()?, texts, &mut |done, total| {
                on_event(IngestEvent::Embedding { done, total })
            })
        }
    }

    /// Commits the pending documents to the store, then brings the index up to date.
    fn flush(
        &mut self,
        pending: &mut Vec<Prepared>,
        report: &mut IngestReport,
        on_event: &mut dyn FnMut(IngestEvent<'_>),
    ) -> Result<()> {
        if pending.is_empty() {
            return Ok(());
        }
        // Embeddings first (the slow part), outside the store transaction; they are
        // cached in the same transaction as the cards.
        let languages: Vec<situate_core::Language> =
            pending.iter().map(|p| p.doc.language).collect();
        self.choose_embedder(&languages)?;
        let late = self.late_chunking()?;
        let embedded = self.embed_pending(pending, late, on_event)?;
        report.embedded += embedded.vectors.len() as u64;
        report.embedding_failures += embedded.failed as u64;
        report.embed_cut.texts += embedded.cuts.len() as u64;
        report.embed_cut.tokens += embedded.cuts.iter().map(|c| c.2).sum::<u64>();
        report.embed_cut.input_tokens += embedded.cuts.iter().map(|c| c.1).sum::<u64>();
        report.embed_cut.window = report.embed_cut.window.or(embedded.window);
        if report.embedding_error.is_none() {
            report.embedding_error = embedded.reason.clone();
        }
        let model = self.embed_settings()?.model;
        let mut batch = self.store.batch()?;
        if let Some(model) = &model {
            if late {
                batch.replace_embeddings(model, &embedded.cache_rows())?;
            } else {
                batch.put_embeddings(model, &embedded.cache_rows())?;
            }
            batch.put_embedding_cuts(model, &embedded.cut_rows())?;
        }
        for p in pending.iter() {
            let originals: Vec<_> = p.spans.iter().map(|s| s.original(&p.doc.text)).collect();
            let chunks = NewChunk::of_spans(&p.doc.id, &p.spans, &originals, &p.contexts);
            match batch.put_document(&p.doc, &p.key, &chunks) {
                Ok(()) => {}
                Err(situate_store::StoreError::Conflict(reason)) => {
                    // This document only is refused; undo its counts.
                    report.chunks -= p.spans.len() as u64;
                    if p.replaced {
                        report.replaced -= 1;
                    } else {
                        report.added -= 1;
                    }
                    let s = Skipped {
                        source: p.doc.source.clone(),
                        reason,
                    };
                    on_event(IngestEvent::Skipped(&s));
                    report.skipped.push(s);
                }
                Err(e) => return Err(e.into()),
            }
        }
        let generation = batch.commit()?;
        pending.clear();
        crash_point("store-commit");
        self.sync_index()?;
        on_event(IngestEvent::Committed { generation });
        Ok(())
    }
}

/// The documents of `paths`, then `texts` (the ingest's, taken out of its options), as an
/// ingest takes them: each id once (a second document with an id already read is skipped,
/// naming the first), with the ingest's `--meta` added; inputs that cannot be read are
/// skipped with their reason.
pub fn read_documents<'a>(
    paths: &[PathBuf],
    texts: Vec<TextInput>,
    opts: &'a IngestOptions,
) -> impl Iterator<Item = std::result::Result<Document, Skipped>> + 'a {
    let mut seen: HashMap<String, String> = HashMap::new();
    let texts = texts.into_iter().map(|t| text_document(t, &opts.sources));
    read_sources(paths, &opts.sources)
        .chain(texts)
        .map(move |item| {
            let mut doc = match item {
                SourceItem::Skipped(s) => return Err(s),
                SourceItem::Document(d) => *d,
            };
            if let Some(first) = seen.get(&doc.id) {
                return Err(Skipped {
                    source: doc.source.clone(),
                    reason: format!(
                        "duplicate document id {:?} (first read from {first})",
                        doc.id
                    ),
                });
            }
            seen.insert(doc.id.clone(), doc.source.clone());
            for (k, v) in &opts.metadata {
                doc.metadata
                    .insert(k.clone(), serde_json::Value::String(v.clone()));
            }
            Ok(doc)
        })
}

/// A document's chunks: the source's own, or the chunker's; a document with no text to
/// chunk is skipped.
pub fn chunk_spans(
    doc: &mut Document,
    chunker: &Chunker,
) -> std::result::Result<Vec<ChunkSpan>, Skipped> {
    let spans = match doc.preset_chunks.take() {
        Some(s) => s,
        None => chunker.chunk_document(doc),
    };
    if spans.is_empty() {
        return Err(Skipped {
            source: doc.source.clone(),
            reason: "no text to chunk".into(),
        });
    }
    Ok(spans)
}

/// A document's ingest key: its content with everything that decides its cards (chunker,
/// contextualizer, language, kind, metadata). A document stored under the same key is
/// unchanged and is left alone.
pub fn ingest_key(doc: &Document, chunker: &Chunker, ctx: &dyn Contextualizer) -> String {
    let metadata = serde_json::Value::Object(doc.metadata.clone()).to_string();
    // Markdown-like kinds are cut by structure (tables and figures as cards of their own,
    // places), so their keys carry that rule's version; the keys of other kinds are as
    // before.
    let chunk_settings = if doc.preset_chunks.is_some() {
        "preset".to_string()
    } else if doc.kind.is_structured() {
        format!("{};structure-v1", chunker.fingerprint())
    } else {
        chunker.fingerprint().to_string()
    };
    hash_parts(&[
        doc.content_hash.as_bytes(),
        chunk_settings.as_bytes(),
        ctx.fingerprint().as_bytes(),
        doc.language.code().as_bytes(),
        doc.kind.as_stored().as_bytes(),
        metadata.as_bytes(),
    ])
}

/// What [`Engine::settle`] calls with each document and its contexts.
pub(crate) type OnSettled<'a, T> =
    dyn FnMut(&mut Engine, Waiting<T>, Vec<ChunkContext>, &mut IngestReport) -> Result<()> + 'a;

/// A document waiting for its contexts, with what its caller keeps about it.
pub(crate) struct Waiting<T> {
    /// The document.
    pub doc: Document,
    /// Its chunks.
    pub spans: Vec<ChunkSpan>,
    /// The caller's own.
    pub item: T,
}

/// What an ingest keeps about a document read and chunked.
struct Fresh {
    key: String,
    replaced: bool,
}
