#![no_main]
//! Fuzz target `odt` (RELIABILITY.md): any input gives an answer or an error, never a
//! panic, a hang or unbounded memory.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = situate_ingest::extract::office::read_odt(data.to_vec());
});
