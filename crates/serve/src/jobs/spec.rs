//! What a job is asked to do: [`JobSpec`] (the body of `POST /v1/jobs`) and its checks,
//! and the uploaded files an ingest job writes before it runs.

use crate::problem::Problem;
use serde::Deserialize;
use situate_engine::Decision;
pub use situate_eval::run::EvalJob;
use std::path::{Component, Path, PathBuf};

/// What a job does (`POST /v1/jobs`), by `kind`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
// One per request, moved once into the queue: boxing the big variant buys nothing.
#[allow(clippy::large_enum_variant)]
pub enum JobSpec {
    /// Ingest server-side paths and/or uploaded files, as `situate ingest` does.
    Ingest(IngestJob),
    /// Remove a document and its chunks from the store and every index.
    Delete {
        /// The document id.
        document_id: String,
    },
    /// Rebuild every index from the chunk cards (no LLM calls).
    Rebuild {},
    /// Write contexts with an LLM for stored chunks of some statuses, as `situate
    /// contextualize` (pending and failed) and `situate contexts regenerate --status`.
    Contextualize(situate_engine::api::ContextualizeRequest),
    /// An evaluation, as `situate eval`: its reports go to the service's evaluations
    /// folder under `name` (`GET /v1/evals/{name}`).
    Eval(EvalJob),
    /// The index moved to another embedder while it serves, as `situate reembed`.
    Reembed(situate_engine::ReembedRequest),
    /// Search settings chosen on questions by cross-validation, as `situate tune` (the
    /// answer says what to set; the service's own settings file is not written). Run
    /// beside the writer: it only reads.
    Tune(situate_engine::TuneRequest),
    /// A copy of the index taken while it is searched and written, as `situate backup`:
    /// into the service's backups folder under `name` (default: the time, UTC). Run beside
    /// the writer, not after it: a backup does not wait for an ingest job.
    Backup {
        /// The backup's folder name: one plain path segment.
        #[serde(default)]
        name: Option<String>,
    },
    /// A person's decision on one context (`situate contexts set`): provenance `manual`.
    Review {
        /// The chunk.
        chunk_id: String,
        /// `accept`, `reject` or `edit` (with `text`).
        decision: String,
        /// The new context, for `edit`.
        text: Option<String>,
    },
}

/// An `ingest` job: `situate ingest`'s settings by their names.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IngestJob {
    /// Files and directories on the server.
    #[serde(default)]
    pub paths: Vec<PathBuf>,
    /// Files sent in the request: each document's id is its `path`.
    #[serde(default)]
    pub files: Vec<UploadedFile>,
    /// Documents given as text: ids, titles and metadata as given.
    #[serde(default)]
    pub texts: Vec<situate_engine::TextInput>,
    /// The context method [structural, or `[ingest] context`].
    pub context: Option<String>,
    /// `auto`, `files`, `beir`, `beir-flat` or `anthropic` [auto].
    pub format: Option<String>,
    /// A language forced on every document.
    pub language: Option<String>,
    /// Largest chunk in tokens.
    pub max_tokens: Option<usize>,
    /// Tokens shared by neighbouring chunks.
    pub overlap: Option<usize>,
    /// Documents per committed batch.
    pub batch: Option<usize>,
    /// Metadata for every document, `KEY=VALUE`.
    #[serde(default)]
    pub meta: Vec<String>,
    /// The LLM, over `[llm] model`.
    pub llm: Option<String>,
    /// Dollars not to spend beyond.
    pub budget: Option<f64>,
}

/// A file sent with an ingest job.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UploadedFile {
    /// A relative path (`notes/a.md`): the document's id; its extension decides how it is
    /// read, as for a file on disk.
    pub path: String,
    /// The file's text.
    pub text: String,
}

impl JobSpec {
    pub(super) fn kind(&self) -> &'static str {
        match self {
            JobSpec::Ingest(_) => "ingest",
            JobSpec::Delete { .. } => "delete",
            JobSpec::Rebuild {} => "rebuild",
            JobSpec::Contextualize(_) => "contextualize",
            JobSpec::Review { .. } => "review",
            JobSpec::Eval(_) => "eval",
            JobSpec::Backup { .. } => "backup",
            JobSpec::Tune(_) => "tune",
            JobSpec::Reembed(_) => "reembed",
        }
    }

    /// Checks what can be checked before the job is queued.
    pub(super) fn check(&self) -> Result<(), Problem> {
        if let JobSpec::Review { decision, text, .. } = self {
            decision_of(decision, text.as_deref())?;
        }
        if let JobSpec::Eval(EvalJob { name, .. }) = self {
            eval_name(name)?;
        }
        if let JobSpec::Reembed(r) = self {
            r.check()?;
        }
        if let JobSpec::Tune(t) = self {
            // Its fields (folds, metric, grid) checked now, so a bad one is a 400, not a
            // failed job; the settings it is measured against are the service's, at run time.
            t.check(&situate_engine::Settings::default())?;
        }
        if let JobSpec::Backup { name: Some(name) } = self {
            EvalJob::check_name(name).map_err(|e| {
                Problem::from(situate_engine::EngineError::InvalidField {
                    field: "name".into(),
                    reason: e.to_string().replace("evaluation", "backup"),
                })
            })?;
        }
        if let JobSpec::Contextualize(req) = self {
            req.check()?;
        }
        if let JobSpec::Ingest(IngestJob {
            paths,
            files,
            texts,
            ..
        }) = self
        {
            if paths.is_empty() && files.is_empty() && texts.is_empty() {
                return Err(Problem::invalid(
                    "nothing to ingest: give `paths` (on the server), `files` or `texts`",
                ));
            }
            if files.len() > MAX_UPLOAD_FILES {
                return Err(Problem::from(situate_engine::EngineError::InvalidField {
                    field: "files".into(),
                    reason: format!(
                        "{} files in one job; at most {MAX_UPLOAD_FILES} (send more jobs)",
                        files.len()
                    ),
                }));
            }
            let mut seen = std::collections::HashSet::new();
            for f in files {
                upload_path(&f.path)?;
                if !seen.insert(f.path.as_str()) {
                    return Err(Problem::invalid(format!(
                        "the file {:?} is sent twice",
                        f.path
                    )));
                }
            }
        }
        Ok(())
    }
}

/// The most files one ingest job may upload (their bytes are bounded by the upload limit).
pub const MAX_UPLOAD_FILES: usize = 10_000;

/// An evaluation's name, checked: one plain path segment.
pub fn eval_name(name: &str) -> Result<&str, Problem> {
    EvalJob::check_name(name).map_err(Problem::from)
}

/// A review decision from its name (and text): [`Decision::parse`].
pub fn decision_of(decision: &str, text: Option<&str>) -> Result<Decision, Problem> {
    Decision::parse(decision, text).map_err(Problem::from)
}

/// An uploaded file's path, checked: relative, no `..`, no empty or hidden tricks.
pub(super) fn upload_path(p: &str) -> Result<PathBuf, Problem> {
    let bad = || {
        Problem::invalid(format!(
            "the file path {p:?} must be relative, like notes/a.md, without `..`"
        ))
    };
    if p.is_empty() || p.contains('\0') || p.contains('\\') {
        return Err(bad());
    }
    let path = PathBuf::from(p);
    if !path.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(bad());
    }
    Ok(path)
}

/// Writes uploaded files under a fresh temporary directory (outside the index, which
/// ingest never reads), one top-level entry per first path component.
/// The name every upload folder starts with, then the service's process id.
const UPLOAD_PREFIX: &str = "situate-upload-";

/// Removes the upload folders of services that are no longer running (killed before they
/// could remove their own): a folder's name carries its service's process id.
pub fn remove_stale_uploads() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(UPLOAD_PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let alive = pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists();
        if !alive && Path::new("/proc/self").exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

pub(super) fn write_uploads(files: &[UploadedFile]) -> Result<tempfile::TempDir, Problem> {
    let dir = tempfile::Builder::new()
        .prefix(&format!("{UPLOAD_PREFIX}{}-", std::process::id()))
        .tempdir()
        .map_err(Problem::internal)?;
    for f in files {
        let rel = upload_path(&f.path)?;
        let target = dir.path().join(&rel);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| {
                Problem::invalid(format!("cannot place the file {:?}: {e}", f.path))
            })?;
        }
        if target.is_dir() {
            return Err(Problem::invalid(format!(
                "the file {:?} is also a directory of another file",
                f.path
            )));
        }
        std::fs::write(&target, &f.text)
            .map_err(|e| Problem::invalid(format!("cannot place the file {:?}: {e}", f.path)))?;
    }
    Ok(dir)
}
