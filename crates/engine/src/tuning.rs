//! What `situate tune` reads from an index: each query's legs, raw and deep, once
//! ([`Engine::tuning_legs`]), so that every fusion setting of a grid is a fusion in memory
//! rather than a search; and what the card keys of those legs are ([`Engine::card_ids`]).

use crate::*;
use situate_core::{IndexHit, LexicalQuery, MatchOn, VectorQuery};
use std::collections::HashMap;

/// One query's legs, each as deep as the deepest `fetch` of the grid.
#[derive(Debug, Clone, Default)]
pub struct TuningLegs {
    /// The BM25 leg at each context weight asked for, in the order asked.
    pub bm25: Vec<Vec<IndexHit>>,
    /// The vector leg, when the index has vectors.
    pub vector: Option<Vec<IndexHit>>,
}

/// What a card key names: its chunk, its document and (for sets matched by text) its
/// original text.
#[derive(Debug, Clone)]
pub struct CardIds {
    /// The chunk id.
    pub chunk_id: String,
    /// The document id.
    pub document_id: String,
    /// The original text.
    pub original_text: String,
}

impl Engine {
    /// `text`'s BM25 leg at each of `context_weights` and its vector leg, each `depth` deep,
    /// unfused: the raw lists a search fuses ([`situate_search::fuse_legs`]). The query is
    /// analysed in every language of the index, as a search without a language filter is.
    pub fn tuning_legs(
        &self,
        text: &str,
        match_on: MatchOn,
        context_weights: &[f32],
        depth: usize,
    ) -> Result<TuningLegs> {
        let mut out = TuningLegs::default();
        for &w in context_weights {
            out.bm25.push(
                self.bm25
                    .search(&LexicalQuery {
                        text,
                        limit: depth,
                        match_on,
                        context_weight: w,
                        languages: &self.languages,
                        filter: None,
                    })
                    .map_err(EngineError::Search)?,
            );
        }
        if let Some(v) = &self.vectors {
            let embedder = self.embedder()?;
            let q = vectors::embed_query_with(embedder.as_ref(), self.runtime()?, text)?;
            out.vector = Some(
                situate_core::VectorIndex::search(
                    v,
                    &VectorQuery {
                        vector: &q,
                        limit: depth,
                        filter: None,
                    },
                )
                .map_err(EngineError::Search)?,
            );
        }
        Ok(out)
    }

    /// The chunk, document and original text of each card key (keys with no card left out).
    pub fn card_ids(&self, keys: &[u64]) -> Result<HashMap<u64, CardIds>> {
        Ok(self
            .store
            .cards(keys)?
            .into_iter()
            .map(|r| {
                (
                    r.card.card,
                    CardIds {
                        chunk_id: r.card.chunk_id,
                        document_id: r.card.document_id,
                        original_text: r.card.original_text,
                    },
                )
            })
            .collect())
    }

    /// Whether any card has a context in the indexes (so the context weight can matter).
    pub fn has_indexed_contexts(&self) -> Result<bool> {
        let mut found = false;
        self.store
            .for_each_index_row(|row| {
                if row.context.is_some() {
                    found = true;
                    return Err("found".into());
                }
                Ok(())
            })
            .or_else(|e| if found { Ok(()) } else { Err(e) })?;
        Ok(found)
    }
}
