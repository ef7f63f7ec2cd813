//! Documents given as text by the caller (the Python package's `Index.ingest(texts=…)`):
//! the id, title and metadata are the caller's, nothing is read from disk.

use super::{CharCounter, SourceItem, SourceOptions, skipped};
use crate::lang;
use situate_core::{ChunkSpan, DocKind, Document, hash_parts};

/// One document given as text.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TextInput {
    /// The document id (also its source, for path filters): not empty.
    pub id: String,
    /// The whole text.
    pub text: String,
    /// A title, when there is one.
    #[serde(default)]
    pub title: Option<String>,
    /// Key/value metadata, usable in search filters.
    #[serde(default)]
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// `markdown` (chunks follow headings; the default) or `text`.
    #[serde(default)]
    pub kind: Option<String>,
    /// The chunks, when the caller has cut them already (a LlamaIndex node parser): each
    /// is found in `text` at or after the previous one's start (so overlaps work); they
    /// are kept as they are, and the chunker is not run.
    #[serde(default)]
    pub chunks: Option<Vec<String>>,
}

/// The text kinds a [`TextInput`] may name.
pub const TEXT_KINDS: [&str; 2] = ["markdown", "text"];

/// `input` as a document, or why it cannot be one (an empty id or text, an unknown kind).
pub fn text_document(input: TextInput, opts: &SourceOptions) -> SourceItem {
    let TextInput {
        id,
        text,
        title,
        metadata,
        kind,
        chunks,
    } = input;
    if id.trim().is_empty() {
        return skipped(
            "text with an empty id",
            "a text needs an id that is not empty",
        );
    }
    let source = id.clone();
    let kind = match kind.as_deref().unwrap_or("markdown") {
        "markdown" => DocKind::Markdown,
        "text" => DocKind::Text,
        other => {
            return skipped(
                source,
                format!(
                    "unknown text kind {other:?}: expected {}",
                    TEXT_KINDS.join(" or ")
                ),
            );
        }
    };
    let title = title
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .or_else(|| match kind {
            DocKind::Markdown => super::tree::markdown_title(&text),
            _ => None,
        });
    if text.trim().is_empty() {
        return skipped(source, format!("text {id:?} is empty"));
    }
    let preset_chunks = match chunks.as_deref().map(|c| preset_spans(&text, c)) {
        None => None,
        Some(Ok(mut spans)) => {
            if kind == DocKind::Markdown {
                crate::chunk::set_heading_paths(&text, &mut spans);
            }
            Some(spans)
        }
        Some(Err(reason)) => return skipped(source, reason),
    };
    let stored_kind = kind.as_stored();
    let mut parts: Vec<&[u8]> = vec![
        stored_kind.as_bytes(),
        title.as_deref().unwrap_or("").as_bytes(),
        text.as_bytes(),
    ];
    // Where the caller cut the chunks is part of the content: another cut is a change.
    let cuts: Vec<u8> = preset_chunks
        .iter()
        .flatten()
        .flat_map(|s: &ChunkSpan| [s.byte_start as u64, s.byte_end as u64])
        .flat_map(u64::to_le_bytes)
        .collect();
    parts.push(&cuts);
    let hash = hash_parts(&parts);
    let language = opts
        .language
        .unwrap_or_else(|| lang::detect(&text, opts.default_language));
    SourceItem::Document(Box::new(Document {
        id,
        source,
        title,
        language,
        kind,
        text,
        content_hash: hash,
        metadata,
        preset_chunks,
        layout: Default::default(),
    }))
}

/// The spans of `chunks` in `text`: each found at or after the previous one's start.
fn preset_spans(text: &str, chunks: &[String]) -> Result<Vec<ChunkSpan>, String> {
    if chunks.is_empty() {
        return Err("`chunks` is empty: leave it out to let situate cut the text".into());
    }
    let mut spans = Vec::with_capacity(chunks.len());
    let mut from = 0;
    let mut chars = CharCounter::default();
    for (i, chunk) in chunks.iter().enumerate() {
        if chunk.trim().is_empty() {
            return Err(format!("chunk {i} is empty"));
        }
        let Some(at) = text[from..].find(chunk.as_str()) else {
            return Err(format!(
                "chunk {i} is not in the text after chunk {} (chunks must be pieces of the text, in order)",
                i.saturating_sub(1)
            ));
        };
        let start = from + at;
        let end = start + chunk.len();
        spans.push(ChunkSpan {
            ordinal: i as u32,
            byte_start: start,
            byte_end: end,
            char_start: chars.at(text, start),
            char_end: chars.at(text, end),
            ..Default::default()
        });
        from = start;
    }
    Ok(spans)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(id: &str, text: &str, kind: Option<&str>) -> TextInput {
        TextInput {
            id: id.into(),
            text: text.into(),
            kind: kind.map(str::to_string),
            ..TextInput::default()
        }
    }

    #[test]
    fn a_text_keeps_its_id_title_and_metadata() {
        let mut t = input("faq/7", "# Returns\n\nWithin 30 days.", None);
        t.title = Some(" Returns ".into());
        t.metadata.insert("team".into(), "support".into());
        let SourceItem::Document(d) = text_document(t, &SourceOptions::default()) else {
            panic!("a document");
        };
        assert_eq!((d.id.as_str(), d.source.as_str()), ("faq/7", "faq/7"));
        assert_eq!(d.title.as_deref(), Some("Returns"));
        assert_eq!(d.kind, DocKind::Markdown);
        assert_eq!(d.metadata["team"], "support");
    }

    #[test]
    fn bad_texts_are_skipped_with_their_reason() {
        let o = SourceOptions::default();
        for (t, why) in [
            (input(" ", "x", None), "needs an id"),
            (input("a", "  ", None), "is empty"),
            (input("a", "x", Some("pdf")), "unknown text kind \"pdf\""),
        ] {
            match text_document(t, &o) {
                SourceItem::Skipped(s) => assert!(s.reason.contains(why), "{s:?}"),
                SourceItem::Document(d) => panic!("{d:?} should be skipped"),
            }
        }
    }

    #[test]
    fn preset_chunks_are_found_in_order_with_overlaps() {
        let mut t = input("d", "alpha beta gamma beta delta", None);
        t.chunks = Some(vec![
            "alpha beta".into(),
            "beta gamma".into(),
            "beta delta".into(),
        ]);
        let SourceItem::Document(d) = text_document(t.clone(), &SourceOptions::default()) else {
            panic!("a document");
        };
        let spans = d.preset_chunks.expect("preset");
        let got: Vec<&str> = spans
            .iter()
            .map(|s| &d.text[s.byte_start..s.byte_end])
            .collect();
        assert_eq!(got, ["alpha beta", "beta gamma", "beta delta"]);
        assert_eq!((spans[2].char_start, spans[2].char_end), (17, 27));
        assert!(spans.iter().all(|s| s.heading_path.is_empty()));
        t.chunks = Some(vec!["gamma".into(), "alpha".into()]);
        match text_document(t, &SourceOptions::default()) {
            SourceItem::Skipped(s) => {
                assert!(s.reason.contains("chunk 1 is not in the text"), "{s:?}")
            }
            SourceItem::Document(_) => panic!("out of order is refused"),
        }
    }

    #[test]
    fn a_markdown_text_has_its_title_and_preset_chunks_their_headings() {
        let mut t = input(
            "d",
            "# Guide\n\n## Keys\n\nRotate them.\n\n## Tea\n\nGreen.",
            None,
        );
        t.chunks = Some(vec!["Rotate them.".into(), "Green.".into()]);
        let SourceItem::Document(d) = text_document(t, &SourceOptions::default()) else {
            panic!("a document");
        };
        assert_eq!(d.title.as_deref(), Some("Guide"));
        let paths: Vec<Vec<String>> = d
            .preset_chunks
            .expect("preset")
            .into_iter()
            .map(|s| s.heading_path)
            .collect();
        assert_eq!(paths, [vec!["Guide", "Keys"], vec!["Guide", "Tea"]]);
    }

    #[test]
    fn the_kind_changes_the_content_hash() {
        let o = SourceOptions::default();
        let hash = |k| match text_document(input("a", "x", Some(k)), &o) {
            SourceItem::Document(d) => d.content_hash,
            SourceItem::Skipped(s) => panic!("{s:?}"),
        };
        assert_ne!(hash("text"), hash("markdown"));
    }
}
