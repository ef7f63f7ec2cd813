//! From an embedder's name in settings (`all-minilm-l6-v2`, a model directory, ...) to a
//! loaded [`Embedder`].

use crate::bert::{BertEmbedder, BertOptions};
use crate::encoder::Precision;
use situate_core::{EmbedError, Embedder, Language};
use situate_models::{CATALOG, Role};
use std::path::Path;

/// The English default.
pub const ENGLISH_DEFAULT: &str = "all-minilm-l6-v2";
/// The default for every other language and mixed corpora. all-MiniLM is English-only (a
/// Russian query and its English passage have a cosine near 0.05).
pub const MULTILINGUAL_DEFAULT: &str = "multilingual-e5-small";

/// The default embedder for a corpus whose documents have these languages: MiniLM when at
/// least 95% are English, [`MULTILINGUAL_DEFAULT`] otherwise.
pub fn default_for(languages: &[Language]) -> &'static str {
    let english = languages.iter().filter(|l| **l == Language::En).count();
    if !languages.is_empty() && english * 100 >= languages.len() * 95 {
        ENGLISH_DEFAULT
    } else {
        MULTILINGUAL_DEFAULT
    }
}

/// The environment variable that chooses the arithmetic of a local BERT model's query
/// embeddings: `q8` (the default) or `f32`.
pub const QUERY_PRECISION_ENV: &str = "SITUATE_QUERY_PRECISION";

/// A local BERT model's query arithmetic from [`QUERY_PRECISION_ENV`]'s value (unset: Q8).
pub fn query_precision(value: Option<&str>) -> Result<Precision, String> {
    match value.map(str::trim) {
        None | Some("") | Some("q8") => Ok(Precision::Q8),
        Some("f32") => Ok(Precision::F32),
        Some(other) => Err(format!(
            "{QUERY_PRECISION_ENV}={other:?}: expected q8 (the default) or f32"
        )),
    }
}

/// The options of a local BERT embedder: the defaults, with the query arithmetic of
/// [`QUERY_PRECISION_ENV`].
fn bert_options() -> Result<BertOptions, String> {
    let value = std::env::var(QUERY_PRECISION_ENV).ok();
    Ok(BertOptions {
        query_precision: query_precision(value.as_deref())?,
        ..BertOptions::default()
    })
}

/// Loads the embedder `spec` names: a model of the catalog (installed with `situate models
/// install`), or a path to a Hugging Face BERT directory (`config.json`, `tokenizer.json`,
/// `model.safetensors`).
pub fn resolve(spec: &str) -> Result<Box<dyn Embedder>, EmbedError> {
    let fail = |message: String| EmbedError {
        model: spec.to_string(),
        message,
    };
    if let Some(entry) = CATALOG.iter().find(|e| e.name == spec) {
        if entry.role != Role::Embedding {
            return Err(fail(format!(
                "{} is not an embedding model ({})",
                entry.name, entry.about
            )));
        }
        let dir = situate_models::ensure(entry, "the embedder of this index")
            .map_err(|e| fail(e.to_string()))?;
        let id = format!("{}@{}", entry.name, entry.version);
        if entry.name == "multilingual-e5-small" {
            return Ok(Box::new(crate::e5::E5Embedder::load(&dir, id)?));
        }
        return Ok(Box::new(
            BertEmbedder::load(&dir, bert_options().map_err(fail)?)?.with_id(id),
        ));
    }
    if crate::hosted::is_hosted(spec) {
        return Ok(Box::new(crate::hosted::HostedEmbedder::from_spec(spec)?));
    }
    if let Some(dim) = spec.strip_prefix("hash:") {
        let dim: usize = dim
            .parse()
            .ok()
            .filter(|d| (2..=4096).contains(d))
            .ok_or_else(|| fail("hash:DIM needs a dimension from 2 to 4096".into()))?;
        return Ok(Box::new(crate::hashing::HashEmbedder::new(dim)));
    }
    let path = Path::new(spec);
    if path.is_dir() {
        let canonical = path.canonicalize().map_err(|e| fail(e.to_string()))?;
        // The weights' size is part of the id, so replacing the model in place does not
        // reuse embeddings cached from the old one.
        let size = std::fs::metadata(canonical.join("model.safetensors"))
            .map(|m| m.len())
            .unwrap_or(0);
        let id = format!("bert:{}:{size}", canonical.display());
        return Ok(Box::new(
            BertEmbedder::load(&canonical, bert_options().map_err(fail)?)?.with_id(id),
        ));
    }
    Err(fail(format!(
        "unknown embedder: expected one of {}, openai:MODEL, ollama:MODEL, voyage:MODEL, gemini:MODEL, hash:DIM, or a model directory",
        CATALOG
            .iter()
            .filter(|e| e.role == Role::Embedding)
            .map(|e| e.name)
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_llm_of_the_catalog_is_not_an_embedder() {
        let e = resolve("smollm2-135m-instruct").err().expect("refused");
        assert!(e.to_string().contains("not an embedding model"), "{e}");
        let e = resolve("no-such-model").err().expect("refused").to_string();
        assert!(
            e.contains("all-minilm-l6-v2") && !e.contains("smollm2"),
            "{e}"
        );
    }

    #[test]
    fn english_corpora_get_minilm_and_the_rest_e5() {
        use Language::*;
        assert_eq!(default_for(&[En; 20]), ENGLISH_DEFAULT);
        let mut mixed = vec![En; 19];
        mixed.push(Ru);
        assert_eq!(default_for(&mixed), ENGLISH_DEFAULT);
        mixed.push(Zh);
        assert_eq!(default_for(&mixed), MULTILINGUAL_DEFAULT);
        assert_eq!(default_for(&[Ru]), MULTILINGUAL_DEFAULT);
    }

    #[test]
    fn query_precision_is_q8_unless_f32_is_asked_for() {
        assert_eq!(query_precision(None), Ok(Precision::Q8));
        assert_eq!(query_precision(Some("")), Ok(Precision::Q8));
        assert_eq!(query_precision(Some("q8")), Ok(Precision::Q8));
        assert_eq!(query_precision(Some(" f32 ")), Ok(Precision::F32));
        let e = query_precision(Some("f16")).expect_err("refused");
        assert!(
            e.contains("SITUATE_QUERY_PRECISION") && e.contains("f32"),
            "{e}"
        );
    }

    #[test]
    fn unknown_names_and_missing_models_say_what_to_do() {
        let e = resolve("no-such-model").err().expect("unknown");
        assert!(e.to_string().contains("all-minilm-l6-v2"), "{e}");
    }
}
