//! Late chunking's pieces: a document and its chunks' spans to embed whole (from a stored
//! document, or put back together from its cards when their offsets do not hold), the
//! embedding call, and the cache keys of late vectors (a late vector depends on its
//! document, so its key carries the document's id).

use crate::vectors::{Embedded, embedding_input};
use situate_core::{Embedder, content_hash};
use situate_store::IndexRow;

/// A document to embed by late chunking: its text and its chunks' (cache hash, byte span).
#[derive(Debug, PartialEq)]
pub struct LateDocument {
    /// The document's text.
    pub text: String,
    /// Each chunk's cache hash and byte span in `text`.
    pub chunks: Vec<(String, (usize, usize))>,
}

/// A stored document to embed by late chunking, each chunk keyed by its late cache key
/// (over its indexed text: the card's context when its status is indexed). Each card's
/// span is found in `text` by its character offsets, checked against the card's original;
/// when some card's offsets do not hold its text, the document is put back together from
/// its cards instead (`reassemble`), as the repair of missing vectors does.
pub fn late_document(
    document_id: &str,
    text: &str,
    cards: &[situate_core::ChunkCard],
) -> LateDocument {
    let key = |c: &situate_core::ChunkCard| {
        let ctx = c
            .generated_context
            .as_deref()
            .filter(|_| c.context_status.is_indexed());
        late_key(document_id, &embedding_input(ctx, &c.original_text).0)
    };
    // Byte offset of each character position (and of the end).
    let at: Vec<usize> = text
        .char_indices()
        .map(|(b, _)| b)
        .chain(std::iter::once(text.len()))
        .collect();
    let spans: Option<Vec<(usize, usize)>> = cards
        .iter()
        .map(|c| {
            let (s, e) = (c.char_start as usize, c.char_end as usize);
            let span = (*at.get(s)?, *at.get(e)?);
            (s <= e && text.get(span.0..span.1) == Some(c.original_text.as_str())).then_some(span)
        })
        .collect();
    let (text, spans) = match spans {
        Some(spans) => (text.to_string(), spans),
        None => reassemble(cards),
    };
    LateDocument {
        text,
        chunks: cards.iter().map(key).zip(spans).collect(),
    }
}

/// Late chunking with `embedder`: each document read once, each chunk's vector pooled
/// from its span, keyed by the chunk's cache key. A document whose embedding fails counts
/// all its chunks as failed.
pub fn embed_late(
    runtime: &tokio::runtime::Runtime,
    embedder: &dyn Embedder,
    docs: Vec<LateDocument>,
    progress: &mut dyn FnMut(usize, usize),
) -> Embedded {
    let mut out = Embedded::default();
    let total: usize = docs.iter().map(|d| d.chunks.len()).sum();
    let mut done = 0;
    for d in docs {
        let spans: Vec<(usize, usize)> = d.chunks.iter().map(|(_, s)| *s).collect();
        match runtime.block_on(embedder.embed_late(&d.text, &spans)) {
            Ok(vs) if vs.len() == spans.len() => {
                out.vectors
                    .extend(d.chunks.into_iter().map(|(h, _)| h).zip(vs));
            }
            Ok(vs) => {
                out.failed += spans.len();
                out.reason.get_or_insert(format!(
                    "embedder returned {} vectors for {} chunks",
                    vs.len(),
                    spans.len()
                ));
            }
            Err(e) => {
                out.failed += spans.len();
                out.reason.get_or_insert(e.to_string());
            }
        }
        done += spans.len();
        progress(done, total);
    }
    out
}

/// A document's text put back together from its cards (each original at its character
/// offsets; what lay between two chunks, which no card keeps, as spaces) and each card's
/// byte span in it: what late chunking reads when the document itself is not at hand
/// (the repair of missing vectors). Cards whose offsets do not hold their text are laid
/// end to end instead.
pub(crate) fn reassemble(cards: &[situate_core::ChunkCard]) -> (String, Vec<(usize, usize)>) {
    let fits = cards.iter().all(|c| {
        c.char_end >= c.char_start
            && c.original_text.chars().count() as u64 == c.char_end - c.char_start
    });
    if !fits {
        let mut text = String::new();
        let mut spans = Vec::with_capacity(cards.len());
        for c in cards {
            if !text.is_empty() {
                text.push_str("\n\n");
            }
            spans.push((text.len(), text.len() + c.original_text.len()));
            text.push_str(&c.original_text);
        }
        return (text, spans);
    }
    let len = cards.iter().map(|c| c.char_end).max().unwrap_or(0) as usize;
    let mut chars = vec![' '; len];
    for c in cards {
        for (i, ch) in c.original_text.chars().enumerate() {
            chars[c.char_start as usize + i] = ch;
        }
    }
    // Byte offset of each character position.
    let mut at = Vec::with_capacity(len + 1);
    let mut text = String::with_capacity(len);
    for ch in &chars {
        at.push(text.len());
        text.push(*ch);
    }
    at.push(text.len());
    let spans = cards
        .iter()
        .map(|c| (at[c.char_start as usize], at[c.char_end as usize]))
        .collect();
    (text, spans)
}

/// The hash under which a card's embedding is cached: its indexed text's; by late
/// chunking (`late`), that and its document's id, since a late vector depends on its
/// document (two documents ending with the same sentence have two vectors for it).
pub fn text_hash(row: &IndexRow, late: bool) -> String {
    let h = embedding_input(row.context.as_deref(), &row.original).0;
    if late {
        late_key(&row.document_id, &h)
    } else {
        h
    }
}

/// A late chunking vector's cache key: the document id and the indexed text's hash.
pub(crate) fn late_key(document_id: &str, text_hash: &str) -> String {
    content_hash(format!("late\0{document_id}\0{text_hash}").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use situate_core::{CardKind, ChunkCard, ContextStatus};

    fn card(start: u64, text: &str) -> ChunkCard {
        ChunkCard {
            card: start,
            document_id: "d".into(),
            chunk_id: format!("d#{start}"),
            ordinal: 0,
            char_start: start,
            char_end: start + text.chars().count() as u64,
            heading_path: Vec::new(),
            kind: CardKind::Text,
            place: None,
            original_text: text.into(),
            generated_context: None,
            context_status: ContextStatus::Pending,
            provenance: None,
            context_notes: Vec::new(),
        }
    }

    /// A document put back from overlapping cards (a gap between two as a space, multi-byte
    /// characters kept): every card's span holds its text again.
    #[test]
    fn a_document_is_put_back_together_from_its_cards() {
        let doc = "Ёлка растёт. Она зелёная. Зимой тоже.";
        let chars: Vec<char> = doc.chars().collect();
        let piece = |a: usize, b: usize| chars[a..b].iter().collect::<String>();
        let cards = vec![
            card(0, &piece(0, 12)),
            card(7, &piece(7, 25)),
            card(26, &piece(26, 37)),
        ];
        let (text, spans) = reassemble(&cards);
        assert_eq!(text.chars().count(), 37);
        for (c, (a, b)) in cards.iter().zip(&spans) {
            assert_eq!(&text[*a..*b], c.original_text);
        }
        assert_eq!(&text[spans[2].0 - 1..spans[2].0], " ", "the gap");
        // Offsets that do not hold the text: laid end to end instead.
        let mut odd = cards.clone();
        odd[1].char_end += 3;
        let (text, spans) = reassemble(&odd);
        for (c, (a, b)) in odd.iter().zip(&spans) {
            assert_eq!(&text[*a..*b], c.original_text);
        }
    }

    /// A stored document for late chunking: the real text with each card's span found by
    /// its character offsets (multi-byte characters before it), keyed by document and
    /// indexed text; offsets that do not hold a card's text put it back from its cards.
    #[test]
    fn a_stored_document_gives_its_cards_spans_in_its_own_text() {
        let doc = "Ёлка растёт. Она зелёная. Зимой тоже.";
        let chars: Vec<char> = doc.chars().collect();
        let piece = |a: usize, b: usize| chars[a..b].iter().collect::<String>();
        let mut cards = vec![card(0, &piece(0, 12)), card(13, &piece(13, 25))];
        cards[1].generated_context = Some("О ёлке.".into());
        cards[1].context_status = ContextStatus::Verified;
        let d = late_document("d", doc, &cards);
        assert_eq!(d.text, doc, "the document's own text, gaps and all");
        for (c, (key, (a, b))) in cards.iter().zip(&d.chunks) {
            assert_eq!(&d.text[*a..*b], c.original_text);
            let ctx = c.generated_context.as_deref();
            assert_eq!(
                *key,
                late_key("d", &embedding_input(ctx, &c.original_text).0)
            );
        }
        let mut odd = cards.clone();
        odd[1].char_start += 1;
        odd[1].char_end += 1;
        let d = late_document("d", doc, &odd);
        assert_eq!(d, {
            let (text, spans) = reassemble(&odd);
            LateDocument {
                text,
                chunks: d.chunks.iter().map(|(k, _)| k.clone()).zip(spans).collect(),
            }
        });
    }

    #[test]
    fn late_keys_tell_documents_apart() {
        assert_ne!(late_key("a", "h"), late_key("b", "h"));
        assert_eq!(late_key("a", "h"), late_key("a", "h"));
    }
}
