//! A configuration `MODE+CONTEXT[+RERANK]`: parsed, named, and its search plan checked.

use super::*;

/// One parsed configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalConfig {
    /// Its name in reports and file names: `mode+context+rerank`.
    pub name: String,
    /// `bm25`, `vector` or `hybrid`.
    pub mode: String,
    /// `none`, `structural`, `indexed` or `file:PATH`.
    pub context: String,
    /// The reranker spec (`none` for none).
    pub rerank: String,
}

/// Parses one configuration; `existing_index` when the set has no corpus of its own.
pub fn parse_config(s: &str, existing_index: bool) -> Result<EvalConfig> {
    let bad = |m: String| Err(EngineError::field_error("configs", format!("{s:?}: {m}")));
    let parts: Vec<&str> = s.split('+').map(str::trim).collect();
    let (mode, context, rerank) = match parts.as_slice() {
        [m, c] => (*m, *c, "none"),
        [m, c, r] => (*m, *c, *r),
        _ => return bad("expected MODE+CONTEXT[+RERANK], e.g. bm25+structural".into()),
    };
    let mode = match mode {
        "bm25" | "vector" | "hybrid" => mode,
        "embeddings" => "vector",
        _ => return bad(format!("unknown mode {mode:?} (bm25, vector or hybrid)")),
    };
    match (context, existing_index) {
        ("none", _) | ("structural", false) | ("indexed", true) => {}
        ("structural", true) => {
            return bad(
                "a set without a corpus is evaluated on its index as it is: use none or indexed"
                    .into(),
            );
        }
        ("indexed", false) => {
            return bad("`indexed` is for sets evaluated against an existing --index".into());
        }
        (c, false) if c.strip_prefix("file:").is_some_and(|p| !p.is_empty()) => {
            let path = Path::new(&c[5..]);
            if !path.is_file() {
                return bad(format!(
                    "no contexts file {} (write one with `situate contexts export`)",
                    path.display()
                ));
            }
        }
        (c, _) if c.starts_with("llm") || c.starts_with("document") => {
            return bad(format!(
                "generate LLM contexts once (`situate ingest --context {c}` on the corpus, then `situate contexts export FILE`) and evaluate them as file:FILE"
            ));
        }
        _ => {
            return bad(format!(
                "unknown context {context:?} (none, structural, indexed, file:CONTEXTS.jsonl)"
            ));
        }
    }
    let Some(rerank_shown) = rerank_label(rerank) else {
        return bad(format!(
            "unknown reranker {rerank:?} (expected {})",
            situate_rerank::FORMS
        ));
    };
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
    Ok(EvalConfig {
        name: format!("{mode}+{shown}+{rerank_shown}"),
        mode: mode.into(),
        context: context.into(),
        rerank: rerank.into(),
    })
}

/// A reranker spec as configurations are named in reports and file names: options dropped,
/// a model directory or GGUF file by its name; `None` when it is no reranker's form.
pub fn rerank_label(spec: &str) -> Option<String> {
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

/// The checked plan of one configuration: `base` with the configuration's mode, BM25
/// kind and reranker, and `k` = [`EVAL_DEPTH`].
pub(super) fn config_plan(
    base: &SearchSettings,
    cfg: &EvalConfig,
    default_llm: &str,
) -> Result<situate_engine::SearchPlan> {
    let own = SearchSettings {
        k: Some(EVAL_DEPTH),
        mode: Some(cfg.mode.clone()),
        bm25: Some(
            if cfg.context == "none" {
                "plain"
            } else {
                "contextual"
            }
            .into(),
        ),
        rerank: Some(cfg.rerank.clone()),
        ..SearchSettings::default()
    };
    own.over(base)
        .plan(default_llm)
        .map_err(|e| e.within(format!("configuration {}", cfg.name)))
}
