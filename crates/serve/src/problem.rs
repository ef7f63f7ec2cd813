//! Errors as RFC 9457 `application/problem+json`: a status, a stable `code` a client can
//! branch on (also in `type`, as `urn:situate:problem:CODE`), a fixed `title` per code, a
//! `detail` saying what was wrong with this request and, when one field of the request is
//! at fault, its wire name in `field`. An engine error is answered by its kind's row of
//! [`situate_engine::ErrorKind::TABLE`] (the same table the CLI's exit status and MCP's
//! tool errors come from); the codes below it are the service's own (routes, keys, limits).

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use situate_engine::{EngineError, ErrorKind};

/// One error answer.
#[derive(Debug, Clone)]
pub struct Problem {
    /// The HTTP status.
    pub status: StatusCode,
    /// The stable code (`not-found`, `invalid-request`, ...).
    pub code: &'static str,
    /// What was wrong with this request.
    pub detail: String,
    /// The wire name of the request's field at fault, when one is.
    pub field: Option<String>,
    /// For `model-missing`: the command that installs the model.
    pub install: Option<String>,
}

/// An error answer's body (`application/problem+json`), as the service sends it and as
/// MCP's tool errors carry it (`structuredContent`).
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
#[schemars(rename = "Problem")]
pub struct ProblemBody {
    /// `urn:situate:problem:CODE`.
    pub r#type: String,
    /// The code's fixed title.
    pub title: &'static str,
    /// The HTTP status.
    pub status: u16,
    /// What was wrong with this request.
    pub detail: String,
    /// The stable code (`not-found`, `invalid-request`, `model-missing`, ...).
    pub code: &'static str,
    /// The wire name of the request's field at fault, when one is (`k`,
    /// `filter.languages`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// For `model-missing`: the command that installs the model
    /// (`situate models install NAME`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub install: Option<String>,
}

impl Problem {
    /// A problem with `status`, `code` and `detail`.
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Problem {
        Problem {
            status,
            code,
            detail: detail.into(),
            field: None,
            install: None,
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

    /// The body the answer carries, as MCP's tool errors give it too.
    pub fn body(&self) -> ProblemBody {
        ProblemBody {
            r#type: format!("urn:situate:problem:{}", self.code),
            title: self.title(),
            status: self.status.as_u16(),
            detail: self.detail.clone(),
            code: self.code,
            field: self.field.clone(),
            install: self.install.clone(),
        }
    }

    /// [`Problem::body`] as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self.body()).unwrap_or_default()
    }

    /// The fixed title of a code.
    fn title(&self) -> &'static str {
        if let Some(w) = ErrorKind::TABLE.iter().find(|w| w.code == self.code) {
            return w.title;
        }
        match self.code {
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
            "too-many-failures" => "Too many wrong API keys",
            "host-not-allowed" => "Host not allowed",
            "origin-not-allowed" => "Origin not allowed",
            "timeout" => "The request took too long",
            "not-ready" => "Not ready",
            "cancelled" => "Cancelled",
            _ => "Internal error",
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = self.to_json();
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
        let wire = e.kind().wire();
        if wire.kind == ErrorKind::Internal {
            return Problem::internal(situate_engine::error_chain(&e));
        }
        let status = StatusCode::from_u16(wire.http).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let detail = match e.advice() {
            Some(advice) => format!("{e}. {advice}"),
            None => e.to_string(),
        };
        // The server's own trouble (damaged, unavailable, a full disk) goes to the log as
        // well: the operator reads it there, not in a client's answer.
        if status.is_server_error() {
            tracing::warn!("answered {} {}: {detail}", status.as_u16(), wire.code);
        }
        Problem {
            status,
            code: wire.code,
            field: e.field().map(str::to_string),
            install: e.install().map(str::to_string),
            detail,
        }
    }
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
    fn a_missing_model_is_a_503_that_names_its_install_command() {
        let e = EngineError::ModelMissing {
            model: "embeddinggemma-300m".into(),
            install: "situate models install embeddinggemma-300m".into(),
            message: "not installed, and installing is switched off".into(),
        };
        let v = Problem::from(e.within("ingest")).to_json();
        assert_eq!(v["status"], 503);
        assert_eq!(v["code"], "model-missing");
        assert_eq!(v["title"], "A model is not installed");
        assert_eq!(v["install"], "situate models install embeddinggemma-300m");
        // Other problems carry no `install`.
        let v = Problem::invalid("no").to_json();
        assert!(v.get("install").is_none(), "{v}");
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
