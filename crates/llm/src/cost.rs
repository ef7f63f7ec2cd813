//! What contexts cost: a price table in dollars per million tokens, with the prompt-cache
//! split (cache writes and cache reads are billed apart from plain input).
//!
//! The built-in prices are the providers' list prices as published when this was written;
//! they change, so `[llm.price]` in `situate.toml` overrides them. Local models cost nothing.

use situate_core::TokenUsage;

/// Dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Price {
    /// Plain input tokens.
    pub input: f64,
    /// Input tokens written to the prompt cache.
    pub cache_write: f64,
    /// Input tokens read from the prompt cache.
    pub cache_read: f64,
    /// Output tokens.
    pub output: f64,
}

impl Price {
    /// Free (local models).
    pub const FREE: Price = Price {
        input: 0.0,
        cache_write: 0.0,
        cache_read: 0.0,
        output: 0.0,
    };

    /// The cost of `usage` in dollars.
    pub fn dollars(&self, usage: &TokenUsage) -> f64 {
        (usage.input_tokens as f64 * self.input
            + usage.cache_creation_input_tokens as f64 * self.cache_write
            + usage.cache_read_input_tokens as f64 * self.cache_read
            + usage.output_tokens as f64 * self.output)
            / 1e6
    }
}

/// Model-name prefixes and their prices (the longest matching prefix wins).
const TABLE: &[(&str, Price)] = &[
    ("anthropic:claude-3-haiku", p(0.25, 0.30, 0.03, 1.25)),
    ("anthropic:claude-3-5-haiku", p(0.80, 1.00, 0.08, 4.00)),
    ("anthropic:claude-haiku-4", p(1.00, 1.25, 0.10, 5.00)),
    ("anthropic:claude-3-5-sonnet", p(3.00, 3.75, 0.30, 15.00)),
    ("anthropic:claude-3-7-sonnet", p(3.00, 3.75, 0.30, 15.00)),
    ("anthropic:claude-sonnet-4", p(3.00, 3.75, 0.30, 15.00)),
    ("anthropic:claude-opus-4", p(15.00, 18.75, 1.50, 75.00)),
    ("openai:gpt-4o-mini", p(0.15, 0.15, 0.075, 0.60)),
    ("openai:gpt-4o", p(2.50, 2.50, 1.25, 10.00)),
    ("openai:gpt-4.1-nano", p(0.10, 0.10, 0.025, 0.40)),
    ("openai:gpt-4.1-mini", p(0.40, 0.40, 0.10, 1.60)),
    ("openai:gpt-4.1", p(2.00, 2.00, 0.50, 8.00)),
    ("local:", Price::FREE),
    ("ollama:", Price::FREE),
];

const fn p(input: f64, cache_write: f64, cache_read: f64, output: f64) -> Price {
    Price {
        input,
        cache_write,
        cache_read,
        output,
    }
}

/// The price of the model `id` (`provider:model`): `custom` when given, else the table's;
/// `None` when unknown (costs are then reported in tokens only).
pub fn price_for(id: &str, custom: Option<Price>) -> Option<Price> {
    custom.or_else(|| {
        TABLE
            .iter()
            .filter(|(prefix, _)| id.starts_with(prefix))
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, price)| *price)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_follow_the_cache_split_and_the_longest_prefix() {
        let haiku = price_for("anthropic:claude-3-haiku-20240307", None).expect("known");
        // The blog's reference setting: 8k-token documents, 800-token chunks (10 per
        // document), ~100-token instruction and ~100-token answers, the document written to
        // the cache once and read nine times.
        let per_document = TokenUsage {
            input_tokens: 10 * 900,
            cache_creation_input_tokens: 8_000,
            cache_read_input_tokens: 9 * 8_000,
            output_tokens: 10 * 100,
        };
        let per_million_document_tokens = haiku.dollars(&per_document) * 1e6 / 8_000.0;
        assert!(
            (0.9..1.2).contains(&per_million_document_tokens),
            "{per_million_document_tokens}"
        );
        assert_eq!(
            price_for("openai:gpt-4o-mini", None).map(|p| p.input),
            Some(0.15)
        );
        assert_eq!(price_for("openai:gpt-4o", None).map(|p| p.input), Some(2.5));
        assert_eq!(price_for("local:smollm2", None), Some(Price::FREE));
        assert_eq!(price_for("openai:mystery", None), None);
        let mine = p(1.0, 1.0, 1.0, 1.0);
        assert_eq!(price_for("openai:mystery", Some(mine)), Some(mine));
    }
}
