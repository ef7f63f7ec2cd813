//! `situate-bench rerank`: a reranker's latency per query on an index already built, the
//! fused top `depth` hits of each query re-scored; the pairs and scores can be written for
//! a peer to score the same texts (`bench/rerank.sh`).

use anyhow::{Context, Result, bail};
use situate_engine::{Access, Engine};
use situate_search::SearchRequest;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

/// Times `reranker` on the top `depth` hits of the first `n` queries (one warm-up query
/// first, not counted).
pub fn run(
    index: &Path,
    spec: &str,
    default_llm: &str,
    queries: &Path,
    n: usize,
    depth: usize,
    pairs: Option<&Path>,
) -> Result<()> {
    let engine = Engine::open(index, Access::Read)?;
    let reranker = situate_rerank::resolve(spec, default_llm)?
        .ok_or_else(|| anyhow::anyhow!("--reranker none has nothing to time"))?;
    let queries: Vec<String> = situate_eval::read_questions(queries)?
        .into_iter()
        .map(|(_, text)| text)
        .take(n + 1)
        .collect();
    if queries.len() < 2 {
        bail!("need at least two queries (the first warms up)");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut out = match pairs {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
        None => None,
    };
    let mut times = Vec::new();
    let mut passages_scored = 0usize;
    for (i, q) in queries.iter().enumerate() {
        let hits = engine.search(&SearchRequest::new(q, depth))?;
        let passages = situate_search::rerank::passages(&hits);
        let started = Instant::now();
        let scores = runtime.block_on(reranker.score(q, &passages))?;
        let took = started.elapsed();
        if i == 0 {
            continue;
        }
        times.push(took.as_secs_f64());
        passages_scored += passages.len();
        if let Some(w) = out.as_mut() {
            let texts: Vec<String> = passages.iter().map(|p| p.labelled()).collect();
            serde_json::to_writer(
                &mut *w,
                &serde_json::json!({"query": q, "passages": texts, "scores": scores}),
            )?;
            writeln!(w)?;
        }
    }
    if let Some(mut w) = out {
        w.flush()?;
    }
    let total: f64 = times.iter().sum();
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let pct = |p: f64| sorted[((p * sorted.len() as f64) as usize).min(sorted.len() - 1)] * 1000.0;
    outln!(
        "situate {}: {} queries × up to {depth} passages ({} in all): p50 {:.1} ms, p99 {:.1} ms per query, {:.1} passages/s",
        reranker.id(),
        times.len(),
        passages_scored,
        pct(0.5),
        pct(0.99),
        passages_scored as f64 / total.max(1e-9)
    );
    Ok(())
}
