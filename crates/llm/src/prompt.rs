//! The contextualization prompt and the rule for documents longer than the model's window.
//!
//! A template holds `{{WHOLE_DOCUMENT}}` before `{{CHUNK_CONTENT}}`; everything up to the end
//! of the document is the prefix that providers cache (Anthropic's `cache_control`, a
//! server's prefix cache, the local KV cache), the rest is sent per chunk. The version of a
//! template is part of every context's provenance: Anthropic's prompt is `anthropic-v1`, a
//! user's template is `custom-` and a hash of its text and glossary.

use std::path::Path;

use situate_core::Language;

/// Where the document goes in a template.
pub const DOCUMENT: &str = "{{WHOLE_DOCUMENT}}";
/// Where the chunk goes in a template.
pub const CHUNK: &str = "{{CHUNK_CONTENT}}";

/// Anthropic's prompt from the Contextual Retrieval post, the default.
pub const ANTHROPIC_TEMPLATE: &str = "<document>
{{WHOLE_DOCUMENT}}
</document>
Here is the chunk we want to situate within the whole document
<chunk>
{{CHUNK_CONTENT}}
</chunk>
Please give a short succinct context to situate this chunk within the overall document for the purposes of improving search retrieval of the chunk. Answer only with the succinct context and nothing else.";

/// The version recorded for [`ANTHROPIC_TEMPLATE`].
pub const ANTHROPIC_VERSION: &str = "anthropic-v1";

/// The prompt for small local models: Anthropic's document and chunk, with the instruction
/// said as what to write rather than what it is for. Models of 0.5–1.5B parameters given
/// Anthropic's wording often echo its purpose ("…for the purposes of improving search
/// retrieval…") or describe the task ("This chunk sits within the document…") instead of
/// naming the document's subject.
pub const SMALL_TEMPLATE: &str = "<document>
{{WHOLE_DOCUMENT}}
</document>
Here is a chunk of that document:
<chunk>
{{CHUNK_CONTENT}}
</chunk>
In one or two sentences, say what the document is (its title, program, product or subject) and what this chunk covers within it, using the document's own names. Write in the document's language. Reply with those sentences only.";

/// The version recorded for [`SMALL_TEMPLATE`].
pub const SMALL_VERSION: &str = "small-v1";

/// The note prompt asked of Russian documents when a built-in prompt is chosen (`anthropic`
/// or `small`). Asked in English, Qwen2.5-Coder-0.5B answered Russian sentences in English:
/// 331 of the first 400 rejected notes on XQuAD-R ru were in Latin script, 4 of 492 passed.
/// A small model answers in the language it is asked in (as with [`crate::document::DESCRIBE_PROMPT_RU`]),
/// so the instruction is in Russian and says what to write, not what it is for. Of three
/// wordings tried on 44 sentences of XQuAD-R ru (8 paragraphs), this one passed the checks
/// 34 times; one asking for "the document's subject (its theme and who or what it names)"
/// passed 17 (the 0.5B said the parenthesis back), one asking for "connected prose, no
/// headings or lists" 17 (it copied the sentence or listed names). It keeps
/// the document's framing (`<document>` first), so a Russian document's notes and its
/// description share one prefix. A user's own template is used as written, in every
/// language.
pub const NOTE_TEMPLATE_RU: &str = "<document>
{{WHOLE_DOCUMENT}}
</document>
Вот фрагмент этого документа:
<chunk>
{{CHUNK_CONTENT}}
</chunk>
Напиши по-русски одно короткое предложение, которое объясняет, к чему относится этот фрагмент: назови тему документа и имена или названия из него, о которых идёт речь во фрагменте. Ответь только этим предложением.";

/// The version recorded for [`NOTE_TEMPLATE_RU`].
pub const NOTE_VERSION_RU: &str = "note-ru-v1";

/// A prompt template with its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptTemplate {
    before_document: String,
    between: String,
    after_chunk: String,
    glossary: Option<String>,
    version: String,
    /// The template asked of Russian documents instead ([`NOTE_TEMPLATE_RU`] for the
    /// built-in prompts; none for a user's template).
    russian: Option<Box<PromptTemplate>>,
}

/// A template that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("prompt template {source_name}: {message}")]
pub struct TemplateError {
    /// Where the template came from.
    pub source_name: String,
    /// What is wrong.
    pub message: String,
}

impl PromptTemplate {
    /// Anthropic's prompt.
    pub fn anthropic() -> Self {
        Self::builtin(ANTHROPIC_TEMPLATE, ANTHROPIC_VERSION)
    }

    /// The prompt for small local models ([`SMALL_TEMPLATE`]).
    pub fn small() -> Self {
        Self::builtin(SMALL_TEMPLATE, SMALL_VERSION)
    }

    /// A built-in template, recorded under its own version, with [`NOTE_TEMPLATE_RU`] for
    /// Russian documents.
    fn builtin(text: &str, version: &str) -> Self {
        let fixed = |text: &str, version: &str| {
            Self::parse(text, None, "built-in")
                .map(|mut t| {
                    t.version = version.into();
                    t
                })
                .unwrap_or_else(|e| unreachable!("the built-in template is valid: {e}"))
        };
        let mut t = fixed(text, version);
        t.russian = Some(Box::new(fixed(NOTE_TEMPLATE_RU, NOTE_VERSION_RU)));
        t
    }

    /// The template asked of a document in `language`: the Russian one for a Russian
    /// document when there is one, this one otherwise.
    pub fn for_language(&self, language: Language) -> &PromptTemplate {
        match (language, &self.russian) {
            (Language::Ru, Some(ru)) => ru,
            _ => self,
        }
    }

    /// The built-in prompts by name: text and version.
    const NAMED: [(&'static str, &'static str, &'static str); 2] = [
        ("anthropic", ANTHROPIC_TEMPLATE, ANTHROPIC_VERSION),
        ("small", SMALL_TEMPLATE, SMALL_VERSION),
    ];

    /// A built-in prompt by name: `anthropic` or `small`.
    pub fn named(name: &str) -> Option<Self> {
        Self::NAMED
            .iter()
            .find(|(n, ..)| *n == name)
            .map(|&(_, text, version)| Self::builtin(text, version))
    }

    /// The text of the built-in prompt `name` ([`PromptTemplate::named`]), for a glossary
    /// to be added to it.
    pub fn named_text(name: &str) -> Option<&'static str> {
        Self::NAMED
            .iter()
            .find(|(n, ..)| *n == name)
            .map(|&(_, text, _)| text)
    }

    /// A template from its text, with an optional glossary (terms the model should know,
    /// added before the document so it is cached with it).
    pub fn parse(
        text: &str,
        glossary: Option<&str>,
        source_name: &str,
    ) -> Result<Self, TemplateError> {
        let err = |message: &str| TemplateError {
            source_name: source_name.into(),
            message: message.into(),
        };
        if text.matches(DOCUMENT).count() != 1 || text.matches(CHUNK).count() != 1 {
            return Err(err(
                "it must contain {{WHOLE_DOCUMENT}} and {{CHUNK_CONTENT}} exactly once each",
            ));
        }
        let (before_document, rest) = text.split_once(DOCUMENT).unwrap_or_default();
        let Some((between, after_chunk)) = rest.split_once(CHUNK) else {
            return Err(err(
                "{{WHOLE_DOCUMENT}} must come before {{CHUNK_CONTENT}}, so that the document is a prefix every chunk of it shares (and that providers cache)",
            ));
        };
        let glossary = glossary.map(str::trim).filter(|g| !g.is_empty());
        let version = format!(
            "custom-{}",
            &situate_core::hash_parts(&[text.as_bytes(), glossary.unwrap_or("").as_bytes()])[..12]
        );
        Ok(PromptTemplate {
            before_document: before_document.into(),
            between: between.into(),
            after_chunk: after_chunk.into(),
            glossary: glossary.map(str::to_string),
            version,
            russian: None,
        })
    }

    /// A template file with an optional glossary file.
    pub fn from_files(template: &Path, glossary: Option<&Path>) -> Result<Self, TemplateError> {
        let read = |p: &Path| {
            std::fs::read_to_string(p).map_err(|e| TemplateError {
                source_name: p.display().to_string(),
                message: format!("cannot read it: {e}"),
            })
        };
        let text = read(template)?;
        let glossary = glossary.map(read).transpose()?;
        Self::parse(&text, glossary.as_deref(), &template.display().to_string())
    }

    /// The version recorded in provenance.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The cached part: the glossary, if any, and the text up to the end of `document`.
    pub fn prefix(&self, document: &str) -> String {
        let mut out = String::new();
        if let Some(g) = &self.glossary {
            out.push_str("<glossary>\n");
            out.push_str(g);
            out.push_str("\n</glossary>\n");
        }
        out.push_str(&self.before_document);
        out.push_str(document);
        out
    }

    /// The part sent per chunk.
    pub fn suffix(&self, chunk: &str) -> String {
        format!("{}{chunk}{}", self.between, self.after_chunk)
    }
}

/// What to do with a document longer than the model's window allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LongDocuments {
    /// The document's opening (title, abstract, first lines) and the part of the document
    /// around the chunk, sized to the budget. Windows lie on a grid of half a window, so that
    /// neighbouring chunks share one and its prefix is reused.
    #[default]
    Window,
    /// The document's opening only, as much as fits.
    Head,
    /// Refuse: the chunk's context fails with the reason, nothing is cut.
    Fail,
}

impl LongDocuments {
    /// From a setting (`window`, `head`, `fail`).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "window" => Some(Self::Window),
            "head" => Some(Self::Head),
            "fail" => Some(Self::Fail),
            _ => None,
        }
    }
}

/// The document text a chunk's prompt carries, and how it was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentPart {
    /// The text put in place of `{{WHOLE_DOCUMENT}}`.
    pub text: String,
    /// `whole`, or what was kept (recorded on the card).
    pub strategy: String,
}

/// Marks where text was left out.
const GAP: &str = "\n[…]\n";

/// The document text for the chunk at bytes `chunk` of `document`, at most `budget` tokens by
/// `count`. `Err` with the reason when the rule is [`LongDocuments::Fail`] and it does not fit.
pub fn document_part(
    document: &str,
    chunk: std::ops::Range<usize>,
    budget: usize,
    rule: LongDocuments,
    count: &dyn Fn(&str) -> usize,
) -> Result<DocumentPart, String> {
    let total = count(document);
    if total <= budget {
        return Ok(DocumentPart {
            text: document.to_string(),
            strategy: "whole".into(),
        });
    }
    if rule == LongDocuments::Fail {
        return Err(format!(
            "the document is {total} tokens, over the {budget} the model's window leaves for it"
        ));
    }
    // Sizes in bytes from the document's own bytes per token, shrunk until the text fits.
    let per_token = document.len() as f64 / total.max(1) as f64;
    let mut scale = 0.95;
    loop {
        let bytes = (budget as f64 * per_token * scale) as usize;
        let text = match rule {
            LongDocuments::Head => cut(document, 0, bytes).to_string(),
            _ => window_text(document, chunk.clone(), bytes),
        };
        if count(&text) <= budget || bytes < 64 {
            let kept = count(&text);
            let strategy = match rule {
                LongDocuments::Head => format!("head: {kept} of {total} tokens"),
                _ => format!("window: opening and around the chunk, {kept} of {total} tokens"),
            };
            return Ok(DocumentPart { text, strategy });
        }
        scale *= 0.85;
    }
}

/// `bytes` of the document: its opening (an eighth) and a window around the chunk on a grid
/// of half a window.
fn window_text(document: &str, chunk: std::ops::Range<usize>, bytes: usize) -> String {
    let opening = bytes / 8;
    let width = bytes.saturating_sub(opening + 2 * GAP.len()).max(1);
    let step = (width / 2).max(1);
    let centre = (chunk.start + chunk.end) / 2;
    // The grid window whose middle is nearest the chunk's middle.
    let k = centre.saturating_sub(width / 2).div_ceil(step);
    let candidates = [k.saturating_sub(1), k];
    let start = candidates
        .iter()
        .map(|k| k * step)
        .min_by_key(|s| (s + width / 2).abs_diff(centre))
        .unwrap_or(0)
        .min(document.len().saturating_sub(width));
    let mut out = String::new();
    if start > opening {
        out.push_str(cut(document, 0, opening));
        out.push_str(GAP);
        out.push_str(cut(document, start, width));
    } else {
        // The window starts within the opening: one piece from the start.
        out.push_str(cut(document, 0, start + width));
    }
    if start + width < document.len() {
        out.push_str(GAP);
    }
    out
}

/// At most `len` bytes of `s` from byte `start`, both ends moved to character boundaries.
fn cut(s: &str, start: usize, len: usize) -> &str {
    let mut a = start.min(s.len());
    while !s.is_char_boundary(a) {
        a -= 1;
    }
    let mut b = (a + len).min(s.len());
    while !s.is_char_boundary(b) {
        b -= 1;
    }
    &s[a..b]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> usize {
        s.split_whitespace().count()
    }

    #[test]
    fn built_in_prompts_ask_russian_documents_in_russian_and_a_users_template_never() {
        for name in ["anthropic", "small"] {
            let t = PromptTemplate::named(name).expect("built in");
            let ru = t.for_language(Language::Ru);
            assert_eq!(ru.version(), NOTE_VERSION_RU);
            // The same document framing: a description shares the notes' prefix.
            assert_eq!(ru.prefix("DOC"), t.prefix("DOC"));
            assert!(ru.suffix("ФРАГМЕНТ").contains("ФРАГМЕНТ"));
            assert!(ru.suffix("x").contains("по-русски"));
            for other in [Language::En, Language::Zh, Language::Other] {
                assert_eq!(t.for_language(other).version(), t.version());
            }
        }
        let custom = PromptTemplate::parse("<d>{{WHOLE_DOCUMENT}}</d>{{CHUNK_CONTENT}}", None, "t")
            .expect("valid");
        assert_eq!(custom.for_language(Language::Ru), &custom);
    }

    #[test]
    fn anthropics_prompt_splits_after_the_document() {
        let t = PromptTemplate::anthropic();
        assert_eq!(t.version(), ANTHROPIC_VERSION);
        let small = PromptTemplate::named("small").expect("built in");
        assert_eq!(small.version(), SMALL_VERSION);
        assert!(small.prefix("DOC").ends_with("DOC"));
        assert!(small.suffix("CHUNK").contains("CHUNK"));
        assert!(PromptTemplate::named("other").is_none());
        let full = format!("{}{}", t.prefix("DOC"), t.suffix("CHUNK"));
        assert_eq!(
            full,
            ANTHROPIC_TEMPLATE
                .replace(DOCUMENT, "DOC")
                .replace(CHUNK, "CHUNK")
        );
        assert!(t.prefix("DOC").ends_with("<document>\nDOC"));
    }

    #[test]
    fn custom_templates_are_checked_and_versioned_with_their_glossary() {
        let a = PromptTemplate::parse("D: {{WHOLE_DOCUMENT}}\nC: {{CHUNK_CONTENT}}", None, "t")
            .expect("valid");
        let b = PromptTemplate::parse(
            "D: {{WHOLE_DOCUMENT}}\nC: {{CHUNK_CONTENT}}",
            Some("ARR: annual recurring revenue"),
            "t",
        )
        .expect("valid");
        assert!(a.version().starts_with("custom-"));
        assert_ne!(a.version(), b.version());
        assert!(
            b.prefix("x")
                .starts_with("<glossary>\nARR: annual recurring revenue\n</glossary>\nD: x")
        );
        for bad in [
            "no placeholders",
            "{{CHUNK_CONTENT}} then {{WHOLE_DOCUMENT}}",
            "{{WHOLE_DOCUMENT}} {{WHOLE_DOCUMENT}} {{CHUNK_CONTENT}}",
        ] {
            let e = PromptTemplate::parse(bad, None, "t").expect_err(bad);
            assert!(e.to_string().contains("WHOLE_DOCUMENT"), "{e}");
        }
    }

    #[test]
    fn short_documents_go_whole_and_long_ones_are_windowed_around_the_chunk() {
        let doc: String = (0..2000).map(|i| format!("w{i} ")).collect();
        let part = document_part(&doc, 0..10, 5000, LongDocuments::Window, &words).expect("fits");
        assert_eq!(part.strategy, "whole");
        assert_eq!(part.text, doc);

        let at = doc.find("w1500 ").expect("word");
        let part =
            document_part(&doc, at..at + 30, 400, LongDocuments::Window, &words).expect("window");
        assert!(words(&part.text) <= 400, "{}", words(&part.text));
        assert!(part.text.starts_with("w0 w1 "), "keeps the opening");
        assert!(
            part.text.contains("w1500 w1501"),
            "keeps the chunk's surroundings"
        );
        assert!(part.text.contains("[…]"));
        assert!(part.strategy.starts_with("window:"), "{}", part.strategy);

        let head =
            document_part(&doc, at..at + 30, 400, LongDocuments::Head, &words).expect("head");
        assert!(head.text.starts_with("w0 ") && !head.text.contains("w1500 "));
        let e =
            document_part(&doc, at..at + 30, 400, LongDocuments::Fail, &words).expect_err("fail");
        assert!(e.contains("2000 tokens"), "{e}");
    }

    #[test]
    fn neighbouring_chunks_share_a_window() {
        let doc: String = (0..4000).map(|i| format!("w{i} ")).collect();
        let text_for = |word: &str| {
            let at = doc.find(word).expect("word");
            document_part(&doc, at..at + 20, 600, LongDocuments::Window, &words)
                .expect("window")
                .text
        };
        let windows: std::collections::HashSet<String> =
            (2000..2040).map(|i| text_for(&format!("w{i} "))).collect();
        assert!(
            windows.len() <= 2,
            "{} different windows for 40 neighbours",
            windows.len()
        );
        // Near the end the window is the document's end.
        assert!(text_for("w3990 ").ends_with("w3999 "));
        // Multi-byte text is cut on character boundaries.
        let ru: String = (0..3000).map(|i| format!("слово{i} ")).collect();
        let part = document_part(&ru, 100..120, 300, LongDocuments::Window, &words).expect("ok");
        assert!(words(&part.text) <= 300);
    }
}
