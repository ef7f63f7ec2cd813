//! The typed operations every front end shares: one request type per operation, with its
//! defaults and checks in one place, answered by one engine type. The CLI parses its flags
//! into these, the HTTP service and MCP deserialize them from JSON; each then makes the
//! same engine call and prints or sends the same answer type. Field names are the wire
//! names (JSON and `situate.toml`); an error in one names it
//! ([`EngineError::InvalidField`]), and the CLI adds its flag.

use crate::EngineError;

mod ask;
mod card;
mod contexts;
mod page;
mod search;
mod state;
mod tune;

pub use ask::*;
pub use card::*;
pub use contexts::*;
pub use page::*;
pub use search::*;
pub use state::*;
pub use tune::*;

/// Refuses the first of `unknown` (the fields serde collected beside a flattened struct)
/// by name, listing the fields `T` takes (`what`: "a search").
fn refuse_unknown<T: schemars::JsonSchema>(
    unknown: &std::collections::BTreeMap<String, serde_json::Value>,
    what: &str,
) -> crate::Result<()> {
    match unknown.keys().next() {
        Some(name) => Err(EngineError::field_error(
            name.clone(),
            format!("unknown field: {what} takes {}", fields_of::<T>()),
        )),
        None => Ok(()),
    }
}

/// The wire names of a request type's fields, from its schema (the one list: the type),
/// for the error that refuses another.
fn fields_of<T: schemars::JsonSchema>() -> String {
    let schema = schemars::schema_for!(T);
    schema.as_value()["properties"]
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect::<Vec<_>>().join(", "))
        .unwrap_or_default()
}
