//! Scale-out over the engine: the shared store on PostgreSQL + pgvector (`situate store
//! migrate`, `situate status --store`), the ingest that queues documents into it
//! (`situate ingest --store`), the workers that write their contexts and embeddings
//! (`situate worker`), and the query nodes that follow its change feed into an embedded
//! index (`situate search|serve --store`, `situate store check`), and a switch of
//! embedder across them (`situate store reembed`, `situate reembed --store`).
//!
//! The embedded engine ([`situate_engine`]) serves one machine; past that, situate runs on
//! PostgreSQL, never on a cluster of its own. Every piece here builds on the engine's parts
//! ([`situate_engine::node`]): a worker runs the embedded ingest's context and embedding
//! pipeline, a query node is an embedded index whose cards come from the feed.

#![warn(missing_docs)]

pub mod follow;
pub mod ingest;
pub mod reembed;
pub mod store;
pub mod worker;

pub use ingest::ingest_into_store;
