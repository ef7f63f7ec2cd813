//! A query node's follower: with `--store`, the service's index is a copy of the shared
//! store kept current from its change feed ([`situate_scale::follow`]). One thread holds
//! the index's writer and catches up every [`INTERVAL`]; the readers see each batch it
//! commits as they see an ingest's. The position it has applied is what `after` in a
//! search waits for (read your writes) and what `/v1/info` reports. A switch of embedder
//! (the `reembed` job) runs on the same thread, between two catch-ups, since it moves the
//! index the thread writes ([`FollowState::reembed`]).

use crate::ServeError;
use situate_engine::{CheckedReembed, CreateSettings, Engine, EngineError, ReembedProgress};
use situate_scale::follow::{Follower, NodeReembedAnswer};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

/// How often the follower reads the feed.
pub const INTERVAL: Duration = Duration::from_millis(100);

/// What the follower shares with the requests.
pub struct FollowState {
    /// The store followed (`user@host:port/database`).
    pub store: String,
    position: AtomicU64,
    error: Mutex<Option<String>>,
    /// Switches of embedder for the follower thread to run.
    switches: Mutex<mpsc::Sender<Switch>>,
}

/// A switch of embedder handed to the follower thread.
struct Switch {
    req: CheckedReembed,
    progress: Box<dyn FnMut(ReembedProgress) + Send>,
    cancel: Arc<AtomicBool>,
    reply: mpsc::Sender<Result<NodeReembedAnswer, EngineError>>,
}

impl FollowState {
    /// The feed position the node has applied.
    pub fn position(&self) -> u64 {
        self.position.load(Ordering::Acquire)
    }

    /// The last catch-up's error, while the store cannot be read.
    pub fn error(&self) -> Option<String> {
        self.error.lock().ok().and_then(|e| e.clone())
    }

    /// Moves the node to another embedder ([`Follower::reembed`]) on the follower thread,
    /// and waits for it: the node serves its old vectors meanwhile, and follows the store
    /// again after the switch. `cancel` stops it between batches.
    pub fn reembed(
        &self,
        req: CheckedReembed,
        progress: Box<dyn FnMut(ReembedProgress) + Send>,
        cancel: Arc<AtomicBool>,
    ) -> Result<NodeReembedAnswer, EngineError> {
        let stopped = || EngineError::Unavailable("the node's follower thread has stopped".into());
        let (reply, answer) = mpsc::channel();
        self.switches
            .lock()
            .map_err(|_| stopped())?
            .send(Switch {
                req,
                progress,
                cancel,
                reply,
            })
            .map_err(|_| stopped())?;
        answer.recv().map_err(|_| stopped())?
    }
}

/// Builds the node's index from the store at `url` (the service starts consistent, or
/// not at all), then follows the store from a thread of its own. While the store cannot be
/// read (a restart, a failover), the node keeps serving what it has, reports the error,
/// and reconnects.
pub fn start(
    index: &Path,
    url: &str,
    create: CreateSettings,
) -> Result<Arc<FollowState>, ServeError> {
    let fail = |e: situate_engine::EngineError| ServeError::Index(e.to_string());
    let mut follower = Follower::connect(url).map_err(fail)?;
    let mut engine = Engine::open_or_create(index, create).map_err(fail)?;
    let first = follower.catch_up(&mut engine).map_err(fail)?;
    let (switches, queued) = mpsc::channel::<Switch>();
    let state = Arc::new(FollowState {
        store: follower.target(),
        position: AtomicU64::new(first.position),
        error: Mutex::new(None),
        switches: Mutex::new(switches),
    });
    let shared = Arc::clone(&state);
    let url = url.to_string();
    std::thread::Builder::new()
        .name("situate-follow".into())
        .spawn(move || {
            let mut follower = Some(follower);
            loop {
                std::thread::sleep(INTERVAL);
                let f = match follower.as_mut() {
                    Some(f) => f,
                    None => match Follower::connect(&url) {
                        Ok(f) => follower.insert(f),
                        Err(e) => {
                            shared.fail(e.to_string());
                            std::thread::sleep(Duration::from_secs(1));
                            continue;
                        }
                    },
                };
                if let Ok(mut switch) = queued.try_recv() {
                    engine.cancel_on(switch.cancel);
                    let r = f.reembed(&mut engine, &switch.req, &mut *switch.progress);
                    engine.cancel_on(Arc::new(AtomicBool::new(false)));
                    let _ = switch.reply.send(r);
                    continue;
                }
                match f.catch_up(&mut engine) {
                    Ok(r) => {
                        shared.position.store(r.position, Ordering::Release);
                        if let Ok(mut e) = shared.error.lock() {
                            *e = None;
                        }
                    }
                    Err(e) => {
                        shared.fail(e.to_string());
                        // A new connection next time (the server may have restarted or
                        // been promoted).
                        follower = None;
                        std::thread::sleep(Duration::from_secs(1));
                    }
                }
            }
        })?;
    Ok(state)
}

impl FollowState {
    fn fail(&self, error: String) {
        tracing::warn!("query node: cannot catch up with the store: {error}");
        if let Ok(mut e) = self.error.lock() {
            *e = Some(error);
        }
    }
}
