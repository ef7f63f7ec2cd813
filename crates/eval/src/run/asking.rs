//! Answers (`--answers`): every question answered in each mode, scored and written.

use super::*;

/// What the answers of one configuration are written from.
pub(super) struct Asking<'a> {
    pub(super) req: &'a EvalRequest,
    pub(super) answers: &'a AnswerEval,
    pub(super) cfg: &'a EvalConfig,
    /// The first configuration: the one full-context answers are written on.
    pub(super) first: bool,
    pub(super) plan: &'a situate_engine::SearchPlan,
    pub(super) queries: &'a [EvalQuery],
    pub(super) level: Level,
}

impl Asking<'_> {
    /// Every question answered in each mode asked for, scored, and written to its
    /// `answers-*.jsonl`: one row per mode (and one more with the configuration's abstain
    /// threshold as `min_score`).
    pub(super) fn rows(
        &self,
        engine: &Engine,
        rankings: &[Vec<Retrieved>],
        abstain: Option<&report::Abstain>,
        progress: &mut Progress<'_>,
    ) -> Result<Vec<AnswerRow>> {
        let (req, a, cfg, plan, queries) =
            (self.req, self.answers, self.cfg, self.plan, self.queries);
        let mut answer_rows = Vec::new();
        // Full-context answers first: a base too large for the model's window is told
        // before any retrieval answer is paid for.
        for mode in [AnswerMode::Full, AnswerMode::Retrieval] {
            if !a.modes.contains(&mode) || (mode == AnswerMode::Full && !self.first) {
                continue;
            }
            let name = match mode {
                AnswerMode::Full => "full".to_string(),
                _ => format!("{}/retrieval", cfg.name),
            };
            let answer_plan = AnswerPlan {
                mode,
                ..a.plan.clone()
            };
            let mut model = a.plan.model.clone();
            let mut records = Vec::with_capacity(queries.len());
            for q in queries {
                let r = engine
                    .ask(&q.text, &answer_plan, plan, &Default::default(), &|_| {})
                    .map_err(|e| e.within(format!("answers {name}")))?;
                model.clone_from(&r.model);
                records.push(answer_record(q, &r, self.level));
                progress.step();
            }
            let file = match mode {
                AnswerMode::Full => "answers-full.jsonl".to_string(),
                _ => format!("answers-{}.jsonl", cfg.name),
            };
            write_jsonl(&req.out.join(file), &records)?;
            let mode_name = if mode == AnswerMode::Full {
                "full"
            } else {
                "retrieval"
            };
            answer_rows.push(answers::summarize(&name, mode_name, &model, &records));
            // The retrieval-side signal: the same answers with this configuration's
            // calibrated abstain threshold as `[answer] min_score` (in-sample: chosen
            // on this set's answerable questions), unless a min_score was given.
            if let (AnswerMode::Retrieval, Some(ab), None) = (mode, abstain, a.plan.min_score) {
                let best: Vec<Option<f32>> = rankings
                    .iter()
                    .map(|r| r.first().map(|x| x.score))
                    .collect();
                let withheld = answers::with_min_score(&records, &best, ab.threshold);
                let mut row = answers::summarize(
                    &format!("{name}, min_score {}", four_digits_down(ab.threshold)),
                    mode_name,
                    &model,
                    &withheld,
                );
                row.min_score = Some(ab.threshold);
                answer_rows.push(row);
            }
        }
        Ok(answer_rows)
    }
}

/// A threshold to four significant digits, rounded down (the value shown is one a user can
/// set without losing the question that scored exactly the threshold).
pub(super) fn four_digits_down(t: f32) -> String {
    let t = f64::from(t);
    if t == 0.0 || !t.is_finite() {
        return t.to_string();
    }
    let digits = (3 - t.abs().log10().floor() as i32).max(0);
    let factor = 10f64.powi(digits);
    format!("{:.*}", digits as usize, (t * factor).floor() / factor)
}

/// An answer scored against the question's gold answers and golden passages.
pub(super) fn answer_record(q: &EvalQuery, r: &AnswerResponse, level: Level) -> AnswerRecord {
    let scored = if r.abstained {
        String::new()
    } else {
        situate_answer::answer_part(&r.answer)
    };
    let golden = |p: &situate_answer::Passage| {
        let id = match level {
            Level::Chunk => &p.chunk_id,
            Level::Document => &p.document_id,
        };
        q.judgments.0.get(id).is_some_and(|g| *g > 0.0)
            || answers::contains_answer(&p.original, &q.answers)
    };
    let citations = r
        .citations
        .iter()
        .map(|c| CitedRecord {
            chunk_id: c.chunk_id.clone(),
            valid: c.valid,
            relevant: c
                .passage
                .and_then(|n| r.passages.iter().find(|p| p.id == n))
                .is_some_and(golden),
        })
        .collect();
    let (exact_match, f1, contains) = if r.abstained || q.answers.is_empty() {
        (0.0, 0.0, false)
    } else {
        (
            answers::exact_match(&scored, &q.answers),
            answers::token_f1(&scored, &q.answers),
            answers::contains_answer(&scored, &q.answers),
        )
    };
    let u = &r.usage;
    AnswerRecord {
        id: q.id.clone(),
        question: q.text.clone(),
        unanswerable: q.unanswerable,
        gold: q.answers.clone(),
        answer: r.answer.clone(),
        scored,
        abstained: r.abstained,
        abstention: r.abstention.map(|a| {
            serde_json::to_value(a)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default()
        }),
        grounded: r.grounded && !r.abstained,
        citations,
        exact_match,
        f1,
        contains,
        input_tokens: u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens,
        cached_tokens: u.cache_read_input_tokens,
        output_tokens: u.output_tokens,
        seconds: r.took_ms / 1000.0,
        dollars: r.cost.map(|c| (c.dollars, c.dollars_without_cache)),
    }
}
