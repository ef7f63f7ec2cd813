#![no_main]
//! Fuzz target `chunker` (RELIABILITY.md): any input gives an answer or an error, never a
//! panic, a hang or unbounded memory.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    use situate_core::DocKind;
    use situate_ingest::{Chunker, ChunkerConfig};
    use std::sync::OnceLock;
    static CHUNKERS: OnceLock<Vec<Chunker>> = OnceLock::new();
    let chunkers = CHUNKERS.get_or_init(|| {
        [(24, 0), (60, 8), (256, 32)]
            .iter()
            .map(|&(max_tokens, overlap_tokens)| {
                Chunker::new(ChunkerConfig { max_tokens, overlap_tokens, tokenizer: None })
                    .expect("chunker")
            })
            .collect()
    });
    let (sel, rest) = situate_fuzz::select(data);
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let kinds = ["markdown", "text", "code:rust", "code:python", "code:javascript", "html"];
    let kind = DocKind::from_stored(kinds[(sel as usize) % kinds.len()]);
    let chunker = &chunkers[(sel as usize / kinds.len()) % chunkers.len()];
    let mut spans = chunker.chunk(text, &kind);
    for s in &spans {
        // Every span is a valid slice of the text, and its original can be made.
        assert!(s.byte_start <= s.byte_end && s.byte_end <= text.len());
        assert!(text.is_char_boundary(s.byte_start) && text.is_char_boundary(s.byte_end));
        let _ = s.original(text);
    }
    situate_ingest::chunk::set_heading_paths(text, &mut spans);
});
