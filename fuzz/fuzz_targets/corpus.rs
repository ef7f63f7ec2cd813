#![no_main]
//! Fuzz target `corpus` (RELIABILITY.md): any input gives an answer or an error, never a
//! panic, a hang or unbounded memory.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    use situate_ingest::{SourceOptions, read_sources};
    let (sel, rest) = situate_fuzz::select(data);
    let name = match sel % 3 {
        0 => "corpus.jsonl",
        1 => "codebase_chunks.json",
        _ => "notes.md",
    };
    let path = situate_fuzz::file(name, rest);
    for item in read_sources(&[path], &SourceOptions::default()) {
        let _ = item;
    }
});
