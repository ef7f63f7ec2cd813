//! `POST /v1/search` and `GET /v1/cards/{chunk_id}`: the engine's search and card
//! requests, checked once ([`situate_engine::api`]), with the service's own limits.

use crate::problem::Problem;
use crate::*;
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use situate_engine::api::{CardAnswer, CardRequest};
use situate_engine::{SearchRequest, SearchResponse};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) async fn search(
    State(s): State<Arc<AppState>>,
    Body(b): Body<SearchRequest>,
) -> AppResult<Json<SearchResponse>> {
    let limits = s.limits;
    let chars = b.query.chars().count();
    if chars > limits.max_query_chars {
        return Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "query-too-long",
            format!(
                "the query has {chars} characters; at most {} are accepted",
                limits.max_query_chars
            ),
        ));
    }
    let c = b.check(&s.settings)?;
    if c.plan.k > limits.max_k {
        return Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "k-too-large",
            format!(
                "k is {}; this service returns at most {} hits",
                c.plan.k, limits.max_k
            ),
        ));
    }
    if let Some(after) = c.after {
        wait_for_position(&s, after).await?;
    }
    let r = s
        .readers
        .run(move |e| e.query(&c.query, &c.plan, &c.filter))
        .await?;
    Ok(Json(r))
}

/// Waits (within the request's time limit) until the node has applied the feed position
/// `after`.
pub(crate) async fn wait_for_position(s: &AppState, after: u64) -> AppResult<()> {
    let Some(f) = &s.follow else {
        return Err(Problem::invalid(
            "after: this service follows no shared store (start it with --store)",
        ));
    };
    let deadline = Instant::now() + Duration::from_millis(s.limits.timeout_ms);
    while f.position() < after {
        if Instant::now() >= deadline {
            return Err(Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "position-not-reached",
                format!(
                    "this node has applied the store's changes up to position {}, not {after}, within {} ms{}",
                    f.position(),
                    s.limits.timeout_ms,
                    f.error().map(|e| format!(" ({e})")).unwrap_or_default()
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CardQuery {
    /// Chunks to include before and after the card.
    #[serde(default)]
    neighbours: u32,
}

pub(crate) async fn card(
    State(s): State<Arc<AppState>>,
    path: Result<Path<String>, axum::extract::rejection::PathRejection>,
    query: Result<Query<CardQuery>, axum::extract::rejection::QueryRejection>,
) -> AppResult<Json<CardAnswer>> {
    let Path(chunk_id) = path?;
    let Query(q) = query?;
    if q.neighbours > s.limits.max_neighbours {
        return Err(Problem::from(situate_engine::EngineError::field_error(
            "neighbours",
            format!(
                "at most {} on each side, not {}",
                s.limits.max_neighbours, q.neighbours
            ),
        )));
    }
    let req = CardRequest {
        chunk_id,
        neighbours: q.neighbours,
    };
    Ok(Json(s.readers.run(move |e| e.card(&req)).await?))
}
