//! From texts to the model's inputs and back, shared by the local embedders: tokenized
//! inputs cut to the window by hand (so that a cut is counted, never silent), packed into
//! batches of about a number of tokens, run (a query on rayon's pool), and the pooled
//! vectors brought to unit length and to a Matryoshka dimension.

use situate_core::{EmbedError, EmbedKind};
use tokenizers::Tokenizer;

/// Splits texts (as token ids) into runs of about `tokens` tokens each, in order (a text
/// longer than that is a run of its own).
pub(crate) fn token_batches(texts: &[Vec<u32>], tokens: usize) -> Vec<&[Vec<u32>]> {
    let mut out = Vec::new();
    let (mut start, mut sum) = (0, 0);
    for (i, t) in texts.iter().enumerate() {
        if sum > 0 && sum + t.len() > tokens {
            out.push(&texts[start..i]);
            (start, sum) = (i, 0);
        }
        sum += t.len();
    }
    if start < texts.len() {
        out.push(&texts[start..]);
    }
    out
}

/// Cuts a tokenized input (special tokens included) to `max` tokens the way the
/// `tokenizers` crate's truncation does with a post-processor: the first `max - 1` tokens,
/// then the last (the closing special token, `[SEP]`, `</s>` or `<eos>`). Returns how many
/// tokens were cut. Cutting by hand rather than in the tokenizer keeps the full count, so
/// a cut is never silent ([`situate_core::Embedder::input_tokens`]).
pub(crate) fn fit(ids: &mut Vec<u32>, max: usize) -> usize {
    if ids.len() <= max || max < 2 {
        return 0;
    }
    let cut = ids.len() - max;
    let last = ids[ids.len() - 1];
    ids.truncate(max - 1);
    ids.push(last);
    cut
}

/// `v` at unit length (a zero vector stays zero).
pub(crate) fn unit(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

/// `v` at unit length, then cut to its first `dim` values and normalised again when `dim`
/// is shorter (a Matryoshka dimension).
pub(crate) fn matryoshka(v: Vec<f32>, dim: usize) -> Vec<f32> {
    let mut v = unit(v);
    if dim < v.len() {
        v.truncate(dim);
        v = unit(v);
    }
    v
}

/// `inputs` (prompts included) tokenized with their special tokens, each cut to `max`
/// tokens ([`fit`]).
pub(crate) fn encode_fitted(
    tokenizer: &Tokenizer,
    id: &str,
    inputs: Vec<String>,
    max: usize,
) -> Result<Vec<Vec<u32>>, EmbedError> {
    let encodings = tokenizer
        .encode_batch(inputs, true)
        .map_err(|e| EmbedError {
            model: id.to_string(),
            message: e.to_string(),
        })?;
    Ok(encodings
        .iter()
        .map(|e| {
            let mut ids = e.get_ids().to_vec();
            fit(&mut ids, max);
            ids
        })
        .collect())
}

/// Runs `pooled` over `ids` in batches of about `batch_tokens` tokens ([`token_batches`])
/// and `finish`es each vector. A query's pass runs inside rayon's pool, so that its
/// parallel int8 products fork from a pool thread (see `crate::bert`); passages stay on
/// the calling thread.
pub(crate) fn embed_batches(
    id: &str,
    ids: &[Vec<u32>],
    batch_tokens: usize,
    kind: EmbedKind,
    pooled: impl Fn(&[Vec<u32>]) -> candle_core::Result<Vec<Vec<f32>>> + Sync,
    finish: impl Fn(Vec<f32>) -> Vec<f32>,
) -> Result<Vec<Vec<f32>>, EmbedError> {
    let mut out = Vec::with_capacity(ids.len());
    for batch in token_batches(ids, batch_tokens) {
        let vectors = match kind {
            EmbedKind::Query => rayon::scope(|_| pooled(batch)),
            EmbedKind::Passage => pooled(batch),
        }
        .map_err(|e| EmbedError {
            model: id.to_string(),
            message: format!("forward pass: {e}"),
        })?;
        out.extend(vectors.into_iter().map(&finish));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_keep_order_and_hold_about_the_budget() {
        let texts: Vec<Vec<u32>> = [3usize, 4, 5, 9, 1, 1]
            .iter()
            .map(|&n| vec![0; n])
            .collect();
        let b = token_batches(&texts, 8);
        let sizes: Vec<usize> = b.iter().map(|x| x.len()).collect();
        assert_eq!(sizes, vec![2, 1, 1, 2]);
        assert_eq!(b.iter().map(|x| x.len()).sum::<usize>(), texts.len());
        assert!(token_batches(&[], 8).is_empty());
    }

    #[test]
    fn inputs_are_cut_as_the_tokenizers_truncation_cuts_them() {
        let mut ids = vec![2, 10, 11, 12, 13, 1];
        assert_eq!(fit(&mut ids, 4), 2);
        assert_eq!(ids, vec![2, 10, 11, 1]);
        let mut short = vec![2, 10, 1];
        assert_eq!(fit(&mut short, 4), 0);
        assert_eq!(short, vec![2, 10, 1]);
    }

    #[test]
    fn a_matryoshka_cut_is_normalised_again() {
        let v = matryoshka(vec![3.0, 4.0, 12.0], 2);
        assert!((v[0] - 0.6).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6);
        assert_eq!(matryoshka(vec![0.0, 2.0], 4), vec![0.0, 1.0]);
    }
}
