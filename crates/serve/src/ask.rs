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
use situate_engine::{AskRequest, CheckedAsk, EngineError};
use std::sync::Arc;
use std::time::Duration;

/// The body of `POST /v1/ask`: the engine's question ([`AskRequest`]), and whether to
/// stream the answer.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub(crate) struct AskBody {
    /// The question and how to answer it.
    #[serde(flatten)]
    pub ask: AskRequest,
    /// Server-sent events as the answer is written, instead of one JSON answer.
    #[serde(default)]
    pub stream: bool,
}

/// A question checked for this service: within its length limit, and naming no model (a
/// model spec may be a path on the server), then the engine's check.
pub(crate) fn checked(s: &AppState, ask: &AskRequest) -> Result<CheckedAsk, Problem> {
    let chars = ask.question.chars().count();
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
    if ask.answer.model.is_some() {
        return Err(EngineError::field_error(
            "model",
            "the service answers with its own model ([answer] model, else [llm] model); a request cannot name one",
        )
        .into());
    }
    Ok(ask.check(&s.settings)?)
}

/// A `text` event: a piece of the answer as the model writes it.
#[derive(serde::Serialize)]
struct TextEvent<'a> {
    text: &'a str,
}

/// `POST /v1/ask`.
pub(crate) async fn ask(
    State(s): State<Arc<AppState>>,
    Body(b): Body<AskBody>,
) -> AppResult<Response> {
    let q = checked(&s, &b.ask)?;
    let timeout = Duration::from_millis(s.limits.ask_timeout_ms);
    if !b.stream {
        let r = s
            .readers
            .run_for(timeout, move |e| e.answer(&q, &|_| {}))
            .await?;
        return Ok(Json(r).into_response());
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    let text = tx.clone();
    tokio::spawn(async move {
        let on_text = move |piece: &str| {
            if let Ok(ev) = Event::default()
                .event("text")
                .json_data(TextEvent { text: piece })
            {
                let _ = text.send(ev);
            }
        };
        let r = s
            .readers
            .run_for(timeout, move |e| e.answer(&q, &on_text))
            .await;
        let last = match r {
            Ok(answer) => Event::default().event("answer").json_data(&answer),
            Err(p) => Event::default().event("error").json_data(p.to_json()),
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
