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
//! mispredicts in the loop), and selects the best `k` from the documents touched without
//! sorting them: a threshold that about `2k` of them reach is guessed from one score in 16,
//! only the documents reaching it are collected (sixteen scores compared at a time), and the
//! few hundred left are selected as plain integers (score bits above the document id), the
//! whole collection done again only if the guess kept fewer than `k`. The scores are
//! tantivy's own BM25 (k1 = 1.2, b = 0.75, the same idf over the searcher's statistics and
//! the same 256-entry length-norm table), summed in the same term order, so rankings match
//! tantivy's to the last bit on a tie-free index.
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
//! against tantivy's union at 9.2k in same-machine runs (2026-12-03). The guessed threshold,
//! integer keys and field readers opened once per query took it from about 32.5k to about
//! 41k on a faster machine (2026-12-04, SciFact whole, bm25s at 7.4k).
//!
//! Why by hand: no crate offers BM25 top-k over tantivy's postings other than tantivy's own
//! scorers, which are what is being replaced here.

use situate_core::CardSet;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use tantivy::InvertedIndexReader;
use tantivy::columnar::Column;
use tantivy::fastfield::AliveBitSet;
use tantivy::fieldnorm::FieldNormReader;
use tantivy::index::SegmentId;
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

/// A field's readers in every segment and its table, opened once per query (tantivy's
/// `inverted_index` is a locked map lookup per call: once per term and segment, it was 1.4%
/// of a SciFact query).
struct FieldReaders {
    field: Field,
    table: Rc<FieldTable>,
    inverted: Vec<Arc<InvertedIndexReader>>,
    norms: Vec<FieldNormReader>,
}

/// One term of a query as scored: `weight = boost * idf * (1 + k1)`, and its field.
struct TermPlan {
    /// Index of its field in the query's [`FieldReaders`].
    field: usize,
    weight: Score,
    /// Its dictionary entry in each segment (`None`: absent there).
    infos: Vec<Option<TermInfo>>,
}

impl TermPlan {
    /// The term's posting blocks in segment `ord` (from its dictionary entry there), its
    /// field's length codes there and its field's table.
    fn open<'f>(
        &self,
        fields: &'f [FieldReaders],
        ord: usize,
        info: &TermInfo,
    ) -> Result<
        (
            tantivy::postings::BlockSegmentPostings,
            &'f FieldNormReader,
            &'f FieldTable,
        ),
        ScoreError,
    > {
        let f = &fields[self.field];
        let block = f.inverted[ord]
            .read_block_postings_from_terminfo(info, IndexRecordOption::WithFreqs)?;
        Ok((block, &f.norms[ord], &f.table))
    }
}

/// `score`'s bits as a `u32` whose unsigned order is the scores' numeric order (negative
/// scores included), so candidates sort as plain integers rather than through a float
/// comparison closure (the selection was a fifth of a SciFact query).
#[inline(always)]
fn ordered(score: Score) -> u32 {
    let b = score.to_bits();
    b ^ (((b as i32) >> 31) as u32 | 0x8000_0000)
}

/// The score [`ordered`] made `o` from.
fn unordered(o: u32) -> Score {
    let b = if o & 0x8000_0000 != 0 {
        o ^ 0x8000_0000
    } else {
        !o
    };
    Score::from_bits(b)
}

/// A segment's candidate: its ordered score above its document id, so that a greater key is
/// a better score.
#[inline(always)]
fn candidate(score: Score, doc: DocId) -> u64 {
    (u64::from(ordered(score)) << 32) | u64::from(doc)
}

/// The document of a [`candidate`].
#[inline(always)]
fn candidate_doc(c: u64) -> DocId {
    c as DocId
}

/// The best hits so far over the segments, as keys whose order is the ranking: the ordered
/// score above the complemented card key (a greater key is better; ties go to the smaller
/// card). Kept as a plain vector cut back to `limit` now and then (by selection, in linear
/// time) and sorted once at the end: cheaper than a binary heap's comparisons per push and
/// its heap sort.
struct Best {
    limit: usize,
    keys: Vec<u128>,
}

impl Best {
    fn new(limit: usize) -> Self {
        Best {
            limit,
            keys: Vec::with_capacity(limit.saturating_mul(2).min(1 << 16)),
        }
    }

    /// Keeps only the `limit` best.
    fn cut(&mut self) {
        if self.keys.len() > self.limit {
            self.keys
                .select_nth_unstable_by(self.limit - 1, |a, b| b.cmp(a));
            self.keys.truncate(self.limit);
        }
    }

    /// The score a hit must reach to be kept, once `limit` hits are kept.
    fn floor(&mut self) -> Option<Score> {
        if self.keys.len() < self.limit {
            return None;
        }
        self.cut();
        self.keys.iter().min().map(|k| unordered((k >> 64) as u32))
    }

    fn push(&mut self, score: Score, card: u64) {
        self.keys
            .push((u128::from(ordered(score)) << 64) | u128::from(!card));
        if self.keys.len() >= self.limit.saturating_mul(4).max(64) {
            self.cut();
        }
    }

    /// The best `limit` (score, card key), best first.
    fn into_sorted(mut self) -> Vec<(Score, u64)> {
        self.cut();
        self.keys.sort_unstable_by(|a, b| b.cmp(a));
        self.keys
            .into_iter()
            .map(|k| (unordered((k >> 64) as u32), !(k as u64)))
            .collect()
    }
}

/// A segment-sized score accumulator and the documents it touched, kept per thread between
/// queries so a query allocates nothing once warm. Every entry is zero between queries (a
/// BM25 contribution is always positive, so zero also means "not touched yet").
#[derive(Default)]
struct Scratch {
    scores: Vec<Score>,
    touched: Vec<DocId>,
    /// (score, document) keys ([`candidate`]).
    candidates: Vec<u64>,
    /// Sampled scores for guessing a threshold.
    sample: Vec<u32>,
}

#[cfg(test)]
thread_local! {
    /// Terms only looked up for candidates (not read whole), for tests to see pruning happen.
    pub(crate) static LOOKED_UP: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Segments collected from a guessed threshold, and those collected again because the
    /// guess kept too few, for tests to see both happen.
    pub(crate) static GUESSES: std::cell::Cell<(usize, usize)> =
        const { std::cell::Cell::new((0, 0)) };
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
    /// Recent fields' tables by (field, average length bits): 16 × 256 divisions each, so
    /// built once per index state rather than once per query.
    static TABLES: RefCell<Vec<(u32, u32, Rc<FieldTable>)>> = const { RefCell::new(Vec::new()) };
    /// The card-key column of the segments last searched, by segment: opening a fast field
    /// by name decodes the segment's column directory (6% of a SciFact query when done once
    /// per query and segment).
    static CARD_COLUMNS: RefCell<(String, CardColumns)> =
        const { RefCell::new((String::new(), Vec::new())) };
}

/// Card-key columns by segment.
type CardColumns = Vec<(SegmentId, Column<u64>)>;

/// The card-key column `card` of each of `segments`, from the per-thread cache; entries of
/// segments no longer searched are dropped, so the cache holds the current segments only.
fn card_columns(
    segments: &[tantivy::SegmentReader],
    card: &str,
) -> Result<Vec<Column<u64>>, ScoreError> {
    CARD_COLUMNS.with(|cache| {
        let (name, cache) = &mut *cache.borrow_mut();
        if name != card {
            cache.clear();
            *name = card.to_string();
        }
        let mut columns = Vec::with_capacity(segments.len());
        let mut missed = false;
        for seg in segments {
            let id = seg.segment_id();
            match cache.iter().find(|(s, _)| *s == id) {
                Some((_, column)) => columns.push(column.clone()),
                None => {
                    missed = true;
                    columns.push(seg.fast_fields().u64(card)?);
                }
            }
        }
        if missed {
            *cache = segments
                .iter()
                .map(|s| s.segment_id())
                .zip(columns.iter().cloned())
                .collect();
        }
        Ok(columns)
    })
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
    let (fields, plans) = plan_terms(segments, terms, doc_count)?;
    let mut best = Best::new(limit);
    let cards = card_columns(segments, card)?;
    SCRATCH.with(|scratch| -> Result<(), ScoreError> {
        let mut scratch = scratch.borrow_mut();
        let Scratch {
            scores,
            touched,
            candidates,
            sample,
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
            // The best kept so far from earlier segments bounds what this one must beat.
            let floor = best.floor();
            if filter.is_none() && longest >= prune_min_postings {
                let pruned = Pruned {
                    seg,
                    fields: &fields,
                    plans: &plans,
                    ord,
                    limit,
                    floor: floor.unwrap_or(0.0),
                };
                pruned.run(scores, touched, candidates)?;
                push_best(&cards[ord], None, candidates, &mut best)?;
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
                    let (block, fieldnorms, table) = plan.open(&fields, ord, info)?;
                    let (w, t) = (plan.weight, &mut touched[..]);
                    if dense {
                        accumulate::<true>(block, fieldnorms, table, w, scores, t, &mut n);
                    } else {
                        accumulate::<false>(block, fieldnorms, table, w, scores, t, &mut n);
                    }
                }
                Ok(())
            })();
            let scored = if dense {
                Scored::Dense(max_doc)
            } else {
                Scored::Listed(&touched[..n])
            };
            if result.is_ok() {
                scored.keep(
                    scores,
                    limit,
                    floor,
                    filter.is_none(),
                    seg.alive_bitset(),
                    sample,
                    candidates,
                );
            }
            // The accumulator returns to all zeros (also when reading failed).
            scored.clear(scores);
            result?;
            push_best(&cards[ord], filter, candidates, &mut best)?;
        }
        Ok(())
    })?;
    Ok(best.into_sorted())
}

/// Each field's readers and BM25 table (once per query) and each term's plan: its field, its
/// weight (boost × idf × (k1 + 1)) and its term info per segment. Terms found in no segment
/// are left out.
fn plan_terms(
    segments: &[tantivy::SegmentReader],
    terms: &[(Term, Score)],
    doc_count: u64,
) -> Result<(Vec<FieldReaders>, Vec<TermPlan>), ScoreError> {
    let mut fields: Vec<FieldReaders> = Vec::new();
    let mut plans = Vec::with_capacity(terms.len());
    for (term, boost) in terms {
        let field = term.field();
        let at = match fields.iter().position(|f| f.field == field) {
            Some(at) => at,
            None => {
                let mut inverted = Vec::with_capacity(segments.len());
                let mut norms = Vec::with_capacity(segments.len());
                let mut tokens = 0u64;
                for s in segments {
                    let ix = s.inverted_index(field)?;
                    tokens += ix.total_num_tokens();
                    inverted.push(ix);
                    norms.push(s.get_fieldnorms_reader(field)?);
                }
                fields.push(FieldReaders {
                    field,
                    table: field_table(field, tokens as Score / doc_count as Score),
                    inverted,
                    norms,
                });
                fields.len() - 1
            }
        };
        let mut infos = Vec::with_capacity(segments.len());
        let mut doc_freq = 0u64;
        for ix in &fields[at].inverted {
            let info = ix.get_term_info(term)?;
            doc_freq += info.as_ref().map_or(0, |i| u64::from(i.doc_freq));
            infos.push(info);
        }
        if doc_freq == 0 {
            continue;
        }
        plans.push(TermPlan {
            field: at,
            weight: boost * idf(doc_freq, doc_count) * (1.0 + K1),
            infos,
        });
    }
    Ok((fields, plans))
}

/// The documents a segment's accumulator holds scores for.
#[derive(Clone, Copy)]
enum Scored<'a> {
    /// Every document below this one (untouched ones score zero).
    Dense(usize),
    /// These documents (each once).
    Listed(&'a [DocId]),
}

/// Bit `i` set where `block[i] >= t`, for a block of at most 16 scores: with `AVX512`, one
/// AVX-512 comparison into a mask register (the portable form below compiles to a
/// comparison and then a chain of shuffles that took a sixth of the selection's time).
/// `AVX512` only where this is inlined into a function compiled for AVX-512F
/// ([`collect_above`]).
#[inline(always)]
fn at_least<const AVX512: bool>(block: &[Score], t: Score) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if AVX512 && let Ok(block) = <&[Score; 16]>::try_from(block) {
        use std::arch::x86_64::{_CMP_GE_OQ, _mm512_cmp_ps_mask, _mm512_loadu_ps, _mm512_set1_ps};
        // SAFETY: with `AVX512` the caller is compiled for AVX-512F and runs only where the
        // CPU has it (`collect_above`); the load reads the 16 floats of `block`, which is
        // exactly 16 long.
        let mask = unsafe {
            _mm512_cmp_ps_mask::<_CMP_GE_OQ>(_mm512_loadu_ps(block.as_ptr()), _mm512_set1_ps(t))
        };
        return u32::from(mask);
    }
    block
        .iter()
        .enumerate()
        .fold(0u32, |m, (i, &s)| m | (u32::from(s >= t) << i))
}

/// Pushes into `out` the candidates of the first `max_doc` scores that reach `t` (> 0),
/// sixteen scores compared at a time, only the kept ones visited by their bits; on the
/// path of the level chosen for the process ([`situate_core::cpu::chosen`]).
fn collect_above(scores: &[Score], max_doc: usize, t: Score, out: &mut Vec<u64>) {
    collect_above_at(situate_core::cpu::chosen(), scores, max_doc, t, out)
}

/// [`collect_above`] on the path of `level` (one the CPU runs).
fn collect_above_at(
    level: situate_core::cpu::Level,
    scores: &[Score],
    max_doc: usize,
    t: Score,
    out: &mut Vec<u64>,
) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx2,fma")]
        fn avx512(scores: &[Score], max_doc: usize, t: Score, out: &mut Vec<u64>) {
            collect_above_generic::<true>(scores, max_doc, t, out)
        }
        #[target_feature(enable = "avx2,fma")]
        fn avx2(scores: &[Score], max_doc: usize, t: Score, out: &mut Vec<u64>) {
            collect_above_generic::<false>(scores, max_doc, t, out)
        }
        if level.avx512() {
            // SAFETY: the level is one the CPU runs (AVX-512F, AVX2, FMA).
            return unsafe { avx512(scores, max_doc, t, out) };
        }
        if level.avx2() {
            // SAFETY: the level is one the CPU runs (AVX2 and FMA).
            return unsafe { avx2(scores, max_doc, t, out) };
        }
    }
    let _ = level;
    collect_above_generic::<false>(scores, max_doc, t, out)
}

#[inline(always)]
fn collect_above_generic<const AVX512: bool>(
    scores: &[Score],
    max_doc: usize,
    t: Score,
    out: &mut Vec<u64>,
) {
    // Whole blocks first (the loop the compiler keeps free of length checks), then the
    // remainder.
    let blocks = scores[..max_doc].chunks_exact(16);
    let rest = blocks.remainder();
    for (base, block) in blocks
        .enumerate()
        .map(|(b, x)| (b * 16, x))
        .chain([(max_doc - rest.len(), rest)])
    {
        let mut kept = at_least::<AVX512>(block, t);
        while kept != 0 {
            let i = kept.trailing_zeros() as usize;
            out.push(candidate(block[i], (base + i) as DocId));
            kept &= kept - 1;
        }
    }
}

/// One document in this many is sampled to guess the selection's threshold.
const SAMPLE_EVERY: usize = 16;

impl Scored<'_> {
    /// Collects into `out` the (score, document) keys of the documents that can be kept:
    /// alive, above `floor` (the best kept so far from earlier segments) and, when `guess` (no
    /// filter, so every document collected is a candidate), above a threshold guessed from a
    /// sample, collected again from `floor` when the guess kept fewer than `limit`.
    #[allow(clippy::too_many_arguments)]
    fn keep(
        self,
        scores: &[Score],
        limit: usize,
        floor: Option<Score>,
        guess: bool,
        alive: Option<&AliveBitSet>,
        sample: &mut Vec<u32>,
        out: &mut Vec<u64>,
    ) {
        let floor = floor.map_or(0, ordered);
        let guess = if guess {
            self.guess_threshold(scores, limit, sample)
        } else {
            None
        };
        let min = guess.map_or(floor, |g| g.max(floor));
        self.collect(scores, min, alive, out);
        let missed = min > floor && out.len() < limit;
        #[cfg(test)]
        GUESSES.with(|c| {
            let (g, again) = c.get();
            c.set((
                g + usize::from(guess.is_some()),
                again + usize::from(missed),
            ));
        });
        if missed {
            // The guess was too high: collect again from the bound that is sure.
            self.collect(scores, floor, alive, out);
        }
    }

    /// A threshold (an [`ordered`] score) that about `2 * limit` of the scored documents
    /// reach, guessed from the scores of one document in [`SAMPLE_EVERY`]; `None` when the
    /// documents are too few for a guess to save anything. Collecting only the documents that
    /// reach it leaves a few hundred keys to select from instead of thousands (selecting from
    /// every scored document was a tenth of a SciFact query). It is only a guess: a collection
    /// that keeps fewer than `limit` is done again without it.
    fn guess_threshold(self, scores: &[Score], limit: usize, sample: &mut Vec<u32>) -> Option<u32> {
        sample.clear();
        let scored = match self {
            Scored::Dense(max_doc) => {
                // Untouched documents (zeros) included, and counted without a branch: they
                // rank below every touched one.
                sample.extend(
                    scores[..max_doc]
                        .iter()
                        .step_by(SAMPLE_EVERY)
                        .map(|&s| ordered(s)),
                );
                let zero = ordered(0.0);
                sample.iter().map(|&o| usize::from(o != zero)).sum()
            }
            Scored::Listed(docs) => {
                sample.extend(
                    docs.iter()
                        .step_by(SAMPLE_EVERY)
                        .map(|&d| ordered(scores[d as usize])),
                );
                sample.len()
            }
        };
        // The sample's rank that about 2 * limit documents in all reach.
        let rank = (2 * limit).div_ceil(SAMPLE_EVERY);
        if scored < 4 * rank {
            return None;
        }
        let at = sample.len() - rank;
        Some(*sample.select_nth_unstable(at).1)
    }

    /// Sets `out` to the [`candidate`] keys of the scored documents whose ordered score is
    /// at least `min`, deleted documents (those of `alive`'s segment) left out.
    fn collect(self, scores: &[Score], min: u32, alive: Option<&AliveBitSet>, out: &mut Vec<u64>) {
        out.clear();
        match self {
            Scored::Dense(max_doc) if min <= ordered(0.0) => {
                // Most documents are kept: without a branch per document (whether a document
                // was touched is close to a coin toss).
                out.resize(max_doc, 0);
                let mut n = 0;
                for (doc, &score) in scores[..max_doc].iter().enumerate() {
                    if let Some(c) = out.get_mut(n) {
                        *c = candidate(score, doc as DocId);
                    }
                    n += usize::from((score != 0.0) & (ordered(score) >= min));
                }
                out.truncate(n);
            }
            Scored::Dense(max_doc) => {
                // Few documents are kept: sixteen scores compared at a time into a bit
                // mask, and only the documents kept visited, by their bits. `min` is above
                // zero's, so `t` is positive.
                collect_above(scores, max_doc, unordered(min), out);
            }
            Scored::Listed(docs) => out.extend(
                docs.iter()
                    .map(|&d| candidate(scores[d as usize], d))
                    .filter(|&c| (c >> 32) as u32 >= min),
            ),
        }
        if let Some(alive) = alive {
            out.retain(|&c| !alive.is_deleted(candidate_doc(c)));
        }
    }

    /// Returns the accumulator to all zeros.
    fn clear(self, scores: &mut [Score]) {
        match self {
            Scored::Dense(max_doc) => scores[..max_doc].fill(0.0),
            Scored::Listed(docs) => {
                for &d in docs {
                    scores[d as usize] = 0.0;
                }
            }
        }
    }
}

/// Pushes the segment's `candidates` ([`candidate`] keys of live documents) that can still be
/// among the best into `best`, leaving out those `filter` refuses.
fn push_best(
    cards: &Column<u64>,
    filter: Option<&CardSet>,
    candidates: &mut Vec<u64>,
    best: &mut Best,
) -> Result<(), ScoreError> {
    // Without a filter, only the best `limit` (and any tied with the last of them) can be
    // kept: select them in linear time before reading any card key.
    let limit = best.limit;
    if filter.is_none() && candidates.len() > limit {
        let at = candidates.len() - limit;
        let threshold = *candidates.select_nth_unstable(at).1 >> 32;
        candidates.retain(|&c| c >> 32 >= threshold);
    }
    let floor = best.floor();
    for &c in candidates.iter() {
        let score = unordered((c >> 32) as u32);
        if floor.is_some_and(|f| score < f) {
            continue;
        }
        let Some(key) = cards.first(candidate_doc(c)) else {
            continue;
        };
        if filter.is_some_and(|f| !f.contains(key)) {
            continue;
        }
        best.push(score, key);
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
    fields: &'a [FieldReaders],
    plans: &'a [TermPlan],
    ord: usize,
    limit: usize,
    /// The score a document must reach to be kept (from earlier segments; 0 if none).
    floor: Score,
}

impl Pruned<'_> {
    /// Leaves in `candidates` the documents that can be among the best, scored completely
    /// ([`candidate`] keys), and the accumulator all zeros again.
    fn run(
        &self,
        scores: &mut [Score],
        touched: &mut Vec<DocId>,
        candidates: &mut Vec<u64>,
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
                let (block, fieldnorms, table) = plan.open(self.fields, ord, info)?;
                let need = n + info.doc_freq as usize;
                if touched.len() < need {
                    touched.resize(need, 0);
                }
                let w = plan.weight;
                accumulate::<false>(block, fieldnorms, table, w, scores, touched, &mut n);
            }
            // The documents that can still make it, in document order for the lookups (keys
            // with no score yet sort by document).
            candidates.clear();
            candidates.extend(
                touched[..n]
                    .iter()
                    .filter(|&&d| live(d))
                    .filter(|&&d| scores[d as usize] + rest[first_lookup] * BOUND_SLACK >= theta)
                    .map(|&d| u64::from(d)),
            );
            candidates.sort_unstable();
            for (j, (plan, info)) in order.iter().enumerate().skip(first_lookup) {
                #[cfg(test)]
                LOOKED_UP.with(|c| c.set(c.get() + 1));
                let (mut block, fieldnorms, table) = plan.open(self.fields, ord, info)?;
                for doc in candidates.iter().map(|&c| candidate_doc(c)) {
                    let at = block.seek(doc);
                    if block.docs().get(at) == Some(&doc) {
                        let factor = table.factor(block.freq(at), fieldnorms.fieldnorm_id(doc));
                        scores[doc as usize] += plan.weight * factor;
                    }
                }
                let bound = rest[j + 1] * BOUND_SLACK;
                candidates.retain(|&c| scores[candidate_doc(c) as usize] + bound >= theta);
            }
            for c in candidates.iter_mut() {
                let doc = candidate_doc(*c);
                *c = candidate(scores[doc as usize], doc);
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
        buf: &mut Vec<u64>,
    ) -> Score {
        buf.clear();
        buf.extend(
            docs.iter()
                .filter(|&&d| live(d))
                .map(|&d| candidate(scores[d as usize], d)),
        );
        if buf.len() < self.limit {
            return 0.0;
        }
        let at = buf.len() - self.limit;
        unordered((*buf.select_nth_unstable(at).1 >> 32) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`ordered`] keeps the scores' total order (negative ones, zeros and ties included) and
    /// [`unordered`] undoes it.
    #[test]
    fn ordered_scores_sort_as_integers() {
        let scores: [Score; 9] = [-3.5, -1e-20, -0.0, 0.0, 1e-30, 0.5, 0.5, 7.25, 1e30];
        for w in scores.windows(2) {
            // IEEE's total order (which puts -0 before +0).
            assert_eq!(
                w[0].total_cmp(&w[1]),
                ordered(w[0]).cmp(&ordered(w[1])),
                "{w:?}"
            );
        }
        for s in scores {
            assert_eq!(unordered(ordered(s)).to_bits(), s.to_bits());
        }
        // A candidate's key orders by score, then by document.
        assert!(candidate(2.0, 0) > candidate(1.0, 9));
        assert!(candidate(1.0, 9) > candidate(1.0, 3));
        assert_eq!(candidate_doc(candidate(1.0, 77)), 77);
    }

    /// `n` scores from 0 to 3.5 in steps of 0.5 (many ties), from an xorshift `state`.
    fn half_steps(state: &mut u32, n: usize) -> Vec<Score> {
        (0..n)
            .map(|_| {
                *state ^= *state << 13;
                *state ^= *state >> 17;
                *state ^= *state << 5;
                (*state % 8) as Score * 0.5
            })
            .collect()
    }

    /// The candidates kept above a threshold, on every path this CPU runs, are those
    /// found score by score (ties at the threshold included), in document order.
    #[test]
    fn every_path_keeps_every_score_reaching_the_threshold() {
        let mut state = 0x9e37_79b9_u32;
        for round in 0..200 {
            let n = 1 + round * 7 % 61;
            let scores = half_steps(&mut state, n);
            let t = (1 + round % 8) as Score * 0.5;
            let want: Vec<u64> = (0..n)
                .filter(|&d| scores[d] >= t)
                .map(|d| candidate(scores[d], d as DocId))
                .collect();
            for level in situate_core::cpu::levels_here() {
                let mut got = Vec::new();
                collect_above_at(level, &scores, n, t, &mut got);
                assert_eq!(got, want, "{level}: {scores:?} >= {t}");
            }
        }
    }

    /// The mask of a block's scores at or above a threshold, in the portable form, is the
    /// one computed score by score (ties at the threshold included).
    #[test]
    fn at_least_marks_every_score_reaching_the_threshold() {
        let mut state = 0x9e37_79b9_u32;
        for round in 0..200 {
            let block = half_steps(&mut state, 16);
            let t = (round % 9) as Score * 0.5;
            let expected = block
                .iter()
                .enumerate()
                .filter(|(_, s)| **s >= t)
                .fold(0u32, |m, (i, _)| m | 1 << i);
            assert_eq!(at_least::<false>(&block, t), expected, "{block:?} >= {t}");
        }
    }

    /// The best hits over several pushes and cuts are the best `limit`, ranked by score and
    /// then by the smaller card.
    #[test]
    fn best_keeps_the_top_limit_in_order() {
        let mut best = Best::new(3);
        for (i, score) in [1.0, 5.0, 3.0, 5.0, 0.5, 4.0, 3.0].into_iter().enumerate() {
            best.push(score, 100 - i as u64);
        }
        assert_eq!(best.floor(), Some(4.0));
        assert_eq!(best.into_sorted(), vec![(5.0, 97), (5.0, 99), (4.0, 95)]);
    }
}
