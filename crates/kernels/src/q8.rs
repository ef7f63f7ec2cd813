//! Products of f32 rows by a matrix of Q8_0, Q4_0 or Q5_0 blocks (32 weights of 8, 4 or 5
//! bits and one scale per block), for quantized language models (decoding, and reading
//! prompts) and multilingual-e5's 4-bit matrices.
//!
//! Why by hand: candle's Q8_0 product on x86 computes each (row, column) dot product alone
//! and, for every block of 32, converts both f16 scales and runs one accumulator, so a
//! block costs about 14 instructions in a chain that waits on the previous block; profiled
//! while Qwen2.5-0.5B decoded five replies side by side, it was 45% of the time. Its Q5_0
//! product (most of Qwen2.5-0.5B's matrices) is scalar. No maintained crate offers a
//! quantized matrix product over these blocks with run-time CPU dispatch.
//!
//! The matrix is repacked once into **panels of 16 matrix rows** (16 output columns): per
//! block of 32 and step of four weights, the four weights of each of the 16 rows together
//! (64 bytes), with the 16 scales as f32 beside them. Q4_0 and Q5_0 keep their 4-bit form
//! (a step's bytes in the low or high nibbles, Q5_0's fifth bits apart), widened to bytes
//! per panel just before use: decoding one sequence is bound by reading the weights, and
//! Q5_0 as stored is 24 bytes per 32 weights here against Q8_0's 36. The rows of a product
//! are quantized once (to Q8_0 blocks, as candle and llama.cpp do for these products), and
//! a tile of rows is multiplied by a panel with the four bytes of a row's step broadcast
//! against the panel's 64: `vpdpbusd` on AVX-512 VNNI, `maddubs` on AVX2. Each block's
//! integer sums are exact; a column's f32 sum takes them in block order
//! (`sum = isum · (dw · dx) + sum`, fused).
//!
//! **Every output value is computed by the same arithmetic whatever the kernel (AVX2 or
//! AVX-512 VNNI), the number of rows, the row's place in a tile, or the thread that computes
//! it**, so a row's result never depends on what else its pass holds or on the CPU's level:
//! greedy replies decoded side by side are exactly those decoded one at a time, and the
//! tests hold every kernel the CPU runs to a portable statement of it, to the bit.

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Result, Tensor};

/// Weights per block.
const BLOCK: usize = 32;
/// Bytes of one candle `BlockQ8_0`: an f16 scale, then 32 signed bytes.
const BLOCK_BYTES: usize = 2 + BLOCK;
/// Bytes of one candle `BlockQ4_0`: an f16 scale, then 32 four-bit weights.
const Q4_BLOCK_BYTES: usize = 2 + BLOCK / 2;
/// Bytes of one candle `BlockQ5_0`: an f16 scale, 32 fifth bits, 32 four-bit weights.
const Q5_BLOCK_BYTES: usize = 2 + 4 + BLOCK / 2;
/// Matrix rows (output columns) per panel: one 512-bit vector of i32 or f32 sums.
const PANEL: usize = 16;
/// Bytes of one panel's block as bytes: 16 rows × 32 weights.
const PANEL_BLOCK: usize = PANEL * BLOCK;
/// Rows of `x` per tile of the VNNI kernel (6 × (sum + block sum) + 8 weights + temporaries
/// fit the 32 vector registers).
const VNNI_TILE: usize = 6;
/// Rows of `x` per tile of the AVX2 kernel (16 registers).
const AVX2_TILE: usize = 2;

/// A Q8_0, Q4_0 or Q5_0 matrix of `rows` × `cols` weights (a linear layer's `out` × `in`),
/// repacked in panels (module documentation); the last panel is padded with zero-scale
/// rows.
pub struct Q8Matrix {
    rows: usize,
    cols: usize,
    /// Per panel and block: the 16 rows' scales.
    scales: Vec<f32>,
    /// Per panel and block, the weights as unsigned numbers `n = w + bias`: 512 bytes
    /// (Q8_0, bias 128), or 256 bytes whose low nibbles are bytes 0–255 of the block and
    /// high nibbles bytes 256–511 (Q4_0, bias 8; Q5_0, bias 16, with its fifth bits in
    /// `high`). Within a block, byte `(step × 16 + j) × 4 + i` is weight `4 step + i` of the
    /// panel's row `j`.
    data: Vec<u8>,
    /// Q5_0: per panel and block, 64 bytes whose bit `i` (little-endian) is byte `i`'s
    /// fifth bit.
    high: Vec<u8>,
    form: Form,
}

/// How a matrix keeps its weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    Bytes,
    Q4,
    Q5,
}

impl Form {
    /// Bytes of `data` per panel and block.
    fn block_bytes(self) -> usize {
        match self {
            Form::Bytes => PANEL_BLOCK,
            Form::Q4 | Form::Q5 => PANEL_BLOCK / 2,
        }
    }
}

/// The f32 rows of a product, quantized to blocks of 32 signed bytes in [-127, 127] with one
/// scale per block (`max |x| / 127`, rounded to f16), and each block's sum of bytes.
struct QuantizedRows {
    scales: Vec<f32>,
    quants: Vec<i8>,
    sums: Vec<i32>,
}

/// The kernel of a product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    /// AVX-512 VNNI: a row's bytes made unsigned (+128, corrected by the block sums times
    /// 128), `vpdpbusd` of four of them against four weights of each of 16 rows.
    Vnni512,
    /// AVX2: `maddubs` of a row's magnitudes against the weights carrying the row's signs
    /// (no pair of products exceeds 127 × 128 in magnitude: no 16-bit saturation), 8 rows
    /// of the matrix a vector.
    Avx2,
}

impl Kernel {
    /// The kernel of the level chosen for the process (`None` without AVX2).
    fn chosen() -> Option<Kernel> {
        let level = situate_core::cpu::chosen();
        if !cfg!(target_arch = "x86_64") {
            None
        } else if level.avx512_vnni() {
            Some(Kernel::Vnni512)
        } else if level.avx2() {
            Some(Kernel::Avx2)
        } else {
            None
        }
    }
}

impl Q8Matrix {
    /// Whether [`Q8Matrix::from_qtensor`] takes a 2-d matrix of `dtype` on this CPU.
    pub fn takes(dtype: GgmlDType) -> bool {
        matches!(dtype, GgmlDType::Q8_0 | GgmlDType::Q4_0 | GgmlDType::Q5_0)
            && Kernel::chosen().is_some()
    }

    /// The repacked form of `t` when it is a 2-d Q8_0, Q4_0 or Q5_0 tensor with a multiple of
    /// 32 columns and this CPU runs a kernel (x86-64 with AVX2 and FMA); `None` otherwise
    /// (candle's product is then the one to use). A Q4_0 block is an f16 scale and 32 weights
    /// `n - 8`, a Q5_0 block one of 32 weights `n - 16` (four bits and a fifth); the scales
    /// are converted to f32 once, here.
    pub fn from_qtensor(t: &QTensor) -> Result<Option<Self>> {
        let block_bytes = match t.dtype() {
            GgmlDType::Q8_0 => BLOCK_BYTES,
            GgmlDType::Q4_0 => Q4_BLOCK_BYTES,
            GgmlDType::Q5_0 => Q5_BLOCK_BYTES,
            _ => return Ok(None),
        };
        if Kernel::chosen().is_none() {
            return Ok(None);
        }
        let (rows, cols) = t.shape().dims2()?;
        if !cols.is_multiple_of(BLOCK) || t.data()?.len() != rows * cols / BLOCK * block_bytes {
            return Ok(None);
        }
        let blocks = cols / BLOCK;
        let panel_blocks = rows.div_ceil(PANEL) * blocks;
        let form = match t.dtype() {
            GgmlDType::Q8_0 => Form::Bytes,
            GgmlDType::Q4_0 => Form::Q4,
            _ => Form::Q5,
        };
        let mut scales = vec![0f32; panel_blocks * PANEL];
        let mut data = vec![0u8; panel_blocks * form.block_bytes()];
        let mut high = vec![0u8; if form == Form::Q5 { panel_blocks * PANEL_BLOCK / 8 } else { 0 }];
        let mut values = [0u8; BLOCK];
        for (i, block) in t.data()?.chunks_exact(block_bytes).enumerate() {
            let (row, b) = (i / blocks, i % blocks);
            let (pb, j) = ((row / PANEL) * blocks + b, row % PANEL);
            scales[pb * PANEL + j] = half::f16::from_le_bytes([block[0], block[1]]).to_f32();
            // The block's weights plus the bias: bytes + 128 (Q8_0), or their 4 or 5 bits.
            match form {
                // -128 (which llama.cpp's and candle's quantizers never write) is read as
                // -127: the AVX2 kernel moves signs onto the weights, and -(-128) does not
                // fit a byte.
                Form::Bytes => {
                    for (v, &q) in values.iter_mut().zip(&block[2..]) {
                        *v = ((q as i8).max(-127) as i32 + 128) as u8;
                    }
                }
                Form::Q4 | Form::Q5 => {
                    let (fifth, nib) = if form == Form::Q5 {
                        (u32::from_le_bytes([block[2], block[3], block[4], block[5]]), &block[6..])
                    } else {
                        (0, &block[2..])
                    };
                    // Byte k holds weight k in its low nibble and weight k + 16 in its high one.
                    for k in 0..BLOCK / 2 {
                        let bit = |w: usize| (((fifth >> w) & 1) as u8) << 4;
                        values[k] = (nib[k] & 0xF) | bit(k);
                        values[k + BLOCK / 2] = (nib[k] >> 4) | bit(k + BLOCK / 2);
                    }
                }
            }
            for (w, &v) in values.iter().enumerate() {
                let i = ((w / 4) * PANEL + j) * 4 + w % 4;
                match form {
                    Form::Bytes => data[pb * PANEL_BLOCK + i] = v,
                    Form::Q4 | Form::Q5 => {
                        let half = PANEL_BLOCK / 2;
                        data[pb * half + i % half] |= if i < half { v & 0xF } else { (v & 0xF) << 4 };
                        if form == Form::Q5 {
                            high[pb * PANEL_BLOCK / 8 + i / 8] |= ((v >> 4) & 1) << (i % 8);
                        }
                    }
                }
            }
        }
        Ok(Some(Q8Matrix {
            rows,
            cols,
            scales,
            data,
            high,
            form,
        }))
    }

    /// `(rows, cols)`: out × in.
    pub fn dims(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// `x` (`m` × in, f32) times the transposed matrix: `m` × out.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let kernel = Kernel::chosen();
        crate::host_product(x, "q8", (self.rows, self.cols), |v, m| match kernel {
            Some(k) => self.matmul(v, m, k),
            // Unreachable: a Q8Matrix is made only where a kernel runs.
            None => vec![0.0; m * self.rows],
        })
    }

    /// `x` holds `m` rows of `cols` values; the result holds `m` rows of `rows` values. The
    /// panels are shared out on candle's thread pool, the one its own products run on (a
    /// second pool beside it, rayon's, made decoding slower: each pool's idle threads spin
    /// while the other's work).
    fn matmul(&self, x: &[f32], m: usize, kernel: Kernel) -> Vec<f32> {
        let blocks = self.cols / BLOCK;
        let q = quantize_rows(x, m, self.cols);
        let panels = self.rows.div_ceil(PANEL);
        let mut out = vec![0f32; m * self.rows];
        let out_at = out.as_mut_ptr() as usize;
        let per_block = self.form.block_bytes();
        candle_core::utils::barrier_pool().execute_chunked(panels, |range| {
            let mut sums = [0f32; VNNI_TILE * PANEL];
            for p in range {
                let (pb, pe) = (p * blocks, (p + 1) * blocks);
                let w = Panel {
                    data: &self.data[pb * per_block..pe * per_block],
                    high: if self.form == Form::Q5 {
                        &self.high[pb * PANEL_BLOCK / 8..pe * PANEL_BLOCK / 8]
                    } else {
                        &[]
                    },
                    scales: &self.scales[pb * PANEL..pe * PANEL],
                };
                let keep = PANEL.min(self.rows - p * PANEL);
                let mut r = 0;
                while r < m {
                    let tile = match kernel {
                        Kernel::Vnni512 => VNNI_TILE,
                        Kernel::Avx2 => AVX2_TILE,
                    };
                    let tile = if m - r >= tile { tile } else { 1 };
                    let x = Rows {
                        quants: &q.quants[r * self.cols..(r + tile) * self.cols],
                        scales: &q.scales[r * blocks..(r + tile) * blocks],
                        sums: &q.sums[r * blocks..(r + tile) * blocks],
                    };
                    run(kernel, self.form, tile, &w, &x, &mut sums);
                    for t in 0..tile {
                        // SAFETY: `out` holds `m * rows` values and outlives the pool's
                        // call; panel `p` alone writes columns `16p..16p + keep` (≤ rows).
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                sums[t * PANEL..].as_ptr(),
                                (out_at as *mut f32).add((r + t) * self.rows + p * PANEL),
                                keep,
                            )
                        };
                    }
                    r += tile;
                }
            }
        });
        out
    }
}

/// One panel of a matrix: its `data`, `high` and `scales` for every block.
struct Panel<'a> {
    data: &'a [u8],
    high: &'a [u8],
    scales: &'a [f32],
}

/// A tile of quantized rows: bytes, block scales, block sums.
struct Rows<'a> {
    quants: &'a [i8],
    scales: &'a [f32],
    sums: &'a [i32],
}

/// Runs `kernel` for a tile of `tile` rows (`VNNI_TILE`, `AVX2_TILE` or 1) against a panel
/// kept in `form`, into `out` (`tile` × 16).
fn run(kernel: Kernel, form: Form, tile: usize, w: &Panel, x: &Rows, out: &mut [f32]) {
    let blocks = w.scales.len() / PANEL;
    assert!(
        w.data.len() == blocks * form.block_bytes()
            && w.high.len() == if form == Form::Q5 { blocks * PANEL_BLOCK / 8 } else { 0 }
            && x.quants.len() == tile * blocks * BLOCK
            && x.scales.len() == tile * blocks
            && x.sums.len() == tile * blocks
            && out.len() >= tile * PANEL
    );
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `Kernel::chosen()` (or a test, after the same check) picked the kernel, so
    // the CPU runs it; the sizes were asserted above.
    unsafe {
        const B: u8 = 0;
        const Q4: u8 = 1;
        const Q5: u8 = 2;
        match (kernel, form, tile) {
            (Kernel::Vnni512, Form::Bytes, VNNI_TILE) => panel_vnni512::<VNNI_TILE, B>(w, x, out),
            (Kernel::Vnni512, Form::Bytes, _) => panel_vnni512::<1, B>(w, x, out),
            (Kernel::Vnni512, Form::Q4, VNNI_TILE) => panel_vnni512::<VNNI_TILE, Q4>(w, x, out),
            (Kernel::Vnni512, Form::Q4, _) => panel_vnni512::<1, Q4>(w, x, out),
            (Kernel::Vnni512, Form::Q5, VNNI_TILE) => panel_vnni512::<VNNI_TILE, Q5>(w, x, out),
            (Kernel::Vnni512, Form::Q5, _) => panel_vnni512::<1, Q5>(w, x, out),
            (Kernel::Avx2, Form::Bytes, AVX2_TILE) => panel_avx2::<AVX2_TILE, B>(w, x, out),
            (Kernel::Avx2, Form::Bytes, _) => panel_avx2::<1, B>(w, x, out),
            (Kernel::Avx2, Form::Q4, AVX2_TILE) => panel_avx2::<AVX2_TILE, Q4>(w, x, out),
            (Kernel::Avx2, Form::Q4, _) => panel_avx2::<1, Q4>(w, x, out),
            (Kernel::Avx2, Form::Q5, AVX2_TILE) => panel_avx2::<AVX2_TILE, Q5>(w, x, out),
            (Kernel::Avx2, Form::Q5, _) => panel_avx2::<1, Q5>(w, x, out),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kernel, form, tile, w, x, out);
        unreachable!("no Q8Matrix without AVX2")
    }
}

/// `R` rows times one panel into `out` (`R` × 16), with AVX-512 VNNI. Per block: per step
/// of four weights, the 16 rows' unsigned numbers `n = w + bias` (64 bytes: loaded, or for
/// 4 and 5 bits two steps' from one load of nibbles, the fifth bits OR-ed in under a mask
/// of 64 bits) and per row of `x` `vpdpbusd` against its four bytes broadcast; then per row
/// `bias × (the block's sum of x)` subtracted (exact: `Σ n x − bias Σ x = Σ w x`),
/// converted, and fused into the sums with `dw · dx`. `FORM`: 0 bytes, 1 Q4_0, 2 Q5_0.
///
/// # Safety
///
/// The CPU must run AVX-512 F, BW and VNNI; the sizes must be as [`run`] asserts for `R`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vnni,avx512bw")]
unsafe fn panel_vnni512<const R: usize, const FORM: u8>(w: &Panel, x: &Rows, out: &mut [f32]) {
    use std::arch::x86_64::*;
    let blocks = w.scales.len() / PANEL;
    let cols = blocks * BLOCK;
    let (bias, per_block) = match FORM {
        0 => (128, PANEL_BLOCK),
        1 => (8, PANEL_BLOCK / 2),
        _ => (16, PANEL_BLOCK / 2),
    };
    let low4 = _mm512_set1_epi8(0x0F);
    let sixteen = _mm512_set1_epi8(16);
    let mut acc = [_mm512_setzero_ps(); R];
    for b in 0..blocks {
        // SAFETY: `b < blocks`, and the slices hold `blocks` blocks of `R` rows ([`run`]).
        unsafe {
            let xb = |r: usize, step: usize| {
                let v = (x.quants.as_ptr().add(r * cols + b * BLOCK + step * 4) as *const i32)
                    .read_unaligned();
                _mm512_set1_epi32(v)
            };
            let mut dot = [_mm512_setzero_si512(); R];
            let at = w.data.as_ptr().add(b * per_block);
            if FORM == 0 {
                for step in 0..BLOCK / 4 {
                    let n = _mm512_loadu_si512(at.add(step * 64) as *const _);
                    for (r, dot) in dot.iter_mut().enumerate() {
                        *dot = _mm512_dpbusd_epi32(*dot, n, xb(r, step));
                    }
                }
            } else {
                for k in 0..BLOCK / 8 {
                    let v = _mm512_loadu_si512(at.add(k * 64) as *const _);
                    let mut lo = _mm512_and_si512(v, low4);
                    let mut hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
                    if FORM == 2 {
                        let bits = w.high.as_ptr().add(b * PANEL_BLOCK / 8) as *const u64;
                        let (ml, mh) = (bits.add(k).read_unaligned(), bits.add(k + 4).read_unaligned());
                        lo = _mm512_or_si512(lo, _mm512_maskz_mov_epi8(ml, sixteen));
                        hi = _mm512_or_si512(hi, _mm512_maskz_mov_epi8(mh, sixteen));
                    }
                    for (r, dot) in dot.iter_mut().enumerate() {
                        *dot = _mm512_dpbusd_epi32(*dot, lo, xb(r, k));
                        *dot = _mm512_dpbusd_epi32(*dot, hi, xb(r, k + 4));
                    }
                }
            }
            let dw = _mm512_loadu_ps(w.scales.as_ptr().add(b * PANEL));
            for (r, (acc, dot)) in acc.iter_mut().zip(dot).enumerate() {
                let at = r * blocks + b;
                let isum = _mm512_sub_epi32(dot, _mm512_set1_epi32(bias * *x.sums.get_unchecked(at)));
                let d = _mm512_mul_ps(dw, _mm512_set1_ps(*x.scales.get_unchecked(at)));
                *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), d, *acc);
            }
        }
    }
    for (r, acc) in acc.into_iter().enumerate() {
        // SAFETY: `out` holds `R × 16` values ([`run`]).
        unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(r * PANEL), acc) };
    }
}

/// `R` rows times one panel into `out` (`R` × 16), with AVX2, 8 matrix rows a vector. 4 and
/// 5 bits: `maddubs` of the unsigned numbers `n = w + bias` (at most 31: no pair of products
/// exceeds 31 × 128 × 2, no 16-bit saturation) against four bytes of a row broadcast, pairs
/// summed to 32 bits, `bias × Σ x` subtracted per block, as the VNNI kernel does; each fifth
/// bit becomes 16 through a byte per bit (four bytes of bits broadcast, byte `i` taking
/// byte `i / 8` of them, then every bit but bit `i % 8` set, so the byte is all ones
/// exactly when its bit is). Bytes: the weights made signed again (`n ^ 0x80`) and the
/// row's signs moved onto them, so `maddubs` multiplies magnitudes ≤ 127 by weights ≤ 127
/// (no saturation). Per block the exact sums are converted and fused with `dw · dx`.
///
/// # Safety
///
/// The CPU must run AVX2 and FMA; the sizes must be as [`run`] asserts for `R`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn panel_avx2<const R: usize, const FORM: u8>(w: &Panel, x: &Rows, out: &mut [f32]) {
    use std::arch::x86_64::*;
    let blocks = w.scales.len() / PANEL;
    let cols = blocks * BLOCK;
    let (bias, per_block) = match FORM {
        0 => (0, PANEL_BLOCK),
        1 => (8, PANEL_BLOCK / 2),
        _ => (16, PANEL_BLOCK / 2),
    };
    let ones = _mm256_set1_epi16(1);
    let flip = _mm256_set1_epi8(-128);
    let low4 = _mm256_set1_epi8(0x0F);
    let sixteen = _mm256_set1_epi8(16);
    let byte_of_bit = _mm256_set_epi64x(
        0x0303_0303_0303_0303,
        0x0202_0202_0202_0202,
        0x0101_0101_0101_0101,
        0,
    );
    let all_but_bit = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe);
    let all = _mm256_set1_epi8(-1);
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    for b in 0..blocks {
        // SAFETY: `b < blocks`, and the slices hold `blocks` blocks of `R` rows ([`run`]).
        unsafe {
            let xb = |r: usize, step: usize| {
                let v = (x.quants.as_ptr().add(r * cols + b * BLOCK + step * 4) as *const i32)
                    .read_unaligned();
                _mm256_set1_epi32(v)
            };
            // The fifth bits of 32 numbers starting at number `i` of the block, as 16s.
            let fifth = |i: usize| {
                let bits = (w.high.as_ptr().add(b * PANEL_BLOCK / 8 + i / 8) as *const i32)
                    .read_unaligned();
                let set = _mm256_cmpeq_epi8(
                    _mm256_or_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(bits), byte_of_bit), all_but_bit),
                    all,
                );
                _mm256_and_si256(set, sixteen)
            };
            let mut dot = [[_mm256_setzero_si256(); 2]; R];
            let at = w.data.as_ptr().add(b * per_block);
            if FORM == 0 {
                for step in 0..BLOCK / 4 {
                    let wv = [
                        _mm256_xor_si256(_mm256_loadu_si256(at.add(step * 64) as *const __m256i), flip),
                        _mm256_xor_si256(_mm256_loadu_si256(at.add(step * 64 + 32) as *const __m256i), flip),
                    ];
                    for (r, dot) in dot.iter_mut().enumerate() {
                        let xv = xb(r, step);
                        let ax = _mm256_sign_epi8(xv, xv);
                        for (dot, &wv) in dot.iter_mut().zip(&wv) {
                            let pairs = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(wv, xv));
                            *dot = _mm256_add_epi32(*dot, _mm256_madd_epi16(pairs, ones));
                        }
                    }
                }
            } else {
                for k in 0..BLOCK / 8 {
                    for h in 0..2 {
                        let v = _mm256_loadu_si256(at.add(k * 64 + h * 32) as *const __m256i);
                        let mut lo = _mm256_and_si256(v, low4);
                        let mut hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
                        if FORM == 2 {
                            lo = _mm256_or_si256(lo, fifth(k * 64 + h * 32));
                            hi = _mm256_or_si256(hi, fifth(PANEL_BLOCK / 2 + k * 64 + h * 32));
                        }
                        for (r, dot) in dot.iter_mut().enumerate() {
                            let l = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, xb(r, k)), ones);
                            let u = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, xb(r, k + 4)), ones);
                            dot[h] = _mm256_add_epi32(dot[h], _mm256_add_epi32(l, u));
                        }
                    }
                }
            }
            let dw = [
                _mm256_loadu_ps(w.scales.as_ptr().add(b * PANEL)),
                _mm256_loadu_ps(w.scales.as_ptr().add(b * PANEL + 8)),
            ];
            for (r, (acc, dot)) in acc.iter_mut().zip(dot).enumerate() {
                let at = r * blocks + b;
                let corr = _mm256_set1_epi32(bias * *x.sums.get_unchecked(at));
                let d = _mm256_set1_ps(*x.scales.get_unchecked(at));
                for h in 0..2 {
                    let isum = _mm256_cvtepi32_ps(_mm256_sub_epi32(dot[h], corr));
                    acc[h] = _mm256_fmadd_ps(isum, _mm256_mul_ps(dw[h], d), acc[h]);
                }
            }
        }
    }
    for (r, acc) in acc.into_iter().enumerate() {
        // SAFETY: `out` holds `R × 16` values ([`run`]).
        unsafe {
            _mm256_storeu_ps(out.as_mut_ptr().add(r * PANEL), acc[0]);
            _mm256_storeu_ps(out.as_mut_ptr().add(r * PANEL + 8), acc[1]);
        }
    }
}

/// `m` rows of `cols` values (a multiple of 32) in blocks of 32 bytes: each block scaled by
/// its largest magnitude to [-127, 127] and rounded, its scale kept as f16, exactly as
/// candle's (and llama.cpp's) Q8_0 quantization does. Compiled for AVX2 too and chosen at run
/// time (the loop vectorises; the values are the same bits either way).
fn quantize_rows(x: &[f32], m: usize, cols: usize) -> QuantizedRows {
    #[inline(always)]
    fn body(x: &[f32], m: usize, cols: usize) -> QuantizedRows {
        let mut scales = Vec::with_capacity(m * cols / BLOCK);
        let mut sums = Vec::with_capacity(m * cols / BLOCK);
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
            sums.push(q.iter().map(|&v| v as i32).sum());
        }
        QuantizedRows {
            scales,
            quants,
            sums,
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn avx2(x: &[f32], m: usize, cols: usize) -> QuantizedRows {
        body(x, m, cols)
    }
    #[cfg(target_arch = "x86_64")]
    if situate_core::cpu::chosen().avx2() && std::arch::is_x86_feature_detected!("f16c") {
        // SAFETY: the CPU runs AVX2, FMA and F16C (checked just above).
        return unsafe { avx2(x, m, cols) };
    }
    body(x, m, cols)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::QMatMul;
    use candle_core::{Device, Module};

    fn values(n: usize, seed: u64) -> Vec<f32> {
        (0..n)
            .map(|i| (((i as u64 + seed) * 2_654_435_761) % 20_011) as f32 / 10_000.0 - 1.0)
            .collect()
    }

    fn matrix_of(dtype: GgmlDType, rows: usize, cols: usize) -> QTensor {
        let t = Tensor::from_vec(values(rows * cols, 7), (rows, cols), &Device::Cpu).expect("t");
        QTensor::quantize(&t, dtype).expect("quantized")
    }

    /// A matrix's integer weights and block scales, read from its blocks by the formats'
    /// rules (independently of the repacking).
    fn integer_weights(q: &QTensor) -> (Vec<i32>, Vec<f32>) {
        let data = q.data().expect("bytes");
        let size = match q.dtype() {
            GgmlDType::Q8_0 => BLOCK_BYTES,
            GgmlDType::Q4_0 => Q4_BLOCK_BYTES,
            _ => Q5_BLOCK_BYTES,
        };
        let (mut w, mut d) = (Vec::new(), Vec::new());
        for block in data.chunks_exact(size) {
            d.push(half::f16::from_le_bytes([block[0], block[1]]).to_f32());
            for j in 0..BLOCK {
                w.push(match q.dtype() {
                    GgmlDType::Q8_0 => block[2 + j] as i8 as i32,
                    GgmlDType::Q4_0 => {
                        let n = if j < 16 { block[2 + j] & 0xF } else { block[2 + j - 16] >> 4 };
                        n as i32 - 8
                    }
                    _ => {
                        let h = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
                        let n = if j < 16 { block[6 + j] & 0xF } else { block[6 + j - 16] >> 4 };
                        (n as i32 | (((h >> j) & 1) << 4) as i32) - 16
                    }
                });
            }
        }
        (w, d)
    }

    /// The kernels' statement, portable: per output, each block's exact integer sum times
    /// `dw · dx`, added to the output's sum in block order, fused.
    fn reference(q: &QTensor, x: &[f32], m: usize) -> Vec<f32> {
        let (rows, cols) = q.shape().dims2().expect("2-d");
        let blocks = cols / BLOCK;
        let (w, d) = integer_weights(q);
        let xq = quantize_rows(x, m, cols);
        let mut out = vec![0f32; m * rows];
        for r in 0..m {
            for c in 0..rows {
                let mut sum = 0f32;
                for b in 0..blocks {
                    let isum: i32 = (0..BLOCK)
                        .map(|k| {
                            w[c * cols + b * BLOCK + k] * xq.quants[r * cols + b * BLOCK + k] as i32
                        })
                        .sum();
                    sum = (isum as f32).mul_add(d[c * blocks + b] * xq.scales[r * blocks + b], sum);
                }
                out[r * rows + c] = sum;
            }
        }
        out
    }

    /// The kernels this CPU runs.
    fn kernels_here() -> Vec<Kernel> {
        let level = situate_core::cpu::detected();
        let mut k = Vec::new();
        if cfg!(target_arch = "x86_64") && level.avx2() {
            k.push(Kernel::Avx2);
        }
        if cfg!(target_arch = "x86_64") && level.avx512_vnni() {
            k.push(Kernel::Vnni512);
        }
        k
    }

    /// Every kernel the CPU runs gives the portable statement's bits for every weight type,
    /// whatever the number of rows and a row's place among them; the values are the exact
    /// product up to the rows' quantization, and candle's up to rounding.
    #[test]
    fn every_kernel_matches_the_reference_to_the_bit() {
        let kernels = kernels_here();
        if kernels.is_empty() {
            eprintln!("no AVX2/FMA: no kernel runs here");
            return;
        }
        let dev = Device::Cpu;
        for dtype in [GgmlDType::Q8_0, GgmlDType::Q4_0, GgmlDType::Q5_0] {
            for (rows, cols, m) in [(4usize, 32usize, 1usize), (131, 96, 13), (37, 896, 7), (16, 64, 2)] {
                let q = matrix_of(dtype, rows, cols);
                let m8 = Q8Matrix::from_qtensor(&q).expect("repacks").expect("takes");
                assert_eq!(m8.dims(), (rows, cols));
                let xv = values(m * cols, 9);
                let want = reference(&q, &xv, m);
                let w: Vec<Vec<f32>> = q.dequantize(&dev).and_then(|t| t.to_vec2()).expect("w");
                let x = Tensor::from_vec(xv.clone(), (m, cols), &dev).expect("x");
                let candle: Vec<f32> = QMatMul::from_qtensor(matrix_of(dtype, rows, cols))
                    .and_then(|mm| mm.forward(&x))
                    .and_then(|t| t.flatten_all())
                    .and_then(|t| t.to_vec1())
                    .expect("candle");
                let tol = 0.02 * (cols as f64).sqrt();
                for r in 0..m {
                    for c in 0..rows {
                        let exact: f64 = w[c]
                            .iter()
                            .zip(&xv[r * cols..(r + 1) * cols])
                            .map(|(&a, &b)| a as f64 * b as f64)
                            .sum();
                        let v = want[r * rows + c];
                        assert!((v as f64 - exact).abs() < tol, "{r},{c}: {v} vs {exact}");
                        assert!((v - candle[r * rows + c]).abs() < 1e-3 * (1.0 + v.abs()));
                    }
                }
                for &kernel in &kernels {
                    let got = m8.matmul(&xv, m, kernel);
                    for (i, (g, v)) in got.iter().zip(&want).enumerate() {
                        assert_eq!(
                            g.to_bits(),
                            v.to_bits(),
                            "{dtype:?} {rows}x{cols} {kernel:?}: row {}, column {}: {g} vs {v}",
                            i / rows,
                            i % rows
                        );
                    }
                    for r in 0..m {
                        let alone = m8.matmul(&xv[r * cols..(r + 1) * cols], 1, kernel);
                        assert_eq!(alone, got[r * rows..(r + 1) * rows], "{kernel:?}: row {r} alone");
                    }
                }
            }
        }
    }

    /// The rows are quantized as candle quantizes to Q8_0 (so are llama.cpp's).
    #[test]
    fn rows_are_quantized_as_candle_does() {
        let (m, cols) = (3, 96);
        let xv = values(m * cols, 4);
        let q = quantize_rows(&xv, m, cols);
        let t = Tensor::from_vec(xv, (m, cols), &Device::Cpu).expect("x");
        let theirs = QTensor::quantize(&t, GgmlDType::Q8_0).expect("q8_0");
        let data = theirs.data().expect("bytes");
        for (i, block) in data.chunks_exact(BLOCK_BYTES).enumerate() {
            let d = half::f16::from_le_bytes([block[0], block[1]]).to_f32();
            assert_eq!(q.scales[i].to_bits(), d.to_bits(), "block {i}'s scale");
            let bytes: Vec<i8> = block[2..].iter().map(|&b| b as i8).collect();
            assert_eq!(&q.quants[i * BLOCK..(i + 1) * BLOCK], bytes.as_slice(), "block {i}");
        }
    }

    /// Q4_0 and Q5_0 stay 4-bit: 20 and 24 bytes per 32 weights, scales included.
    #[test]
    fn four_and_five_bit_matrices_stay_small() {
        if kernels_here().is_empty() {
            return;
        }
        for (dtype, per_block) in [(GgmlDType::Q4_0, 20), (GgmlDType::Q5_0, 24)] {
            let (rows, cols) = (48, 256);
            let m8 = Q8Matrix::from_qtensor(&matrix_of(dtype, rows, cols))
                .expect("repacks")
                .expect("takes");
            let kept = m8.data.len() + m8.high.len() + 4 * m8.scales.len();
            assert_eq!(kept, rows * cols / BLOCK * per_block, "{dtype:?}");
        }
    }

    #[test]
    fn refuses_other_types_and_rows_of_the_wrong_width() {
        if kernels_here().is_empty() {
            return;
        }
        assert!(Q8Matrix::takes(GgmlDType::Q5_0) && !Q8Matrix::takes(GgmlDType::Q4K));
        let t = Tensor::from_vec(values(16 * 256, 1), (16, 256), &Device::Cpu).expect("t");
        let q4 = QTensor::quantize(&t, GgmlDType::Q4K).expect("q4k");
        assert!(Q8Matrix::from_qtensor(&q4).expect("checks").is_none());
        let ours = Q8Matrix::from_qtensor(&matrix_of(GgmlDType::Q8_0, 37, 128))
            .expect("repacks")
            .expect("q8_0");
        let x = Tensor::zeros((2, 100), candle_core::DType::F32, &Device::Cpu).expect("x");
        assert!(ours.forward(&x).is_err(), "100 values against 128 columns");
        // All-zero rows give zeros (a zero block scale is not a division by zero).
        let z = Tensor::zeros((2, 128), candle_core::DType::F32, &Device::Cpu).expect("z");
        let v: Vec<Vec<f32>> = ours.forward(&z).and_then(|t| t.to_vec2()).expect("zeros");
        assert!(v.iter().flatten().all(|&x| x == 0.0));
    }
}
