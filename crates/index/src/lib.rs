//! Contextual BM25 on tantivy, persistent on disk.
//!
//! One tantivy index holds every chunk. Each chunk's context and original text go into
//! *separate* fields (`ctx_<lang>` and `orig_<lang>`), so the same index answers plain BM25
//! (original only) and contextual BM25 (both, with a tunable weight on the context). Fields
//! are per language because tantivy analyzes per field: a document's language (detected at
//! ingest, or overridden) picks the fields, hence the analyzer, of all its chunks. A query is
//! analyzed once per language present, with that language's analyzer, against that
//! language's fields.
//!
//! Each chunk also carries its document id (an untokenized term, so a document's chunks are
//! deleted in one call) and its card key (a fast field, so a hit maps to its card without
//! touching tantivy's document store, which this index does not use).
//!
//! Every commit records the card store's generation as its payload: the engine compares
//! it with the store's and replays what the index missed (see `situate-engine`).
#![warn(missing_docs)]

pub mod analyzers;
pub mod scorer;

pub use analyzers::ChineseTokenizer;

use situate_core::{IndexError, IndexHit, Language, LexicalIndex, LexicalQuery, MatchOn};
use std::path::Path;
use tantivy::schema::{
    Field, IndexRecordOption, NumericOptions, STRING, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::tokenizer::{TextAnalyzer, Token};
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term};

/// Errors of the BM25 index.
#[derive(Debug, thiserror::Error)]
pub enum Bm25Error {
    /// tantivy failed.
    #[error("BM25 index: {op}: {source}")]
    Tantivy {
        /// What the index was doing.
        op: &'static str,
        /// tantivy's error.
        source: tantivy::TantivyError,
    },
    /// A search failed reading the index.
    #[error("BM25 index: searching: {0}")]
    Search(#[from] scorer::ScoreError),
    /// The index on disk is not one this build reads.
    #[error("BM25 index: {0}")]
    Format(String),
}

type Result<T> = std::result::Result<T, Bm25Error>;

trait Op<T> {
    fn op(self, op: &'static str) -> Result<T>;
}

impl<T> Op<T> for tantivy::Result<T> {
    fn op(self, op: &'static str) -> Result<T> {
        self.map_err(|source| Bm25Error::Tantivy { op, source })
    }
}

/// The writer's memory budget: tantivy flushes a segment when it is reached.
const WRITER_MEMORY: usize = 64 << 20;

#[derive(Clone, Copy)]
struct LangFields {
    context: Field,
    original: Field,
}

/// The BM25 index of one situate index directory.
pub struct Bm25Index {
    index: Index,
    reader: IndexReader,
    writer: Option<IndexWriter>,
    doc_field: Field,
    card_field: Field,
    fields: [LangFields; 4],
    analyzers: [TextAnalyzer; 4],
}

fn lang_slot(l: Language) -> usize {
    match l {
        Language::En => 0,
        Language::Ru => 1,
        Language::Zh => 2,
        Language::Other => 3,
    }
}

fn schema() -> Schema {
    let mut b = Schema::builder();
    b.add_text_field("doc", STRING);
    b.add_u64_field("card", NumericOptions::default().set_fast());
    for lang in Language::ALL {
        let opts = TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer(analyzers::tokenizer_name(lang))
                .set_index_option(IndexRecordOption::WithFreqs),
        );
        b.add_text_field(&format!("ctx_{}", lang.code()), opts.clone());
        b.add_text_field(&format!("orig_{}", lang.code()), opts);
    }
    b.build()
}

/// The files of a committed segment of this schema: tantivy writes every component, and a
/// `.del` file once the segment has deletions.
fn segment_files(seg: &tantivy::index::SegmentMeta) -> Vec<std::path::PathBuf> {
    use tantivy::index::SegmentComponent as C;
    let mut parts = vec![
        C::Postings,
        C::Positions,
        C::Terms,
        C::Store,
        C::FastFields,
        C::FieldNorms,
    ];
    if seg.has_deletes() {
        parts.push(C::Delete);
    }
    parts.into_iter().map(|p| seg.relative_path(p)).collect()
}

impl Bm25Index {
    /// Opens the index in `dir`, creating it (and the directory) if it does not exist.
    pub fn open(dir: &Path, chinese: ChineseTokenizer) -> Result<Self> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Bm25Error::Format(format!("cannot create {}: {e}", dir.display())))?;
        let index = if dir.join("meta.json").exists() {
            Index::open_in_dir(dir).op("opening")?
        } else {
            Index::create_in_dir(dir, schema()).op("creating")?
        };
        Self::from_index(index, chinese, dir)
    }

    fn from_index(index: Index, chinese: ChineseTokenizer, dir: &Path) -> Result<Self> {
        let s = index.schema();
        let field = |name: &str| {
            s.get_field(name).map_err(|_| {
                Bm25Error::Format(format!(
                    "{} has no field {name}: not a situate index of this version",
                    dir.display()
                ))
            })
        };
        let mut fields = [LangFields {
            context: field("doc")?,
            original: field("doc")?,
        }; 4];
        for lang in Language::ALL {
            fields[lang_slot(lang)] = LangFields {
                context: field(&format!("ctx_{}", lang.code()))?,
                original: field(&format!("orig_{}", lang.code()))?,
            };
        }
        let analyzers = Language::ALL.map(|l| analyzers::analyzer(l, chinese));
        for lang in Language::ALL {
            index.tokenizers().register(
                analyzers::tokenizer_name(lang),
                analyzers[lang_slot(lang)].clone(),
            );
        }
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .op("opening a reader")?;
        Ok(Bm25Index {
            doc_field: field("doc")?,
            card_field: field("card")?,
            index,
            reader,
            writer: None,
            fields,
            analyzers,
        })
    }

    /// An empty index held in memory: what an engine opened to repair holds in place of a
    /// damaged one until the rebuild replaces it.
    pub fn in_memory(chinese: ChineseTokenizer) -> Result<Self> {
        let index = Index::create_in_ram(schema());
        Self::from_index(index, chinese, Path::new("(memory)"))
    }

    /// Checks the committed segments' files: each must exist and match the checksum
    /// tantivy wrote in its footer (a flipped byte anywhere in a file is caught; tantivy
    /// itself only reads what a search touches, and some damage changes scores silently).
    /// Returns one line per damaged or missing file; empty when every file is sound.
    pub fn verify(&self) -> Result<Vec<String>> {
        let metas = self.index.load_metas().op("reading the segment list")?;
        let mut found = Vec::new();
        let dir = self.index.directory();
        for seg in &metas.segments {
            for name in segment_files(seg) {
                if !tantivy::Directory::exists(dir, &name).unwrap_or(false) {
                    found.push(format!("{} is missing", name.display()));
                }
            }
        }
        if found.is_empty() {
            match self.index.validate_checksum() {
                Ok(bad) => {
                    let mut bad: Vec<String> = bad
                        .into_iter()
                        .map(|p| format!("{} does not match its checksum", p.display()))
                        .collect();
                    bad.sort();
                    found.extend(bad);
                }
                Err(e) => found.push(format!("a file cannot be read: {e}")),
            }
        }
        Ok(found)
    }

    /// Copies the index in `src`, as of its last commit, into `dst` (which must not
    /// exist), and checks the copy: `meta.json` is read first, then tantivy's list of the
    /// files it manages, then the files of the segments that `meta.json` names. A writer
    /// committing meanwhile may remove a segment being copied: the copy then fails and the
    /// caller tries again. Returns the copy's generation.
    pub fn copy_committed(src: &Path, dst: &Path, chinese: ChineseTokenizer) -> Result<u64> {
        let io = |what: &str, p: &Path, e: std::io::Error| {
            Bm25Error::Format(format!("{what} {}: {e}", p.display()))
        };
        let read = |name: &str| {
            let p = src.join(name);
            std::fs::read(&p).map_err(|e| io("cannot read", &p, e))
        };
        let meta = read("meta.json")?;
        let managed = read(".managed.json")?;
        std::fs::create_dir(dst).map_err(|e| io("cannot create", dst, e))?;
        for (name, bytes) in [("meta.json", &meta), (".managed.json", &managed)] {
            let p = dst.join(name);
            std::fs::write(&p, bytes).map_err(|e| io("cannot write", &p, e))?;
        }
        let metas = Index::open_in_dir(dst)
            .op("reading the copied segment list")?
            .load_metas()
            .op("reading the copied segment list")?;
        for seg in &metas.segments {
            for name in segment_files(seg) {
                let (from, to) = (src.join(&name), dst.join(&name));
                std::fs::copy(&from, &to).map_err(|e| io("cannot copy", &from, e))?;
            }
        }
        let copy = Bm25Index::open(dst, chinese)?;
        let found = copy.verify()?;
        if let Some(first) = found.first() {
            return Err(Bm25Error::Format(format!(
                "the copy of {} failed its check: {first}",
                src.display()
            )));
        }
        copy.generation()
    }

    /// The card store generation this index has caught up with (0 for a new index).
    pub fn generation(&self) -> Result<u64> {
        let metas = self.index.load_metas().op("reading the commit payload")?;
        Ok(metas
            .payload
            .as_deref()
            .and_then(|p| p.strip_prefix("generation="))
            .and_then(|g| g.parse().ok())
            .unwrap_or(0))
    }

    fn writer(&mut self) -> Result<&mut IndexWriter> {
        if self.writer.is_none() {
            // One indexing thread: the second core chunks and contextualizes meanwhile.
            let w: IndexWriter = self
                .index
                .writer_with_num_threads(1, WRITER_MEMORY)
                .op("opening the writer")?;
            // Merge eagerly (two segments of a level suffice): every query pays per segment,
            // and ingests end by waiting for the merges (`finish_merges`).
            let mut policy = tantivy::merge_policy::LogMergePolicy::default();
            policy.set_min_num_segments(2);
            w.set_merge_policy(Box::new(policy));
            self.writer = Some(w);
        }
        Ok(self.writer.as_mut().expect("just set"))
    }

    /// Deletes every chunk of a document (effective at the next commit).
    pub fn delete_document(&mut self, document_id: &str) -> Result<()> {
        let term = Term::from_field_text(self.doc_field, document_id);
        self.writer()?.delete_term(term);
        Ok(())
    }

    /// Adds one chunk (effective at the next commit).
    pub fn add_chunk(
        &mut self,
        card: u64,
        document_id: &str,
        language: Language,
        context: Option<&str>,
        original: &str,
    ) -> Result<()> {
        let f = self.fields[lang_slot(language)];
        let mut doc = TantivyDocument::default();
        doc.add_text(self.doc_field, document_id);
        doc.add_u64(self.card_field, card);
        if let Some(c) = context {
            doc.add_text(f.context, c);
        }
        doc.add_text(f.original, original);
        self.writer()?.add_document(doc).op("adding a chunk")?;
        Ok(())
    }

    /// Commits everything added and deleted, recording the store generation it reflects.
    pub fn commit(&mut self, generation: u64) -> Result<()> {
        let w = self.writer()?;
        let mut prepared = w.prepare_commit().op("preparing a commit")?;
        prepared.set_payload(&format!("generation={generation}"));
        prepared.commit().op("committing")?;
        self.reader.reload().op("reloading the reader")?;
        Ok(())
    }

    /// Drops the writer (releasing its lock and threads), discarding uncommitted changes.
    pub fn close_writer(&mut self) {
        self.writer = None;
    }

    /// Lets the background merges started by earlier commits finish, then drops the writer.
    /// Call at the end of a bulk write: fewer segments make every query cheaper.
    pub fn finish_merges(&mut self) -> Result<()> {
        if let Some(w) = self.writer.take() {
            w.wait_merging_threads().op("finishing segment merges")?;
            self.reader.reload().op("reloading the reader")?;
        }
        Ok(())
    }

    /// Merges every segment into one (tantivy keeps the commit payload), then finishes.
    pub fn merge_all(&mut self) -> Result<()> {
        let ids = self.index.searchable_segment_ids().op("listing segments")?;
        if ids.len() > 1 {
            self.writer()?.merge(&ids).wait().op("merging segments")?;
        }
        self.finish_merges()
    }

    /// Number of segments in the committed index.
    pub fn num_segments(&self) -> usize {
        self.reader.searcher().segment_readers().len()
    }

    /// Number of chunks in the committed index.
    pub fn num_chunks(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    /// Every live chunk's card key (for consistency checks).
    pub fn card_keys(&self) -> Result<Vec<u64>> {
        let searcher = self.reader.searcher();
        let mut keys = Vec::with_capacity(searcher.num_docs() as usize);
        for seg in searcher.segment_readers() {
            let col = seg.fast_fields().u64("card").op("reading card keys")?;
            for doc in seg.doc_ids_alive() {
                keys.extend(col.first(doc));
            }
        }
        Ok(keys)
    }

    fn query_terms(&self, text: &str, lang: Language, field: Field) -> Vec<Term> {
        let mut analyzer = self.analyzers[lang_slot(lang)].clone();
        let mut stream = analyzer.token_stream(text);
        let mut terms = Vec::new();
        stream.process(&mut |t: &Token| terms.push(Term::from_field_text(field, &t.text)));
        terms
    }

    /// The query's terms with their weights: per language asked, the analyzed query against
    /// the original field and (contextual BM25) the context field. A term that occurs twice
    /// weighs twice, as two clauses would in Lucene, but is scored once.
    fn weighted_terms(&self, q: &LexicalQuery<'_>) -> Vec<(Term, f32)> {
        let langs: &[Language] = if q.languages.is_empty() {
            &Language::ALL
        } else {
            q.languages
        };
        // A handful of terms: sorted and merged rather than hashed (SipHash over every term
        // was 1.6% of a SciFact query).
        let mut terms: Vec<(Term, f32)> = Vec::new();
        for &lang in langs {
            let f = self.fields[lang_slot(lang)];
            for term in self.query_terms(q.text, lang, f.original) {
                if q.match_on == MatchOn::Contextual && q.context_weight > 0.0 {
                    let ctx =
                        Term::from_field_text(f.context, term.value().as_str().unwrap_or_default());
                    terms.push((ctx, q.context_weight));
                }
                terms.push((term, 1.0));
            }
        }
        // A fixed order (identical sums, identical ties), each term once with its weights
        // summed.
        terms.sort_by(|a, b| a.0.cmp(&b.0));
        terms.dedup_by(|next, kept| {
            let same = next.0 == kept.0;
            if same {
                kept.1 += next.1;
            }
            same
        });
        terms
    }
}

impl LexicalIndex for Bm25Index {
    /// The sum of BM25 over the distinct query terms and fields (each weighted by its count
    /// and the context weight), as a `BooleanQuery` of `Should` term queries scores it,
    /// computed term at a time by [`scorer::top_cards`].
    fn search(&self, q: &LexicalQuery<'_>) -> std::result::Result<Vec<IndexHit>, IndexError> {
        if q.limit == 0 {
            return Ok(Vec::new());
        }
        let terms = self.weighted_terms(q);
        if terms.is_empty() {
            return Ok(Vec::new()); // nothing left after analysis (only stop words, punctuation)
        }
        let searcher = self.reader.searcher();
        let top = scorer::top_cards(&searcher, &terms, "card", q.limit, q.filter)
            .map_err(Bm25Error::from)?;
        Ok(top
            .into_iter()
            .map(|(score, card)| IndexHit { card, score })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (xorshift) from `seed`.
    fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }

    fn q<'a>(text: &'a str, match_on: MatchOn) -> LexicalQuery<'a> {
        LexicalQuery {
            text,
            limit: 10,
            match_on,
            context_weight: 1.0,
            languages: &[],
            filter: None,
        }
    }

    /// The term-at-a-time scorer against tantivy's own `BooleanQuery` + `TopDocs` on the
    /// same index: three segments, deleted documents, boosted context terms, repeated query
    /// words. Same cards in the same order, same scores (to float rounding).
    #[test]
    fn scorer_matches_tantivys_boolean_query() {
        use tantivy::collector::TopDocs;
        use tantivy::query::{BooleanQuery, BoostQuery, Occur, Query, TermQuery};
        let dir = tempfile::tempdir().unwrap();
        let mut idx = Bm25Index::open(dir.path(), ChineseTokenizer::Bigram).unwrap();
        let words = [
            "river", "bank", "loan", "interest", "rate", "water", "fish", "money", "credit",
            "stream", "flood", "account", "deposit", "boat", "mortgage", "current", "shore", "fee",
            "branch", "valley", "quarter", "revenue", "growth", "market",
        ];
        // Zipf-ish word choice by squaring.
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15u64);
        let mut card = 0u64;
        for segment in 0..3 {
            for d in 0..120 {
                let mut text = |max: u64| {
                    let len = 3 + next() % max;
                    (0..len)
                        .map(|_| {
                            let r = (next() % 1000) as f64 / 1000.0;
                            words[((r * r) * words.len() as f64) as usize]
                        })
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                let mut original = text(40);
                if d % 20 == 3 {
                    // A rare word: its postings are few for a segment's size, which takes the
                    // scorer's sparse path (documents touched listed, not scanned).
                    original.push_str(" zephyr");
                }
                let context = if d % 3 != 0 { Some(text(12)) } else { None };
                let doc = format!("s{segment}d{d}");
                idx.add_chunk(card, &doc, Language::En, context.as_deref(), &original)
                    .unwrap();
                card += 1;
            }
            idx.commit(segment + 1).unwrap();
        }
        for d in (0..120).step_by(7) {
            idx.delete_document(&format!("s1d{d}")).unwrap();
        }
        idx.commit(4).unwrap();
        idx.close_writer();
        assert!(idx.num_segments() >= 2, "the test needs several segments");
        let searcher = idx.reader.searcher();
        for (text, match_on, weight) in [
            ("river bank loan", MatchOn::Plain, 1.0),
            (
                "bank bank interest rate of the loan",
                MatchOn::Contextual,
                0.5,
            ),
            (
                "fish boat shore water stream valley flood",
                MatchOn::Contextual,
                1.0,
            ),
            (
                "revenue growth market quarter credit fee",
                MatchOn::Plain,
                1.0,
            ),
            (
                "mortgage deposit account branch current",
                MatchOn::Contextual,
                0.25,
            ),
            ("zephyr", MatchOn::Plain, 1.0),
            ("zephyr zephyr", MatchOn::Contextual, 0.5),
        ] {
            let limit = 25;
            let query = LexicalQuery {
                limit,
                context_weight: weight,
                ..q(text, match_on)
            };
            let ours = idx.search(&query).unwrap();
            let clauses: Vec<(Occur, Box<dyn Query>)> = idx
                .weighted_terms(&query)
                .into_iter()
                .map(|(term, w)| {
                    let tq = TermQuery::new(term, IndexRecordOption::WithFreqs);
                    (
                        Occur::Should,
                        Box::new(BoostQuery::new(Box::new(tq), w)) as Box<dyn Query>,
                    )
                })
                .collect();
            let top = searcher
                .search(
                    &BooleanQuery::new(clauses),
                    &TopDocs::with_limit(1000).order_by_score(),
                )
                .unwrap();
            let mut theirs: Vec<(f32, u64)> = top
                .into_iter()
                .map(|(score, addr)| {
                    let seg = searcher.segment_reader(addr.segment_ord);
                    let col = seg.fast_fields().u64("card").unwrap();
                    (score, col.first(addr.doc_id).unwrap())
                })
                .collect();
            theirs.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            theirs.truncate(limit);
            assert_eq!(ours.len(), theirs.len(), "{text}");
            assert!(
                ours.len() >= 10 || text.starts_with("zephyr"),
                "{text}: too few hits"
            );
            assert!(!ours.is_empty(), "{text}: no hits");
            for (i, (o, t)) in ours.iter().zip(&theirs).enumerate() {
                assert!(
                    (o.score - t.0).abs() <= 1e-5 * t.0.max(1.0),
                    "{text}: rank {i}: score {} against tantivy's {}",
                    o.score,
                    t.0
                );
                // Same card unless tantivy's neighbour has (nearly) the same score.
                if o.card != t.1 {
                    let near = theirs
                        .iter()
                        .any(|x| x.1 == o.card && (x.0 - t.0).abs() <= 1e-5);
                    assert!(
                        near,
                        "{text}: rank {i}: card {} against tantivy's {}",
                        o.card, t.1
                    );
                }
            }
        }
        // A filter keeps exactly the allowed cards of the unfiltered ranking, in its order.
        let all = idx
            .search(&LexicalQuery {
                limit: 10_000,
                ..q("river bank loan water", MatchOn::Contextual)
            })
            .unwrap();
        let allowed: situate_core::CardSet = (0..card).filter(|c| c % 5 == 2).collect();
        let filtered = idx
            .search(&LexicalQuery {
                limit: 7,
                filter: Some(&allowed),
                ..q("river bank loan water", MatchOn::Contextual)
            })
            .unwrap();
        let expected: Vec<u64> = all
            .iter()
            .map(|h| h.card)
            .filter(|c| allowed.contains(*c))
            .take(7)
            .collect();
        assert_eq!(
            filtered.iter().map(|h| h.card).collect::<Vec<_>>(),
            expected
        );
        // A deleted document never comes back.
        let all = idx
            .search(&LexicalQuery {
                limit: 10_000,
                ..q(
                    "river bank loan interest rate water fish money",
                    MatchOn::Plain,
                )
            })
            .unwrap();
        for d in (0..120).step_by(7) {
            let deleted_card = 120 + d as u64;
            assert!(
                all.iter().all(|h| h.card != deleted_card),
                "deleted card {deleted_card} found"
            );
        }
    }

    /// Pruned scoring (MaxScore, term at a time) returns the exhaustive top k: Zipf-like
    /// documents over three segments with deletes, queries mixing rare and common words,
    /// several k; and it does leave lists unread.
    #[test]
    fn pruned_scoring_matches_exhaustive_scoring() {
        let dir = tempfile::tempdir().unwrap();
        let mut idx = Bm25Index::open(dir.path(), ChineseTokenizer::Bigram).unwrap();
        let words: Vec<String> = (0..300).map(|i| format!("w{i}x")).collect();
        let mut next = xorshift(0x2545_f491_4f6c_dd1du64);
        let mut card = 0u64;
        for segment in 0..3u64 {
            for d in 0..700 {
                let len = 5 + next() % 60;
                let text: Vec<&str> = (0..len)
                    .map(|_| {
                        let r = (next() % 10_000) as f64 / 10_000.0;
                        words[(r.powi(4) * words.len() as f64) as usize].as_str()
                    })
                    .collect();
                let context = (d % 2 == 0).then(|| text[..3.min(text.len())].join(" "));
                idx.add_chunk(
                    card,
                    &format!("s{segment}d{d}"),
                    Language::En,
                    context.as_deref(),
                    &text.join(" "),
                )
                .unwrap();
                card += 1;
            }
            idx.commit(segment + 1).unwrap();
        }
        for d in (0..700).step_by(5) {
            idx.delete_document(&format!("s0d{d}")).unwrap();
        }
        idx.commit(4).unwrap();
        idx.close_writer();
        let searcher = idx.reader.searcher();
        scorer::LOOKED_UP.with(|c| c.set(0));
        let mut compared = 0;
        for qi in 0..40u64 {
            // Two or three rarer words and three of the most common ones.
            let mut text: Vec<&str> = (0..3)
                .map(|j| words[((qi * 7 + j * 13) % 200 + 60) as usize].as_str())
                .collect();
            text.extend((0..3).map(|j| words[((qi + j) % 6) as usize].as_str()));
            let text = text.join(" ");
            for (match_on, limit) in [
                (MatchOn::Plain, 1),
                (MatchOn::Contextual, 10),
                (MatchOn::Plain, 25),
            ] {
                let query = LexicalQuery {
                    limit,
                    ..q(&text, match_on)
                };
                let terms = idx.weighted_terms(&query);
                let full = scorer::top_cards_pruning_from(
                    &searcher,
                    &terms,
                    "card",
                    limit,
                    None,
                    u32::MAX,
                )
                .unwrap();
                let pruned =
                    scorer::top_cards_pruning_from(&searcher, &terms, "card", limit, None, 0)
                        .unwrap();
                assert_eq!(full.len(), limit, "{text}");
                assert_eq!(pruned.len(), full.len(), "{text}");
                for (i, (p, f)) in pruned.iter().zip(&full).enumerate() {
                    assert!(
                        (p.0 - f.0).abs() <= 1e-4 * f.0.max(1.0),
                        "{text} k={limit} rank {i}: {p:?} against {f:?}"
                    );
                    if p.1 != f.1 {
                        let tie = full.iter().any(|x| x.1 == p.1 && (x.0 - f.0).abs() <= 1e-4);
                        assert!(tie, "{text} k={limit} rank {i}: {p:?} against {f:?}");
                    }
                }
                compared += 1;
            }
        }
        assert_eq!(compared, 120);
        let looked_up = scorer::LOOKED_UP.with(|c| c.get());
        assert!(
            looked_up > 60,
            "pruning left only {looked_up} term lists unread"
        );
    }

    /// The selection's guessed threshold (from one document in 16) gives the same top k as
    /// no guess (a filter that allows every card turns guessing off), also when the sample
    /// misleads: here every sampled document scores high, fewer than k do, and the segment
    /// must be collected again. Dense (a word in every document) and listed (a rare word)
    /// accumulators both.
    #[test]
    fn guessed_thresholds_keep_the_exact_top_k() {
        let dir = tempfile::tempdir().unwrap();
        let mut idx = Bm25Index::open(dir.path(), ChineseTokenizer::Bigram).unwrap();
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        let n = 1600u64;
        for d in 0..n {
            let mut text: Vec<String> = (0..4 + next() % 12)
                .map(|_| format!("w{}", next() % 50))
                .collect();
            text.push(
                if d % 16 == 0 {
                    "alpha alpha alpha alpha"
                } else {
                    "alpha"
                }
                .into(),
            );
            if d % 20 == 0 {
                text.push("delta".into());
            }
            idx.add_chunk(d, &format!("d{d}"), Language::En, None, &text.join(" "))
                .unwrap();
        }
        idx.commit(1).unwrap();
        idx.close_writer();
        let every: situate_core::CardSet = (0..n).collect();
        scorer::GUESSES.with(|c| c.set((0, 0)));
        for (text, limit) in [
            ("alpha", 150),
            ("alpha w3 w7", 20),
            ("alpha w1", 1),
            ("delta w9", 2),
            ("delta", 3),
        ] {
            let query = LexicalQuery {
                limit,
                ..q(text, MatchOn::Plain)
            };
            let guessed = idx.search(&query).unwrap();
            let exact = idx
                .search(&LexicalQuery {
                    filter: Some(&every),
                    ..query
                })
                .unwrap();
            assert_eq!(guessed.len(), limit, "{text}");
            assert_eq!(guessed, exact, "{text} k={limit}");
        }
        let (guesses, again) = scorer::GUESSES.with(|c| c.get());
        assert!(guesses >= 4, "only {guesses} guesses");
        assert!(again >= 1, "no guess was missed");
    }

    #[test]
    fn plain_and_contextual_bm25_from_one_index() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut ix = Bm25Index::open(dir.path(), ChineseTokenizer::Bigram).expect("open");
        ix.add_chunk(
            1,
            "acme",
            Language::En,
            Some("ACME Corp quarterly report, Q2 2023"),
            "Revenue grew by 3% over the previous quarter.",
        )
        .expect("add");
        ix.add_chunk(
            2,
            "other",
            Language::En,
            None,
            "Revenue of the bakery fell.",
        )
        .expect("add");
        ix.commit(7).expect("commit");
        assert_eq!(ix.generation().expect("gen"), 7);
        let plain = ix
            .search(&q("ACME revenue", MatchOn::Plain))
            .expect("search");
        let ctx = ix
            .search(&q("ACME revenue", MatchOn::Contextual))
            .expect("search");
        assert_eq!(
            ctx[0].card, 1,
            "context makes the ACME chunk findable: {ctx:?}"
        );
        assert_eq!(plain.len(), 2);
        // Without the context, "ACME" matches nothing; the two chunks tie on "revenue" only.
        assert!((plain[0].score - plain[1].score).abs() < 0.5);
        assert!(
            ctx[0].score
                > plain
                    .iter()
                    .find(|h| h.card == 1)
                    .map(|h| h.score)
                    .unwrap_or(0.0)
        );
    }

    #[test]
    fn verify_names_a_flipped_byte_and_a_missing_file() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut ix = Bm25Index::open(dir.path(), ChineseTokenizer::Bigram).expect("open");
        for i in 0..20u64 {
            ix.add_chunk(
                i,
                &format!("d{i}"),
                Language::En,
                None,
                &format!("pump {i} flow"),
            )
            .expect("add");
        }
        ix.commit(1).expect("commit");
        ix.close_writer();
        assert_eq!(ix.verify().expect("verify"), Vec::<String>::new());
        drop(ix);
        let file = |ext: &str| {
            std::fs::read_dir(dir.path())
                .expect("dir")
                .flatten()
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|e| e == ext))
                .expect("segment file")
        };
        let fieldnorm = file("fieldnorm");
        let mut bytes = std::fs::read(&fieldnorm).expect("read");
        bytes[3] ^= 0x01;
        std::fs::write(&fieldnorm, bytes).expect("write");
        let ix = Bm25Index::open(dir.path(), ChineseTokenizer::Bigram).expect("open");
        let found = ix.verify().expect("verify");
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].ends_with(".fieldnorm does not match its checksum"),
            "{found:?}"
        );
        drop(ix);
        std::fs::remove_file(file("pos")).expect("remove");
        let ix = Bm25Index::open(dir.path(), ChineseTokenizer::Bigram).expect("open");
        let found = ix.verify().expect("verify");
        assert!(
            found.iter().any(|f| f.ends_with(".pos is missing")),
            "{found:?}"
        );
    }

    #[test]
    fn per_language_analysis_and_deletes() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut ix = Bm25Index::open(dir.path(), ChineseTokenizer::Bigram).expect("open");
        ix.add_chunk(
            1,
            "ru",
            Language::Ru,
            None,
            "Красивые книги лежат на столе.",
        )
        .expect("add");
        ix.add_chunk(2, "zh", Language::Zh, None, "北京是中国的首都。")
            .expect("add");
        ix.add_chunk(3, "en", Language::En, None, "Books are on the table.")
            .expect("add");
        ix.commit(1).expect("commit");
        assert_eq!(
            ix.search(&q("книга", MatchOn::Plain)).expect("s")[0].card,
            1
        );
        assert_eq!(ix.search(&q("首都", MatchOn::Plain)).expect("s")[0].card, 2);
        assert_eq!(ix.search(&q("book", MatchOn::Plain)).expect("s")[0].card, 3);
        assert!(
            ix.search(&q("the of and", MatchOn::Plain))
                .expect("s")
                .is_empty()
        );
        ix.delete_document("ru").expect("delete");
        ix.commit(2).expect("commit");
        assert!(
            ix.search(&q("книга", MatchOn::Plain))
                .expect("s")
                .is_empty()
        );
        assert_eq!(ix.num_chunks(), 2);
    }

    #[test]
    fn uncommitted_changes_vanish_on_reopen() {
        let dir = tempfile::tempdir().expect("tmp");
        {
            let mut ix = Bm25Index::open(dir.path(), ChineseTokenizer::Bigram).expect("open");
            ix.add_chunk(1, "a", Language::En, None, "committed text")
                .expect("add");
            ix.commit(1).expect("commit");
            ix.add_chunk(2, "b", Language::En, None, "uncommitted text")
                .expect("add");
            ix.close_writer();
        }
        let ix = Bm25Index::open(dir.path(), ChineseTokenizer::Bigram).expect("reopen");
        assert_eq!(ix.num_chunks(), 1);
        assert_eq!(ix.generation().expect("gen"), 1);
    }

    #[test]
    fn context_weight_changes_the_balance() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut ix = Bm25Index::open(dir.path(), ChineseTokenizer::Bigram).expect("open");
        ix.add_chunk(
            1,
            "a",
            Language::En,
            Some("about zebras"),
            "plain words here",
        )
        .expect("add");
        ix.add_chunk(
            2,
            "b",
            Language::En,
            None,
            "zebras mentioned once in a longer original text body",
        )
        .expect("add");
        ix.commit(1).expect("commit");
        let mut heavy = q("zebras", MatchOn::Contextual);
        heavy.context_weight = 5.0;
        let mut light = q("zebras", MatchOn::Contextual);
        light.context_weight = 0.05;
        assert_eq!(ix.search(&heavy).expect("s")[0].card, 1);
        assert_eq!(ix.search(&light).expect("s")[0].card, 2);
    }
}
