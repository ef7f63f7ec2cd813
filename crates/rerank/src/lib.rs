//! Rerankers: the third stage of Contextual Retrieval, re-scoring the fused top hits.
//!
//! - [`cross::CrossEncoder`]: local cross-encoders in candle from any Hugging Face directory
//!   (BERT sequence classification: ms-marco MiniLM, TinyBERT; XLM-RoBERTa: bge-reranker).
//! - [`hosted::HostedReranker`]: Cohere, Voyage, Jina, TEI, vLLM and Infinity over HTTP.
//! - [`llm::LlmReranker`]: an LLM's yes/no judgement, scored by the probability of "yes"
//!   (the local GGUF model, or any hosted LLM of `situate-llm`).
//! - [`resolve()`]: from a setting (`none`, `cross-encoder:DIR`, `llm`, `cohere:MODEL`, ...)
//!   to a reranker.
//!
//! The stage itself (which hits are re-scored, how scores become a ranking) is
//! `situate_search::rerank`; the trait is [`situate_core::Reranker`].
#![warn(missing_docs)]

pub mod cross;
pub mod hosted;
pub mod llm;

pub use situate_core::{RerankError, RerankPassage, Reranker};

#[cfg(test)]
mod tests;

/// The reranker names `resolve` understands, for help texts and errors.
pub const FORMS: &str = "none, cross-encoder:DIR[?max_tokens=N&batch=N&long=truncate|max&stride=N], \
llm (the local LLM judge), llm:LLM (a GGUF path or a hosted LLM such as llm:openai:gpt-4o-mini), \
cohere:MODEL, voyage:MODEL, jina:MODEL, tei:MODEL, vllm:MODEL, infinity:MODEL";

/// Passages are cut at this many characters for an LLM judge.
pub const LLM_MAX_CHARS: usize = 2000;

/// Loads the reranker `spec` names: `None` for `none`. `default_llm` is the LLM `llm`
/// alone means (the `[llm]` model setting, or the catalog's local default).
pub fn resolve(spec: &str, default_llm: &str) -> Result<Option<Box<dyn Reranker>>, RerankError> {
    let spec = spec.trim();
    let fail = |message: String| RerankError {
        reranker: spec.to_string(),
        message,
    };
    if spec == "none" {
        return Ok(None);
    }
    if spec == "llm" || spec.starts_with("llm:") {
        let llm_spec = spec.strip_prefix("llm:").unwrap_or(default_llm);
        let llm = situate_llm::resolve(llm_spec).map_err(|e| fail(e.to_string()))?;
        return Ok(Some(Box::new(llm::LlmReranker::new(llm, LLM_MAX_CHARS))));
    }
    if hosted::is_hosted(spec) {
        return Ok(Some(Box::new(hosted::HostedReranker::from_spec(spec)?)));
    }
    let (path, options) = match spec.strip_prefix("cross-encoder:") {
        Some(rest) => rest.split_once('?').unwrap_or((rest, "")),
        None if std::path::Path::new(spec).join("config.json").is_file() => (spec, ""),
        None => return Err(fail(format!("unknown reranker: expected {FORMS}"))),
    };
    let options = cross::CrossOptions::parse(options).map_err(fail)?;
    let dir = std::path::Path::new(path);
    if !dir.is_dir() {
        return Err(fail(format!("{} is not a directory", dir.display())));
    }
    Ok(Some(Box::new(cross::CrossEncoder::load(dir, options)?)))
}
