//! Fusing ranked lists from several retrieval legs (BM25, vectors) into one ranking.
//!
//! - [`Fusion::Rrf`]: weighted reciprocal-rank fusion, `Σ weight / (k + rank)` with ranks
//!   counted **from 1** (Cormack, Clarke & Büttcher 2009; k = 60 by default). The Anthropic
//!   cookbook's 0.8/0.2 weighting is `weight / rank` with no k (k = 0).
//! - [`Fusion::MinMax`]: each leg's scores scaled to [0, 1] by its own min and max, then a
//!   weighted sum (a leg whose scores are all equal scales them to 1).
//!
//! A chunk appearing twice in one leg counts once, at its best rank. Ties break by card key,
//! so fusion is deterministic.

use situate_core::{IndexHit, LegScore};
use std::collections::HashMap;

/// One leg's ranking, best first.
#[derive(Debug, Clone, Copy)]
pub struct RankedList<'a> {
    /// The leg's name (`bm25`, `vector`).
    pub leg: &'a str,
    /// Its hits, best first.
    pub hits: &'a [IndexHit],
    /// Its weight in the fusion.
    pub weight: f32,
}

/// How lists are fused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fusion {
    /// Weighted reciprocal-rank fusion with this `k`.
    Rrf {
        /// The rank offset (60 in the original paper).
        k: f32,
    },
    /// Weighted sum of min-max normalised scores.
    MinMax,
}

impl Default for Fusion {
    fn default() -> Self {
        Fusion::Rrf { k: 60.0 }
    }
}

/// A fused hit: its card, fused score and every leg's view of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Fused {
    /// The card key.
    pub card: u64,
    /// The fused score.
    pub score: f32,
    /// Each leg that found it: rank (1-based) and raw score.
    pub legs: Vec<LegScore>,
}

/// Fuses `lists` and keeps the best `limit`.
pub fn fuse(lists: &[RankedList<'_>], fusion: Fusion, limit: usize) -> Vec<Fused> {
    let mut by_card: HashMap<u64, Fused> = HashMap::new();
    for list in lists {
        // Best occurrence of each card in this leg.
        let mut seen = std::collections::HashSet::new();
        let deduped: Vec<(usize, &IndexHit)> = list
            .hits
            .iter()
            .filter(|h| seen.insert(h.card))
            .enumerate()
            .map(|(i, h)| (i + 1, h))
            .collect();
        let (lo, hi) = deduped
            .iter()
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), (_, h)| {
                (lo.min(h.score), hi.max(h.score))
            });
        for (rank, h) in deduped {
            let contribution = match fusion {
                Fusion::Rrf { k } => list.weight / (k + rank as f32),
                Fusion::MinMax => {
                    list.weight
                        * if hi > lo {
                            (h.score - lo) / (hi - lo)
                        } else {
                            1.0
                        }
                }
            };
            let e = by_card.entry(h.card).or_insert_with(|| Fused {
                card: h.card,
                score: 0.0,
                legs: Vec::new(),
            });
            e.score += contribution;
            e.legs.push(LegScore {
                leg: list.leg.to_string(),
                rank,
                score: h.score,
            });
        }
    }
    let mut out: Vec<Fused> = by_card.into_values().collect();
    out.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.card.cmp(&b.card)));
    out.truncate(limit);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hits(v: &[(u64, f32)]) -> Vec<IndexHit> {
        v.iter()
            .map(|&(card, score)| IndexHit { card, score })
            .collect()
    }

    #[test]
    fn rrf_by_hand() {
        let bm25 = hits(&[(1, 9.0), (2, 8.0), (3, 7.0)]);
        let vector = hits(&[(3, 0.9), (1, 0.8)]);
        let lists = [
            RankedList {
                leg: "bm25",
                hits: &bm25,
                weight: 1.0,
            },
            RankedList {
                leg: "vector",
                hits: &vector,
                weight: 1.0,
            },
        ];
        let f = fuse(&lists, Fusion::Rrf { k: 60.0 }, 10);
        // card 1: 1/61 + 1/62; card 3: 1/63 + 1/61; card 2: 1/62
        assert_eq!(f.iter().map(|x| x.card).collect::<Vec<_>>(), vec![1, 3, 2]);
        assert!((f[0].score - (1.0 / 61.0 + 1.0 / 62.0)).abs() < 1e-7);
        assert_eq!(
            f[1].legs
                .iter()
                .map(|l| (l.leg.as_str(), l.rank))
                .collect::<Vec<_>>(),
            vec![("bm25", 3), ("vector", 1)]
        );
        // The cookbook's weighting: 0.8 / rank for the dense leg, 0.2 / rank for BM25, k = 0.
        let cookbook = [
            RankedList {
                leg: "bm25",
                hits: &bm25,
                weight: 0.2,
            },
            RankedList {
                leg: "vector",
                hits: &vector,
                weight: 0.8,
            },
        ];
        let f = fuse(&cookbook, Fusion::Rrf { k: 0.0 }, 1);
        assert_eq!(f[0].card, 3); // 0.2/3 + 0.8/1
        assert!((f[0].score - (0.2 / 3.0 + 0.8)).abs() < 1e-6);
    }

    #[test]
    fn duplicates_within_a_leg_count_once_at_their_best_rank() {
        let bm25 = hits(&[(5, 3.0), (5, 2.0), (6, 1.0)]);
        let f = fuse(
            &[RankedList {
                leg: "bm25",
                hits: &bm25,
                weight: 1.0,
            }],
            Fusion::default(),
            10,
        );
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].legs.len(), 1);
        assert_eq!(
            f[1].legs[0].rank, 2,
            "card 6 moves up to rank 2 once the duplicate is dropped"
        );
    }

    #[test]
    fn min_max_scales_each_leg() {
        let bm25 = hits(&[(1, 20.0), (2, 10.0)]);
        let vector = hits(&[(2, 0.9), (1, 0.5), (3, 0.1)]);
        let lists = [
            RankedList {
                leg: "bm25",
                hits: &bm25,
                weight: 0.5,
            },
            RankedList {
                leg: "vector",
                hits: &vector,
                weight: 0.5,
            },
        ];
        let f = fuse(&lists, Fusion::MinMax, 10);
        // card 1: 0.5*1 + 0.5*0.5 = 0.75; card 2: 0.5*0 + 0.5*1 = 0.5; card 3: 0
        assert_eq!(f.iter().map(|x| x.card).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert!((f[0].score - 0.75).abs() < 1e-6);
        let flat = hits(&[(7, 4.0), (8, 4.0)]);
        let f = fuse(
            &[RankedList {
                leg: "bm25",
                hits: &flat,
                weight: 1.0,
            }],
            Fusion::MinMax,
            10,
        );
        assert_eq!(
            (f[0].card, f[0].score, f[1].card),
            (7, 1.0, 8),
            "equal scores scale to 1, ties by card"
        );
    }

    #[test]
    fn limits_and_empty_lists() {
        assert!(fuse(&[], Fusion::default(), 5).is_empty());
        let bm25 = hits(&[(1, 1.0), (2, 0.5)]);
        assert_eq!(
            fuse(
                &[RankedList {
                    leg: "bm25",
                    hits: &bm25,
                    weight: 1.0
                }],
                Fusion::default(),
                1
            )
            .len(),
            1
        );
    }
}
