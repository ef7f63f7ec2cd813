//! The HTTP client every hosted provider of situate goes through (embedders now; LLMs and
//! rerankers later), so they all fail and retry the same way.
//!
//! - **Bounded concurrency**: a [`Client`] lets at most `concurrency` requests be in flight;
//!   callers may start more, the rest wait for a permit.
//! - **Retries**: on 408, 409, 425, 429 and every 5xx, on timeouts, on dropped connections and on
//!   a body that is not the JSON expected (a connection cut mid-body looks like that), up to
//!   [`RetryPolicy::max_attempts`] tries. The wait is the server's own when it says
//!   (`retry-after-ms`, then `retry-after` in seconds or as an HTTP date, capped at
//!   [`RetryPolicy::max_retry_after`]); otherwise exponential backoff with full jitter.
//!   Other 4xx answers (a bad key, a bad request) fail at once: retrying cannot fix them.
//! - **Errors say what happened**: the status and the start of the server's message, how
//!   many attempts were made, and never the API key.
//!
//! ```no_run
//! # async fn f() -> Result<(), situate_http::HttpError> {
//! use situate_http::{Client, RetryPolicy};
//! let client = Client::new(RetryPolicy::default(), 4)?;
//! let reply: serde_json::Value = client
//!     .post_json("http://localhost:11434/v1/embeddings", &[], &serde_json::json!({"input": ["hi"]}))
//!     .await?
//!     .body;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

#[cfg(feature = "fake")]
pub mod fake;
pub mod spec;

use serde::de::DeserializeOwned;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};
use tokio::sync::Semaphore;

/// How hard a [`Client`] tries.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Tries per request, the first included (at least 1).
    pub max_attempts: u32,
    /// The first backoff; it doubles on every retry (before jitter).
    pub base_delay: Duration,
    /// The longest backoff between two tries when the server gives no `retry-after`.
    pub max_delay: Duration,
    /// The longest `retry-after` honoured; a server asking for more fails the request
    /// (waiting for hours inside an ingest is worse than failing and being re-run).
    pub max_retry_after: Duration,
    /// The time limit of one try (connect, send, whole response).
    pub timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 6,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(120),
            timeout: Duration::from_secs(120),
        }
    }
}

/// A request failed for good.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The server answered with an error status (after `attempts` tries when retryable).
    #[error("{url} answered HTTP {status} after {attempts} attempt(s): {message}")]
    Status {
        /// The URL (no credentials: keys travel in headers).
        url: String,
        /// The last status.
        status: u16,
        /// The start of the server's error message.
        message: String,
        /// Tries made.
        attempts: u32,
    },
    /// No usable answer: timeouts, refused or dropped connections, a body that is not the
    /// JSON expected.
    #[error("{url}: {message} (after {attempts} attempt(s))")]
    Transport {
        /// The URL.
        url: String,
        /// What went wrong on the last try.
        message: String,
        /// Tries made.
        attempts: u32,
    },
    /// The client could not be built (TLS set-up).
    #[error("cannot set up the HTTP client: {0}")]
    Setup(String),
}

/// A successful answer.
#[derive(Debug)]
pub struct Reply<T> {
    /// The decoded body.
    pub body: T,
    /// Tries it took (1 when nothing was retried).
    pub attempts: u32,
}

/// Counters of a client's traffic, for reports.
#[derive(Debug, Default)]
pub struct Stats {
    /// Requests answered successfully.
    pub ok: AtomicU64,
    /// Tries that were retried.
    pub retries: AtomicU64,
    /// Requests that failed for good.
    pub failed: AtomicU64,
}

/// An HTTP client with bounded concurrency and retries. Cheap to clone (shared permits and
/// connection pool).
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    policy: RetryPolicy,
    permits: Arc<Semaphore>,
    stats: Arc<Stats>,
}

/// What one try came to.
enum Outcome<T> {
    Done(T),
    Retry {
        error: HttpError,
        wait: Option<Duration>,
    },
    Fail(HttpError),
}

impl Client {
    /// A client that keeps at most `concurrency` requests in flight (at least 1).
    pub fn new(policy: RetryPolicy, concurrency: usize) -> Result<Self, HttpError> {
        // reqwest is built without a TLS crypto provider (Cargo.toml: ring builds in a
        // third of aws-lc-rs's time); install ring as the process default once. An error
        // means one is installed already, which is what is needed.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(policy.timeout)
            .connect_timeout(policy.timeout.min(Duration::from_secs(30)))
            .user_agent(concat!("situate/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| HttpError::Setup(error_chain(&e)))?;
        Ok(Client {
            http,
            policy,
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
            stats: Arc::new(Stats::default()),
        })
    }

    /// The policy in force.
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// Traffic counters since the client was built.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// POSTs `body` as JSON with the extra `headers` and decodes the JSON answer as `T`,
    /// retrying as the policy says.
    pub async fn post_json<T: DeserializeOwned>(
        &self,
        url: &str,
        headers: &[(&str, &str)],
        body: &serde_json::Value,
    ) -> Result<Reply<T>, HttpError> {
        let payload = serde_json::to_vec(body).map_err(|e| HttpError::Transport {
            url: url.to_string(),
            message: format!("cannot encode the request: {e}"),
            attempts: 0,
        })?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let outcome = {
                let _permit = self.permit().await?;
                self.try_once::<T>(url, headers, &payload, attempt).await
            };
            let (error, wait) = match outcome {
                Outcome::Done(body) => {
                    self.stats.ok.fetch_add(1, Ordering::Relaxed);
                    return Ok(Reply {
                        body,
                        attempts: attempt,
                    });
                }
                Outcome::Fail(e) => {
                    self.stats.failed.fetch_add(1, Ordering::Relaxed);
                    return Err(e);
                }
                Outcome::Retry { error, wait } => (error, wait),
            };
            self.wait_to_retry(attempt, error, wait).await?;
        }
    }

    /// POSTs `body` as JSON and reads the answer as server-sent events
    /// (`text/event-stream`), handing each to `on_event` as it arrives: what a streamed LLM
    /// reply is. Tries are retried as [`Client::post_json`]'s until the first event has been
    /// handed on; after that a failure ends the request (the caller has shown part of the
    /// answer, and a second try would show it twice). A 2xx answer that is not an event
    /// stream (a server that ignored `"stream": true`) is handed on whole, as one event
    /// named `json`. The number of tries is returned.
    pub async fn post_events(
        &self,
        url: &str,
        headers: &[(&str, &str)],
        body: &serde_json::Value,
        on_event: &mut (dyn FnMut(&Event) + Send),
    ) -> Result<u32, HttpError> {
        let payload = serde_json::to_vec(body).map_err(|e| HttpError::Transport {
            url: url.to_string(),
            message: format!("cannot encode the request: {e}"),
            attempts: 0,
        })?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut delivered = 0usize;
            let outcome = {
                let _permit = self.permit().await?;
                self.try_events(url, headers, &payload, attempt, &mut |e| {
                    delivered += 1;
                    on_event(e)
                })
                .await
            };
            let (error, wait) = match outcome {
                Outcome::Done(()) => {
                    self.stats.ok.fetch_add(1, Ordering::Relaxed);
                    return Ok(attempt);
                }
                Outcome::Retry { error, .. } if delivered > 0 => {
                    self.stats.failed.fetch_add(1, Ordering::Relaxed);
                    return Err(with_note(
                        error,
                        &format!("after {delivered} event(s) of the stream: not retried"),
                    ));
                }
                Outcome::Fail(e) => {
                    self.stats.failed.fetch_add(1, Ordering::Relaxed);
                    return Err(e);
                }
                Outcome::Retry { error, wait } => (error, wait),
            };
            self.wait_to_retry(attempt, error, wait).await?;
        }
    }

    async fn permit(&self) -> Result<tokio::sync::SemaphorePermit<'_>, HttpError> {
        self.permits
            .acquire()
            .await
            .map_err(|_| HttpError::Setup("the client was shut down".into()))
    }

    /// After a retryable failure of try `attempt`: waits as the policy says, or gives the
    /// error back when no try is left or the server asks for too long a wait.
    async fn wait_to_retry(
        &self,
        attempt: u32,
        error: HttpError,
        wait: Option<Duration>,
    ) -> Result<(), HttpError> {
        if attempt >= self.policy.max_attempts.max(1) {
            self.stats.failed.fetch_add(1, Ordering::Relaxed);
            return Err(error);
        }
        let wait = match wait {
            Some(w) if w > self.policy.max_retry_after => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                return Err(with_note(
                    error,
                    &format!(
                        "the server asked to wait {:.0} s, more than the {:.0} s allowed",
                        w.as_secs_f64(),
                        self.policy.max_retry_after.as_secs_f64()
                    ),
                ));
            }
            Some(w) => w,
            None => backoff(&self.policy, attempt),
        };
        self.stats.retries.fetch_add(1, Ordering::Relaxed);
        tracing::warn!("{error}; retrying in {:.1} s", wait.as_secs_f64());
        tokio::time::sleep(wait).await;
        Ok(())
    }

    /// Sends one try: the response, or what to do about its failure.
    async fn send<T>(
        &self,
        url: &str,
        headers: &[(&str, &str)],
        payload: &[u8],
        attempt: u32,
    ) -> Result<reqwest::Response, Outcome<T>> {
        let mut request = self
            .http
            .post(url)
            .header("content-type", "application/json")
            .body(payload.to_vec());
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        match request.send().await {
            Ok(r) => Ok(r),
            Err(e) if e.is_builder() => {
                Err(Outcome::Fail(transport(url, attempt, error_chain(&e))))
            }
            Err(e) => Err(Outcome::Retry {
                error: transport(url, attempt, error_chain(&e)),
                wait: None,
            }),
        }
    }

    async fn try_events(
        &self,
        url: &str,
        headers: &[(&str, &str)],
        payload: &[u8],
        attempt: u32,
        on_event: &mut (dyn FnMut(&Event) + Send),
    ) -> Outcome<()> {
        let mut response = match self.send(url, headers, payload, attempt).await {
            Ok(r) => r,
            Err(outcome) => return outcome,
        };
        let status = response.status().as_u16();
        let is_stream = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
        if !(200..300).contains(&status) || !is_stream {
            let wait = retry_after(response.headers(), SystemTime::now());
            let body = match read_body(response, url, attempt).await {
                Ok(b) => b,
                Err(outcome) => return outcome,
            };
            let bytes = body.as_ref();
            return match status_outcome(url, status, bytes, attempt, wait) {
                Some(o) => o,
                None => {
                    on_event(&Event {
                        event: "json".into(),
                        data: String::from_utf8_lossy(bytes).into_owned(),
                    });
                    Outcome::Done(())
                }
            };
        }
        let mut parser = EventParser::default();
        loop {
            match response.chunk().await {
                Ok(Some(bytes)) => parser.feed(&bytes, on_event),
                // An event not followed by its blank line is dropped, as the standard
                // says (it may be cut short).
                Ok(None) => return Outcome::Done(()),
                Err(e) => {
                    return Outcome::Retry {
                        error: transport(
                            url,
                            attempt,
                            format!("the stream was cut off: {}", error_chain(&e)),
                        ),
                        wait: None,
                    };
                }
            }
        }
    }

    async fn try_once<T: DeserializeOwned>(
        &self,
        url: &str,
        headers: &[(&str, &str)],
        payload: &[u8],
        attempt: u32,
    ) -> Outcome<T> {
        let response = match self.send(url, headers, payload, attempt).await {
            Ok(r) => r,
            Err(outcome) => return outcome,
        };
        let status = response.status().as_u16();
        let wait = retry_after(response.headers(), SystemTime::now());
        let body = match read_body(response, url, attempt).await {
            Ok(b) => b,
            Err(outcome) => return outcome,
        };
        let bytes = body.as_ref();
        if let Some(o) = status_outcome(url, status, bytes, attempt, wait) {
            return o;
        }
        match serde_json::from_slice::<T>(bytes) {
            Ok(body) => Outcome::Done(body),
            Err(e) => Outcome::Retry {
                error: transport(
                    url,
                    attempt,
                    format!(
                        "the answer is not the JSON expected ({e}): {}",
                        excerpt(bytes)
                    ),
                ),
                wait: None,
            },
        }
    }
}

/// The whole body; a body cut off part way is worth another try.
async fn read_body<T>(
    response: reqwest::Response,
    url: &str,
    attempt: u32,
) -> Result<impl AsRef<[u8]> + use<T>, Outcome<T>> {
    response.bytes().await.map_err(|e| Outcome::Retry {
        error: transport(
            url,
            attempt,
            format!("the answer was cut off: {}", error_chain(&e)),
        ),
        wait: None,
    })
}

fn transport(url: &str, attempt: u32, message: String) -> HttpError {
    HttpError::Transport {
        url: url.to_string(),
        message,
        attempts: attempt,
    }
}

/// What an error status comes to (`None` for a 2xx).
fn status_outcome<T>(
    url: &str,
    status: u16,
    bytes: &[u8],
    attempt: u32,
    wait: Option<Duration>,
) -> Option<Outcome<T>> {
    if (200..300).contains(&status) {
        return None;
    }
    let error = HttpError::Status {
        url: url.to_string(),
        status,
        message: excerpt(bytes),
        attempts: attempt,
    };
    Some(if retryable(status) {
        Outcome::Retry { error, wait }
    } else {
        Outcome::Fail(error)
    })
}

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Its `event:` name (`message` when it has none; `json` for a whole non-stream answer).
    pub event: String,
    /// Its `data:` lines, joined by newlines.
    pub data: String,
}

/// The event-stream format's parser (the HTML standard's "interpreting an event stream"),
/// fed chunk by chunk as they arrive. Written here: it is some thirty lines, and the crates
/// that do it (eventsource-stream and the like) want reqwest's `stream` feature and a
/// `Stream` adapter for the same loop. `id:` and `retry:` are ignored (no reconnection: a
/// reply is not resumable).
#[derive(Default)]
struct EventParser {
    /// Bytes of a line not yet ended (a chunk can end anywhere, mid-character too).
    line: Vec<u8>,
    event: String,
    data: Vec<String>,
    /// The last byte was a `\r` (a `\n` right after it ends no second line).
    after_cr: bool,
}

impl EventParser {
    fn feed(&mut self, bytes: &[u8], on_event: &mut (dyn FnMut(&Event) + Send)) {
        for &b in bytes {
            match b {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    let line = std::mem::take(&mut self.line);
                    self.line_ended(&String::from_utf8_lossy(&line), on_event);
                }
                _ => {
                    self.after_cr = false;
                    self.line.push(b);
                }
            }
        }
    }

    fn line_ended(&mut self, line: &str, on_event: &mut (dyn FnMut(&Event) + Send)) {
        if line.is_empty() {
            if !self.data.is_empty() {
                let event = Event {
                    event: match std::mem::take(&mut self.event) {
                        e if e.is_empty() => "message".into(),
                        e => e,
                    },
                    data: std::mem::take(&mut self.data).join("\n"),
                };
                on_event(&event);
            }
            self.event.clear();
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => self.event = value.to_string(),
            "data" => self.data.push(value.to_string()),
            _ => {}
        }
    }
}

/// Whether an error status is worth another try.
pub fn retryable(status: u16) -> bool {
    matches!(status, 408 | 409 | 425 | 429) || (500..600).contains(&status)
}

/// The wait a server asks for: `retry-after-ms` (OpenAI), then `retry-after` as seconds
/// (fractions allowed) or an HTTP date.
pub fn retry_after(headers: &reqwest::header::HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = text("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Exponential backoff with full jitter: a random wait in [d/2, d] where
/// d = base · 2^(attempt−1), capped at `max_delay`.
fn backoff(policy: &RetryPolicy, attempt: u32) -> Duration {
    let exp = policy
        .base_delay
        .saturating_mul(1u32 << (attempt - 1).min(16))
        .min(policy.max_delay);
    // The standard library's per-process random hasher keys are enough for jitter; no
    // random-number crate for one number.
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(attempt);
    let unit = (h.finish() >> 11) as f64 / (1u64 << 53) as f64;
    exp.mul_f64(0.5 + 0.5 * unit)
}

/// The start of a body, for error messages.
fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    if text.is_empty() {
        return "(empty body)".into();
    }
    let mut end = text.len().min(300);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let more = if end < text.len() { "…" } else { "" };
    format!("{}{more}", &text[..end])
}

fn with_note(error: HttpError, note: &str) -> HttpError {
    match error {
        HttpError::Status {
            url,
            status,
            message,
            attempts,
        } => HttpError::Status {
            url,
            status,
            message: format!("{message} ({note})"),
            attempts,
        },
        HttpError::Transport {
            url,
            message,
            attempts,
        } => HttpError::Transport {
            url,
            message: format!("{message} ({note})"),
            attempts,
        },
        other => other,
    }
}

/// An error and its causes on one line ("error sending request: connection refused").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

#[cfg(all(test, feature = "fake"))]
mod tests;
