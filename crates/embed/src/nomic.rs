//! nomic-embed-text-v1.5 sentence embeddings in candle, from the f16 GGUF `situate models
//! install nomic-embed-text-v1.5` inflates (architecture `nomic-bert`).
//!
//! The model, as llama.cpp's `nomic-bert` graph computes it: token embeddings plus the
//! first token type's, LayerNorm; 12 post-LayerNorm layers, each a fused q|k|v product
//! without bias, rotary positions on the whole head (GPT-NeoX's halves, θ = 1,000), an
//! output product, then a gated feed-forward layer `down(silu(gate(x)) · up(x))`; mean
//! pooling and unit length; a Matryoshka dimension keeps the first values and normalises
//! again. Queries are prefixed `search_query: `, documents `search_document: `.
//!
//! The tokenizer is the GGUF's own WordPiece vocabulary (`tokenizer.ggml.tokens`), put
//! together as BERT's uncased tokenizer: lower-cased, accents stripped, Chinese characters
//! split, punctuation split, `##` continuations, `[CLS]` … `[SEP]`.
//!
//! The f16 weights are widened to f32 at load (about 550 MB): the reference arithmetic.

use crate::attend::{Heads, Linear, attend, rope_table};
use crate::encoder::{Norm, Precision, Precisions};
use crate::inputs::{embed_batches, encode_fitted, fit, matryoshka};
use crate::late::{late_id, late_pool};
use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use situate_core::{EmbedError, EmbedKind, Embedder};
use std::path::Path;
use std::str::FromStr;
use tokenizers::Tokenizer;

/// The model file inside the installed directory.
pub const MODEL_FILE: &str = "nomic-embed-text-v1.5.f16.gguf";
/// The prefix of a query (the model card's).
pub const QUERY_PREFIX: &str = "search_query: ";
/// The prefix of a document.
pub const DOCUMENT_PREFIX: &str = "search_document: ";
/// The Matryoshka dimensions the model was trained to keep.
pub const DIMENSIONS: [usize; 5] = [768, 512, 256, 128, 64];

/// Tokens per forward pass (texts are packed up to this).
const BATCH_TOKENS: usize = 4096;

struct Layer {
    qkv: Linear,
    o: Linear,
    aln: Norm,
    gate_up: Linear,
    down: Linear,
    oln: Norm,
}

/// nomic-embed-text-v1.5 on the CPU.
pub struct NomicEmbedder {
    id: String,
    tokenizer: Tokenizer,
    word: Tensor,
    ty: Tensor,
    eln: Norm,
    layers: Vec<Layer>,
    rope: (Tensor, Tensor),
    heads: Heads,
    hidden: usize,
    eps: f32,
    dim: usize,
    max_tokens: usize,
    late: bool,
    precisions: Precisions,
}

/// How a nomic embedder runs.
#[derive(Debug, Clone, Copy)]
pub struct NomicOptions {
    /// The vector's dimension: 768 or a Matryoshka prefix (the id suffixed `:DIM`).
    pub dim: usize,
    /// The longest input in tokens, special tokens included (the model reads 2,048; a
    /// larger value is the GGUF's context length).
    pub max_tokens: usize,
    /// Passages by late chunking (the id suffixed `:late`).
    pub late: bool,
    /// The arithmetic of queries and passages (int8 passages suffix the id `:q8`).
    pub precisions: Precisions,
}

impl Default for NomicOptions {
    fn default() -> Self {
        NomicOptions {
            dim: DIMENSIONS[0],
            max_tokens: 2048,
            late: false,
            precisions: Precisions::default(),
        }
    }
}

fn err(id: &str, m: impl std::fmt::Display) -> EmbedError {
    EmbedError {
        model: id.to_string(),
        message: m.to_string(),
    }
}

/// The GGUF's metadata value `key`, or an error naming it.
fn meta<'a>(c: &'a gguf_file::Content, key: &str) -> candle_core::Result<&'a gguf_file::Value> {
    c.metadata
        .get(key)
        .ok_or_else(|| candle_core::Error::msg(format!("the GGUF has no {key}")))
}

/// A GGUF vocabulary entry as BERT's WordPiece spells it. llama.cpp's converter writes a
/// word's first piece with `▁` before it and a continuation bare (BERT's `##how` is `how`,
/// its `how` is `▁how`); control tokens (`[CLS]`, token type 3) are kept as they are.
fn bert_piece(token: &str, control: bool) -> String {
    match token.strip_prefix('\u{2581}') {
        Some(word) => word.to_string(),
        None if control => token.to_string(),
        None => format!("##{token}"),
    }
}

/// BERT's uncased WordPiece tokenizer over `tokens` (ids are positions, in BERT's
/// spelling: [`bert_piece`]), as a `tokenizer.json` document read by the `tokenizers`
/// crate.
fn wordpiece(tokens: &[String], cls: u32, sep: u32, unk: u32) -> Result<Tokenizer, String> {
    let name = |id: u32| {
        tokens
            .get(id as usize)
            .cloned()
            .ok_or_else(|| format!("token id {id} is outside the vocabulary"))
    };
    let vocab: serde_json::Map<String, serde_json::Value> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), serde_json::json!(i)))
        .collect();
    let (cls_t, sep_t, unk_t) = (name(cls)?, name(sep)?, name(unk)?);
    let special = |id: u32, content: &str| {
        serde_json::json!({"id": id, "content": content, "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": false, "special": true})
    };
    let doc = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [special(cls, &cls_t), special(sep, &sep_t), special(unk, &unk_t)],
        "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
            "strip_accents": null, "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "BertProcessing", "sep": [sep_t, sep], "cls": [cls_t, cls]},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
        "model": {"type": "WordPiece", "unk_token": unk_t, "continuing_subword_prefix": "##",
            "max_input_chars_per_word": 100, "vocab": vocab}
    });
    Tokenizer::from_str(&doc.to_string()).map_err(|e| e.to_string())
}

impl NomicEmbedder {
    /// Loads the GGUF in `dir`; `id` is the model id.
    pub fn load(dir: &Path, id: String, options: NomicOptions) -> Result<Self, EmbedError> {
        let NomicOptions {
            dim, precisions, ..
        } = options;
        if !DIMENSIONS.contains(&dim) {
            return Err(err(
                &id,
                format!(
                    "nomic-embed-text-v1.5's dimension is one of 768, 512, 256, 128, 64 (Matryoshka), not {dim}"
                ),
            ));
        }
        let path = crate::encoder::model_file(dir, MODEL_FILE, "model").map_err(|m| err(&id, m))?;
        let mut model = Self::read(&path, id.clone(), options)
            .map_err(|e| err(&id, format!("{}: {e}", path.display())))?;
        precisions
            .quantize(
                model
                    .layers
                    .iter_mut()
                    .flat_map(|l| [&mut l.qkv, &mut l.o, &mut l.gate_up, &mut l.down]),
            )
            .map_err(|m| err(&id, m))?;
        Ok(model)
    }

    // Long: one tensor after another from the GGUF file, in the model's order; each is
    // checked against the sizes read before it.
    fn read(path: &Path, id: String, options: NomicOptions) -> candle_core::Result<Self> {
        let NomicOptions {
            dim,
            max_tokens,
            late,
            precisions,
        } = options;
        let mut f = std::fs::File::open(path)?;
        let c = gguf_file::Content::read(&mut f)?;
        let arch = meta(&c, "general.architecture")?.to_string()?;
        if arch != "nomic-bert" {
            candle_core::bail!("architecture {arch:?}, not nomic-bert");
        }
        let u = |k: &str| -> candle_core::Result<usize> {
            Ok(meta(&c, &format!("nomic-bert.{k}"))?.to_u32()? as usize)
        };
        let (layers_n, hidden, heads, ctx) = (
            u("block_count")?,
            u("embedding_length")?,
            u("attention.head_count")?,
            u("context_length")?,
        );
        let eps = meta(&c, "nomic-bert.attention.layer_norm_epsilon")?.to_f32()?;
        let base = meta(&c, "nomic-bert.rope.freq_base")?.to_f32()? as f64;
        if heads == 0 || !hidden.is_multiple_of(heads) {
            candle_core::bail!("{hidden} is not a multiple of {heads} heads");
        }
        let types: Vec<u32> = match c.metadata.get("tokenizer.ggml.token_type") {
            Some(v) => v
                .to_vec()?
                .iter()
                .map(|t| t.to_i32().map(|t| t as u32))
                .collect::<candle_core::Result<_>>()?,
            None => Vec::new(),
        };
        let tokens: Vec<String> = meta(&c, "tokenizer.ggml.tokens")?
            .to_vec()?
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let control = types.get(i) == Some(&3);
                v.to_string().map(|t| bert_piece(t, control))
            })
            .collect::<candle_core::Result<_>>()?;
        let id_of = |k: &str| -> candle_core::Result<u32> { meta(&c, k)?.to_u32() };
        let mut tokenizer = wordpiece(
            &tokens,
            id_of("tokenizer.ggml.bos_token_id")?,
            id_of("tokenizer.ggml.seperator_token_id")
                .or_else(|_| id_of("tokenizer.ggml.eos_token_id"))?,
            id_of("tokenizer.ggml.unknown_token_id")?,
        )
        .map_err(candle_core::Error::msg)?;
        // Inputs are cut by hand (`fit`), so the tokenizer cuts nothing.
        tokenizer
            .with_truncation(None)
            .map_err(candle_core::Error::msg)?;
        let dev = Device::Cpu;
        let mut get = |name: &str| -> candle_core::Result<Tensor> {
            c.tensor(&mut f, name, &dev)?.dequantize(&dev)
        };
        let word = get("token_embd.weight")?;
        let ty = get("token_types.weight")?;
        let eln = Norm {
            w: get("token_embd_norm.weight")?,
            b: get("token_embd_norm.bias")?,
        };
        let mut layers = Vec::with_capacity(layers_n);
        for i in 0..layers_n {
            let mut g = |n: &str| get(&format!("blk.{i}.{n}"));
            layers.push(Layer {
                qkv: Linear::fused(&[g("attn_qkv.weight")?])?,
                o: Linear::fused(&[g("attn_output.weight")?])?,
                aln: Norm {
                    w: g("attn_output_norm.weight")?,
                    b: g("attn_output_norm.bias")?,
                },
                gate_up: Linear::fused(&[g("ffn_gate.weight")?, g("ffn_up.weight")?])?,
                down: Linear::fused(&[g("ffn_down.weight")?])?,
                oln: Norm {
                    w: g("layer_output_norm.weight")?,
                    b: g("layer_output_norm.bias")?,
                },
            });
        }
        let head_dim = hidden / heads;
        Ok(NomicEmbedder {
            id: late_id(
                precisions
                    .passage
                    .passages_id(crate::gemma::GemmaEmbedder::id_for(id, dim)),
                late,
            ),
            tokenizer,
            word,
            ty,
            eln,
            layers,
            rope: rope_table(ctx, head_dim, base)?,
            heads: Heads {
                heads,
                kv_heads: heads,
                head_dim,
                scale: 1.0 / (head_dim as f64).sqrt(),
            },
            hidden,
            eps,
            dim,
            max_tokens: max_tokens.clamp(2, ctx),
            late,
            precisions,
        })
    }

    /// The longest input in tokens (special tokens included); longer texts are cut.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// Token ids of one text as the model sees it (`[CLS]` … `[SEP]`, cut to the window).
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

    /// The prefix before a text of `kind`.
    fn prefix(kind: EmbedKind) -> &'static str {
        match kind {
            EmbedKind::Query => QUERY_PREFIX,
            EmbedKind::Passage => DOCUMENT_PREFIX,
        }
    }

    fn pooled(
        &self,
        texts: &[Vec<u32>],
        precision: Precision,
    ) -> candle_core::Result<Vec<Vec<f32>>> {
        let (x, segs) = self.states(texts, precision)?;
        crate::encoder::mean_per_text(&x, &segs)
    }

    /// Late chunking: `document` read whole after the document prefix (in overlapping
    /// windows when longer than the model reads), each span's tokens' states averaged,
    /// unit length and the Matryoshka cut.
    pub fn embed_late_sync(
        &self,
        document: &str,
        spans: &[(usize, usize)],
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let text = format!("{DOCUMENT_PREFIX}{document}");
        let enc = self
            .tokenizer
            .encode(text.as_str(), true)
            .map_err(|e| err(&self.id, e))?;
        let shifted: Vec<(usize, usize)> = spans
            .iter()
            .map(|&(a, b)| (a + DOCUMENT_PREFIX.len(), b + DOCUMENT_PREFIX.len()))
            .collect();
        let rows = late_pool(
            enc.get_ids(),
            enc.get_offsets(),
            &shifted,
            self.max_tokens,
            |windows| self.states(windows, self.precisions.passage),
        )
        .and_then(|t| t.to_vec2::<f32>())
        .map_err(|e| err(&self.id, format!("late chunking: {e}")))?;
        Ok(rows.into_iter().map(|v| matryoshka(v, self.dim)).collect())
    }

    /// The last hidden states of texts packed end to end, and each text's (first row, rows).
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
        let cos = self.rope.0.index_select(&positions, 0)?;
        let sin = self.rope.1.index_select(&positions, 0)?;
        let x = self
            .word
            .index_select(&Tensor::new(ids.as_slice(), &dev)?, 0)?;
        let x = x.broadcast_add(&self.ty.narrow(0, 0, 1)?)?;
        let mut x = candle_nn::ops::layer_norm(&x, &self.eln.w, &self.eln.b, self.eps)?;
        let (h, n_heads, d) = (self.hidden, self.heads.heads, self.heads.head_dim);
        for l in &self.layers {
            let qkv = l.qkv.forward_with(&x, precision)?;
            let rot = |t: Tensor| -> candle_core::Result<Tensor> {
                candle_nn::rotary_emb::rope_thd(
                    &t.contiguous()?.reshape((1, total, n_heads, d))?,
                    &cos,
                    &sin,
                )?
                .reshape((total, h))
            };
            let q = rot(qkv.narrow(1, 0, h)?)?;
            let k = rot(qkv.narrow(1, h, h)?)?;
            let v = qkv.narrow(1, 2 * h, h)?.contiguous()?;
            let mut ctx = Vec::with_capacity(segs.len());
            for &(s, n) in &segs {
                ctx.push(attend(
                    &q.narrow(0, s, n)?,
                    &k.narrow(0, s, n)?,
                    &v.narrow(0, s, n)?,
                    self.heads,
                    None,
                )?);
            }
            let y = (l.o.forward_with(&Tensor::cat(&ctx, 0)?, precision)? + &x)?;
            x = candle_nn::ops::layer_norm(&y, &l.aln.w, &l.aln.b, self.eps)?;
            let gu = l.gate_up.forward_with(&x, precision)?;
            let inner = gu.dim(1)? / 2;
            let mid = (gu.narrow(1, 0, inner)?.silu()? * gu.narrow(1, inner, inner)?)?;
            let y = (l.down.forward_with(&mid, precision)? + &x)?;
            x = candle_nn::ops::layer_norm(&y, &l.oln.w, &l.oln.b, self.eps)?;
        }
        Ok((x, segs))
    }

    /// Embeds texts synchronously, each after its kind's prefix: unit length, cut to the
    /// Matryoshka dimension and normalised again.
    pub fn embed_sync(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        let prefix = Self::prefix(kind);
        let inputs: Vec<String> = texts.iter().map(|t| format!("{prefix}{t}")).collect();
        let ids = encode_fitted(&self.tokenizer, &self.id, inputs, self.max_tokens)?;
        let precision = self.precisions.of(kind);
        embed_batches(
            &self.id,
            &ids,
            BATCH_TOKENS,
            kind,
            |batch| self.pooled(batch, precision),
            |v| matryoshka(v, self.dim),
        )
    }
}

#[async_trait::async_trait]
impl Embedder for NomicEmbedder {
    fn model_id(&self) -> &str {
        &self.id
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn input_tokens(&self, text: &str, kind: EmbedKind) -> Option<(usize, usize)> {
        let n = self
            .full_ids(&format!("{}{text}", Self::prefix(kind)))
            .ok()?
            .len();
        Some((n, self.max_tokens))
    }

    async fn embed(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed_sync(texts, kind)
    }

    fn late(&self) -> bool {
        self.late
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
    #[test]
    fn the_wordpiece_tokenizer_is_berts_uncased_one() {
        // As llama.cpp's converter writes them: `▁` before a word's first piece.
        let tokens: Vec<String> = [
            "[PAD]", "[UNK]", "[CLS]", "[SEP]", "▁the", "▁cafe", "▁run", "ning", "▁,", "▁!", "▁北",
        ]
        .iter()
        .enumerate()
        .map(|(i, s)| super::bert_piece(s, i < 4))
        .collect();
        let t = super::wordpiece(&tokens, 2, 3, 1).expect("builds");
        let ids = t.encode("The Café, RUNNING! 北x", true).expect("encodes");
        assert_eq!(ids.get_ids(), &[2, 4, 5, 8, 6, 7, 9, 10, 1, 3]);
    }
}
