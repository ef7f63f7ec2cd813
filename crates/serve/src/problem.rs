//! Errors as RFC 9457 `application/problem+json`: a status, a stable `code` a client can
//! branch on (also in `type`, as `urn:situate:problem:CODE`), a fixed `title` per code and a
//! `detail` saying what was wrong with this request.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use situate_engine::EngineError;

/// One error answer.
#[derive(Debug, Clone)]
pub struct Problem {
    /// The HTTP status.
    pub status: StatusCode,
    /// The stable code (`not-found`, `invalid-request`, ...).
    pub code: &'static str,
    /// What was wrong with this request.
    pub detail: String,
}

impl Problem {
    /// A problem with `status`, `code` and `detail`.
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Problem {
        Problem {
            status,
            code,
            detail: detail.into(),
        }
    }

    /// 400 `invalid-request`.
    pub fn invalid(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::BAD_REQUEST, "invalid-request", detail)
    }

    /// 500 `internal`: the detail goes to the log, the client gets none of it.
    pub fn internal(detail: impl std::fmt::Display) -> Problem {
        tracing::error!("internal error: {detail}");
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the server failed to answer; its log says why",
        )
    }

    /// The fixed title of a code.
    fn title(&self) -> &'static str {
        match self.code {
            "not-found" => "Not found",
            "route-not-found" => "No such route",
            "method-not-allowed" => "Method not allowed",
            "invalid-request" => "Invalid request",
            "invalid-json" => "The body is not valid JSON",
            "unsupported-media-type" => "The body must be JSON",
            "body-too-large" => "The body is too large",
            "query-too-long" => "The query is too long",
            "k-too-large" => "Too many hits asked for",
            "unauthorized" => "An API key is needed",
            "forbidden" => "This key may not do that",
            "host-not-allowed" => "Host not allowed",
            "origin-not-allowed" => "Origin not allowed",
            "no-index" => "No index",
            "locked" => "The index is being written",
            "timeout" => "The request took too long",
            "not-ready" => "Not ready",
            "reranker-failed" => "The reranker failed",
            "llm-failed" => "The language model failed",
            "cancelled" => "Cancelled",
            _ => "Internal error",
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "type": format!("urn:situate:problem:{}", self.code),
            "title": self.title(),
            "status": self.status.as_u16(),
            "detail": self.detail,
            "code": self.code,
        });
        let mut r = (self.status, body.to_string()).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if self.status == StatusCode::UNAUTHORIZED {
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r
    }
}

impl From<EngineError> for Problem {
    fn from(e: EngineError) -> Problem {
        match e {
            EngineError::NotFound(m) => Problem::new(StatusCode::NOT_FOUND, "not-found", m),
            EngineError::Invalid(m) => Problem::invalid(m),
            e @ EngineError::NoIndex(_) => {
                Problem::new(StatusCode::SERVICE_UNAVAILABLE, "no-index", e.to_string())
            }
            e @ EngineError::Locked(_) => {
                Problem::new(StatusCode::CONFLICT, "locked", e.to_string())
            }
            // A reranker the request names that cannot be had (an unknown spec, a model
            // directory that is not there) is the request's fault; one that fails while
            // scoring (a hosted API down) is the upstream's.
            e @ EngineError::RerankerLoad(_) => Problem::invalid(e.to_string()),
            e @ EngineError::Rerank(_) => {
                Problem::new(StatusCode::BAD_GATEWAY, "reranker-failed", e.to_string())
            }
            // The answer model is the service's own setting: one that cannot be loaded or
            // that fails (a hosted API down) is the upstream's, not the request's.
            e @ EngineError::Llm(_) => {
                Problem::new(StatusCode::BAD_GATEWAY, "llm-failed", e.to_string())
            }
            e => Problem::internal(format!("{:#}", anyhow_like(&e))),
        }
    }
}

/// An error and its sources on one line, for the log.
fn anyhow_like(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(c) = source {
        s.push_str(": ");
        s.push_str(&c.to_string());
        source = c.source();
    }
    s
}

impl From<JsonRejection> for Problem {
    fn from(r: JsonRejection) -> Problem {
        let code = match r.status() {
            StatusCode::PAYLOAD_TOO_LARGE => "body-too-large",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported-media-type",
            StatusCode::UNPROCESSABLE_ENTITY => "invalid-request",
            _ => "invalid-json",
        };
        // A body that parses but does not fit the request's shape (an unknown or missing
        // field, a wrong type) is a 400 like any other invalid request.
        let status = match r.status() {
            StatusCode::UNPROCESSABLE_ENTITY => StatusCode::BAD_REQUEST,
            s => s,
        };
        Problem::new(status, code, r.body_text())
    }
}

impl From<QueryRejection> for Problem {
    fn from(r: QueryRejection) -> Problem {
        Problem::invalid(r.body_text())
    }
}

impl From<PathRejection> for Problem {
    fn from(r: PathRejection) -> Problem {
        Problem::invalid(r.body_text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn problems_are_problem_json_with_a_stable_code() {
        let r = Problem::from(EngineError::NotFound("no chunk \"x\"".into())).into_response();
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        assert_eq!(
            r.headers()[header::CONTENT_TYPE],
            "application/problem+json"
        );
        let body = axum::body::to_bytes(r.into_body(), 1 << 16)
            .await
            .expect("body");
        let v: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(v["type"], "urn:situate:problem:not-found");
        assert_eq!(v["code"], "not-found");
        assert_eq!(v["status"], 404);
        assert_eq!(v["title"], "Not found");
        assert_eq!(v["detail"], "no chunk \"x\"");
    }

    #[test]
    fn internal_errors_tell_the_client_nothing_of_the_cause() {
        let e = EngineError::Io {
            op: "cannot read",
            path: "/secret/place".into(),
            source: std::io::Error::other("disk on fire"),
        };
        let p = Problem::from(e);
        assert_eq!(p.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!p.detail.contains("secret") && !p.detail.contains("fire"));
    }
}
