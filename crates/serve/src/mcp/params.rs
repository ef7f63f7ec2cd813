//! The tools' parameters and the answers MCP shapes for an agent (snippets within a
//! budget, passages by id).

use super::*;

/// Parameters of `search`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchParams {
    /// What to look for: a question or keywords.
    pub query: String,
    /// Hits to return (default 5, at most 20; use `cursor` for the next ones).
    pub k: Option<usize>,
    /// `bm25`, `vector` or `hybrid` (default: hybrid when the index has vectors).
    pub mode: Option<String>,
    /// How the legs of a hybrid search are fused: `rrf`, `minmax`, `tm2c2` or `zscore`
    /// (default: the index's, chosen for its embedder).
    pub fusion: Option<String>,
    /// The vector leg's share of the fusion, 0 (BM25 alone) to 1 (vectors alone).
    pub alpha: Option<f32>,
    /// RRF's k (default 60).
    pub rrf_k: Option<f32>,
    /// Each hit's whole chunk text instead of a snippet of about 300 characters.
    #[serde(default)]
    pub full_text: bool,
    /// The most characters of chunk text and context in the result (default 8000, at
    /// most 40000); hits beyond it are left for the next page.
    pub max_chars: Option<usize>,
    /// `next_cursor` of the previous call with the same query, for the hits after it.
    pub cursor: Option<String>,
    /// Only documents that match: `documents` (ids), `paths` (globs such as `docs/*`),
    /// `languages` (`en`, `ru`, `zh`, `other`), `meta` (`KEY=VALUE`, all of them), `kinds`
    /// (`text`, `table`, `image`): the filter of `POST /v1/search`.
    #[serde(default)]
    pub filter: FilterSettings,
}

/// Parameters of `get_card`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CardParams {
    /// The chunk id, as `search` gives it.
    pub chunk_id: String,
    /// Chunks to include before and after it in its document (default 0, at most 5).
    #[serde(default)]
    pub neighbours: u32,
}

/// Parameters of `explain`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExplainParams {
    /// The query.
    pub query: String,
    /// The chunk whose rank is to be explained.
    pub chunk_id: String,
    /// `bm25`, `vector` or `hybrid` (default: the index's).
    pub mode: Option<String>,
    /// How the legs of a hybrid search are fused: `rrf`, `minmax`, `tm2c2` or `zscore`
    /// (default: the index's, chosen for its embedder).
    pub fusion: Option<String>,
    /// The vector leg's share of the fusion, 0 (BM25 alone) to 1 (vectors alone).
    pub alpha: Option<f32>,
    /// RRF's k (default 60).
    pub rrf_k: Option<f32>,
}

/// Parameters of `ask`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskParams {
    /// The question, in any language (the answer is in the question's).
    pub question: String,
    /// `retrieval` (the best passages), `full` (the whole base) or `auto` (default: the
    /// server's).
    pub mode: Option<String>,
    /// Passages given to the model in retrieval mode (default 8, at most 50).
    pub passages: Option<usize>,
}

/// A passage of MCP's `ask` answer, by its ids (the engine's answer with each passage's
/// text left out).
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct PassageRef {
    /// The passage's number, as the answer's citations give it.
    pub id: usize,
    /// Its chunk.
    pub chunk_id: String,
    /// Its document.
    pub document_id: String,
}

/// MCP's `search` answer: the engine's search, its hits cut to fit an agent's budget.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct SnippetPage {
    /// The query as searched.
    pub query: String,
    /// The mode searched.
    pub mode: situate_engine::Mode,
    /// The hits, best first.
    pub hits: Vec<Snippet>,
    /// Pass it back as `cursor` for the next hits; `null` when there are no more.
    pub next_cursor: Option<String>,
}

/// A search hit for an agent: the engine's hit with its text cut to a snippet (the full
/// card is a `get_card` away).
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct Snippet {
    /// Rank, from 1.
    pub rank: usize,
    /// The chunk.
    pub chunk_id: String,
    /// Its document.
    pub document_id: String,
    /// The document's title.
    pub title: Option<String>,
    /// Its heading path, joined by ` > `.
    pub section: String,
    /// The fused score.
    pub score: f32,
    /// What the chunk is (prose, code, a table...).
    pub kind: situate_core::CardKind,
    /// Its page or sheet, where the document has them.
    pub place: Option<situate_core::Place>,
    /// The situating context (cut to the budget).
    pub context: String,
    /// The chunk's original text, cut to a snippet unless `full_text`.
    pub text: String,
    /// Whether `text` was cut.
    pub text_truncated: bool,
}

/// Parameters of `job_status`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobParams {
    /// The job id `ingest` returned.
    pub job_id: String,
}

/// Parameters of `review_context`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewParams {
    /// The chunk whose context is decided.
    pub chunk_id: String,
    /// `accept`, `reject` or `edit` (with `text`).
    pub decision: String,
    /// The new context, for `edit`.
    pub text: Option<String>,
}
