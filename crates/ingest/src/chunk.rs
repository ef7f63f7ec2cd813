//! The chunker: token-aware, preferring the largest natural boundary that fits.
//!
//! Boundaries, best first:
//! - markdown: headings, then paragraphs, sentences, words (`text-splitter`'s
//!   `MarkdownSplitter`), and each chunk records its heading path;
//! - prose (text, HTML, corpus records): paragraphs, lines, sentences (Unicode sentence
//!   segmentation, so `。！？` and Russian punctuation end sentences), words;
//! - code: top-level items (a line at column 0 that follows a blank line), then blank lines,
//!   then lines.
//!
//! Sizes are counted in tokens: with a real tokenizer (`tokenizer.json`) when one is
//! configured, otherwise with [`TokenCounter::Approx`], a fast estimate.
//!
//! Defaults: at most 256 tokens per chunk with 32 tokens (12.5%) of overlap. 256 is the
//! window of the local English embedder (all-MiniLM-L6-v2 truncates there) and close to the
//! chunks of Anthropic's own benchmark (mean 675 characters, about 170 tokens); small chunks
//! keep BM25 and embeddings precise while the situating context restores what a small chunk
//! loses. The overlap keeps a sentence cut at a boundary findable from both sides.

use crate::IngestError;
use situate_core::{ChunkSpan, DocKind};
use std::path::PathBuf;
use std::sync::Arc;
use text_splitter::{ChunkConfig, ChunkSizer, MarkdownSplitter, TextSplitter};

/// Chunker settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkerConfig {
    /// Largest chunk, in tokens.
    pub max_tokens: usize,
    /// Tokens shared by neighbouring chunks (must be below `max_tokens`).
    pub overlap_tokens: usize,
    /// A Hugging Face `tokenizer.json` to count tokens with; `None` uses the estimate.
    pub tokenizer: Option<PathBuf>,
}

impl Default for ChunkerConfig {
    fn default() -> Self {
        ChunkerConfig {
            max_tokens: 256,
            overlap_tokens: 32,
            tokenizer: None,
        }
    }
}

/// Counts tokens for the chunker.
#[derive(Clone)]
pub enum TokenCounter {
    /// A fast estimate, no tokenizer needed: each run of letters and digits counts one token
    /// per started six characters (a BPE/WordPiece vocabulary keeps common words whole and
    /// splits long ones), each CJK character one, each other non-space character one.
    Approx,
    /// A real tokenizer (no special tokens counted).
    Tokenizer(Arc<tokenizers::Tokenizer>),
}

impl TokenCounter {
    /// Number of tokens in `text`.
    pub fn count(&self, text: &str) -> usize {
        match self {
            TokenCounter::Approx => approx_tokens(text),
            TokenCounter::Tokenizer(t) => t.as_ref().size(text),
        }
    }
}

impl ChunkSizer for TokenCounter {
    fn size(&self, chunk: &str) -> usize {
        self.count(chunk)
    }
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF
        | 0xF900..=0xFAFF | 0x20000..=0x2FA1F)
}

fn approx_tokens(text: &str) -> usize {
    let mut tokens = 0;
    let mut run = 0usize;
    for c in text.chars() {
        if c.is_alphanumeric() && !is_cjk(c) {
            run += 1;
            continue;
        }
        tokens += run.div_ceil(6);
        run = 0;
        if !c.is_whitespace() {
            tokens += 1;
        }
    }
    tokens + run.div_ceil(6)
}

/// Cuts documents into [`ChunkSpan`]s.
pub struct Chunker {
    config: ChunkerConfig,
    counter: TokenCounter,
    text: TextSplitter<TokenCounter>,
    markdown: MarkdownSplitter<TokenCounter>,
    fingerprint: String,
}

impl Chunker {
    /// Builds a chunker; loads the tokenizer if one is configured.
    pub fn new(config: ChunkerConfig) -> Result<Self, IngestError> {
        if config.max_tokens == 0 {
            return Err(IngestError::Config("max_tokens must be at least 1".into()));
        }
        if config.overlap_tokens >= config.max_tokens {
            return Err(IngestError::Config(format!(
                "overlap ({}) must be smaller than the chunk size ({})",
                config.overlap_tokens, config.max_tokens
            )));
        }
        let (counter, counter_id) = match &config.tokenizer {
            None => (TokenCounter::Approx, "approx-v1".to_string()),
            Some(path) => {
                let bytes = std::fs::read(path).map_err(|e| IngestError::Tokenizer {
                    path: path.display().to_string(),
                    message: e.to_string(),
                })?;
                let tok = tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| {
                    IngestError::Tokenizer {
                        path: path.display().to_string(),
                        message: e.to_string(),
                    }
                })?;
                (
                    TokenCounter::Tokenizer(Arc::new(tok)),
                    situate_core::content_hash(&bytes),
                )
            }
        };
        let make = || {
            ChunkConfig::new(config.max_tokens)
                .with_sizer(counter.clone())
                .with_overlap(config.overlap_tokens)
                .map_err(|e| IngestError::Config(e.to_string()))
        };
        let fingerprint = format!(
            "chunker-v1;max={};overlap={};counter={counter_id}",
            config.max_tokens, config.overlap_tokens
        );
        Ok(Chunker {
            text: TextSplitter::new(make()?),
            markdown: MarkdownSplitter::new(make()?),
            counter,
            config,
            fingerprint,
        })
    }

    /// The settings.
    pub fn config(&self) -> &ChunkerConfig {
        &self.config
    }

    /// Identifies everything that changes the chunks; part of each document's ingest key.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Token count of `text` with this chunker's counter.
    pub fn count_tokens(&self, text: &str) -> usize {
        self.counter.count(text)
    }

    /// Cuts `text` into chunk spans according to its kind.
    pub fn chunk(&self, text: &str, kind: &DocKind) -> Vec<ChunkSpan> {
        let mut raw: Vec<(usize, usize)> = Vec::new();
        if let DocKind::Code(_) = kind {
            raw = self.chunk_code(text);
        } else {
            // text-splitter's work grows faster than linearly on very long texts (measured:
            // 5 MB/s at 10 MB, 2 MB/s at 100 MB), so long documents are cut into blocks at
            // paragraph breaks first; no chunk spans two blocks.
            for (b_start, b_end) in blocks(text, BLOCK_BYTES) {
                let block = &text[b_start..b_end];
                let offset = |(s, c): (usize, &str)| (b_start + s, b_start + s + c.len());
                match kind {
                    DocKind::Markdown => raw.extend(self.markdown.chunk_indices(block).map(offset)),
                    _ => raw.extend(self.text.chunk_indices(block).map(offset)),
                }
            }
        }
        let headings = match kind {
            DocKind::Markdown => markdown_headings(text),
            _ => Vec::new(),
        };
        spans_from_ranges(text, &raw, &headings)
    }

    /// Code: pack top-level items greedily up to the size; an item too large alone is cut by
    /// the prose splitter (blank lines, then lines). `text-splitter`'s own code splitter
    /// needs a tree-sitter grammar per language, compiled C for each; this rule needs none
    /// and works for every language whose top-level items start at column 0.
    fn chunk_code(&self, text: &str) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut current: Option<(usize, usize)> = None;
        for (start, end) in top_level_items(text) {
            let item = &text[start..end];
            if item.trim().is_empty() {
                continue;
            }
            if let Some((cs, _)) = current {
                if self.counter.count(&text[cs..end]) <= self.config.max_tokens {
                    current = Some((cs, end));
                    continue;
                }
                out.push(current.take().expect("checked above"));
            }
            if self.counter.count(item) <= self.config.max_tokens {
                current = Some((start, end));
            } else {
                out.extend(
                    self.text
                        .chunk_indices(item)
                        .map(|(s, c)| (start + s, start + s + c.len())),
                );
            }
        }
        out.extend(current);
        // Trim the whitespace the packing kept at the edges, as the splitters do.
        out.into_iter()
            .filter_map(|(s, e)| {
                let piece = &text[s..e];
                let lead = piece.len() - piece.trim_start().len();
                let trail = piece.len() - piece.trim_end().len();
                (lead + trail < piece.len()).then_some((s + lead, e - trail))
            })
            .collect()
    }
}

/// Largest block handed to text-splitter at once.
const BLOCK_BYTES: usize = 256 * 1024;

/// Cuts `text` into consecutive blocks of at most about `max` bytes, each ending at a
/// paragraph break (blank line) when there is one in the block's second half, else at a
/// line break, else at a character boundary.
fn blocks(text: &str, max: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    while text.len() - start > max {
        let mut limit = start + max;
        while !text.is_char_boundary(limit) {
            limit -= 1;
        }
        let window = &text[start + max / 2..limit];
        let cut = window
            .rfind("\n\n")
            .map(|p| p + 2)
            .or_else(|| window.rfind('\n').map(|p| p + 1))
            .map_or(limit, |p| start + max / 2 + p);
        out.push((start, cut));
        start = cut;
    }
    out.push((start, text.len()));
    out
}

/// Byte ranges of a source file's top-level items: a new item starts at a non-blank line at
/// column 0 that follows a blank line (closing braces stay with the item above).
fn top_level_items(text: &str) -> Vec<(usize, usize)> {
    let mut items = Vec::new();
    let mut start = 0;
    let mut pos = 0;
    let mut prev_blank = false;
    for line in text.split_inclusive('\n') {
        let blank = line.trim().is_empty();
        let at_col0 = !line.starts_with([' ', '\t']);
        let closer = line.trim_start().starts_with(['}', ')', ']']);
        if pos > start && prev_blank && !blank && at_col0 && !closer {
            items.push((start, pos));
            start = pos;
        }
        prev_blank = blank;
        pos += line.len();
    }
    if pos > start {
        items.push((start, pos));
    }
    items
}

/// (byte offset, level, text) of every markdown heading.
fn markdown_headings(text: &str) -> Vec<(usize, usize, String)> {
    use pulldown_cmark::{Event, Parser, Tag, TagEnd};
    let mut out = Vec::new();
    let mut open: Option<(usize, usize, String)> = None;
    for (event, range) in Parser::new(text).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { level, .. }) => {
                open = Some((range.start, level as usize, String::new()));
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some((_, _, s)) = open.as_mut() {
                    s.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some((start, level, s)) = open.take() {
                    out.push((start, level, s.trim().to_string()));
                }
            }
            _ => {}
        }
    }
    out
}

/// Turns byte ranges into spans with character offsets and heading paths. Ranges arrive in
/// document order (overlap allowed), so character offsets are counted incrementally.
fn spans_from_ranges(
    text: &str,
    ranges: &[(usize, usize)],
    headings: &[(usize, usize, String)],
) -> Vec<ChunkSpan> {
    let mut spans = Vec::with_capacity(ranges.len());
    let (mut at_byte, mut at_char) = (0usize, 0usize);
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut next_heading = 0;
    for (ordinal, &(start, end)) in ranges.iter().enumerate() {
        if start < at_byte {
            // Overlapping chunk: step back over the (short) overlap.
            at_char -= text[start..at_byte].chars().count();
        } else {
            at_char += text[at_byte..start].chars().count();
        }
        at_byte = start;
        let char_len = text[start..end].chars().count();
        while next_heading < headings.len() && headings[next_heading].0 <= start {
            let (_, level, ref h) = headings[next_heading];
            stack.retain(|(l, _)| *l < level);
            stack.push((level, h.clone()));
            next_heading += 1;
        }
        spans.push(ChunkSpan {
            ordinal: ordinal as u32,
            byte_start: start,
            byte_end: end,
            char_start: at_char,
            char_end: at_char + char_len,
            heading_path: stack.iter().map(|(_, h)| h.clone()).collect(),
            chunk_id: None,
        });
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunker(max: usize, overlap: usize) -> Chunker {
        Chunker::new(ChunkerConfig {
            max_tokens: max,
            overlap_tokens: overlap,
            tokenizer: None,
        })
        .expect("valid config")
    }

    fn texts<'a>(text: &'a str, spans: &[ChunkSpan]) -> Vec<&'a str> {
        spans
            .iter()
            .map(|s| &text[s.byte_start..s.byte_end])
            .collect()
    }

    #[test]
    fn approx_counts_words_cjk_and_punctuation() {
        assert_eq!(approx_tokens("cat sat."), 3);
        assert_eq!(approx_tokens("international"), 3);
        assert_eq!(approx_tokens("北京是首都"), 5);
        assert_eq!(approx_tokens("   "), 0);
    }

    /// A real (tiny) Hugging Face tokenizer: word level, whitespace/punctuation pre-tokenizer.
    fn word_level_tokenizer(dir: &std::path::Path) -> PathBuf {
        let path = dir.join("tokenizer.json");
        let json = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
            "normalizer":{"type":"Lowercase"},"pre_tokenizer":{"type":"Whitespace"},
            "post_processor":null,"decoder":null,
            "model":{"type":"WordLevel","vocab":{"[UNK]":0,"internationalization":1},"unk_token":"[UNK]"}}"#;
        std::fs::write(&path, json).expect("write tokenizer");
        path
    }

    #[test]
    fn a_configured_tokenizer_counts_the_tokens() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = word_level_tokenizer(dir.path());
        let c = Chunker::new(ChunkerConfig {
            max_tokens: 10,
            overlap_tokens: 0,
            tokenizer: Some(path),
        })
        .expect("loads");
        // One word-level token, where the estimate says four.
        assert_eq!(c.count_tokens("internationalization"), 1);
        assert_eq!(chunker(10, 0).count_tokens("internationalization"), 4);
        let text = "internationalization ".repeat(100);
        let spans = c.chunk(&text, &DocKind::Text);
        assert_eq!(
            spans.len(),
            10,
            "ten words per chunk by the tokenizer's count"
        );
        assert!(c.fingerprint() != chunker(10, 0).fingerprint());
        let missing = Chunker::new(ChunkerConfig {
            max_tokens: 10,
            overlap_tokens: 0,
            tokenizer: Some(dir.path().join("nope.json")),
        });
        assert!(matches!(missing, Err(IngestError::Tokenizer { .. })));
    }

    #[test]
    fn rejects_overlap_not_below_size() {
        assert!(
            Chunker::new(ChunkerConfig {
                max_tokens: 10,
                overlap_tokens: 10,
                tokenizer: None
            })
            .is_err()
        );
        assert!(
            Chunker::new(ChunkerConfig {
                max_tokens: 0,
                overlap_tokens: 0,
                tokenizer: None
            })
            .is_err()
        );
    }

    #[test]
    fn char_ranges_match_the_text_with_multibyte_characters() {
        let text = "Привет, мир. Это первый абзац.\n\nВторой абзац здесь. Он длиннее первого абзаца.\n\n第三段。很短！";
        let c = chunker(12, 2);
        let spans = c.chunk(text, &DocKind::Text);
        assert!(spans.len() >= 3, "{spans:?}");
        let chars: Vec<char> = text.chars().collect();
        for s in &spans {
            let by_chars: String = chars[s.char_start..s.char_end].iter().collect();
            assert_eq!(by_chars, &text[s.byte_start..s.byte_end]);
            assert!(c.count_tokens(&by_chars) <= 12);
        }
    }

    #[test]
    fn chinese_sentences_end_at_full_stops() {
        let text = "今天天气很好。我们去公园散步吧！你觉得怎么样？好的。";
        let spans = chunker(9, 0).chunk(text, &DocKind::Text);
        let parts = texts(text, &spans);
        assert!(parts.len() >= 2, "{parts:?}");
        for p in &parts {
            assert!(
                p.ends_with(['。', '！', '？']),
                "chunk {p:?} does not end at a sentence end"
            );
        }
    }

    #[test]
    fn markdown_chunks_carry_their_heading_path() {
        let text = "# Guide\n\nIntro text here.\n\n## Install\n\nRun the installer and wait for it to finish completely.\n\n### Linux\n\nUse the package manager of your distribution to install it.\n\n## Usage\n\nCall the tool with a file name.\n";
        let spans = chunker(16, 0).chunk(text, &DocKind::Markdown);
        let find = |needle: &str| {
            spans
                .iter()
                .find(|s| text[s.byte_start..s.byte_end].contains(needle))
                .unwrap_or_else(|| panic!("no chunk with {needle}: {spans:?}"))
        };
        assert_eq!(
            find("package manager").heading_path,
            vec!["Guide", "Install", "Linux"]
        );
        assert_eq!(find("file name").heading_path, vec!["Guide", "Usage"]);
    }

    #[test]
    fn code_is_cut_between_top_level_items() {
        let f = |name: &str| {
            format!("fn {name}(x: u32) -> u32 {{\n    let y = x + 1;\n\n    y * 2\n}}\n\n")
        };
        let text = format!("use std::io;\n\n{}{}{}", f("alpha"), f("beta"), f("gamma"));
        let c = chunker(30, 0);
        let spans = c.chunk(&text, &DocKind::Code("rust".into()));
        let parts = texts(&text, &spans);
        assert!(parts.len() >= 2, "{parts:?}");
        for p in &parts {
            // no function is split: each chunk ends with a closing brace
            assert!(p.trim_end().ends_with('}') || p.starts_with("use"), "{p:?}");
        }
    }

    #[test]
    fn oversized_code_items_are_still_cut() {
        let body: String = (0..200).map(|i| format!("    let v{i} = {i};\n")).collect();
        let text = format!("fn big() {{\n{body}}}\n");
        let c = chunker(40, 0);
        let spans = c.chunk(&text, &DocKind::Code("rust".into()));
        assert!(spans.len() > 5);
        for s in &spans {
            assert!(c.count_tokens(&text[s.byte_start..s.byte_end]) <= 40);
        }
    }

    #[test]
    fn long_texts_are_cut_into_blocks_at_paragraph_breaks() {
        let para = "Some words in a paragraph.\n\n";
        let text = para.repeat(100);
        let b = blocks(&text, 300);
        assert!(b.len() > 5);
        assert_eq!(b[0].0, 0);
        assert_eq!(b.last().map(|x| x.1), Some(text.len()));
        for w in b.windows(2) {
            assert_eq!(w[0].1, w[1].0);
            assert!(text[..w[0].1].ends_with("\n\n"));
        }
        // No break at all: cut at a character boundary.
        let solid = "я".repeat(1000);
        let b = blocks(&solid, 301);
        assert!(b.iter().all(|(s, e)| solid.is_char_boundary(*s)
            && solid.is_char_boundary(*e)
            && e - s <= 301));
        // Chunks of a long text stay within their blocks and keep exact ranges.
        let c = chunker(20, 0);
        let long = "Alpha beta gamma delta. Epsilon zeta eta theta.\n\n".repeat(20_000);
        let spans = c.chunk(&long, &DocKind::Text);
        assert!(
            spans
                .iter()
                .all(|s| c.count_tokens(&long[s.byte_start..s.byte_end]) <= 20)
        );
        assert_eq!(
            spans.last().map(|s| s.char_end),
            Some(long.trim_end().chars().count())
        );
    }

    #[test]
    fn overlap_repeats_text_between_neighbours() {
        let text = (0..60)
            .map(|i| format!("Sentence number {i} is here."))
            .collect::<Vec<_>>()
            .join(" ");
        let spans = chunker(30, 10).chunk(&text, &DocKind::Text);
        assert!(spans.len() > 2);
        assert!(spans.windows(2).any(|w| w[1].byte_start < w[0].byte_end));
        let chars: Vec<char> = text.chars().collect();
        for s in &spans {
            let by_chars: String = chars[s.char_start..s.char_end].iter().collect();
            assert_eq!(by_chars, &text[s.byte_start..s.byte_end]);
        }
    }
}
