//! `POST /v1/ask`: a grounded answer ([`situate_engine::Engine::ask`], the call `situate
//! ask` makes) on a reader. With `"stream": true` the answer comes as server-sent events:
//! `text` events (`{"text": "…"}`) as the model writes, then one `answer` event with the
//! whole answer (the `situate ask --json` shape), or one `error` event (a problem).
//!
//! The model is the service's (`[answer] model`, else `[llm] model`): a request cannot name
//! one, since a model spec may be a path on the server.

use crate::problem::Problem;
use crate::{AppResult, AppState, Body};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use situate_engine::{AnswerSettings, FilterSettings, SearchSettings};
use std::sync::Arc;
use std::time::Duration;

/// The body of `POST /v1/ask`: the question, how to answer it, and which documents to use.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AskBody {
    /// The question (at most the service's `max_query_chars`).
    pub question: String,
    /// `retrieval`, `full` or `auto` [the service's `[answer] mode`, else auto].
    #[schemars(extend("enum" = ["retrieval", "full", "auto", null]))]
    pub mode: Option<String>,
    /// Passages given to the model in retrieval mode [8; at most 50].
    pub passages: Option<usize>,
    /// Most tokens of the answer [300].
    pub max_tokens: Option<usize>,
    /// The best passage's score under which the model is not asked.
    pub min_score: Option<f32>,
    /// An answer whose citations do not hold: `mark`, `retry` or `refuse` [mark].
    #[schemars(extend("enum" = ["mark", "retry", "refuse", null]))]
    pub unsupported: Option<String>,
    /// The search's legs: `bm25`, `vector` or `hybrid` [hybrid when the index has vectors].
    #[schemars(extend("enum" = ["bm25", "vector", "hybrid", null]))]
    pub search_mode: Option<String>,
    /// A reranker spec for the search [the service's `[search] rerank`].
    pub rerank: Option<String>,
    /// Server-sent events as the answer is written, instead of one JSON answer.
    #[serde(default)]
    pub stream: bool,
    /// Only documents that match: ids, path globs, languages, `KEY=VALUE` metadata.
    #[serde(default)]
    pub filter: FilterSettings,
}

/// The checked question and plans of an ask body, or why it is refused.
fn plans(
    s: &AppState,
    b: &AskBody,
) -> Result<
    (
        situate_engine::AnswerPlan,
        situate_engine::SearchPlan,
        situate_core::DocumentFilter,
    ),
    Problem,
> {
    if b.question.trim().is_empty() {
        return Err(Problem::invalid("the question is empty"));
    }
    let chars = b.question.chars().count();
    if chars > s.limits.max_query_chars {
        return Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "query-too-long",
            format!(
                "the question has {chars} characters; at most {} are accepted",
                s.limits.max_query_chars
            ),
        ));
    }
    let default_llm = s.settings.default_llm();
    let answer = AnswerSettings {
        mode: b.mode.clone(),
        passages: b.passages,
        max_tokens: b.max_tokens,
        min_score: b.min_score,
        unsupported: b.unsupported.clone(),
        ..AnswerSettings::default()
    }
    .over(&s.settings.answer)
    .plan(&s.settings.answer_llm())?;
    let search = SearchSettings {
        mode: b.search_mode.clone(),
        rerank: b.rerank.clone(),
        ..SearchSettings::default()
    }
    .over(&s.settings.search)
    .plan(&default_llm)?;
    Ok((answer, search, b.filter.filter()?))
}

/// `POST /v1/ask`.
pub(crate) async fn ask(
    State(s): State<Arc<AppState>>,
    Body(b): Body<AskBody>,
) -> AppResult<Response> {
    let (plan, search, filter) = plans(&s, &b)?;
    let timeout = Duration::from_millis(s.limits.ask_timeout_ms);
    let question = b.question;
    if !b.stream {
        let r = s
            .readers
            .run_for(timeout, move |e| {
                e.ask(&question, &plan, &search, &filter, &|_| {})
            })
            .await?;
        return Ok(Json(r).into_response());
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    let text = tx.clone();
    tokio::spawn(async move {
        let on_text = move |piece: &str| {
            if let Ok(ev) = Event::default()
                .event("text")
                .json_data(serde_json::json!({ "text": piece }))
            {
                let _ = text.send(ev);
            }
        };
        let r = s
            .readers
            .run_for(timeout, move |e| {
                e.ask(&question, &plan, &search, &filter, &on_text)
            })
            .await;
        let last = match r {
            Ok(answer) => Event::default().event("answer").json_data(&answer),
            Err(p) => Event::default()
                .event("error")
                .json_data(serde_json::json!({
                    "status": p.status.as_u16(),
                    "code": p.code,
                    "detail": p.detail,
                })),
        };
        if let Ok(ev) = last {
            let _ = tx.send(ev);
        }
    });
    let events = futures_util::stream::unfold(rx, |mut rx| async move {
        let ev = rx.recv().await?;
        Some((Ok::<_, std::convert::Infallible>(ev), rx))
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}
