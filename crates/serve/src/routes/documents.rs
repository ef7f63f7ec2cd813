//! `GET /v1/documents` (keyset pages), `GET|DELETE /v1/documents/{id}`.

use crate::jobs::JobSpec;
use crate::routes::jobs::accepted;
use crate::*;
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use situate_engine::api::{DocumentPage, DocumentsRequest};
use std::sync::Arc;

pub use situate_engine::api::DocumentDetail;

pub(crate) async fn documents(
    State(s): State<Arc<AppState>>,
    query: Result<Query<DocumentsRequest>, axum::extract::rejection::QueryRejection>,
) -> AppResult<Json<DocumentPage>> {
    let Query(req) = query?;
    let max = s.limits.max_page;
    Ok(Json(
        s.readers.run(move |e| e.documents_page(&req, max)).await?,
    ))
}

pub(crate) async fn document(
    State(s): State<Arc<AppState>>,
    path: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> AppResult<Json<DocumentDetail>> {
    let Path(id) = path?;
    Ok(Json(s.readers.run(move |e| e.document_detail(&id)).await?))
}

pub(crate) async fn delete_document(
    State(s): State<Arc<AppState>>,
    path: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> AppResult<Response> {
    let Path(document_id) = path?;
    // A document that is not there is a 404 now, not a failed job later.
    let id = document_id.clone();
    s.readers.run(move |e| e.document(&id)).await?;
    Ok(accepted(s.jobs.submit(JobSpec::Delete { document_id })?))
}
