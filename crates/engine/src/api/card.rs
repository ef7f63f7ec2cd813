//! A card, a person's decision on its context, and a document's removal.

use crate::{CardView, Engine, EngineError, Neighbour, Result};
use serde::{Deserialize, Serialize};

/// A card in full: `situate show`, `GET /v1/cards/{chunk_id}`, MCP's `get_card`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CardRequest {
    /// The chunk id.
    pub chunk_id: String,
    /// Chunks to include before and after it in its document [0; at most
    /// [`MAX_NEIGHBOURS`]].
    #[serde(default)]
    pub neighbours: u32,
}

/// The most neighbours a card request may ask for on each side.
pub const MAX_NEIGHBOURS: u32 = 20;

/// A card's answer: the card view, and its neighbours when asked for.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct CardAnswer {
    /// The card and its document.
    #[serde(flatten)]
    pub card: CardView,
    /// The chunks around it, when `neighbours` was above 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub neighbours: Option<Neighbours>,
}

/// The chunks before and after a card, in document order.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Neighbours {
    /// Before it, nearest last.
    pub before: Vec<Neighbour>,
    /// After it, nearest first.
    pub after: Vec<Neighbour>,
}

impl Engine {
    /// A card in full, with `neighbours` chunks on each side when asked for.
    pub fn card(&self, req: &CardRequest) -> Result<CardAnswer> {
        if req.neighbours > MAX_NEIGHBOURS {
            return Err(EngineError::field_error(
                "neighbours",
                format!(
                    "at most {MAX_NEIGHBOURS} on each side, not {}",
                    req.neighbours
                ),
            ));
        }
        let card = self.card_view(&req.chunk_id)?;
        let neighbours = if req.neighbours > 0 {
            let (before, after) = self.neighbours(&req.chunk_id, req.neighbours, req.neighbours)?;
            Some(Neighbours { before, after })
        } else {
            None
        };
        Ok(CardAnswer { card, neighbours })
    }
}

/// The answer to a person's decision on a context (`situate contexts set`, a `review`
/// job, MCP's `review_context`): the card and its context's status now.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct DecisionAnswer {
    /// The chunk decided on.
    pub chunk_id: String,
    /// Its context's status after the decision.
    pub context_status: situate_core::ContextStatus,
}

impl Engine {
    /// Records a person's decision on `chunk_id`'s context ([`Engine::decide_context`]).
    pub fn decide(&mut self, chunk_id: &str, decision: crate::Decision) -> Result<DecisionAnswer> {
        let context_status = self.decide_context(chunk_id, decision)?;
        Ok(DecisionAnswer {
            chunk_id: chunk_id.to_string(),
            context_status,
        })
    }
}

/// The answer to removing a document (`situate rm`, `DELETE /v1/documents/…`).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct RemoveAnswer {
    /// The document removed, with its cards, from the store and every index.
    pub removed: String,
}

impl Engine {
    /// Removes `document_id` everywhere ([`Engine::remove`]).
    pub fn remove_document(&mut self, document_id: &str) -> Result<RemoveAnswer> {
        self.remove(document_id)?;
        Ok(RemoveAnswer {
            removed: document_id.to_string(),
        })
    }
}
