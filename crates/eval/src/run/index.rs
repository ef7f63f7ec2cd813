//! The evaluation index of a configuration: built from the set's corpus once per
//! context, and kept.

use super::*;

/// Builds (or reuses: ingest skips what is unchanged) the index of a corpus for one
/// context.
pub(super) fn build_index(
    input: &Path,
    format: situate_ingest::SourceFormat,
    work: &Path,
    set: &str,
    cfg: &EvalConfig,
    req: &EvalRequest,
    notes: &mut Vec<String>,
) -> Result<Engine> {
    let contexts_file = cfg.context.strip_prefix("file:").map(PathBuf::from);
    // Imported contexts go into an index built without any, named after the file's content.
    let file_tag;
    let context = match &contexts_file {
        Some(f) => {
            let bytes = std::fs::read(f).map_err(io("cannot read", f))?;
            file_tag = format!("file-{}", &situate_core::hash_parts(&[&bytes])[..12]);
            file_tag.as_str()
        }
        None => cfg.context.as_str(),
    };
    // BM25-only configurations need no embeddings; the others share one index per
    // (context, embedder).
    let embedder = if cfg.mode == "bm25" {
        "none"
    } else {
        req.embedder.as_str()
    };
    let tag: String = embedder
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let dir = work.join(format!(
        "{set}-{context}-{tag}-{}-{}",
        req.max_tokens, req.overlap
    ));
    built_from(&dir, input)?;
    let create = CreateSettings {
        embedder: embedder.to_string(),
        ..CreateSettings::default()
    };
    let mut engine = Engine::open_or_create(&dir, create)?;
    let method = if contexts_file.is_some() {
        "none"
    } else {
        context
    };
    let mut opts = IngestOptions::new(
        situate_contextualize::by_name(method)
            .map_err(|e| EngineError::field_error("configs", e))?,
    );
    opts.sources.format = format;
    opts.chunker.max_tokens = req.max_tokens;
    opts.chunker.overlap_tokens = req.overlap;
    let report = engine.ingest(&[input.to_path_buf()], opts, &mut |_| {})?;
    if report.documents_ok() == 0 {
        return Err(EngineError::field_error(
            "dataset",
            format!("nothing could be ingested from {}", input.display()),
        ));
    }
    if let Some(f) = &contexts_file
        && report.added + report.replaced > 0
    {
        let imported = engine.import_contexts(f)?;
        notes.push(format!(
            "imported {} contexts from {} ({} skipped: chunks not in this corpus)",
            imported.imported,
            f.display(),
            imported.skipped.len()
        ));
    }
    Ok(engine)
}

/// The file in an evaluation index that names the corpus it was built from.
const BUILT_FROM: &str = "eval-corpus.txt";

/// Refuses to ingest `input` into the evaluation index `dir` when that index was built from
/// another corpus with the same set name (XQuAD-R's `en/sentence` and `ru/sentence` share a
/// `--work` folder): an ingest there would replace documents of one corpus by the other's
/// with the same ids, silently. Records `input` in a new (or older, unmarked) index.
fn built_from(dir: &Path, input: &Path) -> Result<()> {
    let input = std::fs::canonicalize(input).map_err(io("cannot read", input))?;
    let shown = input.display().to_string();
    let marker = dir.join(BUILT_FROM);
    match std::fs::read_to_string(&marker) {
        Ok(recorded) if recorded.trim() != shown => Err(EngineError::field_error(
            "work",
            format!(
                "the evaluation index {} was built from {}, not {shown}: the two sets have the same name; give each its own --work folder",
                dir.display(),
                recorded.trim()
            ),
        )),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(io("cannot create", dir))?;
            std::fs::write(&marker, format!("{shown}\n")).map_err(io("cannot write", &marker))
        }
        Err(e) => Err(io("cannot read", &marker)(e)),
    }
}
