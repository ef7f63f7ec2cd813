//! The vector leg: a trait over nearest-neighbour indexes, and [`CardSet`], the set of card
//! keys a metadata filter allows (shared by both legs so a filter applies *inside* each leg,
//! before fusion, and `k` filtered hits survive however selective the filter is).

use crate::{IndexError, IndexHit, Language};

/// A set of card keys, as a bitset over the keys (card keys are SQLite row ids: small and
/// dense, so a bitset is both the smallest and the fastest set for this; a few lines, no
/// dependency).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CardSet {
    words: Vec<u64>,
    len: usize,
}

impl CardSet {
    /// An empty set.
    pub fn new() -> Self {
        CardSet::default()
    }

    /// Adds a key.
    pub fn insert(&mut self, key: u64) {
        let (w, b) = ((key / 64) as usize, key % 64);
        if w >= self.words.len() {
            self.words.resize(w + 1, 0);
        }
        if self.words[w] & (1 << b) == 0 {
            self.words[w] |= 1 << b;
            self.len += 1;
        }
    }

    /// Whether the set holds `key`.
    #[inline]
    pub fn contains(&self, key: u64) -> bool {
        let w = (key / 64) as usize;
        w < self.words.len() && self.words[w] & (1 << (key % 64)) != 0
    }

    /// How many keys it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The keys, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.words.iter().enumerate().flat_map(|(w, &bits)| {
            (0..64u64)
                .filter(move |b| bits & (1 << b) != 0)
                .map(move |b| w as u64 * 64 + b)
        })
    }
}

impl FromIterator<u64> for CardSet {
    fn from_iter<I: IntoIterator<Item = u64>>(iter: I) -> Self {
        let mut s = CardSet::new();
        for k in iter {
            s.insert(k);
        }
        s
    }
}

/// Which documents a search may return (every given part must match; within a part, any
/// value may).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DocumentFilter {
    /// Document ids.
    pub document_ids: Vec<String>,
    /// Globs (`*`, `?`, `[..]`; `*` also crosses `/`) on the document id, which for files is
    /// the path.
    pub path_globs: Vec<String>,
    /// Document languages.
    pub languages: Vec<Language>,
    /// Metadata `key = value` (given at ingest with `--meta`, or from the source).
    pub metadata: Vec<(String, String)>,
    /// Card kinds (text, table, image); empty allows every kind.
    pub kinds: Vec<crate::CardKind>,
}

impl DocumentFilter {
    /// Whether the filter restricts nothing.
    pub fn is_empty(&self) -> bool {
        self.document_ids.is_empty()
            && self.path_globs.is_empty()
            && self.languages.is_empty()
            && self.metadata.is_empty()
            && self.kinds.is_empty()
    }
}

/// A query to a vector index.
#[derive(Debug, Clone, Copy)]
pub struct VectorQuery<'a> {
    /// The query's unit-length embedding.
    pub vector: &'a [f32],
    /// How many hits to return.
    pub limit: usize,
    /// Only these cards (a metadata filter), or all.
    pub filter: Option<&'a CardSet>,
}

/// A nearest-neighbour leg over chunk embeddings (in-process exact or HNSW in the embedded
/// default). Scores are cosine similarities (dot products of unit vectors): larger is better.
pub trait VectorIndex: Send + Sync {
    /// The best hits for a query vector, best first.
    fn search(&self, query: &VectorQuery<'_>) -> Result<Vec<IndexHit>, IndexError>;

    /// How many vectors it holds.
    fn len(&self) -> usize;

    /// Whether it holds none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn card_set_counts_and_iterates_in_order() {
        let s: CardSet = [5u64, 64, 1, 5, 200].into_iter().collect();
        assert_eq!(s.len(), 4);
        assert!(s.contains(64) && s.contains(1) && !s.contains(2) && !s.contains(10_000));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![1, 5, 64, 200]);
    }
}
