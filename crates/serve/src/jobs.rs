//! Writes as jobs: ingest (server-side paths or uploaded files), contexts by an LLM,
//! a person's review decision, deletion and rebuild, run one at a time by the one writer
//! thread, in the order they were asked.
//!
//! A job is `queued`, then `running`, then `succeeded`, `failed` or `cancelled`. Its status
//! (progress by stage, tokens and dollars of LLM work, the engine's report or the error) is
//! kept in a `watch` channel: `GET /v1/jobs/{id}` reads it, `GET /v1/jobs/{id}/events`
//! streams each change as Server-Sent Events.
//!
//! The writer opens the index with `Access::Write` for each job and closes it after, so the
//! write lock is held only while a job runs (a `situate ingest` beside the service waits
//! for no job, and a job started while it writes fails with `locked`). Every guarantee of a
//! write is the engine's: documents are committed whole, in batches; a job cancelled or a
//! server killed mid-ingest leaves the index consistent, and running the same job again
//! finishes the work with nothing lost or duplicated.
//!
//! Jobs live in memory: a restarted service has none (the index keeps what they did).

use crate::problem::Problem;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use situate_core::TokenUsage;
use situate_engine::eval::{EvalRequest, run_eval};
use situate_engine::{
    Access, Decision, Engine, IngestEvent, IngestRequest, LlmRun, SearchSettings, Settings,
};
use std::collections::{BTreeMap, VecDeque};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;
use tokio::sync::watch;

/// What a job does (`POST /v1/jobs`), by `kind`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
// One per request, moved once into the queue: boxing the big variant buys nothing.
#[allow(clippy::large_enum_variant)]
pub enum JobSpec {
    /// Ingest server-side paths and/or uploaded files, as `situate ingest` does.
    Ingest {
        /// Files and directories on the server.
        #[serde(default)]
        paths: Vec<PathBuf>,
        /// Files sent in the request: each document's id is its `path`.
        #[serde(default)]
        files: Vec<UploadedFile>,
        /// The context method [structural, or `[ingest] context`].
        context: Option<String>,
        /// `auto`, `files`, `beir`, `beir-flat` or `anthropic` [auto].
        format: Option<String>,
        /// A language forced on every document.
        language: Option<String>,
        /// Largest chunk in tokens.
        max_tokens: Option<usize>,
        /// Tokens shared by neighbouring chunks.
        overlap: Option<usize>,
        /// Documents per committed batch.
        batch: Option<usize>,
        /// Metadata for every document, `KEY=VALUE`.
        #[serde(default)]
        meta: Vec<String>,
        /// The LLM, over `[llm] model`.
        llm: Option<String>,
        /// Dollars not to spend beyond.
        budget: Option<f64>,
    },
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
    Eval {
        /// The set: a BEIR folder, Anthropic's folder or a `.jsonl` of questions (asked of
        /// the served index) on the server.
        dataset: PathBuf,
        /// The report's name: letters, digits, `.`, `_` and `-`.
        name: String,
        /// Configurations `MODE+CONTEXT[+RERANK]`; the first is the baseline
        /// [bm25+none, bm25+structural].
        #[serde(default)]
        configs: Vec<String>,
        /// Only the first N queries.
        queries: Option<usize>,
        /// The qrels split of a BEIR folder [test].
        split: Option<String>,
        /// `id` or `text`.
        matching: Option<String>,
        /// Largest chunk in tokens when the corpus is chunked [256].
        max_tokens: Option<usize>,
        /// Overlap in tokens [32].
        overlap: Option<usize>,
        /// Embedder of vector and hybrid configurations [auto].
        embedder: Option<String>,
        /// How many fused hits a reranker re-scores.
        rerank_depth: Option<usize>,
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
    fn kind(&self) -> &'static str {
        match self {
            JobSpec::Ingest { .. } => "ingest",
            JobSpec::Delete { .. } => "delete",
            JobSpec::Rebuild {} => "rebuild",
            JobSpec::Contextualize(_) => "contextualize",
            JobSpec::Review { .. } => "review",
            JobSpec::Eval { .. } => "eval",
        }
    }

    /// Checks what can be checked before the job is queued.
    fn check(&self) -> Result<(), Problem> {
        if let JobSpec::Review { decision, text, .. } = self {
            decision_of(decision, text.as_deref())?;
        }
        if let JobSpec::Eval { name, .. } = self {
            eval_name(name)?;
        }
        if let JobSpec::Contextualize(req) = self {
            req.check()?;
        }
        if let JobSpec::Ingest { paths, files, .. } = self {
            if paths.is_empty() && files.is_empty() {
                return Err(Problem::invalid(
                    "nothing to ingest: give `paths` (on the server) or `files`",
                ));
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

/// An evaluation's name, checked: one plain path segment.
pub fn eval_name(name: &str) -> Result<&str, Problem> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if ok {
        Ok(name)
    } else {
        Err(Problem::invalid(format!(
            "evaluation name {name:?}: use letters, digits, '.', '_' and '-' (not first)"
        )))
    }
}

/// A review decision from its name (and text).
pub fn decision_of(decision: &str, text: Option<&str>) -> Result<Decision, Problem> {
    match (decision, text) {
        ("accept", None) => Ok(Decision::Accept),
        ("reject", None) => Ok(Decision::Reject),
        ("edit", Some(t)) if !t.trim().is_empty() => Ok(Decision::Text(t.to_string())),
        ("edit", _) => Err(Problem::invalid(
            "`edit` needs a non-empty `text` (use `reject` to index the chunk without a context)",
        )),
        ("accept" | "reject", Some(_)) => Err(Problem::invalid(format!(
            "`{decision}` takes no `text` (use `edit` to replace the context)"
        ))),
        _ => Err(Problem::invalid(format!(
            "decision {decision:?}: expected accept, reject or edit"
        ))),
    }
}

/// An uploaded file's path, checked: relative, no `..`, no empty or hidden tricks.
fn upload_path(p: &str) -> Result<PathBuf, Problem> {
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

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting for the writer.
    Queued,
    /// Being run.
    Running,
    /// Done.
    Succeeded,
    /// Stopped by an error (`error` says which).
    Failed,
    /// Cancelled (before it ran, or while it ran: what it committed stays).
    Cancelled,
}

impl JobState {
    /// Every state.
    pub const ALL: [JobState; 5] = [
        JobState::Queued,
        JobState::Running,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
    ];

    /// The state's name, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    /// Whether the job will not change any more.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled
        )
    }
}

/// Progress of one stage.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct Stage {
    /// Units done.
    pub done: u64,
    /// Units to do, when known.
    pub total: Option<u64>,
}

/// A job as clients see it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct JobStatus {
    /// The job's id.
    pub id: String,
    /// `ingest`, `delete` or `rebuild`.
    pub kind: &'static str,
    /// Where it is.
    pub state: JobState,
    /// When it was asked (RFC 3339 UTC).
    pub created_at: String,
    /// When it started running.
    pub started_at: Option<String>,
    /// When it ended.
    pub finished_at: Option<String>,
    /// Progress by stage (`documents`, `chunks`, `contexts`, `embedding`, `indexing`).
    pub progress: BTreeMap<&'static str, Stage>,
    /// Inputs skipped so far.
    pub skipped: u64,
    /// Batches committed so far (each is searchable once committed).
    pub commits: u64,
    /// Tokens the LLM spent.
    pub tokens: TokenUsage,
    /// Their cost in dollars, when the model's price is known.
    pub dollars: Option<f64>,
    /// Whether a cancel was asked.
    pub cancel_requested: bool,
    /// The engine's report when the job ended (an ingest's counts and skipped inputs).
    pub result: Option<serde_json::Value>,
    /// Why it failed: a stable code and a message.
    pub error: Option<JobError>,
}

/// Why a job failed.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct JobError {
    /// The same stable codes as problem+json answers.
    pub code: &'static str,
    /// What went wrong.
    pub detail: String,
    /// The wire name of the job's field at fault, when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// For `model-missing`: the command that installs the model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub install: Option<String>,
}

struct Job {
    status: watch::Sender<JobStatus>,
    cancel: Arc<AtomicBool>,
}

struct Queued {
    id: String,
    spec: JobSpec,
    uploads: Option<tempfile::TempDir>,
}

/// The job table and the writer thread.
pub struct Jobs {
    table: Arc<Mutex<Table>>,
    tx: mpsc::Sender<Queued>,
    prefix: String,
    /// The shared store, when the index is a query node: its cards are a copy, written by
    /// the follower alone, so the jobs that write are refused (evaluations still run).
    node_of: Option<String>,
}

#[derive(Default)]
struct Table {
    jobs: BTreeMap<u64, (String, Job)>,
    next: u64,
    order: VecDeque<u64>,
}

/// How many finished jobs are remembered.
const KEEP_FINISHED: usize = 1000;

impl Jobs {
    /// Marks the index as a query node of `store` (write jobs are refused).
    pub fn on_node(mut self, store: String) -> Jobs {
        self.node_of = Some(store);
        self
    }

    /// Starts the writer thread for the index at `index`.
    pub fn start(index: PathBuf, settings: Settings, evals: PathBuf) -> std::io::Result<Jobs> {
        let (tx, rx) = mpsc::channel::<Queued>();
        let table = Arc::new(Mutex::new(Table::default()));
        let t = Arc::clone(&table);
        std::thread::Builder::new()
            .name("situate-writer".into())
            .spawn(move || {
                while let Ok(q) = rx.recv() {
                    let Some((status, cancel)) = lookup(&t, &q.id) else {
                        continue;
                    };
                    run_job(&index, &settings, &evals, q, &status, &cancel);
                }
            })?;
        // Ids differ between runs of the service, so a client holding an old id gets a
        // 404, not another job.
        let prefix = format!(
            "{:08x}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos() ^ d.as_secs() as u32)
                .unwrap_or(0)
        );
        Ok(Jobs {
            table,
            tx,
            prefix,
            node_of: None,
        })
    }

    /// Queues a job; returns its status.
    pub fn submit(&self, spec: JobSpec) -> Result<JobStatus, Problem> {
        if let Some(store) = &self.node_of
            && !matches!(spec, JobSpec::Eval { .. })
        {
            return Err(Problem::new(
                axum::http::StatusCode::CONFLICT,
                "query-node",
                format!(
                    "this service is a query node of the shared store {store}: its index is a copy the store's change feed writes; ingest, contextualize, review, delete and rebuild through the store (`situate ingest --store`, `situate worker --store`)"
                ),
            ));
        }
        spec.check()?;
        let uploads = match &spec {
            JobSpec::Ingest { files, .. } if !files.is_empty() => Some(write_uploads(files)?),
            _ => None,
        };
        let mut t = self
            .table
            .lock()
            .map_err(|_| Problem::internal("the job table is poisoned"))?;
        t.next += 1;
        let n = t.next;
        let id = format!("{}-{n}", self.prefix);
        let status = JobStatus {
            id: id.clone(),
            kind: spec.kind(),
            state: JobState::Queued,
            created_at: situate_core::now_rfc3339(),
            started_at: None,
            finished_at: None,
            progress: BTreeMap::new(),
            skipped: 0,
            commits: 0,
            tokens: TokenUsage::default(),
            dollars: None,
            cancel_requested: false,
            result: None,
            error: None,
        };
        let (tx, _) = watch::channel(status.clone());
        t.jobs.insert(
            n,
            (
                id.clone(),
                Job {
                    status: tx,
                    cancel: Arc::new(AtomicBool::new(false)),
                },
            ),
        );
        t.order.push_back(n);
        forget_old(&mut t);
        drop(t);
        self.tx
            .send(Queued { id, spec, uploads })
            .map_err(|_| Problem::internal("the writer has stopped"))?;
        Ok(status)
    }

    /// A job's status.
    pub fn status(&self, id: &str) -> Result<JobStatus, Problem> {
        Ok(self.receiver(id)?.borrow().clone())
    }

    /// Every job remembered, newest first.
    pub fn list(&self) -> Result<Vec<JobStatus>, Problem> {
        let t = self
            .table
            .lock()
            .map_err(|_| Problem::internal("the job table is poisoned"))?;
        Ok(t.jobs
            .values()
            .rev()
            .map(|(_, j)| j.status.borrow().clone())
            .collect())
    }

    /// How many jobs are remembered in each state.
    pub fn counts(&self) -> Result<Vec<(&'static str, u64)>, Problem> {
        let t = self
            .table
            .lock()
            .map_err(|_| Problem::internal("the job table is poisoned"))?;
        let mut counts = [0u64; 5];
        for (_, j) in t.jobs.values() {
            let state = j.status.borrow().state;
            if let Some(i) = JobState::ALL.iter().position(|s| *s == state) {
                counts[i] += 1;
            }
        }
        Ok(JobState::ALL
            .iter()
            .zip(counts)
            .map(|(s, n)| (s.as_str(), n))
            .collect())
    }

    /// A receiver of a job's status changes.
    pub fn receiver(&self, id: &str) -> Result<watch::Receiver<JobStatus>, Problem> {
        let t = self
            .table
            .lock()
            .map_err(|_| Problem::internal("the job table is poisoned"))?;
        find(&t, id)
            .map(|j| j.status.subscribe())
            .ok_or_else(|| not_found(id))
    }

    /// Waits at most `limit` for a job to end; returns its status then (final or not).
    pub async fn wait(&self, id: &str, limit: Duration) -> Result<JobStatus, Problem> {
        let mut rx = self.receiver(id)?;
        let until_final = async {
            loop {
                if rx.borrow_and_update().state.is_final() || rx.changed().await.is_err() {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(limit, until_final).await;
        let now = rx.borrow().clone();
        Ok(now)
    }

    /// A person's decision on one context, as a job on the writer: checks the decision,
    /// queues it and waits at most `limit`. A decision that failed is its error (a chunk
    /// that is not there: `not-found`); otherwise the job as it is then (succeeded, or
    /// still queued behind a long job).
    pub async fn decide(
        &self,
        chunk_id: &str,
        decision: String,
        text: Option<String>,
        limit: Duration,
    ) -> Result<JobStatus, Problem> {
        decision_of(&decision, text.as_deref())?;
        let job = self.submit(JobSpec::Review {
            chunk_id: chunk_id.to_string(),
            decision,
            text,
        })?;
        let done = self.wait(&job.id, limit).await?;
        match (done.state, &done.error) {
            (JobState::Failed, Some(e)) => Err(Problem {
                field: e.field.clone(),
                install: e.install.clone(),
                ..Problem::new(status_of(e.code), e.code, e.detail.clone())
            }),
            (JobState::Failed, None) => Err(Problem::internal("the decision failed")),
            _ => Ok(done),
        }
    }

    /// Asks a job to stop: a queued job is cancelled at once; a running ingest stops
    /// reading at the next document and commits what has its contexts; deletion and
    /// rebuild are short and finish. Cancelling a finished job changes nothing.
    pub fn cancel(&self, id: &str) -> Result<JobStatus, Problem> {
        let t = self
            .table
            .lock()
            .map_err(|_| Problem::internal("the job table is poisoned"))?;
        let job = find(&t, id).ok_or_else(|| not_found(id))?;
        job.cancel.store(true, Ordering::Release);
        job.status.send_modify(|s| {
            if !s.state.is_final() {
                s.cancel_requested = true;
            }
            if s.state == JobState::Queued {
                s.state = JobState::Cancelled;
                s.finished_at = Some(situate_core::now_rfc3339());
            }
        });
        Ok(job.status.borrow().clone())
    }
}

/// The HTTP status of a job error's code, for answers made from a job's outcome.
pub fn status_of(code: &str) -> StatusCode {
    if code == "cancelled" {
        return StatusCode::CONFLICT;
    }
    situate_engine::ErrorKind::TABLE
        .iter()
        .find(|w| w.code == code)
        .and_then(|w| StatusCode::from_u16(w.http).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

fn not_found(id: &str) -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "not-found",
        format!("no job {id:?} (jobs are kept in memory until the service stops)"),
    )
}

fn find<'a>(t: &'a Table, id: &str) -> Option<&'a Job> {
    let n: u64 = id.rsplit_once('-')?.1.parse().ok()?;
    t.jobs
        .get(&n)
        .filter(|(full, _)| full == id)
        .map(|(_, j)| j)
}

fn lookup(t: &Mutex<Table>, id: &str) -> Option<(watch::Sender<JobStatus>, Arc<AtomicBool>)> {
    let t = t.lock().ok()?;
    find(&t, id).map(|j| (j.status.clone(), Arc::clone(&j.cancel)))
}

/// Forgets the oldest finished jobs beyond [`KEEP_FINISHED`].
fn forget_old(t: &mut Table) {
    while t.order.len() > KEEP_FINISHED {
        let Some(pos) = t.order.iter().position(|n| {
            t.jobs
                .get(n)
                .is_some_and(|(_, j)| j.status.borrow().state.is_final())
        }) else {
            return;
        };
        if let Some(n) = t.order.remove(pos) {
            t.jobs.remove(&n);
        }
    }
}

/// Writes uploaded files under a fresh temporary directory (outside the index, which
/// ingest never reads), one top-level entry per first path component.
fn write_uploads(files: &[UploadedFile]) -> Result<tempfile::TempDir, Problem> {
    let dir = tempfile::Builder::new()
        .prefix("situate-upload-")
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

fn run_job(
    index: &Path,
    settings: &Settings,
    evals: &Path,
    q: Queued,
    status: &watch::Sender<JobStatus>,
    cancel: &Arc<AtomicBool>,
) {
    if status.borrow().state == JobState::Cancelled {
        return;
    }
    status.send_modify(|s| {
        s.state = JobState::Running;
        s.started_at = Some(situate_core::now_rfc3339());
    });
    let outcome = match q.spec {
        JobSpec::Ingest {
            paths,
            files: _,
            context,
            format,
            language,
            max_tokens,
            overlap,
            batch,
            meta,
            llm,
            budget,
        } => {
            let mut all = paths;
            if let Some(dir) = &q.uploads {
                // Each top-level entry, so that a document's id is its upload path.
                match std::fs::read_dir(dir.path()) {
                    Ok(entries) => {
                        let mut tops: Vec<PathBuf> =
                            entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
                        tops.sort();
                        all.extend(tops);
                    }
                    Err(e) => {
                        finish(status, Err(Problem::internal(format!("uploads: {e}"))));
                        return;
                    }
                }
            }
            let req = IngestRequest {
                paths: all,
                context,
                format,
                language,
                max_tokens,
                overlap,
                tokenizer: None,
                batch,
                llm: LlmRun {
                    llm,
                    budget,
                    dry_run: false,
                },
                meta,
                embedder: None,
                vector_index: None,
                cancel: Some(Arc::clone(cancel)),
            };
            ingest(index, settings, req, status)
        }
        JobSpec::Delete { document_id } => Engine::open(index, Access::Write)
            .and_then(|mut e| e.remove_document(&document_id))
            .map_err(Problem::from)
            .and_then(|a| serde_json::to_value(a).map_err(Problem::internal)),
        JobSpec::Contextualize(req) => contextualize(index, settings, &req, status, cancel),
        JobSpec::Review {
            chunk_id,
            decision,
            text,
        } => decision_of(&decision, text.as_deref()).and_then(|d| {
            let mut e = Engine::open(index, Access::Write)?;
            let answer = e.decide(&chunk_id, d)?;
            serde_json::to_value(answer).map_err(Problem::internal)
        }),
        JobSpec::Eval {
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
        } => {
            let req = EvalRequest {
                dataset,
                out: evals.join(&name),
                configs: if configs.is_empty() {
                    vec!["bm25+none".into(), "bm25+structural".into()]
                } else {
                    configs
                },
                queries,
                split: split.unwrap_or_else(|| "test".into()),
                matching,
                controls: None,
                work: None,
                max_tokens: max_tokens.unwrap_or(256),
                overlap: overlap.unwrap_or(32),
                embedder: embedder.unwrap_or_else(|| "auto".into()),
                search: SearchSettings {
                    rerank_depth,
                    ..SearchSettings::default()
                }
                .over(&settings.search),
                default_llm: settings.default_llm(),
                index: index.to_path_buf(),
                // Answers are measured from the CLI (`situate eval --answers`): a
                // model run per question is not a service job's business.
                answers: None,
            };
            run_eval(&req, &mut |done, total| {
                status.send_modify(|s| {
                    s.progress.insert(
                        "queries",
                        Stage {
                            done,
                            total: Some(total),
                        },
                    );
                })
            })
            .map_err(Problem::from)
            .and_then(|o| {
                let mut v = serde_json::to_value(&o.report).map_err(Problem::internal)?;
                if let Some(obj) = v.as_object_mut() {
                    obj.insert("id".into(), name.clone().into());
                    obj.insert("notes".into(), o.notes.into());
                }
                Ok(v)
            })
        }
        JobSpec::Rebuild {} => Engine::open(index, Access::Write)
            .and_then(|mut e| {
                e.rebuild(&mut |done, total| {
                    status.send_modify(|s| {
                        s.progress.insert(
                            "indexing",
                            Stage {
                                done,
                                total: Some(total),
                            },
                        );
                    })
                })
            })
            .map_err(Problem::from)
            .and_then(|r| serde_json::to_value(r).map_err(Problem::internal)),
    };
    finish(status, outcome);
    drop(q.uploads);
}

fn contextualize(
    index: &Path,
    settings: &Settings,
    req: &situate_engine::api::ContextualizeRequest,
    status: &watch::Sender<JobStatus>,
    cancel: &Arc<AtomicBool>,
) -> Result<serde_json::Value, Problem> {
    let c = req.check()?;
    let built = situate_engine::build_contextualizer(&c.method, &settings.llm, &c.run)?;
    let price = built.price;
    let started = std::time::Instant::now();
    let mut e = Engine::open(index, Access::Write)?;
    e.cancel_on(Arc::clone(cancel));
    let report = e.recontextualize(
        built.contextualizer.as_ref(),
        &c.statuses,
        c.batch,
        &mut |p, r| {
            status.send_modify(|s| {
                s.progress.insert(
                    "contexts",
                    Stage {
                        done: p.chunks_done,
                        total: Some(p.chunks_total),
                    },
                );
                s.tokens = r.usage;
                s.dollars = price.map(|pr| pr.dollars(&r.usage));
            })
        },
    )?;
    let cancelled = report.cancelled;
    let answer = situate_engine::api::ContextualizeAnswer::new(report, price, started);
    let v = serde_json::to_value(&answer).map_err(Problem::internal)?;
    if cancelled {
        status.send_modify(|s| s.result = Some(v));
        return Err(Problem::new(
            StatusCode::CONFLICT,
            "cancelled",
            "cancelled: the contexts written before the cancel are kept; run the job again to finish",
        ));
    }
    Ok(v)
}

fn ingest(
    index: &Path,
    settings: &Settings,
    req: IngestRequest,
    status: &watch::Sender<JobStatus>,
) -> Result<serde_json::Value, Problem> {
    let prepared = situate_engine::prepare_ingest(index, settings, req)?;
    let price = prepared.price;
    let outcome = prepared.run(&mut |ev| {
        status.send_modify(|s| match ev {
            IngestEvent::Document { chunks, .. } => {
                s.progress.entry("documents").or_default().done += 1;
                s.progress.entry("chunks").or_default().done += chunks as u64;
            }
            IngestEvent::Skipped(_) => s.skipped += 1,
            IngestEvent::Contextualized { chunks, usage, .. } => {
                s.progress.entry("contexts").or_default().done = chunks;
                s.tokens = usage;
                s.dollars = price.map(|p| p.dollars(&usage));
            }
            IngestEvent::Embedding { done, total } => {
                s.progress.insert(
                    "embedding",
                    Stage {
                        done: done as u64,
                        total: Some(total as u64),
                    },
                );
            }
            IngestEvent::Committed { .. } => s.commits += 1,
        })
    })?;
    let v = serde_json::to_value(&outcome).map_err(Problem::internal)?;
    if outcome.report.cancelled {
        status.send_modify(|s| s.result = Some(v));
        return Err(Problem::new(
            StatusCode::CONFLICT,
            "cancelled",
            "cancelled: the documents committed before the cancel are in the index; run the job again to finish",
        ));
    }
    Ok(v)
}

fn finish(status: &watch::Sender<JobStatus>, outcome: Result<serde_json::Value, Problem>) {
    status.send_modify(|s| {
        s.finished_at = Some(situate_core::now_rfc3339());
        match outcome {
            Ok(v) => {
                s.state = JobState::Succeeded;
                s.result = Some(v);
            }
            Err(p) if p.code == "cancelled" => s.state = JobState::Cancelled,
            Err(p) => {
                s.state = JobState::Failed;
                s.error = Some(JobError {
                    code: p.code,
                    detail: p.detail,
                    field: p.field,
                    install: p.install,
                });
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upload_paths_must_stay_inside() {
        for ok in ["a.md", "notes/a.md", "deep/er/x.txt"] {
            assert!(upload_path(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "../x.md",
            "a/../../x",
            "./a.md",
            "a\\b.md",
            "a\0b",
        ] {
            assert!(upload_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_job_spec_is_checked_before_it_is_queued() {
        let spec: JobSpec =
            serde_json::from_value(serde_json::json!({"kind": "ingest"})).expect("spec");
        assert!(spec.check().is_err());
        let spec: JobSpec = serde_json::from_value(serde_json::json!({"kind": "ingest",
            "files": [{"path": "a.md", "text": "x"}, {"path": "a.md", "text": "y"}]}))
        .expect("spec");
        assert!(spec.check().is_err());
        assert!(
            serde_json::from_value::<JobSpec>(serde_json::json!({"kind": "ingest", "pathz": []}))
                .is_err()
        );
        assert!(serde_json::from_value::<JobSpec>(serde_json::json!({"kind": "explode"})).is_err());
        let spec: JobSpec =
            serde_json::from_value(serde_json::json!({"kind": "rebuild"})).expect("spec");
        assert_eq!(spec.kind(), "rebuild");
    }
}
