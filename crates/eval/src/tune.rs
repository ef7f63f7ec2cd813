//! `situate tune`: chooses search settings on the user's own questions ([`tune`]).
//!
//! Every question's legs are read once, as deep as the deepest fetch of the grid and once
//! per context weight ([`Engine::tuning_legs`]); each grid point is then a fusion in memory
//! ([`situate_search::fuse_legs`]), scored per question. The questions are split into
//! folds (by a hash of their ids, so a re-run splits alike); each fold is scored with the
//! point that did best on the other folds, and the mean of those per-question gains over
//! the current setting, with its standard error, decides: a change only when the gain is
//! above zero by more than twice its standard error. The request and answer types are the
//! engine's ([`situate_engine::TuneRequest`], [`TuneAnswer`]).

use crate::dataset::{EvalQuery, EvalSet, Level, Matching};
use crate::report::pass_at;
use crate::{mrr_at, ndcg_at, recall_at};
use situate_core::IndexHit;
use situate_engine::tuning::{CardIds, TuningLegs};
use situate_engine::{
    CheckedTune, Engine, EngineError, HeldOut, MinScore, OutOfSample, Result, ScoredPoint,
    TuneAnswer, TuneMetric, TunePoint,
};
use std::collections::{HashMap, HashSet};

/// How deep a ranking is read for its metric (the deepest metric is @100).
const DEPTH: usize = 100;

/// One question to score: its judgments and, read from the index, its legs.
struct Question {
    query: EvalQuery,
    legs: TuningLegs,
}

/// Runs the tuning `c` describes on `engine`'s index. `on_query` is told (questions read,
/// questions in all) while the legs are read.
pub fn tune(
    engine: &Engine,
    c: &CheckedTune,
    on_query: &mut dyn FnMut(u64, u64),
) -> Result<TuneAnswer> {
    let req = &c.request;
    let mut set = EvalSet::load(&req.questions, &c.split)?;
    let matching = matching(req.matching.as_deref(), &set)?;
    let mut rest = Vec::new();
    if let Some(n) = req.queries {
        if req.test_rest {
            rest = set.queries.split_off(n.min(set.queries.len()));
        } else {
            set.truncate(n);
        }
    }
    let (answerable, mut controls): (Vec<EvalQuery>, Vec<EvalQuery>) =
        set.queries.into_iter().partition(|q| !q.unanswerable);
    let rest: Vec<EvalQuery> = rest.into_iter().filter(|q| !q.unanswerable).collect();
    if let Some(path) = &req.controls {
        controls.extend(crate::run::read_controls(path)?);
    }
    if answerable.len() < c.folds {
        return Err(EngineError::field_error(
            "questions",
            format!(
                "{} answerable questions: {} folds need at least one question each (tune needs a few dozen to tell settings apart)",
                answerable.len(),
                c.folds
            ),
        ));
    }
    if req.test_rest && rest.is_empty() {
        return Err(EngineError::field_error(
            "test_rest",
            format!(
                "no answerable question after the first {}",
                req.queries.unwrap_or(0)
            ),
        ));
    }
    // The current setting: situate.toml's [search] over the index's recorded fusion.
    let current_plan = c.current.with_fusion(&engine.index_fusion()?)?;
    let current = TunePoint::of_plan(&current_plan);
    let context_weights = match &c.context_weights {
        Some(w) => w.clone(),
        None if engine.has_indexed_contexts()? => with_weight(
            situate_engine::tune_defaults::CONTEXT_WEIGHTS.to_vec(),
            current.context_weight,
        ),
        None => vec![current.context_weight],
    };
    let mut points = grid(c, &context_weights);
    if !points.iter().any(|p| p.same(&current)) {
        points.insert(0, current);
    }
    // Every context weight a point may ask for, and the current one's (for BM25 alone).
    let weights = with_weight(context_weights.clone(), current.context_weight);
    let depth = points
        .iter()
        .map(|p| p.fetch)
        .max()
        .unwrap_or(DEPTH)
        .max(DEPTH);

    // Read every question's legs once.
    let total = (answerable.len() + controls.len() + rest.len()) as u64;
    let mut done = 0u64;
    let mut read = |qs: Vec<EvalQuery>| -> Result<Vec<Question>> {
        qs.into_iter()
            .map(|q| {
                let legs = engine.tuning_legs(&q.text, current_plan.match_on, &weights, depth)?;
                done += 1;
                on_query(done, total);
                Ok(Question { query: q, legs })
            })
            .collect()
    };
    let tuning = read(answerable)?;
    let controls = read(controls)?;
    let rest = read(rest)?;
    let keys: Vec<u64> = tuning
        .iter()
        .chain(&controls)
        .chain(&rest)
        .flat_map(|q| {
            q.legs
                .bm25
                .iter()
                .flatten()
                .chain(q.legs.vector.iter().flatten())
        })
        .map(|h| h.card)
        .collect::<HashSet<u64>>()
        .into_iter()
        .collect();
    let ids = engine.card_ids(&keys)?;
    let scorer = Scorer {
        ids: &ids,
        level: set.level,
        matching,
        metric: c.metric,
        weights: &weights,
    };

    // Each point's score on each tuning question.
    let scores: Vec<Vec<f64>> = points
        .iter()
        .map(|p| tuning.iter().map(|q| scorer.value(q, p)).collect())
        .collect();
    let mean =
        |v: &[f64], idx: &[usize]| idx.iter().map(|&i| v[i]).sum::<f64>() / idx.len().max(1) as f64;
    let all: Vec<usize> = (0..tuning.len()).collect();
    let current_index = points.iter().position(|p| p.same(&current)).unwrap_or(0);
    // The best point on some questions. Among points that score alike, the one nearest the
    // current setting: a choice changes as little as the questions ask (and the current
    // point itself wins a tie).
    let best_on = |idx: &[usize]| -> usize {
        let means: Vec<f64> = scores.iter().map(|s| mean(s, idx)).collect();
        let top = means.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mut best = current_index;
        let mut nearest = f64::INFINITY;
        for (i, m) in means.iter().enumerate() {
            if *m >= top - 1e-12 {
                let d = distance(&points[i], &current);
                if d < nearest {
                    best = i;
                    nearest = d;
                }
            }
        }
        best
    };
    let best = best_on(&all);
    // Each point's mean over every tuning question.
    let overall: Vec<f64> = scores.iter().map(|s| mean(s, &all)).collect();
    let in_sample = |i: usize| ScoredPoint {
        point: points[i],
        score: overall[i],
    };

    // Cross-validation: folds by a hash of the question id.
    let fold_of: Vec<usize> = tuning
        .iter()
        .map(|q| {
            let h = situate_core::hash_parts(&[q.query.id.as_bytes()]);
            usize::from_str_radix(&h[..8], 16).unwrap_or(0)
        })
        .collect();
    let mut order: Vec<usize> = all.clone();
    order.sort_by_key(|&i| (fold_of[i], i));
    let mut fold = vec![0usize; tuning.len()];
    for (n, &i) in order.iter().enumerate() {
        fold[i] = n % c.folds;
    }
    let mut diffs = vec![0.0f64; tuning.len()];
    let mut fold_gains = Vec::new();
    let mut fold_choices = Vec::new();
    for f in 0..c.folds {
        let train: Vec<usize> = all.iter().copied().filter(|&i| fold[i] != f).collect();
        let test: Vec<usize> = all.iter().copied().filter(|&i| fold[i] == f).collect();
        let chosen = best_on(&train);
        for &i in &test {
            diffs[i] = scores[chosen][i] - scores[current_index][i];
        }
        fold_gains.push(mean(&diffs, &test));
        fold_choices.push(points[chosen]);
    }
    let n = diffs.len() as f64;
    let gain = diffs.iter().sum::<f64>() / n;
    let sd = (diffs.iter().map(|d| (d - gain).powi(2)).sum::<f64>() / (n - 1.0).max(1.0)).sqrt();
    let standard_error = sd / n.sqrt();
    let in_sample_gain = overall[best] - overall[current_index];
    let (change, reason) = if best == current_index || in_sample_gain <= 1e-12 {
        (
            false,
            "no point of the grid scores above the current setting on these questions".to_string(),
        )
    } else if gain <= 0.0 {
        (
            false,
            format!(
                "the best point gains {in_sample_gain:+.4} on the questions it was chosen on, but the choices made on the other folds score {gain:+.4} on questions they were not chosen on: no gain that holds"
            ),
        )
    } else if gain <= 2.0 * standard_error {
        (
            false,
            format!(
                "the gain on unseen questions ({gain:+.4}) is within noise (twice its standard error is {:.4}): more questions would tell",
                2.0 * standard_error
            ),
        )
    } else {
        (
            true,
            format!(
                "the choices made on the other folds gain {gain:+.4} on questions they were not chosen on (standard error {standard_error:.4})"
            ),
        )
    };
    let chosen = if change { best } else { current_index };
    let chosen_point = points[chosen];

    // [answer] min_score on the controls, with the chosen point's scores.
    let top = |qs: &[Question]| -> Vec<Option<f32>> {
        qs.iter()
            .map(|q| scorer.ranking(q, &chosen_point).first().map(|r| r.1))
            .collect()
    };
    let min_score = if controls.is_empty() {
        None
    } else {
        crate::report::abstain(&top(&tuning), &top(&controls)).map(|a| MinScore {
            min_score: a.threshold,
            controls_answered: a.unanswerable_above_threshold,
            answerable_lost: a.answerable_lost,
            curve: {
                let mut c: Vec<(f32, f64, f64)> = a
                    .curve
                    .iter()
                    .map(|&(_, t, lost, abstained)| (t, 1.0 - abstained, lost))
                    .collect();
                c.dedup_by(|x, y| x.0 == y.0);
                c
            },
        })
    };
    let held_out = (!rest.is_empty()).then(|| {
        let on = |p: &TunePoint| {
            rest.iter().map(|q| scorer.value(q, p)).sum::<f64>() / rest.len() as f64
        };
        HeldOut {
            questions: rest.len(),
            current: on(&current),
            chosen: on(&chosen_point),
            best: on(&points[best]),
        }
    });
    let single = |leg: Option<&Vec<IndexHit>>, q: &Question| -> f64 {
        leg.map_or(0.0, |hits| {
            scorer.metric_of(
                &q.query,
                &scorer.reduce(hits.iter().map(|h| (h.card, h.score))),
            )
        })
    };
    let cw_index = scorer.weight_index(current.context_weight);
    let bm25_alone = tuning
        .iter()
        .map(|q| single(q.legs.bm25.get(cw_index), q))
        .sum::<f64>()
        / n;
    let vector_alone = tuning
        .first()
        .is_some_and(|q| q.legs.vector.is_some())
        .then(|| {
            tuning
                .iter()
                .map(|q| single(q.legs.vector.as_ref(), q))
                .sum::<f64>()
                / n
        });
    let mut ranked: Vec<usize> = (0..points.len()).collect();
    ranked.sort_by(|&a, &b| overall[b].total_cmp(&overall[a]).then(a.cmp(&b)));
    let mut settings = chosen_point.settings();
    if !change {
        settings = current_plan.fusion_settings();
        settings.context_weight = Some(current.context_weight);
        settings.fetch = Some(current.fetch);
    }
    Ok(TuneAnswer {
        index: engine.dir().to_path_buf(),
        questions_file: req.questions.clone(),
        questions: tuning.len(),
        controls: controls.len(),
        metric: c.metric.to_string(),
        folds: c.folds,
        grid_points: points.len(),
        bm25_alone,
        vector_alone,
        current: in_sample(current_index),
        best: in_sample(best),
        in_sample_gain,
        out_of_sample: OutOfSample {
            gain,
            standard_error,
            fold_gains,
            fold_choices,
        },
        decision: if change { "change" } else { "keep" }.into(),
        reason,
        settings,
        min_score,
        held_out,
        top: ranked.iter().take(10).map(|&i| in_sample(i)).collect(),
        grid: c
            .request
            .report_grid
            .then(|| (0..points.len()).map(in_sample).collect()),
        written: None,
    })
}

/// `weights` with `w` among them.
fn with_weight(mut weights: Vec<f32>, w: f32) -> Vec<f32> {
    if !weights.iter().any(|x| (x - w).abs() < 1e-6) {
        weights.push(w);
    }
    weights
}

/// How golden chunks are matched: as `situate eval` does.
fn matching(asked: Option<&str>, set: &EvalSet) -> Result<Matching> {
    match asked {
        Some("id") => Ok(Matching::Id),
        Some("text") if set.format == "anthropic" => Ok(Matching::StrippedText),
        Some("text") => Err(EngineError::field_error(
            "matching",
            "text matching needs golden chunk texts, which only Anthropic's set has",
        )),
        Some(m) => Err(EngineError::field_error(
            "matching",
            format!("id or text, not {m:?}"),
        )),
        None if set.format == "anthropic" => Ok(Matching::StrippedText),
        None => Ok(Matching::Id),
    }
}

/// How far a point is from another, for ties: a change of fusion counts 1, of RRF's k,
/// the context weight or the fetch depth ½ each, and α by how far it moves.
fn distance(a: &TunePoint, b: &TunePoint) -> f64 {
    let differs = |x: bool| if x { 1.0 } else { 0.0 };
    differs(a.fusion != b.fusion)
        + 0.5 * differs(a.rrf_k != b.rrf_k)
        + 0.5 * differs((a.context_weight - b.context_weight).abs() > 1e-6)
        + 0.5 * differs(a.fetch != b.fetch)
        + f64::from((a.alpha - b.alpha).abs())
}

/// Every point of the grid, in a stable order: fusion, RRF k, context weight, fetch, α.
fn grid(c: &CheckedTune, context_weights: &[f32]) -> Vec<TunePoint> {
    let mut out = Vec::new();
    for &fusion in &c.fusions {
        let ks: Vec<Option<f32>> = if fusion == "rrf" {
            c.rrf_ks.iter().map(|&k| Some(k)).collect()
        } else {
            vec![None]
        };
        for rrf_k in ks {
            for &context_weight in context_weights {
                for &fetch in &c.fetches {
                    for &alpha in &c.alphas {
                        out.push(TunePoint {
                            fusion,
                            rrf_k,
                            alpha,
                            context_weight,
                            fetch,
                        });
                    }
                }
            }
        }
    }
    out
}

/// Scores rankings made from a question's legs.
struct Scorer<'a> {
    ids: &'a HashMap<u64, CardIds>,
    level: Level,
    matching: Matching,
    metric: TuneMetric,
    weights: &'a [f32],
}

/// One ranked item: its id at the judged level, its score and (for text matching) its text.
type Ranked<'a> = (&'a str, f32, &'a str);

impl<'a> Scorer<'a> {
    fn weight_index(&self, w: f32) -> usize {
        self.weights
            .iter()
            .position(|x| (x - w).abs() < 1e-6)
            .unwrap_or(0)
    }

    /// The question's ranking at `p`: its legs fused, de-duplicated by chunk and then by
    /// the judged id, as a search and `situate eval` do.
    fn ranking(&self, q: &Question, p: &TunePoint) -> Vec<Ranked<'a>> {
        let bm25 = q
            .legs
            .bm25
            .get(self.weight_index(p.context_weight))
            .map_or(&[][..], Vec::as_slice);
        let vector = q.legs.vector.as_deref().unwrap_or(&[]);
        let mut req = situate_search::SearchRequest::new(&q.query.text, DEPTH);
        req.fetch = p.fetch;
        req.fusion = p.fusion();
        req.bm25_weight = 1.0 - p.alpha;
        req.vector_weight = p.alpha;
        let fused = situate_search::fuse_legs(bm25, vector, &req);
        self.reduce(fused.iter().map(|f| (f.card, f.score)))
    }

    /// Card keys in rank order to the judged ids, duplicates (by chunk, then by id) dropped.
    fn reduce(&self, ranked: impl Iterator<Item = (u64, f32)>) -> Vec<Ranked<'a>> {
        let mut chunks = HashSet::new();
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for (card, score) in ranked {
            let Some(c) = self.ids.get(&card) else {
                continue;
            };
            if !chunks.insert(c.chunk_id.as_str()) {
                continue;
            }
            let id = match self.level {
                Level::Chunk => c.chunk_id.as_str(),
                Level::Document => c.document_id.as_str(),
            };
            if seen.insert(id) {
                out.push((id, score, c.original_text.as_str()));
                if out.len() == DEPTH {
                    break;
                }
            }
        }
        out
    }

    /// The metric of one ranking for one question.
    fn metric_of(&self, q: &EvalQuery, ranking: &[Ranked<'_>]) -> f64 {
        let ids: Vec<String> = ranking.iter().map(|r| r.0.to_string()).collect();
        match self.metric {
            TuneMetric::Ndcg10 => ndcg_at(&ids, &q.judgments, 10),
            TuneMetric::Mrr10 => mrr_at(&ids, &q.judgments, 10),
            TuneMetric::Recall(k) => recall_at(&ids, &q.judgments, k),
            TuneMetric::Pass(k) => match self.matching {
                Matching::Id => {
                    let golden: Vec<String> = q
                        .judgments
                        .0
                        .iter()
                        .filter(|(_, g)| **g > 0.0)
                        .map(|(id, _)| id.clone())
                        .collect();
                    pass_at(&ids, &golden, k)
                }
                Matching::StrippedText => {
                    let keys: Vec<String> = ranking
                        .iter()
                        .map(|r| crate::dataset::stripped(r.2))
                        .collect();
                    pass_at(&keys, &q.golden_texts, k)
                }
            },
        }
    }

    fn value(&self, q: &Question, p: &TunePoint) -> f64 {
        self.metric_of(&q.query, &self.ranking(q, p))
    }
}
