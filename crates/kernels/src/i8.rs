//! Products of a few f32 rows (a query's tokens) by an int8 matrix with one scale per
//! matrix row (a linear layer's output channel); the f32 rows are quantized per block of 32
//! values, as in Q8_0.
//!
//! Why by hand, beside [`crate::q8`]: there both operands have a scale per block of 32, so
//! every block's integer sum is scaled by the product of two scales, computed and broadcast
//! per block and column (seven instructions per block and column). With one scale per
//! output channel, applied once at the end, a block costs one broadcast of the row's block
//! scale shared by four columns, and five instructions per column; two rows share each
//! weight load; MiniLM's query p50 fell from 7.55 to 6.35 ms in the same run (BENCHMARKS.md,
//! "Queries in Q8"). The weights are quantized per channel as ONNX Runtime's and PyTorch's dynamically quantized
//! layers do; the activations are quantized more finely than theirs (per block of 32, not
//! per tensor). No maintained crate offers an int8 product over candle's f32 tensors for
//! AVX2.
//!
//! Every output value is computed by the same instructions in the same order whatever the
//! number of rows or the thread that computes it, so a query's vector does not depend on
//! what else is embedded beside it.

use candle_core::{Result, Tensor};
use rayon::prelude::*;

/// Weights per block (one 256-bit load of bytes).
const BLOCK: usize = 32;

/// An int8 matrix of `rows` × `cols` weights (out × in), one f32 scale per row, repacked
/// for [`I8Matrix::forward`]: rows in groups of four (the last padded with zero rows), per
/// group and block of 32 columns the four rows' bytes together.
pub struct I8Matrix {
    rows: usize,
    cols: usize,
    /// Per row (padded to a multiple of four): the scale of its bytes.
    scales: Vec<f32>,
    /// Per group of four rows and per block: four times 32 signed bytes.
    quants: Vec<i8>,
}

impl I8Matrix {
    /// Quantizes `w` (`rows` × `cols` f32, row-major) symmetrically per row: each row's
    /// bytes are `round(w / s)` with `s = max |w| / 127`. `None` when this CPU does not run
    /// the kernel (x86-64 with AVX2) or `cols` is not a multiple of 32.
    pub fn quantize(w: &[f32], rows: usize, cols: usize) -> Option<Self> {
        if !kernel_available() || cols == 0 || !cols.is_multiple_of(BLOCK) || w.len() != rows * cols
        {
            return None;
        }
        let blocks = cols / BLOCK;
        let groups = rows.div_ceil(4);
        let mut scales = vec![0f32; groups * 4];
        let mut quants = vec![0i8; groups * 4 * cols];
        for (r, row) in w.chunks_exact(cols).enumerate() {
            let (s, inv) = scale_of(row);
            scales[r] = s;
            for (b, block) in row.chunks_exact(BLOCK).enumerate() {
                let at = ((r / 4 * blocks + b) * 4 + r % 4) * BLOCK;
                for (q, &v) in quants[at..at + BLOCK].iter_mut().zip(block) {
                    *q = (v * inv).round() as i8;
                }
            }
        }
        Some(I8Matrix {
            rows,
            cols,
            scales,
            quants,
        })
    }

    /// `(rows, cols)`: out × in.
    pub fn dims(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// `x` (`m` × in, f32) times the transposed matrix: `m` × out.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (m, k) = x.dims2()?;
        if k != self.cols {
            candle_core::bail!(
                "int8 product: rows of {k} values against a matrix of {} columns",
                self.cols
            );
        }
        let values: Vec<f32> = x.contiguous()?.flatten_all()?.to_vec1()?;
        Tensor::from_vec(self.matmul(&values, m), (m, self.rows), x.device())
    }

    /// The product on the host: `x` holds `m` rows of `cols` values; the result `m` rows
    /// of `rows` values. Groups of four matrix rows are shared out on rayon's pool, the one
    /// the embedder's other parallel work (gemm, attention) runs on. Candle's barrier pool
    /// answered faster (a query embedded in 2.4–2.6 ms p50 against 3.0–3.3 ms) but its idle
    /// worker spins on a core after every product (perf: 30% of a hybrid benchmark's
    /// samples), and a hybrid query's other threads then waited for one: p99 at 100k
    /// chunks 22–32 ms against 13 ms here (BENCHMARKS.md).
    pub fn matmul(&self, x: &[f32], m: usize) -> Vec<f32> {
        let cols = self.cols;
        let blocks = cols / BLOCK;
        let mut xq = vec![0i8; m * cols];
        let mut xs = vec![0f32; m * blocks];
        for ((block, q), s) in x[..m * cols]
            .chunks_exact(BLOCK)
            .zip(xq.chunks_exact_mut(BLOCK))
            .zip(xs.iter_mut())
        {
            let (scale, inv) = scale_of(block);
            *s = scale;
            for (q, &v) in q.iter_mut().zip(block) {
                *q = (v * inv).round() as i8;
            }
        }
        let groups = self.rows.div_ceil(4);
        let mut out = vec![0f32; m * self.rows];
        let out_at = out.as_mut_ptr() as usize;
        let (xq, xs) = (&xq, &xs);
        let run = |range: std::ops::Range<usize>| {
            for g in range {
                let w = &self.quants[g * 4 * cols..(g + 1) * 4 * cols];
                let ws = &self.scales[g * 4..g * 4 + 4];
                let keep = 4.min(self.rows - g * 4);
                let mut r = 0;
                while r < m {
                    // Two rows at a time; a last odd row is paired with itself.
                    let r1 = (r + 1).min(m - 1);
                    let sums = sums(
                        w,
                        (
                            &xq[r * cols..(r + 1) * cols],
                            &xs[r * blocks..(r + 1) * blocks],
                        ),
                        (
                            &xq[r1 * cols..(r1 + 1) * cols],
                            &xs[r1 * blocks..(r1 + 1) * blocks],
                        ),
                    );
                    for (j, row) in
                        [r, r1]
                            .into_iter()
                            .enumerate()
                            .take(if r1 == r { 1 } else { 2 })
                    {
                        let mut d = [0f32; 4];
                        for c in 0..4 {
                            d[c] = sums[j][c] * ws[c];
                        }
                        // SAFETY: `out` holds `m * rows` values and outlives the pool's
                        // call; group `g` alone writes columns `4g..4g + keep` (≤ rows).
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                d.as_ptr(),
                                (out_at as *mut f32).add(row * self.rows + g * 4),
                                keep,
                            )
                        };
                    }
                    r += 2;
                }
            }
        };
        let threads = rayon::current_num_threads().clamp(1, groups.max(1));
        if threads == 1 {
            run(0..groups);
        } else {
            let per = groups.div_ceil(threads);
            (0..threads)
                .into_par_iter()
                .for_each(|t| run(t * per..((t + 1) * per).min(groups)));
        }
        out
    }
}

/// A row's scale (`max |x| / 127`) and its inverse (0 for an all-zero row).
fn scale_of(row: &[f32]) -> (f32, f32) {
    let amax = row.iter().fold(0f32, |a, v| a.max(v.abs()));
    let s = amax / 127.0;
    (s, if s > 0.0 { 1.0 / s } else { 0.0 })
}

/// Whether this CPU runs the kernel.
fn kernel_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The dot products of two quantized rows (bytes, a scale per block) with a group of four
/// weight rows, before the weight rows' scales.
#[inline(always)]
fn sums(w: &[i8], x0: (&[i8], &[f32]), x1: (&[i8], &[f32])) -> [[f32; 4]; 2] {
    let blocks = x0.1.len();
    assert!(
        x0.0.len() == blocks * BLOCK
            && x1.0.len() == blocks * BLOCK
            && x1.1.len() == blocks
            && w.len() == 4 * blocks * BLOCK
    );
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: only reached when `kernel_available()` (an I8Matrix exists only then), and
        // the slices hold whole blocks (asserted above).
        unsafe { sums_avx2(w, x0, x1) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        unreachable!("no I8Matrix without AVX2")
    }
}

/// Per block, row and weight row: |x| times x's sign moved onto the weight (`maddubs`
/// multiplies unsigned by signed bytes; no pair exceeds 2 × 127 × 127, so the 16-bit sums
/// cannot saturate), widened to 32-bit (exact), to f32, and added times the row block's
/// scale into the pair's own accumulator; the horizontal sums at the end are in a fixed
/// order. The block scale is one broadcast per row and block, shared by the four columns.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn sums_avx2(w: &[i8], x0: (&[i8], &[f32]), x1: (&[i8], &[f32])) -> [[f32; 4]; 2] {
    use std::arch::x86_64::*;
    let blocks = x0.1.len();
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); 4]; 2];
    for b in 0..blocks {
        // SAFETY: `b < blocks`; the caller's assert gives the slices' lengths.
        unsafe {
            let wq = w.as_ptr().add(b * 4 * BLOCK);
            let wv = [
                _mm256_loadu_si256(wq as *const __m256i),
                _mm256_loadu_si256(wq.add(BLOCK) as *const __m256i),
                _mm256_loadu_si256(wq.add(2 * BLOCK) as *const __m256i),
                _mm256_loadu_si256(wq.add(3 * BLOCK) as *const __m256i),
            ];
            for (j, x) in [x0, x1].into_iter().enumerate() {
                let y = _mm256_loadu_si256(x.0.as_ptr().add(b * BLOCK) as *const __m256i);
                let ay = _mm256_sign_epi8(y, y);
                let d = _mm256_set1_ps(*x.1.get_unchecked(b));
                for c in 0..4 {
                    let p = _mm256_maddubs_epi16(ay, _mm256_sign_epi8(wv[c], y));
                    let p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
                    acc[j][c] = _mm256_fmadd_ps(p, d, acc[j][c]);
                }
            }
        }
    }
    let mut out = [[0f32; 4]; 2];
    for j in 0..2 {
        for c in 0..4 {
            let a = acc[j][c];
            let s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            let s = _mm_add_ss(s, _mm_movehdup_ps(s));
            out[j][c] = _mm_cvtss_f32(s);
        }
    }
    out
}

/// The matrix as f32 (each weight its byte times its row's scale), for tests.
#[cfg(test)]
fn expand(m: &I8Matrix) -> Vec<f32> {
    let blocks = m.cols / BLOCK;
    let mut out = vec![0f32; m.rows * m.cols];
    for r in 0..m.rows {
        for b in 0..blocks {
            let at = ((r / 4 * blocks + b) * 4 + r % 4) * BLOCK;
            for i in 0..BLOCK {
                out[r * m.cols + b * BLOCK + i] = m.quants[at + i] as f32 * m.scales[r];
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn values(n: usize, seed: u64) -> Vec<f32> {
        (0..n)
            .map(|i| (((i as u64 + seed) * 2_654_435_761) % 20_011) as f32 / 10_000.0 - 1.0)
            .collect()
    }

    #[test]
    fn products_are_the_exact_products_of_the_quantized_values() {
        if !kernel_available() {
            eprintln!("no AVX2: the kernel is not used here");
            return;
        }
        for (rows, cols, m) in [
            (4usize, 32usize, 1usize),
            (131, 96, 3),
            (70, 384, 8),
            (9, 64, 63),
        ] {
            let w = values(rows * cols, 7);
            let q = I8Matrix::quantize(&w, rows, cols).expect("quantizes");
            assert_eq!(q.dims(), (rows, cols));
            let wd = expand(&q);
            // Quantization keeps each weight within half a step of its row's scale.
            for (r, row) in w.chunks(cols).enumerate() {
                for (c, &v) in row.iter().enumerate() {
                    assert!((wd[r * cols + c] - v).abs() <= q.scales[r] * 0.5 + 1e-6);
                }
            }
            let x = values(m * cols, 3);
            let got = q.matmul(&x, m);
            for r in 0..m {
                let xr = &x[r * cols..(r + 1) * cols];
                // The rows are quantized per block of 32.
                let xq: Vec<f64> = xr
                    .chunks(BLOCK)
                    .flat_map(|b| {
                        let (s, inv) = scale_of(b);
                        b.iter().map(move |v| (v * inv).round() as f64 * s as f64)
                    })
                    .collect();
                for c in 0..rows {
                    // The product of the two quantized operands, in f64.
                    let want: f64 = xq
                        .iter()
                        .zip(&wd[c * cols..(c + 1) * cols])
                        .map(|(a, &b)| a * b as f64)
                        .sum();
                    let g = got[r * rows + c] as f64;
                    assert!(
                        (g - want).abs() <= 1e-4 * want.abs().max(1.0),
                        "{r},{c}: {g} vs {want}"
                    );
                    // And close to the f32 product.
                    let exact: f64 = xr
                        .iter()
                        .zip(&w[c * cols..(c + 1) * cols])
                        .map(|(&a, &b)| a as f64 * b as f64)
                        .sum();
                    assert!((g - exact).abs() < 0.02 * (cols as f64).sqrt(), "{r},{c}");
                }
            }
        }
    }

    #[test]
    fn a_rows_result_does_not_depend_on_the_other_rows_and_bad_shapes_are_refused() {
        if !kernel_available() {
            return;
        }
        let (rows, cols) = (203, 160);
        let q = I8Matrix::quantize(&values(rows * cols, 11), rows, cols).expect("q");
        let x = values(7 * cols, 5);
        let all = q.matmul(&x, 7);
        for r in 0..7 {
            let alone = q.matmul(&x[r * cols..(r + 1) * cols], 1);
            assert_eq!(alone, all[r * rows..(r + 1) * rows], "row {r}");
        }
        assert!(
            I8Matrix::quantize(&values(4 * 40, 1), 4, 40).is_none(),
            "40 columns"
        );
        let t = Tensor::zeros((2, 100), candle_core::DType::F32, &Device::Cpu).expect("t");
        assert!(q.forward(&t).is_err(), "100 values against 160 columns");
        let z = q.matmul(&vec![0f32; 2 * cols], 2);
        assert!(z.iter().all(|&v| v == 0.0), "zero rows give zeros");
    }
}
