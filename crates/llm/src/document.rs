//! Document-level contexts (`--context document` and `document+llm`): the model writes one
//! short description per document (what it is, its subject and names, its version or date,
//! in the document's language), and each chunk's context is that description followed by
//! the chunk's structural context (heading path, enclosing code items) and, in
//! `document+llm`, by the model's note on the chunk (Anthropic's prompt).
//!
//! `document` costs one LLM reply per document instead of one per chunk. In `document+llm`
//! the description is one more reply after the document prefix the chunk notes read, so it
//! adds one prompt and one reply per document. Every piece is kept in the context cache
//! under its own key as soon as it is written: the description under
//! [`description_key`], each note under the key `--context llm` uses (the two modes share
//! notes already paid for). The composed contexts are not cached: they are put together
//! again from the pieces on every run (no LLM call), so that the checks of the version
//! running apply to every piece. The card records where each part of the text came from
//! ([`situate_core::ContextPart`]).

use crate::LlmContextualizer;
use crate::contextualizer::{Describe, Piece};
use situate_contextualize::{STRUCTURAL_VERSION, Structural};
use situate_core::{
    ChunkContext, ChunkView, ContextError, ContextMethod, ContextPart, ContextSink, ContextStatus,
    Contextualizer, DocumentContexts, DocumentView, Language, PartKind, Provenance, TokenUsage,
};
use std::sync::Mutex;

/// The question asked after the document: what to write about it. Said as what to write,
/// not what it is for (small models echo a stated purpose back).
pub const DESCRIBE_PROMPT: &str = "Describe the document above in one or two sentences: what kind of document it is, its subject, the names it is about (people, organisations, places, products, programs or modules) and its version or date if it gives one. Write in the document's language. Reply with the description only.";

/// The most tokens of a document the description reads in `--context document` (its
/// opening): a description needs what a document is, which shows early, and a long file
/// then costs a bounded prompt. With chunk notes the description reads what the notes read.
pub const DESCRIBE_DOCUMENT_TOKENS: usize = 4096;

/// The version recorded for [`DESCRIBE_PROMPT`].
pub const DESCRIBE_VERSION: &str = "describe-v1";

/// [`DESCRIBE_PROMPT`] said in Russian, asked of Russian documents. Asked in English "to
/// write in the document's language", Qwen2.5-Coder-0.5B described Russian documents in
/// English (74 of the first 75 paragraphs of XQuAD-R ru), which the language check rejects:
/// a small model answers in the language it is asked in. It asks for prose: asked for "its
/// subject, names, version or date", the 0.5B filled in `Тема: … Версия: 2023-04-15` with an
/// invented date.
pub const DESCRIBE_PROMPT_RU: &str = "Напиши одно или два предложения о документе выше: что это за текст, о чём он и какие люди, организации, места, продукты или программы в нём названы. Пиши по-русски связным текстом, без заголовков и списков, и только то, что есть в тексте. Ответь только описанием.";

/// The version recorded for [`DESCRIBE_PROMPT_RU`].
pub const DESCRIBE_VERSION_RU: &str = "describe-ru-v1";

/// The description prompt asked of a document in `language`, and its version: Russian
/// documents are asked in Russian ([`DESCRIBE_PROMPT_RU`]); every other language is asked
/// in English ([`DESCRIBE_PROMPT`], which says to write in the document's language).
pub fn describe_prompt(language: Language) -> (&'static str, &'static str) {
    match language {
        Language::Ru => (DESCRIBE_PROMPT_RU, DESCRIBE_VERSION_RU),
        Language::En | Language::Zh | Language::Other => (DESCRIBE_PROMPT, DESCRIBE_VERSION),
    }
}

/// What follows a document in `language` in the description prompt.
pub(crate) fn describe_suffix(language: Language) -> String {
    format!("\n</document>\n{}", describe_prompt(language).0)
}

/// The context-cache key of `doc`'s description by `llm` (its model, prompt and window
/// settings, and the document's content).
pub fn description_key(llm: &LlmContextualizer, doc: &DocumentView<'_>) -> String {
    situate_core::hash_parts(&[
        b"describe",
        llm.fingerprint().as_bytes(),
        describe_prompt(doc.language).1.as_bytes(),
        doc.content_hash.as_bytes(),
    ])
}

/// Writes document-level contexts with an LLM (see the module's documentation).
pub struct DocumentContextualizer {
    llm: LlmContextualizer,
    notes: bool,
}

impl DocumentContextualizer {
    /// The description and the structural context (`document`), and with `notes` the
    /// chunk note too (`document+llm`).
    pub fn new(llm: LlmContextualizer, notes: bool) -> Self {
        DocumentContextualizer { llm, notes }
    }

    /// The LLM contextualizer that writes the description and notes.
    pub fn llm(&self) -> &LlmContextualizer {
        &self.llm
    }

    fn prompt_version(&self, language: Language) -> String {
        let describe = describe_prompt(language).1;
        if self.notes {
            format!("{describe}+{}", self.llm.template_for(language).version())
        } else {
            describe.to_string()
        }
    }

    /// Composes the context of every chunk of `chunks` whose pieces are all known and that
    /// has none yet.
    fn compose_ready(
        &self,
        p: &mut Pieces,
        doc: &DocumentView<'_>,
        chunks: &[ChunkView<'_>],
        structural: &[Option<String>],
    ) {
        let Some(d) = p.description.as_ref() else {
            return;
        };
        let model = self.llm.llm().id();
        let prompt_version = self.prompt_version(doc.language);
        for (i, chunk) in chunks.iter().enumerate() {
            if p.out[i].is_some() {
                continue;
            }
            let note = match (self.notes, &p.notes[i]) {
                (false, _) => None,
                (true, Some(n)) => Some(n),
                (true, None) => continue,
            };
            let prov = Provenance {
                method: ContextMethod::Document,
                model: Some(model.to_string()),
                prompt_version: Some(prompt_version.clone()),
                input_hash: self.input_hash(doc, chunk),
                strategy: d.provenance.as_ref().and_then(|p| p.strategy.clone()),
                parts: vec![],
            };
            p.out[i] = Some(compose(d, structural[i].as_deref(), note, prov));
        }
    }

    /// What the context cache already holds of `doc`'s pieces (rechecked against the
    /// document), and the keys its description and each chunk's note are kept under.
    fn recall(
        &self,
        doc: &DocumentView<'_>,
        chunks: &[ChunkView<'_>],
        sink: &dyn ContextSink,
    ) -> Recalled {
        let dkey = description_key(&self.llm, doc);
        let description = sink.recall(&dkey).map(|c| {
            let known = crate::verify::checked_document(doc.source, doc.kind, doc.text);
            crate::verify::recheck_description(c, &known)
        });
        let note_keys: Vec<String> = if self.notes {
            chunks.iter().map(|c| self.llm.input_hash(doc, c)).collect()
        } else {
            Vec::new()
        };
        let notes: Vec<Option<ChunkContext>> = chunks
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let key = note_keys.get(i)?;
                sink.recall(key).map(|n| self.llm.recheck(doc, c, n))
            })
            .collect();
        Recalled {
            dkey,
            description,
            note_keys,
            notes,
        }
    }
}

/// What is known so far of one document's pieces.
struct Pieces {
    description: Option<ChunkContext>,
    notes: Vec<Option<ChunkContext>>,
    out: Vec<Option<ChunkContext>>,
}

/// What the context cache held of a document's pieces, and their keys.
struct Recalled {
    dkey: String,
    description: Option<ChunkContext>,
    note_keys: Vec<String>,
    notes: Vec<Option<ChunkContext>>,
}

impl Pieces {
    /// Every chunk's context; a chunk left without one failed (no description came).
    fn finish(self) -> Vec<ChunkContext> {
        self.out
            .into_iter()
            .map(|c| {
                c.unwrap_or_else(|| ChunkContext {
                    text: None,
                    status: ContextStatus::Failed,
                    provenance: None,
                    notes: vec!["the model gave no description of the document".into()],
                })
            })
            .collect()
    }
}

#[async_trait::async_trait]
impl Contextualizer for DocumentContextualizer {
    fn method(&self) -> &str {
        if self.notes {
            "document+llm"
        } else {
            "document"
        }
    }

    fn fingerprint(&self) -> String {
        format!(
            "{}:{DESCRIBE_VERSION},{DESCRIBE_VERSION_RU}:{STRUCTURAL_VERSION}:{}",
            self.method(),
            self.llm.fingerprint()
        )
    }

    fn remembers(&self) -> bool {
        true
    }

    fn documents_in_flight(&self) -> usize {
        self.llm.documents_in_flight()
    }

    async fn contextualize(
        &self,
        doc: DocumentView<'_>,
        chunks: &[ChunkView<'_>],
        sink: &dyn ContextSink,
    ) -> Result<DocumentContexts, ContextError> {
        let structural: Vec<Option<String>> = Structural
            .contextualize(doc, chunks, &situate_core::NoSink)
            .await?
            .contexts
            .into_iter()
            .map(|c| c.text)
            .collect();
        let Recalled {
            dkey,
            description,
            note_keys,
            notes,
        } = self.recall(&doc, chunks, sink);
        let missing: Vec<usize> = (0..chunks.len())
            .filter(|&i| self.notes && notes[i].is_none())
            .collect();
        let describe = description.is_none();
        let state = Mutex::new(Pieces {
            description,
            notes,
            out: vec![None; chunks.len()],
        });
        // Every chunk whose pieces are all known gets its composed context, once.
        let emit = |p: &mut Pieces| self.compose_ready(p, &doc, chunks, &structural);
        if let Ok(mut p) = state.lock() {
            emit(&mut p);
        }
        let mut usage = TokenUsage::default();
        if describe || !missing.is_empty() {
            let asked: Vec<ChunkView<'_>> = missing.iter().map(|&i| chunks[i]).collect();
            let on_done = |piece: Piece, c: &ChunkContext, u: &TokenUsage| {
                let Ok(mut p) = state.lock() else {
                    return;
                };
                match piece {
                    Piece::Description => {
                        sink.keep(&dkey, c, u);
                        p.description = Some(c.clone());
                    }
                    Piece::Note(k) => {
                        let Some(&i) = missing.get(k) else {
                            return;
                        };
                        sink.keep(&note_keys[i], c, u);
                        p.notes[i] = Some(c.clone());
                    }
                }
                emit(&mut p);
            };
            let wanted = match (describe, self.notes) {
                (false, _) => Describe::No,
                (true, true) => Describe::WithNotes,
                (true, false) => Describe::Alone {
                    document_tokens: DESCRIBE_DOCUMENT_TOKENS,
                },
            };
            let written = self.llm.write(doc, &asked, wanted, &on_done).await;
            usage = written.usage;
            // Pieces not handed over as they were written (an estimate, a budget reached)
            // come back here.
            if let Ok(mut p) = state.lock() {
                if p.description.is_none() {
                    p.description = written.description;
                }
                for (k, n) in written.notes.into_iter().enumerate() {
                    if let Some(&i) = missing.get(k)
                        && p.notes[i].is_none()
                    {
                        p.notes[i] = Some(n);
                    }
                }
                emit(&mut p);
            }
        }
        let p = state.into_inner().unwrap_or_else(|e| e.into_inner());
        let contexts = p.finish();
        Ok(DocumentContexts {
            contexts,
            usage,
            document_tokens: self.llm.llm().count_tokens(doc.text) as u64,
        })
    }
}

/// One chunk's context from the document's description, its structural context and its
/// note (when asked for), with `provenance` completed by the parts:
/// - a piece not written yet (budget, estimate) leaves the chunk `pending`, and a piece
///   that failed leaves it `failed` (both retried by `situate contextualize`);
/// - otherwise the verified LLM pieces and the structural context are joined, in that
///   order (description, structural, note); the context is `verified` when an LLM piece
///   is in it, `generated` when only the structural context is, and `rejected` (with the
///   rejected description as its text, for review) when nothing is;
/// - rejected pieces are named in the notes with their reasons.
pub fn compose(
    description: &ChunkContext,
    structural: Option<&str>,
    note: Option<&ChunkContext>,
    mut provenance: Provenance,
) -> ChunkContext {
    let pieces = [
        ("the document description", Some(description)),
        ("the chunk note", note),
    ];
    let mut notes = Vec::new();
    for (what, c) in pieces.iter().filter_map(|(w, c)| c.map(|c| (w, c))) {
        match c.status {
            ContextStatus::Pending | ContextStatus::Failed => {
                let status = c.status;
                let why = c.notes.join("; ");
                return ChunkContext {
                    text: None,
                    status,
                    provenance: None,
                    notes: if why.is_empty() {
                        vec![]
                    } else {
                        vec![format!("{what}: {why}")]
                    },
                };
            }
            ContextStatus::Rejected => {
                notes.push(format!("{what} was rejected: {}", c.notes.join("; ")))
            }
            ContextStatus::Verified | ContextStatus::Generated => {}
        }
    }
    let usable = |c: &ChunkContext| {
        c.status.is_indexed() && c.text.as_deref().is_some_and(|t| !t.trim().is_empty())
    };
    let mut text = String::new();
    let mut parts = Vec::new();
    let mut add = |kind: PartKind, piece: &str, from: Option<&ChunkContext>| {
        if !text.is_empty() {
            text.push(' ');
        }
        let start = text.len();
        text.push_str(piece.trim());
        let p = from.and_then(|c| c.provenance.as_ref());
        parts.push(ContextPart {
            kind,
            start,
            end: text.len(),
            model: p.and_then(|p| p.model.clone()),
            prompt_version: match kind {
                PartKind::Structural => Some(STRUCTURAL_VERSION.into()),
                _ => p.and_then(|p| p.prompt_version.clone()),
            },
            input_hash: p.map(|p| p.input_hash.clone()),
            strategy: p.and_then(|p| p.strategy.clone()),
        });
    };
    let mut llm_parts = 0;
    if usable(description) {
        add(
            PartKind::Document,
            description.text.as_deref().unwrap_or(""),
            Some(description),
        );
        llm_parts += 1;
    }
    if let Some(s) = structural.filter(|s| !s.trim().is_empty()) {
        add(PartKind::Structural, s, None);
    }
    if let Some(n) = note.filter(|n| usable(n)) {
        add(PartKind::Chunk, n.text.as_deref().unwrap_or(""), Some(n));
        llm_parts += 1;
    }
    let status = if llm_parts > 0 {
        ContextStatus::Verified
    } else if !parts.is_empty() {
        ContextStatus::Generated
    } else {
        ContextStatus::Rejected
    };
    if parts.is_empty() {
        // Nothing to index: the rejected description is kept for review.
        text = description.text.clone().unwrap_or_default();
    }
    provenance.parts = parts;
    ChunkContext {
        text: Some(text).filter(|t| !t.is_empty()),
        status,
        provenance: Some(provenance),
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Finish, Generation, Llm, LlmError, OnReply, PrefixCaching, SharedPrompt};
    use situate_core::{ChunkSpan, DocKind};
    use std::collections::HashMap;

    const DOC: &str = "# Acme Corp quarterly report, Q2 2023\n\n## Revenue\n\nRevenue grew by 3% to $314 million, led by cloud storage.\n\n## Costs\n\nCosts fell by 2% after the Denver plant closed.";

    /// Answers the description prompt with `description` and a chunk prompt with a note
    /// naming the chunk's first heading word; records every call's prefix and suffixes.
    struct Scripted {
        description: String,
        calls: Calls,
    }

    /// Every call's prefix and suffixes.
    type Calls = std::sync::Arc<Mutex<Vec<(String, Vec<String>)>>>;

    #[async_trait::async_trait]
    impl Llm for Scripted {
        fn id(&self) -> &str {
            "test:scripted"
        }
        fn window(&self) -> usize {
            100_000
        }
        fn count_tokens(&self, text: &str) -> usize {
            text.split_whitespace().count()
        }
        fn prefix_caching(&self) -> PrefixCaching {
            PrefixCaching::Local
        }
        async fn generate_shared(
            &self,
            prompt: SharedPrompt<'_>,
            on_reply: OnReply<'_>,
        ) -> Vec<Result<Generation, LlmError>> {
            self.calls
                .lock()
                .expect("lock")
                .push((prompt.prefix.to_string(), prompt.suffixes.to_vec()));
            let mut out = Vec::new();
            for (i, s) in prompt.suffixes.iter().enumerate() {
                let text = if s.contains(DESCRIBE_PROMPT) || s.contains(DESCRIBE_PROMPT_RU) {
                    self.description.clone()
                } else if s.contains("Revenue grew") {
                    "Acme Corp's revenue in Q2 2023, driven by cloud storage.".into()
                } else if s.contains("Costs fell") {
                    "Acme Corp's costs in Q2 2023 after the Denver plant closed.".into()
                } else {
                    "The title of Acme Corp's quarterly report for Q2 2023.".into()
                };
                let r = Ok(Generation {
                    text,
                    usage: TokenUsage {
                        input_tokens: 10,
                        output_tokens: 12,
                        ..Default::default()
                    },
                    finish: Finish::Stop,
                });
                on_reply(i, &r);
                out.push(r);
            }
            out
        }
    }

    /// A context cache in memory, as the engine's sink keeps it.
    #[derive(Default)]
    struct Memory {
        kept: Mutex<HashMap<String, ChunkContext>>,
        finished: Mutex<Vec<(usize, ChunkContext)>>,
    }

    impl ContextSink for Memory {
        fn finished(&self, chunk: usize, context: &ChunkContext, _: &TokenUsage) {
            self.finished
                .lock()
                .expect("lock")
                .push((chunk, context.clone()));
        }
        fn recall(&self, key: &str) -> Option<ChunkContext> {
            self.kept.lock().expect("lock").get(key).cloned()
        }
        fn keep(&self, key: &str, context: &ChunkContext, _: &TokenUsage) {
            self.kept
                .lock()
                .expect("lock")
                .insert(key.into(), context.clone());
        }
    }

    fn spans() -> Vec<ChunkSpan> {
        let starts = [
            0,
            DOC.find("## Revenue").expect("r"),
            DOC.find("## Costs").expect("c"),
        ];
        let headings = [
            vec![],
            vec!["Revenue".to_string()],
            vec!["Costs".to_string()],
        ];
        (0..3)
            .map(|i| {
                let end = starts.get(i + 1).copied().unwrap_or(DOC.len());
                ChunkSpan {
                    ordinal: i as u32,
                    byte_start: starts[i],
                    byte_end: end,
                    char_start: starts[i],
                    char_end: end,
                    heading_path: headings[i].clone(),
                    chunk_id: None,
                    ..Default::default()
                }
            })
            .collect()
    }

    fn view() -> DocumentView<'static> {
        DocumentView {
            id: "report.md",
            source: "report.md",
            title: None,
            language: Language::En,
            kind: &DocKind::Markdown,
            text: DOC,
            content_hash: "h1",
        }
    }

    fn contextualizer(description: &str, notes: bool) -> (DocumentContextualizer, Calls) {
        let calls = Calls::default();
        let llm = Scripted {
            description: description.into(),
            calls: calls.clone(),
        };
        let c = DocumentContextualizer::new(LlmContextualizer::new(Box::new(llm)), notes);
        (c, calls)
    }

    fn log(calls: &Calls) -> Vec<(String, Vec<String>)> {
        calls.lock().expect("lock").clone()
    }

    fn part_texts(c: &ChunkContext) -> Vec<(PartKind, String)> {
        let text = c.text.as_deref().expect("text");
        c.provenance
            .as_ref()
            .expect("provenance")
            .parts
            .iter()
            .map(|p| (p.kind, text[p.start..p.end].to_string()))
            .collect()
    }

    const DESCRIPTION: &str =
        "The quarterly report of Acme Corp for Q2 2023: revenue, cloud storage and costs.";

    #[tokio::test]
    async fn one_description_per_document_is_joined_with_each_chunks_structure() {
        let (c, calls) = contextualizer(DESCRIPTION, false);
        let spans = spans();
        let chunks = ChunkView::all(DOC, &spans);
        let sink = Memory::default();
        let got = c
            .contextualize(view(), &chunks, &sink)
            .await
            .expect("contexts");
        let calls = log(&calls);
        assert_eq!(calls.len(), 1, "one call for the document");
        assert_eq!(calls[0].1.len(), 1, "one reply: the description");
        assert!(
            calls[0].0.ends_with(DOC),
            "the prompt carries the whole document"
        );
        assert_eq!(got.contexts.len(), 3);
        for (i, ctx) in got.contexts.iter().enumerate() {
            assert_eq!(ctx.status, ContextStatus::Verified, "{ctx:?}");
            let p = ctx.provenance.as_ref().expect("provenance");
            assert_eq!(p.method, ContextMethod::Document);
            assert_eq!(p.prompt_version.as_deref(), Some(DESCRIBE_VERSION));
            assert_eq!(p.input_hash, c.input_hash(&view(), &chunks[i]));
            let parts = part_texts(ctx);
            assert_eq!(parts[0], (PartKind::Document, DESCRIPTION.to_string()));
            assert_eq!(
                p.parts[0].input_hash.as_deref(),
                Some(description_key(c.llm(), &view()).as_str())
            );
            let structural = Structural::context_for(&view(), &chunks[i]);
            match structural {
                Some(s) => assert_eq!(parts[1], (PartKind::Structural, s)),
                None => assert_eq!(parts.len(), 1),
            }
        }
        assert_eq!(
            part_texts(&got.contexts[1])[1].1,
            "From report.md, section Revenue."
        );
        // The description is kept on its own; composed contexts are not cached (they are
        // put together again from the pieces, under this version's checks).
        assert!(sink.finished.lock().expect("lock").is_empty());
        let kept = sink.kept.lock().expect("lock");
        assert_eq!(kept.len(), 1);
        assert_eq!(
            kept[&description_key(c.llm(), &view())].text.as_deref(),
            Some(DESCRIPTION)
        );
        assert_eq!(got.usage.output_tokens, 12);
    }

    /// A Russian report of one chunk.
    const RU: &str = "# Отчёт Acme за второй квартал\n\nВыручка выросла на 3%.\n";

    /// `text` as one chunk.
    fn whole(text: &str) -> Vec<ChunkSpan> {
        vec![ChunkSpan {
            ordinal: 0,
            byte_start: 0,
            byte_end: text.len(),
            char_start: 0,
            char_end: text.chars().count(),
            heading_path: vec![],
            chunk_id: None,
            ..Default::default()
        }]
    }

    #[tokio::test]
    async fn a_russian_document_is_asked_in_russian_under_its_own_version() {
        let (c, calls) = contextualizer("Отчёт Acme о выручке за второй квартал.", false);
        let spans = whole(RU);
        let chunks = ChunkView::all(RU, &spans);
        let ru = DocumentView {
            language: Language::Ru,
            text: RU,
            ..view()
        };
        let got = c
            .contextualize(ru, &chunks, &Memory::default())
            .await
            .expect("contexts");
        let asked = log(&calls);
        assert!(asked[0].1[0].ends_with(DESCRIBE_PROMPT_RU), "{asked:?}");
        assert!(!asked[0].1[0].contains(DESCRIBE_PROMPT));
        let ctx = &got.contexts[0];
        assert_eq!(ctx.status, ContextStatus::Verified, "{ctx:?}");
        let p = ctx.provenance.as_ref().expect("provenance");
        assert_eq!(p.prompt_version.as_deref(), Some(DESCRIBE_VERSION_RU));
        assert_eq!(
            p.parts[0].prompt_version.as_deref(),
            Some(DESCRIBE_VERSION_RU)
        );
        // The same content in English is another description (another prompt).
        let en = DocumentView { text: RU, ..view() };
        assert_ne!(description_key(c.llm(), &ru), description_key(c.llm(), &en));
        assert_eq!(describe_prompt(Language::Zh).1, DESCRIBE_VERSION);
    }

    #[tokio::test]
    async fn a_russian_documents_notes_are_asked_in_russian_under_their_own_version() {
        let (c, calls) = contextualizer("Отчёт Acme о выручке за второй квартал.", true);
        let spans = whole(RU);
        let chunks = ChunkView::all(RU, &spans);
        let ru = DocumentView {
            language: Language::Ru,
            text: RU,
            ..view()
        };
        let got = c
            .contextualize(ru, &chunks, &Memory::default())
            .await
            .expect("contexts");
        // One prefix for the description and the note, the note asked in Russian.
        let asked = log(&calls);
        assert_eq!(asked.len(), 1, "{asked:?}");
        let (prefix, suffixes) = &asked[0];
        assert_eq!(prefix, &format!("<document>\n{RU}"));
        assert!(suffixes[0].ends_with(DESCRIBE_PROMPT_RU), "{suffixes:?}");
        let note = &suffixes[1];
        assert!(note.contains("Вот фрагмент этого документа"), "{note}");
        assert!(note.ends_with("Ответь только этим предложением."), "{note}");
        assert!(!note.contains("Please give"), "{note}");
        let p = got.contexts[0].provenance.as_ref().expect("provenance");
        assert_eq!(
            p.prompt_version.as_deref(),
            Some(format!("{DESCRIBE_VERSION_RU}+{}", crate::prompt::NOTE_VERSION_RU).as_str())
        );
        // The note is keyed by the Russian prompt; an English document keeps the key every
        // earlier version gave it (the contextualizer's fingerprint), so no paid note is lost.
        let en = DocumentView { text: RU, ..view() };
        let llm = c.llm();
        assert_ne!(
            llm.input_hash(&ru, &chunks[0]),
            llm.input_hash(&en, &chunks[0])
        );
        let old_key = situate_core::hash_parts(&[
            llm.fingerprint().as_bytes(),
            en.content_hash.as_bytes(),
            &0u64.to_le_bytes(),
            RU.as_bytes(),
        ]);
        assert_eq!(llm.input_hash(&en, &chunks[0]), old_key);
        assert!(
            llm.fingerprint().contains(crate::prompt::ANTHROPIC_VERSION),
            "{}",
            llm.fingerprint()
        );
    }

    #[tokio::test]
    async fn with_notes_the_description_shares_the_prefix_and_pieces_are_paid_once() {
        let (c, calls) = contextualizer(DESCRIPTION, true);
        let spans = spans();
        let chunks = ChunkView::all(DOC, &spans);
        let sink = Memory::default();
        let first = c
            .contextualize(view(), &chunks, &sink)
            .await
            .expect("contexts");
        let asked = log(&calls);
        assert_eq!(
            asked.len(),
            1,
            "one prefix for the description and the notes"
        );
        assert_eq!(asked[0].1.len(), 4);
        assert!(
            asked[0].1[0].contains(DESCRIBE_PROMPT),
            "the description first"
        );
        let parts = part_texts(&first.contexts[1]);
        assert_eq!(
            parts.iter().map(|p| p.0).collect::<Vec<_>>(),
            [PartKind::Document, PartKind::Structural, PartKind::Chunk]
        );
        assert_eq!(
            parts[2].1,
            "Acme Corp's revenue in Q2 2023, driven by cloud storage."
        );
        // The notes are kept under the keys `--context llm` uses.
        for chunk in &chunks {
            let key = c.llm().input_hash(&view(), chunk);
            assert!(sink.recall(&key).is_some(), "note kept under the llm key");
        }
        // Again with the same cache: no LLM call, the same contexts.
        let again = c
            .contextualize(view(), &chunks, &sink)
            .await
            .expect("contexts");
        assert_eq!(log(&calls).len(), 1, "nothing asked twice");
        assert_eq!(again.contexts, first.contexts);
        assert_eq!(again.usage, TokenUsage::default());
        // Only the chunk whose note is missing is asked for, with no new description.
        let key = c.llm().input_hash(&view(), &chunks[2]);
        sink.kept.lock().expect("lock").remove(&key);
        let third = c
            .contextualize(view(), &chunks, &sink)
            .await
            .expect("contexts");
        let asked = log(&calls);
        assert_eq!(asked.len(), 2);
        assert_eq!(asked[1].1.len(), 1);
        assert!(asked[1].1[0].contains("Costs fell"));
        assert_eq!(third.contexts, first.contexts);
    }

    #[tokio::test]
    async fn alone_a_description_reads_the_opening_of_a_long_document() {
        let long: String = (0..6000).map(|i| format!("w{i} ")).collect();
        let doc = DocumentView {
            kind: &DocKind::Text,
            text: &long,
            ..view()
        };
        let spans = [ChunkSpan {
            ordinal: 0,
            byte_start: 0,
            byte_end: 20,
            char_start: 0,
            char_end: 20,
            heading_path: vec![],
            chunk_id: None,
            ..Default::default()
        }];
        let chunks = ChunkView::all(&long, &spans);
        for (notes, whole) in [(false, false), (true, true)] {
            let (c, calls) = contextualizer(DESCRIPTION, notes);
            c.contextualize(doc, &chunks, &Memory::default())
                .await
                .expect("contexts");
            let prefix = &log(&calls)[0].0;
            let words = prefix.split_whitespace().count();
            assert!(prefix.contains("w0 w1 w2"), "the opening");
            if whole {
                assert!(prefix.contains("w5999"), "with notes, what the notes read");
            } else {
                assert!(
                    words <= DESCRIBE_DOCUMENT_TOKENS + 8 && !prefix.contains("w5999"),
                    "alone, at most {DESCRIBE_DOCUMENT_TOKENS} tokens: {words}"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_rejected_description_leaves_the_structure_and_says_why() {
        // A description naming what the document does not hold is rejected.
        let (c, _) = contextualizer("The annual report of Globex Inc for 2019.", false);
        let spans = spans();
        let chunks = ChunkView::all(DOC, &spans);
        let got = c
            .contextualize(view(), &chunks, &Memory::default())
            .await
            .expect("contexts");
        let revenue = &got.contexts[1];
        assert_eq!(revenue.status, ContextStatus::Generated);
        assert_eq!(
            revenue.text.as_deref(),
            Some("From report.md, section Revenue.")
        );
        assert_eq!(part_texts(revenue)[0].0, PartKind::Structural);
        assert!(
            revenue.notes[0]
                .starts_with("the document description was rejected: not in the document"),
            "{:?}",
            revenue.notes
        );
    }

    #[test]
    fn pieces_not_written_leave_the_chunk_pending_or_failed() {
        let prov = Provenance {
            method: ContextMethod::Document,
            model: None,
            prompt_version: None,
            input_hash: "k".into(),
            strategy: None,
            parts: vec![],
        };
        let pending = compose(&ChunkContext::none(), Some("From a."), None, prov.clone());
        assert_eq!(pending.status, ContextStatus::Pending);
        assert!(pending.text.is_none() && pending.notes.is_empty());
        let failure = ChunkContext {
            text: None,
            status: ContextStatus::Failed,
            provenance: None,
            notes: vec!["the prompt is 9000 tokens".into()],
        };
        let failed = compose(&failure, Some("From a."), None, prov);
        assert_eq!(failed.status, ContextStatus::Failed);
        assert_eq!(
            failed.notes,
            ["the document description: the prompt is 9000 tokens"]
        );
    }
}
