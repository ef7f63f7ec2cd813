//! `situate tune`: flags → [`TuneRequest`] → `situate_eval::tune::tune` → a report, and with
//! `--write` the choice in `situate.toml` ([`situate_engine::write_tuned`]).

use crate::{Out, output};
use anyhow::Result;
use clap::Args;
use situate_engine::{Access, Engine, Settings, TuneAnswer, TuneGrid, TuneRequest};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args)]
pub struct TuneArgs {
    /// Your questions with their golden chunks: a .jsonl of `situate eval-set`, a BEIR
    /// folder or Anthropic's folder, searched in the index as it is
    #[arg(long)]
    questions: PathBuf,
    /// Questions the documents cannot answer (any question file), to calibrate `[answer]
    /// min_score` on
    #[arg(long)]
    controls: Option<PathBuf>,
    /// Tune on the first N questions only
    #[arg(long)]
    queries: Option<usize>,
    /// Also score the choice on the questions after the first --queries, unseen by tuning
    #[arg(long, requires = "queries")]
    test_rest: bool,
    /// Folds of the cross-validation [default: 5]
    #[arg(long)]
    folds: Option<usize>,
    /// What to maximise: ndcg@10, pass@K, recall@K or mrr@10 [default: ndcg@10]
    #[arg(long)]
    metric: Option<String>,
    /// Match golden chunks by `id` or by stripped `text` [default: text for Anthropic's
    /// set, id otherwise]
    #[arg(long)]
    matching: Option<String>,
    /// The qrels split of a BEIR folder [default: test]
    #[arg(long)]
    split: Option<String>,
    /// Fusions to try, comma-separated [default: rrf,minmax,tm2c2,zscore]
    #[arg(long, value_delimiter = ',')]
    fusions: Option<Vec<String>>,
    /// The vector leg's shares to try, comma-separated [default: 0.1,0.2,...,0.9]
    #[arg(long, value_delimiter = ',')]
    alphas: Option<Vec<f32>>,
    /// RRF's k values to try [default: 10,30,60,100]
    #[arg(long, value_delimiter = ',')]
    rrf_ks: Option<Vec<f32>>,
    /// Context weights to try [default: 0.25,0.5,1 when the index holds contexts, else the
    /// current one]
    #[arg(long, value_delimiter = ',')]
    context_weights: Option<Vec<f32>>,
    /// Fetch depths to try [default: 50,100,150]
    #[arg(long, value_delimiter = ',')]
    fetches: Option<Vec<usize>>,
    /// Write the choice into situate.toml (--settings, else ./situate.toml), with a comment
    /// saying where it came from; nothing is written when the decision is to keep
    #[arg(long)]
    write: bool,
    /// With --json: every grid point's score too
    #[arg(long)]
    report_grid: bool,
}

impl TuneArgs {
    fn request(&self) -> TuneRequest {
        TuneRequest {
            questions: self.questions.clone(),
            controls: self.controls.clone(),
            split: self.split.clone(),
            queries: self.queries,
            test_rest: self.test_rest,
            folds: self.folds,
            metric: self.metric.clone(),
            matching: self.matching.clone(),
            grid: TuneGrid {
                fusions: self.fusions.clone(),
                alphas: self.alphas.clone(),
                rrf_ks: self.rrf_ks.clone(),
                context_weights: self.context_weights.clone(),
                fetches: self.fetches.clone(),
            },
            report_grid: self.report_grid,
        }
    }
}

pub fn run(
    a: TuneArgs,
    index: &Path,
    settings: &Settings,
    settings_path: Option<&Path>,
    out: Out,
) -> Result<ExitCode> {
    let checked = a.request().check(settings)?;
    let engine = Engine::open(index, Access::Read)?;
    let bar = output::progress_bar(out.quiet || out.json, Some(0), "reading the legs");
    let mut answer = situate_eval::tune::tune(&engine, &checked, &mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })?;
    bar.finish_and_clear();
    if a.write && answer.decision == "change" {
        let path = settings_path
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("situate.toml"));
        situate_engine::write_tuned(&path, &answer)?;
        answer.written = Some(path);
    }
    if out.json {
        output::print_json(&answer)?;
    } else {
        report(&answer, a.write)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn report(a: &TuneAnswer, write: bool) -> Result<()> {
    outln!(
        "tuned on {} questions of {} ({}, {} folds, {} grid points)",
        a.questions,
        a.questions_file.display(),
        a.metric,
        a.folds,
        a.grid_points
    );
    let vector = a.vector_alone.map_or("no vectors".to_string(), |v| {
        format!("vectors alone {v:.4}")
    });
    outln!("  legs      BM25 alone {:.4}, {vector}", a.bm25_alone);
    outln!("  current   {:.4}  {}", a.current.score, a.current.point);
    outln!("  best      {:.4}  {}", a.best.score, a.best.point);
    let o = &a.out_of_sample;
    let spread = o
        .fold_gains
        .iter()
        .map(|g| format!("{g:+.4}"))
        .collect::<Vec<_>>()
        .join(" ");
    outln!(
        "  gain      {:+.4} in sample; {:+.4} ± {:.4} out of sample (folds: {spread})",
        a.in_sample_gain,
        o.gain,
        o.standard_error
    );
    if let Some(h) = &a.held_out {
        outln!(
            "  held out  {} questions: current {:.4}, chosen {:.4} ({:+.4}); the best in sample {:.4} ({:+.4})",
            h.questions,
            h.current,
            h.chosen,
            h.chosen - h.current,
            h.best,
            h.best - h.current
        );
    }
    if let Some(m) = &a.min_score {
        outln!(
            "  min_score {:.6}: controls answered {:.0}%, answerable questions lost {:.0}%",
            m.min_score,
            m.controls_answered * 100.0,
            m.answerable_lost * 100.0
        );
        for (t, answered, lost) in &m.curve {
            outln!(
                "            at {t:.6}: controls answered {:.0}%, answerable lost {:.0}%",
                answered * 100.0,
                lost * 100.0
            );
        }
    }
    outln!("{}: {}", a.decision, a.reason);
    match (&a.written, write, a.decision.as_str()) {
        (Some(p), _, _) => outln!("written to {}", p.display()),
        (None, true, _) => outln!("nothing written: the current settings stay"),
        (None, false, "change") => outln!("run again with --write to put it in situate.toml"),
        _ => {}
    }
    Ok(())
}
