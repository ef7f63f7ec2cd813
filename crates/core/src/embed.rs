//! The embedding stage: a trait that turns texts into vectors.

/// What a text is embedded as. Some models (e5) prefix queries and passages differently;
/// symmetric models (all-MiniLM) ignore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbedKind {
    /// A search query.
    Query,
    /// A chunk to be found.
    Passage,
}

/// An embedder failed.
#[derive(Debug, thiserror::Error)]
#[error("embedder {model}: {message}")]
pub struct EmbedError {
    /// The model.
    pub model: String,
    /// What went wrong.
    pub message: String,
}

/// Turns texts into unit-length vectors (cosine similarity = dot product).
///
/// Asynchronous so hosted implementations can overlap requests; local models compute in
/// the call.
#[async_trait::async_trait]
pub trait Embedder: Send + Sync {
    /// A stable id of the model (part of every embedding cache key).
    fn model_id(&self) -> &str;

    /// The vectors' dimension.
    fn dim(&self) -> usize;

    /// One vector per text, in order.
    async fn embed(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError>;
}
