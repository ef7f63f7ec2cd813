//! The engine's parts that scale-out builds on (`situate-scale`: the shared store on
//! PostgreSQL, its workers and query nodes). A query node is an embedded index whose cards
//! come from the store's change feed instead of an ingest, and a worker runs the same
//! context and embedding pipeline as the embedded ingest; both reuse these pieces rather
//! than copy them. Front ends use the engine's operations ([`crate::api`]), not these.

use crate::{Engine, Result};

pub use crate::context_run::{ContextCache, ContextKeeper, contextualize_many};
pub use crate::contexts::spans_of;
pub use crate::crash_point;
pub use crate::ingest::{chunk_spans, ingest_key, read_documents};
pub use crate::ingest_request::ingest_options;
pub use crate::vectors::{
    EmbedSettings, Embedded, EmbedderLoad, LateDocument, embed_late, embedding_input,
    late_document, runtime, text_hash,
};

/// The node's settings key in its own store: the feed position it has applied.
pub const STORE_POSITION: &str = "shared_position";

impl Engine {
    /// The shared store's feed position this index (a query node) has applied, `None` for
    /// an index that follows no store.
    pub fn store_position(&self) -> Result<Option<u64>> {
        Ok(self
            .store
            .meta(STORE_POSITION)?
            .and_then(|p| p.parse().ok()))
    }

    /// Every document id in the index.
    pub fn document_ids(&self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self.store.documents_after(after.as_deref(), 1000)?;
            let Some(last) = page.last() else { break };
            after = Some(last.id.clone());
            out.extend(page.into_iter().map(|d| d.id));
        }
        Ok(out)
    }
}
