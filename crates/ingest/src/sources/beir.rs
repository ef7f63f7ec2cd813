//! BEIR `corpus.jsonl`: one record a document, or records naming a `metadata.parent`
//! gathered into their parent as its chunks.

use super::{CharCounter, SourceItem, SourceOptions, skipped};
use crate::lang;
use situate_core::{ChunkSpan, DocKind, Document, hash_parts};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;

#[derive(serde::Deserialize)]
struct BeirLine {
    #[serde(rename = "_id")]
    id: serde_json::Value,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

/// BEIR documents: the text is `title`, a blank line, then `text` (the title belongs to the
/// document, as in BEIR's own "flat" BM25 runs).
///
/// Records that name a `metadata.parent` (XQuAD-R's sentences, whose parent is their
/// paragraph) are passages of that parent: consecutive records with the same parent become
/// one document, `parent` its id, whose text is the title and the passages in order, and
/// whose chunks are exactly the passages, each keeping its record `_id` as chunk id. A
/// contextualizer then sees the paragraph as the document. A parent whose records are not
/// consecutive is an error for its later records (skipped with the reason: ingesting them
/// as a second document of the same id would replace the first).
pub(super) fn read_beir(
    file: PathBuf,
    opts: SourceOptions,
    group: bool,
) -> impl Iterator<Item = SourceItem> {
    let name = file.display().to_string();
    let reader = match File::open(&file) {
        Ok(f) => Some(BufReader::with_capacity(1 << 20, f)),
        Err(e) => {
            return Box::new(std::iter::once(skipped(name, format!("unreadable: {e}"))))
                as Box<dyn Iterator<Item = SourceItem>>;
        }
    };
    let mut reader = reader;
    let mut line_no = 0usize;
    let mut buf = Vec::new();
    let records = std::iter::from_fn(move || {
        loop {
            let r = reader.as_mut()?;
            buf.clear();
            line_no += 1;
            let source = format!("{name}:{line_no}");
            match r.read_until(b'\n', &mut buf) {
                Ok(0) => return None,
                Err(e) => {
                    reader = None;
                    return Some(Err(skipped(
                        source,
                        format!("read error, rest of file not read: {e}"),
                    )));
                }
                Ok(_) => {}
            }
            let Ok(line) = std::str::from_utf8(&buf) else {
                return Some(Err(skipped(source, "invalid UTF-8")));
            };
            if line.trim().is_empty() {
                continue;
            }
            return Some(beir_record(line, source));
        }
    });
    Box::new(GroupByParent {
        records: Box::new(records),
        group: Vec::new(),
        done: std::collections::HashSet::new(),
        ready: std::collections::VecDeque::new(),
        opts,
        grouping: group,
    })
}

/// A parsed BEIR line.
struct BeirRecord {
    id: String,
    source: String,
    title: Option<String>,
    body: String,
    metadata: serde_json::Map<String, serde_json::Value>,
}

impl BeirRecord {
    fn parent(&self) -> Option<&str> {
        self.metadata
            .get("parent")
            .and_then(|p| p.as_str())
            .filter(|p| !p.trim().is_empty())
    }
}

fn beir_record(line: &str, source: String) -> Result<BeirRecord, SourceItem> {
    let rec: BeirLine = match serde_json::from_str(line) {
        Ok(r) => r,
        Err(e) => return Err(skipped(source, format!("not a BEIR record: {e}"))),
    };
    let id = match rec.id {
        serde_json::Value::String(s) if !s.trim().is_empty() => s,
        serde_json::Value::Number(n) => n.to_string(),
        _ => return Err(skipped(source, "missing or empty _id")),
    };
    let title = rec
        .title
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    Ok(BeirRecord {
        id,
        source,
        title,
        body: rec.text.unwrap_or_default(),
        metadata: rec.metadata.unwrap_or_default(),
    })
}

/// Turns records into documents, gathering the consecutive passages of one parent.
struct GroupByParent {
    records: Box<dyn Iterator<Item = Result<BeirRecord, SourceItem>>>,
    /// Passages of the parent being gathered.
    group: Vec<BeirRecord>,
    /// Parents already emitted.
    done: std::collections::HashSet<String>,
    ready: std::collections::VecDeque<SourceItem>,
    opts: SourceOptions,
    /// Whether to gather passages at all (`beir-flat`: no).
    grouping: bool,
}

impl GroupByParent {
    fn flush(&mut self) {
        if self.group.is_empty() {
            return;
        }
        let group = std::mem::take(&mut self.group);
        if let Some(parent) = group[0].parent() {
            self.done.insert(parent.to_string());
        }
        self.ready.push_back(parent_document(group, &self.opts));
    }
}

impl Iterator for GroupByParent {
    type Item = SourceItem;

    fn next(&mut self) -> Option<SourceItem> {
        loop {
            if let Some(item) = self.ready.pop_front() {
                return Some(item);
            }
            let Some(record) = self.records.next() else {
                self.flush();
                return self.ready.pop_front();
            };
            let record = match record {
                Ok(r) => r,
                Err(skip) => {
                    self.ready.push_back(skip);
                    continue;
                }
            };
            let parent = record
                .parent()
                .filter(|_| self.grouping)
                .map(str::to_string);
            let Some(parent) = parent else {
                self.flush();
                self.ready.push_back(beir_document(record, &self.opts));
                continue;
            };
            if self.done.contains(&parent) {
                self.ready.push_back(skipped(
                    record.source,
                    format!(
                        "record {} belongs to parent {parent}, whose records came earlier and are already a document: a parent's records must be consecutive",
                        record.id
                    ),
                ));
                continue;
            }
            if self.group.first().and_then(|g| g.parent()) != Some(parent.as_str()) {
                self.flush();
            }
            self.group.push(record);
        }
    }
}

fn beir_document(rec: BeirRecord, opts: &SourceOptions) -> SourceItem {
    let BeirRecord {
        id,
        source,
        title,
        body,
        metadata,
    } = rec;
    let text = match &title {
        Some(t) if !body.trim().is_empty() => format!("{t}\n\n{body}"),
        Some(t) => t.clone(),
        None => body,
    };
    if text.trim().is_empty() {
        return skipped(source, format!("document {id} has no title and no text"));
    }
    let hash = hash_parts(&[title.as_deref().unwrap_or("").as_bytes(), text.as_bytes()]);
    let language = opts
        .language
        .unwrap_or_else(|| lang::detect(&text, opts.default_language));
    SourceItem::Document(Box::new(Document {
        id,
        source,
        title,
        language,
        kind: DocKind::Record,
        text,
        content_hash: hash,
        metadata,
        preset_chunks: None,
        layout: Default::default(),
    }))
}

/// One document from the passages of a parent: the title, a blank line, then the passages
/// separated by spaces; each passage is a preset chunk with its record id. A passage without
/// text is left out (the others make the document); a parent without any is skipped.
fn parent_document(group: Vec<BeirRecord>, opts: &SourceOptions) -> SourceItem {
    let parent = group[0].parent().unwrap_or_default().to_string();
    let source = group[0].source.clone();
    let title = group.iter().find_map(|r| r.title.clone());
    let mut text = match &title {
        Some(t) => format!("{t}\n\n"),
        None => String::new(),
    };
    let mut spans = Vec::with_capacity(group.len());
    let mut hash_input: Vec<Vec<u8>> = vec![title.clone().unwrap_or_default().into_bytes()];
    let mut char_of = CharCounter::default();
    for r in &group {
        let passage = r.body.trim();
        if passage.is_empty() {
            continue;
        }
        if !spans.is_empty() {
            text.push(' ');
        }
        let start = text.len();
        text.push_str(passage);
        let end = text.len();
        spans.push(ChunkSpan {
            ordinal: spans.len() as u32,
            byte_start: start,
            byte_end: end,
            char_start: char_of.at(&text, start),
            char_end: char_of.at(&text, end),
            heading_path: vec![],
            chunk_id: Some(r.id.clone()),
            ..Default::default()
        });
        hash_input.push(r.id.clone().into_bytes());
        hash_input.push(passage.as_bytes().to_vec());
    }
    if spans.is_empty() {
        return skipped(
            source,
            format!("the records of parent {parent} have no text"),
        );
    }
    let parts: Vec<&[u8]> = hash_input.iter().map(|p| p.as_slice()).collect();
    let hash = hash_parts(&parts);
    let language = opts
        .language
        .unwrap_or_else(|| lang::detect(&text, opts.default_language));
    // The metadata every passage shares (the parent's), without `parent` itself.
    let mut metadata = group[0].metadata.clone();
    metadata.remove("parent");
    metadata.retain(|k, v| group.iter().all(|r| r.metadata.get(k) == Some(v)));
    SourceItem::Document(Box::new(Document {
        id: parent,
        source,
        title,
        language,
        kind: DocKind::Record,
        text,
        content_hash: hash,
        metadata,
        preset_chunks: Some(spans),
        layout: Default::default(),
    }))
}
