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

/// A chunk to embed as a passage: its indexed context (when it has one) and its original
/// text, kept apart until the embedder joins them ([`Embedder::embed_passages`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassageInput {
    /// The situating context, when one is indexed.
    pub context: Option<String>,
    /// The chunk's own text.
    pub original: String,
}

impl PassageInput {
    /// A passage from its context and original text.
    pub fn new(context: Option<&str>, original: &str) -> Self {
        PassageInput {
            context: context.map(str::to_string),
            original: original.to_string(),
        }
    }

    /// The text every index sees for it ([`crate::indexed_text`]): context, blank line,
    /// original.
    pub fn indexed(&self) -> String {
        crate::indexed_text(self.context.as_deref(), &self.original)
    }
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

    /// The vectors' dimension (0 while unknown: a hosted model that must be asked, see
    /// [`Embedder::probe_dim`]).
    fn dim(&self) -> usize;

    /// The dimension, asking the model once when it cannot be known in advance (hosted
    /// models without a `dimensions` setting). Local models just answer [`Embedder::dim`].
    async fn probe_dim(&self) -> Result<usize, EmbedError> {
        Ok(self.dim())
    }

    /// How many texts a caller should hand over per [`Embedder::embed`] call: local models
    /// want a batch that fills the cores; hosted ones a few requests' worth, which they send
    /// concurrently.
    fn call_size(&self) -> usize {
        64
    }

    /// How many tokens the model's input for `text` as `kind` has (prompt and special tokens
    /// included) and the most it reads: `Some((tokens, window))`, the text's end cut when
    /// `tokens > window`. `None` when the embedder cannot say (hosted models) or reads
    /// every token (multilingual-e5 averages windows; the hashing embedder). Ingest counts
    /// the cut texts with it, so that no input is cut silently.
    fn input_tokens(&self, _text: &str, _kind: EmbedKind) -> Option<(usize, usize)> {
        None
    }

    /// One vector per text, in order.
    async fn embed(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError>;

    /// One vector per passage, in order, each given as context and original apart. By
    /// default a passage is embedded as its indexed text ([`PassageInput::indexed`]); an
    /// embedder with a slot of its own for the context (EmbeddingGemma's `title:`, named
    /// `embeddinggemma-300m:title`) puts it there.
    async fn embed_passages(&self, passages: &[PassageInput]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let texts: Vec<String> = passages.iter().map(PassageInput::indexed).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        self.embed(&refs, EmbedKind::Passage).await
    }

    /// [`Embedder::input_tokens`] of a passage as [`Embedder::embed_passages`] gives it to
    /// the model.
    fn passage_tokens(&self, passage: &PassageInput) -> Option<(usize, usize)> {
        self.input_tokens(&passage.indexed(), EmbedKind::Passage)
    }

    /// Whether passages are embedded by late chunking ([`Embedder::embed_late`]): an index
    /// whose embedder says so embeds each document once and pools each chunk's span.
    fn late(&self) -> bool {
        false
    }

    /// Late chunking: the model reads `document` whole (or in overlapping windows of its
    /// length), and each chunk's vector is the mean of its tokens' states, the chunk being
    /// a byte range of `document` (`spans`). One vector per span, in order.
    async fn embed_late(
        &self,
        _document: &str,
        _spans: &[(usize, usize)],
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        Err(EmbedError {
            model: self.model_id().to_string(),
            message: "this embedder does not embed by late chunking".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Records what it is asked to embed.
    struct Recorder(Mutex<Vec<(String, EmbedKind)>>);

    #[async_trait::async_trait]
    impl Embedder for Recorder {
        fn model_id(&self) -> &str {
            "recorder"
        }
        fn dim(&self) -> usize {
            1
        }
        fn input_tokens(&self, text: &str, _kind: EmbedKind) -> Option<(usize, usize)> {
            Some((text.split_whitespace().count(), 4))
        }
        async fn embed(
            &self,
            texts: &[&str],
            kind: EmbedKind,
        ) -> Result<Vec<Vec<f32>>, EmbedError> {
            let mut seen = self.0.lock().expect("lock");
            seen.extend(texts.iter().map(|t| (t.to_string(), kind)));
            Ok(texts.iter().map(|_| vec![1.0]).collect())
        }
    }

    /// Runs a future that never waits (the recorder answers at once).
    fn now<T>(f: impl std::future::Future<Output = T>) -> T {
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("the recorder does not wait"),
        }
    }

    /// By default a passage is embedded as its indexed text (context, blank line,
    /// original; the original alone without a context), and counted the same way.
    #[test]
    fn passages_are_embedded_as_their_indexed_text_by_default() {
        let r = Recorder(Mutex::new(Vec::new()));
        let passages = [
            PassageInput::new(Some("About Curie."), "She won two prizes."),
            PassageInput::new(None, "No context here."),
            PassageInput::new(Some("  "), "A blank context."),
        ];
        let v = now(r.embed_passages(&passages)).expect("embeds");
        assert_eq!(v.len(), 3);
        let seen = r.0.lock().expect("lock").clone();
        assert_eq!(
            seen,
            vec![
                (
                    "About Curie.\n\nShe won two prizes.".to_string(),
                    EmbedKind::Passage
                ),
                ("No context here.".to_string(), EmbedKind::Passage),
                ("A blank context.".to_string(), EmbedKind::Passage),
            ]
        );
        assert_eq!(r.passage_tokens(&passages[0]), Some((6, 4)));
    }
}
