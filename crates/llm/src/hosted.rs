//! Hosted LLMs: Anthropic's Messages API with prompt caching, and any OpenAI-compatible chat
//! completions server (OpenAI, Ollama, vLLM, llama.cpp's server, LM Studio).
//!
//! Spec: `PROVIDER:MODEL[?option=value&...]`, for example `anthropic:claude-3-5-haiku-latest`,
//! `openai:gpt-4o-mini`, `ollama:qwen2.5:1.5b`, `openai:local?base_url=http://localhost:8080/v1`.
//!
//! | option | meaning | default |
//! |---|---|---|
//! | `base_url` | the API root; also from `ANTHROPIC_BASE_URL`, `OPENAI_BASE_URL`, `OLLAMA_BASE_URL` | the provider's public API (Ollama: `http://localhost:11434/v1`) |
//! | `key_env` | the environment variable holding the key | `ANTHROPIC_API_KEY`, `OPENAI_API_KEY` |
//! | `concurrency` | requests in flight (over all documents) | 4 |
//! | `documents` | documents contextualized at the same time | 4 |
//! | `retries` | tries per request, the first included | 6 |
//! | `timeout` | seconds per try | 120 |
//! | `window` | the model's context window in tokens | 200,000 for Claude, 128,000 for GPT-4o/4.1/5, else 8,192 |
//! | `max_tokens_field` | `max_tokens` or `max_completion_tokens` (OpenAI's newer models) | `max_tokens` |
//!
//! Scheduling is cache-aware: of the replies that share a document, the first is asked
//! alone (for Anthropic it writes the prompt cache, for servers with automatic prefix caching
//! it fills theirs), then the others concurrently, which read it. Anthropic's request marks
//! the document block with `cache_control: {"type": "ephemeral"}`; the chunk and instruction
//! follow in a second block. Usage is taken from each answer (`cache_creation_input_tokens`,
//! `cache_read_input_tokens`; OpenAI's `prompt_tokens_details.cached_tokens`).
//!
//! Token counts for the window are estimated (a token per 3 bytes, on the safe side for
//! English and for scripts that take more bytes per character).

use crate::{Finish, Generation, Llm, LlmError, OnReply, OnText, SharedPrompt, TokenUsage};
use futures_util::StreamExt;
use serde_json::{Value, json};
use situate_http::Client;
use situate_http::spec::{self, Endpoint, Provider};

/// The two protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `POST {base}/v1/messages`.
    Anthropic,
    /// `POST {base}/chat/completions`.
    OpenAiChat,
}

/// The providers: where each API is, and the protocol it speaks.
const PROVIDERS: &[Provider<Protocol>] = &[
    Provider {
        endpoint: Endpoint {
            name: "anthropic",
            public: "https://api.anthropic.com",
            key_vars: &["ANTHROPIC_API_KEY"],
            base_var: "ANTHROPIC_BASE_URL",
        },
        protocol: Protocol::Anthropic,
    },
    Provider {
        endpoint: spec::OPENAI,
        protocol: Protocol::OpenAiChat,
    },
    Provider {
        endpoint: spec::OLLAMA,
        protocol: Protocol::OpenAiChat,
    },
];

/// Whether `spec` names a hosted LLM.
pub fn is_hosted(spec: &str) -> bool {
    spec::is_hosted(PROVIDERS, spec)
}

/// An LLM behind an HTTP API.
pub struct HostedLlm {
    protocol: Protocol,
    model: String,
    id: String,
    base_url: String,
    key: Option<String>,
    window: usize,
    max_tokens_field: String,
    concurrency: usize,
    documents: usize,
    client: Client,
}

impl HostedLlm {
    /// Parses a spec and reads the key from the environment.
    pub fn from_spec(spec: &str) -> Result<Self, LlmError> {
        Self::from_spec_with_env(spec, &|k| std::env::var(k).ok())
    }

    /// As [`HostedLlm::from_spec`], with the environment given (for tests).
    pub fn from_spec_with_env(
        spec: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, LlmError> {
        let fail = |message: String| LlmError::Load {
            model: spec.to_string(),
            message,
        };
        let mut window = None;
        let mut max_tokens_field = "max_tokens".to_string();
        let mut documents = 4;
        let parsed = spec::parse(
            spec,
            PROVIDERS,
            env,
            4,
            &mut |k, v| {
                match k {
                    "window" => window = Some(spec::number(k, v, 256, 10_000_000)? as usize),
                    "documents" => documents = spec::number(k, v, 1, 256)? as usize,
                    "max_tokens_field" if v == "max_tokens" || v == "max_completion_tokens" => {
                        max_tokens_field = v.to_string()
                    }
                    _ => return Ok(false),
                }
                Ok(true)
            },
            "base_url, key_env, concurrency, documents, retries, timeout, window, max_tokens_field=max_tokens|max_completion_tokens",
        )
        .map_err(fail)?;
        let Provider { endpoint, protocol } = PROVIDERS[parsed.endpoint];
        let name = endpoint.name;
        let spec::Spec {
            model,
            base_url,
            key,
            concurrency,
            policy,
            ..
        } = parsed;
        let model = model.as_str();
        let window = window.unwrap_or_else(|| {
            if model.starts_with("claude") {
                200_000
            } else if ["gpt-4o", "gpt-4.1", "gpt-5", "o3", "o4"]
                .iter()
                .any(|p| model.starts_with(p))
            {
                128_000
            } else {
                8_192
            }
        });
        let client = Client::new(policy, concurrency).map_err(|e| fail(e.to_string()))?;
        Ok(HostedLlm {
            protocol,
            id: format!("{name}:{model}"),
            model: model.to_string(),
            base_url,
            key,
            window,
            max_tokens_field,
            concurrency,
            documents,
            client,
        })
    }

    /// The HTTP client (its traffic counters).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// One request.
    async fn ask(
        &self,
        system: Option<&str>,
        prefix: &str,
        suffix: &str,
        max_tokens: usize,
    ) -> Result<Generation, LlmError> {
        let request = self.request(system, prefix, suffix, max_tokens);
        let reply: Value = self
            .client
            .post_json(&request.url, &request.headers(), &request.body)
            .await?
            .body;
        self.parse_reply(&reply)
    }

    /// One request's URL, headers and body (not streamed).
    fn request(
        &self,
        system: Option<&str>,
        prefix: &str,
        suffix: &str,
        max_tokens: usize,
    ) -> Request {
        match self.protocol {
            Protocol::Anthropic => {
                let mut body = json!({
                    "model": self.model,
                    "max_tokens": max_tokens,
                    "temperature": 0,
                    "messages": [{"role": "user", "content": [
                        {"type": "text", "text": prefix, "cache_control": {"type": "ephemeral"}},
                        {"type": "text", "text": suffix},
                    ]}],
                });
                if let Some(s) = system {
                    body["system"] = json!(s);
                }
                let mut headers = vec![("anthropic-version".into(), "2023-06-01".into())];
                if let Some(k) = &self.key {
                    headers.push(("x-api-key".into(), k.clone()));
                }
                Request {
                    url: format!("{}/v1/messages", self.base_url),
                    headers,
                    body,
                }
            }
            Protocol::OpenAiChat => Request {
                url: format!("{}/chat/completions", self.base_url),
                headers: self.chat_headers(),
                body: self.chat_request(system, prefix, suffix, max_tokens),
            },
        }
    }

    fn unusable(&self, message: String) -> LlmError {
        LlmError::Answer {
            provider: self.id.clone(),
            message,
        }
    }

    /// A whole (not streamed) reply.
    fn parse_reply(&self, reply: &Value) -> Result<Generation, LlmError> {
        match self.protocol {
            Protocol::Anthropic => {
                let text: String = reply["content"]
                    .as_array()
                    .ok_or_else(|| self.unusable("no content in the answer".into()))?
                    .iter()
                    .filter(|b| b["type"] == "text")
                    .filter_map(|b| b["text"].as_str())
                    .collect();
                Ok(Generation {
                    text: text.trim().to_string(),
                    usage: anthropic_usage(&reply["usage"], TokenUsage::default()),
                    finish: finish(reply["stop_reason"].as_str()),
                })
            }
            Protocol::OpenAiChat => {
                let choice = &reply["choices"][0];
                let text = choice["message"]["content"].as_str().ok_or_else(|| {
                    self.unusable("no choices[0].message.content in the answer".into())
                })?;
                Ok(Generation {
                    text: text.trim().to_string(),
                    usage: openai_usage(&reply["usage"]),
                    finish: finish(choice["finish_reason"].as_str()),
                })
            }
        }
    }

    /// One reply streamed: the request with `"stream": true` (OpenAI's also asks for the
    /// usage in the last chunk), each piece of text handed to `on_text` as its event
    /// arrives. Anthropic's events: `message_start` (the prompt's usage), `content_block_delta`
    /// (`text_delta`), `message_delta` (stop reason, tokens written), `error`; OpenAI's:
    /// `choices[0].delta.content`, `finish_reason`, `usage`, `[DONE]`.
    async fn ask_streamed(
        &self,
        system: Option<&str>,
        prefix: &str,
        suffix: &str,
        max_tokens: usize,
        on_text: OnText<'_>,
    ) -> Result<Generation, LlmError> {
        let mut request = self.request(system, prefix, suffix, max_tokens);
        request.body["stream"] = json!(true);
        if self.protocol == Protocol::OpenAiChat {
            request.body["stream_options"] = json!({"include_usage": true});
        }
        let mut reply = Streamed::default();
        let mut shown = Trimmed::default();
        let protocol = self.protocol;
        self.client
            .post_events(&request.url, &request.headers(), &request.body, &mut |e| {
                if let Some(text) = reply.event(protocol, e) {
                    shown.push(&text, on_text);
                }
            })
            .await?;
        if let Some(whole) = reply.whole {
            // The server ignored "stream": its whole answer, shown at once.
            let value: Value = serde_json::from_str(&whole)
                .map_err(|e| self.unusable(format!("the answer is not JSON ({e})")))?;
            let g = self.parse_reply(&value)?;
            on_text(&g.text);
            return Ok(g);
        }
        if let Some(message) = reply.error {
            return Err(self.unusable(message));
        }
        if !reply.ended {
            return Err(self.unusable(
                "the stream ended before the reply did (no message_stop or [DONE])".into(),
            ));
        }
        Ok(Generation {
            text: reply.text.trim().to_string(),
            usage: reply.usage,
            finish: reply.finish,
        })
    }
}

/// A request ready to send.
struct Request {
    url: String,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Request {
    fn headers(&self) -> Vec<(&str, &str)> {
        self.headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }
}

fn finish(reason: Option<&str>) -> Finish {
    match reason {
        Some("max_tokens" | "length") => Finish::Length,
        _ => Finish::Stop,
    }
}

/// Anthropic's usage object over what is known already (a stream's `message_delta`
/// carries only `output_tokens`).
fn anthropic_usage(u: &Value, known: TokenUsage) -> TokenUsage {
    let n = |k: &str, old: u64| u[k].as_u64().unwrap_or(old);
    TokenUsage {
        input_tokens: n("input_tokens", known.input_tokens),
        cache_creation_input_tokens: n(
            "cache_creation_input_tokens",
            known.cache_creation_input_tokens,
        ),
        cache_read_input_tokens: n("cache_read_input_tokens", known.cache_read_input_tokens),
        output_tokens: n("output_tokens", known.output_tokens),
    }
}

/// OpenAI's usage object (cached prompt tokens apart).
fn openai_usage(u: &Value) -> TokenUsage {
    let prompt = u["prompt_tokens"].as_u64().unwrap_or(0);
    let cached = u["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0)
        .min(prompt);
    TokenUsage {
        input_tokens: prompt - cached,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: cached,
        output_tokens: u["completion_tokens"].as_u64().unwrap_or(0),
    }
}

/// A streamed reply as its events arrive.
#[derive(Default)]
struct Streamed {
    text: String,
    usage: TokenUsage,
    finish: Finish,
    /// The end was seen (`message_stop`, `[DONE]`, or a finish reason).
    ended: bool,
    error: Option<String>,
    /// A whole answer instead of a stream.
    whole: Option<String>,
}

impl Streamed {
    /// Takes one event in; the text it adds, if any.
    fn event(&mut self, protocol: Protocol, e: &situate_http::Event) -> Option<String> {
        if e.event == "json" {
            self.whole = Some(e.data.clone());
            return None;
        }
        if protocol == Protocol::OpenAiChat && e.data.trim() == "[DONE]" {
            self.ended = true;
            return None;
        }
        let Ok(v) = serde_json::from_str::<Value>(&e.data) else {
            self.error = Some(format!("an event that is not JSON: {:?}", e.data));
            return None;
        };
        let text = match protocol {
            Protocol::Anthropic => match v["type"].as_str().unwrap_or(e.event.as_str()) {
                "message_start" => {
                    self.usage = anthropic_usage(&v["message"]["usage"], self.usage);
                    None
                }
                "content_block_delta" if v["delta"]["type"] == "text_delta" => {
                    v["delta"]["text"].as_str().map(String::from)
                }
                "message_delta" => {
                    self.usage = anthropic_usage(&v["usage"], self.usage);
                    self.finish = finish(v["delta"]["stop_reason"].as_str());
                    None
                }
                "message_stop" => {
                    self.ended = true;
                    None
                }
                "error" => {
                    self.error = Some(format!(
                        "{} (in the stream)",
                        v["error"]["message"].as_str().unwrap_or("an error event")
                    ));
                    None
                }
                _ => None,
            },
            Protocol::OpenAiChat => {
                if v["usage"].is_object() {
                    self.usage = openai_usage(&v["usage"]);
                }
                if let Some(reason) = v["choices"][0]["finish_reason"].as_str() {
                    self.finish = finish(Some(reason));
                    self.ended = true;
                }
                if let Some(message) = v["error"]["message"].as_str() {
                    self.error = Some(format!("{message} (in the stream)"));
                }
                v["choices"][0]["delta"]["content"]
                    .as_str()
                    .filter(|t| !t.is_empty())
                    .map(String::from)
            }
        };
        if let Some(t) = &text {
            self.text.push_str(t);
        }
        text
    }
}

/// Hands text on as it comes, trimmed as the whole reply is: no leading whitespace, and
/// whitespace held back until more text follows it, so the pieces shown add up to the
/// reply's trimmed text.
#[derive(Default)]
struct Trimmed {
    started: bool,
    held: String,
}

impl Trimmed {
    fn push(&mut self, piece: &str, on_text: OnText<'_>) {
        let piece = if self.started {
            piece
        } else {
            piece.trim_start()
        };
        if piece.is_empty() {
            return;
        }
        self.started = true;
        let body = piece.trim_end();
        if !body.is_empty() {
            let out = std::mem::take(&mut self.held) + body;
            on_text(&out);
        }
        self.held.push_str(&piece[body.len()..]);
    }
}

impl HostedLlm {
    /// Cache-aware scheduling of `n` requests sharing a prefix: `ask(0)` alone (it writes or
    /// warms the cache the others read), then the rest concurrently; results in order.
    async fn first_then_rest<T, F, Fut>(&self, n: usize, ask: F) -> Vec<Result<T, LlmError>>
    where
        F: Fn(usize) -> Fut,
        Fut: std::future::Future<Output = (usize, Result<T, LlmError>)>,
    {
        if n == 0 {
            return Vec::new();
        }
        let mut out: Vec<Option<Result<T, LlmError>>> = (0..n).map(|_| None).collect();
        let (i, first) = ask(0).await;
        out[i] = Some(first);
        let mut rest = futures_util::stream::iter(1..n)
            .map(&ask)
            .buffer_unordered(self.concurrency);
        while let Some((i, r)) = rest.next().await {
            out[i] = Some(r);
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(LlmError::Generate("no reply".into()))))
            .collect()
    }

    /// An OpenAI-compatible chat request's body: the document first, in one user message, so
    /// that servers' prefix caches match.
    fn chat_request(
        &self,
        system: Option<&str>,
        prefix: &str,
        suffix: &str,
        max_tokens: usize,
    ) -> Value {
        let mut messages = Vec::new();
        if let Some(s) = system {
            messages.push(json!({"role": "system", "content": s}));
        }
        messages.push(json!({"role": "user", "content": format!("{prefix}{suffix}")}));
        let mut body = json!({
            "model": self.model,
            "temperature": 0,
            "messages": messages,
        });
        body[self.max_tokens_field.as_str()] = json!(max_tokens);
        body
    }

    /// Sends `body` to the server's `/chat/completions`, with the key as a bearer token if
    /// there is one; the answer's JSON.
    async fn post_chat(&self, body: &Value) -> Result<Value, LlmError> {
        let headers = self.chat_headers();
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let url = format!("{}/chat/completions", self.base_url);
        Ok(self.client.post_json(&url, &headers, body).await?.body)
    }

    /// The key as a bearer token, if there is one.
    fn chat_headers(&self) -> Vec<(String, String)> {
        self.key
            .iter()
            .map(|k| ("authorization".to_string(), format!("Bearer {k}")))
            .collect()
    }

    /// One yes/no judgement: OpenAI-compatible servers are asked for the first token's
    /// `top_logprobs` (P(yes) / (P(yes) + P(no)) over the listed tokens that spell each
    /// answer); a server that lists neither, and Anthropic (which exposes no token
    /// probabilities), are read from the reply's text: 1 for yes, 0 for no.
    async fn judge_one(
        &self,
        system: Option<&str>,
        prefix: &str,
        suffix: &str,
    ) -> Result<f32, LlmError> {
        let unusable = |text: &str| LlmError::Answer {
            provider: self.id.clone(),
            message: format!("expected yes or no, got {text:?}"),
        };
        if self.protocol == Protocol::Anthropic {
            let g = self.ask(system, prefix, suffix, 3).await?;
            return crate::yes_no(&g.text).ok_or_else(|| unusable(&g.text));
        }
        let mut body = self.chat_request(system, prefix, suffix, 1);
        body["logprobs"] = json!(true);
        body["top_logprobs"] = json!(10);
        let reply = self.post_chat(&body).await?;
        let choice = &reply["choices"][0];
        let (mut yes, mut no) = (Vec::new(), Vec::new());
        if let Some(top) = choice["logprobs"]["content"][0]["top_logprobs"].as_array() {
            for t in top {
                let (Some(token), Some(lp)) = (t["token"].as_str(), t["logprob"].as_f64()) else {
                    continue;
                };
                match crate::yes_no(token) {
                    Some(v) if v > 0.5 => yes.push(lp as f32),
                    Some(_) => no.push(lp as f32),
                    None => {}
                }
            }
        }
        if let Some(share) = crate::yes_share(&yes, &no) {
            return Ok(share);
        }
        let text = choice["message"]["content"].as_str().unwrap_or("");
        crate::yes_no(text).ok_or_else(|| unusable(text))
    }
}

#[async_trait::async_trait]
impl Llm for HostedLlm {
    fn id(&self) -> &str {
        &self.id
    }

    fn window(&self) -> usize {
        self.window
    }

    fn count_tokens(&self, text: &str) -> usize {
        text.len().div_ceil(3)
    }

    fn documents_in_flight(&self) -> usize {
        self.documents
    }

    fn prefix_caching(&self) -> crate::PrefixCaching {
        match self.protocol {
            Protocol::Anthropic => crate::PrefixCaching::Explicit,
            Protocol::OpenAiChat => crate::PrefixCaching::Automatic,
        }
    }

    async fn generate_shared(
        &self,
        prompt: SharedPrompt<'_>,
        on_reply: OnReply<'_>,
    ) -> Vec<Result<Generation, LlmError>> {
        let n = prompt.suffixes.len();
        let ask = |i: usize| async move {
            let r = self
                .ask(
                    prompt.system,
                    prompt.prefix,
                    &prompt.suffixes[i],
                    prompt.max_tokens,
                )
                .await;
            on_reply(i, &r);
            (i, r)
        };
        self.first_then_rest(n, ask).await
    }

    async fn judge_shared(&self, prompt: SharedPrompt<'_>) -> Vec<Result<f32, LlmError>> {
        let n = prompt.suffixes.len();
        let judge = |i: usize| async move {
            let r = self
                .judge_one(prompt.system, prompt.prefix, &prompt.suffixes[i])
                .await;
            (i, r)
        };
        self.first_then_rest(n, judge).await
    }

    async fn generate_streamed(
        &self,
        prompt: SharedPrompt<'_>,
        on_text: OnText<'_>,
    ) -> Result<Generation, LlmError> {
        let suffix = prompt
            .suffixes
            .first()
            .ok_or_else(|| LlmError::Generate("no prompt to answer".into()))?;
        self.ask_streamed(
            prompt.system,
            prompt.prefix,
            suffix,
            prompt.max_tokens,
            on_text,
        )
        .await
    }
}
