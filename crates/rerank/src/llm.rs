//! LLM-as-reranker: each passage judged relevant or not by an LLM, scored by the
//! probability of "yes" ([`situate_llm::Llm::judge_shared`]): from the first token's
//! logits with a local GGUF model, from `top_logprobs` with OpenAI-compatible servers, and
//! from the reply's text (1 or 0) with Anthropic.
//!
//! The query and the instruction form the prompt's shared start, so a local model reads
//! them once per query (its KV cache is cut back to them for each passage) and hosted
//! providers can cache them. The passage follows, with its context in its own labelled
//! section. Passages longer than `max_chars` (default 2,000 characters) are cut there, at a
//! character boundary, and the cut is marked.

use situate_core::{RerankError, RerankPassage, Reranker};
use situate_llm::{Llm, SharedPrompt};

/// The instruction: what counts as relevant, and what the context section is.
const INSTRUCTION: &str = "You judge search results. Given a query and a passage, answer \
\"yes\" if the passage is relevant to the query (it answers the query or holds information \
needed to answer it) and \"no\" otherwise. A passage may come with a context: a note written \
to situate the passage within its document; it is not part of the passage.";

/// An LLM that judges passages.
pub struct LlmReranker {
    id: String,
    llm: Box<dyn Llm>,
    max_chars: usize,
}

impl LlmReranker {
    /// Judges with `llm`; passages are cut at `max_chars` characters.
    pub fn new(llm: Box<dyn Llm>, max_chars: usize) -> Self {
        LlmReranker {
            id: format!("llm:{}", llm.id()),
            llm,
            max_chars: max_chars.max(1),
        }
    }

    /// The shared start of every prompt for `query`.
    pub fn prefix(query: &str) -> String {
        format!("{INSTRUCTION}\n\n<query>\n{}\n</query>\n\n", query.trim())
    }

    /// The part of the prompt that is the passage's own.
    pub fn suffix(&self, p: &RerankPassage<'_>) -> String {
        let text = match p.text.char_indices().nth(self.max_chars) {
            Some((cut, _)) => format!("{} […]", &p.text[..cut]),
            None => p.text.to_string(),
        };
        let context = match p.context.map(str::trim).filter(|c| !c.is_empty()) {
            Some(c) => format!("<context>\n{c}\n</context>\n"),
            None => String::new(),
        };
        format!(
            "{context}<passage>\n{text}\n</passage>\n\nIs the passage relevant to the query? Answer only yes or no."
        )
    }
}

#[async_trait::async_trait]
impl Reranker for LlmReranker {
    fn id(&self) -> &str {
        &self.id
    }

    async fn score(
        &self,
        query: &str,
        passages: &[RerankPassage<'_>],
    ) -> Result<Vec<f32>, RerankError> {
        if passages.is_empty() {
            return Ok(Vec::new());
        }
        let prefix = Self::prefix(query);
        let suffixes: Vec<String> = passages.iter().map(|p| self.suffix(p)).collect();
        let prompt = SharedPrompt {
            system: None,
            prefix: &prefix,
            suffixes: &suffixes,
            max_tokens: 1,
        };
        self.llm
            .judge_shared(prompt)
            .await
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                r.map_err(|e| RerankError {
                    reranker: self.id.clone(),
                    message: format!("passage {}: {e}", i + 1),
                })
            })
            .collect()
    }
}
