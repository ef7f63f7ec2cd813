//! The query path: run the retrieval legs and turn their hits into [`Hit`]s.
//!
//! Today there is one leg, BM25 (plain or contextual). Hits are built from the chunk cards,
//! so every hit carries the card's context and original text apart. [`fusion`] (weighted RRF
//! and min-max fusion) is ready for the vector leg; reranking will slot in between fusion and
//! [`build_hits`].
#![warn(missing_docs)]

pub mod fusion;

use situate_core::{
    CardRecord, Hit, IndexError, IndexHit, Language, LegScore, LexicalIndex, LexicalQuery, MatchOn,
};
use std::collections::HashSet;

/// Where hits find their cards (the card store in the embedded engine).
pub trait CardSource {
    /// Cards by row key, in the order asked; keys without a card are left out.
    fn cards(&self, keys: &[u64]) -> Result<Vec<CardRecord>, IndexError>;
}

/// A search request.
#[derive(Debug, Clone)]
pub struct SearchRequest<'a> {
    /// The query text.
    pub text: &'a str,
    /// How many hits to return.
    pub k: usize,
    /// Plain or contextual BM25.
    pub match_on: MatchOn,
    /// Weight of the context relative to the original.
    pub context_weight: f32,
    /// Restrict to documents of these languages (empty: all).
    pub languages: &'a [Language],
}

/// Searches the BM25 leg and builds hits from the cards.
pub fn search(
    lexical: &dyn LexicalIndex,
    cards: &dyn CardSource,
    req: &SearchRequest<'_>,
) -> Result<Vec<Hit>, IndexError> {
    let leg = lexical.search(&LexicalQuery {
        text: req.text,
        limit: req.k,
        match_on: req.match_on,
        context_weight: req.context_weight,
        languages: req.languages,
    })?;
    build_hits("bm25", &leg, cards, req.k)
}

/// Turns one leg's ranked index hits into at most `k` [`Hit`]s, de-duplicated by chunk id
/// (the first, best-ranked occurrence wins).
pub fn build_hits(
    leg_name: &str,
    leg: &[IndexHit],
    cards: &dyn CardSource,
    k: usize,
) -> Result<Vec<Hit>, IndexError> {
    let keys: Vec<u64> = leg.iter().map(|h| h.card).collect();
    let records = cards.cards(&keys)?;
    let mut by_key: std::collections::HashMap<u64, CardRecord> =
        records.into_iter().map(|r| (r.card.card, r)).collect();
    let mut seen = HashSet::new();
    let mut hits = Vec::with_capacity(k.min(leg.len()));
    for (i, h) in leg.iter().enumerate() {
        let Some(rec) = by_key.remove(&h.card) else {
            continue;
        };
        if !seen.insert(rec.card.chunk_id.clone()) {
            continue;
        }
        let context = rec.card.indexable_context().map(str::to_string);
        hits.push(Hit {
            rank: hits.len() + 1,
            score: h.score,
            context,
            context_status: rec.card.context_status,
            document_id: rec.card.document_id,
            chunk_id: rec.card.chunk_id,
            title: rec.title,
            source: rec.source,
            char_start: rec.card.char_start,
            char_end: rec.card.char_end,
            heading_path: rec.card.heading_path,
            original_text: rec.card.original_text,
            legs: vec![LegScore {
                leg: leg_name.to_string(),
                rank: i + 1,
                score: h.score,
            }],
        });
        if hits.len() == k {
            break;
        }
    }
    Ok(hits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use situate_core::{ChunkCard, ContextStatus};

    struct Cards(Vec<CardRecord>);
    impl CardSource for Cards {
        fn cards(&self, keys: &[u64]) -> Result<Vec<CardRecord>, IndexError> {
            Ok(keys
                .iter()
                .filter_map(|k| self.0.iter().find(|c| c.card.card == *k).cloned())
                .collect())
        }
    }

    fn card(key: u64, chunk: &str, ctx: Option<&str>, status: ContextStatus) -> CardRecord {
        CardRecord {
            card: ChunkCard {
                card: key,
                document_id: "d".into(),
                chunk_id: chunk.into(),
                ordinal: 0,
                char_start: 0,
                char_end: 1,
                heading_path: vec![],
                original_text: format!("text of {chunk}"),
                generated_context: ctx.map(str::to_string),
                context_status: status,
                provenance: None,
                context_notes: vec![],
            },
            title: None,
            source: "s".into(),
        }
    }

    #[test]
    fn hits_keep_context_and_original_apart_and_skip_rejected_contexts() {
        let cards = Cards(vec![
            card(1, "a", Some("ctx a"), ContextStatus::Generated),
            card(2, "b", Some("bad"), ContextStatus::Rejected),
        ]);
        let leg = [
            IndexHit {
                card: 2,
                score: 3.0,
            },
            IndexHit {
                card: 1,
                score: 2.0,
            },
        ];
        let hits = build_hits("bm25", &leg, &cards, 10).expect("hits");
        assert_eq!(hits[0].chunk_id, "b");
        assert_eq!(hits[0].context, None);
        assert_eq!(hits[1].context.as_deref(), Some("ctx a"));
        assert_eq!(hits[1].original_text, "text of a");
        assert_eq!(hits[1].legs[0].rank, 2);
    }

    #[test]
    fn duplicates_and_missing_cards_are_dropped_and_k_is_respected() {
        let mut dup = card(3, "a", None, ContextStatus::Pending);
        dup.card.card = 3;
        let cards = Cards(vec![
            card(1, "a", None, ContextStatus::Pending),
            dup,
            card(4, "c", None, ContextStatus::Pending),
        ]);
        let leg = [
            IndexHit {
                card: 1,
                score: 5.0,
            },
            IndexHit {
                card: 9,
                score: 4.0,
            }, // no card (deleted meanwhile)
            IndexHit {
                card: 3,
                score: 3.0,
            }, // same chunk id as card 1
            IndexHit {
                card: 4,
                score: 2.0,
            },
        ];
        let hits = build_hits("bm25", &leg, &cards, 10).expect("hits");
        assert_eq!(
            hits.iter().map(|h| h.chunk_id.as_str()).collect::<Vec<_>>(),
            vec!["a", "c"]
        );
        assert_eq!(hits.iter().map(|h| h.rank).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(build_hits("bm25", &leg, &cards, 1).expect("hits").len(), 1);
    }
}
