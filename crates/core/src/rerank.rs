//! The reranking stage's trait: re-score the fused top hits against the query.

/// A passage as a reranker sees it: the chunk's original text and, apart, the context that
/// was indexed with it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RerankPassage<'a> {
    /// The context indexed with the chunk, if any.
    pub context: Option<&'a str>,
    /// The chunk's original text.
    pub text: &'a str,
}

impl RerankPassage<'_> {
    /// The one text form for rerankers that take a single string (cross-encoders, hosted
    /// APIs): the context in a labelled section before the passage, so a reranker can tell
    /// what situates the chunk from the chunk itself. A passage without context is its text
    /// alone, exactly as the model was trained to see passages.
    ///
    /// ```
    /// use situate_core::RerankPassage;
    /// let p = RerankPassage { context: Some("From ACME's 2023 report."), text: "Revenue grew 3%." };
    /// assert_eq!(p.labelled(), "Context: From ACME's 2023 report.\nPassage: Revenue grew 3%.");
    /// let bare = RerankPassage { context: None, text: "Revenue grew 3%." };
    /// assert_eq!(bare.labelled(), "Revenue grew 3%.");
    /// ```
    pub fn labelled(&self) -> String {
        match self.context.map(str::trim).filter(|c| !c.is_empty()) {
            Some(c) => format!("Context: {c}\nPassage: {}", self.text),
            None => self.text.to_string(),
        }
    }
}

/// Why a reranker could not score.
#[derive(Debug, Clone, thiserror::Error)]
#[error("reranker {reranker}: {message}")]
pub struct RerankError {
    /// The reranker's id.
    pub reranker: String,
    /// What went wrong.
    pub message: String,
}

/// Scores passages against a query; larger is more relevant. Scores are pointwise: a
/// passage's score does not depend on the other passages of the call, so callers may split
/// a list into several calls.
///
/// Asynchronous so hosted rerankers can send requests concurrently; local models compute in
/// the call.
#[async_trait::async_trait]
pub trait Reranker: Send + Sync {
    /// A stable id (`cross-encoder:DIR`, `cohere:rerank-v3.5`, `llm:local:...`).
    fn id(&self) -> &str;

    /// One score per passage, in order.
    async fn score(
        &self,
        query: &str,
        passages: &[RerankPassage<'_>],
    ) -> Result<Vec<f32>, RerankError>;
}
