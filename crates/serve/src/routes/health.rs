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

pub(crate) async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({"status": "ok"}))
}

pub(crate) async fn readyz(State(s): State<Arc<AppState>>) -> AppResult<Json<serde_json::Value>> {
    if !s.readers.ready() {
        return Err(Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not-ready",
            "the index is being opened and the embedder loaded",
        ));
    }
    // The index still opens (it may have been removed under the service).
    s.readers.run(|e| e.generation()).await?;
    Ok(Json(serde_json::json!({"status": "ready"})))
}

pub(crate) async fn info(State(s): State<Arc<AppState>>) -> AppResult<Json<serde_json::Value>> {
    let (stats, mode) = s
        .readers
        .run(|e| Ok((e.stats()?, e.mode_for(None)?)))
        .await?;
    Ok(Json(serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "index": s.index,
        "default_mode": mode,
        "stats": stats,
        "limits": s.limits,
        "readers": s.readers.threads(),
        "auth": if s.keys.is_empty() { "none (loopback only)" } else { "api keys" },
        "uptime_s": s.started.elapsed().as_secs(),
        "store": s.follow.as_ref().map(|f| serde_json::json!({
            "store": f.store, "position": f.position(), "error": f.error(),
        })),
    })))
}
