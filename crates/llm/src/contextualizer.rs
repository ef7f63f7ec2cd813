//! The LLM contextualizer: Anthropic's prompt (or the user's) through any [`Llm`], each reply
//! checked against the document before it may be indexed.

use crate::prompt::{LongDocuments, PromptTemplate, document_part};
use crate::verify::verify;
use crate::{Finish, Llm, SharedPrompt};
use situate_core::{
    ChunkContext, ChunkView, ContextError, ContextSink, ContextStatus, Contextualizer,
    DocumentContexts, DocumentView, Provenance, TokenUsage,
};
use std::sync::Mutex;

/// Tokens kept free for the chat template's own text around the user turn.
const TEMPLATE_ALLOWANCE: usize = 64;

/// Writes contexts with an LLM.
pub struct LlmContextualizer {
    llm: Box<dyn Llm>,
    template: PromptTemplate,
    long: LongDocuments,
    max_tokens: usize,
    document_tokens: Option<usize>,
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
        }
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

    /// The model.
    pub fn llm(&self) -> &dyn Llm {
        self.llm.as_ref()
    }

    fn provenance(&self, input_hash: String, strategy: &str) -> Provenance {
        Provenance {
            method: "llm".into(),
            model: Some(self.llm.id().to_string()),
            prompt_version: Some(self.template.version().to_string()),
            input_hash,
            strategy: Some(strategy.to_string()),
        }
    }
}

fn failed(reason: String, provenance: Option<Provenance>) -> ChunkContext {
    ChunkContext {
        text: None,
        status: ContextStatus::Failed,
        provenance,
        notes: vec![reason],
    }
}

#[async_trait::async_trait]
impl Contextualizer for LlmContextualizer {
    fn method(&self) -> &str {
        "llm"
    }

    fn fingerprint(&self) -> String {
        format!(
            "llm:{}:{}:{:?}:{}:{:?}",
            self.llm.id(),
            self.template.version(),
            self.long,
            self.max_tokens,
            self.document_tokens
        )
    }

    fn remembers(&self) -> bool {
        true
    }

    async fn contextualize(
        &self,
        doc: DocumentView<'_>,
        chunks: &[ChunkView<'_>],
        sink: &dyn ContextSink,
    ) -> Result<DocumentContexts, ContextError> {
        let count = |t: &str| self.llm.count_tokens(t);
        let overhead = count(&self.template.prefix("")) + TEMPLATE_ALLOWANCE + self.max_tokens;
        let mut contexts: Vec<Option<ChunkContext>> = vec![None; chunks.len()];
        // Chunks grouped by the document text their prompt carries, in order of first use:
        // each group shares one prefix.
        let mut groups: Vec<(String, String, Vec<(usize, String)>)> = Vec::new();
        for (i, chunk) in chunks.iter().enumerate() {
            let hash = self.input_hash(&doc, chunk);
            let suffix = self.template.suffix(chunk.text);
            let room = self.llm.window().saturating_sub(overhead + count(&suffix));
            let budget = self.document_tokens.map_or(room, |d| d.min(room));
            if budget < 32 {
                let c = failed(
                    format!(
                        "the chunk leaves no room for the document in the model's window of {} tokens",
                        self.llm.window()
                    ),
                    None,
                );
                sink.finished(i, &c, &TokenUsage::default());
                contexts[i] = Some(c);
                continue;
            }
            let range = chunk.span.byte_start..chunk.span.byte_end;
            match document_part(doc.text, range, budget, self.long, &count) {
                Err(reason) => {
                    let c = failed(reason, Some(self.provenance(hash, "refused")));
                    sink.finished(i, &c, &TokenUsage::default());
                    contexts[i] = Some(c);
                }
                Ok(part) => match groups.iter_mut().find(|g| g.0 == part.text) {
                    Some(g) => g.2.push((i, suffix)),
                    None => groups.push((part.text, part.strategy, vec![(i, suffix)])),
                },
            }
        }
        let usage = Mutex::new(TokenUsage::default());
        for (text, strategy, members) in &groups {
            let prefix = self.template.prefix(text);
            let suffixes: Vec<String> = members.iter().map(|(_, s)| s.clone()).collect();
            let done: Mutex<Vec<(usize, ChunkContext)>> = Mutex::new(Vec::new());
            let on_reply = |k: usize, r: &Result<crate::Generation, crate::LlmError>| {
                let Some(&(i, _)) = members.get(k) else {
                    return;
                };
                let chunk = &chunks[i];
                let prov = self.provenance(self.input_hash(&doc, chunk), strategy);
                let (c, u) = match r {
                    Ok(g) => {
                        let v = verify(&g.text, chunk.text, doc.text, g.finish == Finish::Length);
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
                };
                sink.finished(i, &c, &u);
                if let Ok(mut total) = usage.lock() {
                    total.add(&u);
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
            for (i, c) in done.into_inner().unwrap_or_default() {
                contexts[i] = Some(c);
            }
        }
        let contexts = contexts
            .into_iter()
            .map(|c| c.unwrap_or_else(|| failed("the model gave no reply".into(), None)))
            .collect();
        Ok(DocumentContexts {
            contexts,
            usage: usage.into_inner().unwrap_or_default(),
        })
    }
}
