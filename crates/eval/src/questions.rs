//! The one reader of question files, for every command that takes questions (controls of
//! `situate eval`, the rerank benchmark): a BEIR `queries.jsonl` (`_id`, `text`), situate's
//! own `.jsonl` (`id`, `query`; see [`crate::dataset`]), or plain text, one question per
//! line.

use crate::beir::{EvalDataError, read_queries_in_order};
use crate::dataset::read_own;
use std::path::Path;

/// The questions of `path` as (id, text), in file order. A `.jsonl` file whose first record
/// has an `_id` is BEIR's; any other `.jsonl` is situate's own format; anything else is
/// plain text with ids `line1`, `line2`, ... (blank lines skipped).
pub fn read_questions(path: &Path) -> Result<Vec<(String, String)>, EvalDataError> {
    let io = |source| EvalDataError::Io {
        path: path.display().to_string(),
        source,
    };
    let is_jsonl = path.extension().is_some_and(|e| e == "jsonl");
    if !is_jsonl {
        let text = std::fs::read_to_string(path).map_err(io)?;
        return Ok(text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| (format!("line{}", i + 1), l.trim().to_string()))
            .collect());
    }
    if first_record_is_beir(path)? {
        return read_queries_in_order(path);
    }
    Ok(read_own(path)?
        .into_iter()
        .map(|q| (q.query.id, q.query.text))
        .collect())
}

/// Whether the first record of a `.jsonl` file has BEIR's `_id`.
fn first_record_is_beir(path: &Path) -> Result<bool, EvalDataError> {
    use std::io::BufRead;
    let f = std::fs::File::open(path).map_err(|source| EvalDataError::Io {
        path: path.display().to_string(),
        source,
    })?;
    for line in std::io::BufReader::new(f).lines() {
        let line = line.map_err(|source| EvalDataError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let t = line.trim();
        if t.is_empty() || t.starts_with("//") {
            continue;
        }
        return Ok(
            serde_json::from_str::<serde_json::Value>(t).is_ok_and(|v| v.get("_id").is_some())
        );
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beir_own_and_plain_question_files_read_alike() {
        let dir = tempfile::tempdir().expect("tmp");
        let beir = dir.path().join("queries.jsonl");
        std::fs::write(
            &beir,
            "{\"_id\":\"9\",\"text\":\"first?\"}\n{\"_id\":1,\"text\":\"second?\"}\n",
        )
        .expect("w");
        assert_eq!(
            read_questions(&beir).expect("beir"),
            vec![
                ("9".to_string(), "first?".to_string()),
                ("1".to_string(), "second?".to_string())
            ],
            "file order, not id order"
        );
        let own = dir.path().join("team.jsonl");
        std::fs::write(
            &own,
            "// comment\n{\"id\":\"a\",\"query\":\"own?\",\"unanswerable\":true}\n",
        )
        .expect("w");
        assert_eq!(
            read_questions(&own).expect("own"),
            vec![("a".to_string(), "own?".to_string())]
        );
        let plain = dir.path().join("controls.txt");
        std::fs::write(&plain, "  one?\n\ntwo?\n").expect("w");
        assert_eq!(
            read_questions(&plain).expect("plain"),
            vec![
                ("line1".to_string(), "one?".to_string()),
                ("line3".to_string(), "two?".to_string())
            ]
        );
        let broken = dir.path().join("broken.jsonl");
        std::fs::write(&broken, "{\"_id\":\"1\",\"text\":\"ok\"}\nnot json\n").expect("w");
        let e = read_questions(&broken).expect_err("line 2").to_string();
        assert!(e.contains(":2:"), "{e}");
    }
}
