#![no_main]
//! Fuzz target `request_json` (RELIABILITY.md): any input gives an answer or an error, never a
//! panic, a hang or unbounded memory.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    use situate_engine::{AskRequest, SearchRequest, Settings};
    let (sel, rest) = situate_fuzz::select(data);
    let settings = Settings::default();
    match sel % 5 {
        0 => {
            if let Ok(r) = serde_json::from_slice::<SearchRequest>(rest) {
                let _ = r.check(&settings);
            }
        }
        1 => {
            if let Ok(r) = serde_json::from_slice::<AskRequest>(rest) {
                let _ = r.check(&settings);
            }
        }
        2 => {
            if let Ok(r) = serde_json::from_slice::<situate_serve::jobs::JobSpec>(rest) {
                let _ = format!("{r:?}");
            }
        }
        3 => {
            let _ = serde_json::from_slice::<situate_engine::api::DocumentsRequest>(rest);
        }
        _ => {
            let _ = serde_json::from_slice::<situate_engine::ContextRecord>(rest);
        }
    }
});
