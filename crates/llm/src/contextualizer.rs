//! The LLM contextualizer: Anthropic's prompt (or the user's) through any [`Llm`], each reply
//! checked against the document before it may be indexed.

use crate::cost::Price;
use crate::prompt::{DocumentPart, LongDocuments, PromptTemplate, document_part};
use crate::verify::{checked_document, verify};
use crate::{Finish, Llm, PrefixCaching, SharedPrompt};
use situate_core::{
    ChunkContext, ChunkView, ContextError, ContextSink, ContextStatus, Contextualizer,
    DocumentContexts, DocumentView, Language, Provenance, TokenUsage,
};
use std::sync::Mutex;

/// Tokens kept free for the chat template's own text around the user turn.
const TEMPLATE_ALLOWANCE: usize = 64;

/// The reply length assumed by estimates (the prompt asks for 50–100 tokens).
pub const EXPECTED_REPLY_TOKENS: u64 = 80;

/// The usage a group of prompts sharing a `prefix` of `prefix_tokens` should have, with one
/// suffix per entry of `suffix_tokens`, under `caching`.
pub fn estimate_usage(
    caching: PrefixCaching,
    prefix_tokens: u64,
    suffix_tokens: &[u64],
) -> TokenUsage {
    let mut u = TokenUsage::default();
    for (i, &s) in suffix_tokens.iter().enumerate() {
        u.output_tokens += EXPECTED_REPLY_TOKENS;
        u.input_tokens += s;
        match (caching, i) {
            (PrefixCaching::Explicit | PrefixCaching::Local, 0) => {
                u.cache_creation_input_tokens += prefix_tokens
            }
            (PrefixCaching::Explicit | PrefixCaching::Local, _) => {
                u.cache_read_input_tokens += prefix_tokens
            }
            (PrefixCaching::Automatic, i) if i > 0 && prefix_tokens >= 1024 => {
                u.cache_read_input_tokens += prefix_tokens
            }
            (PrefixCaching::Automatic, _) => u.input_tokens += prefix_tokens,
        }
    }
    u
}

/// Spending so far, against an optional budget.
#[derive(Debug, Default)]
struct Spend {
    dollars: f64,
    /// The worst case of the prompts being answered now (documents run concurrently, and
    /// each checks the budget against what the others may still spend).
    reserved: f64,
    stopped: bool,
}

/// Writes contexts with an LLM.
pub struct LlmContextualizer {
    llm: Box<dyn Llm>,
    template: PromptTemplate,
    long: LongDocuments,
    max_tokens: usize,
    document_tokens: Option<usize>,
    price: Option<Price>,
    budget: Option<f64>,
    estimate_only: bool,
    spend: Mutex<Spend>,
}

impl LlmContextualizer {
    /// Anthropic's prompt, the window rule for long documents, replies of at most 160 tokens
    /// (the prompt asks for 50–100; a reply cut at the limit is rejected).
    pub fn new(llm: Box<dyn Llm>) -> Self {
        LlmContextualizer {
            llm,
            template: PromptTemplate::anthropic(),
            long: LongDocuments::Window,
            max_tokens: 160,
            document_tokens: None,
            price: None,
            budget: None,
            estimate_only: false,
            spend: Mutex::new(Spend::default()),
        }
    }

    /// The price used for the budget (`None`: the model's price from the table, if known).
    pub fn with_price(mut self, price: Option<Price>) -> Self {
        self.price = crate::cost::price_for(self.llm.id(), price);
        self
    }

    /// Stop before spending more than `dollars`: chunks whose prompts would go over stay
    /// `pending` (with the reason), for a later `situate contextualize`. Needs a price.
    pub fn with_budget(mut self, dollars: Option<f64>) -> Self {
        self.budget = dollars;
        if self.price.is_none() {
            self.price = crate::cost::price_for(self.llm.id(), None);
        }
        self
    }

    /// Call nothing: every chunk stays `pending` and the usage reported is the estimate
    /// (for `--dry-run`).
    pub fn estimate_only(mut self, yes: bool) -> Self {
        self.estimate_only = yes;
        self
    }

    /// The price in use, if known.
    pub fn price(&self) -> Option<Price> {
        self.price
            .or_else(|| crate::cost::price_for(self.llm.id(), None))
    }

    /// Dollars spent so far (by the price in use), and whether the budget stopped the run.
    pub fn spent(&self) -> (f64, bool) {
        self.spend
            .lock()
            .map(|s| (s.dollars, s.stopped))
            .unwrap_or((0.0, false))
    }

    /// Another prompt template.
    pub fn with_template(mut self, template: PromptTemplate) -> Self {
        self.template = template;
        self
    }

    /// Another rule for documents longer than the window.
    pub fn with_long_documents(mut self, rule: LongDocuments) -> Self {
        self.long = rule;
        self
    }

    /// At most this many tokens of document per prompt, even when the model takes more
    /// (cost or time bound); the window rule applies beyond it.
    pub fn with_document_tokens(mut self, tokens: Option<usize>) -> Self {
        self.document_tokens = tokens;
        self
    }

    /// Most tokens per reply.
    pub fn with_max_tokens(mut self, tokens: usize) -> Self {
        self.max_tokens = tokens.max(8);
        self
    }

    /// The version of the prompt template in use.
    pub fn template_version(&self) -> &str {
        self.template.version()
    }

    /// The prompt template asked of a document in `language`
    /// ([`PromptTemplate::for_language`]).
    pub fn template_for(&self, language: Language) -> &PromptTemplate {
        self.template.for_language(language)
    }

    /// [`Contextualizer::fingerprint`] for a document in `language`: the prompt version is
    /// the one that language is asked with, so a Russian document's notes are keyed by the
    /// Russian prompt while every other document keeps the keys it had.
    fn fingerprint_for(&self, language: Language) -> String {
        format!(
            "llm:{}:{}:{:?}:{}:{:?}",
            self.llm.id(),
            self.template_for(language).version(),
            self.long,
            self.max_tokens,
            self.document_tokens
        )
    }

    /// The model.
    pub fn llm(&self) -> &dyn Llm {
        self.llm.as_ref()
    }

    fn provenance(
        &self,
        template: &PromptTemplate,
        input_hash: String,
        strategy: &str,
    ) -> Provenance {
        Provenance {
            method: situate_core::ContextMethod::Llm,
            model: Some(self.llm.id().to_string()),
            prompt_version: Some(template.version().to_string()),
            input_hash,
            strategy: Some(strategy.to_string()),
            parts: vec![],
        }
    }
}

/// Prompts that share one part of the document: its text, what the window rule kept, and
/// the members (their index and their own suffix).
type Group = (String, String, Vec<(usize, String)>);

/// Whether [`LlmContextualizer::write`] also asks for the document's description.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Describe {
    /// Notes only.
    No,
    /// The description as one more reply after the notes' prefix.
    WithNotes,
    /// The description alone, from at most this many tokens of the document's opening.
    Alone {
        /// The most document tokens the description prompt carries.
        document_tokens: usize,
    },
}

/// One piece of [`LlmContextualizer::write`]'s work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Piece {
    /// The note on the chunk at this index of the call's chunks.
    Note(usize),
    /// The document's description.
    Description,
}

impl Piece {
    /// Member `i` of a call on `chunks` chunks: a chunk's note, or (`i == chunks`) the
    /// document's description.
    fn of(i: usize, chunks: usize) -> Piece {
        if i == chunks {
            Piece::Description
        } else {
            Piece::Note(i)
        }
    }
}

/// What [`LlmContextualizer::write`] wrote.
pub(crate) struct Written {
    /// One note per chunk asked for, in order.
    pub notes: Vec<ChunkContext>,
    /// The description, when asked for.
    pub description: Option<ChunkContext>,
    /// Tokens spent.
    pub usage: TokenUsage,
}

fn failed(reason: String, provenance: Option<Provenance>) -> ChunkContext {
    ChunkContext {
        text: None,
        status: ContextStatus::Failed,
        provenance,
        notes: vec![reason],
    }
}

impl LlmContextualizer {
    /// Notes for `chunks` of `doc` (Anthropic's prompt, or the template in use) and, with
    /// `describe`, the document's description ([`crate::document::describe_prompt`]), all
    /// after one shared prefix per part of the document: the description is one more reply
    /// after the prefix the chunks read, so it costs its own prompt and reply only. Each
    /// piece is given to `on_done` as soon as it is checked.
    pub(crate) async fn write(
        &self,
        doc: DocumentView<'_>,
        chunks: &[ChunkView<'_>],
        wanted: Describe,
        on_done: &(dyn Fn(Piece, &ChunkContext, &TokenUsage) + Sync),
    ) -> Written {
        let describe = wanted != Describe::No;
        let template = self.template.for_language(doc.language);
        let (groups, mut contexts) = self.group_prompts(doc, chunks, wanted, on_done);
        // The description is member `chunks.len()` of its group.
        let piece = |i: usize| Piece::of(i, chunks.len());
        let count = |t: &str| self.llm.count_tokens(t);
        let known = checked_document(doc.source, doc.kind, doc.text);
        let usage = Mutex::new(TokenUsage::default());
        let price = self.price();
        for (text, strategy, members) in &groups {
            let prefix = template.prefix(text);
            let suffixes: Vec<String> = members.iter().map(|(_, s)| s.clone()).collect();
            let estimate = estimate_usage(
                self.llm.prefix_caching(),
                count(&prefix) as u64,
                &suffixes.iter().map(|s| count(s) as u64).collect::<Vec<_>>(),
            );
            if self.estimate_only {
                if let Ok(mut u) = usage.lock() {
                    u.add(&estimate);
                }
                for (i, _) in members {
                    contexts[*i] = Some(ChunkContext::none());
                }
                continue;
            }
            let reserved = match self.reserve(estimate, suffixes.len()) {
                Ok(reserved) => reserved,
                Err(deferred) => {
                    for (i, _) in members {
                        contexts[*i] = Some((*deferred).clone());
                    }
                    continue;
                }
            };
            let done: Mutex<Vec<(usize, ChunkContext)>> = Mutex::new(Vec::new());
            let on_reply = |k: usize, r: &Result<crate::Generation, crate::LlmError>| {
                let Some(&(i, _)) = members.get(k) else {
                    return;
                };
                let (c, u) = self.reply_context(&doc, chunks.get(i), strategy, &known, r);
                on_done(piece(i), &c, &u);
                if let Ok(mut total) = usage.lock() {
                    total.add(&u);
                }
                if let (Some(p), Ok(mut spend)) = (price, self.spend.lock()) {
                    spend.dollars += p.dollars(&u);
                }
                if let Ok(mut d) = done.lock() {
                    d.push((i, c));
                }
            };
            self.llm
                .generate_shared(
                    SharedPrompt {
                        system: None,
                        prefix: &prefix,
                        suffixes: &suffixes,
                        max_tokens: self.max_tokens,
                    },
                    &on_reply,
                )
                .await;
            if let Ok(mut spend) = self.spend.lock() {
                spend.reserved -= reserved;
            }
            for (i, c) in done.into_inner().unwrap_or_default() {
                contexts[i] = Some(c);
            }
        }
        let mut contexts: Vec<ChunkContext> = contexts
            .into_iter()
            .map(|c| c.unwrap_or_else(|| failed("the model gave no reply".into(), None)))
            .collect();
        let description = contexts.pop().filter(|_| describe);
        Written {
            notes: contexts,
            description,
            usage: usage.into_inner().unwrap_or_default(),
        }
    }

    /// The prompts of [`LlmContextualizer::write`]: the chunks (and, when wanted, the
    /// description, member `chunks.len()`) grouped by the document text their prompt
    /// carries, in order of first use, each group sharing one prefix; and the contexts
    /// already settled (a chunk with no room for the document fails here, told to
    /// `on_done`).
    fn group_prompts(
        &self,
        doc: DocumentView<'_>,
        chunks: &[ChunkView<'_>],
        wanted: Describe,
        on_done: &(dyn Fn(Piece, &ChunkContext, &TokenUsage) + Sync),
    ) -> (Vec<Group>, Vec<Option<ChunkContext>>) {
        let describe = wanted != Describe::No;
        let count = |t: &str| self.llm.count_tokens(t);
        let template = self.template.for_language(doc.language);
        let overhead = count(&template.prefix("")) + TEMPLATE_ALLOWANCE + self.max_tokens;
        // The description is member `chunks.len()` of its group.
        let desc = chunks.len();
        let piece = |i: usize| Piece::of(i, desc);
        let mut contexts: Vec<Option<ChunkContext>> = vec![None; chunks.len() + 1];
        // Chunks grouped by the document text their prompt carries, in order of first use:
        // each group shares one prefix.
        let mut groups: Vec<Group> = Vec::new();
        let suffixes: Vec<String> = chunks.iter().map(|c| template.suffix(c.text)).collect();
        let suffix_tokens: Vec<usize> = suffixes.iter().map(|s| count(s)).collect();
        // One budget for the whole document, left by its longest chunk, so that a long
        // document's windows fall on the same grid for every chunk and neighbouring chunks
        // share a window (one prefix, read once). A budget per chunk would give each chunk a
        // window of its own size: no two prompts alike, the whole window read per chunk.
        let describe_suffix = crate::document::describe_suffix(doc.language);
        let describe_tokens = if describe { count(&describe_suffix) } else { 0 };
        let longest = suffix_tokens
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
            .max(describe_tokens);
        let shared_room = self.llm.window().saturating_sub(overhead + longest);
        for (i, chunk) in chunks.iter().enumerate() {
            let hash = self.input_hash(&doc, chunk);
            let suffix = suffixes[i].clone();
            let own_room = self
                .llm
                .window()
                .saturating_sub(overhead + suffix_tokens[i]);
            // A chunk too long for the shared budget keeps its own (smaller) one.
            let room = if shared_room >= 32 {
                shared_room
            } else {
                own_room
            };
            let budget = self.document_tokens.map_or(room, |d| d.min(room));
            if budget < 32 {
                let c = failed(
                    format!(
                        "the chunk leaves no room for the document in the model's window of {} tokens",
                        self.llm.window()
                    ),
                    None,
                );
                on_done(piece(i), &c, &TokenUsage::default());
                contexts[i] = Some(c);
                continue;
            }
            let range = chunk.span.byte_start..chunk.span.byte_end;
            match document_part(doc.text, range, budget, self.long, &count) {
                Err(reason) => {
                    let c = failed(reason, Some(self.provenance(template, hash, "refused")));
                    on_done(piece(i), &c, &TokenUsage::default());
                    contexts[i] = Some(c);
                }
                Ok(part) => match groups.iter_mut().find(|g| g.0 == part.text) {
                    Some(g) => g.2.push((i, suffix)),
                    None => groups.push((part.text, part.strategy, vec![(i, suffix)])),
                },
            }
        }
        if describe {
            let room = self.llm.window().saturating_sub(overhead + describe_tokens);
            let room = if shared_room >= 32 { shared_room } else { room };
            let part = self.description_part(doc.text, room, wanted, &count);
            match part {
                Err(reason) => {
                    let c = failed(reason, None);
                    on_done(Piece::Description, &c, &TokenUsage::default());
                    contexts[desc] = Some(c);
                }
                Ok(part) => match groups.iter_mut().find(|g| g.0 == part.text) {
                    Some(g) => g.2.insert(0, (desc, describe_suffix)),
                    None => {
                        groups.insert(0, (part.text, part.strategy, vec![(desc, describe_suffix)]))
                    }
                },
            }
        }
        (groups, contexts)
    }

    /// The part of `document` a description prompt with `room` tokens for it carries. With
    /// notes: the head of the document on the chunks' grid (a window at its start), so that
    /// it shares a prefix with the first chunks. Alone: the opening, at most
    /// `document_tokens` of it (what a document is shows early; a long file's description
    /// then costs a bounded prompt).
    fn description_part(
        &self,
        document: &str,
        room: usize,
        wanted: Describe,
        count: &dyn Fn(&str) -> usize,
    ) -> Result<DocumentPart, String> {
        let mut budget = self.document_tokens.map_or(room, |d| d.min(room));
        let mut rule = self.long;
        if let Describe::Alone { document_tokens } = wanted {
            budget = budget.min(document_tokens);
            if rule == LongDocuments::Window {
                rule = LongDocuments::Head;
            }
        }
        if budget < 32 {
            return Err(format!(
                "the description prompt leaves no room for the document in the model's window of {} tokens",
                self.llm.window()
            ));
        }
        document_part(document, 0..0, budget, rule, count)
    }

    /// Reserves the worst case of a group's calls (every reply as long as allowed) against
    /// the budget, when there is one and the model's price is known: the dollars reserved
    /// (0 without a budget), or the context every member gets when the budget would be
    /// exceeded (pending, with why: `situate contextualize` goes on later).
    fn reserve(&self, estimate: TokenUsage, replies: usize) -> Result<f64, Box<ChunkContext>> {
        let (Some(budget), Some(price)) = (self.budget, self.price()) else {
            return Ok(0.0);
        };
        let worst = TokenUsage {
            output_tokens: (self.max_tokens * replies) as u64,
            ..estimate
        };
        let mut spend = self.spend.lock().unwrap_or_else(|e| e.into_inner());
        let worst = price.dollars(&worst);
        if spend.stopped || spend.dollars + spend.reserved + worst > budget {
            spend.stopped = true;
            return Err(Box::new(ChunkContext {
                text: None,
                status: ContextStatus::Pending,
                provenance: None,
                notes: vec![format!(
                    "not contextualized: the budget of ${budget:.2} would be exceeded (${:.4} spent); run `situate contextualize` to go on",
                    spend.dollars
                )],
            }));
        }
        spend.reserved += worst;
        Ok(worst)
    }

    /// A reply checked: the note of `chunk` (or, with none, the document's description)
    /// verified against the chunk and the document, with its provenance and the tokens it
    /// cost.
    fn reply_context(
        &self,
        doc: &DocumentView<'_>,
        chunk: Option<&ChunkView<'_>>,
        strategy: &str,
        known: &str,
        r: &Result<crate::Generation, crate::LlmError>,
    ) -> (ChunkContext, TokenUsage) {
        let template = self.template.for_language(doc.language);
        let prov = match chunk {
            Some(chunk) => self.provenance(template, self.input_hash(doc, chunk), strategy),
            None => Provenance {
                prompt_version: Some(crate::document::describe_prompt(doc.language).1.into()),
                ..self.provenance(
                    template,
                    crate::document::description_key(self, doc),
                    strategy,
                )
            },
        };
        match r {
            Ok(g) => {
                let cut = g.finish == Finish::Length;
                let mut v = match chunk {
                    Some(chunk) => verify(&g.text, chunk.text, known, cut),
                    None => crate::verify::verify_description(&g.text, known, cut),
                };
                // A description keeps its first sentences: a loop after them is cut with
                // the rest.
                let looped = g.finish == Finish::Loop
                    && (chunk.is_some() || !crate::verify::description_is_cut(&g.text));
                if looped && !v.reasons.iter().any(|r| r.starts_with("repeats")) {
                    v.reasons.push("repeats itself (stopped)".into());
                }
                let status = if v.passed() {
                    ContextStatus::Verified
                } else {
                    ContextStatus::Rejected
                };
                (
                    ChunkContext {
                        text: Some(v.text),
                        status,
                        provenance: Some(prov),
                        notes: v.reasons,
                    },
                    g.usage,
                )
            }
            Err(e) => (failed(e.to_string(), Some(prov)), TokenUsage::default()),
        }
    }
}

#[async_trait::async_trait]
impl Contextualizer for LlmContextualizer {
    fn method(&self) -> &str {
        "llm"
    }

    fn fingerprint(&self) -> String {
        self.fingerprint_for(Language::Other)
    }

    fn input_hash(&self, doc: &DocumentView<'_>, chunk: &ChunkView<'_>) -> String {
        situate_core::chunk_key(&self.fingerprint_for(doc.language), doc, chunk)
    }

    fn remembers(&self) -> bool {
        true
    }

    fn documents_in_flight(&self) -> usize {
        self.llm.documents_in_flight()
    }

    fn recheck(
        &self,
        doc: &DocumentView<'_>,
        chunk: &ChunkView<'_>,
        cached: ChunkContext,
    ) -> ChunkContext {
        let known = checked_document(doc.source, doc.kind, doc.text);
        crate::verify::recheck(cached, chunk.text, &known)
    }

    async fn contextualize(
        &self,
        doc: DocumentView<'_>,
        chunks: &[ChunkView<'_>],
        sink: &dyn ContextSink,
    ) -> Result<DocumentContexts, ContextError> {
        let on_done = |piece: Piece, c: &ChunkContext, u: &TokenUsage| {
            if let Piece::Note(i) = piece {
                sink.finished(i, c, u);
            }
        };
        let w = self.write(doc, chunks, Describe::No, &on_done).await;
        Ok(DocumentContexts {
            contexts: w.notes,
            usage: w.usage,
            document_tokens: self.llm.count_tokens(doc.text) as u64,
        })
    }
}
