use super::fake::{FakeServer, Reply};
use super::*;
use serde_json::json;

fn quick() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 4,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(20),
        max_retry_after: Duration::from_secs(2),
        timeout: Duration::from_millis(500),
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn retries_429_and_5xx_then_succeeds_and_honours_retry_after() {
    let server = FakeServer::start(|_, n| match n {
        0 => Reply::raw(429, "slow down").header("retry-after", "0.3"),
        1 => Reply::raw(503, "overloaded"),
        _ => Reply::json(json!({"ok": true})),
    })
    .expect("server");
    let client = Client::new(quick(), 2).expect("client");
    let start = std::time::Instant::now();
    let reply = rt()
        .block_on(client.post_json::<serde_json::Value>(
            &format!("{}/x", server.url()),
            &[("authorization", "Bearer k")],
            &json!({"a": 1}),
        ))
        .expect("third try succeeds");
    assert_eq!(reply.attempts, 3);
    assert_eq!(reply.body, json!({"ok": true}));
    assert_eq!(server.calls(), 3);
    // The 429 asked for 0.3 s: the retry did not come sooner.
    assert!(
        start.elapsed() >= Duration::from_millis(300),
        "{:?}",
        start.elapsed()
    );
    let requests = server.requests();
    assert_eq!(requests[2].header("authorization"), Some("Bearer k"));
    assert_eq!(requests[2].json(), json!({"a": 1}));
    assert_eq!(client.stats().retries.load(Ordering::Relaxed), 2);
}

#[test]
fn client_errors_fail_at_once_with_the_servers_message() {
    let server = FakeServer::start(|_, _| Reply::raw(401, "{\"error\": \"invalid api key\"}"))
        .expect("server");
    let client = Client::new(quick(), 1).expect("client");
    let e = rt()
        .block_on(client.post_json::<serde_json::Value>(server.url(), &[], &json!({})))
        .expect_err("401 fails");
    assert_eq!(server.calls(), 1, "a 401 is not retried");
    let text = e.to_string();
    assert!(
        text.contains("401") && text.contains("invalid api key"),
        "{text}"
    );
}

#[test]
fn gives_up_after_max_attempts_on_persistent_errors() {
    let server = FakeServer::start(|_, _| Reply::raw(500, "boom")).expect("server");
    let client = Client::new(quick(), 1).expect("client");
    let e = rt()
        .block_on(client.post_json::<serde_json::Value>(server.url(), &[], &json!({})))
        .expect_err("always 500");
    assert_eq!(server.calls(), 4);
    assert!(
        matches!(
            e,
            HttpError::Status {
                status: 500,
                attempts: 4,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn timeouts_cut_connections_and_malformed_json_are_retried() {
    let server = FakeServer::start(|_, n| match n {
        0 => Reply::json(json!({"late": true})).delay(Duration::from_secs(2)),
        1 => Reply::cut_off(),
        2 => Reply::raw(200, "{\"ok\": tru"),
        _ => Reply::json(json!({"ok": true})),
    })
    .expect("server");
    let client = Client::new(quick(), 1).expect("client");
    let r = rt()
        .block_on(client.post_json::<serde_json::Value>(server.url(), &[], &json!({})))
        .expect("fourth try");
    assert_eq!(r.attempts, 4);
    assert_eq!(r.body, json!({"ok": true}));
}

#[test]
fn a_retry_after_beyond_the_cap_fails_instead_of_waiting() {
    let server = FakeServer::start(|_, _| Reply::raw(429, "quota").header("retry-after", "3600"))
        .expect("server");
    let client = Client::new(quick(), 1).expect("client");
    let e = rt()
        .block_on(client.post_json::<serde_json::Value>(server.url(), &[], &json!({})))
        .expect_err("too long a wait");
    assert_eq!(server.calls(), 1);
    assert!(e.to_string().contains("asked to wait 3600 s"), "{e}");
}

#[test]
fn concurrency_is_bounded() {
    let server = FakeServer::start(|_, _| Reply::json(json!({})).delay(Duration::from_millis(100)))
        .expect("server");
    let client = Client::new(quick(), 3).expect("client");
    let url = server.url().to_string();
    rt().block_on(async {
        let body = json!({});
        let calls = (0..9).map(|_| client.post_json::<serde_json::Value>(&url, &[], &body));
        for r in futures_util::future::join_all(calls).await {
            r.expect("ok");
        }
    });
    assert_eq!(server.calls(), 9);
    assert_eq!(server.max_in_flight(), 3, "three permits, nine requests");
}

#[test]
fn retry_after_forms() {
    use reqwest::header::{HeaderMap, HeaderValue};
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
    let mut h = HeaderMap::new();
    assert_eq!(retry_after(&h, now), None);
    h.insert("retry-after", HeaderValue::from_static("7"));
    assert_eq!(retry_after(&h, now), Some(Duration::from_secs(7)));
    h.insert(
        "retry-after",
        HeaderValue::from_static("Sun, 06 Nov 1994 08:50:07 GMT"),
    );
    assert_eq!(retry_after(&h, now), Some(Duration::from_secs(30)));
    h.insert("retry-after", HeaderValue::from_static("soon"));
    assert_eq!(retry_after(&h, now), None);
    h.insert("retry-after-ms", HeaderValue::from_static("250"));
    assert_eq!(retry_after(&h, now), Some(Duration::from_millis(250)));
}

#[test]
fn backoff_grows_and_is_capped() {
    let p = RetryPolicy {
        base_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(1000),
        ..RetryPolicy::default()
    };
    for attempt in 1..10 {
        let d = backoff(&p, attempt);
        let full =
            Duration::from_millis(100 * (1 << (attempt - 1))).min(Duration::from_millis(1000));
        assert!(
            d >= full / 2 && d <= full,
            "attempt {attempt}: {d:?} vs {full:?}"
        );
    }
}

/// reqwest is built without a TLS crypto provider and `Client::new` installs ring: an https
/// request then goes through rustls (here to a plain-HTTP server, so its handshake fails)
/// and comes back as an error, where a missing provider would panic.
#[test]
fn https_requests_go_through_rustls_on_ring() {
    let server = FakeServer::start(|_, _| Reply::raw(200, "{}")).expect("server");
    let client = Client::new(quick(), 1).expect("client");
    assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    let url = server.url().replacen("http://", "https://", 1);
    assert!(url.starts_with("https://"), "{url}");
    let e = rt()
        .block_on(client.post_json::<serde_json::Value>(&url, &[], &json!({})))
        .expect_err("a plain-HTTP server cannot complete a TLS handshake");
    assert_eq!(server.calls(), 0, "no HTTP request got through: {e}");
    assert!(!e.to_string().is_empty());
}

#[test]
fn event_streams_are_parsed_across_chunks_and_line_endings() {
    let mut seen = Vec::new();
    let mut parser = EventParser::default();
    let stream = ": a comment\r\nevent: delta\r\ndata: {\"text\": \"Вы\"}\r\n\r\ndata: one\ndata: two\n\nevent: end\rdata:x\r\r";
    // One byte at a time: a frame and a character split anywhere.
    for b in stream.as_bytes() {
        parser.feed(std::slice::from_ref(b), &mut |e| seen.push(e.clone()));
    }
    let names: Vec<(&str, &str)> = seen
        .iter()
        .map(|e| (e.event.as_str(), e.data.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("delta", "{\"text\": \"Вы\"}"),
            ("message", "one\ntwo"),
            ("end", "x")
        ]
    );
}

#[test]
fn post_events_retries_until_the_first_event_and_never_after() {
    let events = [
        ("start", json!({"n": 0})),
        ("delta", json!({"text": "Привет"})),
    ];
    let server = FakeServer::start(move |req, n| match (req.path.as_str(), n) {
        ("/ok", 0) => Reply::raw(503, "overloaded"),
        ("/ok", _) => Reply::events(&events),
        ("/cut", _) => Reply::events(&events).then_cut(),
        _ => Reply::json(json!({"whole": true})),
    })
    .expect("server");
    let client = Client::new(quick(), 2).expect("client");
    let collect = |path: &str| {
        let mut got = Vec::new();
        let r = rt().block_on(client.post_events(
            &format!("{}{path}", server.url()),
            &[],
            &json!({"stream": true}),
            &mut |e| got.push((e.event.clone(), e.data.clone())),
        ));
        (r, got)
    };
    let (r, got) = collect("/ok");
    assert_eq!(r.expect("second try streams"), 2);
    assert_eq!(got.len(), 2);
    assert_eq!(
        got[1],
        ("delta".into(), json!({"text": "Привет"}).to_string())
    );
    let before = server.calls();
    let (r, got) = collect("/cut");
    let e = r.expect_err("cut off").to_string();
    assert!(e.contains("not retried"), "{e}");
    assert_eq!(got.len(), 2, "what arrived was handed on");
    assert_eq!(server.calls(), before + 1, "no second try after events");
    // A server that ignores "stream": the whole answer as one `json` event.
    let (r, got) = collect("/plain");
    assert_eq!(r.expect("plain answer"), 1);
    assert_eq!(got, [("json".into(), json!({"whole": true}).to_string())]);
}
