//! `situate-bench contexts`: the local LLM writing contexts for the first documents of an
//! Anthropic-format corpus, its replies written side by side and one after the other
//! (BENCHMARKS.md, "Local contexts").

use anyhow::{Context, Result, bail};
use situate_core::{ChunkView, Contextualizer, DocumentView, NoSink};
use situate_ingest::{SourceItem, SourceOptions, read_sources};
use situate_llm::local::{LocalLlm, LocalStats};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

/// Each context written, and whether it passed the checks.
type Contexts = Vec<(Option<String>, bool)>;

/// What one pass over the documents gave.
struct Pass {
    /// Seconds per document.
    secs: Vec<f64>,
    /// The model's counters.
    stats: LocalStats,
    /// The contexts.
    texts: Contexts,
    /// The reasons of each rejected context.
    rejected: Vec<Vec<String>>,
}

/// Rejections counted by the kind of reason (a reason's words before its details).
fn reason_counts(notes: &[Vec<String>]) -> String {
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    for n in notes.iter().flatten() {
        let kind = n.split([':', '(']).next().unwrap_or(n).trim().to_string();
        *counts.entry(kind).or_default() += 1;
    }
    let mut v: Vec<(String, usize)> = counts.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v.iter()
        .map(|(k, c)| format!("{k} {c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One pass over the documents: seconds per document, the model's counters, the contexts
/// and whether each passed the checks.
fn pass(
    llm: LocalLlm,
    docs: &[situate_core::Document],
    max_tokens: usize,
    template: &situate_llm::prompt::PromptTemplate,
    verbose: bool,
) -> Result<Pass> {
    let counters = llm.stats_handle();
    let c = situate_llm::LlmContextualizer::new(Box::new(llm))
        .with_max_tokens(max_tokens)
        .with_template(template.clone());
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    let mut secs = Vec::new();
    let mut texts = Vec::new();
    let mut rejected = Vec::new();
    for doc in docs {
        let spans = doc.preset_chunks.clone().unwrap_or_default();
        let view = DocumentView::of(doc);
        let chunks = ChunkView::all(&doc.text, &spans);
        let started = Instant::now();
        let out = rt
            .block_on(c.contextualize(view, &chunks, &NoSink))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        secs.push(started.elapsed().as_secs_f64());
        for c in out.contexts {
            let ok = c.status == situate_core::ContextStatus::Verified;
            if verbose {
                eprintln!(
                    "    {} {:?}{}",
                    if ok { "ok" } else { "REJECTED" },
                    c.text.as_deref().unwrap_or(""),
                    if ok {
                        String::new()
                    } else {
                        format!(" ({})", c.notes.join("; "))
                    }
                );
            }
            if !ok {
                rejected.push(c.notes.clone());
            }
            texts.push((c.text, ok));
        }
        eprintln!(
            "  {}: {} chunks, {:.1} s",
            doc.id,
            chunks.len(),
            secs.last().copied().unwrap_or_default()
        );
    }
    let stats = counters.lock().map(|s| *s).unwrap_or_default();
    Ok(Pass {
        secs,
        stats,
        texts,
        rejected,
    })
}

/// The exact prompts (chat template included) the contextualizer gives the model for each
/// chunk, one JSON line each, for the llama.cpp peer (`bench/llama_cpp_peer.py contexts`).
/// Documents must fit the model's window whole (the codebase set's do).
fn write_prompts(
    llm: &LocalLlm,
    template: &situate_llm::prompt::PromptTemplate,
    docs: &[situate_core::Document],
    out: &Path,
) -> Result<()> {
    use situate_llm::Llm as _;
    let (open, close) = llm.template().user_turn(None);
    let mut lines = String::new();
    for doc in docs {
        if llm.count_tokens(&doc.text) + 1024 > llm.window() {
            bail!("{} does not fit the window whole", doc.id);
        }
        for (i, span) in doc.preset_chunks.iter().flatten().enumerate() {
            let chunk = &doc.text[span.byte_start..span.byte_end];
            let prompt = format!(
                "{open}{}{}{close}",
                template.prefix(&doc.text),
                template.suffix(chunk)
            );
            lines.push_str(&serde_json::to_string(&serde_json::json!({
                "chunk": format!("{}#{i}", doc.id),
                "prompt": prompt,
            }))?);
            lines.push('\n');
        }
    }
    std::fs::write(out, lines).with_context(|| format!("writing {}", out.display()))
}

/// Contextualizes the first `docs` documents of an Anthropic-format corpus (documents with
/// their chunks) with the local model, writing up to `batch` replies side by side, then
/// (with `compare`) again one reply at a time. Prints contexts per second, prompt and
/// generation throughput, the share of contexts that pass the checks, and whether both
/// runs wrote the same contexts.
#[allow(clippy::too_many_arguments)]
pub fn contexts(
    model: &Path,
    corpus: &Path,
    docs: usize,
    max_tokens: usize,
    batch: usize,
    compare: bool,
    prompts_out: Option<&Path>,
    prompt: &str,
    verbose: bool,
) -> Result<ExitCode> {
    let template = situate_llm::prompt::PromptTemplate::named(prompt)
        .with_context(|| format!("unknown prompt {prompt:?}: anthropic or small"))?;
    let opts = SourceOptions::default();
    let documents: Vec<situate_core::Document> = read_sources(&[corpus.to_path_buf()], &opts)
        .filter_map(|i| match i {
            SourceItem::Document(d) if d.preset_chunks.is_some() => Some(*d),
            _ => None,
        })
        .take(docs)
        .collect();
    if documents.is_empty() {
        bail!(
            "no documents with chunks in {} (expected Anthropic's codebase_chunks.json format)",
            corpus.display()
        );
    }
    let load = |batch: usize| -> Result<LocalLlm> {
        let started = Instant::now();
        let mut l = LocalLlm::load(model, "local:bench".into())
            .with_context(|| format!("loading {}", model.display()))?;
        l.set_batch(batch);
        eprintln!("loaded in {:.1} s", started.elapsed().as_secs_f64());
        Ok(l)
    };
    let chunks: usize = documents
        .iter()
        .map(|d| d.preset_chunks.as_ref().map_or(0, Vec::len))
        .sum();
    let first = load(batch)?;
    if let Some(p) = prompts_out {
        write_prompts(&first, &template, &documents, p)?;
    }
    let total = |v: &[f64]| v.iter().sum::<f64>();
    let rate = |n: u64, d: std::time::Duration| n as f64 / d.as_secs_f64().max(1e-9);
    outln!(
        "{}: {} documents, {chunks} chunks, at most {max_tokens} new tokens per context, prompt {}",
        model.display(),
        documents.len(),
        template.version()
    );
    let mut runs = vec![batch];
    if compare && batch > 1 {
        runs.push(1);
    }
    let mut written: Vec<Vec<(Option<String>, bool)>> = Vec::new();
    let mut first = Some(first);
    for b in runs {
        eprintln!("{b} side by side:");
        let llm = match first.take() {
            Some(l) => l,
            None => load(b)?,
        };
        let Pass {
            secs,
            stats: s,
            texts,
            rejected,
        } = pass(llm, &documents, max_tokens, &template, verbose)?;
        let accepted = texts.iter().filter(|(_, ok)| *ok).count();
        outln!(
            "{b} side by side: {:.1} s = {:.3} contexts/s; prompts {} tokens at {:.1} tokens/s ({:.1} s), generation {} tokens at {:.1} tokens/s ({:.1} s); {accepted} of {} accepted; rejected for: {}",
            total(&secs),
            chunks as f64 / total(&secs).max(1e-9),
            s.prefill_tokens,
            rate(s.prefill_tokens, s.prefill),
            s.prefill.as_secs_f64(),
            s.decode_tokens,
            rate(s.decode_tokens, s.decode),
            s.decode.as_secs_f64(),
            texts.len(),
            reason_counts(&rejected)
        );
        written.push(texts);
    }
    if written.len() == 2 {
        outln!(
            "contexts identical side by side and one at a time: {}",
            written[0] == written[1]
        );
    }
    Ok(ExitCode::SUCCESS)
}
