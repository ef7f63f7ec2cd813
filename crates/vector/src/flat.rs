//! Exact nearest-neighbour search: every vector scored by a dot product.
//!
//! Vectors are unit length, so the dot product is the cosine similarity. The dot product is
//! written with eight independent accumulators so the compiler vectorises it, and compiled
//! twice, for the x86-64 baseline and for AVX2, the build taken at run time by the level
//! chosen for the process ([`situate_core::cpu`]); both give the same value to the bit (the
//! same operations in the same order: no fused multiply-add). A SIMD crate would add
//! nothing here.

use crate::{Candidates, VectorError};
use situate_core::{CardSet, IndexHit};
use std::collections::HashMap;

/// All vectors in one contiguous matrix, searched exhaustively.
#[derive(Debug, Clone, Default)]
pub struct FlatIndex {
    dim: usize,
    keys: Vec<u64>,
    data: Vec<f32>,
    pos: HashMap<u64, usize>,
}

/// Dot product of two equal-length slices (the shorter length of two unequal ones), on the
/// path of the level chosen for the process.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    dot_at(situate_core::cpu::chosen(), a, b)
}

/// [`dot`] on the path of `level` (one the CPU runs).
#[inline]
pub fn dot_at(level: situate_core::cpu::Level, a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2,fma")]
        fn avx2(a: &[f32], b: &[f32]) -> f32 {
            dot_generic(a, b)
        }
        if level.avx2() {
            // SAFETY: the level is one the CPU runs (AVX2 and FMA).
            return unsafe { avx2(a, b) };
        }
    }
    let _ = level;
    dot_generic(a, b)
}

#[inline(always)]
fn dot_generic(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; 8];
    let chunks = n / 8;
    for i in 0..chunks {
        let (x, y) = (&a[i * 8..i * 8 + 8], &b[i * 8..i * 8 + 8]);
        // A plain multiply-add (not `mul_add`: without the FMA target feature that is a
        // call to the C library's fmaf per element, ten times slower).
        for j in 0..8 {
            acc[j] += x[j] * y[j];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for i in chunks * 8..n {
        s += a[i] * b[i];
    }
    s
}

impl FlatIndex {
    /// An empty index of `dim` dimensions.
    pub fn new(dim: usize) -> Self {
        FlatIndex {
            dim,
            ..Default::default()
        }
    }

    /// The dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// How many vectors it holds.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The keys it holds, in storage order.
    pub fn keys(&self) -> &[u64] {
        &self.keys
    }

    /// The vector of `key`.
    pub fn get(&self, key: u64) -> Option<&[f32]> {
        self.pos
            .get(&key)
            .map(|&i| &self.data[i * self.dim..(i + 1) * self.dim])
    }

    /// Adds (or replaces) the vector of `key`.
    pub fn add(&mut self, key: u64, v: &[f32]) -> Result<(), VectorError> {
        if v.len() != self.dim {
            return Err(VectorError::Dimension {
                expected: self.dim,
                got: v.len(),
            });
        }
        if let Some(&i) = self.pos.get(&key) {
            self.data[i * self.dim..(i + 1) * self.dim].copy_from_slice(v);
            return Ok(());
        }
        self.pos.insert(key, self.keys.len());
        self.keys.push(key);
        self.data.extend_from_slice(v);
        Ok(())
    }

    /// Removes `key`'s vector (the last vector moves into its slot); `false` if absent.
    pub fn remove(&mut self, key: u64) -> bool {
        let Some(i) = self.pos.remove(&key) else {
            return false;
        };
        let last = self.keys.len() - 1;
        if i != last {
            let moved = self.keys[last];
            self.keys[i] = moved;
            self.pos.insert(moved, i);
            let (head, tail) = self.data.split_at_mut(last * self.dim);
            head[i * self.dim..(i + 1) * self.dim].copy_from_slice(&tail[..self.dim]);
        }
        self.keys.pop();
        self.data.truncate(last * self.dim);
        true
    }

    /// The `limit` best by dot product, best first (ties: smaller key first), among the
    /// keys `filter` allows.
    pub fn search(&self, query: &[f32], limit: usize, filter: Option<&CardSet>) -> Vec<IndexHit> {
        let mut top = Candidates::new(limit);
        if query.len() != self.dim {
            return Vec::new();
        }
        // The dot product's path, chosen once per search rather than per vector.
        let level = situate_core::cpu::chosen();
        let dot = |a: &[f32], b: &[f32]| dot_at(level, a, b);
        match filter {
            // A selective filter: score only the allowed keys.
            Some(f) if f.len() < self.keys.len() / 4 => {
                for key in f.iter() {
                    if let Some(v) = self.get(key) {
                        top.push(key, dot(query, v));
                    }
                }
            }
            _ => {
                for (i, v) in self.data.chunks_exact(self.dim).enumerate() {
                    let key = self.keys[i];
                    if filter.is_some_and(|f| !f.contains(key)) {
                        continue;
                    }
                    top.push(key, dot(query, v));
                }
            }
        }
        top.into_sorted()
    }

    /// Iterates over (key, vector).
    pub fn iter(&self) -> impl Iterator<Item = (u64, &[f32])> {
        self.keys
            .iter()
            .copied()
            .zip(self.data.chunks_exact(self.dim.max(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    #[test]
    fn dot_matches_the_naive_sum_on_odd_lengths() {
        let a: Vec<f32> = (0..19).map(|i| i as f32 * 0.5).collect();
        let b: Vec<f32> = (0..19).map(|i| 1.0 - i as f32 * 0.1).collect();
        let naive: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - naive).abs() < 1e-4);
    }

    #[test]
    fn every_path_gives_the_scalar_dot_product_to_the_bit() {
        for n in [0, 1, 7, 8, 9, 64, 384, 385, 768] {
            let a: Vec<f32> = (0..n)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0)
                .collect();
            let b: Vec<f32> = (0..n)
                .map(|i| ((i * 53 % 89) as f32 - 44.0) / 13.0)
                .collect();
            let want = dot_at(situate_core::cpu::Level::Scalar, &a, &b);
            for level in situate_core::cpu::levels_here() {
                assert_eq!(
                    dot_at(level, &a, &b).to_bits(),
                    want.to_bits(),
                    "{level}, {n}"
                );
            }
        }
    }

    #[test]
    fn search_add_replace_remove_and_filter() {
        let mut ix = FlatIndex::new(2);
        ix.add(1, &unit(&[1.0, 0.0])).expect("add");
        ix.add(2, &unit(&[0.0, 1.0])).expect("add");
        ix.add(3, &unit(&[1.0, 1.0])).expect("add");
        assert!(ix.add(4, &[1.0]).is_err());
        let q = unit(&[1.0, 0.2]);
        let keys = |h: Vec<IndexHit>| h.iter().map(|h| h.card).collect::<Vec<_>>();
        assert_eq!(keys(ix.search(&q, 3, None)), vec![1, 3, 2]);
        assert_eq!(keys(ix.search(&q, 1, None)), vec![1]);
        let only: CardSet = [2u64, 3].into_iter().collect();
        assert_eq!(keys(ix.search(&q, 3, Some(&only))), vec![3, 2]);
        // Replace 1 so it points away; remove 3: the moved last vector keeps its key.
        ix.add(1, &unit(&[-1.0, 0.0])).expect("replace");
        assert!(ix.remove(3));
        assert!(!ix.remove(3));
        assert_eq!(ix.len(), 2);
        assert_eq!(keys(ix.search(&q, 3, None)), vec![2, 1]);
        assert_eq!(ix.get(2), Some(&unit(&[0.0, 1.0])[..]));
    }
}
