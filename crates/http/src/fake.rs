//! A scriptable local HTTP server for tests of hosted providers (feature `fake`).
//!
//! The test gives a function from the request (and its number, from 0) to a [`Reply`]; the
//! server records every request, and can answer late ([`Reply::delay`]), with any status and
//! headers (`retry-after`), with malformed JSON, or cut the connection mid-body
//! ([`Reply::cut_off`]). It runs on its own thread, so synchronous and asynchronous tests can
//! use it alike, and stops when dropped.

use axum::body::{Body, Bytes};
use futures_util::StreamExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A request the server received.
#[derive(Debug, Clone)]
pub struct Request {
    /// `POST`, `GET`, ...
    pub method: String,
    /// The path and query (`/v1/embeddings`).
    pub path: String,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The raw body.
    pub body: Vec<u8>,
}

impl Request {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// What the server answers.
#[derive(Debug, Clone)]
pub struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    delay: Duration,
    cut: bool,
    /// Send the body in pieces of this many bytes (a stream's chunks end anywhere).
    pieces: Option<usize>,
}

impl Reply {
    /// 200 with a JSON body.
    pub fn json(value: serde_json::Value) -> Self {
        Reply::raw(200, value.to_string()).header("content-type", "application/json")
    }

    /// Any status with a text body.
    pub fn raw(status: u16, body: impl Into<String>) -> Self {
        Reply {
            status,
            headers: Vec::new(),
            body: body.into().into_bytes(),
            delay: Duration::ZERO,
            cut: false,
            pieces: None,
        }
    }

    /// 200 with server-sent events (`text/event-stream`): each `(name, data)` as an
    /// `event:` line and a `data:` line, sent in pieces of 7 bytes, so that frames (and
    /// characters) arrive split across chunks as they can from a real server.
    pub fn events(events: &[(&str, serde_json::Value)]) -> Self {
        let body: String = events
            .iter()
            .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
            .collect();
        Reply {
            pieces: Some(7),
            ..Reply::raw(200, body).header("content-type", "text/event-stream")
        }
    }

    /// The body sent, then the connection dropped (a stream cut off part way).
    pub fn then_cut(mut self) -> Self {
        self.cut = true;
        self
    }

    /// 200 with headers sent, then the connection dropped in the middle of the body.
    pub fn cut_off() -> Self {
        Reply {
            cut: true,
            ..Reply::raw(200, "{\"data\": [")
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// Answers only after `delay` (to trip client timeouts or to overlap requests).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

type Handler = dyn Fn(&Request, usize) -> Reply + Send + Sync;

struct Shared {
    handler: Box<Handler>,
    log: Mutex<Vec<Request>>,
    count: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

/// A running fake server on 127.0.0.1 (a free port).
pub struct FakeServer {
    url: String,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeServer {
    /// Starts a server that answers request number `n` (from 0) with `handler(request, n)`.
    pub fn start(
        handler: impl Fn(&Request, usize) -> Reply + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            handler: Box::new(handler),
            log: Mutex::new(Vec::new()),
            count: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let url = format!("http://{}", listener.local_addr()?);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = axum::Router::new()
            .fallback(serve)
            .with_state(shared.clone());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::spawn(move || {
            runtime.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await;
            });
        });
        Ok(FakeServer {
            url,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Request> {
        self.shared
            .log
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default()
    }

    /// How many requests arrived.
    pub fn calls(&self) -> usize {
        self.shared.count.load(Ordering::SeqCst)
    }

    /// The most requests that were being answered at the same time.
    pub fn max_in_flight(&self) -> usize {
        self.shared.max_in_flight.load(Ordering::SeqCst)
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // Graceful shutdown waits for open connections; a client's keep-alive pool could
        // hold one for long, so the thread is not joined.
        drop(self.thread.take());
    }
}

async fn serve(
    axum::extract::State(shared): axum::extract::State<Arc<Shared>>,
    request: axum::extract::Request,
) -> axum::response::Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .map(|b| b.to_vec())
        .unwrap_or_default();
    let recorded = Request {
        method: parts.method.to_string(),
        path: parts
            .uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        headers: parts
            .headers
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
            .collect(),
        body,
    };
    let n = shared.count.fetch_add(1, Ordering::SeqCst);
    if let Ok(mut log) = shared.log.lock() {
        log.push(recorded.clone());
    }
    let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    shared.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let reply = (shared.handler)(&recorded, n);
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    shared.in_flight.fetch_sub(1, Ordering::SeqCst);
    let mut builder = axum::http::Response::builder().status(reply.status);
    for (k, v) in &reply.headers {
        builder = builder.header(k, v);
    }
    let body = if reply.cut || reply.pieces.is_some() {
        let size = reply.pieces.unwrap_or(usize::MAX).max(1);
        let chunks: Vec<Result<Bytes, std::io::Error>> = reply
            .body
            .chunks(size)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        let sent = futures_util::stream::iter(chunks);
        if reply.cut {
            // The cut comes a moment after the body, so that what was sent reaches the
            // client first (an error polled at once can abort the response before its
            // head is out).
            let cut = futures_util::stream::once(async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Err(std::io::Error::other("connection cut by the fake server"))
            });
            Body::from_stream(sent.chain(cut))
        } else {
            Body::from_stream(sent)
        }
    } else {
        Body::from(reply.body)
    };
    builder
        .body(body)
        .unwrap_or_else(|_| axum::http::Response::new(Body::from("bad reply in test")))
}
