//! Tuning: [`TuneRequest`] → [`TuneRequest::check`] → [`CheckedTune`], run by
//! `situate_eval::tune` (which reads question sets and scores rankings) into a
//! [`TuneAnswer`]; [`write_tuned`] puts a choice into `situate.toml`.
//!
//! A grid of search settings (fusion × α × RRF k × context weight × fetch depth) is scored on
//! the user's questions by k-fold cross-validation: each fold's questions are scored with
//! the setting that did best on the other folds, which is an honest estimate of what the
//! choice gains on questions it was not chosen on. The answer changes nothing unless that
//! out-of-sample gain is clear of noise.

use crate::settings::{SearchPlan, SearchSettings, Settings};
use crate::{EngineError, Result};
use serde::{Deserialize, Serialize};
use situate_search::fusion::Fusion;
use std::path::{Path, PathBuf};

/// The grid's axes; each unset one takes its default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TuneGrid {
    /// Fusion functions (default: rrf, minmax, tm2c2, zscore).
    pub fusions: Option<Vec<String>>,
    /// The vector leg's share α, each from 0 to 1 (default 0.1, 0.2, …, 0.9).
    pub alphas: Option<Vec<f32>>,
    /// RRF's k, for `rrf` (default 10, 30, 60, 100).
    pub rrf_ks: Option<Vec<f32>>,
    /// Context weights of contextual BM25 (default 0.25, 0.5, 1 when the index holds
    /// contexts; else the current weight alone: with no context it changes nothing).
    pub context_weights: Option<Vec<f32>>,
    /// Hits each leg contributes to the fusion (default 50, 100, 150).
    pub fetches: Option<Vec<usize>>,
}

/// `situate tune`, the admin job `tune` and `Index.tune`: what to tune on and how.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TuneRequest {
    /// The questions with their golden chunks: situate's question file (`situate eval-set`),
    /// a BEIR folder or Anthropic's folder. They are searched in the index as it is (a
    /// folder's corpus is not ingested).
    pub questions: PathBuf,
    /// Unanswerable control questions (any question file) to calibrate `[answer]
    /// min_score` on.
    #[serde(default)]
    pub controls: Option<PathBuf>,
    /// The qrels split of a BEIR folder (default test).
    #[serde(default)]
    pub split: Option<String>,
    /// Tune on the first N questions only.
    #[serde(default)]
    pub queries: Option<usize>,
    /// Also score the choice on the questions after the first `queries`, which tuning
    /// never saw.
    #[serde(default)]
    pub test_rest: bool,
    /// Folds of the cross-validation (default 5; 2 to the number of questions).
    #[serde(default)]
    pub folds: Option<usize>,
    /// What is maximised: `ndcg@10` (default), `pass@K`, `recall@K` (K from 1 to 100) or
    /// `mrr@10`.
    #[serde(default)]
    pub metric: Option<String>,
    /// `id` or `text` (default: text for Anthropic's set, id otherwise).
    #[serde(default)]
    pub matching: Option<String>,
    /// The grid.
    #[serde(default)]
    pub grid: TuneGrid,
    /// Also answer every grid point's score (`grid`), for a table across sets.
    #[serde(default)]
    pub report_grid: bool,
}

/// What is maximised.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TuneMetric {
    /// nDCG@10.
    Ndcg10,
    /// Pass@K (the cookbook's: the share of golden chunks in the top K).
    Pass(usize),
    /// Recall@K by id.
    Recall(usize),
    /// MRR@10.
    Mrr10,
}

impl std::fmt::Display for TuneMetric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TuneMetric::Ndcg10 => f.write_str("ndcg@10"),
            TuneMetric::Pass(k) => write!(f, "pass@{k}"),
            TuneMetric::Recall(k) => write!(f, "recall@{k}"),
            TuneMetric::Mrr10 => f.write_str("mrr@10"),
        }
    }
}

impl std::str::FromStr for TuneMetric {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let depth = |k: &str| match k.parse::<usize>() {
            Ok(k) if (1..=100).contains(&k) => Ok(k),
            _ => Err(format!("{s:?}: K must be from 1 to 100")),
        };
        match s.trim() {
            "ndcg@10" => Ok(TuneMetric::Ndcg10),
            "mrr@10" => Ok(TuneMetric::Mrr10),
            m => match m.split_once('@') {
                Some(("pass", k)) => Ok(TuneMetric::Pass(depth(k)?)),
                Some(("recall", k)) => Ok(TuneMetric::Recall(depth(k)?)),
                _ => Err(format!(
                    "unknown metric {s:?}: expected ndcg@10, pass@K, recall@K or mrr@10"
                )),
            },
        }
    }
}

/// One point of the grid.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, schemars::JsonSchema)]
pub struct TunePoint {
    /// `rrf`, `minmax`, `tm2c2` or `zscore`.
    pub fusion: &'static str,
    /// RRF's k (`rrf` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rrf_k: Option<f32>,
    /// The vector leg's share.
    pub alpha: f32,
    /// The context weight of contextual BM25.
    pub context_weight: f32,
    /// Hits per leg before fusion.
    pub fetch: usize,
}

impl TunePoint {
    /// The fusion function.
    pub fn fusion(&self) -> Fusion {
        match self.fusion {
            "minmax" => Fusion::MinMax,
            "tm2c2" => Fusion::Tm2c2,
            "zscore" => Fusion::ZScore,
            _ => Fusion::Rrf {
                k: self.rrf_k.unwrap_or(60.0),
            },
        }
    }

    /// The point of a checked plan: its fusion, α (the vector weight's share of the two,
    /// which is all a ranking sees of them), context weight and fetch.
    pub fn of_plan(plan: &SearchPlan) -> TunePoint {
        let (fusion, rrf_k) = match plan.fusion {
            Fusion::Rrf { k } => ("rrf", Some(k)),
            other => (other.name(), None),
        };
        let total = plan.bm25_weight + plan.vector_weight;
        TunePoint {
            fusion,
            rrf_k,
            alpha: if total > 0.0 {
                plan.vector_weight / total
            } else {
                0.5
            },
            context_weight: plan.context_weight,
            fetch: plan.fetch,
        }
    }

    /// The point as `[search]` settings.
    pub fn settings(&self) -> SearchSettings {
        SearchSettings {
            fusion: Some(self.fusion.to_string()),
            rrf_k: self.rrf_k,
            alpha: Some(self.alpha),
            context_weight: Some(self.context_weight),
            fetch: Some(self.fetch),
            ..SearchSettings::default()
        }
    }

    /// Whether two points rank alike (α and weights compared to 1e-4).
    pub fn same(&self, other: &TunePoint) -> bool {
        self.fusion == other.fusion
            && self.rrf_k.unwrap_or(0.0) == other.rrf_k.unwrap_or(0.0)
            && (self.alpha - other.alpha).abs() < 1e-4
            && (self.context_weight - other.context_weight).abs() < 1e-4
            && self.fetch == other.fetch
    }
}

impl std::fmt::Display for TunePoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.rrf_k {
            Some(k) => write!(f, "rrf k {k}")?,
            None => f.write_str(self.fusion)?,
        }
        write!(
            f,
            ", alpha {:.2}, context weight {}, fetch {}",
            self.alpha, self.context_weight, self.fetch
        )
    }
}

/// A checked tuning request.
#[derive(Debug, Clone)]
pub struct CheckedTune {
    /// The request as given.
    pub request: TuneRequest,
    /// The current settings (`situate.toml`'s `[search]`; the index's fusion is laid under
    /// them when the run opens the index).
    pub current: SearchPlan,
    /// The metric.
    pub metric: TuneMetric,
    /// The folds.
    pub folds: usize,
    /// The qrels split.
    pub split: String,
    /// The fusion axis (names).
    pub fusions: Vec<&'static str>,
    /// The α axis.
    pub alphas: Vec<f32>,
    /// The RRF k axis.
    pub rrf_ks: Vec<f32>,
    /// The context weights, when given (else chosen by whether the index holds contexts).
    pub context_weights: Option<Vec<f32>>,
    /// The fetch axis.
    pub fetches: Vec<usize>,
}

/// The grid's defaults.
pub mod tune_defaults {
    /// Folds.
    pub const FOLDS: usize = 5;
    /// α: 0.1 to 0.9.
    pub const ALPHAS: [f32; 9] = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9];
    /// RRF's k.
    pub const RRF_KS: [f32; 4] = [10.0, 30.0, 60.0, 100.0];
    /// Context weights, when the index holds contexts.
    pub const CONTEXT_WEIGHTS: [f32; 3] = [0.25, 0.5, 1.0];
    /// Fetch depths.
    pub const FETCHES: [usize; 3] = [50, 100, 150];
    /// The most grid points one run may score.
    pub const MAX_POINTS: usize = 20_000;
}

impl TuneRequest {
    /// Checks every field; `settings`' `[search]` is the current setting the gain is
    /// measured against.
    pub fn check(&self, settings: &Settings) -> Result<CheckedTune> {
        use tune_defaults as d;
        let bad = |field: &str, m: String| Err(EngineError::field_error(field, m));
        let current = settings.search.clone().plan(&settings.default_llm())?;
        let metric: TuneMetric = self
            .metric
            .as_deref()
            .unwrap_or("ndcg@10")
            .parse()
            .map_err(|e| EngineError::field_error("metric", e))?;
        let folds = self.folds.unwrap_or(d::FOLDS);
        if !(2..=100).contains(&folds) {
            return bad("folds", format!("must be from 2 to 100, not {folds}"));
        }
        if self.queries == Some(0) {
            return bad("queries", "must be at least 1".into());
        }
        if self.test_rest && self.queries.is_none() {
            return bad(
                "test_rest",
                "needs queries: the first N questions are tuned on, the rest tested".into(),
            );
        }
        let fusions = match &self.grid.fusions {
            None => vec!["rrf", "minmax", "tm2c2", "zscore"],
            Some(v) if v.is_empty() => return bad("grid.fusions", "is empty".into()),
            Some(v) => v
                .iter()
                .map(|f| match f.trim() {
                    "rrf" => Ok("rrf"),
                    "minmax" => Ok("minmax"),
                    "tm2c2" => Ok("tm2c2"),
                    "zscore" => Ok("zscore"),
                    other => Err(EngineError::field_error(
                        "grid.fusions",
                        format!("unknown fusion {other:?}: expected {}", Fusion::NAMES),
                    )),
                })
                .collect::<Result<Vec<_>>>()?,
        };
        let floats = |field: &str, v: &Option<Vec<f32>>, default: &[f32], lo: f32, hi: f32| {
            let v = v.clone().unwrap_or_else(|| default.to_vec());
            if v.is_empty() {
                return Err(EngineError::field_error(field, "is empty"));
            }
            for x in &v {
                if !(x.is_finite() && *x >= lo && *x <= hi) {
                    return Err(EngineError::field_error(
                        field,
                        format!("{x} is out of range: each must be from {lo} to {hi}"),
                    ));
                }
            }
            Ok(v)
        };
        let alphas = floats("grid.alphas", &self.grid.alphas, &d::ALPHAS, 0.0, 1.0)?;
        let rrf_ks = floats("grid.rrf_ks", &self.grid.rrf_ks, &d::RRF_KS, 0.0, 1e6)?;
        let context_weights = match &self.grid.context_weights {
            None => None,
            w => Some(floats("grid.context_weights", w, &[], 0.0, 100.0)?),
        };
        let fetches = self
            .grid
            .fetches
            .clone()
            .unwrap_or_else(|| d::FETCHES.to_vec());
        if fetches.is_empty() || fetches.iter().any(|f| !(1..=1000).contains(f)) {
            return bad(
                "grid.fetches",
                format!("each must be from 1 to 1000, not {fetches:?}"),
            );
        }
        let points = (fusions.iter().filter(|f| **f != "rrf").count()
            + usize::from(fusions.contains(&"rrf")) * rrf_ks.len())
            * alphas.len()
            * context_weights
                .as_ref()
                .map_or(d::CONTEXT_WEIGHTS.len(), Vec::len)
            * fetches.len();
        if points > d::MAX_POINTS {
            return bad(
                "grid",
                format!(
                    "{points} points: at most {} (fewer values per axis)",
                    d::MAX_POINTS
                ),
            );
        }
        Ok(CheckedTune {
            request: self.clone(),
            current,
            metric,
            folds,
            split: self.split.clone().unwrap_or_else(|| "test".into()),
            fusions,
            alphas,
            rrf_ks,
            context_weights,
            fetches,
        })
    }
}

/// A point and its mean score.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ScoredPoint {
    /// The settings.
    #[serde(flatten)]
    pub point: TunePoint,
    /// The metric's mean over the questions.
    pub score: f64,
}

/// The cross-validated estimate.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct OutOfSample {
    /// Mean gain per question of the setting chosen on the other folds over the current
    /// setting.
    pub gain: f64,
    /// The standard error of that mean (paired differences over questions).
    pub standard_error: f64,
    /// Each fold's gain.
    pub fold_gains: Vec<f64>,
    /// The setting each fold's training part chose.
    pub fold_choices: Vec<TunePoint>,
}

/// `[answer] min_score` calibrated on the controls.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct MinScore {
    /// The threshold: the best hit's score that 95% of the answerable questions reach.
    pub min_score: f32,
    /// Share of controls still answered at it (their best hit scores at least that).
    pub controls_answered: f64,
    /// Share of answerable questions lost at it.
    pub answerable_lost: f64,
    /// Other thresholds: (threshold, controls answered, answerable lost).
    pub curve: Vec<(f32, f64, f64)>,
}

/// The choice scored on the questions tuning never saw (`test_rest`).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct HeldOut {
    /// Questions scored.
    pub questions: usize,
    /// The current setting's score on them.
    pub current: f64,
    /// The choice's score on them.
    pub chosen: f64,
    /// The best point in sample's score on them (what `change` would have given, when the
    /// decision was to keep).
    pub best: f64,
}

/// What tuning found and decided.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct TuneAnswer {
    /// The index tuned.
    pub index: PathBuf,
    /// The questions.
    pub questions_file: PathBuf,
    /// Answerable questions tuned on.
    pub questions: usize,
    /// Control questions.
    pub controls: usize,
    /// The metric.
    pub metric: String,
    /// Folds.
    pub folds: usize,
    /// Grid points scored.
    pub grid_points: usize,
    /// The legs alone (BM25 at the current context weight, vectors), for comparison.
    pub bm25_alone: f64,
    /// The vector leg alone, when the index has vectors.
    pub vector_alone: Option<f64>,
    /// The current setting, scored on every tuning question.
    pub current: ScoredPoint,
    /// The best point on every tuning question.
    pub best: ScoredPoint,
    /// `best` − `current` on the questions it was chosen on (optimistic).
    pub in_sample_gain: f64,
    /// The cross-validated gain (honest).
    pub out_of_sample: OutOfSample,
    /// `change` or `keep`.
    pub decision: String,
    /// Why, in words.
    pub reason: String,
    /// The settings to use (`best`'s when the decision is `change`, else the current ones).
    pub settings: SearchSettings,
    /// `[answer] min_score` calibrated on the controls, with the chosen settings.
    pub min_score: Option<MinScore>,
    /// The choice on the held-out questions (`test_rest`).
    pub held_out: Option<HeldOut>,
    /// The ten best points.
    pub top: Vec<ScoredPoint>,
    /// Every point's score (`report_grid`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grid: Option<Vec<ScoredPoint>>,
    /// Where the choice was written (`--write`).
    pub written: Option<PathBuf>,
}

/// Writes a tuning's choice into the settings file `path` (created when missing), keeping
/// everything else in it, comments included: `[search]`'s fusion keys are replaced by the
/// choice (`bm25_weight` and `vector_weight` removed: `alpha` says both), and `[answer]
/// min_score` set when the answer calibrated one. A comment above `[search]`'s keys says
/// where they came from. Written atomically.
pub fn write_tuned(path: &Path, answer: &TuneAnswer) -> Result<()> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => {
            return Err(EngineError::Io {
                op: "cannot read",
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| {
        EngineError::Invalid(format!(
            "{} is not valid TOML, so the choice was not written: {e}",
            path.display()
        ))
    })?;
    let s = &answer.settings;
    let search = doc
        .entry("search")
        .or_insert_with(|| toml_edit::Item::Table(toml_edit::Table::new()))
        .as_table_mut()
        .ok_or_else(|| {
            EngineError::Invalid(format!("{}: `search` is not a table", path.display()))
        })?;
    for key in [
        "fusion",
        "rrf_k",
        "alpha",
        "bm25_weight",
        "vector_weight",
        "context_weight",
        "fetch",
    ] {
        search.remove(key);
    }
    let f = |x: f32| toml_edit::value(((x as f64) * 1e4).round() / 1e4);
    if let Some(v) = &s.fusion {
        search.insert("fusion", toml_edit::value(v.as_str()));
    }
    if let Some(v) = s.rrf_k {
        search.insert("rrf_k", f(v));
    }
    if let Some(v) = s.alpha {
        search.insert("alpha", f(v));
    }
    if let Some(v) = s.context_weight {
        search.insert("context_weight", f(v));
    }
    if let Some(v) = s.fetch {
        search.insert("fetch", toml_edit::value(v as i64));
    }
    let note = format!(
        "\n# situate tune on {} ({} questions, {}, {} folds): {} {:+.4} out of sample (±{:.4}), {:+.4} in sample.\n",
        answer.questions_file.display(),
        answer.questions,
        answer.metric,
        answer.folds,
        answer.decision,
        answer.out_of_sample.gain,
        answer.out_of_sample.standard_error,
        answer.in_sample_gain,
    );
    // The table's own comments are kept; an earlier tuning's line is replaced.
    let kept: String = search
        .decor()
        .prefix()
        .and_then(|p| p.as_str())
        .unwrap_or("")
        .lines()
        .filter(|l| !l.starts_with("# situate tune on"))
        .map(|l| format!("{l}\n"))
        .collect();
    search
        .decor_mut()
        .set_prefix(format!("{}{}", kept.trim_end_matches('\n'), note));
    if let Some(m) = &answer.min_score {
        let a = doc
            .entry("answer")
            .or_insert_with(|| toml_edit::Item::Table(toml_edit::Table::new()))
            .as_table_mut()
            .ok_or_else(|| {
                EngineError::Invalid(format!("{}: `answer` is not a table", path.display()))
            })?;
        a.insert(
            "min_score",
            toml_edit::value((m.min_score as f64 * 1e6).floor() / 1e6),
        );
    }
    let out = doc.to_string();
    // What is written must read back as settings.
    toml::from_str::<Settings>(&out).map_err(|e| {
        EngineError::Internal(format!("the tuned settings would not read back: {e}"))
    })?;
    let tmp = path.with_extension("toml.partial");
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(out.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|source| {
        let _ = std::fs::remove_file(&tmp);
        EngineError::Io {
            op: "cannot write",
            path: path.to_path_buf(),
            source,
        }
    })
}
