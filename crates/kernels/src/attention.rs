//! Multi-head self-attention over texts packed end to end, from one fused q|k|v matrix.
//!
//! Why by hand: in candle, attention for one text is a dozen tensor operations (three
//! narrow-reshape-transpose copies, a batched product per head for the scores and another for
//! the context, a softmax, a transpose and a concatenation), each allocating its result; for
//! a query of a dozen tokens those operations, not the arithmetic, were the time. Here each
//! text's keys are transposed once per head, and a row's attention is computed where it
//! lies: its scores against its own text's keys (`head_dim` vectorised passes over them), a
//! softmax ([`crate::exp`]), and the weighted sum of the value rows written straight into
//! the output row. Rows run in parallel on rayon's pool when
//! there is enough work. No maintained crate offers attention over candle's f32 buffers with
//! packed (unpadded) texts.

use rayon::prelude::*;

/// Rows of work below which the whole product runs on the calling thread.
const PARALLEL_MIN_WORK: usize = 1 << 16;

/// Self-attention of texts packed end to end.
///
/// `qkv` holds `rows` rows of `3 × hidden` values: the query, key and value projections side
/// by side (q | k | v), heads as consecutive `hidden / heads` slices of each. `segs` lists
/// each text's (first row, rows); every text attends to itself only, so no mask is needed.
/// Returns the `rows × hidden` context (heads side by side), scores scaled by
/// `1 / sqrt(head_dim)`.
pub fn packed_attention(
    qkv: &[f32],
    hidden: usize,
    heads: usize,
    segs: &[(usize, usize)],
) -> Result<Vec<f32>, String> {
    if heads == 0 || hidden == 0 || !hidden.is_multiple_of(heads) {
        return Err(format!("{hidden} values cannot be cut into {heads} heads"));
    }
    let width = 3 * hidden;
    if !qkv.len().is_multiple_of(width) {
        return Err(format!("{} values are not rows of {width}", qkv.len()));
    }
    let rows = qkv.len() / width;
    // The text of each row.
    let mut text_of = vec![usize::MAX; rows];
    for (t, &(first, n)) in segs.iter().enumerate() {
        if first + n > rows {
            return Err(format!("text {t} ends at row {} of {rows}", first + n));
        }
        text_of[first..first + n].fill(t);
    }
    if let Some(r) = text_of.iter().position(|&t| t == usize::MAX) {
        return Err(format!("row {r} belongs to no text"));
    }
    // Every text's keys transposed, head by head (head_dim × n, a text's block at the same
    // offset as its rows), so that a row's scores are `head_dim` vectorised passes over
    // contiguous keys instead of `n` short dot products each ending in a horizontal sum.
    let hd = hidden / heads;
    let mut kt = vec![0f32; rows * hidden];
    for &(first, n) in segs {
        let block = &mut kt[first * hidden..(first + n) * hidden];
        for h in 0..heads {
            for d in 0..hd {
                let dst = &mut block[(h * hd + d) * n..][..n];
                for (j, x) in dst.iter_mut().enumerate() {
                    *x = qkv[(first + j) * width + hidden + h * hd + d];
                }
            }
        }
    }
    let mut out = vec![0f32; rows * hidden];
    let longest = segs.iter().map(|s| s.1).max().unwrap_or(0);
    let work: usize = segs.iter().map(|s| s.1 * s.1).sum::<usize>() * hidden;
    let row = |r: usize, o: &mut [f32], scores: &mut Vec<f32>| {
        let (first, n) = segs[text_of[r]];
        let text = Text {
            qkv,
            keys: &kt[first * hidden..(first + n) * hidden],
            hidden,
            heads,
            first,
            n,
        };
        attend_row(&text, r, o, scores);
    };
    if work < PARALLEL_MIN_WORK {
        let mut scores = Vec::with_capacity(longest);
        for (r, o) in out.chunks_mut(hidden).enumerate() {
            row(r, o, &mut scores);
        }
    } else {
        // A few rows per task, each task with its own score buffer.
        let per_task = (PARALLEL_MIN_WORK / (longest * hidden).max(1)).clamp(1, 64);
        out.par_chunks_mut(hidden * per_task)
            .enumerate()
            .for_each(|(task, block)| {
                let mut scores = Vec::with_capacity(longest);
                for (i, o) in block.chunks_mut(hidden).enumerate() {
                    row(task * per_task + i, o, &mut scores);
                }
            });
    }
    Ok(out)
}

/// One text of a product: the fused rows, its keys transposed per head, and where it lies.
struct Text<'a> {
    qkv: &'a [f32],
    keys: &'a [f32],
    hidden: usize,
    heads: usize,
    first: usize,
    n: usize,
}

/// Row `r`'s attention (a row of `t`), every head, into `out` (`hidden` values).
#[inline]
fn attend_row(t: &Text<'_>, r: usize, out: &mut [f32], scores: &mut Vec<f32>) {
    #[cfg(target_arch = "x86_64")]
    if crate::avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA, checked at run time.
        return unsafe { attend_row_avx2(t, r, out, scores) };
    }
    attend_row_generic(t, r, out, scores)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn attend_row_avx2(t: &Text<'_>, r: usize, out: &mut [f32], scores: &mut Vec<f32>) {
    attend_row_generic(t, r, out, scores)
}

#[inline(always)]
fn attend_row_generic(t: &Text<'_>, r: usize, out: &mut [f32], scores: &mut Vec<f32>) {
    let &Text {
        qkv,
        keys,
        hidden,
        heads,
        first,
        n,
    } = t;
    let width = 3 * hidden;
    let hd = hidden / heads;
    let scale = 1.0 / (hd as f32).sqrt();
    out.fill(0.0);
    for h in 0..heads {
        let q = &qkv[r * width + h * hd..][..hd];
        scores.clear();
        scores.resize(n, 0.0);
        for (d, &qd) in q.iter().enumerate() {
            let qd = qd * scale;
            let k = &keys[(h * hd + d) * n..][..n];
            for (s, &k) in scores.iter_mut().zip(k) {
                *s = qd.mul_add(k, *s);
            }
        }
        let max = max_of(scores);
        let inv = 1.0 / exp_sum(scores, max);
        let o = &mut out[h * hd..][..hd];
        for (j, &p) in (first..first + n).zip(scores.iter()) {
            let v = &qkv[j * width + 2 * hidden + h * hd..][..hd];
            let p = p * inv;
            for (o, &v) in o.iter_mut().zip(v) {
                *o = p.mul_add(v, *o);
            }
        }
    }
}

/// The largest value, in eight independent lanes (so it vectorises).
#[inline(always)]
fn max_of(xs: &[f32]) -> f32 {
    let mut m = [f32::NEG_INFINITY; 8];
    let chunks = xs.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for l in 0..8 {
            m[l] = m[l].max(c[l]);
        }
    }
    rest.iter().fold(
        m.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)),
        |a, &b| a.max(b),
    )
}

/// `e^(x - max)` in place, and the sum, in eight independent lanes.
#[inline(always)]
fn exp_sum(xs: &mut [f32], max: f32) -> f32 {
    let mut acc = [0f32; 8];
    let mut chunks = xs.chunks_exact_mut(8);
    for c in &mut chunks {
        for l in 0..8 {
            c[l] = crate::exp(c[l] - max);
            acc[l] += c[l];
        }
    }
    let mut sum = acc.iter().sum::<f32>();
    for x in chunks.into_remainder() {
        *x = crate::exp(*x - max);
        sum += *x;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attention computed plainly in f64, one text and head at a time.
    fn reference(qkv: &[f32], hidden: usize, heads: usize, segs: &[(usize, usize)]) -> Vec<f64> {
        let width = 3 * hidden;
        let hd = hidden / heads;
        let rows = qkv.len() / width;
        let mut out = vec![0f64; rows * hidden];
        let at = |r: usize, c: usize| qkv[r * width + c] as f64;
        for &(first, n) in segs {
            for h in 0..heads {
                for i in first..first + n {
                    let s: Vec<f64> = (first..first + n)
                        .map(|j| {
                            (0..hd)
                                .map(|d| at(i, h * hd + d) * at(j, hidden + h * hd + d))
                                .sum::<f64>()
                                / (hd as f64).sqrt()
                        })
                        .collect();
                    let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = s.iter().map(|x| (x - max).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    for d in 0..hd {
                        out[i * hidden + h * hd + d] = (first..first + n)
                            .zip(&e)
                            .map(|(j, p)| p / sum * at(j, 2 * hidden + h * hd + d))
                            .sum();
                    }
                }
            }
        }
        out
    }

    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0
            })
            .collect()
    }

    #[test]
    fn matches_plain_attention_on_packed_texts_small_and_parallel() {
        // Small (sequential) and large (parallel) inputs; head size 32 as MiniLM's, and 12
        // (not a multiple of the 8 lanes).
        for (hidden, heads, lens) in [
            (64, 2, vec![3, 1, 7]),
            (96, 8, vec![5, 9]),
            (384, 12, vec![60, 130, 1, 77]),
        ] {
            let rows: usize = lens.iter().sum();
            let qkv = values(rows * 3 * hidden, 0x2545_f491_4f6c_dd1d + rows as u64);
            let mut segs = Vec::new();
            let mut first = 0;
            for n in &lens {
                segs.push((first, *n));
                first += n;
            }
            let ours = packed_attention(&qkv, hidden, heads, &segs).expect("attention");
            let want = reference(&qkv, hidden, heads, &segs);
            for (i, (a, b)) in ours.iter().zip(&want).enumerate() {
                assert!(
                    (*a as f64 - b).abs() <= 1e-5 * (1.0 + b.abs()),
                    "{hidden}/{heads} {lens:?}: value {i}: {a} against {b}"
                );
            }
        }
    }

    #[test]
    fn bad_shapes_are_refused() {
        let qkv = vec![0f32; 3 * 64 * 4];
        assert!(packed_attention(&qkv, 64, 5, &[(0, 4)]).is_err());
        assert!(packed_attention(&qkv, 64, 2, &[(0, 5)]).is_err());
        assert!(
            packed_attention(&qkv, 64, 2, &[(0, 3)]).is_err(),
            "row 3 in no text"
        );
        assert!(packed_attention(&qkv[..100], 64, 2, &[(0, 1)]).is_err());
    }
}
