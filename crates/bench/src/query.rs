//! `situate-bench query`: the search every front end makes (`SearchRequest::check` →
//! `Engine::query`, the `SearchResponse` serialized as the service and the Python package
//! send it), one query at a time on an index already built: the Rust side of the Python
//! package's overhead (bench/python.sh).

use anyhow::{Result, bail};
use situate_engine::{Access, Engine, SearchRequest, Settings};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

/// Runs every query of `queries` `repeat` times (the first run warms up and is not
/// counted) and prints p50, p99 and queries per second.
pub fn query(
    index: &Path,
    queries: &Path,
    k: usize,
    mode: Option<&str>,
    repeat: usize,
) -> Result<ExitCode> {
    let qs: Vec<String> = situate_eval::read_questions(queries)?
        .into_iter()
        .map(|(_, text)| text)
        .collect();
    if qs.is_empty() {
        bail!("no queries in {}", queries.display());
    }
    let settings = Settings::default();
    let e = Engine::open(index, Access::Read)?;
    let mut lat = Vec::new();
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
            let json = serde_json::to_string(&answer)?;
            if run > 0 {
                lat.push(t.elapsed().as_secs_f64() * 1000.0);
                answer_bytes += json.len();
            }
            std::hint::black_box(json);
        }
        if run > 0 {
            counted += started.elapsed().as_secs_f64();
        }
    }
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| lat[((p * (lat.len() - 1) as f64).round() as usize).min(lat.len() - 1)];
    outln!(
        "engine query (situate-bench, one thread): {} queries, k {k}, mode {}: p50 {:.3} ms, p99 {:.3} ms, {:.1} queries/s, {:.0} bytes of JSON per answer",
        lat.len(),
        mode.unwrap_or("default"),
        pct(0.5),
        pct(0.99),
        lat.len() as f64 / counted,
        answer_bytes as f64 / lat.len() as f64
    );
    Ok(ExitCode::SUCCESS)
}
