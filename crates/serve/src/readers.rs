//! The readers: a few threads, each with its own read-only [`Engine`] on the index, that
//! answer the requests which only read (search, cards, documents).
//!
//! An engine holds a SQLite connection, so it is used by one thread at a time; several
//! engines let several searches run at once, and none takes the write lock, so searches
//! keep answering while another engine (a job, or a `situate ingest` beside the service)
//! writes. Before each request a reader asks its engine whether the store has moved on
//! ([`Engine::is_stale`], one small read) and reopens it if so: a search sees every batch
//! committed before it started.
//!
//! The embedding model is loaded once and shared by every reader's engine
//! ([`SharedModels`]), so it stays warm and in memory once; so are the answer models.

use crate::problem::Problem;
use axum::http::StatusCode;
use situate_engine::{Access, Engine, EngineError, SharedModels};
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Task = Box<dyn FnOnce(&mut Reader) + Send>;

/// What the readers share.
struct Shared {
    index: PathBuf,
    /// The embedder and answer models every reader's engine uses, loaded once.
    models: SharedModels,
    ready: AtomicBool,
}

/// The pool of reader threads.
pub struct Readers {
    tx: mpsc::Sender<Task>,
    shared: Arc<Shared>,
    timeout: Duration,
    threads: usize,
}

/// One reader thread's engine.
struct Reader {
    shared: Arc<Shared>,
    engine: Option<Engine>,
}

impl Reader {
    /// The engine, reopened when the index has changed since it was opened.
    fn engine(&mut self) -> Result<&Engine, EngineError> {
        let fresh = match &self.engine {
            Some(e) => !e.is_stale()?,
            None => false,
        };
        if !fresh {
            self.engine = None;
            let mut e = Engine::open(&self.shared.index, Access::Read)?;
            self.shared.models.share_with(&mut e);
            self.engine = Some(e);
        }
        match &self.engine {
            Some(e) => Ok(e),
            None => Err(EngineError::Unavailable(
                "the index could not be opened".into(),
            )),
        }
    }
}

impl Readers {
    /// Starts `threads` readers on the index at `index`; a request waits at most `timeout`
    /// for its answer.
    pub fn start(index: PathBuf, threads: usize, timeout: Duration) -> std::io::Result<Readers> {
        let (tx, rx) = mpsc::channel::<Task>();
        let rx = Arc::new(Mutex::new(rx));
        let shared = Arc::new(Shared {
            index,
            models: SharedModels::default(),
            ready: AtomicBool::new(false),
        });
        let threads = threads.max(1);
        for i in 0..threads {
            let rx = Arc::clone(&rx);
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("situate-reader-{i}"))
                .spawn(move || {
                    let mut reader = Reader {
                        shared,
                        engine: None,
                    };
                    loop {
                        let task = match rx.lock() {
                            Ok(rx) => rx.recv(),
                            Err(_) => return,
                        };
                        let Ok(task) = task else { return };
                        // A panic is a bug; it fails its request (the reply is dropped)
                        // and the reader starts over with a fresh engine.
                        if std::panic::catch_unwind(AssertUnwindSafe(|| task(&mut reader))).is_err()
                        {
                            reader.engine = None;
                        }
                    }
                })?;
        }
        Ok(Readers {
            tx,
            shared,
            timeout,
            threads,
        })
    }

    /// How many reader threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `f` on a reader's engine and returns its answer; a timeout or an engine error
    /// becomes a [`Problem`].
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Engine) -> Result<T, EngineError> + Send + 'static,
    ) -> Result<T, Problem> {
        self.run_for(self.timeout, f).await
    }

    /// [`Readers::run`] with its own timeout (answers take a model's time).
    pub async fn run_for<T: Send + 'static>(
        &self,
        timeout: Duration,
        f: impl FnOnce(&Engine) -> Result<T, EngineError> + Send + 'static,
    ) -> Result<T, Problem> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let task: Task = Box::new(move |r: &mut Reader| {
            let _ = reply.send(r.engine().and_then(f));
        });
        self.tx
            .send(task)
            .map_err(|_| Problem::internal("the readers have stopped"))?;
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(r)) => r.map_err(Problem::from),
            Ok(Err(_)) => Err(Problem::internal("a reader failed while answering")),
            Err(_) => Err(Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "timeout",
                format!(
                    "no answer within {} s (the readers are busy, or this request is slow: a reranker over a deep list)",
                    timeout.as_secs_f64()
                ),
            )),
        }
    }

    /// Opens the index and loads the embedder once, embedding a short query so the first
    /// search does not pay for it; marks the service ready. Errors are the index's (no
    /// index, a model that cannot be loaded).
    pub async fn warm_up(&self) -> Result<(), Problem> {
        self.run(|e| {
            if e.mode_for(None)? != situate_engine::Mode::Bm25 {
                let plan = situate_engine::SearchSettings::default().plan("none")?;
                e.query("warm-up", &plan, &Default::default())?;
            }
            Ok(())
        })
        .await?;
        self.shared.ready.store(true, Ordering::Release);
        Ok(())
    }

    /// Whether [`Readers::warm_up`] has finished.
    pub fn ready(&self) -> bool {
        self.shared.ready.load(Ordering::Acquire)
    }
}
