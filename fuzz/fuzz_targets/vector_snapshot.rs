#![no_main]
//! Fuzz target `vector_snapshot` (RELIABILITY.md): any input gives an answer or an error, never a
//! panic, a hang or unbounded memory.
//!
//! The selector's bit 2 seals the input as situate writes it (the `.flat`'s trailing BLAKE3
//! checksum; the `.keys`' hash of the graph, then its own checksum), so what lies behind the
//! checksums is fuzzed too: a snapshot whose checksums are right and whose contents are not
//! (a file from elsewhere, a backup from elsewhere).

/// `body` with its trailing BLAKE3 checksum, as `.flat` and `.keys` files end.
fn sealed(body: &[u8]) -> Vec<u8> {
    let mut out = body.to_vec();
    out.extend_from_slice(blake3::hash(body).as_bytes());
    out
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    use situate_vector::{Backend, Vectors};
    let (sel, rest) = situate_fuzz::select(data);
    let seal = sel & 4 != 0;
    let dir = situate_fuzz::scratch();
    for ext in ["flat", "keys", "hnsw"] {
        let _ = std::fs::remove_file(dir.join(format!("vectors-1.{ext}")));
    }
    if sel & 1 == 0 {
        if seal {
            situate_fuzz::file("vectors-1.flat", &sealed(rest));
        } else {
            situate_fuzz::file("vectors-1.flat", rest);
        }
    } else {
        let cut = (sel as usize * 7).min(rest.len());
        let (keys, graph) = rest.split_at(cut);
        situate_fuzz::file("vectors-1.hnsw", graph);
        if seal {
            // The header (20 bytes), the graph's hash, the keys.
            let at = keys.len().min(20);
            let mut body = keys[..at].to_vec();
            body.extend_from_slice(blake3::hash(graph).to_hex().as_bytes());
            body.extend_from_slice(&keys[at..]);
            situate_fuzz::file("vectors-1.keys", &sealed(&body));
        } else {
            situate_fuzz::file("vectors-1.keys", keys);
        }
    }
    if let Ok(v) = Vectors::load(dir, "vectors-1", Backend::Auto, sel & 2 == 0) {
        let _ = v.len();
    }
});
