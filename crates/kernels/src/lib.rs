//! CPU kernels that candle runs through a libm call per value, written so that the compiler
//! vectorises them.
//!
//! Why by hand: candle's softmax calls `expf` once per value, and a cross-encoder reading a
//! 512-token pair takes 19 million exponentials (12 heads × 512² × 6 layers); profiled,
//! `expf` alone was 14% of MiniLM's time and the erf of GELU (another `expf` per value)
//! 12%. No maintained crate offers a vectorisable f32 `exp` for candle's tensors. [`exp`] is
//! branch-free arithmetic on the bits of an f32, so loops over slices of it become SIMD
//! code, and the loops here are compiled twice, for the baseline CPU and for AVX2 with FMA,
//! chosen at run time. Every kernel here takes the path of the instruction-set level
//! [`situate_core::cpu`] chose for the process (the best the CPU runs, or the one
//! `SITUATE_CPU` forces): no path depends on the flags the build was compiled with.
//!
//! [`attention`] is multi-head self-attention over packed texts, without candle's per-head
//! tensor operations.
//!
//! [`i8`](mod@i8) multiplies f32 rows by an int8 matrix with a scale per output channel (a query's
//! products in the embedders, and a batch of passages' for `:q8` embedders), with VNNI
//! where the CPU has it.
//!
//! [`q8`] multiplies a few rows by a Q8_0 matrix (decoding with a quantized language model),
//! where candle's product is several times slower; see its module documentation.

pub mod attention;
pub mod i8;
pub mod q8;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, DType, Layout, Shape, Tensor};
use rayon::prelude::*;

/// `x` (`m` × `cols`, f32) times a quantized matrix of `rows` × `cols` transposed, computed
/// on the host by `matmul` (the rows' values and `m`, giving `m` × `rows`): the tensor
/// plumbing of [`i8::I8Matrix::forward`] and [`q8::Q8Matrix::forward`]. `what` names the
/// product in the error for rows of the wrong width.
fn host_product(
    x: &Tensor,
    what: &str,
    (rows, cols): (usize, usize),
    matmul: impl FnOnce(&[f32], usize) -> Vec<f32>,
) -> candle_core::Result<Tensor> {
    let (m, k) = x.dims2()?;
    if k != cols {
        candle_core::bail!("{what} product: rows of {k} values against a matrix of {cols} columns");
    }
    let out = with_f32_values(x, |v| matmul(v, m))?;
    Tensor::from_vec(out, (m, rows), x.device())
}

/// Calls `f` with the values of `x` (f32, row-major): the tensor's own buffer when it is a
/// contiguous f32 tensor on the CPU (no copy: copying a batch's activations before each
/// product was 5% of embedding passages), else a copy.
pub fn with_f32_values<R>(x: &Tensor, f: impl FnOnce(&[f32]) -> R) -> candle_core::Result<R> {
    {
        let (storage, layout) = x.storage_and_layout();
        if let (candle_core::Storage::Cpu(CpuStorage::F32(data)), Some((start, end))) =
            (&*storage, layout.contiguous_offsets())
        {
            return Ok(f(&data[start..end]));
        }
    }
    let values: Vec<f32> = x.flatten_all()?.to_vec1()?;
    Ok(f(&values))
}

/// `e^x` in f32, branch-free (so loops over it vectorise), within 2 ulps of the exact value
/// on [-87, 88]; below that it gives the smallest normal value (about 1.2e-38) instead of
/// underflowing, above it the largest finite one, and NaN stays NaN.
///
/// The classic reduction (Cephes' `expf`): x = n ln 2 + r with |r| ≤ ln 2 / 2, e^r from a
/// degree-6 polynomial, and 2^n written into the exponent bits.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 in two parts, the first exact in few bits, so n · LN2_HI is exact.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding and subtracting 1.5 · 2^23 rounds to the nearest integer without a call.
    const ROUND: f32 = 12_582_912.0;
    // NaN stays NaN through `clamp` and the arithmetic below.
    let x = x.clamp(-87.33, 88.37);
    let t = x * LOG2E + ROUND;
    let n = t - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = 1.987_569_1e-4;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 0.166_666_65;
    let p = p * r + 0.5;
    let er = p * r * r + r + 1.0;
    // n as an integer, read from t's low mantissa bits (t = 1.5 · 2^23 + n exactly): `n as
    // i32` would be Rust's saturating conversion, which LLVM does not vectorise (perf showed
    // softmax's exponentials done one lane at a time around it).
    let n_int = t.to_bits() as i32 - ROUND.to_bits() as i32;
    let scale = f32::from_bits(((n_int + 127) as u32) << 23);
    er * scale
}

/// Softmax of one row, in place in `out` (same length as `row`).
#[inline(always)]
fn softmax_row_generic(row: &[f32], out: &mut [f32]) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        // Every value masked (or the row empty): candle gives NaN; keep that.
        out.iter_mut().for_each(|o| *o = f32::NAN);
        return;
    }
    for (o, &v) in out.iter_mut().zip(row) {
        // exp(-inf) must be 0 for masked positions, which the clamp in `exp` would not give.
        *o = if v == f32::NEG_INFINITY {
            0.0
        } else {
            exp(v - max)
        };
    }
    // Eight running sums: the additions vectorise (one sum in order cannot, as float
    // addition does not reassociate) and each sum holds an eighth of the rounding error.
    let mut lanes = [0.0f32; 8];
    let mut blocks = out.chunks_exact(8);
    for b in &mut blocks {
        for (l, &v) in lanes.iter_mut().zip(b) {
            *l += v;
        }
    }
    let sum = lanes.iter().sum::<f32>() + blocks.remainder().iter().sum::<f32>();
    let inv = 1.0 / sum;
    out.iter_mut().for_each(|o| *o *= inv);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn softmax_row_avx2(row: &[f32], out: &mut [f32]) {
    softmax_row_generic(row, out)
}

/// Replaces every value `x` of `xs` with `f(x)`, with the AVX2/FMA build of the loop when
/// the CPU has it (give `f` as `#[inline(always)]` code, such as [`exp`], so it vectorises).
#[inline(always)]
pub fn map_in_place(xs: &mut [f32], f: impl Fn(f32) -> f32 + Copy) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2,fma")]
        fn avx2(xs: &mut [f32], f: impl Fn(f32) -> f32 + Copy) {
            xs.iter_mut().for_each(|x| *x = f(*x));
        }
        if avx2_fma() {
            // SAFETY: the CPU has AVX2 and FMA, checked at run time.
            return unsafe { avx2(xs, f) };
        }
    }
    xs.iter_mut().for_each(|x| *x = f(*x));
}

fn softmax_row(row: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA, checked at run time.
        return unsafe { softmax_row_avx2(row, out) };
    }
    softmax_row_generic(row, out)
}

/// The mask of the first `n` lanes of 16 (all 16 for `n` ≥ 16): an AVX-512 masked load or
/// store of a partial block.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn lanes(n: usize) -> u16 {
    ((1u32 << n.min(16)) - 1) as u16
}

/// Whether the kernels take their AVX2/FMA builds: the level chosen for the process
/// ([`situate_core::cpu::chosen`], detected once or forced by `SITUATE_CPU`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn avx2_fma() -> bool {
    situate_core::cpu::chosen().avx2()
}

struct SoftmaxLastDim;

impl CustomOp1 for SoftmaxLastDim {
    fn name(&self) -> &'static str {
        "situate-softmax-last-dim"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(data) = storage else {
            candle_core::bail!("softmax: f32 only, not {:?}", storage.dtype());
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("softmax: contiguous input only");
        };
        let src = &data[start..end];
        let dims = layout.shape().dims();
        let width = dims.last().copied().unwrap_or(1).max(1);
        let mut dst = vec![0f32; src.len()];
        // Rows in parallel on candle's thread pool, a few rows per task.
        let rows_per_task = (4096 / width).max(1);
        src.par_chunks(width * rows_per_task)
            .zip(dst.par_chunks_mut(width * rows_per_task))
            .for_each(|(s, d)| {
                for (row, out) in s.chunks(width).zip(d.chunks_mut(width)) {
                    softmax_row(row, out);
                }
            });
        Ok((CpuStorage::F32(dst), layout.shape().clone()))
    }
}

/// Softmax over the last dimension, as `candle_nn::ops::softmax_last_dim`: this crate's
/// vectorised kernel for contiguous f32 tensors on the CPU, candle's own otherwise. A row
/// whose values are all -inf gives NaN, as candle's does.
pub fn softmax_last_dim(t: &Tensor) -> candle_core::Result<Tensor> {
    if t.dtype() == DType::F32 && t.device().is_cpu() && t.dims().last().is_some_and(|&d| d > 0) {
        let t = t.contiguous()?;
        t.apply_op1_no_bwd(&SoftmaxLastDim)
    } else {
        let max = t.max_keepdim(candle_core::D::Minus1)?;
        let e = t.broadcast_sub(&max)?.exp()?;
        let sum = e.sum_keepdim(candle_core::D::Minus1)?;
        e.broadcast_div(&sum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_two_ulps_of_libm_over_its_range() {
        let mut worst = 0u32;
        let mut x = -87.0f32;
        while x < 88.0 {
            let (ours, theirs) = (exp(x), (x as f64).exp() as f32);
            let ulps = ours.to_bits().abs_diff(theirs.to_bits());
            assert!(
                ulps <= 2,
                "exp({x}) = {ours}, exactly {theirs}: {ulps} ulps"
            );
            worst = worst.max(ulps);
            x += 0.000_37;
        }
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(-200.0) >= 0.0 && exp(-200.0) < 1.2e-38);
        assert!(exp(200.0).is_finite() && exp(200.0) > 2e38);
        assert!(exp(f32::NAN).is_nan());
        eprintln!("worst: {worst} ulps");
    }

    /// Softmax computed in f64, rounded to f32 at the end.
    fn candle_softmax(t: &Tensor) -> Tensor {
        let t64 = t.to_dtype(DType::F64).expect("f64");
        let max = t64.max_keepdim(candle_core::D::Minus1).expect("max");
        let e = t64.broadcast_sub(&max).and_then(|e| e.exp()).expect("exp");
        let sum = e.sum_keepdim(candle_core::D::Minus1).expect("sum");
        e.broadcast_div(&sum)
            .and_then(|s| s.to_dtype(DType::F32))
            .expect("div")
    }

    #[test]
    fn softmax_matches_f64_with_masks_and_any_width() {
        let dev = candle_core::Device::Cpu;
        for (rows, width) in [(1usize, 1usize), (3, 7), (64, 512), (5, 4099)] {
            // Fixed pseudo-random values in about [-8, 8].
            let values: Vec<f32> = (0..rows * width)
                .map(|i| ((i as u64 * 2_654_435_761) % 16_001) as f32 / 1000.0 - 8.0)
                .collect();
            let t = Tensor::from_vec(values, (rows, width), &dev).expect("t");
            let ours = softmax_last_dim(&t).expect("ours");
            let diff = (ours.clone() - candle_softmax(&t))
                .and_then(|d| d.abs())
                .and_then(|d| d.flatten_all())
                .and_then(|d| d.max(0))
                .and_then(|d| d.to_scalar::<f32>())
                .expect("diff");
            // Rounding in the sum of up to 4,099 terms: a few millionths at most.
            assert!(diff < 4e-6, "{rows}×{width}: differs by {diff}");
            let sums: Vec<f32> = ours.sum(1).and_then(|s| s.to_vec1()).expect("sums");
            assert!(sums.iter().all(|s| (s - 1.0).abs() < 1e-5), "{sums:?}");
        }
        // Masked positions (-inf) get exactly 0; a fully masked row is NaN, as candle's.
        let inf = f32::NEG_INFINITY;
        let t = Tensor::new(&[[1.0f32, inf, 2.0], [inf, inf, inf]], &dev).expect("t");
        let v: Vec<Vec<f32>> = softmax_last_dim(&t).and_then(|t| t.to_vec2()).expect("v");
        assert_eq!(v[0][1], 0.0);
        assert!((v[0][0] + v[0][2] - 1.0).abs() < 1e-6);
        assert!(v[1].iter().all(|x| x.is_nan()));
        // A view (not contiguous) and a 4-d shape.
        let t = Tensor::randn(0f32, 1.0, (2, 3, 4, 5), &dev).expect("randn");
        let view = t.transpose(2, 3).expect("t");
        let diff = (softmax_last_dim(&view).expect("ours") - candle_softmax(&view))
            .and_then(|d| d.abs())
            .and_then(|d| d.flatten_all())
            .and_then(|d| d.max(0))
            .and_then(|d| d.to_scalar::<f32>())
            .expect("diff");
        assert!(diff < 1e-6);
    }

    #[test]
    fn map_applies_the_function_to_every_value() {
        let xs: Vec<f32> = (0..1000).map(|i| i as f32 / 100.0 - 5.0).collect();
        let mut out = xs.clone();
        map_in_place(&mut out, exp);
        for (x, o) in xs.iter().zip(&out) {
            assert!((o / x.exp() - 1.0).abs() < 1e-6);
        }
    }
}
