#![no_main]
//! Fuzz target `gguf` (RELIABILITY.md): any input gives an answer or an error, never a
//! panic, a hang or unbounded memory.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let path = situate_fuzz::file("model.gguf", data);
    let _ = situate_llm::local::LocalLlm::load(&path, "fuzz".into());
});
