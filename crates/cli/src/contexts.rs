//! LLM contexts on the command line: `situate contextualize` and `situate contexts
//! list|set|regenerate|verify|export|import`. The work is the engine's
//! (`situate_engine::build_contextualizer`, `Engine::recontextualize`,
//! `Engine::decide_context`, `Engine::reverify_contexts`, `Engine::export_contexts`,
//! `Engine::import_contexts`).

use crate::{Out, output};
use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use situate_core::ContextStatus;
use situate_engine::{Access, Decision, Engine, LlmRun, Settings, api};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

/// What the LLM flags of a command ask.
#[derive(Args, Clone, Default)]
pub struct LlmArgs {
    /// The LLM that writes contexts: a local model (`situate models list`), a .gguf path,
    /// anthropic:MODEL, openai:MODEL or ollama:MODEL, with options after `?` (base_url,
    /// key_env, concurrency, documents, retries, timeout, window)
    /// [default: qwen2.5-coder-0.5b-instruct]
    #[arg(long)]
    pub llm: Option<String>,
    /// Stop before spending more than this many dollars (by the price table or [llm.price]);
    /// chunks left over stay pending for a later `situate contextualize`
    #[arg(long, value_name = "USD")]
    pub budget: Option<f64>,
    /// Print what it would cost (tokens, dollars) and call nothing, write nothing
    #[arg(long)]
    pub dry_run: bool,
}

impl LlmArgs {
    /// The engine's form of these flags.
    pub fn run(&self) -> LlmRun {
        LlmRun {
            llm: self.llm.clone(),
            budget: self.budget,
            dry_run: self.dry_run,
        }
    }
}

/// The statuses a list of names gives.
/// The review queue's page as `contexts list` reads it.
const PAGE: usize = 500;

/// `situate contextualize`: contexts for the stored cards that have none yet.
#[derive(Args)]
pub struct ContextualizeArgs {
    /// Which cards: their context status [default: pending,failed]
    #[arg(long, value_delimiter = ',')]
    pub status: Vec<String>,
    /// The LLM context method: llm (a note per chunk), document (a description per
    /// document with the structural context) or document+llm (both)
    #[arg(long, default_value = "llm")]
    pub context: String,
    /// Documents per committed batch
    #[arg(long, default_value_t = 8)]
    pub batch: usize,
    #[command(flatten)]
    pub llm: LlmArgs,
}

/// `situate contexts ...`.
#[derive(Subcommand)]
pub enum ContextsCommand {
    /// List cards by context status, with the reasons of rejections and failures
    List {
        /// Statuses to list [default: rejected,failed]
        #[arg(long, value_delimiter = ',')]
        status: Vec<String>,
    },
    /// Ask the LLM again for the contexts of cards of a status (cards a person decided are
    /// left alone)
    Regenerate {
        /// Statuses to regenerate
        #[arg(long, value_delimiter = ',', required = true)]
        status: Vec<String>,
        /// The LLM context method: llm, document or document+llm
        #[arg(long, default_value = "llm")]
        context: String,
        /// Documents per committed batch
        #[arg(long, default_value_t = 8)]
        batch: usize,
        #[command(flatten)]
        llm: LlmArgs,
    },
    /// Check the stored LLM contexts again with this version's checks (after they changed):
    /// a context now failing one is rejected with the reasons, one now passing them all is
    /// verified. No LLM call; cards a person decided are left alone
    Verify,
    /// Decide one card's context by hand (provenance "manual")
    Set {
        /// The chunk id
        chunk_id: String,
        /// Accept its context as it is
        #[arg(long, conflicts_with_all = ["reject", "text"])]
        accept: bool,
        /// Reject its context (the chunk is then indexed with its original alone)
        #[arg(long, conflicts_with = "text")]
        reject: bool,
        /// Replace its context with this text
        #[arg(long)]
        text: Option<String>,
    },
    /// Write every card's context to a JSONL file (document_id, chunk_id, context, model,
    /// prompt_version, status, ...)
    Export {
        /// The file
        file: PathBuf,
    },
    /// Read contexts from a JSONL file written by `contexts export` (into this or another
    /// index of the same corpus); chunks this index does not have are reported and skipped
    Import {
        /// The file
        file: PathBuf,
    },
}

/// Runs the contextualizer over cards of `status`, with progress and a report.
pub fn run_contextualize(
    out: Out,
    settings: &Settings,
    index: &Path,
    status: &[String],
    context: &str,
    batch: usize,
    llm: &LlmArgs,
) -> Result<ExitCode> {
    if llm.dry_run {
        bail!(
            "--dry-run applies to `situate ingest`; `situate contexts list --status pending` shows what is left"
        );
    }
    let run = llm.run();
    let c = api::ContextualizeRequest {
        statuses: status.to_vec(),
        context: Some(context.to_string()),
        batch: Some(batch),
        llm: run.llm,
        budget: run.budget,
    }
    .check()?;
    let built = situate_engine::build_contextualizer(&c.method, &settings.llm, &c.run)?;
    let mut e = Engine::open(index, Access::Write)?;
    let bar = output::progress_bar(out.quiet || out.json, None, "contextualizing");
    let started = Instant::now();
    let report = e.recontextualize(
        built.contextualizer.as_ref(),
        &c.statuses,
        c.batch,
        &mut |p, r| {
            bar.set_message(output::progress_message(
                p.chunks_done,
                Some(p.chunks_total),
                &r.usage,
                r.contexts_cached,
                built.price,
                started,
            ));
            bar.tick();
        },
    )?;
    bar.finish_and_clear();
    let price = built.price;
    let answer = api::ContextualizeAnswer::new(report, price, started);
    if out.json {
        output::print_json(&answer)?;
        return Ok(ExitCode::SUCCESS);
    }
    let (report, secs) = (&answer.report, answer.seconds);
    outln!(
        "contextualized {} chunks of {} documents in {secs:.1} s: {} from the context cache, {} rejected by the checks, {} failed, {} left for later",
        report.chunks,
        report.replaced,
        report.contexts_cached,
        report.contexts_rejected,
        report.context_failures,
        report.contexts_deferred
    );
    outln!(
        "{}",
        output::cost_line(&report.usage, price, report.replaced, false)
    );
    Ok(ExitCode::SUCCESS)
}

// Long: one arm per `contexts` subcommand, each a request, an engine call and its answer.
/// `situate contexts ...`.
pub fn run(cmd: ContextsCommand, out: Out, settings: &Settings, index: &Path) -> Result<ExitCode> {
    let json = out.json;
    match cmd {
        ContextsCommand::List { status } => {
            let status = if status.is_empty() {
                vec![ContextStatus::Rejected, ContextStatus::Failed]
            } else {
                api::parse_statuses("status", &status)?
            };
            let e = Engine::open(index, Access::Read)?;
            // Every card of those statuses: the review queue's pages, one after another.
            let mut req = api::ContextsRequest {
                status,
                limit: Some(PAGE),
                cursor: None,
            };
            let mut all = api::ContextPage {
                contexts: Vec::new(),
                next_cursor: None,
            };
            loop {
                let page = e.contexts_page(&req, PAGE)?;
                all.contexts.extend(page.contexts);
                match page.next_cursor {
                    Some(c) => req.cursor = Some(c),
                    None => break,
                }
            }
            if json {
                output::print_json(&all)?;
            } else {
                for c in &all.contexts {
                    outln!(
                        "{}\t{}\t{}",
                        c.chunk_id,
                        c.context_status,
                        c.context_notes.join("; ")
                    );
                }
                outln!("{} cards", all.contexts.len());
            }
        }
        ContextsCommand::Regenerate {
            status,
            context,
            batch,
            llm,
        } => {
            return run_contextualize(out, settings, index, &status, &context, batch, &llm);
        }
        ContextsCommand::Verify => {
            let mut e = Engine::open(index, Access::Write)?;
            let r = e.reverify_contexts()?;
            output::message(
                json,
                &format!(
                    "checked {} LLM contexts: {} changed ({} now rejected, {} now verified)",
                    r.checked, r.changed, r.now_rejected, r.now_verified
                ),
                &r,
            )?;
        }
        ContextsCommand::Set {
            chunk_id,
            accept,
            reject,
            text,
        } => {
            let decision = match (text, accept, reject) {
                (Some(t), _, _) => Decision::Text(t),
                (None, true, _) => Decision::Accept,
                (None, _, true) => Decision::Reject,
                (None, false, false) => {
                    bail!("say what to do: --accept, --reject or --text \"...\"")
                }
            };
            let mut e = Engine::open(index, Access::Write)?;
            let answer = e.decide(&chunk_id, decision)?;
            output::message(
                json,
                &format!("{chunk_id}: context {} (manual)", answer.context_status),
                &answer,
            )?;
        }
        ContextsCommand::Export { file } => {
            let e = Engine::open(index, Access::Read)?;
            let a = situate_engine::ExportAnswer {
                exported: e.export_contexts(&file)?,
                file,
            };
            output::message(
                json,
                &format!("exported {} contexts to {}", a.exported, a.file.display()),
                &a,
            )?;
        }
        ContextsCommand::Import { file } => {
            let mut e = Engine::open(index, Access::Write)?;
            let r = e.import_contexts(&file)?;
            if json {
                output::print_json(&r)?;
            } else {
                outln!("imported {} contexts from {}", r.imported, file.display());
                if !r.skipped.is_empty() {
                    outln!(
                        "skipped {}: {}",
                        r.skipped.len(),
                        r.skipped
                            .iter()
                            .take(10)
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
