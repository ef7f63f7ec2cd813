//! Hosted embedders: any OpenAI-compatible `/embeddings` endpoint (OpenAI, Ollama, vLLM, TEI,
//! Jina, Mistral, LM Studio, ...), Voyage and Gemini.
//!
//! Spec: `PROVIDER:MODEL[?option=value&...]`, for example `openai:text-embedding-3-small`,
//! `ollama:nomic-embed-text`, `voyage:voyage-3.5?dimensions=512`,
//! `gemini:gemini-embedding-001?dimensions=768`. Options:
//!
//! | option | meaning | default |
//! |---|---|---|
//! | `base_url` | the API root (`…/v1`); also from `OPENAI_BASE_URL`, `VOYAGE_BASE_URL`, `GEMINI_BASE_URL` | the provider's public API (Ollama: `http://localhost:11434/v1`) |
//! | `key_env` | the environment variable holding the key | `OPENAI_API_KEY`, `VOYAGE_API_KEY`, `GEMINI_API_KEY` (then `GOOGLE_API_KEY`) |
//! | `dimensions` | ask for shorter vectors (Matryoshka models) | the model's own |
//! | `batch` | texts per request | 64 |
//! | `concurrency` | requests in flight | 4 |
//! | `retries` | tries per request, the first included | 6 |
//! | `timeout` | seconds per try | 120 |
//!
//! Keys are read from the environment when the embedder is loaded and are never stored:
//! the index records only the spec. A key is required for a provider's public API; a server
//! at another `base_url` (a local Ollama, a gateway) gets one only if it is set.
//!
//! Vectors are normalised here whatever the provider does (Gemini's shortened vectors are
//! not), and every answer is checked: one vector per text, in order (by `index` where the
//! protocol has it), all of one dimension. Failures and retries are [`situate_http`]'s.

use situate_core::{EmbedError, EmbedKind, Embedder};
use situate_http::spec::{self, Endpoint};
use situate_http::{Client, RetryPolicy};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The hosted protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `POST {base}/embeddings`, OpenAI's shape (also Ollama, vLLM, TEI, Jina, Mistral).
    OpenAi,
    /// Voyage's `POST {base}/embeddings` with `input_type`.
    Voyage,
    /// Gemini's `POST {base}/models/{model}:batchEmbedContents` with `taskType`.
    Gemini,
}

/// The options of a hosted spec, parsed.
#[derive(Debug, Clone)]
pub struct HostedOptions {
    /// The API root, without the endpoint.
    pub base_url: String,
    /// The API key, if any.
    pub key: Option<String>,
    /// Requested dimension (Matryoshka shortening), if any.
    pub dimensions: Option<usize>,
    /// Texts per request.
    pub batch: usize,
    /// Requests in flight.
    pub concurrency: usize,
    /// Retry policy.
    pub policy: RetryPolicy,
}

/// An embedder behind an HTTP API.
pub struct HostedEmbedder {
    provider: Protocol,
    model: String,
    id: String,
    options: HostedOptions,
    client: Client,
    dim: AtomicUsize,
}

/// The providers: where each API is, and the protocol it speaks.
const PROVIDERS: &[spec::Provider<Protocol>] = &[
    spec::Provider {
        endpoint: spec::OPENAI,
        protocol: Protocol::OpenAi,
    },
    spec::Provider {
        endpoint: spec::OLLAMA,
        protocol: Protocol::OpenAi,
    },
    spec::Provider {
        endpoint: spec::VOYAGE,
        protocol: Protocol::Voyage,
    },
    spec::Provider {
        endpoint: Endpoint {
            name: "gemini",
            public: "https://generativelanguage.googleapis.com/v1beta",
            key_vars: &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
            base_var: "GEMINI_BASE_URL",
        },
        protocol: Protocol::Gemini,
    },
];

/// Dimensions of well-known models, so an index can be created without a probe request.
const KNOWN_DIMS: &[(&str, usize)] = &[
    ("text-embedding-3-small", 1536),
    ("text-embedding-3-large", 3072),
    ("text-embedding-ada-002", 1536),
    ("voyage-3.5", 1024),
    ("voyage-3.5-lite", 1024),
    ("voyage-3-large", 1024),
    ("voyage-code-3", 1024),
    ("gemini-embedding-001", 3072),
    ("text-embedding-004", 768),
];

/// Whether `spec` names a hosted embedder (`openai:`, `ollama:`, `voyage:`, `gemini:`).
pub fn is_hosted(spec: &str) -> bool {
    spec::is_hosted(PROVIDERS, spec)
}

impl HostedEmbedder {
    /// Parses a spec and reads the key from the environment.
    pub fn from_spec(spec: &str) -> Result<Self, EmbedError> {
        Self::from_spec_with_env(spec, &|k| std::env::var(k).ok())
    }

    /// As [`HostedEmbedder::from_spec`], with the environment given (for tests).
    pub fn from_spec_with_env(
        spec: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, EmbedError> {
        let fail = |message: String| EmbedError {
            model: spec.to_string(),
            message,
        };
        let mut dimensions = None;
        let mut batch = 64usize;
        let parsed = spec::parse(
            spec,
            PROVIDERS,
            env,
            4,
            &mut |k, v| {
                match k {
                    "dimensions" => dimensions = Some(spec::number(k, v, 1, 65_536)? as usize),
                    "batch" => batch = spec::number(k, v, 1, 2048)? as usize,
                    _ => return Ok(false),
                }
                Ok(true)
            },
            "base_url, key_env, dimensions, batch, concurrency, retries, timeout",
        )
        .map_err(fail)?;
        let spec::Provider {
            endpoint,
            protocol: provider,
        } = PROVIDERS[parsed.endpoint];
        let name = endpoint.name;
        if provider == Protocol::Gemini && batch > 100 {
            return Err(fail(
                "Gemini takes at most 100 texts per request (batch ≤ 100)".into(),
            ));
        }
        let spec::Spec {
            model,
            base_url,
            key,
            concurrency,
            policy,
            ..
        } = parsed;
        let model = model.as_str();
        let client = Client::new(policy.clone(), concurrency).map_err(|e| fail(e.to_string()))?;
        let id = match dimensions {
            Some(d) => format!("{name}:{model}:{d}"),
            None => format!("{name}:{model}"),
        };
        let known = dimensions.or_else(|| {
            KNOWN_DIMS
                .iter()
                .find(|(m, _)| *m == model)
                .map(|(_, d)| *d)
        });
        Ok(HostedEmbedder {
            provider,
            model: model.to_string(),
            id,
            options: HostedOptions {
                base_url,
                key,
                dimensions,
                batch,
                concurrency,
                policy,
            },
            client,
            dim: AtomicUsize::new(known.unwrap_or(0)),
        })
    }

    /// The parsed options (the key included: do not print them).
    pub fn options(&self) -> &HostedOptions {
        &self.options
    }

    /// The HTTP client (its traffic counters).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// One request for one batch.
    async fn embed_batch(
        &self,
        texts: &[&str],
        kind: EmbedKind,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let fail = |message: String| EmbedError {
            model: self.id.clone(),
            message,
        };
        let key = self.options.key.as_deref();
        let bearer = key.map(|k| format!("Bearer {k}"));
        let mut headers: Vec<(&str, &str)> = Vec::new();
        let (url, body) = match self.provider {
            Protocol::OpenAi | Protocol::Voyage => {
                if let Some(b) = &bearer {
                    headers.push(("authorization", b));
                }
                let mut body = serde_json::json!({ "model": self.model, "input": texts });
                if self.provider == Protocol::OpenAi {
                    body["encoding_format"] = "float".into();
                    if let Some(d) = self.options.dimensions {
                        body["dimensions"] = d.into();
                    }
                } else {
                    body["input_type"] = match kind {
                        EmbedKind::Query => "query",
                        EmbedKind::Passage => "document",
                    }
                    .into();
                    if let Some(d) = self.options.dimensions {
                        body["output_dimension"] = d.into();
                    }
                }
                (format!("{}/embeddings", self.options.base_url), body)
            }
            Protocol::Gemini => {
                if let Some(k) = key {
                    headers.push(("x-goog-api-key", k));
                }
                let task = match kind {
                    EmbedKind::Query => "RETRIEVAL_QUERY",
                    EmbedKind::Passage => "RETRIEVAL_DOCUMENT",
                };
                let requests: Vec<serde_json::Value> = texts
                    .iter()
                    .map(|t| {
                        let mut r = serde_json::json!({
                            "model": format!("models/{}", self.model),
                            "content": { "parts": [{ "text": t }] },
                            "taskType": task,
                        });
                        if let Some(d) = self.options.dimensions {
                            r["outputDimensionality"] = d.into();
                        }
                        r
                    })
                    .collect();
                (
                    format!(
                        "{}/models/{}:batchEmbedContents",
                        self.options.base_url, self.model
                    ),
                    serde_json::json!({ "requests": requests }),
                )
            }
        };
        let reply = self
            .client
            .post_json::<serde_json::Value>(&url, &headers, &body)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let mut vectors = match self.provider {
            Protocol::OpenAi | Protocol::Voyage => parse_indexed(&reply.body["data"], texts.len()),
            Protocol::Gemini => parse_gemini(&reply.body["embeddings"], texts.len()),
        }
        .map_err(|m| fail(format!("unexpected answer from {url}: {m}")))?;
        for v in &mut vectors {
            normalise(v).map_err(|m| fail(m.into()))?;
        }
        Ok(vectors)
    }
}

/// OpenAI/Voyage: `data: [{index, embedding}]`, possibly out of order.
fn parse_indexed(data: &serde_json::Value, n: usize) -> Result<Vec<Vec<f32>>, String> {
    let items = data.as_array().ok_or("no `data` array")?;
    if items.len() != n {
        return Err(format!("{} vectors for {n} texts", items.len()));
    }
    let mut out: Vec<Option<Vec<f32>>> = vec![None; n];
    for (pos, item) in items.iter().enumerate() {
        let i = match item.get("index") {
            Some(i) => i.as_u64().ok_or("a non-numeric `index`")? as usize,
            None => pos,
        };
        let slot = out
            .get_mut(i)
            .ok_or_else(|| format!("index {i} out of range"))?;
        if slot.is_some() {
            return Err(format!("index {i} twice"));
        }
        *slot = Some(floats(&item["embedding"])?);
    }
    out.into_iter()
        .map(|v| v.ok_or_else(|| "a missing index".to_string()))
        .collect()
}

/// Gemini: `embeddings: [{values}]` in request order.
fn parse_gemini(data: &serde_json::Value, n: usize) -> Result<Vec<Vec<f32>>, String> {
    let items = data.as_array().ok_or("no `embeddings` array")?;
    if items.len() != n {
        return Err(format!("{} vectors for {n} texts", items.len()));
    }
    items.iter().map(|e| floats(&e["values"])).collect()
}

fn floats(v: &serde_json::Value) -> Result<Vec<f32>, String> {
    let a = v
        .as_array()
        .ok_or("an embedding that is not an array of numbers")?;
    if a.is_empty() {
        return Err("an empty embedding".into());
    }
    a.iter()
        .map(|x| {
            x.as_f64()
                .filter(|f| f.is_finite())
                .map(|f| f as f32)
                .ok_or_else(|| "an embedding with a non-number".to_string())
        })
        .collect()
}

fn normalise(v: &mut [f32]) -> Result<(), &'static str> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if !(norm > 0.0 && norm.is_finite()) {
        return Err("the server returned a zero vector");
    }
    v.iter_mut().for_each(|x| *x /= norm);
    Ok(())
}

#[async_trait::async_trait]
impl Embedder for HostedEmbedder {
    fn model_id(&self) -> &str {
        &self.id
    }

    fn dim(&self) -> usize {
        self.dim.load(Ordering::Relaxed)
    }

    async fn probe_dim(&self) -> Result<usize, EmbedError> {
        match self.dim() {
            0 => Ok(self.embed(&["dimension probe"], EmbedKind::Query).await?[0].len()),
            d => Ok(d),
        }
    }

    fn call_size(&self) -> usize {
        self.options.batch * self.options.concurrency * 2
    }

    async fn embed(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        // Every batch at once: the client's permits keep `concurrency` of them in flight.
        let batches = texts
            .chunks(self.options.batch)
            .map(|part| self.embed_batch(part, kind));
        let mut out = Vec::with_capacity(texts.len());
        for result in futures_util::future::join_all(batches).await {
            out.extend(result?);
        }
        // One dimension for the whole index: the first answer fixes it.
        let first = out[0].len();
        let expected =
            match self
                .dim
                .compare_exchange(0, first, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => first,
                Err(d) => d,
            };
        if let Some(bad) = out.iter().find(|v| v.len() != expected) {
            return Err(EmbedError {
                model: self.id.clone(),
                message: format!(
                    "the server returned a {}-dimensional vector where {expected} was expected{}",
                    bad.len(),
                    if self.options.dimensions.is_some() {
                        ""
                    } else {
                        " (set dimensions=…?)"
                    }
                ),
            });
        }
        Ok(out)
    }
}
