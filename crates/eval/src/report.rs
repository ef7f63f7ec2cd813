//! Scoring runs: per-query results, the metrics of a configuration, the comparison table and
//! the abstain (unanswerable) analysis.

use crate::dataset::{EvalQuery, Level, Matching};
use crate::{average_precision, hit_at, mean, mrr_at, ndcg_at, precision_at, recall_at};
use serde::Serialize;
use situate_core::LegScore;
use std::collections::BTreeMap;

/// One retrieved item of a query, after reduction to the judged level.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Retrieved {
    /// Chunk or document id.
    pub id: String,
    /// 1-based rank.
    pub rank: usize,
    /// The final score.
    pub score: f32,
    /// Each retrieval leg's view of it.
    pub legs: Vec<LegScore>,
    /// The chunk's text (kept only for text matching).
    #[serde(skip)]
    pub text: Option<String>,
}

/// Per-query record, exported as JSONL for error analysis.
#[derive(Debug, Clone, Serialize)]
pub struct QueryRecord {
    /// Query id.
    pub id: String,
    /// Query text.
    pub query: String,
    /// Golden ids.
    pub golden: Vec<String>,
    /// Whether the answer is not in the corpus.
    pub unanswerable: bool,
    /// The ranking (top 20).
    pub retrieved: Vec<Retrieved>,
    /// Pass@20 of this query (share of golden found in the top 20).
    pub pass_at_20: f64,
    /// Reciprocal rank of the first golden hit (top 10).
    pub mrr_at_10: f64,
}

/// The cookbook's Pass@k for one query: the share of golden items (repeats counted) with a
/// match among the first `k` retrieved keys.
pub fn pass_at(retrieved_keys: &[String], golden_keys: &[String], k: usize) -> f64 {
    if golden_keys.is_empty() {
        return 0.0;
    }
    let top = &retrieved_keys[..retrieved_keys.len().min(k)];
    golden_keys.iter().filter(|g| top.contains(g)).count() as f64 / golden_keys.len() as f64
}

/// Metrics of one configuration over the answerable queries.
pub fn score(
    queries: &[EvalQuery],
    rankings: &[Vec<Retrieved>],
    matching: Matching,
) -> (BTreeMap<String, f64>, Vec<QueryRecord>) {
    let mut m: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut records = Vec::with_capacity(queries.len());
    for (q, ranking) in queries.iter().zip(rankings) {
        let ids: Vec<String> = ranking.iter().map(|r| r.id.clone()).collect();
        let (keys, golden): (Vec<String>, Vec<String>) = match matching {
            Matching::Id => {
                let mut g: Vec<String> = q
                    .judgments
                    .0
                    .iter()
                    .filter(|(_, v)| **v > 0.0)
                    .map(|(k, _)| k.clone())
                    .collect();
                g.sort();
                (ids.clone(), g)
            }
            Matching::StrippedText => (
                ranking
                    .iter()
                    .map(|r| {
                        r.text
                            .as_deref()
                            .map(crate::dataset::stripped)
                            .unwrap_or_default()
                    })
                    .collect(),
                q.golden_texts.clone(),
            ),
        };
        let mut golden_ids: Vec<String> = q.judgments.0.keys().cloned().collect();
        golden_ids.sort();
        let pass20 = pass_at(&keys, &golden, 20);
        let mrr10 = mrr_at(&ids, &q.judgments, 10);
        if !q.unanswerable {
            for k in [1, 5, 10, 20] {
                m.entry(format!("pass@{k}"))
                    .or_default()
                    .push(pass_at(&keys, &golden, k));
            }
            m.entry("recall@10".to_string())
                .or_default()
                .push(recall_at(&ids, &q.judgments, 10));
            m.entry("recall@20".to_string())
                .or_default()
                .push(recall_at(&ids, &q.judgments, 20));
            m.entry("mrr@10".to_string()).or_default().push(mrr10);
            m.entry("ndcg@10".to_string())
                .or_default()
                .push(ndcg_at(&ids, &q.judgments, 10));
            m.entry("map".to_string())
                .or_default()
                .push(average_precision(&ids, &q.judgments));
            m.entry("hit_rate@10".to_string())
                .or_default()
                .push(hit_at(&ids, &q.judgments, 10));
            m.entry("precision@10".to_string())
                .or_default()
                .push(precision_at(&ids, &q.judgments, 10));
        }
        records.push(QueryRecord {
            id: q.id.clone(),
            query: q.text.clone(),
            golden: golden_ids,
            unanswerable: q.unanswerable,
            retrieved: ranking.iter().take(20).cloned().collect(),
            pass_at_20: pass20,
            mrr_at_10: mrr10,
        });
    }
    let mut out: BTreeMap<String, f64> = m
        .into_iter()
        .map(|(k, v)| (k.to_string(), mean(&v)))
        .collect();
    if let Some(p20) = out.get("pass@20").copied() {
        out.insert("failure_rate@20".into(), 1.0 - p20);
    }
    (out, records)
}

/// One row of the comparison.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigReport {
    /// `mode+context+rerank`, e.g. `bm25+structural+none`.
    pub name: String,
    /// Retrieval mode.
    pub mode: String,
    /// Context source.
    pub context: String,
    /// Reranker.
    pub rerank: String,
    /// Metric name → mean over answerable queries.
    pub metrics: BTreeMap<String, f64>,
    /// Relative reduction of the top-20 failure rate against the baseline row
    /// (`(base − this) / base`), as the paper reports 35% / 49% / 67%.
    pub failure_reduction: Option<f64>,
    /// Query throughput of this run (one thread).
    pub queries_per_second: f64,
    /// The abstain analysis, when the set has unanswerable queries.
    pub abstain: Option<Abstain>,
}

/// Fills `failure_reduction` against the row named `baseline`.
pub fn add_reductions(rows: &mut [ConfigReport], baseline: &str) {
    let base = rows
        .iter()
        .find(|r| r.name == baseline)
        .and_then(|r| r.metrics.get("failure_rate@20").copied());
    for r in rows.iter_mut() {
        r.failure_reduction = match (base, r.metrics.get("failure_rate@20")) {
            (Some(b), Some(f)) if b > 0.0 => Some((b - f) / b),
            _ => None,
        };
    }
}

/// A markdown table of the rows.
pub fn markdown_table(rows: &[ConfigReport], matching: Matching, level: Level) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "Pass@k matched by {}; judged per {}; failure = 1 − Pass@20; reduction against the first row.\n\n",
        match matching {
            Matching::Id => "id",
            Matching::StrippedText => "stripped chunk text (the cookbook's way)",
        },
        match level {
            Level::Chunk => "chunk",
            Level::Document => "document (a document ranks where its best chunk ranks)",
        }
    ));
    s.push_str("| configuration | Pass@5 | Pass@10 | Pass@20 | failure@20 | reduction | nDCG@10 | MRR@10 | MAP | queries/s |\n");
    s.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        let g = |k: &str| {
            r.metrics
                .get(k)
                .map_or("–".to_string(), |v| format!("{v:.4}"))
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} |\n",
            r.name,
            g("pass@5"),
            g("pass@10"),
            g("pass@20"),
            g("failure_rate@20"),
            r.failure_reduction
                .map_or("–".to_string(), |v| format!("{:+.1}%", v * 100.0)),
            g("ndcg@10"),
            g("mrr@10"),
            g("map"),
            r.queries_per_second
        ));
    }
    s
}

/// What the head of `report.md` says about a run.
#[derive(Debug, Clone)]
pub struct ReportHeader<'a> {
    /// The set's path.
    pub dataset: &'a str,
    /// The set's name.
    pub name: &'a str,
    /// Its format.
    pub format: &'a str,
    /// Queries with an answer.
    pub answerable: usize,
    /// Queries without one.
    pub unanswerable: usize,
    /// Chunk size.
    pub max_tokens: usize,
    /// Chunk overlap.
    pub overlap: usize,
    /// The context weight of contextual BM25.
    pub context_weight: f32,
}

/// The whole `report.md`: what was run, the comparison `table` ([`markdown_table`]), the
/// failure plot, and the abstain analysis of each row that has one.
pub fn markdown_report(h: &ReportHeader<'_>, rows: &[ConfigReport], table: &str) -> String {
    let mut md = format!("# Evaluation: {}\n\n", h.name);
    md.push_str(&format!(
        "Data set `{}` ({} format), {} answerable and {} unanswerable queries; chunks of at most {} tokens \
         ({} overlap); context weight {}.\n\n",
        h.dataset, h.format, h.answerable, h.unanswerable, h.max_tokens, h.overlap, h.context_weight
    ));
    md.push_str(table);
    md.push_str("\n![failure rate](failure.svg)\n");
    for r in rows {
        let Some(ab) = &r.abstain else {
            continue;
        };
        md.push_str(&format!(
            "\n## Unanswerable queries: {}\n\nThreshold {:.3} (the top score 95% of answerable queries reach): {:.1}% of \
             answerable queries lost, {:.1}% of unanswerable queries still answered.\n\n| answerable quantile | threshold | answerable lost | unanswerable abstained |\n|---|---|---|---|\n",
            r.name,
            ab.threshold,
            ab.answerable_lost * 100.0,
            ab.unanswerable_above_threshold * 100.0
        ));
        for (q, t, lost, abst) in &ab.curve {
            md.push_str(&format!(
                "| {q:.2} | {t:.3} | {:.1}% | {:.1}% |\n",
                lost * 100.0,
                abst * 100.0
            ));
        }
    }
    md
}

/// How well a score threshold separates answerable from unanswerable queries.
#[derive(Debug, Clone, Serialize)]
pub struct Abstain {
    /// Answerable queries seen.
    pub answerable: usize,
    /// Unanswerable queries seen.
    pub unanswerable: usize,
    /// The threshold chosen on the answerable queries alone: the top score that 95% of them
    /// reach (so at most 5% of answerable queries are lost by abstaining below it).
    pub threshold: f32,
    /// Share of unanswerable queries whose best hit still scores above the threshold
    /// (they would get an answer that cannot be right).
    pub unanswerable_above_threshold: f64,
    /// Share of answerable queries below the threshold (answers lost by abstaining).
    pub answerable_lost: f64,
    /// The trade-off at other thresholds: (answerable quantile, threshold, answerable lost,
    /// unanswerable correctly abstained).
    pub curve: Vec<(f64, f32, f64, f64)>,
}

/// Computes [`Abstain`] from the best score of each query (`None`: nothing retrieved, which
/// always abstains).
pub fn abstain(
    answerable_top: &[Option<f32>],
    unanswerable_top: &[Option<f32>],
) -> Option<Abstain> {
    if answerable_top.is_empty() || unanswerable_top.is_empty() {
        return None;
    }
    let mut a: Vec<f32> = answerable_top
        .iter()
        .map(|s| s.unwrap_or(f32::NEG_INFINITY))
        .collect();
    a.sort_by(f32::total_cmp);
    let quantile = |q: f64| a[((a.len() - 1) as f64 * q).round() as usize];
    let at = |t: f32| {
        let lost = answerable_top
            .iter()
            .filter(|s| s.is_none_or(|s| s < t))
            .count() as f64
            / answerable_top.len() as f64;
        let abstained = unanswerable_top
            .iter()
            .filter(|s| s.is_none_or(|s| s < t))
            .count() as f64
            / unanswerable_top.len() as f64;
        (lost, abstained)
    };
    let threshold = quantile(0.05);
    let (lost, abstained) = at(threshold);
    let curve = [0.0, 0.05, 0.1, 0.2, 0.3, 0.5]
        .iter()
        .map(|&q| {
            let t = quantile(q);
            let (l, ab) = at(t);
            (q, t, l, ab)
        })
        .collect();
    Some(Abstain {
        answerable: answerable_top.len(),
        unanswerable: unanswerable_top.len(),
        threshold,
        unanswerable_above_threshold: 1.0 - abstained,
        answerable_lost: lost,
        curve,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Judgments;

    fn q(id: &str, golden: &[&str], texts: &[&str]) -> EvalQuery {
        EvalQuery {
            id: id.into(),
            text: id.into(),
            judgments: Judgments(golden.iter().map(|g| (g.to_string(), 1.0)).collect()),
            golden_texts: texts.iter().map(|t| t.to_string()).collect(),
            unanswerable: golden.is_empty(),
            answers: vec![],
        }
    }

    fn r(ids: &[(&str, &str)]) -> Vec<Retrieved> {
        ids.iter()
            .enumerate()
            .map(|(i, (id, text))| Retrieved {
                id: id.to_string(),
                rank: i + 1,
                score: 10.0 - i as f32,
                legs: vec![],
                text: Some(text.to_string()),
            })
            .collect()
    }

    #[test]
    fn pass_at_k_counts_each_golden_chunk() {
        let keys: Vec<String> = ["a", "x", "b"].iter().map(|s| s.to_string()).collect();
        let golden: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        assert!((pass_at(&keys, &golden, 2) - 1.0 / 3.0).abs() < 1e-12);
        assert!((pass_at(&keys, &golden, 3) - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(pass_at(&keys, &[], 3), 0.0);
    }

    #[test]
    fn text_matching_differs_from_id_matching_on_duplicate_texts() {
        // The golden chunk g has the same text as chunk d (a repeated license header).
        let queries = [q("q1", &["g"], &["LICENSE TEXT"])];
        let rankings = [r(&[("d", "  LICENSE TEXT\n"), ("x", "other")])];
        let (by_id, _) = score(&queries, &rankings, Matching::Id);
        let (by_text, records) = score(&queries, &rankings, Matching::StrippedText);
        assert_eq!(by_id["pass@20"], 0.0);
        assert_eq!(by_text["pass@20"], 1.0);
        assert_eq!(by_text["failure_rate@20"], 0.0);
        assert_eq!(records[0].golden, vec!["g"]);
    }

    #[test]
    fn unanswerable_queries_are_left_out_of_the_means() {
        let queries = [q("q1", &["a"], &[]), q("q2", &[], &[])];
        let rankings = [r(&[("a", "")]), r(&[("a", "")])];
        let (m, records) = score(&queries, &rankings, Matching::Id);
        assert_eq!(m["pass@1"], 1.0);
        assert_eq!(m["ndcg@10"], 1.0);
        assert_eq!(records.len(), 2);
        assert!(records[1].unanswerable);
    }

    #[test]
    fn reductions_are_relative_to_the_baseline() {
        let row = |name: &str, fail: f64| ConfigReport {
            name: name.into(),
            mode: "bm25".into(),
            context: "none".into(),
            rerank: "none".into(),
            metrics: [("failure_rate@20".to_string(), fail)]
                .into_iter()
                .collect(),
            failure_reduction: None,
            queries_per_second: 1.0,
            abstain: None,
        };
        let mut rows = vec![row("base", 0.2), row("better", 0.1), row("worse", 0.3)];
        add_reductions(&mut rows, "base");
        assert_eq!(rows[0].failure_reduction, Some(0.0));
        assert!((rows[1].failure_reduction.expect("set") - 0.5).abs() < 1e-12);
        assert!((rows[2].failure_reduction.expect("set") + 0.5).abs() < 1e-12);
        assert!(markdown_table(&rows, Matching::Id, Level::Chunk).contains("| better |"));
    }

    #[test]
    fn abstain_threshold_is_calibrated_on_answerable_queries() {
        let answerable: Vec<Option<f32>> = (1..=20).map(|i| Some(i as f32)).collect();
        let unanswerable = [Some(0.5), Some(1.5), Some(30.0), None];
        let a = abstain(&answerable, &unanswerable).expect("both kinds present");
        // 5% quantile of 1..=20 (index round(19 * 0.05) = 1) is 2.0: one answerable query lost.
        assert_eq!(a.threshold, 2.0);
        assert!((a.answerable_lost - 0.05).abs() < 1e-12);
        // 0.5, 1.5 and "nothing retrieved" abstain; 30.0 does not.
        assert!((a.unanswerable_above_threshold - 0.25).abs() < 1e-12);
        assert!(abstain(&answerable, &[]).is_none());
    }
}
