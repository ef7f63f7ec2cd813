//! Hosted model specs, `PROVIDER:MODEL[?option=value&...]`, parsed the same way for every
//! kind of hosted model (embedders, LLMs): the provider, the model, where the API is, the
//! key, and the options every client has (`base_url`, `key_env`, `concurrency`, `retries`,
//! `timeout`). Options of one kind of model are handed to the caller.

use crate::RetryPolicy;
use std::time::Duration;

/// Where a provider's API lives and how it is authenticated.
#[derive(Debug, Clone, Copy)]
pub struct Endpoint {
    /// The provider's name in specs (`openai`).
    pub name: &'static str,
    /// Its public API root.
    pub public: &'static str,
    /// Environment variables that may hold its key, in order (none: no key needed).
    pub key_vars: &'static [&'static str],
    /// The environment variable that overrides its API root.
    pub base_var: &'static str,
}

/// OpenAI's API (embeddings and chat).
pub const OPENAI: Endpoint = Endpoint {
    name: "openai",
    public: "https://api.openai.com/v1",
    key_vars: &["OPENAI_API_KEY"],
    base_var: "OPENAI_BASE_URL",
};

/// A local Ollama server's OpenAI-compatible API (embeddings and chat; no key).
pub const OLLAMA: Endpoint = Endpoint {
    name: "ollama",
    public: "http://localhost:11434/v1",
    key_vars: &[],
    base_var: "OLLAMA_BASE_URL",
};

/// Voyage AI's API (embeddings and rerank).
pub const VOYAGE: Endpoint = Endpoint {
    name: "voyage",
    public: "https://api.voyageai.com/v1",
    key_vars: &["VOYAGE_API_KEY"],
    base_var: "VOYAGE_BASE_URL",
};

/// One provider of a hosted service: where its API is and the protocol it speaks (`P` is
/// the caller's own protocol type: embeddings, chat, rerank). Every kind of hosted model
/// keeps its providers in one table of these.
#[derive(Debug, Clone, Copy)]
pub struct Provider<P: 'static> {
    /// Where its API lives and how it is authenticated.
    pub endpoint: Endpoint,
    /// The request and answer shapes.
    pub protocol: P,
}

/// Whether `spec` names one of `providers` (`NAME:MODEL...`).
pub fn is_hosted<P>(providers: &[Provider<P>], spec: &str) -> bool {
    spec.split_once(':')
        .is_some_and(|(name, _)| providers.iter().any(|p| p.endpoint.name == name))
}

/// A parsed spec.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Index of the provider in the providers given.
    pub endpoint: usize,
    /// The model.
    pub model: String,
    /// The API root, without a trailing slash.
    pub base_url: String,
    /// The key, if any (never printed).
    pub key: Option<String>,
    /// Requests in flight.
    pub concurrency: usize,
    /// Retry policy.
    pub policy: RetryPolicy,
}

/// `v` as a number from `lo` to `hi`, or the error naming option `k`.
pub fn number(k: &str, v: &str, lo: u64, hi: u64) -> Result<u64, String> {
    v.parse::<u64>()
        .ok()
        .filter(|n| (lo..=hi).contains(n))
        .ok_or_else(|| format!("{k}={v}: expected a number from {lo} to {hi}"))
}

/// Parses `spec` against `providers`, reading variables through `env`. `extra(key, value)`
/// takes the options of the caller's kind (`Ok(true)` when it knows the key); `options`
/// lists every option for the error on an unknown one. A key is required for a public API;
/// a server at another `base_url` gets one only if it is set.
pub fn parse<P>(
    spec: &str,
    providers: &[Provider<P>],
    env: &dyn Fn(&str) -> Option<String>,
    concurrency: usize,
    extra: &mut dyn FnMut(&str, &str) -> Result<bool, String>,
    options: &str,
) -> Result<Spec, String> {
    let (name, rest) = spec
        .split_once(':')
        .ok_or_else(|| "expected PROVIDER:MODEL".to_string())?;
    let endpoint = providers
        .iter()
        .position(|p| p.endpoint.name == name)
        .ok_or_else(|| format!("unknown provider {name:?}"))?;
    let e = providers[endpoint].endpoint;
    let (model, query) = rest.split_once('?').unwrap_or((rest, ""));
    if model.is_empty() || model.contains(char::is_whitespace) {
        return Err("the model name is missing or has spaces".into());
    }
    let mut base_url = env(e.base_var).filter(|v| !v.trim().is_empty());
    let mut key_env: Option<String> = None;
    let mut concurrency = concurrency;
    let mut policy = RetryPolicy::default();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("option {pair:?} needs a value (key=value)"))?;
        match k {
            "base_url" => base_url = Some(v.to_string()),
            "key_env" => key_env = Some(v.to_string()),
            "concurrency" => concurrency = number(k, v, 1, 64)? as usize,
            "retries" => policy.max_attempts = number(k, v, 1, 20)? as u32,
            "timeout" => policy.timeout = Duration::from_secs(number(k, v, 1, 3600)?),
            _ => {
                if !extra(k, v)? {
                    return Err(format!("unknown option {k:?} ({options})"));
                }
            }
        }
    }
    let custom_base = base_url.is_some();
    let base_url = base_url
        .unwrap_or_else(|| e.public.to_string())
        .trim_end_matches('/')
        .to_string();
    if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
        return Err(format!(
            "base_url {base_url:?} must start with http:// or https://"
        ));
    }
    let key = match &key_env {
        Some(var) => Some(
            env(var)
                .filter(|k| !k.is_empty())
                .ok_or_else(|| format!("the key variable {var} (key_env) is not set"))?,
        ),
        None => e
            .key_vars
            .iter()
            .find_map(|v| env(v))
            .filter(|k| !k.is_empty()),
    };
    if key.is_none() && !custom_base && !e.key_vars.is_empty() {
        return Err(format!(
            "no API key: set {} (or give base_url= for a server that needs none)",
            e.key_vars.join(" or ")
        ));
    }
    Ok(Spec {
        endpoint,
        model: model.to_string(),
        base_url,
        key,
        concurrency,
        policy,
    })
}
