#![no_main]
//! Fuzz target `settings` (RELIABILITY.md): any input gives an answer or an error, never a
//! panic, a hang or unbounded memory.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let path = situate_fuzz::file("situate.toml", data);
    if let Ok(settings) = situate_engine::Settings::load(Some(&path)) {
        // Settings that load give checkable requests.
        let _ = situate_engine::SearchRequest::new("pump").check(&settings);
        let _ = situate_engine::AskRequest::default().check(&settings);
    }
});
