#![no_main]
//! Fuzz target `tokenizer_json` (RELIABILITY.md): any input gives an answer or an error, never a
//! panic, a hang or unbounded memory.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // Through situate's loader, which turns the tokenizers crate's panics into errors.
    if let Ok(t) = situate_ingest::chunk::tokenizer_from_bytes(data) {
        let _ = t.encode("The pump at station 7 ran for 40 hours. Насос работал.", true);
    }
});
