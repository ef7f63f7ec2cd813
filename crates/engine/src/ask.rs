//! Grounded answers as front ends call them ([`Engine::ask`]): the passages (the search's
//! best, or the whole base), the answer prompt and its checks from `situate-answer`, the
//! model through the `Llm` layer (streamed), and the cost with and without the prompt
//! cache. Answer models are loaded once per engine and kept, like rerankers, so a service
//! or a process asking many questions reads a full-context base once (the local model keeps
//! its keys and values; Anthropic caches the marked prefix).

use crate::settings::{AnswerMode, AnswerPlan, SearchPlan, Unsupported};
use crate::{Engine, EngineError, Result};
use situate_answer::{Citation, Passage};
use situate_core::{DocumentFilter, Language, TokenUsage};
use situate_llm::{Llm, SharedPrompt};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Why an answer was not attempted or not given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Abstention {
    /// The model said the passages do not hold the answer.
    Model,
    /// The best passage scored under `min_score`: no model was asked.
    Retrieval,
    /// The index is empty, or the filter left nothing.
    NoPassages,
    /// The answer's citations did not hold after a second try (`unsupported = "refuse"`).
    Refused,
}

/// Dollars an answer cost, when the model's price is known.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct AnswerCost {
    /// As billed, the cached prefix at the cache's rates.
    pub dollars: f64,
    /// Had every prompt token been billed at the full input rate (no cache).
    pub dollars_without_cache: f64,
}

/// An answer: the `situate ask --json` shape, and `/v1/ask`'s.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct AnswerResponse {
    /// The question.
    pub question: String,
    /// The language the question was read in (the answer's and the abstention's).
    pub language: Language,
    /// The answer as shown: the model's reply with its `[n]` citations, or "not in the
    /// documents" in the question's language.
    pub answer: String,
    /// The answer says the documents do not hold it.
    pub abstained: bool,
    /// Why, when it abstained.
    pub abstention: Option<Abstention>,
    /// Every citation holds and there is at least one (or the answer abstained).
    pub grounded: bool,
    /// Why the answer is not grounded.
    pub problems: Vec<String>,
    /// The citations, in the order written: passage number, chunk, document, quote.
    pub citations: Vec<Citation>,
    /// The passages given to the model (in full-context mode, the whole base).
    pub passages: Vec<Passage>,
    /// `retrieval` or `full` (what `auto` chose).
    pub mode: AnswerMode,
    /// The model's id.
    pub model: String,
    /// The answer prompt's version.
    pub prompt_version: String,
    /// Model calls made (2 after a retry).
    pub attempts: usize,
    /// Tokens over every call.
    pub usage: TokenUsage,
    /// Dollars, when the model's price is known (local models cost none: `None`).
    pub cost: Option<AnswerCost>,
    /// Milliseconds from the call to the answer (the model's load excluded).
    pub took_ms: f64,
}

/// Answer models loaded by an engine, by spec; one handle can be shared by several engines
/// ([`Engine::share_answer_models`]), so a service's readers load a model once and a local
/// model's cached base serves every reader.
#[derive(Clone, Default)]
pub struct AnswerModels(Arc<Mutex<HashMap<String, Arc<dyn Llm>>>>);

/// Tokens kept free for the chat template and the question's block around the base.
const PROMPT_ALLOWANCE: usize = 256;

impl Engine {
    /// This engine's answer models, to share with another engine.
    pub fn answer_models(&self) -> AnswerModels {
        self.answer_models.clone()
    }

    /// Uses `models` (another engine's, [`Engine::answer_models`]) for its answers.
    pub fn share_answer_models(&mut self, models: AnswerModels) {
        self.answer_models = models;
    }

    /// The answer model `spec` names, loaded on first use and kept for this engine's life.
    pub fn answer_model(&self, spec: &str) -> Result<Arc<dyn Llm>> {
        let mut loaded =
            self.answer_models.0.lock().map_err(|_| {
                EngineError::Internal("an answer model failed to load earlier".into())
            })?;
        if let Some(m) = loaded.get(spec) {
            return Ok(Arc::clone(m));
        }
        let m: Arc<dyn Llm> = Arc::from(situate_llm::resolve(spec)?);
        loaded.insert(spec.to_string(), Arc::clone(&m));
        Ok(m)
    }

    /// Every chunk of the base in document order (documents by id, chunks by ordinal), as
    /// passages without their contexts: with the whole document there, a context has
    /// nothing to situate. Only the chunks `filter` allows, as a search would. At most
    /// `limit` characters; `None` when the base is larger.
    fn whole_base(&self, filter: &DocumentFilter, limit: usize) -> Result<Option<Vec<Passage>>> {
        let mut passages = Vec::new();
        let mut chars = 0;
        let mut after: Option<String> = None;
        // The filter as the search applies it: the cards it allows (ids, globs, languages,
        // metadata), `None` when it restricts nothing.
        let allowed = if filter.is_empty() {
            None
        } else {
            Some(self.store.filter_cards(filter)?)
        };
        loop {
            let page = self.store.documents_after(after.as_deref(), 500)?;
            let Some(last) = page.last() else { break };
            after = Some(last.id.clone());
            for doc in &page {
                for card in self.store.cards_of(&doc.id)? {
                    if allowed.as_ref().is_some_and(|a| !a.contains(card.card)) {
                        continue;
                    }
                    chars += card.original_text.chars().count();
                    if chars > limit {
                        return Ok(None);
                    }
                    passages.push(Passage {
                        id: passages.len() + 1,
                        chunk_id: card.chunk_id,
                        document_id: card.document_id,
                        title: doc.title.clone(),
                        context: None,
                        place: card.place,
                        original: card.original_text,
                        score: 0.0,
                    });
                }
            }
        }
        Ok(Some(passages))
    }

    /// Answers `question` from the index: the passages (by `plan.mode`), the answer prompt,
    /// the model's reply streamed to `on_text` as it is written, and its citations checked
    /// against the originals given (`situate-answer`). An answer whose citations fail is
    /// marked, asked again once, or withheld, as `plan.unsupported` says.
    pub fn ask(
        &self,
        question: &str,
        plan: &AnswerPlan,
        search: &SearchPlan,
        filter: &DocumentFilter,
        on_text: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<AnswerResponse> {
        let question = question.trim();
        if question.is_empty() {
            return Err(EngineError::field_error(
                "question",
                "the question is empty",
            ));
        }
        let language = situate_ingest::lang::detect(question, Language::En);
        let llm = self.answer_model(&plan.model)?;
        let started = Instant::now();
        let (mode, passages) = self.passages_for(question, plan, search, filter, llm.as_ref())?;
        let ctx = Asked {
            question,
            language,
            model: llm.id(),
            mode,
            started,
        };
        let not_in_documents = situate_answer::not_in_documents(language).to_string();
        let abstain = |why: Abstention| Reply {
            answer: not_in_documents.clone(),
            abstention: Some(why),
            checked: None,
            attempts: 0,
            usage: TokenUsage::default(),
        };
        if passages.is_empty() {
            on_text(&not_in_documents);
            return Ok(ctx.respond(abstain(Abstention::NoPassages), passages));
        }
        if let (AnswerMode::Retrieval, Some(min)) = (mode, plan.min_score) {
            let best = passages.iter().map(|p| p.score).fold(f32::MIN, f32::max);
            if best < min {
                on_text(&not_in_documents);
                return Ok(ctx.respond(abstain(Abstention::Retrieval), passages));
            }
        }
        let reply =
            self.checked_reply(llm.as_ref(), question, &passages, plan, language, on_text)?;
        Ok(ctx.respond(reply, passages))
    }

    /// The model's answer from `passages`, checked: asked once more when its citations do
    /// not hold and `plan.unsupported` says retry or refuse, then marked or withheld.
    fn checked_reply(
        &self,
        llm: &dyn Llm,
        question: &str,
        passages: &[Passage],
        plan: &AnswerPlan,
        language: Language,
        on_text: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<Reply> {
        let prompt = situate_answer::build_prompt(question, passages, language);
        let runtime = self.runtime()?;
        let mut usage = TokenUsage::default();
        let mut suffix = prompt.suffix.clone();
        let mut attempts = 0;
        loop {
            attempts += 1;
            let suffixes = [suffix.clone()];
            let reply = runtime.block_on(llm.generate_streamed(
                SharedPrompt {
                    system: None,
                    prefix: &prompt.prefix,
                    suffixes: &suffixes,
                    max_tokens: plan.max_tokens,
                },
                on_text,
            ))?;
            usage.add(&reply.usage);
            let checked = situate_answer::check(&reply.text, passages, language);
            let settled = checked.abstained
                || checked.grounded()
                || plan.unsupported == Unsupported::Mark
                || attempts == 2;
            if settled {
                let (answer, abstention) = if checked.abstained {
                    (checked.text.clone(), Some(Abstention::Model))
                } else if !checked.grounded() && plan.unsupported == Unsupported::Refuse {
                    (
                        situate_answer::refused(language).to_string(),
                        Some(Abstention::Refused),
                    )
                } else {
                    (checked.text.clone(), None)
                };
                return Ok(Reply {
                    answer,
                    abstention,
                    checked: Some(checked),
                    attempts,
                    usage,
                });
            }
            on_text("\n\n");
            suffix = situate_answer::retry_block(
                &prompt.suffix,
                &reply.text,
                &checked.problems,
                language,
            );
        }
    }

    /// The passages an answer reads: the whole base in full-context mode (or `auto` when it
    /// fits), else the search's best `plan.passages`.
    fn passages_for(
        &self,
        question: &str,
        plan: &AnswerPlan,
        search: &SearchPlan,
        filter: &DocumentFilter,
        llm: &dyn Llm,
    ) -> Result<(AnswerMode, Vec<Passage>)> {
        let window = llm.window();
        let room =
            window.saturating_sub(plan.max_tokens + PROMPT_ALLOWANCE + llm.count_tokens(question));
        // Full-context mode: the whole base, if it fits (a first cut by characters, as a
        // token is rarely under two characters, then the exact count).
        let full = match plan.mode {
            AnswerMode::Retrieval => None,
            AnswerMode::Full | AnswerMode::Auto => {
                let budget = if plan.mode == AnswerMode::Full {
                    room
                } else {
                    room.min(plan.full_budget)
                };
                self.whole_base(filter, budget.saturating_mul(8))?
                    .filter(|p| llm.count_tokens(&situate_answer::passages_block(p)) <= budget)
            }
        };
        if plan.mode == AnswerMode::Full && full.is_none() {
            return Err(EngineError::field_error(
                "mode",
                format!(
                    "full: the base does not fit the model's window ({room} tokens left for it); use retrieval or auto"
                ),
            ));
        }
        if let Some(p) = full {
            return Ok((AnswerMode::Full, p));
        }
        let plan_k = SearchPlan {
            k: plan.passages,
            ..search.clone()
        };
        let found = self.query(question, &plan_k, filter)?;
        let passages = found
            .hits
            .into_iter()
            .enumerate()
            .map(|(i, h)| Passage {
                id: i + 1,
                chunk_id: h.chunk_id,
                document_id: h.document_id,
                title: h.title,
                context: h.context,
                place: h.place,
                original: h.original_text,
                score: h.score,
            })
            .collect();
        Ok((AnswerMode::Retrieval, passages))
    }
}

/// What an answer is asked about: what every response to it repeats.
struct Asked<'a> {
    question: &'a str,
    language: Language,
    model: &'a str,
    mode: AnswerMode,
    started: Instant,
}

/// What the model (or the checks before it) gave.
struct Reply {
    answer: String,
    abstention: Option<Abstention>,
    checked: Option<situate_answer::Checked>,
    attempts: usize,
    usage: TokenUsage,
}

impl Asked<'_> {
    /// The response: the reply, its citations and problems, the passages, the cost.
    fn respond(&self, r: Reply, passages: Vec<Passage>) -> AnswerResponse {
        let (citations, problems) = r
            .checked
            .map(|c| (c.citations, c.problems))
            .unwrap_or_default();
        let usage = r.usage;
        let price = situate_llm::cost::price_for(self.model, None);
        AnswerResponse {
            question: self.question.to_string(),
            language: self.language,
            answer: r.answer,
            abstained: r.abstention.is_some(),
            abstention: r.abstention,
            grounded: problems.is_empty(),
            problems,
            citations,
            passages,
            mode: self.mode,
            model: self.model.to_string(),
            prompt_version: situate_answer::PROMPT_VERSION.to_string(),
            attempts: r.attempts,
            usage,
            cost: price.map(|p| AnswerCost {
                dollars: p.dollars(&usage),
                dollars_without_cache: p.dollars(&TokenUsage {
                    input_tokens: usage.input_tokens
                        + usage.cache_creation_input_tokens
                        + usage.cache_read_input_tokens,
                    cache_creation_input_tokens: 0,
                    cache_read_input_tokens: 0,
                    output_tokens: usage.output_tokens,
                }),
            }),
            took_ms: self.started.elapsed().as_secs_f64() * 1000.0,
        }
    }
}
