//! The error of reading an evaluation set's files (BEIR, Anthropic's, situate's own):
//! here so that the engine's one error can hold it without depending on the harness.

/// Errors reading evaluation files.
#[derive(Debug, thiserror::Error)]
pub enum EvalDataError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A line is malformed.
    #[error("{path}:{line}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
}
