//! The middleware every route passes through: the key, Host and Origin guard ([`guard`]),
//! CORS, the request metrics, and the JSON body extractor whose every rejection is a
//! problem+json answer ([`Body`]).

use crate::problem::Problem;
use crate::*;
use axum::Json;
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `Host`, `Origin` and the API key of every request, before any route runs.
pub(crate) async fn guard(
    State(s): State<Arc<AppState>>,
    mut req: Request,
    next: Next,
) -> Response {
    let ip = req
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip());
    req.extensions_mut().insert(auth::Peer(ip));
    if let Some(ip) = ip
        && !s.keys.is_empty()
        && auth::role_needed(req.method(), req.uri().path()).is_some()
        && let Some(left) = s.failures.blocked(ip)
    {
        let mut r = auth::Failures::refusal(left).into_response();
        if let Ok(v) = HeaderValue::from_str(&left.as_secs().max(1).to_string()) {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return r;
    }
    let checked = auth::check(
        &s.keys,
        &s.hosts,
        req.method(),
        req.uri().path(),
        req.headers(),
    );
    if let Err(p) = &checked
        && p.detail == auth::WRONG_KEY
    {
        wrong_key(&s, ip, req.uri().path());
    }
    match checked {
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

/// Logs a wrong key (the address and the route, never the key) and counts it.
pub(crate) fn wrong_key(s: &AppState, ip: Option<std::net::IpAddr>, path: &str) {
    let Some(ip) = ip else {
        tracing::warn!("a wrong API key for {path}");
        return;
    };
    let n = s.failures.record(ip);
    tracing::warn!(
        "a wrong API key from {ip} for {path} ({n} in this minute; {} are allowed)",
        auth::Failures::LIMIT
    );
}

/// CORS for the configured origins (answering their preflights before the guard, which
/// browsers send without a key); none configured, no CORS header is ever sent.
pub(crate) fn cors(origins: &[String]) -> tower_http::cors::CorsLayer {
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
pub(crate) async fn track(State(s): State<Arc<AppState>>, req: Request, next: Next) -> Response {
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

/// A JSON body whose every rejection is a problem+json answer.
pub(crate) struct Body<T>(pub(crate) T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Problem> {
        let Json(v) = Json::<T>::from_request(req, state).await?;
        Ok(Body(v))
    }
}
