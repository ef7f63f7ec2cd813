//! Reading inputs into documents: file trees, BEIR `corpus.jsonl`, Anthropic's
//! `codebase_chunks.json`.
//!
//! Every input yields a [`SourceItem`]: a document, or a [`Skipped`] saying which input and
//! why (binary, invalid UTF-8, empty, unreadable, symlink loop, unsupported type, a bad
//! corpus line). Items are produced lazily, one document in memory at a time, so a large
//! corpus or a 50 MB file is never held twice.

use crate::lang;
use situate_core::{ChunkSpan, DocKind, Document, Language, content_hash, hash_parts};
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Component, Path, PathBuf};

/// How to read an input path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SourceFormat {
    /// Guess: a `corpus.jsonl` (or a directory holding one) is BEIR, a `.json` array of
    /// documents with `chunks` is Anthropic's format, anything else a file tree.
    #[default]
    Auto,
    /// A file or a directory tree of text, markdown, HTML and source files.
    Files,
    /// BEIR: `corpus.jsonl` with `_id`, `title`, `text` (and optional `metadata`); records
    /// naming a `metadata.parent` are the chunks of that parent.
    Beir,
    /// BEIR with every record a document of its own, `metadata.parent` or not (`beir-flat`).
    BeirFlat,
    /// Anthropic's `codebase_chunks.json`: documents already chunked; boundaries and chunk
    /// ids are kept.
    Anthropic,
}

impl std::str::FromStr for SourceFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(SourceFormat::Auto),
            "files" => Ok(SourceFormat::Files),
            "beir" => Ok(SourceFormat::Beir),
            "beir-flat" => Ok(SourceFormat::BeirFlat),
            "anthropic" => Ok(SourceFormat::Anthropic),
            _ => Err(format!(
                "unknown format {s:?}: expected auto, files, beir, beir-flat or anthropic"
            )),
        }
    }
}

/// Reading options.
#[derive(Debug, Clone)]
pub struct SourceOptions {
    /// How to read the paths.
    pub format: SourceFormat,
    /// Force every document's language (no detection).
    pub language: Option<Language>,
    /// The language when detection is unsure (and of source code).
    pub default_language: Language,
    /// Larger files are skipped with a reason.
    pub max_file_bytes: u64,
    /// Directories never entered (the index directory itself).
    pub exclude: Vec<PathBuf>,
}

impl Default for SourceOptions {
    fn default() -> Self {
        SourceOptions {
            format: SourceFormat::Auto,
            language: None,
            default_language: Language::En,
            max_file_bytes: 1 << 30,
            exclude: Vec::new(),
        }
    }
}

/// An input that could not be ingested, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Skipped {
    /// The file (or `corpus.jsonl:LINE`).
    pub source: String,
    /// Why, in words a person can act on.
    pub reason: String,
}

/// One item read from the inputs.
#[derive(Debug)]
pub enum SourceItem {
    /// A document to ingest.
    Document(Box<Document>),
    /// An input that was skipped.
    Skipped(Skipped),
}

fn skipped(source: impl Into<String>, reason: impl Into<String>) -> SourceItem {
    SourceItem::Skipped(Skipped {
        source: source.into(),
        reason: reason.into(),
    })
}

/// Reads every path lazily, in order.
pub fn read_sources(
    paths: &[PathBuf],
    opts: &SourceOptions,
) -> impl Iterator<Item = SourceItem> + use<> {
    let opts = opts.clone();
    let mut per_path: Vec<Box<dyn Iterator<Item = SourceItem>>> = Vec::new();
    for path in paths {
        let format = match opts.format {
            SourceFormat::Auto => guess_format(path),
            f => f,
        };
        let item: Box<dyn Iterator<Item = SourceItem>> = if !path.exists() && !path.is_symlink() {
            Box::new(std::iter::once(skipped(
                path.display().to_string(),
                "no such file or directory",
            )))
        } else {
            match format {
                SourceFormat::Beir | SourceFormat::BeirFlat => {
                    let file = if path.is_dir() {
                        path.join("corpus.jsonl")
                    } else {
                        path.clone()
                    };
                    Box::new(read_beir(file, opts.clone(), format == SourceFormat::Beir))
                }
                SourceFormat::Anthropic => Box::new(read_anthropic(path, &opts).into_iter()),
                SourceFormat::Files | SourceFormat::Auto => {
                    Box::new(read_tree(path.clone(), opts.clone()))
                }
            }
        };
        per_path.push(item);
    }
    per_path.into_iter().flatten()
}

fn guess_format(path: &Path) -> SourceFormat {
    if path.is_dir() {
        if path.join("corpus.jsonl").is_file() {
            return SourceFormat::Beir;
        }
        return SourceFormat::Files;
    }
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name.ends_with(".jsonl") {
        return SourceFormat::Beir;
    }
    if name.ends_with(".json") {
        // Peek: Anthropic's format is an array of objects with doc_id and chunks.
        let mut head = vec![0u8; 4096];
        if let Ok(mut f) = File::open(path) {
            let n = f.read(&mut head).unwrap_or(0);
            let head = String::from_utf8_lossy(&head[..n]);
            if head.trim_start().starts_with('[') && head.contains("\"doc_id\"") {
                return SourceFormat::Anthropic;
            }
        }
    }
    SourceFormat::Files
}

// ---------------------------------------------------------------------------------------
// File trees

/// The kind of a file by its name, or `None` when the type is not supported.
fn kind_of(path: &Path) -> Option<DocKind> {
    let name = path.file_name()?.to_str()?.to_ascii_lowercase();
    let ext = match name.rsplit_once('.') {
        Some((_, e)) => e.to_string(),
        None => {
            return match name.as_str() {
                "readme" | "license" | "licence" | "copying" | "authors" | "changelog"
                | "notice" => Some(DocKind::Text),
                "makefile" | "dockerfile" => Some(DocKind::Code(name)),
                _ => None,
            };
        }
    };
    let code = |l: &str| Some(DocKind::Code(l.to_string()));
    match ext.as_str() {
        "txt" | "text" | "rst" | "adoc" | "org" | "tex" => Some(DocKind::Text),
        "md" | "markdown" | "mdx" => Some(DocKind::Markdown),
        "html" | "htm" | "xhtml" => Some(DocKind::Html),
        "rs" => code("rust"),
        "py" | "pyi" => code("python"),
        "java" => code("java"),
        "kt" | "kts" => code("kotlin"),
        "scala" => code("scala"),
        "c" | "h" => code("c"),
        "cc" | "cpp" | "cxx" | "hpp" | "hh" | "hxx" => code("cpp"),
        "cs" => code("csharp"),
        "go" => code("go"),
        "js" | "mjs" | "cjs" | "jsx" => code("javascript"),
        "ts" | "tsx" | "mts" | "cts" => code("typescript"),
        "rb" => code("ruby"),
        "php" => code("php"),
        "swift" => code("swift"),
        "m" | "mm" => code("objc"),
        "sh" | "bash" | "zsh" => code("shell"),
        "sql" => code("sql"),
        "lua" => code("lua"),
        "pl" | "pm" => code("perl"),
        "r" => code("r"),
        "hs" => code("haskell"),
        "ml" | "mli" => code("ocaml"),
        "ex" | "exs" => code("elixir"),
        "erl" | "hrl" => code("erlang"),
        "clj" | "cljs" => code("clojure"),
        "dart" => code("dart"),
        "zig" => code("zig"),
        "proto" => code("protobuf"),
        _ => None,
    }
}

/// `path` relative to the parent of the ingested root, with `/` separators: ingesting
/// `docs` or `docs/a.md` both give `docs/a.md`, wherever the command runs from.
fn document_id(root: &Path, path: &Path) -> String {
    let base_name = |p: &Path| -> Option<String> {
        let p = if p.file_name().is_some() {
            p.to_path_buf()
        } else {
            p.canonicalize().ok()?
        };
        Some(p.file_name()?.to_string_lossy().into_owned())
    };
    let mut parts: Vec<String> = Vec::new();
    if root.is_dir() {
        parts.push(base_name(root).unwrap_or_default());
        if let Ok(rel) = path.strip_prefix(root) {
            parts.extend(rel.components().filter_map(|c| match c {
                Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                _ => None,
            }));
        }
    } else {
        let parent = root
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if let Some(p) = base_name(parent) {
            parts.push(p);
        }
        parts.push(base_name(root).unwrap_or_default());
    }
    parts.retain(|p| !p.is_empty());
    parts.join("/")
}

fn read_tree(root: PathBuf, opts: SourceOptions) -> impl Iterator<Item = SourceItem> {
    let exclude: Vec<PathBuf> = opts
        .exclude
        .iter()
        .filter_map(|p| p.canonicalize().ok())
        .collect();
    walkdir::WalkDir::new(&root)
        .follow_links(true)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(move |e| {
            let hidden = e.depth() > 0 && e.file_name().to_string_lossy().starts_with('.');
            let excluded = e.file_type().is_dir()
                && e.path()
                    .canonicalize()
                    .map(|p| exclude.contains(&p))
                    .unwrap_or(false);
            !hidden && !excluded
        })
        .filter_map(move |entry| match entry {
            Err(err) => {
                let source = err
                    .path()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                Some(match err.loop_ancestor() {
                    Some(anc) => {
                        skipped(source, format!("symlink loop (back to {})", anc.display()))
                    }
                    None => {
                        let why = err
                            .io_error()
                            .map(|e| e.to_string())
                            .unwrap_or_else(|| err.to_string());
                        skipped(source, format!("unreadable: {why}"))
                    }
                })
            }
            Ok(e) if e.file_type().is_dir() => None,
            Ok(e) => Some(read_file(&root, e.path(), &opts)),
        })
}

/// Reads one file into a document, or says why not.
fn read_file(root: &Path, path: &Path, opts: &SourceOptions) -> SourceItem {
    let source = path.display().to_string();
    let Some(kind) = kind_of(path) else {
        let ext = path
            .extension()
            .map(|e| format!(".{}", e.to_string_lossy()))
            .unwrap_or_default();
        return skipped(
            source,
            format!("unsupported file type {ext}")
                .trim_end()
                .to_string(),
        );
    };
    match std::fs::metadata(path) {
        Err(e) => return skipped(source, format!("unreadable: {e}")),
        Ok(m) if !m.is_file() => {
            return skipped(source, "not a regular file (device, socket or pipe)");
        }
        Ok(m) if m.len() > opts.max_file_bytes => {
            return skipped(
                source,
                format!(
                    "too large: {} bytes (limit {})",
                    m.len(),
                    opts.max_file_bytes
                ),
            );
        }
        Ok(_) => {}
    }
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => return skipped(source, format!("unreadable: {e}")),
    };
    if bytes[..bytes.len().min(8000)].contains(&0) {
        return skipped(source, "binary file (NUL byte in the first 8 kB)");
    }
    let hash = content_hash(&bytes);
    let mut text = match String::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            return skipped(
                source,
                format!("invalid UTF-8 at byte {}", e.utf8_error().valid_up_to()),
            );
        }
    };
    if text.starts_with('\u{feff}') {
        text.drain(..3);
    }
    let mut title = None;
    if kind == DocKind::Html {
        title = html_title(&text);
        text = match html2text::config::plain_no_decorate()
            .link_footnotes(false)
            .string_from_read(text.as_bytes(), 100_000)
        {
            Ok(t) => t,
            Err(e) => return skipped(source, format!("HTML could not be read: {e}")),
        };
    }
    if text.trim().is_empty() {
        return skipped(source, "empty file");
    }
    if kind == DocKind::Markdown {
        title = markdown_title(&text);
    }
    let language = match (&kind, opts.language) {
        (_, Some(l)) => l,
        (DocKind::Code(_), None) => opts.default_language,
        _ => lang::detect(&text, opts.default_language),
    };
    SourceItem::Document(Box::new(Document {
        id: document_id(root, path),
        source,
        title,
        language,
        kind,
        text,
        content_hash: hash,
        metadata: Default::default(),
        preset_chunks: None,
    }))
}

fn markdown_title(text: &str) -> Option<String> {
    let mut in_fence = false;
    for line in text.lines().take(200) {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            in_fence = !in_fence;
        } else if !in_fence && let Some(h) = t.strip_prefix("# ") {
            return Some(h.trim().trim_end_matches('#').trim().to_string())
                .filter(|h| !h.is_empty());
        }
    }
    None
}

fn html_title(html: &str) -> Option<String> {
    let lower = html.get(..html.len().min(64 * 1024))?.to_ascii_lowercase();
    let open = lower.find("<title")?;
    let start = open + lower[open..].find('>')? + 1;
    let end = start + lower[start..].find("</title")?;
    let t = html[start..end]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    (!t.is_empty()).then_some(t)
}

// ---------------------------------------------------------------------------------------
// BEIR corpus.jsonl

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
fn read_beir(file: PathBuf, opts: SourceOptions, group: bool) -> impl Iterator<Item = SourceItem> {
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
    }))
}

// ---------------------------------------------------------------------------------------
// Anthropic codebase_chunks.json

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

fn read_anthropic(path: &Path, opts: &SourceOptions) -> Vec<SourceItem> {
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
    }))
}

/// Byte → character offsets for increasing (or occasionally decreasing) byte positions.
#[derive(Default)]
struct CharCounter {
    byte: usize,
    chars: usize,
}

impl CharCounter {
    fn at(&mut self, text: &str, byte: usize) -> usize {
        if byte < self.byte {
            *self = CharCounter::default();
        }
        self.chars += text[self.byte..byte].chars().count();
        self.byte = byte;
        self.chars
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(paths: &[PathBuf]) -> (Vec<Document>, Vec<Skipped>) {
        let mut docs = vec![];
        let mut skips = vec![];
        for item in read_sources(paths, &SourceOptions::default()) {
            match item {
                SourceItem::Document(d) => docs.push(*d),
                SourceItem::Skipped(s) => skips.push(s),
            }
        }
        (docs, skips)
    }

    #[test]
    fn bad_files_are_skipped_with_reasons_and_the_rest_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("corpus");
        std::fs::create_dir_all(root.join("sub")).expect("mkdir");
        std::fs::write(root.join("good.md"), "# Title\n\nSome text.").expect("write");
        std::fs::write(root.join("sub/code.rs"), "fn main() {}\n").expect("write");
        std::fs::write(root.join("bin.txt"), b"abc\0def").expect("write");
        std::fs::write(root.join("latin1.txt"), b"caf\xe9 au lait").expect("write");
        std::fs::write(root.join("empty.txt"), b"  \n").expect("write");
        std::fs::write(root.join("image.png"), b"\x89PNG").expect("write");
        std::fs::write(root.join(".hidden.txt"), b"secret").expect("write");
        #[cfg(unix)]
        std::os::unix::fs::symlink(&root, root.join("sub/loop")).expect("symlink");
        let (docs, skips) = collect(std::slice::from_ref(&root));
        let ids: Vec<&str> = docs.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids, vec!["corpus/good.md", "corpus/sub/code.rs"]);
        assert_eq!(docs[0].title.as_deref(), Some("Title"));
        assert_eq!(docs[1].kind, DocKind::Code("rust".into()));
        let reason = |f: &str| {
            skips
                .iter()
                .find(|s| s.source.ends_with(f))
                .map(|s| s.reason.clone())
                .unwrap_or_default()
        };
        assert!(reason("bin.txt").starts_with("binary"), "{skips:?}");
        assert_eq!(reason("latin1.txt"), "invalid UTF-8 at byte 3");
        assert_eq!(reason("empty.txt"), "empty file");
        assert_eq!(reason("image.png"), "unsupported file type .png");
        #[cfg(unix)]
        assert!(reason("loop").starts_with("symlink loop"), "{skips:?}");
        assert!(!skips.iter().any(|s| s.source.contains("hidden")));
    }

    #[test]
    fn a_file_and_its_directory_give_the_same_id() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("docs");
        std::fs::create_dir_all(&root).expect("mkdir");
        std::fs::write(root.join("a.txt"), "hello world").expect("write");
        let (by_dir, _) = collect(std::slice::from_ref(&root));
        let (by_file, _) = collect(&[root.join("a.txt")]);
        assert_eq!(by_dir[0].id, "docs/a.txt");
        assert_eq!(by_file[0].id, "docs/a.txt");
        assert_eq!(by_dir[0].content_hash, by_file[0].content_hash);
    }

    #[test]
    fn html_is_reduced_to_text_with_its_title() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("page.html");
        std::fs::write(&f, "<html><head><title>My Page</title><style>p{}</style></head><body><p>Hello <b>there</b>.</p><script>var x=1;</script></body></html>").expect("write");
        let (docs, _) = collect(&[f]);
        assert_eq!(docs[0].title.as_deref(), Some("My Page"));
        assert!(docs[0].text.contains("Hello there."), "{:?}", docs[0].text);
        assert!(!docs[0].text.contains("var x"));
        assert!(!docs[0].text.contains('<'));
    }

    #[test]
    fn beir_lines_become_documents_and_bad_lines_are_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("corpus.jsonl");
        std::fs::write(
            &f,
            "{\"_id\":\"d1\",\"title\":\"Cats\",\"text\":\"Cats sleep a lot.\"}\nnot json\n{\"_id\":\"\",\"text\":\"x\"}\n\n{\"_id\":7,\"text\":\"Numbers as ids.\",\"metadata\":{\"k\":\"v\"}}\n",
        )
        .expect("write");
        let (docs, skips) = collect(&[dir.path().to_path_buf()]);
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].id, "d1");
        assert_eq!(docs[0].text, "Cats\n\nCats sleep a lot.");
        assert_eq!(docs[1].id, "7");
        assert_eq!(
            docs[1].metadata.get("k").and_then(|v| v.as_str()),
            Some("v")
        );
        assert_eq!(skips.len(), 2);
        assert!(
            skips[0].source.ends_with(":2") && skips[0].reason.starts_with("not a BEIR record")
        );
        assert!(skips[1].source.ends_with(":3"));
    }

    #[test]
    fn passages_of_a_parent_become_the_chunks_of_one_document() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("corpus.jsonl");
        let line = |id: &str, text: &str, parent: &str, n: u32| {
            format!(
                "{{\"_id\":\"{id}\",\"title\":\"Super Bowl\",\"text\":\"{text}\",\"metadata\":{{\"parent\":\"{parent}\",\"article\":0,\"sentence\":{n}}}}}\n"
            )
        };
        let body = [
            line("p0-s0", "The Broncos won.", "p0", 0),
            line("p0-s1", "They scored 24 points.", "p0", 1),
            line("p1-s0", "It was held in Santa Clara.", "p1", 0),
            "{\"_id\":\"loose\",\"text\":\"No parent here.\"}\n".to_string(),
            line("p0-s2", "A late record of p0.", "p0", 2),
        ]
        .concat();
        std::fs::write(&f, body).expect("write");
        let (docs, skips) = collect(&[f]);
        let ids: Vec<&str> = docs.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids, ["p0", "p1", "loose"]);
        let p0 = &docs[0];
        assert_eq!(
            p0.text,
            "Super Bowl\n\nThe Broncos won. They scored 24 points."
        );
        assert_eq!(p0.title.as_deref(), Some("Super Bowl"));
        let spans = p0.preset_chunks.as_ref().expect("preset chunks");
        let chunks: Vec<(&str, &str)> = spans
            .iter()
            .map(|s| {
                (
                    s.chunk_id.as_deref().unwrap_or(""),
                    &p0.text[s.byte_start..s.byte_end],
                )
            })
            .collect();
        assert_eq!(
            chunks,
            [
                ("p0-s0", "The Broncos won."),
                ("p0-s1", "They scored 24 points.")
            ]
        );
        // Shared metadata stays; the per-passage key and `parent` do not.
        assert_eq!(p0.metadata.get("article"), Some(&serde_json::json!(0)));
        assert!(p0.metadata.get("sentence").is_none() && p0.metadata.get("parent").is_none());
        assert!(
            docs[2].preset_chunks.is_none(),
            "a record without parent is a document"
        );
        // A parent's records that come back later would replace its document: refused.
        assert_eq!(skips.len(), 1);
        assert!(skips[0].source.ends_with(":5"), "{skips:?}");
        assert!(skips[0].reason.contains("must be consecutive"), "{skips:?}");

        // `beir-flat`: every record its own document, as before.
        let opts = SourceOptions {
            format: SourceFormat::BeirFlat,
            ..SourceOptions::default()
        };
        let flat: Vec<String> = read_sources(&[dir.path().join("corpus.jsonl")], &opts)
            .filter_map(|i| match i {
                SourceItem::Document(d) => Some(d.id),
                SourceItem::Skipped(_) => None,
            })
            .collect();
        assert_eq!(flat, ["p0-s0", "p0-s1", "p1-s0", "loose", "p0-s2"]);
    }

    #[test]
    fn anthropic_chunks_keep_their_ids_and_exact_ranges() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("codebase_chunks.json");
        let doc = serde_json::json!([{
            "doc_id": "doc_1", "original_uuid": "u1", "content": "é first part\nsecond part",
            "chunks": [
                {"chunk_id": "doc_1_chunk_0", "original_index": 0, "content": "é first part\n"},
                {"chunk_id": "doc_1_chunk_1", "original_index": 1, "content": "second part"}
            ]}, {"doc_id": "doc_2", "content": "abc", "chunks": [{"chunk_id": "x", "content": "zzz"}]}]);
        std::fs::write(&f, doc.to_string()).expect("write");
        let (docs, skips) = collect(&[f]);
        assert_eq!(docs.len(), 1);
        let spans = docs[0].preset_chunks.as_ref().expect("preset");
        assert_eq!(spans[1].chunk_id.as_deref(), Some("doc_1_chunk_1"));
        assert_eq!((spans[1].char_start, spans[1].char_end), (13, 24));
        assert_eq!(
            &docs[0].text[spans[1].byte_start..spans[1].byte_end],
            "second part"
        );
        assert!(skips[0].reason.contains("not part of document doc_2"));
    }
}
