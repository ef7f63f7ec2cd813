//! `situate ask`: grounded answers on the Aster example (a Russian service regulation),
//! with a scripted model behind a fake Anthropic server: the answer cites the export chunk,
//! the control question abstains, a reply citing an id not given and a reply quoting words
//! absent from the original are caught, and the request keeps each passage's context and
//! original apart, the passages in the cached block. `situate eval --answers` scores the
//! same model's answers on a set of Aster questions in both modes.

use crate::mcp::{call, mcp_command, runtime};
use crate::serve::{Server, assert_problem};
use crate::{json, run, situate};
use rmcp::ServiceExt;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::{Value, json};
use situate_http::fake::{FakeServer, Reply};

/// The regulation, one paragraph per rule, so that each is a chunk of its own.
const ASTER: &str = "# Сервис Aster. Регламент экспорта\n\nДля тарифа Команда доступен экспорт CSV. Для тарифа Личный экспорт CSV не предусмотрен.\n\nВыгрузка содержит только активные задачи.\n";

/// The user turn's text blocks of an Anthropic request.
fn blocks(body: &Value) -> Vec<Value> {
    body["messages"][0]["content"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The id the prompt gives the passage whose original holds `words`.
fn passage_with(prompt: &str, words: &str) -> Option<String> {
    let at = prompt.find(words)?;
    let open = prompt[..at].rfind("<passage id=\"")? + "<passage id=\"".len();
    let end = prompt[open..].find('"')?;
    Some(prompt[open..open + end].to_string())
}

/// A scripted model: it answers by the question asked, citing the passage that holds the
/// export rule by the number the prompt gave it.
fn scripted() -> FakeServer {
    FakeServer::start(|req, _| {
        let body = req.json();
        let prompt: String = blocks(&body)
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect();
        let export = passage_with(&prompt, "Выгрузка содержит").unwrap_or_else(|| "0".into());
        let retried = prompt.contains("<previous_answer>");
        let text = if prompt.contains("Каков срок хранения") {
            "В ДОКУМЕНТАХ ОБ ЭТОМ НЕ СКАЗАНО".to_string()
        } else if prompt.contains("Сколько стоит") && !retried {
            // An id that was not given.
            "Экспорт бесплатный: «Выгрузка содержит только активные задачи» [42].".to_string()
        } else if prompt.contains("Есть ли экспорт в Excel") {
            // Words that are not in the original, on both tries.
            format!("Да: «Выгрузка содержит все задачи в Excel» [{export}].")
        } else {
            format!(
                "Нет, архивные задачи в CSV не попадут: «Выгрузка содержит только активные задачи» [{export}]."
            )
        };
        let usage = json!({"input_tokens": 120, "cache_creation_input_tokens": 300, "cache_read_input_tokens": 0, "output_tokens": 30});
        if body["stream"] != true {
            return Reply::json(json!({
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn",
                "usage": usage
            }));
        }
        // Streamed as Anthropic streams: the usage first, then the text word by word.
        let mut events = vec![(
            "message_start",
            json!({"type": "message_start", "message": {"usage": usage}}),
        )];
        for word in text.split_inclusive(' ') {
            events.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": word}}),
            ));
        }
        events.push((
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 30}}),
        ));
        events.push(("message_stop", json!({"type": "message_stop"})));
        Reply::events(&events)
    })
    .expect("server")
}

/// The Aster regulation ingested into a fresh index (BM25, structural contexts).
fn aster_index() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().expect("tmp");
    let docs = tmp.path().join("docs");
    std::fs::create_dir_all(&docs).expect("mkdir");
    std::fs::write(docs.join("aster.md"), ASTER).expect("write");
    let index = tmp.path().join("idx");
    run(
        situate(&index).arg("ingest").arg(&docs).args([
            "--embedder",
            "none",
            "--context",
            "structural",
            "--max-tokens",
            "24",
            "--overlap",
            "0",
        ]),
        0,
    );
    (tmp, index)
}

/// The chunk whose original holds `words`.
fn chunk_with(index: &std::path::Path, words: &str) -> String {
    let v = json(situate(index).args(["search", words, "-k", "1"]), 0);
    v["hits"][0]["chunk_id"]
        .as_str()
        .expect("a hit")
        .to_string()
}

#[test]
fn the_aster_answer_cites_the_export_chunk_and_the_control_question_abstains() {
    let (_tmp, index) = aster_index();
    let server = scripted();
    let llm = format!(
        "anthropic:claude-3-haiku-20240307?base_url={}&retries=1",
        server.url()
    );
    let ask = |question: &str, extra: &[&str]| {
        let mut c = situate(&index);
        c.env("ANTHROPIC_API_KEY", "k")
            .env_remove("ANTHROPIC_BASE_URL")
            .args(["ask", question, "--llm", &llm])
            .args(extra);
        if !extra.contains(&"--mode") {
            c.args(["--mode", "retrieval"]);
        }
        c
    };

    let v = json(&mut ask("Попадут ли архивные задачи Aster в CSV?", &[]), 0);
    assert_eq!(v["abstained"], false, "{v:#}");
    assert_eq!(v["grounded"], true, "{v:#}");
    assert_eq!(v["language"], "ru");
    assert_eq!(v["mode"], "retrieval");
    let cite = &v["citations"][0];
    let chunk = cite["chunk_id"].as_str().expect("a chunk is cited");
    let card = json(situate(&index).args(["show", chunk]), 0);
    assert_eq!(
        card["original_text"].as_str().map(str::trim),
        Some("Выгрузка содержит только активные задачи."),
        "{card:#}"
    );
    assert_eq!(cite["document_id"], "docs/aster.md");
    assert_eq!(cite["quote"], "Выгрузка содержит только активные задачи");
    assert_eq!(cite["valid"], true);
    assert!(
        v["answer"]
            .as_str()
            .is_some_and(|a| a.contains("архивные задачи"))
    );
    // The passages given, context and original apart; tokens and dollars.
    let given = v["passages"].as_array().expect("passages");
    assert!(given.iter().any(|p| p["chunk_id"] == chunk));
    assert!(given.iter().all(|p| p["original"].is_string()));
    assert!(v["usage"]["output_tokens"].as_u64() > Some(0));
    let cost = &v["cost"];
    // The first request writes the cache (dearer than plain input tokens).
    assert!(
        cost["dollars"].as_f64() > cost["dollars_without_cache"].as_f64(),
        "{cost:#}"
    );
    assert!(
        cost["dollars_without_cache"].as_f64() > Some(0.0),
        "{cost:#}"
    );

    // The request: each passage's context and original in sections of their own, the
    // passages in the cached block, the question after it.
    let request = server.requests().pop().expect("a request").json();
    let content = blocks(&request);
    let passages = content[0]["text"].as_str().expect("text");
    assert!(passages.starts_with("<passages>"), "{passages}");
    assert!(passages.contains("<context>") && passages.contains("<original>"));
    assert_eq!(content[0]["cache_control"]["type"], "ephemeral");
    let question = content[1]["text"].as_str().expect("text");
    assert!(question.contains("Попадут ли архивные задачи Aster в CSV?"));
    assert!(content[1].get("cache_control").is_none());

    // The control question: "not in the documents", in Russian.
    let v = json(&mut ask("Каков срок хранения выгрузки?", &[]), 0);
    assert_eq!(v["abstained"], true, "{v:#}");
    assert_eq!(v["abstention"], "model");
    assert_eq!(v["answer"], "В документах нет ответа на этот вопрос.");
    assert_eq!(v["citations"], json!([]));

    // An id that was not given is caught; with --unsupported retry the second reply holds.
    let v = json(&mut ask("Сколько стоит экспорт?", &[]), 0);
    assert_eq!(v["grounded"], false, "{v:#}");
    assert!(
        v["problems"][0]
            .as_str()
            .is_some_and(|p| p.contains("[42]")),
        "{v:#}"
    );
    assert_eq!(v["citations"][0]["valid"], false);
    let v = json(
        &mut ask("Сколько стоит экспорт?", &["--unsupported", "retry"]),
        0,
    );
    assert_eq!(v["attempts"], 2, "{v:#}");
    assert_eq!(v["grounded"], true, "{v:#}");
    let retry = server.requests().pop().expect("a request").json();
    let text: String = blocks(&retry)
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect();
    assert!(
        text.contains("[42]") && text.contains("<previous_answer>"),
        "{text}"
    );

    // Words absent from the original are caught; refused after a second try.
    let v = json(&mut ask("Есть ли экспорт в Excel?", &[]), 0);
    assert_eq!(v["grounded"], false, "{v:#}");
    assert!(
        v["problems"][0]
            .as_str()
            .is_some_and(|p| p.contains("is not in the original")),
        "{v:#}"
    );
    let v = json(
        &mut ask("Есть ли экспорт в Excel?", &["--unsupported", "refuse"]),
        0,
    );
    assert_eq!(v["abstention"], "refused", "{v:#}");
    assert_eq!(v["attempts"], 2);
    assert!(
        v["answer"]
            .as_str()
            .is_some_and(|a| a.starts_with("Ответ не дан"))
    );

    // Text: the answer as written, then each citation with its chunk.
    let out = run(&mut ask("Попадут ли архивные задачи Aster в CSV?", &[]), 0);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("Нет, архивные задачи"), "{text}");
    assert!(
        text.contains(&format!(
            "{chunk}  (docs/aster.md) \"Выгрузка содержит только активные задачи\"  ok"
        )),
        "{text}"
    );

    // Full-context mode: the whole base (three chunks), within the filter; a filter that
    // leaves nothing is answered without the model.
    let v = json(
        &mut ask(
            "Попадут ли архивные задачи Aster в CSV?",
            &["--mode", "full"],
        ),
        0,
    );
    assert_eq!(v["mode"], "full", "{v:#}");
    assert_eq!(v["passages"].as_array().map(Vec::len), Some(3));
    assert_eq!(v["citations"][0]["chunk_id"], chunk);
    let before = server.requests().len();
    let v = json(
        &mut ask(
            "Попадут ли архивные задачи Aster в CSV?",
            &["--mode", "full", "--path", "other/*"],
        ),
        0,
    );
    assert_eq!(v["abstention"], "no_passages", "{v:#}");
    assert_eq!(v["answer"], "В документах нет ответа на этот вопрос.");
    assert_eq!(server.requests().len(), before);

    // Bad input: a clear error, nothing asked.
    let before = server.requests().len();
    for (args, says) in [
        (
            vec!["ask", "  ", "--llm", llm.as_str()],
            "question: the question is empty",
        ),
        (
            vec!["ask", "q", "--llm", llm.as_str(), "--mode", "everything"],
            "unknown answer mode",
        ),
        (
            vec!["ask", "q", "--llm", llm.as_str(), "--passages", "0"],
            "passages (--passages): must be",
        ),
        (
            vec!["ask", "q", "--llm", llm.as_str(), "--unsupported", "ignore"],
            "unsupported (--unsupported): unknown value",
        ),
    ] {
        let out = run(situate(&index).env("ANTHROPIC_API_KEY", "k").args(&args), 1);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    assert_eq!(server.requests().len(), before);
}

#[test]
fn the_service_answers_as_json_and_as_events_and_agents_ask_over_mcp() {
    let (tmp, index) = aster_index();
    let export = chunk_with(&index, "Выгрузка содержит только активные задачи");
    let server = scripted();
    // The service's model is its settings' (a request cannot name one).
    std::fs::write(
        tmp.path().join("situate.toml"),
        format!(
            "[answer]\nmode = \"retrieval\"\nmodel = \"anthropic:claude-3-haiku-20240307?base_url={}&retries=1\"\n",
            server.url()
        ),
    )
    .expect("settings");
    let service = Server::start(&index, &[], &[("ANTHROPIC_API_KEY", "k")]);
    let a = service.post(
        "/v1/ask",
        &json!({"question": "Попадут ли архивные задачи Aster в CSV?"}),
    );
    assert_eq!(a.status, 200, "{:#}", a.body);
    assert_eq!(
        a.body["citations"][0]["chunk_id"],
        export.as_str(),
        "{:#}",
        a.body
    );
    assert_eq!(a.body["grounded"], true);
    let a = service.post(
        "/v1/ask",
        &json!({"question": "Каков срок хранения выгрузки?"}),
    );
    assert_eq!(a.body["abstained"], true, "{:#}", a.body);
    // Streamed: the text as written, then the whole answer.
    let events = service.post_events(
        "/v1/ask",
        &json!({"question": "Попадут ли архивные задачи Aster в CSV?", "stream": true}),
    );
    let (last, answer) = events.last().expect("events");
    assert_eq!(last, "answer", "{events:?}");
    let pieces: Vec<&str> = events
        .iter()
        .filter(|(name, _)| name == "text")
        .filter_map(|(_, v)| v["text"].as_str())
        .collect();
    // Word by word as the model's stream brings them, not the whole answer at the end.
    assert!(pieces.len() > 5, "{events:?}");
    let text = pieces.concat();
    assert_eq!(text, answer["answer"].as_str().unwrap_or(""));
    // Bad requests: problems, no model call.
    let before = server.requests().len();
    assert_problem(
        &service.post("/v1/ask", &json!({"question": " "})),
        400,
        "invalid-request",
    );
    assert_problem(
        &service.post("/v1/ask", &json!({"question": "q", "model": "/etc/passwd"})),
        400,
        "invalid-request",
    );
    assert_problem(
        &service.post("/v1/ask", &json!({"question": "q", "mode": "everything"})),
        400,
        "invalid-request",
    );
    assert_eq!(server.requests().len(), before);
    drop(service);

    // The MCP tool, over stdio.
    runtime().block_on(async {
        let transport = TokioChildProcess::new(mcp_command(&index, false).configure(|c| {
            c.stderr(std::process::Stdio::null())
                .env("ANTHROPIC_API_KEY", "k");
        }))
        .expect("spawn");
        let client = ().serve(transport).await.expect("initialize");
        let (r, err) = call(
            &client,
            "ask",
            json!({"question": "Попадут ли архивные задачи Aster в CSV?"}),
        )
        .await;
        assert!(!err, "{r:#}");
        assert_eq!(r["citations"][0]["chunk_id"], export.as_str(), "{r:#}");
        assert!(r["passages"][0].get("original").is_none(), "{r:#}");
        let (r, err) = call(&client, "ask", json!({"question": ""})).await;
        assert!(err, "{r:#}");
        client.cancel().await.expect("close");
    });
}

#[test]
fn a_local_model_reads_a_full_context_base_once_for_every_question_a_service_is_asked() {
    let (tmp, index) = aster_index();
    // SmolLM2-135M: the smallest local model (what it answers is not what this tests).
    std::fs::write(
        tmp.path().join("situate.toml"),
        "[answer]\nmode = \"full\"\nmodel = \"smollm2-135m-instruct\"\nmax_tokens = 24\n",
    )
    .expect("settings");
    let service = Server::start(&index, &["--readers", "2"], &[]);
    let first = service.post(
        "/v1/ask",
        &json!({"question": "Попадут ли архивные задачи Aster в CSV?"}),
    );
    assert_eq!(first.status, 200, "{:#}", first.body);
    assert_eq!(first.body["mode"], "full");
    assert_eq!(first.body["passages"].as_array().map(Vec::len), Some(3));
    let written = first.body["usage"]["cache_creation_input_tokens"]
        .as_u64()
        .unwrap_or(0);
    assert!(written > 0, "{:#}", first.body["usage"]);
    assert_eq!(first.body["usage"]["cache_read_input_tokens"], 0);
    // The second question, streamed, reads the base from the cache: only its own block is
    // read.
    let events = service.post_events(
        "/v1/ask",
        &json!({"question": "Каков срок хранения выгрузки?", "stream": true}),
    );
    let (last, second) = events.last().expect("events");
    assert_eq!(last, "answer", "{events:?}");
    assert_eq!(
        second["usage"]["cache_read_input_tokens"].as_u64(),
        Some(written),
        "{:#}",
        second["usage"]
    );
    assert_eq!(second["usage"]["cache_creation_input_tokens"], 0);
    assert!(
        events.iter().filter(|(n, _)| n == "text").count() >= 1,
        "{events:?}"
    );
}

#[test]
fn eval_answers_scores_answers_citations_and_controls_in_both_modes() {
    let (tmp, index) = aster_index();
    let server = scripted();
    let llm = format!(
        "anthropic:claude-3-haiku-20240307?base_url={}&retries=1",
        server.url()
    );
    let export = chunk_with(&index, "Выгрузка содержит только активные задачи");
    let tariffs = chunk_with(&index, "тарифа Команда доступен экспорт");
    let set = tmp.path().join("aster.jsonl");
    let lines = [
        json!({"id": "archive", "query": "Попадут ли архивные задачи Aster в CSV?", "relevant": [export], "answers": ["нет"]}),
        json!({"id": "excel", "query": "Есть ли экспорт в Excel?", "relevant": [tariffs], "answers": ["нет"]}),
        json!({"id": "keep", "query": "Каков срок хранения выгрузки?", "unanswerable": true}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&set, text).expect("write set");
    let out = tmp.path().join("eval");
    let eval = |answers: &str| {
        let mut c = situate(&index);
        c.env("ANTHROPIC_API_KEY", "k")
            .env_remove("ANTHROPIC_BASE_URL")
            .args(["eval", "--dataset"])
            .arg(&set)
            .arg("--out")
            .arg(&out)
            .args([
                "--config",
                "bm25+indexed",
                "--answers",
                answers,
                "--llm",
                &llm,
            ]);
        c
    };
    let report = json(&mut eval("retrieval,full"), 0);
    let rows = report["answers"].as_array().expect("answer rows");
    assert_eq!(rows.len(), 3, "{report:#}");
    // Full-context answers come first (a base too large is told before anything is paid).
    assert_eq!(rows[0]["name"], "full");
    assert_eq!(rows[1]["name"], "bm25+indexed+none/retrieval");
    // Then the same answers under the configuration's calibrated abstain threshold: the
    // score every answerable question's best passage reaches, so none of them is lost here.
    let threshold = &report["configurations"][0]["abstain"]["threshold"];
    assert!(threshold.is_number(), "{report:#}");
    assert_eq!(&rows[2]["min_score"], threshold, "{report:#}");
    assert!(
        rows[2]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("bm25+indexed+none/retrieval, min_score ")),
        "{report:#}"
    );
    for row in rows {
        assert_eq!(
            (row["questions"].as_u64(), row["controls"].as_u64()),
            (Some(2), Some(1)),
            "{row:#}"
        );
        assert_eq!(row["answered"], 1.0, "{row:#}");
        // "Нет, архивные задачи в CSV не попадут" against "нет": no exact match, F1 1/4
        // (precision 1/7, recall 1), and it contains the answer; "Да" does neither.
        assert_eq!(row["exact_match"], 0.0, "{row:#}");
        let f1 = row["f1"].as_f64().expect("f1");
        assert!((f1 - 0.25 / 2.0).abs() < 1e-9, "{row:#}");
        assert_eq!(row["contains"], 0.5, "{row:#}");
        // One citation of the golden chunk, one of a chunk neither golden nor holding "нет".
        assert_eq!(row["citation_precision"], 0.5, "{row:#}");
        // The Excel answer quotes words that are not in the original.
        assert_eq!(row["grounded"], 0.5, "{row:#}");
        assert_eq!(row["controls_answered"], 0.0, "{row:#}");
        assert!(
            row["dollars"][0].as_f64().is_some_and(|d| d > 0.0),
            "{row:#}"
        );
    }
    let per_question = std::fs::read_to_string(out.join("answers-bm25+indexed+none.jsonl"))
        .expect("answers of the configuration");
    let records: Vec<Value> = per_question
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(records.len(), 3);
    assert_eq!(
        records[0]["scored"],
        "Нет, архивные задачи в CSV не попадут."
    );
    assert_eq!(records[0]["citations"][0]["chunk_id"], export.as_str());
    assert_eq!(records[0]["citations"][0]["relevant"], true);
    assert_eq!(records[2]["abstained"], true);
    assert_eq!(records[2]["abstention"], "model");
    assert!(out.join("answers-full.jsonl").is_file());
    let md = std::fs::read_to_string(out.join("report.md")).expect("report.md");
    assert!(md.contains("## Answers"), "{md}");
    assert!(
        md.contains("| full | anthropic:claude-3-haiku-20240307 | 2 + 1 controls | 100.0% |"),
        "{md}"
    );

    // Bad input: a mode that is not measurable, before any model is called.
    let calls = server.requests().len();
    let out = run(&mut eval("auto"), 1);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("answers (--answers): takes retrieval and/or full"),
        "{e}"
    );
    assert_eq!(server.requests().len(), calls);
}
