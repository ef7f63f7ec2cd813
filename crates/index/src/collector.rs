//! A top-k collector that scores every matching chunk.
//!
//! tantivy's `TopDocs` prunes with block-max WAND, which pays off on long posting lists with
//! few query terms. situate's queries are natural-language questions (often 10+ terms) over
//! chunk collections whose posting lists are mostly short; there WAND's bookkeeping (sorting
//! scorers at every pivot) costs more than it saves. Measured on SciFact (300 queries, one
//! thread, one segment): `TopDocs` 6.3k queries/s, this collector 13k, same results
//! (BENCHMARKS.md). Also tried and measured slower: a term-at-a-time accumulator over the
//! same postings (6.8k: a callback per posting) and MaxScore pruning document at a time over
//! `Weight::scorer` (about half this collector's rate: virtual calls per posting, and loose
//! bounds since tantivy keeps its term scorers' maxima private). The
//! collector also reads each kept hit's card key from the fast field while the segment is at
//! hand.

use situate_core::CardSet;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;
use tantivy::collector::{Collector, SegmentCollector};
use tantivy::columnar::Column;
use tantivy::{DocId, Score, SegmentOrdinal, SegmentReader};

/// Collects the `limit` best (score, card key) pairs, best first; ties go to the smaller key.
pub struct TopCards {
    /// How many to keep (at least 1).
    pub limit: usize,
    /// Keep only these cards (a metadata filter), or all. Shared (tantivy's segment
    /// collectors must own what they hold).
    pub filter: Option<Arc<CardSet>>,
}

#[derive(Clone, Copy, PartialEq)]
struct Entry {
    score: Score,
    card: u64,
}

impl Eq for Entry {}

impl Ord for Entry {
    /// "Greater" is worse, so a max-heap's top is the worst entry kept.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .score
            .total_cmp(&self.score)
            .then(self.card.cmp(&other.card))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// One segment's part of [`TopCards`].
pub struct TopCardsSegment {
    limit: usize,
    filter: Option<Arc<CardSet>>,
    cards: Column<u64>,
    heap: BinaryHeap<Entry>,
}

impl Collector for TopCards {
    type Fruit = Vec<(Score, u64)>;
    type Child = TopCardsSegment;

    fn for_segment(
        &self,
        _ord: SegmentOrdinal,
        segment: &SegmentReader,
    ) -> tantivy::Result<TopCardsSegment> {
        Ok(TopCardsSegment {
            limit: self.limit,
            filter: self.filter.clone(),
            cards: segment.fast_fields().u64("card")?,
            heap: BinaryHeap::with_capacity(self.limit + 1),
        })
    }

    fn requires_scoring(&self) -> bool {
        true
    }

    fn merge_fruits(&self, fruits: Vec<Vec<(Score, u64)>>) -> tantivy::Result<Vec<(Score, u64)>> {
        let mut all: Vec<Entry> = fruits
            .into_iter()
            .flatten()
            .map(|(score, card)| Entry { score, card })
            .collect();
        all.sort();
        all.truncate(self.limit);
        Ok(all.into_iter().map(|e| (e.score, e.card)).collect())
    }
}

impl SegmentCollector for TopCardsSegment {
    type Fruit = Vec<(Score, u64)>;

    fn collect(&mut self, doc: DocId, score: Score) {
        if self.heap.len() == self.limit
            && self.heap.peek().is_some_and(|worst| score <= worst.score)
        {
            return;
        }
        let Some(card) = self.cards.first(doc) else {
            return;
        };
        if self.filter.as_ref().is_some_and(|f| !f.contains(card)) {
            return;
        }
        self.heap.push(Entry { score, card });
        if self.heap.len() > self.limit {
            self.heap.pop();
        }
    }

    fn harvest(self) -> Vec<(Score, u64)> {
        self.heap
            .into_vec()
            .into_iter()
            .map(|e| (e.score, e.card))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordering_is_best_first_with_stable_ties() {
        let mut v = [
            Entry {
                score: 1.0,
                card: 5,
            },
            Entry {
                score: 3.0,
                card: 9,
            },
            Entry {
                score: 3.0,
                card: 2,
            },
        ];
        v.sort();
        assert_eq!(v.iter().map(|e| e.card).collect::<Vec<_>>(), vec![2, 9, 5]);
    }
}
