//! Counts over an index and the check that its indexes hold exactly the store's cards.

use crate::*;

impl Engine {
    /// Counts over the index.
    pub fn stats(&self) -> Result<EngineStats> {
        let embed = self.embed_settings()?;
        Ok(EngineStats {
            store: self.store.stats()?,
            bm25_chunks: self.bm25.num_chunks(),
            bm25_segments: self.bm25.num_segments(),
            bm25_generation: self.bm25.generation()?,
            chinese_tokenizer: self.chinese.as_str().to_string(),
            disk_bytes: dir_size(&self.dir),
            embed_cut: match &embed.model {
                Some(model) => self.embed_cut(model)?,
                None => EmbedCut::default(),
            },
            chunk_tokens: self.chunk_tokens()?,
            fusion: self.index_fusion()?,
            embedder: embed.spec,
            embed_model: embed.model,
            vectors: self.vectors.as_ref().map_or(0, |v| v.len() as u64),
            vector_index: self.vectors.as_ref().map(|v| v.kind().to_string()),
        })
    }

    /// The index's cards whose embedding input was cut to the embedder's window (recorded
    /// when they were embedded; no model is loaded). The cards are read only when some
    /// input of this model was ever cut.
    pub(crate) fn embed_cut(&self, model: &str) -> Result<EmbedCut> {
        let cuts = self.store.embedding_cuts(model)?;
        let mut out = EmbedCut::default();
        if cuts.is_empty() {
            return Ok(out);
        }
        let late = self.late_chunking()?;
        self.store.for_each_index_row(|row| {
            if let Some((tokens, cut)) = cuts.get(&vectors::text_hash(&row, late)) {
                out.texts += 1;
                out.input_tokens += tokens;
                out.tokens += cut;
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// Compares the BM25 index with the store card by card.
    pub fn check(&self) -> Result<Consistency> {
        let mut in_store = BTreeSet::new();
        self.store.for_each_index_row(|row| {
            in_store.insert(row.card);
            Ok(())
        })?;
        let in_index: BTreeSet<u64> = self.bm25.card_keys()?.into_iter().collect();
        let missing: Vec<u64> = in_store.difference(&in_index).copied().take(20).collect();
        let extra: Vec<u64> = in_index.difference(&in_store).copied().take(20).collect();
        // Vectors: exactly the cards that have a cached embedding.
        let (mut vector_missing, mut vector_extra) = (Vec::new(), Vec::new());
        let mut unembedded = 0;
        if let Some(v) = &self.vectors {
            let want = self.cards_with_embeddings()?;
            unembedded = want.values().filter(|cached| !**cached).count() as u64;
            let have: BTreeSet<u64> = v.keys().into_iter().collect();
            vector_missing = want
                .iter()
                .filter(|(k, cached)| **cached && !have.contains(k))
                .map(|(k, _)| *k)
                .take(20)
                .collect();
            vector_extra = have
                .iter()
                .filter(|k| want.get(k) != Some(&true))
                .copied()
                .take(20)
                .collect();
        }
        Ok(Consistency {
            vector_chunks: self.vectors.as_ref().map_or(0, |v| v.len() as u64),
            missing_from_vectors: vector_missing,
            not_in_store_vectors: vector_extra,
            unembedded,
            store_chunks: in_store.len() as u64,
            index_chunks: self.bm25.num_chunks(),
            missing_from_index: missing,
            not_in_store: extra,
            store_generation: self.store.generation()?,
            index_generation: self.bm25.generation()?,
        })
    }
}

/// What [`Engine::check`] found.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct Consistency {
    /// Chunk cards in the store.
    pub store_chunks: u64,
    /// Chunks in the BM25 index (live documents).
    pub index_chunks: u64,
    /// Up to 20 card keys in the store but not in the index.
    pub missing_from_index: Vec<u64>,
    /// Up to 20 card keys in the index but not in the store.
    pub not_in_store: Vec<u64>,
    /// Vectors in the vector index.
    pub vector_chunks: u64,
    /// Up to 20 card keys with a cached embedding but no vector.
    pub missing_from_vectors: Vec<u64>,
    /// Up to 20 vector keys that are not a card with a cached embedding.
    pub not_in_store_vectors: Vec<u64>,
    /// Cards with no cached embedding of their text, hence no vector: the vector leg
    /// cannot find them (an embedding that failed; `situate rebuild` embeds them).
    pub unembedded: u64,
    /// The store's generation.
    pub store_generation: u64,
    /// The generation the index reflects.
    pub index_generation: u64,
}

impl Consistency {
    /// Whether the index holds exactly the store's cards, once each.
    pub fn is_consistent(&self) -> bool {
        self.store_chunks == self.index_chunks
            && self.missing_from_index.is_empty()
            && self.not_in_store.is_empty()
            && self.missing_from_vectors.is_empty()
            && self.not_in_store_vectors.is_empty()
            && self.unembedded == 0
            && self.store_generation == self.index_generation
    }
}

/// Counts over the index.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct EngineStats {
    /// The store's counts.
    pub store: Stats,
    /// Chunks in the BM25 index.
    pub bm25_chunks: u64,
    /// Segments of the BM25 index (fewer is faster to search).
    pub bm25_segments: usize,
    /// The store generation the BM25 index reflects.
    pub bm25_generation: u64,
    /// Chinese tokenizer of this index.
    pub chinese_tokenizer: String,
    /// Size of the index directory on disk.
    pub disk_bytes: u64,
    /// The embedder setting (`none`, `auto`, a model).
    pub embedder: String,
    /// The model id of the cached embeddings, once chosen.
    pub embed_model: Option<String>,
    /// Vectors in the vector index.
    pub vectors: u64,
    /// The vector index's backend now (`exact`, `hnsw`), if any.
    pub vector_index: Option<String>,
    /// The cards whose embedding input (context + chunk) was longer than the embedder
    /// reads: their ends are not in their vectors (`window` is not known here).
    pub embed_cut: EmbedCut,
    /// The largest chunk an ingest cuts when it names no size, chosen when the index was
    /// first ingested into so that context and chunk fit the embedder's window; `null` for
    /// an index made before sizes were chosen per embedder (256 tokens).
    pub chunk_tokens: Option<usize>,
    /// The fusion a hybrid search uses when no setting says otherwise: the one the index
    /// recorded for its embedder (`situate_engine::fusion_defaults`), by `situate.toml`
    /// names.
    pub fusion: crate::settings::SearchSettings,
}

pub(crate) fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}
