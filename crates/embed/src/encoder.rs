//! A BERT encoder forward pass, written for the CPU: sentence embeddings ([`crate::bert`])
//! and the cross-encoders of `situate-rerank` (BERT and XLM-RoBERTa layouts).
//!
//! candle-transformers' `BertModel` is correct but slow here for three reasons measured with
//! `perf` (BENCHMARKS.md): a batch is padded to its longest text and attention, masking and
//! every element-wise op run over the padding; GELU calls a scalar `erf` per element; and
//! each `Linear` multiplies by a transposed view of its weight, which gemm repacks at every
//! call (a third of a query's time). This pass keeps the same arithmetic and fixes those:
//! the texts of a batch are packed end to end (no padding; attention runs per text, so no
//! mask is needed), weights are transposed once at load, and bias + GELU is one parallel
//! pass with a branch-free `erf`.

use candle_core::{CpuStorage, CustomOp1, DType, Layout, Shape, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{Config, HiddenAct};
use situate_kernels::i8::I8Matrix;

/// A dense layer with its weight transposed once at load (in × out, contiguous), and
/// optionally the same weight in int8 (see [`Encoder::quantize`]).
pub struct Dense {
    wt: Tensor,
    b: Tensor,
    q8: Option<I8Matrix>,
}

impl Dense {
    /// Loads `weight` (out × in) and `bias` (out).
    pub fn load(vb: VarBuilder, input: usize, output: usize) -> candle_core::Result<Self> {
        let w = vb.get((output, input), "weight")?;
        Ok(Dense {
            wt: w.t()?.contiguous()?,
            b: vb.get(output, "bias")?,
            q8: None,
        })
    }

    /// Several layers reading the same input as one: their outputs side by side (one
    /// product instead of several smaller ones).
    pub fn fused(vbs: &[VarBuilder], input: usize, output: usize) -> candle_core::Result<Self> {
        let mut ws = Vec::with_capacity(vbs.len());
        let mut bs = Vec::with_capacity(vbs.len());
        for vb in vbs {
            ws.push(vb.get((output, input), "weight")?);
            bs.push(vb.get(output, "bias")?);
        }
        Ok(Dense {
            wt: Tensor::cat(&ws, 0)?.t()?.contiguous()?,
            b: Tensor::cat(&bs, 0)?,
            q8: None,
        })
    }

    /// Keeps an int8 copy of the weight for [`Precision::Q8`] products; false (and
    /// nothing kept) when the input size is not a multiple of 32 (the kernels read 32 bytes
    /// at a time) or, unless `anywhere`, this CPU runs no vectorised int8 kernel.
    pub(crate) fn quantize(&mut self, anywhere: bool) -> candle_core::Result<bool> {
        let w = self.wt.t()?.contiguous()?;
        self.q8 = crate::encoder::int8_copy(&w, anywhere)?;
        Ok(self.q8.is_some())
    }

    /// x (t × in) · W, in f32 or, with `Precision::Q8` and a quantized copy, in int8.
    fn product(&self, x: &Tensor, precision: Precision) -> candle_core::Result<Tensor> {
        match (&self.q8, precision) {
            (Some(q8), Precision::Q8) => q8.forward(x),
            // With the weight contiguous as in × out, gemm reads it in place; by a
            // transposed view (as candle's `Linear` does) it repacked the weight at every
            // call, which was a third of a query's time.
            _ => x.matmul(&self.wt),
        }
    }

    /// x (t × in) → t × out, bias added.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.forward_with(x, Precision::F32)
    }

    /// x (t × in) → t × out, bias added, in `precision` (see [`Dense::product`]).
    pub(crate) fn forward_with(
        &self,
        x: &Tensor,
        precision: Precision,
    ) -> candle_core::Result<Tensor> {
        match (&self.q8, precision) {
            // The bias added as the int8 product writes each value.
            (Some(q8), Precision::Q8) => q8.forward_add(x, &self.b, None),
            _ => self.product(x, precision)?.broadcast_add(&self.b),
        }
    }

    /// `residual + (x·W + b)`: a sublayer's output and its residual connection (the same
    /// values as adding them after the layer; in int8, added as each value is written).
    pub(crate) fn forward_residual(
        &self,
        x: &Tensor,
        residual: &Tensor,
        precision: Precision,
    ) -> candle_core::Result<Tensor> {
        match (&self.q8, precision) {
            (Some(q8), Precision::Q8) => q8.forward_add(x, &self.b, Some(residual)),
            _ => residual + self.forward_with(x, precision)?,
        }
    }

    /// x (t × in) → act(x·W + b), bias and activation in one pass.
    pub(crate) fn forward_act(
        &self,
        x: &Tensor,
        act: Act,
        precision: Precision,
    ) -> candle_core::Result<Tensor> {
        self.product(x, precision)?
            .apply_op1_no_bwd(&BiasAct { bias: &self.b, act })
    }
}

/// The arithmetic of the encoder's matrix products.
///
/// A query is a few rows, and its f32 products are bound by reading the weights (42 MB per
/// query for MiniLM's six layers, profiled: gemm's f32 micro-kernel was 80% of a query's
/// time). In int8 (a signed byte per weight and one scale per output channel, each row
/// quantized over its own range at each product: [`situate_kernels::i8`]) the weights are
/// a quarter of that and the dot products are integer. A batch of passages is
/// compute-bound instead, and int8 products (VNNI's 64 byte products per instruction
/// against 16 f32 multiply-adds) take it about 1.8x faster; their vectors are then no
/// longer exactly the reference model's, so passages are int8 only when the index's
/// embedder asks for it (`all-minilm-l6-v2:q8`, [`crate::resolve()`]). BENCHMARKS.md
/// measures what each costs in retrieval quality.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// f32 weights and products (gemm).
    F32,
    /// int8 weights and rows, integer dot products, when [`Encoder::quantize`] kept a
    /// quantized copy; f32 otherwise.
    Q8,
}

impl Precision {
    /// The model id of an embedder whose passages are in this arithmetic: `id`, suffixed
    /// `:q8` for int8 passages, so that their vectors are never cached or indexed as the
    /// reference model's.
    pub fn passages_id(self, id: String) -> String {
        match self {
            Precision::F32 => id,
            Precision::Q8 => format!("{id}:q8"),
        }
    }
}

/// `w` (out × in, f32) in int8 ([`I8Matrix::quantize`]; with `anywhere`, the portable
/// kernel where this CPU runs no vectorised one), read in place (no copy of the weight).
pub(crate) fn int8_copy(w: &Tensor, anywhere: bool) -> candle_core::Result<Option<I8Matrix>> {
    let (rows, cols) = w.dims2()?;
    situate_kernels::with_f32_values(w, |values| {
        if anywhere {
            I8Matrix::quantize_anywhere(values, rows, cols)
        } else {
            I8Matrix::quantize(values, rows, cols)
        }
    })
}

/// A layer that can keep an int8 copy of its weight ([`Dense`], [`crate::attend::Linear`]).
pub(crate) trait Quantize {
    /// Keeps the copy; false when it cannot (see [`Dense::quantize`]).
    fn quantize(&mut self, anywhere: bool) -> candle_core::Result<bool>;
}

impl Quantize for Dense {
    fn quantize(&mut self, anywhere: bool) -> candle_core::Result<bool> {
        Dense::quantize(self, anywhere)
    }
}

impl Quantize for crate::attend::Linear {
    fn quantize(&mut self, anywhere: bool) -> candle_core::Result<bool> {
        crate::attend::Linear::quantize(self, anywhere)
    }
}

/// The arithmetic of an embedder's queries and of its passages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Precisions {
    /// Queries' products (not stored, so int8 may be chosen per process:
    /// [`crate::resolve::QUERY_PRECISION_ENV`]).
    pub query: Precision,
    /// Passages' products (stored: int8 only for an embedder named `:q8`, whose model id
    /// says so, [`Precision::passages_id`]).
    pub passage: Precision,
}

impl Default for Precisions {
    /// The reference model's arithmetic for both.
    fn default() -> Self {
        Precisions {
            query: Precision::F32,
            passage: Precision::F32,
        }
    }
}

impl Precisions {
    /// The arithmetic of a text of `kind`.
    pub fn of(self, kind: situate_core::EmbedKind) -> Precision {
        match kind {
            situate_core::EmbedKind::Query => self.query,
            situate_core::EmbedKind::Passage => self.passage,
        }
    }

    /// Quantizes `layers` when either side runs in int8: int8 passages need every layer
    /// quantized (the portable kernel where this CPU has no vectorised one, so that an
    /// index's vectors are the same on every machine); int8 queries use what this CPU
    /// runs fast and f32 for the rest. The error says which layer could not be.
    pub(crate) fn quantize<'a, L: Quantize + 'a>(
        self,
        layers: impl IntoIterator<Item = &'a mut L>,
    ) -> Result<(), String> {
        let passages = self.passage == Precision::Q8;
        if !passages && self.query != Precision::Q8 {
            return Ok(());
        }
        for (i, l) in layers.into_iter().enumerate() {
            let kept = l
                .quantize(passages)
                .map_err(|e| format!("quantizing the weights: {e}"))?;
            if passages && !kept {
                return Err(format!(
                    "int8 passages need layers whose input sizes are multiples of 32 (product {i} is not)"
                ));
            }
        }
        Ok(())
    }
}

pub(crate) struct Norm {
    pub(crate) w: Tensor,
    pub(crate) b: Tensor,
}

impl Norm {
    pub(crate) fn load(vb: VarBuilder, size: usize) -> candle_core::Result<Self> {
        Ok(Norm {
            w: vb.get(size, "weight")?,
            b: vb.get(size, "bias")?,
        })
    }
}

/// A post-LayerNorm transformer layer of the BERT family.
pub(crate) struct Layer {
    /// The query, key and value projections as one product (in × 3·hidden: q | k | v).
    pub(crate) qkv: Dense,
    pub(crate) ao: Dense,
    pub(crate) aln: Norm,
    pub(crate) fi: Dense,
    pub(crate) fo: Dense,
    pub(crate) oln: Norm,
}

/// Where a layer's attention weights are, under `encoder.layer.N.attention`: BERT's
/// `self.query` … `output.LayerNorm`, MPNet's `attn.q` … `LayerNorm`.
pub(crate) struct AttentionNames {
    pub(crate) q: &'static str,
    pub(crate) k: &'static str,
    pub(crate) v: &'static str,
    pub(crate) o: &'static str,
    pub(crate) norm: &'static str,
}

/// BERT's (and XLM-RoBERTa's) names.
pub(crate) const BERT_ATTENTION: AttentionNames = AttentionNames {
    q: "self.query",
    k: "self.key",
    v: "self.value",
    o: "output.dense",
    norm: "output.LayerNorm",
};

impl Layer {
    /// Loads layer `vb` (`encoder.layer.N`) of hidden size `h` and feed-forward size
    /// `inter`, its attention weights named by `names`.
    pub(crate) fn load(
        vb: VarBuilder,
        names: &AttentionNames,
        h: usize,
        inter: usize,
    ) -> candle_core::Result<Self> {
        let a = vb.pp("attention");
        Ok(Layer {
            qkv: Dense::fused(&[a.pp(names.q), a.pp(names.k), a.pp(names.v)], h, h)?,
            ao: Dense::load(a.pp(names.o), h, h)?,
            aln: Norm::load(a.pp(names.norm), h)?,
            fi: Dense::load(vb.pp("intermediate.dense"), h, inter)?,
            fo: Dense::load(vb.pp("output.dense"), inter, h)?,
            oln: Norm::load(vb.pp("output.LayerNorm"), h)?,
        })
    }
}

/// The activation of the feed-forward layers.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Act {
    Gelu,
    GeluTanh,
    Relu,
}

/// A BERT encoder (embeddings + layers), weights in f32.
pub struct Encoder {
    word: Tensor,
    pos: Tensor,
    ty: Tensor,
    eln: Norm,
    layers: Vec<Layer>,
    heads: usize,
    hidden: usize,
    eps: f64,
    act: Act,
    position_offset: usize,
}

impl Encoder {
    /// Loads the weights (`embeddings.*`, `encoder.layer.N.*`, optionally under the
    /// model type's prefix, e.g. `bert.`).
    pub fn load(vb: VarBuilder, config: &Config) -> candle_core::Result<Self> {
        match Self::load_at(vb.clone(), config) {
            Ok(e) => Ok(e),
            Err(first) => match &config.model_type {
                Some(prefix) => Self::load_at(vb.pp(prefix), config).map_err(|_| first),
                None => Err(first),
            },
        }
    }

    /// Loads the weights exactly under `vb` (`embeddings.*`, `encoder.layer.N.*`), without
    /// guessing a prefix.
    pub fn load_at(vb: VarBuilder, c: &Config) -> candle_core::Result<Self> {
        let h = c.hidden_size;
        if c.num_attention_heads == 0 || !h.is_multiple_of(c.num_attention_heads) {
            candle_core::bail!("hidden_size {h} is not a multiple of num_attention_heads");
        }
        let e = vb.pp("embeddings");
        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for i in 0..c.num_hidden_layers {
            layers.push(Layer::load(
                vb.pp(format!("encoder.layer.{i}")),
                &BERT_ATTENTION,
                h,
                c.intermediate_size,
            )?);
        }
        Ok(Encoder {
            word: e.get((c.vocab_size, h), "word_embeddings.weight")?,
            pos: e.get((c.max_position_embeddings, h), "position_embeddings.weight")?,
            ty: e.get((c.type_vocab_size, h), "token_type_embeddings.weight")?,
            eln: Norm::load(e.pp("LayerNorm"), h)?,
            layers,
            heads: c.num_attention_heads,
            hidden: h,
            eps: c.layer_norm_eps,
            act: match c.hidden_act {
                HiddenAct::Gelu => Act::Gelu,
                HiddenAct::GeluApproximate => Act::GeluTanh,
                HiddenAct::Relu => Act::Relu,
            },
            position_offset: 0,
        })
    }

    /// The first position id of a text: 0 for BERT; RoBERTa-family models (XLM-R) number
    /// positions from `pad_token_id + 1`.
    pub fn with_position_offset(mut self, offset: usize) -> Self {
        self.position_offset = offset;
        self
    }

    /// Keeps an int8 copy of every layer's weights so that [`Precision::Q8`] passes use
    /// them (a quarter of the f32 weights' memory more). Returns false, keeping nothing,
    /// when a layer's input size is not a multiple of 32 or, unless `anywhere`, this CPU
    /// runs no vectorised int8 kernel (x86-64 with AVX2 and FMA): Q8 passes are then f32
    /// passes. With `anywhere` the portable kernel stands in (the same values, slowly): an
    /// index whose passages are int8 gets the same vectors on every machine.
    pub fn quantize(&mut self, anywhere: bool) -> candle_core::Result<bool> {
        let mut all = true;
        for l in &mut self.layers {
            for d in [&mut l.qkv, &mut l.ao, &mut l.fi, &mut l.fo] {
                all = all && d.quantize(anywhere)?;
            }
        }
        if !all {
            // All layers in Q8 or none: a half-quantized pass is neither measured nor tested.
            for l in &mut self.layers {
                for d in [&mut l.qkv, &mut l.ao, &mut l.fi, &mut l.fo] {
                    d.q8 = None;
                }
            }
        }
        Ok(all)
    }

    /// The hidden size.
    pub fn hidden_size(&self) -> usize {
        self.hidden
    }

    /// The longest text the position embeddings allow (position offset included).
    pub fn max_tokens(&self) -> usize {
        self.pos
            .dim(0)
            .unwrap_or(0)
            .saturating_sub(self.position_offset)
    }

    /// The mean of the last hidden states of each text (token ids with special tokens, no
    /// padding; token type 0), one row per text.
    /// `precision` chooses the products' arithmetic ([`Precision`]).
    pub fn mean_pooled(
        &self,
        texts: &[Vec<u32>],
        precision: Precision,
    ) -> candle_core::Result<Vec<Vec<f32>>> {
        let h = self.hidden;
        if texts.iter().all(|t| t.is_empty()) {
            return Ok(vec![vec![0.0; h]; texts.len()]);
        }
        let (x, segs) = self.packed(texts.iter().map(|t| (t.as_slice(), None)), precision)?;
        mean_per_text(&x, &segs)
    }

    /// The last hidden state of each text's first token (`[CLS]`, `<s>`): what a
    /// sequence-classification head reads. Each text is (token ids, token type ids); the
    /// type ids may be empty (all 0). One row per text, `texts.len()` × hidden.
    pub fn first_token_states(
        &self,
        texts: &[(Vec<u32>, Vec<u32>)],
    ) -> candle_core::Result<Tensor> {
        if let Some(i) = texts.iter().position(|(ids, _)| ids.is_empty()) {
            candle_core::bail!("text {i} has no tokens");
        }
        let (x, segs) = self.packed(
            texts.iter().map(|(ids, types)| {
                (
                    ids.as_slice(),
                    Some(types.as_slice()).filter(|t| !t.is_empty()),
                )
            }),
            Precision::F32,
        )?;
        let firsts: Vec<u32> = segs.iter().map(|&(s, _)| s as u32).collect();
        x.index_select(&Tensor::new(firsts.as_slice(), x.device())?, 0)
    }

    /// Runs the encoder over texts packed end to end; returns the packed last hidden states
    /// and each text's (first row, rows).
    fn packed<'a>(
        &self,
        texts: impl Iterator<Item = (&'a [u32], Option<&'a [u32]>)>,
        precision: Precision,
    ) -> candle_core::Result<(Tensor, Vec<(usize, usize)>)> {
        let dev = self.word.device();
        let mut ids = Vec::new();
        let mut types = Vec::new();
        let mut any_type = false;
        let mut positions = Vec::new();
        let mut segs = Vec::new();
        let limit = self.pos.dim(0)?;
        for (t, ty) in texts {
            if self.position_offset + t.len() > limit {
                candle_core::bail!(
                    "a text of {} tokens is longer than the model's {} positions",
                    t.len(),
                    limit - self.position_offset.min(limit)
                );
            }
            segs.push((ids.len(), t.len()));
            ids.extend_from_slice(t);
            match ty {
                Some(ty) if ty.len() == t.len() => {
                    any_type |= ty.iter().any(|&x| x != 0);
                    types.extend_from_slice(ty);
                }
                Some(ty) => candle_core::bail!("{} token types for {} tokens", ty.len(), t.len()),
                None => types.extend(std::iter::repeat_n(0u32, t.len())),
            }
            let first = self.position_offset as u32;
            positions.extend(first..first + t.len() as u32);
        }
        let word = self
            .word
            .index_select(&Tensor::new(ids.as_slice(), dev)?, 0)?;
        let pos = self
            .pos
            .index_select(&Tensor::new(positions.as_slice(), dev)?, 0)?;
        let x = if any_type {
            let ty = self
                .ty
                .index_select(&Tensor::new(types.as_slice(), dev)?, 0)?;
            ((word + pos)? + ty)?
        } else {
            (word + pos)?.broadcast_add(&self.ty.narrow(0, 0, 1)?)?
        };
        let mut x = candle_nn::ops::layer_norm(&x, &self.eln.w, &self.eln.b, self.eps as f32)?;
        for l in &self.layers {
            let qkv = l.qkv.forward_with(&x, precision)?;
            let ctx = situate_kernels::with_f32_values(&qkv, |qkv| {
                situate_kernels::attention::packed_attention(qkv, self.hidden, self.heads, &segs)
            })?
            .map_err(candle_core::Error::msg)?;
            let ctx = Tensor::from_vec(ctx, (qkv.dim(0)?, self.hidden), dev)?;
            let y = l.ao.forward_residual(&ctx, &x, precision)?;
            x = candle_nn::ops::layer_norm(&y, &l.aln.w, &l.aln.b, self.eps as f32)?;
            let mid = l.fi.forward_act(&x, self.act, precision)?;
            let y = l.fo.forward_residual(&mid, &x, precision)?;
            x = candle_nn::ops::layer_norm(&y, &l.oln.w, &l.oln.b, self.eps as f32)?;
        }
        Ok((x, segs))
    }
}

/// A model folder's `tokenizer.json`, or why not. The tokenizers crate panics on some
/// malformed files: its decoder reader `expect`s the decoder's JSON to parse, so a syntax
/// error inside the decoder (found by fuzzing, twice) is a panic, not an error. The file is
/// therefore parsed as plain JSON first, and a syntax error is refused with its line and
/// column; any other panic is caught and becomes the error, so a damaged or foreign model
/// folder is refused rather than stopping the process. Every local embedder and
/// cross-encoder loads its tokenizer through this.
pub fn load_tokenizer(path: &std::path::Path) -> Result<tokenizers::Tokenizer, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if let Err(e) = serde_json::from_slice::<serde_json::Value>(&bytes) {
        // Callers prefix the file's name: "tokenizer.json: not JSON (… at line 1 column 301)".
        return Err(format!("not JSON ({e})"));
    }
    match std::panic::catch_unwind(|| tokenizers::Tokenizer::from_bytes(&bytes)) {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(
            "not a tokenizer.json this build can read (the tokenizers library failed on it)".into(),
        ),
    }
}

/// `name` in the Hugging Face model directory `dir`, or why it cannot be read; `kind` names
/// such a directory in the message ("model", "cross-encoder").
pub fn model_file(
    dir: &std::path::Path,
    name: &str,
    kind: &str,
) -> Result<std::path::PathBuf, String> {
    let p = dir.join(name);
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!(
            "{} is missing (a {kind} directory holds config.json, model.safetensors and tokenizer.json)",
            p.display()
        ))
    }
}

/// The f32 weights of a `model.safetensors` file, memory-mapped.
pub fn mmap_weights(path: &std::path::Path) -> candle_core::Result<VarBuilder<'static>> {
    // SAFETY: the weights file is memory-mapped read-only; situate never writes it, and a
    // model directory changed under a running process is outside what it promises.
    unsafe { VarBuilder::from_mmaped_safetensors(&[path], DType::F32, &candle_core::Device::Cpu) }
}

/// Self-attention over texts packed end to end (q, k, v are t × hidden; `segs` holds each
/// text's (first row, rows)), by [`situate_kernels::attention::packed_attention`].
pub(crate) fn packed_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    segs: &[(usize, usize)],
    heads: usize,
) -> candle_core::Result<Tensor> {
    let (t, h) = q.dims2()?;
    let qkv = Tensor::cat(&[q, k, v], 1)?
        .flatten_all()?
        .to_vec1::<f32>()?;
    let ctx = situate_kernels::attention::packed_attention(&qkv, h, heads, segs)
        .map_err(candle_core::Error::msg)?;
    Tensor::from_vec(ctx, (t, h), q.device())
}

/// The mean of each text's rows of packed hidden states.
pub(crate) fn mean_per_text(
    x: &Tensor,
    segs: &[(usize, usize)],
) -> candle_core::Result<Vec<Vec<f32>>> {
    segs.iter()
        .map(|&(s, n)| x.narrow(0, s, n)?.mean(0)?.to_vec1::<f32>())
        .collect()
}

/// `gelu(x + bias)` (exact-erf GELU by the vectorised `erf`) over a t × d matrix.
pub(crate) fn bias_gelu(x: &Tensor, bias: &Tensor) -> candle_core::Result<Tensor> {
    x.apply_op1_no_bwd(&BiasAct {
        bias,
        act: Act::Gelu,
    })
}

/// `act(x + bias)` over a t × d matrix, rows in parallel.
struct BiasAct<'a> {
    bias: &'a Tensor,
    act: Act,
}

impl CustomOp1 for BiasAct<'_> {
    fn name(&self) -> &'static str {
        "bias-act"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(data) = storage else {
            candle_core::bail!("bias-act: f32 only");
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("bias-act: contiguous input only");
        };
        let x = &data[start..end];
        let bias = self.bias.to_dtype(DType::F32)?.to_vec1::<f32>()?;
        let d = bias.len();
        if d == 0 || x.len() % d != 0 {
            candle_core::bail!("bias-act: {} values are not rows of {d}", x.len());
        }
        let mut out = vec![0f32; x.len()];
        let act = self.act;
        // Threads only for large inputs (a batch of passages): a query's few rows are done
        // before a new thread would be scheduled.
        let threads = if x.len() < 1 << 18 {
            1
        } else {
            candle_core::utils::get_num_threads().max(1)
        };
        let rows_per_task = (x.len() / d).div_ceil(threads);
        let work = |xs: &[f32], os: &mut [f32]| {
            for (xr, or) in xs.chunks(d).zip(os.chunks_mut(d)) {
                for ((o, &v), &b) in or.iter_mut().zip(xr).zip(bias.iter()) {
                    *o = v + b;
                }
            }
            match act {
                Act::Gelu => situate_kernels::map_in_place(os, |v| apply(Act::Gelu, v)),
                Act::GeluTanh => situate_kernels::map_in_place(os, |v| apply(Act::GeluTanh, v)),
                Act::Relu => situate_kernels::map_in_place(os, |v| apply(Act::Relu, v)),
            }
        };
        if threads == 1 {
            work(x, &mut out);
        } else {
            std::thread::scope(|scope| {
                for (xs, os) in x
                    .chunks(rows_per_task * d)
                    .zip(out.chunks_mut(rows_per_task * d))
                {
                    scope.spawn(move || work(xs, os));
                }
            });
        }
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }
}

#[inline(always)]
fn apply(act: Act, v: f32) -> f32 {
    match act {
        Act::Gelu => 0.5 * v * (1.0 + erf(v * std::f32::consts::FRAC_1_SQRT_2)),
        Act::GeluTanh => {
            let c = (2.0 / std::f32::consts::PI).sqrt();
            0.5 * v * (1.0 + (c * (v + 0.044715 * v * v * v)).tanh())
        }
        Act::Relu => v.max(0.0),
    }
}

/// erf by Abramowitz & Stegun 7.1.26 (absolute error ≤ 1.5e-7 in exact arithmetic, under
/// 1e-6 in f32 as the test measures; a few f32 ulps): branch-free, unlike libm's `erff`.
#[inline(always)]
fn erf(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152_1 + t * 1.061_405_4))));
    let y = 1.0 - poly * situate_kernels::exp(-a * a);
    y.copysign(x)
}

#[cfg(test)]
mod tests {
    #[test]
    fn erf_matches_libm_to_f32_rounding() {
        let mut worst = 0f64;
        for i in -6000..=6000 {
            let x = i as f32 / 1000.0;
            let want = libm_erf(x as f64);
            worst = worst.max((super::erf(x) as f64 - want).abs());
        }
        assert!(worst < 1e-6, "worst error {worst}");
    }

    /// erf by its Taylor series / continued fraction in f64, as the reference.
    fn libm_erf(x: f64) -> f64 {
        // erf(x) = 2/sqrt(pi) * sum_n (-1)^n x^(2n+1) / (n! (2n+1)), enough terms for |x| ≤ 6
        // in f64 would lose precision; use the complementary form for large |x|.
        if x.abs() > 3.0 {
            return x.signum() * (1.0 - erfc_cf(x.abs()));
        }
        let mut sum = 0.0;
        let mut term = x;
        let mut n = 0.0;
        while term.abs() > 1e-17 {
            sum += term / (2.0 * n + 1.0);
            n += 1.0;
            term *= -x * x / n;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    /// erfc(x) for x > 3 by its continued fraction.
    fn erfc_cf(x: f64) -> f64 {
        let mut f = 0.0;
        for k in (1..60).rev() {
            f = (k as f64 / 2.0) / (x + f);
        }
        (-x * x).exp() / std::f64::consts::PI.sqrt() / (x + f)
    }
}
