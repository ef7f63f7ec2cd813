//! What the commands print: text for people, one JSON document for machines (`--json`).

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use situate_core::{CardRecord, TokenUsage};
use situate_engine::{
    Abstention, AnswerMode, AnswerResponse, IngestOutcome, IntegrityAnswer, PartState, Price,
    SearchResponse, StoredDocument,
    api::{CheckAnswer, ContextReport},
};
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Whether progress bars can be drawn (stderr is a terminal).
fn interactive() -> bool {
    std::io::stderr().is_terminal()
}

/// Whether messages on stderr may carry colour: stderr is a terminal and `NO_COLOR` is not
/// set (<https://no-color.org>), as for the progress bars.
pub fn colour_on_stderr() -> bool {
    interactive() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

pub fn print_json<T: serde::Serialize + ?Sized>(v: &T) -> Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, v)?;
    writeln!(out)?;
    Ok(())
}

/// A one-line result.
pub fn message<T: serde::Serialize + ?Sized>(json: bool, text: &str, value: &T) -> Result<()> {
    if json {
        return print_json(value);
    }
    writeln!(std::io::stdout(), "{text}")?;
    Ok(())
}

/// A spinner (unknown total) or a bar, on stderr, hidden when not interactive.
pub fn progress_bar(hidden: bool, total: Option<u64>, what: &str) -> ProgressBar {
    if hidden || !interactive() {
        return ProgressBar::hidden();
    }
    let bar = match total {
        Some(t) => ProgressBar::new(t).with_style(
            ProgressStyle::with_template("{prefix} [{bar:40}] {pos}/{len} ({per_sec}, {eta} left)")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{spinner} {prefix}: {msg} [{elapsed}]")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        ),
    };
    bar.set_prefix(what.to_string());
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// Indents every line of `text` after the first by `pad`.
fn indent(text: &str, pad: &str) -> String {
    text.trim()
        .lines()
        .collect::<Vec<_>>()
        .join(&format!("\n{pad}"))
}

/// Search results: context and original visibly apart; with `explain`, each hit's rank and
/// score in every leg.
/// An answer. Text: the answer was printed as it was written; this adds what the checks
/// found (the abstention in the question's language, or each citation with its chunk and
/// whether its quote is in the original) and what it cost. JSON: the whole
/// [`AnswerResponse`].
pub fn answer(json: bool, a: &AnswerResponse) -> Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, a)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(out)?;
    if a.abstained {
        if matches!(a.abstention, Some(Abstention::Model | Abstention::Refused)) {
            // The model's own words were printed; this is what they mean.
            writeln!(out, "\n{}", a.answer)?;
        }
        let why = match a.abstention {
            Some(Abstention::Retrieval) => {
                "no passage scored over --min-score; the model was not asked"
            }
            Some(Abstention::NoPassages) => {
                "no passage to answer from (an empty index, or the filter left none)"
            }
            Some(Abstention::Refused) => "the answer's citations did not hold after a second try",
            _ => "the model found no answer in the passages",
        };
        writeln!(out, "({why})")?;
    } else {
        writeln!(out)?;
        for c in &a.citations {
            let mark = if c.valid { "ok" } else { "FAILS" };
            let quote = c
                .quote
                .as_deref()
                .map(|q| format!(" \"{q}\""))
                .unwrap_or_default();
            match (&c.chunk_id, &c.document_id) {
                (Some(chunk), Some(doc)) => {
                    let place = c.place.map(|p| format!(" {p}")).unwrap_or_default();
                    writeln!(out, "[{}] {chunk}  ({doc}{place}){quote}  {mark}", c.cited)?
                }
                _ => writeln!(out, "[{}] not a passage given{quote}  {mark}", c.cited)?,
            }
        }
        if !a.grounded {
            writeln!(out, "not grounded: {}", a.problems.join("; "))?;
        }
    }
    let cost = match a.cost {
        Some(c) => format!(
            ", ${:.5} (${:.5} without the cache)",
            c.dollars, c.dollars_without_cache
        ),
        None => String::new(),
    };
    writeln!(
        out,
        "{} mode, {} passages, {}, {} tokens in ({} from the cache), {} out{cost}, {:.1} s",
        match a.mode {
            AnswerMode::Full => "full-context",
            _ => "retrieval",
        },
        a.passages.len(),
        a.model,
        a.usage.input_tokens
            + a.usage.cache_creation_input_tokens
            + a.usage.cache_read_input_tokens,
        a.usage.cache_read_input_tokens,
        a.usage.output_tokens,
        a.took_ms / 1000.0
    )?;
    Ok(())
}

pub fn hits(json: bool, r: &SearchResponse, explain: bool) -> Result<()> {
    if json {
        // Every hit carries `score` (the rerank score when reranked, else fused in hybrid
        // mode) and `legs` (each leg's rank and score; when reranked also `fused` (hybrid)
        // and `rerank`), with or without --explain.
        let mut out = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut out, r)?;
        writeln!(out)?;
        return Ok(());
    }
    let (query, hits, mode, match_on) = (&r.query, &r.hits, r.mode, r.bm25);
    let reranker = r.reranker.as_deref();
    let mut out = std::io::stdout().lock();
    if hits.is_empty() {
        writeln!(out, "no hits for {query:?}")?;
        return Ok(());
    }
    for h in hits {
        writeln!(
            out,
            "{:>2}. {}  [{}]  score {:.3}",
            h.rank, h.chunk_id, h.source, h.score
        )?;
        if explain {
            let legs: Vec<String> = ["bm25", "vector"]
                .iter()
                .filter(|l| mode == situate_engine::Mode::Hybrid || mode.to_string() == **l)
                .map(|l| match h.legs.iter().find(|x| x.leg == *l) {
                    Some(x) => match x.normalized {
                        Some(n) => format!("{l} #{} ({:.4} → {n:.4})", x.rank, x.score),
                        None => format!("{l} #{} ({:.4})", x.rank, x.score),
                    },
                    None => format!("{l} —"),
                })
                .collect();
            let leg = |name: &str| h.legs.iter().find(|x| x.leg == name);
            let fused = match (mode, leg("fused")) {
                (situate_engine::Mode::Hybrid, Some(f)) => {
                    format!(" · fused #{} ({:.5})", f.rank, f.score)
                }
                (situate_engine::Mode::Hybrid, None) => format!(" · fused {:.5}", h.score),
                _ => String::new(),
            };
            let rerank = match leg("rerank") {
                Some(r) => format!(" · rerank #{} ({:.4})", r.rank, r.score),
                None => String::new(),
            };
            writeln!(out, "    explain   {}{fused}{rerank}", legs.join(" · "))?;
        }
        if let Some(place) = &h.place {
            writeln!(out, "    cite      {} {place}", cite_name(&h.source))?;
        }
        if h.kind != situate_core::CardKind::Text {
            writeln!(out, "    kind      {}", h.kind)?;
        }
        if !h.heading_path.is_empty() {
            writeln!(out, "    section   {}", h.heading_path.join(" > "))?;
        }
        match &h.context {
            Some(c) => writeln!(out, "    context   {}", indent(c, "              "))?,
            None => writeln!(out, "    context   (none)")?,
        }
        writeln!(
            out,
            "    original  {}",
            indent(&h.original_text, "              ")
        )?;
        writeln!(out)?;
    }
    let how = match mode {
        situate_engine::Mode::Bm25 => format!("{match_on} BM25"),
        situate_engine::Mode::Vector => "vectors".to_string(),
        situate_engine::Mode::Hybrid => match (&r.fusion, explain) {
            // With --explain, how the legs were fused and whose choice it was.
            (Some(f), true) => {
                let how = match f.rrf_k {
                    Some(k) => format!("{} k {k}", f.fusion),
                    None => f.fusion.clone(),
                };
                let whose = if f.from == "index" {
                    "the index's"
                } else {
                    "your settings'"
                };
                format!(
                    "hybrid ({match_on} BM25 + vectors, fused by {how}, weights bm25 {:.2} vector {:.2}: {whose})",
                    f.bm25_weight, f.vector_weight
                )
            }
            _ => format!("hybrid ({match_on} BM25 + vectors, fused)"),
        },
    };
    let how = match reranker {
        Some(r) => format!("{how}, reranked by {r}"),
        None => how,
    };
    writeln!(out, "{} hits, {how}, {:.1} ms", hits.len(), r.took_ms)?;
    Ok(())
}

/// One chunk card in full.
pub fn card(json: bool, rec: &CardRecord, doc: &StoredDocument) -> Result<()> {
    let c = &rec.card;
    if json {
        // The engine's view, the same the service's `GET /v1/cards/…` returns.
        let view = situate_engine::CardView::new(c.clone(), doc.clone());
        return print_json(&view);
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "chunk      {} (#{} of {})",
        c.chunk_id, c.ordinal, doc.id
    )?;
    writeln!(
        out,
        "document   {}  [{}]  {}, {}",
        doc.id, doc.source, doc.kind, doc.language
    )?;
    if let Some(t) = &doc.title {
        writeln!(out, "title      {t}")?;
    }
    writeln!(out, "characters {}..{}", c.char_start, c.char_end)?;
    writeln!(out, "kind       {}", c.kind)?;
    if let Some(place) = &c.place {
        writeln!(out, "cite       {} {place}", cite_name(&doc.source))?;
    }
    if !c.heading_path.is_empty() {
        writeln!(out, "section    {}", c.heading_path.join(" > "))?;
    }
    writeln!(out, "status     {}", c.context_status)?;
    if let Some(p) = &c.provenance {
        writeln!(
            out,
            "provenance {} model={} prompt={} inputs={}",
            p.method,
            p.model.as_deref().unwrap_or("-"),
            p.prompt_version.as_deref().unwrap_or("-"),
            &p.input_hash[..p.input_hash.len().min(16)]
        )?;
        if let Some(s) = &p.strategy {
            writeln!(out, "document   {s}")?;
        }
        let text = c.generated_context.as_deref().unwrap_or("");
        for part in &p.parts {
            writeln!(
                out,
                "part       {:<10} {:?} ({})",
                part.kind.as_str(),
                text.get(part.start..part.end).unwrap_or("?"),
                part.model
                    .as_deref()
                    .or(part.prompt_version.as_deref())
                    .unwrap_or("-")
            )?;
        }
    }
    for n in &c.context_notes {
        writeln!(out, "note       {n}")?;
    }
    writeln!(
        out,
        "\n--- context ---\n{}",
        c.generated_context.as_deref().unwrap_or("(none)")
    )?;
    writeln!(out, "\n--- original ---\n{}", c.original_text)?;
    Ok(())
}

/// Index statistics.
/// What a cut of embedding inputs cost, in one line: how many texts of how many, the
/// tokens not embedded, and what to do about it.
fn cut_line(c: &situate_engine::EmbedCut, of: u64) -> String {
    let window = c
        .window
        .map(|w| format!("the embedder's {w}-token window"))
        .unwrap_or_else(|| "the embedder's window".into());
    format!(
        "{} of {of} texts were longer than {window}: {} of their {} tokens ({:.0}%) are not in their vectors (BM25 reads them whole); smaller chunks (--max-tokens), shorter contexts or an embedder that reads more (embeddinggemma-300m, nomic-embed-text-v1.5: 2,048 tokens) keep them",
        c.texts,
        c.tokens,
        c.input_tokens,
        100.0 * c.tokens as f64 / c.input_tokens.max(1) as f64
    )
}

pub fn stats(json: bool, a: &CheckAnswer) -> Result<()> {
    if json {
        return print_json(a);
    }
    let (s, check) = (&a.status.stats, &a.consistency);
    let mut out = std::io::stdout().lock();
    writeln!(out, "index       {}", a.status.index.display())?;
    writeln!(out, "documents   {}", s.store.documents)?;
    writeln!(
        out,
        "chunks      {} ({} characters)",
        s.store.chunks, s.store.chunk_chars
    )?;
    let list = |v: &[(String, u64)]| {
        v.iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    writeln!(out, "languages   {}", list(&s.store.languages))?;
    writeln!(out, "contexts    {}", list(&s.store.context_status))?;
    writeln!(out, "methods     {}", list(&s.store.context_methods))?;
    writeln!(
        out,
        "bm25        {} chunks in {} segments, Chinese tokenizer {}",
        s.bm25_chunks, s.bm25_segments, s.chinese_tokenizer
    )?;
    match (&s.embed_model, &s.vector_index) {
        (Some(m), Some(kind)) => writeln!(
            out,
            "vectors     {} chunks ({kind}), embedder {m}",
            s.vectors
        )?,
        _ => writeln!(out, "vectors     none (embedder {})", s.embedder)?,
    }
    if s.embed_model.is_some() {
        let f = &s.fusion;
        let name = f.fusion.as_deref().unwrap_or("rrf");
        let k = match (name, f.rrf_k) {
            ("rrf", Some(k)) => format!(" k {k}"),
            _ => String::new(),
        };
        let alpha = f.alpha.map_or(String::new(), |a| format!(", alpha {a}"));
        writeln!(
            out,
            "fusion      {name}{k}{alpha} (the index's, for its embedder; settings override it)"
        )?;
    }
    if let Some(n) = s.chunk_tokens {
        writeln!(
            out,
            "chunking    up to {n} tokens a chunk (chosen for the embedder when the index was made)"
        )?;
    }
    if s.embed_cut.texts > 0 {
        writeln!(
            out,
            "cut inputs  {}",
            cut_line(&s.embed_cut, s.store.chunks)
        )?;
    }
    writeln!(out, "disk        {:.1} MB", s.disk_bytes as f64 / 1e6)?;
    if a.consistent {
        writeln!(
            out,
            "consistency the indexes hold exactly the store's cards (generation {})",
            check.store_generation
        )?;
    } else {
        writeln!(
            out,
            "consistency MISMATCH: store {} chunks (generation {}), index {} (generation {}); missing {:?}, extra {:?}; run `situate check` to find the cause",
            check.store_chunks,
            check.store_generation,
            check.index_chunks,
            check.index_generation,
            check.missing_from_index,
            check.not_in_store
        )?;
        if !check.missing_from_vectors.is_empty()
            || !check.not_in_store_vectors.is_empty()
            || check.unembedded > 0
        {
            writeln!(
                out,
                "            vectors: {} held; missing {:?}, extra {:?}; {} cards not embedded",
                check.vector_chunks,
                check.missing_from_vectors,
                check.not_in_store_vectors,
                check.unembedded
            )?;
        }
    }
    if let Some(i) = &a.integrity {
        integrity_lines(&mut out, i)?;
    }
    Ok(())
}

/// `situate check`'s report (also the end of `stats --verify`).
pub fn integrity(json: bool, a: &IntegrityAnswer) -> Result<()> {
    if json {
        return print_json(a);
    }
    let mut out = std::io::stdout().lock();
    integrity_lines(&mut out, a)
}

fn integrity_lines(out: &mut impl Write, a: &IntegrityAnswer) -> Result<()> {
    let how = if a.full {
        "integrity_check"
    } else {
        "quick_check"
    };
    let parts = [
        ("store", &a.store, how),
        ("bm25", &a.bm25, "checksums"),
        ("vectors", &a.vectors, "checksum"),
    ];
    for (name, part, means) in parts {
        let place = part
            .path
            .as_ref()
            .and_then(|p| p.file_name())
            .map(|n| format!(" {}", n.to_string_lossy()))
            .unwrap_or_default();
        let state = match part.state {
            PartState::Ok => format!("ok ({means}){place}"),
            PartState::Damaged => format!("DAMAGED{place}"),
            PartState::Reloaded => {
                format!("DAMAGED{place} (reloaded from the embedding cache in memory)")
            }
            PartState::Absent => "none (no embedder)".to_string(),
            PartState::NotChecked => "not checked".to_string(),
        };
        writeln!(out, "{name:<11} {state}")?;
        for f in &part.found {
            writeln!(out, "            {f}")?;
        }
    }
    match &a.consistency {
        Some(c) if c.is_consistent() => writeln!(
            out,
            "cards       the indexes hold exactly the store's cards (generation {})",
            c.store_generation
        )?,
        Some(c) => writeln!(
            out,
            "cards       MISMATCH: store {} chunks (generation {}), BM25 {} (generation {}), vectors {}; missing {:?}, extra {:?}; vectors missing {:?}, extra {:?}; {} cards not embedded",
            c.store_chunks,
            c.store_generation,
            c.index_chunks,
            c.index_generation,
            c.vector_chunks,
            c.missing_from_index,
            c.not_in_store,
            c.missing_from_vectors,
            c.not_in_store_vectors,
            c.unembedded
        )?,
        None => writeln!(out, "cards       not compared: a file is damaged")?,
    }
    match &a.fix {
        None => writeln!(out, "verdict     healthy")?,
        Some(fix) => writeln!(out, "verdict     NOT HEALTHY. {fix}")?,
    }
    Ok(())
}

/// The summary at the end of an ingest.
pub fn ingest_report(json: bool, outcome: &IngestOutcome) -> Result<()> {
    if json {
        return print_json(outcome);
    }
    let IngestOutcome {
        report: r,
        created,
        method,
        price,
        dir,
        chunk_tokens,
        seconds: secs,
        ..
    } = outcome;
    let mut out = std::io::stdout().lock();
    if *created {
        writeln!(
            out,
            "created an index at {} (chunks of up to {chunk_tokens} tokens)",
            dir.display()
        )?;
    }
    writeln!(
        out,
        "ingested {} documents ({} added, {} replaced, {} unchanged), {} chunks written, context {method}, {:.1} s",
        r.documents_ok(),
        r.added,
        r.replaced,
        r.unchanged,
        r.chunks,
        secs
    )?;
    if r.context_failures > 0 {
        writeln!(
            out,
            "{} chunks have no context (failed); they are indexed with their original text",
            r.context_failures
        )?;
    }
    if r.contexts_rejected > 0 {
        writeln!(
            out,
            "{} contexts failed their checks (rejected, not indexed; `situate show CHUNK_ID` gives the reasons)",
            r.contexts_rejected
        )?;
    }
    if r.contexts_cached > 0 {
        writeln!(
            out,
            "{} contexts taken from the context cache (no model call)",
            r.contexts_cached
        )?;
    }
    if let Some(m) = &r.embed_model {
        writeln!(
            out,
            "embedded {} new texts with {m} (cached ones reused)",
            r.embedded
        )?;
    }
    if r.embed_cut.texts > 0 {
        writeln!(out, "{}", cut_line(&r.embed_cut, r.embedded))?;
    }
    if r.embedding_failures > 0 {
        writeln!(
            out,
            "{} chunks could not be embedded ({}); they are searchable by BM25 only until `situate rebuild` embeds them",
            r.embedding_failures,
            r.embedding_error.as_deref().unwrap_or("unknown error")
        )?;
    }
    if !r.skipped.is_empty() {
        writeln!(out, "skipped {}:", r.skipped.len())?;
        for s in &r.skipped {
            writeln!(out, "  {}: {}", s.source, s.reason)?;
        }
    }
    if r.documents_ok() == 0 {
        writeln!(out, "nothing could be ingested")?;
    }
    if situate_engine::uses_llm(method) {
        let docs = r.added + r.replaced;
        writeln!(out, "{}", cost_line(&r.usage, *price, docs, false))?;
        if let Some(p) = price.filter(|_| r.document_tokens > 0) {
            writeln!(
                out,
                "${:.2} per million document tokens",
                p.dollars(&r.usage) * 1e6 / r.document_tokens as f64
            )?;
        }
        if r.contexts_deferred > 0 {
            writeln!(
                out,
                "{} chunks were left without a context (budget reached); `situate contextualize` goes on",
                r.contexts_deferred
            )?;
        }
    }
    Ok(())
}

/// What a dry run would cost.
pub fn dry_run(json: bool, outcome: &IngestOutcome) -> Result<()> {
    let a = outcome.dry_run();
    if json {
        return print_json(&a);
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "dry run: {} documents to contextualize ({} unchanged), {} chunks ({} contexts already in the cache), {} document tokens; nothing was called or written",
        a.documents, a.unchanged, a.chunks, a.contexts_cached, a.document_tokens
    )?;
    writeln!(
        out,
        "{}",
        cost_line(&a.estimated_usage, outcome.price, a.documents, true)
    )?;
    if let Some(m) = a.dollars_per_million_document_tokens {
        writeln!(out, "${m:.2} per million document tokens")?;
    }
    Ok(())
}

/// `situate status`: counts by context status, and the cards that failed or were rejected.
pub fn status(json: bool, r: &ContextReport) -> Result<()> {
    if json {
        return print_json(r);
    }
    let listed = &r.failed_or_rejected;
    let mut out = std::io::stdout().lock();
    for (status, n) in &r.context_status {
        writeln!(out, "{status:<10} {n}")?;
    }
    for c in listed.iter().take(50) {
        writeln!(
            out,
            "  {} {}: {}",
            c.context_status,
            c.chunk_id,
            c.context_notes.join("; ")
        )?;
    }
    if listed.len() > 50 {
        writeln!(
            out,
            "  ... {} more: `situate contexts list`",
            listed.len() - 50
        )?;
    }
    Ok(())
}

/// One line on what the contexts cost.
pub fn cost_line(
    usage: &TokenUsage,
    price: Option<Price>,
    documents: u64,
    estimate: bool,
) -> String {
    let read_share = {
        let input =
            usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens;
        if input == 0 {
            0.0
        } else {
            usage.cache_read_input_tokens as f64 * 100.0 / input as f64
        }
    };
    let tokens = format!(
        "{} input, {} cache writes, {} cache reads ({read_share:.0}% of input), {} output tokens",
        usage.input_tokens,
        usage.cache_creation_input_tokens,
        usage.cache_read_input_tokens,
        usage.output_tokens
    );
    let what = if estimate { "estimated" } else { "spent" };
    match price {
        Some(p) => format!(
            "LLM {what}: {tokens}; ${:.4} for {documents} documents",
            p.dollars(usage)
        ),
        None => format!("LLM {what}: {tokens} (no price known for this model)"),
    }
}

/// The progress line of a context run: chunks, tokens per second, cache share, dollars.
pub fn progress_message(
    done: u64,
    total: Option<u64>,
    usage: &TokenUsage,
    cached: u64,
    price: Option<Price>,
    started: Instant,
) -> String {
    let secs = started.elapsed().as_secs_f64().max(1e-3);
    let tokens = usage.input_tokens
        + usage.cache_creation_input_tokens
        + usage.cache_read_input_tokens
        + usage.output_tokens;
    let input =
        usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens;
    let hit = if input == 0 {
        0.0
    } else {
        usage.cache_read_input_tokens as f64 * 100.0 / input as f64
    };
    let of = total.map(|t| format!("/{t}")).unwrap_or_default();
    let dollars = price
        .map(|p| format!(", ${:.4}", p.dollars(usage)))
        .unwrap_or_default();
    format!(
        "{done}{of} chunks contextualized ({cached} from the cache), {:.0} tokens/s, {hit:.0}% of input read from cache{dollars}",
        tokens as f64 / secs
    )
}

/// The file name a citation names (`report.pdf` of `/data/reports/report.pdf`).
fn cite_name(source: &str) -> &str {
    source.rsplit(['/', '\\']).next().unwrap_or(source)
}
