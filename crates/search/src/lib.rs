//! The query path: run the retrieval legs, fuse them, and turn the result into [`Hit`]s.
//!
//! Two legs: BM25 (plain or contextual, [`LexicalIndex`]) and vectors ([`VectorIndex`]).
//! [`Mode::Hybrid`] asks each leg for its best `fetch` (150 by default, as in the paper),
//! fuses the two lists with [`fusion`] (the request's function and weights, which the
//! engine fills from the index's recorded fusion) and keeps `k`. A metadata filter
//! ([`CardSet`]) is applied *inside* each leg, so both return `fetch` allowed hits
//! and `k` survive however selective the filter. Hits are built from the chunk cards, so
//! every hit carries the card's context and original text apart, each leg's rank and
//! score, and the fused score. [`rerank`] orders the fused top hits by a reranker's scores
//! (the caller scores them: rerankers are asynchronous and may be remote).
#![warn(missing_docs)]

pub mod fusion;
pub mod rerank;

use fusion::{Fused, Fusion, RankedList, fuse};
use situate_core::{
    CardRecord, CardSet, Hit, IndexError, IndexHit, Language, LegScore, LexicalIndex, LexicalQuery,
    MatchOn, VectorIndex, VectorQuery,
};
use std::collections::HashSet;

/// Where hits find their cards (the card store in the embedded engine).
pub trait CardSource {
    /// Cards by row key, in the order asked; keys without a card are left out.
    fn cards(&self, keys: &[u64]) -> Result<Vec<CardRecord>, IndexError>;
}

/// Which legs a search runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// BM25 only.
    Bm25,
    /// Vectors only.
    Vector,
    /// Both, fused (the default when the index has vectors).
    #[default]
    Hybrid,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "bm25" => Ok(Mode::Bm25),
            "vector" => Ok(Mode::Vector),
            "hybrid" => Ok(Mode::Hybrid),
            _ => Err(format!(
                "unknown mode {s:?}: expected bm25, vector or hybrid"
            )),
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::Bm25 => "bm25",
            Mode::Vector => "vector",
            Mode::Hybrid => "hybrid",
        })
    }
}

/// The default number of hits each leg contributes to the fusion (the paper's 150).
pub const DEFAULT_FETCH: usize = 150;

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
    /// Analyse the query in these languages for BM25 (empty: every language in the index).
    pub languages: &'a [Language],
    /// Which legs to run (`None`: hybrid when the index has vectors, else BM25).
    pub mode: Option<Mode>,
    /// Hits per leg before fusion (at least `k`).
    pub fetch: usize,
    /// How the legs are fused.
    pub fusion: Fusion,
    /// Weight of the BM25 leg in the fusion.
    pub bm25_weight: f32,
    /// Weight of the vector leg in the fusion.
    pub vector_weight: f32,
}

impl<'a> SearchRequest<'a> {
    /// A request with the defaults: contextual BM25 (context weight 0.5), mode by index,
    /// 150 per leg, RRF k = 60, equal weights.
    pub fn new(text: &'a str, k: usize) -> Self {
        SearchRequest {
            text,
            k,
            match_on: MatchOn::Contextual,
            context_weight: situate_core::DEFAULT_CONTEXT_WEIGHT,
            languages: &[],
            mode: None,
            fetch: DEFAULT_FETCH,
            fusion: Fusion::default(),
            bm25_weight: 1.0,
            vector_weight: 1.0,
        }
    }
}

/// The query's embedding for the vector leg.
#[derive(Clone, Copy)]
pub enum QueryVector<'a> {
    /// Computed already.
    Ready(&'a [f32]),
    /// Computed when the search needs it: a hybrid search embeds the query on a second
    /// thread while the BM25 leg runs on the caller's, so a query costs the longer of the
    /// two rather than their sum.
    Lazy(&'a (dyn Fn() -> Result<Vec<f32>, IndexError> + Sync)),
}

impl QueryVector<'_> {
    fn get(&self) -> Result<std::borrow::Cow<'_, [f32]>, IndexError> {
        match self {
            QueryVector::Ready(v) => Ok(std::borrow::Cow::Borrowed(v)),
            QueryVector::Lazy(f) => f().map(std::borrow::Cow::Owned),
        }
    }
}

/// The legs a search can use.
pub struct Legs<'a> {
    /// The BM25 leg.
    pub lexical: &'a dyn LexicalIndex,
    /// The vector leg and the query's embedding, when the index has vectors and the mode
    /// needs them.
    pub vector: Option<(&'a dyn VectorIndex, QueryVector<'a>)>,
}

/// Runs the legs `mode` asks for, fuses them, and builds hits from the cards.
pub fn search(
    legs: &Legs<'_>,
    cards: &dyn CardSource,
    req: &SearchRequest<'_>,
    mode: Mode,
    filter: Option<&CardSet>,
) -> Result<Vec<Hit>, IndexError> {
    let fetch = req.fetch.max(req.k);
    let bm25 = |limit: usize| {
        legs.lexical.search(&LexicalQuery {
            text: req.text,
            limit,
            match_on: req.match_on,
            context_weight: req.context_weight,
            languages: req.languages,
            filter,
        })
    };
    let leg = || {
        legs.vector.ok_or_else(|| {
            IndexError::from("this search needs the vector leg, which is not available")
        })
    };
    let vector = |index: &dyn VectorIndex, q: &[f32], limit: usize| {
        index.search(&VectorQuery {
            vector: q,
            limit,
            filter,
        })
    };
    match mode {
        // A single leg: over-fetch a little so duplicates of one chunk id (never expected,
        // but cheap to guard) cannot shorten the page.
        Mode::Bm25 => build_hits("bm25", &bm25(req.k)?, cards, req.k),
        Mode::Vector => {
            let (index, q) = leg()?;
            build_hits("vector", &vector(index, &q.get()?, req.k)?, cards, req.k)
        }
        Mode::Hybrid => {
            let (index, q) = leg()?;
            let (b, v) = match q {
                QueryVector::Ready(q) => (bm25(fetch)?, vector(index, q, fetch)?),
                // The embedding on a second thread, BM25 here meanwhile (the BM25 leg keeps
                // per-thread scratch space, which the caller's thread has warm).
                QueryVector::Lazy(embed) => std::thread::scope(|s| {
                    let embedded = s.spawn(embed);
                    let b = bm25(fetch);
                    let q = embedded
                        .join()
                        .map_err(|_| IndexError::from("the query embedding panicked"))??;
                    Ok::<_, IndexError>((b?, vector(index, &q, fetch)?))
                })?,
            };
            let fused = fuse_legs(&b, &v, req);
            build_fused_hits(&fused, cards, req.k)
        }
    }
}

/// The two legs' lists fused as `req` says (its fusion, weights and `fetch`): each list cut
/// to its first `fetch`, the fused list `fetch` long. [`search`] fuses with it, and so does
/// `situate tune`, which reads each leg once and fuses it many ways.
pub fn fuse_legs(bm25: &[IndexHit], vector: &[IndexHit], req: &SearchRequest<'_>) -> Vec<Fused> {
    let fetch = req.fetch.max(req.k);
    fuse(
        &[
            RankedList {
                leg: "bm25",
                hits: &bm25[..bm25.len().min(fetch)],
                weight: req.bm25_weight,
                floor: fusion::BM25_FLOOR,
            },
            RankedList {
                leg: "vector",
                hits: &vector[..vector.len().min(fetch)],
                weight: req.vector_weight,
                floor: fusion::COSINE_FLOOR,
            },
        ],
        req.fusion,
        fetch,
    )
}

/// Turns fused results into at most `k` [`Hit`]s (score = fused score; every leg's rank
/// and score kept), de-duplicated by chunk id.
pub fn build_fused_hits(
    fused: &[Fused],
    cards: &dyn CardSource,
    k: usize,
) -> Result<Vec<Hit>, IndexError> {
    let leg: Vec<IndexHit> = fused
        .iter()
        .map(|f| IndexHit {
            card: f.card,
            score: f.score,
        })
        .collect();
    let (mut hits, keys) = build("fused", &leg, cards, k)?;
    let by_card: std::collections::HashMap<u64, &Fused> =
        fused.iter().map(|f| (f.card, f)).collect();
    for (h, key) in hits.iter_mut().zip(keys) {
        if let Some(f) = by_card.get(&key) {
            h.legs = f.legs.clone();
        }
    }
    Ok(hits)
}

/// Turns one leg's ranked index hits into at most `k` [`Hit`]s, de-duplicated by chunk id
/// (the first, best-ranked occurrence wins).
pub fn build_hits(
    leg_name: &str,
    leg: &[IndexHit],
    cards: &dyn CardSource,
    k: usize,
) -> Result<Vec<Hit>, IndexError> {
    Ok(build(leg_name, leg, cards, k)?.0)
}

/// [`build_hits`], also returning the card key of each hit.
///
/// Cards are read a window at a time in rank order (the first `k` plus a margin, then
/// larger windows only while duplicates or missing cards leave the page short): a hybrid
/// search fuses up to 300 candidates, and reading every one of their cards (original text
/// included) was about 2.5 ms of a 13 ms query at 100k chunks, for the 20 that are kept.
/// The hits are those of reading them all at once, in the same order.
fn build(
    leg_name: &str,
    leg: &[IndexHit],
    cards: &dyn CardSource,
    k: usize,
) -> Result<(Vec<Hit>, Vec<u64>), IndexError> {
    let mut seen = HashSet::new();
    let mut hits = Vec::with_capacity(k.min(leg.len()));
    let mut kept = Vec::with_capacity(k.min(leg.len()));
    let mut start = 0;
    let mut window = k + k / 2 + 2;
    while start < leg.len() && hits.len() < k {
        let end = (start + window).min(leg.len());
        let keys: Vec<u64> = leg[start..end].iter().map(|h| h.card).collect();
        let records = cards.cards(&keys)?;
        let mut by_key: std::collections::HashMap<u64, CardRecord> =
            records.into_iter().map(|r| (r.card.card, r)).collect();
        for (i, h) in leg.iter().enumerate().take(end).skip(start) {
            let Some(rec) = by_key.remove(&h.card) else {
                continue;
            };
            if !seen.insert(rec.card.chunk_id.clone()) {
                continue;
            }
            kept.push(h.card);
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
                kind: rec.card.kind,
                place: rec.card.place,
                original_text: rec.card.original_text,
                legs: vec![LegScore {
                    leg: leg_name.to_string(),
                    rank: i + 1,
                    score: h.score,
                    normalized: None,
                }],
            });
            if hits.len() == k {
                break;
            }
        }
        start = end;
        window *= 2;
    }
    Ok((hits, kept))
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
                kind: Default::default(),
                place: None,
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

    /// A leg that returns its script, filtered and cut like a real one.
    struct Scripted(Vec<IndexHit>);
    impl Scripted {
        fn run(&self, filter: Option<&CardSet>, limit: usize) -> Vec<IndexHit> {
            self.0
                .iter()
                .filter(|h| filter.is_none_or(|f| f.contains(h.card)))
                .take(limit)
                .copied()
                .collect()
        }
    }
    impl LexicalIndex for Scripted {
        fn search(&self, q: &LexicalQuery<'_>) -> Result<Vec<IndexHit>, IndexError> {
            Ok(self.run(q.filter, q.limit))
        }
    }
    impl VectorIndex for Scripted {
        fn search(&self, q: &VectorQuery<'_>) -> Result<Vec<IndexHit>, IndexError> {
            Ok(self.run(q.filter, q.limit))
        }
        fn len(&self) -> usize {
            self.0.len()
        }
    }

    fn scripted(v: &[(u64, f32)]) -> Scripted {
        Scripted(
            v.iter()
                .map(|&(card, score)| IndexHit { card, score })
                .collect(),
        )
    }

    #[test]
    fn hybrid_fuses_both_legs_keeps_each_legs_view_and_respects_filters() {
        let cards = Cards(
            (1..=6)
                .map(|k| card(k, &format!("c{k}"), None, ContextStatus::Pending))
                .collect(),
        );
        let bm25 = scripted(&[(1, 9.0), (2, 8.0), (3, 7.0), (4, 1.0)]);
        let vec = scripted(&[(3, 0.9), (5, 0.8), (1, 0.7), (6, 0.1)]);
        let q = [0.0f32];
        let legs = Legs {
            lexical: &bm25,
            vector: Some((&vec, QueryVector::Ready(&q))),
        };
        let req = SearchRequest::new("q", 3);
        let hits = search(&legs, &cards, &req, Mode::Hybrid, None).expect("hybrid");
        // RRF k=60: c1 = 1/61 + 1/63, c3 = 1/63 + 1/61 (tie: smaller key first), c2 = 1/62.
        let got: Vec<&str> = hits.iter().map(|h| h.chunk_id.as_str()).collect();
        assert_eq!(&got[..2], &["c1", "c3"]);
        assert!((hits[0].score - (1.0 / 61.0 + 1.0 / 63.0)).abs() < 1e-7);
        assert_eq!(hits[0].legs.len(), 2);
        assert_eq!(
            (hits[0].legs[1].leg.as_str(), hits[0].legs[1].rank),
            ("vector", 3)
        );
        // c2 (bm25 #2, 1/62) and c5 (vector #2, 1/62) tie; the smaller key wins.
        assert_eq!(got[2], "c2");
        // A filter that removes most hits: each leg still returns what it allows.
        let only: CardSet = [4u64, 6].into_iter().collect();
        let hits = search(&legs, &cards, &req, Mode::Hybrid, Some(&only)).expect("filtered");
        let got: Vec<&str> = hits.iter().map(|h| h.chunk_id.as_str()).collect();
        assert_eq!(got, vec!["c4", "c6"]);
        // Single legs keep their own scores.
        let hits = search(&legs, &cards, &req, Mode::Vector, None).expect("vector");
        assert_eq!((hits[0].chunk_id.as_str(), hits[0].score), ("c3", 0.9));
        let no_vec = Legs {
            lexical: &bm25,
            vector: None,
        };
        assert!(search(&no_vec, &cards, &req, Mode::Hybrid, None).is_err());
        // A query embedded on demand (on a second thread in hybrid mode) gives the same hits,
        // is computed once per search, and its failure is the search's.
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let embed = || {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(vec![0.0f32])
        };
        let lazy = Legs {
            lexical: &bm25,
            vector: Some((&vec, QueryVector::Lazy(&embed))),
        };
        for mode in [Mode::Hybrid, Mode::Vector] {
            let ready: Vec<String> = search(&legs, &cards, &req, mode, None)
                .expect("ready")
                .into_iter()
                .map(|h| h.chunk_id)
                .collect();
            let lazily: Vec<String> = search(&lazy, &cards, &req, mode, None)
                .expect("lazy")
                .into_iter()
                .map(|h| h.chunk_id)
                .collect();
            assert_eq!(ready, lazily, "{mode:?}");
        }
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
        let failing = || Err(IndexError::from("no embedder today"));
        let broken = Legs {
            lexical: &bm25,
            vector: Some((&vec, QueryVector::Lazy(&failing))),
        };
        let e = search(&broken, &cards, &req, Mode::Hybrid, None).expect_err("fails");
        assert!(e.to_string().contains("no embedder today"), "{e}");
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

    /// Cards are read a window at a time: a full page reads only its first window, and
    /// missing or duplicate cards across several windows give the hits reading all would.
    #[test]
    fn cards_are_read_in_windows_with_the_hits_of_reading_all() {
        struct Counting(Cards, std::cell::RefCell<Vec<usize>>);
        impl CardSource for Counting {
            fn cards(&self, keys: &[u64]) -> Result<Vec<CardRecord>, IndexError> {
                self.1.borrow_mut().push(keys.len());
                self.0.cards(keys)
            }
        }
        // 300 candidates; cards exist for every third key, and keys 30..60 all share
        // one chunk id.
        let records: Vec<CardRecord> = (0..300u64)
            .filter(|k| k % 3 == 0)
            .map(|k| {
                let chunk = if (30..60).contains(&k) {
                    "shared".to_string()
                } else {
                    format!("c{k}")
                };
                let mut c = card(k, &chunk, None, ContextStatus::Pending);
                c.card.card = k;
                c
            })
            .collect();
        let leg: Vec<IndexHit> = (0..300u64)
            .map(|k| IndexHit {
                card: k,
                score: 300.0 - k as f32,
            })
            .collect();
        let source = Counting(Cards(records), Default::default());
        let hits = build_hits("fused", &leg, &source, 20).expect("hits");
        // What reading every card at once keeps: existing cards in rank order, the first
        // of the shared chunk id only, 20 of them.
        let mut want = Vec::new();
        let mut shared = false;
        for k in (0..300u64).filter(|k| k % 3 == 0) {
            if (30..60).contains(&k) {
                if shared {
                    continue;
                }
                shared = true;
                want.push("shared".to_string());
            } else {
                want.push(format!("c{k}"));
            }
            if want.len() == 20 {
                break;
            }
        }
        let got: Vec<String> = hits.iter().map(|h| h.chunk_id.clone()).collect();
        assert_eq!(got, want);
        let ranks: Vec<usize> = hits.iter().map(|h| h.legs[0].rank).collect();
        assert_eq!(ranks[0], 1);
        assert_eq!(ranks[1], 4, "the leg's rank of key 3");
        let read = source.1.borrow().clone();
        assert!(read.len() > 1, "several windows: {read:?}");
        assert!(read.iter().sum::<usize>() < 300, "not every card: {read:?}");
        // A page filled by the first window reads only that window.
        source.1.borrow_mut().clear();
        let dense: Vec<IndexHit> = leg.iter().step_by(3).copied().collect();
        assert_eq!(
            build_hits("fused", &dense, &source, 5).expect("hits").len(),
            5
        );
        assert_eq!(*source.1.borrow(), vec![5 + 2 + 2]);
    }
}
