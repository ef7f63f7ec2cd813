//! Reading inputs into documents: file trees, BEIR `corpus.jsonl`, Anthropic's
//! `codebase_chunks.json`, and texts given by the caller ([`TextInput`]).
//!
//! Every input yields a [`SourceItem`]: a document, or a [`Skipped`] saying which input and
//! why (binary, invalid UTF-8, empty, unreadable, symlink loop, unsupported type, a bad
//! corpus line). Items are produced lazily, one document in memory at a time, so a large
//! corpus or a 50 MB file is never held twice.

mod anthropic;
mod beir;
mod texts;
mod tree;

use anthropic::read_anthropic;
use beir::read_beir;
use situate_core::{Document, Language};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
pub use texts::{TEXT_KINDS, TextInput, text_document};
use tree::read_tree;

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
    /// Read only files under these directories (canonical paths): a path outside them, or
    /// a symbolic link, is skipped with a reason and symbolic links are not followed.
    /// `None` reads any path (the command line; a service on loopback).
    pub roots: Option<Vec<PathBuf>>,
}

impl SourceOptions {
    /// Why `path` may not be read under [`SourceOptions::roots`], if it may not.
    pub fn outside_roots(&self, path: &Path) -> Option<String> {
        let roots = self.roots.as_ref()?;
        if path.is_symlink() {
            return Some(
                "a symbolic link: not followed where ingest is confined to roots".to_string(),
            );
        }
        match path.canonicalize() {
            Ok(c) if roots.iter().any(|r| c.starts_with(r)) => None,
            Ok(_) => {
                Some("outside the directories this service may read (--ingest-root)".to_string())
            }
            Err(e) => Some(format!("unreadable: {e}")),
        }
    }
}

impl Default for SourceOptions {
    fn default() -> Self {
        SourceOptions {
            format: SourceFormat::Auto,
            language: None,
            default_language: Language::En,
            max_file_bytes: 1 << 30,
            exclude: Vec::new(),
            roots: None,
        }
    }
}

/// An input that could not be ingested, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
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
        } else if let Some(why) = opts.outside_roots(path) {
            Box::new(std::iter::once(skipped(path.display().to_string(), why)))
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
    if name.ends_with(".json") && looks_like_anthropic(path) {
        return SourceFormat::Anthropic;
    }
    SourceFormat::Files
}

/// Whether a `.json` file is in Anthropic's corpus format (peeked: an array of objects with
/// `doc_id`).
fn looks_like_anthropic(path: &Path) -> bool {
    let mut head = vec![0u8; 4096];
    let Ok(mut f) = File::open(path) else {
        return false;
    };
    let n = f.read(&mut head).unwrap_or(0);
    let head = String::from_utf8_lossy(&head[..n]);
    head.trim_start().starts_with('[') && head.contains("\"doc_id\"")
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
mod tests;
