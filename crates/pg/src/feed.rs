//! The change feed a query node follows.

use crate::*;

/// One row of the change feed: a document (and, for a context replaced in place, a card)
/// that a committed transaction wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The row's serial number (unique; commit order is not its order).
    pub position: i64,
    /// The transaction that wrote it.
    pub xid: u64,
    /// The document written or removed.
    pub document_id: String,
    /// The card whose context was replaced, when that is all that changed.
    pub card: Option<i64>,
}

/// What one read of the change feed returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changes {
    /// The changes of every transaction in `[from, upto)`, in transaction order.
    pub changes: Vec<Change>,
    /// The feed position to read from next: every transaction below it has ended, so no
    /// change below it can still appear.
    pub upto: u64,
}

impl PgStore {
    /// The changes written by transactions with ids in `[from, upto)`, where `upto` is the
    /// xmin of this read's snapshot: every transaction below it has ended (committed or
    /// rolled back), so the rows below it are final and a reader that goes on from `upto`
    /// never skips one. (A serial column alone is not a position: two writers take
    /// numbers 1 and 2, 2 commits first, a reader sees 2 and moves past 1 before it
    /// commits.) A transaction left open holds `upto` back: the feed lags, it loses
    /// nothing. Start from 0.
    pub fn changes_since(&mut self, from: u64) -> Result<Changes> {
        let rows = self
            .client
            .query(
                "WITH s AS (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin)
                 SELECT s.xmin::text, c.position, c.xid::text, c.document_id, c.card
                 FROM s LEFT JOIN situate.changes c
                   ON c.xid >= $1::text::xid8 AND c.xid < s.xmin
                 ORDER BY c.xid, c.position",
                &[&from.to_string()],
            )
            .map_err(|source| PgError::Query {
                target: self.target.shown.clone(),
                op: "reading the change feed",
                source,
            })?;
        let number = |s: &str| {
            s.parse::<u64>().map_err(|_| PgError::Unreadable {
                target: self.target.shown.clone(),
                what: format!("a transaction id {s:?} that is not a number"),
            })
        };
        let mut upto = from;
        let mut changes = Vec::new();
        for r in &rows {
            upto = number(r.get::<_, &str>(0))?.max(from);
            if let Some(position) = r.get::<_, Option<i64>>(1) {
                changes.push(Change {
                    position,
                    xid: number(r.get::<_, &str>(2))?,
                    document_id: r.get(3),
                    card: r.get(4),
                });
            }
        }
        Ok(Changes { changes, upto })
    }
}
