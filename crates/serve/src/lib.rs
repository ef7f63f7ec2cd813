//! situate as a service: an HTTP API over the same engine calls as the command line.
//!
//! ```text
//! GET  /healthz                 the process is up (no key needed)
//! GET  /readyz                  the index is open and the embedder warm (no key needed)
//! GET  /v1/info                 version, index counts, limits
//! GET  /openapi.json            this API as OpenAPI 3.0, generated from the code ([`openapi`])
//! GET  /metrics                 requests, latencies, jobs and index size (OpenMetrics text)
//! POST /mcp                     the MCP server over Streamable HTTP ([`mcp`])
//! GET  /ui/...                  the web page ([`ui`]): search, cards, review, jobs, evaluations
//! POST /v1/search               everything `situate search` does; the `search --json` shape
//! POST /v1/ask                  a grounded answer (`situate ask --json`); SSE with "stream"
//! GET  /v1/cards/{chunk_id}     a card in full; ?neighbours=N for the chunks around it
//! GET  /v1/documents            documents in id order, ?limit=N&cursor=C
//! GET  /v1/documents/{id}       a document and its chunk ids
//! DELETE /v1/documents/{id}     removes it (a job: 202 and the job)
//! POST /v1/jobs                 ingest (server paths or uploaded files), delete, rebuild: 202
//! GET  /v1/jobs, /v1/jobs/{id}  jobs and their progress; /v1/jobs/{id}/events as SSE
//! POST /v1/jobs/{id}/cancel     stops a job (what it committed stays)
//! GET  /v1/evals                evaluation reports (`{"kind": "eval"}` jobs write them)
//! GET  /v1/evals/{id}           one report; /v1/evals/{id}/failure.svg its plot
//! GET  /v1/contexts             the review queue: cards by context status, ?status=&cursor=
//! POST /v1/contexts/{chunk_id}  a person's decision: accept, reject or edit (provenance manual)
//! ```
//!
//! The front end is thin: each route checks its input, makes one engine call on a reader
//! ([`readers`]), and serializes the engine's own answer. Every error is RFC 9457
//! `application/problem+json` with a stable code ([`problem`]); who may call what is in
//! [`auth`].
#![warn(missing_docs)]

mod ask;
pub mod auth;
pub mod follow;
pub mod jobs;
pub mod mcp;
pub mod metrics;
pub mod openapi;
pub mod problem;
pub mod readers;
pub mod ui;

use crate::auth::{Hosts, Keys};
use crate::jobs::{JobSpec, JobStatus, Jobs};
use crate::problem::Problem;
use crate::readers::Readers;
use axum::extract::{DefaultBodyLimit, FromRequest, Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use situate_engine::api::{CardAnswer, CardRequest};
use situate_engine::{SearchRequest, SearchResponse, Settings};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the service is run.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The index directory.
    pub index: PathBuf,
    /// Settings (`[search]` gives the defaults a request body overrides).
    pub settings: Settings,
    /// The address to listen on.
    pub bind: SocketAddr,
    /// API keys; without any the service listens on loopback only.
    pub keys: Keys,
    /// Host names accepted in `Host` and `Origin` besides loopback and the bound address.
    pub allow_hosts: Vec<String>,
    /// Reader threads (concurrent read requests).
    pub readers: usize,
    /// Where evaluation reports are kept, one folder per report (eval jobs write there).
    pub evals: PathBuf,
    /// Web origins allowed to call the API from a browser (CORS); none by default.
    pub cors_origins: Vec<String>,
    /// Whether `/mcp` lists the write tools (which then need an admin key when keys are
    /// configured).
    pub mcp_allow_write: bool,
    /// Limits of one request.
    pub limits: Limits,
    /// A shared store to follow (`--store`): the index is then a query node, a copy of the
    /// store kept current from its change feed.
    pub store: Option<String>,
    /// The embedder of a query node's index when it is created (`auto` when `None`).
    pub node_embedder: Option<String>,
}

/// Limits of one request; each has a clear error when exceeded.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Limits {
    /// The most hits a search may ask for.
    pub max_k: usize,
    /// The longest query, in characters.
    pub max_query_chars: usize,
    /// The largest request body, in bytes.
    pub max_body_bytes: usize,
    /// The longest a request may take, in milliseconds.
    pub timeout_ms: u64,
    /// The most neighbours a card may be asked for, on each side.
    pub max_neighbours: u32,
    /// The most documents in one page.
    pub max_page: usize,
    /// The largest job request (with its uploaded files), in bytes.
    pub max_upload_bytes: usize,
    /// The longest an answer may take, in milliseconds (a model writes it).
    pub ask_timeout_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_k: 100,
            max_query_chars: 2_000,
            max_body_bytes: 64 * 1024,
            timeout_ms: 30_000,
            max_neighbours: 20,
            max_page: 500,
            max_upload_bytes: 32 << 20,
            ask_timeout_ms: 300_000,
        }
    }
}

/// Errors that stop the service from starting.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Listening on the network without keys.
    #[error(
        "refusing to listen on {0} without API keys: anyone who can reach it could read and change the index. Listen on loopback (127.0.0.1), or configure keys (--keys FILE, SITUATE_ADMIN_KEYS, SITUATE_READ_KEYS)"
    )]
    OpenWithoutKeys(SocketAddr),
    /// The address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The index cannot be opened or warmed.
    #[error("{0}")]
    Index(String),
    /// Anything else of the runtime.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

struct AppState {
    cors: Vec<String>,
    readers: Readers,
    jobs: Jobs,
    metrics: metrics::Metrics,
    settings: Settings,
    limits: Limits,
    keys: Keys,
    hosts: Hosts,
    index: PathBuf,
    evals: PathBuf,
    started: Instant,
    /// The follower, when the index is a query node of a shared store.
    follow: Option<Arc<follow::FollowState>>,
}

type AppResult<T> = Result<T, Problem>;

/// Runs the service until SIGINT or SIGTERM: opens the index, warms the embedder, binds,
/// then calls `on_listening` with the bound address (port 0 picks a free one).
pub fn run(opts: ServeOptions, on_listening: impl FnOnce(SocketAddr)) -> Result<(), ServeError> {
    if !opts.bind.ip().is_loopback() && opts.keys.is_empty() {
        return Err(ServeError::OpenWithoutKeys(opts.bind));
    }
    // Outside the async runtime: the follower's PostgreSQL client blocks.
    let followed = start_follower(&opts)?;
    runtime()?.block_on(async move {
        let readers = start_readers(&opts).await?;
        let listener = tokio::net::TcpListener::bind(opts.bind)
            .await
            .map_err(|source| ServeError::Bind {
                addr: opts.bind,
                source,
            })?;
        let addr = listener.local_addr()?;
        let allow_write = opts.mcp_allow_write;
        let state = app_state(opts, readers, addr, followed)?;
        let app = router(state, allow_write);
        on_listening(addr);
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown())
            .await?;
        Ok(())
    })
}

/// Runs the MCP server over stdin and stdout until the client closes them: the index is
/// read by the readers; the writer (jobs) takes writes only with `allow_write`. Nothing but
/// JSON-RPC goes to stdout (logs go to stderr).
pub fn run_mcp_stdio(opts: ServeOptions, allow_write: bool) -> Result<(), ServeError> {
    use rmcp::ServiceExt;
    runtime()?.block_on(async move {
        let readers = start_readers(&opts).await?;
        let addr = SocketAddr::from(([127, 0, 0, 1], 0));
        let state = app_state(opts, readers, addr, None)?;
        let server = mcp::SituateMcp::new(state, allow_write)
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| ServeError::Index(format!("MCP over stdio: {e}")))?;
        server
            .waiting()
            .await
            .map_err(|e| ServeError::Index(format!("MCP over stdio: {e}")))?;
        Ok(())
    })
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}

/// The readers, with the index opened and the embedder warm: a wrong path is an error at
/// start, not on the first request.
async fn start_readers(opts: &ServeOptions) -> Result<Readers, ServeError> {
    let readers = Readers::start(
        opts.index.clone(),
        opts.readers,
        Duration::from_millis(opts.limits.timeout_ms),
    )?;
    readers
        .warm_up()
        .await
        .map_err(|p| ServeError::Index(p.detail))?;
    Ok(readers)
}

/// With `--store`: builds the query node's index and starts following the store.
fn start_follower(opts: &ServeOptions) -> Result<Option<Arc<follow::FollowState>>, ServeError> {
    let Some(url) = &opts.store else {
        return Ok(None);
    };
    let create = opts
        .settings
        .create_settings(None, opts.node_embedder.as_deref(), None)
        .map_err(|e| ServeError::Index(e.to_string()))?;
    follow::start(&opts.index, url, create).map(Some)
}

fn app_state(
    opts: ServeOptions,
    readers: Readers,
    addr: SocketAddr,
    follow: Option<Arc<follow::FollowState>>,
) -> Result<Arc<AppState>, ServeError> {
    let mut jobs = Jobs::start(
        opts.index.clone(),
        opts.settings.clone(),
        opts.evals.clone(),
    )?;
    if let Some(f) = &follow {
        jobs = jobs.on_node(f.store.clone());
    }
    Ok(Arc::new(AppState {
        readers,
        jobs,
        metrics: metrics::Metrics::default(),
        limits: opts.limits,
        hosts: Hosts::new(addr, &opts.allow_hosts).with_origins(&opts.cors_origins),
        cors: opts.cors_origins.clone(),
        keys: opts.keys,
        settings: opts.settings,
        index: opts.index,
        evals: opts.evals,
        started: Instant::now(),
        follow,
    }))
}

async fn shutdown() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(t) => t,
                Err(_) => {
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}

fn router(state: Arc<AppState>, mcp_allow_write: bool) -> Router {
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

/// `Host`, `Origin` and the API key of every request, before any route runs.
async fn guard(State(s): State<Arc<AppState>>, mut req: Request, next: Next) -> Response {
    match auth::check(
        &s.keys,
        &s.hosts,
        req.method(),
        req.uri().path(),
        req.headers(),
    ) {
        Ok(role) => {
            // The MCP tools and the web page read it: writes are an admin's.
            req.extensions_mut().insert(role);
            next.run(req).await
        }
        // A person without a key, on the web page: the login form.
        Err(p) if p.status == StatusCode::UNAUTHORIZED && req.uri().path().starts_with("/ui/") => {
            axum::response::Redirect::to("/ui/login").into_response()
        }
        Err(p) => p.into_response(),
    }
}

/// CORS for the configured origins (answering their preflights before the guard, which
/// browsers send without a key); none configured, no CORS header is ever sent.
fn cors(origins: &[String]) -> tower_http::cors::CorsLayer {
    use axum::http::Method;
    use tower_http::cors::{AllowOrigin, CorsLayer};
    let allowed: Vec<HeaderValue> = origins
        .iter()
        .filter_map(|o| HeaderValue::from_str(o.trim_end_matches('/')).ok())
        .collect();
    if allowed.is_empty() {
        return CorsLayer::new();
    }
    CorsLayer::new()
        .allow_origin(AllowOrigin::list(allowed))
        .allow_methods([Method::GET, Method::POST, Method::DELETE])
        .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE])
        .max_age(Duration::from_secs(600))
}

/// Counts every answer (the guard's refusals too) by route pattern, method and status.
async fn track(State(s): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("unmatched", |m| m.as_str())
        .to_string();
    let method = req.method().as_str().to_string();
    let r = next.run(req).await;
    s.metrics.observe(
        &route,
        &method,
        r.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    r
}

async fn metrics_text(State(s): State<Arc<AppState>>) -> AppResult<Response> {
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

/// A page of documents (`GET /v1/documents`).
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct DocumentPage {
    /// The documents, in id order.
    pub documents: Vec<situate_engine::StoredDocument>,
    /// Pass it back as `cursor` for the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

/// A document and its chunks (`GET /v1/documents/{id}`).
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct DocumentDetail {
    /// The document.
    pub document: situate_engine::StoredDocument,
    /// Its chunks' ids, in order.
    pub chunk_ids: Vec<String>,
}

/// The jobs remembered, newest first (`GET /v1/jobs`).
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct JobList {
    /// The jobs.
    pub jobs: Vec<JobStatus>,
}

/// A page of the review queue (`GET /v1/contexts`).
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct ContextPage {
    /// The cards, in document order.
    pub contexts: Vec<situate_engine::ContextItem>,
    /// Pass it back as `cursor` for the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

/// A JSON body whose every rejection is a problem+json answer.
struct Body<T>(T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Problem> {
        let Json(v) = Json::<T>::from_request(req, state).await?;
        Ok(Body(v))
    }
}

async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({"status": "ok"}))
}

async fn readyz(State(s): State<Arc<AppState>>) -> AppResult<Json<serde_json::Value>> {
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

async fn info(State(s): State<Arc<AppState>>) -> AppResult<Json<serde_json::Value>> {
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

async fn search(
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
async fn wait_for_position(s: &AppState, after: u64) -> AppResult<()> {
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
struct CardQuery {
    /// Chunks to include before and after the card.
    #[serde(default)]
    neighbours: u32,
}

async fn card(
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PageQuery {
    limit: Option<usize>,
    cursor: Option<String>,
}

/// A page of `limit` from `items` fetched with one more than asked: the page, and the
/// cursor of the next (the `key` of the page's last item) when there is more.
fn page<T>(
    mut items: Vec<T>,
    limit: usize,
    key: impl Fn(&T) -> String,
) -> (Vec<T>, Option<String>) {
    let more = items.len() > limit;
    items.truncate(limit);
    let next = match (more, items.last()) {
        (true, Some(last)) => Some(encode_cursor(&key(last))),
        _ => None,
    };
    (items, next)
}

/// The key of a review-queue item for its cursor: its document and ordinal.
fn context_key(i: &situate_engine::ContextItem) -> String {
    format!("{}\n{}", i.document_id, i.ordinal)
}

/// A cursor is the last id of the page before, hex-encoded: opaque to clients, and safe
/// in a URL whatever the id holds.
fn encode_cursor(id: &str) -> String {
    id.bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_cursor(c: &str) -> Option<String> {
    if !c.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..c.len())
        .step_by(2)
        .map(|i| c.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect();
    String::from_utf8(bytes?).ok()
}

async fn documents(
    State(s): State<Arc<AppState>>,
    query: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> AppResult<Json<DocumentPage>> {
    let Query(q) = query?;
    let limit = q.limit.unwrap_or(50);
    if limit == 0 || limit > s.limits.max_page {
        return Err(Problem::invalid(format!(
            "limit must be from 1 to {}, not {limit}",
            s.limits.max_page
        )));
    }
    let after = match q.cursor.as_deref() {
        None | Some("") => None,
        Some(c) => Some(decode_cursor(c).ok_or_else(|| {
            Problem::invalid(
                "the cursor is not one this service gave (pass `next_cursor` back as it is)",
            )
        })?),
    };
    // One more than asked, to know whether another page follows.
    let docs = s
        .readers
        .run(move |e| e.documents_after(after.as_deref(), limit + 1))
        .await?;
    let (documents, next_cursor) = page(docs, limit, |d| d.id.clone());
    Ok(Json(DocumentPage {
        documents,
        next_cursor,
    }))
}

async fn document(
    State(s): State<Arc<AppState>>,
    path: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> AppResult<Json<DocumentDetail>> {
    let Path(id) = path?;
    let (doc, chunks) = s
        .readers
        .run(move |e| Ok((e.document(&id)?, e.chunk_ids_of(&id)?)))
        .await?;
    Ok(Json(DocumentDetail {
        document: doc,
        chunk_ids: chunks,
    }))
}

/// `202 Accepted` with the job and its URL.
fn accepted(status: JobStatus) -> Response {
    let location = format!("/v1/jobs/{}", status.id);
    let mut r = (StatusCode::ACCEPTED, Json(status)).into_response();
    if let Ok(v) = HeaderValue::from_str(&location) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

async fn delete_document(
    State(s): State<Arc<AppState>>,
    path: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> AppResult<Response> {
    let Path(document_id) = path?;
    // A document that is not there is a 404 now, not a failed job later.
    let id = document_id.clone();
    s.readers.run(move |e| e.document(&id)).await?;
    Ok(accepted(s.jobs.submit(JobSpec::Delete { document_id })?))
}

async fn create_job(
    State(s): State<Arc<AppState>>,
    Body(spec): Body<JobSpec>,
) -> AppResult<Response> {
    Ok(accepted(s.jobs.submit(spec)?))
}

async fn list_jobs(State(s): State<Arc<AppState>>) -> AppResult<Json<JobList>> {
    Ok(Json(JobList {
        jobs: s.jobs.list()?,
    }))
}

async fn job(State(s): State<Arc<AppState>>, Path(id): Path<String>) -> AppResult<Json<JobStatus>> {
    Ok(Json(s.jobs.status(&id)?))
}

async fn cancel_job(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> AppResult<Json<JobStatus>> {
    Ok(Json(s.jobs.cancel(&id)?))
}

/// The job's status now, then at each change, as Server-Sent Events (`status`; the last,
/// once the job is over, is `end`), then the stream closes.
async fn job_events(State(s): State<Arc<AppState>>, Path(id): Path<String>) -> AppResult<Response> {
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ContextsQuery {
    /// Comma-separated statuses [every status].
    status: Option<String>,
    limit: Option<usize>,
    cursor: Option<String>,
}

async fn contexts(
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
    let limit = q.limit.unwrap_or(50);
    if limit == 0 || limit > s.limits.max_page {
        return Err(Problem::invalid(format!(
            "limit must be from 1 to {}, not {limit}",
            s.limits.max_page
        )));
    }
    let after = match q.cursor.as_deref() {
        None | Some("") => None,
        Some(c) => Some(
            decode_cursor(c)
                .and_then(|k| {
                    let (doc, ord) = k.rsplit_once('\n')?;
                    Some((doc.to_string(), ord.parse::<u32>().ok()?))
                })
                .ok_or_else(|| {
                    Problem::invalid("the cursor is not one this service gave (pass `next_cursor` back as it is)")
                })?,
        ),
    };
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
    Ok(Json(ContextPage {
        contexts,
        next_cursor,
    }))
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
const REVIEW_WAIT: Duration = Duration::from_secs(10);

/// A person's decision on one context: a job on the one writer like every write. When the
/// writer is free it is done at once and the answer is the card as it now is (200); when a
/// long job holds the writer the answer is `202` with the decision's job.
async fn review(
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

/// Every report in the evaluations folder (a folder holding `report.json`), newest first.
pub(crate) async fn evals(State(s): State<Arc<AppState>>) -> AppResult<Json<serde_json::Value>> {
    let dir = s.evals.clone();
    let list = tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        for e in entries.flatten() {
            let Some(id) = e.file_name().to_str().map(String::from) else {
                continue;
            };
            if jobs::eval_name(&id).is_err() {
                continue;
            }
            let report = e.path().join("report.json");
            let (Ok(meta), Ok(text)) = (report.metadata(), std::fs::read_to_string(&report)) else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
                continue;
            };
            let modified = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs());
            let configurations: Vec<serde_json::Value> = v["configurations"]
                .as_array()
                .map(|c| c.iter().map(|c| c["name"].clone()).collect())
                .unwrap_or_default();
            out.push((
                modified,
                serde_json::json!({
                    "id": id, "name": v["name"], "dataset": v["dataset"],
                    "answerable_queries": v["answerable_queries"],
                    "configurations": configurations, "modified_unix": modified,
                }),
            ));
        }
        out.sort_by_key(|e| std::cmp::Reverse(e.0));
        out.into_iter().map(|(_, v)| v).collect::<Vec<_>>()
    })
    .await
    .map_err(Problem::internal)?;
    Ok(Json(serde_json::json!({"evals": list})))
}

async fn eval_file(s: &AppState, id: &str, file: &str) -> AppResult<Vec<u8>> {
    let id = jobs::eval_name(id)?;
    let path = s.evals.join(id).join(file);
    tokio::fs::read(&path).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Problem::new(
            StatusCode::NOT_FOUND,
            "not-found",
            format!("no evaluation {id:?} with a {file}"),
        ),
        _ => Problem::internal(format!("{}: {e}", path.display())),
    })
}

/// One report (`report.json` as `situate eval` wrote it), with its table and its plot's URL.
pub(crate) async fn eval_report(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> AppResult<Json<serde_json::Value>> {
    let bytes = eval_file(&s, &id, "report.json").await?;
    let report: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| Problem::internal(format!("evaluation {id}: report.json: {e}")))?;
    let table = eval_file(&s, &id, "report.md")
        .await
        .ok()
        .map(|b| String::from_utf8_lossy(&b).into_owned());
    Ok(Json(serde_json::json!({
        "id": id, "report": report, "table": table,
        "plot": format!("/v1/evals/{id}/failure.svg"),
    })))
}

async fn eval_plot(State(s): State<Arc<AppState>>, Path(id): Path<String>) -> AppResult<Response> {
    let bytes = eval_file(&s, &id, "failure.svg").await?;
    let mut r = bytes.into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("image/svg+xml"),
    );
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        for id in ["a", "docs/ü ber.md", "x#1?y=2&z"] {
            assert_eq!(decode_cursor(&encode_cursor(id)).as_deref(), Some(id));
        }
        assert_eq!(decode_cursor("abc"), None);
        assert_eq!(decode_cursor("zz"), None);
        assert_eq!(decode_cursor("ff"), None);
    }
}
