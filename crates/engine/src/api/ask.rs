//! A question: [`AskRequest`] → [`AskRequest::check`] → [`CheckedAsk`] →
//! [`Engine::answer`].

use super::*;
use crate::settings::{FilterSettings, SearchPlan, SearchSettings, Settings};
use crate::{Engine, EngineError, Result};
use serde::{Deserialize, Serialize};
use situate_core::DocumentFilter;
use std::collections::BTreeMap;

/// A question: `[answer]`'s settings by their `situate.toml` names beside it, the search
/// that finds the passages (`[search]`'s settings, nested as `search`: both sections have a
/// `mode`), and the filters. The body of `POST /v1/ask` (which refuses `model`: the
/// service answers with its own); `situate ask` builds the same from its flags; MCP's
/// `ask` tool takes its question, `mode` and `passages`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct AskRequest {
    /// The question, in any language (the answer is in the question's).
    pub question: String,
    /// The answer settings, by their `situate.toml` names.
    #[serde(flatten)]
    pub answer: crate::AnswerSettings,
    /// The search that finds the passages.
    #[serde(default)]
    pub search: SearchSettings,
    /// Only documents that match: ids, path globs, languages, `KEY=VALUE` metadata, card
    /// kinds.
    #[serde(default)]
    pub filter: FilterSettings,
    /// Fields no question knows: [`AskRequest::check`] refuses each by name.
    #[serde(flatten, skip_serializing)]
    #[schemars(skip)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

/// A question whose every field is checked: what [`crate::Engine::ask`] takes.
#[derive(Debug, Clone)]
pub struct CheckedAsk {
    /// The question, as given.
    pub question: String,
    /// How to answer.
    pub plan: crate::AnswerPlan,
    /// The search for the passages.
    pub search: SearchPlan,
    /// The filter.
    pub filter: DocumentFilter,
}

impl AskRequest {
    /// A question with every setting from `[answer]` and `[search]` or their defaults.
    pub fn new(question: impl Into<String>) -> AskRequest {
        AskRequest {
            question: question.into(),
            ..AskRequest::default()
        }
    }

    /// Checks every field against `settings` (whose `[answer]` and `[search]` fill what
    /// the request leaves unset): the one check of a question.
    pub fn check(&self, settings: &Settings) -> Result<CheckedAsk> {
        refuse_unknown::<AskRequest>(&self.unknown, "a question")?;
        if self.question.trim().is_empty() {
            return Err(EngineError::field_error(
                "question",
                "the question is empty",
            ));
        }
        let plan = self
            .answer
            .clone()
            .over(&settings.answer)
            .plan(&settings.answer_llm())?;
        let search = self
            .search
            .clone()
            .over(&settings.search)
            .plan(&settings.default_llm())
            .map_err(|e| e.under("search"))?;
        Ok(CheckedAsk {
            question: self.question.clone(),
            plan,
            search,
            filter: self.filter.filter()?,
        })
    }
}

impl Engine {
    /// Answers a checked question ([`Engine::ask`]), calling `on_text` with each piece of
    /// the answer as the model writes it.
    pub fn answer(
        &self,
        q: &CheckedAsk,
        on_text: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<crate::AnswerResponse> {
        self.ask(&q.question, &q.plan, &q.search, &q.filter, on_text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use serde_json::json;

    #[test]
    fn a_question_nests_its_search_and_names_its_bad_fields() {
        let s = Settings::default();
        let q: AskRequest = serde_json::from_value(json!({"question": "why?", "passages": 4,
            "search": {"mode": "bm25", "k": 5}, "filter": {"languages": ["en"]}}))
        .expect("a question");
        let c = q.check(&s).expect("valid");
        assert_eq!(c.search.mode, Some(situate_search::Mode::Bm25));
        assert_eq!(c.filter.languages, vec![situate_core::Language::En]);
        for (body, field) in [
            (json!({"question": " "}), "question"),
            (
                json!({"question": "q", "search_mode": "bm25"}),
                "search_mode",
            ),
            (
                json!({"question": "q", "search": {"mode": "psychic"}}),
                "search.mode",
            ),
            (json!({"question": "q", "search": {"k": 0}}), "search.k"),
            (
                json!({"question": "q", "filter": {"meta": ["x"]}}),
                "filter.meta",
            ),
        ] {
            let q: AskRequest = serde_json::from_value(body.clone()).expect("parses");
            let e = q.check(&s).expect_err("invalid");
            assert_eq!(e.kind(), ErrorKind::Invalid, "{body}");
            assert_eq!(e.field(), Some(field), "{body}: {e}");
        }
    }
}
