//! `situate-bench extract`: the PDF readers compared in BENCHMARKS.md, page by page.

use anyhow::{Context, Result, bail};
use std::path::PathBuf;
use std::time::Instant;

/// Reads every file `repeat` times with `method`; prints one JSON line per file.
pub fn run(method: &str, repeat: usize, files: &[PathBuf]) -> Result<()> {
    for file in files {
        let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        let mut best = f64::INFINITY;
        let mut pages = Vec::new();
        for _ in 0..repeat.max(1) {
            let t = Instant::now();
            pages = match method {
                "situate" => situate(bytes.clone())?,
                "pdf-extract" => pdf_extract::extract_text_from_mem_by_pages(&bytes)
                    .map_err(|e| anyhow::anyhow!("{e}"))?,
                "lopdf" => {
                    let doc = lopdf::Document::load_mem(&bytes)?;
                    let numbers: Vec<u32> = doc.get_pages().keys().copied().collect();
                    numbers
                        .iter()
                        .map(|&n| doc.extract_text(&[n]).unwrap_or_default())
                        .collect()
                }
                m => bail!("unknown method {m:?}: expected situate, pdf-extract or lopdf"),
            };
            best = best.min(t.elapsed().as_secs_f64());
        }
        let line = serde_json::json!({
            "file": file.display().to_string(),
            "method": method,
            "seconds": best,
            "pages": pages,
        });
        println!("{line}");
    }
    Ok(())
}

/// situate's reader: its Markdown-like text cut at the page starts.
fn situate(bytes: Vec<u8>) -> Result<Vec<String>> {
    let x = situate_ingest::extract::pdf::read_pdf(bytes).map_err(|e| anyhow::anyhow!(e))?;
    let starts = &x.layout.starts;
    let mut pages = Vec::new();
    let count = x
        .metadata
        .get("pages")
        .and_then(|p| p.as_u64())
        .unwrap_or(starts.len() as u64) as u32;
    for n in 1..=count {
        let Some(i) = starts.iter().position(|&(_, p)| p == n) else {
            pages.push(String::new());
            continue;
        };
        let end = starts.get(i + 1).map_or(x.text.len(), |&(s, _)| s);
        pages.push(x.text[starts[i].0..end].to_string());
    }
    Ok(pages)
}
