//! Reading BEIR evaluation files: `queries.jsonl` and `qrels/<split>.tsv`.

use crate::Judgments;
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::Path;

pub use situate_core::EvalDataError;

fn lines(
    path: &Path,
) -> Result<impl Iterator<Item = (usize, Result<String, EvalDataError>)>, EvalDataError> {
    let p = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|source| EvalDataError::Io {
        path: p.clone(),
        source,
    })?;
    Ok(BufReader::new(f).lines().enumerate().map(move |(i, l)| {
        (
            i + 1,
            l.map_err(|source| EvalDataError::Io {
                path: p.clone(),
                source,
            }),
        )
    }))
}

/// Reads `queries.jsonl` (`_id`, `text`) into id → text.
pub fn read_queries(path: &Path) -> Result<BTreeMap<String, String>, EvalDataError> {
    Ok(read_queries_in_order(path)?.into_iter().collect())
}

/// The JSON values of a JSONL file's non-blank lines, with their line numbers.
fn json_lines(path: &Path) -> Result<Vec<(usize, serde_json::Value)>, EvalDataError> {
    let mut out = Vec::new();
    for (n, line) in lines(path)? {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let v = serde_json::from_str(&line).map_err(|e| EvalDataError::Parse {
            path: path.display().to_string(),
            line: n,
            message: e.to_string(),
        })?;
        out.push((n, v));
    }
    Ok(out)
}

/// A query's `_id`, a string or a number.
fn query_id(v: &serde_json::Value) -> Option<String> {
    match &v["_id"] {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(x) => Some(x.to_string()),
        _ => None,
    }
}

/// Reads `queries.jsonl` (`_id`, `text`) as (id, text) in file order.
pub fn read_queries_in_order(path: &Path) -> Result<Vec<(String, String)>, EvalDataError> {
    let mut out = Vec::new();
    for (n, v) in json_lines(path)? {
        let Some(id) = query_id(&v) else {
            return Err(EvalDataError::Parse {
                path: path.display().to_string(),
                line: n,
                message: "no _id".into(),
            });
        };
        let text = v["text"].as_str().unwrap_or_default().to_string();
        out.push((id, text));
    }
    Ok(out)
}

/// Reads the gold answers of `queries.jsonl` (`metadata.answers`, a list of strings, as
/// XQuAD-R has them) into id → answers; queries without any are left out.
pub fn read_answers(path: &Path) -> Result<HashMap<String, Vec<String>>, EvalDataError> {
    let mut out = HashMap::new();
    for (_, v) in json_lines(path)? {
        let Some(id) = query_id(&v) else {
            continue;
        };
        let answers: Vec<String> = match &v["metadata"]["answers"] {
            serde_json::Value::Array(a) => a
                .iter()
                .filter_map(|x| x.as_str())
                .map(str::trim)
                .filter(|x| !x.is_empty())
                .map(String::from)
                .collect(),
            serde_json::Value::String(s) if !s.trim().is_empty() => vec![s.trim().to_string()],
            _ => vec![],
        };
        if !answers.is_empty() {
            out.insert(id, answers);
        }
    }
    Ok(out)
}

/// Reads a qrels TSV (`query-id`, `corpus-id`, `score`; a header line is allowed) into
/// query id → judgments.
pub fn read_qrels(path: &Path) -> Result<HashMap<String, Judgments>, EvalDataError> {
    let mut out: HashMap<String, Judgments> = HashMap::new();
    for (n, line) in lines(path)? {
        let line = line?;
        let cols: Vec<&str> = line.split('\t').map(str::trim).collect();
        if line.trim().is_empty() || (n == 1 && cols.first() == Some(&"query-id")) {
            continue;
        }
        let err = |m: &str| EvalDataError::Parse {
            path: path.display().to_string(),
            line: n,
            message: m.into(),
        };
        if cols.len() < 3 {
            return Err(err(
                "expected query-id, corpus-id and score separated by tabs",
            ));
        }
        let grade: f64 = cols[2].parse().map_err(|_| err("score is not a number"))?;
        out.entry(cols[0].to_string())
            .or_default()
            .0
            .insert(cols[1].to_string(), grade);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_queries_and_qrels() {
        let dir = std::env::temp_dir().join(format!("situate-eval-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(
            dir.join("q.jsonl"),
            "{\"_id\":\"1\",\"text\":\"cats?\"}\n{\"_id\":2,\"text\":\"dogs\"}\n",
        )
        .expect("w");
        std::fs::write(
            dir.join("t.tsv"),
            "query-id\tcorpus-id\tscore\n1\td1\t1\n1\td2\t2\n2\td3\t0\n",
        )
        .expect("w");
        let q = read_queries(&dir.join("q.jsonl")).expect("queries");
        std::fs::write(
            dir.join("a.jsonl"),
            "{\"_id\":\"1\",\"text\":\"x\",\"metadata\":{\"answers\":[\"308\",\" \"]}}\n{\"_id\":\"2\",\"text\":\"y\"}\n",
        )
        .expect("w");
        let a = read_answers(&dir.join("a.jsonl")).expect("answers");
        assert_eq!(a.get("1"), Some(&vec!["308".to_string()]));
        assert!(!a.contains_key("2"));
        assert_eq!(q.get("2").map(String::as_str), Some("dogs"));
        let r = read_qrels(&dir.join("t.tsv")).expect("qrels");
        assert_eq!(r["1"].0.len(), 2);
        assert!(!r["2"].is_answerable());
        std::fs::write(dir.join("bad.tsv"), "1\td1\n").expect("w");
        assert!(read_qrels(&dir.join("bad.tsv")).is_err());
        std::fs::remove_dir_all(&dir).ok();
    }
}
