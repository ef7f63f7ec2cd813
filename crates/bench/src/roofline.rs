//! `situate-bench roofline`: the machine's limits measured by small loops, and situate's
//! int8 product against them (BENCHMARKS.md, "Roofline"; issue 61).
//!
//! The peaks are what the instructions can do here, not a data sheet's figures: each loop
//! keeps enough independent chains of one instruction sequence in registers that the
//! core's ports, not latencies, bound it, and runs on one thread and on every thread.
//! - f32 FMA: `vfmadd` on 256-bit (AVX2) and 512-bit (AVX-512) registers, 2 flops per lane.
//! - int8, AVX-512 VNNI: `vpdpbusd` on 512-bit registers (64 byte products each).
//! - int8, AVX2, exact: the sequence situate's AVX2 kernel runs per 32 byte products
//!   (`sign`, `maddubs`, `madd`, add: `situate_kernels::i8`).
//! - int8, AVX2, saturating: `maddubs`, `madd`, add, the sequence of ONNX Runtime's AVX2
//!   kernels (whose 16-bit sums can saturate), for comparison.
//! - memory: every thread sums its share of a 512 MiB buffer (read bandwidth, from DRAM).
//!
//! Then `situate_kernels::i8`'s product at the level chosen for the process (`SITUATE_CPU`
//! forces a lower one) on MiniLM's four matrix shapes: a batch (1,024 rows, weights in
//! cache; the best of eight products) against the int8 peak, and a query (12 rows, six
//! layers' matrices in turn, as a forward pass reads them) against the memory bandwidth.

use anyhow::Result;
use situate_core::cpu::{self, Level};
use situate_kernels::i8::I8Matrix;
use std::process::ExitCode;
use std::time::Instant;

/// Runs `f(thread)` on `threads` threads at once and returns the wall time in seconds.
fn timed(threads: usize, f: impl Fn(usize) + Sync) -> f64 {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let f = &f;
            s.spawn(move || f(t));
        }
    });
    start.elapsed().as_secs_f64()
}

/// The peak loops. Each returns the operations it did (flops, or int8 ops: 2 per byte
/// product, the unit ONNX Runtime's and the literature's int8 rates use).
#[cfg(target_arch = "x86_64")]
mod peaks {
    use std::arch::x86_64::*;
    use std::hint::black_box;

    /// Independent chains per loop: more than the latency × ports of any instruction here.
    const CHAINS: usize = 12;

    #[target_feature(enable = "avx2,fma")]
    pub fn fma256(iters: usize) -> f64 {
        let (a, b) = (
            _mm256_set1_ps(black_box(0.999)),
            _mm256_set1_ps(black_box(1e-4)),
        );
        let mut acc = [_mm256_set1_ps(1.0); CHAINS];
        for _ in 0..iters {
            for acc in &mut acc {
                *acc = _mm256_fmadd_ps(*acc, a, b);
            }
        }
        black_box(acc);
        (iters * CHAINS * 8 * 2) as f64
    }

    #[target_feature(enable = "avx512f")]
    pub fn fma512(iters: usize) -> f64 {
        let (a, b) = (
            _mm512_set1_ps(black_box(0.999)),
            _mm512_set1_ps(black_box(1e-4)),
        );
        let mut acc = [_mm512_set1_ps(1.0); CHAINS];
        for _ in 0..iters {
            for acc in &mut acc {
                *acc = _mm512_fmadd_ps(*acc, a, b);
            }
        }
        black_box(acc);
        (iters * CHAINS * 16 * 2) as f64
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub fn vnni512(iters: usize) -> f64 {
        let (u, w) = (
            _mm512_set1_epi8(black_box(3)),
            _mm512_set1_epi8(black_box(-2)),
        );
        let mut acc = [_mm512_setzero_si512(); CHAINS];
        for _ in 0..iters {
            for acc in &mut acc {
                *acc = _mm512_dpbusd_epi32(*acc, u, w);
            }
        }
        black_box(acc);
        (iters * CHAINS * 64 * 2) as f64
    }

    /// `EXACT`: with the `sign` situate's kernel runs; without, ONNX Runtime's sequence.
    /// Each chain has bytes of its own (`x`): with the same operands, the compiler would
    /// compute one product per step for every chain. The weights change every step (one
    /// add per six chains' products), so no product can be hoisted out of the loop.
    #[target_feature(enable = "avx2,fma")]
    pub fn maddubs256<const EXACT: bool>(iters: usize) -> f64 {
        const C: usize = 6;
        let x: [__m256i; C] = std::array::from_fn(|c| _mm256_set1_epi8(black_box(c as i8 + 1)));
        let (mut w, step) = (
            _mm256_set1_epi8(black_box(-2)),
            _mm256_set1_epi8(black_box(1)),
        );
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_si256(); C];
        for _ in 0..iters {
            w = _mm256_add_epi8(w, step);
            for (acc, &x) in acc.iter_mut().zip(&x) {
                // Exact: |y| by y's sign on the weights (x stands for both: the data do
                // not change the instructions' cost). Saturating: the bytes as they are.
                let p = if EXACT {
                    _mm256_maddubs_epi16(w, _mm256_sign_epi8(w, x))
                } else {
                    _mm256_maddubs_epi16(x, w)
                };
                *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(p, ones));
            }
        }
        black_box(acc);
        (iters * C * 32 * 2) as f64
    }
}

/// One peak: its name, the level it needs and its loop.
type Peak = (&'static str, Level, fn(usize) -> f64);

/// The peaks this CPU runs.
fn peaks_here() -> Vec<Peak> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY (each wrapper): called only where `runs_here` found the level's
        // instructions (filtered below).
        let all: Vec<Peak> = vec![
            ("f32 FMA, 256-bit (GFLOP/s)", Level::Avx2, |n| unsafe {
                peaks::fma256(n)
            }),
            ("f32 FMA, 512-bit (GFLOP/s)", Level::Avx512, |n| unsafe {
                peaks::fma512(n)
            }),
            (
                "int8 VNNI, 512-bit (Gop/s)",
                Level::Avx512Vnni,
                |n| unsafe { peaks::vnni512(n) },
            ),
            (
                "int8 AVX2 exact: sign+maddubs+madd+add (Gop/s)",
                Level::Avx2,
                |n| unsafe { peaks::maddubs256::<true>(n) },
            ),
            (
                "int8 AVX2 saturating: maddubs+madd+add (Gop/s)",
                Level::Avx2,
                |n| unsafe { peaks::maddubs256::<false>(n) },
            ),
        ];
        all.into_iter().filter(|p| p.1.runs_here()).collect()
    }
    #[cfg(not(target_arch = "x86_64"))]
    Vec::new()
}

/// Read bandwidth in GB/s: `threads` threads each summing its share of `bytes`.
fn bandwidth(threads: usize, bytes: usize) -> f64 {
    let buf: Vec<u64> = (0..bytes / 8).map(|i| i as u64).collect();
    let share = buf.len().div_ceil(threads);
    let mut best = 0f64;
    for _ in 0..3 {
        let secs = timed(threads, |t| {
            let part = &buf[(t * share).min(buf.len())..((t + 1) * share).min(buf.len())];
            // A wrapping sum: the loop vectorises and is bound by the loads.
            std::hint::black_box(part.iter().fold(0u64, |a, &b| a.wrapping_add(b)));
        });
        best = best.max(bytes as f64 / secs / 1e9);
    }
    best
}

/// MiniLM's matrices (out × in): attention's three projections together, its output,
/// and the feed-forward's two.
const SHAPES: [(usize, usize); 4] = [(1152, 384), (384, 384), (1536, 384), (384, 1536)];

fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919 + seed * 104_729) % 1999) as f32 / 1000.0 - 1.0)
        .collect()
}

pub fn roofline(seconds: f64) -> Result<ExitCode> {
    let threads = rayon::current_num_threads().max(1);
    let level = cpu::chosen();
    println!(
        "roofline: kernels at {level} (this CPU runs {}); {threads} threads",
        cpu::levels_here()
            .iter()
            .map(|l| l.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (name, _, f) in peaks_here() {
        // Calibrate the iterations to about `seconds` on one thread.
        let mut iters = 1 << 16;
        loop {
            let t = timed(1, |_| {
                std::hint::black_box(f(iters));
            });
            if t > seconds / 4.0 || iters > 1 << 34 {
                iters = ((iters as f64) * seconds / t.max(1e-9)) as usize;
                break;
            }
            iters *= 4;
        }
        let per_iter = f(1);
        let run = |n: usize| {
            timed(n, |_| {
                std::hint::black_box(f(iters));
            })
            .max(1e-9)
        };
        let one = per_iter * iters as f64 / run(1) / 1e9;
        let all = per_iter * iters as f64 * threads as f64 / run(threads) / 1e9;
        println!("peak {name}: {one:.1} on 1 thread, {all:.1} on {threads}");
    }
    let bw1 = bandwidth(1, 512 << 20);
    let bw = bandwidth(threads, 512 << 20);
    println!("peak memory read (GB/s): {bw1:.1} on 1 thread, {bw:.1} on {threads}");

    // The int8 product at the chosen level.
    let mut total_ops = 0f64;
    let mut batch_secs = 0f64;
    for (rows, cols) in SHAPES {
        let m = 1024;
        let w = values(rows * cols, rows);
        let Some(q) = I8Matrix::quantize(&w, rows, cols) else {
            println!("int8 product: no vectorised kernel at {level}");
            return Ok(ExitCode::SUCCESS);
        };
        let x = values(m * cols, cols);
        std::hint::black_box(q.matmul(&x, m));
        // The best of eight (the machines here are shared: their pace varies).
        let secs = (0..8)
            .map(|_| {
                let start = Instant::now();
                std::hint::black_box(q.matmul(&x, m));
                start.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min);
        let ops = 2.0 * (rows * cols * m) as f64;
        total_ops += ops;
        batch_secs += secs;
        println!(
            "int8 product {rows}x{cols}, {m} rows: {:.0} us, {:.1} Gop/s",
            secs * 1e6,
            ops / secs / 1e9
        );
    }
    println!(
        "int8 product, a batch (MiniLM's four shapes, 1,024 rows each): {:.1} Gop/s",
        total_ops / batch_secs / 1e9
    );
    // A query: six layers' matrices (each its own weights, as in a forward pass, so they
    // do not all stay in a core's cache as a single matrix would), 12 rows each.
    let layers: Vec<Vec<I8Matrix>> = (0..6)
        .map(|l| {
            SHAPES
                .iter()
                .filter_map(|&(r, c)| I8Matrix::quantize(&values(r * c, l * 7 + r), r, c))
                .collect()
        })
        .collect();
    let bytes: usize = SHAPES.iter().map(|(r, c)| r * c).sum::<usize>() * 6;
    let xs: Vec<Vec<f32>> = SHAPES.iter().map(|&(_, c)| values(12 * c, c)).collect();
    let mut times = Vec::new();
    for _ in 0..200 {
        let start = Instant::now();
        for layer in &layers {
            for (q, x) in layer.iter().zip(&xs) {
                std::hint::black_box(q.matmul(x, 12));
            }
        }
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let p50 = times[times.len() / 2];
    println!(
        "int8 product, a query (12 rows by six layers' matrices, {:.1} MB of weights): p50 {:.0} us, {:.1} GB/s of weights",
        bytes as f64 / 1e6,
        p50 * 1e6,
        bytes as f64 / p50 / 1e9
    );
    Ok(ExitCode::SUCCESS)
}
