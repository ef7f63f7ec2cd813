#![no_main]
//! Fuzz target `csv` (RELIABILITY.md): any input gives an answer or an error, never a
//! panic, a hang or unbounded memory.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (sel, rest) = situate_fuzz::select(data);
    if let Ok(s) = std::str::from_utf8(rest) {
        let _ = situate_ingest::extract::sheet::read_csv(s, sel & 1 == 1);
    }
});
