//! The contextualizer stage: a trait that writes situating contexts for the chunks of one
//! document at a time.

use crate::{ChunkSpan, ContextStatus, DocKind, Language, Provenance};
use serde::Serialize;

/// A document as a contextualizer sees it.
#[derive(Debug, Clone, Copy)]
pub struct DocumentView<'a> {
    /// The document id.
    pub id: &'a str,
    /// Its source (path or corpus record).
    pub source: &'a str,
    /// Its title, if any.
    pub title: Option<&'a str>,
    /// Its language.
    pub language: Language,
    /// What kind of text it is.
    pub kind: &'a DocKind,
    /// The whole text.
    pub text: &'a str,
    /// Hash of the document's content.
    pub content_hash: &'a str,
}

impl<'a> DocumentView<'a> {
    /// The view of a whole document.
    pub fn of(doc: &'a crate::Document) -> Self {
        DocumentView {
            id: &doc.id,
            source: &doc.source,
            title: doc.title.as_deref(),
            language: doc.language,
            kind: &doc.kind,
            text: &doc.text,
            content_hash: &doc.content_hash,
        }
    }
}

/// One chunk of that document.
#[derive(Debug, Clone, Copy)]
pub struct ChunkView<'a> {
    /// Where the chunk lies.
    pub span: &'a ChunkSpan,
    /// The chunk's text.
    pub text: &'a str,
}

impl<'a> ChunkView<'a> {
    /// The chunks `spans` of `text`, in order.
    pub fn all(text: &'a str, spans: &'a [ChunkSpan]) -> Vec<Self> {
        spans
            .iter()
            .map(|s| ChunkView {
                span: s,
                text: &text[s.byte_start..s.byte_end],
            })
            .collect()
    }
}

/// Tokens spent, with the prompt-cache split where the provider reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct TokenUsage {
    /// Input tokens billed at the full rate.
    pub input_tokens: u64,
    /// Input tokens written to a prompt cache.
    pub cache_creation_input_tokens: u64,
    /// Input tokens read from a prompt cache.
    pub cache_read_input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
}

impl TokenUsage {
    /// Adds another usage to this one.
    pub fn add(&mut self, other: &TokenUsage) {
        self.input_tokens += other.input_tokens;
        self.cache_creation_input_tokens += other.cache_creation_input_tokens;
        self.cache_read_input_tokens += other.cache_read_input_tokens;
        self.output_tokens += other.output_tokens;
    }
}

/// The outcome for one chunk.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkContext {
    /// The context, if one was written.
    pub text: Option<String>,
    /// Its status (`pending` for none, `generated`, `failed`...).
    pub status: ContextStatus,
    /// Where it came from (`None` when no context was attempted).
    pub provenance: Option<Provenance>,
    /// Reasons for a failure or rejection.
    pub notes: Vec<String>,
}

impl ChunkContext {
    /// No context: the chunk is indexed as its original alone.
    pub fn none() -> Self {
        ChunkContext {
            text: None,
            status: ContextStatus::Pending,
            provenance: None,
            notes: vec![],
        }
    }
}

/// The outcome for one document: one [`ChunkContext`] per chunk, in chunk order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DocumentContexts {
    /// One entry per chunk given, same order.
    pub contexts: Vec<ChunkContext>,
    /// Tokens spent on this document.
    pub usage: TokenUsage,
    /// Tokens of document text the contextualizer read (once per document), for costs per
    /// million document tokens; 0 when it reads none.
    pub document_tokens: u64,
}

/// A contextualizer failed for a whole document (a per-chunk failure is a
/// [`ContextStatus::Failed`] entry instead).
#[derive(Debug, thiserror::Error)]
#[error("contextualizer {method} failed on document {document_id}: {message}")]
pub struct ContextError {
    /// The contextualizer.
    pub method: String,
    /// The document.
    pub document_id: String,
    /// What went wrong.
    pub message: String,
}

/// Receives each context as soon as it is written, before the rest of its document is done,
/// so that work already paid for (an LLM call) survives a crash: the engine stores it in the
/// context cache, keyed by [`Contextualizer::input_hash`].
pub trait ContextSink: Send + Sync {
    /// Chunk `chunk` (its index in the call's chunk list) has its context.
    fn finished(&self, chunk: usize, context: &ChunkContext, usage: &TokenUsage);

    /// A context-cache entry under a key of the contextualizer's own, for work that is not
    /// one chunk's final context (a document's description, a chunk note that a composed
    /// context is built from): what was kept under `key`, if anything. The default keeps
    /// nothing.
    fn recall(&self, _key: &str) -> Option<ChunkContext> {
        None
    }

    /// Keeps `context` under `key` in the context cache (see [`ContextSink::recall`]).
    fn keep(&self, _key: &str, _context: &ChunkContext, _usage: &TokenUsage) {}
}

/// A sink that keeps nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoSink;

impl ContextSink for NoSink {
    fn finished(&self, _: usize, _: &ChunkContext, _: &TokenUsage) {}
}

/// The key of one chunk's context under a contextualizer's `fingerprint`: the fingerprint,
/// the document's content, the chunk's place and text ([`Contextualizer::input_hash`]; a
/// contextualizer whose fingerprint depends on the document keys with this too).
pub fn chunk_key(fingerprint: &str, doc: &DocumentView<'_>, chunk: &ChunkView<'_>) -> String {
    crate::hash_parts(&[
        fingerprint.as_bytes(),
        doc.content_hash.as_bytes(),
        &(chunk.span.byte_start as u64).to_le_bytes(),
        chunk.text.as_bytes(),
    ])
}

/// Writes situating contexts for chunks.
///
/// Calls are per document: every chunk of one document comes in one call, so an LLM
/// implementation can cache the document prefix (Anthropic prompt caching, a local KV cache)
/// and schedule the chunks around it. Asynchronous so hosted implementations can overlap
/// requests; implementations report the tokens they spent.
#[async_trait::async_trait]
pub trait Contextualizer: Send + Sync {
    /// The method name recorded in provenance (`none`, `structural`, ...).
    fn method(&self) -> &str;

    /// A fingerprint of everything that changes the output (method, model, prompt version,
    /// settings). Documents ingested under another fingerprint are re-contextualized.
    fn fingerprint(&self) -> String;

    /// Whether finished contexts are worth keeping in the context cache (true for LLMs,
    /// whose contexts cost time or money; rule-based ones are cheaper to redo).
    fn remembers(&self) -> bool {
        false
    }

    /// The key of one chunk's context: everything that determines it (this contextualizer's
    /// fingerprint, the document's content, the chunk's text and place).
    fn input_hash(&self, doc: &DocumentView<'_>, chunk: &ChunkView<'_>) -> String {
        chunk_key(&self.fingerprint(), doc, chunk)
    }

    /// A context taken from the context cache, checked again as a new one would be now (the
    /// checks may have changed since it was written). The default keeps it as cached.
    fn recheck(
        &self,
        _doc: &DocumentView<'_>,
        _chunk: &ChunkView<'_>,
        cached: ChunkContext,
    ) -> ChunkContext {
        cached
    }

    /// How many documents the caller may contextualize at the same time (concurrent calls
    /// of [`Contextualizer::contextualize`]): 1 unless the work is remote, where several
    /// documents keep the requests flowing while one document waits for its first reply.
    fn documents_in_flight(&self) -> usize {
        1
    }

    /// Contexts for `chunks` of `doc`, one per chunk, in order; each is also given to `sink`
    /// as soon as it is written.
    async fn contextualize(
        &self,
        doc: DocumentView<'_>,
        chunks: &[ChunkView<'_>],
        sink: &dyn ContextSink,
    ) -> Result<DocumentContexts, ContextError>;
}
