//! `situate-bench contexts`: the local LLM writing contexts, with the document's KV cache
//! reused and without (BENCHMARKS.md, "Local contexts").

use anyhow::{Context, Result, bail};
use situate_core::{ChunkView, Contextualizer, DocumentView, NoSink};
use situate_ingest::{SourceItem, SourceOptions, read_sources};
use situate_llm::local::{LocalLlm, LocalStats};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

/// One pass over the documents: seconds per document, the model's counters, the contexts.
fn pass(
    llm: LocalLlm,
    docs: &[situate_core::Document],
    max_tokens: usize,
) -> Result<(Vec<f64>, LocalStats, Vec<Option<String>>)> {
    let counters = llm.stats_handle();
    let c = situate_llm::LlmContextualizer::new(Box::new(llm)).with_max_tokens(max_tokens);
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    let mut secs = Vec::new();
    let mut texts = Vec::new();
    for doc in docs {
        let spans = doc.preset_chunks.clone().unwrap_or_default();
        let view = DocumentView::of(doc);
        let chunks = ChunkView::all(&doc.text, &spans);
        let started = Instant::now();
        let out = rt
            .block_on(c.contextualize(view, &chunks, &NoSink))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        secs.push(started.elapsed().as_secs_f64());
        texts.extend(out.contexts.into_iter().map(|c| c.text));
        eprintln!(
            "  {}: {} chunks, {:.1} s",
            doc.id,
            chunks.len(),
            secs.last().copied().unwrap_or_default()
        );
    }
    let stats = counters.lock().map(|s| *s).unwrap_or_default();
    Ok((secs, stats, texts))
}

/// Contextualizes the first `docs` documents of an Anthropic-format corpus (documents with
/// their chunks) twice with the local model: reusing each document's KV cache, then running
/// the document again for every chunk. Prints seconds per document for both, the ratio,
/// prefill and decode throughput, and whether the contexts are the same.
pub fn contexts(model: &Path, corpus: &Path, docs: usize, max_tokens: usize) -> Result<ExitCode> {
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
    let load = |reuse: bool| -> Result<LocalLlm> {
        let mut l = LocalLlm::load(model, "local:bench".into())
            .with_context(|| format!("loading {}", model.display()))?;
        l.set_prefix_reuse(reuse);
        Ok(l)
    };
    let chunks: usize = documents
        .iter()
        .map(|d| d.preset_chunks.as_ref().map_or(0, Vec::len))
        .sum();
    eprintln!("with the KV cache reused:");
    let (with, s_with, t_with) = pass(load(true)?, &documents, max_tokens)?;
    eprintln!("without (the document run again for each chunk):");
    let (without, s_without, t_without) = pass(load(false)?, &documents, max_tokens)?;
    let total = |v: &[f64]| v.iter().sum::<f64>();
    let rate = |n: u64, d: std::time::Duration| n as f64 / d.as_secs_f64().max(1e-9);
    outln!(
        "{} documents, {chunks} chunks, max {max_tokens} new tokens per context",
        documents.len()
    );
    outln!(
        "with reuse:    {:.1} s in all, {:.1} s per document; prefill {} tokens at {:.0} tokens/s, decode {} tokens at {:.1} tokens/s",
        total(&with),
        total(&with) / with.len() as f64,
        s_with.prefill_tokens,
        rate(s_with.prefill_tokens, s_with.prefill),
        s_with.decode_tokens,
        rate(s_with.decode_tokens, s_with.decode)
    );
    outln!(
        "without reuse: {:.1} s in all, {:.1} s per document; prefill {} tokens at {:.0} tokens/s, decode {} tokens at {:.1} tokens/s",
        total(&without),
        total(&without) / without.len() as f64,
        s_without.prefill_tokens,
        rate(s_without.prefill_tokens, s_without.prefill),
        s_without.decode_tokens,
        rate(s_without.decode_tokens, s_without.decode)
    );
    outln!(
        "reuse is {:.2}x faster; contexts identical: {}",
        total(&without) / total(&with).max(1e-9),
        t_with == t_without
    );
    Ok(ExitCode::SUCCESS)
}
