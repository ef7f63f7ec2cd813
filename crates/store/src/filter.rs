//! Metadata filters: the card keys of the documents a [`DocumentFilter`] allows, in one SQL
//! query.

use crate::{Op, Result, Store, StoreError};
use situate_core::{CardSet, DocumentFilter};

impl Store {
    /// The card keys of the documents `filter` allows.
    pub fn filter_cards(&self, filter: &DocumentFilter) -> Result<CardSet> {
        let mut clauses: Vec<String> = Vec::new();
        let mut args: Vec<String> = Vec::new();
        let any_of = |column: &str, op: &str, values: &[String], args: &mut Vec<String>| {
            if values.is_empty() {
                return None;
            }
            let ors: Vec<String> = values
                .iter()
                .map(|v| {
                    args.push(v.clone());
                    format!("{column} {op} ?{}", args.len())
                })
                .collect();
            Some(format!("({})", ors.join(" OR ")))
        };
        clauses.extend(any_of(
            "d.document_id",
            "=",
            &filter.document_ids,
            &mut args,
        ));
        clauses.extend(any_of(
            "d.document_id",
            "GLOB",
            &filter.path_globs,
            &mut args,
        ));
        let langs: Vec<String> = filter
            .languages
            .iter()
            .map(|l| l.code().to_string())
            .collect();
        clauses.extend(any_of("d.language", "=", &langs, &mut args));
        let kinds: Vec<String> = filter
            .kinds
            .iter()
            .map(|k| k.as_str().to_string())
            .collect();
        clauses.extend(any_of("c.card_kind", "=", &kinds, &mut args));
        for (key, value) in &filter.metadata {
            if key.is_empty()
                || !key
                    .chars()
                    .all(|c| c.is_alphanumeric() || "_-.".contains(c))
            {
                return Err(StoreError::Conflict(format!(
                    "metadata key {key:?}: use letters, digits, '_', '-' and '.' only"
                )));
            }
            args.push(format!("$.\"{key}\""));
            let path = args.len();
            args.push(value.clone());
            clauses.push(format!(
                "CAST(json_extract(d.metadata, ?{path}) AS TEXT) = ?{}",
                args.len()
            ));
        }
        let sql = format!(
            "SELECT c.id FROM chunks c JOIN documents d ON d.document_id = c.document_id{}",
            if clauses.is_empty() {
                String::new()
            } else {
                format!(" WHERE {}", clauses.join(" AND "))
            }
        );
        let mut st = self.conn.prepare(&sql).op("filtering documents")?;
        let rows = st
            .query_map(rusqlite::params_from_iter(args.iter()), |r| {
                r.get::<_, i64>(0)
            })
            .op("filtering documents")?;
        let mut set = CardSet::new();
        for r in rows {
            set.insert(r.op("filtering documents")? as u64);
        }
        Ok(set)
    }
}
