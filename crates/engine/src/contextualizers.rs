//! From a context method (`none`, `structural`, `llm`, `document`, `document+llm`) and the
//! `[llm]` settings to a
//! contextualizer, the one way every front end builds one.

use crate::settings::{DEFAULT_LLM, LlmSettings};
use crate::{EngineError, Result};
use situate_core::Contextualizer;
use situate_llm::cost::Price;

/// What a run asks of the LLM, beyond `[llm]` (`--llm`, `--budget`, `--dry-run`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LlmRun {
    /// The model, over `[llm] model`.
    pub llm: Option<String>,
    /// Dollars not to spend beyond.
    pub budget: Option<f64>,
    /// Estimate only: call nothing, write nothing.
    pub dry_run: bool,
}

/// A contextualizer and the price its tokens cost (when known).
pub struct BuiltContextualizer {
    /// The contextualizer.
    pub contextualizer: Box<dyn Contextualizer>,
    /// Dollars per million tokens, for LLMs with a known price.
    pub price: Option<Price>,
    /// The method (`none`, `structural`, `llm`, `document`, `document+llm`).
    pub method: String,
}

/// A context method a run asks for: its names are listed here once, and parsed once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContextChoice {
    /// No context (`none`).
    None,
    /// The document's title and headings (`structural`).
    Structural,
    /// An LLM's note on each chunk, the whole document in the prompt (`llm`).
    Llm,
    /// An LLM's description of the document, with the structural context (`document`).
    Document,
    /// `document` and the chunk note (`document+llm`; `document+chunk` names it too).
    DocumentLlm,
}

impl ContextChoice {
    /// Every method, in the order help texts list them.
    pub const ALL: [ContextChoice; 5] = [
        ContextChoice::None,
        ContextChoice::Structural,
        ContextChoice::Llm,
        ContextChoice::Document,
        ContextChoice::DocumentLlm,
    ];

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            ContextChoice::None => "none",
            ContextChoice::Structural => "structural",
            ContextChoice::Llm => "llm",
            ContextChoice::Document => "document",
            ContextChoice::DocumentLlm => "document+llm",
        }
    }

    /// The method `name` names (`document+chunk` is `document+llm`), or an invalid
    /// `context` field listing the names.
    pub fn parse(name: &str) -> Result<ContextChoice> {
        if name == "document+chunk" {
            return Ok(ContextChoice::DocumentLlm);
        }
        ContextChoice::ALL
            .into_iter()
            .find(|c| c.as_str() == name)
            .ok_or_else(|| {
                EngineError::field_error(
                    "context",
                    format!(
                        "unknown context method {name:?}: expected {}",
                        ContextChoice::names()
                    ),
                )
            })
    }

    /// The names, for errors: `none, structural, llm, document or document+llm`.
    pub fn names() -> String {
        let names: Vec<&str> = ContextChoice::ALL.iter().map(|c| c.as_str()).collect();
        let (last, rest) = names.split_last().unwrap_or((&"", &[]));
        format!("{} or {last}", rest.join(", "))
    }

    /// Whether it calls an LLM.
    pub fn uses_llm(self) -> bool {
        matches!(
            self,
            ContextChoice::Llm | ContextChoice::Document | ContextChoice::DocumentLlm
        )
    }
}

/// Whether the context method `method` calls an LLM (`llm`, `document`, `document+llm`).
pub fn uses_llm(method: &str) -> bool {
    ContextChoice::parse(method).is_ok_and(ContextChoice::uses_llm)
}

/// Builds the contextualizer `method` names; the LLM ones (`llm`, `document`,
/// `document+llm`) from `[llm]` and `run`.
pub fn build_contextualizer(
    method: &str,
    settings: &LlmSettings,
    run: &LlmRun,
) -> Result<BuiltContextualizer> {
    let choice = ContextChoice::parse(method)?;
    if !choice.uses_llm() {
        return build_without_llm(choice, run);
    }
    if let Some(b) = run.budget
        && !(b.is_finite() && b >= 0.0)
    {
        return Err(EngineError::field_error(
            "budget",
            format!("{b}: expected a number of dollars, 0 or more"),
        ));
    }
    let s = settings;
    let model = run
        .llm
        .as_deref()
        .or(s.model.as_deref())
        .unwrap_or(DEFAULT_LLM);
    let model = situate_llm::resolve(model)?;
    let mut c = situate_llm::LlmContextualizer::new(model);
    c = with_prompt(c, s)?;
    if let Some(m) = s.max_tokens {
        c = c.with_max_tokens(m);
    }
    let c = c
        .with_document_tokens(s.document_tokens)
        .with_price(s.price)
        .with_budget(run.budget)
        .estimate_only(run.dry_run);
    let price = c.price();
    if run.budget.is_some() && price.is_none() {
        return Err(EngineError::field_error(
            "budget",
            format!(
                "needs the model's price: {} is not in the price table; give [llm.price] in situate.toml (input, cache_write, cache_read, output in dollars per million tokens)",
                c.llm().id()
            ),
        ));
    }
    let contextualizer: Box<dyn Contextualizer> = match choice {
        ContextChoice::Llm => Box::new(c),
        _ => Box::new(situate_llm::DocumentContextualizer::new(
            c,
            choice == ContextChoice::DocumentLlm,
        )),
    };
    Ok(BuiltContextualizer {
        contextualizer,
        price,
        method: choice.as_str().into(),
    })
}

/// A context method that calls no LLM (`none`, `structural`): the LLM run's settings
/// (`llm`, `budget`, `dry_run`) are refused for it.
fn build_without_llm(choice: ContextChoice, run: &LlmRun) -> Result<BuiltContextualizer> {
    let method = choice.as_str();
    if run.budget.is_some() || run.dry_run || run.llm.is_some() {
        let field = if run.llm.is_some() {
            "llm"
        } else if run.budget.is_some() {
            "budget"
        } else {
            "dry_run"
        };
        return Err(EngineError::field_error(
            field,
            format!(
                "applies to the context methods llm, document and document+llm, not {method:?}"
            ),
        ));
    }
    let contextualizer: Box<dyn Contextualizer> = match choice {
        ContextChoice::Structural => Box::new(situate_contextualize::Structural),
        _ => Box::new(situate_contextualize::NoContext),
    };
    Ok(BuiltContextualizer {
        contextualizer,
        price: None,
        method: method.to_string(),
    })
}

/// `c` with `[llm]`'s prompt: a built-in one by name or a template from files (not both),
/// the glossary added to either, and the rule for documents longer than the window.
fn with_prompt(
    mut c: situate_llm::LlmContextualizer,
    s: &LlmSettings,
) -> Result<situate_llm::LlmContextualizer> {
    use situate_llm::prompt::{ANTHROPIC_TEMPLATE, PromptTemplate};
    let builtin = match s.prompt.as_deref() {
        None => None,
        Some(name) => Some(PromptTemplate::named_text(name).ok_or_else(|| {
            EngineError::field_error(
                "llm.prompt",
                format!(
                    "{name:?}: expected anthropic or small (or a template file as [llm] template)"
                ),
            )
        })?),
    };
    if let Some(t) = &s.template {
        if let Some(p) = &s.prompt {
            return Err(EngineError::field_error(
                "llm.template",
                format!(
                    "[llm] prompt = {p:?} and [llm] template = {:?} are both set: give one",
                    t.display()
                ),
            ));
        }
        c = c.with_template(PromptTemplate::from_files(t, s.glossary.as_deref())?);
    } else if let Some(gl) = &s.glossary {
        let text =
            std::fs::read_to_string(gl).map_err(crate::io("cannot read the glossary", gl))?;
        let base = builtin.unwrap_or(ANTHROPIC_TEMPLATE);
        c = c.with_template(PromptTemplate::parse(base, Some(&text), "built-in")?);
    } else if let Some(named) = s.prompt.as_deref().and_then(PromptTemplate::named) {
        c = c.with_template(named);
    }
    if let Some(l) = &s.long_documents {
        let rule = situate_llm::prompt::LongDocuments::parse(l).ok_or_else(|| {
            EngineError::field_error(
                "llm.long_documents",
                format!("{l:?}: expected window, head or fail"),
            )
        })?;
        c = c.with_long_documents(rule);
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_context_method_parses_from_its_name_and_the_error_lists_them() {
        for c in ContextChoice::ALL {
            assert_eq!(ContextChoice::parse(c.as_str()).ok(), Some(c));
        }
        assert_eq!(
            ContextChoice::parse("document+chunk").ok(),
            Some(ContextChoice::DocumentLlm)
        );
        let e = ContextChoice::parse("fancy").expect_err("unknown");
        assert_eq!(e.field(), Some("context"));
        assert!(
            e.to_string()
                .ends_with("expected none, structural, llm, document or document+llm"),
            "{e}"
        );
        assert!(uses_llm("document") && !uses_llm("structural") && !uses_llm("fancy"));
    }
}
