//! LLM contexts on the command line: building the contextualizer from settings, `situate
//! contextualize`, `situate contexts list|set|regenerate|export|import`, and cost lines.

use crate::config::Settings;
use crate::output;
use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use situate_core::{ChunkContext, ContextStatus, Contextualizer, Provenance, TokenUsage};
use situate_engine::{Access, ContextUpdate, Engine, IngestReport};
use situate_llm::cost::Price;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Instant;

/// A contextualizer and the price its tokens cost (when known).
pub struct Built {
    /// The contextualizer.
    pub contextualizer: Box<dyn Contextualizer>,
    /// Dollars per million tokens, for LLMs with a known price.
    pub price: Option<Price>,
}

/// What the LLM flags of a command ask.
#[derive(Args, Clone, Default)]
pub struct LlmArgs {
    /// The LLM that writes contexts: a local model (`situate models list`), a .gguf path,
    /// anthropic:MODEL, openai:MODEL or ollama:MODEL, with options after `?` (base_url,
    /// key_env, concurrency, documents, retries, timeout, window) [default: smollm2-135m-instruct]
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

/// The contextualizer `method` names; `llm` is built from `[llm]` and the flags.
pub fn build(method: &str, settings: &Settings, a: &LlmArgs) -> Result<Built> {
    if method != "llm" {
        if a.budget.is_some() || a.dry_run || a.llm.is_some() {
            bail!("--llm, --budget and --dry-run apply to --context llm");
        }
        let contextualizer =
            situate_contextualize::by_name(method).map_err(|e| anyhow::anyhow!("{e}, llm"))?;
        return Ok(Built {
            contextualizer,
            price: None,
        });
    }
    if let Some(b) = a.budget
        && !(b.is_finite() && b >= 0.0)
    {
        bail!("--budget {b}: expected a number of dollars, 0 or more");
    }
    let s = &settings.llm;
    let model = a
        .llm
        .as_deref()
        .or(s.model.as_deref())
        .unwrap_or(crate::config::DEFAULT_LLM);
    let model = situate_llm::resolve(model)?;
    let mut c = situate_llm::LlmContextualizer::new(model);
    if let Some(t) = &s.template {
        c = c.with_template(situate_llm::prompt::PromptTemplate::from_files(
            t,
            s.glossary.as_deref(),
        )?);
    } else if let Some(gl) = &s.glossary {
        let text = std::fs::read_to_string(gl)
            .with_context(|| format!("reading the glossary {}", gl.display()))?;
        c = c.with_template(situate_llm::prompt::PromptTemplate::parse(
            situate_llm::prompt::ANTHROPIC_TEMPLATE,
            Some(&text),
            "built-in",
        )?);
    }
    if let Some(l) = &s.long_documents {
        let rule = situate_llm::prompt::LongDocuments::parse(l).ok_or_else(|| {
            anyhow::anyhow!("[llm] long_documents = {l:?}: expected window, head or fail")
        })?;
        c = c.with_long_documents(rule);
    }
    if let Some(m) = s.max_tokens {
        c = c.with_max_tokens(m);
    }
    let c = c
        .with_document_tokens(s.document_tokens)
        .with_price(s.price)
        .with_budget(a.budget)
        .estimate_only(a.dry_run);
    let price = c.price();
    if a.budget.is_some() && price.is_none() {
        bail!(
            "--budget needs the model's price: {} is not in the price table; give [llm.price] in situate.toml (input, cache_write, cache_read, output in dollars per million tokens)",
            c.llm().id()
        );
    }
    Ok(Built {
        contextualizer: Box::new(c),
        price,
    })
}

/// One line on what the contexts cost.
pub fn cost_line(
    usage: &TokenUsage,
    price: Option<Price>,
    documents: u64,
    estimate: bool,
) -> String {
    let read_share = {
        let input =
            usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens;
        if input == 0 {
            0.0
        } else {
            usage.cache_read_input_tokens as f64 * 100.0 / input as f64
        }
    };
    let tokens = format!(
        "{} input, {} cache writes, {} cache reads ({read_share:.0}% of input), {} output tokens",
        usage.input_tokens,
        usage.cache_creation_input_tokens,
        usage.cache_read_input_tokens,
        usage.output_tokens
    );
    let what = if estimate { "estimated" } else { "spent" };
    match price {
        Some(p) => format!(
            "LLM {what}: {tokens}; ${:.4} for {documents} documents",
            p.dollars(usage)
        ),
        None => format!("LLM {what}: {tokens} (no price known for this model)"),
    }
}

/// The statuses a list of names gives.
fn statuses(names: &[String]) -> Result<Vec<ContextStatus>> {
    names
        .iter()
        .map(|n| {
            ContextStatus::from_str(n).map_err(|_| {
                anyhow::anyhow!(
                    "unknown status {n:?}: expected pending, generated, verified, rejected or failed"
                )
            })
        })
        .collect()
}

/// `situate contextualize`: contexts for the stored cards that have none yet.
#[derive(Args)]
pub struct ContextualizeArgs {
    /// Which cards: their context status [default: pending,failed]
    #[arg(long, value_delimiter = ',')]
    pub status: Vec<String>,
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

/// The LLM contexts (verified or rejected, not decided by hand) whose verdict under this
/// version's checks ([`situate_llm::verify::recheck`]) differs from the stored one, as
/// updates; and how many were checked.
fn reverify(e: &Engine) -> Result<(u64, Vec<ContextUpdate>)> {
    let mut checked = 0u64;
    let mut updates = Vec::new();
    let mut doc: (String, String) = (String::new(), String::new());
    e.store().for_each_card_with_status(
        &[ContextStatus::Verified, ContextStatus::Rejected],
        &mut |rec| {
            let c = rec.card;
            let (Some(p), Some(text)) = (c.provenance.as_ref(), c.generated_context.as_deref())
            else {
                return Ok(());
            };
            if p.method != "llm" {
                return Ok(());
            }
            if doc.0 != c.document_id {
                let text = e.store().document_text(&c.document_id)?.unwrap_or_default();
                doc = (c.document_id.clone(), text);
            }
            checked += 1;
            let now = situate_llm::verify::recheck(
                ChunkContext {
                    text: Some(text.to_string()),
                    status: c.context_status,
                    provenance: c.provenance.clone(),
                    notes: c.context_notes.clone(),
                },
                &c.original_text,
                &doc.1,
            );
            if now.status != c.context_status || now.notes != c.context_notes {
                updates.push(ContextUpdate {
                    chunk_id: c.chunk_id.clone(),
                    context: now,
                });
            }
            Ok(())
        },
    )?;
    Ok((checked, updates))
}

/// One line of an export.
#[derive(serde::Serialize, serde::Deserialize)]
struct Exported {
    document_id: String,
    chunk_id: String,
    context: Option<String>,
    model: Option<String>,
    prompt_version: Option<String>,
    status: String,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    strategy: Option<String>,
    #[serde(default)]
    input_hash: Option<String>,
    #[serde(default)]
    notes: Vec<String>,
}

/// Imports the contexts of an export file into `e`: all lines are read and checked first
/// (a malformed line is an error naming it, and nothing is written); chunks `e` does not
/// have, or has under another document, are skipped and returned.
pub fn import_file(e: &mut Engine, file: &Path) -> Result<(usize, Vec<String>)> {
    let f = std::fs::File::open(file).with_context(|| format!("opening {}", file.display()))?;
    let mut lines = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.with_context(|| format!("{} line {}", file.display(), i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let x: Exported = serde_json::from_str(&line)
            .with_context(|| format!("{} line {}: not a context record", file.display(), i + 1))?;
        let status = ContextStatus::from_str(&x.status).map_err(|_| {
            anyhow::anyhow!(
                "{} line {}: unknown status {:?}",
                file.display(),
                i + 1,
                x.status
            )
        })?;
        lines.push((x, status));
    }
    let mut updates = Vec::new();
    let mut skipped = Vec::new();
    for (x, status) in lines {
        match e.store().card_by_chunk_id(&x.chunk_id)? {
            Some(rec) if rec.card.document_id == x.document_id => updates.push(ContextUpdate {
                chunk_id: x.chunk_id,
                context: ChunkContext {
                    text: x.context,
                    status,
                    provenance: Some(Provenance {
                        method: x.method.unwrap_or_else(|| "import".into()),
                        model: x.model,
                        prompt_version: x.prompt_version,
                        input_hash: x.input_hash.unwrap_or_default(),
                        strategy: x.strategy,
                    }),
                    notes: x.notes,
                },
            }),
            Some(_) => skipped.push(format!("{} (another document here)", x.chunk_id)),
            None => skipped.push(format!("{} (no such chunk here)", x.chunk_id)),
        }
    }
    let n = e.set_contexts(&updates)?;
    Ok((n, skipped))
}

/// Runs the contextualizer over cards of `status`, with progress and a report.
pub fn run_contextualize(
    g: (bool, bool),
    settings: &Settings,
    index: &Path,
    status: &[String],
    batch: usize,
    llm: &LlmArgs,
) -> Result<ExitCode> {
    let (json, quiet) = g;
    if llm.dry_run {
        bail!(
            "--dry-run applies to `situate ingest`; `situate contexts list --status pending` shows what is left"
        );
    }
    let wanted = if status.is_empty() {
        vec![ContextStatus::Pending, ContextStatus::Failed]
    } else {
        statuses(status)?
    };
    let built = build("llm", settings, llm)?;
    let mut e = Engine::open(index, Access::Write)?;
    let bar = output::progress_bar(quiet || json, None, "contextualizing");
    let started = Instant::now();
    let report = e.recontextualize(
        built.contextualizer.as_ref(),
        &wanted,
        batch,
        &mut |p, r| {
            bar.set_message(progress_message(
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
    report_run(json, &report, built.price, started)
}

/// The progress line of a context run: chunks, tokens per second, cache share, dollars.
pub fn progress_message(
    done: u64,
    total: Option<u64>,
    usage: &TokenUsage,
    cached: u64,
    price: Option<Price>,
    started: Instant,
) -> String {
    let secs = started.elapsed().as_secs_f64().max(1e-3);
    let tokens = usage.input_tokens
        + usage.cache_creation_input_tokens
        + usage.cache_read_input_tokens
        + usage.output_tokens;
    let input =
        usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens;
    let hit = if input == 0 {
        0.0
    } else {
        usage.cache_read_input_tokens as f64 * 100.0 / input as f64
    };
    let of = total.map(|t| format!("/{t}")).unwrap_or_default();
    let dollars = price
        .map(|p| format!(", ${:.4}", p.dollars(usage)))
        .unwrap_or_default();
    format!(
        "{done}{of} chunks contextualized ({cached} from the cache), {:.0} tokens/s, {hit:.0}% of input read from cache{dollars}",
        tokens as f64 / secs
    )
}

fn report_run(
    json: bool,
    r: &IngestReport,
    price: Option<Price>,
    started: Instant,
) -> Result<ExitCode> {
    let secs = started.elapsed().as_secs_f64();
    let dollars = price.map(|p| p.dollars(&r.usage));
    if json {
        output::print_json(&serde_json::json!({"report": r, "dollars": dollars, "seconds": secs}))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "contextualized {} chunks of {} documents in {secs:.1} s: {} from the context cache, {} rejected by the checks, {} failed, {} left for later",
        r.chunks,
        r.replaced,
        r.contexts_cached,
        r.contexts_rejected,
        r.context_failures,
        r.contexts_deferred
    )?;
    writeln!(out, "{}", cost_line(&r.usage, price, r.replaced, false))?;
    Ok(ExitCode::SUCCESS)
}

/// `situate contexts ...`.
pub fn run(
    cmd: ContextsCommand,
    g: (bool, bool),
    settings: &Settings,
    index: &Path,
) -> Result<ExitCode> {
    let json = g.0;
    match cmd {
        ContextsCommand::List { status } => {
            let wanted = if status.is_empty() {
                vec![ContextStatus::Rejected, ContextStatus::Failed]
            } else {
                statuses(&status)?
            };
            let e = Engine::open(index, Access::Read)?;
            let mut rows = Vec::new();
            e.store().for_each_card_with_status(&wanted, &mut |rec| {
                rows.push(rec.card);
                Ok(())
            })?;
            if json {
                output::print_json(&serde_json::json!({"cards": rows}))?;
            } else {
                let mut out = std::io::stdout().lock();
                for c in &rows {
                    writeln!(
                        out,
                        "{}\t{}\t{}",
                        c.chunk_id,
                        c.context_status,
                        c.context_notes.join("; ")
                    )?;
                }
                writeln!(out, "{} cards", rows.len())?;
            }
            Ok(ExitCode::SUCCESS)
        }
        ContextsCommand::Regenerate { status, batch, llm } => {
            run_contextualize(g, settings, index, &status, batch, &llm)
        }
        ContextsCommand::Verify => {
            let mut e = Engine::open(index, Access::Write)?;
            let (checked, updates) = reverify(&e)?;
            let rejected = updates
                .iter()
                .filter(|u| u.context.status == ContextStatus::Rejected)
                .count();
            e.set_contexts(&updates)?;
            // The cache holds the same verdicts, for later runs that take contexts from it.
            let cache = e.store().context_cache_writer()?;
            for u in &updates {
                if let Some(p) = u
                    .context
                    .provenance
                    .as_ref()
                    .filter(|p| !p.input_hash.is_empty())
                {
                    cache.set_verdict(&p.input_hash, &u.context)?;
                }
            }
            output::message(
                json,
                &format!(
                    "checked {checked} LLM contexts: {} changed ({rejected} now rejected, {} now verified)",
                    updates.len(),
                    updates.len() - rejected
                ),
                &serde_json::json!({
                    "checked": checked,
                    "changed": updates.len(),
                    "now_rejected": rejected,
                    "now_verified": updates.len() - rejected,
                }),
            )?;
            Ok(ExitCode::SUCCESS)
        }
        ContextsCommand::Set {
            chunk_id,
            accept,
            reject,
            text,
        } => {
            let mut e = Engine::open(index, Access::Write)?;
            let card = e.chunk(&chunk_id)?.card;
            let old = card.provenance.clone();
            let manual = |strategy: Option<String>| Provenance {
                method: "manual".into(),
                model: old.as_ref().and_then(|p| p.model.clone()),
                prompt_version: old.as_ref().and_then(|p| p.prompt_version.clone()),
                input_hash: old
                    .as_ref()
                    .map(|p| p.input_hash.clone())
                    .unwrap_or_default(),
                strategy,
            };
            let strategy = old.as_ref().and_then(|p| p.strategy.clone());
            let context = if let Some(t) = text {
                let t = t.trim().to_string();
                if t.is_empty() {
                    bail!("--text is empty: use --reject to index the chunk without a context");
                }
                ChunkContext {
                    text: Some(t),
                    status: ContextStatus::Verified,
                    provenance: Some(manual(None)),
                    notes: vec!["written by hand".into()],
                }
            } else if accept {
                if card
                    .generated_context
                    .as_deref()
                    .is_none_or(|c| c.trim().is_empty())
                {
                    bail!("{chunk_id} has no context to accept: give --text");
                }
                ChunkContext {
                    text: card.generated_context.clone(),
                    status: ContextStatus::Verified,
                    provenance: Some(manual(strategy)),
                    notes: vec!["accepted by hand".into()],
                }
            } else if reject {
                ChunkContext {
                    text: card.generated_context.clone(),
                    status: ContextStatus::Rejected,
                    provenance: Some(manual(strategy)),
                    notes: vec!["rejected by hand".into()],
                }
            } else {
                bail!("say what to do: --accept, --reject or --text \"...\"");
            };
            let status = context.status;
            e.set_contexts(&[ContextUpdate {
                chunk_id: chunk_id.clone(),
                context,
            }])?;
            output::message(
                json,
                &format!("{chunk_id}: context {status} (manual)"),
                &serde_json::json!({"chunk_id": chunk_id, "status": status.as_str()}),
            )?;
            Ok(ExitCode::SUCCESS)
        }
        ContextsCommand::Export { file } => {
            let e = Engine::open(index, Access::Read)?;
            let tmp = file.with_extension("jsonl.partial");
            let mut w = std::io::BufWriter::new(
                std::fs::File::create(&tmp)
                    .with_context(|| format!("creating {}", tmp.display()))?,
            );
            let mut n = 0u64;
            e.store().for_each_card_with_status(&[], &mut |rec| {
                let c = rec.card;
                if c.generated_context.is_none() && c.context_status == ContextStatus::Pending {
                    return Ok(());
                }
                let p = c.provenance.as_ref();
                let line = Exported {
                    document_id: c.document_id.clone(),
                    chunk_id: c.chunk_id.clone(),
                    context: c.generated_context.clone(),
                    model: p.and_then(|p| p.model.clone()),
                    prompt_version: p.and_then(|p| p.prompt_version.clone()),
                    status: c.context_status.as_str().into(),
                    method: p.map(|p| p.method.clone()),
                    strategy: p.and_then(|p| p.strategy.clone()),
                    input_hash: p.map(|p| p.input_hash.clone()),
                    notes: c.context_notes.clone(),
                };
                let text = serde_json::to_string(&line).unwrap_or_default();
                writeln!(w, "{text}")
                    .map_err(|e| situate_store::StoreError::Format(e.to_string()))?;
                n += 1;
                Ok(())
            })?;
            w.flush()?;
            w.get_ref().sync_all()?;
            drop(w);
            std::fs::rename(&tmp, &file).with_context(|| format!("writing {}", file.display()))?;
            output::message(
                json,
                &format!("exported {n} contexts to {}", file.display()),
                &serde_json::json!({"exported": n, "file": file}),
            )?;
            Ok(ExitCode::SUCCESS)
        }
        ContextsCommand::Import { file } => {
            let mut e = Engine::open(index, Access::Write)?;
            let (n, skipped) = import_file(&mut e, &file)?;
            if json {
                output::print_json(&serde_json::json!({"imported": n, "skipped": skipped}))?;
            } else {
                outln!("imported {n} contexts from {}", file.display());
                if !skipped.is_empty() {
                    outln!(
                        "skipped {}: {}",
                        skipped.len(),
                        skipped
                            .iter()
                            .take(10)
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
