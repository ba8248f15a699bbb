//! The routes (`docs/http.md`, "Routes"): a table of resource routes over the commands, every
//! command under `POST /v1/commands/{COMMAND}`, and the JSON error body with its status on
//! every failure, a route or method that does not exist included.
//!
//! A resource route's arguments are its path parameters, its query string and its JSON body,
//! merged by name (a name given twice is refused); path and query values are read as the
//! command's argument declares (`limit=5` an integer, `tags=a,b` a list).

use super::app::{
    App, HttpOptions, authenticate, fail_response, read_body, refuse, reply_response,
};
use super::table::{COMMAND_ROUTE, ROUTES};
use crate::args::{Arg, Code, Fail, Ty};
use crate::commands::{self, Command};
use crate::dispatch::{self, Request as Call, Shared};
use crate::route;
use axum::Router;

use axum::extract::rejection::RawPathParamsRejection;
use axum::extract::{RawPathParams, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use axum::routing::{MethodFilter, MethodRouter, on};
use serde_json::{Map, Value, json};
use std::sync::Arc;

fn filter(method: &str) -> MethodFilter {
    match method {
        "GET" => MethodFilter::GET,
        "PUT" => MethodFilter::PUT,
        "PATCH" => MethodFilter::PATCH,
        "DELETE" => MethodFilter::DELETE,
        _ => MethodFilter::POST,
    }
}

/// Every route, behind the guard (`guard.rs`).
pub(super) fn router(shared: Arc<Shared>, options: HttpOptions) -> Router {
    let app = Arc::new(App {
        shared,
        options,
        mcp: super::sessions::Sessions::default(),
    });
    let mut paths: Vec<(&str, MethodRouter<Arc<App>>)> = Vec::new();
    for r in ROUTES {
        let command = commands::find(r.command).expect("a route names a command of the table");
        let handler = move |State(app): State<Arc<App>>,
                            params: Result<RawPathParams, RawPathParamsRejection>,
                            request: Request| async move {
            resource(&app, command, params, request).await
        };
        match paths.iter_mut().find(|(p, _)| *p == r.path) {
            Some((_, m)) => *m = std::mem::take(m).on(filter(r.method), handler),
            None => paths.push((r.path, on(filter(r.method), handler))),
        }
    }
    let mut router = Router::new();
    for (path, methods) in paths {
        router = router.route(path, methods.fallback(wrong_method));
    }
    router
        .route(
            COMMAND_ROUTE,
            on(MethodFilter::POST, any_command).fallback(wrong_method),
        )
        .merge(super::ops::routes())
        .merge(super::inspector::routes())
        .merge(super::memfuse::routes())
        .merge(super::mcp::routes())
        .fallback(no_route)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&app),
            super::guard::guard,
        ))
        .with_state(app)
}

async fn no_route(request: Request) -> Response {
    fail_response(Fail::new(
        Code::NotFound,
        format!(
            "no route {} {}; GET /openapi.json lists them",
            request.method(),
            request.uri().path()
        ),
    ))
}

async fn wrong_method(request: Request) -> Response {
    let mut r = fail_response(Fail::new(
        Code::BadRequest,
        format!(
            "{} is not a method of {}; GET /openapi.json lists each route's",
            request.method(),
            request.uri().path()
        ),
    ));
    *r.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    r
}

/// `POST /v1/commands/{COMMAND}`: any command, its arguments the JSON body.
async fn any_command(
    State(app): State<Arc<App>>,
    params: Result<RawPathParams, RawPathParamsRejection>,
    request: Request,
) -> Response {
    let name = match path_params(params) {
        Ok(p) => p.into_iter().find(|(k, _)| k == "command").map(|(_, v)| v),
        Err(f) => return *refuse(&app.shared, f),
    }
    .unwrap_or_default();
    let Some(command) = commands::find(&name) else {
        app.shared.metrics.count_error(Code::UnknownCommand);
        return fail_response(commands::unknown(&name));
    };
    let session = match authenticate(&app, &request, false) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let (parts, body) = request.into_parts();
    let args = match read_body(&app.shared, &parts.headers, body).await {
        Ok(a) => a,
        Err(r) => return *r,
    };
    run(&app, session, command, &parts.headers, args).await
}

/// A resource route: path, query and body merged into the command's arguments.
async fn resource(
    app: &Arc<App>,
    command: &'static Command,
    params: Result<RawPathParams, RawPathParamsRejection>,
    request: Request,
) -> Response {
    let session = match authenticate(app, &request, false) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let mut given = match path_params(params) {
        Ok(p) => p,
        Err(f) => return *refuse(&app.shared, f),
    };
    if let Some(q) = request.uri().query() {
        given.extend(form_urlencoded::parse(q.as_bytes()).into_owned());
    }
    let (parts, body) = request.into_parts();
    let mut args = match read_body(&app.shared, &parts.headers, body).await {
        Ok(a) => a,
        Err(r) => return *r,
    };
    if let Err(f) = merge_strings(&mut args, command.args, given) {
        app.shared.metrics.count_error(f.code);
        return fail_response(f);
    }
    run(app, session, command, &parts.headers, args).await
}

/// A write's `Idempotency-Key` header is its `request_id` (docs/http.md, "Retries"); given
/// both, they must be the same. A read refuses the header rather than ignore it.
fn idempotency_key(
    command: &Command,
    headers: &axum::http::HeaderMap,
    args: &mut Map<String, Value>,
) -> Result<(), Fail> {
    let Some(key) = headers.get("idempotency-key") else {
        return Ok(());
    };
    if !command.class.writes() {
        return Err(Fail::invalid(
            "Idempotency-Key",
            format!(
                "{} only reads: a retry of it is always safe, send it without the header",
                command.name
            ),
        ));
    }
    let key = key
        .to_str()
        .map_err(|_| Fail::invalid("Idempotency-Key", "not visible ASCII"))?
        .trim()
        .to_owned();
    match args.get("request_id") {
        Some(Value::String(given)) if *given != key => Err(Fail::invalid(
            "Idempotency-Key",
            "the header and the body's request_id differ: send one, or the same in both",
        )),
        _ => {
            args.insert("request_id".into(), Value::String(key));
            Ok(())
        }
    }
}

async fn run(
    app: &Arc<App>,
    session: crate::commands::Session,
    command: &Command,
    headers: &axum::http::HeaderMap,
    mut args: Map<String, Value>,
) -> Response {
    if let Err(f) = idempotency_key(command, headers, &mut args) {
        app.shared.metrics.count_error(f.code);
        return fail_response(f);
    }
    let call = Call {
        tag: None,
        command: command.name.to_owned(),
        args,
    };
    let (reply, close) = dispatch::one(&app.shared, session, call).await;
    let mut response = reply_response(reply);
    if close {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// The path parameters, or the JSON `400` for ones that are not UTF-8 once decoded.
fn path_params(
    params: Result<RawPathParams, RawPathParamsRejection>,
) -> Result<Vec<(String, String)>, Fail> {
    let params = params.map_err(|e| Fail::new(Code::BadRequest, format!("the path: {e}")))?;
    Ok(params
        .iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect())
}

/// Path and query values into the arguments, each read as its declaration says (module doc).
fn merge_strings(
    args: &mut Map<String, Value>,
    declared: &[Arg],
    given: Vec<(String, String)>,
) -> Result<(), Fail> {
    let mut lists: Map<String, Value> = Map::new();
    for (name, text) in given {
        let ty = declared
            .iter()
            .find(|a| a.name == name)
            .map(|a| a.ty)
            // The dispatch's own argument (`crate::route`), which no command declares.
            .or((name == route::MIN_SEQ).then_some(Ty::Int));
        let value = typed(ty, &text);
        if ty == Some(Ty::StrList) {
            if let (Some(Value::Array(have)), Value::Array(more)) = (lists.get_mut(&name), &value) {
                have.extend(more.iter().cloned());
                continue;
            }
            lists.insert(name, value);
            continue;
        }
        if args.get(&name).is_some_and(|v| *v != value) || lists.contains_key(&name) {
            return Err(Fail::invalid(
                &name,
                "is given twice (in the path or query and in the body) with different values",
            ));
        }
        args.insert(name, value);
    }
    for (name, value) in lists {
        if args.contains_key(&name) {
            return Err(Fail::invalid(
                &name,
                "is given in the query and in the body",
            ));
        }
        args.insert(name, value);
    }
    Ok(())
}

/// A path or query value as its argument's type: a number, a boolean, a list split at commas,
/// JSON for objects; anything that does not read as its type stays text, which the argument
/// check then refuses naming the type.
fn typed(ty: Option<Ty>, text: &str) -> Value {
    match ty {
        Some(Ty::Int) => text
            .parse::<u64>()
            .map_or_else(|_| json!(text), |n| json!(n)),
        Some(Ty::Num) => text
            .parse::<f64>()
            .ok()
            .filter(|n| n.is_finite())
            .map_or_else(|| json!(text), |n| json!(n)),
        Some(Ty::Bool) => match text {
            "true" => json!(true),
            "false" => json!(false),
            _ => json!(text),
        },
        Some(Ty::StrList) => json!(
            text.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
        ),
        Some(Ty::Object | Ty::Messages) => {
            serde_json::from_str(text).unwrap_or_else(|_| json!(text))
        }
        Some(Ty::Str) | None => json!(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_and_query_values_are_read_as_declared() {
        let command = commands::find("LIST_ITEMS").unwrap();
        let mut args = Map::new();
        merge_strings(
            &mut args,
            command.args,
            vec![
                ("user_id".into(), "ada".into()),
                ("limit".into(), "5".into()),
                ("offset".into(), "x".into()),
            ],
        )
        .unwrap();
        assert_eq!(args["limit"], 5);
        assert_eq!(
            args["offset"], "x",
            "left as text: the check names the type"
        );
        let search = commands::find("SEARCH_MEMORIES").unwrap();
        let mut args = Map::new();
        merge_strings(
            &mut args,
            search.args,
            vec![("tags".into(), "a, b".into()), ("tags".into(), "c".into())],
        )
        .unwrap();
        assert_eq!(args["tags"], json!(["a", "b", "c"]));
        let mut args = Map::new();
        args.insert("user_id".into(), json!("bob"));
        let twice = merge_strings(
            &mut args,
            command.args,
            vec![("user_id".into(), "ada".into())],
        );
        assert_eq!(twice.unwrap_err().code, Code::Invalid);
    }

    #[test]
    fn every_route_names_a_command_and_its_path_parameters_are_its_arguments() {
        for r in ROUTES {
            let c = commands::find(r.command).unwrap_or_else(|| panic!("{}", r.command));
            for part in r.path.split('/') {
                if let Some(name) = part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                    assert!(
                        c.args.iter().any(|a| a.name == name),
                        "{} {}: {name} is not an argument of {}",
                        r.method,
                        r.path,
                        c.name
                    );
                }
            }
            match r.method {
                "GET" => assert!(!c.class.writes(), "{} {} writes", r.method, r.path),
                "POST" => {}
                _ => assert!(c.class.writes(), "{} {} only reads", r.method, r.path),
            }
        }
    }
}
