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
    attention_with(qkv, hidden, heads, segs, Block::best())
}

/// [`packed_attention`] with blocks of rows attended by `block`.
fn attention_with(
    qkv: &[f32],
    hidden: usize,
    heads: usize,
    segs: &[(usize, usize)],
    block: Block,
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
    let kt = transpose_keys(qkv, hidden, heads, segs);
    let mut out = vec![0f32; rows * hidden];
    let longest = segs.iter().map(|s| s.1).max().unwrap_or(0);
    let work: usize = segs.iter().map(|s| s.1 * s.1).sum::<usize>() * hidden;
    let ctx = Packed {
        qkv,
        kt: &kt,
        hidden,
        heads,
        segs,
        text_of: &text_of,
        block,
    };
    if work < PARALLEL_MIN_WORK {
        let mut scores = Vec::with_capacity(BLOCK_ROWS * longest);
        ctx.attend_rows(0, &mut out, &mut scores);
    } else {
        // A few rows per task (whole blocks of [`BLOCK_ROWS`]), each task with its own score
        // buffer.
        let per_task = (PARALLEL_MIN_WORK / (longest * hidden).max(1))
            .clamp(1, 64)
            .next_multiple_of(BLOCK_ROWS);
        out.par_chunks_mut(hidden * per_task)
            .enumerate()
            .for_each(|(task, block)| {
                let mut scores = Vec::with_capacity(BLOCK_ROWS * longest);
                ctx.attend_rows(task * per_task, block, &mut scores);
            });
    }
    Ok(out)
}

/// Every text's keys transposed, head by head (head_dim × n, a text's block at the same
/// offset as its rows), so that a row's scores are `head_dim` vectorised passes over
/// contiguous keys instead of `n` short dot products each ending in a horizontal sum.
fn transpose_keys(qkv: &[f32], hidden: usize, heads: usize, segs: &[(usize, usize)]) -> Vec<f32> {
    let width = 3 * hidden;
    let rows = qkv.len() / width;
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
    kt
}

/// Rows attended together by [`attend_block`]: each key and value loaded serves this many
/// rows (the row-at-a-time loop loaded a key vector and loaded and stored a score vector
/// per multiply-add, and loaded and stored the output row per value row).
const BLOCK_ROWS: usize = 8;

/// The head size [`attend_block`] is built for (MiniLM's, e5-small's and bge-small's: 384
/// values in 12 heads); other sizes go row by row.
const BLOCK_HEAD: usize = 32;

/// A whole product's inputs.
struct Packed<'a> {
    qkv: &'a [f32],
    /// Every text's keys transposed per head.
    kt: &'a [f32],
    hidden: usize,
    heads: usize,
    segs: &'a [(usize, usize)],
    text_of: &'a [usize],
    block: Block,
}

/// How blocks of [`BLOCK_ROWS`] rows are attended: every choice gives the same values, to
/// the bit.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Block {
    /// In AVX-512 registers ([`attend_block_avx512`]).
    Avx512,
    /// In AVX2 registers ([`attend_block_avx2`]).
    Avx2,
    /// Row by row.
    Rows,
}

impl Block {
    /// The fastest this CPU runs.
    fn best() -> Block {
        Block::at(situate_core::cpu::chosen())
    }

    /// The block kernel of `level`.
    fn at(level: situate_core::cpu::Level) -> Block {
        if cfg!(target_arch = "x86_64") && level.avx512() {
            Block::Avx512
        } else if cfg!(target_arch = "x86_64") && level.avx2() {
            Block::Avx2
        } else {
            Block::Rows
        }
    }
}

impl Packed<'_> {
    /// Rows `r0..` (as many as `out` holds `hidden`-value rows) into `out`: runs of rows of
    /// one text in blocks of [`BLOCK_ROWS`] where the head size allows, the rest row by row
    /// (the same values either way, to the bit).
    fn attend_rows(&self, r0: usize, out: &mut [f32], scores: &mut Vec<f32>) {
        let hidden = self.hidden;
        let rows = out.len() / hidden;
        let blocked = hidden / self.heads == BLOCK_HEAD;
        let mut i = 0;
        while i < rows {
            let r = r0 + i;
            let (first, n) = self.segs[self.text_of[r]];
            let text = Text {
                qkv: self.qkv,
                keys: &self.kt[first * hidden..(first + n) * hidden],
                hidden,
                heads: self.heads,
                first,
                n,
            };
            let run = (first + n - r).min(rows - i);
            let mut done = 0;
            while blocked && done + BLOCK_ROWS <= run {
                let o = &mut out[(i + done) * hidden..(i + done + BLOCK_ROWS) * hidden];
                attend_block(&text, r + done, o, scores, self.block);
                done += BLOCK_ROWS;
            }
            for k in done..run {
                attend_row(&text, r + k, &mut out[(i + k) * hidden..][..hidden], scores);
            }
            i += run;
        }
    }
}

/// Rows `r..r + BLOCK_ROWS` of `t` (head size [`BLOCK_HEAD`]), every head, into `out`.
#[inline]
fn attend_block(t: &Text<'_>, r: usize, out: &mut [f32], scores: &mut Vec<f32>, block: Block) {
    #[cfg(target_arch = "x86_64")]
    match block {
        // SAFETY: `Block::at` gives it for a level the CPU runs (`cpu::chosen`, or a
        // level of `cpu::levels_here` in the tests), which has AVX-512F, AVX2 and FMA.
        Block::Avx512 => return unsafe { attend_block_avx512(t, r, out, scores) },
        // SAFETY: as above, AVX2 and FMA.
        Block::Avx2 => return unsafe { attend_block_avx2(t, r, out, scores) },
        Block::Rows => {}
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = block;
    let hidden = t.hidden;
    for (i, o) in out.chunks_mut(hidden).enumerate() {
        attend_row(t, r + i, o, scores);
    }
}

/// Rows `r..r + BLOCK_ROWS` of head `h`'s queries, scaled by `1 / sqrt(head_dim)` as row by
/// row (head size [`BLOCK_HEAD`]).
#[inline(always)]
fn block_queries(t: &Text<'_>, r: usize, h: usize) -> [[f32; BLOCK_HEAD]; BLOCK_ROWS] {
    let width = 3 * t.hidden;
    let scale = 1.0 / (BLOCK_HEAD as f32).sqrt();
    let mut q = [[0f32; BLOCK_HEAD]; BLOCK_ROWS];
    for (i, q) in q.iter_mut().enumerate() {
        let row = &t.qkv[(r + i) * width + h * BLOCK_HEAD..][..BLOCK_HEAD];
        for (q, &x) in q.iter_mut().zip(row) {
            *q = x * scale;
        }
    }
    q
}

/// [`attend_row_generic`] for [`BLOCK_ROWS`] rows at once, in AVX2 registers: each key
/// vector loaded once for four rows' scores, each value row once for four rows' sums, the
/// sums held in registers (the compiler, left to vectorise the same loops over arrays,
/// gathered and scattered them). Every value is the same chain of fused multiply-adds in
/// the same order as row by row, so the results are identical to the bit (a unit test
/// checks). Four rows' sums take 16 registers: AVX-512 machines have 32; on AVX2 alone
/// some spill.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn attend_block_avx2(t: &Text<'_>, r: usize, out: &mut [f32], scores: &mut Vec<f32>) {
    use std::arch::x86_64::*;
    const R: usize = BLOCK_ROWS;
    const HD: usize = BLOCK_HEAD;
    /// Rows per pass.
    const P: usize = 4;
    let &Text {
        qkv,
        keys,
        hidden,
        heads,
        first,
        n,
    } = t;
    let width = 3 * hidden;
    scores.clear();
    scores.resize(R * n, 0.0);
    assert!(out.len() == R * hidden && keys.len() == heads * HD * n && r + R <= first + n);
    for h in 0..heads {
        let q = block_queries(t, r, h);
        let kt = &keys[h * HD * n..][..HD * n];
        for pass in 0..R / P {
            let q = &q[pass * P..][..P];
            // Scores, 16 keys at a time.
            let mut j = 0;
            while j + 16 <= n {
                // SAFETY: AVX2 and FMA are enabled here; every load and store is of 8 values
                // inside a slice of at least 8 (the ranges are checked).
                unsafe {
                    let mut acc = [[_mm256_setzero_ps(); 2]; P];
                    for d in 0..HD {
                        let k = &kt[d * n + j..][..16];
                        let k0 = _mm256_loadu_ps(k.as_ptr());
                        let k1 = _mm256_loadu_ps(k[8..].as_ptr());
                        for (acc, q) in acc.iter_mut().zip(q) {
                            let qd = _mm256_set1_ps(q[d]);
                            acc[0] = _mm256_fmadd_ps(qd, k0, acc[0]);
                            acc[1] = _mm256_fmadd_ps(qd, k1, acc[1]);
                        }
                    }
                    for (i, acc) in acc.iter().enumerate() {
                        let s = &mut scores[(pass * P + i) * n + j..][..16];
                        _mm256_storeu_ps(s.as_mut_ptr(), acc[0]);
                        _mm256_storeu_ps(s[8..].as_mut_ptr(), acc[1]);
                    }
                }
                j += 16;
            }
            for (i, q) in q.iter().enumerate() {
                for jj in j..n {
                    let mut s = 0f32;
                    for (d, &qd) in q.iter().enumerate() {
                        s = qd.mul_add(kt[d * n + jj], s);
                    }
                    scores[(pass * P + i) * n + jj] = s;
                }
            }
        }
        let mut inv = [0f32; R];
        for (i, inv) in inv.iter_mut().enumerate() {
            let s = &mut scores[i * n..][..n];
            let max = max_of(s);
            *inv = 1.0 / exp_sum(s, max);
        }
        // The weighted sums of the value rows.
        for pass in 0..R / P {
            // SAFETY: as above.
            unsafe {
                let mut acc = [[_mm256_setzero_ps(); HD / 8]; P];
                for jj in 0..n {
                    let v = &qkv[(first + jj) * width + 2 * hidden + h * HD..][..HD];
                    let v = [
                        _mm256_loadu_ps(v.as_ptr()),
                        _mm256_loadu_ps(v[8..].as_ptr()),
                        _mm256_loadu_ps(v[16..].as_ptr()),
                        _mm256_loadu_ps(v[24..].as_ptr()),
                    ];
                    for (i, acc) in acc.iter_mut().enumerate() {
                        let row = pass * P + i;
                        let p = _mm256_set1_ps(scores[row * n + jj] * inv[row]);
                        for (a, &v) in acc.iter_mut().zip(&v) {
                            *a = _mm256_fmadd_ps(p, v, *a);
                        }
                    }
                }
                for (i, acc) in acc.iter().enumerate() {
                    let o = &mut out[(pass * P + i) * hidden + h * HD..][..HD];
                    for (c, a) in acc.iter().enumerate() {
                        _mm256_storeu_ps(o[c * 8..].as_mut_ptr(), *a);
                    }
                }
            }
        }
    }
}

/// [`attend_row_generic`] for [`BLOCK_ROWS`] rows at once in AVX-512 registers: the
/// block's eight rows' scores against 32 keys at a time, and their eight weighted sums of
/// the value rows (32 values each), all in 16 registers, so that each key and value vector
/// loaded serves the eight rows; a text's last keys are read with masked loads. Each score
/// and output value is the same chain of fused multiply-adds in the same order as row by
/// row, so the results are identical to the bit (a unit test checks). On a CPU whose
/// 512-bit units are full width, twice the arithmetic per instruction of the AVX2 block,
/// and half the loads per multiply-add.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn attend_block_avx512(t: &Text<'_>, r: usize, out: &mut [f32], scores: &mut Vec<f32>) {
    use std::arch::x86_64::*;
    const R: usize = BLOCK_ROWS;
    const HD: usize = BLOCK_HEAD;
    let &Text {
        qkv,
        keys,
        hidden,
        heads,
        first,
        n,
    } = t;
    let width = 3 * hidden;
    scores.clear();
    scores.resize(R * n, 0.0);
    assert!(
        out.len() == R * hidden
            && keys.len() == heads * HD * n
            && r + R <= first + n
            && heads * HD == hidden
            && qkv.len() >= (first + n) * width
    );
    for h in 0..heads {
        let q = block_queries(t, r, h);
        let kt = keys[h * HD * n..][..HD * n].as_ptr();
        let sp = scores.as_mut_ptr();
        // Scores, 32 keys at a time, the last step's missing keys masked off.
        let mut j = 0;
        while j < n {
            let (m0, m1) = (
                crate::lanes(n - j),
                crate::lanes((n - j).saturating_sub(16)),
            );
            // SAFETY: AVX-512F is enabled here. Key `j + l` of dimension `d` is at `d·n + j
            // + l` in the head's keys (HD × n), and score `j + l` of row `i` at `i·n + j +
            // l` (R × n); the masks keep `j + l < n`, and masked-off lanes are neither read
            // nor written (the pointers are only formed, with wrapping arithmetic).
            unsafe {
                let mut acc = [[_mm512_setzero_ps(); 2]; R];
                for d in 0..HD {
                    let k = kt.wrapping_add(d * n + j);
                    let k0 = _mm512_maskz_loadu_ps(m0, k);
                    let k1 = _mm512_maskz_loadu_ps(m1, k.wrapping_add(16));
                    for (acc, q) in acc.iter_mut().zip(&q) {
                        let qd = _mm512_set1_ps(q[d]);
                        acc[0] = _mm512_fmadd_ps(qd, k0, acc[0]);
                        acc[1] = _mm512_fmadd_ps(qd, k1, acc[1]);
                    }
                }
                for (i, acc) in acc.iter().enumerate() {
                    let s = sp.wrapping_add(i * n + j);
                    _mm512_mask_storeu_ps(s, m0, acc[0]);
                    _mm512_mask_storeu_ps(s.wrapping_add(16), m1, acc[1]);
                }
            }
            j += 32;
        }
        // Softmax per row; each probability is its exponential times the inverse sum, as
        // row by row.
        for s in scores.chunks_exact_mut(n) {
            let max = max_of(s);
            let inv = 1.0 / exp_sum(s, max);
            s.iter_mut().for_each(|p| *p *= inv);
        }
        // The weighted sums of the value rows.
        let mut acc = [[_mm512_setzero_ps(); 2]; R];
        for jj in 0..n {
            // SAFETY: value row `first + jj` (< first + n, asserted) holds HD = 32 values
            // at `2·hidden + h·HD` of its `width`; probability `jj` of row `i` is at `i·n +
            // jj` of the R × n scores.
            unsafe {
                let v = qkv.as_ptr().add((first + jj) * width + 2 * hidden + h * HD);
                let (v0, v1) = (_mm512_loadu_ps(v), _mm512_loadu_ps(v.add(16)));
                for (i, acc) in acc.iter_mut().enumerate() {
                    let p = _mm512_set1_ps(*scores.get_unchecked(i * n + jj));
                    acc[0] = _mm512_fmadd_ps(p, v0, acc[0]);
                    acc[1] = _mm512_fmadd_ps(p, v1, acc[1]);
                }
            }
        }
        for (i, acc) in acc.iter().enumerate() {
            let o = &mut out[i * hidden + h * HD..][..HD];
            // SAFETY: `o` holds 32 values.
            unsafe {
                _mm512_storeu_ps(o.as_mut_ptr(), acc[0]);
                _mm512_storeu_ps(o.as_mut_ptr().add(16), acc[1]);
            }
        }
    }
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

/// The largest value, in 16 independent lanes (so it vectorises, on AVX-512 in one
/// register).
#[inline(always)]
fn max_of(xs: &[f32]) -> f32 {
    let mut m = [f32::NEG_INFINITY; 16];
    let chunks = xs.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for l in 0..16 {
            m[l] = m[l].max(c[l]);
        }
    }
    rest.iter().fold(
        m.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)),
        |a, &b| a.max(b),
    )
}

/// `e^(x - max)` in place, and the sum, in 16 independent lanes.
#[inline(always)]
fn exp_sum(xs: &mut [f32], max: f32) -> f32 {
    let mut acc = [0f32; 16];
    let mut chunks = xs.chunks_exact_mut(16);
    for c in &mut chunks {
        for l in 0..16 {
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

    /// The blocked kernel gives the row-by-row kernel's values to the bit, texts of every
    /// length around the block and lane sizes, sequential and parallel.
    #[test]
    fn blocks_of_rows_equal_rows_one_by_one() {
        let (hidden, heads) = (384, 12);
        let lens = vec![8, 1, 15, 16, 17, 31, 32, 33, 60, 130, 3, 77, 24];
        let rows: usize = lens.iter().sum();
        let qkv = values(rows * 3 * hidden, 0x9e37_79b9 + rows as u64);
        let mut segs = Vec::new();
        let mut first = 0;
        for n in &lens {
            segs.push((first, *n));
            first += n;
        }
        let kt = transpose_keys(&qkv, hidden, heads, &segs);
        let mut want = vec![0f32; rows * hidden];
        let mut scores = Vec::new();
        for &(first, n) in &segs {
            let text = Text {
                qkv: &qkv,
                keys: &kt[first * hidden..(first + n) * hidden],
                hidden,
                heads,
                first,
                n,
            };
            for r in first..first + n {
                attend_row(&text, r, &mut want[r * hidden..][..hidden], &mut scores);
            }
        }
        let mut blocks: Vec<Block> = situate_core::cpu::levels_here()
            .into_iter()
            .map(Block::at)
            .collect();
        blocks.dedup();
        assert_eq!(
            blocks.last(),
            Some(&Block::at(situate_core::cpu::detected()))
        );
        eprintln!("blocks compared: {blocks:?}");
        for block in blocks {
            for segs in [segs.clone(), segs[..2].to_vec()] {
                let rows: usize = segs.iter().map(|s| s.1).sum();
                let qkv = &qkv[..rows * 3 * hidden];
                let ours = attention_with(qkv, hidden, heads, &segs, block).expect("attention");
                assert_eq!(ours, want[..rows * hidden], "{block:?} {segs:?}");
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
