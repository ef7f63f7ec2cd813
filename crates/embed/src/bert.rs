//! Sentence embeddings from any BERT-family Hugging Face directory (`config.json`,
//! `model.safetensors`, `tokenizer.json`) in candle: all-MiniLM-L6-v2 by default.
//!
//! The recipe is sentence-transformers' for all-MiniLM-L6-v2: truncate at 256 tokens (the
//! model's `tokenizer.json` hard-codes 128 for both truncation and padding, so both are
//! overridden), pad to the longest text of the batch, mean-pool the last hidden states over
//! the real tokens only (the attention mask), and normalise to unit length.

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use situate_core::{EmbedError, EmbedKind, Embedder};
use std::path::{Path, PathBuf};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

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
}

impl Default for BertOptions {
    fn default() -> Self {
        BertOptions {
            max_tokens: 256,
            batch_size: 32,
            query_prefix: String::new(),
            passage_prefix: String::new(),
        }
    }
}

/// A BERT sentence embedder on the CPU.
pub struct BertEmbedder {
    id: String,
    model: BertModel,
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
            let p = dir.join(name);
            if p.is_file() {
                Ok(p)
            } else {
                Err(err(
                    &id,
                    format!(
                        "{} is missing (a model directory holds config.json, model.safetensors and tokenizer.json)",
                        p.display()
                    ),
                ))
            }
        };
        let config_text = std::fs::read_to_string(file("config.json")?).map_err(|e| err(&id, e))?;
        let config: Config = serde_json::from_str(&config_text)
            .map_err(|e| err(&id, format!("config.json is not a BERT config: {e}")))?;
        let mut tokenizer = Tokenizer::from_file(file("tokenizer.json")?)
            .map_err(|e| err(&id, format!("tokenizer.json: {e}")))?;
        let max_tokens = options
            .max_tokens
            .min(config.max_position_embeddings)
            .max(2);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_tokens,
                ..Default::default()
            }))
            .map_err(|e| err(&id, format!("setting truncation: {e}")))?;
        let pad = tokenizer.get_padding().cloned();
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            pad_id: pad
                .as_ref()
                .map_or(config.pad_token_id as u32, |p| p.pad_id),
            pad_token: pad
                .as_ref()
                .map_or_else(|| "[PAD]".to_string(), |p| p.pad_token.clone()),
            ..Default::default()
        }));
        let weights = file("model.safetensors")?;
        // SAFETY: the weights file is memory-mapped read-only; situate never writes it, and a
        // model directory changed under a running process is outside what it promises.
        let vb =
            unsafe { VarBuilder::from_mmaped_safetensors(&[weights], DType::F32, &Device::Cpu) }
                .map_err(|e| err(&id, format!("model.safetensors: {e}")))?;
        let model = BertModel::load(vb, &config)
            .map_err(|e| err(&id, format!("loading the weights: {e}")))?;
        Ok(BertEmbedder {
            id,
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
    pub fn with_id(mut self, id: String) -> Self {
        self.id = id;
        self
    }

    /// Token ids of one text as the model sees it (special tokens included, truncated).
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
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
        let prefix = match kind {
            EmbedKind::Query => &self.options.query_prefix,
            EmbedKind::Passage => &self.options.passage_prefix,
        };
        let mut out = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.options.batch_size.max(1)) {
            let inputs: Vec<String> = batch.iter().map(|t| format!("{prefix}{t}")).collect();
            let encodings = self
                .tokenizer
                .encode_batch(inputs, true)
                .map_err(|e| err(&self.id, e))?;
            let (n, len) = (encodings.len(), encodings.first().map_or(0, |e| e.len()));
            let ids: Vec<u32> = encodings
                .iter()
                .flat_map(|e| e.get_ids().iter().copied())
                .collect();
            let mask: Vec<u32> = encodings
                .iter()
                .flat_map(|e| e.get_attention_mask().iter().copied())
                .collect();
            let type_ids: Vec<u32> = encodings
                .iter()
                .flat_map(|e| e.get_type_ids().iter().copied())
                .collect();
            let run = || -> candle_core::Result<Tensor> {
                let dev = &Device::Cpu;
                let ids = Tensor::from_vec(ids, (n, len), dev)?;
                let mask = Tensor::from_vec(mask, (n, len), dev)?;
                let type_ids = Tensor::from_vec(type_ids, (n, len), dev)?;
                let hidden = self.model.forward(&ids, &type_ids, Some(&mask))?; // (n, len, dim)
                let m = mask.to_dtype(DType::F32)?.unsqueeze(2)?; // (n, len, 1)
                let summed = hidden.broadcast_mul(&m)?.sum(1)?; // (n, dim)
                let counts = m.sum(1)?.clamp(1e-9, f64::MAX)?; // (n, 1)
                let mean = summed.broadcast_div(&counts)?;
                if normalize {
                    let norm = mean.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12, f64::MAX)?;
                    mean.broadcast_div(&norm)
                } else {
                    Ok(mean)
                }
            };
            let pooled = run().map_err(|e| err(&self.id, format!("forward pass: {e}")))?;
            out.extend(pooled.to_vec2::<f32>().map_err(|e| err(&self.id, e))?);
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

    async fn embed(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed_sync(texts, kind, true)
    }
}
