//! The chunker: token-aware, preferring the largest natural boundary that fits.
//!
//! Boundaries, best first:
//! - markdown (and every format read into Markdown-like text: HTML, PDF, DOCX, PPTX):
//!   headings, then paragraphs, sentences, words (`text-splitter`'s `MarkdownSplitter`), and
//!   each chunk records its heading path. Tables and figures are cut out first and become
//!   cards of their own kind: a figure (an image with its alt text, file name and caption,
//!   or a caption line such as `Figure 3: ...`) is one card; a table is one card when it
//!   fits, else runs of whole rows, each after the table's header row
//!   ([`ChunkSpan::lead`]), so every piece reads on its own;
//! - prose (text, HTML, corpus records): paragraphs, lines, sentences (Unicode sentence
//!   segmentation, so `。！？` and Russian punctuation end sentences), words;
//! - code: top-level items (a line at column 0 that follows a blank line), then blank lines,
//!   then lines.
//!
//! Sizes are counted in tokens: with a real tokenizer (`tokenizer.json`) when one is
//! configured, otherwise with [`TokenCounter::Approx`], a fast estimate.
//!
//! Defaults: at most 256 tokens per chunk with 32 tokens (12.5%) of overlap (an index
//! lowers the size so that context and chunk fit its embedder's window: the engine's
//! `chunk_tokens_for`). 256 is the
//! window of the local English embedder (all-MiniLM-L6-v2 truncates there) and close to the
//! chunks of Anthropic's own benchmark (mean 675 characters, about 170 tokens); small chunks
//! keep BM25 and embeddings precise while the situating context restores what a small chunk
//! loses. The overlap keeps a sentence cut at a boundary findable from both sides.

use crate::IngestError;
use situate_core::{CardKind, ChunkSpan, DocKind, Document};
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

/// A tokenizer from the bytes of a `tokenizer.json`, or why not. The tokenizers crate
/// panics on some malformed files: its decoder reader `expect`s the decoder's JSON to parse,
/// so a syntax error inside the decoder (found twice by the `tokenizer_json` fuzz target)
/// is a panic, not an error. The bytes are therefore parsed as plain JSON first (a valid
/// document leaves that reader nothing to panic on: its last resort is any JSON value), and
/// a syntax error is refused with its line and column; any other panic is caught and becomes
/// the error, so a bad `--tokenizer` file is refused rather than stopping the process.
pub fn tokenizer_from_bytes(bytes: &[u8]) -> Result<tokenizers::Tokenizer, String> {
    if let Err(e) = serde_json::from_slice::<serde_json::Value>(bytes) {
        return Err(format!("not a tokenizer.json: not JSON ({e})"));
    }
    match std::panic::catch_unwind(|| tokenizers::Tokenizer::from_bytes(bytes)) {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(e)) => Err(e.to_string()),
        Err(panic) => Err(format!(
            "not a tokenizer.json this build can read ({})",
            panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("the tokenizers library failed on it")
        )),
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
                let fail = |e: tokenizers::Error| IngestError::Tokenizer {
                    path: path.display().to_string(),
                    message: e.to_string(),
                };
                let mut tok =
                    tokenizer_from_bytes(&bytes).map_err(|message| IngestError::Tokenizer {
                        path: path.display().to_string(),
                        message,
                    })?;
                // A model's tokenizer.json often cuts at the model's window (MiniLM's at
                // 128): counted through that, every text would seem to fit, and chunks
                // would grow without bound. Count every token.
                tok.with_truncation(None).map_err(fail)?;
                tok.with_padding(None);
                (
                    TokenCounter::Tokenizer(Arc::new(tok)),
                    format!("untruncated:{}", situate_core::content_hash(&bytes)),
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

    /// Cuts a document into chunk spans: by its kind, with the page (or slide) of each
    /// chunk when the document has a [`situate_core::Layout`].
    /// Slides are sections of their own: no chunk spans two (pages may be spanned).
    pub fn chunk_document(&self, doc: &Document) -> Vec<ChunkSpan> {
        let hard: Vec<usize> = match doc.layout.unit {
            Some(situate_core::PlaceUnit::Slide) => {
                doc.layout.starts.iter().map(|&(s, _)| s).collect()
            }
            _ => Vec::new(),
        };
        let mut spans = self.chunk_within(&doc.text, &doc.kind, &hard);
        if doc.layout.unit.is_some() {
            for s in &mut spans {
                s.place = doc.layout.place(s.byte_start, s.byte_end);
            }
        }
        spans
    }

    /// Cuts `text` into chunk spans according to its kind.
    pub fn chunk(&self, text: &str, kind: &DocKind) -> Vec<ChunkSpan> {
        self.chunk_within(text, kind, &[])
    }

    /// [`Chunker::chunk`] with byte offsets no running-text chunk may cross.
    fn chunk_within(&self, text: &str, kind: &DocKind, hard: &[usize]) -> Vec<ChunkSpan> {
        let mut raw: Vec<Piece> = Vec::new();
        if let DocKind::Code(_) = kind {
            raw = self.chunk_code(text).into_iter().map(Piece::text).collect();
        } else if kind.is_structured() {
            let mut at = 0;
            let prose = |from: usize, to: usize, raw: &mut Vec<Piece>| {
                let mut cuts: Vec<usize> = hard
                    .iter()
                    .copied()
                    .filter(|&h| h > from && h < to)
                    .collect();
                cuts.push(to);
                let mut a = from;
                for b in cuts {
                    self.chunk_prose(text, a, b, true, raw);
                    a = b;
                }
            };
            for (start, end, block_kind) in special_blocks(text) {
                prose(at, start, &mut raw);
                match block_kind {
                    CardKind::Table => self.chunk_table(text, start, end, &mut raw),
                    _ => self.chunk_whole(text, start, end, block_kind, &mut raw),
                }
                at = end;
            }
            prose(at, text.len(), &mut raw);
        } else {
            self.chunk_prose(text, 0, text.len(), false, &mut raw);
        }
        let headings = if kind.is_structured() {
            markdown_headings(text)
        } else {
            Vec::new()
        };
        spans_from_ranges(text, &raw, &headings)
    }

    /// Running text of `text[from..to]`, as markdown or as prose.
    fn chunk_prose(
        &self,
        text: &str,
        from: usize,
        to: usize,
        markdown: bool,
        out: &mut Vec<Piece>,
    ) {
        if text[from..to].trim().is_empty() {
            return;
        }
        // text-splitter's work grows faster than linearly on very long texts (measured:
        // 5 MB/s at 10 MB, 2 MB/s at 100 MB) and on very long lines, so long documents are
        // cut into blocks at paragraph breaks, and long lines into pieces, first; no chunk
        // spans two.
        for (b_start, b_end) in pieces(&text[from..to]) {
            let b_start = from + b_start;
            let block = &text[b_start..from + b_end];
            let offset = |(s, c): (usize, &str)| Piece::text((b_start + s, b_start + s + c.len()));
            if markdown {
                out.extend(self.markdown.chunk_indices(block).map(offset));
            } else {
                out.extend(self.text.chunk_indices(block).map(offset));
            }
        }
    }

    /// A figure (or any block kept whole): one piece, or prose pieces of its kind when it is
    /// larger than a chunk.
    fn chunk_whole(
        &self,
        text: &str,
        start: usize,
        end: usize,
        kind: CardKind,
        out: &mut Vec<Piece>,
    ) {
        let (start, end) = trimmed(text, start, end);
        if start >= end {
            return;
        }
        if self.counter.count(&text[start..end]) <= self.config.max_tokens {
            out.push(Piece {
                range: (start, end),
                kind,
                lead: None,
            });
            return;
        }
        let first = out.len();
        self.chunk_prose(text, start, end, false, out);
        for p in &mut out[first..] {
            p.kind = kind;
        }
    }

    /// A table: whole when it fits; else runs of whole rows, each after the header row.
    fn chunk_table(&self, text: &str, start: usize, end: usize, out: &mut Vec<Piece>) {
        let (start, end) = trimmed(text, start, end);
        if start >= end || self.counter.count(&text[start..end]) <= self.config.max_tokens {
            return self.chunk_whole(text, start, end, CardKind::Table, out);
        }
        // Lines of the block, with their byte ranges (a caption line may come first).
        let mut lines: Vec<(usize, usize)> = Vec::new();
        let mut pos = start;
        for line in text[start..end].split_inclusive('\n') {
            lines.push((pos, pos + line.trim_end().len()));
            pos += line.len();
        }
        // The header: the first table row and its delimiter row (`|---|`).
        let head_at = lines
            .iter()
            .position(|&(s, e)| text[s..e].trim_start().starts_with('|'))
            .unwrap_or(0);
        let is_delimiter = |(s, e): (usize, usize)| {
            let l = text[s..e].trim();
            !l.is_empty() && l.chars().all(|c| matches!(c, '|' | '-' | ':' | ' '))
        };
        let head_end = if lines.get(head_at + 1).is_some_and(|&l| is_delimiter(l)) {
            head_at + 2
        } else {
            head_at + 1
        };
        let header = lines[head_at..head_end.min(lines.len())]
            .iter()
            .map(|&(s, e)| &text[s..e])
            .collect::<Vec<_>>()
            .join("\n");
        let header_tokens = self.counter.count(&header);
        let budget = self.config.max_tokens.saturating_sub(header_tokens).max(1);
        let mut piece: Option<(usize, usize, usize)> = None; // (first line, last line, tokens)
        let mut first_piece = true;
        let flush = |from: usize, to: usize, first: &mut bool, out: &mut Vec<Piece>| {
            let range = (if *first { lines[0].0 } else { lines[from].0 }, lines[to].1);
            let lead = (!*first).then(|| header.clone());
            *first = false;
            out.push(Piece {
                range,
                kind: CardKind::Table,
                lead,
            });
        };
        for i in head_end.min(lines.len())..lines.len() {
            let t = self.counter.count(&text[lines[i].0..lines[i].1]) + 1;
            match piece {
                Some((a, _, tokens)) if tokens + t <= budget => piece = Some((a, i, tokens + t)),
                Some((a, b, _)) => {
                    flush(a, b, &mut first_piece, out);
                    piece = Some((i, i, t));
                }
                None => piece = Some((i, i, t)),
            }
        }
        match piece {
            Some((a, b, _)) => flush(a, b, &mut first_piece, out),
            None => out.push(Piece {
                range: (start, end),
                kind: CardKind::Table,
                lead: None,
            }),
        }
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
                for (a, b) in pieces(item) {
                    let (a, b) = (start + a, start + b);
                    out.extend(
                        self.text
                            .chunk_indices(&text[a..b])
                            .map(|(s, c)| (a + s, a + s + c.len())),
                    );
                }
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

/// A chunk before its character offsets and heading path are known.
#[derive(Debug, Clone)]
struct Piece {
    range: (usize, usize),
    kind: CardKind,
    lead: Option<String>,
}

impl Piece {
    fn text(range: (usize, usize)) -> Piece {
        Piece {
            range,
            kind: CardKind::Text,
            lead: None,
        }
    }
}

/// `start..end` without the whitespace at its edges.
fn trimmed(text: &str, start: usize, end: usize) -> (usize, usize) {
    let piece = &text[start..end];
    let lead = piece.len() - piece.trim_start().len();
    let trail = piece.len() - piece.trim_end().len();
    if lead + trail >= piece.len() {
        return (start, start);
    }
    (start + lead, end - trail)
}

/// Whether a paragraph is a figure caption: a label and a number followed by `:` or `.`
/// (`Figure 3:`, `Fig. 2.`, `Рис. 4.`, `Рисунок 1:`, `图 2：`), so running text that merely
/// starts with "Figure 3 shows" is not one.
pub fn is_figure_caption(text: &str) -> bool {
    caption_label(
        text,
        &[
            "figure",
            "fig.",
            "fig",
            "рис.",
            "рисунок",
            "图",
            "圖",
            "image",
        ],
    )
}

/// Whether a paragraph is a table caption (`Table 2:`, `Таблица 1.`, `表 3：`).
pub fn is_table_caption(text: &str) -> bool {
    caption_label(text, &["table", "таблица", "табл.", "表"])
}

fn caption_label(text: &str, labels: &[&str]) -> bool {
    let t = text.trim_start_matches(['*', '_', ' ']).trim_start();
    let lower = t.to_lowercase();
    labels.iter().any(|label| {
        let Some(rest) = lower.strip_prefix(label) else {
            return false;
        };
        let rest = rest.trim_start();
        let digits = rest.len()
            - rest
                .trim_start_matches(|c: char| c.is_ascii_digit() || c == '.')
                .len();
        if !rest[..digits].starts_with(|c: char| c.is_ascii_digit()) {
            return false;
        }
        let after = rest[digits..].trim_start_matches(['*', '_']).trim_start();
        // "Figure 3." ends in the number's own dot; "Figure 3: ..." or "Figure 3. ...".
        rest[..digits].ends_with('.') || after.starts_with([':', '.', '：', '—', '-'])
    })
}

/// Tables and figures of Markdown-like text, in order: `(start, end, kind)`. A figure is a
/// short paragraph holding an image, or a caption paragraph, with an adjacent caption
/// merged; a table takes a caption paragraph right above it.
fn special_blocks(text: &str) -> Vec<(usize, usize, CardKind)> {
    use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
    // Paragraphs (start, end, has image, plain text) and tables, in order.
    enum Block {
        Para(usize, usize, bool, String),
        Table(usize, usize),
    }
    let mut found: Vec<Block> = Vec::new();
    let mut para: Option<(usize, bool, String)> = None;
    let mut depth = 0usize; // inside list items, quotes, ...: not a figure of its own
    for (event, range) in Parser::new_ext(text, Options::ENABLE_TABLES).into_offset_iter() {
        match event {
            Event::Start(Tag::Table(_)) => found.push(Block::Table(range.start, range.end)),
            Event::Start(Tag::Item | Tag::BlockQuote(_) | Tag::FootnoteDefinition(_)) => depth += 1,
            Event::End(TagEnd::Item | TagEnd::BlockQuote(_) | TagEnd::FootnoteDefinition) => {
                depth = depth.saturating_sub(1)
            }
            Event::Start(Tag::Paragraph) if depth == 0 => {
                para = Some((range.start, false, String::new()))
            }
            Event::Start(Tag::Image { .. }) => {
                if let Some(p) = para.as_mut() {
                    p.1 = true;
                }
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some(p) = para.as_mut() {
                    p.2.push_str(&t);
                }
            }
            Event::End(TagEnd::Paragraph) => {
                if let Some((start, image, plain)) = para.take() {
                    found.push(Block::Para(start, range.end, image, plain));
                }
            }
            _ => {}
        }
    }
    const FIGURE_CHARS: usize = 600;
    let mut out: Vec<(usize, usize, CardKind)> = Vec::new();
    let between_blank = |a: usize, b: usize| a <= b && text[a..b].trim().is_empty();
    for (i, block) in found.iter().enumerate() {
        match block {
            Block::Table(s, e) => {
                // A caption paragraph right above joins the table.
                let mut start = *s;
                if let Some(Block::Para(ps, pe, false, plain)) = i.checked_sub(1).map(|j| &found[j])
                    && is_table_caption(plain)
                    && between_blank(*pe, *s)
                    && out.last().is_none_or(|l| l.1 <= *ps)
                {
                    start = *ps;
                }
                out.push((start, *e, CardKind::Table));
            }
            Block::Para(s, e, image, plain) => {
                let figure =
                    (*image || is_figure_caption(plain)) && plain.chars().count() <= FIGURE_CHARS;
                if !figure {
                    continue;
                }
                // An image and its caption in the next paragraph (or a caption and the image
                // after it) are one figure.
                if let Some(last) = out.last_mut()
                    && last.2 == CardKind::Image
                    && between_blank(last.1, *s)
                {
                    let last_text = &text[last.0..last.1];
                    let last_image = last_text.contains("![");
                    let last_caption =
                        is_figure_caption(last_text) || last_text.lines().any(is_figure_caption);
                    let caption = is_figure_caption(plain);
                    if (last_image && !last_caption && caption && !*image)
                        || (last_caption && !last_image && *image && !caption)
                    {
                        last.1 = *e;
                        continue;
                    }
                }
                out.push((*s, *e, CardKind::Image));
            }
        }
    }
    out
}

/// Largest block handed to text-splitter at once.
const BLOCK_BYTES: usize = 256 * 1024;

/// Longest line handed to text-splitter whole. Its work per chunk grows with the length of
/// the sentence the chunk is in, so a long line dense with punctuation costs time
/// quadratic in its length: one line of 50,000 `>` took 0.26 s to chunk as Markdown, of
/// 200,000 3.3 s (release build; found trying the `chunker` fuzz target on long inputs,
/// RELIABILITY.md); cut into pieces of 16 KB, 0.57 s. Longer lines are cut first, at a
/// sentence's end, else a space, else punctuation; no chunk spans two pieces.
const LINE_BYTES: usize = 16 * 1024;

/// The pieces text-splitter gets: [`blocks`] of at most [`BLOCK_BYTES`], their lines of
/// more than [`LINE_BYTES`] cut by [`long_lines`]. Consecutive, covering `text`.
fn pieces(text: &str) -> Vec<(usize, usize)> {
    blocks(text, BLOCK_BYTES)
        .into_iter()
        .flat_map(|(s, e)| {
            long_lines(&text[s..e], LINE_BYTES)
                .into_iter()
                .map(move |(a, b)| (s + a, s + b))
        })
        .collect()
}

/// Where a piece of `text` that starts at `start` and may not pass `start + max` ends:
/// after the first of `breaks` (each finds its last match in a window) found in the
/// piece's second half, else at the last character boundary before the limit. Always
/// past `start`.
fn cut(text: &str, start: usize, max: usize, breaks: &[fn(&str) -> Option<usize>]) -> usize {
    let floor = |mut i: usize| {
        while !text.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let limit = floor((start + max).min(text.len()));
    if limit <= start {
        // `max` is smaller than the character at `start`: that character alone.
        return start + text[start..].chars().next().map_or(1, char::len_utf8);
    }
    let mid = floor(start + max / 2);
    let window = &text[mid..limit];
    breaks
        .iter()
        .find_map(|b| b(window))
        .map(|p| mid + p)
        .filter(|&c| c > start)
        .unwrap_or(limit)
}

/// Cuts `text` into consecutive blocks of at most about `max` bytes, each ending at a
/// paragraph break (blank line) when there is one in the block's second half, else at a
/// line break, else at a character boundary.
fn blocks(text: &str, max: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let breaks: [fn(&str) -> Option<usize>; 2] = [
        |w| w.rfind("\n\n").map(|p| p + 2),
        |w| w.rfind('\n').map(|p| p + 1),
    ];
    cut_all(text, 0, text.len(), max, &breaks, &mut out);
    out
}

/// Cuts `text[from..to]` into consecutive pieces of at most `max` bytes, each ended by
/// [`cut`] at `breaks`, and appends them to `out` (one piece, maybe empty, when it fits).
fn cut_all(
    text: &str,
    from: usize,
    to: usize,
    max: usize,
    breaks: &[fn(&str) -> Option<usize>],
    out: &mut Vec<(usize, usize)>,
) {
    let (mut at, first) = (from, out.len());
    while to - at > max {
        let c = cut(text, at, max, breaks);
        out.push((at, c));
        at = c;
    }
    if at < to || out.len() == first {
        out.push((at, to));
    }
}

/// Cuts the lines of `text` longer than `max` bytes into pieces of at most `max` (at the
/// last sentence end in a piece's second half, else space, else ASCII punctuation, else a
/// character boundary); the text between long lines stays whole. Consecutive, covering
/// `text`.
fn long_lines(text: &str, max: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut run = 0;
    let mut pos = 0;
    for line in text.split_inclusive('\n') {
        let (at, end) = (pos, pos + line.len());
        pos = end;
        if line.len() <= max {
            continue;
        }
        if at > run {
            out.push((run, at));
        }
        let breaks: [fn(&str) -> Option<usize>; 3] = [
            |w| w.rfind(". ").map(|p| p + 2),
            |w| w.rfind(' ').map(|p| p + 1),
            |w| w.rfind(|c: char| c.is_ascii_punctuation()).map(|p| p + 1),
        ];
        cut_all(text, at, end, max, &breaks, &mut out);
        run = end;
    }
    if pos > run || out.is_empty() {
        out.push((run, pos));
    }
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

/// Gives spans cut elsewhere (a caller's preset chunks, in document order) the Markdown
/// heading path each starts under, as the chunker's own spans have.
pub fn set_heading_paths(text: &str, spans: &mut [ChunkSpan]) {
    let headings = markdown_headings(text);
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut next_heading = 0;
    for span in spans {
        while next_heading < headings.len() && headings[next_heading].0 <= span.byte_start {
            let (_, level, ref h) = headings[next_heading];
            stack.retain(|(l, _)| *l < level);
            stack.push((level, h.clone()));
            next_heading += 1;
        }
        span.heading_path = stack.iter().map(|(_, h)| h.clone()).collect();
    }
}

/// Turns pieces into spans with character offsets and heading paths. Pieces arrive in
/// document order (overlap allowed), so character offsets are counted incrementally.
fn spans_from_ranges(
    text: &str,
    pieces: &[Piece],
    headings: &[(usize, usize, String)],
) -> Vec<ChunkSpan> {
    let mut spans = Vec::with_capacity(pieces.len());
    let (mut at_byte, mut at_char) = (0usize, 0usize);
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut next_heading = 0;
    for (ordinal, piece) in pieces.iter().enumerate() {
        let (start, end) = piece.range;
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
            kind: piece.kind,
            place: None,
            lead: piece.lead.clone(),
        });
    }
    spans
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_tokenizer_file_that_panics_the_tokenizers_crate_is_an_error() {
        // Found by the `tokenizer_json` fuzz target, twice: a decoder whose JSON does not
        // parse made the tokenizers crate panic while reading the file. Refused by the JSON
        // check before the crate sees it (a caught panic would say "this build can read"),
        // so even a panic hook that aborts, as libFuzzer's does, never runs.
        let json_panic: &[u8] =
            include_bytes!("../../../fuzz/regressions/tokenizer_json/decoder-json-panic.json");
        let syntax_panic: &[u8] =
            include_bytes!("../../../fuzz/regressions/tokenizer_json/decoder-syntax-panic.json");
        for bytes in [json_panic, syntax_panic] {
            let err = tokenizer_from_bytes(bytes).expect_err("refused");
            assert!(err.starts_with("not a tokenizer.json: not JSON ("), "{err}");
            assert!(err.contains("line 1 column"), "{err}");
        }
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("tokenizer.json");
        std::fs::write(&path, json_panic).expect("write");
        let refused = Chunker::new(ChunkerConfig {
            tokenizer: Some(path),
            ..ChunkerConfig::default()
        });
        assert!(matches!(refused, Err(IngestError::Tokenizer { .. })));
    }

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

    /// A real (tiny) Hugging Face tokenizer: word level, whitespace/punctuation pre-tokenizer,
    /// cutting at 4 tokens as a model's tokenizer.json cuts at its window (the chunker must
    /// count past it).
    fn word_level_tokenizer(dir: &std::path::Path) -> PathBuf {
        let path = dir.join("tokenizer.json");
        let json = r#"{"version":"1.0",
            "truncation":{"direction":"Right","max_length":4,"strategy":"LongestFirst","stride":0},
            "padding":null,"added_tokens":[],
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
    fn tables_and_figures_become_cards_of_their_own() {
        let text = "# Report\n\nIntro paragraph about sales.\n\nTable 2: Sales.\n\n| A | B |\n|---|---|\n| 1 | 2 |\n\n![A chart](c.png)\n\nFigure 3: Sales by month.\n\nFigure 3 shows the trend, which is not a caption.\n";
        let spans = chunker(200, 0).chunk(text, &DocKind::Markdown);
        let of = |kind: CardKind| -> Vec<&str> {
            spans
                .iter()
                .filter(|s| s.kind == kind)
                .map(|s| &text[s.byte_start..s.byte_end])
                .collect()
        };
        assert_eq!(
            of(CardKind::Table),
            vec!["Table 2: Sales.\n\n| A | B |\n|---|---|\n| 1 | 2 |"]
        );
        assert_eq!(
            of(CardKind::Image),
            vec!["![A chart](c.png)\n\nFigure 3: Sales by month."]
        );
        let prose = of(CardKind::Text).join(" ");
        assert!(prose.contains("Intro") && prose.contains("Figure 3 shows the trend"));
        assert!(spans.iter().all(|s| s.heading_path == vec!["Report"]));
        // Plain text is never cut into tables or figures.
        let plain = chunker(200, 0).chunk(text, &DocKind::Text);
        assert!(plain.iter().all(|s| s.kind == CardKind::Text));
    }

    #[test]
    fn captions_need_a_label_a_number_and_a_mark() {
        for yes in [
            "Figure 3: Sales.",
            "Fig. 2. Map",
            "Рис. 4. Схема",
            "图 2：销售",
            "*Figure 1: x*",
        ] {
            assert!(is_figure_caption(yes), "{yes}");
        }
        for no in [
            "Figure 3 shows the trend.",
            "Figures are below.",
            "Fig. without number",
        ] {
            assert!(!is_figure_caption(no), "{no}");
        }
        assert!(is_table_caption("Table 1: Prices") && is_table_caption("Таблица 2. Цены"));
    }

    #[test]
    fn slides_are_never_shared_and_pages_are_recorded() {
        use situate_core::{Layout, PlaceUnit};
        let text = "# Slide 1: A\n\nshort\n\n# Slide 2: B\n\nalso short\n";
        let second = text.find("# Slide 2").expect("slide 2");
        let mut doc = Document {
            id: "d".into(),
            source: "d.pptx".into(),
            title: None,
            language: situate_core::Language::En,
            kind: DocKind::Pptx,
            text: text.into(),
            content_hash: String::new(),
            metadata: Default::default(),
            preset_chunks: None,
            layout: Layout {
                unit: Some(PlaceUnit::Slide),
                starts: vec![(0, 1), (second, 2)],
            },
        };
        let spans = chunker(200, 0).chunk_document(&doc);
        let places: Vec<(u32, u32)> = spans
            .iter()
            .map(|s| s.place.map(|p| (p.first, p.last)).expect("a place"))
            .collect();
        assert_eq!(places, vec![(1, 1), (2, 2)], "{spans:?}");
        // Pages may be spanned, and the chunk records both.
        doc.layout.unit = Some(PlaceUnit::Page);
        let spans = chunker(200, 0).chunk_document(&doc);
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0].place.map(|p| (p.first, p.last)), Some((1, 2)));
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
    fn blocks_cut_at_character_boundaries_whatever_the_sizes() {
        // Three-byte characters and an odd size: a block's second half could start inside
        // a character (a panic before).
        let solid = "中文".repeat(500);
        for max in [7, 301, 1000] {
            let b = blocks(&solid, max);
            assert_eq!(b.first().map(|x| x.0), Some(0));
            assert_eq!(b.last().map(|x| x.1), Some(solid.len()));
            for w in b.windows(2) {
                assert_eq!(w[0].1, w[1].0);
            }
            assert!(b.iter().all(|(s, e)| solid.is_char_boundary(*s)
                && solid.is_char_boundary(*e)
                && e - s <= max));
        }
        // A size smaller than one character still moves on.
        assert_eq!(blocks("中文", 1), vec![(0, 3), (3, 6)]);
    }

    #[test]
    fn long_lines_are_cut_into_pieces_at_punctuation() {
        let json = (0..1200)
            .map(|i| format!("{{\"id\":{i},\"v\":[{},{}]}}", i % 7, i % 13))
            .collect::<Vec<_>>()
            .join(",");
        // Longer than a line may be before `Chunker::chunk` cuts it.
        assert!(json.len() > LINE_BYTES);
        let text = format!("# Data\n\nShort line.\n[{json}]\nAfter.\n");
        let p = long_lines(&text, 1000);
        assert_eq!(p.first().map(|x| x.0), Some(0));
        assert_eq!(p.last().map(|x| x.1), Some(text.len()));
        for w in p.windows(2) {
            assert_eq!(w[0].1, w[1].0);
        }
        // The short lines before stay one piece; the long line is cut after punctuation.
        assert_eq!(&text[p[0].0..p[0].1], "# Data\n\nShort line.\n");
        assert!(p.iter().all(|(s, e)| e - s <= 1000));
        assert!(
            p.iter()
                .all(|&(_, e)| text[..e].ends_with(|c: char| c.is_ascii_punctuation() || c == '\n'))
        );
        // Chunked as a text, each chunk fits.
        let c = chunker(64, 0);
        let spans = c.chunk(&text, &DocKind::Text);
        assert!(spans.len() > 100);
        assert!(
            spans
                .iter()
                .all(|s| c.count_tokens(&text[s.byte_start..s.byte_end]) <= 64)
        );
        assert!(
            spans
                .last()
                .is_some_and(|s| text[s.byte_start..s.byte_end].contains("After."))
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
