//! Hosted rerankers over HTTP: Cohere, Voyage, Jina, Hugging Face TEI, and the Cohere-style
//! `/rerank` endpoint that vLLM and Infinity serve.
//!
//! Spec: `PROVIDER:MODEL[?option=value&...]`, for example `cohere:rerank-v3.5`,
//! `voyage:rerank-2.5`, `jina:jina-reranker-v2-base-multilingual`,
//! `tei:bge-reranker-base?base_url=http://localhost:8080`,
//! `vllm:BAAI/bge-reranker-v2-m3?base_url=http://localhost:8000`.
//!
//! | provider | request | answer |
//! |---|---|---|
//! | `cohere` | `POST {base}/v2/rerank` `{model, query, documents}` | `results[{index, relevance_score}]` |
//! | `voyage` | `POST {base}/rerank` `{model, query, documents, truncation}` | `data[{index, relevance_score}]` |
//! | `jina` | `POST {base}/rerank` `{model, query, documents}` | `results[{index, relevance_score}]` |
//! | `tei` | `POST {base}/rerank` `{query, texts, truncate}` | `[{index, score}]` |
//! | `vllm`, `infinity` | `POST {base}/rerank` `{model, query, documents}` | `results[{index, relevance_score}]` |
//!
//! | option | meaning | default |
//! |---|---|---|
//! | `base_url` | the API root; also from `COHERE_BASE_URL`, `VOYAGE_BASE_URL`, `JINA_BASE_URL`, `TEI_BASE_URL`, `VLLM_BASE_URL`, `INFINITY_BASE_URL` | the provider's public API; `http://localhost:8080` (TEI), `:8000` (vLLM), `:7997` (Infinity) |
//! | `key_env` | the environment variable holding the key | `COHERE_API_KEY` (then `CO_API_KEY`), `VOYAGE_API_KEY`, `JINA_API_KEY` |
//! | `batch` | passages per request | 100 (TEI: 32, its default client batch limit) |
//! | `concurrency` | requests in flight | 4 |
//! | `retries` | tries per request, the first included | 6 |
//! | `timeout` | seconds per try | 60 |
//!
//! Each passage is sent as [`RerankPassage::labelled`] (its context in a labelled section).
//! The providers' scores are pointwise, so a list is split into `batch`-sized requests sent
//! concurrently. Every answer is checked: each passage scored exactly once, by a finite
//! number. Retries, `retry-after` and backoff are [`situate_http`]'s.

use futures_util::StreamExt;
use serde_json::{Value, json};
use situate_core::{RerankError, RerankPassage, Reranker};
use situate_http::Client;
use situate_http::spec::{self, Endpoint, Provider};
use std::time::Duration;

/// The request and answer shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Cohere's v2 API.
    Cohere,
    /// Voyage's API.
    Voyage,
    /// Jina's API (also vLLM's and Infinity's `/rerank`).
    Jina,
    /// Hugging Face text-embeddings-inference.
    Tei,
}

impl Protocol {
    /// The path after the base URL.
    fn path(self) -> &'static str {
        match self {
            Protocol::Cohere => "/v2/rerank",
            Protocol::Voyage | Protocol::Jina | Protocol::Tei => "/rerank",
        }
    }
}

/// The providers: where each API is, and the protocol it speaks.
const PROVIDERS: &[Provider<Protocol>] = &[
    Provider {
        endpoint: Endpoint {
            name: "cohere",
            public: "https://api.cohere.com",
            key_vars: &["COHERE_API_KEY", "CO_API_KEY"],
            base_var: "COHERE_BASE_URL",
        },
        protocol: Protocol::Cohere,
    },
    Provider {
        endpoint: spec::VOYAGE,
        protocol: Protocol::Voyage,
    },
    Provider {
        endpoint: Endpoint {
            name: "jina",
            public: "https://api.jina.ai/v1",
            key_vars: &["JINA_API_KEY"],
            base_var: "JINA_BASE_URL",
        },
        protocol: Protocol::Jina,
    },
    Provider {
        endpoint: Endpoint {
            name: "tei",
            public: "http://localhost:8080",
            key_vars: &[],
            base_var: "TEI_BASE_URL",
        },
        protocol: Protocol::Tei,
    },
    Provider {
        endpoint: Endpoint {
            name: "vllm",
            public: "http://localhost:8000",
            key_vars: &[],
            base_var: "VLLM_BASE_URL",
        },
        protocol: Protocol::Jina,
    },
    Provider {
        endpoint: Endpoint {
            name: "infinity",
            public: "http://localhost:7997",
            key_vars: &[],
            base_var: "INFINITY_BASE_URL",
        },
        protocol: Protocol::Jina,
    },
];

/// Whether `spec` names a hosted reranker.
pub fn is_hosted(spec: &str) -> bool {
    spec::is_hosted(PROVIDERS, spec)
}

/// A reranker behind an HTTP API.
pub struct HostedReranker {
    id: String,
    protocol: Protocol,
    model: String,
    url: String,
    key: Option<String>,
    batch: usize,
    concurrency: usize,
    client: Client,
}

impl HostedReranker {
    /// Parses a spec, reading keys and base URLs from the process environment.
    pub fn from_spec(spec: &str) -> Result<Self, RerankError> {
        Self::from_spec_with_env(spec, &|k| std::env::var(k).ok())
    }

    /// Parses a spec, reading variables through `env`.
    pub fn from_spec_with_env(
        spec: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, RerankError> {
        let fail = |message: String| RerankError {
            reranker: spec.split('?').next().unwrap_or(spec).to_string(),
            message,
        };
        let mut batch = None;
        let parsed = spec::parse(
            spec,
            PROVIDERS,
            env,
            4,
            &mut |k, v| match k {
                "batch" => {
                    batch = Some(spec::number(k, v, 1, 1000)? as usize);
                    Ok(true)
                }
                _ => Ok(false),
            },
            "base_url, key_env, batch, concurrency, retries, timeout",
        )
        .map_err(fail)?;
        let Provider { endpoint, protocol } = PROVIDERS[parsed.endpoint];
        let path = protocol.path();
        let mut policy = parsed.policy;
        if !spec.contains("timeout=") {
            policy.timeout = Duration::from_secs(60);
        }
        let client = Client::new(policy, parsed.concurrency)
            .map_err(|e| fail(format!("setting up the HTTP client: {e}")))?;
        Ok(HostedReranker {
            id: format!("{}:{}", endpoint.name, parsed.model),
            protocol,
            model: parsed.model,
            url: format!("{}{path}", parsed.base_url),
            key: parsed.key,
            batch: batch.unwrap_or(if protocol == Protocol::Tei { 32 } else { 100 }),
            concurrency: parsed.concurrency,
            client,
        })
    }

    fn err(&self, message: impl std::fmt::Display) -> RerankError {
        RerankError {
            reranker: self.id.clone(),
            message: message.to_string(),
        }
    }

    /// Scores one request's documents.
    async fn request(&self, query: &str, docs: &[String]) -> Result<Vec<f32>, RerankError> {
        let body = match self.protocol {
            Protocol::Tei => json!({"query": query, "texts": docs, "truncate": true}),
            Protocol::Voyage => json!({
                "model": self.model, "query": query, "documents": docs, "truncation": true,
            }),
            Protocol::Cohere | Protocol::Jina => {
                json!({"model": self.model, "query": query, "documents": docs})
            }
        };
        let bearer = self.key.as_ref().map(|k| format!("Bearer {k}"));
        let headers: Vec<(&str, &str)> = bearer
            .as_deref()
            .map(|b| vec![("authorization", b)])
            .unwrap_or_default();
        let reply: Value = self
            .client
            .post_json(&self.url, &headers, &body)
            .await
            .map_err(|e| self.err(e))?
            .body;
        parse_scores(&reply, docs.len()).map_err(|m| self.err(format!("unusable answer: {m}")))
    }
}

/// Reads `[{index, score}]` (TEI) or `{results|data: [{index, relevance_score}]}` and checks
/// that each of the `n` documents is scored exactly once, by a finite number.
pub fn parse_scores(reply: &Value, n: usize) -> Result<Vec<f32>, String> {
    let list = reply
        .as_array()
        .or_else(|| reply["results"].as_array())
        .or_else(|| reply["data"].as_array())
        .ok_or("no list of results (expected results, data or a JSON array)")?;
    let mut scores = vec![None; n];
    for r in list {
        let index = r["index"].as_u64().ok_or("a result without an index")? as usize;
        let score = r["relevance_score"]
            .as_f64()
            .or_else(|| r["score"].as_f64())
            .ok_or_else(|| format!("result {index} has no relevance_score"))?;
        let slot = scores
            .get_mut(index)
            .ok_or_else(|| format!("index {index} is out of range (0 to {})", n.max(1) - 1))?;
        if slot.is_some() {
            return Err(format!("index {index} is scored twice"));
        }
        if !score.is_finite() {
            return Err(format!("index {index} has score {score}"));
        }
        *slot = Some(score as f32);
    }
    scores
        .into_iter()
        .enumerate()
        .map(|(i, s)| s.ok_or_else(|| format!("index {i} is not scored")))
        .collect()
}

#[async_trait::async_trait]
impl Reranker for HostedReranker {
    fn id(&self) -> &str {
        &self.id
    }

    async fn score(
        &self,
        query: &str,
        passages: &[RerankPassage<'_>],
    ) -> Result<Vec<f32>, RerankError> {
        if passages.is_empty() {
            return Ok(Vec::new());
        }
        let docs: Vec<String> = passages.iter().map(RerankPassage::labelled).collect();
        let mut parts: Vec<(usize, Vec<f32>)> = Vec::new();
        let docs = &docs;
        let batches = docs.len().div_ceil(self.batch);
        let mut stream = futures_util::stream::iter(0..batches)
            .map(|i| async move {
                let end = ((i + 1) * self.batch).min(docs.len());
                (i, self.request(query, &docs[i * self.batch..end]).await)
            })
            .buffer_unordered(self.concurrency.max(1));
        while let Some((i, r)) = stream.next().await {
            parts.push((i, r?));
        }
        parts.sort_by_key(|(i, _)| *i);
        Ok(parts.into_iter().flat_map(|(_, s)| s).collect())
    }
}
