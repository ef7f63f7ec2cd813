//! all-mpnet-base-v2 (MPNet) sentence embeddings in candle, from the sentence-transformers
//! folder `situate models install all-mpnet-base-v2` unpacks.
//!
//! MPNet is a BERT-shaped encoder (post-LayerNorm layers, exact-erf GELU, biases) with
//! three differences, each as Hugging Face's `MPNetModel` computes it:
//! - positions are numbered RoBERTa's way, from `pad_token_id + 1` (2), and there are no
//!   token type embeddings;
//! - every layer adds the same relative position bias to its attention scores: the signed
//!   distance between two tokens falls in one of 32 buckets (16 per direction: exact up to
//!   8, then logarithmic up to 128), and each bucket has a learnt value per head;
//! - the attention's output projection is `attention.attn.o`, its LayerNorm
//!   `attention.LayerNorm`.
//!
//! Then mean pooling over the tokens and unit length (the sentence-transformers recipe),
//! truncated at 384 tokens (`sentence_bert_config.json`; the tokenizer's own 128 is
//! overridden, and its fixed padding switched off: texts are packed end to end).

use crate::attend::{Heads, attend};
use crate::encoder::{Act, AttentionNames, Layer, Norm, Precision, Precisions, mean_per_text};
use crate::inputs::{embed_batches, encode_fitted, fit, unit};
use candle_core::{Device, Tensor};
use candle_nn::VarBuilder;
use situate_core::{EmbedError, EmbedKind, Embedder};
use std::path::Path;
use tokenizers::Tokenizer;

/// The longest input sentence-transformers gives all-mpnet-base-v2
/// (`sentence_bert_config.json`), special tokens included.
pub const MAX_TOKENS: usize = 384;

/// Tokens per forward pass (texts are packed up to this).
const BATCH_TOKENS: usize = 4096;

/// The model's `config.json`, as far as it is read.
#[derive(serde::Deserialize)]
struct Config {
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    max_position_embeddings: usize,
    layer_norm_eps: f64,
    #[serde(default = "default_pad")]
    pad_token_id: usize,
    #[serde(default = "default_buckets")]
    relative_attention_num_buckets: usize,
}

fn default_pad() -> usize {
    1
}

fn default_buckets() -> usize {
    32
}

/// all-mpnet-base-v2 on the CPU.
pub struct MpnetEmbedder {
    id: String,
    tokenizer: Tokenizer,
    word: Tensor,
    pos: Tensor,
    eln: Norm,
    layers: Vec<Layer>,
    /// buckets × heads.
    relative: Tensor,
    buckets: usize,
    heads: usize,
    hidden: usize,
    eps: f32,
    position_offset: usize,
    max_tokens: usize,
    precisions: Precisions,
}

/// MPNet's attention weights under `encoder.layer.N.attention`.
const MPNET_ATTENTION: AttentionNames = AttentionNames {
    q: "attn.q",
    k: "attn.k",
    v: "attn.v",
    o: "attn.o",
    norm: "LayerNorm",
};

fn err(id: &str, m: impl std::fmt::Display) -> EmbedError {
    EmbedError {
        model: id.to_string(),
        message: m.to_string(),
    }
}

/// The bucket of a relative position `memory - context` (Hugging Face's
/// `MPNetEncoder.relative_position_bucket`, bidirectional, max distance 128).
pub(crate) fn bucket(relative: i64, buckets: usize) -> usize {
    let half = (buckets / 2) as i64;
    let mut ret = 0i64;
    let n = -relative;
    if n < 0 {
        ret += half;
    }
    let n = n.abs();
    let exact = half / 2;
    if n < exact {
        ret + n
    } else {
        let large = exact
            + ((n as f32 / exact as f32).ln() / (128f32 / exact as f32).ln()
                * (half - exact) as f32) as i64;
        ret + large.min(half - 1)
    }
    .max(0) as usize
}

impl MpnetEmbedder {
    /// Loads the sentence-transformers folder `dir` (`config.json`, `model.safetensors`,
    /// `tokenizer.json`); `id` is the model id (suffixed `:q8` for int8 passages).
    pub fn load(dir: &Path, id: String, precisions: Precisions) -> Result<Self, EmbedError> {
        let file =
            |name: &str| crate::encoder::model_file(dir, name, "model").map_err(|m| err(&id, m));
        let text = std::fs::read_to_string(file("config.json")?).map_err(|e| err(&id, e))?;
        let c: Config = serde_json::from_str(&text)
            .map_err(|e| err(&id, format!("config.json is not an MPNet config: {e}")))?;
        let mut tokenizer = crate::encoder::load_tokenizer(&file("tokenizer.json")?)
            .map_err(|e| err(&id, format!("tokenizer.json: {e}")))?;
        let position_offset = c.pad_token_id + 1;
        let max_tokens = MAX_TOKENS.min(c.max_position_embeddings.saturating_sub(position_offset));
        // Inputs are cut by hand (`fit`), so the tokenizer cuts nothing.
        tokenizer
            .with_truncation(None)
            .map_err(|e| err(&id, format!("setting truncation: {e}")))?;
        tokenizer.with_padding(None);
        let vb = crate::encoder::mmap_weights(&file("model.safetensors")?)
            .map_err(|e| err(&id, format!("model.safetensors: {e}")))?;
        let mut model = Self::from_weights(
            vb,
            &c,
            tokenizer,
            precisions.passage.passages_id(id.clone()),
            position_offset,
            max_tokens,
        )
        .map_err(|e| err(&id, format!("loading the weights: {e}")))?;
        precisions
            .quantize(
                model
                    .layers
                    .iter_mut()
                    .flat_map(|l| [&mut l.qkv, &mut l.ao, &mut l.fi, &mut l.fo]),
            )
            .map_err(|m| err(&id, m))?;
        model.precisions = precisions;
        Ok(model)
    }

    fn from_weights(
        vb: VarBuilder,
        c: &Config,
        tokenizer: Tokenizer,
        id: String,
        position_offset: usize,
        max_tokens: usize,
    ) -> candle_core::Result<Self> {
        let h = c.hidden_size;
        if c.num_attention_heads == 0 || !h.is_multiple_of(c.num_attention_heads) {
            candle_core::bail!("hidden_size {h} is not a multiple of num_attention_heads");
        }
        let e = vb.pp("embeddings");
        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for i in 0..c.num_hidden_layers {
            layers.push(Layer::load(
                vb.pp(format!("encoder.layer.{i}")),
                &MPNET_ATTENTION,
                h,
                c.intermediate_size,
            )?);
        }
        Ok(MpnetEmbedder {
            id,
            tokenizer,
            word: e.get((c.vocab_size, h), "word_embeddings.weight")?,
            pos: e.get((c.max_position_embeddings, h), "position_embeddings.weight")?,
            eln: Norm::load(e.pp("LayerNorm"), h)?,
            layers,
            relative: vb.get(
                (c.relative_attention_num_buckets, c.num_attention_heads),
                "encoder.relative_attention_bias.weight",
            )?,
            buckets: c.relative_attention_num_buckets,
            heads: c.num_attention_heads,
            hidden: h,
            eps: c.layer_norm_eps as f32,
            position_offset,
            max_tokens,
            precisions: Precisions::default(),
        })
    }

    /// The longest input in tokens (special tokens included); longer texts are cut.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// Token ids of one text as the model sees it (special tokens included, cut to the
    /// window).
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        let mut ids = self.full_ids(text)?;
        fit(&mut ids, self.max_tokens);
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

    /// The relative position bias of a text of `n` tokens: heads × n × n.
    fn position_bias(&self, n: usize) -> candle_core::Result<Tensor> {
        let mut idx = Vec::with_capacity(n * n);
        for i in 0..n as i64 {
            for j in 0..n as i64 {
                idx.push(bucket(j - i, self.buckets) as u32);
            }
        }
        let idx = Tensor::new(idx.as_slice(), &Device::Cpu)?;
        self.relative
            .index_select(&idx, 0)?
            .reshape((n, n, self.heads))?
            .permute((2, 0, 1))?
            .contiguous()
    }

    /// The mean-pooled last hidden states of texts given as token ids, one per text.
    fn pooled(
        &self,
        texts: &[Vec<u32>],
        precision: Precision,
    ) -> candle_core::Result<Vec<Vec<f32>>> {
        let dev = Device::Cpu;
        let mut ids = Vec::new();
        let mut positions = Vec::new();
        let mut segs = Vec::new();
        for t in texts {
            segs.push((ids.len(), t.len()));
            ids.extend_from_slice(t);
            let first = self.position_offset as u32;
            positions.extend(first..first + t.len() as u32);
        }
        let word = self
            .word
            .index_select(&Tensor::new(ids.as_slice(), &dev)?, 0)?;
        let pos = self
            .pos
            .index_select(&Tensor::new(positions.as_slice(), &dev)?, 0)?;
        let mut x = candle_nn::ops::layer_norm(&(word + pos)?, &self.eln.w, &self.eln.b, self.eps)?;
        let biases = segs
            .iter()
            .map(|&(_, n)| self.position_bias(n))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let h = self.hidden;
        let heads = Heads {
            heads: self.heads,
            kv_heads: self.heads,
            head_dim: h / self.heads,
            scale: 1.0 / ((h / self.heads) as f64).sqrt(),
        };
        for l in &self.layers {
            let qkv = l.qkv.forward_with(&x, precision)?;
            let mut ctx = Vec::with_capacity(segs.len());
            for (&(s, n), bias) in segs.iter().zip(&biases) {
                let t = qkv.narrow(0, s, n)?;
                ctx.push(attend(
                    &t.narrow(1, 0, h)?,
                    &t.narrow(1, h, h)?,
                    &t.narrow(1, 2 * h, h)?,
                    heads,
                    Some(bias),
                )?);
            }
            let ctx = Tensor::cat(&ctx, 0)?;
            let y = l.ao.forward_residual(&ctx, &x, precision)?;
            x = candle_nn::ops::layer_norm(&y, &l.aln.w, &l.aln.b, self.eps)?;
            let mid = l.fi.forward_act(&x, Act::Gelu, precision)?;
            let y = l.fo.forward_residual(&mid, &x, precision)?;
            x = candle_nn::ops::layer_norm(&y, &l.oln.w, &l.oln.b, self.eps)?;
        }
        mean_per_text(&x, &segs)
    }

    /// Embeds texts synchronously (mean pooling, unit length).
    pub fn embed_sync(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        let inputs = texts.iter().map(|t| t.to_string()).collect();
        let ids = encode_fitted(&self.tokenizer, &self.id, inputs, self.max_tokens)?;
        let precision = self.precisions.of(kind);
        embed_batches(
            &self.id,
            &ids,
            BATCH_TOKENS,
            kind,
            |batch| self.pooled(batch, precision),
            unit,
        )
    }
}

#[async_trait::async_trait]
impl Embedder for MpnetEmbedder {
    fn model_id(&self) -> &str {
        &self.id
    }

    fn dim(&self) -> usize {
        self.hidden
    }

    fn input_tokens(&self, text: &str, _kind: EmbedKind) -> Option<(usize, usize)> {
        Some((self.full_ids(text).ok()?.len(), self.max_tokens))
    }

    async fn embed(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed_sync(texts, kind)
    }
}

#[cfg(test)]
mod tests {
    /// The buckets Hugging Face's `relative_position_bucket` gives (computed by hand from
    /// its formula: exact to 8 each way, logarithmic to 128, the far side from 16).
    #[test]
    fn relative_positions_fall_in_mpnets_buckets() {
        use super::bucket;
        assert_eq!(bucket(0, 32), 0);
        assert_eq!(bucket(-1, 32), 1);
        assert_eq!(bucket(1, 32), 17);
        assert_eq!(bucket(-7, 32), 7);
        assert_eq!(bucket(-8, 32), 8);
        assert_eq!(bucket(-12, 32), 9);
        assert_eq!(bucket(-16, 32), 10);
        assert_eq!(bucket(-127, 32), 15);
        assert_eq!(bucket(-1000, 32), 15);
        assert_eq!(bucket(1000, 32), 31);
        assert_eq!(bucket(8, 32), 24);
    }
}
