//! The MCP server: situate's tools for agents, over stdio (`situate mcp`) and Streamable
//! HTTP (`/mcp` on the service), on the official Rust SDK (`rmcp`).
//!
//! Read tools (each marked `readOnlyHint`): `search` (a small default k, snippets or full
//! text, a character budget so that a result stays far below 25k tokens, and a cursor for
//! more), `get_card`, `explain` (where a chunk ranks in each leg for a query, and why it
//! may not), `ask` (a grounded answer: `situate ask`), `list_documents`, `index_status`. Write tools, only when the server is started
//! with `--allow-write`: `ingest` (returns a job id at once), `job_status`,
//! `review_context`. Over HTTP a write tool also needs an admin key when keys are
//! configured. Every card is a resource, `situate://card/{chunk_id}`.
//!
//! The tools call what the HTTP routes call (the readers and the job queue of
//! [`crate`]); errors a caller can fix are tool results with `isError` and the same stable
//! codes as the HTTP API's problem+json.

use crate::auth::Role;
use crate::jobs::JobSpec;
use crate::problem::Problem;
use crate::routes::review::{Reviewed, decide};
use crate::{AppState, decode_cursor, encode_cursor};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, ListResourceTemplatesResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    ResourceContents, ResourceTemplate, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler, schemars, tool, tool_handler, tool_router,
};
use serde::Deserialize;
use situate_engine::api::DocumentsRequest;
use situate_engine::{FilterSettings, SearchRequest, SearchSettings};
use std::sync::Arc;
use std::time::Duration;

mod handlers;
mod params;

pub use params::*;

/// The URI prefix of card resources.
pub const CARD_URI: &str = "situate://card/";

/// Hits a search returns when not told.
const DEFAULT_K: usize = 5;
/// The most hits one call returns.
const MAX_K: usize = 20;
/// Characters a result holds when not told: about 2,000 tokens.
const DEFAULT_CHARS: usize = 8_000;
/// The most characters a result may hold: about 10,000 tokens, well under the 25,000 that
/// clients cut tool results at.
const MAX_CHARS: usize = 40_000;
/// A snippet's length in characters.
const SNIPPET: usize = 300;

/// The MCP server over one index.
#[derive(Clone)]
pub struct SituateMcp {
    state: Arc<AppState>,
    tools: ToolRouter<SituateMcp>,
}

impl SituateMcp {
    /// The server; write tools are listed only when `allow_write`.
    pub(crate) fn new(state: Arc<AppState>, allow_write: bool) -> SituateMcp {
        let mut tools = Self::read_tools();
        if allow_write {
            tools += Self::write_tools();
        }
        SituateMcp { state, tools }
    }
}

/// A caller's error as a tool result the model reads (`isError`): the problem's stable code
/// and detail as text, and the problem itself (`code`, `field`, `detail`, `status`) as structured content, as
/// `POST /v1/...` answers it.
fn tool_error(p: Problem) -> CallToolResult {
    let mut r = CallToolResult::error(vec![ContentBlock::text(format!(
        "{}: {}",
        p.code, p.detail
    ))]);
    r.structured_content = Some(p.to_json());
    r
}

/// An invalid value of the tool's own field `field` (its paging and budget).
fn field_problem(field: &str, reason: impl Into<String>) -> Problem {
    Problem::from(situate_engine::EngineError::field_error(field, reason))
}

fn json_result(v: &serde_json::Value) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(v.to_string())])
}

/// `Ok` of the answer or of the caller's error: protocol errors are kept for the protocol.
fn answer(r: Result<serde_json::Value, Problem>) -> Result<CallToolResult, McpError> {
    Ok(match r {
        Ok(v) => json_result(&v),
        Err(p) => tool_error(p),
    })
}

/// The first `n` characters of `s`, and whether it was cut.
fn cut(s: &str, n: usize) -> (String, bool) {
    match s.char_indices().nth(n) {
        Some((i, _)) => (format!("{}…", &s[..i]), true),
        None => (s.to_string(), false),
    }
}

/// The caller's role: over HTTP what the guard found (the key's), over stdio the local
/// user's own process (admin).
fn role_of(ctx: &RequestContext<RoleServer>) -> Role {
    ctx.extensions
        .get::<axum::http::request::Parts>()
        .map_or(Role::Admin, |parts| {
            parts
                .extensions
                .get::<Role>()
                .copied()
                .unwrap_or(Role::Read)
        })
}

fn needs_admin(ctx: &RequestContext<RoleServer>) -> Result<(), Problem> {
    if role_of(ctx) < Role::Admin {
        return Err(Problem::new(
            axum::http::StatusCode::FORBIDDEN,
            "forbidden",
            "this tool writes to the index: it needs an admin key",
        ));
    }
    Ok(())
}

#[tool_router(router = read_tools)]
impl SituateMcp {
    /// Searches the index: BM25 and embeddings over each chunk's context and text, fused.
    #[tool(
        description = "Search the indexed documents (hybrid BM25 + embeddings over each chunk and the context that situates it). Returns ranked chunks: chunk_id, document_id, section, the situating context and the chunk's text (a snippet unless full_text). Use get_card for a whole chunk and its neighbours, cursor for more hits.",
        annotations(title = "Search", read_only_hint = true, open_world_hint = false)
    )]
    async fn search(
        &self,
        Parameters(p): Parameters<SearchParams>,
    ) -> Result<CallToolResult, McpError> {
        answer(self.do_search(p).await)
    }

    /// A whole chunk card.
    #[tool(
        description = "One chunk in full: its original text, the context that situates it (with its status and provenance), its document, and optionally the chunks around it.",
        annotations(
            title = "Get a chunk card",
            read_only_hint = true,
            open_world_hint = false
        )
    )]
    async fn get_card(
        &self,
        Parameters(p): Parameters<CardParams>,
    ) -> Result<CallToolResult, McpError> {
        answer(self.do_card(p).await)
    }

    /// Why a chunk ranks where it does.
    #[tool(
        description = "Explain where a chunk ranks for a query: its rank and score in the BM25 leg and the vector leg, its fused rank, and whether its context is indexed; or that it is outside the first hits of every leg.",
        annotations(
            title = "Explain a ranking",
            read_only_hint = true,
            open_world_hint = false
        )
    )]
    async fn explain(
        &self,
        Parameters(p): Parameters<ExplainParams>,
    ) -> Result<CallToolResult, McpError> {
        answer(self.do_explain(p).await)
    }

    /// The documents, page by page.
    #[tool(
        description = "List the indexed documents in id order: id, title, language, kind, chunk count. Pass next_cursor back for the next page.",
        annotations(
            title = "List documents",
            read_only_hint = true,
            open_world_hint = false
        )
    )]
    async fn list_documents(
        &self,
        Parameters(p): Parameters<DocumentsRequest>,
    ) -> Result<CallToolResult, McpError> {
        answer(self.do_list(p).await)
    }

    /// A grounded answer.
    #[tool(
        description = "Answer a question from the indexed documents: the model reads the best passages (each chunk's situating context and original text apart) and answers only from the originals, quoting them and citing chunk ids; each quote is checked against the original. Returns answer, citations (chunk_id, document_id, quote, valid), grounded, abstained (the documents do not hold the answer), and the passages' ids. Slower than search: a model writes the answer.",
        annotations(title = "Ask", read_only_hint = true, open_world_hint = false)
    )]
    async fn ask(&self, Parameters(p): Parameters<AskParams>) -> Result<CallToolResult, McpError> {
        answer(self.do_ask(p).await)
    }

    /// Counts and context statuses.
    #[tool(
        description = "The index's state, as `GET /v1/info` gives it: the default search mode, `stats` (documents, chunks, languages, context statuses and methods, the embedder, vectors), the request limits and the jobs by state.",
        annotations(title = "Index status", read_only_hint = true, open_world_hint = false)
    )]
    async fn index_status(&self) -> Result<CallToolResult, McpError> {
        answer(self.do_status().await)
    }
}

#[tool_router(router = write_tools)]
impl SituateMcp {
    /// Ingests files: a job, answered at once with its id.
    #[tool(
        description = "Add or update documents, as an ingest job of `POST /v1/jobs` (the same fields): server-side paths and/or files given as path + text, and optionally the context method and the chunking. Returns a job id at once; poll job_status until it is succeeded. Unchanged documents are skipped.",
        annotations(
            title = "Ingest",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn ingest(
        &self,
        Parameters(p): Parameters<crate::jobs::IngestJob>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        answer(needs_admin(&ctx).and_then(|()| {
            let spec = JobSpec::Ingest(p);
            let status = self.state.jobs.submit(spec)?;
            serde_json::to_value(&status).map_err(Problem::internal)
        }))
    }

    /// A job's status.
    #[tool(
        description = "A job's state (queued, running, succeeded, failed, cancelled), its progress by stage, and its result or error.",
        annotations(title = "Job status", read_only_hint = true, open_world_hint = false)
    )]
    async fn job_status(
        &self,
        Parameters(p): Parameters<JobParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        answer(needs_admin(&ctx).and_then(|()| {
            serde_json::to_value(self.state.jobs.status(&p.job_id)?).map_err(Problem::internal)
        }))
    }

    /// A decision on one context.
    #[tool(
        description = "Decide a chunk's situating context: accept it, reject it (the chunk is then indexed by its text alone), or edit it (give text). Recorded as a person's decision, which later LLM runs leave alone.",
        annotations(
            title = "Review a context",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn review_context(
        &self,
        Parameters(p): Parameters<ReviewParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        answer(self.do_review(p, &ctx).await)
    }
}

/// A card resource's chunk id: the URI's rest, percent-decoded.
fn chunk_id_of(uri: &str) -> Option<String> {
    let rest = uri.strip_prefix(CARD_URI)?;
    percent_encoding::percent_decode_str(rest)
        .decode_utf8()
        .ok()
        .map(|s| s.into_owned())
        .filter(|s| !s.is_empty())
}

#[tool_handler(router = self.tools)]
impl ServerHandler for SituateMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("situate", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "situate searches a document index built for retrieval: every chunk carries a short context that situates it in its document. Use `search` first (small k, snippets), then `get_card` for the chunks worth reading in full. Answer from a chunk's text (its original); the context only says where the chunk sits. Cards are also resources: situate://card/{chunk_id}.",
        )
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult {
            resource_templates: vec![
                ResourceTemplate::new(format!("{CARD_URI}{{chunk_id}}"), "card")
                    .with_title("A chunk card")
                    .with_description("One chunk: its original text, its situating context with status and provenance, and its document (the chunk id percent-encoded)")
                    .with_mime_type("application/json"),
            ],
            ..Default::default()
        })
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let uri = request.uri.clone();
        let Some(chunk_id) = chunk_id_of(&uri) else {
            return Err(McpError::resource_not_found(
                format!("{uri}: not a situate card URI ({CARD_URI}CHUNK_ID)"),
                None,
            ));
        };
        match self
            .do_card(CardParams {
                chunk_id,
                neighbours: 0,
            })
            .await
        {
            Ok(v) => Ok(
                ReadResourceResult::new(vec![ResourceContents::TextResourceContents {
                    uri,
                    mime_type: Some("application/json".into()),
                    text: v.to_string(),
                    meta: None,
                }])
                .into(),
            ),
            Err(p) if p.code == "not-found" => Err(McpError::resource_not_found(p.detail, None)),
            Err(p) => Err(McpError::internal_error(
                format!("{}: {}", p.code, p.detail),
                None,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn card_uris_carry_percent_encoded_chunk_ids() {
        assert_eq!(
            chunk_id_of("situate://card/docs%2Fa.md%233").as_deref(),
            Some("docs/a.md#3")
        );
        assert_eq!(
            chunk_id_of("situate://card/plain#1").as_deref(),
            Some("plain#1")
        );
        assert_eq!(chunk_id_of("situate://card/"), None);
        assert_eq!(chunk_id_of("file:///etc/passwd"), None);
    }

    #[test]
    fn text_is_cut_on_characters() {
        assert_eq!(cut("привет", 3), ("при…".to_string(), true));
        assert_eq!(cut("hi", 3), ("hi".to_string(), false));
    }
}
