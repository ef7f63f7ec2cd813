//! Products of a few f32 rows by a Q8_0 matrix (32 signed bytes and one scale per block of
//! 32 weights), for decoding and short prompt passes of quantized language models.
//!
//! Why by hand: candle's Q8_0 product on x86 computes each (row, column) dot product alone
//! and, for every block of 32, converts both f16 scales and runs one accumulator, so a
//! block costs about 14 instructions in a chain that waits on the previous block; profiled
//! while Qwen2.5-0.5B decoded five replies side by side, it was 45% of the time, and decoding
//! eight replies at once cost almost eight times one. Here the matrix is repacked once (f32
//! scales apart from the bytes), a row's blocks are quantized once per product, and four
//! columns are summed at once in four independent accumulators, each block ~6 instructions.
//! The arithmetic is candle's, value for value: the same quantization of the rows (f16
//! scales), exact integer sums and the same float operations in the same order, so the
//! results equal candle's to the bit (a test checks it) and a model's replies do not change.
//! No maintained crate offers a quantized matrix product over candle's Q8_0 blocks.
//!
//! **Every output value is computed by the same instructions in the same order whatever the
//! number of rows, the column's place in a group of four or the thread that computes it**, so
//! a row's result never depends on what else its pass holds: greedy replies decoded side by
//! side are exactly those decoded one at a time.

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Result, Tensor};

/// Weights per block.
const BLOCK: usize = 32;
/// Bytes of one candle `BlockQ8_0`: an f16 scale, then 32 signed bytes.
const BLOCK_BYTES: usize = 2 + BLOCK;
/// Bytes of one candle `BlockQ4_0`: an f16 scale, then 32 four-bit weights.
const Q4_BLOCK_BYTES: usize = 2 + BLOCK / 2;

/// A Q8_0 matrix of `rows` × `cols` weights (a linear layer's `out` × `in`), repacked for
/// [`Q8Matrix::forward`]: its rows in groups of four (the last group padded with zero rows),
/// and per group and block of 32 columns, the four rows' scales together and their bytes
/// together, so that reading a group is two sequential streams (separate streams per row
/// made one row's product from main memory half as fast as candle's).
pub struct Q8Matrix {
    rows: usize,
    cols: usize,
    /// Per group of four rows and per block: four scales.
    scales: Vec<f32>,
    /// Per group of four rows and per block: four times 32 signed bytes.
    quants: Vec<i8>,
}

/// The f32 rows of a product, quantized to blocks of 32 signed bytes in [-127, 127] with one
/// scale per block (`max |x| / 127`, rounded to f16).
struct QuantizedRows {
    scales: Vec<f32>,
    quants: Vec<i8>,
}

impl Q8Matrix {
    /// The repacked form of `t` when it is a 2-d Q8_0 or Q4_0 tensor and this CPU runs the
    /// kernel (x86-64 with AVX2 and FMA); `None` otherwise (candle's product is then the one
    /// to use). A Q4_0 block (an f16 scale, 32 four-bit weights `n` meaning `n - 8`) is a
    /// Q8_0 block whose bytes lie in [-8, 7]: its products here equal candle's Q4_0 products
    /// to the bit (candle's `vec_dot_q4_0_q8_0` runs the same operations as its Q8_0 one
    /// once the nibbles are bytes), with the scales converted once instead of per block
    /// (an out-of-line call per block where the build lacks F16C: BENCHMARKS.md).
    pub fn from_qtensor(t: &QTensor) -> Result<Option<Self>> {
        let block_bytes = match t.dtype() {
            GgmlDType::Q8_0 => BLOCK_BYTES,
            GgmlDType::Q4_0 => Q4_BLOCK_BYTES,
            _ => return Ok(None),
        };
        if !kernel_available() {
            return Ok(None);
        }
        let (rows, cols) = t.shape().dims2()?;
        let data = t.data()?;
        if !cols.is_multiple_of(BLOCK) || data.len() != rows * cols / BLOCK * block_bytes {
            return Ok(None);
        }
        let blocks = cols / BLOCK;
        let groups = rows.div_ceil(4);
        let mut scales = vec![0f32; groups * blocks * 4];
        let mut quants = vec![0i8; groups * blocks * 4 * BLOCK];
        for (i, block) in data.chunks_exact(block_bytes).enumerate() {
            let (row, b) = (i / blocks, i % blocks);
            let slot = (row / 4 * blocks + b) * 4 + row % 4;
            scales[slot] = half::f16::from_le_bytes([block[0], block[1]]).to_f32();
            let q = &mut quants[slot * BLOCK..(slot + 1) * BLOCK];
            if block_bytes == BLOCK_BYTES {
                for (q, &byte) in q.iter_mut().zip(&block[2..]) {
                    *q = byte as i8;
                }
            } else {
                // Byte j holds weight j in its low nibble and weight j + 16 in its high one.
                for (j, &byte) in block[2..].iter().enumerate() {
                    q[j] = (byte & 0xF) as i8 - 8;
                    q[j + BLOCK / 2] = (byte >> 4) as i8 - 8;
                }
            }
        }
        Ok(Some(Q8Matrix {
            rows,
            cols,
            scales,
            quants,
        }))
    }

    /// `(rows, cols)`: out × in.
    pub fn dims(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// `x` (`m` × in, f32) times the transposed matrix: `m` × out.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        crate::host_product(x, "q8", (self.rows, self.cols), |v, m| self.matmul(v, m))
    }

    /// `x` holds `m` rows of `cols` values; the result holds `m` rows of `rows` values.
    /// The groups of four matrix rows are shared out on candle's thread pool, the one its
    /// own products run on (a second pool beside it, rayon's, made decoding slower: each
    /// pool's idle threads spin while the other's work).
    fn matmul(&self, x: &[f32], m: usize) -> Vec<f32> {
        let blocks = self.cols / BLOCK;
        let q = quantize_rows(x, m, self.cols);
        let groups = self.rows.div_ceil(4);
        let mut out = vec![0f32; m * self.rows];
        let out_at = out.as_mut_ptr() as usize;
        candle_core::utils::barrier_pool().execute_chunked(groups, |range| {
            for g in range {
                let at = g * blocks;
                let w = (
                    &self.quants[at * 4 * BLOCK..(at + blocks) * 4 * BLOCK],
                    &self.scales[at * 4..(at + blocks) * 4],
                );
                let keep = 4.min(self.rows - g * 4);
                for r in 0..m {
                    let x = (
                        &q.quants[r * self.cols..(r + 1) * self.cols],
                        &q.scales[r * blocks..(r + 1) * blocks],
                    );
                    let d = dots(w, x);
                    // SAFETY: `out` holds `m * rows` values and outlives the pool's call;
                    // group `g` alone writes columns `4g..4g + keep` (≤ rows) of each row.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            d.as_ptr(),
                            (out_at as *mut f32).add(r * self.rows + g * 4),
                            keep,
                        )
                    };
                }
            }
        });
        out
    }

    /// The matrix as f32 (`rows` × `cols`), each weight its byte times its block's scale
    /// (what candle's `dequantize` gives), the rows split between the threads.
    pub fn expand(&self, device: &Device) -> Result<Tensor> {
        let blocks = self.cols / BLOCK;
        let mut out = vec![0f32; self.rows * self.cols];
        let out_at = out.as_mut_ptr() as usize;
        candle_core::utils::barrier_pool().execute_chunked(self.rows, |range| {
            for row in range {
                // SAFETY: `out` holds `rows * cols` values and outlives the pool's call; each
                // row is written by the one task that holds it.
                let values = unsafe {
                    std::slice::from_raw_parts_mut(
                        (out_at as *mut f32).add(row * self.cols),
                        self.cols,
                    )
                };
                for (b, o) in values.chunks_exact_mut(BLOCK).enumerate() {
                    let slot = (row / 4 * blocks + b) * 4 + row % 4;
                    let d = self.scales[slot];
                    for (o, &q) in o
                        .iter_mut()
                        .zip(&self.quants[slot * BLOCK..(slot + 1) * BLOCK])
                    {
                        *o = q as f32 * d;
                    }
                }
            }
        });
        Tensor::from_vec(out, (self.rows, self.cols), device)
    }
}

/// Whether the kernel runs: AVX2 and FMA at the level chosen for the process.
fn kernel_available() -> bool {
    cfg!(target_arch = "x86_64") && situate_core::cpu::chosen().avx2()
}

/// `m` rows of `cols` values (a multiple of 32) in blocks of 32 bytes: each block scaled by
/// its largest magnitude to [-127, 127] and rounded, its scale kept as f16, exactly as
/// candle's (and llama.cpp's) Q8_0 quantization does, so that the products are candle's to
/// the bit.
fn quantize_rows(x: &[f32], m: usize, cols: usize) -> QuantizedRows {
    let mut scales = Vec::with_capacity(m * cols / BLOCK);
    let mut quants = vec![0i8; m * cols];
    for (block, q) in x[..m * cols]
        .chunks_exact(BLOCK)
        .zip(quants.chunks_exact_mut(BLOCK))
    {
        let amax = block.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for (q, &v) in q.iter_mut().zip(block) {
            // `as` saturates; |v · id| is at most 127 up to rounding.
            *q = (v * id).round() as i8;
        }
        scales.push(half::f16::from_f32(d).to_f32());
    }
    QuantizedRows { scales, quants }
}

/// The dot products of one quantized row `x` (bytes, block scales) with a group of four
/// weight rows `w` (per block: four rows' bytes, four scales).
#[inline(always)]
fn dots(w: (&[i8], &[f32]), x: (&[i8], &[f32])) -> [f32; 4] {
    let blocks = x.1.len();
    assert!(
        x.0.len() == blocks * BLOCK && w.0.len() == blocks * 4 * BLOCK && w.1.len() == blocks * 4
    );
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: only reached when `kernel_available()` (a Q8Matrix exists only then), and
        // the slices hold `blocks` blocks (asserted above).
        unsafe { dots_avx2(w, x) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        unreachable!("no Q8Matrix without AVX2")
    }
}

/// Per block and weight row: |x| times x's sign moved onto the weight (`maddubs` multiplies
/// unsigned by signed bytes; no pair exceeds 127 × 128, so the 16-bit pair sums cannot
/// saturate), summed to 32-bit, to f32, then scaled by the product of the two blocks' scales
/// into the row's own accumulator; the horizontal sums at the end are in a fixed order. The
/// integer sums are exact and the float operations are candle's (`vec_dot_q8_0_q8_0`) in
/// the same order, so each value equals candle's to the bit.
///
/// # Safety
///
/// The CPU must run AVX2 and FMA, and `x` must hold `x.1.len()` blocks (`BLOCK` bytes each)
/// and `w` four rows of as many blocks, with a scale per row and block (`dots` asserts both).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dots_avx2(w: (&[i8], &[f32]), x: (&[i8], &[f32])) -> [f32; 4] {
    use std::arch::x86_64::*;
    let blocks = x.1.len();
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); 4];
    for b in 0..blocks {
        // SAFETY: `b < blocks`, and the slices hold `blocks` blocks (the caller's assert).
        unsafe {
            let y = _mm256_loadu_si256(x.0.as_ptr().add(b * BLOCK) as *const __m256i);
            let ay = _mm256_sign_epi8(y, y);
            let dy = *x.1.get_unchecked(b);
            let wq = w.0.as_ptr().add(b * 4 * BLOCK);
            let ws = w.1.as_ptr().add(b * 4);
            for (c, acc) in acc.iter_mut().enumerate() {
                let wv = _mm256_loadu_si256(wq.add(c * BLOCK) as *const __m256i);
                let sw = _mm256_sign_epi8(wv, y);
                let pairs = _mm256_madd_epi16(_mm256_maddubs_epi16(ay, sw), ones);
                let d = _mm256_set1_ps(*ws.add(c) * dy);
                *acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(pairs), *acc);
            }
        }
    }
    let mut out = [0f32; 4];
    for (o, a) in out.iter_mut().zip(acc) {
        let hi = _mm256_extractf128_ps(a, 1);
        let s = _mm_add_ps(hi, _mm256_castps256_ps128(a));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        *o = _mm_cvtss_f32(s);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Module;
    use candle_core::quantized::QMatMul;

    fn values(n: usize, seed: u64) -> Vec<f32> {
        (0..n)
            .map(|i| (((i as u64 + seed) * 2_654_435_761) % 20_011) as f32 / 10_000.0 - 1.0)
            .collect()
    }

    fn matrix(rows: usize, cols: usize) -> QTensor {
        matrix_of(GgmlDType::Q8_0, rows, cols)
    }

    fn matrix_of(dtype: GgmlDType, rows: usize, cols: usize) -> QTensor {
        let t = Tensor::from_vec(values(rows * cols, 7), (rows, cols), &Device::Cpu).expect("t");
        QTensor::quantize(&t, dtype).expect("quantized")
    }

    /// A Q4_0 matrix's products equal candle's Q4_0 products to the bit, and its expansion
    /// what candle dequantizes.
    #[test]
    fn q4_0_products_match_candle_to_the_bit() {
        if !kernel_available() {
            eprintln!("no AVX2/FMA: the kernel is not used here");
            return;
        }
        let dev = Device::Cpu;
        for (rows, cols, m) in [(4usize, 32usize, 1usize), (131, 96, 3), (70, 384, 40)] {
            let q = matrix_of(GgmlDType::Q4_0, rows, cols);
            let ours_m = Q8Matrix::from_qtensor(&q).expect("repacks").expect("q4_0");
            let x = Tensor::from_vec(values(m * cols, 3), (m, cols), &dev).expect("x");
            let ours: Vec<Vec<f32>> = ours_m.forward(&x).and_then(|t| t.to_vec2()).expect("ours");
            let theirs: Vec<Vec<f32>> =
                QMatMul::from_qtensor(matrix_of(GgmlDType::Q4_0, rows, cols))
                    .and_then(|mm| mm.forward(&x))
                    .and_then(|t| t.to_vec2())
                    .expect("candle");
            for (r, (a, b)) in ours.iter().zip(&theirs).enumerate() {
                for (c, (a, b)) in a.iter().zip(b).enumerate() {
                    assert_eq!(
                        a.to_bits(),
                        b.to_bits(),
                        "{rows}x{cols}, row {r}, column {c}: {a} vs {b}"
                    );
                }
            }
            let expanded: Vec<Vec<f32>> = ours_m.expand(&dev).and_then(|t| t.to_vec2()).expect("e");
            let want: Vec<Vec<f32>> = q.dequantize(&dev).and_then(|t| t.to_vec2()).expect("w");
            assert_eq!(expanded, want);
        }
    }

    #[test]
    fn products_match_candle_and_exact_arithmetic() {
        if !kernel_available() {
            eprintln!("no AVX2/FMA: the kernel is not used here");
            return;
        }
        let dev = Device::Cpu;
        for (rows, cols, m) in [
            (4usize, 32usize, 1usize),
            (131, 96, 3),
            (70, 896, 8),
            (9, 64, 63),
        ] {
            let q = matrix(rows, cols);
            let ours_m = Q8Matrix::from_qtensor(&q).expect("repacks").expect("q8_0");
            assert_eq!(ours_m.dims(), (rows, cols));
            let x = Tensor::from_vec(values(m * cols, 3), (m, cols), &dev).expect("x");
            let ours: Vec<Vec<f32>> = ours_m.forward(&x).and_then(|t| t.to_vec2()).expect("ours");
            let theirs: Vec<Vec<f32>> = QMatMul::from_qtensor(matrix(rows, cols))
                .and_then(|mm| mm.forward(&x))
                .and_then(|t| t.to_vec2())
                .expect("candle");
            // The exact product of the dequantized matrix with the unquantized rows.
            let w: Vec<Vec<f32>> = q.dequantize(&dev).and_then(|t| t.to_vec2()).expect("w");
            let xs: Vec<Vec<f32>> = x.to_vec2().expect("xs");
            for (r, (ours, theirs)) in ours.iter().zip(&theirs).enumerate() {
                for (c, w) in w.iter().enumerate() {
                    let exact: f64 = w
                        .iter()
                        .zip(&xs[r])
                        .map(|(&a, &b)| a as f64 * b as f64)
                        .sum();
                    // Quantizing the rows costs up to half a step of 1/127 of a block's
                    // largest value per product.
                    let tol = 0.02 * (cols as f64).sqrt();
                    assert!(
                        (ours[c] as f64 - exact).abs() < tol,
                        "{r},{c}: {} vs {exact}",
                        ours[c]
                    );
                    assert!((ours[c] - theirs[c]).abs() < 2.0 * tol as f32, "{r},{c}");
                    assert_eq!(
                        ours[c].to_bits(),
                        theirs[c].to_bits(),
                        "{r},{c}: candle's bits"
                    );
                }
            }
        }
    }

    /// A row's products are the same bits alone and among other rows, at any position.
    #[test]
    fn a_rows_result_does_not_depend_on_the_other_rows() {
        if !kernel_available() {
            return;
        }
        let dev = Device::Cpu;
        let (rows, cols) = (203, 160);
        let m8 = Q8Matrix::from_qtensor(&matrix(rows, cols))
            .expect("repacks")
            .expect("q8_0");
        let x = Tensor::from_vec(values(7 * cols, 11), (7, cols), &dev).expect("x");
        let all: Vec<Vec<f32>> = m8.forward(&x).and_then(|t| t.to_vec2()).expect("all");
        for (r, want) in all.iter().enumerate() {
            let alone: Vec<f32> = m8
                .forward(&x.narrow(0, r, 1).expect("row"))
                .and_then(|t| t.flatten_all())
                .and_then(|t| t.to_vec1())
                .expect("alone");
            assert_eq!(&alone, want, "row {r}");
        }
        let pair = Tensor::cat(
            &[x.narrow(0, 5, 1).expect("5"), x.narrow(0, 2, 1).expect("2")],
            0,
        )
        .expect("cat");
        let both: Vec<Vec<f32>> = m8.forward(&pair).and_then(|t| t.to_vec2()).expect("pair");
        assert_eq!(both, vec![all[5].clone(), all[2].clone()]);
    }

    #[test]
    fn expands_to_what_candle_dequantizes_and_refuses_other_types() {
        if !kernel_available() {
            return;
        }
        let q = matrix(37, 128);
        let ours = Q8Matrix::from_qtensor(&q).expect("repacks").expect("q8_0");
        let a: Vec<Vec<f32>> = ours
            .expand(&Device::Cpu)
            .and_then(|t| t.to_vec2())
            .expect("ours");
        let b: Vec<Vec<f32>> = q
            .dequantize(&Device::Cpu)
            .and_then(|t| t.to_vec2())
            .expect("candle");
        assert_eq!(a, b);
        let t = Tensor::from_vec(values(16 * 256, 1), (16, 256), &Device::Cpu).expect("t");
        let q4 = QTensor::quantize(&t, GgmlDType::Q4K).expect("q4k");
        assert!(Q8Matrix::from_qtensor(&q4).expect("checks").is_none());
        let x = Tensor::zeros((2, 100), candle_core::DType::F32, &Device::Cpu).expect("x");
        assert!(ours.forward(&x).is_err(), "100 values against 128 columns");
        // All-zero rows give zeros (a zero block scale is not a division by zero).
        let z = Tensor::zeros((2, 128), candle_core::DType::F32, &Device::Cpu).expect("z");
        let v: Vec<Vec<f32>> = ours.forward(&z).and_then(|t| t.to_vec2()).expect("zeros");
        assert!(v.iter().flatten().all(|&x| x == 0.0));
    }
}
