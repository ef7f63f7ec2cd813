#![no_main]
//! Fuzz target `tokenizer_json` (RELIABILITY.md): any input gives an answer or an error, never a
//! panic, a hang or unbounded memory.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // Through situate's loader, which refuses what is not JSON before the tokenizers crate
    // reads it (the crate panics on a decoder whose JSON does not parse) and turns any other
    // panic of the crate into an error. libFuzzer's panic hook aborts even on a panic that
    // is caught, so every panic of the crate on any input is still reported here.
    if let Ok(t) = situate_ingest::chunk::tokenizer_from_bytes(data) {
        let _ = t.encode("The pump at station 7 ran for 40 hours. Насос работал.", true);
    }
});
