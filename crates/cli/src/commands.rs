//! One function per command whose work is more than a call: each builds the engine's
//! request from its flags, makes the engine call and prints the engine's answer.

use crate::*;
use std::path::Path;

/// `situate init`.
pub(crate) fn init(
    out: Out,
    settings: &Settings,
    index: &Path,
    chinese: Option<String>,
    embed: EmbedArgs,
) -> Result<ExitCode> {
    let create = settings.create_settings(
        chinese.as_deref(),
        embed.embedder.as_deref(),
        embed.vector_index.as_deref(),
    )?;
    let a = Engine::create(index, create)?.created()?;
    output::message(
        out.json,
        &format!(
            "created an index at {} (embedder: {})",
            a.index.display(),
            a.embedder
        ),
        &a,
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `situate search`.
pub(crate) fn search(
    out: Out,
    settings: &Settings,
    index: &Path,
    a: SearchArgs,
) -> Result<ExitCode> {
    let request = SearchRequest {
        query: a.query.clone(),
        settings: SearchSettings {
            k: a.k,
            bm25: a.bm25,
            mode: a.mode,
            rerank: a.rerank,
            ..a.tuning.settings()
        },
        filter: a.filter.settings(),
        explain: a.explain,
        ..SearchRequest::default()
    };
    let CheckedSearch {
        query,
        plan,
        filter,
        ..
    } = request.check(settings)?;
    if a.node.pgvector {
        let url = shared::store_of(a.node.store.as_deref(), settings).unwrap_or_default();
        return shared::pgvector(out, settings, index, &url, &a.node, &a.query, plan.k);
    }
    let e = match shared::store_of(a.node.store.as_deref(), settings) {
        Some(url) => shared::node(settings, index, &url, &a.node)?.0,
        None => Engine::open(index, Access::Read)?,
    };
    let response = e.query(&query, &plan, &filter)?;
    output::hits(out.json, &response, a.explain)?;
    Ok(ExitCode::SUCCESS)
}

/// `situate ask`: the answer printed as the model writes it.
pub(crate) fn ask(out: Out, settings: &Settings, index: &Path, a: AskArgs) -> Result<ExitCode> {
    let q = AskRequest {
        question: a.question,
        answer: AnswerSettings {
            mode: a.mode,
            passages: a.passages,
            model: a.llm,
            max_tokens: a.max_tokens,
            min_score: a.min_score,
            unsupported: a.unsupported,
            full_budget: a.full_budget,
        },
        search: SearchSettings {
            bm25: a.bm25,
            mode: a.search_mode,
            rerank: a.rerank,
            ..a.tuning.settings()
        },
        filter: a.filter.settings(),
        ..AskRequest::default()
    }
    .check(settings)?;
    let e = Engine::open(index, Access::Read)?;
    // The answer is printed as the model writes it; `--json` prints the whole
    // answer at the end.
    let json = out.json;
    let stream = move |piece: &str| {
        if !json {
            let mut o = std::io::stdout().lock();
            let _ = o.write_all(piece.as_bytes());
            let _ = o.flush();
        }
    };
    let answer = e.answer(&q, &stream)?;
    output::answer(out.json, &answer)?;
    Ok(ExitCode::SUCCESS)
}

/// `situate stats`: fails when the indexes do not hold exactly the store's cards. With
/// `verify` (`Some(full)`), every file is checked too; an index too damaged to open gives
/// `situate check`'s report.
pub(crate) fn stats(out: Out, index: &Path, verify: Option<bool>) -> Result<ExitCode> {
    let opened = Engine::open(index, Access::Read);
    let e = match (opened, verify) {
        (Ok(e), _) => e,
        (Err(err), Some(full)) if err.kind() == situate_engine::ErrorKind::Damaged => {
            return check(out, index, full);
        }
        (Err(err), _) => return Err(err.into()),
    };
    let answer = match verify {
        Some(full) => e.status_verified(full)?,
        None => e.status_checked()?,
    };
    output::stats(out.json, &answer)?;
    let healthy = answer.integrity.as_ref().is_none_or(|i| i.healthy);
    Ok(if answer.consistent && healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `situate check`: fails when a file is damaged or the indexes do not hold exactly the
/// store's cards.
pub(crate) fn check(out: Out, index: &Path, full: bool) -> Result<ExitCode> {
    let answer = Engine::check_at(index, full)?;
    output::integrity(out.json, &answer)?;
    Ok(if answer.healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `situate rebuild` (also of an index whose BM25 files are damaged).
pub(crate) fn rebuild(out: Out, index: &Path) -> Result<ExitCode> {
    let bar = output::progress_bar(out.quiet || out.json, Some(0), "indexing cards");
    let r = Engine::rebuild_at(index, &mut |done, total| {
        bar.set_length(total);
        bar.set_position(done)
    })?;
    bar.finish_and_clear();
    output::message(
        out.json,
        &format!(
            "rebuilt the indexes from {} chunk cards in {:.1} s: no LLM calls, {} vectors ({} texts embedded that were not cached)",
            r.chunks, r.seconds, r.vectors, r.embedded
        ),
        &r,
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `situate reembed --embedder NAME`: the index moved to another embedder while it
/// serves (`Engine::reembed`), with a progress bar and an estimate of the time left.
pub(crate) fn reembed(
    out: Out,
    settings: &situate_engine::Settings,
    index: &Path,
    embedder: String,
    batch: Option<usize>,
    store: Option<String>,
) -> Result<ExitCode> {
    let req = situate_engine::ReembedRequest { embedder, batch }.check()?;
    // A query node (`--store`) must exist already: the switch moves it, not builds it.
    let follower = match &store {
        Some(given) => {
            let url = situate_scale::store::store_url(Some(given), settings)?;
            if !Engine::exists(index) {
                anyhow::bail!(
                    "no query node at {}: `situate search|serve --store … --index {}` builds one",
                    index.display(),
                    index.display()
                );
            }
            Some(situate_scale::follow::Follower::connect(&url)?)
        }
        None => None,
    };
    let mut e = Engine::open(index, Access::Write)?;
    let bar = output::progress_bar(out.quiet || out.json, Some(0), "embedding");
    let mut first = true;
    let mut progress = |p: situate_engine::ReembedProgress| {
        bar.set_length(p.total);
        bar.set_position(p.done);
        if first {
            // What the cache held is not this run's rate: the estimate starts after it.
            bar.reset_eta();
            first = false;
        }
    };
    let (a, from_store) = match follower {
        Some(mut f) => {
            let n = f.reembed(&mut e, &req, &mut progress)?;
            (n.switch, Some(n.from_store))
        }
        None => (e.reembed(&req, &mut progress)?, None),
    };
    bar.finish_and_clear();
    let text = if a.switched {
        format!(
            "switched from {} to {} in {:.1} s: {} vectors ({} embedded now, {} reused from the cache){}; searches now use {} ({} fusion)",
            a.previous,
            a.embedder,
            a.seconds,
            a.vectors,
            a.embedded,
            a.reused,
            if a.cut > 0 {
                format!(", {} inputs longer than it reads", a.cut)
            } else {
                String::new()
            },
            a.model,
            a.fusion.fusion.as_deref().unwrap_or("rrf"),
        )
    } else {
        format!("the index uses {} already: nothing to do", a.embedder)
    };
    match from_store {
        Some(from_store) => {
            let node = situate_scale::follow::NodeReembedAnswer {
                switch: a,
                from_store,
            };
            let text = format!("{text}; {from_store} vectors read from the store");
            output::message(out.json, &text, &node)?;
        }
        None => output::message(out.json, &text, &a)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `situate backup DIR`.
pub(crate) fn backup(out: Out, index: &Path, dir: &Path) -> Result<ExitCode> {
    let a = Engine::backup_at(index, dir)?;
    let m = &a.manifest;
    let left_out = match (&m.bm25, &m.vectors) {
        (None, _) => {
            "; the BM25 index could not be copied consistently (a restore makes it from the cards)"
        }
        _ => "",
    };
    output::message(
        out.json,
        &format!(
            "backed up {} at generation {} to {}: {} files, {:.1} MB, in {:.1} s{left_out}",
            index.display(),
            m.generation,
            a.backup.display(),
            m.files.len(),
            a.bytes as f64 / 1e6,
            a.seconds
        ),
        &a,
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `situate salvage INTO`.
pub(crate) fn salvage(out: Out, index: &Path, into: &Path) -> Result<ExitCode> {
    let a = Engine::salvage_at(index, into)?;
    let s = &a.salvaged;
    let mut text = format!(
        "salvaged from {} into {}: {} contexts, {} cached vectors",
        index.display(),
        into.display(),
        s.contexts,
        s.embeddings
    );
    for u in &s.unreadable {
        text.push_str(&format!("\n  unreadable: {u}"));
    }
    text.push_str(&format!("\n{}", a.next));
    output::message(out.json, &text, &a)?;
    Ok(ExitCode::SUCCESS)
}

/// `situate restore BACKUP [--replace]`: fails when the restored index does not check.
pub(crate) fn restore(out: Out, index: &Path, backup: &Path, replace: bool) -> Result<ExitCode> {
    let a = Engine::restore_at(backup, index, replace)?;
    if out.json {
        output::print_json(&a)?;
    } else {
        println!(
            "restored {} from {} (generation {}) in {:.1} s",
            a.index.display(),
            a.backup.display(),
            a.generation,
            a.seconds
        );
        if let Some(r) = &a.replaced {
            println!(
                "the index it replaced is kept at {}; remove it once you are content",
                r.display()
            );
        }
        output::integrity(false, &a.check)?;
    }
    Ok(if a.check.healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `situate store migrate`.
pub(crate) fn migrate(out: Out, settings: &Settings, store: Option<String>) -> Result<ExitCode> {
    let url = situate_scale::store::store_url(store.as_deref(), settings)?;
    let r = situate_scale::store::migrate(&url)?;
    let said = if r.outcome == "created" {
        "created the situate store"
    } else {
        "the situate store is current"
    };
    output::message(
        out.json,
        &format!(
            "{said} at {} (format {}, PostgreSQL {}, pgvector {})",
            r.store, r.format_version, r.postgres, r.pgvector
        ),
        &r,
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `situate mcp`: the MCP server over stdio.
pub(crate) fn mcp(
    settings: Settings,
    index: PathBuf,
    allow_write: bool,
    evals: PathBuf,
) -> Result<ExitCode> {
    let opts = situate_serve::ServeOptions {
        index,
        settings,
        bind: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        keys: Default::default(),
        allow_hosts: Vec::new(),
        readers: 2,
        evals,
        // MCP over stdio has no backup tool; the folder is never written.
        backups: PathBuf::from("backups"),
        ingest_roots: Vec::new(),
        mcp_allow_write: allow_write,
        cors_origins: Vec::new(),
        limits: Default::default(),
        conn_limits: Default::default(),
        store: None,
        node_embedder: None,
    };
    situate_serve::run_mcp_stdio(opts, allow_write)?;
    Ok(ExitCode::SUCCESS)
}

/// `situate serve`: the HTTP service (and MCP over Streamable HTTP).
pub(crate) fn serve(
    out: Out,
    settings: Settings,
    index: PathBuf,
    a: ServeArgs,
) -> Result<ExitCode> {
    use situate_serve::auth::{Keys, Role};
    let mut keys = Keys::default();
    if let Some(f) = &a.keys {
        keys.add_file(f)?;
    }
    keys.add_env("SITUATE_ADMIN_KEYS", Role::Admin)?;
    keys.add_env("SITUATE_READ_KEYS", Role::Read)?;
    if !(a.ask_timeout.is_finite() && a.ask_timeout > 0.0) {
        anyhow::bail!(
            "--ask-timeout must be a positive number of seconds, not {}",
            a.ask_timeout
        );
    }
    if !(a.timeout.is_finite() && a.timeout > 0.0) {
        anyhow::bail!(
            "--timeout must be a positive number of seconds, not {}",
            a.timeout
        );
    }
    let readers = a
        .readers
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get().min(4)));
    if readers == 0 {
        anyhow::bail!("--readers must be at least 1");
    }
    if !(a.header_timeout.is_finite() && a.header_timeout > 0.0 && a.header_timeout <= 3600.0) {
        anyhow::bail!("--header-timeout must be above 0 and at most 3600 seconds");
    }
    if a.max_connections == 0 {
        anyhow::bail!("--max-connections must be at least 1");
    }
    if a.max_k == 0 || a.max_k > situate_engine::settings::MAX_K {
        anyhow::bail!(
            "--max-k must be from 1 to {}, not {}",
            situate_engine::settings::MAX_K,
            a.max_k
        );
    }
    let store = shared::store_of(a.store.as_deref(), &settings);
    let opts = situate_serve::ServeOptions {
        store,
        node_embedder: a.node_embedder,
        index: index.clone(),
        settings,
        bind: a.bind,
        keys,
        allow_hosts: a.allow_hosts,
        readers,
        evals: a.evals,
        backups: a.backups,
        ingest_roots: a.ingest_roots,
        mcp_allow_write: a.mcp_allow_write,
        cors_origins: a.cors_origins,
        limits: situate_serve::Limits {
            max_k: a.max_k,
            timeout_ms: (a.timeout * 1000.0).round() as u64,
            ask_timeout_ms: (a.ask_timeout * 1000.0).round() as u64,
            ..Default::default()
        },
        conn_limits: situate_serve::listen::ConnLimits {
            header_timeout: std::time::Duration::from_secs_f64(a.header_timeout),
            max_connections: a.max_connections,
        },
    };
    let with_keys = !opts.keys.is_empty();
    situate_serve::run(opts, |addr| {
        // One line on stdout once listening (scripts and tests wait for it); logs go to
        // stderr.
        let line = if out.json {
            serde_json::to_string(&situate_serve::Listening {
                listening: addr.to_string(),
                url: format!("http://{addr}"),
                index: index.clone(),
                keys: with_keys,
            })
            .unwrap_or_default()
        } else {
            format!(
                "situate: serving {} at http://{addr}{} (Ctrl-C stops)",
                index.display(),
                if with_keys { " with API keys" } else { "" }
            )
        };
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{line}");
        let _ = stdout.flush();
    })?;
    Ok(ExitCode::SUCCESS)
}

/// `situate ingest`: the embedded ingest with a progress bar (or, with `--store`, the shared
/// store's).
pub(crate) fn ingest(
    out: Out,
    settings: &Settings,
    index: &std::path::Path,
    a: IngestArgs,
) -> Result<ExitCode> {
    let store = shared::store_of(a.store.as_deref(), settings);
    if a.workers.is_some() && store.is_none() {
        anyhow::bail!("--workers applies to an ingest into the shared store (--store)");
    }
    let req = IngestRequest {
        paths: a.paths,
        texts: Vec::new(),
        context: a.context,
        format: Some(a.format),
        language: a.language,
        max_tokens: a.max_tokens,
        overlap: a.overlap,
        tokenizer: a.tokenizer,
        batch: a.batch,
        llm: a.llm.run(),
        meta: a.meta,
        embedder: a.embed.embedder,
        vector_index: a.embed.vector_index,
        cancel: None,
        roots: None,
    };
    if let Some(url) = store {
        return shared::ingest(out, settings, &url, req, a.workers, a.strict);
    }
    let dry_run = req.llm.dry_run;
    let prepared = situate_engine::prepare_ingest(index, settings, req)?;
    let (llm_method, price) = (situate_engine::uses_llm(&prepared.method), prepared.price);
    let bar = output::progress_bar(out.quiet || out.json, None, "ingesting");
    let (mut docs, mut chunks, mut skipped) = (0u64, 0u64, 0u64);
    let started = Instant::now();
    let outcome = prepared.run(&mut |ev| {
        match ev {
            IngestEvent::Document { chunks: c, .. } => {
                docs += 1;
                chunks += c as u64;
            }
            IngestEvent::Skipped(_) => skipped += 1,
            IngestEvent::Committed { .. } => {}
            IngestEvent::Contextualized {
                chunks: done,
                usage,
                cached,
            } => {
                if llm_method {
                    bar.set_message(format!(
                        "{docs} documents; {}",
                        output::progress_message(done, None, &usage, cached, price, started)
                    ));
                    bar.tick();
                }
                return;
            }
            IngestEvent::Embedding { done, total } => {
                bar.set_message(format!(
                    "{docs} documents, {chunks} chunks, {skipped} skipped; embedding {done}/{total}"
                ));
                bar.tick();
                return;
            }
        }
        bar.set_message(format!(
            "{docs} documents, {chunks} chunks, {skipped} skipped"
        ));
        bar.tick();
    })?;
    bar.finish_and_clear();
    if dry_run {
        output::dry_run(out.json, &outcome)?;
        return Ok(ExitCode::SUCCESS);
    }
    output::ingest_report(out.json, &outcome)?;
    let report = &outcome.report;
    let nothing = report.documents_ok() == 0;
    Ok(if nothing || (a.strict && !report.skipped.is_empty()) {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}
