//! Local cross-encoders in candle, from any Hugging Face directory (`config.json`,
//! `model.safetensors`, `tokenizer.json`):
//!
//! - the **BERT sequence-classification** layout (ms-marco MiniLM, TinyBERT): the encoder
//!   under `bert.`, the pooler (`bert.pooler.dense`, tanh) and a linear head (`classifier`);
//! - the **XLM-RoBERTa / RoBERTa** layout (bge-reranker, mxbai): the encoder under
//!   `roberta.`, position ids from `pad_token_id + 1`, and the classification head
//!   (`classifier.dense`, tanh, `classifier.out_proj`) on the `<s>` token.
//!
//! The query and the passage are one pair, tokenized as the model's `tokenizer.json` says
//! (`[CLS] q [SEP] p [SEP]` with token types 0/1 for BERT, `<s> q </s></s> p </s>` for
//! XLM-R). The score is the sigmoid of the head's logit for a one-label head (what
//! sentence-transformers' `CrossEncoder` returns), or the softmax probability of the last
//! label for a two-label head (label 1 = relevant).
//!
//! **Long passages.** A pair longer than `max_tokens` (default 512, at most the model's
//! positions) is cut in the passage, never in the query (`long=truncate`, the default, as
//! sentence-transformers does). With `long=max` the passage is instead split into windows
//! that each fit beside the query (overlapping by `stride` tokens, default 64), every window
//! is scored, and the passage gets its best window's score. A query that leaves no room for
//! the passage is an error, not a silent cut.
//!
//! **Batches.** Pairs are scored `batch` at a time (default 16), packed end to end rather
//! than padded (see `situate_embed::encoder`), so a passage's score does not depend on the
//! batch it is in.

use candle_core::{D, Tensor};
use candle_transformers::models::bert::Config;
use situate_core::{RerankError, RerankPassage, Reranker};
use situate_embed::encoder::{Dense, Encoder};
use std::path::{Path, PathBuf};
use tokenizers::{PostProcessor, Tokenizer, TruncationDirection};

/// One pair as the model reads it: token ids and token type ids (empty: all type 0).
pub(crate) type Pair = (Vec<u32>, Vec<u32>);

/// What to do with a pair longer than the model takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LongPassages {
    /// Cut the passage (the default).
    Truncate,
    /// Score overlapping windows of the passage and keep the best.
    Max,
}

/// How a cross-encoder runs.
#[derive(Debug, Clone)]
pub struct CrossOptions {
    /// Longest pair in tokens (special tokens included); capped by the model's positions.
    pub max_tokens: usize,
    /// Pairs per forward pass.
    pub batch: usize,
    /// The long-passage rule.
    pub long: LongPassages,
    /// Tokens shared by consecutive windows with [`LongPassages::Max`].
    pub stride: usize,
}

impl Default for CrossOptions {
    fn default() -> Self {
        CrossOptions {
            max_tokens: 512,
            batch: 16,
            long: LongPassages::Truncate,
            stride: 64,
        }
    }
}

impl CrossOptions {
    /// Reads `key=value` options (`max_tokens`, `batch`, `long`, `stride`) joined by `&`.
    pub fn parse(query: &str) -> Result<Self, String> {
        let mut o = CrossOptions::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| format!("option {pair:?} needs a value (key=value)"))?;
            let number = |lo: usize, hi: usize| {
                v.parse::<usize>()
                    .ok()
                    .filter(|n| (lo..=hi).contains(n))
                    .ok_or_else(|| format!("{k}={v}: expected a number from {lo} to {hi}"))
            };
            match k {
                "max_tokens" => o.max_tokens = number(8, 8192)?,
                "batch" => o.batch = number(1, 1024)?,
                "stride" => o.stride = number(0, 4096)?,
                "long" => {
                    o.long = match v {
                        "truncate" => LongPassages::Truncate,
                        "max" => LongPassages::Max,
                        _ => return Err(format!("long={v}: expected truncate or max")),
                    }
                }
                _ => {
                    return Err(format!(
                        "unknown option {k:?} (max_tokens, batch, long, stride)"
                    ));
                }
            }
        }
        Ok(o)
    }
}

/// The classification head on the first token's hidden state.
enum Head {
    /// BERT: pooler (dense + tanh), then a linear classifier.
    Bert { pooler: Dense, classifier: Dense },
    /// RoBERTa: dense + tanh, then the output projection.
    Roberta { dense: Dense, out_proj: Dense },
}

impl Head {
    fn logits(&self, cls: &Tensor) -> candle_core::Result<Tensor> {
        let (a, b) = match self {
            Head::Bert { pooler, classifier } => (pooler, classifier),
            Head::Roberta { dense, out_proj } => (dense, out_proj),
        };
        b.forward(&a.forward(cls)?.tanh()?)
    }
}

/// A cross-encoder reranker on the CPU.
pub struct CrossEncoder {
    id: String,
    encoder: Encoder,
    head: Head,
    labels: usize,
    tokenizer: Tokenizer,
    /// Special tokens a pair gets.
    added: usize,
    /// Whether the model has token-type embeddings beyond type 0 (BERT: 2; RoBERTa: 1).
    types: bool,
    options: CrossOptions,
}

fn err(id: &str, message: impl std::fmt::Display) -> RerankError {
    RerankError {
        reranker: id.to_string(),
        message: message.to_string(),
    }
}

impl CrossEncoder {
    // Long: the configuration, the tokenizer and one tensor after another, in the model's
    // order; each is checked against the sizes read before it.
    /// Loads the cross-encoder in `dir`.
    pub fn load(dir: &Path, options: CrossOptions) -> Result<Self, RerankError> {
        let id = format!("cross-encoder:{}", dir.display());
        let file = |name: &str| -> Result<PathBuf, RerankError> {
            situate_embed::encoder::model_file(dir, name, "cross-encoder").map_err(|m| err(&id, m))
        };
        let text = std::fs::read_to_string(file("config.json")?).map_err(|e| err(&id, e))?;
        let mut raw: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| err(&id, format!("config.json is not JSON: {e}")))?;
        let model_type = raw["model_type"].as_str().unwrap_or("bert").to_string();
        let roberta = matches!(model_type.as_str(), "roberta" | "xlm-roberta" | "camembert");
        if !roberta && model_type != "bert" {
            return Err(err(
                &id,
                format!(
                    "model_type {model_type:?} is not supported (bert, roberta and xlm-roberta cross-encoders are)"
                ),
            ));
        }
        // Settings that do not change the forward pass and that some exported configs leave
        // out get the transformers defaults of the family.
        if let Some(map) = raw.as_object_mut() {
            let defaults = [
                ("hidden_dropout_prob", serde_json::json!(0.1)),
                ("initializer_range", serde_json::json!(0.02)),
                ("hidden_act", serde_json::json!("gelu")),
                (
                    "pad_token_id",
                    serde_json::json!(if roberta { 1 } else { 0 }),
                ),
                (
                    "type_vocab_size",
                    serde_json::json!(if roberta { 1 } else { 2 }),
                ),
                (
                    "layer_norm_eps",
                    serde_json::json!(if roberta { 1e-5 } else { 1e-12 }),
                ),
            ];
            for (k, v) in defaults {
                map.entry(k).or_insert(v);
            }
        }
        let config: Config = serde_json::from_value(raw.clone())
            .map_err(|e| err(&id, format!("config.json is not a BERT-family config: {e}")))?;
        let labels = raw["id2label"]
            .as_object()
            .map(|m| m.len())
            .or_else(|| raw["num_labels"].as_u64().map(|n| n as usize))
            // transformers' default when a config names neither.
            .unwrap_or(2);
        if !(1..=2).contains(&labels) {
            return Err(err(
                &id,
                format!("a reranker has one or two labels; this head has {labels}"),
            ));
        }
        let vb = situate_embed::encoder::mmap_weights(&file("model.safetensors")?)
            .map_err(|e| err(&id, format!("model.safetensors: {e}")))?;
        let h = config.hidden_size;
        let load = |e: candle_core::Error| err(&id, format!("loading the weights: {e}"));
        let prefix = if roberta { "roberta" } else { "bert" };
        let base = if vb.contains_tensor(&format!("{prefix}.embeddings.word_embeddings.weight")) {
            vb.pp(prefix)
        } else {
            vb.clone()
        };
        let mut encoder = Encoder::load_at(base.clone(), &config).map_err(load)?;
        let head = if roberta {
            encoder = encoder.with_position_offset(config.pad_token_id + 1);
            Head::Roberta {
                dense: Dense::load(vb.pp("classifier.dense"), h, h).map_err(load)?,
                out_proj: Dense::load(vb.pp("classifier.out_proj"), h, labels).map_err(load)?,
            }
        } else {
            Head::Bert {
                pooler: Dense::load(base.pp("pooler.dense"), h, h).map_err(load)?,
                classifier: Dense::load(vb.pp("classifier"), h, labels).map_err(load)?,
            }
        };
        let mut tokenizer = situate_embed::encoder::load_tokenizer(&file("tokenizer.json")?)
            .map_err(|e| err(&id, format!("tokenizer.json: {e}")))?;
        // Pairs are packed, not padded (see the module doc).
        tokenizer.with_padding(None);
        let max_tokens = options.max_tokens.min(encoder.max_tokens()).max(8);
        let options = CrossOptions {
            max_tokens,
            stride: options.stride.min(max_tokens / 2),
            ..options
        };
        // Windows are cut here (see `pairs`), not by the tokenizer's own truncation.
        tokenizer
            .with_truncation(None)
            .map_err(|e| err(&id, format!("clearing truncation: {e}")))?;
        let added = tokenizer
            .get_post_processor()
            .map_or(0, |p| p.added_tokens(true));
        Ok(CrossEncoder {
            id,
            encoder,
            head,
            labels,
            tokenizer,
            added,
            types: config.type_vocab_size > 1,
            options,
        })
    }

    /// The options in effect (`max_tokens` capped by the model).
    pub fn options(&self) -> &CrossOptions {
        &self.options
    }

    /// The pairs (token ids, token types) that score one passage: the first window, or with
    /// [`LongPassages::Max`] every window.
    pub(crate) fn pairs(&self, query: &str, passage: &str) -> Result<Vec<Pair>, RerankError> {
        let tok = |text: &str| {
            self.tokenizer
                .encode(text, false)
                .map_err(|e| err(&self.id, format!("tokenizing: {e}")))
        };
        let max = self.options.max_tokens;
        let mut q = tok(query)?;
        // The query keeps at most half the pair; the passage gets the rest.
        if q.len() > max / 2 {
            q.truncate(max / 2, 0, TruncationDirection::Right);
            q.take_overflowing();
        }
        let budget = max.saturating_sub(q.len() + self.added);
        if budget == 0 {
            return Err(err(
                &self.id,
                format!("max_tokens={max} leaves no room for the passage"),
            ));
        }
        let mut p = tok(passage)?;
        let stride = match self.options.long {
            LongPassages::Max => self.options.stride.min(budget / 2),
            LongPassages::Truncate => 0,
        };
        p.truncate(budget, stride, TruncationDirection::Right);
        let mut windows = p.take_overflowing();
        windows.insert(0, p);
        if self.options.long == LongPassages::Truncate {
            windows.truncate(1);
        }
        windows
            .into_iter()
            .map(|w| {
                let e = self
                    .tokenizer
                    .post_process(q.clone(), Some(w), true)
                    .map_err(|e| err(&self.id, format!("adding special tokens: {e}")))?;
                // A model with one token type reads every token as type 0, whatever the
                // tokenizer's template says.
                let types = if self.types {
                    e.get_type_ids().to_vec()
                } else {
                    Vec::new()
                };
                Ok((e.get_ids().to_vec(), types))
            })
            .collect()
    }

    /// Scores pairs in batches: one score per pair.
    pub(crate) fn score_pairs(&self, pairs: &[Pair]) -> Result<Vec<f32>, RerankError> {
        let mut out = Vec::with_capacity(pairs.len());
        for batch in pairs.chunks(self.options.batch.max(1)) {
            let run = || -> candle_core::Result<Vec<f32>> {
                let cls = self.encoder.first_token_states(batch)?;
                let logits = self.head.logits(&cls)?;
                let scores = if self.labels == 1 {
                    candle_nn::ops::sigmoid(&logits.squeeze(D::Minus1)?)?
                } else {
                    candle_nn::ops::softmax_last_dim(&logits)?
                        .narrow(1, 1, 1)?
                        .squeeze(1)?
                };
                scores.to_vec1::<f32>()
            };
            out.extend(run().map_err(|e| err(&self.id, format!("forward pass: {e}")))?);
        }
        Ok(out)
    }

    /// Scores passages synchronously (see [`Reranker::score`]).
    pub fn score_sync(
        &self,
        query: &str,
        passages: &[RerankPassage<'_>],
    ) -> Result<Vec<f32>, RerankError> {
        let mut pairs = Vec::with_capacity(passages.len());
        let mut owner = Vec::with_capacity(passages.len());
        for (i, p) in passages.iter().enumerate() {
            for pair in self.pairs(query, &p.labelled())? {
                pairs.push(pair);
                owner.push(i);
            }
        }
        let scores = self.score_pairs(&pairs)?;
        let mut best = vec![f32::NEG_INFINITY; passages.len()];
        for (s, i) in scores.into_iter().zip(owner) {
            best[i] = best[i].max(s);
        }
        Ok(best)
    }
}

#[async_trait::async_trait]
impl Reranker for CrossEncoder {
    fn id(&self) -> &str {
        &self.id
    }

    async fn score(
        &self,
        query: &str,
        passages: &[RerankPassage<'_>],
    ) -> Result<Vec<f32>, RerankError> {
        self.score_sync(query, passages)
    }
}
