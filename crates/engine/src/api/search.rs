//! Search: [`SearchRequest`] → [`SearchRequest::check`] → [`CheckedSearch`] →
//! [`Engine::query`]; and why a chunk ranks where it does ([`Engine::explain_hit`]).

use super::*;
use crate::settings::{FilterSettings, SearchPlan, SearchSettings, Settings};
use crate::{Engine, EngineError, Result};
use serde::{Deserialize, Serialize};
use situate_core::DocumentFilter;
use std::collections::BTreeMap;

/// A search: the query, `[search]`'s settings by their `situate.toml` names (each unset
/// one from `[search]`, then the default), the filters, and on a query node the feed
/// position to wait for. The body of `POST /v1/search`; `situate search` builds the same
/// from its flags; MCP's `search` tool takes its query, `k`, `mode` and `filter`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SearchRequest {
    /// The query.
    pub query: String,
    /// The search settings, by their `situate.toml` names.
    #[serde(flatten)]
    pub settings: SearchSettings,
    /// Only documents that match: ids, path globs, languages, `KEY=VALUE` metadata, card
    /// kinds.
    #[serde(default)]
    pub filter: FilterSettings,
    /// Accepted for parity with `situate search --explain`: a JSON hit always carries
    /// each leg's rank and score.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub explain: bool,
    /// On a query node of a shared store: first wait until the node has applied this
    /// feed position (`position` of `situate ingest --store`: read your writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<u64>,
    /// Fields no search knows (serde cannot refuse them beside a flattened struct):
    /// [`SearchRequest::check`] refuses each by name.
    #[serde(flatten, skip_serializing)]
    #[schemars(skip)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

/// A search whose every field is checked: what [`crate::Engine::query`] takes.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedSearch {
    /// The query, as given.
    pub query: String,
    /// The settings, each set and in range.
    pub plan: SearchPlan,
    /// The filter.
    pub filter: DocumentFilter,
    /// The feed position to wait for first.
    pub after: Option<u64>,
}

impl SearchRequest {
    /// A search for `query` with every setting from `[search]` or its default.
    pub fn new(query: impl Into<String>) -> SearchRequest {
        SearchRequest {
            query: query.into(),
            ..SearchRequest::default()
        }
    }

    /// Checks every field against `settings` (whose `[search]` fills what the request
    /// leaves unset): the one check of a search, whichever front end it came from.
    pub fn check(&self, settings: &Settings) -> Result<CheckedSearch> {
        refuse_unknown::<SearchRequest>(&self.unknown, "a search")?;
        if self.query.trim().is_empty() {
            return Err(EngineError::field_error("query", "the query is empty"));
        }
        let plan = self
            .settings
            .clone()
            .over(&settings.search)
            .plan(&settings.default_llm())?;
        Ok(CheckedSearch {
            query: self.query.clone(),
            plan,
            filter: self.filter.filter()?,
            after: self.after,
        })
    }
}

/// Why a chunk ranks where it does for a query (MCP's `explain_hit`): its rank and each
/// leg's, or that no leg ranked it, and whether its context is in the indexes.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ExplainAnswer {
    /// The chunk.
    pub chunk_id: String,
    /// The query as searched.
    pub query: String,
    /// The mode searched.
    pub mode: situate_search::Mode,
    /// Its rank after fusion; `null` when no leg ranked it.
    pub rank: Option<usize>,
    /// Its fused score, when ranked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f32>,
    /// Each leg's rank and score, when ranked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub legs: Option<Vec<situate_core::LegScore>>,
    /// Whether the chunk's context is in the indexes (written and not rejected).
    pub context_indexed: bool,
    /// Its context, if one was written.
    pub context: Option<String>,
    /// Its context's status.
    pub context_status: situate_core::ContextStatus,
    /// What the answer means, in words.
    pub note: String,
}

impl Engine {
    /// Why `chunk_id` ranks where it does for `query` searched with `plan`: each leg is
    /// read `plan.fetch` deep.
    pub fn explain_hit(
        &self,
        query: &str,
        chunk_id: &str,
        plan: &SearchPlan,
    ) -> Result<ExplainAnswer> {
        let card = self.card_view(chunk_id)?;
        let r = self.query(query, plan, &Default::default())?;
        let fetch = plan.fetch;
        let found = r.hits.into_iter().find(|h| h.chunk_id == card.chunk_id);
        let note = if found.is_some() {
            format!(
                "each leg contributes its first {fetch} hits to the fusion; a leg missing from `legs` did not rank the chunk among them"
            )
        } else {
            format!(
                "the chunk is not among the first {fetch} hits of any leg: neither its words (with its context) nor its embedding are close to the query"
            )
        };
        Ok(ExplainAnswer {
            context_indexed: card.context_status.is_indexed() && card.generated_context.is_some(),
            chunk_id: card.chunk_id,
            query: r.query,
            mode: r.mode,
            rank: found.as_ref().map(|h| h.rank),
            score: found.as_ref().map(|h| h.score),
            legs: found.map(|h| h.legs),
            context: card.generated_context,
            context_status: card.context_status,
            note,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use serde_json::json;

    fn request(v: serde_json::Value) -> SearchRequest {
        serde_json::from_value(v).expect("a search request")
    }

    #[test]
    fn settings_sit_beside_the_query_by_their_toml_names() {
        let r = request(json!({"query": "lens", "k": 3, "context_weight": 0.25,
            "filter": {"languages": ["ru"]}, "after": 7}));
        assert_eq!(r.settings.k, Some(3));
        assert_eq!(r.settings.context_weight, Some(0.25));
        let c = r.check(&Settings::default()).expect("valid");
        assert_eq!(c.plan.k, 3);
        assert_eq!(c.plan.context_weight, 0.25);
        assert_eq!(c.filter.languages, vec![situate_core::Language::Ru]);
        assert_eq!(c.after, Some(7));
        // What the request leaves unset comes from [search], then the default.
        let mut s = Settings::default();
        s.search.k = Some(4);
        s.search.fetch = Some(30);
        let c = SearchRequest::new("lens").check(&s).expect("valid");
        assert_eq!((c.plan.k, c.plan.fetch), (4, 30));
        // Serialized, it reads back the same.
        let back: SearchRequest =
            serde_json::from_value(serde_json::to_value(&r).expect("json")).expect("back");
        assert_eq!(back, r);
    }

    #[test]
    fn each_bad_field_is_named() {
        let s = Settings::default();
        for (body, field) in [
            (json!({"query": "  "}), "query"),
            (json!({"query": "x", "kk": 3}), "kk"),
            (json!({"query": "x", "k": 0}), "k"),
            (
                json!({"query": "x", "context_weight": -1.0}),
                "context_weight",
            ),
            (json!({"query": "x", "mode": "semantic"}), "mode"),
            (json!({"query": "x", "fusion": "borda"}), "fusion"),
            (json!({"query": "x", "rerank_depth": 0}), "rerank_depth"),
            (
                json!({"query": "x", "filter": {"languages": ["klingon"]}}),
                "filter.languages",
            ),
            (
                json!({"query": "x", "filter": {"meta": ["novalue"]}}),
                "filter.meta",
            ),
        ] {
            let e = request(body.clone()).check(&s).expect_err("invalid");
            assert_eq!(e.kind(), ErrorKind::Invalid, "{body}");
            assert_eq!(e.field(), Some(field), "{body}: {e}");
        }
        // The unknown field's error lists the fields a search takes.
        let e = request(json!({"query": "x", "kk": 3}))
            .check(&s)
            .expect_err("unknown");
        for f in ["query", "k", "context_weight", "filter", "after"] {
            assert!(e.to_string().contains(f), "{e}");
        }
    }
}
