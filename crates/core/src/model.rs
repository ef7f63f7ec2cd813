//! The data model: documents, chunk spans, chunk cards and hits.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A document's natural language, which picks the BM25 analyzer for its chunks.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    /// English: lowercase, English stop words, Snowball English stemming.
    En,
    /// Russian: lowercase, Russian stop words, Snowball Russian stemming.
    Ru,
    /// Chinese: word segmentation or character bigrams (chosen when the index is created).
    Zh,
    /// Anything else: lowercase and ASCII folding, no stemming.
    Other,
}

impl Language {
    /// Every language, in a fixed order (the order of index fields).
    pub const ALL: [Language; 4] = [Language::En, Language::Ru, Language::Zh, Language::Other];

    /// The short code used in the store, the CLI and JSON (`en`, `ru`, `zh`, `other`).
    pub fn code(self) -> &'static str {
        match self {
            Language::En => "en",
            Language::Ru => "ru",
            Language::Zh => "zh",
            Language::Other => "other",
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

impl FromStr for Language {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "en" | "eng" | "english" => Ok(Language::En),
            "ru" | "rus" | "russian" => Ok(Language::Ru),
            "zh" | "cmn" | "chinese" => Ok(Language::Zh),
            "other" | "xx" => Ok(Language::Other),
            _ => Err(format!(
                "unknown language {s:?}: expected en, ru, zh or other"
            )),
        }
    }
}

/// What kind of text a document is; it decides the chunker and the structural context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind", content = "lang")]
pub enum DocKind {
    /// Plain prose.
    Text,
    /// Markdown: chunks follow headings and record their heading path.
    Markdown,
    /// HTML, stored as Markdown-like text (headings, lists, tables, images kept).
    Html,
    /// A PDF's text layer, stored as Markdown-like text with the pages it came from.
    Pdf,
    /// A Word document (DOCX), stored as Markdown-like text.
    Docx,
    /// A slide deck (PPTX), one section per slide, stored as Markdown-like text.
    Pptx,
    /// An OpenDocument text (ODT), stored as Markdown-like text.
    Odt,
    /// A spreadsheet (XLSX, XLS, ODS) or CSV/TSV file: a table per sheet.
    Sheet,
    /// Source code in the named language (`rust`, `python`, ...).
    Code(String),
    /// A record of a corpus file (BEIR `corpus.jsonl`, Anthropic `codebase_chunks.json`).
    Record,
}

impl DocKind {
    /// The stored form: `text`, `markdown`, `html`, `code:rust`, `record`.
    pub fn as_stored(&self) -> String {
        match self {
            DocKind::Text => "text".into(),
            DocKind::Markdown => "markdown".into(),
            DocKind::Html => "html".into(),
            DocKind::Pdf => "pdf".into(),
            DocKind::Docx => "docx".into(),
            DocKind::Pptx => "pptx".into(),
            DocKind::Odt => "odt".into(),
            DocKind::Sheet => "sheet".into(),
            DocKind::Code(l) => format!("code:{l}"),
            DocKind::Record => "record".into(),
        }
    }

    /// Parses [`DocKind::as_stored`]'s form; unknown values read as [`DocKind::Text`].
    pub fn from_stored(s: &str) -> DocKind {
        match s {
            "markdown" => DocKind::Markdown,
            "html" => DocKind::Html,
            "pdf" => DocKind::Pdf,
            "docx" => DocKind::Docx,
            "pptx" => DocKind::Pptx,
            "odt" => DocKind::Odt,
            "sheet" => DocKind::Sheet,
            "record" => DocKind::Record,
            _ => match s.strip_prefix("code:") {
                Some(l) => DocKind::Code(l.to_string()),
                None => DocKind::Text,
            },
        }
    }
}

impl DocKind {
    /// Whether the text is Markdown-like, so the chunker follows its headings and cuts its
    /// tables and figures into cards of their own (Markdown, and every format read into
    /// Markdown-like text: HTML, PDF, DOCX, PPTX).
    pub fn is_structured(&self) -> bool {
        matches!(
            self,
            DocKind::Markdown
                | DocKind::Html
                | DocKind::Pdf
                | DocKind::Docx
                | DocKind::Pptx
                | DocKind::Odt
                | DocKind::Sheet
        )
    }
}

/// What a card holds: running text, a table (or a piece of one), or an image described by
/// what its source says of it (alt text, caption, figure label, file name).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum CardKind {
    /// Running text.
    #[default]
    Text,
    /// A table, or a run of its rows (each piece carries the header row).
    Table,
    /// An image or figure: its alt text, caption, label and file name.
    Image,
}

impl CardKind {
    /// `text`, `table`, `image`.
    pub fn as_str(self) -> &'static str {
        match self {
            CardKind::Text => "text",
            CardKind::Table => "table",
            CardKind::Image => "image",
        }
    }
}

impl fmt::Display for CardKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for CardKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(CardKind::Text),
            "table" => Ok(CardKind::Table),
            "image" | "figure" => Ok(CardKind::Image),
            _ => Err(format!(
                "unknown card kind {s:?}: expected text, table or image"
            )),
        }
    }
}

/// The unit a [`Place`] counts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PlaceUnit {
    /// A PDF page (1-based, as the reader numbers them).
    Page,
    /// A slide of a deck (1-based).
    Slide,
}

/// Where a chunk lies in a paged source: the first and last page (or slide) it covers, so an
/// answer can cite "report.pdf p. 12".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Place {
    /// Pages or slides.
    pub unit: PlaceUnit,
    /// The first one the chunk covers (1-based).
    pub first: u32,
    /// The last one (equal to `first` unless the chunk spans a break).
    pub last: u32,
}

impl Place {
    /// The stored form: `page:12`, `page:12-13`, `slide:4`.
    pub fn as_stored(&self) -> String {
        let unit = match self.unit {
            PlaceUnit::Page => "page",
            PlaceUnit::Slide => "slide",
        };
        if self.first == self.last {
            format!("{unit}:{}", self.first)
        } else {
            format!("{unit}:{}-{}", self.first, self.last)
        }
    }

    /// Parses [`Place::as_stored`]'s form (`None` for anything else).
    pub fn from_stored(s: &str) -> Option<Place> {
        let (unit, range) = s.split_once(':')?;
        let unit = match unit {
            "page" => PlaceUnit::Page,
            "slide" => PlaceUnit::Slide,
            _ => return None,
        };
        let (first, last) = match range.split_once('-') {
            Some((a, b)) => (a.parse().ok()?, b.parse().ok()?),
            None => {
                let n = range.parse().ok()?;
                (n, n)
            }
        };
        (first <= last).then_some(Place { unit, first, last })
    }
}

impl fmt::Display for Place {
    /// `p. 12`, `pp. 12–13`, `slide 4`, `slides 4–5`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.unit, self.first == self.last) {
            (PlaceUnit::Page, true) => write!(f, "p. {}", self.first),
            (PlaceUnit::Page, false) => write!(f, "pp. {}\u{2013}{}", self.first, self.last),
            (PlaceUnit::Slide, true) => write!(f, "slide {}", self.first),
            (PlaceUnit::Slide, false) => write!(f, "slides {}\u{2013}{}", self.first, self.last),
        }
    }
}

/// Where the pages (or slides) of a paged document begin in its text.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Layout {
    /// Pages or slides.
    pub unit: Option<PlaceUnit>,
    /// `(byte offset, number)` of each page's first byte, in increasing order.
    pub starts: Vec<(usize, u32)>,
}

impl Layout {
    /// The place of the bytes `start..end` (`None` without pages).
    pub fn place(&self, start: usize, end: usize) -> Option<Place> {
        let unit = self.unit?;
        let at = |b: usize| {
            let i = self.starts.partition_point(|&(s, _)| s <= b);
            self.starts.get(i.checked_sub(1)?).map(|&(_, n)| n)
        };
        let first = at(start)?;
        let last = at(end.saturating_sub(1).max(start)).unwrap_or(first);
        Some(Place {
            unit,
            first,
            last: last.max(first),
        })
    }
}

/// A document ready to be chunked and stored.
#[derive(Debug, Clone)]
pub struct Document {
    /// Stable id: the path relative to the ingested root's parent for files, `_id` for BEIR,
    /// `doc_id` for Anthropic's format.
    pub id: String,
    /// Where it came from (a path, or `corpus.jsonl:LINE`).
    pub source: String,
    /// A title when the source has one (BEIR title, markdown's first heading, HTML title).
    pub title: Option<String>,
    /// Detected (or overridden) language.
    pub language: Language,
    /// What kind of text this is.
    pub kind: DocKind,
    /// The whole text (UTF-8; HTML already reduced to text).
    pub text: String,
    /// blake3 hash of the source bytes.
    pub content_hash: String,
    /// Key/value metadata from the source (kept with the document).
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// Chunks fixed by the source (Anthropic's format); `None` lets the chunker decide.
    pub preset_chunks: Option<Vec<ChunkSpan>>,
    /// Where pages or slides begin (PDF, PPTX); empty for other documents.
    pub layout: Layout,
}

/// Where one chunk lies in its document. The text itself is `&doc.text[byte_start..byte_end]`:
/// spans borrow nothing and copy nothing, so a large document is held once.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ChunkSpan {
    /// Position of the chunk in its document, from 0.
    pub ordinal: u32,
    /// Byte offset of the first byte.
    pub byte_start: usize,
    /// Byte offset one past the last byte.
    pub byte_end: usize,
    /// Character (Unicode scalar) offset of the first character.
    pub char_start: usize,
    /// Character offset one past the last character.
    pub char_end: usize,
    /// Markdown headings enclosing the chunk, outermost first (empty for other kinds).
    pub heading_path: Vec<String>,
    /// A chunk id given by the source (Anthropic's `chunk_id`); otherwise derived.
    pub chunk_id: Option<String>,
    /// What the chunk holds.
    #[serde(default)]
    pub kind: CardKind,
    /// The pages or slides it covers, in a paged document.
    #[serde(default)]
    pub place: Option<Place>,
    /// Text the chunk repeats from before its span so it reads on its own: the header row of
    /// a table cut into pieces (the card's original is this, a line break, then the span).
    #[serde(default)]
    pub lead: Option<String>,
}

impl ChunkSpan {
    /// The chunk's id: the source's own, or `DOCUMENT_ID#ORDINAL`.
    pub fn id_in(&self, document_id: &str) -> String {
        self.chunk_id
            .clone()
            .unwrap_or_else(|| format!("{document_id}#{}", self.ordinal))
    }

    /// The chunk's original text: its span of `text`, after its [`ChunkSpan::lead`].
    pub fn original<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        let span = &text[self.byte_start..self.byte_end];
        match &self.lead {
            None => std::borrow::Cow::Borrowed(span),
            Some(lead) => std::borrow::Cow::Owned(format!("{lead}\n{span}")),
        }
    }
}

/// The life of a chunk's context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ContextStatus {
    /// No context yet (the `none` contextualizer, or waiting for an LLM).
    Pending,
    /// Written and not yet checked; it is indexed.
    Generated,
    /// Written and checked against the source; it is indexed.
    Verified,
    /// Written but found wrong; it is *not* indexed (the original alone is).
    Rejected,
    /// Could not be written (errors, budget); the original alone is indexed.
    Failed,
}

impl ContextStatus {
    /// Every status.
    pub const ALL: [ContextStatus; 5] = [
        ContextStatus::Pending,
        ContextStatus::Generated,
        ContextStatus::Verified,
        ContextStatus::Rejected,
        ContextStatus::Failed,
    ];

    /// The stored and displayed form.
    pub fn as_str(self) -> &'static str {
        match self {
            ContextStatus::Pending => "pending",
            ContextStatus::Generated => "generated",
            ContextStatus::Verified => "verified",
            ContextStatus::Rejected => "rejected",
            ContextStatus::Failed => "failed",
        }
    }

    /// Whether a context with this status goes into the indexes.
    pub fn is_indexed(self) -> bool {
        matches!(self, ContextStatus::Generated | ContextStatus::Verified)
    }
}

impl fmt::Display for ContextStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ContextStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        ContextStatus::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| format!("unknown context status {s:?}"))
    }
}

/// Who wrote (or decided) a context: a closed set, so that the rules that depend on it
/// ("a person's decision stands": [`ContextMethod::Manual`]) are checked by the compiler,
/// not by comparing strings. Stored and shown in its lowercase form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ContextMethod {
    /// Rules over the document's structure (path, title, headings, enclosing code).
    Structural,
    /// A language model.
    Llm,
    /// A person (`situate contexts set`): later LLM runs leave it alone.
    Manual,
    /// Read from a contexts file that did not say who wrote it.
    Import,
    /// Put together from parts ([`Provenance::parts`]): a language model's description of
    /// the whole document, the structural context and, optionally, the model's note on the
    /// chunk (`--context document` and `document+llm`).
    Document,
}

impl ContextMethod {
    /// Every method.
    pub const ALL: [ContextMethod; 5] = [
        ContextMethod::Structural,
        ContextMethod::Llm,
        ContextMethod::Manual,
        ContextMethod::Import,
        ContextMethod::Document,
    ];

    /// The stored and displayed form.
    pub fn as_str(self) -> &'static str {
        match self {
            ContextMethod::Structural => "structural",
            ContextMethod::Llm => "llm",
            ContextMethod::Manual => "manual",
            ContextMethod::Import => "import",
            ContextMethod::Document => "document",
        }
    }
}

impl fmt::Display for ContextMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ContextMethod {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        ContextMethod::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown context method {s:?}: expected structural, llm, manual, import or document"
                )
            })
    }
}

/// Where a context came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Provenance {
    /// Who wrote or decided it.
    pub method: ContextMethod,
    /// The model that wrote it, if any.
    pub model: Option<String>,
    /// The prompt (or rule set) version.
    pub prompt_version: Option<String>,
    /// Hash of every input that determines the context (document, chunk, prompt, model).
    pub input_hash: String,
    /// What part of the document the model saw (`whole`, or the window rule's summary);
    /// `None` for rule-based contexts.
    pub strategy: Option<String>,
    /// For a context put together from parts ([`ContextMethod::Document`]): where each part
    /// of the text came from, in order. Empty for a context written in one piece.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<ContextPart>,
}

/// What wrote one part of a composed context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PartKind {
    /// A language model's description of the whole document (one per document, shared by
    /// its chunks).
    Document,
    /// The structural context (title or path, headings, enclosing code items).
    Structural,
    /// A language model's note on this chunk (Anthropic's prompt).
    Chunk,
}

impl PartKind {
    /// The stored and displayed form.
    pub fn as_str(self) -> &'static str {
        match self {
            PartKind::Document => "document",
            PartKind::Structural => "structural",
            PartKind::Chunk => "chunk",
        }
    }
}

/// One part of a composed context: its place in the context's text and who wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ContextPart {
    /// What wrote it.
    pub kind: PartKind,
    /// Its byte range in the context's text.
    pub start: usize,
    /// End of the byte range (exclusive).
    pub end: usize,
    /// The model that wrote it, for LLM parts.
    pub model: Option<String>,
    /// The prompt (or rule set) version.
    pub prompt_version: Option<String>,
    /// Its own key in the context cache, for LLM parts (the chunk note's is the key
    /// `--context llm` uses, so the two modes share notes already paid for).
    pub input_hash: Option<String>,
    /// What part of the document the model saw, for LLM parts.
    pub strategy: Option<String>,
}

impl Provenance {
    /// Whether a person decided this context (later runs leave it alone).
    pub fn is_manual(&self) -> bool {
        self.method == ContextMethod::Manual
    }
}

/// A stored chunk: the source of truth every index is derived from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkCard {
    /// Row key in the store; indexes refer to cards by it.
    pub card: u64,
    /// The document the chunk belongs to.
    pub document_id: String,
    /// The chunk's id (unique in the index).
    pub chunk_id: String,
    /// Position in the document, from 0.
    pub ordinal: u32,
    /// Character range in the document.
    pub char_start: u64,
    /// End of the character range (exclusive).
    pub char_end: u64,
    /// Markdown heading path (outermost first).
    pub heading_path: Vec<String>,
    /// What the card holds (text, table, image).
    pub kind: CardKind,
    /// The pages or slides it covers, in a paged document.
    pub place: Option<Place>,
    /// The chunk's own text, exactly as in the document (a table piece after the first
    /// starts with the table's header row).
    pub original_text: String,
    /// The situating context, if one was written.
    pub generated_context: Option<String>,
    /// The context's status.
    pub context_status: ContextStatus,
    /// Where the context came from.
    pub provenance: Option<Provenance>,
    /// Why a context was rejected or failed (empty otherwise).
    pub context_notes: Vec<String>,
}

impl ChunkCard {
    /// The context that indexes may use: present and of an indexed status.
    pub fn indexable_context(&self) -> Option<&str> {
        if self.context_status.is_indexed() {
            self.generated_context
                .as_deref()
                .filter(|c| !c.trim().is_empty())
        } else {
            None
        }
    }
}

/// A card with its document's title and source: what a hit is built from.
#[derive(Debug, Clone, PartialEq)]
pub struct CardRecord {
    /// The card.
    pub card: ChunkCard,
    /// The document's title.
    pub title: Option<String>,
    /// The document's source.
    pub source: String,
}

/// One leg's view of a hit.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct LegScore {
    /// The leg (`bm25`).
    pub leg: String,
    /// 1-based rank in that leg.
    pub rank: usize,
    /// The leg's score.
    pub score: f32,
    /// The leg's value as the fusion used it, before the leg's weight: `1 / (k + rank)`
    /// under RRF, the score normalised to [0, 1] under min-max, TM2C2 and z-score fusion
    /// (`situate_search::fusion`). Absent outside a fused hybrid search.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normalized: Option<f32>,
}

/// One search result. The context and the original are kept apart; an answer quotes
/// `original_text`, never the context.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Hit {
    /// 1-based rank.
    pub rank: usize,
    /// The final score (larger is better).
    pub score: f32,
    /// The chunk's document.
    pub document_id: String,
    /// The chunk.
    pub chunk_id: String,
    /// The document's title, if any.
    pub title: Option<String>,
    /// The document's source.
    pub source: String,
    /// Character range in the document.
    pub char_start: u64,
    /// End of the character range (exclusive).
    pub char_end: u64,
    /// Markdown heading path.
    pub heading_path: Vec<String>,
    /// What the card holds (text, table, image).
    pub kind: CardKind,
    /// The pages or slides the chunk covers, in a paged document (PDF, PPTX).
    pub place: Option<Place>,
    /// The context that was indexed with the chunk (`None` when it had none).
    pub context: Option<String>,
    /// The context's status.
    pub context_status: ContextStatus,
    /// The chunk's original text.
    pub original_text: String,
    /// Each leg's rank and score.
    pub legs: Vec<LegScore>,
}

#[cfg(test)]
mod place_tests {
    use super::*;

    #[test]
    fn places_round_trip_and_layouts_find_them() {
        for s in ["page:3", "page:3-4", "slide:12"] {
            let p = Place::from_stored(s).expect("parses");
            assert_eq!(p.as_stored(), s);
        }
        assert_eq!(Place::from_stored("page:4-3"), None);
        assert_eq!(Place::from_stored("sheet:1"), None);
        let p = Place::from_stored("page:3-4").expect("parses");
        assert_eq!(p.to_string(), "pp. 3\u{2013}4");
        assert_eq!(
            Place::from_stored("slide:2").map(|p| p.to_string()),
            Some("slide 2".into())
        );
        let layout = Layout {
            unit: Some(PlaceUnit::Page),
            starts: vec![(0, 1), (100, 2), (250, 3)],
        };
        let at = |s, e| layout.place(s, e).map(|p| (p.first, p.last));
        assert_eq!(at(0, 99), Some((1, 1)));
        assert_eq!(at(0, 100), Some((1, 1)), "the end is exclusive");
        assert_eq!(at(90, 120), Some((1, 2)));
        assert_eq!(at(260, 300), Some((3, 3)));
        assert_eq!(Layout::default().place(0, 10), None);
        assert_eq!("figure".parse::<CardKind>(), Ok(CardKind::Image));
        assert!("chart".parse::<CardKind>().is_err());
    }
}
