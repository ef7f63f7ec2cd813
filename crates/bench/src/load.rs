//! `situate-bench load`: many searches at once against a running `situate serve`, over the
//! JSON API (`POST /v1/search`) or over MCP (`tools/call search` on `/mcp`, one session per
//! worker): requests per second, errors, latency percentiles.

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// What a load run measured.
pub struct LoadReport {
    pub requests: usize,
    pub errors: usize,
    pub first_error: Option<String>,
    pub seconds: f64,
    pub latencies_ms: Vec<f64>,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

impl LoadReport {
    pub fn print(&self, what: &str) {
        let mut l = self.latencies_ms.clone();
        l.sort_by(f64::total_cmp);
        println!(
            "{what}: {} requests, {} errors, {:.1} s, {:.0} requests/s; latency p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            self.requests,
            self.errors,
            self.seconds,
            self.requests as f64 / self.seconds,
            percentile(&l, 50.0),
            percentile(&l, 90.0),
            percentile(&l, 99.0),
            l.last().copied().unwrap_or(f64::NAN),
        );
        if let Some(e) = &self.first_error {
            println!("  first error: {e}");
        }
    }
}

/// Queries from a BEIR `queries.jsonl` (the `text` field) or one per line.
pub fn read_queries(path: &std::path::Path) -> Result<Vec<String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let qs: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match serde_json::from_str::<Value>(l) {
            Ok(v) => v["text"].as_str().unwrap_or(l).to_string(),
            Err(_) => l.to_string(),
        })
        .collect();
    if qs.is_empty() {
        bail!("no queries in {}", path.display());
    }
    Ok(qs)
}

/// The text of an MCP answer: a JSON body, or the `data:` of an SSE stream.
fn mcp_message(content_type: &str, body: &str) -> Option<Value> {
    if content_type.starts_with("text/event-stream") {
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|v| v.get("id").is_some())
    } else {
        serde_json::from_str(body).ok()
    }
}

// Long: the workers, their timings and the summary of one load run, kept together so the
// measurement is read in one place.
/// Runs `requests` searches with `concurrency` workers against `url` (`http://HOST:PORT`).
pub async fn run(
    url: &str,
    queries: Vec<String>,
    requests: usize,
    concurrency: usize,
    k: usize,
    mcp: bool,
) -> Result<LoadReport> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .timeout(Duration::from_secs(60))
        .build()?;
    let queries = Arc::new(queries);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    let urls: Vec<&str> = url
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .collect();
    if urls.is_empty() {
        bail!("no service URL");
    }
    for w in 0..concurrency {
        let (client, queries, next, url) = (
            client.clone(),
            Arc::clone(&queries),
            Arc::clone(&next),
            urls[w % urls.len()].to_string(),
        );
        workers.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let (mut errors, mut first) = (0usize, None::<String>);
            // One MCP session per worker: initialize, then the calls.
            let session = if mcp {
                match mcp_session(&client, &url).await {
                    Ok(s) => Some(s),
                    Err(e) => return (lat, usize::MAX, Some(format!("{e:#}"))),
                }
            } else {
                None
            };
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= requests {
                    break;
                }
                let q = &queries[i % queries.len()];
                let t = Instant::now();
                let outcome = match &session {
                    None => client
                        .post(format!("{url}/v1/search"))
                        .json(&json!({"query": q, "k": k}))
                        .send()
                        .await
                        .map_err(|e| e.to_string())
                        .and_then(|r| {
                            if r.status().is_success() {
                                Ok(r)
                            } else {
                                Err(format!("status {}", r.status()))
                            }
                        }),
                    Some(sid) => client
                        .post(format!("{url}/mcp"))
                        .header("mcp-session-id", sid)
                        .header("accept", "application/json, text/event-stream")
                        .json(
                            &json!({"jsonrpc": "2.0", "id": i + 2, "method": "tools/call",
                            "params": {"name": "search", "arguments": {"query": q, "k": k}}}),
                        )
                        .send()
                        .await
                        .map_err(|e| e.to_string()),
                };
                let ok = match outcome {
                    Ok(r) => {
                        let ct = r
                            .headers()
                            .get("content-type")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_string();
                        match r.text().await {
                            Ok(body) if session.is_none() => serde_json::from_str::<Value>(&body)
                                .is_ok_and(|v| v["hits"].is_array())
                                .then_some(())
                                .ok_or_else(|| "not a search answer".to_string()),
                            Ok(body) => match mcp_message(&ct, &body) {
                                Some(v)
                                    if v["result"]["isError"] != true
                                        && v["result"]["content"].is_array() =>
                                {
                                    Ok(())
                                }
                                _ => Err(format!(
                                    "not a tool result: {}",
                                    &body[..body.len().min(200)]
                                )),
                            },
                            Err(e) => Err(e.to_string()),
                        }
                    }
                    Err(e) => Err(e),
                };
                match ok {
                    Ok(()) => lat.push(t.elapsed().as_secs_f64() * 1000.0),
                    Err(e) => {
                        errors += 1;
                        first.get_or_insert(e);
                    }
                }
            }
            (lat, errors, first)
        }));
    }
    let mut report = LoadReport {
        requests,
        errors: 0,
        first_error: None,
        seconds: 0.0,
        latencies_ms: Vec::new(),
    };
    for w in workers {
        let (lat, errors, first) = w.await?;
        if errors == usize::MAX {
            bail!(
                "an MCP session could not start: {}",
                first.unwrap_or_default()
            );
        }
        report.latencies_ms.extend(lat);
        report.errors += errors;
        if report.first_error.is_none() {
            report.first_error = first;
        }
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Opens an MCP session over Streamable HTTP; returns its id.
async fn mcp_session(client: &reqwest::Client, url: &str) -> Result<String> {
    let r = client
        .post(format!("{url}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "situate-bench", "version": "0"}}}),
        )
        .send()
        .await?;
    let sid = r
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(String::from)
        .context("no mcp-session-id in the answer to initialize")?;
    let _ = r.text().await?;
    client
        .post(format!("{url}/mcp"))
        .header("mcp-session-id", &sid)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .send()
        .await?;
    Ok(sid)
}
