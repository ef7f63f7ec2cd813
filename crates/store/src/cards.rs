//! Reading cards and documents: one card, a document's cards, every card streamed (for
//! index rebuilds), cards by context status.

use crate::{BoxError, IndexRow, Op, Result, Store, StoreError, StoredDocument};
use rusqlite::OptionalExtension;
use situate_core::{CardRecord, ChunkCard, ContextStatus, Language, Provenance};
use std::str::FromStr;

impl Store {
    /// The index rows of one document's cards, in chunk order.
    pub fn index_rows_of(&self, document_id: &str) -> Result<Vec<IndexRow>> {
        let mut rows = Vec::new();
        self.for_each_index_row_of(document_id, |r| {
            rows.push(r);
            Ok(())
        })?;
        Ok(rows)
    }

    /// Calls `f` with each of one document's index rows, in chunk order, streaming (a large
    /// document's chunks are never all in memory at once).
    pub fn for_each_index_row_of(
        &self,
        document_id: &str,
        mut f: impl FnMut(IndexRow) -> std::result::Result<(), BoxError>,
    ) -> Result<()> {
        let mut st = self
            .conn
            .prepare_cached(&format!(
                "{INDEX_ROW_SELECT} WHERE c.document_id = ?1 ORDER BY c.ordinal"
            ))
            .op("reading cards")?;
        let mut rows = st.query([document_id]).op("reading cards")?;
        while let Some(r) = rows.next().op("reading cards")? {
            f(index_row(r).op("reading cards")?).map_err(StoreError::Consumer)?;
        }
        Ok(())
    }

    /// Calls `f` with every card's index row, streaming (for rebuilds).
    pub fn for_each_index_row(
        &self,
        mut f: impl FnMut(IndexRow) -> std::result::Result<(), BoxError>,
    ) -> Result<()> {
        let mut st = self
            .conn
            .prepare(&format!("{INDEX_ROW_SELECT} ORDER BY c.id"))
            .op("reading cards")?;
        let mut rows = st.query([]).op("reading cards")?;
        while let Some(r) = rows.next().op("reading cards")? {
            let row = index_row(r).op("reading cards")?;
            f(row).map_err(StoreError::Consumer)?;
        }
        Ok(())
    }

    /// Cards by row key, with their documents' title and source, in the order asked
    /// (missing keys are left out).
    pub fn cards(&self, keys: &[u64]) -> Result<Vec<CardRecord>> {
        let mut st = self
            .conn
            .prepare_cached(&format!("{CARD_SELECT} WHERE c.id = ?1"))
            .op("reading cards")?;
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            if let Some(c) = st
                .query_row([*k as i64], card_with_document)
                .optional()
                .op("reading cards")?
            {
                out.push(c);
            }
        }
        Ok(out)
    }

    /// A card by chunk id.
    pub fn card_by_chunk_id(&self, chunk_id: &str) -> Result<Option<CardRecord>> {
        self.conn
            .query_row(
                &format!("{CARD_SELECT} WHERE c.chunk_id = ?1"),
                [chunk_id],
                card_with_document,
            )
            .optional()
            .op("reading a card")
    }

    /// A document's cards, in order.
    pub fn cards_of(&self, document_id: &str) -> Result<Vec<ChunkCard>> {
        let mut st = self
            .conn
            .prepare_cached(&format!(
                "{CARD_SELECT} WHERE c.document_id = ?1 ORDER BY c.ordinal"
            ))
            .op("reading cards")?;
        let rows = st
            .query_map([document_id], |r| card_with_document(r).map(|c| c.card))
            .op("reading cards")?;
        rows.collect::<rusqlite::Result<_>>().op("reading cards")
    }

    /// A stored document.
    pub fn document(&self, id: &str) -> Result<Option<StoredDocument>> {
        self.conn
            .query_row(
                &format!("SELECT {DOCUMENT_COLUMNS} FROM documents WHERE document_id = ?1"),
                [id],
                stored_document,
            )
            .optional()
            .op("reading a document")
    }

    /// Up to `limit` documents in id order, starting after `after` (keyset pagination: a
    /// page is stable while documents are added or removed elsewhere in the order).
    pub fn documents_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<StoredDocument>> {
        let mut st = self
            .conn
            .prepare_cached(&format!(
                "SELECT {DOCUMENT_COLUMNS} FROM documents WHERE ?1 IS NULL OR document_id > ?1 ORDER BY document_id LIMIT ?2"
            ))
            .op("listing documents")?;
        let rows = st
            .query_map(
                rusqlite::params![after, i64::try_from(limit).unwrap_or(i64::MAX)],
                stored_document,
            )
            .op("listing documents")?;
        rows.collect::<rusqlite::Result<_>>()
            .op("listing documents")
    }

    /// A stored document's whole text.
    pub fn document_text(&self, id: &str) -> Result<Option<String>> {
        self.conn
            .query_row(
                "SELECT text FROM documents WHERE document_id = ?1",
                [id],
                |r| r.get(0),
            )
            .optional()
            .op("reading a document's text")
    }

    /// Documents (in id order) that have cards whose context status is one of `statuses`.
    pub fn documents_with_status(&self, statuses: &[ContextStatus]) -> Result<Vec<String>> {
        let mut out = Vec::new();
        let mut st = self
            .conn
            .prepare_cached("SELECT DISTINCT document_id FROM chunks WHERE context_status = ?1")
            .op("listing documents by context status")?;
        for s in statuses {
            let rows = st
                .query_map([s.as_str()], |r| r.get::<_, String>(0))
                .op("listing documents by context status")?;
            for r in rows {
                out.push(r.op("listing documents by context status")?);
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// Up to `limit` cards whose context status is one of `statuses` (all cards when
    /// empty), in document and chunk order, after the card at `after` (document id,
    /// ordinal): keyset pagination on the `(document_id, ordinal)` index.
    pub fn cards_with_status_after(
        &self,
        statuses: &[ContextStatus],
        after: Option<(&str, u32)>,
        limit: usize,
    ) -> Result<Vec<CardRecord>> {
        // A JSON array for json_each; the status names are fixed lowercase words.
        let wanted: Vec<String> = statuses
            .iter()
            .map(|s| format!("\"{}\"", s.as_str()))
            .collect();
        let wanted = format!("[{}]", wanted.join(","));
        let mut st = self
            .conn
            .prepare_cached(&format!(
                "{CARD_SELECT} WHERE (?1 IS NULL OR (c.document_id, c.ordinal) > (?1, ?2)) \
                 AND (?3 = '[]' OR c.context_status IN (SELECT value FROM json_each(?3))) \
                 ORDER BY c.document_id, c.ordinal LIMIT ?4"
            ))
            .op("listing cards")?;
        let rows = st
            .query_map(
                rusqlite::params![
                    after.map(|a| a.0),
                    after.map_or(0, |a| a.1),
                    wanted,
                    i64::try_from(limit).unwrap_or(i64::MAX)
                ],
                card_with_document,
            )
            .op("listing cards")?;
        rows.collect::<rusqlite::Result<_>>().op("listing cards")
    }

    /// Cards whose context status is one of `statuses` (all cards when empty), in document
    /// and chunk order, calling `f` for each.
    pub fn for_each_card_with_status(
        &self,
        statuses: &[ContextStatus],
        f: &mut dyn FnMut(CardRecord) -> Result<()>,
    ) -> Result<()> {
        let mut st = self
            .conn
            .prepare(&format!("{CARD_SELECT} ORDER BY c.document_id, c.ordinal"))
            .op("listing cards")?;
        let mut rows = st.query([]).op("listing cards")?;
        while let Some(r) = rows.next().op("listing cards")? {
            let rec = card_with_document(r).op("listing cards")?;
            if statuses.is_empty() || statuses.contains(&rec.card.context_status) {
                f(rec)?;
            }
        }
        Ok(())
    }
}

const INDEX_ROW_SELECT: &str = "SELECT c.id, c.document_id, d.language, c.generated_context, c.context_status, c.original_text FROM chunks c JOIN documents d ON d.document_id = c.document_id";

fn index_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<IndexRow> {
    let lang: String = r.get(2)?;
    let status: String = r.get(4)?;
    let indexed = ContextStatus::from_str(&status)
        .map(|s| s.is_indexed())
        .unwrap_or(false);
    let context: Option<String> = r.get(3)?;
    Ok(IndexRow {
        card: r.get::<_, i64>(0)? as u64,
        document_id: r.get(1)?,
        language: Language::from_str(&lang).unwrap_or(Language::Other),
        context: context.filter(|c| indexed && !c.trim().is_empty()),
        original: r.get(5)?,
    })
}

const CARD_SELECT: &str = "SELECT c.id, c.document_id, c.chunk_id, c.ordinal, c.char_start, c.char_end, c.heading_path, c.original_text, c.generated_context, c.context_status, c.context_method, c.context_model, c.context_prompt_version, c.context_input_hash, c.context_notes, d.title, d.source, c.context_strategy, c.context_parts, c.card_kind, c.place FROM chunks c JOIN documents d ON d.document_id = c.document_id";

fn card_with_document(r: &rusqlite::Row<'_>) -> rusqlite::Result<CardRecord> {
    let json_list = |s: String| serde_json::from_str::<Vec<String>>(&s).unwrap_or_default();
    let status: String = r.get(9)?;
    let provenance = match crate::method_column(r, 10)? {
        Some(method) => Some(Provenance {
            method,
            model: r.get(11)?,
            prompt_version: r.get(12)?,
            input_hash: r.get::<_, Option<String>>(13)?.unwrap_or_default(),
            strategy: r.get(17)?,
            parts: crate::parts_of(r, 18)?,
        }),
        None => None,
    };
    Ok(CardRecord {
        card: ChunkCard {
            card: r.get::<_, i64>(0)? as u64,
            document_id: r.get(1)?,
            chunk_id: r.get(2)?,
            ordinal: r.get(3)?,
            char_start: r.get::<_, i64>(4)? as u64,
            char_end: r.get::<_, i64>(5)? as u64,
            heading_path: json_list(r.get(6)?),
            kind: r.get::<_, String>(19)?.parse().unwrap_or_default(),
            place: r
                .get::<_, Option<String>>(20)?
                .and_then(|p| situate_core::Place::from_stored(&p)),
            original_text: r.get(7)?,
            generated_context: r.get(8)?,
            context_status: ContextStatus::from_str(&status).unwrap_or(ContextStatus::Pending),
            provenance,
            context_notes: json_list(r.get(14)?),
        },
        title: r.get(15)?,
        source: r.get(16)?,
    })
}

const DOCUMENT_COLUMNS: &str = "document_id, source, title, language, kind, content_hash, chunk_count, char_count, ingested_at, metadata";

/// A [`StoredDocument`] from a row of [`DOCUMENT_COLUMNS`].
fn stored_document(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredDocument> {
    let lang: String = r.get(3)?;
    let meta: String = r.get(9)?;
    Ok(StoredDocument {
        id: r.get(0)?,
        source: r.get(1)?,
        title: r.get(2)?,
        language: Language::from_str(&lang).unwrap_or(Language::Other),
        kind: r.get(4)?,
        content_hash: r.get(5)?,
        chunk_count: r.get::<_, i64>(6)? as u64,
        char_count: r.get::<_, i64>(7)? as u64,
        ingested_at: r.get(8)?,
        metadata: serde_json::from_str(&meta).unwrap_or(serde_json::Value::Null),
    })
}
