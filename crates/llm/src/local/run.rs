//! Loading a model and running it: the prompt read in pieces, the shared prefix kept in
//! the KV cache, replies written side by side.

use super::*;
use crate::chat::Template;
use crate::decoder::Decoder;
use crate::{Finish, Generation, LlmError, OnReply, SharedPrompt, TokenUsage};
use candle_core::quantized::gguf_file;
use candle_core::quantized::tokenizer::TokenizerFromGguf;
use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_gemma3;
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;
use tokenizers::Tokenizer;

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

    pub(super) fn encode(&self, text: &str) -> Result<Vec<u32>, LlmError> {
        self.tokenizer
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| LlmError::Generate(format!("tokenizing: {e}")))
    }

    /// Runs `tokens` from position `pos`, returning the logits after the last one.
    pub(super) fn feed(
        &self,
        w: &mut Weights,
        tokens: &[u32],
        pos: usize,
    ) -> Result<Tensor, LlmError> {
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
    pub(super) fn step(
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
    pub(super) fn decode(
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
    pub(super) fn side_by_side(
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
            let own = self.own_tokens(&format!("{suffix}{close}"), prefix.len() + max_tokens);
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
        let groups = self.reply_groups(&owns, prefix.len(), max_tokens);
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

    /// [`LocalLlm::side_by_side`]'s groups, in order: as many replies as fit side by side in
    /// the window after `prefix` tokens, each with room for `max_tokens`, at most
    /// [`LocalLlm::set_batch`] of them.
    fn reply_groups<'o>(
        &self,
        owns: &'o [(usize, Vec<u32>)],
        prefix: usize,
        max_tokens: usize,
    ) -> Vec<&'o [(usize, Vec<u32>)]> {
        let mut groups = Vec::new();
        let mut rest = owns;
        while !rest.is_empty() {
            let mut take = 0;
            let mut longest = 0;
            for (_, own) in rest.iter().take(self.batch) {
                let room = longest.max(own.len()) + max_tokens;
                if take > 0 && prefix + (take + 1) * room > self.window {
                    break;
                }
                longest = longest.max(own.len());
                take += 1;
            }
            let (group, tail) = rest.split_at(take.max(1));
            groups.push(group);
            rest = tail;
        }
        groups
    }

    /// One group of [`LocalLlm::side_by_side`]: forks the cache after `pos`, reads the
    /// replies' own prompts, then decodes greedily until every reply ends (the same stop
    /// rules as [`LocalLlm::decode`]), calling `finished` with each reply's tokens.
    pub(super) fn decode_group(
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

    /// A prompt's own tokens (`text`, closing the turn), or why they do not fit the window
    /// beside `outside` tokens (the shared prefix and the reply's room).
    pub(super) fn own_tokens(&self, text: &str, outside: usize) -> Result<Vec<u32>, LlmError> {
        let own = self.encode(text)?;
        let total = outside + own.len();
        if total > self.window {
            return Err(LlmError::TooLong {
                tokens: total,
                window: self.window,
            });
        }
        Ok(own)
    }

    /// The last position's logits of each of `branches`, read side by side after `prefix`
    /// (fed first unless `prefix_cached`; see `Decoder::forward_branches`).
    pub(super) fn judge_branches(
        &self,
        weights: &mut Weights,
        prefix: &[u32],
        prefix_cached: &mut bool,
        branches: &[&[u32]],
    ) -> Result<Vec<Vec<f32>>, LlmError> {
        let g = |e: candle_core::Error| LlmError::Generate(e.to_string());
        if !*prefix_cached {
            weights.clear();
            self.feed(weights, prefix, 0)?;
            *prefix_cached = true;
        }
        let started = Instant::now();
        let logits = weights
            .branches(branches, prefix.len())
            .map_err(g)?
            .to_dtype(candle_core::DType::F32)
            .and_then(|l| l.to_vec2())
            .map_err(g)?;
        if let Ok(mut s) = self.stats.lock() {
            s.prefill_tokens += branches.iter().map(|b| b.len() as u64).sum::<u64>();
            s.prefill += started.elapsed();
        }
        Ok(logits)
    }

    /// The cache no longer holds what a streamed reply kept (called with `weights` locked).
    pub(super) fn forget_kept(&self) {
        if let Ok(mut kept) = self.kept.lock() {
            kept.clear();
        }
    }

    pub(super) fn reply(
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
