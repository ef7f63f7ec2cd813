//! An evaluation as a request body names it ([`EvalJob`]): the service's `eval` job and
//! the Python package's `Index.eval` take the same fields, with the same defaults
//! ([`super::defaults`]).

use super::{EvalRequest, defaults};
use serde::Deserialize;
use situate_engine::{EngineError, Result, SearchSettings, Settings};
use std::path::{Path, PathBuf};

/// An evaluation: `situate eval`'s settings by their names, its report under `name`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvalJob {
    /// The set: a BEIR folder, Anthropic's folder or a `.jsonl` of questions (asked of
    /// the index) on the machine that runs it.
    pub dataset: PathBuf,
    /// The report's name: letters, digits, `.`, `_` and `-`.
    pub name: String,
    /// Configurations `MODE+CONTEXT[+RERANK]`; the first is the baseline
    /// [bm25+none, bm25+structural].
    #[serde(default)]
    pub configs: Vec<String>,
    /// Only the first N queries.
    pub queries: Option<usize>,
    /// The qrels split of a BEIR folder [test].
    pub split: Option<String>,
    /// `id` or `text`.
    pub matching: Option<String>,
    /// Largest chunk in tokens when the corpus is chunked [256].
    pub max_tokens: Option<usize>,
    /// Overlap in tokens [32].
    pub overlap: Option<usize>,
    /// Embedder of vector and hybrid configurations [auto].
    pub embedder: Option<String>,
    /// How many fused hits a reranker re-scores.
    pub rerank_depth: Option<usize>,
}

impl EvalJob {
    /// Checks a report's name (it names a folder): letters, digits, `.`, `_` and `-`, not
    /// starting with `.`, at most 100 characters.
    pub fn check_name(name: &str) -> Result<&str> {
        let ok = !name.is_empty()
            && name.len() <= 100
            && !name.starts_with('.')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
        if ok {
            Ok(name)
        } else {
            Err(EngineError::field_error(
                "name",
                format!(
                    "evaluation name {name:?}: use letters, digits, '.', '_' and '-' (not first)"
                ),
            ))
        }
    }

    /// The run this job asks for: its reports in `reports/NAME`, a set of questions asked
    /// of the index at `index`, `settings`' `[search]` under the job's rerank depth.
    /// Answers are measured from the CLI (`situate eval --answers`).
    pub fn request(self, reports: &Path, index: &Path, settings: &Settings) -> Result<EvalRequest> {
        EvalJob::check_name(&self.name)?;
        let EvalJob {
            dataset,
            name,
            configs,
            queries,
            split,
            matching,
            max_tokens,
            overlap,
            embedder,
            rerank_depth,
        } = self;
        Ok(EvalRequest {
            dataset,
            out: reports.join(&name),
            configs: if configs.is_empty() {
                defaults::configs()
            } else {
                configs
            },
            queries,
            split: split.unwrap_or_else(|| defaults::SPLIT.into()),
            matching,
            controls: None,
            work: None,
            max_tokens: max_tokens.unwrap_or(defaults::MAX_TOKENS),
            overlap: overlap.unwrap_or(defaults::OVERLAP),
            embedder: embedder.unwrap_or_else(|| defaults::EMBEDDER.into()),
            search: SearchSettings {
                rerank_depth,
                ..SearchSettings::default()
            }
            .over(&settings.search),
            default_llm: settings.default_llm(),
            index: index.to_path_buf(),
            answers: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_takes_the_defaults_and_refuses_a_name_that_is_no_folder() {
        let job: EvalJob =
            serde_json::from_value(serde_json::json!({"dataset": "set", "name": "run-1"}))
                .expect("parses");
        let req = job
            .clone()
            .request(Path::new("reports"), Path::new("idx"), &Settings::default())
            .expect("request");
        assert_eq!(req.out, Path::new("reports/run-1"));
        assert_eq!(req.configs, defaults::configs());
        assert_eq!(req.split, defaults::SPLIT);
        for bad in ["", ".hidden", "a/b", "../x"] {
            let err = EvalJob {
                name: bad.into(),
                ..job.clone()
            }
            .request(Path::new("r"), Path::new("i"), &Settings::default())
            .expect_err(bad);
            assert_eq!(err.field(), Some("name"), "{bad:?}");
        }
    }
}
