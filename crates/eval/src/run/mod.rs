//! Evaluation: runs an evaluation set through every configuration asked for and writes
//! `report.md`, `report.json`, `failure.svg` and one `queries-<configuration>.jsonl` per
//! configuration ([`run_eval`]); checks a team's own set against an index ([`check_set`]).
//!
//! A configuration is `MODE+CONTEXT[+RERANK]`: MODE `bm25`, `vector` or `hybrid`; CONTEXT
//! `none` (the original text alone), `structural`, `file:CONTEXTS.jsonl` (LLM contexts
//! generated once and exported with `situate contexts export`, imported into an index of
//! the corpus built without contexts: no LLM call), or, for a set evaluated against an
//! existing index, `indexed` (whatever contexts that index holds); RERANK `none` or any
//! reranker a search takes (`cross-encoder:DIR`, `llm`, `cohere:MODEL`, ...), which
//! re-scores the fused top `rerank_depth` (150) chunks of every query, the rest of a
//! query's 100 following in fused order ([`Engine::search_reranked`], as in a search). The
//! first configuration is the baseline of the "reduction" column.
//!
//! Every query runs through the same checked [`SearchPlan`](situate_engine::SearchPlan) a search
//! uses ([`SearchSettings::plan`]): the set's configuration decides the mode, BM25 plain
//! (context `none`) or contextual, and the reranker; `k` is 100.

use crate::answers::{self, AnswerRecord, AnswerRow, CitedRecord};
use crate::dataset::{Corpus, EvalQuery, EvalSet, Level, Matching, read_own};
use crate::report::{self, ConfigReport, Retrieved};
use crate::{Judgments, read_questions};
use situate_engine::{
    Access, AnswerModels, AnswerResponse, CreateSettings, Engine, EngineError, IngestOptions,
    Result,
};
use situate_engine::{AnswerMode, AnswerPlan, SearchSettings};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

mod asking;
mod check;
mod config;
mod index;
mod job;

use asking::*;
pub use check::*;
pub use config::*;
use index::*;
pub use job::EvalJob;

/// An I/O error on `path`, as the engine reports one.
fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> EngineError + 'a {
    move |source| EngineError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Hits fetched per query (the deepest metric is recall@100).
pub const EVAL_DEPTH: usize = 100;

/// The defaults of an evaluation, for `situate eval`'s flags and an `eval` job alike.
pub mod defaults {
    /// The configurations compared; the first is the baseline.
    pub const CONFIGS: &str = "bm25+none,bm25+structural";
    /// The qrels split of a BEIR folder.
    pub const SPLIT: &str = "test";
    /// Largest chunk in tokens when the corpus is chunked.
    pub const MAX_TOKENS: usize = 256;
    /// Overlap in tokens when the corpus is chunked.
    pub const OVERLAP: usize = 32;
    /// Embedder of the vector and hybrid configurations.
    pub const EMBEDDER: &str = "auto";

    /// [`CONFIGS`] as a list.
    pub fn configs() -> Vec<String> {
        CONFIGS.split(',').map(String::from).collect()
    }
}

/// An evaluation run by the service (an `eval` job's `result`): the report, with the
/// report's name and the run's notes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EvalAnswer {
    /// The report's name (`GET /v1/evals/{id}`).
    pub id: String,
    /// The report (`report.json`).
    #[serde(flatten)]
    pub report: EvalReport,
    /// What the run noticed (skipped configurations, cut inputs...).
    pub notes: Vec<String>,
}

/// What to evaluate and how.
#[derive(Debug, Clone)]
pub struct EvalRequest {
    /// The set: a BEIR folder, Anthropic's folder or a `.jsonl` of questions.
    pub dataset: PathBuf,
    /// Where the reports go.
    pub out: PathBuf,
    /// Configurations `MODE+CONTEXT[+RERANK]`; the first is the baseline.
    pub configs: Vec<String>,
    /// Only the first N queries.
    pub queries: Option<usize>,
    /// The qrels split of a BEIR folder.
    pub split: String,
    /// `id` or `text` (default: text for Anthropic's set, id otherwise).
    pub matching: Option<String>,
    /// Unanswerable control questions (any question file [`read_questions`] reads).
    pub controls: Option<PathBuf>,
    /// Where evaluation indexes are built and kept [OUT/indexes].
    pub work: Option<PathBuf>,
    /// Largest chunk in tokens when the corpus is chunked.
    pub max_tokens: usize,
    /// Overlap in tokens when the corpus is chunked.
    pub overlap: usize,
    /// Embedder of vector and hybrid configurations.
    pub embedder: String,
    /// Search settings every configuration shares (context weight, fusion, leg weights,
    /// rerank depth); the configuration sets the mode, BM25 kind and reranker, and `k` is
    /// [`EVAL_DEPTH`].
    pub search: SearchSettings,
    /// What `llm` means as a reranker.
    pub default_llm: String,
    /// The index a set without a corpus (a `.jsonl` of questions) is evaluated against.
    pub index: PathBuf,
    /// Answer evaluation (`--answers`): `None` evaluates retrieval alone.
    pub answers: Option<AnswerEval>,
}

/// What `--answers` asks for: every question answered by `plan`'s model in each mode, and
/// the answers scored against the set's gold answers ([`crate::answers`]).
#[derive(Debug, Clone)]
pub struct AnswerEval {
    /// `retrieval` (one row per configuration: its best passages) and/or `full` (one row:
    /// the whole base as one cached prompt, on the first configuration's index).
    pub modes: Vec<AnswerMode>,
    /// How answers are written (`[answer]` and the flags); its mode is set per row.
    pub plan: AnswerPlan,
}

impl AnswerEval {
    /// Parses `--answers retrieval,full` over a checked plan.
    pub fn new(modes: &[String], plan: AnswerPlan) -> Result<AnswerEval> {
        let mut parsed = Vec::new();
        for m in modes {
            let mode = match m.trim() {
                "retrieval" => AnswerMode::Retrieval,
                "full" => AnswerMode::Full,
                other => {
                    return Err(EngineError::field_error(
                        "answers",
                        format!(
                            "takes retrieval and/or full, not {other:?} (auto would choose per question; name the mode to measure)"
                        ),
                    ));
                }
            };
            if !parsed.contains(&mode) {
                parsed.push(mode);
            }
        }
        if parsed.is_empty() {
            return Err(EngineError::field_error(
                "answers",
                "needs a mode: retrieval, full or both",
            ));
        }
        Ok(AnswerEval {
            modes: parsed,
            plan,
        })
    }
}

/// The report of a run (`report.json`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct EvalReport {
    /// The set's path.
    pub dataset: PathBuf,
    /// The set's name.
    pub name: String,
    /// Its format.
    pub format: &'static str,
    /// How golden chunks were matched.
    pub matching: Matching,
    /// What golden ids name.
    pub level: Level,
    /// Queries with an answer.
    pub answerable_queries: usize,
    /// Queries without one.
    pub unanswerable_queries: usize,
    /// Chunk size.
    pub max_tokens: usize,
    /// Chunk overlap.
    pub overlap: usize,
    /// The context weight of contextual BM25.
    pub context_weight: f32,
    /// One row per configuration.
    pub configurations: Vec<ConfigReport>,
    /// One row per configuration and answer mode (`--answers`).
    pub answers: Vec<AnswerRow>,
}

/// What [`run_eval`] produced.
#[derive(Debug)]
pub struct EvalOutcome {
    /// The report (also in `OUT/report.json`).
    pub report: EvalReport,
    /// The comparison as a markdown table (also in `OUT/report.md`).
    pub table: String,
    /// Things worth telling (contexts imported, and how many were skipped).
    pub notes: Vec<String>,
}

/// Unanswerable control questions from any question file.
pub(crate) fn read_controls(path: &Path) -> Result<Vec<EvalQuery>> {
    Ok(read_questions(path)?
        .into_iter()
        .map(|(id, text)| EvalQuery {
            id: format!("control:{id}"),
            text,
            judgments: Judgments::default(),
            golden_texts: vec![],
            unanswerable: true,
            answers: vec![],
        })
        .collect())
}

/// Runs the set through every configuration and writes the reports into `req.out`.
/// `on_query` is called after each query with (queries done, queries in all).
pub fn run_eval(req: &EvalRequest, on_query: &mut dyn FnMut(u64, u64)) -> Result<EvalOutcome> {
    let mut set = EvalSet::load(&req.dataset, &req.split)?;
    if let Some(n) = req.queries {
        set.truncate(n);
    }
    let (configs, plans, matching) = checked_configs(req, &set)?;
    let mut queries = set.queries.clone();
    if let Some(c) = &req.controls {
        queries.extend(read_controls(c)?);
    }
    std::fs::create_dir_all(&req.out).map_err(io("cannot create", &req.out))?;
    let work = req.work.clone().unwrap_or_else(|| req.out.join("indexes"));

    let answer_rows_count = req.answers.as_ref().map_or(0, |a| {
        a.modes
            .iter()
            .map(|m| match m {
                AnswerMode::Full => 1,
                _ => configs.len(),
            })
            .sum::<usize>()
    });
    let mut progress = Progress {
        done: 0,
        total: ((configs.len() + answer_rows_count) * queries.len()) as u64,
        on_query,
    };
    let mut notes = Vec::new();
    let mut rows = Vec::new();
    let mut answer_rows = Vec::new();
    // One set of answer models for every configuration's index: a model is loaded once.
    let models = AnswerModels::default();
    for (cfg_index, (cfg, plan)) in configs.iter().zip(&plans).enumerate() {
        let mut engine = open_index(req, &set, &work, cfg, &mut notes)?;
        let started = Instant::now();
        let rankings = rank_all(
            &engine,
            cfg,
            plan,
            &queries,
            set.level,
            matching,
            &mut progress,
        )?;
        let qps = queries.len() as f64 / started.elapsed().as_secs_f64().max(1e-9);
        let (metrics, records) = report::score(&queries, &rankings, matching);
        let top = |unanswerable: bool| -> Vec<Option<f32>> {
            queries
                .iter()
                .zip(&rankings)
                .filter(|(q, _)| q.unanswerable == unanswerable)
                .map(|(_, r)| r.first().map(|x| x.score))
                .collect()
        };
        let abstain = report::abstain(&top(false), &top(true));
        let path = req.out.join(format!("queries-{}.jsonl", cfg.name));
        write_jsonl(&path, &records)?;
        if let Some(a) = &req.answers {
            engine.share_answer_models(models.clone());
            let asked = Asking {
                req,
                answers: a,
                cfg,
                first: cfg_index == 0,
                plan,
                queries: &queries,
                level: set.level,
            };
            answer_rows.extend(asked.rows(&engine, &rankings, abstain.as_ref(), &mut progress)?);
        }
        rows.push(ConfigReport {
            name: cfg.name.clone(),
            mode: cfg.mode.clone(),
            context: cfg.context.clone(),
            rerank: cfg.rerank.clone(),
            metrics,
            failure_reduction: None,
            queries_per_second: qps,
            abstain,
        });
    }
    let (report, table) = write_reports(
        req,
        &set,
        &queries,
        matching,
        plans[0].context_weight,
        rows,
        answer_rows,
    )?;
    Ok(EvalOutcome {
        report,
        table,
        notes,
    })
}

/// Counts the queries run (and answers written) for the caller's progress.
struct Progress<'a> {
    done: u64,
    total: u64,
    on_query: &'a mut dyn FnMut(u64, u64),
}

impl Progress<'_> {
    fn step(&mut self) {
        self.done += 1;
        (self.on_query)(self.done, self.total);
    }
}

/// Every configuration parsed and its plan checked before any index is built, and how
/// golden chunks are matched.
fn checked_configs(
    req: &EvalRequest,
    set: &EvalSet,
) -> Result<(Vec<EvalConfig>, Vec<situate_engine::SearchPlan>, Matching)> {
    let existing = set.corpus == Corpus::Existing;
    let configs = req
        .configs
        .iter()
        .map(|c| parse_config(c, existing))
        .collect::<Result<Vec<_>>>()?;
    if configs.is_empty() {
        return Err(EngineError::field_error(
            "configs",
            "no configuration given",
        ));
    }
    let mut names = HashSet::new();
    for c in &configs {
        if !names.insert(c.name.clone()) {
            return Err(EngineError::field_error(
                "configs",
                format!("configuration {} is listed twice", c.name),
            ));
        }
    }
    let plans = configs
        .iter()
        .map(|c| config_plan(&req.search, c, &req.default_llm))
        .collect::<Result<Vec<_>>>()?;
    let matching = match req.matching.as_deref() {
        Some("id") => Matching::Id,
        Some("text") => Matching::StrippedText,
        Some(m) => {
            return Err(EngineError::field_error(
                "matching",
                format!("id or text, not {m:?}"),
            ));
        }
        None if set.format == "anthropic" => Matching::StrippedText,
        None => Matching::Id,
    };
    if matching == Matching::StrippedText && set.format != "anthropic" {
        return Err(EngineError::field_error(
            "matching",
            "text matching needs golden chunk texts, which only Anthropic's set has",
        ));
    }
    Ok((configs, plans, matching))
}

/// The index a configuration is evaluated on: the served one for a set without a corpus,
/// else one built (or reused) for the configuration's context.
fn open_index(
    req: &EvalRequest,
    set: &EvalSet,
    work: &Path,
    cfg: &EvalConfig,
    notes: &mut Vec<String>,
) -> Result<Engine> {
    Ok(match &set.corpus {
        Corpus::Existing => Engine::open(&req.index, Access::Read).map_err(|e| {
            e.within(format!(
                "{} has no corpus of its own: evaluating against the index {}",
                set.name,
                req.index.display()
            ))
        })?,
        Corpus::Beir(path) | Corpus::Anthropic(path) => {
            let format = match &set.corpus {
                Corpus::Beir(_) => situate_ingest::SourceFormat::Beir,
                _ => situate_ingest::SourceFormat::Anthropic,
            };
            build_index(path, format, work, &set.name, cfg, req, notes)?
        }
    })
}

/// Each query's ranking by `plan`, one id per chunk (or per document, at document level).
fn rank_all(
    engine: &Engine,
    cfg: &EvalConfig,
    plan: &situate_engine::SearchPlan,
    queries: &[EvalQuery],
    level: Level,
    matching: Matching,
    progress: &mut Progress<'_>,
) -> Result<Vec<Vec<Retrieved>>> {
    let mut rankings = Vec::with_capacity(queries.len());
    for q in queries {
        let hits = engine
            .query(&q.text, plan, &Default::default())
            .map_err(|e| e.within(format!("configuration {}", cfg.name)))?
            .hits;
        let mut seen = HashSet::new();
        let ranking: Vec<Retrieved> = hits
            .into_iter()
            .filter_map(|h| {
                let id = match level {
                    Level::Chunk => h.chunk_id,
                    Level::Document => h.document_id,
                };
                seen.insert(id.clone()).then(|| Retrieved {
                    rank: 0,
                    id,
                    score: h.score,
                    legs: h.legs,
                    text: (matching == Matching::StrippedText).then_some(h.original_text),
                })
            })
            .enumerate()
            .map(|(i, mut r)| {
                r.rank = i + 1;
                r
            })
            .collect();
        rankings.push(ranking);
        progress.step();
    }
    Ok(rankings)
}

/// The comparison written: `report.md` (with the answers' table), `report.json` and the
/// failure plot; the report and the table returned.
fn write_reports(
    req: &EvalRequest,
    set: &EvalSet,
    queries: &[EvalQuery],
    matching: Matching,
    context_weight: f32,
    mut rows: Vec<ConfigReport>,
    answer_rows: Vec<AnswerRow>,
) -> Result<(EvalReport, String)> {
    let baseline = rows[0].name.clone();
    report::add_reductions(&mut rows, &baseline);
    let answerable = queries.iter().filter(|q| !q.unanswerable).count();
    let table = report::markdown_table(&rows, matching, set.level);
    let title = format!("{} — {} answerable queries", set.name, answerable);
    crate::plot::failure_chart(&rows, &title, &req.out.join("failure.svg"))
        .map_err(|e| EngineError::Internal(format!("drawing the plot: {e}")))?;
    let mut md = report::markdown_report(
        &report::ReportHeader {
            dataset: &req.dataset.display().to_string(),
            name: &set.name,
            format: set.format,
            answerable,
            unanswerable: queries.len() - answerable,
            max_tokens: req.max_tokens,
            overlap: req.overlap,
            context_weight,
        },
        &rows,
        &table,
    );
    let mut table = table;
    if !answer_rows.is_empty() {
        let answers_table = answers::markdown_table(&answer_rows);
        md.push_str(&format!(
            "\n## Answers\n\nEach question answered by the model from the passages given (`retrieval`: the configuration's best {}; `full`: the whole base). EM and F1 as SQuAD defines them, of the answer sentence; contains: a gold answer occurs in it; citation precision: cited passages that are golden or hold a gold answer; grounded: answers given whose citations all hold; controls answered: unanswerable questions that got an answer (should be 0%). A row `…, min_score T` is the row above it with the configuration's abstain threshold T (below) as `[answer] min_score`: questions whose best passage scores under T are not attempted (no model call); T is chosen on this set, so the row is in-sample. Answers per question in `answers-*.jsonl`.\n\n{answers_table}",
            req.answers.as_ref().map_or(0, |a| a.plan.passages)
        ));
        table.push('\n');
        table.push_str(&answers_table);
    }
    let md_path = req.out.join("report.md");
    write_atomically(&md_path, |w| w.write_all(md.as_bytes()))?;
    let report = EvalReport {
        dataset: req.dataset.clone(),
        name: set.name.clone(),
        format: set.format,
        matching,
        level: set.level,
        answerable_queries: answerable,
        unanswerable_queries: queries.len() - answerable,
        max_tokens: req.max_tokens,
        overlap: req.overlap,
        context_weight,
        configurations: rows,
        answers: answer_rows,
    };
    let json_path = req.out.join("report.json");
    write_atomically(&json_path, |w| {
        serde_json::to_writer_pretty(&mut *w, &report).map_err(std::io::Error::from)
    })?;
    Ok((report, table))
}

/// Writes one JSON line per record, atomically.
fn write_jsonl<T: serde::Serialize>(path: &Path, records: &[T]) -> Result<()> {
    write_atomically(path, |w| {
        for r in records {
            serde_json::to_writer(&mut *w, r).map_err(std::io::Error::from)?;
            w.write_all(b"\n")?;
        }
        Ok(())
    })
}

/// Writes `path` through a temporary file, synced, then renamed.
fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> Result<()> {
    let tmp = path.with_extension("partial");
    let result = (|| {
        let mut w = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        write(&mut w)?;
        w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io("cannot write", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_are_shown_to_four_digits_rounded_down() {
        assert_eq!(four_digits_down(0.032_002_047), "0.03200");
        assert_eq!(four_digits_down(12.345_67), "12.34");
        assert_eq!(four_digits_down(1234.9), "1234");
        assert_eq!(four_digits_down(0.0), "0");
    }

    #[test]
    fn rerankers_are_named_for_reports_without_paths_or_options() {
        assert_eq!(rerank_label("none").as_deref(), Some("none"));
        assert_eq!(rerank_label("llm").as_deref(), Some("llm"));
        assert_eq!(
            rerank_label("cross-encoder:/models/ms-marco-MiniLM-L-6-v2/?long=max").as_deref(),
            Some("cross-encoder:ms-marco-MiniLM-L-6-v2")
        );
        assert_eq!(
            rerank_label("llm:/models/qwen2.5-0.5b.gguf").as_deref(),
            Some("llm:qwen2.5-0.5b")
        );
        assert_eq!(
            rerank_label("llm:openai:gpt-4o-mini?base_url=http://x").as_deref(),
            Some("llm:openai:gpt-4o-mini")
        );
        assert_eq!(
            rerank_label("vllm:BAAI/bge-reranker-v2-m3?base_url=http://localhost:8000").as_deref(),
            Some("vllm:BAAI_bge-reranker-v2-m3")
        );
        assert_eq!(rerank_label("magic"), None);
    }

    #[test]
    fn a_configuration_goes_through_the_search_checks() {
        let cfg = parse_config("hybrid+none+none", false).expect("valid");
        let plan = config_plan(&SearchSettings::default(), &cfg, "m").expect("valid");
        assert_eq!(plan.k, EVAL_DEPTH);
        assert_eq!(plan.match_on, situate_core::MatchOn::Plain);
        assert_eq!(plan.rerank, None);
        let bad = SearchSettings {
            context_weight: Some(-2.0),
            ..Default::default()
        };
        let e = config_plan(&bad, &cfg, "m").expect_err("negative weight");
        assert_eq!(e.field(), Some("context_weight"), "{e}");
        assert!(
            e.to_string().contains("configuration hybrid+none+none"),
            "{e}"
        );
    }
}
