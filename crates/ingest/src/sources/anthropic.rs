//! Anthropic's `codebase_chunks.json`: documents already chunked, their chunk ids and
//! boundaries kept.

use super::{CharCounter, SourceItem, SourceOptions, skipped};
use situate_core::{ChunkSpan, DocKind, Document, hash_parts};
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

#[derive(serde::Deserialize)]
struct AnthropicDoc {
    doc_id: String,
    #[serde(default)]
    original_uuid: Option<String>,
    content: String,
    chunks: Vec<AnthropicChunk>,
}

#[derive(serde::Deserialize)]
struct AnthropicChunk {
    chunk_id: String,
    #[serde(default)]
    original_index: Option<u32>,
    content: String,
}

pub(super) fn read_anthropic(path: &Path, opts: &SourceOptions) -> Vec<SourceItem> {
    let name = path.display().to_string();
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) => return vec![skipped(name, format!("unreadable: {e}"))],
    };
    let docs: Vec<serde_json::Value> = match serde_json::from_reader(BufReader::new(file)) {
        Ok(d) => d,
        Err(e) => {
            return vec![skipped(
                name,
                format!("not Anthropic's codebase_chunks.json format: {e}"),
            )];
        }
    };
    docs.into_iter()
        .enumerate()
        .map(|(i, v)| {
            let source = format!("{name}#{i}");
            match serde_json::from_value::<AnthropicDoc>(v) {
                Ok(doc) => anthropic_document(doc, source, opts),
                Err(e) => skipped(source, format!("not an Anthropic document record: {e}")),
            }
        })
        .collect()
}

/// Keeps the given chunk boundaries and ids; each chunk is located in the document (the
/// format's chunks are the document cut in order) so its character range is exact.
fn anthropic_document(doc: AnthropicDoc, source: String, opts: &SourceOptions) -> SourceItem {
    if doc.content.trim().is_empty() || doc.chunks.is_empty() {
        return skipped(
            source,
            format!("document {} is empty or has no chunks", doc.doc_id),
        );
    }
    let mut spans = Vec::with_capacity(doc.chunks.len());
    let mut from = 0usize;
    let mut hash_input: Vec<&[u8]> = vec![doc.content.as_bytes()];
    let mut char_of = CharCounter::default();
    for (i, c) in doc.chunks.iter().enumerate() {
        let found = doc.content[from..]
            .find(&c.content)
            .map(|p| p + from)
            .or_else(|| doc.content.find(&c.content));
        let Some(start) = found else {
            return skipped(
                source,
                format!(
                    "chunk {} is not part of document {}'s content",
                    c.chunk_id, doc.doc_id
                ),
            );
        };
        let end = start + c.content.len();
        from = end;
        spans.push(ChunkSpan {
            ordinal: c.original_index.unwrap_or(i as u32),
            byte_start: start,
            byte_end: end,
            char_start: char_of.at(&doc.content, start),
            char_end: char_of.at(&doc.content, end),
            heading_path: vec![],
            chunk_id: Some(c.chunk_id.clone()),
            ..Default::default()
        });
        hash_input.push(c.chunk_id.as_bytes());
        hash_input.push(c.content.as_bytes());
    }
    let mut ordinals: Vec<u32> = spans.iter().map(|s| s.ordinal).collect();
    ordinals.sort_unstable();
    ordinals.dedup();
    if ordinals.len() != spans.len() {
        return skipped(
            source,
            format!("document {} has repeated chunk indexes", doc.doc_id),
        );
    }
    let hash = hash_parts(&hash_input);
    let language = opts.language.unwrap_or(opts.default_language);
    let mut metadata = serde_json::Map::new();
    if let Some(u) = doc.original_uuid {
        metadata.insert("original_uuid".into(), u.into());
    }
    SourceItem::Document(Box::new(Document {
        id: doc.doc_id,
        source,
        title: None,
        language,
        kind: DocKind::Record,
        text: doc.content,
        content_hash: hash,
        metadata,
        preset_chunks: Some(spans),
        layout: Default::default(),
    }))
}
