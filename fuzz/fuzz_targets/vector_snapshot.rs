#![no_main]
//! Fuzz target `vector_snapshot` (RELIABILITY.md): any input gives an answer or an error, never a
//! panic, a hang or unbounded memory.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    use situate_vector::{Backend, Vectors};
    let (sel, rest) = situate_fuzz::select(data);
    let dir = situate_fuzz::scratch();
    for ext in ["flat", "keys", "hnsw"] {
        let _ = std::fs::remove_file(dir.join(format!("vectors-1.{ext}")));
    }
    if sel & 1 == 0 {
        situate_fuzz::file("vectors-1.flat", rest);
    } else {
        let cut = (sel as usize * 7).min(rest.len());
        situate_fuzz::file("vectors-1.keys", &rest[..cut]);
        situate_fuzz::file("vectors-1.hnsw", &rest[cut..]);
    }
    if let Ok(v) = Vectors::load(dir, "vectors-1", Backend::Auto, sel & 2 == 0) {
        let _ = v.len();
    }
});
