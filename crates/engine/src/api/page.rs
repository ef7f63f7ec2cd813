//! Lists a page at a time: the documents (`GET /v1/documents`, MCP's `list_documents`)
//! and the review queue (`GET /v1/contexts`, `situate contexts list`, the web page).
//! Pages are keyset pages: a cursor holds the last key of the page before, so a page is
//! as cheap at the end of a large index as at its start, and a write between two pages
//! neither repeats nor skips an item that was there before it.

use crate::view::ContextItem;
use crate::{Engine, EngineError, Result, StoredDocument};
use serde::{Deserialize, Serialize};
use situate_core::ContextStatus;

/// A page's size when the request names none.
pub const DEFAULT_PAGE: usize = 50;

/// The statuses a context run takes when it names none (`situate contextualize`, a
/// `contextualize` job): the cards with no context yet and those whose call failed.
pub const TO_CONTEXTUALIZE: [ContextStatus; 2] = [ContextStatus::Pending, ContextStatus::Failed];

/// A cursor is the last key of the page before, hex-encoded: opaque to clients, and safe
/// in a URL whatever the key holds.
pub fn encode_cursor(key: &str) -> String {
    key.bytes().map(|b| format!("{b:02x}")).collect()
}

/// [`encode_cursor`]'s inverse; `None` for a string it did not make.
pub fn decode_cursor(c: &str) -> Option<String> {
    if !c.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..c.len())
        .step_by(2)
        .map(|i| c.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect();
    String::from_utf8(bytes?).ok()
}

/// Context statuses by their names (`pending`, `generated`, `verified`, `rejected`,
/// `failed`); an unknown name is an error on the request field `field`.
pub fn parse_statuses<S: AsRef<str>>(field: &str, names: &[S]) -> Result<Vec<ContextStatus>> {
    names
        .iter()
        .map(|n| {
            let n = n.as_ref().trim();
            n.parse::<ContextStatus>().map_err(|_| {
                let known: Vec<&str> = ContextStatus::ALL.iter().map(|s| s.as_str()).collect();
                EngineError::field_error(
                    field,
                    format!("unknown context status {n:?}: one of {}", known.join(", ")),
                )
            })
        })
        .collect()
}

/// Which page: at most `limit` items [[`DEFAULT_PAGE`]] after `cursor` (the `next_cursor`
/// of the page before; none or empty: the first page).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DocumentsRequest {
    /// Documents per page (default 50).
    #[serde(default)]
    pub limit: Option<usize>,
    /// `next_cursor` of the page before.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// A document and its chunks (`GET /v1/documents/{id}`, `Index.document`).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct DocumentDetail {
    /// The document.
    pub document: StoredDocument,
    /// Its chunks' ids, in order.
    pub chunk_ids: Vec<String>,
}

/// A page of documents, in id order.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct DocumentPage {
    /// The documents.
    pub documents: Vec<StoredDocument>,
    /// Pass it back as `cursor` for the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

/// A page of the review queue: the cards whose context has one of `status` (none: every
/// status), in document order.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContextsRequest {
    /// The statuses to list [every status].
    #[serde(default)]
    pub status: Vec<ContextStatus>,
    /// Cards per page (default 50).
    #[serde(default)]
    pub limit: Option<usize>,
    /// `next_cursor` of the page before.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// A page of the review queue.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ContextPage {
    /// The cards, in document order.
    pub contexts: Vec<ContextItem>,
    /// Pass it back as `cursor` for the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

/// `limit` [[`DEFAULT_PAGE`]] checked against the caller's largest page.
fn page_size(limit: Option<usize>, max_page: usize) -> Result<usize> {
    let limit = limit.unwrap_or(DEFAULT_PAGE.min(max_page));
    if limit == 0 || limit > max_page {
        return Err(EngineError::field_error(
            "limit",
            format!("must be from 1 to {max_page}, not {limit}"),
        ));
    }
    Ok(limit)
}

/// The key a cursor holds, read by `key`; none or empty: the first page.
fn after<K>(cursor: Option<&str>, key: impl FnOnce(String) -> Option<K>) -> Result<Option<K>> {
    match cursor {
        None | Some("") => Ok(None),
        Some(c) => decode_cursor(c).and_then(key).map(Some).ok_or_else(|| {
            EngineError::field_error(
                "cursor",
                "not one situate gave (pass `next_cursor` back as it is)",
            )
        }),
    }
}

/// The page of `limit` from `items` fetched with one more than asked, and the cursor of
/// the next page (the page's last key) when the extra one shows there is more.
fn cut<T>(mut items: Vec<T>, limit: usize, key: impl Fn(&T) -> String) -> (Vec<T>, Option<String>) {
    let more = items.len() > limit;
    items.truncate(limit);
    let next = match (more, items.last()) {
        (true, Some(last)) => Some(encode_cursor(&key(last))),
        _ => None,
    };
    (items, next)
}

/// A review-queue item's key: its document and ordinal.
fn context_key(i: &ContextItem) -> String {
    format!("{}\n{}", i.document_id, i.ordinal)
}

/// [`context_key`]'s inverse.
fn context_position(key: String) -> Option<(String, u32)> {
    let (doc, ord) = key.rsplit_once('\n')?;
    Some((doc.to_string(), ord.parse::<u32>().ok()?))
}

impl Engine {
    /// A document and its chunk ids, in order.
    pub fn document_detail(&self, document_id: &str) -> Result<DocumentDetail> {
        Ok(DocumentDetail {
            document: self.document(document_id)?,
            chunk_ids: self.chunk_ids_of(document_id)?,
        })
    }

    /// A page of documents; `max_page` is the caller's largest page (a service's limit).
    pub fn documents_page(&self, req: &DocumentsRequest, max_page: usize) -> Result<DocumentPage> {
        let limit = page_size(req.limit, max_page)?;
        let from = after(req.cursor.as_deref(), Some)?;
        // One more than asked, to know whether another page follows.
        let docs = self.documents_after(from.as_deref(), limit + 1)?;
        let (documents, next_cursor) = cut(docs, limit, |d| d.id.clone());
        Ok(DocumentPage {
            documents,
            next_cursor,
        })
    }

    /// A page of the review queue; `max_page` as for [`Engine::documents_page`].
    pub fn contexts_page(&self, req: &ContextsRequest, max_page: usize) -> Result<ContextPage> {
        let limit = page_size(req.limit, max_page)?;
        let from = after(req.cursor.as_deref(), context_position)?;
        let items = self.contexts_after(
            &req.status,
            from.as_ref().map(|(d, o)| (d.as_str(), *o)),
            limit + 1,
        )?;
        let (contexts, next_cursor) = cut(items, limit, context_key);
        Ok(ContextPage {
            contexts,
            next_cursor,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn cursors_read_back_and_refuse_what_they_did_not_make() {
        for id in ["a", "notes/b.md", "é\n7", ""] {
            assert_eq!(decode_cursor(&encode_cursor(id)).as_deref(), Some(id));
        }
        for bad in ["abc", "zz", "ff"] {
            assert_eq!(decode_cursor(bad), None, "{bad}");
        }
        let e = after(Some("zz"), Some).expect_err("bad cursor");
        assert_eq!((e.kind(), e.field()), (ErrorKind::Invalid, Some("cursor")));
        assert_eq!(
            after(Some(&encode_cursor("d\n3")), context_position).expect("ok"),
            Some(("d".to_string(), 3))
        );
    }

    #[test]
    fn a_page_names_its_bad_field_and_knows_when_more_follow() {
        assert_eq!(page_size(None, 500).expect("default"), DEFAULT_PAGE);
        assert_eq!(page_size(None, 20).expect("small service"), 20);
        for bad in [Some(0), Some(501)] {
            let e = page_size(bad, 500).expect_err("out of range");
            assert_eq!(e.field(), Some("limit"));
        }
        let (page, next) = cut(vec![1, 2, 3], 2, |n| n.to_string());
        assert_eq!((page, next), (vec![1, 2], Some(encode_cursor("2"))));
        let (page, next) = cut(vec![1, 2], 2, |n| n.to_string());
        assert_eq!((page, next), (vec![1, 2], None));
        let e = parse_statuses("status", &["verified", "klingon"]).expect_err("unknown");
        assert_eq!(e.field(), Some("status"));
        assert!(e.to_string().contains("pending, generated"), "{e}");
        assert_eq!(
            parse_statuses("status", &[" rejected"]).expect("trimmed"),
            vec![ContextStatus::Rejected]
        );
    }
}
