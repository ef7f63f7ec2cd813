//! `situate eval-set`: building a team's own evaluation set (situate's JSONL format, see
//! `situate_eval::dataset`) against its own index. The file format is the eval crate's, the
//! check against the index the engine's (`situate_eval::run::check_set`); this module
//! asks which hits are golden.

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use situate_engine::{Access, Engine, SearchSettings};
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum EvalSetCommand {
    /// Write a template evaluation set (refuses to overwrite a file)
    New {
        /// The .jsonl file to create
        file: PathBuf,
    },
    /// Add a question: search the index, pick the golden chunks among the hits
    Add {
        /// The .jsonl file to append to
        file: PathBuf,
        /// The question
        #[arg(long)]
        query: String,
        /// Golden hits by their number in the list shown (e.g. 1,3); asked interactively when
        /// not given and a terminal is attached
        #[arg(long, value_delimiter = ',')]
        pick: Vec<usize>,
        /// The answer is not in the documents
        #[arg(long, conflicts_with = "pick")]
        unanswerable: bool,
        /// Hits to show
        #[arg(short, long, default_value_t = 10)]
        k: usize,
        /// An id for the question [default: q<N>]
        #[arg(long)]
        id: Option<String>,
    },
    /// Check a set: every line parses, every golden id exists in the index, no duplicates
    Check {
        /// The .jsonl file
        file: PathBuf,
    },
}

pub fn run(cmd: EvalSetCommand, index: &Path) -> Result<ExitCode> {
    match cmd {
        EvalSetCommand::New { file } => {
            situate_eval::dataset::write_own_template(&file)
                .with_context(|| "it must not exist yet")?;
            outln!(
                "wrote a template to {}; replace its examples with `situate eval-set add`",
                file.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        EvalSetCommand::Add {
            file,
            query,
            pick,
            unanswerable,
            k,
            id,
        } => add(index, &file, &query, pick, unanswerable, k, id),
        EvalSetCommand::Check { file } => {
            let engine = Engine::open(index, Access::Read)?;
            let c = situate_eval::run::check_set(&engine, &file)?;
            outln!(
                "{}: {} questions ({} answerable, {} unanswerable), {} problems",
                file.display(),
                c.questions,
                c.answerable,
                c.questions - c.answerable,
                c.problems.len()
            );
            for p in &c.problems {
                outln!("  {p}");
            }
            Ok(if c.problems.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}

fn add(
    index: &Path,
    file: &Path,
    query: &str,
    mut pick: Vec<usize>,
    unanswerable: bool,
    k: usize,
    id: Option<String>,
) -> Result<ExitCode> {
    if query.trim().is_empty() {
        bail!("the query is empty");
    }
    if file.exists() {
        // A malformed set is reported before any search.
        situate_eval::dataset::read_own(file)?;
    }
    let engine = Engine::open(index, Access::Read)?;
    let plan = SearchSettings {
        k: Some(k.max(1)),
        ..Default::default()
    }
    .plan(situate_engine::settings::DEFAULT_LLM)?;
    let hits = engine.query(query, &plan, &Default::default())?.hits;
    let mut err = std::io::stderr().lock();
    for (i, h) in hits.iter().enumerate() {
        let preview: String = h
            .original_text
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
            .take(110)
            .collect();
        writeln!(err, "{:>3}. {}  {}", i + 1, h.chunk_id, preview)?;
    }
    if !unanswerable && pick.is_empty() {
        if !std::io::stdin().is_terminal() {
            bail!("say which hits are golden with --pick 1,3 (or --unanswerable)");
        }
        write!(
            err,
            "golden hits (numbers separated by commas; empty: the answer is not in the documents): "
        )?;
        err.flush()?;
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        pick = line
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<usize>()
                    .with_context(|| format!("{s:?} is not a hit number"))
            })
            .collect::<Result<_>>()?;
    }
    let mut relevant = Vec::new();
    for n in &pick {
        let h = hits
            .get(n.wrapping_sub(1))
            .with_context(|| format!("there is no hit {n} (1 to {})", hits.len()))?;
        if !relevant.contains(&h.chunk_id) {
            relevant.push(h.chunk_id.clone());
        }
    }
    let id = situate_eval::dataset::append_own(file, id, query, &relevant)?;
    outln!(
        "added {id} to {} ({})",
        file.display(),
        if relevant.is_empty() {
            "unanswerable".to_string()
        } else {
            relevant.join(", ")
        }
    );
    Ok(ExitCode::SUCCESS)
}
