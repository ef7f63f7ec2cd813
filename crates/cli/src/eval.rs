//! `situate eval`: flags → `situate_eval::run::EvalRequest` → `run_eval`, with a
//! progress bar; the engine writes the reports (see `situate_eval::run` for the
//! configurations, and `--answers` for the answers written from them).

use crate::{Out, TuningArgs, output};
use anyhow::Result;
use clap::Args;
use situate_engine::{AnswerSettings, Settings};
use situate_eval::run::{AnswerEval, EvalRequest, run_eval};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args)]
pub struct EvalArgs {
    /// The evaluation set: a BEIR folder, Anthropic's folder (evaluation_set.jsonl +
    /// codebase_chunks.json) or a .jsonl file of questions (needs --index)
    #[arg(long)]
    dataset: PathBuf,
    /// Where the reports go
    #[arg(long)]
    out: PathBuf,
    /// Configurations MODE+CONTEXT[+RERANK], comma-separated; the first is the baseline.
    /// MODE: bm25, vector, hybrid; CONTEXT: none, structural, file:CONTEXTS.jsonl (LLM
    /// contexts from `situate contexts export`), indexed; RERANK: none, cross-encoder:DIR,
    /// llm, llm:LLM, cohere:MODEL, voyage:MODEL, jina:MODEL, tei:MODEL, ...
    #[arg(
        long,
        value_delimiter = ',',
        default_value = situate_eval::run::defaults::CONFIGS
    )]
    config: Vec<String>,
    /// Only the first N queries (a quick look)
    #[arg(long)]
    queries: Option<usize>,
    /// The qrels split of a BEIR folder
    #[arg(long, default_value = situate_eval::run::defaults::SPLIT)]
    split: String,
    /// Match golden chunks by `id` or by stripped `text` (the cookbook's way) [default: text
    /// for Anthropic's set, id otherwise]
    #[arg(long)]
    matching: Option<String>,
    /// Questions known to be unanswerable in this corpus (a queries.jsonl, or a .jsonl of
    /// situate's format, or a text file with one question per line), for the abstain report
    #[arg(long)]
    controls: Option<PathBuf>,
    /// Where the evaluation indexes are built and kept between runs [default: OUT/indexes]
    #[arg(long)]
    work: Option<PathBuf>,
    /// Largest chunk in tokens when the corpus is chunked
    #[arg(long, default_value_t = situate_eval::run::defaults::MAX_TOKENS)]
    max_tokens: usize,
    /// Overlap in tokens when the corpus is chunked
    #[arg(long, default_value_t = situate_eval::run::defaults::OVERLAP)]
    overlap: usize,
    /// Embedder of the vector and hybrid configurations (auto: MiniLM for English sets,
    /// multilingual-e5 otherwise; or a model name or directory)
    #[arg(long, default_value = situate_eval::run::defaults::EMBEDDER)]
    embedder: String,
    /// Also answer every question and score the answers: retrieval (one row per
    /// configuration, its best --passages), full (one row, the whole base in one cached
    /// prompt) or both, comma-separated. Gold answers from BEIR's metadata.answers
    /// (XQuAD-R) or `answers` in situate's own format
    #[arg(long, value_delimiter = ',')]
    answers: Vec<String>,
    /// The answer model: a catalog name, a .gguf path, anthropic:MODEL, openai:MODEL
    /// [default: the [answer] model, else the [llm] model, else qwen2.5-coder-1.5b-instruct]
    #[arg(long)]
    llm: Option<String>,
    /// Passages per answer in retrieval mode [default: 8]
    #[arg(long)]
    passages: Option<usize>,
    /// Most tokens of an answer [default: 300]
    #[arg(long)]
    answer_max_tokens: Option<usize>,
    /// Do not ask the model when the best passage scores under this [default: always ask]
    #[arg(long)]
    min_score: Option<f32>,
    /// An answer whose citations do not hold: mark, retry or refuse [default: mark]
    #[arg(long)]
    unsupported: Option<String>,
    #[command(flatten)]
    tuning: TuningArgs,
}

pub fn run(a: EvalArgs, index: &Path, settings: &Settings, out: Out) -> Result<ExitCode> {
    let answers = if a.answers.is_empty() {
        None
    } else {
        let plan = AnswerSettings {
            mode: None,
            passages: a.passages,
            model: a.llm,
            max_tokens: a.answer_max_tokens,
            min_score: a.min_score,
            unsupported: a.unsupported,
            full_budget: None,
        }
        .over(&settings.answer)
        .plan(&settings.answer_llm())?;
        Some(AnswerEval::new(&a.answers, plan)?)
    };
    let req = EvalRequest {
        dataset: a.dataset,
        out: a.out,
        configs: a.config,
        queries: a.queries,
        split: a.split,
        matching: a.matching,
        controls: a.controls,
        work: a.work,
        max_tokens: a.max_tokens,
        overlap: a.overlap,
        embedder: a.embedder,
        search: a.tuning.settings().over(&settings.search),
        default_llm: settings.default_llm(),
        index: index.to_path_buf(),
        answers,
    };
    let bar = output::progress_bar(out.quiet || out.json, Some(0), "evaluating");
    let outcome = run_eval(&req, &mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })?;
    bar.finish_and_clear();
    for n in &outcome.notes {
        eprintln!("{n}");
    }
    if out.json {
        output::print_json(&outcome.report)?;
    } else {
        outln!("{}", outcome.table);
        outln!("reports in {}", req.out.display());
    }
    Ok(ExitCode::SUCCESS)
}
