#![no_main]
//! Fuzz target `eval_data` (RELIABILITY.md): any input gives an answer or an error, never a
//! panic, a hang or unbounded memory.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (sel, rest) = situate_fuzz::select(data);
    let path = situate_fuzz::file("data.jsonl", rest);
    match sel % 3 {
        0 => {
            let _ = situate_eval::beir::read_queries(&path);
        }
        1 => {
            let _ = situate_eval::beir::read_qrels(&path);
        }
        _ => {
            let _ = situate_eval::dataset::EvalSet::load(&path, "test");
        }
    }
});
