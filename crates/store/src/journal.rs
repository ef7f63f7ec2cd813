//! The index journal: which documents (and which card keys) each committed batch changed,
//! so that the indexes replay exactly what they have not seen yet.

use crate::{Op, Result, Store};
use rusqlite::Connection;

impl Store {
    /// Documents changed after `generation`, with the generation that last changed each
    /// (the index journal).
    pub fn journal_after(&self, generation: u64) -> Result<Vec<(String, u64)>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT document_id, generation FROM index_journal WHERE generation > ?1 ORDER BY generation")
            .op("reading the index journal")?;
        let rows = st
            .query_map([generation as i64], |r| {
                Ok((r.get(0)?, r.get::<_, i64>(1)? as u64))
            })
            .op("reading the index journal")?;
        rows.collect::<rusqlite::Result<_>>()
            .op("reading the index journal")
    }

    /// Forgets journal entries the indexes have applied (up to `generation`).
    pub fn trim_journal(&self, generation: u64) -> Result<()> {
        self.conn
            .execute(
                "DELETE FROM index_journal WHERE generation <= ?1",
                [generation as i64],
            )
            .op("trimming the index journal")?;
        self.conn
            .execute(
                "DELETE FROM card_journal WHERE generation <= ?1",
                [generation as i64],
            )
            .op("trimming the card journal")?;
        Ok(())
    }

    /// Card keys removed (or replaced) after `generation`.
    pub fn removed_cards_after(&self, generation: u64) -> Result<Vec<u64>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT card FROM card_journal WHERE generation > ?1")
            .op("reading the card journal")?;
        let rows = st
            .query_map([generation as i64], |r| r.get::<_, i64>(0))
            .op("reading the card journal")?;
        rows.map(|r| r.map(|k| k as u64))
            .collect::<rusqlite::Result<_>>()
            .op("reading the card journal")
    }
}

/// Records that a document changed in the generation being written.
pub(crate) fn journal(conn: &Connection, id: &str) -> Result<()> {
    conn.execute(
        "INSERT INTO index_journal(document_id, generation)
         VALUES (?1, (SELECT CAST(value AS INTEGER) + 1 FROM meta WHERE key = 'generation'))
         ON CONFLICT(document_id) DO UPDATE SET generation = excluded.generation",
        [id],
    )
    .op("writing the index journal")?;
    Ok(())
}

/// Records the card keys of a document's chunks about to be deleted, so indexes that cannot
/// delete by document (the vector index) remove exactly those keys on replay.
pub(crate) fn journal_removed_cards(conn: &Connection, id: &str) -> Result<()> {
    conn.execute(
        "INSERT INTO card_journal(card, generation)
         SELECT id, (SELECT CAST(value AS INTEGER) + 1 FROM meta WHERE key = 'generation')
         FROM chunks WHERE document_id = ?1
         ON CONFLICT(card) DO UPDATE SET generation = excluded.generation",
        [id],
    )
    .op("writing the card journal")?;
    Ok(())
}
