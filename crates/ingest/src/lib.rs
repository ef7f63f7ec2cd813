//! Ingest: reading sources into [`situate_core::Document`]s, and cutting them into chunks.
//!
//! - [`sources`] walks file trees and reads the two corpus formats (BEIR `corpus.jsonl`,
//!   Anthropic's `codebase_chunks.json`). Every input becomes either a document or a
//!   [`sources::Skipped`] with a reason a person can act on; one bad file never stops a run.
//! - [`chunk`] is the token-aware chunker (built on `text-splitter`).
//! - [`lang`] detects a document's language, which picks its BM25 analyzer.
#![warn(missing_docs)]

pub mod chunk;
pub mod extract;
pub mod lang;
pub mod sources;

pub use chunk::{Chunker, ChunkerConfig, TokenCounter};
pub use sources::{
    Skipped, SourceFormat, SourceItem, SourceOptions, TEXT_KINDS, TextInput, read_sources,
    text_document,
};

/// Errors of the ingest stage that stop it as a whole (a bad *input* is a [`Skipped`] item).
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The chunker's settings are inconsistent.
    #[error("invalid chunker settings: {0}")]
    Config(String),
    /// A tokenizer file could not be loaded.
    #[error("cannot load tokenizer {path}: {message}")]
    Tokenizer {
        /// The tokenizer file.
        path: String,
        /// Why.
        message: String,
    },
}
