//! Contextualizers: what writes the note that situates a chunk in its document.
//!
//! Two implementations live here, both without an LLM:
//! - [`NoContext`] (`none`): chunks are indexed as they are;
//! - [`Structural`] (`structural`): a short deterministic context built from what the
//!   document's structure says: its title or path, the markdown heading path, and for code
//!   the file, its language and the enclosing module/class/function names.
//!
//! LLM contextualizers (Anthropic, OpenAI-compatible servers, local GGUF) implement the same
//! [`situate_core::Contextualizer`] trait in their own crates.
#![warn(missing_docs)]

mod code;

pub use code::{display_lang, looks_like_code};

use situate_core::{
    CardKind, ChunkContext, ChunkView, ContextError, ContextSink, ContextStatus, Contextualizer,
    DocKind, DocumentContexts, DocumentView, Provenance, hash_parts,
};

/// Builds a contextualizer by name (`none` or `structural`).
pub fn by_name(name: &str) -> Result<Box<dyn Contextualizer>, String> {
    match name {
        "none" => Ok(Box::new(NoContext)),
        "structural" => Ok(Box::new(Structural)),
        _ => Err(format!(
            "unknown context method {name:?}: expected none or structural"
        )),
    }
}

/// No context: every chunk stays `pending` and is indexed as its original text.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoContext;

#[async_trait::async_trait]
impl Contextualizer for NoContext {
    fn method(&self) -> &str {
        "none"
    }

    fn fingerprint(&self) -> String {
        "none".into()
    }

    async fn contextualize(
        &self,
        _doc: DocumentView<'_>,
        chunks: &[ChunkView<'_>],
        _sink: &dyn ContextSink,
    ) -> Result<DocumentContexts, ContextError> {
        Ok(DocumentContexts {
            contexts: vec![ChunkContext::none(); chunks.len()],
            usage: Default::default(),
            document_tokens: 0,
        })
    }
}

/// The version of the structural rules; part of each context's provenance.
pub const STRUCTURAL_VERSION: &str = "structural-v1";

/// A deterministic context from the document's structure (no LLM, no tokens spent).
///
/// Examples of what it writes:
/// - `From src/parser.rs (Rust source), in impl Parser > fn parse_block.`
/// - `From docs/install.md, section Installation guide > Linux.`
/// - `From "Microstructural development of human newborn cerebral white matter".` (a later
///   chunk of a BEIR record; its first chunk, which holds the title, gets no context)
#[derive(Debug, Clone, Copy, Default)]
pub struct Structural;

impl Structural {
    /// The context for one chunk, or `None` when the structure adds nothing to the chunk.
    ///
    /// The title is left out when the chunk already contains it or when it heads the heading
    /// path (repeating it would only weigh it twice in BM25); files are then named by path.
    pub fn context_for(doc: &DocumentView<'_>, chunk: &ChunkView<'_>) -> Option<String> {
        let enclosing = if is_code(doc) {
            code::enclosing_items(doc.text, chunk.span.byte_start)
        } else {
            vec![]
        };
        Self::compose(doc, chunk, &enclosing)
    }

    fn compose(
        doc: &DocumentView<'_>,
        chunk: &ChunkView<'_>,
        enclosing: &[String],
    ) -> Option<String> {
        let headings = &chunk.span.heading_path;
        let title = doc.title.filter(|t| {
            !chunk.text.contains(t) && headings.first().map(String::as_str) != Some(*t)
        });
        let mut parts = Vec::new();
        match (title, doc.kind) {
            (Some(t), _) => parts.push(format!("From \"{}\"", clip(t, 160))),
            (None, DocKind::Code(lang)) => parts.push(format!(
                "From {} ({} source)",
                doc.id,
                code::display_lang(lang)
            )),
            (None, DocKind::Record) => {}
            (None, _) => parts.push(format!("From {}", doc.id)),
        }
        if !headings.is_empty() {
            parts.push(format!("section {}", headings.join(" > ")));
        }
        if !enclosing.is_empty() {
            parts.push(format!("in {}", enclosing.join(" > ")));
        }
        // A figure or table is situated by where it sits and by the sentence that refers
        // to it, so a question about what it shows finds it.
        let what = match chunk.span.kind {
            CardKind::Image => Some("Figure"),
            CardKind::Table => Some("Table"),
            CardKind::Text => None,
        };
        let reference = what.and_then(|_| referring_sentence(doc.text, chunk));
        if parts.is_empty() && what.is_none() {
            return None;
        }
        let mut text = parts.join(", ");
        if let Some(what) = what {
            text = if text.is_empty() {
                what.to_string()
            } else {
                format!("{what} {}{}", text[..1].to_lowercase(), &text[1..])
            };
        }
        if let Some(first) = text.get(..1) {
            text = first.to_uppercase() + &text[1..];
        }
        match reference {
            Some(r) => Some(format!("{text}. Referred to in: \"{}\"", clip(&r, 240))),
            None => Some(format!("{text}.")),
        }
    }
}

/// The sentence of the document that refers to a figure or table chunk: the first sentence
/// outside the chunk naming its label (`Figure 3`, `Table 2`, `Рис. 4`, `图 2`); without a
/// label (or a mention), the last sentence of the text right before it.
fn referring_sentence(text: &str, chunk: &ChunkView<'_>) -> Option<String> {
    let (mut start, end) = (chunk.span.byte_start, chunk.span.byte_end);
    // A piece of a table is situated as its whole table: back over the rows above it and
    // the caption right above them.
    let mut label = label_of(chunk.text);
    if chunk.span.kind == CardKind::Table {
        while start > 0 {
            let line_start = text[..start - 1].rfind('\n').map_or(0, |i| i + 1);
            let line = text[line_start..start].trim();
            if line.starts_with('|') || line.is_empty() {
                start = line_start;
            } else {
                if label.is_none() && !line.is_empty() {
                    label = label_of(line);
                    if label.is_some() {
                        start = line_start;
                    }
                }
                break;
            }
        }
    }
    let sentence_at = |at: usize| -> String {
        let ends = ['.', '!', '?', '\n', '。', '！', '？'];
        let from = text[..at].rfind(ends).map_or(0, |i| {
            i + text[i..].chars().next().map_or(1, char::len_utf8)
        });
        let to = text[at..].find(ends).map_or(text.len(), |i| {
            at + i + text[at + i..].chars().next().map_or(0, char::len_utf8)
        });
        text[from..to].trim().to_string()
    };
    if let Some(label) = label {
        let lower = text.to_lowercase();
        // Byte offsets of the lowercase text match the original for the scripts labels use.
        if lower.len() == text.len() {
            let needle = label.to_lowercase();
            let mut from = 0;
            while let Some(i) = lower[from..].find(&needle) {
                let at = from + i;
                from = at + needle.len();
                if (start..end).contains(&at) {
                    continue;
                }
                let next = lower[from..].chars().next();
                if next.is_some_and(|c| c.is_ascii_digit()) {
                    continue;
                }
                // Another caption with the label ("Figure 2: ..."), not a mention.
                let caption = lower[from..]
                    .trim_start_matches(['*', '_'])
                    .trim_start()
                    .starts_with([':', '.', '：', '—']);
                let s = sentence_at(at);
                if !s.is_empty() && !caption {
                    return Some(s);
                }
            }
        }
    }
    let before = text[..start].trim_end();
    let para = before.rsplit("\n\n").next()?.trim();
    if para.is_empty() || para.starts_with('#') || para.starts_with('|') || para.starts_with("![") {
        return None;
    }
    // The paragraph's last character (a character boundary: `before` may end in CJK).
    let last = before.char_indices().next_back().map_or(0, |(i, _)| i);
    let s = sentence_at(last.max(before.len() - para.len()));
    (!s.is_empty()).then_some(s)
}

/// A figure's or table's label, as its caption gives it (`Figure 3`, `Table 2`).
fn label_of(chunk: &str) -> Option<String> {
    for line in chunk.lines() {
        let t = line.trim().trim_start_matches(['*', '_', '|', ' ']);
        for label in [
            "Figure",
            "Fig.",
            "Table",
            "Рисунок",
            "Рис.",
            "Таблица",
            "图",
            "表",
        ] {
            if let Some(rest) = t.strip_prefix(label) {
                let rest = rest.trim_start();
                let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
                if !n.is_empty() {
                    let sep = if matches!(label, "图" | "表") {
                        ""
                    } else {
                        " "
                    };
                    return Some(format!("{label}{sep}{n}"));
                }
            }
        }
    }
    None
}

fn is_code(doc: &DocumentView<'_>) -> bool {
    matches!(doc.kind, DocKind::Code(_)) || code::looks_like_code(doc.text)
}

fn clip(s: &str, max_chars: usize) -> String {
    match s.char_indices().nth(max_chars) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[async_trait::async_trait]
impl Contextualizer for Structural {
    fn method(&self) -> &str {
        "structural"
    }

    fn fingerprint(&self) -> String {
        STRUCTURAL_VERSION.into()
    }

    async fn contextualize(
        &self,
        doc: DocumentView<'_>,
        chunks: &[ChunkView<'_>],
        _sink: &dyn ContextSink,
    ) -> Result<DocumentContexts, ContextError> {
        // One pass over the document for all chunks: a large file stays linear.
        let enclosing = if is_code(&doc) {
            let starts: Vec<usize> = chunks.iter().map(|c| c.span.byte_start).collect();
            code::enclosing_items_at(doc.text, &starts)
        } else {
            vec![Vec::new(); chunks.len()]
        };
        let contexts = chunks
            .iter()
            .zip(&enclosing)
            .map(
                |(chunk, enclosing)| match Structural::compose(&doc, chunk, enclosing) {
                    None => ChunkContext::none(),
                    Some(text) => ChunkContext {
                        provenance: Some(Provenance {
                            method: situate_core::ContextMethod::Structural,
                            model: None,
                            prompt_version: Some(STRUCTURAL_VERSION.into()),
                            input_hash: hash_parts(&[
                                doc.content_hash.as_bytes(),
                                chunk.text.as_bytes(),
                                STRUCTURAL_VERSION.as_bytes(),
                            ]),
                            strategy: None,
                            parts: vec![],
                        }),
                        text: Some(text),
                        status: ContextStatus::Generated,
                        notes: vec![],
                    },
                },
            )
            .collect();
        Ok(DocumentContexts {
            contexts,
            usage: Default::default(),
            document_tokens: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use situate_core::{ChunkSpan, Language};

    fn span(start: usize, end: usize, headings: &[&str]) -> ChunkSpan {
        ChunkSpan {
            ordinal: 0,
            byte_start: start,
            byte_end: end,
            char_start: start,
            char_end: end,
            heading_path: headings.iter().map(|s| s.to_string()).collect(),
            chunk_id: None,
            ..Default::default()
        }
    }

    fn view<'a>(
        id: &'a str,
        title: Option<&'a str>,
        kind: &'a DocKind,
        text: &'a str,
    ) -> DocumentView<'a> {
        DocumentView {
            id,
            source: id,
            title,
            language: Language::En,
            kind,
            text,
            content_hash: "h",
        }
    }

    #[tokio::test]
    async fn structural_names_title_sections_and_code_items() {
        let md = DocKind::Markdown;
        let text = "# Guide\n\n## Install\n\nRun it.";
        let s = span(20, 27, &["Guide", "Install"]);
        let chunk = ChunkView {
            span: &s,
            text: &text[20..27],
        };
        let out = Structural
            .contextualize(
                view("docs/g.md", Some("Guide"), &md, text),
                &[chunk],
                &situate_core::NoSink,
            )
            .await
            .expect("ok");
        assert_eq!(
            out.contexts[0].text.as_deref(),
            Some("From docs/g.md, section Guide > Install.")
        );
        assert_eq!(out.contexts[0].status, ContextStatus::Generated);
        assert_eq!(
            out.contexts[0]
                .provenance
                .as_ref()
                .map(|p| p.method.as_str()),
            Some("structural")
        );

        let rs = DocKind::Code("rust".into());
        let code = "mod net {\n    impl Client {\n        fn send(&self) {\n            let x = 1;\n        }\n    }\n}\n";
        let at = code.find("let x").expect("present");
        let s = span(at, at + 10, &[]);
        let chunk = ChunkView {
            span: &s,
            text: &code[at..at + 10],
        };
        let out = Structural
            .contextualize(
                view("src/net.rs", None, &rs, code),
                &[chunk],
                &situate_core::NoSink,
            )
            .await
            .expect("ok");
        assert_eq!(
            out.contexts[0].text.as_deref(),
            Some("From src/net.rs (Rust source), in mod net > impl Client > fn send.")
        );
    }

    #[tokio::test]
    async fn none_leaves_chunks_pending() {
        let k = DocKind::Text;
        let s = span(0, 1, &[]);
        let out = NoContext
            .contextualize(
                view("a", None, &k, "x"),
                &[ChunkView {
                    span: &s,
                    text: "x",
                }],
                &situate_core::NoSink,
            )
            .await
            .expect("ok");
        assert_eq!(out.contexts, vec![ChunkContext::none()]);
    }

    #[test]
    fn a_figure_is_situated_by_the_sentence_that_refers_to_it() {
        let kind = DocKind::Markdown;
        let figure = |text: &'static str, needle: &str| {
            let start = text.find(needle).expect("figure");
            let s = ChunkSpan {
                byte_start: start,
                byte_end: text.len(),
                heading_path: vec!["销售".into()],
                kind: CardKind::Image,
                ..Default::default()
            };
            let doc = view("d.md", None, &kind, text);
            let chunk = ChunkView {
                span: &s,
                text: &text[start..],
            };
            Structural::context_for(&doc, &chunk).expect("a context")
        };
        // By its label, wherever the sentence is.
        let c = figure(
            "# 销售\n\nFigure 2 shows sales by month. Other text.\n\n![chart](c.png)\nFigure 2: Sales.",
            "![chart]",
        );
        assert!(c.starts_with("Figure from d.md, section 销售."), "{c}");
        assert!(
            c.contains("Referred to in: \"Figure 2 shows sales by month.\""),
            "{c}"
        );
        // Without a label: the sentence just before it, CJK included (no cut inside a
        // character).
        let c = figure(
            "# 销售\n\n第一句。销售额增长了。\n\n![图表](c.png)",
            "![图表]",
        );
        assert!(c.ends_with("Referred to in: \"销售额增长了。\""), "{c}");
    }

    #[test]
    fn records_get_their_title_only_where_the_chunk_lacks_it() {
        let k = DocKind::Record;
        let text = "Cats\n\nCats sleep a lot. They purr.";
        let (first, second) = (span(0, 17, &[]), span(18, 28, &[]));
        let doc = view("d1", Some("Cats"), &k, text);
        assert_eq!(
            Structural::context_for(
                &doc,
                &ChunkView {
                    span: &first,
                    text: &text[0..17]
                }
            ),
            None
        );
        assert_eq!(
            Structural::context_for(
                &doc,
                &ChunkView {
                    span: &second,
                    text: &text[18..28]
                }
            )
            .as_deref(),
            Some("From \"Cats\".")
        );
        let untitled = view("d2", None, &k, "hello there, plain words");
        assert_eq!(
            Structural::context_for(
                &untitled,
                &ChunkView {
                    span: &first,
                    text: "hello"
                }
            ),
            None
        );
    }

    #[test]
    fn by_name_rejects_unknown_methods() {
        assert!(by_name("structural").is_ok());
        assert!(by_name("llm").is_err());
    }
}
