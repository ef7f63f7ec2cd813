//! Evaluation: retrieval metrics, evaluation-set readers, and the harness that runs a set
//! against the engine ([`run`]: `situate eval`, an `eval` job).
//!
//! Metrics follow the usual definitions (`trec_eval`, BEIR): a query's relevance judgments
//! map ids to grades (> 0 is relevant); the retrieved list is ranked, best first, without
//! duplicates. Queries without any relevant id have no defined recall and are skipped by
//! [`mean`] callers (see [`Judgments::is_answerable`]).
#![warn(missing_docs)]

pub mod answers;
pub mod beir;
pub mod dataset;
pub mod plot;
pub mod questions;
pub mod report;
pub mod run;
pub mod tune;

pub use questions::read_questions;

use std::collections::HashMap;

/// Relevance judgments of one query: id → grade (> 0 is relevant).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Judgments(pub HashMap<String, f64>);

impl Judgments {
    fn grade(&self, id: &str) -> f64 {
        self.0.get(id).copied().unwrap_or(0.0).max(0.0)
    }

    fn relevant_count(&self) -> usize {
        self.0.values().filter(|g| **g > 0.0).count()
    }

    /// Whether the query has at least one relevant id.
    pub fn is_answerable(&self) -> bool {
        self.relevant_count() > 0
    }
}

/// Share of the relevant ids found in the top `k` (0 when nothing is relevant). The
/// Anthropic cookbook's "Pass@k" is this, averaged over queries.
pub fn recall_at(retrieved: &[String], rel: &Judgments, k: usize) -> f64 {
    let n = rel.relevant_count();
    if n == 0 {
        return 0.0;
    }
    let found = retrieved
        .iter()
        .take(k)
        .filter(|id| rel.grade(id) > 0.0)
        .count();
    found as f64 / n as f64
}

/// Share of the top `k` that is relevant (divided by `k`, as `trec_eval` does).
pub fn precision_at(retrieved: &[String], rel: &Judgments, k: usize) -> f64 {
    if k == 0 {
        return 0.0;
    }
    retrieved
        .iter()
        .take(k)
        .filter(|id| rel.grade(id) > 0.0)
        .count() as f64
        / k as f64
}

/// 1 if any relevant id is in the top `k`.
pub fn hit_at(retrieved: &[String], rel: &Judgments, k: usize) -> f64 {
    f64::from(u8::from(
        retrieved.iter().take(k).any(|id| rel.grade(id) > 0.0),
    ))
}

/// Reciprocal rank of the first relevant id in the top `k` (0 if none).
pub fn mrr_at(retrieved: &[String], rel: &Judgments, k: usize) -> f64 {
    retrieved
        .iter()
        .take(k)
        .position(|id| rel.grade(id) > 0.0)
        .map_or(0.0, |p| 1.0 / (p as f64 + 1.0))
}

/// nDCG@k with linear gains (the grade) and a log2(rank + 1) discount, as in `trec_eval`
/// and BEIR.
pub fn ndcg_at(retrieved: &[String], rel: &Judgments, k: usize) -> f64 {
    let dcg: f64 = retrieved
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, id)| rel.grade(id) / (i as f64 + 2.0).log2())
        .sum();
    let mut ideal: Vec<f64> = rel.0.values().copied().filter(|g| *g > 0.0).collect();
    ideal.sort_by(|a, b| b.total_cmp(a));
    let idcg: f64 = ideal
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, g)| g / (i as f64 + 2.0).log2())
        .sum();
    if idcg == 0.0 { 0.0 } else { dcg / idcg }
}

/// Average precision over the whole retrieved list (MAP's per-query term).
pub fn average_precision(retrieved: &[String], rel: &Judgments) -> f64 {
    let n = rel.relevant_count();
    if n == 0 {
        return 0.0;
    }
    let mut found = 0;
    let mut sum = 0.0;
    for (i, id) in retrieved.iter().enumerate() {
        if rel.grade(id) > 0.0 {
            found += 1;
            sum += found as f64 / (i as f64 + 1.0);
        }
    }
    sum / n as f64
}

/// Mean of a list (0 for an empty list).
pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

/// Removes repeated ids, keeping the first (best-ranked) occurrence: used when several
/// chunks of one document are retrieved and the judgments are per document.
pub fn dedup_ranked(ids: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    ids.into_iter()
        .filter(|id| seen.insert(id.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn rel(v: &[(&str, f64)]) -> Judgments {
        Judgments(v.iter().map(|(k, g)| (k.to_string(), *g)).collect())
    }

    #[test]
    fn recall_precision_hit_mrr_by_hand() {
        let r = ids(&["a", "x", "b", "y", "c"]);
        let j = rel(&[("a", 1.0), ("b", 1.0), ("c", 1.0), ("d", 1.0)]);
        assert_eq!(recall_at(&r, &j, 3), 0.5); // a, b of 4
        assert_eq!(recall_at(&r, &j, 20), 0.75);
        assert!((precision_at(&r, &j, 3) - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(mrr_at(&ids(&["x", "y", "b"]), &j, 10), 1.0 / 3.0);
        assert_eq!(mrr_at(&ids(&["x", "y", "b"]), &j, 2), 0.0);
        assert_eq!(hit_at(&ids(&["x", "b"]), &j, 1), 0.0);
        assert_eq!(hit_at(&ids(&["x", "b"]), &j, 2), 1.0);
    }

    #[test]
    fn ndcg_with_graded_relevance_by_hand() {
        // grades: a=3, b=2, c=1; ranking b, x, a
        let j = rel(&[("a", 3.0), ("b", 2.0), ("c", 1.0)]);
        let r = ids(&["b", "x", "a"]);
        let dcg = 2.0 / 2f64.log2() + 0.0 + 3.0 / 4f64.log2();
        let idcg = 3.0 / 2f64.log2() + 2.0 / 3f64.log2() + 1.0 / 4f64.log2();
        assert!((ndcg_at(&r, &j, 10) - dcg / idcg).abs() < 1e-12);
        assert!((ndcg_at(&ids(&["a", "b", "c"]), &j, 10) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn queries_without_relevant_ids_score_zero_and_are_flagged() {
        let j = rel(&[("a", 0.0)]);
        assert!(!j.is_answerable());
        assert_eq!(recall_at(&ids(&["a"]), &j, 10), 0.0);
        assert_eq!(ndcg_at(&ids(&["a"]), &j, 10), 0.0);
        assert_eq!(average_precision(&ids(&["a"]), &j), 0.0);
    }

    #[test]
    fn average_precision_and_dedup() {
        let j = rel(&[("a", 1.0), ("b", 1.0)]);
        assert!(
            (average_precision(&ids(&["a", "x", "b"]), &j) - (1.0 + 2.0 / 3.0) / 2.0).abs() < 1e-12
        );
        assert_eq!(
            dedup_ranked(ids(&["a", "b", "a", "c", "b"])),
            ids(&["a", "b", "c"])
        );
        assert_eq!(mean(&[]), 0.0);
    }
}
