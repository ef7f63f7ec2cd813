//! The evaluation reports: `/v1/evals`, one report and its plot.

use crate::problem::Problem;
use crate::*;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// The evaluation reports (`GET /v1/evals`), newest first.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct EvalList {
    /// One summary per report.
    pub evals: Vec<EvalSummary>,
}

/// A report's summary: what `situate eval` wrote in its `report.json`, in brief.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct EvalSummary {
    /// The report's folder name.
    pub id: String,
    /// The run's name.
    pub name: serde_json::Value,
    /// The dataset evaluated.
    pub dataset: serde_json::Value,
    /// Queries with at least one relevant document.
    pub answerable_queries: serde_json::Value,
    /// The configurations compared, by name.
    pub configurations: Vec<serde_json::Value>,
    /// When the report was written, in seconds since 1970.
    pub modified_unix: u64,
}

/// One report (`GET /v1/evals/{id}`).
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct EvalDetail {
    /// The report's folder name.
    pub id: String,
    /// `report.json` as `situate eval` wrote it.
    pub report: serde_json::Value,
    /// `report.md`'s table, when there is one.
    pub table: Option<String>,
    /// The failure plot's URL.
    pub plot: String,
}

/// Every report in the evaluations folder (a folder holding `report.json`), newest first.
/// A report is read as JSON, not as the engine's type: a report an older version wrote
/// is listed too.
pub(crate) async fn evals(State(s): State<Arc<AppState>>) -> AppResult<Json<EvalList>> {
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
            out.push(EvalSummary {
                id,
                name: v["name"].clone(),
                dataset: v["dataset"].clone(),
                answerable_queries: v["answerable_queries"].clone(),
                configurations,
                modified_unix: modified,
            });
        }
        out.sort_by_key(|e| std::cmp::Reverse(e.modified_unix));
        out
    })
    .await
    .map_err(Problem::internal)?;
    Ok(Json(EvalList { evals: list }))
}

pub(crate) async fn eval_file(s: &AppState, id: &str, file: &str) -> AppResult<Vec<u8>> {
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
) -> AppResult<Json<EvalDetail>> {
    let bytes = eval_file(&s, &id, "report.json").await?;
    let report: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| Problem::internal(format!("evaluation {id}: report.json: {e}")))?;
    let table = eval_file(&s, &id, "report.md")
        .await
        .ok()
        .map(|b| String::from_utf8_lossy(&b).into_owned());
    Ok(Json(EvalDetail {
        plot: format!("/v1/evals/{id}/failure.svg"),
        id,
        report,
        table,
    }))
}

pub(crate) async fn eval_plot(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> AppResult<Response> {
    let bytes = eval_file(&s, &id, "failure.svg").await?;
    let mut r = bytes.into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("image/svg+xml"),
    );
    Ok(r)
}
