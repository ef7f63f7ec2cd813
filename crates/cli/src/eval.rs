//! `situate eval`: runs an evaluation set through every configuration asked for and writes
//! `report.md`, `report.json`, `failure.svg` and one `queries-<configuration>.jsonl` per
//! configuration into `--out`.
//!
//! A configuration is `MODE+CONTEXT[+RERANK]`: MODE `bm25`, `vector` or `hybrid`; CONTEXT
//! `none` (the original text alone), `structural`, `file:CONTEXTS.jsonl` (LLM contexts
//! generated once and exported with `situate contexts export`, imported into an index of
//! the corpus built without contexts: no LLM call), or, for a set evaluated against an
//! existing index, `indexed` (whatever contexts that index holds); RERANK `none` or any
//! reranker `situate search --rerank` takes (`cross-encoder:DIR`, `llm`, `cohere:MODEL`,
//! ...), which re-scores the fused top `--rerank-depth` (150) chunks of every query (the
//! rest of a query's 100 follow in fused order). The first configuration is the baseline of
//! the "reduction" column.

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use situate_core::MatchOn;
use situate_engine::{Access, CreateSettings, Engine, IngestOptions};
use situate_eval::dataset::{Corpus, EvalQuery, EvalSet, Level, Matching};
use situate_eval::report::{self, ConfigReport, Retrieved};
use situate_eval::{Judgments, beir};
use situate_search::SearchRequest;
use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

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
    /// Weight of the context fields in contextual BM25
    #[arg(long, default_value_t = situate_core::DEFAULT_CONTEXT_WEIGHT)]
    context_weight: f32,
    /// Embedder of the vector and hybrid configurations (auto: MiniLM for English sets,
    /// multilingual-e5 otherwise; or a model name or directory)
    #[arg(long, default_value = "auto")]
    embedder: String,
    /// Weight of the BM25 leg in hybrid configurations
    #[arg(long, default_value_t = 1.0)]
    bm25_weight: f32,
    /// Weight of the vector leg in hybrid configurations
    #[arg(long, default_value_t = 1.0)]
    vector_weight: f32,
    /// How many fused chunks a configuration's reranker re-scores per query
    #[arg(long, default_value_t = situate_search::rerank::DEFAULT_DEPTH)]
    rerank_depth: usize,
}

/// One parsed configuration.
struct Config {
    name: String,
    mode: String,
    context: String,
    rerank: String,
}

fn parse_config(s: &str, existing_index: bool) -> Result<Config> {
    let parts: Vec<&str> = s.split('+').map(str::trim).collect();
    let (mode, context, rerank) = match parts.as_slice() {
        [m, c] => (*m, *c, "none"),
        [m, c, r] => (*m, *c, *r),
        _ => bail!("configuration {s:?}: expected MODE+CONTEXT[+RERANK], e.g. bm25+structural"),
    };
    let mode = match mode {
        "bm25" | "vector" | "hybrid" => mode,
        "embeddings" => "vector",
        _ => bail!("configuration {s:?}: unknown mode {mode:?} (bm25, vector or hybrid)"),
    };
    match (context, existing_index) {
        ("none", _) | ("structural", false) | ("indexed", true) => {}
        ("structural", true) => bail!(
            "configuration {s:?}: a set without a corpus is evaluated on its index as it is: use none or indexed"
        ),
        ("indexed", false) => bail!(
            "configuration {s:?}: `indexed` is for sets evaluated against an existing --index"
        ),
        (c, false) if c.strip_prefix("file:").is_some_and(|p| !p.is_empty()) => {
            let path = Path::new(&c[5..]);
            if !path.is_file() {
                bail!(
                    "configuration {s:?}: no contexts file {} (write one with `situate contexts export`)",
                    path.display()
                );
            }
        }
        (c, _) if c.starts_with("llm") => bail!(
            "configuration {s:?}: generate LLM contexts once (`situate ingest --context llm` on the corpus, then `situate contexts export FILE`) and evaluate them as file:FILE"
        ),
        _ => bail!(
            "configuration {s:?}: unknown context {context:?} (none, structural, indexed, file:CONTEXTS.jsonl)"
        ),
    }
    let rerank_shown = rerank_label(rerank).ok_or_else(|| {
        anyhow!(
            "configuration {s:?}: unknown reranker {rerank:?} (expected {})",
            situate_rerank::FORMS
        )
    })?;
    // A contexts file is named by its stem in reports and file names.
    let shown = match context.strip_prefix("file:") {
        Some(p) => format!(
            "file:{}",
            Path::new(p)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        ),
        None => context.to_string(),
    };
    Ok(Config {
        name: format!("{mode}+{shown}+{rerank_shown}"),
        mode: mode.into(),
        context: context.into(),
        rerank: rerank.into(),
    })
}

/// A reranker spec as configurations are named in reports and file names: options dropped,
/// a model directory or GGUF file by its name; `None` when it is no reranker's form.
fn rerank_label(spec: &str) -> Option<String> {
    let bare = spec.split('?').next().unwrap_or(spec);
    let name = |p: &str, stem: bool| {
        let p = Path::new(p);
        if stem { p.file_stem() } else { p.file_name() }
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| p.display().to_string())
    };
    let label = if bare == "none" || bare == "llm" {
        bare.to_string()
    } else if let Some(dir) = bare.strip_prefix("cross-encoder:") {
        format!("cross-encoder:{}", name(dir.trim_end_matches('/'), false))
    } else if let Some(llm) = bare.strip_prefix("llm:") {
        if llm.ends_with(".gguf") {
            format!("llm:{}", name(llm, true))
        } else {
            bare.to_string()
        }
    } else if situate_rerank::hosted::is_hosted(bare) {
        bare.to_string()
    } else {
        return None;
    };
    // Names become file names: no path separators.
    Some(label.replace(['/', '\\'], "_"))
}

/// Reads unanswerable control questions.
fn read_controls(path: &Path) -> Result<Vec<EvalQuery>> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let texts: Vec<(String, String)> = if name == "queries.jsonl" {
        beir::read_queries(path)?.into_iter().collect()
    } else if name.ends_with(".jsonl") {
        situate_eval::dataset::read_own(path)?
            .into_iter()
            .map(|q| (q.query.id, q.query.text))
            .collect()
    } else {
        std::fs::read_to_string(path)
            .with_context(|| format!("reading {}", path.display()))?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
            .map(|(i, l)| (format!("line{}", i + 1), l.trim().to_string()))
            .collect()
    };
    Ok(texts
        .into_iter()
        .map(|(id, text)| EvalQuery {
            id: format!("control:{id}"),
            text,
            judgments: Judgments::default(),
            golden_texts: vec![],
            unanswerable: true,
        })
        .collect())
}

pub fn run(
    a: EvalArgs,
    index: &Path,
    default_llm: &str,
    json: bool,
    quiet: bool,
) -> Result<std::process::ExitCode> {
    if a.rerank_depth == 0 {
        bail!("--rerank-depth must be at least 1");
    }
    let mut set = EvalSet::load(&a.dataset, &a.split)?;
    if let Some(n) = a.queries {
        set.truncate(n);
    }
    let existing = set.corpus == Corpus::Existing;
    let configs = a
        .config
        .iter()
        .map(|c| parse_config(c, existing))
        .collect::<Result<Vec<_>>>()?;
    if configs.is_empty() {
        bail!("no configuration given");
    }
    let mut names = HashSet::new();
    for c in &configs {
        if !names.insert(c.name.clone()) {
            bail!("configuration {} is listed twice", c.name);
        }
    }
    let matching = match a.matching.as_deref() {
        Some("id") => Matching::Id,
        Some("text") => Matching::StrippedText,
        Some(m) => bail!("--matching is id or text, not {m:?}"),
        None if set.format == "anthropic" => Matching::StrippedText,
        None => Matching::Id,
    };
    if matching == Matching::StrippedText && set.format != "anthropic" {
        bail!("text matching needs golden chunk texts, which only Anthropic's set has");
    }
    let mut queries = set.queries.clone();
    if let Some(c) = &a.controls {
        queries.extend(read_controls(c)?);
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let work = a.work.clone().unwrap_or_else(|| a.out.join("indexes"));

    let bar = crate::output::progress_bar(
        quiet || json,
        Some((configs.len() * queries.len()) as u64),
        "evaluating",
    );
    let mut rows = Vec::new();
    for cfg in &configs {
        let engine = match &set.corpus {
            Corpus::Existing => Engine::open(index, Access::Read).with_context(|| {
                format!(
                    "{} has no corpus of its own: evaluating against --index {}",
                    set.name,
                    index.display()
                )
            })?,
            corpus => build_index(corpus, &work, &set.name, cfg, &a)?,
        };
        let match_on = if cfg.context == "none" {
            MatchOn::Plain
        } else {
            MatchOn::Contextual
        };
        let mode: situate_search::Mode = cfg.mode.parse().map_err(anyhow::Error::msg)?;
        let reranker = situate_rerank::resolve(&cfg.rerank, default_llm)
            .with_context(|| format!("configuration {}", cfg.name))?;
        let rerank = reranker.as_deref().map(|r| situate_engine::Rerank {
            reranker: r,
            depth: a.rerank_depth,
        });
        let started = Instant::now();
        let mut rankings = Vec::with_capacity(queries.len());
        for q in &queries {
            let mut req = SearchRequest::new(&q.text, 100);
            req.match_on = match_on;
            req.context_weight = a.context_weight;
            req.mode = Some(mode);
            req.bm25_weight = a.bm25_weight;
            req.vector_weight = a.vector_weight;
            let hits = match rerank {
                // The reranker re-scores the fused top `depth` only; the rest of the ranking
                // follows in fused order, so deeper metrics (recall@100, MAP) still see it.
                Some(r) if r.depth < req.k => {
                    let top = SearchRequest {
                        k: r.depth,
                        ..req.clone()
                    };
                    let mut hits = engine.search_reranked(&top, &Default::default(), rerank)?;
                    let reranked: HashSet<String> =
                        hits.iter().map(|h| h.chunk_id.clone()).collect();
                    let fused = engine.search_filtered(&req, &Default::default())?;
                    hits.extend(
                        fused
                            .into_iter()
                            .filter(|h| !reranked.contains(&h.chunk_id)),
                    );
                    hits
                }
                _ => engine.search_reranked(&req, &Default::default(), rerank)?,
            };
            let mut seen = HashSet::new();
            let ranking: Vec<Retrieved> = hits
                .into_iter()
                .filter_map(|h| {
                    let id = match set.level {
                        Level::Chunk => h.chunk_id,
                        Level::Document => h.document_id,
                    };
                    seen.insert(id.clone()).then(|| Retrieved {
                        rank: 0,
                        id,
                        score: h.score,
                        legs: h.legs,
                        text: (matching == Matching::StrippedText).then_some(h.original_text),
                    })
                })
                .enumerate()
                .map(|(i, mut r)| {
                    r.rank = i + 1;
                    r
                })
                .collect();
            rankings.push(ranking);
            bar.inc(1);
        }
        let qps = queries.len() as f64 / started.elapsed().as_secs_f64().max(1e-9);
        let (metrics, records) = report::score(&queries, &rankings, matching);
        let top = |unanswerable: bool| -> Vec<Option<f32>> {
            queries
                .iter()
                .zip(&rankings)
                .filter(|(q, _)| q.unanswerable == unanswerable)
                .map(|(_, r)| r.first().map(|x| x.score))
                .collect()
        };
        let abstain = report::abstain(&top(false), &top(true));
        let path = a.out.join(format!("queries-{}.jsonl", cfg.name));
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?,
        );
        for r in &records {
            serde_json::to_writer(&mut f, r)?;
            writeln!(f)?;
        }
        f.flush()?;
        rows.push(ConfigReport {
            name: cfg.name.clone(),
            mode: cfg.mode.clone(),
            context: cfg.context.clone(),
            rerank: cfg.rerank.clone(),
            metrics,
            failure_reduction: None,
            queries_per_second: qps,
            abstain,
        });
    }
    bar.finish_and_clear();
    let baseline = rows[0].name.clone();
    report::add_reductions(&mut rows, &baseline);
    let answerable = queries.iter().filter(|q| !q.unanswerable).count();
    let table = report::markdown_table(&rows, matching, set.level);
    let title = format!("{} — {} answerable queries", set.name, answerable);
    situate_eval::plot::failure_chart(&rows, &title, &a.out.join("failure.svg"))
        .map_err(|e| anyhow!("drawing the plot: {e}"))?;

    let mut md = format!("# Evaluation: {}\n\n", set.name);
    md.push_str(&format!(
        "Data set `{}` ({} format), {} answerable and {} unanswerable queries; chunks of at most {} tokens \
         ({} overlap); context weight {}.\n\n",
        a.dataset.display(),
        set.format,
        answerable,
        queries.len() - answerable,
        a.max_tokens,
        a.overlap,
        a.context_weight
    ));
    md.push_str(&table);
    md.push_str("\n![failure rate](failure.svg)\n");
    for r in rows.iter().filter(|r| r.abstain.is_some()) {
        let ab = r.abstain.as_ref().expect("filtered");
        md.push_str(&format!(
            "\n## Unanswerable queries: {}\n\nThreshold {:.3} (the top score 95% of answerable queries reach): {:.1}% of \
             answerable queries lost, {:.1}% of unanswerable queries still answered.\n\n| answerable quantile | threshold | answerable lost | unanswerable abstained |\n|---|---|---|---|\n",
            r.name,
            ab.threshold,
            ab.answerable_lost * 100.0,
            ab.unanswerable_above_threshold * 100.0
        ));
        for (q, t, lost, abst) in &ab.curve {
            md.push_str(&format!(
                "| {q:.2} | {t:.3} | {:.1}% | {:.1}% |\n",
                lost * 100.0,
                abst * 100.0
            ));
        }
    }
    std::fs::write(a.out.join("report.md"), &md).context("writing report.md")?;
    let report = serde_json::json!({
        "dataset": a.dataset,
        "name": set.name,
        "format": set.format,
        "matching": matching,
        "level": set.level,
        "answerable_queries": answerable,
        "unanswerable_queries": queries.len() - answerable,
        "max_tokens": a.max_tokens,
        "overlap": a.overlap,
        "context_weight": a.context_weight,
        "configurations": rows,
    });
    std::fs::write(
        a.out.join("report.json"),
        serde_json::to_string_pretty(&report)?,
    )
    .context("writing report.json")?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        outln!("{table}");
        outln!("reports in {}", a.out.display());
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// Builds (or reuses: ingest skips what is unchanged) the index of a corpus for one context.
fn build_index(
    corpus: &Corpus,
    work: &Path,
    set: &str,
    cfg: &Config,
    a: &EvalArgs,
) -> Result<Engine> {
    let (input, format) = match corpus {
        Corpus::Beir(dir) => (dir.clone(), situate_ingest::SourceFormat::Beir),
        Corpus::Anthropic(file) => (file.clone(), situate_ingest::SourceFormat::Anthropic),
        Corpus::Existing => unreachable!("handled by the caller"),
    };
    let contexts_file = cfg.context.strip_prefix("file:").map(PathBuf::from);
    // Imported contexts go into an index built without any, named after the file's content.
    let file_tag;
    let context = match &contexts_file {
        Some(f) => {
            let bytes = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
            file_tag = format!("file-{}", &situate_core::hash_parts(&[&bytes])[..12]);
            file_tag.as_str()
        }
        None => cfg.context.as_str(),
    };
    // BM25-only configurations need no embeddings; the others share one index per
    // (context, embedder).
    let embedder = if cfg.mode == "bm25" {
        "none"
    } else {
        a.embedder.as_str()
    };
    let tag: String = embedder
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let dir = work.join(format!(
        "{set}-{context}-{tag}-{}-{}",
        a.max_tokens, a.overlap
    ));
    let create = CreateSettings {
        embedder: embedder.to_string(),
        ..CreateSettings::default()
    };
    let mut engine = Engine::open_or_create(&dir, create)
        .with_context(|| format!("opening the evaluation index {}", dir.display()))?;
    let method = if contexts_file.is_some() {
        "none"
    } else {
        context
    };
    let mut opts =
        IngestOptions::new(situate_contextualize::by_name(method).map_err(anyhow::Error::msg)?);
    opts.sources.format = format;
    opts.chunker.max_tokens = a.max_tokens;
    opts.chunker.overlap_tokens = a.overlap;
    let report = engine.ingest(std::slice::from_ref(&input), opts, &mut |_| {})?;
    if report.documents_ok() == 0 {
        bail!("nothing could be ingested from {}", input.display());
    }
    if let Some(f) = &contexts_file
        && report.added + report.replaced > 0
    {
        let (n, skipped) = crate::contexts::import_file(&mut engine, f)?;
        eprintln!(
            "imported {n} contexts from {} ({} skipped: chunks not in this corpus)",
            f.display(),
            skipped.len()
        );
    }
    Ok(engine)
}

#[cfg(test)]
mod tests {
    use super::rerank_label;

    #[test]
    fn rerankers_are_named_for_reports_without_paths_or_options() {
        assert_eq!(rerank_label("none").as_deref(), Some("none"));
        assert_eq!(rerank_label("llm").as_deref(), Some("llm"));
        assert_eq!(
            rerank_label("cross-encoder:/models/ms-marco-MiniLM-L-6-v2/?long=max").as_deref(),
            Some("cross-encoder:ms-marco-MiniLM-L-6-v2")
        );
        assert_eq!(
            rerank_label("llm:/models/qwen2.5-0.5b.gguf").as_deref(),
            Some("llm:qwen2.5-0.5b")
        );
        assert_eq!(
            rerank_label("llm:openai:gpt-4o-mini?base_url=http://x").as_deref(),
            Some("llm:openai:gpt-4o-mini")
        );
        assert_eq!(
            rerank_label("vllm:BAAI/bge-reranker-v2-m3?base_url=http://localhost:8000").as_deref(),
            Some("vllm:BAAI_bge-reranker-v2-m3")
        );
        assert_eq!(rerank_label("magic"), None);
    }
}
