//! Evaluation sets: BEIR folders, Anthropic's codebase set, and situate's own JSONL format.
//!
//! Every set becomes an [`EvalSet`]: queries with their golden ids (and, for Anthropic's set,
//! golden texts, so that the cookbook's text matching can be reproduced), plus where its
//! corpus is, if it has one to ingest.
//!
//! situate's own format (one JSON object per line; see `situate eval-set new`):
//!
//! ```json
//! {"id": "q1", "query": "How do I rotate the API key?", "relevant": ["docs/keys.md#2"]}
//! {"id": "q2", "query": "Which port does the admin UI use?", "relevant": {"docs/admin.md#0": 2, "docs/admin.md#1": 1}, "answers": ["8443", "port 8443"]}
//! {"id": "q3", "query": "What is the CEO's salary?", "unanswerable": true}
//! ```
//!
//! `relevant` names chunk ids (`"judged": "document"` on a line makes them document ids);
//! grades default to 1. `answers` (optional) are gold answers for `situate eval --answers`.

use crate::Judgments;
use crate::beir::{EvalDataError, read_answers, read_qrels, read_queries};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

/// Whether golden ids name chunks or documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Golden ids are chunk ids.
    Chunk,
    /// Golden ids are document ids: a document ranks where its best chunk ranks.
    Document,
}

/// How a retrieved chunk is matched to a golden one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Matching {
    /// By id.
    Id,
    /// By the chunk's text with surrounding white space stripped (the Anthropic cookbook's
    /// way: 14 texts occur more than once in its corpus, so the two differ slightly).
    StrippedText,
}

/// One evaluation query.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalQuery {
    /// Its id.
    pub id: String,
    /// Its text.
    pub text: String,
    /// Golden ids with grades.
    pub judgments: Judgments,
    /// Golden chunk texts, in order, repeats kept (Anthropic's set; for text matching).
    pub golden_texts: Vec<String>,
    /// The answer is not in the corpus: the right outcome is to abstain.
    pub unanswerable: bool,
    /// Gold answers (short spans, any of which is right), for answer evaluation: BEIR's
    /// `metadata.answers` (XQuAD-R), or `answers` in situate's own format.
    pub answers: Vec<String>,
}

/// What to ingest to evaluate a set.
#[derive(Debug, Clone, PartialEq)]
pub enum Corpus {
    /// A BEIR folder (its `corpus.jsonl`).
    Beir(PathBuf),
    /// Anthropic's `codebase_chunks.json`.
    Anthropic(PathBuf),
    /// None: the set is evaluated against an existing index.
    Existing,
}

/// A loaded evaluation set.
#[derive(Debug, Clone)]
pub struct EvalSet {
    /// A short name (the folder or file name).
    pub name: String,
    /// The format it was read from (`beir`, `anthropic`, `jsonl`).
    pub format: &'static str,
    /// The queries, in a stable order.
    pub queries: Vec<EvalQuery>,
    /// What golden ids name.
    pub level: Level,
    /// The corpus to ingest.
    pub corpus: Corpus,
}

fn err(path: &Path, line: usize, message: impl Into<String>) -> EvalDataError {
    EvalDataError::Parse {
        path: path.display().to_string(),
        line,
        message: message.into(),
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> EvalDataError + '_ {
    move |source| EvalDataError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The whitespace-stripped form used by text matching.
pub fn stripped(text: &str) -> String {
    text.trim().to_string()
}

impl EvalSet {
    /// Loads a set, recognising its format: a folder with `queries.jsonl` and `qrels/` is
    /// BEIR; a folder with `evaluation_set.jsonl` and `codebase_chunks.json` is Anthropic's;
    /// a `.jsonl` file is situate's own format.
    pub fn load(path: &Path, split: &str) -> Result<EvalSet, EvalDataError> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "set".into());
        if path.is_dir() && path.join("evaluation_set.jsonl").is_file() {
            return load_anthropic(path, name);
        }
        if path.is_dir() && path.join("queries.jsonl").is_file() {
            return load_beir(path, split, name);
        }
        if path.is_file() {
            return load_jsonl(path, name);
        }
        Err(err(
            path,
            0,
            "not an evaluation set: expected a BEIR folder (queries.jsonl, qrels/), Anthropic's folder \
             (evaluation_set.jsonl, codebase_chunks.json) or a .jsonl file of questions",
        ))
    }

    /// Keeps the first `n` queries (a quick look).
    pub fn truncate(&mut self, n: usize) {
        self.queries.truncate(n);
    }
}

fn load_beir(dir: &Path, split: &str, name: String) -> Result<EvalSet, EvalDataError> {
    let queries = read_queries(&dir.join("queries.jsonl"))?;
    let qrels_path = dir.join("qrels").join(format!("{split}.tsv"));
    let qrels = read_qrels(&qrels_path)?;
    let mut answers = read_answers(&dir.join("queries.jsonl"))?;
    let mut ids: Vec<&String> = qrels.keys().collect();
    ids.sort();
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let text = queries.get(id).ok_or_else(|| {
            err(
                &qrels_path,
                0,
                format!("query {id} is judged but has no text"),
            )
        })?;
        let judgments = qrels[id].clone();
        out.push(EvalQuery {
            id: id.clone(),
            text: text.clone(),
            unanswerable: !judgments.is_answerable(),
            judgments,
            golden_texts: vec![],
            answers: answers.remove(id).unwrap_or_default(),
        });
    }
    // Records with a `metadata.parent` are ingested as chunks of their parent (situate-ingest),
    // so the judged ids are chunk ids.
    let level = if first_record_has_parent(&dir.join("corpus.jsonl")) {
        Level::Chunk
    } else {
        Level::Document
    };
    Ok(EvalSet {
        name,
        format: "beir",
        queries: out,
        level,
        corpus: Corpus::Beir(dir.to_path_buf()),
    })
}

/// Whether the corpus's first record names a `metadata.parent`.
fn first_record_has_parent(corpus: &Path) -> bool {
    let Ok(f) = std::fs::File::open(corpus) else {
        return false;
    };
    let Some(Ok(line)) = BufReader::new(f)
        .lines()
        .find(|l| l.as_ref().map_or(true, |l| !l.trim().is_empty()))
    else {
        return false;
    };
    serde_json::from_str::<serde_json::Value>(&line)
        .ok()
        .and_then(|v| {
            v.get("metadata")?
                .get("parent")?
                .as_str()
                .map(|p| !p.trim().is_empty())
        })
        .unwrap_or(false)
}

#[derive(Deserialize)]
struct AnthropicChunk {
    chunk_id: String,
    original_index: u32,
    content: String,
}

#[derive(Deserialize)]
struct AnthropicDoc {
    original_uuid: String,
    chunks: Vec<AnthropicChunk>,
}

#[derive(Deserialize)]
struct AnthropicQuery {
    query: String,
    golden_chunk_uuids: Vec<(String, u32)>,
    #[serde(default)]
    golden_chunks: Vec<GoldenChunk>,
}

#[derive(Deserialize)]
struct GoldenChunk {
    content: String,
}

fn load_anthropic(dir: &Path, name: String) -> Result<EvalSet, EvalDataError> {
    let chunks_path = dir.join("codebase_chunks.json");
    let f = std::fs::File::open(&chunks_path).map_err(io(&chunks_path))?;
    let docs: Vec<AnthropicDoc> = serde_json::from_reader(BufReader::new(f))
        .map_err(|e| err(&chunks_path, 0, e.to_string()))?;
    let mut chunk_of: HashMap<(String, u32), (String, String)> = HashMap::new();
    for d in docs {
        for c in d.chunks {
            chunk_of.insert(
                (d.original_uuid.clone(), c.original_index),
                (c.chunk_id, c.content),
            );
        }
    }
    let eval_path = dir.join("evaluation_set.jsonl");
    let f = std::fs::File::open(&eval_path).map_err(io(&eval_path))?;
    let mut out = Vec::new();
    for (n, line) in BufReader::new(f).lines().enumerate() {
        let line = line.map_err(io(&eval_path))?;
        if line.trim().is_empty() {
            continue;
        }
        let q: AnthropicQuery =
            serde_json::from_str(&line).map_err(|e| err(&eval_path, n + 1, e.to_string()))?;
        let mut judgments = Judgments::default();
        let mut golden_texts = Vec::new();
        for (i, key) in q.golden_chunk_uuids.iter().enumerate() {
            let (id, content) = chunk_of.get(key).ok_or_else(|| {
                err(
                    &eval_path,
                    n + 1,
                    format!("golden chunk {key:?} is not in codebase_chunks.json"),
                )
            })?;
            judgments.0.insert(id.clone(), 1.0);
            // The cookbook compares with the golden chunk's own copy of the text.
            golden_texts.push(stripped(
                q.golden_chunks.get(i).map_or(content, |g| &g.content),
            ));
        }
        out.push(EvalQuery {
            id: format!("q{}", out.len()),
            text: q.query,
            unanswerable: judgments.0.is_empty(),
            judgments,
            golden_texts,
            // The set's `answer` is an explanation, not a span to match.
            answers: vec![],
        });
    }
    Ok(EvalSet {
        name,
        format: "anthropic",
        queries: out,
        level: Level::Chunk,
        corpus: Corpus::Anthropic(chunks_path),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OwnLine {
    #[serde(default)]
    id: Option<String>,
    query: String,
    #[serde(default)]
    relevant: Option<Relevant>,
    #[serde(default)]
    unanswerable: bool,
    #[serde(default)]
    judged: Option<String>,
    /// Gold answers, any of which is right (answer evaluation).
    #[serde(default)]
    answers: Vec<String>,
    /// Free text for the team (who judged, why); not used.
    #[serde(default, rename = "note")]
    _note: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Relevant {
    Ids(Vec<String>),
    Graded(BTreeMap<String, f64>),
}

/// One line of situate's own format, parsed (shared with `situate eval-set check`).
#[derive(Debug, Clone, PartialEq)]
pub struct OwnQuery {
    /// The parsed query.
    pub query: EvalQuery,
    /// What its ids name.
    pub level: Level,
    /// Its 1-based line.
    pub line: usize,
}

/// Reads situate's own JSONL format, line by line (a bad line is an error naming the line).
pub fn read_own(path: &Path) -> Result<Vec<OwnQuery>, EvalDataError> {
    let f = std::fs::File::open(path).map_err(io(path))?;
    let mut out = Vec::new();
    for (n, line) in BufReader::new(f).lines().enumerate() {
        let line = line.map_err(io(path))?;
        if line.trim().is_empty() || line.trim_start().starts_with("//") {
            continue;
        }
        let l: OwnLine =
            serde_json::from_str(&line).map_err(|e| err(path, n + 1, e.to_string()))?;
        let level = match l.judged.as_deref() {
            None | Some("chunk") => Level::Chunk,
            Some("document") => Level::Document,
            Some(other) => {
                return Err(err(
                    path,
                    n + 1,
                    format!("judged must be chunk or document, not {other:?}"),
                ));
            }
        };
        let judgments = Judgments(match l.relevant {
            None => HashMap::new(),
            Some(Relevant::Ids(ids)) => ids.into_iter().map(|i| (i, 1.0)).collect(),
            Some(Relevant::Graded(g)) => g.into_iter().collect(),
        });
        if l.unanswerable && judgments.is_answerable() {
            return Err(err(
                path,
                n + 1,
                "a question cannot be unanswerable and have relevant ids",
            ));
        }
        if !l.unanswerable && !judgments.is_answerable() {
            return Err(err(
                path,
                n + 1,
                "no relevant ids: list them, or mark the question \"unanswerable\": true",
            ));
        }
        if l.query.trim().is_empty() {
            return Err(err(path, n + 1, "empty query"));
        }
        out.push(OwnQuery {
            query: EvalQuery {
                id: l.id.unwrap_or_else(|| format!("line{}", n + 1)),
                text: l.query,
                judgments,
                golden_texts: vec![],
                unanswerable: l.unanswerable,
                answers: l.answers,
            },
            level,
            line: n + 1,
        });
    }
    Ok(out)
}

/// The template `situate eval-set new` writes: the format, explained in comments, and three
/// example questions to replace.
pub const OWN_TEMPLATE: &str = r#"// situate evaluation set: one JSON object per line; lines starting with // are comments.
// "relevant" lists golden chunk ids (as `situate search` prints them), or maps them to grades;
// add "judged": "document" to a line to list document ids instead. Questions whose answer is
// not in the documents are marked "unanswerable": true. "note" is free text.
{"id": "q1", "query": "How do I rotate an API key?", "relevant": ["docs/security.md#2"], "note": "example: replace me"}
{"id": "q2", "query": "Which port does the admin UI listen on?", "relevant": {"docs/admin.md#0": 2, "docs/admin.md#1": 1}}
{"id": "q3", "query": "What is the CEO's salary?", "unanswerable": true}
"#;

/// Writes [`OWN_TEMPLATE`] to `path`, which must not exist yet.
pub fn write_own_template(path: &Path) -> Result<(), EvalDataError> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io(path))?;
    f.write_all(OWN_TEMPLATE.as_bytes()).map_err(io(path))
}

/// Appends one question to a set of situate's own format (created when missing): its
/// golden chunk ids, or none for a question the documents cannot answer. The id defaults to
/// `q<N+1>` for a set of N questions and must not be taken. The line is written with one
/// write, so an interrupted append leaves the file as it was or complete. Returns the id.
pub fn append_own(
    path: &Path,
    id: Option<String>,
    query: &str,
    relevant: &[String],
) -> Result<String, EvalDataError> {
    use std::io::Write;
    if query.trim().is_empty() {
        return Err(err(path, 0, "the query is empty"));
    }
    let existing = if path.exists() {
        read_own(path)?
    } else {
        Vec::new()
    };
    let id = id.unwrap_or_else(|| format!("q{}", existing.len() + 1));
    if existing.iter().any(|q| q.query.id == id) {
        return Err(err(
            path,
            0,
            format!("the set already has a question with id {id:?}"),
        ));
    }
    let line = if relevant.is_empty() {
        serde_json::json!({"id": id, "query": query, "unanswerable": true})
    } else {
        serde_json::json!({"id": id, "query": query, "relevant": relevant})
    };
    let mut text = line.to_string();
    text.push('\n');
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io(path))?;
    f.write_all(text.as_bytes()).map_err(io(path))?;
    Ok(id)
}

fn load_jsonl(path: &Path, name: String) -> Result<EvalSet, EvalDataError> {
    let own = read_own(path)?;
    let level = own.first().map_or(Level::Chunk, |q| q.level);
    if let Some(q) = own.iter().find(|q| q.level != level) {
        return Err(err(
            path,
            q.line,
            "all lines of a set must judge the same level (chunk or document)",
        ));
    }
    Ok(EvalSet {
        name: name.trim_end_matches(".jsonl").to_string(),
        format: "jsonl",
        queries: own.into_iter().map(|q| q.query).collect(),
        level,
        corpus: Corpus::Existing,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_format_reads_ids_grades_and_unanswerable() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("team.jsonl");
        std::fs::write(
            &p,
            "{\"id\":\"a\",\"query\":\"q one\",\"relevant\":[\"d#0\",\"d#1\"]}\n\n// a comment\n{\"query\":\"q two\",\"relevant\":{\"d#2\":2}}\n{\"query\":\"q three\",\"unanswerable\":true}\n",
        )
        .expect("w");
        let set = EvalSet::load(&p, "test").expect("load");
        assert_eq!(set.queries.len(), 3);
        assert_eq!(set.queries[0].judgments.0.len(), 2);
        assert_eq!(set.queries[1].id, "line4");
        assert_eq!(set.queries[1].judgments.0["d#2"], 2.0);
        assert!(set.queries[2].unanswerable);
        assert_eq!(set.corpus, Corpus::Existing);
    }

    #[test]
    fn own_format_errors_name_the_line() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("bad.jsonl");
        std::fs::write(
            &p,
            "{\"query\":\"ok\",\"relevant\":[\"x\"]}\n{\"query\":\"no golden\"}\n",
        )
        .expect("w");
        let e = EvalSet::load(&p, "test")
            .expect_err("line 2 is bad")
            .to_string();
        assert!(e.contains(":2:") && e.contains("unanswerable"), "{e}");
        std::fs::write(&p, "{\"query\":\"x\",\"relevent\":[\"x\"]}\n").expect("w");
        assert!(
            EvalSet::load(&p, "test")
                .expect_err("typo")
                .to_string()
                .contains("unknown field")
        );
    }
}
