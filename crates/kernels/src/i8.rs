//! Products of a few f32 rows (a query's tokens) by an int8 matrix with one scale per
//! matrix row (a linear layer's output channel); each f32 row is quantized to bytes with
//! one scale of its own, so a row and column's dot product is one exact integer sum,
//! scaled once at the end.
//!
//! Why by hand, beside [`crate::q8`]: there both operands have a scale per block of 32, so
//! every block's integer sum is converted and scaled by the product of two scales (seven
//! instructions per block and column). Here a block and column costs one instruction where
//! the CPU has VNNI (`vpdpbusd`: 32 byte products summed into eight 32-bit lanes; the row's
//! bytes are offset by 128 to make them unsigned and the offset removed at the end with the
//! column's byte sum) and four with AVX2 alone (x's sign moved onto the weight, `maddubs`,
//! `madd`, add); two rows share each weight load. Both give the same integer sums, so a
//! query's vector is the same on either. The weights are quantized per channel and the
//! activations per row (token), as ONNX Runtime's and PyTorch's dynamically quantized
//! layers do (theirs per tensor, coarser). No maintained crate offers an int8 product over
//! candle's f32 tensors.
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
    /// Per row (padded): the sum of its bytes, which the VNNI kernel's offset adds.
    byte_sums: Vec<i32>,
    /// The kernel this CPU runs.
    kernel: Kernel,
}

/// The instruction sets of the dot products (the same integer sums on each).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kernel {
    /// AVX2 and FMA.
    Avx2,
    /// AVX-VNNI (256-bit `vpdpbusd` without AVX-512).
    AvxVnni,
    /// AVX512-VNNI with AVX512-VL (the same instruction on 256-bit registers).
    Avx512Vnni,
}

impl I8Matrix {
    /// Quantizes `w` (`rows` × `cols` f32, row-major) symmetrically per row: each row's
    /// bytes are `round(w / s)` with `s = max |w| / 127`. `None` when this CPU does not run
    /// the kernel (x86-64 with AVX2) or `cols` is not a multiple of 32.
    pub fn quantize(w: &[f32], rows: usize, cols: usize) -> Option<Self> {
        let kernel = best_kernel()?;
        if cols == 0 || !cols.is_multiple_of(BLOCK) || w.len() != rows * cols {
            return None;
        }
        let blocks = cols / BLOCK;
        let groups = rows.div_ceil(4);
        let mut scales = vec![0f32; groups * 4];
        let mut quants = vec![0i8; groups * 4 * cols];
        let mut byte_sums = vec![0i32; groups * 4];
        for (r, row) in w.chunks_exact(cols).enumerate() {
            let (s, inv) = scale_of(row);
            scales[r] = s;
            for (b, block) in row.chunks_exact(BLOCK).enumerate() {
                let at = ((r / 4 * blocks + b) * 4 + r % 4) * BLOCK;
                for (q, &v) in quants[at..at + BLOCK].iter_mut().zip(block) {
                    *q = (v * inv).round() as i8;
                    byte_sums[r] += i32::from(*q);
                }
            }
        }
        Some(I8Matrix {
            rows,
            cols,
            scales,
            quants,
            byte_sums,
            kernel,
        })
    }

    /// `(rows, cols)`: out × in.
    pub fn dims(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// `x` (`m` × in, f32) times the transposed matrix: `m` × out.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        crate::host_product(x, "int8", (self.rows, self.cols), |v, m| self.matmul(v, m))
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
        let mut xq = vec![0i8; m * cols];
        // Per row: (scale, offset) with value ≈ scale × (byte + 128) + offset.
        let mut xs = vec![(0f32, 0f32); m];
        for ((row, q), s) in x[..m * cols]
            .chunks_exact(cols)
            .zip(xq.chunks_exact_mut(cols))
            .zip(xs.iter_mut())
        {
            *s = quantize_row(row, q);
        }
        let groups = self.rows.div_ceil(4);
        let mut out = vec![0f32; m * self.rows];
        let out_at = out.as_mut_ptr() as usize;
        let (xq, xs) = (&xq, &xs);
        let run = |range: std::ops::Range<usize>| {
            for g in range {
                let w = &self.quants[g * 4 * cols..(g + 1) * 4 * cols];
                let ws = &self.scales[g * 4..g * 4 + 4];
                let bs = &self.byte_sums[g * 4..g * 4 + 4];
                let keep = 4.min(self.rows - g * 4);
                let mut r = 0;
                while r < m {
                    // Two rows at a time; a last odd row is paired with itself.
                    let r1 = (r + 1).min(m - 1);
                    let sums = sums(
                        self.kernel,
                        w,
                        bs,
                        &xq[r * cols..(r + 1) * cols],
                        &xq[r1 * cols..(r1 + 1) * cols],
                    );
                    for (j, row) in
                        [r, r1]
                            .into_iter()
                            .enumerate()
                            .take(if r1 == r { 1 } else { 2 })
                    {
                        // Σ x·w = s·Σ(q + 128)·w + min·Σw, the weight bytes `bs`.
                        let (scale, min) = xs[row];
                        let d: [f32; 4] = std::array::from_fn(|c| {
                            let bias = (128.0 * scale + min) * bs[c] as f32;
                            (scale * sums[j][c] as f32 + bias) * ws[c]
                        });
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

/// Quantizes a row asymmetrically over its range, as ONNX Runtime's dynamic quantization
/// does (a tensor's there): `u = round((x - min) / s)` in 0..=255 with `s = (max - min) /
/// 255`, stored as `u - 128` so that both kernels read signed bytes; returns `(s, min)`.
/// Over a skewed range (GELU's outputs, say) this resolves twice as finely as a symmetric
/// scale.
fn quantize_row(row: &[f32], q: &mut [i8]) -> (f32, f32) {
    let (lo, hi) = row
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
    let s = (hi - lo) / 255.0;
    let inv = if s > 0.0 { 1.0 / s } else { 0.0 };
    for (q, &v) in q.iter_mut().zip(row) {
        let u = ((v - lo) * inv).round().clamp(0.0, 255.0) as i32;
        *q = (u - 128) as i8;
    }
    (s, lo)
}

/// A row's scale (`max |x| / 127`) and its inverse (0 for an all-zero row).
fn scale_of(row: &[f32]) -> (f32, f32) {
    let amax = row.iter().fold(0f32, |a, v| a.max(v.abs()));
    let s = amax / 127.0;
    (s, if s > 0.0 { 1.0 / s } else { 0.0 })
}

/// The best kernel this CPU runs, if any.
fn best_kernel() -> Option<Kernel> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if !(has!("avx2") && has!("fma")) {
            return None;
        }
        if has!("avx512vnni") && has!("avx512vl") {
            return Some(Kernel::Avx512Vnni);
        }
        if has!("avxvnni") {
            return Some(Kernel::AvxVnni);
        }
        Some(Kernel::Avx2)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// The integer dot products of two quantized rows with a group of four weight rows
/// (`byte_sums`: the four rows' byte sums).
#[inline(always)]
fn sums(kernel: Kernel, w: &[i8], byte_sums: &[i32], x0: &[i8], x1: &[i8]) -> [[i32; 4]; 2] {
    let cols = x0.len();
    assert!(
        cols.is_multiple_of(BLOCK)
            && x1.len() == cols
            && w.len() == 4 * cols
            && byte_sums.len() == 4
    );
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `kernel` is what `best_kernel()` found this CPU to run (an I8Matrix exists
        // only then), and the slices hold whole blocks (asserted above).
        unsafe {
            match kernel {
                Kernel::Avx2 => sums_avx2(w, x0, x1),
                Kernel::AvxVnni => sums_avxvnni(w, byte_sums, x0, x1),
                Kernel::Avx512Vnni => sums_avx512vnni(w, byte_sums, x0, x1),
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kernel, w, byte_sums, x0, x1);
        unreachable!("no I8Matrix without AVX2")
    }
}

/// Horizontal sum of eight 32-bit lanes (exact, in a fixed order).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn hsum_epi32(a: std::arch::x86_64::__m256i) -> i32 {
    use std::arch::x86_64::*;
    // SAFETY: callers are compiled with AVX2 enabled.
    unsafe {
        let s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
        let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01));
        _mm_cvtsi128_si32(s)
    }
}

/// Block `b`'s 32 bytes of each of a group's four weight rows.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn load_weights(w: &[i8], b: usize) -> [std::arch::x86_64::__m256i; 4] {
    use std::arch::x86_64::*;
    // SAFETY: the caller checked that `w` holds block `b` of four rows (`sums`' assert).
    unsafe {
        let wq = w.as_ptr().add(b * 4 * BLOCK);
        [
            _mm256_loadu_si256(wq.cast()),
            _mm256_loadu_si256(wq.add(BLOCK).cast()),
            _mm256_loadu_si256(wq.add(2 * BLOCK).cast()),
            _mm256_loadu_si256(wq.add(3 * BLOCK).cast()),
        ]
    }
}

/// Block `b`'s 32 bytes of a quantized row.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn load_row(x: &[i8], b: usize) -> std::arch::x86_64::__m256i {
    // SAFETY: the caller checked that `x` holds block `b` (`sums`' assert).
    unsafe { std::arch::x86_64::_mm256_loadu_si256(x.as_ptr().add(b * BLOCK).cast()) }
}

/// The horizontal sums of two rows' four accumulators.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn hsums(acc: &[[std::arch::x86_64::__m256i; 4]; 2]) -> [[i32; 4]; 2] {
    // Plain loops, no closures: a closure would not inherit the caller's AVX2.
    let mut out = [[0i32; 4]; 2];
    for j in 0..2 {
        for c in 0..4 {
            // SAFETY: callers are compiled with AVX2 enabled.
            out[j][c] = unsafe { hsum_epi32(acc[j][c]) };
        }
    }
    out
}

/// Per block, row and weight row: |x| times x's sign moved onto the weight (`maddubs`
/// multiplies unsigned by signed bytes; no pair exceeds 2 × 127 × 127, so the 16-bit sums
/// cannot saturate), widened to 32-bit lanes and added: exact.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn sums_avx2(w: &[i8], x0: &[i8], x1: &[i8]) -> [[i32; 4]; 2] {
    use std::arch::x86_64::*;
    let blocks = x0.len() / BLOCK;
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_si256(); 4]; 2];
    for b in 0..blocks {
        // SAFETY: `b < blocks`; the caller's assert gives the slices' lengths.
        unsafe {
            let wv = load_weights(w, b);
            for (j, x) in [x0, x1].into_iter().enumerate() {
                let y = load_row(x, b);
                let ay = _mm256_sign_epi8(y, y);
                for c in 0..4 {
                    let p = _mm256_maddubs_epi16(ay, _mm256_sign_epi8(wv[c], y));
                    acc[j][c] = _mm256_add_epi32(acc[j][c], _mm256_madd_epi16(p, ones));
                }
            }
        }
    }
    // SAFETY: AVX2 is enabled in this function.
    unsafe { hsums(&acc) }
}

/// The VNNI kernels: per block, row and weight row one `vpdpbusd` of the row's bytes made
/// unsigned (+128, a flip of the top bit) by the weight's signed bytes, summed in 32-bit
/// lanes (exact: at most 4 × 255 × 128 per lane and block); the offset's share,
/// 128 × the weight row's byte sum, is taken off at the end.
macro_rules! vnni_kernel {
    ($name:ident, $features:literal, $dpbusd:ident) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        unsafe fn $name(w: &[i8], byte_sums: &[i32], x0: &[i8], x1: &[i8]) -> [[i32; 4]; 2] {
            use std::arch::x86_64::*;
            let blocks = x0.len() / BLOCK;
            let flip = _mm256_set1_epi8(-128);
            let mut acc = [[_mm256_setzero_si256(); 4]; 2];
            for b in 0..blocks {
                // SAFETY: `b < blocks`; the caller's assert gives the slices' lengths.
                unsafe {
                    let wv = load_weights(w, b);
                    for (j, x) in [x0, x1].into_iter().enumerate() {
                        let uy = _mm256_xor_si256(load_row(x, b), flip);
                        for c in 0..4 {
                            acc[j][c] = $dpbusd(acc[j][c], uy, wv[c]);
                        }
                    }
                }
            }
            // SAFETY: AVX2 is enabled with this function's features.
            let mut sums = unsafe { hsums(&acc) };
            for row in &mut sums {
                for (s, b) in row.iter_mut().zip(byte_sums) {
                    *s -= 128 * b;
                }
            }
            sums
        }
    };
}

vnni_kernel!(sums_avxvnni, "avx2,fma,avxvnni", _mm256_dpbusd_avx_epi32);
vnni_kernel!(
    sums_avx512vnni,
    "avx2,fma,avx512vnni,avx512vl",
    _mm256_dpbusd_epi32
);

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
        if best_kernel().is_none() {
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
                // Each row is quantized over its range.
                let mut qr = vec![0i8; cols];
                let (s, lo) = quantize_row(xr, &mut qr);
                let xq: Vec<f64> = qr
                    .iter()
                    .map(|&q| (f64::from(q) + 128.0) * s as f64 + lo as f64)
                    .collect();
                for (a, &v) in xq.iter().zip(xr) {
                    assert!((a - v as f64).abs() <= s as f64 * 0.51 + 1e-6, "{a} {v}");
                }
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
    fn every_kernel_this_cpu_runs_gives_the_same_values() {
        let Some(best) = best_kernel() else {
            return;
        };
        #[cfg(target_arch = "x86_64")]
        let has = |f: &str| match f {
            "avxvnni" => std::arch::is_x86_feature_detected!("avxvnni"),
            _ => {
                std::arch::is_x86_feature_detected!("avx512vnni")
                    && std::arch::is_x86_feature_detected!("avx512vl")
            }
        };
        #[cfg(not(target_arch = "x86_64"))]
        let has = |_: &str| false;
        let mut kernels = vec![Kernel::Avx2];
        if has("avxvnni") {
            kernels.push(Kernel::AvxVnni);
        }
        if has("avx512vnni") {
            kernels.push(Kernel::Avx512Vnni);
        }
        assert!(kernels.contains(&best));
        eprintln!("kernels compared: {kernels:?}");
        // Extreme bytes too: weights at ±127, inputs at ±127 and zero.
        let (rows, cols, m) = (37, 1536, 5);
        let mut w = values(rows * cols, 13);
        w[0] = 50.0;
        w[cols + 3] = -50.0;
        let mut x = values(m * cols, 17);
        x[5] = 9.0;
        x[cols + 7] = -9.0;
        x[2 * cols..3 * cols].fill(0.0);
        let mut q = I8Matrix::quantize(&w, rows, cols).expect("q");
        let mut results = Vec::new();
        for k in &kernels {
            q.kernel = *k;
            results.push(q.matmul(&x, m));
        }
        for (k, r) in kernels.iter().zip(&results) {
            assert_eq!(r, &results[0], "{k:?} against AVX2");
        }
        assert!(results[0][2 * rows..3 * rows].iter().all(|&v| v == 0.0));
    }

    #[test]
    fn a_rows_result_does_not_depend_on_the_other_rows_and_bad_shapes_are_refused() {
        if best_kernel().is_none() {
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
