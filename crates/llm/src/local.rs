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
use crate::decoder::Decoder;
use crate::{Finish, Generation, Llm, LlmError, OnReply, SharedPrompt, TokenUsage};
use candle_core::quantized::tokenizer::TokenizerFromGguf;
use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_gemma3;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokenizers::Tokenizer;

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

enum Weights {
    /// llama, qwen2, qwen3: our own forward pass, whose KV cache can be cut back to a prefix.
    Decoder(Decoder),
    /// candle-transformers' gemma3, whose cache cannot be reused.
    Gemma3(quantized_gemma3::ModelWeights),
}

impl Weights {
    /// Runs `tokens` from position `pos` (the cache keeps positions before it) and returns
    /// the logits after the last one.
    fn forward(
        &mut self,
        tokens: &[u32],
        pos: usize,
        device: &Device,
    ) -> candle_core::Result<Tensor> {
        match self {
            Weights::Decoder(m) => {
                if m.len() < pos {
                    candle_core::bail!("position {pos} is past the {} cached", m.len());
                }
                m.truncate(pos);
                m.forward(tokens)
            }
            Weights::Gemma3(m) => m.forward(&Tensor::new(tokens, device)?.unsqueeze(0)?, pos),
        }
    }

    /// Runs `branches` side by side after the first `pos` cached positions (llama/qwen
    /// only: callers check [`Weights::reusable`]) and returns each one's last logits.
    fn branches(&mut self, branches: &[&[u32]], pos: usize) -> candle_core::Result<Tensor> {
        match self {
            Weights::Decoder(m) => {
                if m.len() < pos {
                    candle_core::bail!("position {pos} is past the {} cached", m.len());
                }
                m.truncate(pos);
                m.forward_branches(branches)
            }
            Weights::Gemma3(_) => candle_core::bail!("gemma3 cannot run branches"),
        }
    }

    /// Starts `count` replies after the first `pos` cached positions, each with room for
    /// `room` tokens (llama/qwen only: callers check [`Weights::reusable`]).
    fn fork(&mut self, pos: usize, count: usize, room: usize) -> candle_core::Result<()> {
        match self {
            Weights::Decoder(m) => {
                if m.len() < pos {
                    candle_core::bail!("position {pos} is past the {} cached", m.len());
                }
                m.truncate(pos);
                m.fork(count, room)
            }
            Weights::Gemma3(_) => candle_core::bail!("gemma3 cannot fork"),
        }
    }

    /// New tokens for several forks in one pass; each step's last logits.
    fn forward_forks(
        &mut self,
        steps: &[(usize, &[u32])],
        prompt: bool,
    ) -> candle_core::Result<Tensor> {
        match self {
            Weights::Decoder(m) => m.forward_forks(steps, prompt),
            Weights::Gemma3(_) => candle_core::bail!("gemma3 cannot fork"),
        }
    }

    /// Whether a cached prefix can be continued after other replies were written from it.
    /// candle 0.11's gemma3 cannot continue a prompt from a cached prefix (its rectangular
    /// mask mixes dtypes), so it gets no reuse and one-piece prompts.
    fn reusable(&self) -> bool {
        matches!(self, Weights::Decoder(_))
    }

    /// Tokens per forward call while reading a prompt (gemma3: the whole prompt at once).
    fn piece(&self) -> usize {
        match self {
            Weights::Gemma3(_) => usize::MAX,
            _ => PREFILL_PIECE,
        }
    }

    fn clear(&mut self) {
        match self {
            Weights::Decoder(m) => m.truncate(0),
            // candle's gemma3 has no reset: a forward at position 0 replaces its cache.
            Weights::Gemma3(_) => {}
        }
    }
}

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

/// The SentencePiece tokenizer of a GGUF file ([`crate::spm`]).
fn spm_tokenizer(ct: &gguf_file::Content) -> Result<Tokenizer, String> {
    let get = |k: &str| {
        ct.metadata
            .get(k)
            .ok_or_else(|| format!("no {k} in the GGUF metadata"))
    };
    let array = |k: &str| -> Result<Vec<gguf_file::Value>, String> {
        get(k)?.to_vec().cloned().map_err(|e| format!("{k}: {e}"))
    };
    let tokens: Vec<String> = array("tokenizer.ggml.tokens")?
        .iter()
        .map(|v| v.to_string().cloned().map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let scores: Vec<f32> = array("tokenizer.ggml.scores")?
        .iter()
        .map(|v| v.to_f32().map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let types: Vec<i32> = match ct.metadata.get("tokenizer.ggml.token_type") {
        Some(v) => v
            .to_vec()
            .map_err(|e| e.to_string())?
            .iter()
            .map(|t| t.to_i32().map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?,
        None => vec![1; tokens.len()],
    };
    let unk = ct
        .metadata
        .get("tokenizer.ggml.unknown_token_id")
        .and_then(|v| v.to_u32().ok());
    let add_space_prefix = ct
        .metadata
        .get("tokenizer.ggml.add_space_prefix")
        .and_then(|v| v.to_bool().ok())
        .unwrap_or(true);
    crate::spm::build(&crate::spm::SpmVocab {
        tokens: &tokens,
        scores: &scores,
        types: &types,
        unk,
        add_space_prefix,
    })
}

trait ReadSeek: std::io::Read + std::io::Seek {}
impl<T: std::io::Read + std::io::Seek> ReadSeek for T {}

/// Quantizations whose dot products candle computes without SIMD (`vec_dot_unopt`).
fn is_slow(dtype: GgmlDType) -> bool {
    matches!(dtype, GgmlDType::Q4_1 | GgmlDType::Q5_0 | GgmlDType::Q5_1)
}

/// A copy of the file, in memory, with every matrix of a slow quantization (Q4_1, Q5_0,
/// Q5_1: candle has no SIMD dot product for them) re-quantized to Q8_0, which it has: SmolLM2
/// is shipped as Q4_1, and its generation ran 60% of the time in the scalar Q4_1 dot
/// product. Q8_0 holds a Q4_1 value to within 1/254 of its block's range. `None` when
/// nothing needs it. `situate-bench generate` loads its model through this too, so its
/// speeds are those of the path contexts run on.
pub fn widen_slow_quantizations<R: std::io::Read + std::io::Seek>(
    ct: &gguf_file::Content,
    reader: &mut R,
    device: &Device,
) -> candle_core::Result<Option<(gguf_file::Content, Vec<u8>)>> {
    if !ct.tensor_infos.values().any(|t| is_slow(t.ggml_dtype)) {
        return Ok(None);
    }
    let mut names: Vec<&String> = ct.tensor_infos.keys().collect();
    names.sort();
    let mut tensors = Vec::with_capacity(names.len());
    for name in &names {
        let t = ct.tensor(reader, name, device)?;
        let cols = t.shape().dims().last().copied().unwrap_or(0);
        let t = if is_slow(t.dtype()) && cols % 32 == 0 {
            QTensor::quantize(&t.dequantize(device)?, GgmlDType::Q8_0)?
        } else {
            t
        };
        tensors.push((name.as_str(), t));
    }
    let metadata: Vec<(&str, &gguf_file::Value)> =
        ct.metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
    let mut out = std::io::Cursor::new(Vec::new());
    gguf_file::write(&mut out, &metadata, &refs)?;
    let bytes = out.into_inner();
    let content = gguf_file::Content::read(&mut std::io::Cursor::new(&bytes))?;
    Ok(Some((content, bytes)))
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

/// The single tokens that spell a first word `yes` / `no` in the usual casings, with and
/// without a leading space; `None` when the vocabulary has no single token for one of them.
fn answer_tokens(tokenizer: &Tokenizer) -> Option<(Vec<u32>, Vec<u32>)> {
    let ids = |words: &[&str]| -> Vec<u32> {
        let mut v: Vec<u32> = words
            .iter()
            .flat_map(|w| [w.to_string(), format!(" {w}")])
            .filter_map(|w| {
                let e = tokenizer.encode(w.as_str(), false).ok()?;
                match e.get_ids() {
                    [one] => Some(*one),
                    _ => None,
                }
            })
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let yes = ids(&["yes", "Yes", "YES"]);
    let no = ids(&["no", "No", "NO"]);
    (!yes.is_empty() && !no.is_empty()).then_some((yes, no))
}

fn load_err(path: &Path, message: impl std::fmt::Display) -> LlmError {
    LlmError::Load {
        model: path.display().to_string(),
        message: message.to_string(),
    }
}

impl LocalLlm {
    /// Loads a GGUF file; `id` is recorded in provenance.
    pub fn load(path: &Path, id: String) -> Result<Self, LlmError> {
        let mut file = std::fs::File::open(path).map_err(|e| load_err(path, e))?;
        let ct = gguf_file::Content::read(&mut file)
            .map_err(|e| load_err(path, format!("not a readable GGUF file: {e}")))?;
        let text = |key: &str| {
            ct.metadata
                .get(key)
                .and_then(|v| v.to_string().ok())
                .cloned()
        };
        let arch = text("general.architecture")
            .ok_or_else(|| load_err(path, "no general.architecture in the GGUF metadata"))?;
        let window = ct
            .metadata
            .get(&format!("{arch}.context_length"))
            .and_then(|v| v.to_u32().ok())
            .unwrap_or(2048) as usize;
        let template = Template::detect(text("tokenizer.chat_template").as_deref(), &arch);
        let kind = text("tokenizer.ggml.model").unwrap_or_default();
        let tokenizer = match kind.as_str() {
            "gpt2" => {
                let mut t = Tokenizer::from_gguf(&ct)
                    .map_err(|e| load_err(path, format!("building its tokenizer: {e}")))?;
                if text("tokenizer.ggml.pre").as_deref() == Some("smollm") {
                    // SmolLM2's own tokenizer: digits one by one, then byte-level without a
                    // leading space (candle's generic fallback would add one).
                    use tokenizers::pre_tokenizers::{
                        byte_level::ByteLevel, digits::Digits, sequence::Sequence,
                    };
                    t.with_pre_tokenizer(Some(Sequence::new(vec![
                        Digits::new(true).into(),
                        ByteLevel::new(false, true, true).into(),
                    ])));
                }
                t
            }
            "llama" => spm_tokenizer(&ct).map_err(|e| load_err(path, e))?,
            other => {
                return Err(load_err(
                    path,
                    format!(
                        "its tokenizer is `{other}`; situate reads byte-level BPE (`gpt2`) and SentencePiece (`llama`) tokenizers from GGUF"
                    ),
                ));
            }
        };
        let mut stop: Vec<u32> = template
            .stop_markers()
            .iter()
            .filter_map(|m| tokenizer.token_to_id(m))
            .collect();
        if let Some(eos) = ct
            .metadata
            .get("tokenizer.ggml.eos_token_id")
            .and_then(|v| v.to_u32().ok())
        {
            stop.push(eos);
        }
        if stop.is_empty() {
            return Err(load_err(path, "no end-of-turn token found"));
        }
        let device = Device::Cpu;
        let model = |e: candle_core::Error| load_err(path, format!("loading the weights: {e}"));
        // Matrices in a quantization without a SIMD kernel in candle are widened to Q8_0.
        let (ct, mut file): (gguf_file::Content, Box<dyn ReadSeek>) =
            match widen_slow_quantizations(&ct, &mut file, &device).map_err(model)? {
                Some((ct, bytes)) => (ct, Box::new(std::io::Cursor::new(bytes))),
                None => (ct, Box::new(file)),
            };
        let weights = match arch.as_str() {
            a if crate::decoder::supports(a) => Weights::Decoder(
                Decoder::from_gguf(&ct, &mut file, a, window, &device).map_err(model)?,
            ),
            a if a.starts_with("gemma") => Weights::Gemma3(
                quantized_gemma3::ModelWeights::from_gguf(ct, &mut file, &device).map_err(model)?,
            ),
            other => {
                return Err(load_err(
                    path,
                    format!(
                        "architecture `{other}` is not supported (llama, qwen2, qwen3, gemma3 are)"
                    ),
                ));
            }
        };
        Ok(LocalLlm {
            id,
            weights: Mutex::new(weights),
            template,
            stop,
            window,
            device,
            reuse_prefix: true,
            batch: DEFAULT_BATCH,
            stats: Default::default(),
            answer_tokens: answer_tokens(&tokenizer),
            tokenizer,
            kept: Mutex::new(Vec::new()),
        })
    }

    /// Whether the shared prefix is run once and reused (the default) or run again for every
    /// reply (for measuring what reuse saves; the replies are the same).
    pub fn set_prefix_reuse(&mut self, reuse: bool) {
        self.reuse_prefix = reuse;
    }

    /// How many replies sharing a prefix are written side by side (1: one after the other;
    /// the replies are the same either way). Models that cannot continue a cached prefix
    /// (gemma3) write one at a time.
    pub fn set_batch(&mut self, replies: usize) {
        self.batch = replies.max(1);
    }

    /// Prompt and generation throughput so far.
    pub fn stats(&self) -> LocalStats {
        self.stats.lock().map(|s| *s).unwrap_or_default()
    }

    /// A handle on the counters that outlives handing the model over (boxed as a
    /// [`crate::Llm`]).
    pub fn stats_handle(&self) -> std::sync::Arc<Mutex<LocalStats>> {
        self.stats.clone()
    }

    /// The tokenizer read from the file.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The chat template in use.
    pub fn template(&self) -> &Template {
        &self.template
    }

    fn encode(&self, text: &str) -> Result<Vec<u32>, LlmError> {
        self.tokenizer
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| LlmError::Generate(format!("tokenizing: {e}")))
    }

    /// Runs `tokens` from position `pos`, returning the logits after the last one.
    fn feed(&self, w: &mut Weights, tokens: &[u32], pos: usize) -> Result<Tensor, LlmError> {
        let g = |e: candle_core::Error| LlmError::Generate(e.to_string());
        let started = Instant::now();
        let mut logits = None;
        let size = w.piece();
        for (i, piece) in tokens.chunks(size).enumerate() {
            logits = Some(w.forward(piece, pos + i * size, &self.device).map_err(g)?);
        }
        if let Ok(mut s) = self.stats.lock() {
            s.prefill_tokens += tokens.len() as u64;
            s.prefill += started.elapsed();
        }
        logits.ok_or_else(|| LlmError::Generate("empty prompt".into()))
    }

    /// One greedy step of a reply that already holds `out`, after a prompt of `prompt_len`
    /// tokens: the next token from `logits`, added to `out` unless it ends the turn, and why
    /// the reply ends here, if it does (the turn ended, the token limit or the window was
    /// reached, or it repeats itself).
    fn step(
        &self,
        logits: &Tensor,
        out: &mut Vec<u32>,
        prompt_len: usize,
        max_tokens: usize,
    ) -> Result<(u32, Option<Finish>), LlmError> {
        let next: u32 = logits
            .flatten_all()
            .and_then(|l| l.argmax(0))
            .and_then(|t| t.to_scalar())
            .map_err(|e| LlmError::Generate(e.to_string()))?;
        if self.stop.contains(&next) {
            return Ok((next, Some(Finish::Stop)));
        }
        out.push(next);
        let end = if out.len() >= max_tokens || prompt_len + out.len() >= self.window {
            Some(Finish::Length)
        } else if repeats(out) {
            Some(Finish::Loop)
        } else {
            None
        };
        Ok((next, end))
    }

    /// Greedy decoding from `logits` at position `pos`, after [`LocalLlm::step`]. With
    /// `on_text`, the text is handed on as it grows: each step's new characters once
    /// they are whole (a character split over tokens waits for its last token), leading
    /// white space left out. Without it nothing is detokenized until the end.
    fn decode(
        &self,
        w: &mut Weights,
        mut logits: Tensor,
        mut pos: usize,
        max_tokens: usize,
        on_text: Option<crate::OnText<'_>>,
    ) -> Result<(Vec<u32>, Finish), LlmError> {
        let g = |e: candle_core::Error| LlmError::Generate(e.to_string());
        let started = Instant::now();
        let mut out = Vec::new();
        let prompt_len = pos;
        let mut shown = 0;
        let finish = loop {
            let (next, end) = self.step(&logits, &mut out, prompt_len, max_tokens)?;
            if let Some(on_text) = on_text
                && let Ok(text) = self.tokenizer.decode(&out, true)
            {
                let text = text.trim_start();
                if !text.ends_with('\u{FFFD}') && text.len() > shown && text.is_char_boundary(shown)
                {
                    on_text(&text[shown..]);
                    shown = text.len();
                }
            }
            if let Some(finish) = end {
                break finish;
            }
            logits = w.forward(&[next], pos, &self.device).map_err(g)?;
            pos += 1;
        };
        if let Ok(mut s) = self.stats.lock() {
            s.decode_tokens += out.len() as u64;
            s.decode += started.elapsed();
        }
        Ok((out, finish))
    }

    /// The replies to `prompt` after its `prefix` (already tokenized), written side by side
    /// in groups of up to [`LocalLlm::set_batch`]: the prefix is read once; each group forks
    /// the cache after it ([`Decoder::fork`]), reads each reply's own prompt (passes of up
    /// to [`FORK_PIECE`] tokens), then decodes one token for every reply still running per
    /// pass. Each reply is handed to `on_reply` as soon as it ends. Greedy
    /// decoding: every reply is the one it would be alone.
    fn side_by_side(
        &self,
        w: &mut Weights,
        prefix: &[u32],
        prompt: &SharedPrompt<'_>,
        close: &str,
        on_reply: OnReply<'_>,
    ) -> Vec<Result<Generation, LlmError>> {
        let n = prompt.suffixes.len();
        let max_tokens = prompt.max_tokens;
        let mut out: Vec<Option<Result<Generation, LlmError>>> = (0..n).map(|_| None).collect();
        // Each reply's own tokens, or why it cannot be written.
        let mut owns: Vec<(usize, Vec<u32>)> = Vec::with_capacity(n);
        for (i, suffix) in prompt.suffixes.iter().enumerate() {
            let own = self.encode(&format!("{suffix}{close}")).and_then(|own| {
                let total = prefix.len() + own.len() + max_tokens;
                if total > self.window {
                    return Err(LlmError::TooLong {
                        tokens: total,
                        window: self.window,
                    });
                }
                Ok(own)
            });
            match own {
                Ok(own) => owns.push((i, own)),
                Err(e) => {
                    let r = Err(e);
                    on_reply(i, &r);
                    out[i] = Some(r);
                }
            }
        }
        // The prefix is billed once, to the first reply written, as providers bill it.
        let first = owns.first().map(|(i, _)| *i);
        // Groups in order, as many replies as fit side by side in the window.
        let mut groups: Vec<&[(usize, Vec<u32>)]> = Vec::new();
        let mut rest = owns.as_slice();
        while !rest.is_empty() {
            let mut take = 0;
            let mut longest = 0;
            for (_, own) in rest.iter().take(self.batch) {
                let room = longest.max(own.len()) + max_tokens;
                if take > 0 && prefix.len() + (take + 1) * room > self.window {
                    break;
                }
                longest = longest.max(own.len());
                take += 1;
            }
            let (group, tail) = rest.split_at(take.max(1));
            groups.push(group);
            rest = tail;
        }
        let out = std::cell::RefCell::new(out);
        let mut prefix_cached = false;
        for group in groups {
            let mut finished = |k: usize, r: ReplyTokens| {
                let (i, own) = &group[k];
                let r = r.and_then(|(ids, finish)| {
                    let text = self
                        .tokenizer
                        .decode(&ids, true)
                        .map_err(|e| LlmError::Generate(format!("detokenizing: {e}")))?;
                    let mut usage = TokenUsage {
                        input_tokens: own.len() as u64,
                        output_tokens: ids.len() as u64,
                        ..Default::default()
                    };
                    if Some(*i) == first {
                        usage.cache_creation_input_tokens = prefix.len() as u64;
                    } else {
                        usage.cache_read_input_tokens = prefix.len() as u64;
                    }
                    Ok(Generation {
                        text: text.trim().to_string(),
                        usage,
                        finish,
                    })
                });
                on_reply(*i, &r);
                out.borrow_mut()[*i] = Some(r);
            };
            let result = (|| {
                if !prefix_cached {
                    w.clear();
                    self.feed(w, prefix, 0)?;
                    prefix_cached = true;
                }
                self.decode_group(w, prefix.len(), group, max_tokens, &mut finished)
            })();
            if let Err(e) = result {
                // Every reply of the group not yet ended gets the error; the cache may be
                // part-written: the prefix is read again for the next group.
                prefix_cached = false;
                let msg = e.to_string();
                for (k, (i, _)) in group.iter().enumerate() {
                    if out.borrow()[*i].is_none() {
                        finished(k, Err(LlmError::Generate(msg.clone())));
                    }
                }
            }
        }
        out.into_inner()
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(LlmError::Generate("no reply was written".into()))))
            .collect()
    }

    /// One group of [`LocalLlm::side_by_side`]: forks the cache after `pos`, reads the
    /// replies' own prompts, then decodes greedily until every reply ends (the same stop
    /// rules as [`LocalLlm::decode`]), calling `finished` with each reply's tokens.
    fn decode_group(
        &self,
        w: &mut Weights,
        pos: usize,
        group: &[(usize, Vec<u32>)],
        max_tokens: usize,
        finished: &mut dyn FnMut(usize, ReplyTokens),
    ) -> Result<(), LlmError> {
        let g = |e: candle_core::Error| LlmError::Generate(e.to_string());
        let longest = group.iter().map(|(_, o)| o.len()).max().unwrap_or(0);
        w.fork(pos, group.len(), longest + max_tokens).map_err(g)?;
        // Each reply's own prompt in passes of its own: a row's f32 product (gemm) can depend
        // on how many rows its pass has (the contexts of three codebase documents changed
        // when prompts shared passes), so a reply's prompt is read the same way whatever its
        // group, and its reply is the one written alone. A pass of a few hundred rows keeps
        // the products busy anyway.
        let started = Instant::now();
        let mut logits: Vec<Option<Tensor>> = vec![None; group.len()];
        let mut fed = 0;
        for (k, (_, own)) in group.iter().enumerate() {
            for piece in own.chunks(FORK_PIECE) {
                logits[k] = Some(
                    w.forward_forks(&[(k, piece)], true)
                        .and_then(|l| l.get(0))
                        .map_err(g)?,
                );
            }
            fed += own.len();
        }
        if let Ok(mut s) = self.stats.lock() {
            s.prefill_tokens += fed as u64;
            s.prefill += started.elapsed();
        }
        // Decoding: one token for every reply still running per pass.
        let started = Instant::now();
        let mut produced = 0u64;
        let mut replies: Vec<Vec<u32>> = vec![Vec::new(); group.len()];
        let mut live: Vec<bool> = vec![true; group.len()];
        loop {
            let mut next_tokens: Vec<(usize, [u32; 1])> = Vec::new();
            for k in 0..group.len() {
                if !live[k] {
                    continue;
                }
                let Some(l) = &logits[k] else {
                    return Err(LlmError::Generate("a reply has no logits".into()));
                };
                let out = &mut replies[k];
                let held = out.len();
                let (next, end) = self.step(l, out, pos + group[k].1.len(), max_tokens)?;
                produced += (out.len() - held) as u64;
                match end {
                    Some(finish) => {
                        live[k] = false;
                        finished(k, Ok((std::mem::take(out), finish)));
                    }
                    None => next_tokens.push((k, [next])),
                }
            }
            if next_tokens.is_empty() {
                break;
            }
            let steps: Vec<(usize, &[u32])> = next_tokens
                .iter()
                .map(|(k, t)| (*k, t.as_slice()))
                .collect();
            let rows = w.forward_forks(&steps, false).map_err(g)?;
            for (row, (k, _)) in next_tokens.iter().enumerate() {
                logits[*k] = Some(rows.get(row).map_err(g)?);
            }
        }
        if let Ok(mut s) = self.stats.lock() {
            s.decode_tokens += produced;
            s.decode += started.elapsed();
        }
        Ok(())
    }

    /// The cache no longer holds what a streamed reply kept (called with `weights` locked).
    fn forget_kept(&self) {
        if let Ok(mut kept) = self.kept.lock() {
            kept.clear();
        }
    }

    fn reply(
        &self,
        w: &mut Weights,
        logits: Tensor,
        pos: usize,
        max_tokens: usize,
    ) -> Result<(String, usize, Finish), LlmError> {
        let (ids, finish) = self.decode(w, logits, pos, max_tokens, None)?;
        let text = self
            .tokenizer
            .decode(&ids, true)
            .map_err(|e| LlmError::Generate(format!("detokenizing: {e}")))?;
        Ok((text.trim().to_string(), ids.len(), finish))
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
                let own = self.encode(&format!("{suffix}{close}"))?;
                let total = prefix.len() + own.len() + prompt.max_tokens;
                if total > self.window {
                    return Err(LlmError::TooLong {
                        tokens: total,
                        window: self.window,
                    });
                }
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
        let own = self.encode(&format!("{suffix}{close}"))?;
        let total = prefix.len() + own.len() + prompt.max_tokens;
        if total > self.window {
            return Err(LlmError::TooLong {
                tokens: total,
                window: self.window,
            });
        }
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
        let owns: Vec<Result<Vec<u32>, LlmError>> = prompt
            .suffixes
            .iter()
            .map(|suffix| {
                let own = self.encode(&format!("{suffix}{close}"))?;
                let total = prefix.len() + own.len() + 1;
                if total > self.window {
                    return Err(LlmError::TooLong {
                        tokens: total,
                        window: self.window,
                    });
                }
                Ok(own)
            })
            .collect();
        let share = |logits: &[f32]| -> Result<f32, LlmError> {
            let pick = |ids: &[u32]| -> Vec<f32> {
                ids.iter()
                    .filter_map(|&i| logits.get(i as usize).copied())
                    .collect()
            };
            crate::yes_share(&pick(yes), &pick(no))
                .ok_or_else(|| LlmError::Generate("no finite logit for yes or no".into()))
        };
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
            let mut prefix_cached = false;
            for group in groups {
                let result = (|| -> Result<Vec<Vec<f32>>, LlmError> {
                    if !prefix_cached {
                        weights.clear();
                        self.feed(&mut weights, &prefix, 0)?;
                        prefix_cached = true;
                    }
                    let branches: Vec<&[u32]> = group
                        .iter()
                        .filter_map(|&i| owns[i].as_ref().ok().map(Vec::as_slice))
                        .collect();
                    let started = Instant::now();
                    let logits = weights
                        .branches(&branches, prefix.len())
                        .map_err(g)?
                        .to_dtype(candle_core::DType::F32)
                        .and_then(|l| l.to_vec2())
                        .map_err(g)?;
                    if let Ok(mut s) = self.stats.lock() {
                        s.prefill_tokens += branches.iter().map(|b| b.len() as u64).sum::<u64>();
                        s.prefill += started.elapsed();
                    }
                    Ok(logits)
                })();
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
