//! A feature-hashing embedder: each lowercased word adds ±1 to one of `dim` buckets, then
//! the vector is normalised. No model, fully deterministic, instant: for tests of the
//! vector machinery (persistence, journal replay, filters, fusion) and for trying situate
//! where no model can be installed. It matches words, not meanings, so it is no substitute
//! for a real embedder. Spec: `hash:DIM` (e.g. `hash:256`).

use situate_core::{EmbedError, EmbedKind, Embedder};

/// The hashing embedder.
pub struct HashEmbedder {
    id: String,
    dim: usize,
}

impl HashEmbedder {
    /// A hashing embedder of `dim` dimensions (at least 2).
    pub fn new(dim: usize) -> Self {
        let dim = dim.max(2);
        HashEmbedder {
            id: format!("hash:{dim}"),
            dim,
        }
    }

    /// The vector of one text.
    pub fn vector(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0f32; self.dim];
        for word in text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
        {
            let h = blake3::hash(word.to_lowercase().as_bytes());
            let b = h.as_bytes();
            let bucket = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
            let sign = if b[8] & 1 == 0 { 1.0 } else { -1.0 };
            v[(bucket % self.dim as u64) as usize] += sign;
        }
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 0.0 {
            v.iter_mut().for_each(|x| *x /= norm);
        } else {
            v[0] = 1.0; // an empty text still gets a unit vector
        }
        v
    }
}

#[async_trait::async_trait]
impl Embedder for HashEmbedder {
    fn model_id(&self) -> &str {
        &self.id
    }

    fn dim(&self) -> usize {
        self.dim
    }

    async fn embed(&self, texts: &[&str], _kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| self.vector(t)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_words_make_similar_unit_vectors() {
        let e = HashEmbedder::new(64);
        let (a, b, c) = (
            e.vector("zebras have stripes"),
            e.vector("Stripes of zebras"),
            e.vector("owls hunt at night"),
        );
        let dot = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f32>();
        assert!((dot(&a, &a) - 1.0).abs() < 1e-5);
        assert!(dot(&a, &b) > dot(&a, &c));
        assert_eq!(e.vector(""), e.vector("  "));
    }
}
