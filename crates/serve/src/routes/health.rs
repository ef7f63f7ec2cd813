//! Probes and counters: `/healthz`, `/readyz`, `/v1/info`, `/metrics`.

use crate::problem::Problem;
use crate::*;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

pub(crate) async fn metrics_text(State(s): State<Arc<AppState>>) -> AppResult<Response> {
    let size = s
        .readers
        .run(|e| e.stats())
        .await
        .ok()
        .map(|st| metrics::IndexSize {
            documents: st.store.documents,
            chunks: st.store.chunks,
            vectors: st.vectors,
            disk_bytes: st.disk_bytes,
        });
    let text = s.metrics.render(&s.jobs.counts()?, size);
    let mut r = text.into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    Ok(r)
}

/// A probe's answer: `{"status": "ok"}` (`/healthz`) or `{"status": "ready"}` (`/readyz`).
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct Probe {
    /// `ok` or `ready`.
    pub status: &'static str,
}

pub(crate) async fn healthz() -> Json<Probe> {
    Json(Probe { status: "ok" })
}

pub(crate) async fn readyz(State(s): State<Arc<AppState>>) -> AppResult<Json<Probe>> {
    if !s.readers.ready() {
        return Err(Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not-ready",
            "the index is being opened and the embedder loaded",
        ));
    }
    // The index still opens (it may have been removed under the service).
    s.readers.run(|e| e.generation()).await?;
    Ok(Json(Probe { status: "ready" }))
}

/// The service and its index: `GET /v1/info` and MCP's `index_status`.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct ServiceInfo {
    /// situate's version.
    pub version: String,
    /// The index's state.
    #[serde(flatten)]
    pub status: situate_engine::api::StatusAnswer,
    /// Limits of one request.
    pub limits: Limits,
    /// Threads that answer reads.
    pub readers: usize,
    /// `api keys`, or `none (loopback only)`.
    pub auth: String,
    /// Seconds since the service started.
    pub uptime_s: u64,
    /// Jobs by state, those with at least one.
    pub jobs: std::collections::BTreeMap<String, u64>,
    /// On a query node, the shared store it follows.
    pub store: Option<FollowInfo>,
}

/// What a query node reports of the store it follows.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct FollowInfo {
    /// The store (`user@host:port/database`).
    pub store: String,
    /// The change-feed position the node has applied.
    pub position: u64,
    /// The last catch-up's error, while the store cannot be read.
    pub error: Option<String>,
}

/// The service's [`ServiceInfo`] now.
pub(crate) async fn service_info(s: &AppState) -> AppResult<ServiceInfo> {
    let status = s.readers.run(|e| e.status()).await?;
    Ok(ServiceInfo {
        version: env!("CARGO_PKG_VERSION").to_string(),
        status,
        limits: s.limits,
        readers: s.readers.threads(),
        auth: if s.keys.is_empty() {
            "none (loopback only)"
        } else {
            "api keys"
        }
        .to_string(),
        uptime_s: s.started.elapsed().as_secs(),
        jobs: s
            .jobs
            .counts()?
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| (k.to_string(), n))
            .collect(),
        store: s.follow.as_ref().map(|f| FollowInfo {
            store: f.store.clone(),
            position: f.position(),
            error: f.error(),
        }),
    })
}

pub(crate) async fn info(State(s): State<Arc<AppState>>) -> AppResult<Json<ServiceInfo>> {
    Ok(Json(service_info(&s).await?))
}
