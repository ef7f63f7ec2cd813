//! The router: every route of the service, its middleware and the MCP endpoint.

use crate::middleware::{cors, guard, track};
use crate::problem::Problem;
use crate::routes::{documents::*, evals::*, health::*, jobs::*, review::*, search::*};
use crate::*;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use std::sync::Arc;

pub(crate) fn router(state: Arc<AppState>, mcp_allow_write: bool) -> Router {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let mcp_state = Arc::clone(&state);
    // Host and Origin are the guard's checks (with --allow-host), as on every route.
    let mcp = StreamableHttpService::new(
        move || {
            Ok(mcp::SituateMcp::new(
                Arc::clone(&mcp_state),
                mcp_allow_write,
            ))
        },
        LocalSessionManager::default().into(),
        StreamableHttpServerConfig::default().disable_allowed_hosts(),
    );
    Router::new()
        .nest_service("/mcp", mcp)
        .route(
            "/",
            get(|| async { axum::response::Redirect::to("/ui/search") }),
        )
        .route("/ui/search", get(ui::search))
        .route("/ui/cards/{*chunk_id}", get(ui::card))
        .route("/ui/review", get(ui::review_queue))
        .route("/ui/review/{*chunk_id}", post(ui::review_post))
        .route("/ui/jobs", get(ui::jobs_page))
        .route("/ui/jobs/ingest", post(ui::jobs_ingest))
        .route("/ui/evals", get(ui::evals_page))
        .route("/ui/evals/{id}", get(ui::eval_page))
        .route("/ui/login", get(ui::login_page).post(ui::login))
        .route("/ui/logout", get(ui::logout))
        .route("/ui/app.css", get(ui::css))
        .route("/ui/app.js", get(ui::js))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/v1/info", get(info))
        .route("/metrics", get(metrics_text))
        .route("/openapi.json", get(|| async { Json(openapi::document()) }))
        .route("/v1/search", post(search))
        .route("/v1/ask", post(ask::ask))
        .route("/v1/cards/{*chunk_id}", get(card))
        .route("/v1/documents", get(documents))
        .route(
            "/v1/documents/{*document_id}",
            get(document).delete(delete_document),
        )
        .route(
            "/v1/jobs",
            post(create_job)
                .get(list_jobs)
                .layer(DefaultBodyLimit::max(state.limits.max_upload_bytes)),
        )
        .route("/v1/jobs/{id}", get(job))
        .route("/v1/jobs/{id}/events", get(job_events))
        .route("/v1/jobs/{id}/cancel", post(cancel_job))
        .route("/v1/evals", get(evals))
        .route("/v1/evals/{id}", get(eval_report))
        .route("/v1/evals/{id}/failure.svg", get(eval_plot))
        .route("/v1/contexts", get(contexts))
        .route("/v1/contexts/{*chunk_id}", post(review))
        .fallback(|| async {
            Problem::new(StatusCode::NOT_FOUND, "route-not-found", "no such route")
        })
        .method_not_allowed_fallback(|| async {
            Problem::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method-not-allowed",
                "this route does not take that method",
            )
        })
        .layer(DefaultBodyLimit::max(state.limits.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            guard,
        ))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            track,
        ))
        .layer(cors(&state.cors))
        .with_state(state)
}
