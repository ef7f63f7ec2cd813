//! `GET /openapi.json`: the HTTP API described as OpenAPI 3.0, generated from the code.
//!
//! Every request and response body's schema is derived from the Rust type the route
//! reads or answers (`schemars`: the serde attributes are the schema's), so a field added
//! to a type is in the document at once; the route table below names each operation, its
//! parameters and which type it takes and gives. Request bodies are described as serde
//! reads them, responses as serde writes them. Every error is `Problem`
//! (`application/problem+json`). The document is checked in (`crates/serve/openapi.json`)
//! and a test fails when it differs from what the code generates, so a change to the API
//! shows in review.

use crate::jobs::{JobSpec, JobStatus};
use crate::problem::ProblemBody;
use crate::routes::review::ReviewBody;
use crate::{ContextPage, DocumentDetail, DocumentPage, JobList, ServiceInfo};
use schemars::generate::{Contract, SchemaGenerator, SchemaSettings};
use schemars::{JsonSchema, Schema};
use serde_json::{Map, Value, json};
use situate_engine::SearchRequest;
use situate_engine::SearchResponse;
use situate_engine::api::CardAnswer;

struct Gen {
    reads: SchemaGenerator,
    writes: SchemaGenerator,
}

impl Gen {
    fn new() -> Gen {
        let with = |c: Contract| {
            SchemaSettings::openapi3()
                .with(|s| s.contract = c)
                .into_generator()
        };
        Gen {
            reads: with(Contract::Deserialize),
            writes: with(Contract::Serialize),
        }
    }

    /// A request body's schema (as serde reads it).
    fn body<T: JsonSchema>(&mut self) -> Value {
        json!({"required": true, "content": {"application/json": {"schema": to_value(self.reads.subschema_for::<T>())}}})
    }

    /// A JSON response's schema (as serde writes it).
    fn answer<T: JsonSchema>(&mut self, description: &str) -> Value {
        json!({"description": description, "content": {"application/json": {"schema": to_value(self.writes.subschema_for::<T>())}}})
    }

    fn components(mut self) -> Map<String, Value> {
        let mut all = self.writes.take_definitions(true);
        for (k, v) in self.reads.take_definitions(true) {
            all.entry(k).or_insert(v);
        }
        all
    }
}

fn to_value(s: Schema) -> Value {
    s.to_value()
}

fn free_form(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"type": "object"}}}})
}

fn path_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "description": description, "schema": {"type": "string"}})
}

fn query_param(name: &str, description: &str, schema: Value) -> Value {
    json!({"name": name, "in": "query", "required": false, "description": description, "schema": schema})
}

/// One operation: its id, summary, parameters, body and answers; every error is a problem.
fn op(
    id: &str,
    summary: &str,
    params: Vec<Value>,
    body: Option<Value>,
    answers: Vec<(&str, Value)>,
) -> Value {
    let mut responses = Map::new();
    for (status, a) in answers {
        responses.insert(status.to_string(), a);
    }
    responses.insert(
        "default".into(),
        json!({"description": "An error (RFC 9457 problem details with a stable code)",
               "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}}),
    );
    let mut o = json!({"operationId": id, "summary": summary, "responses": responses});
    if !params.is_empty() {
        o["parameters"] = Value::Array(params);
    }
    if let Some(b) = body {
        o["requestBody"] = b;
    }
    o
}

/// The whole document.
pub fn document() -> Value {
    let mut g = Gen::new();
    let limit = |max: u64| {
        query_param(
            "limit",
            "Items per page",
            json!({"type": "integer", "minimum": 1, "maximum": max}),
        )
    };
    let cursor = query_param(
        "cursor",
        "`next_cursor` of the page before",
        json!({"type": "string"}),
    );
    let job = g.answer::<JobStatus>("The job");
    let accepted = g.answer::<JobStatus>("Accepted: the job, queued (its URL in `Location`)");
    let paths = json!({
        "/healthz": {"get": op("healthz", "The process is up", vec![], None,
            vec![("200", g.answer::<crate::routes::health::Probe>("Up"))])},
        "/readyz": {"get": op("readyz", "The index is open and the embedder warm", vec![], None,
            vec![("200", g.answer::<crate::routes::health::Probe>("Ready"))])},
        "/v1/info": {"get": op("info", "Version, index counts and the request limits", vec![], None,
            vec![("200", g.answer::<ServiceInfo>("The service"))])},
        "/metrics": {"get": op("metrics", "Requests, latencies, jobs and index size (OpenMetrics text)", vec![], None,
            vec![("200", json!({"description": "OpenMetrics text", "content": {"application/openmetrics-text": {"schema": {"type": "string"}}}}))])},
        "/openapi.json": {"get": op("openapi", "This document", vec![], None,
            vec![("200", free_form("OpenAPI 3.0"))])},
        "/v1/search": {"post": op("search", "Search: everything `situate search` does; the `search --json` shape",
            vec![], Some(g.body::<SearchRequest>()),
            vec![("200", g.answer::<SearchResponse>("The hits, context and original apart, with each leg's rank and score"))])},
        "/v1/ask": {"post": op("ask", "A grounded answer: the passages, the model's answer citing them (each citation checked against the original), or \"not in the documents\"; with `stream`, server-sent events (`text` as it is written, then `answer`)",
            vec![], Some(g.body::<crate::ask::AskBody>()),
            vec![("200", g.answer::<situate_engine::AnswerResponse>("The answer (or, with `stream`, text/event-stream)"))])},
        "/v1/cards/{chunk_id}": {"get": op("get_card", "A chunk card in full (and, with `neighbours`, the chunks around it)",
            vec![path_param("chunk_id", "The chunk id (percent-encoded)"),
                 query_param("neighbours", "Chunks on each side", json!({"type": "integer", "minimum": 0, "maximum": 20}))],
            None, vec![("200", g.answer::<CardAnswer>("The card, and its neighbours when asked for"))])},
        "/v1/documents": {"get": op("list_documents", "Documents in id order, page by page",
            vec![limit(500), cursor.clone()], None,
            vec![("200", g.answer::<DocumentPage>("A page"))])},
        "/v1/documents/{document_id}": {
            "get": op("get_document", "A document and its chunk ids",
                vec![path_param("document_id", "The document id (percent-encoded)")], None,
                vec![("200", g.answer::<DocumentDetail>("The document"))]),
            "delete": op("delete_document", "Remove a document and its chunks (a job)",
                vec![path_param("document_id", "The document id (percent-encoded)")], None,
                vec![("202", accepted.clone())]),
        },
        "/v1/jobs": {
            "post": op("create_job", "Start a job: ingest, contextualize, review, delete, rebuild or eval",
                vec![], Some(g.body::<JobSpec>()), vec![("202", accepted.clone())]),
            "get": op("list_jobs", "The jobs remembered, newest first", vec![], None,
                vec![("200", g.answer::<JobList>("The jobs"))]),
        },
        "/v1/jobs/{id}": {"get": op("get_job", "A job's state and progress",
            vec![path_param("id", "The job id")], None, vec![("200", job.clone())])},
        "/v1/jobs/{id}/events": {"get": op("job_events", "The job's status at each change, as Server-Sent Events (`status`, then `end`)",
            vec![path_param("id", "The job id")], None,
            vec![("200", json!({"description": "Server-Sent Events, each `data` a JobStatus", "content": {"text/event-stream": {"schema": {"type": "string"}}}}))])},
        "/v1/jobs/{id}/cancel": {"post": op("cancel_job", "Stop a job (what it committed stays)",
            vec![path_param("id", "The job id")], None, vec![("200", job)])},
        "/v1/contexts": {"get": op("list_contexts", "The review queue: cards by context status, page by page",
            vec![query_param("status", "Comma-separated statuses (pending, generated, verified, rejected, failed)", json!({"type": "string"})),
                 limit(500), cursor], None,
            vec![("200", g.answer::<ContextPage>("A page"))])},
        "/v1/contexts/{chunk_id}": {"post": op("review_context", "A person's decision on a context: accept, reject or edit",
            vec![path_param("chunk_id", "The chunk id (percent-encoded)")], Some(g.body::<ReviewBody>()),
            vec![("200", g.answer::<crate::routes::review::ReviewAnswer>("Done: the card as it now is, and the decision's job")), ("202", accepted)])},
        "/v1/evals": {"get": op("list_evals", "The evaluation reports, newest first", vec![], None,
            vec![("200", g.answer::<crate::routes::evals::EvalList>("The reports"))])},
        "/v1/evals/{id}": {"get": op("get_eval", "One report (`report.json` as `situate eval` wrote it), its table and its plot's URL",
            vec![path_param("id", "The report's name")], None, vec![("200", g.answer::<crate::routes::evals::EvalDetail>("The report"))])},
        "/v1/evals/{id}/failure.svg": {"get": op("get_eval_plot", "The report's failure-rate plot",
            vec![path_param("id", "The report's name")], None,
            vec![("200", json!({"description": "SVG", "content": {"image/svg+xml": {"schema": {"type": "string"}}}}))])},
    });
    let _ = g.writes.subschema_for::<ProblemBody>();
    let schemas = g.components();
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "situate",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Contextual retrieval as a service: search, chunk cards, documents, jobs, context review and evaluations. With API keys, send `Authorization: Bearer KEY` (a read key reads, an admin key also writes).",
        },
        "components": {
            "schemas": schemas,
            "securitySchemes": {"key": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{}, {"key": []}],
        "paths": paths,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The document checked in beside the crate; `SITUATE_UPDATE_SNAPSHOTS=1` rewrites it.
    #[test]
    fn the_checked_in_document_is_what_the_code_generates() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
        let now = serde_json::to_string_pretty(&document()).expect("json") + "\n";
        if std::env::var("SITUATE_UPDATE_SNAPSHOTS").is_ok_and(|v| v == "1") {
            std::fs::write(&path, &now).expect("write the snapshot");
        }
        let kept = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            kept == now,
            "crates/serve/openapi.json differs from the API the code describes: review the change, then run `SITUATE_UPDATE_SNAPSHOTS=1 cargo test -p situate-serve openapi`"
        );
    }

    #[test]
    fn every_reference_resolves_and_the_wire_types_are_described() {
        let doc = document();
        let schemas = doc["components"]["schemas"].as_object().expect("schemas");
        for name in [
            "SearchRequest",
            "SearchResponse",
            "AskBody",
            "AnswerResponse",
            "Citation",
            "Hit",
            "LegScore",
            "CardAnswer",
            "JobSpec",
            "JobStatus",
            "Problem",
            "FilterSettings",
        ] {
            assert!(schemas.contains_key(name), "{name} is not described");
        }
        let text = doc.to_string();
        for r in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = &r[..r.find('"').expect("end")];
            assert!(
                schemas.contains_key(name),
                "{name} is referred to and not described"
            );
        }
        // The search body is read strictly, as serde reads it.
        assert_eq!(schemas["SearchRequest"]["additionalProperties"], false);
        assert_eq!(schemas["SearchRequest"]["required"], json!(["query"]));
    }
}
