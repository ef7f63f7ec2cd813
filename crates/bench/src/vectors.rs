//! Benchmarks of the vector leg (`situate-bench embed|vectors|hybrid|synth`); results in
//! BENCHMARKS.md.

use anyhow::{Context, Result, bail};
use situate_core::{EmbedKind, IndexHit};
use situate_engine::{Access, Engine};
use situate_search::SearchRequest;
use situate_vector::{Backend, Vectors};
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

/// Peak resident memory of this process so far (Linux `VmHWM`), in MB.
fn peak_rss_mb() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn read_jsonl_texts(path: &Path, n: usize, passage: bool) -> Result<Vec<String>> {
    let f = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    for line in std::io::BufReader::new(f).lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(&line)?;
        let text = v["text"].as_str().unwrap_or_default();
        let title = v["title"].as_str().unwrap_or_default();
        out.push(if passage && !title.is_empty() {
            format!("{title}\n\n{text}")
        } else {
            text.to_string()
        });
        if out.len() == n {
            break;
        }
    }
    Ok(out)
}

pub fn embed(model: &str, dataset: &Path, passages: usize, queries: usize) -> Result<ExitCode> {
    let embedder = situate_embed::resolve(model)?;
    let texts = read_jsonl_texts(&dataset.join("corpus.jsonl"), passages, true)?;
    let qs = read_jsonl_texts(&dataset.join("queries.jsonl"), queries, false)?;
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    // Length-sorted batches, as ingest does.
    let mut sorted: Vec<&str> = texts.iter().map(String::as_str).collect();
    sorted.sort_by_key(|t| t.len());
    let _ = rt.block_on(embedder.embed(&sorted[..sorted.len().min(8)], EmbedKind::Passage))?;
    let started = Instant::now();
    for part in sorted.chunks(64) {
        rt.block_on(embedder.embed(part, EmbedKind::Passage))?;
    }
    let secs = started.elapsed().as_secs_f64();
    let mut lat = Vec::with_capacity(qs.len());
    for q in &qs {
        let t = Instant::now();
        rt.block_on(embedder.embed(&[q.as_str()], EmbedKind::Query))?;
        lat.push(t.elapsed());
    }
    lat.sort();
    outln!(
        "{model}: {} passages in {secs:.2} s = {:.1} passages/s; {} queries one at a time: p50 {:.2} ms, p99 {:.2} ms; threads {}",
        texts.len(),
        texts.len() as f64 / secs,
        qs.len(),
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    Ok(ExitCode::SUCCESS)
}

/// Clustered unit vectors (xorshift), so that neighbourhoods exist as in real embeddings:
/// 1,000 centres drawn from `centre_seed`, points around them drawn from `seed`.
fn synthetic(n: usize, dim: usize, centre_seed: u64, seed: u64) -> Vec<Vec<f32>> {
    fn rng(seed: u64) -> impl FnMut() -> f32 {
        let mut s = seed.max(1);
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f32 / (1u64 << 53) as f32 * 2.0 - 1.0
        }
    }
    let mut c = rng(centre_seed);
    let centres: Vec<Vec<f32>> = (0..1000).map(|_| (0..dim).map(|_| c()).collect()).collect();
    let mut r: Box<dyn FnMut() -> f32> = if centre_seed == seed {
        Box::new(c)
    } else {
        Box::new(rng(seed))
    };
    (0..n)
        .map(|_| {
            let c = &centres[((r() + 1.0) * 499.5) as usize];
            let v: Vec<f32> = c.iter().map(|x| x + 0.9 * r()).collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.into_iter().map(|x| x / norm).collect()
        })
        .collect()
}

/// Mean share of `exact`'s top 20 that `ann`'s top 20 found.
fn recall_at_20(exact: &[Vec<IndexHit>], ann: &[Vec<IndexHit>]) -> f64 {
    exact
        .iter()
        .zip(ann)
        .map(|(e, a)| {
            let want: std::collections::HashSet<u64> = e.iter().take(20).map(|h| h.card).collect();
            a.iter().take(20).filter(|h| want.contains(&h.card)).count() as f64
                / want.len().max(1) as f64
        })
        .sum::<f64>()
        / exact.len().max(1) as f64
}

/// Searches every query, returning the hits and the p50/p99 latency in ms.
fn run_queries(
    ix: &Vectors,
    qs: &[Vec<f32>],
    limit: usize,
) -> Result<(Vec<Vec<IndexHit>>, f64, f64)> {
    let mut lat = Vec::new();
    let mut hits = Vec::new();
    for q in qs {
        let t = Instant::now();
        let h = ix.search_vec(q, limit, None)?;
        lat.push(t.elapsed());
        hits.push(h);
    }
    lat.sort();
    Ok((hits, percentile(&lat, 0.5), percentile(&lat, 0.99)))
}

/// Builds an exact and an HNSW index over the same synthetic vectors and reports build
/// time, latency and HNSW recall@20 for two query sets: "off-distribution" queries
/// around centres the data does not have (every neighbour is a near-tie: the hard case)
/// and "in-distribution" queries around the data's own centres (like a real query near
/// its documents). Each `ef` is measured on the same graph.
pub fn vectors(
    n: usize,
    dim: usize,
    queries: usize,
    limit: usize,
    efs: &[usize],
) -> Result<ExitCode> {
    let data = synthetic(n, dim, 42, 42);
    let sets = [
        ("off-distribution", synthetic(queries, dim, 4242, 4242)),
        ("in-distribution", synthetic(queries, dim, 42, 4242)),
    ];
    let started = Instant::now();
    let mut exact = Vectors::new(dim, Backend::Exact)?;
    for (i, v) in data.iter().enumerate() {
        exact.add(i as u64 + 1, v)?;
    }
    outln!(
        "exact: {n} x {dim}, build {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    let mut ann = Vectors::new(dim, Backend::Hnsw)?;
    // In batches, as ingest adds them (concurrent insertion on rayon's pool).
    for (b, part) in data.chunks(4096).enumerate() {
        let items: Vec<(u64, &[f32])> = part
            .iter()
            .enumerate()
            .map(|(i, v)| ((b * 4096 + i) as u64 + 1, v.as_slice()))
            .collect();
        ann.add_batch(&items)?;
    }
    outln!(
        "hnsw: {n} x {dim}, build {:.1} s ({} threads)",
        started.elapsed().as_secs_f64(),
        rayon::current_num_threads()
    );
    for (name, qs) in &sets {
        let (truth, p50, p99) = run_queries(&exact, qs, limit)?;
        outln!("{name} queries, exact top-{limit}: p50 {p50:.2} ms p99 {p99:.2} ms");
        for &ef in efs {
            ann.set_search_effort(ef);
            let (hits, p50, p99) = run_queries(&ann, qs, limit)?;
            outln!(
                "{name} queries, hnsw ef {ef} top-{limit}: p50 {p50:.2} ms p99 {p99:.2} ms, recall@20 against exact {:.4}",
                recall_at_20(&truth, &hits)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn hybrid(index: &Path, queries: &Path, repeat: usize) -> Result<ExitCode> {
    let qs: Vec<String> = situate_eval::read_questions(queries)?
        .into_iter()
        .map(|(_, text)| text)
        .collect();
    if qs.is_empty() {
        bail!("no queries in {}", queries.display());
    }
    let opened = Instant::now();
    let e = Engine::open(index, Access::Read)?;
    let open_ms = opened.elapsed().as_secs_f64() * 1000.0;
    let stats = e.stats()?;
    // A BM25-only index (created with --embedder none) is measured on its one leg.
    let modes: &[&str] = if stats.vectors == 0 {
        &["bm25"]
    } else {
        &["bm25", "vector", "hybrid"]
    };
    for &mode in modes {
        let mut lat = Vec::new();
        for run in 0..repeat.max(2) {
            for q in &qs {
                let mut req = SearchRequest::new(q, 20);
                req.mode = Some(mode.parse().map_err(anyhow::Error::msg)?);
                let t = Instant::now();
                let hits = e.search(&req)?;
                if run > 0 {
                    lat.push(t.elapsed());
                }
                std::hint::black_box(hits);
            }
        }
        lat.sort();
        outln!(
            "{mode}: {} chunks ({}, {}), {} queries: p50 {:.2} ms, p99 {:.2} ms",
            stats.store.chunks,
            stats.vector_index.as_deref().unwrap_or("no vectors"),
            stats.embed_model.as_deref().unwrap_or("-"),
            lat.len(),
            percentile(&lat, 0.5),
            percentile(&lat, 0.99)
        );
    }
    // Peak memory before the recall measurement, which copies every vector.
    let peak = peak_rss_mb().unwrap_or(f64::NAN);
    if stats.vectors > 0 {
        let refs: Vec<&str> = qs.iter().map(String::as_str).collect();
        let recall = e.vector_recall(&refs, 20, situate_search::DEFAULT_FETCH)?;
        outln!(
            "vector leg recall@20 against exact search: {recall:.4} ({} queries, {} index)",
            qs.len(),
            stats.vector_index.as_deref().unwrap_or("-")
        );
    }
    outln!("open {open_ms:.0} ms; peak resident memory {peak:.0} MB");
    Ok(ExitCode::SUCCESS)
}

pub fn synth(n: usize, out: &Path) -> Result<ExitCode> {
    std::fs::create_dir_all(out)?;
    // A 20k-word vocabulary with Zipf frequencies: short posting lists for most words and
    // long ones for a few, like real text.
    let mut s = 7u64;
    let mut r = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    let vocab: Vec<String> = (0..20_000)
        .map(|i| {
            let syll = [
                "ka", "lo", "mi", "ter", "sun", "ra", "vel", "dor", "pi", "an",
            ];
            let mut w = String::new();
            let mut x = i + 1;
            while x > 0 {
                w.push_str(syll[x % 10]);
                x /= 10;
            }
            w
        })
        .collect();
    let harmonic: f64 = (1..=vocab.len()).map(|k| 1.0 / k as f64).sum();
    let cdf: Vec<f64> = (1..=vocab.len())
        .scan(0.0, |acc, k| {
            *acc += 1.0 / k as f64 / harmonic;
            Some(*acc)
        })
        .collect();
    let word = |r: &mut dyn FnMut() -> f64| {
        let u = r();
        let i = cdf.partition_point(|c| *c < u).min(vocab.len() - 1);
        vocab[i].clone()
    };
    let mut corpus = std::io::BufWriter::new(std::fs::File::create(out.join("corpus.jsonl"))?);
    let mut queries = std::io::BufWriter::new(std::fs::File::create(out.join("queries.txt"))?);
    for d in 0..n {
        let words: Vec<String> = (0..150).map(|_| word(&mut r)).collect();
        writeln!(
            corpus,
            "{}",
            serde_json::json!({"_id": format!("d{d}"), "title": "", "text": words.join(" ")})
        )?;
        if d % (n / 200).max(1) == 0 {
            // A query: 6 words of this document.
            let q: Vec<&str> = words.iter().step_by(25).map(String::as_str).collect();
            writeln!(queries, "{}", q.join(" "))?;
        }
    }
    corpus.flush()?;
    queries.flush()?;
    outln!("wrote {n} documents and their queries to {}", out.display());
    Ok(ExitCode::SUCCESS)
}
