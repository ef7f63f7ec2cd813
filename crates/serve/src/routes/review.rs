//! The review queue: `GET /v1/contexts` and a person's decision, `POST /v1/contexts/{chunk_id}`.

use crate::routes::documents::{cursor_of, page_limit};
use crate::routes::jobs::accepted;
use crate::*;
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// A page of the review queue (`GET /v1/contexts`).
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct ContextPage {
    /// The cards, in document order.
    pub contexts: Vec<situate_engine::ContextItem>,
    /// Pass it back as `cursor` for the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ContextsQuery {
    /// Comma-separated statuses [every status].
    status: Option<String>,
    limit: Option<usize>,
    cursor: Option<String>,
}

/// The (document, ordinal) a review-queue cursor holds ([`context_key`]'s inverse).
pub(crate) fn context_position(key: String) -> Option<(String, u32)> {
    let (doc, ord) = key.rsplit_once('\n')?;
    Some((doc.to_string(), ord.parse::<u32>().ok()?))
}

/// One page of the review queue (`limit` cards of `statuses` after `after`), for the JSON
/// route and the web page alike.
pub(crate) async fn context_page(
    s: &AppState,
    statuses: Vec<situate_core::ContextStatus>,
    after: Option<(String, u32)>,
    limit: usize,
) -> AppResult<ContextPage> {
    let items = s
        .readers
        .run(move |e| {
            e.contexts_after(
                &statuses,
                after.as_ref().map(|(d, o)| (d.as_str(), *o)),
                limit + 1,
            )
        })
        .await?;
    let (contexts, next_cursor) = page(items, limit, context_key);
    Ok(ContextPage {
        contexts,
        next_cursor,
    })
}

/// The key of a review-queue item for its cursor: its document and ordinal.
pub(crate) fn context_key(i: &situate_engine::ContextItem) -> String {
    format!("{}\n{}", i.document_id, i.ordinal)
}

pub(crate) async fn contexts(
    State(s): State<Arc<AppState>>,
    query: Result<Query<ContextsQuery>, axum::extract::rejection::QueryRejection>,
) -> AppResult<Json<ContextPage>> {
    let Query(q) = query?;
    let names: Vec<String> = q
        .status
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(String::from)
        .collect();
    let statuses = if names.is_empty() {
        Vec::new()
    } else {
        jobs::statuses_of(&names)?
    };
    let limit = page_limit(&s, q.limit)?;
    let after = cursor_of(q.cursor.as_deref(), context_position)?;
    Ok(Json(context_page(&s, statuses, after, limit).await?))
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReviewBody {
    /// `accept`, `reject` or `edit`.
    decision: String,
    /// The new context, for `edit`.
    text: Option<String>,
}

/// How long a review waits for the writer before answering `202` with its job.
pub(crate) const REVIEW_WAIT: Duration = Duration::from_secs(10);

/// A person's decision on one context: a job on the one writer like every write. When the
/// writer is free it is done at once and the answer is the card as it now is (200); when a
/// long job holds the writer the answer is `202` with the decision's job.
pub(crate) async fn review(
    State(s): State<Arc<AppState>>,
    path: Result<Path<String>, axum::extract::rejection::PathRejection>,
    Body(b): Body<ReviewBody>,
) -> AppResult<Response> {
    let Path(chunk_id) = path?;
    jobs::decision_of(&b.decision, b.text.as_deref())?;
    let id = chunk_id.clone();
    s.readers.run(move |e| e.chunk(&id)).await?;
    let wait = REVIEW_WAIT.min(Duration::from_millis(s.limits.timeout_ms));
    let done = s.jobs.decide(&chunk_id, b.decision, b.text, wait).await?;
    if done.state != jobs::JobState::Succeeded {
        return Ok(accepted(done));
    }
    let card = s.readers.run(move |e| e.card_view(&chunk_id)).await?;
    Ok(Json(serde_json::json!({"card": card, "job": done})).into_response())
}
