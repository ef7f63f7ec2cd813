//! Contexts over stored cards: a context run ([`ContextualizeRequest`]) and where the
//! contexts stand ([`Engine::context_report`]).

use super::*;
use crate::{Engine, EngineError, Result};
use serde::{Deserialize, Serialize};

/// A context run over stored cards: `situate contextualize` (pending and failed cards),
/// `situate contexts regenerate --status …`, a `contextualize` job.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContextualizeRequest {
    /// The statuses whose cards get new contexts [pending, failed].
    #[serde(default)]
    pub statuses: Vec<String>,
    /// The LLM context method: `llm`, `document` or `document+llm` (default llm).
    #[serde(default)]
    pub context: Option<String>,
    /// Cards per LLM batch (default 8).
    #[serde(default)]
    pub batch: Option<usize>,
    /// The LLM, over `[llm] model`.
    #[serde(default)]
    pub llm: Option<String>,
    /// Dollars not to spend beyond.
    #[serde(default)]
    pub budget: Option<f64>,
}

/// A context run whose every field is checked.
#[derive(Debug, Clone)]
pub struct CheckedContextualize {
    /// The statuses whose cards get new contexts.
    pub statuses: Vec<situate_core::ContextStatus>,
    /// The LLM context method.
    pub method: String,
    /// Cards per batch.
    pub batch: usize,
    /// The LLM and the budget.
    pub run: crate::LlmRun,
}

impl ContextualizeRequest {
    /// Checks every field: the one check of a context run.
    pub fn check(&self) -> Result<CheckedContextualize> {
        let statuses = if self.statuses.is_empty() {
            TO_CONTEXTUALIZE.to_vec()
        } else {
            parse_statuses("statuses", &self.statuses)?
        };
        let method = self.context.clone().unwrap_or_else(|| "llm".into());
        if !crate::uses_llm(&method) {
            return Err(EngineError::field_error(
                "context",
                format!("{method:?}: a context run takes llm, document or document+llm"),
            ));
        }
        let batch = self.batch.unwrap_or(8);
        if batch == 0 {
            return Err(EngineError::field_error("batch", "must be at least 1"));
        }
        if self.budget.is_some_and(|b| !(b.is_finite() && b >= 0.0)) {
            return Err(EngineError::field_error(
                "budget",
                "must be a number of dollars >= 0",
            ));
        }
        Ok(CheckedContextualize {
            statuses,
            method,
            batch,
            run: crate::LlmRun {
                llm: self.llm.clone(),
                budget: self.budget,
                dry_run: false,
            },
        })
    }
}

/// The answer to a context run over stored cards (`situate contextualize`, `situate
/// contexts regenerate`, a `contextualize` job's `result`).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ContextualizeAnswer {
    /// The counts.
    pub report: crate::IngestReport,
    /// What the LLM calls cost, when its price is known.
    pub dollars: Option<f64>,
    /// The run's wall time.
    pub seconds: f64,
}

impl ContextualizeAnswer {
    /// The answer to a run that started at `started`, at `price`.
    pub fn new(
        report: crate::IngestReport,
        price: Option<crate::Price>,
        started: std::time::Instant,
    ) -> ContextualizeAnswer {
        ContextualizeAnswer {
            dollars: price.map(|p| p.dollars(&report.usage)),
            seconds: started.elapsed().as_secs_f64(),
            report,
        }
    }
}

/// Where the contexts stand (`situate status`): counts by status and by method, and the
/// cards whose context failed or was rejected, for a person to look at.
#[derive(Debug, Clone, Serialize)]
pub struct ContextReport {
    /// Cards by context status.
    pub context_status: Vec<(String, u64)>,
    /// Cards by context method.
    pub context_methods: Vec<(String, u64)>,
    /// The cards whose context failed or was rejected.
    pub failed_or_rejected: Vec<situate_core::ChunkCard>,
}

impl Engine {
    /// Where the contexts stand.
    pub fn context_report(&self) -> Result<ContextReport> {
        let stats = self.store.stats()?;
        Ok(ContextReport {
            context_status: stats.context_status,
            context_methods: stats.context_methods,
            failed_or_rejected: self.cards_with_status(&[
                situate_core::ContextStatus::Failed,
                situate_core::ContextStatus::Rejected,
            ])?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::json;

    #[test]
    fn a_context_run_takes_its_defaults_and_names_its_bad_fields() {
        let c = ContextualizeRequest::default().check().expect("defaults");
        assert_eq!(c.statuses, TO_CONTEXTUALIZE.to_vec());
        assert_eq!((c.method.as_str(), c.batch), ("llm", 8));
        for (body, field) in [
            (json!({"statuses": ["done"]}), "statuses"),
            (json!({"context": "structural"}), "context"),
            (json!({"batch": 0}), "batch"),
            (json!({"budget": -1.0}), "budget"),
        ] {
            let r: ContextualizeRequest = serde_json::from_value(body.clone()).expect("parses");
            let e = r.check().expect_err("invalid");
            assert_eq!(e.field(), Some(field), "{body}: {e}");
        }
        assert!(serde_json::from_value::<ContextualizeRequest>(json!({"statuz": []})).is_err());
    }
}
