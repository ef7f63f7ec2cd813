//! situate's vocabulary, shared by every pipeline stage.
//!
//! This crate is small on purpose (no tantivy, no SQLite, no models) so that everything that
//! only needs the types and traits builds in seconds. It holds:
//!
//! - the data model: [`Document`], [`ChunkSpan`], [`ChunkCard`] and the context that situates
//!   a chunk ([`ContextStatus`], [`Provenance`]);
//! - the stage traits: [`Contextualizer`] (writes contexts, asynchronous and batched per
//!   document), [`LexicalIndex`] (a BM25 leg), [`Embedder`], [`VectorIndex`] and
//!   [`Reranker`] (re-scores the fused top hits);
//! - [`Hit`], what a search returns: the context and the original text kept apart;
//! - the one rule that derives indexed text from a card: [`indexed_text`].
//!
//! ```
//! use situate_core::{indexed_text, content_hash};
//! assert_eq!(indexed_text(Some("From the 2023 report."), "Revenue grew 3%."),
//!            "From the 2023 report.\n\nRevenue grew 3%.");
//! assert_eq!(indexed_text(None, "Revenue grew 3%."), "Revenue grew 3%.");
//! assert_eq!(content_hash(b"abc").len(), 64);
//! ```
#![warn(missing_docs)]

mod context;
pub mod cpu;
mod embed;
mod eval_data;
mod model;
mod rerank;
mod vector;

pub use context::{
    ChunkContext, ChunkView, ContextError, ContextSink, Contextualizer, DocumentContexts,
    DocumentView, NoSink, TokenUsage, chunk_key,
};
pub use embed::{EmbedError, EmbedKind, Embedder, PassageInput};
pub use eval_data::EvalDataError;
pub use model::{
    CardKind, CardRecord, ChunkCard, ChunkSpan, ContextMethod, ContextPart, ContextStatus, DocKind,
    Document, Hit, Language, Layout, LegScore, PartKind, Place, PlaceUnit, Provenance,
};
pub use rerank::{RerankError, RerankPassage, Reranker};
pub use vector::{CardSet, DocumentFilter, VectorIndex, VectorQuery};

use std::fmt;

/// Hex blake3 hash of some bytes: the content hash of documents and of context inputs.
pub fn content_hash(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// Hex blake3 hash over several parts, each length-prefixed so that `("ab","c")` and
/// `("a","bc")` differ.
pub fn hash_parts(parts: &[&[u8]]) -> String {
    let mut h = blake3::Hasher::new();
    for p in parts {
        h.update(&(p.len() as u64).to_le_bytes());
        h.update(p);
    }
    h.finalize().to_hex().to_string()
}

/// The text an index sees for a chunk: the context, a blank line, then the original.
///
/// This is the *only* place the two are joined, and the result is never stored: cards keep
/// `original_text` and `generated_context` apart and every index is rebuilt from them. A chunk
/// without an accepted context is indexed as its original text alone.
pub fn indexed_text(context: Option<&str>, original: &str) -> String {
    match context.map(str::trim).filter(|c| !c.is_empty()) {
        Some(c) => format!("{c}\n\n{original}"),
        None => original.to_string(),
    }
}

/// Which text of a chunk a query is matched against.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum MatchOn {
    /// The original text only: plain BM25, as if no context existed.
    Plain,
    /// The context and the original: contextual BM25 (the default).
    #[default]
    Contextual,
}

impl fmt::Display for MatchOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MatchOn::Plain => "plain",
            MatchOn::Contextual => "contextual",
        })
    }
}

/// The default weight of the context fields relative to the original in contextual BM25.
///
/// Measured with structural contexts (`bench/bm25.sh`, BENCHMARKS.md): on Anthropic's
/// codebase set and on SciFact cut into 256-token chunks, 0.5 beat both 1.0 and plain BM25;
/// 1.0 was below plain on both. Tuned on those sets, so treat it as a starting point; LLM
/// contexts may want another value (`--context-weight`).
pub const DEFAULT_CONTEXT_WEIGHT: f32 = 0.5;

/// One result of a lexical index: the store's row key of the chunk card and its score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IndexHit {
    /// The card's row key in the store (stable while the card exists).
    pub card: u64,
    /// The leg's score (BM25 here): larger is better.
    pub score: f32,
}

/// A query to a lexical index.
#[derive(Debug, Clone)]
pub struct LexicalQuery<'a> {
    /// The user's text, analysed by the index the same way documents were.
    pub text: &'a str,
    /// How many hits to return.
    pub limit: usize,
    /// Plain or contextual matching.
    pub match_on: MatchOn,
    /// Weight of the context fields relative to the original (1.0 = equal).
    pub context_weight: f32,
    /// Analyse and match only documents of these languages (empty: every language present).
    pub languages: &'a [Language],
    /// Only these cards (a metadata filter), or all.
    pub filter: Option<&'a CardSet>,
}

/// Errors of a lexical index, boxed so the trait stays independent of the engine behind it.
pub type IndexError = Box<dyn std::error::Error + Send + Sync>;

/// A BM25 retrieval leg (tantivy in the embedded default; a distributed engine later).
pub trait LexicalIndex: Send + Sync {
    /// The best hits for a query, best first.
    fn search(&self, query: &LexicalQuery<'_>) -> Result<Vec<IndexHit>, IndexError>;
}

/// Now as RFC 3339 UTC (seconds), computed by hand: a date library for one timestamp is not
/// worth the dependency.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexed_text_skips_blank_contexts() {
        assert_eq!(indexed_text(Some("  "), "x"), "x");
        assert_eq!(indexed_text(Some(" c "), "x"), "c\n\nx");
    }

    #[test]
    fn hash_parts_is_unambiguous() {
        assert_ne!(hash_parts(&[b"ab", b"c"]), hash_parts(&[b"a", b"bc"]));
        assert_eq!(hash_parts(&[b"a"]), hash_parts(&[b"a"]));
    }
}
