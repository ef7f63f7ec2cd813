//! Products of f32 rows (a query's tokens, or a batch of passages' tokens) by an int8
//! matrix with one scale per matrix row (a linear layer's output channel); each f32 row is
//! quantized to bytes with one scale of its own, so a row and column's dot product is one
//! exact integer sum, scaled once at the end.
//!
//! Why by hand, beside [`crate::q8`]: there both operands have a scale per block of 32, so
//! every block's integer sum is converted and scaled by the product of two scales (seven
//! instructions per block and column). Here the integer sums need no scaling until the end.
//! No maintained crate offers an int8 product over candle's f32 tensors.
//!
//! Every kernel gives the same integer sums (Σ u·w over a row's unsigned bytes u and the
//! matrix's signed bytes w) and finish them with the same f32 operations, so a vector is the
//! same on every CPU:
//! - *tiled*, with AVX512-VNNI: the matrix is packed in panels of 32 output channels, each
//!   channel's bytes four by four side by side, and 8 rows × 32 channels of sums stay in
//!   sixteen 512-bit registers while the input runs by: per four input bytes, two panel
//!   loads, eight broadcasts of a row's four bytes and sixteen `vpdpbusd` (64 byte products
//!   each). This is the classic register-tiled matrix product, the form that keeps a batch
//!   of passages (thousands of rows) compute-bound: each weight load serves eight rows, each
//!   row load 32 channels, and a task's rows stay in cache while every panel passes.
//! - *tiled* with AVX2 alone, the same form in 256-bit registers: panels of 16 channels,
//!   4 rows × 16 channels of sums in eight registers. AVX2 has no `vpdpbusd`; per four
//!   input bytes and register of eight channels it runs `sign`, `maddubs`, `madd` and an
//!   add, on the row's bytes made signed and their signs moved onto the weights, which
//!   keeps `maddubs`'s 16-bit sums from saturating (`tile_avx2`).
//! - *grouped*, with AVX-VNNI (256-bit `vpdpbusd` without AVX-512): four channels against
//!   two rows at a time, each dot product summed horizontally at the end. It suits a
//!   query's few rows; for a batch it re-reads every row for each group of four channels.
//! - *portable*, plain loops for any other CPU ([`I8Matrix::quantize_anywhere`]): what keeps
//!   an index whose passages are embedded in int8 the same index on every machine.
//!
//! The weights are quantized per channel and the activations per row (token), as ONNX
//! Runtime's and PyTorch's dynamically quantized layers do (theirs per tensor, coarser).
//!
//! Every output value is computed by the same instructions in the same order whatever the
//! number of rows or the thread that computes it, so a text's vector does not depend on
//! what else is embedded beside it.

use candle_core::{Result, Tensor};
use rayon::prelude::*;

/// Input bytes per block of the grouped kernels (one 256-bit load).
const BLOCK: usize = 32;
/// Output channels per panel of the tiled kernel (two 512-bit registers of 32-bit sums).
const NR: usize = 16 * H;
/// 512-bit registers of sums per row of a tile.
const H: usize = 2;
/// Rows per tile of the tiled kernel (`MR` × 2 accumulators stay in registers).
const MR: usize = 8;
/// Rows per task when a tiled kernel shares a batch out by rows: 96 rows of 1,536 bytes
/// (MiniLM's widest input) are 144 KiB, which stay in a core's cache while every panel of
/// the matrix passes.
const ROWS_PER_TASK: usize = 96;
/// Output channels per panel of the AVX2 tiled kernel (two 256-bit registers of sums).
const NR2: usize = 16;
/// Rows per tile of the AVX2 tiled kernel: 4 rows × 2 registers of sums, two of weights,
/// the row's broadcast bytes (signed and absolute), a product and the constant 1 fit the
/// sixteen 256-bit registers.
const MR2: usize = 4;

/// An int8 matrix of `rows` × `cols` weights (out × in), one f32 scale per row, packed for
/// the kernel this CPU runs (`Kernel::index` gives a weight's place); the rows are padded
/// with zero rows to a whole panel.
pub struct I8Matrix {
    rows: usize,
    cols: usize,
    /// Per row (padded): the scale of its bytes.
    scales: Vec<f32>,
    /// The signed bytes, in the kernel's layout.
    quants: Vec<i8>,
    /// Per row (padded): the sum of its bytes, which the input rows' offsets multiply.
    byte_sums: Vec<i32>,
    /// The kernel this CPU runs.
    kernel: Kernel,
}

/// The kernels (the same integer sums on each).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kernel {
    /// Tiled, AVX2 and FMA: 4 rows × 16 channels, `maddubs` on the rows' bytes made
    /// signed with their signs moved onto the weights (exact).
    Avx2,
    /// Grouped, AVX-VNNI (256-bit `vpdpbusd` without AVX-512).
    AvxVnni,
    /// Tiled, AVX512-VNNI with AVX512-BW.
    Tiled,
    /// Plain loops over row-major bytes.
    Portable,
}

impl Kernel {
    /// Where weight (`r`, `c`) of a matrix of `cols` columns is kept.
    fn index(self, r: usize, c: usize, cols: usize) -> usize {
        match self {
            // Per group of four rows and block of 32 columns: the four rows' 32 bytes.
            Kernel::AvxVnni => {
                ((r / 4 * (cols / BLOCK) + c / BLOCK) * 4 + r % 4) * BLOCK + c % BLOCK
            }
            // Per panel of NR (NR2) rows and four columns: each row's four bytes.
            Kernel::Tiled => ((r / NR) * (cols / 4) + c / 4) * (NR * 4) + (r % NR) * 4 + c % 4,
            Kernel::Avx2 => ((r / NR2) * (cols / 4) + c / 4) * (NR2 * 4) + (r % NR2) * 4 + c % 4,
            Kernel::Portable => r * cols + c,
        }
    }
}

impl I8Matrix {
    /// Quantizes `w` (`rows` × `cols` f32, row-major) symmetrically per row: each row's
    /// bytes are `round(w / s)` with `s = max |w| / 127`. `None` when this CPU does not run
    /// a kernel (x86-64 with AVX2) or `cols` is not a multiple of 32.
    pub fn quantize(w: &[f32], rows: usize, cols: usize) -> Option<Self> {
        Self::quantize_for(best_kernel()?, w, rows, cols)
    }

    /// [`I8Matrix::quantize`], with the portable kernel where this CPU runs no other (the
    /// same values, computed slowly): `None` only when `cols` is not a multiple of 32.
    pub fn quantize_anywhere(w: &[f32], rows: usize, cols: usize) -> Option<Self> {
        Self::quantize_for(best_kernel().unwrap_or(Kernel::Portable), w, rows, cols)
    }

    /// Whether products run a vectorised kernel (not the portable loops).
    pub fn is_fast(&self) -> bool {
        self.kernel != Kernel::Portable
    }

    fn quantize_for(kernel: Kernel, w: &[f32], rows: usize, cols: usize) -> Option<Self> {
        if cols == 0 || !cols.is_multiple_of(BLOCK) || w.len() != rows * cols {
            return None;
        }
        let padded = rows.div_ceil(NR) * NR;
        let mut scales = vec![0f32; padded];
        let mut quants = vec![0i8; padded * cols];
        let mut byte_sums = vec![0i32; padded];
        for (r, row) in w.chunks_exact(cols).enumerate() {
            let (s, inv) = scale_of(row);
            scales[r] = s;
            for (c, &v) in row.iter().enumerate() {
                let q = (v * inv).round() as i8;
                quants[kernel.index(r, c, cols)] = q;
                byte_sums[r] += i32::from(q);
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

    /// `residual + (x · Wᵀ + bias)` (`residual` `m` × out, `bias` out values), the two
    /// additions done as each product value is written: a linear layer's bias and a
    /// transformer's residual connection without two more passes over the batch (candle's
    /// element-wise additions were 5% of embedding passages). The same values as adding
    /// them after [`I8Matrix::forward`].
    pub fn forward_add(
        &self,
        x: &Tensor,
        bias: &Tensor,
        residual: Option<&Tensor>,
    ) -> Result<Tensor> {
        let (m, n) = (x.dims2()?.0, self.rows);
        if bias.dims() != [n] {
            candle_core::bail!("int8 product: a bias of {:?} for {n} outputs", bias.dims());
        }
        if let Some(r) = residual
            && r.dims() != [m, n]
        {
            candle_core::bail!("int8 product: a residual of {:?} for {m} × {n}", r.dims());
        }
        crate::with_f32_values(bias, |b| {
            let product = |res: Option<&[f32]>| {
                crate::host_product(x, "int8", (self.rows, self.cols), |v, m| {
                    self.matmul_add(v, m, Some(b), res)
                })
            };
            match residual {
                Some(r) => crate::with_f32_values(r, |r| product(Some(r)))?,
                None => product(None),
            }
        })?
    }

    /// The product on the host: `x` holds `m` rows of `cols` values; the result `m` rows
    /// of `rows` values. The work is shared out on rayon's pool, the one the embedder's
    /// other parallel work (attention) runs on. Candle's barrier pool answered a query
    /// faster (2.4–2.6 ms p50 against 3.0–3.3 ms) but its idle worker spins on a core after
    /// every product (perf: 30% of a hybrid benchmark's samples), and a hybrid query's
    /// other threads then waited for one: p99 at 100k chunks 22–32 ms against 13 ms here
    /// (BENCHMARKS.md).
    pub fn matmul(&self, x: &[f32], m: usize) -> Vec<f32> {
        self.matmul_add(x, m, None, None)
    }

    /// [`I8Matrix::matmul`], then `bias` (out values) added to every row and the sum added
    /// to `residual` (`m` × out), as each value is written (see [`I8Matrix::forward_add`]).
    pub fn matmul_add(
        &self,
        x: &[f32],
        m: usize,
        bias: Option<&[f32]>,
        residual: Option<&[f32]>,
    ) -> Vec<f32> {
        let cols = self.cols;
        assert!(
            x.len() >= m * cols
                && bias.is_none_or(|b| b.len() == self.rows)
                && residual.is_none_or(|r| r.len() == m * self.rows),
            "int8 product: operands of the wrong sizes"
        );
        let add = Add { bias, residual };
        // The AVX2 kernel's rows are twice as wide (`split_signs`).
        let width = if self.kernel == Kernel::Avx2 {
            2 * cols
        } else {
            cols
        };
        let mut xq = vec![0u8; m * width];
        // Per row: (scale, offset) with value ≈ scale × byte + offset.
        let mut xs = vec![(0f32, 0f32); m];
        let x = &x[..m * cols];
        let prepare = |row: &[f32], q: &mut [u8]| {
            let s = quantize_row(row, &mut q[..cols]);
            if width != cols {
                split_signs(q);
            }
            s
        };
        if x.len() < 1 << 16 {
            for ((row, q), s) in x
                .chunks_exact(cols)
                .zip(xq.chunks_exact_mut(width))
                .zip(xs.iter_mut())
            {
                *s = prepare(row, q);
            }
        } else {
            x.par_chunks_exact(cols)
                .zip(xq.par_chunks_exact_mut(width))
                .zip(xs.par_iter_mut())
                .for_each(|((row, q), s)| *s = prepare(row, q));
        }
        let mut out = vec![0f32; m * self.rows];
        match self.kernel {
            Kernel::Tiled => self.tiled::<MR, NR>(&xq, &xs, add, &mut out),
            Kernel::Avx2 => self.tiled::<MR2, NR2>(&xq, &xs, add, &mut out),
            Kernel::AvxVnni => self.grouped(&xq, &xs, add, &mut out),
            Kernel::Portable => self.portable(&xq, &xs, add, &mut out),
        }
        out
    }

    /// A tiled kernel's product (tiles of `TM` rows by panels of `TN` channels: the
    /// kernel's [`MR`]/[`NR`] or [`MR2`]/[`NR2`]): tasks of a few tiles by every panel when
    /// there are rows enough to keep every thread busy (a batch), else the panels shared
    /// out (a query).
    fn tiled<const TM: usize, const TN: usize>(
        &self,
        xq: &[u8],
        xs: &[(f32, f32)],
        add: Add<'_>,
        out: &mut [f32],
    ) {
        let (n, cols, m) = (self.rows, self.cols, xs.len());
        // A row's bytes: the AVX2 kernel's rows are twice as wide (`split_signs`).
        let width = xq.len() / m.max(1);
        let tiles = m.div_ceil(TM);
        let panels = n.div_ceil(TN);
        let out_at = out.as_mut_ptr() as usize;
        // The bias padded to whole panels, for the kernel's whole-register loads.
        let bias = add.bias.map(|b| {
            let mut p = b.to_vec();
            p.resize(panels * TN, 0.0);
            p
        });
        let run = |tiles: std::ops::Range<usize>, panels: std::ops::Range<usize>| {
            for p in panels {
                let b = &self.quants[p * TN * cols..(p + 1) * TN * cols];
                let ws = &self.scales[p * TN..(p + 1) * TN];
                let bs = &self.byte_sums[p * TN..(p + 1) * TN];
                let bias = bias.as_ref().map(|b| &b[p * TN..(p + 1) * TN]);
                let channels = (n - p * TN).min(TN);
                for t in tiles.clone() {
                    let r0 = t * TM;
                    let kept = (m - r0).min(TM);
                    // The residual's block at the tile's origin (same shape as `out`).
                    let residual = add.residual.map(|r| &r[r0 * n + p * TN..]);
                    let a = &xq[r0 * width..(r0 + kept) * width];
                    let xs = &xs[r0..r0 + kept];
                    let panel = Panel { ws, bs, bias };
                    // SAFETY: the tile writes rows `r0..r0 + kept` and columns
                    // `p·TN..p·TN + channels` of `out` (m × n, stride n), which no other
                    // task writes, and `out` outlives the pool's call; `residual` has
                    // `out`'s shape (`matmul_add` checks its length).
                    unsafe {
                        let out = (out_at as *mut f32).add(r0 * n + p * TN);
                        self.tile(kept, a, b, out, n, xs, channels, panel, residual)
                    };
                }
            }
        };
        let threads = rayon::current_num_threads().max(1);
        // By rows when each thread gets half a task of rows or more (a batch: the weights
        // pass once per task while its rows stay in cache), else by panels (a query: each
        // thread reads only its share of the weights). Tasks never fewer than the threads:
        // a few dozen rows as one task ran on one core.
        if threads == 1 || tiles * panels == 1 {
            run(0..tiles, 0..panels);
        } else if m * 2 >= threads * ROWS_PER_TASK {
            // Tasks of at most ROWS_PER_TASK rows, as many as a multiple of the threads,
            // of near-equal sizes: 11 tasks on 2 threads left one thread idle a twelfth of
            // the product.
            let tasks = tiles
                .div_ceil((ROWS_PER_TASK / TM).max(1))
                .next_multiple_of(threads);
            let per_task = tiles.div_ceil(tasks);
            let tasks = tiles.div_ceil(per_task);
            (0..tasks)
                .into_par_iter()
                .for_each(|j| run(j * per_task..((j + 1) * per_task).min(tiles), 0..panels));
        } else {
            let per = panels.div_ceil(threads);
            (0..threads)
                .into_par_iter()
                .for_each(|j| run(0..tiles, (j * per).min(panels)..((j + 1) * per).min(panels)));
        }
    }

    /// One tile of a tiled kernel: `kept` rows (`a`) by the panel `b`, written at `out`
    /// (stride `ldo`). A last tile of fewer rows runs a kernel of its size: a query's dozen
    /// tokens are not padded to 16.
    ///
    /// # Safety
    ///
    /// `out` must be valid for writes of `kept` rows of `channels` values at stride `ldo`,
    /// which no other thread reads or writes meanwhile.
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile(
        &self,
        kept: usize,
        a: &[u8],
        b: &[i8],
        out: *mut f32,
        ldo: usize,
        xs: &[(f32, f32)],
        channels: usize,
        panel: Panel<'_>,
        residual: Option<&[f32]>,
    ) {
        // SAFETY: the kernel is `Tiled` or `Avx2` only where `kernel_at` found the CPU to
        // run its instructions (AVX512-VNNI and BW; AVX2 and FMA), and tests check the same
        // before choosing one. The kernels assert the slices' lengths; `out` is the
        // caller's promise.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            let (p, r) = (panel, residual);
            match (self.kernel, kept) {
                (Kernel::Tiled, 8) => tile_avx512::<8>(a, b, out, ldo, xs, channels, p, r),
                (Kernel::Tiled, 7) => tile_avx512::<7>(a, b, out, ldo, xs, channels, p, r),
                (Kernel::Tiled, 6) => tile_avx512::<6>(a, b, out, ldo, xs, channels, p, r),
                (Kernel::Tiled, 5) => tile_avx512::<5>(a, b, out, ldo, xs, channels, p, r),
                (Kernel::Tiled, 4) => tile_avx512::<4>(a, b, out, ldo, xs, channels, p, r),
                (Kernel::Tiled, 3) => tile_avx512::<3>(a, b, out, ldo, xs, channels, p, r),
                (Kernel::Tiled, 2) => tile_avx512::<2>(a, b, out, ldo, xs, channels, p, r),
                (Kernel::Tiled, _) => tile_avx512::<1>(a, b, out, ldo, xs, channels, p, r),
                (Kernel::Avx2, 4) => tile_avx2::<4>(a, b, out, ldo, xs, channels, p, r),
                (Kernel::Avx2, 3) => tile_avx2::<3>(a, b, out, ldo, xs, channels, p, r),
                (Kernel::Avx2, 2) => tile_avx2::<2>(a, b, out, ldo, xs, channels, p, r),
                (Kernel::Avx2, _) => tile_avx2::<1>(a, b, out, ldo, xs, channels, p, r),
                (Kernel::AvxVnni | Kernel::Portable, _) => {
                    unreachable!("a kernel with its own product")
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (kept, a, b, out, ldo, xs, channels, panel, residual);
            unreachable!("no tiled kernel off x86-64")
        }
    }

    /// The portable kernel's product: each output's integer sum by plain loops, rows shared
    /// out.
    fn portable(&self, xq: &[u8], xs: &[(f32, f32)], add: Add<'_>, out: &mut [f32]) {
        let (n, cols) = (self.rows, self.cols);
        out.par_chunks_mut(n)
            .zip(xq.par_chunks(cols))
            .zip(xs.par_iter())
            .enumerate()
            .for_each(|(r, ((o, x), &(scale, lo)))| {
                for (c, o) in o.iter_mut().enumerate() {
                    let w = &self.quants[c * cols..(c + 1) * cols];
                    let s_uw: i32 = x
                        .iter()
                        .zip(w)
                        .map(|(&u, &w)| i32::from(u) * i32::from(w))
                        .sum();
                    let v = finish(s_uw, scale, lo, self.scales[c], self.byte_sums[c]);
                    *o = add.to(v, r * n + c, c);
                }
            });
    }

    /// The grouped kernels' product: groups of four matrix rows shared out.
    fn grouped(&self, xq: &[u8], xs: &[(f32, f32)], add: Add<'_>, out: &mut [f32]) {
        let (cols, m) = (self.cols, xs.len());
        let groups = self.rows.div_ceil(4);
        let out_at = out.as_mut_ptr() as usize;
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
                        &xq[r * cols..(r + 1) * cols],
                        &xq[r1 * cols..(r1 + 1) * cols],
                    );
                    for (j, row) in
                        [r, r1]
                            .into_iter()
                            .enumerate()
                            .take(if r1 == r { 1 } else { 2 })
                    {
                        let (scale, lo) = xs[row];
                        // The padding rows of a last group (c ≥ keep) are not written.
                        let d: [f32; 4] = std::array::from_fn(|c| {
                            let v = finish(sums[j][c], scale, lo, ws[c], bs[c]);
                            if c < keep {
                                add.to(v, row * self.rows + g * 4 + c, g * 4 + c)
                            } else {
                                v
                            }
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
    }
}

/// What is added to each product value as it is written ([`I8Matrix::matmul_add`]).
#[derive(Clone, Copy)]
struct Add<'a> {
    /// Per output channel.
    bias: Option<&'a [f32]>,
    /// Per output value (`m` × out).
    residual: Option<&'a [f32]>,
}

impl Add<'_> {
    /// Value `at` (of channel `c`) with its additions: `residual + (v + bias)`, the order of
    /// adding them after the product.
    #[inline(always)]
    fn to(self, v: f32, at: usize, c: usize) -> f32 {
        let v = match self.bias {
            Some(b) => v + b[c],
            None => v,
        };
        match self.residual {
            Some(r) => r[at] + v,
            None => v,
        }
    }
}

/// One output value from its integer sum `s_uw` = Σ u·w: with the row's values
/// `x ≈ scale·u + lo` and the weights `w·ws`, Σ x·w = ws·(scale·Σ u·w + lo·Σ w). Every kernel
/// computes these products and this sum in this order (the tiled one on 16 lanes at once),
/// so every kernel gives the same f32 values.
#[inline(always)]
fn finish(s_uw: i32, scale: f32, lo: f32, ws: f32, byte_sum: i32) -> f32 {
    ws * (scale * s_uw as f32 + lo * byte_sum as f32)
}

/// Quantizes a row asymmetrically over its range, as ONNX Runtime's dynamic quantization
/// does (a tensor's there): `u = round((x - min) / s)` in 0..=255 with `s = (max - min) /
/// 255`, ties to even; returns `(s, min)`. Over a skewed range (GELU's outputs, say) this
/// resolves twice as finely as a symmetric scale.
fn quantize_row(row: &[f32], q: &mut [u8]) -> (f32, f32) {
    quantize_row_at(situate_core::cpu::chosen(), row, q)
}

/// [`quantize_row`] on the path of `level` (one the CPU runs).
fn quantize_row_at(level: situate_core::cpu::Level, row: &[f32], q: &mut [u8]) -> (f32, f32) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx2,fma")]
        fn avx512(row: &[f32], q: &mut [u8]) -> (f32, f32) {
            quantize_row_generic::<true>(row, q)
        }
        #[target_feature(enable = "avx2,fma")]
        fn avx2(row: &[f32], q: &mut [u8]) -> (f32, f32) {
            quantize_row_generic::<false>(row, q)
        }
        if level.avx512() {
            // SAFETY: the level is one the CPU runs (AVX-512F, AVX2, FMA).
            return unsafe { avx512(row, q) };
        }
        if level.avx2() {
            // SAFETY: the level is one the CPU runs (AVX2 and FMA).
            return unsafe { avx2(row, q) };
        }
    }
    let _ = level;
    quantize_row_generic::<false>(row, q)
}

/// [`quantize_row`]'s loops, written so that they vectorise: the range 16 lanes at a time
/// ([`range`]), and the rounding by the add-and-subtract of 1.5 · 2^23 with the integer read
/// from the sum's low bits. `round() as u8` (a saturating conversion, ties away from zero)
/// was done one value at a time: a tenth of a batch's time in perf.
#[inline(always)]
fn quantize_row_generic<const AVX512: bool>(row: &[f32], q: &mut [u8]) -> (f32, f32) {
    const ROUND: f32 = 12_582_912.0;
    let (lo, hi) = range::<AVX512>(row);
    if !(lo.is_finite() && hi.is_finite()) {
        // An empty row, or one of infinities: no range to spread the bytes over.
        q.fill(0);
        return (0.0, if lo.is_finite() { lo } else { 0.0 });
    }
    let s = (hi - lo) / 255.0;
    let inv = if s > 0.0 { 1.0 / s } else { 0.0 };
    for (q, &v) in q.iter_mut().zip(row) {
        // In 0..=255 (NaN to 0, which `clamp` would keep), then rounded to the nearest
        // integer, ties to even.
        #[allow(clippy::manual_clamp)]
        let y = ((v - lo) * inv).max(0.0).min(255.0) + ROUND;
        *q = y.to_bits().wrapping_sub(ROUND.to_bits()) as u8;
    }
    (s, lo)
}

/// The smallest and largest values of a row (NaN ignored; infinities for an empty row).
/// `AVX512`: only inlined into a function compiled for AVX-512F.
#[inline(always)]
fn range<const AVX512: bool>(row: &[f32]) -> (f32, f32) {
    let chunks = row.chunks_exact(16);
    let rest = chunks.remainder();
    // With AVX-512, 16 lanes in one register each (LLVM vectorises the portable loop
    // poorly: shuffles, or one value at a time).
    #[cfg(target_arch = "x86_64")]
    let simd = AVX512.then(|| {
        use std::arch::x86_64::*;
        // SAFETY: with `AVX512` this is inlined into a function compiled for AVX-512F,
        // called only where the CPU runs it; each load reads one chunk of 16.
        unsafe {
            let (mut lo, mut hi) = (
                _mm512_set1_ps(f32::INFINITY),
                _mm512_set1_ps(f32::NEG_INFINITY),
            );
            for c in chunks.clone() {
                let v = _mm512_loadu_ps(c.as_ptr());
                // A NaN lane of `v` keeps the second operand.
                lo = _mm512_min_ps(v, lo);
                hi = _mm512_max_ps(v, hi);
            }
            (_mm512_reduce_min_ps(lo), _mm512_reduce_max_ps(hi))
        }
    });
    #[cfg(not(target_arch = "x86_64"))]
    let simd: Option<(f32, f32)> = None;
    let (lo, hi) = simd.unwrap_or_else(|| {
        let (mut lo, mut hi) = ([f32::INFINITY; 16], [f32::NEG_INFINITY; 16]);
        for c in chunks {
            for l in 0..16 {
                lo[l] = lo[l].min(c[l]);
                hi[l] = hi[l].max(c[l]);
            }
        }
        (
            lo.iter().fold(f32::INFINITY, |a, &v| a.min(v)),
            hi.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v)),
        )
    });
    (
        rest.iter().fold(lo, |a, &v| a.min(v)),
        rest.iter().fold(hi, |a, &v| a.max(v)),
    )
}

/// A row's scale (`max |x| / 127`) and its inverse (0 for an all-zero row).
fn scale_of(row: &[f32]) -> (f32, f32) {
    let amax = row.iter().fold(0f32, |a, v| a.max(v.abs()));
    let s = amax / 127.0;
    (s, if s > 0.0 { 1.0 / s } else { 0.0 })
}

/// The best kernel of the level chosen for the process ([`situate_core::cpu::chosen`]), if
/// it has one.
fn best_kernel() -> Option<Kernel> {
    kernel_at(situate_core::cpu::chosen())
}

/// The kernel of `level`: none below AVX2 (the portable loops are the caller's choice).
fn kernel_at(level: situate_core::cpu::Level) -> Option<Kernel> {
    if !cfg!(target_arch = "x86_64") || !level.avx2() {
        None
    } else if level.avx512_vnni() {
        Some(Kernel::Tiled)
    } else if level.avx_vnni() {
        Some(Kernel::AvxVnni)
    } else {
        Some(Kernel::Avx2)
    }
}

/// The AVX2 kernel's form of a quantized row, in place: `q` holds the row's `n` bytes u
/// followed by `n` bytes of room; it ends with the absolute values of the bytes made signed
/// (|u − 128|, as unsigned bytes), then those signed bytes (u − 128). Made as each row is
/// quantized, not in the kernel's inner loop, where it was two instructions of ten per row,
/// step and panel.
fn split_signs(q: &mut [u8]) {
    #[inline(always)]
    fn fill(q: &mut [u8]) {
        let (abs, signed) = q.split_at_mut(q.len() / 2);
        for (a, y) in abs.iter_mut().zip(signed) {
            let v = *a ^ 0x80;
            *y = v;
            *a = (v as i8).unsigned_abs();
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        fn avx2(q: &mut [u8]) {
            fill(q)
        }
        if situate_core::cpu::chosen().avx2() {
            // SAFETY: the level chosen is one the CPU runs, with AVX2.
            return unsafe { avx2(q) };
        }
    }
    fill(q)
}

/// A panel's scales, byte sums and (padded) bias, a value per channel of the panel.
struct Panel<'a> {
    ws: &'a [f32],
    bs: &'a [i32],
    bias: Option<&'a [f32]>,
}

/// `R` (≤ [`MR`]) rows (a tile of `a`, `R` rows of `cols` unsigned bytes) times a panel `b`
/// (`NR` channels), finished into `out` (row stride `ldo`): `R` rows of `channels` values,
/// each plus the panel's bias and then plus `residual`'s value at the same place (same
/// stride). Each value's integer sum takes the same instructions whatever `R`.
///
/// # Safety
///
/// The CPU must run AVX-512 F, BW and VNNI, and `out` must be valid for writes of
/// `R` rows of `channels` values at stride `ldo` (the slices' lengths are asserted here).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_avx512<const R: usize>(
    a: &[u8],
    b: &[i8],
    out: *mut f32,
    ldo: usize,
    xs: &[(f32, f32)],
    channels: usize,
    panel: Panel<'_>,
    residual: Option<&[f32]>,
) {
    use std::arch::x86_64::*;
    let cols = a.len() / R;
    let Panel { ws, bs, bias } = panel;
    assert!(
        R <= MR
            && a.len() == R * cols
            && b.len() == NR * cols
            && xs.len() == R
            && channels <= NR
            && ws.len() == NR
            && bs.len() == NR
            && bias.is_none_or(|b| b.len() == NR)
            && residual.is_none_or(|r| r.len() >= (R - 1) * ldo + channels)
    );
    let (ap, bp) = (a.as_ptr(), b.as_ptr());
    let mut acc = [[_mm512_setzero_si512(); H]; R];
    for k in 0..cols / 4 {
        // SAFETY: `k < cols / 4`: the panel holds `cols / 4` steps of NR × 4 bytes and each
        // of the tile's R rows `cols` bytes (asserted above).
        unsafe {
            let mut bv = [_mm512_setzero_si512(); H];
            for (h, bv) in bv.iter_mut().enumerate() {
                *bv = _mm512_loadu_si512(bp.add(k * NR * 4 + h * 64).cast());
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let four = std::ptr::read_unaligned(ap.add(r * cols + k * 4).cast::<i32>());
                let av = _mm512_set1_epi32(four);
                for (acc, &bv) in acc.iter_mut().zip(&bv) {
                    *acc = _mm512_dpbusd_epi32(*acc, av, bv);
                }
            }
        }
    }
    // Plain loops, no closures: a closure would not inherit this function's features.
    let (mut wv, mut bv, mut biases) = ([_mm512_setzero_ps(); H], [_mm512_setzero_ps(); H], None);
    let mut masks = [0u16; H];
    for h in 0..H {
        // SAFETY: `ws`, `bs` and the bias hold NR = 16·H values (asserted above).
        unsafe {
            wv[h] = _mm512_loadu_ps(ws.as_ptr().add(16 * h));
            bv[h] = _mm512_cvtepi32_ps(_mm512_loadu_si512(bs.as_ptr().add(16 * h).cast()));
            if let Some(b) = bias {
                biases.get_or_insert([_mm512_setzero_ps(); H])[h] =
                    _mm512_loadu_ps(b.as_ptr().add(16 * h));
            }
        }
        masks[h] = crate::lanes(channels.saturating_sub(16 * h));
    }
    for (r, &(scale, lo)) in xs.iter().enumerate() {
        let (sv, lov) = (_mm512_set1_ps(scale), _mm512_set1_ps(lo));
        for h in 0..H {
            // `finish` on 16 lanes: the same operations in the same order.
            let mut v = _mm512_mul_ps(
                wv[h],
                _mm512_add_ps(
                    _mm512_mul_ps(sv, _mm512_cvtepi32_ps(acc[r][h])),
                    _mm512_mul_ps(lov, bv[h]),
                ),
            );
            // And `Add::to`'s additions.
            if let Some(b) = &biases {
                v = _mm512_add_ps(v, b[h]);
            }
            if let Some(res) = residual {
                // SAFETY: `residual` holds row `r`'s `channels` values at `r·ldo`
                // (asserted above); the mask reads no lane past them (the pointer is formed
                // with wrapping arithmetic: a masked-off half may lie past the slice).
                let at = res.as_ptr().wrapping_add(r * ldo + h * 16);
                let rv = unsafe { _mm512_maskz_loadu_ps(masks[h], at) };
                v = _mm512_add_ps(rv, v);
            }
            // SAFETY: the caller gives `out` room for the tile's `xs.len()` rows of
            // `channels` values at stride `ldo`; the mask stores no lane past `channels`.
            unsafe { _mm512_mask_storeu_ps(out.wrapping_add(r * ldo + h * 16), masks[h], v) };
        }
    }
}

/// [`tile_avx512`] with AVX2: `R` (≤ [`MR2`]) rows times a panel of [`NR2`] channels.
/// Per four input bytes: two panel loads (16 channels × 4 bytes), and per row broadcasts
/// of its four bytes made signed (u − 128, a flip of the top bit) and of their absolute
/// values (both made as the row is quantized, `split_signs`), and per register of eight channels the weights given the bytes' signs (`sign`),
/// `maddubs` (unsigned by signed bytes, pairs summed in 16 bits: at most 2 × 128 × 127,
/// so nothing saturates), `madd` by 1 (four products per 32-bit lane) and an add. The sums
/// are Σ (u − 128)·w; 128 × the channel's byte sum makes them Σ u·w, the same integers as
/// every other kernel's, finished by the same float operations in the same order.
///
/// Why not `maddubs` on the unsigned bytes directly, as ONNX Runtime's AVX2 kernels do:
/// two products of 255 × 127 overflow its 16-bit sums, which then saturate (ONNX Runtime
/// documents it and offers 7-bit weights against it); the sign costs one instruction per
/// 32 products and keeps the result exact and the same as with VNNI.
///
/// # Safety
///
/// The CPU must run AVX2 and FMA, and `out` must be valid for writes of `R` rows of
/// `channels` values at stride `ldo` (the slices' lengths are asserted here).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_avx2<const R: usize>(
    a: &[u8],
    b: &[i8],
    out: *mut f32,
    ldo: usize,
    xs: &[(f32, f32)],
    channels: usize,
    panel: Panel<'_>,
    residual: Option<&[f32]>,
) {
    use std::arch::x86_64::*;
    // Each row: `cols` absolute values, then `cols` signed bytes (`split_signs`).
    let cols = a.len() / R / 2;
    let Panel { ws, bs, bias } = panel;
    assert!(
        R <= MR2
            && a.len() == R * 2 * cols
            && b.len() == NR2 * cols
            && xs.len() == R
            && channels <= NR2
            && ws.len() == NR2
            && bs.len() == NR2
            && bias.is_none_or(|b| b.len() == NR2)
            && residual.is_none_or(|r| r.len() >= (R - 1) * ldo + channels)
    );
    let (ap, bp) = (a.as_ptr(), b.as_ptr());
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_si256(); 2]; R];
    for k in 0..cols / 4 {
        // SAFETY: `k < cols / 4`: the panel holds `cols / 4` steps of NR2 × 4 bytes and
        // each of the tile's R rows `2 × cols` bytes (asserted above).
        unsafe {
            let bv = [
                _mm256_loadu_si256(bp.add(k * NR2 * 4).cast()),
                _mm256_loadu_si256(bp.add(k * NR2 * 4 + 32).cast()),
            ];
            for (r, acc) in acc.iter_mut().enumerate() {
                let at = ap.add(r * 2 * cols + k * 4);
                let ay = _mm256_set1_epi32(std::ptr::read_unaligned(at.cast::<i32>()));
                let y = _mm256_set1_epi32(std::ptr::read_unaligned(at.add(cols).cast::<i32>()));
                for (acc, &bv) in acc.iter_mut().zip(&bv) {
                    let p = _mm256_maddubs_epi16(ay, _mm256_sign_epi8(bv, y));
                    *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(p, ones));
                }
            }
        }
    }
    // Plain loops, no closures: a closure would not inherit this function's features.
    let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let (mut wv, mut bsi, mut bv) = (
        [_mm256_setzero_ps(); 2],
        [_mm256_setzero_si256(); 2],
        [_mm256_setzero_ps(); 2],
    );
    let (mut biases, mut masks) = (None, [_mm256_setzero_si256(); 2]);
    for h in 0..2 {
        // SAFETY: `ws`, `bs` and the bias hold NR2 = 16 values (asserted above).
        unsafe {
            wv[h] = _mm256_loadu_ps(ws.as_ptr().add(8 * h));
            bsi[h] = _mm256_loadu_si256(bs.as_ptr().add(8 * h).cast());
            if let Some(b) = bias {
                biases.get_or_insert([_mm256_setzero_ps(); 2])[h] =
                    _mm256_loadu_ps(b.as_ptr().add(8 * h));
            }
        }
        bv[h] = _mm256_cvtepi32_ps(bsi[h]);
        let n = channels.saturating_sub(8 * h).min(8) as i32;
        masks[h] = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane);
    }
    for (r, &(scale, lo)) in xs.iter().enumerate() {
        let (sv, lov) = (_mm256_set1_ps(scale), _mm256_set1_ps(lo));
        for h in 0..2 {
            // Σ u·w = Σ (u − 128)·w + 128 Σ w, then `finish` on 8 lanes: the same
            // operations in the same order.
            let s_uw = _mm256_add_epi32(acc[r][h], _mm256_slli_epi32::<7>(bsi[h]));
            let mut v = _mm256_mul_ps(
                wv[h],
                _mm256_add_ps(
                    _mm256_mul_ps(sv, _mm256_cvtepi32_ps(s_uw)),
                    _mm256_mul_ps(lov, bv[h]),
                ),
            );
            // And `Add::to`'s additions.
            if let Some(b) = &biases {
                v = _mm256_add_ps(v, b[h]);
            }
            if let Some(res) = residual {
                // SAFETY: `residual` holds row `r`'s `channels` values at `r·ldo`
                // (asserted above); the mask reads no lane past them (the pointer is formed
                // with wrapping arithmetic: a masked-off half may lie past the slice).
                let at = res.as_ptr().wrapping_add(r * ldo + h * 8);
                let rv = unsafe { _mm256_maskload_ps(at, masks[h]) };
                v = _mm256_add_ps(rv, v);
            }
            // SAFETY: the caller gives `out` room for the tile's `xs.len()` rows of
            // `channels` values at stride `ldo`; the mask stores no lane past `channels`.
            unsafe { _mm256_maskstore_ps(out.wrapping_add(r * ldo + h * 8), masks[h], v) };
        }
    }
}

/// The integer sums Σ u·w of two rows' unsigned bytes with a group of four weight rows.
#[inline(always)]
fn sums(kernel: Kernel, w: &[i8], x0: &[u8], x1: &[u8]) -> [[i32; 4]; 2] {
    let cols = x0.len();
    assert!(cols.is_multiple_of(BLOCK) && x1.len() == cols && w.len() == 4 * cols);
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `kernel` is what `best_kernel()` found this CPU to run (tests check the
        // same before choosing another), and the slices hold whole blocks (asserted above).
        unsafe {
            match kernel {
                Kernel::AvxVnni => sums_avxvnni(w, x0, x1),
                Kernel::Tiled | Kernel::Avx2 | Kernel::Portable => {
                    unreachable!("a kernel with its own product")
                }
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kernel, w, x0, x1);
        unreachable!("no I8Matrix without AVX2")
    }
}

/// Horizontal sum of eight 32-bit lanes (exact, in a fixed order).
///
/// # Safety
///
/// The CPU must run AVX2 (the caller is compiled with it enabled).
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
///
/// # Safety
///
/// The CPU must run AVX2, and `w` must hold block `b` of four rows: at least
/// `(b + 1) * 4 * BLOCK` bytes.
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
///
/// # Safety
///
/// The CPU must run AVX2, and `x` must hold block `b`: at least `(b + 1) * BLOCK` bytes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn load_row(x: &[u8], b: usize) -> std::arch::x86_64::__m256i {
    // SAFETY: the caller checked that `x` holds block `b` (`sums`' assert).
    unsafe { std::arch::x86_64::_mm256_loadu_si256(x.as_ptr().add(b * BLOCK).cast()) }
}

/// The horizontal sums of two rows' four accumulators.
///
/// # Safety
///
/// The CPU must run AVX2 (the caller is compiled with it enabled).
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

/// Per block, row and weight row one 256-bit `vpdpbusd` of the row's unsigned bytes by the
/// weight's signed bytes, summed in 32-bit lanes (exact: at most 4 × 255 × 128 per lane and
/// block).
///
/// # Safety
///
/// The CPU must run AVX2, FMA and AVX-VNNI; the slices as for `sums_avx2` (`sums` asserts
/// them).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avxvnni")]
unsafe fn sums_avxvnni(w: &[i8], x0: &[u8], x1: &[u8]) -> [[i32; 4]; 2] {
    use std::arch::x86_64::*;
    let blocks = x0.len() / BLOCK;
    let mut acc = [[_mm256_setzero_si256(); 4]; 2];
    for b in 0..blocks {
        // SAFETY: `b < blocks`; the caller's assert gives the slices' lengths.
        unsafe {
            let wv = load_weights(w, b);
            for (j, x) in [x0, x1].into_iter().enumerate() {
                let uy = load_row(x, b);
                for c in 0..4 {
                    acc[j][c] = _mm256_dpbusd_avx_epi32(acc[j][c], uy, wv[c]);
                }
            }
        }
    }
    // SAFETY: AVX2 is enabled with this function's features.
    unsafe { hsums(&acc) }
}

/// The matrix as f32 (each weight its byte times its row's scale), for tests.
#[cfg(test)]
fn expand(m: &I8Matrix) -> Vec<f32> {
    let mut out = vec![0f32; m.rows * m.cols];
    for r in 0..m.rows {
        for c in 0..m.cols {
            out[r * m.cols + c] = m.quants[m.kernel.index(r, c, m.cols)] as f32 * m.scales[r];
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

    /// Every kernel this CPU runs (one per level it runs, `cpu::levels_here`), the
    /// portable one first and the best last.
    fn kernels_here() -> Vec<Kernel> {
        let mut kernels: Vec<Kernel> = situate_core::cpu::levels_here()
            .into_iter()
            .map(|l| kernel_at(l).unwrap_or(Kernel::Portable))
            .collect();
        kernels.dedup();
        assert_eq!(
            kernels.last().copied(),
            Some(kernel_at(situate_core::cpu::detected()).unwrap_or(Kernel::Portable)),
            "{kernels:?}"
        );
        eprintln!("kernels: {kernels:?}");
        kernels
    }

    #[test]
    fn rows_are_quantized_alike_on_every_level_this_cpu_runs() {
        let mut rows: Vec<Vec<f32>> = vec![
            values(384, 1),
            values(37, 2),
            vec![],
            vec![0.5; 16],
            vec![f32::NAN, 1.0, -2.0, 3.5],
        ];
        let mut with_nan = values(64, 3);
        with_nan[17] = f32::NAN;
        rows.push(with_nan);
        for row in &rows {
            let mut want = vec![0u8; row.len()];
            let want_s = quantize_row_at(situate_core::cpu::Level::Scalar, row, &mut want);
            for level in situate_core::cpu::levels_here() {
                let mut got = vec![0u8; row.len()];
                let s = quantize_row_at(level, row, &mut got);
                assert_eq!(got, want, "{level} on {} values", row.len());
                assert_eq!(
                    (s.0.to_bits(), s.1.to_bits()),
                    (want_s.0.to_bits(), want_s.1.to_bits()),
                    "{level}"
                );
            }
        }
    }

    #[test]
    fn products_are_the_exact_products_of_the_quantized_values() {
        for kernel in kernels_here() {
            // Partial panels and groups, one row, a partial tile, and a batch of tiles
            // (shared out by rows on two threads or more).
            for (rows, cols, m) in [
                (4usize, 32usize, 1usize),
                (131, 96, 3),
                (70, 384, 8),
                (9, 64, 63),
                (45, 128, 101),
            ] {
                let w = values(rows * cols, 7);
                let q = I8Matrix::quantize_for(kernel, &w, rows, cols).expect("quantizes");
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
                    let mut qr = vec![0u8; cols];
                    let (s, lo) = quantize_row(xr, &mut qr);
                    let xq: Vec<f64> = qr
                        .iter()
                        .map(|&q| f64::from(q) * s as f64 + lo as f64)
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
                            "{kernel:?} {r},{c}: {g} vs {want}"
                        );
                        // And close to the f32 product.
                        let exact: f64 = xr
                            .iter()
                            .zip(&w[c * cols..(c + 1) * cols])
                            .map(|(&a, &b)| a as f64 * b as f64)
                            .sum();
                        assert!(
                            (g - exact).abs() < 0.02 * (cols as f64).sqrt(),
                            "{kernel:?} {r},{c}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn every_kernel_this_cpu_runs_gives_the_same_values() {
        let kernels = kernels_here();
        // Extreme bytes too: weights at ±127, inputs at the ends of their range and a row
        // of zeros; a query's few rows and a batch's many (the tiled kernel shares them out
        // differently).
        let (rows, cols) = (37, 1536);
        let mut w = values(rows * cols, 13);
        w[0] = 50.0;
        w[cols + 3] = -50.0;
        // Every size of a last tile (1..=8 rows) appears among these.
        for m in [2, 4, 5, 150, 1, 3, 7, 8] {
            let mut x = values(m.max(3) * cols, 17);
            x[5] = 9.0;
            x[cols + 7] = -9.0;
            x[2 * cols..3 * cols].fill(0.0);
            let results: Vec<Vec<f32>> = kernels
                .iter()
                .map(|&k| {
                    I8Matrix::quantize_for(k, &w, rows, cols)
                        .expect("q")
                        .matmul(&x, m)
                })
                .collect();
            for (k, r) in kernels.iter().zip(&results) {
                assert_eq!(
                    r, &results[0],
                    "{k:?} against the portable kernel, {m} rows"
                );
            }
            if let Some(r) = results.first().filter(|_| m >= 3) {
                assert!(r[2 * rows..3 * rows].iter().all(|&v| v == 0.0));
            }
        }
    }

    #[test]
    fn bias_and_residual_added_as_written_equal_adding_them_after() {
        let (rows, cols) = (45, 96);
        let w = values(rows * cols, 21);
        let bias = values(rows, 4);
        for kernel in kernels_here() {
            let q = I8Matrix::quantize_for(kernel, &w, rows, cols).expect("q");
            for m in [3, 101] {
                let x = values(m * cols, 8);
                let residual = values(m * rows, 9);
                let plain = q.matmul(&x, m);
                let want: Vec<f32> = plain
                    .iter()
                    .zip(&residual)
                    .enumerate()
                    .map(|(i, (&v, &r))| r + (v + bias[i % rows]))
                    .collect();
                let got = q.matmul_add(&x, m, Some(&bias), Some(&residual));
                assert_eq!(got, want, "{kernel:?}, {m} rows");
                let biased: Vec<f32> = plain
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| v + bias[i % rows])
                    .collect();
                assert_eq!(q.matmul_add(&x, m, Some(&bias), None), biased, "{kernel:?}");
                // Through tensors, with the shapes checked.
                let dev = Device::Cpu;
                let xt = Tensor::from_vec(x.clone(), (m, cols), &dev).expect("x");
                let bt = Tensor::from_vec(bias.clone(), rows, &dev).expect("b");
                let rt = Tensor::from_vec(residual.clone(), (m, rows), &dev).expect("r");
                let t = q.forward_add(&xt, &bt, Some(&rt)).expect("forward_add");
                assert_eq!(
                    t.flatten_all().and_then(|t| t.to_vec1::<f32>()).expect("v"),
                    want
                );
                let short = Tensor::from_vec(bias[..rows - 1].to_vec(), rows - 1, &dev).expect("b");
                assert!(q.forward_add(&xt, &short, None).is_err());
                let wrong = rt.narrow(0, 0, m - 1).expect("r");
                assert!(q.forward_add(&xt, &bt, Some(&wrong)).is_err());
            }
        }
    }

    #[test]
    fn a_rows_result_does_not_depend_on_the_other_rows_and_bad_shapes_are_refused() {
        let (rows, cols) = (203, 160);
        for kernel in kernels_here() {
            let q =
                I8Matrix::quantize_for(kernel, &values(rows * cols, 11), rows, cols).expect("q");
            let x = values(70 * cols, 5);
            for m in [7, 70] {
                let all = q.matmul(&x, m);
                for r in 0..m {
                    let alone = q.matmul(&x[r * cols..(r + 1) * cols], 1);
                    assert_eq!(alone, all[r * rows..(r + 1) * rows], "{kernel:?} row {r}");
                }
            }
        }
        let q = I8Matrix::quantize_anywhere(&values(rows * cols, 11), rows, cols).expect("q");
        assert_eq!(q.is_fast(), best_kernel().is_some());
        assert!(
            I8Matrix::quantize_anywhere(&values(4 * 40, 1), 4, 40).is_none(),
            "40 columns"
        );
        let t = Tensor::zeros((2, 100), candle_core::DType::F32, &Device::Cpu).expect("t");
        assert!(q.forward(&t).is_err(), "100 values against 160 columns");
        let z = q.matmul(&vec![0f32; 2 * cols], 2);
        assert!(z.iter().all(|&v| v == 0.0), "zero rows give zeros");
    }
}
