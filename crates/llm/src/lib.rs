//! LLMs for situate: the models that write each chunk's situating context.
//!
//! - [`Llm`]: the small trait every provider implements: replies to many prompts that share
//!   one prefix (the document), so each provider can reuse that prefix its own way.
//! - [`local::LocalLlm`]: GGUF models in candle (llama, qwen2, qwen3, gemma3 architectures;
//!   SmolLM2-135M-Instruct is the offline default). The document prefix is run once and its
//!   KV cache reused for every chunk: offline prompt caching.
//! - [`hosted::HostedLlm`]: Anthropic's Messages API with prompt caching and any
//!   OpenAI-compatible chat server (OpenAI, Ollama, vLLM, llama.cpp, LM Studio).
//! - [`chat`]: chat templates (ChatML, Gemma, Llama 3), recognised from the GGUF metadata.
//! - [`contextualizer::LlmContextualizer`]: the contextualizer on top: prompt, window rule,
//!   checks ([`verify`]), provenance.
//! - [`resolve()`]: from a setting (`smollm2-135m-instruct`, a `.gguf` path, ...) to a model.
#![warn(missing_docs)]

pub mod chat;
pub mod contextualizer;
pub mod cost;
pub mod decoder;
pub mod document;
pub mod hosted;
pub mod local;
pub mod prompt;
pub mod spm;
pub mod verify;

pub use contextualizer::LlmContextualizer;
pub use document::DocumentContextualizer;
pub use situate_core::TokenUsage;

/// Why a generation failed.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The model could not be loaded or is not supported.
    #[error("{model}: {message}")]
    Load {
        /// The model.
        model: String,
        /// What went wrong.
        message: String,
    },
    /// A local model of the catalog is not installed and could not be installed now
    /// (offline, or the install failed): `install` is the command that installs it.
    #[error("{model}: {message}")]
    Missing {
        /// The model.
        model: String,
        /// The command that installs it (`situate models install NAME`).
        install: String,
        /// Why it could not be installed now, and what to do.
        message: String,
    },
    /// The prompt does not fit in the model's window (never sent cut silently).
    #[error("the prompt is {tokens} tokens, over the model's window of {window}")]
    TooLong {
        /// Tokens in the prompt plus the reply asked for.
        tokens: usize,
        /// The model's window.
        window: usize,
    },
    /// Running the model failed.
    #[error("generation failed: {0}")]
    Generate(String),
    /// A hosted provider failed (after its retries).
    #[error("{0}")]
    Http(#[from] situate_http::HttpError),
    /// A hosted provider answered something unusable.
    #[error("unusable answer from {provider}: {message}")]
    Answer {
        /// The provider.
        provider: String,
        /// What was wrong.
        message: String,
    },
}

/// Why a generation ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub enum Finish {
    /// The model ended its turn.
    #[default]
    Stop,
    /// The token limit was reached first.
    Length,
    /// The model was stopped because it was repeating itself (local models).
    Loop,
}

/// One reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// The reply's text.
    pub text: String,
    /// Tokens spent on it (the shared prefix is counted once, on the request that read or
    /// wrote it first, as providers bill it).
    pub usage: TokenUsage,
    /// Why it ended.
    pub finish: Finish,
}

/// Prompts that share a prefix: `system`, then `prefix` (the document), then each suffix
/// (one chunk and the instruction) in the user turn.
#[derive(Debug, Clone, Copy)]
pub struct SharedPrompt<'a> {
    /// The system message, if any.
    pub system: Option<&'a str>,
    /// The shared start of the user turn.
    pub prefix: &'a str,
    /// The rest of the user turn, one per reply wanted.
    pub suffixes: &'a [String],
    /// Most tokens per reply.
    pub max_tokens: usize,
}

/// How a provider reuses a shared prefix, for cost estimates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefixCaching {
    /// Marked in the request: the first request writes the cache, the others read it
    /// (Anthropic).
    Explicit,
    /// Done by the server on long enough prefixes (OpenAI: 1,024 tokens and more).
    Automatic,
    /// A local KV cache: the prefix is run once.
    Local,
}

/// Called with each reply's index and outcome as soon as it is known.
pub type OnReply<'a> = &'a (dyn Fn(usize, &Result<Generation, LlmError>) + Send + Sync);

/// Called with each new piece of a reply's text as it is written.
pub type OnText<'a> = &'a (dyn Fn(&str) + Send + Sync);

/// A text generator.
#[async_trait::async_trait]
pub trait Llm: Send + Sync {
    /// A stable id (`provider:model`), recorded in each context's provenance.
    fn id(&self) -> &str;

    /// Tokens the model takes in one request (prompt and reply).
    fn window(&self) -> usize;

    /// Tokens `text` takes (exact for local models, an estimate for hosted ones).
    fn count_tokens(&self, text: &str) -> usize;

    /// How the provider reuses a shared prefix.
    fn prefix_caching(&self) -> PrefixCaching;

    /// Documents worth having in flight at once: 1 for a local model (it runs one prompt at
    /// a time), more for a server.
    fn documents_in_flight(&self) -> usize {
        1
    }

    /// One reply per suffix of `prompt`, in order; each is also given to `on_reply` as soon as
    /// it is done. The shared prefix is reused the provider's way (a KV cache, prompt
    /// caching, server-side prefix caching).
    async fn generate_shared(
        &self,
        prompt: SharedPrompt<'_>,
        on_reply: OnReply<'_>,
    ) -> Vec<Result<Generation, LlmError>>;

    /// The reply to `prompt`'s first suffix, its text handed to `on_text` piece by piece as
    /// it is written. The default writes the whole reply ([`Llm::generate_shared`]) and
    /// hands it on in one piece; local models stream token by token and keep the prefix
    /// cached for the next call.
    async fn generate_streamed(
        &self,
        prompt: SharedPrompt<'_>,
        on_text: OnText<'_>,
    ) -> Result<Generation, LlmError> {
        let one = SharedPrompt {
            suffixes: prompt.suffixes.get(..1).unwrap_or_default(),
            ..prompt
        };
        let reply = self
            .generate_shared(one, &|_, _| {})
            .await
            .into_iter()
            .next()
            .unwrap_or_else(|| Err(LlmError::Generate("no prompt to answer".into())));
        if let Ok(g) = &reply {
            on_text(&g.text);
        }
        reply
    }

    /// For each suffix of `prompt` (a yes/no question), how strongly the model answers
    /// "yes": P(yes) / (P(yes) + P(no)) from the probabilities of the reply's first token
    /// where the provider exposes them (local models, OpenAI-compatible servers with
    /// `logprobs`). The default reads a short reply instead: 1 for yes, 0 for no
    /// ([`judge_by_reply`]). `prompt.max_tokens` is ignored.
    async fn judge_shared(&self, prompt: SharedPrompt<'_>) -> Vec<Result<f32, LlmError>> {
        judge_by_reply(self, prompt).await
    }
}

/// A yes/no judgement read from the reply's text: 1 when its first word is "yes", 0 when it
/// is "no" (any case, punctuation ignored); anything else is an error.
pub async fn judge_by_reply<L: Llm + ?Sized>(
    llm: &L,
    prompt: SharedPrompt<'_>,
) -> Vec<Result<f32, LlmError>> {
    let prompt = SharedPrompt {
        max_tokens: 3,
        ..prompt
    };
    llm.generate_shared(prompt, &|_, _| {})
        .await
        .into_iter()
        .map(|r| {
            r.and_then(|g| {
                yes_no(&g.text).ok_or_else(|| LlmError::Answer {
                    provider: llm.id().to_string(),
                    message: format!("expected yes or no, got {:?}", g.text),
                })
            })
        })
        .collect()
}

/// 1 for a reply starting with "yes", 0 for "no", `None` otherwise.
///
/// ```
/// assert_eq!(situate_llm::yes_no(" Yes."), Some(1.0));
/// assert_eq!(situate_llm::yes_no("no, it does not"), Some(0.0));
/// assert_eq!(situate_llm::yes_no("Maybe"), None);
/// ```
pub fn yes_no(text: &str) -> Option<f32> {
    let word: String = text
        .trim_start()
        .chars()
        .take_while(|c| c.is_alphabetic())
        .collect::<String>()
        .to_lowercase();
    match word.as_str() {
        "yes" => Some(1.0),
        "no" => Some(0.0),
        _ => None,
    }
}

/// P(yes) / (P(yes) + P(no)) from the log-probabilities (or logits: only differences
/// matter) of the tokens that spell each answer, computed stably.
pub fn yes_share(yes: &[f32], no: &[f32]) -> Option<f32> {
    fn lse(v: &[f32]) -> Option<f64> {
        let m = v.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        if !m.is_finite() {
            return None;
        }
        Some(m + v.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln())
    }
    match (lse(yes), lse(no)) {
        (Some(y), Some(n)) => Some((1.0 / (1.0 + (n - y).exp())) as f32),
        (Some(_), None) => Some(1.0),
        (None, Some(_)) => Some(0.0),
        (None, None) => None,
    }
}

/// Loads the LLM a setting names: a local model of the catalog (installed with `situate
/// models install`) or a path to a GGUF file.
pub fn resolve(spec: &str) -> Result<Box<dyn Llm>, LlmError> {
    let fail = |message: String| LlmError::Load {
        model: spec.to_string(),
        message,
    };
    if let Some(entry) = situate_models::CATALOG.iter().find(|e| e.name == spec) {
        if entry.role != situate_models::Role::Llm {
            return Err(fail(format!("not a generative model ({})", entry.about)));
        }
        let Some((file, _)) = entry.files.iter().find(|(f, _)| f.ends_with(".gguf")) else {
            return Err(fail("the catalog entry has no GGUF file".into()));
        };
        let dir =
            situate_models::ensure(entry, "the local LLM").map_err(|e| LlmError::Missing {
                model: spec.to_string(),
                install: format!("situate models install {}", entry.name),
                message: e.to_string(),
            })?;
        let path = dir.join(file);
        let id = format!("local:{}@{}", entry.name, entry.version);
        return Ok(Box::new(local::LocalLlm::load(&path, id)?));
    }
    if hosted::is_hosted(spec) {
        return Ok(Box::new(hosted::HostedLlm::from_spec(spec)?));
    }
    let path = std::path::Path::new(spec);
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
    {
        if !path.is_file() {
            return Err(fail("no such file".into()));
        }
        let canonical = path.canonicalize().map_err(|e| fail(e.to_string()))?;
        let size = std::fs::metadata(&canonical).map(|m| m.len()).unwrap_or(0);
        let id = format!("local:{}:{size}", canonical.display());
        return Ok(Box::new(local::LocalLlm::load(&canonical, id)?));
    }
    Err(fail(format!(
        "unknown LLM: expected {}, a path to a .gguf file, anthropic:MODEL, openai:MODEL or ollama:MODEL",
        situate_models::CATALOG
            .iter()
            .filter(|e| e.role == situate_models::Role::Llm)
            .map(|e| e.name)
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

#[cfg(test)]
mod hosted_tests;
#[cfg(test)]
mod tests;

#[cfg(test)]
mod judge_tests {
    use super::yes_share;

    #[test]
    fn the_yes_share_sums_each_answers_spellings_and_is_stable() {
        assert_eq!(yes_share(&[0.0], &[0.0]), Some(0.5));
        let got = yes_share(&[0.3f32.ln(), 0.1f32.ln()], &[0.2f32.ln()]).expect("share");
        assert!((got - 0.4 / 0.6).abs() < 1e-6, "{got}");
        // Logits in the thousands (only differences matter) do not overflow.
        let got = yes_share(&[1000.0], &[999.0]).expect("share");
        assert!((got - 1.0 / (1.0 + (-1.0f32).exp())).abs() < 1e-6, "{got}");
        assert_eq!(yes_share(&[], &[-1.0]), Some(0.0));
        assert_eq!(yes_share(&[-1.0], &[]), Some(1.0));
        assert_eq!(yes_share(&[], &[]), None);
        assert_eq!(yes_share(&[f32::NEG_INFINITY], &[f32::NEG_INFINITY]), None);
    }
}
