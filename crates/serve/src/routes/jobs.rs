//! `/v1/jobs`: submit, list, poll, cancel and follow (SSE) the jobs of [`crate::jobs`].

use crate::jobs::{JobSpec, JobStatus};
use crate::*;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// The jobs remembered, newest first (`GET /v1/jobs`).
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct JobList {
    /// The jobs.
    pub jobs: Vec<JobStatus>,
}

/// `202 Accepted` with the job and its URL.
pub(crate) fn accepted(status: JobStatus) -> Response {
    let location = format!("/v1/jobs/{}", status.id);
    let mut r = (StatusCode::ACCEPTED, Json(status)).into_response();
    if let Ok(v) = HeaderValue::from_str(&location) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

pub(crate) async fn create_job(
    State(s): State<Arc<AppState>>,
    Body(spec): Body<JobSpec>,
) -> AppResult<Response> {
    Ok(accepted(s.jobs.submit(spec)?))
}

pub(crate) async fn list_jobs(State(s): State<Arc<AppState>>) -> AppResult<Json<JobList>> {
    Ok(Json(JobList {
        jobs: s.jobs.list()?,
    }))
}

pub(crate) async fn job(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> AppResult<Json<JobStatus>> {
    Ok(Json(s.jobs.status(&id)?))
}

pub(crate) async fn cancel_job(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> AppResult<Json<JobStatus>> {
    Ok(Json(s.jobs.cancel(&id)?))
}

/// The job's status now, then at each change, as Server-Sent Events (`status`; the last,
/// once the job is over, is `end`), then the stream closes.
pub(crate) async fn job_events(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> AppResult<Response> {
    let rx = s.jobs.receiver(&id)?;
    let events =
        futures_util::stream::unfold((rx, true, false), |(mut rx, first, over)| async move {
            if over || (!first && rx.changed().await.is_err()) {
                return None;
            }
            let status = rx.borrow_and_update().clone();
            let end = status.state.is_final();
            let event = Event::default()
                .event(if end { "end" } else { "status" })
                .json_data(&status)
                .ok()?;
            Some((Ok::<_, std::convert::Infallible>(event), (rx, false, end)))
        });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}
