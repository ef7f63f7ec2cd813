//! Rerankers' tests: the cross-encoders on tiny random models written by the tests (a BERT
//! and an XLM-RoBERTa classifier: safetensors + tokenizer.json, checked against
//! candle-transformers' own models), the hosted rerank APIs against fake servers, and the
//! LLM judge with scripted and fake-server LLMs. What they share is here.

mod cross;
mod hosted;
mod judge;

use situate_core::RerankPassage;

pub(super) fn passage<'a>(text: &'a str, context: Option<&'a str>) -> RerankPassage<'a> {
    RerankPassage { context, text }
}

pub(super) fn env_with(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let pairs: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
}

/// A fake server's relevance: how many query words the document holds.
pub(super) fn overlap(query: &str, doc: &str) -> f64 {
    query
        .split_whitespace()
        .filter(|w| doc.split_whitespace().any(|d| d == *w))
        .count() as f64
}

pub(super) fn five() -> Vec<RerankPassage<'static>> {
    vec![
        passage("costs fell", None),
        passage("the revenue grew", Some("from acme")),
        passage("revenue", None),
        passage("nothing here", None),
        passage("how much did the revenue grow", None),
    ]
}
