//! Self-attention over one text in candle's batched products, for the encoders whose
//! attention needs more than [`situate_kernels::attention`] does (a head size of 32 or 64,
//! as many key heads as query heads, nothing added to the scores): MPNet's relative
//! position bias, EmbeddingGemma's grouped key/value heads (3 query heads on one key head
//! of 256) and its sliding window, and nomic-bert's rotary positions (applied before).
//!
//! Each text is attended on its own (texts are packed end to end by the callers, as in
//! [`crate::encoder`], so no padding and no padding mask), one batched product per group
//! of heads for the scores and one for the context.

use crate::encoder::Precision;
use candle_core::{Device, Tensor};
use situate_kernels::i8::I8Matrix;

/// The shape of a layer's attention.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Heads {
    /// Query heads.
    pub heads: usize,
    /// Key and value heads (a divisor of `heads`; query head h reads key head
    /// `h / (heads / kv_heads)`, as Hugging Face's `repeat_kv` pairs them).
    pub kv_heads: usize,
    /// Size of one head.
    pub head_dim: usize,
    /// What the scores are multiplied by before `bias` is added (1/√head_dim usually).
    pub scale: f64,
}

/// Attention of one text: `q` is n × heads·head_dim, `k` and `v` n × kv_heads·head_dim;
/// `bias`, added to the scaled scores, is heads × n × n or n × n (broadcast over heads;
/// −∞ masks a pair out). Returns n × heads·head_dim.
pub(crate) fn attend(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    h: Heads,
    bias: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    let n = q.dim(0)?;
    let (heads, kv, d) = (h.heads, h.kv_heads, h.head_dim);
    if kv == 0 || !heads.is_multiple_of(kv) {
        candle_core::bail!("{heads} query heads cannot share {kv} key heads");
    }
    let group = heads / kv;
    // heads × n × d, grouped by the key head they read: kv × (group·n) × d.
    let q = q
        .reshape((n, heads, d))?
        .transpose(0, 1)?
        .contiguous()?
        .reshape((kv, group * n, d))?;
    let k = k.reshape((n, kv, d))?.transpose(0, 1)?.contiguous()?;
    let v = v.reshape((n, kv, d))?.transpose(0, 1)?.contiguous()?;
    let scores = (q.matmul(&k.t()?)? * h.scale)?.reshape((heads, n, n))?;
    let scores = match bias {
        Some(b) => scores.broadcast_add(b)?,
        None => scores,
    };
    let probs = situate_kernels::softmax_last_dim(&scores)?.reshape((kv, group * n, n))?;
    probs
        .matmul(&v)?
        .reshape((heads, n, d))?
        .transpose(0, 1)?
        .contiguous()?
        .reshape((n, heads * d))
}

/// A linear layer without bias: its weight as loaded (out × in), transposed once, on its
/// first f32 product, to in × out so that gemm reads it in place (see [`crate::encoder`]),
/// and optionally the same weight in int8 for [`Precision::Q8`] products
/// ([`Linear::quantize`]).
///
/// The transposition waits for an f32 product because a process that only embeds queries
/// (a one-shot `situate search`, a query node) runs them in int8 by default and never
/// needs it: perf showed the transpositions, and the transposition back that quantizing
/// needed, as a third of such a process's time (EmbeddingGemma's 400 MB of layers).
pub(crate) struct Linear {
    /// The weight as loaded, until the transposed copy replaces it.
    w: std::sync::Mutex<Option<Tensor>>,
    /// in × out, made on the first f32 product.
    wt: std::sync::OnceLock<Tensor>,
    /// Output size.
    outputs: usize,
    q8: Option<I8Matrix>,
}

impl Linear {
    /// From weights in Hugging Face's layout (out × in each), side by side when several:
    /// their outputs are then one product's columns, in order.
    pub fn fused(weights: &[Tensor]) -> candle_core::Result<Self> {
        let w = if weights.len() == 1 {
            weights[0].contiguous()?
        } else {
            Tensor::cat(weights, 0)?
        };
        Ok(Linear {
            outputs: w.dim(0)?,
            w: std::sync::Mutex::new(Some(w)),
            wt: std::sync::OnceLock::new(),
            q8: None,
        })
    }

    /// The weight in × out, made from the loaded one on first use (which it replaces).
    fn transposed(&self) -> candle_core::Result<&Tensor> {
        if let Some(t) = self.wt.get() {
            return Ok(t);
        }
        let mut w = self
            .w
            .lock()
            .map_err(|_| candle_core::Error::msg("a linear layer's weight lock is poisoned"))?;
        // Another thread may have made it while this one waited for the lock.
        if let Some(t) = self.wt.get() {
            return Ok(t);
        }
        let t = match w.as_ref() {
            Some(src) => src.t()?.contiguous()?,
            None => candle_core::bail!("a linear layer lost its weight"),
        };
        *w = None;
        Ok(self.wt.get_or_init(|| t))
    }

    /// Keeps an int8 copy of the weight (one scale per output channel,
    /// [`situate_kernels::i8`]); with `anywhere`, the portable kernel where this CPU runs
    /// no vectorised one. False (nothing kept) when the input size is not a multiple of 32
    /// or, without `anywhere`, no vectorised kernel runs here.
    pub fn quantize(&mut self, anywhere: bool) -> candle_core::Result<bool> {
        let w = match self.w.get_mut() {
            Ok(Some(w)) => w.clone(),
            // Already transposed: back to out × in.
            _ => self.transposed()?.t()?.contiguous()?,
        };
        self.q8 = crate::encoder::int8_copy(&w, anywhere)?;
        Ok(self.q8.is_some())
    }

    /// x (t × in) → t × out, in f32.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        x.matmul(self.transposed()?)
    }

    /// x (t × in) → t × out, in int8 when `precision` is [`Precision::Q8`] and an int8
    /// copy is kept, in f32 otherwise.
    pub fn forward_with(&self, x: &Tensor, precision: Precision) -> candle_core::Result<Tensor> {
        match (&self.q8, precision) {
            (Some(q8), Precision::Q8) => q8.forward(x),
            _ => self.forward(x),
        }
    }

    /// Output size.
    pub fn outputs(&self) -> usize {
        self.outputs
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// Grouped heads read the key head Hugging Face's `repeat_kv` gives them: the same as
    /// repeating the key and value heads and attending head by head.
    #[test]
    fn grouped_heads_match_repeated_keys_and_the_bias_is_added_after_scaling() {
        let dev = Device::Cpu;
        let (n, heads, kv, d) = (5, 4, 2, 8);
        let q = Tensor::randn(0f32, 1.0, (n, heads * d), &dev).expect("q");
        let k = Tensor::randn(0f32, 1.0, (n, kv * d), &dev).expect("k");
        let v = Tensor::randn(0f32, 1.0, (n, kv * d), &dev).expect("v");
        let bias = Tensor::randn(0f32, 1.0, (heads, n, n), &dev).expect("bias");
        let h = Heads {
            heads,
            kv_heads: kv,
            head_dim: d,
            scale: 0.3,
        };
        let got = attend(&q, &k, &v, h, Some(&bias))
            .expect("attends")
            .to_vec2::<f32>()
            .expect("vec");
        let qv = q.to_vec2::<f32>().expect("q");
        let kv_ = k.to_vec2::<f32>().expect("k");
        let vv = v.to_vec2::<f32>().expect("v");
        let bv = bias.to_vec3::<f32>().expect("b");
        for head in 0..heads {
            let g = head / (heads / kv);
            for i in 0..n {
                let s: Vec<f32> = (0..n)
                    .map(|j| {
                        (0..d)
                            .map(|x| qv[i][head * d + x] * kv_[j][g * d + x])
                            .sum::<f32>()
                            * 0.3
                            + bv[head][i][j]
                    })
                    .collect();
                let m = s.iter().cloned().fold(f32::MIN, f32::max);
                let e: Vec<f32> = s.iter().map(|x| (x - m).exp()).collect();
                let z: f32 = e.iter().sum();
                for x in 0..d {
                    let want: f32 = (0..n).map(|j| e[j] / z * vv[j][g * d + x]).sum();
                    let have = got[i][head * d + x];
                    assert!((want - have).abs() < 1e-4, "{want} vs {have}");
                }
            }
        }
    }
}
