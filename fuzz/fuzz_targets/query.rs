#![no_main]
//! Fuzz target `query` (RELIABILITY.md): any input gives an answer or an error, never a
//! panic, a hang or unbounded memory.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    use situate_core::{Language, LexicalIndex, LexicalQuery, MatchOn};
    use situate_index::{Bm25Index, ChineseTokenizer};
    use std::sync::OnceLock;
    static INDEX: OnceLock<[Bm25Index; 2]> = OnceLock::new();
    let indexes = INDEX.get_or_init(|| {
        [ChineseTokenizer::Bigram, ChineseTokenizer::Jieba].map(|chinese| {
            let mut ix = Bm25Index::in_memory(chinese).expect("index");
            let docs = [
                (Language::En, "Pump maintenance", "The pump at station 7 ran for 40 hours."),
                (Language::Ru, "Насосы", "Насос на станции 7 работал 40 часов."),
                (Language::Zh, "泵", "七号站的泵运行了四十个小时。"),
                (Language::Other, "Bomba", "La bomba de la estación 7 funcionó."),
            ];
            for (i, (lang, ctx, text)) in docs.iter().enumerate() {
                ix.add_chunk(i as u64, &format!("d{i}"), *lang, Some(ctx), text).expect("add");
            }
            ix.commit(1).expect("commit");
            ix
        })
    });
    let (sel, rest) = situate_fuzz::select(data);
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let q = LexicalQuery {
        text,
        limit: 1 + (sel as usize % 20),
        match_on: if sel & 0x40 == 0 { MatchOn::Plain } else { MatchOn::Contextual },
        context_weight: 0.5,
        languages: &[],
        filter: None,
    };
    for ix in indexes {
        ix.search(&q).expect("a search of any text answers");
    }
    // The engine's one check of a search, with the text as the query.
    let _ = situate_engine::SearchRequest::new(text).check(&situate_engine::Settings::default());
});
