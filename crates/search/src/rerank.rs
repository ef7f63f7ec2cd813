//! The reranking stage's ordering: the fused top `depth` hits are re-scored by a
//! [`situate_core::Reranker`] and the best `k` kept (the paper's 150 and 20).
//!
//! Scoring is the caller's (it is asynchronous and may be remote); this module turns hits
//! into what a reranker reads ([`passages`]) and the scores back into a ranking ([`apply`]).

use crate::Mode;
use situate_core::{Hit, IndexError, LegScore, RerankPassage};

/// How many fused hits are re-scored by default (the paper's 150).
pub const DEFAULT_DEPTH: usize = 150;

/// The leg name under which a hit's rerank rank and score are recorded.
pub const RERANK_LEG: &str = "rerank";

/// The leg name under which a hybrid hit's rank and score before reranking are recorded.
pub const FUSED_LEG: &str = "fused";

/// The passages of `hits` as a reranker reads them: the original text, and the indexed
/// context apart.
pub fn passages(hits: &[Hit]) -> Vec<RerankPassage<'_>> {
    hits.iter()
        .map(|h| RerankPassage {
            context: h.context.as_deref(),
            text: &h.original_text,
        })
        .collect()
}

/// Orders `hits` (best first, as the search returned them) by `scores` (one per hit, larger
/// is better; equal scores keep the search's order), keeps `k`, renumbers the ranks and makes
/// each hit's score its rerank score. Each hit's `legs` gain the rerank rank and score, and,
/// in hybrid mode, the fused rank and score the hit had before (single legs already carry
/// theirs). A score that is not a finite number, or a count that does not match, is an error:
/// a reranker's failure is never turned into an ordering silently.
pub fn apply(hits: Vec<Hit>, scores: &[f32], k: usize, mode: Mode) -> Result<Vec<Hit>, IndexError> {
    if scores.len() != hits.len() {
        return Err(IndexError::from(format!(
            "the reranker returned {} scores for {} passages",
            scores.len(),
            hits.len()
        )));
    }
    if let Some(i) = scores.iter().position(|s| !s.is_finite()) {
        return Err(IndexError::from(format!(
            "the reranker returned {} for passage {} ({})",
            scores[i],
            i + 1,
            hits[i].chunk_id
        )));
    }
    let mut order: Vec<usize> = (0..hits.len()).collect();
    // A stable sort: ties keep the fused order.
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let mut slots: Vec<Option<Hit>> = hits.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(k.min(order.len()));
    for &i in order.iter().take(k) {
        let Some(mut h) = slots[i].take() else {
            continue;
        };
        if mode == Mode::Hybrid {
            h.legs.push(LegScore {
                leg: FUSED_LEG.to_string(),
                rank: h.rank,
                score: h.score,
                normalized: None,
            });
        }
        h.rank = out.len() + 1;
        h.score = scores[i];
        h.legs.push(LegScore {
            leg: RERANK_LEG.to_string(),
            rank: h.rank,
            score: h.score,
            normalized: None,
        });
        out.push(h);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use situate_core::ContextStatus;

    fn hit(rank: usize, chunk: &str, ctx: Option<&str>) -> Hit {
        Hit {
            rank,
            score: 1.0 / (60.0 + rank as f32),
            document_id: "d".into(),
            chunk_id: chunk.into(),
            title: None,
            source: "s".into(),
            char_start: 0,
            char_end: 1,
            heading_path: vec![],
            kind: Default::default(),
            place: None,
            context: ctx.map(str::to_string),
            context_status: ContextStatus::Generated,
            original_text: format!("text of {chunk}"),
            legs: vec![LegScore {
                leg: "bm25".into(),
                rank,
                score: 1.0,
                normalized: None,
            }],
        }
    }

    /// A scorer that reads the passage: relevance is the number of times "gold" appears.
    fn scripted(passages: &[RerankPassage<'_>]) -> Vec<f32> {
        passages
            .iter()
            .map(|p| p.labelled().matches("gold").count() as f32)
            .collect()
    }

    #[test]
    fn reranking_orders_by_score_keeps_k_and_records_both_ranks() {
        let hits = vec![
            hit(1, "a", None),
            hit(2, "b", Some("gold context")),
            hit(3, "c gold gold", None),
            hit(4, "d", None),
        ];
        let p = passages(&hits);
        assert_eq!(p[1].context, Some("gold context"));
        assert_eq!(p[1].text, "text of b");
        let scores = scripted(&p);
        let fused_b = hits[1].score;
        let out = apply(hits, &scores, 3, Mode::Hybrid).expect("apply");
        let got: Vec<&str> = out.iter().map(|h| h.chunk_id.as_str()).collect();
        // c (2), b (1, from its context), then a and d tie at 0: the fused order decides.
        assert_eq!(got, vec!["c gold gold", "b", "a"]);
        assert_eq!(
            out.iter().map(|h| h.rank).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        assert_eq!(out[0].score, 2.0);
        let legs: Vec<(&str, usize)> = out[1]
            .legs
            .iter()
            .map(|l| (l.leg.as_str(), l.rank))
            .collect();
        assert_eq!(legs, vec![("bm25", 2), ("fused", 2), ("rerank", 2)]);
        assert_eq!(out[1].legs[1].score, fused_b);
        // The original text is untouched: answers quote it, never the context.
        assert_eq!(out[1].original_text, "text of b");
    }

    #[test]
    fn single_legs_record_no_fused_rank_and_bad_scores_are_errors() {
        let hits = vec![hit(1, "a", None), hit(2, "b gold", None)];
        let out = apply(hits.clone(), &[0.1, 0.9], 10, Mode::Bm25).expect("apply");
        assert_eq!(out[0].chunk_id, "b gold");
        let legs: Vec<&str> = out[0].legs.iter().map(|l| l.leg.as_str()).collect();
        assert_eq!(legs, vec!["bm25", "rerank"]);
        assert!(apply(hits.clone(), &[0.1], 10, Mode::Bm25).is_err());
        let e = apply(hits.clone(), &[0.1, f32::NAN], 10, Mode::Bm25).expect_err("nan");
        assert!(e.to_string().contains("passage 2"), "{e}");
        assert!(
            apply(vec![], &[], 10, Mode::Bm25)
                .expect("empty")
                .is_empty()
        );
    }
}
