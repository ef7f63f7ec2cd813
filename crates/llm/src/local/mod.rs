//! Local GGUF models in candle, with the document's KV cache reused for every chunk.
//!
//! Four architectures: `llama` (SmolLM2, Llama, Mistral), `qwen2` and `qwen3` run on
//! situate's own forward pass ([`crate::decoder`]), and `gemma3` on candle-transformers'. The
//! tokenizer is built from the file's metadata (byte-level BPE from its
//! `tokenizer.ggml.tokens` and `merges`, or SentencePiece, [`crate::spm`]); the chat template
//! is recognised from `tokenizer.chat_template` ([`crate::chat`]).
//!
//! Prefix reuse: the prompt's tokens are the shared part (template start, document) and,
//! per reply, its own part (chunk, instruction, template end), each tokenized on its own so
//! that the sequence is the same whether or not the prefix is reused. The shared part is run
//! once; for each reply the KV cache is cut back to it and the reply's part continues from
//! there, so nothing is copied. Decoding is greedy.

use crate::chat::Template;
use crate::{Finish, Generation, Llm, LlmError, OnReply, SharedPrompt, TokenUsage};
use candle_core::Device;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;
use tokenizers::Tokenizer;

mod run;
mod weights;

pub use weights::widen_slow_quantizations;
use weights::*;

/// Tokens run through the model per forward call while reading a prompt: bounds the
/// attention matrix (heads × piece × context floats) on long documents.
const PREFILL_PIECE: usize = 512;

/// A reply's tokens and why it ended, or why it failed.
type ReplyTokens = Result<(Vec<u32>, Finish), LlmError>;

/// Replies written side by side by default ([`LocalLlm::set_batch`]): decoding is bound by
/// reading the weights, and a pass for several replies reads them once for all.
pub const DEFAULT_BATCH: usize = 8;

/// Prompt tokens of a reply read per forward pass (after the shared prefix).
const FORK_PIECE: usize = 512;

/// Passage tokens an LLM judge runs side by side in one forward pass (after the shared
/// prefix): a pass costs a fixed ~0.1 s on SmolLM2-135M however few its rows, and past 256
/// rows the speed stops rising (258 tokens/s at 256, 253 at 512) while the attention grows.
const JUDGE_GROUP_TOKENS: usize = 256;

/// Time spent reading prompts and writing replies, for throughput reports.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LocalStats {
    /// Prompt tokens run through the model.
    pub prefill_tokens: u64,
    /// Time spent on them.
    pub prefill: Duration,
    /// Tokens generated.
    pub decode_tokens: u64,
    /// Time spent generating them.
    pub decode: Duration,
}

/// A GGUF model run locally.
pub struct LocalLlm {
    id: String,
    weights: Mutex<Weights>,
    tokenizer: Tokenizer,
    template: Template,
    stop: Vec<u32>,
    window: usize,
    device: Device,
    reuse_prefix: bool,
    batch: usize,
    stats: std::sync::Arc<Mutex<LocalStats>>,
    /// The single tokens that start a "yes" and a "no" answer (for judgements).
    answer_tokens: Option<(Vec<u32>, Vec<u32>)>,
    /// The prompt tokens whose keys and values [`Llm::generate_streamed`] left in the cache
    /// at positions `0..len`, for the next streamed reply to continue from (locked after
    /// `weights`; emptied by every other use of the cache).
    kept: Mutex<Vec<u32>>,
}

fn load_err(path: &Path, message: impl std::fmt::Display) -> LlmError {
    LlmError::Load {
        model: path.display().to_string(),
        message: message.to_string(),
    }
}

#[async_trait::async_trait]
impl Llm for LocalLlm {
    fn id(&self) -> &str {
        &self.id
    }

    fn window(&self) -> usize {
        self.window
    }

    fn count_tokens(&self, text: &str) -> usize {
        self.encode(text).map_or(text.len() / 3, |t| t.len())
    }

    fn prefix_caching(&self) -> crate::PrefixCaching {
        crate::PrefixCaching::Local
    }

    async fn generate_shared(
        &self,
        prompt: SharedPrompt<'_>,
        on_reply: OnReply<'_>,
    ) -> Vec<Result<Generation, LlmError>> {
        let n = prompt.suffixes.len();
        let fail_all = |e: LlmError| -> Vec<Result<Generation, LlmError>> {
            let msg = e.to_string();
            let mut out = vec![Err(e)];
            out.extend((1..n).map(|_| Err(LlmError::Generate(msg.clone()))));
            out.truncate(n);
            for (i, r) in out.iter().enumerate() {
                on_reply(i, r);
            }
            out
        };
        let (open, close) = self.template.user_turn(prompt.system);
        let prefix = match self.encode(&format!("{open}{}", prompt.prefix)) {
            Ok(p) => p,
            Err(e) => return fail_all(e),
        };
        let mut weights = match self.weights.lock() {
            Ok(w) => w,
            Err(_) => return fail_all(LlmError::Generate("the model is poisoned".into())),
        };
        self.forget_kept();
        if weights.reusable() {
            if self.reuse_prefix {
                let out = self.side_by_side(&mut weights, &prefix, &prompt, &close, on_reply);
                weights.clear();
                return out;
            }
            // Without reuse (to measure what it saves): the prefix read again for every
            // reply, each reply then written as it is with reuse, so the replies are the same.
            let mut out = Vec::with_capacity(n);
            for (i, suffix) in prompt.suffixes.iter().enumerate() {
                let one = SharedPrompt {
                    suffixes: std::slice::from_ref(suffix),
                    ..prompt
                };
                let mut r = self
                    .side_by_side(&mut weights, &prefix, &one, &close, &|_, _| {})
                    .pop()
                    .unwrap_or_else(|| Err(LlmError::Generate("no reply was written".into())));
                if let Ok(g) = &mut r {
                    g.usage.input_tokens += g.usage.cache_creation_input_tokens;
                    g.usage.cache_creation_input_tokens = 0;
                }
                on_reply(i, &r);
                out.push(r);
            }
            weights.clear();
            return out;
        }
        // A model that cannot continue a cached prefix: one whole prompt at a time.
        let mut out = Vec::with_capacity(n);
        for (i, suffix) in prompt.suffixes.iter().enumerate() {
            let result = (|| {
                let own = self.own_tokens(
                    &format!("{suffix}{close}"),
                    prefix.len() + prompt.max_tokens,
                )?;
                weights.clear();
                let all: Vec<u32> = prefix.iter().chain(&own).copied().collect();
                let logits = self.feed(&mut weights, &all, 0)?;
                let (text, produced, finish) = self.reply(
                    &mut weights,
                    logits,
                    prefix.len() + own.len(),
                    prompt.max_tokens,
                )?;
                Ok(Generation {
                    text,
                    usage: TokenUsage {
                        input_tokens: (prefix.len() + own.len()) as u64,
                        output_tokens: produced as u64,
                        ..Default::default()
                    },
                    finish,
                })
            })();
            on_reply(i, &result);
            out.push(result);
        }
        weights.clear();
        out
    }

    /// The reply to the first suffix, streamed. The prefix's keys and values stay in the
    /// cache afterwards: the next streamed reply whose prompt starts with the same tokens
    /// reads only what follows them (full-context answers over one base: the base is read
    /// once per process), reported as `cache_read_input_tokens`.
    async fn generate_streamed(
        &self,
        prompt: SharedPrompt<'_>,
        on_text: crate::OnText<'_>,
    ) -> Result<Generation, LlmError> {
        let suffix = prompt
            .suffixes
            .first()
            .ok_or_else(|| LlmError::Generate("no prompt to answer".into()))?;
        let (open, close) = self.template.user_turn(prompt.system);
        let prefix = self.encode(&format!("{open}{}", prompt.prefix))?;
        let own = self.own_tokens(
            &format!("{suffix}{close}"),
            prefix.len() + prompt.max_tokens,
        )?;
        let mut weights = self
            .weights
            .lock()
            .map_err(|_| LlmError::Generate("the model is poisoned".into()))?;
        let mut kept = self
            .kept
            .lock()
            .map_err(|_| LlmError::Generate("the model is poisoned".into()))?;
        let common = if weights.reusable() {
            kept.iter().zip(&prefix).take_while(|(a, b)| a == b).count()
        } else {
            0
        };
        kept.clear();
        if common == 0 {
            weights.clear();
        }
        if common < prefix.len() {
            self.feed(&mut weights, &prefix[common..], common)?;
        }
        let logits = self.feed(&mut weights, &own, prefix.len())?;
        if weights.reusable() {
            kept.extend_from_slice(&prefix);
        }
        let (ids, finish) = self.decode(
            &mut weights,
            logits,
            prefix.len() + own.len(),
            prompt.max_tokens,
            Some(on_text),
        )?;
        let text = self
            .tokenizer
            .decode(&ids, true)
            .map_err(|e| LlmError::Generate(format!("detokenizing: {e}")))?;
        Ok(Generation {
            text: text.trim().to_string(),
            usage: TokenUsage {
                input_tokens: own.len() as u64,
                cache_creation_input_tokens: (prefix.len() - common) as u64,
                cache_read_input_tokens: common as u64,
                output_tokens: ids.len() as u64,
            },
            finish,
        })
    }

    async fn judge_shared(&self, prompt: SharedPrompt<'_>) -> Vec<Result<f32, LlmError>> {
        let Some((yes, no)) = &self.answer_tokens else {
            return crate::judge_by_reply(self, prompt).await;
        };
        let n = prompt.suffixes.len();
        let (open, close) = self.template.user_turn(prompt.system);
        let fail_all = |e: LlmError| -> Vec<Result<f32, LlmError>> {
            let msg = e.to_string();
            let mut out = vec![Err(e)];
            out.extend((1..n).map(|_| Err(LlmError::Generate(msg.clone()))));
            out.truncate(n);
            out
        };
        let prefix = match self.encode(&format!("{open}{}", prompt.prefix)) {
            Ok(p) => p,
            Err(e) => return fail_all(e),
        };
        // Each passage's own tokens, or why it cannot be judged.
        let owns: Vec<_> = (prompt.suffixes.iter())
            .map(|suffix| self.own_tokens(&format!("{suffix}{close}"), prefix.len() + 1))
            .collect();
        let share = |logits: &[f32]| yes_share_of(logits, yes, no);
        let g = |e: candle_core::Error| LlmError::Generate(e.to_string());
        let mut weights = match self.weights.lock() {
            Ok(w) => w,
            Err(_) => return fail_all(LlmError::Generate("the model is poisoned".into())),
        };
        self.forget_kept();
        let mut out: Vec<Option<Result<f32, LlmError>>> = (0..n).map(|_| None).collect();
        if self.reuse_prefix && weights.reusable() {
            // The prefix once, then the passages side by side in groups of about
            // JUDGE_GROUP_TOKENS (see `Decoder::forward_branches`).
            let budget = JUDGE_GROUP_TOKENS.min(self.window.saturating_sub(prefix.len()));
            let groups = judge_groups(&owns, budget);
            let mut prefix_cached = false;
            for group in groups {
                let branches: Vec<&[u32]> = group
                    .iter()
                    .filter_map(|&i| owns[i].as_ref().ok().map(Vec::as_slice))
                    .collect();
                let result =
                    self.judge_branches(&mut weights, &prefix, &mut prefix_cached, &branches);
                match result {
                    Ok(rows) => {
                        for (&i, row) in group.iter().zip(&rows) {
                            out[i] = Some(share(row));
                        }
                    }
                    Err(e) => {
                        // A failure may leave the cache part-written: run the prefix again.
                        prefix_cached = false;
                        let msg = e.to_string();
                        for &i in &group {
                            out[i] = Some(Err(LlmError::Generate(msg.clone())));
                        }
                    }
                }
            }
        } else {
            // The prefix run again for every passage (no reuse, or a model that cannot
            // continue a cached prefix): one whole prompt at a time.
            for (i, own) in owns.iter().enumerate() {
                let Ok(own) = own else { continue };
                let result = (|| {
                    weights.clear();
                    let all: Vec<u32> = prefix.iter().chain(own).copied().collect();
                    let logits: Vec<f32> = self
                        .feed(&mut weights, &all, 0)?
                        .flatten_all()
                        .and_then(|l| l.to_dtype(candle_core::DType::F32))
                        .and_then(|l| l.to_vec1())
                        .map_err(g)?;
                    share(&logits)
                })();
                out[i] = Some(result);
            }
        }
        weights.clear();
        drop(weights);
        out.into_iter()
            .zip(owns)
            .map(|(judged, own)| match (judged, own) {
                (Some(r), _) => r,
                (None, Err(e)) => Err(e),
                (None, Ok(_)) => Err(LlmError::Generate("the passage was not judged".into())),
            })
            .collect()
    }
}

/// The share of "yes" in `logits` (the last position's): `yes` and `no` are the ids of the
/// answer tokens' spellings.
fn yes_share_of(logits: &[f32], yes: &[u32], no: &[u32]) -> Result<f32, LlmError> {
    let pick = |ids: &[u32]| -> Vec<f32> {
        ids.iter()
            .filter_map(|&i| logits.get(i as usize).copied())
            .collect()
    };
    crate::yes_share(&pick(yes), &pick(no))
        .ok_or_else(|| LlmError::Generate("no finite logit for yes or no".into()))
}

/// The judged passages (those with tokens) in groups of at most `budget` tokens, in order; a
/// passage longer than `budget` is a group of its own.
fn judge_groups(owns: &[Result<Vec<u32>, LlmError>], budget: usize) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut size = 0;
    for (i, own) in owns.iter().enumerate() {
        let Ok(own) = own else { continue };
        match groups.last_mut() {
            Some(g) if size + own.len() <= budget => g.push(i),
            _ => {
                groups.push(vec![i]);
                size = 0;
            }
        }
        size += own.len();
    }
    groups
}

/// The reply's last 8 tokens occur for the third time: small models, once in a loop, stay
/// in it until the token limit, and such a reply is rejected anyway.
fn repeats(out: &[u32]) -> bool {
    const N: usize = 8;
    if out.len() < 3 * N {
        return false;
    }
    let tail = &out[out.len() - N..];
    out.windows(N).filter(|w| *w == tail).count() >= 3
}

/// Generates one reply for a whole prompt, without any sharing (for tests and checks).
pub fn generate_once(
    llm: &LocalLlm,
    system: Option<&str>,
    user: &str,
    max_tokens: usize,
) -> Result<Generation, LlmError> {
    let (open, close) = llm.template.user_turn(system);
    let ids = llm.encode(&format!("{open}{user}{close}"))?;
    let mut w = llm
        .weights
        .lock()
        .map_err(|_| LlmError::Generate("the model is poisoned".into()))?;
    llm.forget_kept();
    w.clear();
    let logits = llm.feed(&mut w, &ids, 0)?;
    let (text, produced, finish) = llm.reply(&mut w, logits, ids.len(), max_tokens)?;
    w.clear();
    Ok(Generation {
        text,
        usage: TokenUsage {
            input_tokens: ids.len() as u64,
            output_tokens: produced as u64,
            ..Default::default()
        },
        finish,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_reply_going_round_in_circles_is_caught() {
        let round: Vec<u32> = (0..8).collect();
        let mut out: Vec<u32> = vec![100, 101];
        for _ in 0..2 {
            out.extend(&round);
        }
        assert!(!super::repeats(&out));
        out.extend(&round);
        assert!(super::repeats(&out));
        let varied: Vec<u32> = (0..60).collect();
        assert!(!super::repeats(&varied));
    }
}
