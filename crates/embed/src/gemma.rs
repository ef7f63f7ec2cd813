//! EmbeddingGemma-300M sentence embeddings in candle, from the sentence-transformers folder
//! `situate models install embeddinggemma-300m` unpacks (under the Gemma terms of use).
//!
//! The text model is Gemma 3's decoder run as an encoder, as Hugging Face's
//! `Gemma3TextModel` computes it with `use_bidirectional_attention`:
//! - token embeddings scaled by √hidden;
//! - 24 pre- and post-normed layers (RMSNorm with weight `1 + w`): attention with 3 query
//!   heads sharing one key/value head of 256, RMSNorm on each query and key head, rotary
//!   positions (θ = 10,000 on local layers, 1,000,000 on global ones), scores scaled by
//!   `query_pre_attn_scalar`^-½; every sixth layer global, the others attending only to
//!   tokens at most 256 positions away on either side (a window of 512 split both ways,
//!   as Hugging Face builds the bidirectional mask); a gated feed-forward layer
//!   (tanh-GELU gate times up, then down);
//! - a final RMSNorm.
//!
//! Then mean pooling over every token (the prompt included), the two dense layers of
//! `2_Dense` and `3_Dense` (768 → 3,072 → 768, no bias, no activation) and unit length; a
//! Matryoshka dimension keeps the first 512, 256 or 128 values and normalises again.
//! Queries are prefixed `task: search result | query: `, documents `title: none | text: `
//! (`config_sentence_transformers.json`).
//!
//! Memory: the vocabulary table (262,144 × 768 f32, 805 MB) is read from the memory-mapped
//! file a row per token, never copied whole, so only the pages of tokens seen stay
//! resident; the layers' weights (about 400 MB) are loaded.

use crate::attend::{Heads, Linear, attend};
use candle_core::safetensors::MmapedSafetensors;
use candle_core::{D, DType, Device, Tensor};
use situate_core::{EmbedError, EmbedKind, Embedder};
use std::path::Path;
use tokenizers::Tokenizer;

/// The prompt before a query (`config_sentence_transformers.json`'s `query`).
pub const QUERY_PROMPT: &str = "task: search result | query: ";
/// The prompt before a document, with its title slot empty.
pub const DOCUMENT_PROMPT: &str = "title: none | text: ";
/// The Matryoshka dimensions the model was trained to keep.
pub const DIMENSIONS: [usize; 4] = [768, 512, 256, 128];

/// Tokens per forward pass (texts are packed up to this).
const BATCH_TOKENS: usize = 4096;

/// The model's `config.json`, as far as it is read.
#[derive(serde::Deserialize)]
struct Config {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: usize,
    head_dim: usize,
    rms_norm_eps: f64,
    rope_theta: f64,
    rope_local_base_freq: f64,
    sliding_window: usize,
    query_pre_attn_scalar: f64,
    max_position_embeddings: usize,
    layer_types: Vec<String>,
    #[serde(default)]
    use_bidirectional_attention: bool,
}

struct Layer {
    input_norm: Tensor,
    qkv: Linear,
    q_norm: Tensor,
    k_norm: Tensor,
    o: Linear,
    post_attention_norm: Tensor,
    pre_ff_norm: Tensor,
    gate_up: Linear,
    down: Linear,
    post_ff_norm: Tensor,
    /// A sliding-window layer (local rotary, window mask) or a global one.
    local: bool,
}

/// How an EmbeddingGemma embedder runs.
#[derive(Debug, Clone)]
pub struct GemmaOptions {
    /// The vector's dimension: 768, or a Matryoshka prefix (512, 256, 128).
    pub dim: usize,
    /// The longest input in tokens, special tokens included (the model reads 2,048).
    pub max_tokens: usize,
    /// Passages by late chunking ([`situate_core::Embedder::embed_late`]); the model id
    /// is suffixed `:late`.
    pub late: bool,
}

impl Default for GemmaOptions {
    fn default() -> Self {
        GemmaOptions {
            dim: 768,
            max_tokens: 2048,
            late: false,
        }
    }
}

/// EmbeddingGemma-300M on the CPU.
pub struct GemmaEmbedder {
    id: String,
    tokenizer: Tokenizer,
    weights: MmapedSafetensors,
    layers: Vec<Layer>,
    final_norm: Tensor,
    dense: [Linear; 2],
    /// cos and sin of every position, local (θ = 10,000) and global rotary.
    rope_local: (Tensor, Tensor),
    rope_global: (Tensor, Tensor),
    vocab: usize,
    hidden: usize,
    heads: Heads,
    window: usize,
    eps: f32,
    options: GemmaOptions,
}

fn err(id: &str, m: impl std::fmt::Display) -> EmbedError {
    EmbedError {
        model: id.to_string(),
        message: m.to_string(),
    }
}

/// Splits texts (as token ids) into runs of about `tokens` tokens each, in order (a text
/// longer than that is a run of its own).
pub(crate) fn token_batches(texts: &[Vec<u32>], tokens: usize) -> Vec<&[Vec<u32>]> {
    let mut out = Vec::new();
    let (mut start, mut sum) = (0, 0);
    for (i, t) in texts.iter().enumerate() {
        if sum > 0 && sum + t.len() > tokens {
            out.push(&texts[start..i]);
            (start, sum) = (i, 0);
        }
        sum += t.len();
    }
    if start < texts.len() {
        out.push(&texts[start..]);
    }
    out
}

/// Cuts a tokenized input (special tokens included) to `max` tokens the way the
/// `tokenizers` crate's truncation does with a post-processor: the first `max - 1` tokens,
/// then the last (the closing special token, `[SEP]`, `</s>` or `<eos>`). Returns how many
/// tokens were cut. Cutting by hand rather than in the tokenizer keeps the full count, so
/// a cut is never silent ([`situate_core::Embedder::input_tokens`]).
pub(crate) fn fit(ids: &mut Vec<u32>, max: usize) -> usize {
    if ids.len() <= max || max < 2 {
        return 0;
    }
    let cut = ids.len() - max;
    let last = ids[ids.len() - 1];
    ids.truncate(max - 1);
    ids.push(last);
    cut
}

/// `v` at unit length (a zero vector stays zero).
pub(crate) fn unit(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

/// cos and sin of rotary angles for positions 0..n (n × head_dim/2 each).
pub(crate) fn rope_table(
    n: usize,
    head_dim: usize,
    base: f64,
) -> candle_core::Result<(Tensor, Tensor)> {
    let half = head_dim / 2;
    let inv: Vec<f32> = (0..half)
        .map(|i| (1.0 / base.powf((2 * i) as f64 / head_dim as f64)) as f32)
        .collect();
    let mut angles = Vec::with_capacity(n * half);
    for p in 0..n {
        angles.extend(inv.iter().map(|f| p as f32 * f));
    }
    let t = Tensor::from_vec(angles, (n, half), &Device::Cpu)?;
    Ok((t.cos()?, t.sin()?))
}

impl GemmaEmbedder {
    /// Loads the sentence-transformers folder `dir`; `id` is the model id.
    pub fn load(dir: &Path, id: String, options: GemmaOptions) -> Result<Self, EmbedError> {
        if !DIMENSIONS.contains(&options.dim) {
            return Err(err(
                &id,
                format!(
                    "EmbeddingGemma's dimension is one of 768, 512, 256, 128 (Matryoshka), not {}",
                    options.dim
                ),
            ));
        }
        let file =
            |name: &str| crate::encoder::model_file(dir, name, "model").map_err(|m| err(&id, m));
        let text = std::fs::read_to_string(file("config.json")?).map_err(|e| err(&id, e))?;
        let c: Config = serde_json::from_str(&text).map_err(|e| {
            err(
                &id,
                format!("config.json is not a Gemma 3 text config: {e}"),
            )
        })?;
        if !c.use_bidirectional_attention {
            return Err(err(
                &id,
                "config.json does not ask for bidirectional attention: not an EmbeddingGemma model",
            ));
        }
        let mut tokenizer = Tokenizer::from_file(file("tokenizer.json")?)
            .map_err(|e| err(&id, format!("tokenizer.json: {e}")))?;
        let max_tokens = options.max_tokens.clamp(2, c.max_position_embeddings);
        // Inputs are cut by hand ([`fit`]), so the tokenizer cuts nothing.
        tokenizer
            .with_truncation(None)
            .map_err(|e| err(&id, format!("setting truncation: {e}")))?;
        tokenizer.with_padding(None);
        let dense = [
            Self::dense(&file("2_Dense/model.safetensors")?),
            Self::dense(&file("3_Dense/model.safetensors")?),
        ];
        let [Ok(d2), Ok(d3)] = dense else {
            return Err(err(&id, "2_Dense or 3_Dense: no linear.weight"));
        };
        // SAFETY: the weights file is memory-mapped read-only; situate never writes it, and
        // a model directory changed under a running process is outside what it promises.
        let weights = unsafe { MmapedSafetensors::new(file("model.safetensors")?) }
            .map_err(|e| err(&id, format!("model.safetensors: {e}")))?;
        let layers = (0..c.num_hidden_layers)
            .map(|i| Self::layer(&weights, &c, i))
            .collect::<candle_core::Result<Vec<_>>>()
            .map_err(|e| err(&id, format!("loading the weights: {e}")))?;
        let final_norm = Self::norm(&weights, "norm.weight")
            .map_err(|e| err(&id, format!("loading the weights: {e}")))?;
        let tables = (|| {
            Ok::<_, candle_core::Error>((
                rope_table(
                    c.max_position_embeddings,
                    c.head_dim,
                    c.rope_local_base_freq,
                )?,
                rope_table(c.max_position_embeddings, c.head_dim, c.rope_theta)?,
            ))
        })()
        .map_err(|e| err(&id, e))?;
        let embedder = GemmaEmbedder {
            id: late_id(Self::id_for(id.clone(), options.dim), options.late),
            tokenizer,
            weights,
            layers,
            final_norm,
            dense: [d2, d3],
            rope_local: tables.0,
            rope_global: tables.1,
            vocab: c.vocab_size,
            hidden: c.hidden_size,
            heads: Heads {
                heads: c.num_attention_heads,
                kv_heads: c.num_key_value_heads,
                head_dim: c.head_dim,
                scale: c.query_pre_attn_scalar.powf(-0.5),
            },
            window: c.sliding_window,
            eps: c.rms_norm_eps as f32,
            options: GemmaOptions {
                max_tokens,
                ..options
            },
        };
        // The table must be the size config.json says (rows are read from it by offset).
        let rows = embedder
            .weights
            .get("embed_tokens.weight")
            .map(|t| t.data().len())
            .map_err(|e| err(&id, format!("embed_tokens.weight: {e}")))?;
        if rows != c.vocab_size * c.hidden_size * 4 {
            return Err(err(
                &id,
                "embed_tokens.weight is not an f32 table of vocab_size × hidden_size",
            ));
        }
        Ok(embedder)
    }

    /// The model id of a Matryoshka dimension: `id`, suffixed `:DIM` below 768 (its
    /// vectors are another model's as far as the cache and an index are concerned).
    pub fn id_for(id: String, dim: usize) -> String {
        if dim == DIMENSIONS[0] {
            id
        } else {
            format!("{id}:{dim}")
        }
    }

    fn dense(path: &Path) -> candle_core::Result<Linear> {
        let t = candle_core::safetensors::load(path, &Device::Cpu)?;
        let w = t
            .get("linear.weight")
            .ok_or_else(|| candle_core::Error::msg("no linear.weight"))?;
        Linear::fused(&[w.to_dtype(DType::F32)?])
    }

    /// A Gemma RMSNorm's weight as the factor it multiplies by: `1 + w`.
    fn norm(w: &MmapedSafetensors, name: &str) -> candle_core::Result<Tensor> {
        w.load(name, &Device::Cpu)?.to_dtype(DType::F32)? + 1.0
    }

    fn layer(w: &MmapedSafetensors, c: &Config, i: usize) -> candle_core::Result<Layer> {
        let get = |name: &str| {
            w.load(&format!("layers.{i}.{name}"), &Device::Cpu)?
                .to_dtype(DType::F32)
        };
        let norm = |name: &str| Self::norm(w, &format!("layers.{i}.{name}"));
        let local = match c.layer_types.get(i).map(String::as_str) {
            Some("sliding_attention") => true,
            Some("full_attention") => false,
            other => candle_core::bail!("layer {i}: unknown attention type {other:?}"),
        };
        let gate_up = Linear::fused(&[get("mlp.gate_proj.weight")?, get("mlp.up_proj.weight")?])?;
        if gate_up.outputs()? != 2 * c.intermediate_size {
            candle_core::bail!("layer {i}: the feed-forward layer is not intermediate_size wide");
        }
        Ok(Layer {
            input_norm: norm("input_layernorm.weight")?,
            qkv: Linear::fused(&[
                get("self_attn.q_proj.weight")?,
                get("self_attn.k_proj.weight")?,
                get("self_attn.v_proj.weight")?,
            ])?,
            q_norm: norm("self_attn.q_norm.weight")?,
            k_norm: norm("self_attn.k_norm.weight")?,
            o: Linear::fused(&[get("self_attn.o_proj.weight")?])?,
            post_attention_norm: norm("post_attention_layernorm.weight")?,
            pre_ff_norm: norm("pre_feedforward_layernorm.weight")?,
            gate_up,
            down: Linear::fused(&[get("mlp.down_proj.weight")?])?,
            post_ff_norm: norm("post_feedforward_layernorm.weight")?,
            local,
        })
    }

    /// The longest input in tokens (special tokens included); longer texts are cut.
    pub fn max_tokens(&self) -> usize {
        self.options.max_tokens
    }

    /// Token ids of one text as the model sees it (`<bos>` … `<eos>`, cut to the window).
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        let mut ids = self.full_ids(text)?;
        fit(&mut ids, self.options.max_tokens);
        Ok(ids)
    }

    fn full_ids(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        Ok(self
            .tokenizer
            .encode(text, true)
            .map_err(|e| err(&self.id, e))?
            .get_ids()
            .to_vec())
    }

    /// The prompt before a text of `kind`.
    fn prompt(kind: EmbedKind) -> &'static str {
        match kind {
            EmbedKind::Query => QUERY_PROMPT,
            EmbedKind::Passage => DOCUMENT_PROMPT,
        }
    }

    /// The scaled embeddings of `ids`, read row by row from the memory-mapped table.
    fn embed_tokens(&self, ids: &[u32]) -> candle_core::Result<Tensor> {
        let table = self.weights.get("embed_tokens.weight")?;
        let bytes = table.data();
        let h = self.hidden;
        let scale = (h as f32).sqrt();
        let mut out = Vec::with_capacity(ids.len() * h);
        for &id in ids {
            let id = id as usize;
            if id >= self.vocab {
                candle_core::bail!("token id {id} is outside the vocabulary");
            }
            let row = &bytes[id * h * 4..(id + 1) * h * 4];
            out.extend(
                row.chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * scale),
            );
        }
        Tensor::from_vec(out, (ids.len(), h), &Device::Cpu)
    }

    /// The pooled (mean of the final-normed states), densed vectors of texts given as token
    /// ids, before normalisation.
    fn pooled(&self, texts: &[Vec<u32>]) -> candle_core::Result<Vec<Vec<f32>>> {
        let (x, segs) = self.states(texts)?;
        let means: Vec<Tensor> = segs
            .iter()
            .map(|&(s, n)| x.narrow(0, s, n)?.mean_keepdim(0))
            .collect::<candle_core::Result<_>>()?;
        self.head(&Tensor::cat(&means, 0)?)
    }

    /// The dense layers over pooled rows.
    fn head(&self, pooled: &Tensor) -> candle_core::Result<Vec<Vec<f32>>> {
        self.dense[1]
            .forward(&self.dense[0].forward(pooled)?)?
            .to_vec2::<f32>()
    }

    /// The final-normed token states of texts packed end to end, and each text's (first
    /// row, rows).
    fn states(&self, texts: &[Vec<u32>]) -> candle_core::Result<(Tensor, Vec<(usize, usize)>)> {
        let dev = Device::Cpu;
        let mut ids = Vec::new();
        let mut positions = Vec::new();
        let mut segs = Vec::new();
        for t in texts {
            segs.push((ids.len(), t.len()));
            ids.extend_from_slice(t);
            positions.extend(0..t.len() as u32);
        }
        let total = ids.len();
        let positions = Tensor::new(positions.as_slice(), &dev)?;
        let rope = |(cos, sin): &(Tensor, Tensor)| -> candle_core::Result<(Tensor, Tensor)> {
            Ok((
                cos.index_select(&positions, 0)?,
                sin.index_select(&positions, 0)?,
            ))
        };
        let (local, global) = (rope(&self.rope_local)?, rope(&self.rope_global)?);
        // On local layers a token sees the tokens at most half the window away on either
        // side (Hugging Face's bidirectional Gemma 3 halves `sliding_window`: 512 → 257,
        // distance < 257; the mask it builds for a 1,504-token text was read to check).
        let reach = self.window / 2;
        let masks = segs
            .iter()
            .map(|&(_, n)| {
                if n <= reach + 1 {
                    return Ok(None);
                }
                let mut m = vec![0f32; n * n];
                for i in 0..n {
                    for j in 0..n {
                        if i.abs_diff(j) > reach {
                            m[i * n + j] = f32::NEG_INFINITY;
                        }
                    }
                }
                Tensor::from_vec(m, (n, n), &dev).map(Some)
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let Heads {
            heads,
            kv_heads,
            head_dim: d,
            ..
        } = self.heads;
        let mut x = self.embed_tokens(&ids)?;
        for l in &self.layers {
            let h = candle_nn::ops::rms_norm(&x, &l.input_norm, self.eps)?;
            let qkv = l.qkv.forward(&h)?;
            let q = qkv.narrow(1, 0, heads * d)?.reshape((total, heads, d))?;
            let k = qkv
                .narrow(1, heads * d, kv_heads * d)?
                .reshape((total, kv_heads, d))?;
            let v = qkv.narrow(1, (heads + kv_heads) * d, kv_heads * d)?;
            let q = candle_nn::ops::rms_norm(&q.contiguous()?, &l.q_norm, self.eps)?;
            let k = candle_nn::ops::rms_norm(&k.contiguous()?, &l.k_norm, self.eps)?;
            let (cos, sin) = if l.local { &local } else { &global };
            let q = candle_nn::rotary_emb::rope_thd(&q.unsqueeze(0)?, cos, sin)?
                .reshape((total, heads * d))?;
            let k = candle_nn::rotary_emb::rope_thd(&k.unsqueeze(0)?, cos, sin)?
                .reshape((total, kv_heads * d))?;
            let v = v.contiguous()?;
            let mut ctx = Vec::with_capacity(segs.len());
            for (&(s, n), mask) in segs.iter().zip(&masks) {
                let mask = if l.local { mask.as_ref() } else { None };
                ctx.push(attend(
                    &q.narrow(0, s, n)?,
                    &k.narrow(0, s, n)?,
                    &v.narrow(0, s, n)?,
                    self.heads,
                    mask,
                )?);
            }
            let attn = l.o.forward(&Tensor::cat(&ctx, 0)?)?;
            x = (x + candle_nn::ops::rms_norm(&attn, &l.post_attention_norm, self.eps)?)?;
            let h = candle_nn::ops::rms_norm(&x, &l.pre_ff_norm, self.eps)?;
            let gu = l.gate_up.forward(&h)?;
            let half = gu.dim(D::Minus1)? / 2;
            let mid = (gu.narrow(1, 0, half)?.gelu()? * gu.narrow(1, half, half)?)?;
            let y = l.down.forward(&mid)?;
            x = (x + candle_nn::ops::rms_norm(&y, &l.post_ff_norm, self.eps)?)?;
        }
        let x = candle_nn::ops::rms_norm(&x, &self.final_norm, self.eps)?;
        Ok((x, segs))
    }

    /// Late chunking: `document` read whole after the document prompt (in overlapping
    /// windows when longer than the model reads, [`late_windows`]), each span's tokens'
    /// states averaged, then the dense layers, unit length and the Matryoshka cut.
    pub fn embed_late_sync(
        &self,
        document: &str,
        spans: &[(usize, usize)],
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let text = format!("{DOCUMENT_PROMPT}{document}");
        let enc = self
            .tokenizer
            .encode(text.as_str(), true)
            .map_err(|e| err(&self.id, e))?;
        let shifted: Vec<(usize, usize)> = spans
            .iter()
            .map(|&(a, b)| (a + DOCUMENT_PROMPT.len(), b + DOCUMENT_PROMPT.len()))
            .collect();
        let pooled = late_pool(
            enc.get_ids(),
            enc.get_offsets(),
            &shifted,
            self.options.max_tokens,
            |windows| self.states(windows),
        )
        .and_then(|rows| self.head(&rows))
        .map_err(|e| err(&self.id, format!("late chunking: {e}")))?;
        Ok(pooled.into_iter().map(|v| self.finish(v)).collect())
    }

    /// Unit length, then the Matryoshka cut normalised again.
    fn finish(&self, v: Vec<f32>) -> Vec<f32> {
        let mut v = unit(v);
        if self.options.dim < v.len() {
            v.truncate(self.options.dim);
            v = unit(v);
        }
        v
    }

    /// Embeds texts synchronously, each prefixed by its kind's prompt: unit length, cut to
    /// the Matryoshka dimension and normalised again.
    pub fn embed_sync(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        let prompt = Self::prompt(kind);
        let inputs: Vec<String> = texts.iter().map(|t| format!("{prompt}{t}")).collect();
        let encodings = self
            .tokenizer
            .encode_batch(inputs, true)
            .map_err(|e| err(&self.id, e))?;
        let ids: Vec<Vec<u32>> = encodings
            .iter()
            .map(|e| {
                let mut ids = e.get_ids().to_vec();
                fit(&mut ids, self.options.max_tokens);
                ids
            })
            .collect();
        let mut out = Vec::with_capacity(texts.len());
        for batch in token_batches(&ids, BATCH_TOKENS) {
            let pooled = self
                .pooled(batch)
                .map_err(|e| err(&self.id, format!("forward pass: {e}")))?;
            out.extend(pooled.into_iter().map(|v| self.finish(v)));
        }
        Ok(out)
    }
}

#[async_trait::async_trait]
impl Embedder for GemmaEmbedder {
    fn model_id(&self) -> &str {
        &self.id
    }

    fn dim(&self) -> usize {
        self.options.dim
    }

    fn call_size(&self) -> usize {
        16
    }

    fn input_tokens(&self, text: &str, kind: EmbedKind) -> Option<(usize, usize)> {
        let n = self
            .full_ids(&format!("{}{text}", Self::prompt(kind)))
            .ok()?
            .len();
        Some((n, self.options.max_tokens))
    }

    async fn embed(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed_sync(texts, kind)
    }

    fn late(&self) -> bool {
        self.options.late
    }

    async fn embed_late(
        &self,
        document: &str,
        spans: &[(usize, usize)],
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed_late_sync(document, spans)
    }
}

/// The model id of a late-chunking embedder: `id`, suffixed `:late`.
pub(crate) fn late_id(id: String, late: bool) -> String {
    if late { format!("{id}:late") } else { id }
}

/// The windows late chunking reads a tokenized text in (`ids` with its opening and closing
/// special tokens): the whole text when it fits `max`, else windows of `max` tokens (the
/// special tokens around each) whose content overlaps by a quarter. Returns each window's
/// ids and the first content token it holds.
pub(crate) fn late_windows(ids: &[u32], max: usize) -> Vec<(Vec<u32>, usize)> {
    if ids.len() <= max || ids.len() < 2 || max < 4 {
        return vec![(ids.to_vec(), 0)];
    }
    let (first, last) = (ids[0], ids[ids.len() - 1]);
    let content = &ids[1..ids.len() - 1];
    let width = max - 2;
    let stride = (width * 3 / 4).max(1);
    let mut out = Vec::new();
    let mut start = 0;
    loop {
        let end = (start + width).min(content.len());
        let mut w = Vec::with_capacity(end - start + 2);
        w.push(first);
        w.extend_from_slice(&content[start..end]);
        w.push(last);
        out.push((w, start));
        if end == content.len() {
            break;
        }
        start += stride;
    }
    out
}

/// Late chunking's pooling, shared by the embedders that do it: the tokenized text (`ids`
/// with their byte `offsets`; special tokens have empty offsets) read in
/// [`late_windows`] by `states` (packed token states and each window's rows), each token's
/// state taken from the window where it is farthest from an edge, and each span's tokens
/// (those whose bytes overlap it) averaged. Returns spans × hidden, before any head.
pub(crate) fn late_pool(
    ids: &[u32],
    offsets: &[(usize, usize)],
    spans: &[(usize, usize)],
    max: usize,
    states: impl Fn(&[Vec<u32>]) -> candle_core::Result<(Tensor, Vec<(usize, usize)>)>,
) -> candle_core::Result<Tensor> {
    let windows = late_windows(ids, max);
    let texts: Vec<Vec<u32>> = windows.iter().map(|(w, _)| w.clone()).collect();
    let (x, segs) = states(&texts)?;
    // The packed row holding each token's state (content tokens only: index into `ids`).
    let mut row = vec![None; ids.len()];
    let mut best = vec![0usize; ids.len()];
    for ((_, start), &(s, n)) in windows.iter().zip(&segs) {
        let single = windows.len() == 1;
        for j in 0..n {
            // Window row j is `ids[j]` for a single window, else content token start + j - 1.
            let token = if single {
                j
            } else if j == 0 || j + 1 == n {
                continue;
            } else {
                start + j
            };
            let margin = j.min(n - 1 - j);
            if token < ids.len() && (row[token].is_none() || margin > best[token]) {
                row[token] = Some(s + j);
                best[token] = margin;
            }
        }
    }
    let mut means = Vec::with_capacity(spans.len());
    for &(a, b) in spans {
        let rows: Vec<u32> = offsets
            .iter()
            .enumerate()
            .filter(|&(_, &(s, e))| e > s && s < b && e > a)
            .filter_map(|(i, _)| row.get(i).copied().flatten().map(|r| r as u32))
            .collect();
        if rows.is_empty() {
            candle_core::bail!("the span {a}..{b} holds no token of the document");
        }
        let idx = Tensor::new(rows.as_slice(), x.device())?;
        means.push(x.index_select(&idx, 0)?.mean_keepdim(0)?);
    }
    Tensor::cat(&means, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_keep_order_and_hold_about_the_budget() {
        let texts: Vec<Vec<u32>> = [3usize, 4, 5, 9, 1, 1]
            .iter()
            .map(|&n| vec![0; n])
            .collect();
        let b = token_batches(&texts, 8);
        let sizes: Vec<usize> = b.iter().map(|x| x.len()).collect();
        assert_eq!(sizes, vec![2, 1, 1, 2]);
        assert_eq!(b.iter().map(|x| x.len()).sum::<usize>(), texts.len());
        assert!(token_batches(&[], 8).is_empty());
    }

    #[test]
    fn inputs_are_cut_as_the_tokenizers_truncation_cuts_them() {
        let mut ids = vec![2, 10, 11, 12, 13, 1];
        assert_eq!(fit(&mut ids, 4), 2);
        assert_eq!(ids, vec![2, 10, 11, 1]);
        let mut short = vec![2, 10, 1];
        assert_eq!(fit(&mut short, 4), 0);
        assert_eq!(short, vec![2, 10, 1]);
    }

    #[test]
    fn a_matryoshka_dimension_is_part_of_the_model_id() {
        assert_eq!(GemmaEmbedder::id_for("g@1".into(), 768), "g@1");
        assert_eq!(GemmaEmbedder::id_for("g@1".into(), 256), "g@1:256");
    }
}
