//! `situate eval`: flags → `situate_engine::eval::EvalRequest` → `run_eval`, with a
//! progress bar; the engine writes the reports (see `situate_engine::eval` for the
//! configurations).

use crate::{Out, TuningArgs, output};
use anyhow::Result;
use clap::Args;
use situate_engine::Settings;
use situate_engine::eval::{EvalRequest, run_eval};
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
        default_value = "bm25+none,bm25+structural"
    )]
    config: Vec<String>,
    /// Only the first N queries (a quick look)
    #[arg(long)]
    queries: Option<usize>,
    /// The qrels split of a BEIR folder
    #[arg(long, default_value = "test")]
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
    #[arg(long, default_value_t = 256)]
    max_tokens: usize,
    /// Overlap in tokens when the corpus is chunked
    #[arg(long, default_value_t = 32)]
    overlap: usize,
    /// Embedder of the vector and hybrid configurations (auto: MiniLM for English sets,
    /// multilingual-e5 otherwise; or a model name or directory)
    #[arg(long, default_value = "auto")]
    embedder: String,
    #[command(flatten)]
    tuning: TuningArgs,
}

pub fn run(a: EvalArgs, index: &Path, settings: &Settings, out: Out) -> Result<ExitCode> {
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
        output::print_json(&serde_json::to_value(&outcome.report)?)?;
    } else {
        outln!("{}", outcome.table);
        outln!("reports in {}", req.out.display());
    }
    Ok(ExitCode::SUCCESS)
}
