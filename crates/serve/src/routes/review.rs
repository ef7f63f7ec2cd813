//! The review queue: `GET /v1/contexts` and a person's decision, `POST /v1/contexts/{chunk_id}`.

use crate::routes::jobs::accepted;
use crate::*;
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use situate_engine::api::{ContextPage, ContextsRequest};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ContextsQuery {
    /// Comma-separated statuses [every status].
    status: Option<String>,
    limit: Option<usize>,
    cursor: Option<String>,
}

/// The review queue's statuses from a comma-separated list (empty: every status).
pub(crate) fn status_list(list: Option<&str>) -> AppResult<Vec<situate_core::ContextStatus>> {
    let names = crate::ui::list(&list.map(String::from));
    Ok(situate_engine::api::parse_statuses("status", &names)?)
}

pub(crate) async fn contexts(
    State(s): State<Arc<AppState>>,
    query: Result<Query<ContextsQuery>, axum::extract::rejection::QueryRejection>,
) -> AppResult<Json<ContextPage>> {
    let Query(q) = query?;
    let req = ContextsRequest {
        status: status_list(q.status.as_deref())?,
        limit: q.limit,
        cursor: q.cursor,
    };
    let max = s.limits.max_page;
    Ok(Json(
        s.readers.run(move |e| e.contexts_page(&req, max)).await?,
    ))
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

/// The answer to a person's decision (`POST /v1/contexts/{chunk_id}`, MCP's
/// `review_context`): the card as it now is, and the decision's job.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct ReviewAnswer {
    /// The card after the decision.
    pub card: situate_engine::CardView,
    /// The decision's job, finished.
    pub job: jobs::JobStatus,
}

/// A decision done, or still waiting for the writer.
pub(crate) enum Reviewed {
    /// The writer was free: done.
    Done(Box<ReviewAnswer>),
    /// A long job holds the writer: the decision's job, queued.
    Waiting(Box<jobs::JobStatus>),
}

/// A person's decision on one context: a job on the one writer like every write, waited
/// for up to `wait`.
pub(crate) async fn decide(
    s: &AppState,
    chunk_id: String,
    decision: String,
    text: Option<String>,
    wait: Duration,
) -> AppResult<Reviewed> {
    jobs::decision_of(&decision, text.as_deref())?;
    let id = chunk_id.clone();
    s.readers.run(move |e| e.chunk(&id)).await?;
    let job = s.jobs.decide(&chunk_id, decision, text, wait).await?;
    if job.state != jobs::JobState::Succeeded {
        return Ok(Reviewed::Waiting(Box::new(job)));
    }
    let card = s.readers.run(move |e| e.card_view(&chunk_id)).await?;
    Ok(Reviewed::Done(Box::new(ReviewAnswer { card, job })))
}

/// When the writer is free the decision is done at once and the answer is the card as it
/// now is (200); when a long job holds the writer the answer is `202` with the decision's
/// job.
pub(crate) async fn review(
    State(s): State<Arc<AppState>>,
    path: Result<Path<String>, axum::extract::rejection::PathRejection>,
    Body(b): Body<ReviewBody>,
) -> AppResult<Response> {
    let Path(chunk_id) = path?;
    let wait = REVIEW_WAIT.min(Duration::from_millis(s.limits.timeout_ms));
    Ok(
        match decide(&s, chunk_id, b.decision, b.text, wait).await? {
            Reviewed::Done(a) => Json(*a).into_response(),
            Reviewed::Waiting(job) => accepted(*job),
        },
    )
}
