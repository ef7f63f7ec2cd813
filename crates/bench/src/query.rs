//! `situate-bench query`: the search every front end makes (`SearchRequest::check` →
//! `Engine::query`; then, timed apart, the `SearchResponse` written as JSON, as the service
//! and the Python package send it), one query at a time on an index already built: the
//! Rust side of the Python package's overhead (bench/python.sh).

use anyhow::Result;
use situate_engine::{Access, Engine, SearchRequest, Settings};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

/// Runs every query of `queries` `repeat` times (the first run warms up and is not
/// counted) and prints p50, p99 and queries per second; then, with `threads` above 1, the
/// queries once more from that many threads at once.
pub fn query(
    index: &Path,
    queries: &Path,
    k: usize,
    mode: Option<&str>,
    repeat: usize,
    threads: usize,
) -> Result<ExitCode> {
    let qs = crate::load::read_queries(queries)?;
    let settings = Settings::default();
    let e = Engine::open(index, Access::Read)?;
    // Per query: the search alone (check + query), and with its answer written as JSON.
    let (mut alone, mut with_json) = (Vec::new(), Vec::new());
    let mut counted = 0.0;
    let mut answer_bytes = 0usize;
    for run in 0..repeat.max(2) {
        let started = Instant::now();
        for q in &qs {
            let t = Instant::now();
            let mut req = SearchRequest::new(q.as_str());
            req.settings.k = Some(k);
            req.settings.mode = mode.map(str::to_string);
            let checked = req.check(&settings)?;
            let answer = e.query(&checked.query, &checked.plan, &checked.filter)?;
            let searched = t.elapsed();
            let json = serde_json::to_string(&answer)?;
            if run > 0 {
                alone.push(searched.as_secs_f64() * 1000.0);
                with_json.push(t.elapsed().as_secs_f64() * 1000.0);
                answer_bytes += json.len();
            }
            std::hint::black_box(json);
        }
        if run > 0 {
            counted += started.elapsed().as_secs_f64();
        }
    }
    alone.sort_by(f64::total_cmp);
    with_json.sort_by(f64::total_cmp);
    let pct = |v: &[f64], p: f64| v[((p * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)];
    // The same queries from `threads` threads at once, each with an engine of its own (as
    // the service's readers and the Python package's threads have).
    let mut parallel = String::new();
    if threads > 1 {
        let engines = (0..threads)
            .map(|_| Engine::open(index, Access::Read))
            .collect::<situate_engine::Result<Vec<_>>>()?;
        let started = Instant::now();
        std::thread::scope(|s| -> Result<()> {
            let handles: Vec<_> = engines
                .into_iter()
                .enumerate()
                .map(|(t, e)| {
                    let (qs, settings) = (&qs, &settings);
                    s.spawn(move || -> Result<()> {
                        for q in qs.iter().skip(t).step_by(threads) {
                            let mut req = SearchRequest::new(q.as_str());
                            req.settings.k = Some(k);
                            req.settings.mode = mode.map(str::to_string);
                            let c = req.check(settings)?;
                            std::hint::black_box(serde_json::to_string(
                                &e.query(&c.query, &c.plan, &c.filter)?,
                            )?);
                        }
                        Ok(())
                    })
                })
                .collect();
            for h in handles {
                h.join()
                    .map_err(|_| anyhow::anyhow!("a search thread panicked"))??;
            }
            Ok(())
        })?;
        let qps = qs.len() as f64 / started.elapsed().as_secs_f64();
        parallel = format!(
            "; {threads} threads: {qps:.1} queries/s = {:.2}x one thread",
            qps / (alone.len() as f64 / counted)
        );
    }
    outln!(
        "engine query (situate-bench, one thread): {} queries, k {k}, mode {}: p50 {:.3} ms, p99 {:.3} ms, {:.1} queries/s; with the answer as JSON ({:.0} bytes): p50 {:.3} ms{parallel}",
        alone.len(),
        mode.unwrap_or("default"),
        pct(&alone, 0.5),
        pct(&alone, 0.99),
        alone.len() as f64 / counted,
        answer_bytes as f64 / alone.len() as f64,
        pct(&with_json, 0.5),
    );
    Ok(ExitCode::SUCCESS)
}
