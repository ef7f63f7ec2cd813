//! The query path as front ends call it: a query's text, a checked [`SearchPlan`] and a
//! filter in, the hits and how they were found out ([`Engine::query`]). Rerankers are
//! loaded once per engine and kept, so a long-running front end (the service) pays for a
//! model's load once.

use crate::settings::SearchPlan;
use crate::{Engine, EngineError, Result};
use situate_core::{DocumentFilter, Hit, MatchOn, Reranker};
use situate_search::Mode;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The reranking stage of a search ([`Engine::search_reranked`]).
#[derive(Clone, Copy)]
pub struct Rerank<'a> {
    /// The reranker.
    pub reranker: &'a dyn Reranker,
    /// How many of the fused top hits it re-scores (the paper's 150). Hits ranked below
    /// `depth` follow the re-scored ones in their fused order, so `k` hits are returned
    /// whatever the depth.
    pub depth: usize,
}

/// What a search found and how: the same shape `situate search --json` prints.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct SearchResponse {
    /// The query text.
    pub query: String,
    /// The legs that ran.
    pub mode: Mode,
    /// Plain or contextual BM25.
    pub bm25: MatchOn,
    /// The reranker's id, when one re-scored the hits.
    pub reranker: Option<String>,
    /// How the legs were fused, in hybrid mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fusion: Option<FusionUsed>,
    /// Milliseconds from the call to the answer (the reranker's load excluded).
    pub took_ms: f64,
    /// The hits, best first: context and original apart, each leg's rank and score.
    pub hits: Vec<Hit>,
}

/// The fusion a hybrid search ran with, and where it came from.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct FusionUsed {
    /// `rrf`, `minmax`, `tm2c2` or `zscore`.
    pub fusion: String,
    /// RRF's k, for `rrf`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rrf_k: Option<f32>,
    /// The BM25 leg's weight.
    pub bm25_weight: f32,
    /// The vector leg's weight.
    pub vector_weight: f32,
    /// `settings` (a setting of the user's: `situate.toml`, a flag, the request) or `index`
    /// (the fusion the index records for its embedder).
    pub from: String,
}

impl FusionUsed {
    fn of(plan: &SearchPlan, from: &str) -> FusionUsed {
        let (fusion, rrf_k) = match plan.fusion {
            situate_search::fusion::Fusion::Rrf { k } => ("rrf", Some(k)),
            other => (other.name(), None),
        };
        FusionUsed {
            fusion: fusion.into(),
            rrf_k,
            bm25_weight: plan.bm25_weight,
            vector_weight: plan.vector_weight,
            from: from.into(),
        }
    }
}

/// Rerankers loaded by an engine, by (spec, default LLM).
#[derive(Default)]
pub(crate) struct Rerankers(Mutex<HashMap<(String, String), Arc<dyn Reranker>>>);

impl Engine {
    /// Runs a search: the legs the plan asks for (hybrid when the index has vectors), the
    /// filter inside each, fusion, and the plan's reranker over the fused top
    /// `rerank_depth`. The languages of the filter are also the languages the query is
    /// analysed in for BM25.
    pub fn query(
        &self,
        text: &str,
        plan: &SearchPlan,
        filter: &DocumentFilter,
    ) -> Result<SearchResponse> {
        let mode = self.mode_for(plan.mode)?;
        let plan = &plan.with_fusion(&self.index_fusion()?)?;
        let reranker = match plan.rerank.as_deref() {
            Some(spec) => Some(self.reranker(spec, &plan.default_llm)?),
            None => None,
        };
        let started = Instant::now();
        let req = plan.request(text, &filter.languages);
        let hits = self.search_reranked(
            &req,
            filter,
            reranker.as_deref().map(|r| Rerank {
                reranker: r,
                depth: plan.rerank_depth,
            }),
        )?;
        Ok(SearchResponse {
            query: text.to_string(),
            mode,
            bm25: plan.match_on,
            reranker: reranker.map(|r| r.id().to_string()),
            fusion: (mode == Mode::Hybrid).then(|| {
                FusionUsed::of(
                    plan,
                    if plan.fusion_given {
                        "settings"
                    } else {
                        "index"
                    },
                )
            }),
            took_ms: started.elapsed().as_secs_f64() * 1000.0,
            hits,
        })
    }

    /// The reranker `spec` names (`llm` alone meaning `default_llm`), loaded on first use
    /// and kept for this engine's life.
    pub fn reranker(&self, spec: &str, default_llm: &str) -> Result<Arc<dyn Reranker>> {
        let key = (spec.to_string(), default_llm.to_string());
        let mut loaded = self
            .rerankers
            .0
            .lock()
            .map_err(|_| EngineError::Internal("a reranker failed to load earlier".into()))?;
        if let Some(r) = loaded.get(&key) {
            return Ok(Arc::clone(r));
        }
        let r: Arc<dyn Reranker> =
            match situate_rerank::resolve(spec, default_llm).map_err(EngineError::RerankerLoad)? {
                Some(r) => Arc::from(r),
                None => {
                    return Err(EngineError::field_error(
                        "rerank",
                        format!("{spec:?} is no reranker (`none` means no rerank stage)"),
                    ));
                }
            };
        loaded.insert(key, Arc::clone(&r));
        Ok(r)
    }

    /// [`Engine::search_filtered`], then the reranking stage: the fused top `rerank.depth`
    /// hits are re-scored by the reranker and ordered by its scores; the hits ranked below
    /// the depth follow in their fused order; `k` are returned. Re-scored hits carry their
    /// rerank score (and, in hybrid mode, their fused rank and score) in `legs`; the ones
    /// below the depth keep their fused score. Without a reranker this is
    /// `search_filtered`. `situate search` and `situate eval` both come here, so the depth
    /// means the same in both.
    pub fn search_reranked(
        &self,
        req: &situate_search::SearchRequest<'_>,
        filter: &DocumentFilter,
        rerank: Option<Rerank<'_>>,
    ) -> Result<Vec<Hit>> {
        let Some(rerank) = rerank else {
            return self.search_filtered(req, filter);
        };
        let wide = req.k.max(rerank.depth);
        let wide = situate_search::SearchRequest {
            k: wide,
            fetch: req.fetch.max(wide),
            ..req.clone()
        };
        let mut hits = self.search_filtered(&wide, filter)?;
        let tail = hits.split_off(rerank.depth.min(hits.len()));
        let mode = self.mode_for(req.mode)?;
        let passages = situate_search::rerank::passages(&hits);
        let scores = self
            .runtime()?
            .block_on(rerank.reranker.score(req.text, &passages))?;
        let head = hits.len();
        let mut out = situate_search::rerank::apply(hits, &scores, head, mode)
            .map_err(EngineError::Search)?;
        out.extend(tail);
        out.truncate(req.k);
        Ok(out)
    }
}
