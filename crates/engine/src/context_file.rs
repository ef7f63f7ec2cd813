//! The contexts file: one JSON object per line with a card's context and its provenance
//! (`situate contexts export` / `import`). Contexts written once (by an LLM that cost time
//! or money) move to another index of the same corpus with no LLM call; `situate eval`
//! evaluates them as `file:CONTEXTS.jsonl`.
//!
//! ```json
//! {"document_id": "docs/a.md", "chunk_id": "docs/a.md#3", "context": "...", "model": "...",
//!  "prompt_version": "anthropic-v1", "status": "verified", "method": "llm",
//!  "strategy": "whole", "input_hash": "...", "notes": []}
//! ```
//!
//! A composed context (`--context document`) also has `"parts"`: each part's kind
//! (`document`, `structural`, `chunk`), byte range, model, prompt version and input hash.

use crate::contexts::ContextUpdate;
use crate::{Engine, EngineError, Result};
use situate_core::{ChunkContext, ContextMethod, ContextStatus, Provenance};
use std::io::{BufRead, Write};
use std::path::Path;
use std::str::FromStr;

/// One line of a contexts file.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ContextRecord {
    /// The document.
    pub document_id: String,
    /// The chunk.
    pub chunk_id: String,
    /// The context text, if any.
    pub context: Option<String>,
    /// The model that wrote it.
    pub model: Option<String>,
    /// The prompt version.
    pub prompt_version: Option<String>,
    /// `pending`, `generated`, `verified`, `rejected` or `failed`.
    pub status: String,
    /// Who wrote or decided it (`llm`, `structural`, `manual`, `import`); `import` when
    /// absent.
    #[serde(default)]
    pub method: Option<String>,
    /// What part of the document the model saw.
    #[serde(default)]
    pub strategy: Option<String>,
    /// The context's input hash.
    #[serde(default)]
    pub input_hash: Option<String>,
    /// The checks' reasons.
    #[serde(default)]
    pub notes: Vec<String>,
    /// Where each part of a composed context came from (`--context document`); absent for
    /// a context written in one piece.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<situate_core::ContextPart>,
}

/// What [`Engine::import_contexts`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ImportReport {
    /// Cards whose context was set.
    pub imported: usize,
    /// Lines whose chunk this index does not have (or has under another document), with
    /// the reason.
    pub skipped: Vec<String>,
}

/// What [`Engine::export_contexts`] wrote (`situate contexts export`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct ExportAnswer {
    /// Contexts written.
    pub exported: u64,
    /// The file.
    pub file: std::path::PathBuf,
}

impl Engine {
    /// Writes the context of every card that has one (or a status other than pending) to
    /// `file`, atomically (a temporary file, synced, then renamed). Returns the lines
    /// written.
    pub fn export_contexts(&self, file: &Path) -> Result<u64> {
        let tmp = file.with_extension("jsonl.partial");
        let f = std::fs::File::create(&tmp).map_err(crate::io("cannot create", &tmp))?;
        let mut w = std::io::BufWriter::new(f);
        let mut n = 0u64;
        let mut failed: Option<std::io::Error> = None;
        self.store.for_each_card_with_status(&[], &mut |rec| {
            let c = rec.card;
            if failed.is_some()
                || (c.generated_context.is_none() && c.context_status == ContextStatus::Pending)
            {
                return Ok(());
            }
            let p = c.provenance.as_ref();
            let line = ContextRecord {
                document_id: c.document_id.clone(),
                chunk_id: c.chunk_id.clone(),
                context: c.generated_context.clone(),
                model: p.and_then(|p| p.model.clone()),
                prompt_version: p.and_then(|p| p.prompt_version.clone()),
                status: c.context_status.as_str().into(),
                method: p.map(|p| p.method.as_str().to_string()),
                strategy: p.and_then(|p| p.strategy.clone()),
                input_hash: p.map(|p| p.input_hash.clone()),
                notes: c.context_notes.clone(),
                parts: p.map(|p| p.parts.clone()).unwrap_or_default(),
            };
            let written = serde_json::to_writer(&mut w, &line)
                .map_err(std::io::Error::from)
                .and_then(|()| w.write_all(b"\n"));
            match written {
                Ok(()) => n += 1,
                Err(e) => failed = Some(e),
            }
            Ok(())
        })?;
        let finished = match failed {
            Some(e) => Err(e),
            None => w
                .into_inner()
                .map_err(|e| e.into_error())
                .and_then(|f| f.sync_all()),
        };
        if let Err(e) = finished {
            let _ = std::fs::remove_file(&tmp);
            return Err(crate::io("cannot write", file)(e));
        }
        std::fs::rename(&tmp, file).map_err(crate::io("cannot write", file))?;
        Ok(n)
    }

    /// Reads a contexts file and sets the contexts it holds on this index's cards. Every
    /// line is read and checked first: a malformed line is an error naming it, and nothing
    /// is written. Lines whose chunk this index does not have, or has under another
    /// document, are skipped and reported.
    pub fn import_contexts(&mut self, file: &Path) -> Result<ImportReport> {
        self.require_writer()?;
        let records = read_records(file)?;
        let mut updates = Vec::new();
        let mut skipped = Vec::new();
        for (x, status, method) in records {
            match self.store.card_by_chunk_id(&x.chunk_id)? {
                Some(rec) if rec.card.document_id == x.document_id => updates.push(ContextUpdate {
                    chunk_id: x.chunk_id,
                    context: ChunkContext {
                        text: x.context,
                        status,
                        provenance: Some(Provenance {
                            method,
                            model: x.model,
                            prompt_version: x.prompt_version,
                            input_hash: x.input_hash.unwrap_or_default(),
                            strategy: x.strategy,
                            parts: x.parts,
                        }),
                        notes: x.notes,
                    },
                }),
                Some(_) => skipped.push(format!("{} (another document here)", x.chunk_id)),
                None => skipped.push(format!("{} (no such chunk here)", x.chunk_id)),
            }
        }
        let imported = self.set_contexts(&updates)?;
        Ok(ImportReport { imported, skipped })
    }
}

/// Every record of `file` with its status and method parsed; the first bad line is an
/// error that names it.
fn read_records(file: &Path) -> Result<Vec<(ContextRecord, ContextStatus, ContextMethod)>> {
    let f = std::fs::File::open(file).map_err(crate::io("cannot open", file))?;
    let bad = |line: usize, what: String| {
        EngineError::Invalid(format!("{} line {line}: {what}", file.display()))
    };
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.map_err(crate::io("cannot read", file))?;
        if line.trim().is_empty() {
            continue;
        }
        let x: ContextRecord = serde_json::from_str(&line)
            .map_err(|e| bad(i + 1, format!("not a context record ({e})")))?;
        let status = ContextStatus::from_str(&x.status)
            .map_err(|_| bad(i + 1, format!("unknown status {:?}", x.status)))?;
        let method = match x.method.as_deref() {
            None => ContextMethod::Import,
            Some(m) => ContextMethod::from_str(m).map_err(|e| bad(i + 1, e))?,
        };
        out.push((x, status, method));
    }
    Ok(out)
}
