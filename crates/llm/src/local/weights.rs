//! A GGUF file's weights and tokenizer: the architecture it names, its quantizations
//! (the slow ones widened), and the tokens that spell a judge's yes and no.

use super::*;
use crate::decoder::Decoder;
use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_gemma3;
use situate_kernels::q8::Q8Matrix;
use tokenizers::Tokenizer;

pub(super) enum Weights {
    /// llama, qwen2, qwen3: our own forward pass, whose KV cache can be cut back to a prefix.
    Decoder(Decoder),
    /// candle-transformers' gemma3, whose cache cannot be reused.
    Gemma3(quantized_gemma3::ModelWeights),
}

impl Weights {
    /// Runs `tokens` from position `pos` (the cache keeps positions before it) and returns
    /// the logits after the last one.
    pub(super) fn forward(
        &mut self,
        tokens: &[u32],
        pos: usize,
        device: &Device,
    ) -> candle_core::Result<Tensor> {
        match self {
            Weights::Decoder(m) => {
                if m.len() < pos {
                    candle_core::bail!("position {pos} is past the {} cached", m.len());
                }
                m.truncate(pos);
                m.forward(tokens)
            }
            Weights::Gemma3(m) => m.forward(&Tensor::new(tokens, device)?.unsqueeze(0)?, pos),
        }
    }

    /// Runs `branches` side by side after the first `pos` cached positions (llama/qwen
    /// only: callers check [`Weights::reusable`]) and returns each one's last logits.
    pub(super) fn branches(
        &mut self,
        branches: &[&[u32]],
        pos: usize,
    ) -> candle_core::Result<Tensor> {
        match self {
            Weights::Decoder(m) => {
                if m.len() < pos {
                    candle_core::bail!("position {pos} is past the {} cached", m.len());
                }
                m.truncate(pos);
                m.forward_branches(branches)
            }
            Weights::Gemma3(_) => candle_core::bail!("gemma3 cannot run branches"),
        }
    }

    /// Starts `count` replies after the first `pos` cached positions, each with room for
    /// `room` tokens (llama/qwen only: callers check [`Weights::reusable`]).
    pub(super) fn fork(
        &mut self,
        pos: usize,
        count: usize,
        room: usize,
    ) -> candle_core::Result<()> {
        match self {
            Weights::Decoder(m) => {
                if m.len() < pos {
                    candle_core::bail!("position {pos} is past the {} cached", m.len());
                }
                m.truncate(pos);
                m.fork(count, room)
            }
            Weights::Gemma3(_) => candle_core::bail!("gemma3 cannot fork"),
        }
    }

    /// New tokens for several forks in one pass; each step's last logits.
    pub(super) fn forward_forks(
        &mut self,
        steps: &[(usize, &[u32])],
        prompt: bool,
    ) -> candle_core::Result<Tensor> {
        match self {
            Weights::Decoder(m) => m.forward_forks(steps, prompt),
            Weights::Gemma3(_) => candle_core::bail!("gemma3 cannot fork"),
        }
    }

    /// Whether a cached prefix can be continued after other replies were written from it.
    /// candle 0.11's gemma3 cannot continue a prompt from a cached prefix (its rectangular
    /// mask mixes dtypes), so it gets no reuse and one-piece prompts.
    pub(super) fn reusable(&self) -> bool {
        matches!(self, Weights::Decoder(_))
    }

    /// Tokens per forward call while reading a prompt (gemma3: the whole prompt at once).
    pub(super) fn piece(&self) -> usize {
        match self {
            Weights::Gemma3(_) => usize::MAX,
            _ => PREFILL_PIECE,
        }
    }

    pub(super) fn clear(&mut self) {
        match self {
            Weights::Decoder(m) => m.truncate(0),
            // candle's gemma3 has no reset: a forward at position 0 replaces its cache.
            Weights::Gemma3(_) => {}
        }
    }
}

/// The SentencePiece tokenizer of a GGUF file ([`crate::spm`]).
pub(super) fn spm_tokenizer(ct: &gguf_file::Content) -> Result<Tokenizer, String> {
    let get = |k: &str| {
        ct.metadata
            .get(k)
            .ok_or_else(|| format!("no {k} in the GGUF metadata"))
    };
    let array = |k: &str| -> Result<Vec<gguf_file::Value>, String> {
        get(k)?.to_vec().cloned().map_err(|e| format!("{k}: {e}"))
    };
    let tokens: Vec<String> = array("tokenizer.ggml.tokens")?
        .iter()
        .map(|v| v.to_string().cloned().map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let scores: Vec<f32> = array("tokenizer.ggml.scores")?
        .iter()
        .map(|v| v.to_f32().map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let types: Vec<i32> = match ct.metadata.get("tokenizer.ggml.token_type") {
        Some(v) => v
            .to_vec()
            .map_err(|e| e.to_string())?
            .iter()
            .map(|t| t.to_i32().map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?,
        None => vec![1; tokens.len()],
    };
    let unk = ct
        .metadata
        .get("tokenizer.ggml.unknown_token_id")
        .and_then(|v| v.to_u32().ok());
    let add_space_prefix = ct
        .metadata
        .get("tokenizer.ggml.add_space_prefix")
        .and_then(|v| v.to_bool().ok())
        .unwrap_or(true);
    crate::spm::build(&crate::spm::SpmVocab {
        tokens: &tokens,
        scores: &scores,
        types: &types,
        unk,
        add_space_prefix,
    })
}

pub(super) trait ReadSeek: std::io::Read + std::io::Seek {}
impl<T: std::io::Read + std::io::Seek> ReadSeek for T {}

/// Quantizations whose dot products candle computes without SIMD (`vec_dot_unopt`) and that
/// the model's products do not take otherwise: Q5_0 matrices of the decoder's architectures
/// (`llama`, `qwen2`, `qwen3`) go through situate-kernels' `Q8Matrix` where the CPU runs it,
/// as stored (22 bytes per 32 weights, not Q8_0's 34).
pub(super) fn is_slow(dtype: GgmlDType, arch: &str) -> bool {
    match dtype {
        GgmlDType::Q4_1 | GgmlDType::Q5_1 => true,
        GgmlDType::Q5_0 => !(crate::decoder::supports(arch) && Q8Matrix::takes(dtype)),
        _ => false,
    }
}

/// A copy of the file, in memory, with every matrix of a slow quantization ([`is_slow`]:
/// Q4_1, Q5_1, and Q5_0 where situate's kernel does not take it) re-quantized to Q8_0, which
/// candle multiplies with SIMD: SmolLM2 is shipped as Q4_1, and its generation ran 60% of the
/// time in the scalar Q4_1 dot product. Q8_0 holds a Q4_1 value to within 1/254 of its
/// block's range. `None` when nothing needs it. `situate-bench generate` loads its model
/// through this too, so its speeds are those of the path contexts run on.
pub fn widen_slow_quantizations<R: std::io::Read + std::io::Seek>(
    ct: &gguf_file::Content,
    reader: &mut R,
    device: &Device,
) -> candle_core::Result<Option<(gguf_file::Content, Vec<u8>)>> {
    let arch = ct
        .metadata
        .get("general.architecture")
        .and_then(|v| v.to_string().ok())
        .map_or("", |a| a.as_str());
    if !ct
        .tensor_infos
        .values()
        .any(|t| is_slow(t.ggml_dtype, arch))
    {
        return Ok(None);
    }
    let mut names: Vec<&String> = ct.tensor_infos.keys().collect();
    names.sort();
    let mut tensors = Vec::with_capacity(names.len());
    for name in &names {
        let t = ct.tensor(reader, name, device)?;
        let cols = t.shape().dims().last().copied().unwrap_or(0);
        let t = if is_slow(t.dtype(), arch) && cols % 32 == 0 {
            QTensor::quantize(&t.dequantize(device)?, GgmlDType::Q8_0)?
        } else {
            t
        };
        tensors.push((name.as_str(), t));
    }
    let metadata: Vec<(&str, &gguf_file::Value)> =
        ct.metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
    let mut out = std::io::Cursor::new(Vec::new());
    gguf_file::write(&mut out, &metadata, &refs)?;
    let bytes = out.into_inner();
    let content = gguf_file::Content::read(&mut std::io::Cursor::new(&bytes))?;
    Ok(Some((content, bytes)))
}

/// The single tokens that spell a first word `yes` / `no` in the usual casings, with and
/// without a leading space; `None` when the vocabulary has no single token for one of them.
pub(super) fn answer_tokens(tokenizer: &Tokenizer) -> Option<(Vec<u32>, Vec<u32>)> {
    let ids = |words: &[&str]| -> Vec<u32> {
        let mut v: Vec<u32> = words
            .iter()
            .flat_map(|w| [w.to_string(), format!(" {w}")])
            .filter_map(|w| {
                let e = tokenizer.encode(w.as_str(), false).ok()?;
                match e.get_ids() {
                    [one] => Some(*one),
                    _ => None,
                }
            })
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let yes = ids(&["yes", "Yes", "YES"]);
    let no = ids(&["no", "No", "NO"]);
    (!yes.is_empty() && !no.is_empty()).then_some((yes, no))
}
