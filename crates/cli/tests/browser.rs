//! The web page in a real headless browser: Debian's Chromium driven through chromedriver
//! (WebDriver, with `fantoccini`). Search, open a card, accept its context, watch an ingest
//! job finish, and a read-only key that sees no write control. A screenshot of each page
//! goes to `target/tmp/ui-screenshots/` for a person to look at.

use crate::serve::Server;
use crate::*;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// chromedriver on a free loopback port, killed when dropped.
struct Driver {
    child: Child,
    url: String,
    _profile: tempfile::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn driver() -> Driver {
    let bin =
        std::env::var("SITUATE_CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".into());
    assert!(
        Path::new(&bin).exists(),
        "{bin} is missing: the browser tests need Debian's chromium and chromium-driver (.ci/run installs them)"
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = std::process::Command::new(bin)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let url = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "chromedriver did not listen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Driver {
        child,
        url,
        _profile: tempfile::tempdir().expect("profile"),
    }
}

async fn browser(d: &Driver) -> Client {
    let profile = d._profile.path().display().to_string();
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": std::env::var("SITUATE_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()),
            "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                     "--disable-background-networking", "--disable-component-update",
                     "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                     "--window-size=1280,1000", format!("--user-data-dir={profile}")],
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&d.url)
        .await
        .expect("a browser session")
}

async fn shot(c: &Client, name: &str) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui-screenshots");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let png = c.screenshot().await.expect("screenshot");
    std::fs::write(dir.join(format!("{name}.png")), png).expect("write");
}

async fn text(c: &Client, css: &str) -> String {
    c.find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .text()
        .await
        .expect("text")
}

/// Waits until `css` holds `want` (the page's script updates it).
async fn wait_text(c: &Client, css: &str, want: &str) {
    wait_for(
        c,
        css,
        |t| t.contains(want),
        &format!("never showed {want:?}"),
    )
    .await;
}

/// Waits until the element at `css` shows a text other than `old`: the page has moved on
/// (a form's post and its redirect are over), not merely still showing the same heading.
async fn wait_changed(c: &Client, css: &str, old: &str) {
    wait_for(c, css, |t| t != old, &format!("still shows {old:?}")).await;
}

/// Polls the element at `css` until its text passes `ok`, failing after a minute with
/// `failure` and the page's source.
async fn wait_for(c: &Client, css: &str, ok: impl Fn(&str) -> bool, failure: &str) {
    let started = Instant::now();
    loop {
        if let Ok(e) = c.find(Locator::Css(css)).await
            && e.text().await.is_ok_and(|t| ok(&t))
        {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{css} {failure}: {:?}",
            c.source().await.ok()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn a_person_searches_opens_a_card_accepts_its_context_and_watches_a_job() {
    let (tmp, index) = indexed_corpus("none");
    let more = tmp.path().join("more");
    std::fs::create_dir_all(&more).expect("mkdir");
    for i in 0..30 {
        std::fs::write(
            more.join(format!("n{i}.md")),
            format!("# Note {i}\n\nTide tables for harbour {i}."),
        )
        .expect("write");
    }
    // An evaluation report for the reports page.
    let evals = tmp.path().join("evals");
    run(
        situate(&index)
            .args(["eval", "--dataset"])
            .arg(fixtures().join("ranked"))
            .arg("--out")
            .arg(evals.join("ranked"))
            .args(["--config", "bm25+none"]),
        0,
    );
    let s = Server::start(&index, &["--evals", evals.to_str().expect("utf-8")], &[]);
    let d = driver();
    runtime().block_on(async {
        let c = browser(&d).await;
        // Search: the form, then each hit's context and original apart, with the legs.
        c.goto(&format!("{}/ui/search", s.url)).await.expect("open");
        let q = c
            .find(Locator::Css("input[name=q]"))
            .await
            .expect("query box");
        q.send_keys("how often to clean the Fresnel lens")
            .await
            .expect("type");
        c.find(Locator::Css("form.search button"))
            .await
            .expect("button")
            .click()
            .await
            .expect("search");
        wait_text(&c, "p.summary", "hits").await;
        let first = c.find(Locator::Css("li.hit")).await.expect("a hit");
        let context = first
            .find(Locator::Css(".context p"))
            .await
            .expect("context")
            .text()
            .await
            .expect("t");
        let original = first
            .find(Locator::Css(".original pre"))
            .await
            .expect("original")
            .text()
            .await
            .expect("t");
        assert!(context.contains("Maintenance"), "{context}");
        assert!(original.contains("Fresnel lens"), "{original}");
        assert!(text(&c, "li.hit .legs").await.contains("bm25 #"));
        shot(&c, "search").await;

        // The card: original | context | indexed text, then accept the context.
        first
            .find(Locator::Css("a.chunk"))
            .await
            .expect("link")
            .click()
            .await
            .expect("open card");
        wait_text(&c, "h1", "Card").await;
        assert!(
            text(&c, ".triple .indexed pre")
                .await
                .contains("Fresnel lens")
        );
        let before = text(&c, "span.status").await;
        assert_ne!(before, "verified");
        shot(&c, "card").await;
        c.find(Locator::Css("form.review button[value=accept]"))
            .await
            .expect("accept")
            .click()
            .await
            .expect("click");
        wait_text(&c, "span.status", "verified").await;
        assert!(text(&c, "table.provenance").await.contains("manual"));
        shot(&c, "card-accepted").await;

        // The review queue, by keyboard: select the first generated context, reject it.
        c.goto(&format!("{}/ui/review?status=generated", s.url))
            .await
            .expect("open");
        let first_id = text(&c, "li.item a.chunk").await;
        shot(&c, "review").await;
        c.find(Locator::Css("body"))
            .await
            .expect("body")
            .send_keys("r")
            .await
            .expect("key r");
        // The rejected context leaves the queue of generated ones once the post is over.
        wait_changed(&c, "li.item a.chunk", &first_id).await;
        let shown = json(situate(&index).args(["show", &first_id]), 0);
        assert_eq!(shown["context_status"], "rejected", "{shown:#}");

        // An ingest job from the page, followed live to its end.
        c.goto(&format!("{}/ui/jobs", s.url)).await.expect("open");
        let path = c
            .find(Locator::Css("form.ingest input[name=path]"))
            .await
            .expect("path box");
        path.send_keys(&more.display().to_string())
            .await
            .expect("type");
        c.find(Locator::Css("form.ingest button"))
            .await
            .expect("button")
            .click()
            .await
            .expect("start");
        // The review decisions above are jobs too, already succeeded on the page the form
        // was posted from: the new ingest's row (the newest, first) is known by its progress.
        wait_text(&c, "table.jobs tr[data-job] td.progress", "documents 30").await;
        wait_text(&c, "table.jobs tr[data-job] td.state", "succeeded").await;
        shot(&c, "jobs").await;

        // The evaluation reports, with the table and the plot.
        c.goto(&format!("{}/ui/evals", s.url)).await.expect("open");
        c.find(Locator::Css("ul.evals a"))
            .await
            .expect("a report")
            .click()
            .await
            .expect("open it");
        wait_text(&c, "pre.table", "bm25+none+none").await;
        // The plot is an <img> of /v1/evals/ranked/failure.svg: it has drawn when it has a width.
        let started = Instant::now();
        loop {
            let width = c
                .execute("const i = document.querySelector('img.plot'); return i.complete ? i.naturalWidth : 0", vec![])
                .await
                .expect("script");
            if width.as_u64().is_some_and(|w| w > 0) {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(20), "the plot never loaded");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        shot(&c, "evals").await;
        c.close().await.expect("close");
    });
}

#[test]
fn a_read_only_key_sees_the_pages_without_write_controls() {
    let (_tmp, index) = indexed_corpus("none");
    let read = "read-key-for-the-page-01";
    let s = Server::start(
        &index,
        &[],
        &[
            ("SITUATE_READ_KEYS", read),
            ("SITUATE_ADMIN_KEYS", "admin-key-for-the-page-01"),
        ],
    );
    let d = driver();
    runtime().block_on(async {
        let c = browser(&d).await;
        // No key: the login form.
        c.goto(&format!("{}/ui/search", s.url)).await.expect("open");
        wait_text(&c, "h1", "Sign in").await;
        let key = c
            .find(Locator::Css("input[name=key]"))
            .await
            .expect("key box");
        key.send_keys(read).await.expect("type");
        c.find(Locator::Css("form.login button"))
            .await
            .expect("button")
            .click()
            .await
            .expect("sign in");
        wait_text(&c, "nav .role", "read-only").await;
        c.goto(&format!("{}/ui/search?q=Fresnel+lens", s.url))
            .await
            .expect("search");
        wait_text(&c, "p.summary", "hits").await;
        let link = c.find(Locator::Css("li.hit a.chunk")).await.expect("hit");
        link.click().await.expect("open card");
        wait_text(&c, "h1", "Card").await;
        assert!(
            c.find(Locator::Css("form.review")).await.is_err(),
            "no review form for a read key"
        );
        c.goto(&format!("{}/ui/review?status=generated", s.url))
            .await
            .expect("open");
        assert!(c.find(Locator::Css("li.item")).await.is_ok());
        assert!(c.find(Locator::Css("form.review")).await.is_err());
        shot(&c, "review-read-only").await;
        c.goto(&format!("{}/ui/jobs", s.url)).await.expect("open");
        assert!(c.find(Locator::Css("form.ingest")).await.is_err());
        c.close().await.expect("close");
    });
}
