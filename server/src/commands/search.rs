//! Search: SEARCH (every mode and strategy) and the MemFuse QUERY with its envelope.

use super::common::*;

arguments! {
    /// SEARCH_MEMORIES.
    struct Search {
        query: String = req(
            "query",
            Ty::Str,
            "what to look for, at most 1,000 characters",
        ),
        user: Option<String> = USER,
        limit: Option<usize> = opt("limit", Ty::Int, "results per page; default 10")
            .within(1, PAGE),
        offset: Option<usize> = opt("offset", Ty::Int, "results to skip; default 0")
            .within(0, OFFSET),
        strategy: Option<Strategy> = opt(
            "strategy",
            Ty::Str,
            "composite (default), similarity, recency, frequency, importance",
        ),
        mode: Option<Mode> = opt(
            "mode",
            Ty::Str,
            "hybrid (default; vector with strategy similarity and over MCP), vector, keyword, text",
        ),
        threshold: Option<f32> = opt(
            "threshold",
            Ty::Num,
            "least cosine of a vector candidate; default none (the limit best)",
        ),
        fusion: Option<String> = opt(
            "fusion",
            Ty::Str,
            "hybrid's fusion: weighted (default) or rrf",
        ),
        vector_weight: Option<f32> = opt(
            "vector_weight",
            Ty::Num,
            "weighted fusion's vector weight; default 0.9 for a statement of 5+ words that asks no question, else 0.7",
        ),
        keyword_weight: Option<f32> = opt(
            "keyword_weight",
            Ty::Num,
            "weighted fusion's keyword weight; default 0.1 for a statement of 5+ words that asks no question, else 0.3",
        ),
        rrf_k: Option<usize> = opt("rrf_k", Ty::Int, "rrf's rank offset; default 60")
            .within(1, 10_000),
        category: Option<Category> = CATEGORY_FILTER,
        tags: Vec<String> = opt("tags", Ty::StrList, "only memories with any of these tags"),
        kind: Option<Kind> = KIND_FILTER,
        session_id: Option<String> = SESSION_FILTER,
        agent_id: Option<String> = opt("agent_id", Ty::Str, "only this agent's records"),
        created_after: Option<amberdb::Timestamp> = opt(
            "created_after",
            Ty::Str,
            "only created at or after (RFC 3339 or a date)",
        ),
        created_before: Option<amberdb::Timestamp> = opt(
            "created_before",
            Ty::Str,
            "only created before (RFC 3339 or a date)",
        ),
        valid_after: Option<amberdb::Timestamp> = opt(
            "valid_after",
            Ty::Str,
            "only about a moment at or after (a chat turn's time, a fact's valid_from; RFC 3339 or a date)",
        ),
        valid_before: Option<amberdb::Timestamp> = opt(
            "valid_before",
            Ty::Str,
            "only about a moment before (valid_from; RFC 3339 or a date)",
        ),
        as_of: Option<amberdb::Timestamp> = opt(
            "as_of",
            Ty::Str,
            "what was valid at this moment (RFC 3339 or a date); default now",
        ),
        max_tokens: Option<usize> = opt(
            "max_tokens",
            Ty::Int,
            "a prompt's token budget: the best results that fit, counted by the model's tokenizer",
        ),
        neighbours: Option<usize> = opt(
            "neighbours",
            Ty::Int,
            "each result in a session carries this many records before and after it (context); default 0",
        )
            .within(0, amberdb::MAX_NEIGHBOURS as u64),
        deduplicate: Option<bool> = opt(
            "deduplicate",
            Ty::Bool,
            "fold near-identical results; default on",
        ),
        dedup_threshold: Option<f32> = opt(
            "dedup_threshold",
            Ty::Num,
            "load-time cluster distance; default 0.40",
        ),
        fold: Option<amberdb::Fold> = opt(
            "fold",
            Ty::Str,
            "what load-time dedup folds: duplicates (default: one statement in the same words; the page stays in score order) or slots (older values of a fact folded, the newest first)",
        ),
        nprobe: Option<usize> = opt(
            "nprobe",
            Ty::Int,
            "lists of each IVF segment to probe first; default: what the build measured for its recall target (docs/ivf.md)",
        )
            .within(1, 65_536),
        recall: Option<f32> = opt(
            "recall",
            Ty::Num,
            "probe the lists whose measured recall@10 reached this, in (0, 1]; not with nprobe",
        ),
        count_access: Option<bool> = opt(
            "count_access",
            Ty::Bool,
            "count the returned memories as accessed; default on",
        ),
        rerank: Option<bool> = RERANK,
        rerank_candidates: Option<usize> = RERANK_CANDIDATES,
        group: Option<amberdb::Group> = opt(
            "group",
            Ty::Str,
            "records (default) or session: one result per session (its best record; its other records in session_turns), limit counts sessions",
        ),
        date_boost: Option<f32> = opt(
            "date_boost",
            Ty::Num,
            "0..1 (default 0.1) added to a record whose time falls in a date or relative time the query names (relative to as_of, else now); 0 turns it off (docs/search.md, Dates in questions)",
        ),
        session_lend: Option<f32> = opt(
            "session_lend",
            Ty::Num,
            "0..1 (default 0.1): each record gains this share of the best score of another record of its session; 0 turns it off (docs/search.md, Sessions)",
        ),
    }
}

/// `rerank` (the switch) and `rerank_candidates` (its pool): the number of candidates a
/// search reranks, if it reranks.
fn rerank_pool(rerank: Option<bool>, candidates: Option<usize>) -> Result<Option<usize>, Fail> {
    match (rerank, candidates) {
        (Some(false), Some(_)) => Err(Fail::invalid(
            "rerank_candidates",
            "only with rerank on (it is the number of candidates reranked)",
        )),
        (Some(true), n) | (None, n @ Some(_)) => {
            Ok(Some(n.unwrap_or(amberdb::DEFAULT_RERANK_CANDIDATES)))
        }
        (Some(false) | None, None) => Ok(None),
    }
}

/// The strategy and mode a search runs with, from those it names (the one rule the handler
/// and the dispatch's keyword-index check share).
fn ranking(strategy: Option<Strategy>, mode: Option<Mode>, session: &Session) -> (Strategy, Mode) {
    let strategy = match strategy {
        Some(s) => s,
        // vector-memory-mcp ranks a vector search by similarity alone: its tools keep that
        // ranking unless asked for another mode.
        None if session.vmm_shapes && mode.is_none_or(|m| m == Mode::Vector) => {
            Strategy::Similarity
        }
        None => Strategy::default(),
    };
    // The similarity strategy has one mode, vector; any other default is hybrid.
    let mode = mode.unwrap_or(if strategy == Strategy::Similarity {
        Mode::Vector
    } else {
        Mode::default()
    });
    (strategy, mode)
}

/// Whether a `SEARCH_MEMORIES` request reads the keyword index (mode keyword or hybrid, named
/// or by default). Arguments that do not parse count as not: the request fails when it runs.
fn search_reads_keywords(args: &Map<String, Value>, session: &Session) -> bool {
    let named = |field: &str| args.get(field).and_then(Value::as_str);
    let Ok(strategy) = named("strategy").map(Strategy::parse).transpose() else {
        return false;
    };
    let Ok(mode) = named("mode").map(Mode::parse).transpose() else {
        return false;
    };
    matches!(
        ranking(strategy, mode, session).1,
        Mode::Keyword | Mode::Hybrid
    )
}

/// Whether a `QUERY` request reads the keyword index (store type keyword or hybrid).
fn query_reads_keywords(args: &Map<String, Value>, _: &Session) -> bool {
    let store_type = match args.get("store_type").map(Value::as_str) {
        None => Ok(StoreType::default()),
        Some(Some(t)) => StoreType::parse(t),
        Some(None) => return false,
    };
    matches!(store_type, Ok(StoreType::Keyword | StoreType::Hybrid))
}

fn search_memories(ctx: &Ctx, session: &Session, a: Search) -> Outcome {
    let mut q = SearchRequest::new(a.query);
    q.user_id = a.user;
    if let Some(n) = a.limit {
        q.limit = n;
    }
    if let Some(n) = a.offset {
        q.offset = n;
    }
    (q.strategy, q.mode) = ranking(a.strategy, a.mode, session);
    q.threshold = a.threshold;
    q.fusion = fusion_of(
        a.fusion.as_deref(),
        (a.vector_weight, a.keyword_weight),
        a.rrf_k,
        q.fusion,
    )?;
    q.category = a.category;
    q.tags = a.tags;
    q.kind = a.kind;
    q.session_id = a.session_id;
    q.agent_id = a.agent_id;
    q.created_after = a.created_after;
    q.created_before = a.created_before;
    q.valid_after = a.valid_after;
    q.valid_before = a.valid_before;
    q.as_of = a.as_of;
    if let Some(n) = a.neighbours {
        q.neighbours = n;
    }
    q.max_tokens = a.max_tokens;
    q.hooks.deduplicate = a.deduplicate;
    q.hooks.dedup_threshold = a.dedup_threshold;
    q.hooks.fold = a.fold;
    q.hooks.count_access = a.count_access;
    q.probe = match (a.nprobe, a.recall) {
        (Some(_), Some(_)) => {
            return Err(Fail::invalid("recall", "give nprobe or recall, not both"));
        }
        (Some(n), None) => Probe::Lists(u32::try_from(n).unwrap_or(u32::MAX)),
        (None, Some(r)) => Probe::Recall(r),
        (None, None) => q.probe,
    };
    q.rerank = rerank_pool(a.rerank, a.rerank_candidates)?;
    if let Some(g) = a.group {
        q.group = g;
    }
    q.date_boost = a.date_boost;
    if let Some(lend) = a.session_lend {
        q.session_lend = lend;
    }
    let hits = engine(ctx.store.search(&q))?;
    search_reply(&q, &hits, session)
}

/// Hybrid's fusion: weighted (by the query's kind unless named or weighted: `Fusion::ByQuery`;
/// a weight given sets it and the other defaults to `HYBRID_WEIGHTS`'s) or RRF; each one's
/// parameters refused with the other.
fn fusion_of(
    fusion: Option<&str>,
    (vector, keyword): (Option<f32>, Option<f32>),
    rrf_k: Option<usize>,
    default: Fusion,
) -> Result<Fusion, Fail> {
    let mut chosen = default;
    match fusion {
        None | Some("weighted") => {
            if rrf_k.is_some() {
                return Err(Fail::invalid("rrf_k", "only with fusion \"rrf\""));
            }
            if fusion.is_some() || vector.is_some() || keyword.is_some() {
                let (v, k) = chosen.weights();
                chosen = Fusion::Weighted {
                    vector: vector.unwrap_or(v),
                    keyword: keyword.unwrap_or(k),
                };
            }
        }
        Some("rrf") => {
            if vector.is_some() || keyword.is_some() {
                return Err(Fail::invalid(
                    "fusion",
                    "weights are for fusion \"weighted\"",
                ));
            }
            chosen = Fusion::Rrf {
                k: rrf_k.map_or(amberdb::RRF_K, |k| {
                    u32::try_from(k).unwrap_or(amberdb::RRF_K)
                }),
            };
        }
        Some(other) => {
            return Err(Fail::invalid(
                "fusion",
                format!("{other:?} is not weighted or rrf"),
            ));
        }
    }
    Ok(chosen)
}

/// SEARCH's reply: the page with its message, the page and the query echoed as
/// vector-memory-mcp does, and its similarities rounded as it rounds them over MCP.
fn search_reply(q: &SearchRequest, hits: &amberdb::Hits, session: &Session) -> Outcome {
    let message = if hits.results.is_empty() {
        "No matching memories found".to_owned()
    } else {
        format!(
            "Found {} of {} matching memories",
            hits.results.len(),
            hits.total
        )
    };
    let mut reply = to_reply(hits, message)?;
    // The page and the query, echoed as vector-memory-mcp does.
    if let Value::Object(o) = &mut reply {
        o.insert("query".into(), json!(q.query));
        o.insert("offset".into(), json!(q.offset));
        o.insert("limit".into(), json!(q.limit));
        o.insert(
            "has_more".into(),
            json!(hits.results.len() == q.limit && q.offset + q.limit < hits.total),
        );
        if session.vmm_shapes
            && let Some(Value::Array(results)) = o.get_mut("results")
        {
            for r in results.iter_mut().filter_map(Value::as_object_mut) {
                for field in ["similarity", "distance"] {
                    if let Some(x) = r.get(field).and_then(Value::as_f64) {
                        r.insert(field.into(), json!((x * 1000.0).round() / 1000.0));
                    }
                }
            }
        }
    }
    Ok(reply)
}

/// MemFuse's response envelope: `{status, code, data, message, errors}`. Errors name their
/// field; the code follows HTTP (200, 404 for an unknown user / session / agent, 422 for a
/// bad parameter, 503 when embeddings are unavailable, 500 otherwise).
pub(super) fn envelope(result: &amberdb::Result<QueryData>) -> Value {
    match result {
        Ok(data) => json!({
            "status": "success",
            "code": 200,
            "data": data,
            "message": format!("Found {} results", data.total),
            "errors": null,
        }),
        Err(e) => {
            let (code, field) = match e {
                EngineError::EntityNotFound { field, .. } => (404, *field),
                EngineError::Invalid { field, .. } => (422, *field),
                EngineError::LimitExceeded { what, .. } => (422, *what),
                EngineError::Embed(_) => (503, "query"),
                _ if e.kind() == amberdb::ErrorKind::Caller => (400, "request"),
                _ => (500, "request"),
            };
            json!({
                "status": "error",
                "code": code,
                "data": null,
                "message": e.to_string(),
                "errors": [{"field": field, "message": e.to_string()}],
            })
        }
    }
}

arguments! {
    /// QUERY.
    struct QueryArgs {
        user: Option<String> = USER,
        query: String = req("query", Ty::Str, "what to look for"),
        session_id: Option<String> = opt(
                "session_id",
                Ty::Str,
                "marks results in_session / cross_session (does not narrow)",
            ),
        agent_id: Option<String> = opt(
                "agent_id",
                Ty::Str,
                "only this agent's records (and knowledge)",
            ),
        top_k: Option<usize> = opt("top_k", Ty::Int, "default 5").within(1, PAGE),
        max_tokens: Option<usize> = opt(
                "max_tokens",
                Ty::Int,
                "a prompt's token budget: the best results that fit",
            ),
        store_type: Option<StoreType> = opt(
                "store_type",
                Ty::Str,
                "vector (default), keyword, hybrid, graph",
            ),
        include_messages: Option<bool> = opt("include_messages", Ty::Bool, "default true"),
        include_knowledge: Option<bool> = opt("include_knowledge", Ty::Bool, "default true"),
        rerank: Option<bool> = RERANK,
        rerank_candidates: Option<usize> = RERANK_CANDIDATES,
    }
}

fn query(ctx: &Ctx, _session: &Session, a: QueryArgs) -> Outcome {
    let user = a.user.unwrap_or_else(|| amberdb::DEFAULT_USER.to_owned());
    let mut q = Query::new(a.query);
    q.session_id = a.session_id;
    q.agent_id = a.agent_id;
    if let Some(k) = a.top_k {
        q.top_k = k;
    }
    q.max_tokens = a.max_tokens;
    if let Some(t) = a.store_type {
        q.store_type = t;
    }
    if let Some(b) = a.include_messages {
        q.include_messages = b;
    }
    if let Some(b) = a.include_knowledge {
        q.include_knowledge = b;
    }
    q.rerank = rerank_pool(a.rerank, a.rerank_candidates)?;
    let result = ctx.store.query(&user, &q);
    // MemFuse's envelope, with its HTTP-style number in `status_code`: on this protocol
    // `code` is always the error code of `docs/protocol.md`.
    let mut body = envelope(&result);
    let status = body.as_object_mut().and_then(|env| env.remove("code"));
    match result {
        Ok(_) => {
            if let (Some(env), Some(status)) = (body.as_object_mut(), status) {
                env.insert("status_code".into(), status);
            }
            Ok(body)
        }
        Err(e) => {
            let mut f = Fail::from(e);
            if let Value::Object(env) = body {
                f.body.extend(env);
            }
            if let Some(status) = status {
                f.body.insert("status_code".into(), status);
            }
            Err(f)
        }
    }
}

/// The commands of this domain, in HELP's order.
pub(super) static TABLE: &[Command] = &[
    Command {
        name: "SEARCH_MEMORIES",
        alias: Some("SEARCH"),
        tool: true,
        class: Class::Search(search_reads_keywords),
        summary: "Searches a user's memories by meaning, keywords or text (docs/search.md).",
        args: Search::ARGS,
        reply: &[
            field("results", Array),
            field("count", Int),
            field("total", Int),
            field("folded_total", Int),
            field("tokens", Int).maybe(),
            field("over_budget", Int).maybe(),
            field("strategy", Str),
            field("mode", Str),
            field("scored_by", Str),
            field("fallback", Str).or_null(),
            field("success", Bool),
            field("message", Str),
            field("query", Str),
            field("offset", Int),
            field("limit", Int),
            field("has_more", Bool),
        ],
        run: Some(|c, s, a| search_memories(c, s, Search::parse(a)?)),
    },
    Command {
        name: "QUERY",
        alias: None,
        tool: true,
        class: Class::Search(query_reads_keywords),
        summary: "MemFuse's query across a user's sessions, in MemFuse's envelope.",
        args: QueryArgs::ARGS,
        reply: &[
            field("status", Str),
            field("errors", Array).or_null(),
            field("data", Object),
            field("message", Str),
            field("status_code", Int),
        ],
        run: Some(|c, s, a| query(c, s, QueryArgs::parse(a)?)),
    },
];

#[cfg(test)]
mod tests {
    use super::fusion_of;
    use amberdb::{Fusion, HYBRID_WEIGHTS};

    #[test]
    fn the_fusion_goes_by_the_query_unless_named_or_weighted() {
        let by_query = Fusion::default();
        assert_eq!(
            fusion_of(None, (None, None), None, by_query).ok(),
            Some(Fusion::ByQuery)
        );
        // A weight given fixes both; the other is the question's default.
        assert_eq!(
            fusion_of(None, (Some(0.5), None), None, by_query).ok(),
            Some(Fusion::Weighted {
                vector: 0.5,
                keyword: HYBRID_WEIGHTS.1
            })
        );
        assert_eq!(
            fusion_of(Some("weighted"), (None, None), None, by_query).ok(),
            Some(Fusion::Weighted {
                vector: HYBRID_WEIGHTS.0,
                keyword: HYBRID_WEIGHTS.1
            })
        );
        assert_eq!(
            fusion_of(Some("rrf"), (None, None), Some(10), by_query).ok(),
            Some(Fusion::Rrf { k: 10 })
        );
        assert!(fusion_of(None, (None, None), Some(10), by_query).is_err());
        assert!(fusion_of(Some("rrf"), (Some(0.5), None), None, by_query).is_err());
        assert!(fusion_of(Some("mixed"), (None, None), None, by_query).is_err());
    }
}
