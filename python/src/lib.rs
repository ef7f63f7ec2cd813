//! `situate._situate`: the engine inside a Python process, as the `situate` package calls
//! it (`python/situate/`).
//!
//! This crate is a front end like the CLI and the service: each method takes the same
//! request the HTTP API takes (the engine's request types, as JSON), makes the same engine
//! call, and hands back the engine's answer type, which the package's `Client` reads from
//! the service's JSON into the same dataclasses. So an `Index` and a `Client` answer alike
//! by construction; the answer comes as Python objects made by
//! [`objects`] (the registered dataclasses, else dicts as JSON would give), with no JSON
//! text between. Every engine call runs with the GIL released
//! ([`Python::detach`]): other Python threads run meanwhile, and several searches run at
//! once on engines of their own ([`readers`]). An engine error becomes the package's
//! exception of its kind (`situate.errors`), built from the same problem fields the service
//! sends (code, detail, field, install).
#![warn(missing_docs)]

mod objects;
mod readers;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use readers::Readers;
use situate_engine::api::{CardRequest, ContextsRequest, DocumentsRequest};
use situate_engine::{
    Access, AskRequest, Decision, Engine, EngineError, ExportAnswer, IngestEvent, IngestRequest,
    LlmRun, SearchRequest, Settings, TextInput, error_chain,
};
use situate_eval::run::{EvalAnswer, EvalJob, run_eval};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// An index directory, opened in this process.
#[pyclass(frozen, module = "situate._situate", name = "NativeIndex")]
pub struct NativeIndex {
    path: PathBuf,
    settings: Settings,
    readers: Readers,
}

/// An ingest's options, by the names `situate ingest` and an `ingest` job use.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct IngestBody {
    #[serde(default)]
    paths: Vec<PathBuf>,
    #[serde(default)]
    texts: Vec<TextInput>,
    context: Option<String>,
    format: Option<String>,
    language: Option<String>,
    max_tokens: Option<usize>,
    overlap: Option<usize>,
    batch: Option<usize>,
    #[serde(default)]
    meta: Vec<String>,
    llm: Option<String>,
    budget: Option<f64>,
    #[serde(default)]
    dry_run: bool,
}

impl IngestBody {
    fn request(self, cancel: Arc<AtomicBool>) -> IngestRequest {
        IngestRequest {
            paths: self.paths,
            texts: self.texts,
            context: self.context,
            format: self.format,
            language: self.language,
            max_tokens: self.max_tokens,
            overlap: self.overlap,
            batch: self.batch,
            meta: self.meta,
            llm: LlmRun {
                llm: self.llm,
                budget: self.budget,
                dry_run: self.dry_run,
            },
            cancel: Some(cancel),
            ..IngestRequest::default()
        }
    }
}

#[pymethods]
impl NativeIndex {
    /// Opens the index at `path`; with `create`, creates it first when there is none
    /// (with `embedder` and `vector_index`, else `situate.toml`'s, else `auto`).
    /// `config` is a `situate.toml` to read settings from (none: the defaults).
    #[new]
    #[pyo3(signature = (path, create=false, embedder=None, vector_index=None, config=None))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        create: bool,
        embedder: Option<String>,
        vector_index: Option<String>,
        config: Option<PathBuf>,
    ) -> PyResult<NativeIndex> {
        let settings = match &config {
            Some(c) => py
                .detach(|| Settings::load(Some(c)))
                .map_err(|e| raise(py, &e))?,
            None => Settings::default(),
        };
        if !Engine::exists(&path) {
            if !create {
                let missing = EngineError::NotFound(format!(
                    "no situate index at {}: pass create=True to make one",
                    path.display()
                ));
                return Err(raise(py, &missing));
            }
            let made = py.detach(|| {
                let c =
                    settings.create_settings(None, embedder.as_deref(), vector_index.as_deref())?;
                Engine::create(&path, c).map(drop)
            });
            made.map_err(|e| raise(py, &e))?;
        }
        Ok(NativeIndex {
            readers: Readers::new(path.clone()),
            path,
            settings,
        })
    }

    /// The index directory.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// A search (`POST /v1/search`'s body) → its answer (`SearchResponse`).
    fn search(&self, py: Python<'_>, body: &str) -> PyResult<Py<PyAny>> {
        self.read(py, |e, s| {
            let req: SearchRequest = from_json(body)?;
            let q = req.check(s)?;
            e.query(&q.query, &q.plan, &q.filter)
        })
    }

    /// A question (`POST /v1/ask`'s body) → a grounded answer (`AnswerResponse`);
    /// `on_text(str)` is called with each piece as the model writes it.
    #[pyo3(signature = (body, on_text=None))]
    fn ask(&self, py: Python<'_>, body: &str, on_text: Option<Py<PyAny>>) -> PyResult<Py<PyAny>> {
        let failed: std::sync::Mutex<Option<PyErr>> = std::sync::Mutex::new(None);
        let stream = |piece: &str| {
            let Some(f) = &on_text else { return };
            Python::attach(|py| {
                if let Err(e) = f.call1(py, (piece,))
                    && let Ok(mut slot) = failed.lock()
                {
                    slot.get_or_insert(e);
                }
            });
        };
        let answer = self.read(py, |e, s| {
            let req: AskRequest = from_json(body)?;
            e.answer(&req.check(s)?, &stream)
        })?;
        match failed.into_inner().ok().flatten() {
            Some(e) => Err(e),
            None => Ok(answer),
        }
    }

    /// A card (`{"chunk_id", "neighbours"}`) → `CardAnswer`.
    fn card(&self, py: Python<'_>, body: &str) -> PyResult<Py<PyAny>> {
        self.read(py, |e, _| {
            let req: CardRequest = from_json(body)?;
            e.card(&req)
        })
    }

    /// A document and its chunk ids (`{"document_id"}`) → `DocumentDetail`.
    fn document(&self, py: Python<'_>, document_id: &str) -> PyResult<Py<PyAny>> {
        self.read(py, |e, _| e.document_detail(document_id))
    }

    /// A page of documents (`{"limit", "cursor"}`) → `DocumentPage`.
    fn documents(&self, py: Python<'_>, body: &str) -> PyResult<Py<PyAny>> {
        self.read(py, |e, _| {
            let req: DocumentsRequest = from_json(body)?;
            e.documents_page(&req, MAX_PAGE)
        })
    }

    /// A page of the review queue (`{"status", "limit", "cursor"}`) → `ContextPage`.
    fn contexts(&self, py: Python<'_>, body: &str) -> PyResult<Py<PyAny>> {
        self.read(py, |e, _| {
            let req: ContextsRequest = from_json(body)?;
            e.contexts_page(&req, MAX_PAGE)
        })
    }

    /// The index's state → `StatusAnswer`.
    fn status(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.read(py, |e, _| e.status())
    }

    /// The index's state with every card compared across the store and the indexes →
    /// `CheckAnswer` (`situate stats`).
    fn check(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.read(py, |e, _| e.status_checked())
    }

    /// Every file of the index checked (the store with SQLite's `integrity_check`, or its
    /// `quick_check` when not `full`; BM25's and the vector snapshot's checksums), then the
    /// cards compared with the indexes → `IntegrityAnswer` (`situate check`). A store too
    /// damaged to open is reported in the answer, not raised.
    #[pyo3(signature = (full=true))]
    fn verify(&self, py: Python<'_>, full: bool) -> PyResult<Py<PyAny>> {
        self.at(py, |path| Engine::check_at(path, full))
    }

    /// A copy of the index in `dir` (a new or empty directory), taken while it is searched
    /// and written → `BackupAnswer` (`situate backup`).
    fn backup(&self, py: Python<'_>, dir: PathBuf) -> PyResult<Py<PyAny>> {
        self.at(py, |path| Engine::backup_at(path, &dir))
    }

    /// A person's decision on a context (`accept`, `reject`, `edit` with `text`) →
    /// `DecisionAnswer`.
    #[pyo3(signature = (chunk_id, decision, text=None))]
    fn decide(
        &self,
        py: Python<'_>,
        chunk_id: &str,
        decision: &str,
        text: Option<&str>,
    ) -> PyResult<Py<PyAny>> {
        self.write(py, |e| {
            let d = Decision::parse(decision, text)?;
            e.decide(chunk_id, d)
        })
    }

    /// Writes every context to a JSONL file (`situate contexts export`) → `ExportAnswer`.
    fn export_contexts(&self, py: Python<'_>, file: PathBuf) -> PyResult<Py<PyAny>> {
        self.read(py, |e, _| {
            let exported = e.export_contexts(&file)?;
            Ok(ExportAnswer { exported, file })
        })
    }

    /// Sets contexts from such a file (`situate contexts import`) → `ImportReport`.
    fn import_contexts(&self, py: Python<'_>, file: PathBuf) -> PyResult<Py<PyAny>> {
        self.write(py, |e| e.import_contexts(&file))
    }

    /// Removes a document and its chunks → `RemoveAnswer`.
    fn remove(&self, py: Python<'_>, document_id: &str) -> PyResult<Py<PyAny>> {
        self.write(py, |e| e.remove_document(document_id))
    }

    /// Rebuilds every index from the cards (no LLM call) → `RebuildReport`.
    fn rebuild(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        // `rebuild_at` opens even a damaged BM25 index: a rebuild is what repairs it.
        self.write_at(py, |path| Engine::rebuild_at(path, &mut |_, _| {}))
    }

    /// An ingest (an `ingest` job's fields, with `texts` and `dry_run`) → `IngestOutcome`
    /// (a dry run: `DryRunAnswer`). `progress(dict)` is called with each event; an
    /// exception it raises, or Ctrl-C, stops the ingest after the documents in hand
    /// (what was committed stays; running it again finishes the work).
    #[pyo3(signature = (body, progress=None))]
    fn ingest(
        &self,
        py: Python<'_>,
        body: &str,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let cancel = Arc::new(AtomicBool::new(false));
        let mut failed: Option<PyErr> = None;
        let out = py.detach(|| {
            let body: IngestBody = from_json(body)?;
            let dry_run = body.dry_run;
            let prepared = situate_engine::prepare_ingest(
                &self.path,
                &self.settings,
                body.request(cancel.clone()),
            )?;
            let outcome = prepared.run(&mut |event| {
                Python::attach(|py| {
                    let sent = match &progress {
                        Some(f) => event_dict(py, &event).and_then(|d| f.call1(py, (d,)).map(drop)),
                        None => Ok(()),
                    };
                    if let Err(e) = sent.and_then(|()| py.check_signals()) {
                        failed.get_or_insert(e);
                        cancel.store(true, Ordering::Relaxed);
                    }
                })
            })?;
            if dry_run {
                to_value(&outcome.dry_run())
            } else {
                to_value(&outcome)
            }
        });
        self.readers.forget();
        match (failed, out) {
            (Some(e), _) => Err(e),
            (None, out) => {
                let answer = out.map_err(|e| raise(py, &e))?;
                Ok(objects::to_python(py, &answer)?.unbind())
            }
        }
    }

    /// The index moved to another embedder while it serves (a `ReembedRequest`'s fields,
    /// as `situate reembed`) → `ReembedAnswer`.
    fn reembed(&self, py: Python<'_>, body: &str) -> PyResult<Py<PyAny>> {
        self.write(py, |e| {
            let req: situate_engine::ReembedRequest = from_json(body)?;
            e.reembed(&req.check()?, &mut |_| {})
        })
    }

    /// Search settings chosen on questions by cross-validation (a `TuneRequest`'s fields,
    /// as `situate tune`) → `TuneAnswer`; with `write`, a choice to change is written into
    /// that settings file (`situate tune --write`).
    #[pyo3(signature = (body, write=None))]
    fn tune(&self, py: Python<'_>, body: &str, write: Option<PathBuf>) -> PyResult<Py<PyAny>> {
        self.read(py, |e, settings| {
            let req: situate_engine::TuneRequest = from_json(body)?;
            let checked = req.check(settings)?;
            let mut answer = situate_eval::tune::tune(e, &checked, &mut |_, _| {})?;
            if let Some(path) = write
                && answer.decision == "change"
            {
                situate_engine::write_tuned(&path, &answer)?;
                answer.written = Some(path);
            }
            Ok(answer)
        })
    }

    /// An evaluation (an `eval` job's fields) → `EvalAnswer`; its reports go to
    /// `reports/NAME`.
    fn eval(&self, py: Python<'_>, body: &str, reports: PathBuf) -> PyResult<Py<PyAny>> {
        let answer = py
            .detach(|| {
                let job: EvalJob = from_json(body)?;
                let name = job.name.clone();
                let req = job.request(&reports, &self.path, &self.settings)?;
                let o = run_eval(&req, &mut |_, _| {})?;
                to_value(&EvalAnswer {
                    id: name,
                    report: o.report,
                    notes: o.notes,
                })
            })
            .map_err(|e| raise(py, &e))?;
        Ok(objects::to_python(py, &answer)?.unbind())
    }
}

impl NativeIndex {
    /// `f` on a read-only engine, with the GIL released.
    fn read<T: serde::Serialize + Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Engine, &Settings) -> situate_engine::Result<T> + Send,
    ) -> PyResult<Py<PyAny>> {
        let answer = py
            .detach(|| self.readers.with(|e| f(e, &self.settings)))
            .map_err(|e| raise(py, &e))?;
        Ok(objects::to_python(py, &answer)?.unbind())
    }

    /// `f` on the writing engine (the index's write lock, held for the call), with the
    /// GIL released; the readers reopen afterwards.
    fn write<T: serde::Serialize + Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Engine) -> situate_engine::Result<T> + Send,
    ) -> PyResult<Py<PyAny>> {
        self.write_at(py, |path| {
            let mut e = Engine::open(path, Access::Write)?;
            f(&mut e)
        })
    }

    /// `f` on the index's path (a call that opens the index itself, to read), with the GIL
    /// released.
    fn at<T: serde::Serialize + Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Path) -> situate_engine::Result<T> + Send,
    ) -> PyResult<Py<PyAny>> {
        let answer = py.detach(|| f(&self.path)).map_err(|e| raise(py, &e))?;
        Ok(objects::to_python(py, &answer)?.unbind())
    }

    /// `f` on the index's path (a call that opens it to write itself), with the GIL
    /// released; the readers reopen afterwards.
    fn write_at<T: serde::Serialize + Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Path) -> situate_engine::Result<T> + Send,
    ) -> PyResult<Py<PyAny>> {
        let out = self.at(py, f);
        self.readers.forget();
        out
    }
}

/// The largest page of documents or contexts a call may ask for (the service's too).
const MAX_PAGE: usize = 500;

/// A request from its JSON; a field the type does not take is refused by name.
fn from_json<T: serde::de::DeserializeOwned>(body: &str) -> situate_engine::Result<T> {
    serde_json::from_str(body).map_err(|e| EngineError::Invalid(format!("the request: {e}")))
}

/// An answer as a JSON value (an answer of one of several types, made into Python objects
/// once the GIL is held again).
fn to_value<T: serde::Serialize>(answer: &T) -> situate_engine::Result<serde_json::Value> {
    serde_json::to_value(answer)
        .map_err(|e| EngineError::Internal(format!("an answer could not be written: {e}")))
}

/// An ingest event as the dict a progress callback gets: `{"event": NAME, ...}`.
fn event_dict<'py>(py: Python<'py>, event: &IngestEvent<'_>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    match event {
        IngestEvent::Document {
            id,
            outcome,
            chunks,
        } => {
            d.set_item("event", "document")?;
            d.set_item("id", *id)?;
            d.set_item("outcome", *outcome)?;
            d.set_item("chunks", *chunks)?;
        }
        IngestEvent::Skipped(s) => {
            d.set_item("event", "skipped")?;
            d.set_item("source", &s.source)?;
            d.set_item("reason", &s.reason)?;
        }
        IngestEvent::Embedding { done, total } => {
            d.set_item("event", "embedding")?;
            d.set_item("done", *done)?;
            d.set_item("total", *total)?;
        }
        IngestEvent::Contextualized {
            chunks,
            usage,
            cached,
        } => {
            d.set_item("event", "contextualized")?;
            d.set_item("chunks", *chunks)?;
            d.set_item("cached", *cached)?;
            d.set_item("input_tokens", usage.input_tokens)?;
            d.set_item("output_tokens", usage.output_tokens)?;
        }
        IngestEvent::Committed { generation } => {
            d.set_item("event", "committed")?;
            d.set_item("generation", *generation)?;
        }
    }
    Ok(d)
}

/// `e` as the package's exception of its kind (`situate.errors.from_problem`, which the
/// HTTP client calls with the service's problem bodies).
fn raise(py: Python<'_>, e: &EngineError) -> PyErr {
    let wire = e.kind().wire();
    let built = (|| -> PyResult<PyErr> {
        let problem = PyDict::new(py);
        problem.set_item("status", wire.http)?;
        problem.set_item("code", wire.code)?;
        problem.set_item("title", wire.title)?;
        let detail = match e.advice() {
            Some(advice) => format!("{}. {advice}", error_chain(e)),
            None => error_chain(e),
        };
        problem.set_item("detail", detail)?;
        problem.set_item("field", e.field())?;
        problem.set_item("install", e.install())?;
        let exc = py
            .import("situate.errors")?
            .getattr("from_problem")?
            .call1((problem,))?;
        Ok(PyErr::from_value(exc))
    })();
    built.unwrap_or_else(|failed| PyRuntimeError::new_err(format!("{} ({failed})", error_chain(e))))
}

/// The JSON Schema of a wire type by its name, for the package's test that its
/// dataclasses have the engine's fields.
#[pyfunction]
fn schema(name: &str) -> PyResult<String> {
    use schemars::schema_for;
    let s = match name {
        "SearchResponse" => schema_for!(situate_engine::SearchResponse),
        "Hit" => schema_for!(situate_core::Hit),
        "LegScore" => schema_for!(situate_core::LegScore),
        "CardAnswer" => schema_for!(situate_engine::api::CardAnswer),
        "StoredDocument" => schema_for!(situate_engine::StoredDocument),
        "ContextPage" => schema_for!(situate_engine::api::ContextPage),
        "ContextItem" => schema_for!(situate_engine::ContextItem),
        "DocumentPage" => schema_for!(situate_engine::api::DocumentPage),
        "DocumentDetail" => schema_for!(situate_engine::api::DocumentDetail),
        "StatusAnswer" => schema_for!(situate_engine::api::StatusAnswer),
        "AnswerResponse" => schema_for!(situate_engine::AnswerResponse),
        "Citation" => schema_for!(situate_engine::Citation),
        "IngestOutcome" => schema_for!(situate_engine::IngestOutcome),
        "IngestReport" => schema_for!(situate_engine::IngestReport),
        "DecisionAnswer" => schema_for!(situate_engine::api::DecisionAnswer),
        "ExportAnswer" => schema_for!(situate_engine::ExportAnswer),
        "TextInput" => schema_for!(TextInput),
        other => {
            return Err(pyo3::exceptions::PyKeyError::new_err(other.to_string()));
        }
    };
    serde_json::to_string(&s).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// Restores the backup in `backup` as the index `index` (`situate restore`): every file is
/// checked against the backup's manifest first, and the restored index is checked after →
/// `RestoreAnswer`. An index already at `index` is refused unless `replace`, which moves
/// it aside (kept; the answer says where).
#[pyfunction]
#[pyo3(signature = (backup, index, replace=false))]
fn restore(py: Python<'_>, backup: PathBuf, index: PathBuf, replace: bool) -> PyResult<Py<PyAny>> {
    let answer = py
        .detach(|| Engine::restore_at(&backup, &index, replace))
        .map_err(|e| raise(py, &e))?;
    Ok(objects::to_python(py, &answer)?.unbind())
}

/// The CPU features the build assumed (`-C target-cpu`), for the package's check on
/// import.
#[pyfunction]
fn build_features() -> Vec<&'static str> {
    let mut f = Vec::new();
    if cfg!(target_feature = "avx2") {
        f.push("avx2");
    }
    if cfg!(target_feature = "fma") {
        f.push("fma");
    }
    if cfg!(target_feature = "f16c") {
        f.push("f16c");
    }
    if cfg!(target_feature = "avx512f") {
        f.push("avx512f");
    }
    f
}

/// The module.
#[pymodule]
fn _situate(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeIndex>()?;
    m.add_function(wrap_pyfunction!(schema, m)?)?;
    m.add_function(wrap_pyfunction!(build_features, m)?)?;
    m.add_function(wrap_pyfunction!(restore, m)?)?;
    m.add_function(wrap_pyfunction!(objects::register_types, m)?)?;
    m.add(
        "__version__",
        PyString::new(m.py(), env!("CARGO_PKG_VERSION")),
    )?;
    Ok(())
}
