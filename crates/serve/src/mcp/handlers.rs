//! What each tool does: the request checked, one engine call on a reader (or a job on the
//! writer), the engine's answer.

use super::*;

impl SituateMcp {
    pub(super) async fn do_search(&self, p: SearchParams) -> Result<serde_json::Value, Problem> {
        let s = &self.state;
        if p.query.chars().count() > s.limits.max_query_chars {
            return Err(field_problem(
                "query",
                format!("longer than {} characters", s.limits.max_query_chars),
            ));
        }
        let k = p.k.unwrap_or(DEFAULT_K);
        if k == 0 || k > MAX_K {
            return Err(field_problem(
                "k",
                format!("must be from 1 to {MAX_K}, not {k}"),
            ));
        }
        let budget = p.max_chars.unwrap_or(DEFAULT_CHARS);
        if !(500..=MAX_CHARS).contains(&budget) {
            return Err(field_problem(
                "max_chars",
                format!("must be from 500 to {MAX_CHARS}, not {budget}"),
            ));
        }
        let offset = match p.cursor.as_deref() {
            None | Some("") => 0,
            Some(c) => decode_cursor(c)
                .and_then(|t| t.strip_prefix("hit:").and_then(|n| n.parse::<usize>().ok()))
                .ok_or_else(|| field_problem("cursor", "not one this tool gave"))?,
        };
        let depth = offset + k;
        if depth > s.limits.max_k {
            return Err(field_problem(
                "cursor",
                format!(
                    "no hits beyond the first {}: refine the query or the filters",
                    s.limits.max_k
                ),
            ));
        }
        // The same search as `POST /v1/search`, one hit more than asked (to know whether
        // a next page exists).
        let c = SearchRequest {
            query: p.query,
            settings: SearchSettings {
                k: Some((depth + 1).min(s.limits.max_k)),
                mode: p.mode,
                fusion: p.fusion,
                alpha: p.alpha,
                rrf_k: p.rrf_k,
                ..SearchSettings::default()
            },
            filter: p.filter,
            ..SearchRequest::default()
        }
        .check(&s.settings)?;
        let r = s
            .readers
            .run(move |e| e.query(&c.query, &c.plan, &c.filter))
            .await?;
        let available = r.hits.len();
        let mut used = 0usize;
        let mut hits = Vec::new();
        for h in r.hits.into_iter().skip(offset).take(k) {
            let room = budget.saturating_sub(used);
            if !hits.is_empty() && room < SNIPPET {
                break;
            }
            let context = h.context.unwrap_or_default();
            let (context, _) = cut(&context, room.min(1_000));
            let limit = if p.full_text {
                room.saturating_sub(context.chars().count())
            } else {
                SNIPPET
            };
            let (text, truncated) = cut(&h.original_text, limit.max(100));
            used += context.chars().count() + text.chars().count();
            hits.push(Snippet {
                section: h.heading_path.join(" > "),
                rank: h.rank,
                chunk_id: h.chunk_id,
                document_id: h.document_id,
                title: h.title,
                score: h.score,
                kind: h.kind,
                place: h.place,
                context: context.to_string(),
                text: text.to_string(),
                text_truncated: truncated,
            });
        }
        let next = offset + hits.len();
        let next_cursor = (next < available).then(|| encode_cursor(&format!("hit:{next}")));
        serde_json::to_value(SnippetPage {
            query: r.query,
            mode: r.mode,
            hits,
            next_cursor,
        })
        .map_err(Problem::internal)
    }

    pub(super) async fn do_card(&self, p: CardParams) -> Result<serde_json::Value, Problem> {
        if p.neighbours > 5 {
            return Err(field_problem(
                "neighbours",
                format!("at most 5 on each side, not {}", p.neighbours),
            ));
        }
        let req = situate_engine::api::CardRequest {
            chunk_id: p.chunk_id,
            neighbours: p.neighbours,
        };
        let card = self.state.readers.run(move |e| e.card(&req)).await?;
        serde_json::to_value(card).map_err(Problem::internal)
    }

    pub(super) async fn do_ask(&self, p: AskParams) -> Result<serde_json::Value, Problem> {
        let s = &self.state;
        let req = situate_engine::AskRequest {
            question: p.question,
            answer: situate_engine::AnswerSettings {
                mode: p.mode,
                passages: p.passages,
                ..Default::default()
            },
            ..Default::default()
        };
        let q = crate::ask::checked(s, &req)?;
        let a = s
            .readers
            .run_for(Duration::from_millis(s.limits.ask_timeout_ms), move |e| {
                e.answer(&q, &|_| {})
            })
            .await?;
        // The passages by id only: their text is a get_card away, and a full-context
        // answer's passages are the whole base.
        let passages: Vec<PassageRef> = a
            .passages
            .iter()
            .map(|p| PassageRef {
                id: p.id,
                chunk_id: p.chunk_id.clone(),
                document_id: p.document_id.clone(),
            })
            .collect();
        let mut v = serde_json::to_value(&a).map_err(Problem::internal)?;
        v["passages"] = serde_json::to_value(passages).map_err(Problem::internal)?;
        Ok(v)
    }

    pub(super) async fn do_explain(&self, p: ExplainParams) -> Result<serde_json::Value, Problem> {
        let s = &self.state;
        let plan = SearchSettings {
            k: Some(situate_engine::settings::MAX_K.min(1_000)),
            mode: p.mode,
            fusion: p.fusion,
            alpha: p.alpha,
            rrf_k: p.rrf_k,
            ..SearchSettings::default()
        }
        .over(&s.settings.search)
        .plan(&s.settings.default_llm())?;
        let answer = s
            .readers
            .run(move |e| e.explain_hit(&p.query, &p.chunk_id, &plan))
            .await?;
        serde_json::to_value(answer).map_err(Problem::internal)
    }

    pub(super) async fn do_list(&self, p: DocumentsRequest) -> Result<serde_json::Value, Problem> {
        let max = self.state.limits.max_page;
        let page = self
            .state
            .readers
            .run(move |e| e.documents_page(&p, max))
            .await?;
        serde_json::to_value(page).map_err(Problem::internal)
    }

    pub(super) async fn do_status(&self) -> Result<serde_json::Value, Problem> {
        let info = crate::routes::health::service_info(&self.state).await?;
        serde_json::to_value(info).map_err(Problem::internal)
    }

    pub(super) async fn do_review(
        &self,
        p: ReviewParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<serde_json::Value, Problem> {
        needs_admin(ctx)?;
        let wait = Duration::from_secs(10);
        let v = match decide(&self.state, p.chunk_id, p.decision, p.text, wait).await? {
            Reviewed::Done(a) => serde_json::to_value(*a),
            Reviewed::Waiting(job) => serde_json::to_value(*job),
        };
        v.map_err(Problem::internal)
    }
}
