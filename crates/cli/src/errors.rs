//! How the command reports an error: the message on stderr (with the flag beside the
//! field the engine names), under `--json` the same error as JSON on stdout, and the exit
//! status of the error's kind, all from the engine's one table
//! ([`situate_engine::ErrorKind::TABLE`]), as the HTTP service and MCP answer it.

use clap::CommandFactory;
use situate_engine::EngineError;
use std::process::ExitCode;

/// Reports `e` and returns the exit status its kind maps to (1 for errors that are not the
/// engine's: files, arguments checked here).
pub fn report(e: &anyhow::Error, json: bool) -> ExitCode {
    let engine = e.chain().find_map(|c| c.downcast_ref::<EngineError>());
    let mut text = format!("{e:#}");
    let field = engine.and_then(EngineError::field);
    if let Some((field, flag)) = field.and_then(|f| Some((f, flag_of(f)?))) {
        // "context_weight: must be ..." → "context_weight (--context-weight): must be ...".
        text = text.replacen(&format!("{field}: "), &format!("{field} ({flag}): "), 1);
    }
    if let Some(advice) = engine.and_then(EngineError::advice) {
        text = format!("{text}. {advice}");
    }
    let wire = engine.map(|e| e.kind().wire());
    if json {
        let v = Envelope {
            error: ErrorAnswer {
                code: wire.map_or("error", |w| w.code),
                field,
                install: engine.and_then(EngineError::install),
                detail: &text,
            },
        };
        println!("{}", serde_json::to_string(&v).unwrap_or_default());
    }
    eprintln!("error: {text}");
    ExitCode::from(wire.map_or(1, |w| w.exit))
}

/// `--json`'s error: `{"error": {"code", "field", "detail"}}`, the code and field those of
/// the HTTP problem and the MCP tool error for the same error.
#[derive(serde::Serialize)]
struct Envelope<'a> {
    error: ErrorAnswer<'a>,
}

#[derive(serde::Serialize)]
struct ErrorAnswer<'a> {
    /// The kind's stable code (`invalid-request`, `not-found`, ...; `error` for an error
    /// that is not the engine's).
    code: &'static str,
    /// The request field at fault, by its wire name.
    field: Option<&'a str>,
    /// For `model-missing`: the command that installs the model.
    #[serde(skip_serializing_if = "Option::is_none")]
    install: Option<&'a str>,
    /// The message, with the flag beside the field.
    detail: &'a str,
}

/// The command-line flag of a request field, by its wire name: the filter's fields by
/// their flags (`filter.languages` is `--language`), `k` as `-k`, any other field whose
/// `--kebab-case` some command takes. `None` for a field no flag sets (a query is an
/// argument; a value from `situate.toml` has its field's name there).
pub fn flag_of(field: &str) -> Option<String> {
    let fixed = match field {
        // The query and the question are arguments, not flags.
        "query" | "question" => return None,
        "k" => Some("-k"),
        "filter.languages" => Some("--language"),
        "filter.documents" => Some("--document"),
        "filter.paths" => Some("--path"),
        "filter.meta" => Some("--meta"),
        "filter.kinds" => Some("--kind"),
        // A context run's statuses (a job's `statuses`).
        "statuses" => Some("--status"),
        // An evaluation's configurations (an eval job's `configs`).
        "configs" => Some("--config"),
        // A question's search settings: `situate ask`'s flags.
        "search.mode" => Some("--search-mode"),
        _ => None,
    };
    if let Some(inner) = field.strip_prefix("search.") {
        return flag_of(inner);
    }
    if let Some(f) = fixed {
        return Some(f.to_string());
    }
    let long = field.replace('_', "-");
    has_long(&crate::Cli::command(), &long).then(|| format!("--{long}"))
}

/// Whether `cmd` or one of its subcommands takes `--long`.
fn has_long(cmd: &clap::Command, long: &str) -> bool {
    cmd.get_arguments().any(|a| a.get_long() == Some(long))
        || cmd.get_subcommands().any(|c| has_long(c, long))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_map_to_the_flags_that_set_them() {
        assert_eq!(flag_of("k").as_deref(), Some("-k"));
        assert_eq!(
            flag_of("context_weight").as_deref(),
            Some("--context-weight")
        );
        assert_eq!(flag_of("rerank_depth").as_deref(), Some("--rerank-depth"));
        assert_eq!(flag_of("filter.languages").as_deref(), Some("--language"));
        assert_eq!(flag_of("configs").as_deref(), Some("--config"));
        assert_eq!(flag_of("answers").as_deref(), Some("--answers"));
        assert_eq!(flag_of("query"), None);
        assert_eq!(flag_of("no_such_thing"), None);
    }

    #[test]
    fn an_engine_field_error_gets_its_flag_and_its_kind_s_exit_status() {
        let e = anyhow::Error::from(EngineError::field_error(
            "context_weight",
            "must be a number >= 0, not -1",
        ));
        assert_eq!(report(&e, false), ExitCode::from(1));
        let other = anyhow::anyhow!("cannot read x");
        assert_eq!(report(&other, false), ExitCode::from(1));
    }
}
