//! The HTTP routes, a file per area; each checks its input, makes one engine call on a
//! reader and answers the engine's type.

pub(crate) mod documents;
pub(crate) mod evals;
pub(crate) mod health;
pub(crate) mod jobs;
pub(crate) mod review;
pub(crate) mod search;
