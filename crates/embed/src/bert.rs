//! Sentence embeddings from any BERT-family Hugging Face directory (`config.json`,
//! `model.safetensors`, `tokenizer.json`) in candle: all-MiniLM-L6-v2 by default.
//!
//! The recipe is sentence-transformers' for all-MiniLM-L6-v2: truncate at 256 tokens (the
//! model's `tokenizer.json` hard-codes 128 for both truncation and padding, so both are
//! overridden), mean-pool the last hidden states over the real tokens, and normalise to unit
//! length. The forward pass is [`crate::encoder::Encoder`]: a batch's texts are packed end to
//! end rather than padded, which gives the same vectors as padding with an attention mask.

use crate::encoder::{Encoder, Precision};
use candle_transformers::models::bert::Config;
use situate_core::{EmbedError, EmbedKind, Embedder};
use std::path::{Path, PathBuf};
use tokenizers::Tokenizer;

/// How a BERT embedder runs.
#[derive(Debug, Clone)]
pub struct BertOptions {
    /// Longest input in tokens (longer texts are truncated).
    pub max_tokens: usize,
    /// Texts per forward pass.
    pub batch_size: usize,
    /// Prefix for queries (`"query: "` for e5 models; empty for MiniLM).
    pub query_prefix: String,
    /// Prefix for passages (`"passage: "` for e5 models).
    pub passage_prefix: String,
    /// The arithmetic of a query's forward pass ([`Precision`]). The default is f32 (the
    /// reference model's vectors); [`crate::resolve()`] chooses Q8 unless
    /// `SITUATE_QUERY_PRECISION=f32`.
    pub query_precision: Precision,
    /// The arithmetic of a passage's forward pass: f32 by default, Q8 for an embedder
    /// named with `:q8` ([`crate::resolve()`]). Passages' vectors are stored, so Q8 here
    /// runs on every CPU (the portable int8 kernel where no vectorised one runs), and the
    /// model id names it (the embedding cache keeps the two apart).
    pub passage_precision: Precision,
}

impl Default for BertOptions {
    fn default() -> Self {
        BertOptions {
            max_tokens: 256,
            batch_size: 32,
            query_prefix: String::new(),
            passage_prefix: String::new(),
            query_precision: Precision::F32,
            passage_precision: Precision::F32,
        }
    }
}

/// A BERT sentence embedder on the CPU.
pub struct BertEmbedder {
    id: String,
    model: Encoder,
    tokenizer: Tokenizer,
    dim: usize,
    options: BertOptions,
}

fn err(model: &str, message: impl std::fmt::Display) -> EmbedError {
    EmbedError {
        model: model.to_string(),
        message: message.to_string(),
    }
}

impl BertEmbedder {
    /// Loads the model in `dir`.
    pub fn load(dir: &Path, options: BertOptions) -> Result<Self, EmbedError> {
        let id = format!(
            "bert:{}",
            dir.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| dir.display().to_string())
        );
        let file = |name: &str| -> Result<PathBuf, EmbedError> {
            crate::encoder::model_file(dir, name, "model").map_err(|m| err(&id, m))
        };
        let config_text = std::fs::read_to_string(file("config.json")?).map_err(|e| err(&id, e))?;
        let config: Config = serde_json::from_str(&config_text)
            .map_err(|e| err(&id, format!("config.json is not a BERT config: {e}")))?;
        let mut tokenizer = crate::encoder::load_tokenizer(&file("tokenizer.json")?)
            .map_err(|e| err(&id, format!("tokenizer.json: {e}")))?;
        let max_tokens = options
            .max_tokens
            .min(config.max_position_embeddings)
            .max(2);
        // Inputs are cut by hand (`crate::inputs::fit`, the same tokens the tokenizer's
        // truncation keeps), so that the cut is counted ([`Embedder::input_tokens`]).
        tokenizer
            .with_truncation(None)
            .map_err(|e| err(&id, format!("setting truncation: {e}")))?;
        // Texts are packed, not padded (see the module doc).
        tokenizer.with_padding(None);
        let vb = crate::encoder::mmap_weights(&file("model.safetensors")?)
            .map_err(|e| err(&id, format!("model.safetensors: {e}")))?;
        let mut model = Encoder::load(vb, &config)
            .map_err(|e| err(&id, format!("loading the weights: {e}")))?;
        let passages_q8 = options.passage_precision == Precision::Q8;
        if passages_q8 || options.query_precision == Precision::Q8 {
            let all = model
                .quantize(passages_q8)
                .map_err(|e| err(&id, format!("quantizing the weights: {e}")))?;
            if passages_q8 && !all {
                return Err(err(
                    &id,
                    "int8 passages need layers whose input sizes are multiples of 32",
                ));
            }
        }
        Ok(BertEmbedder {
            id: options.passage_precision.passages_id(id),
            model,
            tokenizer,
            dim: config.hidden_size,
            options: BertOptions {
                max_tokens,
                ..options
            },
        })
    }

    /// Replaces the model id (the embedding cache key): catalog models use `name@version`.
    /// With int8 passages the id is suffixed `:q8`, here as at load, so that their vectors
    /// are never cached or indexed as the f32 model's.
    pub fn with_id(mut self, id: String) -> Self {
        self.id = self.options.passage_precision.passages_id(id);
        self
    }

    /// Token ids of one text as the model sees it (special tokens included, cut to the
    /// window).
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        let mut ids = self.full_ids(text)?;
        crate::inputs::fit(&mut ids, self.options.max_tokens);
        Ok(ids)
    }

    fn full_ids(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        let enc = self
            .tokenizer
            .encode(text, true)
            .map_err(|e| err(&self.id, e))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Embeds texts synchronously: mean pooling over real tokens, then (if `normalize`) unit
    /// length.
    pub fn embed_sync(
        &self,
        texts: &[&str],
        kind: EmbedKind,
        normalize: bool,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let (prefix, precision) = match kind {
            EmbedKind::Query => (&self.options.query_prefix, self.options.query_precision),
            EmbedKind::Passage => (&self.options.passage_prefix, self.options.passage_precision),
        };
        let mut out = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.options.batch_size.max(1)) {
            let inputs: Vec<String> = batch.iter().map(|t| format!("{prefix}{t}")).collect();
            let encodings = self
                .tokenizer
                .encode_batch(inputs, true)
                .map_err(|e| err(&self.id, e))?;
            let ids: Vec<Vec<u32>> = encodings
                .iter()
                .map(|e| {
                    let mut ids = e.get_ids().to_vec();
                    crate::inputs::fit(&mut ids, self.options.max_tokens);
                    ids
                })
                .collect();
            // A query's whole forward pass runs on rayon's pool (the calling thread waits
            // once), so that its parallel int8 products are forked from a pool thread:
            // called from outside the pool, each of a query's two dozen products was handed
            // to the pool and waited for on its own (perf: thread wake-ups and lock
            // hand-offs; query p50 3.0 → 2.05 ms, BENCHMARKS.md). Passages stay on the
            // calling thread: on the pool their batches ran 13% slower (candle's gemm and
            // element-wise operations share their work on threads of their own).
            let pooled = match kind {
                EmbedKind::Query => rayon::scope(|_| self.model.mean_pooled(&ids, precision)),
                EmbedKind::Passage => self.model.mean_pooled(&ids, precision),
            }
            .map_err(|e| err(&self.id, format!("forward pass: {e}")))?;
            for mut v in pooled {
                if normalize {
                    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
                    v.iter_mut().for_each(|x| *x /= norm);
                }
                out.push(v);
            }
        }
        Ok(out)
    }
}

#[async_trait::async_trait]
impl Embedder for BertEmbedder {
    fn model_id(&self) -> &str {
        &self.id
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn input_tokens(&self, text: &str, kind: EmbedKind) -> Option<(usize, usize)> {
        let prefix = match kind {
            EmbedKind::Query => &self.options.query_prefix,
            EmbedKind::Passage => &self.options.passage_prefix,
        };
        let n = self.full_ids(&format!("{prefix}{text}")).ok()?.len();
        Some((n, self.options.max_tokens))
    }

    async fn embed(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed_sync(texts, kind, true)
    }
}
