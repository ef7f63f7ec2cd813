//! Answer evaluation: how good the answers are that a model writes from what was retrieved
//! (`situate eval --answers`).
//!
//! Per answerable question with gold answers (XQuAD-R's `metadata.answers`):
//!
//! - **exact match** and **token F1** as SQuAD defines them (lower case, punctuation and
//!   English articles dropped, white space collapsed; the best over the gold answers), of
//!   the answer's own sentence (the `Answer:` line, without its quote and citations);
//! - **contains**: a gold answer occurs in that sentence, word for word after the same
//!   normalisation. The answer prompt asks for a sentence, not a span, so exact match is
//!   low by construction; "contains" is the usual accuracy of a sentence answer;
//! - an abstention on an answerable question scores 0 on each and counts as **lost**.
//!
//! Per citation: **precision**, the share of citations that name a passage that was given
//! and is golden, or whose original contains a gold answer. Per answer: **grounded**, every
//! citation holds (situate-answer's checks). On unanswerable controls: the share
//! **answered** (should be 0), against the answerable questions lost.
//!
//! Written by hand: the SQuAD normalisation is a few lines, and the rows are situate's own.

use serde::Serialize;
use std::collections::HashMap;

/// Lower case, `ё` as `е`, every character that is not a letter or a digit made a space,
/// English articles dropped, one space between words (SQuAD's normalisation, extended to
/// Unicode punctuation).
pub fn normalize_answer(s: &str) -> String {
    let lower: String = s
        .to_lowercase()
        .chars()
        .map(|c| match c {
            'ё' => 'е',
            c if c.is_alphanumeric() => c,
            _ => ' ',
        })
        .collect();
    lower
        .split_whitespace()
        .filter(|w| !matches!(*w, "a" | "an" | "the"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// 1 when the prediction equals a gold answer after [`normalize_answer`].
pub fn exact_match(prediction: &str, gold: &[String]) -> f64 {
    let p = normalize_answer(prediction);
    f64::from(u8::from(gold.iter().any(|g| normalize_answer(g) == p)))
}

/// SQuAD's token F1: the best over the gold answers of the harmonic mean of token
/// precision and recall (tokens of [`normalize_answer`], counted with repeats).
pub fn token_f1(prediction: &str, gold: &[String]) -> f64 {
    let p = normalize_answer(prediction);
    let p: Vec<&str> = p.split_whitespace().collect();
    gold.iter()
        .map(|g| {
            let g = normalize_answer(g);
            let g: Vec<&str> = g.split_whitespace().collect();
            if p.is_empty() || g.is_empty() {
                return f64::from(u8::from(p == g));
            }
            let mut counts: HashMap<&str, i64> = HashMap::new();
            for t in &g {
                *counts.entry(t).or_default() += 1;
            }
            let mut same = 0;
            for t in &p {
                if let Some(c) = counts.get_mut(t)
                    && *c > 0
                {
                    *c -= 1;
                    same += 1;
                }
            }
            if same == 0 {
                return 0.0;
            }
            let precision = same as f64 / p.len() as f64;
            let recall = same as f64 / g.len() as f64;
            2.0 * precision * recall / (precision + recall)
        })
        .fold(0.0, f64::max)
}

/// Whether a gold answer occurs in `text` as whole words, after [`normalize_answer`].
pub fn contains_answer(text: &str, gold: &[String]) -> bool {
    let t = format!(" {} ", normalize_answer(text));
    gold.iter().any(|g| {
        let g = normalize_answer(g);
        !g.is_empty() && t.contains(&format!(" {g} "))
    })
}

/// One citation of an evaluated answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CitedRecord {
    /// The chunk cited, when the citation named a passage that was given.
    pub chunk_id: Option<String>,
    /// The citation holds (passage given, quote in its original).
    pub valid: bool,
    /// The chunk is golden or its original contains a gold answer.
    pub relevant: bool,
}

/// One answer as evaluated: a line of `answers-<row>.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnswerRecord {
    /// The question's id.
    pub id: String,
    /// The question.
    pub question: String,
    /// A control: the documents do not hold the answer.
    pub unanswerable: bool,
    /// Its gold answers.
    pub gold: Vec<String>,
    /// The answer as shown.
    pub answer: String,
    /// The part of it that is scored (the answer sentence without quote and citations).
    pub scored: String,
    /// It said the documents do not hold the answer (or was not attempted).
    pub abstained: bool,
    /// Why (`model`, `retrieval`, `no_passages`, `refused`).
    pub abstention: Option<String>,
    /// Every citation holds and there is one.
    pub grounded: bool,
    /// Its citations.
    pub citations: Vec<CitedRecord>,
    /// Exact match of `scored` (0 when abstained).
    pub exact_match: f64,
    /// Token F1 of `scored` (0 when abstained).
    pub f1: f64,
    /// A gold answer occurs in `scored`.
    pub contains: bool,
    /// Prompt tokens read (cache reads included).
    pub input_tokens: u64,
    /// Of those, read from a cache.
    pub cached_tokens: u64,
    /// Tokens written.
    pub output_tokens: u64,
    /// Seconds the answer took.
    pub seconds: f64,
    /// Dollars, when the model's price is known: as billed, and without the cache.
    pub dollars: Option<(f64, f64)>,
}

/// One row of the answers table: a configuration's answers in one mode.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnswerRow {
    /// `CONFIGURATION/retrieval` or `full`.
    pub name: String,
    /// `retrieval` or `full`.
    pub mode: String,
    /// The model's id.
    pub model: String,
    /// Answerable questions asked.
    pub questions: usize,
    /// Unanswerable controls asked.
    pub controls: usize,
    /// Share of answerable questions answered (not abstained).
    pub answered: f64,
    /// Answerable questions with gold answers (those EM, F1 and contains are over).
    pub with_gold: usize,
    /// Mean exact match over answerable questions with gold answers (abstentions score 0).
    pub exact_match: Option<f64>,
    /// Mean token F1 over the same questions (abstentions score 0).
    pub f1: Option<f64>,
    /// Share of the same questions whose answer contains a gold answer.
    pub contains: Option<f64>,
    /// Share of citations (in answers to answerable questions) that name a golden passage
    /// or one holding a gold answer; `None` without any citation.
    pub citation_precision: Option<f64>,
    /// Share of answers given (not abstained) whose citations all hold.
    pub grounded: f64,
    /// Share of controls answered (should be 0); `None` without controls.
    pub controls_answered: Option<f64>,
    /// Answers not attempted because the best passage scored under `min_score`.
    pub not_attempted: usize,
    /// Mean seconds per answer.
    pub seconds_per_answer: f64,
    /// Mean prompt tokens per answer (cache reads included).
    pub input_tokens_per_answer: f64,
    /// Mean share of prompt tokens read from a cache.
    pub cached_share: f64,
    /// Mean tokens written per answer.
    pub output_tokens_per_answer: f64,
    /// Dollars over every answer, as billed and without the cache, when priced.
    pub dollars: Option<(f64, f64)>,
    /// The retrieval-side threshold this row applies ([`with_min_score`]), if any.
    pub min_score: Option<f32>,
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = xs.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 { 0.0 } else { sum / n as f64 }
}

/// The row of `records` (every answer of one configuration and mode).
pub fn summarize(name: &str, mode: &str, model: &str, records: &[AnswerRecord]) -> AnswerRow {
    let answerable: Vec<&AnswerRecord> = records.iter().filter(|r| !r.unanswerable).collect();
    let controls: Vec<&AnswerRecord> = records.iter().filter(|r| r.unanswerable).collect();
    let gold: Vec<&AnswerRecord> = answerable
        .iter()
        .copied()
        .filter(|r| !r.gold.is_empty())
        .collect();
    let over_gold = |f: &dyn Fn(&AnswerRecord) -> f64| {
        (!gold.is_empty()).then(|| mean(gold.iter().map(|r| f(r))))
    };
    let given: Vec<&AnswerRecord> = records.iter().filter(|r| !r.abstained).collect();
    let cites: Vec<&CitedRecord> = answerable
        .iter()
        .filter(|r| !r.abstained)
        .flat_map(|r| &r.citations)
        .collect();
    let input: u64 = records.iter().map(|r| r.input_tokens).sum();
    let cached: u64 = records.iter().map(|r| r.cached_tokens).sum();
    let priced = records.iter().all(|r| r.dollars.is_some()) && !records.is_empty();
    AnswerRow {
        name: name.into(),
        mode: mode.into(),
        model: model.into(),
        questions: answerable.len(),
        controls: controls.len(),
        answered: mean(answerable.iter().map(|r| f64::from(u8::from(!r.abstained)))),
        with_gold: gold.len(),
        exact_match: over_gold(&|r| r.exact_match),
        f1: over_gold(&|r| r.f1),
        contains: over_gold(&|r| f64::from(u8::from(r.contains))),
        citation_precision: (!cites.is_empty())
            .then(|| mean(cites.iter().map(|c| f64::from(u8::from(c.relevant))))),
        grounded: mean(given.iter().map(|r| f64::from(u8::from(r.grounded)))),
        controls_answered: (!controls.is_empty())
            .then(|| mean(controls.iter().map(|r| f64::from(u8::from(!r.abstained))))),
        not_attempted: records
            .iter()
            .filter(|r| r.abstention.as_deref() == Some("retrieval"))
            .count(),
        seconds_per_answer: mean(records.iter().map(|r| r.seconds)),
        input_tokens_per_answer: mean(records.iter().map(|r| r.input_tokens as f64)),
        cached_share: if input == 0 {
            0.0
        } else {
            cached as f64 / input as f64
        },
        output_tokens_per_answer: mean(records.iter().map(|r| r.output_tokens as f64)),
        dollars: priced.then(|| {
            records
                .iter()
                .filter_map(|r| r.dollars)
                .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y))
        }),
        min_score: None,
    }
}

/// `records` as they would have been with `[answer] min_score = threshold`: each question
/// whose best passage (`best[i]`, `None`: nothing retrieved) scores under it is not
/// attempted, as `situate ask` does, with no model call. What a retrieval-side threshold
/// costs (answerable questions lost) and saves (controls answered, tokens), measured on the
/// answers already written, without asking the model again.
pub fn with_min_score(
    records: &[AnswerRecord],
    best: &[Option<f32>],
    threshold: f32,
) -> Vec<AnswerRecord> {
    records
        .iter()
        .zip(best)
        .map(|(r, b)| {
            if b.is_some_and(|b| b >= threshold) {
                return r.clone();
            }
            AnswerRecord {
                answer: String::new(),
                scored: String::new(),
                abstained: true,
                abstention: Some("retrieval".into()),
                grounded: false,
                citations: vec![],
                exact_match: 0.0,
                f1: 0.0,
                contains: false,
                input_tokens: 0,
                cached_tokens: 0,
                output_tokens: 0,
                seconds: 0.0,
                dollars: r.dollars.map(|_| (0.0, 0.0)),
                ..r.clone()
            }
        })
        .collect()
}

/// The answers table (markdown).
pub fn markdown_table(rows: &[AnswerRow]) -> String {
    let pct = |x: f64| format!("{:.1}%", x * 100.0);
    let mut md = String::from(
        "| answers | model | questions | answered | EM | F1 | contains | citation precision | grounded | controls answered | s/answer | prompt tokens (cached) | $ (no cache) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        md.push_str(&format!(
            "| {} | {} | {}{} | {} | {} | {} | {} | {} | {} | {} | {:.2} | {:.0} ({}) | {} |\n",
            r.name,
            r.model,
            r.questions,
            if r.controls > 0 {
                format!(" + {} controls", r.controls)
            } else {
                String::new()
            },
            pct(r.answered),
            r.exact_match.map_or("–".into(), |x| format!("{x:.3}")),
            r.f1.map_or("–".into(), |x| format!("{x:.3}")),
            r.contains.map_or("–".into(), pct),
            r.citation_precision.map_or("–".into(), pct),
            pct(r.grounded),
            r.controls_answered.map_or("–".into(), pct),
            r.seconds_per_answer,
            r.input_tokens_per_answer,
            pct(r.cached_share),
            r.dollars
                .map_or("–".into(), |(d, n)| format!("{d:.4} ({n:.4})")),
        ));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gold(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn squad_normalisation_and_scores() {
        assert_eq!(normalize_answer("The  Denver Broncos!"), "denver broncos");
        assert_eq!(normalize_answer("«Ёлка», 1912 г."), "елка 1912 г");
        assert_eq!(exact_match("the Broncos.", &gold(&["Broncos", "x"])), 1.0);
        assert_eq!(exact_match("Broncos won", &gold(&["Broncos"])), 0.0);
        // "denver broncos won" against "denver broncos": P = 2/3, R = 1.
        let f = token_f1("Denver Broncos won", &gold(&["Denver Broncos", "Panthers"]));
        assert!((f - 0.8).abs() < 1e-12, "{f}");
        assert_eq!(token_f1("", &gold(&["x"])), 0.0);
        assert!(contains_answer(
            "Защита уступила 308 очков.",
            &gold(&["308"])
        ));
        assert!(!contains_answer(
            "Защита уступила 3080 очков.",
            &gold(&["308"])
        ));
        assert!(!contains_answer("anything", &gold(&["  "])));
    }

    fn record(unanswerable: bool, abstained: bool, f1: f64, cites: &[bool]) -> AnswerRecord {
        AnswerRecord {
            id: "q".into(),
            question: "?".into(),
            unanswerable,
            gold: if unanswerable {
                vec![]
            } else {
                vec!["g".into()]
            },
            answer: String::new(),
            scored: String::new(),
            abstained,
            abstention: abstained.then(|| "model".into()),
            grounded: !cites.is_empty(),
            citations: cites
                .iter()
                .map(|&relevant| CitedRecord {
                    chunk_id: Some("c".into()),
                    valid: true,
                    relevant,
                })
                .collect(),
            exact_match: f64::from(u8::from(f1 == 1.0)),
            f1,
            contains: f1 > 0.0,
            input_tokens: 100,
            cached_tokens: 50,
            output_tokens: 10,
            seconds: 2.0,
            dollars: None,
        }
    }

    #[test]
    fn a_row_separates_answerable_questions_from_controls() {
        let records = [
            record(false, false, 1.0, &[true, false]),
            record(false, false, 0.5, &[true]),
            record(false, true, 0.0, &[]),
            record(true, false, 0.0, &[false]),
            record(true, true, 0.0, &[]),
        ];
        let row = summarize("hybrid+none+none/retrieval", "retrieval", "m", &records);
        assert_eq!((row.questions, row.controls), (3, 2));
        assert!((row.answered - 2.0 / 3.0).abs() < 1e-12);
        assert!((row.f1.expect("gold") - 0.5).abs() < 1e-12);
        assert!((row.exact_match.expect("gold") - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(row.with_gold, 3);
        // Citations of answerable questions only: 2 of 3 relevant.
        assert_eq!(row.citation_precision, Some(2.0 / 3.0));
        assert_eq!(row.controls_answered, Some(0.5));
        assert!((row.cached_share - 0.5).abs() < 1e-12);
        assert_eq!(row.dollars, None);
        assert!(markdown_table(&[row]).contains("| 3 + 2 controls | 66.7% |"));
    }

    #[test]
    fn a_min_score_withholds_the_questions_under_it_without_asking_again() {
        let records = [
            record(false, false, 1.0, &[true]),
            record(false, false, 0.5, &[true]),
            record(true, false, 0.0, &[false]),
            record(true, false, 0.0, &[false]),
        ];
        let best = [Some(3.0), Some(1.0), Some(0.5), None];
        let kept = with_min_score(&records, &best, 1.0);
        assert_eq!(
            kept[..2],
            records[..2],
            "at or over the threshold: unchanged"
        );
        for r in &kept[2..] {
            assert!(r.abstained && r.citations.is_empty() && r.input_tokens == 0);
            assert_eq!(r.abstention.as_deref(), Some("retrieval"));
        }
        let row = summarize("x", "retrieval", "m", &kept);
        assert_eq!((row.answered, row.controls_answered), (1.0, Some(0.0)));
        assert_eq!(row.not_attempted, 2);
        // A higher threshold loses an answerable question and its F1.
        let row = summarize("x", "retrieval", "m", &with_min_score(&records, &best, 2.0));
        assert_eq!(row.answered, 0.5);
        assert!((row.f1.expect("gold") - 0.5).abs() < 1e-12);
    }
}
