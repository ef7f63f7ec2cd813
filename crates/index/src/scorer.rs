//! BM25 top-k, term at a time, over tantivy's compressed posting blocks.
//!
//! tantivy's own query path (a `BooleanQuery` of `Should` term queries) merges the terms'
//! postings document at a time: a heap or bucketed union over virtual scorers, a virtual call
//! and a branchy advance per posting. situate's queries are natural-language questions (often
//! 10+ distinct terms, more in contextual BM25, where every term is asked of two fields) over
//! posting lists that are mostly short, where that machinery is most of the time. This module
//! reads the same postings straight from tantivy's public block API
//! ([`tantivy::postings::BlockSegmentPostings`]: 128 decoded documents and frequencies at a
//! time), adds each term's BM25 contribution into a per-segment accumulator (the factor
//! `tf / (tf + norm)` looked up in a per-field table for small frequencies, no branch that
//! mispredicts in the loop), and selects the best `k` from the documents touched in linear
//! time. The scores are tantivy's own BM25 (k1 = 1.2, b = 0.75, the
//! same idf over the searcher's statistics and the same 256-entry length-norm table), summed
//! in the same term order, so rankings match tantivy's to the last bit on a tie-free index.
//! A unit test checks this against `BooleanQuery` + `TopDocs` on several segments with
//! deletes and boosts.
//!
//! On large collections, where a query's common words have long lists, a segment is scored
//! with MaxScore-style pruning instead ([`Pruned`]): the same top k, most of the common
//! words' blocks never decoded (at one million chunks, BENCHMARKS.md).
//!
//! History (BENCHMARKS.md, SciFact, one thread): `TopDocs` with block-max WAND 6.3k queries/s;
//! an exhaustive collector over tantivy's union 13k; MaxScore over `Weight::scorer` about half
//! that; a term-at-a-time accumulator fed by tantivy's per-posting callback 6.8k. This
//! module is the first that avoids tantivy's per-posting virtual calls altogether: 14.3k
//! against tantivy's union at 9.2k in same-machine runs (2026-12-03).
//!
//! Why by hand: no crate offers BM25 top-k over tantivy's postings other than tantivy's own
//! scorers, which are what is being replaced here.

use situate_core::CardSet;
use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::rc::Rc;
use tantivy::fieldnorm::FieldNormReader;
use tantivy::postings::TermInfo;
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::{DocId, Score, Searcher, Term};

/// BM25's term-frequency saturation (tantivy's `K1`).
const K1: Score = 1.2;
/// BM25's length normalisation (tantivy's `B`).
const B: Score = 0.75;

/// What can go wrong reading the index (tantivy's and I/O errors).
#[derive(Debug, thiserror::Error)]
pub enum ScoreError {
    /// tantivy refused.
    #[error("{0}")]
    Tantivy(#[from] tantivy::TantivyError),
    /// Reading a posting list or the term dictionary failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// idf as tantivy (and Lucene) compute it: `ln(1 + (N - n + 0.5) / (n + 0.5))`.
fn idf(doc_freq: u64, doc_count: u64) -> Score {
    let x = (doc_count.saturating_sub(doc_freq) as Score + 0.5) / (doc_freq as Score + 0.5);
    (1.0 + x).ln()
}

/// Term frequencies whose BM25 factor is looked up rather than divided (most postings: a
/// division per posting was a third of a query's time).
const TABLE_TF: usize = 16;

/// A field's length normalisation: `k1 * (1 - b + b * dl / avgdl)` for each of tantivy's 256
/// length codes, and the factor `tf / (tf + norm)` itself for `tf` in 1..=[`TABLE_TF`],
/// computed by the same f32 operations as at query time, so looked-up and computed factors
/// are the same values.
struct FieldTable {
    norms: [Score; 256],
    factors: Vec<[Score; 256]>,
}

impl FieldTable {
    fn new(average_fieldnorm: Score) -> Self {
        let mut norms = [0.0; 256];
        for (id, v) in norms.iter_mut().enumerate() {
            let dl = FieldNormReader::id_to_fieldnorm(id as u8) as Score;
            *v = K1 * (1.0 - B + B * dl / average_fieldnorm);
        }
        let factors = (1..=TABLE_TF)
            .map(|tf| {
                let tf = tf as Score;
                norms.map(|norm| tf / (tf + norm))
            })
            .collect();
        FieldTable { norms, factors }
    }

    /// BM25's term-frequency factor of a posting.
    #[inline(always)]
    fn factor(&self, tf: u32, fieldnorm_id: u8) -> Score {
        match self.factors.get((tf as usize).wrapping_sub(1)) {
            Some(row) => row[fieldnorm_id as usize],
            None => {
                let tf = tf as Score;
                tf / (tf + self.norms[fieldnorm_id as usize])
            }
        }
    }
}

/// One term of a query as scored: `weight = boost * idf * (1 + k1)`, and its field's table.
struct TermPlan {
    field: Field,
    weight: Score,
    table: Rc<FieldTable>,
    /// Its dictionary entry in each segment (`None`: absent there).
    infos: Vec<Option<TermInfo>>,
}

impl TermPlan {
    /// The term's posting blocks in a segment (from its dictionary entry there) and its
    /// field's length codes.
    fn open(
        &self,
        seg: &tantivy::SegmentReader,
        info: &TermInfo,
    ) -> Result<(tantivy::postings::BlockSegmentPostings, FieldNormReader), ScoreError> {
        let block = seg
            .inverted_index(self.field)?
            .read_block_postings_from_terminfo(info, IndexRecordOption::WithFreqs)?;
        Ok((block, seg.get_fieldnorms_reader(self.field)?))
    }
}

#[derive(Clone, Copy, PartialEq)]
struct Entry {
    score: Score,
    card: u64,
}

impl Eq for Entry {}

impl Ord for Entry {
    /// "Greater" is worse, so a max-heap's top is the worst entry kept; ties go to the
    /// smaller card key.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .score
            .total_cmp(&self.score)
            .then(self.card.cmp(&other.card))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A segment-sized score accumulator and the documents it touched, kept per thread between
/// queries so a query allocates nothing once warm. Every entry is zero between queries (a
/// BM25 contribution is always positive, so zero also means "not touched yet").
#[derive(Default)]
struct Scratch {
    scores: Vec<Score>,
    touched: Vec<DocId>,
    candidates: Vec<(Score, DocId)>,
}

#[cfg(test)]
thread_local! {
    /// Terms only looked up for candidates (not read whole), for tests to see pruning happen.
    pub(crate) static LOOKED_UP: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
    /// Recent fields' tables by (field, average length bits): 16 × 256 divisions each, so
    /// built once per index state rather than once per query.
    static TABLES: RefCell<Vec<(u32, u32, Rc<FieldTable>)>> = const { RefCell::new(Vec::new()) };
}

/// The table of `field` at this average length, from the per-thread cache.
fn field_table(field: Field, average_fieldnorm: Score) -> Rc<FieldTable> {
    let key = (field.field_id(), average_fieldnorm.to_bits());
    TABLES.with(|cache| {
        let mut cache = cache.borrow_mut();
        if let Some((_, _, t)) = cache.iter().find(|(f, a, _)| (*f, *a) == key) {
            return t.clone();
        }
        let t = Rc::new(FieldTable::new(average_fieldnorm));
        if cache.len() >= 16 {
            cache.remove(0);
        }
        cache.push((key.0, key.1, t.clone()));
        t
    })
}

/// Adds one term's BM25 contributions into `scores`; unless `DENSE`, writes into `touched`
/// (sized for every posting) the documents it touches first, `n` counting them. The write is
/// unconditional and only the count depends on the test, so the loop has no branch that
/// mispredicts (a documents' first touch is close to a coin toss).
#[inline(always)]
fn accumulate<const DENSE: bool>(
    mut block: tantivy::postings::BlockSegmentPostings,
    fieldnorms: &FieldNormReader,
    table: &FieldTable,
    weight: Score,
    scores: &mut [Score],
    touched: &mut [DocId],
    n: &mut usize,
) {
    loop {
        let docs = block.docs();
        if docs.is_empty() {
            break;
        }
        for (&doc, &tf) in docs.iter().zip(block.freqs()) {
            let factor = table.factor(tf, fieldnorms.fieldnorm_id(doc));
            let slot = &mut scores[doc as usize];
            if !DENSE {
                // `n` never passes the postings seen so far, and `touched` holds them all.
                if let Some(t) = touched.get_mut(*n) {
                    *t = doc;
                }
                *n += usize::from(*slot == 0.0);
            }
            *slot += weight * factor;
        }
        block.advance();
    }
}

/// The `limit` best (score, card key) pairs for `terms` (term, boost), best first; ties go to
/// the smaller key. `card` names the fast field holding each chunk's card key.
pub fn top_cards(
    searcher: &Searcher,
    terms: &[(Term, Score)],
    card: &str,
    limit: usize,
    filter: Option<&CardSet>,
) -> Result<Vec<(Score, u64)>, ScoreError> {
    top_cards_pruning_from(searcher, terms, card, limit, filter, PRUNE_MIN_POSTINGS)
}

/// [`top_cards`], pruning segments where one of the query's posting lists has at least
/// `prune_min_postings` entries (tests set it to 0 to prune everywhere).
pub(crate) fn top_cards_pruning_from(
    searcher: &Searcher,
    terms: &[(Term, Score)],
    card: &str,
    limit: usize,
    filter: Option<&CardSet>,
    prune_min_postings: u32,
) -> Result<Vec<(Score, u64)>, ScoreError> {
    if limit == 0 || terms.is_empty() {
        return Ok(Vec::new());
    }
    let segments = searcher.segment_readers();
    // Searcher-wide statistics, as tantivy's `Bm25Weight::for_terms` takes them: documents
    // counted by max_doc (deleted ones included), document frequencies from the dictionary.
    let doc_count: u64 = segments.iter().map(|s| u64::from(s.max_doc())).sum();
    if doc_count == 0 {
        return Ok(Vec::new());
    }
    // Each field's table, once per query.
    let mut tables: Vec<(Field, Rc<FieldTable>)> = Vec::new();
    let mut plans = Vec::with_capacity(terms.len());
    for (term, boost) in terms {
        let field = term.field();
        let table = match tables.iter().find(|(f, _)| *f == field) {
            Some((_, t)) => t.clone(),
            None => {
                let mut tokens = 0u64;
                for s in segments {
                    tokens += s.inverted_index(field)?.total_num_tokens();
                }
                let t = field_table(field, tokens as Score / doc_count as Score);
                tables.push((field, t.clone()));
                t
            }
        };
        let mut infos = Vec::with_capacity(segments.len());
        let mut doc_freq = 0u64;
        for s in segments {
            let info = s.inverted_index(field)?.get_term_info(term)?;
            doc_freq += info.as_ref().map_or(0, |i| u64::from(i.doc_freq));
            infos.push(info);
        }
        if doc_freq == 0 {
            continue;
        }
        plans.push(TermPlan {
            field,
            weight: boost * idf(doc_freq, doc_count) * (1.0 + K1),
            table,
            infos,
        });
    }
    let mut heap: BinaryHeap<Entry> = BinaryHeap::with_capacity(limit + 1);
    SCRATCH.with(|scratch| -> Result<(), ScoreError> {
        let mut scratch = scratch.borrow_mut();
        let Scratch {
            scores,
            touched,
            candidates,
        } = &mut *scratch;
        for (ord, seg) in segments.iter().enumerate() {
            let max_doc = seg.max_doc() as usize;
            if scores.len() < max_doc {
                scores.resize(max_doc, 0.0);
            }
            // Dense when the postings are many for the segment's size: then the accumulator is
            // scanned whole at the end instead of listing the documents touched (a branch and
            // a push per posting, most of the loop's time on short collections).
            let (postings, longest) = plans
                .iter()
                .filter_map(|p| p.infos[ord].as_ref())
                .fold((0u64, 0u32), |(sum, max), i| {
                    (sum + u64::from(i.doc_freq), max.max(i.doc_freq))
                });
            if filter.is_none() && longest >= prune_min_postings {
                // The best score kept so far from earlier segments bounds what this one must
                // beat.
                let floor = match heap.peek() {
                    Some(worst) if heap.len() == limit => worst.score,
                    _ => 0.0,
                };
                let pruned = Pruned {
                    seg,
                    plans: &plans,
                    ord,
                    limit,
                    floor,
                };
                pruned.run(scores, touched, candidates)?;
                push_best(seg, card, limit, None, candidates, &mut heap)?;
                continue;
            }
            let dense = (max_doc as u64) <= postings.saturating_mul(16);
            let mut n = 0usize;
            if !dense {
                touched.clear();
                touched.resize(usize::try_from(postings).unwrap_or(usize::MAX), 0);
            }
            let result = (|| -> Result<(), ScoreError> {
                for plan in &plans {
                    let Some(info) = &plan.infos[ord] else {
                        continue;
                    };
                    let (block, fieldnorms) = plan.open(seg, info)?;
                    let table = &plan.table;
                    let (w, t) = (plan.weight, &mut touched[..]);
                    if dense {
                        accumulate::<true>(block, &fieldnorms, table, w, scores, t, &mut n);
                    } else {
                        accumulate::<false>(block, &fieldnorms, table, w, scores, t, &mut n);
                    }
                }
                Ok(())
            })();
            // Collect (score, document) of the documents touched, returning the accumulator
            // to all zeros (also when reading failed); deleted documents are left out.
            candidates.clear();
            if dense {
                // The whole accumulator, compacted without a branch per document.
                candidates.resize(max_doc, (0.0, 0));
                for (doc, s) in scores[..max_doc].iter_mut().enumerate() {
                    let score = std::mem::take(s);
                    if let Some(c) = candidates.get_mut(n) {
                        *c = (score, doc as DocId);
                    }
                    n += usize::from(score != 0.0);
                }
                candidates.truncate(n);
            } else {
                touched.truncate(n);
                candidates.extend(
                    touched
                        .iter()
                        .map(|&doc| (std::mem::take(&mut scores[doc as usize]), doc)),
                );
            }
            result?;
            push_best(seg, card, limit, filter, candidates, &mut heap)?;
        }
        Ok(())
    })?;
    Ok(heap
        .into_sorted_vec()
        .into_iter()
        .map(|e| (e.score, e.card))
        .collect())
}

/// Pushes the segment's `candidates` (score, document) that can still be among the `limit`
/// best into `heap`, leaving out deleted documents and those `filter` refuses.
fn push_best(
    seg: &tantivy::SegmentReader,
    card: &str,
    limit: usize,
    filter: Option<&CardSet>,
    candidates: &mut Vec<(Score, DocId)>,
    heap: &mut BinaryHeap<Entry>,
) -> Result<(), ScoreError> {
    let cards = seg.fast_fields().u64(card)?;
    if let Some(alive) = seg.alive_bitset() {
        candidates.retain(|c| !alive.is_deleted(c.1));
    }
    // Without a filter, only the best `limit` (and any tied with the last of them) can be
    // kept: select them in linear time before reading any card key.
    if filter.is_none() && candidates.len() > limit {
        let (_, nth, _) = candidates.select_nth_unstable_by(limit - 1, |a, b| b.0.total_cmp(&a.0));
        let threshold = nth.0;
        candidates.retain(|c| c.0 >= threshold);
    }
    for &(score, doc) in candidates.iter() {
        if heap.len() == limit && heap.peek().is_some_and(|w| score < w.score) {
            continue;
        }
        let Some(key) = cards.first(doc) else {
            continue;
        };
        if filter.is_some_and(|f| !f.contains(key)) {
            continue;
        }
        heap.push(Entry { score, card: key });
        if heap.len() > limit {
            heap.pop();
        }
    }
    Ok(())
}

/// Segments where every posting list of the query is shorter than this are scored
/// exhaustively: pruning only pays where a long list can be left mostly unread (at one
/// million chunks the common words' lists are most of a query's postings; on SciFact's 5k
/// documents no list comes near).
const PRUNE_MIN_POSTINGS: u32 = 16_384;

/// Slack on upper bounds, so that float rounding in a sum of contributions can never make a
/// bound fall below a score it bounds.
const BOUND_SLACK: Score = 1.0 + 1e-4;

/// Top-k over one segment with MaxScore-style pruning, term at a time (Turtle and Flood's
/// "MaxScore" in its term-at-a-time form). A term's contribution `weight * tf / (tf + norm)`
/// is below its `weight`, so after the terms with the largest weights are accumulated
/// exhaustively, the `limit`-th best score so far (a lower bound on the final `limit`-th,
/// since scores only grow) may exceed what all remaining terms together could add. From then
/// on no new document can enter the top `limit`: the remaining terms are only looked up, in
/// document order through tantivy's skip lists (`BlockSegmentPostings::seek`), for the
/// documents already scored that could still get in, and the blocks between them are never
/// decoded. The result is the exhaustive top `limit` (with sums in another term order, so
/// scores can differ in the last bits).
struct Pruned<'a> {
    seg: &'a tantivy::SegmentReader,
    plans: &'a [TermPlan],
    ord: usize,
    limit: usize,
    /// The score a document must reach to be kept (from earlier segments; 0 if none).
    floor: Score,
}

impl Pruned<'_> {
    /// Leaves in `candidates` the (score, document) pairs that can be among the best,
    /// scored completely, and the accumulator all zeros again.
    fn run(
        &self,
        scores: &mut [Score],
        touched: &mut Vec<DocId>,
        candidates: &mut Vec<(Score, DocId)>,
    ) -> Result<(), ScoreError> {
        let ord = self.ord;
        let mut order: Vec<(&TermPlan, TermInfo)> = self
            .plans
            .iter()
            .filter_map(|p| p.infos[ord].clone().map(|i| (p, i)))
            .collect();
        order.sort_by(|a, b| {
            b.0.weight
                .total_cmp(&a.0.weight)
                .then(a.1.doc_freq.cmp(&b.1.doc_freq))
        });
        // rest[i]: what terms i.. can add at most; left[i]: their postings.
        let mut rest = vec![0.0 as Score; order.len() + 1];
        let mut left = vec![0u64; order.len() + 1];
        for i in (0..order.len()).rev() {
            rest[i] = rest[i + 1] + order[i].0.weight;
            left[i] = left[i + 1] + u64::from(order[i].1.doc_freq);
        }
        let alive = self.seg.alive_bitset();
        let live = |d: DocId| alive.is_none_or(|a| !a.is_deleted(d));
        let mut n = 0usize;
        let mut first_lookup = order.len();
        let mut theta = self.floor;
        let result = (|| -> Result<(), ScoreError> {
            for (i, (plan, info)) in order.iter().enumerate() {
                // Worth a threshold only when what is left to read outweighs the selection.
                if i > 0 && left[i] > n as u64 {
                    theta = theta.max(self.kth_best(scores, &touched[..n], live, candidates));
                    if rest[i] * BOUND_SLACK < theta {
                        first_lookup = i;
                        break;
                    }
                }
                let (block, fieldnorms) = plan.open(self.seg, info)?;
                let need = n + info.doc_freq as usize;
                if touched.len() < need {
                    touched.resize(need, 0);
                }
                let w = plan.weight;
                accumulate::<false>(block, &fieldnorms, &plan.table, w, scores, touched, &mut n);
            }
            // The documents that can still make it, in document order for the lookups.
            candidates.clear();
            candidates.extend(
                touched[..n]
                    .iter()
                    .filter(|&&d| live(d))
                    .filter(|&&d| scores[d as usize] + rest[first_lookup] * BOUND_SLACK >= theta)
                    .map(|&d| (0.0, d)),
            );
            candidates.sort_unstable_by_key(|c| c.1);
            for (j, (plan, info)) in order.iter().enumerate().skip(first_lookup) {
                #[cfg(test)]
                LOOKED_UP.with(|c| c.set(c.get() + 1));
                let (mut block, fieldnorms) = plan.open(self.seg, info)?;
                for &(_, doc) in candidates.iter() {
                    let at = block.seek(doc);
                    if block.docs().get(at) == Some(&doc) {
                        let factor = plan
                            .table
                            .factor(block.freq(at), fieldnorms.fieldnorm_id(doc));
                        scores[doc as usize] += plan.weight * factor;
                    }
                }
                let bound = rest[j + 1] * BOUND_SLACK;
                candidates.retain(|&(_, d)| scores[d as usize] + bound >= theta);
            }
            for c in candidates.iter_mut() {
                c.0 = scores[c.1 as usize];
            }
            Ok(())
        })();
        for &d in &touched[..n] {
            scores[d as usize] = 0.0;
        }
        if result.is_err() {
            candidates.clear();
        }
        result
    }

    /// The `limit`-th best score among the live documents in `docs` (0 if fewer), using
    /// `buf` as scratch.
    fn kth_best(
        &self,
        scores: &[Score],
        docs: &[DocId],
        live: impl Fn(DocId) -> bool,
        buf: &mut Vec<(Score, DocId)>,
    ) -> Score {
        buf.clear();
        buf.extend(
            docs.iter()
                .filter(|&&d| live(d))
                .map(|&d| (scores[d as usize], d)),
        );
        if buf.len() < self.limit {
            return 0.0;
        }
        let (_, nth, _) = buf.select_nth_unstable_by(self.limit - 1, |a, b| b.0.total_cmp(&a.0));
        nth.0
    }
}
