#![no_main]
//! Fuzz target `workbook` (RELIABILITY.md): any input gives an answer or an error, never a
//! panic, a hang or unbounded memory.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (sel, rest) = situate_fuzz::select(data);
    let what = if sel & 1 == 0 { "xlsx" } else { "ods" };
    let _ = situate_ingest::extract::sheet::read_workbook(rest.to_vec(), what);
});
