//! `situate eval-set`: building a team's own evaluation set (situate's JSONL format, see
//! `situate_eval::dataset`) against its own index.

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use situate_engine::{Access, Engine};
use situate_eval::dataset::{Level, read_own};
use situate_search::SearchRequest;
use std::collections::HashMap;
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

const TEMPLATE: &str = r#"// situate evaluation set: one JSON object per line; lines starting with // are comments.
// "relevant" lists golden chunk ids (as `situate search` prints them), or maps them to grades;
// add "judged": "document" to a line to list document ids instead. Questions whose answer is
// not in the documents are marked "unanswerable": true. "note" is free text.
{"id": "q1", "query": "How do I rotate an API key?", "relevant": ["docs/security.md#2"], "note": "example: replace me"}
{"id": "q2", "query": "Which port does the admin UI listen on?", "relevant": {"docs/admin.md#0": 2, "docs/admin.md#1": 1}}
{"id": "q3", "query": "What is the CEO's salary?", "unanswerable": true}
"#;

pub fn run(cmd: EvalSetCommand, index: &Path) -> Result<ExitCode> {
    match cmd {
        EvalSetCommand::New { file } => {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&file)
                .with_context(|| format!("creating {} (it must not exist yet)", file.display()))?;
            f.write_all(TEMPLATE.as_bytes())?;
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
        EvalSetCommand::Check { file } => check(index, &file),
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
    let existing = if file.exists() {
        read_own(file)?
    } else {
        Vec::new()
    };
    let engine = Engine::open(index, Access::Read)?;
    let hits = engine.search(&SearchRequest::new(query, k.max(1)))?;
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
    let id = id.unwrap_or_else(|| format!("q{}", existing.len() + 1));
    if existing.iter().any(|q| q.query.id == id) {
        bail!("{} already has a question with id {id:?}", file.display());
    }
    let line = if relevant.is_empty() {
        serde_json::json!({"id": id, "query": query, "unanswerable": true})
    } else {
        serde_json::json!({"id": id, "query": query, "relevant": relevant})
    };
    // One write of one whole line: an interrupted add leaves the file as it was or complete.
    let mut text = serde_json::to_string(&line)?;
    text.push('\n');
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)?;
    f.write_all(text.as_bytes())?;
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

fn check(index: &Path, file: &Path) -> Result<ExitCode> {
    let queries = read_own(file)?; // a malformed line is an error naming it
    let engine = Engine::open(index, Access::Read)?;
    let mut problems = Vec::new();
    let mut ids: HashMap<&str, usize> = HashMap::new();
    let mut texts: HashMap<String, usize> = HashMap::new();
    for q in &queries {
        if let Some(first) = ids.insert(&q.query.id, q.line) {
            problems.push(format!(
                "line {}: id {:?} is also on line {first}",
                q.line, q.query.id
            ));
        }
        let norm = q
            .query
            .text
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase();
        if let Some(first) = texts.insert(norm, q.line) {
            problems.push(format!(
                "line {}: the same question as line {first}",
                q.line
            ));
        }
        let mut golden: Vec<&String> = q.query.judgments.0.keys().collect();
        golden.sort();
        for g in golden {
            let exists = match q.level {
                Level::Chunk => engine.store().card_by_chunk_id(g)?.is_some(),
                Level::Document => engine.store().document(g)?.is_some(),
            };
            if !exists {
                let what = if q.level == Level::Chunk {
                    "chunk"
                } else {
                    "document"
                };
                problems.push(format!(
                    "line {}: golden {what} {g:?} is not in the index",
                    q.line
                ));
            }
        }
    }
    let answerable = queries.iter().filter(|q| !q.query.unanswerable).count();
    outln!(
        "{}: {} questions ({} answerable, {} unanswerable), {} problems",
        file.display(),
        queries.len(),
        answerable,
        queries.len() - answerable,
        problems.len()
    );
    for p in &problems {
        outln!("  {p}");
    }
    Ok(if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
