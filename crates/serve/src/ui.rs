//! The web page: server-rendered HTML (maud templates, checked at compile time) with a
//! small script of its own for keyboard review and live job progress. No CDN, no
//! JavaScript build: everything is in the binary.
//!
//! - `/ui/search`: the search playground (mode, reranker, filters); each hit's context and
//!   original apart, with every leg's rank and score;
//! - `/ui/cards/{chunk_id}`: the card inspector (original | context | indexed text,
//!   provenance, status, the check notes of a rejected context) and, for admins, the
//!   review buttons;
//! - `/ui/review`: the review queue by status (keys: `j`/`k` move, `a` accept, `r` reject,
//!   `e` edit);
//! - `/ui/jobs`: jobs with live progress (Server-Sent Events), and an ingest form for admins;
//! - `/ui/evals`: the evaluation reports with their plot;
//! - `/ui/login`: with API keys, the key goes into an HttpOnly, SameSite=Strict cookie.
//!
//! Every page calls what the JSON routes call. With a read-only key the pages work and
//! show no write control; the write routes refuse a read key in any case.

use crate::AppState;
use crate::auth::{KEY_COOKIE, Role};
use crate::jobs::{self, JobSpec};
use crate::problem::Problem;
use axum::Form;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;
use situate_engine::{FilterSettings, SearchSettings};
use std::sync::Arc;
use std::time::Duration;

const CSS: &str = include_str!("ui/app.css");
const JS: &str = include_str!("ui/app.js");

/// The page frame.
fn page(title: &str, role: Role, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · situate" }
                link rel="stylesheet" href="/ui/app.css";
                script src="/ui/app.js" defer {}
            }
            body data-role=(if role == Role::Admin { "admin" } else { "read" }) {
                nav {
                    strong { "situate" }
                    a href="/ui/search" { "Search" }
                    a href="/ui/review" { "Review" }
                    a href="/ui/jobs" { "Jobs" }
                    a href="/ui/evals" { "Evaluations" }
                    span.role { (if role == Role::Admin { "admin" } else { "read-only" }) }
                }
                main { (body) }
            }
        }
    }
}

/// A problem shown as a page (the status kept).
fn error_page(role: Role, p: &Problem) -> Response {
    let body = html! {
        h1 { "Error" }
        p.error { code { (p.code) } ": " (p.detail) }
    };
    (p.status, page("Error", role, body)).into_response()
}

fn card_link(chunk_id: &str) -> String {
    format!(
        "/ui/cards/{}",
        percent_encoding::utf8_percent_encode(chunk_id, percent_encoding::NON_ALPHANUMERIC)
    )
}

/// The search form's fields.
#[derive(Debug, Default, Deserialize)]
pub struct SearchForm {
    #[serde(default)]
    q: String,
    mode: Option<String>,
    k: Option<String>,
    rerank: Option<String>,
    bm25: Option<String>,
    /// Comma-separated path globs.
    paths: Option<String>,
    /// Comma-separated language codes.
    languages: Option<String>,
    /// Comma-separated KEY=VALUE pairs.
    meta: Option<String>,
}

pub(crate) fn list(s: &Option<String>) -> Vec<String> {
    s.as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(String::from)
        .collect()
}

fn none_if_empty(s: &Option<String>) -> Option<String> {
    s.as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(String::from)
}

pub(crate) async fn search(
    State(s): State<Arc<AppState>>,
    Extension(role): Extension<Role>,
    Query(f): Query<SearchForm>,
) -> Response {
    let mode = none_if_empty(&f.mode);
    let rerank = none_if_empty(&f.rerank);
    let mut results = html! {};
    if !f.q.trim().is_empty() {
        match run_search(&s, &f).await {
            Ok(r) => {
                results = html! {
                    p.summary { (r.hits.len()) " hits, " (r.mode.to_string()) ", " (r.bm25.to_string()) " BM25"
                        @if let Some(rr) = &r.reranker { ", reranked by " (rr) }
                        ", " (format!("{:.1}", r.took_ms)) " ms" }
                    ol.hits {
                        @for h in &r.hits {
                            li.hit {
                                div.head {
                                    span.rank { (h.rank) "." }
                                    a.chunk href=(card_link(&h.chunk_id)) { (h.chunk_id) }
                                    span.score { "score " (format!("{:.4}", h.score)) }
                                }
                                @if let Some(place) = &h.place {
                                    div.place { (place) }
                                }
                                @if !h.heading_path.is_empty() {
                                    div.section { (h.heading_path.join(" > ")) }
                                }
                                div.legs {
                                    @for l in &h.legs {
                                        span.leg { (l.leg) " #" (l.rank) " (" (format!("{:.4}", l.score)) ")" }
                                    }
                                }
                                div.pair {
                                    div.context { h4 { "Context" } p { (h.context.as_deref().unwrap_or("(none)")) } }
                                    div.original { h4 { "Original" } pre { (h.original_text) } }
                                }
                            }
                        }
                    }
                };
            }
            Err(p) => results = html! { p.error { code { (p.code) } ": " (p.detail) } },
        }
    }
    let body = html! {
        h1 { "Search" }
        form.search method="get" action="/ui/search" {
            input type="search" name="q" value=(f.q) placeholder="Ask the documents" autofocus;
            select name="mode" {
                option value="" selected[mode.is_none()] { "mode: the index's" }
                @for m in ["hybrid", "bm25", "vector"] {
                    option value=(m) selected[mode.as_deref() == Some(m)] { (m) }
                }
            }
            select name="bm25" {
                @for b in ["contextual", "plain"] {
                    option value=(b) selected[f.bm25.as_deref() == Some(b)] { (b) " BM25" }
                }
            }
            input type="number" name="k" min="1" max=(s.limits.max_k) value=(f.k.clone().unwrap_or_else(|| "10".into()));
            input type="text" name="rerank" value=(rerank.clone().unwrap_or_default()) placeholder="rerank: none";
            input type="text" name="paths" value=(f.paths.clone().unwrap_or_default()) placeholder="paths: docs/*";
            input type="text" name="languages" value=(f.languages.clone().unwrap_or_default()) placeholder="languages: en,ru";
            input type="text" name="meta" value=(f.meta.clone().unwrap_or_default()) placeholder="meta: team=ops";
            button type="submit" { "Search" }
        }
        (results)
    };
    page("Search", role, body).into_response()
}

async fn run_search(
    s: &AppState,
    f: &SearchForm,
) -> Result<situate_engine::SearchResponse, Problem> {
    let k = match none_if_empty(&f.k) {
        Some(k) => Some(
            k.parse::<usize>()
                .map_err(|_| Problem::invalid(format!("k {k:?} is not a number")))?,
        ),
        None => None,
    };
    if f.q.chars().count() > s.limits.max_query_chars {
        return Err(Problem::invalid("the query is too long"));
    }
    let plan = SearchSettings {
        k,
        mode: none_if_empty(&f.mode),
        bm25: none_if_empty(&f.bm25),
        rerank: none_if_empty(&f.rerank),
        ..SearchSettings::default()
    }
    .over(&s.settings.search)
    .plan(&s.settings.default_llm())?;
    if plan.k > s.limits.max_k {
        return Err(Problem::invalid(format!("at most {} hits", s.limits.max_k)));
    }
    let filter = FilterSettings {
        documents: Vec::new(),
        paths: list(&f.paths),
        languages: list(&f.languages),
        meta: list(&f.meta),
        kinds: Vec::new(),
    }
    .filter()?;
    let q = f.q.clone();
    s.readers.run(move |e| e.query(&q, &plan, &filter)).await
}

pub(crate) async fn card(
    State(s): State<Arc<AppState>>,
    Extension(role): Extension<Role>,
    Path(chunk_id): Path<String>,
) -> Response {
    let id = chunk_id.clone();
    let got = s
        .readers
        .run(move |e| Ok((e.card_view(&id)?, e.neighbours(&id, 1, 1)?)))
        .await;
    let (c, (before, after)) = match got {
        Ok(v) => v,
        Err(p) => return error_page(role, &p),
    };
    let back = card_link(&c.chunk_id);
    let body = html! {
        h1 { "Card " code { (c.chunk_id) } }
        p.meta {
            "Document " strong { (c.document.id) }
            @if let Some(t) = &c.document.title { " · " (t) }
            " · " (c.document.language.code()) " · " (c.document.kind)
            " · characters " (c.char_start) "–" (c.char_end)
            @if !c.heading_path.is_empty() { " · section " (c.heading_path.join(" > ")) }
        }
        p { "Status " span.status data-status=(c.context_status.as_str()) { (c.context_status.as_str()) } }
        @if !c.context_notes.is_empty() {
            ul.notes { @for n in &c.context_notes { li { (n) } } }
        }
        div.triple {
            div.original { h4 { "Original" } pre { (c.original_text) } }
            div.context { h4 { "Context" } pre { (c.generated_context.as_deref().unwrap_or("(none)")) } }
            div.indexed { h4 { "Indexed text" } pre { (c.indexed_text) } }
        }
        @if let Some(p) = &c.context_provenance {
            table.provenance {
                tr { th { "method" } td { (format!("{:?}", p.method).to_lowercase()) } }
                tr { th { "model" } td { (p.model.as_deref().unwrap_or("-")) } }
                tr { th { "prompt" } td { (p.prompt_version.as_deref().unwrap_or("-")) } }
                tr { th { "inputs" } td { code { (p.input_hash) } } }
                @for part in &p.parts {
                    tr { th { "part" } td { (part.kind.as_str()) " · " (part.model.as_deref().unwrap_or("-")) } }
                }
            }
        }
        @if role == Role::Admin {
            (review_form(&c.chunk_id, c.generated_context.as_deref(), &back))
        }
        p.neighbours {
            @for n in &before { a href=(card_link(&n.chunk_id)) { "← " (n.chunk_id) } " " }
            @for n in &after { a href=(card_link(&n.chunk_id)) { (n.chunk_id) " →" } }
        }
    };
    page("Card", role, body).into_response()
}

fn review_form(chunk_id: &str, context: Option<&str>, back: &str) -> Markup {
    let action = format!(
        "/ui/review/{}",
        percent_encoding::utf8_percent_encode(chunk_id, percent_encoding::NON_ALPHANUMERIC)
    );
    html! {
        form.review method="post" action=(action) {
            input type="hidden" name="back" value=(back);
            textarea name="text" rows="3" placeholder="A new context (for Edit)" { (context.unwrap_or("")) }
            button type="submit" name="decision" value="accept" data-key="a" { "Accept" }
            button type="submit" name="decision" value="reject" data-key="r" { "Reject" }
            button type="submit" name="decision" value="edit" data-key="e" { "Save edit" }
        }
    }
}

/// The review queue's query.
#[derive(Debug, Default, Deserialize)]
pub struct ReviewQuery {
    status: Option<String>,
    cursor: Option<String>,
}

pub(crate) async fn review_queue(
    State(s): State<Arc<AppState>>,
    Extension(role): Extension<Role>,
    Query(q): Query<ReviewQuery>,
) -> Response {
    let status = q.status.clone().unwrap_or_else(|| "rejected".into());
    let req = match crate::routes::review::status_list(Some(&status)) {
        Ok(statuses) => situate_engine::api::ContextsRequest {
            status: statuses,
            limit: Some(20),
            cursor: q.cursor.clone(),
        },
        Err(p) => return error_page(role, &p),
    };
    let queue = s.readers.run(move |e| e.contexts_page(&req, 20)).await;
    let (items, next) = match queue {
        Ok(p) => (p.contexts, p.next_cursor),
        Err(p) => return error_page(role, &p),
    };
    let back = format!("/ui/review?status={status}");
    let body = html! {
        h1 { "Review contexts" }
        p.tabs {
            @for st in ["rejected", "failed", "generated", "verified", "pending"] {
                a href=(format!("/ui/review?status={st}")) class=(if st == status { "current" } else { "" }) { (st) }
            }
        }
        @if role == Role::Admin {
            p.help { "Keys: j / k move, a accept, r reject, e edit the selected context." }
        }
        @if items.is_empty() { p { "Nothing to review with status " (status) "." } }
        ol.queue {
            @for (i, it) in items.iter().enumerate() {
                li.item data-index=(i) {
                    div.head {
                        a.chunk href=(card_link(&it.chunk_id)) { (it.chunk_id) }
                        span.status data-status=(it.context_status.as_str()) { (it.context_status.as_str()) }
                    }
                    @if !it.context_notes.is_empty() {
                        ul.notes { @for n in &it.context_notes { li { (n) } } }
                    }
                    div.pair {
                        div.context { h4 { "Context" } p { (it.generated_context.as_deref().unwrap_or("(none)")) } }
                        div.original { h4 { "Original" } pre { (it.original_text) } }
                    }
                    @if role == Role::Admin {
                        (review_form(&it.chunk_id, it.generated_context.as_deref(), &back))
                    }
                }
            }
        }
        @if let Some(c) = next { a.next href=(format!("{back}&cursor={c}")) { "Next page →" } }
    };
    page("Review", role, body).into_response()
}

/// A decision from the review form.
#[derive(Debug, Deserialize)]
pub struct ReviewForm {
    decision: String,
    #[serde(default)]
    text: String,
    back: Option<String>,
}

pub(crate) async fn review_post(
    State(s): State<Arc<AppState>>,
    Extension(role): Extension<Role>,
    Path(chunk_id): Path<String>,
    Form(f): Form<ReviewForm>,
) -> Response {
    let text = (f.decision == "edit").then_some(f.text.clone());
    let done = s
        .jobs
        .decide(&chunk_id, f.decision.clone(), text, Duration::from_secs(10))
        .await;
    match done {
        // Back where the person was: only a path of this page, never another site.
        Ok(_) => {
            let back = f
                .back
                .filter(|b| b.starts_with("/ui/") && !b.starts_with("//"))
                .unwrap_or_else(|| card_link(&chunk_id));
            Redirect::to(&back).into_response()
        }
        Err(p) => error_page(role, &p),
    }
}

pub(crate) async fn jobs_page(
    State(s): State<Arc<AppState>>,
    Extension(role): Extension<Role>,
) -> Response {
    let list = if role == Role::Admin {
        s.jobs.list().unwrap_or_default()
    } else {
        Vec::new()
    };
    let body = html! {
        h1 { "Jobs" }
        @if role != Role::Admin {
            p { "Jobs are an admin's: sign in with an admin key to see and start them." }
        } @else {
            form.ingest method="post" action="/ui/jobs/ingest" {
                input type="text" name="path" placeholder="a file or directory on the server" required;
                select name="context" {
                    @for c in ["structural", "none", "document", "llm", "document+llm"] { option value=(c) { (c) } }
                }
                button type="submit" { "Ingest" }
            }
            table.jobs {
                tr { th { "job" } th { "kind" } th { "state" } th { "progress" } th { "asked" } }
                @for j in &list {
                    tr data-job=(j.id) data-final=(j.state.is_final()) {
                        td { code { (j.id) } }
                        td { (j.kind) }
                        td.state { (j.state.as_str()) }
                        td.progress { (progress_text(j)) }
                        td { (j.created_at) }
                    }
                }
            }
        }
    };
    page("Jobs", role, body).into_response()
}

/// A job's progress as one line (the script updates it from the job's events).
fn progress_text(j: &jobs::JobStatus) -> String {
    let mut parts: Vec<String> = j
        .progress
        .iter()
        .map(|(stage, st)| match st.total {
            Some(t) => format!("{stage} {}/{t}", st.done),
            None => format!("{stage} {}", st.done),
        })
        .collect();
    if let Some(e) = &j.error {
        parts.push(format!("{}: {}", e.code, e.detail));
    }
    parts.join(" · ")
}

/// The ingest form.
#[derive(Debug, Deserialize)]
pub struct IngestForm {
    path: String,
    context: Option<String>,
}

pub(crate) async fn jobs_ingest(
    State(s): State<Arc<AppState>>,
    Extension(role): Extension<Role>,
    Form(f): Form<IngestForm>,
) -> Response {
    let spec = JobSpec::Ingest(crate::jobs::IngestJob {
        paths: vec![f.path.trim().into()],
        context: none_if_empty(&f.context),
        ..Default::default()
    });
    match s.jobs.submit(spec) {
        Ok(_) => Redirect::to("/ui/jobs").into_response(),
        Err(p) => error_page(role, &p),
    }
}

pub(crate) async fn evals_page(
    State(s): State<Arc<AppState>>,
    Extension(role): Extension<Role>,
) -> Response {
    let list = match crate::evals(State(Arc::clone(&s))).await {
        Ok(j) => j.0,
        Err(p) => return error_page(role, &p),
    };
    let body = html! {
        h1 { "Evaluations" }
        @let evals = &list.evals;
        @if evals.is_empty() { p { "No reports yet: run `situate eval --out " (s.evals.display()) "/NAME` or an eval job." } }
        ul.evals {
            @for e in evals {
                @let id = &e.id;
                li {
                    a href=(format!("/ui/evals/{id}")) { (id) }
                    " · " (e.name.as_str().unwrap_or("")) " · "
                    (e.answerable_queries.as_u64().unwrap_or(0)) " queries · "
                    (e.configurations.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>().join(", "))
                }
            }
        }
    };
    page("Evaluations", role, body).into_response()
}

pub(crate) async fn eval_page(
    State(s): State<Arc<AppState>>,
    Extension(role): Extension<Role>,
    Path(id): Path<String>,
) -> Response {
    let r = match crate::eval_report(State(Arc::clone(&s)), Path(id.clone())).await {
        Ok(j) => j.0,
        Err(p) => return error_page(role, &p),
    };
    let body = html! {
        h1 { "Evaluation " (id) }
        pre.table { (r.table.as_deref().unwrap_or("")) }
        img.plot src=(format!("/v1/evals/{id}/failure.svg")) alt="failure rate by configuration";
    };
    page("Evaluation", role, body).into_response()
}

/// The login form.
#[derive(Debug, Deserialize)]
pub struct LoginForm {
    key: String,
}

pub(crate) async fn login_page(State(s): State<Arc<AppState>>) -> Markup {
    let body = html! {
        h1 { "Sign in" }
        @if s.keys.is_empty() {
            p { "This service has no API keys: nothing to sign in to. " a href="/ui/search" { "Search" } }
        } @else {
            form.login method="post" action="/ui/login" {
                input type="password" name="key" placeholder="API key" autofocus required;
                button type="submit" { "Sign in" }
            }
        }
    };
    page("Sign in", Role::Read, body)
}

pub(crate) async fn login(
    State(s): State<Arc<AppState>>,
    axum::Extension(peer): axum::Extension<crate::auth::Peer>,
    Form(f): Form<LoginForm>,
) -> Response {
    if crate::auth::role_of_key(&s.keys, &f.key).is_none() {
        crate::middleware::wrong_key(&s, peer.0, "/ui/login");
        let p = Problem::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            crate::auth::WRONG_KEY,
        );
        return error_page(Role::Read, &p);
    }
    let mut r = Redirect::to("/ui/search").into_response();
    let cookie = format!(
        "{KEY_COOKIE}={}; HttpOnly; SameSite=Strict; Path=/",
        f.key.trim()
    );
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

pub(crate) async fn logout() -> Response {
    let mut r = Redirect::to("/ui/login").into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("situate_key=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"),
    );
    r
}

pub(crate) async fn css() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], CSS).into_response()
}

pub(crate) async fn js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        JS,
    )
        .into_response()
}
