//! Fusing ranked lists from several retrieval legs (BM25, vectors) into one ranking.
//!
//! Four fusion functions, each a weighted sum over the legs of a per-leg normalised value
//! (with two legs and weights `1 − α`, `α` it is the convex combination of Bruch, Gai and
//! Ingber, "An Analysis of Fusion Functions for Hybrid Retrieval", ACM TOIS 2023):
//!
//! - [`Fusion::Rrf`]: reciprocal-rank fusion, a leg's value `1 / (k + rank)` with ranks
//!   counted **from 1** (Cormack, Clarke & Büttcher 2009; k = 60 by default). The Anthropic
//!   cookbook's 0.8/0.2 weighting is `weight / rank` with no k (k = 0). Scores are ignored.
//! - [`Fusion::MinMax`]: each leg's scores scaled to [0, 1] by the minimum and maximum it
//!   returned for this query (Weaviate's `relativeScoreFusion`, Elasticsearch's linear
//!   retriever with its `minmax` normaliser). A leg whose scores are all equal scales them
//!   to 1.
//! - [`Fusion::Tm2c2`]: the theoretical minimum of the leg's scoring function instead of the
//!   observed one (0 for BM25, −1 for a cosine: [`RankedList::floor`]) and the observed
//!   maximum: Bruch et al.'s TM2C2. A query whose BM25 hits all score low keeps them low
//!   instead of stretching its weakest hit to 0 and its best to 1.
//! - [`Fusion::ZScore`]: each leg's scores standardised by the mean and standard deviation
//!   of what it returned, with the mean ± 3σ mapped to [0, 1] and clamped (Qdrant's
//!   distribution-based score fusion, DBSF). Ranks as a convex combination of z-scores
//!   does, but one outlier cannot dominate.
//!
//! A chunk that a leg did not return (it was not in that leg's `fetch` best) counts in a
//! score-based fusion with the normalised value of the leg's **lowest returned score**,
//! which bounds its true score from above (for min-max that is 0, as it always was); under
//! RRF it gets nothing from that leg. A chunk appearing twice in one leg counts once, at its
//! best rank. Ties break by card key, so fusion is deterministic.
//!
//! Every fused hit keeps each leg's rank, raw score and normalised value
//! ([`LegScore::normalized`]), so `--explain` can show what the fusion saw.

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
    /// The lowest score the leg's scoring function can give ([`Fusion::Tm2c2`]): 0 for
    /// BM25 ([`BM25_FLOOR`]), −1 for a cosine ([`COSINE_FLOOR`]).
    pub floor: f32,
}

/// BM25's lowest score: no query term in the chunk.
pub const BM25_FLOOR: f32 = 0.0;
/// A cosine similarity's lowest value.
pub const COSINE_FLOOR: f32 = -1.0;

/// How lists are fused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fusion {
    /// Weighted reciprocal-rank fusion with this `k`.
    Rrf {
        /// The rank offset (60 in the original paper).
        k: f32,
    },
    /// Weighted sum of scores scaled by each leg's observed min and max.
    MinMax,
    /// Weighted sum of scores scaled by each leg's theoretical min and observed max.
    Tm2c2,
    /// Weighted sum of z-scores, mean ± 3σ mapped to [0, 1] (Qdrant's DBSF).
    ZScore,
}

impl Default for Fusion {
    fn default() -> Self {
        Fusion::Rrf { k: 60.0 }
    }
}

impl Fusion {
    /// Its name in settings (`rrf`, `minmax`, `tm2c2`, `zscore`).
    pub fn name(&self) -> &'static str {
        match self {
            Fusion::Rrf { .. } => "rrf",
            Fusion::MinMax => "minmax",
            Fusion::Tm2c2 => "tm2c2",
            Fusion::ZScore => "zscore",
        }
    }

    /// Every fusion's name, for error messages and help.
    pub const NAMES: &'static str = "rrf, minmax, tm2c2 or zscore";
}

impl std::fmt::Display for Fusion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fusion::Rrf { k } => write!(f, "rrf (k = {k})"),
            other => f.write_str(other.name()),
        }
    }
}

/// A fused hit: its card, fused score and every leg's view of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Fused {
    /// The card key.
    pub card: u64,
    /// The fused score.
    pub score: f32,
    /// Each leg that found it: rank (1-based), raw score and normalised value.
    pub legs: Vec<LegScore>,
}

/// How one leg's scores are normalised for one query.
struct Normaliser {
    /// Subtracted from a score.
    lo: f32,
    /// The score is divided by this (never 0).
    span: f32,
    /// Clamp the result to [0, 1] (z-scores).
    clamp: bool,
    /// What a score equal to `lo + span` (or, with `span` 0, any score) maps to.
    flat: Option<f32>,
}

impl Normaliser {
    fn new(fusion: Fusion, scores: &[f32], floor: f32) -> Normaliser {
        let (min, max) = scores
            .iter()
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &s| {
                (lo.min(s), hi.max(s))
            });
        let scaled = |lo: f32, hi: f32| {
            if hi > lo {
                Normaliser {
                    lo,
                    span: hi - lo,
                    clamp: false,
                    flat: None,
                }
            } else {
                Normaliser {
                    lo,
                    span: 1.0,
                    clamp: false,
                    flat: Some(1.0),
                }
            }
        };
        match fusion {
            Fusion::Rrf { .. } => scaled(0.0, 1.0),
            Fusion::MinMax => scaled(min, max),
            // A score below the stated floor (a leg that does not keep to its scoring
            // function's range) lowers the floor rather than going negative.
            Fusion::Tm2c2 => scaled(floor.min(min), max),
            Fusion::ZScore => {
                let n = scores.len().max(1) as f64;
                let mean = scores.iter().map(|&s| s as f64).sum::<f64>() / n;
                let var = scores
                    .iter()
                    .map(|&s| (s as f64 - mean).powi(2))
                    .sum::<f64>()
                    / n;
                let sd = var.sqrt() as f32;
                if sd > 0.0 && sd.is_finite() {
                    Normaliser {
                        lo: mean as f32 - 3.0 * sd,
                        span: 6.0 * sd,
                        clamp: true,
                        flat: None,
                    }
                } else {
                    // One hit, or all equal: every hit sits at the mean, the middle.
                    Normaliser {
                        lo: 0.0,
                        span: 1.0,
                        clamp: true,
                        flat: Some(0.5),
                    }
                }
            }
        }
    }

    fn apply(&self, score: f32) -> f32 {
        if let Some(v) = self.flat {
            return v;
        }
        let v = (score - self.lo) / self.span;
        if self.clamp { v.clamp(0.0, 1.0) } else { v }
    }
}

/// Fuses `lists` and keeps the best `limit`.
pub fn fuse(lists: &[RankedList<'_>], fusion: Fusion, limit: usize) -> Vec<Fused> {
    // Each card's fused hit and a bit per list that returned it (a search fuses two).
    debug_assert!(lists.len() <= 64, "at most 64 lists");
    let mut by_card: HashMap<u64, (Fused, u64)> = HashMap::new();
    // Per leg: the value a chunk it did not return gets, and its weight.
    let mut absent: Vec<(usize, f32)> = Vec::new();
    for (li, list) in lists.iter().enumerate() {
        // Best occurrence of each card in this leg.
        let mut seen = std::collections::HashSet::new();
        let deduped: Vec<(usize, &IndexHit)> = list
            .hits
            .iter()
            .filter(|h| seen.insert(h.card))
            .enumerate()
            .map(|(i, h)| (i + 1, h))
            .collect();
        if deduped.is_empty() {
            continue;
        }
        let scores: Vec<f32> = deduped.iter().map(|(_, h)| h.score).collect();
        let norm = Normaliser::new(fusion, &scores, list.floor);
        if !matches!(fusion, Fusion::Rrf { .. }) {
            let lowest = scores.iter().copied().fold(f32::INFINITY, f32::min);
            // All scores equal: the leg tells its hits from nothing else, so a chunk it did
            // not return gets 0 (min-max has always done so).
            let value = if norm.flat.is_some() {
                0.0
            } else {
                norm.apply(lowest)
            };
            absent.push((li, value));
        }
        for (rank, h) in deduped {
            let normalized = match fusion {
                Fusion::Rrf { k } => 1.0 / (k + rank as f32),
                _ => norm.apply(h.score),
            };
            let (e, found) = by_card.entry(h.card).or_insert_with(|| {
                (
                    Fused {
                        card: h.card,
                        score: 0.0,
                        legs: Vec::new(),
                    },
                    0,
                )
            });
            *found |= 1 << li;
            e.score += list.weight * normalized;
            e.legs.push(LegScore {
                leg: list.leg.to_string(),
                rank,
                score: h.score,
                normalized: Some(normalized),
            });
        }
    }
    // Chunks a leg did not return: that leg's lowest returned value (score fusions only),
    // an upper bound of what the leg would have scored them. The weight of the legs whose
    // value is such a bound breaks ties: of two equal scores, the one more of whose score
    // the legs returned ranks first (with a leg weighted 0, the chunks it alone found
    // would otherwise tie with, and pass, the other leg's last hits).
    let mut out: Vec<(Fused, f32)> = by_card
        .into_values()
        .map(|(mut f, found)| {
            let mut imputed = 0.0;
            for &(li, value) in &absent {
                if found & (1 << li) == 0 {
                    f.score += lists[li].weight * value;
                    imputed += lists[li].weight;
                }
            }
            (f, imputed)
        })
        .collect();
    out.sort_by(|(a, ai), (b, bi)| {
        b.score
            .total_cmp(&a.score)
            .then(ai.total_cmp(bi))
            .then(a.card.cmp(&b.card))
    });
    out.truncate(limit);
    out.into_iter().map(|(f, _)| f).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hits(v: &[(u64, f32)]) -> Vec<IndexHit> {
        v.iter()
            .map(|&(card, score)| IndexHit { card, score })
            .collect()
    }

    fn list<'a>(leg: &'a str, hits: &'a [IndexHit], weight: f32) -> RankedList<'a> {
        RankedList {
            leg,
            hits,
            weight,
            floor: if leg == "bm25" {
                BM25_FLOOR
            } else {
                COSINE_FLOOR
            },
        }
    }

    fn order(f: &[Fused]) -> Vec<u64> {
        f.iter().map(|x| x.card).collect()
    }

    #[test]
    fn rrf_by_hand() {
        let bm25 = hits(&[(1, 9.0), (2, 8.0), (3, 7.0)]);
        let vector = hits(&[(3, 0.9), (1, 0.8)]);
        let lists = [list("bm25", &bm25, 1.0), list("vector", &vector, 1.0)];
        let f = fuse(&lists, Fusion::Rrf { k: 60.0 }, 10);
        // card 1: 1/61 + 1/62; card 3: 1/63 + 1/61; card 2: 1/62
        assert_eq!(order(&f), vec![1, 3, 2]);
        assert!((f[0].score - (1.0 / 61.0 + 1.0 / 62.0)).abs() < 1e-7);
        assert_eq!(
            f[1].legs
                .iter()
                .map(|l| (l.leg.as_str(), l.rank))
                .collect::<Vec<_>>(),
            vec![("bm25", 3), ("vector", 1)]
        );
        assert_eq!(
            f[1].legs[1].normalized,
            Some(1.0 / 61.0),
            "RRF's value is 1/(k+rank)"
        );
        // The cookbook's weighting: 0.8 / rank for the dense leg, 0.2 / rank for BM25, k = 0.
        let cookbook = [list("bm25", &bm25, 0.2), list("vector", &vector, 0.8)];
        let f = fuse(&cookbook, Fusion::Rrf { k: 0.0 }, 1);
        assert_eq!(f[0].card, 3); // 0.2/3 + 0.8/1
        assert!((f[0].score - (0.2 / 3.0 + 0.8)).abs() < 1e-6);
    }

    #[test]
    fn duplicates_within_a_leg_count_once_at_their_best_rank() {
        let bm25 = hits(&[(5, 3.0), (5, 2.0), (6, 1.0)]);
        for fusion in [
            Fusion::default(),
            Fusion::MinMax,
            Fusion::Tm2c2,
            Fusion::ZScore,
        ] {
            let f = fuse(&[list("bm25", &bm25, 1.0)], fusion, 10);
            assert_eq!(f.len(), 2, "{fusion}");
            assert_eq!(f[0].legs.len(), 1, "{fusion}");
            assert_eq!(
                f[1].legs[0].rank, 2,
                "card 6 moves up to rank 2 once the duplicate is dropped ({fusion})"
            );
        }
    }

    #[test]
    fn min_max_scales_each_leg() {
        let bm25 = hits(&[(1, 20.0), (2, 10.0)]);
        let vector = hits(&[(2, 0.9), (1, 0.5), (3, 0.1)]);
        let lists = [list("bm25", &bm25, 0.5), list("vector", &vector, 0.5)];
        let f = fuse(&lists, Fusion::MinMax, 10);
        // card 1: 0.5*1 + 0.5*0.5 = 0.75; card 2: 0.5*0 + 0.5*1 = 0.5; card 3: 0 (and BM25's
        // lowest, 0, for not being in BM25's list)
        assert_eq!(order(&f), vec![1, 2, 3]);
        assert!((f[0].score - 0.75).abs() < 1e-6);
        assert_eq!(f[2].score, 0.0);
        let flat = hits(&[(7, 4.0), (8, 4.0)]);
        let f = fuse(&[list("bm25", &flat, 1.0)], Fusion::MinMax, 10);
        assert_eq!(
            (f[0].card, f[0].score, f[1].card),
            (7, 1.0, 8),
            "equal scores scale to 1, ties by card"
        );
        // A leg with one hit: the hit counts 1, a chunk it did not return 0.
        let one = hits(&[(1, 3.0)]);
        let vector = hits(&[(2, 0.9), (1, 0.8)]);
        let f = fuse(
            &[list("bm25", &one, 1.0), list("vector", &vector, 1.0)],
            Fusion::MinMax,
            10,
        );
        assert_eq!(order(&f), vec![1, 2]);
        assert_eq!((f[0].score, f[1].score), (1.0, 1.0 + 0.0));
    }

    /// TM2C2 by hand: BM25 from 0 to its best, cosines from −1 to their best; a chunk a leg
    /// did not return gets that leg's lowest returned value.
    #[test]
    fn tm2c2_scales_from_the_theoretical_minimum() {
        let bm25 = hits(&[(1, 8.0), (2, 2.0)]);
        let vector = hits(&[(3, 0.6), (2, 0.2)]);
        let lists = [list("bm25", &bm25, 0.4), list("vector", &vector, 0.6)];
        let f = fuse(&lists, Fusion::Tm2c2, 10);
        // bm25: x / 8 → card 1: 1, card 2: 0.25; absent: 0.25
        // vector: (x + 1) / 1.6 → card 3: 1, card 2: 0.75; absent: 0.75
        let want = |c: u64| match c {
            1 => 0.4 * 1.0 + 0.6 * 0.75,
            2 => 0.4 * 0.25 + 0.6 * 0.75,
            _ => 0.4 * 0.25 + 0.6 * 1.0,
        };
        assert_eq!(order(&f), vec![1, 3, 2]);
        for x in &f {
            assert!((x.score - want(x.card)).abs() < 1e-6, "{x:?}");
        }
        let card2 = f.iter().find(|x| x.card == 2).expect("card 2");
        assert_eq!(
            card2.legs.iter().map(|l| l.normalized).collect::<Vec<_>>(),
            vec![Some(0.25), Some(0.75)]
        );
        // Min-max on the same lists stretches BM25's second hit to 0 and the vector's to 0:
        // card 2, second in both legs, then scores 0, and card 3 (0.6) passes card 1 (0.4).
        let f = fuse(&lists, Fusion::MinMax, 10);
        assert_eq!(order(&f), vec![3, 1, 2]);
        assert!((f[2].score - 0.0).abs() < 1e-6);
        // A score under the stated floor lowers the floor instead of going negative.
        let odd = hits(&[(1, 0.5), (2, -2.0)]);
        let f = fuse(&[list("vector", &odd, 1.0)], Fusion::Tm2c2, 10);
        assert_eq!((f[0].score, f[1].score), (1.0, 0.0));
    }

    /// z-scores by hand: mean ± 3σ mapped to [0, 1].
    #[test]
    fn zscore_standardises_each_leg() {
        // BM25 scores 6, 4, 2: mean 4, σ = sqrt(8/3); vector 0.9, 0.5: mean 0.7, σ 0.2.
        let bm25 = hits(&[(1, 6.0), (2, 4.0), (3, 2.0)]);
        let vector = hits(&[(3, 0.9), (4, 0.5)]);
        let lists = [list("bm25", &bm25, 0.5), list("vector", &vector, 0.5)];
        let f = fuse(&lists, Fusion::ZScore, 10);
        let sd = (8.0f32 / 3.0).sqrt();
        let b = |x: f32| (x - (4.0 - 3.0 * sd)) / (6.0 * sd);
        let v = |x: f32| (x - (0.7 - 0.6)) / 1.2;
        let want = |c: u64| match c {
            1 => 0.5 * b(6.0) + 0.5 * v(0.5),
            2 => 0.5 * b(4.0) + 0.5 * v(0.5),
            3 => 0.5 * b(2.0) + 0.5 * v(0.9),
            _ => 0.5 * b(2.0) + 0.5 * v(0.5),
        };
        for x in &f {
            assert!((x.score - want(x.card)).abs() < 1e-6, "{x:?}");
        }
        assert_eq!(order(&f), vec![1, 3, 2, 4]);
        // The mean maps to 0.5; an outlier is clamped to 1.
        assert!((b(4.0) - 0.5).abs() < 1e-6);
        let mut many: Vec<(u64, f32)> = (0..20).map(|i| (i, 1.0)).collect();
        many[0].1 = 100.0;
        let f = fuse(&[list("bm25", &hits(&many), 1.0)], Fusion::ZScore, 1);
        assert_eq!(f[0].score, 1.0);
        // One hit: it sits at the mean.
        let f = fuse(&[list("bm25", &hits(&[(9, 3.0)]), 1.0)], Fusion::ZScore, 1);
        assert_eq!(f[0].score, 0.5);
    }

    /// A leg's weight moves the fusion from one leg to the other: with all weight on a leg,
    /// every score fusion returns that leg's order.
    #[test]
    fn alpha_moves_between_the_legs() {
        let bm25 = hits(&[(1, 9.0), (2, 5.0), (3, 1.0)]);
        let vector = hits(&[(3, 0.9), (2, 0.5), (1, 0.1)]);
        for fusion in [
            Fusion::MinMax,
            Fusion::Tm2c2,
            Fusion::ZScore,
            Fusion::default(),
        ] {
            let only = |wb: f32, wv: f32| {
                order(&fuse(
                    &[list("bm25", &bm25, wb), list("vector", &vector, wv)],
                    fusion,
                    10,
                ))
            };
            assert_eq!(only(1.0, 0.0), vec![1, 2, 3], "{fusion}");
            assert_eq!(only(0.0, 1.0), vec![3, 2, 1], "{fusion}");
        }
    }

    #[test]
    fn limits_and_empty_lists() {
        assert!(fuse(&[], Fusion::default(), 5).is_empty());
        let bm25 = hits(&[(1, 1.0), (2, 0.5)]);
        assert_eq!(
            fuse(&[list("bm25", &bm25, 1.0)], Fusion::default(), 1).len(),
            1
        );
        let none: Vec<IndexHit> = Vec::new();
        for fusion in [Fusion::MinMax, Fusion::Tm2c2, Fusion::ZScore] {
            let f = fuse(
                &[list("bm25", &bm25, 1.0), list("vector", &none, 1.0)],
                fusion,
                10,
            );
            assert_eq!(
                order(&f),
                vec![1, 2],
                "an empty leg adds nothing ({fusion})"
            );
        }
    }

    /// With the vector leg weighted 0, every fusion ranks as BM25 does: the chunks only the
    /// vector leg found tie with BM25's last hit (whose value they are given) and rank
    /// after it and every other hit BM25 returned.
    #[test]
    fn a_leg_weighted_zero_leaves_the_other_legs_ranking() {
        let bm25 = hits(&[(7, 9.0), (3, 4.0), (5, 1.5)]);
        let vector = hits(&[(1, 0.9), (2, 0.8), (5, 0.7), (9, 0.2)]);
        for fusion in [
            Fusion::Rrf { k: 60.0 },
            Fusion::MinMax,
            Fusion::Tm2c2,
            Fusion::ZScore,
        ] {
            let f = fuse(
                &[list("bm25", &bm25, 1.0), list("vector", &vector, 0.0)],
                fusion,
                10,
            );
            assert_eq!(order(&f)[..3], [7, 3, 5], "{fusion}");
            assert_eq!(f.len(), 6, "{fusion}");
        }
    }

    #[test]
    fn names_round_trip() {
        for f in [
            Fusion::default(),
            Fusion::MinMax,
            Fusion::Tm2c2,
            Fusion::ZScore,
        ] {
            assert!(Fusion::NAMES.contains(f.name()));
        }
        assert_eq!(Fusion::Rrf { k: 20.0 }.to_string(), "rrf (k = 20)");
    }
}
