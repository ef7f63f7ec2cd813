//! The PDF readers compared in BENCHMARKS.md ("PDF extraction"), page by page:
//!
//!     cargo run --release -p situate-ingest --example extract -- METHOD REPEAT FILE...
//!
//! METHOD is `situate` (situate's reader), `pdf-extract` (its plain text output) or `lopdf`
//! (lopdf's `extract_text`); one JSON line per file: {file, method, seconds (best of
//! REPEAT), pages: [text of each page]}. `bench/extract.sh` scores them. An example of this
//! crate (not a situate-bench command) so the benchmark builds only the reader.

use std::path::PathBuf;
use std::time::Instant;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [method, repeat, files @ ..] = args.as_slice() else {
        return Err("usage: extract METHOD REPEAT FILE...".into());
    };
    let files: Vec<PathBuf> = files.iter().map(PathBuf::from).collect();
    run(method, repeat.parse()?, &files)
}

/// Reads every file `repeat` times with `method`; prints one JSON line per file.
fn run(method: &str, repeat: usize, files: &[PathBuf]) -> Result<()> {
    for file in files {
        let bytes = std::fs::read(file)?;
        let mut best = f64::INFINITY;
        let mut pages = Vec::new();
        for _ in 0..repeat.max(1) {
            let t = Instant::now();
            pages = match method {
                "situate" => situate(bytes.clone())?,
                "pdf-extract" => pdf_extract::extract_text_from_mem_by_pages(&bytes)
                    .map_err(|e| e.to_string())?,
                "lopdf" => {
                    let doc = lopdf::Document::load_mem(&bytes)?;
                    let numbers: Vec<u32> = doc.get_pages().keys().copied().collect();
                    numbers
                        .iter()
                        .map(|&n| doc.extract_text(&[n]).unwrap_or_default())
                        .collect()
                }
                m => {
                    return Err(format!(
                        "unknown method {m:?}: expected situate, pdf-extract or lopdf"
                    )
                    .into());
                }
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
    let x = situate_ingest::extract::pdf::read_pdf(bytes)?;
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
