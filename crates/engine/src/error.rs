//! The engine's one error type, the kinds a caller acts on, and the one table that maps a
//! kind to every front end's answer: the CLI's exit status, the HTTP status and problem
//! code, and MCP's.

use situate_core::IndexError;
use std::path::PathBuf;

/// Engine errors, with what failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// No index at the path.
    #[error("no situate index at {0} (create one with `situate init` or `situate ingest`)")]
    NoIndex(PathBuf),
    /// Another process is writing.
    #[error(
        "the index at {0} is being written by another situate process; try again when it has finished"
    )]
    Locked(PathBuf),
    /// A document or chunk does not exist.
    #[error("{0}")]
    NotFound(String),
    /// Bad settings or input (prefer [`EngineError::InvalidField`] where one field is at
    /// fault).
    #[error("{0}")]
    Invalid(String),
    /// The request conflicts with what exists (an index already at the path); nothing was
    /// changed.
    #[error("{0}")]
    Conflict(String),
    /// What the request needs cannot be reached now (an index that could not be opened).
    #[error("{0}")]
    Unavailable(String),
    /// The engine failed in a way no input explains (a lock poisoned by an earlier panic, a
    /// card that does not fit its document).
    #[error("{0}")]
    Internal(String),
    /// One field of a request or of the settings is wrong: its wire name (the JSON and
    /// `situate.toml` name, `context_weight`) and why.
    #[error("{field}: {reason}")]
    InvalidField {
        /// The field's wire name (`filter.languages` inside an object).
        field: String,
        /// What is wrong with its value, and what is accepted.
        reason: String,
    },
    /// The card store failed (a damaged store is [`EngineError::Damaged`]).
    #[error(transparent)]
    Store(situate_store::StoreError),
    /// A file of the index is damaged: which part, what was found, and what to do
    /// (`situate rebuild` for a derived index; a restore for the store, which is never
    /// rebuilt from itself).
    #[error("{what} is damaged: {found}. {fix}")]
    Damaged {
        /// The part (`the card store (cards.db)`, `the BM25 index (bm25-2)`).
        what: String,
        /// What was found.
        found: String,
        /// What to do.
        fix: String,
    },
    /// The shared store on PostgreSQL failed.
    #[error(transparent)]
    SharedStore(#[from] situate_pg::PgError),
    /// The BM25 index failed.
    #[error(transparent)]
    Bm25(#[from] situate_index::Bm25Error),
    /// Ingest settings are wrong.
    #[error(transparent)]
    Ingest(#[from] situate_ingest::IngestError),
    /// A search failed.
    #[error("search failed: {0}")]
    Search(IndexError),
    /// The reranker failed (the search is not answered from the unreranked order).
    #[error("reranking failed: {0}")]
    Rerank(#[from] situate_core::RerankError),
    /// The vector index failed.
    #[error(transparent)]
    Vector(#[from] situate_vector::VectorError),
    /// A reranker could not be loaded.
    #[error("cannot load the reranker: {0}")]
    RerankerLoad(#[source] situate_core::RerankError),
    /// An LLM could not be loaded or set up.
    #[error(transparent)]
    Llm(#[from] situate_llm::LlmError),
    /// A prompt template is not valid.
    #[error(transparent)]
    Template(#[from] situate_llm::prompt::TemplateError),
    /// An evaluation file could not be read.
    #[error(transparent)]
    EvalData(#[from] situate_core::EvalDataError),
    /// A settings file is not valid.
    #[error("in {path}")]
    Settings {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A model the operation needs is not installed and could not be installed now
    /// (offline, or the install failed).
    #[error("{model}: {message}")]
    ModelMissing {
        /// The model (its spec).
        model: String,
        /// The command that installs it (`situate models install NAME`).
        install: String,
        /// Why it could not be installed now, and what to do.
        message: String,
    },
    /// An error with what was being done when it happened (`configuration bm25+none`): its
    /// kind and field are its source's.
    #[error("{what}: {source}")]
    In {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: Box<EngineError>,
    },
    /// A file-system operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// On which path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

impl From<situate_store::StoreError> for EngineError {
    fn from(e: situate_store::StoreError) -> Self {
        if e.is_damaged() {
            EngineError::Damaged {
                what: "the card store (cards.db)".into(),
                found: e.to_string(),
                fix: STORE_FIX.into(),
            }
        } else {
            EngineError::Store(e)
        }
    }
}

/// What to do about a damaged card store.
pub const STORE_FIX: &str = "The card store is the source of truth and is never rebuilt from itself (`situate rebuild` would make every index from the damaged cards): restore the index from a backup (`situate restore BACKUP --replace`); without one, `situate salvage NEW_DIR` copies the contexts and vectors still readable into a new index, where ingesting the same documents again (or importing an export, `situate contexts import FILE`) pays for no context twice.";

/// What to do when a write found the disk full.
pub const DISK_FULL_FIX: &str = "The disk is full. Nothing committed was lost: free some space and run the same command again; it goes on from the last committed batch and brings every index up to the store";

/// What to do when BM25's writer stopped on an I/O error it did not name.
pub const WRITER_STOPPED_FIX: &str = "BM25's writer stopped on an I/O error, most likely a full disk (the log names it). Nothing committed was lost: check the disk, free some space and run the same command again; it goes on from the last committed batch and brings every index up to the store";

/// What to do about a damaged derived index (BM25, the vector snapshot).
pub const REBUILD_FIX: &str = "It is derived from the cards: `situate rebuild` makes it again from the store, with no LLM call (vectors come from the embedding cache).";

/// `Result` with [`EngineError`].
pub type Result<T> = std::result::Result<T, EngineError>;

pub(crate) fn io<'a>(
    op: &'static str,
    path: &'a std::path::Path,
) -> impl FnOnce(std::io::Error) -> EngineError + 'a {
    move |source| EngineError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// What a caller can do about an error: the one classification every front end answers
/// from ([`ErrorKind::wire`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// The request or the settings are wrong (fix the named field).
    Invalid,
    /// A document, chunk, job or report does not exist.
    NotFound,
    /// The write conflicts with what is stored (nothing was written).
    Conflict,
    /// Another writer holds the index: try again when it has finished.
    Busy,
    /// What the request needs is not there or not reachable (no index, a store down).
    Unavailable,
    /// A model or service the engine called failed (a hosted API down, a reranker or LLM
    /// that failed while working).
    Upstream,
    /// A model the operation needs is not installed, and could not be installed now: the
    /// error names the command that installs it.
    ModelMissing,
    /// The engine itself failed (the log says why).
    Internal,
    /// A file of the index is damaged: the error says which and what to run.
    Damaged,
}

/// How one error kind is answered by each front end: a row of [`ErrorKind::TABLE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wire {
    /// The kind.
    pub kind: ErrorKind,
    /// The `situate` command's exit status. Every engine error exits 1 for now: `Invalid`
    /// still covers failures that are not the caller's (an embedder that cannot load),
    /// so it cannot take clap's 2 for a usage error until those have kinds of their own.
    pub exit: u8,
    /// The HTTP status.
    pub http: u16,
    /// The stable problem code (`type` is `urn:situate:problem:CODE`), also the prefix of
    /// an MCP tool error's text and its `code`.
    pub code: &'static str,
    /// The problem's fixed title.
    pub title: &'static str,
}

impl ErrorKind {
    /// Every kind's answer, in one place.
    #[rustfmt::skip]
    pub const TABLE: [Wire; 9] = [
        Wire { kind: ErrorKind::Invalid, exit: 1, http: 400, code: "invalid-request", title: "Invalid request" },
        Wire { kind: ErrorKind::NotFound, exit: 1, http: 404, code: "not-found", title: "Not found" },
        Wire { kind: ErrorKind::Conflict, exit: 1, http: 409, code: "conflict", title: "Conflict" },
        Wire { kind: ErrorKind::Busy, exit: 1, http: 409, code: "locked", title: "The index is being written" },
        Wire { kind: ErrorKind::Unavailable, exit: 1, http: 503, code: "unavailable", title: "Unavailable" },
        Wire { kind: ErrorKind::Upstream, exit: 1, http: 502, code: "upstream-failed", title: "A model or service failed" },
        Wire { kind: ErrorKind::ModelMissing, exit: 1, http: 503, code: "model-missing", title: "A model is not installed" },
        Wire { kind: ErrorKind::Internal, exit: 1, http: 500, code: "internal", title: "Internal error" },
        Wire { kind: ErrorKind::Damaged, exit: 1, http: 503, code: "damaged", title: "The index is damaged" },
    ];

    /// This kind's row of [`ErrorKind::TABLE`].
    pub fn wire(self) -> Wire {
        // The table has a row per kind (a test checks): the fallback is never taken.
        ErrorKind::TABLE
            .into_iter()
            .find(|w| w.kind == self)
            .unwrap_or(ErrorKind::TABLE[ErrorKind::TABLE.len() - 1])
    }
}

/// An error and its sources as one message (`a: b: c`), as a front end shows an error
/// that has no place for its chain.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(c) = source {
        s.push_str(": ");
        s.push_str(&c.to_string());
        source = c.source();
    }
    s
}

impl EngineError {
    /// What a caller can do about this error.
    pub fn kind(&self) -> ErrorKind {
        if self.is_disk_full() || self.is_writer_stopped() {
            return ErrorKind::Unavailable;
        }
        match self {
            EngineError::In { source, .. } => source.kind(),
            EngineError::Invalid(_)
            | EngineError::InvalidField { .. }
            | EngineError::Template(_)
            | EngineError::Settings { .. }
            | EngineError::Ingest(_)
            | EngineError::EvalData(_)
            | EngineError::RerankerLoad(_)
            // An LLM that cannot be set up (a bad `--llm` spec, a file that is no model) is
            // the settings' fault, not the model's answer.
            | EngineError::Llm(situate_llm::LlmError::Load { .. }) => ErrorKind::Invalid,
            EngineError::NotFound(_) => ErrorKind::NotFound,
            EngineError::Damaged { .. } => ErrorKind::Damaged,
            EngineError::Conflict(_) => ErrorKind::Conflict,
            EngineError::Unavailable(_) => ErrorKind::Unavailable,
            EngineError::Internal(_) => ErrorKind::Internal,
            EngineError::ModelMissing { .. }
            | EngineError::Llm(situate_llm::LlmError::Missing { .. }) => ErrorKind::ModelMissing,
            EngineError::Locked(_) => ErrorKind::Busy,
            EngineError::NoIndex(_) => ErrorKind::Unavailable,
            EngineError::Store(situate_store::StoreError::Conflict(_))
            | EngineError::SharedStore(situate_pg::PgError::Conflict(_)) => ErrorKind::Conflict,
            EngineError::SharedStore(
                situate_pg::PgError::Connect { .. }
                | situate_pg::PgError::NoStore { .. }
                | situate_pg::PgError::NoPgvector { .. },
            ) => ErrorKind::Unavailable,
            EngineError::SharedStore(situate_pg::PgError::Url { .. }) => ErrorKind::Invalid,
            EngineError::Rerank(_) | EngineError::Llm(_) => ErrorKind::Upstream,
            EngineError::Store(_)
            | EngineError::SharedStore(_)
            | EngineError::Bm25(_)
            | EngineError::Search(_)
            | EngineError::Vector(_)
            | EngineError::Io { .. } => ErrorKind::Internal,
        }
    }

    /// Whether the error comes from a full disk (`ENOSPC`, SQLite's "database or disk is
    /// full"), wherever in its chain: every write of the engine leaves the index
    /// consistent when it fails, so the fix is space and the same command again.
    pub fn is_disk_full(&self) -> bool {
        self.any_in_chain(|err| {
            if let Some(io) = err.downcast_ref::<std::io::Error>()
                && (io.kind() == std::io::ErrorKind::StorageFull || io.raw_os_error() == Some(28))
            {
                return true;
            }
            // SQLite's error, tantivy's and the vector index's carry it as text. SQLite's
            // extended code 4874 (SQLITE_IOERR_SHMSIZE) is its shared-memory file that
            // cannot grow: a full disk too.
            let text = err.to_string();
            text.contains("No space left on device")
                || text.contains("database or disk is full")
                || text.contains("Error code 4874")
        })
    }

    /// Whether BM25's writer thread stopped on an I/O error it keeps to itself (tantivy
    /// says only "an index writer was killed"; on a full disk this is what an add meets
    /// after the segment flush failed).
    fn is_writer_stopped(&self) -> bool {
        self.any_in_chain(|err| err.to_string().contains("index writer was killed"))
    }

    /// Whether `test` holds for this error or any of its sources.
    fn any_in_chain(&self, test: impl Fn(&(dyn std::error::Error + 'static)) -> bool) -> bool {
        std::iter::successors(Some(self as &(dyn std::error::Error + 'static)), |e| {
            e.source()
        })
        .any(test)
    }

    /// What to do about this error, when the engine knows more than its message says.
    pub fn advice(&self) -> Option<&'static str> {
        if self.is_disk_full() {
            Some(DISK_FULL_FIX)
        } else if self.is_writer_stopped() {
            Some(WRITER_STOPPED_FIX)
        } else {
            None
        }
    }

    /// The wire name of the field at fault, when one is.
    pub fn field(&self) -> Option<&str> {
        match self {
            EngineError::InvalidField { field, .. } => Some(field),
            EngineError::In { source, .. } => source.field(),
            _ => None,
        }
    }

    /// The command that installs the missing model, for a [`ErrorKind::ModelMissing`] error.
    pub fn install(&self) -> Option<&str> {
        match self {
            EngineError::ModelMissing { install, .. }
            | EngineError::Llm(situate_llm::LlmError::Missing { install, .. }) => Some(install),
            EngineError::In { source, .. } => source.install(),
            _ => None,
        }
    }

    /// This error, said to have happened while doing `what`; its kind and field stay.
    pub fn within(self, what: impl Into<String>) -> EngineError {
        EngineError::In {
            what: what.into(),
            source: Box::new(self),
        }
    }

    /// This error with its field put under `parent` (`mode` in a request's `search`
    /// object is `search.mode`); an error without a field is left as it is.
    pub fn under(self, parent: &str) -> EngineError {
        match self {
            EngineError::InvalidField { field, reason } => EngineError::InvalidField {
                field: format!("{parent}.{field}"),
                reason,
            },
            EngineError::In { what, source } => EngineError::In {
                what,
                source: Box::new(source.under(parent)),
            },
            other => other,
        }
    }

    /// An error in the field `field` (its wire name).
    pub fn field_error(field: impl Into<String>, reason: impl Into<String>) -> EngineError {
        EngineError::InvalidField {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_one_row_per_kind_and_distinct_codes() {
        let kinds = [
            ErrorKind::Invalid,
            ErrorKind::NotFound,
            ErrorKind::Conflict,
            ErrorKind::Busy,
            ErrorKind::Unavailable,
            ErrorKind::Upstream,
            ErrorKind::ModelMissing,
            ErrorKind::Internal,
            ErrorKind::Damaged,
        ];
        assert_eq!(kinds.len(), ErrorKind::TABLE.len());
        for k in kinds {
            assert_eq!(
                ErrorKind::TABLE.iter().filter(|w| w.kind == k).count(),
                1,
                "{k:?}"
            );
            assert_eq!(k.wire().kind, k);
        }
        let codes: std::collections::BTreeSet<_> =
            ErrorKind::TABLE.iter().map(|w| w.code).collect();
        assert_eq!(codes.len(), ErrorKind::TABLE.len());
    }

    #[test]
    fn a_field_error_names_its_field_and_is_invalid() {
        let e = EngineError::field_error("context_weight", "must be a number >= 0, not -1");
        assert_eq!(e.kind(), ErrorKind::Invalid);
        assert_eq!(e.field(), Some("context_weight"));
        assert_eq!(
            e.to_string(),
            "context_weight: must be a number >= 0, not -1"
        );
        assert_eq!(e.kind().wire().http, 400);
        assert_eq!(e.kind().wire().exit, 1);
        let within = e.within("configuration bm25+none");
        assert_eq!(within.field(), Some("context_weight"));
        assert_eq!(within.kind(), ErrorKind::Invalid);
        assert!(
            within
                .to_string()
                .starts_with("configuration bm25+none: context_weight: ")
        );
        let locked = EngineError::Locked(PathBuf::from("x"));
        assert_eq!(locked.kind().wire().http, 409);
        assert_eq!(locked.field(), None);
    }
}
