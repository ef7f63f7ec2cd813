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

use crate::attend::{Heads, Linear, attend, rope_table};
use crate::encoder::{Precision, Precisions};
use crate::inputs::{embed_batches, encode_fitted, fit, matryoshka};
use crate::late::{late_id, late_pool};
use candle_core::safetensors::MmapedSafetensors;
use candle_core::{D, DType, Device, Tensor};
use situate_core::{EmbedError, EmbedKind, Embedder, PassageInput};
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
    /// The arithmetic of queries and passages (int8 passages suffix the model id `:q8`).
    pub precisions: Precisions,
    /// A passage's context goes in the document prompt's title slot (`title: CONTEXT |
    /// text: CHUNK`) instead of before the chunk; the model id is suffixed `:title`.
    pub title: bool,
}

impl Default for GemmaOptions {
    fn default() -> Self {
        GemmaOptions {
            dim: 768,
            max_tokens: 2048,
            late: false,
            precisions: Precisions::default(),
            title: false,
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

impl GemmaEmbedder {
    // Long: one tensor after another from the safetensors files, in the model's order; each
    // is checked against the sizes read before it.
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
        let mut tokenizer = crate::encoder::load_tokenizer(&file("tokenizer.json")?)
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
        let mut layers = (0..c.num_hidden_layers)
            .map(|i| Self::layer(&weights, &c, i))
            .collect::<candle_core::Result<Vec<_>>>()
            .map_err(|e| err(&id, format!("loading the weights: {e}")))?;
        options
            .precisions
            .quantize(
                layers
                    .iter_mut()
                    .flat_map(|l| [&mut l.qkv, &mut l.o, &mut l.gate_up, &mut l.down]),
            )
            .map_err(|m| err(&id, m))?;
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
            id: {
                let id = options
                    .precisions
                    .passage
                    .passages_id(Self::id_for(id.clone(), options.dim));
                if options.title {
                    format!("{id}:title")
                } else {
                    late_id(id, options.late)
                }
            },
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
        if gate_up.outputs() != 2 * c.intermediate_size {
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
    fn pooled(
        &self,
        texts: &[Vec<u32>],
        precision: Precision,
    ) -> candle_core::Result<Vec<Vec<f32>>> {
        let (x, segs) = self.states(texts, precision)?;
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
    fn states(
        &self,
        texts: &[Vec<u32>],
        precision: Precision,
    ) -> candle_core::Result<(Tensor, Vec<(usize, usize)>)> {
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
            let qkv = l.qkv.forward_with(&h, precision)?;
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
            let attn = l.o.forward_with(&Tensor::cat(&ctx, 0)?, precision)?;
            x = (x + candle_nn::ops::rms_norm(&attn, &l.post_attention_norm, self.eps)?)?;
            let h = candle_nn::ops::rms_norm(&x, &l.pre_ff_norm, self.eps)?;
            let gu = l.gate_up.forward_with(&h, precision)?;
            let half = gu.dim(D::Minus1)? / 2;
            let mid = (gu.narrow(1, 0, half)?.gelu()? * gu.narrow(1, half, half)?)?;
            let y = l.down.forward_with(&mid, precision)?;
            x = (x + candle_nn::ops::rms_norm(&y, &l.post_ff_norm, self.eps)?)?;
        }
        let x = candle_nn::ops::rms_norm(&x, &self.final_norm, self.eps)?;
        Ok((x, segs))
    }

    /// Late chunking: `document` read whole after the document prompt (in overlapping
    /// windows when longer than the model reads, [`crate::late::late_windows`]), each
    /// span's tokens' states averaged, then the dense layers, unit length and the
    /// Matryoshka cut.
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
            |windows| self.states(windows, self.options.precisions.passage),
        )
        .and_then(|rows| self.head(&rows))
        .map_err(|e| err(&self.id, format!("late chunking: {e}")))?;
        Ok(pooled
            .into_iter()
            .map(|v| matryoshka(v, self.options.dim))
            .collect())
    }

    /// Embeds texts synchronously, each prefixed by its kind's prompt: unit length, cut to
    /// the Matryoshka dimension and normalised again.
    pub fn embed_sync(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        let prompt = Self::prompt(kind);
        let inputs: Vec<String> = texts.iter().map(|t| format!("{prompt}{t}")).collect();
        self.embed_prompted(inputs, kind)
    }

    /// The document prompt of a passage with its context in the title slot (`none` when
    /// it has none, as the model's own prompt says).
    pub fn titled(passage: &PassageInput) -> String {
        let title = passage
            .context
            .as_deref()
            .map(|c| c.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter(|c| !c.is_empty());
        format!(
            "title: {} | text: {}",
            title.as_deref().unwrap_or("none"),
            passage.original
        )
    }

    /// Embeds passages: with the title slot ([`GemmaOptions::title`]) each context goes
    /// there, otherwise before its chunk as every embedder puts it.
    pub fn embed_passages_sync(
        &self,
        passages: &[PassageInput],
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let inputs: Vec<String> = if self.options.title {
            passages.iter().map(Self::titled).collect()
        } else {
            passages
                .iter()
                .map(|p| format!("{DOCUMENT_PROMPT}{}", p.indexed()))
                .collect()
        };
        self.embed_prompted(inputs, EmbedKind::Passage)
    }

    /// Embeds texts that carry their prompt already.
    fn embed_prompted(
        &self,
        inputs: Vec<String>,
        kind: EmbedKind,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let ids = encode_fitted(&self.tokenizer, &self.id, inputs, self.options.max_tokens)?;
        let precision = self.options.precisions.of(kind);
        embed_batches(
            &self.id,
            &ids,
            BATCH_TOKENS,
            kind,
            |batch| self.pooled(batch, precision),
            |v| matryoshka(v, self.options.dim),
        )
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

    fn passage_tokens(&self, passage: &PassageInput) -> Option<(usize, usize)> {
        if !self.options.title {
            return self.input_tokens(&passage.indexed(), EmbedKind::Passage);
        }
        let n = self.full_ids(&Self::titled(passage)).ok()?.len();
        Some((n, self.options.max_tokens))
    }

    async fn embed(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed_sync(texts, kind)
    }

    async fn embed_passages(&self, passages: &[PassageInput]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed_passages_sync(passages)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_matryoshka_dimension_is_part_of_the_model_id() {
        assert_eq!(GemmaEmbedder::id_for("g@1".into(), 768), "g@1");
        assert_eq!(GemmaEmbedder::id_for("g@1".into(), 256), "g@1:256");
    }
}
