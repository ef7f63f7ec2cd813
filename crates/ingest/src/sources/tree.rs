//! File trees: text, markdown, HTML, configuration and source files, walked lazily.

use super::{SourceItem, SourceOptions, looks_like_anthropic, skipped};
use crate::{extract, lang};
use situate_core::{DocKind, Document, content_hash};
use std::path::{Component, Path, PathBuf};

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
        // Configuration is often what people search a repository for: read as text (the
        // structural context is its path).
        "toml" | "yaml" | "yml" | "json" | "ini" | "cfg" => Some(DocKind::Text),
        "html" | "htm" | "xhtml" => Some(DocKind::Html),
        "pdf" => Some(DocKind::Pdf),
        "docx" => Some(DocKind::Docx),
        "pptx" => Some(DocKind::Pptx),
        "odt" => Some(DocKind::Odt),
        "xlsx" | "xlsm" | "xlsb" | "xls" | "ods" | "csv" | "tsv" => Some(DocKind::Sheet),
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

pub(super) fn read_tree(root: PathBuf, opts: SourceOptions) -> impl Iterator<Item = SourceItem> {
    let exclude: Vec<PathBuf> = opts
        .exclude
        .iter()
        .filter_map(|p| p.canonicalize().ok())
        .collect();
    let confined = opts.roots.is_some();
    walkdir::WalkDir::new(&root)
        .follow_links(!confined)
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
            Ok(e) => Some(match opts.outside_roots(e.path()) {
                Some(why) => skipped(e.path().display().to_string(), why),
                None => read_file(&root, e.path(), &opts),
            }),
        })
}

// Long: one file's checks in order (metadata, size, read, kind, extraction or text),
// each a reason to skip it.
/// Reads one file into a document, or says why not.
fn read_file(root: &Path, path: &Path, opts: &SourceOptions) -> SourceItem {
    let source = path.display().to_string();
    let Some(kind) = kind_of(path) else {
        let ext = path
            .extension()
            .map(|e| format!(".{}", e.to_string_lossy()))
            .unwrap_or_default();
        if let Some(hint) = unsupported_hint(&ext.to_ascii_lowercase()) {
            return skipped(source, format!("unsupported file type {ext}: {hint}"));
        }
        return skipped(
            source,
            format!("unsupported file type {ext}")
                .trim_end()
                .to_string(),
        );
    };
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
        && looks_like_anthropic(path)
    {
        return skipped(
            source,
            "an Anthropic-format corpus (codebase_chunks.json): ingest it by its own path to keep its chunks",
        );
    }
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
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let binary_sheet = kind == DocKind::Sheet && ext != "csv" && ext != "tsv";
    if matches!(
        kind,
        DocKind::Pdf | DocKind::Docx | DocKind::Pptx | DocKind::Odt
    ) || binary_sheet
    {
        let hash = content_hash(&bytes);
        let read = match kind {
            DocKind::Pdf => extract::pdf::read_pdf(bytes),
            DocKind::Docx => extract::office::read_docx(bytes),
            DocKind::Pptx => extract::office::read_pptx(bytes),
            DocKind::Odt => extract::office::read_odt(bytes),
            _ => extract::sheet::read_workbook(bytes, "spreadsheet"),
        };
        return match read {
            Ok(x) => extracted(root, path, source, kind, hash, x, opts),
            Err(reason) => skipped(source, reason),
        };
    }
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
    if kind == DocKind::Sheet {
        return match extract::sheet::read_csv(&text, ext == "tsv") {
            Ok(x) => extracted(root, path, source, kind, hash, x, opts),
            Err(reason) => skipped(source, reason),
        };
    }
    if kind == DocKind::Html {
        return match extract::html::read_html(&text) {
            Ok(x) => extracted(root, path, source, kind, hash, x, opts),
            Err(reason) => skipped(source, reason),
        };
    }
    let mut title = None;
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
        layout: Default::default(),
    }))
}

/// What to do with a file type people often have but situate does not read.
fn unsupported_hint(ext: &str) -> Option<&'static str> {
    Some(match ext {
        ".doc" => "the old binary Word format; save it as .docx",
        ".ppt" => "the old binary PowerPoint format; save it as .pptx",
        ".xls" | ".xlsx" | ".ods" => {
            "spreadsheets are not read; export the sheets as tables in a .docx, .md or .html file"
        }
        ".odp" | ".rtf" => "save it as .docx (or .pptx for slides)",
        ".png" | ".jpg" | ".jpeg" | ".gif" | ".tif" | ".tiff" | ".bmp" | ".webp" => {
            "an image has no text layer; run OCR on it first"
        }
        _ => return None,
    })
}

/// A document from a reader's output, or skipped when it holds no text.
fn extracted(
    root: &Path,
    path: &Path,
    source: String,
    kind: DocKind,
    hash: String,
    x: extract::Extracted,
    opts: &SourceOptions,
) -> SourceItem {
    if x.text.trim().is_empty() {
        return skipped(source, "no text in it");
    }
    let language = opts
        .language
        .unwrap_or_else(|| lang::detect(&x.text, opts.default_language));
    SourceItem::Document(Box::new(Document {
        id: document_id(root, path),
        source,
        title: x.title,
        language,
        kind,
        text: x.text,
        content_hash: hash,
        metadata: x.metadata,
        preset_chunks: None,
        layout: x.layout,
    }))
}

/// A Markdown text's title: its first level-1 heading outside code fences.
pub(super) fn markdown_title(text: &str) -> Option<String> {
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
