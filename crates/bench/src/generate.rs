//! `situate-bench generate`: raw prompt-reading and generation speed of a GGUF model on
//! situate's forward pass (`situate_llm::decoder`), as llama.cpp's `llama-bench` measures it
//! (a prompt of N tokens read in pieces; then tokens generated one at a time), plus decoding
//! several sequences side by side after a shared prefix (`Decoder::fork`). `bench/llm_speed.sh`
//! runs it beside llama.cpp (`bench/llama_cpp_peer.py`) on the same file and tokens.

use anyhow::{Context, Result, bail};
use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use situate_llm::decoder::Decoder;
use situate_llm::local::widen_slow_quantizations;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

fn argmax(t: &Tensor) -> Result<u32> {
    Ok(t.flatten_all()?.argmax(0)?.to_scalar::<u32>()?)
}

/// Reads `prompt` tokens (ids cycling through a fixed pattern of ordinary tokens, as
/// llama-bench does with random ids), then generates `new_tokens` tokens one at a time, then
/// `batch` sequences of `new_tokens` tokens side by side after the same prompt. Prints tokens/s.
pub fn generate(
    model: &Path,
    prompt: usize,
    new_tokens: usize,
    batch: usize,
    piece: usize,
) -> Result<ExitCode> {
    if prompt == 0 || new_tokens == 0 || piece == 0 {
        bail!("--prompt, --new_tokens and --piece must be positive");
    }
    let started = Instant::now();
    let mut file =
        std::fs::File::open(model).with_context(|| format!("opening {}", model.display()))?;
    let ct = gguf_file::Content::read(&mut file)
        .with_context(|| format!("reading {}", model.display()))?;
    let arch = ct
        .metadata
        .get("general.architecture")
        .and_then(|v| v.to_string().ok())
        .cloned()
        .context("no general.architecture")?;
    let context = prompt + batch.max(1) * (new_tokens + 8) + 16;
    // As `LocalLlm` loads it: matrices in a quantization without a SIMD dot product in
    // candle (Q5_0 in the Qwen2.5 files, Q4_1 in SmolLM2's) widened to Q8_0.
    let mut m = match widen_slow_quantizations(&ct, &mut file, &Device::Cpu)? {
        Some((ct, bytes)) => Decoder::from_gguf(
            &ct,
            &mut std::io::Cursor::new(bytes),
            &arch,
            context,
            &Device::Cpu,
        )?,
        None => Decoder::from_gguf(&ct, &mut file, &arch, context, &Device::Cpu)?,
    };
    outln!(
        "{}: {arch}, loaded in {:.1} s",
        model.display(),
        started.elapsed().as_secs_f64()
    );
    // Ordinary token ids (the first 30k of a BPE vocabulary are common words and pieces).
    let ids: Vec<u32> = (0..prompt)
        .map(|i| 1000 + ((i * 7919) % 30_000) as u32)
        .collect();
    let t = Instant::now();
    let mut logits = None;
    for p in ids.chunks(piece) {
        logits = Some(m.forward(p)?);
    }
    let pp = t.elapsed().as_secs_f64();
    outln!(
        "prompt: {prompt} tokens in {pp:.2} s = {:.1} tokens/s (pieces of {piece})",
        prompt as f64 / pp
    );
    let mut l = logits.context("no prompt")?;
    let t = Instant::now();
    for _ in 0..new_tokens {
        let next = argmax(&l)?;
        l = m.forward(&[next])?;
    }
    let tg = t.elapsed().as_secs_f64();
    outln!(
        "generation: {new_tokens} tokens in {tg:.2} s = {:.1} tokens/s",
        new_tokens as f64 / tg
    );
    if batch > 1 {
        m.truncate(prompt);
        m.fork(batch, new_tokens + 8)?;
        // Each sequence starts from a different token, then follows its own greedy path.
        let mut next: Vec<u32> = (0..batch).map(|b| 2000 + b as u32 * 17).collect();
        let t = Instant::now();
        for _ in 0..new_tokens {
            let steps: Vec<[u32; 1]> = next.iter().map(|&t| [t]).collect();
            let steps: Vec<(usize, &[u32])> = steps
                .iter()
                .enumerate()
                .map(|(i, s)| (i, s.as_slice()))
                .collect();
            let out = m.forward_forks(&steps, false)?;
            for (b, n) in next.iter_mut().enumerate() {
                *n = argmax(&out.get(b)?)?;
            }
        }
        let bt = t.elapsed().as_secs_f64();
        outln!(
            "generation, {batch} sequences side by side: {} tokens in {bt:.2} s = {:.1} tokens/s ({:.2}x one at a time)",
            new_tokens * batch,
            (new_tokens * batch) as f64 / bt,
            (new_tokens * batch) as f64 / bt / (new_tokens as f64 / tg)
        );
    }
    Ok(ExitCode::SUCCESS)
}
