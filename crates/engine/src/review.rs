//! Reviewing stored contexts: listing cards by status, a person's decision on one card
//! (`situate contexts set`), and re-checking stored LLM contexts with this version's checks
//! (`situate contexts verify`). No LLM is called here.

use crate::contexts::ContextUpdate;
use crate::{Engine, EngineError, Result};
use situate_core::{ChunkCard, ChunkContext, ContextMethod, ContextStatus, Provenance};

/// What a person decides about one card's context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The context stands as it is (verified).
    Accept,
    /// The context is not indexed; the chunk is indexed with its original alone.
    Reject,
    /// This text replaces the context (verified).
    Text(String),
}

impl Decision {
    /// A decision by its wire name (`accept`, `reject`, `edit` with `text`), as the
    /// service's review, its `review` job and the Python package take it.
    pub fn parse(decision: &str, text: Option<&str>) -> Result<Decision> {
        match (decision, text) {
            ("accept", None) => Ok(Decision::Accept),
            ("reject", None) => Ok(Decision::Reject),
            ("edit", Some(t)) if !t.trim().is_empty() => Ok(Decision::Text(t.to_string())),
            ("edit", _) => Err(EngineError::field_error(
                "text",
                "`edit` needs a non-empty `text` (use `reject` to index the chunk without a context)",
            )),
            ("accept" | "reject", Some(_)) => Err(EngineError::field_error(
                "text",
                format!("`{decision}` takes no `text` (use `edit` to replace the context)"),
            )),
            _ => Err(EngineError::field_error(
                "decision",
                format!("{decision:?}: expected accept, reject or edit"),
            )),
        }
    }
}

/// What [`Engine::reverify_contexts`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReverifyReport {
    /// LLM contexts checked.
    pub checked: u64,
    /// Contexts whose verdict or reasons changed.
    pub changed: u64,
    /// Of those, now rejected.
    pub now_rejected: u64,
    /// Of those, now verified.
    pub now_verified: u64,
}

impl Engine {
    /// The cards whose context status is one of `statuses` (every card when empty), in
    /// document order.
    pub fn cards_with_status(&self, statuses: &[ContextStatus]) -> Result<Vec<ChunkCard>> {
        let mut out = Vec::new();
        self.store.for_each_card_with_status(statuses, &mut |rec| {
            out.push(rec.card);
            Ok(())
        })?;
        Ok(out)
    }

    /// Whether the index has a chunk with this id.
    pub fn has_chunk(&self, chunk_id: &str) -> Result<bool> {
        Ok(self.store.card_by_chunk_id(chunk_id)?.is_some())
    }

    /// Whether the index has a document with this id.
    pub fn has_document(&self, document_id: &str) -> Result<bool> {
        Ok(self.store.document(document_id)?.is_some())
    }

    /// Records a person's decision on a card's context, with provenance
    /// [`ContextMethod::Manual`] (which later LLM runs leave alone), and re-indexes the
    /// card. Returns the card's new status.
    pub fn decide_context(&mut self, chunk_id: &str, decision: Decision) -> Result<ContextStatus> {
        let card = self.chunk(chunk_id)?.card;
        let old = card.provenance.clone();
        let manual = |strategy: Option<String>| Provenance {
            method: ContextMethod::Manual,
            model: old.as_ref().and_then(|p| p.model.clone()),
            prompt_version: old.as_ref().and_then(|p| p.prompt_version.clone()),
            input_hash: old
                .as_ref()
                .map(|p| p.input_hash.clone())
                .unwrap_or_default(),
            strategy,
            parts: vec![],
        };
        let strategy = old.as_ref().and_then(|p| p.strategy.clone());
        let context = match decision {
            Decision::Text(t) => {
                let t = t.trim().to_string();
                if t.is_empty() {
                    return Err(EngineError::field_error(
                        "text",
                        "the context is empty: reject it to index the chunk without a context",
                    ));
                }
                ChunkContext {
                    text: Some(t),
                    status: ContextStatus::Verified,
                    provenance: Some(manual(None)),
                    notes: vec!["written by hand".into()],
                }
            }
            Decision::Accept => {
                if card
                    .generated_context
                    .as_deref()
                    .is_none_or(|c| c.trim().is_empty())
                {
                    return Err(EngineError::field_error(
                        "text",
                        format!("{chunk_id} has no context to accept: give the context's text"),
                    ));
                }
                ChunkContext {
                    text: card.generated_context.clone(),
                    status: ContextStatus::Verified,
                    provenance: Some(manual(strategy)),
                    notes: vec!["accepted by hand".into()],
                }
            }
            Decision::Reject => ChunkContext {
                text: card.generated_context.clone(),
                status: ContextStatus::Rejected,
                provenance: Some(manual(strategy)),
                notes: vec!["rejected by hand".into()],
            },
        };
        let status = context.status;
        self.set_contexts(&[ContextUpdate {
            chunk_id: chunk_id.to_string(),
            context,
        }])?;
        Ok(status)
    }

    /// Applies this version's context checks ([`situate_llm::verify::recheck`]) to every
    /// stored LLM context (verified or rejected; decisions by hand are left alone): a
    /// context now failing a check is rejected with the reasons, one now passing them all
    /// is verified. The cards change through the journal like any batch, and the context
    /// cache gets the same verdicts, so later runs that take contexts from it agree.
    pub fn reverify_contexts(&mut self) -> Result<ReverifyReport> {
        self.require_writer()?;
        let mut report = ReverifyReport::default();
        let mut updates = Vec::new();
        let mut doc: (String, String) = (String::new(), String::new());
        let store = &self.store;
        store.for_each_card_with_status(
            &[ContextStatus::Verified, ContextStatus::Rejected],
            &mut |rec| {
                let c = rec.card;
                let (Some(p), Some(text)) = (c.provenance.as_ref(), c.generated_context.as_deref())
                else {
                    return Ok(());
                };
                if p.method != ContextMethod::Llm {
                    return Ok(());
                }
                if doc.0 != c.document_id {
                    let text = store.document_text(&c.document_id)?.unwrap_or_default();
                    let known = match store.document(&c.document_id)? {
                        Some(d) => situate_llm::verify::checked_document(
                            &d.source,
                            &situate_core::DocKind::from_stored(&d.kind),
                            &text,
                        ),
                        None => text,
                    };
                    doc = (c.document_id.clone(), known);
                }
                report.checked += 1;
                let now = situate_llm::verify::recheck(
                    ChunkContext {
                        text: Some(text.to_string()),
                        status: c.context_status,
                        provenance: c.provenance.clone(),
                        notes: c.context_notes.clone(),
                    },
                    &c.original_text,
                    &doc.1,
                );
                if now.status != c.context_status || now.notes != c.context_notes {
                    updates.push(ContextUpdate {
                        chunk_id: c.chunk_id.clone(),
                        context: now,
                    });
                }
                Ok(())
            },
        )?;
        report.changed = updates.len() as u64;
        report.now_rejected = updates
            .iter()
            .filter(|u| u.context.status == ContextStatus::Rejected)
            .count() as u64;
        report.now_verified = report.changed - report.now_rejected;
        self.set_contexts(&updates)?;
        let cache = self.store.context_cache_writer()?;
        for u in &updates {
            if let Some(p) = u
                .context
                .provenance
                .as_ref()
                .filter(|p| !p.input_hash.is_empty())
            {
                cache.set_verdict(&p.input_hash, &u.context)?;
            }
        }
        Ok(report)
    }
}
