//! Products of f32 rows by a matrix of llama.cpp's block quantizations (Q8_0, Q4_0, Q5_0,
//! Q4_K, Q6_K), for quantized language models (decoding, and reading prompts) and
//! multilingual-e5's 4-bit matrices.
//!
//! Why by hand: candle's Q8_0 product on x86 computes each (row, column) dot product alone
//! and, for every block of 32, converts both f16 scales and runs one accumulator, so a
//! block costs about 14 instructions in a chain that waits on the previous block; profiled
//! while Qwen2.5-0.5B decoded five replies side by side, it was 45% of the time. Its Q5_0
//! product (most of Qwen2.5-0.5B's matrices) is scalar, and its Q4_K/Q6_K products read
//! their weights at about half the rate of the kernels here (`situate-bench generate`
//! profiles, BENCHMARKS.md). No maintained crate offers these products with run-time CPU
//! dispatch.
//!
//! The matrix is repacked once into **panels of 16 matrix rows** (16 output columns): per
//! block of 32 and step of four weights, the four weights of each of the 16 rows together
//! (64 bytes). Weights are kept as unsigned numbers `n = w + bias` in their own width —
//! bytes (Q8_0), or 4 bits (a step's bytes in the low or high nibbles) with Q5_0's fifth
//! bits or Q6_K's two high bits apart — and widened in registers: decoding one sequence is
//! bound by reading the weights. The block scales stay as the format has them where that is
//! smaller (Q4_K's 6-bit scales and mins, Q6_K's 8-bit scales per 16 weights, with the
//! super-block's f32 factors), so a panel reads within 6% of the GGUF file's bytes.
//!
//! The rows of a product are quantized once to blocks of 32 signed bytes (Q8_0, as candle
//! and llama.cpp do for the 32-weight formats; finer than their Q8_K for the K formats),
//! with each half-block's sum kept. A tile of rows is multiplied by a panel with the four
//! bytes of a row's step broadcast against the panel's 64: `vpdpbusd` on AVX-512 VNNI,
//! `maddubs` on AVX2. Each block's integer sums are exact (`Σ n x − bias Σ x = Σ w x`), and
//! a column's f32 sum takes them in block order, fused with the block's scales.
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
/// Weights per super-block of the K formats.
const SUPER: usize = 256;
/// Bytes of one candle `BlockQ8_0`: an f16 scale, then 32 signed bytes.
const BLOCK_BYTES: usize = 2 + BLOCK;
/// Bytes of one candle `BlockQ4_0`: an f16 scale, then 32 four-bit weights.
const Q4_BLOCK_BYTES: usize = 2 + BLOCK / 2;
/// Bytes of one candle `BlockQ5_0`: an f16 scale, 32 fifth bits, 32 four-bit weights.
const Q5_BLOCK_BYTES: usize = 2 + 4 + BLOCK / 2;
/// Bytes of one `BlockQ4K`: f16 `d` and `dmin`, 12 bytes of 6-bit scales and mins, 128
/// bytes of 4-bit weights.
const Q4K_BYTES: usize = 4 + 12 + SUPER / 2;
/// Bytes of one `BlockQ6K`: 128 bytes of low 4 bits, 64 of high 2 bits, 16 scales, f16 `d`.
const Q6K_BYTES: usize = SUPER / 2 + SUPER / 4 + SUPER / 16 + 2;
/// Matrix rows (output columns) per panel: one 512-bit vector of i32 or f32 sums.
const PANEL: usize = 16;
/// Weights of one panel's block: 16 rows × 32.
const PANEL_BLOCK: usize = PANEL * BLOCK;
/// Rows of `x` per tile of the VNNI kernel (6 × (sum + block sum) + weights + temporaries
/// fit the 32 vector registers).
const VNNI_TILE: usize = 6;
/// Rows of `x` per tile of the AVX2 kernel (16 registers) for Q8_0, Q4_0 and Q5_0: four
/// rows read the 0.5B's prompts 12–32% faster than two (portable build, `SITUATE_CPU=avx2`).
const AVX2_TILE: usize = 4;
/// Rows of `x` per tile of the AVX2 kernel for Q4_K and Q6_K, whose longer per-block work
/// (and Q6_K's two sums per row) gained nothing from four.
const AVX2_TILE_K: usize = 2;

/// A matrix of `rows` × `cols` weights (a linear layer's `out` × `in`) in one of the formats
/// [`Q8Matrix::takes`], repacked in panels (module documentation); the last panel is padded
/// with zero-scale rows. Within a panel's block, weight `4 step + i` of the panel's row `j`
/// is number `(step × 16 + j) × 4 + i` of the block's 512.
pub struct Q8Matrix {
    rows: usize,
    cols: usize,
    form: Form,
    /// The kernel of the level chosen for the process (a matrix is made only where one
    /// runs).
    kernel: Kernel,
    /// Per panel and block: 512 bytes `n = w + 128` (Q8_0), or 256 bytes whose low nibbles
    /// are numbers 0–255 of the block and high nibbles numbers 256–511 (the low 4 bits).
    data: Vec<u8>,
    /// Per panel and block: Q5_0's fifth bits (64 bytes, bit `i` little-endian is number
    /// `i`'s), or Q6_K's high two bits (128 bytes, byte `i` holding numbers `i`, `i + 128`,
    /// `i + 256`, `i + 384` from its low bits up); empty otherwise.
    high: Vec<u8>,
    /// Q8_0, Q4_0, Q5_0: per panel and block, the 16 rows' scales.
    scales: Vec<f32>,
    /// Per panel and block, 32 bytes: Q4_K's 16 rows' 6-bit scales, then their 6-bit mins;
    /// Q6_K's 16 rows' scales of the block's first 16 weights, then of its last 16 (i8).
    kscales: Vec<u8>,
    /// Per panel and super-block: Q4_K's 16 rows' `d`, then their `dmin`; Q6_K's `d`.
    supers: Vec<f32>,
}

/// How a matrix keeps its weights (the `FORM` of the kernels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// Q8_0: bytes, bias 128, a scale per block.
    Bytes = 0,
    /// Q4_0: 4 bits, bias 8, a scale per block.
    Q4 = 1,
    /// Q5_0: 4 bits and a fifth, bias 16, a scale per block.
    Q5 = 2,
    /// Q4_K: 4 bits, `w = d · sc · n − dmin · m` per block of 32 (no bias).
    Q4K = 3,
    /// Q6_K: 4 bits and two, bias 32, `w = d · sc · (n − 32)` per 16 weights.
    Q6K = 4,
}

impl Form {
    /// Bytes of `data` per panel and block.
    fn data_bytes(self) -> usize {
        match self {
            Form::Bytes => PANEL_BLOCK,
            _ => PANEL_BLOCK / 2,
        }
    }

    /// Bytes of `high` per panel and block.
    fn high_bytes(self) -> usize {
        match self {
            Form::Q5 => PANEL_BLOCK / 8,
            Form::Q6K => PANEL_BLOCK / 4,
            _ => 0,
        }
    }

    /// Whether the block scales are the K formats' (`kscales`, `supers`) or f32 (`scales`).
    fn k(self) -> bool {
        matches!(self, Form::Q4K | Form::Q6K)
    }

    /// f32 values of `supers` per panel and super-block.
    fn supers(self) -> usize {
        match self {
            Form::Q4K => 2 * PANEL,
            Form::Q6K => PANEL,
            _ => 0,
        }
    }
}

/// The f32 rows of a product, quantized to blocks of 32 signed bytes in [-127, 127] with one
/// scale per block (`max |x| / 127`, rounded to f16), and each half-block's sum of bytes.
struct QuantizedRows {
    scales: Vec<f32>,
    quants: Vec<i8>,
    halves: Vec<i32>,
}

/// The kernel of a product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    /// AVX-512 VNNI: `vpdpbusd` of 64 unsigned weight numbers (16 matrix rows × 4) against
    /// four signed bytes of a row broadcast.
    Vnni512,
    /// AVX2: `maddubs` of 32 unsigned weight numbers (8 matrix rows × 4) against four
    /// signed bytes of a row broadcast (Q8_0: the row's magnitudes against the weights
    /// carrying its signs), pairs summed to 32 bits.
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

/// Q4_K's 6-bit scale and min of block `j` (0–7) from its 12 bytes (ggml's packing).
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

impl Q8Matrix {
    /// Whether [`Q8Matrix::from_qtensor`] takes a 2-d matrix of `dtype` on this CPU.
    pub fn takes(dtype: GgmlDType) -> bool {
        matches!(
            dtype,
            GgmlDType::Q8_0 | GgmlDType::Q4_0 | GgmlDType::Q5_0 | GgmlDType::Q4K | GgmlDType::Q6K
        ) && Kernel::chosen().is_some()
    }

    /// The repacked form of `t` when it is a 2-d matrix of a format [`Q8Matrix::takes`] with
    /// whole blocks per row and this CPU runs a kernel (x86-64 with AVX2 and FMA); `None`
    /// otherwise (candle's product is then the one to use).
    pub fn from_qtensor(t: &QTensor) -> Result<Option<Self>> {
        let (form, per, weights) = match t.dtype() {
            GgmlDType::Q8_0 => (Form::Bytes, BLOCK_BYTES, BLOCK),
            GgmlDType::Q4_0 => (Form::Q4, Q4_BLOCK_BYTES, BLOCK),
            GgmlDType::Q5_0 => (Form::Q5, Q5_BLOCK_BYTES, BLOCK),
            GgmlDType::Q4K => (Form::Q4K, Q4K_BYTES, SUPER),
            GgmlDType::Q6K => (Form::Q6K, Q6K_BYTES, SUPER),
            _ => return Ok(None),
        };
        let Some(kernel) = Kernel::chosen() else {
            return Ok(None);
        };
        let (rows, cols) = t.shape().dims2()?;
        let raw = t.data()?;
        if !cols.is_multiple_of(weights) || raw.len() != rows * cols / weights * per {
            return Ok(None);
        }
        let blocks = cols / BLOCK;
        let panels = rows.div_ceil(PANEL);
        // Panels are packed apart, on all cores (the 1.5B model's matrices took 3 s on one),
        // then joined: kept as separate allocations, the panels made decoding 20–30% slower
        // (read as one stream per part, they are what the prefetchers follow).
        use rayon::prelude::*;
        let packed: Vec<Packed> = (0..panels)
            .into_par_iter()
            .map(|p| {
                let mut out = Packed::new(form, blocks);
                for j in 0..PANEL.min(rows - p * PANEL) {
                    let row = p * PANEL + j;
                    let bytes = &raw[row * cols / weights * per..(row + 1) * cols / weights * per];
                    for (i, block) in bytes.chunks_exact(per).enumerate() {
                        out.block(form, i * weights / BLOCK, j, block);
                    }
                }
                out
            })
            .collect();
        let mut m = Q8Matrix {
            rows,
            cols,
            form,
            kernel,
            data: Vec::with_capacity(panels * blocks * form.data_bytes()),
            high: Vec::with_capacity(panels * blocks * form.high_bytes()),
            scales: Vec::new(),
            kscales: Vec::new(),
            supers: Vec::new(),
        };
        for p in packed {
            m.data.extend_from_slice(&p.data);
            m.high.extend_from_slice(&p.high);
            m.scales.extend_from_slice(&p.scales);
            m.kscales.extend_from_slice(&p.kscales);
            m.supers.extend_from_slice(&p.supers);
        }
        Ok(Some(m))
    }

    /// `(rows, cols)`: out × in.
    pub fn dims(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// `x` (`m` × in, f32) times the transposed matrix: `m` × out.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        crate::host_product(x, "q8", (self.rows, self.cols), |v, m| {
            self.matmul(v, m, self.kernel)
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
        let full = match kernel {
            Kernel::Vnni512 => VNNI_TILE,
            Kernel::Avx2 if self.form.k() => AVX2_TILE_K,
            Kernel::Avx2 => AVX2_TILE,
        };
        let mut out = vec![0f32; m * self.rows];
        let out_at = out.as_mut_ptr() as usize;
        candle_core::utils::barrier_pool().execute_chunked(panels, |range| {
            let mut sums = [0f32; VNNI_TILE * PANEL];
            for p in range {
                let w = self.panel(p);
                let keep = PANEL.min(self.rows - p * PANEL);
                let mut r = 0;
                while r < m {
                    let tile = if m - r >= full { full } else { 1 };
                    let x = Rows {
                        quants: &q.quants[r * self.cols..(r + tile) * self.cols],
                        scales: &q.scales[r * blocks..(r + tile) * blocks],
                        halves: &q.halves[2 * r * blocks..2 * (r + tile) * blocks],
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

    /// Panel `p`'s parts.
    fn panel(&self, p: usize) -> Panel<'_> {
        let blocks = self.cols / BLOCK;
        let (a, z) = (p * blocks, (p + 1) * blocks);
        let f = self.form;
        Panel {
            data: &self.data[a * f.data_bytes()..z * f.data_bytes()],
            high: &self.high[a * f.high_bytes()..z * f.high_bytes()],
            scales: if f.k() {
                &[]
            } else {
                &self.scales[a * PANEL..z * PANEL]
            },
            kscales: if f.k() {
                &self.kscales[a * 2 * PANEL..z * 2 * PANEL]
            } else {
                &[]
            },
            supers: {
                let (sa, sz) = (a / (SUPER / BLOCK), z / (SUPER / BLOCK));
                &self.supers[sa * f.supers()..sz * f.supers()]
            },
            blocks,
        }
    }
}

/// One panel's parts while a matrix is repacked (the fields of [`Q8Matrix`] for one panel).
struct Packed {
    data: Vec<u8>,
    high: Vec<u8>,
    scales: Vec<f32>,
    kscales: Vec<u8>,
    supers: Vec<f32>,
}

impl Packed {
    fn new(form: Form, blocks: usize) -> Packed {
        Packed {
            data: vec![0; blocks * form.data_bytes()],
            high: vec![0; blocks * form.high_bytes()],
            scales: vec![0.0; if form.k() { 0 } else { blocks * PANEL }],
            kscales: vec![0; if form.k() { blocks * 2 * PANEL } else { 0 }],
            supers: vec![0.0; blocks / (SUPER / BLOCK) * form.supers()],
        }
    }

    /// Row `j`'s stored block `block` (of the file's format), whose first block of 32 is
    /// the panel's block `first`.
    fn block(&mut self, form: Form, first: usize, j: usize, block: &[u8]) {
        let f16 = |b: &[u8]| half::f16::from_le_bytes([b[0], b[1]]).to_f32();
        // The block's weights as numbers `n` (and their scales).
        let mut numbers = [0u8; SUPER];
        let count = match form {
            Form::Bytes => {
                self.scales[first * PANEL + j] = f16(block);
                // -128 (which llama.cpp's and candle's quantizers never write) is read as
                // -127: the AVX2 kernel moves signs onto the weights, and -(-128) does not
                // fit a byte.
                for (n, &q) in numbers.iter_mut().zip(&block[2..]) {
                    *n = ((q as i8).max(-127) as i32 + 128) as u8;
                }
                BLOCK
            }
            Form::Q4 | Form::Q5 => {
                self.scales[first * PANEL + j] = f16(block);
                let (fifth, nib) = if form == Form::Q5 {
                    (
                        u32::from_le_bytes([block[2], block[3], block[4], block[5]]),
                        &block[6..],
                    )
                } else {
                    (0, &block[2..])
                };
                // Byte k holds weight k in its low nibble and weight k + 16 in its high one.
                for k in 0..BLOCK / 2 {
                    let bit = |w: usize| (((fifth >> w) & 1) as u8) << 4;
                    numbers[k] = (nib[k] & 0xF) | bit(k);
                    numbers[k + BLOCK / 2] = (nib[k] >> 4) | bit(k + BLOCK / 2);
                }
                BLOCK
            }
            Form::Q4K => {
                let sp = first / (SUPER / BLOCK);
                self.supers[sp * 2 * PANEL + j] = f16(block);
                self.supers[sp * 2 * PANEL + PANEL + j] = f16(&block[2..]);
                let (sc, qs) = (&block[4..16], &block[16..]);
                // Bytes 32c..32c + 32 hold block 2c in their low nibbles, 2c + 1 in their
                // high ones.
                for b in 0..SUPER / BLOCK {
                    let (s, mn) = scale_min_k4(b, sc);
                    self.kscales[(first + b) * 2 * PANEL + j] = s;
                    self.kscales[(first + b) * 2 * PANEL + PANEL + j] = mn;
                    for k in 0..BLOCK {
                        let q = qs[(b / 2) * BLOCK + k];
                        numbers[b * BLOCK + k] = if b % 2 == 0 { q & 0xF } else { q >> 4 };
                    }
                }
                SUPER
            }
            Form::Q6K => {
                let (ql, qh, sc) = (&block[..128], &block[128..192], &block[192..208]);
                let sp = first / (SUPER / BLOCK);
                self.supers[sp * PANEL + j] = f16(&block[208..]);
                // Each half of 128 weights: ql[64h..], qh[32h..]; weight l + 32t of the half
                // (t = 0..3) takes ql's low (t < 2) or high nibble of byte l + 32 (t % 2)
                // and qh's bits 2t, 2t + 1 of byte l; a scale per 16 weights.
                for h in 0..2 {
                    for l in 0..BLOCK {
                        for t in 0..4 {
                            let lo = ql[64 * h + l + 32 * (t % 2)];
                            let lo = if t < 2 { lo & 0xF } else { lo >> 4 };
                            let hi = (qh[32 * h + l] >> (2 * t)) & 3;
                            numbers[128 * h + 32 * t + l] = lo | (hi << 4);
                        }
                    }
                }
                for b in 0..SUPER / BLOCK {
                    self.kscales[(first + b) * 2 * PANEL + j] = sc[2 * b];
                    self.kscales[(first + b) * 2 * PANEL + PANEL + j] = sc[2 * b + 1];
                }
                SUPER
            }
        };
        for b in 0..count / BLOCK {
            self.put(form, first + b, j, &numbers[b * BLOCK..(b + 1) * BLOCK]);
        }
    }

    /// Stores row `j`'s 32 numbers of block `b` in their places, four (a step) at a time.
    fn put(&mut self, form: Form, b: usize, j: usize, numbers: &[u8]) {
        const HALF: usize = PANEL_BLOCK / 2;
        for (step, n) in numbers.chunks_exact(4).enumerate() {
            let i = (step * PANEL + j) * 4;
            match form {
                Form::Bytes => self.data[b * PANEL_BLOCK + i..][..4].copy_from_slice(n),
                _ => {
                    let (at, shift) = (b * HALF + i % HALF, if i < HALF { 0 } else { 4 });
                    for (d, &n) in self.data[at..at + 4].iter_mut().zip(n) {
                        *d |= (n & 0xF) << shift;
                    }
                    match form {
                        Form::Q5 => {
                            let bits = n
                                .iter()
                                .enumerate()
                                .fold(0u8, |a, (t, &n)| a | ((n >> 4) << t));
                            self.high[b * PANEL_BLOCK / 8 + i / 8] |= bits << (i % 8);
                        }
                        Form::Q6K => {
                            let at = b * PANEL_BLOCK / 4 + i % 128;
                            for (d, &n) in self.high[at..at + 4].iter_mut().zip(n) {
                                *d |= (n >> 4) << (2 * (i / 128));
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
    }
}

/// One panel of a matrix: its parts for every block.
struct Panel<'a> {
    data: &'a [u8],
    high: &'a [u8],
    scales: &'a [f32],
    kscales: &'a [u8],
    supers: &'a [f32],
    blocks: usize,
}

/// A tile of quantized rows: bytes, block scales, half-block sums.
struct Rows<'a> {
    quants: &'a [i8],
    scales: &'a [f32],
    halves: &'a [i32],
}

impl Rows<'_> {
    /// Row-block `at`'s scale and its halves' sums.
    #[inline(always)]
    fn block(&self, at: usize) -> (f32, i32, i32) {
        (
            self.scales[at],
            self.halves[2 * at],
            self.halves[2 * at + 1],
        )
    }
}

/// Runs `kernel` for a tile of `tile` rows (`VNNI_TILE`, `AVX2_TILE`, `AVX2_TILE_K` or 1) against a panel
/// kept in `form`, into `out` (`tile` × 16).
fn run(kernel: Kernel, form: Form, tile: usize, w: &Panel, x: &Rows, out: &mut [f32]) {
    let blocks = w.blocks;
    let supers = if form.k() {
        blocks / (SUPER / BLOCK)
    } else {
        0
    };
    assert!(
        w.data.len() == blocks * form.data_bytes()
            && w.high.len() == blocks * form.high_bytes()
            && w.scales.len() == if form.k() { 0 } else { blocks * PANEL }
            && w.kscales.len() == if form.k() { blocks * 2 * PANEL } else { 0 }
            && w.supers.len() == supers * form.supers()
            && x.quants.len() == tile * blocks * BLOCK
            && x.scales.len() == tile * blocks
            && x.halves.len() == 2 * tile * blocks
            && out.len() >= tile * PANEL
    );
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the matrix took its kernel from `Kernel::chosen()` (tests, from the kernels
    // their own check finds), so the CPU runs it; the sizes were asserted above.
    unsafe {
        macro_rules! each_form {
            ($kern:ident, $r:expr) => {
                match form {
                    Form::Bytes => $kern::<$r, 0>(w, x, out),
                    Form::Q4 => $kern::<$r, 1>(w, x, out),
                    Form::Q5 => $kern::<$r, 2>(w, x, out),
                    Form::Q4K => $kern::<$r, 3>(w, x, out),
                    Form::Q6K => $kern::<$r, 4>(w, x, out),
                }
            };
        }
        match (kernel, tile) {
            (Kernel::Vnni512, VNNI_TILE) => each_form!(panel_vnni512, VNNI_TILE),
            (Kernel::Vnni512, _) => each_form!(panel_vnni512, 1),
            (Kernel::Avx2, AVX2_TILE) => each_form!(panel_avx2, AVX2_TILE),
            (Kernel::Avx2, AVX2_TILE_K) => each_form!(panel_avx2, AVX2_TILE_K),
            (Kernel::Avx2, _) => each_form!(panel_avx2, 1),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kernel, form, tile, w, x, out);
        unreachable!("no Q8Matrix without AVX2")
    }
}

/// `R` rows times one panel into `out` (`R` × 16), with AVX-512 VNNI. Per block: per step
/// of four weights, the 16 matrix rows' numbers (64 bytes: loaded, or for 4-bit forms two
/// steps' from one load of nibbles, Q5_0's fifth bits OR-ed in under a 64-bit mask, Q6_K's
/// high bits shifted into place) and per row of `x` `vpdpbusd` against its step's four bytes
/// broadcast; then per row the block's exact sums fused into the f32 sums with the block's
/// scales (the tests' `reference` states the arithmetic). `FORM` is a [`Form`] as a number.
///
/// # Safety
///
/// The CPU must run AVX-512 F, BW and VNNI; the sizes must be as [`run`] asserts for `R`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vnni,avx512bw")]
unsafe fn panel_vnni512<const R: usize, const FORM: u8>(w: &Panel, x: &Rows, out: &mut [f32]) {
    use std::arch::x86_64::*;
    let blocks = w.blocks;
    let cols = blocks * BLOCK;
    let bias: i32 = match FORM {
        0 => 128,
        1 => 8,
        2 => 16,
        3 => 0,
        _ => 32,
    };
    let low4 = _mm512_set1_epi8(0x0F);
    let sixteen = _mm512_set1_epi8(16);
    let three = _mm512_set1_epi8(3);
    let mut acc = [_mm512_setzero_ps(); R];
    for b in 0..blocks {
        // SAFETY: `b < blocks`, and the slices hold `blocks` blocks of `R` rows ([`run`]).
        unsafe {
            let xb = |r: usize, step: usize| {
                let v = (x.quants.as_ptr().add(r * cols + b * BLOCK + step * 4) as *const i32)
                    .read_unaligned();
                _mm512_set1_epi32(v)
            };
            // Steps 0–3 and 4–7 apart for Q6_K (a scale per 16 weights), together otherwise.
            let mut da = [_mm512_setzero_si512(); R];
            let mut db = [_mm512_setzero_si512(); R];
            if FORM == 0 {
                let at = w.data.as_ptr().add(b * PANEL_BLOCK);
                for step in 0..BLOCK / 4 {
                    let n = _mm512_loadu_si512(at.add(step * 64) as *const _);
                    for (r, da) in da.iter_mut().enumerate() {
                        *da = _mm512_dpbusd_epi32(*da, n, xb(r, step));
                    }
                }
            } else {
                let at = w.data.as_ptr().add(b * PANEL_BLOCK / 2);
                for k in 0..BLOCK / 8 {
                    let v = _mm512_loadu_si512(at.add(k * 64) as *const _);
                    let mut lo = _mm512_and_si512(v, low4);
                    let mut hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
                    if FORM == 2 {
                        let bits = w.high.as_ptr().add(b * PANEL_BLOCK / 8) as *const u64;
                        let (ml, mh) = (
                            bits.add(k).read_unaligned(),
                            bits.add(k + 4).read_unaligned(),
                        );
                        lo = _mm512_or_si512(lo, _mm512_maskz_mov_epi8(ml, sixteen));
                        hi = _mm512_or_si512(hi, _mm512_maskz_mov_epi8(mh, sixteen));
                    } else if FORM == 4 {
                        let hv = _mm512_loadu_si512(
                            w.high.as_ptr().add(b * PANEL_BLOCK / 4 + 64 * (k % 2)) as *const _,
                        );
                        let s = _mm_cvtsi32_si128(2 * (k / 2) as i32);
                        let s4 = _mm_cvtsi32_si128(2 * (k / 2) as i32 + 4);
                        let top = |s| {
                            _mm512_slli_epi16(_mm512_and_si512(_mm512_srl_epi16(hv, s), three), 4)
                        };
                        lo = _mm512_or_si512(lo, top(s));
                        hi = _mm512_or_si512(hi, top(s4));
                    }
                    for (r, (da, db)) in da.iter_mut().zip(db.iter_mut()).enumerate() {
                        *da = _mm512_dpbusd_epi32(*da, lo, xb(r, k));
                        if FORM == 4 {
                            *db = _mm512_dpbusd_epi32(*db, hi, xb(r, k + 4));
                        } else {
                            *da = _mm512_dpbusd_epi32(*da, hi, xb(r, k + 4));
                        }
                    }
                }
            }
            let sp = b / (SUPER / BLOCK);
            let bytes = |at: usize, signed: bool| {
                let v =
                    _mm_loadu_si128(w.kscales.as_ptr().add(b * 2 * PANEL + at) as *const __m128i);
                _mm512_cvtepi32_ps(if signed {
                    _mm512_cvtepi8_epi32(v)
                } else {
                    _mm512_cvtepu8_epi32(v)
                })
            };
            // Per block: the scale of the first (and for Q6_K the second) 16 weights, and
            // Q4_K's min term.
            let (sa, sb, mn) = match FORM {
                0..=2 => {
                    let s = _mm512_loadu_ps(w.scales.as_ptr().add(b * PANEL));
                    (s, s, _mm512_setzero_ps())
                }
                3 => {
                    let d = _mm512_loadu_ps(w.supers.as_ptr().add(sp * 2 * PANEL));
                    let dmin = _mm512_loadu_ps(w.supers.as_ptr().add(sp * 2 * PANEL + PANEL));
                    let s = _mm512_mul_ps(d, bytes(0, false));
                    (s, s, _mm512_mul_ps(dmin, bytes(PANEL, false)))
                }
                _ => {
                    let d = _mm512_loadu_ps(w.supers.as_ptr().add(sp * PANEL));
                    (
                        _mm512_mul_ps(d, bytes(0, true)),
                        _mm512_mul_ps(d, bytes(PANEL, true)),
                        _mm512_setzero_ps(),
                    )
                }
            };
            for (r, acc) in acc.iter_mut().enumerate() {
                let at = r * blocks + b;
                let (dx, h0, h1) = x.block(at);
                let dxv = _mm512_set1_ps(dx);
                if FORM == 4 {
                    let ia = _mm512_sub_epi32(da[r], _mm512_set1_epi32(bias * h0));
                    let ib = _mm512_sub_epi32(db[r], _mm512_set1_epi32(bias * h1));
                    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia), _mm512_mul_ps(sa, dxv), *acc);
                    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ib), _mm512_mul_ps(sb, dxv), *acc);
                } else {
                    let isum = _mm512_sub_epi32(da[r], _mm512_set1_epi32(bias * (h0 + h1)));
                    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(sa, dxv), *acc);
                    if FORM == 3 {
                        *acc = _mm512_fnmadd_ps(mn, _mm512_set1_ps(dx * (h0 + h1) as f32), *acc);
                    }
                }
            }
        }
    }
    for (r, acc) in acc.into_iter().enumerate() {
        // SAFETY: `out` holds `R × 16` values ([`run`]).
        unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(r * PANEL), acc) };
    }
}

/// `R` rows times one panel into `out` (`R` × 16), with AVX2, 8 matrix rows a vector: the
/// VNNI kernel's arithmetic with `maddubs` (unsigned numbers ≤ 63 against signed bytes: no
/// pair of products exceeds 63 × 127 × 2, no 16-bit saturation) and pairs summed to 32
/// bits. Q5_0's fifth bits become 16s through a byte per bit (four bytes of bits broadcast,
/// byte `i` taking byte `i / 8` of them, then every bit but bit `i % 8` set, so the byte is
/// all ones exactly when its bit is). Q8_0: the weights made signed again (`n ^ 0x80`) and
/// the row's signs moved onto them, so `maddubs` multiplies magnitudes ≤ 127 by weights ≤
/// 127 (no saturation) and no bias is subtracted.
///
/// # Safety
///
/// The CPU must run AVX2 and FMA; the sizes must be as [`run`] asserts for `R`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn panel_avx2<const R: usize, const FORM: u8>(w: &Panel, x: &Rows, out: &mut [f32]) {
    use std::arch::x86_64::*;
    let blocks = w.blocks;
    let cols = blocks * BLOCK;
    let bias: i32 = match FORM {
        0 => 0,
        1 => 8,
        2 => 16,
        3 => 0,
        _ => 32,
    };
    let ones = _mm256_set1_epi16(1);
    let flip = _mm256_set1_epi8(-128);
    let low4 = _mm256_set1_epi8(0x0F);
    let sixteen = _mm256_set1_epi8(16);
    let three = _mm256_set1_epi8(3);
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
            // Q5_0's fifth bits of the 32 numbers from number `i` of the block, as 16s.
            let fifth = |i: usize| {
                let bits = (w.high.as_ptr().add(b * PANEL_BLOCK / 8 + i / 8) as *const i32)
                    .read_unaligned();
                let spread = _mm256_shuffle_epi8(_mm256_set1_epi32(bits), byte_of_bit);
                let set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, all_but_bit), all);
                _mm256_and_si256(set, sixteen)
            };
            let mut da = [[_mm256_setzero_si256(); 2]; R];
            let mut db = [[_mm256_setzero_si256(); 2]; R];
            if FORM == 0 {
                let at = w.data.as_ptr().add(b * PANEL_BLOCK);
                for step in 0..BLOCK / 4 {
                    let wv = [
                        _mm256_xor_si256(
                            _mm256_loadu_si256(at.add(step * 64) as *const __m256i),
                            flip,
                        ),
                        _mm256_xor_si256(
                            _mm256_loadu_si256(at.add(step * 64 + 32) as *const __m256i),
                            flip,
                        ),
                    ];
                    for (r, da) in da.iter_mut().enumerate() {
                        let xv = xb(r, step);
                        let ax = _mm256_sign_epi8(xv, xv);
                        for (da, &wv) in da.iter_mut().zip(&wv) {
                            let pairs = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(wv, xv));
                            *da = _mm256_add_epi32(*da, _mm256_madd_epi16(pairs, ones));
                        }
                    }
                }
            } else {
                let at = w.data.as_ptr().add(b * PANEL_BLOCK / 2);
                for k in 0..BLOCK / 8 {
                    for h in 0..2 {
                        let v = _mm256_loadu_si256(at.add(k * 64 + h * 32) as *const __m256i);
                        let mut lo = _mm256_and_si256(v, low4);
                        let mut hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
                        if FORM == 2 {
                            lo = _mm256_or_si256(lo, fifth(k * 64 + h * 32));
                            hi = _mm256_or_si256(hi, fifth(PANEL_BLOCK / 2 + k * 64 + h * 32));
                        } else if FORM == 4 {
                            let hv = _mm256_loadu_si256(
                                w.high
                                    .as_ptr()
                                    .add(b * PANEL_BLOCK / 4 + 64 * (k % 2) + 32 * h)
                                    as *const __m256i,
                            );
                            let top = |s: i32| {
                                let s = _mm_cvtsi32_si128(s);
                                _mm256_slli_epi16(
                                    _mm256_and_si256(_mm256_srl_epi16(hv, s), three),
                                    4,
                                )
                            };
                            lo = _mm256_or_si256(lo, top(2 * (k / 2) as i32));
                            hi = _mm256_or_si256(hi, top(2 * (k / 2) as i32 + 4));
                        }
                        for r in 0..R {
                            let l = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, xb(r, k)), ones);
                            let u = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, xb(r, k + 4)), ones);
                            if FORM == 4 {
                                da[r][h] = _mm256_add_epi32(da[r][h], l);
                                db[r][h] = _mm256_add_epi32(db[r][h], u);
                            } else {
                                da[r][h] = _mm256_add_epi32(da[r][h], _mm256_add_epi32(l, u));
                            }
                        }
                    }
                }
            }
            let sp = b / (SUPER / BLOCK);
            let bytes = |at: usize, signed: bool| {
                let v =
                    _mm_loadl_epi64(w.kscales.as_ptr().add(b * 2 * PANEL + at) as *const __m128i);
                _mm256_cvtepi32_ps(if signed {
                    _mm256_cvtepi8_epi32(v)
                } else {
                    _mm256_cvtepu8_epi32(v)
                })
            };
            for h in 0..2 {
                let o = 8 * h;
                let (sa, sb, mn) = match FORM {
                    0..=2 => {
                        let s = _mm256_loadu_ps(w.scales.as_ptr().add(b * PANEL + o));
                        (s, s, _mm256_setzero_ps())
                    }
                    3 => {
                        let d = _mm256_loadu_ps(w.supers.as_ptr().add(sp * 2 * PANEL + o));
                        let dmin =
                            _mm256_loadu_ps(w.supers.as_ptr().add(sp * 2 * PANEL + PANEL + o));
                        let s = _mm256_mul_ps(d, bytes(o, false));
                        (s, s, _mm256_mul_ps(dmin, bytes(PANEL + o, false)))
                    }
                    _ => {
                        let d = _mm256_loadu_ps(w.supers.as_ptr().add(sp * PANEL + o));
                        (
                            _mm256_mul_ps(d, bytes(o, true)),
                            _mm256_mul_ps(d, bytes(PANEL + o, true)),
                            _mm256_setzero_ps(),
                        )
                    }
                };
                for (r, acc) in acc.iter_mut().enumerate() {
                    let at = r * blocks + b;
                    let (dx, h0, h1) = x.block(at);
                    let dxv = _mm256_set1_ps(dx);
                    let acc = &mut acc[h];
                    if FORM == 4 {
                        let ia = _mm256_sub_epi32(da[r][h], _mm256_set1_epi32(bias * h0));
                        let ib = _mm256_sub_epi32(db[r][h], _mm256_set1_epi32(bias * h1));
                        *acc =
                            _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia), _mm256_mul_ps(sa, dxv), *acc);
                        *acc =
                            _mm256_fmadd_ps(_mm256_cvtepi32_ps(ib), _mm256_mul_ps(sb, dxv), *acc);
                    } else {
                        let isum = _mm256_sub_epi32(da[r][h], _mm256_set1_epi32(bias * (h0 + h1)));
                        *acc =
                            _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(sa, dxv), *acc);
                        if FORM == 3 {
                            *acc =
                                _mm256_fnmadd_ps(mn, _mm256_set1_ps(dx * (h0 + h1) as f32), *acc);
                        }
                    }
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
/// candle's (and llama.cpp's) Q8_0 quantization does, with each 16 bytes' sum. Compiled for
/// AVX2 too and chosen at run time (the loop vectorises; the values are the same bits either
/// way).
fn quantize_rows(x: &[f32], m: usize, cols: usize) -> QuantizedRows {
    #[inline(always)]
    fn body(x: &[f32], m: usize, cols: usize) -> QuantizedRows {
        let mut scales = Vec::with_capacity(m * cols / BLOCK);
        let mut halves = Vec::with_capacity(2 * m * cols / BLOCK);
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
            for h in q.chunks_exact(BLOCK / 2) {
                halves.push(h.iter().map(|&v| v as i32).sum());
            }
        }
        QuantizedRows {
            scales,
            quants,
            halves,
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

    /// One row's block of 32 by the formats' rules (independently of the repacking).
    enum Rule {
        /// Q8_0, Q4_0, Q5_0: `w = d · q`.
        Plain { q: Vec<i32>, d: f32 },
        /// Q4_K: `w = d_sc · n − m_min`.
        K4 { n: Vec<i32>, d: f32, m: f32 },
        /// Q6_K: `w = d_a · q` (first 16), `d_b · q` (last 16).
        K6 { q: Vec<i32>, da: f32, db: f32 },
    }

    impl Rule {
        fn value(&self, k: usize) -> f32 {
            match self {
                Rule::Plain { q, d } => d * q[k] as f32,
                Rule::K4 { n, d, m } => d * n[k] as f32 - m,
                Rule::K6 { q, da, db } => (if k < 16 { da } else { db }) * q[k] as f32,
            }
        }
    }

    /// A matrix's blocks of 32 (row-major: row, then block), read by the formats' rules.
    fn rules(q: &QTensor) -> Vec<Rule> {
        let data = q.data().expect("bytes");
        let f16 = |b: &[u8]| half::f16::from_le_bytes([b[0], b[1]]).to_f32();
        let nib = |qs: &[u8], j: usize| if j < 16 { qs[j] & 0xF } else { qs[j - 16] >> 4 };
        let mut out = Vec::new();
        match q.dtype() {
            GgmlDType::Q8_0 => {
                for b in data.chunks_exact(BLOCK_BYTES) {
                    let q = b[2..].iter().map(|&v| v as i8 as i32).collect();
                    out.push(Rule::Plain { q, d: f16(b) });
                }
            }
            GgmlDType::Q4_0 => {
                for b in data.chunks_exact(Q4_BLOCK_BYTES) {
                    let q = (0..BLOCK).map(|j| nib(&b[2..], j) as i32 - 8).collect();
                    out.push(Rule::Plain { q, d: f16(b) });
                }
            }
            GgmlDType::Q5_0 => {
                for b in data.chunks_exact(Q5_BLOCK_BYTES) {
                    let h = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
                    let q = (0..BLOCK)
                        .map(|j| (nib(&b[6..], j) as i32 | (((h >> j) & 1) << 4) as i32) - 16)
                        .collect();
                    out.push(Rule::Plain { q, d: f16(b) });
                }
            }
            GgmlDType::Q4K => {
                for b in data.chunks_exact(Q4K_BYTES) {
                    let (d, dmin) = (f16(b), f16(&b[2..]));
                    for s in 0..8 {
                        let (sc, m) = scale_min_k4(s, &b[4..16]);
                        let qs = &b[16 + 32 * (s / 2)..];
                        let n = (0..BLOCK)
                            .map(|k| if s % 2 == 0 { qs[k] & 0xF } else { qs[k] >> 4 } as i32)
                            .collect();
                        out.push(Rule::K4 {
                            n,
                            d: d * sc as f32,
                            m: dmin * m as f32,
                        });
                    }
                }
            }
            GgmlDType::Q6K => {
                for b in data.chunks_exact(Q6K_BYTES) {
                    let d = f16(&b[208..]);
                    let (ql, qh, sc) = (&b[..128], &b[128..192], &b[192..208]);
                    let mut all = vec![0i32; SUPER];
                    for (i, v) in all.iter_mut().enumerate() {
                        let (h, t, l) = (i / 128, (i % 128) / 32, i % 32);
                        let lo = ql[64 * h + l + 32 * (t % 2)];
                        let lo = if t < 2 { lo & 0xF } else { lo >> 4 };
                        *v = (lo | (((qh[32 * h + l] >> (2 * t)) & 3) << 4)) as i32 - 32;
                    }
                    for s in 0..8 {
                        out.push(Rule::K6 {
                            q: all[s * BLOCK..(s + 1) * BLOCK].to_vec(),
                            da: d * sc[2 * s] as i8 as f32,
                            db: d * sc[2 * s + 1] as i8 as f32,
                        });
                    }
                }
            }
            other => panic!("{other:?}"),
        }
        out
    }

    /// The kernels' statement, portable: per output and block in order, the block's exact
    /// integer sums fused into the output's f32 sum with the block's scales.
    fn reference(q: &QTensor, x: &[f32], m: usize) -> Vec<f32> {
        let (rows, cols) = q.shape().dims2().expect("2-d");
        let blocks = cols / BLOCK;
        let rules = rules(q);
        let xq = quantize_rows(x, m, cols);
        let mut out = vec![0f32; m * rows];
        for r in 0..m {
            for c in 0..rows {
                let mut sum = 0f32;
                for b in 0..blocks {
                    let xs = &xq.quants[r * cols + b * BLOCK..][..BLOCK];
                    let dx = xq.scales[r * blocks + b];
                    let dot = |w: &[i32], ks: std::ops::Range<usize>| -> i32 {
                        ks.map(|k| w[k] * xs[k] as i32).sum()
                    };
                    match &rules[c * blocks + b] {
                        Rule::Plain { q, d } => {
                            sum = (dot(q, 0..BLOCK) as f32).mul_add(d * dx, sum);
                        }
                        Rule::K4 { n, d, m } => {
                            let xsum: i32 = xs.iter().map(|&v| v as i32).sum();
                            sum = (dot(n, 0..BLOCK) as f32).mul_add(d * dx, sum);
                            sum = (-m).mul_add(dx * xsum as f32, sum);
                        }
                        Rule::K6 { q, da, db } => {
                            sum = (dot(q, 0..16) as f32).mul_add(da * dx, sum);
                            sum = (dot(q, 16..BLOCK) as f32).mul_add(db * dx, sum);
                        }
                    }
                }
                out[r * rows + c] = sum;
            }
        }
        out
    }

    /// The rules read the formats as candle does: their values are candle's dequantized
    /// weights, to the bit.
    #[test]
    fn the_rules_read_the_formats_as_candle_does() {
        for dtype in FORMATS {
            let q = matrix_of(dtype, 16, 512);
            let want: Vec<f32> = q
                .dequantize(&Device::Cpu)
                .and_then(|t| t.flatten_all())
                .and_then(|t| t.to_vec1())
                .expect("dequantizes");
            let got: Vec<f32> = rules(&q)
                .iter()
                .flat_map(|r| (0..BLOCK).map(|k| r.value(k)).collect::<Vec<_>>())
                .collect();
            assert_eq!(got, want, "{dtype:?}");
        }
    }

    const FORMATS: [GgmlDType; 5] = [
        GgmlDType::Q8_0,
        GgmlDType::Q4_0,
        GgmlDType::Q5_0,
        GgmlDType::Q4K,
        GgmlDType::Q6K,
    ];

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
        for dtype in FORMATS {
            let shapes: &[(usize, usize, usize)] = match dtype {
                GgmlDType::Q4K | GgmlDType::Q6K => {
                    &[(16, 256, 1), (131, 512, 13), (37, 256, 7), (16, 768, 2)]
                }
                _ => &[(4, 32, 1), (131, 96, 13), (37, 896, 7), (16, 64, 2)],
            };
            for &(rows, cols, m) in shapes {
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
                        // candle quantizes the rows per 256 for the K formats.
                        assert!(
                            ((v - candle[r * rows + c]) as f64).abs() < tol,
                            "{r},{c}: candle"
                        );
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
                        assert_eq!(
                            alone,
                            got[r * rows..(r + 1) * rows],
                            "{kernel:?}: row {r} alone"
                        );
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
            assert_eq!(
                &q.quants[i * BLOCK..(i + 1) * BLOCK],
                bytes.as_slice(),
                "block {i}"
            );
        }
    }

    /// Q4_0 and Q5_0 stay 4-bit: 20 and 24 bytes per 32 weights, scales included.
    #[test]
    fn four_and_five_bit_matrices_stay_small() {
        if kernels_here().is_empty() {
            return;
        }
        // Q4_K: 16 + 2 scale bytes + 8 bytes of d and dmin per 256 (19 against the file's
        // 18); Q6_K: 16 + 8 + 2 + 4 per 256 (26.5 against 26.25).
        for (dtype, per_block) in [
            (GgmlDType::Q4_0, 20.0),
            (GgmlDType::Q5_0, 24.0),
            (GgmlDType::Q4K, 19.0),
            (GgmlDType::Q6K, 26.5),
        ] {
            let (rows, cols) = (48, 256);
            let m8 = Q8Matrix::from_qtensor(&matrix_of(dtype, rows, cols))
                .expect("repacks")
                .expect("takes");
            let kept = m8.data.len()
                + m8.high.len()
                + 4 * m8.scales.len()
                + m8.kscales.len()
                + 4 * m8.supers.len();
            assert_eq!(
                kept as f64,
                (rows * cols / BLOCK) as f64 * per_block,
                "{dtype:?}"
            );
        }
    }

    #[test]
    fn refuses_other_types_and_rows_of_the_wrong_width() {
        if kernels_here().is_empty() {
            return;
        }
        assert!(Q8Matrix::takes(GgmlDType::Q5_0) && !Q8Matrix::takes(GgmlDType::Q5K));
        let t = Tensor::from_vec(values(16 * 256, 1), (16, 256), &Device::Cpu).expect("t");
        let q5k = QTensor::quantize(&t, GgmlDType::Q5K).expect("q5k");
        assert!(Q8Matrix::from_qtensor(&q5k).expect("checks").is_none());
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
