//! Read-only engines for the package's reads: one per thread that is searching at the
//! moment, kept for the next call.
//!
//! An engine holds a SQLite connection and is used by one thread at a time, so each
//! concurrent search takes an idle engine (or opens one) and puts it back; with the GIL
//! released, four Python threads search on up to four engines at once. Before each call an
//! engine is asked whether the store has moved on ([`Engine::is_stale`], one small read)
//! and is reopened if so: a search sees every batch committed before it started, by this
//! process or another. The embedding model and the answer models are loaded once and
//! shared by every engine ([`SharedModels`], as the service's readers share them).

use situate_engine::{Access, Engine, Result, SharedModels};
use std::path::PathBuf;
use std::sync::Mutex;

/// The idle engines of one index, and the models they share.
pub(crate) struct Readers {
    index: PathBuf,
    idle: Mutex<Vec<Engine>>,
    models: SharedModels,
}

impl Readers {
    /// No engine is opened until the first read.
    pub(crate) fn new(index: PathBuf) -> Readers {
        Readers {
            index,
            idle: Mutex::new(Vec::new()),
            models: SharedModels::default(),
        }
    }

    /// Runs `f` on an engine that reflects the index as it is now.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&Engine) -> Result<R>) -> Result<R> {
        let taken = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let engine = match taken {
            Some(e) if !e.is_stale()? => e,
            _ => self.open()?,
        };
        let out = f(&engine);
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(engine);
        }
        out
    }

    /// Drops every idle engine (after this process wrote: the next read reopens).
    pub(crate) fn forget(&self) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.clear();
        }
    }

    fn open(&self) -> Result<Engine> {
        let mut e = Engine::open(&self.index, Access::Read)?;
        self.models.share_with(&mut e);
        Ok(e)
    }
}
