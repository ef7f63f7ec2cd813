//! Settings: `situate.toml`, read the same way by every front end (the CLI now; the service
//! next), and the one place where search settings are merged and checked.
//!
//! ```toml
//! index = ".situate"          # index directory
//!
//! [chunk]
//! max_tokens = 256            # else chosen per embedder when the index is made
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
//! fusion = "rrf"              # rrf | minmax | tm2c2 | zscore (else the index's own)
//! rrf_k = 60
//! alpha = 0.5                 # the vector leg's share: bm25 1 − alpha, vector alpha
//! bm25_weight = 1.0           # or the two weights apart (not with alpha)
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
//! [llm]                       # the model that writes contexts (llm, document, document+llm)
//! model = "qwen2.5-coder-0.5b-instruct"   # or smollm2-135m-instruct, a .gguf path, anthropic:…
//! prompt = "anthropic"        # anthropic | small (for small local models: small-v1)
//! # template = "prompt.txt"   # or your own (not with prompt): {{WHOLE_DOCUMENT}} ... {{CHUNK_CONTENT}}
//! glossary = "glossary.txt"   # terms added to the prompt
//! long_documents = "window"   # window | head | fail
//! max_tokens = 160            # per context
//! document_tokens = 2048      # most document tokens per prompt
//! price = { input = 0.8, cache_write = 1.0, cache_read = 0.08, output = 4.0 }  # $/M tokens
//! ```

use crate::{EngineError, Result};
use serde::{Deserialize, Serialize};
use situate_core::{DocumentFilter, Language, MatchOn};
use situate_search::fusion::Fusion;
use situate_search::{Mode, SearchRequest};
use std::path::{Path, PathBuf};

/// The local LLM used when `[llm] model` is not set: Qwen2.5-Coder-0.5B-Instruct, the
/// smallest catalog model whose contexts pass the checks (SmolLM2-135M's are mostly
/// rejected and never cut failures; the 1.5B writes at half its speed). EVALUATION.md, "Local
/// contexts", has the measurements.
pub const DEFAULT_LLM: &str = "qwen2.5-coder-0.5b-instruct";

/// The model answers are written with when neither `[answer] model` nor `[llm] model` is
/// set: Qwen2.5-Coder-1.5B-Instruct, the best local instruct model of the catalog. On 50
/// XQuAD-R questions (`situate eval --answers`, EVALUATION.md "Answers") its English answers
/// hold the gold answer in 76% (the 0.5B's 50%) and are grounded in 67% (27%), and the 0.5B
/// says "not in the documents" to 96% of the Russian ones; writing notes at index time is another matter
/// (there the 0.5B's speed wins: [`DEFAULT_LLM`]).
pub const DEFAULT_ANSWER_LLM: &str = "qwen2.5-coder-1.5b-instruct";

/// Every setting of `situate.toml`; unknown keys are an error (a typo should not be silently
/// ignored).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// The index directory.
    pub index: Option<PathBuf>,
    /// `[chunk]`.
    #[serde(default)]
    pub chunk: ChunkSettings,
    /// `[ingest]`.
    #[serde(default)]
    pub ingest: IngestSettings,
    /// `[search]`.
    #[serde(default)]
    pub search: SearchSettings,
    /// `[bm25]`.
    #[serde(default)]
    pub bm25: Bm25Settings,
    /// `[embed]`.
    #[serde(default)]
    pub embed: EmbedSettings,
    /// `[llm]`.
    #[serde(default)]
    pub llm: LlmSettings,
    /// `[answer]`.
    #[serde(default)]
    pub answer: AnswerSettings,
    /// `[store]`.
    #[serde(default)]
    pub store: StoreSettings,
}

/// `[store]`: the shared store on PostgreSQL + pgvector, for more than one machine
/// (`situate store migrate`; `situate_scale::store`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSettings {
    /// `postgres://USER@HOST:PORT/DATABASE`; what it leaves out comes from `PGHOST`,
    /// `PGPORT`, `PGUSER`, `PGPASSWORD` and `PGDATABASE`. Keep the password out of the
    /// file (`PGPASSWORD`): it is never printed.
    pub url: Option<String>,
}

/// `[answer]`: how `situate ask` (and `/v1/ask`, the MCP tool `ask`) answers, each value
/// optional so that a command's flags or a request body can be laid over it
/// ([`AnswerSettings::over`]); [`AnswerSettings::plan`] checks them in one place.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerSettings {
    /// `retrieval` (the best passages), `full` (the whole base in one cached prefix) or
    /// `auto` (full when the base fits `full_budget`) (default auto).
    pub mode: Option<String>,
    /// Passages given to the model in retrieval mode (default 8).
    pub passages: Option<usize>,
    /// The model [the `[llm]` model when set, else [`DEFAULT_ANSWER_LLM`]].
    pub model: Option<String>,
    /// Most tokens of the answer (default 300).
    pub max_tokens: Option<usize>,
    /// Below this score of the best passage the question is not attempted (the answer is
    /// "not in the documents" with no model call) [none: always attempted].
    pub min_score: Option<f32>,
    /// An answer whose citations do not hold: `mark` it, `retry` once then mark, or
    /// `refuse` (retry once, then withhold it) (default mark).
    pub unsupported: Option<String>,
    /// Most tokens of the whole base for `auto` to choose full-context mode (default 8000).
    pub full_budget: Option<usize>,
}

/// What an answer whose citations do not hold becomes ([`AnswerSettings::unsupported`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Unsupported {
    /// Shown, marked not grounded, with the problems.
    Mark,
    /// Asked once more with the problems named; then marked.
    Retry,
    /// Asked once more; then withheld.
    Refuse,
}

/// How the base reaches the model ([`AnswerSettings::mode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AnswerMode {
    /// The search's best passages.
    Retrieval,
    /// Every chunk of the base, in document order, as one cached prefix.
    Full,
    /// Full when the base fits the budget and the model's window, else retrieval.
    Auto,
}

/// A checked answer configuration ([`AnswerSettings::plan`]).
#[derive(Debug, Clone, PartialEq)]
pub struct AnswerPlan {
    /// How the base reaches the model.
    pub mode: AnswerMode,
    /// Passages in retrieval mode.
    pub passages: usize,
    /// The model spec.
    pub model: String,
    /// Most tokens of the answer.
    pub max_tokens: usize,
    /// The retrieval-side abstention threshold.
    pub min_score: Option<f32>,
    /// What an unsupported answer becomes.
    pub unsupported: Unsupported,
    /// Most tokens of the base for full-context mode under `auto`.
    pub full_budget: usize,
}

/// The most passages one answer may be given.
pub const MAX_PASSAGES: usize = 50;

impl AnswerSettings {
    /// `self`'s values where set, else `base`'s.
    pub fn over(self, base: &AnswerSettings) -> AnswerSettings {
        let b = base.clone();
        AnswerSettings {
            mode: self.mode.or(b.mode),
            passages: self.passages.or(b.passages),
            model: self.model.or(b.model),
            max_tokens: self.max_tokens.or(b.max_tokens),
            min_score: self.min_score.or(b.min_score),
            unsupported: self.unsupported.or(b.unsupported),
            full_budget: self.full_budget.or(b.full_budget),
        }
    }

    /// Checks every value and fills in the defaults; `default_llm` is the `[llm]` model.
    pub fn plan(&self, default_llm: &str) -> Result<AnswerPlan> {
        let bad = |field: &str, m: String| Err(EngineError::field_error(field, m));
        let mode = match self.mode.as_deref() {
            None | Some("auto") => AnswerMode::Auto,
            Some("retrieval") => AnswerMode::Retrieval,
            Some("full") => AnswerMode::Full,
            Some(m) => {
                return bad(
                    "mode",
                    format!("unknown answer mode {m:?}: expected retrieval, full or auto"),
                );
            }
        };
        let passages = self.passages.unwrap_or(8);
        if passages == 0 || passages > MAX_PASSAGES {
            return bad(
                "passages",
                format!("must be from 1 to {MAX_PASSAGES}, not {passages}"),
            );
        }
        let max_tokens = self.max_tokens.unwrap_or(300);
        if !(16..=4096).contains(&max_tokens) {
            return bad(
                "max_tokens",
                format!("must be from 16 to 4096, not {max_tokens}"),
            );
        }
        if let Some(m) = self.min_score.filter(|m| !m.is_finite()) {
            return bad("min_score", format!("must be a number, not {m}"));
        }
        let unsupported = match self.unsupported.as_deref() {
            None | Some("mark") => Unsupported::Mark,
            Some("retry") => Unsupported::Retry,
            Some("refuse") => Unsupported::Refuse,
            Some(u) => {
                return bad(
                    "unsupported",
                    format!("unknown value {u:?}: expected mark, retry or refuse"),
                );
            }
        };
        let full_budget = self.full_budget.unwrap_or(8000);
        if full_budget == 0 {
            return bad("full_budget", "must be at least 1 token".into());
        }
        Ok(AnswerPlan {
            mode,
            passages,
            model: self
                .model
                .clone()
                .unwrap_or_else(|| default_llm.to_string()),
            max_tokens,
            min_score: self.min_score,
            unsupported,
            full_budget,
        })
    }
}

/// `[embed]`: used when an index is created.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbedSettings {
    /// The embedder spec (`auto`, `none`, a model name, a directory, a hosted model).
    pub embedder: Option<String>,
    /// The vector index backend (`auto`, `exact`, `hnsw`).
    pub vector_index: Option<String>,
    /// Passages by late chunking: the embedder's name gets `:late` (an embedder that reads
    /// whole documents: embeddinggemma-300m, nomic-embed-text-v1.5).
    pub late: Option<bool>,
}

/// `[chunk]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChunkSettings {
    /// Largest chunk in tokens.
    pub max_tokens: Option<usize>,
    /// Tokens shared by neighbouring chunks.
    pub overlap_tokens: Option<usize>,
    /// A tokenizer.json that counts real tokens.
    pub tokenizer: Option<PathBuf>,
}

/// `[ingest]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestSettings {
    /// The context method: `none`, `structural` or `llm`.
    pub context: Option<String>,
    /// A language forced on every document.
    pub language: Option<String>,
    /// The language when detection is unsure.
    pub default_language: Option<String>,
}

/// `[llm]`: the model that writes contexts, and what `--rerank llm` means.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmSettings {
    /// The model spec (a catalog name, a GGUF path, `anthropic:MODEL`, ...).
    pub model: Option<String>,
    /// A built-in prompt: `anthropic` (Anthropic's, the default) or `small` (the
    /// instruction said as what to write, for small local models: `small-v1`).
    pub prompt: Option<String>,
    /// A prompt template file (instead of a built-in prompt).
    pub template: Option<PathBuf>,
    /// A glossary file added before the document.
    pub glossary: Option<PathBuf>,
    /// `window`, `head` or `fail`.
    pub long_documents: Option<String>,
    /// Most tokens per context.
    pub max_tokens: Option<usize>,
    /// Most document tokens per prompt.
    pub document_tokens: Option<usize>,
    /// Dollars per million tokens, overriding the price table.
    pub price: Option<situate_llm::cost::Price>,
}

/// `[bm25]`: used when an index is created.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bm25Settings {
    /// `bigram` or `jieba`.
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

    /// The model answers use when `[answer] model` is not set (the default of
    /// [`AnswerSettings::plan`]): the `[llm] model` when it is set, else
    /// [`DEFAULT_ANSWER_LLM`].
    pub fn answer_llm(&self) -> String {
        self.llm
            .model
            .clone()
            .unwrap_or_else(|| DEFAULT_ANSWER_LLM.to_string())
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
        let text = std::fs::read_to_string(&path).map_err(crate::io("cannot read", &path))?;
        toml::from_str(&text).map_err(|e| EngineError::Settings {
            path: path.clone(),
            source: Box::new(e),
        })
    }

    /// The index directory: `index`, or `./.situate`.
    pub fn index_dir(&self) -> PathBuf {
        self.index
            .clone()
            .unwrap_or_else(|| PathBuf::from(".situate"))
    }

    /// The settings fixed when an index is created: `chinese`, `embedder` and
    /// `vector_index` given (flags) over `[bm25]` and `[embed]`, over the defaults.
    pub fn create_settings(
        &self,
        chinese: Option<&str>,
        embedder: Option<&str>,
        vector_index: Option<&str>,
    ) -> Result<crate::CreateSettings> {
        let chinese = chinese.or(self.bm25.chinese.as_deref()).unwrap_or("bigram");
        let mut embedder = embedder
            .or(self.embed.embedder.as_deref())
            .unwrap_or("auto")
            .to_string();
        if self.embed.late == Some(true) && !embedder.ends_with(situate_embed::LATE) {
            if matches!(embedder.as_str(), "auto" | "none") {
                return Err(EngineError::field_error(
                    "embed.late",
                    format!(
                        "needs a named embedder that reads whole documents (embeddinggemma-300m, nomic-embed-text-v1.5), not {embedder:?}"
                    ),
                ));
            }
            embedder.push_str(situate_embed::LATE);
        }
        let vector_index = vector_index
            .or(self.embed.vector_index.as_deref())
            .unwrap_or("auto");
        Ok(crate::CreateSettings {
            chinese: chinese.parse().map_err(EngineError::Invalid)?,
            embedder,
            vector_index: vector_index.parse().map_err(EngineError::Invalid)?,
        })
    }
}

/// Everything a search can be told apart from its text and filters, each optional so that
/// layers can be merged: `[search]` in `situate.toml`, then a command's flags (or a request
/// body), each later layer winning ([`SearchSettings::over`]). [`SearchSettings::plan`]
/// checks the result in one place, for `situate search` and `situate eval` alike.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchSettings {
    /// Hits returned (default 10).
    pub k: Option<usize>,
    /// `plain` (the original alone) or `contextual` BM25 (default contextual).
    #[schemars(extend("enum" = ["contextual", "plain", null]))]
    pub bm25: Option<String>,
    /// Weight of the context relative to the original [0.5].
    pub context_weight: Option<f32>,
    /// `bm25`, `vector` or `hybrid` [hybrid when the index has vectors, else bm25].
    #[schemars(extend("enum" = ["bm25", "vector", "hybrid", null]))]
    pub mode: Option<String>,
    /// Hits each leg contributes to the fusion (default 150).
    pub fetch: Option<usize>,
    /// `rrf` (reciprocal rank), `minmax` (scores scaled by their observed range), `tm2c2`
    /// (scaled from the scoring function's own minimum) or `zscore` (mean ± 3σ) (default:
    /// the fusion the index records for its embedder, else rrf).
    #[schemars(extend("enum" = ["rrf", "minmax", "tm2c2", "zscore", null]))]
    pub fusion: Option<String>,
    /// RRF's k (default 60).
    pub rrf_k: Option<f32>,
    /// The vector leg's share of the fusion, from 0 (BM25 alone) to 1 (vectors alone):
    /// the weights `1 − alpha` and `alpha`. Not with `bm25_weight` or `vector_weight`.
    pub alpha: Option<f32>,
    /// Weight of the BM25 leg (default 1).
    pub bm25_weight: Option<f32>,
    /// Weight of the vector leg (default 1).
    pub vector_weight: Option<f32>,
    /// A reranker spec (`none`, `cross-encoder:DIR`, `llm`, `cohere:MODEL`, ...) (default none).
    pub rerank: Option<String>,
    /// How many fused hits the reranker re-scores (default 150).
    pub rerank_depth: Option<usize>,
}

/// `v` when it is a number >= 0, else the error naming `field`.
fn non_negative(field: &str, v: f32) -> Result<f32> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(EngineError::field_error(
            field,
            format!("must be a number >= 0, not {v}"),
        ))
    }
}

/// The most hits one search may ask for.
pub const MAX_K: usize = 10_000;

/// A checked search configuration: every value set and in range ([`SearchSettings::plan`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SearchPlan {
    /// Hits returned.
    pub k: usize,
    /// Plain or contextual BM25.
    pub match_on: MatchOn,
    /// Weight of the context relative to the original.
    pub context_weight: f32,
    /// The legs asked for (`None`: by the index).
    pub mode: Option<Mode>,
    /// Hits per leg before fusion.
    pub fetch: usize,
    /// How the legs are fused.
    pub fusion: Fusion,
    /// Weight of the BM25 leg.
    pub bm25_weight: f32,
    /// Weight of the vector leg.
    pub vector_weight: f32,
    /// Whether a layer (`situate.toml`, flags, a request) set any of the fusion settings
    /// (`fusion`, `rrf_k`, `alpha`, `bm25_weight`, `vector_weight`). When none did, a search
    /// uses the fusion its index records for its embedder ([`SearchPlan::with_fusion`]).
    pub fusion_given: bool,
    /// The reranker spec, `None` for no reranking.
    pub rerank: Option<String>,
    /// How many fused hits the reranker re-scores; hits ranked below follow in fused order.
    pub rerank_depth: usize,
    /// The LLM `rerank = "llm"` means.
    pub default_llm: String,
}

impl SearchSettings {
    /// `self`'s values where set, else `base`'s.
    pub fn over(self, base: &SearchSettings) -> SearchSettings {
        let b = base.clone();
        SearchSettings {
            k: self.k.or(b.k),
            bm25: self.bm25.or(b.bm25),
            context_weight: self.context_weight.or(b.context_weight),
            mode: self.mode.or(b.mode),
            fetch: self.fetch.or(b.fetch),
            fusion: self.fusion.or(b.fusion),
            rrf_k: self.rrf_k.or(b.rrf_k),
            // `alpha` and the weights are two ways to say one thing: a layer that says it
            // one way replaces what the layers under it said either way.
            alpha: if self.bm25_weight.is_some() || self.vector_weight.is_some() {
                self.alpha
            } else {
                self.alpha.or(b.alpha)
            },
            bm25_weight: if self.alpha.is_some() {
                self.bm25_weight
            } else {
                self.bm25_weight.or(b.bm25_weight)
            },
            vector_weight: if self.alpha.is_some() {
                self.vector_weight
            } else {
                self.vector_weight.or(b.vector_weight)
            },
            rerank: self.rerank.or(b.rerank),
            rerank_depth: self.rerank_depth.or(b.rerank_depth),
        }
    }

    /// Checks every value and fills in the defaults. `default_llm` is what `rerank =
    /// "llm"` means. Errors name the field by its wire name (`context_weight`) and the
    /// range ([`EngineError::InvalidField`]).
    pub fn plan(&self, default_llm: &str) -> Result<SearchPlan> {
        let bad = |field: &str, m: String| Err(EngineError::field_error(field, m));
        let k = self.k.unwrap_or(10);
        if k == 0 || k > MAX_K {
            return bad("k", format!("must be from 1 to {MAX_K}, not {k}"));
        }
        let match_on = match self.bm25.as_deref() {
            None | Some("contextual") => MatchOn::Contextual,
            Some("plain") => MatchOn::Plain,
            Some(m) => {
                return bad(
                    "bm25",
                    format!("unknown BM25 mode {m:?}: expected plain or contextual"),
                );
            }
        };
        let number = non_negative;
        let context_weight = number(
            "context_weight",
            self.context_weight
                .unwrap_or(situate_core::DEFAULT_CONTEXT_WEIGHT),
        )?;
        let mode = match self.mode.as_deref() {
            None => None,
            Some(m) => Some(
                m.parse::<Mode>()
                    .map_err(|e| EngineError::field_error("mode", e))?,
            ),
        };
        let fetch = self.fetch.unwrap_or(situate_search::DEFAULT_FETCH);
        if fetch == 0 || fetch > MAX_K {
            return bad("fetch", format!("must be from 1 to {MAX_K}, not {fetch}"));
        }
        let (fusion, bm25_weight, vector_weight) = self.fusion_part()?;
        let rerank = match self.rerank.as_deref().map(str::trim) {
            None | Some("none") => None,
            Some("") => return bad("rerank", "is empty: give none or a reranker".into()),
            Some(r) => Some(r.to_string()),
        };
        let rerank_depth = self
            .rerank_depth
            .unwrap_or(situate_search::rerank::DEFAULT_DEPTH);
        if rerank_depth == 0 || rerank_depth > MAX_K {
            return bad(
                "rerank_depth",
                format!("must be from 1 to {MAX_K}, not {rerank_depth}"),
            );
        }
        Ok(SearchPlan {
            k,
            match_on,
            context_weight,
            mode,
            fetch,
            fusion,
            bm25_weight,
            vector_weight,
            fusion_given: self.has_fusion(),
            rerank,
            rerank_depth,
            default_llm: default_llm.to_string(),
        })
    }

    /// Whether any fusion setting is set: `fusion`, `rrf_k`, `alpha`, `bm25_weight` or
    /// `vector_weight`.
    pub fn has_fusion(&self) -> bool {
        self.fusion.is_some()
            || self.rrf_k.is_some()
            || self.alpha.is_some()
            || self.bm25_weight.is_some()
            || self.vector_weight.is_some()
    }

    /// The checked fusion function and the two legs' weights.
    pub fn fusion_part(&self) -> Result<(Fusion, f32, f32)> {
        let number = non_negative;
        let rrf_k = number("rrf_k", self.rrf_k.unwrap_or(60.0))?;
        let fusion = match self.fusion.as_deref().map(str::trim) {
            None | Some("rrf") => Fusion::Rrf { k: rrf_k },
            Some("minmax") => Fusion::MinMax,
            Some("tm2c2") => Fusion::Tm2c2,
            Some("zscore") => Fusion::ZScore,
            Some(f) => {
                return Err(EngineError::field_error(
                    "fusion",
                    format!("unknown fusion {f:?}: expected {}", Fusion::NAMES),
                ));
            }
        };
        let (bm25_weight, vector_weight) = match self.alpha {
            Some(a) => {
                if self.bm25_weight.is_some() || self.vector_weight.is_some() {
                    return Err(EngineError::field_error(
                        "alpha",
                        "alpha sets both legs' weights (1 − alpha and alpha): give it or bm25_weight/vector_weight, not both",
                    ));
                }
                if !(a.is_finite() && (0.0..=1.0).contains(&a)) {
                    return Err(EngineError::field_error(
                        "alpha",
                        format!("must be from 0 (BM25 alone) to 1 (vectors alone), not {a}"),
                    ));
                }
                (1.0 - a, a)
            }
            None => (
                number("bm25_weight", self.bm25_weight.unwrap_or(1.0))?,
                number("vector_weight", self.vector_weight.unwrap_or(1.0))?,
            ),
        };
        if bm25_weight == 0.0 && vector_weight == 0.0 {
            return Err(EngineError::field_error(
                "vector_weight",
                "bm25_weight and vector_weight are both 0: no leg would count",
            ));
        }
        Ok((fusion, bm25_weight, vector_weight))
    }
}

impl SearchPlan {
    /// This plan with the fusion of `layer` (an index's recorded fusion) when no layer of
    /// the plan set a fusion setting; as it is otherwise.
    pub fn with_fusion(&self, layer: &SearchSettings) -> Result<SearchPlan> {
        if self.fusion_given || !layer.has_fusion() {
            return Ok(self.clone());
        }
        let (fusion, bm25_weight, vector_weight) = layer.fusion_part()?;
        Ok(SearchPlan {
            fusion,
            bm25_weight,
            vector_weight,
            ..self.clone()
        })
    }

    /// The fusion settings this plan searches with, by their `situate.toml` names.
    pub fn fusion_settings(&self) -> SearchSettings {
        let (fusion, rrf_k) = match self.fusion {
            Fusion::Rrf { k } => ("rrf", Some(k)),
            other => (other.name(), None),
        };
        SearchSettings {
            fusion: Some(fusion.into()),
            rrf_k,
            bm25_weight: Some(self.bm25_weight),
            vector_weight: Some(self.vector_weight),
            ..SearchSettings::default()
        }
    }

    /// The request the search stage takes for `text`, analysed in `languages` (empty: every
    /// language of the index).
    pub fn request<'a>(&self, text: &'a str, languages: &'a [Language]) -> SearchRequest<'a> {
        SearchRequest {
            text,
            k: self.k,
            match_on: self.match_on,
            context_weight: self.context_weight,
            languages,
            mode: self.mode,
            fetch: self.fetch,
            fusion: self.fusion,
            bm25_weight: self.bm25_weight,
            vector_weight: self.vector_weight,
        }
    }
}

/// The filters of a search as a person gives them: document ids, path globs, language codes
/// and `KEY=VALUE` metadata. [`FilterSettings::filter`] checks them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FilterSettings {
    /// Only these documents.
    #[serde(default)]
    pub documents: Vec<String>,
    /// Only documents whose id matches one of these globs.
    #[serde(default)]
    pub paths: Vec<String>,
    /// Only documents of these languages (`en`, `ru`, `zh`, `other`).
    #[serde(default)]
    pub languages: Vec<String>,
    /// Only documents with all of this metadata, `KEY=VALUE`.
    #[serde(default)]
    pub meta: Vec<String>,
    /// Only cards of these kinds (`text`, `table`, `image`).
    #[serde(default)]
    pub kinds: Vec<String>,
}

impl FilterSettings {
    /// The checked filter.
    pub fn filter(&self) -> Result<DocumentFilter> {
        let languages = self
            .languages
            .iter()
            .map(|l| {
                l.parse::<Language>()
                    .map_err(|e| EngineError::field_error("filter.languages", e))
            })
            .collect::<Result<Vec<_>>>()?;
        let kinds = self
            .kinds
            .iter()
            .map(|k| {
                k.parse::<situate_core::CardKind>()
                    .map_err(|e| EngineError::field_error("filter.kinds", e))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(DocumentFilter {
            document_ids: self.documents.clone(),
            path_globs: self.paths.clone(),
            languages,
            metadata: key_values("filter.meta", &self.meta)?,
            kinds,
        })
    }
}

/// Parses repeated `KEY=VALUE` values of the field `field` (its wire name, in errors).
pub fn key_values(field: &str, items: &[String]) -> Result<Vec<(String, String)>> {
    items
        .iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
            _ => Err(EngineError::field_error(
                field,
                format!("{kv:?}: expected KEY=VALUE"),
            )),
        })
        .collect()
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

    #[test]
    fn later_layers_win_and_unset_values_fall_through() {
        let file = SearchSettings {
            k: Some(5),
            fusion: Some("minmax".into()),
            context_weight: Some(0.3),
            ..Default::default()
        };
        let flags = SearchSettings {
            k: Some(7),
            ..Default::default()
        };
        let merged = flags.over(&file);
        assert_eq!(merged.k, Some(7));
        assert_eq!(merged.fusion.as_deref(), Some("minmax"));
        assert_eq!(merged.context_weight, Some(0.3));
        let plan = merged.plan("m").expect("valid");
        assert_eq!(plan.k, 7);
        assert_eq!(plan.fusion, Fusion::MinMax);
        assert_eq!(plan.rerank, None);
        assert_eq!(plan.rerank_depth, situate_search::rerank::DEFAULT_DEPTH);
    }

    #[test]
    fn every_range_is_checked_in_one_place() {
        // Each error names its field by its wire name and says what is accepted.
        let bad = |s: SearchSettings, field: &str, says: &str| {
            let e = s.plan("m").expect_err("invalid");
            assert_eq!(e.field(), Some(field), "{e}");
            assert!(e.to_string().contains(says), "{e} should mention {says}");
        };
        let with = |f: fn(&mut SearchSettings)| {
            let mut s = SearchSettings::default();
            f(&mut s);
            s
        };
        bad(with(|s| s.k = Some(0)), "k", "from 1 to");
        bad(
            with(|s| s.context_weight = Some(-1.0)),
            "context_weight",
            ">= 0",
        );
        bad(with(|s| s.fetch = Some(0)), "fetch", "from 1 to");
        bad(with(|s| s.rrf_k = Some(f32::INFINITY)), "rrf_k", ">= 0");
        bad(
            with(|s| s.fusion = Some("borda".into())),
            "fusion",
            "rrf, minmax, tm2c2 or zscore",
        );
        bad(with(|s| s.alpha = Some(1.5)), "alpha", "from 0");
        bad(with(|s| s.alpha = Some(f32::NAN)), "alpha", "from 0");
        bad(
            with(|s| {
                s.alpha = Some(0.5);
                s.vector_weight = Some(2.0);
            }),
            "alpha",
            "not both",
        );
        bad(
            with(|s| {
                s.bm25_weight = Some(0.0);
                s.vector_weight = Some(0.0);
            }),
            "vector_weight",
            "both 0",
        );
        bad(
            with(|s| s.rerank_depth = Some(0)),
            "rerank_depth",
            "from 1 to",
        );
        bad(
            with(|s| s.mode = Some("semantic".into())),
            "mode",
            "bm25, vector or hybrid",
        );
        bad(
            with(|s| s.bm25 = Some("fuzzy".into())),
            "bm25",
            "plain or contextual",
        );
        bad(with(|s| s.rerank = Some(" ".into())), "rerank", "is empty");
    }

    /// `alpha` and the two weights are one setting said two ways: a later layer that says it
    /// either way replaces the earlier layers' word; and an index's fusion applies only when
    /// no layer set any fusion setting.
    #[test]
    fn alpha_and_weights_layer_as_one_setting() {
        let file = SearchSettings {
            alpha: Some(0.7),
            fusion: Some("tm2c2".into()),
            ..Default::default()
        };
        let plan = SearchSettings::default()
            .over(&file)
            .plan("m")
            .expect("valid");
        assert_eq!(plan.fusion, Fusion::Tm2c2);
        assert!((plan.bm25_weight - 0.3).abs() < 1e-6 && plan.vector_weight == 0.7);
        // Flags give a weight: the file's alpha no longer counts (no conflict).
        let flags = SearchSettings {
            vector_weight: Some(2.0),
            ..Default::default()
        };
        let plan = flags.over(&file).plan("m").expect("valid");
        assert_eq!((plan.bm25_weight, plan.vector_weight), (1.0, 2.0));
        // And the other way round.
        let file = SearchSettings {
            bm25_weight: Some(3.0),
            ..Default::default()
        };
        let flags = SearchSettings {
            alpha: Some(0.25),
            ..Default::default()
        };
        let plan = flags.over(&file).plan("m").expect("valid");
        assert_eq!((plan.bm25_weight, plan.vector_weight), (0.75, 0.25));
        assert!(plan.fusion_given);
        // An index's fusion: used when nothing was set, ignored otherwise.
        let index = SearchSettings {
            fusion: Some("zscore".into()),
            alpha: Some(0.8),
            ..Default::default()
        };
        let none = SearchSettings::default().plan("m").expect("valid");
        assert!(!none.fusion_given);
        let used = none.with_fusion(&index).expect("valid");
        assert_eq!(used.fusion, Fusion::ZScore);
        assert!((used.vector_weight - 0.8).abs() < 1e-6);
        assert_eq!(plan.with_fusion(&index).expect("valid"), plan);
        // The plan's fusion said back as settings plans to the same fusion.
        let again = used.fusion_settings().plan("m").expect("valid");
        assert_eq!(
            (again.fusion, again.bm25_weight, again.vector_weight),
            (used.fusion, used.bm25_weight, used.vector_weight)
        );
    }

    #[test]
    fn filters_parse_languages_and_metadata() {
        let f = FilterSettings {
            languages: vec!["ru".into()],
            meta: vec!["team=ops".into(), "k==v".into()],
            ..Default::default()
        }
        .filter()
        .expect("valid");
        assert_eq!(f.languages, vec![Language::Ru]);
        assert_eq!(
            f.metadata,
            vec![("team".into(), "ops".into()), ("k".into(), "=v".into())]
        );
        for bad in [
            FilterSettings {
                meta: vec!["novalue".into()],
                ..Default::default()
            },
            FilterSettings {
                meta: vec!["=x".into()],
                ..Default::default()
            },
            FilterSettings {
                languages: vec!["klingon".into()],
                ..Default::default()
            },
        ] {
            assert!(bad.filter().is_err(), "{bad:?}");
        }
    }
}
