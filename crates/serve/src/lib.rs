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
pub mod listen;
pub mod mcp;
pub mod metrics;
mod middleware;
pub mod openapi;
pub mod problem;
pub mod readers;
mod router;
mod routes;
pub mod ui;

pub(crate) use middleware::Body;
pub(crate) use router::router;
pub use routes::documents::DocumentDetail;
pub(crate) use routes::evals::{eval_report, evals};
pub use routes::health::{FollowInfo, ServiceInfo};
pub use routes::jobs::JobList;
pub use situate_engine::api::{ContextPage, DocumentPage};
pub(crate) use situate_engine::api::{decode_cursor, encode_cursor};

use crate::auth::{Hosts, Keys};
use crate::jobs::Jobs;
use crate::problem::Problem;
use crate::readers::Readers;
use situate_engine::Settings;
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
    /// Where backup jobs write, one folder per backup.
    pub backups: PathBuf,
    /// The directories an ingest job may read server-side paths under (`--ingest-root`);
    /// none: any path on loopback, no path over the network.
    pub ingest_roots: Vec<PathBuf>,
    /// Web origins allowed to call the API from a browser (CORS); none by default.
    pub cors_origins: Vec<String>,
    /// Whether `/mcp` lists the write tools (which then need an admin key when keys are
    /// configured).
    pub mcp_allow_write: bool,
    /// Limits of one request.
    pub limits: Limits,
    /// Limits of the connections: the header timeout, how many at once.
    pub conn_limits: listen::ConnLimits,
    /// A shared store to follow (`--store`): the index is then a query node, a copy of the
    /// store kept current from its change feed.
    pub store: Option<String>,
    /// The embedder of a query node's index when it is created (`auto` when `None`).
    pub node_embedder: Option<String>,
}

/// The line `situate serve --json` prints once it listens (scripts and tests wait for it).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Listening {
    /// The address bound (`127.0.0.1:7700`).
    pub listening: String,
    /// Its base URL.
    pub url: String,
    /// The index served.
    pub index: PathBuf,
    /// Whether API keys are required.
    pub keys: bool,
}

/// Limits of one request; each has a clear error when exceeded.
#[derive(Debug, Clone, Copy, serde::Serialize, schemars::JsonSchema)]
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
            max_neighbours: situate_engine::api::MAX_NEIGHBOURS,
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
    /// Wrong keys by address (the limit on guessing).
    failures: auth::Failures,
    hosts: Hosts,
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
        let conn_limits = opts.conn_limits;
        let state = app_state(opts, readers, addr, followed)?;
        let app = router(state, allow_write);
        on_listening(addr);
        listen::serve(listener, app, conn_limits, shutdown()).await?;
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
    // Server-side ingest paths: under the roots given; anywhere on loopback without any
    // (the caller is this machine's user); nowhere over the network without any.
    let roots =
        if !opts.ingest_roots.is_empty() {
            let mut canonical = Vec::new();
            for r in &opts.ingest_roots {
                canonical.push(r.canonicalize().map_err(|e| {
                    ServeError::Index(format!("--ingest-root {}: {e}", r.display()))
                })?);
            }
            Some(canonical)
        } else if addr.ip().is_loopback() {
            None
        } else {
            Some(Vec::new())
        };
    jobs::remove_stale_uploads();
    let mut jobs = Jobs::start(
        jobs::Dirs {
            index: opts.index.clone(),
            evals: opts.evals.clone(),
            backups: opts.backups.clone(),
            roots,
            node: Default::default(),
        },
        opts.settings.clone(),
    )?;
    if let Some(f) = &follow {
        jobs = jobs.on_node(Arc::clone(f));
    }
    Ok(Arc::new(AppState {
        readers,
        jobs,
        metrics: metrics::Metrics::default(),
        limits: opts.limits,
        hosts: Hosts::new(addr, &opts.allow_hosts).with_origins(&opts.cors_origins),
        cors: opts.cors_origins.clone(),
        keys: opts.keys,
        failures: Default::default(),
        settings: opts.settings,
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
