//! Running one job on the writer thread: the engine call of each kind, its progress into
//! the job's status, and the status it ends in.

use super::*;
use crate::problem::Problem;
use axum::http::StatusCode;
use situate_engine::{Access, Engine, IngestEvent, IngestRequest, LlmRun, Settings};
use situate_eval::run::{EvalAnswer, run_eval};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use tokio::sync::watch;

pub(super) fn run_job(
    dirs: &Dirs,
    settings: &Settings,
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
    let (index, evals) = (dirs.index.as_path(), dirs.evals.as_path());
    let outcome = match q.spec {
        JobSpec::Ingest(job) => {
            ingest_request(job, q.uploads.as_ref(), cancel, dirs.roots.as_ref())
                .and_then(|req| ingest(index, settings, req, status))
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
        JobSpec::Eval(job) => eval(index, settings, evals, job, status),
        JobSpec::Tune(req) => tune(index, settings, &req, status),
        JobSpec::Reembed(req) => match dirs.node.get() {
            Some(node) => node_reembed(node, &req, status, cancel),
            None => reembed(index, &req, status, cancel),
        },
        JobSpec::Backup { name } => {
            let name = name.unwrap_or_else(|| situate_core::now_rfc3339().replace([':', '-'], ""));
            Engine::backup_at(index, &dirs.backups.join(name))
                .map_err(Problem::from)
                .and_then(|a| serde_json::to_value(a).map_err(Problem::internal))
        }
        JobSpec::Rebuild {} => Engine::rebuild_at(index, &mut |done, total| {
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
        .map_err(Problem::from)
        .and_then(|r| serde_json::to_value(r).map_err(Problem::internal)),
    };
    finish(status, outcome);
    drop(q.uploads);
}

/// An ingest job's request: its paths and the uploaded files' top-level entries (so that a
/// document's id is its upload path).
fn ingest_request(
    job: IngestJob,
    uploads: Option<&tempfile::TempDir>,
    cancel: &Arc<AtomicBool>,
    roots: Option<&Vec<PathBuf>>,
) -> Result<IngestRequest, Problem> {
    let IngestJob {
        paths,
        files: _,
        texts,
        context,
        format,
        language,
        max_tokens,
        overlap,
        batch,
        meta,
        llm,
        budget,
    } = job;
    let mut all = paths;
    if let Some(dir) = uploads {
        // Each top-level entry, so that a document's id is its upload path.
        match std::fs::read_dir(dir.path()) {
            Ok(entries) => {
                let mut tops: Vec<PathBuf> =
                    entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
                tops.sort();
                all.extend(tops);
            }
            Err(e) => return Err(Problem::internal(format!("uploads: {e}"))),
        }
    }
    let req = IngestRequest {
        paths: all,
        texts,
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
        // The upload folder is read too, wherever the roots are.
        roots: roots.map(|r| {
            let mut r = r.clone();
            if let Some(dir) = uploads.and_then(|u| u.path().canonicalize().ok()) {
                r.push(dir);
            }
            r
        }),
    };
    Ok(req)
}

/// An evaluation job: its report under the service's evaluations folder.
fn eval(
    index: &Path,
    settings: &Settings,
    evals: &Path,
    job: EvalJob,
    status: &watch::Sender<JobStatus>,
) -> Result<serde_json::Value, Problem> {
    let name = job.name.clone();
    let req = job.request(evals, index, settings)?;
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
        serde_json::to_value(EvalAnswer {
            id: name.clone(),
            report: o.report,
            notes: o.notes,
        })
        .map_err(Problem::internal)
    })
}

/// A `reembed` job: the switch of embedder, its progress as `embedding` (done, total),
/// cancellable between batches (what was embedded is kept for the next run).
fn reembed(
    index: &Path,
    req: &situate_engine::ReembedRequest,
    status: &watch::Sender<JobStatus>,
    cancel: &Arc<AtomicBool>,
) -> Result<serde_json::Value, Problem> {
    let checked = req.check()?;
    let mut e = Engine::open(index, Access::Write)?;
    e.cancel_on(Arc::clone(cancel));
    let answer = e.reembed(&checked, &mut |p| embedding_progress(status, p))?;
    serde_json::to_value(answer).map_err(Problem::internal)
}

/// A `reembed` job on a query node: the switch runs on the follower's thread, reading the
/// new vectors from the shared store (`situate store reembed` filled it).
fn node_reembed(
    node: &crate::follow::FollowState,
    req: &situate_engine::ReembedRequest,
    status: &watch::Sender<JobStatus>,
    cancel: &Arc<AtomicBool>,
) -> Result<serde_json::Value, Problem> {
    let checked = req.check()?;
    let status = status.clone();
    let answer = node.reembed(
        checked,
        Box::new(move |p| embedding_progress(&status, p)),
        Arc::clone(cancel),
    )?;
    serde_json::to_value(answer).map_err(Problem::internal)
}

/// A switch's progress into its job's status, as `embedding` (done, total).
fn embedding_progress(status: &watch::Sender<JobStatus>, p: situate_engine::ReembedProgress) {
    status.send_modify(|s| {
        s.progress.insert(
            "embedding",
            Stage {
                done: p.done,
                total: Some(p.total),
            },
        );
    })
}

/// A `tune` job: the index read as it is, the questions' legs read once, the grid scored.
fn tune(
    index: &Path,
    settings: &Settings,
    req: &situate_engine::TuneRequest,
    status: &watch::Sender<JobStatus>,
) -> Result<serde_json::Value, Problem> {
    let checked = req.check(settings)?;
    let engine = Engine::open(index, Access::Read)?;
    let answer = situate_eval::tune::tune(&engine, &checked, &mut |done, total| {
        status.send_modify(|s| {
            s.progress.insert(
                "questions",
                Stage {
                    done,
                    total: Some(total),
                },
            );
        })
    })?;
    serde_json::to_value(answer).map_err(Problem::internal)
}

pub(super) fn contextualize(
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

pub(super) fn ingest(
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

pub(super) fn finish(
    status: &watch::Sender<JobStatus>,
    outcome: Result<serde_json::Value, Problem>,
) {
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
