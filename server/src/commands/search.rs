//! Search: SEARCH (every mode and strategy) and the MemFuse QUERY with its envelope.

use super::common::*;

fn search_memories(ctx: &Ctx, session: &Session, args: &mut Args) -> Outcome {
    let mut q = SearchRequest::new(args.str("query")?);
    q.user_id = args.opt_str("user_id")?;
    if let Some(n) = args.opt_u64("limit")? {
        q.limit = usize::try_from(n).unwrap_or(usize::MAX);
    }
    if let Some(n) = args.opt_u64("offset")? {
        q.offset = usize::try_from(n).unwrap_or(usize::MAX);
    }
    let mode = args
        .opt_str("mode")?
        .map(|s| parsed("mode", Mode::parse(&s)))
        .transpose()?;
    q.strategy = match args.opt_str("strategy")? {
        Some(s) => parsed("strategy", Strategy::parse(&s))?,
        // vector-memory-mcp ranks a vector search by similarity alone: its tools keep that
        // ranking unless asked for another mode.
        None if session.vmm_shapes && mode.is_none_or(|m| m == Mode::Vector) => {
            Strategy::Similarity
        }
        None => Strategy::default(),
    };
    // The similarity strategy has one mode, vector; any other default is hybrid.
    q.mode = mode.unwrap_or(if q.strategy == Strategy::Similarity {
        Mode::Vector
    } else {
        Mode::default()
    });
    q.threshold = args.opt_f32("threshold")?;
    q.fusion = fusion_of(args, q.fusion)?;
    filters_of(args, &mut q)?;
    let hits = engine(ctx.store.search(&q))?;
    search_reply(&q, &hits, session)
}

/// Hybrid's fusion: weighted (the request's default, with the weights given) or RRF; each
/// one's parameters refused with the other.
fn fusion_of(args: &mut Args, default: Fusion) -> Result<Fusion, Fail> {
    let mut fusion = default;
    let (vector, keyword) = (
        args.opt_f32("vector_weight")?,
        args.opt_f32("keyword_weight")?,
    );
    let rrf_k = args.opt_usize("rrf_k")?;
    match args.opt_str("fusion")?.as_deref() {
        None | Some("weighted") => {
            if let Fusion::Weighted {
                vector: v,
                keyword: k,
            } = &mut fusion
            {
                *v = vector.unwrap_or(*v);
                *k = keyword.unwrap_or(*k);
            }
            if rrf_k.is_some() {
                return Err(Fail::invalid("rrf_k", "only with fusion \"rrf\""));
            }
        }
        Some("rrf") => {
            if vector.is_some() || keyword.is_some() {
                return Err(Fail::invalid(
                    "fusion",
                    "weights are for fusion \"weighted\"",
                ));
            }
            fusion = Fusion::Rrf {
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
    Ok(fusion)
}

/// The filters, the read hooks and the probe a request sets.
fn filters_of(args: &mut Args, q: &mut SearchRequest) -> Result<(), Fail> {
    q.category = args
        .opt_str("category")?
        .map(|c| parsed("category", Category::parse(c.trim())))
        .transpose()?;
    q.tags = args.opt_strs("tags")?.unwrap_or_default();
    if let Some(k) = args.opt_str("kind")? {
        q.kind = Some(parsed("kind", Kind::parse(&k))?);
    }
    q.session_id = args.opt_str("session_id")?;
    q.agent_id = args.opt_str("agent_id")?;
    q.created_after = args.opt_time("created_after")?;
    q.created_before = args.opt_time("created_before")?;
    q.valid_after = args.opt_time("valid_after")?;
    q.valid_before = args.opt_time("valid_before")?;
    q.as_of = args.opt_time("as_of")?;
    if let Some(n) = args.opt_usize("neighbours")? {
        q.neighbours = n;
    }
    q.max_tokens = args
        .opt_u64("max_tokens")?
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    q.hooks.deduplicate = args.opt_bool("deduplicate")?;
    q.hooks.dedup_threshold = args.opt_f32("dedup_threshold")?;
    q.hooks.fold = args
        .opt_str("fold")?
        .map(|f| parsed("fold", amberdb::Fold::parse(&f)))
        .transpose()?;
    q.hooks.count_access = args.opt_bool("count_access")?;
    match (args.opt_usize("nprobe")?, args.opt_f32("recall")?) {
        (Some(_), Some(_)) => {
            return Err(Fail::invalid("recall", "give nprobe or recall, not both"));
        }
        (Some(n), None) => q.probe = Probe::Lists(u32::try_from(n).unwrap_or(u32::MAX)),
        (None, Some(r)) => q.probe = Probe::Recall(r),
        (None, None) => {}
    }
    Ok(())
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

fn query(ctx: &Ctx, _session: &Session, args: &mut Args) -> Outcome {
    let user = args
        .opt_str("user_id")?
        .unwrap_or_else(|| amberdb::DEFAULT_USER.to_owned());
    let mut q = Query::new(args.str("query")?);
    q.session_id = args.opt_str("session_id")?;
    q.agent_id = args.opt_str("agent_id")?;
    if let Some(k) = args.opt_usize("top_k")? {
        q.top_k = k;
    }
    q.max_tokens = args
        .opt_u64("max_tokens")?
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    if let Some(t) = args.opt_str("store_type")? {
        q.store_type = parsed("store_type", StoreType::parse(&t))?;
    }
    if let Some(b) = args.opt_bool("include_messages")? {
        q.include_messages = b;
    }
    if let Some(b) = args.opt_bool("include_knowledge")? {
        q.include_knowledge = b;
    }
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
        summary: "Searches a user's memories by meaning, keywords or text (docs/search.md).",
        args: &[
            req(
                "query",
                Ty::Str,
                "what to look for, at most 1,000 characters",
            ),
            USER,
            opt("limit", Ty::Int, "results per page; default 10").within(1, PAGE),
            opt("offset", Ty::Int, "results to skip; default 0").within(0, OFFSET),
            opt(
                "strategy",
                Ty::Str,
                "composite (default), similarity, recency, frequency, importance",
            ),
            opt("mode", Ty::Str, "hybrid (default; vector with strategy similarity and over MCP), vector, keyword, text"),
            opt(
                "threshold",
                Ty::Num,
                "least cosine of a vector candidate; default none (the limit best)",
            ),
            opt(
                "fusion",
                Ty::Str,
                "hybrid's fusion: weighted (default) or rrf",
            ),
            opt(
                "vector_weight",
                Ty::Num,
                "weighted fusion's vector weight; default 0.7",
            ),
            opt(
                "keyword_weight",
                Ty::Num,
                "weighted fusion's keyword weight; default 0.3",
            ),
            opt("rrf_k", Ty::Int, "rrf's rank offset; default 60").within(1, 10_000),
            opt("category", Ty::Str, "only this category"),
            opt("tags", Ty::StrList, "only memories with any of these tags"),
            opt("kind", Ty::Str, "only memory, message, knowledge or item"),
            opt("session_id", Ty::Str, "only this session's records"),
            opt("agent_id", Ty::Str, "only this agent's records"),
            opt(
                "created_after",
                Ty::Str,
                "only created at or after (RFC 3339 or a date)",
            ),
            opt(
                "created_before",
                Ty::Str,
                "only created before (RFC 3339 or a date)",
            ),
            opt(
                "valid_after",
                Ty::Str,
                "only about a moment at or after (a chat turn's time, a fact's valid_from; RFC 3339 or a date)",
            ),
            opt(
                "valid_before",
                Ty::Str,
                "only about a moment before (valid_from; RFC 3339 or a date)",
            ),
            opt(
                "as_of",
                Ty::Str,
                "what was valid at this moment (RFC 3339 or a date); default now",
            ),
            opt(
                "max_tokens",
                Ty::Int,
                "a prompt's token budget: the best results that fit, counted by the model's tokenizer",
            ),
            opt(
                "neighbours",
                Ty::Int,
                "each result in a session carries this many records before and after it (context); default 0",
            )
            .within(0, amberdb::MAX_NEIGHBOURS as u64),
            opt(
                "deduplicate",
                Ty::Bool,
                "fold near-identical results; default on",
            ),
            opt(
                "dedup_threshold",
                Ty::Num,
                "load-time cluster distance; default 0.40",
            ),
            opt(
                "fold",
                Ty::Str,
                "what load-time dedup folds: duplicates (default: one statement in the same words; the page stays in score order) or slots (older values of a fact folded, the newest first)",
            ),
            opt(
                "nprobe",
                Ty::Int,
                "lists of each IVF segment to probe first; default: what the build measured for its recall target (docs/ivf.md)",
            )
            .within(1, 65_536),
            opt(
                "recall",
                Ty::Num,
                "probe the lists whose measured recall@10 reached this, in (0, 1]; not with nprobe",
            ),
            opt(
                "count_access",
                Ty::Bool,
                "count the returned memories as accessed; default on",
            ),
        ],
        run: Some(search_memories),
    },
    Command {
        name: "QUERY",
        alias: None,
        tool: true,
        summary: "MemFuse's query across a user's sessions, in MemFuse's envelope.",
        args: &[
            USER,
            req("query", Ty::Str, "what to look for"),
            opt(
                "session_id",
                Ty::Str,
                "marks results in_session / cross_session (does not narrow)",
            ),
            opt(
                "agent_id",
                Ty::Str,
                "only this agent's records (and knowledge)",
            ),
            opt("top_k", Ty::Int, "default 5").within(1, PAGE),
            opt(
                "max_tokens",
                Ty::Int,
                "a prompt's token budget: the best results that fit",
            ),
            opt(
                "store_type",
                Ty::Str,
                "vector (default), keyword, hybrid, graph",
            ),
            opt("include_messages", Ty::Bool, "default true"),
            opt("include_knowledge", Ty::Bool, "default true"),
        ],
        run: Some(query),
    },
];
