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

mod run;
mod spec;

use run::*;
pub use spec::*;

use crate::problem::Problem;
use axum::http::StatusCode;
use serde::Serialize;
use situate_core::TokenUsage;
use situate_engine::Settings;
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;
use tokio::sync::watch;

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
    /// The writer's queue.
    tx: mpsc::Sender<Queued>,
    /// The backup thread's queue.
    backup_tx: mpsc::Sender<Queued>,
    /// The folders the jobs work in (the threads share them).
    dirs: Arc<Dirs>,
    prefix: String,
    /// The shared store, when the index is a query node: its cards are a copy, written by
    /// the follower alone, so the jobs that write are refused (evaluations still run).
    node_of: Option<String>,
}

/// Refuses server-side paths (an ingest's `paths`, an evaluation's `dataset`) outside
/// `roots` (or any, when there are none): the service's files are not the caller's to read.
fn confined(field: &str, paths: &[PathBuf], roots: &[PathBuf]) -> Result<(), Problem> {
    let refuse = |reason: String| {
        Problem::from(situate_engine::EngineError::InvalidField {
            field: field.into(),
            reason,
        })
    };
    if !paths.is_empty() && roots.is_empty() {
        return Err(refuse(
            "server-side paths are off on a service reachable over the network: start it with --ingest-root DIR to allow a directory, or send the documents as `files` or `texts`".into(),
        ));
    }
    let opts = situate_engine::SourceOptions {
        roots: Some(roots.to_vec()),
        ..Default::default()
    };
    for p in paths {
        if let Some(why) = opts.outside_roots(p) {
            return Err(refuse(format!("{}: {why}", p.display())));
        }
    }
    Ok(())
}

/// The folders the jobs work in.
pub struct Dirs {
    /// The index.
    pub index: PathBuf,
    /// Where eval jobs write their reports.
    pub evals: PathBuf,
    /// Where backup jobs write.
    pub backups: PathBuf,
    /// The directories an ingest job may read server-side paths under (canonical);
    /// `None`: any path (a service on loopback with no `--ingest-root`).
    pub roots: Option<Vec<PathBuf>>,
    /// The follower, when the index is a query node of a shared store.
    pub node: std::sync::OnceLock<Arc<crate::follow::FollowState>>,
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
    /// Marks the index as a query node followed by `node` (write jobs are refused; a
    /// switch of embedder runs on the follower's thread).
    pub fn on_node(mut self, node: Arc<crate::follow::FollowState>) -> Jobs {
        self.node_of = Some(node.store.clone());
        let _ = self.dirs.node.set(node);
        self
    }

    /// Starts the writer thread for the index at `index`, and the thread that takes
    /// backups (into `backups`) beside it.
    pub fn start(dirs: Dirs, settings: Settings) -> std::io::Result<Jobs> {
        let table = Arc::new(Mutex::new(Table::default()));
        let dirs = Arc::new(dirs);
        let spawn = |name: &str| -> std::io::Result<mpsc::Sender<Queued>> {
            let (tx, rx) = mpsc::channel::<Queued>();
            let (t, dirs, settings) = (Arc::clone(&table), Arc::clone(&dirs), settings.clone());
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    while let Ok(q) = rx.recv() {
                        let Some((status, cancel)) = lookup(&t, &q.id) else {
                            continue;
                        };
                        run_job(&dirs, &settings, q, &status, &cancel);
                    }
                })?;
            Ok(tx)
        };
        let tx = spawn("situate-writer")?;
        let backup_tx = spawn("situate-backup")?;
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
            backup_tx,
            dirs,
            prefix,
            node_of: None,
        })
    }

    /// Queues a job; returns its status.
    pub fn submit(&self, spec: JobSpec) -> Result<JobStatus, Problem> {
        if let Some(store) = &self.node_of
            && !matches!(
                spec,
                JobSpec::Eval(_) | JobSpec::Backup { .. } | JobSpec::Tune(_) | JobSpec::Reembed(_)
            )
        {
            return Err(Problem::new(
                axum::http::StatusCode::CONFLICT,
                "query-node",
                format!(
                    "this service is a query node of the shared store {store}: its index is a copy the store's change feed writes; ingest, contextualize, review, delete and rebuild through the store (`situate ingest --store`, `situate worker --store`); eval, backup, tune and reembed run here"
                ),
            ));
        }
        spec.check()?;
        match (&spec, &self.dirs.roots) {
            (JobSpec::Ingest(IngestJob { paths, .. }), Some(roots)) => {
                confined("paths", paths, roots)?;
            }
            (JobSpec::Eval(job), Some(roots)) => {
                confined("dataset", std::slice::from_ref(&job.dataset), roots)?;
            }
            (JobSpec::Tune(t), Some(roots)) => {
                confined("questions", std::slice::from_ref(&t.questions), roots)?;
                if let Some(c) = &t.controls {
                    confined("controls", std::slice::from_ref(c), roots)?;
                }
            }
            _ => {}
        }
        let uploads = match &spec {
            JobSpec::Ingest(IngestJob { files, .. }) if !files.is_empty() => {
                Some(write_uploads(files)?)
            }
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
        let queue = match spec {
            JobSpec::Backup { .. } | JobSpec::Tune(_) => &self.backup_tx,
            _ => &self.tx,
        };
        queue
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
