//! `GET /v1/documents` (keyset pages), `GET|DELETE /v1/documents/{id}`.

use crate::jobs::JobSpec;
use crate::problem::Problem;
use crate::routes::jobs::accepted;
use crate::*;
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use serde::Deserialize;
use std::sync::Arc;

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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PageQuery {
    limit: Option<usize>,
    cursor: Option<String>,
}

/// A page of `limit` from `items` fetched with one more than asked: the page, and the
/// cursor of the next (the `key` of the page's last item) when there is more.
pub(crate) fn page<T>(
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

/// A cursor is the last id of the page before, hex-encoded: opaque to clients, and safe
/// in a URL whatever the id holds.
pub(crate) fn encode_cursor(id: &str) -> String {
    id.bytes().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn decode_cursor(c: &str) -> Option<String> {
    if !c.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..c.len())
        .step_by(2)
        .map(|i| c.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect();
    String::from_utf8(bytes?).ok()
}

/// A page's `limit` [50], checked against the service's `max_page`.
pub(crate) fn page_limit(s: &AppState, limit: Option<usize>) -> AppResult<usize> {
    let limit = limit.unwrap_or(50);
    if limit == 0 || limit > s.limits.max_page {
        return Err(Problem::from(situate_engine::EngineError::field_error(
            "limit",
            format!("must be from 1 to {}, not {limit}", s.limits.max_page),
        )));
    }
    Ok(limit)
}

/// A page's `cursor` (none or empty: the first page), decoded and read by `key`.
pub(crate) fn cursor_of<K>(
    cursor: Option<&str>,
    key: impl FnOnce(String) -> Option<K>,
) -> AppResult<Option<K>> {
    match cursor {
        None | Some("") => Ok(None),
        Some(c) => decode_cursor(c).and_then(key).map(Some).ok_or_else(|| {
            Problem::from(situate_engine::EngineError::field_error(
                "cursor",
                "not one this service gave (pass `next_cursor` back as it is)",
            ))
        }),
    }
}

pub(crate) async fn documents(
    State(s): State<Arc<AppState>>,
    query: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> AppResult<Json<DocumentPage>> {
    let Query(q) = query?;
    let limit = page_limit(&s, q.limit)?;
    let after = cursor_of(q.cursor.as_deref(), Some)?;
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

pub(crate) async fn document(
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
