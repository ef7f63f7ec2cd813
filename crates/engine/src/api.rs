//! The typed operations every front end shares: one request type per operation, with its
//! defaults and checks in one place, answered by one engine type. The CLI parses its flags
//! into these, the HTTP service and MCP deserialize them from JSON; each then makes the
//! same engine call and prints or sends the same answer type. Field names are the wire
//! names (JSON and `situate.toml`); an error in one names it
//! ([`EngineError::InvalidField`]), and the CLI adds its flag.

use crate::settings::{FilterSettings, SearchPlan, SearchSettings, Settings};
use crate::{CardView, Engine, EngineError, Neighbour, Result};
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

/// The wire names of a request type's fields, from its schema (the one list: the type),
/// for the error that refuses another.
fn fields_of<T: schemars::JsonSchema>() -> String {
    let schema = schemars::schema_for!(T);
    schema.as_value()["properties"]
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect::<Vec<_>>().join(", "))
        .unwrap_or_default()
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
        if let Some(name) = self.unknown.keys().next() {
            return Err(EngineError::field_error(
                name.clone(),
                format!(
                    "unknown field: a search takes {}",
                    fields_of::<SearchRequest>()
                ),
            ));
        }
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

/// A card in full: `situate show`, `GET /v1/cards/{chunk_id}`, MCP's `get_card`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CardRequest {
    /// The chunk id.
    pub chunk_id: String,
    /// Chunks to include before and after it in its document [0; at most
    /// [`MAX_NEIGHBOURS`]].
    #[serde(default)]
    pub neighbours: u32,
}

/// The most neighbours a card request may ask for on each side.
pub const MAX_NEIGHBOURS: u32 = 20;

/// A card's answer: the card view, and its neighbours when asked for.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct CardAnswer {
    /// The card and its document.
    #[serde(flatten)]
    pub card: CardView,
    /// The chunks around it, when `neighbours` was above 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub neighbours: Option<Neighbours>,
}

/// The chunks before and after a card, in document order.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Neighbours {
    /// Before it, nearest last.
    pub before: Vec<Neighbour>,
    /// After it, nearest first.
    pub after: Vec<Neighbour>,
}

impl Engine {
    /// A card in full, with `neighbours` chunks on each side when asked for.
    pub fn card(&self, req: &CardRequest) -> Result<CardAnswer> {
        if req.neighbours > MAX_NEIGHBOURS {
            return Err(EngineError::field_error(
                "neighbours",
                format!(
                    "at most {MAX_NEIGHBOURS} on each side, not {}",
                    req.neighbours
                ),
            ));
        }
        let card = self.card_view(&req.chunk_id)?;
        let neighbours = if req.neighbours > 0 {
            let (before, after) = self.neighbours(&req.chunk_id, req.neighbours, req.neighbours)?;
            Some(Neighbours { before, after })
        } else {
            None
        };
        Ok(CardAnswer { card, neighbours })
    }
}

/// The answer to a person's decision on a context (`situate contexts set`, a `review`
/// job, MCP's `review_context`): the card and its context's status now.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct DecisionAnswer {
    /// The chunk decided on.
    pub chunk_id: String,
    /// Its context's status after the decision.
    pub context_status: situate_core::ContextStatus,
}

impl Engine {
    /// Records a person's decision on `chunk_id`'s context ([`Engine::decide_context`]).
    pub fn decide(&mut self, chunk_id: &str, decision: crate::Decision) -> Result<DecisionAnswer> {
        let context_status = self.decide_context(chunk_id, decision)?;
        Ok(DecisionAnswer {
            chunk_id: chunk_id.to_string(),
            context_status,
        })
    }
}

/// The answer to removing a document (`situate rm`, `DELETE /v1/documents/…`).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct RemoveAnswer {
    /// The document removed, with its cards, from the store and every index.
    pub removed: String,
}

impl Engine {
    /// Removes `document_id` everywhere ([`Engine::remove`]).
    pub fn remove_document(&mut self, document_id: &str) -> Result<RemoveAnswer> {
        self.remove(document_id)?;
        Ok(RemoveAnswer {
            removed: document_id.to_string(),
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
