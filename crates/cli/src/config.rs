//! `situate.toml`: optional settings, overridden by command-line flags.
//!
//! ```toml
//! index = ".situate"          # index directory
//!
//! [chunk]
//! max_tokens = 256
//! overlap_tokens = 32
//! tokenizer = "path/to/tokenizer.json"   # count real tokens
//!
//! [ingest]
//! context = "structural"      # none | structural | llm
//! language = "en"             # force a language (no detection)
//! default_language = "en"     # when detection is unsure
//!
//! [search]
//! k = 10
//! bm25 = "contextual"         # plain | contextual
//! context_weight = 0.5
//! mode = "hybrid"             # bm25 | vector | hybrid
//! fetch = 150                 # hits per leg before fusion
//! fusion = "rrf"              # rrf | minmax
//! rrf_k = 60
//! bm25_weight = 1.0
//! vector_weight = 1.0
//! rerank = "none"             # none | cross-encoder:DIR | llm | llm:LLM | cohere:MODEL | ...
//! rerank_depth = 150          # fused hits the reranker re-scores
//!
//! [embed]
//! embedder = "auto"           # auto | none | all-minilm-l6-v2 | multilingual-e5-small | DIR
//! vector_index = "auto"       # auto | exact | hnsw (used when an index is created)
//!
//! [bm25]
//! chinese = "bigram"          # bigram | jieba, used when an index is created
//!
//! [llm]                       # the model that writes contexts (context = "llm")
//! model = "smollm2-135m-instruct"   # or a .gguf path
//! template = "prompt.txt"     # {{WHOLE_DOCUMENT}} ... {{CHUNK_CONTENT}}; default: Anthropic's
//! glossary = "glossary.txt"   # terms added to the prompt
//! long_documents = "window"   # window | head | fail
//! max_tokens = 160            # per context
//! document_tokens = 2048      # most document tokens per prompt
//! price = { input = 0.8, cache_write = 1.0, cache_read = 0.08, output = 4.0 }  # $/M tokens
//! ```

use anyhow::{Context, Result};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The local LLM used when `[llm] model` is not set.
pub const DEFAULT_LLM: &str = "smollm2-135m-instruct";

/// Every setting; unknown keys are an error (a typo should not be silently ignored).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub index: Option<PathBuf>,
    #[serde(default)]
    pub chunk: ChunkSettings,
    #[serde(default)]
    pub ingest: IngestSettings,
    #[serde(default)]
    pub search: SearchSettings,
    #[serde(default)]
    pub bm25: Bm25Settings,
    #[serde(default)]
    pub embed: EmbedSettings,
    #[serde(default)]
    pub llm: LlmSettings,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbedSettings {
    pub embedder: Option<String>,
    pub vector_index: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChunkSettings {
    pub max_tokens: Option<usize>,
    pub overlap_tokens: Option<usize>,
    pub tokenizer: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestSettings {
    pub context: Option<String>,
    pub language: Option<String>,
    pub default_language: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchSettings {
    pub k: Option<usize>,
    pub bm25: Option<String>,
    pub context_weight: Option<f32>,
    pub mode: Option<String>,
    pub fetch: Option<usize>,
    pub fusion: Option<String>,
    pub rrf_k: Option<f32>,
    pub bm25_weight: Option<f32>,
    pub vector_weight: Option<f32>,
    pub rerank: Option<String>,
    pub rerank_depth: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmSettings {
    pub model: Option<String>,
    pub template: Option<PathBuf>,
    pub glossary: Option<PathBuf>,
    pub long_documents: Option<String>,
    pub max_tokens: Option<usize>,
    pub document_tokens: Option<usize>,
    pub price: Option<situate_llm::cost::Price>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bm25Settings {
    pub chinese: Option<String>,
}

impl Settings {
    /// The LLM that writes contexts and that `--rerank llm` uses: `[llm] model`, or the
    /// local default.
    pub fn default_llm(&self) -> String {
        self.llm
            .model
            .clone()
            .unwrap_or_else(|| DEFAULT_LLM.to_string())
    }

    /// Reads `path`, or `./situate.toml` when no path is given and it exists.
    pub fn load(path: Option<&Path>) -> Result<Settings> {
        let path = match path {
            Some(p) => p.to_path_buf(),
            None => {
                let p = PathBuf::from("situate.toml");
                if !p.is_file() {
                    return Ok(Settings::default());
                }
                p
            }
        };
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("in {}", path.display()))
    }

    pub fn index_dir(&self) -> PathBuf {
        self.index
            .clone()
            .unwrap_or_else(|| PathBuf::from(".situate"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_errors() {
        assert!(toml::from_str::<Settings>("[chunk]\nmax_token = 3\n").is_err());
        let s: Settings = toml::from_str("index = \"x\"\n[search]\nk = 3\n").expect("valid");
        assert_eq!(s.search.k, Some(3));
        assert_eq!(s.index_dir(), PathBuf::from("x"));
    }
}
