//! `situate eval-set check`: a question file checked against an index.

use super::*;

/// What [`check_set`] found in a team's own set.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SetCheck {
    /// Questions read.
    pub questions: usize,
    /// Of those, with golden ids.
    pub answerable: usize,
    /// Each problem, naming its line.
    pub problems: Vec<String>,
}

/// Checks a set of situate's own format against `engine`: every line parses (a malformed
/// line is an error naming it), every golden id is in the index, no id or question (up to
/// case and spacing) is there twice.
pub fn check_set(engine: &Engine, file: &Path) -> Result<SetCheck> {
    let queries = read_own(file)?;
    let mut problems = Vec::new();
    let mut ids: HashMap<&str, usize> = HashMap::new();
    let mut texts: HashMap<String, usize> = HashMap::new();
    for q in &queries {
        if let Some(first) = ids.insert(&q.query.id, q.line) {
            problems.push(format!(
                "line {}: id {:?} is also on line {first}",
                q.line, q.query.id
            ));
        }
        let norm = q
            .query
            .text
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase();
        if let Some(first) = texts.insert(norm, q.line) {
            problems.push(format!(
                "line {}: the same question as line {first}",
                q.line
            ));
        }
        let mut golden: Vec<&String> = q.query.judgments.0.keys().collect();
        golden.sort();
        for g in golden {
            let (exists, what) = match q.level {
                Level::Chunk => (engine.has_chunk(g)?, "chunk"),
                Level::Document => (engine.has_document(g)?, "document"),
            };
            if !exists {
                problems.push(format!(
                    "line {}: golden {what} {g:?} is not in the index",
                    q.line
                ));
            }
        }
    }
    Ok(SetCheck {
        questions: queries.len(),
        answerable: queries.iter().filter(|q| !q.query.unanswerable).count(),
        problems,
    })
}
