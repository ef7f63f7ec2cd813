//! The decoder-only transformer of `llama`, `qwen2` and `qwen3` GGUF files, with a KV cache
//! that is allocated once and can be cut back to a prefix.
//!
//! Why our own forward pass rather than candle-transformers' models: those append to their
//! KV cache with `Tensor::cat` (a copy of the whole cache per token and layer) and copy the
//! key/value heads `n_head / n_kv_head` times for grouped-query attention, so a token at
//! position 4,000 moved about 1.5 GB; decoding ran at 9 tokens/s on SmolLM2-135M. Here the
//! cache is a buffer per layer written in place (`slice_set`), the attention reads it through
//! a view (no copy), and the query heads of a group are stacked as rows against their one
//! key/value head instead of repeating that head. Cutting the cache back
//! ([`Decoder::truncate`]) is what reuses a document's prefix for every chunk: no copy of
//! the cache at all. The layers themselves are situate-kernels' quantized matrix products
//! (`situate_kernels::q8`, where AVX2 runs) and vectorised softmax, and candle's kernels
//! (RMS norm, RoPE, gemm, and its quantized products elsewhere).
//!
//! The three architectures differ only in: biases on the q/k/v projections (qwen2), an RMS
//! norm of each query and key head before RoPE (qwen3), and the RoPE layout (llama pairs
//! neighbouring dimensions; qwen pairs dimension i with i + d/2), as llama.cpp does.

use candle_core::quantized::{GgmlDType, QMatMul, QTensor, gguf_file};
use candle_core::{DType, Device, Module, Result, Tensor, bail};
use situate_kernels::q8::Q8Matrix;

/// Models whose matrices take at most this many bytes as f32 keep an f32 copy of them for
/// reading prompts: candle multiplies many rows by most quantized matrices one dot product
/// at a time, and by an f32 matrix with gemm, which is several times faster. SmolLM2-135M
/// needs 0.5 GB for it. Generating (a few rows at a time) reads the quantized matrices, a
/// quarter of the memory traffic.
const DENSE_PREFILL_BYTES: usize = 1 << 30;

/// Prompt rows from which a matrix without an f32 copy and without a fast many-row kernel
/// is expanded to f32 for the pass (expanding all of Qwen2.5-0.5B's takes ~0.45 s).
const EXPAND_ROWS: usize = 64;

/// A weight matrix: quantized as stored, with an optional f32 copy for many rows at once.
struct Linear {
    product: Product,
    dense: Option<QMatMul>,
    /// candle's quantized product of many rows has a kernel that decodes each weight block
    /// once for several rows (its repacked Q4K/Q6K tiles): no need for f32.
    fast_rows: bool,
    /// candle multiplies one row by this matrix with another kernel than several rows
    /// (Q6K: a dot product per column instead of its tiles), so a lone row is run as two:
    /// a row's result is then the same whatever else its pass holds.
    pad_lone_row: bool,
}

/// How a quantized matrix multiplies rows.
enum Product {
    /// candle's quantized product (CPUs without AVX2, and formats situate-kernels does not
    /// take).
    Candle(QMatMul),
    /// Q8_0, Q4_0, Q5_0, Q4_K or Q6_K as stored (or Q8_0 widened from Q4_1/Q5_1 at load) on
    /// a CPU with AVX2: situate-kernels' product (`situate_kernels::q8`), for prompts and
    /// decoding alike, the same values on every CPU level and for any number of rows.
    Q8(Q8Matrix),
}

impl Linear {
    fn new(t: QTensor, dense: bool, device: &Device) -> Result<Self> {
        let dense = if dense {
            Some(QMatMul::Tensor(deq(&t, device)?))
        } else {
            None
        };
        let fast_rows = match t.shape().dims() {
            [n, k] => {
                matches!(t.dtype(), GgmlDType::Q4K | GgmlDType::Q6K)
                    && k.is_multiple_of(256)
                    && n.is_multiple_of(16)
            }
            _ => false,
        };
        let pad_lone_row = fast_rows && t.dtype() == GgmlDType::Q6K;
        let product = match Q8Matrix::from_qtensor(&t)? {
            Some(q) => Product::Q8(q),
            None => Product::Candle(QMatMul::from_qtensor(t)?),
        };
        Ok(Linear {
            product,
            dense,
            fast_rows,
            pad_lone_row,
        })
    }

    /// `x`: (rows, in) to (rows, out). With `dense` (a prompt pass), the f32 copy if there
    /// is one; a Q8_0, Q4_0, Q5_0, Q4_K or Q6_K matrix through situate-kernels' product
    /// (prompts and decoding alike: BENCHMARKS.md, "Local generation speed");
    /// another quantization expanded to f32 for a prompt pass when it has no fast many-row
    /// kernel in candle and the pass has [`EXPAND_ROWS`] rows or more; otherwise candle's
    /// quantized product. Which product runs depends on the kind of pass and its number of
    /// rows (a reply's prompt is read in passes of its own), never on what the other rows
    /// hold.
    fn forward(&self, x: &Tensor, dense: bool) -> Result<Tensor> {
        let rows = x.dims()[0];
        let many = dense && rows >= EXPAND_ROWS;
        match (&self.dense, &self.product) {
            (Some(d), _) if dense => d.forward(x),
            (_, Product::Q8(q)) => q.forward(x),
            (None, Product::Candle(QMatMul::QTensor(q))) if many && !self.fast_rows => {
                x.matmul(&expand(q, x.device())?.t()?)
            }
            (_, Product::Candle(m)) if self.pad_lone_row && rows == 1 => {
                m.forward(&Tensor::cat(&[x, x], 0)?)?.narrow(0, 0, 1)
            }
            (_, Product::Candle(m)) => m.forward(x),
        }
    }
}

/// A quantized matrix as f32, its rows split between the cores (candle's `dequantize`
/// runs on one: 0.9 s of every 6.6 s pass of 512 rows on Qwen2.5-0.5B). Block types
/// without a case here go through candle's.
fn expand(q: &QTensor, device: &Device) -> Result<Tensor> {
    use candle_core::quantized::k_quants::{
        BlockQ2K, BlockQ3K, BlockQ4_0, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8_0, BlockQ8K, GgmlType,
    };
    fn split<T: GgmlType>(bytes: &[u8], rows: usize, cols: usize) -> Option<Vec<f32>> {
        let size = std::mem::size_of::<T>();
        if !cols.is_multiple_of(T::BLCK_SIZE)
            || bytes.len() != rows * (cols / T::BLCK_SIZE) * size
            || !(bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>())
        {
            return None;
        }
        // SAFETY: candle stores a quantized tensor as a Vec of its block type; the length
        // and alignment were checked above, and every block type is plain old data.
        let blocks: &[T] =
            unsafe { std::slice::from_raw_parts(bytes.as_ptr() as *const T, bytes.len() / size) };
        let per_row = cols / T::BLCK_SIZE;
        let mut out = vec![0f32; rows * cols];
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(rows.max(1));
        let rows_each = rows.div_ceil(threads);
        std::thread::scope(|scope| {
            for (part, ys) in out.chunks_mut(rows_each * cols).enumerate() {
                let first = part * rows_each;
                let n = ys.len() / cols;
                let xs = &blocks[first * per_row..(first + n) * per_row];
                scope.spawn(move || T::to_float(xs, ys));
            }
        });
        Some(out)
    }
    let (rows, cols) = q.shape().dims2()?;
    let data = q.data()?;
    let out = match q.dtype() {
        GgmlDType::Q8_0 => split::<BlockQ8_0>(&data, rows, cols),
        GgmlDType::Q4_0 => split::<BlockQ4_0>(&data, rows, cols),
        GgmlDType::Q2K => split::<BlockQ2K>(&data, rows, cols),
        GgmlDType::Q3K => split::<BlockQ3K>(&data, rows, cols),
        GgmlDType::Q4K => split::<BlockQ4K>(&data, rows, cols),
        GgmlDType::Q5K => split::<BlockQ5K>(&data, rows, cols),
        GgmlDType::Q6K => split::<BlockQ6K>(&data, rows, cols),
        GgmlDType::Q8K => split::<BlockQ8K>(&data, rows, cols),
        _ => None,
    };
    match out {
        Some(v) => Tensor::from_vec(v, (rows, cols), device),
        None => deq(q, device),
    }
}

/// An additive causal mask over `rows` new rows and `keys` keys: row `i` sees the keys up to
/// `offset + i` (the `offset` keys before the rows, and the rows up to itself).
fn causal_mask(rows: usize, keys: usize, offset: usize, device: &Device) -> Result<Tensor> {
    let m: Vec<f32> = (0..rows)
        .flat_map(|i| {
            (0..keys).map(move |j| {
                if j <= offset + i {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            })
        })
        .collect();
    Tensor::from_vec(m, (rows, keys), device)
}

/// One block's weights.
struct Layer {
    attn_norm: Tensor,
    wq: Linear,
    wk: Linear,
    wv: Linear,
    bias: Option<(Tensor, Tensor, Tensor)>,
    qk_norm: Option<(Tensor, Tensor)>,
    wo: Linear,
    ffn_norm: Tensor,
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// A llama / qwen2 / qwen3 model and its KV cache.
pub struct Decoder {
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    output: Linear,
    eps: f64,
    n_head: usize,
    n_kv: usize,
    head_dim: usize,
    neox: bool,
    cos: Tensor,
    sin: Tensor,
    /// Per layer, keys and values: `(n_kv, capacity, head_dim)` buffers.
    cache: Vec<(Tensor, Tensor)>,
    capacity: usize,
    /// Positions held in the cache.
    len: usize,
    /// Sequences continuing the cached positions side by side ([`Decoder::fork`]).
    forks: Option<Forks>,
    device: Device,
}

/// Sequences that continue the cached prefix side by side, each in a region of the cache of
/// its own: sequence `s` holds `lens[s]` tokens from cache slot `prefix + s * room` on, at
/// positions `prefix..` as if it were alone after the prefix.
struct Forks {
    room: usize,
    lens: Vec<usize>,
}

/// Rows of one fork in a forward pass: rows `row..row + m` of the pass continue a sequence
/// whose region starts at cache slot `slot` and holds `held` tokens.
struct Segment {
    row: usize,
    m: usize,
    slot: usize,
    held: usize,
}

/// What the rows of a forward pass see.
enum Plan<'a> {
    /// They continue the cache in place; each sees the keys before it, or what `mask` (over
    /// rows × keys) allows.
    Straight(Option<&'a Tensor>),
    /// They continue forks: each segment sees the first `prefix` keys and its own region.
    Forks {
        prefix: usize,
        segments: &'a [Segment],
    },
}

/// The architectures this module runs.
pub fn supports(arch: &str) -> bool {
    matches!(arch, "llama" | "qwen2" | "qwen3")
}

fn deq(t: &QTensor, device: &Device) -> Result<Tensor> {
    t.dequantize(device)?.to_dtype(DType::F32)
}

impl Decoder {
    // Long: one tensor after another from the GGUF file, in the model's order; each is
    // checked against the architecture's sizes read before it.
    /// Reads the weights of `ct` (architecture `arch`); `context` is the longest sequence.
    pub fn from_gguf<R: std::io::Read + std::io::Seek>(
        ct: &gguf_file::Content,
        reader: &mut R,
        arch: &str,
        context: usize,
        device: &Device,
    ) -> Result<Self> {
        if !supports(arch) {
            bail!("architecture `{arch}` is not a llama/qwen2/qwen3 decoder");
        }
        let md = |k: &str| {
            ct.metadata
                .get(&format!("{arch}.{k}"))
                .ok_or_else(|| candle_core::Error::Msg(format!("no {arch}.{k} in the metadata")))
        };
        let n_head = md("attention.head_count")?.to_u32()? as usize;
        let n_kv = md("attention.head_count_kv")?.to_u32()? as usize;
        let hidden = md("embedding_length")?.to_u32()? as usize;
        let blocks = md("block_count")?.to_u32()? as usize;
        let eps = md("attention.layer_norm_rms_epsilon")?.to_f32()? as f64;
        let head_dim = match md("attention.key_length") {
            Ok(v) => v.to_u32()? as usize,
            Err(_) => hidden / n_head.max(1),
        };
        if n_head == 0 || n_kv == 0 || !n_head.is_multiple_of(n_kv) || !head_dim.is_multiple_of(2) {
            bail!(
                "unusable attention shape: {n_head} heads, {n_kv} key/value heads, {head_dim} dims"
            );
        }
        let rope_dim = match md("rope.dimension_count") {
            Ok(v) => v.to_u32()? as usize,
            Err(_) => head_dim,
        };
        if rope_dim != head_dim {
            bail!("partial rotary embeddings ({rope_dim} of {head_dim} dims) are not supported");
        }
        let base = md("rope.freq_base")
            .and_then(|v| v.to_f32())
            .unwrap_or(10_000.0);
        let inv: Vec<f32> = (0..head_dim)
            .step_by(2)
            .map(|i| 1.0 / base.powf(i as f32 / head_dim as f32))
            .collect();
        let inv = Tensor::new(inv.as_slice(), device)?.reshape((1, head_dim / 2))?;
        let positions = Tensor::arange(0u32, context.max(1) as u32, device)?
            .to_dtype(DType::F32)?
            .reshape((context.max(1), 1))?;
        let angles = positions.matmul(&inv)?;
        let (cos, sin) = (angles.cos()?, angles.sin()?);

        let mut get = |name: &str| ct.tensor(reader, name, device);
        let embed = deq(&get("token_embd.weight")?, device)?;
        let output = match get("output.weight") {
            Ok(t) => Linear::new(t, false, device)?,
            // Tied embeddings: the table again, quantized as stored.
            Err(_) => Linear::new(get("token_embd.weight")?, false, device)?,
        };
        let norm = deq(&get("output_norm.weight")?, device)?;
        let matrices: usize = ct
            .tensor_infos
            .iter()
            .filter(|(name, _)| name.starts_with("blk.") && name.ends_with(".weight"))
            .map(|(_, t)| t.shape.elem_count() * 4)
            .sum();
        let dense = matrices <= DENSE_PREFILL_BYTES;
        let mut layers = Vec::with_capacity(blocks);
        for i in 0..blocks {
            let mut t = |part: &str| get(&format!("blk.{i}.{part}"));
            let q = |t: QTensor| Linear::new(t, dense, device);
            let bias = match (t("attn_q.bias"), t("attn_k.bias"), t("attn_v.bias")) {
                (Ok(bq), Ok(bk), Ok(bv)) => {
                    Some((deq(&bq, device)?, deq(&bk, device)?, deq(&bv, device)?))
                }
                _ => None,
            };
            let qk_norm = match (t("attn_q_norm.weight"), t("attn_k_norm.weight")) {
                (Ok(nq), Ok(nk)) => Some((deq(&nq, device)?, deq(&nk, device)?)),
                _ => None,
            };
            layers.push(Layer {
                attn_norm: deq(&t("attn_norm.weight")?, device)?,
                wq: q(t("attn_q.weight")?)?,
                wk: q(t("attn_k.weight")?)?,
                wv: q(t("attn_v.weight")?)?,
                bias,
                qk_norm,
                wo: q(t("attn_output.weight")?)?,
                ffn_norm: deq(&t("ffn_norm.weight")?, device)?,
                gate: q(t("ffn_gate.weight")?)?,
                up: q(t("ffn_up.weight")?)?,
                down: q(t("ffn_down.weight")?)?,
            });
        }
        Ok(Decoder {
            embed,
            layers,
            norm,
            output,
            eps,
            n_head,
            n_kv,
            head_dim,
            neox: arch != "llama",
            cos,
            sin,
            cache: Vec::new(),
            capacity: 0,
            len: 0,
            forks: None,
            device: device.clone(),
        })
    }

    /// Positions held in the KV cache.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the KV cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets every position from `len` on, and any forks (the buffers stay allocated).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
        self.forks = None;
    }

    /// Starts `count` sequences that continue the cached positions side by side, each with
    /// room for `room` tokens of its own ([`Decoder::forward_forks`]); any earlier forks are
    /// dropped. The cached positions are shared: they are read, never copied.
    pub fn fork(&mut self, count: usize, room: usize) -> Result<()> {
        if count == 0 || room == 0 {
            bail!("a fork needs at least one sequence and room for one token");
        }
        let needed = self.len + count * room;
        if needed > self.context() {
            bail!(
                "{needed} positions ({count} sequences of {room} after {}) exceed the model's {} ",
                self.len,
                self.context()
            );
        }
        self.reserve(needed)?;
        self.forks = Some(Forks {
            room,
            lens: vec![0; count],
        });
        Ok(())
    }

    /// Tokens fork `seq` holds, if it exists.
    pub fn fork_len(&self, seq: usize) -> Option<usize> {
        self.forks.as_ref().and_then(|f| f.lens.get(seq).copied())
    }

    /// Runs new tokens for several forks in one pass (`steps`: a fork and its tokens, each
    /// fork at most once) and returns the logits after each step's last token,
    /// `(steps, vocab)`. Every fork sees the shared prefix and its own tokens only, at the
    /// positions it would have alone, so its logits are those of [`Decoder::forward`] on the
    /// same sequence; the matrix products are shared by all the rows (a weight is read once
    /// per pass for every sequence, which is what makes decoding several replies at once
    /// faster than one after the other).
    ///
    /// `prompt` says whether the tokens are a prompt being read (the matrix products may
    /// use f32 matrices) or generated tokens (the quantized matrices). In a pass of
    /// generated tokens a row's result does not depend on the other rows (the quantized
    /// products treat every row alike; a lone row through a Q6K matrix is run as two, see
    /// `Linear`), so replies decoded side by side are the replies decoded one after the
    /// other when each reply's prompt is read in passes of its own (an f32 product of many
    /// rows can depend on their number).
    pub fn forward_forks(&mut self, steps: &[(usize, &[u32])], prompt: bool) -> Result<Tensor> {
        let prefix = self.len;
        let Some(forks) = &self.forks else {
            bail!("no forks: call `fork` first");
        };
        if steps.is_empty() {
            bail!("no tokens to run");
        }
        let mut seen = vec![false; forks.lens.len()];
        let mut segments = Vec::with_capacity(steps.len());
        let mut positions = Vec::new();
        let mut tokens = Vec::new();
        let mut ends = Vec::with_capacity(steps.len());
        for &(seq, toks) in steps {
            let Some(&held) = forks.lens.get(seq) else {
                bail!("no fork {seq} (there are {})", forks.lens.len());
            };
            if std::mem::replace(&mut seen[seq], true) {
                bail!("fork {seq} appears twice in one pass");
            }
            if toks.is_empty() {
                bail!("no tokens to run for fork {seq}");
            }
            if held + toks.len() > forks.room {
                bail!(
                    "fork {seq} would hold {} tokens, past its room of {}",
                    held + toks.len(),
                    forks.room
                );
            }
            segments.push(Segment {
                row: tokens.len(),
                m: toks.len(),
                slot: prefix + seq * forks.room,
                held,
            });
            positions.extend((0..toks.len()).map(|j| (prefix + held + j) as u32));
            tokens.extend_from_slice(toks);
            ends.push(tokens.len() - 1);
        }
        let positions = Tensor::new(positions.as_slice(), &self.device)?;
        let cos = self.cos.index_select(&positions, 0)?;
        let sin = self.sin.index_select(&positions, 0)?;
        let logits = self.run(
            &tokens,
            &cos,
            &sin,
            Plan::Forks {
                prefix,
                segments: &segments,
            },
            &ends,
            prompt,
        )?;
        if let Some(forks) = &mut self.forks {
            for &(seq, toks) in steps {
                forks.lens[seq] += toks.len();
            }
        }
        Ok(logits)
    }

    /// The longest sequence the rotary tables cover.
    pub fn context(&self) -> usize {
        self.cos.dims()[0]
    }

    /// Makes room for `needed` positions, keeping what the cache holds.
    fn reserve(&mut self, needed: usize) -> Result<()> {
        if needed <= self.capacity {
            return Ok(());
        }
        let capacity = needed
            .max(self.capacity * 2)
            .min(self.context())
            .max(needed);
        let mut cache = Vec::with_capacity(self.layers.len());
        for i in 0..self.layers.len() {
            let k = Tensor::zeros(
                (self.n_kv, capacity, self.head_dim),
                DType::F32,
                &self.device,
            )?;
            let v = Tensor::zeros(
                (self.n_kv, capacity, self.head_dim),
                DType::F32,
                &self.device,
            )?;
            if self.len > 0 {
                let (ok, ov) = &self.cache[i];
                k.slice_set(&ok.narrow(1, 0, self.len)?.contiguous()?, 1, 0)?;
                v.slice_set(&ov.narrow(1, 0, self.len)?.contiguous()?, 1, 0)?;
            }
            cache.push((k, v));
        }
        self.cache = cache;
        self.capacity = capacity;
        Ok(())
    }

    /// Runs `tokens`, which continue the cached sequence, and returns the logits after the
    /// last one (a `vocab`-long vector).
    pub fn forward(&mut self, tokens: &[u32]) -> Result<Tensor> {
        let n = tokens.len();
        if n == 0 {
            bail!("no tokens to run");
        }
        let pos = self.len;
        let total = pos + n;
        if total > self.context() {
            bail!("{total} positions exceed the model's {} ", self.context());
        }
        let cos = self.cos.narrow(0, pos, n)?;
        let sin = self.sin.narrow(0, pos, n)?;
        // Additive causal mask over (new rows, all keys); one row of keys per new token.
        let mask = if n > 1 {
            Some(causal_mask(n, total, pos, &self.device)?)
        } else {
            None
        };
        self.forks = None;
        let logits = self.run(
            tokens,
            &cos,
            &sin,
            Plan::Straight(mask.as_ref()),
            &[n - 1],
            n > 1,
        )?;
        self.len = total;
        logits.squeeze(0)
    }

    /// Runs several continuations ("branches") of the cached sequence in one pass and returns
    /// the logits after each branch's last token, `(branches, vocab)`. Each branch sees the
    /// cached positions and its own tokens only, at the positions it would have alone, so its
    /// logits are those of [`Decoder::forward`] on it after the same prefix. The cache keeps
    /// only what it held before.
    ///
    /// Why: a forward pass costs a fixed ~0.1 s on SmolLM2-135M however few its rows (gemm
    /// packs every f32 matrix, 0.4 GB, on each call: 8 tokens take 111 ms, 64 take 320 ms,
    /// 256 take 990 ms), so many short prompts sharing a prefix (an LLM judging passages
    /// for one query) run faster side by side.
    pub fn forward_branches(&mut self, branches: &[&[u32]]) -> Result<Tensor> {
        if branches.is_empty() || branches.iter().any(|b| b.is_empty()) {
            bail!("no tokens to run in a branch");
        }
        let pos = self.len;
        let n: usize = branches.iter().map(|b| b.len()).sum();
        let total = pos + n;
        // The branches sit side by side in the cache, so all of them must fit at once.
        if total > self.context() {
            bail!(
                "{total} positions (branches side by side) exceed the model's {} ",
                self.context()
            );
        }
        let mut positions = Vec::with_capacity(n);
        let mut mask = Vec::with_capacity(n * total);
        let mut ends = Vec::with_capacity(branches.len());
        let mut start = 0;
        for b in branches {
            for j in 0..b.len() {
                positions.push((pos + j) as u32);
                let (lo, hi) = (pos + start, pos + start + j);
                mask.extend((0..total).map(|t| {
                    if t < pos || (lo..=hi).contains(&t) {
                        0.0
                    } else {
                        f32::NEG_INFINITY
                    }
                }));
            }
            start += b.len();
            ends.push(start - 1);
        }
        let positions = Tensor::new(positions.as_slice(), &self.device)?;
        let cos = self.cos.index_select(&positions, 0)?;
        let sin = self.sin.index_select(&positions, 0)?;
        let mask = Tensor::from_vec(mask, (n, total), &self.device)?;
        let tokens: Vec<u32> = branches.iter().flat_map(|b| b.iter().copied()).collect();
        // `run` writes the branches' keys and values after the prefix; `len` stays at the
        // prefix, so they are forgotten.
        self.forks = None;
        self.run(
            &tokens,
            &cos,
            &sin,
            Plan::Straight(Some(&mask)),
            &ends,
            true,
        )
    }

    // Long: one forward pass, the layers' steps in order (norms, attention over the cache,
    // the feed-forward block), each on the tensors the step before made.
    /// The layers over `tokens`: rotary tables `cos`/`sin` (one row per token), where the
    /// rows' keys and values go and what they see (`plan`), and the logits of the rows
    /// `out`, `(out.len(), vocab)`.
    fn run(
        &mut self,
        tokens: &[u32],
        cos: &Tensor,
        sin: &Tensor,
        plan: Plan<'_>,
        out: &[usize],
        dense: bool,
    ) -> Result<Tensor> {
        let n = tokens.len();
        let pos = self.len;
        let total = pos + n;
        if let Plan::Straight(_) = plan {
            self.reserve(total)?;
        }
        let (h, kv, d) = (self.n_head, self.n_kv, self.head_dim);
        let group = h / kv;
        let scale = 1.0 / (d as f64).sqrt();
        let ids = Tensor::new(tokens, &self.device)?;
        let mut x = self.embed.index_select(&ids, 0)?;
        for (layer, (kc, vc)) in self.layers.iter().zip(&self.cache) {
            let a = candle_nn::ops::rms_norm(&x, &layer.attn_norm, self.eps as f32)?;
            let (mut q, mut k, mut v) = (
                layer.wq.forward(&a, dense)?,
                layer.wk.forward(&a, dense)?,
                layer.wv.forward(&a, dense)?,
            );
            if let Some((bq, bk, bv)) = &layer.bias {
                q = q.broadcast_add(bq)?;
                k = k.broadcast_add(bk)?;
                v = v.broadcast_add(bv)?;
            }
            let mut q = q.reshape((n, h, d))?;
            let mut k = k.reshape((n, kv, d))?;
            if let Some((nq, nk)) = &layer.qk_norm {
                q = candle_nn::ops::rms_norm(&q, nq, self.eps as f32)?;
                k = candle_nn::ops::rms_norm(&k, nk, self.eps as f32)?;
            }
            // (1, heads, n, d) for RoPE.
            let q = q.transpose(0, 1)?.contiguous()?.unsqueeze(0)?;
            let k = k.transpose(0, 1)?.contiguous()?.unsqueeze(0)?;
            let (q, k) = if self.neox {
                (
                    candle_nn::rotary_emb::rope(&q, cos, sin)?,
                    candle_nn::rotary_emb::rope(&k, cos, sin)?,
                )
            } else {
                (
                    candle_nn::rotary_emb::rope_i(&q, cos, sin)?,
                    candle_nn::rotary_emb::rope_i(&k, cos, sin)?,
                )
            };
            let k = k.squeeze(0)?;
            let v = v.reshape((n, kv, d))?.transpose(0, 1)?.contiguous()?;
            let y = match plan {
                Plan::Straight(mask) => {
                    kc.slice_set(&k, 1, pos)?;
                    vc.slice_set(&v, 1, pos)?;
                    let keys = kc.narrow(1, 0, total)?;
                    let values = vc.narrow(1, 0, total)?;
                    // The query heads of a group are rows against their one key/value head.
                    let q = q.reshape((kv, group * n, d))?;
                    let att = (q.matmul(&keys.t()?)? * scale)?;
                    let att = match mask {
                        Some(m) => att
                            .reshape((kv, group, n, total))?
                            .broadcast_add(m)?
                            .reshape((kv, group * n, total))?,
                        None => att,
                    };
                    let att = situate_kernels::softmax_last_dim(&att)?;
                    let y = att.matmul(&values)?; // (kv, group * n, d) = (h, n, d)
                    y.reshape((h, n, d))?.transpose(0, 1)?.reshape((n, h * d))?
                }
                Plan::Forks { prefix, segments } => {
                    let q = q.squeeze(0)?;
                    let mut ys = Vec::with_capacity(segments.len());
                    for s in segments {
                        let end = s.held + s.m;
                        kc.slice_set(&k.narrow(1, s.row, s.m)?.contiguous()?, 1, s.slot + s.held)?;
                        vc.slice_set(&v.narrow(1, s.row, s.m)?.contiguous()?, 1, s.slot + s.held)?;
                        let q =
                            q.narrow(1, s.row, s.m)?
                                .contiguous()?
                                .reshape((kv, group * s.m, d))?;
                        // Scores against the shared prefix and against the fork's own
                        // tokens, side by side: one softmax over both.
                        let own = (q.matmul(&kc.narrow(1, s.slot, end)?.t()?)? * scale)?;
                        let own = if s.m > 1 {
                            let m = causal_mask(s.m, end, s.held, &self.device)?;
                            own.reshape((kv, group, s.m, end))?
                                .broadcast_add(&m)?
                                .reshape((kv, group * s.m, end))?
                        } else {
                            own
                        };
                        let y = if prefix > 0 {
                            let shared = (q.matmul(&kc.narrow(1, 0, prefix)?.t()?)? * scale)?;
                            let att = situate_kernels::softmax_last_dim(&Tensor::cat(
                                &[&shared, &own],
                                2,
                            )?)?;
                            let shared = att
                                .narrow(2, 0, prefix)?
                                .contiguous()?
                                .matmul(&vc.narrow(1, 0, prefix)?)?;
                            let own = att
                                .narrow(2, prefix, end)?
                                .contiguous()?
                                .matmul(&vc.narrow(1, s.slot, end)?)?;
                            (shared + own)?
                        } else {
                            situate_kernels::softmax_last_dim(&own)?
                                .matmul(&vc.narrow(1, s.slot, end)?)?
                        };
                        ys.push(
                            y.reshape((h, s.m, d))?
                                .transpose(0, 1)?
                                .reshape((s.m, h * d))?,
                        );
                    }
                    Tensor::cat(&ys, 0)?
                }
            };
            x = (x + layer.wo.forward(&y, dense)?)?;
            let f = candle_nn::ops::rms_norm(&x, &layer.ffn_norm, self.eps as f32)?;
            let g = candle_nn::ops::silu(&layer.gate.forward(&f, dense)?)?;
            let u = layer.up.forward(&f, dense)?;
            x = (x + layer.down.forward(&(g * u)?, dense)?)?;
        }
        let rows: Vec<u32> = out.iter().map(|&r| r as u32).collect();
        let last = x.index_select(&Tensor::new(rows.as_slice(), &self.device)?, 0)?;
        let last = candle_nn::ops::rms_norm(&last, &self.norm, self.eps as f32)?;
        self.output.forward(&last, false)
    }
}

#[cfg(test)]
mod tests {
    //! The forward pass against candle-transformers' own models of the same files: tiny
    //! random llama / qwen2 / qwen3 GGUFs written here (the real SmolLM2 is compared in
    //! `crate::tests`). Prompts are read in two pieces, then tokens come one at a time, and
    //! the cache is cut back to the prefix and continued, as for a document's chunks.

    use super::*;
    use candle_core::quantized::GgmlDType;
    use candle_transformers::models::{quantized_llama, quantized_qwen2, quantized_qwen3};

    const VOCAB: usize = 64;
    const HIDDEN: usize = 64;
    const HEADS: usize = 4;
    const KV: usize = 2;
    const FF: usize = 96;
    const BLOCKS: usize = 2;

    /// A random model of `arch` as GGUF bytes (f32 tensors, so both sides read the same
    /// numbers).
    fn tiny(arch: &str, seed: u64) -> Vec<u8> {
        tiny_with(arch, seed, GgmlDType::F32, HIDDEN, FF)
    }

    /// [`tiny`] with the block matrices in `dtype` and other sizes.
    fn tiny_with(arch: &str, seed: u64, dtype: GgmlDType, hidden: usize, ff: usize) -> Vec<u8> {
        let dev = Device::Cpu;
        let mut state = seed;
        let mut rand = |shape: &[usize], scale: f32| {
            let n: usize = shape.iter().product();
            let v: Vec<f32> = (0..n)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 * scale
                })
                .collect();
            let t = Tensor::from_vec(v, shape, &dev).expect("tensor");
            QTensor::quantize(&t, GgmlDType::F32).expect("f32")
        };
        let d = hidden / HEADS;
        let mut tensors: Vec<(String, QTensor)> = vec![
            ("token_embd.weight".into(), rand(&[VOCAB, hidden], 1.0)),
            ("output_norm.weight".into(), rand(&[hidden], 1.0)),
            ("output.weight".into(), rand(&[VOCAB, hidden], 0.3)),
        ];
        for i in 0..BLOCKS {
            let mut add = |part: &str, shape: &[usize], scale: f32| {
                let t = rand(shape, scale);
                let t = if shape.len() == 2 && dtype != GgmlDType::F32 {
                    QTensor::quantize(&t.dequantize(&dev).expect("f32"), dtype).expect("quantizes")
                } else {
                    t
                };
                tensors.push((format!("blk.{i}.{part}"), t));
            };
            add("attn_norm.weight", &[hidden], 1.0);
            add("attn_q.weight", &[HEADS * d, hidden], 0.3);
            add("attn_k.weight", &[KV * d, hidden], 0.3);
            add("attn_v.weight", &[KV * d, hidden], 0.3);
            add("attn_output.weight", &[hidden, HEADS * d], 0.3);
            add("ffn_norm.weight", &[hidden], 1.0);
            add("ffn_gate.weight", &[ff, hidden], 0.3);
            add("ffn_up.weight", &[ff, hidden], 0.3);
            add("ffn_down.weight", &[hidden, ff], 0.3);
            if arch == "qwen2" {
                add("attn_q.bias", &[HEADS * d], 0.3);
                add("attn_k.bias", &[KV * d], 0.3);
                add("attn_v.bias", &[KV * d], 0.3);
            }
            if arch == "qwen3" {
                add("attn_q_norm.weight", &[d], 1.0);
                add("attn_k_norm.weight", &[d], 1.0);
            }
        }
        use gguf_file::Value;
        let meta: Vec<(String, Value)> = vec![
            ("general.architecture".into(), Value::String(arch.into())),
            // candle's qwen3 computes in f16 unless told the file is f32.
            ("general.dtype".into(), Value::U32(0)),
            (
                format!("{arch}.attention.head_count"),
                Value::U32(HEADS as u32),
            ),
            (
                format!("{arch}.attention.head_count_kv"),
                Value::U32(KV as u32),
            ),
            (format!("{arch}.attention.key_length"), Value::U32(d as u32)),
            (format!("{arch}.block_count"), Value::U32(BLOCKS as u32)),
            (
                format!("{arch}.embedding_length"),
                Value::U32(hidden as u32),
            ),
            (format!("{arch}.feed_forward_length"), Value::U32(ff as u32)),
            (format!("{arch}.context_length"), Value::U32(512)),
            (format!("{arch}.rope.dimension_count"), Value::U32(d as u32)),
            (format!("{arch}.rope.freq_base"), Value::F32(10_000.0)),
            (
                format!("{arch}.attention.layer_norm_rms_epsilon"),
                Value::F32(1e-6),
            ),
        ];
        let meta: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let tensors: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let mut out = std::io::Cursor::new(Vec::new());
        gguf_file::write(&mut out, &meta, &tensors).expect("writes");
        out.into_inner()
    }

    /// The model in `bytes` with a window of `context` positions.
    fn load(bytes: &[u8], arch: &str, context: usize) -> Decoder {
        let mut r = std::io::Cursor::new(bytes);
        let ct = gguf_file::Content::read(&mut r).expect("reads");
        Decoder::from_gguf(&ct, &mut r, arch, context, &Device::Cpu).expect("loads")
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        let a: Vec<f32> = a.flatten_all().and_then(|t| t.to_vec1()).expect("a");
        let b: Vec<f32> = b.flatten_all().and_then(|t| t.to_vec1()).expect("b");
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    }

    /// Runs the same token stream through both models and compares every set of logits.
    fn compare(arch: &str) {
        let bytes = tiny(arch, 7 + arch.len() as u64);
        let dev = Device::Cpu;
        let read = || {
            let mut r = std::io::Cursor::new(bytes.clone());
            let ct = gguf_file::Content::read(&mut r).expect("reads");
            (ct, r)
        };
        let (ct, mut r) = read();
        let mut ours = Decoder::from_gguf(&ct, &mut r, arch, 512, &dev).expect("ours");
        enum Theirs {
            L(quantized_llama::ModelWeights),
            Q2(quantized_qwen2::ModelWeights),
            Q3(quantized_qwen3::ModelWeights),
        }
        let fresh = || {
            let (ct, mut r) = read();
            match arch {
                "llama" => Theirs::L(
                    quantized_llama::ModelWeights::from_gguf(ct, &mut r, &dev).expect("llama"),
                ),
                "qwen2" => Theirs::Q2(
                    quantized_qwen2::ModelWeights::from_gguf(ct, &mut r, &dev).expect("qwen2"),
                ),
                _ => Theirs::Q3(
                    quantized_qwen3::ModelWeights::from_gguf(ct, &mut r, &dev).expect("qwen3"),
                ),
            }
        };
        let run = |m: &mut Theirs, tokens: &[u32], pos: usize| {
            let x = Tensor::new(tokens, &dev)
                .and_then(|t| t.unsqueeze(0))
                .expect("x");
            match m {
                Theirs::L(m) => m.forward(&x, pos),
                Theirs::Q2(m) => m.forward(&x, pos),
                Theirs::Q3(m) => m.forward(&x, pos),
            }
            .expect("their forward")
        };
        let prompt: Vec<u32> = (0..40).map(|i| (i * 7 % VOCAB) as u32).collect();
        let mut theirs = fresh();
        let mut worst: f32 = 0.0;
        // The prompt in two pieces (a rectangular mask for the second), then single tokens.
        worst = worst.max(max_diff(
            &ours.forward(&prompt[..24]).expect("ours"),
            &run(&mut theirs, &prompt[..24], 0),
        ));
        worst = worst.max(max_diff(
            &ours.forward(&prompt[24..]).expect("ours"),
            &run(&mut theirs, &prompt[24..], 24),
        ));
        for (i, t) in [5u32, 9, 13].iter().enumerate() {
            worst = worst.max(max_diff(
                &ours.forward(&[*t]).expect("ours"),
                &run(&mut theirs, &[*t], 40 + i),
            ));
        }
        // Cut back to the first piece and continue differently: the same as a fresh run.
        ours.truncate(24);
        assert_eq!(ours.len(), 24);
        let mut again = fresh();
        run(&mut again, &prompt[..24], 0);
        let other: Vec<u32> = (0..10).map(|i| (i * 5 % VOCAB) as u32).collect();
        worst = worst.max(max_diff(
            &ours.forward(&other).expect("ours"),
            &run(&mut again, &other, 24),
        ));
        worst = worst.max(max_diff(
            &ours.forward(&[3]).expect("ours"),
            &run(&mut again, &[3], 34),
        ));
        assert!(worst < 2e-3, "{arch}: logits differ by up to {worst}");
    }

    #[test]
    fn llama_matches_candle() {
        compare("llama");
    }

    #[test]
    fn qwen2_matches_candle() {
        compare("qwen2");
    }

    #[test]
    fn qwen3_matches_candle() {
        compare("qwen3");
    }

    /// Branches run side by side give each branch the logits it gets alone after the same
    /// prefix, and leave the cache as it was.
    fn branches_match_separate_runs(arch: &str) {
        let bytes = tiny(arch, 3 + arch.len() as u64);
        let mut m = load(&bytes, arch, 512);
        let prefix: Vec<u32> = (0..30).map(|i| (i * 11 % VOCAB) as u32).collect();
        let branches: Vec<Vec<u32>> = [7usize, 1, 19, 4]
            .iter()
            .enumerate()
            .map(|(b, &len)| {
                (0..len)
                    .map(|i| ((i * 3 + b * 17) % VOCAB) as u32)
                    .collect()
            })
            .collect();
        m.forward(&prefix).expect("prefix");
        let alone: Vec<Tensor> = branches
            .iter()
            .map(|b| {
                m.truncate(prefix.len());
                m.forward(b).expect("alone")
            })
            .collect();
        m.truncate(prefix.len());
        let refs: Vec<&[u32]> = branches.iter().map(Vec::as_slice).collect();
        let together = m.forward_branches(&refs).expect("together");
        assert_eq!(together.dims(), &[branches.len(), VOCAB]);
        assert_eq!(m.len(), prefix.len(), "the branches are not kept");
        for (i, a) in alone.iter().enumerate() {
            let t = together.get(i).expect("row");
            let diff = max_diff(a, &t);
            assert!(diff < 1e-4, "{arch}: branch {i} differs by {diff}");
        }
        // The prefix is intact: continuing it gives what continuing a fresh run gives.
        let next = m.forward(&[5, 6]).expect("continues");
        let mut fresh = load(&bytes, arch, 512);
        fresh.forward(&prefix).expect("prefix");
        assert!(max_diff(&next, &fresh.forward(&[5, 6]).expect("fresh")) < 1e-4);
        // Bad input: an empty branch, or branches that do not fit side by side.
        m.truncate(prefix.len());
        assert!(m.forward_branches(&[&[1], &[]]).is_err());
        assert!(m.forward_branches(&[]).is_err());
        let long = vec![1u32; 250];
        let err = m
            .forward_branches(&[&long, &long])
            .expect_err("30 + 500 > 512");
        assert!(err.to_string().contains("exceed"), "{err}");
        assert_eq!(m.len(), prefix.len());
    }

    #[test]
    fn llama_branches_match_separate_runs() {
        branches_match_separate_runs("llama");
    }

    #[test]
    fn qwen_branches_match_separate_runs() {
        branches_match_separate_runs("qwen2");
        branches_match_separate_runs("qwen3");
    }

    /// Forks decoded side by side, in any grouping, give every fork the logits it gets
    /// alone after the same prefix: prompts of different lengths read in one pass, then one
    /// token per live fork per pass, forks finishing at different times.
    fn forks_match_separate_runs(arch: &str) {
        let bytes = tiny(arch, 5 + arch.len() as u64);
        let load = || load(&bytes, arch, 512);
        let prefix: Vec<u32> = (0..33).map(|i| (i * 13 % VOCAB) as u32).collect();
        let prompts: Vec<Vec<u32>> = [9usize, 1, 17]
            .iter()
            .enumerate()
            .map(|(b, &len)| {
                (0..len)
                    .map(|i| ((i * 5 + b * 11) % VOCAB) as u32)
                    .collect()
            })
            .collect();
        let steps = [6usize, 2, 4];
        let next = |t: &Tensor| -> u32 { t.argmax(0).and_then(|a| a.to_scalar()).expect("argmax") };
        // Alone: the prefix, then one sequence at a time with `forward`.
        let mut alone = load();
        alone.forward(&prefix).expect("prefix");
        let mut want: Vec<Vec<Tensor>> = Vec::new();
        for (p, &n) in prompts.iter().zip(&steps) {
            alone.truncate(prefix.len());
            let mut l = alone.forward(p).expect("prompt");
            let mut got = vec![l.clone()];
            for _ in 0..n {
                let t = next(&l);
                l = alone.forward(&[t]).expect("step");
                got.push(l.clone());
            }
            want.push(got);
        }
        // Together: the prompts in one pass, then the live forks one token each per pass.
        let mut m = load();
        m.forward(&prefix).expect("prefix");
        m.fork(prompts.len(), 40).expect("forks");
        let all: Vec<(usize, &[u32])> = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| (i, p.as_slice()))
            .collect();
        let first = m.forward_forks(&all, true).expect("prompts");
        let mut last: Vec<Tensor> = (0..prompts.len())
            .map(|i| first.get(i).expect("row"))
            .collect();
        let mut worst: f32 = 0.0;
        for (i, l) in last.iter().enumerate() {
            worst = worst.max(max_diff(l, &want[i][0]));
        }
        for step in 0..*steps.iter().max().expect("steps") {
            let live: Vec<usize> = (0..prompts.len()).filter(|&i| step < steps[i]).collect();
            let toks: Vec<[u32; 1]> = live.iter().map(|&i| [next(&last[i])]).collect();
            let batch: Vec<(usize, &[u32])> = live
                .iter()
                .zip(&toks)
                .map(|(&i, t)| (i, t.as_slice()))
                .collect();
            let out = m.forward_forks(&batch, false).expect("step");
            for (row, &i) in live.iter().enumerate() {
                last[i] = out.get(row).expect("row");
                worst = worst.max(max_diff(&last[i], &want[i][step + 1]));
            }
        }
        assert!(
            worst < 1e-4,
            "{arch}: forks differ from separate runs by up to {worst}"
        );
        assert_eq!(m.len(), prefix.len(), "forks never grow the shared prefix");
        assert_eq!(m.fork_len(0), Some(prompts[0].len() + steps[0]));
        // Bad input is refused and changes nothing.
        assert!(
            m.forward_forks(&[(7, &[1])], false).is_err(),
            "no such fork"
        );
        assert!(
            m.forward_forks(&[(1, &[1]), (1, &[2])], false).is_err(),
            "twice"
        );
        assert!(
            m.forward_forks(&[(0, &[1u32; 40])], true).is_err(),
            "past its room"
        );
        assert_eq!(m.fork_len(1), Some(prompts[1].len() + steps[1]));
        assert!(
            m.fork(100, 10)
                .expect_err("too many")
                .to_string()
                .contains("exceed")
        );
        // Cutting back drops the forks; the prefix continues as a fresh run would.
        m.truncate(prefix.len());
        assert!(
            m.forward_forks(&[(0, &[1])], false).is_err(),
            "forks are gone"
        );
        let mut fresh = load();
        fresh.forward(&prefix).expect("prefix");
        assert!(
            max_diff(
                &m.forward(&[5, 6]).expect("m"),
                &fresh.forward(&[5, 6]).expect("fresh")
            ) < 1e-4
        );
    }

    /// Greedy replies decoded side by side are exactly those decoded one at a time, for
    /// quantized models whose products take different kernels for one row and for many
    /// (Q8_0, Q5_0: situate-kernels' panels in tiles of rows or one row; Q4K and Q6K:
    /// candle's tiles, and Q6K's lone-row product), with prompts read together or alone.
    #[test]
    fn forks_decode_exactly_as_one_at_a_time() {
        for (dtype, hidden, ff) in [
            (GgmlDType::Q8_0, 64, 96),
            (GgmlDType::Q5_0, 64, 96),
            (GgmlDType::Q4K, 256, 512),
            (GgmlDType::Q6K, 256, 512),
        ] {
            let mut m = load(&tiny_with("qwen2", 11, dtype, hidden, ff), "qwen2", 512);
            let prefix: Vec<u32> = (0..21).map(|i| (i * 3 % VOCAB) as u32).collect();
            let prompts: Vec<Vec<u32>> = [5usize, 1, 12, 3]
                .iter()
                .enumerate()
                .map(|(b, &len)| (0..len).map(|i| ((i * 7 + b * 5) % VOCAB) as u32).collect())
                .collect();
            let next =
                |t: &Tensor| -> u32 { t.argmax(0).and_then(|a| a.to_scalar()).expect("argmax") };
            m.forward(&prefix).expect("prefix");
            // Writes `steps` tokens for each of `group` (indices into prompts), side by side.
            let run = |m: &mut Decoder, group: &[usize]| -> Vec<Vec<u32>> {
                m.fork(group.len(), 32).expect("forks");
                let all: Vec<(usize, &[u32])> = group
                    .iter()
                    .enumerate()
                    .map(|(k, &p)| (k, prompts[p].as_slice()))
                    .collect();
                let first = m.forward_forks(&all, true).expect("prompts");
                let mut out: Vec<Vec<u32>> = (0..group.len())
                    .map(|k| vec![next(&first.get(k).expect("row"))])
                    .collect();
                for _ in 0..8 {
                    let toks: Vec<[u32; 1]> = out.iter().map(|o| [o[o.len() - 1]]).collect();
                    let steps: Vec<(usize, &[u32])> = toks
                        .iter()
                        .enumerate()
                        .map(|(k, t)| (k, t.as_slice()))
                        .collect();
                    let l = m.forward_forks(&steps, false).expect("step");
                    for (k, o) in out.iter_mut().enumerate() {
                        o.push(next(&l.get(k).expect("row")));
                    }
                }
                m.truncate(prefix.len());
                out
            };
            let together = run(&mut m, &[0, 1, 2, 3]);
            for (p, want) in together.iter().enumerate() {
                assert_eq!(&run(&mut m, &[p])[0], want, "{dtype:?}: reply {p}");
            }
            assert_eq!(
                run(&mut m, &[2, 0]),
                vec![together[2].clone(), together[0].clone()]
            );
        }
    }

    #[test]
    fn matrices_expand_to_what_candle_dequantizes() {
        let dev = Device::Cpu;
        let v: Vec<f32> = (0..48 * 512)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0)
            .collect();
        let t = Tensor::from_vec(v, (48, 512), &dev).expect("t");
        for dtype in [
            GgmlDType::Q8_0,
            GgmlDType::Q4_0,
            GgmlDType::Q4K,
            GgmlDType::Q5K,
            GgmlDType::Q6K,
            GgmlDType::Q4_1,
        ] {
            let q = QTensor::quantize(&t, dtype).expect("quantizes");
            let ours = expand(&q, &dev).expect("expands");
            let theirs = q.dequantize(&dev).expect("dequantizes");
            assert_eq!(max_diff(&ours, &theirs), 0.0, "{dtype:?}");
        }
    }

    #[test]
    fn llama_forks_match_separate_runs() {
        forks_match_separate_runs("llama");
    }

    #[test]
    fn qwen_forks_match_separate_runs() {
        forks_match_separate_runs("qwen2");
        forks_match_separate_runs("qwen3");
    }

    #[test]
    fn a_sequence_past_the_context_is_refused() {
        let mut m = load(&tiny("llama", 1), "llama", 16);
        m.forward(&[1; 10]).expect("fits");
        let err = m.forward(&[1; 7]).expect_err("17 > 16");
        assert!(err.to_string().contains("exceed"), "{err}");
        assert_eq!(m.len(), 10, "a refused run leaves the cache as it was");
    }
}
